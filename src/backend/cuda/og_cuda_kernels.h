/* The CUDA kernels of the cuda device (kernels.cu), as a C API for the host
 * code in device_cuda.c. Every launcher issues its work on stream s and returns
 * the launch's cudaError_t (cudaGetLastError after it; a kernel that fails later
 * fails the stream). Device pointers throughout; shapes in the comments. */
#ifndef OG_CUDA_KERNELS_H
#define OG_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "og_gguf.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One expert's run of activation rows in a batched product. */
typedef struct og_cuda_group {
    int32_t slot;   /* weights at base + slot * slot_bytes + off */
    int32_t row0;   /* first activation / output row */
    int32_t n_rows; /* >= 1 */
} og_cuda_group;

#define OG_CUDA_MAX_GROUPS 128 /* per launch (a kernel parameter: 1.5 KiB of the 4 KiB) */

typedef struct og_cuda_groups {
    og_cuda_group g[OG_CUDA_MAX_GROUPS];
    int32_t n; /* 1 ..= OG_CUDA_MAX_GROUPS */
} og_cuda_groups;

/* Once per device (current): lets the products use up to this much dynamic shared memory. */
cudaError_t og_cuda_kernels_init(void);

/* Whether weight type t has a canonical product kernel (Q8_0, Q4_0, Q5_0, Q2_K,
 * Q3_K, Q4_K, Q5_K, Q6_K, IQ2_XXS, MXFP4). */
int og_cuda_has_type(og_ggml_type t);

/* Bytes of one activation row of K elements quantized for weight type t (its
 * vec_dot_type), 0 when t has no kernel. */
size_t og_cuda_act_row_bytes(og_ggml_type t, int64_t K);

/* Largest K the products take for type t (the activation row and 4 warps' 32
 * weight blocks live in shared memory). */
int64_t og_cuda_max_k(og_ggml_type t);

/* q[r] = quantize_act(x[r]) for r < n_rows: x [n_rows][K] f32, q [n_rows][act row
 * bytes] (og_quant_canon.h's quantizers, the host tiers' bytes). */
cudaError_t og_cuda_quantize_act(og_ggml_type t, const float *x, void *q, int64_t n_rows, int64_t K,
                                 cudaStream_t s);

/* Batched canonical products: for each group g and each of its rows r, output
 * o < n_out: y[(g.row0 + r) * y_stride + o] = vec_dot_canonical(weight row o of
 * the matrix at base + g.slot * slot_bytes + off (rows row_bytes apart), xq row
 * g.row0 + r). K a multiple of t's block, at most og_cuda_max_k(t). */
cudaError_t og_cuda_products(og_ggml_type t, const void *base, uint64_t slot_bytes, uint64_t off, uint64_t row_bytes,
                             int64_t n_out, int64_t K, const og_cuda_groups *groups, const void *xq, float *y,
                             int64_t y_stride, cudaStream_t s);

/* h[i] = silu(g[i]) * u[i] for i < n (clamp > 0: V4's clamped SwiGLU), og_quant_canon.h's functions. */
cudaError_t og_cuda_swiglu(float *h, const float *g, const float *u, int64_t n, float clamp, cudaStream_t s);

/* ---- the forward pass's ops (og_device.h; device_cuda.c checks the shapes
 * before it calls these). "Bitwise" below: the cpu device's bits for the same
 * inputs, every float operation the single IEEE operation the host performs in
 * the host's order (tests/unit/test_cuda.c compares them on a GPU). ---- */

/* y[a * y_stride + o] = og_dot_f32_device(row o of w widened to f32, x[a]) for a
 * < m, o < n_out: float weight types F32, F16, BF16 (rows row_bytes apart, K
 * elements), one warp per output in the warp order the host's dot emulates:
 * bitwise. */
cudaError_t og_cuda_products_f(og_ggml_type t, const void *w, uint64_t row_bytes, int64_t n_out, int64_t K,
                               const float *x, int64_t m, float *y, int64_t y_stride, cudaStream_t s);

/* og_rmsnorm over n_rows rows of n: the squares summed in double in index
 * order (one thread), 1 / sqrt in double, then y = w * (x * scale): bitwise.
 * w NULL: no weight. y may be x. */
cudaError_t og_cuda_rmsnorm(float *y, int64_t y_stride, const float *x, int64_t x_stride, const float *w, int64_t n,
                            int64_t n_rows, float eps, cudaStream_t s);

/* og_rope_apply with the host's cos and sin: cs [n_tok][d_rope / 2][2]
 * (og_rope_cos_sin of each token's position), n_vec vectors per token: bitwise. */
cudaError_t og_cuda_rope(float *x, int64_t n_tok, int64_t tok_stride, int32_t n_vec, int64_t vec_stride, int32_t d_rope,
                         const float *cs, cudaStream_t s);

/* og_softmax in place over n_rows rows of n, stride apart: the max, e^(x - max)
 * as the correctly rounded float of double exp (libm's expf is correctly
 * rounded but for rare inputs: at most 1 ulp apart where either misrounds a
 * near-tie), the sum in double in index order, times (float)(1 / sum). */
cudaError_t og_cuda_softmax(float *x, int64_t n, int64_t n_rows, int64_t stride, cudaStream_t s);

/* y[i] = a[i] + b[i] (add) or a[i] * f (scale), i < n: bitwise. */
cudaError_t og_cuda_add(float *y, const float *a, const float *b, int64_t n, cudaStream_t s);
cudaError_t og_cuda_scale(float *y, const float *a, float f, int64_t n, cudaStream_t s);

/* og_router_op (og_cpu_route's steps, one thread per token): scores, group
 * limit, top-k (ties to the lower index), normalized weights. tokens: device
 * [n_tok] (hash routing) or NULL; work: device [n_tok][2 n_expert] floats.
 * Bitwise but for the exp of gatings 1-3 (og_cuda_softmax's note). */
typedef struct og_cuda_router {
    const float *logits, *bias;
    int64_t n_tok;
    int32_t n_expert, k, gating, n_group, n_group_used, norm;
    float scale, norm_add;
    const int32_t *hash_table, *tokens;
    int64_t hash_rows;
    int32_t *ids;
    float *weights, *work;
} og_cuda_router;
cudaError_t og_cuda_route(const og_cuda_router *r, cudaStream_t s);

/* og_mla_op on device memory: per (head, token) one thread block; scores in
 * og_dot_f32_device's warp order times kq_scale (bitwise with the canonical
 * host), the softmax of og_cuda_softmax, ctx = sum_p att_p c_p in position
 * order (each product rounded, then the sum). blocks, kv_first, pos: device
 * copies of the op's host arrays; scores: device [n_tok][n_head][score_stride]. */
typedef struct og_cuda_mla {
    int64_t n_tok, n_head, r_kv, d_rope;
    float kq_scale;
    const float *q_abs;
    int64_t qabs_head_stride;
    const float *q_pe;
    int64_t qpe_tok_stride, qpe_head_stride;
    float *ctx;
    int64_t ctx_head_stride;
    const void *const *blocks;
    int32_t block_rows, f16;
    int64_t offset, row_stride;
    const int32_t *kv_first, *pos;
    float *scores;
    int64_t score_stride;
} og_cuda_mla;
cudaError_t og_cuda_mla_attention(const og_cuda_mla *a, cudaStream_t s);

/* og_copy_op (strides in bytes). */
cudaError_t og_cuda_copy(void *dst, const void *src, uint64_t row_bytes, uint64_t n_rows, uint64_t n_mats,
                         uint64_t dst_row, uint64_t dst_mat, uint64_t src_row, uint64_t src_mat, cudaStream_t s);

/* out[i] = row ids[i] of table dequantized (og_quant_canon.h's og_canon_deq_*,
 * F32 / F16 / BF16 widened): bitwise with og_dequantize_row. ids device [n]. */
cudaError_t og_cuda_get_rows(og_ggml_type t, const void *table, uint64_t row_bytes, int64_t K, const int32_t *ids,
                             int64_t n, float *out, cudaStream_t s);

/* og_kv_store_op: row i of src to position pos[i] of the sequence whose block
 * table starts at blocks[kv_first[i]] (f16: og_canon_f2h, the host's rounding). */
cudaError_t og_cuda_kv_store(const void *const *blocks, int32_t block_rows, int64_t offset, int64_t row_stride,
                             int64_t row_len, int32_t f16, const float *src, int64_t src_stride, int64_t n_rows,
                             const int32_t *kv_first, const int32_t *pos, cudaStream_t s);

/* og_combine_op: y[t][i] += w_j res[rows_j][i] over token t's routes in order
 * (each product rounded, then the sum): bitwise. route_off, rows, weights: device. */
cudaError_t og_cuda_combine(float *y, const float *res, int64_t n_tok, int64_t D, const int32_t *route_off,
                            const int32_t *rows, const float *weights, cudaStream_t s);

/* ---- deepseek4's and deepseek41's ops (og_device.h; device_cuda.c checks them
 * with ds4_ops.c's og_ds4_cop_make first). Their arithmetic is og_ds4_canon.h's,
 * run on the CPU by tests/unit/test_ds4_canon.c against ds4_ops.c: bitwise but
 * for e^x (that header's comment: at most 1 ulp in an exp, rarely). ---- */

/* og_hc_mix_op, one thread per token. */
cudaError_t og_cuda_hc_mix(const float *mix, int64_t n_tok, int32_t n_hc, int head, const float *scale,
                           const float *base, float eps, int32_t sinkhorn_iters, float *pre, float *post, float *comb,
                           cudaStream_t s);

/* og_hc_op: collapse (expand 0: x = sum_k w_k s_k) or expand in place (x is y,
 * w is post), one thread per (token, element): bitwise. */
cudaError_t og_cuda_hc(int expand, float *sv, float *x, const float *w, const float *comb, int64_t n_tok,
                       int64_t n_embd, int32_t n_hc, cudaStream_t s);

/* og_qat_op on n_rows rows stride floats apart (kind: og_qat_kind's value):
 * bitwise (no exp). */
cudaError_t og_cuda_qat(float *x, int64_t n_rows, int64_t stride, int kind, int64_t n_round, int32_t block,
                        cudaStream_t s);

/* One og_compress_op step. state, pos, out: device copies of the op's host
 * arrays; emit [n_emit]: the tokens with an output row, in token order; snap:
 * device [n_emit][2][n_row][width] (n_row = overlap ? 2 ratio : ratio); cs:
 * device [n_emit][d_rope / 2][2], og_rope_cos_sin of each emitted row's
 * position. The sums are double (exp's note), the rest bitwise. */
typedef struct og_cuda_compress {
    int64_t n_tok, width;
    int32_t ratio, overlap;
    const float *kv, *score;
    float *const *state;
    const int32_t *pos;
    float *const *out;
    const int32_t *emit;
    int64_t n_emit;
    float *snap;
    const float *norm;
    float eps;
    int32_t d_rope;
    const float *cs;
    int32_t qat;
    int64_t qat_n;
    int32_t round_f16;
} og_cuda_compress;
cudaError_t og_cuda_compress_step(const og_cuda_compress *c, cudaStream_t s);

/* og_indexer_op (n_head <= 64, n_tok <= 65535): scores one warp per (token,
 * key) in og_dot_f32_device's order (a fork token too: the GPU has one order),
 * then per token the top_k by rank, ascending. blocks, key_first, n_keys:
 * device copies; scores, bscores: device [n_tok][max_keys] floats, flags
 * [n_tok][max_keys] bytes (max_keys >= every n_keys, >= 1). Bitwise (no exp). */
typedef struct og_cuda_indexer {
    int64_t n_tok, n_head, d_head;
    int32_t top_k;
    const float *q, *w;
    const void *const *blocks;
    int32_t block_rows;
    int64_t offset, row_stride;
    const int32_t *key_first, *n_keys;
    int32_t *sel;
    int32_t cand_block, cand_topk;
    int32_t *cand_out;
    const int32_t *cand_in;
    int32_t sel_all;
    float *scores, *bscores;
    uint8_t *flags;
    int32_t max_keys;
} og_cuda_indexer;
cudaError_t og_cuda_index(const og_cuda_indexer *a, cudaStream_t s);

/* og_sink_attn_op, one thread block per (token, head): scores in
 * og_dot_f32_device's order times kq_scale, the sink's softmax
 * (og_ds4_canon.h), the weighted sum in row order. rows, row_off, cblocks,
 * comp_first, n_comp: device copies; scores: device [n_tok n_head][score_stride],
 * score_stride >= every token's row count. A sel entry outside the token's
 * compressed rows ends its list (the cpu device fails the op instead). */
typedef struct og_cuda_sink {
    int64_t n_tok, n_head, d_head;
    float kq_scale;
    const float *q;
    float *o;
    const float *sinks;
    const float *const *rows;
    const int64_t *row_off;
    const void *const *cblocks;
    int32_t cblock_rows;
    int64_t coffset, crow_stride;
    int32_t has_comp;
    const int32_t *comp_first, *n_comp;
    const int32_t *sel;
    int32_t top_k, sel_every;
    float *scores;
    int64_t score_stride;
} og_cuda_sink;
cudaError_t og_cuda_sink_attention(const og_cuda_sink *a, cudaStream_t s);

/* og_engram_op: the gates one thread per (token, copy) in double, then the
 * update per element. gates: device [n_tok][n_hc] scratch. */
cudaError_t og_cuda_engram(float *sv, const float *kv, const float *q_w, const float *k_w, int64_t n_tok,
                           int64_t n_embd, int32_t n_hc, float eps, float *gates, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
