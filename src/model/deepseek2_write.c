/* Synthetic deepseek2 GGUF writer. Tensor names, shapes and keys follow
 * shared/spec/deepseek2.md §1-§2; weights are seeded uniform noise scaled by
 * 1/sqrt(fan_in) so every projection keeps the RMS of its input (pre-norm
 * residual stream grows ~sqrt(layers), never vanishes or explodes). */
#include "deepseek2.h"
#include "og_model_write.h"
#include "og_quant.h"

#include <math.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>

static const char *const preset_names[] = {"tiny", "demo", "v3-671b"};

og_status og_ds2_synth_preset(const char *name, og_ds2_synth_config *c) {
    memset(c, 0, sizeof *c);
    /* Common: DeepSeek-V3 conventions (sigmoid routing, bias, norm, x2.5, YaRN). */
    c->seed = 42;
    c->gating = 2;
    c->expert_scale = 2.5f;
    c->expert_norm = true;
    c->group_keys = true;
    c->rope_base = 10000.0f;
    c->rope_factor = 40.0f;
    c->n_ctx_orig = 4096;
    c->yarn_log_mul = 0.1f;
    c->rms_eps = 1e-6f;
    c->n_vocab = 129280;
    c->router_skew = 1.0f;
    for (int r = 0; r < OG_DS2_SYN_COUNT; r++) c->types[r] = OG_TYPE_F32;
    if (!strcmp(name, "tiny")) {
        /* <= 50 MB: the real 129,280-token vocabulary dominates, so embeddings and
         * output are F16 and the layers small. */
        c->name = "onegpu-tiny";
        c->n_layer = 8; c->n_embd = 64; c->n_head = 4;
        c->q_lora_rank = 32; c->kv_lora_rank = 32;
        c->qk_nope = 32; c->qk_rope = 16; c->v_head = 32;
        c->n_ff = 128; c->n_dense = 1;
        c->n_expert = 16; c->n_expert_used = 4; c->n_expert_shared = 1; c->n_ff_exp = 64;
        c->n_group = 4; c->n_group_used = 2;
        c->n_ctx = 4096;
        c->types[OG_DS2_SYN_EMBD] = c->types[OG_DS2_SYN_OUTPUT] = OG_TYPE_F16;
    } else if (!strcmp(name, "demo")) {
        /* A few hundred MB, served by `./run.sh --demo` with the CPU playing the GPU. */
        c->name = "onegpu-demo";
        c->n_layer = 8; c->n_embd = 512; c->n_head = 8;
        c->q_lora_rank = 128; c->kv_lora_rank = 128;
        c->qk_nope = 64; c->qk_rope = 32; c->v_head = 64;
        c->n_ff = 1024; c->n_dense = 1;
        c->n_expert = 32; c->n_expert_used = 4; c->n_expert_shared = 1; c->n_ff_exp = 256;
        c->n_group = 4; c->n_group_used = 2;
        c->n_ctx = 8192;
        for (int r = 0; r < OG_DS2_SYN_COUNT; r++) c->types[r] = OG_TYPE_Q8_0;
    } else if (!strcmp(name, "v3-671b")) {
        /* DeepSeek-V3/R1 shapes (deepseek2.md §1); Q2_K experts, Q4_K elsewhere. */
        c->name = "onegpu-v3-671b-shape";
        c->n_layer = 61; c->n_embd = 7168; c->n_head = 128;
        c->q_lora_rank = 1536; c->kv_lora_rank = 512;
        c->qk_nope = 128; c->qk_rope = 64; c->v_head = 128;
        c->n_ff = 18432; c->n_dense = 3;
        c->n_expert = 256; c->n_expert_used = 8; c->n_expert_shared = 1; c->n_ff_exp = 2048;
        c->n_group = 8; c->n_group_used = 4;
        c->n_ctx = 163840;
        for (int r = 0; r < OG_DS2_SYN_COUNT; r++) c->types[r] = OG_TYPE_Q4_K;
        c->types[OG_DS2_SYN_ROUTED] = OG_TYPE_Q2_K;
        c->types[OG_DS2_SYN_EMBD] = OG_TYPE_Q4_K;
        c->types[OG_DS2_SYN_OUTPUT] = OG_TYPE_Q6_K;
    } else {
        return OG_ERR_NOT_FOUND;
    }
    (void)preset_names;
    return OG_OK;
}

og_status og_ds2_synth_validate(const og_ds2_synth_config *c, char *err, size_t errlen) {
#define REQ(cond, ...) do { if (!(cond)) return og_fail(err, errlen, OG_ERR_INVALID_ARG, __VA_ARGS__); } while (0)
    /* The loader's bounds (OG_DS2_MAX_*, far above any real model): make-model
     * never writes a file that og_model_load refuses. */
    REQ(c->n_layer >= 1 && c->n_layer <= OG_DS2_MAX_LAYER, "--n-layer must be 1..%u", OG_DS2_MAX_LAYER);
    REQ(c->n_embd <= OG_DS2_MAX_EMBD && c->n_head <= OG_DS2_MAX_HEAD, "--n-embd is at most %u and --n-head %u",
        OG_DS2_MAX_EMBD, OG_DS2_MAX_HEAD);
    REQ(c->q_lora_rank <= OG_DS2_MAX_Q_RANK && c->kv_lora_rank <= OG_DS2_MAX_KV_RANK,
        "--q-lora-rank is at most %u and --kv-lora-rank %u", OG_DS2_MAX_Q_RANK, OG_DS2_MAX_KV_RANK);
    REQ(c->qk_rope <= OG_DS2_MAX_ROPE, "--qk-rope is at most %u", OG_DS2_MAX_ROPE);
    REQ(c->qk_nope <= OG_DS2_MAX_HEAD_DIM - c->qk_rope && c->v_head <= OG_DS2_MAX_HEAD_DIM,
        "--qk-nope + --qk-rope and --v-head are at most %u", OG_DS2_MAX_HEAD_DIM);
    REQ(c->n_ff <= OG_DS2_MAX_FF && c->n_ff_exp <= OG_DS2_MAX_FF, "FFN widths are at most %u", OG_DS2_MAX_FF);
    REQ(c->n_expert <= OG_DS2_MAX_EXPERT && c->n_expert_shared <= OG_DS2_MAX_EXPERT_SHARED,
        "at most %u routed and %u shared experts", OG_DS2_MAX_EXPERT, OG_DS2_MAX_EXPERT_SHARED);
    REQ(c->n_expert_used <= OG_DS2_MAX_EXPERT_USED, "--n-expert-used is at most %u", OG_DS2_MAX_EXPERT_USED);
    REQ(c->n_group <= OG_DS2_MAX_GROUP, "--n-group is at most %u", OG_DS2_MAX_GROUP);
    REQ(c->n_vocab <= OG_DS2_MAX_VOCAB && c->n_ctx <= OG_DS2_MAX_CTX && c->n_ctx_orig <= OG_DS2_MAX_CTX,
        "--vocab is at most %u and --ctx %u", OG_DS2_MAX_VOCAB, OG_DS2_MAX_CTX);
    REQ(isfinite(c->expert_scale) && c->expert_scale >= 0, "--expert-weights-scale must be a finite number >= 0");
    REQ(c->n_embd >= 1 && c->n_head >= 1, "--n-embd and --n-head must be positive");
    REQ(c->kv_lora_rank >= 1 && c->qk_nope >= 1 && c->v_head >= 1, "MLA sizes must be positive");
    REQ(c->qk_rope >= 2 && c->qk_rope % 2 == 0, "--qk-rope must be even and >= 2 (RoPE rotates pairs)");
    REQ(c->n_dense <= c->n_layer, "--n-dense (%u) exceeds --n-layer (%u)", c->n_dense, c->n_layer);
    REQ(c->n_dense == 0 || c->n_ff >= 1, "--n-ff must be positive when there are dense layers");
    if (c->n_dense < c->n_layer) {
        REQ(c->n_expert >= 1 && c->n_expert_used >= 1 && c->n_expert_used <= c->n_expert,
            "need 1 <= --n-expert-used (%u) <= --n-expert (%u)", c->n_expert_used, c->n_expert);
        REQ(c->n_ff_exp >= 1, "--n-ff-exp must be positive");
        if (c->n_group > 1) {
            REQ(c->n_expert % c->n_group == 0, "--n-expert (%u) must be a multiple of --n-group (%u)",
                c->n_expert, c->n_group);
            REQ(c->n_group_used >= 1 && c->n_group_used < c->n_group,
                "need 0 < --n-group-used (%u) < --n-group (%u)", c->n_group_used, c->n_group);
            REQ(c->n_expert_used <= c->n_group_used * (c->n_expert / c->n_group),
                "--n-expert-used (%u) exceeds the experts in the kept groups", c->n_expert_used);
            REQ(c->n_expert / c->n_group >= 2, "each group needs >= 2 experts (group score is a top-2 sum)");
        }
    }
    REQ(c->gating == 1 || c->gating == 2, "--gating must be softmax or sigmoid");
    REQ(c->n_ctx >= 1, "--ctx must be positive");
    REQ(c->n_vocab >= 1, "--vocab must be positive");
    REQ(c->router_skew >= 0 && c->router_skew <= 10, "--router-skew must be in [0, 10]");
#undef REQ
    return OG_OK;
}

/* ---- tensor list -------------------------------------------------------- */

typedef enum { INIT_WEIGHT, INIT_NORM, INIT_ROUTER, INIT_BIAS } init_kind;

typedef struct tinfo {
    init_kind kind;
    float gain;   /* weights: std = gain / sqrt(ne0) */
    int layer;
} tinfo;

typedef struct build {
    const og_ds2_synth_config *c;
    og_gguf_writer *w;
    tinfo *info;
    size_t n, cap;
    bool sparse;
    uint64_t type_bytes[OG_TYPE_COUNT];
    uint32_t fallbacks[OG_TYPE_COUNT][OG_TYPE_COUNT]; /* [asked][stored] tensor counts */
    uint64_t max_tensor_bytes;
    char *err;
    size_t errlen;
} build;

static og_status add(build *b, const char *name, og_ggml_type type, uint32_t n_dims, int64_t ne0,
                     int64_t ne1, int64_t ne2, init_kind kind, float gain, int layer) {
    int64_t ne[3] = {ne0, ne1, ne2};
    og_status st = og_model_write_type(name, type, ne0, b->sparse, b->fallbacks, &type, b->err, b->errlen);
    if (st) return st;
    st = og_gguf_writer_add_tensor(b->w, name, type, n_dims, ne, NULL);
    if (st) return og_fail(b->err, b->errlen, st, "%s: cannot add tensor (%s)", name, og_status_str(st));
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        tinfo *ni = realloc(b->info, cap * sizeof *ni);
        if (!ni) return og_fail(b->err, b->errlen, OG_ERR_NOMEM, "out of memory");
        b->info = ni;
        b->cap = cap;
    }
    b->info[b->n++] = (tinfo){kind, gain, layer};
    uint64_t row;
    og_row_bytes(type, (uint64_t)ne0, &row);
    uint64_t bytes = row * (uint64_t)ne1 * (uint64_t)(n_dims > 2 ? ne2 : 1);
    b->type_bytes[type] += bytes;
    if (bytes > b->max_tensor_bytes) b->max_tensor_bytes = bytes;
    return OG_OK;
}

#define ADD(...) do { og_status st_ = add(__VA_ARGS__); if (st_) return st_; } while (0)

static og_status add_tensors(build *b) {
    const og_ds2_synth_config *c = b->c;
    const og_ggml_type *T = c->types;
    const int64_t D = c->n_embd, H = c->n_head, V = c->n_vocab;
    const int64_t d_qk = c->qk_nope + c->qk_rope, r_kv = c->kv_lora_rank;
    char nm[64];
    ADD(b, og_ds2_tensors[OG_DS2_TOKEN_EMBD].name, T[OG_DS2_SYN_EMBD], 2, D, V, 1, INIT_WEIGHT, sqrtf((float)D), -1);
    for (uint32_t l = 0; l < c->n_layer; l++) {
        int L = (int)l;
#define TN(t) og_ds2_name(t, (uint32_t)l, nm, sizeof nm)
        ADD(b, TN(OG_DS2_ATTN_NORM), OG_TYPE_F32, 1, D, 1, 1, INIT_NORM, 0, L);
        if (c->q_lora_rank) {
            ADD(b, TN(OG_DS2_ATTN_Q_A), T[OG_DS2_SYN_ATTN], 2, D, c->q_lora_rank, 1, INIT_WEIGHT, 1, L);
            ADD(b, TN(OG_DS2_ATTN_Q_A_NORM), OG_TYPE_F32, 1, c->q_lora_rank, 1, 1, INIT_NORM, 0, L);
            ADD(b, TN(OG_DS2_ATTN_Q_B), T[OG_DS2_SYN_ATTN], 2, c->q_lora_rank, H * d_qk, 1, INIT_WEIGHT, 1, L);
        } else {
            ADD(b, TN(OG_DS2_ATTN_Q), T[OG_DS2_SYN_ATTN], 2, D, H * d_qk, 1, INIT_WEIGHT, 1, L);
        }
        ADD(b, TN(OG_DS2_ATTN_KV_A_MQA), T[OG_DS2_SYN_ATTN], 2, D, r_kv + c->qk_rope, 1, INIT_WEIGHT, 1, L);
        ADD(b, TN(OG_DS2_ATTN_KV_A_NORM), OG_TYPE_F32, 1, r_kv, 1, 1, INIT_NORM, 0, L);
        if (c->legacy_mla) {
            ADD(b, TN(OG_DS2_ATTN_KV_B), T[OG_DS2_SYN_ATTN], 2, r_kv, H * (c->qk_nope + c->v_head), 1, INIT_WEIGHT, 1, L);
        } else {
            ADD(b, TN(OG_DS2_ATTN_K_B), T[OG_DS2_SYN_ATTN], 3, c->qk_nope, r_kv, H, INIT_WEIGHT, 1, L);
            ADD(b, TN(OG_DS2_ATTN_V_B), T[OG_DS2_SYN_ATTN], 3, r_kv, c->v_head, H, INIT_WEIGHT, 1, L);
        }
        ADD(b, TN(OG_DS2_ATTN_OUTPUT), T[OG_DS2_SYN_ATTN], 2, H * c->v_head, D, 1, INIT_WEIGHT, 1, L);
        ADD(b, TN(OG_DS2_FFN_NORM), OG_TYPE_F32, 1, D, 1, 1, INIT_NORM, 0, L);
        if (l < c->n_dense) {
            ADD(b, TN(OG_DS2_FFN_GATE), T[OG_DS2_SYN_DENSE], 2, D, c->n_ff, 1, INIT_WEIGHT, 1, L);
            ADD(b, TN(OG_DS2_FFN_UP), T[OG_DS2_SYN_DENSE], 2, D, c->n_ff, 1, INIT_WEIGHT, 1, L);
            ADD(b, TN(OG_DS2_FFN_DOWN), T[OG_DS2_SYN_DENSE], 2, c->n_ff, D, 1, INIT_WEIGHT, 1, L);
        } else {
            const int64_t E = c->n_expert, Fe = c->n_ff_exp, Fs = (int64_t)c->n_expert_shared * Fe;
            ADD(b, TN(OG_DS2_FFN_GATE_INP), OG_TYPE_F32, 2, D, E, 1, INIT_ROUTER, 1, L);
            if (c->gating == 2) ADD(b, TN(OG_DS2_EXP_PROBS_B), OG_TYPE_F32, 1, E, 1, 1, INIT_BIAS, 0, L);
            ADD(b, TN(OG_DS2_FFN_GATE_EXPS), T[OG_DS2_SYN_ROUTED], 3, D, Fe, E, INIT_WEIGHT, 1, L);
            ADD(b, TN(OG_DS2_FFN_UP_EXPS), T[OG_DS2_SYN_ROUTED], 3, D, Fe, E, INIT_WEIGHT, 1, L);
            ADD(b, TN(OG_DS2_FFN_DOWN_EXPS), T[OG_DS2_SYN_ROUTED], 3, Fe, D, E, INIT_WEIGHT, 1, L);
            if (c->n_expert_shared) {
                ADD(b, TN(OG_DS2_FFN_GATE_SHEXP), T[OG_DS2_SYN_SHARED], 2, D, Fs, 1, INIT_WEIGHT, 1, L);
                ADD(b, TN(OG_DS2_FFN_UP_SHEXP), T[OG_DS2_SYN_SHARED], 2, D, Fs, 1, INIT_WEIGHT, 1, L);
                ADD(b, TN(OG_DS2_FFN_DOWN_SHEXP), T[OG_DS2_SYN_SHARED], 2, Fs, D, 1, INIT_WEIGHT, 1, L);
            }
        }
#undef TN
    }
    ADD(b, og_ds2_tensors[OG_DS2_OUTPUT_NORM].name, OG_TYPE_F32, 1, D, 1, 1, INIT_NORM, 0, -1);
    /* gain 4: logits with std ~4, so the top-2 gap of a greedy pick is usually
     * far above float noise (fewer near-ties against other implementations). */
    ADD(b, og_ds2_tensors[OG_DS2_OUTPUT].name, T[OG_DS2_SYN_OUTPUT], 2, D, V, 1, INIT_WEIGHT, 4, -1);
    return OG_OK;
}

/* ---- metadata ------------------------------------------------------------ */

og_status og_model_write_vocab(og_gguf_writer *w, const og_model_vocab *vocab, const char *pre, const og_str *chat_template) {
    og_status st = OG_OK;
#define K(expr) do { if ((st = (expr))) return st; } while (0)
    K(og_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2"));
    K(og_gguf_writer_set_str(w, "tokenizer.ggml.pre", pre));
    K(og_gguf_writer_set_arr(w, "tokenizer.ggml.tokens", OG_GGUF_STRING, vocab->tokens, vocab->n_vocab));
    K(og_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", OG_GGUF_INT32, vocab->types, vocab->n_vocab));
    K(og_gguf_writer_set_arr(w, "tokenizer.ggml.merges", OG_GGUF_STRING, vocab->merges, vocab->n_merges));
    if (vocab->bos_id != UINT32_MAX) K(og_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", vocab->bos_id));
    if (vocab->eos_id != UINT32_MAX) K(og_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", vocab->eos_id));
    if (vocab->pad_id != UINT32_MAX) K(og_gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", vocab->pad_id));
    K(og_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", vocab->add_bos));
    K(og_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", vocab->add_eos));
    if (chat_template && chat_template->n) K(og_gguf_writer_set(w, "tokenizer.chat_template", OG_GGUF_STRING, chat_template));
#undef K
    return OG_OK;
}

og_status og_model_write_type(const char *name, og_ggml_type asked, int64_t ne0, bool sparse,
                              uint32_t fallbacks[OG_TYPE_COUNT][OG_TYPE_COUNT], og_ggml_type *stored, char *err,
                              size_t errlen) {
    og_ggml_type type = og_quant_fallback_type(asked, ne0);
    if (type != asked) fallbacks[asked][type]++;
    if (!sparse && !og_quant_can_quantize(type))
        return og_fail(err, errlen, OG_ERR_UNSUPPORTED,
                       "%s: onegpu has no quantizer for %s%s%s; use --sparse for a planning-only file", name,
                       og_type_name(type), type != asked ? ", the fallback for " : "",
                       type != asked ? og_type_name(asked) : "");
    *stored = type;
    return OG_OK;
}

void og_model_write_log_fallbacks(const og_logger *lg, uint32_t fallbacks[OG_TYPE_COUNT][OG_TYPE_COUNT]) {
    for (int from = 0; from < OG_TYPE_COUNT; from++)
        for (int to = 0; to < OG_TYPE_COUNT; to++)
            if (fallbacks[from][to])
                og_log(lg, OG_LOG_INFO, "%u tensors have rows that are not a multiple of the %s block (%u): stored as %s, "
                       "as llama-quantize does", fallbacks[from][to], og_type_name((uint32_t)from),
                       og_type_size_of((uint32_t)from)->blck, og_type_name((uint32_t)to));
}

static og_status add_keys(build *b, const og_model_vocab *vocab) {
    const og_ds2_synth_config *c = b->c;
    og_gguf_writer *w = b->w;
    og_status st = OG_OK;
#define K(expr) do { if ((st = (expr))) goto fail; } while (0)
#define KU(key, v) K(og_gguf_writer_set_u32(w, "deepseek2." key, (v)))
#define KF(key, v) K(og_gguf_writer_set_f32(w, "deepseek2." key, (v)))
    K(og_gguf_writer_set_general(w, "deepseek2", c->name ? c->name : "onegpu-synthetic", b->type_bytes));
    KU("block_count", c->n_layer);
    KU("context_length", c->n_ctx);
    KU("embedding_length", c->n_embd);
    KU("feed_forward_length", c->n_ff);
    KU("attention.head_count", c->n_head);
    KU("attention.head_count_kv", c->legacy_mla ? c->n_head : 1);
    KF("rope.freq_base", c->rope_base);
    KF("attention.layer_norm_rms_epsilon", c->rms_eps);
    KU("expert_used_count", c->n_expert_used);
    if (c->group_keys) {
        KU("expert_group_count", c->n_group > 1 ? c->n_group : 1);
        KU("expert_group_used_count", c->n_group > 1 ? c->n_group_used : 1);
    }
    KU("vocab_size", c->n_vocab);
    if (c->q_lora_rank) KU("attention.q_lora_rank", c->q_lora_rank);
    KU("attention.kv_lora_rank", c->kv_lora_rank);
    if (c->legacy_mla) {
        KU("attention.key_length", c->qk_nope + c->qk_rope);
        KU("attention.value_length", c->v_head);
    } else {
        KU("attention.key_length", c->kv_lora_rank + c->qk_rope);
        KU("attention.value_length", c->kv_lora_rank);
        KU("attention.key_length_mla", c->qk_nope + c->qk_rope);
        KU("attention.value_length_mla", c->v_head);
    }
    KU("leading_dense_block_count", c->n_dense);
    KU("expert_feed_forward_length", c->n_ff_exp);
    KU("expert_count", c->n_expert);
    KU("expert_shared_count", c->n_expert_shared);
    KF("expert_weights_scale", c->expert_scale);
    K(og_gguf_writer_set_bool(w, "deepseek2.expert_weights_norm", c->expert_norm));
    KU("expert_gating_func", c->gating);
    KU("rope.dimension_count", c->qk_rope);
    if (c->n_ctx_orig && c->rope_factor > 1) {
        K(og_gguf_writer_set_str(w, "deepseek2.rope.scaling.type", "yarn"));
        KF("rope.scaling.factor", c->rope_factor);
        KU("rope.scaling.original_context_length", c->n_ctx_orig);
        KF("rope.scaling.yarn_log_multiplier", c->yarn_log_mul);
        KF("rope.scaling.yarn_beta_fast", 32.0f);
        KF("rope.scaling.yarn_beta_slow", 1.0f);
    }
    if (vocab) K(og_model_write_vocab(w, vocab, "deepseek-v3", &vocab->chat_template));
    return OG_OK;
fail:
    return og_fail(b->err, b->errlen, st, "cannot write metadata: %s", og_status_str(st));
#undef K
#undef KU
#undef KF
}

/* ---- weights --------------------------------------------------------------- */

/* perm[r] = the expert of popularity rank r in this layer: a seeded shuffle, so
 * the hot set differs between layers as it does in real models. */
static void expert_perm(const og_ds2_synth_config *c, int layer, uint32_t *perm) {
    uint32_t E = c->n_expert;
    for (uint32_t i = 0; i < E; i++) perm[i] = i;
    uint64_t s = c->seed ^ (0x5eedULL * (uint64_t)(layer + 1));
    for (uint32_t i = E - 1; i > 0; i--) {
        uint32_t j = (uint32_t)(og_splitmix64(&s) % (i + 1));
        uint32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

/* Popularity offset of an expert of rank r: -skew * ln(1 + r) in units of the
 * score's spread. Shifting a score by a constant scales its chance of making
 * the top-k roughly exponentially, so a log-rank offset gives a power law in
 * rank (Zipf-like), steeper for larger skew. */
static double skew_offset(const og_ds2_synth_config *c, uint32_t rank) {
    return -(double)c->router_skew * log(1.0 + rank);
}

typedef struct fill_ctx {
    build *b;
    float *row;
    size_t row_cap;
    int rank_layer;      /* layer whose ranks are in `rank`, -1 none */
    uint32_t *rank;      /* [n_expert] popularity rank of each expert */
} fill_ctx;

/* Popularity ranks of one layer's experts, computed once per layer. */
static og_status layer_ranks(fill_ctx *ctx, int layer) {
    const og_ds2_synth_config *c = ctx->b->c;
    if (ctx->rank_layer == layer) return OG_OK;
    if (!ctx->rank && !(ctx->rank = malloc(c->n_expert * sizeof *ctx->rank))) return OG_ERR_NOMEM;
    uint32_t *perm = malloc(c->n_expert * sizeof *perm);
    if (!perm) return OG_ERR_NOMEM;
    expert_perm(c, layer, perm);
    for (uint32_t i = 0; i < c->n_expert; i++) ctx->rank[perm[i]] = i;
    free(perm);
    ctx->rank_layer = layer;
    return OG_OK;
}

static og_status fill(void *ctx_, uint64_t i, const og_gguf_tensor *t, void *buf, char *err, size_t errlen) {
    fill_ctx *ctx = ctx_;
    const og_ds2_synth_config *c = ctx->b->c;
    const tinfo *ti = &ctx->b->info[i];
    const int64_t ne0 = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
    if ((size_t)ne0 > ctx->row_cap) {
        float *nr = realloc(ctx->row, (size_t)ne0 * sizeof *nr);
        if (!nr) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
        ctx->row = nr;
        ctx->row_cap = (size_t)ne0;
    }
    uint64_t rng = c->seed ^ og_fnv1a64(t->name, strlen(t->name), OG_FNV1A64_INIT);
    if ((ti->kind == INIT_ROUTER || ti->kind == INIT_BIAS) && layer_ranks(ctx, ti->layer))
        return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    uint64_t row_bytes;
    og_row_bytes(t->type, (uint64_t)ne0, &row_bytes);
    /* uniform(-a, a) has std a/sqrt(3) */
    const float a = sqrtf(3.0f) * ti->gain / sqrtf((float)ne0);
    for (int64_t r = 0; r < rows; r++) {
        float *x = ctx->row;
        for (int64_t j = 0; j < ne0; j++) {
            float u = (float)(2.0 * og_rand_unit(&rng) - 1.0);
            switch (ti->kind) {
            case INIT_WEIGHT: x[j] = a * u; break;
            case INIT_NORM: x[j] = 1.0f + 0.1f * u; break;
            case INIT_ROUTER: x[j] = a * u; break;
            case INIT_BIAS: x[j] = 0.0f; break;
            }
        }
        if (ti->kind == INIT_ROUTER && c->gating == 1 && c->router_skew > 0) {
            /* Softmax files have no selection bias: a popular expert gets a longer
             * router row, so its logit has a wider spread and wins more often. */
            float g = (float)exp(0.15 * skew_offset(c, ctx->rank[r]));
            for (int64_t j = 0; j < ne0; j++) x[j] *= g;
        }
        if (ti->kind == INIT_BIAS && c->router_skew > 0) {
            /* Sigmoid scores of N(0,1) logits spread ~0.2; 0.15 per unit of log-rank gives
             * a top-quarter share of ~0.5 at skew 1 (test_make_model measures it). */
            for (int64_t j = 0; j < ne0; j++) x[j] = (float)(0.15 * skew_offset(c, ctx->rank[j]));
        }
        og_status st = og_quantize_row(t->type, x, (uint8_t *)buf + (uint64_t)r * row_bytes, ne0);
        if (st) return og_fail(err, errlen, st, "%s: cannot quantize to %s", t->name, og_type_name(t->type));
    }
    return OG_OK;
}

og_status og_ds2_synth_write(const og_ds2_synth_config *c, const og_model_vocab *vocab, const char *path,
                         bool sparse, const og_logger *lg, char *err, size_t errlen) {
    og_status st = og_ds2_synth_validate(c, err, errlen);
    if (st) return st;
    if (vocab && vocab->n_vocab != c->n_vocab)
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "tokenizer has %u tokens but the model %u",
                       vocab->n_vocab, c->n_vocab);
    build b = {.c = c, .sparse = sparse, .err = err, .errlen = errlen};
    if ((st = og_gguf_writer_create(32, &b.w))) return og_fail(err, errlen, st, "out of memory");
    if ((st = add_tensors(&b)) || (st = add_keys(&b, vocab))) goto out;
    og_model_write_log_fallbacks(lg, b.fallbacks);
    if (!sparse) { /* refuse before writing what cannot fit */
        if (b.max_tensor_bytes > (32ull << 30)) {
            char sz[32];
            st = og_fail(err, errlen, OG_ERR_RANGE, "a %s tensor is too large to generate; use --sparse for a planning file",
                         og_fmt_bytes(b.max_tensor_bytes, sz, sizeof sz));
            goto out;
        }
        /* the free disk is checked by the GGUF writer, before any byte is written */
    }
    fill_ctx fc = {.b = &b, .rank_layer = -1};
    if (!c->split_max_bytes) {
        st = og_gguf_writer_write(b.w, path, sparse ? NULL : fill, &fc, err, errlen);
    } else {
        uint32_t n_parts;
        st = og_gguf_writer_write_split(b.w, path, c->split_max_bytes, sparse ? NULL : fill, &fc, &n_parts, err, errlen);
        char prefix[4096], part[4200];
        for (uint32_t k = 0; !st && k < n_parts && !og_gguf_split_prefix(path, prefix, sizeof prefix); k++) {
            struct stat sb;
            og_gguf_split_path(prefix, k, n_parts, part, sizeof part);
            if (stat(part, &sb) == 0)
                og_log(lg, OG_LOG_INFO, "wrote %s (%lld bytes%s)", part, (long long)sb.st_size, sparse ? ", sparse" : "");
        }
    }
    free(fc.row);
    free(fc.rank);
out:
    og_gguf_writer_free(b.w);
    free(b.info);
    return st;
}
