/* The dispatcher (og_moe.h): a MoE layer's routes split between the device
 * (resident experts, by slot) and the host pool (cold experts and the shared
 * expert), the two running at once, the outputs summed in route order. Every
 * expert of a layer (routed on either side, shared) uses the layer's SwiGLU
 * (og_moe_weights.swiglu_clamp: 0 plain, > 0 deepseek4's clamped one). */
#include "og_moe.h"

#include <stdlib.h>
#include <string.h>

struct og_dispatch {
    og_dispatcher table;
    og_device *dev;          /* NULL: host only */
    og_expert_cache *cache;
    og_stream *stream;       /* the expert ops' stream */
    void *dx, *dy;           /* device rows in and out, dcap bytes each */
    uint64_t dcap;
    og_dispatch_hook hook;
    void *hook_ctx;
    og_event fwd_ev;         /* the last combine op's, on the forward pass's stream on dev: its host and
                                device rows are reused only once it completed */
    og_buf arena;            /* a layer's host arrays (layer_arrays), kept */
    og_expert_ws xws;        /* the host experts' buffers, kept */
};

static void note(const og_dispatch *d, uint32_t il, og_dispatch_point at) {
    if (d->hook) d->hook(d->hook_ctx, il, at);
}

/* Rows [r0, r0 + n) of w as their own weight. */
static og_weight slice(const og_weight *w, int64_t r0, int64_t n) {
    og_weight s = *w;
    s.data = (const uint8_t *)w->data + (size_t)r0 * w->row_bytes;
    s.n_rows = n;
    return s;
}

/* Device rows of at least bytes each way; the previous layer's work was waited on. */
static og_status device_rows(og_dispatch *d, uint64_t bytes, char *err, size_t errlen) {
    if (bytes <= d->dcap) return OG_OK;
    const og_device_ops *ops = d->dev->ops;
    ops->free(d->dev, d->dx);
    ops->free(d->dev, d->dy);
    d->dx = d->dy = NULL;
    d->dcap = 0;
    bytes = bytes < 65536 ? 65536 : bytes + bytes / 2;
    og_status st = ops->alloc(d->dev, bytes, &d->dx, err, errlen);
    if (!st) st = ops->alloc(d->dev, bytes, &d->dy, err, errlen);
    if (!st) d->dcap = bytes;
    return st;
}

/* A piece: `len` of an expert's routes from `start`, with one numerics. */
typedef struct piece {
    int e, start, len;
    og_numerics nm;
} piece;

/* One layer's host arrays, carved from the dispatcher's arena. */
typedef struct layer_arrays {
    int *order, *pos_of;     /* [n_routes + 1]: row i of xg / res is route order[i], and back */
    int *cnt, *n_exact;      /* [E] routes per expert, of them exact (zeroed) */
    int *first, *cur;        /* [E] first row of an expert, [E][2] next exact / other row */
    int32_t *slot;           /* [E] device slot or -1 */
    float *xg, *res;         /* [n_routes + 1][D] gathered rows, expert outputs */
    piece *pc;               /* [2 E + 1] */
    og_expert_group *groups; /* [2 E + 1] */
    og_expert_job *jobs;     /* [2 E + 2 + n_tok] */
    int32_t *route_off, *crow; /* [n_tok + 1], [n_routes + 1]: the combine op's routes by token */
    float *cw;               /* [n_routes + 1] */
    uint8_t *tq, *xgq;       /* [n_tok][qrow] the tokens' rows quantized, [n_routes + 1][qrow] gathered (qrow 0: none) */
    og_act_rows *given;      /* [2 E + 2 + n_tok]: each job's rows in tq / xgq */
} layer_arrays;

/* The next `bytes` (64-byte aligned) at *at in base; base NULL: only counts. */
static void *take(uint8_t *base, size_t *at, size_t bytes) {
    void *r = base ? base + *at : NULL;
    *at += (bytes + 63) & ~(size_t)63;
    return r;
}

/* Carves a from base (NULL: a counting pass); returns the bytes used. */
static size_t carve(uint8_t *base, layer_arrays *a, int n_routes, int E, int64_t D, int64_t n_tok, size_t qrow) {
    size_t at = 0;
    const size_t nr = (size_t)n_routes + 1, ne = (size_t)E;
    a->order = take(base, &at, nr * sizeof(int));
    a->pos_of = take(base, &at, nr * sizeof(int));
    a->cnt = take(base, &at, ne * sizeof(int));
    a->n_exact = take(base, &at, ne * sizeof(int));
    a->first = take(base, &at, ne * sizeof(int));
    a->cur = take(base, &at, 2 * ne * sizeof(int));
    a->slot = take(base, &at, ne * sizeof(int32_t));
    a->xg = take(base, &at, nr * (size_t)D * sizeof(float));
    a->res = take(base, &at, nr * (size_t)D * sizeof(float));
    a->pc = take(base, &at, (2 * ne + 1) * sizeof(piece));
    a->groups = take(base, &at, (2 * ne + 1) * sizeof(og_expert_group));
    a->jobs = take(base, &at, (2 * ne + 2 + (size_t)n_tok) * sizeof(og_expert_job));
    a->route_off = take(base, &at, ((size_t)n_tok + 1) * sizeof(int32_t));
    a->crow = take(base, &at, nr * sizeof(int32_t));
    a->cw = take(base, &at, nr * sizeof(float));
    a->tq = qrow ? take(base, &at, (size_t)n_tok * qrow) : NULL;
    a->xgq = qrow ? take(base, &at, nr * qrow) : NULL;
    a->given = take(base, &at, (2 * ne + 2 + (size_t)n_tok) * sizeof(og_act_rows));
    return at;
}

/* The pieces of expert e's cnt routes, nx of them exact (listed first). */
static int split(int e, int cnt, int nx, og_numerics nm, piece *out) {
    if (nx == 0 || nm == OG_NUMERICS_CANONICAL) {
        out[0] = (piece){e, 0, cnt, nm};
        return 1;
    }
    if (nx == cnt) {
        out[0] = (piece){e, 0, cnt, OG_NUMERICS_CANONICAL};
        return 1;
    }
    out[0] = (piece){e, 0, nx, OG_NUMERICS_CANONICAL};
    out[1] = (piece){e, nx, cnt - nx, nm};
    return 2;
}

/* The tokens' rows quantized once for every host expert that reads them (the
 * gate and up products' activations: og_matmul_job.xq), row r by thread r % nth. */
typedef struct quant_rows {
    og_from_float_fn q;
    const float *x; /* [n][D] */
    int64_t n, D;
    uint8_t *out;   /* [n][row] */
    size_t row;
} quant_rows;

static void quantize_tokens(void *ctx, int ith, int nth) {
    const quant_rows *qr = ctx;
    for (int64_t r = ith; r < qr->n; r += nth) qr->q(qr->x + r * qr->D, qr->out + (size_t)r * qr->row, qr->D);
}

#define QUANT_POOL_MIN 65536 /* elements from which the pool shares the quantizing (as og_cpu_matmul_multi) */

/* The bytes of one activation row of gate/up's vec_dot_type, or 0 where the host
 * experts' rows are not quantized once here: the gate/up types differ, or a
 * canonical job would read f32 rows (a type without a canonical dot). */
static size_t token_qrow(const og_kernels *k, const og_moe_weights *L, int64_t D) {
    const og_type_traits *tr = og_quant_traits(L->gate_exps.type);
    uint64_t row = 0;
    if (!k || !tr || !tr->vec_dot_canonical || L->up_exps.type != L->gate_exps.type || !k->quantize_act[tr->vec_dot_type] ||
        D % tr->blck || og_row_bytes(tr->vec_dot_type, (uint64_t)D, &row) != OG_OK)
        return 0;
    return (size_t)row;
}

/* Waits for the previous layer's combine op (its rows are about to be reused). */
static og_status combine_wait(og_dispatch *d, char *err, size_t errlen) {
    og_status st = d->fwd_ev ? d->dev->ops->event_wait(d->dev, d->fwd_ev, err, errlen) : OG_OK;
    d->fwd_ev = 0;
    return st;
}

/* io->y's rows onto the device (io->dev_y): the combine as an op on the
 * forward pass's stream, after the device experts' event ev, reading the
 * device rows in d->dy and the host ones uploaded after them (the rows stay
 * untouched until fwd_ev completed); without a device of the dispatcher's own
 * on that stream, y (combined on the host) is copied up: io->y is the forward
 * pass's, which waits for its stream before it writes it again. */
static og_status combine_on_device(og_dispatch *d, const og_run_ctx *rc, const og_moe_layer *io, const layer_arrays *la,
                                   int64_t D, int n_dev_rows, og_event ev, bool host_combined, char *err,
                                   size_t errlen) {
    const og_device_ops *ops = rc->dev->ops;
    const uint64_t fb = sizeof(float), rb = (uint64_t)D * fb;
    og_status st = OG_OK;
    if (host_combined) {
        st = ops->copy_to_device(rc->dev, rc->stream, io->dev_y, io->y, (uint64_t)io->n_tok * rb, err, errlen);
    } else {
        og_combine_op op = {io->dev_y, d->dy, io->n_tok, io->n_routes, D, la->route_off, la->crow, la->cw};
        st = ops->stream_wait(rc->dev, rc->stream, ev, err, errlen);
        if (!st && io->n_routes > n_dev_rows) /* the host experts' rows after the device's */
            st = ops->copy_to_device(rc->dev, rc->stream, (uint8_t *)d->dy + (uint64_t)n_dev_rows * rb,
                                     la->res + (size_t)n_dev_rows * (size_t)D, (uint64_t)(io->n_routes - n_dev_rows) * rb,
                                     err, errlen);
        if (!st) st = ops->copy_to_device(rc->dev, rc->stream, io->dev_y, io->y, (uint64_t)io->n_tok * rb, err, errlen);
        if (!st) st = ops->moe_combine(rc->dev, rc->stream, &op, err, errlen);
    }
    if (host_combined) return st;
    og_status rs = ops->event_record(rc->dev, rc->stream, &d->fwd_ev, st ? NULL : err, st ? 0 : errlen);
    return st ? st : rs;
}

static og_status moe_layer(void *self, const og_model *m, const og_run_ctx *rc, const og_moe_layer *io, char *err,
                           size_t errlen) {
    og_dispatch *d = self;
    const uint32_t il = io->layer;
    const og_model_info *mi = og_model_get_info(m);
    const og_moe_weights *L = &mi->moe[il];
    const int64_t D = mi->n_embd, Fe = mi->n_ff_exp;
    const int E = (int)mi->n_expert, n_routes = io->n_routes;
    const bool shared = mi->n_expert_shared > 0;
    const og_route *routes = io->routes;
    for (int r = 0; r < n_routes; r++)
        if (routes[r].expert < 0 || routes[r].expert >= E || routes[r].token < 0 || routes[r].token >= io->n_tok)
            return og_fail(err, errlen, OG_ERR_INVALID_ARG, "layer %u: route %d names expert %d, token %d", il, r,
                           routes[r].expert, routes[r].token);
    layer_arrays la;
    og_status st = combine_wait(d, err, errlen);
    if (st) return st;
    if (io->dev_y && (!rc->dev || !rc->stream))
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "layer %u: a device result needs the run context's device", il);
    /* the combine runs as an op on the forward pass's device when it is the dispatcher's */
    const bool dev_combine = io->dev_y && d->dev && rc->dev == d->dev;
    const size_t qrow = token_qrow(rc->kern, L, D);
    if (og_buf_reserve(&d->arena, carve(NULL, &la, n_routes, E, D, io->n_tok, qrow)))
        return og_fail(err, errlen, OG_ERR_NOMEM, "layer %u: out of memory for the dispatch arrays", il);
    carve(d->arena.p, &la, n_routes, E, D, io->n_tok, qrow);
    int *order = la.order, *pos_of = la.pos_of, *cnt = la.cnt, *n_exact = la.n_exact, *first = la.first, *cur = la.cur;
    int32_t *slot = la.slot;
    float *xg = la.xg, *res = la.res;
    piece *pc = la.pc;
    og_expert_group *groups = la.groups;
    og_expert_job *jobs = la.jobs;
    memset(cnt, 0, (size_t)E * sizeof *cnt);
    memset(n_exact, 0, (size_t)E * sizeof *n_exact);
    int n_dev_rows = 0, n_groups = 0, n_jobs = 0, np = 0;
    bool issued = false;
    og_event ev = 0;
    if (!st) {
        /* counting sort by expert: the resident experts' routes first (the device
         * rows), each expert's exact routes first, route order kept within each */
        for (int r = 0; r < n_routes; r++) {
            cnt[routes[r].expert]++;
            if (io->exact && io->exact[routes[r].token]) n_exact[routes[r].expert]++;
        }
        for (int e = 0; e < E; e++) slot[e] = cnt[e] && d->cache ? og_expert_cache_slot(d->cache, il, (uint32_t)e) : -1;
        int at = 0;
        for (int pass = 0; pass < 2; pass++)
            for (int e = 0; e < E; e++)
                if (cnt[e] && (slot[e] >= 0) == (pass == 0)) {
                    first[e] = at;
                    cur[2 * e] = at;
                    cur[2 * e + 1] = at + n_exact[e];
                    at += cnt[e];
                    if (pass == 0) n_dev_rows = at;
                }
        for (int r = 0; r < n_routes; r++) {
            const bool ex = io->exact && io->exact[routes[r].token];
            const int i = cur[2 * routes[r].expert + !ex]++;
            order[i] = r;
            pos_of[r] = i;
        }
        /* the device's rows as floats; the host's quantized once per token, then gathered */
        for (int i = 0; i < (qrow ? n_dev_rows : n_routes); i++)
            memcpy(xg + (size_t)i * D, io->x + routes[order[i]].token * D, (size_t)D * sizeof *xg);
        if (qrow && n_routes > n_dev_rows) {
            const og_type_traits *tr = og_quant_traits(L->gate_exps.type);
            quant_rows qr = {rc->kern->quantize_act[tr->vec_dot_type], io->x, io->n_tok, D, la.tq, qrow};
            if (rc->pool && io->n_tok > 1 && io->n_tok * D >= QUANT_POOL_MIN) og_pool_run(rc->pool, quantize_tokens, &qr);
            else quantize_tokens(&qr, 0, 1);
            for (int i = n_dev_rows; i < n_routes; i++)
                memcpy(la.xgq + (size_t)i * qrow, la.tq + (size_t)routes[order[i]].token * qrow, qrow);
        }
        if (dev_combine) { /* the combine op's routes: by token, route order within each */
            memset(la.route_off, 0, ((size_t)io->n_tok + 1) * sizeof *la.route_off);
            for (int r = 0; r < n_routes; r++) la.route_off[routes[r].token + 1]++;
            for (int64_t t = 0; t < io->n_tok; t++) la.route_off[t + 1] += la.route_off[t];
            for (int r = 0; r < n_routes; r++) { /* route_off[t] as token t's cursor, shifted back below */
                const int32_t j = la.route_off[routes[r].token]++;
                la.crow[j] = pos_of[r];
                la.cw[j] = routes[r].weight;
            }
            for (int64_t t = io->n_tok; t > 0; t--) la.route_off[t] = la.route_off[t - 1];
            la.route_off[0] = 0;
        }
        /* pieces in row order: device experts, then cold ones */
        for (int pass = 0; pass < 2; pass++)
            for (int e = 0; e < E; e++)
                if (cnt[e] && (slot[e] >= 0) == (pass == 0))
                    np += split(e, cnt[e], n_exact[e], pass == 0 ? rc->device_numerics : rc->host_numerics, pc + np);
        for (int k = 0; k < np; k++) {
            const int e = pc[k].e, row = first[e] + pc[k].start;
            if (slot[e] >= 0) {
                groups[n_groups++] = (og_expert_group){slot[e], pc[k].len, pc[k].nm};
                continue;
            }
            jobs[n_jobs++] = (og_expert_job){slice(&L->gate_exps, (int64_t)e * Fe, Fe),
                                             slice(&L->up_exps, (int64_t)e * Fe, Fe),
                                             slice(&L->down_exps, (int64_t)e * D, D),
                                             qrow ? NULL : xg + (size_t)row * D, /* qrow: the rows in xgq */
                                             pc[k].len,
                                             res + (size_t)row * D,
                                             pc[k].nm,
                                             L->swiglu_clamp};
            la.given[n_jobs - 1] = (og_act_rows){qrow ? la.xgq + (size_t)row * qrow : NULL, qrow};
        }
        /* the shared expert: host numerics, canonical for exact rows (runs of
         * consecutive rows of one numerics; each row's bits are its own) */
        for (int64_t t0 = 0; shared && t0 < io->n_tok;) {
            const bool ex = io->exact && io->exact[t0];
            int64_t t1 = t0 + 1;
            while (t1 < io->n_tok && io->exact && io->exact[t1] == ex) t1++;
            if (!io->exact) t1 = io->n_tok;
            const bool sh_q = qrow && n_routes > n_dev_rows && L->gate_sh.type == L->gate_exps.type &&
                              L->up_sh.type == L->gate_exps.type; /* the token rows quantized above */
            jobs[n_jobs++] = (og_expert_job){L->gate_sh, L->up_sh, L->down_sh, io->x + t0 * D, t1 - t0, io->y + t0 * D,
                                             ex ? OG_NUMERICS_CANONICAL : rc->host_numerics, L->swiglu_clamp};
            la.given[n_jobs - 1] = (og_act_rows){sh_q ? la.tq + (size_t)t0 * qrow : NULL, qrow};
            t0 = t1;
        }
    }
    /* the device part: rows up, the expert op grouped by expert, results down
     * (they stay on the device for a combine op there, beside the host rows) */
    const uint64_t bytes = (uint64_t)n_dev_rows * (uint64_t)D * sizeof(float);
    if (!st && (n_dev_rows || dev_combine))
        st = device_rows(d, (uint64_t)(dev_combine ? n_routes : n_dev_rows) * (uint64_t)D * sizeof(float), err, errlen);
    if (!st && n_dev_rows) {
        const og_device_ops *ops = d->dev->ops;
        og_expert_op op = {.groups = groups, .n_groups = n_groups, .swiglu_clamp = L->swiglu_clamp};
        st = og_expert_cache_slots(d->cache, m, il, &op.slots);
        if (st == OG_ERR_INVALID_ARG) og_fail(err, errlen, st, "layer %u has no expert slots", il);
        op.x = d->dx;
        op.y = d->dy;
        if (!st) st = ops->copy_to_device(d->dev, d->stream, d->dx, xg, bytes, err, errlen);
        if (!st) issued = true; /* from here on the device reads xg: wait before freeing it */
        if (!st) st = ops->experts(d->dev, d->stream, &op, err, errlen);
        if (!st && !dev_combine) st = ops->copy_to_host(d->dev, d->stream, res, d->dy, bytes, err, errlen);
        og_status rs = ops->event_record(d->dev, d->stream, &ev, st ? NULL : err, st ? 0 : errlen);
        if (!st) st = rs;
        if (!st)
            for (int g = 0; g < n_groups; g++) og_expert_cache_note_read(d->cache, il, groups[g].slot, ev);
        if (!st) note(d, il, OG_DISPATCH_DEVICE_ISSUED);
    }
    /* the host part, meanwhile */
    if (!st && n_jobs) {
        st = og_cpu_experts_given_ws(rc->kern, rc->pool, jobs, n_jobs, la.given, &d->xws);
        if (st) og_fail(err, errlen, st, "layer %u: host experts: %s", il, og_status_str(st));
    }
    if (!st) note(d, il, OG_DISPATCH_HOST_DONE);
    if (issued && (st || !dev_combine)) { /* always, even after an error: the device may still use xg and res
                                             (a device combine waits on ev in its stream instead) */
        og_status ws = ev ? d->dev->ops->event_wait(d->dev, ev, st ? NULL : err, st ? 0 : errlen) : OG_OK;
        if (!ev) { /* no event: wait for the whole stream through a fresh one */
            og_event e2 = 0;
            if (!d->dev->ops->event_record(d->dev, d->stream, &e2, NULL, 0))
                d->dev->ops->event_wait(d->dev, e2, NULL, 0);
        }
        if (!st) st = ws;
        if (!st) note(d, il, OG_DISPATCH_DEVICE_DONE);
    }
    if (!st && !shared) memset(io->y, 0, (size_t)(io->n_tok * D) * sizeof *io->y);
    if (!st && !dev_combine) { /* every token: the shared expert, then its routes in route order */
        for (int r = 0; r < n_routes; r++) {
            float *yt = io->y + routes[r].token * D;
            const float *rr = res + (size_t)pos_of[r] * D;
            for (int64_t i = 0; i < D; i++) yt[i] += routes[r].weight * rr[i];
        }
    }
    if (!st && io->dev_y) {
        st = combine_on_device(d, rc, io, &la, D, n_dev_rows, ev, !dev_combine, err, errlen);
        if (st && issued && dev_combine && ev) (void)d->dev->ops->event_wait(d->dev, ev, NULL, 0); /* xg is read */
    }
    return st;
}

static const og_dispatch_type dispatch_type = {moe_layer};

og_status og_dispatch_create(og_device *dev, og_expert_cache *cache, og_dispatch **out, char *err, size_t errlen) {
    *out = NULL;
    if (!dev != !cache || (cache && cache->dev != dev))
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "dispatcher: a device needs its expert cache, and the cache its device");
    og_dispatch *d = calloc(1, sizeof *d);
    if (!d) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    d->dev = dev;
    d->cache = cache;
    d->table = (og_dispatcher){&dispatch_type, d};
    if (dev) {
        og_status st = dev->ops->stream_create(dev, &d->stream, err, errlen);
        if (st) {
            free(d);
            return st;
        }
    }
    *out = d;
    return OG_OK;
}

const og_dispatcher *og_dispatch_table(const og_dispatch *d) { return &d->table; }

void og_dispatch_set_hook(og_dispatch *d, og_dispatch_hook fn, void *ctx) {
    d->hook = fn;
    d->hook_ctx = ctx;
}

void og_dispatch_free(og_dispatch *d) {
    if (!d) return;
    (void)combine_wait(d, NULL, 0);
    if (d->dev) {
        d->dev->ops->stream_destroy(d->dev, d->stream); /* waits for its work */
        d->dev->ops->free(d->dev, d->dx);
        d->dev->ops->free(d->dev, d->dy);
    }
    og_buf_free(&d->arena);
    og_expert_ws_free(&d->xws);
    free(d);
}
