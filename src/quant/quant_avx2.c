/* AVX2 + FMA + F16C dot kernels. Integer inner sums are exact (maddubs products
 * of |q| <= 63 by |y| <= 127 cannot saturate int16); only the order of the final
 * float sums differs from the reference. Built with -mavx2 -mfma -mf16c and
 * called only when og_cpu_detect found those features. */
#include "quant_internal.h"

#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#define FP16(x) _cvtsh_ss(x) /* F16C: one instruction, inlined */

/* Sum of u8*s8 products of 32 pairs into 8 int32 lanes. */
static inline __m256i dot_u8s8(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
/* Same for s8*s8 (|a| <= 127): move the sign of a onto b. */
static inline __m256i dot_s8s8(__m256i a, __m256i b) {
    return dot_u8s8(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
}

/* ---- float types -------------------------------------------------------- */

static void f32_dot(int64_t n, float *s, const void *vx, const void *vy) {
    const float *x = vx, *y = vy;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 16), _mm256_loadu_ps(y + i + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 24), _mm256_loadu_ps(y + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
    float sum = og_hsum256(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++) sum += x[i] * y[i];
    *s = sum;
}

static void f16_dot(int64_t n, float *s, const void *vx, const void *vy) {
    const uint16_t *x = vx, *y = vy;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))),
                             _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(y + i))), a0);
        a1 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i + 8))),
                             _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(y + i + 8))), a1);
    }
    float sum = og_hsum256(_mm256_add_ps(a0, a1));
    for (; i < n; i++) sum += FP16(x[i]) * FP16(y[i]);
    *s = sum;
}

/* ---- 32-element formats ----------------------------------------------------- */

/* A block's sum lanes isum, with factor a: into canonical slot j, or the fork's
 * lane fma. */
static inline __attribute__((always_inline)) void block_done(bool canon, og_canon8 *g, int j, __m256 *acc, __m256i isum,
                                                              float a) {
    if (canon) og_canon_put(g, j, isum, a);
    else *acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(a), *acc);
}

/* Kernels written as one body for NY activation rows (NY = 1: vec_dot; NY = 4:
 * vec_dot4, one pass over the weights for four rows): every float operation of
 * row i is the same in both, so vec_dot4 gives vec_dot's bits for each row.
 * Weights are prefetched OG_PREFETCH_DIST bytes ahead. */
#define NYMAX 4

/* canon: the canonical order (og_canon8 groups) instead of the fork's lane sums;
 * the integer work is the same. */
static inline __attribute__((always_inline)) void q8_0_dot_n(bool canon, int ny, int64_t n, float *s, const void *vx,
                                                              const void *const *vy) {
    const og_block_q8_0 *x = vx;
    const int64_t nb = n / 32;
    __m256 acc[NYMAX], cacc[NYMAX][4];
    og_canon8 g[NYMAX];
    for (int i = 0; i < ny; i++) acc[i] = cacc[i][0] = cacc[i][1] = cacc[i][2] = cacc[i][3] = _mm256_setzero_ps();
    for (int64_t b0 = 0; b0 < nb; b0 += OG_CANON_GROUP) {
        for (int slot = 0; slot < OG_CANON_GROUP && b0 + slot < nb; slot++) {
            const int64_t b = b0 + slot;
            og_prefetch_span(x + b, OG_PREFETCH_DIST, sizeof *x);
            const __m256i xq = _mm256_loadu_si256((const __m256i *)x[b].qs);
            const __m256i ax = _mm256_sign_epi8(xq, xq); /* |x|; the sign moves onto y */
            const float dx = FP16(x[b].d);
    #pragma GCC unroll 4
            for (int i = 0; i < ny; i++) {
                const og_block_q8_0 *y = vy[i];
                __m256i p = dot_u8s8(ax, _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)y[b].qs), xq));
                block_done(canon, &g[i], slot, &acc[i], p, dx * FP16(y[b].d));
            }
        }
        if (canon)
            for (int i = 0; i < ny; i++) og_canon_flush(&g[i], cacc[i], b0, nb, false);
    }
    for (int i = 0; i < ny; i++) s[i] = canon ? og_canon_finish(cacc[i]) : og_hsum256(acc[i]);
}

/* 16 packed bytes -> 32 nibbles: low nibbles first (elements 0-15), then high. */
static inline __m256i unpack_nibbles16(const uint8_t *q) {
    __m128i v = _mm_loadu_si128((const __m128i *)q);
    __m256i w = _mm256_set_m128i(_mm_srli_epi16(v, 4), v);
    return _mm256_and_si256(w, _mm256_set1_epi8(0x0F));
}

static void q4_0_dot(int64_t n, float *s, const void *vx, const void *vy) {
    const og_block_q4_0 *x = vx;
    const og_block_q8_0 *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / 32; b++) {
        __m256i q = _mm256_sub_epi8(unpack_nibbles16(x[b].qs), _mm256_set1_epi8(8));
        __m256i p = dot_s8s8(q, _mm256_loadu_si256((const __m256i *)y[b].qs));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(FP16(x[b].d) * FP16(y[b].d)), acc);
    }
    *s = og_hsum256(acc);
}

/* ---- k-quants ------------------------------------------------------------------ */


/* int32 lanes j = m[j] * (bsums[2j] + bsums[2j+1]): their sum is the block's S */
static inline __m256i k4_mins_lanes(const uint8_t m[8], const int16_t *bsums) {
    __m128i mm = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)m));
    __m256i md = _mm256_cvtepu16_epi32(mm);                         /* 8 x i32 */
    __m256i bs = _mm256_loadu_si256((const __m256i *)bsums);         /* 16 x i16 */
    __m256i pair = _mm256_madd_epi16(bs, _mm256_set1_epi16(1));     /* 8 x i32 sums of pairs */
    return _mm256_mullo_epi32(pair, md);
}

/* The I lanes of the Q4_K / Q5_K block at x (sc: its eight scales) against block b of
 * each of ny activation rows y[i]: eight int32 lanes whose sum is I_b, isum[i]. */
static inline __attribute__((always_inline)) void k45_isums(bool five, const uint8_t *x, const uint8_t sc[8], int ny,
                                                             const og_block_q8_K *const *y, int64_t b, __m256i *isum) {
    const size_t qs_off = five ? offsetof(og_block_q5_K, qs) : offsetof(og_block_q4_K, qs);
    for (int i = 0; i < ny; i++) isum[i] = _mm256_setzero_si256();
    const __m256i qh = five ? _mm256_loadu_si256((const __m256i *)(x + offsetof(og_block_q5_K, qh))) : _mm256_setzero_si256();
    const uint8_t *q = x + qs_off;
    #pragma GCC unroll 4
    for (int c = 0; c < 4; c++, q += 32) {
        __m256i v = _mm256_loadu_si256((const __m256i *)q);
        __m256i lo = _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0F));
        if (five) { /* 5th bit of element 64c+l is bit 2c of qh[l], of 64c+32+l bit 2c+1 */
            __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), _mm256_set1_epi8(1));
            __m256i h1 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), _mm256_set1_epi8(1));
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(h0, 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(h1, 4));
        }
        const __m256i s0 = _mm256_set1_epi16(sc[2 * c]), s1 = _mm256_set1_epi16(sc[2 * c + 1]);
    #pragma GCC unroll 4
        for (int i = 0; i < ny; i++) {
            __m256i p0 = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(y[i][b].qs + 64 * c)));
            __m256i p1 = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(y[i][b].qs + 64 * c + 32)));
            isum[i] = _mm256_add_epi32(isum[i], _mm256_madd_epi16(p0, s0));
            isum[i] = _mm256_add_epi32(isum[i], _mm256_madd_epi16(p1, s1));
        }
    }
}

/* Q4_K and Q5_K (five: Q5_K's fifth bit from qh) against ny Q8_K rows: d * sum_j
 * sc_j (q . y)_j - dmin * sum_j m_j bsums_j per block. The fields sit at the
 * same places in both blocks but for Q5_K's qh before qs. */
static inline __attribute__((always_inline)) void k45_dot_n(bool five, bool canon, int ny, int64_t n, float *s,
                                                             const void *vx, const void *const *vy) {
    const size_t size = five ? sizeof(og_block_q5_K) : sizeof(og_block_q4_K);
    const og_block_q8_K *const *y = (const og_block_q8_K *const *)vy;
    const int64_t nb = n / OG_QK_K;
    __m256 acc[NYMAX], cacc[NYMAX][4];
    og_canon8 g[NYMAX];
    float mins[NYMAX];
    for (int i = 0; i < ny; i++) acc[i] = cacc[i][0] = cacc[i][1] = cacc[i][2] = cacc[i][3] = _mm256_setzero_ps(), mins[i] = 0;
    for (int64_t b0 = 0; b0 < nb; b0 += OG_CANON_GROUP) {
        for (int slot = 0; slot < OG_CANON_GROUP && b0 + slot < nb; slot++) {
            const int64_t b = b0 + slot;
            const uint8_t *x = (const uint8_t *)vx + (size_t)b * size; /* d, dmin, scales[12], [qh[32]], qs[128] */
            og_prefetch_span(x, OG_PREFETCH_DIST, size);
            uint8_t sc[8], m[8];
            k4_unpack(x + offsetof(og_block_q4_K, scales), sc, m);
            const float d = og_h16(x), dmin = og_h16(x + 2);
            for (int i = 0; i < ny; i++) {
                if (canon) {
                    g[i].s[slot] = k4_mins_lanes(m, y[i][b].bsums);
                    g[i].c[slot] = dmin * y[i][b].d;
                } else {
                    mins[i] += dmin * y[i][b].d * (float)og_hsum_epi32(k4_mins_lanes(m, y[i][b].bsums));
                }
            }
            __m256i isum[NYMAX];
            k45_isums(five, x, sc, ny, y, b, isum);
            for (int i = 0; i < ny; i++) {
                block_done(canon, &g[i], slot, &acc[i], isum[i], d * y[i][b].d);
            }
        }
        if (canon)
            for (int i = 0; i < ny; i++) og_canon_flush(&g[i], cacc[i], b0, nb, true);
    }
    for (int i = 0; i < ny; i++) s[i] = canon ? og_canon_finish(cacc[i]) : og_hsum256(acc[i]) - mins[i];
}

/* The int16 scales of sub-blocks 2j (lanes 0-7) and 2j + 1 (lanes 8-15), j < 8, from
 * sixteen int16 scales s16: one vpshufb of the 128-bit half that holds them. */
static inline __m256i pair_scales(__m256i s16, int j) {
    const __m256i half = j < 4 ? _mm256_permute2x128_si256(s16, s16, 0x00) : _mm256_permute2x128_si256(s16, s16, 0x11);
    const int lo = 2 * (2 * j % 8), hi = lo + 2; /* byte offsets of int16 2j, 2j + 1 in their half */
    const __m256i ctl = _mm256_setr_epi8((char)lo, (char)(lo + 1), (char)lo, (char)(lo + 1), (char)lo, (char)(lo + 1), (char)lo,
                                         (char)(lo + 1), (char)lo, (char)(lo + 1), (char)lo, (char)(lo + 1), (char)lo, (char)(lo + 1),
                                         (char)lo, (char)(lo + 1), (char)hi, (char)(hi + 1), (char)hi, (char)(hi + 1), (char)hi,
                                         (char)(hi + 1), (char)hi, (char)(hi + 1), (char)hi, (char)(hi + 1), (char)hi, (char)(hi + 1),
                                         (char)hi, (char)(hi + 1), (char)hi, (char)(hi + 1));
    return _mm256_shuffle_epi8(half, ctl);
}

/* Q2_K against ny Q8_K rows: element 128h + 32k + l is (qs[32h + l] >> 2k) & 3, in
 * sub-blocks 8h + 2k (l < 16) and 8h + 2k + 1 */
static inline __attribute__((always_inline)) void q2_K_dot_n(bool canon, int ny, int64_t n, float *s, const void *vx,
                                                              const void *const *vy) {
    const og_block_q2_K *x = vx;
    const og_block_q8_K *const *y = (const og_block_q8_K *const *)vy;
    const int64_t nb = n / OG_QK_K;
    __m256 acc[NYMAX], cacc[NYMAX][4];
    og_canon8 g[NYMAX];
    float mins[NYMAX];
    for (int i = 0; i < ny; i++) acc[i] = cacc[i][0] = cacc[i][1] = cacc[i][2] = cacc[i][3] = _mm256_setzero_ps(), mins[i] = 0;
    for (int64_t b0 = 0; b0 < nb; b0 += OG_CANON_GROUP) {
        for (int slot = 0; slot < OG_CANON_GROUP && b0 + slot < nb; slot++) {
            const int64_t b = b0 + slot;
            og_prefetch_span(x + b, OG_PREFETCH_DIST, sizeof *x);
            const __m128i sc = _mm_loadu_si128((const __m128i *)x[b].scales);
            /* mins: sum over 16 sub-blocks of (sc >> 4) * bsums; scales: the low nibbles */
            const __m256i m16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc, 4), _mm_set1_epi8(0x0F)));
            const __m256i s16 = _mm256_cvtepu8_epi16(_mm_and_si128(sc, _mm_set1_epi8(0x0F)));
            const float d = FP16(x[b].d), dmin = FP16(x[b].dmin);
            __m256i isum[NYMAX];
            for (int i = 0; i < ny; i++) {
                const __m256i ml = _mm256_madd_epi16(m16, _mm256_loadu_si256((const __m256i *)y[i][b].bsums));
                if (canon) {
                    g[i].s[slot] = ml;
                    g[i].c[slot] = dmin * y[i][b].d;
                } else {
                    mins[i] += dmin * y[i][b].d * (float)og_hsum_epi32(ml);
                }
                isum[i] = _mm256_setzero_si256();
            }
    #pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(x[b].qs + 32 * h));
    #pragma GCC unroll 4
                for (int k = 0; k < 4; k++) { /* elements 128h + 32k .. +31 */
                    const __m256i q = _mm256_and_si256(_mm256_srli_epi16(v, 2 * k), _mm256_set1_epi8(3));
                    const __m256i sp = pair_scales(s16, 4 * h + k);
    #pragma GCC unroll 4
                    for (int i = 0; i < ny; i++) {
                        __m256i p = _mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i *)(y[i][b].qs + 128 * h + 32 * k)));
                        isum[i] = _mm256_add_epi32(isum[i], _mm256_madd_epi16(p, sp));
                    }
                }
            }
            for (int i = 0; i < ny; i++) {
                block_done(canon, &g[i], slot, &acc[i], isum[i], d * y[i][b].d);
            }
        }
        if (canon)
            for (int i = 0; i < ny; i++) og_canon_flush(&g[i], cacc[i], b0, nb, true);
    }
    for (int i = 0; i < ny; i++) s[i] = canon ? og_canon_finish(cacc[i]) : og_hsum256(acc[i]) - mins[i];
}

/* Q6_K against ny Q8_K rows: q = u - 32 with u in [0, 63], so the dot is
 * sum sc (u . y) - 32 sum sc bsums, both in int32 lanes until the block's end. */
static inline __attribute__((always_inline)) void q6_K_dot_n(bool canon, int ny, int64_t n, float *s, const void *vx,
                                                              const void *const *vy) {
    const og_block_q6_K *x = vx;
    const og_block_q8_K *const *y = (const og_block_q8_K *const *)vy;
    const int64_t nb = n / OG_QK_K;
    __m256 acc[NYMAX], cacc[NYMAX][4];
    og_canon8 g[NYMAX];
    for (int i = 0; i < ny; i++) acc[i] = cacc[i][0] = cacc[i][1] = cacc[i][2] = cacc[i][3] = _mm256_setzero_ps();
    for (int64_t b0 = 0; b0 < nb; b0 += OG_CANON_GROUP) {
        for (int slot = 0; slot < OG_CANON_GROUP && b0 + slot < nb; slot++) {
            const int64_t b = b0 + slot;
            og_prefetch_span(x + b, OG_PREFETCH_DIST, sizeof *x);
            const __m256i s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[b].scales));
            __m256i isum[NYMAX];
            for (int i = 0; i < ny; i++) /* - 32 sum sc bsums, per pair of sub-blocks */
                isum[i] = _mm256_sub_epi32(_mm256_setzero_si256(),
                                           _mm256_slli_epi32(_mm256_madd_epi16(s16, _mm256_loadu_si256((const __m256i *)y[i][b].bsums)), 5));
    #pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                const __m256i l0 = _mm256_loadu_si256((const __m256i *)(x[b].ql + 64 * h));
                const __m256i l1 = _mm256_loadu_si256((const __m256i *)(x[b].ql + 64 * h + 32));
                const __m256i qh = _mm256_loadu_si256((const __m256i *)(x[b].qh + 32 * h));
    #pragma GCC unroll 4
                for (int k = 0; k < 4; k++) { /* elements 128h + 32k .. +31 */
                    __m256i lo = (k & 1) ? l1 : l0;
                    lo = _mm256_and_si256(k >> 1 ? _mm256_srli_epi16(lo, 4) : lo, _mm256_set1_epi8(0x0F));
                    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), _mm256_set1_epi8(3));
                    const __m256i u = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
                    const __m256i sp = pair_scales(s16, 4 * h + k);
    #pragma GCC unroll 4
                    for (int i = 0; i < ny; i++) {
                        __m256i p = _mm256_maddubs_epi16(u, _mm256_loadu_si256((const __m256i *)(y[i][b].qs + 128 * h + 32 * k)));
                        isum[i] = _mm256_add_epi32(isum[i], _mm256_madd_epi16(p, sp));
                    }
                }
            }
            const float d = FP16(x[b].d);
            for (int i = 0; i < ny; i++) {
                block_done(canon, &g[i], slot, &acc[i], isum[i], d * y[i][b].d);
            }
        }
        if (canon)
            for (int i = 0; i < ny; i++) og_canon_flush(&g[i], cacc[i], b0, nb, false);
    }
    for (int i = 0; i < ny; i++) s[i] = canon ? og_canon_finish(cacc[i]) : og_hsum256(acc[i]);
}

/* vec_dot (one activation row) and vec_dot4 (four) of each NY kernel, in the
 * fork's order and (name_canon) the canonical one */
#define K4(canon, ny, n, s, x, y) k45_dot_n(false, canon, ny, n, s, x, y)
#define K5(canon, ny, n, s, x, y) k45_dot_n(true, canon, ny, n, s, x, y)
OG_FORK_CANON_KERNELS(q8_0, q8_0_dot_n)
OG_FORK_CANON_KERNELS(q2_K, q2_K_dot_n)
OG_FORK_CANON_KERNELS(q4_K, K4)
OG_FORK_CANON_KERNELS(q5_K, K5)

/* og_vec_dot_r4_fn of Q4_K / Q5_K: four weight rows (stride bytes apart), one
 * activation row, the canonical order. Rows of at most three blocks (K <= 768) share
 * the work a row does alone: the sums of the eight (row, block) pairs of blocks 2t, 2t + 1 (slot 2r + (b & 1)) come
 * out of one og_sum8_epi32 tree (I and S each), their float operations of step 2 run
 * once on eight lanes, and each row's cross-block order is og_canon_finish's on lanes
 * l < 4 from +0: (L0 + L2) + (L1 + L3) with L_b = +0 + v_b (absent blocks +0), which
 * the offsets 16, 8 and 4 leave as it is: in cache 1.37x (K = 512) and 1.15-1.2x
 * (K = 768) one row at a time. Longer rows: one at a time (vec_dot_canonical's body; at
 * four blocks its half trees cost less than two full ones, 0.95x). */
static inline __attribute__((always_inline)) void k45_r4_n(bool five, int64_t n, float *s, const void *vx, size_t stride,
                                                            const void *vy) {
    const int64_t nb = n / OG_QK_K;
    if (nb > 3) {
        for (int r = 0; r < 4; r++) k45_dot_n(five, true, 1, n, s + r, (const uint8_t *)vx + (size_t)r * stride, &vy);
        return;
    }
    const size_t size = five ? sizeof(og_block_q5_K) : sizeof(og_block_q4_K);
    const og_block_q8_K *y = vy;
    const og_block_q8_K *const ys[1] = {y};
    __m256 l[2];
    for (int t = 0; 2 * t < nb; t++) {
        __m256i is[8], ss[8];
        float a[8], c[8];
        for (int j = 0; j < 8; j++) { /* slot j: row j / 2, block 2t + j % 2 */
            const int64_t b = 2 * t + j % 2;
            if (b >= nb) {
                is[j] = ss[j] = _mm256_setzero_si256();
                a[j] = c[j] = 0.0f;
                continue;
            }
            const uint8_t *x = (const uint8_t *)vx + (size_t)(j / 2) * stride + (size_t)b * size;
            og_prefetch_span(x, OG_PREFETCH_DIST, size);
            uint8_t sc[8], m[8];
            k4_unpack(x + offsetof(og_block_q4_K, scales), sc, m);
            ss[j] = k4_mins_lanes(m, y[b].bsums);
            k45_isums(five, x, sc, 1, ys, b, &is[j]);
            a[j] = og_h16(x) * y[b].d;
            c[j] = og_h16(x + 2) * y[b].d;
        }
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(a), _mm256_cvtepi32_ps(og_sum8_epi32(is)));
        /* absent blocks: a = c = 0 and zero sums, so v = +0 */
        l[t] = _mm256_add_ps(_mm256_setzero_ps(), _mm256_fnmadd_ps(_mm256_loadu_ps(c), _mm256_cvtepi32_ps(og_sum8_epi32(ss)), v));
    }
    const __m256 t2 = nb > 2 ? _mm256_add_ps(l[0], l[1]) : l[0];                     /* lanes 2r + k: L_k + L_(k + 2) */
    const __m256 u = _mm256_add_ps(t2, _mm256_permute_ps(t2, _MM_SHUFFLE(2, 3, 0, 1))); /* + the row's other pair */
    _mm_storeu_ps(s, _mm256_castps256_ps128(_mm256_permutevar8x32_ps(u, _mm256_setr_epi32(0, 2, 4, 6, 0, 0, 0, 0))));
}
static void q4_K_r4(int64_t n, float *s, const void *vx, size_t stride, const void *vy) { k45_r4_n(false, n, s, vx, stride, vy); }
static void q5_K_r4(int64_t n, float *s, const void *vx, size_t stride, const void *vy) { k45_r4_n(true, n, s, vx, stride, vy); }
OG_FORK_CANON_KERNELS(q6_K, q6_K_dot_n)
#undef K4
#undef K5

static inline __attribute__((always_inline)) void q3_K_dot_1(bool canon, int64_t n, float *s, const void *vx,
                                                              const void *vy) {
    const og_block_q3_K *x = vx;
    const og_block_q8_K *y = vy;
    const int64_t nb = n / OG_QK_K;
    __m256 acc = _mm256_setzero_ps(), cacc[4] = {acc, acc, acc, acc};
    og_canon8 g;
    const __m256i ones16 = _mm256_set1_epi16(1), m3 = _mm256_set1_epi8(3), m1 = _mm256_set1_epi8(1);
    for (int64_t b0 = 0; b0 < nb; b0 += OG_CANON_GROUP) {
        for (int slot = 0; slot < OG_CANON_GROUP && b0 + slot < nb; slot++) {
            const int64_t b = b0 + slot;
            __m128i sv = og_q3_scales(x[b].scales);
            __m256i s32[2] = {_mm256_cvtepi8_epi32(sv), _mm256_cvtepi8_epi32(_mm_srli_si128(sv, 8))};
            /* q = u - 4 with u = q2 + 4h in [0, 7]: subtract 4 * sum_s sc[s] * bsums[s] */
            __m256i corr = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sv), _mm256_loadu_si256((const __m256i *)y[b].bsums));
            __m256i isum = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(corr, 2));
            const __m256i hm = _mm256_loadu_si256((const __m256i *)x[b].hmask);
            const int8_t *q8 = y[b].qs;
    #pragma GCC unroll 8
            for (int j = 0; j < 8; j++) { /* elements 32j..32j+31: half h = j/4, plane k = j%4 */
                const int h = j / 4, k = j % 4;
                __m256i v = _mm256_loadu_si256((const __m256i *)(x[b].qs + 32 * h));
                __m256i q2 = _mm256_and_si256(_mm256_srli_epi16(v, 2 * k), m3);
                __m256i hb = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + k), m1); /* bit 4h+k of hmask[l] */
                __m256i u = _mm256_or_si256(q2, _mm256_slli_epi16(hb, 2));
                __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(u, _mm256_loadu_si256((const __m256i *)(q8 + 32 * j))), ones16);
                /* lanes 0-3: sub-block 2j, lanes 4-7: 2j+1 */
                const __m256i idx = _mm256_setr_epi32((2 * j) % 8, (2 * j) % 8, (2 * j) % 8, (2 * j) % 8, (2 * j + 1) % 8,
                                                      (2 * j + 1) % 8, (2 * j + 1) % 8, (2 * j + 1) % 8);
                isum = _mm256_add_epi32(isum, _mm256_mullo_epi32(p, _mm256_permutevar8x32_epi32(s32[j / 4], idx)));
            }
            block_done(canon, &g, slot, &acc, isum, FP16(x[b].d) * y[b].d);
        }
        if (canon) og_canon_flush(&g, cacc, b0, nb, false);
    }
    *s = canon ? og_canon_finish(cacc) : og_hsum256(acc);
}
static void q3_K_dot(int64_t n, float *s, const void *vx, const void *vy) { q3_K_dot_1(false, n, s, vx, vy); }
static void q3_K_canon_dot(int64_t n, float *s, const void *vx, const void *vy) { q3_K_dot_1(true, n, s, vx, vy); }

/* ---- more 32-element formats ---------------------------------------------- */

/* 32 bits of qh -> 32 bytes, byte j = 0x10 if bit j is set (the 5th quant bit). */
static inline __m256i qh_bits_to_0x10(const uint8_t *qh) {
    uint32_t h;
    memcpy(&h, qh, 4);
    /* byte j of the result takes byte j/8 of h, then tests bit j%8 */
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                            2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h), spread);
    v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

static void q4_1_dot(int64_t n, float *s, const void *vx, const void *vy) {
    const og_block_q4_1 *x = vx;
    const og_block_q8_1 *y = vy;
    __m256 acc = _mm256_setzero_ps();
    float mins = 0;
    for (int64_t b = 0; b < n / 32; b++) {
        __m256i p = dot_u8s8(unpack_nibbles16(x[b].qs), _mm256_loadu_si256((const __m256i *)y[b].qs));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(FP16(x[b].d) * FP16(y[b].d)), acc);
        mins += FP16(x[b].m) * FP16(y[b].s);
    }
    *s = og_hsum256(acc) + mins;
}

static void q5_0_dot(int64_t n, float *s, const void *vx, const void *vy) {
    const og_block_q5_0 *x = vx;
    const og_block_q8_0 *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / 32; b++) {
        __m256i q = _mm256_or_si256(unpack_nibbles16(x[b].qs), qh_bits_to_0x10(x[b].qh));
        q = _mm256_sub_epi8(q, _mm256_set1_epi8(16));
        __m256i p = dot_s8s8(q, _mm256_loadu_si256((const __m256i *)y[b].qs));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(FP16(x[b].d) * FP16(y[b].d)), acc);
    }
    *s = og_hsum256(acc);
}

static void q5_1_dot(int64_t n, float *s, const void *vx, const void *vy) {
    const og_block_q5_1 *x = vx;
    const og_block_q8_1 *y = vy;
    __m256 acc = _mm256_setzero_ps();
    float mins = 0;
    for (int64_t b = 0; b < n / 32; b++) {
        __m256i q = _mm256_or_si256(unpack_nibbles16(x[b].qs), qh_bits_to_0x10(x[b].qh));
        __m256i p = dot_u8s8(q, _mm256_loadu_si256((const __m256i *)y[b].qs));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(FP16(x[b].d) * FP16(y[b].d)), acc);
        mins += FP16(x[b].m) * FP16(y[b].s);
    }
    *s = og_hsum256(acc) + mins;
}

static void iq4_nl_dot(int64_t n, float *s, const void *vx, const void *vy) {
    const og_block_iq4_nl *x = vx;
    const og_block_q8_0 *y = vy;
    const __m128i t = _mm_loadu_si128((const __m128i *)og_iq4nl_values);
    const __m256i table = _mm256_set_m128i(t, t);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / 32; b++) {
        __m256i q = _mm256_shuffle_epi8(table, unpack_nibbles16(x[b].qs)); /* table value per nibble */
        __m256i p = dot_s8s8(q, _mm256_loadu_si256((const __m256i *)y[b].qs));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(FP16(x[b].d) * FP16(y[b].d)), acc);
    }
    *s = og_hsum256(acc);
}

static void bf16_dot(int64_t n, float *s, const void *vx, const void *vy) {
    const uint16_t *x = vx, *y = vy;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) { /* bf16 -> f32 is a 16-bit shift */
        __m256i x0 = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(x + i))), 16);
        __m256i y0 = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(y + i))), 16);
        __m256i x1 = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(x + i + 8))), 16);
        __m256i y1 = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(y + i + 8))), 16);
        a0 = _mm256_fmadd_ps(_mm256_castsi256_ps(x0), _mm256_castsi256_ps(y0), a0);
        a1 = _mm256_fmadd_ps(_mm256_castsi256_ps(x1), _mm256_castsi256_ps(y1), a1);
    }
    float sum = og_hsum256(_mm256_add_ps(a0, a1));
    for (; i < n; i++) sum += og_bf16_to_fp32(x[i]) * og_bf16_to_fp32(y[i]);
    *s = sum;
}

/* og_dot_f32_device: lanes 0-31 in four 8-wide registers; the zero padding
 * is an fma(0, 0, acc) exactly as the reference does. */
static float dot_f32_device(const float *w, const float *x, int64_t n) {
    __m256 a[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int r = 0; r < 4; r++)
            a[r] = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8 * r), _mm256_loadu_ps(x + i + 8 * r), a[r]);
    if (i < n) {
        float tw[32] = {0}, tx[32] = {0};
        memcpy(tw, w + i, (size_t)(n - i) * sizeof *tw);
        memcpy(tx, x + i, (size_t)(n - i) * sizeof *tx);
        for (int r = 0; r < 4; r++) a[r] = _mm256_fmadd_ps(_mm256_loadu_ps(tw + 8 * r), _mm256_loadu_ps(tx + 8 * r), a[r]);
    }
    float acc[32];
    for (int r = 0; r < 4; r++) _mm256_storeu_ps(acc + 8 * r, a[r]);
    return og_warp_reduce32(acc);
}

static void axpy_f32(int64_t n, float a, const float *x, float *y) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_mul_ps(va, _mm256_loadu_ps(x + i))));
    og_axpy_f32_ref(n - i, a, x + i, y + i); /* the tail */
}

static void f16_to_f32(const uint16_t *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
    og_f16_to_f32_ref(x + i, y + i, n - i); /* the tail */
}

/* ---- activation quantizers (og_kernels.quantize_act): the scalar ones' bytes ----
 * quant_ref.c's q8_K_from_float, q8_0_act and q8_1_act, eight floats at a time,
 * every step the same float operation, so the same bytes for any input (NaN and
 * infinities included; test_quantize_act). */

/* The largest |x[j]|, j < n (n a multiple of 8): max_ps returns its second operand
 * when the first is NaN, so a NaN is skipped as the scalar `if (a > amax)` skips
 * it; -0 and +0 both leave amax +0. */
static inline float act_amax(const float *x, int n) {
    const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 m = _mm256_setzero_ps();
    for (int j = 0; j < n; j += 8) m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + j), abs), m);
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* The low bytes of the int32 lanes of a (0-7) and b (8-15), in order: the C
 * conversion of each to int8 (modulo 256, as gcc and clang define it). */
static inline __m128i low_bytes16(__m256i a, __m256i b) {
    const __m256i pa = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                        0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m256i pb = _mm256_setr_epi8(-1, -1, -1, -1, 0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1,
                                        -1, -1, -1, -1, 0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1);
    /* dwords a0-3, b0-3, -, - | a4-7, b4-7, -, - */
    const __m256i ab = _mm256_or_si256(_mm256_shuffle_epi8(a, pa), _mm256_shuffle_epi8(b, pb));
    return _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(ab, _mm256_setr_epi32(0, 4, 1, 5, 0, 0, 0, 0)));
}

/* Q8_K (kquants.md §5; q8_K_from_float): max = the first x[j] of the largest |x|,
 * iscale = -127 / max, q = min(127, nearest_int(iscale x)) (the 1.5 * 2^23 trick,
 * bits included), bsums of 16, d = 1 / iscale. */
static void q8_K_act(const float *x, void *vy, int64_t n) {
    og_block_q8_K *y = vy;
    const __m256i mant = _mm256_set1_epi32(0x007fffff), half = _mm256_set1_epi32(0x00400000), top = _mm256_set1_epi32(127);
    const __m256 magic = _mm256_set1_ps(12582912.0f), abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int64_t b = 0; b < n / OG_QK_K; b++, x += OG_QK_K) {
        const float amax = act_amax(x, OG_QK_K);
        if (amax == 0) {
            memset(&y[b], 0, sizeof y[b]);
            continue;
        }
        const __m256 am = _mm256_set1_ps(amax);
        int j = 0;
        for (;; j += 8) { /* the first j with |x[j]| == amax: where the scalar loop took it */
            const int eq = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(_mm256_loadu_ps(x + j), abs), am, _CMP_EQ_OQ));
            if (eq) {
                j += __builtin_ctz((unsigned)eq);
                break;
            }
        }
        const float iscale = -127.0f / x[j];
        const __m256 is = _mm256_set1_ps(iscale);
        for (int c = 0; c < OG_QK_K / 16; c++) {
            __m256i q[2];
            for (int h = 0; h < 2; h++) {
                const __m256 t = _mm256_add_ps(_mm256_mul_ps(is, _mm256_loadu_ps(x + 16 * c + 8 * h)), magic);
                q[h] = _mm256_min_epi32(_mm256_sub_epi32(_mm256_and_si256(_mm256_castps_si256(t), mant), half), top);
            }
            const __m128i bytes = low_bytes16(q[0], q[1]);
            _mm_storeu_si128((__m128i *)(y[b].qs + 16 * c), bytes);
            /* the sum of the 16 stored int8 */
            const __m256i w = _mm256_cvtepi8_epi16(bytes);
            __m128i s = _mm_madd_epi16(_mm_add_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1)), _mm_set1_epi16(1));
            s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
            s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
            y[b].bsums[c] = (int16_t)_mm_cvtsi128_si32(s);
        }
        y[b].d = 1 / iscale;
    }
}

/* act_round(x id) of quant_ref.c for 16 floats: nearbyintf (round half even in
 * the default mode), clamped to [-127, 127], NaN 0; as int8 bytes. */
static inline __m128i act_round16(const float *x, __m256 id) {
    const __m256 hi = _mm256_set1_ps(127.0f), lo = _mm256_set1_ps(-127.0f);
    __m256i q[2];
    for (int h = 0; h < 2; h++) {
        const __m256 v = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * h), id), _MM_FROUND_CUR_DIRECTION);
        const __m256 c = _mm256_max_ps(_mm256_min_ps(v, hi), lo); /* NaN: 127 here, then masked to 0 */
        q[h] = _mm256_cvtps_epi32(_mm256_and_ps(c, _mm256_cmp_ps(v, v, _CMP_ORD_Q)));
    }
    return low_bytes16(q[0], q[1]);
}

/* Q8_0 and Q8_1 (q8_0_act, q8_1_act): id = 127 / amax (0 for a zero block),
 * d = fp16(amax / 127), q = act_round(x id); Q8_1 also s = fp16(d sum q). */
static inline void q8_01_act(const float *x, void *vy, int64_t n, bool q81) {
    for (int64_t b = 0; b < n / 32; b++, x += 32) {
        const float amax = act_amax(x, 32);
        const float id = amax != 0.0f ? 127.f / amax : 0.0f, d = amax / 127.f;
        const __m256 iv = _mm256_set1_ps(id);
        const __m128i q0 = act_round16(x, iv), q1 = act_round16(x + 16, iv);
        if (!q81) {
            og_block_q8_0 *y = (og_block_q8_0 *)vy + b;
            y->d = og_fp32_to_fp16(d);
            _mm_storeu_si128((__m128i *)y->qs, q0);
            _mm_storeu_si128((__m128i *)(y->qs + 16), q1);
            continue;
        }
        og_block_q8_1 *y = (og_block_q8_1 *)vy + b;
        y->d = og_fp32_to_fp16(d);
        _mm_storeu_si128((__m128i *)y->qs, q0);
        _mm_storeu_si128((__m128i *)(y->qs + 16), q1);
        const __m256i w = _mm256_add_epi16(_mm256_cvtepi8_epi16(q0), _mm256_cvtepi8_epi16(q1));
        const __m256i s8 = _mm256_madd_epi16(w, _mm256_set1_epi16(1));
        y->s = og_fp32_to_fp16(d * (float)og_hsum_epi32(s8));
    }
}
static void q8_0_act(const float *x, void *vy, int64_t n) { q8_01_act(x, vy, n, false); }
static void q8_1_act(const float *x, void *vy, int64_t n) { q8_01_act(x, vy, n, true); }

void og_kernels_fill_avx2(og_kernels *k) {
    k->quantize_act[OG_TYPE_Q8_K] = q8_K_act;
    k->quantize_act[OG_TYPE_Q8_0] = q8_0_act;
    k->quantize_act[OG_TYPE_Q8_1] = q8_1_act;
    k->axpy_f32 = axpy_f32;
    k->f16_to_f32 = f16_to_f32;
    k->dot_f32_device = dot_f32_device;
    k->vec_dot[OG_TYPE_F32] = f32_dot;
    k->vec_dot[OG_TYPE_F16] = f16_dot;
    k->vec_dot[OG_TYPE_Q8_0] = q8_0_dot;
    k->vec_dot4[OG_TYPE_Q8_0] = q8_0_dot4;
    k->vec_dot4[OG_TYPE_Q2_K] = q2_K_dot4;
    k->vec_dot4[OG_TYPE_Q4_K] = q4_K_dot4;
    k->vec_dot4[OG_TYPE_Q5_K] = q5_K_dot4;
    k->vec_dot4[OG_TYPE_Q6_K] = q6_K_dot4;
    k->vec_dot[OG_TYPE_Q4_0] = q4_0_dot;
    k->vec_dot[OG_TYPE_Q2_K] = q2_K_dot;
    k->vec_dot[OG_TYPE_Q3_K] = q3_K_dot;
    k->vec_dot[OG_TYPE_Q4_K] = q4_K_dot;
    k->vec_dot[OG_TYPE_Q5_K] = q5_K_dot;
    k->vec_dot[OG_TYPE_Q6_K] = q6_K_dot;
    k->vec_dot[OG_TYPE_Q4_1] = q4_1_dot;
    k->vec_dot[OG_TYPE_Q5_0] = q5_0_dot;
    k->vec_dot[OG_TYPE_Q5_1] = q5_1_dot;
    k->vec_dot[OG_TYPE_IQ4_NL] = iq4_nl_dot;
    k->vec_dot[OG_TYPE_BF16] = bf16_dot;
    /* the canonical order: one and four activation rows */
#define CANON(T, name) k->vec_dot_canonical[T] = name##_canon_dot, k->vec_dot4_canonical[T] = name##_canon_dot4
    CANON(OG_TYPE_Q8_0, q8_0);
    CANON(OG_TYPE_Q2_K, q2_K);
    CANON(OG_TYPE_Q4_K, q4_K);
    CANON(OG_TYPE_Q5_K, q5_K);
    CANON(OG_TYPE_Q6_K, q6_K);
#undef CANON
    k->vec_dot_canonical[OG_TYPE_Q3_K] = q3_K_canon_dot;
    /* four weight rows against one activation row (matrix x vector) */
    k->vec_dot_r4_canonical[OG_TYPE_Q4_K] = q4_K_r4;
    k->vec_dot_r4_canonical[OG_TYPE_Q5_K] = q5_K_r4;
}
