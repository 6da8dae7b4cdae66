/* deepseek41 (DeepSeek V4.1 Flash): describe (og_model_info from the header:
 * the MoE layout, CSA2's cache terms, the host-only Engram tables) and the
 * weight binding by the one tensor-name table (deepseek41_table.c), in any of
 * the three dialects (shared/spec/deepseek4.md §3.2, §4.3). The forward pass
 * comes with branch v41fwd: until then forward_batch says so. */
#include "deepseek41.h"
#include "fwd_ops.h"
#include "og_arch.h"

#include <math.h>
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
    /* The QAT options (og_model_set_option; decision 2 of the V4.1 brief,
     * §6.1 unverified: all off by default, plain f32 values): kv_fp8 the
     * window rows' FP8 E4M3 round trip (blocks of 32, the non-RoPE dims as
     * V4's), kv_fp4 the compressed rows' FP4 E2M1 with an E4M3 scale per 16
     * channels after RoPE, indexer_fp4 the indexer's queries and keys FP4
     * E2M1 in blocks of 32 (no Hadamard rotation). */
    bool kv_fp8, kv_fp4, indexer_fp4;
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

static uint64_t scratch_of(const og_ds41_hparams *hp, int64_t n_tok, int64_t n_out);

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
    info->kv_fork = true;                 /* ds41_state_fork */
    info->kv_snapshot = true;             /* ds41_state_walk */
    /* one token / one row: each piece's alignment rounding at 1 bounds it at n */
    info->fwd_bytes_per_token = scratch_of(hp, 1, 0);
    info->fwd_bytes_per_output = scratch_of(hp, 0, 1);
    info->host_only_bytes = og_ds41_host_only_bytes(g, hp);
    info->host_only_what = "Engram tables and token embeddings";
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
    _Static_assert(OG_DS41_FFN_DOWN_SHEXP == OG_DS41_FFN_GATE_EXPS + 5, "the six expert kinds in gate, up, down order");
    const og_gguf_tensor *t[6] = {NULL};
    for (int i = 0; i < (hp->n_expert_shared ? 6 : 3); i++)
        TRY(og_ds41_tensor_find(g, hp, (og_ds41_tensor_id)(OG_DS41_FFN_GATE_EXPS + i), il, &t[i], err, errlen));
    return og_arch_bind_moe(t, t + 3, hp->swiglu_clamp_exp[il], hp->swiglu_clamp_shexp[il], il, mw, err, errlen);
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

static og_status ds41_set_option(og_model *m, const char *name, const char *value, char *err, size_t errlen) {
    og_ds41 *d = m->impl;
    static const char *const names[] = {"kv-fp8", "kv-fp4", "indexer-fp4"};
    bool *flags[] = {&d->kv_fp8, &d->kv_fp4, &d->indexer_fp4};
    for (int i = 0; i < 3; i++) {
        if (strcmp(name, names[i])) continue;
        if (strcmp(value, "on") && strcmp(value, "off"))
            return og_fail(err, errlen, OG_ERR_INVALID_ARG, "deepseek41 option %s takes on or off, not '%s'", name, value);
        *flags[i] = !strcmp(value, "on");
        return OG_OK;
    }
    return og_fail(err, errlen, OG_ERR_INVALID_ARG, "deepseek41 has no option '%s' (it has: kv-fp8, kv-fp4, indexer-fp4)",
                   name);
}

/* ---- Engram rows on the host (§4.3.2) ------------------------------------- */

og_status og_ds41_engram_rows(const og_ds41_hparams *hp, int layer, const int32_t *ctx_tokens, uint64_t *rows) {
    if (layer < 0 || (uint32_t)layer >= hp->n_layer || !hp->layer[layer].has_engram) return OG_ERR_INVALID_ARG;
    const int slot = hp->layer[layer].engram_slot;
    const uint32_t n_gram = hp->engram_max_ngram, EH = hp->engram_n_head;
    const uint32_t pad = og_ds41_token_map(hp, hp->engram_pad_id);
    if (pad == UINT32_MAX) return OG_ERR_INVALID_ARG;
    uint64_t h = 0;
    for (uint32_t s = 0; s < n_gram; s++) {
        const int32_t tok = ctx_tokens[s];
        const uint32_t c = tok < 0 ? pad : og_ds41_token_map(hp, (uint32_t)tok);
        if (c == UINT32_MAX) return OG_ERR_INVALID_ARG;
        h ^= (uint64_t)c * hp->engram_mult[slot][s]; /* h_0 = c_0 m_0; h_s = h_{s-1} XOR c_s m_s */
        if (!s) continue;
        for (uint32_t k = 0; k < EH; k++) {
            const uint32_t b = (s - 1) * EH + k;
            rows[b] = h % hp->engram_prime[slot][b] + hp->engram_offset[slot][b];
        }
    }
    return OG_OK;
}

/* One E4M3 byte's value (OCP FP8 E4M3: sign, 4 exponent bits bias 7, 3
 * mantissa bits; exponent 0 subnormal m/8 * 2^-6; S.1111.111 is NaN, which
 * the caller refuses before it gets here). */
static float e4m3_value(uint8_t b) {
    const int e = (b >> 3) & 15, mt = b & 7;
    const float v = e ? ldexpf(1.0f + (float)mt / 8.0f, e - 7) : ldexpf((float)mt / 8.0f, -6);
    return b & 0x80 ? -v : v;
}

og_status og_ds41_engram_fp8_decode(const uint8_t *row, uint32_t ED, float *y, uint32_t *bad_byte) {
    for (uint32_t i = 0; i < ED; i++) {
        const uint32_t sb = ED + i / OG_DS41_ENGRAM_FP8_BLOCK;
        const uint8_t sc = row[sb];
        if (sc == 255) { *bad_byte = sb; return OG_ERR_FORMAT; }
        if ((row[i] & 0x7f) == 0x7f) { *bad_byte = i; return OG_ERR_FORMAT; }
        y[i] = ldexpf(e4m3_value(row[i]), (int)sc - 127); /* exact unless it leaves the float range */
        if (!isfinite(y[i])) { *bad_byte = i; return OG_ERR_FORMAT; }
    }
    return OG_OK;
}

/* Row r of an Engram table as ED floats: the type's reference dequantizer, or
 * the antirez FP8 rows (og_ds41_engram_fp8_decode). Errors: OG_ERR_RANGE (r
 * outside the table; *bad_byte = UINT32_MAX), OG_ERR_FORMAT (a NaN or an
 * overflowing FP8 value at byte *bad_byte of the row). */
static og_status engram_row(const og_weight *t, uint32_t ED, bool fp8, uint64_t r, float *y, uint32_t *bad_byte) {
    *bad_byte = UINT32_MAX;
    if ((int64_t)r >= t->n_rows) return OG_ERR_RANGE;
    const uint8_t *row = (const uint8_t *)t->data + r * t->row_bytes;
    if (!fp8) return og_dequantize_row(t->type, row, y, ED);
    return og_ds41_engram_fp8_decode(row, ED, y, bad_byte);
}

/* ---- per-sequence state (og_kv.arch) --------------------------------------- */

#define ENGRAM_CTX ((int)OG_DS41_MAX_ENGRAM_NGRAM) /* tokens of context the hash reads, incl. the current one */

typedef struct ds41_seq {
    og_device *dev;          /* the memory's device (NULL: host memory); outlives the state */
    uint32_t n_layer;
    int32_t n_ring;          /* rows of each raw ring: min(n_swa, the sequence's og_kv.n_ctx) */
    float **raw;             /* [n_layer] device [n_ring][D]: position p in row p mod n_swa */
    float **cstate;          /* [n_layer] kv sources' compressor states (og_compress_op.state [2][ratio][D]) or NULL */
    og_row_store *comp, *ikeys; /* [n_layer] kv sources' compressed rows [D], key owners' index keys [ID] */
    int32_t last[ENGRAM_CTX];/* host: the sequence's last tokens, newest first (-1 before the start) */
} ds41_seq;

static void seq_free(void *arch) {
    ds41_seq *q = arch;
    if (!q) return;
    for (uint32_t il = 0; il < q->n_layer; il++) {
        if (q->raw) og_seq_mem_free(q->dev, q->raw[il]);
        if (q->cstate) og_seq_mem_free(q->dev, q->cstate[il]);
        if (q->comp) og_row_store_free(q->dev, &q->comp[il]);
        if (q->ikeys) og_row_store_free(q->dev, &q->ikeys[il]);
    }
    free(q->raw);
    free(q->cstate);
    free(q->comp);
    free(q->ikeys);
    free(q);
}

static uint64_t cstate_floats(const og_ds41_hparams *hp, uint32_t il) {
    return 2ull * hp->layer[il].ratio * hp->head_dim;
}

static int32_t ring_rows(const og_ds41_hparams *hp, int32_t n_ctx) {
    return n_ctx > 0 && (uint32_t)n_ctx < hp->n_swa ? n_ctx : (int32_t)hp->n_swa;
}

static og_status seq_create(const og_ds41 *d, og_device *dev, int32_t n_ring, ds41_seq **out) {
    const og_ds41_hparams *hp = &d->hp;
    const uint32_t NL = hp->n_layer;
    ds41_seq *q = calloc(1, sizeof *q);
    if (!q) return OG_ERR_NOMEM;
    q->dev = dev;
    q->n_layer = NL;
    q->n_ring = n_ring;
    for (int i = 0; i < ENGRAM_CTX; i++) q->last[i] = -1;
    q->raw = calloc(NL, sizeof *q->raw);
    q->cstate = calloc(NL, sizeof *q->cstate);
    q->comp = calloc(NL, sizeof *q->comp);
    q->ikeys = calloc(NL, sizeof *q->ikeys);
    og_status st = q->raw && q->cstate && q->comp && q->ikeys ? OG_OK : OG_ERR_NOMEM;
    for (uint32_t il = 0; il < NL && !st; il++) {
        if (!(q->raw[il] = og_seq_alloc(dev, (uint64_t)n_ring * hp->head_dim * sizeof(float)))) st = OG_ERR_NOMEM;
        if (!st && hp->layer[il].is_kv_source && !(q->cstate[il] = og_seq_alloc(dev, cstate_floats(hp, il) * sizeof(float))))
            st = OG_ERR_NOMEM;
    }
    if (st) {
        seq_free(q);
        return st;
    }
    *out = q;
    return OG_OK;
}

/* Reserves sequence q's compressed rows and index keys for n_pos positions. */
static og_status seq_reserve(const og_ds41_hparams *hp, ds41_seq *q, int32_t n_pos) {
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        const og_ds41_layer *R = &hp->layer[il];
        if (!R->is_kv_source) continue;
        const int64_t rows = n_pos / (int64_t)R->ratio;
        if (og_row_store_reserve(q->dev, &q->comp[il], rows, hp->head_dim) ||
            (R->is_key_owner && og_row_store_reserve(q->dev, &q->ikeys[il], rows, hp->indexer_head_dim)))
            return OG_ERR_NOMEM;
    }
    return OG_OK;
}

/* og_arch.state_fork: a deep copy of every layer's window, compressor state,
 * compressed rows and index keys, and the Engram context. */
static og_status ds41_state_fork(const og_model *m, const og_run_ctx *rc, const og_kv *src, og_kv *dst, char *err,
                                 size_t errlen) {
    const og_ds41 *d = m->impl;
    const og_ds41_hparams *hp = &d->hp;
    const ds41_seq *q = src->arch;
    if (src->arch_free != seq_free || q->n_layer != hp->n_layer)
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "kv fork: the cache holds no deepseek41 state of this model");
    ds41_seq *nq = NULL; /* seq_create sets it only when it succeeds */
    if (seq_create(d, q->dev, q->n_ring, &nq) || seq_reserve(hp, nq, src->n_pos)) {
        if (nq) seq_free(nq);
        return og_fail(err, errlen, OG_ERR_NOMEM, "kv fork: no memory for the forked sequence's state");
    }
    memcpy(nq->last, q->last, sizeof q->last);
    og_stream *s = q->dev ? rc->stream : NULL;
    const uint64_t fb = sizeof(float);
    og_status st = OG_OK;
    for (uint32_t il = 0; il < hp->n_layer && !st; il++) {
        const og_ds41_layer *R = &hp->layer[il];
        st = og_seq_copy(q->dev, s, nq->raw[il], q->raw[il], (uint64_t)q->n_ring * hp->head_dim * fb, err, errlen);
        if (st || !R->is_kv_source) continue;
        const int64_t rows = src->n_pos / (int64_t)R->ratio;
        st = og_seq_copy(q->dev, s, nq->cstate[il], q->cstate[il], cstate_floats(hp, il) * fb, err, errlen);
        if (!st) st = og_row_store_copy(q->dev, s, &nq->comp[il], &q->comp[il], rows, hp->head_dim, err, errlen);
        if (!st && R->is_key_owner)
            st = og_row_store_copy(q->dev, s, &nq->ikeys[il], &q->ikeys[il], rows, hp->indexer_head_dim, err, errlen);
    }
    st = og_seq_copies_wait(q->dev, s, st, err, errlen);
    if (st) {
        seq_free(nq);
        return st;
    }
    *dst = (og_kv){.dev = q->dev, .n_pos = src->n_pos, .n_ctx = src->n_ctx, .arch = nq, .arch_free = seq_free};
    return OG_OK;
}

/* og_arch.state_walk (og_kv_snapshot / og_kv_restore): per layer the raw
 * ring, per kv source its compressor state (ratio > 1: the pending group; at
 * ratio 1 it holds only the token being compressed) and n_pos / ratio
 * compressed rows, per key owner its index keys, and the Engram context
 * (host): everything a position reads of earlier ones. */
static og_status ds41_state_walk(const og_model *m, const og_kv *kv, og_snap_walk *w) {
    const og_ds41_hparams *hp = &((const og_ds41 *)m->impl)->hp;
    ds41_seq *q = kv->arch;
    if (kv->arch_free != seq_free || !q || q->n_layer != hp->n_layer)
        return og_fail(w->err, w->errlen, OG_ERR_INVALID_ARG, "kv snapshot: the cache holds no deepseek41 state of this model");
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        const og_ds41_layer *R = &hp->layer[il];
        og_snap_piece(w, q->raw[il], (uint64_t)og_fwd_ring_filled(q->n_ring, kv->n_pos) * hp->head_dim * sizeof(float));
        if (!R->is_kv_source) continue;
        if (R->ratio > 1) og_snap_piece(w, q->cstate[il], cstate_floats(hp, il) * sizeof(float));
        og_snap_rows(w, &q->comp[il], kv->n_pos / (int64_t)R->ratio, hp->head_dim);
        if (R->is_key_owner) og_snap_rows(w, &q->ikeys[il], kv->n_pos / (int64_t)R->ratio, hp->indexer_head_dim);
    }
    og_snap_host(w, q->last, sizeof q->last);
    return OG_OK;
}

/* og_arch.state_new: a state with rings for dst->n_ctx and rows for n_pos. */
static og_status ds41_state_new(const og_model *m, og_device *dev, int32_t n_pos, og_kv *dst) {
    const og_ds41 *d = m->impl;
    ds41_seq *q = NULL;
    if (seq_create(d, dev, ring_rows(&d->hp, dst->n_ctx), &q)) return OG_ERR_NOMEM;
    if (seq_reserve(&d->hp, q, n_pos)) {
        seq_free(q);
        return OG_ERR_NOMEM;
    }
    *dst = (og_kv){.dev = dev, .n_pos = n_pos, .n_ctx = dst->n_ctx, .arch = q, .arch_free = seq_free};
    return OG_OK;
}

/* ---- the forward pass ------------------------------------------------------ */

/* One call's device buffers (og_fwd_take); floats per token unless said. */
typedef struct bufs {
    float *S, *flat, *mix;            /* [T][hc N] x 2, [T][(2 + hc) hc] */
    float *pre_lag, *pre_cur, *post, *comb; /* [T][hc] x 3, [T][hc hc]: the lagged pre (§4.3.1) and this sublayer's */
    float *x, *y;                     /* [T][N] */
    float *qr, *q, *o, *og;           /* [T][q_rank], [T][H D] x 3 */
    float *kv;                        /* [T][D] this call's raw rows */
    float *low, *lowt;                /* [G][T][o_rank], [T][G o_rank] */
    float *ckv, *csc, *lat, *ik;      /* [T][D] x 3 (compressor inputs, emitted latents), [T][ID] index keys */
    float *iq, *iw;                   /* [T][IH ID], [T][IH] */
    int32_t *sel, *cand;              /* [T][top_k], [T][cand_topk] */
    float *emb, *ekv;                 /* [T][EB ED], [T][(hc + 1) N] Engram */
    float *rl, *r_w;                  /* [T][E], [T][k] */
    int32_t *r_ids;                   /* [T][k] */
    float *hS, *hx, *logits;          /* the head: [n_out][hc N], [n_out][N], [n_out][V] */
} bufs;

static uint64_t carve(const og_ds41_hparams *hp, int64_t T, int64_t n_out, og_fwd_scratch_cut *c, bufs *b) {
    const uint64_t fb = sizeof(float), hc = hp->hc_count, N = hp->n_embd, HD = (uint64_t)hp->n_head * hp->head_dim;
    const uint64_t G = hp->o_group_count, orank = hp->o_lora_rank, t = (uint64_t)T, no = (uint64_t)n_out;
    const uint64_t D = hp->head_dim, ID = hp->indexer_head_dim, IH = hp->indexer_n_head;
    const bool cand = hp->candidate_source >= 0;
    b->S = og_fwd_take(c, t * hc * N * fb);
    b->flat = og_fwd_take(c, t * hc * N * fb);
    b->mix = og_fwd_take(c, t * (2 + hc) * hc * fb);
    b->pre_lag = og_fwd_take(c, t * hc * fb);
    b->pre_cur = og_fwd_take(c, t * hc * fb);
    b->post = og_fwd_take(c, t * hc * fb);
    b->comb = og_fwd_take(c, t * hc * hc * fb);
    b->x = og_fwd_take(c, t * N * fb);
    b->y = og_fwd_take(c, t * N * fb);
    b->qr = og_fwd_take(c, t * hp->q_lora_rank * fb);
    b->q = og_fwd_take(c, t * HD * fb);
    b->o = og_fwd_take(c, t * HD * fb);
    b->og = og_fwd_take(c, t * HD * fb);
    b->kv = og_fwd_take(c, t * D * fb);
    b->low = og_fwd_take(c, t * G * orank * fb);
    b->lowt = og_fwd_take(c, t * G * orank * fb);
    b->ckv = og_fwd_take(c, t * D * fb);
    b->csc = og_fwd_take(c, t * D * fb);
    b->lat = og_fwd_take(c, t * D * fb);
    b->ik = og_fwd_take(c, t * ID * fb);
    b->iq = og_fwd_take(c, t * IH * ID * fb);
    b->iw = og_fwd_take(c, t * IH * fb);
    b->sel = og_fwd_take(c, t * hp->indexer_top_k * sizeof(int32_t));
    b->cand = og_fwd_take(c, (cand ? t * hp->candidate_topk_blocks : 0) * sizeof(int32_t));
    b->emb = og_fwd_take(c, (hp->n_engram_layer ? t * hp->engram_n_bucket * hp->engram_head_dim : 0) * fb);
    b->ekv = og_fwd_take(c, (hp->n_engram_layer ? t * (hc + 1) * N : 0) * fb);
    b->rl = og_fwd_take(c, t * hp->n_expert * fb);
    b->r_w = og_fwd_take(c, t * hp->n_expert_used * fb);
    b->r_ids = og_fwd_take(c, t * hp->n_expert_used * sizeof(int32_t));
    b->hS = og_fwd_take(c, no * hc * N * fb);
    b->hx = og_fwd_take(c, no * N * fb);
    b->logits = og_fwd_take(c, no * hp->n_vocab * fb);
    return c->used;
}

static uint64_t scratch_of(const og_ds41_hparams *hp, int64_t n_tok, int64_t n_out) {
    og_fwd_scratch_cut c = {0};
    bufs b;
    return carve(hp, n_tok, n_out, &c, &b);
}

static uint64_t ds41_scratch_bytes(const og_model *m, int64_t n_tok, int64_t n_out) {
    const og_ds41 *d = m->impl;
    return scratch_of(&d->hp, n_tok, n_out);
}

typedef og_fwd_plan plan;

/* Sequence s's state in this call (NULL: no tokens). */
static ds41_seq *seq_of(const plan *p, int s) { return p->st[s]; }

/* One call's host arrays: the shared ones (og_fwd_host) and V4.1's. */
typedef struct host_arrays {
    og_fwd_host a;
    int32_t *emit_tok, *emit_pos, *emit_row, *emit_first; /* [T] the tokens that complete a group */
    float *pre0;             /* [T][hc] the one-hot pre of layer 0 */
    int32_t *ctx;            /* [T][ENGRAM_CTX] each token's Engram context, newest first */
    uint64_t *erows;         /* [EB] */
    float *emb;              /* [T][EB ED] host copy of the gathered rows */
    ds41_layer *dlayers;     /* [n_layer] the layers at their device copies (on_device) */
} host_arrays;

/* *out = d with every weight the forward pass reads on the device at its
 * device copy when the pass runs on a device with its own memory (f->wt: the
 * cuda device, or the cpu device's copy mode), its layers in dl [n_layer]; d
 * itself otherwise. The Engram tables stay the host's (gathered there).
 * Errors: OG_ERR_STATE naming a weight without a copy. */
static og_status on_device(const og_fwd *f, const og_ds41 *d, ds41_layer *dl, og_ds41 *out) {
    *out = *d;
    if (!f->wt) return OG_OK;
    out->layers = dl;
    og_status st = og_fwd_weight(f, &d->tok_embd, "token_embd", &out->tok_embd);
    if (!st) st = og_fwd_weight(f, &d->output, "output", &out->output);
#define VEC(o, i, fld) OG_FWD_PTR(st, f, o, i, fld)
    VEC(out, d, out_norm);
    for (uint32_t il = 0; il < d->hp.n_layer && !st; il++) {
        const ds41_layer *L = &d->layers[il];
        ds41_layer *o = &dl[il];
        *o = *L;
        const og_fwd_wmap ws[] = {
            {&L->hc_attn_fn, &o->hc_attn_fn, "hc_attn_fn"}, {&L->hc_ffn_fn, &o->hc_ffn_fn, "hc_ffn_fn"},
            {&L->q_a, &o->q_a, "attn_q_a"}, {&L->q_b, &o->q_b, "attn_q_b"}, {&L->kv, &o->kv, "attn_kv"},
            {&L->o_a, &o->o_a, "attn_output_a"}, {&L->o_b, &o->o_b, "attn_output_b"},
            {&L->comp_kv, &o->comp_kv, "attn_compressor_kv"}, {&L->comp_gate, &o->comp_gate, "attn_compressor_gate"},
            {&L->idx_k, &o->idx_k, "indexer_attn_k"}, {&L->idx_q_b, &o->idx_q_b, "indexer_attn_q_b"},
            {&L->idx_proj, &o->idx_proj, "indexer_proj"}, {&L->engram_wkv, &o->engram_wkv, "engram_wkv"},
            {&L->router, &o->router, "ffn_gate_inp"}};
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
        VEC(o, L, idx_k_norm);
        VEC(o, L, engram_q);
        VEC(o, L, engram_k);
        VEC(o, L, exp_bias);
    }
#undef VEC
    return st;
}

static og_status make_plan(const og_ds41 *d, const og_run_ctx *rc, og_kv *const *kvs, int n_seq, const og_batch *batch,
                           plan *p, char *err, size_t errlen) {
    const og_ds41_hparams *hp = &d->hp;
    TRY(og_fwd_plan_make(p, kvs, n_seq, batch, hp->n_vocab, rc->host_numerics, "deepseek41", err, errlen));
    for (int s = 0; s < n_seq; s++) {
        og_kv *kv = kvs[s];
        if (!kv->arch && p->seq_off[s + 1] == p->seq_off[s]) continue; /* no tokens, no state yet */
        if (!kv->arch) {
            ds41_seq *q;
            const int32_t rows = ring_rows(hp, kv->n_ctx);
            if (seq_create(d, rc->dev, rows, &q))
                return og_fail(err, errlen, OG_ERR_NOMEM, "no memory for a new sequence's state (%u layers' windows of "
                               "%d positions and compressor states)", hp->n_layer, rows);
            kv->arch = q;
            kv->arch_free = seq_free;
            kv->dev = rc->dev;
        }
        ds41_seq *q = kv->arch;
        if (kv->arch_free != seq_free || q->dev != rc->dev)
            return og_fail(err, errlen, OG_ERR_INVALID_ARG, "sequence %d's state is on another device or not deepseek41's",
                           s);
        if (q->n_ring < (int32_t)hp->n_swa && p->next[s] > q->n_ring)
            return og_fail(err, errlen, OG_ERR_RANGE, "sequence %d would hold %d positions, past its context of %d "
                           "(og_kv.n_ctx: its window rings hold %d rows)", s, p->next[s], q->n_ring, q->n_ring);
        p->st[s] = q;
        if (seq_reserve(hp, q, p->next[s]))
            return og_fail(err, errlen, OG_ERR_NOMEM, "no memory for sequence %d's compressed rows", s);
    }
    return OG_OK;
}

/* og_fwd_store_blocks_bound's: the most blocks a sequence's stores hold. */
static int64_t blocks_held(const og_kv *kv) {
    const ds41_seq *q = kv->arch_free == seq_free ? kv->arch : NULL;
    return q ? og_row_stores_max_blocks(q->comp, q->ikeys, q->n_layer) : 0;
}

/* og_fwd_host_carve's `more`: V4.1's own arrays, for x->T tokens. */
typedef struct host_more {
    const og_ds41_hparams *hp;
    int64_t T;
    host_arrays *ha;
} host_more;

static void host_take_more(og_fwd_scratch_cut *c, void *vx) {
    const host_more *x = vx;
    const og_ds41_hparams *hp = x->hp;
    host_arrays *ha = x->ha;
    const uint64_t t = (uint64_t)x->T, EB = hp->engram_n_bucket, ED = hp->engram_head_dim;
    ha->emit_tok = og_fwd_take(c, t * sizeof *ha->emit_tok);
    ha->emit_pos = og_fwd_take(c, t * sizeof *ha->emit_pos);
    ha->emit_row = og_fwd_take(c, t * sizeof *ha->emit_row);
    ha->emit_first = og_fwd_take(c, t * sizeof *ha->emit_first);
    ha->pre0 = og_fwd_take(c, t * hp->hc_count * sizeof *ha->pre0);
    ha->ctx = og_fwd_take(c, t * ENGRAM_CTX * sizeof *ha->ctx);
    ha->erows = og_fwd_take(c, (EB + 1) * sizeof *ha->erows);
    ha->emb = og_fwd_take(c, (hp->n_engram_layer ? t * EB * ED : 1) * sizeof *ha->emb);
    ha->dlayers = og_fwd_take(c, hp->n_layer * sizeof *ha->dlayers);
}

/* A product over rows that belong to batch tokens tok[r] (not consecutive):
 * runs of one numerics (og_fwd_mm_rows' rule per token). */
static og_status mm_tokens(og_fwd *f, host_arrays *ha, const og_weight *w, const float *x, int64_t n,
                           const int32_t *tok, float *y) {
    if (!f->exact || f->nm == OG_NUMERICS_CANONICAL) return og_fwd_mm(f, w, x, n, y);
    int nj = 0;
    for (int64_t a0 = 0; a0 < n;) {
        const bool ex = f->exact[tok[a0]];
        int64_t a1 = a0 + 1;
        while (a1 < n && f->exact[tok[a1]] == ex) a1++;
        ha->a.jobs[nj++] = (og_matmul_job){w, x + a0 * w->K, a1 - a0, y + a0 * w->n_rows,
                                         ex ? OG_NUMERICS_CANONICAL : f->nm};
        a0 = a1;
    }
    for (int j = 0; j < nj; j += 64) {
        og_status st = f->ops->matmul(f->dev, f->s, ha->a.jobs + j, nj - j < 64 ? nj - j : 64, f->err, f->errlen);
        if (st) return st;
    }
    return OG_OK;
}


/* The stores of layer il of every sequence (NULL for one without tokens). */
static void layer_stores(const plan *p, uint32_t il, bool keys, og_row_store **out) {
    for (int s = 0; s < p->n_seq; s++) out[s] = seq_of(p, s) ? (keys ? &seq_of(p, s)->ikeys[il] : &seq_of(p, s)->comp[il]) : NULL;
}

/* A kv source's compressor step (§4.3.3 "Compressor"): kv (and at ratio 2 the
 * gate) from the layer's attn-normed input, og_compress_op's plain softmax
 * over each group (ratio 1: the one token's kv), RMSNorm; then per emitted
 * latent the index key (key owners: RMSNorm(indexer.attn_k latent), RoPE,
 * the indexer rounding) and the compressed row (RoPE at the group's first
 * position, the compressed rows' rounding), stored into the sequences' stores. */
static og_status compress_step(og_fwd *f, const og_ds41 *d, uint32_t il, const plan *p, host_arrays *ha, bufs *b) {
    const og_ds41_hparams *hp = &d->hp;
    const ds41_layer *L = &d->layers[il];
    const og_ds41_layer *R = &hp->layer[il];
    const int64_t T = p->T, D = hp->head_dim, ID = hp->indexer_head_dim, Rr = hp->n_rot;
    const int32_t ratio = (int32_t)R->ratio;
    TRY(og_fwd_mm(f, &L->comp_kv, b->x, T, b->ckv));
    if (ratio > 1) TRY(og_fwd_mm(f, &L->comp_gate, b->x, T, b->csc));
    int64_t ne = 0;
    for (int64_t t = 0; t < T; t++) {
        const int s = ha->a.seq_idx[t];
        const int32_t pp = p->pos[t];
        ha->a.state[t] = seq_of(p, s)->cstate[il];
        ha->a.out[t] = NULL;
        if ((pp + 1) % ratio) continue;
        ha->a.out[t] = b->lat + ne * D;
        ha->emit_tok[ne] = (int32_t)t;
        ha->emit_pos[ne] = pp + 1 - ratio;       /* RoPE position: the group's first token */
        ha->emit_row[ne] = (pp + 1) / ratio - 1; /* the row's index in the store */
        ne++;
    }
    og_compress_op op = {.n_tok = T, .width = D, .ratio = ratio, .overlap = false, .kv = b->ckv,
                         .score = ratio > 1 ? b->csc : b->ckv, .state = ha->a.state, .pos = p->pos, .out = ha->a.out,
                         .norm = L->comp_norm, .eps = hp->rms_eps, .rope = {0}, .qat = OG_QAT_NONE};
    TRY(f->ops->compress(f->dev, f->s, &op, f->err, f->errlen));
    if (!ne) return OG_OK;
    layer_stores(p, il, false, ha->a.cst);
    og_kv_view cv = og_fwd_store_view(p, ha->a.seq_idx, ha->a.blocks, ha->a.cst, (uint64_t)D, 1, ha->a.first_of,
                                      ha->a.cfirst, ha->a.ncomp);
    for (int64_t e = 0; e < ne; e++) ha->emit_first[e] = ha->a.first_of[ha->a.seq_idx[ha->emit_tok[e]]];
    if (R->is_key_owner) { /* the index key from the latent before its RoPE */
        TRY(mm_tokens(f, ha, &L->idx_k, b->lat, ne, ha->emit_tok, b->ik));
        TRY(og_fwd_norm(f, b->ik, b->ik, ne, ID, ID, L->idx_k_norm, hp->rms_eps));
        og_rope_op rk = {hp->rope_comp, b->ik + (ID - Rr), ne, ID, 1, ID, ha->emit_pos};
        TRY(f->ops->rope(f->dev, f->s, &rk, f->err, f->errlen));
        if (d->indexer_fp4) {
            og_qat_op qk = {{b->ik, ID, ne, ID}, OG_QAT_FP4, ID, 32};
            TRY(f->ops->qat(f->dev, f->s, &qk, f->err, f->errlen));
        }
    }
    og_rope_op rl = {hp->rope_comp, b->lat + (D - Rr), ne, D, 1, D, ha->emit_pos};
    TRY(f->ops->rope(f->dev, f->s, &rl, f->err, f->errlen));
    if (d->kv_fp4) {
        og_qat_op ql = {{b->lat, D, ne, D}, OG_QAT_FP4_E4M3, D, 16};
        TRY(f->ops->qat(f->dev, f->s, &ql, f->err, f->errlen));
    }
    og_kv_store_op ks = {cv, {b->lat, D, ne, D}, ha->emit_first, ha->emit_row};
    TRY(f->ops->kv_store(f->dev, f->s, &ks, f->err, f->errlen));
    if (R->is_key_owner) {
        layer_stores(p, il, true, ha->a.kst);
        og_kv_view kv = og_fwd_store_view(p, ha->a.seq_idx, ha->a.kblocks, ha->a.kst, (uint64_t)ID, 1, ha->a.first_of,
                                          ha->a.kfirst, ha->a.nkeys);
        for (int64_t e = 0; e < ne; e++) ha->emit_first[e] = ha->a.first_of[ha->a.seq_idx[ha->emit_tok[e]]];
        og_kv_store_op kk = {kv, {b->ik, ID, ne, ID}, ha->emit_first, ha->emit_row};
        TRY(f->ops->kv_store(f->dev, f->s, &kk, f->err, f->errlen));
    }
    return OG_OK;
}

/* Layer il's indexer (§4.3.3 "Indexer"): its queries and weights over the
 * keys of its key owner; the candidate source also picks candidate blocks,
 * a masked (reindex) layer scores only inside them. *ran: whether any token
 * has more keys than top_k (then b->sel holds the selection). */
static og_status indexer(og_fwd *f, const og_ds41 *d, uint32_t il, const plan *p, host_arrays *ha, bufs *b,
                         bool *ran) {
    const og_ds41_hparams *hp = &d->hp;
    const ds41_layer *L = &d->layers[il];
    const og_ds41_layer *R = &hp->layer[il];
    const int64_t T = p->T, ID = hp->indexer_head_dim, IH = hp->indexer_n_head, Rr = hp->n_rot;
    const int64_t cand_n = (int64_t)hp->candidate_block_size * hp->candidate_topk_blocks;
    layer_stores(p, (uint32_t)R->key_owner, true, ha->a.kst);
    og_kv_view keys = og_fwd_store_view(p, ha->a.seq_idx, ha->a.kblocks, ha->a.kst, (uint64_t)ID, R->ratio,
                                        ha->a.first_of, ha->a.kfirst, ha->a.nkeys);
    bool any = false, any_cand = false;
    for (int64_t t = 0; t < T; t++) {
        any |= ha->a.nkeys[t] > (int32_t)hp->indexer_top_k;
        any_cand |= hp->candidate_source >= 0 && ha->a.nkeys[t] > cand_n;
    }
    const bool cand_out = R->is_candidate_source && any_cand, cand_in = R->candidate_masked && any_cand;
    /* no token with more keys than top_k nor a mask: every token sees all its rows (no selection) */
    *ran = any || cand_in;
    if (!*ran && !cand_out) return OG_OK;
    og_rope_op ri = {hp->rope_comp, b->iq + (ID - Rr), T, IH * ID, (int32_t)IH, ID, p->pos};
    TRY(og_fwd_mm(f, &L->idx_q_b, b->qr, T, b->iq));
    TRY(f->ops->rope(f->dev, f->s, &ri, f->err, f->errlen));
    if (d->indexer_fp4) {
        og_qat_op qi = {{b->iq, ID, T * IH, ID}, OG_QAT_FP4, ID, 32};
        TRY(f->ops->qat(f->dev, f->s, &qi, f->err, f->errlen));
    }
    TRY(og_fwd_mm(f, &L->idx_proj, b->x, T, b->iw));
    TRY(f->ops->scale(f->dev, f->s, b->iw, b->iw, T * IH, (float)(1.0 / sqrt((double)(ID * IH))), f->err, f->errlen));
    og_indexer_op io = {.n_tok = T, .n_head = IH, .d_head = ID, .top_k = (int32_t)hp->indexer_top_k, .q = b->iq,
                        .w = b->iw, .keys = keys, .key_first = ha->a.kfirst, .n_keys = ha->a.nkeys, .sel = b->sel,
                        .canonical = p->canon, .cand_block = (int32_t)hp->candidate_block_size,
                        .cand_topk = (int32_t)hp->candidate_topk_blocks, .cand_out = cand_out ? b->cand : NULL,
                        .cand_in = cand_in ? b->cand : NULL, .sel_all = true};
    return f->ops->indexer(f->dev, f->s, &io, f->err, f->errlen);
}

/* Attention of layer il (§4.3.3) from b->x into b->y. *sel_ok tracks whether
 * b->sel holds the current index source's selection. */
static og_status attention(og_fwd *f, const og_ds41 *d, uint32_t il, const plan *p, host_arrays *ha, bufs *b,
                           bool *sel_ok) {
    const og_ds41_hparams *hp = &d->hp;
    const ds41_layer *L = &d->layers[il];
    const og_ds41_layer *R = &hp->layer[il];
    const int64_t T = p->T, H = hp->n_head, D = hp->head_dim, Rr = hp->n_rot, HD = H * D, W = hp->n_swa;
    const og_rope *rope = R->ratio ? &hp->rope_comp : &hp->rope_swa;
    /* q = q_b(rmsnorm(q_a x)), no per-head norm, RoPE on the tail */
    TRY(og_fwd_mm(f, &L->q_a, b->x, T, b->qr));
    TRY(og_fwd_norm(f, b->qr, b->qr, T, hp->q_lora_rank, hp->q_lora_rank, L->q_a_norm, hp->rms_eps));
    TRY(og_fwd_mm(f, &L->q_b, b->qr, T, b->q));
    og_rope_op rq = {*rope, b->q + (D - Rr), T, HD, (int32_t)H, D, p->pos};
    TRY(f->ops->rope(f->dev, f->s, &rq, f->err, f->errlen));
    /* kv = rmsnorm(kv x), RoPE on the tail, the window's rounding */
    TRY(og_fwd_mm(f, &L->kv, b->x, T, b->kv));
    TRY(og_fwd_norm(f, b->kv, b->kv, T, D, D, L->kv_norm, hp->rms_eps));
    og_rope_op rk = {*rope, b->kv + (D - Rr), T, D, 1, D, p->pos};
    TRY(f->ops->rope(f->dev, f->s, &rk, f->err, f->errlen));
    if (d->kv_fp8) {
        og_qat_op qo = {{b->kv, D, T, D}, OG_QAT_FP8, D - Rr, 32};
        TRY(f->ops->qat(f->dev, f->s, &qo, f->err, f->errlen));
    }
    if (R->is_kv_source) TRY(compress_step(f, d, il, p, ha, b));
    if (R->is_index_source) TRY(indexer(f, d, il, p, ha, b, sel_ok));
    og_kv_view cv = {0};
    if (R->ratio) {
        layer_stores(p, (uint32_t)R->kv_source, false, ha->a.cst);
        cv = og_fwd_store_view(p, ha->a.seq_idx, ha->a.blocks, ha->a.cst, (uint64_t)D, R->ratio, ha->a.first_of,
                               ha->a.cfirst, ha->a.ncomp);
    }
    /* the raw rows each token sees: positions (p - W, p], this call's from kv, older ones from the ring */
    for (int s = 0; s < p->n_seq; s++) ha->a.ring[s] = seq_of(p, s) ? seq_of(p, s)->raw[il] : NULL;
    og_fwd_window_rows(p, ha->a.seq_idx, ha->a.ring, (int32_t)W, D, b->kv, ha->a.rows, ha->a.row_off);
    const bool use_sel = R->ratio && R->topk_source >= 0 && *sel_ok;
    og_sink_attn_op at = {.n_tok = T, .n_head = H, .d_head = D, .kq_scale = (float)(1.0 / sqrt((double)D)), .q = b->q,
                          .o = b->o, .sinks = L->sinks, .rows = ha->a.rows, .row_off = ha->a.row_off, .comp = cv,
                          .comp_first = ha->a.cfirst, .n_comp = ha->a.ncomp, .sel = use_sel ? b->sel : NULL,
                          .top_k = (int32_t)hp->indexer_top_k, .canonical = p->canon, .sel_every = true};
    TRY(f->ops->sink_attention(f->dev, f->s, &at, f->err, f->errlen));
    TRY(og_fwd_ring_store(f, p, ha->a.ring, ha->a.seq_idx, ha->a.pos_mod, (int32_t)W, D, b->kv));
    og_rope_op ro = {*rope, b->o + (D - Rr), T, HD, (int32_t)H, D, ha->a.neg_pos};
    TRY(f->ops->rope(f->dev, f->s, &ro, f->err, f->errlen));
    return og_fwd_grouped_output(f, &L->o_a, &L->o_b, T, HD, hp->o_group_count, hp->o_lora_rank, b->o, b->og, b->low,
                                 b->lowt, ha->a.jobs, ha->a.wts, b->y);
}

/* mHC with the one-sublayer lag (§4.3.1): this sublayer's mixes of S (pre
 * into pre_cur, post, comb) and its input x = RMSNorm(collapse(S, lag), norm)
 * with the pre the previous sublayer computed (lag). */
static og_status hc_pre(og_fwd *f, const og_ds41_hparams *hp, int64_t T, bufs *b, const og_weight *fn,
                        const float *scale, const float *base, const float *norm, float *pre_out, const float *lag) {
    const int64_t hcN = (int64_t)hp->hc_count * hp->n_embd;
    TRY(og_fwd_norm(f, b->flat, b->S, T, hcN, hcN, NULL, hp->rms_eps));
    TRY(og_fwd_mm(f, fn, b->flat, T, b->mix));
    og_hc_op co = {T, hp->n_embd, (int32_t)hp->hc_count, b->S, b->x, lag, NULL};
    TRY(f->ops->hc_collapse(f->dev, f->s, &co, f->err, f->errlen));
    og_hc_mix_op mo = {b->mix, T, (int32_t)hp->hc_count, false, scale, base, hp->hc_eps,
                       (int32_t)hp->hc_sinkhorn_iters, pre_out, b->post, b->comb};
    TRY(f->ops->hc_mix(f->dev, f->s, &mo, f->err, f->errlen));
    return og_fwd_norm(f, b->x, b->x, T, hp->n_embd, hp->n_embd, norm, hp->rms_eps);
}

static og_status hc_post(og_fwd *f, const og_ds41_hparams *hp, int64_t T, bufs *b) {
    og_hc_op eo = {T, hp->n_embd, (int32_t)hp->hc_count, b->S, b->y, b->post, b->comb};
    return f->ops->hc_expand(f->dev, f->s, &eo, f->err, f->errlen);
}

/* Engram before layer il (§4.3.2): the 24 rows per token gathered and
 * dequantized on the host from the mapped table, up to the device, the
 * projection, then the per-copy gates on S. */
static og_status engram(og_fwd *f, const og_ds41 *d, uint32_t il, const plan *p, host_arrays *ha, bufs *b) {
    const og_ds41_hparams *hp = &d->hp;
    const ds41_layer *L = &d->layers[il];
    const int64_t T = p->T, EB = hp->engram_n_bucket, ED = hp->engram_head_dim, N = hp->n_embd;
    for (int64_t t = 0; t < T; t++) {
        if (og_ds41_engram_rows(hp, (int)il, ha->ctx + t * ENGRAM_CTX, ha->erows))
            return og_fail(f->err, f->errlen, OG_ERR_INVALID_ARG, "layer %u: a token outside the Engram token map", il);
        for (int64_t r = 0; r < EB; r++) {
            uint32_t bad;
            const og_status st =
                engram_row(&L->engram_embd, (uint32_t)ED, hp->engram_fp8, ha->erows[r], ha->emb + (t * EB + r) * ED, &bad);
            if (st == OG_ERR_FORMAT && bad != UINT32_MAX)
                return og_fail(f->err, f->errlen, OG_ERR_FORMAT, "layer %u: Engram table row %llu, byte %u (0x%02x): %s",
                               il, (unsigned long long)ha->erows[r], bad,
                               ((const uint8_t *)L->engram_embd.data)[ha->erows[r] * L->engram_embd.row_bytes + bad],
                               bad >= ED ? "the E8M0 NaN scale 0xff" : "an FP8 NaN code or a value beyond the float range");
            if (st)
                return og_fail(f->err, f->errlen, OG_ERR_RANGE, "layer %u: Engram row %llu outside the table's %lld rows",
                               il, (unsigned long long)ha->erows[r], (long long)L->engram_embd.n_rows);
        }
    }
    TRY(f->ops->copy_to_device(f->dev, f->s, b->emb, ha->emb, (uint64_t)(T * EB * ED) * sizeof(float), f->err,
                               f->errlen));
    TRY(og_fwd_mm(f, &L->engram_wkv, b->emb, T, b->ekv));
    og_engram_op eo = {T, N, (int32_t)hp->hc_count, b->S, b->ekv, L->engram_q, L->engram_k, hp->rms_eps};
    TRY(f->ops->engram(f->dev, f->s, &eo, f->err, f->errlen));
    return og_fwd_sync(f); /* ha->emb is reused by the next Engram layer */
}

/* The MoE FFN (§4.1.6, V4.1's normalization w / (sum + 1e-20), no hash
 * layers) of b->x into b->y. */
static og_status moe(og_fwd *f, const og_model *m, const og_ds41 *d, const og_run_ctx *rc, const og_batch *batch,
                     uint32_t il, bufs *b, host_arrays *ha, bool *failed_here) {
    const og_ds41_hparams *hp = &d->hp;
    og_router_op ro = {b->rl, d->layers[il].exp_bias, batch->n_tok, (int32_t)hp->n_expert, (int32_t)hp->n_expert_used,
                       3, 1, 1, hp->expert_weights_norm, hp->expert_weights_scale, b->r_ids, b->r_w, NULL, 0, NULL,
                       1e-20f};
    const og_fwd_moe_host h = {ha->a.h_ids, ha->a.h_w, ha->a.hx, ha->a.hy, ha->a.routes};
    return og_fwd_moe(f, m, rc, batch, il, &d->layers[il].router, &ro, b->x, b->y, hp->n_embd, &h, failed_here);
}

/* The head (§4.3.1): h = RMSNorm(collapse(S, the last FFN's pre), output_norm), logits. */
static og_status head(og_fwd *f, const og_ds41 *d, const og_batch *batch, int64_t n_out, bufs *b, float *logits) {
    const og_ds41_hparams *hp = &d->hp;
    const int64_t T = batch->n_tok, N = hp->n_embd, hc = hp->hc_count;
    og_hc_op co = {T, N, (int32_t)hc, b->S, b->x, b->pre_lag, NULL};
    TRY(f->ops->hc_collapse(f->dev, f->s, &co, f->err, f->errlen));
    TRY(og_fwd_gather_wanted(f, batch, b->hx, b->x, N));
    TRY(og_fwd_norm(f, b->hx, b->hx, n_out, N, N, d->out_norm, hp->rms_eps));
    TRY(og_fwd_mm(f, &d->output, b->hx, n_out, b->logits));
    return f->ops->copy_to_host(f->dev, f->s, logits, b->logits, (uint64_t)n_out * hp->n_vocab * sizeof(float), f->err,
                                f->errlen);
}

/* og_model_forward_batch for deepseek41 (§4.3): positions, the rows each
 * token sees and the Engram rows on the host, everything else as device ops
 * on rc->dev / rc->stream (or a host device). Errors: OG_ERR_INVALID_ARG (a
 * token or sequence out of range, no dispatcher, a state of another device),
 * OG_ERR_RANGE (a sequence past its og_kv.n_ctx below the window; an Engram
 * row outside its table), OG_ERR_UNSUPPORTED (a device without the
 * deepseek4 / deepseek41 ops), OG_ERR_STATE (a weight without a device copy), OG_ERR_NOMEM, the
 * ops' and the dispatcher's. On error no n_pos changes, but a sequence's
 * state may hold part of the call: drop (og_kv_free) such a sequence. */
static og_status ds41_forward_batch(const og_model *m, const og_run_ctx *rc, og_kv *const *kvs, int n_seq,
                                    const og_batch *batch, float *logits, char *err, size_t errlen) {
    const og_ds41 *d = m->impl;
    const og_ds41_hparams *hp = &d->hp;
    const int64_t T = batch->n_tok;
    og_status st = og_fwd_call_check(rc, T, n_seq, err, errlen);
    if (st) return st;
    /* the host arrays: one buffer carved for the call (og_fwd_host_get: the run
     * context's, kept and grown from call to call) */
    plan p;
    host_arrays ha;
    const uint64_t G = hp->o_group_count;
    const og_fwd_host_shape sh = {T, og_fwd_store_blocks_bound(kvs, n_seq, T, blocks_held), n_seq, hp->n_swa,
                                  hp->n_expert_used, hp->n_embd, G > (uint64_t)T ? G : (uint64_t)T, G};
    host_more hm = {hp, T, &ha};
    void *hown = NULL; /* this call's own host buffer (no reusable scratch), freed below */
    if ((st = og_fwd_host_carve(rc, &sh, &p, &ha.a, host_take_more, &hm, &hown, "deepseek41 forward pass", err,
                                errlen)))
        return st;
    memset(ha.pre0, 0, (size_t)(T * hp->hc_count) * sizeof *ha.pre0);
    st = make_plan(d, rc, kvs, n_seq, batch, &p, err, errlen);
    og_fwd fw = {.nm = rc->host_numerics, .exact = batch->exact, .err = err, .errlen = errlen};
    og_device *own_dev = NULL;
    if (!st) st = og_fwd_begin(&fw, rc, batch->exact, &own_dev, err, errlen);
    if (!st && (!fw.ops->hc_mix || !fw.ops->hc_collapse || !fw.ops->hc_expand || !fw.ops->qat || !fw.ops->compress ||
                !fw.ops->indexer || !fw.ops->sink_attention || !fw.ops->engram || !fw.ops->matmul))
        st = og_fail(err, errlen, OG_ERR_UNSUPPORTED, "the %s device has no deepseek41 ops yet", fw.ops->name);
    og_ds41 dd = *d; /* the weights where the device reads them (d's own on a host device) */
    if (!st) st = on_device(&fw, d, ha.dlayers, &dd);
    d = &dd;
    int64_t n_out = 0;
    for (int64_t t = 0; t < T; t++) n_out += batch->logits[t];
    void *dbase = NULL;
    bufs b = {0};
    if (!st) {
        og_fwd_scratch_cut c0 = {0};
        const uint64_t need = carve(hp, T, n_out, &c0, &b);
        og_fwd_scratch_cut cut = {0};
        st = og_fwd_scratch_get(m, rc, &fw, need, T, n_out, &cut, &dbase);
        if (!st) carve(hp, T, n_out, &cut, &b);
    }
    bool failed_here = st != OG_OK;
    const int64_t N = hp->n_embd, hc = hp->hc_count;
    if (!st) {
        for (int64_t t = 0; t < T; t++) {
            const int s = batch->seq[t];
            ha.a.seq_idx[t] = s;
            ha.a.neg_pos[t] = -p.pos[t];
            ha.pre0[t * hc] = 1.0f; /* layer 0's attention collapses with the one-hot pre [1, 0, 0, 0] */
        }
        /* each token's Engram context, newest first: this call's earlier tokens, then the sequence's last ones */
        for (int s = 0; s < n_seq; s++)
            for (int32_t k = 0; k < p.seq_off[s + 1] - p.seq_off[s]; k++) {
                int32_t *c = ha.ctx + (int64_t)p.tok_at[p.seq_off[s] + k] * ENGRAM_CTX;
                for (int32_t j = 0; j < ENGRAM_CTX; j++)
                    c[j] = k - j >= 0 ? batch->tokens[p.tok_at[p.seq_off[s] + k - j]] : seq_of(&p, s)->last[j - k - 1];
            }
        og_get_rows_op g = {d->tok_embd, batch->tokens, T, b.x};
        og_copy_op cp = {b.S, b.x, (uint64_t)N * sizeof(float), (uint64_t)T, (uint64_t)hc,
                         (uint64_t)(hc * N) * sizeof(float), (uint64_t)N * sizeof(float), (uint64_t)N * sizeof(float), 0};
        if (!(st = fw.ops->get_rows(fw.dev, fw.s, &g, err, errlen))) st = fw.ops->copy(fw.dev, fw.s, &cp, err, errlen);
        if (!st)
            st = fw.ops->copy_to_device(fw.dev, fw.s, b.pre_lag, ha.pre0, (uint64_t)(T * hc) * sizeof(float), err, errlen);
    }
    bool sel_ok = false;
    for (uint32_t il = 0; il < hp->n_layer && !st; il++) {
        const ds41_layer *L = &d->layers[il];
        const og_ds41_layer *R = &hp->layer[il];
        if (R->has_engram && (st = engram(&fw, d, il, &p, &ha, &b))) break;
        if ((st = hc_pre(&fw, hp, T, &b, &L->hc_attn_fn, L->hc_attn_scale, L->hc_attn_base, L->attn_norm, b.pre_cur,
                         b.pre_lag)) ||
            (st = attention(&fw, d, il, &p, &ha, &b, &sel_ok)) || (st = hc_post(&fw, hp, T, &b)))
            break;
        /* the FFN's input collapses with the attention's pre; its own pre is the next sublayer's */
        if ((st = hc_pre(&fw, hp, T, &b, &L->hc_ffn_fn, L->hc_ffn_scale, L->hc_ffn_base, L->ffn_norm, b.pre_lag,
                         b.pre_cur)) ||
            (st = moe(&fw, m, d, rc, batch, il, &b, &ha, &failed_here)) || (st = hc_post(&fw, hp, T, &b)))
            break;
    }
    if (!st && n_out) st = head(&fw, d, batch, n_out, &b, logits);
    if (fw.ops) st = og_fwd_drain(&fw, st);
    if (dbase) fw.ops->free(fw.dev, dbase);
    og_device_destroy(own_dev);
    if (!st)
        for (int s = 0; s < n_seq; s++) {
            kvs[s]->n_pos = p.next[s];
            const int32_t n = p.seq_off[s + 1] - p.seq_off[s];
            if (!n) continue;
            int32_t last[ENGRAM_CTX];
            for (int32_t j = 0; j < ENGRAM_CTX; j++)
                last[j] = j < n ? batch->tokens[p.tok_at[p.seq_off[s + 1] - 1 - j]] : seq_of(&p, s)->last[j - n];
            memcpy(seq_of(&p, s)->last, last, sizeof last);
        }
    free(hown);
    return og_fwd_failure(st, failed_here, "deepseek41 forward pass", err, errlen);
}

const og_arch og_arch_deepseek41 = {
    .name = "deepseek41",
    .describe = ds41_describe,
    .load = ds41_load,
    .free_impl = ds41_free_impl,
    .role = og_ds41_role,
    .scratch_bytes = ds41_scratch_bytes,
    .forward_batch = ds41_forward_batch,
    .set_option = ds41_set_option,
    .state_fork = ds41_state_fork,
    .state_walk = ds41_state_walk,
    .state_new = ds41_state_new,
};
