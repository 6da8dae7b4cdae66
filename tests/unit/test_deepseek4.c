/* deepseek4's forward pass (src/model/deepseek4.c) on make-model --arch
 * deepseek4 files (tests/cli/deepseek4_unit.sh writes them):
 *  - against ds4ref's double-precision reference (ref_deepseek4, run here on
 *    the same tokens) at every position, every CPU tier, for the rounding sets
 *    spec (with an F32 cache), llama (no FP8 / FP4 round trips, F32 cache) and
 *    spec + kv-f16 (the default: kv-type f16, every stored KV row rounded):
 *    the next token's and the reference's top-5 log-probs within 1e-5 (F32);
 *  - every tier gives the same bits at canonical numerics;
 *  - prefill of N tokens == N single-token decode steps == chunks, bitwise;
 *  - batch invariance: sequences interleaved in one batch give bitwise what
 *    each gives alone;
 *  - og_kv_fork after a prompt past the window and several compression blocks:
 *    the fork and the original decode bitwise what an unforked run decodes,
 *    either one after the other is freed (host memory and a device's);
 *  - a context below the window: rings of that size, the same bits, then a
 *    clear error;
 *  - the ops against double references (QAT rounding, mHC mixes);
 *  - bad files (a missing tensor, a wrong shape, a key out of its bound) and
 *    bad options get clear errors.
 * usage: test_deepseek4 MODEL.gguf [REF_DEEPSEEK4] (the reference is built in
 * the plain build only) */
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

static const char *g_model;
static const char *g_ref; /* the ref_deepseek4 binary, or NULL (sanitizer builds) */
static const og_dispatcher *g_host;

/* The prompts: past the window, several 4- and 128-blocks, more ratio-4
 * compressed rows than top_k. */
#define N_PROMPT 3
static int g_len[N_PROMPT] = {300, 150, 261};
/* OG_SANITIZED (the ASan / TSan builds, ~20x slower): still past the window,
 * one 128-block and the indexer's top-k; the plain build runs the long ones */
static const int g_len_sanitized[N_PROMPT] = {140, 40, 131};

static void prompt_of(int which, int32_t V, int32_t *out) { fx_prompt(which, g_len[which], V, out); }

/* Prompt `which` in a new array (the caller frees it). */
static int32_t *prompt_new(int which, int32_t V) {
    int32_t *t = malloc((size_t)g_len[which] * sizeof *t);
    assert_non_null(t);
    prompt_of(which, V, t);
    return t;
}

static og_model *load(const char *opts) { return fx_load(g_model, opts); }






/* ---- against the double reference ---- */

/* The rounding sets: our options, and ref_deepseek4's flags for the same. */
static const struct {
    const char *name, *opts, *ref_flags;
} g_sets[] = {
    {"spec", "kv-type=f32", ""},
    {"llama", "kv-fp8=off,indexer-fp4=off,kv-type=f32", "--no-kv-fp8 --no-indexer-fp4"},
    {"spec+kv-f16", NULL, "--kv-f16"}, /* the default: kv-type f16 */
};






/* Every tier, fork and canonical, every rounding set, against the reference of
 * the same set. Without rounding (llama) nothing is discrete past the top-k:
 * every position within 1e-5. The FP8 / FP4 / F16 round trips turn a float vs
 * double difference of ~1e-7 into a whole rounding step whenever a value lies
 * that close to a midpoint (measured: the first such flip within 3-60 tokens,
 * then carried by the compressed rows), so there the test holds the floor: the
 * median within 1e-3, the argmax the reference's at >= 97% of positions, and
 * ten times closer to its own set's reference than to the other set's (the
 * rounding is real and is the spec's); the rounding itself is exact against a
 * brute-force reference (test_qat_op). */
static void test_against_reference(void **state) {
    (void)state;
    if (!g_ref) { /* the sanitizer builds: the reference runs in the plain build (tests/CMakeLists.txt) */
        print_message("the double reference is compared in the plain build\n");
        return;
    }
    enum { N_SET = sizeof g_sets / sizeof g_sets[0] };
    og_cpu_features f;
    og_cpu_detect(&f);
    int32_t *toks[N_PROMPT];
    json_t *ref[N_SET][N_PROMPT];
    int n_all = 0;
    const int64_t V = 512; /* deepseek4_unit.sh's --vocab */
    for (int p = 0; p < N_PROMPT; p++) {
        toks[p] = malloc((size_t)g_len[p] * sizeof *toks[p]);
        prompt_of(p, (int32_t)V, toks[p]);
        n_all += g_len[p];
        for (int si = 0; si < N_SET; si++) ref[si][p] = fx_run_ref(g_ref, g_model, toks[p], g_len[p], g_sets[si].ref_flags);
    }
    double *lf = malloc((size_t)V * sizeof *lf), *d = malloc((size_t)n_all * sizeof *d);
    double *dx = malloc((size_t)n_all * sizeof *dx);
    for (int si = 0; si < N_SET; si++) {
        og_model *m = load(g_sets[si].opts);
        assert_int_equal(og_model_get_info(m)->n_vocab, V);
        const int other = si == 1 ? 0 : 1; /* the set to be far from: spec vs llama */
        /* canonical numerics once (every tier gives its bits: test_tiers_bitwise); the fork on every tier
         * without rounding, on the best one with it (the rounding is scalar code on every tier) */
        int tiers = 0, best = OG_ISA_SCALAR;
        for (int isa = 0; isa <= OG_ISA_AVX512; isa++) {
            og_isa got;
            char note[128], err[256];
            if (!og_isa_choose(&f, og_isa_name((og_isa)isa), &got, note, sizeof note, err, sizeof err)) best = isa;
        }
        for (int isa = 0; isa <= OG_ISA_AVX512; isa++) {
            og_isa got;
            char note[128], err[256];
            if (og_isa_choose(&f, og_isa_name((og_isa)isa), &got, note, sizeof note, err, sizeof err)) continue;
            if (si != 1 && isa != OG_ISA_SCALAR && isa != best) continue;
            tiers++;
            og_kernels k;
            og_kernels_init((og_isa)isa, &k);
            og_pool *pool;
            og_pool_create(2, NULL, &pool, err, sizeof err);
            for (int nm = 0; nm < 2; nm++) {
                if (nm == 1 && isa != OG_ISA_SCALAR) continue;
                if (nm == 0 && si != 1 && isa != best) continue;
                og_run_ctx rc = {.kern = &k, .pool = pool, .dispatch = g_host,
                                 .host_numerics = nm ? OG_NUMERICS_CANONICAL : OG_NUMERICS_FORK,
                                 .device_numerics = OG_NUMERICS_CANONICAL};
                int at = 0, agree = 0, agree_x = 0;
                for (int p = 0; p < N_PROMPT; p++) {
                    float *lg = malloc((size_t)(g_len[p] * V) * sizeof *lg);
                    fx_prefill(m, &rc, toks[p], g_len[p], lg);
                    fx_diff_vs_ref(ref[si][p], lg, g_len[p], V, lf, d + at, &agree);
                    fx_diff_vs_ref(ref[other][p], lg, g_len[p], V, lf, dx + at, &agree_x);
                    at += g_len[p];
                    free(lg);
                }
                double worst, worst_x;
                const double median = fx_median(d, n_all, &worst), median_x = fx_median(dx, n_all, &worst_x);
                print_message("deepseek4 %s, %s, %s: |log-prob - double reference| max %.3g, median %.3g over %d "
                              "positions, argmax agrees at %d (vs the %s reference: median %.3g)\n",
                              g_sets[si].name, og_isa_name((og_isa)isa), nm ? "canonical" : "fork", worst, median,
                              n_all, agree, g_sets[other].name, median_x);
                if (si == 1) {
                    assert_true(worst < 1e-5);
                } else {
                    assert_true(median < 1e-3);
                    assert_true(agree * 100 >= n_all * 97);
                }
                assert_true(median * 10 < median_x);
            }
            og_pool_free(pool);
        }
        assert_true(tiers > 0);
        og_model_free(m);
    }
    for (int p = 0; p < N_PROMPT; p++) {
        for (int si = 0; si < N_SET; si++) json_decref(ref[si][p]);
        free(toks[p]);
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
    og_model *m = load(NULL);
    const int64_t V = og_model_get_info(m)->n_vocab;
    const int n = g_len[2];
    int32_t *toks = malloc((size_t)n * sizeof *toks);
    prompt_of(2, (int32_t)V, toks);
    float *first = NULL, *lg = malloc((size_t)(n * V) * sizeof *lg);
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
            lg = malloc((size_t)(n * V) * sizeof *lg);
        } else {
            assert_memory_equal(first, lg, (size_t)(n * V) * sizeof *lg);
        }
        print_message("deepseek4 canonical, %s: %s\n", og_isa_name((og_isa)isa), tiers ? "bitwise as scalar" : "the base");
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
    og_model *m = load(NULL);
    const int64_t V = og_model_get_info(m)->n_vocab;
    const int n = g_len[1];
    int32_t *toks = malloc((size_t)n * sizeof *toks);
    prompt_of(1, (int32_t)V, toks);
    og_kernels k = fx_best_kernels();
    og_pool *pool;
    char err[512];
    og_pool_create(2, NULL, &pool, err, sizeof err);
    og_run_ctx rc = {.kern = &k, .pool = pool, .dispatch = g_host, .host_numerics = OG_NUMERICS_CANONICAL,
                     .device_numerics = OG_NUMERICS_CANONICAL};
    float *all = malloc((size_t)(n * V) * sizeof *all), *step = malloc((size_t)(n * V) * sizeof *step);
    fx_prefill(m, &rc, toks, n, all);
    og_kv kv = {0};
    for (int t = 0; t < n; t++)
        if (og_model_forward(m, &rc, &kv, toks + t, 1, step + (int64_t)t * V, false, err, sizeof err)) fail_msg("%s", err);
    og_kv_free(&kv);
    assert_memory_equal(all, step, (size_t)(n * V) * sizeof *all);
    /* uneven chunks, a compression block split across calls */
    static const int cuts[] = {1, 6, 3, 29, 2, 70};
    memset(step, 0, (size_t)(n * V) * sizeof *step);
    int at = 0;
    for (int c = 0; at < n; c++) {
        int len = c < 6 ? cuts[c] : n - at;
        if (at + len > n) len = n - at;
        if (og_model_forward(m, &rc, &kv, toks + at, len, step + (int64_t)at * V, true, err, sizeof err))
            fail_msg("%s", err);
        at += len;
    }
    og_kv_free(&kv);
    assert_memory_equal(all, step, (size_t)(n * V) * sizeof *all);
    /* the fast path (fork numerics) keeps prefill == decode within float noise */
    rc.host_numerics = OG_NUMERICS_FORK;
    fx_prefill(m, &rc, toks, n, all);
    double worst = 0;
    for (int t = 0; t < n; t++) {
        if (og_model_forward(m, &rc, &kv, toks + t, 1, step, false, err, sizeof err)) fail_msg("%s", err);
        for (int64_t v = 0; v < V; v++) worst = fmax(worst, fabs((double)step[v] - all[(int64_t)t * V + v]));
    }
    og_kv_free(&kv);
    print_message("deepseek4 fork numerics: prefill vs decode max |logit diff| %.3g\n", worst);
    assert_true(worst < 1e-4);
    free(all);
    free(step);
    free(toks);
    og_pool_free(pool);
    og_model_free(m);
}

/* ---- og_kv_fork: the state's deep copy ---- */



/* The prompt's first P tokens, then NSTEP decode steps that complete ratio-4
 * blocks and one ratio-128 block (P = 252 / 122 sanitized, 128-blocks end at
 * 255 / 127). Unforked: P then the steps. Forked: B and C forks of A (A
 * freed), D a fork of C (D freed): B and C each give the unforked bits. Once
 * with the per-call host device (host memory), once on a device's stream. */
#define NSTEP 9
static void test_fork(void **state) {
    (void)state;
    og_model *m = load(NULL);
    assert_true(og_model_get_info(m)->kv_fork);
    assert_false(og_model_get_info(m)->kv_paged);
    const int64_t V = og_model_get_info(m)->n_vocab;
    const int n = g_len[2], P = n - NSTEP;
    int32_t *toks = prompt_new(2, (int32_t)V);
    og_kernels k = fx_best_kernels();
    og_pool *pool;
    char err[512];
    og_pool_create(2, NULL, &pool, err, sizeof err);
    og_device *dev;
    og_stream *s;
    assert_int_equal(og_device_host_create(pool, &k, &dev, err, sizeof err), OG_OK);
    assert_int_equal(dev->ops->stream_create(dev, &s, err, sizeof err), OG_OK);
    float *lp = malloc((size_t)V * sizeof *lp), *ref = malloc((size_t)(NSTEP * V) * sizeof *ref),
          *got = malloc((size_t)(NSTEP * V) * sizeof *got);
    for (int on_dev = 0; on_dev < 2; on_dev++) {
        og_run_ctx rc = {.kern = &k, .pool = pool, .dispatch = g_host, .host_numerics = OG_NUMERICS_CANONICAL,
                         .device_numerics = OG_NUMERICS_CANONICAL, .dev = on_dev ? dev : NULL,
                         .stream = on_dev ? s : NULL};
        og_kv r = {0}, a = {0}, b, c, dd;
        if (og_model_forward(m, &rc, &r, toks, P, lp, false, err, sizeof err)) fail_msg("%s", err);
        fx_decode_steps(m, &rc, &r, toks + P, NSTEP, V, ref);
        og_kv_free(&r);
        /* A's prompt in a batch of two sequences, w without tokens (a choice
         * waiting for the fork, as the engine runs it): w gets no state */
        og_kv w = {0};
        og_kv *two[2] = {&a, &w};
        int32_t *seq = calloc((size_t)P, sizeof *seq);
        bool *want = calloc((size_t)P, sizeof *want);
        want[P - 1] = true;
        og_batch bt = {P, toks, seq, want, NULL};
        if (og_model_forward_batch(m, &rc, two, 2, &bt, lp, err, sizeof err)) fail_msg("%s", err);
        free(seq);
        free(want);
        assert_int_equal(a.n_pos, P);
        assert_null(w.arch);
        assert_int_equal(w.n_pos, 0);
        fx_fork(m, &rc, &a, &b);
        fx_fork(m, &rc, &a, &c);
        /* bad forks: a destination in use, blocks to share, no stream for a device's state */
        assert_int_equal(og_kv_fork(m, &rc, &a, 0, &b, err, sizeof err), OG_ERR_INVALID_ARG);
        og_kv e = {0};
        assert_int_equal(og_kv_fork(m, &rc, &a, 1, &e, err, sizeof err), OG_ERR_INVALID_ARG);
        assert_null(e.arch);
        if (on_dev) {
            og_run_ctx none = rc;
            none.stream = NULL;
            assert_int_equal(og_kv_fork(m, &none, &a, 0, &e, err, sizeof err), OG_ERR_INVALID_ARG);
            assert_non_null(strstr(err, "stream"));
            assert_null(e.arch);
        }
        og_kv_free(&a); /* the original goes: the forks keep theirs */
        memset(got, 0, (size_t)(NSTEP * V) * sizeof *got);
        fx_decode_steps(m, &rc, &b, toks + P, NSTEP, V, got);
        assert_memory_equal(ref, got, (size_t)(NSTEP * V) * sizeof *got);
        fx_fork(m, &rc, &c, &dd);
        og_kv_free(&dd); /* a fork goes: its original keeps its state */
        memset(got, 0, (size_t)(NSTEP * V) * sizeof *got);
        fx_decode_steps(m, &rc, &c, toks + P, NSTEP, V, got);
        assert_memory_equal(ref, got, (size_t)(NSTEP * V) * sizeof *got);
        og_kv_free(&b);
        og_kv_free(&c);
        /* an empty cache forks to an empty one */
        og_kv z = {0};
        assert_int_equal(og_kv_fork(m, &rc, &z, 0, &e, err, sizeof err), OG_OK);
        assert_null(e.arch);
        assert_int_equal(e.n_pos, 0);
        print_message("deepseek4 fork after %d positions, %d steps (%s): bitwise the unforked run\n", P, NSTEP,
                      on_dev ? "a device's stream" : "host memory");
    }
    free(lp);
    free(ref);
    free(got);
    dev->ops->stream_destroy(dev, s);
    og_device_destroy(dev);
    og_pool_free(pool);
    free(toks);
    og_model_free(m);
}

/* A sequence whose context (og_kv.n_ctx) is below the window (8 in the tiny
 * file) gets rings of n_ctx rows: the same bits as an unbounded one up to
 * n_ctx positions (also forked), then OG_ERR_RANGE with n_pos unchanged. */
static void test_ring_ctx(void **state) {
    (void)state;
    og_model *m = load(NULL);
    const int64_t V = og_model_get_info(m)->n_vocab;
    int32_t *toks = prompt_new(0, (int32_t)V);
    og_kernels k = fx_best_kernels();
    og_run_ctx rc = {.kern = &k, .dispatch = g_host, .host_numerics = OG_NUMERICS_CANONICAL,
                     .device_numerics = OG_NUMERICS_CANONICAL};
    fx_ring_ctx(m, &rc, toks, V);
    free(toks);
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
    for (int p = 0; p < N_PROMPT; p++) {
        toks[p] = malloc((size_t)g_len[p] * sizeof *toks[p]);
        prompt_of(p, (int32_t)V, toks[p]);
        alone[p] = malloc((size_t)(g_len[p] * V) * sizeof *alone[p]);
        fx_prefill(m, &rc, toks[p], g_len[p], alone[p]);
    }
    fx_batch_invariance(m, &rc, toks, g_len, N_PROMPT, V, alone, 23);
    for (int p = 0; p < N_PROMPT; p++) {
        free(toks[p]);
        free(alone[p]);
    }
    og_pool_free(pool);
    og_model_free(m);
}

/* ---- bad input ---- */




static void test_bad_files(void **state) {
    (void)state;
    size_t n;
    uint8_t *orig = fx_read_all(g_model, &n), *b = malloc(n);
    char err[512];
    /* a missing tensor: its name changed */
    memcpy(b, orig, n);
    size_t at = fx_after_string(b, n, "blk.2.attn_kv.weight");
    b[at - 8] = 'X';
    assert_int_equal(fx_load_bytes(b, n, err, sizeof err), OG_ERR_NOT_FOUND);
    assert_non_null(strstr(err, "blk.2.attn_kv.weight"));
    /* a wrong shape: ne0 of blk.3.attn_sinks.weight doubled */
    memcpy(b, orig, n);
    at = fx_after_string(b, n, "blk.3.attn_sinks.weight");
    uint64_t ne0;
    memcpy(&ne0, b + at + 4, 8);
    ne0 *= 2;
    memcpy(b + at + 4, &ne0, 8);
    og_status st = fx_load_bytes(b, n, err, sizeof err);
    assert_true(st == OG_ERR_FORMAT || st == OG_ERR_RANGE);
    print_message("wrong shape: %s\n", err);
    /* a key out of its bound: hyper_connection.count 99 */
    memcpy(b, orig, n);
    at = fx_after_string(b, n, "deepseek4.hyper_connection.count");
    uint32_t v = 99;
    memcpy(b + at + 4, &v, 4);
    assert_int_equal(fx_load_bytes(b, n, err, sizeof err), OG_ERR_FORMAT);
    assert_non_null(strstr(err, "hyper_connection.count"));
    print_message("bad key: %s\n", err);
    /* the model option: unknown name, bad value */
    og_model *m = load(NULL);
    assert_int_equal(og_model_set_option(m, "kv-fp8", "maybe", err, sizeof err), OG_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "maybe"));
    assert_int_equal(og_model_set_option(m, "speed", "max", err, sizeof err), OG_ERR_INVALID_ARG);
    assert_int_equal(og_model_set_option(m, "kv-type", "f8", err, sizeof err), OG_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "f16 or f32"));
    /* tokens outside the vocabulary and a missing dispatcher: refused, nothing appended */
    og_kernels k;
    og_kernels_init(OG_ISA_SCALAR, &k);
    og_run_ctx rc = {.kern = &k, .dispatch = g_host};
    { /* kv-f16, kv-type's older name: on = f16 (the default), off = f32, bit for bit; f16 and f32 differ */
        static const char *const pairs[2][2] = {{"kv-f16=on", NULL}, {"kv-f16=off", "kv-type=f32"}};
        static const int32_t toks[6] = {1, 5, 9, 13, 17, 21};
        const size_t V = og_model_get_info(m)->n_vocab;
        float *out[2][2];
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 2; j++) {
                og_model *mj = load(pairs[i][j]);
                out[i][j] = malloc(6 * V * sizeof(float));
                fx_prefill(mj, &rc, toks, 6, out[i][j]);
                og_model_free(mj);
            }
        assert_memory_equal(out[0][0], out[0][1], 6 * V * sizeof(float));
        assert_memory_equal(out[1][0], out[1][1], 6 * V * sizeof(float));
        assert_true(memcmp(out[0][0], out[1][0], 6 * V * sizeof(float)) != 0);
        for (int i = 0; i < 4; i++) free(out[i / 2][i % 2]);
    }
    og_kv kv = {0};
    float *lg = malloc(og_model_get_info(m)->n_vocab * sizeof *lg);
    int32_t bad = (int32_t)og_model_get_info(m)->n_vocab;
    assert_int_equal(og_model_forward(m, &rc, &kv, &bad, 1, lg, false, err, sizeof err), OG_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "outside the vocabulary"));
    assert_int_equal(kv.n_pos, 0);
    og_run_ctx none = {.kern = &k};
    int32_t one = 1;
    assert_int_equal(og_model_forward(m, &none, &kv, &one, 1, lg, false, err, sizeof err), OG_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "dispatcher"));
    og_kv_free(&kv);
    free(lg);
    og_model_free(m);
    free(orig);
    free(b);
}

/* ---- the ops against double references written from the spec ---- */

/* Every finite E4M3 value (4 exponent bits, bias 7, 3 mantissa bits; S.1111.111
 * is NaN), as the spec's table; *odd: the mantissa's low bit. */
static int e4m3_values(double *v, bool *odd) {
    int n = 0;
    for (int e = 0; e < 16; e++)
        for (int m = 0; m < 8; m++) {
            if (e == 15 && m == 7) continue;
            v[n] = e ? ldexp(1.0 + m / 8.0, e - 7) : ldexp(m / 8.0, -6);
            odd[n++] = m & 1;
        }
    return n;
}

/* Nearest of vals[n] to |x| (ties to the even mantissa), with x's sign. */
static double nearest(double x, const double *vals, const bool *odd, int n) {
    const double a = fabs(x);
    int best = 0;
    for (int i = 1; i < n; i++) {
        const double d = fabs(vals[i] - a), db = fabs(vals[best] - a);
        if (d < db || (d == db && !odd[i] && odd[best])) best = i;
    }
    return x < 0 ? -vals[best] : vals[best];
}

static void test_qat_op(void **state) {
    (void)state;
    og_kernels k = fx_best_kernels();
    og_device *dev;
    og_stream *s;
    char err[256];
    assert_int_equal(og_device_host_create(NULL, &k, &dev, err, sizeof err), OG_OK);
    assert_int_equal(dev->ops->stream_create(dev, &s, err, sizeof err), OG_OK);
    double e4[256], e2[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    bool o4[256], o2[8] = {0, 1, 0, 1, 0, 1, 0, 1};
    const int n4 = e4m3_values(e4, o4);
    enum { ROWS = 16, N = 192, NH = 128 };
    float x[ROWS * N], y[ROWS * N];
    uint64_t r = 88172645463325252ull;
    for (int i = 0; i < ROWS * N; i++) { /* magnitudes over many binades, some exact ties and zeros */
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        const double u = (double)(r >> 11) / 9007199254740992.0;
        x[i] = (float)((u - 0.5) * ldexp(1.0, (int)(r % 24) - 14));
        if (i % 37 == 0) x[i] = 0;
        if (i % 41 == 0) x[i] = 0.1875f; /* 0.1875 = 1.5 * 2^-3: exact in both formats */
    }
    /* FP8 on the first 160 dims (two blocks of 64 and a short one of 32), the rest untouched */
    memcpy(y, x, sizeof x);
    og_qat_op q8 = {{y, N, ROWS, N}, OG_QAT_FP8, 160, 0};
    assert_int_equal(dev->ops->qat(dev, s, &q8, err, sizeof err), OG_OK);
    for (int row = 0; row < ROWS; row++)
        for (int b = 0; b < 160; b += 64) {
            const int e = b + 64 < 160 ? b + 64 : 160;
            double amax = 0;
            for (int i = b; i < e; i++) amax = fmax(amax, fabs(x[row * N + i]));
            const double scale = exp2(ceil(log2(fmax(amax, 1e-4) / 448.0)));
            for (int i = b; i < e; i++) {
                const double want = nearest(x[row * N + i] / scale, e4, o4, n4) * scale;
                if ((double)y[row * N + i] != want) fail_msg("FP8 row %d dim %d: %.9g -> %.9g, want %.9g", row, i,
                                                             (double)x[row * N + i], (double)y[row * N + i], want);
            }
            for (int i = 160; i < N; i++) assert_true(y[row * N + i] == x[row * N + i]);
        }
    /* Hadamard-128 + FP4 on the first 128 dims: the rotation in double by its matrix */
    memcpy(y, x, sizeof x);
    og_qat_op q4 = {{y, N, ROWS, N}, OG_QAT_FP4_HADAMARD, NH, 0};
    assert_int_equal(dev->ops->qat(dev, s, &q4, err, sizeof err), OG_OK);
    int near_tie = 0;
    for (int row = 0; row < ROWS; row++) {
        double h[NH];
        for (int i = 0; i < NH; i++) {
            h[i] = 0;
            for (int j = 0; j < NH; j++) h[i] += (__builtin_popcount((unsigned)(i & j)) & 1 ? -1.0 : 1.0) * x[row * N + j];
            h[i] /= sqrt((double)NH);
        }
        for (int b = 0; b < NH; b += 32) {
            double amax = 0;
            for (int i = b; i < b + 32; i++) amax = fmax(amax, fabs(h[i]));
            const double scale = amax ? exp2(ceil(log2(amax / 6.0))) : 1;
            for (int i = b; i < b + 32; i++) {
                const double want = amax ? nearest(h[i] / scale, e2, o2, 8) * scale : 0;
                if ((double)y[row * N + i] == want) continue;
                /* the float rotation may land on the other side of a midpoint only when h is that close to one */
                const double t = fabs(h[i]) / scale;
                bool close = false;
                for (int g = 0; g < 7; g++) close |= fabs(t - 0.5 * (e2[g] + e2[g + 1])) < 1e-5;
                if (!close) fail_msg("FP4 row %d dim %d: %.9g, want %.9g", row, i, (double)y[row * N + i], want);
                near_tie++;
            }
        }
        for (int i = NH; i < N; i++) assert_true(y[row * N + i] == x[row * N + i]);
    }
    assert_true(near_tie <= 2);
    /* dims that are not whole blocks are refused */
    og_qat_op bad = {{y, N, ROWS, N}, OG_QAT_FP4_HADAMARD, 96, 0};
    assert_int_equal(dev->ops->qat(dev, s, &bad, err, sizeof err), OG_ERR_INVALID_ARG);
    og_device_destroy(dev);
}

/* mHC mixes: pre/post from the sigmoid formulas, C doubly stochastic after
 * Sinkhorn (rows and columns sum to ~1), against a double Sinkhorn. */
static void test_hc_mix_op(void **state) {
    (void)state;
    og_kernels k = fx_best_kernels();
    og_device *dev;
    og_stream *s;
    char err[256];
    assert_int_equal(og_device_host_create(NULL, &k, &dev, err, sizeof err), OG_OK);
    assert_int_equal(dev->ops->stream_create(dev, &s, err, sizeof err), OG_OK);
    enum { T = 3, HC = 4, MIX = (2 + HC) * HC };
    float mix[T * MIX], base[MIX], scale[3] = {0.7f, 1.3f, 2.1f}, pre[T * HC], post[T * HC], comb[T * HC * HC];
    for (int i = 0; i < T * MIX; i++) mix[i] = (float)sin(1.7 * i) * 2;
    for (int i = 0; i < MIX; i++) base[i] = (float)cos(0.9 * i);
    const float eps = 1e-6f;
    og_hc_mix_op op = {mix, T, HC, false, scale, base, eps, 20, pre, post, comb};
    assert_int_equal(dev->ops->hc_mix(dev, s, &op, err, sizeof err), OG_OK);
    for (int t = 0; t < T; t++) {
        const float *m = mix + t * MIX;
        double C[HC][HC]; /* [a][b] */
        for (int kk = 0; kk < HC; kk++) {
            assert_true(fabs(pre[t * HC + kk] - (1 / (1 + exp(-(m[kk] * 0.7 + base[kk]))) + 1e-6)) < 1e-6);
            assert_true(fabs(post[t * HC + kk] - 2 / (1 + exp(-(m[HC + kk] * 1.3 + base[HC + kk])))) < 1e-6);
        }
        for (int a = 0; a < HC; a++)
            for (int b = 0; b < HC; b++) C[a][b] = m[2 * HC + a + HC * b] * 2.1 + base[2 * HC + a + HC * b];
        for (int b = 0; b < HC; b++) {
            double mx = -INFINITY, z = 0;
            for (int a = 0; a < HC; a++) mx = fmax(mx, C[a][b]);
            for (int a = 0; a < HC; a++) z += exp(C[a][b] - mx);
            for (int a = 0; a < HC; a++) C[a][b] = exp(C[a][b] - mx) / z + 1e-6;
        }
        for (int it = 0; it < 20; it++) {
            for (int b = 0; it && b < HC; b++) {
                double z = 0;
                for (int a = 0; a < HC; a++) z += C[a][b];
                for (int a = 0; a < HC; a++) C[a][b] /= z + 1e-6;
            }
            for (int a = 0; a < HC; a++) {
                double z = 0;
                for (int b = 0; b < HC; b++) z += C[a][b];
                for (int b = 0; b < HC; b++) C[a][b] /= z + 1e-6;
            }
        }
        for (int a = 0; a < HC; a++) {
            double row = 0, col = 0;
            for (int b = 0; b < HC; b++) {
                assert_true(fabs(comb[t * HC * HC + a + HC * b] - C[a][b]) < 1e-6);
                row += comb[t * HC * HC + a + HC * b];
                col += comb[t * HC * HC + b + HC * a];
            }
            assert_true(fabs(row - 1) < 1e-4 && fabs(col - 1) < 1e-3);
        }
    }
    og_device_destroy(dev);
}

int main(int argc, char **argv) {
    if (argc != 2 && argc != 3) {
        fprintf(stderr, "usage: test_deepseek4 MODEL.gguf [REF_DEEPSEEK4]\n");
        return 2;
    }
    g_model = argv[1];
    if (argc == 3) g_ref = argv[2];
    const char *san = getenv("OG_SANITIZED");
    if (san && !strcmp(san, "1")) memcpy(g_len, g_len_sanitized, sizeof g_len);
    og_dispatch *host;
    char err[256];
    if (og_dispatch_create(NULL, NULL, &host, err, sizeof err)) return 2;
    g_host = og_dispatch_table(host);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qat_op),           cmocka_unit_test(test_hc_mix_op),
        cmocka_unit_test(test_bad_files),        cmocka_unit_test(test_prefill_decode),
        cmocka_unit_test(test_batch_invariance), cmocka_unit_test(test_fork), cmocka_unit_test(test_ring_ctx),
        cmocka_unit_test(test_tiers_bitwise),
        cmocka_unit_test(test_against_reference),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    og_dispatch_free(host);
    return rc;
}
