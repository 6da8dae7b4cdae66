/* Model writers (`onegpu make-model`): synthetic models with seeded random
 * weights, one writer per architecture beside its loader in src/model, each
 * naming its tensors from the architecture's one tensor-name table (the loader
 * and og_model_tensor_role read the same table). The CLI only parses the
 * arguments into a writer's config (src/cli/cmd_make_model.c: `--arch NAME`
 * picks the writer; another architecture adds its config, preset / validate /
 * write functions here and one row to the CLI's writer table). */
#ifndef OG_MODEL_WRITE_H
#define OG_MODEL_WRITE_H

#include "og_gguf.h"

/* The tokenizer a writer stores (tokenizer.ggml.*, gguf.md §7.3): what the
 * CLI's tokenizer.json reader produces (og_hf_vocab is this type). */
typedef struct og_model_vocab {
    uint32_t n_vocab;       /* after padding */
    og_str *tokens;         /* [n_vocab] token text (byte-level encoded for NORMAL) */
    int32_t *types;         /* [n_vocab] llama.cpp token types (tokenizer.ggml.token_type) */
    uint64_t n_merges;
    og_str *merges;         /* [n_merges] "left right" */
    og_str chat_template;   /* empty if none */
    uint32_t bos_id, eos_id, pad_id; /* UINT32_MAX: none */
    bool add_bos, add_eos;
    void *priv;             /* the owner's (parsed JSON and owned strings); writers never read it */
} og_model_vocab;

/* ---- deepseek2 (shared/spec/deepseek2.md; src/model/deepseek2_write.c) ---- */

/* Roles that can get their own ggml type. */
typedef enum {
    OG_DS2_SYN_EMBD, OG_DS2_SYN_OUTPUT, OG_DS2_SYN_ATTN, OG_DS2_SYN_DENSE, OG_DS2_SYN_ROUTED, OG_DS2_SYN_SHARED, OG_DS2_SYN_COUNT
} og_ds2_synth_role;

typedef struct og_ds2_synth_config {
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
    og_ggml_type types[OG_DS2_SYN_COUNT];
    uint64_t split_max_bytes;  /* 0: one file; else gguf-split parts of at most this many bytes */
} og_ds2_synth_config;

/* Fills cfg with a preset: "tiny", "demo" or "v3-671b". OG_ERR_NOT_FOUND if unknown. */
og_status og_ds2_synth_preset(const char *name, og_ds2_synth_config *cfg);

/* Checks the shapes are consistent (k <= E, groups divide E, ...). */
og_status og_ds2_synth_validate(const og_ds2_synth_config *cfg, char *err, size_t errlen);

/* Writes the model. vocab may be NULL only for sparse files without a tokenizer.
 * sparse: tensor data is a hole (no disk, no weights computed). Type fallbacks
 * (rows not a multiple of the block) are reported on lg at info level. With
 * cfg->split_max_bytes, path "NAME.gguf" gives the parts NAME-0000k-of-0000N.gguf
 * (og_gguf_writer_write_split), each reported on lg at info level. */
og_status og_ds2_synth_write(const og_ds2_synth_config *cfg, const og_model_vocab *vocab, const char *path,
                         bool sparse, const og_logger *lg, char *err, size_t errlen);

/* The tokenizer keys (tokenizer.ggml.*, tokenizer.chat_template) of vocab into
 * w, with pre-tokenizer name `pre` ("deepseek-v3"; V4 files: "joyai-llm") and
 * chat_template (may be NULL or empty: none). Errors: the writer's. Every
 * architecture's writer stores its tokenizer with it (deepseek2_write.c). */
og_status og_model_write_vocab(og_gguf_writer *w, const og_model_vocab *vocab, const char *pre, const og_str *chat_template);

/* The type a writer stores for tensor `name` (rows of ne0 values) asked as
 * `asked`: og_quant_fallback_type's, as llama-quantize does, each fallback
 * counted in fallbacks[asked][stored] (tensor counts). Errors:
 * OG_ERR_UNSUPPORTED when the stored type has no quantizer and !sparse. */
og_status og_model_write_type(const char *name, og_ggml_type asked, int64_t ne0, bool sparse,
                              uint32_t fallbacks[OG_TYPE_COUNT][OG_TYPE_COUNT], og_ggml_type *stored, char *err,
                              size_t errlen);

/* Reports each nonzero fallbacks[asked][stored] count (og_model_write_type) on
 * lg at info level. Returns nothing: logging cannot fail. */
void og_model_write_log_fallbacks(const og_logger *lg, uint32_t fallbacks[OG_TYPE_COUNT][OG_TYPE_COUNT]);

/* ---- what the table-driven writers share (src/model/model_write.c) ---- */

/* Adds tensor `name` ([ne0, ne1, ne2], n_dims) asked as `asked` to w: the
 * stored type from og_model_write_type (I32 and I8 as asked), its bytes added
 * to type_bytes[stored]. Errors: og_model_write_type's, the writer's (naming
 * the tensor). */
og_status og_model_write_add(og_gguf_writer *w, const char *name, og_ggml_type asked, uint32_t n_dims,
                             const int64_t ne[3], bool sparse, uint32_t fallbacks[OG_TYPE_COUNT][OG_TYPE_COUNT],
                             uint64_t type_bytes[OG_TYPE_COUNT], char *err, size_t errlen);

/* A row initializer: x[0..ne0) for the next row, drawn from *rng. */
typedef void (*og_model_write_row_fn)(const void *ctx, int64_t ne0, uint64_t *rng, float *x);

/* Fills buf (t's bytes) row by row: init(ctx, ...) from a generator seeded
 * by seed and t's name, quantized to t's type; *row (*row_cap floats) is the
 * caller's scratch, grown as needed. Errors: OG_ERR_NOMEM, the quantizer's
 * (naming the tensor). */
og_status og_model_write_rows(const og_gguf_tensor *t, void *buf, uint64_t seed, og_model_write_row_fn init,
                              const void *ctx, float **row, size_t *row_cap, char *err, size_t errlen);

/* Writes w to path (fill NULL: holes), or as gguf-split parts of at most
 * split_max_bytes (0: one file); first[first_len] gets the path of the first
 * file (what a reader opens), *n_parts the count. Errors: the GGUF writer's,
 * OG_ERR_RANGE for a name too long. */
og_status og_model_write_out(og_gguf_writer *w, const char *path, uint64_t split_max_bytes, og_gguf_fill_fn fill,
                             void *ctx, char *first, size_t first_len, uint32_t *n_parts, char *err, size_t errlen);

/* ---- deepseek4 (shared/spec/deepseek4.md; src/model/deepseek4_write.c) ---- */
#include "og_ds4_write.h"

/* ---- deepseek41 (spec §3.2; src/model/deepseek41_write.c) ---- */
#include "og_ds41_write.h"

#endif /* OG_MODEL_WRITE_H */
