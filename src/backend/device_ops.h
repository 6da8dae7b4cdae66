/* Internal to the backend: the forward pass's ops as one record that both CPU
 * devices (the cpu device's stream threads, the host device's caller) build
 * at issue and run later (device_ops.c). */
#ifndef OG_DEVICE_OPS_H
#define OG_DEVICE_OPS_H

#include "og_device.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

typedef enum og_cop_kind {
    OG_COP_MATMUL = 0,
    OG_COP_RMSNORM,
    OG_COP_ROPE,
    OG_COP_SOFTMAX,
    OG_COP_SWIGLU,
    OG_COP_ROUTER,
    OG_COP_MLA,
    OG_COP_ADD,
    OG_COP_SCALE,
    OG_COP_COPY,
    OG_COP_GET_ROWS,
    OG_COP_KV_STORE,
    OG_COP_MLA_KV_B, /* deepseek2's legacy layout */
    OG_COP_COMBINE,
    OG_COP_HC_MIX, /* deepseek4's (ds4_ops.c) from here on */
    OG_COP_HC_COLLAPSE,
    OG_COP_HC_EXPAND,
    OG_COP_QAT,
    OG_COP_COMPRESS,
    OG_COP_INDEXER,
    OG_COP_SINK_ATTN,
    OG_COP_ENGRAM, /* deepseek41's */
} og_cop_kind;

/* Free blocks for the host arrays of queued op records, by size class
 * (1 KiB << class bytes; a block's first word links it to the next free one):
 * a device that queues ops (the cpu device) gives each record's block back
 * here when the op has run, and an op takes the smallest class that holds
 * its arrays, so issuing in steady state allocates nothing whichever record
 * an op lands in (the same shapes need the same classes; a block of one
 * record kept with it would have to grow whenever a larger op came to it). */
#define OG_COP_N_CLASS 40
typedef struct og_cop_blocks {
    pthread_mutex_t mu;
    void *head[OG_COP_N_CLASS];
} og_cop_blocks;

/* One issued op; its host arrays are copies in `own`: a block of `blocks`
 * (own_class its class) when the record has a block pool, else of `keep`,
 * which a device reuses for its next op (the host device: issuing allocates
 * only when an op needs more than that record held before). */
typedef struct og_cop {
    og_cop_kind kind;
    void *own;
    size_t own_bytes; /* the bytes of own the op's arrays use (0: none); a device copies them as one block */
    og_buf keep;
    og_cop_blocks *blocks; /* NULL: keep */
    int own_class;         /* own's class in blocks, -1: none */
    union {
        struct {
            og_matmul_job *jobs; /* [n_jobs], their weights in wts */
            og_weight *wts;
            int n_jobs;
        } mm;
        og_rmsnorm_op norm;
        og_rope_op rope;
        og_rows rows;
        struct {
            float *out;
            const float *a, *b; /* swiglu: gate, up; add: a, b; scale: a */
            int64_t n;
            float f;            /* swiglu clamp, scale factor */
        } ew;
        og_router_op router;
        og_mla_op mla;
        og_copy_op copy;
        og_get_rows_op get_rows;
        og_kv_store_op kv_store;
        og_mla_kv_b_op kv_b;
        og_combine_op combine;
        og_hc_mix_op hc_mix;
        og_hc_op hc;
        og_qat_op qat;
        og_compress_op compress;
        og_indexer_op indexer;
        og_sink_attn_op sink_attn;
        og_engram_op engram;
    } u;
} og_cop;

/* A free block of bl holding bytes (the smallest class; allocated when that
 * class has none), its class in *cls; NULL when out of memory. */
void *og_cop_blocks_take(og_cop_blocks *bl, size_t bytes, int *cls);
/* Gives c's block back to its pool (nothing without one) and clears c->own. */
void og_cop_blocks_give(og_cop *c);
/* Makes bl empty (og_cop_blocks_free frees its blocks and its lock). */
void og_cop_blocks_init(og_cop_blocks *bl);
void og_cop_blocks_free(og_cop_blocks *bl);

/* c->own = a block of at least bytes: from c->blocks when the record has a
 * pool (a block it held from an earlier op given back first), else c->keep's
 * (grown when smaller; at least 4 KiB, which holds most ops' arrays, the MoE
 * combine's routes of a 64-token step too, so that a reused record seldom
 * grows); NULL when out of memory. */
static inline void *og_cop_own(og_cop *c, size_t bytes) {
    if (c->blocks) {
        og_cop_blocks_give(c);
        c->own = og_cop_blocks_take(c->blocks, bytes, &c->own_class);
        c->own_bytes = c->own ? bytes : 0;
        return c->own;
    }
    c->own = og_buf_reserve(&c->keep, bytes < 4096 ? 4096 : bytes) ? NULL : c->keep.p;
    c->own_bytes = c->own ? bytes : 0;
    return c->own;
}

/* b rounded up to 16 bytes: the slots of an op's own block (og_cop.own). */
static inline size_t og_cop_al16(size_t b) { return (b + 15) & ~(size_t)15; }

/* Copies bytes of src into the op's own block *own at *at, which advances by
 * og_cop_al16(bytes); returns the copy (NULL for a NULL or empty src). */
static inline void *og_cop_dup(void **own, size_t *at, const void *src, size_t bytes) {
    if (!src || !bytes) return NULL;
    uint8_t *dst = (uint8_t *)*own + *at;
    memcpy(dst, src, bytes);
    *at += og_cop_al16(bytes);
    return dst;
}

/* The scratch a device keeps for its ops (the products' quantized rows and
 * tiles, attention scores, the router's, deepseek4's attention; grown as
 * needed, never shrunk, freed by the device): og_buf. */
typedef og_buf og_cop_scratch;

/* Grows sc to at least need bytes (og_buf_reserve: its contents are not kept).
 * Errors: OG_ERR_NOMEM. */
og_status og_cop_scratch_reserve(og_cop_scratch *sc, size_t need);

/* Validates the descriptor and fills *c with copies of its host arrays, in
 * c->keep's block (c zeroed, or a record made before: its keep is reused).
 * Errors: OG_ERR_INVALID_ARG, OG_ERR_UNSUPPORTED, OG_ERR_NOMEM (with err). */
og_status og_cop_make(const og_kernels *k, og_cop_kind kind, const void *desc, int n, og_cop *c, char *err,
                      size_t errlen);
/* Runs c with the kernels and pool (NULL: this thread) and the device's scratch. */
og_status og_cop_run(const og_kernels *k, og_pool *pool, og_cop_scratch *sc, const og_cop *c);
/* Frees c's block (keep) and empties it. */
void og_cop_free(og_cop *c);

/* deepseek4's and deepseek41's kinds (OG_COP_HC_MIX ...), as og_cop_make / og_cop_run (ds4_ops.c). */
og_status og_ds4_cop_make(og_cop_kind kind, const void *desc, og_cop *c, char *err, size_t errlen);
og_status og_ds4_cop_run(const og_kernels *k, og_pool *pool, og_cop_scratch *sc, const og_cop *c);

/* The op table's entry points for a device whose `issue(d, s, kind, desc, n,
 * err, errlen)` queues or runs one og_cop (static functions prefix_matmul ...),
 * and the table's members in og_device_ops order. */
#define OG_COP_DS2_ENTRY_POINTS(prefix, issue)                                                                              \
    static og_status prefix##_matmul(og_device *d, og_stream *s, const og_matmul_job *jobs, int n_jobs, char *err,       \
                                     size_t errlen) {                                                                    \
        return issue(d, s, OG_COP_MATMUL, jobs, n_jobs, err, errlen);                                                   \
    }                                                                                                                   \
    static og_status prefix##_rmsnorm(og_device *d, og_stream *s, const og_rmsnorm_op *op, char *err, size_t errlen) { \
        return issue(d, s, OG_COP_RMSNORM, op, 0, err, errlen);                                                         \
    }                                                                                                                   \
    static og_status prefix##_rope(og_device *d, og_stream *s, const og_rope_op *op, char *err, size_t errlen) {       \
        return issue(d, s, OG_COP_ROPE, op, 0, err, errlen);                                                            \
    }                                                                                                                   \
    static og_status prefix##_softmax(og_device *d, og_stream *s, const og_rows *x, char *err, size_t errlen) {        \
        return issue(d, s, OG_COP_SOFTMAX, x, 0, err, errlen);                                                          \
    }                                                                                                                   \
    static og_status prefix##_swiglu(og_device *d, og_stream *s, float *out, const float *gate, const float *up,       \
                                     int64_t n, float clamp, char *err, size_t errlen) {                                \
        og_cop e = {.u.ew = {out, gate, up, n, clamp}};                                                                 \
        return issue(d, s, OG_COP_SWIGLU, &e, 0, err, errlen);                                                          \
    }                                                                                                                   \
    static og_status prefix##_router(og_device *d, og_stream *s, const og_router_op *op, char *err, size_t errlen) {   \
        return issue(d, s, OG_COP_ROUTER, op, 0, err, errlen);                                                          \
    }                                                                                                                   \
    static og_status prefix##_mla(og_device *d, og_stream *s, const og_mla_op *op, char *err, size_t errlen) {         \
        return issue(d, s, OG_COP_MLA, op, 0, err, errlen);                                                             \
    }                                                                                                                   \
    static og_status prefix##_add(og_device *d, og_stream *s, float *y, const float *a, const float *b, int64_t n,     \
                                  char *err, size_t errlen) {                                                           \
        og_cop e = {.u.ew = {y, a, b, n, 0}};                                                                           \
        return issue(d, s, OG_COP_ADD, &e, 0, err, errlen);                                                             \
    }                                                                                                                   \
    static og_status prefix##_scale(og_device *d, og_stream *s, float *y, const float *x, int64_t n, float f,          \
                                    char *err, size_t errlen) {                                                         \
        og_cop e = {.u.ew = {y, x, NULL, n, f}};                                                                        \
        return issue(d, s, OG_COP_SCALE, &e, 0, err, errlen);                                                           \
    }                                                                                                                   \
    static og_status prefix##_copy(og_device *d, og_stream *s, const og_copy_op *op, char *err, size_t errlen) {       \
        return issue(d, s, OG_COP_COPY, op, 0, err, errlen);                                                            \
    }                                                                                                                   \
    static og_status prefix##_get_rows(og_device *d, og_stream *s, const og_get_rows_op *op, char *err,                \
                                       size_t errlen) {                                                                 \
        return issue(d, s, OG_COP_GET_ROWS, op, 0, err, errlen);                                                        \
    }                                                                                                                   \
    static og_status prefix##_kv_store(og_device *d, og_stream *s, const og_kv_store_op *op, char *err,                \
                                       size_t errlen) {                                                                 \
        return issue(d, s, OG_COP_KV_STORE, op, 0, err, errlen);                                                        \
    }                                                                                                                   \
    static og_status prefix##_combine(og_device *d, og_stream *s, const og_combine_op *op, char *err, size_t errlen) { \
        return issue(d, s, OG_COP_COMBINE, op, 0, err, errlen);                                                         \
    }

/* deepseek4's and deepseek41's entry points (a device without them leaves them NULL). */
#define OG_COP_DS4_ENTRY_POINTS(prefix, issue)                                                                          \
    static og_status prefix##_hc_mix(og_device *d, og_stream *s, const og_hc_mix_op *op, char *err, size_t errlen) {  \
        return issue(d, s, OG_COP_HC_MIX, op, 0, err, errlen);                                                          \
    }                                                                                                                   \
    static og_status prefix##_hc_collapse(og_device *d, og_stream *s, const og_hc_op *op, char *err, size_t errlen) { \
        return issue(d, s, OG_COP_HC_COLLAPSE, op, 0, err, errlen);                                                     \
    }                                                                                                                   \
    static og_status prefix##_hc_expand(og_device *d, og_stream *s, const og_hc_op *op, char *err, size_t errlen) {   \
        return issue(d, s, OG_COP_HC_EXPAND, op, 0, err, errlen);                                                       \
    }                                                                                                                   \
    static og_status prefix##_qat(og_device *d, og_stream *s, const og_qat_op *op, char *err, size_t errlen) {        \
        return issue(d, s, OG_COP_QAT, op, 0, err, errlen);                                                             \
    }                                                                                                                   \
    static og_status prefix##_compress(og_device *d, og_stream *s, const og_compress_op *op, char *err,               \
                                       size_t errlen) {                                                                 \
        return issue(d, s, OG_COP_COMPRESS, op, 0, err, errlen);                                                        \
    }                                                                                                                   \
    static og_status prefix##_indexer(og_device *d, og_stream *s, const og_indexer_op *op, char *err, size_t errlen) {\
        return issue(d, s, OG_COP_INDEXER, op, 0, err, errlen);                                                         \
    }                                                                                                                   \
    static og_status prefix##_sink_attn(og_device *d, og_stream *s, const og_sink_attn_op *op, char *err,             \
                                        size_t errlen) {                                                                \
        return issue(d, s, OG_COP_SINK_ATTN, op, 0, err, errlen);                                                       \
    }                                                                                                                   \
    static og_status prefix##_engram(og_device *d, og_stream *s, const og_engram_op *op, char *err, size_t errlen) {  \
        return issue(d, s, OG_COP_ENGRAM, op, 0, err, errlen);                                                          \
    }                                                                                                                   \
    static og_status prefix##_mla_kv_b(og_device *d, og_stream *s, const og_mla_kv_b_op *op, char *err,               \
                                       size_t errlen) {                                                                 \
        return issue(d, s, OG_COP_MLA_KV_B, op, 0, err, errlen);                                                        \
    }

#define OG_COP_ENTRY_POINTS(prefix, issue) OG_COP_DS2_ENTRY_POINTS(prefix, issue) OG_COP_DS4_ENTRY_POINTS(prefix, issue)

#define OG_COP_TABLE(prefix)                                                                                           \
    prefix##_matmul, prefix##_rmsnorm, prefix##_rope, prefix##_softmax, prefix##_swiglu, prefix##_router,              \
        prefix##_mla, prefix##_add, prefix##_scale, prefix##_copy, prefix##_get_rows, prefix##_kv_store,               \
        prefix##_hc_mix, prefix##_hc_collapse, prefix##_hc_expand, prefix##_qat, prefix##_compress, prefix##_indexer,  \
        prefix##_sink_attn, prefix##_engram, prefix##_mla_kv_b, prefix##_combine

#endif
