/* deepseek4's and deepseek41's ops on the CPU devices (og_device.h
 * "deepseek4's ops", "deepseek41's op"; shared/spec/deepseek4.md §4.1-4.3):
 * mHC mixes with Sinkhorn, collapse and expand, the QAT rounding (FP8 E4M3;
 * Walsh-Hadamard + FP4 E2M1; V4.1's FP4 without rotation and FP4 with E4M3
 * scales), the KV compressor step, the lightning indexer's top-k (with V4.1's
 * candidate blocks and mask), attention with a sink over a row set and V4.1's
 * Engram gates. Checked and copied at issue (og_ds4_cop_make), run later
 * (og_ds4_cop_run). Every result of a token depends on that token's inputs
 * only (no reduction across the batch), so the ops are batch-invariant. */
#include "device_ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define HC_MAX 16
#define COMPRESS_MAX_RATIO 1024

static og_status bad(char *err, size_t errlen, const char *what) {
    return og_fail(err, errlen, OG_ERR_INVALID_ARG, "device op: %s", what);
}

static og_status check_view(const og_kv_view *v, const int32_t *first, const int32_t *n_rows, int64_t n_tok,
                            int64_t row_len, char *err, size_t errlen) {
    if (!v->n_blocks) return OG_OK;
    if (!v->blocks || v->block_rows < 1 || v->row_len != row_len || v->row_stride < v->row_len || v->offset < 0 ||
        (n_tok && (!first || !n_rows)))
        return bad(err, errlen, "a compressed-row view without blocks or rows of the head's length");
    if (v->type != OG_KV_F32) return bad(err, errlen, "compressed rows and indexer keys are f32 rows");
    for (int64_t i = 0; i < n_tok; i++)
        if (n_rows[i] < 0 || first[i] < 0 ||
            (n_rows[i] > 0 && (int64_t)first[i] + (n_rows[i] - 1) / v->block_rows >= v->n_blocks))
            return og_fail(err, errlen, OG_ERR_INVALID_ARG, "device op: token %lld's %d compressed rows from block %d "
                           "overrun the %d blocks", (long long)i, n_rows[i], first[i], v->n_blocks);
    return OG_OK;
}

/* The rounding's dims: any (FP8: blocks of 64, the last one may be short; F16),
 * or a power of two from 32 to 4096 (the Hadamard rotation's size, then
 * 32-blocks for FP4). */
static bool qat_dims_ok(og_qat_kind kind, int64_t n) {
    if (kind == OG_QAT_NONE || kind == OG_QAT_FP8 || kind == OG_QAT_F16 || kind == OG_QAT_FP4 ||
        kind == OG_QAT_FP4_E4M3)
        return n >= 0;
    return (kind == OG_QAT_FP4_HADAMARD || kind == OG_QAT_HADAMARD) && n >= 32 && n <= 4096 && !(n & (n - 1));
}

og_status og_ds4_cop_make(og_cop_kind kind, const void *desc, og_cop *c, char *err, size_t errlen) {
    size_t at = 0;
    switch (kind) {
    case OG_COP_HC_MIX: {
        const og_hc_mix_op *op = desc;
        if (!op->mix || !op->scale || !op->base || !op->pre || op->n_tok < 0 || op->n_hc < 1 || op->n_hc > HC_MAX ||
            !(op->eps >= 0) || (!op->head && (!op->post || !op->comb || op->sinkhorn_iters < 1)))
            return bad(err, errlen, "mHC mixes: missing tensor, copies outside 1..16 or no Sinkhorn iteration");
        c->u.hc_mix = *op;
        return OG_OK;
    }
    case OG_COP_HC_COLLAPSE:
    case OG_COP_HC_EXPAND: {
        const og_hc_op *op = desc;
        if (!op->s || !op->x || !op->w || op->n_tok < 0 || op->n_embd < 1 || op->n_hc < 1 || op->n_hc > HC_MAX ||
            (kind == OG_COP_HC_EXPAND && !op->comb))
            return bad(err, errlen, "mHC collapse/expand: missing tensor or copies outside 1..16");
        c->u.hc = *op;
        return OG_OK;
    }
    case OG_COP_QAT: {
        const og_qat_op *op = desc;
        if (!op->x.data || op->x.n < 1 || op->x.n_rows < 0 || op->x.stride < op->x.n || op->n_round > op->x.n ||
            !qat_dims_ok(op->kind, op->n_round) || op->block < 0 || op->block > 4096)
            return bad(err, errlen, "QAT: rows, kind, or dims to round (FP4: a power of two, 32 to 4096)");
        c->u.qat = *op;
        return OG_OK;
    }
    case OG_COP_COMPRESS: {
        const og_compress_op *op = desc;
        if (!op->kv || !op->score || !op->norm || op->n_tok < 0 || op->width < 1 || op->ratio < 1 ||
            op->ratio > COMPRESS_MAX_RATIO || (op->n_tok && (!op->state || !op->pos || !op->out)) ||
            op->rope.d_rope < 0 || op->rope.d_rope > op->width || op->rope.d_rope % 2 ||
            op->rope.d_rope > OG_ROPE_MAX_DIM || !(op->eps > 0) ||
            op->qat_n > op->width || !qat_dims_ok(op->qat, op->qat_n))
            return bad(err, errlen, "compressor: missing tensor, ratio outside 1..1024, RoPE or QAT dims");
        const size_t nt = (size_t)op->n_tok;
        for (size_t i = 0; i < nt; i++)
            if (!op->state[i] || op->pos[i] < 0)
                return bad(err, errlen, "compressor: a token without state or at a negative position");
        c->u.compress = *op;
        if (!nt) return OG_OK;
        if (!og_cop_own(c, 2 * og_cop_al16(nt * sizeof(float *)) + og_cop_al16(nt * sizeof(int32_t)))) break;
        c->u.compress.state = og_cop_dup(&c->own, &at, op->state, nt * sizeof(float *));
        c->u.compress.out = og_cop_dup(&c->own, &at, op->out, nt * sizeof(float *));
        c->u.compress.pos = og_cop_dup(&c->own, &at, op->pos, nt * sizeof(int32_t));
        return OG_OK;
    }
    case OG_COP_INDEXER: {
        const og_indexer_op *op = desc;
        og_status st;
        if (!op->q || !op->w || !op->sel || op->n_tok < 0 || op->n_head < 1 || op->d_head < 1 || op->top_k < 1 ||
            !op->keys.n_blocks)
            return bad(err, errlen, "indexer: missing tensor, heads, top-k or keys");
        if ((op->cand_out || op->cand_in) && (op->cand_block < 1 || op->cand_topk < 1 || op->cand_topk > (1 << 20)))
            return bad(err, errlen, "indexer: candidate blocks without a block size or a count");
        if ((st = check_view(&op->keys, op->key_first, op->n_keys, op->n_tok, op->d_head, err, errlen))) return st;
        const size_t nt = (size_t)op->n_tok;
        c->u.indexer = *op;
        if (!nt) return OG_OK;
        if (!og_cop_own(c, og_cop_al16((size_t)op->keys.n_blocks * sizeof(float *)) +
                              2 * og_cop_al16(nt * sizeof(int32_t)) + og_cop_al16(nt * sizeof(bool))))
            break;
        c->u.indexer.keys.blocks = og_cop_dup(&c->own, &at, op->keys.blocks, (size_t)op->keys.n_blocks * sizeof(float *));
        c->u.indexer.key_first = og_cop_dup(&c->own, &at, op->key_first, nt * sizeof(int32_t));
        c->u.indexer.n_keys = og_cop_dup(&c->own, &at, op->n_keys, nt * sizeof(int32_t));
        c->u.indexer.canonical = og_cop_dup(&c->own, &at, op->canonical, nt * sizeof(bool));
        return OG_OK;
    }
    case OG_COP_SINK_ATTN: {
        const og_sink_attn_op *op = desc;
        og_status st;
        if (!op->q || !op->o || !op->sinks || op->n_tok < 0 || op->n_head < 1 || op->d_head < 1 ||
            (op->n_tok && !op->row_off) || (op->sel && op->top_k < 1))
            return bad(err, errlen, "sink attention: missing tensor, heads or row offsets");
        const size_t nt = (size_t)op->n_tok;
        if (nt && op->row_off[0] != 0) return bad(err, errlen, "sink attention: row offsets do not start at 0");
        for (size_t i = 0; i < nt; i++)
            if (op->row_off[i + 1] < op->row_off[i]) return bad(err, errlen, "sink attention: decreasing row offsets");
        const size_t n_rows = nt ? (size_t)op->row_off[nt] : 0;
        if (n_rows && !op->rows) return bad(err, errlen, "sink attention: no rows");
        for (size_t r = 0; r < n_rows; r++)
            if (!op->rows[r]) return bad(err, errlen, "sink attention: a NULL row");
        if ((st = check_view(&op->comp, op->comp_first, op->n_comp, op->n_tok, op->d_head, err, errlen))) return st;
        c->u.sink_attn = *op;
        if (!nt) return OG_OK;
        const size_t nb = (size_t)op->comp.n_blocks;
        if (!og_cop_own(c, og_cop_al16(n_rows * sizeof(float *)) + og_cop_al16((nt + 1) * sizeof(int64_t)) +
                              og_cop_al16(nb * sizeof(float *)) + 2 * og_cop_al16(nt * sizeof(int32_t)) +
                              og_cop_al16(nt * sizeof(bool))))
            break;
        c->u.sink_attn.rows = og_cop_dup(&c->own, &at, op->rows, n_rows * sizeof(float *));
        c->u.sink_attn.row_off = og_cop_dup(&c->own, &at, op->row_off, (nt + 1) * sizeof(int64_t));
        if (nb) {
            c->u.sink_attn.comp.blocks = og_cop_dup(&c->own, &at, op->comp.blocks, nb * sizeof(float *));
            c->u.sink_attn.comp_first = og_cop_dup(&c->own, &at, op->comp_first, nt * sizeof(int32_t));
            c->u.sink_attn.n_comp = og_cop_dup(&c->own, &at, op->n_comp, nt * sizeof(int32_t));
        }
        c->u.sink_attn.canonical = og_cop_dup(&c->own, &at, op->canonical, nt * sizeof(bool));
        return OG_OK;
    }
    case OG_COP_ENGRAM: {
        const og_engram_op *op = desc;
        if (!op->s || !op->kv || !op->q_w || !op->k_w || op->n_tok < 0 || op->n_embd < 1 || op->n_hc < 1 ||
            op->n_hc > HC_MAX || !(op->eps > 0))
            return bad(err, errlen, "Engram gates: missing tensor, copies outside 1..16 or eps not positive");
        c->u.engram = *op;
        return OG_OK;
    }
    default:
        return bad(err, errlen, "not a deepseek4 op");
    }
    return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
}

/* ---- mHC ---- */

static float sigmoidf(float z) { return 1.0f / (1.0f + expf(-z)); }

static void hc_mix_one(const og_hc_mix_op *op, const float *m, float *pre, float *post, float *comb) {
    const int n = op->n_hc;
    for (int k = 0; k < n; k++) pre[k] = sigmoidf(m[k] * op->scale[0] + op->base[k]) + op->eps;
    if (op->head) return;
    for (int k = 0; k < n; k++) post[k] = 2.0f * sigmoidf(m[n + k] * op->scale[1] + op->base[n + k]);
    float *C = comb; /* C[a][b] at a + n b */
    for (int i = 0; i < n * n; i++) C[i] = m[2 * n + i] * op->scale[2] + op->base[2 * n + i];
    for (int b = 0; b < n; b++) { /* softmax over a, then + eps */
        float *col = C + n * b;
        og_softmax(col, n);
        for (int a = 0; a < n; a++) col[a] += op->eps;
    }
    for (int it = 0; it < op->sinkhorn_iters; it++) {
        if (it) /* columns: each b over a */
            for (int b = 0; b < n; b++) {
                float s = 0;
                for (int a = 0; a < n; a++) s += C[a + n * b];
                for (int a = 0; a < n; a++) C[a + n * b] /= s + op->eps;
            }
        for (int a = 0; a < n; a++) { /* rows: each a over b */
            float s = 0;
            for (int b = 0; b < n; b++) s += C[a + n * b];
            for (int b = 0; b < n; b++) C[a + n * b] /= s + op->eps;
        }
    }
}

static void run_hc_mix(const og_hc_mix_op *op) {
    const int n = op->n_hc, n_mix = op->head ? n : (2 + n) * n;
    for (int64_t t = 0; t < op->n_tok; t++)
        hc_mix_one(op, op->mix + t * n_mix, op->pre + t * n, op->head ? NULL : op->post + t * n,
                   op->head ? NULL : op->comb + t * n * n);
}

static void run_hc_collapse(const og_hc_op *op) {
    const int64_t N = op->n_embd, n = op->n_hc;
    for (int64_t t = 0; t < op->n_tok; t++) {
        const float *s = op->s + t * n * N, *w = op->w + t * n;
        float *x = op->x + t * N;
        for (int64_t i = 0; i < N; i++) x[i] = s[i] * w[0];
        for (int64_t k = 1; k < n; k++)
            for (int64_t i = 0; i < N; i++) x[i] += s[k * N + i] * w[k];
    }
}

/* tmp: [n_hc][n_embd] scratch */
static void run_hc_expand(const og_hc_op *op, float *tmp) {
    const int64_t N = op->n_embd, n = op->n_hc;
    for (int64_t t = 0; t < op->n_tok; t++) {
        float *s = op->s + t * n * N;
        const float *y = op->x + t * N, *post = op->w + t * n, *C = op->comb + t * n * n;
        for (int64_t a = 0; a < n; a++) {
            float *o = tmp + a * N;
            for (int64_t i = 0; i < N; i++) o[i] = y[i] * post[a];
            for (int64_t b = 0; b < n; b++)
                for (int64_t i = 0; i < N; i++) o[i] += s[b * N + i] * C[a + n * b];
        }
        memcpy(s, tmp, (size_t)(n * N) * sizeof *s);
    }
}

/* ---- QAT rounding ---- */

/* 2^ceil(log2(x)) for x > 0, exact (frexp: x = f 2^e, f in [0.5, 1)). */
static float pow2_ceil(float x) {
    int e;
    const float f = frexpf(x, &e);
    return ldexpf(1.0f, f == 0.5f ? e - 1 : e);
}

/* Nearest E4M3 value of v (|v| <= 448 after the clamp), ties to even: 3
 * mantissa bits, exponents down to -6, subnormals in steps of 2^-9. */
static float round_e4m3(float v) {
    float a = fabsf(v);
    if (a >= 448.0f) a = 448.0f;
    else if (a > 0) {
        int e;
        frexpf(a, &e); /* a in [2^(e-1), 2^e) */
        int ex = e - 1;
        if (ex < -6) ex = -6;
        const float q = ldexpf(1.0f, ex - 3);
        a = rintf(a / q) * q; /* the default rounding mode: ties to even */
    }
    return v < 0 ? -a : a;
}

/* Nearest E2M1 value of v, clamped to +-6, ties to even (the value whose
 * mantissa bit is 0). */
static float round_e2m1(float v) {
    static const float grid[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f}; /* even index: mantissa bit 0 */
    const float a = fabsf(v);
    float r = 6.0f;
    for (int i = 0; i < 7; i++) {
        if (a > grid[i + 1]) continue;
        const float mid = 0.5f * (grid[i] + grid[i + 1]);
        r = a < mid ? grid[i] : a > mid ? grid[i + 1] : grid[i & 1 ? i + 1 : i];
        break;
    }
    return v < 0 ? -r : r;
}

/* FP8 blocks of `block` (V4: 64, V4.1's window: 32; the last one may be
 * shorter: a model whose non-RoPE dims are not whole blocks, as the tiny test
 * presets). */
static void qat_fp8_block(float *x, int64_t n, int64_t block) {
    for (int64_t b = 0; b < n; b += block) {
        const int64_t e = b + block < n ? b + block : n;
        float amax = 0;
        for (int64_t i = b; i < e; i++) amax = fmaxf(amax, fabsf(x[i]));
        const float scale = pow2_ceil(fmaxf(amax, 1e-4f) / 448.0f);
        for (int64_t i = b; i < e; i++) x[i] = round_e4m3(x[i] / scale) * scale;
    }
}

/* Walsh-Hadamard transform of n values (n a power of two; Sylvester order),
 * the unnormalized butterfly times 1/sqrt(n). */
static void hadamard(float *x, int64_t n) {
    for (int64_t h = 1; h < n; h *= 2)
        for (int64_t i = 0; i < n; i += 2 * h)
            for (int64_t j = i; j < i + h; j++) {
                const float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
    const float s = (float)(1.0 / sqrt((double)n));
    for (int64_t i = 0; i < n; i++) x[i] *= s;
}

/* E2M1 blocks of `block` (the last one may be short), the block's scale
 * either the power of two 2^ceil(log2(amax / 6)) (V4's indexer after its
 * rotation, in blocks of 32; V4.1's indexer as it is) or, e4m3_scale, amax / 6
 * to the nearest E4M3 value (V4.1's compressed rows: og_qat_kind FP4_E4M3; a
 * scale that rounds to 0 zeroes the block). */
static void qat_fp4(float *x, int64_t n, int64_t block, bool e4m3_scale) {
    for (int64_t b = 0; b < n; b += block) {
        const int64_t e = b + block < n ? b + block : n;
        float amax = 0;
        for (int64_t i = b; i < e; i++) amax = fmaxf(amax, fabsf(x[i]));
        if (amax == 0) continue;
        const float scale = e4m3_scale ? round_e4m3(amax / 6.0f) : pow2_ceil(amax / 6.0f);
        for (int64_t i = b; i < e; i++) x[i] = scale > 0 ? round_e2m1(x[i] / scale) * scale : 0.0f;
    }
}

static void qat_fp4_hadamard(float *x, int64_t n) {
    hadamard(x, n);
    qat_fp4(x, n, 32, false);
}

static void qat_row(og_qat_kind kind, float *x, int64_t n_round, int32_t block) {
    if (kind == OG_QAT_FP8) qat_fp8_block(x, n_round, block > 0 ? block : 64);
    else if (kind == OG_QAT_FP4) qat_fp4(x, n_round, block > 0 ? block : 32, false);
    else if (kind == OG_QAT_FP4_E4M3) qat_fp4(x, n_round, block > 0 ? block : 16, true);
    else if (kind == OG_QAT_FP4_HADAMARD) qat_fp4_hadamard(x, n_round);
    else if (kind == OG_QAT_HADAMARD) hadamard(x, n_round);
    else if (kind == OG_QAT_F16)
        for (int64_t i = 0; i < n_round; i++) x[i] = og_fp16_to_fp32(og_fp32_to_fp16(x[i]));
}

/* ---- compressor ---- */

/* The step in three passes, each output row's arithmetic as in one pass over
 * the tokens: (1) in token order (a sequence's state carries from token to
 * token) each token's kv and score rows go into its state's slot, and where
 * a token completes a group the rows its output reads are copied out (snap)
 * before the overlap's shift; (2) on the pool, per (output row, block of
 * columns): the softmax-weighted sum over the group's rows from the copy;
 * (3) on the pool, per output row: RMSNorm, RoPE, rounding. */

#define COMP_COLS 64 /* columns of one output row per work item of pass 2 */

typedef struct comp_job {
    const og_compress_op *op;
    const int32_t *emit; /* [n_emit] the tokens that complete a group, in token order */
    const float *snap;   /* [n_emit][2][n_row][W]: kv then score rows, the previous window's lane A first */
    int64_t n_emit, n_row, n_cb;
} comp_job;

/* Rows of a snapshot: the previous window's lane A and the current window's
 * lane B (overlap, 2 ratio), or the window (ratio). */
static int64_t comp_snap_rows(const og_compress_op *op) { return op->overlap ? 2 * (int64_t)op->ratio : op->ratio; }

static void compress_sums(void *vctx, int ith, int nth) {
    const comp_job *cj = vctx;
    const og_compress_op *op = cj->op;
    const int64_t W = op->width, r = op->ratio, cur = op->overlap ? r : 0;
    for (int64_t it = ith; it < cj->n_emit * cj->n_cb; it += nth) {
        const int64_t e = it / cj->n_cb, j0 = it % cj->n_cb * COMP_COLS, j1 = j0 + COMP_COLS < W ? j0 + COMP_COLS : W;
        const int64_t t = cj->emit[e];
        const float *kv = cj->snap + e * 2 * cj->n_row * W, *sc = kv + cj->n_row * W;
        const bool have_prev = op->overlap && op->pos[t] + 1 > r; /* the first window has no previous one */
        float *out = op->out[t];
        for (int64_t j = j0; j < j1; j++) { /* the previous window's lane A, then the current window's lane B */
            double mx = -INFINITY, den = 0, num = 0;
            for (int64_t i = 0; have_prev && i < r; i++) mx = fmax(mx, sc[i * W + j]);
            for (int64_t i = 0; i < r; i++) mx = fmax(mx, sc[(cur + i) * W + j]);
            for (int64_t i = 0; have_prev && i < r; i++) {
                const double ex = exp((double)sc[i * W + j] - mx);
                den += ex;
                num += ex * kv[i * W + j];
            }
            for (int64_t i = 0; i < r; i++) {
                const double ex = exp((double)sc[(cur + i) * W + j] - mx);
                den += ex;
                num += ex * kv[(cur + i) * W + j];
            }
            out[j] = (float)(num / den);
        }
    }
}

static void compress_rows(void *vctx, int ith, int nth) {
    const comp_job *cj = vctx;
    const og_compress_op *op = cj->op;
    const int64_t W = op->width;
    for (int64_t e = ith; e < cj->n_emit; e += nth) {
        const int64_t t = cj->emit[e];
        float *out = op->out[t];
        og_rmsnorm(out, out, op->norm, W, op->eps);
        og_rope_apply(&op->rope, out + W - op->rope.d_rope, 1, 0, (int64_t)op->pos[t] + 1 - op->ratio);
        qat_row(op->qat, out, op->qat_n, 0);
        if (op->round_f16) qat_row(OG_QAT_F16, out, W, 0);
    }
}

static og_status run_compress(og_pool *pool, og_cop_scratch *scr, const og_compress_op *op) {
    const int64_t W = op->width, lanes = op->overlap ? 2 : 1, LW = lanes * W, r = op->ratio;
    const int64_t slots = op->overlap ? 2 * r : r, cur0 = op->overlap ? r : 0, n_row = comp_snap_rows(op);
    int64_t n_emit = 0;
    for (int64_t t = 0; t < op->n_tok; t++) n_emit += op->out[t] != NULL;
    const size_t snap_floats = (size_t)(2 * n_row * W);
    if (og_cop_scratch_reserve(scr, (size_t)n_emit * (snap_floats * sizeof(float) + sizeof(int32_t)) + 64))
        return OG_ERR_NOMEM;
    float *snap = scr->p;
    int32_t *emit = (int32_t *)(snap + (size_t)n_emit * snap_floats);
    int64_t e = 0;
    for (int64_t t = 0; t < op->n_tok; t++) {
        float *kv_st = op->state[t], *sc_st = kv_st + slots * LW;
        const int32_t p = op->pos[t];
        const int64_t slot = cur0 + p % r;
        memcpy(kv_st + slot * LW, op->kv + t * LW, (size_t)LW * sizeof(float));
        memcpy(sc_st + slot * LW, op->score + t * LW, (size_t)LW * sizeof(float));
        if (!op->out[t]) continue;
        float *kv = snap + (size_t)e * snap_floats, *sc = kv + n_row * W;
        const int64_t lane = op->overlap ? W : 0;
        for (int64_t i = 0; i < n_row; i++) { /* overlap: slots [0, r) lane A, then [r, 2r) lane B */
            const int64_t off = i * LW + (op->overlap && i >= r ? lane : 0);
            memcpy(kv + i * W, kv_st + off, (size_t)W * sizeof(float));
            memcpy(sc + i * W, sc_st + off, (size_t)W * sizeof(float));
        }
        emit[e++] = (int32_t)t;
        if (op->overlap) { /* the current window becomes the previous one */
            memcpy(kv_st, kv_st + r * LW, (size_t)(r * LW) * sizeof(float));
            memcpy(sc_st, sc_st + r * LW, (size_t)(r * LW) * sizeof(float));
        }
    }
    if (!n_emit) return OG_OK;
    comp_job cj = {op, emit, snap, n_emit, n_row, (W + COMP_COLS - 1) / COMP_COLS};
    /* one output row's sums alone stay on this thread: waking the pool costs more */
    const bool par = pool && n_emit * cj.n_cb > 1 && n_emit * n_row * W >= (1 << 14);
    if (par) og_pool_run(pool, compress_sums, &cj);
    else compress_sums(&cj, 0, 1);
    if (par && n_emit > 1) og_pool_run(pool, compress_rows, &cj);
    else compress_rows(&cj, 0, 1);
    return OG_OK;
}

/* ---- indexer ---- */

typedef struct scored {
    float s;
    int32_t c;
} scored;

static int by_score(const void *a, const void *b) {
    const scored *x = a, *y = b;
    if (x->s != y->s) return x->s > y->s ? -1 : 1; /* NaN never: the scores are finite or the row loses below */
    return x->c < y->c ? -1 : x->c > y->c;
}

static int by_index(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

static float dot_of(const og_kernels *k, bool canonical, const float *a, const float *b, int64_t n) {
    if (canonical) return k->dot_f32_device(a, b, n);
    float s;
    k->vec_dot[OG_TYPE_F32](n, &s, a, b);
    return s;
}

typedef struct idx_job {
    const og_indexer_op *op;
    const og_kernels *k;
    scored *buf;     /* [nth][stride]: the keys' scores, then the blocks' */
    int64_t stride;
    float *dots;     /* [nth][n_head][keys.block_rows]: a block's dots (tiled scoring), or NULL */
} idx_job;

/* Whether token i's key c lies in one of its cand_in blocks (a list starting
 * with -1, or none: every key). The list is ascending: a binary search. */
static bool key_eligible(const og_indexer_op *op, int64_t i, int32_t c) {
    if (!op->cand_in) return true;
    const int32_t *lst = op->cand_in + i * op->cand_topk, b = c / op->cand_block;
    if (lst[0] < 0) return true;
    int32_t lo = 0, hi = op->cand_topk;
    while (lo < hi) {
        const int32_t mid = (lo + hi) / 2;
        if (lst[mid] < b) lo = mid + 1;
        else hi = mid;
    }
    return lo < op->cand_topk && lst[lo] == b;
}

/* Token i's score of its key c: sum over heads in order of w_h relu(q_h . k_c);
 * -inf outside its candidate blocks. */
static float key_score(const idx_job *j, int64_t i, int32_t c) {
    const og_indexer_op *op = j->op;
    if (!key_eligible(op, i, c)) return -INFINITY;
    const bool canon = op->canonical && op->canonical[i];
    const float *w = op->w + i * op->n_head, *key = og_kv_view_row(&op->keys, op->key_first[i], c);
    float s = 0;
    for (int64_t h = 0; h < op->n_head; h++) {
        const float d = dot_of(j->k, canon, op->q + (i * op->n_head + h) * op->d_head, key, op->d_head);
        s += w[h] * (d > 0 ? d : 0);
    }
    return isnan(s) ? -INFINITY : s;
}

/* Token i's scores of its keys [c0, c1) (one block of the view) into out[0 ..
 * c1 - c0): key_score's, bit for bit. A canonical token with every key
 * eligible takes the tile kernel: its n_head queries against the block's rows
 * at once (each dot og_dot_f32_device's bits, times 1: unchanged), then the
 * same head sum per key; others key by key. dots: the thread's [n_head][block_rows]. */
static void score_block(const idx_job *j, int64_t i, int32_t c0, int32_t c1, scored *out, float *dots) {
    const og_indexer_op *op = j->op;
    const bool all = !op->cand_in || op->cand_in[i * op->cand_topk] < 0;
    if (!dots || !all || !(op->canonical && op->canonical[i])) {
        for (int32_t c = c0; c < c1; c++) out[c - c0] = (scored){key_score(j, i, c), c};
        return;
    }
    const int64_t br = op->keys.block_rows;
    j->k->dot_f32_device_tile(og_kv_view_row(&op->keys, op->key_first[i], c0), op->keys.row_stride, c1 - c0,
                              op->q + i * op->n_head * op->d_head, op->d_head, op->n_head, op->d_head, 1.0f, dots, br);
    const float *w = op->w + i * op->n_head;
    for (int32_t c = c0; c < c1; c++) {
        float s = 0;
        for (int64_t h = 0; h < op->n_head; h++) {
            const float d = dots[h * br + (c - c0)];
            s += w[h] * (d > 0 ? d : 0);
        }
        out[c - c0] = (scored){isnan(s) ? -INFINITY : s, c};
    }
}

/* The end of the view block holding key c, capped at n. */
static int32_t block_end(const og_indexer_op *op, int32_t c, int32_t n) {
    const int32_t e = (c / op->keys.block_rows + 1) * op->keys.block_rows;
    return e < n ? e : n;
}

/* Whether token i (n keys) needs its keys scored: a top_k to pick, candidate
 * blocks to choose, or (sel_all) a mask to apply. */
static bool needs_scores(const og_indexer_op *op, int64_t i, int32_t n) {
    return n > op->top_k || (op->cand_out && (int64_t)n > (int64_t)op->cand_block * op->cand_topk) ||
           (op->sel_all && op->cand_in && op->cand_in[i * op->cand_topk] >= 0);
}

/* sel_all: token i's rows 0 .. n-1 while they fit (no scores), -1 after. */
static void sel_every_row(const og_indexer_op *op, int64_t i, int32_t n) {
    int32_t *sel = op->sel + i * op->top_k;
    for (int32_t q = 0; q < op->top_k; q++) sel[q] = q < n ? q : -1;
}

/* The candidate source's blocks of token i from its keys' scores sc[n] (in
 * key order): the newest key's block, then the best others (scratch bs). */
static void pick_blocks(const og_indexer_op *op, int64_t i, const scored *sc, int32_t n, scored *bs) {
    int32_t *out = op->cand_out + i * op->cand_topk;
    if ((int64_t)n <= (int64_t)op->cand_block * op->cand_topk) {
        out[0] = -1;
        return;
    }
    const int32_t nb = (n + op->cand_block - 1) / op->cand_block, newest = nb - 1;
    for (int32_t b = 0; b < newest; b++) {
        float mx = -INFINITY;
        for (int32_t c = b * op->cand_block; c < (b + 1) * op->cand_block; c++) mx = fmaxf(mx, sc[c].s);
        bs[b] = (scored){mx, b};
    }
    qsort(bs, (size_t)newest, sizeof *bs, by_score);
    out[0] = newest;
    for (int32_t q = 1; q < op->cand_topk; q++) out[q] = bs[q - 1].c;
    qsort(out, (size_t)op->cand_topk, sizeof *out, by_index);
}

/* The top_k of sc[n] (scored), ascending by row, into token i's sel; the
 * candidate blocks first (pick sorts sc). */
static void pick(const og_indexer_op *op, int64_t i, scored *sc, int32_t n, scored *bs) {
    if (op->cand_out) pick_blocks(op, i, sc, n, bs);
    if (!op->sel_all && n <= op->top_k) return;
    qsort(sc, (size_t)n, sizeof *sc, by_score);
    int32_t *sel = op->sel + i * op->top_k, got = 0;
    for (int32_t q = 0; q < op->top_k && q < n; q++)
        if (!op->sel_all || sc[q].s != -INFINITY) sel[got++] = sc[q].c;
    qsort(sel, (size_t)got, sizeof *sel, by_index);
    for (int32_t q = got; q < op->top_k; q++) sel[q] = -1;
}

/* Several tokens: each thread takes whole tokens. */
static void indexer_tokens(void *vctx, int ith, int nth) {
    const idx_job *j = vctx;
    const og_indexer_op *op = j->op;
    scored *sc = j->buf + (size_t)ith * (size_t)j->stride;
    for (int64_t i = ith; i < op->n_tok; i += nth) {
        const int32_t n = op->n_keys[i];
        if (!needs_scores(op, i, n)) {
            if (op->cand_out) op->cand_out[i * op->cand_topk] = -1;
            if (op->sel_all) sel_every_row(op, i, n);
            continue;
        }
        float *dots = j->dots ? j->dots + (size_t)ith * (size_t)(op->n_head * op->keys.block_rows) : NULL;
        for (int32_t c = 0; c < n; c = block_end(op, c, n)) score_block(j, i, c, block_end(op, c, n), sc + c, dots);
        pick(op, i, sc, n, sc + n);
    }
}

/* One token (a decode step): the threads share its keys, block b of the view
 * to thread b mod nth (the same per-key arithmetic, so the same bits), then
 * one sorts. */
static void indexer_keys(void *vctx, int ith, int nth) {
    const idx_job *j = vctx;
    const og_indexer_op *op = j->op;
    const int32_t n = op->n_keys[0], br = op->keys.block_rows;
    float *dots = j->dots ? j->dots + (size_t)ith * (size_t)(op->n_head * br) : NULL;
    for (int32_t c = ith * br; c < n; c += nth * br) score_block(j, 0, c, block_end(op, c, n), j->buf + c, dots);
}

static og_status run_indexer(const og_kernels *k, og_pool *pool, og_cop_scratch *sc, const og_indexer_op *op) {
    if (!k->vec_dot[OG_TYPE_F32] || !k->dot_f32_device) return OG_ERR_INVALID_ARG;
    int32_t max_keys = 1;
    for (int64_t i = 0; i < op->n_tok; i++)
        if (op->n_keys[i] > max_keys) max_keys = op->n_keys[i];
    const int nth = pool ? og_pool_size(pool) : 1;
    const int64_t stride = 2 * (int64_t)max_keys; /* keys, then blocks (at most as many) */
    const bool tiled = k->dot_f32_device_tile && op->keys.block_rows >= 1;
    const size_t dots = tiled ? (size_t)nth * (size_t)(op->n_head * op->keys.block_rows) * sizeof(float) : 0;
    if (og_cop_scratch_reserve(sc, (size_t)nth * (size_t)stride * sizeof(scored) + dots)) return OG_ERR_NOMEM;
    idx_job j = {op, k, sc->p, stride, tiled ? (float *)(void *)((scored *)sc->p + (size_t)nth * (size_t)stride) : NULL};
    if (op->n_tok == 1 && needs_scores(op, 0, op->n_keys[0])) {
        if (pool) og_pool_run(pool, indexer_keys, &j);
        else indexer_keys(&j, 0, 1);
        pick(op, 0, j.buf, op->n_keys[0], j.buf + op->n_keys[0]);
    } else if (pool && op->n_tok > 1) {
        og_pool_run(pool, indexer_tokens, &j);
    } else {
        indexer_tokens(&j, 0, 1);
    }
    return OG_OK;
}

/* ---- attention with a sink ---- */

typedef struct sink_job {
    const og_sink_attn_op *op;
    const og_kernels *k;
    float *buf;          /* [nth][stride]: scores */
    const float **rows;  /* [nth][stride]: the token's row addresses */
    int64_t stride;
} sink_job;

static void sink_heads(void *vctx, int ith, int nth) {
    const sink_job *j = vctx;
    const og_sink_attn_op *op = j->op;
    const int64_t H = op->n_head, D = op->d_head;
    float *s = j->buf + (size_t)ith * (size_t)j->stride;
    const float **rows = j->rows + (size_t)ith * (size_t)j->stride;
    for (int64_t p = ith; p < op->n_tok * H; p += nth) {
        const int64_t i = p / H, h = p % H;
        int64_t n = 0;
        for (int64_t r = op->row_off[i]; r < op->row_off[i + 1]; r++) rows[n++] = op->rows[r];
        if (op->comp.n_blocks && op->n_comp[i] > 0) {
            const bool use_sel = op->sel && (op->sel_every || op->n_comp[i] > op->top_k);
            const int32_t nc = use_sel ? op->top_k : op->n_comp[i];
            for (int32_t c = 0; c < nc; c++) {
                const int32_t r = use_sel ? op->sel[i * op->top_k + c] : c;
                if (r < 0) break; /* sel_every: the end of the list */
                rows[n++] = og_kv_view_row(&op->comp, op->comp_first[i], r);
            }
        }
        const bool canon = op->canonical && op->canonical[i];
        const float *q = op->q + (i * H + h) * D;
        const float sink = op->sinks[h];
        float mx = sink;
        for (int64_t r = 0; r < n; r++) {
            s[r] = dot_of(j->k, canon, q, rows[r], D) * op->kq_scale;
            if (s[r] > mx) mx = s[r];
        }
        double den = exp((double)sink - mx);
        for (int64_t r = 0; r < n; r++) {
            s[r] = expf(s[r] - mx);
            den += s[r];
        }
        const float inv = (float)(1.0 / den);
        float *o = op->o + (i * H + h) * D;
        for (int64_t d = 0; d < D; d++) o[d] = 0;
        for (int64_t r = 0; r < n; r++) j->k->axpy_f32(D, s[r] * inv, rows[r], o);
    }
}

int64_t og_sink_attn_rows_most(const og_sink_attn_op *op) {
    int64_t most = 1;
    for (int64_t i = 0; i < op->n_tok; i++) {
        int64_t n = op->row_off[i + 1] - op->row_off[i];
        const bool use_sel = op->sel && (op->sel_every || op->n_comp[i] > op->top_k);
        if (op->comp.n_blocks) n += use_sel ? op->top_k : op->n_comp[i];
        if (n > most) most = n;
    }
    return most;
}

static og_status run_sink_attn(const og_kernels *k, og_pool *pool, og_cop_scratch *sc, const og_sink_attn_op *op) {
    if (!k->vec_dot[OG_TYPE_F32] || !k->dot_f32_device || !k->axpy_f32) return OG_ERR_INVALID_ARG;
    const int64_t most = og_sink_attn_rows_most(op);
    if (op->sel) /* the selected rows must lie inside each token's visible ones */
        for (int64_t i = 0; i < op->n_tok; i++) {
            const bool use_sel = op->comp.n_blocks && (op->sel_every || op->n_comp[i] > op->top_k);
            for (int32_t c = 0; use_sel && c < op->top_k; c++) {
                const int32_t r = op->sel[i * op->top_k + c];
                if (r < 0 && op->sel_every) break;
                if (r < 0 || r >= op->n_comp[i]) return OG_ERR_INVALID_ARG;
            }
        }
    const int nth = pool ? og_pool_size(pool) : 1;
    const size_t n_slots = (size_t)nth * (size_t)most; /* the row addresses, then the scores */
    if (og_cop_scratch_reserve(sc, n_slots * (sizeof(float *) + sizeof(float)))) return OG_ERR_NOMEM;
    sink_job j = {op, k, (float *)((const float **)sc->p + n_slots), sc->p, most};
    if (pool && op->n_tok * op->n_head > 1) og_pool_run(pool, sink_heads, &j);
    else sink_heads(&j, 0, 1);
    return OG_OK;
}

/* ---- Engram gates (V4.1) ---- */

static void run_engram(const og_engram_op *op) {
    const int64_t N = op->n_embd, n = op->n_hc;
    const double inv_sqrt_n = 1.0 / sqrt((double)N);
    for (int64_t t = 0; t < op->n_tok; t++) {
        float *s = op->s + t * n * N;
        const float *kv = op->kv + t * (n + 1) * N, *value = kv + n * N;
        for (int64_t k = 0; k < n; k++) {
            float *sk = s + k * N;
            const float *key = kv + k * N, *qw = op->q_w + k * N, *kw = op->k_w + k * N;
            double ss = 0, sk2 = 0;
            for (int64_t i = 0; i < N; i++) {
                ss += (double)sk[i] * sk[i];
                sk2 += (double)key[i] * key[i];
            }
            const double rs = 1.0 / sqrt(ss / (double)N + op->eps), rk = 1.0 / sqrt(sk2 / (double)N + op->eps);
            double d = 0;
            for (int64_t i = 0; i < N; i++) d += (sk[i] * rs) * (key[i] * rk) * ((double)qw[i] * kw[i]);
            d *= inv_sqrt_n;
            const double z = (d > 0 ? 1.0 : d < 0 ? -1.0 : 0.0) * sqrt(fmax(fabs(d), 1e-6));
            const float g = (float)(1.0 / (1.0 + exp(-z)));
            for (int64_t i = 0; i < N; i++) sk[i] += g * value[i];
        }
    }
}

og_status og_ds4_cop_run(const og_kernels *k, og_pool *pool, og_cop_scratch *sc, const og_cop *c) {
    switch (c->kind) {
    case OG_COP_HC_MIX:
        run_hc_mix(&c->u.hc_mix);
        return OG_OK;
    case OG_COP_HC_COLLAPSE:
        run_hc_collapse(&c->u.hc);
        return OG_OK;
    case OG_COP_HC_EXPAND: {
        if (og_cop_scratch_reserve(sc, (size_t)(c->u.hc.n_hc * c->u.hc.n_embd) * sizeof(float))) return OG_ERR_NOMEM;
        run_hc_expand(&c->u.hc, sc->p);
        return OG_OK;
    }
    case OG_COP_QAT:
        for (int64_t r = 0; r < c->u.qat.x.n_rows; r++)
            qat_row(c->u.qat.kind, c->u.qat.x.data + r * c->u.qat.x.stride, c->u.qat.n_round, c->u.qat.block);
        return OG_OK;
    case OG_COP_COMPRESS:
        return run_compress(pool, sc, &c->u.compress);
    case OG_COP_INDEXER:
        return run_indexer(k, pool, sc, &c->u.indexer);
    case OG_COP_SINK_ATTN:
        return run_sink_attn(k, pool, sc, &c->u.sink_attn);
    case OG_COP_ENGRAM:
        run_engram(&c->u.engram);
        return OG_OK;
    default:
        return OG_ERR_INVALID_ARG;
    }
}
