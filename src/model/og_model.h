/* onegpu model: what the engine, the planner, the expert cache, the dispatcher
 * and the CLI know of a model (DESIGN.md "The seams"): an opaque og_model behind
 * an architecture table (src/model/og_arch.h, internal to src/model), its
 * og_model_info (sizes, the KV cache's size terms, each MoE layer's expert
 * weights), the table of tensor roles that the planner and `onegpu gguf` read,
 * the forward pass and the dispatcher seam its MoE layers go through
 * (og_dispatch_type). Architectures: deepseek2 (src/model/deepseek2.c). */
#ifndef OG_MODEL_H
#define OG_MODEL_H

#include "og_device.h"
#include "og_gguf.h"

typedef struct og_model og_model; /* opaque outside src/model (src/model/og_arch.h) */

typedef enum og_tensor_role {
    OG_ROLE_EMBEDDINGS = 0, /* token_embd */
    OG_ROLE_ATTENTION,      /* attn_* incl. its norms and MLA factors */
    OG_ROLE_NORM,           /* ffn_norm and other per-layer norms outside attention */
    OG_ROLE_ROUTER,         /* ffn_gate_inp, exp_probs_b */
    OG_ROLE_DENSE_FFN,      /* ffn_gate/up/down of dense (non-MoE) layers */
    OG_ROLE_ROUTED_EXPERTS, /* ffn_*_exps: stacked routed experts [.., .., n_expert] */
    OG_ROLE_SHARED_EXPERTS, /* ffn_*_shexp */
    OG_ROLE_OUTPUT,         /* output, output_norm */
    OG_ROLE_ENGRAM,         /* deepseek41's Engram n-gram tables (engram_embd): host-only, never device bytes */
    OG_ROLE_OTHER,          /* anything the table does not know */
    OG_ROLE_COUNT
} og_tensor_role;

/* Role of a tensor by its GGUF name, for architecture `arch` (e.g. "deepseek2"):
 * the architecture's one tensor-name table (og_arch.role). An architecture
 * without an entry (or NULL) gets the generic rules for llama.cpp's MoE names
 * (attn_*, ffn_*_exps, ...). Unknown names give OG_ROLE_OTHER; never fails. */
og_tensor_role og_model_tensor_role(const char *arch, const char *tensor_name);

/* Short name of a role ("routed_experts"). Never NULL. */
const char *og_model_role_name(og_tensor_role role);

/* Layer index from "blk.N.*", or -1 for tensors outside the layers. */
int og_model_tensor_layer(const char *tensor_name);

/* ---- the model interface (issue 13 item 1) -------------------------------- */

/* One MoE layer's expert weights, as the dispatcher, the expert cache and the
 * placement read them (never an architecture's own struct). Shapes with D =
 * n_embd, F_e = n_ff_exp, E = n_expert, S = n_expert_shared. */
typedef struct og_moe_weights {
    bool moe;                                /* false: dense layer (the rest type-less) */
    og_weight gate_exps, up_exps, down_exps; /* stacked [D -> E F_e] x 2, [F_e -> E D]: expert e = rows
                                                [e F_e, (e+1) F_e) (down: [e D, (e+1) D)) */
    og_weight gate_sh, up_sh, down_sh;       /* shared experts [D -> S F_e] x 2, [S F_e -> D], or type-less if none */
    /* deepseek4: silu(min(g, c)) * clamp(u, -c, c) for routed AND shared experts
     * (c = swiglu_clamp); 0: plain SwiGLU silu(g) * u */
    float swiglu_clamp;
} og_moe_weights;

/* What everything outside src/model knows of a model: the planner (from a
 * header-only GGUF), the engine, the expert cache, the dispatcher, the CLI. */
typedef struct og_model_info {
    const char *arch;            /* "deepseek2", "deepseek4" (static string) */
    uint32_t n_layer, n_embd, n_vocab, n_ctx_train, n_head;
    uint32_t n_expert, n_expert_used, n_expert_shared, n_ff_exp;
    uint32_t n_ff;               /* dense FFN width, 0 if none */
    uint32_t n_dense;            /* leading dense layers (deepseek4: 0) */
    /* Per-sequence cache size, in ELEMENTS (the planner multiplies by its
     * bytes per element): a sequence of n tokens holds
     *   kv_elems_fixed + ceil(n * kv_elems_per_token)
     * deepseek2: fixed 0, per token n_layer * (r_kv + d_rope) (deepseek2.md §3).
     * deepseek4: fixed = raw windows (n_layer * 128 * 512) + compressor states,
     *   per token = sum over compressed layers of 512 / ratio (+ 128 / ratio indexer keys). */
    uint64_t kv_elems_fixed;
    double kv_elems_per_token;
    /* Bytes of one cached element (og_kv_type_bytes). A loaded deepseek2: its
     * cache type's (og_model_set_option "kv-type", default f16: 2; f32: 4); from
     * og_model_describe 0, the caller's choice (og_plan_input.kv_bytes_per_elem,
     * from the same --kv-type) applies. deepseek4: 4 always (its windows,
     * compressed rows and indexer keys are F32 rows whatever the cache type;
     * its f16 type rounds the values, not the storage). */
    uint32_t kv_elem_bytes;
    /* One forward call's scratch (og_fwd_scratch_bytes) in bytes per batch
     * token and per output row: n tokens and o rows take at most
     * n x per_token + o x per_output. 0: the architecture gives none (the
     * planner's generic estimate). deepseek4: its mHC streams and grouped
     * output projection take ~3x the generic figure (v4-flash: 333 MiB for 512 tokens). */
    uint64_t fwd_bytes_per_token, fwd_bytes_per_output;
    /* The cache is og_kv blocks alone (paged by OG_KV_BLOCK positions, each
     * block independent of later positions): the engine's prefix cache may
     * share whole blocks. false (deepseek4: ring windows, compressor state):
     * no block sharing, the model keeps its state in og_kv.arch. */
    bool kv_paged;
    /* og_kv_fork works on this model's caches: paged blocks (kv_paged), or an
     * architecture state with a fork (deepseek4). false: `n` > 1 is refused. */
    bool kv_fork;
    /* og_kv_snapshot / og_kv_restore work on this model's caches (an
     * architecture state at any position: deepseek4, deepseek41): the engine's
     * prefix cache keeps whole states. false: no snapshots (deepseek2 shares
     * its paged blocks instead). */
    bool kv_snapshot;
    uint64_t kv_block_bytes;     /* bytes of one og_kv block (kv_paged), else 0: deepseek2
                                    n_layer x OG_KV_BLOCK x (r_kv + d_rope) x kv_elem_bytes */
    /* Bytes of the tensors that stay in host memory (gathered there by row,
     * never device bytes): the planner counts them in RAM only. deepseek41:
     * the Engram tables (OG_ROLE_ENGRAM) and token_embd; others 0. */
    uint64_t host_only_bytes;
    const char *host_only_what;  /* what they are, for people ("Engram tables and token embeddings"), or NULL */
    const og_moe_weights *moe;   /* [n_layer] with a loaded model; NULL from og_model_describe */
} og_model_info;

/* The model's info (valid until og_model_free). Never NULL for a loaded model
 * (returns a pointer, cannot fail). */
const og_model_info *og_model_get_info(const og_model *m);
/* Sets a run option of the model's architecture (not from the file), before
 * the first forward call. deepseek2 and deepseek4: "kv-type", "f16" (the
 * default) or "f32", the KV cache's element type (og_kv_type): deepseek2 stores
 * its MLA blocks in it (og_model_info.kv_elem_bytes and kv_block_bytes
 * follow); deepseek4 keeps F32 rows and with f16 rounds every stored KV row
 * (raw window, compressed rows, indexer keys) to f16, the values an f16 cache
 * holds, as ds4's and llama.cpp's default F16 cache store them ("kv-f16" on /
 * off: the same, its older name). deepseek4 also (values "on" / "off"):
 * "kv-fp8" (default on: the FP8 E4M3 round trip of the raw and compressed KV's
 * non-RoPE dims), "indexer-fp4" (on: the FP4 E2M1 round trip of the indexer's
 * Hadamard-rotated queries and keys), as V4 was trained and ds4 runs it;
 * llama.cpp v0.4.0 computes both off.
 * deepseek41 (decision 2 of the V4.1 brief: V4.1's QAT is unverified, all
 * default off; no kv-type: F32 rows): "kv-fp8" (the window rows' non-RoPE dims,
 * FP8 E4M3 in blocks of 32), "kv-fp4" (the compressed rows after RoPE, FP4 E2M1
 * with an E4M3 scale per 16), "indexer-fp4" (the indexer's queries and keys
 * after RoPE, FP4 E2M1 in blocks of 32, no Hadamard rotation).
 * Errors: OG_ERR_INVALID_ARG naming an option or value the architecture does
 * not have. */
og_status og_model_set_option(og_model *m, const char *name, const char *value, char *err, size_t errlen);
/* The GGUF the model's weights live in (tokenizer, chat template); owned by the
 * model. Cannot fail (returns a pointer). */
const og_gguf *og_model_gguf(const og_model *m);

/* Header-only (og_gguf_open with OG_GGUF_HEADER_ONLY or a split set): the
 * architecture's checks and bounds, info without weights (moe NULL), chosen
 * by general.architecture through the architecture table. Errors as
 * og_model_load's (OG_ERR_UNSUPPORTED naming an architecture without an
 * entry). */
og_status og_model_describe(const og_gguf *g, const og_logger *lg, og_model_info *info, char *err, size_t errlen);

/* Opens a GGUF and loads it with the architecture its general.architecture
 * names (the table in src/model/model.c; OG_ERR_UNSUPPORTED naming it when none
 * matches). deepseek2: reads and checks the hyperparameters and binds every
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

/* Per-sequence state. deepseek2 (its MLA cache): per layer and position, the
 * normalized latent c (r_kv) then the roped k_pe (d_rope) (§3), in blocks of
 * OG_KV_BLOCK positions, f16 or f32 (og_kv_type: the model's "kv-type"). An architecture with og_model_info.kv_paged false
 * keeps its state behind `arch` (made on the first forward call of that
 * sequence, freed by og_kv_free through arch_free). Zero-initialized = empty. */
#define OG_KV_BLOCK 64
/* Where a paged cache's blocks come from and go back to (the engine's KV pool,
 * src/engine/kv_pool.h): take returns one block of og_model_info.kv_block_bytes
 * in the cache's memory (og_kv.dev's, or the host's), or NULL when none is free
 * (the forward pass then fails with OG_ERR_NOMEM naming the pool); give takes
 * one back. Both are called by whoever grows, forks or frees the cache, on that
 * thread: the engine reserves the blocks a step needs before its forward call
 * (under its lock), so the forward pass, which runs outside the lock, finds
 * them and never calls take; forks and frees happen under the lock. */
typedef struct og_kv_alloc {
    void *(*take)(void *self);
    void (*give)(void *self, void *blk);
    void *self;
} og_kv_alloc;
typedef struct og_kv {
    float **blocks;    /* [n_blocks] of [n_layer][OG_KV_BLOCK][r_kv + d_rope] elements of type (f16: the
                          address of uint16_t data): device addresses when dev */
    og_kv_type type;   /* the blocks' element type (the model's kv-type when the first was made) */
    og_device *dev;    /* the device whose memory holds the blocks (the run context's rc->dev at the first
                          forward call), or NULL: host memory. It must outlive the cache */
    int n_blocks, cap_blocks;
    int32_t n_pos;     /* positions filled */
    int32_t n_ctx;     /* the most positions the sequence will hold (the engine's ctx), set before its
                          first forward call, or 0: the model's trained context. deepseek4 sizes its
                          window rings by min(window, n_ctx) and then refuses positions past n_ctx */
    const og_kv_alloc *alloc;      /* the blocks' allocator (the engine's pool), or NULL: each block its
                                      own allocation (dev->ops->alloc, or malloc without dev) */
    void *arch;                    /* architecture-owned state, or NULL */
    void (*arch_free)(void *arch); /* frees arch (set by whoever set arch) */
} og_kv;
/* Frees the blocks (on their device, or back to kv->alloc) and the
 * architecture state, and empties *kv. No status: freeing cannot fail. */
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
 * og_model_info.kv_block_bytes each (deepseek2: [n_layer][OG_KV_BLOCK][r_kv +
 * d_rope] elements of src's type, which must be the model's kv-type). A model
 * whose cache is not paged (kv_paged false) with og_model_info.kv_fork
 * (deepseek4, deepseek41): n_share must be 0 and dst gets a deep copy
 * of src's architecture state (deepseek4: every layer's raw window
 * [n_swa][head_dim], compressed rows [n_pos / ratio][head_dim], indexer keys
 * [n_pos / 4][indexer_head_dim] and compressor states; deepseek41: the same
 * for its kv sources and key owners, and the Engram context's last tokens) in new memory of src's;
 * src and dst are then independent (either may be freed or run on). A cache on
 * a device is copied on rc->stream (rc->dev must be src->dev) and waited for.
 * Errors: OG_ERR_UNSUPPORTED (kv_fork false: an architecture state without a
 * fork), OG_ERR_INVALID_ARG (dst not empty, n_share outside 0..n_blocks or not
 * 0 for an unpaged cache, a device cache without its stream, blocks of another
 * kv-type than the model's, a state of another architecture), OG_ERR_NOMEM or
 * the device's (dst stays empty). */
og_status og_kv_fork(const og_model *m, const og_run_ctx *rc, const og_kv *src, int n_share, og_kv *dst, char *err,
                     size_t errlen);

/* A copy of a sequence's state at one position (issue 17, the prefix cache of
 * a model whose state is not paged blocks: og_model_info.kv_snapshot), apart
 * from any sequence: every piece the state holds at n_pos packed into one
 * allocation in the state's memory. deepseek4: per layer the raw window ring
 * [n_ring][head_dim], and per compressed layer its compressor state
 * ([2][lanes ratio][lanes head_dim], lanes 2 at ratio 4, partial block
 * included: a snapshot is restorable at any position) and its n_pos / ratio
 * compressed rows [head_dim], at ratio 4 also the indexer's compressor state
 * and keys [indexer_head_dim]; deepseek41: the same for its kv sources (their
 * compressor state at ratio > 1) and key owners' index keys, plus the Engram
 * context (the last OG_DS41_MAX_ENGRAM_NGRAM tokens) in the host part. So its
 * bytes are og_model_info's formula at n_pos, (kv_elems_fixed + n_pos x
 * kv_elems_per_token) x kv_elem_bytes, exactly when n_pos is a multiple of
 * every ratio and n_ring is the window (a ratio's partial block holds no row
 * yet: fewer bytes otherwise), with n_ring = min(window, the source's n_ctx). */
typedef struct og_kv_snap {
    const og_model *model; /* the model whose state it is */
    uint64_t key;          /* og_model_kv_key(model) when it was taken: a restore after an option changed is refused */
    og_device *dev;        /* where data lives (the state's device), or NULL: host memory */
    void *data;            /* [bytes] the pieces in the architecture's order */
    uint64_t bytes;
    void *host;            /* [host_bytes] host-side pieces (malloc'ed), or NULL */
    uint64_t host_bytes;
    int32_t n_pos;         /* positions the state holds */
    int32_t n_ctx;         /* the source's og_kv.n_ctx (its rings' rows follow from it) */
} og_kv_snap;

/* A fingerprint of what a state of model m depends on besides the tokens: the
 * architecture, the file (size, tensor count, data offset, key count) and
 * every option set on it so far (og_model_set_option, in order): states of
 * two models, or of one model before and after an option changed, have other
 * keys (a key that differs for equal settings costs a cache miss only).
 * Cannot fail (returns the key). */
uint64_t og_model_kv_key(const og_model *m);

/* Copies src's state (src->n_pos > 0 positions) into *out (zeroed first),
 * in src's memory (a device state's copies on rc->stream, waited for). src is
 * unchanged and may run on. Errors: OG_ERR_UNSUPPORTED (the model has no
 * snapshots: og_model_info.kv_snapshot false), OG_ERR_INVALID_ARG (an empty
 * cache, a state of another architecture or model, a device state without
 * the run context's stream), OG_ERR_NOMEM or the device's (*out stays empty). */
og_status og_kv_snapshot(const og_model *m, const og_run_ctx *rc, const og_kv *src, og_kv_snap *out, char *err,
                         size_t errlen);
/* Makes dst (empty; its n_ctx, when set, must be the snapshot's)
 * the state snap holds: a new state in snap's memory holding its pieces, n_pos
 * snap->n_pos; running on from there gives the bits the source gave. snap is
 * unchanged. Errors: OG_ERR_INVALID_ARG (dst not empty, a snapshot of another
 * model or of this one under other options (og_model_kv_key), another
 * n_ctx, a device snapshot without the run context's stream), OG_ERR_UNSUPPORTED
 * (no snapshots), OG_ERR_NOMEM or the device's (dst stays empty). */
og_status og_kv_restore(const og_model *m, const og_run_ctx *rc, const og_kv_snap *snap, og_kv *dst, char *err,
                        size_t errlen);
/* Frees the snapshot's memory and empties *snap. No status: cannot fail. */
void og_kv_snap_free(og_kv_snap *snap);

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
    /* Host side, kept between calls as well (issue 18: a steady-state forward
     * call allocates nothing): the call's control arrays and host copies
     * (positions, block table, routes, the MoE layer's rows; grown when a call
     * needs more, never shrunk), and the host device of calls without
     * og_run_ctx.dev with its op scratch (made at the first such call on
     * host_pool / host_kern, remade if the run context names others). */
    og_buf host;
    og_device *host_dev;
    const og_pool *host_pool;
    const og_kernels *host_kern;
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
/* Frees the allocations (the device one on the device it came from, the host
 * buffer, the host device) and empties *s (grows stays). */
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
    /* With the forward pass on a device (og_run_ctx.dev): device [n_tok][D] that receives y
     * instead, issued on og_run_ctx.stream (the combine then runs there as the
     * moe_combine op, with the same bits; y is the dispatcher's host scratch), or
     * NULL: the result in y */
    float *dev_y;
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
    /* The device copies of the non-expert weights (og_dev_weights: every weight
     * the forward pass hands to dev is looked up there), or NULL: dev reads the
     * weights where the model holds them (the host device; the cpu device using
     * the mapped file in place). Ignored without dev. */
    const og_dev_weights *weights;
    /* The activations' scratch reused between calls (og_fwd_scratch, with the
     * host buffers and host device), or NULL: each call allocates and frees its
     * own. */
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
