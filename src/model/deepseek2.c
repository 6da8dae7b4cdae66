/* deepseek2: hyperparameters, weight binding and the forward pass, written out
 * plainly in data-flow order (shared/spec/deepseek2.md; section numbers below).
 * The experts of a layer go to the run context's dispatcher (og_dispatch_type)
 * with the (token, expert, weight) list: the seam where placement splits the
 * work between device and host (src/moe/dispatch.c). */
#include "deepseek2.h"
#include "og_device.h"
#include "fwd_ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the tensor-name table ------------------------------------------------ */

const og_arch_tensor og_ds2_tensors[OG_DS2_TENSOR_COUNT] = {
    [OG_DS2_TOKEN_EMBD] = {"token_embd.weight", OG_ROLE_EMBEDDINGS, false},
    [OG_DS2_OUTPUT_NORM] = {"output_norm.weight", OG_ROLE_OUTPUT, false},
    [OG_DS2_OUTPUT] = {"output.weight", OG_ROLE_OUTPUT, false},
    [OG_DS2_ATTN_NORM] = {"attn_norm.weight", OG_ROLE_ATTENTION, true},
    [OG_DS2_ATTN_Q_A] = {"attn_q_a.weight", OG_ROLE_ATTENTION, true},
    [OG_DS2_ATTN_Q_A_NORM] = {"attn_q_a_norm.weight", OG_ROLE_ATTENTION, true},
    [OG_DS2_ATTN_Q_B] = {"attn_q_b.weight", OG_ROLE_ATTENTION, true},
    [OG_DS2_ATTN_Q] = {"attn_q.weight", OG_ROLE_ATTENTION, true},
    [OG_DS2_ATTN_KV_A_MQA] = {"attn_kv_a_mqa.weight", OG_ROLE_ATTENTION, true},
    [OG_DS2_ATTN_KV_A_NORM] = {"attn_kv_a_norm.weight", OG_ROLE_ATTENTION, true},
    [OG_DS2_ATTN_K_B] = {"attn_k_b.weight", OG_ROLE_ATTENTION, true},
    [OG_DS2_ATTN_V_B] = {"attn_v_b.weight", OG_ROLE_ATTENTION, true},
    [OG_DS2_ATTN_KV_B] = {"attn_kv_b.weight", OG_ROLE_ATTENTION, true},
    [OG_DS2_ATTN_OUTPUT] = {"attn_output.weight", OG_ROLE_ATTENTION, true},
    [OG_DS2_FFN_NORM] = {"ffn_norm.weight", OG_ROLE_NORM, true},
    [OG_DS2_FFN_GATE] = {"ffn_gate.weight", OG_ROLE_DENSE_FFN, true},
    [OG_DS2_FFN_UP] = {"ffn_up.weight", OG_ROLE_DENSE_FFN, true},
    [OG_DS2_FFN_DOWN] = {"ffn_down.weight", OG_ROLE_DENSE_FFN, true},
    [OG_DS2_FFN_GATE_INP] = {"ffn_gate_inp.weight", OG_ROLE_ROUTER, true},
    [OG_DS2_EXP_PROBS_B] = {"exp_probs_b.bias", OG_ROLE_ROUTER, true},
    [OG_DS2_FFN_GATE_EXPS] = {"ffn_gate_exps.weight", OG_ROLE_ROUTED_EXPERTS, true},
    [OG_DS2_FFN_UP_EXPS] = {"ffn_up_exps.weight", OG_ROLE_ROUTED_EXPERTS, true},
    [OG_DS2_FFN_DOWN_EXPS] = {"ffn_down_exps.weight", OG_ROLE_ROUTED_EXPERTS, true},
    [OG_DS2_FFN_GATE_SHEXP] = {"ffn_gate_shexp.weight", OG_ROLE_SHARED_EXPERTS, true},
    [OG_DS2_FFN_UP_SHEXP] = {"ffn_up_shexp.weight", OG_ROLE_SHARED_EXPERTS, true},
    [OG_DS2_FFN_DOWN_SHEXP] = {"ffn_down_shexp.weight", OG_ROLE_SHARED_EXPERTS, true},
};

static og_tensor_role ds2_role(const char *tensor_name) {
    return og_arch_table_role(og_ds2_tensors, OG_DS2_TENSOR_COUNT, tensor_name);
}

/* ---- loading ------------------------------------------------------------- */

typedef struct loader {
    const og_gguf *g;
    const og_logger *log;
    og_ds2 *d;
    char *err;
    size_t errlen;
} loader;

static og_status key_u32(loader *l, const char *key, uint32_t *out, bool required, uint32_t dflt) {
    char full[128];
    snprintf(full, sizeof full, "deepseek2.%s", key);
    og_status st = og_gguf_get_u32(l->g, full, out);
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
    og_status st = og_gguf_get_f32(l->g, full, out);
    if (st == OG_ERR_NOT_FOUND) {
        *out = dflt;
        return OG_OK;
    }
    return st ? og_fail(l->err, l->errlen, OG_ERR_FORMAT, "key %s is not a number", full) : OG_OK;
}

/* Binds tensor `name` as a weight with rows of K elements: expects shape
 * [K, rows] or [K, rows_a, rows_b] with rows = rows_a * rows_b (3-D stacks). */
static og_status bind(loader *l, const char *name, uint64_t K, uint64_t rows, og_weight *w, bool required) {
    const og_gguf_tensor *t = og_gguf_find_tensor(l->g, name);
    memset(w, 0, sizeof *w);
    if (!t) return required ? og_fail(l->err, l->errlen, OG_ERR_NOT_FOUND, "missing tensor %s", name) : OG_OK;
    if (!t->data) return og_fail(l->err, l->errlen, OG_ERR_INVALID_ARG, "tensor %s has no data (a header-only open)", name);
    uint64_t trows = (uint64_t)t->ne[1] * (uint64_t)t->ne[2] * (uint64_t)t->ne[3];
    if ((uint64_t)t->ne[0] != K || trows != rows)
        return og_fail(l->err, l->errlen, OG_ERR_FORMAT, "tensor %s has shape [%lld, %llu] but the hyperparameters say [%llu, %llu]",
                       name, (long long)t->ne[0], (unsigned long long)trows, (unsigned long long)K, (unsigned long long)rows);
    return og_arch_bind_weight(t, w, l->err, l->errlen);
}

/* 1-D F32 tensor of n elements. */
static og_status bind_vec(loader *l, const char *name, uint64_t n, const float **out, bool required) {
    const og_gguf_tensor *t = og_gguf_find_tensor(l->g, name);
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
    const og_hparams *h = &l->d->hp;
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
    og_hparams *h = &l->d->hp;
    char arch[32] = "";
    og_gguf_get_cstr(l->g, "general.architecture", arch, sizeof arch);
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
    bool have_groups = og_gguf_find_kv(l->g, gk) != NULL;
    TRY(key_u32(l, "expert_group_count", &g, false, 1));
    TRY(key_u32(l, "expert_group_used_count", &gu, false, 1));
    h->n_group = g > 1 ? g : 1;
    h->n_group_used = g > 1 ? gu : 1;
    TRY(bound_hparams(l));
    h->d_nope = h->d_qk - h->d_rope;
    if (!have_groups && h->n_expert)
        og_log(l->log, OG_LOG_INFO, "no expert_group_count key: routing without group limits, as llama.cpp does for such files");
    else if (h->n_group > 1)
        og_log(l->log, OG_LOG_INFO, "routing: %u groups, keep %u, group score = sum of its top 2 (llama.cpp's rule)",
               h->n_group, h->n_group_used);
    TRY(key_f32(l, "expert_weights_scale", &h->expert_scale, 1.0f));
    if (h->expert_scale == 0.0f) h->expert_scale = 1.0f;
    bool norm = false;
    h->expert_norm = og_gguf_get_bool(l->g, "deepseek2.expert_weights_norm", &norm) == OG_OK && norm;
    TRY(bound_f32(l, "expert_weights_scale", h->expert_scale, 0.0f, true, 1e4f));
    TRY(key_f32(l, "attention.layer_norm_rms_epsilon", &h->rms_eps, 1e-6f));
    TRY(bound_f32(l, "attention.layer_norm_rms_epsilon", h->rms_eps, 0.0f, true, 1.0f));
    /* RoPE / YaRN (§4) and the attention scale (§3) */
    float base, factor = 1.0f, log_mul = 0.0f;
    TRY(key_f32(l, "rope.freq_base", &base, 10000.0f));
    char stype[16] = "none";
    og_gguf_get_cstr(l->g, "deepseek2.rope.scaling.type", stype, sizeof stype);
    TRY(key_f32(l, "rope.scaling.factor", &factor, 1.0f));
    uint32_t orig;
    TRY(key_u32(l, "rope.scaling.original_context_length", &orig, false, h->n_ctx_train));
    bool yarn = !strcmp(stype, "yarn") && factor > 1.0f;
    bool have_log_mul = og_gguf_find_kv(l->g, "deepseek2.rope.scaling.yarn_log_multiplier") != NULL;
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
            og_log(l->log, OG_LOG_WARN, "YaRN without yarn_log_multiplier: generic YaRN magnitude (suspicious file)");
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
static og_status read_vocab(loader *l, uint32_t *n_vocab) {
    const char *name = og_ds2_tensors[OG_DS2_TOKEN_EMBD].name;
    const og_gguf_tensor *te = og_gguf_find_tensor(l->g, name);
    if (!te) return og_fail(l->err, l->errlen, OG_ERR_NOT_FOUND, "missing tensor %s", name);
    if (te->ne[1] < 1 || te->ne[1] > (int64_t)OG_DS2_MAX_VOCAB)
        return og_fail(l->err, l->errlen, OG_ERR_FORMAT, "tensor %s has %lld rows (the vocabulary): outside 1..%u", name,
                       (long long)te->ne[1], OG_DS2_MAX_VOCAB);
    *n_vocab = (uint32_t)te->ne[1];
    return OG_OK;
}

static og_status load_weights(loader *l) {
    og_ds2 *m = l->d;
    const og_hparams *h = &m->hp;
    const uint64_t D = h->n_embd, H = h->n_head;
    TRY(read_vocab(l, &m->hp.n_vocab));
    TRY(bind(l, og_ds2_tensors[OG_DS2_TOKEN_EMBD].name, D, m->hp.n_vocab, &m->tok_embd, true));
    TRY(bind_vec(l, og_ds2_tensors[OG_DS2_OUTPUT_NORM].name, D, &m->out_norm, true));
    TRY(bind(l, og_ds2_tensors[OG_DS2_OUTPUT].name, D, m->hp.n_vocab, &m->output, false));
    if (!m->output.data) m->output = m->tok_embd; /* tied (§2) */
    m->layers = calloc(h->n_layer, sizeof *m->layers);
    m->moe = calloc(h->n_layer, sizeof *m->moe);
    if (!m->layers || !m->moe) return og_fail(l->err, l->errlen, OG_ERR_NOMEM, "out of memory");
    char n[96];
#define TN(t) og_ds2_name(t, i, n, sizeof n)
    for (uint32_t i = 0; i < h->n_layer; i++) {
        og_layer *L = &m->layers[i];
        og_moe_weights *X = &m->moe[i];
        TRY(bind_vec(l, TN(OG_DS2_ATTN_NORM), D, &L->attn_norm, true));
        if (h->q_lora_rank) {
            TRY(bind(l, TN(OG_DS2_ATTN_Q_A), D, h->q_lora_rank, &L->q_a, true));
            TRY(bind_vec(l, TN(OG_DS2_ATTN_Q_A_NORM), h->q_lora_rank, &L->q_a_norm, true));
            TRY(bind(l, TN(OG_DS2_ATTN_Q_B), h->q_lora_rank, H * h->d_qk, &L->q_b, true));
        } else {
            TRY(bind(l, TN(OG_DS2_ATTN_Q), D, H * h->d_qk, &L->q, true));
        }
        TRY(bind(l, TN(OG_DS2_ATTN_KV_A_MQA), D, h->kv_lora_rank + h->d_rope, &L->kv_a, true));
        TRY(bind_vec(l, TN(OG_DS2_ATTN_KV_A_NORM), h->kv_lora_rank, &L->kv_a_norm, true));
        if (h->mla_format) {
            TRY(bind(l, TN(OG_DS2_ATTN_K_B), h->d_nope, (uint64_t)h->kv_lora_rank * H, &L->k_b, true));
            TRY(bind(l, TN(OG_DS2_ATTN_V_B), h->kv_lora_rank, (uint64_t)h->d_v * H, &L->v_b, true));
        } else {
            og_weight kvb;
            TRY(bind(l, TN(OG_DS2_ATTN_KV_B), h->kv_lora_rank, H * (h->d_nope + h->d_v), &kvb, true));
            size_t cnt = (size_t)kvb.n_rows * (size_t)kvb.K;
            L->kv_b_f32 = malloc(cnt * sizeof(float));
            if (!L->kv_b_f32) return og_fail(l->err, l->errlen, OG_ERR_NOMEM, "out of memory");
            for (int64_t r = 0; r < kvb.n_rows; r++)
                og_dequantize_row(kvb.type, (const uint8_t *)kvb.data + (size_t)r * kvb.row_bytes, L->kv_b_f32 + r * kvb.K, kvb.K);
        }
        TRY(bind(l, TN(OG_DS2_ATTN_OUTPUT), H * h->d_v, D, &L->o, true));
        TRY(bind_vec(l, TN(OG_DS2_FFN_NORM), D, &L->ffn_norm, true));
        X->moe = L->moe = i >= h->n_dense;
        if (!L->moe) {
            TRY(bind(l, TN(OG_DS2_FFN_GATE), D, h->n_ff, &L->gate, true));
            TRY(bind(l, TN(OG_DS2_FFN_UP), D, h->n_ff, &L->up, true));
            TRY(bind(l, TN(OG_DS2_FFN_DOWN), h->n_ff, D, &L->down, true));
            continue;
        }
        const uint64_t E = h->n_expert, Fe = h->n_ff_exp;
        TRY(bind(l, TN(OG_DS2_FFN_GATE_INP), D, E, &L->router, true));
        if (L->router.type != OG_TYPE_F32)
            return og_fail(l->err, l->errlen, OG_ERR_UNSUPPORTED, "%s must be F32 (routers are never quantized)", n);
        TRY(bind_vec(l, TN(OG_DS2_EXP_PROBS_B), E, &L->exp_bias, false));
        TRY(bind(l, TN(OG_DS2_FFN_GATE_EXPS), D, Fe * E, &X->gate_exps, true));
        TRY(bind(l, TN(OG_DS2_FFN_UP_EXPS), D, Fe * E, &X->up_exps, true));
        TRY(bind(l, TN(OG_DS2_FFN_DOWN_EXPS), Fe, D * E, &X->down_exps, true));
        if (h->n_expert_shared) {
            const uint64_t Fs = (uint64_t)h->n_expert_shared * Fe;
            TRY(bind(l, TN(OG_DS2_FFN_GATE_SHEXP), D, Fs, &X->gate_sh, true));
            TRY(bind(l, TN(OG_DS2_FFN_UP_SHEXP), D, Fs, &X->up_sh, true));
            TRY(bind(l, TN(OG_DS2_FFN_DOWN_SHEXP), Fs, D, &X->down_sh, true));
        }
    }
#undef TN
    return OG_OK;
}

og_status og_ds2_hparams_read(const og_gguf *g, const og_logger *lg, og_hparams *hp, char *err, size_t errlen) {
    const og_logger quiet = {.level = OG_LOG_WARN};
    og_ds2 tmp = {0};
    loader l = {g, lg ? lg : &quiet, &tmp, err, errlen};
    og_status st = load_hparams(&l);
    if (st) return st;
    if ((st = read_vocab(&l, &tmp.hp.n_vocab))) return st;
    *hp = tmp.hp;
    return OG_OK;
}

/* info from the hyperparameters (moe NULL) for a cache of type kt (0 bytes per
 * element without one: og_model_describe's, the caller's choice) */
static void info_of(const og_hparams *h, const og_kv_type *kt, og_model_info *info) {
    const uint32_t eb = kt ? og_kv_type_bytes(*kt) : 0;
    *info = (og_model_info){
        .arch = "deepseek2", .n_layer = h->n_layer, .n_embd = h->n_embd, .n_vocab = h->n_vocab,
        .n_ctx_train = h->n_ctx_train, .n_head = h->n_head, .n_expert = h->n_expert,
        .n_expert_used = h->n_expert_used, .n_expert_shared = h->n_expert_shared, .n_ff_exp = h->n_ff_exp,
        .n_ff = h->n_ff, .n_dense = h->n_dense,
        /* the MLA cache: per layer and position the latent c (r_kv) and k_pe (d_rope), §3 */
        .kv_elems_fixed = 0, .kv_elems_per_token = (double)h->n_layer * (h->kv_lora_rank + h->d_rope),
        .kv_elem_bytes = eb, .kv_paged = true, .kv_fork = true, /* og_kv_fork copies or shares blocks */
        .kv_block_bytes = (uint64_t)h->n_layer * OG_KV_BLOCK * (h->kv_lora_rank + h->d_rope) * eb};
}

static og_status ds2_describe(const og_gguf *g, const og_logger *lg, og_model_info *info, char *err, size_t errlen) {
    og_hparams hp = {0};
    og_status st = og_ds2_hparams_read(g, lg, &hp, err, errlen);
    if (st) return st;
    info_of(&hp, NULL, info);
    return OG_OK;
}

static void ds2_free(og_ds2 *d) {
    if (!d) return;
    if (d->layers)
        for (uint32_t i = 0; i < d->hp.n_layer; i++) free(d->layers[i].kv_b_f32);
    free(d->layers);
    free(d->moe);
    free(d);
}

static void ds2_free_impl(og_model *m) {
    ds2_free(m->impl);
    m->impl = NULL;
    m->info.moe = NULL;
}

static og_status ds2_load(og_model *m, char *err, size_t errlen) {
    og_ds2 *d = calloc(1, sizeof *d);
    if (!d) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    loader l = {m->gguf, &m->log, d, err, errlen};
    og_status st;
    if ((st = load_hparams(&l)) || (st = load_weights(&l))) {
        ds2_free(d);
        return st;
    }
    m->impl = d;
    d->kv_type = OG_KV_F16; /* --kv-type's default: what the planner charges */
    info_of(&d->hp, &d->kv_type, &m->info);
    m->info.moe = d->moe;
    return OG_OK;
}

/* "kv-type" f16 / f32: the element type of the caches made from now on. */
static og_status ds2_set_option(og_model *m, const char *name, const char *value, char *err, size_t errlen) {
    og_ds2 *d = m->impl;
    if (strcmp(name, "kv-type"))
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "deepseek2 has no option '%s' (it has: kv-type)", name);
    if (og_kv_type_parse(value, &d->kv_type))
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "kv-type takes f16 or f32, not '%s'", value);
    info_of(&d->hp, &d->kv_type, &m->info);
    m->info.moe = d->moe;
    return OG_OK;
}

/* ---- forward ------------------------------------------------------------ */

/* Grows kv to n_pos positions, its blocks (of the model's kv-type) in dev's
 * memory (NULL: the host's), from kv->alloc when set (the engine's pool, which
 * reserved them before the call: nothing is taken here then); a cache keeps
 * the device and the type its first block came with. Errors: OG_ERR_NOMEM, OG_ERR_INVALID_ARG (a cache of another
 * device), OG_ERR_STATE (a cache of another kv-type). */
static og_status kv_reserve(const og_ds2 *d, og_kv *kv, int32_t n_pos, og_device *dev) {
    const size_t bytes = (size_t)d->hp.n_layer * OG_KV_BLOCK * (d->hp.kv_lora_rank + d->hp.d_rope) *
                         og_kv_type_bytes(d->kv_type);
    if (!kv->n_blocks) kv->dev = dev, kv->type = d->kv_type;
    if (kv->type != d->kv_type) return OG_ERR_STATE;
    if (kv->dev != dev && kv->n_blocks * OG_KV_BLOCK < n_pos) return OG_ERR_INVALID_ARG;
    while (kv->n_blocks * OG_KV_BLOCK < n_pos) {
        if (kv->n_blocks == kv->cap_blocks) {
            int cap = kv->cap_blocks ? kv->cap_blocks * 2 : 8;
            float **nb = realloc(kv->blocks, (size_t)cap * sizeof *nb);
            if (!nb) return OG_ERR_NOMEM;
            kv->blocks = nb;
            kv->cap_blocks = cap;
        }
        void *blk = NULL;
        if (kv->alloc ? !(blk = kv->alloc->take(kv->alloc->self))
            : dev     ? dev->ops->alloc(dev, bytes, &blk, NULL, 0) != OG_OK
                      : !(blk = malloc(bytes)))
            return OG_ERR_NOMEM;
        kv->blocks[kv->n_blocks] = blk;
        kv->n_blocks++;
    }
    return OG_OK;
}

/* ---- the forward pass as device ops ---------------------------------------- */

static bool has_dense(const og_hparams *h) { return h->n_dense > 0; }

/* Tokens whose per-head k_b / v_b products and attention run together: four or
 * more let the matmuls take four activation rows per weight pass (vec_dot4). */
#define ATT_CHUNK 16

/* One forward call's device, stream and numerics, and its products, norms and
 * waits: the forward passes' shared pieces (fwd_ops.h). */
typedef og_fwd fwd;

/* out = down(swiglu(gate x, up x)) for n_tok rows; g, u: device [n_tok][F] scratch. */
static og_status swiglu_ffn(fwd *f, const og_weight *gate, const og_weight *up, const og_weight *down, const float *x,
                            int64_t n_tok, float *g, float *u, float *out) {
    og_matmul_job j2[2] = {{gate, x, n_tok, g, OG_NUMERICS_FORK}, {up, x, n_tok, u, OG_NUMERICS_FORK}};
    og_status st = og_fwd_mm_rows(f, j2, 2, 0);
    if (!st) st = f->ops->swiglu(f->dev, f->s, g, g, u, n_tok * gate->n_rows, 0.0f, f->err, f->errlen);
    if (!st) st = og_fwd_mm(f, down, g, n_tok, out);
    return st;
}

/* *out = L with every weight at its device copy (og_fwd_weight; as it is
 * without a table). The legacy kv_b_f32 stays: host memory, read by the
 * cpu devices' kv_b op (a device without that op refuses the file). */
static og_status layer_on_device(const fwd *f, const og_hparams *h, const og_layer *L, og_layer *out) {
    *out = *L;
    if (!f->wt) return OG_OK;
    const int64_t D = h->n_embd;
    og_status st = OG_OK;
    const struct { const og_weight *w; og_weight *o; const char *what; } ws[] = {
        {&L->q_a, &out->q_a, "attn_q_a"}, {&L->q_b, &out->q_b, "attn_q_b"}, {&L->q, &out->q, "attn_q"},
        {&L->kv_a, &out->kv_a, "attn_kv_a_mqa"}, {&L->k_b, &out->k_b, "attn_k_b"}, {&L->v_b, &out->v_b, "attn_v_b"},
        {&L->o, &out->o, "attn_output"}, {&L->gate, &out->gate, "ffn_gate"}, {&L->up, &out->up, "ffn_up"},
        {&L->down, &out->down, "ffn_down"}, {&L->router, &out->router, "ffn_gate_inp"}};
    for (size_t i = 0; i < sizeof ws / sizeof ws[0] && !st; i++) st = og_fwd_weight(f, ws[i].w, ws[i].what, ws[i].o);
    if (!st) st = og_fwd_vec(f, L->attn_norm, D, "attn_norm", &out->attn_norm);
    if (!st) st = og_fwd_vec(f, L->q_a_norm, h->q_lora_rank, "attn_q_a_norm", &out->q_a_norm);
    if (!st) st = og_fwd_vec(f, L->kv_a_norm, h->kv_lora_rank, "attn_kv_a_norm", &out->kv_a_norm);
    if (!st) st = og_fwd_vec(f, L->ffn_norm, D, "ffn_norm", &out->ffn_norm);
    if (!st) st = og_fwd_vec(f, L->exp_bias, h->n_expert, "exp_probs_b", &out->exp_bias);
    return st;
}

static uint64_t ds2_scratch_bytes(const og_model *m, int64_t n_tok, int64_t n_out) {
    const og_ds2 *d = og_ds2_of(m);
    const og_hparams *h = &d->hp;
    const int64_t D = h->n_embd, H = h->n_head, r_kv = h->kv_lora_rank, dn = h->d_nope, dv = h->d_v;
    const int64_t w_kv = r_kv + h->d_rope, qw = H * h->d_qk, rq = h->q_lora_rank, E = h->n_expert;
    const int64_t k = h->n_expert_used;
    const uint64_t fb = sizeof(float);
    return (uint64_t)n_tok * fb * (uint64_t)(3 * D + qw + rq + w_kv + H * dv + E + 2 * k + (has_dense(h) ? 2 * h->n_ff : 0)) +
           fb * (uint64_t)(H * ATT_CHUNK * (dn + 2 * r_kv + dv)) + (uint64_t)n_out * h->n_vocab * fb + 64 * 24;
}

/* One forward call's host arrays: control data and host copies, carved from
 * one buffer (og_fwd_host_get: the run context's, kept between calls). */
typedef struct ds2_host {
    int32_t *pos_of, *kv_first;   /* [T] each token's position, its sequence's first block in blocks */
    int32_t *next, *first_of;     /* [n_seq] positions after the call, first block in blocks */
    bool *canon, *ex_out;         /* [T] canonical rows; [n_out] the head's exact rows */
    float **blocks;               /* [<= max_blocks] the batch's block table */
    float *hx, *hy, *h_w;         /* [T][D] the MoE layer's input and output; [T][k] route weights */
    int32_t *h_ids;               /* [T][k] route experts */
    og_route *routes;             /* [T][k] */
    og_weight *head_w;            /* [2 H] per-head k_b, v_b slices */
    og_matmul_job *head_jobs;     /* [H] */
} ds2_host;

/* Carves a's arrays from c (a counting pass when c->base is NULL). max_blocks:
 * a bound on the block table after the call's kv_reserve. */
static void ds2_host_take(og_fwd_scratch_cut *c, ds2_host *a, const og_hparams *h, int64_t T, int n_seq,
                          int64_t max_blocks, int64_t n_out) {
    const int64_t D = h->n_embd, H = h->n_head, k = h->n_expert_used, E = h->n_expert;
    const uint64_t fb = sizeof(float);
    *a = (ds2_host){0};
    a->pos_of = og_fwd_take(c, (uint64_t)T * sizeof(int32_t));
    a->kv_first = og_fwd_take(c, (uint64_t)T * sizeof(int32_t));
    a->next = og_fwd_take(c, (uint64_t)n_seq * sizeof(int32_t));
    a->first_of = og_fwd_take(c, (uint64_t)n_seq * sizeof(int32_t));
    a->canon = og_fwd_take(c, (uint64_t)T * sizeof(bool));
    a->ex_out = og_fwd_take(c, (uint64_t)(n_out ? n_out : 1) * sizeof(bool));
    a->blocks = og_fwd_take(c, (uint64_t)(max_blocks ? max_blocks : 1) * sizeof(float *));
    if (E) {
        a->hx = og_fwd_take(c, (uint64_t)(T * D) * fb);
        a->hy = og_fwd_take(c, (uint64_t)(T * D) * fb);
        a->h_w = og_fwd_take(c, (uint64_t)(T * k) * fb);
        a->h_ids = og_fwd_take(c, (uint64_t)(T * k) * sizeof(int32_t));
        a->routes = og_fwd_take(c, (uint64_t)(T * k) * sizeof(og_route));
    }
    a->head_w = og_fwd_take(c, (uint64_t)(2 * H) * sizeof(og_weight));
    a->head_jobs = og_fwd_take(c, (uint64_t)H * sizeof(og_matmul_job));
}

static og_status ds2_forward_batch(const og_model *m, const og_run_ctx *rc, og_kv *const *kvs, int n_seq,
                                   const og_batch *batch, float *logits, char *err, size_t errlen) {
    const og_ds2 *d = og_ds2_of(m);
    const og_hparams *h = &d->hp;
    const int n_tok = batch->n_tok;
    const int32_t *tokens = batch->tokens;
    const int64_t D = h->n_embd, H = h->n_head, r_kv = h->kv_lora_rank, dr = h->d_rope, dn = h->d_nope;
    const int64_t dqk = h->d_qk, dv = h->d_v, T = n_tok, w_kv = r_kv + dr;
    if (err && errlen) err[0] = 0;
    if (n_tok <= 0 || n_seq <= 0) return og_fail(err, errlen, OG_ERR_INVALID_ARG, "no tokens");
    if (h->n_dense < h->n_layer && (!rc->dispatch || !rc->dispatch->type || !rc->dispatch->type->moe_layer))
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "a MoE model needs a dispatcher (og_run_ctx.dispatch)");
    for (int i = 0; i < n_tok; i++) {
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= h->n_vocab)
            return og_fail(err, errlen, OG_ERR_INVALID_ARG, "token id %d outside the vocabulary", tokens[i]);
        if (batch->seq[i] < 0 || batch->seq[i] >= n_seq)
            return og_fail(err, errlen, OG_ERR_INVALID_ARG, "token %d names sequence %d of %d", i, batch->seq[i], n_seq);
    }
    int64_t n_out = 0;
    for (int64_t t = 0; t < T; t++) n_out += batch->logits[t];
    /* the host arrays: a sequence's blocks after kv_reserve number at most its
     * blocks now + its new positions / OG_KV_BLOCK + 2, so the table's bound is */
    int64_t max_blocks = T / OG_KV_BLOCK + 1;
    for (int s = 0; s < n_seq; s++) max_blocks += kvs[s]->n_blocks + 2;
    ds2_host ha;
    og_fwd_scratch_cut hc = {0};
    ds2_host_take(&hc, &ha, h, T, n_seq, max_blocks, n_out);
    void *hown = NULL; /* this call's own host buffer (no reusable scratch), freed below */
    og_status st = og_fwd_host_get(rc, hc.used, &hc, &hown);
    if (st) return og_fail(err, errlen, st, "forward pass: out of memory for the host arrays");
    ds2_host_take(&hc, &ha, h, T, n_seq, max_blocks, n_out);
    int32_t *pos_of = ha.pos_of, *next = ha.next, *first_of = ha.first_of, *kv_first = ha.kv_first;
    bool *canon = ha.canon;
    /* positions: each sequence continues where its cache ends, its tokens in order */
    for (int s = 0; s < n_seq && !st; s++) next[s] = kvs[s]->n_pos;
    for (int i = 0; i < n_tok && !st; i++) pos_of[i] = next[batch->seq[i]]++;
    for (int s = 0; s < n_seq && !st; s++)
        if ((st = kv_reserve(d, kvs[s], next[s], rc->dev)))
            og_fail(err, errlen, st, st == OG_ERR_NOMEM     ? "no memory for the KV cache of sequence %d"
                                     : st == OG_ERR_STATE ? "sequence %d's KV cache holds another kv-type than the model's"
                                                          : "sequence %d's KV cache is on another device", s);
    /* one block table for the batch's caches: sequence s's blocks from first_of[s] */
    int32_t n_blocks = 0;
    for (int s = 0; s < n_seq && !st; s++) {
        first_of[s] = n_blocks;
        n_blocks += kvs[s]->n_blocks;
    }
    float **blocks = ha.blocks;
    if (!st && n_blocks > max_blocks) st = og_fail(err, errlen, OG_ERR_INVALID_ARG, "forward pass: %d blocks, more than "
                                                   "the %lld bound", n_blocks, (long long)max_blocks);
    for (int s = 0; s < n_seq && !st; s++) /* an empty cache (a choice waiting for its fork) has no block array */
        if (kvs[s]->n_blocks) memcpy(blocks + first_of[s], kvs[s]->blocks, (size_t)kvs[s]->n_blocks * sizeof *blocks);
    for (int i = 0; i < n_tok && !st; i++) kv_first[i] = first_of[batch->seq[i]];

    fwd fw = {.nm = rc->host_numerics, .exact = batch->exact, .err = err, .errlen = errlen};
    og_device *own_dev = NULL;
    if (!st) st = og_fwd_begin(&fw, rc, batch->exact, &own_dev, err, errlen);
    if (st) {
        free(hown);
        og_device_destroy(own_dev);
        char why[256];
        snprintf(why, sizeof why, "%s", err && errlen ? err : "");
        return og_fail(err, errlen, st, "forward pass: %s", why[0] ? why : og_status_str(st));
    }
    const og_device_ops *ops = fw.ops = fw.dev->ops;
    for (int i = 0; i < n_tok; i++) canon[i] = fw.nm == OG_NUMERICS_CANONICAL || (batch->exact && batch->exact[i]);
    if (!h->mla_format && !ops->mla_kv_b)
        st = og_fail(err, errlen, OG_ERR_UNSUPPORTED, "the %s device has no op for the legacy attn_kv_b layout yet",
                     ops->name);

    /* device scratch: activations sized for this call */
    const int64_t qw = H * dqk, rq = h->q_lora_rank, E = h->n_expert, k = h->n_expert_used;
    const uint64_t fb = sizeof(float);
    const uint64_t need = og_fwd_scratch_bytes(m, T, n_out);
    void *dbase = NULL; /* this call's own allocation (no reusable scratch), freed below */
    og_fwd_scratch_cut ds = {0};
    if (!st) st = og_fwd_scratch_get(m, rc, &fw, need, T, n_out, &ds, &dbase);
    float *h_res = og_fwd_take(&ds, (uint64_t)(T * D) * fb);  /* residual stream [T][D] */
    float *a = og_fwd_take(&ds, (uint64_t)(T * D) * fb);      /* normalized input [T][D] */
    float *y = og_fwd_take(&ds, (uint64_t)(T * D) * fb);      /* sublayer output [T][D] */
    float *q = og_fwd_take(&ds, (uint64_t)(T * qw) * fb);     /* [T][H d_qk] */
    float *qa = rq ? og_fwd_take(&ds, (uint64_t)(T * rq) * fb) : NULL;
    float *ckv = og_fwd_take(&ds, (uint64_t)(T * w_kv) * fb); /* [T][r_kv + d_rope] */
    float *o = og_fwd_take(&ds, (uint64_t)(T * H * dv) * fb); /* attention output [T][H d_v] */
    float *rl = E ? og_fwd_take(&ds, (uint64_t)(T * E) * fb) : NULL; /* router logits [T][E] */
    int32_t *r_ids = E ? og_fwd_take(&ds, (uint64_t)(T * k) * sizeof(int32_t)) : NULL; /* [T][k] */
    float *r_w = E ? og_fwd_take(&ds, (uint64_t)(T * k) * fb) : NULL;                   /* [T][k] */
    float *fg = has_dense(h) ? og_fwd_take(&ds, (uint64_t)(T * h->n_ff) * fb) : NULL; /* dense FFN [T][n_ff] x 2 */
    float *fu = has_dense(h) ? og_fwd_take(&ds, (uint64_t)(T * h->n_ff) * fb) : NULL;
    float *qn = og_fwd_take(&ds, (uint64_t)(H * ATT_CHUNK * dn) * fb);     /* q_nope of a chunk, [H][ATT_CHUNK][d_nope] */
    float *qabs = og_fwd_take(&ds, (uint64_t)(H * ATT_CHUNK * r_kv) * fb); /* [H][ATT_CHUNK][r_kv] */
    float *ctx = og_fwd_take(&ds, (uint64_t)(H * ATT_CHUNK * r_kv) * fb);  /* [H][ATT_CHUNK][r_kv] */
    float *ov = og_fwd_take(&ds, (uint64_t)(H * ATT_CHUNK * dv) * fb);     /* [H][ATT_CHUNK][d_v] */
    float *dlog = n_out ? og_fwd_take(&ds, (uint64_t)n_out * h->n_vocab * fb) : NULL; /* [n_out][n_vocab] */
    /* host copies: the MoE layer's input and output, the routes (and the legacy layout's chunks) */
    float *hx = ha.hx, *hy = ha.hy, *h_w = ha.h_w;
    int32_t *h_ids = ha.h_ids;
    og_route *routes = ha.routes;
    og_weight *head_w = ha.head_w;
    og_matmul_job *head_jobs = ha.head_jobs;
    if (!st && (!dlog && n_out)) st = OG_ERR_NOMEM;
    bool failed_here = st != OG_OK; /* err already says why */
    og_kv_view kvv = {blocks, n_blocks, OG_KV_BLOCK, 0, w_kv, w_kv, d->kv_type};

    /* embeddings (§3: no scaling) */
    og_get_rows_op g = {d->tok_embd, tokens, T, h_res};
    if (!st) st = og_fwd_weight(&fw, &d->tok_embd, "token_embd", &g.table);
    if (!st) st = ops->get_rows(fw.dev, fw.s, &g, err, errlen);
    og_layer Ld; /* the layer's weights where the device reads them */
    for (uint32_t il = 0; il < h->n_layer && !st; il++) {
        if ((st = layer_on_device(&fw, h, &d->layers[il], &Ld))) break;
        const og_layer *L = &Ld;
        kvv.offset = (int64_t)il * OG_KV_BLOCK * w_kv;
        /* ---- attention (MLA, absorbed form) ---- */
        if ((st = og_fwd_norm(&fw, a, h_res, T, D, D, L->attn_norm, h->rms_eps))) break;
        if (rq) { /* q_a and kv_a read the same input: one op */
            og_matmul_job j2[2] = {{&L->q_a, a, T, qa, OG_NUMERICS_FORK}, {&L->kv_a, a, T, ckv, OG_NUMERICS_FORK}};
            if ((st = og_fwd_mm_rows(&fw, j2, 2, 0))) break;
            if ((st = og_fwd_norm(&fw, qa, qa, T, rq, rq, L->q_a_norm, h->rms_eps))) break;
            if ((st = og_fwd_mm(&fw, &L->q_b, qa, T, q))) break;
        } else {
            og_matmul_job j2[2] = {{&L->q, a, T, q, OG_NUMERICS_FORK}, {&L->kv_a, a, T, ckv, OG_NUMERICS_FORK}};
            if ((st = og_fwd_mm_rows(&fw, j2, 2, 0))) break;
        }
        if ((st = og_fwd_norm(&fw, ckv, ckv, T, r_kv, w_kv, L->kv_a_norm, h->rms_eps))) break;
        og_rope_op rk = {h->rope, ckv + r_kv, T, w_kv, 1, dr, pos_of};     /* k_pe */
        og_rope_op rqp = {h->rope, q + dn, T, qw, (int32_t)H, dqk, pos_of}; /* q_pe of every head */
        og_kv_store_op ks = {kvv, {ckv, w_kv, T, w_kv}, kv_first, pos_of};
        if ((st = ops->rope(fw.dev, fw.s, &rk, err, errlen)) || (st = ops->rope(fw.dev, fw.s, &rqp, err, errlen)) ||
            (st = ops->kv_store(fw.dev, fw.s, &ks, err, errlen)))
            break;
        if (!L->kv_b_f32)
            for (int64_t hh = 0; hh < H; hh++) {
                head_w[hh] = og_fwd_slice(&L->k_b, hh * r_kv, r_kv);
                head_w[H + hh] = og_fwd_slice(&L->v_b, hh * dv, dv);
            }
        for (int64_t t0 = 0; t0 < T && !st; t0 += ATT_CHUNK) { /* ATT_CHUNK tokens at a time */
            const int64_t tc = T - t0 < ATT_CHUNK ? T - t0 : ATT_CHUNK;
            /* q_abs[h][t][r] = sum_d k_b[h][r][d] q_nope[t][h][d]: per head one product
             * over the chunk's tokens, all heads in one op */
            if (L->kv_b_f32) { /* the legacy layout: the kv_b rows' op (og_mla_kv_b_op) */
                og_mla_kv_b_op ab = {false, tc, H, dn, dv, r_kv, L->kv_b_f32, q + t0 * qw, qw, dqk,
                                     qabs, r_kv, ATT_CHUNK * r_kv};
                if ((st = ops->mla_kv_b(fw.dev, fw.s, &ab, err, errlen))) break;
            } else {
                og_copy_op cp = {qn, q + t0 * qw, (uint64_t)dn * fb, (uint64_t)tc, (uint64_t)H, (uint64_t)dn * fb,
                                 (uint64_t)(ATT_CHUNK * dn) * fb, (uint64_t)qw * fb, (uint64_t)dqk * fb};
                if ((st = ops->copy(fw.dev, fw.s, &cp, err, errlen))) break;
                for (int64_t hh = 0; hh < H; hh++)
                    head_jobs[hh] = (og_matmul_job){&head_w[hh], qn + hh * ATT_CHUNK * dn, tc, qabs + hh * ATT_CHUNK * r_kv,
                                                    OG_NUMERICS_FORK};
                if ((st = og_fwd_mm_rows(&fw, head_jobs, (int)H, t0))) break;
            }
            og_mla_op at = {.n_tok = tc, .n_head = H, .r_kv = r_kv, .d_rope = dr, .kq_scale = h->kq_scale,
                            .q_abs = qabs, .qabs_head_stride = ATT_CHUNK * r_kv,
                            .q_pe = q + t0 * qw + dn, .qpe_tok_stride = qw, .qpe_head_stride = dqk,
                            .ctx = ctx, .ctx_head_stride = ATT_CHUNK * r_kv, .kv = kvv,
                            .kv_first = kv_first + t0, .pos = pos_of + t0, .canonical = canon + t0};
            if ((st = ops->mla_attention(fw.dev, fw.s, &at, err, errlen))) break;
            /* o[t][h] = v_b[h] . ctx[h][t] */
            if (L->kv_b_f32) {
                og_mla_kv_b_op ex = {true, tc, H, dn, dv, r_kv, L->kv_b_f32, ctx, r_kv, ATT_CHUNK * r_kv,
                                     o + t0 * H * dv, H * dv, dv};
                if ((st = ops->mla_kv_b(fw.dev, fw.s, &ex, err, errlen))) break;
            } else {
                for (int64_t hh = 0; hh < H; hh++)
                    head_jobs[hh] = (og_matmul_job){&head_w[H + hh], ctx + hh * ATT_CHUNK * r_kv, tc, ov + hh * ATT_CHUNK * dv,
                                                    OG_NUMERICS_FORK};
                if ((st = og_fwd_mm_rows(&fw, head_jobs, (int)H, t0))) break;
                og_copy_op cp = {o + t0 * H * dv, ov, (uint64_t)dv * fb, (uint64_t)tc, (uint64_t)H, (uint64_t)(H * dv) * fb,
                                 (uint64_t)dv * fb, (uint64_t)dv * fb, (uint64_t)(ATT_CHUNK * dv) * fb};
                if ((st = ops->copy(fw.dev, fw.s, &cp, err, errlen))) break;
            }
        }
        if (st || (st = og_fwd_mm(&fw, &L->o, o, T, y))) break;
        if ((st = ops->add(fw.dev, fw.s, h_res, h_res, y, T * D, err, errlen))) break;

        /* ---- FFN: dense, or routed experts + shared experts ---- */
        if ((st = og_fwd_norm(&fw, a, h_res, T, D, D, L->ffn_norm, h->rms_eps))) break;
        if (!L->moe) {
            if ((st = swiglu_ffn(&fw, &L->gate, &L->up, &L->down, a, T, fg, fu, y))) break;
        } else {
            if ((st = og_fwd_mm(&fw, &L->router, a, T, rl))) break;
            og_router_op ro = {rl, L->exp_bias, T, (int32_t)E, (int32_t)k, (int32_t)h->gating, (int32_t)h->n_group,
                               (int32_t)h->n_group_used, h->expert_norm, h->expert_scale, r_ids, r_w, NULL, 0, NULL, 0};
            /* the dispatcher's input: the routes and the normalized rows, down to the host */
            if ((st = ops->router(fw.dev, fw.s, &ro, err, errlen)) ||
                (st = ops->copy_to_host(fw.dev, fw.s, h_ids, r_ids, (uint64_t)(T * k) * sizeof *h_ids, err, errlen)) ||
                (st = ops->copy_to_host(fw.dev, fw.s, h_w, r_w, (uint64_t)(T * k) * fb, err, errlen)) ||
                (st = ops->copy_to_host(fw.dev, fw.s, hx, a, (uint64_t)(T * D) * fb, err, errlen)) || (st = og_fwd_sync(&fw)))
                break;
            og_fwd_routes(rc, il, h->n_expert, (int)h->n_expert_used, T, h_ids, h_w, routes);
            /* on a device the dispatcher leaves y there (the combine as an op) */
            const og_moe_layer io = {(uint32_t)il, hx, T, routes, (int)(T * k), batch->exact, hy, rc->dev ? y : NULL};
            if ((st = rc->dispatch->type->moe_layer(rc->dispatch->self, m, rc, &io, err, errlen))) {
                failed_here = true;
                break;
            }
            if (!io.dev_y && (st = ops->copy_to_device(fw.dev, fw.s, y, hy, (uint64_t)(T * D) * fb, err, errlen))) break;
        }
        if ((st = ops->add(fw.dev, fw.s, h_res, h_res, y, T * D, err, errlen))) break;
    }
    const float *out_norm = NULL;
    og_weight output = d->output;
    if (!st) st = og_fwd_vec(&fw, d->out_norm, D, "output_norm", &out_norm);
    if (!st) st = og_fwd_weight(&fw, &d->output, "output", &output);
    if (!st) { /* the wanted rows, in token order: one RMSNorm per run of consecutive wanted tokens */
        int64_t r = 0;
        for (int64_t t = 0; t < T && !st;) {
            if (!batch->logits[t]) {
                t++;
                continue;
            }
            int64_t t1 = t + 1;
            while (t1 < T && batch->logits[t1]) t1++;
            st = og_fwd_norm(&fw, a + r * D, h_res + t * D, t1 - t, D, D, out_norm, h->rms_eps);
            r += t1 - t;
            t = t1;
        }
        /* the head's rows are the wanted tokens: their exact marks, compacted */
        bool *ex_out = batch->exact && n_out ? ha.ex_out : NULL;
        for (int64_t t = 0, i = 0; ex_out && t < T; t++)
            if (batch->logits[t]) ex_out[i++] = batch->exact[t];
        fw.exact = ex_out;
        if (n_out && !st) st = og_fwd_mm(&fw, &output, a, n_out, dlog);
        if (n_out && !st)
            st = ops->copy_to_host(fw.dev, fw.s, logits, dlog, (uint64_t)n_out * h->n_vocab * fb, err, errlen);
    }
    st = og_fwd_drain(&fw, st); /* every op done before the buffers go (also after an error) */
    if (dbase) ops->free(fw.dev, dbase);
    og_device_destroy(own_dev);
    if (!st)
        for (int s2 = 0; s2 < n_seq; s2++) kvs[s2]->n_pos = next[s2];
    free(hown);
    return og_fwd_failure(st, failed_here, "forward pass", err, errlen);
}

const og_arch og_arch_deepseek2 = {
    .name = "deepseek2",
    .describe = ds2_describe,
    .load = ds2_load,
    .free_impl = ds2_free_impl,
    .role = ds2_role,
    .tensors = og_ds2_tensors,
    .n_tensors = OG_DS2_TENSOR_COUNT,
    .scratch_bytes = ds2_scratch_bytes,
    .forward_batch = ds2_forward_batch,
    .set_option = ds2_set_option,
};
