/* The tiled canonical products (quant_tile_body.h) on AVX2: 8 rows per vector, two
 * activation rows per micro tile (16 ymm registers hold its 8 accumulators and the
 * operands). vpdpbusd is AVX-VNNI's where the CPU has it (quant_tile_avxvnni.c
 * includes this file with TV_VNNI 1, built with -mavxvnni), else vpmaddubsw +
 * vpmaddwd: the u8 quants of the k-quants are at most 63, so no int16 pair of
 * vpmaddubsw exceeds 2 x 63 x 128, and vpdpwssd is vpmaddwd plus the add. Built
 * with -mavx2 -mfma -mf16c. */
#include "quant_internal.h"

#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#ifndef TV_VNNI
#define TV_VNNI 0
#endif
#define TV_N 8  /* int32 lanes per vector */
#define TV_MR 2 /* activation rows per micro tile */
#define TV_Q5_K_SCALE SCALE_MULLD /* vpmulld ymm has three ports: 12 % faster than SCALE_DPWSSD8 here */
typedef __m256i tv_i;
typedef __m256 tv_f;
typedef __m256i tv_m; /* the rows a gather reads: lanes of all ones */

static inline tv_i tv_zero(void) { return _mm256_setzero_si256(); }
static inline tv_f tv_zerof(void) { return _mm256_setzero_ps(); }
static inline tv_i tv_set1(int x) { return _mm256_set1_epi32(x); }
static inline tv_i tv_set1_8(char x) { return _mm256_set1_epi8(x); }
static inline tv_i tv_set4(int a3, int a2, int a1, int a0) { return _mm256_setr_epi32(a0, a1, a2, a3, a0, a1, a2, a3); }
static inline tv_i tv_iota(void) { return _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7); }
static inline tv_i tv_and(tv_i a, tv_i b) { return _mm256_and_si256(a, b); }
static inline tv_i tv_or(tv_i a, tv_i b) { return _mm256_or_si256(a, b); }
static inline tv_i tv_srli(tv_i a, int n) { return _mm256_srli_epi32(a, n); }
static inline tv_i tv_slli(tv_i a, int n) { return _mm256_slli_epi32(a, n); }
static inline tv_i tv_srai(tv_i a, int n) { return _mm256_srai_epi32(a, n); }
static inline tv_i tv_add(tv_i a, tv_i b) { return _mm256_add_epi32(a, b); }
static inline tv_i tv_sub(tv_i a, tv_i b) { return _mm256_sub_epi32(a, b); }
static inline tv_i tv_add8(tv_i a, tv_i b) { return _mm256_add_epi8(a, b); }
static inline tv_i tv_sub8(tv_i a, tv_i b) { return _mm256_sub_epi8(a, b); }
static inline tv_i tv_mullo(tv_i a, tv_i b) { return _mm256_mullo_epi32(a, b); }
static inline tv_i tv_shuf8(tv_i a, tv_i idx) { return _mm256_shuffle_epi8(a, idx); }
static inline tv_i tv_load(const int32_t *p) { return _mm256_load_si256((const __m256i *)p); }
static inline void tv_store(int32_t *p, tv_i v) { _mm256_store_si256((__m256i *)p, v); }
static inline tv_f tv_loadf(const float *p) { return _mm256_load_ps(p); }
static inline void tv_storef(float *p, tv_f v) { _mm256_store_ps(p, v); }
static inline tv_f tv_set1f(float x) { return _mm256_set1_ps(x); }
static inline tv_f tv_addf(tv_f a, tv_f b) { return _mm256_add_ps(a, b); }
static inline tv_f tv_mulf(tv_f a, tv_f b) { return _mm256_mul_ps(a, b); }
static inline tv_f tv_fnmaddf(tv_f a, tv_f b, tv_f c) { return _mm256_fnmadd_ps(a, b, c); }
static inline tv_f tv_cvtf(tv_i a) { return _mm256_cvtepi32_ps(a); }
/* Lanes below cnt (any int). */
static inline tv_m tv_live(int cnt) { return _mm256_cmpgt_epi32(_mm256_set1_epi32(cnt), tv_iota()); }
/* The four bytes at blk + off of each live row (idx: the rows' offsets); 0 elsewhere. */
static inline tv_i tv_gather(const uint8_t *blk, tv_i idx, tv_m live, int off) {
    return _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), (const int *)(const void *)(blk + off), idx, live, 1);
}
/* The fp16 in the low (hi false) or high word of each lane, as floats: the words
 * packed (vpackusdw keeps each 128-bit lane's, vpermq joins the two). */
static inline tv_f tv_half(tv_i v, bool hi) {
    const __m256i x = hi ? _mm256_srli_epi32(v, 16) : _mm256_and_si256(v, _mm256_set1_epi32(0xffff));
    return _mm256_cvtph_ps(_mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(x, x), 0x08)));
}
/* Bytes 16 where hb & bit is not zero, else 0 (bit: one bit per byte). */
static inline tv_i tv_bits16(tv_i hb, tv_i bit) {
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hb, bit), bit), _mm256_set1_epi8(16));
}
#if TV_VNNI
static inline tv_i tv_dpbusd(tv_i acc, tv_i u, tv_i s) { return _mm256_dpbusd_avx_epi32(acc, u, s); }
static inline tv_i tv_dpwssd(tv_i acc, tv_i a, tv_i b) { return _mm256_dpwssd_avx_epi32(acc, a, b); }
static inline tv_i tv_sum4_s8(tv_i q) { return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1), q); }
#else
/* acc + the sums of four u8 x s8 products per lane; exact while no pair of products
 * exceeds int16 (u <= 63 here) */
static inline tv_i tv_dpbusd(tv_i acc, tv_i u, tv_i s) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
}
static inline tv_i tv_dpwssd(tv_i acc, tv_i a, tv_i b) { return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b)); }
static inline tv_i tv_sum4_s8(tv_i q) { return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), _mm256_set1_epi16(1)); }
/* acc + the sums of four s8 x s8 products per lane (|a| <= 127): |w| by a with w's
 * sign, pairs within 2 x 128 x 127 */
static inline tv_i tv_dp_s8s8(tv_i acc, tv_i w, tv_i a) {
    const __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(a, w));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}
#endif
/* The first cnt (1 .. 8) floats of v to p. */
static inline void tv_storef_first(float *p, int cnt, tv_f v) { _mm256_maskstore_ps(p, tv_live(cnt), v); }

#include "quant_tile_body.h"

#if TV_VNNI
void og_kernels_fill_tile_avxvnni(og_kernels *k) { fill_tile(k); }
#else
void og_kernels_fill_tile_avx2(og_kernels *k) { fill_tile(k); }
#endif
