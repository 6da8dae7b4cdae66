/* The architecture table (internal to src/model; DESIGN.md "The seams"): one
 * og_arch per supported general.architecture, with its functions and its ONE
 * tensor-name table (used by its loader, its model writer and
 * og_model_tensor_role). src/model/model.c looks an architecture up by name in
 * a const table of og_arch pointers and dispatches og_model_load,
 * og_model_describe, og_model_forward_batch, og_fwd_scratch_bytes and
 * og_model_tensor_role through it. Adding an architecture: its file defines a
 * const og_arch og_arch_NAME and model.c's table gets one line. */
#ifndef OG_ARCH_H
#define OG_ARCH_H

#include "og_model.h"

typedef struct og_snap_walk og_snap_walk; /* fwd_ops.h */

/* One row of an architecture's tensor-name table. */
typedef struct og_arch_tensor {
    const char *name;    /* GGUF name; per_layer: the part after "blk.N." ("attn_norm.weight") */
    og_tensor_role role;
    bool per_layer;
} og_arch_tensor;

/* t's GGUF name for layer `layer` (ignored when not per layer) into buf[n];
 * returns buf (truncated to n - 1 characters; names here are short). */
const char *og_arch_tensor_name(const og_arch_tensor *t, uint32_t layer, char *buf, size_t n);

/* Role of tensor_name by exact match in table[n] (per-layer rows match
 * "blk.N.<name>" for any N); OG_ROLE_OTHER when no row matches. Never fails:
 * what an og_arch.role does with its table. */
og_tensor_role og_arch_table_role(const og_arch_tensor *table, int n, const char *tensor_name);

/* Role by llama.cpp's generic MoE names (prefix rules: attn_*, ffn_*_exps, ...):
 * og_model_tensor_role for an architecture without an entry. Never fails. */
og_tensor_role og_arch_generic_role(const char *tensor_name);

/* The weight view of tensor t (the caller has checked its shape): rows of
 * t->ne[0] values, t->ne[1] * ne[2] * ne[3] rows, pointing into t's data.
 * Errors: OG_ERR_INVALID_ARG (no data: a header-only open),
 * OG_ERR_UNSUPPORTED (onegpu has no kernels for t's type), OG_ERR_FORMAT
 * (rows are not whole blocks). What each architecture's loader binds with. */
og_status og_arch_bind_weight(const og_gguf_tensor *t, og_weight *w, char *err, size_t errlen);

/* One MoE layer's experts into *mw (moe true): the routed experts' stacked
 * gate, up and down tensors exps[3] and the shared experts' shexp[3] (NULL
 * entries: none), each found and shape-checked by the architecture's table,
 * bound by og_arch_bind_weight, and one SwiGLU clamp for both (og_moe_weights'
 * swiglu_clamp: V4 and V4.1 clamp routed and shared experts alike). Errors:
 * og_arch_bind_weight's; OG_ERR_UNSUPPORTED when clamp_shexp differs from
 * clamp_exp (naming layer il and both). */
og_status og_arch_bind_moe(const og_gguf_tensor *const exps[3], const og_gguf_tensor *const shexp[3], float clamp_exp,
                           float clamp_shexp, int il, og_moe_weights *mw, char *err, size_t errlen);

/* Checks tensor t's shape against ne[0..2] (trailing 1s stored or not; ne3 1),
 * or, when alt is given, also accepts the 3-D shape alt[0..2] (llama.cpp's
 * [H D / G, o_rank, G] attn_output_a: the same bytes). Errors: OG_ERR_FORMAT
 * naming the tensor, its shape and the expected one. */
og_status og_arch_check_shape(const og_gguf_tensor *t, const int64_t ne[3], const int64_t *alt, char *err, size_t errlen);

/* Hyperparameter keys (src/model/arch_keys.c), by their full GGUF name. An
 * integer key: absent -> dflt when !required (else OG_ERR_NOT_FOUND "missing
 * key K"), then lo <= value <= hi (OG_ERR_FORMAT naming K and the value; also
 * for a value that is not a non-negative integer). */
og_status og_arch_key_uint(const og_gguf *g, const char *key, bool required, uint64_t dflt, uint64_t lo, uint64_t hi,
                           uint32_t *out, char *err, size_t errlen);
/* A float key (integers accepted), absent -> dflt when !required, finite and
 * in [lo, hi] (open at lo when lo_open). Errors as og_arch_key_uint's. */
og_status og_arch_key_float(const og_gguf *g, const char *key, bool required, float dflt, float lo, bool lo_open,
                            float hi, float *out, char *err, size_t errlen);
/* A per-layer float: a scalar key (every layer) or an array of >= n entries,
 * each in [0, hi], as llama.cpp's get_key_or_arr. Absent: *found false, out
 * untouched, OG_OK. Errors: OG_ERR_FORMAT naming K (and the entry). */
og_status og_arch_key_float_per_layer(const og_gguf *g, const char *key, uint32_t n, float hi, float *out, bool *found,
                                      char *err, size_t errlen);

/* One architecture. Every function gets a model made by its own load. */
typedef struct og_arch {
    const char *name; /* general.architecture */
    /* og_model_describe for this architecture (info->moe NULL). */
    og_status (*describe)(const og_gguf *g, const og_logger *lg, og_model_info *info, char *err, size_t errlen);
    /* m->gguf and m->log set; binds the weights into m->impl and fills m->info
     * (moe included). On error frees what it made (m->impl NULL). */
    og_status (*load)(og_model *m, char *err, size_t errlen);
    void (*free_impl)(og_model *m);
    /* Role of a tensor by name: the architecture's name table (usually
     * og_arch_table_role on `tensors`). Never fails. */
    og_tensor_role (*role)(const char *tensor_name);
    /* og_fwd_scratch_bytes: bytes of one forward call's activations. */
    uint64_t (*scratch_bytes)(const og_model *m, int64_t n_tok, int64_t n_out);
    /* og_model_forward_batch (the caller has checked nothing). */
    og_status (*forward_batch)(const og_model *m, const og_run_ctx *rc, og_kv *const *kvs, int n_seq,
                               const og_batch *batch, float *logits, char *err, size_t errlen);
    /* og_model_set_option, or NULL: the architecture has no options. */
    og_status (*set_option)(og_model *m, const char *name, const char *value, char *err, size_t errlen);
    /* og_kv_fork of a model whose cache is not paged (og_model_info.kv_paged
     * false), or NULL: its state has no fork (og_model_info.kv_fork false).
     * src->arch is set (this architecture's state, src->n_pos positions); dst
     * is empty. Deep-copies the state into new memory of src's (on rc->stream,
     * waited for, when src->dev) and sets dst's arch, arch_free, dev and n_pos;
     * on error dst stays empty. */
    og_status (*state_fork)(const og_model *m, const og_run_ctx *rc, const og_kv *src, og_kv *dst, char *err,
                            size_t errlen);
    /* og_kv_snapshot / og_kv_restore (issue 17), or NULL: no snapshots
     * (og_model_info.kv_snapshot false). state_walk: kv holds this
     * architecture's state of m (else OG_ERR_INVALID_ARG); walks every piece it
     * holds at kv->n_pos in one fixed order through w (fwd_ops.h:
     * og_snap_piece, og_snap_rows, og_snap_host), the same order counting,
     * taking and restoring. state_new: an empty state for dst (dst->n_ctx
     * set) on dev with room for n_pos positions' rows, dst's arch, arch_free,
     * dev and n_pos set (OG_ERR_NOMEM: dst stays empty). */
    og_status (*state_walk)(const og_model *m, const og_kv *kv, og_snap_walk *w);
    og_status (*state_new)(const og_model *m, og_device *dev, int32_t n_pos, og_kv *dst);
    /* (added to the contract) the ONE tensor-name table [n_tensors] the loader,
     * the writer (og_model_write.h) and role read */
    const og_arch_tensor *tensors;
    int n_tensors;
} og_arch;

/* The model (og_model.h keeps it opaque): what every architecture shares. */
struct og_model {
    const og_arch *arch;
    og_gguf *gguf;       /* owns the mapping the weights point into */
    og_logger log;
    og_model_info info;  /* info.moe points into impl */
    uint64_t opt_key;    /* every og_model_set_option that succeeded, chained (og_model_kv_key) */
    void *impl;          /* the architecture's weights (deepseek2: og_ds2 with hparams and layers) */
};

extern const og_arch og_arch_deepseek2; /* const tables: not mutable state */
extern const og_arch og_arch_deepseek4; /* branch ds4fwd adds it to model.c's table */
extern const og_arch og_arch_deepseek41;

/* The entry for general.architecture `name`, or NULL. */
const og_arch *og_arch_find(const char *name);

#endif
