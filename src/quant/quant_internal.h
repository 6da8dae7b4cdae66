/* Shared between the reference and the SIMD tiers of src/quant; not public. */
#ifndef OG_QUANT_INTERNAL_H
#define OG_QUANT_INTERNAL_H

#include "og_quant.h"

#include <string.h>

extern const int8_t og_iq4nl_values[16];

/* The format constants of IQ2_XXS and MXFP4 (quant_iq.c; og_quant_blocks.h has the
 * layouts): the 256 grid points of 8 weights each (byte j = weight j), the 128 sign
 * patterns (7 stored bits, the 8th makes the count of negatives even) and the 16
 * E2M1 values doubled. */
extern const uint64_t og_iq2xxs_grid[256];
extern const uint16_t og_iq2xxs_grid2[256]; /* the same points, 2-bit levels (0: 8, 1: 25, 2: 43), weight j at bits 2j */
extern const uint8_t og_iq2xxs_signs[128];
extern const int8_t og_mxfp4_values[16];

/* 2^(e - 128), the MXFP4 scale of exponent e times 1/2 (the table is doubled):
 * e = 0 and 1 are the subnormals 2^-128 and 2^-127, e = 255 is 2^127 (OCP marks
 * it NaN; ggml reads it as this number, and so do we). Exact. */
static inline float og_e8m0_half(uint8_t e) {
    const uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* quant_iq.c's scalar kernels (og_type_traits rows of IQ2_XXS and MXFP4). */
void og_iq2_xxs_to_float(const void *x, float *y, int64_t n);
void og_iq2_xxs_from_float(const float *x, void *y, int64_t n);
void og_iq2_xxs_vec_dot(int64_t n, float *s, const void *x, const void *y);
void og_iq2_xxs_canonical(int64_t n, float *s, const void *x, const void *y);
void og_mxfp4_to_float(const void *x, float *y, int64_t n);
void og_mxfp4_from_float(const float *x, void *y, int64_t n);
void og_mxfp4_vec_dot(int64_t n, float *s, const void *x, const void *y);
void og_mxfp4_canonical(int64_t n, float *s, const void *x, const void *y);

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

/* A body call(canon, ny, n, s, x, y) becomes name##_dot, name##_dot4 (the fork's
 * order, canon false) and name##_canon_dot, name##_canon_dot4 (the canonical one). */
#define OG_FORK_CANON_KERNELS(name, call)                                                          \
    static inline __attribute__((always_inline)) void name##_fork_n(int ny, int64_t n, float *s, const void *x, \
                                                                    const void *const *y) {                     \
        call(false, ny, n, s, x, y);                                                 \
    }                                                                                \
    static inline __attribute__((always_inline)) void name##_canon_n(int ny, int64_t n, float *s, const void *x, \
                                                                     const void *const *y) {                     \
        call(true, ny, n, s, x, y);                                                  \
    }                                                                                \
    OG_NY_KERNELS(name, name##_fork_n)                                               \
    OG_NY_KERNELS(name##_canon, name##_canon_n)

/* The four entries of type T that OG_FORK_CANON_KERNELS(name, ...) defined. */
#define OG_SET_FORK_CANON(k, T, name)                                                              \
    ((k)->vec_dot[T] = name##_dot, (k)->vec_dot4[T] = name##_dot4, (k)->vec_dot_canonical[T] = name##_canon_dot, \
     (k)->vec_dot4_canonical[T] = name##_canon_dot4)

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


/* ---- the canonical order in registers (og_quant.h "Canonical numerics") ----
 * Blocks go in groups of eight (8g .. 8g + 7): each block leaves in its slot a
 * vector of int32 lanes that sum to I_b (and, for types with mins, one that sums
 * to S_b) and its factors a_b (c_b); a full or final group is reduced to its
 * eight exact sums at once and its eight v_b join lanes 8g .. 8g + 7 of the 32,
 * acc[g % 4]. */
typedef struct og_canon8 {
    __m256i i[8], s[8];
    float a[8], c[8];
} og_canon8;

/* Lane j: the sum of the eight int32 lanes of v[j] (exact, any order). Each step
 * pairs two vectors by blends (any ALU port) and one shuffle, not the two shuffles
 * of a hadd: the shuffle port is what the kernels around it are short of. */
/* The first two steps for v[0..4): lane 4h + j holds v[j]'s lanes 4h .. 4h + 3. */
static inline __m256i og_sum4x2_epi32(const __m256i *v) {
    __m256i a[2];
    for (int k = 0; k < 2; k++) { /* lane 2m: v[2k]'s lanes 2m, 2m+1; lane 2m+1: v[2k+1]'s */
        const __m256i u = _mm256_blend_epi32(v[2 * k], v[2 * k + 1], 0xAA), w = _mm256_blend_epi32(v[2 * k + 1], v[2 * k], 0xAA);
        a[k] = _mm256_add_epi32(u, _mm256_shuffle_epi32(w, _MM_SHUFFLE(2, 3, 0, 1)));
    }
    const __m256i u = _mm256_blend_epi32(a[0], a[1], 0xCC), w = _mm256_blend_epi32(a[1], a[0], 0xCC);
    return _mm256_add_epi32(u, _mm256_shuffle_epi32(w, _MM_SHUFFLE(1, 0, 3, 2)));
}
static inline __m256i og_sum8_epi32(const __m256i v[8]) {
    const __m256i b0 = og_sum4x2_epi32(v), b1 = og_sum4x2_epi32(v + 4);
    const __m256i u = _mm256_blend_epi32(b0, b1, 0xF0), w = _mm256_blend_epi32(b1, b0, 0xF0);
    return _mm256_add_epi32(u, _mm256_permute2x128_si256(w, w, 0x01));
}
/* Lanes 0-3: the sums of v[0..4) (lanes 4-7 zero): a row's last group of at most four. */
static inline __m256i og_sum4_epi32(const __m256i v[4]) {
    const __m256i b = og_sum4x2_epi32(v);
    return _mm256_zextsi128_si256(_mm_add_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1)));
}

/* Adds v_b = fma(-c_b, (float)S_b, a_b * (float)I_b) of the group of blocks b & ~7 ..
 * (I, S: their exact sums, lane j = block b0 + j) to lanes b0 .. b0 + 7. */
static inline __attribute__((always_inline)) void og_canon_add(__m256 acc[4], int64_t b, __m256i isums, __m256i ssums,
                                                                __m256 a, __m256 c, bool mins) {
    __m256 v = _mm256_mul_ps(a, _mm256_cvtepi32_ps(isums));
    if (mins) v = _mm256_fnmadd_ps(c, _mm256_cvtepi32_ps(ssums), v);
    acc[(b >> 3) & 3] = _mm256_add_ps(acc[(b >> 3) & 3], v);
}

/* Blocks per turn of a kernel's block loop (both orders): a group of eight, whose
 * canonical terms go to the lanes after the loop over its blocks. */
#define OG_CANON_GROUP 8

/* Slot j of a group: its block's I lanes and factor a. */
static inline __attribute__((always_inline)) void og_canon_put(og_canon8 *g, int j, __m256i isum, float a) {
    g->i[j] = isum;
    g->a[j] = a;
}

/* The sum of v's eight int32 lanes. */
static inline int32_t og_hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* Lanes j < cnt: the floats p[j], each written alone; zero beyond. One broadcast
 * load per float (a load the store of that float forwards to, where one vector
 * load over eight separate stores would wait for them all to reach the cache), then
 * blends: no shuffles. */
static inline __m256 og_first_ps(const float *p, int cnt) {
    __m256 v = _mm256_setzero_ps();
#define OG_SLOT(j) \
    if (cnt > (j)) v = _mm256_blend_ps(v, _mm256_broadcast_ss(p + (j)), 1 << (j));
    OG_SLOT(0) OG_SLOT(1) OG_SLOT(2) OG_SLOT(3) OG_SLOT(4) OG_SLOT(5) OG_SLOT(6) OG_SLOT(7)
#undef OG_SLOT
    return v;
}

/* The group of blocks b0 .. b0 + 7 (b0 a multiple of 8; blocks from nb on are
 * absent) is in its slots: v_b of each joins its lane. Absent slots (a row's last
 * group) count as a = c = 0 and zero sums, so +0, which leaves a lane as it was;
 * a last group of at most four blocks is summed as four.
 * mins: the type has S_b and c_b. */
static inline __attribute__((always_inline)) void og_canon_flush(og_canon8 *g, __m256 acc[4], int64_t b0, int64_t nb,
                                                                  bool mins) {
    const int cnt = nb - b0 < 8 ? (int)(nb - b0) : 8, top = cnt <= 4 ? 4 : 8; /* up to four: half the tree */
    for (int k = cnt; k < top; k++) g->i[k] = g->s[k] = _mm256_setzero_si256();
    const __m256i is = top == 4 ? og_sum4_epi32(g->i) : og_sum8_epi32(g->i);
    const __m256i ss = !mins ? _mm256_setzero_si256() : top == 4 ? og_sum4_epi32(g->s) : og_sum8_epi32(g->s);
    if (cnt == 8) /* mid-row: the stores have long reached the cache when the lanes need the sum */
        og_canon_add(acc, b0, is, ss, _mm256_loadu_ps(g->a), mins ? _mm256_loadu_ps(g->c) : _mm256_setzero_ps(), mins);
    else
        og_canon_add(acc, b0, is, ss, og_first_ps(g->a, cnt), mins ? og_first_ps(g->c, cnt) : _mm256_setzero_ps(), mins);
}

/* The butterfly of og_dot_f32_device over the 32 lanes acc[0..4): offset 16 adds
 * acc[0] + acc[2] and acc[1] + acc[3], offset 8 those two, then og_hsum256's
 * steps are offsets 4, 2 and 1. */
static inline float og_canon_finish(const __m256 acc[4]) {
    return og_hsum256(_mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3])));
}

/* The 32 IQ2_XXS grid bytes of the sub-block whose a0 word is a (og_quant_blocks.h):
 * four broadcast loads (load ports only) and three blends, which leaves the shuffle
 * port to the rest (eight inserts were the kernels' bottleneck, a vpgatherqq slower
 * still). */
static inline __m256i og_iq2_grid_bytes(uint32_t a) {
    const long long *G = (const long long *)og_iq2xxs_grid;
    const __m256i b0 = _mm256_set1_epi64x(G[a & 255]), b1 = _mm256_set1_epi64x(G[(a >> 8) & 255]);
    const __m256i b2 = _mm256_set1_epi64x(G[(a >> 16) & 255]), b3 = _mm256_set1_epi64x(G[a >> 24]);
    return _mm256_blend_epi32(_mm256_blend_epi32(b0, b1, 0x0C), _mm256_blend_epi32(b2, b3, 0xC0), 0xF0);
}
#endif

/* The tiled canonical kernels' unpacked weights (quant_tile_body.h): one k-quant
 * block (256 elements) of a tile of OG_TILE_ROWS weight rows, rows in the lanes. */
#define OG_TILE_ROWS 32
#define OG_TILE_ACT 16 /* activation rows whose canonical lanes are kept at once */
typedef struct og_tile_block {
    uint8_t w[64][2][64];  /* [k4][half][row % 16][4]: elements 4k4 .. 4k4 + 3 of rows 16 half + j, as u8 */
    int32_t sc[16][2][16]; /* scale of the 16-element chunk c of each row (int16 low word, or int32: per type) */
    int32_t bp[8][2][16];  /* factors of the Q8_K bsum pairs (2t, 2t + 1): int16 words (lo, hi) */
    float dx[2][16], dm[2][16]; /* d and dmin of each row (fp16 to float) */
} og_tile_block;
/* work bytes: every block of a tile, the canonical lanes of OG_TILE_ACT x 32 pairs,
 * and 64 for alignment */
#define OG_TILE_WORK(nb) ((size_t)(nb) * sizeof(og_tile_block) + (size_t)OG_TILE_ACT * 2 * 32 * 64 + 64)

/* Fill the entries a tier implements; leave others untouched. */
void og_kernels_fill_avx2(og_kernels *k);
void og_kernels_fill_avx512(og_kernels *k);
/* CALL(NV) with NV the constant 1 .. 8 that nv names (8 for anything larger),
 * so a kernel's register array of NV vectors is sized at compile time. */
#define OG_SWITCH_NV8(nv, CALL)                                                                            \
    switch (nv) {                                                                                          \
    case 1: CALL(1); break;                                                                                \
    case 2: CALL(2); break;                                                                                \
    case 3: CALL(3); break;                                                                                \
    case 4: CALL(4); break;                                                                                \
    case 5: CALL(5); break;                                                                                \
    case 6: CALL(6); break;                                                                                \
    case 7: CALL(7); break;                                                                                \
    default: CALL(8); break;                                                                               \
    }

/* Attention's tiled kernels (attn_avx2.c, attn_avx512.c). */
void og_kernels_fill_attn_avx2(og_kernels *k);
void og_kernels_fill_attn_avx512(og_kernels *k);
/* The AVX-512 tier's kernels that take GFNI and VBMI too (quant_avx512_gfni.c). */
void og_kernels_fill_avx512_gfni(og_kernels *k);
/* The IQ2_XXS and MXFP4 entries of the tiers (quant_iq_avx2.c, quant_iq_avx512.c). */
void og_kernels_fill_iq_avx2(og_kernels *k);
void og_kernels_fill_iq_avx512(og_kernels *k);
void og_kernels_fill_tile_avx512(og_kernels *k);
void og_kernels_fill_tile_avx2(og_kernels *k);    /* quant_tile_avx2.c: vpmaddubsw */
void og_kernels_fill_tile_avxvnni(og_kernels *k); /* quant_tile_avxvnni.c: AVX-VNNI */

#endif
