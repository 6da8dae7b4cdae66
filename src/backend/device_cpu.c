/* The `cpu` device: device memory is host memory under a budget, and each stream
 * is a thread that runs its queue in order, so budgets, residency, PCIe traffic,
 * stream order and the overlap of device and host work behave as on a card
 * (DESIGN.md "The device without a GPU"). Each block carries its size in a
 * 64-byte header. One mutex and one condition variable guard every queue and
 * counter: a stream's thread wakes on any change, which costs nothing at a few
 * streams. An event is (stream index + 1) << 48 | the stream's record count; a
 * stream's index is never reused, so an event of a destroyed stream (which
 * waited for all its work) is complete. */
#include "device_ops.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spin.h"

#define HDR 64
#define MAX_STREAMS 256
#define EV_SHIFT 48

typedef struct cpu_op {
    og_cpu_op_kind kind;
    void *dst;
    const void *src;
    uint64_t bytes;
    og_event ev;            /* WAIT: the event waited on */
    uint64_t seq;           /* RECORD: the count it completes */
    og_expert_op xop;       /* EXPERTS, its groups in cop.own */
    og_cop cop;             /* COMPUTE, its host arrays in cop.own (EXPERTS: the groups) */
    struct cpu_op *next;
} cpu_op;

typedef struct cpu_device cpu_device;

struct og_stream {
    cpu_device *dev;
    int index;
    pthread_t tid;
    cpu_op *head, *tail;
    uint64_t issued;                /* events recorded */
    atomic_uint_fast64_t n_ops;     /* ops queued so far (the thread spins on it before sleeping) */
    bool running, waiting, held, stop;
    og_status err;                  /* first failed op's */
    char msg[256];
};

struct cpu_device {
    og_device base;
    uint64_t budget, used;           /* used includes aliased */
    uint64_t aliased;                /* host bytes used in place (og_device_cpu_alias) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    og_stream *streams[MAX_STREAMS]; /* NULL: never created or destroyed */
    atomic_int n_streams;            /* indices handed out */
    atomic_uint_fast64_t done[MAX_STREAMS]; /* events completed per stream index; UINT64_MAX once destroyed */
    bool have_kern;
    og_kernels kern;
    og_pool *pool;
    pthread_mutex_t compute_mu;      /* one expert or compute op at a time on the pool */
    og_cop_scratch sc;               /* the matmul ops' scratch (under compute_mu) */
    og_expert_ws xws;                /* the expert ops' buffers (under compute_mu) */
    og_buf xjobs;                    /* an expert op's jobs (under compute_mu) */
    cpu_op *free_ops;                /* run ops kept for reuse (under mu): issuing in steady state
                                        allocates nothing */
    og_cop_blocks blocks;            /* their host arrays' blocks, by size class (its own lock) */
    int n_free;
    og_cpu_trace_fn trace;
    void *trace_ctx;
    int hold_kind;                   /* armed hold, -1 none */
    bool held;
};

static const og_device_ops cpu_ops;

static cpu_device *as_cpu(og_device *d) { return d && d->ops == &cpu_ops ? (cpu_device *)d : NULL; }

static og_status cpu_mem_info(og_device *d, uint64_t *free_bytes, uint64_t *total_bytes) {
    cpu_device *c = (cpu_device *)d;
    pthread_mutex_lock(&c->mu);
    *free_bytes = c->budget - c->used;
    *total_bytes = c->budget;
    pthread_mutex_unlock(&c->mu);
    return OG_OK;
}

static og_status cpu_alloc(og_device *d, uint64_t bytes, void **out, char *err, size_t errlen) {
    cpu_device *c = (cpu_device *)d;
    *out = NULL;
    char a[32], b[32], u[32];
    pthread_mutex_lock(&c->mu);
    const uint64_t used = c->used;
    const bool fits = bytes <= c->budget - used;
    if (fits) c->used += bytes;
    pthread_mutex_unlock(&c->mu);
    if (!fits)
        return og_fail(err, errlen, OG_ERR_NOMEM, "cpu device: %s asked, %s of its %s in use",
                       og_fmt_bytes(bytes, a, sizeof a), og_fmt_bytes(used, u, sizeof u),
                       og_fmt_bytes(c->budget, b, sizeof b));
    uint8_t *p = aligned_alloc(64, (size_t)((bytes + HDR + 63) / 64 * 64));
    if (!p) {
        pthread_mutex_lock(&c->mu);
        c->used -= bytes;
        pthread_mutex_unlock(&c->mu);
        return og_fail(err, errlen, OG_ERR_NOMEM, "cpu device: the host has no %s", og_fmt_bytes(bytes, a, sizeof a));
    }
    memcpy(p, &bytes, sizeof bytes);
    *out = p + HDR;
    return OG_OK;
}

static void cpu_free(og_device *d, void *ptr) {
    if (!ptr) return;
    cpu_device *c = (cpu_device *)d;
    uint8_t *p = (uint8_t *)ptr - HDR;
    uint64_t bytes;
    memcpy(&bytes, p, sizeof bytes);
    pthread_mutex_lock(&c->mu);
    c->used -= bytes;
    pthread_mutex_unlock(&c->mu);
    free(p);
}

/* Whether ev completed; no lock needed (an index never handed out: complete). */
static bool ev_done(cpu_device *c, og_event ev) {
    if (!ev) return true;
    const uint64_t idx = (ev >> EV_SHIFT) - 1, seq = ev & ((1ull << EV_SHIFT) - 1);
    if (idx >= (uint64_t)atomic_load(&c->n_streams)) return true;
    return atomic_load_explicit(&c->done[idx], memory_order_acquire) >= seq;
}

/* Fails stream s with st unless it failed before (no lock held): "cpu device: WHAT
 * [KIND] failed: ..." (kind < 0: none). */
static void stream_fail(og_stream *s, og_status st, const char *what, int kind) {
    cpu_device *c = s->dev;
    pthread_mutex_lock(&c->mu);
    if (!s->err) {
        s->err = st;
        if (kind >= 0) snprintf(s->msg, sizeof s->msg, "cpu device: %s %d failed: %s", what, kind, og_status_str(st));
        else snprintf(s->msg, sizeof s->msg, "cpu device: %s failed: %s", what, og_status_str(st));
    }
    pthread_mutex_unlock(&c->mu);
}

/* Runs one op on the stream's thread (no lock held). */
static void run_op(og_stream *s, cpu_op *op) {
    cpu_device *c = s->dev;
    if (op->kind == OG_CPU_OP_COPY_TO_DEVICE || op->kind == OG_CPU_OP_COPY_TO_HOST) {
        memcpy(op->dst, op->src, (size_t)op->bytes);
        return;
    }
    if (op->kind == OG_CPU_OP_COMPUTE) {
        pthread_mutex_lock(&c->compute_mu);
        og_status st = og_cop_run(&c->kern, c->pool, &c->sc, &op->cop);
        pthread_mutex_unlock(&c->compute_mu);
        if (st) stream_fail(s, st, "op", (int)op->cop.kind);
        return;
    }
    if (op->kind != OG_CPU_OP_EXPERTS) return;
    const og_expert_op *x = &op->xop;
    pthread_mutex_lock(&c->compute_mu);
    og_status st = og_buf_reserve(&c->xjobs, (size_t)x->n_groups * sizeof(og_expert_job));
    og_expert_job *jobs = c->xjobs.p;
    const int64_t D = x->slots.gate.K;
    int64_t row = 0;
    for (int g = 0; g < x->n_groups && !st; g++) {
        const og_expert_group *gr = &x->groups[g];
        const uint8_t *slot = (const uint8_t *)x->slots.base + (uint64_t)gr->slot * x->slots.slot_bytes;
        og_expert_job *j = &jobs[g];
        j->gate = x->slots.gate;
        j->up = x->slots.up;
        j->down = x->slots.down;
        j->gate.data = slot + x->slots.gate_off;
        j->up.data = slot + x->slots.up_off;
        j->down.data = slot + x->slots.down_off;
        j->x = (const float *)x->x + row * D;
        j->y = (float *)x->y + row * D;
        j->m = gr->n_rows;
        j->numerics = gr->numerics;
        j->swiglu_clamp = x->swiglu_clamp;
        row += gr->n_rows;
    }
    if (!st) st = og_cpu_experts_ws(&c->kern, c->pool, jobs, x->n_groups, &c->xws);
    pthread_mutex_unlock(&c->compute_mu);
    if (st) stream_fail(s, st, "expert op", -1);
}

#define MAX_FREE_OPS 1024 /* records kept for reuse; past it they are freed */

/* Returns a run (or never queued) op to the device's free list (mu held). */
static void recycle(cpu_device *c, cpu_op *op) {
    og_cop_blocks_give(&op->cop); /* its block to the pool, for the next op of that size */
    if (c->n_free >= MAX_FREE_OPS) {
        og_cop_free(&op->cop);
        free(op);
        return;
    }
    op->next = c->free_ops;
    c->free_ops = op;
    c->n_free++;
}

static void *stream_main(void *arg) {
    og_stream *s = arg;
    cpu_device *c = s->dev;
    uint64_t seen = 0; /* n_ops when the queue was last found empty */
    pthread_mutex_lock(&c->mu);
    for (;;) {
        if (!s->head && !s->stop) { /* spin briefly for the next op, then sleep */
            seen = atomic_load(&s->n_ops);
            pthread_mutex_unlock(&c->mu);
            const uint64_t t0 = og_now_ns();
            for (unsigned spin = 1; atomic_load_explicit(&s->n_ops, memory_order_acquire) == seen &&
                                    ((spin & 63) || og_now_ns() - t0 < OG_SPIN_NS);
                 spin++)
                og_cpu_relax();
            pthread_mutex_lock(&c->mu);
        }
        while (!s->head && !s->stop) pthread_cond_wait(&c->cv, &c->mu);
        if (!s->head) break;
        cpu_op *op = s->head;
        if (c->hold_kind == (int)op->kind) { /* test hook: wait for the release */
            c->hold_kind = -1;
            c->held = s->held = true;
            pthread_cond_broadcast(&c->cv);
            while (c->held) pthread_cond_wait(&c->cv, &c->mu);
            s->held = false;
        }
        if (op->kind == OG_CPU_OP_WAIT) {
            s->waiting = true;
            pthread_cond_broadcast(&c->cv);
            while (!ev_done(c, op->ev)) pthread_cond_wait(&c->cv, &c->mu);
            s->waiting = false;
        }
        s->running = true;
        const bool failed = s->err != OG_OK;
        og_cpu_trace_fn trace = c->trace;
        void *tctx = c->trace_ctx;
        pthread_mutex_unlock(&c->mu);
        if (trace) trace(tctx, s->index, op->kind, false);
        if (!failed) run_op(s, op); /* after a failure only the events still complete */
        if (trace) trace(tctx, s->index, op->kind, true);
        pthread_mutex_lock(&c->mu);
        s->head = op->next;
        if (!s->head) s->tail = NULL;
        if (op->kind == OG_CPU_OP_RECORD) atomic_store_explicit(&c->done[s->index], op->seq, memory_order_release);
        s->running = false;
        pthread_cond_broadcast(&c->cv);
        recycle(c, op);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static og_status cpu_stream_create(og_device *d, og_stream **out, char *err, size_t errlen) {
    cpu_device *c = (cpu_device *)d;
    *out = NULL;
    og_stream *s = calloc(1, sizeof *s);
    if (!s) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    s->dev = c;
    atomic_init(&s->n_ops, 0);
    pthread_mutex_lock(&c->mu);
    if (atomic_load(&c->n_streams) == MAX_STREAMS) {
        pthread_mutex_unlock(&c->mu);
        free(s);
        return og_fail(err, errlen, OG_ERR_RANGE, "cpu device: more than %d streams created", MAX_STREAMS);
    }
    s->index = atomic_load(&c->n_streams);
    atomic_store(&c->done[s->index], 0);
    c->streams[s->index] = s;
    atomic_store(&c->n_streams, s->index + 1);
    pthread_mutex_unlock(&c->mu);
    int rc = pthread_create(&s->tid, NULL, stream_main, s);
    if (rc) {
        pthread_mutex_lock(&c->mu);
        c->streams[s->index] = NULL;
        atomic_store(&c->done[s->index], UINT64_MAX);
        pthread_mutex_unlock(&c->mu);
        free(s);
        return og_fail(err, errlen, OG_ERR_NOMEM, "cpu device: cannot start a stream thread: %s", strerror(rc));
    }
    *out = s;
    return OG_OK;
}

static void cpu_stream_destroy(og_device *d, og_stream *s) {
    if (!s) return;
    cpu_device *c = (cpu_device *)d;
    pthread_mutex_lock(&c->mu);
    s->stop = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(s->tid, NULL); /* the thread ran its whole queue first */
    pthread_mutex_lock(&c->mu);
    c->streams[s->index] = NULL;
    atomic_store(&c->done[s->index], UINT64_MAX);
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    free(s);
}

/* Appends op to s's queue (takes ownership: it may run and be freed at once);
 * *seq gets a RECORD's count (seq may be NULL otherwise). */
static og_status enqueue(cpu_device *c, og_stream *s, cpu_op *op, uint64_t *seq, char *err, size_t errlen) {
    if (!op) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    pthread_mutex_lock(&c->mu);
    if (op->kind == OG_CPU_OP_RECORD) *seq = op->seq = ++s->issued;
    op->next = NULL;
    if (s->tail) s->tail->next = op;
    else s->head = op;
    s->tail = op;
    atomic_fetch_add_explicit(&s->n_ops, 1, memory_order_release);
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return OG_OK;
}

/* A zeroed op of this kind, reused from the free list (its block kept) when
 * there is one; NULL when out of memory. */
static cpu_op *new_op(cpu_device *c, og_cpu_op_kind kind) {
    pthread_mutex_lock(&c->mu);
    cpu_op *op = c->free_ops;
    if (op) {
        c->free_ops = op->next;
        c->n_free--;
    }
    pthread_mutex_unlock(&c->mu);
    if (!op) op = calloc(1, sizeof *op);
    if (!op) return NULL;
    const og_buf keep = op->cop.keep;
    *op = (cpu_op){.kind = kind};
    op->cop.keep = keep;
    op->cop.blocks = &c->blocks;
    op->cop.own_class = -1;
    return op;
}

/* Gives back an op that was never queued. */
static void drop_op(cpu_device *c, cpu_op *op) {
    pthread_mutex_lock(&c->mu);
    recycle(c, op);
    pthread_mutex_unlock(&c->mu);
}

static og_status cpu_copy_to_device(og_device *d, og_stream *s, void *dst, const void *src, uint64_t bytes, char *err,
                                    size_t errlen) {
    cpu_op *op = new_op((cpu_device *)d, OG_CPU_OP_COPY_TO_DEVICE);
    if (op) op->dst = dst, op->src = src, op->bytes = bytes;
    og_status st = enqueue((cpu_device *)d, s, op, NULL, err, errlen);
    if (!st) d->pcie_bytes += bytes;
    return st;
}

static og_status cpu_copy_to_host(og_device *d, og_stream *s, void *dst, const void *src, uint64_t bytes, char *err,
                                  size_t errlen) {
    cpu_op *op = new_op((cpu_device *)d, OG_CPU_OP_COPY_TO_HOST);
    if (op) op->dst = dst, op->src = src, op->bytes = bytes;
    return enqueue((cpu_device *)d, s, op, NULL, err, errlen);
}

static og_status cpu_experts(og_device *d, og_stream *s, const og_expert_op *x, char *err, size_t errlen) {
    cpu_device *c = (cpu_device *)d;
    if (!c->have_kern) return og_fail(err, errlen, OG_ERR_UNSUPPORTED, "cpu device: created without kernels");
    if (x->n_groups < 1 || !x->groups || !x->x || !x->y || !x->slots.base)
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "cpu device: an expert op needs groups, x, y and slots");
    if (!(x->swiglu_clamp >= 0 && isfinite(x->swiglu_clamp)))
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "cpu device: SwiGLU clamp %g", (double)x->swiglu_clamp);
    const og_weight *w[3] = {&x->slots.gate, &x->slots.up, &x->slots.down};
    for (int i = 0; i < 3; i++)
        if (!og_quant_traits(w[i]->type) || !c->kern.vec_dot[w[i]->type])
            return og_fail(err, errlen, OG_ERR_UNSUPPORTED, "cpu device: no kernels for %s", og_type_name(w[i]->type));
    for (int g = 0; g < x->n_groups; g++)
        if (x->groups[g].slot < 0 || (uint32_t)x->groups[g].slot >= x->slots.n_slots || x->groups[g].n_rows <= 0)
            return og_fail(err, errlen, OG_ERR_INVALID_ARG, "cpu device: expert group %d: slot %d of %u, %d rows", g,
                           x->groups[g].slot, x->slots.n_slots, x->groups[g].n_rows);
    cpu_op *op = new_op(c, OG_CPU_OP_EXPERTS);
    og_expert_group *groups = op ? og_cop_own(&op->cop, (size_t)x->n_groups * sizeof *groups) : NULL;
    if (!groups) {
        if (op) drop_op(c, op);
        return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    }
    memcpy(groups, x->groups, (size_t)x->n_groups * sizeof *groups);
    op->xop = *x;
    op->xop.groups = groups;
    return enqueue(c, s, op, NULL, err, errlen);
}

static og_status cpu_issue(og_device *d, og_stream *s, og_cop_kind kind, const void *desc, int n, char *err,
                           size_t errlen) {
    cpu_device *c = (cpu_device *)d;
    if (!c->have_kern) return og_fail(err, errlen, OG_ERR_UNSUPPORTED, "cpu device: created without kernels");
    cpu_op *op = new_op(c, OG_CPU_OP_COMPUTE);
    if (!op) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    og_status st = og_cop_make(&c->kern, kind, desc, n, &op->cop, err, errlen);
    if (st) {
        drop_op(c, op);
        return st;
    }
    return enqueue(c, s, op, NULL, err, errlen);
}

OG_COP_ENTRY_POINTS(cpu, cpu_issue)

static og_status cpu_event_record(og_device *d, og_stream *s, og_event *ev, char *err, size_t errlen) {
    cpu_device *c = (cpu_device *)d;
    cpu_op *op = new_op(c, OG_CPU_OP_RECORD);
    *ev = 0;
    uint64_t seq = 0;
    og_status st = enqueue(c, s, op, &seq, err, errlen);
    if (!st) *ev = ((uint64_t)(s->index + 1) << EV_SHIFT) | seq;
    return st;
}

static og_status cpu_stream_wait(og_device *d, og_stream *s, og_event ev, char *err, size_t errlen) {
    if (!ev) return OG_OK;
    cpu_op *op = new_op((cpu_device *)d, OG_CPU_OP_WAIT);
    if (op) op->ev = ev;
    return enqueue((cpu_device *)d, s, op, NULL, err, errlen);
}

static og_status cpu_event_wait(og_device *d, og_event ev, char *err, size_t errlen) {
    cpu_device *c = (cpu_device *)d;
    const uint64_t t0 = og_now_ns(); /* spin briefly: the device is often about done */
    for (unsigned spin = 1; !ev_done(c, ev) && ((spin & 63) || og_now_ns() - t0 < OG_SPIN_NS); spin++) og_cpu_relax();
    pthread_mutex_lock(&c->mu);
    while (!ev_done(c, ev)) pthread_cond_wait(&c->cv, &c->mu);
    og_status st = OG_OK;
    const uint64_t idx = (ev >> EV_SHIFT) - 1;
    if (ev && idx < (uint64_t)atomic_load(&c->n_streams) && c->streams[idx] && c->streams[idx]->err) {
        st = og_fail(err, errlen, c->streams[idx]->err, "%s", c->streams[idx]->msg);
    }
    pthread_mutex_unlock(&c->mu);
    return st;
}

static bool cpu_event_done(og_device *d, og_event ev) {
    return ev_done((cpu_device *)d, ev);
}

static void cpu_destroy(og_device *d) {
    cpu_device *c = (cpu_device *)d;
    for (int i = 0; i < atomic_load(&c->n_streams); i++)
        if (c->streams[i]) cpu_stream_destroy(d, c->streams[i]);
    og_pool_free(c->pool);
    og_buf_free(&c->sc);
    og_expert_ws_free(&c->xws);
    og_buf_free(&c->xjobs);
    for (cpu_op *op = c->free_ops, *nx; op; op = nx) {
        nx = op->next;
        og_cop_free(&op->cop);
        free(op);
    }
    og_cop_blocks_free(&c->blocks);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->compute_mu);
    pthread_cond_destroy(&c->cv);
    free(c);
}

static const og_device_ops cpu_ops = {"cpu",
                                      cpu_mem_info,
                                      cpu_alloc,
                                      cpu_free,
                                      cpu_stream_create,
                                      cpu_stream_destroy,
                                      cpu_copy_to_device,
                                      cpu_copy_to_host,
                                      cpu_experts,
                                      cpu_event_record,
                                      cpu_stream_wait,
                                      cpu_event_wait,
                                      cpu_event_done,
                                      cpu_destroy,
                                      OG_COP_TABLE(cpu)};

og_status og_device_cpu_create(uint64_t budget, int n_threads, const og_kernels *kern, og_device **out, char *err,
                               size_t errlen) {
    *out = NULL;
    if (n_threads < 1 || n_threads > 4096)
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "cpu device: %d threads (1 to 4096)", n_threads);
    cpu_device *c = calloc(1, sizeof *c);
    if (!c) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    og_status st = og_pool_create(n_threads, NULL, &c->pool, err, errlen);
    if (st) {
        free(c);
        return st;
    }
    c->base.ops = &cpu_ops;
    c->budget = budget;
    c->hold_kind = -1;
    if (kern) {
        c->kern = *kern;
        c->have_kern = true;
    }
    pthread_mutex_init(&c->mu, NULL);
    og_cop_blocks_init(&c->blocks);
    pthread_mutex_init(&c->compute_mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    *out = &c->base;
    return OG_OK;
}

int og_device_cpu_default_threads(void) {
    cpu_set_t set;
    int n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    return n > 4096 ? 4096 : n > 1 ? n : 1;
}

og_status og_device_cpu_alias(og_device *d, int64_t bytes, char *err, size_t errlen) {
    cpu_device *c = as_cpu(d);
    if (!c) return og_fail(err, errlen, OG_ERR_INVALID_ARG, "not a cpu device");
    char a[32], u[32], b[32];
    pthread_mutex_lock(&c->mu);
    const uint64_t used = c->used, mag = bytes < 0 ? (uint64_t)-bytes : (uint64_t)bytes;
    og_status st = OG_OK;
    if (bytes < 0 && mag > c->aliased) st = OG_ERR_INVALID_ARG;
    else if (bytes > 0 && mag > c->budget - used) st = OG_ERR_NOMEM;
    else if (bytes < 0) {
        c->used -= mag;
        c->aliased -= mag;
    } else {
        c->used += mag;
        c->aliased += mag;
    }
    pthread_mutex_unlock(&c->mu);
    if (st == OG_ERR_NOMEM)
        return og_fail(err, errlen, st, "cpu device: %s of weights used in place, %s of its %s in use",
                       og_fmt_bytes(mag, a, sizeof a), og_fmt_bytes(used, u, sizeof u), og_fmt_bytes(c->budget, b, sizeof b));
    if (st) return og_fail(err, errlen, st, "cpu device: gives back more aliased bytes than it took");
    return OG_OK;
}

/* ---- test hooks ---- */

#define CPU_OR_FAIL(c, d)                                   \
    cpu_device *c = as_cpu(d);                              \
    if (!c) return OG_ERR_INVALID_ARG

og_status og_device_cpu_trace(og_device *d, og_cpu_trace_fn fn, void *ctx) {
    CPU_OR_FAIL(c, d);
    pthread_mutex_lock(&c->mu);
    c->trace = fn;
    c->trace_ctx = ctx;
    pthread_mutex_unlock(&c->mu);
    return OG_OK;
}

og_status og_device_cpu_hold(og_device *d, og_cpu_op_kind kind) {
    CPU_OR_FAIL(c, d);
    pthread_mutex_lock(&c->mu);
    c->hold_kind = (int)kind;
    pthread_mutex_unlock(&c->mu);
    return OG_OK;
}

og_status og_device_cpu_wait_held(og_device *d) {
    CPU_OR_FAIL(c, d);
    pthread_mutex_lock(&c->mu);
    while (!c->held) pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
    return OG_OK;
}

og_status og_device_cpu_release(og_device *d) {
    CPU_OR_FAIL(c, d);
    pthread_mutex_lock(&c->mu);
    c->held = false;
    c->hold_kind = -1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return OG_OK;
}

og_status og_device_cpu_settle(og_device *d, og_stream *s) {
    CPU_OR_FAIL(c, d);
    pthread_mutex_lock(&c->mu);
    while (!((!s->head && !s->running) || s->held || (s->waiting && !ev_done(c, s->head->ev))))
        pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
    return OG_OK;
}
