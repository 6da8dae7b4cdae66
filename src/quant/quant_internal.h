/* Shared between the reference and the SIMD tiers of src/quant; not public. */
#ifndef OG_QUANT_INTERNAL_H
#define OG_QUANT_INTERNAL_H

#include "og_quant.h"

#include <string.h>

extern const int8_t og_iq4nl_values[16];

/* Unpacks the Q4_K/Q5_K 12-byte field into 8 scales and 8 mins (kquants.md §4),
 * four bytes at a time. */
static inline void k4_unpack(const uint8_t *q, uint8_t sc[8], uint8_t m[8]) {
    uint32_t a, b, c;
    memcpy(&a, q, 4);
    memcpy(&b, q + 4, 4);
    memcpy(&c, q + 8, 4);
    uint32_t s_lo = a & 0x3f3f3f3f, s_hi = (c & 0x0f0f0f0f) | ((a >> 2) & 0x30303030);
    uint32_t m_lo = b & 0x3f3f3f3f, m_hi = ((c >> 4) & 0x0f0f0f0f) | ((b >> 2) & 0x30303030);
    memcpy(sc, &s_lo, 4);
    memcpy(sc + 4, &s_hi, 4);
    memcpy(m, &m_lo, 4);
    memcpy(m + 4, &m_hi, 4);
}

#ifdef __SSE2__
#include <emmintrin.h>
/* The 16 six-bit Q3_K scales minus 32 (kquants.md §4) as int8 lanes of one
 * register: scale s has its low nibble in byte s%8 (high half for s >= 8) and its
 * top two bits in byte 8 + s%4 at bit 2*(s/4). Kept in registers throughout: a
 * vector store read back as bytes stalls store forwarding. */
static inline __m128i og_q3_scales(const uint8_t *q) {
    uint32_t a, b, c;
    memcpy(&a, q, 4);
    memcpy(&b, q + 4, 4);
    memcpy(&c, q + 8, 4);
    __m128i v = _mm_setr_epi32((int)((a & 0x0f0f0f0f) | ((c & 0x03030303) << 4)),
                               (int)((b & 0x0f0f0f0f) | (((c >> 2) & 0x03030303) << 4)),
                               (int)(((a >> 4) & 0x0f0f0f0f) | (((c >> 4) & 0x03030303) << 4)),
                               (int)(((b >> 4) & 0x0f0f0f0f) | (((c >> 6) & 0x03030303) << 4)));
    return _mm_sub_epi8(v, _mm_set1_epi8(32));
}
#endif

/* The activation quantizer of vec_dot_type t (og_kernels.quantize_act). */
og_from_float_fn og_act_quantizer(og_ggml_type t);

/* The butterfly of og_dot_f32_device (offsets 16, 8, 4, 2, 1) over acc[32];
 * modifies acc, returns lane 0. */
static inline float og_warp_reduce32(float *acc) {
    for (int o = 16; o; o >>= 1) {
        float t[32];
        for (int l = 0; l < 32; l++) t[l] = acc[l] + acc[l ^ o];
        for (int l = 0; l < 32; l++) acc[l] = t[l];
    }
    return acc[0];
}

/* A tier's kernel written as one body call(ny, n, s, x, y) for ny activation rows
 * becomes its vec_dot (ny = 1) and vec_dot4 (ny = 4), name##_dot and name##_dot4. */
#define OG_NY_KERNELS(name, call)                                                                        \
    static void name##_dot(int64_t n, float *s, const void *x, const void *y) { call(1, n, s, x, &y); } \
    static void name##_dot4(int64_t n, float *s, const void *x, const void *const *y) { call(4, n, s, x, y); }

#if defined(__AVX2__) && defined(__F16C__)
/* ---- shared by the SIMD tiers (built with AVX2 and F16C) ---- */
#include <immintrin.h>

/* Prefetch of the byte `ahead` bytes past p, the address formed as an integer: it
 * may lie past the end of the row or buffer, where a prefetch never faults but a
 * pointer would be undefined behaviour (C11 6.5.6). */
#define OG_PREFETCH(p, ahead) _mm_prefetch((const char *)((uintptr_t)(p) + (ahead)), _MM_HINT_T0)

/* Prefetches the `bytes` bytes (a block, a pair of blocks) that lie `ahead` bytes
 * past p, one cache line at a time. */
static inline void og_prefetch_span(const void *p, size_t ahead, size_t bytes) {
    for (size_t l = 0; l < bytes; l += 64) OG_PREFETCH(p, ahead + l);
}

/* The fp16 at p (any alignment) as a float (F16C). */
static inline float og_h16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return _cvtsh_ss(v);
}

/* Sum of the 8 lanes, in the order (0+4, 1+5, 2+6, 3+7) pairwise. */
static inline float og_hsum256(__m256 v) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}
#endif

/* Fill the entries a tier implements; leave others untouched. */
void og_kernels_fill_avx2(og_kernels *k);
void og_kernels_fill_avx512(og_kernels *k);

#endif
