/* The dispatcher (src/moe/dispatch.c) on the cpu device: the device part and
 * the host part of a MoE layer really overlap (the device's expert op is held
 * while the host pool finishes the cold experts: the order of events is
 * asserted, never times); a forward pass gives the host-only logits bit for bit
 * with 0, some and all experts resident, with migrations between steps and in a
 * batch with another sequence, at canonical numerics, on files with Q2_K, Q3_K, Q4_K, Q6_K and Q8_0 experts; and
 * a copy into a slot that a queued op reads waits for that op; deepseek4's clamped
 * SwiGLU (og_moe_weights.swiglu_clamp) on every tier, host and device, routed and
 * shared, against a double reference.
 * usage: test_dispatch ONEGPU */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kernels_fixture.h"
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>

#include "og_arch.h" /* white-box: a model whose layers carry a SwiGLU clamp (test_swiglu_clamp) */
#include "og_moe.h"

#define N_FILES 5
static const char *g_onegpu;
static char g_tmp[256], g_files[N_FILES][300];
/* Files the sweep covers: all five types in the plain build; Q8_0 and Q2_K in the
 * sanitizer builds (OG_SANITIZED=1, set by tests/CMakeLists.txt), which run the
 * same code paths ten times slower: the per-type values are the plain build's job. */
static int g_n_files = N_FILES;
static const char *const g_routed[N_FILES] = {"Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q6_K"};

/* 4 layers (the first dense), 16 experts of FFN 256 over width 256, 4 used, 1 shared */
#define SMALL                                                                                                          \
    "--tokenizer none --vocab 512 --n-layer 4 --n-dense 1 --n-embd 256 --n-head 4 --q-lora-rank 64 "               \
    "--kv-lora-rank 64 --qk-nope 32 --qk-rope 16 --v-head 32 --n-ff 256 --n-expert 16 --n-expert-used 4 "          \
    "--n-ff-exp 256 --n-expert-shared 1 --n-group 4 --n-group-used 2"
#define NL 4
#define NE 16

static const int32_t g_prompt[6] = {1, 77, 300, 5, 411, 42}, g_decode[4] = {9, 250, 13, 499};

/* The logits of the prompt (all rows) then of 4 decode steps, [10][V]; between
 * calls the migrator (if any) moves experts. */
static void run_seq(const og_model *m, const og_run_ctx *rc, og_migrator *mg, og_expert_cache *c, float *out) {
    char err[512];
    og_kv kv = {0};
    const size_t V = og_model_get_info(m)->n_vocab;
    assert_int_equal(og_model_forward(m, rc, &kv, g_prompt, 6, out, true, err, sizeof err), OG_OK);
    for (int i = 0; i < 4; i++) {
        if (mg) assert_int_equal(og_migrator_step(mg, c, m, rc->stats->counts, err, sizeof err), OG_OK);
        assert_int_equal(og_model_forward(m, rc, &kv, &g_decode[i], 1, out + (6 + i) * V, false, err, sizeof err), OG_OK);
    }
    og_kv_free(&kv);
}

/* A cpu device with slots_per_layer slots, the experts with want(e) loaded. */
typedef struct placed {
    og_device *dev;
    og_expert_cache *cache;
    og_dispatch *dispatch;
    uint64_t counts[NL * NE], layer_routes[NL], layer_hits[NL];
    og_expert_stats es;
} placed;

static void place(placed *p, const og_model *m, const og_kernels *k, uint32_t slots_per_layer, bool (*want)(uint32_t e)) {
    char err[512];
    memset(p, 0, sizeof *p);
    uint32_t slots[NL];
    uint8_t res[NL * NE] = {0};
    for (uint32_t l = 0; l < NL; l++) {
        slots[l] = slots_per_layer;
        for (uint32_t e = 0; e < NE; e++) res[l * NE + e] = want(e);
    }
    assert_int_equal(og_device_cpu_create(64u << 20, 2, k, &p->dev, err, sizeof err), OG_OK);
    assert_int_equal(og_expert_cache_create(m, slots, p->dev, &p->cache, err, sizeof err), OG_OK);
    assert_int_equal(og_expert_cache_load(p->cache, m, res, err, sizeof err), OG_OK);
    assert_int_equal(og_dispatch_create(p->dev, p->cache, &p->dispatch, err, sizeof err), OG_OK);
    p->es = (og_expert_stats){.counts = p->counts, .resident = p->cache->resident, .layer_routes = p->layer_routes,
                              .layer_hits = p->layer_hits};
}

static void unplace(placed *p) {
    og_dispatch_free(p->dispatch);
    og_expert_cache_free(p->cache);
    og_device_destroy(p->dev);
}

/* Counts the forward-pass ops the cpu device ran (on its stream threads). */
static void count_compute(void *ctx, int stream, og_cpu_op_kind kind, bool done) {
    (void)stream;
    if (kind == OG_CPU_OP_COMPUTE && done) atomic_fetch_add((atomic_int *)ctx, 1);
}

static bool want_none(uint32_t e) { return (void)e, false; }
static bool want_some(uint32_t e) { return e % 4 == 1; }
static bool want_all(uint32_t e) { return (void)e, true; }

static void test_bit_identical(void **state) {
    (void)state;
    og_kernels k = fx_best_kernels();
    char err[512];
    og_pool *pool;
    assert_int_equal(og_pool_create(2, NULL, &pool, err, sizeof err), OG_OK);
    og_dispatch *host;
    assert_int_equal(og_dispatch_create(NULL, NULL, &host, err, sizeof err), OG_OK);
    for (int fi = 0; fi < g_n_files; fi++) {
        og_model *m;
        if (og_model_load(g_files[fi], NULL, &m, err, sizeof err)) fail_msg("%s", err);
        og_ggml_type want_type;
        assert_int_equal(og_type_from_name(g_routed[fi], &want_type), OG_OK);
        assert_int_equal(og_model_get_info(m)->moe[1].gate_exps.type, want_type);
        const size_t V = og_model_get_info(m)->n_vocab, n_out = 10 * V;
        float *ref = malloc(n_out * sizeof *ref), *got = malloc(n_out * sizeof *got);
        og_run_ctx rc = {.kern = &k, .pool = pool, .dispatch = og_dispatch_table(host),
                         .device_numerics = OG_NUMERICS_CANONICAL, .host_numerics = OG_NUMERICS_CANONICAL};
        run_seq(m, &rc, NULL, NULL, ref);
        /* 0 / some / all resident, then some with migrations between steps, then
         * that again with the forward pass's own ops on the device's stream */
        static const uint32_t slot_n[5] = {4, 4, NE, 4, 4};
        bool (*const wants[5])(uint32_t) = {want_none, want_some, want_all, want_some, want_some};
        for (int cfg = 0; cfg < 5; cfg++) {
            placed p;
            place(&p, m, &k, slot_n[cfg], wants[cfg]);
            og_migrator *mg = NULL;
            if (cfg >= 3) assert_int_equal(og_migrator_create(NL, NE, 2, 1, 0.85, &mg, err, sizeof err), OG_OK);
            og_run_ctx prc = rc;
            prc.dispatch = og_dispatch_table(p.dispatch);
            prc.stats = &p.es;
            atomic_int n_compute = 0;
            if (cfg == 4) {
                prc.dev = p.dev;
                assert_int_equal(p.dev->ops->stream_create(p.dev, &prc.stream, err, sizeof err), OG_OK);
                assert_int_equal(og_device_cpu_trace(p.dev, count_compute, &n_compute), OG_OK);
            }
            run_seq(m, &prc, mg, p.cache, got);
            if (cfg == 4) {
                p.dev->ops->stream_destroy(p.dev, prc.stream);
                assert_int_equal(og_device_cpu_trace(p.dev, NULL, NULL), OG_OK);
                assert_true(atomic_load(&n_compute) > 5 * 20); /* every step's ops ran there */
            }
            for (size_t r = 0; r < 10; r++) assert_memory_equal(ref + r * V, got + r * V, V * sizeof *got);
            const uint64_t routes = 10ull * 4 * (NL - 1);
            assert_int_equal(p.es.routes, routes);
            if (cfg == 0) assert_int_equal(p.es.routes_resident, 0);
            if (cfg == 2) assert_int_equal(p.es.routes_resident, routes);
            if (cfg == 1 || cfg >= 3) assert_true(p.es.routes_resident > 0 && p.es.routes_resident < routes);
            if (cfg >= 3) assert_true(p.cache->migrations > 0);
            if (cfg == 1) { /* in a batch: the prompt beside another sequence, interleaved */
                og_kv ka = {0}, kb = {0};
                og_kv *kvs[2] = {&ka, &kb};
                int32_t tok[12], seq[12];
                bool want[12];
                for (int i = 0; i < 12; i++) {
                    tok[i] = i % 2 ? (int32_t)(i * 31 % V) : g_prompt[i / 2];
                    seq[i] = i % 2;
                    want[i] = i % 2 == 0;
                }
                og_batch b = {12, tok, seq, want, NULL};
                assert_int_equal(og_model_forward_batch(m, &prc, kvs, 2, &b, got, err, sizeof err), OG_OK);
                assert_memory_equal(ref, got, 6 * V * sizeof *got); /* the prompt's 6 rows, as alone on the host */
                og_kv_free(&ka);
                og_kv_free(&kb);
            }
            og_migrator_free(mg);
            unplace(&p);
        }
        if (fi == 0) { /* the device really computes from its slots: a wrong slot changes the logits */
            placed p;
            place(&p, m, &k, NE, want_all);
            og_expert_slots sl;
            assert_int_equal(og_expert_cache_slots(p.cache, m, 1, &sl), OG_OK);
            uint8_t *zero = calloc(1, (size_t)sl.slot_bytes);
            og_stream *s;
            og_event ev;
            for (uint32_t e = 0; e < NE; e++) { /* every expert of layer 1 zeroed */
                const int32_t j = og_expert_cache_slot(p.cache, 1, e);
                assert_true(j >= 0);
                assert_int_equal(p.dev->ops->stream_create(p.dev, &s, err, sizeof err), OG_OK);
                assert_int_equal(p.dev->ops->copy_to_device(p.dev, s, (uint8_t *)sl.base + (uint64_t)j * sl.slot_bytes,
                                                            zero, sl.slot_bytes, err, sizeof err),
                                 OG_OK);
                assert_int_equal(p.dev->ops->event_record(p.dev, s, &ev, err, sizeof err), OG_OK);
                assert_int_equal(p.dev->ops->event_wait(p.dev, ev, err, sizeof err), OG_OK);
                p.dev->ops->stream_destroy(p.dev, s);
            }
            og_run_ctx prc = rc;
            prc.dispatch = og_dispatch_table(p.dispatch);
            run_seq(m, &prc, NULL, NULL, got);
            assert_true(memcmp(ref, got, V * sizeof *got) != 0);
            free(zero);
            unplace(&p);
        }
        free(ref);
        free(got);
        og_model_free(m);
    }
    og_dispatch_free(host);
    og_pool_free(pool);
}

/* ---- ordering: one log for the dispatcher's points and the device's ops ---- */

enum { EV_ISSUED = 0, EV_HOST_DONE, EV_HELD, EV_RELEASED, EV_DEV_DONE, EV_OP_START, EV_OP_END };

typedef struct order_log {
    pthread_mutex_t mu;
    int n;
    struct {
        int what, stream;
        og_cpu_op_kind kind;
    } e[4096];
    og_device *dev;
    int64_t layer;   /* the first layer with device work, -1 before */
    bool op_started_before_host_done;
} order_log;

static void log_add(order_log *lg, int what, int stream, og_cpu_op_kind kind) {
    pthread_mutex_lock(&lg->mu);
    if (lg->n < 4096) {
        lg->e[lg->n].what = what;
        lg->e[lg->n].stream = stream;
        lg->e[lg->n].kind = kind;
        lg->n++;
    }
    pthread_mutex_unlock(&lg->mu);
}

static void on_op(void *ctx, int stream, og_cpu_op_kind kind, bool done) {
    log_add(ctx, done ? EV_OP_END : EV_OP_START, stream, kind);
}

/* Index of the first entry matching (what, kind or -1), from `from`; -1 if none. */
static int find(order_log *lg, int from, int what, int kind) {
    for (int i = from; i < lg->n; i++)
        if (lg->e[i].what == what && (kind < 0 || (int)lg->e[i].kind == kind)) return i;
    return -1;
}

static void on_point(void *ctx, uint32_t layer, og_dispatch_point at) {
    order_log *lg = ctx;
    if (at == OG_DISPATCH_DEVICE_ISSUED && lg->layer < 0) lg->layer = layer;
    if ((int64_t)layer != lg->layer) return;
    log_add(lg, at == OG_DISPATCH_DEVICE_ISSUED ? EV_ISSUED : at == OG_DISPATCH_HOST_DONE ? EV_HOST_DONE : EV_DEV_DONE, -1,
            OG_CPU_OP_RECORD);
    if (at != OG_DISPATCH_HOST_DONE) return;
    /* the host part is done; the device's expert op is held at its start: the
     * device thread is there, not finished */
    og_device_cpu_wait_held(lg->dev);
    pthread_mutex_lock(&lg->mu);
    lg->op_started_before_host_done = find(lg, 0, EV_OP_START, OG_CPU_OP_EXPERTS) >= 0;
    pthread_mutex_unlock(&lg->mu);
    log_add(lg, EV_HELD, -1, OG_CPU_OP_EXPERTS);
    log_add(lg, EV_RELEASED, -1, OG_CPU_OP_EXPERTS);
    og_device_cpu_release(lg->dev);
}

static void test_overlap(void **state) {
    (void)state;
    og_kernels k = fx_best_kernels();
    char err[512];
    og_model *m;
    if (og_model_load(g_files[0], NULL, &m, err, sizeof err)) fail_msg("%s", err);
    og_pool *pool;
    assert_int_equal(og_pool_create(2, NULL, &pool, err, sizeof err), OG_OK);
    placed p;
    place(&p, m, &k, 4, want_some);
    static order_log lg; /* large: not on the stack */
    memset(&lg, 0, sizeof lg);
    pthread_mutex_init(&lg.mu, NULL);
    lg.dev = p.dev;
    lg.layer = -1;
    assert_int_equal(og_device_cpu_trace(p.dev, on_op, &lg), OG_OK);
    og_dispatch_set_hook(p.dispatch, on_point, &lg);
    assert_int_equal(og_device_cpu_hold(p.dev, OG_CPU_OP_EXPERTS), OG_OK);
    og_run_ctx rc = {.kern = &k, .pool = pool, .dispatch = og_dispatch_table(p.dispatch), .stats = &p.es,
                     .device_numerics = OG_NUMERICS_CANONICAL, .host_numerics = OG_NUMERICS_CANONICAL};
    const size_t V = og_model_get_info(m)->n_vocab;
    float *lp = malloc(6 * V * sizeof *lp), *lh = malloc(6 * V * sizeof *lh);
    og_kv kv = {0};
    assert_int_equal(og_model_forward(m, &rc, &kv, g_prompt, 6, lp, true, err, sizeof err), OG_OK);
    og_kv_free(&kv);
    og_dispatch_set_hook(p.dispatch, NULL, NULL);
    assert_int_equal(og_device_cpu_trace(p.dev, NULL, NULL), OG_OK);
    /* the first layer with device work also had cold routes for the host */
    assert_true(lg.layer >= 1);
    assert_true(p.layer_hits[lg.layer] > 0 && p.layer_hits[lg.layer] < p.layer_routes[lg.layer]);
    /* issued -> host done (op held, not started) -> released -> op runs -> waited */
    assert_false(lg.op_started_before_host_done);
    const int i_issued = find(&lg, 0, EV_ISSUED, -1), i_host = find(&lg, 0, EV_HOST_DONE, -1);
    const int i_held = find(&lg, 0, EV_HELD, -1), i_rel = find(&lg, 0, EV_RELEASED, -1);
    const int i_start = find(&lg, 0, EV_OP_START, OG_CPU_OP_EXPERTS), i_end = find(&lg, 0, EV_OP_END, OG_CPU_OP_EXPERTS);
    const int i_done = find(&lg, 0, EV_DEV_DONE, -1);
    assert_true(i_issued >= 0 && i_issued < i_host);
    assert_true(i_host < i_held && i_held < i_rel && i_rel < i_start && i_start < i_end && i_end < i_done);
    /* and the same logits as the host alone */
    og_dispatch *host;
    assert_int_equal(og_dispatch_create(NULL, NULL, &host, err, sizeof err), OG_OK);
    rc.dispatch = og_dispatch_table(host);
    rc.stats = NULL;
    assert_int_equal(og_model_forward(m, &rc, &kv, g_prompt, 6, lh, true, err, sizeof err), OG_OK);
    assert_memory_equal(lp, lh, 6 * V * sizeof *lp);
    og_kv_free(&kv);
    og_dispatch_free(host);
    pthread_mutex_destroy(&lg.mu);
    free(lp);
    free(lh);
    unplace(&p);
    og_pool_free(pool);
    og_model_free(m);
}

/* An expert op reading slot j is held; a migration into j is issued meanwhile.
 * The copy's stream waits on the op's event (settled, nothing copied); once the
 * op is released it reads the old expert (bitwise the host's result for it),
 * and only then does the copy run. */
static void test_migration_waits_for_reader(void **state) {
    (void)state;
    og_kernels k = fx_best_kernels();
    char err[512];
    og_model *m;
    if (og_model_load(g_files[0], NULL, &m, err, sizeof err)) fail_msg("%s", err);
    placed p;
    place(&p, m, &k, 4, want_some); /* layer 1: experts 1, 5, 9, 13 */
    og_device *dev = p.dev;
    const og_device_ops *ops = dev->ops;
    static order_log lg;
    memset(&lg, 0, sizeof lg);
    pthread_mutex_init(&lg.mu, NULL);
    const uint32_t l = 1, e_old = 5, e_new = 6;
    const int32_t j = og_expert_cache_slot(p.cache, l, e_old);
    assert_true(j >= 0);
    og_expert_slots sl;
    assert_int_equal(og_expert_cache_slots(p.cache, m, l, &sl), OG_OK);
    const int64_t D = og_model_get_info(m)->n_embd, Fe = og_model_get_info(m)->n_ff_exp;
    float *x = malloc((size_t)D * sizeof *x), *y = malloc((size_t)D * sizeof *y), *yh = malloc((size_t)D * sizeof *yh);
    for (int64_t i = 0; i < D; i++) x[i] = (float)((i * 7919) % 101 - 50) / 50.0f;
    void *dx, *dy;
    assert_int_equal(ops->alloc(dev, (uint64_t)D * 4, &dx, err, sizeof err), OG_OK);
    assert_int_equal(ops->alloc(dev, (uint64_t)D * 4, &dy, err, sizeof err), OG_OK);
    og_stream *s;
    assert_int_equal(ops->stream_create(dev, &s, err, sizeof err), OG_OK);
    assert_int_equal(og_device_cpu_trace(dev, on_op, &lg), OG_OK);
    assert_int_equal(og_device_cpu_hold(dev, OG_CPU_OP_EXPERTS), OG_OK);
    const og_expert_group g = {j, 1, OG_NUMERICS_CANONICAL};
    og_expert_op op = {.slots = sl, .groups = &g, .n_groups = 1, .x = dx, .y = dy};
    og_event ev;
    assert_int_equal(ops->copy_to_device(dev, s, dx, x, (uint64_t)D * 4, err, sizeof err), OG_OK);
    assert_int_equal(ops->experts(dev, s, &op, err, sizeof err), OG_OK);
    assert_int_equal(ops->copy_to_host(dev, s, y, dy, (uint64_t)D * 4, err, sizeof err), OG_OK);
    assert_int_equal(ops->event_record(dev, s, &ev, err, sizeof err), OG_OK);
    og_expert_cache_note_read(p.cache, l, j, ev);
    assert_int_equal(og_device_cpu_wait_held(dev), OG_OK);
    /* the migration: e_old leaves slot j, e_new's copy is issued into it */
    pthread_mutex_lock(&lg.mu);
    const int mark = lg.n;
    pthread_mutex_unlock(&lg.mu);
    assert_int_equal(og_expert_cache_swap(p.cache, m, l, e_new, e_old, err, sizeof err), OG_OK);
    assert_int_equal(og_device_cpu_settle(dev, p.cache->stream), OG_OK);
    const og_event copy_ev = p.cache->pending[l * p.cache->max_slots + (uint32_t)j];
    assert_true(copy_ev != 0);
    assert_false(ops->event_done(dev, copy_ev));
    pthread_mutex_lock(&lg.mu);
    assert_int_equal(find(&lg, mark, EV_OP_START, OG_CPU_OP_COPY_TO_DEVICE), -1); /* nothing copied */
    pthread_mutex_unlock(&lg.mu);
    assert_int_equal(og_expert_cache_poll(p.cache), 1);
    assert_int_equal(og_expert_cache_slot(p.cache, l, e_new), -1);
    assert_int_equal(og_device_cpu_release(dev), OG_OK);
    assert_int_equal(ops->event_wait(dev, ev, err, sizeof err), OG_OK);
    assert_int_equal(ops->event_wait(dev, copy_ev, err, sizeof err), OG_OK);
    assert_int_equal(og_expert_cache_poll(p.cache), 0);
    assert_int_equal(og_expert_cache_slot(p.cache, l, e_new), j);
    /* the op read e_old: the host's bits for e_old from the file */
    const og_moe_weights *L = &og_model_get_info(m)->moe[l];
    og_expert_job hj = {L->gate_exps, L->up_exps, L->down_exps, x, 1, yh, OG_NUMERICS_CANONICAL, 0};
    hj.gate.data = (const uint8_t *)L->gate_exps.data + (size_t)(e_old * Fe) * L->gate_exps.row_bytes;
    hj.up.data = (const uint8_t *)L->up_exps.data + (size_t)(e_old * Fe) * L->up_exps.row_bytes;
    hj.down.data = (const uint8_t *)L->down_exps.data + (size_t)(e_old * D) * L->down_exps.row_bytes;
    hj.gate.n_rows = hj.up.n_rows = Fe;
    hj.down.n_rows = D;
    assert_int_equal(og_cpu_experts(&k, NULL, &hj, 1), OG_OK);
    assert_memory_equal(y, yh, (size_t)D * sizeof *y);
    /* in the device's log: the copy into the slot starts after the op ended */
    pthread_mutex_lock(&lg.mu);
    const int i_end = find(&lg, 0, EV_OP_END, OG_CPU_OP_EXPERTS);
    const int i_copy = find(&lg, mark, EV_OP_START, OG_CPU_OP_COPY_TO_DEVICE);
    assert_true(i_end >= 0 && i_copy > i_end);
    pthread_mutex_unlock(&lg.mu);
    assert_int_equal(og_device_cpu_trace(dev, NULL, NULL), OG_OK);
    ops->stream_destroy(dev, s);
    ops->free(dev, dx);
    ops->free(dev, dy);
    pthread_mutex_destroy(&lg.mu);
    free(x);
    free(y);
    free(yh);
    unplace(&p);
    og_model_free(m);
}

/* y = down(silu(min(g, c)) * clamp(u, -c, c)) of expert rows [r0, r0 + F) of
 * gate/up (down: [d0, d0 + D)) in double from the dequantized weights
 * (deepseek4.md §4.1), added to y with weight w. */
static void clamped_ffn_ref(const og_weight *g, const og_weight *u, const og_weight *dn, int64_t r0, int64_t F,
                            int64_t d0, const float *x, double c, double w, double *y) {
    const int64_t D = g->K;
    float *row = malloc((size_t)(D > F ? D : F) * sizeof *row);
    double *h = malloc((size_t)F * sizeof *h);
    for (int64_t f = 0; f < F; f++) {
        double a = 0, b = 0;
        og_dequantize_row(g->type, (const uint8_t *)g->data + (size_t)(r0 + f) * g->row_bytes, row, D);
        for (int64_t i = 0; i < D; i++) a += (double)row[i] * x[i];
        og_dequantize_row(u->type, (const uint8_t *)u->data + (size_t)(r0 + f) * u->row_bytes, row, D);
        for (int64_t i = 0; i < D; i++) b += (double)row[i] * x[i];
        a = a < c ? a : c;
        b = b < -c ? -c : b > c ? c : b;
        h[f] = a / (1 + exp(-a)) * b;
    }
    for (int64_t o = 0; o < D; o++) {
        og_dequantize_row(dn->type, (const uint8_t *)dn->data + (size_t)(d0 + o) * dn->row_bytes, row, F);
        double acc = 0;
        for (int64_t f = 0; f < F; f++) acc += (double)row[f] * h[f];
        y[o] += w * acc;
    }
    free(row);
    free(h);
}

/* deepseek4's clamped SwiGLU through the dispatcher: a copy of the Q8_0 model
 * whose MoE layers say swiglu_clamp = 0.05 (the gate and up products reach it
 * on both sides). On every tier, canonical and fork: each row within the bound
 * of the double reference (shared expert + weighted routed experts, all
 * clamped; the kernels quantize activations to Q8_0, hence 3 %), canonical
 * rows bitwise equal across tiers and with every routed expert on the cpu
 * device, and not the unclamped result. */
static void test_swiglu_clamp(void **state) {
    (void)state;
    char err[512];
    og_model *m;
    assert_int_equal(og_model_load(g_files[0], NULL, &m, err, sizeof err), OG_OK);
    const og_model_info *mi = og_model_get_info(m);
    const float c = 0.05f;
    enum { T = 5, K = 4, LAYER = 2 };
    const int64_t D = mi->n_embd, Fe = mi->n_ff_exp;
    og_moe_weights moe[NL];
    memcpy(moe, mi->moe, sizeof moe);
    for (int l = 0; l < NL; l++) moe[l].swiglu_clamp = c;
    og_model clamped = *m; /* the same weights; only the dispatcher and the expert cache see it */
    clamped.info.moe = moe;
    const og_moe_weights *L = &moe[LAYER];
    assert_true(L->moe && mi->n_expert_shared == 1);
    float *x = malloc((size_t)(T * D) * sizeof *x);
    for (int64_t i = 0; i < T * D; i++) x[i] = (float)sin(0.37 * (double)i + 1.0);
    og_route routes[T * K];
    for (int t = 0; t < T; t++)
        for (int j = 0; j < K; j++) routes[t * K + j] = (og_route){t, (t * 5 + j * 3) % NE, 0.1f + 0.2f * (float)j};
    const og_moe_layer io0 = {LAYER, x, T, routes, T * K, NULL, NULL, NULL};
    /* the reference, and how far the clamp moves it */
    double *ref = calloc((size_t)(T * D), sizeof *ref), *plain = calloc((size_t)(T * D), sizeof *plain);
    for (int t = 0; t < T; t++) {
        clamped_ffn_ref(&L->gate_sh, &L->up_sh, &L->down_sh, 0, Fe, 0, x + t * D, c, 1, ref + t * D);
        clamped_ffn_ref(&L->gate_sh, &L->up_sh, &L->down_sh, 0, Fe, 0, x + t * D, 1e30, 1, plain + t * D);
        for (int j = 0; j < K; j++) {
            const og_route *r = &routes[t * K + j];
            clamped_ffn_ref(&L->gate_exps, &L->up_exps, &L->down_exps, r->expert * Fe, Fe, r->expert * D, x + t * D, c,
                            r->weight, ref + t * D);
            clamped_ffn_ref(&L->gate_exps, &L->up_exps, &L->down_exps, r->expert * Fe, Fe, r->expert * D, x + t * D,
                            1e30, r->weight, plain + t * D);
        }
    }
    double moved = 0, scale = 0;
    for (int64_t i = 0; i < T * D; i++) {
        moved = fmax(moved, fabs(ref[i] - plain[i]));
        scale = fmax(scale, fabs(ref[i]));
    }
    assert_true(scale > 0 && moved > 0.2 * scale); /* the clamp matters at this limit */
    og_cpu_features f;
    og_cpu_detect(&f);
    float *y = malloc((size_t)(T * D) * sizeof *y), *canon = malloc((size_t)(T * D) * sizeof *canon);
    float *y0 = malloc((size_t)(T * D) * sizeof *y0);
    int tiers = 0;
    for (int isa = OG_ISA_SCALAR; isa <= OG_ISA_AVX512; isa++) {
        og_isa got;
        char note[128];
        if (og_isa_choose(&f, og_isa_name((og_isa)isa), &got, note, sizeof note, err, sizeof err)) continue;
        og_kernels k;
        assert_int_equal(og_kernels_init((og_isa)isa, &k), OG_OK);
        og_pool *pool;
        assert_int_equal(og_pool_create(2, NULL, &pool, err, sizeof err), OG_OK);
        og_dispatch *host;
        assert_int_equal(og_dispatch_create(NULL, NULL, &host, err, sizeof err), OG_OK);
        const og_dispatcher *dt = og_dispatch_table(host);
        for (int nm = 0; nm < 2; nm++) {
            const og_numerics num = nm ? OG_NUMERICS_FORK : OG_NUMERICS_CANONICAL;
            og_run_ctx rc = {.kern = &k, .pool = pool, .dispatch = dt, .host_numerics = num, .device_numerics = num};
            og_moe_layer io = io0;
            io.y = y;
            assert_int_equal(dt->type->moe_layer(dt->self, &clamped, &rc, &io, err, sizeof err), OG_OK);
            double worst = 0;
            for (int64_t i = 0; i < T * D; i++) worst = fmax(worst, fabs(ref[i] - y[i]));
            if (worst > 0.03 * scale)
                fail_msg("%s %s: %g off the clamped reference (scale %g)", og_isa_name((og_isa)isa),
                         nm ? "fork" : "canonical", worst, scale);
            io.y = y0; /* the model's own layers: clamp 0 */
            assert_int_equal(dt->type->moe_layer(dt->self, m, &rc, &io, err, sizeof err), OG_OK);
            assert_true(memcmp(y, y0, (size_t)(T * D) * sizeof *y) != 0);
            if (nm) continue;
            if (!tiers) memcpy(canon, y, (size_t)(T * D) * sizeof *y);
            else assert_memory_equal(y, canon, (size_t)(T * D) * sizeof *y);
            /* every routed expert on the cpu device (its experts op), the shared on the host */
            placed p;
            place(&p, &clamped, &k, NE, want_all);
            rc.dispatch = og_dispatch_table(p.dispatch);
            io.y = y;
            assert_int_equal(rc.dispatch->type->moe_layer(rc.dispatch->self, &clamped, &rc, &io, err, sizeof err), OG_OK);
            assert_memory_equal(y, canon, (size_t)(T * D) * sizeof *y);
            unplace(&p);
        }
        og_dispatch_free(host);
        og_pool_free(pool);
        tiers++;
    }
    assert_true(tiers >= 1);
    free(x);
    free(ref);
    free(plain);
    free(y);
    free(y0);
    free(canon);
    og_model_free(m);
}

/* Bad input: a device without its cache, a cache of another device. */
static void test_create_refusals(void **state) {
    (void)state;
    char err[256];
    og_device *dev;
    og_dispatch *d;
    assert_int_equal(og_device_cpu_create(1024, 1, NULL, &dev, err, sizeof err), OG_OK);
    assert_int_equal(og_dispatch_create(dev, NULL, &d, err, sizeof err), OG_ERR_INVALID_ARG);
    assert_null(d);
    assert_non_null(strstr(err, "expert cache"));
    og_dispatch_free(NULL);
    og_device_destroy(dev);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_dispatch ONEGPU\n");
        return 2;
    }
    g_onegpu = argv[1];
    snprintf(g_tmp, sizeof g_tmp, "/tmp/og-dispatch-XXXXXX");
    if (!mkdtemp(g_tmp)) return 1;
    char cmd[2048];
    const char *san = getenv("OG_SANITIZED");
    if (san && *san == '1') g_n_files = 2;
    for (int i = 0; i < g_n_files; i++) {
        snprintf(g_files[i], sizeof g_files[i], "%s/%s.gguf", g_tmp, g_routed[i]);
        snprintf(cmd, sizeof cmd, "'%s' make-model " SMALL " --type Q8_0 --type-routed %s --seed %d -o '%s' >/dev/null 2>&1",
                 g_onegpu, g_routed[i], 11 + i, g_files[i]);
        if (system(cmd) != 0) {
            fprintf(stderr, "make-model (%s experts) failed\n", g_routed[i]);
            return 1;
        }
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bit_identical),
        cmocka_unit_test(test_overlap),
        cmocka_unit_test(test_migration_waits_for_reader),
        cmocka_unit_test(test_swiglu_clamp),
        cmocka_unit_test(test_create_refusals),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_tmp);
    return rc;
}
