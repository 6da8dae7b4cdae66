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

#endif
