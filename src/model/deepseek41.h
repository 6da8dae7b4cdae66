/* deepseek41 (DeepSeek V4.1 Flash, shared/spec/deepseek4.md §3.2, §4.1, §4.3):
 * hyperparameters of the three GGUF dialects (vcruz305, mxxm-t, antirez), the
 * per-layer roles of CSA2 (cross-layer KV and index sharing), the Engram hash
 * constants with their self-checks, and the ONE tensor-name table, internal to
 * src/model. The loader (deepseek41.c) binds weights from the table, the
 * writer (deepseek41_write.c) writes files from it, og_ds41_role gives the
 * planner's roles from it (the Engram tables: OG_ROLE_ENGRAM, host-only).
 *
 * Names as deepseek4.h: N = n_embd, H = n_head, D = head_dim (K = V, one KV
 * head), R = n_rot, hc = hc_count, G = o_group_count, E = n_expert, F =
 * n_ff_exp, F_sh = n_ff_shexp, V = n_vocab, IH / ID = indexer heads / key
 * length; Engram: EH = engram_n_head hashes per n-gram size, ED =
 * engram_head_dim (256) values per row, EB = (engram_max_ngram - 1) EH buckets
 * (24) per token. Shapes are GGUF ne order (ne0 = the input dimension). */
#ifndef OG_DEEPSEEK41_H
#define OG_DEEPSEEK41_H

#include "deepseek4.h" /* og_ds4_rope_scaling, the OG_DS4_MAX_* bounds V4.1 shares */

/* Bounds of an untrusted file beyond V4's (OG_DS4_MAX_*, which apply to the
 * shared keys): og_ds41_hparams_read refuses a value outside them before
 * anything is sized by one. V4.1 Flash: 40 layers, N 5120, 384 experts,
 * F 2304, IH 32, Engram 2 layers x 8 hashes x 3 n-gram sizes, ED 256,
 * ~384M rows per table, compressed vocabulary 99,092. */
#define OG_DS41_MAX_ENGRAM_LAYER 8u      /* engram.layer_ids entries */
#define OG_DS41_MAX_ENGRAM_HEAD 32u      /* engram.head_count (hashes per n-gram size) */
#define OG_DS41_MAX_ENGRAM_NGRAM 8u      /* engram.max_ngram_size (>= 2) */
#define OG_DS41_MAX_ENGRAM_DIM 4096u     /* engram.key_length (row width; a multiple of 32) */
#define OG_DS41_MAX_ENGRAM_BUCKET (OG_DS41_MAX_ENGRAM_HEAD * (OG_DS41_MAX_ENGRAM_NGRAM - 1))
/* The hash (§4.3.2) multiplies a compressed id by a multiplier in 64 bits:
 * ids < 2^17 and multipliers < 2^47 never overflow. */
#define OG_DS41_MAX_COMPRESSED (1u << 17) /* token_map entries are below this */
#define OG_DS41_MULTIPLIER_LIMIT (1ull << 47)
#define OG_DS41_MAX_ENGRAM_ROWS (1ull << 40) /* rows of one table */
#define OG_DS41_MAX_CAND_BLOCK 65536u    /* candidate_block_size, positions */
#define OG_DS41_MAX_CAND_TOPK (1u << 20) /* candidate_topk_blocks */
/* The defaults of a file without candidate keys (decision 1; §4.3.3: layer
 * 20's indexer keeps 2048 blocks of 8 positions). */
#define OG_DS41_CAND_BLOCK_DEFAULT 8u
#define OG_DS41_CAND_TOPK_DEFAULT 2048u
/* The antirez dialect's Engram rows: I8 [ED + ED/32, rows], ED E4M3 bytes then
 * one E8M0 scale per 32 columns (engram.encoding "e4m3_e8m0_32_row264"). */
#define OG_DS41_ENGRAM_FP8_BLOCK 32u

/* The three dialects of §3.2. */
typedef enum og_ds41_dialect {
    OG_DS41_VCRUZ305 = 0, /* V4 key names under deepseek41.; roles from tensor presence (the onegpu target) */
    OG_DS41_MXXM_T,       /* + attention.kv_source_layer_ids etc.; engram_embed, indexer_compressor_kv/_norm */
    OG_DS41_ANTIREZ,      /* raw HF text_config names; engram_kv, engram_q_norm / _k_norm; FP8 Engram rows */
    OG_DS41_N_DIALECT,
} og_ds41_dialect;

/* The dialect's name ("vcruz305", "mxxm-t", "antirez"). Never NULL. */
const char *og_ds41_dialect_name(og_ds41_dialect d);

/* A key's spelling in dialect d, after "deepseek41.": key is its vcruz305
 * spelling ("embedding_length"); antirez gives the raw HF text_config name
 * ("hidden_size"), the others key itself. Never NULL (returns a string, not an
 * og_status: every key has a spelling). (deepseek41_table.c) */
const char *og_ds41_key_name(og_ds41_dialect d, const char *key);

/* One layer's role in CSA2 (§4.3.3; decision 1 of the V4.1 brief). Layer ids
 * are trunk layers; -1 means none. */
typedef struct og_ds41_layer {
    uint32_t ratio;          /* compress ratio of the rows it reads: 0 (window only), 1 or 2 */
    int32_t kv_source;       /* the layer whose compressed rows it attends over: itself when
                                is_kv_source, else the most recent kv source at or below it; -1 when ratio 0 */
    bool is_kv_source;       /* runs a compressor (attn_compressor_kv): its rows [n_pos / ratio][D] */
    bool is_index_source;    /* runs an indexer of its own (indexer.attn_q_b, indexer.proj) */
    bool is_key_owner;       /* makes index keys (indexer.attn_k): [n_pos / ratio][ID] */
    int32_t key_owner;       /* the layer whose index keys its indexer scores (index sources:
                                the most recent key owner at or below it), -1 otherwise */
    int32_t topk_source;     /* the index source whose top-k selection it attends with: itself,
                                else the most recent index source at or below it; -1: every row
                                (no index source reads its rows) */
    bool is_candidate_source;/* its indexer also picks the candidate blocks (§4.3.3) */
    bool candidate_masked;   /* a reindex layer (index source, not a kv source) with a candidate
                                source at or below it: scores outside the candidate blocks are -inf
                                (decision 6: no mask while the positions fit in the blocks) */
    bool has_engram;         /* Engram before this layer's attention (§4.3.2) */
    int32_t engram_slot;     /* its index into the engram arrays below, -1 */
} og_ds41_layer;

typedef struct og_ds41_hparams {
    og_ds41_dialect dialect;
    uint32_t n_layer;              /* trunk layers: block_count - nextn_predict_layers */
    uint32_t n_embd, n_vocab, n_ctx_train; /* N; V from token_embd's shape; tokens */
    uint32_t n_head, head_dim, n_rot;      /* H, D, R */
    uint32_t q_lora_rank, o_lora_rank, o_group_count;
    uint32_t n_swa;                /* raw window per layer, tokens, including the current one */
    uint32_t compress_ratio[OG_DS4_MAX_LAYER]; /* per layer: 0, 1 or 2 (compress_ratios may hold more
                                                  entries, for absent DSpark blocks: ignored) */
    uint32_t indexer_n_head, indexer_head_dim, indexer_top_k; /* IH, ID, compressed rows kept */
    uint32_t n_expert, n_expert_used, n_expert_shared, n_ff_exp, n_ff_shexp; /* E, k, S, F, F_sh */
    float expert_weights_scale;    /* 1.5 */
    bool expert_weights_norm;      /* w / (sum + 1e-20) (decision 7) */
    float swiglu_clamp_exp[OG_DS4_MAX_LAYER];   /* silu(min(g,c)) * clamp(u,-c,c); 0: none */
    float swiglu_clamp_shexp[OG_DS4_MAX_LAYER]; /* (falls back to the routed clamp) */
    uint32_t hc_count, hc_sinkhorn_iters;
    float hc_eps;                  /* 1e-6 */
    float rms_eps;                 /* every RMSNorm (1e-20 in real files, decision 7) */
    og_rope rope_swa, rope_comp;   /* ratio-0 layers; the others, their rows and the indexer (§4.1.2) */
    og_ds4_rope_scaling rope_scaling;
    /* CSA2 roles (og_ds41_layer) */
    og_ds41_layer layer[OG_DS4_MAX_LAYER];
    int32_t candidate_source;      /* the candidate source layer, or -1 */
    uint32_t candidate_block_size, candidate_topk_blocks; /* positions per block, blocks kept */
    bool roles_explicit;           /* the roles came from the source-layer keys (mxxm-t, antirez) */
    /* Engram (§3.2 constants; §4.3.2 hash) */
    uint32_t n_engram_layer;       /* engram.layer_ids entries */
    uint32_t engram_layer[OG_DS41_MAX_ENGRAM_LAYER]; /* ascending layer ids */
    uint32_t engram_n_head, engram_head_dim, engram_max_ngram, engram_n_bucket; /* EH, ED, n_max, EB */
    uint32_t engram_pad_id;        /* the RAW pad token id (decision 3): positions before the start use
                                      token_map[pad_id] */
    uint32_t n_compressed;         /* compressed vocabulary: max(token_map) + 1 */
    uint64_t engram_rows[OG_DS41_MAX_ENGRAM_LAYER];            /* rows of each layer's table */
    uint64_t engram_prime[OG_DS41_MAX_ENGRAM_LAYER][OG_DS41_MAX_ENGRAM_BUCKET];  /* [slot][bucket] */
    uint64_t engram_offset[OG_DS41_MAX_ENGRAM_LAYER][OG_DS41_MAX_ENGRAM_BUCKET]; /* running sums */
    uint64_t engram_mult[OG_DS41_MAX_ENGRAM_LAYER][OG_DS41_MAX_ENGRAM_NGRAM];    /* odd, < 2^47 */
    bool engram_fp8;               /* antirez: rows are I8 [ED + ED/32] FP8 E4M3 + E8M0 scales */
    const og_gguf_kv *token_map;   /* engram.token_map [V] INT32 (valid while the og_gguf is open):
                                      read it with og_ds41_token_map */
} og_ds41_hparams;

/* Reads every deepseek41 key of §3.2 in whichever dialect the file is (antirez
 * when deepseek41.num_hidden_layers or hidden_size exists, mxxm-t when
 * deepseek41.attention.kv_source_layer_ids does, else vcruz305), n_vocab from
 * token_embd's ne1, and derives the layer roles (og_ds41_layer: from the
 * source-layer keys when present, else from which tensors exist). Header-only
 * opens work. Every integer is bounded (OG_DS4_MAX_* and OG_DS41_MAX_*)
 * before anything is sized by it; ratios must be 0, 1 or 2 and a reuse layer
 * must find a kv source of its ratio at or below it. The Engram constants are
 * self-checked: a layer's EB primes sum to its table's rows (and to
 * engram.rows when given), primes are prime and distinct, offsets are the
 * running sums from 0, multipliers odd and < 2^47, token_map has V entries in
 * [0, 2^17), pad_id < V. Errors name the key, tensor or check and the values:
 * OG_ERR_UNSUPPORTED (not deepseek41; a gating function other than
 * sqrt-softplus; hash layers), OG_ERR_NOT_FOUND ("fits none of the dialects
 * (read as D): missing key deepseek41.X" / a missing tensor), OG_ERR_FORMAT
 * (a value out of bounds or of the wrong type; a failed self-check). */
og_status og_ds41_hparams_read(const og_gguf *g, const og_logger *lg, og_ds41_hparams *hp, char *err, size_t errlen);

/* Whether p is prime (trial division: the Engram primes are below 2^32). A
 * predicate: cannot fail. */
bool og_ds41_is_prime(uint64_t p);

/* Compressed id of token tok (token_map[tok]; tok < n_vocab, checked by the
 * reader), or UINT32_MAX for tok out of range. Cannot fail otherwise. */
uint32_t og_ds41_token_map(const og_ds41_hparams *hp, uint32_t tok);

/* The Engram table rows of token p at Engram layer `layer` (§4.3.2; decision
 * 3): ctx_tokens [engram_max_ngram] = tok_p, tok_{p-1}, ... (-1: before the
 * sequence's start, which hashes token_map[engram.pad_id]); c_s =
 * token_map[ctx_tokens[s]], h_0 = c_0 m_0, h_s = h_{s-1} XOR c_s m_s (u64),
 * rows[(s-1) EH + k] = h_s mod prime[b] + offset[b] for s = 1 .. n_max - 1,
 * k < EH: EB rows of the layer's table, in bucket order. Errors:
 * OG_ERR_INVALID_ARG (layer without Engram, a token outside the vocabulary).
 * (deepseek41.c) */
og_status og_ds41_engram_rows(const og_ds41_hparams *hp, int layer, const int32_t *ctx_tokens, uint64_t *rows);

/* One antirez Engram row decoded (spec §3.2 "Engram rows as I8 [264, rows]"):
 * row is ED + ED/32 bytes, ED E4M3 codes then one E8M0 scale per 32 columns;
 * y[ED] = e4m3(code) * 2^(scale - 127) with E4M3 as OCP FP8 (sign, 4
 * exponent bits bias 7, 3 mantissa bits, exponent 0 subnormal m/8 * 2^-6).
 * Every finite value is exact in float. Errors: OG_ERR_FORMAT, *bad_byte the
 * offending byte of the row, for a NaN code (0x7f, 0xff), the NaN scale 255,
 * or a value past the float range (scale 254 with a code >= 2): a table with
 * them is damaged, and a NaN fed on would poison every logit silently.
 * (deepseek41.c) */
og_status og_ds41_engram_fp8_decode(const uint8_t *row, uint32_t ED, float *y, uint32_t *bad_byte);

/* ---- the tensor-name table ------------------------------------------------ */

/* Which layers hold a kind (og_ds41_layer's roles). */
typedef enum og_ds41_where {
    OG_DS41_GLOBAL = 0,  /* outside the layers */
    OG_DS41_EVERY,       /* every trunk layer */
    OG_DS41_KV_SOURCE,   /* is_kv_source */
    OG_DS41_GATED,       /* is_kv_source with ratio > 1 (the softmax gate of a group) */
    OG_DS41_KEY_OWNER,   /* is_key_owner */
    OG_DS41_INDEX,       /* is_index_source */
    OG_DS41_ENGRAM,      /* has_engram */
    OG_DS41_SHARED,      /* n_expert_shared > 0 */
} og_ds41_where;

typedef enum og_ds41_dim {
    OG_DS41_D_1 = 0, OG_DS41_D_3, OG_DS41_D_EMBD, OG_DS41_D_VOCAB, OG_DS41_D_HC, OG_DS41_D_HC_EMBD,
    OG_DS41_D_HC_MIX /* (2 + hc) hc */, OG_DS41_D_Q_RANK, OG_DS41_D_HEAD, OG_DS41_D_HEAD_DIM, OG_DS41_D_Q /* H D */,
    OG_DS41_D_O_GROUP_IN /* H D / G */, OG_DS41_D_O_LOW /* G o_rank */, OG_DS41_D_IDX_HEAD, OG_DS41_D_IDX_Q /* IH ID */,
    OG_DS41_D_IDX_DIM, OG_DS41_D_EXPERT, OG_DS41_D_FF, OG_DS41_D_FF_SH /* F_sh S */,
    OG_DS41_D_ENGRAM_ROW /* ED (antirez: ED + ED/32 bytes) */, OG_DS41_D_ENGRAM_ROWS /* the layer's table rows */,
    OG_DS41_D_ENGRAM_IN /* EB ED */, OG_DS41_D_ENGRAM_OUT /* (hc + 1) N: a key per copy, one value */,
} og_ds41_dim;

/* What make-model chooses a kind's type by (og_ds41_write): deepseek4's
 * classes plus ENGRAM (the tables) and ENGRAM_PROJ (engram_wkv). engram_q /
 * engram_k are VEC-like F32 matrices (llama.cpp f37da57 keeps them F32): F32M. */
typedef enum og_ds41_wclass {
    OG_DS41_W_EMBD = 0, OG_DS41_W_OUTPUT, OG_DS41_W_ATTN, OG_DS41_W_ROUTED, OG_DS41_W_ROUTED_DOWN, OG_DS41_W_SHARED,
    OG_DS41_W_SHARED_DOWN, OG_DS41_W_AUX, OG_DS41_W_ROUTER, OG_DS41_W_ENGRAM, OG_DS41_W_ENGRAM_PROJ,
    OG_DS41_W_NORM, OG_DS41_W_VEC, OG_DS41_W_F32M, OG_DS41_W_COUNT
} og_ds41_wclass;

typedef enum og_ds41_tensor_id {
    OG_DS41_TOKEN_EMBD = 0, OG_DS41_OUTPUT_NORM, OG_DS41_OUTPUT,
    OG_DS41_HC_ATTN_FN, OG_DS41_HC_ATTN_BASE, OG_DS41_HC_ATTN_SCALE, OG_DS41_ATTN_NORM,
    OG_DS41_ATTN_Q_A, OG_DS41_ATTN_Q_A_NORM, OG_DS41_ATTN_Q_B, OG_DS41_ATTN_KV, OG_DS41_ATTN_KV_A_NORM,
    OG_DS41_ATTN_SINKS, OG_DS41_ATTN_OUTPUT_A, OG_DS41_ATTN_OUTPUT_B,
    OG_DS41_ATTN_COMP_KV, OG_DS41_ATTN_COMP_GATE, OG_DS41_ATTN_COMP_NORM,
    OG_DS41_INDEXER_K, OG_DS41_INDEXER_K_NORM, OG_DS41_INDEXER_Q_B, OG_DS41_INDEXER_PROJ,
    OG_DS41_ENGRAM_EMBD, OG_DS41_ENGRAM_WKV, OG_DS41_ENGRAM_Q, OG_DS41_ENGRAM_K,
    OG_DS41_HC_FFN_FN, OG_DS41_HC_FFN_BASE, OG_DS41_HC_FFN_SCALE, OG_DS41_FFN_NORM,
    OG_DS41_FFN_GATE_INP, OG_DS41_EXP_PROBS_B, OG_DS41_EXP_PROBS_B_VL,
    OG_DS41_FFN_GATE_EXPS, OG_DS41_FFN_UP_EXPS, OG_DS41_FFN_DOWN_EXPS,
    OG_DS41_FFN_GATE_SHEXP, OG_DS41_FFN_UP_SHEXP, OG_DS41_FFN_DOWN_SHEXP,
    OG_DS41_N_TENSOR,
} og_ds41_tensor_id;

typedef struct og_ds41_tensor_kind {
    const char *name[OG_DS41_N_DIALECT]; /* per dialect (per-layer kinds without "blk.N."); the
                                            og_ds41_dialect order */
    og_ds41_where where;
    uint32_t n_dims;       /* 1..3 */
    og_ds41_dim ne[3];
    bool required;         /* within `where` */
    bool applied;          /* false: read and ignored (exp_probs_b_vl: image tokens only, decision 7) */
    og_tensor_role role;   /* engram_embd OG_ROLE_ENGRAM (host-only), engram_wkv / q / k OTHER */
    og_ds41_wclass wclass;
} og_ds41_tensor_kind;

/* The table, indexed by og_ds41_tensor_id (const: not mutable state). */
extern const og_ds41_tensor_kind og_ds41_tensors[OG_DS41_N_TENSOR];

/* Whether layer il (-1 for global kinds) holds kind id under hp's roles. */
bool og_ds41_tensor_in_layer(const og_ds41_hparams *hp, og_ds41_tensor_id id, int il);

/* Expected shape of kind id in layer il (ne[0..2], unused dims 1; dims into
 * *n_dims). OG_ERR_INVALID_ARG if the layer does not hold the kind. */
og_status og_ds41_tensor_shape(const og_ds41_hparams *hp, og_ds41_tensor_id id, int il, int64_t ne[3], uint32_t *n_dims);

/* GGUF name of kind id in layer il in dialect d ("blk.14.engram_embd.weight").
 * OG_ERR_RANGE if it does not fit buf, OG_ERR_INVALID_ARG for a bad id. */
og_status og_ds41_tensor_name(og_ds41_tensor_id id, og_ds41_dialect d, int il, char *buf, size_t buflen);

/* Finds kind id of layer il (in hp's dialect) and checks its shape and type
 * class (norms and vectors F32; antirez Engram rows I8; others a float or
 * quantized type). *out NULL for an absent optional one. Errors name the
 * tensor: OG_ERR_NOT_FOUND, OG_ERR_FORMAT. */
og_status og_ds41_tensor_find(const og_gguf *g, const og_ds41_hparams *hp, og_ds41_tensor_id id, int il,
                              const og_gguf_tensor **out, char *err, size_t errlen);

/* og_ds41_tensor_find on every kind of every layer. Errors as it. */
og_status og_ds41_tensors_check(const og_gguf *g, const og_ds41_hparams *hp, char *err, size_t errlen);

/* Role of a deepseek41 tensor by its GGUF name in any dialect, from the table:
 * og_arch_deepseek41's .role. Unknown names give OG_ROLE_OTHER. Never fails. */
og_tensor_role og_ds41_role(const char *tensor_name);

/* The kind of a GGUF name (any dialect's spelling) and its layer (-1 for
 * global kinds), or OG_DS41_N_TENSOR when the table does not know it. */
og_ds41_tensor_id og_ds41_tensor_lookup(const char *tensor_name, int *il);

/* Bytes of the host-only tensors (the Engram tables and token_embd: gathered
 * on the host, never device bytes) of a file read by og_ds41_hparams_read.
 * Cannot fail (sums bounded by the file's size). */
uint64_t og_ds41_host_only_bytes(const og_gguf *g, const og_ds41_hparams *hp);

/* Per-sequence cache ELEMENTS (og_model_info's formula): fixed = every layer's
 * raw window (n_swa D) + each ratio-2 source's pending group ((ratio - 1)
 * tokens of kv and gate, 2 D each); per token = sum over kv sources of D /
 * ratio + sum over key owners of ID / ratio. */
void og_ds41_kv_elems(const og_ds41_hparams *hp, uint64_t *fixed, double *per_tok);

#endif
