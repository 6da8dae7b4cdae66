/* cuda: the cuda device (og_device_cuda.h) against the cpu backend, on a GPU.
 * Without one (or without a driver) it prints one line, "SKIP (hardware): no
 * CUDA device (...)", and exits 77. With one: every quantized product kernel
 * against og_cpu_matmul_multi's canonical numerics (the host tiers' bits,
 * themselves tested against quant_ref.c), bit for bit, over row lengths below,
 * at and past one warp's 32 blocks, output counts that leave warps idle and
 * several activation rows; the routed-expert op against og_cpu_experts bit for
 * bit (types whose activations differ between gate and up, V4's clamp, a slot
 * used by two groups); streams, events, waits and both copy paths; the errors. */
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

static const og_ggml_type types[] = {OG_TYPE_Q8_0, OG_TYPE_Q4_0, OG_TYPE_Q5_0, OG_TYPE_Q2_K,
                                     OG_TYPE_Q3_K, OG_TYPE_Q4_K, OG_TYPE_Q5_K, OG_TYPE_Q6_K};

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
    assert_int_equal(n_cases, 32);
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
    };
    const int rc = cmocka_run_group_tests(tests, NULL, NULL);
    og_device_destroy(cx.dev);
    return rc;
}
