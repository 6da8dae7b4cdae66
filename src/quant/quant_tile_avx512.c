/* The tiled canonical products (quant_tile_body.h) on AVX-512 VNNI: 16 rows per
 * vector, four activation rows per micro tile (32 zmm registers hold its 16
 * accumulators), vpdpbusd and vpdpwssd. Built with -mavx512f -mavx512bw
 * -mavx512vl -mavx512vnni. */
#include "quant_internal.h"

#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#define TV_N 16  /* int32 lanes per vector */
#define TV_MR 4  /* activation rows per micro tile */
#define TV_VNNI 1
#define TV_Q5_K_SCALE SCALE_DPWSSD8 /* 12 % faster than vpmulld here */
typedef __m512i tv_i;
typedef __m512 tv_f;
typedef __mmask16 tv_m; /* the rows a gather reads */

static inline tv_i tv_zero(void) { return _mm512_setzero_si512(); }
static inline tv_f tv_zerof(void) { return _mm512_setzero_ps(); }
static inline tv_i tv_set1(int x) { return _mm512_set1_epi32(x); }
static inline tv_i tv_set1_8(char x) { return _mm512_set1_epi8(x); }
static inline tv_i tv_set4(int a3, int a2, int a1, int a0) { return _mm512_set4_epi32(a3, a2, a1, a0); }
static inline tv_i tv_iota(void) { return _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); }
static inline tv_i tv_and(tv_i a, tv_i b) { return _mm512_and_si512(a, b); }
static inline tv_i tv_or(tv_i a, tv_i b) { return _mm512_or_si512(a, b); }
static inline tv_i tv_srli(tv_i a, int n) { return _mm512_srli_epi32(a, (unsigned)n); }
static inline tv_i tv_slli(tv_i a, int n) { return _mm512_slli_epi32(a, (unsigned)n); }
static inline tv_i tv_srai(tv_i a, int n) { return _mm512_srai_epi32(a, (unsigned)n); }
static inline tv_i tv_add(tv_i a, tv_i b) { return _mm512_add_epi32(a, b); }
static inline tv_i tv_sub(tv_i a, tv_i b) { return _mm512_sub_epi32(a, b); }
static inline tv_i tv_add8(tv_i a, tv_i b) { return _mm512_add_epi8(a, b); }
static inline tv_i tv_sub8(tv_i a, tv_i b) { return _mm512_sub_epi8(a, b); }
static inline tv_i tv_mullo(tv_i a, tv_i b) { return _mm512_mullo_epi32(a, b); }
static inline tv_i tv_shuf8(tv_i a, tv_i idx) { return _mm512_shuffle_epi8(a, idx); }
static inline tv_i tv_load(const int32_t *p) { return _mm512_load_si512(p); }
static inline void tv_store(int32_t *p, tv_i v) { _mm512_store_si512(p, v); }
static inline tv_f tv_loadf(const float *p) { return _mm512_load_ps(p); }
static inline void tv_storef(float *p, tv_f v) { _mm512_store_ps(p, v); }
static inline tv_f tv_set1f(float x) { return _mm512_set1_ps(x); }
static inline tv_f tv_addf(tv_f a, tv_f b) { return _mm512_add_ps(a, b); }
static inline tv_f tv_mulf(tv_f a, tv_f b) { return _mm512_mul_ps(a, b); }
static inline tv_f tv_fnmaddf(tv_f a, tv_f b, tv_f c) { return _mm512_fnmadd_ps(a, b, c); }
static inline tv_f tv_cvtf(tv_i a) { return _mm512_cvtepi32_ps(a); }
/* Lanes below cnt (any int). */
static inline tv_m tv_live(int cnt) { return cnt >= 16 ? 0xFFFF : cnt <= 0 ? 0 : (tv_m)((1u << cnt) - 1); }
/* The four bytes at blk + off of each live row (idx: the rows' offsets); 0 elsewhere. */
static inline tv_i tv_gather(const uint8_t *blk, tv_i idx, tv_m live, int off) {
    return _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, idx, blk + off, 1);
}
/* The fp16 in the low (hi false) or high word of each lane, as floats. */
static inline tv_f tv_half(tv_i v, bool hi) { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(hi ? _mm512_srli_epi32(v, 16) : v)); }
/* Bytes 16 where hb & bit is not zero, else 0. */
static inline tv_i tv_bits16(tv_i hb, tv_i bit) { return _mm512_maskz_mov_epi8(_mm512_test_epi8_mask(hb, bit), _mm512_set1_epi8(16)); }
static inline tv_i tv_dpbusd(tv_i acc, tv_i u, tv_i s) { return _mm512_dpbusd_epi32(acc, u, s); }
static inline tv_i tv_dpwssd(tv_i acc, tv_i a, tv_i b) { return _mm512_dpwssd_epi32(acc, a, b); }
/* The sum of each lane's four s8 bytes. */
static inline tv_i tv_sum4_s8(tv_i q) { return _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), q); }
/* The first cnt (1 .. 16) floats of v to p. */
static inline void tv_storef_first(float *p, int cnt, tv_f v) { _mm512_mask_storeu_ps(p, tv_live(cnt), v); }

#include "quant_tile_body.h"

void og_kernels_fill_tile_avx512(og_kernels *k) { fill_tile(k); }
