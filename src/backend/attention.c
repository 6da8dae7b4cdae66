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
        if (op->norm) w = (float)(w / fmax(sum, 6.103515625e-5));
        if (op->scale != 1.0f) w *= op->scale;
        wout[j] = w;
    }
}

og_status og_cpu_route(const og_router_op *op) {
    og_status st = check_route(op);
    if (st || !op->n_tok) return st; /* n_tok 0: only the check (og_cop_make's) */
    float *sc = malloc((size_t)op->n_expert * 2 * sizeof(float));
    if (!sc) return OG_ERR_NOMEM;
    for (int64_t t = 0; t < op->n_tok; t++)
        route_one(op, op->logits + t * op->n_expert, op->hash_table ? op->tokens[t] : 0, sc, sc + op->n_expert,
                  op->ids + t * op->k, op->weights + t * op->k);
    free(sc);
    return OG_OK;
}

/* ---- MLA attention ---- */

typedef struct att_job {
    const og_mla_op *op;
    const og_kernels *k;
    float *att;        /* [nth][att_stride] scratch: scores, then a converted f16 row, then [q_abs, q_pe] */
    size_t att_stride;
} att_job;

/* The first n elements of cache row s as f32: the row itself in an f32 cache,
 * else the f16 row widened exactly into buf[n]. */
static const float *row_f32(const og_mla_op *op, const og_kernels *k, int32_t first, int32_t s, int64_t n, float *buf) {
    const void *row = og_kv_view_row(&op->kv, first, s);
    if (op->kv.type == OG_KV_F32) return row;
    k->f16_to_f32(row, buf, n);
    return buf;
}

static void attend_heads(void *vctx, int ith, int nth) {
    const att_job *j = vctx;
    const og_mla_op *op = j->op;
    const int64_t r_kv = op->r_kv, dr = op->d_rope, H = op->n_head, w = r_kv + dr;
    float *att = j->att + (size_t)ith * j->att_stride, *qc = att + (j->att_stride - (size_t)w);
    float *rb = qc - w; /* one converted f16 row */
    og_vec_dot_fn fdot = j->k->vec_dot[OG_TYPE_F32];
    /* f16 rows straight into the warp-order dot where the tier has it (its bits
     * are dot_f32_device of the widened row: og_kernels.dot_device) */
    float (*dot16)(const void *, const float *, int64_t) =
        op->kv.type == OG_KV_F16 ? j->k->dot_device[OG_TYPE_F16] : NULL;
    for (int64_t p = ith; p < op->n_tok * H; p += nth) {
        const int64_t i = p / H, hh = p % H;
        const int32_t pos = op->pos[i], first = op->kv_first[i];
        /* [q_abs, q_pe] against the cached [c, k_pe]: one dot per key */
        memcpy(qc, op->q_abs + hh * op->qabs_head_stride + i * r_kv, (size_t)r_kv * sizeof *qc);
        memcpy(qc + r_kv, op->q_pe + i * op->qpe_tok_stride + hh * op->qpe_head_stride, (size_t)dr * sizeof *qc);
        if (op->canonical && op->canonical[i] && dot16)
            for (int32_t s = 0; s <= pos; s++) att[s] = dot16(og_kv_view_row(&op->kv, first, s), qc, w) * op->kq_scale;
        else if (op->canonical && op->canonical[i])
            for (int32_t s = 0; s <= pos; s++)
                att[s] = j->k->dot_f32_device(row_f32(op, j->k, first, s, w, rb), qc, w) * op->kq_scale;
        else
            for (int32_t s = 0; s <= pos; s++) {
                float sc;
                fdot(w, &sc, qc, row_f32(op, j->k, first, s, w, rb));
                att[s] = sc * op->kq_scale;
            }
        og_softmax(att, pos + 1);
        float *ch = op->ctx + hh * op->ctx_head_stride + i * r_kv;
        for (int64_t r = 0; r < r_kv; r++) ch[r] = 0;
        for (int32_t s = 0; s <= pos; s++) j->k->axpy_f32(r_kv, att[s], row_f32(op, j->k, first, s, r_kv, rb), ch);
    }
}

og_status og_cpu_mla_attention(const og_kernels *kern, og_pool *pool, const og_mla_op *op) {
    if (op->n_tok < 0 || op->n_head < 1 || op->r_kv < 1 || op->d_rope < 0 || op->kv.row_len != op->r_kv + op->d_rope ||
        op->kv.block_rows < 1 || !kern->vec_dot[OG_TYPE_F32] || !kern->dot_f32_device || !kern->axpy_f32 ||
        (op->kv.type != OG_KV_F32 && op->kv.type != OG_KV_F16) || (op->kv.type == OG_KV_F16 && !kern->f16_to_f32))
        return OG_ERR_INVALID_ARG;
    int32_t max_pos = 0;
    for (int64_t i = 0; i < op->n_tok; i++) {
        if (op->pos[i] < 0 || op->kv_first[i] < 0 ||
            (int64_t)op->kv_first[i] + op->pos[i] / op->kv.block_rows >= op->kv.n_blocks)
            return OG_ERR_INVALID_ARG;
        if (op->pos[i] + 1 > max_pos) max_pos = op->pos[i] + 1;
    }
    if (!op->n_tok) return OG_OK;
    const int nth = pool ? og_pool_size(pool) : 1;
    att_job j = {op, kern, NULL, (size_t)max_pos + 2 * (size_t)(op->r_kv + op->d_rope)};
    j.att = malloc((size_t)nth * j.att_stride * sizeof(float));
    if (!j.att) return OG_ERR_NOMEM;
    if (pool) og_pool_run(pool, attend_heads, &j);
    else attend_heads(&j, 0, 1);
    free(j.att);
    return OG_OK;
}
