/* AVX-512 tier of attention's tiled kernels (og_kernels.dot_f32_device_tile,
 * axpy_f32_rows): the bits of og_dot_f32_device_tile_ref and
 * og_axpy_f32_rows_ref.
 *
 * Scores: each (query, row) pair keeps og_dot_f32_device's 32 lanes in two
 * registers (lanes 0-15, 16-31), the lane fmas in increasing element order,
 * the zero padding an fma of masked zeros. The butterfly (offsets 16, 8, 4,
 * 2, 1) is then done for 16 pairs at once: offset 16 is a0 + a1 per pair;
 * each later offset o folds two registers P, Q into one whose lanes with bit o
 * clear continue P's butterfly and the others Q's (lane l gets X_l + X_{l^o}
 * of its own pair, the same sum: only the order of one addition's operands can
 * differ, and IEEE addition commutes). After the last fold every lane of a
 * pair's butterfly holds lane 0's value, so lane L of the result is one pair's
 * score: pair bitrev4(j) fed in slot j lands in lane bitrev4(bitrev4(j)), its
 * own index. */
#include "quant_internal.h"
#include "og_canon_exp.h"

#include <immintrin.h>
#include <stddef.h>

/* Lanes below cnt (cnt may exceed 16). */
static inline __mmask16 lanes_below(int64_t cnt) {
    return cnt >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << cnt) - 1u);
}

/* The permutation and lane mask of the butterfly step at offset o (8, 4, 2, 1):
 * lane l takes lane l ^ o, of q where bit o of l is set, else of p. */
typedef struct fold_step {
    __m512i idx;
    __mmask16 m;
} fold_step;

static inline fold_step fold_at(int o) {
    int ix[16];
    unsigned m = 0;
    for (int l = 0; l < 16; l++) {
        ix[l] = (l ^ o) | (l & o ? 16 : 0);
        if (l & o) m |= 1u << l;
    }
    return (fold_step){_mm512_loadu_si512(ix), (__mmask16)m};
}

/* One butterfly step for two registers: lanes with bit o set continue q's
 * butterfly, the others p's. */
static inline __m512 fold(__m512 p, __m512 q, fold_step f) {
    return _mm512_add_ps(_mm512_mask_blend_ps(f.m, p, q), _mm512_permutex2var_ps(p, f.idx, q));
}

/* Two queries against four rows: s[qq * 4 + rr] = lanes i and i + 16 of the
 * pair's 32 added (the butterfly's offset 16). */
static inline __attribute__((always_inline)) void lanes_2x4(const float *const *rp, const float *q0, const float *q1,
                                                            int64_t n, __m512 *s) {
    __m512 a[2][4][2];
    for (int qq = 0; qq < 2; qq++)
        for (int rr = 0; rr < 4; rr++) a[qq][rr][0] = a[qq][rr][1] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 32 <= n; k += 32) {
        const __m512 x00 = _mm512_loadu_ps(q0 + k), x01 = _mm512_loadu_ps(q0 + k + 16);
        const __m512 x10 = _mm512_loadu_ps(q1 + k), x11 = _mm512_loadu_ps(q1 + k + 16);
        for (int rr = 0; rr < 4; rr++) {
            const __m512 w0 = _mm512_loadu_ps(rp[rr] + k), w1 = _mm512_loadu_ps(rp[rr] + k + 16);
            a[0][rr][0] = _mm512_fmadd_ps(w0, x00, a[0][rr][0]);
            a[0][rr][1] = _mm512_fmadd_ps(w1, x01, a[0][rr][1]);
            a[1][rr][0] = _mm512_fmadd_ps(w0, x10, a[1][rr][0]);
            a[1][rr][1] = _mm512_fmadd_ps(w1, x11, a[1][rr][1]);
        }
    }
    if (k < n) { /* the zero padding: fma(0, 0, acc) as the reference does */
        const __mmask16 m0 = lanes_below(n - k), m1 = lanes_below(n - k - 16 > 0 ? n - k - 16 : 0);
        const __m512 x00 = _mm512_maskz_loadu_ps(m0, q0 + k), x01 = _mm512_maskz_loadu_ps(m1, q0 + k + 16);
        const __m512 x10 = _mm512_maskz_loadu_ps(m0, q1 + k), x11 = _mm512_maskz_loadu_ps(m1, q1 + k + 16);
        for (int rr = 0; rr < 4; rr++) {
            const __m512 w0 = _mm512_maskz_loadu_ps(m0, rp[rr] + k), w1 = _mm512_maskz_loadu_ps(m1, rp[rr] + k + 16);
            a[0][rr][0] = _mm512_fmadd_ps(w0, x00, a[0][rr][0]);
            a[0][rr][1] = _mm512_fmadd_ps(w1, x01, a[0][rr][1]);
            a[1][rr][0] = _mm512_fmadd_ps(w0, x10, a[1][rr][0]);
            a[1][rr][1] = _mm512_fmadd_ps(w1, x11, a[1][rr][1]);
        }
    }
    for (int qq = 0; qq < 2; qq++)
        for (int rr = 0; rr < 4; rr++) s[qq * 4 + rr] = _mm512_add_ps(a[qq][rr][0], a[qq][rr][1]);
}

static void dot_f32_device_tile(const float *rows, int64_t row_stride, int64_t n_rows, const float *q, int64_t q_stride,
                                int64_t n_q, int64_t n, float scale, float *out, int64_t ld) {
    const __m512 vs = _mm512_set1_ps(scale);
    const fold_step f8 = fold_at(8), f4 = fold_at(4), f2 = fold_at(2), f1 = fold_at(1);
    for (int64_t i = 0; i < n_q; i += 2) {
        const float *q0 = q + i * q_stride, *q1 = i + 1 < n_q ? q0 + q_stride : q0; /* an odd last query twice */
        for (int64_t r0 = 0; r0 < n_rows; r0 += 8) {
            const float *rp[8];
            for (int rr = 0; rr < 8; rr++) /* rows past the tile repeat its last one (results dropped) */
                rp[rr] = rows + (r0 + rr < n_rows ? r0 + rr : n_rows - 1) * row_stride;
            /* lo[qq * 4 + rr]: query qq, row rr; hi: rows 4 + rr. Pair p = qq * 8 + row
             * goes in slot bitrev4(p) of the folds: slot j = (j0 j1 j2 j3) in bits
             * holds p = (j3 j2 j1 j0), i.e. qq = j0, row = 4 j1 + 2 j2 + j3. */
            __m512 lo[8], hi[8];
            lanes_2x4(rp, q0, q1, n, lo);
            lanes_2x4(rp + 4, q0, q1, n, hi);
            /* offset 8: slots (2t, 2t + 1) = rows of query 0 and 1 */
            const __m512 a0 = fold(lo[0], lo[4], f8), a1 = fold(hi[0], hi[4], f8); /* rows 0, 4 */
            const __m512 a2 = fold(lo[2], lo[6], f8), a3 = fold(hi[2], hi[6], f8); /* rows 2, 6 */
            const __m512 a4 = fold(lo[1], lo[5], f8), a5 = fold(hi[1], hi[5], f8); /* rows 1, 5 */
            const __m512 a6 = fold(lo[3], lo[7], f8), a7 = fold(hi[3], hi[7], f8); /* rows 3, 7 */
            const __m512 b0 = fold(a0, a1, f4), b1 = fold(a2, a3, f4), b2 = fold(a4, a5, f4), b3 = fold(a6, a7, f4);
            const __m512 c0 = fold(b0, b1, f2), c1 = fold(b2, b3, f2);
            const __m512 z = _mm512_mul_ps(fold(c0, c1, f1), vs);
            const int64_t nr = n_rows - r0 < 8 ? n_rows - r0 : 8;
            const __mmask16 m = lanes_below(nr);
            _mm512_mask_storeu_ps(out + i * ld + r0, m, z); /* lanes 0-7: query 0's rows */
            if (i + 1 < n_q) _mm512_mask_storeu_ps(out + (i + 1) * ld + r0, m, _mm512_shuffle_f32x4(z, z, 0xee));
        }
    }
}

/* y[0 .. 16 nv) (the last register masked by `last`) += a[r] * rows[r], rows in order. */
static inline __attribute__((always_inline)) void axpy_rows_nv(int nv, __mmask16 last, int64_t n_rows, const float *a,
                                                               const float *rows, int64_t row_stride, float *y) {
    __m512 acc[8];
    for (int v = 0; v < nv; v++) acc[v] = v + 1 < nv ? _mm512_loadu_ps(y + 16 * v) : _mm512_maskz_loadu_ps(last, y + 16 * v);
    for (int64_t r = 0; r < n_rows; r++) {
        const __m512 va = _mm512_set1_ps(a[r]);
        const float *x = rows + r * row_stride;
        for (int v = 0; v < nv; v++) {
            const __m512 xv = v + 1 < nv ? _mm512_loadu_ps(x + 16 * v) : _mm512_maskz_loadu_ps(last, x + 16 * v);
            acc[v] = _mm512_add_ps(acc[v], _mm512_mul_ps(va, xv)); /* the product rounded, then the sum */
        }
    }
    for (int v = 0; v + 1 < nv; v++) _mm512_storeu_ps(y + 16 * v, acc[v]);
    _mm512_mask_storeu_ps(y + 16 * (nv - 1), last, acc[nv - 1]);
}

static void axpy_f32_rows(int64_t n, int64_t n_rows, const float *a, const float *rows, int64_t row_stride, float *y) {
    for (int64_t j = 0; j < n; j += 128) {
        const int64_t left = n - j < 128 ? n - j : 128;
        const int nv = (int)((left + 15) / 16);
        const __mmask16 last = lanes_below(left - 16 * (nv - 1));
#define ROWS(NV) axpy_rows_nv(NV, last, n_rows, a, rows + j, row_stride, y + j)
        OG_SWITCH_NV8(nv, ROWS) /* constant register counts, so the sums stay in registers */
#undef ROWS
    }
}

/* og_canon_expf (og_quant_canon.h) on 16 floats: each step the same IEEE single
 * operation, the clamps and ends as its selects (NaN takes the upper clamp, then
 * comes back at the end), n / 2 as C's division (toward zero). */
static inline __m512 canon_expf16(__m512 x) {
    const __m512 x_hi = _mm512_set1_ps(88.8f), x_lo = _mm512_set1_ps(-104.0f);
    __m512 xc = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x_hi, _CMP_LE_OQ), x_hi, x);
    xc = _mm512_mask_mov_ps(xc, _mm512_cmp_ps_mask(x, x_lo, _CMP_LT_OQ), x_lo);
    const __m512 k = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(xc, _mm512_set1_ps(OG_CANON_EXP_LOG2E)),
                                                 _mm512_set1_ps(OG_CANON_EXP_SHIFT)),
                                   _mm512_set1_ps(-OG_CANON_EXP_SHIFT));
    const __m512 nk = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(k), _mm512_set1_epi32((int)0x80000000u)));
    const __m512 hi = _mm512_add_ps(xc, _mm512_mul_ps(nk, _mm512_set1_ps(OG_CANON_EXP_LN2_HI)));
    const __m512 r = _mm512_add_ps(hi, _mm512_mul_ps(nk, _mm512_set1_ps(OG_CANON_EXP_LN2_LO)));
    __m512 p = _mm512_set1_ps(OG_CANON_EXP_P7);
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(OG_CANON_EXP_P6));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(OG_CANON_EXP_P5));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(OG_CANON_EXP_P4));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(OG_CANON_EXP_P3));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(0.5f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.0f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.0f));
    const __m512i n = _mm512_cvttps_epi32(k); /* k is an integer in [-150, 128]: exact */
    const __m512i n1 = _mm512_srai_epi32(_mm512_add_epi32(n, _mm512_srli_epi32(n, 31)), 1), n2 = _mm512_sub_epi32(n, n1);
    const __m512i bias = _mm512_set1_epi32(127);
    p = _mm512_mul_ps(p, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, bias), 23)));
    p = _mm512_mul_ps(p, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, bias), 23)));
    p = _mm512_mask_mov_ps(p, _mm512_cmp_ps_mask(x, _mm512_set1_ps(OG_CANON_EXP_LO), _CMP_LT_OQ), _mm512_setzero_ps());
    p = _mm512_mask_mov_ps(p, _mm512_cmp_ps_mask(x, _mm512_set1_ps(OG_CANON_EXP_HI), _CMP_GT_OQ),
                           _mm512_castsi512_ps(_mm512_set1_epi32(0x7f800000)));
    return _mm512_mask_mov_ps(p, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

/* og_kernels.swiglu: og_canon_silu_mul (og_canon_silu_mul_clamp where limit > 0) on
 * 16 elements at a time, the tail under a mask. */
static void swiglu(float *out, const float *gate, const float *up, int64_t n, float limit) {
    const __m512 lim = _mm512_set1_ps(limit), nlim = _mm512_set1_ps(-limit), one = _mm512_set1_ps(1.0f);
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : lanes_below(n - i);
        __m512 g = _mm512_maskz_loadu_ps(m, gate + i), u = _mm512_maskz_loadu_ps(m, up + i);
        if (limit > 0) { /* gc = !(g <= limit) ? limit : g; ul = !(u >= -limit) ? -limit : u; uc = ul > limit ? limit : ul */
            g = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(g, lim, _CMP_LE_OQ), lim, g);
            u = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(u, nlim, _CMP_GE_OQ), nlim, u);
            u = _mm512_mask_mov_ps(u, _mm512_cmp_ps_mask(u, lim, _CMP_GT_OQ), lim);
        }
        const __m512 e = canon_expf16(_mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(g), sign)));
        const __m512 s = _mm512_div_ps(g, _mm512_add_ps(one, e));
        _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(s, u));
    }
}

void og_kernels_fill_attn_avx512(og_kernels *k) {
    k->dot_f32_device_tile = dot_f32_device_tile;
    k->axpy_f32_rows = axpy_f32_rows;
    k->swiglu = swiglu;
}
