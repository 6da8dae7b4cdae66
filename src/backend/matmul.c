/* Quantized matrix products on the CPU: quantize each activation row once, then
 * split the weight rows between threads. With several activation rows, a thread
 * walks a small band of weight rows against every activation row before moving
 * on, so each weight byte comes from DRAM once per call. */
#include "og_backend.h"

#include <string.h>

#define ROW_BAND 16 /* weight rows a thread keeps hot while it visits all activations */

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

static void dot_rows(void *ctx, int ith, int nth) {
    job *j = ctx;
    const og_weight *w = j->w;
    og_vec_dot_fn dot = j->k->vec_dot[w->type];
    /* contiguous share of rows per thread, in whole bands */
    int64_t bands = (w->n_rows + ROW_BAND - 1) / ROW_BAND;
    int64_t b0 = bands * ith / nth, b1 = bands * (ith + 1) / nth;
    for (int64_t b = b0; b < b1; b++) {
        int64_t r0 = b * ROW_BAND, r1 = r0 + ROW_BAND < w->n_rows ? r0 + ROW_BAND : w->n_rows;
        for (int64_t a = 0; a < j->m; a++) {
            const uint8_t *xq = j->xq + (size_t)a * j->xq_row;
            float *ya = j->y + a * w->n_rows;
            for (int64_t r = r0; r < r1; r++)
                dot(w->K, &ya[r], (const uint8_t *)w->data + (size_t)r * w->row_bytes, xq);
        }
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
