/* deepseek4 (DeepSeek V4 Flash, shared/spec/deepseek4.md §3.1, §4.1-4.2):
 * hyperparameters and the ONE tensor-name table, internal to src/model. The
 * loader binds weights from the table, the writer (deepseek4_write.c) writes
 * files from it, og_ds4_role gives the planner's roles from it, and the
 * double-precision reference (tests/unit/ref_deepseek4.c) reads weights by it.
 *
 * Names: N = n_embd, H = n_head, D = head_dim (K = V, one KV head), R = n_rot
 * (the RoPE'd tail of each head), hc = hc_count streams, G = o_group_count,
 * E = n_expert, F = n_ff_exp, V = n_vocab, IH / ID = indexer heads / key length.
 * Shapes are GGUF ne order (ne0 = the input dimension): a matrix used as
 * y = W x is [in, out]. */
#ifndef OG_DEEPSEEK4_H
#define OG_DEEPSEEK4_H

#include "og_arch.h"

/* Bounds on the hyperparameters of an untrusted file: og_ds4_hparams_read
 * refuses a value outside them (OG_ERR_FORMAT naming the key and the value)
 * before anything is sized by one. V4 Flash: 43 layers, N 4096, H 64, D 512,
 * R 64, q rank 1024, o rank 1024, G 8, window 128, IH 64, ID 128, top_k 512,
 * E 256 (6 used, 1 shared), F 2048, V 129280, hc 4, 20 Sinkhorn iterations,
 * context 1,048,576. With these every size product fits 64 bits. */
#define OG_DS4_MAX_LAYER 256u         /* block_count (the per-layer arrays below are this long) */
#define OG_DS4_MAX_EMBD 65536u        /* embedding_length */
#define OG_DS4_MAX_HEAD 256u          /* attention.head_count */
#define OG_DS4_MAX_HEAD_DIM 4096u     /* attention.key_length = value_length */
#define OG_DS4_MAX_RANK 16384u        /* attention.q_lora_rank, attention.output_lora_rank */
#define OG_DS4_MAX_GROUP 256u         /* attention.output_group_count */
#define OG_DS4_MAX_SWA (1u << 20)     /* attention.sliding_window, tokens */
#define OG_DS4_MAX_INDEXER_HEAD 256u  /* attention.indexer.head_count */
#define OG_DS4_MAX_INDEXER_DIM 4096u  /* attention.indexer.key_length (a power of two: Hadamard) */
#define OG_DS4_MIN_INDEXER_DIM 32u    /* attention.indexer.key_length on ratio-4 layers: the FP4 blocks of 32 (§4.2.1) */
#define OG_DS4_MAX_TOP_K (1u << 20)   /* attention.indexer.top_k, compressed rows */
#define OG_DS4_MAX_FF (1u << 20)      /* expert_feed_forward_length */
#define OG_DS4_MAX_EXPERT 4096u       /* expert_count */
#define OG_DS4_MAX_EXPERT_USED 64u    /* expert_used_count */
#define OG_DS4_MAX_EXPERT_SHARED 64u  /* expert_shared_count */
#define OG_DS4_MAX_HC 16u             /* hyper_connection.count (V4: 4) */
#define OG_DS4_MAX_SINKHORN 1000u     /* hyper_connection.sinkhorn_iterations */
#define OG_DS4_MAX_VOCAB (1u << 22)   /* token_embd rows */
#define OG_DS4_MAX_CTX (1u << 26)     /* context_length, rope.scaling.original_context_length */

/* The compression ratios llama.cpp v0.4.0 accepts (deepseek4.cpp: "only
 * supports compression ratios 0, 4, and 128"): 0 window only, 4 overlapping
 * compressor + lightning indexer ("CSA"), 128 plain compressor ("HCA"). */
#define OG_DS4_RATIO_CSA 4u
#define OG_DS4_RATIO_HCA 128u
/* expert_gating_func value of sqrt(softplus) (llama.cpp's
 * LLAMA_EXPERT_GATING_FUNC_TYPE_SQRT_SOFTPLUS), the only one V4 uses. */
#define OG_DS4_GATING_SQRT_SOFTPLUS 4u

/* rope.scaling.type, as llama.cpp reads it: absent means "linear". */
typedef enum og_ds4_rope_scaling {
    OG_DS4_ROPE_NONE = 0, OG_DS4_ROPE_LINEAR, OG_DS4_ROPE_YARN,
} og_ds4_rope_scaling;

typedef struct og_ds4_hparams {
    uint32_t n_layer;              /* trunk layers: block_count - nextn_predict_layers */
    uint32_t n_layer_nextn;        /* MTP blocks after the trunk (their tensors are not in the table) */
    uint32_t n_embd, n_vocab, n_ctx_train; /* N; V from token_embd's shape; tokens */
    uint32_t n_head, head_dim, n_rot;      /* H, D (key = value length), R (tail dims [D-R, D)) */
    uint32_t q_lora_rank;          /* attn_q_a output */
    uint32_t o_lora_rank, o_group_count;   /* grouped output: G groups of H/G heads -> o_lora_rank each */
    uint32_t n_swa;                /* raw window, tokens, including the current one */
    uint32_t compress_ratio[OG_DS4_MAX_LAYER]; /* per layer: 0, 4 or 128 */
    uint32_t indexer_n_head, indexer_head_dim, indexer_top_k; /* IH, ID, compressed rows kept */
    uint32_t n_expert, n_expert_used, n_expert_shared, n_ff_exp; /* E, k, shared count, F */
    uint32_t expert_gating_func;   /* OG_DS4_GATING_SQRT_SOFTPLUS */
    uint32_t hash_layer_count;     /* layers [0, n) route by ffn_gate_tid2eid */
    bool expert_weights_norm;      /* weights / max(sum, 6.1035e-5) (§4.1.6) */
    float expert_weights_scale;    /* 1.5 */
    float swiglu_clamp_exp[OG_DS4_MAX_LAYER];   /* routed experts: silu(min(g,c)) * clamp(u,-c,c); 0: none */
    float swiglu_clamp_shexp[OG_DS4_MAX_LAYER]; /* shared expert (falls back to the routed clamp, as llama.cpp) */
    uint32_t hc_count;             /* hc streams (V4: 4) */
    uint32_t hc_sinkhorn_iters;    /* V4: 20; llama.cpp reads the key (test-llama-archs writes 2) */
    float hc_eps;                  /* 1e-6 */
    float rms_eps;                 /* every RMSNorm incl. the HC flatten norm and the per-head q norm */
    /* The two RoPE schedules (§4.1.2): rope_swa for ratio-0 layers (rope.freq_base,
     * no scaling), rope_comp for compressed layers, their compressed rows and
     * the indexer (compress_rope_freq_base with rope.scaling.*). d_rope = R,
     * mscale 1: llama.cpp passes attn_factor 1/(1 + 0.1 ln s), cancelling
     * ggml's YaRN magnitude factor (deepseek4.cpp dsv4_rope_attn_factor). */
    og_rope rope_swa, rope_comp;
    og_ds4_rope_scaling rope_scaling;
} og_ds4_hparams;

/* Reads and bounds every deepseek4 key of §3.1 (the "deepseek4." prefix),
 * n_vocab from token_embd's ne1 (header-only opens work). Every integer is
 * checked against its OG_DS4_MAX_* bound and the rules between keys (used <=
 * count, G divides H, R even and <= D and <= ID, ratios in {0, 4, 128}, ID a
 * power of two when a ratio-4 layer exists, hash layers <= layers, the
 * rope.dimension_count_swa / attention.key_length_swa / value_length_swa that
 * llama.cpp uses for every deepseek4 layer equal to the full values) before
 * anything is sized by it; floats must be finite and in range (eps in (0, 1],
 * RoPE bases in (1, 1e12], YaRN factor in [1, 1e6], betas in (0, 1e4], expert
 * weight scale in (0, 1e4], clamps in [0, 1e6]). Errors name the key and value:
 * OG_ERR_UNSUPPORTED (architecture not deepseek4, expert_gating_func not
 * sqrt-softplus, expert groups), OG_ERR_NOT_FOUND (a required key or
 * token_embd missing), OG_ERR_FORMAT (a value out of bounds or of the wrong
 * type). The log gets the choices made for absent optional keys. Keys no
 * deepseek4 graph reads (rope.freq_base_swa, attention.indexer.block_size /
 * local_blocks / types) are ignored, as llama.cpp v0.4.0 ignores them. */
og_status og_ds4_hparams_read(const og_gguf *g, const og_logger *lg, og_ds4_hparams *hp, char *err, size_t errlen);

/* The two RoPE schedules of §4.1.2 as deepseek4.cpp builds them (V4.1 has the
 * same, §2): *swa for window-only layers (base, no scaling), *comp for the
 * compressed layers, their rows and the indexer (comp_base; 1/factor unless
 * sc is NONE; YaRN's ramp with n_ctx_orig and the betas when sc is YARN).
 * d_rope = n_rot, mscale 1 (llama.cpp's attn_factor cancels YaRN's magnitude
 * factor). Cannot fail. */
void og_ds4_rope_schedules(og_ds4_rope_scaling sc, uint32_t n_rot, float base, float comp_base, float factor,
                           uint32_t n_ctx_orig, float beta_fast, float beta_slow, og_rope *swa, og_rope *comp);

/* The keys deepseek4 and deepseek41 files spell alike (after their own
 * "ARCH." prefix), written by both writers from their hparams h (V4's and
 * V4.1's structs use the same field names): KU(key, uint32) and KF(key,
 * float) are the writer's own macros. The dims and the attention shape, the
 * RoPE schedules (the type string is the writer's), the MoE sizes, the mHC. */
#define OG_DS4_WRITE_SHARED_KEYS(KU, KF, h) \
    KU("block_count", (h)->n_layer); KU("context_length", (h)->n_ctx_train); KU("embedding_length", (h)->n_embd); \
    KU("vocab_size", (h)->n_vocab); KU("attention.head_count", (h)->n_head); KU("attention.head_count_kv", 1); \
    KU("attention.key_length", (h)->head_dim); KU("attention.value_length", (h)->head_dim); \
    KU("rope.dimension_count", (h)->n_rot); KU("attention.q_lora_rank", (h)->q_lora_rank); \
    KU("attention.output_lora_rank", (h)->o_lora_rank); KU("attention.output_group_count", (h)->o_group_count); \
    KU("attention.sliding_window", (h)->n_swa); \
    KU("attention.indexer.head_count", (h)->indexer_n_head); KU("attention.indexer.key_length", (h)->indexer_head_dim); \
    KU("attention.indexer.top_k", (h)->indexer_top_k); \
    KF("attention.layer_norm_rms_epsilon", (h)->rms_eps); KF("rope.freq_base", (h)->rope_swa.base); \
    KF("attention.compress_rope_freq_base", (h)->rope_comp.base); KF("rope.scaling.factor", 1.0f / (h)->rope_comp.freq_scale); \
    KU("rope.scaling.original_context_length", (uint32_t)(h)->rope_comp.n_ctx_orig); \
    KF("rope.scaling.yarn_beta_fast", (h)->rope_comp.beta_fast); KF("rope.scaling.yarn_beta_slow", (h)->rope_comp.beta_slow); \
    KU("expert_count", (h)->n_expert); KU("expert_used_count", (h)->n_expert_used); \
    KU("expert_shared_count", (h)->n_expert_shared); KU("expert_feed_forward_length", (h)->n_ff_exp); \
    KF("expert_weights_scale", (h)->expert_weights_scale); \
    KU("hyper_connection.count", (h)->hc_count); KU("hyper_connection.sinkhorn_iterations", (h)->hc_sinkhorn_iters); \
    KF("hyper_connection.epsilon", (h)->hc_eps)

/* ---- the tensor-name table ------------------------------------------------ */

/* Which layers hold a kind. */
typedef enum og_ds4_where {
    OG_DS4_GLOBAL = 0,   /* outside the layers (name has no blk.N. prefix) */
    OG_DS4_EVERY,        /* every trunk layer */
    OG_DS4_COMPRESSED,   /* ratio != 0 */
    OG_DS4_CSA,          /* ratio 4: indexer and its compressor */
    OG_DS4_HASH,         /* il < hash_layer_count */
    OG_DS4_ROUTED_BIAS,  /* il >= hash_layer_count (llama.cpp requires exp_probs_b there) */
    OG_DS4_SHARED,       /* n_expert_shared > 0 */
} og_ds4_where;

/* One dimension of a kind's shape, as a function of hparams and the layer. */
typedef enum og_ds4_dim {
    OG_DS4_D_1 = 0, OG_DS4_D_3, OG_DS4_D_EMBD, OG_DS4_D_VOCAB, OG_DS4_D_HC, OG_DS4_D_HC_EMBD /* hc N */,
    OG_DS4_D_HC_MIX /* (2 + hc) hc */, OG_DS4_D_Q_RANK, OG_DS4_D_HEAD, OG_DS4_D_HEAD_DIM, OG_DS4_D_Q /* H D */,
    OG_DS4_D_O_GROUP_IN /* H D / G */, OG_DS4_D_O_RANK, OG_DS4_D_O_GROUPS, OG_DS4_D_O_LOW /* G o_rank */,
    OG_DS4_D_COMP /* c D, c = 2 at ratio 4 else 1 */, OG_DS4_D_RATIO, OG_DS4_D_IDX_HEAD, OG_DS4_D_IDX_Q /* IH ID */,
    OG_DS4_D_IDX_COMP /* 2 ID */, OG_DS4_D_IDX_DIM, OG_DS4_D_EXPERT, OG_DS4_D_EXPERT_USED, OG_DS4_D_FF,
    OG_DS4_D_FF_SH /* F n_expert_shared */,
} og_ds4_dim;

/* What a kind's type is chosen by in make-model (og_ds4_write): the --type-*
 * options of deepseek2's writer, plus AUX for the small 16-bit matrices
 * (router, mHC, compressor, indexer: F16 in the published Q2 file). NORM and
 * VEC are always F32, I32 is the hash table. */
typedef enum og_ds4_wclass {
    OG_DS4_W_EMBD = 0, OG_DS4_W_OUTPUT, OG_DS4_W_ATTN, OG_DS4_W_ROUTED, OG_DS4_W_ROUTED_DOWN, OG_DS4_W_SHARED,
    OG_DS4_W_AUX, OG_DS4_W_NORM, OG_DS4_W_VEC, OG_DS4_W_I32,
} og_ds4_wclass;

typedef enum og_ds4_tensor_id {
    OG_DS4_TOKEN_EMBD = 0, OG_DS4_OUTPUT_NORM, OG_DS4_OUTPUT, OG_DS4_OUTPUT_HC_FN, OG_DS4_OUTPUT_HC_BASE,
    OG_DS4_OUTPUT_HC_SCALE,
    OG_DS4_HC_ATTN_FN, OG_DS4_HC_ATTN_BASE, OG_DS4_HC_ATTN_SCALE, OG_DS4_ATTN_NORM,
    OG_DS4_ATTN_Q_A, OG_DS4_ATTN_Q_A_NORM, OG_DS4_ATTN_Q_B, OG_DS4_ATTN_KV, OG_DS4_ATTN_KV_A_NORM,
    OG_DS4_ATTN_SINKS, OG_DS4_ATTN_OUTPUT_A, OG_DS4_ATTN_OUTPUT_B,
    OG_DS4_ATTN_COMP_KV, OG_DS4_ATTN_COMP_GATE, OG_DS4_ATTN_COMP_APE, OG_DS4_ATTN_COMP_NORM,
    OG_DS4_INDEXER_Q_B, OG_DS4_INDEXER_PROJ, OG_DS4_INDEXER_COMP_KV, OG_DS4_INDEXER_COMP_GATE,
    OG_DS4_INDEXER_COMP_APE, OG_DS4_INDEXER_COMP_NORM,
    OG_DS4_HC_FFN_FN, OG_DS4_HC_FFN_BASE, OG_DS4_HC_FFN_SCALE, OG_DS4_FFN_NORM,
    OG_DS4_FFN_GATE_INP, OG_DS4_EXP_PROBS_B, OG_DS4_EXP_PROBS_B_VL, OG_DS4_FFN_GATE_TID2EID,
    OG_DS4_FFN_GATE_EXPS, OG_DS4_FFN_UP_EXPS, OG_DS4_FFN_DOWN_EXPS,
    OG_DS4_FFN_GATE_SHEXP, OG_DS4_FFN_UP_SHEXP, OG_DS4_FFN_DOWN_SHEXP,
    /* llama.cpp's writer adds these; its loader reads them (TENSOR_NOT_REQUIRED)
     * but its deepseek4 graph passes nullptr for them to build_moe_ffn and
     * build_ffn, so they are NOT applied: accepted and ignored (applied false). */
    OG_DS4_FFN_GATE_EXPS_SCALE, OG_DS4_FFN_UP_EXPS_SCALE, OG_DS4_FFN_DOWN_EXPS_SCALE,
    OG_DS4_FFN_GATE_EXPS_INSCALE, OG_DS4_FFN_UP_EXPS_INSCALE, OG_DS4_FFN_DOWN_EXPS_INSCALE,
    OG_DS4_FFN_GATE_SHEXP_SCALE, OG_DS4_FFN_UP_SHEXP_SCALE, OG_DS4_FFN_DOWN_SHEXP_SCALE,
    OG_DS4_FFN_GATE_SHEXP_INSCALE, OG_DS4_FFN_UP_SHEXP_INSCALE, OG_DS4_FFN_DOWN_SHEXP_INSCALE,
    OG_DS4_N_TENSOR,
} og_ds4_tensor_id;

typedef struct og_ds4_tensor_kind {
    const char *name;      /* GGUF name; per-layer kinds without the "blk.N." prefix ("attn_q_a.weight") */
    og_ds4_where where;
    uint32_t n_dims;       /* 1..3 */
    og_ds4_dim ne[3];      /* ne0, ne1, ne2 (unused: OG_DS4_D_1) */
    bool required;         /* within `where` */
    bool applied;          /* false: accepted and ignored (llama.cpp does not apply it either) */
    og_tensor_role role;   /* for the planner: hc_* OTHER, output_hc_* OUTPUT, compressor and
                            * indexer ATTENTION, tid2eid ROUTER (see og_ds4_role) */
    og_ds4_wclass wclass;
} og_ds4_tensor_kind;

/* The table, indexed by og_ds4_tensor_id (a const table: not mutable state). */
extern const og_ds4_tensor_kind og_ds4_tensors[OG_DS4_N_TENSOR];
/* The same rows' names and roles as og_arch.h rows (from the same list):
 * og_arch_deepseek4's .tensors / .n_tensors (OG_DS4_N_TENSOR). */
extern const og_arch_tensor og_ds4_arch_tensors[OG_DS4_N_TENSOR];

/* Whether layer il (-1 for global kinds) holds kind id. */
bool og_ds4_tensor_in_layer(const og_ds4_hparams *hp, og_ds4_tensor_id id, int il);

/* Expected shape of kind id in layer il: ne[0..2] (unused dims 1), the
 * number of dims into *n_dims. OG_ERR_INVALID_ARG if the layer does not hold
 * the kind. */
og_status og_ds4_tensor_shape(const og_ds4_hparams *hp, og_ds4_tensor_id id, int il, int64_t ne[3], uint32_t *n_dims);

/* GGUF name of kind id in layer il ("blk.3.attn_kv.weight"). OG_ERR_RANGE if
 * it does not fit buf. */
og_status og_ds4_tensor_name(og_ds4_tensor_id id, int il, char *buf, size_t buflen);

/* Finds kind id of layer il in g and checks its shape against the table
 * (attn_output_a may also be llama.cpp's 3-D [H D / G, o_rank, G]: the same
 * bytes). *out is NULL for an absent optional tensor. Errors name the tensor:
 * OG_ERR_NOT_FOUND (a required one missing), OG_ERR_FORMAT (another shape;
 * an I32 kind of another type, or a float kind stored as I32). */
og_status og_ds4_tensor_find(const og_gguf *g, const og_ds4_hparams *hp, og_ds4_tensor_id id, int il,
                             const og_gguf_tensor **out, char *err, size_t errlen);

/* Checks every tensor of the table for every layer (og_ds4_tensor_find), and
 * that hash tables hold expert ids < E (when the data is mapped). Errors as
 * og_ds4_tensor_find; OG_ERR_RANGE for a bad expert id, naming the tensor and
 * the element. */
og_status og_ds4_tensors_check(const og_gguf *g, const og_ds4_hparams *hp, char *err, size_t errlen);

/* Role of a deepseek4 tensor by its GGUF name, from the table
 * (og_arch_table_role on og_ds4_arch_tensors): og_arch_deepseek4's .role.
 * Names the table does not know (MTP blocks, future kinds) give OG_ROLE_OTHER.
 * Never fails. */
og_tensor_role og_ds4_role(const char *tensor_name);

/* The kind of a GGUF name and its layer (-1 for global kinds), or
 * OG_DS4_N_TENSOR when the table does not know it. */
og_ds4_tensor_id og_ds4_tensor_lookup(const char *tensor_name, int *il);

#endif
