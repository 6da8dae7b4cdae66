/* sampler: each control against its definition (openai-api.md §9), computed
 * here directly on small vocabularies; draws checked against the exact
 * distribution with a fixed seed (deterministic, cannot flake). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "og_sampler.h"

static og_sampler *make(og_sampler_params p, int32_t n) {
    og_sampler *s;
    char err[256];
    if (og_sampler_create(&p, n, &s, err, sizeof err)) fail_msg("%s", err);
    return s;
}

static void test_greedy_and_logprobs(void **state) {
    (void)state;
    og_sampler_params p = og_sampler_defaults();
    p.temperature = 0;
    og_sampler *s = make(p, 5);
    float l[5] = {1, 3, 3, -2, 0.5f}, lp;
    og_token_logprob top[3];
    assert_int_equal(og_sampler_sample(s, l, &lp, top, 3), 1); /* tie 3/3: lowest id */
    double z = exp(1) + 2 * exp(3) + exp(-2) + exp(0.5);
    assert_true(fabs(lp - (3 - log(z))) < 1e-6);
    assert_int_equal(top[0].id, 1);
    assert_int_equal(top[1].id, 2);
    assert_int_equal(top[2].id, 0);
    assert_true(fabs(top[2].logprob - (1 - log(z))) < 1e-6);
    og_sampler_free(s);
}

/* 200k draws at temperature 0.7 match softmax(l / 0.7) within 4 sigma. */
static void test_distribution(void **state) {
    (void)state;
    og_sampler_params p = og_sampler_defaults();
    p.temperature = 0.7f;
    p.seed = 1234;
    og_sampler *s = make(p, 4);
    const float base[4] = {0.1f, 1.0f, -0.5f, 0.6f};
    long cnt[4] = {0};
    const int N = 200000;
    for (int i = 0; i < N; i++) {
        float l[4];
        memcpy(l, base, sizeof l);
        cnt[og_sampler_sample(s, l, NULL, NULL, 0)]++;
    }
    double z = 0;
    for (int i = 0; i < 4; i++) z += exp(base[i] / 0.7);
    for (int i = 0; i < 4; i++) {
        double pr = exp(base[i] / 0.7) / z, sd = sqrt(N * pr * (1 - pr));
        if (fabs(cnt[i] - N * pr) > 4 * sd) fail_msg("token %d: %ld draws, expected %.0f +- %.0f", i, cnt[i], N * pr, sd);
    }
    og_sampler_free(s);
}

static void test_seed_reproducible(void **state) {
    (void)state;
    og_sampler_params p = og_sampler_defaults();
    p.seed = 77;
    int32_t a[50], b[50], c[50];
    for (int run = 0; run < 3; run++) {
        p.seed = run == 2 ? 78 : 77;
        og_sampler *s = make(p, 100);
        for (int i = 0; i < 50; i++) {
            float l[100];
            for (int j = 0; j < 100; j++) l[j] = (float)((j * 37) % 11) * 0.3f;
            (run == 0 ? a : run == 1 ? b : c)[i] = og_sampler_sample(s, l, NULL, NULL, 0);
        }
        og_sampler_free(s);
    }
    assert_memory_equal(a, b, sizeof a);
    assert_true(memcmp(a, c, sizeof a) != 0);
}

static void test_truncations(void **state) {
    (void)state;
    const float base[6] = {2.0f, 1.9f, 1.0f, 0.0f, -1.0f, -5.0f};
    /* top_k = 2: only ids 0 and 1 ever */
    og_sampler_params p = og_sampler_defaults();
    p.top_k = 2;
    p.seed = 5;
    og_sampler *s = make(p, 6);
    for (int i = 0; i < 2000; i++) {
        float l[6];
        memcpy(l, base, sizeof l);
        int32_t t = og_sampler_sample(s, l, NULL, NULL, 0);
        assert_true(t == 0 || t == 1);
    }
    og_sampler_free(s);
    /* top_p: p = softmax; smallest prefix with mass >= 0.6 is {0, 1} (0.40 + 0.36) */
    p = og_sampler_defaults();
    p.top_p = 0.6f;
    s = make(p, 6);
    bool seen1 = false;
    for (int i = 0; i < 2000; i++) {
        float l[6];
        memcpy(l, base, sizeof l);
        int32_t t = og_sampler_sample(s, l, NULL, NULL, 0);
        assert_true(t == 0 || t == 1);
        seen1 |= t == 1;
    }
    assert_true(seen1);
    og_sampler_free(s);
    /* min_p = 0.3: keep p >= 0.3 * p_max, i.e. logits >= 2 + ln 0.3 = 0.796: ids 0, 1, 2 */
    p = og_sampler_defaults();
    p.min_p = 0.3f;
    s = make(p, 6);
    for (int i = 0; i < 3000; i++) {
        float l[6];
        memcpy(l, base, sizeof l);
        assert_true(og_sampler_sample(s, l, NULL, NULL, 0) <= 2);
    }
    og_sampler_free(s);
}

static void test_penalties_and_bias(void **state) {
    (void)state;
    og_sampler_params p = og_sampler_defaults();
    p.temperature = 0;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    int32_t ids[2] = {3, 2};
    float vals[2] = {-100, 0.75f};
    p.bias_ids = ids;
    p.bias_values = vals;
    p.n_bias = 2;
    og_sampler *s = make(p, 4);
    og_sampler_accept(s, 0);
    og_sampler_accept(s, 0);
    og_sampler_accept(s, 1);
    float l[4] = {5, 4, 3, 9};
    og_sampler_sample(s, l, NULL, NULL, 0);
    /* logit -= count * freq + (count > 0) * presence; bias added */
    assert_true(fabsf(l[0] - (5 - 2 * 0.25f - 0.5f)) < 1e-6f);
    assert_true(fabsf(l[1] - (4 - 0.25f - 0.5f)) < 1e-6f);
    assert_true(fabsf(l[2] - (3 + 0.75f)) < 1e-6f);
    assert_true(fabsf(l[3] - (9 - 100)) < 1e-6f); /* banned despite the highest logit */
    og_sampler_free(s);
    /* llama.cpp repetition penalty: positive / r, negative * r, recent tokens only */
    p = og_sampler_defaults();
    p.temperature = 0;
    p.repeat_penalty = 2.0f;
    p.repeat_last_n = 2;
    s = make(p, 4);
    og_sampler_accept(s, 0);
    og_sampler_accept(s, 1);
    og_sampler_accept(s, 3); /* window now {1, 3} */
    float r[4] = {4, 4, 1, -1};
    og_sampler_sample(s, r, NULL, NULL, 0);
    assert_true(r[0] == 4 && r[1] == 2 && r[2] == 1 && r[3] == -2);
    og_sampler_free(s);
}

static void test_bad_params(void **state) {
    (void)state;
    og_sampler *s;
    char err[256];
    og_sampler_params p = og_sampler_defaults();
    p.temperature = -1;
    assert_int_equal(og_sampler_create(&p, 10, &s, err, sizeof err), OG_ERR_INVALID_ARG);
    p = og_sampler_defaults();
    p.top_p = 0;
    assert_int_equal(og_sampler_create(&p, 10, &s, err, sizeof err), OG_ERR_INVALID_ARG);
    p = og_sampler_defaults();
    int32_t id = 10;
    float v = 1;
    p.bias_ids = &id;
    p.bias_values = &v;
    p.n_bias = 1;
    assert_int_equal(og_sampler_create(&p, 10, &s, err, sizeof err), OG_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "outside the vocabulary"));
    assert_null(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_and_logprobs), cmocka_unit_test(test_distribution),
        cmocka_unit_test(test_seed_reproducible), cmocka_unit_test(test_truncations),
        cmocka_unit_test(test_penalties_and_bias), cmocka_unit_test(test_bad_params),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
