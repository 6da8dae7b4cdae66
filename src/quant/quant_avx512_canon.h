/* Shared by the AVX-512 kernel files (quant_avx512.c; quant_avx512_gfni.c, built
 * with GFNI and VBMI too): the canonical order with sixteen-lane block sums, and the
 * Q3_K body, whose weight and scale unpacking takes GFNI / VBMI instructions where
 * the including file is built with them (__GFNI__, __AVX512VBMI__) and the
 * AVX-512 BW ones otherwise: the same integers, so the same bits. Not public. */
#ifndef OG_QUANT_AVX512_CANON_H
#define OG_QUANT_AVX512_CANON_H

#include "quant_internal.h"

#include <immintrin.h>
#include <string.h>

#define FP16(x) _cvtsh_ss(x) /* F16C: one instruction, inlined */
#define PF_DIST OG_PREFETCH_DIST

/* Kernels written as one body for NY activation rows (NY = 1: vec_dot; NY = 4:
 * vec_dot4, one pass over the weights for four rows): every float operation of
 * row i is the same in both, so vec_dot4 gives vec_dot's bits for each row. */
#define NYMAX 4

/* og_canon8 with 16-lane I slots: the k-quant kernels' block sums as they come. */
typedef struct canon16 {
    __m512i i[8];
    __m256i s[8];
    float a[8], c[8];
} canon16;

/* og_sum8_epi32 of sixteen-lane vectors: the same blend-and-one-shuffle steps at
 * 32 and 64 bits, then at 128 bits across the two, then the 256-bit halves. */
/* The first two steps for v[0..4): 128-bit unit q, lane j: v[j]'s lanes in unit q. */
static inline __m512i sum4x4_epi32_512(const __m512i *v) {
    __m512i a[2];
    for (int k = 0; k < 2; k++) {
        const __m512i u = _mm512_mask_blend_epi32(0xAAAA, v[2 * k], v[2 * k + 1]);
        const __m512i w = _mm512_mask_blend_epi32(0xAAAA, v[2 * k + 1], v[2 * k]);
        a[k] = _mm512_add_epi32(u, _mm512_shuffle_epi32(w, _MM_PERM_CDAB));
    }
    const __m512i u = _mm512_mask_blend_epi32(0xCCCC, a[0], a[1]), w = _mm512_mask_blend_epi32(0xCCCC, a[1], a[0]);
    return _mm512_add_epi32(u, _mm512_shuffle_epi32(w, _MM_PERM_BADC));
}
/* og_sum4_epi32 of sixteen-lane vectors. */
static inline __m256i sum4_epi32_512(const __m512i v[4]) {
    const __m512i b = sum4x4_epi32_512(v);
    const __m256i h = _mm256_add_epi32(_mm512_castsi512_si256(b), _mm512_extracti64x4_epi64(b, 1));
    return _mm256_zextsi128_si256(_mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1)));
}
static inline __m256i sum8_epi32_512(const __m512i v[8]) {
    const __m512i b[2] = {sum4x4_epi32_512(v), sum4x4_epi32_512(v + 4)};
    /* units: v0-3 of units 0+1, v4-7 of 0+1, v0-3 of 2+3, v4-7 of 2+3 */
    const __m512i u = _mm512_mask_blend_epi32(0xF0F0, b[0], b[1]), w = _mm512_mask_blend_epi32(0xF0F0, b[1], b[0]);
    const __m512i t = _mm512_add_epi32(u, _mm512_shuffle_i32x4(w, w, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm256_add_epi32(_mm512_castsi512_si256(t), _mm512_extracti64x4_epi64(t, 1));
}

/* og_canon_put and og_canon_flush for canon16 (S lanes and c: types with mins). */
static inline __attribute__((always_inline)) void canon_put16(canon16 *g, int j, __m512i isum, __m256i ssum, float a, float c,
                                                               bool mins) {
    g->i[j] = isum;
    g->a[j] = a;
    if (mins) g->s[j] = ssum, g->c[j] = c;
}
static inline __attribute__((always_inline)) void canon_flush16(canon16 *g, __m256 acc[4], int64_t b0, int64_t nb, bool mins) {
    const int cnt = nb - b0 < 8 ? (int)(nb - b0) : 8, top = cnt <= 4 ? 4 : 8; /* as og_canon_flush */
    for (int k = cnt; k < top; k++) {
        g->i[k] = _mm512_setzero_si512();
        g->s[k] = _mm256_setzero_si256();
    }
    const __m256i is = top == 4 ? sum4_epi32_512(g->i) : sum8_epi32_512(g->i);
    const __m256i ss = !mins ? _mm256_setzero_si256() : top == 4 ? og_sum4_epi32(g->s) : og_sum8_epi32(g->s);
    if (cnt == 8)
        og_canon_add(acc, b0, is, ss, _mm256_loadu_ps(g->a), mins ? _mm256_loadu_ps(g->c) : _mm256_setzero_ps(), mins);
    else
        og_canon_add(acc, b0, is, ss, og_first_ps(g->a, cnt), mins ? og_first_ps(g->c, cnt) : _mm256_setzero_ps(), mins);
}

/* A block's sixteen I lanes, with factor a, of a type without mins: into canonical
 * slot j, or the fork's lane fma. */
static inline __attribute__((always_inline)) void block_done16(bool canon, canon16 *g, int j, __m512 *acc, __m512i isum,
                                                                float a) {
    if (canon) canon_put16(g, j, isum, _mm256_setzero_si256(), a, 0, false);
    else *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(a), *acc);
}

/* ---- four weight rows against one activation row (og_kernels.vec_dot_r4_canonical) ---- */

/* How far ahead (bytes) a row's blocks are prefetched: the rows are read side by
 * side, so the bytes to fetch next are the same blocks of later groups of four
 * rows (the rows of a matrix are contiguous); at least OG_PREFETCH_DIST. */
static inline size_t r4_ahead(size_t stride) {
    const size_t four = 4 * stride;
    return four >= PF_DIST || !four ? four : four * ((PF_DIST + four - 1) / four);
}

/* The step of the canonical trees that adds the 128-bit units of b0 and b1 in
 * pairs: unit 0 = b0's units 0 + 1, unit 1 = b1's 1 + 0, unit 2 = b0's 2 + 3, unit 3
 * = b1's 3 + 2 (with sum4x4_epi32_512 before it, og_sum8_epi32 in each 256-bit half). */
static inline __m512i r4_units(__m512i b0, __m512i b1) {
    /* unit 0: blocks 0-3 (units 0 + 1 of b), unit 1: 4-7 (0 + 1), units 2, 3: the same of units 2 + 3 */
    const __m512i u = _mm512_mask_blend_epi32(0xF0F0, b0, b1), w = _mm512_mask_blend_epi32(0xF0F0, b1, b0);
    return _mm512_add_epi32(u, _mm512_shuffle_i32x4(w, w, _MM_SHUFFLE(2, 3, 0, 1)));
}
/* s[0..4): the four rows' butterflies at once. t[p]: the offsets 16 and 8 of rows
 * 2p and 2p + 1 (lanes 0-7, 8-15), as og_canon_finish adds them; the later offsets
 * run on all four rows in one register (128-bit unit r: row r), each lane's
 * additions og_hsum256's (lane l + lane l + 4, then + 2, then + 1). */
static inline void r4_butterfly(__m512 t0, __m512 t1, float *s) {
    const __m512 a = _mm512_shuffle_f32x4(t0, t1, _MM_SHUFFLE(2, 0, 2, 0)), b = _mm512_shuffle_f32x4(t0, t1, _MM_SHUFFLE(3, 1, 3, 1));
    __m512 c = _mm512_add_ps(a, b);                                      /* offset 4 */
    c = _mm512_add_ps(c, _mm512_permute_ps(c, _MM_SHUFFLE(1, 0, 3, 2))); /* offset 2 */
    c = _mm512_add_ps(c, _mm512_permute_ps(c, _MM_SHUFFLE(2, 3, 0, 1))); /* offset 1 */
    _mm_storeu_ps(s, _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0), c)));
}
#define OG_NO_DMIN(xb) ((void)(xb), (uint16_t)0)
#define OG_DMIN(xb) ((xb)->dmin)

/* ---- four rows, two rows per register ------------------------------------------
 * The k-quants' four-row kernels (og_kernels.vec_dot_r4_canonical): rows A and B of
 * a pair share one register per block, A's sums in int32 lanes 0-1 and B's in 2-3
 * of every 128-bit unit, so a group of eight blocks of four rows goes through two
 * trees half as long as eight single rows' (r4p_sum) and its canonical float
 * operations run on sixteen (row, block) pairs per instruction. Q3_K and Q6_K
 * (sums of four u y products packed to int16, times the sub-blocks' scales by
 * vpdpwssd): the offset of q = u - o is taken off before the packing, in the
 * vpdpbusd's accumulator -o (sums of four y) (one per activation block, for every
 * row), and packs(p_A, p_B) puts the two rows in those lanes (r4p_isum); Q4_K and
 * Q5_K likewise with their chunks' scales; Q2_K by one blend step of the two rows'
 * vpdpbusd chains. Types with mins: the pair's S lanes in one register (A's eight,
 * then B's). The lanes of a pair's group come out as unit u: [A 2u, A 2u + 1, B 2u,
 * B 2u + 1] (r4p_pos); the factors and accumulators keep that order and the
 * butterfly starts from the rows' order (r4p_finish). The same integers and the
 * same float operations per (row, block) as the single-row kernels: the same bits. */
typedef struct canon_r4p {
    __m512i i[2][8];     /* [row pair][slot] */
    __m512i s[2][8];     /* types with mins: [row pair][slot], A's eight S lanes, then B's */
    uint16_t d[2][16];   /* fp16 d of [row pair][r4p_pos] */
    uint16_t m[2][16];   /* fp16 dmin at the same places */
    float dy[16];        /* dy at r4p_pos of both rows */
    __m512 acc[2][4];
} canon_r4p;
/* The lane of block k of a group, row r (0: A, 1: B) of a pair. */
static inline int r4p_pos(int r, int k) { return 4 * (k >> 1) + 2 * r + (k & 1); }

/* The int16 index of the scales of packs(p_A, p_B) for register j of a block (the
 * scales of A in words 0-15 of s16, B's in 16-31): unit L, words 0-3 A's scale of
 * sub-block 4j + L, words 4-7 B's. */
static inline __m512i r4p_sidx(int j) {
    int16_t ix[32];
    for (int w = 0; w < 32; w++) ix[w] = (int16_t)((w % 8 < 4 ? 0 : 16) + 4 * j + w / 8);
    return _mm512_loadu_si512((const void *)ix);
}
/* The block of rows A and B (u: the u8 weights of elements 64j.., sA, sB: the
 * sixteen scales as int16) against y, its offset sums noff[j] (-o times the sums of
 * four y): one register of both rows' I lanes. */
static inline __attribute__((always_inline)) __m512i r4p_isum(const __m512i uA[4], const __m512i uB[4], __m256i sA, __m256i sB,
                                                               const __m512i sidx[4], const __m512i noff[4], const og_block_q8_K *y) {
    const __m512i s16 = _mm512_inserti64x4(_mm512_castsi256_si512(sA), sB, 1);
    __m512i acc = _mm512_setzero_si512();
    #pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        const __m512i yj = _mm512_loadu_si512(y->qs + 64 * j);
        const __m512i pA = _mm512_dpbusd_epi32(noff[j], uA[j], yj), pB = _mm512_dpbusd_epi32(noff[j], uB[j], yj);
        acc = _mm512_dpwssd_epi32(acc, _mm512_packs_epi32(pA, pB), _mm512_permutexvar_epi16(sidx[j], s16));
    }
    return acc;
}
/* noff[j] = -o * (the sums of four of y's elements 64j ..). */
static inline __attribute__((always_inline)) void r4p_offsets(int o, const og_block_q8_K *y, __m512i noff[4]) {
    for (int j = 0; j < 4; j++)
        noff[j] = _mm512_sub_epi32(_mm512_setzero_si512(),
                                   _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8((char)o), _mm512_loadu_si512(y->qs + 64 * j)));
}

/* The sums of a pair's group: 8 registers (slots) -> unit u: [A 2u, A 2u + 1, B 2u, B 2u + 1]. */
static inline __attribute__((always_inline)) __m512i r4p_sum(const __m512i *v, bool half) {
    __m512i x[4];
    for (int k = 0; k < (half ? 2 : 4); k++) { /* lanes (0 + 1), (2 + 3) of each unit: [A j, A k, B j, B k] */
        const __m512i u = _mm512_mask_blend_epi32(0xAAAA, v[2 * k], v[2 * k + 1]), w = _mm512_mask_blend_epi32(0xAAAA, v[2 * k + 1], v[2 * k]);
        x[k] = _mm512_add_epi32(u, _mm512_shuffle_epi32(w, _MM_PERM_CDAB));
    }
    const __m512i z1 = r4_units(x[0], x[1]), z2 = half ? _mm512_setzero_si512() : r4_units(x[2], x[3]);
    const __m512i u = _mm512_mask_blend_epi32(0xFF00, z1, z2), w = _mm512_mask_blend_epi32(0xFF00, z2, z1);
    return _mm512_add_epi32(u, _mm512_shuffle_i32x4(w, w, _MM_SHUFFLE(1, 0, 3, 2)));
}

static inline __attribute__((always_inline)) void r4p_group(canon_r4p *g, int64_t b0, int cnt, bool mins) {
    const int top = cnt <= 4 ? 4 : 8;
    const __m512i z = _mm512_setzero_si512();
    __mmask16 m = 0xFFFF;
    if (cnt < 8) {
        m = 0;
        for (int k = 0; k < cnt; k++) m |= (__mmask16)(1u << r4p_pos(0, k) | 1u << r4p_pos(1, k));
    }
    const __m512 dy = _mm512_maskz_loadu_ps(m, g->dy);
    for (int p = 0; p < 2; p++) {
        __m512i v[8];
        for (int k = 0; k < top; k++) v[k] = k < cnt ? g->i[p][k] : z;
        const __m512i is = r4p_sum(v, top == 4);
        const __m512 a = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, g->d[p])), dy);
        __m512 val = _mm512_mul_ps(a, _mm512_cvtepi32_ps(is));
        if (mins) {
            for (int k = 0; k < top; k++) v[k] = k < cnt ? g->s[p][k] : z;
            /* og_sum8_epi32 in each 256-bit half (lanes 0-7 A's S, 8-15 B's), then to r4p_pos */
            const __m512i ss = r4_units(sum4x4_epi32_512(v), top == 4 ? z : sum4x4_epi32_512(v + 4));
            const __m512i sp = _mm512_permutexvar_epi32(_mm512_set_epi32(15, 14, 7, 6, 13, 12, 5, 4, 11, 10, 3, 2, 9, 8, 1, 0), ss);
            const __m512 c = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, g->m[p])), dy);
            val = _mm512_fnmadd_ps(c, _mm512_cvtepi32_ps(sp), val);
        }
        g->acc[p][(b0 >> 3) & 3] = _mm512_add_ps(g->acc[p][(b0 >> 3) & 3], val);
    }
}
static inline __attribute__((always_inline)) void r4p_finish(const canon_r4p *g, float *s) {
    /* lane l of row A: block l's place (r4p_pos(0, l)); lane 8 + l: row B's */
    const __m512i back = _mm512_set_epi32(15, 14, 11, 10, 7, 6, 3, 2, 13, 12, 9, 8, 5, 4, 1, 0);
    __m512 t[2];
    for (int p = 0; p < 2; p++)
        t[p] = _mm512_permutexvar_ps(back, _mm512_add_ps(_mm512_add_ps(g->acc[p][0], g->acc[p][2]), _mm512_add_ps(g->acc[p][1], g->acc[p][3])));
    r4_butterfly(t[0], t[1], s);
}

/* The body of the four-row kernel of a type BT with offset o (0: none) and, where
 * mins, mins: PAIR(xa, xb, yb, noff, &ss) returns rows A and B's block (xa, xb)
 * against yb in one register (r4p_isum's lanes) and, mins, sets ss to their S
 * lanes (A's eight, then B's); DMIN(xb) is a block's fp16 dmin. */
#define OG_CANON_R4P_BODY(BT, o, mins, PAIR, DMIN)                                                                  \
    do {                                                                                                            \
        const og_block_q8_K *y_ = vy;                                                                               \
        const int64_t nb_ = n / OG_QK_K;                                                                            \
        const size_t ahead_ = r4_ahead(stride);                                                                     \
        canon_r4p g_;                                                                                               \
        for (int p_ = 0; p_ < 2; p_++)                                                                              \
            for (int q_ = 0; q_ < 4; q_++) g_.acc[p_][q_] = _mm512_setzero_ps();                                    \
        for (int64_t b0_ = 0; b0_ < nb_; b0_ += OG_CANON_GROUP) {                                                   \
            const int cnt_ = nb_ - b0_ < 8 ? (int)(nb_ - b0_) : 8;                                                  \
            for (int slot_ = 0; slot_ < cnt_; slot_++) {                                                            \
                const int64_t b_ = b0_ + slot_;                                                                     \
                const og_block_q8_K *yb = y_ + b_;                                                                  \
                g_.dy[r4p_pos(0, slot_)] = g_.dy[r4p_pos(1, slot_)] = yb->d;                                        \
                __m512i noff_[4];                                                                                   \
                if (o) r4p_offsets(o, yb, noff_);                                                                   \
                else noff_[0] = noff_[1] = noff_[2] = noff_[3] = _mm512_setzero_si512();                            \
                _Pragma("GCC unroll 2") for (int p_ = 0; p_ < 2; p_++) {                                            \
                    const BT *xa = (const BT *)((const uint8_t *)vx + (size_t)(2 * p_) * stride) + b_;              \
                    const BT *xb = (const BT *)((const uint8_t *)xa + stride);                                      \
                    og_prefetch_span(xa, ahead_, sizeof *xa);                                                       \
                    og_prefetch_span(xb, ahead_, sizeof *xb);                                                       \
                    __m512i ss_ = _mm512_setzero_si512();                                                           \
                    g_.i[p_][slot_] = PAIR(xa, xb, yb, noff_, &ss_);                                                \
                    g_.d[p_][r4p_pos(0, slot_)] = xa->d;                                                            \
                    g_.d[p_][r4p_pos(1, slot_)] = xb->d;                                                            \
                    if (mins) {                                                                                     \
                        g_.s[p_][slot_] = ss_;                                                                      \
                        g_.m[p_][r4p_pos(0, slot_)] = DMIN(xa);                                                     \
                        g_.m[p_][r4p_pos(1, slot_)] = DMIN(xb);                                                     \
                    }                                                                                               \
                }                                                                                                   \
            }                                                                                                       \
            if (cnt_ == 8) r4p_group(&g_, b0_, 8, mins);                                                            \
            else r4p_group(&g_, b0_, cnt_, mins);                                                                   \
        }                                                                                                           \
        r4p_finish(&g_, s);                                                                                         \
    } while (0)

/* ---- Q3_K ------------------------------------------------------------------------ */

/* Built with GFNI and VBMI (quant_avx512_gfni.c): the Q3_K unpacking and the IQ2_XXS
 * sign masks below use them. */
#if defined(__GFNI__) && defined(__AVX512VBMI__)
#define OG_AVX512_GFNI 1
#else
#define OG_AVX512_GFNI 0
#endif

/* Q3_K: u = q2 + 4 * hbit in [0, 7] and q = u - 4; 4 sum_s sc[s] bsums[s] is
 * subtracted once per block. Half h of the 2-bit quants is broadcast to both
 * 256-bit halves: register j = 2h + m holds the 64 consecutive elements 128h + 64m
 * .., the field at bits 4m (low 256 bits) and 4m + 2 (high) of each byte, its high
 * bit at bit kk = 4h + 2m (low), 4h + 2m + 1 (high) of the hmask byte; 128-bit lane
 * L = sub-block 4j + L. The sums (|p| <= 3584) pack to int16 for vpdpwssd with the
 * signed scales. */
#if OG_AVX512_GFNI
/* The sixteen scales minus 32 as int8 lanes: vpmultishiftqb brings scale s's low
 * nibble (byte s % 8, bits 4 (s / 8)) to bits 0-3 of lane s, and its top two bits
 * (byte 8 + s % 4, bits 2 (s / 4)) to bits 4-5 of another; a ternary-logic merge,
 * then one affine map over GF(2) (gf2p8affineqb: out = M x ^ b per byte) flips bit
 * 5 and copies it to bits 6-7, which is v - 32 in two's complement for v < 64.
 * Four vector operations where og_q3_scales' shifts take ten. */
static inline __m128i q3_scales_vec(const uint8_t *q) {
    uint64_t lo;
    uint32_t hi;
    memcpy(&lo, q, 8);
    memcpy(&hi, q + 8, 4);
    const __m128i ctl_lo = _mm_setr_epi8(0, 8, 16, 24, 32, 40, 48, 56, 4, 12, 20, 28, 36, 44, 52, 60);
    /* bit offset 8 (s % 4) + 2 (s / 4) - 4 (mod 64) of the 4 bytes repeated */
    const __m128i ctl_hi = _mm_setr_epi8(60, 4, 12, 20, 62, 6, 14, 22, 0, 8, 16, 24, 2, 10, 18, 26);
    const __m128i a = _mm_multishift_epi64_epi8(ctl_lo, _mm_set1_epi64x((long long)lo));
    const __m128i b = _mm_multishift_epi64_epi8(ctl_hi, _mm_set1_epi32((int)hi));
    const __m128i v = _mm_ternarylogic_epi32(a, b, _mm_set1_epi8(0x0F), 0xE4); /* bits 0-3 of a, the rest of b */
    /* row k of M (byte 7 - k): output bits 0-4 = input bits 0-4, bits 5-7 = input bit 5; b = 0xE0 */
    return _mm_gf2p8affine_epi64_epi8(v, _mm_set1_epi64x(0x0102040810202020ll), 0xE0);
}
#else
/* og_q3_scales with vector ops only (lane s = scale s - 32): the 12 bytes by a masked
 * load (nothing read past the field), low nibbles of bytes 0-7 then their high
 * nibbles, and the two top bits of scale s from byte 8 + s % 4 shifted by 2 (s / 4)
 * (two neighbouring scales share their shift: one vpsrlvw). */
static inline __m128i q3_scales_vec(const uint8_t *q) {
    const __m128i v = _mm_maskz_loadu_epi8(0x0FFF, q), m4 = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_unpacklo_epi64(_mm_and_si128(v, m4), _mm_and_si128(_mm_srli_epi16(v, 4), m4));
    const __m128i top = _mm_shuffle_epi8(v, _mm_setr_epi8(8, 9, 10, 11, 8, 9, 10, 11, 8, 9, 10, 11, 8, 9, 10, 11));
    const __m128i hi = _mm_and_si128(_mm_srlv_epi16(top, _mm_setr_epi16(0, 0, 2, 2, 4, 4, 6, 6)), _mm_set1_epi8(3));
    return _mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi16(hi, 4)), _mm_set1_epi8(32));
}
#endif

/* The constants of q3_unpack. GFNI: for register j, sel keeps the 2-bit field's two
 * bits of the qs byte and takes every other bit from the hmask byte (shifted left by
 * 4 for j = 0, right by 4 for j = 3, so the high bit never lands on the field's), and
 * mat maps the field to bits 0-1 and the high bit to bit 2, zero above: u in one
 * ternary-logic and one affine operation instead of a shift, a mask, a test and a
 * masked add. */
typedef struct q3_consts {
#if OG_AVX512_GFNI
    __m512i sel[2], mat[4];
#else
    __m512i shift[2], hbit[4], m3, four;
#endif
    __m512i sidx[2]; /* int16 index of packs(p_m0, p_m1) for half h, 128-bit lane L: 4 x (8h + L), 4 x (8h + 4 + L) */
} q3_consts;

static inline q3_consts q3_consts_make(void) {
    q3_consts c;
#define Q(a, b) b, b, b, b, a, a, a, a
    c.sidx[0] = _mm512_set_epi16(Q(3, 7), Q(2, 6), Q(1, 5), Q(0, 4));
    c.sidx[1] = _mm512_set_epi16(Q(11, 15), Q(10, 14), Q(9, 13), Q(8, 12));
#undef Q
#if OG_AVX512_GFNI
    for (int m = 0; m < 2; m++)
        c.sel[m] = _mm512_inserti64x4(_mm512_set1_epi8((char)(3 << (4 * m))), _mm256_set1_epi8((char)(3 << (4 * m + 2))), 1);
    for (int j = 0; j < 4; j++) {
        long long mt[2];
        for (int half = 0; half < 2; half++) {
            const int f = 4 * (j % 2) + 2 * half, kk = 4 * (j / 2) + 2 * (j % 2) + half + (j == 0 ? 4 : j == 3 ? -4 : 0);
            mt[half] = (long long)((1ull << f) << 56 | (1ull << (f + 1)) << 48 | (1ull << kk) << 40);
        }
        c.mat[j] = _mm512_inserti64x4(_mm512_set1_epi64(mt[0]), _mm256_set1_epi64x(mt[1]), 1);
    }
#else
    for (int m = 0; m < 2; m++)
        c.shift[m] = _mm512_inserti64x4(_mm512_set1_epi16((short)(4 * m)), _mm256_set1_epi16((short)(4 * m + 2)), 1);
    for (int j = 0; j < 4; j++) {
        const int kk = 4 * (j / 2) + 2 * (j % 2);
        c.hbit[j] = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << kk)), _mm256_set1_epi8((char)(1 << (kk + 1))), 1);
    }
    c.m3 = _mm512_set1_epi8(3);
    c.four = _mm512_set1_epi8(4);
#endif
    return c;
}

/* u[j] (u8 in [0, 7]) of the block's elements 64j .. 64j + 63. */
static inline __attribute__((always_inline)) void q3_unpack(const q3_consts *c, const og_block_q3_K *x, __m512i u[4]) {
    const __m512i hm = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)x->hmask));
#if OG_AVX512_GFNI
    const __m512i hv[4] = {_mm512_slli_epi16(hm, 4), hm, hm, _mm512_srli_epi16(hm, 4)};
#endif
    #pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x->qs + 32 * h)));
        #pragma GCC unroll 2
        for (int m = 0; m < 2; m++) {
            const int j = 2 * h + m;
#if OG_AVX512_GFNI
            u[j] = _mm512_gf2p8affine_epi64_epi8(_mm512_ternarylogic_epi32(q, hv[j], c->sel[m], 0xE4), c->mat[j], 0);
#else
            const __m512i q2 = _mm512_and_si512(_mm512_srlv_epi16(q, c->shift[m]), c->m3);
            u[j] = _mm512_mask_add_epi8(q2, _mm512_test_epi8_mask(hm, c->hbit[j]), q2, c->four);
#endif
        }
    }
}

/* A Q3_K block's weights as the dot needs them: u (q3_unpack), the sixteen scales
 * as vpdpwssd multipliers of each half and -4 sc for the bsums term. */
typedef struct q3_w {
    __m256i s16m4;
    __m512i sc[2], u[4];
} q3_w;
static inline __attribute__((always_inline)) void q3_K_unpack(const q3_consts *c, const og_block_q3_K *x, q3_w *w) {
    const __m256i s16 = _mm256_cvtepi8_epi16(q3_scales_vec(x->scales));
    /* -4 sc[s] per sub-block, for the bsums term (|.| <= 128 in int16) */
    w->s16m4 = _mm256_mullo_epi16(s16, _mm256_set1_epi16(-4));
    for (int h = 0; h < 2; h++) w->sc[h] = _mm512_permutexvar_epi16(c->sidx[h], _mm512_castsi256_si512(s16)); /* scales of half h */
    q3_unpack(c, x, w->u);
}
/* The block's sixteen I lanes against y. */
static inline __attribute__((always_inline)) __m512i q3_K_isum(const q3_w *w, const og_block_q8_K *y) {
    /* -4 sum_s sc[s] bsums[s] in lanes 0-7 (the upper lanes zero) */
    __m512i isum = _mm512_zextsi256_si512(_mm256_madd_epi16(w->s16m4, _mm256_loadu_si256((const __m256i *)y->bsums)));
    #pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        __m512i p0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w->u[2 * h], _mm512_loadu_si512(y->qs + 128 * h));
        __m512i p1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w->u[2 * h + 1], _mm512_loadu_si512(y->qs + 128 * h + 64));
        isum = _mm512_dpwssd_epi32(isum, _mm512_packs_epi32(p0, p1), w->sc[h]);
    }
    return isum;
}

static inline __attribute__((always_inline)) void q3_K_dot_n(bool canon, int ny, int64_t n, float *s, const void *vx,
                                                              const void *const *vy) {
    const og_block_q3_K *x = vx;
    const og_block_q8_K *const *y = (const og_block_q8_K *const *)vy;
    const int64_t nb = n / OG_QK_K;
    __m512 acc[NYMAX];
    __m256 cacc[NYMAX][4];
    canon16 g[NYMAX];
    #pragma GCC unroll 4
    for (int i = 0; i < ny; i++) acc[i] = _mm512_setzero_ps(), cacc[i][0] = cacc[i][1] = cacc[i][2] = cacc[i][3] = _mm256_setzero_ps();
    const q3_consts c = q3_consts_make();
    for (int64_t b0 = 0; b0 < nb; b0 += OG_CANON_GROUP) {
        for (int slot = 0; slot < OG_CANON_GROUP && b0 + slot < nb; slot++) {
            const int64_t b = b0 + slot;
            og_prefetch_span(x + b, PF_DIST, sizeof *x);
            q3_w w;
            q3_K_unpack(&c, &x[b], &w);
            const float d = FP16(x[b].d);
            #pragma GCC unroll 4
            for (int i = 0; i < ny; i++) block_done16(canon, &g[i], slot, &acc[i], q3_K_isum(&w, &y[i][b]), d * y[i][b].d);
        }
        if (canon)
            for (int i = 0; i < ny; i++) canon_flush16(&g[i], cacc[i], b0, nb, false);
    }
    #pragma GCC unroll 4
    for (int i = 0; i < ny; i++) s[i] = canon ? og_canon_finish(cacc[i]) : _mm512_reduce_add_ps(acc[i]);
}

/* og_vec_dot_r4_fn of Q3_K: four weight rows, one activation row, the canonical
 * order, two rows per register (OG_CANON_R4P_BODY; u = q2 + 4h, offset 4). */
static inline __attribute__((always_inline)) __m512i q3_K_pair(const q3_consts *c, const __m512i sidx[4], const og_block_q3_K *xa,
                                                                const og_block_q3_K *xb, const og_block_q8_K *y, const __m512i noff[4]) {
    __m512i ua[4], ub[4];
    q3_unpack(c, xa, ua);
    q3_unpack(c, xb, ub);
    return r4p_isum(ua, ub, _mm256_cvtepi8_epi16(q3_scales_vec(xa->scales)), _mm256_cvtepi8_epi16(q3_scales_vec(xb->scales)), sidx,
                    noff, y);
}
static inline __attribute__((always_inline)) void q3_K_r4_body(int64_t n, float *s, const void *vx, size_t stride, const void *vy) {
    const q3_consts c = q3_consts_make();
    __m512i sidx[4];
    for (int j = 0; j < 4; j++) sidx[j] = r4p_sidx(j);
#define Q3P(xa, xb, yb, noff, ss) q3_K_pair(&c, sidx, xa, xb, yb, noff)
    OG_CANON_R4P_BODY(og_block_q3_K, 4, false, Q3P, OG_NO_DMIN);
#undef Q3P
}

/* ---- IQ2_XXS and MXFP4 (files built with BMI2: pdep, or GFNI and VBMI) ----------- */
#if defined(__BMI2__)
/* A kernel's accumulators for ny rows: the fork's lanes, the canonical order's 32
 * lanes and its group of eight blocks in waiting. */
typedef struct iq_acc {
    __m512 acc[NYMAX];
    __m256 cacc[NYMAX][4];
    og_canon8 g[NYMAX];
} iq_acc;
static inline __attribute__((always_inline)) void iq_acc_zero(iq_acc *r, int ny) {
    for (int i = 0; i < ny; i++) {
        r->acc[i] = _mm512_setzero_ps();
        r->cacc[i][0] = r->cacc[i][1] = r->cacc[i][2] = r->cacc[i][3] = _mm256_setzero_ps();
    }
}

/* ---- IQ2_XXS ------------------------------------------------------------------ */

/* Bit 8l + j set when weight j of group l of the sub-block pair (a1 words p, q) is
 * negative: pdep spreads the eight 7-bit fields one per byte, the byte's parity
 * gives bit 7 (the count of negatives is even). */
#if !OG_AVX512_GFNI
static inline __mmask64 iq2_neg_mask(uint32_t p, uint32_t q) {
    const uint64_t f = (uint64_t)(p & 0x0fffffffu) | (uint64_t)(q & 0x0fffffffu) << 28;
    const uint64_t v = _pdep_u64(f, 0x7f7f7f7f7f7f7f7fULL);
    uint64_t t = (v ^ (v >> 4)) & 0x0f0f0f0f0f0f0f0fULL;
    t ^= t >> 2;
    t ^= t >> 1;
    return (__mmask64)(v | (t & 0x0101010101010101ULL) << 7);
}
#endif

/* The 64 grid bytes of the sub-block pair whose a0 words are p and q. */
static inline __m512i iq2_grid_pair(uint32_t p, uint32_t q) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(og_iq2_grid_bytes(p)), og_iq2_grid_bytes(q), 1);
}

#define Q4(g) g, g, g, g
static inline __attribute__((always_inline)) void iq2_xxs_n(bool canon, int ny, int64_t n, float *s, const void *vx,
                                                             const void *const *vy) {
    const og_block_iq2_xxs *x = vx;
    const og_block_q8_K *const *y = (const og_block_q8_K *const *)vy;
    const int64_t nb = n / OG_QK_K;
    iq_acc r;
    iq_acc_zero(&r, ny);
#if OG_AVX512_GFNI
    /* the grid as 2-bit levels (og_iq2xxs_grid2), 64 entries per pair of registers */
    __m512i grid2[8];
    for (int t = 0; t < 8; t++) grid2[t] = _mm512_loadu_si512((const void *)(og_iq2xxs_grid2 + 32 * t));
    /* word 4 sb + g: byte g of sub-block sb's a0 word (qs byte 8 sb + g), its grid index */
    uint8_t gsel[64];
    for (int w = 0; w < 32; w++) gsel[2 * w] = gsel[2 * w + 1] = (uint8_t)(8 * (w / 4) + w % 4);
    const __m512i gidx = _mm512_loadu_si512((const void *)gsel);
#endif
    for (int64_t b0 = 0; b0 < nb; b0 += OG_CANON_GROUP) {
        for (int j = 0; j < OG_CANON_GROUP && b0 + j < nb; j++) {
            const int64_t b = b0 + j;
            og_prefetch_span(x + b, PF_DIST, sizeof *x);
            uint32_t a[16];
            memcpy(a, x[b].qs, 64);
#if OG_AVX512_GFNI
            /* the block's 32 grid points at once, word 4 sb + g: four 64-entry word permutes,
             * then index bits 6 and 7 choose among them */
            __m512i levels;
            {
                const __m512i gi = _mm512_maskz_permutexvar_epi8(0x5555555555555555ull, gidx, _mm512_loadu_si512((const void *)x[b].qs));
                const __mmask32 k6 = _mm512_test_epi16_mask(gi, _mm512_set1_epi16(0x40)), k7 = _mm512_test_epi16_mask(gi, _mm512_set1_epi16(0x80));
                const __m512i lo = _mm512_mask_blend_epi16(k6, _mm512_permutex2var_epi16(grid2[0], gi, grid2[1]),
                                                           _mm512_permutex2var_epi16(grid2[2], gi, grid2[3]));
                const __m512i hi = _mm512_mask_blend_epi16(k6, _mm512_permutex2var_epi16(grid2[4], gi, grid2[5]),
                                                           _mm512_permutex2var_epi16(grid2[6], gi, grid2[7]));
                levels = _mm512_mask_blend_epi16(k7, lo, hi);
            }
#endif
#if OG_AVX512_GFNI
            /* the four pairs' sign masks at once: the a1 words (qword k: pair k's two),
             * each 7-bit field to a byte (vpmultishiftqb), its parity to bit 7 (an affine
             * map over GF(2): bit 7 = the sum of bits 0-6); the masks are read back as
             * k-registers (narrow loads of one wide store forward) */
            uint64_t neg[4];
            {
                const __m256i a1 = _mm512_castsi512_si256(_mm512_permutexvar_epi32(
                    _mm512_zextsi256_si512(_mm256_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15)), _mm512_loadu_si512((const void *)x[b].qs)));
                const __m256i f = _mm256_multishift_epi64_epi8(_mm256_set1_epi64x(0x352e2720150e0700ll), a1);
                _mm256_storeu_si256((__m256i *)neg, _mm256_gf2p8affine_epi64_epi8(f, _mm256_set1_epi64x(0x010204081020407Fll), 0));
            }
#endif
            /* 2 ls + 1 of sub-block s in the low word of dword 2s + 1 */
            const __m512i ls2 = _mm512_or_si512(_mm512_srli_epi32(_mm512_loadu_si512((const void *)x[b].qs), 27), _mm512_set1_epi32(1));
            /* the weights go in biased, u = 43 + (+-grid) in [0, 86]; -43 sum_s (2 ls + 1) sum(y of s)
             * (the two bsums of s) takes the bias off: (2 ls + 1) of bsum k in word k */
            const __m256i lsm43 = _mm256_mullo_epi16(
                _mm512_castsi512_si256(_mm512_permutexvar_epi16(
                    _mm512_castsi256_si512(_mm256_setr_epi16(2, 2, 6, 6, 10, 10, 14, 14, 18, 18, 22, 22, 26, 26, 30, 30)), ls2)),
                _mm256_set1_epi16(-43));
            __m512i isum[NYMAX];
            for (int i = 0; i < ny; i++)
                isum[i] = _mm512_zextsi256_si512(_mm256_madd_epi16(lsm43, _mm256_loadu_si256((const __m256i *)y[i][b].bsums)));
#pragma GCC unroll 4
            for (int sb = 0; sb < 8; sb += 2) {
#if OG_AVX512_GFNI
                /* qword g: group g's levels (word 4 sb + g), weight j's two bits to byte j, then its value */
                const __m512i pts = _mm512_permutexvar_epi16(_mm512_add_epi16(_mm512_set_epi16(Q4(7), Q4(6), Q4(5), Q4(4), Q4(3), Q4(2), Q4(1), Q4(0)),
                                                                              _mm512_set1_epi16((short)(4 * sb))),
                                                             levels);
                const __m512i gb = _mm512_permutexvar_epi8(_mm512_multishift_epi64_epi8(_mm512_set1_epi64(0x0e0c0a0806040200ll), pts),
                                                           _mm512_set1_epi32(0x002b1908));
#else
                const __m512i gb = iq2_grid_pair(a[2 * sb], a[2 * sb + 2]);
#endif
#if OG_AVX512_GFNI
                const __mmask64 kneg = _load_mask64((__mmask64 *)&neg[sb / 2]);
#else
                const __mmask64 kneg = iq2_neg_mask(a[2 * sb + 1], a[2 * sb + 3]);
#endif
                const __m512i c43 = _mm512_set1_epi8(43);
                const __m512i u = _mm512_mask_sub_epi8(_mm512_add_epi8(gb, c43), kneg, c43, gb);
                /* words 0-15: sub-block sb's (word 4 sb + 2 of ls2), 16-31: sb + 1's (word 4 sb + 6) */
                const __m512i ls = _mm512_permutexvar_epi16(
                    _mm512_mask_blend_epi16(0xFFFF0000u, _mm512_set1_epi16((short)(4 * sb + 2)), _mm512_set1_epi16((short)(4 * sb + 6))), ls2);
#pragma GCC unroll 4
                for (int i = 0; i < ny; i++) {
                    const __m512i yy = _mm512_loadu_si512((const void *)(y[i][b].qs + 32 * sb));
                    /* pairs of u y: |.| <= 2 * 86 * 128, no saturation */
                    isum[i] = _mm512_dpwssd_epi32(isum[i], _mm512_maddubs_epi16(u, yy), ls);
                }
            }
            const float dx = og_h16((const uint8_t *)&x[b].d);
            for (int i = 0; i < ny; i++) {
                if (canon)
                    og_canon_put(&r.g[i], j, _mm256_add_epi32(_mm512_castsi512_si256(isum[i]), _mm512_extracti64x4_epi64(isum[i], 1)),
                                 dx * y[i][b].d * 0.125f);
                else
                    r.acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[i]), _mm512_set1_ps(dx * y[i][b].d), r.acc[i]);
            }
        }
        if (canon)
            for (int i = 0; i < ny; i++) og_canon_flush(&r.g[i], r.cacc[i], b0, nb, false);
    }
    for (int i = 0; i < ny; i++) s[i] = canon ? og_canon_finish(r.cacc[i]) : 0.125f * _mm512_reduce_add_ps(r.acc[i]);
}
#undef Q4

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
        const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)x[b0 + j].qs))),
                                             _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)x[b0 + j + 4].qs)), 1);
#if OG_AVX512_GFNI
        /* 128-bit lanes 0, 2: the low nibbles; 1, 3: the high ones (bits 4-7 to 0-3), by one affine map each */
        const long long lo = 0x0102040800000000LL, hi = 0x1020408000000000LL;
        u[j] = _mm512_shuffle_epi8(table, _mm512_gf2p8affine_epi64_epi8(q, _mm512_set_epi64(hi, hi, lo, lo, hi, hi, lo, lo), 0));
#else
        const long long H = 0x0004000400040004LL;
        u[j] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srlv_epi16(q, _mm512_set_epi64(H, H, 0, 0, H, H, 0, 0)),
                                                           _mm512_set1_epi8(0x0F)));
#endif
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
#endif

#endif
