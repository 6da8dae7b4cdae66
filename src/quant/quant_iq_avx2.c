/* AVX2 + FMA + F16C kernels of IQ2_XXS and MXFP4, the fork's order and the canonical
 * one (og_quant.h), one and four activation rows. Integer sums are exact: maddubs
 * pairs of grid values <= 43 by |y| <= 128 reach 11008, E2M1 values <= 12 by 127
 * reach 3048, both far inside int16. Built with -mavx2 -mfma -mf16c. */
#include "quant_internal.h"

#include <immintrin.h>
#include <string.h>

#define NYMAX 4
#define PF_DIST OG_PREFETCH_DIST

/* ---- IQ2_XXS ------------------------------------------------------------------
 * Sub-block s (32 weights, one register): the four grid points as bytes g (u8),
 * the negative ones' bytes as n = g & mask; g . y - 2 (n . y) is the signed sum,
 * so y may be -128 (a Q8_K quant), which vpsignb could not negate. Its int16 pair
 * sums times 2 ls + 1 (vpmaddwd) join the block's int32 lanes. */

/* 0xFF in each byte of sub-block (a0, a1) whose weight is negative. */
static inline __m256i iq2_neg_bytes(uint32_t a1) {
    const uint32_t m = (uint32_t)og_iq2xxs_signs[a1 & 127] | (uint32_t)og_iq2xxs_signs[(a1 >> 7) & 127] << 8 |
                       (uint32_t)og_iq2xxs_signs[(a1 >> 14) & 127] << 16 | (uint32_t)og_iq2xxs_signs[(a1 >> 21) & 127] << 24;
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3,
                                            3, 3, 3, 3, 3, 3, 3);
    const __m256i bits = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)m), spread), bits);
    return _mm256_cmpeq_epi8(v, bits);
}
/* The block loop both types share, in either order: block(b, ny, x, y, isum, a)
 * leaves block b's int32 lanes against each row (summing to I_b) and its factor
 * a_b; the fork scales the row's sum by `post` (IQ2_XXS's 1/8, folded into a_b in
 * the canonical order). Inlined with each block function. */
typedef void (*iq_block_fn)(int64_t b, int ny, const void *x, const void *const *y, __m256i *isum, float *a);
static inline __attribute__((always_inline)) void iq_rows(bool canon, int ny, int64_t nb, float *s, const void *x,
                                                           const void *const *y, iq_block_fn block, float post) {
    __m256 acc[NYMAX], cacc[NYMAX][4];
    og_canon8 g[NYMAX];
    for (int i = 0; i < ny; i++) acc[i] = cacc[i][0] = cacc[i][1] = cacc[i][2] = cacc[i][3] = _mm256_setzero_ps();
    for (int64_t b0 = 0; b0 < nb; b0 += OG_CANON_GROUP) {
        for (int j = 0; j < OG_CANON_GROUP && b0 + j < nb; j++) {
            __m256i isum[NYMAX];
            float a[NYMAX];
            block(b0 + j, ny, x, y, isum, a);
            for (int i = 0; i < ny; i++) {
                if (canon) og_canon_put(&g[i], j, isum[i], a[i] * post); /* exact for post 1 */
                else acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[i]), _mm256_set1_ps(a[i]), acc[i]);
            }
        }
        if (canon)
            for (int i = 0; i < ny; i++) og_canon_flush(&g[i], cacc[i], b0, nb, false);
    }
    for (int i = 0; i < ny; i++) s[i] = canon ? og_canon_finish(cacc[i]) : post * og_hsum256(acc[i]);
}

/* IQ2_XXS block b: a = dx dy (the fork's factor; the canonical one is a / 8). */
static inline __attribute__((always_inline)) void iq2_xxs_block(int64_t b, int ny, const void *vx, const void *const *vy,
                                                                 __m256i *isum, float *a) {
    const og_block_iq2_xxs *x = (const og_block_iq2_xxs *)vx + b;
    og_prefetch_span(x, PF_DIST, sizeof *x);
    for (int i = 0; i < ny; i++) isum[i] = _mm256_setzero_si256();
    for (int sb = 0; sb < 8; sb++) {
        uint32_t w[2];
        memcpy(w, (const uint8_t *)x->qs + 8 * sb, 8);
        const __m256i gb = og_iq2_grid_bytes(w[0]), nb8 = _mm256_and_si256(gb, iq2_neg_bytes(w[1]));
        const __m256i ls = _mm256_set1_epi16((short)(2 * (w[1] >> 28) + 1));
#pragma GCC unroll 4
        for (int i = 0; i < ny; i++) {
            const __m256i yy = _mm256_loadu_si256((const __m256i *)(((const og_block_q8_K *)vy[i])[b].qs + 32 * sb));
            const __m256i pn = _mm256_maddubs_epi16(nb8, yy);
            const __m256i t = _mm256_sub_epi16(_mm256_maddubs_epi16(gb, yy), _mm256_add_epi16(pn, pn));
            isum[i] = _mm256_add_epi32(isum[i], _mm256_madd_epi16(t, ls));
        }
    }
    const float dx = og_h16((const uint8_t *)&x->d);
    for (int i = 0; i < ny; i++) a[i] = dx * ((const og_block_q8_K *)vy[i])[b].d;
}
static inline __attribute__((always_inline)) void iq2_xxs_n(bool canon, int ny, int64_t n, float *s, const void *vx,
                                                             const void *const *vy) {
    iq_rows(canon, ny, n / OG_QK_K, s, vx, vy, iq2_xxs_block, 0.125f);
}

/* ---- MXFP4 -----------------------------------------------------------------------
 * One block per register: nibbles to E2M1 values by vpshufb, s8 x s8 through vpsignb
 * (Q8_0 quants lie in [-127, 127]). */
static inline __m256i mxfp4_isum(const og_block_mxfp4 *x, const og_block_q8_0 *y, __m256i table) {
    const __m128i q = _mm_loadu_si128((const __m128i *)x->qs);
    const __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0F));
    const __m256i w = _mm256_shuffle_epi8(table, nib), yy = _mm256_loadu_si256((const __m256i *)y->qs);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(yy, w)), _mm256_set1_epi16(1));
}

/* MXFP4 block b: a = 2^(e - 128) dy. */
static inline __attribute__((always_inline)) void mxfp4_block(int64_t b, int ny, const void *vx, const void *const *vy,
                                                               __m256i *isum, float *a) {
    const og_block_mxfp4 *x = (const og_block_mxfp4 *)vx + b;
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)og_mxfp4_values));
    if (!(b & 3)) og_prefetch_span(x, PF_DIST, 64);
    const float dx = og_e8m0_half(x->e);
#pragma GCC unroll 4
    for (int i = 0; i < ny; i++) {
        const og_block_q8_0 *y = (const og_block_q8_0 *)vy[i] + b;
        isum[i] = mxfp4_isum(x, y, table);
        a[i] = dx * og_h16((const uint8_t *)&y->d);
    }
}
static inline __attribute__((always_inline)) void mxfp4_n(bool canon, int ny, int64_t n, float *s, const void *vx,
                                                           const void *const *vy) {
    iq_rows(canon, ny, n / OG_QK_MXFP4, s, vx, vy, mxfp4_block, 1.0f);
}

OG_FORK_CANON_KERNELS(iq2_xxs, iq2_xxs_n)
OG_FORK_CANON_KERNELS(mxfp4, mxfp4_n)

void og_kernels_fill_iq_avx2(og_kernels *k) {
    OG_SET_FORK_CANON(k, OG_TYPE_IQ2_XXS, iq2_xxs);
    OG_SET_FORK_CANON(k, OG_TYPE_MXFP4, mxfp4);
}
