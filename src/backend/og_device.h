/* The device interface: what the engine needs from the accelerator that holds
 * the hot experts (DESIGN.md "The seams", "The device without a GPU"). Two
 * implementations: `cpu` here (always available: plays the device when there is
 * no GPU, in a separate budgeted allocation, every host->device copy counted as
 * PCIe bytes, its ops run on its own threads) and `cuda` (its own issue).
 *
 * Device memory is addressed by `void *` values the host never dereferences: it
 * may add offsets to them (as with CUDA device pointers) and hand them back to
 * the device. Work is issued on streams: the copies and ops of one stream run in
 * the order issued, those of different streams in any order unless one stream
 * waits on an event recorded on another. Every call that issues work returns at
 * once; the host buffers it reads or writes must stay valid, and untouched, until
 * an event recorded after it completes. An op that fails on the device makes the
 * stream's later events fail: og_device_ops.event_wait returns its error. */
#ifndef OG_DEVICE_H
#define OG_DEVICE_H

#include "og_backend.h"

#include <string.h>

typedef struct og_device og_device;
typedef struct og_stream og_stream;
typedef uint64_t og_event; /* 0: no event (already complete) */

/* One MoE layer's expert slots in device memory: slot j starts at
 * base + j * slot_bytes and holds one expert's gate rows at gate_off, up rows at
 * up_off and down rows at down_off (bytes from the slot's start), in the file's
 * type and row layout. gate/up/down give type, K, n_rows and row_bytes of one
 * expert's matrices; their data is ignored. */
typedef struct og_expert_slots {
    void *base;
    uint64_t slot_bytes;
    uint32_t n_slots;
    og_weight gate, up, down; /* [D -> F], [D -> F], [F -> D] */
    uint64_t gate_off, up_off, down_off;
} og_expert_slots;

/* A run of consecutive activation rows that one slot's expert computes. */
typedef struct og_expert_group {
    int32_t slot;         /* [0, n_slots) */
    int32_t n_rows;       /* > 0 */
    og_numerics numerics; /* what the products compute (DESIGN.md "Numerics") */
} og_expert_group;

/* The routed-expert op: group g computes y = down(swiglu(gate x, up x)) of its
 * slot's expert for its n_rows rows, groups back to back in x and y; with
 * swiglu_clamp > 0 the SwiGLU is V4's clamped one (og_swiglu_clamp). */
typedef struct og_expert_op {
    og_expert_slots slots;
    const og_expert_group *groups; /* [n_groups], host memory, copied when the op is issued */
    int n_groups;                  /* >= 1 */
    const void *x;                 /* device [sum n_rows][D] f32 */
    void *y;                       /* device [sum n_rows][D] f32 */
    float swiglu_clamp;            /* 0: plain SwiGLU (deepseek2) */
} og_expert_op;

/* ---- the forward pass's ops (DESIGN.md "The seams") --------------------------
 * Every pointer an op descriptor names "device" is a device address (the host
 * never dereferences it); "host" arrays are small control data (positions,
 * sequence ids, per-token numerics, job lists) that the op copies when it is
 * issued, so the caller may reuse them at once. Activations are f32. Element
 * counts are elements, strides are in elements unless the descriptor says bytes.
 * On `cpu` each op calls the kernel the forward pass called before it was
 * written as ops (named per op), so its output is bitwise that call's. */

/* n_rows rows of n f32, row r at data + r * stride (stride >= n). */
typedef struct og_rows {
    float *data; /* device */
    int64_t n, n_rows, stride;
} og_rows;

/* The element type of a KV cache (--kv-type): IEEE binary32, or IEEE binary16
 * (uint16_t), which halves the cache. An f16 cache holds each value rounded to
 * nearest even once, when it is stored (og_fp32_to_fp16); every reader converts
 * it back exactly (og_fp16_to_fp32), so a result over an f16 cache is bitwise
 * the result over an f32 cache holding those rounded values, on every device
 * and tier. Zero is f32: deepseek4's views of its own F32 rows. */
typedef enum og_kv_type { OG_KV_F32 = 0, OG_KV_F16 } og_kv_type;

/* Bytes of one element of a cache of type t: 4 or 2. The one size the planner's
 * KV term (og_plan_input.kv_bytes_per_elem), a model's blocks
 * (og_model_info.kv_elem_bytes, kv_block_bytes) and the views below use. */
static inline uint32_t og_kv_type_bytes(og_kv_type t) { return t == OG_KV_F16 ? 2u : 4u; }

/* "f16" or "f32" (the --kv-type values). Never NULL (returns a name). */
static inline const char *og_kv_type_name(og_kv_type t) { return t == OG_KV_F16 ? "f16" : "f32"; }

/* *out = the type "f16" or "f32" names. Errors: OG_ERR_INVALID_ARG (any other
 * string, or NULL). */
static inline og_status og_kv_type_parse(const char *s, og_kv_type *out) {
    if (s && !strcmp(s, "f16")) *out = OG_KV_F16;
    else if (s && !strcmp(s, "f32")) *out = OG_KV_F32;
    else return OG_ERR_INVALID_ARG;
    return OG_OK;
}

/* A paged cache of rows in device memory, as og_kv lays deepseek2's MLA cache
 * out: the row of position p of a sequence whose block table starts at
 * blocks[first] is blocks[first + p / block_rows] + offset + (p % block_rows) *
 * row_stride elements of `type` (offset, strides and lengths in elements). */
typedef struct og_kv_view {
    float *const *blocks; /* host [n_blocks]: device addresses of the blocks (of f16 elements in an f16
                             cache: the address of its uint16_t data), copied when issued */
    int32_t n_blocks;
    int32_t block_rows;   /* positions per block (OG_KV_BLOCK) */
    int64_t offset;       /* elements from a block's start to the layer's first row */
    int64_t row_stride;   /* elements between positions */
    int64_t row_len;      /* elements of one row (r_kv + d_rope) */
    og_kv_type type;      /* f32 (0) or f16 elements; deepseek4's ops take f32 only */
} og_kv_view;

/* The cache row of position pos of the sequence whose block table starts at
 * kv->blocks[first] (og_kv_view's formula; a device address of row_len
 * elements of kv->type). */
static inline void *og_kv_view_row(const og_kv_view *kv, int32_t first, int32_t pos) {
    const int64_t e = kv->offset + (int64_t)(pos % kv->block_rows) * kv->row_stride;
    return (char *)kv->blocks[first + pos / kv->block_rows] + e * (int64_t)og_kv_type_bytes(kv->type);
}

/* Strided copy inside device memory: for mat < n_mats, row < n_rows, row_bytes
 * bytes from src + mat * src_mat_stride + row * src_row_stride to dst + the
 * same with dst's strides (all in bytes). Regions must not overlap. */
typedef struct og_copy_op {
    void *dst;
    const void *src;
    uint64_t row_bytes, n_rows, n_mats;
    uint64_t dst_row_stride, dst_mat_stride, src_row_stride, src_mat_stride;
} og_copy_op;

/* Router scores and top-k for n_tok tokens (deepseek2.md §5; og_cpu_route):
 * scores = softmax(logits) (gating 1), sigmoid(logits) (gating 2) or
 * sqrt(softplus(logits)) (gating 3, deepseek4.md §4.1.6: softplus(z) = z above
 * 20, exp(z) below -20); selection
 * by scores + bias (bias for selection only), within the n_group_used best
 * groups when n_group > 1 (a group's score: the sum of its two best); weights
 * = the selected scores, divided by their sum (floor 2^-14) when norm, times
 * scale. */
typedef struct og_router_op {
    const float *logits;  /* device [n_tok][n_expert] */
    const float *bias;    /* device [n_expert] or NULL */
    int64_t n_tok;
    int32_t n_expert, k;  /* k in [1, min(n_expert, 64)] */
    int32_t gating;       /* 1 softmax, 2 sigmoid, 3 sqrt-softplus */
    int32_t n_group, n_group_used; /* 1, 1: no group limit; else n_group divides n_expert, groups of >= 2 */
    bool norm;
    float scale;          /* 1: none */
    int32_t *ids;         /* device [n_tok][k] out: experts, best first */
    float *weights;       /* device [n_tok][k] out */
    /* Hash routing (deepseek4.md §4.1.6, V4's layers below hash_layer_count): when
     * hash_table is set the k experts of token t are row tokens[t] of it, in
     * stored order (no bias, no groups); weights as above from those experts'
     * scores. NULL: top-k selection. */
    const int32_t *hash_table; /* device [hash_rows][k] I32 (ffn_gate_tid2eid), each entry in [0, n_expert) */
    int64_t hash_rows;
    const int32_t *tokens;     /* host [n_tok], each in [0, hash_rows) (copied at issue) */
    /* The normalization's form: 0 divides by max(sum, 2^-14) (V4, ds4's floor
     * 6.1035e-5); > 0 divides by sum + norm_add (V4.1: 1e-20, deepseek4.md
     * §4.1.6 "V4.1 (reference)"). */
    float norm_add;
} og_router_op;

/* deepseek2's MLA attention in its absorbed form (deepseek2.md §3) for a chunk
 * of n_tok tokens (a prefill chunk or one decode token per sequence), over
 * caches that already hold the tokens' own rows: for token i, head h:
 * s_p = kq_scale * ([q_abs, q_pe] . cache row p) for p <= pos[i], softmax,
 * ctx = sum_p att_p * c_p (the first r_kv elements of the row). Scores use the
 * warp-order f32 dot (og_dot_f32_device) for a token with canonical[i], the
 * tier's f32 dot otherwise; the weighted sum is og_kernels.axpy_f32 in position
 * order. An f16 cache's rows are converted to f32 exactly on read (the same
 * dots and sums of the converted values). Each (token, head) is computed alone:
 * a token's bits never depend on the chunk (og_cpu_mla_attention). */
typedef struct og_mla_op {
    int64_t n_tok, n_head, r_kv, d_rope;
    float kq_scale;
    const float *q_abs;   /* device: token i head h at q_abs + h * qabs_head_stride + i * r_kv */
    int64_t qabs_head_stride;
    const float *q_pe;    /* device: token i head h at q_pe + i * qpe_tok_stride + h * qpe_head_stride, d_rope long */
    int64_t qpe_tok_stride, qpe_head_stride;
    float *ctx;           /* device out: token i head h at ctx + h * ctx_head_stride + i * r_kv */
    int64_t ctx_head_stride;
    og_kv_view kv;        /* the layer's cache (row_len = r_kv + d_rope), f32 or f16 */
    const int32_t *kv_first; /* host [n_tok]: kv.blocks index of each token's sequence's block 0 */
    const int32_t *pos;   /* host [n_tok]: each token's position (its row is in the cache) */
    const bool *canonical;/* host [n_tok], or NULL: all false */
} og_mla_op;

/* deepseek2's legacy attn_kv_b layout (files with attn_kv_b instead of
 * attn_k_b / attn_v_b, as many published V3 / R1 GGUFs): the absorbed MLA's
 * two per-head products with the dequantized kv_b rows (deepseek2.md §3;
 * kv_b [n_head (d_nope + d_v)][r_kv] f32: head h's d_nope key rows, then its
 * d_v value rows), in the arithmetic of the loops the forward pass ran on the
 * host before they were an op:
 *   absorb (expand false): y[h][i][r] = sum_{d < d_nope} kv_b[h (d_nope + d_v) + d][r] x[i][h][d],
 *                          a float sum from 0 in d order;
 *   expand (true):         y[i][h][j] = (float) sum_{r < r_kv} (double) kv_b[h (d_nope + d_v) + d_nope + j][r] x[h][i][r],
 *                          in double, r in order.
 * Token i head h of x starts at x + i * x_tok_stride + h * x_head_stride (floats),
 * of y likewise; y[..][r] / y[..][j] contiguous. Each (token, head) alone:
 * batch-invariant. */
typedef struct og_mla_kv_b_op {
    bool expand;
    int64_t n_tok, n_head, d_nope, d_v, r_kv;
    const float *kv_b;    /* device [n_head (d_nope + d_v)][r_kv] */
    const float *x;       /* device: absorb q_nope (d_nope per head), expand ctx (r_kv per head) */
    int64_t x_tok_stride, x_head_stride;
    float *y;             /* device: absorb q_abs (r_kv per head), expand o (d_v per head) */
    int64_t y_tok_stride, y_head_stride;
} og_mla_kv_b_op;

/* RMSNorm over rows, y_r = w * x_r / sqrt(mean(x_r^2) + eps) (og_rmsnorm); y may be x. */
typedef struct og_rmsnorm_op {
    og_rows y, x;     /* same n and n_rows */
    const float *w;   /* device [n], or NULL: no weight (og_rmsnorm_noweight; V4's per-head q and mHC norms) */
    float eps;
} og_rmsnorm_op;

/* RoPE/YaRN (og_rope_apply): for token t, n_vec vectors of rope.d_rope floats at
 * x + t * tok_stride + v * vec_stride, rotated for position pos[t]. */
typedef struct og_rope_op {
    og_rope rope;
    float *x;             /* device */
    int64_t n_tok, tok_stride;
    int32_t n_vec;
    int64_t vec_stride;
    const int32_t *pos;   /* host [n_tok] */
} og_rope_op;

/* Embedding lookup / gather rows: out[i] = dequantized row ids[i] of table (og_dequantize_row). */
typedef struct og_get_rows_op {
    og_weight table;      /* data: device */
    const int32_t *ids;   /* host [n], each in [0, table.n_rows) */
    int64_t n;
    float *out;           /* device [n][table.K] */
} og_get_rows_op;

/* Stores rows into a paged cache (og_kv_view): row i of src (f32) goes to
 * position pos[i] of the sequence whose block table starts at kv_first[i], each
 * value rounded once to nearest even into an f16 cache (og_fp32_to_fp16),
 * copied into an f32 one. */
typedef struct og_kv_store_op {
    og_kv_view kv;
    og_rows src;          /* n = kv.row_len */
    const int32_t *kv_first; /* host [src.n_rows] */
    const int32_t *pos;      /* host [src.n_rows] */
} og_kv_store_op;

/* The MoE combine (deepseek2.md §5, the dispatcher's sum as an op): for each
 * token t and each of its routes j in route order, y[t][i] = y[t][i] +
 * weights[j] * res[rows[j]][i] (the product rounded, then the sum: og_moe.h's
 * route-order sum, so the bits are the host's). y starts as the shared
 * experts' output (or zeros). */
typedef struct og_combine_op {
    float *y;                 /* device [n_tok][D], in place */
    const float *res;         /* device [n_res][D]: the routes' expert outputs */
    int64_t n_tok, n_res, D;
    const int32_t *route_off; /* host [n_tok + 1]: token t's routes are [route_off[t], route_off[t + 1]),
                                 non-decreasing from 0 */
    const int32_t *rows;      /* host [route_off[n_tok]]: each route's row of res, in [0, n_res) */
    const float *weights;     /* host [route_off[n_tok]] */
} og_combine_op;

/* ---- weights in device memory ---- */

/* One tensor's device copy: the host bytes [host, host + bytes) (the mapped
 * file) are at the device address dev. */
typedef struct og_dev_tensor {
    const void *host;
    uint64_t bytes;
    void *dev;
    const char *name; /* the GGUF tensor name (for messages) */
} og_dev_tensor;

/* The device copies of a model's non-expert weights (og_placement uploads them
 * when the forward pass runs on a device whose memory is not the host's): a
 * table keyed by tensor, sorted by host address, ranges disjoint. The forward
 * pass swaps each weight's host address for its copy's before issuing an op,
 * so no host address of a weight ever reaches the device. */
typedef struct og_dev_weights {
    const og_dev_tensor *t; /* [n] */
    size_t n;
} og_dev_weights;

/* The device address of the host bytes [p, p + bytes) when one tensor's copy
 * holds all of them (p may point inside it: a slice), else NULL (cannot fail
 * otherwise; O(log n)). */
const void *og_dev_weights_find(const og_dev_weights *w, const void *p, uint64_t bytes);

/* ---- deepseek4's ops (deepseek4.md §4.1-4.2; src/backend/ds4_ops.c) ---- */

/* mHC mixes (deepseek4.md §4.1.3 step 1-2) from m = fn^T rmsnorm(flat S), the
 * product the forward pass computes before (n_mix values per token):
 *   pre[k]  = sigmoid(m[k] scale[0] + base[k]) + eps               k < n_hc
 *   post[k] = 2 sigmoid(m[n_hc + k] scale[1] + base[n_hc + k])
 *   C[a][b] = m[2 n_hc + a + n_hc b] scale[2] + base[...], then Sinkhorn:
 *             softmax over a for each b, + eps; rows a / (sum_b + eps); then
 *             sinkhorn_iters - 1 times: columns b / (sum_a + eps), rows a / (sum_b + eps).
 * head (the output head's mixes, §4.2 step 3): n_mix = n_hc, only pre with scale[0].
 * comb keeps m's layout: C[a][b] at comb[t][a + n_hc b] (a: output copy). */
typedef struct og_hc_mix_op {
    const float *mix;      /* device [n_tok][n_mix], n_mix = head ? n_hc : (2 + n_hc) n_hc */
    int64_t n_tok;
    int32_t n_hc;          /* copies of the stream, 1..16 */
    bool head;
    const float *scale;    /* device [3] ([1] for the head) */
    const float *base;     /* device [n_mix] */
    float eps;             /* hyper_connection.epsilon */
    int32_t sinkhorn_iters;/* >= 1 (unused for the head) */
    float *pre;            /* device [n_tok][n_hc] out */
    float *post;           /* device [n_tok][n_hc] out (not for the head) */
    float *comb;           /* device [n_tok][n_hc * n_hc] out (not for the head) */
} og_hc_mix_op;

/* mHC collapse and expand (deepseek4.md §4.1.3 steps 3-4) over streams
 * s [n_tok][n_hc][n_embd]: collapse x[t] = sum_k w[t][k] s[t][k] (k in order);
 * expand (in place) s'[t][a] = post[t][a] y[t] + sum_b C[t][a][b] s[t][b]
 * (b in order after the post term). */
typedef struct og_hc_op {
    int64_t n_tok, n_embd;
    int32_t n_hc;          /* 1..16 */
    float *s;              /* device [n_tok][n_hc][n_embd] */
    float *x;              /* device [n_tok][n_embd]: collapse's output, expand's y */
    const float *w;        /* device [n_tok][n_hc]: collapse's weights, expand's post */
    const float *comb;     /* device [n_tok][n_hc * n_hc] (expand), og_hc_mix_op's layout */
} og_hc_op;

/* The simulated low-precision rounding V4 was trained with (QAT, deepseek4.md
 * §3 table, §4.2, §4.2.1), on each row's dims [0, n_round):
 *  FP8: blocks of 64 (the last one shorter when n_round is not whole blocks), scale 2^ceil(log2(max(amax, 1e-4) / 448)), values clamped
 *       to +-448 and rounded to the nearest E4M3 value (ties to even);
 *  FP4_HADAMARD: the n_round dims rotated by the Walsh-Hadamard matrix of that
 *       size (Sylvester order, unnormalized butterfly times 1/sqrt(n_round);
 *       V4's indexer: 128), then blocks of 32,
 *       scale 2^ceil(log2(amax / 6)), values rounded to the nearest E2M1 value
 *       {0, 0.5, 1, 1.5, 2, 3, 4, 6} (ties to even), clamped to +-6. */
/*  HADAMARD: the rotation of FP4_HADAMARD alone (the rounding off: a score
 *       q . k is unchanged, but a later F16 rounding sees the rotated values);
 *  F16: each of the n_round values rounded to the nearest f16 (ties to even),
 *       as a cache stored in f16 holds it. */
/* V4.1's options (deepseek4.md §3 table "KV numerics", §6.1 unverified; the
 * lead's decision 2 for deepseek41):
 *  FP8 with block 32: the window rows;
 *  FP4: blocks of `block` (0: 32), scale 2^ceil(log2(amax / 6)), E2M1 as
 *       above, no rotation (the indexer's queries and keys);
 *  FP4_E4M3: blocks of `block` (0: 16), scale = amax / 6 rounded to the
 *       nearest E4M3 value (og's round_e4m3, clamped to 448; NVFP4's block
 *       scale), values x / scale rounded to E2M1 (clamped to +-6) times the
 *       scale; a block whose scale rounds to 0 becomes 0 (the compressed rows,
 *       after RoPE). A block of all zeros stays zeros in every kind. */
typedef enum og_qat_kind {
    OG_QAT_NONE = 0, OG_QAT_FP8, OG_QAT_FP4_HADAMARD, OG_QAT_HADAMARD, OG_QAT_F16, OG_QAT_FP4, OG_QAT_FP4_E4M3
} og_qat_kind;
typedef struct og_qat_op {
    og_rows x;             /* in place */
    og_qat_kind kind;
    int64_t n_round;       /* <= x.n; FP4_HADAMARD, HADAMARD: a power of two in [32, 4096] */
    int32_t block;         /* FP8, FP4, FP4_E4M3: elements per scale (0: 64, 32, 16); the last block may be short */
} og_qat_op;

/* One step of V4's KV compressors (deepseek4.md §4.2.1) for n_tok tokens in
 * batch order (a sequence's tokens in position order): token t stores its kv
 * and score rows in its sequence's state, slot lanes * ... below; when pos + 1
 * is a multiple of ratio it emits a row to out[t]:
 *   plain (ratio 128): row[j] = sum_i softmax_i(score_i[j]) kv_i[j] over the
 *     window's ratio tokens;
 *   overlap (ratio 4, rows of 2 width): row[j] = one softmax over the previous
 *     window's tokens with lane A (channel j) and the current window's with
 *     lane B (channel width + j); the first window has no previous one (scores
 *     -inf); after emitting, the current window's slots become the previous'.
 * Then RMSNorm with norm, RoPE of the last rope.d_rope dims at position
 * pos + 1 - ratio, then qat on dims [0, qat_n), then (round_f16) every value
 * to f16 (og_qat_op's F16: a cache stored in f16). The softmax sums in double,
 * each channel alone: a row's bits depend only on its window. */
typedef struct og_compress_op {
    int64_t n_tok, width;  /* width: the emitted row's length */
    int32_t ratio;         /* tokens per row, 1..1024 */
    bool overlap;
    const float *kv;       /* device [n_tok][lanes width] (lanes = overlap ? 2 : 1) */
    const float *score;    /* device [n_tok][lanes width], the APE row added */
    float *const *state;   /* host [n_tok]: device address of the token's sequence's state,
                              [2][slots][lanes width] (kv, then score), slots = overlap ? 2 ratio : ratio */
    const int32_t *pos;    /* host [n_tok] */
    float *const *out;     /* host [n_tok]: device row of width floats, or NULL when the token emits none */
    const float *norm;     /* device [width] */
    float eps;
    og_rope rope;          /* rope.d_rope <= width */
    og_qat_kind qat;
    int64_t qat_n;
    bool round_f16;
} og_compress_op;

/* V4's lightning indexer (deepseek4.md §4.2.2): for token i with n_keys[i] >
 * top_k visible compressed rows, score(c) = sum_h w[i][h] max(0, q[i][h] . key_c)
 * (heads in order; the dot canonical when canonical[i], og_dot_f32_device, else
 * the tier's f32 dot), and sel[i] receives the top_k best c (ties: the lower c),
 * in ascending c. Tokens with n_keys[i] <= top_k are left alone (they see every
 * row). */
typedef struct og_indexer_op {
    int64_t n_tok, n_head, d_head;
    int32_t top_k;           /* >= 1 */
    const float *q;          /* device [n_tok][n_head][d_head] */
    const float *w;          /* device [n_tok][n_head] (the 1/sqrt(d_head n_head) included) */
    og_kv_view keys;         /* the layer's indexer keys (row_len d_head) */
    const int32_t *key_first;/* host [n_tok]: keys.blocks index of the token's sequence's block 0 */
    const int32_t *n_keys;   /* host [n_tok] */
    int32_t *sel;            /* device [n_tok][top_k] out */
    const bool *canonical;   /* host [n_tok] or NULL */
    /* V4.1's candidate blocks (CSA2, deepseek4.md §4.3.3 "Indexer"): the keys
     * cut into blocks of cand_block positions (block b: keys [b cand_block,
     * (b+1) cand_block)); a token with more than cand_block x cand_topk keys:
     *  cand_out (the candidate source): the block holding its newest key, then
     *    the cand_topk - 1 best other blocks by block score (the max of its
     *    keys' scores; ties: the lower block), written in ascending order;
     *    tokens with fewer keys get cand_out[i][0] = -1 (every block: the
     *    lead's decision 6);
     *  cand_in (a reindex layer, the candidate source's cand_out of the same
     *    token): scores of keys outside the listed blocks are -inf before the
     *    top_k (a list starting with -1: no mask).
     * Both NULL (V4): neither. cand_in's blocks must lie below the token's keys. */
    int32_t cand_block, cand_topk; /* >= 1 each when either list is set */
    int32_t *cand_out;             /* device [n_tok][cand_topk] out, or NULL */
    const int32_t *cand_in;        /* device [n_tok][cand_topk], or NULL */
    /* V4.1: every token gets sel[i]: the top_k best of its eligible keys (a
     * -inf score is never selected, so a mask can leave fewer), or all its
     * keys while they fit and no mask is on; ascending, then -1 to the end.
     * Pair with og_sink_attn_op.sel_every. false (V4): only tokens with more
     * than top_k keys get sel[i], always top_k entries. */
    bool sel_all;
} og_indexer_op;

/* V4's attention with a learned sink over a set of rows that are both K and V
 * (deepseek4.md §4.1.4): for token i, head h, over the rows R_i (its raw rows,
 * then its compressed ones in ascending c): s_r = kq_scale q_h . k_r, M = max(s,
 * sink_h), o_h = sum_r exp(s_r - M) k_r / (exp(sink_h - M) + sum_r exp(s_r -
 * M)). Raw rows: rows[row_off[i] .. row_off[i + 1]) (device addresses). Compressed
 * rows: c < n_comp[i] of the view, or, when sel is set and n_comp[i] > top_k,
 * the top_k rows sel[i][..]. Scores as og_indexer_op's dots, the weighted sum
 * og_kernels.axpy_f32 in row order; each (token, head) alone. */
typedef struct og_sink_attn_op {
    int64_t n_tok, n_head, d_head;
    float kq_scale;
    const float *q;            /* device [n_tok][n_head][d_head] */
    float *o;                  /* device [n_tok][n_head][d_head] out */
    const float *sinks;        /* device [n_head] */
    const float *const *rows;  /* host [row_off[n_tok]] */
    const int64_t *row_off;    /* host [n_tok + 1], non-decreasing from 0 */
    og_kv_view comp;           /* compressed rows (row_len d_head); comp.n_blocks 0: none */
    const int32_t *comp_first; /* host [n_tok] (with comp) */
    const int32_t *n_comp;     /* host [n_tok] (with comp) */
    const int32_t *sel;        /* device [n_tok][top_k] (og_indexer_op's) or NULL */
    int32_t top_k;
    const bool *canonical;     /* host [n_tok] or NULL */
    bool sel_every;            /* sel holds every token's rows (og_indexer_op.sel_all): up to top_k, a
                                  negative entry ends the list; false: sel only when n_comp[i] > top_k */
} og_sink_attn_op;

/* The most rows any token of op attends to (its raw rows plus its compressed
 * ones: all n_comp, or top_k where the selection applies), at least 1: the
 * size of a token-head's score row. Cannot fail (ds4_ops.c). */
int64_t og_sink_attn_rows_most(const og_sink_attn_op *op);

/* ---- deepseek41's op (deepseek4.md §4.3.2; ds4_ops.c) ---- */

/* V4.1's Engram gates, in place on the streams s [n_tok][n_hc][n_embd], from
 * the projection kv = engram_wkv . emb of the token's 24 gathered table rows
 * (the forward pass computes it before): for each copy k, with rms(v) = v /
 * sqrt(mean(v^2) + eps) (no weight) and key_k = kv[k N, (k+1) N), value =
 * kv[n_hc N, (n_hc+1) N):
 *   d   = sum_i rms(s[k])_i rms(key_k)_i q_w[k][i] k_w[k][i] / sqrt(N)  (in double, i in order)
 *   g   = sigmoid(sign(d) sqrt(max(|d|, 1e-6)))
 *   s[k] += g value.
 * Each token alone (batch-invariant). */
typedef struct og_engram_op {
    int64_t n_tok, n_embd;
    int32_t n_hc;          /* 1..16 */
    float *s;              /* device [n_tok][n_hc][n_embd], in place */
    const float *kv;       /* device [n_tok][(n_hc + 1) n_embd] */
    const float *q_w, *k_w;/* device [n_hc][n_embd] (engram_q, engram_k: ne [N, n_hc]) */
    float eps;             /* the model's RMSNorm eps (V4.1 1e-20) */
} og_engram_op;

typedef struct og_device_ops {
    const char *name;
    /* free and total device memory, bytes */
    og_status (*mem_info)(og_device *d, uint64_t *free_bytes, uint64_t *total_bytes);
    /* bytes of device memory, 64-byte aligned; OG_ERR_NOMEM with the sizes when it does not fit */
    og_status (*alloc)(og_device *d, uint64_t bytes, void **out, char *err, size_t errlen);
    /* NULL is fine; no op still queued may use p */
    void (*free)(og_device *d, void *p);
    /* a new stream; OG_ERR_NOMEM, OG_ERR_RANGE beyond the device's streams */
    og_status (*stream_create)(og_device *d, og_stream **out, char *err, size_t errlen);
    /* waits for the stream's work, then releases it; NULL is fine */
    void (*stream_destroy)(og_device *d, og_stream *s);
    /* issues a copy of bytes from host src to device dst on s (counted in pcie_bytes) */
    og_status (*copy_to_device)(og_device *d, og_stream *s, void *dst, const void *src, uint64_t bytes, char *err,
                                size_t errlen);
    /* issues a copy of bytes from device src to host dst on s */
    og_status (*copy_to_host)(og_device *d, og_stream *s, void *dst, const void *src, uint64_t bytes, char *err,
                              size_t errlen);
    /* issues the routed-expert op on s. Errors at once: OG_ERR_INVALID_ARG (a slot
     * outside n_slots, a group without rows, a negative clamp), OG_ERR_UNSUPPORTED (no kernels for
     * the types on this device); a product that fails later fails the stream */
    og_status (*experts)(og_device *d, og_stream *s, const og_expert_op *op, char *err, size_t errlen);
    /* *ev completes when everything issued on s before it has completed */
    og_status (*event_record)(og_device *d, og_stream *s, og_event *ev, char *err, size_t errlen);
    /* later work on s starts only once ev completed (ev 0: no wait) */
    og_status (*stream_wait)(og_device *d, og_stream *s, og_event ev, char *err, size_t errlen);
    /* the host blocks until ev completed; the error of a failed op before it, if any */
    og_status (*event_wait)(og_device *d, og_event ev, char *err, size_t errlen);
    /* whether ev completed (never blocks) */
    bool (*event_done)(og_device *d, og_event ev);
    void (*destroy)(og_device *d);

    /* ---- the forward pass's ops (above). Each issues work on s and returns at
     * once; errors at issue: OG_ERR_INVALID_ARG (a shape or argument the
     * descriptor's comment excludes, named in err), OG_ERR_UNSUPPORTED (no
     * kernel for a type), OG_ERR_NOMEM; a kernel that fails later fails the
     * stream (event_wait returns it). ---- */
    /* n_jobs in [1, 256] products (og_cpu_matmul_multi: y = x W^T with each
     * job's numerics; w->data, x and y device addresses; jobs host, copied) */
    og_status (*matmul)(og_device *d, og_stream *s, const og_matmul_job *jobs, int n_jobs, char *err, size_t errlen);
    og_status (*rmsnorm)(og_device *d, og_stream *s, const og_rmsnorm_op *op, char *err, size_t errlen);
    og_status (*rope)(og_device *d, og_stream *s, const og_rope_op *op, char *err, size_t errlen);
    /* in place, per row (og_softmax) */
    og_status (*softmax)(og_device *d, og_stream *s, const og_rows *x, char *err, size_t errlen);
    /* out[i] = silu(gate[i]) * up[i], i < n, device f32 (og_swiglu; clamp > 0: og_swiglu_clamp); out may alias */
    og_status (*swiglu)(og_device *d, og_stream *s, float *out, const float *gate, const float *up, int64_t n,
                        float clamp, char *err, size_t errlen);
    og_status (*router)(og_device *d, og_stream *s, const og_router_op *op, char *err, size_t errlen);
    og_status (*mla_attention)(og_device *d, og_stream *s, const og_mla_op *op, char *err, size_t errlen);
    /* y[i] = a[i] + b[i], i < n, device f32; y may alias a or b */
    og_status (*add)(og_device *d, og_stream *s, float *y, const float *a, const float *b, int64_t n, char *err,
                     size_t errlen);
    /* y[i] = x[i] * scale, i < n, device f32; y may be x */
    og_status (*scale)(og_device *d, og_stream *s, float *y, const float *x, int64_t n, float scale, char *err,
                       size_t errlen);
    og_status (*copy)(og_device *d, og_stream *s, const og_copy_op *op, char *err, size_t errlen);
    og_status (*get_rows)(og_device *d, og_stream *s, const og_get_rows_op *op, char *err, size_t errlen);
    og_status (*kv_store)(og_device *d, og_stream *s, const og_kv_store_op *op, char *err, size_t errlen);
    /* deepseek4's (above; NULL on a device without them: the forward pass then
     * answers OG_ERR_UNSUPPORTED, and --device-forward is refused naming the op) */
    og_status (*hc_mix)(og_device *d, og_stream *s, const og_hc_mix_op *op, char *err, size_t errlen);
    og_status (*hc_collapse)(og_device *d, og_stream *s, const og_hc_op *op, char *err, size_t errlen);
    og_status (*hc_expand)(og_device *d, og_stream *s, const og_hc_op *op, char *err, size_t errlen);
    og_status (*qat)(og_device *d, og_stream *s, const og_qat_op *op, char *err, size_t errlen);
    og_status (*compress)(og_device *d, og_stream *s, const og_compress_op *op, char *err, size_t errlen);
    og_status (*indexer)(og_device *d, og_stream *s, const og_indexer_op *op, char *err, size_t errlen);
    og_status (*sink_attention)(og_device *d, og_stream *s, const og_sink_attn_op *op, char *err, size_t errlen);
    /* deepseek41's (above; NULL on a device without it: its forward pass then
     * answers OG_ERR_UNSUPPORTED). V4.1 also runs the ops above: its
     * ratio-2 / ratio-1 compressors are og_compress_op steps (plain, no APE,
     * rope.d_rope 0: RoPE and QAT follow as their own ops, so the index key
     * reads the latent before RoPE), its candidate blocks are og_indexer_op's
     * cand_* fields, its lagged mHC is hc_collapse with the previous
     * sublayer's pre */
    og_status (*engram)(og_device *d, og_stream *s, const og_engram_op *op, char *err, size_t errlen);
    /* deepseek2's legacy attn_kv_b products (og_mla_kv_b_op; NULL on the cuda
     * device for now: a legacy file's forward pass then answers OG_ERR_UNSUPPORTED) */
    og_status (*mla_kv_b)(og_device *d, og_stream *s, const og_mla_kv_b_op *op, char *err, size_t errlen);
    /* the MoE combine (og_combine_op; the dispatcher's, when the forward pass is on this device) */
    og_status (*moe_combine)(og_device *d, og_stream *s, const og_combine_op *op, char *err, size_t errlen);
} og_device_ops;

struct og_device {
    const og_device_ops *ops;
    uint64_t pcie_bytes; /* host -> device bytes issued so far (read and written by the issuing thread) */
};

/* The `cpu` device with budget bytes of "device memory" (allocated on demand,
 * refused beyond the budget). Each stream has its own thread that runs its work
 * in order; the expert op runs on a pool of n_threads threads (the stream's
 * thread and n_threads - 1 workers, one op at a time across streams) with the
 * kernels kern (copied; NULL: the device has no compute ops, OG_ERR_UNSUPPORTED).
 * n_threads in [1, 4096]. Errors: OG_ERR_INVALID_ARG, OG_ERR_NOMEM. */
og_status og_device_cpu_create(uint64_t budget, int n_threads, const og_kernels *kern, og_device **out, char *err,
                               size_t errlen);

/* The default --device-threads when the CPU plays the device: every CPU this
 * process may run on, as the host pool's default. The host pool keeps its
 * threads (it still runs everything but the resident experts); the two compute
 * at once only while a MoE layer is split between them, and then the OS shares
 * the cores, so with every expert resident the device's part runs as fast as the
 * host pool ran it before, and with a mix neither waits on a smaller share.
 * Without --vram no device exists and nothing changes. */
int og_device_cpu_default_threads(void);

/* Counts bytes of host memory that the cpu device uses in place as device
 * memory (the model's mapped non-expert weights: its addresses are host
 * addresses, so copying them would only double the RAM) in its budget: +bytes
 * when taken, -bytes when given back. OG_ERR_NOMEM (with the sizes) when they
 * do not fit, OG_ERR_INVALID_ARG when d is not a cpu device or more is given
 * back than taken. */
og_status og_device_cpu_alias(og_device *d, int64_t bytes, char *err, size_t errlen);

/* ---- test hooks of the cpu device (tests prove ordering and overlap with
 * them, never with timing) ---- */

typedef enum og_cpu_op_kind {
    OG_CPU_OP_COPY_TO_DEVICE = 0,
    OG_CPU_OP_COPY_TO_HOST,
    OG_CPU_OP_EXPERTS,
    OG_CPU_OP_RECORD,
    OG_CPU_OP_WAIT,
    OG_CPU_OP_COMPUTE, /* any of the forward pass's ops (matmul ... kv_store) */
} og_cpu_op_kind;

/* Called on the stream's thread before (done false) and after (done true) each
 * op runs: stream is the stream's creation index (0, 1, ...). */
typedef void (*og_cpu_trace_fn)(void *ctx, int stream, og_cpu_op_kind kind, bool done);

/* Sets (or with fn NULL clears) the trace callback. Call while no work is queued.
 * OG_ERR_INVALID_ARG when d is not a cpu device. */
og_status og_device_cpu_trace(og_device *d, og_cpu_trace_fn fn, void *ctx);
/* The next op of this kind to start, on any stream, is held before it runs until
 * og_device_cpu_release; its stream runs nothing meanwhile. OG_ERR_INVALID_ARG
 * when d is not a cpu device. */
og_status og_device_cpu_hold(og_device *d, og_cpu_op_kind kind);
/* Blocks until an op is held. */
og_status og_device_cpu_wait_held(og_device *d);
/* Lets the held op (or the armed hold, if none is held yet) go. */
og_status og_device_cpu_release(og_device *d);
/* Blocks until stream s can make no progress: its queue is empty, it waits on an
 * event that has not completed, or its op is held. */
og_status og_device_cpu_settle(og_device *d, og_stream *s);

/* ---- the kernels the cpu device's ops run, callable on host memory ---- */

/* og_router_op on host memory, one token at a time (the forward pass's router
 * before it became an op). Errors: OG_ERR_INVALID_ARG (k, groups or gating
 * outside the op's comment), OG_ERR_NOMEM. */
og_status og_cpu_route(const og_router_op *op);
/* The same with its per-call scores ([2 n_expert] floats) in ws, grown as
 * needed and kept (NULL: allocated for the call). Same errors. */
og_status og_cpu_route_ws(const og_router_op *op, og_buf *ws);

/* og_mla_op on host memory, the (token, head) pairs shared out over pool (NULL:
 * the calling thread); kern gives the f32 dots and axpy. Errors:
 * OG_ERR_INVALID_ARG (a position outside its block table, a row_len other than
 * r_kv + d_rope), OG_ERR_NOMEM. */
og_status og_cpu_mla_attention(const og_kernels *kern, og_pool *pool, const og_mla_op *op);
/* The same with its per-thread scratch ([pool threads][q (max position + 1 +
 * r_kv + d_rope) + block_rows (r_kv + d_rope)] floats: the tiled path's scores
 * and queries of q = min(64, a thread's share of the n_tok n_head pairs), a
 * widened block) in ws, grown as needed and kept (NULL: allocated for the
 * call), so that a call no larger than one before allocates nothing. Same bits
 * and errors. One call at a time per ws. */
og_status og_cpu_mla_attention_ws(const og_kernels *kern, og_pool *pool, const og_mla_op *op, og_buf *ws);
/* The per-pair path that og_cpu_mla_attention_ws's tiled one reproduces bit
 * for bit (the reference its test and `onegpu bench attention` compare with;
 * also the path taken when kern has no dot_f32_device_tile / axpy_f32_rows):
 * each (token, head) pair walks its rows alone, ATT_HEADS heads of a token
 * sharing each widened block. Scratch [pool threads][8 (max position + 1 + r_kv
 * + d_rope) + block_rows (r_kv + d_rope)] floats in ws. Same errors. */
og_status og_cpu_mla_attention_pairs_ws(const og_kernels *kern, og_pool *pool, const og_mla_op *op, og_buf *ws);

/* A device whose streams run each op on the calling thread at issue, with the
 * caller's pool and kernels (both borrowed: they must outlive the device), and
 * whose memory is host memory without a budget: the forward pass's device when
 * the host plays it (no --vram), at the speed of calling the kernels directly.
 * Events complete at once; copies are counted in pcie_bytes. Errors:
 * OG_ERR_INVALID_ARG (kern NULL), OG_ERR_NOMEM. */
og_status og_device_host_create(og_pool *pool, const og_kernels *kern, og_device **out, char *err, size_t errlen);

static inline void og_device_destroy(og_device *d) {
    if (d) d->ops->destroy(d);
}

#endif
