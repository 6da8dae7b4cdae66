/* deepseek41's forward pass (src/model/deepseek41.c) on make-model --arch
 * deepseek41 --preset tiny files (tests/cli/deepseek41_unit.sh writes them, F32
 * with F16 Engram tables: window 8, ratio-2 and ratio-1 sources, reuse and reindex layers, top_k 4,
 * candidate blocks 2 x 3, Engram before layers 1 and 4):
 *  - against ref_deepseek41's double-precision forward (run here on the same
 *    tokens) at every position, on prompts that cross the window, make many
 *    compression groups and more positions than the candidate blocks hold
 *    (teacher-forced): the next token's and the reference's top-5 log-probs,
 *    for every CPU tier (fork and canonical numerics), with each QAT option
 *    (decision 2: kv-fp8, kv-fp4, indexer-fp4, all) and without;
 *  - every tier gives the same bits at canonical numerics;
 *  - prefill of N tokens == N single-token decode steps == uneven chunks, bitwise;
 *  - batch invariance: sequences interleaved in one batch give bitwise what
 *    each gives alone;
 *  - og_kv_fork after a prompt: the fork and the original decode bitwise what
 *    an unforked run decodes (host memory and a device's);
 *  - a context below the window: rings of that size, the same bits, then a
 *    clear error;
 *  - a quantized tiny file (Q8_0, Q2_K Engram tables of 256-wide rows) runs with finite output;
 *  - the new QAT kinds against brute-force double references; bad input.
 * usage: test_deepseek41 MODEL.gguf QUANT.gguf [REF_DEEPSEEK41] (the reference
 * is built in the plain build only) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include <cmocka.h>
#include <jansson.h>

#include "ds_fwd_fixture.h"
#include "kernels_fixture.h"
#include "og_device.h"
#include "og_moe.h"
#include "og_model.h"

static const char *g_model, *g_quant;
static const char *g_ref; /* the ref_deepseek41 binary, or NULL (sanitizer builds) */
static const og_dispatcher *g_host;

/* The prompts: past the window (8), many ratio-2 and ratio-1 rows, more than
 * top_k (4) and than the candidate blocks hold (6). */
#define N_PROMPT 3
static int g_len[N_PROMPT] = {120, 64, 97};
static const int g_len_sanitized[N_PROMPT] = {40, 20, 33};

static int32_t *prompt_new(int which, int32_t V) {
    int32_t *t = malloc((size_t)g_len[which] * sizeof *t);
    assert_non_null(t);
    fx_prompt(which, g_len[which], V, t);
    return t;
}

static og_model *load(const char *opts) { return fx_load(g_model, opts); }

/* The rounding sets (decision 2): our options and ref_deepseek41's flags. */
static const struct {
    const char *name, *opts, *ref_flags;
} g_sets[] = {
    {"none", NULL, ""},
    {"kv-fp8", "kv-fp8=on", "--window-fp8"},
    {"kv-fp4", "kv-fp4=on", "--comp-fp4"},
    {"indexer-fp4", "indexer-fp4=on", "--indexer-fp4"},
    {"spec (all three)", "kv-fp8=on,kv-fp4=on,indexer-fp4=on", "--rounding spec"},
};

/* Every tier (fork and canonical numerics) against the reference of the same
 * rounding set, every position of every prompt. Without rounding every
 * position is within 1e-5. With a round trip on, a float vs double difference
 * of ~1e-7 becomes a whole rounding step whenever a value lies that close to
 * a midpoint (measured with kv-fp8: three flips in 281 positions, each carried
 * 15 to 35 positions by the streams and the compressed rows; kv-fp4 and
 * indexer-fp4 alone: every position within 1e-5), so there the test holds the
 * median within 1e-5, every position within 0.1 (a flipped step
 * moves a log-prob by ~0.02; a wrong formula by whole units, as the option
 * itself does: 4 to 10 from the reference without it), the argmax the
 * reference's at >= 97%, and the option visible (somewhere > 1e-3 from the
 * reference without it); the rounding itself is exact against brute force
 * (test_qat_kinds). The round trips are scalar code on every tier: the sets
 * with one run canonical on the scalar tier and fork on the best one. */
static void test_against_reference(void **state) {
    (void)state;
    if (!g_ref) {
        print_message("the double reference is compared in the plain build\n");
        return;
    }
    enum { N_SET = sizeof g_sets / sizeof g_sets[0] };
    og_cpu_features f;
    og_cpu_detect(&f);
    og_model *m0 = load(NULL);
    const int64_t V = og_model_get_info(m0)->n_vocab;
    og_model_free(m0);
    int32_t *toks[N_PROMPT];
    json_t *ref0[N_PROMPT];
    int n_all = 0;
    for (int p = 0; p < N_PROMPT; p++) {
        toks[p] = prompt_new(p, (int32_t)V);
        n_all += g_len[p];
        ref0[p] = fx_run_ref(g_ref, g_model, toks[p], g_len[p], g_sets[0].ref_flags);
    }
    int best = OG_ISA_SCALAR;
    for (int isa = 0; isa <= OG_ISA_AVX512; isa++) {
        og_isa got;
        char note[128], err[256];
        if (!og_isa_choose(&f, og_isa_name((og_isa)isa), &got, note, sizeof note, err, sizeof err)) best = isa;
    }
    double *lf = malloc((size_t)V * sizeof *lf), *d = malloc((size_t)n_all * sizeof *d);
    double *dx = malloc((size_t)n_all * sizeof *dx);
    for (int si = 0; si < N_SET; si++) {
        json_t *ref[N_PROMPT];
        for (int p = 0; p < N_PROMPT; p++)
            ref[p] = si ? fx_run_ref(g_ref, g_model, toks[p], g_len[p], g_sets[si].ref_flags) : json_incref(ref0[p]);
        og_model *m = load(g_sets[si].opts);
        int tiers = 0;
        for (int isa = 0; isa <= OG_ISA_AVX512; isa++) {
            og_isa got;
            char note[128], err[256];
            if (og_isa_choose(&f, og_isa_name((og_isa)isa), &got, note, sizeof note, err, sizeof err)) continue;
            if (si && isa != OG_ISA_SCALAR && isa != best) continue;
            tiers++;
            og_kernels k;
            og_kernels_init((og_isa)isa, &k);
            og_pool *pool;
            og_pool_create(2, NULL, &pool, err, sizeof err);
            for (int nm = 0; nm < 2; nm++) {
                if (si && ((nm == 1) != (isa == OG_ISA_SCALAR))) continue;
                og_run_ctx rc = {.kern = &k, .pool = pool, .dispatch = g_host,
                                 .host_numerics = nm ? OG_NUMERICS_CANONICAL : OG_NUMERICS_FORK,
                                 .device_numerics = OG_NUMERICS_CANONICAL};
                int at = 0, agree = 0, agree_x = 0;
                for (int p = 0; p < N_PROMPT; p++) {
                    float *lg = malloc((size_t)g_len[p] * (size_t)V * sizeof *lg);
                    fx_prefill(m, &rc, toks[p], g_len[p], lg);
                    fx_diff_vs_ref(ref[p], lg, g_len[p], V, lf, d + at, &agree);
                    fx_diff_vs_ref(ref0[p], lg, g_len[p], V, lf, dx + at, &agree_x);
                    at += g_len[p];
                    free(lg);
                }
                int close = 0;
                for (int t = 0; t < n_all; t++) close += d[t] < 1e-5;
                double worst, worst_x;
                const double median = fx_median(d, n_all, &worst);
                fx_median(dx, n_all, &worst_x);
                print_message("deepseek41 %s, %s, %s: |log-prob - double reference| max %.3g, median %.3g, %d of %d "
                              "positions within 1e-5, argmax agrees at %d (vs the reference without rounding: max "
                              "%.3g)\n", g_sets[si].name, og_isa_name((og_isa)isa), nm ? "canonical" : "fork", worst,
                              median, close, n_all, agree, worst_x);
                if (!si) {
                    assert_true(worst < 1e-5);
                    assert_int_equal(agree, n_all);
                } else {
                    assert_true(median < 1e-5);
                    assert_true(worst < 0.1);
                    assert_true(agree * 100 >= n_all * 97);
                    assert_true(worst_x > 1e-3);
                }
            }
            og_pool_free(pool);
        }
        assert_true(tiers > 0);
        og_model_free(m);
        for (int p = 0; p < N_PROMPT; p++) json_decref(ref[p]);
    }
    for (int p = 0; p < N_PROMPT; p++) {
        free(toks[p]);
        json_decref(ref0[p]);
    }
    free(lf);
    free(d);
    free(dx);
}

/* ---- canonical numerics: every tier the same bits ---- */

static void test_tiers_bitwise(void **state) {
    (void)state;
    og_cpu_features f;
    og_cpu_detect(&f);
    og_model *m = load("kv-fp8=on,kv-fp4=on,indexer-fp4=on");
    const int64_t V = og_model_get_info(m)->n_vocab;
    const int n = g_len[2];
    int32_t *toks = prompt_new(2, (int32_t)V);
    float *first = NULL, *lg = malloc((size_t)n * (size_t)V * sizeof *lg);
    int tiers = 0;
    for (int isa = 0; isa <= OG_ISA_AVX512; isa++) {
        og_isa got;
        char note[128], err[256];
        if (og_isa_choose(&f, og_isa_name((og_isa)isa), &got, note, sizeof note, err, sizeof err)) continue;
        og_kernels k;
        og_kernels_init((og_isa)isa, &k);
        og_run_ctx rc = {.kern = &k, .dispatch = g_host, .host_numerics = OG_NUMERICS_CANONICAL,
                         .device_numerics = OG_NUMERICS_CANONICAL};
        fx_prefill(m, &rc, toks, n, lg);
        assert_true(fx_finite(lg, n * V));
        if (!first) {
            first = lg;
            lg = malloc((size_t)n * (size_t)V * sizeof *lg);
        } else {
            assert_memory_equal(first, lg, (size_t)n * (size_t)V * sizeof *lg);
        }
        print_message("deepseek41 canonical, %s: %s\n", og_isa_name((og_isa)isa), tiers ? "bitwise as scalar" : "the base");
        tiers++;
    }
    assert_true(tiers > 0);
    free(first);
    free(lg);
    free(toks);
    og_model_free(m);
}

/* ---- prefill == decode == chunks ---- */

static void test_prefill_decode(void **state) {
    (void)state;
    og_model *m = load("kv-fp8=on,kv-fp4=on,indexer-fp4=on");
    const int64_t V = og_model_get_info(m)->n_vocab;
    const int n = g_len[1];
    int32_t *toks = prompt_new(1, (int32_t)V);
    og_kernels k = fx_best_kernels();
    og_pool *pool;
    char err[512];
    og_pool_create(2, NULL, &pool, err, sizeof err);
    og_run_ctx rc = {.kern = &k, .pool = pool, .dispatch = g_host, .host_numerics = OG_NUMERICS_CANONICAL,
                     .device_numerics = OG_NUMERICS_CANONICAL};
    const size_t bytes = (size_t)n * (size_t)V * sizeof(float);
    float *all = malloc(bytes), *step = malloc(bytes);
    fx_prefill(m, &rc, toks, n, all);
    og_kv kv = {0};
    fx_decode_steps(m, &rc, &kv, toks, n, V, step);
    og_kv_free(&kv);
    assert_memory_equal(all, step, bytes);
    /* uneven chunks: a ratio-2 group split across calls */
    static const int cuts[] = {1, 6, 3, 9, 2, 13};
    memset(step, 0, bytes);
    int at = 0;
    for (int c = 0; at < n; c++) {
        int len = c < 6 ? cuts[c] : n - at;
        if (at + len > n) len = n - at;
        if (og_model_forward(m, &rc, &kv, toks + at, len, step + (int64_t)at * V, true, err, sizeof err))
            fail_msg("%s", err);
        at += len;
    }
    og_kv_free(&kv);
    assert_memory_equal(all, step, bytes);
    print_message("deepseek41: prefill of %d == %d decode steps == chunks, bitwise\n", n, n);
    free(all);
    free(step);
    free(toks);
    og_pool_free(pool);
    og_model_free(m);
}

/* ---- batch invariance ---- */

static void test_batch_invariance(void **state) {
    (void)state;
    og_model *m = load(NULL);
    const int64_t V = og_model_get_info(m)->n_vocab;
    og_kernels k = fx_best_kernels();
    og_pool *pool;
    char err[512];
    og_pool_create(2, NULL, &pool, err, sizeof err);
    og_run_ctx rc = {.kern = &k, .pool = pool, .dispatch = g_host, .host_numerics = OG_NUMERICS_CANONICAL,
                     .device_numerics = OG_NUMERICS_CANONICAL};
    int32_t *toks[N_PROMPT];
    float *alone[N_PROMPT];
    int total = 0;
    for (int p = 0; p < N_PROMPT; p++) {
        toks[p] = prompt_new(p, (int32_t)V);
        alone[p] = malloc((size_t)g_len[p] * (size_t)V * sizeof *alone[p]);
        fx_prefill(m, &rc, toks[p], g_len[p], alone[p]);
        total += g_len[p];
    }
    fx_batch_invariance(m, &rc, toks, g_len, N_PROMPT, V, alone, 11);
    for (int p = 0; p < N_PROMPT; p++) {
        free(toks[p]);
        free(alone[p]);
    }
    print_message("deepseek41: %d tokens of %d sequences interleaved in one batch, bitwise each alone\n", total, N_PROMPT);
    og_pool_free(pool);
    og_model_free(m);
}

/* ---- og_kv_fork ---- */

#define NSTEP 7
static void test_fork(void **state) {
    (void)state;
    og_model *m = load(NULL);
    assert_true(og_model_get_info(m)->kv_fork);
    const int64_t V = og_model_get_info(m)->n_vocab;
    const int n = g_len[2], P = n - NSTEP;
    int32_t *toks = prompt_new(2, (int32_t)V);
    og_kernels k = fx_best_kernels();
    char err[512];
    og_device *dev;
    og_stream *s;
    assert_int_equal(og_device_host_create(NULL, &k, &dev, err, sizeof err), OG_OK);
    assert_int_equal(dev->ops->stream_create(dev, &s, err, sizeof err), OG_OK);
    float *lp = malloc((size_t)V * sizeof *lp), *ref = malloc((size_t)NSTEP * (size_t)V * sizeof *ref),
          *got = malloc((size_t)NSTEP * (size_t)V * sizeof *got);
    for (int on_dev = 0; on_dev < 2; on_dev++) {
        og_run_ctx rc = {.kern = &k, .dispatch = g_host, .host_numerics = OG_NUMERICS_CANONICAL,
                         .device_numerics = OG_NUMERICS_CANONICAL, .dev = on_dev ? dev : NULL,
                         .stream = on_dev ? s : NULL};
        og_kv r = {0}, a = {0}, b, c;
        if (og_model_forward(m, &rc, &r, toks, P, lp, false, err, sizeof err)) fail_msg("%s", err);
        fx_decode_steps(m, &rc, &r, toks + P, NSTEP, V, ref);
        og_kv_free(&r);
        if (og_model_forward(m, &rc, &a, toks, P, lp, false, err, sizeof err)) fail_msg("%s", err);
        fx_fork(m, &rc, &a, &b);
        fx_fork(m, &rc, &a, &c);
        og_kv_free(&a);
        fx_decode_steps(m, &rc, &b, toks + P, NSTEP, V, got);
        assert_memory_equal(ref, got, (size_t)NSTEP * (size_t)V * sizeof *got);
        memset(got, 0, (size_t)NSTEP * (size_t)V * sizeof *got);
        fx_decode_steps(m, &rc, &c, toks + P, NSTEP, V, got);
        assert_memory_equal(ref, got, (size_t)NSTEP * (size_t)V * sizeof *got);
        og_kv_free(&b);
        og_kv_free(&c);
        print_message("deepseek41 fork after %d positions, %d steps (%s): bitwise the unforked run\n", P, NSTEP,
                      on_dev ? "a device's stream" : "host memory");
    }
    free(lp);
    free(ref);
    free(got);
    dev->ops->stream_destroy(dev, s);
    og_device_destroy(dev);
    free(toks);
    og_model_free(m);
}

/* ---- a context below the window (8 in the tiny file): rings of 6 rows ---- */

static void test_ring_ctx(void **state) {
    (void)state;
    og_model *m = load(NULL);
    const int64_t V = og_model_get_info(m)->n_vocab;
    int32_t *toks = prompt_new(0, (int32_t)V);
    og_kernels k = fx_best_kernels();
    og_run_ctx rc = {.kern = &k, .dispatch = g_host, .host_numerics = OG_NUMERICS_CANONICAL,
                     .device_numerics = OG_NUMERICS_CANONICAL};
    fx_ring_ctx(m, &rc, toks, V);
    print_message("deepseek41: og_kv.n_ctx 6 below the window: rings of 6 rows, the same bits, then a clear error\n");
    free(toks);
    og_model_free(m);
}

/* ---- a quantized file; bad input ---- */

static void test_quantized_and_bad_input(void **state) {
    (void)state;
    og_model *m = fx_load(g_quant, "kv-fp8=on,kv-fp4=on,indexer-fp4=on");
    const int64_t V = og_model_get_info(m)->n_vocab;
    const int n = g_len[1];
    int32_t *toks = prompt_new(1, (int32_t)V);
    og_kernels k = fx_best_kernels();
    og_run_ctx rc = {.kern = &k, .dispatch = g_host, .host_numerics = OG_NUMERICS_CANONICAL,
                     .device_numerics = OG_NUMERICS_CANONICAL};
    float *lg = malloc((size_t)n * (size_t)V * sizeof *lg);
    fx_prefill(m, &rc, toks, n, lg);
    assert_true(fx_finite(lg, n * V));
    print_message("deepseek41 Q8_0 tiny (Q2_K Engram tables): %d positions, finite logits\n", n);
    og_model_free(m);
    m = load(NULL);
    char err[512];
    assert_int_equal(og_model_set_option(m, "kv-fp4", "maybe", err, sizeof err), OG_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "maybe"));
    assert_int_equal(og_model_set_option(m, "kv-f16", "on", err, sizeof err), OG_ERR_INVALID_ARG);
    og_kv kv = {0};
    int32_t bad = (int32_t)V;
    assert_int_equal(og_model_forward(m, &rc, &kv, &bad, 1, lg, false, err, sizeof err), OG_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "outside the vocabulary"));
    assert_int_equal(kv.n_pos, 0);
    og_run_ctx none = {.kern = &k};
    assert_int_equal(og_model_forward(m, &none, &kv, toks, 1, lg, false, err, sizeof err), OG_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "dispatcher"));
    og_kv_free(&kv);
    free(lg);
    free(toks);
    og_model_free(m);
}

/* ---- the new QAT kinds against brute force ---- */

/* Nearest of vals[n] to |x| (ties to the even index), with x's sign. */
static double nearest_even(double x, const double *vals, int n) {
    const double a = fabs(x);
    int best = 0;
    for (int i = 1; i < n; i++) {
        const double d = fabs(vals[i] - a), db = fabs(vals[best] - a);
        if (d < db || (d == db && !(i & 1) && (best & 1))) best = i;
    }
    return x < 0 ? -vals[best] : vals[best];
}

static void test_qat_kinds(void **state) {
    (void)state;
    og_kernels k = fx_best_kernels();
    og_device *dev;
    og_stream *s;
    char err[256];
    assert_int_equal(og_device_host_create(NULL, &k, &dev, err, sizeof err), OG_OK);
    assert_int_equal(dev->ops->stream_create(dev, &s, err, sizeof err), OG_OK);
    static const double e2[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    double e4[128]; /* non-negative finite E4M3 values in order (mantissa parity = index parity) */
    int n4 = 0;
    for (int e = 0; e < 16; e++)
        for (int mt = 0; mt < 8; mt++)
            if (!(e == 15 && mt == 7)) e4[n4++] = e ? ldexp(1.0 + mt / 8.0, e - 7) : ldexp(mt / 8.0, -6);
    enum { ROWS = 8, N = 72 };
    float x[ROWS * N], y[ROWS * N];
    uint64_t r = 88172645463325252ull;
    for (int i = 0; i < ROWS * N; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        x[i] = (float)(((double)(r >> 11) / 9007199254740992.0 - 0.5) * ldexp(1.0, (int)(r % 16) - 8));
        if (i % 29 == 0) x[i] = 0;
    }
    for (int kind = 0; kind < 2; kind++) { /* FP4 blocks of 32 (a short last one of 8); FP4 + E4M3 scale per 16 */
        const int B = kind ? 16 : 32;
        memcpy(y, x, sizeof x);
        og_qat_op q = {{y, N, ROWS, N}, kind ? OG_QAT_FP4_E4M3 : OG_QAT_FP4, N, B};
        assert_int_equal(dev->ops->qat(dev, s, &q, err, sizeof err), OG_OK);
        for (int row = 0; row < ROWS; row++)
            for (int b = 0; b < N; b += B) {
                const int e = b + B < N ? b + B : N;
                double amax = 0;
                for (int i = b; i < e; i++) amax = fmax(amax, fabs(x[row * N + i]));
                const double scale = !amax ? 0 : kind ? nearest_even(fmin(amax / 6.0, 448), e4, n4)
                                                      : exp2(ceil(log2(amax / 6.0)));
                for (int i = b; i < e; i++) {
                    const double v = x[row * N + i];
                    const double want = !amax ? v : scale ? nearest_even(fmax(fmin(v / scale, 6), -6), e2, 8) * scale : 0;
                    if ((double)y[row * N + i] != want)
                        fail_msg("kind %d row %d dim %d: %.9g -> %.9g, want %.9g", kind, row, i, v,
                                 (double)y[row * N + i], want);
                }
            }
    }
    og_device_destroy(dev);
}

int main(int argc, char **argv) {
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: test_deepseek41 MODEL.gguf QUANT.gguf [REF_DEEPSEEK41]\n");
        return 2;
    }
    g_model = argv[1];
    g_quant = argv[2];
    if (argc == 4) g_ref = argv[3];
    const char *san = getenv("OG_SANITIZED");
    if (san && !strcmp(san, "1")) memcpy(g_len, g_len_sanitized, sizeof g_len);
    og_dispatch *host;
    char err[256];
    if (og_dispatch_create(NULL, NULL, &host, err, sizeof err)) return 2;
    g_host = og_dispatch_table(host);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qat_kinds),        cmocka_unit_test(test_quantized_and_bad_input),
        cmocka_unit_test(test_prefill_decode),   cmocka_unit_test(test_batch_invariance),
        cmocka_unit_test(test_fork),             cmocka_unit_test(test_ring_ctx),
        cmocka_unit_test(test_tiers_bitwise),
        cmocka_unit_test(test_against_reference),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    og_dispatch_free(host);
    return rc;
}
