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

#ifdef __cplusplus
}
#endif

#endif
