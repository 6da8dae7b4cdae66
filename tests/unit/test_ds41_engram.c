/* Engram hash ids of deepseek41 (shared/spec/deepseek4.md §3.2, §4.3.2) for a
 * few n-grams computed by hand (the arithmetic is in the comments; a
 * calculator did the products), against BOTH the reference's hashing
 * (ref_ds41_engram.h, used by ref_deepseek41) and the fast path's
 * (og_ds41_engram_rows, src/model/deepseek41.c).
 *
 * The constants are the real model's layer 1: multipliers m_0..m_3 from §3.2
 * (76632096046245, 4839876093313, 35959672319349, 73987337458391); primes =
 * the 24 consecutive primes from 16,000,057 (the first prime above
 * 15,999,999), handed out in (n-gram size, head) order. Their sum is
 * 384,006,168, layer 1's table rows in §3.2, which confirms where the run of
 * primes starts. offsets = running sums from 0.
 * A small token map: raw ids 0, 1, 2, 3, 5, 9 -> compressed 0, 1, 7, 3, 11, 4;
 * pad_id = 2, the RAW pad token (the lead's decision 3), so a position before
 * the sequence start hashes as compressed id token_map[2] = 7. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "deepseek41.h"
#include "ref_ds41_engram.h"

#include <stdlib.h>
#include <string.h>

static const uint64_t mult_l1[4] = {76632096046245ull, 4839876093313ull, 35959672319349ull, 73987337458391ull};
static const uint64_t primes_l1[24] = {
    16000057, 16000079, 16000081, 16000097, 16000121, 16000129, 16000133, 16000183, /* 2-grams, heads 0..7 */
    16000189, 16000207, 16000211, 16000253, 16000277, 16000289, 16000307, 16000321, /* 3-grams */
    16000339, 16000381, 16000393, 16000399, 16000403, 16000409, 16000447, 16000463, /* 4-grams */
};
static const uint64_t offsets_l1[24] = {
    0,         16000057,  32000136,  48000217,  64000314,  80000435,  96000564,  112000697,
    128000880, 144001069, 160001276, 176001487, 192001740, 208002017, 224002306, 240002613,
    256002934, 272003273, 288003654, 304004047, 320004446, 336004849, 352005258, 368005705,
};
/* raw -> compressed; -1: ids our cases never use */
static const int32_t token_map[16] = {0, 1, 7, 3, -1, 11, -1, -1, -1, 4, -1, -1, -1, -1, -1, -1};

static ref_engram_hash layer1(void) {
    return (ref_engram_hash){4, 8, mult_l1, primes_l1, offsets_l1, token_map, 16, 2};
}

/* The fast path's hparams with the same constants: Engram on layer 1 of 2,
 * token_map an INT32 array key as the reader leaves it (map: its entries). */
typedef struct fast_ctx {
    og_ds41_hparams hp;
    og_gguf_kv map_kv;
} fast_ctx;

static fast_ctx *fast_layer1(const int32_t *map) {
    fast_ctx *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->map_kv = (og_gguf_kv){.key = "deepseek41.engram.token_map", .type = OG_GGUF_ARRAY, .arr_type = OG_GGUF_INT32,
                             .arr_n = 16, .data = map};
    og_ds41_hparams *hp = &f->hp;
    hp->n_layer = 2;
    hp->n_vocab = 16;
    hp->layer[1].has_engram = true;
    hp->layer[1].engram_slot = 0;
    hp->layer[0].engram_slot = -1;
    hp->n_engram_layer = 1;
    hp->engram_layer[0] = 1;
    hp->engram_n_head = 8;
    hp->engram_max_ngram = 4;
    hp->engram_n_bucket = 24;
    hp->engram_head_dim = 256;
    hp->engram_pad_id = 2;
    hp->engram_rows[0] = 384006168;
    memcpy(hp->engram_prime[0], primes_l1, sizeof primes_l1);
    memcpy(hp->engram_offset[0], offsets_l1, sizeof offsets_l1);
    memcpy(hp->engram_mult[0], mult_l1, sizeof mult_l1);
    hp->token_map = &f->map_kv;
    return f;
}

/* the fast path's rows of position p of tok[0..p] (its context: tok_p,
 * tok_{p-1}, ..., -1 before the start) equal want[24] */
static void check_fast(const int32_t *map, const int *tok, int p, const uint64_t *want) {
    fast_ctx *f = fast_layer1(map);
    int32_t ctx[4];
    for (int s = 0; s < 4; s++) ctx[s] = p - s >= 0 ? tok[p - s] : -1;
    uint64_t rows[24];
    assert_int_equal(og_ds41_engram_rows(&f->hp, 1, ctx, rows), OG_OK);
    for (int b = 0; b < 24; b++) assert_int_equal(rows[b], want[b]);
    free(f);
}

/* the reference's rows of position p of tok[0..p] (layer 1's constants,
 * token_map) into rows[24], each equal to want[b]; then the fast path's */
static void check_both(const int *tok, int p, const uint64_t *want, uint64_t *rows) {
    const ref_engram_hash e = layer1();
    assert_int_equal(ref_engram_rows(&e, tok, p, rows), 0);
    for (int b = 0; b < 24; b++) assert_int_equal(rows[b], want[b]);
    check_fast(token_map, tok, p, want);
}

static void test_primes_sum_to_rows(void **state) {
    (void)state;
    uint64_t sum = 0;
    for (int b = 0; b < 24; b++) {
        assert_int_equal(offsets_l1[b], sum); /* offsets are the running sums */
        sum += primes_l1[b];
    }
    assert_int_equal(sum, 384006168ull); /* layer 1's table rows (§3.2) */
}

/* Position 0 of [5]: c_0 = token_map[5] = 11; c_1 = c_2 = c_3 = token_map[pad 2] = 7.
 *   c_0 m_0 = 11 * 76632096046245 = 842953056508695
 *   c_1 m_1 =  7 * 4839876093313  =  33879132653191
 *   h_1 = 842953056508695 XOR 33879132653191 = 809761672273296 (0x2e07954d41d90)
 *   c_2 m_2 =  7 * 35959672319349 = 251717706235443
 *   h_2 = 809761672273296 XOR 251717706235443 = 567995678237603
 *   c_3 m_3 =  7 * 73987337458391 = 517911362208737
 *   h_3 = 567995678237603 XOR 517911362208737 = 1077106635677762
 * bucket 0 (2-gram, head 0): 809761672273296 = 50609924 * 16000057 + 3507628 -> 3507628 + 0
 * bucket 1: 809761672273296 = 50609854 * 16000079 + 10094830 -> 10094830 + 16000057 = 26094887
 * bucket 7: 809761672273296 = 50609525 * 16000183 + 10730221 -> 10730221 + 112000697 = 122730918
 * bucket 8 (3-gram, head 0): 567995678237603 = 35499310 * 16000189 + 8868013 -> + 128000880 = 136868893
 * bucket 16 (4-gram, head 0): 1077106635677762 = 67317738 * 16000339 + 6964580 -> + 256002934 = 262967514
 * bucket 23: 1077106635677762 = 67317216 * 16000463 + 11806754 -> + 368005705 = 379812459 */
static void test_pad_before_start(void **state) {
    (void)state;
    const int tok[1] = {5};
    uint64_t rows[24];
    const uint64_t want[24] = {3507628,   26094887,  36875744,  59123204,  76497369,  87622947,  109186021, 122730918,
                               136868893, 153889782, 171894808, 184949586, 196984488, 219003188, 236032173, 251055759,
                               262967514, 283690294, 291899593, 304004895, 322742201, 350848424, 352857072, 379812459};
    check_both(tok, 0, want, rows);
    /* the hand-worked buckets, once more by the arithmetic above */
    assert_int_equal(rows[0], 809761672273296ull - 50609924ull * 16000057ull);
    assert_int_equal(rows[8], 567995678237603ull - 35499310ull * 16000189ull + 128000880ull);
    assert_int_equal(rows[23], 1077106635677762ull - 67317216ull * 16000463ull + 368005705ull);
}

/* Position 3 of [5, 9, 3, 1]: every n-gram inside the sequence.
 *   c = [token_map[1], token_map[3], token_map[9], token_map[5]] = [1, 3, 4, 11]
 *   c_0 m_0 = 76632096046245; c_1 m_1 = 3 * 4839876093313 = 14519628279939
 *   h_1 = 76632096046245 XOR 14519628279939 = 79743879072806
 *   c_2 m_2 = 4 * 35959672319349 = 143838689277396; h_2 = h_1 XOR it = 222465824356850
 *   c_3 m_3 = 11 * 73987337458391 = 813860712042301; h_3 = h_2 XOR it = 613971661698767
 * bucket 0: 79743879072806 mod 16000057 = 10986288 -> 10986288 */
static void test_inside_sequence(void **state) {
    (void)state;
    const int tok[4] = {5, 9, 3, 1};
    uint64_t rows[24];
    const uint64_t want[24] = {10986288,  29339470,  35371615,  51628709,  76014686,  84143433,  96207887,  119013398,
                               140511369, 146243581, 170628896, 178673155, 196985769, 222142749, 227878127, 241228428,
                               269453016, 273850025, 293394023, 319166685, 325681627, 351454593, 365350293, 375413838};
    check_both(tok, 3, want, rows);
    assert_int_equal(rows[0], 79743879072806ull % 16000057ull);
    assert_int_equal(rows[0], 79743879072806ull - 4983974ull * 16000057ull); /* the quotient, by hand */
}

/* Position 2 of [5, 9, 3]: the 4-gram reaches one token before the start.
 *   c = [token_map[3], token_map[9], token_map[5], pad token_map[2]] = [3, 4, 11, 7]
 *   h_1 = 3 m_0 XOR 4 m_1 = 229896288138735 XOR 19359504373252 = 211714422825963 */
static void test_pad_in_4gram(void **state) {
    (void)state;
    const ref_engram_hash e = layer1();
    const int tok[3] = {5, 9, 3};
    uint64_t rows[24];
    assert_int_equal(ref_engram_rows(&e, tok, 2, rows), 0);
    assert_int_equal(3 * mult_l1[0], 229896288138735ull);
    assert_int_equal(4 * mult_l1[1], 19359504373252ull);
    assert_int_equal(229896288138735ull ^ 19359504373252ull, 211714422825963ull);
    assert_int_equal(rows[0], 4596035);  /* 211714422825963 mod 16000057 */
    assert_int_equal(rows[16], 270832848);
    assert_int_equal(rows[23], 370189916);
    check_fast(token_map, tok, 2, rows);
    /* a pad taken as the compressed id 2 (not the raw id's map entry 7)
     * would give another 4-gram: the raw-id reading is what is tested */
    int32_t map2[16];
    for (int i = 0; i < 16; i++) map2[i] = token_map[i];
    map2[2] = 2;
    ref_engram_hash e2 = e;
    e2.token_map = map2;
    uint64_t rows2[24];
    assert_int_equal(ref_engram_rows(&e2, tok, 2, rows2), 0);
    assert_int_equal(rows2[0], rows[0]);      /* the 2-gram has no pad */
    assert_true(rows2[16] != rows[16]);       /* the 4-gram does */
    check_fast(map2, tok, 2, rows2);
}

/* A token the map does not cover is an error, not a read past the map. */
static void test_bad_token(void **state) {
    (void)state;
    const ref_engram_hash e = layer1();
    uint64_t rows[24];
    const int tok_neg[2] = {5, 4}; /* token_map[4] = -1 */
    assert_int_equal(ref_engram_rows(&e, tok_neg, 1, rows), -1);
    const int tok_big[2] = {5, 16}; /* outside the 16 entries */
    assert_int_equal(ref_engram_rows(&e, tok_big, 1, rows), -1);
    fast_ctx *f = fast_layer1(token_map);
    const int32_t ctx_big[4] = {16, 5, -1, -1};
    assert_int_equal(og_ds41_engram_rows(&f->hp, 1, ctx_big, rows), OG_ERR_INVALID_ARG);
    const int32_t ctx_ok[4] = {5, -1, -1, -1};
    assert_int_equal(og_ds41_engram_rows(&f->hp, 0, ctx_ok, rows), OG_ERR_INVALID_ARG); /* layer 0 has no Engram */
    free(f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_primes_sum_to_rows), cmocka_unit_test(test_pad_before_start),
        cmocka_unit_test(test_inside_sequence),    cmocka_unit_test(test_pad_in_4gram),
        cmocka_unit_test(test_bad_token),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
