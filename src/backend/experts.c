/* Routed (and shared) experts on the CPU: the expert op of both the host pool and
 * the cpu device (og_device.h), so resident and cold experts run one code path. */
#include "og_backend.h"

#include <math.h>
#include <stdlib.h>

#define CHUNK 60 /* experts per pool run: 4 jobs each at most within og_cpu_matmul_multi's 256 */

/* Grows *buf to at least bytes. */
static og_status grow(void **buf, size_t *cap, size_t bytes) {
    if (bytes <= *cap) return OG_OK;
    void *np = realloc(*buf, bytes);
    if (!np) return OG_ERR_NOMEM;
    *buf = np;
    *cap = bytes;
    return OG_OK;
}

og_status og_cpu_experts(const og_kernels *k, og_pool *pool, const og_expert_job *jobs, int n_jobs) {
    if (n_jobs < 0) return OG_ERR_INVALID_ARG;
    size_t total_f = 0; /* gate and up outputs of every job */
    for (int i = 0; i < n_jobs; i++) {
        const og_expert_job *j = &jobs[i];
        if (j->m < 0 || j->gate.K != j->up.K || j->gate.n_rows != j->up.n_rows || j->down.K != j->gate.n_rows ||
            j->down.n_rows != j->gate.K || !(j->swiglu_clamp >= 0 && isfinite(j->swiglu_clamp)))
            return OG_ERR_INVALID_ARG;
        total_f += 2 * (size_t)j->m * (size_t)j->gate.n_rows;
    }
    float *gu = malloc((total_f + 1) * sizeof *gu);
    og_matmul_job *mj = malloc(2 * CHUNK * sizeof *mj);
    void *scratch = NULL;
    size_t scap = 0;
    og_status st = gu && mj ? OG_OK : OG_ERR_NOMEM;
    float *base = gu;
    for (int c0 = 0; c0 < n_jobs && !st; c0 += CHUNK) {
        const int c1 = c0 + CHUNK < n_jobs ? c0 + CHUNK : n_jobs;
        int nj = 0;
        float *g = base;
        for (int i = c0; i < c1; i++) { /* gate rows then up rows of each job */
            const og_expert_job *j = &jobs[i];
            const size_t mf = (size_t)j->m * (size_t)j->gate.n_rows;
            mj[nj++] = (og_matmul_job){&j->gate, j->x, j->m, g, j->numerics};
            mj[nj++] = (og_matmul_job){&j->up, j->x, j->m, g + mf, j->numerics};
            g += 2 * mf;
        }
        if ((st = grow(&scratch, &scap, og_cpu_matmul_multi_scratch(mj, nj) + 1)) ||
            (st = og_cpu_matmul_multi(k, pool, mj, nj, scratch, scap)))
            break;
        nj = 0;
        g = base;
        for (int i = c0; i < c1; i++) {
            const og_expert_job *j = &jobs[i];
            const size_t mf = (size_t)j->m * (size_t)j->gate.n_rows;
            if (j->swiglu_clamp > 0) og_swiglu_clamp(g, g, g + mf, (int64_t)mf, j->swiglu_clamp);
            else og_swiglu(g, g, g + mf, (int64_t)mf);
            mj[nj++] = (og_matmul_job){&j->down, g, j->m, j->y, j->numerics};
            g += 2 * mf;
        }
        base = g;
        if ((st = grow(&scratch, &scap, og_cpu_matmul_multi_scratch(mj, nj) + 1))) break;
        st = og_cpu_matmul_multi(k, pool, mj, nj, scratch, scap);
    }
    free(gu);
    free(mj);
    free(scratch);
    return st;
}
