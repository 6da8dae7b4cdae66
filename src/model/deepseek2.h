/* deepseek2 (shared/spec/deepseek2.md), internal to src/model: its
 * hyperparameters, bounds and weights (og_ds2, the impl of an og_model it
 * loaded), its one tensor-name table (og_ds2_tensor_names: the loader, the
 * writer and the roles read it) and its model writer (make-model). Nothing
 * outside src/model includes this (white-box unit tests may). */
#ifndef OG_DEEPSEEK2_H
#define OG_DEEPSEEK2_H

#include "og_arch.h"

/* Bounds on the hyperparameters of an untrusted file: og_ds2_hparams_read and
 * og_model_load refuse a value outside them (OG_ERR_FORMAT, the message names
 * the key and the value) before anything is sized by it. Every published
 * DeepSeek model is far inside (V3: 61 layers, D 7168, 128 heads, r_kv 512,
 * d_rope 64, 256 experts of which 8 per token, 8 groups, vocab 129280, ctx
 * 163840); with them every size product of the loader, the forward pass and
 * the planner fits 64 bits. */
#define OG_DS2_MAX_LAYER 1024u          /* block_count */
#define OG_DS2_MAX_EMBD 65536u          /* embedding_length */
#define OG_DS2_MAX_HEAD 256u            /* attention.head_count: the forward runs every head in one pool run */
#define OG_DS2_MAX_Q_RANK 16384u        /* attention.q_lora_rank */
#define OG_DS2_MAX_KV_RANK 8192u        /* attention.kv_lora_rank */
#define OG_DS2_MAX_HEAD_DIM 2048u       /* key / value lengths per head */
#define OG_DS2_MAX_ROPE OG_ROPE_MAX_DIM /* rope.dimension_count (even) */
#define OG_DS2_MAX_FF (1u << 20)        /* feed_forward_length, expert_feed_forward_length */
#define OG_DS2_MAX_EXPERT 4096u         /* expert_count */
#define OG_DS2_MAX_EXPERT_USED 64u      /* expert_used_count */
#define OG_DS2_MAX_EXPERT_SHARED 64u    /* expert_shared_count */
#define OG_DS2_MAX_GROUP 1024u          /* expert_group_count */
#define OG_DS2_MAX_VOCAB (1u << 22)     /* token_embd rows */
#define OG_DS2_MAX_CTX (1u << 24)       /* context_length, rope.scaling.original_context_length */

/* Hyperparameters, read from the GGUF keys (§1) and cross-checked with tensor
 * shapes. Names: D = n_embd, H = n_head, r_q/r_kv = MLA ranks, E = n_expert. */
typedef struct og_hparams {
    uint32_t n_layer, n_embd, n_head, n_vocab, n_ctx_train;
    uint32_t q_lora_rank;            /* 0: plain attn_q */
    uint32_t kv_lora_rank;           /* r_kv: the cached latent */
    uint32_t d_nope, d_rope, d_qk, d_v;
    bool mla_format;                 /* attn_k_b/attn_v_b (else legacy attn_kv_b) */
    uint32_t n_ff, n_dense;          /* leading dense layers */
    uint32_t n_expert, n_expert_used, n_expert_shared, n_ff_exp;
    uint32_t n_group, n_group_used;  /* 1/1: no group limiting */
    uint32_t gating;                 /* 1 softmax, 2 sigmoid */
    float expert_scale;              /* routed_scaling_factor (1: none) */
    bool expert_norm;
    float rms_eps;
    og_rope rope;                    /* YaRN parameters, mscale = m_r */
    float kq_scale;                  /* m^2 / sqrt(d_qk) (§3 "Attention scale") */
} og_hparams;

typedef struct og_layer {
    const float *attn_norm;          /* [D] */
    og_weight q_a, q_b, q;           /* [D -> r_q], [r_q -> H d_qk] | [D -> H d_qk] */
    const float *q_a_norm;           /* [r_q] */
    og_weight kv_a;                  /* [D -> r_kv + d_rope] */
    const float *kv_a_norm;          /* [r_kv] */
    og_weight k_b, v_b;              /* per head: [d_nope -> r_kv] rows, [r_kv -> d_v] rows; H heads back to back */
    float *kv_b_f32;                 /* legacy files: attn_kv_b dequantized [H (d_nope + d_v)][r_kv] */
    og_weight o;                     /* [H d_v -> D] */
    const float *ffn_norm;           /* [D] */
    bool moe;
    og_weight gate, up, down;        /* dense: [D -> F], [D -> F], [F -> D] */
    og_weight router;                /* [D -> E], F32 */
    const float *exp_bias;           /* [E] or NULL */
    /* the expert weights (routed and shared) are in og_ds2.moe[layer] */
} og_layer;

/* m->impl of a deepseek2 model: weights as pointers into the mapped file. */
typedef struct og_ds2 {
    og_hparams hp;
    og_weight tok_embd;              /* [D, n_vocab] */
    const float *out_norm;           /* [D] */
    og_weight output;                /* [D -> n_vocab] (token_embd when absent) */
    og_layer *layers;                /* [n_layer] */
    og_moe_weights *moe;             /* [n_layer] the experts (og_model_info.moe; swiglu_clamp 0) */
} og_ds2;

/* deepseek2's weights of a model og_arch_deepseek2 loaded (m->impl). */
static inline const og_ds2 *og_ds2_of(const og_model *m) { return (const og_ds2 *)m->impl; }

/* The hyperparameters alone, from a GGUF opened header-only (the planner's
 * input): same checks and errors as og_model_load's, the OG_DS2_MAX_* bounds
 * included (n_vocab from token_embd's shape). */
og_status og_ds2_hparams_read(const og_gguf *g, const og_logger *lg, og_hparams *hp, char *err, size_t errlen);


#endif
