/* The cuda device's kernels: the canonical quantized products (og_quant.h
 * "Canonical numerics"), the activation quantizers and SwiGLU. CUDA C: the only
 * C++ is what nvcc needs (kernel launches; extern "C" for the API of
 * og_cuda_kernels.h). Built with --fmad=false and without --use_fast_math, so
 * every float operation is the single IEEE operation the source writes; the
 * per-block arithmetic is og_quant_canon.h's, shared with the host (tested there
 * against quant_ref.c on the CPU, and here against the cpu backend by
 * tests/unit/test_cuda.c on a GPU).
 *
 * The product kernel and the canonical definition, step by step:
 *  - one warp computes one output (weight row o, activation row r); lane l
 *    takes blocks b = l, l + 32, l + 64, ... in increasing b (the warp stages 32
 *    consecutive weight blocks in shared memory with coalesced loads, lane l
 *    then reads block b0 + l from there);
 *  - step 1, exact integers: og_canon_<type> sums a block's quant products and
 *    its min terms in int32 (exact in any order);
 *  - step 2, per block: og_canon_v: a_b and c_b were formed by one rounded
 *    product each inside the term function, v_b = a_b * (float)I_b rounded, then
 *    fma(-c_b, m_b, v_b);
 *  - step 3: the lane's accumulator starts at +0 and adds its v_b in
 *    increasing b (a lane without blocks keeps +0); the lanes are combined by
 *    __shfl_xor_sync with offsets 16, 8, 4, 2, 1 (acc_l + acc_{l^o}), lane 0
 *    writes the result: og_warp_reduce32's butterfly.
 * One pass over the weight bytes for each activation row: a decode step (one
 * row per expert) reads every weight byte once. */
#include <cuda_runtime.h>

#include "og_cuda_kernels.h"
#include "og_quant_canon.h"

#define WARPS 4 /* per thread block: one output row each */
#define SMEM_MAX (96 * 1024)

typedef struct mv_args {
    const uint8_t *base;
    uint64_t slot_bytes, off, row_bytes;
    int64_t n_out, nb; /* outputs, blocks per row */
    const uint8_t *xq;
    uint64_t xq_row_bytes;
    float *y;
    int64_t y_stride;
} mv_args;

/* Copies bytes from global src to shared dst with the warp's 32 lanes, 4 bytes
 * a lane at a time where both are 4-aligned (a row's blocks may start at any even
 * address), else one byte a lane. */
static __device__ __forceinline__ void warp_copy(uint8_t *dst, const uint8_t *src, uint64_t bytes, int lane) {
    if (((uintptr_t)src & 3) == 0 && (bytes & 3) == 0) {
        const uint32_t *s4 = (const uint32_t *)src;
        uint32_t *d4 = (uint32_t *)dst;
        for (uint64_t i = (uint64_t)lane; i < bytes / 4; i += 32) d4[i] = __ldg(s4 + i);
    } else {
        for (uint64_t i = (uint64_t)lane; i < bytes; i += 32) dst[i] = __ldg(src + i);
    }
}

/* The product kernel for one weight type: WB its block, AB the activation block,
 * TERM its og_quant_canon.h term. Grid: x = chunks of WARPS outputs, y = groups. */
#define OG_PRODUCT_KERNEL(NAME, WB, AB, TERM)                                                              \
    static __global__ void __launch_bounds__(WARPS * 32) NAME(mv_args a, og_cuda_groups gr) {              \
        extern __shared__ __align__(16) uint8_t smem[];                                                    \
        const og_cuda_group g = gr.g[blockIdx.y];                                                          \
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;                                        \
        const uint64_t act_bytes = ((uint64_t)a.nb * sizeof(AB) + 15) & ~(uint64_t)15;                     \
        uint8_t *act = smem, *wsm = smem + act_bytes + (uint64_t)warp * 32 * sizeof(WB);                   \
        const int64_t o = (int64_t)blockIdx.x * WARPS + warp;                                              \
        const uint8_t *wrow = a.base + (uint64_t)g.slot * a.slot_bytes + a.off + (uint64_t)o * a.row_bytes; \
        for (int r = 0; r < g.n_rows; r++) {                                                               \
            const uint8_t *xr = a.xq + (uint64_t)(g.row0 + r) * a.xq_row_bytes;                            \
            __syncthreads(); /* the previous row's activations are no longer read */                       \
            for (uint64_t i = threadIdx.x; i < (uint64_t)a.nb * sizeof(AB) / 2; i += WARPS * 32)           \
                ((uint16_t *)act)[i] = ((const uint16_t *)xr)[i];                                          \
            __syncthreads();                                                                               \
            if (o >= a.n_out) continue; /* stays for the barriers */                                       \
            float acc = 0.0f;                                                                              \
            for (int64_t b0 = 0; b0 < a.nb; b0 += 32) {                                                    \
                const int64_t nblk = a.nb - b0 < 32 ? a.nb - b0 : 32;                                      \
                __syncwarp();                                                                              \
                warp_copy(wsm, wrow + (uint64_t)b0 * sizeof(WB), (uint64_t)nblk * sizeof(WB), lane);       \
                __syncwarp();                                                                              \
                if (lane < nblk)                                                                           \
                    acc = og_canon_add(acc, og_canon_v(TERM((const WB *)(wsm + (uint64_t)lane * sizeof(WB)), \
                                                            (const AB *)act + b0 + lane)));                \
            }                                                                                              \
            for (int sh = 16; sh; sh >>= 1) acc = og_canon_add(acc, __shfl_xor_sync(0xffffffffu, acc, sh)); \
            if (lane == 0) a.y[(int64_t)(g.row0 + r) * a.y_stride + o] = acc;                              \
        }                                                                                                  \
    }

OG_PRODUCT_KERNEL(k_q8_0, og_block_q8_0, og_block_q8_0, og_canon_q8_0)
OG_PRODUCT_KERNEL(k_q4_0, og_block_q4_0, og_block_q8_0, og_canon_q4_0)
OG_PRODUCT_KERNEL(k_q5_0, og_block_q5_0, og_block_q8_0, og_canon_q5_0)
OG_PRODUCT_KERNEL(k_q2_K, og_block_q2_K, og_block_q8_K, og_canon_q2_K)
OG_PRODUCT_KERNEL(k_q3_K, og_block_q3_K, og_block_q8_K, og_canon_q3_K)
OG_PRODUCT_KERNEL(k_q4_K, og_block_q4_K, og_block_q8_K, og_canon_q4_K)
OG_PRODUCT_KERNEL(k_q5_K, og_block_q5_K, og_block_q8_K, og_canon_q5_K)
OG_PRODUCT_KERNEL(k_q6_K, og_block_q6_K, og_block_q8_K, og_canon_q6_K)

typedef void (*product_kernel)(mv_args, og_cuda_groups);

typedef struct type_row {
    og_ggml_type type;
    product_kernel k;
    uint32_t blck, wsize, asize; /* elements per block, weight and activation block bytes */
    int act_k;                   /* 1: activations are Q8_K, 0: Q8_0 */
} type_row;

static const type_row rows[] = {
    {OG_TYPE_Q8_0, k_q8_0, 32, sizeof(og_block_q8_0), sizeof(og_block_q8_0), 0},
    {OG_TYPE_Q4_0, k_q4_0, 32, sizeof(og_block_q4_0), sizeof(og_block_q8_0), 0},
    {OG_TYPE_Q5_0, k_q5_0, 32, sizeof(og_block_q5_0), sizeof(og_block_q8_0), 0},
    {OG_TYPE_Q2_K, k_q2_K, 256, sizeof(og_block_q2_K), sizeof(og_block_q8_K), 1},
    {OG_TYPE_Q3_K, k_q3_K, 256, sizeof(og_block_q3_K), sizeof(og_block_q8_K), 1},
    {OG_TYPE_Q4_K, k_q4_K, 256, sizeof(og_block_q4_K), sizeof(og_block_q8_K), 1},
    {OG_TYPE_Q5_K, k_q5_K, 256, sizeof(og_block_q5_K), sizeof(og_block_q8_K), 1},
    {OG_TYPE_Q6_K, k_q6_K, 256, sizeof(og_block_q6_K), sizeof(og_block_q8_K), 1},
};

static const type_row *row_of(og_ggml_type t) {
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (rows[i].type == t) return &rows[i];
    return NULL;
}

/* One thread per activation block: Q8_0 blocks of 32 or Q8_K blocks of 256. */
static __global__ void k_act_q8_0(const float *x, og_block_q8_0 *q, int64_t n_blocks) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n_blocks) og_canon_act_q8_0(x + 32 * i, q + i);
}
static __global__ void k_act_q8_K(const float *x, og_block_q8_K *q, int64_t n_blocks) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n_blocks) og_canon_act_q8_K(x + 256 * i, q + i);
}

static __global__ void k_swiglu(float *h, const float *g, const float *u, int64_t n, float clamp) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) h[i] = clamp > 0 ? og_canon_silu_mul_clamp(g[i], u[i], clamp) : og_canon_silu_mul(g[i], u[i]);
}

extern "C" cudaError_t og_cuda_kernels_init(void) {
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        cudaError_t e = cudaFuncSetAttribute(rows[i].k, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_MAX);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

extern "C" int og_cuda_has_type(og_ggml_type t) { return row_of(t) != NULL; }

extern "C" size_t og_cuda_act_row_bytes(og_ggml_type t, int64_t K) {
    const type_row *tr = row_of(t);
    return tr ? (size_t)(K / tr->blck) * tr->asize : 0;
}

static uint64_t smem_bytes(const type_row *tr, int64_t nb) {
    return (((uint64_t)nb * tr->asize + 15) & ~(uint64_t)15) + (uint64_t)WARPS * 32 * tr->wsize;
}

extern "C" int64_t og_cuda_max_k(og_ggml_type t) {
    const type_row *tr = row_of(t);
    if (!tr) return 0;
    const uint64_t room = SMEM_MAX - (uint64_t)WARPS * 32 * tr->wsize - 16;
    return (int64_t)(room / tr->asize) * tr->blck;
}

extern "C" cudaError_t og_cuda_quantize_act(og_ggml_type t, const float *x, void *q, int64_t n_rows, int64_t K,
                                            cudaStream_t s) {
    const type_row *tr = row_of(t);
    if (!tr || K % tr->blck) return cudaErrorInvalidValue;
    const int64_t nb = n_rows * (K / tr->blck); /* rows back to back: blocks of a row never straddle rows */
    if (nb <= 0) return cudaSuccess;
    const unsigned grid = (unsigned)((nb + 127) / 128);
    if (tr->act_k) k_act_q8_K<<<grid, 128, 0, s>>>(x, (og_block_q8_K *)q, nb);
    else k_act_q8_0<<<grid, 128, 0, s>>>(x, (og_block_q8_0 *)q, nb);
    return cudaGetLastError();
}

extern "C" cudaError_t og_cuda_products(og_ggml_type t, const void *base, uint64_t slot_bytes, uint64_t off,
                                        uint64_t row_bytes, int64_t n_out, int64_t K, const og_cuda_groups *groups,
                                        const void *xq, float *y, int64_t y_stride, cudaStream_t s) {
    const type_row *tr = row_of(t);
    if (!tr || K % tr->blck || K > og_cuda_max_k(t) || n_out <= 0 || groups->n < 1 || groups->n > OG_CUDA_MAX_GROUPS)
        return cudaErrorInvalidValue;
    mv_args a;
    a.base = (const uint8_t *)base;
    a.slot_bytes = slot_bytes;
    a.off = off;
    a.row_bytes = row_bytes;
    a.n_out = n_out;
    a.nb = K / tr->blck;
    a.xq = (const uint8_t *)xq;
    a.xq_row_bytes = (uint64_t)a.nb * tr->asize;
    a.y = y;
    a.y_stride = y_stride;
    const dim3 grid((unsigned)((n_out + WARPS - 1) / WARPS), (unsigned)groups->n);
    tr->k<<<grid, WARPS * 32, smem_bytes(tr, a.nb), s>>>(a, *groups);
    return cudaGetLastError();
}

extern "C" cudaError_t og_cuda_swiglu(float *h, const float *g, const float *u, int64_t n, float clamp, cudaStream_t s) {
    if (n <= 0) return cudaSuccess;
    k_swiglu<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(h, g, u, n, clamp);
    return cudaGetLastError();
}
