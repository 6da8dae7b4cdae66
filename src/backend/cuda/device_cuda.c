/* The cuda device's host side (og_device_cuda.h): og_device_ops on the CUDA
 * runtime's C API, the kernels of kernels.cu behind og_cuda_kernels.h. One
 * mutex guards the stream table and each stream's event ring; CUDA calls that
 * block (event and stream synchronization) run outside it. */
#include "og_device_cuda.h"

#include "device_ops.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "og_cuda_kernels.h"

#define MAX_STREAMS 256
#define EV_SHIFT 48
#define MAX_PINNED 4096

/* Every CUDA call goes through CK: a failure becomes an og_status naming the
 * call, the file and the line (og_device_cuda.h). */
static og_status cuda_check(cudaError_t e, const char *call, const char *file, int line, char *err, size_t errlen) {
    if (e == cudaSuccess) return OG_OK;
    const og_status st = e == cudaErrorMemoryAllocation ? OG_ERR_NOMEM
                         : e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver || e == cudaErrorNoKernelImageForDevice
                             ? OG_ERR_UNSUPPORTED
                             : OG_ERR_IO;
    return og_fail(err, errlen, st, "%s failed at %s:%d: %s (%s)", call, file, line, cudaGetErrorName(e),
                   cudaGetErrorString(e));
}
#define CK(call) cuda_check((call), #call, __FILE__, __LINE__, err, errlen)

/* Where a failure cannot be returned (releasing, and the ops that return no
 * status): the same check, the message logged as a warning. */
static void cuda_warn(cudaError_t e, const char *call, const char *file, int line) {
    if (e == cudaSuccess) return;
    char msg[512];
    cuda_check(e, call, file, line, msg, sizeof msg);
    og_log(NULL, OG_LOG_WARN, "cuda device: %s", msg);
}
#define CKW(call) cuda_warn((call), #call, __FILE__, __LINE__)

/* cudaEventQuery through the check: true when complete, false when not yet (or
 * failed: logged, and event_wait reports the failure). */
static bool query_done(cudaEvent_t e) {
    const cudaError_t r = cudaEventQuery(e);
    if (r == cudaErrorNotReady) return false;
    CKW(r);
    return r == cudaSuccess;
}

typedef struct ring_entry {
    uint64_t seq; /* 0: free */
    cudaEvent_t ev;
} ring_entry;

typedef struct cuda_device cuda_device;

struct og_stream {
    cuda_device *dev;
    int index;
    cudaStream_t cs;
    uint64_t issued, done_known; /* events recorded; all events up to done_known completed */
    ring_entry *ring;            /* the events not known complete, at seq % cap */
    uint32_t cap;
    uint64_t fail_seq;           /* events above it fail (a later op failed when issued); UINT64_MAX none */
    og_status fail_st;
    char fail_msg[256];
    void *scratch;               /* the expert op's device scratch (stream-ordered allocation) */
    uint64_t scratch_bytes;
    void *stage;                 /* pinned staging for copies to pageable host memory */
    uint64_t stage_bytes;
    /* the forward pass's ops: */
    og_cop rec;                  /* the op being issued: its checks and host arrays (og_cop_make) */
    uint8_t *ring_h, *ring_d;    /* the ops' host arrays: a pinned ring of ring_cap bytes and its device
                                    mirror (control_stage) */
    uint64_t ring_cap, ring_at;
    int ring_half;               /* the half ring_at is in */
    cudaEvent_t ring_ev[2];      /* recorded when issuing left a half: its copies are done once it completes */
    bool ring_live[2];
    void *work;                  /* the ops' device scratch (quantized activations, scores, the router's) */
    uint64_t work_bytes;
    og_buf hbuf;                 /* host scratch (RoPE's cos and sin) */
};

typedef struct pinned_range {
    void *p;
    uint64_t bytes;
} pinned_range;

struct cuda_device {
    og_device base;
    int gpu;
    struct cudaDeviceProp prop;
    pthread_mutex_t mu;
    og_stream *streams[MAX_STREAMS];
    int n_streams;
    pinned_range pinned[MAX_PINNED];
    int n_pinned;
};

static const og_device_ops cuda_ops;

static cuda_device *as_cuda(og_device *d) { return d && d->ops == &cuda_ops ? (cuda_device *)d : NULL; }

bool og_cuda_built(void) { return true; }

bool og_cuda_forward_type(og_ggml_type t) {
    return og_cuda_has_type(t) || t == OG_TYPE_F32 || t == OG_TYPE_F16 || t == OG_TYPE_BF16;
}

/* The calling thread's current device is per thread in CUDA: set it on entry. */
static og_status cur(cuda_device *c, char *err, size_t errlen) { return CK(cudaSetDevice(c->gpu)); }

static og_status cu_mem_info(og_device *d, uint64_t *free_bytes, uint64_t *total_bytes) {
    cuda_device *c = (cuda_device *)d;
    size_t f = 0, t = 0;
    char msg[512];
    char *err = msg;
    const size_t errlen = sizeof msg;
    if (cur(c, err, errlen) || CK(cudaMemGetInfo(&f, &t))) {
        og_log(NULL, OG_LOG_WARN, "cuda device: %s", msg);
        *free_bytes = *total_bytes = 0;
        return OG_ERR_IO;
    }
    *free_bytes = f;
    *total_bytes = t;
    return OG_OK;
}

static og_status cu_alloc(og_device *d, uint64_t bytes, void **out, char *err, size_t errlen) {
    cuda_device *c = (cuda_device *)d;
    *out = NULL;
    og_status st = cur(c, err, errlen);
    if (st) return st;
    void *p = NULL;
    const cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1); /* 256-byte aligned */
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        size_t f = 0, t = 0;
        CKW(cudaMemGetInfo(&f, &t));
        return og_fail(err, errlen, OG_ERR_NOMEM, "cuda device: %llu bytes do not fit (%llu of %llu bytes free)",
                       (unsigned long long)bytes, (unsigned long long)f, (unsigned long long)t);
    }
    if ((st = CK(e))) return st;
    *out = p;
    return OG_OK;
}

static void cu_free(og_device *d, void *p) {
    if (!p) return;
    CKW(cudaSetDevice(((cuda_device *)d)->gpu));
    CKW(cudaFree(p));
}

static og_status cu_stream_create(og_device *d, og_stream **out, char *err, size_t errlen) {
    cuda_device *c = (cuda_device *)d;
    *out = NULL;
    og_status st = cur(c, err, errlen);
    if (st) return st;
    og_stream *s = calloc(1, sizeof *s);
    if (s) s->ring = calloc(64, sizeof *s->ring);
    if (!s || !s->ring) {
        if (s) free(s->ring);
        free(s);
        return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    }
    s->dev = c;
    s->cap = 64;
    s->fail_seq = UINT64_MAX;
    if ((st = CK(cudaStreamCreateWithFlags(&s->cs, cudaStreamNonBlocking)))) {
        free(s->ring);
        free(s);
        return st;
    }
    pthread_mutex_lock(&c->mu);
    if (c->n_streams >= MAX_STREAMS) {
        pthread_mutex_unlock(&c->mu);
        CKW(cudaStreamDestroy(s->cs));
        free(s->ring);
        free(s);
        return og_fail(err, errlen, OG_ERR_RANGE, "cuda device: more than %d streams", MAX_STREAMS);
    }
    s->index = c->n_streams++;
    c->streams[s->index] = s;
    pthread_mutex_unlock(&c->mu);
    *out = s;
    return OG_OK;
}

static void cu_stream_destroy(og_device *d, og_stream *s) {
    if (!s) return;
    cuda_device *c = (cuda_device *)d;
    CKW(cudaSetDevice(c->gpu));
    CKW(cudaStreamSynchronize(s->cs));
    if (s->scratch) CKW(cudaFreeAsync(s->scratch, s->cs));
    if (s->work) CKW(cudaFreeAsync(s->work, s->cs));
    CKW(cudaStreamSynchronize(s->cs));
    CKW(cudaStreamDestroy(s->cs));
    if (s->stage) CKW(cudaFreeHost(s->stage));
    if (s->ring_h) CKW(cudaFreeHost(s->ring_h));
    if (s->ring_d) CKW(cudaFree(s->ring_d));
    for (int i = 0; i < 2; i++)
        if (s->ring_ev[i]) CKW(cudaEventDestroy(s->ring_ev[i]));
    og_cop_free(&s->rec);
    og_buf_free(&s->hbuf);
    pthread_mutex_lock(&c->mu);
    c->streams[s->index] = NULL;
    pthread_mutex_unlock(&c->mu);
    for (uint32_t i = 0; i < s->cap; i++)
        if (s->ring[i].ev) CKW(cudaEventDestroy(s->ring[i].ev));
    free(s->ring);
    free(s);
}

/* A stream's op failed when issued: events recorded from now on fail with it. */
static og_status stream_fail(og_stream *s, og_status st, const char *msg) {
    pthread_mutex_lock(&s->dev->mu);
    if (s->fail_seq == UINT64_MAX) {
        s->fail_seq = s->issued;
        s->fail_st = st;
        snprintf(s->fail_msg, sizeof s->fail_msg, "%s", msg);
    }
    pthread_mutex_unlock(&s->dev->mu);
    return st;
}

static og_status cu_copy_to_device(og_device *d, og_stream *s, void *dst, const void *src, uint64_t bytes, char *err,
                                   size_t errlen) {
    cuda_device *c = (cuda_device *)d;
    og_status st = cur(c, err, errlen);
    if (!st) st = CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s->cs));
    if (st) return stream_fail(s, st, err ? err : "copy to device failed");
    d->pcie_bytes += bytes;
    return OG_OK;
}

typedef struct host_copy {
    void *dst;
    const void *src;
    uint64_t bytes;
} host_copy;

static void CUDART_CB host_copy_fn(void *arg) { /* on CUDA's host thread, in stream order */
    host_copy *h = arg;
    memcpy(h->dst, h->src, h->bytes);
    free(h);
}

static og_status cu_copy_to_host(og_device *d, og_stream *s, void *dst, const void *src, uint64_t bytes, char *err,
                                 size_t errlen) {
    cuda_device *c = (cuda_device *)d;
    og_status st = cur(c, err, errlen);
    if (st) return stream_fail(s, st, err ? err : "copy to host failed");
    struct cudaPointerAttributes pa;
    const bool pinned = !CK(cudaPointerGetAttributes(&pa, dst)) && pa.type == cudaMemoryTypeHost;
    if (err && errlen) err[0] = 0; /* a pointer CUDA does not know is pageable memory, not an error */
    if (pinned || !bytes) {
        st = CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s->cs));
        return st ? stream_fail(s, st, err ? err : "copy to host failed") : OG_OK;
    }
    /* pageable: a direct copy would block this thread until it is done */
    if (bytes > s->stage_bytes) {
        uint64_t nb = s->stage_bytes ? s->stage_bytes : 1 << 20;
        while (nb < bytes) nb *= 2;
        if (!st) st = CK(cudaStreamSynchronize(s->cs)); /* the old buffer may still be in use */
        if (!st && s->stage) st = CK(cudaFreeHost(s->stage));
        if (!st) s->stage = NULL, s->stage_bytes = 0;
        if (!st) st = CK(cudaMallocHost(&s->stage, nb));
        if (!st) s->stage_bytes = nb;
    }
    host_copy *h = st ? NULL : malloc(sizeof *h);
    if (!st && !h) st = og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    if (!st) st = CK(cudaMemcpyAsync(s->stage, src, bytes, cudaMemcpyDeviceToHost, s->cs));
    if (!st) {
        *h = (host_copy){dst, s->stage, bytes};
        st = CK(cudaLaunchHostFunc(s->cs, host_copy_fn, h));
        if (!st) h = NULL;
    }
    free(h);
    return st ? stream_fail(s, st, err ? err : "copy to host failed") : OG_OK;
}

/* Grows a device block of s (*p, *cap bytes) to bytes, ordered on the stream
 * (the old block is freed after the work queued before it). */
static og_status grow_block(og_stream *s, void **p, uint64_t *cap, uint64_t bytes, char *err, size_t errlen) {
    if (bytes <= *cap) return OG_OK;
    uint64_t nb = *cap ? *cap : 1 << 20;
    while (nb < bytes) nb *= 2;
    og_status st = OG_OK;
    if (*p) st = CK(cudaFreeAsync(*p, s->cs));
    *p = NULL;
    *cap = 0;
    if (!st) st = CK(cudaMallocAsync(p, nb, s->cs));
    if (!st) *cap = nb;
    return st;
}

/* s's expert-op scratch of at least bytes. */
static og_status scratch(og_stream *s, uint64_t bytes, char *err, size_t errlen) {
    return grow_block(s, &s->scratch, &s->scratch_bytes, bytes, err, errlen);
}

static uint64_t up256(uint64_t v) { return (v + 255) & ~(uint64_t)255; }

static bool same_act(og_ggml_type a, og_ggml_type b) {
    const og_type_traits *ta = og_quant_traits(a), *tb = og_quant_traits(b);
    return ta && tb && ta->vec_dot_type == tb->vec_dot_type;
}

/* The products of one matrix for every group, in launches of up to OG_CUDA_MAX_GROUPS groups. */
static og_status products(og_stream *s, const og_weight *w, const void *base, uint64_t slot_bytes, uint64_t off,
                          const og_expert_group *groups, int n_groups, const void *xq, float *y, char *err,
                          size_t errlen) {
    og_cuda_groups gr;
    int32_t row = 0;
    for (int g0 = 0; g0 < n_groups; g0 += OG_CUDA_MAX_GROUPS) {
        gr.n = n_groups - g0 < OG_CUDA_MAX_GROUPS ? n_groups - g0 : OG_CUDA_MAX_GROUPS;
        for (int i = 0; i < gr.n; i++) {
            gr.g[i] = (og_cuda_group){groups[g0 + i].slot, row, groups[g0 + i].n_rows};
            row += groups[g0 + i].n_rows;
        }
        og_status st = CK(og_cuda_products(w->type, base, slot_bytes, off, w->row_bytes, w->n_rows, w->K, &gr, xq, y,
                                           w->n_rows, s->cs));
        if (st) return st;
    }
    return OG_OK;
}

/* The shapes and types the kernels take (og_device_ops.experts' errors). */
static og_status check_weight(const og_weight *w, const char *what, char *err, size_t errlen) {
    const og_type_traits *t = og_quant_traits(w->type);
    if (!og_cuda_has_type(w->type))
        return og_fail(err, errlen, OG_ERR_UNSUPPORTED, "cuda device: no kernel for %s weights (%s)",
                       t ? t->name : "unknown", what);
    if (w->K <= 0 || w->K % t->blck || w->K > og_cuda_max_k(w->type) || w->n_rows <= 0 ||
        w->row_bytes != (size_t)(w->K / t->blck) * t->type_size)
        return og_fail(err, errlen, OG_ERR_UNSUPPORTED, "cuda device: %s: K %lld (at most %lld for %s), %lld rows of %zu bytes",
                       what, (long long)w->K, (long long)og_cuda_max_k(w->type), t->name, (long long)w->n_rows,
                       w->row_bytes);
    return OG_OK;
}

static og_status cu_experts(og_device *d, og_stream *s, const og_expert_op *op, char *err, size_t errlen) {
    cuda_device *c = (cuda_device *)d;
    const og_expert_slots *sl = &op->slots;
    if (op->n_groups < 1 || !(op->swiglu_clamp >= 0 && isfinite(op->swiglu_clamp)))
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "cuda device: %d groups, clamp %g", op->n_groups,
                       (double)op->swiglu_clamp);
    int64_t R = 0;
    for (int g = 0; g < op->n_groups; g++) {
        if (op->groups[g].slot < 0 || (uint32_t)op->groups[g].slot >= sl->n_slots || op->groups[g].n_rows <= 0)
            return og_fail(err, errlen, OG_ERR_INVALID_ARG, "cuda device: group %d: slot %d of %u, %d rows", g,
                           op->groups[g].slot, sl->n_slots, op->groups[g].n_rows);
        R += op->groups[g].n_rows;
    }
    const int64_t D = sl->gate.K, F = sl->gate.n_rows;
    if (sl->up.K != D || sl->up.n_rows != F || sl->down.K != F || sl->down.n_rows != D)
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "cuda device: expert shapes do not chain");
    og_status st;
    if ((st = check_weight(&sl->gate, "gate", err, errlen)) || (st = check_weight(&sl->up, "up", err, errlen)) ||
        (st = check_weight(&sl->down, "down", err, errlen)))
        return st;
    if ((st = cur(c, err, errlen))) return stream_fail(s, st, err ? err : "experts failed");
    /* scratch: x quantized for gate (and for up when its activations differ), gate and up
     * outputs [R][F] f32, the SwiGLU quantized for down */
    const bool up_own = !same_act(sl->gate.type, sl->up.type);
    const uint64_t xg = up256((uint64_t)R * og_cuda_act_row_bytes(sl->gate.type, D));
    const uint64_t xu = up_own ? up256((uint64_t)R * og_cuda_act_row_bytes(sl->up.type, D)) : 0;
    const uint64_t gf = up256((uint64_t)R * (uint64_t)F * 4);
    const uint64_t hq = up256((uint64_t)R * og_cuda_act_row_bytes(sl->down.type, F));
    if ((st = scratch(s, xg + xu + 2 * gf + hq, err, errlen))) return stream_fail(s, st, err ? err : "scratch");
    uint8_t *sc = s->scratch;
    void *qg = sc, *qu = up_own ? sc + xg : sc;
    float *G = (float *)(sc + xg + xu), *U = (float *)(sc + xg + xu + gf);
    void *qh = sc + xg + xu + 2 * gf;
    st = CK(og_cuda_quantize_act(sl->gate.type, op->x, qg, R, D, s->cs));
    if (!st && up_own) st = CK(og_cuda_quantize_act(sl->up.type, op->x, qu, R, D, s->cs));
    if (!st) st = products(s, &sl->gate, sl->base, sl->slot_bytes, sl->gate_off, op->groups, op->n_groups, qg, G, err, errlen);
    if (!st) st = products(s, &sl->up, sl->base, sl->slot_bytes, sl->up_off, op->groups, op->n_groups, qu, U, err, errlen);
    if (!st) st = CK(og_cuda_swiglu(G, G, U, R * F, op->swiglu_clamp, s->cs));
    if (!st) st = CK(og_cuda_quantize_act(sl->down.type, G, qh, R, F, s->cs));
    if (!st)
        st = products(s, &sl->down, sl->base, sl->slot_bytes, sl->down_off, op->groups, op->n_groups, qh, op->y, err,
                      errlen);
    return st ? stream_fail(s, st, err ? err : "experts failed") : OG_OK;
}

/* The ring entry of seq on s, or NULL when seq is known complete (mu held). */
static ring_entry *entry_of(og_stream *s, uint64_t seq) {
    if (seq <= s->done_known) return NULL;
    ring_entry *r = &s->ring[seq % s->cap];
    return r->seq == seq ? r : NULL; /* an entry leaves the ring only once complete */
}

static og_status cu_event_record(og_device *d, og_stream *s, og_event *ev, char *err, size_t errlen) {
    cuda_device *c = (cuda_device *)d;
    *ev = 0;
    og_status st = cur(c, err, errlen);
    if (st) return st;
    pthread_mutex_lock(&c->mu);
    const uint64_t seq = s->issued + 1;
    ring_entry *r = &s->ring[seq % s->cap];
    if (r->seq && r->seq > s->done_known) { /* still in flight? then grow the ring */
        if (query_done(r->ev)) {
            s->done_known = r->seq > s->done_known ? r->seq : s->done_known;
        } else {
            const uint32_t nc = s->cap * 2;
            ring_entry *nr = calloc(nc, sizeof *nr);
            if (!nr) {
                pthread_mutex_unlock(&c->mu);
                return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
            }
            for (uint32_t i = 0; i < s->cap; i++) /* live seqs lie within one window of cap: no collisions */
                if (s->ring[i].ev) nr[s->ring[i].seq % nc] = s->ring[i];
            free(s->ring);
            s->ring = nr;
            s->cap = nc;
            r = &s->ring[seq % s->cap];
        }
    }
    if (!r->ev) st = CK(cudaEventCreateWithFlags(&r->ev, cudaEventDisableTiming));
    if (!st) st = CK(cudaEventRecord(r->ev, s->cs));
    if (!st) {
        r->seq = seq;
        s->issued = seq;
        *ev = ((og_event)(s->index + 1) << EV_SHIFT) | seq;
    }
    pthread_mutex_unlock(&c->mu);
    return st;
}

/* Finds ev's stream; *e its CUDA event (NULL: complete). mu held. */
static og_status find_event(cuda_device *c, og_event ev, og_stream **s_out, cudaEvent_t *e, char *err, size_t errlen) {
    *e = NULL;
    *s_out = NULL;
    const uint64_t idx = (ev >> EV_SHIFT) - 1, seq = ev & ((1ull << EV_SHIFT) - 1);
    if (idx >= MAX_STREAMS || (int)idx >= c->n_streams)
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "cuda device: no such event %llu", (unsigned long long)ev);
    og_stream *s = c->streams[idx];
    if (!s) return OG_OK; /* destroyed: it waited for all its work */
    if (seq > s->issued)
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "cuda device: event %llu not recorded yet", (unsigned long long)ev);
    *s_out = s;
    ring_entry *r = entry_of(s, seq);
    if (r) *e = r->ev;
    return OG_OK;
}

static og_status cu_stream_wait(og_device *d, og_stream *s, og_event ev, char *err, size_t errlen) {
    if (!ev) return OG_OK;
    cuda_device *c = (cuda_device *)d;
    og_status st = cur(c, err, errlen);
    if (st) return st;
    pthread_mutex_lock(&c->mu);
    og_stream *from;
    cudaEvent_t e;
    st = find_event(c, ev, &from, &e, err, errlen);
    if (!st && e) st = CK(cudaStreamWaitEvent(s->cs, e, 0)); /* issued under mu: e cannot be re-recorded meanwhile */
    pthread_mutex_unlock(&c->mu);
    return st;
}

static og_status cu_event_wait(og_device *d, og_event ev, char *err, size_t errlen) {
    if (!ev) return OG_OK;
    cuda_device *c = (cuda_device *)d;
    og_status st = cur(c, err, errlen);
    if (st) return st;
    pthread_mutex_lock(&c->mu);
    og_stream *s;
    cudaEvent_t e;
    st = find_event(c, ev, &s, &e, err, errlen);
    const uint64_t seq = ev & ((1ull << EV_SHIFT) - 1);
    pthread_mutex_unlock(&c->mu);
    /* a ring entry is re-recorded only once complete, so waiting on a re-recorded one
     * waits for later work of the same stream at worst, never for less */
    if (!st && e) st = CK(cudaEventSynchronize(e));
    pthread_mutex_lock(&c->mu);
    if (!st && s && seq > s->done_known) s->done_known = seq;
    if (!st && s && seq > s->fail_seq) st = og_fail(err, errlen, s->fail_st, "%s", s->fail_msg);
    pthread_mutex_unlock(&c->mu);
    return st;
}

static bool cu_event_done(og_device *d, og_event ev) {
    if (!ev) return true;
    cuda_device *c = (cuda_device *)d;
    char msg[512];
    if (cur(c, msg, sizeof msg)) {
        og_log(NULL, OG_LOG_WARN, "cuda device: %s", msg);
        return false;
    }
    pthread_mutex_lock(&c->mu);
    og_stream *s;
    cudaEvent_t e;
    bool done = false;
    if (!find_event(c, ev, &s, &e, NULL, 0)) {
        done = !e || query_done(e);
        const uint64_t seq = ev & ((1ull << EV_SHIFT) - 1);
        if (done && s && seq > s->done_known) s->done_known = seq;
    }
    pthread_mutex_unlock(&c->mu);
    return done;
}

/* ---- the forward pass's ops ---- */

/* Copies bytes of host control data (an op's arrays) to the device in stream
 * order, *dev their device copy: through s's pinned ring (so the copy is truly
 * asynchronous and the caller may reuse src at once) into the same offset of
 * its device mirror. The ring is used in two halves: issuing moves on to the
 * other half only once the copies out of it (recorded by an event when issuing
 * left it) are done; a device offset is rewritten only by a copy queued after
 * every kernel that read it (one stream). */
static og_status control_stage(og_stream *s, const void *src, uint64_t bytes, const void **dev, char *err,
                               size_t errlen) {
    *dev = NULL;
    if (!bytes) return OG_OK;
    const uint64_t b = up256(bytes);
    og_status st = OG_OK;
    if (b > s->ring_cap / 2) { /* grow: the queued work may still read the old ring */
        uint64_t nc = s->ring_cap ? s->ring_cap : 1 << 20;
        while (nc / 2 < b) nc *= 2;
        st = CK(cudaStreamSynchronize(s->cs));
        if (!st && s->ring_h) st = CK(cudaFreeHost(s->ring_h));
        if (!st && s->ring_d) st = CK(cudaFree(s->ring_d));
        s->ring_h = s->ring_d = NULL;
        s->ring_cap = s->ring_at = 0;
        s->ring_half = 0;
        s->ring_live[0] = s->ring_live[1] = false;
        if (!st) st = CK(cudaMallocHost((void **)&s->ring_h, nc));
        if (!st && (st = CK(cudaMalloc((void **)&s->ring_d, nc)))) {
            CKW(cudaFreeHost(s->ring_h));
            s->ring_h = NULL;
        }
        for (int i = 0; i < 2 && !st; i++)
            if (!s->ring_ev[i]) st = CK(cudaEventCreateWithFlags(&s->ring_ev[i], cudaEventDisableTiming));
        if (st) return st;
        s->ring_cap = nc;
    }
    const uint64_t half = s->ring_cap / 2;
    if (s->ring_at + b > (uint64_t)(s->ring_half + 1) * half) { /* on to the other half once it is free */
        if ((st = CK(cudaEventRecord(s->ring_ev[s->ring_half], s->cs)))) return st;
        s->ring_live[s->ring_half] = true;
        s->ring_half ^= 1;
        s->ring_at = (uint64_t)s->ring_half * half;
        if (s->ring_live[s->ring_half] && (st = CK(cudaEventSynchronize(s->ring_ev[s->ring_half])))) return st;
        s->ring_live[s->ring_half] = false;
    }
    memcpy(s->ring_h + s->ring_at, src, bytes);
    st = CK(cudaMemcpyAsync(s->ring_d + s->ring_at, s->ring_h + s->ring_at, bytes, cudaMemcpyHostToDevice, s->cs));
    if (st) return st;
    *dev = s->ring_d + s->ring_at;
    s->ring_at += b;
    return OG_OK;
}

/* s's ops' device scratch of at least bytes. */
static og_status work(og_stream *s, uint64_t bytes, char *err, size_t errlen) {
    return grow_block(s, &s->work, &s->work_bytes, bytes, err, errlen);
}

/* The weight checks of one matmul job (og_cuda_forward_type's types, a row
 * layout the kernels read). */
static og_status check_job(const og_matmul_job *j, int i, char *err, size_t errlen) {
    const og_weight *w = j->w;
    const og_type_traits *t = w ? og_quant_traits(w->type) : NULL;
    if (!w || !w->data || !j->x || !j->y || j->m < 0 || w->n_rows < 0 || w->K <= 0 || !t)
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "cuda matmul: job %d lacks a weight, x or y", i);
    if (!og_cuda_forward_type(w->type))
        return og_fail(err, errlen, OG_ERR_UNSUPPORTED, "cuda matmul: no kernel for %s weights", t->name);
    const bool quant = og_cuda_has_type(w->type);
    if (w->K % t->blck || (quant && w->K > og_cuda_max_k(w->type)) ||
        w->row_bytes != (size_t)(w->K / t->blck) * t->type_size)
        return og_fail(err, errlen, OG_ERR_UNSUPPORTED, "cuda matmul: job %d: K %lld of %s (at most %lld), rows of %zu bytes",
                       i, (long long)w->K, t->name, (long long)(quant ? og_cuda_max_k(w->type) : INT64_MAX), w->row_bytes);
    return OG_OK;
}

#define MM_GROUP_ROWS 8 /* activation rows per thread block of a quantized product */

/* The matmul op: each job's products in the canonical order whatever its
 * numerics (the fork's orders are the host tiers'; a GPU has only the
 * canonical one): bitwise with a canonical job on the host. */
static og_status cu_matmul_jobs(cuda_device *c, og_stream *s, const og_matmul_job *jobs, int n, char *err,
                                size_t errlen) {
    if (n < 1 || n > 256 || !jobs) return og_fail(err, errlen, OG_ERR_INVALID_ARG, "cuda matmul: %d jobs (1 to 256)", n);
    og_status st = OG_OK;
    for (int i = 0; i < n && !st; i++) st = check_job(&jobs[i], i, err, errlen);
    if (st || (st = cur(c, err, errlen))) return st;
    for (int i = 0; i < n && !st; i++) {
        const og_matmul_job *j = &jobs[i];
        const og_weight *w = j->w;
        if (!j->m || !w->n_rows) continue;
        if (!og_cuda_has_type(w->type)) {
            st = CK(og_cuda_products_f(w->type, w->data, w->row_bytes, w->n_rows, w->K, j->x, j->m, j->y, w->n_rows, s->cs));
            continue;
        }
        st = work(s, up256((uint64_t)j->m * og_cuda_act_row_bytes(w->type, w->K)), err, errlen);
        if (!st) st = CK(og_cuda_quantize_act(w->type, j->x, s->work, j->m, w->K, s->cs));
        og_cuda_groups gr;
        for (int64_t r0 = 0; r0 < j->m && !st; r0 += (int64_t)MM_GROUP_ROWS * OG_CUDA_MAX_GROUPS) {
            gr.n = 0;
            for (int64_t r = r0; r < j->m && gr.n < OG_CUDA_MAX_GROUPS; r += MM_GROUP_ROWS)
                gr.g[gr.n++] = (og_cuda_group){0, (int32_t)r, (int32_t)(j->m - r < MM_GROUP_ROWS ? j->m - r : MM_GROUP_ROWS)};
            st = CK(og_cuda_products(w->type, w->data, 0, 0, w->row_bytes, w->n_rows, w->K, &gr, s->work, j->y, w->n_rows,
                                     s->cs));
        }
    }
    return st ? stream_fail(s, st, err ? err : "matmul failed") : OG_OK;
}

/* RoPE's cos and sin of every token (og_rope_cos_sin: the host's), interleaved
 * [n_tok][d_rope / 2][2], staged for the kernel. */
static og_status rope_table(og_stream *s, const og_rope_op *op, const void **dev, char *err, size_t errlen) {
    const int half = op->rope.d_rope / 2;
    const size_t bytes = (size_t)op->n_tok * (size_t)half * 2 * sizeof(float);
    if (og_buf_reserve(&s->hbuf, bytes + (size_t)op->rope.d_rope * sizeof(float)))
        return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    float *cs = s->hbuf.p, *c = cs + (size_t)op->n_tok * half * 2, *sn = c + half;
    for (int64_t t = 0; t < op->n_tok; t++) {
        og_rope_cos_sin(&op->rope, op->pos[t], c, sn);
        for (int i = 0; i < half; i++) {
            cs[(t * half + i) * 2] = c[i];
            cs[(t * half + i) * 2 + 1] = sn[i];
        }
    }
    return control_stage(s, cs, bytes, dev, err, errlen);
}

/* ---- deepseek4's and deepseek41's ops with device scratch or staged tables ---- */

/* The device copy of a host array inside the op's own block (og_cop_make put it
 * there; cu_issue staged the block whole at db). */
static const void *own_dev(const uint8_t *db, const void *own, const void *p) {
    return p ? db + ((const uint8_t *)p - (const uint8_t *)own) : NULL;
}

/* The compressor: the emitting tokens and their rows' cos and sin (the host's,
 * og_rope_cos_sin at pos + 1 - ratio) staged, the snapshots in the stream's work. */
static og_status ds4_compress(og_stream *s, const og_compress_op *op, const uint8_t *db, const void *own, char *err,
                              size_t errlen) {
    if (!op->n_tok) return OG_OK;
    int64_t n_emit = 0;
    for (int64_t t = 0; t < op->n_tok; t++) n_emit += op->out[t] != NULL;
    const int half = op->rope.d_rope / 2;
    const size_t emit_bytes = (size_t)n_emit * sizeof(int32_t), cs_bytes = (size_t)n_emit * (size_t)half * 2 * sizeof(float);
    if (og_buf_reserve(&s->hbuf, emit_bytes + cs_bytes + (size_t)op->rope.d_rope * sizeof(float) + 64))
        return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    int32_t *emit = s->hbuf.p;
    float *cs = (float *)(void *)((uint8_t *)s->hbuf.p + ((emit_bytes + 15) & ~(size_t)15)), *c = cs + (size_t)n_emit * half * 2,
          *sn = c + half;
    int64_t e = 0;
    for (int64_t t = 0; t < op->n_tok; t++) {
        if (!op->out[t]) continue;
        emit[e] = (int32_t)t;
        if (half) og_rope_cos_sin(&op->rope, (int64_t)op->pos[t] + 1 - op->ratio, c, sn);
        for (int i = 0; i < half; i++) cs[(e * half + i) * 2] = c[i], cs[(e * half + i) * 2 + 1] = sn[i];
        e++;
    }
    const void *demit = NULL, *dcs = NULL;
    og_status st = control_stage(s, emit, emit_bytes, &demit, err, errlen);
    if (!st) st = control_stage(s, cs, cs_bytes, &dcs, err, errlen);
    const int64_t n_row = op->overlap ? 2 * (int64_t)op->ratio : op->ratio;
    if (!st) st = work(s, (uint64_t)n_emit * 2 * (uint64_t)n_row * (uint64_t)op->width * sizeof(float) + 256, err, errlen);
    if (st) return st;
    const og_cuda_compress cc = {op->n_tok, op->width, op->ratio, op->overlap, op->kv, op->score,
                                 (float *const *)own_dev(db, own, op->state), (const int32_t *)own_dev(db, own, op->pos),
                                 (float *const *)own_dev(db, own, op->out), demit, n_emit, s->work, op->norm, op->eps,
                                 op->rope.d_rope, dcs, (int32_t)op->qat, op->qat_n, op->round_f16};
    return CK(og_cuda_compress_step(&cc, s->cs));
}

static og_status ds4_indexer(og_stream *s, const og_indexer_op *op, const uint8_t *db, const void *own, char *err,
                             size_t errlen) {
    if (!op->n_tok) return OG_OK;
    if (op->n_head > 64 || op->n_tok > 65535)
        return og_fail(err, errlen, OG_ERR_UNSUPPORTED, "cuda indexer: %lld heads, %lld tokens (at most 64, 65535)",
                       (long long)op->n_head, (long long)op->n_tok);
    int32_t max_keys = 1;
    for (int64_t i = 0; i < op->n_tok; i++)
        if (op->n_keys[i] > max_keys) max_keys = op->n_keys[i];
    const uint64_t nf = (uint64_t)op->n_tok * (uint64_t)max_keys;
    const uint64_t fb = up256(nf * sizeof(float));
    og_status st = work(s, 2 * fb + up256(nf), err, errlen);
    if (st) return st;
    uint8_t *wk = s->work;
    const og_cuda_indexer a = {op->n_tok, op->n_head, op->d_head, op->top_k, op->q, op->w,
                               (const void *const *)own_dev(db, own, op->keys.blocks), op->keys.block_rows, op->keys.offset,
                               op->keys.row_stride, (const int32_t *)own_dev(db, own, op->key_first),
                               (const int32_t *)own_dev(db, own, op->n_keys), op->sel, op->cand_block, op->cand_topk,
                               op->cand_out, op->cand_in, op->sel_all, (float *)(void *)wk, (float *)(void *)(wk + fb),
                               wk + 2 * fb, max_keys};
    return CK(og_cuda_index(&a, s->cs));
}

static og_status ds4_sink_attn(og_stream *s, const og_sink_attn_op *op, const uint8_t *db, const void *own, char *err,
                               size_t errlen) {
    if (!op->n_tok) return OG_OK;
    const int64_t most = og_sink_attn_rows_most(op);
    og_status st = work(s, (uint64_t)op->n_tok * (uint64_t)op->n_head * (uint64_t)most * sizeof(float) + 256, err, errlen);
    if (st) return st;
    const bool comp = op->comp.n_blocks > 0;
    const og_cuda_sink a = {op->n_tok, op->n_head, op->d_head, op->kq_scale, op->q, op->o, op->sinks,
                            (const float *const *)own_dev(db, own, op->rows), (const int64_t *)own_dev(db, own, op->row_off),
                            comp ? (const void *const *)own_dev(db, own, op->comp.blocks) : NULL, op->comp.block_rows,
                            op->comp.offset, op->comp.row_stride, comp,
                            comp ? (const int32_t *)own_dev(db, own, op->comp_first) : NULL,
                            comp ? (const int32_t *)own_dev(db, own, op->n_comp) : NULL, op->sel, op->top_k, op->sel_every,
                            s->work, most};
    return CK(og_cuda_sink_attention(&a, s->cs));
}

/* Every op but matmul: checked and its host arrays copied by og_cop_make (the
 * cpu device's checks and messages), the arrays staged as one block, then the
 * kernel. */
static og_status cu_issue(og_device *d, og_stream *s, og_cop_kind kind, const void *desc, int n, char *err,
                          size_t errlen) {
    cuda_device *c = (cuda_device *)d;
    if (kind == OG_COP_MATMUL) return cu_matmul_jobs(c, s, desc, n, err, errlen);
    if (kind == OG_COP_GET_ROWS && !og_cuda_forward_type(((const og_get_rows_op *)desc)->table.type))
        return og_fail(err, errlen, OG_ERR_UNSUPPORTED, "cuda get_rows: no kernel for %s rows",
                       og_type_name(((const og_get_rows_op *)desc)->table.type));
    og_status st = og_cop_make(NULL, kind, desc, n, &s->rec, err, errlen);
    if (st) return st;
    const og_cop *o = &s->rec;
    const void *db = NULL; /* the device copy of o->own */
    if ((st = cur(c, err, errlen)) || (st = control_stage(s, o->own, o->own_bytes, &db, err, errlen)))
        return stream_fail(s, st, err ? err : "op failed");
#define DEV(p) ((const void *)((const uint8_t *)db + ((const uint8_t *)(p) - (const uint8_t *)o->own)))
    switch (kind) {
    case OG_COP_RMSNORM: {
        const og_rmsnorm_op *op = &o->u.norm;
        st = CK(og_cuda_rmsnorm(op->y.data, op->y.stride, op->x.data, op->x.stride, op->w, op->x.n, op->x.n_rows, op->eps,
                                s->cs));
        break;
    }
    case OG_COP_ROPE: {
        const og_rope_op *op = &o->u.rope;
        const void *cs = NULL;
        if (op->n_tok && op->n_vec && op->rope.d_rope) {
            st = rope_table(s, op, &cs, err, errlen);
            if (!st)
                st = CK(og_cuda_rope(op->x, op->n_tok, op->tok_stride, op->n_vec, op->vec_stride, op->rope.d_rope,
                                     (const float *)cs, s->cs));
        }
        break;
    }
    case OG_COP_SOFTMAX: st = CK(og_cuda_softmax(o->u.rows.data, o->u.rows.n, o->u.rows.n_rows, o->u.rows.stride, s->cs)); break;
    case OG_COP_SWIGLU: st = CK(og_cuda_swiglu(o->u.ew.out, o->u.ew.a, o->u.ew.b, o->u.ew.n, o->u.ew.f, s->cs)); break;
    case OG_COP_ADD: st = CK(og_cuda_add(o->u.ew.out, o->u.ew.a, o->u.ew.b, o->u.ew.n, s->cs)); break;
    case OG_COP_SCALE: st = CK(og_cuda_scale(o->u.ew.out, o->u.ew.a, o->u.ew.f, o->u.ew.n, s->cs)); break;
    case OG_COP_ROUTER: {
        const og_router_op *op = &o->u.router;
        og_cuda_router r = {op->logits, op->bias, op->n_tok, op->n_expert, op->k, op->gating, op->n_group,
                            op->n_group_used, op->norm, op->scale, op->norm_add, op->hash_table,
                            op->hash_table && op->n_tok ? (const int32_t *)DEV(op->tokens) : NULL, op->hash_rows,
                            op->ids, op->weights, NULL};
        st = work(s, (uint64_t)op->n_tok * 2 * (uint64_t)op->n_expert * sizeof(float) + 256, err, errlen);
        r.work = s->work;
        if (!st) st = CK(og_cuda_route(&r, s->cs));
        break;
    }
    case OG_COP_MLA: {
        const og_mla_op *op = &o->u.mla;
        int32_t max_pos = 0;
        for (int64_t i = 0; i < op->n_tok; i++)
            if (op->pos[i] + 1 > max_pos) max_pos = op->pos[i] + 1;
        og_cuda_mla a = {op->n_tok, op->n_head, op->r_kv, op->d_rope, op->kq_scale, op->q_abs, op->qabs_head_stride,
                         op->q_pe, op->qpe_tok_stride, op->qpe_head_stride, op->ctx, op->ctx_head_stride,
                         (const void *const *)DEV(op->kv.blocks), op->kv.block_rows, op->kv.type == OG_KV_F16,
                         op->kv.offset, op->kv.row_stride, (const int32_t *)DEV(op->kv_first), (const int32_t *)DEV(op->pos),
                         NULL, max_pos};
        if (!op->n_tok) break;
        st = work(s, (uint64_t)op->n_tok * (uint64_t)op->n_head * (uint64_t)max_pos * sizeof(float) + 256, err, errlen);
        a.scores = s->work;
        if (!st) st = CK(og_cuda_mla_attention(&a, s->cs));
        break;
    }
    case OG_COP_COPY: {
        const og_copy_op *op = &o->u.copy;
        st = CK(og_cuda_copy(op->dst, op->src, op->row_bytes, op->n_rows, op->n_mats, op->dst_row_stride, op->dst_mat_stride,
                             op->src_row_stride, op->src_mat_stride, s->cs));
        break;
    }
    case OG_COP_GET_ROWS: {
        const og_get_rows_op *op = &o->u.get_rows;
        if (op->n)
            st = CK(og_cuda_get_rows(op->table.type, op->table.data, op->table.row_bytes, op->table.K,
                                     (const int32_t *)DEV(op->ids), op->n, op->out, s->cs));
        break;
    }
    case OG_COP_KV_STORE: {
        const og_kv_store_op *op = &o->u.kv_store;
        if (op->src.n_rows)
            st = CK(og_cuda_kv_store((const void *const *)DEV(op->kv.blocks), op->kv.block_rows, op->kv.offset,
                                     op->kv.row_stride, op->kv.row_len, op->kv.type == OG_KV_F16, op->src.data,
                                     op->src.stride, op->src.n_rows, (const int32_t *)DEV(op->kv_first),
                                     (const int32_t *)DEV(op->pos), s->cs));
        break;
    }
    case OG_COP_COMBINE: {
        const og_combine_op *op = &o->u.combine;
        if (op->n_tok)
            st = CK(og_cuda_combine(op->y, op->res, op->n_tok, op->D, (const int32_t *)DEV(op->route_off),
                                    op->route_off[op->n_tok] ? (const int32_t *)DEV(op->rows) : NULL,
                                    op->route_off[op->n_tok] ? (const float *)DEV(op->weights) : NULL, s->cs));
        break;
    }
    case OG_COP_HC_MIX: {
        const og_hc_mix_op *op = &o->u.hc_mix;
        st = CK(og_cuda_hc_mix(op->mix, op->n_tok, op->n_hc, op->head, op->scale, op->base, op->eps, op->sinkhorn_iters,
                               op->pre, op->post, op->comb, s->cs));
        break;
    }
    case OG_COP_HC_COLLAPSE:
    case OG_COP_HC_EXPAND: {
        const og_hc_op *op = &o->u.hc;
        st = CK(og_cuda_hc(kind == OG_COP_HC_EXPAND, op->s, op->x, op->w, op->comb, op->n_tok, op->n_embd, op->n_hc, s->cs));
        break;
    }
    case OG_COP_QAT: {
        const og_qat_op *op = &o->u.qat;
        st = CK(og_cuda_qat(op->x.data, op->x.n_rows, op->x.stride, (int)op->kind, op->n_round, op->block, s->cs));
        break;
    }
    case OG_COP_COMPRESS: st = ds4_compress(s, &o->u.compress, (const uint8_t *)db, o->own, err, errlen); break;
    case OG_COP_INDEXER: st = ds4_indexer(s, &o->u.indexer, (const uint8_t *)db, o->own, err, errlen); break;
    case OG_COP_SINK_ATTN: st = ds4_sink_attn(s, &o->u.sink_attn, (const uint8_t *)db, o->own, err, errlen); break;
    case OG_COP_ENGRAM: {
        const og_engram_op *op = &o->u.engram;
        if (!op->n_tok) break;
        st = work(s, (uint64_t)op->n_tok * (uint64_t)op->n_hc * sizeof(float) + 256, err, errlen);
        if (!st) st = CK(og_cuda_engram(op->s, op->kv, op->q_w, op->k_w, op->n_tok, op->n_embd, op->n_hc, op->eps, s->work, s->cs));
        break;
    }
    default:
        return og_fail(err, errlen, OG_ERR_UNSUPPORTED, "cuda device: no kernel for op %d", (int)kind);
    }
#undef DEV
    return st ? stream_fail(s, st, err ? err : "op failed") : OG_OK;
}

/* the op table's entry points (device_ops.h): deepseek2's, deepseek4's and
 * deepseek41's; mla_kv_b's stays out of the table (deepseek2's legacy kv_b rows
 * are dequantized into host memory, which a GPU kernel cannot read: such a file's
 * --device-forward is refused on the cuda device) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
OG_COP_ENTRY_POINTS(cu, cu_issue)
#pragma GCC diagnostic pop

static void cu_destroy(og_device *d) {
    cuda_device *c = (cuda_device *)d;
    CKW(cudaSetDevice(c->gpu));
    for (int i = 0; i < c->n_streams; i++)
        if (c->streams[i]) cu_stream_destroy(d, c->streams[i]);
    for (int i = 0; i < c->n_pinned; i++) CKW(cudaHostUnregister(c->pinned[i].p));
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static const og_device_ops cuda_ops = {
    .name = "cuda",
    .mem_info = cu_mem_info,
    .alloc = cu_alloc,
    .free = cu_free,
    .stream_create = cu_stream_create,
    .stream_destroy = cu_stream_destroy,
    .copy_to_device = cu_copy_to_device,
    .copy_to_host = cu_copy_to_host,
    .experts = cu_experts,
    .event_record = cu_event_record,
    .stream_wait = cu_stream_wait,
    .event_wait = cu_event_wait,
    .event_done = cu_event_done,
    .destroy = cu_destroy,
    /* the forward pass's ops: every architecture's but deepseek2's legacy mla_kv_b (above) */
    .matmul = cu_matmul,
    .rmsnorm = cu_rmsnorm,
    .rope = cu_rope,
    .softmax = cu_softmax,
    .swiglu = cu_swiglu,
    .router = cu_router,
    .mla_attention = cu_mla,
    .add = cu_add,
    .scale = cu_scale,
    .copy = cu_copy,
    .get_rows = cu_get_rows,
    .kv_store = cu_kv_store,
    .hc_mix = cu_hc_mix,
    .hc_collapse = cu_hc_collapse,
    .hc_expand = cu_hc_expand,
    .qat = cu_qat,
    .compress = cu_compress,
    .indexer = cu_indexer,
    .sink_attention = cu_sink_attn,
    .engram = cu_engram,
    .moe_combine = cu_combine,
};

og_status og_device_cuda_create(int gpu, og_device **out, char *err, size_t errlen) {
    *out = NULL;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        (void)cudaGetLastError();
        if (!og_cuda_machine_has_gpu()) /* no driver at all: CUDA's "driver version is insufficient" would mislead */
            return og_fail(err, errlen, OG_ERR_UNSUPPORTED, "no NVIDIA GPU on this machine (no driver: "
                           "/proc/driver/nvidia is absent)");
        return og_fail(err, errlen, OG_ERR_UNSUPPORTED, "no CUDA device (cudaGetDeviceCount: %s)",
                       e != cudaSuccess ? cudaGetErrorString(e) : "the driver sees no GPU");
    }
    if (gpu < 0 || gpu >= n)
        return og_fail(err, errlen, OG_ERR_RANGE, "CUDA device %d does not exist (this machine has %d)", gpu, n);
    cuda_device *c = calloc(1, sizeof *c);
    if (!c) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    c->base.ops = &cuda_ops;
    c->gpu = gpu;
    pthread_mutex_init(&c->mu, NULL);
    int pools = 0;
    og_status st = CK(cudaSetDevice(gpu));
    if (!st) st = CK(cudaGetDeviceProperties(&c->prop, gpu));
    if (!st) st = CK(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, gpu));
    if (!st && !pools) st = og_fail(err, errlen, OG_ERR_UNSUPPORTED, "CUDA device %d (%s) has no stream-ordered allocator", gpu, c->prop.name);
    if (!st) st = CK(og_cuda_kernels_init()); /* fails with no kernel image for other architectures */
    if (st) {
        pthread_mutex_destroy(&c->mu);
        free(c);
        return st;
    }
    *out = &c->base;
    return OG_OK;
}

og_status og_device_cuda_describe(og_device *d, char *buf, size_t buflen) {
    cuda_device *c = as_cuda(d);
    if (!c) return OG_ERR_INVALID_ARG;
    uint64_t f = 0, t = 0;
    (void)cu_mem_info(d, &f, &t);
    snprintf(buf, buflen, "%s (sm_%d%d, %d SMs, %.1f GiB, %.1f GiB free)", c->prop.name, c->prop.major, c->prop.minor,
             c->prop.multiProcessorCount, (double)t / (1 << 30), (double)f / (1 << 30));
    return OG_OK;
}

og_status og_device_cuda_host_register(og_device *d, const void *p, uint64_t bytes, uint64_t *pinned, char *err,
                                       size_t errlen) {
    cuda_device *c = as_cuda(d);
    *pinned = 0;
    if (!c) return og_fail(err, errlen, OG_ERR_INVALID_ARG, "not a cuda device");
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t a = ((uintptr_t)p + pg - 1) & ~(pg - 1), b = ((uintptr_t)p + bytes) & ~(pg - 1);
    if (b <= a) return OG_OK;
    if (c->n_pinned >= MAX_PINNED) return og_fail(err, errlen, OG_ERR_RANGE, "cuda device: more than %d pinned ranges", MAX_PINNED);
    og_status st = cur(c, err, errlen);
    if (!st) st = CK(cudaHostRegister((void *)a, b - a, cudaHostRegisterReadOnly));
    if (st) {
        (void)cudaGetLastError();
        return st;
    }
    c->pinned[c->n_pinned++] = (pinned_range){(void *)a, b - a};
    *pinned = b - a;
    return OG_OK;
}

og_status og_device_cuda_matmul(og_device *d, og_stream *s, const og_weight *w, const float *x, int64_t m, float *y,
                                char *err, size_t errlen) {
    cuda_device *c = as_cuda(d);
    if (!c || m < 1) return og_fail(err, errlen, OG_ERR_INVALID_ARG, "cuda matmul: not a cuda device or m %lld", (long long)m);
    og_status st = check_weight(w, "matmul", err, errlen);
    if (!st) st = cur(c, err, errlen);
    if (st) return st;
    const uint64_t xq = up256((uint64_t)m * og_cuda_act_row_bytes(w->type, w->K));
    if ((st = scratch(s, xq, err, errlen))) return st;
    st = CK(og_cuda_quantize_act(w->type, x, s->scratch, m, w->K, s->cs));
    og_expert_group g = {0, (int32_t)m, OG_NUMERICS_CANONICAL};
    if (!st) st = products(s, w, w->data, 0, 0, &g, 1, s->scratch, y, err, errlen);
    return st;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

og_status og_device_cuda_copy_rate(og_device *d, uint64_t bytes, int reps, double *bytes_per_s, char *err,
                                   size_t errlen) {
    cuda_device *c = as_cuda(d);
    *bytes_per_s = 0;
    if (!c || reps < 1 || reps > 1000 || !bytes) return og_fail(err, errlen, OG_ERR_INVALID_ARG, "cuda copy rate: bad arguments");
    void *a = NULL, *b = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    double ms[1000];
    og_status st = cur(c, err, errlen);
    if (!st) st = CK(cudaMalloc(&a, bytes));
    if (!st) st = CK(cudaMalloc(&b, bytes));
    if (!st) st = CK(cudaEventCreate(&e0));
    if (!st) st = CK(cudaEventCreate(&e1));
    if (!st) st = CK(cudaMemset(a, 1, bytes));
    if (!st) st = CK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice)); /* warm up */
    for (int i = 0; i < reps && !st; i++) {
        float t = 0;
        st = CK(cudaEventRecord(e0, 0));
        if (!st) st = CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, 0));
        if (!st) st = CK(cudaEventRecord(e1, 0));
        if (!st) st = CK(cudaEventSynchronize(e1));
        if (!st) st = CK(cudaEventElapsedTime(&t, e0, e1));
        ms[i] = t;
    }
    if (!st) {
        qsort(ms, (size_t)reps, sizeof ms[0], cmp_double);
        *bytes_per_s = 2.0 * (double)bytes / (ms[reps / 2] * 1e-3);
    }
    if (e0) CKW(cudaEventDestroy(e0));
    if (e1) CKW(cudaEventDestroy(e1));
    CKW(cudaFree(a));
    CKW(cudaFree(b));
    return st;
}

og_status og_device_cuda_time(og_device *d, og_stream *s, og_status (*fn)(void *ctx, char *err, size_t errlen),
                              void *ctx, int reps, double *ms_per_rep, char *err, size_t errlen) {
    cuda_device *c = as_cuda(d);
    *ms_per_rep = 0;
    if (!c || reps < 1) return og_fail(err, errlen, OG_ERR_INVALID_ARG, "cuda time: bad arguments");
    cudaEvent_t e0 = NULL, e1 = NULL;
    float t = 0;
    og_status st = cur(c, err, errlen);
    if (!st) st = CK(cudaEventCreate(&e0));
    if (!st) st = CK(cudaEventCreate(&e1));
    if (!st) st = fn(ctx, err, errlen); /* warm up */
    if (!st) st = CK(cudaEventRecord(e0, s->cs));
    for (int i = 0; i < reps && !st; i++) st = fn(ctx, err, errlen);
    if (!st) st = CK(cudaEventRecord(e1, s->cs));
    if (!st) st = CK(cudaEventSynchronize(e1));
    if (!st) st = CK(cudaEventElapsedTime(&t, e0, e1));
    if (!st) *ms_per_rep = (double)t / reps;
    if (e0) CKW(cudaEventDestroy(e0));
    if (e1) CKW(cudaEventDestroy(e1));
    return st;
}
