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
 * Q3_K, Q4_K, Q5_K, Q6_K). */
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

#ifdef __cplusplus
}
#endif

#endif
