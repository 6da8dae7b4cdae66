/* deepseek4: the hyperparameter reader and the one tensor-name table
 * (shared/spec/deepseek4.md §3.1, §3.1.1; what llama.cpp v0.4.0's
 * llama_model_deepseek4::load_arch_hparams / load_arch_tensors require). */
#include "deepseek4.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARCH "deepseek4."
#define TRY(x) do { og_status st_ = (x); if (st_) return st_; } while (0)

/* ---- keys ------------------------------------------------------------------ */

/* The shared readers (og_arch.h) on "deepseek4." keys. */
static og_status key_uint(const og_gguf *g, const char *key, bool required, uint64_t dflt, uint64_t lo, uint64_t hi,
                          uint32_t *out, char *err, size_t errlen) {
    char full[128];
    snprintf(full, sizeof full, ARCH "%s", key);
    return og_arch_key_uint(g, full, required, dflt, lo, hi, out, err, errlen);
}

static og_status key_float(const og_gguf *g, const char *key, bool required, float dflt, float lo, bool lo_open,
                           float hi, float *out, char *err, size_t errlen) {
    char full[128];
    snprintf(full, sizeof full, ARCH "%s", key);
    return og_arch_key_float(g, full, required, dflt, lo, lo_open, hi, out, err, errlen);
}

static og_status key_float_per_layer(const og_gguf *g, const char *key, uint32_t n, float hi, float *out, bool *found,
                                     char *err, size_t errlen) {
    char full[128];
    snprintf(full, sizeof full, ARCH "%s", key);
    return og_arch_key_float_per_layer(g, full, n, hi, out, found, err, errlen);
}

static bool is_pow2(uint32_t v) { return v && !(v & (v - 1)); }

void og_ds4_rope_schedules(og_ds4_rope_scaling sc, uint32_t n_rot, float base, float comp_base, float factor,
                           uint32_t n_ctx_orig, float beta_fast, float beta_slow, og_rope *swa, og_rope *comp) {
    *swa = (og_rope){.d_rope = (int)n_rot, .base = base, .freq_scale = 1.0f, .ext_factor = 0.0f, .n_ctx_orig = 0,
                     .beta_fast = 0.0f, .beta_slow = 0.0f, .mscale = 1.0f};
    *comp = (og_rope){.d_rope = (int)n_rot, .base = comp_base, .freq_scale = sc == OG_DS4_ROPE_NONE ? 1.0f : 1.0f / factor,
                      .ext_factor = sc == OG_DS4_ROPE_YARN ? 1.0f : 0.0f, .n_ctx_orig = (int)n_ctx_orig,
                      .beta_fast = beta_fast, .beta_slow = beta_slow, .mscale = 1.0f};
}

og_status og_ds4_hparams_read(const og_gguf *g, const og_logger *lg, og_ds4_hparams *h, char *err, size_t errlen) {
    memset(h, 0, sizeof *h);
    char arch[32] = "";
    og_gguf_get_cstr(g, "general.architecture", arch, sizeof arch);
    if (strcmp(arch, "deepseek4"))
        return og_fail(err, errlen, OG_ERR_UNSUPPORTED, "architecture '%s' is not deepseek4", arch);
    uint32_t n_all, hc_kv, vlen, n_groups, n_groups_used;
    TRY(key_uint(g, "block_count", true, 0, 1, OG_DS4_MAX_LAYER, &n_all, err, errlen));
    TRY(key_uint(g, "nextn_predict_layers", false, 0, 0, n_all - 1, &h->n_layer_nextn, err, errlen));
    h->n_layer = n_all - h->n_layer_nextn;
    TRY(key_uint(g, "embedding_length", true, 0, 1, OG_DS4_MAX_EMBD, &h->n_embd, err, errlen));
    TRY(key_uint(g, "context_length", true, 0, 1, OG_DS4_MAX_CTX, &h->n_ctx_train, err, errlen));
    TRY(key_uint(g, "attention.head_count", true, 0, 1, OG_DS4_MAX_HEAD, &h->n_head, err, errlen));
    TRY(key_uint(g, "attention.head_count_kv", false, 1, 1, 1, &hc_kv, err, errlen)); /* one K = V head */
    TRY(key_uint(g, "attention.key_length", true, 0, 2, OG_DS4_MAX_HEAD_DIM, &h->head_dim, err, errlen));
    TRY(key_uint(g, "attention.value_length", true, 0, h->head_dim, h->head_dim, &vlen, err, errlen));
    TRY(key_uint(g, "rope.dimension_count", true, 0, 2, h->head_dim < OG_ROPE_MAX_DIM ? h->head_dim : OG_ROPE_MAX_DIM,
                 &h->n_rot, err, errlen));
    if (h->n_rot % 2)
        return og_fail(err, errlen, OG_ERR_FORMAT, "key " ARCH "rope.dimension_count = %u is odd (RoPE rotates pairs)",
                       h->n_rot);
    /* llama.cpp counts every deepseek4 layer as a window layer (set_swa_pattern(0)),
     * so its n_rot() and n_embd_head_k() return the *_swa keys when a file has
     * them (llama_hparams::n_rot(il)): a file whose _swa values differ would run
     * another model there. rope.freq_base_swa is read by nobody (deepseek4.cpp
     * takes rope.freq_base). */
    uint32_t swa_v;
    TRY(key_uint(g, "rope.dimension_count_swa", false, h->n_rot, h->n_rot, h->n_rot, &swa_v, err, errlen));
    TRY(key_uint(g, "attention.key_length_swa", false, h->head_dim, h->head_dim, h->head_dim, &swa_v, err, errlen));
    TRY(key_uint(g, "attention.value_length_swa", false, h->head_dim, h->head_dim, h->head_dim, &swa_v, err, errlen));
    TRY(key_uint(g, "attention.q_lora_rank", true, 0, 1, OG_DS4_MAX_RANK, &h->q_lora_rank, err, errlen));
    TRY(key_uint(g, "attention.output_lora_rank", true, 0, 1, OG_DS4_MAX_RANK, &h->o_lora_rank, err, errlen));
    TRY(key_uint(g, "attention.output_group_count", true, 0, 1, h->n_head < OG_DS4_MAX_GROUP ? h->n_head : OG_DS4_MAX_GROUP,
                 &h->o_group_count, err, errlen));
    if (h->n_head % h->o_group_count)
        return og_fail(err, errlen, OG_ERR_FORMAT, "key " ARCH "attention.output_group_count = %u does not divide "
                       "attention.head_count = %u", h->o_group_count, h->n_head);
    TRY(key_uint(g, "attention.sliding_window", true, 0, 1, OG_DS4_MAX_SWA, &h->n_swa, err, errlen));

    /* compress_ratios: one entry per layer (llama.cpp refuses a shorter array) */
    const og_gguf_kv *cr = og_gguf_find_kv(g, ARCH "attention.compress_ratios");
    if (!cr) return og_fail(err, errlen, OG_ERR_NOT_FOUND, "missing key " ARCH "attention.compress_ratios");
    if (cr->type != OG_GGUF_ARRAY || cr->arr_n < n_all)
        return og_fail(err, errlen, OG_ERR_FORMAT, "key " ARCH "attention.compress_ratios must be an array of >= %u "
                       "integers (block_count)", n_all);
    bool any_csa = false, any_comp = false;
    for (uint32_t i = 0; i < h->n_layer; i++) {
        int64_t r;
        if (og_gguf_kv_num_i64(cr, i, &r)) /* a float or string array: say so, not "must be 0, 4 or 128" of a 0 */
            return og_fail(err, errlen, OG_ERR_FORMAT, "key " ARCH "attention.compress_ratios[%u] is not an integer "
                           "(the array must hold integers)", i);
        if (r != 0 && r != OG_DS4_RATIO_CSA && r != OG_DS4_RATIO_HCA)
            return og_fail(err, errlen, OG_ERR_FORMAT, "key " ARCH "attention.compress_ratios[%u] must be 0, 4 or 128", i);
        h->compress_ratio[i] = (uint32_t)r;
        any_csa |= r == OG_DS4_RATIO_CSA;
        any_comp |= r != 0;
    }
    TRY(key_uint(g, "attention.indexer.head_count", any_csa, 0, any_csa ? 1 : 0, OG_DS4_MAX_INDEXER_HEAD,
                 &h->indexer_n_head, err, errlen));
    TRY(key_uint(g, "attention.indexer.key_length", any_csa, 0, any_csa ? h->n_rot : 0, OG_DS4_MAX_INDEXER_DIM,
                 &h->indexer_head_dim, err, errlen));
    if (any_csa && (!is_pow2(h->indexer_head_dim) || h->indexer_head_dim < OG_DS4_MIN_INDEXER_DIM))
        return og_fail(err, errlen, OG_ERR_FORMAT, "key " ARCH "attention.indexer.key_length = %u is not a power of two "
                       "of at least %u (the indexer's Hadamard rotation and its FP4 rounding's blocks of 32, §4.2.1-2)",
                       h->indexer_head_dim, OG_DS4_MIN_INDEXER_DIM);
    TRY(key_uint(g, "attention.indexer.top_k", any_csa, 0, any_csa ? 1 : 0, OG_DS4_MAX_TOP_K, &h->indexer_top_k, err,
                 errlen));

    /* MoE (§4.1.6): every layer is MoE */
    TRY(key_uint(g, "expert_count", true, 0, 1, OG_DS4_MAX_EXPERT, &h->n_expert, err, errlen));
    TRY(key_uint(g, "expert_used_count", true, 0, 1, h->n_expert < OG_DS4_MAX_EXPERT_USED ? h->n_expert
                                                                                          : OG_DS4_MAX_EXPERT_USED,
                 &h->n_expert_used, err, errlen));
    TRY(key_uint(g, "expert_shared_count", true, 0, 0, OG_DS4_MAX_EXPERT_SHARED, &h->n_expert_shared, err, errlen));
    {
        const og_gguf_kv *ff = og_gguf_find_kv(g, ARCH "expert_feed_forward_length");
        if (ff && ff->type == OG_GGUF_ARRAY) { /* get_key_or_arr: one width per layer; we need them equal */
            int64_t v0 = -1;
            for (uint32_t i = 0; i < h->n_layer && i < ff->arr_n; i++) {
                int64_t v;
                if (og_gguf_kv_num_i64(ff, i, &v) || (v0 >= 0 && v != v0))
                    return og_fail(err, errlen, OG_ERR_UNSUPPORTED, "key " ARCH "expert_feed_forward_length: per-layer "
                                   "widths must be integers and all equal");
                v0 = v;
            }
            if (ff->arr_n < h->n_layer || v0 < 1 || v0 > (int64_t)OG_DS4_MAX_FF)
                return og_fail(err, errlen, OG_ERR_FORMAT, "key " ARCH "expert_feed_forward_length must hold %u widths "
                               "in 1..%u", h->n_layer, OG_DS4_MAX_FF);
            h->n_ff_exp = (uint32_t)v0;
        } else {
            TRY(key_uint(g, "expert_feed_forward_length", true, 0, 1, OG_DS4_MAX_FF, &h->n_ff_exp, err, errlen));
        }
    }
    TRY(key_uint(g, "expert_group_count", false, 0, 0, 1, &n_groups, err, errlen));
    TRY(key_uint(g, "expert_group_used_count", false, 0, 0, 1, &n_groups_used, err, errlen));
    TRY(key_uint(g, "expert_gating_func", true, 0, 0, 1000, &h->expert_gating_func, err, errlen));
    if (h->expert_gating_func != OG_DS4_GATING_SQRT_SOFTPLUS)
        return og_fail(err, errlen, OG_ERR_UNSUPPORTED, "key " ARCH "expert_gating_func = %u (deepseek4 scores experts "
                       "with sqrt(softplus), %u)", h->expert_gating_func, OG_DS4_GATING_SQRT_SOFTPLUS);
    TRY(key_uint(g, "hash_layer_count", true, 0, 0, h->n_layer, &h->hash_layer_count, err, errlen));
    if (og_gguf_get_bool(g, ARCH "expert_weights_norm", &h->expert_weights_norm))
        return og_fail(err, errlen, OG_ERR_NOT_FOUND, "missing or non-bool key " ARCH "expert_weights_norm");
    TRY(key_float(g, "expert_weights_scale", true, 0, 0.0f, true, 1e4f, &h->expert_weights_scale, err, errlen));
    bool found;
    TRY(key_float_per_layer(g, "swiglu_clamp_exp", h->n_layer, 1e6f, h->swiglu_clamp_exp, &found, err, errlen));
    if (!found) return og_fail(err, errlen, OG_ERR_NOT_FOUND, "missing key " ARCH "swiglu_clamp_exp");
    TRY(key_float_per_layer(g, "swiglu_clamp_shexp", h->n_layer, 1e6f, h->swiglu_clamp_shexp, &found, err, errlen));
    if (!found) {
        memcpy(h->swiglu_clamp_shexp, h->swiglu_clamp_exp, sizeof h->swiglu_clamp_exp);
        og_log(lg, OG_LOG_INFO, "no " ARCH "swiglu_clamp_shexp: the shared expert uses the routed clamp, as llama.cpp does");
    }

    /* mHC (§4.1.3) */
    TRY(key_uint(g, "hyper_connection.count", true, 0, 1, OG_DS4_MAX_HC, &h->hc_count, err, errlen));
    TRY(key_uint(g, "hyper_connection.sinkhorn_iterations", true, 0, 1, OG_DS4_MAX_SINKHORN, &h->hc_sinkhorn_iters, err,
                 errlen));
    TRY(key_float(g, "hyper_connection.epsilon", true, 0, 0.0f, true, 1.0f, &h->hc_eps, err, errlen));
    TRY(key_float(g, "attention.layer_norm_rms_epsilon", true, 0, 0.0f, true, 1.0f, &h->rms_eps, err, errlen));

    /* RoPE (§4.1.2) */
    float base, comp_base = 0, factor = 1, beta_fast = 32, beta_slow = 1;
    uint32_t n_ctx_orig;
    TRY(key_float(g, "rope.freq_base", false, 10000.0f, 1.0f, true, 1e12f, &base, err, errlen));
    TRY(key_float(g, "attention.compress_rope_freq_base", any_comp, base, 1.0f, true, 1e12f, &comp_base, err, errlen));
    char stype[16] = "linear"; /* llama.cpp's default when the key is absent */
    og_gguf_get_cstr(g, ARCH "rope.scaling.type", stype, sizeof stype);
    if (!strcmp(stype, "yarn")) h->rope_scaling = OG_DS4_ROPE_YARN;
    else if (!strcmp(stype, "linear")) h->rope_scaling = OG_DS4_ROPE_LINEAR;
    else if (!strcmp(stype, "none")) h->rope_scaling = OG_DS4_ROPE_NONE;
    else return og_fail(err, errlen, OG_ERR_UNSUPPORTED, "key " ARCH "rope.scaling.type = '%s' (yarn, linear or none)", stype);
    TRY(key_float(g, "rope.scaling.factor", false, 1.0f, 1.0f, false, 1e6f, &factor, err, errlen));
    TRY(key_uint(g, "rope.scaling.original_context_length", false, h->n_ctx_train, 1, OG_DS4_MAX_CTX, &n_ctx_orig, err,
                 errlen));
    TRY(key_float(g, "rope.scaling.yarn_beta_fast", false, 32.0f, 0.0f, true, 1e4f, &beta_fast, err, errlen));
    TRY(key_float(g, "rope.scaling.yarn_beta_slow", false, 1.0f, 0.0f, true, 1e4f, &beta_slow, err, errlen));
    if (any_comp && h->rope_scaling != OG_DS4_ROPE_YARN)
        og_log(lg, OG_LOG_INFO, "rope.scaling.type is '%s': compressed layers scale RoPE %s, as llama.cpp does", stype,
               h->rope_scaling == OG_DS4_ROPE_LINEAR ? "linearly (no YaRN ramp)" : "not at all");
    og_ds4_rope_schedules(h->rope_scaling, h->n_rot, base, comp_base, factor, n_ctx_orig, beta_fast, beta_slow, &h->rope_swa,
                          &h->rope_comp);

    /* n_vocab from token_embd [N, V] (§3.1) */
    const og_gguf_tensor *te = og_gguf_find_tensor(g, "token_embd.weight");
    if (!te) return og_fail(err, errlen, OG_ERR_NOT_FOUND, "missing tensor token_embd.weight");
    if (te->n_dims != 2 || te->ne[0] != (int64_t)h->n_embd || te->ne[1] < 1 || te->ne[1] > (int64_t)OG_DS4_MAX_VOCAB)
        return og_fail(err, errlen, OG_ERR_FORMAT, "tensor token_embd.weight must be [%u, 1..%u]", h->n_embd,
                       OG_DS4_MAX_VOCAB);
    h->n_vocab = (uint32_t)te->ne[1];
    uint32_t vs;
    TRY(key_uint(g, "vocab_size", false, h->n_vocab, h->n_vocab, h->n_vocab, &vs, err, errlen));
    return OG_OK;
}

/* ---- the table --------------------------------------------------------------- */

/* The table, one row per kind (the order of og_ds4_tensor_id):
 * X(id, name, where, n_dims, ne0, ne1, ne2, required, applied, role, wclass).
 * exp_probs_b_vl is for image tokens only (llama.cpp: is_media); text never
 * reads it. The .scale / .input_scale rows: see og_ds4_tensor_id. */
#define OG_DS4_ROWS(X) \
    X(TOKEN_EMBD, "token_embd.weight", GLOBAL, 2, EMBD, VOCAB, 1, true, true, EMBEDDINGS, EMBD) \
    X(OUTPUT_NORM, "output_norm.weight", GLOBAL, 1, EMBD, 1, 1, true, true, OUTPUT, NORM) \
    X(OUTPUT, "output.weight", GLOBAL, 2, EMBD, VOCAB, 1, true, true, OUTPUT, OUTPUT) \
    X(OUTPUT_HC_FN, "output_hc_fn.weight", GLOBAL, 2, HC_EMBD, HC, 1, true, true, OUTPUT, AUX) \
    X(OUTPUT_HC_BASE, "output_hc_base.weight", GLOBAL, 1, HC, 1, 1, true, true, OUTPUT, VEC) \
    X(OUTPUT_HC_SCALE, "output_hc_scale.weight", GLOBAL, 1, 1, 1, 1, true, true, OUTPUT, VEC) \
    X(HC_ATTN_FN, "hc_attn_fn.weight", EVERY, 2, HC_EMBD, HC_MIX, 1, true, true, OTHER, AUX) \
    X(HC_ATTN_BASE, "hc_attn_base.weight", EVERY, 1, HC_MIX, 1, 1, true, true, OTHER, VEC) \
    X(HC_ATTN_SCALE, "hc_attn_scale.weight", EVERY, 1, 3, 1, 1, true, true, OTHER, VEC) \
    X(ATTN_NORM, "attn_norm.weight", EVERY, 1, EMBD, 1, 1, true, true, ATTENTION, NORM) \
    X(ATTN_Q_A, "attn_q_a.weight", EVERY, 2, EMBD, Q_RANK, 1, true, true, ATTENTION, ATTN) \
    X(ATTN_Q_A_NORM, "attn_q_a_norm.weight", EVERY, 1, Q_RANK, 1, 1, true, true, ATTENTION, NORM) \
    X(ATTN_Q_B, "attn_q_b.weight", EVERY, 2, Q_RANK, Q, 1, true, true, ATTENTION, ATTN) \
    X(ATTN_KV, "attn_kv.weight", EVERY, 2, EMBD, HEAD_DIM, 1, true, true, ATTENTION, ATTN) \
    X(ATTN_KV_A_NORM, "attn_kv_a_norm.weight", EVERY, 1, HEAD_DIM, 1, 1, true, true, ATTENTION, NORM) \
    X(ATTN_SINKS, "attn_sinks.weight", EVERY, 1, HEAD, 1, 1, true, true, ATTENTION, VEC) \
    X(ATTN_OUTPUT_A, "attn_output_a.weight", EVERY, 2, O_GROUP_IN, O_LOW, 1, true, true, ATTENTION, ATTN) \
    X(ATTN_OUTPUT_B, "attn_output_b.weight", EVERY, 2, O_LOW, EMBD, 1, true, true, ATTENTION, ATTN) \
    X(ATTN_COMP_KV, "attn_compressor_kv.weight", COMPRESSED, 2, EMBD, COMP, 1, true, true, ATTENTION, AUX) \
    X(ATTN_COMP_GATE, "attn_compressor_gate.weight", COMPRESSED, 2, EMBD, COMP, 1, true, true, ATTENTION, AUX) \
    X(ATTN_COMP_APE, "attn_compressor_ape.weight", COMPRESSED, 2, COMP, RATIO, 1, true, true, ATTENTION, AUX) \
    X(ATTN_COMP_NORM, "attn_compressor_norm.weight", COMPRESSED, 1, HEAD_DIM, 1, 1, true, true, ATTENTION, NORM) \
    X(INDEXER_Q_B, "indexer.attn_q_b.weight", CSA, 2, Q_RANK, IDX_Q, 1, true, true, ATTENTION, AUX) \
    X(INDEXER_PROJ, "indexer.proj.weight", CSA, 2, EMBD, IDX_HEAD, 1, true, true, ATTENTION, AUX) \
    X(INDEXER_COMP_KV, "indexer_compressor_kv.weight", CSA, 2, EMBD, IDX_COMP, 1, true, true, ATTENTION, AUX) \
    X(INDEXER_COMP_GATE, "indexer_compressor_gate.weight", CSA, 2, EMBD, IDX_COMP, 1, true, true, ATTENTION, AUX) \
    X(INDEXER_COMP_APE, "indexer_compressor_ape.weight", CSA, 2, IDX_COMP, RATIO, 1, true, true, ATTENTION, AUX) \
    X(INDEXER_COMP_NORM, "indexer_compressor_norm.weight", CSA, 1, IDX_DIM, 1, 1, true, true, ATTENTION, NORM) \
    X(HC_FFN_FN, "hc_ffn_fn.weight", EVERY, 2, HC_EMBD, HC_MIX, 1, true, true, OTHER, AUX) \
    X(HC_FFN_BASE, "hc_ffn_base.weight", EVERY, 1, HC_MIX, 1, 1, true, true, OTHER, VEC) \
    X(HC_FFN_SCALE, "hc_ffn_scale.weight", EVERY, 1, 3, 1, 1, true, true, OTHER, VEC) \
    X(FFN_NORM, "ffn_norm.weight", EVERY, 1, EMBD, 1, 1, true, true, NORM, NORM) \
    X(FFN_GATE_INP, "ffn_gate_inp.weight", EVERY, 2, EMBD, EXPERT, 1, true, true, ROUTER, AUX) \
    X(EXP_PROBS_B, "exp_probs_b.bias", ROUTED_BIAS, 1, EXPERT, 1, 1, true, true, ROUTER, VEC) \
    X(EXP_PROBS_B_VL, "exp_probs_b_vl.bias", EVERY, 1, EXPERT, 1, 1, false, false, ROUTER, VEC) \
    X(FFN_GATE_TID2EID, "ffn_gate_tid2eid.weight", HASH, 2, EXPERT_USED, VOCAB, 1, true, true, ROUTER, I32) \
    X(FFN_GATE_EXPS, "ffn_gate_exps.weight", EVERY, 3, EMBD, FF, EXPERT, true, true, ROUTED_EXPERTS, ROUTED) \
    X(FFN_UP_EXPS, "ffn_up_exps.weight", EVERY, 3, EMBD, FF, EXPERT, true, true, ROUTED_EXPERTS, ROUTED) \
    X(FFN_DOWN_EXPS, "ffn_down_exps.weight", EVERY, 3, FF, EMBD, EXPERT, true, true, ROUTED_EXPERTS, ROUTED_DOWN) \
    X(FFN_GATE_SHEXP, "ffn_gate_shexp.weight", SHARED, 2, EMBD, FF_SH, 1, true, true, SHARED_EXPERTS, SHARED) \
    X(FFN_UP_SHEXP, "ffn_up_shexp.weight", SHARED, 2, EMBD, FF_SH, 1, true, true, SHARED_EXPERTS, SHARED) \
    X(FFN_DOWN_SHEXP, "ffn_down_shexp.weight", SHARED, 2, FF_SH, EMBD, 1, true, true, SHARED_EXPERTS, SHARED) \
    X(FFN_GATE_EXPS_SCALE, "ffn_gate_exps.scale", EVERY, 1, EXPERT, 1, 1, false, false, ROUTED_EXPERTS, VEC) \
    X(FFN_UP_EXPS_SCALE, "ffn_up_exps.scale", EVERY, 1, EXPERT, 1, 1, false, false, ROUTED_EXPERTS, VEC) \
    X(FFN_DOWN_EXPS_SCALE, "ffn_down_exps.scale", EVERY, 1, EXPERT, 1, 1, false, false, ROUTED_EXPERTS, VEC) \
    X(FFN_GATE_EXPS_INSCALE, "ffn_gate_exps.input_scale", EVERY, 1, EXPERT, 1, 1, false, false, ROUTED_EXPERTS, VEC) \
    X(FFN_UP_EXPS_INSCALE, "ffn_up_exps.input_scale", EVERY, 1, EXPERT, 1, 1, false, false, ROUTED_EXPERTS, VEC) \
    X(FFN_DOWN_EXPS_INSCALE, "ffn_down_exps.input_scale", EVERY, 1, EXPERT, 1, 1, false, false, ROUTED_EXPERTS, VEC) \
    X(FFN_GATE_SHEXP_SCALE, "ffn_gate_shexp.scale", SHARED, 1, 1, 1, 1, false, false, SHARED_EXPERTS, VEC) \
    X(FFN_UP_SHEXP_SCALE, "ffn_up_shexp.scale", SHARED, 1, 1, 1, 1, false, false, SHARED_EXPERTS, VEC) \
    X(FFN_DOWN_SHEXP_SCALE, "ffn_down_shexp.scale", SHARED, 1, 1, 1, 1, false, false, SHARED_EXPERTS, VEC) \
    X(FFN_GATE_SHEXP_INSCALE, "ffn_gate_shexp.input_scale", SHARED, 1, 1, 1, 1, false, false, SHARED_EXPERTS, VEC) \
    X(FFN_UP_SHEXP_INSCALE, "ffn_up_shexp.input_scale", SHARED, 1, 1, 1, 1, false, false, SHARED_EXPERTS, VEC) \
    X(FFN_DOWN_SHEXP_INSCALE, "ffn_down_shexp.input_scale", SHARED, 1, 1, 1, 1, false, false, SHARED_EXPERTS, VEC)

#define D(x) OG_DS4_D_##x
#define KIND(id, nm, wh, nd, a, b, c, req, app, role, wc) \
    [OG_DS4_##id] = {nm, OG_DS4_##wh, nd, {D(a), D(b), D(c)}, req, app, OG_ROLE_##role, OG_DS4_W_##wc},
#define AROW(id, nm, wh, nd, a, b, c, req, app, role, wc) [OG_DS4_##id] = {nm, OG_ROLE_##role, OG_DS4_##wh != OG_DS4_GLOBAL},
#define ONE(...) +1
_Static_assert(0 OG_DS4_ROWS(ONE) == OG_DS4_N_TENSOR, "one row per og_ds4_tensor_id");
#undef ONE
const og_ds4_tensor_kind og_ds4_tensors[OG_DS4_N_TENSOR] = {OG_DS4_ROWS(KIND)};
const og_arch_tensor og_ds4_arch_tensors[OG_DS4_N_TENSOR] = {OG_DS4_ROWS(AROW)};
#undef KIND
#undef AROW
#undef D

bool og_ds4_tensor_in_layer(const og_ds4_hparams *hp, og_ds4_tensor_id id, int il) {
    if ((unsigned)id >= OG_DS4_N_TENSOR) return false;
    const og_ds4_where w = og_ds4_tensors[id].where;
    if (w == OG_DS4_GLOBAL) return il < 0;
    if (il < 0 || (uint32_t)il >= hp->n_layer) return false;
    const uint32_t r = hp->compress_ratio[il];
    switch (w) {
    case OG_DS4_EVERY: return true;
    case OG_DS4_COMPRESSED: return r != 0;
    case OG_DS4_CSA: return r == OG_DS4_RATIO_CSA;
    case OG_DS4_HASH: return (uint32_t)il < hp->hash_layer_count;
    case OG_DS4_ROUTED_BIAS: return (uint32_t)il >= hp->hash_layer_count;
    case OG_DS4_SHARED: return hp->n_expert_shared > 0;
    case OG_DS4_GLOBAL: break;
    }
    return false;
}

static int64_t dim_value(const og_ds4_hparams *h, og_ds4_dim d, int il) {
    const uint32_t r = il >= 0 ? h->compress_ratio[il] : 0;
    switch (d) {
    case OG_DS4_D_1: return 1;
    case OG_DS4_D_3: return 3;
    case OG_DS4_D_EMBD: return h->n_embd;
    case OG_DS4_D_VOCAB: return h->n_vocab;
    case OG_DS4_D_HC: return h->hc_count;
    case OG_DS4_D_HC_EMBD: return (int64_t)h->hc_count * h->n_embd;
    case OG_DS4_D_HC_MIX: return (int64_t)(2 + h->hc_count) * h->hc_count;
    case OG_DS4_D_Q_RANK: return h->q_lora_rank;
    case OG_DS4_D_HEAD: return h->n_head;
    case OG_DS4_D_HEAD_DIM: return h->head_dim;
    case OG_DS4_D_Q: return (int64_t)h->n_head * h->head_dim;
    case OG_DS4_D_O_GROUP_IN: return (int64_t)h->n_head * h->head_dim / h->o_group_count;
    case OG_DS4_D_O_RANK: return h->o_lora_rank;
    case OG_DS4_D_O_GROUPS: return h->o_group_count;
    case OG_DS4_D_O_LOW: return (int64_t)h->o_group_count * h->o_lora_rank;
    case OG_DS4_D_COMP: return (int64_t)(r == OG_DS4_RATIO_CSA ? 2 : 1) * h->head_dim;
    case OG_DS4_D_RATIO: return r;
    case OG_DS4_D_IDX_HEAD: return h->indexer_n_head;
    case OG_DS4_D_IDX_Q: return (int64_t)h->indexer_n_head * h->indexer_head_dim;
    case OG_DS4_D_IDX_COMP: return 2 * (int64_t)h->indexer_head_dim;
    case OG_DS4_D_IDX_DIM: return h->indexer_head_dim;
    case OG_DS4_D_EXPERT: return h->n_expert;
    case OG_DS4_D_EXPERT_USED: return h->n_expert_used;
    case OG_DS4_D_FF: return h->n_ff_exp;
    case OG_DS4_D_FF_SH: return (int64_t)h->n_ff_exp * h->n_expert_shared;
    }
    return 0;
}

og_status og_ds4_tensor_shape(const og_ds4_hparams *hp, og_ds4_tensor_id id, int il, int64_t ne[3], uint32_t *n_dims) {
    if (!og_ds4_tensor_in_layer(hp, id, il)) return OG_ERR_INVALID_ARG;
    const og_ds4_tensor_kind *k = &og_ds4_tensors[id];
    for (int d = 0; d < 3; d++) ne[d] = dim_value(hp, k->ne[d], il);
    *n_dims = k->n_dims;
    return OG_OK;
}

og_status og_ds4_tensor_name(og_ds4_tensor_id id, int il, char *buf, size_t buflen) {
    if ((unsigned)id >= OG_DS4_N_TENSOR || !buflen) return OG_ERR_INVALID_ARG;
    const og_ds4_tensor_kind *k = &og_ds4_tensors[id];
    int n = k->where == OG_DS4_GLOBAL ? snprintf(buf, buflen, "%s", k->name) : snprintf(buf, buflen, "blk.%d.%s", il, k->name);
    return n < 0 || (size_t)n >= buflen ? OG_ERR_RANGE : OG_OK;
}

og_status og_ds4_tensor_find(const og_gguf *g, const og_ds4_hparams *hp, og_ds4_tensor_id id, int il,
                             const og_gguf_tensor **out, char *err, size_t errlen) {
    *out = NULL;
    char name[96];
    int64_t ne[3];
    uint32_t nd;
    if (og_ds4_tensor_shape(hp, id, il, ne, &nd) || og_ds4_tensor_name(id, il, name, sizeof name))
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "deepseek4 tensor kind %d is not in layer %d", (int)id, il);
    const og_ds4_tensor_kind *k = &og_ds4_tensors[id];
    const og_gguf_tensor *t = og_gguf_find_tensor(g, name);
    if (!t) return k->required ? og_fail(err, errlen, OG_ERR_NOT_FOUND, "missing tensor %s", name) : OG_OK;
    /* attn_output_a: also llama.cpp's writer's [H D / G, o_rank, G], the same bytes */
    const int64_t alt[3] = {ne[0], hp->o_lora_rank, hp->o_group_count};
    TRY(og_arch_check_shape(t, ne, id == OG_DS4_ATTN_OUTPUT_A ? alt : NULL, err, errlen));
    if ((k->wclass == OG_DS4_W_I32) != (t->type == OG_TYPE_I32))
        return og_fail(err, errlen, OG_ERR_FORMAT, "tensor %s is %s, expected %s", name, og_type_name(t->type),
                       k->wclass == OG_DS4_W_I32 ? "I32" : "a float or quantized type");
    if ((k->wclass == OG_DS4_W_NORM || k->wclass == OG_DS4_W_VEC) && t->type != OG_TYPE_F32)
        return og_fail(err, errlen, OG_ERR_FORMAT, "tensor %s is %s, expected F32", name, og_type_name(t->type));
    *out = t;
    return OG_OK;
}

og_status og_ds4_tensors_check(const og_gguf *g, const og_ds4_hparams *hp, char *err, size_t errlen) {
    for (int il = -1; il < (int)hp->n_layer; il++)
        for (int id = 0; id < OG_DS4_N_TENSOR; id++) {
            if (!og_ds4_tensor_in_layer(hp, (og_ds4_tensor_id)id, il)) continue;
            const og_gguf_tensor *t;
            TRY(og_ds4_tensor_find(g, hp, (og_ds4_tensor_id)id, il, &t, err, errlen));
            if (id != OG_DS4_FFN_GATE_TID2EID || !t || !t->data) continue;
            uint64_t bad = 0;
            if (og_gguf_tensor_i32_check(t, 0, (int32_t)hp->n_expert - 1, &bad)) {
                int32_t v = 0;
                og_gguf_tensor_i32(t, bad, &v);
                return og_fail(err, errlen, OG_ERR_RANGE, "tensor %s: element %llu = %d is not an expert id (0..%u)",
                               t->name, (unsigned long long)bad, v, hp->n_expert - 1);
            }
        }
    return OG_OK;
}

og_ds4_tensor_id og_ds4_tensor_lookup(const char *name, int *il) {
    *il = -1;
    const char *rest = name;
    if (!strncmp(name, "blk.", 4)) {
        char *end;
        long n = strtol(name + 4, &end, 10);
        if (end == name + 4 || *end != '.' || n < 0 || n >= (long)OG_DS4_MAX_LAYER) return OG_DS4_N_TENSOR;
        *il = (int)n;
        rest = end + 1;
    }
    for (int id = 0; id < OG_DS4_N_TENSOR; id++)
        if ((og_ds4_tensors[id].where == OG_DS4_GLOBAL) == (*il < 0) && !strcmp(rest, og_ds4_tensors[id].name))
            return (og_ds4_tensor_id)id;
    return OG_DS4_N_TENSOR;
}

og_tensor_role og_ds4_role(const char *name) {
    return og_arch_table_role(og_ds4_arch_tensors, OG_DS4_N_TENSOR, name);
}
