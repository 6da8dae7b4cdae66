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
OG_PRODUCT_KERNEL(k_iq2_xxs, og_block_iq2_xxs, og_block_q8_K, og_canon_iq2_xxs) /* V4 / V4.1's routed experts */
OG_PRODUCT_KERNEL(k_mxfp4, og_block_mxfp4, og_block_q8_0, og_canon_mxfp4)

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
    {OG_TYPE_IQ2_XXS, k_iq2_xxs, 256, sizeof(og_block_iq2_xxs), sizeof(og_block_q8_K), 1},
    {OG_TYPE_MXFP4, k_mxfp4, 32, sizeof(og_block_mxfp4), sizeof(og_block_q8_0), 0},
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

/* ---- the forward pass's ops (og_cuda_kernels.h). Every float operation is
 * written as the intrinsic of the one IEEE operation the host performs
 * (__fadd_rn, __fmul_rn, __dadd_rn, ...), so neither --fmad nor the compiler
 * can change it; reductions whose host order is sequential run on one thread
 * in that order. ---- */

#define OPS_THREADS 256
#define NEG_INF og_canon_bits_f32(0xff800000u) /* -infinity */

/* A weight element widened to f32 (exact): F32, F16, BF16. */
static __device__ __forceinline__ float float_elem(og_ggml_type t, const uint8_t *row, int64_t i) {
    if (t == OG_TYPE_F32) return ((const float *)row)[i];
    const uint16_t h = ((const uint16_t *)row)[i];
    return t == OG_TYPE_F16 ? og_canon_h2f(h) : og_canon_bits_f32((uint32_t)h << 16);
}

/* og_dot_f32_device of a (widened) weight row and x[K], on one warp: lane l
 * takes i = l, l + 32, ... up to K padded to 32 (the padding's fma(0, 0, acc)
 * included), then the butterfly; every lane returns the result. */
static __device__ __forceinline__ float warp_dot_f(og_ggml_type t, const uint8_t *row, const float *x, int64_t K, int lane) {
    const int64_t padded = (K + 31) / 32 * 32;
    float acc = 0.0f;
    for (int64_t i = lane; i < padded; i += 32)
        acc = i < K ? og_canon_fma(float_elem(t, row, i), x[i], acc) : og_canon_fma(0.0f, 0.0f, acc);
    for (int sh = 16; sh; sh >>= 1) acc = og_canon_add(acc, __shfl_xor_sync(0xffffffffu, acc, sh));
    return acc;
}

static __global__ void __launch_bounds__(WARPS * 32) k_products_f(og_ggml_type t, const uint8_t *w, uint64_t row_bytes,
                                                                  int64_t n_out, int64_t K, const float *x, int64_t a0,
                                                                  float *y, int64_t y_stride) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t o = (int64_t)blockIdx.x * WARPS + warp, a = a0 + blockIdx.y;
    if (o >= n_out) return; /* the whole warp: o is the warp's */
    const float acc = warp_dot_f(t, w + (uint64_t)o * row_bytes, x + a * K, K, lane);
    if (lane == 0) y[a * y_stride + o] = acc;
}

extern "C" cudaError_t og_cuda_products_f(og_ggml_type t, const void *w, uint64_t row_bytes, int64_t n_out, int64_t K,
                                          const float *x, int64_t m, float *y, int64_t y_stride, cudaStream_t s) {
    if ((t != OG_TYPE_F32 && t != OG_TYPE_F16 && t != OG_TYPE_BF16) || K <= 0 || n_out < 0 || m < 0)
        return cudaErrorInvalidValue;
    for (int64_t a0 = 0; a0 < m && n_out > 0; a0 += 65535) {
        const int64_t mm = m - a0 < 65535 ? m - a0 : 65535;
        const dim3 grid((unsigned)((n_out + WARPS - 1) / WARPS), (unsigned)mm);
        k_products_f<<<grid, WARPS * 32, 0, s>>>(t, (const uint8_t *)w, row_bytes, n_out, K, x, a0, y, y_stride);
    }
    return cudaGetLastError();
}

static __global__ void k_rmsnorm(float *y, int64_t ys, const float *x, int64_t xs, const float *w, int64_t n, float eps) {
    __shared__ float scale;
    const float *xr = x + (int64_t)blockIdx.x * xs;
    float *yr = y + (int64_t)blockIdx.x * ys;
    if (threadIdx.x == 0) { /* og_rmsnorm's rms_scale: squares exact in double, summed in order */
        double ss = 0.0;
        for (int64_t i = 0; i < n; i++) {
            const double v = (double)xr[i];
            ss = __dadd_rn(ss, __dmul_rn(v, v));
        }
        scale = __double2float_rn(__ddiv_rn(1.0, __dsqrt_rn(__dadd_rn(__ddiv_rn(ss, (double)n), (double)eps))));
    }
    __syncthreads(); /* every x read before y (which may be x) is written */
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = og_canon_mul(xr[i], scale);
        yr[i] = w ? og_canon_mul(w[i], v) : v;
    }
}

extern "C" cudaError_t og_cuda_rmsnorm(float *y, int64_t y_stride, const float *x, int64_t x_stride, const float *w,
                                       int64_t n, int64_t n_rows, float eps, cudaStream_t s) {
    if (n_rows <= 0) return cudaSuccess;
    k_rmsnorm<<<(unsigned)n_rows, OPS_THREADS, 0, s>>>(y, y_stride, x, x_stride, w, n, eps);
    return cudaGetLastError();
}

static __global__ void k_rope(float *x, int64_t tok_stride, int32_t n_vec, int64_t vec_stride, int32_t half, const float *cs) {
    const int64_t t = blockIdx.x;
    for (int64_t idx = threadIdx.x; idx < (int64_t)n_vec * half; idx += blockDim.x) {
        const int64_t v = idx / half, i = idx % half;
        const float c = cs[(t * half + i) * 2], sn = cs[(t * half + i) * 2 + 1];
        float *p = x + t * tok_stride + v * vec_stride;
        const float a = p[2 * i], b = p[2 * i + 1];
        p[2 * i] = og_canon_sub(og_canon_mul(a, c), og_canon_mul(b, sn));
        p[2 * i + 1] = og_canon_add(og_canon_mul(a, sn), og_canon_mul(b, c));
    }
}

extern "C" cudaError_t og_cuda_rope(float *x, int64_t n_tok, int64_t tok_stride, int32_t n_vec, int64_t vec_stride,
                                    int32_t d_rope, const float *cs, cudaStream_t s) {
    if (n_tok <= 0 || n_vec <= 0 || d_rope <= 0) return cudaSuccess;
    k_rope<<<(unsigned)n_tok, 128, 0, s>>>(x, tok_stride, n_vec, vec_stride, d_rope / 2, cs);
    return cudaGetLastError();
}

/* e^x: the float nearest double exp(x) (og_cuda_softmax's note). */
static __device__ __forceinline__ float exp_f(float x) { return __double2float_rn(exp((double)x)); }

/* og_softmax of x[0..n) by the calling thread block: max (NaN never wins),
 * e^(x - max), the sum in double in index order on thread 0, x times the
 * inverse. red: shared [blockDim.x] floats. */
static __device__ void block_softmax(float *x, int64_t n, float *red) {
    __shared__ float inv;
    float m = NEG_INF;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        if (x[i] > m) m = x[i];
    red[threadIdx.x] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
        float mx = NEG_INF;
        for (unsigned j = 0; j < blockDim.x; j++)
            if (red[j] > mx) mx = red[j];
        red[0] = mx;
    }
    __syncthreads();
    const float mx = red[0];
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) x[i] = exp_f(og_canon_sub(x[i], mx));
    __syncthreads();
    if (threadIdx.x == 0) {
        double sum = 0.0;
        for (int64_t i = 0; i < n; i++) sum = __dadd_rn(sum, (double)x[i]);
        inv = __double2float_rn(__ddiv_rn(1.0, sum));
    }
    __syncthreads();
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) x[i] = og_canon_mul(x[i], inv);
    __syncthreads();
}

static __global__ void k_softmax(float *x, int64_t n, int64_t stride) {
    __shared__ float red[OPS_THREADS];
    block_softmax(x + (int64_t)blockIdx.x * stride, n, red);
}

extern "C" cudaError_t og_cuda_softmax(float *x, int64_t n, int64_t n_rows, int64_t stride, cudaStream_t s) {
    if (n_rows <= 0 || n <= 0) return cudaSuccess;
    k_softmax<<<(unsigned)n_rows, OPS_THREADS, 0, s>>>(x, n, stride);
    return cudaGetLastError();
}

static __global__ void k_add(float *y, const float *a, const float *b, int64_t n) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = og_canon_add(a[i], b[i]);
}
static __global__ void k_scale(float *y, const float *a, float f, int64_t n) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = og_canon_mul(a[i], f);
}

extern "C" cudaError_t og_cuda_add(float *y, const float *a, const float *b, int64_t n, cudaStream_t s) {
    if (n <= 0) return cudaSuccess;
    k_add<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(y, a, b, n);
    return cudaGetLastError();
}
extern "C" cudaError_t og_cuda_scale(float *y, const float *a, float f, int64_t n, cudaStream_t s) {
    if (n <= 0) return cudaSuccess;
    k_scale<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(y, a, f, n);
    return cudaGetLastError();
}

/* og_topk: the k largest of x[0..n), largest first, ties to the lower index,
 * NaN never wins (only NaN left: the lowest unused index). */
static __device__ void topk_dev(const float *x, int64_t n, int k, int32_t *idx) {
    for (int j = 0; j < k; j++) {
        int64_t best = -1;
        for (int64_t i = 0; i < n; i++) {
            bool taken = false;
            for (int t = 0; t < j; t++) taken |= idx[t] == i;
            if (taken || x[i] != x[i]) continue;
            if (best < 0 || x[i] > x[best]) best = i;
        }
        for (int64_t i = 0; i < n && best < 0; i++) {
            bool taken = false;
            for (int t = 0; t < j; t++) taken |= idx[t] == i;
            if (!taken) best = i;
        }
        idx[j] = (int32_t)best;
    }
}

#define ROUTE_MAX_GROUP 1024

/* og_cpu_route's route_one on thread 0 of block t (sc, sel: work [2 E]). */
static __global__ void k_route(og_cuda_router r) {
    if (threadIdx.x) return;
    const int64_t t = blockIdx.x;
    const int E = r.n_expert, k = r.k;
    float *sc = r.work + t * 2 * E, *sel = sc + E;
    int32_t *ids = r.ids + t * k;
    const float *lg = r.logits + t * E;
    for (int e = 0; e < E; e++) sc[e] = lg[e];
    if (r.gating == 1) { /* og_softmax on one thread */
        float mx = NEG_INF;
        for (int e = 0; e < E; e++)
            if (sc[e] > mx) mx = sc[e];
        double sum = 0.0;
        for (int e = 0; e < E; e++) {
            sc[e] = exp_f(og_canon_sub(sc[e], mx));
            sum = __dadd_rn(sum, (double)sc[e]);
        }
        const float inv = __double2float_rn(__ddiv_rn(1.0, sum));
        for (int e = 0; e < E; e++) sc[e] = og_canon_mul(sc[e], inv);
    } else if (r.gating == 2) {
        for (int e = 0; e < E; e++) sc[e] = __fdiv_rn(1.0f, og_canon_add(1.0f, exp_f(-sc[e])));
    } else { /* sqrt(softplus(z)): z above 20, exp(z) below -20 */
        for (int e = 0; e < E; e++) {
            const float z = sc[e];
            const float sp = z > 20.0f ? z : z < -20.0f ? exp_f(z) : __double2float_rn(log1p((double)exp_f(z)));
            sc[e] = __fsqrt_rn(sp);
        }
    }
    if (r.hash_table) {
        for (int j = 0; j < k; j++) {
            const int32_t e = r.hash_table[(int64_t)r.tokens[t] * k + j];
            ids[j] = e >= 0 && e < E ? e : 0;
        }
    } else {
        for (int e = 0; e < E; e++) sel[e] = og_canon_add(sc[e], r.bias ? r.bias[e] : 0.0f);
        if (r.n_group > 1) {
            const int G = r.n_group, per = E / G;
            float gs[ROUTE_MAX_GROUP];
            int32_t keep[ROUTE_MAX_GROUP];
            for (int g = 0; g < G; g++) {
                float a = NEG_INF, b = NEG_INF;
                for (int e = g * per; e < (g + 1) * per; e++) {
                    if (sel[e] > a) {
                        b = a;
                        a = sel[e];
                    } else if (sel[e] > b) {
                        b = sel[e];
                    }
                }
                gs[g] = og_canon_add(a, b);
            }
            topk_dev(gs, G, r.n_group_used, keep);
            for (int g = 0; g < G; g++) {
                bool kept = false;
                for (int j = 0; j < r.n_group_used; j++) kept |= keep[j] == g;
                if (!kept)
                    for (int e = g * per; e < (g + 1) * per; e++) sel[e] = NEG_INF;
            }
        }
        topk_dev(sel, E, k, ids);
    }
    double sum = 0.0;
    for (int j = 0; j < k; j++) sum = __dadd_rn(sum, (double)sc[ids[j]]);
    for (int j = 0; j < k; j++) {
        float w = sc[ids[j]];
        if (r.norm)
            w = __double2float_rn(r.norm_add > 0 ? __ddiv_rn((double)w, __dadd_rn(sum, (double)r.norm_add))
                                                 : __ddiv_rn((double)w, fmax(sum, 6.103515625e-5)));
        if (r.scale != 1.0f) w = og_canon_mul(w, r.scale);
        r.weights[t * k + j] = w;
    }
}

extern "C" cudaError_t og_cuda_route(const og_cuda_router *r, cudaStream_t s) {
    if (r->n_tok <= 0) return cudaSuccess;
    if (r->n_group > ROUTE_MAX_GROUP) return cudaErrorInvalidValue;
    k_route<<<(unsigned)r->n_tok, 32, 0, s>>>(*r);
    return cudaGetLastError();
}

/* The cache row of position p (og_kv_view_row on the device). */
static __device__ __forceinline__ const uint8_t *kv_row(const void *const *blocks, int32_t br, int64_t offset,
                                                        int64_t row_stride, int32_t eb, int32_t first, int32_t p) {
    return (const uint8_t *)blocks[first + p / br] + (offset + (int64_t)(p % br) * row_stride) * eb;
}

static __global__ void k_mla(og_cuda_mla a) {
    extern __shared__ float qsh[]; /* [r_kv + d_rope] */
    __shared__ float red[OPS_THREADS];
    const int64_t h = blockIdx.x, i = blockIdx.y, W = a.r_kv + a.d_rope;
    const int32_t pos = a.pos[i], first = a.kv_first[i], eb = a.f16 ? 2 : 4;
    const og_ggml_type et = a.f16 ? OG_TYPE_F16 : OG_TYPE_F32;
    for (int64_t e = threadIdx.x; e < W; e += blockDim.x)
        qsh[e] = e < a.r_kv ? a.q_abs[h * a.qabs_head_stride + i * a.r_kv + e]
                            : a.q_pe[i * a.qpe_tok_stride + h * a.qpe_head_stride + (e - a.r_kv)];
    __syncthreads();
    float *sc = a.scores + (i * a.n_head + h) * a.score_stride;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int32_t p = warp; p <= pos; p += nw) { /* og_dot_f32_device(row, q) * kq_scale */
        const float d = warp_dot_f(et, kv_row(a.blocks, a.block_rows, a.offset, a.row_stride, eb, first, p), qsh, W, lane);
        if (lane == 0) sc[p] = og_canon_mul(d, a.kq_scale);
    }
    __syncthreads();
    block_softmax(sc, (int64_t)pos + 1, red);
    for (int64_t r = threadIdx.x; r < a.r_kv; r += blockDim.x) { /* ctx = sum_p att_p c_p, p ascending */
        float acc = 0.0f;
        for (int32_t p = 0; p <= pos; p++)
            acc = og_canon_add(acc, og_canon_mul(sc[p], float_elem(et, kv_row(a.blocks, a.block_rows, a.offset,
                                                                              a.row_stride, eb, first, p), r)));
        a.ctx[h * a.ctx_head_stride + i * a.r_kv + r] = acc;
    }
}

extern "C" cudaError_t og_cuda_mla_attention(const og_cuda_mla *a, cudaStream_t s) {
    if (a->n_tok <= 0) return cudaSuccess;
    if (a->n_tok > 65535 || a->r_kv + a->d_rope > 12 * 1024) return cudaErrorInvalidValue;
    const dim3 grid((unsigned)a->n_head, (unsigned)a->n_tok);
    k_mla<<<grid, OPS_THREADS, (size_t)(a->r_kv + a->d_rope) * sizeof(float), s>>>(*a);
    return cudaGetLastError();
}

static __global__ void k_copy(uint8_t *dst, const uint8_t *src, uint64_t row_bytes, uint64_t n_rows, uint64_t n_mats,
                              uint64_t dr, uint64_t dm, uint64_t sr, uint64_t sm, int words) {
    for (uint64_t idx = blockIdx.x; idx < n_rows * n_mats; idx += gridDim.x) {
        const uint64_t m = idx / n_rows, r = idx % n_rows;
        uint8_t *d = dst + m * dm + r * dr;
        const uint8_t *sp = src + m * sm + r * sr;
        if (words)
            for (uint64_t i = threadIdx.x; i < row_bytes / 4; i += blockDim.x) ((uint32_t *)d)[i] = ((const uint32_t *)sp)[i];
        else
            for (uint64_t i = threadIdx.x; i < row_bytes; i += blockDim.x) d[i] = sp[i];
    }
}

extern "C" cudaError_t og_cuda_copy(void *dst, const void *src, uint64_t row_bytes, uint64_t n_rows, uint64_t n_mats,
                                    uint64_t dst_row, uint64_t dst_mat, uint64_t src_row, uint64_t src_mat,
                                    cudaStream_t s) {
    if (!row_bytes || !n_rows || !n_mats) return cudaSuccess;
    const int words = (((uintptr_t)dst | (uintptr_t)src | row_bytes | dst_row | dst_mat | src_row | src_mat) & 3) == 0;
    const uint64_t n = n_rows * n_mats;
    k_copy<<<(unsigned)(n < 65535 ? n : 65535), 128, 0, s>>>((uint8_t *)dst, (const uint8_t *)src, row_bytes, n_rows,
                                                            n_mats, dst_row, dst_mat, src_row, src_mat, words);
    return cudaGetLastError();
}

static __global__ void k_get_rows(og_ggml_type t, const uint8_t *table, uint64_t row_bytes, int64_t K, const int32_t *ids,
                                  float *out) {
    const int64_t i = blockIdx.x;
    const uint8_t *row = table + (uint64_t)ids[i] * row_bytes;
    for (int64_t e = threadIdx.x; e < K; e += blockDim.x) out[i * K + e] = og_canon_deq(t, row, e);
}

extern "C" cudaError_t og_cuda_get_rows(og_ggml_type t, const void *table, uint64_t row_bytes, int64_t K,
                                        const int32_t *ids, int64_t n, float *out, cudaStream_t s) {
    if (n <= 0) return cudaSuccess;
    if (!(t == OG_TYPE_F32 || t == OG_TYPE_F16 || t == OG_TYPE_BF16 || row_of(t))) return cudaErrorInvalidValue;
    k_get_rows<<<(unsigned)n, OPS_THREADS, 0, s>>>(t, (const uint8_t *)table, row_bytes, K, ids, out);
    return cudaGetLastError();
}

static __global__ void k_kv_store(const void *const *blocks, int32_t br, int64_t offset, int64_t row_stride, int64_t row_len,
                                  int32_t f16, const float *src, int64_t src_stride, const int32_t *kv_first,
                                  const int32_t *pos) {
    const int64_t i = blockIdx.x;
    uint8_t *dst = (uint8_t *)kv_row(blocks, br, offset, row_stride, f16 ? 2 : 4, kv_first[i], pos[i]);
    const float *x = src + i * src_stride;
    for (int64_t e = threadIdx.x; e < row_len; e += blockDim.x)
        if (f16) ((uint16_t *)dst)[e] = og_canon_f2h(x[e]);
        else ((float *)dst)[e] = x[e];
}

extern "C" cudaError_t og_cuda_kv_store(const void *const *blocks, int32_t block_rows, int64_t offset, int64_t row_stride,
                                        int64_t row_len, int32_t f16, const float *src, int64_t src_stride,
                                        int64_t n_rows, const int32_t *kv_first, const int32_t *pos, cudaStream_t s) {
    if (n_rows <= 0) return cudaSuccess;
    k_kv_store<<<(unsigned)n_rows, OPS_THREADS, 0, s>>>(blocks, block_rows, offset, row_stride, row_len, f16, src,
                                                       src_stride, kv_first, pos);
    return cudaGetLastError();
}

static __global__ void k_combine(float *y, const float *res, int64_t D, const int32_t *route_off, const int32_t *rows,
                                 const float *weights) {
    const int64_t t = blockIdx.x;
    for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
        float acc = y[t * D + i];
        for (int32_t j = route_off[t]; j < route_off[t + 1]; j++)
            acc = og_canon_add(acc, og_canon_mul(weights[j], res[(int64_t)rows[j] * D + i]));
        y[t * D + i] = acc;
    }
}

extern "C" cudaError_t og_cuda_combine(float *y, const float *res, int64_t n_tok, int64_t D, const int32_t *route_off,
                                       const int32_t *rows, const float *weights, cudaStream_t s) {
    if (n_tok <= 0) return cudaSuccess;
    k_combine<<<(unsigned)n_tok, OPS_THREADS, 0, s>>>(y, res, D, route_off, rows, weights);
    return cudaGetLastError();
}

/* ---- deepseek4's and deepseek41's ops (og_device.h; og_ds4_canon.h holds
 * their arithmetic, run on the CPU by tests/unit/test_ds4_canon.c against
 * ds4_ops.c). Correctness first: a token's sequential reductions run on one
 * thread in the host's order, as the host runs them. ---- */

#include "og_ds4_canon.h"

static unsigned blocks_of(int64_t n, int per) { return (unsigned)((n + per - 1) / per); }

static __global__ void k_hc_mix(const float *mix, int64_t n_tok, int32_t n, int32_t head, const float *scale,
                                const float *base, float eps, int32_t iters, float *pre, float *post, float *comb) {
    const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n_tok) return;
    const int64_t n_mix = head ? n : (int64_t)(2 + n) * n;
    og_ds4c_hc_mix_token(mix + t * n_mix, n, head, scale, base, eps, iters, pre + t * n, head ? NULL : post + t * n,
                         head ? NULL : comb + t * n * n);
}

extern "C" cudaError_t og_cuda_hc_mix(const float *mix, int64_t n_tok, int32_t n_hc, int head, const float *scale,
                                      const float *base, float eps, int32_t sinkhorn_iters, float *pre, float *post,
                                      float *comb, cudaStream_t s) {
    if (n_tok <= 0) return cudaSuccess;
    if (n_hc < 1 || n_hc > OG_DS4C_HC_MAX) return cudaErrorInvalidValue;
    k_hc_mix<<<blocks_of(n_tok, 64), 64, 0, s>>>(mix, n_tok, n_hc, head, scale, base, eps, sinkhorn_iters, pre, post, comb);
    return cudaGetLastError();
}

static __global__ void k_hc_collapse(const float *sv, float *x, const float *w, int64_t n_tok, int64_t N, int32_t n) {
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n_tok * N) return;
    const int64_t t = idx / N, i = idx % N;
    x[t * N + i] = og_ds4c_hc_collapse_elem(sv + t * n * N, w + t * n, n, N, i);
}

static __global__ void k_hc_expand(float *sv, const float *y, const float *post, const float *comb, int64_t n_tok,
                                   int64_t N, int32_t n) {
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n_tok * N) return;
    const int64_t t = idx / N, i = idx % N;
    og_ds4c_hc_expand_elem(sv + t * n * N, y[t * N + i], post + t * n, comb + t * n * n, n, N, i);
}

extern "C" cudaError_t og_cuda_hc(int expand, float *sv, float *x, const float *w, const float *comb, int64_t n_tok,
                                  int64_t n_embd, int32_t n_hc, cudaStream_t s) {
    if (n_tok <= 0) return cudaSuccess;
    if (n_hc < 1 || n_hc > OG_DS4C_HC_MAX || n_embd < 1) return cudaErrorInvalidValue;
    const unsigned g = blocks_of(n_tok * n_embd, OPS_THREADS);
    if (expand) k_hc_expand<<<g, OPS_THREADS, 0, s>>>(sv, x, w, comb, n_tok, n_embd, n_hc);
    else k_hc_collapse<<<g, OPS_THREADS, 0, s>>>(sv, x, w, n_tok, n_embd, n_hc);
    return cudaGetLastError();
}

/* The block kinds: one thread per (row, block); the rotations first, one thread per row. */
static __global__ void k_qat_rotate(float *x, int64_t n_rows, int64_t stride, int64_t n_round) {
    const int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r < n_rows) og_ds4c_hadamard(x + r * stride, n_round);
}
static __global__ void k_qat_blocks(float *x, int64_t n_rows, int64_t stride, int kind, int64_t n_round, int64_t bl) {
    const int64_t nb = (n_round + bl - 1) / bl, idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n_rows * nb) return;
    const int64_t r = idx / nb, b = (idx % nb) * bl;
    og_ds4c_qat_block_run(kind, x + r * stride, b, b + bl < n_round ? b + bl : n_round);
}
static __global__ void k_qat_f16(float *x, int64_t n_rows, int64_t stride, int64_t n_round) {
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n_rows * n_round) return;
    float *v = x + (idx / n_round) * stride + idx % n_round;
    *v = og_canon_h2f(og_canon_f2h(*v));
}

extern "C" cudaError_t og_cuda_qat(float *x, int64_t n_rows, int64_t stride, int kind, int64_t n_round, int32_t block,
                                   cudaStream_t s) {
    if (n_rows <= 0 || n_round <= 0 || kind == OG_DS4C_QAT_NONE) return cudaSuccess;
    if (kind == OG_DS4C_QAT_HADAMARD || kind == OG_DS4C_QAT_FP4_HADAMARD)
        k_qat_rotate<<<blocks_of(n_rows, 64), 64, 0, s>>>(x, n_rows, stride, n_round);
    if (kind == OG_DS4C_QAT_F16) k_qat_f16<<<blocks_of(n_rows * n_round, OPS_THREADS), OPS_THREADS, 0, s>>>(x, n_rows, stride, n_round);
    const int64_t bl = og_ds4c_qat_block(kind, block);
    if (bl) {
        const int64_t n = n_rows * ((n_round + bl - 1) / bl);
        k_qat_blocks<<<blocks_of(n, 128), 128, 0, s>>>(x, n_rows, stride, kind, n_round, bl);
    }
    return cudaGetLastError();
}

/* The compressor's state pass: the tokens in order on one thread block (a
 * sequence's state carries from token to token), each row copied by the
 * block's threads; an emitting token's window is copied out to its snapshot
 * before the overlap's shift (ds4_ops.c run_compress, pass 1). */
static __global__ void k_compress_state(og_cuda_compress c) {
    const int64_t W = c.width, LW = (c.overlap ? 2 : 1) * W, r = c.ratio;
    const int64_t slots = c.overlap ? 2 * r : r, cur0 = c.overlap ? r : 0, n_row = c.overlap ? 2 * r : r;
    int64_t e = 0;
    for (int64_t t = 0; t < c.n_tok; t++) {
        float *kv_st = c.state[t], *sc_st = kv_st + slots * LW;
        const int64_t slot = cur0 + c.pos[t] % r;
        for (int64_t i = threadIdx.x; i < LW; i += blockDim.x) {
            kv_st[slot * LW + i] = c.kv[t * LW + i];
            sc_st[slot * LW + i] = c.score[t * LW + i];
        }
        __syncthreads();
        if (!c.out[t]) continue;
        float *kv = c.snap + e * 2 * n_row * W, *sc = kv + n_row * W;
        for (int64_t idx = threadIdx.x; idx < n_row * W; idx += blockDim.x) {
            const int64_t i = idx / W, j = idx % W, off = i * LW + (c.overlap && i >= r ? W : 0);
            kv[idx] = kv_st[off + j];
            sc[idx] = sc_st[off + j];
        }
        __syncthreads();
        if (c.overlap)
            for (int64_t i = threadIdx.x; i < r * LW; i += blockDim.x) {
                kv_st[i] = kv_st[r * LW + i];
                sc_st[i] = sc_st[r * LW + i];
            }
        __syncthreads();
        e++;
    }
}

static __global__ void k_compress_sums(og_cuda_compress c) {
    const int64_t W = c.width, r = c.ratio, n_row = c.overlap ? 2 * r : r;
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= c.n_emit * W) return;
    const int64_t e = idx / W, j = idx % W, t = c.emit[e];
    const float *kv = c.snap + e * 2 * n_row * W, *sc = kv + n_row * W;
    const int have_prev = c.overlap && (int64_t)c.pos[t] + 1 > r;
    c.out[t][j] = og_ds4c_compress_col(kv, sc, W, r, c.overlap ? r : 0, have_prev, j);
}

static __global__ void k_compress_finish(og_cuda_compress c) {
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= c.n_emit) return;
    og_ds4c_compress_finish(c.out[c.emit[e]], c.width, c.norm, c.eps, c.d_rope, c.cs + e * c.d_rope, c.qat, c.qat_n,
                            c.round_f16);
}

extern "C" cudaError_t og_cuda_compress_step(const og_cuda_compress *c, cudaStream_t s) {
    if (c->n_tok <= 0) return cudaSuccess;
    k_compress_state<<<1, OPS_THREADS, 0, s>>>(*c);
    if (c->n_emit > 0) {
        k_compress_sums<<<blocks_of(c->n_emit * c->width, 128), 128, 0, s>>>(*c);
        k_compress_finish<<<blocks_of(c->n_emit, 32), 32, 0, s>>>(*c);
    }
    return cudaGetLastError();
}

/* Row c of the f32 view (og_kv_view_row). */
static __device__ __forceinline__ const float *view_row(const void *const *blocks, int32_t br, int64_t offset,
                                                        int64_t row_stride, int32_t first, int32_t c) {
    return (const float *)blocks[first + c / br] + offset + (int64_t)(c % br) * row_stride;
}

#define IDX_MAX_HEADS 64

/* Whether token i needs its keys scored (ds4_ops.c needs_scores). */
static __device__ __forceinline__ int idx_needs(const og_cuda_indexer *a, int64_t i, int32_t n) {
    return n > a->top_k || (a->cand_out && (int64_t)n > (int64_t)a->cand_block * a->cand_topk) ||
           (a->sel_all && a->cand_in && a->cand_in[i * a->cand_topk] >= 0);
}

/* Scores: one warp per (token, key), the heads' dots in og_dot_f32_device's order. */
static __global__ void __launch_bounds__(WARPS * 32) k_index_scores(og_cuda_indexer a) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t i = blockIdx.y;
    const int32_t c = (int32_t)((int64_t)blockIdx.x * WARPS + warp), n = a.n_keys[i];
    if (c >= n || !idx_needs(&a, i, n)) return;
    float *out = a.scores + i * a.max_keys + c;
    if (!og_ds4c_key_eligible(a.cand_in ? a.cand_in + i * a.cand_topk : NULL, a.cand_topk, a.cand_block, c)) {
        if (lane == 0) *out = NEG_INF;
        return;
    }
    const float *key = view_row(a.blocks, a.block_rows, a.offset, a.row_stride, a.key_first[i], c);
    float d[IDX_MAX_HEADS];
    for (int64_t h = 0; h < a.n_head; h++)
        d[h] = warp_dot_f(OG_TYPE_F32, (const uint8_t *)key, a.q + (i * a.n_head + h) * a.d_head, a.d_head, lane);
    if (lane == 0) *out = og_ds4c_index_score(a.w + i * a.n_head, d, a.n_head);
}

/* Selection, one thread block per token: each candidate's rank among the
 * others (by score, then index: a total order, so the chosen set is qsort's),
 * flags, then thread 0 writes the chosen in ascending order (ds4_ops.c pick,
 * pick_blocks). */
static __global__ void k_index_select(og_cuda_indexer a) {
    const int64_t i = blockIdx.x;
    const int32_t n = a.n_keys[i];
    const float *sc = a.scores + i * a.max_keys;
    uint8_t *flag = a.flags + i * a.max_keys;
    if (!idx_needs(&a, i, n)) {
        if (threadIdx.x == 0) {
            if (a.cand_out) a.cand_out[i * a.cand_topk] = -1;
            if (a.sel_all)
                for (int32_t q = 0; q < a.top_k; q++) a.sel[i * a.top_k + q] = q < n ? q : -1;
        }
        return;
    }
    if (a.cand_out) {
        int32_t *out = a.cand_out + i * a.cand_topk;
        if ((int64_t)n <= (int64_t)a.cand_block * a.cand_topk) {
            if (threadIdx.x == 0) out[0] = -1;
        } else {
            const int32_t nb = (n + a.cand_block - 1) / a.cand_block, newest = nb - 1;
            float *bs = a.bscores + i * a.max_keys;
            for (int32_t b = threadIdx.x; b < newest; b += blockDim.x) {
                float mx = NEG_INF;
                for (int32_t c = b * a.cand_block; c < (b + 1) * a.cand_block; c++) mx = sc[c] > mx ? sc[c] : mx;
                bs[b] = mx;
            }
            __syncthreads();
            for (int32_t b = threadIdx.x; b < newest; b += blockDim.x) {
                int32_t rank = 0;
                for (int32_t o = 0; o < newest && rank < a.cand_topk - 1; o++) rank += og_ds4c_beats(bs[o], o, bs[b], b);
                flag[b] = rank < a.cand_topk - 1;
            }
            __syncthreads();
            if (threadIdx.x == 0) {
                int32_t got = 0;
                for (int32_t b = 0; b < newest; b++)
                    if (flag[b]) out[got++] = b;
                out[got] = newest; /* the newest block is the highest */
            }
            __syncthreads();
        }
    }
    if (!a.sel_all && n <= a.top_k) return;
    for (int32_t c = threadIdx.x; c < n; c += blockDim.x) {
        int32_t rank = 0;
        for (int32_t o = 0; o < n && rank < a.top_k; o++) rank += og_ds4c_beats(sc[o], o, sc[c], c);
        flag[c] = rank < a.top_k && (!a.sel_all || sc[c] != NEG_INF);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int32_t *sel = a.sel + i * a.top_k, got = 0;
        for (int32_t c = 0; c < n; c++)
            if (flag[c]) sel[got++] = c;
        for (int32_t q = got; q < a.top_k; q++) sel[q] = -1;
    }
}

extern "C" cudaError_t og_cuda_index(const og_cuda_indexer *a, cudaStream_t s) {
    if (a->n_tok <= 0) return cudaSuccess;
    if (a->n_head < 1 || a->n_head > IDX_MAX_HEADS || a->max_keys < 1 || a->n_tok > 65535) return cudaErrorInvalidValue;
    const dim3 g(blocks_of(a->max_keys, WARPS), (unsigned)a->n_tok);
    k_index_scores<<<g, WARPS * 32, 0, s>>>(*a);
    k_index_select<<<(unsigned)a->n_tok, OPS_THREADS, 0, s>>>(*a);
    return cudaGetLastError();
}

/* Row r of token i's set: its raw rows, then its compressed ones. */
static __device__ __forceinline__ const float *sink_row(const og_cuda_sink *a, int64_t i, int64_t n_raw, int64_t r,
                                                        int use_sel) {
    if (r < n_raw) return a->rows[a->row_off[i] + r];
    const int32_t c = use_sel ? a->sel[i * a->top_k + (r - n_raw)] : (int32_t)(r - n_raw);
    return view_row(a->cblocks, a->cblock_rows, a->coffset, a->crow_stride, a->comp_first[i], c);
}

/* One thread block per (token, head): scores warp by warp (one row per warp
 * at a time), the softmax with the sink on thread 0 in row order, then each
 * output dim sums its rows in order (og_kernels.axpy_f32's products, then sums). */
static __global__ void __launch_bounds__(WARPS * 32) k_sink_attn(og_cuda_sink a) {
    __shared__ float inv;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t i = blockIdx.x / a.n_head, h = blockIdx.x % a.n_head, D = a.d_head;
    const int64_t n_raw = a.row_off[i + 1] - a.row_off[i];
    int64_t n_c = 0;
    int use_sel = 0;
    if (a.has_comp && a.n_comp[i] > 0) {
        use_sel = a.sel && (a.sel_every || a.n_comp[i] > a.top_k);
        n_c = use_sel ? a.top_k : a.n_comp[i];
        if (use_sel) /* the list ends at a negative entry (sel_every) or at one outside the visible rows */
            for (int64_t c = 0; c < n_c; c++) {
                const int32_t r = a.sel[i * a.top_k + c];
                if (r < 0 || r >= a.n_comp[i]) {
                    n_c = c;
                    break;
                }
            }
    }
    const int64_t n = n_raw + n_c;
    float *s = a.scores + blockIdx.x * a.score_stride;
    const float *q = a.q + (i * a.n_head + h) * D;
    for (int64_t r = warp; r < n; r += WARPS) {
        const float d = warp_dot_f(OG_TYPE_F32, (const uint8_t *)sink_row(&a, i, n_raw, r, use_sel), q, D, lane);
        if (lane == 0) s[r] = d * a.kq_scale;
    }
    __syncthreads();
    if (threadIdx.x == 0) inv = og_ds4c_sink_softmax(s, n, a.sinks[h]);
    __syncthreads();
    float *o = a.o + (i * a.n_head + h) * D;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
        float acc = 0.0f;
        for (int64_t r = 0; r < n; r++) acc += (s[r] * inv) * sink_row(&a, i, n_raw, r, use_sel)[d];
        o[d] = acc;
    }
}

extern "C" cudaError_t og_cuda_sink_attention(const og_cuda_sink *a, cudaStream_t s) {
    if (a->n_tok <= 0) return cudaSuccess;
    if (a->n_tok * a->n_head > 0x7fffffff) return cudaErrorInvalidValue;
    k_sink_attn<<<(unsigned)(a->n_tok * a->n_head), WARPS * 32, 0, s>>>(*a);
    return cudaGetLastError();
}

static __global__ void k_engram_gates(float *sv, const float *kv, const float *qw, const float *kw, int64_t n_tok,
                                      int64_t N, int32_t n, float eps, float *gates) {
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n_tok * n) return;
    const int64_t t = idx / n, k = idx % n;
    gates[idx] = og_ds4c_engram_gate(sv + (t * n + k) * N, kv + t * (n + 1) * N + k * N, qw + k * N, kw + k * N, N, eps);
}
static __global__ void k_engram_add(float *sv, const float *kv, int64_t n_tok, int64_t N, int32_t n, const float *gates) {
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n_tok * n * N) return;
    const int64_t t = idx / (n * N), i = idx % N;
    sv[idx] += gates[idx / N] * kv[t * (n + 1) * N + n * N + i];
}

extern "C" cudaError_t og_cuda_engram(float *sv, const float *kv, const float *q_w, const float *k_w, int64_t n_tok,
                                      int64_t n_embd, int32_t n_hc, float eps, float *gates, cudaStream_t s) {
    if (n_tok <= 0) return cudaSuccess;
    if (n_hc < 1 || n_hc > OG_DS4C_HC_MAX || n_embd < 1) return cudaErrorInvalidValue;
    k_engram_gates<<<blocks_of(n_tok * n_hc, 64), 64, 0, s>>>(sv, kv, q_w, k_w, n_tok, n_embd, n_hc, eps, gates);
    k_engram_add<<<blocks_of(n_tok * n_hc * n_embd, OPS_THREADS), OPS_THREADS, 0, s>>>(sv, kv, n_tok, n_embd, n_hc, gates);
    return cudaGetLastError();
}

