/* Synthetic deepseek2 models (shared/spec/deepseek2.md): hyperparameters,
 * tensor list and seeded random weights, written through the GGUF writer. */
#ifndef OG_SYNTH_H
#define OG_SYNTH_H

#include "hf_tokenizer.h"
#include "og_gguf.h"

/* Roles that can get their own ggml type. */
typedef enum {
    SYN_T_EMBD, SYN_T_OUTPUT, SYN_T_ATTN, SYN_T_DENSE, SYN_T_ROUTED, SYN_T_SHARED, SYN_T_COUNT
} synth_type_role;

typedef struct og_synth_config {
    const char *name;          /* general.name */
    uint64_t seed;
    uint32_t n_layer;          /* L (block_count) */
    uint32_t n_embd;           /* D */
    uint32_t n_head;           /* H */
    uint32_t q_lora_rank;      /* r_q; 0 = plain attn_q (V2-Lite style) */
    uint32_t kv_lora_rank;     /* r_kv */
    uint32_t qk_nope;          /* d_nope */
    uint32_t qk_rope;          /* d_rope */
    uint32_t v_head;           /* d_v */
    uint32_t n_ff;             /* F, dense FFN width */
    uint32_t n_dense;          /* leading dense layers */
    uint32_t n_expert;         /* E */
    uint32_t n_expert_used;    /* k */
    uint32_t n_expert_shared;  /* S */
    uint32_t n_ff_exp;         /* F_e */
    uint32_t n_group;          /* expert groups (<= 1: none) */
    uint32_t n_group_used;
    bool group_keys;           /* write expert_group_* keys (older files lack them) */
    uint32_t n_ctx;            /* context_length */
    uint32_t n_ctx_orig;       /* YaRN original context (0: no YaRN) */
    float rope_factor;         /* YaRN factor s */
    float rope_base;
    float yarn_log_mul;        /* 0.1 * mscale_all_dim */
    uint32_t gating;           /* 1 softmax, 2 sigmoid */
    float expert_scale;        /* routed_scaling_factor */
    bool expert_norm;          /* renormalize top-k weights */
    bool legacy_mla;           /* attn_kv_b instead of attn_k_b + attn_v_b */
    float router_skew;         /* Zipf-like exponent of expert popularity; 0 = uniform */
    float rms_eps;
    uint32_t n_vocab;          /* padded vocabulary size (129280 for DeepSeek-V3) */
    og_ggml_type types[SYN_T_COUNT];
    uint64_t split_max_bytes;  /* 0: one file; else gguf-split parts of at most this many bytes */
} og_synth_config;

/* Fills cfg with a preset: "tiny", "demo" or "v3-671b". OG_ERR_NOT_FOUND if unknown. */
og_status og_synth_preset(const char *name, og_synth_config *cfg);

/* Checks the shapes are consistent (k <= E, groups divide E, ...). */
og_status og_synth_validate(const og_synth_config *cfg, char *err, size_t errlen);

/* Writes the model. vocab may be NULL only for sparse files without a tokenizer.
 * sparse: tensor data is a hole (no disk, no weights computed). Type fallbacks
 * (rows not a multiple of the block) are reported on lg at info level. With
 * cfg->split_max_bytes, path "NAME.gguf" gives the parts NAME-0000k-of-0000N.gguf
 * (og_gguf_writer_write_split), each reported on lg at info level. */
og_status og_synth_write(const og_synth_config *cfg, const og_hf_vocab *vocab, const char *path,
                         bool sparse, const og_logger *lg, char *err, size_t errlen);

/* The tokenizer keys (tokenizer.ggml.*, tokenizer.chat_template) of vocab into
 * w, with pre-tokenizer name `pre` ("deepseek-v3"; V4 files: "joyai-llm") and
 * chat_template (may be NULL or empty: none). Errors: the writer's. */
og_status og_synth_vocab_keys(og_gguf_writer *w, const og_hf_vocab *vocab, const char *pre, const og_str *chat_template);

#endif
