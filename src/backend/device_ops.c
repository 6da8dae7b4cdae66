/* The forward pass's ops on the CPU: checked and copied at issue (og_cop_make),
 * run by calling the kernels the forward pass called directly before it was
 * written as ops (og_cop_run), so every output keeps its bits. Also the host
 * device: the same ops run on the caller's thread and pool at issue. */
#include "device_ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Below this many weight elements x activation rows a lone product runs on the
 * issuing thread: waking the pool costs more than it saves (the forward pass's
 * rule before it became ops; the bits are the same either way). */
#define MM_PARALLEL_MIN (1 << 14)
#define MM_MAX_JOBS 256

static og_status check_rows(const og_rows *r, const char *what, char *err, size_t errlen) {
    if (!r->data || r->n < 1 || r->n_rows < 0 || r->stride < r->n)
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "device op: %s rows: n %lld, %lld rows, stride %lld", what,
                       (long long)r->n, (long long)r->n_rows, (long long)r->stride);
    return OG_OK;
}

static og_status check_kv(const og_kv_view *kv, const int32_t *first, const int32_t *pos, int64_t n, char *err,
                          size_t errlen) {
    if (!kv->blocks || kv->n_blocks < 1 || kv->block_rows < 1 || kv->row_len < 1 || kv->row_stride < kv->row_len ||
        kv->offset < 0 || (n && (!first || !pos)))
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "device op: a KV view without blocks, rows or positions");
    if (kv->type != OG_KV_F32 && kv->type != OG_KV_F16)
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "device op: KV element type %d is neither f32 nor f16", (int)kv->type);
    for (int64_t i = 0; i < n; i++)
        if (pos[i] < 0 || first[i] < 0 || (int64_t)first[i] + pos[i] / kv->block_rows >= kv->n_blocks)
            return og_fail(err, errlen, OG_ERR_INVALID_ARG, "device op: token %lld at position %d of block table %d: "
                           "outside the %d blocks", (long long)i, pos[i], first[i], kv->n_blocks);
    return OG_OK;
}

static og_status combine_check(const og_combine_op *op, const char *who, char *err, size_t errlen) {
    if (!op->y || !op->res || !op->route_off || op->n_tok < 0 || op->n_res < 0 || op->D < 1 || op->route_off[0] != 0)
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "%s MoE combine: missing tensor or routes, %lld tokens, D %lld", who,
                       (long long)op->n_tok, (long long)op->D);
    for (int64_t t = 0; t < op->n_tok; t++)
        if (op->route_off[t + 1] < op->route_off[t])
            return og_fail(err, errlen, OG_ERR_INVALID_ARG, "%s MoE combine: token %lld's routes end before they start", who,
                           (long long)t);
    const int32_t nr = op->route_off[op->n_tok];
    if (nr && (!op->rows || !op->weights))
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "%s MoE combine: %d routes without rows or weights", who, nr);
    for (int32_t j = 0; j < nr; j++)
        if (op->rows[j] < 0 || op->rows[j] >= op->n_res)
            return og_fail(err, errlen, OG_ERR_INVALID_ARG, "%s MoE combine: route %d reads row %d of %lld", who, j,
                           op->rows[j], (long long)op->n_res);
    return OG_OK;
}

const void *og_dev_weights_find(const og_dev_weights *w, const void *p, uint64_t bytes) {
    if (!w || !p) return NULL;
    const uintptr_t a = (uintptr_t)p;
    size_t lo = 0, hi = w->n; /* the last tensor starting at or below p */
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if ((uintptr_t)w->t[mid].host <= a) lo = mid + 1;
        else hi = mid;
    }
    if (!lo) return NULL;
    const og_dev_tensor *t = &w->t[lo - 1];
    const uint64_t off = (uint64_t)(a - (uintptr_t)t->host);
    if (off > t->bytes || bytes > t->bytes - off) return NULL;
    return (const uint8_t *)t->dev + off;
}

og_status og_cop_make(const og_kernels *k, og_cop_kind kind, const void *desc, int n, og_cop *c, char *err,
                      size_t errlen) {
    const og_buf keep = c->keep; /* the record's block, reused */
    og_cop_blocks *const bl = c->blocks;
    og_cop_blocks_give(c); /* a block an earlier op of the record held */
    memset(c, 0, sizeof *c);
    c->keep = keep;
    c->blocks = bl;
    c->own_class = -1;
    c->kind = kind;
    if (kind >= OG_COP_HC_MIX) return og_ds4_cop_make(kind, desc, c, err, errlen); /* deepseek4's (ds4_ops.c) */
    size_t need = 0, at = 0;
    og_status st = OG_OK;
    switch (kind) {
    case OG_COP_MATMUL: {
        const og_matmul_job *jobs = desc;
        if (n < 1 || n > MM_MAX_JOBS || !jobs)
            return og_fail(err, errlen, OG_ERR_INVALID_ARG, "device matmul: %d jobs (1 to %d)", n, MM_MAX_JOBS);
        for (int i = 0; i < n; i++) {
            const og_weight *w = jobs[i].w;
            const og_type_traits *tr = w ? og_quant_traits(w->type) : NULL;
            if (!w || !jobs[i].x || !jobs[i].y || jobs[i].m < 0 || !w->data)
                return og_fail(err, errlen, OG_ERR_INVALID_ARG, "device matmul: job %d lacks a weight, x or y", i);
            if (!tr || !k->vec_dot[w->type] || !k->quantize_act[tr->vec_dot_type])
                return og_fail(err, errlen, OG_ERR_UNSUPPORTED, "device matmul: no kernels for %s", og_type_name(w->type));
            if (w->K <= 0 || w->n_rows < 0 || w->K % tr->blck)
                return og_fail(err, errlen, OG_ERR_INVALID_ARG, "device matmul: job %d: K %lld in %s", i, (long long)w->K,
                               og_type_name(w->type));
        }
        need = og_cop_al16((size_t)n * sizeof(og_matmul_job)) + og_cop_al16((size_t)n * sizeof(og_weight));
        if (!og_cop_own(c, need)) break;
        c->u.mm.jobs = og_cop_dup(&c->own, &at, jobs, (size_t)n * sizeof *jobs);
        c->u.mm.wts = (og_weight *)((uint8_t *)c->own + at);
        for (int i = 0; i < n; i++) {
            c->u.mm.wts[i] = *jobs[i].w;
            c->u.mm.jobs[i].w = &c->u.mm.wts[i];
        }
        c->u.mm.n_jobs = n;
        return OG_OK;
    }
    case OG_COP_RMSNORM: {
        const og_rmsnorm_op *op = desc;
        if ((st = check_rows(&op->y, "RMSNorm y", err, errlen)) || (st = check_rows(&op->x, "RMSNorm x", err, errlen)))
            return st;
        if (op->y.n != op->x.n || op->y.n_rows != op->x.n_rows || !(op->eps > 0))
            return og_fail(err, errlen, OG_ERR_INVALID_ARG, "device RMSNorm: y and x differ in shape, or eps <= 0");
        c->u.norm = *op;
        return OG_OK;
    }
    case OG_COP_ROPE: {
        const og_rope_op *op = desc;
        if (!op->x || op->n_tok < 0 || op->n_vec < 0 || op->rope.d_rope < 0 || op->rope.d_rope % 2 ||
            op->rope.d_rope > OG_ROPE_MAX_DIM || (op->n_tok && !op->pos))
            return og_fail(err, errlen, OG_ERR_INVALID_ARG, "device RoPE: d_rope %d (even, <= %d), %lld tokens",
                           op->rope.d_rope, OG_ROPE_MAX_DIM, (long long)op->n_tok);
        c->u.rope = *op;
        if (!op->n_tok) return OG_OK;
        if (!og_cop_own(c, og_cop_al16((size_t)op->n_tok * sizeof(int32_t)))) break;
        c->u.rope.pos = og_cop_dup(&c->own, &at, op->pos, (size_t)op->n_tok * sizeof(int32_t));
        return OG_OK;
    }
    case OG_COP_SOFTMAX:
        if ((st = check_rows(desc, "softmax", err, errlen))) return st;
        c->u.rows = *(const og_rows *)desc;
        return OG_OK;
    case OG_COP_SWIGLU:
    case OG_COP_ADD:
    case OG_COP_SCALE: {
        const og_cop *e = desc;
        if (!e->u.ew.out || !e->u.ew.a || (kind != OG_COP_SCALE && !e->u.ew.b) || e->u.ew.n < 0 ||
            (kind == OG_COP_SWIGLU && !(e->u.ew.f >= 0 && isfinite(e->u.ew.f))))
            return og_fail(err, errlen, OG_ERR_INVALID_ARG, "device element-wise op: missing tensor, n %lld or clamp %g",
                           (long long)e->u.ew.n, (double)e->u.ew.f);
        c->u.ew = e->u.ew;
        return OG_OK;
    }
    case OG_COP_ROUTER: {
        const og_router_op *op = desc;
        og_router_op probe = *op;
        probe.n_tok = 0;
        if (!op->logits || !op->ids || !op->weights || og_cpu_route(&probe))
            return og_fail(err, errlen, OG_ERR_INVALID_ARG,
                           "device router: %d experts, k %d, gating %d, %d groups keep %d", op->n_expert, op->k,
                           op->gating, op->n_group, op->n_group_used);
        for (int64_t t = 0; op->hash_table && t < op->n_tok; t++)
            if (!op->tokens || op->tokens[t] < 0 || op->tokens[t] >= op->hash_rows)
                return og_fail(err, errlen, OG_ERR_INVALID_ARG, "device router: token %lld outside the hash table's %lld rows",
                               (long long)t, (long long)op->hash_rows);
        c->u.router = *op;
        if (!op->hash_table || !op->n_tok) return OG_OK;
        need = og_cop_al16((size_t)op->n_tok * sizeof(int32_t));
        if (!og_cop_own(c, need)) break;
        c->u.router.tokens = og_cop_dup(&c->own, &at, op->tokens, (size_t)op->n_tok * sizeof(int32_t));
        return OG_OK;
    }
    case OG_COP_MLA: {
        const og_mla_op *op = desc;
        if (!op->q_abs || !op->q_pe || !op->ctx || op->n_tok < 0 || op->n_head < 1 || op->r_kv < 1 || op->d_rope < 0 ||
            op->kv.row_len != op->r_kv + op->d_rope)
            return og_fail(err, errlen, OG_ERR_INVALID_ARG, "device MLA attention: missing tensor or r_kv %lld + d_rope %lld "
                           "!= cache row %lld", (long long)op->r_kv, (long long)op->d_rope, (long long)op->kv.row_len);
        if ((st = check_kv(&op->kv, op->kv_first, op->pos, op->n_tok, err, errlen))) return st;
        const size_t nt = (size_t)op->n_tok;
        need = og_cop_al16((size_t)op->kv.n_blocks * sizeof(float *)) + 2 * og_cop_al16(nt * sizeof(int32_t)) +
               og_cop_al16(nt * sizeof(bool));
        if (!og_cop_own(c, need)) break;
        c->u.mla = *op;
        c->u.mla.kv.blocks = og_cop_dup(&c->own, &at, op->kv.blocks, (size_t)op->kv.n_blocks * sizeof(float *));
        c->u.mla.kv_first = og_cop_dup(&c->own, &at, op->kv_first, nt * sizeof(int32_t));
        c->u.mla.pos = og_cop_dup(&c->own, &at, op->pos, nt * sizeof(int32_t));
        c->u.mla.canonical = og_cop_dup(&c->own, &at, op->canonical, nt * sizeof(bool));
        return OG_OK;
    }
    case OG_COP_COPY: {
        const og_copy_op *op = desc;
        if ((!op->dst || !op->src) && op->row_bytes && op->n_rows && op->n_mats)
            return og_fail(err, errlen, OG_ERR_INVALID_ARG, "device copy: no source or destination");
        c->u.copy = *op;
        return OG_OK;
    }
    case OG_COP_GET_ROWS: {
        const og_get_rows_op *op = desc;
        const og_type_traits *tr = og_quant_traits(op->table.type);
        if (!tr || !tr->to_float)
            return og_fail(err, errlen, OG_ERR_UNSUPPORTED, "device get_rows: no dequantizer for %s",
                           og_type_name(op->table.type));
        if (!op->table.data || !op->out || op->n < 0 || (op->n && !op->ids))
            return og_fail(err, errlen, OG_ERR_INVALID_ARG, "device get_rows: missing table, ids or output");
        for (int64_t i = 0; i < op->n; i++)
            if (op->ids[i] < 0 || op->ids[i] >= op->table.n_rows)
                return og_fail(err, errlen, OG_ERR_INVALID_ARG, "device get_rows: id %d outside [0, %lld)", op->ids[i],
                               (long long)op->table.n_rows);
        c->u.get_rows = *op;
        if (!op->n) return OG_OK;
        if (!og_cop_own(c, og_cop_al16((size_t)op->n * sizeof(int32_t)))) break;
        c->u.get_rows.ids = og_cop_dup(&c->own, &at, op->ids, (size_t)op->n * sizeof(int32_t));
        return OG_OK;
    }
    case OG_COP_KV_STORE: {
        const og_kv_store_op *op = desc;
        if ((st = check_rows(&op->src, "KV store", err, errlen))) return st;
        if (op->src.n != op->kv.row_len)
            return og_fail(err, errlen, OG_ERR_INVALID_ARG, "device KV store: rows of %lld into a cache of rows of %lld",
                           (long long)op->src.n, (long long)op->kv.row_len);
        if ((st = check_kv(&op->kv, op->kv_first, op->pos, op->src.n_rows, err, errlen))) return st;
        const size_t nt = (size_t)op->src.n_rows;
        need = og_cop_al16((size_t)op->kv.n_blocks * sizeof(float *)) + 2 * og_cop_al16(nt * sizeof(int32_t));
        if (!og_cop_own(c, need)) break;
        c->u.kv_store = *op;
        c->u.kv_store.kv.blocks = og_cop_dup(&c->own, &at, op->kv.blocks, (size_t)op->kv.n_blocks * sizeof(float *));
        c->u.kv_store.kv_first = og_cop_dup(&c->own, &at, op->kv_first, nt * sizeof(int32_t));
        c->u.kv_store.pos = og_cop_dup(&c->own, &at, op->pos, nt * sizeof(int32_t));
        return OG_OK;
    }
    case OG_COP_MLA_KV_B: {
        const og_mla_kv_b_op *op = desc;
        if (!op->kv_b || !op->x || !op->y || op->n_tok < 0 || op->n_head < 1 || op->d_nope < 1 || op->d_v < 1 ||
            op->r_kv < 1 || op->x_tok_stride < 0 || op->x_head_stride < 0 || op->y_tok_stride < 0 || op->y_head_stride < 0)
            return og_fail(err, errlen, OG_ERR_INVALID_ARG, "device MLA kv_b: missing tensor or a shape below 1 "
                           "(%lld heads, d_nope %lld, d_v %lld, r_kv %lld)", (long long)op->n_head,
                           (long long)op->d_nope, (long long)op->d_v, (long long)op->r_kv);
        c->u.kv_b = *op;
        return OG_OK;
    }
    case OG_COP_COMBINE: {
        const og_combine_op *op = desc;
        if ((st = combine_check(op, "device", err, errlen))) return st;
        const size_t nr = (size_t)op->route_off[op->n_tok];
        need = og_cop_al16(((size_t)op->n_tok + 1) * sizeof(int32_t)) + og_cop_al16(nr * sizeof(int32_t)) +
               og_cop_al16(nr * sizeof(float));
        if (!og_cop_own(c, need)) break;
        c->u.combine = *op;
        c->u.combine.route_off = og_cop_dup(&c->own, &at, op->route_off, ((size_t)op->n_tok + 1) * sizeof(int32_t));
        c->u.combine.rows = og_cop_dup(&c->own, &at, op->rows, nr * sizeof(int32_t));
        c->u.combine.weights = og_cop_dup(&c->own, &at, op->weights, nr * sizeof(float));
        return OG_OK;
    }
    default: break; /* deepseek4's: above */
    }
    if (!c->own && need) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    return og_fail(err, errlen, OG_ERR_INVALID_ARG, "device op: unknown kind %d", (int)kind);
}

void og_cop_free(og_cop *c) {
    og_cop_blocks_give(c);
    og_buf_free(&c->keep);
    c->own = NULL;
}

void *og_cop_blocks_take(og_cop_blocks *bl, size_t bytes, int *cls) {
    int k = 0;
    while (k < OG_COP_N_CLASS && ((size_t)1024 << k) < bytes) k++;
    *cls = -1;
    if (k == OG_COP_N_CLASS) return NULL;
    pthread_mutex_lock(&bl->mu);
    void *b = bl->head[k];
    if (b) bl->head[k] = *(void **)b;
    pthread_mutex_unlock(&bl->mu);
    if (!b) b = aligned_alloc(64, (size_t)1024 << k);
    if (b) *cls = k;
    return b;
}

void og_cop_blocks_give(og_cop *c) {
    if (!c->blocks || !c->own || c->own_class < 0) return;
    og_cop_blocks *bl = c->blocks;
    pthread_mutex_lock(&bl->mu);
    *(void **)c->own = bl->head[c->own_class];
    bl->head[c->own_class] = c->own;
    pthread_mutex_unlock(&bl->mu);
    c->own = NULL;
    c->own_class = -1;
}

void og_cop_blocks_init(og_cop_blocks *bl) {
    memset(bl->head, 0, sizeof bl->head);
    pthread_mutex_init(&bl->mu, NULL);
}

void og_cop_blocks_free(og_cop_blocks *bl) {
    for (int k = 0; k < OG_COP_N_CLASS; k++)
        for (void *b = bl->head[k], *nx; b; b = nx) {
            nx = *(void **)b;
            free(b);
        }
    pthread_mutex_destroy(&bl->mu);
}

og_status og_cop_scratch_reserve(og_cop_scratch *sc, size_t need) { return og_buf_reserve(sc, need); }

static og_status run_matmul(const og_kernels *k, og_pool *pool, og_cop_scratch *sc, const og_cop *c) {
    const og_matmul_job *jobs = c->u.mm.jobs;
    const int n = c->u.mm.n_jobs;
    const bool lone = n == 1 && jobs[0].numerics == OG_NUMERICS_FORK;
    if (lone) {
        const og_weight *w = jobs[0].w;
        if (og_cop_scratch_reserve(sc, og_cpu_matmul_scratch(w->type, w->K, jobs[0].m))) return OG_ERR_NOMEM;
        og_pool *p = w->n_rows * w->K * jobs[0].m < MM_PARALLEL_MIN ? NULL : pool;
        return og_cpu_matmul(k, p, w, jobs[0].x, jobs[0].m, jobs[0].y, sc->p, sc->cap);
    }
    return og_cpu_matmul_multi_ws(k, pool, jobs, n, sc);
}

/* og_mla_kv_b_op's products for the (token, head) pairs ith, ith + nth, ...
 * (head-major), each in the loops' order (the op's comment). */
static void kv_b_pairs(void *ctx, int ith, int nth) {
    const og_mla_kv_b_op *op = ctx;
    const int64_t dn = op->d_nope, dv = op->d_v, r_kv = op->r_kv;
    for (int64_t it = ith; it < op->n_head * op->n_tok; it += nth) {
        const int64_t h = it / op->n_tok, i = it % op->n_tok;
        const float *x = op->x + i * op->x_tok_stride + h * op->x_head_stride;
        float *y = op->y + i * op->y_tok_stride + h * op->y_head_stride;
        if (!op->expand) {
            for (int64_t r = 0; r < r_kv; r++) y[r] = 0;
            for (int64_t d = 0; d < dn; d++) {
                const float *row = op->kv_b + (h * (dn + dv) + d) * r_kv;
                for (int64_t r = 0; r < r_kv; r++) y[r] += row[r] * x[d];
            }
        } else {
            for (int64_t j = 0; j < dv; j++) {
                const float *row = op->kv_b + (h * (dn + dv) + dn + j) * r_kv;
                double acc = 0;
                for (int64_t r = 0; r < r_kv; r++) acc += (double)row[r] * x[r];
                y[j] = (float)acc;
            }
        }
    }
}

og_status og_cop_run(const og_kernels *k, og_pool *pool, og_cop_scratch *sc, const og_cop *c) {
    if (c->kind >= OG_COP_HC_MIX) return og_ds4_cop_run(k, pool, sc, c);
    switch (c->kind) {
    case OG_COP_MATMUL:
        return run_matmul(k, pool, sc, c);
    case OG_COP_RMSNORM: {
        const og_rmsnorm_op *op = &c->u.norm;
        for (int64_t r = 0; r < op->x.n_rows; r++)
            if (op->w) og_rmsnorm(op->y.data + r * op->y.stride, op->x.data + r * op->x.stride, op->w, op->x.n, op->eps);
            else og_rmsnorm_noweight(op->y.data + r * op->y.stride, op->x.data + r * op->x.stride, op->x.n, op->eps);
        return OG_OK;
    }
    case OG_COP_ROPE: {
        const og_rope_op *op = &c->u.rope;
        for (int64_t t = 0; t < op->n_tok; t++) og_rope_apply(&op->rope, op->x + t * op->tok_stride, op->n_vec, op->vec_stride, op->pos[t]);
        return OG_OK;
    }
    case OG_COP_SOFTMAX:
        for (int64_t r = 0; r < c->u.rows.n_rows; r++) og_softmax(c->u.rows.data + r * c->u.rows.stride, c->u.rows.n);
        return OG_OK;
    case OG_COP_SWIGLU:
        if (c->u.ew.f > 0) og_swiglu_clamp(c->u.ew.out, c->u.ew.a, c->u.ew.b, c->u.ew.n, c->u.ew.f);
        else og_swiglu(c->u.ew.out, c->u.ew.a, c->u.ew.b, c->u.ew.n);
        return OG_OK;
    case OG_COP_ADD:
        for (int64_t i = 0; i < c->u.ew.n; i++) c->u.ew.out[i] = c->u.ew.a[i] + c->u.ew.b[i];
        return OG_OK;
    case OG_COP_SCALE:
        for (int64_t i = 0; i < c->u.ew.n; i++) c->u.ew.out[i] = c->u.ew.a[i] * c->u.ew.f;
        return OG_OK;
    case OG_COP_ROUTER:
        return og_cpu_route_ws(&c->u.router, sc);
    case OG_COP_MLA:
        return og_cpu_mla_attention_ws(k, pool, &c->u.mla, sc);
    case OG_COP_COPY: {
        const og_copy_op *op = &c->u.copy;
        for (uint64_t m = 0; m < op->n_mats; m++)
            for (uint64_t r = 0; r < op->n_rows; r++)
                memcpy((uint8_t *)op->dst + m * op->dst_mat_stride + r * op->dst_row_stride,
                       (const uint8_t *)op->src + m * op->src_mat_stride + r * op->src_row_stride, (size_t)op->row_bytes);
        return OG_OK;
    }
    case OG_COP_GET_ROWS: {
        const og_get_rows_op *op = &c->u.get_rows;
        og_status st = OG_OK;
        for (int64_t i = 0; i < op->n && !st; i++)
            st = og_dequantize_row(op->table.type, (const uint8_t *)op->table.data + (size_t)op->ids[i] * op->table.row_bytes,
                                   op->out + i * op->table.K, op->table.K);
        return st;
    }
    case OG_COP_KV_STORE: {
        const og_kv_store_op *op = &c->u.kv_store;
        const og_kv_view *kv = &op->kv;
        for (int64_t i = 0; i < op->src.n_rows; i++) {
            void *dst = og_kv_view_row(kv, op->kv_first[i], op->pos[i]);
            const float *x = op->src.data + i * op->src.stride;
            if (kv->type == OG_KV_F32) {
                memcpy(dst, x, (size_t)kv->row_len * sizeof(float));
            } else { /* rounded once, to nearest even: the values every reader widens back */
                uint16_t *h = dst;
                for (int64_t e = 0; e < kv->row_len; e++) h[e] = og_fp32_to_fp16(x[e]);
            }
        }
        return OG_OK;
    }
    case OG_COP_MLA_KV_B: {
        const og_mla_kv_b_op *op = &c->u.kv_b;
        /* the pool once the products outweigh waking it (MM_PARALLEL_MIN, as a lone product) */
        const int64_t work = op->n_head * op->n_tok * (op->expand ? op->d_v : op->d_nope) * op->r_kv;
        if (pool && work >= MM_PARALLEL_MIN && op->n_head * op->n_tok > 1) og_pool_run(pool, kv_b_pairs, (void *)op);
        else kv_b_pairs((void *)op, 0, 1);
        return OG_OK;
    }
    case OG_COP_COMBINE: {
        const og_combine_op *op = &c->u.combine;
        for (int64_t t = 0; t < op->n_tok; t++) { /* each token's routes in route order, as the dispatcher sums */
            float *yt = op->y + t * op->D;
            for (int32_t j = op->route_off[t]; j < op->route_off[t + 1]; j++) {
                const float *rr = op->res + (int64_t)op->rows[j] * op->D, w = op->weights[j];
                for (int64_t i = 0; i < op->D; i++) yt[i] += w * rr[i];
            }
        }
        return OG_OK;
    }
    default: break; /* deepseek4's: above */
    }
    return OG_ERR_INVALID_ARG;
}

/* ---- the host device ---- */

typedef struct host_device {
    og_device base;
    og_pool *pool;
    og_kernels kern;
    og_cop_scratch sc;
    og_cop cop;    /* the record every op is made in (run at issue: one at a time), its block kept */
    og_status err; /* the first failed op's: every later event fails with it */
    char msg[256];
} host_device;

static og_status host_mem_info(og_device *d, uint64_t *free_bytes, uint64_t *total_bytes) {
    (void)d;
    uint64_t avail = 0, limit = 0;
    og_status st = og_sys_memory(&avail, &limit);
    *free_bytes = *total_bytes = limit && limit < avail ? limit : avail;
    return st;
}

static og_status host_alloc(og_device *d, uint64_t bytes, void **out, char *err, size_t errlen) {
    (void)d;
    char a[32];
    *out = aligned_alloc(64, (size_t)((bytes + 63) / 64 * 64 + 64));
    return *out ? OG_OK : og_fail(err, errlen, OG_ERR_NOMEM, "host device: no %s", og_fmt_bytes(bytes, a, sizeof a));
}

static void host_free(og_device *d, void *p) {
    (void)d;
    free(p);
}

static og_status host_stream_create(og_device *d, og_stream **out, char *err, size_t errlen) {
    (void)err;
    (void)errlen;
    *out = (og_stream *)d; /* streams are the caller: any non-NULL handle */
    return OG_OK;
}

static void host_stream_destroy(og_device *d, og_stream *s) {
    (void)d;
    (void)s;
}

static og_status host_copy_to_device(og_device *d, og_stream *s, void *dst, const void *src, uint64_t bytes, char *err,
                                     size_t errlen) {
    (void)s;
    (void)err;
    (void)errlen;
    memcpy(dst, src, (size_t)bytes);
    d->pcie_bytes += bytes;
    return OG_OK;
}

static og_status host_copy_to_host(og_device *d, og_stream *s, void *dst, const void *src, uint64_t bytes, char *err,
                                   size_t errlen) {
    (void)d;
    (void)s;
    (void)err;
    (void)errlen;
    memcpy(dst, src, (size_t)bytes);
    return OG_OK;
}

static og_status host_experts(og_device *d, og_stream *s, const og_expert_op *op, char *err, size_t errlen) {
    (void)d;
    (void)s;
    (void)op;
    return og_fail(err, errlen, OG_ERR_UNSUPPORTED, "host device: routed experts run on the host pool, not as an op");
}

static og_status host_event_record(og_device *d, og_stream *s, og_event *ev, char *err, size_t errlen) {
    (void)s;
    *ev = 0;
    host_device *h = (host_device *)d;
    return h->err ? og_fail(err, errlen, h->err, "%s", h->msg) : OG_OK;
}

static og_status host_stream_wait(og_device *d, og_stream *s, og_event ev, char *err, size_t errlen) {
    (void)d;
    (void)s;
    (void)ev;
    (void)err;
    (void)errlen;
    return OG_OK;
}

static og_status host_event_wait(og_device *d, og_event ev, char *err, size_t errlen) {
    (void)ev;
    host_device *h = (host_device *)d;
    return h->err ? og_fail(err, errlen, h->err, "%s", h->msg) : OG_OK;
}

static bool host_event_done(og_device *d, og_event ev) {
    (void)d;
    (void)ev;
    return true;
}

static void host_destroy(og_device *d) {
    host_device *h = (host_device *)d;
    og_buf_free(&h->sc);
    og_cop_free(&h->cop);
    free(h);
}

static og_status host_issue(og_device *d, og_stream *s, og_cop_kind kind, const void *desc, int n, char *err,
                            size_t errlen) {
    (void)s;
    host_device *h = (host_device *)d;
    og_status st = og_cop_make(&h->kern, kind, desc, n, &h->cop, err, errlen);
    if (st) return st;
    if (!h->err && (st = og_cop_run(&h->kern, h->pool, &h->sc, &h->cop))) {
        h->err = st;
        snprintf(h->msg, sizeof h->msg, "host device: op %d failed: %s", (int)kind, og_status_str(st));
    }
    return OG_OK; /* a failure shows in the next event, as on a device */
}

OG_COP_ENTRY_POINTS(host, host_issue)

static const og_device_ops host_ops = {"host",
                                       host_mem_info,
                                       host_alloc,
                                       host_free,
                                       host_stream_create,
                                       host_stream_destroy,
                                       host_copy_to_device,
                                       host_copy_to_host,
                                       host_experts,
                                       host_event_record,
                                       host_stream_wait,
                                       host_event_wait,
                                       host_event_done,
                                       host_destroy,
                                       OG_COP_TABLE(host)};

og_status og_device_host_create(og_pool *pool, const og_kernels *kern, og_device **out, char *err, size_t errlen) {
    *out = NULL;
    if (!kern) return og_fail(err, errlen, OG_ERR_INVALID_ARG, "host device: no kernels");
    host_device *h = calloc(1, sizeof *h);
    if (!h) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    h->base.ops = &host_ops;
    h->pool = pool;
    h->kern = *kern;
    *out = &h->base;
    return OG_OK;
}
