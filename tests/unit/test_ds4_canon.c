/* ds4_canon: the arithmetic the cuda device's deepseek4 / deepseek41 kernels
 * run (src/backend/cuda/og_ds4_canon.h), executed here on the CPU in the
 * kernels' own decomposition (per token, per element, per block, per (token,
 * head); the indexer's choice by rank as k_index_select makes it), against
 * the reference written apart from it: ds4_ops.c through the host device's
 * ops, on the same inputs. Bitwise where og_ds4_canon.h says so (mHC collapse
 * and expand, every QAT kind, the indexer's scores, selections and candidate
 * blocks, and the compressor and Engram, whose e^x is double exp, the same
 * libm's here); the ops through a float e^x (mHC mixes, the sink attention)
 * within a stated number of ulp, with the bitwise share printed.
 * No GPU needed: tests/gpu/run.sh runs the same ops on one (test_cuda). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "og_backend.h"
#include "og_device.h"
#include "og_ds4_canon.h"

typedef struct ctx {
    og_kernels kern;
    og_device *dev;
    og_stream *s;
} ctx;

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}
static float rng_f(uint64_t *s) { return (float)((double)(rng_next(s) >> 11) / 9007199254740992.0 * 2.0 - 1.0); }
static void rand_f(float *x, int64_t n, float scale, uint64_t *s) {
    for (int64_t i = 0; i < n; i++) x[i] = scale * rng_f(s);
}
static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static void same(const float *a, const float *b, int64_t n, const char *what) {
    for (int64_t i = 0; i < n; i++)
        if (fbits(a[i]) != fbits(b[i]))
            fail_msg("%s[%lld]: header %.9g (0x%08x), ds4_ops %.9g (0x%08x)", what, (long long)i, a[i], fbits(a[i]), b[i],
                     fbits(b[i]));
}
/* within ulp units of the larger magnitude (or 1e-30 absolute), or abs when the
 * value is a sum that cancels; prints the bitwise share. Built with
 * OG_DS4C_LIBM_EXPF (the header's e^x is then libm's expf, as ds4_ops.c's):
 * bitwise, which proves every operation but the exp. */
static void close_tol(const float *a, const float *b, int64_t n, int ulp, double abs, const char *what) {
#ifdef OG_DS4C_LIBM_EXPF
    (void)ulp, (void)abs;
    same(a, b, n, what);
    printf("ds4_canon %s: bitwise with libm's expf\n", what);
    return;
#endif
    int64_t bit = 0;
    for (int64_t i = 0; i < n; i++) {
        if (fbits(a[i]) == fbits(b[i])) {
            bit++;
            continue;
        }
        const double m = fmax(fabs((double)a[i]), fabs((double)b[i])), u = m > 1e-30 ? ldexp(1.0, ilogb(m) - 23) : 1e-30;
        if (!(fabs((double)a[i] - (double)b[i]) <= fmax(ulp * u, abs)))
            fail_msg("%s[%lld]: header %.9g, ds4_ops %.9g (more than %d ulp)", what, (long long)i, a[i], b[i], ulp);
    }
    printf("ds4_canon %s: %lld of %lld bitwise, the rest within %d ulp\n", what, (long long)bit, (long long)n, ulp);
}

static void run_ok(og_status st, const char *err) {
    if (st) fail_msg("ds4_ops: %s", err);
}

/* mHC mixes (body and head), collapse and expand, n_hc 4 and 16 */
static void test_hc(void **state) {
    ctx *c = *state;
    char err[256];
    uint64_t rs = 11;
    for (int n = 4; n <= 16; n += 12) {
        const int64_t T = 7, N = 300, n_mix = (2 + n) * n;
        float *mix = malloc((size_t)(T * n_mix) * 4), scale[3] = {0.7f, 1.3f, 2.1f}, *base = malloc((size_t)n_mix * 4);
        rand_f(mix, T * n_mix, 3.0f, &rs);
        rand_f(base, n_mix, 1.0f, &rs);
        float *pre = malloc((size_t)(T * n) * 4), *post = malloc((size_t)(T * n) * 4), *comb = malloc((size_t)(T * n * n) * 4);
        float *pre2 = malloc((size_t)(T * n) * 4), *post2 = malloc((size_t)(T * n) * 4), *comb2 = malloc((size_t)(T * n * n) * 4);
        for (int head = 0; head < 2; head++) {
            og_hc_mix_op op = {mix, T, n, head, scale, base, 1e-6f, 20, pre, post, comb};
            run_ok(c->dev->ops->hc_mix(c->dev, c->s, &op, err, sizeof err), err);
            const int64_t nm = head ? n : n_mix;
            for (int64_t t = 0; t < T; t++)
                og_ds4c_hc_mix_token(mix + t * nm, n, head, scale, base, 1e-6f, 20, pre2 + t * n, post2 + t * n,
                                     comb2 + t * n * n);
            close_tol(pre2, pre, T * n, 2, 0, head ? "hc_mix head pre" : "hc_mix pre");
            if (!head) {
                close_tol(post2, post, T * n, 2, 0, "hc_mix post");
                close_tol(comb2, comb, T * n * n, 64, 0, "hc_mix comb (Sinkhorn, 20 iterations)");
            }
        }
        float *sv = malloc((size_t)(T * n * N) * 4), *sv2 = malloc((size_t)(T * n * N) * 4), *x = malloc((size_t)(T * N) * 4),
              *x2 = malloc((size_t)(T * N) * 4);
        rand_f(sv, T * n * N, 2.0f, &rs);
        memcpy(sv2, sv, (size_t)(T * n * N) * 4);
        og_hc_op co = {T, N, n, sv, x, pre, NULL};
        run_ok(c->dev->ops->hc_collapse(c->dev, c->s, &co, err, sizeof err), err);
        for (int64_t t = 0; t < T; t++)
            for (int64_t i = 0; i < N; i++) x2[t * N + i] = og_ds4c_hc_collapse_elem(sv + t * n * N, pre + t * n, n, N, i);
        same(x2, x, T * N, "hc_collapse");
        og_hc_op eo = {T, N, n, sv, x, post, comb};
        run_ok(c->dev->ops->hc_expand(c->dev, c->s, &eo, err, sizeof err), err);
        for (int64_t t = 0; t < T; t++)
            for (int64_t i = 0; i < N; i++) og_ds4c_hc_expand_elem(sv2 + t * n * N, x[t * N + i], post + t * n, comb + t * n * n, n, N, i);
        same(sv2, sv, T * n * N, "hc_expand");
        free(mix), free(base), free(pre), free(post), free(comb), free(pre2), free(post2), free(comb2);
        free(sv), free(sv2), free(x), free(x2);
    }
}

/* Every QAT kind on rows with exact E4M3 / E2M1 ties, zeros, tiny and huge values, short last blocks */
static void test_qat(void **state) {
    ctx *c = *state;
    char err[256];
    uint64_t rs = 5;
    const struct { og_qat_kind k; int64_t n_round; int32_t block; } cases[] = {
        {OG_QAT_FP8, 448, 0},  {OG_QAT_FP8, 100, 32},        {OG_QAT_FP4_HADAMARD, 128, 0}, {OG_QAT_HADAMARD, 64, 0},
        {OG_QAT_F16, 500, 0},  {OG_QAT_FP4, 130, 0},         {OG_QAT_FP4_E4M3, 77, 0},      {OG_QAT_FP4_E4M3, 512, 16},
        {OG_QAT_FP4, 64, 8},   {OG_QAT_FP4_HADAMARD, 4096, 0}};
    const int64_t R = 6, ST = 4100;
    float *x = malloc((size_t)(R * ST) * 4), *y = malloc((size_t)(R * ST) * 4);
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        for (int64_t r = 0; r < R; r++) {
            const float sc = r == 0 ? 1e-30f : r == 1 ? 1e-3f : r == 2 ? 1.0f : r == 3 ? 300.0f : r == 4 ? 1e6f : 0.0f;
            for (int64_t i = 0; i < ST; i++) {
                float v = sc * rng_f(&rs);
                if (i % 7 == 3) v = sc * (float)((int)(rng_next(&rs) % 25) - 12) * 0.25f; /* ties of the grids */
                if (i % 31 == 5) v = 0.0f;
                x[r * ST + i] = v;
            }
        }
        memcpy(y, x, (size_t)(R * ST) * 4);
        og_qat_op op = {{x, ST, R, ST}, cases[ci].k, cases[ci].n_round, cases[ci].block};
        run_ok(c->dev->ops->qat(c->dev, c->s, &op, err, sizeof err), err);
        for (int64_t r = 0; r < R; r++) og_ds4c_qat_row((int)cases[ci].k, y + r * ST, cases[ci].n_round, cases[ci].block);
        char what[64];
        snprintf(what, sizeof what, "qat kind %d n_round %lld block %d", (int)cases[ci].k, (long long)cases[ci].n_round,
                 cases[ci].block);
        same(y, x, R * ST, what);
    }
    free(x), free(y);
}

/* The compressor, plain (ratio 8) and overlapping (ratio 4) with RoPE, FP8 and f16, two sequences interleaved */
static void test_compress(void **state) {
    ctx *c = *state;
    char err[256];
    uint64_t rs = 99;
    for (int ov = 0; ov < 2; ov++) {
        const int64_t W = 96, ratio = ov ? 4 : 8, lanes = ov ? 2 : 1, LW = lanes * W, slots = ov ? 2 * ratio : ratio;
        const int64_t T = 40, n_row = ov ? 2 * ratio : ratio;
        const og_rope rope = {32, 10000.0f, 1.0f, 0.0f, 4096, 32.0f, 1.0f, 1.0f};
        float *kv = malloc((size_t)(T * LW) * 4), *sc = malloc((size_t)(T * LW) * 4), norm[96];
        rand_f(kv, T * LW, 2.0f, &rs);
        rand_f(sc, T * LW, 4.0f, &rs);
        rand_f(norm, W, 1.5f, &rs);
        const size_t st_floats = (size_t)(2 * slots * LW);
        float *st[2], *st2[2], *out = calloc((size_t)(T * W), 4), *out2 = calloc((size_t)(T * W), 4);
        for (int q = 0; q < 2; q++) st[q] = calloc(st_floats, 4), st2[q] = calloc(st_floats, 4);
        float *state_of[40], *out_of[40], *out2_of[40];
        int32_t pos[40], p_seq[2] = {0, 0};
        for (int64_t t = 0; t < T; t++) {
            const int q = (t % 3) == 2;
            pos[t] = p_seq[q]++;
            state_of[t] = st[q];
            out_of[t] = (pos[t] + 1) % ratio ? NULL : out + t * W;
            out2_of[t] = out_of[t] ? out2 + t * W : NULL;
        }
        og_compress_op op = {T, W, (int32_t)ratio, ov, kv, sc, state_of, pos, out_of, norm, 1e-6f, rope, OG_QAT_FP8, 64, true};
        run_ok(c->dev->ops->compress(c->dev, c->s, &op, err, sizeof err), err);
        /* the kernels' decomposition: the state pass in token order, the columns, then each row's finish */
        float *snap = malloc((size_t)(2 * n_row * W) * 4);
        for (int64_t t = 0; t < T; t++) {
            float *kst = st2[(t % 3) == 2], *sst = kst + slots * LW;
            const int64_t slot = (ov ? ratio : 0) + pos[t] % ratio;
            memcpy(kst + slot * LW, kv + t * LW, (size_t)LW * 4);
            memcpy(sst + slot * LW, sc + t * LW, (size_t)LW * 4);
            if (!out2_of[t]) continue;
            for (int64_t i = 0; i < n_row; i++)
                for (int64_t j = 0; j < W; j++) {
                    const int64_t off = i * LW + (ov && i >= ratio ? W : 0);
                    snap[i * W + j] = kst[off + j];
                    snap[(n_row + i) * W + j] = sst[off + j];
                }
            if (ov) {
                memmove(kst, kst + ratio * LW, (size_t)(ratio * LW) * 4);
                memmove(sst, sst + ratio * LW, (size_t)(ratio * LW) * 4);
            }
            for (int64_t j = 0; j < W; j++)
                out2_of[t][j] = og_ds4c_compress_col(snap, snap + n_row * W, W, ratio, ov ? ratio : 0, ov && pos[t] + 1 > ratio, j);
            float cs[32], cc[16], sn[16];
            og_rope_cos_sin(&rope, pos[t] + 1 - ratio, cc, sn);
            for (int i = 0; i < 16; i++) cs[2 * i] = cc[i], cs[2 * i + 1] = sn[i];
            og_ds4c_compress_finish(out2_of[t], W, norm, 1e-6f, 32, cs, OG_DS4C_QAT_FP8, 64, 1);
        }
        for (int q = 0; q < 2; q++) same(st2[q], st[q], (int64_t)st_floats, "compressor state");
        /* bitwise here (the same libm exp in double on both sides); on a GPU CUDA's double exp */
        same(out2, out, T * W, ov ? "compress (overlap, ratio 4)" : "compress (ratio 8)");
        free(kv), free(sc), free(out), free(out2), free(snap);
        for (int q = 0; q < 2; q++) free(st[q]), free(st2[q]);
    }
}

/* The indexer's per-token choice as k_index_select makes it: ranks, then ascending. */
static void select_by_rank(const og_indexer_op *op, int64_t i, const float *sc, int32_t n, int32_t *sel, int32_t *cand) {
    if (cand) {
        if ((int64_t)n <= (int64_t)op->cand_block * op->cand_topk) {
            cand[0] = -1;
        } else {
            const int32_t nb = (n + op->cand_block - 1) / op->cand_block, newest = nb - 1;
            float *bs = malloc((size_t)nb * 4);
            for (int32_t b = 0; b < newest; b++) {
                float mx = -INFINITY;
                for (int32_t k = b * op->cand_block; k < (b + 1) * op->cand_block; k++) mx = sc[k] > mx ? sc[k] : mx;
                bs[b] = mx;
            }
            int32_t got = 0;
            for (int32_t b = 0; b < newest; b++) {
                int32_t rank = 0;
                for (int32_t o = 0; o < newest; o++) rank += og_ds4c_beats(bs[o], o, bs[b], b);
                if (rank < op->cand_topk - 1) cand[got++] = b;
            }
            cand[got] = newest;
            free(bs);
        }
    }
    (void)i;
    if (!op->sel_all && n <= op->top_k) return;
    int32_t got = 0;
    for (int32_t k = 0; k < n; k++) {
        int32_t rank = 0;
        for (int32_t o = 0; o < n; o++) rank += og_ds4c_beats(sc[o], o, sc[k], k);
        if (rank < op->top_k && (!op->sel_all || sc[k] != -INFINITY)) sel[got++] = k;
    }
    for (int32_t q = got; q < op->top_k; q++) sel[q] = -1;
}

/* V4's indexer (top-k of tokens with more keys) and V4.1's (candidate source, then a masked reindex, sel_all) */
static void test_indexer(void **state) {
    ctx *c = *state;
    char err[256];
    uint64_t rs = 3;
    enum { T = 5, H = 8, D = 64, BR = 16, NB = 20, TOPK = 24, CB = 8, CT = 4 };
    float *keys = malloc((size_t)NB * BR * D * 4), q[T * H * D], w[T * H];
    rand_f(keys, NB * BR * D, 1.0f, &rs);
    for (int k = 0; k < 12; k++) memcpy(keys + (40 + k) * D, keys + 7 * D, D * 4); /* equal scores: ties to the lower key */
    rand_f(q, T * H * D, 1.0f, &rs);
    rand_f(w, T * H, 0.3f, &rs);
    float *blk[NB];
    for (int b = 0; b < NB; b++) blk[b] = keys + (size_t)b * BR * D;
    const int32_t first[T] = {0, 0, 0, 0, 0}, nk[T] = {3, 24, 25, 200, 317};
    const bool canon[T] = {true, true, true, true, true};
    for (int v41 = 0; v41 < 2; v41++) {
        int32_t sel[T * TOPK], sel2[T * TOPK], cand[T * CT], cand2[T * CT], sel3[T * TOPK], sel4[T * TOPK];
        memset(sel, 0x7f, sizeof sel), memcpy(sel2, sel, sizeof sel);
        og_indexer_op op = {.n_tok = T, .n_head = H, .d_head = D, .top_k = TOPK, .q = q, .w = w,
                            .keys = {blk, NB, BR, 0, D, D, OG_KV_F32}, .key_first = first, .n_keys = nk, .sel = sel,
                            .canonical = canon, .cand_block = v41 ? CB : 0, .cand_topk = v41 ? CT : 0,
                            .cand_out = v41 ? cand : NULL, .sel_all = v41};
        run_ok(c->dev->ops->indexer(c->dev, c->s, &op, err, sizeof err), err);
        float *sc = malloc(317 * 4), d[H];
        for (int64_t i = 0; i < T; i++) {
            const bool need = nk[i] > TOPK || (v41 && nk[i] > CB * CT);
            if (!need) {
                if (v41) cand2[i * CT] = -1;
                if (v41)
                    for (int k = 0; k < TOPK; k++) sel2[i * TOPK + k] = k < nk[i] ? k : -1;
                continue;
            }
            for (int32_t k = 0; k < nk[i]; k++) {
                for (int h = 0; h < H; h++) d[h] = og_dot_f32_device_ref(q + (i * H + h) * D, keys + (size_t)k * D, D);
                sc[k] = og_ds4c_index_score(w + i * H, d, H);
            }
            select_by_rank(&op, i, sc, nk[i], sel2 + i * TOPK, v41 ? cand2 + i * CT : NULL);
        }
        for (int64_t i = 0; i < T; i++) {
            if (!v41 && nk[i] <= TOPK) continue; /* left alone */
            for (int k = 0; k < TOPK; k++)
                if (sel[i * TOPK + k] != sel2[i * TOPK + k])
                    fail_msg("indexer%s token %lld sel[%d]: header %d, ds4_ops %d", v41 ? " (V4.1)" : "", (long long)i, k,
                             sel2[i * TOPK + k], sel[i * TOPK + k]);
            if (v41)
                for (int k = 0; k < (cand[i * CT] < 0 ? 1 : CT); k++)
                    if (cand[i * CT + k] != cand2[i * CT + k])
                        fail_msg("indexer token %lld cand[%d]: header %d, ds4_ops %d", (long long)i, k, cand2[i * CT + k],
                                 cand[i * CT + k]);
        }
        if (v41) { /* a reindex layer masked by the candidate source's blocks */
            og_indexer_op ri = op;
            ri.cand_out = NULL;
            ri.cand_in = cand;
            ri.sel = sel3;
            run_ok(c->dev->ops->indexer(c->dev, c->s, &ri, err, sizeof err), err);
            for (int64_t i = 0; i < T; i++) {
                const bool masked = cand[i * CT] >= 0;
                if (!(nk[i] > TOPK || masked)) {
                    for (int k = 0; k < TOPK; k++) sel4[i * TOPK + k] = k < nk[i] ? k : -1;
                    continue;
                }
                for (int32_t k = 0; k < nk[i]; k++) {
                    if (!og_ds4c_key_eligible(cand + i * CT, CT, CB, k)) {
                        sc[k] = -INFINITY;
                        continue;
                    }
                    for (int h = 0; h < H; h++) d[h] = og_dot_f32_device_ref(q + (i * H + h) * D, keys + (size_t)k * D, D);
                    sc[k] = og_ds4c_index_score(w + i * H, d, H);
                }
                select_by_rank(&ri, i, sc, nk[i], sel4 + i * TOPK, NULL);
            }
            for (int k = 0; k < T * TOPK; k++)
                if (sel3[k] != sel4[k]) fail_msg("masked indexer sel[%d]: header %d, ds4_ops %d", k, sel4[k], sel3[k]);
        }
        free(sc);
    }
    free(keys);
}

/* Sink attention over raw rows and compressed ones, all and selected (V4) and sel_every lists ending in -1 (V4.1) */
static void test_sink_attn(void **state) {
    ctx *c = *state;
    char err[256];
    uint64_t rs = 17;
    enum { T = 3, H = 4, D = 64, BR = 8, NB = 4, TOPK = 6 };
    float raw[20 * D], comp[NB * BR * D], q[T * H * D], sinks[H], o[T * H * D], o2[T * H * D];
    rand_f(raw, 20 * D, 1.0f, &rs);
    rand_f(comp, NB * BR * D, 1.0f, &rs);
    rand_f(q, T * H * D, 1.5f, &rs);
    rand_f(sinks, H, 2.0f, &rs);
    const float *rows[30];
    const int64_t roff[T + 1] = {0, 5, 5, 17};
    for (int r = 0; r < 17; r++) rows[r] = raw + (r * 3 % 20) * D;
    float *cb[NB];
    for (int b = 0; b < NB; b++) cb[b] = comp + b * BR * D;
    const int32_t cfirst[T] = {0, 0, 0}, ncomp[T] = {4, 30, 12};
    const bool canon[T] = {true, true, true}; /* the GPU's one order: og_dot_f32_device */
    for (int every = 0; every < 2; every++) {
        int32_t sel[T * TOPK] = {0, 1, 2, 3, 0, 0, 2, 5, 9, 11, 20, 29, 0, 3, 4, 7, 10, 11};
        if (every) sel[3] = -1, sel[15] = -1;
        og_sink_attn_op op = {.n_tok = T, .n_head = H, .d_head = D, .kq_scale = 0.125f, .q = q, .o = o, .sinks = sinks,
                              .rows = rows, .row_off = roff, .comp = {cb, NB, BR, 0, D, D, OG_KV_F32}, .comp_first = cfirst,
                              .n_comp = ncomp, .sel = sel, .top_k = TOPK, .canonical = canon,
                              .sel_every = every};
        run_ok(c->dev->ops->sink_attention(c->dev, c->s, &op, err, sizeof err), err);
        for (int64_t i = 0; i < T; i++)
            for (int64_t h = 0; h < H; h++) {
                const float *set[40];
                int64_t n = 0;
                for (int64_t r = roff[i]; r < roff[i + 1]; r++) set[n++] = rows[r];
                const bool use_sel = every || ncomp[i] > TOPK;
                const int32_t nc = use_sel ? TOPK : ncomp[i];
                for (int32_t k = 0; k < nc; k++) {
                    const int32_t r = use_sel ? sel[i * TOPK + k] : k;
                    if (r < 0) break;
                    set[n++] = comp + (size_t)r * D;
                }
                float s[40];
                for (int64_t r = 0; r < n; r++) s[r] = og_dot_f32_device_ref(q + (i * H + h) * D, set[r], D) * 0.125f;
                const float inv = og_ds4c_sink_softmax(s, n, sinks[h]);
                for (int64_t d = 0; d < D; d++) {
                    float acc = 0.0f;
                    for (int64_t r = 0; r < n; r++) acc += (s[r] * inv) * set[r][d];
                    o2[(i * H + h) * D + d] = acc;
                }
            }
        /* a weighted sum of rows of magnitude <= 1 that cancels: 1 ulp per weight, absolutely */
        close_tol(o2, o, T * H * D, 8, 17 * 0x1p-23, every ? "sink attention (sel_every)" : "sink attention");
    }
}

/* Engram's gates on 4 copies */
static void test_engram(void **state) {
    ctx *c = *state;
    char err[256];
    uint64_t rs = 23;
    enum { T = 6, n = 4, N = 200 };
    float *sv = malloc(T * n * N * 4), *sv2 = malloc(T * n * N * 4), *kv = malloc(T * (n + 1) * N * 4), qw[n * N], kw[n * N];
    rand_f(sv, T * n * N, 2.0f, &rs);
    rand_f(kv, T * (n + 1) * N, 1.0f, &rs);
    rand_f(qw, n * N, 1.0f, &rs);
    rand_f(kw, n * N, 1.0f, &rs);
    memcpy(sv2, sv, T * n * N * 4);
    float g[T * n];
    for (int64_t t = 0; t < T; t++)
        for (int k = 0; k < n; k++)
            g[t * n + k] = og_ds4c_engram_gate(sv2 + (t * n + k) * N, kv + t * (n + 1) * N + k * N, qw + k * N, kw + k * N, N, 1e-20f);
    for (int64_t e = 0; e < T * n * N; e++) sv2[e] += g[e / N] * kv[(e / (n * N)) * (n + 1) * N + n * N + e % N];
    og_engram_op op = {T, N, n, sv, kv, qw, kw, 1e-20f};
    run_ok(c->dev->ops->engram(c->dev, c->s, &op, err, sizeof err), err);
    same(sv2, sv, T * n * N, "engram"); /* double exp only: libm's on both sides here */
    free(sv), free(sv2), free(kv);
}

/* pow2_ceil and round_e4m3 on every exponent, against frexpf / ldexpf / rintf */
static void test_bits(void **state) {
    (void)state;
    int n = 0;
    for (int e = -149; e < 127; e++)
        for (int k = 0; k < 5; k++) {
            const float x = ldexpf(1.0f + (float)k * 0.1875f, e);
            if (!(x > 0)) continue;
            int ex;
            const float f = frexpf(x, &ex), want = ldexpf(1.0f, f == 0.5f ? ex - 1 : ex);
            if (fbits(og_ds4c_pow2_ceil(x)) != fbits(want)) fail_msg("pow2_ceil(%g): %g, want %g", x, og_ds4c_pow2_ceil(x), want);
            n++;
        }
    assert_true(n > 1000);
}

int main(void) {
    ctx c;
    char err[256];
    assert_int_equal(og_kernels_init(OG_ISA_SCALAR, &c.kern), OG_OK);
    if (og_device_host_create(NULL, &c.kern, &c.dev, err, sizeof err) ||
        c.dev->ops->stream_create(c.dev, &c.s, err, sizeof err)) {
        fprintf(stderr, "host device: %s\n", err);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate(test_hc, &c),      cmocka_unit_test_prestate(test_qat, &c),
        cmocka_unit_test_prestate(test_compress, &c), cmocka_unit_test_prestate(test_indexer, &c),
        cmocka_unit_test_prestate(test_sink_attn, &c), cmocka_unit_test_prestate(test_engram, &c),
        cmocka_unit_test_prestate(test_bits, &c),
    };
    const int rc = cmocka_run_group_tests(tests, NULL, NULL);
    c.dev->ops->stream_destroy(c.dev, c.s);
    og_device_destroy(c.dev);
    return rc;
}
