/* The two model-level kernels of the forward pass's ops: deepseek2's router
 * (scores, group-limited top-k, weights; deepseek2.md §5) and its MLA attention
 * in the absorbed form (deepseek2.md §3). Both are the code the forward pass
 * ran inline before it was written as device ops, moved here unchanged in their
 * arithmetic so every result keeps its bits; the attention reads an f16 cache
 * by widening each row exactly first (og_kv_type), so its bits are the f32
 * path's on the rounded values. */
#include "og_device.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ROUTE_MAX_K 64       /* OG_DS2_MAX_EXPERT_USED */
#define ROUTE_MAX_GROUP 1024 /* OG_DS2_MAX_GROUP */

static og_status check_route(const og_router_op *op) {
    if (op->n_tok < 0 || op->n_expert < 1 || op->k < 1 || op->k > ROUTE_MAX_K || op->k > op->n_expert) return OG_ERR_INVALID_ARG;
    if (op->gating < 1 || op->gating > 3) return OG_ERR_INVALID_ARG;
    if (op->hash_table && (op->hash_rows < 1 || (op->n_tok && !op->tokens))) return OG_ERR_INVALID_ARG;
    for (int64_t t = 0; op->hash_table && t < op->n_tok; t++)
        if (op->tokens[t] < 0 || op->tokens[t] >= op->hash_rows) return OG_ERR_INVALID_ARG;
    if (op->n_group > 1 && (op->n_group > ROUTE_MAX_GROUP || op->n_expert % op->n_group || op->n_expert / op->n_group < 2 ||
                            op->n_group_used < 1 || op->n_group_used >= op->n_group ||
                            op->k > op->n_expert / op->n_group * op->n_group_used))
        return OG_ERR_INVALID_ARG;
    return OG_OK;
}

/* sqrt(softplus(z)), softplus(z) = z above 20 and exp(z) below -20 (ds4's
 * thresholds, deepseek4.md §4.1.6). */
static float sqrt_softplus(float z) {
    const float sp = z > 20.0f ? z : z < -20.0f ? expf(z) : log1pf(expf(z));
    return sqrtf(sp);
}

/* One token (tok: its hash-table row when hashed): sc and sel are [E] scratch. */
static void route_one(const og_router_op *op, const float *logits, int32_t tok, float *sc, float *sel, int32_t *ids,
                      float *wout) {
    const int E = op->n_expert, k = op->k;
    memcpy(sc, logits, (size_t)E * sizeof(float));
    if (op->gating == 1) og_softmax(sc, E);
    else if (op->gating == 2)
        for (int e = 0; e < E; e++) sc[e] = 1.0f / (1.0f + expf(-sc[e]));
    else
        for (int e = 0; e < E; e++) sc[e] = sqrt_softplus(sc[e]);
    if (op->hash_table) { /* fixed experts; an id outside [0, E) takes expert 0 (the loader refuses such a table) */
        for (int j = 0; j < k; j++) {
            const int32_t e = op->hash_table[(int64_t)tok * k + j];
            ids[j] = e >= 0 && e < E ? e : 0;
        }
        goto weights;
    }
    for (int e = 0; e < E; e++) sel[e] = sc[e] + (op->bias ? op->bias[e] : 0.0f);
    if (op->n_group > 1) {
        const int G = op->n_group, per = E / G;
        float gs[ROUTE_MAX_GROUP];
        for (int g = 0; g < G; g++) { /* group score: sum of its two best */
            float a = -INFINITY, b = -INFINITY;
            for (int e = g * per; e < (g + 1) * per; e++) {
                if (sel[e] > a) {
                    b = a;
                    a = sel[e];
                } else if (sel[e] > b) {
                    b = sel[e];
                }
            }
            gs[g] = a + b;
        }
        int32_t keep[ROUTE_MAX_GROUP];
        og_topk(gs, G, op->n_group_used, keep);
        for (int g = 0; g < G; g++) {
            bool kept = false;
            for (int j = 0; j < op->n_group_used; j++) kept |= keep[j] == g;
            if (!kept)
                for (int e = g * per; e < (g + 1) * per; e++) sel[e] = -INFINITY;
        }
    }
    og_topk(sel, E, k, ids);
weights:;
    double sum = 0;
    for (int j = 0; j < k; j++) sum += sc[ids[j]];
    for (int j = 0; j < k; j++) {
        float w = sc[ids[j]];
        if (op->norm) w = (float)(op->norm_add > 0 ? w / (sum + op->norm_add) : w / fmax(sum, 6.103515625e-5));
        if (op->scale != 1.0f) w *= op->scale;
        wout[j] = w;
    }
}

og_status og_cpu_route_ws(const og_router_op *op, og_buf *ws) {
    og_status st = check_route(op);
    if (st || !op->n_tok) return st; /* n_tok 0: only the check (og_cop_make's) */
    og_buf own = {0};
    og_buf *b = ws ? ws : &own;
    if (og_buf_reserve(b, (size_t)op->n_expert * 2 * sizeof(float))) return OG_ERR_NOMEM;
    float *sc = b->p;
    for (int64_t t = 0; t < op->n_tok; t++)
        route_one(op, op->logits + t * op->n_expert, op->hash_table ? op->tokens[t] : 0, sc, sc + op->n_expert,
                  op->ids + t * op->k, op->weights + t * op->k);
    og_buf_free(&own);
    return OG_OK;
}

og_status og_cpu_route(const og_router_op *op) { return og_cpu_route_ws(op, NULL); }

/* ---- MLA attention ---- */

/* Heads of one token that share each block of cache rows read (widened once
 * for all of them in an f16 cache). */
#define ATT_HEADS 8

typedef struct att_job {
    const og_mla_op *op;
    const og_kernels *k;
    float *att;        /* [nth][att_stride] scratch: [nq][max_pos] scores, [nq][r_kv + d_rope] queries,
                          [block_rows][r_kv + d_rope] a widened f16 block; nq = ATT_HEADS (attend_heads)
                          or the tiled path's nq */
    size_t att_stride, max_pos;
    int nq;            /* attend_tiled: queries a thread takes at a time (<= TILE_Q) */
} att_job;

/* Rows s0 .. s0 + n - 1 of the cache (one block) as f32, at least their first
 * len elements: the rows in place in an f32 cache (*stride = the view's row
 * stride), else the f16 rows widened exactly into buf (rows back to back, as
 * deepseek2 lays them out: one conversion of n whole rows, *stride = row_len;
 * else row by row, *stride = len). */
static const float *rows_f32(const og_mla_op *op, const og_kernels *k, int32_t first, int32_t s0, int32_t n, int64_t len,
                             float *buf, int64_t *stride) {
    const og_kv_view *kv = &op->kv;
    if (kv->type == OG_KV_F32) {
        *stride = kv->row_stride;
        return og_kv_view_row(kv, first, s0);
    }
    if (kv->row_stride == kv->row_len) {
        k->f16_to_f32(og_kv_view_row(kv, first, s0), buf, n * kv->row_len);
        *stride = kv->row_len;
        return buf;
    }
    for (int32_t r = 0; r < n; r++) k->f16_to_f32(og_kv_view_row(kv, first, s0 + r), buf + r * len, len);
    *stride = len;
    return buf;
}

/* Each (token, head) pair p = i H + h with p mod nth == ith, the heads of a
 * token ATT_HEADS at a time over each block of its rows. A pair's arithmetic
 * is its own whatever the grouping: scores one dot per row, the softmax, the
 * weighted sum in position order. */
static void attend_heads(void *vctx, int ith, int nth) {
    const att_job *j = vctx;
    const og_mla_op *op = j->op;
    const og_kernels *k = j->k;
    const int64_t r_kv = op->r_kv, dr = op->d_rope, H = op->n_head, w = r_kv + dr, br = op->kv.block_rows;
    float *att = j->att + (size_t)ith * j->att_stride, *qc = att + ATT_HEADS * j->max_pos, *blk = qc + ATT_HEADS * w;
    og_vec_dot_fn fdot = k->vec_dot[OG_TYPE_F32];
    for (int64_t i = 0; i < op->n_tok; i++) {
        const int32_t pos = op->pos[i], first = op->kv_first[i];
        const bool canon = op->canonical && op->canonical[i];
        const int64_t h0 = ((ith - (i * H) % nth) % nth + nth) % nth; /* this thread's first head of token i */
        for (int64_t g = h0; g < H; g += (int64_t)nth * ATT_HEADS) {
            int64_t heads[ATT_HEADS];
            int nh = 0;
            for (int64_t hh = g; hh < H && nh < ATT_HEADS; hh += nth) heads[nh++] = hh;
            /* [q_abs, q_pe] against the cached [c, k_pe]: one dot per key */
            for (int e = 0; e < nh; e++) {
                memcpy(qc + e * w, op->q_abs + heads[e] * op->qabs_head_stride + i * r_kv, (size_t)r_kv * sizeof *qc);
                memcpy(qc + e * w + r_kv, op->q_pe + i * op->qpe_tok_stride + heads[e] * op->qpe_head_stride,
                       (size_t)dr * sizeof *qc);
            }
            for (int32_t s0 = 0; s0 <= pos; s0 += (int32_t)br) {
                const int32_t n = pos + 1 - s0 < br ? pos + 1 - s0 : (int32_t)br;
                int64_t st;
                const float *rows = rows_f32(op, k, first, s0, n, w, blk, &st);
                for (int e = 0; e < nh; e++) {
                    float *a = att + e * j->max_pos + s0;
                    if (canon)
                        for (int32_t r = 0; r < n; r++) a[r] = k->dot_f32_device(rows + r * st, qc + e * w, w) * op->kq_scale;
                    else
                        for (int32_t r = 0; r < n; r++) {
                            float sc;
                            fdot(w, &sc, qc + e * w, rows + r * st);
                            a[r] = sc * op->kq_scale;
                        }
                }
            }
            for (int e = 0; e < nh; e++) {
                og_softmax(att + e * j->max_pos, pos + 1);
                float *ch = op->ctx + heads[e] * op->ctx_head_stride + i * r_kv;
                for (int64_t r = 0; r < r_kv; r++) ch[r] = 0;
            }
            for (int32_t s0 = 0; s0 <= pos; s0 += (int32_t)br) { /* ctx = sum_p att_p c_p, p ascending */
                const int32_t n = pos + 1 - s0 < br ? pos + 1 - s0 : (int32_t)br;
                int64_t st;
                const float *rows = rows_f32(op, k, first, s0, n, r_kv, blk, &st);
                for (int e = 0; e < nh; e++) {
                    float *ch = op->ctx + heads[e] * op->ctx_head_stride + i * r_kv;
                    const float *a = att + e * j->max_pos + s0;
                    for (int32_t r = 0; r < n; r++) k->axpy_f32(r_kv, a[r], rows + r * st, ch);
                }
            }
        }
    }
}

/* ---- the tiled path: many (token, head) queries of one sequence per block ----
 *
 * A thread takes the pairs p = i H + h with p mod nth == ith of each run of
 * consecutive tokens that share a block table (a prefill chunk is one run),
 * up to TILE_Q of them at a time, and walks the run's cache once per phase
 * for all of them: each block of rows (widened once from f16) meets every
 * query it serves. Per pair the arithmetic is attend_heads': each score one
 * og_dot_f32_device (dot_f32_device_tile keeps its lanes and butterfly; the
 * tier's f32 dot for a non-canonical token) times kq_scale, og_softmax over
 * pos + 1, then ctx += att_p c_p per position in ascending order
 * (axpy_f32_rows: axpy_f32's per-element operations, ctx held in registers
 * across a block). So the bits are the per-pair path's on every tier (tested:
 * tests/unit/test_attention.c). No online softmax: it would change them. */
#define TILE_Q 64

typedef struct tile_query {
    int64_t i, h;  /* token, head */
    int32_t pos;
    bool canon;
} tile_query;

/* Canonical queries first (the tile kernel's), each kind by decreasing
 * position, so the queries a block serves are a prefix of each kind. */
static bool tile_before(const tile_query *a, const tile_query *b) {
    if (a->canon != b->canon) return a->canon;
    return a->pos > b->pos;
}

/* One pass: nq queries of the sequence whose block table starts at first. */
static void tile_pass(const att_job *j, float *att, float *qc, float *blk, tile_query *qs, int nq, int32_t first) {
    const og_mla_op *op = j->op;
    const og_kernels *k = j->k;
    const int64_t r_kv = op->r_kv, dr = op->d_rope, w = r_kv + dr, br = op->kv.block_rows, ld = (int64_t)j->max_pos;
    og_vec_dot_fn fdot = k->vec_dot[OG_TYPE_F32];
    for (int a = 1; a < nq; a++) /* insertion sort: nq <= TILE_Q */
        for (int b = a; b > 0 && tile_before(&qs[b], &qs[b - 1]); b--) {
            const tile_query t = qs[b];
            qs[b] = qs[b - 1];
            qs[b - 1] = t;
        }
    int nc = 0;
    int32_t maxp = 0;
    for (int e = 0; e < nq; e++) {
        nc += qs[e].canon;
        if (qs[e].pos > maxp) maxp = qs[e].pos;
        memcpy(qc + e * w, op->q_abs + qs[e].h * op->qabs_head_stride + qs[e].i * r_kv, (size_t)r_kv * sizeof *qc);
        memcpy(qc + e * w + r_kv, op->q_pe + qs[e].i * op->qpe_tok_stride + qs[e].h * op->qpe_head_stride,
               (size_t)dr * sizeof *qc);
    }
    /* scores: a block's rows against every query whose position reaches it
     * (a canonical query's scores past its position, within the block, are
     * computed and never read: its softmax stops at pos + 1) */
    for (int32_t s0 = 0; s0 <= maxp; s0 += (int32_t)br) {
        const int32_t n = maxp + 1 - s0 < br ? maxp + 1 - s0 : (int32_t)br;
        int64_t st;
        const float *rows = rows_f32(op, k, first, s0, n, w, blk, &st);
        int na = 0;
        while (na < nc && qs[na].pos >= s0) na++;
        if (na) k->dot_f32_device_tile(rows, st, n, qc, w, na, w, op->kq_scale, att + s0, ld);
        for (int e = nc; e < nq && qs[e].pos >= s0; e++) {
            const int32_t m = qs[e].pos + 1 - s0 < n ? qs[e].pos + 1 - s0 : n;
            float *a = att + e * ld + s0;
            for (int32_t r = 0; r < m; r++) {
                float sc;
                fdot(w, &sc, qc + e * w, rows + r * st);
                a[r] = sc * op->kq_scale;
            }
        }
    }
    for (int e = 0; e < nq; e++) {
        og_softmax(att + e * ld, qs[e].pos + 1);
        float *ch = op->ctx + qs[e].h * op->ctx_head_stride + qs[e].i * r_kv;
        for (int64_t r = 0; r < r_kv; r++) ch[r] = 0;
    }
    for (int32_t s0 = 0; s0 <= maxp; s0 += (int32_t)br) { /* ctx = sum_p att_p c_p, p ascending */
        const int32_t n = maxp + 1 - s0 < br ? maxp + 1 - s0 : (int32_t)br;
        int64_t st;
        const float *rows = rows_f32(op, k, first, s0, n, r_kv, blk, &st);
        for (int e = 0; e < nq; e++) {
            if (qs[e].pos < s0) continue;
            const int32_t m = qs[e].pos + 1 - s0 < n ? qs[e].pos + 1 - s0 : n;
            k->axpy_f32_rows(r_kv, m, att + e * ld + s0, rows, st,
                             op->ctx + qs[e].h * op->ctx_head_stride + qs[e].i * r_kv);
        }
    }
}

static void attend_tiled(void *vctx, int ith, int nth) {
    const att_job *j = vctx;
    const og_mla_op *op = j->op;
    const int64_t H = op->n_head, w = op->r_kv + op->d_rope;
    float *att = j->att + (size_t)ith * j->att_stride, *qc = att + j->nq * j->max_pos, *blk = qc + j->nq * w;
    tile_query qs[TILE_Q];
    for (int64_t i0 = 0; i0 < op->n_tok;) {
        int64_t i1 = i0 + 1;
        while (i1 < op->n_tok && op->kv_first[i1] == op->kv_first[i0]) i1++;
        int nq = 0;
        const int64_t p0 = i0 * H + ((ith - (i0 * H) % nth) % nth + nth) % nth; /* this thread's first pair of the run */
        for (int64_t p = p0; p < i1 * H; p += nth) {
            const int64_t i = p / H;
            qs[nq++] = (tile_query){i, p % H, op->pos[i], op->canonical && op->canonical[i]};
            if (nq == j->nq) {
                tile_pass(j, att, qc, blk, qs, nq, op->kv_first[i0]);
                nq = 0;
            }
        }
        if (nq) tile_pass(j, att, qc, blk, qs, nq, op->kv_first[i0]);
        i0 = i1;
    }
}

/* The checks both paths make; *max_pos: the largest position + 1. */
static og_status mla_check(const og_kernels *kern, const og_mla_op *op, int32_t *max_pos) {
    if (op->n_tok < 0 || op->n_head < 1 || op->r_kv < 1 || op->d_rope < 0 || op->kv.row_len != op->r_kv + op->d_rope ||
        op->kv.block_rows < 1 || !kern->vec_dot[OG_TYPE_F32] || !kern->dot_f32_device || !kern->axpy_f32 ||
        (op->kv.type != OG_KV_F32 && op->kv.type != OG_KV_F16) || (op->kv.type == OG_KV_F16 && !kern->f16_to_f32))
        return OG_ERR_INVALID_ARG;
    *max_pos = 0;
    for (int64_t i = 0; i < op->n_tok; i++) {
        if (op->pos[i] < 0 || op->kv_first[i] < 0 ||
            (int64_t)op->kv_first[i] + op->pos[i] / op->kv.block_rows >= op->kv.n_blocks)
            return OG_ERR_INVALID_ARG;
        if (op->pos[i] + 1 > *max_pos) *max_pos = op->pos[i] + 1;
    }
    return OG_OK;
}

/* Checks op, then runs fn (attend_heads or attend_tiled, nq queries of scratch
 * per thread: att_job; 0: the tiled path's own count) over pool with its
 * scratch in ws (NULL: the call's own). */
static og_status mla_run(const og_kernels *kern, og_pool *pool, const og_mla_op *op, og_buf *ws, og_pool_fn fn,
                         size_t nq) {
    int32_t max_pos;
    og_status st = mla_check(kern, op, &max_pos);
    if (st || !op->n_tok) return st;
    const int nth = pool ? og_pool_size(pool) : 1;
    const size_t w = (size_t)(op->r_kv + op->d_rope);
    if (!nq) { /* the tiled path: at most TILE_Q, and no more than a thread's share of the pairs */
        const int64_t share = (op->n_tok * op->n_head + nth - 1) / nth;
        nq = share < TILE_Q ? (size_t)share : TILE_Q;
    }
    att_job j = {op, kern, NULL, nq * ((size_t)max_pos + w) + (size_t)op->kv.block_rows * w, (size_t)max_pos, (int)nq};
    og_buf own = {0};
    og_buf *b = ws ? ws : &own;
    if (og_buf_reserve(b, (size_t)nth * j.att_stride * sizeof(float))) return OG_ERR_NOMEM;
    j.att = b->p;
    if (pool) og_pool_run(pool, fn, &j);
    else fn(&j, 0, 1);
    og_buf_free(&own);
    return OG_OK;
}

og_status og_cpu_mla_attention_pairs_ws(const og_kernels *kern, og_pool *pool, const og_mla_op *op, og_buf *ws) {
    return mla_run(kern, pool, op, ws, attend_heads, ATT_HEADS);
}

og_status og_cpu_mla_attention_ws(const og_kernels *kern, og_pool *pool, const og_mla_op *op, og_buf *ws) {
    if (!kern->dot_f32_device_tile || !kern->axpy_f32_rows) return og_cpu_mla_attention_pairs_ws(kern, pool, op, ws);
    return mla_run(kern, pool, op, ws, attend_tiled, 0);
}

og_status og_cpu_mla_attention(const og_kernels *kern, og_pool *pool, const og_mla_op *op) {
    return og_cpu_mla_attention_ws(kern, pool, op, NULL);
}
