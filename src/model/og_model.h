/* onegpu model: architecture knowledge: the table of tensor roles that the
 * planner and `onegpu gguf` read without knowing the model's internals
 * (DESIGN.md "Target models"), deepseek2's weights and forward pass, and the
 * dispatcher seam its MoE layers go through (og_dispatch_type). */
#ifndef OG_MODEL_H
#define OG_MODEL_H

#include "og_device.h"
#include "og_gguf.h"

typedef enum og_tensor_role {
    OG_ROLE_EMBEDDINGS = 0, /* token_embd */
    OG_ROLE_ATTENTION,      /* attn_* incl. its norms and MLA factors */
    OG_ROLE_NORM,           /* ffn_norm and other per-layer norms outside attention */
    OG_ROLE_ROUTER,         /* ffn_gate_inp, exp_probs_b */
    OG_ROLE_DENSE_FFN,      /* ffn_gate/up/down of dense (non-MoE) layers */
    OG_ROLE_ROUTED_EXPERTS, /* ffn_*_exps: stacked routed experts [.., .., n_expert] */
    OG_ROLE_SHARED_EXPERTS, /* ffn_*_shexp */
    OG_ROLE_OUTPUT,         /* output, output_norm */
    OG_ROLE_OTHER,          /* anything the table does not know */
    OG_ROLE_COUNT
} og_tensor_role;

/* Role of a tensor by its GGUF name, for architecture `arch` (e.g. "deepseek2").
 * Unknown names give OG_ROLE_OTHER; never fails. */
og_tensor_role og_model_tensor_role(const char *arch, const char *tensor_name);

/* Short name of a role ("routed_experts"). Never NULL. */
const char *og_model_role_name(og_tensor_role role);

/* Layer index from "blk.N.*", or -1 for tensors outside the layers. */
int og_model_tensor_layer(const char *tensor_name);

/* ---- deepseek2 (shared/spec/deepseek2.md) ------------------------------ */

/* Bounds on the hyperparameters of an untrusted file: og_hparams_read and
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
    og_weight gate_exps, up_exps, down_exps; /* expert e = rows [e F_e, (e+1) F_e) (down: [e D, (e+1) D)) */
    og_weight gate_sh, up_sh, down_sh;       /* shared experts, or type-less if none */
} og_layer;

typedef struct og_model {
    og_hparams hp;
    og_gguf *gguf;                   /* owns the mapping the weights point into */
    og_weight tok_embd;              /* [D, n_vocab] */
    const float *out_norm;           /* [D] */
    og_weight output;                /* [D -> n_vocab] (token_embd when absent) */
    og_layer *layers;                /* [n_layer] */
    og_logger log;
} og_model;

/* The hyperparameters alone, from a GGUF opened header-only (the planner's
 * input): same checks and errors as og_model_load's, the OG_DS2_MAX_* bounds
 * included (n_vocab from token_embd's shape). */
og_status og_hparams_read(const og_gguf *g, const og_logger *lg, og_hparams *hp, char *err, size_t errlen);

/* Opens a deepseek2 GGUF, reads and checks the hyperparameters and binds every
 * weight by name with strict shape checks. Errors name the key or tensor:
 * OG_ERR_NOT_FOUND (missing key/tensor), OG_ERR_FORMAT (inconsistent shapes or
 * values; an integer outside its OG_DS2_MAX_* bound or the §1 rules; a float key
 * that is NaN, infinite or out of range: rms epsilon in (0, 1], rope base > 1,
 * YaRN factor > 0, log multiplier in [0, 10], betas > 0), OG_ERR_UNSUPPORTED
 * (another architecture, a gating function other than softmax/sigmoid, or a
 * type without kernels), OG_ERR_NOMEM, plus og_gguf_open's. The log receives
 * the rules chosen (routing groups). */
og_status og_model_load(const char *path, const og_logger *lg, og_model **out, char *err, size_t errlen);
/* The same on a GGUF already open with data (og_gguf_open or
 * og_gguf_open_memory, flags 0): the model takes g over and closes it with
 * og_model_free, or at once when loading fails. Errors as og_model_load's,
 * without the path prefix. */
og_status og_model_load_gguf(og_gguf *g, const og_logger *lg, og_model **out, char *err, size_t errlen);
void og_model_free(og_model *m);

/* One (token, expert, weight) selection of a MoE layer: the dispatch seam the
 * placement issue splits between device and host. */
typedef struct og_route {
    int32_t token;   /* row of the batch */
    int32_t expert;
    float weight;
} og_route;

/* A sequence's MLA cache: per layer and position, the normalized latent c (r_kv)
 * then the roped k_pe (d_rope) (§3). Grows in blocks of OG_KV_BLOCK positions. */
#define OG_KV_BLOCK 64
typedef struct og_kv {
    float **blocks;    /* [n_blocks] of [n_layer][OG_KV_BLOCK][r_kv + d_rope]: device addresses when dev */
    og_device *dev;    /* the device whose memory holds the blocks (the run context's rc->dev at the first
                          forward call), or NULL: host memory. It must outlive the cache */
    int n_blocks, cap_blocks;
    int32_t n_pos;     /* positions filled */
} og_kv;
void og_kv_free(og_kv *kv);

/* Expert traffic of forward calls (the placement issue's statistics). The
 * caller owns the arrays; forward calls add to them, one thread at a time. */
typedef struct og_expert_stats {
    uint64_t *counts;        /* [n_layer][n_expert] selections, added to (dense layers stay 0) */
    const uint8_t *resident; /* [n_layer][n_expert] 1 = held in a device slot, or NULL */
    uint64_t routes;         /* (token, expert) selections seen */
    uint64_t routes_resident;/* of those, to resident experts: the device hit count */
    uint64_t *layer_routes, *layer_hits; /* [n_layer] the same per layer, or NULL */
} og_expert_stats;

typedef struct og_run_ctx og_run_ctx;

/* A cache for a sequence forked from src after its prompt (`n` > 1: the choices
 * of one prompt share its prefill). dst (empty, zeroed) gets src's n_blocks
 * blocks and n_pos positions: blocks [0, n_share) are src's own pointers (shared,
 * read-only from now on; the caller keeps them alive and must not free them
 * through dst: the engine's prefix cache holds them refcounted), blocks
 * [n_share, n_blocks) new ones in src's memory holding copies of src's (the
 * partial last block, and any full block the caller does not share), each
 * [n_layer][OG_KV_BLOCK][r_kv + d_rope] floats. A cache on a device is copied
 * on rc->stream (rc->dev must be src->dev) and waited for. Errors:
 * OG_ERR_INVALID_ARG (dst not empty, n_share outside 0..n_blocks, a device
 * cache without its stream), OG_ERR_NOMEM or the device's (dst stays empty). */
og_status og_kv_fork(const og_model *m, const og_run_ctx *rc, const og_kv *src, int n_share, og_kv *dst, char *err,
                     size_t errlen);

/* The forward pass's activation scratch, kept between calls (issue 12): one
 * allocation in the memory of dev (NULL: host memory, what the per-call host
 * device of og_run_ctx.dev == NULL allocates), sized by og_fwd_scratch_reserve
 * for the largest step the caller runs. A forward call that needs more (more
 * tokens or more logits rows than reserved, or another device) replaces it by
 * one of the size it needs, once: later calls of that size no longer allocate.
 * Owned by whoever reserved it (the engine, with its run context); one forward
 * call at a time. */
typedef struct og_fwd_scratch {
    og_device *dev; /* where base lives, or NULL: host memory (aligned_alloc) */
    void *base;
    uint64_t bytes; /* capacity */
    uint64_t grows; /* replacements by a call that needed more than the capacity */
} og_fwd_scratch;

/* Device bytes of one forward call's activations for n_tok tokens of which
 * n_out want logits (the sum of the buffers og_model_forward_batch takes:
 * [n_tok] x (3 D + H d_qk + q_lora + r_kv + d_rope + H d_v + E + 2 k + 2 n_ff)
 * floats, the attention chunk's [H][16] x (d_nope + 2 r_kv + d_v), [n_out][n_vocab]
 * logits, 64-byte alignment of each). Cannot fail (returns bytes). */
uint64_t og_fwd_scratch_bytes(const og_model *m, int64_t n_tok, int64_t n_out);

/* Makes s hold at least og_fwd_scratch_bytes(m, max_tok, max_out) bytes on dev
 * (NULL: host memory), replacing a smaller one or one on another device.
 * max_tok: the most tokens per forward step (the engine's batch_tokens);
 * max_out: the most logits rows per step (its parallel). Errors:
 * OG_ERR_INVALID_ARG (max_tok < 1 or max_out < 0), OG_ERR_NOMEM / the device's
 * (its budget): s is then empty. */
og_status og_fwd_scratch_reserve(const og_model *m, og_fwd_scratch *s, og_device *dev, int64_t max_tok,
                                 int64_t max_out, char *err, size_t errlen);
/* Frees the allocation (on the device it came from) and empties *s (grows stays). */
void og_fwd_scratch_free(og_fwd_scratch *s);

/* One MoE layer's experts, as the forward pass hands them to the dispatcher. */
typedef struct og_moe_layer {
    uint32_t layer;
    const float *x;          /* [n_tok][D] the FFN's normalized input (host memory) */
    int64_t n_tok;
    const og_route *routes;  /* [n_routes] (token, expert, weight), the router's order */
    int n_routes;
    const bool *exact;       /* [n_tok] or NULL: rows whose cold and shared experts compute canonically too */
    float *y;                /* [n_tok][D] out: shared experts + sum of weight * expert(x) in route order */
} og_moe_layer;

/* The dispatcher seam (DESIGN.md "The seams"): the forward pass computes a MoE
 * layer's experts through this table and knows nothing of where they run. The
 * moe part implements it (og_dispatch_create, with or without a device); like
 * redis's dictType, the model sees only the function and its opaque self. */
typedef struct og_dispatch_type {
    /* Computes io->y. The result must not depend on where an expert ran when
     * the numerics agree (route-order sum). Errors: OG_ERR_NOMEM, the kernels',
     * the device's. */
    og_status (*moe_layer)(void *self, const og_model *m, const og_run_ctx *rc, const og_moe_layer *io, char *err,
                           size_t errlen);
} og_dispatch_type;

typedef struct og_dispatcher {
    const og_dispatch_type *type;
    void *self;
} og_dispatcher;

/* Everything a forward call needs besides the weights. */
struct og_run_ctx {
    const og_kernels *kern;
    og_pool *pool;           /* the host pool */
    og_expert_stats *stats;  /* NULL: no bookkeeping */
    const og_dispatcher *dispatch; /* required for models with MoE layers (OG_ERR_INVALID_ARG without) */
    /* --cpu-numerics (DESIGN.md "Numerics"): resident experts compute with
     * device_numerics (OG_NUMERICS_CANONICAL when a device holds them); every
     * host product (cold and shared experts, attention projections, the per-head
     * k_b / v_b products, o, dense FFN, router, output head) with host_numerics,
     * and the attention scores with the warp-order f32 dot when it is
     * OG_NUMERICS_CANONICAL ("gpu", the CLI's default: a result depends on neither
     * the CPU tier nor where an expert ran, og_quant.h "Canonical numerics");
     * OG_NUMERICS_FORK ("fork"): each tier's fastest order. Zero: the fork. */
    og_numerics device_numerics, host_numerics;
    /* The device whose stream runs the forward pass's ops (the weights' and the
     * caches' data must be its addresses), or NULL: a host device
     * (og_device_host_create) on pool, made per call, running each op on the
     * calling thread. */
    og_device *dev;
    og_stream *stream;
    /* The activations' scratch reused between calls (og_fwd_scratch), or NULL:
     * each call allocates and frees its own. */
    og_fwd_scratch *scratch;
};

/* A batch of tokens from several sequences (continuous batching): token i
 * belongs to sequence seq[i] (tokens of one sequence in order; each continues
 * where that sequence's cache ends); logits[i] asks for its logits. */
typedef struct og_batch {
    int n_tok;
    const int32_t *tokens; /* [n_tok] */
    const int32_t *seq;    /* [n_tok] index into the caches */
    const bool *logits;    /* [n_tok] */
    const bool *exact;     /* [n_tok] or NULL: rows all of whose products (and attention scores)
                              compute canonically whatever host_numerics (a strata_reproducible
                              request while the others keep the fast path) */
} og_batch;

/* One forward call over a batch: the matrix products see all tokens at once,
 * attention each token's own cache. logits receives [n_wanted][n_vocab] in token
 * order. A row's result is bitwise the same alone or in any batch. On error no
 * cache's length changes. Errors as og_model_forward, plus OG_ERR_INVALID_ARG
 * for a sequence index outside [0, n_seq). */
og_status og_model_forward_batch(const og_model *m, const og_run_ctx *rc, og_kv *const *kvs, int n_seq,
                                 const og_batch *batch, float *logits, char *err, size_t errlen);

/* Runs n_tok tokens of one sequence (positions kv->n_pos ...) through the model
 * and appends them to the cache; logits[n_vocab] of the last token (or of every
 * token when all_logits, [n_tok][n_vocab]). Errors: OG_ERR_NOMEM, OG_ERR_RANGE
 * (context full). */
og_status og_model_forward(const og_model *m, const og_run_ctx *rc, og_kv *kv, const int32_t *tokens, int n_tok,
                           float *logits, bool all_logits, char *err, size_t errlen);

#endif
