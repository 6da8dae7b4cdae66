/* deepseek2 (shared/spec/deepseek2.md), internal to src/model: its
 * hyperparameters, bounds and weights (og_ds2, the impl of an og_model it
 * loaded), its one tensor-name table (og_ds2_tensors: the loader, the writer
 * and the roles read it); its writer's config is public (og_model_write.h). Nothing
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
    float *kv_b_f32;                 /* legacy files: attn_kv_b dequantized [H (d_nope + d_v)][r_kv], model memory
                                        the CPU devices read in place (og_mla_kv_b_op; a GPU device needs a copy) */
    og_weight o;                     /* [H d_v -> D] */
    const float *ffn_norm;           /* [D] */
    bool moe;
    og_weight gate, up, down;        /* dense: [D -> F], [D -> F], [F -> D] */
    og_weight router;                /* [D -> E], F32 */
    const float *exp_bias;           /* [E] or NULL */
    /* the expert weights (routed and shared) are in og_ds2.moe[layer] */
} og_layer;

/* deepseek2's one tensor-name table (shared/spec/deepseek2.md §2): the loader
 * binds, the writer writes and og_model_tensor_role reads these names. */
typedef enum og_ds2_tensor {
    OG_DS2_TOKEN_EMBD,      /* token_embd.weight */
    OG_DS2_OUTPUT_NORM,     /* output_norm.weight */
    OG_DS2_OUTPUT,          /* output.weight */
    OG_DS2_ATTN_NORM,       /* blk.N.attn_norm.weight */
    OG_DS2_ATTN_Q_A,        /* blk.N.attn_q_a.weight */
    OG_DS2_ATTN_Q_A_NORM,   /* blk.N.attn_q_a_norm.weight */
    OG_DS2_ATTN_Q_B,        /* blk.N.attn_q_b.weight */
    OG_DS2_ATTN_Q,          /* blk.N.attn_q.weight */
    OG_DS2_ATTN_KV_A_MQA,   /* blk.N.attn_kv_a_mqa.weight */
    OG_DS2_ATTN_KV_A_NORM,  /* blk.N.attn_kv_a_norm.weight */
    OG_DS2_ATTN_K_B,        /* blk.N.attn_k_b.weight */
    OG_DS2_ATTN_V_B,        /* blk.N.attn_v_b.weight */
    OG_DS2_ATTN_KV_B,       /* blk.N.attn_kv_b.weight */
    OG_DS2_ATTN_OUTPUT,     /* blk.N.attn_output.weight */
    OG_DS2_FFN_NORM,        /* blk.N.ffn_norm.weight */
    OG_DS2_FFN_GATE,        /* blk.N.ffn_gate.weight */
    OG_DS2_FFN_UP,          /* blk.N.ffn_up.weight */
    OG_DS2_FFN_DOWN,        /* blk.N.ffn_down.weight */
    OG_DS2_FFN_GATE_INP,    /* blk.N.ffn_gate_inp.weight */
    OG_DS2_EXP_PROBS_B,     /* blk.N.exp_probs_b.bias */
    OG_DS2_FFN_GATE_EXPS,   /* blk.N.ffn_gate_exps.weight */
    OG_DS2_FFN_UP_EXPS,     /* blk.N.ffn_up_exps.weight */
    OG_DS2_FFN_DOWN_EXPS,   /* blk.N.ffn_down_exps.weight */
    OG_DS2_FFN_GATE_SHEXP,  /* blk.N.ffn_gate_shexp.weight */
    OG_DS2_FFN_UP_SHEXP,    /* blk.N.ffn_up_shexp.weight */
    OG_DS2_FFN_DOWN_SHEXP,  /* blk.N.ffn_down_shexp.weight */
    OG_DS2_TENSOR_COUNT
} og_ds2_tensor;
extern const og_arch_tensor og_ds2_tensors[OG_DS2_TENSOR_COUNT];

/* m->impl of a deepseek2 model: weights as pointers into the mapped file. */
typedef struct og_ds2 {
    og_hparams hp;
    og_weight tok_embd;              /* [D, n_vocab] */
    const float *out_norm;           /* [D] */
    og_weight output;                /* [D -> n_vocab] (token_embd when absent) */
    og_layer *layers;                /* [n_layer] */
    og_moe_weights *moe;             /* [n_layer] the experts (og_model_info.moe; swiglu_clamp 0) */
    og_kv_type kv_type;              /* the MLA cache's element type ("kv-type"; f16 unless set) */
} og_ds2;

/* The GGUF name of tensor t of layer `layer` (ignored for global tensors) in
 * buf[n]; returns buf. */
static inline const char *og_ds2_name(og_ds2_tensor t, uint32_t layer, char *buf, size_t n) {
    return og_arch_tensor_name(&og_ds2_tensors[t], layer, buf, n);
}

/* deepseek2's weights of a model og_arch_deepseek2 loaded (m->impl). */
static inline const og_ds2 *og_ds2_of(const og_model *m) { return (const og_ds2 *)m->impl; }

/* The hyperparameters alone, from a GGUF opened header-only (what
 * og_model_describe reads for deepseek2): same checks and errors as og_model_load's, the OG_DS2_MAX_* bounds
 * included (n_vocab from token_embd's shape). */
og_status og_ds2_hparams_read(const og_gguf *g, const og_logger *lg, og_hparams *hp, char *err, size_t errlen);


#endif
