/* deepseek41 (DeepSeek V4.1 Flash): describe (og_model_info from the header:
 * the MoE layout, CSA2's cache terms, the host-only Engram tables) and the
 * weight binding by the one tensor-name table (deepseek41_table.c), in any of
 * the three dialects (shared/spec/deepseek4.md §3.2, §4.3). The forward pass
 * comes with branch v41fwd: until then forward_batch says so. */
#include "deepseek41.h"
#include "og_arch.h"

#include <stdlib.h>
#include <string.h>

typedef struct ds41_layer {
    og_weight hc_attn_fn, hc_ffn_fn;      /* [hc N -> (2 + hc) hc] */
    const float *hc_attn_base, *hc_attn_scale, *hc_ffn_base, *hc_ffn_scale; /* [(2 + hc) hc], [3] */
    const float *attn_norm, *ffn_norm;    /* [N] */
    og_weight q_a, q_b;                   /* [N -> q_rank], [q_rank -> H D] */
    const float *q_a_norm;                /* [q_rank] */
    og_weight kv;                         /* [N -> D] */
    const float *kv_norm;                 /* [D] */
    const float *sinks;                   /* [H] */
    og_weight o_a, o_b;                   /* [H D / G -> G o_rank], [G o_rank -> N] */
    og_weight comp_kv, comp_gate;         /* kv sources: [N -> D]; the gate only at ratio 2 */
    const float *comp_norm;               /* [D] */
    og_weight idx_k;                      /* key owners: [D -> ID] from the normalized latent */
    const float *idx_k_norm;              /* [ID] */
    og_weight idx_q_b, idx_proj;          /* index sources: [q_rank -> IH ID], [N -> IH] */
    og_weight engram_embd;                /* Engram layers: [ED, rows] (antirez: I8 [ED + ED/32, rows]); host rows */
    og_weight engram_wkv;                 /* [EB ED -> (hc + 1) N] */
    const float *engram_q, *engram_k;     /* [hc][N] per-copy gate weights (F32) */
    og_weight router;                     /* [N -> E] */
    const float *exp_bias;                /* [E] */
} ds41_layer;

typedef struct og_ds41 {
    og_ds41_hparams hp;
    og_weight tok_embd;                   /* [N, V] (host-only: rows gathered on the host) */
    const float *out_norm;                /* [N] */
    og_weight output;                     /* [N -> V] */
    ds41_layer *layers;                   /* [n_layer] */
    og_moe_weights *moe;                  /* [n_layer], m->info.moe */
} og_ds41;

#define TRY(x) do { og_status st_ = (x); if (st_) return st_; } while (0)

/* Binds kind id of layer il (found and shape-checked by the table). The
 * antirez Engram rows (I8: FP8 with scales, no kernels) are bound as raw rows. */
static og_status bind(const og_gguf *g, const og_ds41_hparams *hp, og_ds41_tensor_id id, int il, og_weight *w,
                      char *err, size_t errlen) {
    const og_gguf_tensor *t;
    memset(w, 0, sizeof *w);
    TRY(og_ds41_tensor_find(g, hp, id, il, &t, err, errlen));
    if (!t) return OG_OK;
    if (t->type != OG_TYPE_I8) return og_arch_bind_weight(t, w, err, errlen);
    if (!t->data) return og_fail(err, errlen, OG_ERR_INVALID_ARG, "tensor %s has no data (a header-only open)", t->name);
    *w = (og_weight){t->type, t->data, t->ne[0], t->ne[1], (size_t)t->ne[0]};
    return OG_OK;
}

static og_status bind_f32(const og_gguf *g, const og_ds41_hparams *hp, og_ds41_tensor_id id, int il, const float **out,
                          char *err, size_t errlen) {
    og_weight w;
    TRY(bind(g, hp, id, il, &w, err, errlen)); /* the table checked F32 */
    *out = w.data;
    return OG_OK;
}

static void fill_info(const og_gguf *g, const og_ds41_hparams *hp, og_model_info *info) {
    memset(info, 0, sizeof *info);
    info->arch = "deepseek41";
    info->n_layer = hp->n_layer;
    info->n_embd = hp->n_embd;
    info->n_vocab = hp->n_vocab;
    info->n_ctx_train = hp->n_ctx_train;
    info->n_head = hp->n_head;
    info->n_expert = hp->n_expert;
    info->n_expert_used = hp->n_expert_used;
    info->n_expert_shared = hp->n_expert_shared;
    info->n_ff_exp = hp->n_ff_exp;
    og_ds41_kv_elems(hp, &info->kv_elems_fixed, &info->kv_elems_per_token);
    info->kv_elem_bytes = sizeof(float); /* F32 rows, as deepseek4's (decision 2: no KV rounding by default) */
    info->kv_paged = false;               /* ring windows and compressor state behind og_kv.arch */
    info->kv_fork = false;                /* until the forward (v41fwd) brings its state_fork */
    /* activations per batch token: the hc N streams (x3 for mixes and
     * expand), H D queries and outputs, G o_rank, the Engram gather (EB ED)
     * and its projection ((hc + 1) N), the experts' 2 k F; per output row the
     * logits (f32) */
    const uint64_t N = hp->n_embd, per_tok =
        4ull * (3ull * hp->hc_count * N + 2ull * hp->n_head * hp->head_dim + (uint64_t)hp->o_group_count * hp->o_lora_rank +
                (uint64_t)hp->engram_n_bucket * hp->engram_head_dim + (hp->hc_count + 1ull) * N +
                2ull * hp->n_expert_used * hp->n_ff_exp + hp->n_expert + 8ull * N);
    info->fwd_bytes_per_token = per_tok;
    info->fwd_bytes_per_output = 4ull * hp->n_vocab;
    info->host_only_bytes = og_ds41_host_only_bytes(g, hp);
}

static og_status ds41_describe(const og_gguf *g, const og_logger *lg, og_model_info *info, char *err, size_t errlen) {
    og_ds41_hparams *hp = malloc(sizeof *hp); /* ~40 KB of roles and Engram constants: not on the stack */
    if (!hp) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    og_status st = og_ds41_hparams_read(g, lg, hp, err, errlen);
    if (!st) st = og_ds41_tensors_check(g, hp, err, errlen);
    if (!st) fill_info(g, hp, info);
    free(hp);
    return st;
}

static void ds41_free_impl(og_model *m) {
    og_ds41 *d = m->impl;
    if (!d) return;
    free(d->layers);
    free(d->moe);
    free(d);
    m->impl = NULL;
}

static og_status load_layer(const og_gguf *g, const og_ds41_hparams *hp, int il, ds41_layer *L, og_moe_weights *mw,
                            char *err, size_t errlen) {
    TRY(bind(g, hp, OG_DS41_HC_ATTN_FN, il, &L->hc_attn_fn, err, errlen));
    TRY(bind_f32(g, hp, OG_DS41_HC_ATTN_BASE, il, &L->hc_attn_base, err, errlen));
    TRY(bind_f32(g, hp, OG_DS41_HC_ATTN_SCALE, il, &L->hc_attn_scale, err, errlen));
    TRY(bind(g, hp, OG_DS41_HC_FFN_FN, il, &L->hc_ffn_fn, err, errlen));
    TRY(bind_f32(g, hp, OG_DS41_HC_FFN_BASE, il, &L->hc_ffn_base, err, errlen));
    TRY(bind_f32(g, hp, OG_DS41_HC_FFN_SCALE, il, &L->hc_ffn_scale, err, errlen));
    TRY(bind_f32(g, hp, OG_DS41_ATTN_NORM, il, &L->attn_norm, err, errlen));
    TRY(bind_f32(g, hp, OG_DS41_FFN_NORM, il, &L->ffn_norm, err, errlen));
    TRY(bind(g, hp, OG_DS41_ATTN_Q_A, il, &L->q_a, err, errlen));
    TRY(bind_f32(g, hp, OG_DS41_ATTN_Q_A_NORM, il, &L->q_a_norm, err, errlen));
    TRY(bind(g, hp, OG_DS41_ATTN_Q_B, il, &L->q_b, err, errlen));
    TRY(bind(g, hp, OG_DS41_ATTN_KV, il, &L->kv, err, errlen));
    TRY(bind_f32(g, hp, OG_DS41_ATTN_KV_A_NORM, il, &L->kv_norm, err, errlen));
    TRY(bind_f32(g, hp, OG_DS41_ATTN_SINKS, il, &L->sinks, err, errlen));
    TRY(bind(g, hp, OG_DS41_ATTN_OUTPUT_A, il, &L->o_a, err, errlen));
    TRY(bind(g, hp, OG_DS41_ATTN_OUTPUT_B, il, &L->o_b, err, errlen));
    const og_ds41_layer *R = &hp->layer[il];
    if (R->is_kv_source) {
        TRY(bind(g, hp, OG_DS41_ATTN_COMP_KV, il, &L->comp_kv, err, errlen));
        if (R->ratio > 1) TRY(bind(g, hp, OG_DS41_ATTN_COMP_GATE, il, &L->comp_gate, err, errlen));
        TRY(bind_f32(g, hp, OG_DS41_ATTN_COMP_NORM, il, &L->comp_norm, err, errlen));
    }
    if (R->is_key_owner) {
        TRY(bind(g, hp, OG_DS41_INDEXER_K, il, &L->idx_k, err, errlen));
        TRY(bind_f32(g, hp, OG_DS41_INDEXER_K_NORM, il, &L->idx_k_norm, err, errlen));
    }
    if (R->is_index_source) {
        TRY(bind(g, hp, OG_DS41_INDEXER_Q_B, il, &L->idx_q_b, err, errlen));
        TRY(bind(g, hp, OG_DS41_INDEXER_PROJ, il, &L->idx_proj, err, errlen));
    }
    if (R->has_engram) {
        TRY(bind(g, hp, OG_DS41_ENGRAM_EMBD, il, &L->engram_embd, err, errlen));
        TRY(bind(g, hp, OG_DS41_ENGRAM_WKV, il, &L->engram_wkv, err, errlen));
        TRY(bind_f32(g, hp, OG_DS41_ENGRAM_Q, il, &L->engram_q, err, errlen));
        TRY(bind_f32(g, hp, OG_DS41_ENGRAM_K, il, &L->engram_k, err, errlen));
    }
    TRY(bind(g, hp, OG_DS41_FFN_GATE_INP, il, &L->router, err, errlen));
    TRY(bind_f32(g, hp, OG_DS41_EXP_PROBS_B, il, &L->exp_bias, err, errlen));
    mw->moe = true;
    TRY(bind(g, hp, OG_DS41_FFN_GATE_EXPS, il, &mw->gate_exps, err, errlen));
    TRY(bind(g, hp, OG_DS41_FFN_UP_EXPS, il, &mw->up_exps, err, errlen));
    TRY(bind(g, hp, OG_DS41_FFN_DOWN_EXPS, il, &mw->down_exps, err, errlen));
    if (hp->n_expert_shared) {
        TRY(bind(g, hp, OG_DS41_FFN_GATE_SHEXP, il, &mw->gate_sh, err, errlen));
        TRY(bind(g, hp, OG_DS41_FFN_UP_SHEXP, il, &mw->up_sh, err, errlen));
        TRY(bind(g, hp, OG_DS41_FFN_DOWN_SHEXP, il, &mw->down_sh, err, errlen));
    }
    mw->swiglu_clamp = hp->swiglu_clamp_exp[il];
    if (hp->swiglu_clamp_shexp[il] != hp->swiglu_clamp_exp[il])
        return og_fail(err, errlen, OG_ERR_UNSUPPORTED, "layer %d: swiglu_clamp_shexp %g differs from swiglu_clamp_exp %g "
                       "(onegpu applies one clamp to both, as V4.1 has)", il, (double)hp->swiglu_clamp_shexp[il],
                       (double)hp->swiglu_clamp_exp[il]);
    return OG_OK;
}

static og_status ds41_load(og_model *m, char *err, size_t errlen) {
    og_ds41 *d = calloc(1, sizeof *d);
    if (!d) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    m->impl = d;
    og_ds41_hparams *hp = &d->hp;
    const og_gguf *g = m->gguf;
    og_status st = og_ds41_hparams_read(g, &m->log, hp, err, errlen);
    if (!st) st = og_ds41_tensors_check(g, hp, err, errlen);
    if (!st) st = bind(g, hp, OG_DS41_TOKEN_EMBD, -1, &d->tok_embd, err, errlen);
    if (!st) st = bind_f32(g, hp, OG_DS41_OUTPUT_NORM, -1, &d->out_norm, err, errlen);
    if (!st) st = bind(g, hp, OG_DS41_OUTPUT, -1, &d->output, err, errlen);
    if (!st) {
        d->layers = calloc(hp->n_layer, sizeof *d->layers);
        d->moe = calloc(hp->n_layer, sizeof *d->moe);
        if (!d->layers || !d->moe) st = og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    }
    for (uint32_t il = 0; il < hp->n_layer && !st; il++)
        st = load_layer(g, hp, (int)il, &d->layers[il], &d->moe[il], err, errlen);
    if (st) {
        ds41_free_impl(m);
        return st;
    }
    fill_info(g, hp, &m->info);
    m->info.moe = d->moe;
    og_log(&m->log, OG_LOG_INFO, "deepseek41 (%s dialect): %u layers, window %u, indexer top-%u, candidate source %d, "
           "%u Engram layers", og_ds41_dialect_name(hp->dialect), hp->n_layer, hp->n_swa, hp->indexer_top_k,
           hp->candidate_source, hp->n_engram_layer);
    return OG_OK;
}

static uint64_t ds41_scratch_bytes(const og_model *m, int64_t n_tok, int64_t n_out) {
    return (uint64_t)n_tok * m->info.fwd_bytes_per_token + (uint64_t)n_out * m->info.fwd_bytes_per_output;
}

static og_status ds41_forward_batch(const og_model *m, const og_run_ctx *rc, og_kv *const *kvs, int n_seq,
                                    const og_batch *batch, float *logits, char *err, size_t errlen) {
    (void)m, (void)rc, (void)kvs, (void)n_seq, (void)batch, (void)logits;
    return og_fail(err, errlen, OG_ERR_UNSUPPORTED, "deepseek41: the forward pass is not built yet (it comes with the "
                   "v41fwd branch); onegpu gguf, plan and make-model work on these files");
}

const og_arch og_arch_deepseek41 = {
    .name = "deepseek41",
    .describe = ds41_describe,
    .load = ds41_load,
    .free_impl = ds41_free_impl,
    .role = og_ds41_role,
    .scratch_bytes = ds41_scratch_bytes,
    .forward_batch = ds41_forward_batch,
};
