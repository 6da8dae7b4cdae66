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
static inline __m256i iq2_grid_bytes(uint32_t a0) {
    return _mm256_setr_epi64x((long long)og_iq2xxs_grid[a0 & 255], (long long)og_iq2xxs_grid[(a0 >> 8) & 255],
                              (long long)og_iq2xxs_grid[(a0 >> 16) & 255], (long long)og_iq2xxs_grid[a0 >> 24]);
}

static inline __attribute__((always_inline)) void iq2_xxs_n(bool canon, int ny, int64_t n, float *s, const void *vx,
                                                             const void *const *vy) {
    const og_block_iq2_xxs *x = vx;
    const og_block_q8_K *const *y = (const og_block_q8_K *const *)vy;
    const int64_t nb = n / OG_QK_K;
    __m256 acc[NYMAX], cacc[NYMAX][4];
    og_canon8 g[NYMAX];
    for (int i = 0; i < ny; i++) acc[i] = cacc[i][0] = cacc[i][1] = cacc[i][2] = cacc[i][3] = _mm256_setzero_ps();
    for (int64_t b0 = 0; b0 < nb; b0 += OG_CANON_GROUP) {
        for (int j = 0; j < OG_CANON_GROUP && b0 + j < nb; j++) {
            const int64_t b = b0 + j;
            og_prefetch_span(x + b, PF_DIST, sizeof *x);
            __m256i isum[NYMAX];
            for (int i = 0; i < ny; i++) isum[i] = _mm256_setzero_si256();
            for (int sb = 0; sb < 8; sb++) {
                uint32_t a[2];
                memcpy(a, (const uint8_t *)x[b].qs + 8 * sb, 8);
                const __m256i gb = iq2_grid_bytes(a[0]), nb8 = _mm256_and_si256(gb, iq2_neg_bytes(a[1]));
                const __m256i ls = _mm256_set1_epi16((short)(2 * (a[1] >> 28) + 1));
#pragma GCC unroll 4
                for (int i = 0; i < ny; i++) {
                    const __m256i yy = _mm256_loadu_si256((const __m256i *)(y[i][b].qs + 32 * sb));
                    const __m256i pn = _mm256_maddubs_epi16(nb8, yy);
                    const __m256i t = _mm256_sub_epi16(_mm256_maddubs_epi16(gb, yy), _mm256_add_epi16(pn, pn));
                    isum[i] = _mm256_add_epi32(isum[i], _mm256_madd_epi16(t, ls));
                }
            }
            const float dx = og_h16((const uint8_t *)&x[b].d);
            for (int i = 0; i < ny; i++) {
                if (canon) og_canon_put(&g[i], j, isum[i], dx * y[i][b].d * 0.125f);
                else acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[i]), _mm256_set1_ps(dx * y[i][b].d), acc[i]);
            }
        }
        if (canon)
            for (int i = 0; i < ny; i++) og_canon_flush(&g[i], cacc[i], b0, nb, false);
    }
    for (int i = 0; i < ny; i++) s[i] = canon ? og_canon_finish(cacc[i]) : 0.125f * og_hsum256(acc[i]);
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

static inline __attribute__((always_inline)) void mxfp4_n(bool canon, int ny, int64_t n, float *s, const void *vx,
                                                           const void *const *vy) {
    const og_block_mxfp4 *x = vx;
    const og_block_q8_0 *const *y = (const og_block_q8_0 *const *)vy;
    const int64_t nb = n / OG_QK_MXFP4;
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)og_mxfp4_values));
    __m256 acc[NYMAX], cacc[NYMAX][4];
    og_canon8 g[NYMAX];
    for (int i = 0; i < ny; i++) acc[i] = cacc[i][0] = cacc[i][1] = cacc[i][2] = cacc[i][3] = _mm256_setzero_ps();
    for (int64_t b0 = 0; b0 < nb; b0 += OG_CANON_GROUP) {
        for (int j = 0; j < OG_CANON_GROUP && b0 + j < nb; j++) {
            const int64_t b = b0 + j;
            if (!(j & 3)) og_prefetch_span(x + b, PF_DIST, 64);
            const float dx = og_e8m0_half(x[b].e);
#pragma GCC unroll 4
            for (int i = 0; i < ny; i++) {
                const __m256i is = mxfp4_isum(&x[b], &y[i][b], table);
                const float a = dx * og_h16((const uint8_t *)&y[i][b].d);
                if (canon) og_canon_put(&g[i], j, is, a);
                else acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_set1_ps(a), acc[i]);
            }
        }
        if (canon)
            for (int i = 0; i < ny; i++) og_canon_flush(&g[i], cacc[i], b0, nb, false);
    }
    for (int i = 0; i < ny; i++) s[i] = canon ? og_canon_finish(cacc[i]) : og_hsum256(acc[i]);
}

OG_FORK_CANON_KERNELS(iq2_xxs, iq2_xxs_n)
OG_FORK_CANON_KERNELS(mxfp4, mxfp4_n)

void og_kernels_fill_iq_avx2(og_kernels *k) {
#define SET(T, name)                                                                   \
    k->vec_dot[T] = name##_dot, k->vec_dot4[T] = name##_dot4,                          \
    k->vec_dot_canonical[T] = name##_canon_dot, k->vec_dot4_canonical[T] = name##_canon_dot4
    SET(OG_TYPE_IQ2_XXS, iq2_xxs);
    SET(OG_TYPE_MXFP4, mxfp4);
#undef SET
}
