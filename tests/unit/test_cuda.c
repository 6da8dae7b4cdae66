/* cuda: the cuda device (og_device_cuda.h) against the cpu backend, on a GPU.
 * Without one (or without a driver) it prints one line, "SKIP (hardware): no
 * CUDA device (...)", and exits 77. With one: every quantized product kernel
 * against og_cpu_matmul_multi's canonical numerics (the host tiers' bits,
 * themselves tested against quant_ref.c), bit for bit, over row lengths below,
 * at and past one warp's 32 blocks, output counts that leave warps idle and
 * several activation rows; the routed-expert op against og_cpu_experts bit for
 * bit (types whose activations differ between gate and up, V4's clamp, a slot
 * used by two groups); streams, events, waits and both copy paths; the errors;
 * and deepseek2's forward-pass ops against the cpu device on the same inputs
 * (test_forward_ops: bitwise where og_cuda_kernels.h says so, else within
 * FWD_ULP ulp with the bitwise count printed), and deepseek4's and deepseek41's
 * ops likewise (test_ds4_ops). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "og_backend.h"
#include "og_device_cuda.h"

/* What the tests share, made in main (cmocka's prestate). */
typedef struct cuda_ctx {
    og_device *dev;
    og_kernels kern;
} cuda_ctx;

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}
static float rng_f(uint64_t *s) { return (float)((double)(rng_next(s) >> 11) / 9007199254740992.0 * 2.0 - 1.0); }

static void *dev_put(og_device *dev, og_stream *s, const void *src, size_t bytes) {
    char err[512];
    void *p;
    assert_int_equal(dev->ops->alloc(dev, bytes, &p, err, sizeof err), OG_OK);
    if (dev->ops->copy_to_device(dev, s, p, src, bytes, err, sizeof err)) fail_msg("%s", err);
    return p;
}
static void dev_sync(og_device *dev, og_stream *s) {
    char err[512];
    og_event ev;
    assert_int_equal(dev->ops->event_record(dev, s, &ev, err, sizeof err), OG_OK);
    if (dev->ops->event_wait(dev, ev, err, sizeof err)) fail_msg("%s", err);
}

/* A quantized [n_rows][K] matrix of random weights. */
static void *make_weight(og_ggml_type t, int64_t K, int64_t n_rows, uint64_t *s, og_weight *w) {
    const og_type_traits *tr = og_quant_traits(t);
    uint64_t rb64 = 0;
    assert_int_equal(og_row_bytes(t, (uint64_t)K, &rb64), OG_OK);
    const size_t rb = (size_t)rb64;
    uint8_t *q = malloc(rb * (size_t)n_rows);
    float *row = malloc((size_t)K * 4);
    for (int64_t r = 0; r < n_rows; r++) {
        for (int64_t i = 0; i < K; i++) row[i] = rng_f(s) * (1.0f + (float)(r % 5));
        tr->from_float(row, q + (size_t)r * rb, K);
    }
    free(row);
    *w = (og_weight){t, q, K, n_rows, rb};
    return q;
}

static const og_ggml_type types[] = {OG_TYPE_Q8_0, OG_TYPE_Q4_0, OG_TYPE_Q5_0, OG_TYPE_Q2_K, OG_TYPE_Q3_K,
                                     OG_TYPE_Q4_K, OG_TYPE_Q5_K, OG_TYPE_Q6_K, OG_TYPE_IQ2_XXS, OG_TYPE_MXFP4};
#define N_TYPES (int)(sizeof types / sizeof types[0])

static void test_products(void **state) {
    cuda_ctx *cx = *state;
    og_device *dev = cx->dev;
    char err[512];
    og_stream *s;
    assert_int_equal(dev->ops->stream_create(dev, &s, err, sizeof err), OG_OK);
    uint64_t rs = 77;
    int n_cases = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const og_type_traits *tr = og_quant_traits(types[ti]);
        const int64_t ks[] = {tr->blck, 7 * (int64_t)tr->blck, 45 * (int64_t)tr->blck, 64 * (int64_t)tr->blck};
        for (size_t ki = 0; ki < 4; ki++) {
            const int64_t K = ks[ki], N = 37, M = ki == 2 ? 3 : 1;
            og_weight w;
            void *hw = make_weight(types[ti], K, N, &rs, &w);
            float *x = malloc((size_t)(M * K) * 4), *want = malloc((size_t)(M * N) * 4), *got = malloc((size_t)(M * N) * 4);
            for (int64_t i = 0; i < M * K; i++) x[i] = rng_f(&rs) * (i % 13 == 0 ? 9.0f : 1.0f);
            og_matmul_job j = {&w, x, M, want, OG_NUMERICS_CANONICAL};
            const size_t sb = og_cpu_matmul_multi_scratch(&j, 1) + 1;
            void *scr = malloc(sb);
            assert_int_equal(og_cpu_matmul_multi(&cx->kern, NULL, &j, 1, scr, sb), OG_OK);
            og_weight dw = w;
            dw.data = dev_put(dev, s, hw, w.row_bytes * (size_t)N);
            float *dx = dev_put(dev, s, x, (size_t)(M * K) * 4), *dy;
            assert_int_equal(dev->ops->alloc(dev, (size_t)(M * N) * 4, (void **)&dy, err, sizeof err), OG_OK);
            if (og_device_cuda_matmul(dev, s, &dw, dx, M, dy, err, sizeof err)) fail_msg("%s", err);
            assert_int_equal(dev->ops->copy_to_host(dev, s, got, dy, (size_t)(M * N) * 4, err, sizeof err), OG_OK);
            dev_sync(dev, s);
            for (int64_t i = 0; i < M * N; i++)
                if (memcmp(&got[i], &want[i], 4))
                    fail_msg("%s K=%lld out %lld: cuda %.9g, cpu %.9g", tr->name, (long long)K, (long long)i, got[i], want[i]);
            n_cases++;
            dev->ops->free(dev, (void *)dw.data);
            dev->ops->free(dev, dx);
            dev->ops->free(dev, dy);
            free(hw);
            free(x);
            free(want);
            free(got);
            free(scr);
        }
    }
    assert_int_equal(n_cases, N_TYPES * 4);
    dev->ops->stream_destroy(dev, s);
}

/* The expert op: three experts in slots, groups (2, 0, 2) of 2, 1 and 3 rows. */
static void expert_case(cuda_ctx *cx, og_ggml_type tg, og_ggml_type tu, og_ggml_type td, float clamp) {
    og_device *dev = cx->dev;
    char err[512];
    const int64_t D = 512, F = 256, NS = 3;
    uint64_t rs = 1234 + (uint64_t)tg * 7 + (uint64_t)td;
    og_weight g[3], u[3], dn[3];
    void *hg[3], *hu[3], *hd[3];
    for (int e = 0; e < NS; e++) {
        hg[e] = make_weight(tg, D, F, &rs, &g[e]);
        hu[e] = make_weight(tu, D, F, &rs, &u[e]);
        hd[e] = make_weight(td, F, D, &rs, &dn[e]);
    }
    const uint64_t gb = g[0].row_bytes * F, ub = u[0].row_bytes * F, db = dn[0].row_bytes * D;
    const uint64_t slot_bytes = gb + ub + db + 64; /* a gap: offsets are honoured */
    og_stream *s;
    assert_int_equal(dev->ops->stream_create(dev, &s, err, sizeof err), OG_OK);
    uint8_t *base;
    assert_int_equal(dev->ops->alloc(dev, slot_bytes * NS, (void **)&base, err, sizeof err), OG_OK);
    for (int e = 0; e < NS; e++) {
        assert_int_equal(dev->ops->copy_to_device(dev, s, base + e * slot_bytes, hg[e], gb, err, sizeof err), OG_OK);
        assert_int_equal(dev->ops->copy_to_device(dev, s, base + e * slot_bytes + gb, hu[e], ub, err, sizeof err), OG_OK);
        assert_int_equal(dev->ops->copy_to_device(dev, s, base + e * slot_bytes + gb + ub, hd[e], db, err, sizeof err), OG_OK);
    }
    const og_expert_group groups[3] = {{2, 2, OG_NUMERICS_CANONICAL}, {0, 1, OG_NUMERICS_CANONICAL}, {2, 3, OG_NUMERICS_CANONICAL}};
    const int64_t R = 6;
    float *x = malloc((size_t)(R * D) * 4), *want = malloc((size_t)(R * D) * 4), *got = malloc((size_t)(R * D) * 4);
    for (int64_t i = 0; i < R * D; i++) x[i] = rng_f(&rs) * 3.0f;
    og_expert_job jobs[3];
    int64_t r0 = 0;
    for (int k = 0; k < 3; k++) {
        const int e = groups[k].slot;
        jobs[k] = (og_expert_job){g[e], u[e], dn[e], x + r0 * D, groups[k].n_rows, want + r0 * D, OG_NUMERICS_CANONICAL, clamp};
        r0 += groups[k].n_rows;
    }
    assert_int_equal(og_cpu_experts(&cx->kern, NULL, jobs, 3), OG_OK);
    float *dx = dev_put(dev, s, x, (size_t)(R * D) * 4), *dy;
    assert_int_equal(dev->ops->alloc(dev, (size_t)(R * D) * 4, (void **)&dy, err, sizeof err), OG_OK);
    og_expert_op op = {.slots = {base, slot_bytes, (uint32_t)NS, g[0], u[0], dn[0], 0, gb, gb + ub},
                       .groups = groups, .n_groups = 3, .x = dx, .y = dy, .swiglu_clamp = clamp};
    if (dev->ops->experts(dev, s, &op, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(dev->ops->copy_to_host(dev, s, got, dy, (size_t)(R * D) * 4, err, sizeof err), OG_OK);
    dev_sync(dev, s);
    for (int64_t i = 0; i < R * D; i++)
        if (memcmp(&got[i], &want[i], 4))
            fail_msg("experts %s/%s/%s clamp %g: y[%lld] cuda %.9g, cpu %.9g", og_quant_traits(tg)->name,
                     og_quant_traits(tu)->name, og_quant_traits(td)->name, (double)clamp, (long long)i, got[i], want[i]);
    /* bad input: a slot out of range, a clamp below 0, no kernel for the type */
    og_expert_group bad = {3, 1, OG_NUMERICS_CANONICAL};
    og_expert_op bop = op;
    bop.groups = &bad;
    bop.n_groups = 1;
    assert_int_equal(dev->ops->experts(dev, s, &bop, err, sizeof err), OG_ERR_INVALID_ARG);
    bop = op;
    bop.swiglu_clamp = -1;
    assert_int_equal(dev->ops->experts(dev, s, &bop, err, sizeof err), OG_ERR_INVALID_ARG);
    bop = op;
    bop.slots.gate.type = bop.slots.up.type = OG_TYPE_F16;
    bop.slots.gate.row_bytes = bop.slots.up.row_bytes = (size_t)D * 2;
    assert_int_equal(dev->ops->experts(dev, s, &bop, err, sizeof err), OG_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "F16"));
    dev->ops->free(dev, base);
    dev->ops->free(dev, dx);
    dev->ops->free(dev, dy);
    dev->ops->stream_destroy(dev, s);
    for (int e = 0; e < NS; e++) free(hg[e]), free(hu[e]), free(hd[e]);
    free(x);
    free(want);
    free(got);
}

static void test_experts(void **state) {
    cuda_ctx *cx = *state;
    expert_case(cx, OG_TYPE_Q4_K, OG_TYPE_Q4_K, OG_TYPE_Q6_K, 0);
    expert_case(cx, OG_TYPE_Q2_K, OG_TYPE_Q3_K, OG_TYPE_Q8_0, 0);
    expert_case(cx, OG_TYPE_Q8_0, OG_TYPE_Q5_K, OG_TYPE_Q4_0, 7.0f); /* gate Q8_0 acts, up Q8_K acts */
    expert_case(cx, OG_TYPE_Q5_0, OG_TYPE_Q5_0, OG_TYPE_Q2_K, 0.5f);
    expert_case(cx, OG_TYPE_IQ2_XXS, OG_TYPE_IQ2_XXS, OG_TYPE_Q2_K, 10.0f); /* V4 / V4.1's routed experts */
    expert_case(cx, OG_TYPE_MXFP4, OG_TYPE_MXFP4, OG_TYPE_MXFP4, 7.0f);     /* V4.1 mxxm-t's */
}

/* Copies both ways on two streams ordered by an event; many events in flight
 * (the ring grows); done and wait; pinned and pageable host memory. */
static void test_streams(void **state) {
    cuda_ctx *cx = *state;
    og_device *dev = cx->dev;
    char err[512];
    og_stream *a, *b;
    assert_int_equal(dev->ops->stream_create(dev, &a, err, sizeof err), OG_OK);
    assert_int_equal(dev->ops->stream_create(dev, &b, err, sizeof err), OG_OK);
    enum { N = 1 << 22 };
    uint8_t *src = malloc(N), *dst = malloc(N);
    for (int i = 0; i < N; i++) src[i] = (uint8_t)(i * 131 + 7);
    memset(dst, 0, N);
    void *p;
    assert_int_equal(dev->ops->alloc(dev, N, &p, err, sizeof err), OG_OK);
    const uint64_t pc = dev->pcie_bytes;
    og_event evs[300];
    assert_int_equal(dev->ops->copy_to_device(dev, a, p, src, N, err, sizeof err), OG_OK);
    for (int i = 0; i < 300; i++) assert_int_equal(dev->ops->event_record(dev, a, &evs[i], err, sizeof err), OG_OK);
    assert_int_equal(dev->pcie_bytes - pc, (uint64_t)N);
    assert_int_equal(dev->ops->stream_wait(dev, b, evs[299], err, sizeof err), OG_OK);
    assert_int_equal(dev->ops->copy_to_host(dev, b, dst, p, N, err, sizeof err), OG_OK); /* pageable: staged */
    og_event eb;
    assert_int_equal(dev->ops->event_record(dev, b, &eb, err, sizeof err), OG_OK);
    assert_int_equal(dev->ops->event_wait(dev, eb, err, sizeof err), OG_OK);
    assert_true(dev->ops->event_done(dev, eb));
    for (int i = 0; i < 300; i++) assert_true(dev->ops->event_done(dev, evs[i]));
    assert_memory_equal(src, dst, N);
    /* pinned source (read-only registration, as the mapped experts) */
    uint8_t *pg = aligned_alloc(4096, N);
    for (int i = 0; i < N; i++) pg[i] = (uint8_t)(i ^ 0x5a);
    uint64_t pinned = 0;
    if (og_device_cuda_host_register(dev, pg, N, &pinned, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(pinned, (uint64_t)N);
    assert_int_equal(dev->ops->copy_to_device(dev, a, p, pg, N, err, sizeof err), OG_OK);
    assert_int_equal(dev->ops->copy_to_host(dev, a, dst, p, N, err, sizeof err), OG_OK);
    dev_sync(dev, a);
    assert_memory_equal(pg, dst, N);
    /* errors: an event never recorded, an allocation beyond the device */
    assert_int_equal(dev->ops->event_wait(dev, ((og_event)250 << 48) | 1, err, sizeof err), OG_ERR_INVALID_ARG);
    void *huge;
    assert_int_equal(dev->ops->alloc(dev, 1ull << 50, &huge, err, sizeof err), OG_ERR_NOMEM);
    assert_non_null(strstr(err, "do not fit"));
    uint64_t fr, tot;
    assert_int_equal(dev->ops->mem_info(dev, &fr, &tot), OG_OK);
    assert_true(fr > 0 && fr <= tot);
    dev->ops->free(dev, p);
    dev->ops->stream_destroy(dev, a);
    dev->ops->stream_destroy(dev, b);
    assert_true(dev->ops->event_done(dev, eb)); /* a destroyed stream's events are complete */
    free(src);
    free(dst);
    (void)pg; /* registered until the device goes; freed with the process */
}

/* ---- the forward pass's ops: the cuda device against the cpu device on the
 * same inputs (og_cuda_kernels.h says which are bitwise; softmax, the router's
 * scores and MLA attention take e^x from double exp: within FWD_ULP ulp, and
 * the number of bitwise equal values is printed) ---- */

#define FWD_ULP 4

typedef struct pair {
    og_device *d[2]; /* cuda, cpu */
    og_stream *s[2];
    void *allocs[2][64];
    int n_allocs;
} pair;

/* The same bytes on both devices: dp[0] cuda, dp[1] cpu (src NULL: zeros). */
static void put2(pair *p, const void *src, size_t bytes, void *dp[2]) {
    char err[512];
    void *z = src ? NULL : calloc(1, bytes);
    assert_true(p->n_allocs < 64);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(p->d[i]->ops->alloc(p->d[i], bytes, &dp[i], err, sizeof err), OG_OK);
        if (p->d[i]->ops->copy_to_device(p->d[i], p->s[i], dp[i], src ? src : z, bytes, err, sizeof err)) fail_msg("%s", err);
        p->allocs[i][p->n_allocs] = dp[i];
    }
    p->n_allocs++;
    for (int i = 0; i < 2; i++) dev_sync(p->d[i], p->s[i]);
    free(z);
}
static void get2(pair *p, void *const dp[2], size_t bytes, void *host[2]) {
    char err[512];
    for (int i = 0; i < 2; i++) {
        if (p->d[i]->ops->copy_to_host(p->d[i], p->s[i], host[i], dp[i], bytes, err, sizeof err)) fail_msg("%s", err);
        dev_sync(p->d[i], p->s[i]);
    }
}
static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
/* a and b within ulp units in the last place of the larger; returns whether bitwise */
static bool close_f(float a, float b, int ulp, const char *what, int64_t i) {
    if (fbits(a) == fbits(b)) return true;
    const double m = fmax(fabs((double)a), fabs((double)b)), u = m > 1e-30 ? ldexp(1.0, ilogb(m) - 23) : 1e-45;
    if (!(fabs((double)a - (double)b) <= ulp * u)) fail_msg("%s[%lld]: cuda %.9g, cpu %.9g", what, (long long)i, a, b);
    return false;
}
static void same_bits2(pair *p, void *const dp[2], size_t bytes, const char *what) {
    uint8_t *h0 = malloc(bytes), *h1 = malloc(bytes);
    void *h[2] = {h0, h1};
    get2(p, dp, bytes, h);
    if (memcmp(h0, h1, bytes)) {
        for (size_t i = 0; i + 4 <= bytes; i += 4)
            if (memcmp(h0 + i, h1 + i, 4)) {
                float a, b;
                memcpy(&a, h0 + i, 4);
                memcpy(&b, h1 + i, 4);
                fail_msg("%s: word %zu differs: cuda %.9g (0x%08x), cpu %.9g (0x%08x)", what, i / 4, a, fbits(a), b, fbits(b));
            }
        fail_msg("%s differs", what);
    }
    free(h0);
    free(h1);
}
static void close2(pair *p, void *const dp[2], int64_t n, const char *what) {
    float *h0 = malloc((size_t)n * 4), *h1 = malloc((size_t)n * 4);
    void *h[2] = {h0, h1};
    get2(p, dp, (size_t)n * 4, h);
    int64_t same = 0;
    for (int64_t i = 0; i < n; i++) same += close_f(h0[i], h1[i], FWD_ULP, what, i);
    printf("cuda %s: %lld of %lld values bitwise, the rest within %d ulp\n", what, (long long)same, (long long)n, FWD_ULP);
    free(h0);
    free(h1);
}
/* close2 with an absolute floor abs (sums that cancel) */
static void close2_abs(pair *p, void *const dp[2], int64_t n, double abs, const char *what) {
    float *h0 = malloc((size_t)n * 4), *h1 = malloc((size_t)n * 4);
    void *h[2] = {h0, h1};
    get2(p, dp, (size_t)n * 4, h);
    int64_t same = 0;
    for (int64_t i = 0; i < n; i++) {
        if (fbits(h0[i]) == fbits(h1[i])) {
            same++;
            continue;
        }
        if (!(fabs((double)h0[i] - (double)h1[i]) <= abs)) close_f(h0[i], h1[i], FWD_ULP, what, i);
    }
    printf("cuda %s: %lld of %lld values bitwise, the rest within %d ulp or %.3g\n", what, (long long)same, (long long)n,
           FWD_ULP, abs);
    free(h0);
    free(h1);
}
static void rand_f(float *x, int64_t n, float scale, uint64_t *rs) {
    for (int64_t i = 0; i < n; i++) x[i] = scale * rng_f(rs);
}

/* The statements between them run once per device: D_ and S_ the device and
 * stream, I_ 0 (cuda) or 1 (cpu); they set st_ (an error fails the test). */
#define OPS2_BEGIN                                                                                                    \
    for (int I_ = 0; I_ < 2; I_++) {                                                                                  \
        og_device *D_ = p.d[I_];                                                                                      \
        og_stream *S_ = p.s[I_];                                                                                      \
        char e_[512] = "";                                                                                            \
        og_status st_ = OG_OK;
#define OPS2_END                                                                                                      \
    if (st_) fail_msg("%s: %s", I_ ? "cpu" : "cuda", e_);                                                             \
    }

static void test_forward_ops(void **state) {
    cuda_ctx *cx = *state;
    char err[512];
    pair p = {{cx->dev, NULL}, {NULL, NULL}, {{0}}, 0};
    assert_int_equal(og_device_cpu_create(512u << 20, 2, &cx->kern, &p.d[1], err, sizeof err), OG_OK);
    for (int i = 0; i < 2; i++) assert_int_equal(p.d[i]->ops->stream_create(p.d[i], &p.s[i], err, sizeof err), OG_OK);
    uint64_t rs = 4242;
    int n_cases = 0;

    /* matmul: quantized and float types, 1 and 13 rows, three jobs in one op */
    const og_ggml_type mm_types[] = {OG_TYPE_F32, OG_TYPE_F16, OG_TYPE_BF16, OG_TYPE_Q8_0, OG_TYPE_Q4_0, OG_TYPE_Q5_0,
                                     OG_TYPE_Q2_K, OG_TYPE_Q3_K, OG_TYPE_Q4_K, OG_TYPE_Q5_K, OG_TYPE_Q6_K,
                                     OG_TYPE_IQ2_XXS, OG_TYPE_MXFP4};
    for (size_t ti = 0; ti < sizeof mm_types / sizeof mm_types[0]; ti++) {
        const int64_t K = 1024 + (og_quant_traits(mm_types[ti])->blck == 1 ? 37 : 0), N = 45, M = 13;
        og_weight w;
        void *q = make_weight(mm_types[ti], K, N, &rs, &w);
        float *x = malloc((size_t)(M * K) * 4);
        rand_f(x, M * K, 2.0f, &rs);
        void *dw[2], *dx[2], *dy[2];
        put2(&p, q, w.row_bytes * (size_t)N, dw);
        put2(&p, x, (size_t)(M * K) * 4, dx);
        put2(&p, NULL, (size_t)(2 * M * N) * 4, dy);
        og_weight wd[2] = {w, w};
        wd[0].data = dw[0];
        wd[1].data = dw[1];
        OPS2_BEGIN
            const og_weight sl = wd[I_];
            og_matmul_job j[3] = {{&wd[I_], dx[I_], 1, dy[I_], OG_NUMERICS_CANONICAL},
                                  {&wd[I_], (float *)dx[I_] + K, M - 1, (float *)dy[I_] + N, OG_NUMERICS_CANONICAL},
                                  {&sl, dx[I_], M, (float *)dy[I_] + M * N, OG_NUMERICS_CANONICAL}};
            st_ = D_->ops->matmul(D_, S_, j, 3, e_, sizeof e_);
        OPS2_END
        char what[64];
        snprintf(what, sizeof what, "matmul %s", og_type_name(mm_types[ti]));
        same_bits2(&p, dy, (size_t)(2 * M * N) * 4, what);
        free(q);
        free(x);
        n_cases++;
    }

    /* rmsnorm (weight, none, in place), add, scale, swiglu (plain, clamped), copy, combine */
    {
        enum { N = 1000, R = 3, ST = 1024 };
        float *x = malloc(R * ST * 4), w[N], g[R * ST];
        rand_f(x, R * ST, 3.0f, &rs);
        rand_f(w, N, 1.5f, &rs);
        rand_f(g, R * ST, 8.0f, &rs);
        void *dx[2], *dw[2], *dy[2], *dg[2], *dz[2];
        put2(&p, x, R * ST * 4, dx);
        put2(&p, w, N * 4, dw);
        put2(&p, NULL, R * ST * 4, dy);
        put2(&p, g, R * ST * 4, dg);
        put2(&p, NULL, 4 * R * ST * 4, dz);
        OPS2_BEGIN
            og_rmsnorm_op a = {{dy[I_], N, R, ST}, {dx[I_], N, R, ST}, dw[I_], 1e-6f};
            st_ = D_->ops->rmsnorm(D_, S_, &a, e_, sizeof e_);
        OPS2_END
        same_bits2(&p, dy, R * ST * 4, "rmsnorm");
        OPS2_BEGIN
            og_rmsnorm_op a = {{dx[I_], N, R, ST}, {dx[I_], N, R, ST}, NULL, 1e-5f};
            st_ = D_->ops->rmsnorm(D_, S_, &a, e_, sizeof e_);
        OPS2_END
        same_bits2(&p, dx, R * ST * 4, "rmsnorm (no weight, in place)");
        float *z[2] = {dz[0], dz[1]};
        OPS2_BEGIN
            st_ = D_->ops->add(D_, S_, z[I_], dx[I_], dg[I_], R * ST, e_, sizeof e_);
            if (!st_) st_ = D_->ops->scale(D_, S_, z[I_] + R * ST, dg[I_], R * ST, -0.37f, e_, sizeof e_);
            if (!st_) st_ = D_->ops->swiglu(D_, S_, z[I_] + 2 * R * ST, dg[I_], dx[I_], R * ST, 0.0f, e_, sizeof e_);
            if (!st_) st_ = D_->ops->swiglu(D_, S_, z[I_] + 3 * R * ST, dg[I_], dx[I_], R * ST, 2.5f, e_, sizeof e_);
        OPS2_END
        same_bits2(&p, dz, 4 * R * ST * 4, "add, scale, swiglu, swiglu with clamp");
        OPS2_BEGIN /* two matrices of 3 rows of 10 floats each, transposed into dy */
            og_copy_op cp = {dy[I_], dg[I_], 40, 3, 2, 44 * 2, 44, 40, 400};
            st_ = D_->ops->copy(D_, S_, &cp, e_, sizeof e_);
        OPS2_END
        same_bits2(&p, dy, R * ST * 4, "copy");
        const int32_t off[4] = {0, 2, 2, 5}, rows[5] = {1, 0, 2, 2, 0};
        const float cw[5] = {0.5f, 0.25f, 0.75f, 0.125f, -1.5f};
        OPS2_BEGIN
            og_combine_op cb = {dy[I_], dz[I_], 3, 4, 300, off, rows, cw};
            st_ = D_->ops->moe_combine(D_, S_, &cb, e_, sizeof e_);
        OPS2_END
        same_bits2(&p, dy, R * ST * 4, "moe_combine");
        free(x);
        n_cases += 5;
    }

    /* RoPE/YaRN at positions up to 70,000; softmax */
    {
        enum { T = 5, NV = 3, DR = 64, TS = 256 };
        float x[T * TS];
        rand_f(x, T * TS, 2.0f, &rs);
        const int32_t pos[T] = {0, 7, 100, 4095, 70000};
        const og_rope r = {DR, 10000.0f, 0.025f, 1.0f, 4096, 32.0f, 1.0f, 1.2f};
        void *dx[2];
        put2(&p, x, sizeof x, dx);
        OPS2_BEGIN
            og_rope_op ro = {r, dx[I_], T, TS, NV, 72, pos};
            st_ = D_->ops->rope(D_, S_, &ro, e_, sizeof e_);
        OPS2_END
        same_bits2(&p, dx, sizeof x, "rope (YaRN)");
        void *dsm[2];
        float sm[3 * 1100];
        rand_f(sm, 3 * 1100, 30.0f, &rs);
        put2(&p, sm, sizeof sm, dsm);
        OPS2_BEGIN
            og_rows rr = {dsm[I_], 1000, 3, 1100};
            st_ = D_->ops->softmax(D_, S_, &rr, e_, sizeof e_);
        OPS2_END
        close2(&p, dsm, 3 * 1100, "softmax");
        n_cases += 2;
    }

    /* the router: sigmoid with bias and 8 groups keep 3 (V3), softmax without groups (V2), sqrt-softplus */
    for (int gating = 1; gating <= 3; gating++) {
        enum { T = 9, E = 64, K = 6 };
        float lg[T * E], bias[E];
        rand_f(lg, T * E, 4.0f, &rs);
        rand_f(bias, E, 0.5f, &rs);
        void *dl[2], *db[2], *di[2], *dwt[2];
        put2(&p, lg, sizeof lg, dl);
        put2(&p, bias, sizeof bias, db);
        put2(&p, NULL, T * K * 4, di);
        put2(&p, NULL, T * K * 4, dwt);
        OPS2_BEGIN
            og_router_op ro = {dl[I_], gating == 2 ? db[I_] : NULL, T, E, K, gating, gating == 2 ? 8 : 1, gating == 2 ? 3 : 1,
                               true, gating == 2 ? 2.5f : 1.0f, di[I_], dwt[I_], NULL, 0, NULL, 0};
            st_ = D_->ops->router(D_, S_, &ro, e_, sizeof e_);
        OPS2_END
        same_bits2(&p, di, T * K * 4, "router ids");
        close2(&p, dwt, T * K, gating == 1 ? "router weights (softmax)" : gating == 2 ? "router weights (sigmoid, groups)"
                                                                                     : "router weights (sqrt-softplus)");
        n_cases++;
    }

    /* kv_store then MLA attention over a paged cache (two sequences, block tables of
     * 16 positions), f32 and f16; get_rows of every type */
    for (int f16 = 0; f16 < 2; f16++) {
        enum { H = 4, RKV = 64, DR = 16, W = RKV + DR, BR = 16, NB = 6, T = 3 };
        const int eb = f16 ? 2 : 4;
        void *blk[NB][2];
        float *rows = malloc((size_t)NB * BR * W * 4);
        rand_f(rows, NB * BR * W, 1.0f, &rs);
        for (int b = 0; b < NB; b++) put2(&p, NULL, (size_t)BR * W * (size_t)eb, blk[b]);
        float *bt[2][NB];
        for (int b = 0; b < NB; b++) bt[0][b] = blk[b][0], bt[1][b] = blk[b][1];
        /* sequence 0: blocks 0-2 (positions 0..40), sequence 1: blocks 3-5 (0..33) */
        int32_t sfirst[2 * 41], spos[2 * 41];
        int ns = 0;
        for (int q = 0; q <= 40; q++) sfirst[ns] = 0, spos[ns++] = q;
        for (int q = 0; q <= 33; q++) sfirst[ns] = 3, spos[ns++] = q;
        void *dsrc[2];
        put2(&p, rows, (size_t)ns * W * 4, dsrc);
        OPS2_BEGIN
            og_kv_store_op ks = {{bt[I_], NB, BR, 0, W, W, f16 ? OG_KV_F16 : OG_KV_F32}, {dsrc[I_], W, ns, W}, sfirst, spos};
            st_ = D_->ops->kv_store(D_, S_, &ks, e_, sizeof e_);
        OPS2_END
        for (int b = 0; b < NB; b++) same_bits2(&p, blk[b], (size_t)BR * W * (size_t)eb, f16 ? "kv_store f16" : "kv_store f32");
        float qa[H * 16 * RKV], qp[T * H * W];
        rand_f(qa, H * 16 * RKV, 1.0f, &rs);
        rand_f(qp, T * H * W, 1.0f, &rs);
        void *dqa[2], *dqp[2], *dctx[2];
        put2(&p, qa, sizeof qa, dqa);
        put2(&p, qp, sizeof qp, dqp);
        put2(&p, NULL, H * 16 * RKV * 4, dctx);
        const int32_t kf[T] = {0, 3, 0}, tp[T] = {40, 33, 17};
        const bool canon[T] = {true, true, true};
        OPS2_BEGIN
            og_mla_op mo = {.n_tok = T, .n_head = H, .r_kv = RKV, .d_rope = DR, .kq_scale = 0.0721f, .q_abs = dqa[I_],
                            .qabs_head_stride = 16 * RKV, .q_pe = dqp[I_], .qpe_tok_stride = H * W, .qpe_head_stride = W,
                            .ctx = dctx[I_], .ctx_head_stride = 16 * RKV,
                            .kv = {bt[I_], NB, BR, 0, W, W, f16 ? OG_KV_F16 : OG_KV_F32}, .kv_first = kf, .pos = tp,
                            .canonical = canon};
            st_ = D_->ops->mla_attention(D_, S_, &mo, e_, sizeof e_);
        OPS2_END
        close2(&p, dctx, H * 16 * RKV, f16 ? "MLA attention (f16 cache)" : "MLA attention (f32 cache)");
        free(rows);
        n_cases += 2;
    }
    for (size_t ti = 0; ti < sizeof mm_types / sizeof mm_types[0]; ti++) {
        const int64_t K = 512, NR = 10;
        og_weight w;
        void *q = make_weight(mm_types[ti], K, NR, &rs, &w);
        void *dt[2], *dout[2];
        put2(&p, q, w.row_bytes * NR, dt);
        put2(&p, NULL, 4 * K * 4, dout);
        const int32_t ids[4] = {3, 0, 9, 3};
        OPS2_BEGIN
            og_get_rows_op g = {w, ids, 4, dout[I_]};
            g.table.data = dt[I_];
            st_ = D_->ops->get_rows(D_, S_, &g, e_, sizeof e_);
        OPS2_END
        char what[64];
        snprintf(what, sizeof what, "get_rows %s", og_type_name(mm_types[ti]));
        same_bits2(&p, dout, 4 * K * 4, what);
        free(q);
        n_cases++;
    }
    /* a type without kernels is refused by name at issue */
    og_weight iq = {OG_TYPE_IQ4_NL, p.allocs[0][0], 256, 1, 8 * 18};
    float *yy = p.allocs[0][1];
    og_matmul_job bad = {&iq, yy, 1, yy, OG_NUMERICS_CANONICAL};
    assert_int_equal(cx->dev->ops->matmul(cx->dev, p.s[0], &bad, 1, err, sizeof err), OG_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "IQ4_NL"));
    dev_sync(cx->dev, p.s[0]); /* and the stream goes on */
    printf("cuda forward ops: %d cases against the cpu device\n", n_cases);
    assert_int_equal(n_cases, 13 + 5 + 2 + 3 + 4 + 13);
    for (int i = 0; i < 2; i++) {
        p.d[i]->ops->stream_destroy(p.d[i], p.s[i]);
        for (int a = 0; a < p.n_allocs; a++) p.d[i]->ops->free(p.d[i], p.allocs[i][a]);
    }
    og_device_destroy(p.d[1]);
}

/* deepseek4's and deepseek41's ops (og_ds4_canon.h; tests/unit/test_ds4_canon.c
 * checks the same arithmetic on the CPU): the cuda device against the cpu
 * device on the same inputs. Bitwise: mHC collapse / expand, every QAT kind,
 * the indexer (V4 and V4.1's candidate blocks and mask); the
 * compressor and Engram (double exp: CUDA's and libm's) bitwise but for a
 * rare last-bit difference, checked within FWD_ULP; mHC mixes and the sink
 * attention (a float e^x) within FWD_ULP / an absolute bound, the bitwise
 * counts printed. Tokens are canonical (the GPU's one order of f32 dots). */
static void test_ds4_ops(void **state) {
    cuda_ctx *cx = *state;
    char err[512];
    pair p = {{cx->dev, NULL}, {NULL, NULL}, {{0}}, 0};
    assert_int_equal(og_device_cpu_create(512u << 20, 2, &cx->kern, &p.d[1], err, sizeof err), OG_OK);
    for (int i = 0; i < 2; i++) assert_int_equal(p.d[i]->ops->stream_create(p.d[i], &p.s[i], err, sizeof err), OG_OK);
    uint64_t rs = 777;
    int n_cases = 0;
    { /* mHC: mixes (body, head), collapse, expand; 4 copies */
        enum { T = 9, n = 4, N = 512, NM = (2 + n) * n };
        float mix[T * NM], base[NM], scale[3] = {0.7f, 1.3f, 2.1f}, *sv = malloc(T * n * N * 4), y[T * N];
        rand_f(mix, T * NM, 3.0f, &rs);
        rand_f(base, NM, 1.0f, &rs);
        rand_f(sv, T * n * N, 2.0f, &rs);
        rand_f(y, T * N, 1.0f, &rs);
        void *dm[2], *db[2], *dsc[2], *dpre[2], *dpost[2], *dcomb[2], *ds[2], *dx[2], *dy[2];
        put2(&p, mix, sizeof mix, dm);
        put2(&p, base, sizeof base, db);
        put2(&p, scale, sizeof scale, dsc);
        put2(&p, NULL, T * n * 4, dpre);
        put2(&p, NULL, T * n * 4, dpost);
        put2(&p, NULL, T * n * n * 4, dcomb);
        put2(&p, sv, T * n * N * 4, ds);
        put2(&p, NULL, T * N * 4, dx);
        put2(&p, y, sizeof y, dy);
        OPS2_BEGIN
            og_hc_mix_op mo = {dm[I_], T, n, false, dsc[I_], db[I_], 1e-6f, 20, dpre[I_], dpost[I_], dcomb[I_]};
            st_ = D_->ops->hc_mix(D_, S_, &mo, e_, sizeof e_);
        OPS2_END
        close2(&p, dpre, T * n, "hc_mix pre");
        close2_abs(&p, dcomb, T * n * n, 1e-5, "hc_mix comb"); /* Sinkhorn: many roundings after each exp */
        float pre[T * n], post[T * n], comb[T * n * n]; /* collapse / expand on the same weights on both */
        rand_f(pre, T * n, 1.0f, &rs);
        rand_f(post, T * n, 2.0f, &rs);
        rand_f(comb, T * n * n, 1.0f, &rs);
        void *dpre2[2], *dpost2[2], *dcomb2[2];
        put2(&p, pre, sizeof pre, dpre2);
        put2(&p, post, sizeof post, dpost2);
        put2(&p, comb, sizeof comb, dcomb2);
        OPS2_BEGIN
            og_hc_op co = {T, N, n, ds[I_], dx[I_], dpre2[I_], NULL};
            st_ = D_->ops->hc_collapse(D_, S_, &co, e_, sizeof e_);
            og_hc_op eo = {T, N, n, ds[I_], dy[I_], dpost2[I_], dcomb2[I_]};
            if (!st_) st_ = D_->ops->hc_expand(D_, S_, &eo, e_, sizeof e_);
        OPS2_END
        same_bits2(&p, dx, T * N * 4, "hc_collapse");
        same_bits2(&p, ds, T * n * N * 4, "hc_expand");
        OPS2_BEGIN
            og_hc_mix_op mo = {dm[I_], T, n, true, dsc[I_], db[I_], 1e-6f, 1, dpre[I_], NULL, NULL};
            st_ = D_->ops->hc_mix(D_, S_, &mo, e_, sizeof e_);
        OPS2_END
        close2(&p, dpre, T * n, "hc_mix head");
        free(sv);
        n_cases += 4;
    }
    { /* QAT: every kind */
        const struct { og_qat_kind k; int64_t n_round; int32_t block; } qc[] = {
            {OG_QAT_FP8, 448, 0}, {OG_QAT_FP8, 100, 32}, {OG_QAT_FP4_HADAMARD, 128, 0}, {OG_QAT_HADAMARD, 64, 0},
            {OG_QAT_F16, 500, 0}, {OG_QAT_FP4, 130, 0},  {OG_QAT_FP4_E4M3, 77, 0},       {OG_QAT_FP4_E4M3, 512, 16}};
        enum { R = 5, ST = 520 };
        float x[R * ST];
        for (size_t ci = 0; ci < sizeof qc / sizeof qc[0]; ci++) {
            for (int64_t i = 0; i < R * ST; i++)
                x[i] = (i % 7 == 3 ? (float)((int)(rng_next(&rs) % 25) - 12) * 0.25f : rng_f(&rs)) * (float)(1 + i / ST * 40);
            void *dq[2];
            put2(&p, x, sizeof x, dq);
            OPS2_BEGIN
                og_qat_op qo = {{dq[I_], ST, R, ST}, qc[ci].k, qc[ci].n_round, qc[ci].block};
                st_ = D_->ops->qat(D_, S_, &qo, e_, sizeof e_);
            OPS2_END
            char what[64];
            snprintf(what, sizeof what, "qat kind %d n_round %lld", (int)qc[ci].k, (long long)qc[ci].n_round);
            same_bits2(&p, dq, sizeof x, what);
            n_cases++;
        }
    }
    { /* the compressor, overlapping (ratio 4) with RoPE, FP8 and f16; two sequences interleaved */
        enum { T = 24, W = 128, RATIO = 4, LW = 2 * W, SLOTS = 2 * RATIO };
        const og_rope rope = {32, 10000.0f, 1.0f, 0.0f, 4096, 32.0f, 1.0f, 1.0f};
        float kv[T * LW], sc[T * LW], norm[W];
        rand_f(kv, T * LW, 2.0f, &rs);
        rand_f(sc, T * LW, 4.0f, &rs);
        rand_f(norm, W, 1.5f, &rs);
        void *dkv[2], *dsc[2], *dn[2], *dst[2][2], *dout[2];
        put2(&p, kv, sizeof kv, dkv);
        put2(&p, sc, sizeof sc, dsc);
        put2(&p, norm, sizeof norm, dn);
        for (int q = 0; q < 2; q++) put2(&p, NULL, 2 * SLOTS * LW * 4, dst[q]);
        put2(&p, NULL, T * W * 4, dout);
        int32_t pos[T], ps[2] = {0, 0};
        float *stv[2][T], *outv[2][T];
        for (int t = 0; t < T; t++) {
            const int q = t % 3 == 2;
            pos[t] = ps[q]++;
            for (int i = 0; i < 2; i++) {
                stv[i][t] = dst[q][i];
                outv[i][t] = (pos[t] + 1) % RATIO ? NULL : (float *)dout[i] + t * W;
            }
        }
        OPS2_BEGIN
            og_compress_op co = {T, W, RATIO, true, dkv[I_], dsc[I_], stv[I_], pos, outv[I_], dn[I_], 1e-6f, rope, OG_QAT_FP8, 96, true};
            st_ = D_->ops->compress(D_, S_, &co, e_, sizeof e_);
        OPS2_END
        close2(&p, dout, T * W, "compress (overlap, ratio 4)");
        for (int q = 0; q < 2; q++) same_bits2(&p, dst[q], 2 * SLOTS * LW * 4, "compressor state");
        n_cases += 2;
    }
    { /* the indexer: V4's top-k, V4.1's candidate source, then its masked reindex */
        enum { T = 5, H = 8, D = 64, BR = 16, NB = 20, TOPK = 24, CB = 8, CT = 4 };
        float *keys = malloc((size_t)NB * BR * D * 4), q[T * H * D], w[T * H];
        rand_f(keys, NB * BR * D, 1.0f, &rs);
        rand_f(q, T * H * D, 1.0f, &rs);
        rand_f(w, T * H, 0.3f, &rs);
        void *dk[2], *dq[2], *dw[2], *dsel[2], *dcand[2], *dsel2[2];
        put2(&p, keys, (size_t)NB * BR * D * 4, dk);
        put2(&p, q, sizeof q, dq);
        put2(&p, w, sizeof w, dw);
        put2(&p, NULL, T * TOPK * 4, dsel);
        put2(&p, NULL, T * CT * 4, dcand);
        put2(&p, NULL, T * TOPK * 4, dsel2);
        float *blk[2][NB];
        for (int b = 0; b < NB; b++)
            for (int i = 0; i < 2; i++) blk[i][b] = (float *)dk[i] + (size_t)b * BR * D;
        const int32_t first[T] = {0, 0, 0, 0, 0}, nk[T] = {3, 24, 25, 200, 317};
        const bool canon[T] = {true, true, true, true, true};
        for (int v41 = 0; v41 < 2; v41++) {
            OPS2_BEGIN
                og_indexer_op io = {.n_tok = T, .n_head = H, .d_head = D, .top_k = TOPK, .q = dq[I_], .w = dw[I_],
                                    .keys = {blk[I_], NB, BR, 0, D, D, OG_KV_F32}, .key_first = first, .n_keys = nk,
                                    .sel = dsel[I_], .canonical = canon, .cand_block = v41 ? CB : 0,
                                    .cand_topk = v41 ? CT : 0, .cand_out = v41 ? dcand[I_] : NULL, .sel_all = v41};
                st_ = D_->ops->indexer(D_, S_, &io, e_, sizeof e_);
                if (!st_ && v41) {
                    io.cand_out = NULL;
                    io.cand_in = dcand[I_];
                    io.sel = dsel2[I_];
                    st_ = D_->ops->indexer(D_, S_, &io, e_, sizeof e_);
                }
            OPS2_END
            same_bits2(&p, dsel, T * TOPK * 4, v41 ? "indexer (V4.1, sel_all)" : "indexer (V4)");
            if (v41) {
                same_bits2(&p, dcand, T * CT * 4, "indexer candidate blocks");
                same_bits2(&p, dsel2, T * TOPK * 4, "indexer masked by candidate blocks");
            }
            n_cases++;
        }
        free(keys);
    }
    { /* sink attention over raw and compressed rows, selected (V4) and sel_every (V4.1) */
        enum { T = 3, H = 4, D = 128, BR = 8, NB = 4, TOPK = 6 };
        float raw[20 * D], comp[NB * BR * D], q[T * H * D], sinks[H];
        rand_f(raw, 20 * D, 1.0f, &rs);
        rand_f(comp, NB * BR * D, 1.0f, &rs);
        rand_f(q, T * H * D, 1.5f, &rs);
        rand_f(sinks, H, 2.0f, &rs);
        void *draw[2], *dcomp[2], *dq[2], *dsk[2], *dout[2], *dsel[2];
        put2(&p, raw, sizeof raw, draw);
        put2(&p, comp, sizeof comp, dcomp);
        put2(&p, q, sizeof q, dq);
        put2(&p, sinks, sizeof sinks, dsk);
        put2(&p, NULL, T * H * D * 4, dout);
        const float *rows[2][17];
        for (int r = 0; r < 17; r++)
            for (int i = 0; i < 2; i++) rows[i][r] = (const float *)draw[i] + (r * 3 % 20) * D;
        float *cb[2][NB];
        for (int b = 0; b < NB; b++)
            for (int i = 0; i < 2; i++) cb[i][b] = (float *)dcomp[i] + b * BR * D;
        const int64_t roff[T + 1] = {0, 5, 5, 17};
        const int32_t cfirst[T] = {0, 0, 0}, ncomp[T] = {4, 30, 12};
        const bool canon[T] = {true, true, true};
        for (int every = 0; every < 2; every++) {
            int32_t sel[T * TOPK] = {0, 1, 2, 3, 0, 0, 2, 5, 9, 11, 20, 29, 0, 3, 4, 7, 10, 11};
            if (every) sel[3] = -1, sel[15] = -1;
            put2(&p, sel, sizeof sel, dsel);
            OPS2_BEGIN
                og_sink_attn_op so = {.n_tok = T, .n_head = H, .d_head = D, .kq_scale = 0.09f, .q = dq[I_], .o = dout[I_],
                                      .sinks = dsk[I_], .rows = rows[I_], .row_off = roff,
                                      .comp = {cb[I_], NB, BR, 0, D, D, OG_KV_F32}, .comp_first = cfirst, .n_comp = ncomp,
                                      .sel = dsel[I_], .top_k = TOPK, .canonical = canon, .sel_every = every};
                st_ = D_->ops->sink_attention(D_, S_, &so, e_, sizeof e_);
            OPS2_END
            /* a weighted sum of rows of magnitude <= 1 that cancels: 1 ulp per weight, absolutely */
            close2_abs(&p, dout, T * H * D, 17 * 0x1p-23, every ? "sink attention (sel_every)" : "sink attention");
            n_cases++;
        }
    }
    { /* Engram's gates, 4 copies */
        enum { T = 5, n = 4, N = 256 };
        float *sv = malloc(T * n * N * 4), *kv = malloc(T * (n + 1) * N * 4), qw[n * N], kw[n * N];
        rand_f(sv, T * n * N, 2.0f, &rs);
        rand_f(kv, T * (n + 1) * N, 1.0f, &rs);
        rand_f(qw, n * N, 1.0f, &rs);
        rand_f(kw, n * N, 1.0f, &rs);
        void *ds[2], *dkv[2], *dqw[2], *dkw[2];
        put2(&p, sv, T * n * N * 4, ds);
        put2(&p, kv, T * (n + 1) * N * 4, dkv);
        put2(&p, qw, sizeof qw, dqw);
        put2(&p, kw, sizeof kw, dkw);
        OPS2_BEGIN
            og_engram_op eo = {T, N, n, ds[I_], dkv[I_], dqw[I_], dkw[I_], 1e-20f};
            st_ = D_->ops->engram(D_, S_, &eo, e_, sizeof e_);
        OPS2_END
        close2(&p, ds, T * n * N, "engram");
        free(sv), free(kv);
        n_cases++;
    }
    printf("cuda deepseek4 / deepseek41 ops: %d cases against the cpu device\n", n_cases);
    assert_int_equal(n_cases, 4 + 8 + 2 + 2 + 2 + 1);
    for (int i = 0; i < 2; i++) {
        p.d[i]->ops->stream_destroy(p.d[i], p.s[i]);
        for (int a = 0; a < p.n_allocs; a++) p.d[i]->ops->free(p.d[i], p.allocs[i][a]);
    }
    og_device_destroy(p.d[1]);
}

int main(void) {
    char err[512];
    cuda_ctx cx;
    og_status st = og_device_cuda_create(0, &cx.dev, err, sizeof err);
    if (st == OG_ERR_UNSUPPORTED) {
        printf("SKIP (hardware): %s\n", err); /* "no CUDA device (why)" */
        return 77;
    }
    if (st) {
        fprintf(stderr, "cuda device: %s\n", err);
        return 1;
    }
    char desc[256];
    og_device_cuda_describe(cx.dev, desc, sizeof desc);
    printf("cuda device: %s\n", desc);
    og_kernels_init(OG_ISA_SCALAR, &cx.kern);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate(test_products, &cx),
        cmocka_unit_test_prestate(test_experts, &cx),
        cmocka_unit_test_prestate(test_streams, &cx),
        cmocka_unit_test_prestate(test_forward_ops, &cx),
        cmocka_unit_test_prestate(test_ds4_ops, &cx),
    };
    const int rc = cmocka_run_group_tests(tests, NULL, NULL);
    og_device_destroy(cx.dev);
    return rc;
}
