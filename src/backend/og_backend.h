/* onegpu backend, CPU side: a thread pool, quantized matrix products, the
 * routed-expert op and the element-wise operations of the model (RMSNorm,
 * RoPE/YaRN, softmax, SwiGLU, top-k). The device interface (og_device.h: the
 * cpu device playing the GPU, later cuda) builds on these. */
#ifndef OG_BACKEND_H
#define OG_BACKEND_H

#include "og_quant.h"

/* ---- thread pool ------------------------------------------------------------ */

typedef struct og_pool og_pool;

/* Work item: called once on every thread with ith in [0, nth). */
typedef void (*og_pool_fn)(void *ctx, int ith, int nth);

/* n_threads >= 1 (the caller counts as thread 0, so n_threads - 1 workers are
 * started). cpus: NULL, or n_threads CPU ids: worker i is pinned to cpus[i]
 * (a pin the OS refuses is OG_ERR_INVALID_ARG and nothing is created). The
 * calling thread is never re-pinned (its affinity belongs to the caller; new
 * threads inherit it, so an unpinned pool runs where the caller may run). Idle
 * workers sleep on a condition variable after a short spin (~50 us): they never
 * busy-wait while no work is queued. */
og_status og_pool_create(int n_threads, const int *cpus, og_pool **out, char *err, size_t errlen);
/* Stops and joins the workers; NULL is fine. */
void og_pool_free(og_pool *p);
int og_pool_size(const og_pool *p);
/* Runs fn on all threads and returns when every call has returned. Not
 * reentrant: one og_pool_run at a time per pool. */
void og_pool_run(og_pool *p, og_pool_fn fn, void *ctx);

/* ---- matrix products ----------------------------------------------------- */

/* A weight matrix as stored in GGUF: n_rows rows of K elements of `type`, row i at
 * data + i * row_bytes (gguf.md §5: y = W x with W [K, n_rows]). */
typedef struct og_weight {
    og_ggml_type type;
    const void *data;
    int64_t K;          /* elements per row (ne0) */
    int64_t n_rows;     /* output features (ne1) */
    size_t row_bytes;   /* og_row_bytes(type, K) */
} og_weight;

/* Bytes of scratch og_cpu_matmul needs for m activation rows of length K
 * quantized to the weight type's vec_dot_type. */
size_t og_cpu_matmul_scratch(og_ggml_type wtype, int64_t K, int64_t m);

/* Y[m][n_rows] = X[m][K] . W^T: every activation row is quantized alone (so the
 * result for one row never depends on the others: batch-invariant by
 * construction), then each (row, output) pair is one vec_dot of the tier in k.
 * scratch: og_cpu_matmul_scratch bytes. pool may be NULL (single thread).
 * Errors: OG_ERR_UNSUPPORTED (no kernel for the type), OG_ERR_INVALID_ARG. */
og_status og_cpu_matmul(const og_kernels *k, og_pool *pool, const og_weight *w, const float *x, int64_t m,
                        float *y, void *scratch, size_t scratch_bytes);

/* How a product computes (DESIGN.md "Numerics"). Both quantize each activation row
 * alone to the weight's vec_dot_type (same bytes in every tier) for quantized types. */
typedef enum og_numerics {
    OG_NUMERICS_FORK = 0,  /* the tier's fastest float order after the exact integer sums (differs by tier) */
    OG_NUMERICS_CANONICAL, /* og_quant.h "Canonical numerics": the same bits in every tier, batch and device;
                              float weight types: og_dot_f32_device of the f32 row and f32 activations */
} og_numerics;
#define OG_NUMERICS_CANONICAL_MAX_K 16384 /* row length limit of OG_NUMERICS_CANONICAL on float types (a stack buffer) */

/* Several independent products done in one pool run: the rows of all jobs are
 * cut into bands and shared out together, so a decode step pays one wake-up for
 * e.g. all the selected experts' gate and up projections. Each result is bitwise
 * what og_cpu_matmul gives for that job alone. */
typedef struct og_matmul_job {
    const og_weight *w;
    const float *x;   /* [m][w->K] */
    int64_t m;
    float *y;         /* [m][w->n_rows] */
    og_numerics numerics;
} og_matmul_job;

/* Scratch bytes og_cpu_matmul_multi needs for these jobs. */
size_t og_cpu_matmul_multi_scratch(const og_matmul_job *jobs, int n_jobs);

/* Runs n_jobs products (errors as og_cpu_matmul; at most 256 jobs; a
 * OG_NUMERICS_CANONICAL job on a float type with K above OG_NUMERICS_CANONICAL_MAX_K,
 * or on a type with neither a canonical kernel nor a dequantizer, is OG_ERR_UNSUPPORTED). */
og_status og_cpu_matmul_multi(const og_kernels *k, og_pool *pool, const og_matmul_job *jobs, int n_jobs, void *scratch,
                              size_t scratch_bytes);
/* The same with every buffer of the call in ws (quantized activation rows,
 * then one unpacked-tile buffer per pool thread for the tiled canonical
 * product), grown when this call needs more and kept for the next: a call no
 * larger than one before allocates nothing. Same bits as og_cpu_matmul_multi.
 * One call at a time per ws. Errors as og_cpu_matmul_multi's, OG_ERR_NOMEM. */
og_status og_cpu_matmul_multi_ws(const og_kernels *k, og_pool *pool, const og_matmul_job *jobs, int n_jobs, og_buf *ws);

/* A job's activation rows already quantized: xq NULL (the call quantizes them), or
 * its m rows xq_row bytes apart (at least the row bytes of w's vec_dot_type), each
 * kernels->quantize_act[vec_dot_type] of its float row: the bytes the call would
 * write itself, so the same bits. A token's row quantized once for every expert
 * that reads it. Only for a quantizing job (a quantized type; with
 * OG_NUMERICS_CANONICAL, one with a canonical dot); the job's x is then unread. */
typedef struct og_act_rows {
    const void *xq;
    size_t xq_row;
} og_act_rows;

/* og_cpu_matmul_multi_ws with given[j] for job j (given NULL: none). Same bits;
 * errors as og_cpu_matmul_multi_ws's, OG_ERR_INVALID_ARG for rows given to a job
 * that reads f32 rows or closer than a quantized row's bytes. */
og_status og_cpu_matmul_multi_given_ws(const og_kernels *k, og_pool *pool, const og_matmul_job *jobs, int n_jobs,
                                       const og_act_rows *given, og_buf *ws);

/* ---- routed experts -------------------------------------------------------- */

/* One expert over a run of activation rows: y = down(swiglu(gate x, up x)), the
 * FFN of a routed or shared expert (deepseek2.md §5). Weights host-readable
 * (the mapped file, or the cpu device's own memory when it runs the op). */
typedef struct og_expert_job {
    og_weight gate, up;   /* [D -> F] each (K = D, n_rows = F) */
    og_weight down;       /* [F -> D] */
    const float *x;       /* [m][D] */
    int64_t m;            /* rows, >= 0 */
    float *y;             /* [m][D] out */
    og_numerics numerics;
    float swiglu_clamp;   /* > 0: og_swiglu_clamp with this limit (V4's experts); 0: og_swiglu */
} og_expert_job;

/* Runs n_jobs experts: every gate/up product in one pool run, SwiGLU, every
 * down product in another (in chunks when there are many). Each output row is
 * bitwise what og_cpu_matmul_multi gives for that row alone with the job's
 * numerics, whatever the other jobs, the pool or its size: so an expert gives
 * the same bits on the host pool and on the cpu device's threads. Errors:
 * og_cpu_matmul_multi's (OG_ERR_UNSUPPORTED, OG_ERR_INVALID_ARG for shapes that
 * do not chain: gate/up K != down n_rows or gate/up n_rows != down K, or a
 * negative or non-finite clamp), OG_ERR_NOMEM. */
og_status og_cpu_experts(const og_kernels *k, og_pool *pool, const og_expert_job *jobs, int n_jobs);

/* What og_cpu_experts_ws keeps between calls: the gate/up outputs
 * ([sum of m F] x 2 floats) and the products' workspace (og_cpu_matmul_multi_ws).
 * Zero-initialized = empty; one call at a time. */
typedef struct og_expert_ws {
    og_buf mid, mm;
} og_expert_ws;
/* og_cpu_experts with its buffers in ws (grown as needed, kept): a call no
 * larger than one before allocates nothing. Same bits, same errors. */
og_status og_cpu_experts_ws(const og_kernels *k, og_pool *pool, const og_expert_job *jobs, int n_jobs, og_expert_ws *ws);
/* The same with given[i] (og_act_rows; given NULL: none) job i's x quantized for
 * its gate and up products. Same bits, same errors. */
og_status og_cpu_experts_given_ws(const og_kernels *k, og_pool *pool, const og_expert_job *jobs, int n_jobs,
                                  const og_act_rows *given, og_expert_ws *ws);
/* Frees ws's buffers (no status: freeing cannot fail). */
void og_expert_ws_free(og_expert_ws *ws);

/* ---- element-wise operations (f32) ---------------------------------------- */

/* y[i] = w[i] * x[i] / sqrt(mean(x^2) + eps), accumulated in double. y may be x. */
void og_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps);

/* The same without a weight (w = 1): y[i] = x[i] / sqrt(mean(x^2) + eps). y may be x. */
void og_rmsnorm_noweight(float *y, const float *x, int64_t n, float eps);

/* In-place softmax over x[0..n): exp(x - max) / sum. */
void og_softmax(float *x, int64_t n);

/* out[i] = silu(gate[i]) * up[i], silu(z) = z / (1 + e^-z). out may alias either. */
void og_swiglu(float *out, const float *gate, const float *up, int64_t n);

/* SwiGLU with DeepSeek V4's clamp (deepseek4.md §4.1): out[i] =
 * silu(min(gate[i], limit)) * clamp(up[i], -limit, limit); limit > 0. out may
 * alias either. */
void og_swiglu_clamp(float *out, const float *gate, const float *up, int64_t n, float limit);

/* Indices of the k largest values of x[0..n), largest first; ties go to the
 * lower index (deepseek2.md §5 "tie-breaking"). NaN never wins. k <= n. */
void og_topk(const float *x, int64_t n, int k, int32_t *idx);

/* RoPE with YaRN (deepseek2.md §4): pairs (2i, 2i+1) of a d_rope-long vector are
 * rotated by theta_i(pos) and scaled by mscale. */
typedef struct og_rope {
    int d_rope;            /* rotated dimensions (even) */
    float base;            /* theta base (10000) */
    float freq_scale;      /* 1/s for YaRN or linear scaling; 1 = none */
    float ext_factor;      /* 1 with YaRN, 0 without */
    int n_ctx_orig;        /* YaRN original context */
    float beta_fast, beta_slow; /* YaRN ramp (32, 1) */
    float mscale;          /* magnitude m_r applied to both elements */
} og_rope;

/* Per-pair angles for position pos: theta[i], i < d_rope/2. */
void og_rope_angles(const og_rope *r, int64_t pos, float *theta);
/* Largest d_rope og_rope_apply handles (its angles live on the stack); callers
 * refuse larger values when they read them (the model loaders do). */
#define OG_ROPE_MAX_DIM 512
/* The rotation og_rope_apply uses at position pos: c[i] = (float)(cos(theta_i)
 * mscale), sn[i] = (float)(sin(theta_i) mscale), i < d_rope / 2, from the angles
 * in double (the cuda device's RoPE takes them from here, so its bits are the
 * host's). A d_rope outside [0, OG_ROPE_MAX_DIM] writes nothing. */
void og_rope_cos_sin(const og_rope *r, int64_t pos, float *c, float *sn);
/* Rotates n_vec vectors (each d_rope floats, `stride` floats apart) at position
 * pos. d_rope must be even and <= OG_ROPE_MAX_DIM; a larger one rotates nothing
 * (never reached: the loaders refuse it). */
void og_rope_apply(const og_rope *r, float *x, int n_vec, int64_t stride, int64_t pos);

#endif
