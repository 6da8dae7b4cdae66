/* AVX-512 (F, BW, VL, VNNI) dot kernels: vpdpbusd sums four u8*s8 products per
 * int32 lane, so quantized weights are widened once and never pass through int16.
 * Types not listed here keep their AVX2 kernel in this tier. Built with
 * -mavx512f -mavx512bw -mavx512vl -mavx512vnni (plus AVX2 flags). */
#include "quant_internal.h"

#include <immintrin.h>
#include <string.h>

#define FP16(x) _cvtsh_ss(x) /* F16C: one instruction, inlined */

static void f32_dot(int64_t n, float *s, const void *vx, const void *vy) {
    const float *x = vx, *y = vy;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(y + i + 16), a1);
    }
    for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), a0);
    float sum = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
    for (; i < n; i++) sum += x[i] * y[i];
    *s = sum;
}

/* Q8_0: two blocks per 512-bit register. vpdpbusd wants unsigned x signed, so x
 * is biased to x + 128 (an XOR of the sign bit) and 128 * sum(y), itself one
 * vpdpbusd, is subtracted: exact in int32. */
static void q8_0_dot(int64_t n, float *s, const void *vx, const void *vy) {
    const og_block_q8_0 *x = vx, *y = vy;
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    __m512 acc = _mm512_setzero_ps();
    int64_t nb = n / 32, b = 0;
    for (; b + 1 < nb; b += 2) {
        __m512i xx = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)x[b].qs)),
                                        _mm256_loadu_si256((const __m256i *)x[b + 1].qs), 1);
        __m512i yy = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)y[b].qs)),
                                        _mm256_loadu_si256((const __m256i *)y[b + 1].qs), 1);
        __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_xor_si512(xx, bias), yy);
        p = _mm512_sub_epi32(p, _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, yy));
        /* lanes 0-7: block b's scale, 8-15: block b+1's (insertf64x4: AVX-512F only) */
        __m512 d = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_set1_ps(FP16(x[b].d) * FP16(y[b].d))),
                                                       _mm256_castps_pd(_mm256_set1_ps(FP16(x[b + 1].d) * FP16(y[b + 1].d))), 1));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), d, acc);
    }
    float sum = _mm512_reduce_add_ps(acc);
    for (; b < nb; b++) { /* an odd last block */
        __m256i x0 = _mm256_loadu_si256((const __m256i *)x[b].qs), y0 = _mm256_loadu_si256((const __m256i *)y[b].qs);
        __m256i p0 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(x0), _mm256_sign_epi8(y0, x0));
        __m128i h = _mm_add_epi32(_mm256_castsi256_si128(p0), _mm256_extracti128_si256(p0, 1));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
        sum += (float)_mm_cvtsi128_si32(h) * (FP16(x[b].d) * FP16(y[b].d));
    }
    *s = sum;
}

/* 32 bytes of two nibble planes -> 64 bytes: low nibbles, then high nibbles. */
/* sum of the 8 lanes, in the order (0+4, 1+5, 2+6, 3+7) pairwise */
static inline float hsum256_ps(__m256 v) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

static inline __m512i nibbles64(const uint8_t *q) {
    __m256i v = _mm256_loadu_si256((const __m256i *)q);
    __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1);
    return _mm512_and_si512(w, _mm512_set1_epi8(0x0F));
}


static void q4_K_dot(int64_t n, float *s, const void *vx, const void *vy) {
    const og_block_q4_K *x = vx;
    const og_block_q8_K *y = vy;
    __m512 acc = _mm512_setzero_ps();
    __m256 macc = _mm256_setzero_ps();
    /* lane l of a 64-element chunk's dpbusd belongs to sub-block 2c + l/8 */
    const __m512i half = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    for (int64_t b = 0; b < n / OG_QK_K; b++) {
        uint8_t sc[8], m[8];
        k4_unpack(x[b].scales, sc, m);
        const float dy = y[b].d;
        /* mins: m[j] * (bsums[2j] + bsums[2j+1]) */
        __m256i md = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)m));
        __m256i pair = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y[b].bsums), _mm256_set1_epi16(1));
        macc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_mullo_epi32(pair, md)),
                               _mm256_set1_ps(FP16(x[b].dmin) * dy), macc);
        __m512i scv = _mm512_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)sc)); /* 8 scales in lanes 0-7 */
        __m512i isum = _mm512_setzero_si512();
        for (int c = 0; c < 4; c++) {
            __m512i q = nibbles64(x[b].qs + 32 * c);
            __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, _mm512_loadu_si512(y[b].qs + 64 * c));
            __m512i sv = _mm512_permutexvar_epi32(_mm512_add_epi32(half, _mm512_set1_epi32(2 * c)), scv);
            isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(p, sv));
        }
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(FP16(x[b].d) * dy), acc);
    }
    *s = _mm512_reduce_add_ps(acc) - hsum256_ps(macc);
}

/* Q2_K: a 2-bit quant q times its 4-bit scale is at most 45, so q*sc fits a byte
 * and comes from a 4-entry table per sub-block with one vpshufb; the sixteen
 * sub-blocks then accumulate in one vpdpbusd chain with no per-lane multiply.
 * Each 128-bit lane of a shifted plane holds exactly one sub-block (16 elements). */
static void q2_K_dot(int64_t n, float *s, const void *vx, const void *vy) {
    const og_block_q2_K *x = vx;
    const og_block_q8_K *y = vy;
    __m512 acc = _mm512_setzero_ps();
    __m256 macc = _mm256_setzero_ps();
    /* plane k covers sub-blocks 2k, 2k+1 (half 0) and 8+2k, 9+2k (half 1): bring
     * that sub-block's table to bytes 0-3 of each 128-bit lane */
    const __m512i sel[4] = {
        _mm512_set_epi32(0, 0, 0, 9, 0, 0, 0, 8, 0, 0, 0, 1, 0, 0, 0, 0),
        _mm512_set_epi32(0, 0, 0, 11, 0, 0, 0, 10, 0, 0, 0, 3, 0, 0, 0, 2),
        _mm512_set_epi32(0, 0, 0, 13, 0, 0, 0, 12, 0, 0, 0, 5, 0, 0, 0, 4),
        _mm512_set_epi32(0, 0, 0, 15, 0, 0, 0, 14, 0, 0, 0, 7, 0, 0, 0, 6),
    };
    const __m512i m3 = _mm512_set1_epi8(3);
    for (int64_t b = 0; b < n / OG_QK_K; b++) {
        const float dy = y[b].d;
        __m128i sc8 = _mm_loadu_si128((const __m128i *)x[b].scales);
        /* mins: (sc >> 4) . bsums per sub-block, accumulated as a vector */
        __m256i m16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc8, 4), _mm_set1_epi8(0x0F)));
        __m256i mm = _mm256_madd_epi16(m16, _mm256_loadu_si256((const __m256i *)y[b].bsums));
        macc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mm), _mm256_set1_ps(FP16(x[b].dmin) * dy), macc);
        /* table of sub-block j in dword j: bytes [0, s, 2s, 3s] = s * 0x03020100 */
        __m512i tab = _mm512_mullo_epi32(_mm512_cvtepu8_epi32(_mm_and_si128(sc8, _mm_set1_epi8(0x0F))),
                                         _mm512_set1_epi32(0x03020100));
        __m512i q = _mm512_loadu_si512(x[b].qs); /* bytes 0-31: half 0, 32-63: half 1 */
        __m512i isum = _mm512_setzero_si512();
        for (int k = 0; k < 4; k++) {
            __m512i u = _mm512_and_si512(_mm512_srli_epi16(q, 2 * k), m3);
            __m512i us = _mm512_shuffle_epi8(_mm512_permutexvar_epi32(sel[k], tab), u); /* q * sc */
            __m256i ylo = _mm256_loadu_si256((const __m256i *)(y[b].qs + 32 * k));
            __m256i yhi = _mm256_loadu_si256((const __m256i *)(y[b].qs + 128 + 32 * k));
            isum = _mm512_dpbusd_epi32(isum, us, _mm512_inserti64x4(_mm512_castsi256_si512(ylo), yhi, 1));
        }
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(FP16(x[b].d) * dy), acc);
    }
    *s = _mm512_reduce_add_ps(acc) - hsum256_ps(macc);
}

static void q6_K_dot(int64_t n, float *s, const void *vx, const void *vy) {
    const og_block_q6_K *x = vx;
    const og_block_q8_K *y = vy;
    __m512 acc = _mm512_setzero_ps();
    /* lane l of a 64-element chunk belongs to sub-block base + l/4 */
    const __m512i quarter = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    for (int64_t b = 0; b < n / OG_QK_K; b++) {
        __m512i scv = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)x[b].scales));
        /* q = u - 32: subtract 32 * sum_s sc[s] * bsums[s] */
        __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[b].scales));
        __m256i cc = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)y[b].bsums));
        __m512i isum = _mm512_slli_epi32(_mm512_castsi256_si512(cc), 5); /* upper half garbage: masked below */
        isum = _mm512_maskz_sub_epi32(0x00FF, _mm512_setzero_si512(), isum);
        for (int h = 0; h < 2; h++) {
            __m512i ql = _mm512_loadu_si512(x[b].ql + 64 * h); /* low nibbles: elems 0-63, high: 64-127 */
            __m256i qh = _mm256_loadu_si256((const __m256i *)(x[b].qh + 32 * h));
            __m512i h01 = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
            __m512i h23 = _mm512_srli_epi16(h01, 4);
            __m512i u0 = _mm512_or_si512(_mm512_and_si512(ql, _mm512_set1_epi8(0x0F)),
                                         _mm512_slli_epi16(_mm512_and_si512(h01, _mm512_set1_epi8(3)), 4));
            __m512i u1 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), _mm512_set1_epi8(0x0F)),
                                         _mm512_slli_epi16(_mm512_and_si512(h23, _mm512_set1_epi8(3)), 4));
            __m512i p0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u0, _mm512_loadu_si512(y[b].qs + 128 * h));
            __m512i p1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u1, _mm512_loadu_si512(y[b].qs + 128 * h + 64));
            __m512i s0 = _mm512_permutexvar_epi32(_mm512_add_epi32(quarter, _mm512_set1_epi32(8 * h)), scv);
            __m512i s1 = _mm512_permutexvar_epi32(_mm512_add_epi32(quarter, _mm512_set1_epi32(8 * h + 4)), scv);
            isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(p0, s0));
            isum = _mm512_add_epi32(isum, _mm512_mullo_epi32(p1, s1));
        }
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(FP16(x[b].d) * y[b].d), acc);
    }
    *s = _mm512_reduce_add_ps(acc);
}

/* Lanes 0-15 and 16-31 of the device order, combined by og_warp_reduce32. */
static inline float warp_sum(__m512 a0, __m512 a1) {
    float acc[32];
    _mm512_storeu_ps(acc, a0);
    _mm512_storeu_ps(acc + 16, a1);
    return og_warp_reduce32(acc);
}

/* og_dot_f32_device: lanes 0-15 and 16-31 in two registers. */
static float dot_f32_device(const float *w, const float *x, int64_t n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i), _mm512_loadu_ps(x + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i + 16), _mm512_loadu_ps(x + i + 16), a1);
    }
    if (i < n) { /* zero-padded tail: masked loads give the zeros */
        int64_t r = n - i;
        __mmask16 m0 = (__mmask16)(r >= 16 ? 0xFFFF : (1u << r) - 1), m1 = (__mmask16)(r > 16 ? (1u << (r - 16)) - 1 : 0);
        a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m0, w + i), _mm512_maskz_loadu_ps(m0, x + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m1, w + i + 16), _mm512_maskz_loadu_ps(m1, x + i + 16), a1);
    }
    return warp_sum(a0, a1);
}

/* Q8_0 row . f32 x in device order: a block's 32 weights are the 32 lanes, each
 * w = d * q exactly as q8_0's to_float computes it. */
static float q8_0_dot_device(const void *row, const float *x, int64_t n) {
    const og_block_q8_0 *b = row;
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        __m512 d = _mm512_set1_ps(FP16(b[i].d));
        __m128i q0 = _mm_loadu_si128((const __m128i *)b[i].qs), q1 = _mm_loadu_si128((const __m128i *)(b[i].qs + 16));
        __m512 w0 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0)));
        __m512 w1 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1)));
        a0 = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x), a0);
        a1 = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + 16), a1);
    }
    return warp_sum(a0, a1);
}

/* 32 weights of a k-quant group as lanes: w = dl * q - ml, the reference's
 * (d * sc) * q - dmin * m (lanes 0-15 with dl0/ml0, 16-31 with dl1/ml1), then
 * into the two lane accumulators. */
static inline void kq_group_fma(__m256i q8, float dl0, float ml0, float dl1, float ml1, const float *x, __m512 *a0,
                                __m512 *a1) {
    __m512 q0 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_castsi256_si128(q8)));
    __m512 q1 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_extracti128_si256(q8, 1)));
    *a0 = _mm512_fmadd_ps(_mm512_sub_ps(_mm512_mul_ps(_mm512_set1_ps(dl0), q0), _mm512_set1_ps(ml0)),
                          _mm512_loadu_ps(x), *a0);
    *a1 = _mm512_fmadd_ps(_mm512_sub_ps(_mm512_mul_ps(_mm512_set1_ps(dl1), q1), _mm512_set1_ps(ml1)),
                          _mm512_loadu_ps(x + 16), *a1);
}

/* Q2_K . f32 in device order: group g (32 elements) reads qs[32 (g / 4) ..] shifted
 * by 2 (g % 4); lanes 0-15 take scale 2g, lanes 16-31 scale 2g + 1. */
static float q2_K_dot_device(const void *row, const float *x, int64_t n) {
    const og_block_q2_K *b = row;
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    const __m256i three = _mm256_set1_epi8(3);
    for (int64_t i = 0; i < n / OG_QK_K; i++) {
        float d = FP16(b[i].d), dmin = FP16(b[i].dmin);
        for (int g = 0; g < 8; g++, x += 32) {
            __m256i raw = _mm256_loadu_si256((const __m256i *)(b[i].qs + 32 * (g / 4)));
            __m256i q = _mm256_and_si256(_mm256_srl_epi16(raw, _mm_cvtsi32_si128(2 * (g % 4))), three);
            uint8_t s0 = b[i].scales[2 * g], s1 = b[i].scales[2 * g + 1];
            kq_group_fma(q, d * (float)(s0 & 0xF), dmin * (float)(s0 >> 4), d * (float)(s1 & 0xF),
                         dmin * (float)(s1 >> 4), x, &a0, &a1);
        }
    }
    return warp_sum(a0, a1);
}

/* Q4_K . f32 in device order: group g reads the low (even g) or high (odd g)
 * nibbles of qs[32 (g / 2) ..], one scale and min per group. */
static float q4_K_dot_device(const void *row, const float *x, int64_t n) {
    const og_block_q4_K *b = row;
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    const __m256i lo = _mm256_set1_epi8(0xF);
    for (int64_t i = 0; i < n / OG_QK_K; i++) {
        float d = FP16(b[i].d), dmin = FP16(b[i].dmin);
        for (int g = 0; g < 8; g++, x += 32) {
            __m256i raw = _mm256_loadu_si256((const __m256i *)(b[i].qs + 32 * (g / 2)));
            __m256i q = _mm256_and_si256(g % 2 ? _mm256_srli_epi16(raw, 4) : raw, lo);
            uint8_t sc, m;
            og_scale_min_k4(g, b[i].scales, &sc, &m);
            kq_group_fma(q, d * (float)sc, dmin * (float)m, d * (float)sc, dmin * (float)m, x, &a0, &a1);
        }
    }
    return warp_sum(a0, a1);
}

void og_kernels_fill_avx512(og_kernels *k) {
    k->dot_device[OG_TYPE_Q2_K] = q2_K_dot_device;
    k->dot_device[OG_TYPE_Q4_K] = q4_K_dot_device;
    k->dot_f32_device = dot_f32_device;
    k->dot_device[OG_TYPE_Q8_0] = q8_0_dot_device;
    k->vec_dot[OG_TYPE_F32] = f32_dot;
    k->vec_dot[OG_TYPE_Q8_0] = q8_0_dot;
    k->vec_dot[OG_TYPE_Q4_K] = q4_K_dot;
    k->vec_dot[OG_TYPE_Q2_K] = q2_K_dot;
    k->vec_dot[OG_TYPE_Q6_K] = q6_K_dot;
}
