/* deepseek4's forward pass (src/model/deepseek4.c) on make-model --arch
 * deepseek4 files (tests/cli/deepseek4_unit.sh writes them):
 *  - against ds4ref's double-precision reference (ref_deepseek4's per-position
 *    log-probs, read from a file) at every position, every CPU tier, QAT on
 *    and off: within 1e-5 (F32 weights);
 *  - every tier gives the same bits at canonical numerics;
 *  - prefill of N tokens == N single-token decode steps == chunks, bitwise;
 *  - batch invariance: sequences interleaved in one batch give bitwise what
 *    each gives alone;
 *  - bad files (a missing tensor, a wrong shape, a key out of its bound, a hash
 *    table entry outside the experts) and bad options get clear errors.
 * usage: test_deepseek4 MODEL.gguf [REF_QAT_ON REF_QAT_OFF] */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include <cmocka.h>

#include "kernels_fixture.h"
#include "og_device.h"
#include "og_moe.h"
#include "og_model.h"

static const char *g_model;
static const char *g_ref[2]; /* [qat on, qat off] or NULL */
static const og_dispatcher *g_host;

/* The prompts: past the window, several 4- and 128-blocks, more ratio-4
 * compressed rows than top_k. */
#define N_PROMPT 3
static int g_len[N_PROMPT] = {300, 150, 261};
/* OG_SANITIZED (the ASan / TSan builds, ~20x slower): still past the window,
 * one 128-block and the indexer's top-k; the plain build runs the long ones */
static const int g_len_sanitized[N_PROMPT] = {140, 40, 131};

static void prompt_of(int which, int32_t V, int32_t *out) {
    uint64_t x = 0x9E3779B97F4A7C15ull * (uint64_t)(which + 1);
    for (int i = 0; i < g_len[which]; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out[i] = (int32_t)(x % (uint64_t)V);
    }
}

static og_model *load(const char *qat) {
    og_model *m;
    char err[512];
    if (og_model_load(g_model, NULL, &m, err, sizeof err)) fail_msg("%s", err);
    if (qat && og_model_set_option(m, "qat", qat, err, sizeof err)) fail_msg("%s", err);
    return m;
}

/* All logits of one prompt run as one prefill call. */
static void run_prefill(const og_model *m, const og_run_ctx *rc, const int32_t *toks, int n, float *logits) {
    og_kv kv = {0};
    char err[512];
    if (og_model_forward(m, rc, &kv, toks, n, logits, true, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(kv.n_pos, n);
    og_kv_free(&kv);
}

static bool finite_all(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return false;
    return true;
}

/* ---- against the double reference ---- */

/* The reference file: one line per position, "pos token logprob_0 ... logprob_{V-1}"
 * (ref_deepseek4's output), prompts one after the other, a blank line between. */
static double *read_ref(const char *path, int64_t V, int64_t total) {
    FILE *f = fopen(path, "r");
    if (!f) fail_msg("cannot read %s", path);
    double *r = malloc((size_t)(total * V) * sizeof *r);
    for (int64_t t = 0; t < total; t++) {
        long pos, tok;
        if (fscanf(f, "%ld %ld", &pos, &tok) != 2) fail_msg("%s: short at row %lld", path, (long long)t);
        for (int64_t v = 0; v < V; v++)
            if (fscanf(f, "%lf", &r[t * V + v]) != 1) fail_msg("%s: short at row %lld", path, (long long)t);
    }
    fclose(f);
    return r;
}

static void logsoftmax(const float *l, int64_t n, double *out) {
    double mx = -INFINITY, z = 0;
    for (int64_t i = 0; i < n; i++) mx = fmax(mx, l[i]);
    for (int64_t i = 0; i < n; i++) z += exp(l[i] - mx);
    for (int64_t i = 0; i < n; i++) out[i] = l[i] - mx - log(z);
}

static void test_against_reference(void **state) {
    (void)state;
    if (!g_ref[0]) {
        print_message("SKIP (dependency): no ref_deepseek4 output given (ds4ref's reference)\n");
        skip();
    }
    og_cpu_features f;
    og_cpu_detect(&f);
    for (int qi = 0; qi < 2; qi++) {
        og_model *m = load(qi ? "off" : "on");
        const int64_t V = og_model_get_info(m)->n_vocab;
        int64_t total = 0;
        for (int p = 0; p < N_PROMPT; p++) total += g_len[p];
        double *ref = read_ref(g_ref[qi], V, total), *lf = malloc((size_t)V * sizeof *lf);
        int tiers = 0;
        for (int isa = 0; isa <= OG_ISA_AVX512; isa++) {
            og_isa got;
            char note[128], err[256];
            if (og_isa_choose(&f, og_isa_name((og_isa)isa), &got, note, sizeof note, err, sizeof err)) continue;
            tiers++;
            og_kernels k;
            og_kernels_init((og_isa)isa, &k);
            og_pool *pool;
            og_pool_create(2, NULL, &pool, err, sizeof err);
            og_run_ctx rc = {.kern = &k, .pool = pool, .dispatch = g_host};
            double worst = 0;
            int64_t row = 0;
            for (int p = 0; p < N_PROMPT; p++) {
                int32_t *toks = malloc((size_t)g_len[p] * sizeof *toks);
                float *lg = malloc((size_t)(g_len[p] * V) * sizeof *lg);
                prompt_of(p, (int32_t)V, toks);
                run_prefill(m, &rc, toks, g_len[p], lg);
                for (int t = 0; t < g_len[p]; t++, row++) {
                    logsoftmax(lg + (int64_t)t * V, V, lf);
                    for (int64_t v = 0; v < V; v++) worst = fmax(worst, fabs(lf[v] - ref[row * V + v]));
                }
                free(toks);
                free(lg);
            }
            print_message("deepseek4 QAT %s, %s: max |log-prob - double reference| %.3g over %lld positions\n",
                          qi ? "off" : "on", og_isa_name((og_isa)isa), worst, (long long)total);
            assert_true(worst < 1e-5);
            og_pool_free(pool);
        }
        assert_true(tiers > 0);
        free(ref);
        free(lf);
        og_model_free(m);
    }
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
        run_prefill(m, &rc, toks, n, lg);
        assert_true(finite_all(lg, n * V));
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
    run_prefill(m, &rc, toks, n, all);
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
    run_prefill(m, &rc, toks, n, all);
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
        toks[p] = malloc((size_t)g_len[p] * sizeof *toks[p]);
        prompt_of(p, (int32_t)V, toks[p]);
        alone[p] = malloc((size_t)(g_len[p] * V) * sizeof *alone[p]);
        run_prefill(m, &rc, toks[p], g_len[p], alone[p]);
        total += g_len[p];
    }
    /* one batch, the three prompts interleaved in uneven runs, every token's logits */
    int32_t *bt = malloc((size_t)total * sizeof *bt), *bs = malloc((size_t)total * sizeof *bs);
    bool *want = malloc((size_t)total * sizeof *want);
    int done[N_PROMPT] = {0}, n = 0;
    for (int round = 0; n < total; round++)
        for (int p = 0; p < N_PROMPT; p++) {
            const int run = 1 + (round * 7 + p * 3) % 23;
            for (int r = 0; r < run && done[p] < g_len[p]; r++) {
                bt[n] = toks[p][done[p]++];
                bs[n] = p;
                want[n++] = true;
            }
        }
    float *lg = malloc((size_t)(total * V) * sizeof *lg);
    og_kv kv[N_PROMPT] = {{0}};
    og_kv *kvs[N_PROMPT] = {&kv[0], &kv[1], &kv[2]};
    og_batch b = {total, bt, bs, want, NULL};
    if (og_model_forward_batch(m, &rc, kvs, N_PROMPT, &b, lg, err, sizeof err)) fail_msg("%s", err);
    int seen[N_PROMPT] = {0};
    for (int i = 0; i < total; i++) {
        const int p = bs[i];
        assert_memory_equal(lg + (int64_t)i * V, alone[p] + (int64_t)seen[p]++ * V, (size_t)V * sizeof *lg);
    }
    for (int p = 0; p < N_PROMPT; p++) {
        assert_int_equal(kv[p].n_pos, g_len[p]);
        og_kv_free(&kv[p]);
        free(toks[p]);
        free(alone[p]);
    }
    free(bt);
    free(bs);
    free(want);
    free(lg);
    og_pool_free(pool);
    og_model_free(m);
}

/* ---- bad input ---- */

static uint8_t *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot read %s", path);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*n);
    if (fread(b, 1, *n, f) != *n) fail_msg("short read of %s", path);
    fclose(f);
    return b;
}

/* The header offset just past the GGUF string s (u64 length, then bytes). */
static size_t after_string(const uint8_t *b, size_t n, const char *s) {
    const size_t len = strlen(s);
    for (size_t i = 8; i + len < n && i < (1u << 20); i++)
        if (!memcmp(b + i, s, len) && !memcmp(b + i - 8, &(uint64_t){len}, 8)) return i + len;
    fail_msg("no %s in the header", s);
    return 0;
}

/* Loads the patched bytes; returns the status and the message. */
static og_status load_bytes(const uint8_t *b, size_t n, char *err, size_t errlen) {
    og_gguf *g;
    og_status st = og_gguf_open_memory(b, n, "patched.gguf", 0, &g, err, errlen);
    if (st) return st;
    og_model *m;
    st = og_model_load_gguf(g, NULL, &m, err, errlen);
    if (!st) og_model_free(m);
    return st;
}

static void test_bad_files(void **state) {
    (void)state;
    size_t n;
    uint8_t *orig = read_all(g_model, &n), *b = malloc(n);
    char err[512];
    /* a missing tensor: its name changed */
    memcpy(b, orig, n);
    size_t at = after_string(b, n, "blk.2.attn_kv.weight");
    b[at - 8] = 'X';
    assert_int_equal(load_bytes(b, n, err, sizeof err), OG_ERR_NOT_FOUND);
    assert_non_null(strstr(err, "blk.2.attn_kv.weight"));
    /* a wrong shape: ne0 of blk.3.attn_sinks.weight doubled */
    memcpy(b, orig, n);
    at = after_string(b, n, "blk.3.attn_sinks.weight");
    uint64_t ne0;
    memcpy(&ne0, b + at + 4, 8);
    ne0 *= 2;
    memcpy(b + at + 4, &ne0, 8);
    og_status st = load_bytes(b, n, err, sizeof err);
    assert_true(st == OG_ERR_FORMAT || st == OG_ERR_RANGE);
    print_message("wrong shape: %s\n", err);
    /* a key out of its bound: hyper_connection.count 99 */
    memcpy(b, orig, n);
    at = after_string(b, n, "deepseek4.hyper_connection.count");
    uint32_t v = 99;
    memcpy(b + at + 4, &v, 4);
    assert_int_equal(load_bytes(b, n, err, sizeof err), OG_ERR_FORMAT);
    assert_non_null(strstr(err, "hyper_connection.count"));
    print_message("bad key: %s\n", err);
    /* the model option: unknown name, bad value */
    og_model *m = load(NULL);
    assert_int_equal(og_model_set_option(m, "qat", "maybe", err, sizeof err), OG_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "maybe"));
    assert_int_equal(og_model_set_option(m, "speed", "max", err, sizeof err), OG_ERR_INVALID_ARG);
    /* tokens outside the vocabulary and a missing dispatcher: refused, nothing appended */
    og_kernels k;
    og_kernels_init(OG_ISA_SCALAR, &k);
    og_run_ctx rc = {.kern = &k, .dispatch = g_host};
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
    og_qat_op q8 = {{y, N, ROWS, N}, OG_QAT_FP8, 160};
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
    og_qat_op q4 = {{y, N, ROWS, N}, OG_QAT_FP4_HADAMARD, NH};
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
    og_qat_op bad = {{y, N, ROWS, N}, OG_QAT_FP4_HADAMARD, 96};
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
    if (argc != 2 && argc != 4) {
        fprintf(stderr, "usage: test_deepseek4 MODEL.gguf [REF_QAT_ON REF_QAT_OFF]\n");
        return 2;
    }
    g_model = argv[1];
    const char *san = getenv("OG_SANITIZED");
    if (san && !strcmp(san, "1")) memcpy(g_len, g_len_sanitized, sizeof g_len);
    if (argc == 4) {
        g_ref[0] = argv[2];
        g_ref[1] = argv[3];
    }
    og_dispatch *host;
    char err[256];
    if (og_dispatch_create(NULL, NULL, &host, err, sizeof err)) return 2;
    g_host = og_dispatch_table(host);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qat_op),           cmocka_unit_test(test_hc_mix_op),
        cmocka_unit_test(test_bad_files),        cmocka_unit_test(test_prefill_decode),
        cmocka_unit_test(test_batch_invariance), cmocka_unit_test(test_tiers_bitwise),
        cmocka_unit_test(test_against_reference),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    og_dispatch_free(host);
    return rc;
}
