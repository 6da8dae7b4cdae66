/* deepseek4 (DeepSeek V4 Flash): weight binding by the one tensor-name table
 * (deepseek4_table.c), the per-sequence state and the forward pass as device
 * ops, in data-flow order (shared/spec/deepseek4.md §4.1-4.2; section numbers
 * below). Per layer: mHC mixes -> attention over the raw window plus the
 * compressed rows (ratio 4: the lightning indexer's top-k of them) with a
 * sink -> inverse RoPE -> grouped output -> mHC expand; mHC mixes -> MoE
 * (sqrt-softplus or hash routing; experts through the dispatcher) -> expand.
 * The host holds control data only: positions, the rows each token sees, the
 * routes. */
#include "deepseek4.h"
#include "fwd_ops.h"
#include "og_arch.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>


typedef struct ds4_layer {
    og_weight hc_attn_fn, hc_ffn_fn;      /* [hc N -> (2 + hc) hc] */
    const float *hc_attn_base, *hc_attn_scale, *hc_ffn_base, *hc_ffn_scale; /* [(2 + hc) hc], [3] */
    const float *attn_norm, *ffn_norm;    /* [N] */
    og_weight q_a, q_b;                   /* [N -> q_rank], [q_rank -> H D] */
    const float *q_a_norm;                /* [q_rank] */
    og_weight kv;                         /* [N -> D] */
    const float *kv_norm;                 /* [D] */
    const float *sinks;                   /* [H] */
    og_weight o_a;                        /* [H D / G -> G o_rank]: group g = rows [g o_rank, (g+1) o_rank) */
    og_weight o_b;                        /* [G o_rank -> N] */
    uint32_t ratio;                       /* 0, 4, 128 */
    og_weight comp_kv, comp_gate;         /* [N -> c D] (c = 2 at ratio 4) */
    og_weight comp_ape;                   /* [c D] x ratio rows, gathered by p mod ratio */
    const float *comp_norm;               /* [D] */
    og_weight idx_q_b, idx_proj;          /* [q_rank -> IH ID], [N -> IH] (ratio 4) */
    og_weight idx_comp_kv, idx_comp_gate; /* [N -> 2 ID] */
    og_weight idx_comp_ape;               /* [2 ID] x 4 rows */
    const float *idx_comp_norm;           /* [ID] */
    og_weight router;                     /* [N -> E] */
    const float *exp_bias;                /* [E] or NULL (hash layers) */
    const int32_t *tid2eid;               /* [V][k] or NULL (routed layers) */
} ds4_layer;

typedef struct og_ds4 {
    og_ds4_hparams hp;
    og_weight tok_embd;                   /* [N, V] */
    const float *out_norm;                /* [N] */
    og_weight output;                     /* [N -> V] */
    og_weight out_hc_fn;                  /* [hc N -> hc] */
    const float *out_hc_base, *out_hc_scale; /* [hc], [1] */
    ds4_layer *layers;                    /* [n_layer] */
    og_moe_weights *moe;                  /* [n_layer], m->info.moe */
    /* The model options (og_model_set_option; ref_deepseek4's switches):
     * kv_fp8 (default on) the FP8 round trip of the raw and compressed KV's
     * non-RoPE dims; indexer_fp4 (on) the FP4 round trip of the indexer's
     * rotated queries and keys; kv_f16 (on: "kv-type" f16, the default;
     * off: f32) every stored KV row (window, compressed rows, indexer keys)
     * rounded to f16, the values an f16 cache holds, as ds4 and llama.cpp's
     * default F16 cache store them (the rows stay F32: the state is not paged).
     * llama.cpp v0.4.0's graph has neither round trip: kv-fp8 and indexer-fp4
     * off compute what it computes with an F32 cache (kv-type f32). */
    bool kv_fp8, indexer_fp4, kv_f16;
} og_ds4;

/* ---- loading -------------------------------------------------------------- */

#define TRY(x) do { og_status st_ = (x); if (st_) return st_; } while (0)

/* Binds kind id of layer il as a weight (rows of ne0; ne1 ne2 rows): found and
 * shape-checked by the table; a matrix needs kernels for its type. */
static og_status bind(const og_gguf *g, const og_ds4_hparams *hp, og_ds4_tensor_id id, int il, og_weight *w, char *err,
                      size_t errlen) {
    const og_gguf_tensor *t;
    memset(w, 0, sizeof *w);
    TRY(og_ds4_tensor_find(g, hp, id, il, &t, err, errlen));
    if (!t) return OG_OK;
    if (t->type != OG_TYPE_I32) return og_arch_bind_weight(t, w, err, errlen);
    /* the hash table (ffn_gate_tid2eid): I32 rows, no kernels */
    if (!t->data) return og_fail(err, errlen, OG_ERR_INVALID_ARG, "tensor %s has no data (a header-only open)", t->name);
    *w = (og_weight){t->type, t->data, t->ne[0], t->ne[1] * t->ne[2], (size_t)t->ne[0] * sizeof(int32_t)};
    return OG_OK;
}

/* An F32 vector kind (the table checks type and length). */
static og_status bind_vec(const og_gguf *g, const og_ds4_hparams *hp, og_ds4_tensor_id id, int il, const float **out,
                          char *err, size_t errlen) {
    og_weight w;
    TRY(bind(g, hp, id, il, &w, err, errlen));
    if (w.data && w.type != OG_TYPE_F32)
        return og_fail(err, errlen, OG_ERR_FORMAT, "deepseek4 tensor kind %s of layer %d must be F32",
                       og_ds4_tensors[id].name, il);
    *out = w.data;
    return OG_OK;
}

/* Per-sequence cache elements (og_model_info's formula): raw windows, each
 * compressor's state ([2][slots][lanes width]), and per token the compressed
 * rows and indexer keys. */
static void kv_elems(const og_ds4_hparams *hp, uint64_t *fixed, double *per_tok) {
    uint64_t f = 0;
    double pt = 0;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        const uint32_t r = hp->compress_ratio[il];
        f += (uint64_t)hp->n_swa * hp->head_dim;
        if (!r) continue;
        const uint64_t lanes = r == OG_DS4_RATIO_CSA ? 2 : 1, slots = lanes * r;
        f += 2 * slots * lanes * hp->head_dim;
        pt += (double)hp->head_dim / r;
        if (r == OG_DS4_RATIO_CSA) {
            f += 2 * slots * lanes * hp->indexer_head_dim;
            pt += (double)hp->indexer_head_dim / r;
        }
    }
    *fixed = f;
    *per_tok = pt;
}

static uint64_t scratch_of(const og_ds4_hparams *hp, int64_t n_tok, int64_t n_out);

static void fill_info(const og_ds4_hparams *hp, og_model_info *info) {
    memset(info, 0, sizeof *info);
    info->arch = "deepseek4";
    info->n_layer = hp->n_layer;
    info->n_embd = hp->n_embd;
    info->n_vocab = hp->n_vocab;
    info->n_ctx_train = hp->n_ctx_train;
    info->n_head = hp->n_head;
    info->n_expert = hp->n_expert;
    info->n_expert_used = hp->n_expert_used;
    info->n_expert_shared = hp->n_expert_shared;
    info->n_ff_exp = hp->n_ff_exp;
    kv_elems(hp, &info->kv_elems_fixed, &info->kv_elems_per_token);
    info->kv_elem_bytes = sizeof(float); /* seq_alloc / store_reserve: F32 rows */
    info->kv_paged = false;
    info->kv_fork = true; /* ds4_state_fork */
    info->kv_snapshot = true; /* ds4_state_walk */
    /* one token / one row: each piece's alignment rounding at 1 bounds it at n */
    info->fwd_bytes_per_token = scratch_of(hp, 1, 0);
    info->fwd_bytes_per_output = scratch_of(hp, 0, 1);
}

static og_status ds4_describe(const og_gguf *g, const og_logger *lg, og_model_info *info, char *err, size_t errlen) {
    og_ds4_hparams hp;
    TRY(og_ds4_hparams_read(g, lg, &hp, err, errlen));
    fill_info(&hp, info);
    return OG_OK;
}

static void ds4_free_impl(og_model *m) {
    og_ds4 *d = m->impl;
    if (!d) return;
    free(d->layers);
    free(d->moe);
    free(d);
    m->impl = NULL;
}

static og_status load_layer(const og_gguf *g, const og_ds4_hparams *hp, int il, ds4_layer *L, og_moe_weights *mw,
                            char *err, size_t errlen) {
    TRY(bind(g, hp, OG_DS4_HC_ATTN_FN, il, &L->hc_attn_fn, err, errlen));
    TRY(bind_vec(g, hp, OG_DS4_HC_ATTN_BASE, il, &L->hc_attn_base, err, errlen));
    TRY(bind_vec(g, hp, OG_DS4_HC_ATTN_SCALE, il, &L->hc_attn_scale, err, errlen));
    TRY(bind(g, hp, OG_DS4_HC_FFN_FN, il, &L->hc_ffn_fn, err, errlen));
    TRY(bind_vec(g, hp, OG_DS4_HC_FFN_BASE, il, &L->hc_ffn_base, err, errlen));
    TRY(bind_vec(g, hp, OG_DS4_HC_FFN_SCALE, il, &L->hc_ffn_scale, err, errlen));
    TRY(bind_vec(g, hp, OG_DS4_ATTN_NORM, il, &L->attn_norm, err, errlen));
    TRY(bind_vec(g, hp, OG_DS4_FFN_NORM, il, &L->ffn_norm, err, errlen));
    TRY(bind(g, hp, OG_DS4_ATTN_Q_A, il, &L->q_a, err, errlen));
    TRY(bind_vec(g, hp, OG_DS4_ATTN_Q_A_NORM, il, &L->q_a_norm, err, errlen));
    TRY(bind(g, hp, OG_DS4_ATTN_Q_B, il, &L->q_b, err, errlen));
    TRY(bind(g, hp, OG_DS4_ATTN_KV, il, &L->kv, err, errlen));
    TRY(bind_vec(g, hp, OG_DS4_ATTN_KV_A_NORM, il, &L->kv_norm, err, errlen));
    TRY(bind_vec(g, hp, OG_DS4_ATTN_SINKS, il, &L->sinks, err, errlen));
    TRY(bind(g, hp, OG_DS4_ATTN_OUTPUT_A, il, &L->o_a, err, errlen));
    TRY(bind(g, hp, OG_DS4_ATTN_OUTPUT_B, il, &L->o_b, err, errlen));
    L->ratio = hp->compress_ratio[il];
    if (L->ratio) {
        TRY(bind(g, hp, OG_DS4_ATTN_COMP_KV, il, &L->comp_kv, err, errlen));
        TRY(bind(g, hp, OG_DS4_ATTN_COMP_GATE, il, &L->comp_gate, err, errlen));
        TRY(bind(g, hp, OG_DS4_ATTN_COMP_APE, il, &L->comp_ape, err, errlen));
        TRY(bind_vec(g, hp, OG_DS4_ATTN_COMP_NORM, il, &L->comp_norm, err, errlen));
    }
    if (L->ratio == OG_DS4_RATIO_CSA) {
        TRY(bind(g, hp, OG_DS4_INDEXER_Q_B, il, &L->idx_q_b, err, errlen));
        TRY(bind(g, hp, OG_DS4_INDEXER_PROJ, il, &L->idx_proj, err, errlen));
        TRY(bind(g, hp, OG_DS4_INDEXER_COMP_KV, il, &L->idx_comp_kv, err, errlen));
        TRY(bind(g, hp, OG_DS4_INDEXER_COMP_GATE, il, &L->idx_comp_gate, err, errlen));
        TRY(bind(g, hp, OG_DS4_INDEXER_COMP_APE, il, &L->idx_comp_ape, err, errlen));
        TRY(bind_vec(g, hp, OG_DS4_INDEXER_COMP_NORM, il, &L->idx_comp_norm, err, errlen));
    }
    TRY(bind(g, hp, OG_DS4_FFN_GATE_INP, il, &L->router, err, errlen));
    if ((uint32_t)il < hp->hash_layer_count) {
        og_weight t;
        TRY(bind(g, hp, OG_DS4_FFN_GATE_TID2EID, il, &t, err, errlen));
        L->tid2eid = t.data;
    } else {
        TRY(bind_vec(g, hp, OG_DS4_EXP_PROBS_B, il, &L->exp_bias, err, errlen));
    }
    _Static_assert(OG_DS4_FFN_DOWN_SHEXP == OG_DS4_FFN_GATE_EXPS + 5, "the six expert kinds in gate, up, down order");
    const og_gguf_tensor *t[6] = {NULL};
    for (int i = 0; i < (hp->n_expert_shared ? 6 : 3); i++)
        TRY(og_ds4_tensor_find(g, hp, (og_ds4_tensor_id)(OG_DS4_FFN_GATE_EXPS + i), il, &t[i], err, errlen));
    return og_arch_bind_moe(t, t + 3, hp->swiglu_clamp_exp[il], hp->swiglu_clamp_shexp[il], il, mw, err, errlen);
}

static og_status ds4_load(og_model *m, char *err, size_t errlen) {
    og_ds4 *d = calloc(1, sizeof *d);
    if (!d) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    m->impl = d;
    d->kv_fp8 = d->indexer_fp4 = d->kv_f16 = true;
    og_ds4_hparams *hp = &d->hp;
    const og_gguf *g = m->gguf;
    og_status st = og_ds4_hparams_read(g, &m->log, hp, err, errlen);
    if (!st && hp->n_head % hp->o_group_count)
        st = og_fail(err, errlen, OG_ERR_FORMAT, "deepseek4: %u heads in %u groups", hp->n_head, hp->o_group_count);
    if (!st) st = og_ds4_tensors_check(g, hp, err, errlen);
    if (!st) st = bind(g, hp, OG_DS4_TOKEN_EMBD, -1, &d->tok_embd, err, errlen);
    if (!st) st = bind_vec(g, hp, OG_DS4_OUTPUT_NORM, -1, &d->out_norm, err, errlen);
    if (!st) st = bind(g, hp, OG_DS4_OUTPUT, -1, &d->output, err, errlen);
    if (!st) st = bind(g, hp, OG_DS4_OUTPUT_HC_FN, -1, &d->out_hc_fn, err, errlen);
    if (!st) st = bind_vec(g, hp, OG_DS4_OUTPUT_HC_BASE, -1, &d->out_hc_base, err, errlen);
    if (!st) st = bind_vec(g, hp, OG_DS4_OUTPUT_HC_SCALE, -1, &d->out_hc_scale, err, errlen);
    if (!st && !d->output.data) d->output = d->tok_embd;
    if (!st) {
        d->layers = calloc(hp->n_layer, sizeof *d->layers);
        d->moe = calloc(hp->n_layer, sizeof *d->moe);
        if (!d->layers || !d->moe) st = og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    }
    for (uint32_t il = 0; il < hp->n_layer && !st; il++)
        st = load_layer(g, hp, (int)il, &d->layers[il], &d->moe[il], err, errlen);
    if (st) {
        ds4_free_impl(m);
        return st;
    }
    fill_info(hp, &m->info);
    m->info.moe = d->moe;
    og_log(&m->log, OG_LOG_INFO, "deepseek4: %u layers, window %u, indexer top-%u, %u hash layers", hp->n_layer,
           hp->n_swa, hp->indexer_top_k, hp->hash_layer_count);
    return OG_OK;
}

static og_status ds4_set_option(og_model *m, const char *name, const char *value, char *err, size_t errlen) {
    og_ds4 *d = m->impl;
    if (!strcmp(name, "kv-type")) { /* the cache type as values: f16 rounds every stored row */
        og_kv_type t;
        if (og_kv_type_parse(value, &t))
            return og_fail(err, errlen, OG_ERR_INVALID_ARG, "kv-type takes f16 or f32, not '%s'", value);
        d->kv_f16 = t == OG_KV_F16;
        return OG_OK;
    }
    /* kv-f16: kv-type's older name (on = f16) */
    static const char *const names[] = {"kv-fp8", "indexer-fp4", "kv-f16"};
    bool *flags[] = {&d->kv_fp8, &d->indexer_fp4, &d->kv_f16};
    for (int i = 0; i < 3; i++) {
        if (strcmp(name, names[i])) continue;
        if (strcmp(value, "on") && strcmp(value, "off"))
            return og_fail(err, errlen, OG_ERR_INVALID_ARG, "deepseek4 option %s takes on or off, not '%s'", name, value);
        *flags[i] = !strcmp(value, "on");
        return OG_OK;
    }
    return og_fail(err, errlen, OG_ERR_INVALID_ARG,
                   "deepseek4 has no option '%s' (it has: kv-type, kv-fp8, indexer-fp4; kv-f16 = kv-type f16)", name);
}

/* ---- per-sequence state (og_kv.arch) --------------------------------------- */


typedef struct ds4_seq {
    og_device *dev;          /* the memory's device (NULL: host memory); outlives the state */
    uint32_t n_layer;
    int32_t n_ring;          /* rows of each raw ring: min(n_swa, the sequence's og_kv.n_ctx) */
    float **raw;             /* [n_layer] device [n_ring][D]: position p in row p mod n_swa (< n_ring: p < n_ring
                                when n_ring < n_swa) */
    float **cstate, **istate;/* [n_layer] compressor states (og_compress_op.state) or NULL */
    og_row_store *comp, *ikeys; /* [n_layer] compressed rows [D], indexer keys [ID] */
} ds4_seq;

static void seq_free(void *arch) {
    ds4_seq *q = arch;
    if (!q) return;
    for (uint32_t il = 0; il < q->n_layer; il++) {
        if (q->raw) og_seq_mem_free(q->dev, q->raw[il]);
        if (q->cstate) og_seq_mem_free(q->dev, q->cstate[il]);
        if (q->istate) og_seq_mem_free(q->dev, q->istate[il]);
        if (q->comp) og_row_store_free(q->dev, &q->comp[il]);
        if (q->ikeys) og_row_store_free(q->dev, &q->ikeys[il]);
    }
    free(q->raw);
    free(q->cstate);
    free(q->istate);
    free(q->comp);
    free(q->ikeys);
    free(q);
}

static uint64_t state_floats(uint32_t ratio, uint64_t width) {
    const uint64_t lanes = ratio == OG_DS4_RATIO_CSA ? 2 : 1;
    return 2 * lanes * ratio * lanes * width;
}

/* Rows of a sequence's raw rings: the window, or its context when smaller
 * (n_ctx 0: unknown, the window). */
static int32_t ring_rows(const og_ds4_hparams *hp, int32_t n_ctx) {
    return n_ctx > 0 && (uint32_t)n_ctx < hp->n_swa ? n_ctx : (int32_t)hp->n_swa;
}

/* Makes the state of a sequence (its first forward call), rings of n_ring rows. */
static og_status seq_create(const og_ds4 *d, og_device *dev, int32_t n_ring, ds4_seq **out) {
    const og_ds4_hparams *hp = &d->hp;
    const uint32_t NL = hp->n_layer;
    ds4_seq *q = calloc(1, sizeof *q);
    if (!q) return OG_ERR_NOMEM;
    q->dev = dev;
    q->n_layer = NL;
    q->n_ring = n_ring;
    q->raw = calloc(NL, sizeof *q->raw);
    q->cstate = calloc(NL, sizeof *q->cstate);
    q->istate = calloc(NL, sizeof *q->istate);
    q->comp = calloc(NL, sizeof *q->comp);
    q->ikeys = calloc(NL, sizeof *q->ikeys);
    og_status st = q->raw && q->cstate && q->istate && q->comp && q->ikeys ? OG_OK : OG_ERR_NOMEM;
    for (uint32_t il = 0; il < NL && !st; il++) {
        const uint32_t r = hp->compress_ratio[il];
        if (!(q->raw[il] = og_seq_alloc(dev, (uint64_t)n_ring * hp->head_dim * sizeof(float)))) st = OG_ERR_NOMEM;
        if (!st && r && !(q->cstate[il] = og_seq_alloc(dev, state_floats(r, hp->head_dim) * sizeof(float))))
            st = OG_ERR_NOMEM;
        if (!st && r == OG_DS4_RATIO_CSA &&
            !(q->istate[il] = og_seq_alloc(dev, state_floats(r, hp->indexer_head_dim) * sizeof(float))))
            st = OG_ERR_NOMEM;
    }
    if (st) {
        seq_free(q);
        return st;
    }
    *out = q;
    return OG_OK;
}

/* og_arch.state_fork (og_kv_fork): a new state in src's memory holding copies
 * of every layer's raw window, compressor states, and the compressed rows and
 * indexer keys src's n_pos positions made (n_pos / ratio rows each). */
static og_status ds4_state_fork(const og_model *m, const og_run_ctx *rc, const og_kv *src, og_kv *dst, char *err,
                                size_t errlen) {
    const og_ds4 *d = m->impl;
    const og_ds4_hparams *hp = &d->hp;
    const ds4_seq *q = src->arch;
    if (src->arch_free != seq_free || q->n_layer != hp->n_layer)
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "kv fork: the cache holds no deepseek4 state of this model");
    ds4_seq *nq;
    if (seq_create(d, q->dev, q->n_ring, &nq))
        return og_fail(err, errlen, OG_ERR_NOMEM, "kv fork: no memory for the forked sequence's state");
    og_stream *s = q->dev ? rc->stream : NULL;
    const uint64_t fb = sizeof(float);
    og_status st = OG_OK;
    for (uint32_t il = 0; il < hp->n_layer && !st; il++) {
        const uint32_t r = hp->compress_ratio[il];
        st = og_seq_copy(q->dev, s, nq->raw[il], q->raw[il], (uint64_t)q->n_ring * hp->head_dim * fb, err, errlen);
        if (st || !r) continue;
        const int64_t rows = src->n_pos / (int64_t)r;
        if (og_row_store_reserve(nq->dev, &nq->comp[il], rows, hp->head_dim) ||
            (r == OG_DS4_RATIO_CSA && og_row_store_reserve(nq->dev, &nq->ikeys[il], rows, hp->indexer_head_dim))) {
            st = og_fail(err, errlen, OG_ERR_NOMEM, "kv fork: no memory for the forked sequence's compressed rows");
            break;
        }
        st = og_seq_copy(q->dev, s, nq->cstate[il], q->cstate[il], state_floats(r, hp->head_dim) * fb, err, errlen);
        if (!st) st = og_row_store_copy(q->dev, s, &nq->comp[il], &q->comp[il], rows, hp->head_dim, err, errlen);
        if (!st && r == OG_DS4_RATIO_CSA)
            st = og_seq_copy(q->dev, s, nq->istate[il], q->istate[il], state_floats(r, hp->indexer_head_dim) * fb, err,
                          errlen);
        if (!st && r == OG_DS4_RATIO_CSA)
            st = og_row_store_copy(q->dev, s, &nq->ikeys[il], &q->ikeys[il], rows, hp->indexer_head_dim, err, errlen);
    }
    st = og_seq_copies_wait(q->dev, s, st, err, errlen); /* done before either state is read or written */
    if (st) {
        seq_free(nq);
        return st;
    }
    *dst = (og_kv){.dev = q->dev, .n_pos = src->n_pos, .n_ctx = src->n_ctx, .arch = nq, .arch_free = seq_free};
    return OG_OK;
}

/* og_arch.state_walk (og_kv_snapshot / og_kv_restore): per layer the raw
 * ring, then per compressed layer the compressor state (the partial block
 * included) and the n_pos / ratio compressed rows, at ratio 4 the indexer's
 * state and keys too: everything a position reads of earlier ones. */
static og_status ds4_state_walk(const og_model *m, const og_kv *kv, og_snap_walk *w) {
    const og_ds4_hparams *hp = &((const og_ds4 *)m->impl)->hp;
    ds4_seq *q = kv->arch;
    if (kv->arch_free != seq_free || !q || q->n_layer != hp->n_layer)
        return og_fail(w->err, w->errlen, OG_ERR_INVALID_ARG, "kv snapshot: the cache holds no deepseek4 state of this model");
    const uint64_t fb = sizeof(float);
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        const uint32_t r = hp->compress_ratio[il];
        og_snap_piece(w, q->raw[il], (uint64_t)og_fwd_ring_filled(q->n_ring, kv->n_pos) * hp->head_dim * fb);
        if (!r) continue;
        og_snap_piece(w, q->cstate[il], state_floats(r, hp->head_dim) * fb);
        og_snap_rows(w, &q->comp[il], kv->n_pos / (int64_t)r, hp->head_dim);
        if (r != OG_DS4_RATIO_CSA) continue;
        og_snap_piece(w, q->istate[il], state_floats(r, hp->indexer_head_dim) * fb);
        og_snap_rows(w, &q->ikeys[il], kv->n_pos / (int64_t)r, hp->indexer_head_dim);
    }
    return OG_OK;
}

/* og_arch.state_new: a state with rings for dst->n_ctx and rows for n_pos. */
static og_status ds4_state_new(const og_model *m, og_device *dev, int32_t n_pos, og_kv *dst) {
    const og_ds4 *d = m->impl;
    const og_ds4_hparams *hp = &d->hp;
    ds4_seq *q;
    if (seq_create(d, dev, ring_rows(hp, dst->n_ctx), &q)) return OG_ERR_NOMEM;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        const uint32_t r = hp->compress_ratio[il];
        if (r && (og_row_store_reserve(dev, &q->comp[il], n_pos / (int64_t)r, hp->head_dim) ||
                  (r == OG_DS4_RATIO_CSA &&
                   og_row_store_reserve(dev, &q->ikeys[il], n_pos / (int64_t)r, hp->indexer_head_dim)))) {
            seq_free(q);
            return OG_ERR_NOMEM;
        }
    }
    *dst = (og_kv){.dev = dev, .n_pos = n_pos, .n_ctx = dst->n_ctx, .arch = q, .arch_free = seq_free};
    return OG_OK;
}

/* ---- the forward pass ------------------------------------------------------ */

/* One call's device buffers (og_fwd_take); sizes in floats per token unless said. */
typedef struct bufs {
    float *S;        /* [T][hc N] the streams */
    float *flat;     /* [T][hc N] rmsnorm(flat S) */
    float *mix;      /* [T][(2 + hc) hc] */
    float *pre, *post, *comb; /* [T][hc], [T][hc], [T][hc hc] */
    float *x, *y;    /* [T][N] sublayer input / output */
    float *qr;       /* [T][q_rank] */
    float *q, *o, *og; /* [T][H D] each: queries, attention output, grouped copy [G][T][H D / G] */
    float *kv;       /* [T][D] this call's raw rows */
    float *low, *lowt; /* [G][T][o_rank], [T][G o_rank] */
    float *ckv, *csc, *cape; /* [T][max(2 D, 2 ID)] compressor inputs */
    float *iq;       /* [T][IH ID] indexer queries */
    float *iw;       /* [T][IH] indexer weights */
    int32_t *sel;    /* [T][top_k] */
    float *rl;       /* [T][E] router logits */
    int32_t *r_ids;  /* [T][k] */
    float *r_w;      /* [T][k] */
    float *hS, *hflat, *hmix, *hpre, *hx, *logits; /* the head: [n_out][hc N] x 2, [n_out][hc] x 2, [n_out][N], [n_out][V] */
} bufs;

static uint64_t carve(const og_ds4_hparams *hp, int64_t T, int64_t n_out, og_fwd_scratch_cut *c, bufs *b) {
    const uint64_t fb = sizeof(float), hc = hp->hc_count, N = hp->n_embd, HD = (uint64_t)hp->n_head * hp->head_dim;
    const uint64_t cw = 2 * (hp->head_dim > hp->indexer_head_dim ? hp->head_dim : hp->indexer_head_dim);
    const uint64_t G = hp->o_group_count, orank = hp->o_lora_rank, E = hp->n_expert, k = hp->n_expert_used;
    const uint64_t t = (uint64_t)T, no = (uint64_t)n_out;
    b->S = og_fwd_take(c, t * hc * N * fb);
    b->flat = og_fwd_take(c, t * hc * N * fb);
    b->mix = og_fwd_take(c, t * (2 + hc) * hc * fb);
    b->pre = og_fwd_take(c, t * hc * fb);
    b->post = og_fwd_take(c, t * hc * fb);
    b->comb = og_fwd_take(c, t * hc * hc * fb);
    b->x = og_fwd_take(c, t * N * fb);
    b->y = og_fwd_take(c, t * N * fb);
    b->qr = og_fwd_take(c, t * hp->q_lora_rank * fb);
    b->q = og_fwd_take(c, t * HD * fb);
    b->o = og_fwd_take(c, t * HD * fb);
    b->og = og_fwd_take(c, t * HD * fb);
    b->kv = og_fwd_take(c, t * hp->head_dim * fb);
    b->low = og_fwd_take(c, t * G * orank * fb);
    b->lowt = og_fwd_take(c, t * G * orank * fb);
    b->ckv = og_fwd_take(c, t * cw * fb);
    b->csc = og_fwd_take(c, t * cw * fb);
    b->cape = og_fwd_take(c, t * cw * fb);
    b->iq = og_fwd_take(c, t * hp->indexer_n_head * hp->indexer_head_dim * fb);
    b->iw = og_fwd_take(c, t * hp->indexer_n_head * fb);
    b->sel = og_fwd_take(c, t * hp->indexer_top_k * sizeof(int32_t));
    b->rl = og_fwd_take(c, t * E * fb);
    b->r_ids = og_fwd_take(c, t * k * sizeof(int32_t));
    b->r_w = og_fwd_take(c, t * k * fb);
    b->hS = og_fwd_take(c, no * hc * N * fb);
    b->hflat = og_fwd_take(c, no * hc * N * fb);
    b->hmix = og_fwd_take(c, no * hc * fb);
    b->hpre = og_fwd_take(c, no * hc * fb);
    b->hx = og_fwd_take(c, no * N * fb);
    b->logits = og_fwd_take(c, no * hp->n_vocab * fb);
    return c->used;
}

static uint64_t scratch_of(const og_ds4_hparams *hp, int64_t n_tok, int64_t n_out) {
    og_fwd_scratch_cut c = {0};
    bufs b;
    return carve(hp, n_tok, n_out, &c, &b);
}

static uint64_t ds4_scratch_bytes(const og_model *m, int64_t n_tok, int64_t n_out) {
    const og_ds4 *d = m->impl;
    return scratch_of(&d->hp, n_tok, n_out);
}

typedef og_fwd_plan plan;

/* Sequence s's state in this call (NULL: no tokens). */
static ds4_seq *seq_of(const plan *p, int s) { return p->st[s]; }

/* One call's host arrays (og_fwd_host's, and the layers at their device copies). */
typedef struct host_arrays {
    og_fwd_host a;
    ds4_layer *dlayers; /* [n_layer] (on_device) */
} host_arrays;

typedef struct host_more {
    uint32_t n_layer;
    host_arrays *ha;
} host_more;

static void host_take_more(og_fwd_scratch_cut *c, void *vx) {
    const host_more *x = vx;
    x->ha->dlayers = og_fwd_take(c, x->n_layer * sizeof *x->ha->dlayers);
}

/* *out = d with every weight the forward pass reads at its device copy when the
 * pass runs on a device with its own memory (f->wt: the cuda device, or the cpu
 * device's copy mode), its layers in dl [n_layer]; d itself otherwise.
 * Errors: OG_ERR_STATE naming a weight without a copy. */
static og_status on_device(const og_fwd *f, const og_ds4 *d, ds4_layer *dl, og_ds4 *out) {
    *out = *d;
    if (!f->wt) return OG_OK;
    out->layers = dl;
    og_status st = og_fwd_weight(f, &d->tok_embd, "token_embd", &out->tok_embd);
    if (!st) st = og_fwd_weight(f, &d->output, "output", &out->output);
    if (!st) st = og_fwd_weight(f, &d->out_hc_fn, "output_hc_fn", &out->out_hc_fn);
#define VEC(o, i, fld) OG_FWD_PTR(st, f, o, i, fld)
    VEC(out, d, out_norm);
    VEC(out, d, out_hc_base);
    VEC(out, d, out_hc_scale);
    for (uint32_t il = 0; il < d->hp.n_layer && !st; il++) {
        const ds4_layer *L = &d->layers[il];
        ds4_layer *o = &dl[il];
        *o = *L;
        const og_fwd_wmap ws[] = {
            {&L->hc_attn_fn, &o->hc_attn_fn, "hc_attn_fn"}, {&L->hc_ffn_fn, &o->hc_ffn_fn, "hc_ffn_fn"},
            {&L->q_a, &o->q_a, "attn_q_a"}, {&L->q_b, &o->q_b, "attn_q_b"}, {&L->kv, &o->kv, "attn_kv"},
            {&L->o_a, &o->o_a, "attn_output_a"}, {&L->o_b, &o->o_b, "attn_output_b"},
            {&L->comp_kv, &o->comp_kv, "attn_compressor_kv"}, {&L->comp_gate, &o->comp_gate, "attn_compressor_gate"},
            {&L->comp_ape, &o->comp_ape, "attn_compressor_ape"}, {&L->idx_q_b, &o->idx_q_b, "indexer_attn_q_b"},
            {&L->idx_proj, &o->idx_proj, "indexer_proj"}, {&L->idx_comp_kv, &o->idx_comp_kv, "indexer_compressor_kv"},
            {&L->idx_comp_gate, &o->idx_comp_gate, "indexer_compressor_gate"},
            {&L->idx_comp_ape, &o->idx_comp_ape, "indexer_compressor_ape"}, {&L->router, &o->router, "ffn_gate_inp"}};
        if (!st) st = og_fwd_weights(f, ws, sizeof ws / sizeof ws[0]);
        VEC(o, L, hc_attn_base);
        VEC(o, L, hc_attn_scale);
        VEC(o, L, hc_ffn_base);
        VEC(o, L, hc_ffn_scale);
        VEC(o, L, attn_norm);
        VEC(o, L, ffn_norm);
        VEC(o, L, q_a_norm);
        VEC(o, L, kv_norm);
        VEC(o, L, sinks);
        VEC(o, L, comp_norm);
        VEC(o, L, idx_comp_norm);
        VEC(o, L, exp_bias);
        VEC(o, L, tid2eid);
    }
#undef VEC
    return st;
}

/* Issues one compressor step (og_compress_op) for the layer: kv and score
 * projections, the APE rows, then the stateful step that emits rows into the
 * sequences' stores. */
static og_status compress_step(og_fwd *f, const og_ds4 *d, const plan *p, const host_arrays *ha, bufs *b,
                               const og_weight *wkv, const og_weight *wgate, const og_weight *ape, const float *norm,
                               uint32_t ratio, uint64_t width, float **states, og_row_store *const *stores,
                               og_qat_kind qat, int64_t qat_n) {
    const int64_t T = p->T, lw = wkv->n_rows;
    og_matmul_job j2[2] = {{wkv, b->x, T, b->ckv, OG_NUMERICS_FORK}, {wgate, b->x, T, b->csc, OG_NUMERICS_FORK}};
    og_status st = og_fwd_mm_rows(f, j2, 2, 0);
    og_get_rows_op ga = {*ape, ha->a.pos_mod, T, b->cape};
    if (!st) st = f->ops->get_rows(f->dev, f->s, &ga, f->err, f->errlen);
    if (!st) st = f->ops->add(f->dev, f->s, b->csc, b->csc, b->cape, T * lw, f->err, f->errlen);
    for (int64_t t = 0; t < T && !st; t++) {
        const int s = ha->a.seq_idx[t];
        const int32_t pp = p->pos[t];
        ha->a.state[t] = states[s];
        ha->a.out[t] = (pp + 1) % (int32_t)ratio ? NULL : og_row_store_row(stores[s], (pp + 1) / (int32_t)ratio - 1, width);
    }
    og_compress_op op = {.n_tok = T, .width = (int64_t)width, .ratio = (int32_t)ratio,
                         .overlap = ratio == OG_DS4_RATIO_CSA, .kv = b->ckv, .score = b->csc, .state = ha->a.state,
                         .pos = p->pos, .out = ha->a.out, .norm = norm, .eps = d->hp.rms_eps, .rope = d->hp.rope_comp,
                         .qat = qat, .qat_n = qat_n, .round_f16 = d->kv_f16};
    if (!st) st = f->ops->compress(f->dev, f->s, &op, f->err, f->errlen);
    return st;
}


static og_status attention(og_fwd *f, const og_ds4 *d, uint32_t il, const plan *p, host_arrays *ha, bufs *b) {
    const og_ds4_hparams *hp = &d->hp;
    const ds4_layer *L = &d->layers[il];
    const int64_t T = p->T, H = hp->n_head, D = hp->head_dim, R = hp->n_rot, HD = H * D, W = hp->n_swa;
    const og_rope *rope = L->ratio ? &hp->rope_comp : &hp->rope_swa;
    /* q = q_b(rmsnorm(q_a x)), each head RMSNorm'd without weight, RoPE on the tail */
    TRY(og_fwd_mm(f, &L->q_a, b->x, T, b->qr));
    TRY(og_fwd_norm(f, b->qr, b->qr, T, hp->q_lora_rank, hp->q_lora_rank, L->q_a_norm, hp->rms_eps));
    TRY(og_fwd_mm(f, &L->q_b, b->qr, T, b->q));
    TRY(og_fwd_norm(f, b->q, b->q, T * H, D, D, NULL, hp->rms_eps));
    og_rope_op rq = {*rope, b->q + (D - R), T, HD, (int32_t)H, D, p->pos};
    TRY(f->ops->rope(f->dev, f->s, &rq, f->err, f->errlen));
    /* kv = rmsnorm(kv x), RoPE on the tail, FP8 rounding of the rest */
    TRY(og_fwd_mm(f, &L->kv, b->x, T, b->kv));
    TRY(og_fwd_norm(f, b->kv, b->kv, T, D, D, L->kv_norm, hp->rms_eps));
    og_rope_op rk = {*rope, b->kv + (D - R), T, D, 1, D, p->pos};
    TRY(f->ops->rope(f->dev, f->s, &rk, f->err, f->errlen));
    if (d->kv_fp8) {
        og_qat_op qo = {{b->kv, D, T, D}, OG_QAT_FP8, D - R, 0};
        TRY(f->ops->qat(f->dev, f->s, &qo, f->err, f->errlen));
    }
    if (d->kv_f16) {
        og_qat_op qo = {{b->kv, D, T, D}, OG_QAT_F16, D, 0};
        TRY(f->ops->qat(f->dev, f->s, &qo, f->err, f->errlen));
    }
    /* the compressors (§4.2.1): rows complete in this call become visible to its later tokens */
    for (int s = 0; s < p->n_seq; s++) {
        const ds4_seq *q = seq_of(p, s); /* NULL: no tokens in this call */
        ha->a.cst[s] = q ? &q->comp[il] : NULL;
        ha->a.kst[s] = q ? &q->ikeys[il] : NULL;
        ha->a.sts[s] = q ? q->cstate[il] : NULL;
        ha->a.ists[s] = q ? q->istate[il] : NULL;
    }
    og_kv_view cv = {0};
    const int32_t *sel = NULL;
    if (L->ratio) {
        TRY(compress_step(f, d, p, ha, b, &L->comp_kv, &L->comp_gate, &L->comp_ape, L->comp_norm, L->ratio,
                          (uint64_t)D, ha->a.sts, ha->a.cst, d->kv_fp8 ? OG_QAT_FP8 : OG_QAT_NONE, D - R));
        cv = og_fwd_store_view(p, ha->a.seq_idx, ha->a.blocks, ha->a.cst, (uint64_t)D, L->ratio, ha->a.first_of,
                               ha->a.cfirst, ha->a.ncomp);
    }
    if (L->ratio == OG_DS4_RATIO_CSA) {
        const int64_t ID = hp->indexer_head_dim, IH = hp->indexer_n_head;
        TRY(compress_step(f, d, p, ha, b, &L->idx_comp_kv, &L->idx_comp_gate, &L->idx_comp_ape, L->idx_comp_norm,
                          L->ratio, (uint64_t)ID, ha->a.ists, ha->a.kst,
                          d->indexer_fp4 ? OG_QAT_FP4_HADAMARD : OG_QAT_HADAMARD, ID));
        bool any = false;
        for (int64_t t = 0; t < T; t++) any |= ha->a.ncomp[t] > (int32_t)hp->indexer_top_k;
        if (any) { /* the lightning indexer (§4.2.2) picks top_k of the compressed rows */
            og_kv_view keys = og_fwd_store_view(p, ha->a.seq_idx, ha->a.kblocks, ha->a.kst, (uint64_t)ID, L->ratio,
                                                ha->a.first_of, ha->a.kfirst, ha->a.nkeys);
            og_rope_op ri = {hp->rope_comp, b->iq + (ID - R), T, IH * ID, (int32_t)IH, ID, p->pos};
            og_qat_op qi = {{b->iq, ID, T * IH, ID}, d->indexer_fp4 ? OG_QAT_FP4_HADAMARD : OG_QAT_HADAMARD, ID, 0};
            og_indexer_op io = {.n_tok = T, .n_head = IH, .d_head = ID, .top_k = (int32_t)hp->indexer_top_k,
                                .q = b->iq, .w = b->iw, .keys = keys, .key_first = ha->a.kfirst, .n_keys = ha->a.nkeys,
                                .sel = b->sel, .canonical = p->canon};
            TRY(og_fwd_mm(f, &L->idx_q_b, b->qr, T, b->iq));
            TRY(f->ops->rope(f->dev, f->s, &ri, f->err, f->errlen));
            TRY(f->ops->qat(f->dev, f->s, &qi, f->err, f->errlen));
            TRY(og_fwd_mm(f, &L->idx_proj, b->x, T, b->iw));
            TRY(f->ops->scale(f->dev, f->s, b->iw, b->iw, T * IH, (float)(1.0 / sqrt((double)(ID * IH))), f->err,
                              f->errlen));
            TRY(f->ops->indexer(f->dev, f->s, &io, f->err, f->errlen));
            sel = b->sel;
        }
    }
    /* the raw rows each token sees: positions (p - W, p], this call's rows from kv, older ones from the ring */
    for (int s = 0; s < p->n_seq; s++) ha->a.ring[s] = seq_of(p, s) ? seq_of(p, s)->raw[il] : NULL;
    og_fwd_window_rows(p, ha->a.seq_idx, ha->a.ring, (int32_t)W, D, b->kv, ha->a.rows, ha->a.row_off);
    og_sink_attn_op at = {.n_tok = T, .n_head = H, .d_head = D, .kq_scale = (float)(1.0 / sqrt((double)D)),
                          .q = b->q, .o = b->o, .sinks = L->sinks, .rows = ha->a.rows, .row_off = ha->a.row_off,
                          .comp = cv, .comp_first = ha->a.cfirst, .n_comp = ha->a.ncomp, .sel = sel,
                          .top_k = (int32_t)hp->indexer_top_k, .canonical = p->canon};
    TRY(f->ops->sink_attention(f->dev, f->s, &at, f->err, f->errlen));
    /* then this call's rows into the rings (in batch order: a sequence's last W stay) */
    TRY(og_fwd_ring_store(f, p, ha->a.ring, ha->a.seq_idx, ha->a.pos_mod, (int32_t)W, D, b->kv));
    /* inverse RoPE on each head's tail at the query position (§4.1.5) */
    og_rope_op ro = {*rope, b->o + (D - R), T, HD, (int32_t)H, D, ha->a.neg_pos};
    TRY(f->ops->rope(f->dev, f->s, &ro, f->err, f->errlen));
    /* grouped output (§4.1.5) */
    return og_fwd_grouped_output(f, &L->o_a, &L->o_b, T, HD, hp->o_group_count, hp->o_lora_rank, b->o, b->og, b->low,
                                 b->lowt, ha->a.jobs, ha->a.wts, b->y);
}

/* mHC mixes of the streams with fn/scale/base into b->pre/post/comb, and the
 * collapsed, normalized sublayer input into b->x (§4.1.3). */
static og_status hc_pre(og_fwd *f, const og_ds4_hparams *hp, int64_t T, bufs *b, const og_weight *fn, const float *scale,
                        const float *base, const float *norm) {
    const int64_t hcN = (int64_t)hp->hc_count * hp->n_embd;
    TRY(og_fwd_norm(f, b->flat, b->S, T, hcN, hcN, NULL, hp->rms_eps));
    TRY(og_fwd_mm(f, fn, b->flat, T, b->mix));
    og_hc_mix_op mo = {b->mix, T, (int32_t)hp->hc_count, false, scale, base, hp->hc_eps,
                       (int32_t)hp->hc_sinkhorn_iters, b->pre, b->post, b->comb};
    TRY(f->ops->hc_mix(f->dev, f->s, &mo, f->err, f->errlen));
    og_hc_op co = {T, hp->n_embd, (int32_t)hp->hc_count, b->S, b->x, b->pre, NULL};
    TRY(f->ops->hc_collapse(f->dev, f->s, &co, f->err, f->errlen));
    return og_fwd_norm(f, b->x, b->x, T, hp->n_embd, hp->n_embd, norm, hp->rms_eps);
}

static og_status hc_post(og_fwd *f, const og_ds4_hparams *hp, int64_t T, bufs *b) {
    og_hc_op eo = {T, hp->n_embd, (int32_t)hp->hc_count, b->S, b->y, b->post, b->comb};
    return f->ops->hc_expand(f->dev, f->s, &eo, f->err, f->errlen);
}

/* The MoE FFN (§4.1.6) of b->x into b->y: router on the device (hash
 * routing on the hash layers), experts through the dispatcher. */
static og_status moe(og_fwd *f, const og_model *m, const og_ds4 *d, const og_run_ctx *rc, const og_batch *batch, uint32_t il,
                     bufs *b, host_arrays *ha, bool *failed_here) {
    const og_ds4_hparams *hp = &d->hp;
    const ds4_layer *L = &d->layers[il];
    og_router_op ro = {b->rl, L->exp_bias, batch->n_tok, (int32_t)hp->n_expert, (int32_t)hp->n_expert_used, 3, 1, 1,
                       hp->expert_weights_norm, hp->expert_weights_scale, b->r_ids, b->r_w, L->tid2eid,
                       L->tid2eid ? hp->n_vocab : 0, batch->tokens, 0};
    const og_fwd_moe_host h = {ha->a.h_ids, ha->a.h_w, ha->a.hx, ha->a.hy, ha->a.routes};
    return og_fwd_moe(f, m, rc, batch, il, &L->router, &ro, b->x, b->y, hp->n_embd, &h, failed_here);
}

/* The output head (§4.2 step 3) for the wanted tokens: hc head mixes, collapse,
 * output_norm, logits to the host. */
static og_status head(og_fwd *f, const og_ds4 *d, const og_batch *batch, int64_t n_out, bufs *b, float *logits) {
    const og_ds4_hparams *hp = &d->hp;
    const int64_t hcN = (int64_t)hp->hc_count * hp->n_embd;
    TRY(og_fwd_gather_wanted(f, batch, b->hS, b->S, hcN)); /* the wanted rows of S */
    TRY(og_fwd_norm(f, b->hflat, b->hS, n_out, hcN, hcN, NULL, hp->rms_eps));
    TRY(og_fwd_mm(f, &d->out_hc_fn, b->hflat, n_out, b->hmix));
    og_hc_mix_op mo = {b->hmix, n_out, (int32_t)hp->hc_count, true, d->out_hc_scale, d->out_hc_base, hp->hc_eps, 1,
                       b->hpre, NULL, NULL};
    TRY(f->ops->hc_mix(f->dev, f->s, &mo, f->err, f->errlen));
    og_hc_op co = {n_out, hp->n_embd, (int32_t)hp->hc_count, b->hS, b->hx, b->hpre, NULL};
    TRY(f->ops->hc_collapse(f->dev, f->s, &co, f->err, f->errlen));
    TRY(og_fwd_norm(f, b->hx, b->hx, n_out, hp->n_embd, hp->n_embd, d->out_norm, hp->rms_eps));
    TRY(og_fwd_mm(f, &d->output, b->hx, n_out, b->logits));
    return f->ops->copy_to_host(f->dev, f->s, logits, b->logits, (uint64_t)n_out * hp->n_vocab * sizeof(float), f->err,
                                f->errlen);
}

/* Positions, per-sequence token lists, canonical marks, states and stores
 * grown for this call. Errors: OG_ERR_INVALID_ARG (a token or sequence out of
 * range, a state on another device), OG_ERR_NOMEM. */
static og_status make_plan(const og_ds4 *d, const og_run_ctx *rc, og_kv *const *kvs, int n_seq, const og_batch *batch,
                           og_numerics nm, plan *p, char *err, size_t errlen) {
    const og_ds4_hparams *hp = &d->hp;
    TRY(og_fwd_plan_make(p, kvs, n_seq, batch, hp->n_vocab, nm, "deepseek4", err, errlen));
    for (int s = 0; s < n_seq; s++) {
        og_kv *kv = kvs[s];
        /* a sequence without tokens in this call (a choice waiting for its prompt's
         * fork) gets no state from it: p->st[s] stays NULL */
        if (!kv->arch && p->seq_off[s + 1] == p->seq_off[s]) continue;
        if (!kv->arch) {
            ds4_seq *q;
            const int32_t rows = ring_rows(hp, kv->n_ctx);
            if (seq_create(d, rc->dev, rows, &q)) {
                uint64_t fixed;
                double per_tok;
                kv_elems(hp, &fixed, &per_tok);
                fixed -= (uint64_t)hp->n_layer * (hp->n_swa - (uint32_t)rows) * hp->head_dim;
                return og_fail(err, errlen, OG_ERR_NOMEM, "no memory for a new sequence's state (%.1f MiB: %u layers' "
                               "windows of %d positions and compressor states)", (double)fixed * sizeof(float) / 1048576.0,
                               hp->n_layer, rows);
            }
            kv->arch = q;
            kv->arch_free = seq_free;
            kv->dev = rc->dev;
        }
        ds4_seq *q = kv->arch;
        if (q->dev != rc->dev || kv->arch_free != seq_free)
            return og_fail(err, errlen, OG_ERR_INVALID_ARG, "sequence %d's state is on another device", s);
        if (q->n_ring < (int32_t)hp->n_swa && p->next[s] > q->n_ring)
            return og_fail(err, errlen, OG_ERR_RANGE, "sequence %d would hold %d positions, past its context of %d "
                           "(og_kv.n_ctx: its window rings hold %d rows)", s, p->next[s], q->n_ring, q->n_ring);
        p->st[s] = q;
        for (uint32_t il = 0; il < hp->n_layer; il++) {
            const uint32_t r = hp->compress_ratio[il];
            if (!r) continue;
            const int64_t rows = p->next[s] / (int64_t)r;
            if (og_row_store_reserve(q->dev, &q->comp[il], rows, hp->head_dim) ||
                (r == OG_DS4_RATIO_CSA && og_row_store_reserve(q->dev, &q->ikeys[il], rows, hp->indexer_head_dim)))
                return og_fail(err, errlen, OG_ERR_NOMEM, "no memory for sequence %d's compressed rows", s);
        }
    }
    return OG_OK;
}

/* og_fwd_store_blocks_bound's: the most blocks a sequence's stores hold. */
static int64_t blocks_held(const og_kv *kv) {
    const ds4_seq *q = kv->arch_free == seq_free ? kv->arch : NULL;
    return q ? og_row_stores_max_blocks(q->comp, q->ikeys, q->n_layer) : 0;
}

/* og_model_forward_batch for deepseek4 (§4.2): positions and the rows each
 * token sees on the host, everything else as device ops on rc->dev / rc->stream
 * (or a host device). Errors: OG_ERR_INVALID_ARG (a token or sequence out of
 * range, no dispatcher, a state of another device), OG_ERR_RANGE (a sequence
 * past its og_kv.n_ctx when that is below the window), OG_ERR_UNSUPPORTED (a device
 * without deepseek4's ops), OG_ERR_STATE (a weight without a device copy), OG_ERR_NOMEM, the ops' and
 * the dispatcher's. On error no n_pos changes, but a sequence's rings,
 * compressor states and stores may hold part of the call: drop (og_kv_free)
 * such a sequence rather than run it on. */
static og_status ds4_forward_batch(const og_model *m, const og_run_ctx *rc, og_kv *const *kvs, int n_seq,
                                   const og_batch *batch, float *logits, char *err, size_t errlen) {
    const og_ds4 *d = m->impl; /* then its weights on the device (on_device) */
    const og_ds4_hparams *hp = &d->hp;
    const int64_t T = batch->n_tok;
    og_status st = og_fwd_call_check(rc, T, n_seq, err, errlen);
    if (st) return st;
    /* the host arrays: one buffer carved for the call (og_fwd_host_get: the run
     * context's, kept and grown from call to call) */
    plan p;
    host_arrays ha;
    const og_fwd_host_shape sh = {T, og_fwd_store_blocks_bound(kvs, n_seq, T, blocks_held), n_seq, hp->n_swa,
                                  hp->n_expert_used, hp->n_embd, hp->o_group_count, hp->o_group_count};
    void *hown = NULL; /* this call's own host buffer (no reusable scratch), freed below */
    host_more hm = {hp->n_layer, &ha};
    if ((st = og_fwd_host_carve(rc, &sh, &p, &ha.a, host_take_more, &hm, &hown, "deepseek4 forward pass", err, errlen)))
        return st;
    st = make_plan(d, rc, kvs, n_seq, batch, rc->host_numerics, &p, err, errlen);
    og_fwd fw = {.nm = rc->host_numerics, .exact = batch->exact, .err = err, .errlen = errlen};
    og_device *own_dev = NULL;
    if (!st) st = og_fwd_begin(&fw, rc, batch->exact, &own_dev, err, errlen);
    if (!st) {
        fw.ops = fw.dev->ops;
        if (!fw.ops->hc_mix || !fw.ops->hc_collapse || !fw.ops->hc_expand || !fw.ops->qat || !fw.ops->compress ||
            !fw.ops->indexer || !fw.ops->sink_attention || !fw.ops->matmul)
            st = og_fail(err, errlen, OG_ERR_UNSUPPORTED, "the %s device has no deepseek4 ops yet", fw.ops->name);
    }
    og_ds4 dd = *d; /* the weights where the device reads them (d's own on a host device) */
    if (!st) st = on_device(&fw, d, ha.dlayers, &dd);
    d = &dd;
    int64_t n_out = 0;
    for (int64_t t = 0; t < T; t++) n_out += batch->logits[t];
    /* device scratch: the reusable one (replaced once by a larger one), or this call's own */
    void *dbase = NULL;
    bufs b = {0};
    if (!st) {
        og_fwd_scratch_cut c0 = {0};
        const uint64_t need = carve(hp, T, n_out, &c0, &b);
        og_fwd_scratch_cut cut = {0};
        st = og_fwd_scratch_get(m, rc, &fw, need, T, n_out, &cut, &dbase);
        if (!st) carve(hp, T, n_out, &cut, &b);
    }
    bool failed_here = st != OG_OK; /* err already says why */
    if (!st) {
        for (int64_t t = 0; t < T; t++) {
            ha.a.seq_idx[t] = batch->seq[t];
            ha.a.neg_pos[t] = -p.pos[t];
        }
    }
    /* embeddings, copied to every stream (§4.2 step 1) */
    const int64_t N = hp->n_embd, hc = hp->hc_count;
    if (!st) {
        og_get_rows_op g = {d->tok_embd, batch->tokens, T, b.x};
        og_copy_op cp = {b.S, b.x, (uint64_t)N * sizeof(float), (uint64_t)T, (uint64_t)hc,
                         (uint64_t)(hc * N) * sizeof(float), (uint64_t)N * sizeof(float), (uint64_t)N * sizeof(float), 0};
        if (!(st = fw.ops->get_rows(fw.dev, fw.s, &g, err, errlen))) st = fw.ops->copy(fw.dev, fw.s, &cp, err, errlen);
    }
    for (uint32_t il = 0; il < hp->n_layer && !st; il++) {
        const ds4_layer *L = &d->layers[il];
        for (int64_t t = 0; t < T; t++) ha.a.pos_mod[t] = L->ratio ? p.pos[t] % (int32_t)L->ratio : 0;
        if ((st = hc_pre(&fw, hp, T, &b, &L->hc_attn_fn, L->hc_attn_scale, L->hc_attn_base, L->attn_norm)) ||
            (st = attention(&fw, d, il, &p, &ha, &b)) || (st = hc_post(&fw, hp, T, &b)))
            break;
        if ((st = hc_pre(&fw, hp, T, &b, &L->hc_ffn_fn, L->hc_ffn_scale, L->hc_ffn_base, L->ffn_norm)) ||
            (st = moe(&fw, m, d, rc, batch, il, &b, &ha, &failed_here)) || (st = hc_post(&fw, hp, T, &b)))
            break;
    }
    if (!st && n_out) st = head(&fw, d, batch, n_out, &b, logits);
    if (fw.ops) st = og_fwd_drain(&fw, st); /* every op done before the buffers go (also after an error) */
    if (dbase) fw.ops->free(fw.dev, dbase);
    og_device_destroy(own_dev);
    if (!st)
        for (int s = 0; s < n_seq; s++) kvs[s]->n_pos = p.next[s];
    free(hown);
    return og_fwd_failure(st, failed_here, "deepseek4 forward pass", err, errlen);
}

const og_arch og_arch_deepseek4 = {
    .name = "deepseek4",
    .describe = ds4_describe,
    .load = ds4_load,
    .free_impl = ds4_free_impl,
    .role = og_ds4_role,
    .tensors = og_ds4_arch_tensors,
    .n_tensors = OG_DS4_N_TENSOR,
    .scratch_bytes = ds4_scratch_bytes,
    .forward_batch = ds4_forward_batch,
    .set_option = ds4_set_option,
    .state_fork = ds4_state_fork,
    .state_walk = ds4_state_walk,
    .state_new = ds4_state_new,
};
