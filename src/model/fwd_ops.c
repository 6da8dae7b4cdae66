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
    } else if (rc->scratch) { /* the host device kept with the scratch (its op scratch with it) */
        og_fwd_scratch *sc = rc->scratch;
        og_event ev;
        if (sc->host_dev && (sc->host_pool != rc->pool || sc->host_kern != rc->kern ||
                             sc->host_dev->ops->event_record(sc->host_dev, NULL, &ev, NULL, 0) != OG_OK)) {
            /* another pool or kernels, or a failed op earlier (a host device keeps failing after one) */
            og_device_destroy(sc->host_dev);
            sc->host_dev = NULL;
        }
        if (!sc->host_dev && !(st = og_device_host_create(rc->pool, rc->kern, &sc->host_dev, err, errlen))) {
            sc->host_pool = rc->pool;
            sc->host_kern = rc->kern;
        }
        f->dev = sc->host_dev;
        if (!st) st = f->dev->ops->stream_create(f->dev, &f->s, err, errlen);
    } else {
        st = og_device_host_create(rc->pool, rc->kern, own_dev, err, errlen);
        f->dev = *own_dev;
        if (!st) st = f->dev->ops->stream_create(f->dev, &f->s, err, errlen);
    }
    if (!st) f->ops = f->dev->ops;
    f->wt = rc->dev ? rc->weights : NULL;
    return st;
}

og_status og_fwd_weight(const og_fwd *f, const og_weight *w, const char *what, og_weight *out) {
    *out = *w;
    if (!f->wt || !w->data) return OG_OK;
    if (!(out->data = og_dev_weights_find(f->wt, w->data, (uint64_t)w->n_rows * w->row_bytes)))
        return og_fail(f->err, f->errlen, OG_ERR_STATE, "forward pass: %s has no copy in device memory", what);
    return OG_OK;
}

og_status og_fwd_vec(const og_fwd *f, const float *v, int64_t n, const char *what, const float **out) {
    *out = v;
    if (!f->wt || !v) return OG_OK;
    if (!(*out = og_dev_weights_find(f->wt, v, (uint64_t)n * sizeof(float))))
        return og_fail(f->err, f->errlen, OG_ERR_STATE, "forward pass: %s has no copy in device memory", what);
    return OG_OK;
}

og_status og_fwd_ptr(const og_fwd *f, const void *p, const char *what, const void **out) {
    *out = p;
    if (!f->wt || !p) return OG_OK;
    if (!(*out = og_dev_weights_find(f->wt, p, 1)))
        return og_fail(f->err, f->errlen, OG_ERR_STATE, "forward pass: %s has no copy in device memory", what);
    return OG_OK;
}

og_status og_fwd_weights(const og_fwd *f, const og_fwd_wmap *ws, size_t n) {
    og_status st = OG_OK;
    for (size_t i = 0; i < n && !st; i++) st = og_fwd_weight(f, ws[i].w, ws[i].what, ws[i].o);
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

og_status og_fwd_host_get(const og_run_ctx *rc, uint64_t need, og_fwd_scratch_cut *cut, void **own) {
    *own = NULL;
    *cut = (og_fwd_scratch_cut){0};
    if (rc->scratch) {
        if (og_buf_reserve(&rc->scratch->host, (size_t)need)) return OG_ERR_NOMEM;
        *cut = (og_fwd_scratch_cut){rc->scratch->host.p, 0, rc->scratch->host.cap};
        return OG_OK;
    }
    if (!(*own = aligned_alloc(64, (size_t)((need + 63) / 64 * 64)))) return OG_ERR_NOMEM;
    *cut = (og_fwd_scratch_cut){*own, 0, need};
    return OG_OK;
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

static void plan_take(og_fwd_scratch_cut *c, og_fwd_plan *p, int64_t T, int n_seq) {
    const uint64_t t = (uint64_t)T, ns = (uint64_t)n_seq;
    memset(p, 0, sizeof *p);
    p->pos = og_fwd_take(c, t * sizeof *p->pos);
    p->start = og_fwd_take(c, ns * sizeof *p->start);
    p->next = og_fwd_take(c, ns * sizeof *p->next);
    p->tok_at = og_fwd_take(c, t * sizeof *p->tok_at);
    p->seq_off = og_fwd_take(c, (ns + 1) * sizeof *p->seq_off);
    p->canon = og_fwd_take(c, t * sizeof *p->canon);
    p->st = og_fwd_take(c, ns * sizeof *p->st);
}

static void host_take(og_fwd_scratch_cut *c, const og_fwd_host_shape *sh, og_fwd_plan *p, og_fwd_host *a) {
    const uint64_t t = (uint64_t)sh->T, ns = (uint64_t)sh->n_seq, nb = (uint64_t)sh->nb, k = sh->k, N = sh->N;
    plan_take(c, p, sh->T, sh->n_seq);
    memset(a, 0, sizeof *a);
    a->rows = og_fwd_take(c, t * sh->n_swa * sizeof *a->rows);
    a->row_off = og_fwd_take(c, (t + 1) * sizeof *a->row_off);
    a->blocks = og_fwd_take(c, (nb * ns + 1) * sizeof *a->blocks);
    a->kblocks = og_fwd_take(c, (nb * ns + 1) * sizeof *a->kblocks);
    a->cfirst = og_fwd_take(c, t * sizeof *a->cfirst);
    a->ncomp = og_fwd_take(c, t * sizeof *a->ncomp);
    a->kfirst = og_fwd_take(c, t * sizeof *a->kfirst);
    a->nkeys = og_fwd_take(c, t * sizeof *a->nkeys);
    a->first_of = og_fwd_take(c, (ns + 1) * sizeof *a->first_of);
    a->state = og_fwd_take(c, t * sizeof *a->state);
    a->out = og_fwd_take(c, t * sizeof *a->out);
    a->pos_mod = og_fwd_take(c, t * sizeof *a->pos_mod);
    a->neg_pos = og_fwd_take(c, t * sizeof *a->neg_pos);
    a->seq_idx = og_fwd_take(c, t * sizeof *a->seq_idx);
    a->h_ids = og_fwd_take(c, t * k * sizeof *a->h_ids);
    a->h_w = og_fwd_take(c, t * k * sizeof *a->h_w);
    a->hx = og_fwd_take(c, t * N * sizeof *a->hx);
    a->hy = og_fwd_take(c, t * N * sizeof *a->hy);
    a->routes = og_fwd_take(c, t * k * sizeof *a->routes);
    a->jobs = og_fwd_take(c, sh->n_jobs * sizeof *a->jobs);
    a->wts = og_fwd_take(c, sh->G * sizeof *a->wts);
    a->ring = og_fwd_take(c, ns * sizeof *a->ring);
    a->cst = og_fwd_take(c, ns * sizeof *a->cst);
    a->kst = og_fwd_take(c, ns * sizeof *a->kst);
    a->sts = og_fwd_take(c, ns * sizeof *a->sts);
    a->ists = og_fwd_take(c, ns * sizeof *a->ists);
}

og_status og_fwd_host_carve(const og_run_ctx *rc, const og_fwd_host_shape *sh, og_fwd_plan *p, og_fwd_host *a,
                            void (*more)(og_fwd_scratch_cut *c, void *ctx), void *ctx, void **own, const char *what,
                            char *err, size_t errlen) {
    og_fwd_scratch_cut c = {0};
    for (int pass = 0; pass < 2; pass++) { /* counting, then carving */
        if (pass) {
            const og_status st = og_fwd_host_get(rc, c.used, &c, own);
            if (st) return og_fail(err, errlen, st, "%s: out of memory for the host arrays", what);
        }
        host_take(&c, sh, p, a);
        if (more) more(&c, ctx);
    }
    return OG_OK;
}

og_status og_fwd_call_check(const og_run_ctx *rc, int64_t n_tok, int n_seq, char *err, size_t errlen) {
    if (err && errlen) err[0] = 0;
    if (n_tok <= 0 || n_seq <= 0) return og_fail(err, errlen, OG_ERR_INVALID_ARG, "no tokens");
    if (!rc->dispatch || !rc->dispatch->type || !rc->dispatch->type->moe_layer)
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "a MoE model needs a dispatcher (og_run_ctx.dispatch)");
    return OG_OK;
}

int64_t og_fwd_store_blocks_bound(og_kv *const *kvs, int n_seq, int64_t n_tok, int64_t (*held)(const og_kv *kv)) {
    int64_t nb = 0;
    for (int s = 0; s < n_seq; s++) {
        const int64_t need = ((int64_t)kvs[s]->n_pos + n_tok + OG_ROW_STORE_BLOCK - 1) / OG_ROW_STORE_BLOCK;
        const int64_t have = held(kvs[s]);
        if (need > nb) nb = need;
        if (have > nb) nb = have;
    }
    return nb;
}

int64_t og_row_stores_max_blocks(const og_row_store *a, const og_row_store *b, uint32_t n_layer) {
    int64_t nb = 0;
    for (uint32_t il = 0; il < n_layer; il++) {
        if (a[il].n_blocks > nb) nb = a[il].n_blocks;
        if (b[il].n_blocks > nb) nb = b[il].n_blocks;
    }
    return nb;
}

og_status og_fwd_plan_make(og_fwd_plan *p, og_kv *const *kvs, int n_seq, const og_batch *batch, uint32_t n_vocab,
                           og_numerics nm, const char *arch, char *err, size_t errlen) {
    const int64_t T = batch->n_tok;
    p->T = T;
    p->n_seq = n_seq;
    for (int64_t i = 0; i < T; i++) {
        if (batch->tokens[i] < 0 || (uint32_t)batch->tokens[i] >= n_vocab)
            return og_fail(err, errlen, OG_ERR_INVALID_ARG, "token id %d outside the vocabulary", batch->tokens[i]);
        if (batch->seq[i] < 0 || batch->seq[i] >= n_seq)
            return og_fail(err, errlen, OG_ERR_INVALID_ARG, "token %lld names sequence %d of %d", (long long)i,
                           batch->seq[i], n_seq);
    }
    for (int s = 0; s < n_seq; s++)
        if (kvs[s]->n_blocks)
            return og_fail(err, errlen, OG_ERR_INVALID_ARG, "sequence %d holds paged blocks: not a %s cache", s, arch);
    memset(p->seq_off, 0, ((size_t)n_seq + 1) * sizeof *p->seq_off);
    memset(p->st, 0, (size_t)n_seq * sizeof *p->st);
    for (int s = 0; s < n_seq; s++) p->start[s] = p->next[s] = kvs[s]->n_pos;
    for (int64_t i = 0; i < T; i++) {
        p->pos[i] = p->next[batch->seq[i]]++;
        p->seq_off[batch->seq[i] + 1]++;
        p->canon[i] = nm == OG_NUMERICS_CANONICAL || (batch->exact && batch->exact[i]);
    }
    for (int s = 0; s < n_seq; s++) p->seq_off[s + 1] += p->seq_off[s];
    for (int64_t i = 0; i < T; i++) { /* a sequence's k-th token of the call is at position start + k */
        const int s = batch->seq[i];
        p->tok_at[p->seq_off[s] + (p->pos[i] - p->start[s])] = (int32_t)i;
    }
    return OG_OK;
}

og_kv_view og_fwd_store_view(const og_fwd_plan *p, const int32_t *seq_idx, float **blocks,
                             og_row_store *const *stores, uint64_t width, uint32_t ratio, int32_t *first_of,
                             int32_t *first, int32_t *n_rows) {
    int32_t nb = 0;
    for (int s = 0; s < p->n_seq; s++) {
        first_of[s] = nb;
        for (int k = 0; stores[s] && k < stores[s]->n_blocks; k++) blocks[nb++] = stores[s]->blocks[k];
    }
    for (int64_t t = 0; t < p->T; t++) {
        first[t] = first_of[seq_idx[t]];
        n_rows[t] = (p->pos[t] + 1) / (int32_t)ratio;
    }
    return (og_kv_view){blocks, nb, OG_ROW_STORE_BLOCK, 0, (int64_t)width, (int64_t)width, OG_KV_F32};
}

void og_fwd_window_rows(const og_fwd_plan *p, const int32_t *seq_idx, float *const *rings, int32_t W, int64_t D,
                        const float *kv, const float **rows, int64_t *row_off) {
    int64_t nr = 0;
    for (int64_t t = 0; t < p->T; t++) {
        const int s = seq_idx[t];
        const int32_t pp = p->pos[t], lo = pp - W + 1 > 0 ? pp - W + 1 : 0;
        row_off[t] = nr;
        for (int32_t q = lo; q <= pp; q++)
            rows[nr++] = q >= p->start[s] ? kv + (int64_t)p->tok_at[p->seq_off[s] + (q - p->start[s])] * D
                                          : rings[s] + (int64_t)(q % W) * D;
    }
    row_off[p->T] = nr;
}

og_status og_fwd_ring_store(og_fwd *f, const og_fwd_plan *p, float **rings, const int32_t *seq_idx, int32_t *pos_mod,
                            int32_t W, int64_t D, float *kv) {
    for (int64_t t = 0; t < p->T; t++) pos_mod[t] = p->pos[t] % W;
    og_kv_store_op ks = {{rings, p->n_seq, W, 0, D, D, OG_KV_F32}, {kv, D, p->T, D}, seq_idx, pos_mod};
    return f->ops->kv_store(f->dev, f->s, &ks, f->err, f->errlen);
}

og_status og_fwd_moe(og_fwd *f, const og_model *m, const og_run_ctx *rc, const og_batch *batch, uint32_t il,
                     const og_weight *router, const og_router_op *ro, const float *x, float *y, int64_t N,
                     const og_fwd_moe_host *h, bool *failed_here) {
    const int64_t T = batch->n_tok, k = ro->k;
    const uint64_t fb = sizeof(float);
    og_status st = og_fwd_mm(f, router, x, T, (float *)ro->logits);
    if (!st) st = f->ops->router(f->dev, f->s, ro, f->err, f->errlen);
    if (!st) st = f->ops->copy_to_host(f->dev, f->s, h->ids, ro->ids, (uint64_t)(T * k) * sizeof(int32_t), f->err,
                                       f->errlen);
    if (!st) st = f->ops->copy_to_host(f->dev, f->s, h->w, ro->weights, (uint64_t)(T * k) * fb, f->err, f->errlen);
    if (!st) st = f->ops->copy_to_host(f->dev, f->s, h->x, x, (uint64_t)(T * N) * fb, f->err, f->errlen);
    if (!st) st = og_fwd_sync(f);
    if (st) return st;
    og_fwd_routes(rc, il, (uint32_t)ro->n_expert, (int)k, T, h->ids, h->w, h->routes);
    const og_moe_layer io = {il, h->x, T, h->routes, (int)(T * k), batch->exact, h->y, NULL};
    st = rc->dispatch->type->moe_layer(rc->dispatch->self, m, rc, &io, f->err, f->errlen);
    if (st) {
        *failed_here = true;
        return st;
    }
    return f->ops->copy_to_device(f->dev, f->s, y, h->y, (uint64_t)(T * N) * fb, f->err, f->errlen);
}

og_status og_fwd_gather_wanted(og_fwd *f, const og_batch *batch, float *dst, const float *src, int64_t row) {
    const int64_t T = batch->n_tok;
    int64_t r = 0;
    for (int64_t t = 0; t < T; t++) {
        if (!batch->logits[t]) continue;
        int64_t t1 = t + 1;
        while (t1 < T && batch->logits[t1]) t1++;
        og_copy_op cp = {dst + r * row, src + t * row, (uint64_t)((t1 - t) * row) * sizeof(float), 1, 1, 0, 0, 0, 0};
        og_status st = f->ops->copy(f->dev, f->s, &cp, f->err, f->errlen);
        if (st) return st;
        r += t1 - t;
        t = t1 - 1;
    }
    return OG_OK;
}

void og_snap_piece(og_snap_walk *w, void *state, uint64_t bytes) {
    if (w->base && !w->st && bytes) {
        void *snap = w->base + w->off;
        w->st = og_seq_copy(w->dev, w->stream, w->to_snap ? snap : state, w->to_snap ? state : snap, bytes, w->err,
                            w->errlen);
    }
    w->off += bytes;
}

void og_snap_rows(og_snap_walk *w, og_row_store *rs, int64_t n_rows, uint64_t width) {
    for (int64_t c = 0; c < n_rows; c += OG_ROW_STORE_BLOCK) {
        const int64_t n = n_rows - c < OG_ROW_STORE_BLOCK ? n_rows - c : OG_ROW_STORE_BLOCK;
        og_snap_piece(w, w->base ? og_row_store_row(rs, c, width) : NULL, (uint64_t)n * width * sizeof(float));
    }
}

void og_snap_host(og_snap_walk *w, void *state, uint64_t bytes) {
    if (w->host) {
        void *snap = w->host + w->host_off;
        memcpy(w->to_snap ? snap : state, w->to_snap ? state : snap, (size_t)bytes);
    }
    w->host_off += bytes;
}
