/* Tiled canonical products on AVX-512 VNNI (og_quant.h og_gemm_fn): the k-quants and the
 * 32-element Q8_0, Q4_0, Q5_0 (below); the batched path of prefill and of grouped experts.
 *
 * A tile is 32 weight rows. Each of its blocks is unpacked once into the work
 * buffer (og_tile_block), by gathers of the same four bytes of 16 rows' blocks
 * (below): the 256 quants as u8 with rows in the lanes (int32 lane j
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

/* ---- unpacking straight into the lanes (gathers) ------------------------------
 * Sixteen rows at a time (half h of the tile): vpgatherdd takes the same four
 * bytes of each row's block (rows w_stride bytes apart, so 15 w_stride must fit
 * int32: OG_GEMM_MAX_STRIDE), which is one step k4 of the rows-in-lanes layout for
 * the formats whose bytes hold consecutive elements; rows past the tile's end
 * (live clear) read nothing and are zero. No transposes: their shuffles compete
 * with vpdpbusd for port 5, where gathers mostly use the load ports. */
typedef void (*gather_fn)(const uint8_t *blk, __m512i idx, __mmask16 live, og_tile_block *t, int h);

/* The four bytes at blk + off of the 16 rows (idx: their offsets). */
static inline __m512i gather32(const uint8_t *blk, __m512i idx, __mmask16 live, int off) {
    return _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, idx, blk + off, 1);
}
/* The fp16 in the low (hi false) or high word of each lane, as floats. */
static inline __m512 half_ps(__m512i v, bool hi) {
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(hi ? _mm512_srli_epi32(v, 16) : v));
}

/* Byte r of each lane of v (r < 4), zero-extended. */
static inline __m512i byte_of(__m512i v, int r) { return _mm512_and_si512(_mm512_srli_epi32(v, 8 * r), _mm512_set1_epi32(0xff)); }
/* Byte r of each lane of v, sign-extended. */
static inline __m512i sbyte_of(__m512i v, int r) { return _mm512_srai_epi32(_mm512_slli_epi32(v, 24 - 8 * r), 24); }
/* The int16 pair (lo, hi) of two int32 lanes (each within int16). */
static inline __m512i pair16v(__m512i lo, __m512i hi) {
    return _mm512_or_si512(_mm512_and_si512(lo, _mm512_set1_epi32(0xffff)), _mm512_slli_epi32(hi, 16));
}

/* Q2_K: element 128g + 32j + 4k + i (k < 8) is qs[32g + 4k + i] >> 2j & 3; scales[c]:
 * the chunk's scale in the low nibble, its min in the high one. */
static void gather_q2_K(const uint8_t *blk, __m512i idx, __mmask16 live, og_tile_block *t, int h) {
    const __m512i dd = gather32(blk, idx, live, 80), m4 = _mm512_set1_epi32(0x0f0f0f0f), m2 = _mm512_set1_epi32(0x03030303);
    _mm512_store_ps(t->dx[h], half_ps(dd, false));
    _mm512_store_ps(t->dm[h], half_ps(dd, true));
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++) { /* scales 4q .. 4q + 3 */
        const __m512i v = gather32(blk, idx, live, 4 * q), lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi32(v, 4), m4);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) _mm512_store_si512(t->sc[4 * q + r][h], byte_of(lo, r));
        _mm512_store_si512(t->bp[2 * q][h], pair16v(byte_of(hi, 0), byte_of(hi, 1)));
        _mm512_store_si512(t->bp[2 * q + 1][h], pair16v(byte_of(hi, 2), byte_of(hi, 3)));
    }
#pragma GCC unroll 2
    for (int g = 0; g < 2; g++)
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            const __m512i v = gather32(blk, idx, live, 16 + 32 * g + 4 * k);
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) _mm512_store_si512(t->w[32 * g + 8 * j + k][h], _mm512_and_si512(_mm512_srli_epi32(v, 2 * j), m2));
        }
}

/* Q3_K: u = q2 + 4 (bit 4g + j of hmask[4k + i]) for element 128g + 32j + 4k + i, in
 * [0, 7] (q = u - 4: the offset is the bsum term); the 16 scales minus 32 from the
 * 12 bytes as og_q3_scales reads them. */
static void gather_q3_K(const uint8_t *blk, __m512i idx, __mmask16 live, og_tile_block *t, int h) {
    _mm512_store_ps(t->dx[h], half_ps(gather32(blk, idx, live, 106), true)); /* d at 108: the word ending the block */
    _mm512_store_ps(t->dm[h], _mm512_setzero_ps());
    const __m512i a = gather32(blk, idx, live, 96), b = gather32(blk, idx, live, 100), c = gather32(blk, idx, live, 104);
    const __m512i m4 = _mm512_set1_epi32(0x0f0f0f0f), m2 = _mm512_set1_epi32(0x03030303), m1 = _mm512_set1_epi32(0x01010101);
    const __m512i v[4] = { /* bytes: scales 4q .. 4q + 3, plus 32 */
        _mm512_or_si512(_mm512_and_si512(a, m4), _mm512_slli_epi32(_mm512_and_si512(c, m2), 4)),
        _mm512_or_si512(_mm512_and_si512(b, m4), _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(c, 2), m2), 4)),
        _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(a, 4), m4), _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(c, 4), m2), 4)),
        _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(b, 4), m4), _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(c, 6), m2), 4))};
    const __m512i k32 = _mm512_set1_epi32(32);
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++) {
        __m512i sv[4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            sv[r] = _mm512_sub_epi32(byte_of(v[q], r), k32);
            _mm512_store_si512(t->sc[4 * q + r][h], _mm512_and_si512(sv[r], _mm512_set1_epi32(0xffff)));
        }
        const __m512i k4 = _mm512_set1_epi32(-4);
        _mm512_store_si512(t->bp[2 * q][h], pair16v(_mm512_mullo_epi32(sv[0], k4), _mm512_mullo_epi32(sv[1], k4)));
        _mm512_store_si512(t->bp[2 * q + 1][h], pair16v(_mm512_mullo_epi32(sv[2], k4), _mm512_mullo_epi32(sv[3], k4)));
    }
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
        const __m512i hm = gather32(blk, idx, live, 4 * k);
#pragma GCC unroll 2
        for (int g = 0; g < 2; g++) {
            const __m512i qv = gather32(blk, idx, live, 32 + 32 * g + 4 * k);
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                const __m512i q2 = _mm512_and_si512(_mm512_srli_epi32(qv, 2 * j), m2);
                const __m512i hb = _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(hm, 4 * g + j), m1), 2);
                _mm512_store_si512(t->w[32 * g + 8 * j + k][h], _mm512_or_si512(q2, hb));
            }
        }
    }
}

/* Q4_K and Q5_K's d, dmin, six-bit scales and mins (the 12 bytes at 4, as k4_unpack
 * reads them): chunks 2u, 2u + 1 take scale u, bsums 2u, 2u + 1 min u. */
static inline void gather_k45_scales(const uint8_t *blk, __m512i idx, __mmask16 live, og_tile_block *t, int h) {
    const __m512i dd = gather32(blk, idx, live, 0), a = gather32(blk, idx, live, 4);
    const __m512i b = gather32(blk, idx, live, 8), c = gather32(blk, idx, live, 12);
    _mm512_store_ps(t->dx[h], half_ps(dd, false));
    _mm512_store_ps(t->dm[h], half_ps(dd, true));
    const __m512i m6 = _mm512_set1_epi32(0x3f3f3f3f), m4 = _mm512_set1_epi32(0x0f0f0f0f), m2 = _mm512_set1_epi32(0x30303030);
    const __m512i s_lo = _mm512_and_si512(a, m6), m_lo = _mm512_and_si512(b, m6);
    const __m512i s_hi = _mm512_or_si512(_mm512_and_si512(c, m4), _mm512_and_si512(_mm512_srli_epi32(a, 2), m2));
    const __m512i m_hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(c, 4), m4), _mm512_and_si512(_mm512_srli_epi32(b, 2), m2));
#pragma GCC unroll 8
    for (int u = 0; u < 8; u++) {
        const __m512i sv = byte_of(u < 4 ? s_lo : s_hi, u & 3), mv = byte_of(u < 4 ? m_lo : m_hi, u & 3);
        _mm512_store_si512(t->sc[2 * u][h], sv); /* a positive int16 in the low word is also the int32 */
        _mm512_store_si512(t->sc[2 * u + 1][h], sv);
        _mm512_store_si512(t->bp[u][h], pair16v(mv, mv));
    }
}

/* Q4_K and Q5_K: element 64q + 4k + i (k < 8) is the low nibble of qs[32q + 4k + i],
 * element 64q + 32 + 4k + i its high nibble; Q5_K's fifth bits: bit 2q (low) and
 * 2q + 1 (high) of qh[4k + i]. */
static inline void gather_k45(const uint8_t *blk, __m512i idx, __mmask16 live, og_tile_block *t, int h, int qs_off,
                              int qh_off) {
    gather_k45_scales(blk, idx, live, t, h);
    const __m512i m4 = _mm512_set1_epi32(0x0f0f0f0f), m1 = _mm512_set1_epi32(0x01010101);
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
        const __m512i hv = qh_off >= 0 ? gather32(blk, idx, live, qh_off + 4 * k) : _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) {
            const __m512i v = gather32(blk, idx, live, qs_off + 32 * q + 4 * k);
            __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi32(v, 4), m4);
            if (qh_off >= 0) {
                lo = _mm512_or_si512(lo, _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(hv, 2 * q), m1), 4));
                hi = _mm512_or_si512(hi, _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(hv, 2 * q + 1), m1), 4));
            }
            _mm512_store_si512(t->w[16 * q + k][h], lo);
            _mm512_store_si512(t->w[16 * q + 8 + k][h], hi);
        }
    }
}
static void gather_q4_K(const uint8_t *blk, __m512i idx, __mmask16 live, og_tile_block *t, int h) {
    gather_k45(blk, idx, live, t, h, 16, -1);
}
static void gather_q5_K(const uint8_t *blk, __m512i idx, __mmask16 live, og_tile_block *t, int h) {
    gather_k45(blk, idx, live, t, h, 48, 16);
}

/* Q6_K: u = low 4 bits | high 2 bits << 4 in [0, 63] (q = u - 32) for element 128g +
 * 32j + 4k + i: ql[64g + 32 (j & 1) + 4k + i] >> 4 (j >> 1), qh[32g + 4k + i] >> 2j;
 * the scales int8. */
static void gather_q6_K(const uint8_t *blk, __m512i idx, __mmask16 live, og_tile_block *t, int h) {
    _mm512_store_ps(t->dx[h], half_ps(gather32(blk, idx, live, 206), true)); /* d at 208: the word ending the block */
    _mm512_store_ps(t->dm[h], _mm512_setzero_ps());
    const __m512i k32 = _mm512_set1_epi32(-32), m4 = _mm512_set1_epi32(0x0f0f0f0f), m2 = _mm512_set1_epi32(0x03030303);
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++) {
        const __m512i v = gather32(blk, idx, live, 192 + 4 * q);
        __m512i sv[4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) _mm512_store_si512(t->sc[4 * q + r][h], sv[r] = sbyte_of(v, r));
        _mm512_store_si512(t->bp[2 * q][h], pair16v(_mm512_mullo_epi32(sv[0], k32), _mm512_mullo_epi32(sv[1], k32)));
        _mm512_store_si512(t->bp[2 * q + 1][h], pair16v(_mm512_mullo_epi32(sv[2], k32), _mm512_mullo_epi32(sv[3], k32)));
    }
#pragma GCC unroll 2
    for (int g = 0; g < 2; g++)
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            const __m512i hq = gather32(blk, idx, live, 128 + 32 * g + 4 * k);
            const __m512i l0 = gather32(blk, idx, live, 64 * g + 4 * k), l1 = gather32(blk, idx, live, 64 * g + 32 + 4 * k);
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                const __m512i lo = _mm512_and_si512(_mm512_srli_epi32(j & 1 ? l1 : l0, 4 * (j >> 1)), m4);
                const __m512i hi = _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(hq, 2 * j), m2), 4);
                _mm512_store_si512(t->w[32 * g + 8 * j + k][h], _mm512_or_si512(lo, hi));
            }
        }
}

/* One tile block (the block at blk of row 0, and of the next rows w_stride bytes on)
 * of the tile's nrt rows into t by gathers, sixteen rows at a time. */
static inline void gather_tile_block(gather_fn gather, const uint8_t *blk, size_t w_stride, int nrt, og_tile_block *t) {
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32((int)w_stride));
    for (int h = 0; h < 2; h++) {
        const int live = nrt - 16 * h;
        const __mmask16 mk = live >= 16 ? 0xFFFF : live <= 0 ? 0 : (__mmask16)((1u << live) - 1);
        gather(blk + (size_t)(16 * h) * w_stride, idx, mk, t, h);
    }
}

/* P[i][h] = init[h] (or 0) + the vpdpbusd sums of the k4 steps k0 .. k0 + steps - 1 of activation
 * row i (bytes a[i] + 4 k4, broadcast) against the tile block's rows 16h ..: the
 * activations as the signed operand (act_u8 false: u8 quants) or the unsigned one
 * (true: s8 quants, activations biased by 128). */
static inline __attribute__((always_inline)) void dp_steps(int mr, bool act_u8, const og_tile_block *t, int k0, int steps,
                                                            const uint8_t *const *a, const int32_t (*init)[16], __m512i P[MR][2]) {
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++) { /* from zero, or from init[h] (a correction each sum takes anyway) */
        P[i][0] = init ? _mm512_load_si512(init[0]) : _mm512_setzero_si512();
        P[i][1] = init ? _mm512_load_si512(init[1]) : _mm512_setzero_si512();
    }
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
        dp_steps(mr, false, t, 4 * c, 4, a, NULL, P);
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
static inline __attribute__((always_inline)) void gemm_k(gather_fn gather, size_t bsize, scale_mode sm, bp_role role,
                                                          int64_t n, const void *vw, size_t w_stride, int64_t nr,
                                                          const void *vy, size_t y_stride, int64_t m, float *out, size_t ld,
                                                          void *work) {
    const int64_t nb = n / OG_QK_K;
    uint8_t *base = (uint8_t *)(((uintptr_t)work + 63) & ~(uintptr_t)63);
    og_tile_block *tb = (og_tile_block *)base;
    __m512 *lanes = (__m512 *)(base + (size_t)nb * sizeof(og_tile_block)); /* [OG_TILE_ACT][2][32] */
    for (int64_t r0 = 0; r0 < nr; r0 += OG_TILE_ROWS) {
        const int nrt = nr - r0 < OG_TILE_ROWS ? (int)(nr - r0) : OG_TILE_ROWS;
        const uint8_t *w = (const uint8_t *)vw + (size_t)r0 * w_stride;
        for (int64_t b = 0; b < nb; b++) gather_tile_block(gather, w + (size_t)b * bsize, w_stride, nrt, &tb[b]);
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

#define GEMM(name, T, gather, sm, role)                                                                                \
    static void name##_gemm(int64_t n, const void *w, size_t w_stride, int64_t nr, const void *y, size_t y_stride,    \
                            int64_t m, float *out, size_t ld, void *work) {                                            \
        gemm_k(gather, sizeof(T), sm, role, n, w, w_stride, nr, y, y_stride, m, out, ld, work);                       \
    }
/* chunk sums: Q2_K 16 x 3 x 128, Q3_K 16 x 7 x 128, Q4_K 16 x 15 x 128 fit int16;
 * Q5_K (31) and Q6_K (63) do not */
GEMM(q2_K, og_block_q2_K, gather_q2_K, SCALE_DPWSSD, BP_MINS)
GEMM(q3_K, og_block_q3_K, gather_q3_K, SCALE_DPWSSD, BP_OFFSET)
GEMM(q4_K, og_block_q4_K, gather_q4_K, SCALE_DPWSSD, BP_MINS)
GEMM(q5_K, og_block_q5_K, gather_q5_K, SCALE_MULLD, BP_MINS)
GEMM(q6_K, og_block_q6_K, gather_q6_K, SCALE_MULLD, BP_OFFSET)
#undef GEMM

/* ---- the 32-element formats (Q8_0, Q4_0, Q5_0: Q8_0 activations, no bsums) ------
 * A tile block holds eight of their blocks (256 elements, the same w layout), the
 * quants as s8 (q itself: Q4_0 nibble - 8, Q5_0 nibble + 16 fifth bit - 16), and
 * in sc[0..8) the correction -128 sum(q) of each block, in sc[8..16) its d (float
 * bits). The activations are the u8 operand, biased by 128 (a copy per micro tile
 * and tile block), so sum (a + 128) q - 128 sum q = I, exact. */

/* The 32-element blocks by gathers: block k (< 8) of a tile block is steps 8k ..
 * 8k + 7; each format gives the eight quant words of its block as s8 (q itself).
 * gather32_fn: block k of the 16 rows at blk (rows idx apart), its d in the low
 * word of *dd, its quants into w[0..8). */
typedef void (*gather32_fn)(const uint8_t *blk, __m512i idx, __mmask16 live, __m512i *dd, __m512i w[8]);

static void gather32_q8_0(const uint8_t *blk, __m512i idx, __mmask16 live, __m512i *dd, __m512i w[8]) {
    *dd = gather32(blk, idx, live, 0);
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) w[i] = gather32(blk, idx, live, 2 + 4 * i);
}
/* Q4_0: element 4i + l (i < 4) the low nibble of qs[4i + l], element 16 + 4i + l its
 * high nibble, less 8. */
static void gather32_q4_0(const uint8_t *blk, __m512i idx, __mmask16 live, __m512i *dd, __m512i w[8]) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), k8 = _mm512_set1_epi8(8);
    *dd = gather32(blk, idx, live, 0);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        const __m512i v = gather32(blk, idx, live, 2 + 4 * i);
        w[i] = _mm512_sub_epi8(_mm512_and_si512(v, m4), k8);
        w[4 + i] = _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi32(v, 4), m4), k8);
    }
}
/* Q5_0: Q4_0's nibbles plus 16 times bit e of qh for element e, less 16: the bits of
 * step g (elements 4g .. 4g + 3) are bits 4 (g % 2) .. + 3 of qh byte g / 2. */
static void gather32_q5_0(const uint8_t *blk, __m512i idx, __mmask16 live, __m512i *dd, __m512i w[8]) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), k16 = _mm512_set1_epi8(16);
    const __m512i qh = gather32(blk, idx, live, 2);
    *dd = gather32(blk, idx, live, 0);
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        const __m512i v = gather32(blk, idx, live, 6 + 4 * i);
        w[i] = _mm512_and_si512(v, m4);
        w[4 + i] = _mm512_and_si512(_mm512_srli_epi32(v, 4), m4);
    }
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) {
        /* qh byte g / 2 of each row in all four bytes of its lane (vpshufb stays in 128-bit lanes) */
        const __m512i hb = _mm512_shuffle_epi8(qh, _mm512_add_epi8(_mm512_set4_epi32(0x0C0C0C0C, 0x08080808, 0x04040404, 0),
                                                                  _mm512_set1_epi8((char)(g / 2))));
        const __m512i bit = _mm512_set1_epi32((int)(0x08040201u << (4 * (g % 2)))); /* byte l: bit 4 (g % 2) + l */
        w[g] = _mm512_sub_epi8(_mm512_mask_add_epi8(w[g], _mm512_test_epi8_mask(hb, bit), w[g], k16), k16);
    }
}

/* Tile block b (blocks 8b .. 8b + nbk - 1 of each row) of the tile's nrt rows: the
 * quants, in sc[k] the correction -128 sum(q) of block k (vpdpbusd of the s8 words
 * with ones), in sc[8 + k] its d (float bits); blocks past nbk are zero. */
static void gather32_tile_block(gather32_fn gather, size_t bsize, const uint8_t *w, size_t w_stride, int nrt, int64_t b,
                                int nbk, og_tile_block *t) {
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32((int)w_stride));
    for (int h = 0; h < 2; h++) {
        const int live = nrt - 16 * h;
        const __mmask16 mk = live >= 16 ? 0xFFFF : live <= 0 ? 0 : (__mmask16)((1u << live) - 1);
        const uint8_t *rows = w + (size_t)(16 * h) * w_stride + (size_t)(8 * b) * bsize;
        for (int k = 0; k < 8; k++) {
            __m512i dd = _mm512_setzero_si512(), q[8];
            for (int i = 0; i < 8; i++) q[i] = _mm512_setzero_si512();
            if (k < nbk) gather(rows + (size_t)k * bsize, idx, mk, &dd, q);
            __m512i sum = _mm512_setzero_si512();
            for (int i = 0; i < 8; i++) {
                _mm512_store_si512(t->w[8 * k + i][h], q[i]);
                sum = _mm512_dpbusd_epi32(sum, _mm512_set1_epi8(1), q[i]);
            }
            _mm512_store_si512(t->sc[k][h], _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sum, 7)));
            _mm512_store_ps((float *)t->sc[8 + k][h], half_ps(dd, false));
        }
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
        dp_steps(mr, true, t, 8 * k, 8, a, t->sc[k], P); /* from -128 sum(q): I itself */
        const int lane = (int)((8 * b + k) & 31);
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
            const __m512 dy = _mm512_set1_ps(_cvtsh_ss(y[i][k].d));
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                const __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_load_ps((const float *)t->sc[8 + k][h]), dy), _mm512_cvtepi32_ps(P[i][h]));
                __m512 *l = lanes + 64 * i + 32 * h + lane;
                *l = _mm512_add_ps(*l, v);
            }
        }
    }
}

/* og_gemm_fn of the 32-element formats: gemm_k's loops over tile blocks of eight. */
static inline __attribute__((always_inline)) void gemm32(gather32_fn gather, size_t bsize, int64_t n, const void *vw,
                                                          size_t w_stride, int64_t nr, const void *vy, size_t y_stride,
                                                          int64_t m, float *out, size_t ld, void *work) {
    const int64_t nb = n / 32, ntb = (nb + 7) / 8;
    uint8_t *base = (uint8_t *)(((uintptr_t)work + 63) & ~(uintptr_t)63);
    og_tile_block *tb = (og_tile_block *)base;
    __m512 *lanes = (__m512 *)(base + (size_t)ntb * sizeof(og_tile_block));
    uint8_t ab[MR * 256] __attribute__((aligned(64)));
    const int used = nb < 32 ? (int)nb : 32;
    for (int64_t r0 = 0; r0 < nr; r0 += OG_TILE_ROWS) {
        const int nrt = nr - r0 < OG_TILE_ROWS ? (int)(nr - r0) : OG_TILE_ROWS;
        const uint8_t *w = (const uint8_t *)vw + (size_t)r0 * w_stride;
        for (int64_t b = 0; b < ntb; b++)
            gather32_tile_block(gather, bsize, w, w_stride, nrt, b, nb - 8 * b < 8 ? (int)(nb - 8 * b) : 8, &tb[b]);
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
        gemm32(gather32_##name, sizeof(T), n, w, w_stride, nr, y, y_stride, m, out, ld, work);                      \
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
