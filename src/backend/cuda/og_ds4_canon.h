/* deepseek4's and deepseek41's op arithmetic (og_device.h "deepseek4's ops",
 * "deepseek41's op"; shared/spec/deepseek4.md §4.1-4.3) written once for the
 * host C compiler and for nvcc: the per-token, per-row and per-element pieces
 * of src/backend/ds4_ops.c, in its order of float operations, as inline
 * functions the cuda device's kernels (kernels_ds4.cu) call and that
 * tests/unit/test_ds4_canon.c runs on the CPU against the cpu device's ops.
 *
 * Numerics. +, -, *, / and sqrt are IEEE operations on both sides (CUDA
 * without --use_fast_math divides and takes square roots correctly rounded;
 * --fmad=false keeps a * b + c two roundings, as the host's C, built without
 * FMA instructions, computes it). frexpf / ldexpf / rintf / fabsf of the host
 * are exact, here bit operations. The one difference is e^x: ds4_ops.c calls
 * libm's expf (float) and exp (double); here e^x in float is og_ds4c_expf,
 * the float nearest libm's / CUDA's double exp, and the double e^x is that
 * library's exp. Both floats are within 1 ulp of e^x (libm's expf is
 * correctly rounded but for rare near-ties; the double one rounded once is
 * too), so a value computed through one exp differs from the host's by at
 * most 1 ulp in that exp, and usually not at all: test_ds4_canon counts the
 * bitwise results. Everything else is bitwise.
 *
 * Not a public header of a part: included by the CUDA backend and its tests. */
#ifndef OG_DS4_CANON_H
#define OG_DS4_CANON_H

#include <math.h>
#include <stdint.h>

#include "og_quant_canon.h"

/* ---- exp ---- */

/* e^x as float: the nearest float of double exp (see the header comment).
 * OG_DS4C_LIBM_EXPF (a test build on the host only) takes libm's expf instead,
 * so the test proves every other operation bitwise. */
static OG_HD float og_ds4c_expf(float x) {
#if defined(OG_DS4C_LIBM_EXPF) && !defined(__CUDACC__)
    return expf(x);
#else
    return (float)exp((double)x);
#endif
}

/* 1 / (1 + e^-z) (ds4_ops.c's sigmoidf). */
static OG_HD float og_ds4c_sigmoidf(float z) { return 1.0f / (1.0f + og_ds4c_expf(-z)); }

/* ---- mHC (ds4_ops.c hc_mix_one, run_hc_collapse, run_hc_expand) ---- */

#define OG_DS4C_HC_MAX 16

/* og_softmax over n floats in place: the max, e^(x - max), the sum in double
 * in index order, times (float)(1 / sum). */
static OG_HD void og_ds4c_softmax(float *x, int n) {
    float mx = og_canon_bits_f32(0xff800000u);
    for (int i = 0; i < n; i++)
        if (x[i] > mx) mx = x[i];
    double sum = 0;
    for (int i = 0; i < n; i++) {
        x[i] = og_ds4c_expf(x[i] - mx);
        sum += x[i];
    }
    const float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++) x[i] *= inv;
}

/* One token's mixes (og_hc_mix_op): m [n_mix], pre [n], post [n], comb [n n]
 * (post, comb unused for the head). */
static OG_HD void og_ds4c_hc_mix_token(const float *m, int n, int head, const float *scale, const float *base, float eps,
                                       int sinkhorn_iters, float *pre, float *post, float *comb) {
    for (int k = 0; k < n; k++) pre[k] = og_ds4c_sigmoidf(m[k] * scale[0] + base[k]) + eps;
    if (head) return;
    for (int k = 0; k < n; k++) post[k] = 2.0f * og_ds4c_sigmoidf(m[n + k] * scale[1] + base[n + k]);
    float *C = comb; /* C[a][b] at a + n b */
    for (int i = 0; i < n * n; i++) C[i] = m[2 * n + i] * scale[2] + base[2 * n + i];
    for (int b = 0; b < n; b++) {
        float *col = C + n * b;
        og_ds4c_softmax(col, n);
        for (int a = 0; a < n; a++) col[a] += eps;
    }
    for (int it = 0; it < sinkhorn_iters; it++) {
        if (it)
            for (int b = 0; b < n; b++) {
                float s = 0;
                for (int a = 0; a < n; a++) s += C[a + n * b];
                for (int a = 0; a < n; a++) C[a + n * b] /= s + eps;
            }
        for (int a = 0; a < n; a++) {
            float s = 0;
            for (int b = 0; b < n; b++) s += C[a + n * b];
            for (int b = 0; b < n; b++) C[a + n * b] /= s + eps;
        }
    }
}

/* Collapse, element i of one token: x_i = s[0][i] w[0], then + s[k][i] w[k] in k order. */
static OG_HD float og_ds4c_hc_collapse_elem(const float *s, const float *w, int n, int64_t N, int64_t i) {
    float x = s[i] * w[0];
    for (int k = 1; k < n; k++) x += s[k * N + i] * w[k];
    return x;
}

/* Expand, element i of one token, in place on s [n][N]: every copy's new
 * value from the old ones (read first), post[a] y_i then + C[a][b] s[b][i] in b order. */
static OG_HD void og_ds4c_hc_expand_elem(float *s, float yi, const float *post, const float *C, int n, int64_t N,
                                         int64_t i) {
    float old[OG_DS4C_HC_MAX];
    for (int b = 0; b < n; b++) old[b] = s[b * N + i];
    for (int a = 0; a < n; a++) {
        float o = yi * post[a];
        for (int b = 0; b < n; b++) o += old[b] * C[a + n * b];
        s[a * N + i] = o;
    }
}

/* ---- QAT rounding (ds4_ops.c qat_row) ---- */

/* |v| (bits: fabsf). */
static OG_HD float og_ds4c_fabs(float v) { return og_canon_bits_f32(og_canon_f32_bits(v) & 0x7fffffffu); }

/* 2^ceil(log2 x) for finite x > 0, exact (pow2_ceil: frexpf's f == 0.5 keeps a power of two). */
static OG_HD float og_ds4c_pow2_ceil(float x) {
    const uint32_t u = og_canon_f32_bits(x), e = u >> 23 & 0xffu, m = u & 0x7fffffu;
    if (e) return m ? og_canon_bits_f32((e + 1) << 23) : x; /* e + 1 = 255: +inf, as ldexpf overflows */
    if (!(m & (m - 1))) return x;                           /* a subnormal power of two */
    int p = 22;
    while (!(m >> p)) p--;
    return og_canon_bits_f32(1u << (p + 1)); /* p + 1 = 23: 2^-126, the smallest normal */
}

/* Nearest E4M3 value (round_e4m3): clamp at 448, 3 mantissa bits, exponents
 * down to -6, ties to even. */
static OG_HD float og_ds4c_round_e4m3(float v) {
    float a = og_ds4c_fabs(v);
    if (a >= 448.0f) a = 448.0f;
    else if (a > 0) {
        int ex = (int)(og_canon_f32_bits(a) >> 23) - 127; /* floor(log2 a) for a normal a; below -6 otherwise */
        if (ex < -6) ex = -6;
        const float q = og_canon_bits_f32((uint32_t)(ex - 3 + 127) << 23); /* 2^(ex - 3) >= 2^-9: normal */
        a = og_canon_rint(a / q) * q;
    }
    return v < 0 ? -a : a;
}

/* Nearest E2M1 value clamped to +-6, ties to the even mantissa (round_e2m1). */
static OG_HD float og_ds4c_round_e2m1(float v) {
    const float grid[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    const float a = og_ds4c_fabs(v);
    float r = 6.0f;
    for (int i = 0; i < 7; i++) {
        if (a > grid[i + 1]) continue;
        const float mid = 0.5f * (grid[i] + grid[i + 1]);
        r = a < mid ? grid[i] : a > mid ? grid[i + 1] : grid[i & 1 ? i + 1 : i];
        break;
    }
    return v < 0 ? -r : r;
}

/* The max |x_i| of [b, e) as fmaxf finds it (a NaN never wins). */
static OG_HD float og_ds4c_amax(const float *x, int64_t b, int64_t e) {
    float amax = 0;
    for (int64_t i = b; i < e; i++) {
        const float a = og_ds4c_fabs(x[i]);
        if (a > amax) amax = a;
    }
    return amax;
}

/* FP8 block [b, e) (qat_fp8_block's body). */
static OG_HD void og_ds4c_fp8_block(float *x, int64_t b, int64_t e) {
    const float amax = og_ds4c_amax(x, b, e);
    const float scale = og_ds4c_pow2_ceil((amax > 1e-4f ? amax : 1e-4f) / 448.0f);
    for (int64_t i = b; i < e; i++) x[i] = og_ds4c_round_e4m3(x[i] / scale) * scale;
}

/* FP4 block [b, e) (qat_fp4's body): scale 2^ceil(log2(amax / 6)) or, e4m3_scale, amax / 6 to E4M3. */
static OG_HD void og_ds4c_fp4_block(float *x, int64_t b, int64_t e, int e4m3_scale) {
    const float amax = og_ds4c_amax(x, b, e);
    if (amax == 0) return;
    const float scale = e4m3_scale ? og_ds4c_round_e4m3(amax / 6.0f) : og_ds4c_pow2_ceil(amax / 6.0f);
    for (int64_t i = b; i < e; i++) x[i] = scale > 0 ? og_ds4c_round_e2m1(x[i] / scale) * scale : 0.0f;
}

/* The Walsh-Hadamard rotation of n values (a power of two), the butterfly
 * then times (float)(1 / sqrt(n)) (ds4_ops.c hadamard). */
static OG_HD void og_ds4c_hadamard(float *x, int64_t n) {
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

/* og_qat_kind values (og_device.h): the header stays free of og_device.h. */
enum { OG_DS4C_QAT_NONE = 0, OG_DS4C_QAT_FP8, OG_DS4C_QAT_FP4_HADAMARD, OG_DS4C_QAT_HADAMARD, OG_DS4C_QAT_F16,
       OG_DS4C_QAT_FP4, OG_DS4C_QAT_FP4_E4M3 };

/* The elements per scale of a block kind (og_qat_op.block, 0: the kind's default); 0 for the whole-row kinds. */
static OG_HD int64_t og_ds4c_qat_block(int kind, int32_t block) {
    if (kind == OG_DS4C_QAT_FP8) return block > 0 ? block : 64;
    if (kind == OG_DS4C_QAT_FP4) return block > 0 ? block : 32;
    if (kind == OG_DS4C_QAT_FP4_E4M3) return block > 0 ? block : 16;
    if (kind == OG_DS4C_QAT_FP4_HADAMARD) return 32;
    return 0;
}

/* Block [b, e) of a row of kind (after the rotation for FP4_HADAMARD). */
static OG_HD void og_ds4c_qat_block_run(int kind, float *x, int64_t b, int64_t e) {
    if (kind == OG_DS4C_QAT_FP8) og_ds4c_fp8_block(x, b, e);
    else if (kind == OG_DS4C_QAT_FP4 || kind == OG_DS4C_QAT_FP4_HADAMARD) og_ds4c_fp4_block(x, b, e, 0);
    else if (kind == OG_DS4C_QAT_FP4_E4M3) og_ds4c_fp4_block(x, b, e, 1);
}

/* A whole row's rounding of dims [0, n_round) (qat_row). */
static OG_HD void og_ds4c_qat_row(int kind, float *x, int64_t n_round, int32_t block) {
    if (kind == OG_DS4C_QAT_HADAMARD || kind == OG_DS4C_QAT_FP4_HADAMARD) og_ds4c_hadamard(x, n_round);
    if (kind == OG_DS4C_QAT_F16) {
        for (int64_t i = 0; i < n_round; i++) x[i] = og_canon_h2f(og_canon_f2h(x[i]));
        return;
    }
    const int64_t bl = og_ds4c_qat_block(kind, block);
    for (int64_t b = 0; bl && b < n_round; b += bl) og_ds4c_qat_block_run(kind, x, b, b + bl < n_round ? b + bl : n_round);
}

/* ---- the compressor (ds4_ops.c compress_sums, compress_rows) ---- */

/* Column j of an emitted row from its snapshot (kv, sc [n_row][W]: with
 * have_prev the previous window's lane A in rows [0, r), the current
 * window's rows from cur): the softmax-weighted sum in double. */
static OG_HD float og_ds4c_compress_col(const float *kv, const float *sc, int64_t W, int64_t r, int64_t cur,
                                        int have_prev, int64_t j) {
    double mx = -INFINITY, den = 0, num = 0;
    for (int64_t i = 0; have_prev && i < r; i++) mx = fmax(mx, (double)sc[i * W + j]);
    for (int64_t i = 0; i < r; i++) mx = fmax(mx, (double)sc[(cur + i) * W + j]);
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
    return (float)(num / den);
}

/* og_rmsnorm's scale of x [n]: the squares in double in index order, (float)(1 / sqrt(mean + eps)). */
static OG_HD float og_ds4c_rms_scale(const float *x, int64_t n, float eps) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    return (float)(1.0 / sqrt(ss / (double)n + (double)eps));
}

/* og_rope_apply's rotation of pair (a, b) with the host's cos c and sin sn. */
static OG_HD void og_ds4c_rope_pair(float *p, float c, float sn) {
    const float a = p[0], b = p[1];
    p[0] = a * c - b * sn;
    p[1] = a * sn + b * c;
}

/* An emitted row after its sums (compress_rows): RMSNorm with norm [W], RoPE
 * of the last d_rope dims with cs [d_rope / 2][2] (og_rope_cos_sin of the
 * row's position), qat on [0, qat_n), then f16 when round_f16. */
static OG_HD void og_ds4c_compress_finish(float *out, int64_t W, const float *norm, float eps, int d_rope, const float *cs,
                                          int qat, int64_t qat_n, int round_f16) {
    const float scale = og_ds4c_rms_scale(out, W, eps);
    for (int64_t i = 0; i < W; i++) out[i] = norm[i] * (out[i] * scale);
    for (int i = 0; i < d_rope / 2; i++) og_ds4c_rope_pair(out + W - d_rope + 2 * i, cs[2 * i], cs[2 * i + 1]);
    og_ds4c_qat_row(qat, out, qat_n, 0);
    if (round_f16) og_ds4c_qat_row(OG_DS4C_QAT_F16, out, W, 0);
}

/* ---- the indexer and the sink attention ---- */

/* Token i's score of one key from its heads' dots d[h] (og_dot_f32_device's):
 * sum in head order of w_h max(0, d_h), a NaN becoming -inf (key_score). */
static OG_HD float og_ds4c_index_score(const float *w, const float *d, int64_t n_head) {
    float s = 0;
    for (int64_t h = 0; h < n_head; h++) s += w[h] * (d[h] > 0 ? d[h] : 0);
    return s != s ? og_canon_bits_f32(0xff800000u) : s;
}

/* Whether (s1, c1) ranks before (s2, c2): the higher score, then the lower index (by_score). */
static OG_HD int og_ds4c_beats(float s1, int32_t c1, float s2, int32_t c2) { return s1 > s2 || (s1 == s2 && c1 < c2); }

/* Whether key c is in one of token's ascending cand_in blocks lst[cand_topk] (key_eligible). */
static OG_HD int og_ds4c_key_eligible(const int32_t *lst, int32_t cand_topk, int32_t cand_block, int32_t c) {
    if (!lst || lst[0] < 0) return 1;
    const int32_t b = c / cand_block;
    int32_t lo = 0, hi = cand_topk;
    while (lo < hi) {
        const int32_t mid = (lo + hi) / 2;
        if (lst[mid] < b) lo = mid + 1;
        else hi = mid;
    }
    return lo < cand_topk && lst[lo] == b;
}

/* The sink attention's softmax over n scores s[] (sink_heads), in place: the
 * max with the sink, e^(s - max) each, the denominator in double from
 * e^(sink - max) (double exp), then returns (float)(1 / den); the weights are s[r] * that. */
static OG_HD float og_ds4c_sink_softmax(float *s, int64_t n, float sink) {
    float mx = sink;
    for (int64_t r = 0; r < n; r++)
        if (s[r] > mx) mx = s[r];
    double den = exp((double)sink - mx);
    for (int64_t r = 0; r < n; r++) {
        s[r] = og_ds4c_expf(s[r] - mx);
        den += s[r];
    }
    return (float)(1.0 / den);
}

/* ---- Engram's gate (ds4_ops.c run_engram), one token and copy ---- */

/* g = sigmoid(sign(d) sqrt(max(|d|, 1e-6))) with d the scaled dot of
 * rms(s_k) rms(key_k) q_w k_w / sqrt(N), all in double in index order. */
static OG_HD float og_ds4c_engram_gate(const float *sk, const float *key, const float *qw, const float *kw, int64_t N,
                                       float eps) {
    double ss = 0, sk2 = 0;
    for (int64_t i = 0; i < N; i++) {
        ss += (double)sk[i] * sk[i];
        sk2 += (double)key[i] * key[i];
    }
    const double rs = 1.0 / sqrt(ss / (double)N + eps), rk = 1.0 / sqrt(sk2 / (double)N + eps);
    double d = 0;
    for (int64_t i = 0; i < N; i++) d += (sk[i] * rs) * (key[i] * rk) * ((double)qw[i] * kw[i]);
    d *= 1.0 / sqrt((double)N);
    const double z = (d > 0 ? 1.0 : d < 0 ? -1.0 : 0.0) * sqrt(fmax(fabs(d), 1e-6));
    return (float)(1.0 / (1.0 + exp(-z)));
}

#endif
