/* The forward passes' shared pieces (fwd_ops.h). */
#include "fwd_ops.h"

#include <stdlib.h>
#include <string.h>

#define MM_ROWS_MAX 64 /* jobs per matmul op */

og_status og_fwd_begin(og_fwd *f, const og_run_ctx *rc, const bool *exact, og_device **own_dev, char *err,
                       size_t errlen) {
    *f = (og_fwd){.nm = rc->host_numerics, .exact = exact, .err = err, .errlen = errlen};
    *own_dev = NULL;
    og_status st = OG_OK;
    if (rc->dev) {
        f->dev = rc->dev;
        f->s = rc->stream;
    } else {
        st = og_device_host_create(rc->pool, rc->kern, own_dev, err, errlen);
        f->dev = *own_dev;
        if (!st) st = f->dev->ops->stream_create(f->dev, &f->s, err, errlen);
    }
    if (!st) f->ops = f->dev->ops;
    return st;
}

og_status og_fwd_mm_rows(og_fwd *f, const og_matmul_job *jobs, int n, int64_t t_base) {
    og_matmul_job buf[MM_ROWS_MAX];
    int nb = 0;
    og_status st = OG_OK;
    const bool split = f->exact && f->nm != OG_NUMERICS_CANONICAL;
    for (int j = 0; j < n && !st; j++) {
        const og_matmul_job *jb = &jobs[j];
        for (int64_t a0 = 0; a0 < jb->m && !st;) {
            const bool ex0 = split && f->exact[t_base + a0];
            int64_t a1 = a0 + 1;
            if (split)
                while (a1 < jb->m && f->exact[t_base + a1] == ex0) a1++;
            else
                a1 = jb->m;
            if (nb == MM_ROWS_MAX) {
                st = f->ops->matmul(f->dev, f->s, buf, nb, f->err, f->errlen);
                nb = 0;
                if (st) break;
            }
            buf[nb++] = (og_matmul_job){jb->w, jb->x + a0 * jb->w->K, a1 - a0, jb->y + a0 * jb->w->n_rows,
                                        ex0 ? OG_NUMERICS_CANONICAL : f->nm};
            a0 = a1;
        }
    }
    if (!st && nb) st = f->ops->matmul(f->dev, f->s, buf, nb, f->err, f->errlen);
    return st;
}

og_status og_fwd_mm(og_fwd *f, const og_weight *w, const float *x, int64_t m, float *y) {
    og_matmul_job j = {w, x, m, y, f->nm};
    if (f->nm == OG_NUMERICS_CANONICAL || f->exact) return og_fwd_mm_rows(f, &j, 1, 0);
    return f->ops->matmul(f->dev, f->s, &j, 1, f->err, f->errlen);
}

og_status og_fwd_norm(og_fwd *f, float *y, const float *x, int64_t n_rows, int64_t n, int64_t stride, const float *w,
                      float eps) {
    og_rmsnorm_op op = {{y, n, n_rows, stride}, {(float *)x, n, n_rows, stride}, w, eps};
    return f->ops->rmsnorm(f->dev, f->s, &op, f->err, f->errlen);
}

og_status og_fwd_sync(og_fwd *f) {
    og_event ev = 0;
    og_status st = f->ops->event_record(f->dev, f->s, &ev, f->err, f->errlen);
    if (!st) st = f->ops->event_wait(f->dev, ev, f->err, f->errlen);
    return st;
}

og_status og_fwd_drain(og_fwd *f, og_status st) {
    if (!st) return og_fwd_sync(f);
    char e2[64];
    og_fwd f2 = *f;
    f2.err = e2;
    f2.errlen = sizeof e2;
    (void)og_fwd_sync(&f2);
    return st;
}

og_status og_fwd_failure(og_status st, bool failed_here, const char *what, char *err, size_t errlen) {
    if (!st || failed_here) return st;
    char why[512];
    snprintf(why, sizeof why, "%s", err && errlen ? err : "");
    return og_fail(err, errlen, st, "%s failed: %s%s%s", what, og_status_str(st), why[0] ? ": " : "", why);
}

og_weight og_fwd_slice(const og_weight *w, int64_t r0, int64_t n) {
    og_weight s = *w;
    s.data = (const uint8_t *)w->data + (size_t)r0 * w->row_bytes;
    s.n_rows = n;
    return s;
}

void og_fwd_routes(const og_run_ctx *rc, uint32_t il, uint32_t E, int k, int64_t T, const int32_t *ids,
                   const float *wts, og_route *routes) {
    for (int64_t r = 0; r < T * k; r++) routes[r] = (og_route){(int32_t)(r / k), ids[r], wts[r]};
    if (!rc->stats) return;
    og_expert_stats *es = rc->stats;
    const size_t base = (size_t)il * E;
    uint64_t hits = 0;
    for (int64_t r = 0; r < T * k; r++) {
        size_t at = base + (size_t)routes[r].expert;
        es->counts[at]++;
        if (es->resident && es->resident[at]) hits++;
    }
    es->routes += (uint64_t)(T * k);
    es->routes_resident += hits;
    if (es->layer_routes) es->layer_routes[il] += (uint64_t)(T * k);
    if (es->layer_hits) es->layer_hits[il] += hits;
}

void *og_fwd_take(og_fwd_scratch_cut *s, uint64_t bytes) {
    bytes = (bytes + 63) & ~(uint64_t)63;
    void *r = s->base && s->used + bytes <= s->cap ? s->base + s->used : NULL;
    s->used += bytes;
    return r;
}

og_status og_fwd_scratch_get(const og_model *m, const og_run_ctx *rc, og_fwd *f, uint64_t need, int64_t n_tok,
                             int64_t n_out, og_fwd_scratch_cut *cut, void **own) {
    og_status st = OG_OK;
    *own = NULL;
    *cut = (og_fwd_scratch_cut){0};
    if (rc->scratch) {
        og_fwd_scratch *sc = rc->scratch;
        if (sc->bytes < need || sc->dev != rc->dev) { /* reserve frees the old one first */
            st = og_fwd_scratch_reserve(m, sc, rc->dev, n_tok, n_out, f->err, f->errlen);
            sc->grows++;
        }
        if (!st) *cut = (og_fwd_scratch_cut){sc->base, 0, sc->bytes};
        return st;
    }
    st = f->ops->alloc(f->dev, need, own, f->err, f->errlen);
    if (!st) *cut = (og_fwd_scratch_cut){*own, 0, need};
    return st;
}

void *og_seq_alloc(og_device *dev, uint64_t bytes) {
    void *p = NULL;
    if (dev) return dev->ops->alloc(dev, bytes, &p, NULL, 0) ? NULL : p;
    return aligned_alloc(64, (size_t)((bytes + 63) / 64 * 64));
}

void og_seq_mem_free(og_device *dev, void *p) {
    if (!p) return;
    if (dev) dev->ops->free(dev, p);
    else free(p);
}

void og_row_store_free(og_device *dev, og_row_store *s) {
    for (int b = 0; b < s->n_blocks; b++) og_seq_mem_free(dev, s->blocks[b]);
    free(s->blocks);
}

og_status og_row_store_reserve(og_device *dev, og_row_store *s, int64_t n_rows, uint64_t width) {
    while ((int64_t)s->n_blocks * OG_ROW_STORE_BLOCK < n_rows) {
        if (s->n_blocks == s->cap) {
            const int cap = s->cap ? 2 * s->cap : 8;
            float **nb = realloc(s->blocks, (size_t)cap * sizeof *nb);
            if (!nb) return OG_ERR_NOMEM;
            s->blocks = nb;
            s->cap = cap;
        }
        if (!(s->blocks[s->n_blocks] = og_seq_alloc(dev, OG_ROW_STORE_BLOCK * width * sizeof(float))))
            return OG_ERR_NOMEM;
        s->n_blocks++;
    }
    return OG_OK;
}

float *og_row_store_row(const og_row_store *s, int64_t c, uint64_t width) {
    return s->blocks[c / OG_ROW_STORE_BLOCK] + (uint64_t)(c % OG_ROW_STORE_BLOCK) * width;
}

og_status og_seq_copy(og_device *dev, og_stream *s, void *dst, const void *src, uint64_t bytes, char *err,
                      size_t errlen) {
    if (!dev) {
        memcpy(dst, src, (size_t)bytes);
        return OG_OK;
    }
    og_copy_op cp = {.dst = dst, .src = src, .row_bytes = bytes, .n_rows = 1, .n_mats = 1};
    return dev->ops->copy(dev, s, &cp, err, errlen);
}

og_status og_row_store_copy(og_device *dev, og_stream *s, og_row_store *b, const og_row_store *a, int64_t n_rows,
                            uint64_t width, char *err, size_t errlen) {
    for (int64_t c = 0; c < n_rows; c += OG_ROW_STORE_BLOCK) {
        const int64_t n = n_rows - c < OG_ROW_STORE_BLOCK ? n_rows - c : OG_ROW_STORE_BLOCK;
        og_status st = og_seq_copy(dev, s, og_row_store_row(b, c, width), og_row_store_row(a, c, width),
                                   (uint64_t)n * width * sizeof(float), err, errlen);
        if (st) return st;
    }
    return OG_OK;
}

og_status og_seq_copies_wait(og_device *dev, og_stream *s, og_status st, char *err, size_t errlen) {
    if (!dev) return st;
    char e2[64];
    og_event ev;
    og_status ws = dev->ops->event_record(dev, s, &ev, st ? e2 : err, st ? sizeof e2 : errlen);
    if (!ws) ws = dev->ops->event_wait(dev, ev, st ? e2 : err, st ? sizeof e2 : errlen);
    return st ? st : ws;
}

og_status og_fwd_grouped_output(og_fwd *f, const og_weight *o_a, const og_weight *o_b, int64_t T, int64_t HD, int64_t G,
                                int64_t o_rank, const float *o, float *og, float *low, float *lowt, og_matmul_job *jobs,
                                og_weight *wts, float *y) {
    const int64_t gin = HD / G;
    const uint64_t fb = sizeof(float);
    og_copy_op cp = {og, o, (uint64_t)gin * fb, (uint64_t)T, (uint64_t)G, (uint64_t)gin * fb, (uint64_t)(T * gin) * fb,
                     (uint64_t)HD * fb, (uint64_t)gin * fb};
    og_status st = f->ops->copy(f->dev, f->s, &cp, f->err, f->errlen);
    for (int64_t g = 0; g < G; g++) {
        wts[g] = og_fwd_slice(o_a, g * o_rank, o_rank);
        jobs[g] = (og_matmul_job){&wts[g], og + g * T * gin, T, low + g * T * o_rank, OG_NUMERICS_FORK};
    }
    if (!st) st = og_fwd_mm_rows(f, jobs, (int)G, 0);
    og_copy_op cl = {lowt, low, (uint64_t)o_rank * fb, (uint64_t)T, (uint64_t)G, (uint64_t)(G * o_rank) * fb,
                     (uint64_t)o_rank * fb, (uint64_t)o_rank * fb, (uint64_t)(T * o_rank) * fb};
    if (!st) st = f->ops->copy(f->dev, f->s, &cl, f->err, f->errlen);
    return st ? st : og_fwd_mm(f, o_b, lowt, T, y);
}
