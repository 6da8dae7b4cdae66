/* The antirez dialect's FP8 Engram rows (spec deepseek4.md §3.2: I8
 * [ED + ED/32, rows], ED E4M3 bytes then one E8M0 scale per 32 columns, value
 * = e4m3(code) * 2^(scale - 127)); issue 14.
 *
 * Without arguments (cmocka): og_ds41_engram_fp8_decode against ref_e4m3
 * below, written from the OCP FP8 E4M3 definition in double (sign, 4 exponent
 * bits bias 7, 3 mantissa bits, exponent 0 subnormal, S.1111.111 NaN, no
 * infinities), on every code at hand-picked scales incl. 0, 127 and 254; the
 * NaN codes 0x7f / 0xff, the NaN scale 255 and scale-254 overflow are refused
 * naming the byte.
 *
 * `test_ds41_fp8 convert IN.gguf AZ.gguf VC.gguf NAN.gguf`: IN, a vcruz305
 * file (make-model --arch deepseek41), rewritten as the same model twice:
 * AZ in the antirez dialect (raw HF key names via og_ds41_key_name, the
 * source-layer keys, scoring_func, engram.rows / engram.encoding, antirez
 * tensor names, the Engram tables quantized here to FP8 rows) and VC in
 * vcruz305 with F32 tables holding ref_e4m3's decode of AZ's rows; NAN is AZ
 * with the first table's codes all 0x7f. tests/cli/ds41_antirez.sh runs both
 * and compares. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "deepseek41.h"
#include "og_gguf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* E4M3 from its definition; NAN for the two NaN codes. */
static double ref_e4m3(uint8_t b) {
    const int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
    if (e == 15 && m == 7) return NAN;
    const double mag = e == 0 ? m / 8.0 * pow(2.0, -6) : (1.0 + m / 8.0) * pow(2.0, e - 7);
    return s ? -mag : mag;
}

/* value of (code, scale) in double: e4m3 * 2^(scale - 127) */
static double ref_value(uint8_t code, uint8_t scale) { return ref_e4m3(code) * pow(2.0, (int)scale - 127); }

enum { ED = 64, ROW = ED + ED / 32 };

static void test_definition_points(void **state) {
    (void)state;
    /* a few codes by hand from the format's table: max normal 448, min normal
     * 2^-6, min subnormal 2^-9, 1.0 = 0.0111.000 */
    assert_true(ref_e4m3(0x7e) == 448.0);
    assert_true(ref_e4m3(0x08) == 1.0 / 64);
    assert_true(ref_e4m3(0x01) == 1.0 / 512);
    assert_true(ref_e4m3(0x38) == 1.0);
    assert_true(ref_e4m3(0xb8) == -1.0);
    assert_true(ref_e4m3(0x80) == 0.0 && signbit(ref_e4m3(0x80)));
}

/* every code except NaN, each block at its own scale */
static void test_all_codes(void **state) {
    (void)state;
    static const uint8_t scales[] = {0, 1, 100, 127, 130, 200, 246}; /* 448 * 2^119 = 1.75 * 2^127 < FLT_MAX */
    uint8_t row[ROW];
    float y[ED];
    for (size_t k = 0; k < sizeof scales; k++)
        for (int base = 0; base < 256; base += ED) {
            for (int i = 0; i < ED; i++) row[i] = (uint8_t)((base + i) & 0x7f) == 0x7f ? 0x00 : (uint8_t)(base + i);
            row[ED] = scales[k];
            row[ED + 1] = scales[(k + 3) % sizeof scales];
            uint32_t bad = 7;
            assert_int_equal(og_ds41_engram_fp8_decode(row, ED, y, &bad), OG_OK);
            for (int i = 0; i < ED; i++) {
                const double want = ref_value(row[i], row[ED + i / 32]);
                if ((double)y[i] != want || !signbit(y[i]) != !signbit(want))
                    fail_msg("code 0x%02x scale %u: %.9g, want %.9g", row[i], row[ED + i / 32], (double)y[i], want);
            }
        }
}

/* scale 0: 2^-127 times the subnormals lands in float subnormals, exactly;
 * scale 254: 2^127 times codes below 2 is finite */
static void test_extreme_scales(void **state) {
    (void)state;
    uint8_t row[ROW] = {0};
    float y[ED];
    uint32_t bad;
    const uint8_t lo[] = {0x01, 0x02, 0x07, 0x08, 0x81, 0x3f}, hi[] = {0x01, 0x08, 0x38, 0x3f, 0xbf, 0x00};
    for (int i = 0; i < 6; i++) row[i] = lo[i], row[32 + i] = hi[i];
    row[ED] = 0;
    row[ED + 1] = 254;
    assert_int_equal(og_ds41_engram_fp8_decode(row, ED, y, &bad), OG_OK);
    for (int i = 0; i < 6; i++) {
        assert_true((double)y[i] == ref_value(lo[i], 0));
        assert_true((double)y[32 + i] == ref_value(hi[i], 254));
    }
    assert_true(y[0] == ldexpf(1.0f, -136) && y[0] > 0); /* 2^-9 * 2^-127 */
    assert_true((double)y[35] == 1.875 * pow(2.0, 127));
}

static void expect_bad(const uint8_t *row, uint32_t want_byte) {
    float y[ED];
    uint32_t bad = 12345;
    assert_int_equal(og_ds41_engram_fp8_decode(row, ED, y, &bad), OG_ERR_FORMAT);
    assert_int_equal(bad, want_byte);
}

/* NaN codes, the NaN scale and overflow are refused, naming the byte */
static void test_refused(void **state) {
    (void)state;
    uint8_t row[ROW];
    memset(row, 0x38, ED);
    row[ED] = row[ED + 1] = 127;
    row[5] = 0x7f;
    expect_bad(row, 5);
    row[5] = 0xff;
    expect_bad(row, 5);
    row[5] = 0x38;
    row[ED + 1] = 255;
    expect_bad(row, ED + 1);
    row[ED + 1] = 254;
    row[40] = 0x40; /* 2.0 * 2^127 = 2^128: past FLT_MAX */
    expect_bad(row, 40); /* its neighbours, 1.0 * 2^127, are finite */
}

/* ---- the converter ---------------------------------------------------------- */

static void die(const char *what, const char *err) {
    fprintf(stderr, "test_ds41_fp8 convert: %s: %s\n", what, err);
    exit(1);
}

/* The nearest E4M3 code to x (|x| <= 448), by search over ref_e4m3: ties to
 * the even code (the lower mantissa bit 0). */
static uint8_t nearest_code(double x) {
    uint8_t best = 0;
    double bd = INFINITY;
    for (int c = 0; c < 0x7f; c++) {
        const double d = fabs(fabs(x) - ref_e4m3((uint8_t)c));
        if (d < bd || (d == bd && !(c & 1))) bd = d, best = (uint8_t)c;
    }
    return (uint8_t)(best | (x < 0 ? 0x80 : 0));
}

/* F32 table [ed, rows] -> FP8 rows [ed + ed/32, rows] and their decode */
static void quantize(const float *x, int64_t ed, int64_t rows, uint8_t *q, float *dec) {
    const int64_t rb = ed + ed / 32;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t b = 0; b < ed / 32; b++) {
            const float *xb = x + r * ed + b * 32;
            double amax = 0;
            for (int i = 0; i < 32; i++) amax = fmax(amax, fabs(xb[i]));
            int s = 0; /* the smallest scale whose range holds amax */
            while (s < 254 && amax > 448.0 * pow(2.0, s - 127)) s++;
            q[r * rb + ed + b] = (uint8_t)s;
            for (int i = 0; i < 32; i++) {
                const uint8_t c = nearest_code(xb[i] / pow(2.0, s - 127));
                q[r * rb + b * 32 + i] = c;
                dec[r * ed + b * 32 + i] = (float)ref_value(c, (uint8_t)s);
            }
        }
}

static void copy_kv(og_gguf_writer *w, const og_gguf_kv *kv, const char *key) {
    og_status st = kv->type == OG_GGUF_ARRAY
                       ? og_gguf_writer_set_arr(w, key, kv->arr_type, kv->arr_type == OG_GGUF_STRING ? (const void *)kv->strs
                                                                                                  : kv->data, kv->arr_n)
                       : og_gguf_writer_set(w, key, kv->type, kv->type == OG_GGUF_STRING ? (const void *)&kv->str : kv->data);
    if (st) die(key, og_status_str(st));
}

static void put_ids(og_gguf_writer *w, const char *key, const og_ds41_hparams *hp, bool index) {
    int32_t ids[OG_DS4_MAX_LAYER];
    uint64_t n = 0;
    for (uint32_t i = 0; i < hp->n_layer; i++)
        if (index ? hp->layer[i].is_index_source : hp->layer[i].is_kv_source) ids[n++] = (int32_t)i;
    if (og_gguf_writer_set_arr(w, key, OG_GGUF_INT32, ids, n)) die(key, "cannot set");
}

/* writes g as dialect d; tables: the FP8 rows (antirez) or their decode */
static void write_as(const og_gguf *g, const og_ds41_hparams *hp, og_ds41_dialect d, uint8_t **q, float **dec,
                     const char *path) {
    og_gguf_writer *w;
    char err[512] = "", key[160];
    if (og_gguf_writer_create(32, &w)) die(path, "out of memory");
    const size_t pre = strlen("deepseek41.");
    for (uint64_t i = 0; i < og_gguf_n_kv(g); i++) {
        const og_gguf_kv *kv = og_gguf_kv_at(g, i);
        if (!strcmp(kv->key, "general.alignment")) continue;
        if (d == OG_DS41_ANTIREZ && !strncmp(kv->key, "deepseek41.", pre)) {
            if (!strcmp(kv->key + pre, "expert_gating_func")) continue; /* antirez: scoring_func */
            snprintf(key, sizeof key, "deepseek41.%s", og_ds41_key_name(d, kv->key + pre));
            copy_kv(w, kv, key);
        } else {
            copy_kv(w, kv, kv->key);
        }
    }
    if (d == OG_DS41_ANTIREZ) {
        uint64_t rows[OG_DS41_MAX_ENGRAM_LAYER];
        for (uint32_t s = 0; s < hp->n_engram_layer; s++) rows[s] = hp->engram_rows[s];
        if (og_gguf_writer_set_str(w, "deepseek41.scoring_func", "sqrtsoftplus") ||
            og_gguf_writer_set_str(w, "deepseek41.engram.encoding", "e4m3_e8m0_32_row264") ||
            og_gguf_writer_set_arr(w, "deepseek41.engram.rows", OG_GGUF_UINT64, rows, hp->n_engram_layer))
            die(path, "cannot set the antirez keys");
        put_ids(w, "deepseek41.kv_source_layer_ids", hp, false);
        put_ids(w, "deepseek41.index_source_layer_ids", hp, true);
    }
    for (uint64_t i = 0; i < og_gguf_n_tensors(g); i++) {
        const og_gguf_tensor *t = og_gguf_tensor_at(g, i);
        int il;
        const og_ds41_tensor_id id = og_ds41_tensor_lookup(t->name, &il);
        char name[96];
        if (id == OG_DS41_N_TENSOR || og_ds41_tensor_name(id, d, il, name, sizeof name)) die(t->name, "unknown tensor");
        int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        og_ggml_type type = t->type;
        const void *data = t->data;
        if (id == OG_DS41_ENGRAM_EMBD) {
            const int32_t s = hp->layer[il].engram_slot;
            if (d == OG_DS41_ANTIREZ) type = OG_TYPE_I8, ne[0] += ne[0] / 32, data = q[s];
            else data = dec[s];
        }
        if (og_gguf_writer_add_tensor(w, name, type, t->n_dims, ne, data)) die(name, "cannot add");
    }
    if (og_gguf_writer_write(w, path, NULL, NULL, err, sizeof err)) die(path, err);
    og_gguf_writer_free(w);
}

static int convert(const char *in, const char *az, const char *vc, const char *nan_path) {
    og_gguf *g;
    char err[512] = "";
    if (og_gguf_open(in, 0, &g, err, sizeof err)) die(in, err);
    og_ds41_hparams *hp = malloc(sizeof *hp);
    if (!hp || og_ds41_hparams_read(g, NULL, hp, err, sizeof err)) die(in, err);
    if (hp->dialect != OG_DS41_VCRUZ305) die(in, "not a vcruz305 file");
    uint8_t *q[OG_DS41_MAX_ENGRAM_LAYER] = {0};
    float *dec[OG_DS41_MAX_ENGRAM_LAYER] = {0};
    for (uint32_t s = 0; s < hp->n_engram_layer; s++) {
        char name[96];
        og_ds41_tensor_name(OG_DS41_ENGRAM_EMBD, OG_DS41_VCRUZ305, (int)hp->engram_layer[s], name, sizeof name);
        const og_gguf_tensor *t = og_gguf_find_tensor(g, name);
        if (!t || t->type != OG_TYPE_F32) die(name, "missing or not F32 (make-model's default tiny tables are F32)");
        const int64_t ed = t->ne[0], rows = t->ne[1];
        q[s] = malloc((size_t)(rows * (ed + ed / 32)));
        dec[s] = malloc((size_t)(rows * ed) * sizeof(float));
        if (!q[s] || !dec[s]) die(name, "out of memory");
        quantize(t->data, ed, rows, q[s], dec[s]);
    }
    write_as(g, hp, OG_DS41_ANTIREZ, q, dec, az);
    write_as(g, hp, OG_DS41_VCRUZ305, q, dec, vc);
    {
        const int64_t rb = hp->engram_head_dim + hp->engram_head_dim / 32;
        for (uint64_t r = 0; r < hp->engram_rows[0]; r++) memset(q[0] + r * rb, 0x7f, (size_t)hp->engram_head_dim);
    }
    write_as(g, hp, OG_DS41_ANTIREZ, q, dec, nan_path);
    for (uint32_t s = 0; s < hp->n_engram_layer; s++) free(q[s]), free(dec[s]);
    free(hp);
    og_gguf_close(g);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 6 && !strcmp(argv[1], "convert")) return convert(argv[2], argv[3], argv[4], argv[5]);
    if (argc != 1) {
        fprintf(stderr, "usage: test_ds41_fp8 [convert IN.gguf AZ.gguf VC.gguf NAN.gguf]\n");
        return 2;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_definition_points), cmocka_unit_test(test_all_codes),
        cmocka_unit_test(test_extreme_scales), cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
