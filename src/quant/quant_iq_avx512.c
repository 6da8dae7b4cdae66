/* AVX-512 (F, BW, VL, VNNI) kernels of IQ2_XXS and MXFP4, the fork's order and the
 * canonical one (og_quant.h), one and four activation rows; two sub-blocks (IQ2_XXS)
 * or two blocks (MXFP4) per 512-bit register. Integer sums exact as in
 * quant_iq_avx2.c. Built with the AVX-512 flags plus -mbmi2 (pdep). The IQ2_XXS body
 * is in quant_avx512_canon.h (quant_avx512_gfni.c builds it with GFNI and VBMI). */
#include "quant_avx512_canon.h"

/* ---- MXFP4 ----------------------------------------------------------------------
 * Blocks b and b + 1 in one register, in element order (b's 0-15, 16-31, then
 * b + 1's); the E2M1 values biased to u8 (v + 128) by vpshufb, 128 * sum(y) taken
 * off by a second vpdpbusd: exact in int32. Lanes 0-7 are block b's, 8-15 b + 1's. */
static inline __m512i mxfp4_pair(const og_block_mxfp4 *x0, const og_block_mxfp4 *x1, const og_block_q8_0 *y0,
                                 const og_block_q8_0 *y1, __m512i table) {
    /* each block's 16 bytes twice, the second copy shifted down a nibble (H: 4 in each 16-bit lane) */
    const long long H = 0x0004000400040004LL;
    const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)x0->qs))),
                                         _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)x1->qs)), 1);
    const __m512i nib = _mm512_and_si512(_mm512_srlv_epi16(q, _mm512_set_epi64(H, H, 0, 0, H, H, 0, 0)), _mm512_set1_epi8(0x0F));
    const __m512i u = _mm512_shuffle_epi8(table, nib);
    const __m512i yy = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)y0->qs)),
                                          _mm256_loadu_si256((const __m256i *)y1->qs), 1);
    const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, yy);
    return _mm512_sub_epi32(p, _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8((char)0x80), yy));
}

/* The canonical terms of a full group of eight blocks x[0..8) against y[i][0..8)
 * (i < ny) join the lanes b0 .. b0 + 7 of cacc[i]. Register j holds blocks j and
 * j + 4, so one tree (sum4x4_epi32_512, then the 128-bit units pairwise) leaves
 * block k's exact sum in lane k with nothing stored; the factors a_k = dx_k dy_k
 * come eight at a time: the E8M0 bytes (17 bytes apart) and the fp16 dy (34 bytes
 * apart) picked out of the group's bytes by word permutes. */
static inline __attribute__((always_inline)) void mxfp4_group8(int ny, const og_block_mxfp4 *x, const og_block_q8_0 *const *y,
                                                                int64_t b0, __m512i table, __m256 cacc[][4]) {
    const uint8_t *xb = (const uint8_t *)(x + b0);
    og_prefetch_span(xb, PF_DIST, 8 * sizeof *x);
    /* e of block k: byte 17k, in word 17k / 2 (the high byte for odd k) */
    const __m512i ew = _mm512_permutex2var_epi16(_mm512_loadu_si512((const void *)xb),
                                                 _mm512_zextsi128_si512(_mm_setr_epi16(0, 8, 17, 25, 34, 42, 51, 59)),
                                                 _mm512_loadu_si512((const void *)(xb + 64)));
    const __m256i e = _mm256_and_si256(_mm256_srlv_epi32(_mm256_cvtepu16_epi32(_mm512_castsi512_si128(ew)), _mm256_setr_epi32(0, 8, 0, 8, 0, 8, 0, 8)),
                                       _mm256_set1_epi32(0xFF));
    /* og_e8m0_half: (e - 1) << 23, the subnormals 2^-128, 2^-127 for e = 0, 1 */
    const __m256 dx = _mm256_castsi256_ps(_mm256_mask_blend_epi32(_mm256_cmpgt_epi32_mask(e, _mm256_set1_epi32(1)),
                                                                  _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e),
                                                                  _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23)));
    __m512i u[4];
    #pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        const long long H = 0x0004000400040004LL;
        const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)x[b0 + j].qs))),
                                             _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)x[b0 + j + 4].qs)), 1);
        u[j] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srlv_epi16(q, _mm512_set_epi64(H, H, 0, 0, H, H, 0, 0)),
                                                           _mm512_set1_epi8(0x0F)));
    }
    #pragma GCC unroll 4
    for (int i = 0; i < ny; i++) {
        const og_block_q8_0 *yb = y[i] + b0;
        const uint8_t *yc = (const uint8_t *)yb;
        /* dy of block k: the word at byte 34k, k < 4 in the first 128 bytes, k >= 4 in the next 128 */
        const __m512i dlo = _mm512_permutex2var_epi16(_mm512_loadu_si512((const void *)yc), _mm512_zextsi128_si512(_mm_setr_epi16(0, 17, 34, 51, 0, 0, 0, 0)),
                                                      _mm512_loadu_si512((const void *)(yc + 64)));
        const __m512i dhi = _mm512_permutex2var_epi16(_mm512_loadu_si512((const void *)(yc + 128)), _mm512_zextsi128_si512(_mm_setr_epi16(0, 0, 0, 0, 4, 21, 38, 55)),
                                                      _mm512_loadu_si512((const void *)(yc + 192)));
        const __m256 dy = _mm256_cvtph_ps(_mm_blend_epi16(_mm512_castsi512_si128(dlo), _mm512_castsi512_si128(dhi), 0xF0));
        __m512i p[4];
        #pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            const __m512i yy = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)yb[j].qs)),
                                                  _mm256_loadu_si256((const __m256i *)yb[j + 4].qs), 1);
            p[j] = _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), u[j], yy),
                                    _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8((char)0x80), yy));
        }
        /* unit q, lane j: block j's (q < 2) or j + 4's lanes of unit q; then units 0 + 1 and 2 + 3 */
        const __m512i r = sum4x4_epi32_512(p), t = _mm512_add_epi32(r, _mm512_shuffle_i32x4(r, r, _MM_SHUFFLE(2, 3, 0, 1)));
        const __m256i isum = _mm512_castsi512_si256(_mm512_shuffle_i32x4(t, t, _MM_SHUFFLE(2, 0, 2, 0)));
        og_canon_add(cacc[i], b0, isum, _mm256_setzero_si256(), _mm256_mul_ps(dx, dy), _mm256_setzero_ps(), false);
    }
}

static inline __attribute__((always_inline)) void mxfp4_n(bool canon, int ny, int64_t n, float *s, const void *vx,
                                                           const void *const *vy) {
    const og_block_mxfp4 *x = vx;
    const og_block_q8_0 *const *y = (const og_block_q8_0 *const *)vy;
    const int64_t nb = n / OG_QK_MXFP4;
    const __m512i table = _mm512_xor_si512(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)og_mxfp4_values)),
                                           _mm512_set1_epi8((char)0x80));
    iq_acc r;
    iq_acc_zero(&r, ny);
    for (int64_t b0 = 0; b0 < nb; b0 += OG_CANON_GROUP) {
        if (canon && b0 + OG_CANON_GROUP <= nb) {
            mxfp4_group8(ny, x, y, b0, table, r.cacc);
            continue;
        }
        for (int j = 0; j < OG_CANON_GROUP && b0 + j < nb; j += 2) {
            const int64_t b = b0 + j, b1 = b + 1 < nb ? b + 1 : b; /* an odd last block pairs with itself */
            if (!(j & 3)) og_prefetch_span(x + b, PF_DIST, 128);
            const float d0 = og_e8m0_half(x[b].e), d1 = b1 != b ? og_e8m0_half(x[b1].e) : 0.0f;
#pragma GCC unroll 4
            for (int i = 0; i < ny; i++) {
                const __m512i p = mxfp4_pair(&x[b], &x[b1], &y[i][b], &y[i][b1], table);
                const float a0 = d0 * og_h16((const uint8_t *)&y[i][b].d), a1 = d1 * og_h16((const uint8_t *)&y[i][b1].d);
                if (canon) {
                    og_canon_put(&r.g[i], j, _mm512_castsi512_si256(p), a0);
                    if (b1 != b) og_canon_put(&r.g[i], j + 1, _mm512_extracti64x4_epi64(p, 1), a1);
                } else {
                    r.acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(a0), _mm512_set1_ps(a1)),
                                             r.acc[i]);
                }
            }
        }
        if (canon)
            for (int i = 0; i < ny; i++) og_canon_flush(&r.g[i], r.cacc[i], b0, nb, false);
    }
    for (int i = 0; i < ny; i++) s[i] = canon ? og_canon_finish(r.cacc[i]) : _mm512_reduce_add_ps(r.acc[i]);
}

OG_FORK_CANON_KERNELS(iq2_xxs, iq2_xxs_n)
OG_FORK_CANON_KERNELS(mxfp4, mxfp4_n)

void og_kernels_fill_iq_avx512(og_kernels *k) {
    OG_SET_FORK_CANON(k, OG_TYPE_IQ2_XXS, iq2_xxs);
    OG_SET_FORK_CANON(k, OG_TYPE_MXFP4, mxfp4);
}
