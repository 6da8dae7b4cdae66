/* Hot-set policies and the migrator on traces small enough to follow by hand,
 * and the synthetic trace generator against its defining numbers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "og_policy.h"

/* 1 layer, 4 experts, k = 1, one token per step; experts 0 and 1 start resident */
static og_trace hand_trace(const uint16_t *seq, uint32_t n) {
    og_trace t = {1, 4, 1, n, 1, malloc(n * sizeof(uint16_t))};
    memcpy(t.sel, seq, n * sizeof(uint16_t));
    return t;
}

static og_sim_result sim(const og_trace *t, og_policy_kind k, uint32_t delay, const uint64_t *profile) {
    og_migrator_params mp = {.slots_per_layer = 2, .swaps_per_step = 1, .copy_delay_steps = delay, .min_residency = 0,
                             .decay = 0.5};
    og_sim_result r;
    char err[256];
    assert_int_equal(og_policy_simulate(t, k, &mp, profile, &r, err, sizeof err), OG_OK);
    return r;
}

/* 2 2 2 3 3 3: LRU swaps 2 in after step 0 and 3 after step 3. With copies
 * landing at once, steps 1, 2, 4, 5 hit; when a copy takes a step, 2, 5 only. */
static void test_lru_by_hand(void **state) {
    (void)state;
    const uint16_t seq[6] = {2, 2, 2, 3, 3, 3};
    og_trace t = hand_trace(seq, 6);
    og_sim_result r = sim(&t, OG_POLICY_LRU, 0, NULL);
    assert_int_equal(r.selections, 6);
    assert_int_equal(r.hits, 4);
    assert_int_equal(r.migrations, 2);
    r = sim(&t, OG_POLICY_LRU, 1, NULL);
    assert_int_equal(r.hits, 2);
    assert_int_equal(r.migrations, 2);
    /* static on a profile favouring 2 and 3 holds them from the start, never moves */
    const uint64_t prof[4] = {0, 1, 5, 5};
    r = sim(&t, OG_POLICY_STATIC, 0, prof);
    assert_int_equal(r.hits, 6);
    assert_int_equal(r.migrations, 0);
    og_trace_free(&t);
}

/* 2 0 1 2 0 1 with {0, 1} resident: LRU evicts what comes next every time (0
 * hits); Belady keeps 0 and 1 (needed sooner than 2) and misses only 2 (4 hits). */
static void test_oracle_by_hand(void **state) {
    (void)state;
    const uint16_t seq[6] = {2, 0, 1, 2, 0, 1};
    og_trace t = hand_trace(seq, 6);
    og_sim_result lru = sim(&t, OG_POLICY_LRU, 0, NULL), bel = sim(&t, OG_POLICY_ORACLE, 0, NULL);
    assert_int_equal(lru.hits, 0);
    assert_int_equal(lru.migrations, 5);
    assert_int_equal(bel.hits, 4);
    assert_int_equal(bel.migrations, 0);
    og_sim_result dec = sim(&t, OG_POLICY_DECAY, 0, NULL);
    assert_true(dec.hits <= bel.hits);
    og_trace_free(&t);
}

/* Hysteresis: 0 2 0 3 0 2 0 3 with {0, 1} resident. LRU alone ping-pongs 2
 * and 3 through the slot 0 does not need (swaps after steps 1, 3, 5); with a
 * minimum residency the experts copied in stay (2 swaps, then none). */
static void test_hysteresis(void **state) {
    (void)state;
    const uint16_t seq[8] = {0, 2, 0, 3, 0, 2, 0, 3};
    og_trace t = hand_trace(seq, 8);
    const uint64_t prof[4] = {9, 1, 0, 0};
    og_migrator_params mp = {.slots_per_layer = 2, .swaps_per_step = 1, .copy_delay_steps = 0, .min_residency = 0,
                             .decay = 0.5};
    og_sim_result loose, held;
    char err[256];
    assert_int_equal(og_policy_simulate(&t, OG_POLICY_LRU, &mp, prof, &loose, err, sizeof err), OG_OK);
    mp.min_residency = 100;
    assert_int_equal(og_policy_simulate(&t, OG_POLICY_LRU, &mp, prof, &held, err, sizeof err), OG_OK);
    assert_int_equal(loose.migrations, 3);
    assert_int_equal(loose.hits, 4);
    assert_int_equal(held.migrations, 2); /* 2 replaces 1, then 3 replaces 0; both stay */
    assert_int_equal(held.hits, 4);
    og_trace_free(&t);
}

/* The generator: deterministic, k distinct experts per token, and with no
 * locality the most popular expert's share is 1/zeta(2) = 0.6079 for skew 2, k 1. */
static void test_synth(void **state) {
    (void)state;
    og_trace_params p = {.n_layer = 3, .n_expert = 64, .k = 6, .n_step = 200, .tokens_per_step = 4, .skew = 0.8,
                         .locality = 0.7, .window = 4, .phase = 50, .seed = 3, .model_seed = 9};
    og_trace a, b;
    char err[256];
    assert_int_equal(og_trace_synth(&p, &a, err, sizeof err), OG_OK);
    assert_int_equal(og_trace_synth(&p, &b, err, sizeof err), OG_OK);
    const size_t n = (size_t)200 * 3 * 4 * 6;
    assert_memory_equal(a.sel, b.sel, n * sizeof *a.sel);
    for (size_t i = 0; i < n; i += 6)
        for (int x = 0; x < 6; x++) {
            assert_true(a.sel[i + x] < 64);
            for (int y = 0; y < x; y++) assert_int_not_equal(a.sel[i + x], a.sel[i + y]);
        }
    og_trace_free(&a);
    og_trace_free(&b);

    og_trace_params z = {.n_layer = 1, .n_expert = 1000, .k = 1, .n_step = 40000, .tokens_per_step = 1, .skew = 2.0,
                         .locality = 0.0, .window = 1, .phase = 1000000, .seed = 5, .model_seed = 1};
    assert_int_equal(og_trace_synth(&z, &a, err, sizeof err), OG_OK);
    uint32_t cnt[1000] = {0}, top = 0;
    for (uint32_t i = 0; i < 40000; i++) cnt[a.sel[i]]++;
    for (int e = 0; e < 1000; e++) top = cnt[e] > top ? cnt[e] : top;
    assert_true(top > 0.6079 * 40000 * 0.97 && top < 0.6079 * 40000 * 1.03);
    og_trace_free(&a);

    z.k = 1001;
    assert_int_equal(og_trace_synth(&z, &a, err, sizeof err), OG_ERR_INVALID_ARG);
}

/* On traces with locality, Belady's MIN is at least as good as every online
 * policy, and more temporal locality helps the online policies. */
static void test_oracle_bounds(void **state) {
    (void)state;
    double prev_decay = 0;
    for (int i = 0; i < 3; i++) {
        og_trace_params p = {.n_layer = 2, .n_expert = 128, .k = 6, .n_step = 400, .tokens_per_step = 2, .skew = 0.6,
                             .locality = 0.3 + 0.3 * i, .window = 8, .phase = 100, .seed = (uint64_t)i + 1,
                             .model_seed = 2};
        og_trace t;
        char err[256];
        assert_int_equal(og_trace_synth(&p, &t, err, sizeof err), OG_OK);
        og_migrator_params mp = {.slots_per_layer = 32, .swaps_per_step = 2, .copy_delay_steps = 1,
                                 .min_residency = 4, .decay = 0.85};
        og_sim_result r[OG_POLICY_COUNT];
        for (int k = 0; k < OG_POLICY_COUNT; k++)
            assert_int_equal(og_policy_simulate(&t, (og_policy_kind)k, &mp, NULL, &r[k], err, sizeof err), OG_OK);
        for (int k = 0; k < OG_POLICY_COUNT; k++) {
            assert_int_equal(r[k].selections, 400ull * 2 * 2 * 6);
            assert_true(r[k].device_share <= r[OG_POLICY_ORACLE].device_share);
        }
        assert_true(r[OG_POLICY_DECAY].device_share > prev_decay);
        prev_decay = r[OG_POLICY_DECAY].device_share;
        og_trace_free(&t);
    }
    assert_int_equal(og_policy_parse("decay"), OG_POLICY_DECAY);
    assert_int_equal(og_policy_parse("belady"), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lru_by_hand), cmocka_unit_test(test_oracle_by_hand), cmocka_unit_test(test_hysteresis),
        cmocka_unit_test(test_synth),       cmocka_unit_test(test_oracle_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
