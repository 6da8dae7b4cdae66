/* Synthetic deepseek41 files (`onegpu make-model --arch deepseek41`): presets
 * with every CSA2 role and Engram, the vcruz305 key names plus the candidate
 * keys (decision 1), tensors from deepseek41.h's table, seeded random weights. */
#ifndef OG_DS41_WRITE_H
#define OG_DS41_WRITE_H

#include "deepseek41.h"
#include "og_model_write.h" /* og_model_vocab */

typedef struct og_ds41_write_config {
    const char *name;          /* general.name */
    uint64_t seed;
    /* every key written comes from here: dims, compress ratios, the roles
     * (og_ds41_layer's is_kv_source / is_index_source / is_key_owner /
     * has_engram pick the tensors; the reader derives the rest), the
     * candidate keys, the Engram constants (primes, offsets, multipliers;
     * token_map is built from the vocabulary at write time) */
    og_ds41_hparams hp;
    og_ggml_type types[OG_DS41_W_NORM]; /* per og_ds41_wclass below NORM (NORM, VEC, F32M are F32) */
    uint64_t split_max_bytes;  /* 0: one file; else gguf-split parts of at most this many bytes */
    uint64_t engram_prime_start; /* the Engram primes are the consecutive primes above this */
    bool engram_real_mult;     /* §3.2's multipliers (2 Engram layers of 4-grams), else odd values from the seed */
} og_ds41_write_config;

/* Fills c with a preset:
 *   "tiny": 8 layers, one of each role (0 window; 1 window + Engram; 2 ratio-2
 *     kv source + index-key owner + indexer; 3 ratio-2 reuser; 4 ratio-1
 *     source, indexer and candidate source + Engram; 5 ratio-1 reuser; 6
 *     reindex, candidate-masked; 7 reuser of 6's top-k), N 64, window 8,
 *     indexer top_k 4, candidate blocks of 2 x 3, Engram 8 hashes x 2..4-grams
 *     of 32-wide rows (3,828 and 4,584 rows); F32 layers, F16 embeddings and
 *     output (~45 MB).
 *   "demo": the same roles at N 512, window 128, Q8_0 (~275 MB).
 *   "v41-flash": V4.1 Flash's shapes and the vcruz305 Q2_K types (spec §3.2;
 *     Engram constants as the real file's: consecutive primes above
 *     15,999,999, the §3.2 multipliers), 7 split parts: write it --sparse.
 * OG_ERR_NOT_FOUND for another name. */
og_status og_ds41_preset(const char *name, og_ds41_write_config *c);

/* Recomputes what follows from c's dims after they change (make-model's
 * shape options): the RoPE schedules, the Engram buckets, primes, offsets,
 * rows and multipliers, the Engram layers' roles. Out-of-bound Engram sizes
 * are left for og_ds41_config_check. Cannot fail. */
void og_ds41_config_derive(og_ds41_write_config *c);

/* Checks c against the reader's bounds and rules (a file og_ds41_hparams_read
 * would refuse is never written): OG_ERR_INVALID_ARG naming what is wrong. */
og_status og_ds41_config_check(const og_ds41_write_config *c, char *err, size_t errlen);

/* Writes the model to path (atomically; with c->split_max_bytes the parts
 * NAME-0000k-of-0000N.gguf, one info line per part on lg) with vocab's
 * tokenizer (n_vocab ids, pre-tokenizer "deepseek-v3"; engram.token_map
 * lowercases each token's ASCII letters so tokens that differ only in case
 * share a compressed id), or none when vocab is NULL (the map is then the
 * identity). sparse: tensor data is a hole. The file is read back
 * (og_ds41_hparams_read, the table) and its roles compared with c's.
 * Errors: og_ds41_config_check's, OG_ERR_INVALID_ARG (vocab size), OG_ERR_NOMEM,
 * OG_ERR_UNSUPPORTED (a type without a quantizer and not sparse), the GGUF
 * writer's. */
og_status og_ds41_write(const og_ds41_write_config *c, const og_model_vocab *vocab, const char *path, bool sparse,
                        const og_logger *lg, char *err, size_t errlen);

#endif
