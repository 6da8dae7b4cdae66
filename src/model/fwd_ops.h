/* Internal to src/model: the pieces every architecture's forward pass uses to
 * issue its work as device ops (og_device.h): the call's device, stream and
 * numerics, products with per-row numerics, RMSNorm, waiting for the stream,
 * routes to the dispatcher with the expert statistics, slices of a weight and
 * one call's scratch carved from one allocation. */
#ifndef OG_FWD_OPS_H
#define OG_FWD_OPS_H

#include "og_device.h"
#include "og_model.h"

/* One forward call's device, stream and numerics. Every activation lives in
 * the device's memory (device addresses, never dereferenced by the caller);
 * the host holds only control data (positions, routes, job lists). */
typedef struct og_fwd {
    og_device *dev;
    og_stream *s;
    const og_device_ops *ops;
    og_numerics nm;     /* every product's numerics: rc->host_numerics */
    const bool *exact;  /* [n_tok] or NULL (og_batch.exact): rows that compute canonically whatever nm */
    const og_dev_weights *wt; /* rc->weights with rc->dev, else NULL (weights used where they are) */
    char *err;
    size_t errlen;
} og_fwd;

/* Starts a forward call: f's numerics from rc->host_numerics and exact (the
 * batch's og_batch.exact), its device and stream rc->dev / rc->stream, or
 * without one a host device on rc->pool: rc->scratch's (kept from call to
 * call, made again for another pool or after a failed op), or without a
 * scratch one made for this call into *own_dev (the caller destroys it; NULL
 * otherwise). Errors: the host device's. */
og_status og_fwd_begin(og_fwd *f, const og_run_ctx *rc, const bool *exact, og_device **own_dev, char *err,
                       size_t errlen);

/* Jobs whose activation row a is token t_base + a (rows [t_base, t_base + m)
 * of the batch), run with the forward pass's numerics (their own numerics field
 * is ignored): f->nm for every row, except that a row f->exact marks computes
 * canonically. A job is cut into runs of consecutive rows of one numerics; each
 * output row is the bits og_cpu_matmul_multi gives for that row alone, so the
 * cut changes no result. Errors: the matmul op's. */
og_status og_fwd_mm_rows(og_fwd *f, const og_matmul_job *jobs, int n, int64_t t_base);
/* y[m][w->n_rows] = x[m][w->K] . W^T as one product (og_fwd_mm_rows' numerics). */
og_status og_fwd_mm(og_fwd *f, const og_weight *w, const float *x, int64_t m, float *y);
/* RMSNorm of n_rows rows of n, stride apart, in place or into y (same
 * strides); w NULL: without a weight. Errors: the rmsnorm op's. */
og_status og_fwd_norm(og_fwd *f, float *y, const float *x, int64_t n_rows, int64_t n, int64_t stride, const float *w,
                      float eps);
/* Waits for everything issued on the stream (the host is about to read). */
og_status og_fwd_sync(og_fwd *f);
/* Ends a forward call before its buffers go: waits for every op issued. A
 * wait error is returned only when st is OG_OK; after an error it is silenced
 * (f->err keeps the first one). Returns st, or the wait's error. */
og_status og_fwd_drain(og_fwd *f, og_status st);
/* What a forward call returns for st: OG_OK as it is; when failed_here, st
 * with err as it is (the dispatcher's or an allocation's message); else st
 * with err rewritten as "<what> failed: <status>[: <err>]". */
og_status og_fwd_failure(og_status st, bool failed_here, const char *what, char *err, size_t errlen);
/* *out = w with its data at its device copy (f->wt), or w as it is without a
 * table or without data (an absent tensor). Errors: OG_ERR_STATE (the table
 * holds no copy of w's bytes: a weight the placement did not upload; named in
 * f->err by what). */
og_status og_fwd_weight(const og_fwd *f, const og_weight *w, const char *what, og_weight *out);
/* The same for a vector of n floats (a norm's weight, a bias); NULL stays NULL. */
og_status og_fwd_vec(const og_fwd *f, const float *v, int64_t n, const char *what, const float **out);
/* The same for any weight data at p (an F32 vector, an I32 table) by the copy
 * holding its first byte; NULL stays NULL. Same errors. */
og_status og_fwd_ptr(const og_fwd *f, const void *p, const char *what, const void **out);
/* One weight of a layer and where its device view goes (the forward passes'
 * tables of their weights, as on_device builds them). */
typedef struct og_fwd_wmap {
    const og_weight *w;
    og_weight *o;
    const char *what;
} og_fwd_wmap;
/* og_fwd_weight of each of ws[n] in order; the first error. */
og_status og_fwd_weights(const og_fwd *f, const og_fwd_wmap *ws, size_t n);
/* While st is OG_OK: og_fwd_ptr of (i)->fld into (o)->fld (a weight's data
 * pointer field of a struct, named by its field). */
#define OG_FWD_PTR(st, f, o, i, fld)                                                                      \
    do {                                                                                                  \
        const void *v_ = NULL;                                                                            \
        if (!(st) && !((st) = og_fwd_ptr((f), (i)->fld, #fld, &v_))) (o)->fld = v_;                        \
    } while (0)
/* Rows [r0, r0 + n) of w as their own weight (an offset on a device address). */
og_weight og_fwd_slice(const og_weight *w, int64_t r0, int64_t n);

/* Host routes [T][k] from the router op's ids and weights (host copies), and the
 * expert statistics of layer il (n_expert E per layer) when rc->stats. */
void og_fwd_routes(const og_run_ctx *rc, uint32_t il, uint32_t E, int k, int64_t T, const int32_t *ids,
                   const float *wts, og_route *routes);

/* A forward call's device scratch: offsets into one allocation (base NULL:
 * only counts, the sizing pass). Every piece 64-byte aligned. */
typedef struct og_fwd_scratch_cut {
    uint8_t *base;
    uint64_t used, cap;
} og_fwd_scratch_cut;
/* The next `bytes` of the allocation, or NULL when it does not fit (or when
 * counting); used grows either way. */
void *og_fwd_take(og_fwd_scratch_cut *s, uint64_t bytes);

/* The call's device scratch of `need` bytes (og_fwd_scratch_bytes of n_tok
 * tokens and n_out logits rows) into *cut: rc->scratch, replaced once by a
 * larger one when it is smaller or on another device (its grows counted), or
 * without one a fresh allocation on f's device into *own, which the caller frees
 * with f->ops->free. Errors: og_fwd_scratch_reserve's, the device's alloc. */
og_status og_fwd_scratch_get(const og_model *m, const og_run_ctx *rc, og_fwd *f, uint64_t need, int64_t n_tok,
                             int64_t n_out, og_fwd_scratch_cut *cut, void **own);

/* The call's host buffer of `need` bytes (the sum of og_fwd_take's of a
 * counting pass) into *cut: rc->scratch's host buffer, grown when smaller and
 * kept, or without a scratch a fresh allocation into *own, which the caller
 * frees with free(). The contents are not kept from call to call. Errors:
 * OG_ERR_NOMEM. */
og_status og_fwd_host_get(const og_run_ctx *rc, uint64_t need, og_fwd_scratch_cut *cut, void **own);
/* The grouped output projection (deepseek4.md §4.1.5), V4's and V4.1's: the
 * heads' outputs o [T][H D] (inverse RoPE already applied) split into G groups
 * of H D / G, regrouped into og [G][T][H D / G], low[g] = rows [g o_rank,
 * (g+1) o_rank) of o_a times group g into low [G][T][o_rank], back to lowt
 * [T][G o_rank], y [T][N] = o_b . lowt. jobs / wts: host [G] scratch. Errors:
 * the copy and matmul ops'. */
og_status og_fwd_grouped_output(og_fwd *f, const og_weight *o_a, const og_weight *o_b, int64_t T, int64_t HD, int64_t G,
                                int64_t o_rank, const float *o, float *og, float *low, float *lowt, og_matmul_job *jobs,
                                og_weight *wts, float *y);

/* ---- per-sequence state memory (deepseek4's and deepseek41's og_kv.arch) ---- */

/* Rows per block of a growing row store: a sequence grows its store a block
 * at a time, rows never move. */
#define OG_ROW_STORE_BLOCK 64

/* A growing store of rows (compressed rows or indexer keys), OG_ROW_STORE_BLOCK
 * rows of `width` floats per block, in the sequence's device memory. */
typedef struct og_row_store {
    float **blocks; /* [n_blocks] device addresses (host array) */
    int n_blocks, cap;
} og_row_store;

/* ---- one call's host plan, shared by deepseek4 and deepseek41 ---- */

/* The host's view of one forward call: each token's position, each
 * sequence's tokens in the batch. */
typedef struct og_fwd_plan {
    int64_t T;
    int n_seq;
    int32_t *pos;      /* [T] */
    int32_t *start;    /* [n_seq] the sequence's first position in this call (its n_pos before) */
    int32_t *next;     /* [n_seq] its n_pos after */
    int32_t *tok_at;   /* [T] batch index of the k-th token of each sequence: tok_at[seq_off[s] + k] */
    int32_t *seq_off;  /* [n_seq + 1] */
    bool *canon;       /* [T] the token's products and scores canonical (nm, or og_batch.exact) */
    void **st;         /* [n_seq] the architecture's state of each sequence with tokens (the caller sets
                          them), NULL for one without */
} og_fwd_plan;

/* Fills p (its arrays carved by og_fwd_host_carve for batch->n_tok tokens and
 * n_seq sequences) for batch over kvs[n_seq]: checks every token id <
 * n_vocab and sequence index, and that no cache holds paged blocks (an
 * architecture whose state lives behind og_kv.arch; `arch` names it in the
 * message). Allocates nothing. Errors: OG_ERR_INVALID_ARG. */
og_status og_fwd_plan_make(og_fwd_plan *p, og_kv *const *kvs, int n_seq, const og_batch *batch, uint32_t n_vocab,
                           og_numerics nm, const char *arch, char *err, size_t errlen);

/* One call's host arrays that deepseek4's and deepseek41's forward passes
 * share: each layer's attention views and the MoE layer's host rows (the
 * architecture's own arrays beside them). */
typedef struct og_fwd_host {
    const float **rows;          /* [T n_swa] the raw rows each token sees */
    int64_t *row_off;            /* [T + 1] */
    float **blocks, **kblocks;   /* [n_seq nb + 1] a layer's compressed-row / indexer-key views */
    int32_t *cfirst, *ncomp;     /* [T] the compressed-row view per token */
    int32_t *kfirst, *nkeys;     /* [T] the keys' */
    int32_t *first_of;           /* [n_seq + 1] */
    float **state, **out;        /* [T] compressor pointers */
    int32_t *pos_mod, *neg_pos, *seq_idx; /* [T] */
    int32_t *h_ids;              /* [T][k] */
    float *h_w, *hx, *hy;        /* [T][k], [T][N], [T][N] */
    og_route *routes;            /* [T][k] */
    og_matmul_job *jobs;         /* [n_jobs] */
    og_weight *wts;              /* [G] */
    float **ring;                /* [n_seq] a layer's raw rings */
    og_row_store **cst, **kst;   /* [n_seq] a layer's stores of each sequence */
    float **sts, **ists;         /* [n_seq] a layer's compressor states (V4's kv and indexer compressors) */
} og_fwd_host;

/* The sizes of og_fwd_host's arrays: T tokens of n_seq sequences, nb a bound
 * on one store's blocks (og_fwd_store_blocks_bound), n_swa the window, k the
 * experts per token, N the embedding width, n_jobs and G the product jobs and
 * output groups. */
typedef struct og_fwd_host_shape {
    int64_t T, nb;
    int n_seq;
    uint32_t n_swa, k, N;
    uint64_t n_jobs, G;
} og_fwd_host_shape;

/* A forward call's host arrays in one buffer: p's and a's of shape sh, then
 * the architecture's own (more(c, ctx), og_fwd_take's; NULL: none), carved
 * once counting, then once more from og_fwd_host_get's buffer (*own: the
 * call's own when rc has no scratch, freed by the caller with free()).
 * Errors: OG_ERR_NOMEM (with err: "<what>: out of memory ..."). */
og_status og_fwd_host_carve(const og_run_ctx *rc, const og_fwd_host_shape *sh, og_fwd_plan *p, og_fwd_host *a,
                            void (*more)(og_fwd_scratch_cut *c, void *ctx), void *ctx, void **own, const char *what,
                            char *err, size_t errlen);
/* The checks every MoE forward call starts with (err cleared): tokens and
 * sequences, a dispatcher. Errors: OG_ERR_INVALID_ARG. */
og_status og_fwd_call_check(const og_run_ctx *rc, int64_t n_tok, int n_seq, char *err, size_t errlen);

/* A bound on the blocks any one row store of the batch's sequences holds
 * once the call has grown them: (n_pos + n_tok) / 64 rows' blocks rounded up
 * (ratio 1, the most rows a store can need), or the most a sequence's state
 * holds already (held(kv): its stores' largest n_blocks, 0 without a state;
 * a fork or a shorter n_pos can leave more). Sizes the layers' block views.
 * Cannot fail. */
int64_t og_fwd_store_blocks_bound(og_kv *const *kvs, int n_seq, int64_t n_tok, int64_t (*held)(const og_kv *kv));
/* The largest n_blocks of n_layer stores a and b ([n_layer] each). Cannot fail. */
int64_t og_row_stores_max_blocks(const og_row_store *a, const og_row_store *b, uint32_t n_layer);

/* The view of one layer's row stores (stores[s], NULL for a sequence without
 * tokens) over the batch's sequences: sequence s's blocks from first_of[s]
 * (blocks: host [sum of their blocks]); per token its first block (first)
 * and its visible rows (n_rows = (pos + 1) / ratio). Cannot fail. */
og_kv_view og_fwd_store_view(const og_fwd_plan *p, const int32_t *seq_idx, float **blocks,
                             og_row_store *const *stores, uint64_t width, uint32_t ratio, int32_t *first_of,
                             int32_t *first, int32_t *n_rows);

/* The raw rows each token sees (a window of W positions, pos - W < q <= pos):
 * this call's rows from kv [T][D] (device), older ones from its sequence's
 * ring rings[s] (device [W][D], position q in row q mod W); into rows (host
 * [T W]) and row_off (host [T + 1]). Cannot fail. */
void og_fwd_window_rows(const og_fwd_plan *p, const int32_t *seq_idx, float *const *rings, int32_t W, int64_t D,
                        const float *kv, const float **rows, int64_t *row_off);
/* This call's rows kv [T][D] into the rings (in batch order: a sequence's
 * last W stay); pos_mod: host [T] scratch. Errors: the kv_store op's. */
og_status og_fwd_ring_store(og_fwd *f, const og_fwd_plan *p, float **rings, const int32_t *seq_idx, int32_t *pos_mod,
                            int32_t W, int64_t D, float *kv);

/* Host arrays of a MoE layer's dispatch (sized [T][k] and [T][N]). */
typedef struct og_fwd_moe_host {
    int32_t *ids;        /* [T][k] */
    float *w, *x, *y;    /* [T][k], [T][N], [T][N] */
    og_route *routes;    /* [T][k] */
} og_fwd_moe_host;

/* The MoE FFN (deepseek4.md §4.1.6) of x into y (device [T][N]): the router
 * product into ro->logits, the router op ro (its ids and weights device
 * [T][k]), then routes, x down to the host, the experts through the
 * dispatcher (rc->dispatch) and y back up. *failed_here: the dispatcher
 * failed (its message as it is). Errors: the ops', the dispatcher's. */
og_status og_fwd_moe(og_fwd *f, const og_model *m, const og_run_ctx *rc, const og_batch *batch, uint32_t il,
                     const og_weight *router, const og_router_op *ro, const float *x, float *y, int64_t N,
                     const og_fwd_moe_host *h, bool *failed_here);

/* The rows of src [T][row] (device) whose tokens want logits, packed into
 * dst [n_wanted][row] (runs of consecutive tokens one copy each). Errors: the
 * copy op's. */
og_status og_fwd_gather_wanted(og_fwd *f, const og_batch *batch, float *dst, const float *src, int64_t row);

/* bytes of a sequence's memory: the device's (dev) or 64-byte aligned host
 * memory (dev NULL). NULL when it does not fit (no message: the caller says
 * what it was for). */
void *og_seq_alloc(og_device *dev, uint64_t bytes);
/* Frees og_seq_alloc's p (NULL is fine). */
void og_seq_mem_free(og_device *dev, void *p);
/* Frees every block of s and its block table. */
void og_row_store_free(og_device *dev, og_row_store *s);
/* Grows s to hold n_rows rows of width floats. Errors: OG_ERR_NOMEM (s keeps
 * the blocks it had and those it got). */
og_status og_row_store_reserve(og_device *dev, og_row_store *s, int64_t n_rows, uint64_t width);
/* Row c of s (a device address; s holds it). Cannot fail. */
float *og_row_store_row(const og_row_store *s, int64_t c, uint64_t width);
/* bytes from src to dst: a host memcpy (dev NULL), or the device's copy op on
 * stream s (the caller waits). Errors: the copy op's. */
og_status og_seq_copy(og_device *dev, og_stream *s, void *dst, const void *src, uint64_t bytes, char *err,
                      size_t errlen);
/* The first n_rows rows (of width floats) of store a into b (reserved for
 * them), by og_seq_copy per block. Errors: as og_seq_copy. */
og_status og_row_store_copy(og_device *dev, og_stream *s, og_row_store *b, const og_row_store *a, int64_t n_rows,
                            uint64_t width, char *err, size_t errlen);
/* ---- state snapshots (og_kv_snapshot / og_kv_restore) ---- */

typedef struct og_snap_walk og_snap_walk; /* also in og_arch.h (C11 allows the repeat) */

/* One walk over a sequence state's pieces in the architecture's fixed order
 * (og_arch.state_walk): each piece is packed after the last into a snapshot's
 * one allocation (data, in the state's memory) or its host part (host, for
 * host-side pieces such as deepseek41's Engram context), or copied back out
 * of them. base and host NULL: only the bytes are counted. */
struct og_snap_walk {
    og_device *dev;      /* the state's device, or NULL: host memory */
    og_stream *stream;   /* dev's copies go on it (the caller waits: og_seq_copies_wait) */
    uint8_t *base, *host;/* the snapshot's data (dev's memory) and host part, or NULL: counting */
    bool to_snap;        /* true: state -> snapshot; false: snapshot -> state */
    uint64_t off, host_off; /* bytes walked so far, in data and in host */
    og_status st;        /* the first copy error (the walk goes on counting) */
    char *err;
    size_t errlen;
};
/* The rows of a raw ring of n_ring rows (min(window, n_ctx)) that n_pos
 * positions have written (position p in row p mod the window: rows [0, n_pos)
 * until it wraps): what a snapshot copies; no later position reads the rest
 * before writing it. */
static inline int32_t og_fwd_ring_filled(int32_t n_ring, int32_t n_pos) { return n_pos < n_ring ? n_pos : n_ring; }
/* A device piece of bytes at state (in w->dev's memory). */
void og_snap_piece(og_snap_walk *w, void *state, uint64_t bytes);
/* The first n_rows rows (width floats each) of row store rs (reserved for
 * them when restoring), one piece per block. */
void og_snap_rows(og_snap_walk *w, og_row_store *rs, int64_t n_rows, uint64_t width);
/* A host piece of bytes at state (host memory). */
void og_snap_host(og_snap_walk *w, void *state, uint64_t bytes);

/* Waits for the copies a state fork issued on s (a device's state; dev NULL:
 * nothing to wait for). After an earlier error st the wait's error is
 * silenced. Returns st or the wait's error. */
og_status og_seq_copies_wait(og_device *dev, og_stream *s, og_status st, char *err, size_t errlen);

#endif
