/* backend (CPU): thread pool, quantized matmul on every tier against a double
 * precision product of the dequantized operands, batch invariance, the
 * element-wise ops against direct formulas, the expert op against a double
 * precision FFN, and the cpu device's streams (order, events, waits: proven with
 * its hold and settle hooks, never with timing). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kernels_fixture.h"
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "og_backend.h"
#include "og_device.h"

#include <pthread.h>
#include <sched.h>

typedef struct count_ctx {
    atomic_int calls;
    atomic_int seen_mask;
    int nth_seen[4]; /* per thread: each writes only its own */
} count_ctx;

static void count_fn(void *vctx, int ith, int nth) {
    count_ctx *c = vctx;
    atomic_fetch_add(&c->calls, 1);
    atomic_fetch_or(&c->seen_mask, 1 << ith);
    c->nth_seen[ith] = nth;
}

/* Each thread's allowed CPUs, as the kernel reports them inside the job. */
typedef struct pin_ctx {
    cpu_set_t got[3];
} pin_ctx;

static void pin_fn(void *vctx, int ith, int nth) {
    (void)nth;
    pin_ctx *c = vctx;
    pthread_getaffinity_np(pthread_self(), sizeof c->got[ith], &c->got[ith]);
}

/* Workers pinned one CPU each (the last and the first this process may use): the
 * kernel's affinity of each worker is exactly that CPU; the caller is left alone. */
static void test_pool_pinned(void **state) {
    (void)state;
    cpu_set_t mine;
    assert_int_equal(sched_getaffinity(0, sizeof mine, &mine), 0);
    int first = -1, last = -1;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &mine)) last = c, first = first < 0 ? c : first;
    int cpus[3] = {-1, last, first};
    char err[256];
    og_pool *p;
    assert_int_equal(og_pool_create(3, cpus, &p, err, sizeof err), OG_OK);
    pin_ctx c;
    memset(&c, 0, sizeof c);
    og_pool_run(p, pin_fn, &c);
    og_pool_free(p);
    for (int i = 1; i < 3; i++) {
        assert_int_equal(CPU_COUNT(&c.got[i]), 1);
        assert_true(CPU_ISSET(cpus[i], &c.got[i]));
    }
    assert_true(CPU_EQUAL(&c.got[0], &mine));
}

static void test_pool(void **state) {
    (void)state;
    char err[256];
    for (int n = 1; n <= 4; n++) {
        og_pool *p;
        assert_int_equal(og_pool_create(n, NULL, &p, err, sizeof err), OG_OK);
        assert_int_equal(og_pool_size(p), n);
        for (int rep = 0; rep < 2000; rep++) {
            count_ctx c = {0};
            og_pool_run(p, count_fn, &c);
            assert_int_equal(atomic_load(&c.calls), n);
            assert_int_equal(atomic_load(&c.seen_mask), (1 << n) - 1);
            for (int i = 0; i < n; i++) assert_int_equal(c.nth_seen[i], n);
        }
        og_pool_free(p);
    }
    og_pool *p;
    int bad[2] = {0, 100000}; /* worker 1 cannot be pinned to CPU 100000 */
    assert_int_not_equal(og_pool_create(2, bad, &p, err, sizeof err), OG_OK);
    assert_null(p);
    int ok[1] = {0};
    assert_int_equal(og_pool_create(1, ok, &p, err, sizeof err), OG_OK);
    og_pool_free(p);
    assert_int_equal(og_pool_create(0, NULL, &p, err, sizeof err), OG_ERR_INVALID_ARG);
}

static uint64_t rng = 99;
static float frand(void) { return (float)(og_rand_unit(&rng) * 2.0 - 1.0); }

static const og_ggml_type mm_types[] = {OG_TYPE_F32, OG_TYPE_F16, OG_TYPE_BF16, OG_TYPE_Q8_0, OG_TYPE_Q4_0,
                                        OG_TYPE_Q4_1, OG_TYPE_Q5_0, OG_TYPE_Q5_1, OG_TYPE_IQ4_NL, OG_TYPE_Q2_K,
                                        OG_TYPE_Q3_K, OG_TYPE_Q4_K, OG_TYPE_Q5_K, OG_TYPE_Q6_K, OG_TYPE_IQ2_XXS,
                                        OG_TYPE_MXFP4};

static void test_matmul(void **state) {
    (void)state;
    og_cpu_features f;
    og_cpu_detect(&f);
    char err[256], note[256];
    og_pool *pool;
    assert_int_equal(og_pool_create(2, NULL, &pool, err, sizeof err), OG_OK);
    const int64_t K = 512, N = 37, M = 5;
    float *wf = malloc(K * N * 4), *x = malloc(K * M * 4), *wd = malloc(K * N * 4), *xd = malloc(K * M * 4);
    float *y = malloc(N * M * 4), *y1 = malloc(N * 4);
    uint8_t *wq = malloc(K * N * 4), *xq = malloc(K * M * 4);
    for (int64_t i = 0; i < K * N; i++) wf[i] = frand();
    for (int64_t i = 0; i < K * M; i++) x[i] = 2.0f * frand();
    for (int isa = 0; isa <= OG_ISA_AVX512; isa++) {
        og_isa got;
        if (og_isa_choose(&f, og_isa_name((og_isa)isa), &got, note, sizeof note, err, sizeof err) != OG_OK) continue;
        og_kernels k;
        assert_int_equal(og_kernels_init((og_isa)isa, &k), OG_OK);
        for (size_t t = 0; t < sizeof mm_types / sizeof mm_types[0]; t++) {
            const og_type_traits *tr = og_quant_traits(mm_types[t]);
            const og_type_traits *act = og_quant_traits(tr->vec_dot_type);
            uint64_t rb;
            og_row_bytes(tr->type, K, &rb);
            for (int64_t r = 0; r < N; r++) tr->from_float(wf + r * K, wq + r * rb, K);
            og_weight w = {tr->type, wq, K, N, rb};
            size_t sb = og_cpu_matmul_scratch(tr->type, K, M);
            void *scratch = malloc(sb);
            assert_int_equal(og_cpu_matmul(&k, pool, &w, x, M, y, scratch, sb), OG_OK);
            /* reference: double product of dequantized weights and of the
             * quantized-then-dequantized activations */
            uint64_t ab;
            og_row_bytes(act->type, K, &ab);
            for (int64_t r = 0; r < N; r++) tr->to_float(wq + r * rb, wd + r * K, K);
            for (int64_t m = 0; m < M; m++) {
                act->from_float(x + m * K, xq, K);
                act->to_float(xq, xd + m * K, K);
            }
            for (int64_t m = 0; m < M; m++)
                for (int64_t r = 0; r < N; r++) {
                    double ref = 0, mag = 0;
                    for (int64_t i = 0; i < K; i++) {
                        ref += (double)wd[r * K + i] * xd[m * K + i];
                        mag += fabs((double)wd[r * K + i] * xd[m * K + i]);
                    }
                    double bound = 1e-5 * mag;
                    if (act->type == OG_TYPE_Q8_1) {
                        /* Q4_1/Q5_1 dots use s = fp16(d * sum q) of the activation
                         * block (kquants.md §5): allow its rounding, |m| |s| 2^-11. */
                        uint8_t aq[4096];
                        act->from_float(x + m * K, aq, K);
                        for (int64_t b = 0; b < K / 32; b++) {
                            uint16_t mh = 0, sh;
                            memcpy(&mh, wq + r * rb + (size_t)b * tr->type_size + 2, 2);
                            memcpy(&sh, aq + (size_t)b * sizeof(og_block_q8_1) + 2, 2);
                            bound += fabs(og_fp16_to_fp32(mh) * og_fp16_to_fp32(sh)) * 0x1p-10;
                        }
                    }
                    if (fabs(y[m * N + r] - ref) > bound)
                        fail_msg("%s %s y[%lld][%lld] = %.9g, reference %.9g", og_isa_name((og_isa)isa), tr->name,
                                 (long long)m, (long long)r, y[m * N + r], ref);
                }
            /* batch invariance: each row alone gives the same bits */
            for (int64_t m = 0; m < M; m++) {
                assert_int_equal(og_cpu_matmul(&k, m % 2 ? pool : NULL, &w, x + m * K, 1, y1, scratch, sb), OG_OK);
                if (memcmp(y1, y + m * N, N * 4)) fail_msg("%s %s: row %lld differs alone vs in a batch", og_isa_name((og_isa)isa), tr->name, (long long)m);
            }
            free(scratch);
        }
    }
    og_kernels k;
    og_kernels_init(OG_ISA_SCALAR, &k);
    og_weight bad = {OG_TYPE_IQ2_XS, wq, 256, 1, 74};
    assert_int_equal(og_cpu_matmul(&k, NULL, &bad, x, 1, y, xq, 4096), OG_ERR_UNSUPPORTED);
    og_weight small = {OG_TYPE_Q8_0, wq, 64, 1, 68};
    assert_int_equal(og_cpu_matmul(&k, NULL, &small, x, 2, y, xq, 10), OG_ERR_INVALID_ARG); /* scratch too small */
    free(wf); free(x); free(wd); free(xd); free(y); free(y1); free(wq); free(xq);
    og_pool_free(pool);
}

/* Several jobs in one run give bitwise what each gives alone. */
static void test_matmul_multi(void **state) {
    (void)state;
    og_kernels k = fx_best_kernels();
    char err[256];
    og_pool *pool;
    assert_int_equal(og_pool_create(2, NULL, &pool, err, sizeof err), OG_OK);
    static const og_ggml_type types[3] = {OG_TYPE_Q4_K, OG_TYPE_Q8_0, OG_TYPE_F32};
    static const int64_t rows[3] = {37, 5, 64}, ms[3] = {1, 3, 2};
    const int64_t K = 256;
    uint8_t *wq[3];
    float *x[3], *y[3], *y1[3], *wf = malloc(K * 64 * sizeof *wf);
    og_weight w[3];
    og_matmul_job jobs[3];
    for (int j = 0; j < 3; j++) {
        uint64_t rb;
        og_row_bytes(types[j], K, &rb);
        wq[j] = malloc(rb * rows[j]);
        for (int64_t i = 0; i < K * rows[j]; i++) wf[i] = frand();
        for (int64_t r = 0; r < rows[j]; r++) og_quantize_row(types[j], wf + r * K, wq[j] + r * rb, K);
        w[j] = (og_weight){types[j], wq[j], K, rows[j], rb};
        x[j] = malloc(K * ms[j] * sizeof(float));
        for (int64_t i = 0; i < K * ms[j]; i++) x[j][i] = frand();
        y[j] = malloc(rows[j] * ms[j] * sizeof(float));
        y1[j] = malloc(rows[j] * ms[j] * sizeof(float));
        jobs[j] = (og_matmul_job){&w[j], x[j], ms[j], y[j], OG_NUMERICS_FORK};
    }
    size_t sb = og_cpu_matmul_multi_scratch(jobs, 3);
    void *scratch = malloc(sb);
    assert_int_equal(og_cpu_matmul_multi(&k, pool, jobs, 3, scratch, sb), OG_OK);
    for (int j = 0; j < 3; j++) {
        size_t s1 = og_cpu_matmul_scratch(types[j], K, ms[j]);
        void *sc1 = malloc(s1);
        assert_int_equal(og_cpu_matmul(&k, NULL, &w[j], x[j], ms[j], y1[j], sc1, s1), OG_OK);
        assert_memory_equal(y[j], y1[j], rows[j] * ms[j] * sizeof(float));
        free(sc1);
    }
    assert_int_equal(og_cpu_matmul_multi(&k, pool, jobs, 3, scratch, sb - 1), OG_ERR_INVALID_ARG);
    /* rows given already quantized (og_act_rows, further apart than a row, x unread),
     * a job sharing another's x (quantized once), and a canonical tiled job of 9 rows
     * given its rows: each the bits of the job alone */
    {
        enum { M9 = 9 };
        float *x9 = malloc(K * M9 * sizeof(float)), *y9 = malloc(rows[0] * M9 * sizeof(float)), *y9r = malloc(rows[0] * M9 * sizeof(float));
        float *ysh = malloc(rows[0] * ms[0] * sizeof(float));
        for (int64_t i = 0; i < K * M9; i++) x9[i] = frand();
        uint64_t qb[2];
        const og_ggml_type act[2] = {og_quant_traits(types[0])->vec_dot_type, og_quant_traits(types[1])->vec_dot_type};
        og_row_bytes(act[0], K, &qb[0]);
        og_row_bytes(act[1], K, &qb[1]);
        const size_t st0 = (size_t)qb[0] + 40, st1 = (size_t)qb[1] + 24;
        uint8_t *q0 = malloc(st0 * ms[0]), *q1 = malloc(st1 * ms[1]), *q9 = malloc(st0 * M9);
        for (int64_t r = 0; r < ms[0]; r++) k.quantize_act[act[0]](x[0] + r * K, q0 + r * st0, K);
        for (int64_t r = 0; r < ms[1]; r++) k.quantize_act[act[1]](x[1] + r * K, q1 + r * st1, K);
        for (int64_t r = 0; r < M9; r++) k.quantize_act[act[0]](x9 + r * K, q9 + r * st0, K);
        og_matmul_job g5[5] = {{&w[0], NULL, ms[0], y[0], OG_NUMERICS_FORK}, {&w[1], NULL, ms[1], y[1], OG_NUMERICS_FORK},
                               {&w[2], x[2], ms[2], y[2], OG_NUMERICS_FORK}, {&w[0], x[0], ms[0], ysh, OG_NUMERICS_FORK},
                               {&w[0], NULL, M9, y9, OG_NUMERICS_CANONICAL}};
        og_matmul_job g5b[5];
        memcpy(g5b, g5, sizeof g5);
        og_act_rows given[5] = {{q0, st0}, {q1, st1}, {NULL, 0}, {NULL, 0}, {q9, st0}};
        og_buf ws = {0};
        memset(y[0], 0xff, rows[0] * ms[0] * sizeof(float));
        assert_int_equal(og_cpu_matmul_multi_given_ws(&k, pool, g5, 5, given, &ws), OG_OK);
        for (int j = 0; j < 3; j++) assert_memory_equal(y[j], y1[j], rows[j] * ms[j] * sizeof(float));
        assert_memory_equal(ysh, y1[0], rows[0] * ms[0] * sizeof(float));
        og_matmul_job alone = {&w[0], x9, M9, y9r, OG_NUMERICS_CANONICAL};
        assert_int_equal(og_cpu_matmul_multi_ws(&k, pool, &alone, 1, &ws), OG_OK);
        assert_memory_equal(y9, y9r, rows[0] * M9 * sizeof(float));
        /* bad: rows given closer than a quantized row, or to a job of f32 rows */
        given[0].xq_row = (size_t)qb[0] - 1;
        assert_int_equal(og_cpu_matmul_multi_given_ws(&k, pool, g5b, 5, given, &ws), OG_ERR_INVALID_ARG);
        given[0].xq_row = st0;
        given[2] = (og_act_rows){q0, st0};
        g5b[2].numerics = OG_NUMERICS_CANONICAL; /* F32 canonical: f32 rows */
        assert_int_equal(og_cpu_matmul_multi_given_ws(&k, pool, g5b, 5, given, &ws), OG_ERR_INVALID_ARG);
        og_buf_free(&ws);
        free(x9), free(y9), free(y9r), free(ysh), free(q0), free(q1), free(q9);
    }
    for (int j = 0; j < 3; j++) {
        free(wq[j]);
        free(x[j]);
        free(y[j]);
        free(y1[j]);
    }
    free(wf);
    free(scratch);
    og_pool_free(pool);
}

/* OG_NUMERICS_CANONICAL: on every tier, each output of a quantized type is the
 * scalar statement of the canonical order (og_type_traits.vec_dot_canonical) of
 * the weight row and the activation row quantized alone, bit for bit, whatever
 * the batch or the pool (so every tier, batch and thread count agree); the fork
 * stays within the float-order bound of it (same integer sums, same activation
 * bytes). Float types (F16) give og_dot_f32_device_ref of the f32 rows. */
static void test_matmul_canonical(void **state) {
    (void)state;
    og_cpu_features f;
    og_cpu_detect(&f);
    char err[256], note[128];
    og_pool *pool;
    assert_int_equal(og_pool_create(2, NULL, &pool, err, sizeof err), OG_OK);
    static const og_ggml_type types[] = {OG_TYPE_Q8_0, OG_TYPE_Q2_K, OG_TYPE_Q3_K, OG_TYPE_Q4_K, OG_TYPE_Q6_K, OG_TYPE_F16};
    const int n_types = (int)(sizeof types / sizeof types[0]);
    /* K: ten k-quant blocks, 80 Q8_0 blocks (more than 32 lanes); m: 17 rows (the tiled
     * product where a tier has it), the first 5 again as a job of their own (vec_dot4
     * and one by one) */
    const int64_t K = 2560, rows = 21, m = 17, m5 = 5;
    float *wf = malloc(K * rows * sizeof *wf), *x = malloc(K * m * sizeof *x), *row = malloc(K * sizeof *row);
    float *xa = malloc(K * sizeof *xa);
    float *yd = malloc(rows * m * sizeof *yd), *y1 = malloc(rows * sizeof *y1), *yf = malloc(rows * m * sizeof *yf);
    float *y5 = malloc(rows * m5 * sizeof *y5);
    uint8_t *xq = malloc(K * 2);
    for (int64_t i = 0; i < K * m; i++) x[i] = frand();
    int checked = 0;
    for (int isa = OG_ISA_SCALAR; isa <= OG_ISA_AVX512; isa++) {
        og_isa got;
        if (og_isa_choose(&f, og_isa_name((og_isa)isa), &got, note, sizeof note, err, sizeof err) != OG_OK) continue;
        og_kernels k;
        assert_int_equal(og_kernels_init((og_isa)isa, &k), OG_OK);
        for (int t = 0; t < n_types; t++) {
            const og_type_traits *tr = og_quant_traits(types[t]), *act = og_quant_traits(tr->vec_dot_type);
            uint64_t rb;
            og_row_bytes(types[t], K, &rb);
            uint8_t *wq = malloc(rb * rows);
            for (int64_t i = 0; i < K * rows; i++) wf[i] = frand();
            for (int64_t r = 0; r < rows; r++) og_quantize_row(types[t], wf + r * K, wq + r * rb, K);
            og_weight w = {types[t], wq, K, rows, rb};
            og_matmul_job jd = {&w, x, m, yd, OG_NUMERICS_CANONICAL}, jf = {&w, x, m, yf, OG_NUMERICS_FORK};
            size_t sd = og_cpu_matmul_multi_scratch(&jd, 1), sf = og_cpu_matmul_multi_scratch(&jf, 1);
            void *scratch = malloc((sd > sf ? sd : sf) + 1);
            assert_int_equal(og_cpu_matmul_multi(&k, pool, &jd, 1, scratch, sd), OG_OK);
            assert_int_equal(og_cpu_matmul_multi(&k, pool, &jf, 1, scratch, sf), OG_OK);
            og_matmul_job j5 = {&w, x, m5, y5, OG_NUMERICS_CANONICAL};
            assert_int_equal(og_cpu_matmul_multi(&k, pool, &j5, 1, scratch, sd), OG_OK);
            assert_memory_equal(y5, yd, (size_t)(rows * m5) * sizeof *y5);
            for (int64_t a = 0; a < m; a++) {
                og_matmul_job one = {&w, x + a * K, 1, y1, OG_NUMERICS_CANONICAL}; /* the same row alone, one thread */
                assert_int_equal(og_cpu_matmul_multi(&k, NULL, &one, 1, scratch, og_cpu_matmul_multi_scratch(&one, 1)), OG_OK);
                assert_memory_equal(y1, yd + a * rows, rows * sizeof *y1);
                if (tr->vec_dot_canonical) {
                    k.quantize_act[act->type](x + a * K, xq, K);
                    act->to_float(xq, xa, K);
                }
                for (int64_t r = 0; r < rows; r++) {
                    assert_int_equal(og_dequantize_row(types[t], wq + r * rb, row, K), OG_OK);
                    float want;
                    if (tr->vec_dot_canonical) tr->vec_dot_canonical(K, &want, wq + r * rb, xq);
                    else want = og_dot_f32_device_ref(row, x + a * K, K);
                    if (memcmp(&want, &yd[a * rows + r], sizeof want))
                        fail_msg("%s %s row %lld act %lld: canonical %.9g, the statement %.9g", og_isa_name((og_isa)isa), tr->name,
                                 (long long)r, (long long)a, yd[a * rows + r], want);
                    if (!tr->vec_dot_canonical) continue;
                    double mag = 0;
                    for (int64_t i = 0; i < K; i++) mag += fabs((double)row[i] * xa[i]);
                    assert_true(fabs((double)yf[a * rows + r] - (double)want) <= og_quant_dot_tolerance(types[t]) * mag);
                }
            }
            checked++;
            free(scratch);
            free(wq);
        }
    }
    assert_true(checked >= n_types); /* the scalar tier at least */
    og_matmul_job too_long = {&(og_weight){OG_TYPE_F32, wf, OG_NUMERICS_CANONICAL_MAX_K + 32, 1, 0}, x, 1, yd,
                              OG_NUMERICS_CANONICAL};
    og_kernels best = fx_best_kernels();
    assert_int_equal(og_cpu_matmul_multi(&best, pool, &too_long, 1, NULL, 0), OG_ERR_UNSUPPORTED);
    free(wf);
    free(x);
    free(xa);
    free(xq);
    free(row);
    free(yd);
    free(y1);
    free(yf);
    free(y5);
    og_pool_free(pool);
}

static void test_ops(void **state) {
    (void)state;
    float x[100], w[100], y[100];
    double ss = 0;
    for (int i = 0; i < 100; i++) {
        x[i] = frand() * 3;
        w[i] = 1 + 0.1f * frand();
        ss += (double)x[i] * x[i];
    }
    og_rmsnorm(y, x, w, 100, 1e-6f);
    for (int i = 0; i < 100; i++) assert_true(fabs(y[i] - w[i] * x[i] / sqrt(ss / 100 + 1e-6)) < 1e-6);
    /* softmax: exact values for logits 0, ln 2, ln 3 */
    float s[3] = {0, logf(2), logf(3)};
    og_softmax(s, 3);
    assert_true(fabsf(s[0] - 1 / 6.0f) < 1e-7f && fabsf(s[1] - 2 / 6.0f) < 1e-7f && fabsf(s[2] - 3 / 6.0f) < 1e-7f);
    float big[2] = {1000, 999}; /* no overflow */
    og_softmax(big, 2);
    assert_true(fabsf(big[0] - 1 / (1 + expf(-1))) < 1e-6f);
    float g[3] = {0, 2, -3}, u[3] = {5, 1, 2}, o[3];
    og_swiglu(o, g, u, 3);
    assert_true(o[0] == 0 && fabsf(o[1] - 2 / (1 + expf(-2))) < 1e-6f && fabsf(o[2] - 2 * (-3 / (1 + expf(3)))) < 1e-6f);
    /* V4's clamp at 1: gate 2 -> 1, up 5 -> 1 and -4 -> -1; inside it, plain SwiGLU */
    float cg[3] = {2, 0.5f, -3}, cu[3] = {5, 0.5f, -4}, co[3];
    og_swiglu_clamp(co, cg, cu, 3, 1.0f);
    assert_true(fabsf(co[0] - 1 / (1 + expf(-1))) < 1e-6f);
    assert_true(fabsf(co[1] - 0.5f / (1 + expf(-0.5f)) * 0.5f) < 1e-6f);
    assert_true(fabsf(co[2] - (-3 / (1 + expf(3))) * -1) < 1e-6f);
    float t[8] = {1, 5, 3, 5, NAN, -1, 3, 0};
    int32_t idx[4];
    og_topk(t, 8, 4, idx);
    assert_int_equal(idx[0], 1); /* tie 5/5: lower index first */
    assert_int_equal(idx[1], 3);
    assert_int_equal(idx[2], 2);
    assert_int_equal(idx[3], 6);
}

/* deepseek2.md §4: d_rope 64, n_ctx_orig 4096, base 10000, beta 32/1 -> lo 10,
 * hi 23: pairs 0-10 keep the original frequency, 23-31 are divided by s. */
static void test_rope_yarn(void **state) {
    (void)state;
    og_rope r = {.d_rope = 64, .base = 10000, .freq_scale = 1.0f / 40, .ext_factor = 1, .n_ctx_orig = 4096,
                 .beta_fast = 32, .beta_slow = 1, .mscale = 1};
    float th[32];
    const int64_t pos = 1000;
    og_rope_angles(&r, pos, th);
    for (int i = 0; i < 32; i++) {
        double ext = (double)pos * pow(10000.0, -2.0 * i / 64.0);
        if (i <= 10) assert_true(fabs(th[i] - ext) <= 1e-5 * ext);
        if (i >= 23) assert_true(fabs(th[i] - ext / 40) <= 1e-5 * ext / 40);
        if (i == 16) { /* ramp = 1 - (16 - 10) / 13 */
            double ramp = 1 - 6.0 / 13;
            double want = ext / 40 * (1 - ramp) + ext * ramp;
            assert_true(fabs(th[i] - want) <= 1e-5 * want);
        }
    }
    /* rotation: pairs keep their norm times mscale, angle as computed */
    r.mscale = 1.5f;
    float v[2 * 64], v0[2 * 64];
    for (int i = 0; i < 128; i++) v0[i] = v[i] = frand();
    og_rope_apply(&r, v, 2, 64, pos);
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < 32; i++) {
            double a = v0[h * 64 + 2 * i], b = v0[h * 64 + 2 * i + 1];
            double ra = 1.5 * (a * cos(th[i]) - b * sin(th[i])), rb = 1.5 * (a * sin(th[i]) + b * cos(th[i]));
            assert_true(fabs(v[h * 64 + 2 * i] - ra) < 1e-4 && fabs(v[h * 64 + 2 * i + 1] - rb) < 1e-4);
        }
    /* no scaling: theta = pos * base^(-2i/d) */
    og_rope plain = {.d_rope = 16, .base = 10000, .freq_scale = 1, .ext_factor = 0, .mscale = 1};
    og_rope_angles(&plain, 7, th);
    for (int i = 0; i < 8; i++) assert_true(fabs(th[i] - 7 * pow(10000.0, -2.0 * i / 16)) < 1e-5);
}

/* ---- the expert op ------------------------------------------------------ */

/* y = down(silu(gate x) * up x) in double from the dequantized weights; with
 * clamp > 0, silu(min(g, clamp)) * clamp(u, -clamp, clamp). */
static void ffn_ref(const og_weight *g, const og_weight *u, const og_weight *dn, const float *x, double clamp,
                    double *y) {
    const int64_t D = g->K, F = g->n_rows;
    float *row = malloc((size_t)(D > F ? D : F) * sizeof *row);
    double *h = malloc((size_t)F * sizeof *h);
    for (int64_t f = 0; f < F; f++) {
        double a = 0, b = 0;
        og_dequantize_row(g->type, (const uint8_t *)g->data + (size_t)f * g->row_bytes, row, D);
        for (int64_t i = 0; i < D; i++) a += (double)row[i] * x[i];
        og_dequantize_row(u->type, (const uint8_t *)u->data + (size_t)f * u->row_bytes, row, D);
        for (int64_t i = 0; i < D; i++) b += (double)row[i] * x[i];
        if (clamp > 0) {
            a = fmin(a, clamp);
            b = fmax(-clamp, fmin(b, clamp));
        }
        h[f] = a / (1 + exp(-a)) * b;
    }
    for (int64_t o = 0; o < D; o++) {
        og_dequantize_row(dn->type, (const uint8_t *)dn->data + (size_t)o * dn->row_bytes, row, F);
        double acc = 0;
        for (int64_t f = 0; f < F; f++) acc += (double)row[f] * h[f];
        y[o] = acc;
    }
    free(row);
    free(h);
}

/* Three Q8_0 experts (D 64, F 96) in device slots in the order 2, 0, 1; groups
 * (slot 0: 3 rows fork, slot 2: 1 row canonical, slot 0 again: 2 rows canonical):
 * each output row within a bound of the double FFN, and bitwise what
 * og_cpu_experts gives on the host with the same numerics. */
static void test_device_experts(void **state) {
    (void)state;
    og_kernels k = fx_best_kernels();
    char err[256];
    enum { D = 64, F = 96, NE = 3, ROWS = 6 };
    uint64_t rbd, rbf;
    og_row_bytes(OG_TYPE_Q8_0, D, &rbd);
    og_row_bytes(OG_TYPE_Q8_0, F, &rbf);
    const uint64_t gate_bytes = F * rbd, down_bytes = D * rbf, slot_bytes = 2 * gate_bytes + down_bytes;
    uint8_t *host = malloc(NE * slot_bytes); /* expert e at e * slot_bytes: gate, up, down */
    float *wf = malloc(F * D * sizeof *wf);
    for (int e = 0; e < NE; e++) {
        uint8_t *p = host + e * slot_bytes;
        for (int part = 0; part < 3; part++) {
            const int64_t rows = part < 2 ? F : D, K = part < 2 ? D : F;
            const uint64_t rb = part < 2 ? rbd : rbf;
            for (int64_t i = 0; i < rows * K; i++) wf[i] = frand() * 0.2f;
            for (int64_t r = 0; r < rows; r++) og_quantize_row(OG_TYPE_Q8_0, wf + r * K, p + r * rb, K);
            p += rows * rb;
        }
    }
    float x[ROWS * D], y[ROWS * D], yh[ROWS * D];
    for (int i = 0; i < ROWS * D; i++) x[i] = frand();
    og_device *dev;
    assert_int_equal(og_device_cpu_create(1 << 20, 2, &k, &dev, err, sizeof err), OG_OK);
    const og_device_ops *ops = dev->ops;
    void *arena, *dx, *dy;
    assert_int_equal(ops->alloc(dev, NE * slot_bytes, &arena, err, sizeof err), OG_OK);
    assert_int_equal(ops->alloc(dev, sizeof x, &dx, err, sizeof err), OG_OK);
    assert_int_equal(ops->alloc(dev, sizeof y, &dy, err, sizeof err), OG_OK);
    og_stream *s;
    assert_int_equal(ops->stream_create(dev, &s, err, sizeof err), OG_OK);
    static const int slot_expert[NE] = {2, 0, 1};
    for (int j = 0; j < NE; j++)
        assert_int_equal(ops->copy_to_device(dev, s, (uint8_t *)arena + j * slot_bytes, host + slot_expert[j] * slot_bytes,
                                             slot_bytes, err, sizeof err),
                         OG_OK);
    og_expert_op op = {.slots = {.base = arena, .slot_bytes = slot_bytes, .n_slots = NE,
                                 .gate = {OG_TYPE_Q8_0, NULL, D, F, rbd}, .up = {OG_TYPE_Q8_0, NULL, D, F, rbd},
                                 .down = {OG_TYPE_Q8_0, NULL, F, D, rbf},
                                 .gate_off = 0, .up_off = gate_bytes, .down_off = 2 * gate_bytes}};
    const og_expert_group groups[3] = {{0, 3, OG_NUMERICS_FORK}, {2, 1, OG_NUMERICS_CANONICAL}, {0, 2, OG_NUMERICS_CANONICAL}};
    op.groups = groups;
    op.n_groups = 3;
    op.x = dx;
    op.y = dy;
    og_event ev;
    assert_int_equal(ops->copy_to_device(dev, s, dx, x, sizeof x, err, sizeof err), OG_OK);
    assert_int_equal(ops->experts(dev, s, &op, err, sizeof err), OG_OK);
    assert_int_equal(ops->copy_to_host(dev, s, y, dy, sizeof y, err, sizeof err), OG_OK);
    assert_int_equal(ops->event_record(dev, s, &ev, err, sizeof err), OG_OK);
    assert_int_equal(ops->event_wait(dev, ev, err, sizeof err), OG_OK);
    /* the host path on its own pool: same bits */
    og_pool *pool;
    assert_int_equal(og_pool_create(3, NULL, &pool, err, sizeof err), OG_OK);
    og_expert_job jobs[3];
    int row = 0;
    for (int g = 0; g < 3; g++) {
        const uint8_t *p = host + slot_expert[groups[g].slot] * slot_bytes;
        jobs[g] = (og_expert_job){op.slots.gate, op.slots.up, op.slots.down, x + row * D, groups[g].n_rows, yh + row * D,
                                  groups[g].numerics, 0};
        jobs[g].gate.data = p;
        jobs[g].up.data = p + gate_bytes;
        jobs[g].down.data = p + 2 * gate_bytes;
        row += groups[g].n_rows;
    }
    assert_int_equal(og_cpu_experts(&k, pool, jobs, 3), OG_OK);
    assert_memory_equal(y, yh, sizeof y);
    /* against the double FFN: both numerics quantize the activations to Q8_0 (the
     * fork's block order, or the canonical one), so one bound for both */
    for (int r = 0, g = 0, left = groups[0].n_rows; r < ROWS; r++) {
        if (!left) left = groups[++g].n_rows;
        left--;
        double ref[D], scale = 0, worst = 0;
        ffn_ref(&jobs[g].gate, &jobs[g].up, &jobs[g].down, x + r * D, 0, ref);
        for (int i = 0; i < D; i++) {
            scale = fmax(scale, fabs(ref[i]));
            worst = fmax(worst, fabs(ref[i] - y[r * D + i]));
        }
        assert_true(scale > 0);
        assert_true(worst <= 0.03 * scale);
    }
    /* V4's clamped SwiGLU, at a limit the products reach: the same bits as the
     * host path, within the bound of the double FFN, and not the plain result */
    float yc[ROWS * D];
    op.swiglu_clamp = 0.25f;
    assert_int_equal(ops->experts(dev, s, &op, err, sizeof err), OG_OK);
    assert_int_equal(ops->copy_to_host(dev, s, yc, dy, sizeof yc, err, sizeof err), OG_OK);
    assert_int_equal(ops->event_record(dev, s, &ev, err, sizeof err), OG_OK);
    assert_int_equal(ops->event_wait(dev, ev, err, sizeof err), OG_OK);
    for (int g = 0; g < 3; g++) jobs[g].swiglu_clamp = 0.25f;
    assert_int_equal(og_cpu_experts(&k, pool, jobs, 3), OG_OK);
    assert_memory_equal(yc, yh, sizeof yc);
    assert_true(memcmp(yc, y, sizeof y) != 0);
    {
        double ref[D], scale = 0, worst = 0;
        ffn_ref(&jobs[1].gate, &jobs[1].up, &jobs[1].down, x + 3 * D, 0.25, ref); /* row 3: group 1, canonical (Q8_0 activations) */
        for (int i = 0; i < D; i++) {
            scale = fmax(scale, fabs(ref[i]));
            worst = fmax(worst, fabs(ref[i] - yc[3 * D + i]));
        }
        assert_true(scale > 0 && worst <= 0.03 * scale);
    }
    op.swiglu_clamp = -1;
    assert_int_equal(ops->experts(dev, s, &op, err, sizeof err), OG_ERR_INVALID_ARG);
    jobs[0].swiglu_clamp = NAN;
    assert_int_equal(og_cpu_experts(&k, pool, jobs, 1), OG_ERR_INVALID_ARG);
    jobs[0].swiglu_clamp = 0;
    op.swiglu_clamp = 0;
    /* bad ops refused at once */
    og_expert_group bad = {NE, 1, OG_NUMERICS_FORK};
    op.groups = &bad;
    op.n_groups = 1;
    assert_int_equal(ops->experts(dev, s, &op, err, sizeof err), OG_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "slot 3 of 3"));
    bad = (og_expert_group){0, 0, OG_NUMERICS_FORK};
    assert_int_equal(ops->experts(dev, s, &op, err, sizeof err), OG_ERR_INVALID_ARG);
    og_device *bare; /* without kernels: no compute */
    assert_int_equal(og_device_cpu_create(1024, 1, NULL, &bare, err, sizeof err), OG_OK);
    assert_int_equal(bare->ops->experts(bare, s, &op, err, sizeof err), OG_ERR_UNSUPPORTED);
    og_device_destroy(bare);
    assert_int_equal(og_device_cpu_create(1024, 0, NULL, &bare, err, sizeof err), OG_ERR_INVALID_ARG);
    /* bad shapes for the host path */
    jobs[0].down.K = F + 32;
    assert_int_equal(og_cpu_experts(&k, pool, jobs, 1), OG_ERR_INVALID_ARG);
    og_pool_free(pool);
    ops->stream_destroy(dev, s);
    ops->free(dev, arena);
    ops->free(dev, dx);
    ops->free(dev, dy);
    og_device_destroy(dev);
    free(host);
    free(wf);
}

/* ---- streams and events ---------------------------------------------------- */

typedef struct trace_log {
    pthread_mutex_t mu;
    int n;
    struct {
        int stream;
        og_cpu_op_kind kind;
        bool done;
    } e[64];
} trace_log;

static void trace_fn(void *ctx, int stream, og_cpu_op_kind kind, bool done) {
    trace_log *t = ctx;
    pthread_mutex_lock(&t->mu);
    if (t->n < 64) {
        t->e[t->n].stream = stream;
        t->e[t->n].kind = kind;
        t->e[t->n].done = done;
        t->n++;
    }
    pthread_mutex_unlock(&t->mu);
}

static void test_device_streams(void **state) {
    (void)state;
    char err[256];
    og_device *dev;
    assert_int_equal(og_device_cpu_create(4096, 1, NULL, &dev, err, sizeof err), OG_OK);
    const og_device_ops *ops = dev->ops;
    trace_log tl = {.mu = PTHREAD_MUTEX_INITIALIZER};
    assert_int_equal(og_device_cpu_trace(dev, trace_fn, &tl), OG_OK);
    og_stream *s, *t;
    assert_int_equal(ops->stream_create(dev, &s, err, sizeof err), OG_OK);
    assert_int_equal(ops->stream_create(dev, &t, err, sizeof err), OG_OK);
    void *da, *big;
    assert_int_equal(ops->alloc(dev, 1024, &da, err, sizeof err), OG_OK);
    assert_int_equal(ops->alloc(dev, 4096, &big, err, sizeof err), OG_ERR_NOMEM); /* beyond the budget */
    assert_non_null(strstr(err, "in use"));
    uint8_t src[3][1024], dst[3][1024];
    for (int i = 0; i < 3; i++) memset(src[i], 0x10 + i, sizeof src[i]);
    memset(dst, 0, sizeof dst);
    /* one stream runs in issue order: each copy back sees the copy before it */
    og_event ev;
    assert_int_equal(ops->copy_to_device(dev, s, da, src[0], 1024, err, sizeof err), OG_OK);
    assert_int_equal(ops->copy_to_host(dev, s, dst[0], da, 1024, err, sizeof err), OG_OK);
    assert_int_equal(ops->copy_to_device(dev, s, da, src[1], 1024, err, sizeof err), OG_OK);
    assert_int_equal(ops->copy_to_host(dev, s, dst[1], da, 1024, err, sizeof err), OG_OK);
    assert_int_equal(ops->event_record(dev, s, &ev, err, sizeof err), OG_OK);
    assert_int_equal(ops->event_wait(dev, ev, err, sizeof err), OG_OK);
    assert_true(ops->event_done(dev, ev));
    assert_true(ops->event_done(dev, 0));
    assert_memory_equal(dst[0], src[0], 1024);
    assert_memory_equal(dst[1], src[1], 1024);
    assert_int_equal(dev->pcie_bytes, 2048); /* host -> device only */
    static const og_cpu_op_kind issued[5] = {OG_CPU_OP_COPY_TO_DEVICE, OG_CPU_OP_COPY_TO_HOST, OG_CPU_OP_COPY_TO_DEVICE,
                                             OG_CPU_OP_COPY_TO_HOST, OG_CPU_OP_RECORD};
    pthread_mutex_lock(&tl.mu);
    assert_int_equal(tl.n, 10);
    for (int i = 0; i < 10; i++) { /* start, done, start, done ...: never two at once */
        assert_int_equal(tl.e[i].stream, 0);
        assert_int_equal(tl.e[i].kind, issued[i / 2]);
        assert_int_equal(tl.e[i].done, i % 2 == 1);
    }
    tl.n = 0;
    pthread_mutex_unlock(&tl.mu);
    /* host wait and stream wait: s's copy is held; t waits on s's event, then
     * copies back. t can make no progress (settled) and its event stays pending
     * until the held copy is released; then t reads what s wrote. */
    assert_int_equal(og_device_cpu_hold(dev, OG_CPU_OP_COPY_TO_DEVICE), OG_OK);
    og_event es, et;
    assert_int_equal(ops->copy_to_device(dev, s, da, src[2], 1024, err, sizeof err), OG_OK);
    assert_int_equal(ops->event_record(dev, s, &es, err, sizeof err), OG_OK);
    assert_int_equal(ops->stream_wait(dev, t, es, err, sizeof err), OG_OK);
    assert_int_equal(ops->copy_to_host(dev, t, dst[2], da, 1024, err, sizeof err), OG_OK);
    assert_int_equal(ops->event_record(dev, t, &et, err, sizeof err), OG_OK);
    assert_int_equal(og_device_cpu_wait_held(dev), OG_OK);
    assert_int_equal(og_device_cpu_settle(dev, t), OG_OK);
    assert_false(ops->event_done(dev, es));
    assert_false(ops->event_done(dev, et));
    pthread_mutex_lock(&tl.mu);
    for (int i = 0; i < tl.n; i++) assert_int_not_equal(tl.e[i].kind, OG_CPU_OP_COPY_TO_HOST); /* t has not copied */
    pthread_mutex_unlock(&tl.mu);
    assert_int_equal(og_device_cpu_release(dev), OG_OK);
    assert_int_equal(ops->event_wait(dev, et, err, sizeof err), OG_OK);
    assert_true(ops->event_done(dev, es));
    assert_memory_equal(dst[2], src[2], 1024);
    /* an event of a destroyed stream is complete */
    ops->stream_destroy(dev, t);
    assert_true(ops->event_done(dev, et));
    assert_int_equal(ops->event_wait(dev, et, err, sizeof err), OG_OK);
    /* the hooks refuse another device */
    og_device fake = {.ops = NULL};
    assert_int_equal(og_device_cpu_hold(&fake, OG_CPU_OP_EXPERTS), OG_ERR_INVALID_ARG);
    assert_int_equal(og_device_cpu_trace(dev, NULL, NULL), OG_OK);
    ops->stream_destroy(dev, s);
    ops->free(dev, da);
    uint64_t fr, tot;
    assert_int_equal(ops->mem_info(dev, &fr, &tot), OG_OK);
    assert_int_equal(fr, tot);
    og_device_destroy(dev);
    assert_true(og_device_cpu_default_threads() >= 1);
}


/* ---- the forward pass's ops: each op on the cpu device (its stream thread and
 * pool) and on the host device gives bitwise what the kernel it wraps gives on
 * the host; the router and MLA attention also against direct formulas ---- */

typedef struct dv_ctx {
    og_device *dev;
    og_stream *s;
    const og_device_ops *ops;
    char err[256];
    void *allocs[64]; /* freed at the end */
    int n_allocs;
} dv_ctx;

static void *dv_up(dv_ctx *c, const void *src, size_t bytes) {
    void *p;
    assert_int_equal(c->ops->alloc(c->dev, bytes, &p, c->err, sizeof c->err), OG_OK);
    assert_true(c->n_allocs < 64);
    c->allocs[c->n_allocs++] = p;
    if (src) assert_int_equal(c->ops->copy_to_device(c->dev, c->s, p, src, bytes, c->err, sizeof c->err), OG_OK);
    return p;
}

/* Waits for everything issued on the stream so far (a copy_to_device reads its
 * host source when it runs, not when it is issued). */
static void dv_sync(dv_ctx *c) {
    og_event ev;
    assert_int_equal(c->ops->event_record(c->dev, c->s, &ev, c->err, sizeof c->err), OG_OK);
    assert_int_equal(c->ops->event_wait(c->dev, ev, c->err, sizeof c->err), OG_OK);
}

static void dv_down(dv_ctx *c, void *dst, const void *src, size_t bytes) {
    assert_int_equal(c->ops->copy_to_host(c->dev, c->s, dst, src, bytes, c->err, sizeof c->err), OG_OK);
    dv_sync(c);
}

static void assert_same_bits(const void *a, const void *b, size_t bytes) { assert_memory_equal(a, b, bytes); }

/* Router reference written from deepseek2.md §5 in double: scores, the kept
 * groups by the sum of their two best, top-k by score + bias (ties: lower id). */
static void route_ref(const float *lg, const float *bias, int E, int k, int gating, int G, int G_used, bool norm,
                      float scale, int32_t *ids, double *w) {
    double sc[64], sel[64];
    double mx = -INFINITY, sum = 0;
    for (int e = 0; e < E; e++) mx = lg[e] > mx ? lg[e] : mx;
    for (int e = 0; e < E; e++) sum += exp((double)lg[e] - mx);
    for (int e = 0; e < E; e++) sc[e] = gating == 1 ? exp((double)lg[e] - mx) / sum : 1.0 / (1.0 + exp(-(double)lg[e]));
    for (int e = 0; e < E; e++) sel[e] = sc[e] + (bias ? bias[e] : 0);
    if (G > 1) {
        const int per = E / G;
        double gs[64];
        bool kept[64] = {0};
        for (int g = 0; g < G; g++) {
            double b1 = -INFINITY, b2 = -INFINITY;
            for (int e = g * per; e < (g + 1) * per; e++)
                if (sel[e] > b1) {
                    b2 = b1;
                    b1 = sel[e];
                } else if (sel[e] > b2) {
                    b2 = sel[e];
                }
            gs[g] = b1 + b2;
        }
        for (int j = 0; j < G_used; j++) {
            int best = -1;
            for (int g = 0; g < G; g++)
                if (!kept[g] && (best < 0 || gs[g] > gs[best])) best = g;
            kept[best] = true;
        }
        for (int e = 0; e < E; e++)
            if (!kept[e / per]) sel[e] = -INFINITY;
    }
    double tot = 0;
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            bool taken = false;
            for (int t = 0; t < j; t++) taken |= ids[t] == e;
            if (!taken && (best < 0 || sel[e] > sel[best])) best = e;
        }
        ids[j] = best;
        tot += sc[best];
    }
    for (int j = 0; j < k; j++) w[j] = (norm ? sc[ids[j]] / tot : sc[ids[j]]) * scale;
}

/* deepseek2's legacy attn_kv_b products (og_mla_kv_b_op) on dev: q_abs and o
 * of a 48-token chunk (enough work for the pool) against double references
 * from deepseek2.md §3's absorbed form (the float sum within 1e-5 of the
 * double one; the expand, a double sum in order, to the float rounding), and
 * each token alone gives the chunk's bits (no dependence on the chunk or the
 * pool); a head without value rows is refused. */
static void check_kv_b_on(og_device *dev) {
    dv_ctx c = {.dev = dev, .ops = dev->ops};
    assert_non_null(c.ops->mla_kv_b);
    assert_int_equal(c.ops->stream_create(dev, &c.s, c.err, sizeof c.err), OG_OK);
    enum { H = 3, DN = 5, DV = 4, RK = 32, TC = 48, CH = 64, DQK = DN + 3 };
    float *kvb = malloc(H * (DN + DV) * RK * sizeof *kvb), *q = malloc(TC * H * DQK * sizeof *q);
    float *ctx = malloc(H * CH * RK * sizeof *ctx), *qa = malloc(H * CH * RK * sizeof *qa);
    float *o = malloc(TC * H * DV * sizeof *o), *one = malloc(H * CH * RK * sizeof *one);
    for (int i = 0; i < H * (DN + DV) * RK; i++) kvb[i] = frand();
    for (int i = 0; i < TC * H * DQK; i++) q[i] = frand();
    for (int i = 0; i < H * CH * RK; i++) ctx[i] = frand();
    float *dkvb = dv_up(&c, kvb, H * (DN + DV) * RK * sizeof *kvb), *dq = dv_up(&c, q, TC * H * DQK * sizeof *q);
    float *dctx = dv_up(&c, ctx, H * CH * RK * sizeof *ctx), *dqa = dv_up(&c, NULL, H * CH * RK * sizeof *qa);
    float *do_ = dv_up(&c, NULL, TC * H * DV * sizeof *o);
    /* q [t][h][d_qk] (q_nope its first d_nope), q_abs [h][CH][r_kv]; ctx [h][CH][r_kv], o [t][h][d_v] */
    og_mla_kv_b_op ab = {false, TC, H, DN, DV, RK, dkvb, dq, H * DQK, DQK, dqa, RK, CH * RK};
    og_mla_kv_b_op ex = {true, TC, H, DN, DV, RK, dkvb, dctx, RK, CH * RK, do_, H * DV, DV};
    assert_int_equal(c.ops->mla_kv_b(dev, c.s, &ab, c.err, sizeof c.err), OG_OK);
    assert_int_equal(c.ops->mla_kv_b(dev, c.s, &ex, c.err, sizeof c.err), OG_OK);
    dv_down(&c, qa, dqa, H * CH * RK * sizeof *qa);
    dv_down(&c, o, do_, TC * H * DV * sizeof *o);
    for (int h = 0; h < H; h++)
        for (int t = 0; t < TC; t++) {
            for (int r = 0; r < RK; r++) {
                double ref = 0, mag = 0;
                for (int d = 0; d < DN; d++) {
                    const double p = (double)kvb[(h * (DN + DV) + d) * RK + r] * q[t * H * DQK + h * DQK + d];
                    ref += p;
                    mag += fabs(p);
                }
                assert_true(fabs(qa[h * CH * RK + t * RK + r] - ref) <= 1e-6 * mag + 1e-12);
            }
            for (int j = 0; j < DV; j++) {
                double ref = 0;
                for (int r = 0; r < RK; r++)
                    ref += (double)kvb[(h * (DN + DV) + DN + j) * RK + r] * ctx[h * CH * RK + t * RK + r];
                assert_true(o[t * H * DV + h * DV + j] == (float)ref);
            }
        }
    for (int t = 0; t < TC; t += 13) { /* token t alone: the chunk's bits */
        og_mla_kv_b_op a1 = ab, e1 = ex;
        a1.n_tok = e1.n_tok = 1;
        a1.x = dq + t * H * DQK;
        a1.y = dqa; /* head h of the one token at dqa + h CH r_kv */
        e1.x = dctx + t * RK;
        e1.y = do_;
        assert_int_equal(c.ops->mla_kv_b(dev, c.s, &a1, c.err, sizeof c.err), OG_OK);
        dv_down(&c, one, dqa, H * CH * RK * sizeof *one);
        for (int h = 0; h < H; h++) assert_same_bits(one + h * CH * RK, qa + h * CH * RK + t * RK, RK * sizeof(float));
        assert_int_equal(c.ops->mla_kv_b(dev, c.s, &e1, c.err, sizeof c.err), OG_OK);
        dv_down(&c, one, do_, H * DV * sizeof *one);
        assert_same_bits(one, o + t * H * DV, H * DV * sizeof(float));
    }
    ex.d_v = 0;
    assert_int_equal(c.ops->mla_kv_b(dev, c.s, &ex, c.err, sizeof c.err), OG_ERR_INVALID_ARG);
    assert_non_null(strstr(c.err, "kv_b"));
    c.ops->stream_destroy(dev, c.s);
    for (int i = 0; i < c.n_allocs; i++) c.ops->free(dev, c.allocs[i]);
    free(kvb);
    free(q);
    free(ctx);
    free(qa);
    free(o);
    free(one);
}

/* deepseek4's compressor step (og_compress_op, deepseek4.md §4.2.1) on dev,
 * plain (ratio 8) and overlapping (ratio 4, two lanes): two sequences
 * interleaved in one op (64 and 48 tokens: enough rows for the pool), each
 * emitted row against a double reference from the spec (softmax over the
 * window's scores per channel, the weighted kv, RMSNorm with the weight; no
 * RoPE or rounding), and token-by-token ops (one token an op, the decode's
 * way) give the same bits as the one op, states included. */
static void check_compress_on(og_device *dev) {
    dv_ctx c = {.dev = dev, .ops = dev->ops};
    assert_non_null(c.ops->compress);
    assert_int_equal(c.ops->stream_create(dev, &c.s, c.err, sizeof c.err), OG_OK);
    enum { W = 160, NT = 112, NA = 64 }; /* tokens: sequence 0 the even ones of the first 2 NA - ..., see below */
    for (int ov = 0; ov < 2; ov++) {
        const int32_t r = ov ? 4 : 8;
        const int64_t lanes = ov ? 2 : 1, LW = lanes * W, slots = ov ? 2 * r : r, stf = 2 * slots * LW;
        float *kv = malloc(NT * LW * sizeof *kv), *sc = malloc(NT * LW * sizeof *sc), nw[W];
        for (int i = 0; i < NT * LW; i++) kv[i] = frand(), sc[i] = 2 * frand();
        for (int i = 0; i < W; i++) nw[i] = 1 + 0.5f * frand();
        /* token t: sequence t % 2 while both have tokens (48 each), then sequence 0's last 16 */
        int32_t seq[NT], pos[NT], n_of[2] = {0, 0};
        for (int t = 0; t < NT; t++) {
            seq[t] = t < 96 ? t % 2 : 0;
            pos[t] = n_of[seq[t]]++;
        }
        float *dkv = dv_up(&c, kv, NT * LW * sizeof *kv), *dsc = dv_up(&c, sc, NT * LW * sizeof *sc);
        float *dnw = dv_up(&c, nw, sizeof nw), *dst[2][2], *dout[2]; /* [one op, token by token][sequence] */
        for (int v = 0; v < 2; v++) {
            for (int q = 0; q < 2; q++) dst[v][q] = dv_up(&c, NULL, stf * sizeof(float));
            dout[v] = dv_up(&c, NULL, NT * W * sizeof(float));
        }
        float *st[NT], *out[NT];
        og_compress_op op = {.n_tok = NT, .width = W, .ratio = r, .overlap = ov, .kv = dkv, .score = dsc,
                             .state = st, .pos = pos, .out = out, .norm = dnw, .eps = 1e-6f};
        for (int v = 0; v < 2; v++) {
            for (int t = 0; t < NT; t++) {
                st[t] = dst[v][seq[t]];
                out[t] = (pos[t] + 1) % r ? NULL : dout[v] + t * W;
            }
            if (!v) {
                assert_int_equal(c.ops->compress(dev, c.s, &op, c.err, sizeof c.err), OG_OK);
                continue;
            }
            for (int t = 0; t < NT; t++) { /* one token an op */
                og_compress_op o1 = op;
                o1.n_tok = 1;
                o1.kv = dkv + t * LW;
                o1.score = dsc + t * LW;
                o1.state = st + t;
                o1.pos = pos + t;
                o1.out = out + t;
                assert_int_equal(c.ops->compress(dev, c.s, &o1, c.err, sizeof c.err), OG_OK);
            }
        }
        float *got = malloc(2 * NT * W * sizeof *got), *sts = malloc(4 * stf * sizeof *sts);
        for (int v = 0; v < 2; v++) {
            dv_down(&c, got + v * NT * W, dout[v], NT * W * sizeof(float));
            for (int q = 0; q < 2; q++) dv_down(&c, sts + (2 * v + q) * stf, dst[v][q], stf * sizeof(float));
        }
        int n_rows = 0;
        for (int t = 0; t < NT; t++) {
            if ((pos[t] + 1) % r) continue;
            n_rows++;
            assert_same_bits(got + t * W, got + NT * W + t * W, W * sizeof(float));
            /* the window: the sequence's tokens at positions pos - r + 1 .. pos (lane B with overlap), and
             * with overlap the previous window's (lane A) */
            int32_t tw[16], nwin = 0;
            const int32_t p0 = pos[t] + 1 - (ov && pos[t] + 1 > r ? 2 * r : r);
            for (int u = 0; u <= t; u++)
                if (seq[u] == seq[t] && pos[u] >= p0) tw[nwin++] = u;
            double y[W], ss = 0;
            for (int j = 0; j < W; j++) {
                double mx = -INFINITY, den = 0, num = 0;
                for (int i = 0; i < nwin; i++) {
                    const int64_t lane = ov && pos[tw[i]] > pos[t] - r ? W : 0; /* the current window: lane B */
                    mx = fmax(mx, sc[tw[i] * LW + lane + j]);
                }
                for (int i = 0; i < nwin; i++) {
                    const int64_t lane = ov && pos[tw[i]] > pos[t] - r ? W : 0;
                    const double e = exp(sc[tw[i] * LW + lane + j] - mx);
                    den += e;
                    num += e * kv[tw[i] * LW + lane + j];
                }
                y[j] = num / den;
                ss += y[j] * y[j];
            }
            for (int j = 0; j < W; j++) {
                const double ref = nw[j] * y[j] / sqrt(ss / W + 1e-6);
                assert_true(fabs(got[t * W + j] - ref) <= 1e-5 * (1 + fabs(ref)));
            }
        }
        assert_int_equal(n_rows, NA / r + 48 / r);
        assert_same_bits(sts, sts + 2 * stf, 2 * stf * sizeof(float)); /* the states too */
        free(kv);
        free(sc);
        free(got);
        free(sts);
    }
    c.ops->stream_destroy(dev, c.s);
    for (int i = 0; i < c.n_allocs; i++) c.ops->free(dev, c.allocs[i]);
}

static void check_ops_on(og_device *dev, const og_kernels *k, og_pool *pool) {
    dv_ctx c = {.dev = dev, .ops = dev->ops};
    assert_int_equal(c.ops->stream_create(dev, &c.s, c.err, sizeof c.err), OG_OK);
    assert_non_null(c.ops->matmul);
    enum { K = 256, N = 40, M = 6, NR = 5, W = 48, STR = 56 };
    /* matmul: three jobs (Q8_0 fork, Q4_K canonical, F32 fork) against og_cpu_matmul_multi on the host */
    static const og_ggml_type types[3] = {OG_TYPE_Q8_0, OG_TYPE_Q4_K, OG_TYPE_F32};
    float *wf = malloc(K * N * sizeof *wf), x[M * K];
    for (int i = 0; i < M * K; i++) x[i] = frand();
    og_weight hw[3], dw[3];
    void *wq[3];
    for (int t = 0; t < 3; t++) {
        uint64_t rb;
        og_row_bytes(types[t], K, &rb);
        wq[t] = malloc(N * rb);
        for (int i = 0; i < K * N; i++) wf[i] = frand() * 0.3f;
        for (int r = 0; r < N; r++) og_quantize_row(types[t], wf + r * K, (uint8_t *)wq[t] + r * rb, K);
        hw[t] = (og_weight){types[t], wq[t], K, N, rb};
        dw[t] = hw[t];
        dw[t].data = dv_up(&c, wq[t], N * rb);
    }
    float *dx = dv_up(&c, x, sizeof x), *dy = dv_up(&c, NULL, 3 * M * N * sizeof(float));
    float yh[3 * M * N], yd[4 * K]; /* yd: also the 4 embedding rows below (4 K >= 3 M N) */
    const int64_t ms[3] = {M, 1, 4};
    const og_numerics nms[3] = {OG_NUMERICS_FORK, OG_NUMERICS_CANONICAL, OG_NUMERICS_FORK};
    og_matmul_job hj[3], dj[3];
    for (int t = 0; t < 3; t++) {
        hj[t] = (og_matmul_job){&hw[t], x, ms[t], yh + t * M * N, nms[t]};
        dj[t] = (og_matmul_job){&dw[t], dx, ms[t], dy + t * M * N, nms[t]};
    }
    size_t sb = og_cpu_matmul_multi_scratch(hj, 3);
    void *scr = malloc(sb);
    memset(yh, 0, sizeof yh);
    assert_int_equal(og_cpu_matmul_multi(k, NULL, hj, 3, scr, sb), OG_OK);
    assert_int_equal(c.ops->matmul(dev, c.s, dj, 3, c.err, sizeof c.err), OG_OK);
    dj[0].m = 1; /* the jobs were copied at issue */
    dv_down(&c, yd, dy, sizeof yh);
    for (int t = 0; t < 3; t++) assert_same_bits(yh + t * M * N, yd + t * M * N, (size_t)ms[t] * N * sizeof(float));
    /* a lone fork job (the small-product path) */
    assert_int_equal(c.ops->matmul(dev, c.s, &(og_matmul_job){&dw[1], dx, 2, dy, OG_NUMERICS_FORK}, 1, c.err, sizeof c.err), OG_OK);
    assert_int_equal(og_cpu_matmul(k, pool, &hw[1], x, 2, yh, scr, sb), OG_OK);
    dv_down(&c, yd, dy, 2 * N * sizeof(float));
    assert_same_bits(yh, yd, 2 * N * sizeof(float));
    assert_int_equal(c.ops->matmul(dev, c.s, dj, 0, c.err, sizeof c.err), OG_ERR_INVALID_ARG);

    /* RMSNorm over strided rows, in place; RoPE/YaRN; softmax; SwiGLU plain and clamped; add; scale */
    float r0[NR * STR], r1[NR * STR], nw[W];
    for (int i = 0; i < NR * STR; i++) r0[i] = 3.0f * frand();
    for (int i = 0; i < W; i++) nw[i] = 1.0f + frand();
    float *dr = dv_up(&c, r0, sizeof r0), *dnw = dv_up(&c, nw, sizeof nw);
    og_rmsnorm_op no = {{dr, W, NR, STR}, {dr, W, NR, STR}, dnw, 1e-6f};
    assert_int_equal(c.ops->rmsnorm(dev, c.s, &no, c.err, sizeof c.err), OG_OK);
    memcpy(r1, r0, sizeof r0);
    for (int r = 0; r < NR; r++) og_rmsnorm(r1 + r * STR, r1 + r * STR, nw, W, 1e-6f);
    dv_down(&c, yd, dr, sizeof r0);
    assert_same_bits(r1, yd, sizeof r0);
    const og_rope rp = {.d_rope = 16, .base = 10000, .freq_scale = 0.25f, .ext_factor = 1, .n_ctx_orig = 64,
                        .beta_fast = 32, .beta_slow = 1, .mscale = 1.1f};
    const int32_t pos[NR] = {0, 7, 300, 3, 99};
    og_rope_op ro = {rp, dr + 4, NR, STR, 2, 20, pos};
    assert_int_equal(c.ops->rope(dev, c.s, &ro, c.err, sizeof c.err), OG_OK);
    for (int t = 0; t < NR; t++) og_rope_apply(&rp, r1 + 4 + t * STR, 2, 20, pos[t]);
    og_rows sm = {dr, W, NR, STR};
    assert_int_equal(c.ops->softmax(dev, c.s, &sm, c.err, sizeof c.err), OG_OK);
    for (int r = 0; r < NR; r++) og_softmax(r1 + r * STR, W);
    dv_down(&c, yd, dr, sizeof r0);
    assert_same_bits(r1, yd, sizeof r0);
    float g[K], u[K], o1[K], o2[K];
    for (int i = 0; i < K; i++) {
        g[i] = 8.0f * frand();
        u[i] = 8.0f * frand();
    }
    float *dg = dv_up(&c, g, sizeof g), *du = dv_up(&c, u, sizeof u), *dout = dv_up(&c, NULL, 2 * sizeof g);
    assert_int_equal(c.ops->swiglu(dev, c.s, dout, dg, du, K, 0.0f, c.err, sizeof c.err), OG_OK);
    assert_int_equal(c.ops->swiglu(dev, c.s, dout + K, dg, du, K, 2.5f, c.err, sizeof c.err), OG_OK);
    assert_int_equal(c.ops->swiglu(dev, c.s, dout, dg, du, K, -1.0f, c.err, sizeof c.err), OG_ERR_INVALID_ARG);
    og_swiglu(o1, g, u, K);
    og_swiglu_clamp(o2, g, u, K, 2.5f);
    dv_down(&c, yd, dout, 2 * sizeof g);
    assert_same_bits(o1, yd, sizeof o1);
    assert_same_bits(o2, yd + K, sizeof o2);
    assert_int_equal(c.ops->add(dev, c.s, dg, dg, du, K, c.err, sizeof c.err), OG_OK);
    assert_int_equal(c.ops->scale(dev, c.s, du, du, K, -0.75f, c.err, sizeof c.err), OG_OK);
    dv_down(&c, o1, dg, sizeof g);
    dv_down(&c, o2, du, sizeof u);
    for (int i = 0; i < K; i++) {
        assert_true(o1[i] == g[i] + u[i]);
        assert_true(o2[i] == u[i] * -0.75f);
    }

    /* copy: [T][H][d] rows of a 3-D block into [H][T][d] */
    enum { CT = 3, CH = 4, CD = 5 };
    float src[CT * CH * CD], dst[CH * CT * CD];
    for (int i = 0; i < CT * CH * CD; i++) src[i] = (float)i;
    float *dsrc = dv_up(&c, src, sizeof src), *ddst = dv_up(&c, NULL, sizeof dst);
    og_copy_op cp = {ddst, dsrc, CD * 4, CT, CH, CD * 4, CT * CD * 4, CH * CD * 4, CD * 4};
    assert_int_equal(c.ops->copy(dev, c.s, &cp, c.err, sizeof c.err), OG_OK);
    dv_down(&c, dst, ddst, sizeof dst);
    for (int h = 0; h < CH; h++)
        for (int t = 0; t < CT; t++)
            for (int d = 0; d < CD; d++) assert_true(dst[(h * CT + t) * CD + d] == src[(t * CH + h) * CD + d]);

    /* get_rows: embedding rows of a Q8_0 table, dequantized */
    const int32_t ids[4] = {39, 0, 7, 7};
    float *demb = dv_up(&c, NULL, 4 * K * sizeof(float));
    og_get_rows_op gr = {dw[0], ids, 4, demb};
    assert_int_equal(c.ops->get_rows(dev, c.s, &gr, c.err, sizeof c.err), OG_OK);
    dv_down(&c, yd, demb, 4 * K * sizeof(float));
    for (int i = 0; i < 4; i++) {
        og_dequantize_row(OG_TYPE_Q8_0, (const uint8_t *)wq[0] + (size_t)ids[i] * hw[0].row_bytes, yh, K);
        assert_same_bits(yh, yd + i * K, K * sizeof(float));
    }
    const int32_t bad_id = N;
    gr = (og_get_rows_op){dw[0], &bad_id, 1, demb};
    assert_int_equal(c.ops->get_rows(dev, c.s, &gr, c.err, sizeof c.err), OG_ERR_INVALID_ARG);

    /* router: sigmoid + bias + groups (16 experts in 4 groups, keep 2, top 4,
     * normalized, scaled) and softmax without groups, against route_ref */
    enum { RT = 3, RE = 16, RK = 4 };
    float lg[RT * RE], bias[RE];
    for (int i = 0; i < RT * RE; i++) lg[i] = 4.0f * frand();
    for (int i = 0; i < RE; i++) bias[i] = 0.5f * frand();
    float *dlg = dv_up(&c, lg, sizeof lg), *dbias = dv_up(&c, bias, sizeof bias);
    int32_t *dids = dv_up(&c, NULL, RT * RK * sizeof(int32_t));
    float *dwts = dv_up(&c, NULL, RT * RK * sizeof(float));
    for (int variant = 0; variant < 2; variant++) {
        og_router_op rop = {dlg, variant ? NULL : dbias, RT, RE, RK, variant ? 1 : 2, variant ? 1 : 4, variant ? 1 : 2,
                            !variant, variant ? 1.0f : 2.5f, dids, dwts, NULL, 0, NULL, 0};
        assert_int_equal(c.ops->router(dev, c.s, &rop, c.err, sizeof c.err), OG_OK);
        int32_t got[RT * RK];
        float gw[RT * RK];
        dv_down(&c, got, dids, sizeof got);
        dv_down(&c, gw, dwts, sizeof gw);
        og_router_op hop = rop;
        int32_t hid[RT * RK];
        float hwt[RT * RK];
        hop.logits = lg;
        hop.bias = variant ? NULL : bias;
        hop.ids = hid;
        hop.weights = hwt;
        assert_int_equal(og_cpu_route(&hop), OG_OK);
        assert_memory_equal(got, hid, sizeof got);
        assert_same_bits(gw, hwt, sizeof gw);
        for (int t = 0; t < RT; t++) {
            int32_t rid[RK];
            double rw[RK];
            route_ref(lg + t * RE, variant ? NULL : bias, RE, RK, rop.gating, rop.n_group, rop.n_group_used, rop.norm,
                      rop.scale, rid, rw);
            for (int j = 0; j < RK; j++) {
                assert_int_equal(got[t * RK + j], rid[j]);
                assert_true(fabs(gw[t * RK + j] - rw[j]) <= 1e-5 * fabs(rw[j]) + 1e-7);
            }
        }
        rop.k = 0;
        assert_int_equal(c.ops->router(dev, c.s, &rop, c.err, sizeof c.err), OG_ERR_INVALID_ARG);
    }

    /* kv_store then MLA attention: two sequences in one block table (blocks of 4
     * positions), tokens at positions 5 (sequence 0) and 2 (sequence 1), 2 heads,
     * one token canonical; against og_cpu_mla_attention on the host and a double
     * reference from deepseek2.md §3 */
    enum { BR = 4, RKV = 8, DR = 4, KW = RKV + DR, NH = 2, NB = 3, NL = 2 };
    const int64_t blk = (int64_t)NL * BR * KW; /* two layers per block, layer 1 used */
    float *hblk = malloc(NB * blk * sizeof(float));
    for (int i = 0; i < NB * blk; i++) hblk[i] = frand();
    float *dblk[NB];
    for (int b = 0; b < NB; b++) dblk[b] = dv_up(&c, hblk + b * blk, blk * sizeof(float));
    og_kv_view kvv = {dblk, NB, BR, BR * KW, KW, KW, OG_KV_F32}; /* sequence 0: blocks 0, 1; sequence 1: block 2 */
    const int32_t first[2] = {0, 2}, tpos[2] = {5, 2};
    float newrows[2 * KW];
    for (int i = 0; i < 2 * KW; i++) newrows[i] = frand();
    float *dnew = dv_up(&c, newrows, sizeof newrows);
    og_kv_store_op st = {kvv, {dnew, KW, 2, KW}, first, tpos};
    assert_int_equal(c.ops->kv_store(dev, c.s, &st, c.err, sizeof c.err), OG_OK);
    dv_sync(&c); /* the blocks' copies up have read hblk before the reference changes it */
    memcpy(hblk + 1 * blk + BR * KW + 1 * KW, newrows, KW * sizeof(float));      /* seq 0 pos 5: block 1, row 1 */
    memcpy(hblk + 2 * blk + BR * KW + 2 * KW, newrows + KW, KW * sizeof(float)); /* seq 1 pos 2: block 2, row 2 */
    for (int b = 0; b < NB; b++) {
        dv_down(&c, yd, dblk[b], blk * sizeof(float));
        assert_same_bits(yd, hblk + b * blk, blk * sizeof(float));
    }
    float qabs[NH * 2 * RKV], qpe[2 * NH * DR], ctxd[NH * 2 * RKV], ctxh[NH * 2 * RKV];
    for (int i = 0; i < NH * 2 * RKV; i++) qabs[i] = frand();
    for (int i = 0; i < 2 * NH * DR; i++) qpe[i] = frand();
    float *dqa = dv_up(&c, qabs, sizeof qabs), *dqp = dv_up(&c, qpe, sizeof qpe), *dctx = dv_up(&c, NULL, sizeof ctxd);
    const bool canon[2] = {false, true};
    og_mla_op mo = {.n_tok = 2, .n_head = NH, .r_kv = RKV, .d_rope = DR, .kq_scale = 0.3f, .q_abs = dqa,
                    .qabs_head_stride = 2 * RKV, .q_pe = dqp, .qpe_tok_stride = NH * DR, .qpe_head_stride = DR,
                    .ctx = dctx, .ctx_head_stride = 2 * RKV, .kv = kvv, .kv_first = first, .pos = tpos,
                    .canonical = canon};
    assert_int_equal(c.ops->mla_attention(dev, c.s, &mo, c.err, sizeof c.err), OG_OK);
    dv_down(&c, ctxd, dctx, sizeof ctxd);
    float *hb[NB];
    for (int b = 0; b < NB; b++) hb[b] = hblk + b * blk;
    og_mla_op ho = mo;
    ho.q_abs = qabs;
    ho.q_pe = qpe;
    ho.ctx = ctxh;
    ho.kv.blocks = hb;
    assert_int_equal(og_cpu_mla_attention(k, pool, &ho), OG_OK);
    assert_same_bits(ctxd, ctxh, sizeof ctxd);
    for (int i = 0; i < 2; i++)
        for (int h = 0; h < NH; h++) {
            double sc[8], mx = -INFINITY, sum = 0;
            for (int p = 0; p <= tpos[i]; p++) {
                const float *row = hb[first[i] + p / BR] + BR * KW + (p % BR) * KW;
                double d = 0;
                for (int r = 0; r < RKV; r++) d += (double)qabs[h * 2 * RKV + i * RKV + r] * row[r];
                for (int r = 0; r < DR; r++) d += (double)qpe[i * NH * DR + h * DR + r] * row[RKV + r];
                sc[p] = 0.3 * d;
                mx = sc[p] > mx ? sc[p] : mx;
            }
            for (int p = 0; p <= tpos[i]; p++) sum += exp(sc[p] - mx);
            for (int r = 0; r < RKV; r++) {
                double acc = 0;
                for (int p = 0; p <= tpos[i]; p++)
                    acc += exp(sc[p] - mx) / sum * hb[first[i] + p / BR][BR * KW + (p % BR) * KW + r];
                assert_true(fabs(ctxd[h * 2 * RKV + i * RKV + r] - acc) <= 1e-5);
            }
        }
    const int32_t far[2] = {5, 4}; /* sequence 1 has one block: position 4 is outside it */
    mo.pos = far;
    assert_int_equal(c.ops->mla_attention(dev, c.s, &mo, c.err, sizeof c.err), OG_ERR_INVALID_ARG);
    assert_non_null(strstr(c.err, "outside"));

    /* The same cache in f16 (--kv-type f16): kv_store rounds each value once to
     * nearest even (og_fp32_to_fp16's bits, checked on the stored bytes), and
     * attention widens the rows exactly, so its context is bitwise the f32 op's
     * over an f32 cache of the widened values: on the device, on the host, on
     * every tier (the canonical token's bits also equal across tiers). */
    uint16_t *hblk16 = malloc(NB * blk * sizeof(uint16_t));
    float *wide = malloc(NB * blk * sizeof(float));
    for (int i = 0; i < NB * blk; i++) hblk16[i] = og_fp32_to_fp16(frand());
    float *dblk16[NB], *hb16[NB], *wv[NB]; /* an f16 cache's blocks: the addresses of their uint16_t data */
    for (int b = 0; b < NB; b++) {
        dblk16[b] = dv_up(&c, hblk16 + b * blk, blk * sizeof(uint16_t));
        hb16[b] = (float *)(void *)(hblk16 + b * blk);
        wv[b] = wide + b * blk;
    }
    og_kv_store_op st16 = st;
    st16.kv.blocks = dblk16;
    st16.kv.type = OG_KV_F16;
    assert_int_equal(c.ops->kv_store(dev, c.s, &st16, c.err, sizeof c.err), OG_OK);
    dv_sync(&c); /* as above: the copies up have read hblk16 */
    for (int r = 0; r < KW; r++) {
        hblk16[1 * blk + BR * KW + 1 * KW + r] = og_fp32_to_fp16(newrows[r]);
        hblk16[2 * blk + BR * KW + 2 * KW + r] = og_fp32_to_fp16(newrows[KW + r]);
    }
    uint16_t got16[NL * BR * KW];
    for (int b = 0; b < NB; b++) {
        dv_down(&c, got16, dblk16[b], blk * sizeof(uint16_t));
        assert_memory_equal(got16, hblk16 + b * blk, blk * sizeof(uint16_t));
    }
    for (int i = 0; i < NB * blk; i++) wide[i] = og_fp16_to_fp32(hblk16[i]);
    og_mla_op mo16 = mo;
    mo16.pos = tpos;
    mo16.kv = st16.kv;
    assert_int_equal(c.ops->mla_attention(dev, c.s, &mo16, c.err, sizeof c.err), OG_OK);
    dv_down(&c, ctxd, dctx, sizeof ctxd);
    float ctxw[NH * 2 * RKV], ctx16[NH * 2 * RKV], canon16[RKV * NH];
    og_cpu_features f;
    og_cpu_detect(&f);
    int n_tiers = 0;
    for (int isa = OG_ISA_SCALAR; isa <= OG_ISA_AVX512; isa++) {
        og_isa got;
        char note[128], e2[128];
        if (og_isa_choose(&f, og_isa_name((og_isa)isa), &got, note, sizeof note, e2, sizeof e2) != OG_OK) continue;
        og_kernels kt;
        assert_int_equal(og_kernels_init((og_isa)isa, &kt), OG_OK);
        og_mla_op hwide = ho, h16 = ho;
        hwide.kv.blocks = wv;
        hwide.ctx = ctxw;
        h16.kv.blocks = hb16;
        h16.kv.type = OG_KV_F16;
        h16.ctx = ctx16;
        assert_int_equal(og_cpu_mla_attention(&kt, pool, &hwide), OG_OK);
        assert_int_equal(og_cpu_mla_attention(&kt, NULL, &h16), OG_OK);
        assert_same_bits(ctx16, ctxw, sizeof ctx16);
        if (kt.isa == k->isa) assert_same_bits(ctxd, ctx16, sizeof ctxd); /* the device ran k's tier */
        for (int h = 0; h < NH; h++) /* token 1 is canonical */
            if (!n_tiers) memcpy(canon16 + h * RKV, ctx16 + h * 2 * RKV + RKV, RKV * sizeof(float));
            else assert_same_bits(canon16 + h * RKV, ctx16 + h * 2 * RKV + RKV, RKV * sizeof(float));
        n_tiers++;
    }
    assert_true(n_tiers >= 1);
    /* an element type the ops do not know is refused, not read */
    st16.kv.type = (og_kv_type)7;
    assert_int_equal(c.ops->kv_store(dev, c.s, &st16, c.err, sizeof c.err), OG_ERR_INVALID_ARG);
    assert_non_null(strstr(c.err, "neither f32 nor f16"));
    free(hblk16);
    free(wide);

    c.ops->stream_destroy(dev, c.s); /* waits for its work */
    for (int i = 0; i < c.n_allocs; i++) c.ops->free(dev, c.allocs[i]);
    free(hblk);
    free(scr);
    free(wf);
    for (int t = 0; t < 3; t++) free(wq[t]);
}

/* The MoE combine op (og_combine_op) on a device: y[t] += w_j res[row_j] over
 * token t's routes in route order, bitwise the dispatcher's host sum (routes
 * in one global list, summed in that order: what moe/dispatch.c did before the
 * op), within 1e-6 of a double reference; bad routes refused at issue. */
static void check_combine_on(og_device *dev) {
    enum { T = 3, D = 37, NRES = 7 };
    dv_ctx c = {.dev = dev, .ops = dev->ops};
    assert_int_equal(c.ops->stream_create(dev, &c.s, c.err, sizeof c.err), OG_OK);
    float y0[T * D], res[NRES * D];
    uint64_t rs = 77;
    for (int i = 0; i < T * D; i++) y0[i] = (float)((double)(rs = rs * 6364136223846793005ull + 1) / 1.8446744e19 - 0.5);
    for (int i = 0; i < NRES * D; i++) res[i] = (float)((double)(rs = rs * 6364136223846793005ull + 1) / 1.8446744e19 * 4 - 2);
    /* the router's list: token t's routes interleaved with the others' (route order) */
    const int32_t r_tok[] = {0, 1, 0, 2, 1, 0, 2, 2};
    const int32_t r_row[] = {3, 0, 6, 1, 5, 2, 4, 0};
    const float r_w[] = {0.25f, 0.7f, 0.125f, 0.3f, 0.3f, 0.625f, 0.2f, 0.5f};
    const int NR = 8;
    int32_t off[T + 1] = {0}, rows[8];
    float wts[8];
    for (int r = 0; r < NR; r++) off[r_tok[r] + 1]++;
    for (int t = 0; t < T; t++) off[t + 1] += off[t];
    int32_t fill[T];
    memcpy(fill, off, sizeof fill);
    for (int r = 0; r < NR; r++) {
        rows[fill[r_tok[r]]] = r_row[r];
        wts[fill[r_tok[r]]++] = r_w[r];
    }
    float want[T * D];
    double wd[T * D];
    memcpy(want, y0, sizeof want);
    for (int i = 0; i < T * D; i++) wd[i] = y0[i];
    for (int r = 0; r < NR; r++)
        for (int i = 0; i < D; i++) {
            want[r_tok[r] * D + i] += r_w[r] * res[r_row[r] * D + i];
            wd[r_tok[r] * D + i] += (double)r_w[r] * res[r_row[r] * D + i];
        }
    float *dy = dv_up(&c, y0, sizeof y0), *dres = dv_up(&c, res, sizeof res), got[T * D];
    og_combine_op op = {dy, dres, T, NRES, D, off, rows, wts};
    assert_int_equal(c.ops->moe_combine(dev, c.s, &op, c.err, sizeof c.err), OG_OK);
    dv_down(&c, got, dy, sizeof got);
    assert_same_bits(got, want, sizeof got);
    for (int i = 0; i < T * D; i++) assert_true(fabs(got[i] - wd[i]) < 1e-6);
    /* refused at issue, named */
    rows[2] = NRES;
    assert_int_equal(c.ops->moe_combine(dev, c.s, &op, c.err, sizeof c.err), OG_ERR_INVALID_ARG);
    assert_non_null(strstr(c.err, "reads row 7 of 7"));
    rows[2] = 1;
    int32_t bad_off[T + 1] = {0, 3, 2, 8};
    op.route_off = bad_off;
    assert_int_equal(c.ops->moe_combine(dev, c.s, &op, c.err, sizeof c.err), OG_ERR_INVALID_ARG);
    assert_non_null(strstr(c.err, "end before they start"));
    op.route_off = off;
    op.res = NULL;
    assert_int_equal(c.ops->moe_combine(dev, c.s, &op, c.err, sizeof c.err), OG_ERR_INVALID_ARG);
    c.ops->stream_destroy(dev, c.s);
    for (int i = 0; i < c.n_allocs; i++) c.ops->free(dev, c.allocs[i]);
}

/* og_dev_weights_find: a copy holds host bytes [p, p + n) only inside one tensor. */
static void test_dev_weights(void **state) {
    (void)state;
    static uint8_t host[3000], devmem[3000];
    const og_dev_tensor t[3] = {{host, 1000, devmem, "a"}, {host + 1000, 500, devmem + 2000, "b"},
                                {host + 2000, 1000, devmem + 1000, "c"}};
    const og_dev_weights w = {t, 3};
    assert_ptr_equal(og_dev_weights_find(&w, host, 1000), devmem);
    assert_ptr_equal(og_dev_weights_find(&w, host + 100, 900), devmem + 100);   /* a slice */
    assert_ptr_equal(og_dev_weights_find(&w, host + 1200, 300), devmem + 2200); /* b's end */
    assert_ptr_equal(og_dev_weights_find(&w, host + 2999, 1), devmem + 1999);
    assert_null(og_dev_weights_find(&w, host + 900, 200));  /* straddles a and b */
    assert_null(og_dev_weights_find(&w, host + 1200, 301)); /* past b's end */
    assert_null(og_dev_weights_find(&w, host + 1600, 4));   /* between b and c: no tensor */
    assert_null(og_dev_weights_find(&w, host + 3000, 1));
    assert_null(og_dev_weights_find(&w, devmem, 1));
    assert_null(og_dev_weights_find(NULL, host, 1));
}

static void test_device_ops(void **state) {
    (void)state;
    og_kernels k = fx_best_kernels();
    char err[256];
    og_pool *pool;
    assert_int_equal(og_pool_create(2, NULL, &pool, err, sizeof err), OG_OK);
    og_device *dev;
    assert_int_equal(og_device_cpu_create(8u << 20, 2, &k, &dev, err, sizeof err), OG_OK);
    check_ops_on(dev, &k, pool);
    check_kv_b_on(dev);
    check_compress_on(dev);
    check_combine_on(dev);
    og_device_destroy(dev);
    assert_int_equal(og_device_host_create(pool, &k, &dev, err, sizeof err), OG_OK);
    check_ops_on(dev, &k, pool);
    check_kv_b_on(dev);
    check_compress_on(dev);
    check_combine_on(dev);
    og_device_destroy(dev);
    assert_int_equal(og_device_host_create(pool, NULL, &dev, err, sizeof err), OG_ERR_INVALID_ARG);
    /* a cpu device without kernels has no compute ops */
    assert_int_equal(og_device_cpu_create(1024, 1, NULL, &dev, err, sizeof err), OG_OK);
    og_stream *s;
    assert_int_equal(dev->ops->stream_create(dev, &s, err, sizeof err), OG_OK);
    float one = 1;
    assert_int_equal(dev->ops->scale(dev, s, &one, &one, 1, 2.0f, err, sizeof err), OG_ERR_UNSUPPORTED);
    og_device_destroy(dev);
    og_pool_free(pool);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool), cmocka_unit_test(test_pool_pinned), cmocka_unit_test(test_matmul), cmocka_unit_test(test_matmul_multi),
        cmocka_unit_test(test_matmul_canonical),
        cmocka_unit_test(test_ops), cmocka_unit_test(test_rope_yarn),
        cmocka_unit_test(test_device_experts), cmocka_unit_test(test_device_streams), cmocka_unit_test(test_device_ops), cmocka_unit_test(test_dev_weights),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
