/* Tiled canonical products on AVX-512 VNNI (og_quant.h og_gemm_fn): the k-quants and the
 * 32-element Q8_0, Q4_0, Q5_0 (below); the batched path of prefill and of grouped experts.
 *
 * A tile is 32 weight rows. Each of its blocks is unpacked once into the work
 * buffer (og_tile_block): the 256 quants as u8 with rows in the lanes (int32 lane j
 * of w[k4][h] holds elements 4k4 .. 4k4 + 3 of row 16h + j), the chunk scales, the
 * bsum factors, d and dmin. Then for four activation rows at a time, every
 * vpdpbusd takes one unpacked weight vector and four activation bytes broadcast, so
 * the inner loop is vpdpbusd and loads: no horizontal sums. A 16-element chunk's
 * sum is scaled as it closes (vpdpwssd with the scale in the low word where the
 * chunk sum fits int16, vpmulld where not: Q5_K, Q6_K); the type's offset (Q3_K
 * -4, Q6_K -32) or mins (Q2_K, Q4_K, Q5_K) come from the activation's bsums by
 * vpdpwssd. The block's I_b and S_b are exact integers, as every tier's; then the
 * canonical float steps (og_quant.h "Canonical numerics") are done for the 32 rows
 * at once: v = (dx dy) (float)I, v = fma(-(dmin dy), (float)S, v), lane b mod 32
 * += v, kept in the work buffer for OG_TILE_ACT activation rows, and the butterfly
 * at the end. So each (activation row, weight row) result is
 * og_type_traits.vec_dot_canonical's bits, whatever the tile, batch or thread.
 * Built with -mavx512f -mavx512bw -mavx512vl -mavx512vnni. */
#include "quant_internal.h"

#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#define MR 4 /* activation rows per micro tile */

typedef enum { SCALE_DPWSSD, SCALE_MULLD } scale_mode;
typedef enum { BP_OFFSET, BP_MINS } bp_role; /* the bsum factors: into I (an offset) or S (mins) */

static inline int32_t ld32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}
static inline int32_t pair16(int lo, int hi) { return (int32_t)((uint32_t)(uint16_t)lo | (uint32_t)(uint16_t)hi << 16); }

/* ---- unpacking one row's block ------------------------------------------------
 * Each writes u[0..256) (the quants as u8, in element order), the 16 chunk scales
 * sc[c] (in the type's scale_mode format), the 8 bsum factor pairs bp[t], d and dmin. */

/* Elements 128h + 32j + l of a 2-bit plane (Q2_K, Q3_K: qs[32h + l] >> 2j & 3) as
 * four vectors of 64 consecutive elements. */
static inline void two_bit_planes(const uint8_t *qs, __m512i q[4]) {
    const __m512i m3 = _mm512_set1_epi8(3);
    for (int h = 0; h < 2; h++) {
        const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * h)));
        for (int m = 0; m < 2; m++) {
            const __m512i sh = _mm512_inserti64x4(_mm512_set1_epi16((short)(4 * m)), _mm256_set1_epi16((short)(4 * m + 2)), 1);
            q[2 * h + m] = _mm512_and_si512(_mm512_srlv_epi16(v, sh), m3);
        }
    }
}

static void unpack_q2_K(const void *vx, uint8_t *u, int32_t *sc, int32_t *bp, float *d, float *dm) {
    const og_block_q2_K *x = vx;
    __m512i q[4];
    two_bit_planes(x->qs, q);
    for (int j = 0; j < 4; j++) _mm512_storeu_si512(u + 64 * j, q[j]);
    for (int c = 0; c < 16; c++) sc[c] = x->scales[c] & 0xF;
    for (int t = 0; t < 8; t++) bp[t] = pair16(x->scales[2 * t] >> 4, x->scales[2 * t + 1] >> 4);
    *d = _cvtsh_ss(x->d);
    *dm = _cvtsh_ss(x->dmin);
}

/* Q3_K: u = q2 + 4 * (bit e / 32 of hmask[e % 32]) in [0, 7], q = u - 4. */
static void unpack_q3_K(const void *vx, uint8_t *u, int32_t *sc, int32_t *bp, float *d, float *dm) {
    const og_block_q3_K *x = vx;
    __m512i q[4];
    two_bit_planes(x->qs, q);
    const __m512i hm = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x->hmask));
    for (int j = 0; j < 4; j++) { /* elements 64j + l: bit 2j, 64j + 32 + l: bit 2j + 1 */
        const __m512i bit = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (2 * j))), _mm256_set1_epi8((char)(2 << (2 * j))), 1);
        _mm512_storeu_si512(u + 64 * j, _mm512_mask_add_epi8(q[j], _mm512_test_epi8_mask(hm, bit), q[j], _mm512_set1_epi8(4)));
    }
    int8_t s[16]; /* the scales minus 32 (kquants.md §4) */
    _mm_storeu_si128((__m128i *)s, og_q3_scales(x->scales));
    for (int j = 0; j < 16; j++) sc[j] = pair16(s[j], 0);
    for (int t = 0; t < 8; t++) bp[t] = pair16(-4 * s[2 * t], -4 * s[2 * t + 1]);
    *d = _cvtsh_ss(x->d);
    *dm = 0;
}

/* Q4_K and Q5_K: element e's nibble is in qs[32 (e / 64) + e % 32] (low for e % 64 <
 * 32), Q5_K's fifth bit is bit e / 32 of qh[e % 32]; 32-element sub-blocks with
 * six-bit scales and mins. */
static inline void unpack_k45(const uint8_t *scales, const uint8_t *qs, const uint8_t *qh, uint16_t d16, uint16_t dmin16,
                              uint8_t *u, int32_t *sc, int32_t *bp, float *d, float *dm) {
    const __m512i hv = qh ? _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)qh)) : _mm512_setzero_si512();
    for (int c = 0; c < 4; c++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
        __m512i q = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1), _mm512_set1_epi8(0x0F));
        if (qh) {
            const __m512i bit = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (2 * c))), _mm256_set1_epi8((char)(2 << (2 * c))), 1);
            q = _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(hv, bit), q, _mm512_set1_epi8(0x10));
        }
        _mm512_storeu_si512(u + 64 * c, q);
    }
    uint8_t s[8], m[8];
    k4_unpack(scales, s, m);
    for (int c = 0; c < 16; c++) sc[c] = s[c / 2]; /* a positive int16 in the low word is also the int32 */
    for (int t = 0; t < 8; t++) bp[t] = pair16(m[t], m[t]); /* sub-block t: bsums 2t and 2t + 1 */
    *d = _cvtsh_ss(d16);
    *dm = _cvtsh_ss(dmin16);
}
static void unpack_q4_K(const void *vx, uint8_t *u, int32_t *sc, int32_t *bp, float *d, float *dm) {
    const og_block_q4_K *x = vx;
    unpack_k45(x->scales, x->qs, NULL, x->d, x->dmin, u, sc, bp, d, dm);
}
static void unpack_q5_K(const void *vx, uint8_t *u, int32_t *sc, int32_t *bp, float *d, float *dm) {
    const og_block_q5_K *x = vx;
    unpack_k45(x->scales, x->qs, x->qh, x->d, x->dmin, u, sc, bp, d, dm);
}

/* Q6_K: u = low 4 bits | high 2 bits << 4 in [0, 63], q = u - 32; element 128h + 32k
 * + l: ql[64h + 32 (k & 1) + l] >> 4 (k >> 1), qh[32h + l] >> 2k. */
static void unpack_q6_K(const void *vx, uint8_t *u, int32_t *sc, int32_t *bp, float *d, float *dm) {
    const og_block_q6_K *x = vx;
    const __m512i m4 = _mm512_set1_epi8(0x0F), m3 = _mm512_set1_epi8(3);
    for (int h = 0; h < 2; h++) {
        const __m512i ql = _mm512_loadu_si512(x->ql + 64 * h);
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(x->qh + 32 * h));
        const __m512i h01 = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
        const __m512i h23 = _mm512_srli_epi16(h01, 4);
        _mm512_storeu_si512(u + 128 * h, _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_slli_epi16(_mm512_and_si512(h01, m3), 4)));
        _mm512_storeu_si512(u + 128 * h + 64, _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                                             _mm512_slli_epi16(_mm512_and_si512(h23, m3), 4)));
    }
    for (int c = 0; c < 16; c++) sc[c] = x->scales[c];
    for (int t = 0; t < 8; t++) bp[t] = pair16(-32 * x->scales[2 * t], -32 * x->scales[2 * t + 1]);
    *d = _cvtsh_ss(x->d);
    *dm = 0;
}

typedef void (*unpack_fn)(const void *x, uint8_t *u, int32_t *sc, int32_t *bp, float *d, float *dm);

/* Columns of the 16 x 16 int32 matrix r[0..16) (row i = r[i]) into c[0..16). */
static inline void transpose16(const __m512i r[16], __m512i c[16]) {
    __m512i a[16], b[16];
    for (int i = 0; i < 8; i++) {
        a[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) { /* b[4i + k], 128-bit lane L: column 4L + k of rows 4i .. 4i + 3 */
        b[4 * i + 0] = _mm512_unpacklo_epi64(a[4 * i], a[4 * i + 2]);
        b[4 * i + 1] = _mm512_unpackhi_epi64(a[4 * i], a[4 * i + 2]);
        b[4 * i + 2] = _mm512_unpacklo_epi64(a[4 * i + 1], a[4 * i + 3]);
        b[4 * i + 3] = _mm512_unpackhi_epi64(a[4 * i + 1], a[4 * i + 3]);
    }
    for (int k = 0; k < 4; k++) { /* a 4 x 4 transpose of 128-bit lanes */
        const __m512i e0 = _mm512_shuffle_i32x4(b[k], b[4 + k], 0x44), e1 = _mm512_shuffle_i32x4(b[k], b[4 + k], 0xEE);
        const __m512i e2 = _mm512_shuffle_i32x4(b[8 + k], b[12 + k], 0x44), e3 = _mm512_shuffle_i32x4(b[8 + k], b[12 + k], 0xEE);
        c[k] = _mm512_shuffle_i32x4(e0, e2, 0x88);
        c[4 + k] = _mm512_shuffle_i32x4(e0, e2, 0xDD);
        c[8 + k] = _mm512_shuffle_i32x4(e1, e3, 0x88);
        c[12 + k] = _mm512_shuffle_i32x4(e1, e3, 0xDD);
    }
}

/* The 32 rows of 256 quant bytes at tmp into t->w, rows in the lanes. */
static void quants_to_lanes(const uint8_t *tmp, og_tile_block *t) {
    for (int h = 0; h < 2; h++)
        for (int q = 0; q < 4; q++) {
            __m512i rows[16], cols[16];
            for (int i = 0; i < 16; i++) rows[i] = _mm512_loadu_si512(tmp + 256 * (16 * h + i) + 64 * q);
            transpose16(rows, cols);
            for (int k = 0; k < 16; k++) _mm512_store_si512(t->w[16 * q + k][h], cols[k]);
        }
}
/* Rows 16h .. 16h + 15 of 16 int32 each at src (rows 16 apart), as columns. */
static inline void ints_to_lanes(const int32_t *src, int h, __m512i cols[16]) {
    __m512i rows[16];
    for (int i = 0; i < 16; i++) rows[i] = _mm512_loadu_si512(src + 16 * (16 * h + i));
    transpose16(rows, cols);
}

/* Block b of the tile's nrt rows (rows w_stride bytes apart; the rest of the 32 are
 * zero: their results are never stored) into t, through tmp: each row's quants
 * (32 x 256 bytes), then its 16 chunk scales and 16 more int32 (the 8 bsum factors,
 * d, dmin, zeros), all turned to rows-in-lanes by 16 x 16 transposes. */
static void unpack_tile_block(unpack_fn unpack, size_t bsize, const uint8_t *w, size_t w_stride, int nrt, int64_t b,
                              og_tile_block *t, uint8_t *tmp) {
    int32_t *sc = (int32_t *)(tmp + OG_TILE_ROWS * 256), *ex = sc + OG_TILE_ROWS * 16;
    for (int r = 0; r < OG_TILE_ROWS; r++) {
        int32_t *e = ex + 16 * r;
        if (r < nrt) {
            float d, dm;
            unpack(w + (size_t)r * w_stride + (size_t)b * bsize, tmp + 256 * r, sc + 16 * r, e, &d, &dm);
            memcpy(e + 8, &d, 4);
            memcpy(e + 9, &dm, 4);
            memset(e + 10, 0, 6 * 4);
        } else {
            memset(tmp + 256 * r, 0, 256);
            memset(sc + 16 * r, 0, 64);
            memset(e, 0, 64);
        }
    }
    quants_to_lanes(tmp, t);
    for (int h = 0; h < 2; h++) {
        __m512i cols[16];
        ints_to_lanes(sc, h, cols);
        for (int c = 0; c < 16; c++) _mm512_store_si512(t->sc[c][h], cols[c]);
        ints_to_lanes(ex, h, cols);
        for (int p = 0; p < 8; p++) _mm512_store_si512(t->bp[p][h], cols[p]);
        _mm512_store_si512(t->dx[h], cols[8]);
        _mm512_store_si512(t->dm[h], cols[9]);
    }
}

/* P[i][h] = the vpdpbusd sums of the k4 steps k0 .. k0 + steps - 1 of activation
 * row i (bytes a[i] + 4 k4, broadcast) against the tile block's rows 16h ..: the
 * activations as the signed operand (act_u8 false: u8 quants) or the unsigned one
 * (true: s8 quants, activations biased by 128). */
static inline __attribute__((always_inline)) void dp_steps(int mr, bool act_u8, const og_tile_block *t, int k0, int steps,
                                                            const uint8_t *const *a, __m512i P[MR][2]) {
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++) P[i][0] = P[i][1] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int k = 0; k < steps; k++) {
        const int k4 = k0 + k;
        const __m512i w0 = _mm512_load_si512(t->w[k4][0]), w1 = _mm512_load_si512(t->w[k4][1]);
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
            const __m512i av = _mm512_set1_epi32(ld32(a[i] + 4 * k4));
            P[i][0] = act_u8 ? _mm512_dpbusd_epi32(P[i][0], av, w0) : _mm512_dpbusd_epi32(P[i][0], w0, av);
            P[i][1] = act_u8 ? _mm512_dpbusd_epi32(P[i][1], av, w1) : _mm512_dpbusd_epi32(P[i][1], w1, av);
        }
    }
}

/* mr (<= MR) activation rows y[i] (their block b) against the tile's block t: the
 * canonical term of each of the mr x 32 pairs joins lane b % 32 of its lanes
 * (lanes + 64 i + 32 h + b % 32, one vector of 16 rows each). */
static inline __attribute__((always_inline)) void tile_mr(int mr, scale_mode sm, bp_role role, const og_tile_block *t,
                                                           const og_block_q8_K *const *y, __m512 *lanes, int64_t b) {
    __m512i I[MR][2], P[MR][2];
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++) I[i][0] = I[i][1] = _mm512_setzero_si512();
    const uint8_t *a[MR];
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++) a[i] = (const uint8_t *)y[i]->qs;
    for (int c = 0; c < 16; c++) {
        dp_steps(mr, false, t, 4 * c, 4, a, P);
        const __m512i s0 = _mm512_load_si512(t->sc[c][0]), s1 = _mm512_load_si512(t->sc[c][1]);
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
            if (sm == SCALE_DPWSSD) { /* the chunk sum fits int16: times the low word's scale */
                I[i][0] = _mm512_dpwssd_epi32(I[i][0], P[i][0], s0);
                I[i][1] = _mm512_dpwssd_epi32(I[i][1], P[i][1], s1);
            } else {
                I[i][0] = _mm512_add_epi32(I[i][0], _mm512_mullo_epi32(P[i][0], s0));
                I[i][1] = _mm512_add_epi32(I[i][1], _mm512_mullo_epi32(P[i][1], s1));
            }
        }
    }
    if (role == BP_MINS) /* P is free again: now S */
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) P[i][0] = P[i][1] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int p = 0; p < 8; p++) {
        const __m512i f0 = _mm512_load_si512(t->bp[p][0]), f1 = _mm512_load_si512(t->bp[p][1]);
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
            const __m512i bs = _mm512_set1_epi32(ld32(&y[i]->bsums[2 * p]));
            if (role == BP_OFFSET) {
                I[i][0] = _mm512_dpwssd_epi32(I[i][0], f0, bs);
                I[i][1] = _mm512_dpwssd_epi32(I[i][1], f1, bs);
            } else {
                P[i][0] = _mm512_dpwssd_epi32(P[i][0], f0, bs);
                P[i][1] = _mm512_dpwssd_epi32(P[i][1], f1, bs);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++) {
        const __m512 dy = _mm512_set1_ps(y[i]->d);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_load_ps(t->dx[h]), dy), _mm512_cvtepi32_ps(I[i][h]));
            if (role == BP_MINS) v = _mm512_fnmadd_ps(_mm512_mul_ps(_mm512_load_ps(t->dm[h]), dy), _mm512_cvtepi32_ps(P[i][h]), v);
            __m512 *l = lanes + 64 * i + 32 * h + (b & 31);
            *l = _mm512_add_ps(*l, v);
        }
    }
}

/* The butterfly of og_warp_reduce32 over the lanes of ma activation rows (16 weight
 * rows per vector; lanes from `used` on are +0, never stored), and the results of
 * the tile's nrt rows into out[i * ld + r]. */
static void finish_lanes(const __m512 *lanes, int ma, int used, int nrt, float *out, size_t ld) {
    for (int i = 0; i < ma; i++) /* the butterfly of og_warp_reduce32, 16 rows per vector */
        for (int h = 0; h < 2; h++) {
            const __m512 *l = lanes + 64 * i + 32 * h;
            __m512 v[16];
            if (used > 16) { /* in registers; lanes from `used` on are +0 and added as such */
#pragma GCC unroll 16
                for (int j = 0; j < 16; j++) v[j] = _mm512_add_ps(l[j], j + 16 < used ? l[j + 16] : _mm512_setzero_ps());
#pragma GCC unroll 16
                for (int o = 8; o; o >>= 1)
#pragma GCC unroll 16
                    for (int j = 0; j < o; j++) v[j] = _mm512_add_ps(v[j], v[j + o]);
            } else { /* short rows: only the live lanes. A step whose partner lane is +0
                      * leaves x + 0 (a -0 turned +0), and (x + 0) + 0 = x + 0, so the steps
                      * with no live partner at all count once */
                int cnt = used, o = 16;
                for (int j = 0; j < cnt; j++) v[j] = _mm512_add_ps(l[j], _mm512_setzero_ps());
                while (o >= cnt && o > 1) o >>= 1;
                for (; o && o < cnt; o >>= 1) {
                    for (int j = 0; j < o; j++) v[j] = _mm512_add_ps(v[j], j + o < cnt ? v[j + o] : _mm512_setzero_ps());
                    cnt = o;
                }
            }
            const int valid = nrt - 16 * h;
            if (valid <= 0) continue;
            const __mmask16 mk = valid >= 16 ? 0xFFFF : (__mmask16)((1u << valid) - 1);
            _mm512_mask_storeu_ps(out + (size_t)i * ld + 16 * h, mk, v[0]);
        }
}

/* The tiled product of one type (og_gemm_fn), its unpacking and its integer steps. */
static inline __attribute__((always_inline)) void gemm_k(unpack_fn unpack, size_t bsize, scale_mode sm, bp_role role,
                                                          int64_t n, const void *vw, size_t w_stride, int64_t nr,
                                                          const void *vy, size_t y_stride, int64_t m, float *out, size_t ld,
                                                          void *work) {
    const int64_t nb = n / OG_QK_K;
    uint8_t *base = (uint8_t *)(((uintptr_t)work + 63) & ~(uintptr_t)63);
    og_tile_block *tb = (og_tile_block *)base;
    __m512 *lanes = (__m512 *)(base + (size_t)nb * sizeof(og_tile_block)); /* [OG_TILE_ACT][2][32] */
    uint8_t *tmp = (uint8_t *)(lanes + OG_TILE_ACT * 2 * 32);
    for (int64_t r0 = 0; r0 < nr; r0 += OG_TILE_ROWS) {
        const int nrt = nr - r0 < OG_TILE_ROWS ? (int)(nr - r0) : OG_TILE_ROWS;
        const uint8_t *w = (const uint8_t *)vw + (size_t)r0 * w_stride;
        for (int64_t b = 0; b < nb; b++) unpack_tile_block(unpack, bsize, w, w_stride, nrt, b, &tb[b], tmp);
        for (int64_t a0 = 0; a0 < m; a0 += OG_TILE_ACT) {
            const int ma = m - a0 < OG_TILE_ACT ? (int)(m - a0) : OG_TILE_ACT;
            const int used = nb < 32 ? (int)nb : 32; /* lanes from `used` on stay +0: never stored or read */
            for (int k = 0; k < ma * 2; k++)
                for (int j = 0; j < used; j++) lanes[32 * k + j] = _mm512_setzero_ps();
            for (int64_t b = 0; b < nb; b++)
                for (int g = 0; g < ma; g += MR) {
                    const int mr = ma - g < MR ? ma - g : MR;
                    const og_block_q8_K *y[MR];
                    for (int i = 0; i < mr; i++)
                        y[i] = (const og_block_q8_K *)((const uint8_t *)vy + (size_t)(a0 + g + i) * y_stride) + b;
                    __m512 *l = lanes + 64 * g;
                    switch (mr) {
                    case 4: tile_mr(4, sm, role, &tb[b], y, l, b); break;
                    case 3: tile_mr(3, sm, role, &tb[b], y, l, b); break;
                    case 2: tile_mr(2, sm, role, &tb[b], y, l, b); break;
                    default: tile_mr(1, sm, role, &tb[b], y, l, b); break;
                    }
                }
            finish_lanes(lanes, ma, used, nrt, out + (size_t)a0 * ld + r0, ld);
        }
    }
}

#define GEMM(name, T, sm, role)                                                                                        \
    static void name##_gemm(int64_t n, const void *w, size_t w_stride, int64_t nr, const void *y, size_t y_stride,    \
                            int64_t m, float *out, size_t ld, void *work) {                                            \
        gemm_k(unpack_##name, sizeof(T), sm, role, n, w, w_stride, nr, y, y_stride, m, out, ld, work);                \
    }
/* chunk sums: Q2_K 16 x 3 x 128, Q3_K 16 x 7 x 128, Q4_K 16 x 15 x 128 fit int16;
 * Q5_K (31) and Q6_K (63) do not */
GEMM(q2_K, og_block_q2_K, SCALE_DPWSSD, BP_MINS)
GEMM(q3_K, og_block_q3_K, SCALE_DPWSSD, BP_OFFSET)
GEMM(q4_K, og_block_q4_K, SCALE_DPWSSD, BP_MINS)
GEMM(q5_K, og_block_q5_K, SCALE_MULLD, BP_MINS)
GEMM(q6_K, og_block_q6_K, SCALE_MULLD, BP_OFFSET)
#undef GEMM

/* ---- the 32-element formats (Q8_0, Q4_0, Q5_0: Q8_0 activations, no bsums) ------
 * A tile block holds eight of their blocks (256 elements, the same w layout), the
 * quants as s8 (q itself: Q4_0 nibble - 8, Q5_0 nibble + 16 fifth bit - 16), and
 * in sc[0..8) the correction -128 sum(q) of each block, in sc[8..16) its d (float
 * bits). The activations are the u8 operand, biased by 128 (a copy per micro tile
 * and tile block), so sum (a + 128) q - 128 sum q = I, exact. */

/* Block k (k < 8) of a row's tile block: quants q[32] as s8 into u, -128 sum q, d. */
static inline void put32(__m256i q, uint16_t d16, uint8_t *u, int32_t *corr, float *d) {
    _mm256_storeu_si256((__m256i *)u, q);
    const __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(q, _mm256_set1_epi8((char)0x80)), _mm256_setzero_si256());
    __m128i t = _mm_add_epi64(_mm256_castsi256_si128(sad), _mm256_extracti128_si256(sad, 1));
    t = _mm_add_epi64(t, _mm_unpackhi_epi64(t, t));
    *corr = -128 * (_mm_cvtsi128_si32(t) - 32 * 128); /* the sum of q + 128, less 32 x 128 */
    *d = _cvtsh_ss(d16);
}
/* The 16 bytes of nibbles at qs as 32 quants: low nibbles (elements 0-15), then high. */
static inline __m256i nib32(const uint8_t *qs) {
    const __m128i v = _mm_loadu_si128((const __m128i *)qs), m4 = _mm_set1_epi8(0x0F);
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(v, m4)), _mm_and_si128(_mm_srli_epi16(v, 4), m4), 1);
}
static void unpack32_q8_0(const void *vx, int k, uint8_t *u, int32_t *corr, float *d) {
    const og_block_q8_0 *x = (const og_block_q8_0 *)vx + k;
    put32(_mm256_loadu_si256((const __m256i *)x->qs), x->d, u, corr, d);
}
static void unpack32_q4_0(const void *vx, int k, uint8_t *u, int32_t *corr, float *d) {
    const og_block_q4_0 *x = (const og_block_q4_0 *)vx + k;
    put32(_mm256_sub_epi8(nib32(x->qs), _mm256_set1_epi8(8)), x->d, u, corr, d);
}
static void unpack32_q5_0(const void *vx, int k, uint8_t *u, int32_t *corr, float *d) {
    const og_block_q5_0 *x = (const og_block_q5_0 *)vx + k;
    const __m256i q = _mm256_mask_add_epi8(nib32(x->qs), (__mmask32)(uint32_t)ld32(x->qh), nib32(x->qs), _mm256_set1_epi8(0x10));
    put32(_mm256_sub_epi8(q, _mm256_set1_epi8(16)), x->d, u, corr, d);
}
typedef void (*unpack32_fn)(const void *x, int k, uint8_t *u, int32_t *corr, float *d);

/* Tile block b (blocks 8b .. 8b + nbk - 1 of each row) of the tile's nrt rows. */
static void unpack32_tile_block(unpack32_fn unpack, size_t bsize, const uint8_t *w, size_t w_stride, int nrt, int64_t b,
                                int nbk, og_tile_block *t, uint8_t *tmp) {
    int32_t *ex = (int32_t *)(tmp + OG_TILE_ROWS * 256);
    for (int r = 0; r < OG_TILE_ROWS; r++) {
        int32_t *e = ex + 16 * r;
        memset(e, 0, 64);
        if (r >= nrt) {
            memset(tmp + 256 * r, 0, 256);
            continue;
        }
        const uint8_t *x = w + (size_t)r * w_stride + (size_t)(8 * b) * bsize;
        for (int k = 0; k < 8; k++) {
            if (k >= nbk) {
                memset(tmp + 256 * r + 32 * k, 0, 32);
                continue;
            }
            float d;
            unpack(x, k, tmp + 256 * r + 32 * k, &e[k], &d);
            memcpy(&e[8 + k], &d, 4);
        }
    }
    quants_to_lanes(tmp, t);
    for (int h = 0; h < 2; h++) {
        __m512i cols[16];
        ints_to_lanes(ex, h, cols);
        for (int c = 0; c < 16; c++) _mm512_store_si512(t->sc[c][h], cols[c]);
    }
}

/* mr activation rows (biased quants ab[i][256], blocks y[i][0..nbk)) against the tile
 * block t: each of its nbk blocks' terms join lane (8b + k) % 32. */
static inline __attribute__((always_inline)) void tile32_mr(int mr, const og_tile_block *t, const uint8_t *ab,
                                                             const og_block_q8_0 *const *y, int nbk, __m512 *lanes, int64_t b) {
    const uint8_t *a[MR];
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++) a[i] = ab + 256 * i;
    for (int k = 0; k < nbk; k++) {
        __m512i P[MR][2];
        dp_steps(mr, true, t, 8 * k, 8, a, P);
        const int lane = (int)((8 * b + k) & 31);
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
            const __m512 dy = _mm512_set1_ps(_cvtsh_ss(y[i][k].d));
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                const __m512i I = _mm512_add_epi32(P[i][h], _mm512_load_si512(t->sc[k][h]));
                const __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_load_ps((const float *)t->sc[8 + k][h]), dy), _mm512_cvtepi32_ps(I));
                __m512 *l = lanes + 64 * i + 32 * h + lane;
                *l = _mm512_add_ps(*l, v);
            }
        }
    }
}

/* og_gemm_fn of the 32-element formats: gemm_k's loops over tile blocks of eight. */
static inline __attribute__((always_inline)) void gemm32(unpack32_fn unpack, size_t bsize, int64_t n, const void *vw,
                                                          size_t w_stride, int64_t nr, const void *vy, size_t y_stride,
                                                          int64_t m, float *out, size_t ld, void *work) {
    const int64_t nb = n / 32, ntb = (nb + 7) / 8;
    uint8_t *base = (uint8_t *)(((uintptr_t)work + 63) & ~(uintptr_t)63);
    og_tile_block *tb = (og_tile_block *)base;
    __m512 *lanes = (__m512 *)(base + (size_t)ntb * sizeof(og_tile_block));
    uint8_t *tmp = (uint8_t *)(lanes + OG_TILE_ACT * 2 * 32);
    uint8_t ab[MR * 256] __attribute__((aligned(64)));
    const int used = nb < 32 ? (int)nb : 32;
    for (int64_t r0 = 0; r0 < nr; r0 += OG_TILE_ROWS) {
        const int nrt = nr - r0 < OG_TILE_ROWS ? (int)(nr - r0) : OG_TILE_ROWS;
        const uint8_t *w = (const uint8_t *)vw + (size_t)r0 * w_stride;
        for (int64_t b = 0; b < ntb; b++)
            unpack32_tile_block(unpack, bsize, w, w_stride, nrt, b, nb - 8 * b < 8 ? (int)(nb - 8 * b) : 8, &tb[b], tmp);
        for (int64_t a0 = 0; a0 < m; a0 += OG_TILE_ACT) {
            const int ma = m - a0 < OG_TILE_ACT ? (int)(m - a0) : OG_TILE_ACT;
            for (int k = 0; k < ma * 2; k++)
                for (int j = 0; j < used; j++) lanes[32 * k + j] = _mm512_setzero_ps();
            for (int64_t b = 0; b < ntb; b++) {
                const int nbk = nb - 8 * b < 8 ? (int)(nb - 8 * b) : 8;
                for (int g = 0; g < ma; g += MR) {
                    const int mr = ma - g < MR ? ma - g : MR;
                    const og_block_q8_0 *y[MR];
                    for (int i = 0; i < mr; i++) {
                        y[i] = (const og_block_q8_0 *)((const uint8_t *)vy + (size_t)(a0 + g + i) * y_stride) + 8 * b;
                        for (int k = 0; k < nbk; k++)
                            _mm256_store_si256((__m256i *)(ab + 256 * i + 32 * k),
                                               _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)y[i][k].qs),
                                                                _mm256_set1_epi8((char)0x80)));
                    }
                    __m512 *l = lanes + 64 * g;
                    switch (mr) {
                    case 4: tile32_mr(4, &tb[b], ab, y, nbk, l, b); break;
                    case 3: tile32_mr(3, &tb[b], ab, y, nbk, l, b); break;
                    case 2: tile32_mr(2, &tb[b], ab, y, nbk, l, b); break;
                    default: tile32_mr(1, &tb[b], ab, y, nbk, l, b); break;
                    }
                }
            }
            finish_lanes(lanes, ma, used, nrt, out + (size_t)a0 * ld + r0, ld);
        }
    }
}

#define GEMM32(name, T)                                                                                              \
    static void name##_gemm(int64_t n, const void *w, size_t w_stride, int64_t nr, const void *y, size_t y_stride,  \
                            int64_t m, float *out, size_t ld, void *work) {                                          \
        gemm32(unpack32_##name, sizeof(T), n, w, w_stride, nr, y, y_stride, m, out, ld, work);                      \
    }
GEMM32(q8_0, og_block_q8_0)
GEMM32(q4_0, og_block_q4_0)
GEMM32(q5_0, og_block_q5_0)
#undef GEMM32

void og_kernels_fill_tile_avx512(og_kernels *k) {
    k->gemm_canonical[OG_TYPE_Q8_0] = q8_0_gemm;
    k->gemm_canonical[OG_TYPE_Q4_0] = q4_0_gemm;
    k->gemm_canonical[OG_TYPE_Q5_0] = q5_0_gemm;
    k->gemm_canonical[OG_TYPE_Q2_K] = q2_K_gemm;
    k->gemm_canonical[OG_TYPE_Q3_K] = q3_K_gemm;
    k->gemm_canonical[OG_TYPE_Q4_K] = q4_K_gemm;
    k->gemm_canonical[OG_TYPE_Q5_K] = q5_K_gemm;
    k->gemm_canonical[OG_TYPE_Q6_K] = q6_K_gemm;
}
