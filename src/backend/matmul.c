/* Quantized matrix products on the CPU: quantize each activation row once, then
 * split the weight rows between threads. With several activation rows, a thread
 * walks a small band of weight rows against every activation row before moving
 * on, so each weight byte comes from DRAM once per call; a canonical job with
 * TILE_MIN_M rows or more goes through the tier's tiled product
 * (og_kernels.gemm_canonical, bands of one 32-row tile), the same bits. */
#include "og_backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ROW_BAND 16 /* weight rows a thread keeps hot while it visits all activations */
#define TILE_BAND 32 /* the same for a tiled canonical job: one tile of og_gemm_fn (OG_TILE_ROWS) */
#define TILE_MIN_M 8 /* activation rows from which the tiled product beats vec_dot4 (unpacking a tile costs
                        about as much as 4-6 rows of products: bench/RESULTS.md) */

size_t og_cpu_matmul_scratch(og_ggml_type wtype, int64_t K, int64_t m) {
    const og_type_traits *tr = og_quant_traits(wtype);
    if (!tr) return 0;
    uint64_t row;
    if (og_row_bytes(tr->vec_dot_type, (uint64_t)K, &row) != OG_OK) return 0;
    return (size_t)(row * (uint64_t)m);
}

typedef struct job {
    const og_kernels *k;
    const og_weight *w;
    const float *x;
    int64_t m;
    float *y;
    uint8_t *xq;       /* m quantized activation rows */
    size_t xq_row;     /* bytes per quantized row */
    og_ggml_type act;  /* activation type */
} job;

static void quantize_rows(void *ctx, int ith, int nth) {
    job *j = ctx;
    for (int64_t r = ith; r < j->m; r += nth)
        j->k->quantize_act[j->act](j->x + r * j->w->K, j->xq + (size_t)r * j->xq_row, j->w->K);
}

/* Weight rows r0..r1 against m quantized activation rows (xq, xq_row bytes apart):
 * y[a * n_rows + r]. Four activation rows at a time go through vec_dot4 where the
 * tier has it (one pass over each weight row for four), the rest one by one, four
 * weight rows at a time where the tier has a canonical vec_dot_r4 (matrix x
 * vector); the bits are vec_dot's either way, so a row's result never depends on
 * the batch. canon: the canonical kernels (vec_dot_canonical, vec_dot4_canonical,
 * vec_dot_r4_canonical). */
static void band_dot(const og_kernels *k, bool canon, const og_weight *w, const uint8_t *xq, size_t xq_row, int64_t m,
                     float *y, int64_t r0, int64_t r1) {
    og_vec_dot_fn dot = canon ? k->vec_dot_canonical[w->type] : k->vec_dot[w->type];
    og_vec_dot4_fn dot4 = canon ? k->vec_dot4_canonical[w->type] : k->vec_dot4[w->type];
    int64_t a = 0;
    if (dot4)
        for (; a + 4 <= m; a += 4) {
            const void *ys[4] = {xq + (size_t)a * xq_row, xq + (size_t)(a + 1) * xq_row, xq + (size_t)(a + 2) * xq_row,
                                 xq + (size_t)(a + 3) * xq_row};
            for (int64_t r = r0; r < r1; r++) {
                float s4[4];
                dot4(w->K, s4, (const uint8_t *)w->data + (size_t)r * w->row_bytes, ys);
                for (int i = 0; i < 4; i++) y[(a + i) * w->n_rows + r] = s4[i];
            }
        }
    const og_vec_dot_r4_fn dotr4 = canon ? k->vec_dot_r4_canonical[w->type] : NULL;
    for (; a < m; a++) {
        const uint8_t *xa = xq + (size_t)a * xq_row;
        float *ya = y + a * w->n_rows;
        int64_t r = r0;
        if (dotr4)
            for (; r + 4 <= r1; r += 4) dotr4(w->K, &ya[r], (const uint8_t *)w->data + (size_t)r * w->row_bytes, w->row_bytes, xa);
        for (; r < r1; r++) dot(w->K, &ya[r], (const uint8_t *)w->data + (size_t)r * w->row_bytes, xa);
    }
}

static void dot_rows(void *ctx, int ith, int nth) {
    job *j = ctx;
    const og_weight *w = j->w;
    /* contiguous share of rows per thread, in whole bands */
    int64_t bands = (w->n_rows + ROW_BAND - 1) / ROW_BAND;
    int64_t b0 = bands * ith / nth, b1 = bands * (ith + 1) / nth;
    for (int64_t b = b0; b < b1; b++) {
        int64_t r0 = b * ROW_BAND, r1 = r0 + ROW_BAND < w->n_rows ? r0 + ROW_BAND : w->n_rows;
        band_dot(j->k, false, w, j->xq, j->xq_row, j->m, j->y, r0, r1);
    }
}

og_status og_cpu_matmul(const og_kernels *k, og_pool *pool, const og_weight *w, const float *x, int64_t m,
                        float *y, void *scratch, size_t scratch_bytes) {
    const og_type_traits *tr = og_quant_traits(w->type);
    if (!tr || !k->vec_dot[w->type] || !k->quantize_act[tr->vec_dot_type]) return OG_ERR_UNSUPPORTED;
    if (m < 0 || w->K <= 0 || w->n_rows < 0 || w->K % tr->blck) return OG_ERR_INVALID_ARG;
    size_t need = og_cpu_matmul_scratch(w->type, w->K, m);
    if (scratch_bytes < need || (need && !scratch)) return OG_ERR_INVALID_ARG;
    if (m == 0 || w->n_rows == 0) return OG_OK;
    job j = {.k = k, .w = w, .x = x, .m = m, .y = y, .xq = scratch, .xq_row = need / (size_t)m, .act = tr->vec_dot_type};
    if (m == 1 || !pool) quantize_rows(&j, 0, 1); /* one row: not worth a wake-up */
    else og_pool_run(pool, quantize_rows, &j);
    og_pool_run(pool, dot_rows, &j);
    return OG_OK;
}

/* ---- several products in one run ------------------------------------------- */

#define MAX_JOBS 256

typedef struct multi {
    const og_kernels *k;
    const og_matmul_job *jobs;
    int n;
    uint8_t *xq[MAX_JOBS];
    size_t xq_row[MAX_JOBS];
    int64_t band_start[MAX_JOBS + 1]; /* prefix sums of bands per job */
    int band_rows[MAX_JOBS];          /* ROW_BAND, or TILE_BAND for a tiled job */
    double cost_start[MAX_JOBS + 1];  /* prefix sums of the jobs' estimated work (band_cost) */
    double band_cost[MAX_JOBS];       /* a whole band's estimated work */
    int same_xq[MAX_JOBS];            /* -1, or an earlier job whose quantized rows job j reads (the same x) */
    bool own_xq[MAX_JOBS];            /* job j's rows are quantized by this call (not given, not shared) */
    size_t work_bytes;                /* the largest og_gemm_canonical_work of a tiled job (per thread) */
    uint8_t *work;                    /* NULL, or [nth][work_bytes rounded to 64]: the threads' kept tiles */
    og_ggml_type act[MAX_JOBS];       /* activation type of a quantizing job */
} multi;

#define QUANT_PARALLEL_MIN 65536 /* activation elements from which the quantizing is shared out */

/* Thread ith of nth quantizes its share of every quantizing job's activation rows
 * (row r of job j goes to thread (r + j) % nth), each row alone. */
static void multi_quantize(void *ctx, int ith, int nth) {
    multi *mu = ctx;
    for (int j = 0; j < mu->n; j++) {
        if (!mu->own_xq[j]) continue;
        const og_matmul_job *jb = &mu->jobs[j];
        for (int64_t r = (ith + nth - j % nth) % nth; r < jb->m; r += nth)
            mu->k->quantize_act[mu->act[j]](jb->x + r * jb->w->K, mu->xq[j] + (size_t)r * mu->xq_row[j], jb->w->K);
    }
}

/* True if job j goes through the tiled canonical product (og_kernels.gemm_canonical):
 * canonical, quantized, enough activation rows to pay for unpacking the tiles. */
static bool tiled(const og_kernels *k, const og_matmul_job *j) {
    return j->numerics == OG_NUMERICS_CANONICAL && j->m >= TILE_MIN_M && k->gemm_canonical[j->w->type] &&
           og_gemm_canonical_work(j->w->type, j->w->K) > 0 && j->w->row_bytes <= OG_GEMM_MAX_STRIDE;
}

/* True if job j's activations are quantized (the fork, and the canonical order of
 * quantized types); false for a canonical job on a float type (f32 activations). */
static bool quantizes(const og_matmul_job *j) {
    const og_type_traits *tr = og_quant_traits(j->w->type);
    return j->numerics == OG_NUMERICS_FORK || (tr && tr->vec_dot_canonical);
}

/* A band's estimated work, in weight elements times activation rows: every row of
 * the band against its m activation rows, plus what unpacking a tile costs (about
 * as much as TILE_MIN_M / 2 rows of products, bench/RESULTS.md) or streaming a
 * weight row for a row band (about one row's products). Only the threads' split
 * uses it. */
static double band_cost(const og_matmul_job *j, int rows, bool tile) {
    const int64_t r = j->w->n_rows < rows ? j->w->n_rows : rows;
    return (double)r * (double)j->w->K * ((double)j->m + (tile ? TILE_MIN_M / 2 : 1));
}

size_t og_cpu_matmul_multi_scratch(const og_matmul_job *jobs, int n_jobs) {
    size_t total = 0;
    for (int j = 0; j < n_jobs; j++)
        if (quantizes(&jobs[j]))
            total += (og_cpu_matmul_scratch(jobs[j].w->type, jobs[j].w->K, jobs[j].m) + 63) & ~(size_t)63;
    return total;
}

/* Rows r0..r1 of a OG_NUMERICS_CANONICAL job on a float type: each weight row
 * widened once, then dotted with every activation row in device order. */
static void device_rows(const og_kernels *k, const og_matmul_job *jb, int64_t r0, int64_t r1) {
    const og_weight *w = jb->w;
    const og_type_traits *tr = og_quant_traits(w->type);
    float row[OG_NUMERICS_CANONICAL_MAX_K];
    float (*fused)(const void *, const float *, int64_t) = k->dot_device[w->type];
    void (*fused4)(const void *, size_t, const float *, int64_t, float *) = k->dot_device4[w->type];
    if (fused4) /* four rows at a time: four independent fma chains (same bits) */
        for (; r0 + 4 <= r1; r0 += 4) {
            const void *wr = (const uint8_t *)w->data + (size_t)r0 * w->row_bytes;
            for (int64_t a = 0; a < jb->m; a++) {
                float out[4];
                fused4(wr, w->row_bytes, jb->x + a * w->K, w->K, out);
                for (int i = 0; i < 4; i++) jb->y[a * w->n_rows + r0 + i] = out[i];
            }
        }
    for (int64_t r = r0; r < r1; r++) {
        if (fused) {
            const void *wr = (const uint8_t *)w->data + (size_t)r * w->row_bytes;
            for (int64_t a = 0; a < jb->m; a++) jb->y[a * w->n_rows + r] = fused(wr, jb->x + a * w->K, w->K);
            continue;
        }
        tr->to_float((const uint8_t *)w->data + (size_t)r * w->row_bytes, row, w->K);
        for (int64_t a = 0; a < jb->m; a++) jb->y[a * w->n_rows + r] = k->dot_f32_device(row, jb->x + a * w->K, w->K);
    }
}

/* The first band of thread ith's share: the bands are split where the estimated
 * work (cost_start, band_cost) crosses ith / nth of the whole, not by their count
 * (a band of a 100-row job is many times one of a 4-row job's). Each band is
 * computed alike whichever thread takes it: the split never changes a bit. */
static int64_t share_start(const multi *mu, int ith, int nth) {
    if (ith <= 0) return 0;
    if (ith >= nth) return mu->band_start[mu->n];
    const double at = mu->cost_start[mu->n] * ith / nth;
    int j = 0;
    while (j + 1 < mu->n && mu->cost_start[j + 1] <= at) j++;
    const int64_t nb = mu->band_start[j + 1] - mu->band_start[j];
    int64_t k = mu->band_cost[j] > 0 ? (int64_t)ceil((at - mu->cost_start[j]) / mu->band_cost[j]) : nb;
    if (k < 0) k = 0;
    if (k > nb) k = nb;
    return mu->band_start[j] + k;
}

static void multi_rows(void *ctx, int ith, int nth) {
    multi *mu = ctx;
    int64_t b0 = share_start(mu, ith, nth), b1 = share_start(mu, ith + 1, nth);
    int j = 0;
    /* this thread's unpacked tiles: its slice of the caller's workspace, or
     * allocated at its first tiled band */
    const size_t wstride = (mu->work_bytes + 63) & ~(size_t)63;
    void *work = mu->work ? mu->work + (size_t)ith * wstride : NULL;
    bool no_work = false;
    for (int64_t b = b0; b < b1; b++) {
        while (b >= mu->band_start[j + 1]) j++;
        const og_matmul_job *jb = &mu->jobs[j];
        const og_weight *w = jb->w;
        const int64_t br = mu->band_rows[j];
        int64_t r0 = (b - mu->band_start[j]) * br, r1 = r0 + br < w->n_rows ? r0 + br : w->n_rows;
        if (!mu->xq[j]) {
            device_rows(mu->k, jb, r0, r1);
            continue;
        }
        if (br == TILE_BAND && !work && !no_work) no_work = !(work = malloc(mu->work_bytes));
        if (br == TILE_BAND && work) { /* the same bits as band_dot's (tested): only faster */
            mu->k->gemm_canonical[w->type](w->K, (const uint8_t *)w->data + (size_t)r0 * w->row_bytes, w->row_bytes, r1 - r0,
                                           mu->xq[j], mu->xq_row[j], jb->m, jb->y + r0, (size_t)w->n_rows, work);
            continue;
        }
        band_dot(mu->k, jb->numerics == OG_NUMERICS_CANONICAL, w, mu->xq[j], mu->xq_row[j], jb->m, jb->y, r0, r1);
    }
    if (!mu->work) free(work);
}

/* og_cpu_matmul_multi's body: the quantized rows in scratch, or (ws non-NULL)
 * the rows and every thread's tiles in ws, grown to fit. */
static og_status multi_run(const og_kernels *k, og_pool *pool, const og_matmul_job *jobs, int n_jobs, void *scratch,
                           size_t scratch_bytes, og_buf *ws, const og_act_rows *given) {
    if (n_jobs < 0 || n_jobs > MAX_JOBS) return OG_ERR_INVALID_ARG;
    if (!ws && scratch_bytes < og_cpu_matmul_multi_scratch(jobs, n_jobs)) return OG_ERR_INVALID_ARG;
    multi mu = {.k = k, .jobs = jobs, .n = n_jobs, .work_bytes = 0};
    size_t xq_off[MAX_JOBS]; /* offsets into the quantized rows until their base is known */
    size_t p = 0;
    mu.band_start[0] = 0;
    mu.cost_start[0] = 0;
    for (int j = 0; j < n_jobs; j++) {
        const og_weight *w = jobs[j].w;
        const og_type_traits *tr = og_quant_traits(w->type);
        if (jobs[j].m < 0 || w->K <= 0 || (tr && w->K % tr->blck)) return OG_ERR_INVALID_ARG;
        if (!quantizes(&jobs[j])) {
            if (!tr || !tr->to_float || !k->dot_f32_device || w->K > OG_NUMERICS_CANONICAL_MAX_K) return OG_ERR_UNSUPPORTED;
            if (given && given[j].xq) return OG_ERR_INVALID_ARG; /* f32 activations: nothing quantized to give */
            mu.xq[j] = NULL;
            mu.xq_row[j] = 0;
            mu.band_rows[j] = ROW_BAND;
            mu.same_xq[j] = -1;
            mu.own_xq[j] = false;
            mu.band_start[j + 1] = mu.band_start[j] + (jobs[j].m ? (w->n_rows + ROW_BAND - 1) / ROW_BAND : 0);
            mu.band_cost[j] = band_cost(&jobs[j], ROW_BAND, false);
            mu.cost_start[j + 1] = mu.cost_start[j] + mu.band_cost[j] * (double)(mu.band_start[j + 1] - mu.band_start[j]);
            continue;
        }
        const og_vec_dot_fn dot = jobs[j].numerics == OG_NUMERICS_CANONICAL ? k->vec_dot_canonical[w->type] : k->vec_dot[w->type];
        if (!tr || !dot || !k->quantize_act[tr->vec_dot_type]) return OG_ERR_UNSUPPORTED;
        size_t need = og_cpu_matmul_scratch(w->type, w->K, jobs[j].m);
        mu.xq[j] = (uint8_t *)jobs; /* any non-NULL mark: set below */
        mu.xq_row[j] = jobs[j].m ? need / (size_t)jobs[j].m : 0;
        mu.act[j] = tr->vec_dot_type;
        /* the same activation rows quantized to the same type (a gate and up pair,
         * q_a and kv_a): the bytes are a function of the row alone, so once */
        mu.same_xq[j] = -1;
        for (int i = 0; i < j && mu.same_xq[j] < 0 && !(given && given[j].xq); i++)
            if (mu.own_xq[i] && jobs[i].x == jobs[j].x && jobs[i].m == jobs[j].m && jobs[i].w->K == w->K &&
                mu.act[i] == mu.act[j])
                mu.same_xq[j] = i;
        mu.own_xq[j] = !(given && given[j].xq) && mu.same_xq[j] < 0;
        if (given && given[j].xq) { /* given: the caller's rows, the act type's row bytes apart or more */
            if (jobs[j].m && given[j].xq_row < mu.xq_row[j]) return OG_ERR_INVALID_ARG;
            mu.xq_row[j] = given[j].xq_row;
        }
        xq_off[j] = mu.same_xq[j] >= 0 ? xq_off[mu.same_xq[j]] : p;
        if (mu.own_xq[j]) p += (need + 63) & ~(size_t)63;
        mu.band_rows[j] = tiled(k, &jobs[j]) ? TILE_BAND : ROW_BAND;
        if (mu.band_rows[j] == TILE_BAND && og_gemm_canonical_work(w->type, w->K) > mu.work_bytes)
            mu.work_bytes = og_gemm_canonical_work(w->type, w->K);
        mu.band_start[j + 1] = mu.band_start[j] + (jobs[j].m ? (w->n_rows + mu.band_rows[j] - 1) / mu.band_rows[j] : 0);
        mu.band_cost[j] = band_cost(&jobs[j], mu.band_rows[j], mu.band_rows[j] == TILE_BAND);
        mu.cost_start[j + 1] = mu.cost_start[j] + mu.band_cost[j] * (double)(mu.band_start[j + 1] - mu.band_start[j]);
    }
    uint8_t *base = scratch;
    if (ws) { /* the rows, then [nth] tile buffers */
        const size_t nth = pool ? (size_t)og_pool_size(pool) : 1, wstride = (mu.work_bytes + 63) & ~(size_t)63;
        if (og_buf_reserve(ws, p + nth * wstride + 64)) return OG_ERR_NOMEM;
        base = ws->p;
        mu.work = mu.work_bytes ? base + p : NULL;
    }
    for (int j = 0; j < n_jobs; j++)
        if (mu.xq[j]) mu.xq[j] = (given && given[j].xq) ? (uint8_t *)(uintptr_t)given[j].xq : base + xq_off[j];
    /* each activation row quantized alone (batch-invariant: the same bytes whichever
     * thread does it); shared out when there are many */
    int64_t q_rows = 0, q_elems = 0;
    for (int j = 0; j < n_jobs; j++)
        if (mu.own_xq[j]) q_rows += jobs[j].m, q_elems += jobs[j].m * jobs[j].w->K;
    if (q_rows > 1 && q_elems >= QUANT_PARALLEL_MIN && pool) og_pool_run(pool, multi_quantize, &mu);
    else if (q_rows) multi_quantize(&mu, 0, 1);
    if (mu.band_start[n_jobs] > 0) og_pool_run(pool, multi_rows, &mu);
    return OG_OK;
}

og_status og_cpu_matmul_multi(const og_kernels *k, og_pool *pool, const og_matmul_job *jobs, int n_jobs, void *scratch,
                              size_t scratch_bytes) {
    return multi_run(k, pool, jobs, n_jobs, scratch, scratch_bytes, NULL, NULL);
}

og_status og_cpu_matmul_multi_ws(const og_kernels *k, og_pool *pool, const og_matmul_job *jobs, int n_jobs, og_buf *ws) {
    return multi_run(k, pool, jobs, n_jobs, NULL, 0, ws, NULL);
}

og_status og_cpu_matmul_multi_given_ws(const og_kernels *k, og_pool *pool, const og_matmul_job *jobs, int n_jobs,
                                       const og_act_rows *given, og_buf *ws) {
    return multi_run(k, pool, jobs, n_jobs, NULL, 0, ws, given);
}
