/* The device interface: what the engine needs from the accelerator that holds
 * the hot experts (DESIGN.md "The seams", "The device without a GPU"). Two
 * implementations: `cpu` here (always available: plays the device when there is
 * no GPU, in a separate budgeted allocation, every host->device copy counted as
 * PCIe bytes, its ops run on its own threads) and `cuda` (its own issue).
 *
 * Device memory is addressed by `void *` values the host never dereferences: it
 * may add offsets to them (as with CUDA device pointers) and hand them back to
 * the device. Work is issued on streams: the copies and ops of one stream run in
 * the order issued, those of different streams in any order unless one stream
 * waits on an event recorded on another. Every call that issues work returns at
 * once; the host buffers it reads or writes must stay valid, and untouched, until
 * an event recorded after it completes. An op that fails on the device makes the
 * stream's later events fail: og_device_ops.event_wait returns its error. */
#ifndef OG_DEVICE_H
#define OG_DEVICE_H

#include "og_backend.h"

typedef struct og_device og_device;
typedef struct og_stream og_stream;
typedef uint64_t og_event; /* 0: no event (already complete) */

/* One MoE layer's expert slots in device memory: slot j starts at
 * base + j * slot_bytes and holds one expert's gate rows at gate_off, up rows at
 * up_off and down rows at down_off (bytes from the slot's start), in the file's
 * type and row layout. gate/up/down give type, K, n_rows and row_bytes of one
 * expert's matrices; their data is ignored. */
typedef struct og_expert_slots {
    void *base;
    uint64_t slot_bytes;
    uint32_t n_slots;
    og_weight gate, up, down; /* [D -> F], [D -> F], [F -> D] */
    uint64_t gate_off, up_off, down_off;
} og_expert_slots;

/* A run of consecutive activation rows that one slot's expert computes. */
typedef struct og_expert_group {
    int32_t slot;         /* [0, n_slots) */
    int32_t n_rows;       /* > 0 */
    og_numerics numerics; /* what the products compute (DESIGN.md "Numerics") */
} og_expert_group;

/* The routed-expert op: group g computes y = down(swiglu(gate x, up x)) of its
 * slot's expert for its n_rows rows, groups back to back in x and y; with
 * swiglu_clamp > 0 the SwiGLU is V4's clamped one (og_swiglu_clamp). */
typedef struct og_expert_op {
    og_expert_slots slots;
    const og_expert_group *groups; /* [n_groups], host memory, copied when the op is issued */
    int n_groups;                  /* >= 1 */
    const void *x;                 /* device [sum n_rows][D] f32 */
    void *y;                       /* device [sum n_rows][D] f32 */
    float swiglu_clamp;            /* 0: plain SwiGLU (deepseek2) */
} og_expert_op;

typedef struct og_device_ops {
    const char *name;
    /* free and total device memory, bytes */
    og_status (*mem_info)(og_device *d, uint64_t *free_bytes, uint64_t *total_bytes);
    /* bytes of device memory, 64-byte aligned; OG_ERR_NOMEM with the sizes when it does not fit */
    og_status (*alloc)(og_device *d, uint64_t bytes, void **out, char *err, size_t errlen);
    /* NULL is fine; no op still queued may use p */
    void (*free)(og_device *d, void *p);
    /* a new stream; OG_ERR_NOMEM, OG_ERR_RANGE beyond the device's streams */
    og_status (*stream_create)(og_device *d, og_stream **out, char *err, size_t errlen);
    /* waits for the stream's work, then releases it; NULL is fine */
    void (*stream_destroy)(og_device *d, og_stream *s);
    /* issues a copy of bytes from host src to device dst on s (counted in pcie_bytes) */
    og_status (*copy_to_device)(og_device *d, og_stream *s, void *dst, const void *src, uint64_t bytes, char *err,
                                size_t errlen);
    /* issues a copy of bytes from device src to host dst on s */
    og_status (*copy_to_host)(og_device *d, og_stream *s, void *dst, const void *src, uint64_t bytes, char *err,
                              size_t errlen);
    /* issues the routed-expert op on s. Errors at once: OG_ERR_INVALID_ARG (a slot
     * outside n_slots, a group without rows, a negative clamp), OG_ERR_UNSUPPORTED (no kernels for
     * the types on this device); a product that fails later fails the stream */
    og_status (*experts)(og_device *d, og_stream *s, const og_expert_op *op, char *err, size_t errlen);
    /* *ev completes when everything issued on s before it has completed */
    og_status (*event_record)(og_device *d, og_stream *s, og_event *ev, char *err, size_t errlen);
    /* later work on s starts only once ev completed (ev 0: no wait) */
    og_status (*stream_wait)(og_device *d, og_stream *s, og_event ev, char *err, size_t errlen);
    /* the host blocks until ev completed; the error of a failed op before it, if any */
    og_status (*event_wait)(og_device *d, og_event ev, char *err, size_t errlen);
    /* whether ev completed (never blocks) */
    bool (*event_done)(og_device *d, og_event ev);
    void (*destroy)(og_device *d);
} og_device_ops;

struct og_device {
    const og_device_ops *ops;
    uint64_t pcie_bytes; /* host -> device bytes issued so far (read and written by the issuing thread) */
};

/* The `cpu` device with budget bytes of "device memory" (allocated on demand,
 * refused beyond the budget). Each stream has its own thread that runs its work
 * in order; the expert op runs on a pool of n_threads threads (the stream's
 * thread and n_threads - 1 workers, one op at a time across streams) with the
 * kernels kern (copied; NULL: the device has no compute ops, OG_ERR_UNSUPPORTED).
 * n_threads in [1, 4096]. Errors: OG_ERR_INVALID_ARG, OG_ERR_NOMEM. */
og_status og_device_cpu_create(uint64_t budget, int n_threads, const og_kernels *kern, og_device **out, char *err,
                               size_t errlen);

/* The default --device-threads when the CPU plays the device: every CPU this
 * process may run on, as the host pool's default. The host pool keeps its
 * threads (it still runs everything but the resident experts); the two compute
 * at once only while a MoE layer is split between them, and then the OS shares
 * the cores, so with every expert resident the device's part runs as fast as the
 * host pool ran it before, and with a mix neither waits on a smaller share.
 * Without --vram no device exists and nothing changes. */
int og_device_cpu_default_threads(void);

/* ---- test hooks of the cpu device (tests prove ordering and overlap with
 * them, never with timing) ---- */

typedef enum og_cpu_op_kind {
    OG_CPU_OP_COPY_TO_DEVICE = 0,
    OG_CPU_OP_COPY_TO_HOST,
    OG_CPU_OP_EXPERTS,
    OG_CPU_OP_RECORD,
    OG_CPU_OP_WAIT,
} og_cpu_op_kind;

/* Called on the stream's thread before (done false) and after (done true) each
 * op runs: stream is the stream's creation index (0, 1, ...). */
typedef void (*og_cpu_trace_fn)(void *ctx, int stream, og_cpu_op_kind kind, bool done);

/* Sets (or with fn NULL clears) the trace callback. Call while no work is queued.
 * OG_ERR_INVALID_ARG when d is not a cpu device. */
og_status og_device_cpu_trace(og_device *d, og_cpu_trace_fn fn, void *ctx);
/* The next op of this kind to start, on any stream, is held before it runs until
 * og_device_cpu_release; its stream runs nothing meanwhile. OG_ERR_INVALID_ARG
 * when d is not a cpu device. */
og_status og_device_cpu_hold(og_device *d, og_cpu_op_kind kind);
/* Blocks until an op is held. */
og_status og_device_cpu_wait_held(og_device *d);
/* Lets the held op (or the armed hold, if none is held yet) go. */
og_status og_device_cpu_release(og_device *d);
/* Blocks until stream s can make no progress: its queue is empty, it waits on an
 * event that has not completed, or its op is held. */
og_status og_device_cpu_settle(og_device *d, og_stream *s);

static inline void og_device_destroy(og_device *d) {
    if (d) d->ops->destroy(d);
}

#endif
