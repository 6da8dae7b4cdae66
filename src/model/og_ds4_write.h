/* Synthetic deepseek4 files (`onegpu make-model --arch deepseek4`): presets,
 * keys and tensors from deepseek4.h's table, seeded random weights. */
#ifndef OG_DS4_WRITE_H
#define OG_DS4_WRITE_H

#include "deepseek4.h"
#include "og_model_write.h" /* og_model_vocab */

typedef struct og_ds4_write_config {
    const char *name;          /* general.name */
    uint64_t seed;
    og_ds4_hparams hp;         /* every key written comes from here; n_vocab sizes the embeddings */
    og_ggml_type types[OG_DS4_W_I32]; /* per og_ds4_wclass below NORM (NORM and VEC are F32, I32 is I32) */
    uint64_t split_max_bytes;  /* 0: one file; else gguf-split parts of at most this many bytes */
} og_ds4_write_config;

/* Fills c with a preset: "tiny" (6 layers [0,0,4,128,4,128], N 64, window 8,
 * indexer top_k 4, 3 hash layers; F32 layers, F16 embeddings/output: ~40 MB),
 * "demo" (8 layers, N 512, Q8_0: ~250 MB) or "v4-flash" (V4 Flash's shapes and
 * the published Q2 file's types, spec §3.1: write it --sparse). The compress
 * ratios follow V4's rule for any n_layer: 0 for layers 0-1, then 4 (even) /
 * 128 (odd) (og_ds4_config_ratios). OG_ERR_NOT_FOUND for another name. */
og_status og_ds4_preset(const char *name, og_ds4_write_config *c);

/* Sets hp->compress_ratio from V4's rule for hp->n_layer layers. */
void og_ds4_config_ratios(og_ds4_hparams *hp);

/* Checks c against the reader's bounds and rules (a file og_ds4_hparams_read
 * would refuse is never written): OG_ERR_INVALID_ARG naming what is wrong. */
og_status og_ds4_config_check(const og_ds4_write_config *c, char *err, size_t errlen);

/* The per-layer arrays V4 and V4.1 files share under "ARCH.":
 * attention.compress_ratios (n_ratio >= n_layer entries, 0 past the trunk;
 * n_ratio <= OG_DS4_MAX_LAYER + 16), swiglu_clamp_exp and swiglu_clamp_shexp
 * (n_layer each). Errors: the GGUF writer's. */
og_status og_ds4_write_layer_keys(og_gguf_writer *w, const char *arch, const uint32_t *ratio, uint32_t n_ratio,
                                  const float *clamp_exp, const float *clamp_shexp, uint32_t n_layer);

/* Writes the model to path (atomically; with c->split_max_bytes, the parts
 * NAME-0000k-of-0000N.gguf) with vocab's tokenizer (n_vocab ids; pre-tokenizer
 * "joyai-llm" and a V4 chat template of our own), or none when vocab is NULL (a
 * planning file). sparse: tensor data is a hole. Rows that are not whole blocks of the
 * asked type fall back as llama-quantize does (og_quant_fallback_type), each
 * fallback reported on lg at info level. Errors: og_ds4_config_check's;
 * OG_ERR_INVALID_ARG (vocab->n_vocab is not hp.n_vocab);
 * OG_ERR_UNSUPPORTED (a type without a quantizer and not sparse), OG_ERR_RANGE
 * (not enough disk), the GGUF writer's. */
og_status og_ds4_write(const og_ds4_write_config *c, const og_model_vocab *vocab, const char *path, bool sparse,
                       const og_logger *lg, char *err, size_t errlen);

#endif
