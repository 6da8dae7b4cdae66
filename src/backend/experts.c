/* Routed (and shared) experts on the CPU: the expert op of both the host pool and
 * the cpu device (og_device.h), so resident and cold experts run one code path. */
#include "og_backend.h"

#include <math.h>
#include <stdlib.h>

#define CHUNK 60 /* experts per pool run: 4 jobs each at most within og_cpu_matmul_multi's 256 */

/* The SwiGLU of one pool run's expert jobs, g = silu(g) u in place over each job's
 * [m][F] gate and up outputs (og_kernels.swiglu: og_swiglu's / og_swiglu_clamp's
 * bits), shared out by elements (each element is its own og_canon_silu_mul: the
 * bits never depend on the split). */
typedef struct swiglu_run {
    const og_kernels *k;
    const og_expert_job *jobs;
    int n;
    float *base;   /* the first job's gate rows; then its up rows, the next job's gate rows, ... */
    size_t total;  /* elements of every job's gate outputs */
} swiglu_run;

#define SWIGLU_SHARE_MIN 16384 /* elements from which the pool shares the SwiGLU */

static void swiglu_share(void *ctx, int ith, int nth) {
    const swiglu_run *sr = ctx;
    const size_t e0 = sr->total * (size_t)ith / (size_t)nth, e1 = sr->total * (size_t)(ith + 1) / (size_t)nth;
    float *g = sr->base;
    size_t at = 0; /* gate elements before job i */
    for (int i = 0; i < sr->n && at < e1; i++) {
        const og_expert_job *j = &sr->jobs[i];
        const size_t mf = (size_t)j->m * (size_t)j->gate.n_rows;
        const size_t lo = e0 > at ? e0 - at : 0, hi = e1 - at < mf ? e1 - at : mf;
        if (lo < hi) sr->k->swiglu(g + lo, g + lo, g + mf + lo, (int64_t)(hi - lo), j->swiglu_clamp);
        at += mf;
        g += 2 * mf;
    }
}

og_status og_cpu_experts_ws(const og_kernels *k, og_pool *pool, const og_expert_job *jobs, int n_jobs, og_expert_ws *ws) {
    return og_cpu_experts_given_ws(k, pool, jobs, n_jobs, NULL, ws);
}

og_status og_cpu_experts_given_ws(const og_kernels *k, og_pool *pool, const og_expert_job *jobs, int n_jobs,
                                  const og_act_rows *given, og_expert_ws *ws) {
    if (n_jobs < 0) return OG_ERR_INVALID_ARG;
    size_t total_f = 0; /* gate and up outputs of every job */
    for (int i = 0; i < n_jobs; i++) {
        const og_expert_job *j = &jobs[i];
        if (j->m < 0 || j->gate.K != j->up.K || j->gate.n_rows != j->up.n_rows || j->down.K != j->gate.n_rows ||
            j->down.n_rows != j->gate.K || !(j->swiglu_clamp >= 0 && isfinite(j->swiglu_clamp)))
            return OG_ERR_INVALID_ARG;
        total_f += 2 * (size_t)j->m * (size_t)j->gate.n_rows;
    }
    og_matmul_job mj[2 * CHUNK];
    og_act_rows mg[2 * CHUNK]; /* the gate/up jobs' given rows */
    og_status st = og_buf_reserve(&ws->mid, (total_f + 1) * sizeof(float));
    float *base = ws->mid.p;
    for (int c0 = 0; c0 < n_jobs && !st; c0 += CHUNK) {
        const int c1 = c0 + CHUNK < n_jobs ? c0 + CHUNK : n_jobs;
        int nj = 0;
        float *g = base;
        for (int i = c0; i < c1; i++) { /* gate rows then up rows of each job */
            const og_expert_job *j = &jobs[i];
            const size_t mf = (size_t)j->m * (size_t)j->gate.n_rows;
            mj[nj] = (og_matmul_job){&j->gate, j->x, j->m, g, j->numerics};
            mg[nj++] = given ? given[i] : (og_act_rows){NULL, 0};
            mj[nj] = (og_matmul_job){&j->up, j->x, j->m, g + mf, j->numerics};
            mg[nj++] = given ? given[i] : (og_act_rows){NULL, 0};
            g += 2 * mf;
        }
        if ((st = og_cpu_matmul_multi_given_ws(k, pool, mj, nj, mg, &ws->mm))) break;
        swiglu_run sr = {k, jobs + c0, c1 - c0, base, 0};
        for (int i = c0; i < c1; i++) sr.total += (size_t)jobs[i].m * (size_t)jobs[i].gate.n_rows;
        if (pool && sr.total >= SWIGLU_SHARE_MIN) og_pool_run(pool, swiglu_share, &sr);
        else swiglu_share(&sr, 0, 1);
        nj = 0;
        g = base;
        for (int i = c0; i < c1; i++) {
            const og_expert_job *j = &jobs[i];
            const size_t mf = (size_t)j->m * (size_t)j->gate.n_rows;
            mj[nj++] = (og_matmul_job){&j->down, g, j->m, j->y, j->numerics};
            g += 2 * mf;
        }
        base = g;
        st = og_cpu_matmul_multi_ws(k, pool, mj, nj, &ws->mm);
    }
    return st;
}

og_status og_cpu_experts(const og_kernels *k, og_pool *pool, const og_expert_job *jobs, int n_jobs) {
    og_expert_ws ws = {0};
    og_status st = og_cpu_experts_ws(k, pool, jobs, n_jobs, &ws);
    og_expert_ws_free(&ws);
    return st;
}

void og_expert_ws_free(og_expert_ws *ws) {
    og_buf_free(&ws->mid);
    og_buf_free(&ws->mm);
}
