/* deepseek2: hyperparameters, weight binding and the forward pass, written out
 * plainly in data-flow order (shared/spec/deepseek2.md; section numbers below).
 * The experts of a layer go to the run context's dispatcher (og_dispatch_type)
 * with the (token, expert, weight) list: the seam where placement splits the
 * work between device and host (src/moe/dispatch.c). */
#include "og_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- loading ------------------------------------------------------------- */

typedef struct loader {
    og_model *m;
    char *err;
    size_t errlen;
} loader;

static og_status key_u32(loader *l, const char *key, uint32_t *out, bool required, uint32_t dflt) {
    char full[128];
    snprintf(full, sizeof full, "deepseek2.%s", key);
    og_status st = og_gguf_get_u32(l->m->gguf, full, out);
    if (st == OG_ERR_NOT_FOUND && !required) {
        *out = dflt;
        return OG_OK;
    }
    if (st == OG_ERR_NOT_FOUND) return og_fail(l->err, l->errlen, st, "missing key %s", full);
    if (st) return og_fail(l->err, l->errlen, OG_ERR_FORMAT, "key %s is not a non-negative integer", full);
    return OG_OK;
}

static og_status key_f32(loader *l, const char *key, float *out, float dflt) {
    char full[128];
    snprintf(full, sizeof full, "deepseek2.%s", key);
    og_status st = og_gguf_get_f32(l->m->gguf, full, out);
    if (st == OG_ERR_NOT_FOUND) {
        *out = dflt;
        return OG_OK;
    }
    return st ? og_fail(l->err, l->errlen, OG_ERR_FORMAT, "key %s is not a number", full) : OG_OK;
}

/* Binds tensor `name` as a weight with rows of K elements: expects shape
 * [K, rows] or [K, rows_a, rows_b] with rows = rows_a * rows_b (3-D stacks). */
static og_status bind(loader *l, const char *name, uint64_t K, uint64_t rows, og_weight *w, bool required) {
    const og_gguf_tensor *t = og_gguf_find_tensor(l->m->gguf, name);
    memset(w, 0, sizeof *w);
    if (!t) return required ? og_fail(l->err, l->errlen, OG_ERR_NOT_FOUND, "missing tensor %s", name) : OG_OK;
    if (!t->data) return og_fail(l->err, l->errlen, OG_ERR_INVALID_ARG, "tensor %s has no data (a header-only open)", name);
    uint64_t trows = (uint64_t)t->ne[1] * (uint64_t)t->ne[2] * (uint64_t)t->ne[3];
    if ((uint64_t)t->ne[0] != K || trows != rows)
        return og_fail(l->err, l->errlen, OG_ERR_FORMAT, "tensor %s has shape [%lld, %llu] but the hyperparameters say [%llu, %llu]",
                       name, (long long)t->ne[0], (unsigned long long)trows, (unsigned long long)K, (unsigned long long)rows);
    if (!og_quant_traits(t->type) || !og_quant_traits(t->type)->vec_dot)
        return og_fail(l->err, l->errlen, OG_ERR_UNSUPPORTED, "tensor %s is %s, which onegpu has no kernels for", name,
                       og_type_name(t->type));
    uint64_t rb;
    if (og_row_bytes(t->type, K, &rb))
        return og_fail(l->err, l->errlen, OG_ERR_FORMAT, "tensor %s: rows of %llu are not whole %s blocks", name,
                       (unsigned long long)K, og_type_name(t->type));
    *w = (og_weight){t->type, t->data, (int64_t)K, (int64_t)rows, (size_t)rb};
    return OG_OK;
}

/* 1-D F32 tensor of n elements. */
static og_status bind_vec(loader *l, const char *name, uint64_t n, const float **out, bool required) {
    const og_gguf_tensor *t = og_gguf_find_tensor(l->m->gguf, name);
    *out = NULL;
    if (!t) return required ? og_fail(l->err, l->errlen, OG_ERR_NOT_FOUND, "missing tensor %s", name) : OG_OK;
    if (!t->data) return og_fail(l->err, l->errlen, OG_ERR_INVALID_ARG, "tensor %s has no data (a header-only open)", name);
    if (t->type != OG_TYPE_F32 || (uint64_t)t->ne[0] != n || t->ne[1] * t->ne[2] * t->ne[3] != 1)
        return og_fail(l->err, l->errlen, OG_ERR_FORMAT, "tensor %s must be F32 [%llu]", name, (unsigned long long)n);
    *out = t->data;
    return OG_OK;
}

#define TRY(x) do { og_status st_ = (x); if (st_) return st_; } while (0)

/* Refuses v outside lo..hi, naming the key (OG_ERR_FORMAT). */
static og_status bound_u32(loader *l, const char *key, uint32_t v, uint32_t lo, uint32_t hi) {
    if (v >= lo && v <= hi) return OG_OK;
    return og_fail(l->err, l->errlen, OG_ERR_FORMAT, "key deepseek2.%s = %u is outside %u..%u", key, v, lo, hi);
}

/* Refuses a float that is not finite or lies outside [lo, hi] (open at lo when
 * lo_open), naming the key (OG_ERR_FORMAT). */
static og_status bound_f32(loader *l, const char *key, float v, float lo, bool lo_open, float hi) {
    if (isfinite(v) && (lo_open ? v > lo : v >= lo) && v <= hi) return OG_OK;
    return og_fail(l->err, l->errlen, OG_ERR_FORMAT, "key deepseek2.%s = %g is outside %s%g, %g]", key, (double)v,
                   lo_open ? "(" : "[", (double)lo, (double)hi);
}

/* The integer hyperparameters against OG_DS2_MAX_* and each other (§1), before
 * anything is sized by them. */
static og_status bound_hparams(loader *l) {
    const og_hparams *h = &l->m->hp;
    TRY(bound_u32(l, "block_count", h->n_layer, 1, OG_DS2_MAX_LAYER));
    TRY(bound_u32(l, "embedding_length", h->n_embd, 1, OG_DS2_MAX_EMBD));
    TRY(bound_u32(l, "context_length", h->n_ctx_train, 1, OG_DS2_MAX_CTX));
    TRY(bound_u32(l, "attention.head_count", h->n_head, 1, OG_DS2_MAX_HEAD));
    TRY(bound_u32(l, "attention.q_lora_rank", h->q_lora_rank, 0, OG_DS2_MAX_Q_RANK));
    TRY(bound_u32(l, "attention.kv_lora_rank", h->kv_lora_rank, 1, OG_DS2_MAX_KV_RANK));
    TRY(bound_u32(l, "rope.dimension_count", h->d_rope, 2, OG_DS2_MAX_ROPE));
    if (h->d_rope % 2)
        return og_fail(l->err, l->errlen, OG_ERR_FORMAT, "key deepseek2.rope.dimension_count = %u is odd (RoPE rotates pairs)",
                       h->d_rope);
    TRY(bound_u32(l, h->mla_format ? "attention.key_length_mla" : "attention.key_length", h->d_qk, h->d_rope + 1,
                  OG_DS2_MAX_HEAD_DIM));
    TRY(bound_u32(l, h->mla_format ? "attention.value_length_mla" : "attention.value_length", h->d_v, 1,
                  OG_DS2_MAX_HEAD_DIM));
    TRY(bound_u32(l, "leading_dense_block_count", h->n_dense, 0, h->n_layer));
    TRY(bound_u32(l, "feed_forward_length", h->n_ff, h->n_dense ? 1 : 0, OG_DS2_MAX_FF));
    TRY(bound_u32(l, "expert_count", h->n_expert, 0, OG_DS2_MAX_EXPERT));
    TRY(bound_u32(l, "expert_used_count", h->n_expert_used, 0, OG_DS2_MAX_EXPERT_USED));
    TRY(bound_u32(l, "expert_shared_count", h->n_expert_shared, 0, OG_DS2_MAX_EXPERT_SHARED));
    TRY(bound_u32(l, "expert_feed_forward_length", h->n_ff_exp, 0, OG_DS2_MAX_FF));
    TRY(bound_u32(l, "expert_group_count", h->n_group, 0, OG_DS2_MAX_GROUP));
    if (h->n_dense == h->n_layer) return OG_OK; /* no MoE layer: the expert keys size nothing */
    /* MoE sanity (§1) */
    TRY(bound_u32(l, "expert_count", h->n_expert, 1, OG_DS2_MAX_EXPERT));
    TRY(bound_u32(l, "expert_used_count", h->n_expert_used, 1, h->n_expert < OG_DS2_MAX_EXPERT_USED ? h->n_expert
                                                                                                   : OG_DS2_MAX_EXPERT_USED));
    TRY(bound_u32(l, "expert_feed_forward_length", h->n_ff_exp, 1, OG_DS2_MAX_FF));
    if (h->gating != 1 && h->gating != 2)
        return og_fail(l->err, l->errlen, OG_ERR_UNSUPPORTED, "key deepseek2.expert_gating_func = %u (1 softmax, 2 sigmoid)",
                       h->gating);
    if (h->n_group > 1) {
        if (h->n_expert % h->n_group || h->n_expert / h->n_group < 2)
            return og_fail(l->err, l->errlen, OG_ERR_FORMAT,
                           "key deepseek2.expert_group_count = %u must divide expert_count (%u) into groups of >= 2 experts",
                           h->n_group, h->n_expert);
        TRY(bound_u32(l, "expert_group_used_count", h->n_group_used, 1, h->n_group - 1));
        const uint32_t kept = h->n_expert / h->n_group * h->n_group_used;
        if (h->n_expert_used > kept)
            return og_fail(l->err, l->errlen, OG_ERR_FORMAT,
                           "key deepseek2.expert_used_count = %u is more than the %u experts of the %u kept groups",
                           h->n_expert_used, kept, h->n_group_used);
    }
    return OG_OK;
}

static og_status load_hparams(loader *l) {
    og_hparams *h = &l->m->hp;
    char arch[32] = "";
    og_gguf_get_cstr(l->m->gguf, "general.architecture", arch, sizeof arch);
    if (strcmp(arch, "deepseek2"))
        return og_fail(l->err, l->errlen, OG_ERR_UNSUPPORTED, "architecture '%s' is not supported (deepseek2 is)", arch);
    TRY(key_u32(l, "block_count", &h->n_layer, true, 0));
    TRY(key_u32(l, "embedding_length", &h->n_embd, true, 0));
    TRY(key_u32(l, "context_length", &h->n_ctx_train, true, 0));
    TRY(key_u32(l, "attention.head_count", &h->n_head, true, 0));
    TRY(key_u32(l, "attention.q_lora_rank", &h->q_lora_rank, false, 0));
    TRY(key_u32(l, "attention.kv_lora_rank", &h->kv_lora_rank, true, 0));
    TRY(key_u32(l, "rope.dimension_count", &h->d_rope, true, 0));
    uint32_t kl_mla, vl_mla, kl, vl;
    TRY(key_u32(l, "attention.key_length_mla", &kl_mla, false, 0));
    TRY(key_u32(l, "attention.value_length_mla", &vl_mla, false, 0));
    TRY(key_u32(l, "attention.key_length", &kl, false, 0));
    TRY(key_u32(l, "attention.value_length", &vl, false, 0));
    h->mla_format = kl_mla && vl_mla; /* §1 loader rules */
    h->d_qk = h->mla_format ? kl_mla : kl;
    h->d_v = h->mla_format ? vl_mla : vl;
    TRY(key_u32(l, "feed_forward_length", &h->n_ff, false, 0));
    TRY(key_u32(l, "leading_dense_block_count", &h->n_dense, false, 0));
    TRY(key_u32(l, "expert_count", &h->n_expert, false, 0));
    TRY(key_u32(l, "expert_used_count", &h->n_expert_used, false, 0));
    TRY(key_u32(l, "expert_shared_count", &h->n_expert_shared, false, 0));
    TRY(key_u32(l, "expert_feed_forward_length", &h->n_ff_exp, false, 0));
    TRY(key_u32(l, "expert_gating_func", &h->gating, false, 1)); /* absent: softmax (§1) */
    uint32_t g = 0, gu = 0;
    char gk[64];
    snprintf(gk, sizeof gk, "deepseek2.expert_group_count");
    bool have_groups = og_gguf_find_kv(l->m->gguf, gk) != NULL;
    TRY(key_u32(l, "expert_group_count", &g, false, 1));
    TRY(key_u32(l, "expert_group_used_count", &gu, false, 1));
    h->n_group = g > 1 ? g : 1;
    h->n_group_used = g > 1 ? gu : 1;
    TRY(bound_hparams(l));
    h->d_nope = h->d_qk - h->d_rope;
    if (!have_groups && h->n_expert)
        og_log(&l->m->log, OG_LOG_INFO, "no expert_group_count key: routing without group limits, as llama.cpp does for such files");
    else if (h->n_group > 1)
        og_log(&l->m->log, OG_LOG_INFO, "routing: %u groups, keep %u, group score = sum of its top 2 (llama.cpp's rule)",
               h->n_group, h->n_group_used);
    TRY(key_f32(l, "expert_weights_scale", &h->expert_scale, 1.0f));
    if (h->expert_scale == 0.0f) h->expert_scale = 1.0f;
    bool norm = false;
    h->expert_norm = og_gguf_get_bool(l->m->gguf, "deepseek2.expert_weights_norm", &norm) == OG_OK && norm;
    TRY(bound_f32(l, "expert_weights_scale", h->expert_scale, 0.0f, true, 1e4f));
    TRY(key_f32(l, "attention.layer_norm_rms_epsilon", &h->rms_eps, 1e-6f));
    TRY(bound_f32(l, "attention.layer_norm_rms_epsilon", h->rms_eps, 0.0f, true, 1.0f));
    /* RoPE / YaRN (§4) and the attention scale (§3) */
    float base, factor = 1.0f, log_mul = 0.0f;
    TRY(key_f32(l, "rope.freq_base", &base, 10000.0f));
    char stype[16] = "none";
    og_gguf_get_cstr(l->m->gguf, "deepseek2.rope.scaling.type", stype, sizeof stype);
    TRY(key_f32(l, "rope.scaling.factor", &factor, 1.0f));
    uint32_t orig;
    TRY(key_u32(l, "rope.scaling.original_context_length", &orig, false, h->n_ctx_train));
    bool yarn = !strcmp(stype, "yarn") && factor > 1.0f;
    bool have_log_mul = og_gguf_find_kv(l->m->gguf, "deepseek2.rope.scaling.yarn_log_multiplier") != NULL;
    TRY(key_f32(l, "rope.scaling.yarn_log_multiplier", &log_mul, 0.0f));
    float bf = 32.0f, bs = 1.0f;
    TRY(key_f32(l, "rope.scaling.yarn_beta_fast", &bf, 32.0f));
    TRY(key_f32(l, "rope.scaling.yarn_beta_slow", &bs, 1.0f));
    /* base <= 1 makes the angles constant and YaRN's correction range divide by ln 1 */
    TRY(bound_f32(l, "rope.freq_base", base, 1.0f, true, 1e12f));
    TRY(bound_f32(l, "rope.scaling.factor", factor, 0.0f, true, 65536.0f));
    if (yarn) {
        TRY(bound_u32(l, "rope.scaling.original_context_length", orig, 1, OG_DS2_MAX_CTX));
        TRY(bound_f32(l, "rope.scaling.yarn_log_multiplier", log_mul, 0.0f, false, 10.0f));
        TRY(bound_f32(l, "rope.scaling.yarn_beta_fast", bf, 0.0f, true, 1e4f));
        TRY(bound_f32(l, "rope.scaling.yarn_beta_slow", bs, 0.0f, true, 1e4f));
    }
    h->rope = (og_rope){.d_rope = (int)h->d_rope, .base = base, .freq_scale = 1.0f, .ext_factor = 0.0f,
                        .n_ctx_orig = (int)orig, .beta_fast = bf, .beta_slow = bs, .mscale = 1.0f};
    float mscale = 1.0f;
    if (yarn) {
        h->rope.freq_scale = 1.0f / factor;
        h->rope.ext_factor = 1.0f;
        if (have_log_mul) {
            mscale = 1.0f + log_mul * logf(factor); /* m = 1 + 0.1 mscale_all_dim ln s */
        } else {
            og_log(&l->m->log, OG_LOG_WARN, "YaRN without yarn_log_multiplier: generic YaRN magnitude (suspicious file)");
            h->rope.mscale = 1.0f + 0.1f * logf(factor);
            mscale = h->rope.mscale;
        }
    } else if (!strcmp(stype, "linear") && factor > 0) {
        h->rope.freq_scale = 1.0f / factor;
    }
    h->kq_scale = mscale * mscale / sqrtf((float)h->d_qk);
    return OG_OK;
}

/* n_vocab from token_embd's rows, bounded by OG_DS2_MAX_VOCAB. */
static og_status read_vocab(loader *l, const og_gguf_tensor *te, uint32_t *n_vocab) {
    if (te->ne[1] < 1 || te->ne[1] > (int64_t)OG_DS2_MAX_VOCAB)
        return og_fail(l->err, l->errlen, OG_ERR_FORMAT, "tensor token_embd.weight has %lld rows (the vocabulary): outside 1..%u",
                       (long long)te->ne[1], OG_DS2_MAX_VOCAB);
    *n_vocab = (uint32_t)te->ne[1];
    return OG_OK;
}

static og_status load_weights(loader *l) {
    og_model *m = l->m;
    const og_hparams *h = &m->hp;
    const uint64_t D = h->n_embd, H = h->n_head;
    const og_gguf_tensor *te = og_gguf_find_tensor(m->gguf, "token_embd.weight");
    if (!te) return og_fail(l->err, l->errlen, OG_ERR_NOT_FOUND, "missing tensor token_embd.weight");
    TRY(read_vocab(l, te, &m->hp.n_vocab));
    TRY(bind(l, "token_embd.weight", D, m->hp.n_vocab, &m->tok_embd, true));
    TRY(bind_vec(l, "output_norm.weight", D, &m->out_norm, true));
    TRY(bind(l, "output.weight", D, m->hp.n_vocab, &m->output, false));
    if (!m->output.data) m->output = m->tok_embd; /* tied (§2) */
    m->layers = calloc(h->n_layer, sizeof *m->layers);
    if (!m->layers) return og_fail(l->err, l->errlen, OG_ERR_NOMEM, "out of memory");
    char n[96];
#define NM(s) (snprintf(n, sizeof n, "blk.%u." s, i), n)
    for (uint32_t i = 0; i < h->n_layer; i++) {
        og_layer *L = &m->layers[i];
        TRY(bind_vec(l, NM("attn_norm.weight"), D, &L->attn_norm, true));
        if (h->q_lora_rank) {
            TRY(bind(l, NM("attn_q_a.weight"), D, h->q_lora_rank, &L->q_a, true));
            TRY(bind_vec(l, NM("attn_q_a_norm.weight"), h->q_lora_rank, &L->q_a_norm, true));
            TRY(bind(l, NM("attn_q_b.weight"), h->q_lora_rank, H * h->d_qk, &L->q_b, true));
        } else {
            TRY(bind(l, NM("attn_q.weight"), D, H * h->d_qk, &L->q, true));
        }
        TRY(bind(l, NM("attn_kv_a_mqa.weight"), D, h->kv_lora_rank + h->d_rope, &L->kv_a, true));
        TRY(bind_vec(l, NM("attn_kv_a_norm.weight"), h->kv_lora_rank, &L->kv_a_norm, true));
        if (h->mla_format) {
            TRY(bind(l, NM("attn_k_b.weight"), h->d_nope, (uint64_t)h->kv_lora_rank * H, &L->k_b, true));
            TRY(bind(l, NM("attn_v_b.weight"), h->kv_lora_rank, (uint64_t)h->d_v * H, &L->v_b, true));
        } else {
            og_weight kvb;
            TRY(bind(l, NM("attn_kv_b.weight"), h->kv_lora_rank, H * (h->d_nope + h->d_v), &kvb, true));
            size_t cnt = (size_t)kvb.n_rows * (size_t)kvb.K;
            L->kv_b_f32 = malloc(cnt * sizeof(float));
            if (!L->kv_b_f32) return og_fail(l->err, l->errlen, OG_ERR_NOMEM, "out of memory");
            for (int64_t r = 0; r < kvb.n_rows; r++)
                og_dequantize_row(kvb.type, (const uint8_t *)kvb.data + (size_t)r * kvb.row_bytes, L->kv_b_f32 + r * kvb.K, kvb.K);
        }
        TRY(bind(l, NM("attn_output.weight"), H * h->d_v, D, &L->o, true));
        TRY(bind_vec(l, NM("ffn_norm.weight"), D, &L->ffn_norm, true));
        L->moe = i >= h->n_dense;
        if (!L->moe) {
            TRY(bind(l, NM("ffn_gate.weight"), D, h->n_ff, &L->gate, true));
            TRY(bind(l, NM("ffn_up.weight"), D, h->n_ff, &L->up, true));
            TRY(bind(l, NM("ffn_down.weight"), h->n_ff, D, &L->down, true));
            continue;
        }
        const uint64_t E = h->n_expert, Fe = h->n_ff_exp;
        TRY(bind(l, NM("ffn_gate_inp.weight"), D, E, &L->router, true));
        if (L->router.type != OG_TYPE_F32)
            return og_fail(l->err, l->errlen, OG_ERR_UNSUPPORTED, "%s must be F32 (routers are never quantized)", n);
        TRY(bind_vec(l, NM("exp_probs_b.bias"), E, &L->exp_bias, false));
        TRY(bind(l, NM("ffn_gate_exps.weight"), D, Fe * E, &L->gate_exps, true));
        TRY(bind(l, NM("ffn_up_exps.weight"), D, Fe * E, &L->up_exps, true));
        TRY(bind(l, NM("ffn_down_exps.weight"), Fe, D * E, &L->down_exps, true));
        if (h->n_expert_shared) {
            const uint64_t Fs = (uint64_t)h->n_expert_shared * Fe;
            TRY(bind(l, NM("ffn_gate_shexp.weight"), D, Fs, &L->gate_sh, true));
            TRY(bind(l, NM("ffn_up_shexp.weight"), D, Fs, &L->up_sh, true));
            TRY(bind(l, NM("ffn_down_shexp.weight"), Fs, D, &L->down_sh, true));
        }
    }
#undef NM
    return OG_OK;
}

og_status og_hparams_read(const og_gguf *g, const og_logger *lg, og_hparams *hp, char *err, size_t errlen) {
    og_model tmp = {.gguf = (og_gguf *)g};
    if (lg) tmp.log = *lg;
    else tmp.log = (og_logger){.level = OG_LOG_WARN};
    loader l = {&tmp, err, errlen};
    og_status st = load_hparams(&l);
    if (st) return st;
    const og_gguf_tensor *te = og_gguf_find_tensor(g, "token_embd.weight");
    if (!te) return og_fail(err, errlen, OG_ERR_NOT_FOUND, "missing tensor token_embd.weight");
    if ((st = read_vocab(&l, te, &tmp.hp.n_vocab))) return st;
    *hp = tmp.hp;
    return OG_OK;
}

og_status og_model_load_gguf(og_gguf *g, const og_logger *lg, og_model **out, char *err, size_t errlen) {
    *out = NULL;
    og_model *m = calloc(1, sizeof *m);
    if (!m) {
        og_gguf_close(g);
        return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    }
    if (lg) m->log = *lg;
    else m->log = (og_logger){.level = OG_LOG_WARN};
    m->gguf = g;
    loader l = {m, err, errlen};
    og_status st;
    if ((st = load_hparams(&l)) || (st = load_weights(&l))) {
        og_model_free(m);
        return st;
    }
    *out = m;
    return OG_OK;
}

og_status og_model_load(const char *path, const og_logger *lg, og_model **out, char *err, size_t errlen) {
    *out = NULL;
    og_gguf *g;
    og_status st = og_gguf_open(path, 0, &g, err, errlen);
    if (st) return st;
    if ((st = og_model_load_gguf(g, lg, out, err, errlen))) {
        char tmp[1024];
        snprintf(tmp, sizeof tmp, "%s: %s", path, err);
        snprintf(err, errlen, "%s", tmp);
    }
    return st;
}

void og_model_free(og_model *m) {
    if (!m) return;
    if (m->layers)
        for (uint32_t i = 0; i < m->hp.n_layer; i++) free(m->layers[i].kv_b_f32);
    free(m->layers);
    og_gguf_close(m->gguf);
    free(m);
}

void og_kv_free(og_kv *kv) {
    for (int i = 0; i < kv->n_blocks; i++) free(kv->blocks[i]);
    free(kv->blocks);
    memset(kv, 0, sizeof *kv);
}

/* ---- forward ------------------------------------------------------------ */

/* Cache row (c then k_pe) of layer il at position pos. */
static float *kv_row(const og_model *m, const og_kv *kv, uint32_t il, int32_t pos) {
    const int w = (int)(m->hp.kv_lora_rank + m->hp.d_rope);
    return kv->blocks[pos / OG_KV_BLOCK] + ((size_t)il * OG_KV_BLOCK + (size_t)(pos % OG_KV_BLOCK)) * (size_t)w;
}

static og_status kv_reserve(const og_model *m, og_kv *kv, int32_t n_pos) {
    const size_t bw = (size_t)m->hp.n_layer * OG_KV_BLOCK * (m->hp.kv_lora_rank + m->hp.d_rope);
    while (kv->n_blocks * OG_KV_BLOCK < n_pos) {
        if (kv->n_blocks == kv->cap_blocks) {
            int cap = kv->cap_blocks ? kv->cap_blocks * 2 : 8;
            float **nb = realloc(kv->blocks, (size_t)cap * sizeof *nb);
            if (!nb) return OG_ERR_NOMEM;
            kv->blocks = nb;
            kv->cap_blocks = cap;
        }
        if (!(kv->blocks[kv->n_blocks] = malloc(bw * sizeof(float)))) return OG_ERR_NOMEM;
        kv->n_blocks++;
    }
    return OG_OK;
}

/* A scratch arena for one forward call. */
typedef struct scratch {
    float *p;
    size_t used, cap;
} scratch;
static float *take(scratch *s, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (s->used + n > s->cap) return NULL;
    float *r = s->p + s->used;
    s->used += n;
    return r;
}

/* The quantized-activation buffer of the matmuls, grown as needed and kept for
 * the whole forward call (a decode step does hundreds of small matmuls). */
typedef struct act_buf {
    void *p;
    size_t cap;
} act_buf;

/* Below this many weight elements x rows of activations a matmul runs on the
 * calling thread: waking the pool costs more than it saves. */
#define MM_PARALLEL_MIN (1 << 14)

/* Tokens whose per-head k_b / v_b products and attention run together: four or
 * more let the matmuls take four activation rows per weight pass (vec_dot4). */
#define ATT_CHUNK 16

/* One forward call's state for the matmuls. */
typedef struct fwd {
    const og_run_ctx *rc;
    act_buf ab;
    og_numerics nm;     /* every product's numerics: rc->host_numerics */
    const bool *exact;  /* [n_tok] or NULL (og_batch.exact): rows that compute canonically whatever nm */
} fwd;

static og_status mm_rows(fwd *f, const og_matmul_job *jobs, int n, int64_t t_base);

/* y[m][rows] = x[m][K] . W^T through the kernels; activation row a is token a.
 * The fork's own fast path when no row asks for canonical numerics. */
static og_status mm(fwd *f, const og_weight *w, const float *x, int64_t m, float *y) {
    if (f->nm == OG_NUMERICS_CANONICAL || f->exact) {
        og_matmul_job j = {w, x, m, y, f->nm};
        return mm_rows(f, &j, 1, 0);
    }
    const og_run_ctx *rc = f->rc;
    act_buf *ab = &f->ab;
    size_t sb = og_cpu_matmul_scratch(w->type, w->K, m);
    if (sb > ab->cap) {
        void *np = realloc(ab->p, sb);
        if (!np) return OG_ERR_NOMEM;
        ab->p = np;
        ab->cap = sb;
    }
    og_pool *pool = w->n_rows * w->K * m < MM_PARALLEL_MIN ? NULL : rc->pool;
    return og_cpu_matmul(rc->kern, pool, w, x, m, y, ab->p, ab->cap);
}


/* Rows [r0, r0 + n) of w as their own weight. */
static og_weight slice(const og_weight *w, int64_t r0, int64_t n) {
    og_weight s = *w;
    s.data = (const uint8_t *)w->data + (size_t)r0 * w->row_bytes;
    s.n_rows = n;
    return s;
}

/* Several products in one pool run (og_cpu_matmul_multi). */
static og_status mm_multi(fwd *f, const og_matmul_job *jobs, int n) {
    size_t sb = og_cpu_matmul_multi_scratch(jobs, n);
    if (sb > f->ab.cap) {
        void *np = realloc(f->ab.p, sb);
        if (!np) return OG_ERR_NOMEM;
        f->ab.p = np;
        f->ab.cap = sb;
    }
    return og_cpu_matmul_multi(f->rc->kern, f->rc->pool, jobs, n, f->ab.p, f->ab.cap);
}

/* Jobs whose activation row a is token t_base + a (rows [t_base, t_base + m) of
 * the batch), run with the forward pass's numerics (their own numerics field is
 * ignored): f->nm for every row, except that a row f->exact marks computes
 * canonically. A job is cut into runs of consecutive rows of one numerics; each
 * output row is the bits og_cpu_matmul_multi gives for that row alone, so the
 * cut changes no result. At most MM_ROWS_MAX jobs per pool run. Errors:
 * og_cpu_matmul_multi's, OG_ERR_NOMEM. */
#define MM_ROWS_MAX 64
static og_status mm_rows(fwd *f, const og_matmul_job *jobs, int n, int64_t t_base) {
    og_matmul_job buf[MM_ROWS_MAX];
    int nb = 0;
    og_status st = OG_OK;
    for (int j = 0; j < n && !st; j++) {
        const og_matmul_job *jb = &jobs[j];
        for (int64_t a0 = 0; a0 < jb->m && !st;) {
            const bool ex0 = f->exact && f->nm != OG_NUMERICS_CANONICAL && f->exact[t_base + a0];
            int64_t a1 = a0 + 1;
            if (f->exact && f->nm != OG_NUMERICS_CANONICAL)
                while (a1 < jb->m && f->exact[t_base + a1] == ex0) a1++;
            else
                a1 = jb->m;
            if (nb == MM_ROWS_MAX) {
                st = mm_multi(f, buf, nb);
                nb = 0;
                if (st) break;
            }
            buf[nb++] = (og_matmul_job){jb->w, jb->x + a0 * jb->w->K, a1 - a0, jb->y + a0 * jb->w->n_rows,
                                        ex0 ? OG_NUMERICS_CANONICAL : f->nm};
            a0 = a1;
        }
    }
    if (!st && nb) st = mm_multi(f, buf, nb);
    return st;
}

static og_status swiglu_ffn(fwd *rc, const og_weight *gate, const og_weight *up, const og_weight *down,
                            const float *x, int64_t n_tok, float *out) {
    const int64_t F = gate->n_rows;
    float *g = malloc((size_t)(n_tok * F) * sizeof *g), *u = malloc((size_t)(n_tok * F) * sizeof *u);
    og_status st = (!g || !u) ? OG_ERR_NOMEM : OG_OK;
    og_matmul_job j2[2] = {{gate, x, n_tok, g, OG_NUMERICS_FORK}, {up, x, n_tok, u, OG_NUMERICS_FORK}};
    if (!st) st = mm_rows(rc, j2, 2, 0);
    if (!st) {
        og_swiglu(g, g, u, n_tok * F);
        st = mm(rc, down, g, n_tok, out);
    }
    free(g);
    free(u);
    return st;
}

/* Router (§5): selects k experts per token and their weights. Errors: OG_ERR_NOMEM. */
static og_status route(const og_hparams *h, const og_layer *L, const float *logits_in, int32_t tok, og_route *out) {
    const int E = (int)h->n_expert, k = (int)h->n_expert_used;
    float *sc = malloc((size_t)E * 2 * sizeof(float));
    if (!sc) return OG_ERR_NOMEM;
    float *sel = sc + E;
    memcpy(sc, logits_in, (size_t)E * sizeof(float));
    if (h->gating == 1) og_softmax(sc, E);
    else
        for (int e = 0; e < E; e++) sc[e] = 1.0f / (1.0f + expf(-sc[e]));
    for (int e = 0; e < E; e++) sel[e] = sc[e] + (L->exp_bias ? L->exp_bias[e] : 0.0f);
    if (h->n_group > 1) {
        const int G = (int)h->n_group, per = E / G;
        float gs[OG_DS2_MAX_GROUP];
        for (int g = 0; g < G; g++) { /* group score: sum of its two best */
            float a = -INFINITY, b = -INFINITY;
            for (int e = g * per; e < (g + 1) * per; e++) {
                if (sel[e] > a) {
                    b = a;
                    a = sel[e];
                } else if (sel[e] > b) {
                    b = sel[e];
                }
            }
            gs[g] = a + b;
        }
        int32_t keep[OG_DS2_MAX_GROUP];
        og_topk(gs, G, (int)h->n_group_used, keep);
        for (int g = 0; g < G; g++) {
            bool kept = false;
            for (uint32_t j = 0; j < h->n_group_used; j++) kept |= keep[j] == g;
            if (!kept)
                for (int e = g * per; e < (g + 1) * per; e++) sel[e] = -INFINITY;
        }
    }
    int32_t idx[OG_DS2_MAX_EXPERT_USED];
    og_topk(sel, E, k, idx);
    double sum = 0;
    for (int j = 0; j < k; j++) sum += sc[idx[j]];
    for (int j = 0; j < k; j++) {
        float w = sc[idx[j]];
        if (h->expert_norm) w = (float)(w / fmax(sum, 6.103515625e-5));
        if (h->expert_scale != 1.0f) w *= h->expert_scale;
        out[j] = (og_route){tok, idx[j], w};
    }
    free(sc);
    return OG_OK;
}

/* Attention of a chunk of tokens over their caches, the (token, head) pairs shared
 * out between threads: scores = kq_scale ([q_abs, q_pe] . [c, k_pe]), softmax,
 * ctx = sum att * c. Each pair's arithmetic is the same whatever else is in the
 * chunk, so a token's result never depends on the batch. */
typedef struct att_job {
    const og_model *m;
    og_kv *const *kvs;     /* caches by sequence */
    const int32_t *seq;    /* [n] sequence of each token */
    const int32_t *pos;    /* [n] position of each token */
    int64_t n;             /* tokens in the chunk (at most ATT_CHUNK) */
    uint32_t il;
    const float *q;        /* [n][H d_qk] */
    const float *qabs;     /* [H][ATT_CHUNK][r_kv] */
    float *ctx;            /* [H][ATT_CHUNK][r_kv] out */
    float *att;            /* [n_threads][max_pos + r_kv + d_rope] scratch */
    size_t att_stride;
    og_vec_dot_fn fdot;    /* the fork's f32 dot (this tier's fastest order) */
    og_dot_f32_fn ddot;    /* the warp-order f32 dot (og_dot_f32_device: the same bits in every tier) */
    bool canonical;        /* every token's scores by ddot */
    const bool *exact;     /* [n] or NULL: tokens whose scores use ddot whatever canonical */
    void (*axpy)(int64_t n, float a, const float *x, float *y);
} att_job;

static void attend_heads(void *vctx, int ith, int nth) {
    const att_job *j = vctx;
    const og_hparams *h = &j->m->hp;
    const int64_t r_kv = h->kv_lora_rank, dr = h->d_rope, dn = h->d_nope, H = h->n_head;
    float *att = j->att + (size_t)ith * j->att_stride, *qc = att + (j->att_stride - (size_t)(r_kv + dr));
    for (int64_t p = ith; p < j->n * H; p += nth) {
        const int64_t i = p / H, hh = p % H;
        const int32_t pos = j->pos[i];
        const og_kv *kv = j->kvs[j->seq[i]];
        /* [q_abs, q_pe] against the cached [c, k_pe]: one dot per key */
        memcpy(qc, j->qabs + (hh * ATT_CHUNK + i) * r_kv, (size_t)r_kv * sizeof *qc);
        memcpy(qc + r_kv, j->q + i * H * h->d_qk + hh * h->d_qk + dn, (size_t)dr * sizeof *qc);
        if (j->canonical || (j->exact && j->exact[i]))
            for (int32_t s = 0; s <= pos; s++) att[s] = j->ddot(kv_row(j->m, kv, j->il, s), qc, r_kv + dr) * h->kq_scale;
        else
            for (int32_t s = 0; s <= pos; s++) {
                float sc;
                j->fdot(r_kv + dr, &sc, qc, kv_row(j->m, kv, j->il, s));
                att[s] = sc * h->kq_scale;
            }
        og_softmax(att, pos + 1);
        float *ch = j->ctx + (hh * ATT_CHUNK + i) * r_kv;
        for (int64_t r = 0; r < r_kv; r++) ch[r] = 0;
        for (int32_t s = 0; s <= pos; s++) j->axpy(r_kv, att[s], kv_row(j->m, kv, j->il, s), ch);
    }
}

og_status og_model_forward(const og_model *m, const og_run_ctx *rc, og_kv *kv, const int32_t *tokens, int n_tok,
                           float *logits, bool all_logits, char *err, size_t errlen) {
    if (n_tok <= 0) return og_fail(err, errlen, OG_ERR_INVALID_ARG, "no tokens");
    int32_t *seq = calloc((size_t)n_tok, sizeof *seq);
    bool *want = calloc((size_t)n_tok, sizeof *want);
    if (!seq || !want) {
        free(seq);
        free(want);
        return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < n_tok; i++) want[i] = all_logits || i == n_tok - 1;
    og_batch b = {n_tok, tokens, seq, want, NULL};
    og_status st = og_model_forward_batch(m, rc, &kv, 1, &b, logits, err, errlen);
    free(seq);
    free(want);
    return st;
}

og_status og_model_forward_batch(const og_model *m, const og_run_ctx *rc, og_kv *const *kvs, int n_seq,
                                 const og_batch *batch, float *logits, char *err, size_t errlen) {
    const og_hparams *h = &m->hp;
    const int n_tok = batch->n_tok;
    const int32_t *tokens = batch->tokens;
    const int64_t D = h->n_embd, H = h->n_head, r_kv = h->kv_lora_rank, dr = h->d_rope, dn = h->d_nope;
    const int64_t dqk = h->d_qk, dv = h->d_v, T = n_tok;
    if (n_tok <= 0 || n_seq <= 0) return og_fail(err, errlen, OG_ERR_INVALID_ARG, "no tokens");
    if (h->n_dense < h->n_layer && (!rc->dispatch || !rc->dispatch->type || !rc->dispatch->type->moe_layer))
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "a MoE model needs a dispatcher (og_run_ctx.dispatch)");
    for (int i = 0; i < n_tok; i++) {
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= h->n_vocab)
            return og_fail(err, errlen, OG_ERR_INVALID_ARG, "token id %d outside the vocabulary", tokens[i]);
        if (batch->seq[i] < 0 || batch->seq[i] >= n_seq)
            return og_fail(err, errlen, OG_ERR_INVALID_ARG, "token %d names sequence %d of %d", i, batch->seq[i], n_seq);
    }
    /* positions: each sequence continues where its cache ends, its tokens in order */
    int32_t *pos_of = malloc((size_t)n_tok * sizeof *pos_of), *next = malloc((size_t)n_seq * sizeof *next);
    if (!pos_of || !next) {
        free(pos_of);
        free(next);
        return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    }
    int32_t max_pos = 0;
    for (int s = 0; s < n_seq; s++) next[s] = kvs[s]->n_pos;
    for (int i = 0; i < n_tok; i++) {
        pos_of[i] = next[batch->seq[i]]++;
        if (pos_of[i] + 1 > max_pos) max_pos = pos_of[i] + 1;
    }
    for (int s = 0; s < n_seq; s++)
        if (kv_reserve(m, kvs[s], next[s])) {
            free(pos_of);
            free(next);
            return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory for the KV cache");
        }

    /* scratch: sized for the largest per-call buffers */
    const int64_t qw = H * dqk;
    size_t need = (size_t)T * (size_t)(3 * D + qw + (h->q_lora_rank ? h->q_lora_rank : 0) + r_kv + dr + H * dv +
                                       (h->n_expert ? h->n_expert : 0)) +
                  (size_t)(H * ATT_CHUNK * (dn + 2 * r_kv + dv)) +
                  (size_t)og_pool_size(rc->pool) * ((size_t)max_pos + (size_t)(r_kv + dr)) + 1024;
    scratch sc = {.cap = need};
    sc.p = malloc(need * sizeof(float));
    if (!sc.p) {
        free(pos_of);
        free(next);
        return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    }
    float *h_res = take(&sc, (size_t)(T * D));  /* residual stream [T][D] */
    float *a = take(&sc, (size_t)(T * D));      /* normalized input [T][D] */
    float *y = take(&sc, (size_t)(T * D));      /* sublayer output [T][D] */
    float *q = take(&sc, (size_t)(T * qw));     /* [T][H d_qk] */
    float *qa = h->q_lora_rank ? take(&sc, (size_t)(T * h->q_lora_rank)) : NULL;
    float *ckv = take(&sc, (size_t)(T * (r_kv + dr)));
    float *o = take(&sc, (size_t)(T * H * dv)); /* attention output [T][H d_v] */
    float *rl = h->n_expert ? take(&sc, (size_t)(T * h->n_expert)) : NULL;
    float *qn = take(&sc, (size_t)(H * ATT_CHUNK * dn));   /* q_nope of a chunk, [H][ATT_CHUNK][d_nope] */
    float *qabs = take(&sc, (size_t)(H * ATT_CHUNK * r_kv)); /* [H][ATT_CHUNK][r_kv] */
    float *ctx = take(&sc, (size_t)(H * ATT_CHUNK * r_kv));  /* [H][ATT_CHUNK][r_kv] */
    float *ov = take(&sc, (size_t)(H * ATT_CHUNK * dv));     /* [H][ATT_CHUNK][d_v] */
    const size_t att_stride = (size_t)max_pos + (size_t)(r_kv + dr); /* scores, then [q_abs, q_pe] */
    float *att = take(&sc, (size_t)og_pool_size(rc->pool) * att_stride); /* per thread */
    og_route *routes = NULL;
    og_status st = OG_OK;
    bool moe_failed = false;
    fwd fw = {.rc = rc, .nm = rc->host_numerics, .exact = batch->exact};
    og_weight *head_w = malloc((size_t)(2 * H) * sizeof *head_w); /* per-head k_b, v_b slices */
    og_matmul_job *head_jobs = malloc((size_t)H * sizeof *head_jobs);
    if (!head_w || !head_jobs) st = OG_ERR_NOMEM;

    for (int64_t t = 0; t < T; t++) /* embeddings (§3: no scaling) */
        og_dequantize_row(m->tok_embd.type, (const uint8_t *)m->tok_embd.data + (size_t)tokens[t] * m->tok_embd.row_bytes,
                          h_res + t * D, D);

    for (uint32_t il = 0; il < h->n_layer && !st; il++) {
        const og_layer *L = &m->layers[il];
        /* ---- attention (MLA, absorbed form) ---- */
        for (int64_t t = 0; t < T; t++) og_rmsnorm(a + t * D, h_res + t * D, L->attn_norm, D, h->rms_eps);
        if (h->q_lora_rank) { /* q_a and kv_a read the same input: one pool run */
            og_matmul_job j2[2] = {{&L->q_a, a, T, qa, OG_NUMERICS_FORK}, {&L->kv_a, a, T, ckv, OG_NUMERICS_FORK}};
            if ((st = mm_rows(&fw, j2, 2, 0))) break;
            for (int64_t t = 0; t < T; t++)
                og_rmsnorm(qa + t * h->q_lora_rank, qa + t * h->q_lora_rank, L->q_a_norm, h->q_lora_rank, h->rms_eps);
            if ((st = mm(&fw, &L->q_b, qa, T, q))) break;
        } else {
            og_matmul_job j2[2] = {{&L->q, a, T, q, OG_NUMERICS_FORK}, {&L->kv_a, a, T, ckv, OG_NUMERICS_FORK}};
            if ((st = mm_rows(&fw, j2, 2, 0))) break;
        }
        for (int64_t t = 0; t < T; t++) {
            const int32_t pos = pos_of[t];
            float *c = ckv + t * (r_kv + dr);
            og_rmsnorm(c, c, L->kv_a_norm, r_kv, h->rms_eps);
            og_rope_apply(&h->rope, c + r_kv, 1, dr, pos);             /* k_pe */
            og_rope_apply(&h->rope, q + t * qw + dn, (int)H, dqk, pos); /* q_pe of every head */
            memcpy(kv_row(m, kvs[batch->seq[t]], il, pos), c, (size_t)(r_kv + dr) * sizeof(float));
        }
        if (!L->kv_b_f32)
            for (int64_t hh = 0; hh < H; hh++) {
                head_w[hh] = slice(&L->k_b, hh * r_kv, r_kv);
                head_w[H + hh] = slice(&L->v_b, hh * dv, dv);
            }
        og_vec_dot_fn fdot = rc->kern->vec_dot[OG_TYPE_F32];
        for (int64_t t0 = 0; t0 < T && !st; t0 += ATT_CHUNK) { /* ATT_CHUNK tokens at a time */
            const int64_t tc = T - t0 < ATT_CHUNK ? T - t0 : ATT_CHUNK;
            /* q_abs[h][t][r] = sum_d k_b[h][r][d] q_nope[t][h][d]: per head one product
             * over the chunk's tokens, all heads in one run */
            if (L->kv_b_f32) {
                for (int64_t hh = 0; hh < H; hh++)
                    for (int64_t i = 0; i < tc; i++) {
                        const float *qh = q + (t0 + i) * qw + hh * dqk;
                        float *qa_h = qabs + (hh * ATT_CHUNK + i) * r_kv;
                        for (int64_t r = 0; r < r_kv; r++) qa_h[r] = 0;
                        for (int64_t d = 0; d < dn; d++) {
                            const float *row = L->kv_b_f32 + (hh * (dn + dv) + d) * r_kv;
                            for (int64_t r = 0; r < r_kv; r++) qa_h[r] += row[r] * qh[d];
                        }
                    }
            } else {
                for (int64_t hh = 0; hh < H; hh++) {
                    for (int64_t i = 0; i < tc; i++)
                        memcpy(qn + (hh * ATT_CHUNK + i) * dn, q + (t0 + i) * qw + hh * dqk, (size_t)dn * sizeof *qn);
                    head_jobs[hh] = (og_matmul_job){&head_w[hh], qn + hh * ATT_CHUNK * dn, tc, qabs + hh * ATT_CHUNK * r_kv,
                                                    OG_NUMERICS_FORK};
                }
                if ((st = mm_rows(&fw, head_jobs, (int)H, t0))) break;
            }
            att_job aj = {m,    kvs,        batch->seq + t0, pos_of + t0, tc,         il,
                          q + t0 * qw, qabs, ctx, att, att_stride, fdot, rc->kern->dot_f32_device,
                          fw.nm == OG_NUMERICS_CANONICAL, batch->exact ? batch->exact + t0 : NULL, rc->kern->axpy_f32};
            og_pool_run(rc->pool, attend_heads, &aj);
            /* o[t][h] = v_b[h] . ctx[h][t] */
            if (L->kv_b_f32) {
                for (int64_t hh = 0; hh < H; hh++)
                    for (int64_t i = 0; i < tc; i++)
                        for (int64_t j = 0; j < dv; j++) {
                            const float *row = L->kv_b_f32 + (hh * (dn + dv) + dn + j) * r_kv;
                            double acc = 0;
                            for (int64_t r = 0; r < r_kv; r++) acc += (double)row[r] * ctx[(hh * ATT_CHUNK + i) * r_kv + r];
                            o[(t0 + i) * H * dv + hh * dv + j] = (float)acc;
                        }
            } else {
                for (int64_t hh = 0; hh < H; hh++)
                    head_jobs[hh] = (og_matmul_job){&head_w[H + hh], ctx + hh * ATT_CHUNK * r_kv, tc, ov + hh * ATT_CHUNK * dv,
                                                    OG_NUMERICS_FORK};
                if ((st = mm_rows(&fw, head_jobs, (int)H, t0))) break;
                for (int64_t hh = 0; hh < H; hh++)
                    for (int64_t i = 0; i < tc; i++)
                        memcpy(o + (t0 + i) * H * dv + hh * dv, ov + (hh * ATT_CHUNK + i) * dv, (size_t)dv * sizeof *o);
            }
        }
        if (st || (st = mm(&fw, &L->o, o, T, y))) break;
        for (int64_t i = 0; i < T * D; i++) h_res[i] += y[i];

        /* ---- FFN: dense, or routed experts + shared experts ---- */
        for (int64_t t = 0; t < T; t++) og_rmsnorm(a + t * D, h_res + t * D, L->ffn_norm, D, h->rms_eps);
        if (!L->moe) {
            if ((st = swiglu_ffn(&fw, &L->gate, &L->up, &L->down, a, T, y))) break;
        } else {
            const int k = (int)h->n_expert_used;
            if ((st = mm(&fw, &L->router, a, T, rl))) break;
            og_route *nr = realloc(routes, (size_t)(T * k) * sizeof *routes);
            if (!nr) {
                st = OG_ERR_NOMEM;
                break;
            }
            routes = nr;
            for (int64_t t = 0; t < T && !st; t++) st = route(h, L, rl + t * h->n_expert, (int32_t)t, routes + t * k);
            if (st) break;
            if (rc->stats) {
                og_expert_stats *es = rc->stats;
                const size_t base = (size_t)il * h->n_expert;
                uint64_t hits = 0;
                for (int64_t r = 0; r < T * k; r++) {
                    size_t at = base + (size_t)routes[r].expert;
                    es->counts[at]++;
                    if (es->resident && es->resident[at]) hits++;
                }
                es->routes += (uint64_t)(T * k);
                es->routes_resident += hits;
                if (es->layer_routes) es->layer_routes[il] += (uint64_t)(T * k);
                if (es->layer_hits) es->layer_hits[il] += hits;
            }
            const og_moe_layer io = {(uint32_t)il, a, T, routes, (int)(T * k), batch->exact, y};
            if ((st = rc->dispatch->type->moe_layer(rc->dispatch->self, m, rc, &io, err, errlen))) {
                moe_failed = true;
                break;
            }
        }
        for (int64_t i = 0; i < T * D; i++) h_res[i] += y[i];
    }
    if (!st) { /* the wanted rows, in token order */
        int64_t n_out = 0;
        for (int64_t t = 0; t < T; t++)
            if (batch->logits[t]) og_rmsnorm(a + (n_out++) * D, h_res + t * D, m->out_norm, D, h->rms_eps);
        /* the head's rows are the wanted tokens: their exact marks, compacted */
        bool *ex_out = batch->exact && n_out ? malloc((size_t)n_out * sizeof *ex_out) : NULL;
        if (batch->exact && n_out && !ex_out) st = OG_ERR_NOMEM;
        for (int64_t t = 0, r = 0; ex_out && t < T; t++)
            if (batch->logits[t]) ex_out[r++] = batch->exact[t];
        fw.exact = ex_out;
        if (n_out && !st) st = mm(&fw, &m->output, a, n_out, logits);
        free(ex_out);
    }
    free(routes);
    free(head_w);
    free(head_jobs);
    free(fw.ab.p);
    free(sc.p);
    if (!st)
        for (int s2 = 0; s2 < n_seq; s2++) kvs[s2]->n_pos = next[s2];
    free(pos_of);
    free(next);
    if (st && moe_failed) return st; /* the dispatcher's message */
    if (st) return og_fail(err, errlen, st, "forward pass failed: %s", og_status_str(st));
    return OG_OK;
}
