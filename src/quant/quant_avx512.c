/* AVX-512 (F, BW, VL, VNNI) kernels: vpdpbusd sums four u8*s8 products per int32
 * lane, so quantized weights are widened once and never pass through int16. Every
 * type has its dot (one and four activation rows) and device-order kernels here;
 * the tier's other entries are the AVX2 ones. Built with -mavx512f -mavx512bw
 * -mavx512vl -mavx512vnni (plus AVX2 flags). */
#include "quant_avx512_canon.h"

#include <immintrin.h>
#include <math.h>
#include <stddef.h>
#include <string.h>



/* Nibble fields of blocks a and b (16 bytes each) -> 64 bytes: a's elements 0-31,
 * then b's (low nibbles are elements 0-15 of a block, high nibbles 16-31). */
static inline __m512i nibbles_2x16(const uint8_t *a, const uint8_t *b) {
    __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)a))),
                                   _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)b)), 1);
    const __m512i shift = _mm512_set_epi32(0x40004, 0x40004, 0x40004, 0x40004, 0, 0, 0, 0, 0x40004, 0x40004, 0x40004,
                                           0x40004, 0, 0, 0, 0); /* 128-bit lanes 1 and 3: high nibbles */
    return _mm512_and_si512(_mm512_srlv_epi16(v, shift), _mm512_set1_epi8(0x0F));
}
/* 32 bytes at a, then 32 at b. */
static inline __m512i bytes_2x32(const void *a, const void *b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a)),
                              _mm256_loadu_si256((const __m256i *)b), 1);
}
/* s0 in lanes 0-7, s1 in lanes 8-15 (insertf64x4: AVX-512F only). */
static inline __m512 scales_2(float s0, float s1) {
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_set1_ps(s0)), _mm256_castps_pd(_mm256_set1_ps(s1)), 1));
}
/* The 5th bits of blocks a and b (32 bits each): 0x10 in each byte whose bit is set,
 * added to the nibbles of nibbles_2x16. */
static inline __m512i add_fifth_bits(__m512i q, const uint8_t *qa, const uint8_t *qb) {
    uint32_t ha, hb;
    memcpy(&ha, qa, 4);
    memcpy(&hb, qb, 4);
    return _mm512_mask_add_epi8(q, (__mmask64)ha | (__mmask64)hb << 32, q, _mm512_set1_epi8(0x10));
}
/* One block through the scalar reference: the odd last block of a row. */
static float ref_block(og_ggml_type t, const void *x, const void *y) {
    float v;
    og_quant_traits(t)->vec_dot(32, &v, x, y);
    return v;
}

/* Mask of the lanes j .. j + 15 that lie below cnt (for masked tail loads). */
static inline __mmask16 first16(int64_t cnt, int j) {
    int64_t c = cnt - j;
    return (__mmask16)(c >= 16 ? 0xFFFF : c <= 0 ? 0 : (1u << c) - 1);
}

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
/* One Q8_0 block's products as eight int32 lanes, with the same bias as the pairs
 * (exact for y = -128 too): an odd last block. */
static inline __m256i q8_0_block(const og_block_q8_0 *x, const og_block_q8_0 *y) {
    const __m256i bias8 = _mm256_set1_epi8((char)0x80);
    __m256i x0 = _mm256_loadu_si256((const __m256i *)x->qs), y0 = _mm256_loadu_si256((const __m256i *)y->qs);
    return _mm256_sub_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_xor_si256(x0, bias8), y0),
                            _mm256_dpbusd_epi32(_mm256_setzero_si256(), bias8, y0));
}

/* The int32 lanes of blocks b and b + 1 against y: x biased, the bias's sum off. */
static inline __m512i q8_0_pair(__m512i xb, const og_block_q8_0 *y, int64_t b) {
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    __m512i yy = bytes_2x32(y[b].qs, y[b + 1].qs);
    __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), xb, yy);
    return _mm512_sub_epi32(p, _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, yy));
}

static inline __attribute__((always_inline)) void q8_0_dot_n(bool canon, int ny, int64_t n, float *s, const void *vx,
                                                              const void *const *vy) {
    const og_block_q8_0 *x = vx;
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    const int64_t nb = n / 32;
    if (canon) { /* groups of eight blocks, four pairs, then the odd last block */
        __m256 cacc[NYMAX][4];
        og_canon8 g[NYMAX];
        for (int i = 0; i < ny; i++) cacc[i][0] = cacc[i][1] = cacc[i][2] = cacc[i][3] = _mm256_setzero_ps();
        for (int64_t b0 = 0; b0 < nb; b0 += 8) {
            for (int j = 0; j < 8 && b0 + j + 1 < nb; j += 2) {
                const int64_t b = b0 + j;
                og_prefetch_span(x + b, PF_DIST, 2 * sizeof *x);
                const __m512i xb = _mm512_xor_si512(bytes_2x32(x[b].qs, x[b + 1].qs), bias);
                const float d0 = FP16(x[b].d), d1 = FP16(x[b + 1].d);
#pragma GCC unroll 4
                for (int i = 0; i < ny; i++) {
                    const og_block_q8_0 *y = vy[i];
                    const __m512i p = q8_0_pair(xb, y, b);
                    og_canon_put(&g[i], j, _mm512_castsi512_si256(p), d0 * FP16(y[b].d));
                    og_canon_put(&g[i], j + 1, _mm512_extracti64x4_epi64(p, 1), d1 * FP16(y[b + 1].d));
                }
            }
            if ((nb & 1) && b0 + 8 >= nb) /* the odd last block, nb - 1, is in this group */
                for (int i = 0; i < ny; i++) {
                    const og_block_q8_0 *y = vy[i];
                    og_canon_put(&g[i], (int)(nb - 1 - b0), q8_0_block(&x[nb - 1], &y[nb - 1]), FP16(x[nb - 1].d) * FP16(y[nb - 1].d));
                }
            for (int i = 0; i < ny; i++) og_canon_flush(&g[i], cacc[i], b0, nb, false);
        }
        for (int i = 0; i < ny; i++) s[i] = og_canon_finish(cacc[i]);
        return;
    }
    __m512 acc[NYMAX];
    #pragma GCC unroll 4
    for (int i = 0; i < ny; i++) acc[i] = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 1 < nb; b += 2) {
        og_prefetch_span(x + b, PF_DIST, 2 * sizeof *x);
        __m512i xb = _mm512_xor_si512(bytes_2x32(x[b].qs, x[b + 1].qs), bias);
        const float d0 = FP16(x[b].d), d1 = FP16(x[b + 1].d);
        #pragma GCC unroll 4
        for (int i = 0; i < ny; i++) {
            const og_block_q8_0 *y = vy[i];
            const __m512i p = q8_0_pair(xb, y, b);
            acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), scales_2(d0 * FP16(y[b].d), d1 * FP16(y[b + 1].d)), acc[i]);
        }
    }
    #pragma GCC unroll 4
    for (int i = 0; i < ny; i++) {
        const og_block_q8_0 *y = vy[i];
        float sum = _mm512_reduce_add_ps(acc[i]);
        if (b < nb) { /* an odd last block */
            __m256i p0 = q8_0_block(&x[b], &y[b]);
            __m128i h = _mm_add_epi32(_mm256_castsi256_si128(p0), _mm256_extracti128_si256(p0, 1));
            h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4e));
            h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xb1));
            sum += (float)_mm_cvtsi128_si32(h) * (FP16(x[b].d) * FP16(y[b].d));
        }
        s[i] = sum;
    }
}

/* og_vec_dot_r4_fn of Q8_0: four weight rows, one activation row, the canonical
 * order. A pair of blocks (2j, 2j + 1 of a group) of each row is one register of
 * int32 lanes (q8_0_pair; an odd last block alone in the low half); for rows A, B
 * of a pair of rows one sum4x4 tree per row and one blend step leave, in 128-bit
 * unit 0, A's even blocks (lane j: block 2j), unit 1 B's even ones, units 2 and 3
 * the odd ones. The factors are laid out the same way (q8_r4_pos) and so are the
 * accumulators; r4 order is put back once per call, before the butterfly. */
typedef struct q8_r4 {
    __m512i p[4][4];    /* [row][pair of blocks] */
    uint16_t d[2][16];  /* fp16 dx of [row pair][q8_r4_pos] */
    uint16_t dy[16];    /* fp16 dy at the same places (each twice) */
    __m512 acc[2][4];
} q8_r4;
/* The lane of block k of a group, row r of its pair of rows. */
static inline int q8_r4_pos(int r, int k) { return (k & 1) * 8 + (r & 1) * 4 + (k >> 1); }

static inline __attribute__((always_inline)) void q8_r4_group(q8_r4 *g, int64_t b0, int cnt) {
    const __m512i z = _mm512_setzero_si512();
    __mmask16 m = 0xFFFF;
    if (cnt < 8) {
        m = 0;
        for (int k = 0; k < cnt; k++) m |= (__mmask16)(1u << q8_r4_pos(0, k) | 1u << q8_r4_pos(1, k));
    }
    const int pairs = (cnt + 1) / 2;
    const __m512 dy = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, g->dy));
    for (int p = 0; p < 2; p++) {
        __m512i va[4], vb[4];
        for (int j = 0; j < 4; j++) va[j] = j < pairs ? g->p[2 * p][j] : z, vb[j] = j < pairs ? g->p[2 * p + 1][j] : z;
        const __m512i xa = sum4x4_epi32_512(va), xb = sum4x4_epi32_512(vb);
        const __m512i is = r4_units(xa, xb);
        const __m512 a = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, g->d[p])), dy);
        g->acc[p][(b0 >> 3) & 3] = _mm512_add_ps(g->acc[p][(b0 >> 3) & 3], _mm512_mul_ps(a, _mm512_cvtepi32_ps(is)));
    }
}

/* 32 bytes of two nibble planes -> 64 bytes: low nibbles, then high nibbles. */
static inline __m512i nibbles64(const uint8_t *q) {
    __m256i v = _mm256_loadu_si256((const __m256i *)q);
    __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1);
    return _mm512_and_si512(w, _mm512_set1_epi8(0x0F));
}

/* The 12-byte scale field of Q4_K/Q5_K (kquants.md §4) as 16 bytes: 8 scales,
 * then 8 mins. Reads 16 bytes at q (the 4 after the field are the block's own
 * quants, so the read stays inside the block). */
static inline __m128i k4_scales_mins(const uint8_t *q) {
    __m128i v = _mm_loadu_si128((const __m128i *)q);                                 /* dwords a b c . */
    __m128i u = _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0));                       /* a a b b */
    __m128i w = _mm_srlv_epi32(_mm_shuffle_epi32(v, _MM_SHUFFLE(2, 2, 2, 2)), _mm_set_epi32(4, 0, 0, 0)); /* c c c c>>4 */
    __m128i six = _mm_and_si128(u, _mm_set_epi32(0, 0x3f3f3f3f, 0, 0x3f3f3f3f));
    __m128i top = _mm_and_si128(_mm_srli_epi32(u, 2), _mm_set_epi32(0x30303030, 0, 0x30303030, 0));
    __m128i low = _mm_and_si128(w, _mm_set_epi32(0x0f0f0f0f, 0, 0x0f0f0f0f, 0));
    return _mm_or_si128(six, _mm_or_si128(top, low)); /* sc0-3 sc4-7 m0-3 m4-7 */
}

/* Q4_K and Q5_K: chunk c (64 quants: sub-blocks 2c, 2c+1) gives sixteen int32 sums
 * of four u * s8 products (|p| <= 4 * 31 * 128, so int16 holds them); two chunks
 * pack into one int16 vector and vpdpwssd multiplies each adjacent pair, which
 * always shares a sub-block, by that sub-block's scale. No 32-bit multiplies in
 * the loop. Q5_K's fifth bit of element 64c + l is bit 2c of qh[l], of element
 * 64c + 32 + l bit 2c + 1: the broadcast qh is tested against those bits. The
 * fields sit at the same places in both blocks but for Q5_K's qh before qs. */
/* Zeroes the accumulators of a kernel with mins for ny rows: the fork's lanes and
 * mins, the canonical order's 32 lanes. */
static inline __attribute__((always_inline)) void mins_acc_zero(int ny, __m512 *acc, __m256 *macc, __m256 (*cacc)[4]) {
    #pragma GCC unroll 4
    for (int i = 0; i < ny; i++)
        acc[i] = _mm512_setzero_ps(), macc[i] = cacc[i][0] = cacc[i][1] = cacc[i][2] = cacc[i][3] = _mm256_setzero_ps();
}

/* A Q4_K / Q5_K block's weights as the dot needs them: the quants of chunk c, the
 * int16 scale patterns of the two packs and the mins doubled for the bsum pairs. */
typedef struct k45_w {
    __m512i q[4], s01, s23;
    __m256i m16;
} k45_w;
static inline __attribute__((always_inline)) void k45_unpack(bool five, const uint8_t *x, k45_w *w) {
    const size_t qs = five ? offsetof(og_block_q5_K, qs) : offsetof(og_block_q4_K, qs);
    /* int16 scale pattern of packs(p_2h, p_2h+1), 128-bit lane k: 4 x sc[4h + k/2],
     * then 4 x sc[4h + 2 + k/2]; 0x80 zeroes the high byte */
#define W(i) (char)0x80, (char)(i) /* _mm_set_epi8 lists the high byte first */
#define LANE(a, b) W(b), W(b), W(b), W(b), W(a), W(a), W(a), W(a)
    const __m512i ctl01 = _mm512_set_epi8(LANE(1, 3), LANE(1, 3), LANE(0, 2), LANE(0, 2));
    const __m512i ctl23 = _mm512_set_epi8(LANE(5, 7), LANE(5, 7), LANE(4, 6), LANE(4, 6));
    /* mins doubled for the pairs of bsums: int16 j = m[j / 2] */
    const __m256i ctlm = _mm256_set_epi8(W(15), W(15), W(14), W(14), W(13), W(13), W(12), W(12),
                                         W(11), W(11), W(10), W(10), W(9), W(9), W(8), W(8));
#undef LANE
#undef W
    __m512i smb = _mm512_broadcast_i32x4(k4_scales_mins(x + offsetof(og_block_q4_K, scales)));
    w->m16 = _mm256_shuffle_epi8(_mm512_castsi512_si256(smb), ctlm);
    w->s01 = _mm512_shuffle_epi8(smb, ctl01);
    w->s23 = _mm512_shuffle_epi8(smb, ctl23);
    const __m512i qh = five ? _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x + offsetof(og_block_q5_K, qh))))
                            : _mm512_setzero_si512();
    #pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        w->q[c] = nibbles64(x + qs + 32 * c);
        if (five) {
            __m512i bits = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (2 * c))), _mm256_set1_epi8((char)(2 << (2 * c))), 1);
            w->q[c] = _mm512_mask_add_epi8(w->q[c], _mm512_test_epi8_mask(qh, bits), w->q[c], _mm512_set1_epi8(0x10));
        }
    }
}
/* The block's sixteen I lanes against y (and *mm: its eight S lanes). */
static inline __attribute__((always_inline)) __m512i k45_isum(const k45_w *w, const og_block_q8_K *y, __m256i *mm) {
    *mm = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y->bsums), w->m16);
    __m512i p[4];
    #pragma GCC unroll 4
    for (int c = 0; c < 4; c++) p[c] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w->q[c], _mm512_loadu_si512(y->qs + 64 * c));
    const __m512i isum = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_packs_epi32(p[0], p[1]), w->s01);
    return _mm512_dpwssd_epi32(isum, _mm512_packs_epi32(p[2], p[3]), w->s23);
}

/* Q4_K and Q5_K: chunk c (64 quants: sub-blocks 2c, 2c+1) gives sixteen int32 sums
 * of four u * s8 products (|p| <= 4 * 31 * 128, so int16 holds them); two chunks
 * pack into one int16 vector and vpdpwssd multiplies each adjacent pair, which
 * always shares a sub-block, by that sub-block's scale. No 32-bit multiplies in
 * the loop. Q5_K's fifth bit of element 64c + l is bit 2c of qh[l], of element
 * 64c + 32 + l bit 2c + 1: the broadcast qh is tested against those bits. The
 * fields sit at the same places in both blocks but for Q5_K's qh before qs. */
static inline __attribute__((always_inline)) void k45_dot_n(bool five, bool canon, int ny, int64_t n, float *s,
                                                             const void *vx, const void *const *vy) {
    const size_t size = five ? sizeof(og_block_q5_K) : sizeof(og_block_q4_K);
    const og_block_q8_K *const *y = (const og_block_q8_K *const *)vy;
    const int64_t nb = n / OG_QK_K;
    __m512 acc[NYMAX];
    __m256 macc[NYMAX], cacc[NYMAX][4];
    canon16 g[NYMAX];
    mins_acc_zero(ny, acc, macc, cacc);
    for (int64_t b0 = 0; b0 < nb; b0 += OG_CANON_GROUP) {
        for (int slot = 0; slot < OG_CANON_GROUP && b0 + slot < nb; slot++) {
            const int64_t b = b0 + slot;
            const uint8_t *x = (const uint8_t *)vx + (size_t)b * size; /* d, dmin, scales[12], [qh[32]], qs[128] */
            og_prefetch_span(x, PF_DIST, size);
            k45_w w;
            k45_unpack(five, x, &w);
            const float d = og_h16(x), dmin = og_h16(x + 2);
            #pragma GCC unroll 4
            for (int i = 0; i < ny; i++) {
                __m256i mm;
                const __m512i isum = k45_isum(&w, &y[i][b], &mm);
                if (canon) {
                    canon_put16(&g[i], slot, isum, mm, d * y[i][b].d, dmin * y[i][b].d, true);
                } else {
                    macc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mm), _mm256_set1_ps(dmin * y[i][b].d), macc[i]);
                    acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(d * y[i][b].d), acc[i]);
                }
            }
        }
        if (canon)
            for (int i = 0; i < ny; i++) canon_flush16(&g[i], cacc[i], b0, nb, true);
    }
    #pragma GCC unroll 4
    for (int i = 0; i < ny; i++) s[i] = canon ? og_canon_finish(cacc[i]) : _mm512_reduce_add_ps(acc[i]) - og_hsum256(macc[i]);
}

/* Q2_K: a 2-bit quant q times its 4-bit scale is at most 45, so q * sc fits a byte
 * and comes from a table lookup (vpshufb); all sixteen sub-blocks then accumulate
 * in one vpdpbusd chain with no per-lane multiply. Half h of the quants (32 bytes)
 * is broadcast to both 256-bit halves and shifted by 4m and 4m + 2: 64 consecutive
 * elements, 128h + 64m .., whose 128-bit lane L is sub-block 8h + 4m + L. Lane L of
 * the table holds q * sc[4c + L] at byte 4c + q for c = 2h + m, so the index is
 * q | 4c (one vpternlogd). */
/* A Q2_K block's weights: q * sc of elements 64j .. 64j + 63 and the mins as int16. */
typedef struct q2_w {
    __m512i us[4];
    __m256i m16;
} q2_w;
static inline __attribute__((always_inline)) void q2_K_unpack(const og_block_q2_K *x, q2_w *w) {
    const __m128i transpose = _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    /* per-int16 shift counts: 4m in the low 256 bits, 4m + 2 in the high */
    const __m512i shift0 = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
    const __m512i shift1 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1);
    const __m512i m3 = _mm512_set1_epi8(3);
    __m128i sc8 = _mm_loadu_si128((const __m128i *)x->scales);
    /* mins: (sc >> 4) . bsums per sub-block */
    w->m16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc8, 4), _mm_set1_epi8(0x0F)));
    /* dword 4L + c = sc[4c + L] * 0x03020100: bytes [0, s, 2s, 3s] */
    __m512i tab = _mm512_mullo_epi32(_mm512_cvtepu8_epi32(_mm_shuffle_epi8(_mm_and_si128(sc8, _mm_set1_epi8(0x0F)), transpose)),
                                     _mm512_set1_epi32(0x03020100));
    #pragma GCC unroll 4
    for (int h = 0; h < 2; h++) {
        __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x->qs + 32 * h)));
        #pragma GCC unroll 4
        for (int m = 0; m < 2; m++) {
            __m512i u = _mm512_srlv_epi16(q, m ? shift1 : shift0);
            __m512i idx = _mm512_ternarylogic_epi32(u, m3, _mm512_set1_epi8((char)(4 * (2 * h + m))), 0xEA); /* (u & 3) | 4c */
            w->us[2 * h + m] = _mm512_shuffle_epi8(tab, idx);
        }
    }
}
/* The block's sixteen I lanes against y (and *mm: its eight S lanes). */
static inline __attribute__((always_inline)) __m512i q2_K_isum(const q2_w *w, const og_block_q8_K *y, __m256i *mm) {
    *mm = _mm256_madd_epi16(w->m16, _mm256_loadu_si256((const __m256i *)y->bsums));
    __m512i isum = _mm512_setzero_si512();
    #pragma GCC unroll 4
    for (int j = 0; j < 4; j++) isum = _mm512_dpbusd_epi32(isum, w->us[j], _mm512_loadu_si512(y->qs + 64 * j));
    return isum;
}

static inline __attribute__((always_inline)) void q2_K_dot_n(bool canon, int ny, int64_t n, float *s, const void *vx,
                                                              const void *const *vy) {
    const og_block_q2_K *x = vx;
    const og_block_q8_K *const *y = (const og_block_q8_K *const *)vy;
    const int64_t nb = n / OG_QK_K;
    __m512 acc[NYMAX];
    __m256 macc[NYMAX], cacc[NYMAX][4];
    canon16 g[NYMAX];
    mins_acc_zero(ny, acc, macc, cacc);
    for (int64_t b0 = 0; b0 < nb; b0 += OG_CANON_GROUP) {
        for (int slot = 0; slot < OG_CANON_GROUP && b0 + slot < nb; slot++) {
            const int64_t b = b0 + slot;
            og_prefetch_span(x + b, PF_DIST, sizeof *x);
            /* d and dmin (adjacent fp16) converted together */
            uint32_t ddm;
            memcpy(&ddm, &x[b].d, 4);
            const __m128 dd = _mm_cvtph_ps(_mm_cvtsi32_si128((int)ddm));
            q2_w w;
            q2_K_unpack(&x[b], &w);
            #pragma GCC unroll 4
            for (int i = 0; i < ny; i++) {
                const __m128 sd = _mm_mul_ps(dd, _mm_set1_ps(y[i][b].d)); /* d dy, dmin dy */
                __m256i mm;
                const __m512i isum = q2_K_isum(&w, &y[i][b], &mm);
                if (canon) {
                    canon_put16(&g[i], slot, isum, mm, _mm_cvtss_f32(sd), _mm_cvtss_f32(_mm_movehdup_ps(sd)), true);
                } else {
                    macc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mm), _mm256_broadcastss_ps(_mm_movehdup_ps(sd)), macc[i]);
                    acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_broadcastss_ps(sd), acc[i]);
                }
            }
        }
        if (canon)
            for (int i = 0; i < ny; i++) canon_flush16(&g[i], cacc[i], b0, nb, true);
    }
    #pragma GCC unroll 4
    for (int i = 0; i < ny; i++) s[i] = canon ? og_canon_finish(cacc[i]) : _mm512_reduce_add_ps(acc[i]) - og_hsum256(macc[i]);
}

/* A Q6_K block's weights: u (6-bit, unsigned) of elements 64j .. 64j + 63, the
 * sixteen scales as vpdpwssd multipliers of each half (128-bit lane L of
 * packs(p_2h, p_2h+1): sub-blocks 8h + L and 8h + 4 + L, Q3_K's pattern), and the
 * scales as int16 for the -32 sc bsums term. The sums of four u y products
 * (|p| <= 4 * 63 * 128 = 32256) pack to int16 without saturating. */
typedef struct q6_w {
    __m512i u[4], sc[2];
    __m256i sc16;
} q6_w;
static inline __attribute__((always_inline)) void q6_K_unpack(const og_block_q6_K *x, q6_w *w) {
#define Q(a, b) b, b, b, b, a, a, a, a
    const __m512i sidx[2] = {_mm512_set_epi16(Q(3, 7), Q(2, 6), Q(1, 5), Q(0, 4)), _mm512_set_epi16(Q(11, 15), Q(10, 14), Q(9, 13), Q(8, 12))};
#undef Q
    w->sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x->scales));
    #pragma GCC unroll 4
    for (int h = 0; h < 2; h++) {
        __m512i ql = _mm512_loadu_si512(x->ql + 64 * h); /* low nibbles: elems 0-63, high: 64-127 */
        __m256i qh = _mm256_loadu_si256((const __m256i *)(x->qh + 32 * h));
        __m512i h01 = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
        __m512i h23 = _mm512_srli_epi16(h01, 4);
        w->u[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, _mm512_set1_epi8(0x0F)),
                                      _mm512_slli_epi16(_mm512_and_si512(h01, _mm512_set1_epi8(3)), 4));
        w->u[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), _mm512_set1_epi8(0x0F)),
                                          _mm512_slli_epi16(_mm512_and_si512(h23, _mm512_set1_epi8(3)), 4));
        w->sc[h] = _mm512_permutexvar_epi16(sidx[h], _mm512_castsi256_si512(w->sc16));
    }
}
/* The block's sixteen I lanes against y. */
static inline __attribute__((always_inline)) __m512i q6_K_isum(const q6_w *w, const og_block_q8_K *y) {
    /* q = u - 32: subtract 32 * sum_s sc[s] * bsums[s] */
    __m256i cc = _mm256_madd_epi16(w->sc16, _mm256_loadu_si256((const __m256i *)y->bsums));
    __m512i isum = _mm512_maskz_sub_epi32(0x00FF, _mm512_setzero_si512(), _mm512_castsi256_si512(_mm256_slli_epi32(cc, 5)));
    #pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const __m512i p0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w->u[2 * h], _mm512_loadu_si512(y->qs + 128 * h));
        const __m512i p1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w->u[2 * h + 1], _mm512_loadu_si512(y->qs + 128 * h + 64));
        isum = _mm512_dpwssd_epi32(isum, _mm512_packs_epi32(p0, p1), w->sc[h]);
    }
    return isum;
}

static inline __attribute__((always_inline)) void q6_K_dot_n(bool canon, int ny, int64_t n, float *s, const void *vx,
                                                              const void *const *vy) {
    const og_block_q6_K *x = vx;
    const og_block_q8_K *const *y = (const og_block_q8_K *const *)vy;
    const int64_t nb = n / OG_QK_K;
    __m512 acc[NYMAX];
    __m256 cacc[NYMAX][4];
    canon16 g[NYMAX];
    #pragma GCC unroll 4
    for (int i = 0; i < ny; i++) acc[i] = _mm512_setzero_ps(), cacc[i][0] = cacc[i][1] = cacc[i][2] = cacc[i][3] = _mm256_setzero_ps();
    for (int64_t b0 = 0; b0 < nb; b0 += OG_CANON_GROUP) {
        for (int slot = 0; slot < OG_CANON_GROUP && b0 + slot < nb; slot++) {
            const int64_t b = b0 + slot;
            og_prefetch_span(x + b, PF_DIST, sizeof *x);
            q6_w w;
            q6_K_unpack(&x[b], &w);
            const float d = FP16(x[b].d);
            #pragma GCC unroll 4
            for (int i = 0; i < ny; i++) block_done16(canon, &g[i], slot, &acc[i], q6_K_isum(&w, &y[i][b]), d * y[i][b].d);
        }
        if (canon)
            for (int i = 0; i < ny; i++) canon_flush16(&g[i], cacc[i], b0, nb, false);
    }
    #pragma GCC unroll 4
    for (int i = 0; i < ny; i++) s[i] = canon ? og_canon_finish(cacc[i]) : _mm512_reduce_add_ps(acc[i]);
}

/* og_vec_dot_r4_fn of the k-quants: four weight rows, one activation row, the canonical order. */
/* Q2_K: each row's sixteen I lanes from its vpdpbusd chain, then one blend step
 * puts the pair in r4p_isum's lanes (A's sums in lanes 0-1 of each unit, B's in
 * 2-3); the two rows' S lanes by one vpmaddwd. */
static inline __attribute__((always_inline)) __m512i q2_K_pair(const og_block_q2_K *xa, const og_block_q2_K *xb, const og_block_q8_K *y,
                                                                __m512i *ss) {
    q2_w wa, wb;
    q2_K_unpack(xa, &wa);
    q2_K_unpack(xb, &wb);
    __m512i ia = _mm512_setzero_si512(), ib = _mm512_setzero_si512();
    #pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        const __m512i yj = _mm512_loadu_si512(y->qs + 64 * j);
        ia = _mm512_dpbusd_epi32(ia, wa.us[j], yj);
        ib = _mm512_dpbusd_epi32(ib, wb.us[j], yj);
    }
    *ss = _mm512_madd_epi16(_mm512_inserti64x4(_mm512_castsi256_si512(wa.m16), wb.m16, 1),
                            _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)y->bsums)));
    const __m512i u = _mm512_mask_blend_epi32(0xCCCC, ia, ib), w = _mm512_mask_blend_epi32(0xCCCC, ib, ia);
    return _mm512_add_epi32(u, _mm512_shuffle_epi32(w, _MM_PERM_BADC));
}
#define Q2P(xa, xb, yb, noff, ss) q2_K_pair(xa, xb, yb, ss)
static void q2_K_r4(int64_t n, float *s, const void *vx, size_t stride, const void *vy) {
    OG_CANON_R4P_BODY(og_block_q2_K, 0, true, Q2P, OG_DMIN);
}
#undef Q2P
static void q3_K_r4(int64_t n, float *s, const void *vx, size_t stride, const void *vy) { q3_K_r4_body(n, s, vx, stride, vy); }
/* Q6_K two rows per register (OG_CANON_R4P_BODY; offset 32) */
static inline __attribute__((always_inline)) __m512i q6_K_pair(const __m512i sidx[4], const og_block_q6_K *xa, const og_block_q6_K *xb,
                                                                const og_block_q8_K *y, const __m512i noff[4]) {
    q6_w wa, wb;
    q6_K_unpack(xa, &wa);
    q6_K_unpack(xb, &wb);
    return r4p_isum(wa.u, wb.u, wa.sc16, wb.sc16, sidx, noff, y);
}
static void q6_K_r4(int64_t n, float *s, const void *vx, size_t stride, const void *vy) {
    __m512i sidx[4];
    for (int j = 0; j < 4; j++) sidx[j] = r4p_sidx(j);
#define Q6P(xa, xb, yb, noff, ss) q6_K_pair(sidx, xa, xb, yb, noff)
    OG_CANON_R4P_BODY(og_block_q6_K, 32, false, Q6P, OG_NO_DMIN);
#undef Q6P
}

/* Q4_K and Q5_K two rows per register: packs(p_A, p_B) of chunk c (sub-block 2c in
 * units 0-1, 2c + 1 in 2-3) against both rows' scales; the rows' S lanes by one
 * vpmaddwd of both rows' doubled mins against the bsums twice. */
static inline __attribute__((always_inline)) __m512i k45_pair(bool five, const uint8_t *xa, const uint8_t *xb, const og_block_q8_K *y,
                                                               __m512i *ss) {
    /* words 0-7: A's scales, 8-15 its mins, 16-31 B's */
    const __m512i s16 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_cvtepu8_epi16(k4_scales_mins(xa + offsetof(og_block_q4_K, scales)))),
                                           _mm256_cvtepu8_epi16(k4_scales_mins(xb + offsetof(og_block_q4_K, scales))), 1);
    int16_t mi[32], ci[4][32];
    for (int w = 0; w < 32; w++) {
        mi[w] = (int16_t)(16 * (w / 16) + 8 + (w % 16) / 2); /* word w: the min of bsum pair w / 2 of its row */
        for (int c = 0; c < 4; c++) ci[c][w] = (int16_t)((w % 8 < 4 ? 0 : 16) + 2 * c + w / 16); /* unit L = w / 8: sub-block 2c + L / 2 */
    }
    *ss = _mm512_madd_epi16(_mm512_permutexvar_epi16(_mm512_loadu_si512((const void *)mi), s16),
                            _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)y->bsums)));
    k45_w wa, wb;
    k45_unpack(five, xa, &wa);
    k45_unpack(five, xb, &wb);
    __m512i acc = _mm512_setzero_si512();
    #pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        const __m512i yc = _mm512_loadu_si512(y->qs + 64 * c);
        const __m512i pa = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wa.q[c], yc), pb = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wb.q[c], yc);
        acc = _mm512_dpwssd_epi32(acc, _mm512_packs_epi32(pa, pb), _mm512_permutexvar_epi16(_mm512_loadu_si512((const void *)ci[c]), s16));
    }
    return acc;
}
/* ---- Q4_K / Q5_K rows of at most eight blocks (K <= 2048: the expert and head rows
 * of the small models) ------------------------------------------------------------
 * The four rows in address order: a register holds blocks 2h and 2h + 1 of one row
 * (r4p_isum's lanes with "A" and "B" the two blocks, each against its own activation
 * block), so the rows stream as one sequential run of blocks instead of four
 * interleaved ones (prefetched into L2), and one tree (r4p_sum) turns the eight
 * registers of four rows' blocks 4q .. 4q + 3 into sixteen exact sums: lane j holds
 * row r = 2 ((j >> 2) & 1) + (j & 1), block 4q + b, b = 2 (j >> 3) + ((j >> 1) & 1)
 * (j = 8 (b >> 1) + 4 (r >> 1) + 2 (b & 1) + (r & 1)). The S lanes take the same
 * layout (the bsums of both blocks interleaved by qwords, once per call) and the same
 * tree. The factors of the sixteen (row, block) pairs come by two gathers, the float
 * operations of step 2 run once on sixteen lanes, and the cross-block order of a row
 * of at most eight blocks is og_canon_finish's on lanes l < 8 from +0: offset 4 adds
 * the two registers' lanes, then (L0 + L2) + (L1 + L3), L_b = +0 + v_b (absent blocks
 * +0), which the offsets 16 and 8 leave as it is. The same integers and the same
 * float operations per (row, block) as the other kernels: the same bits
 * (test_canonical_r4). */
/* vpermw indices into s16 (words 0-7: A's scales, 8-15 its mins, 16-31 B's). The
 * scales of packs(p_A, p_B) of chunk c: word w = 8L + k is (k < 4 ? A : B)'s scale of
 * sub-block 2c + w / 16 (k45_ci0 + 2c). k45s_mi: unit L, words 0-3 A's qword L of its
 * doubled mins (sub-blocks 2L, 2L + 1), 4-7 B's. Tables, not loops: gcc builds a
 * local array filled by a loop with a store per word on every call. */
static const int16_t k45_ci0[32] = {0, 0, 0, 0, 16, 16, 16, 16, 0, 0, 0, 0, 16, 16, 16, 16,
                                    1, 1, 1, 1, 17, 17, 17, 17, 1, 1, 1, 1, 17, 17, 17, 17};
static const int16_t k45s_mi[32] = {8,  8,  9,  9,  24, 24, 25, 25, 10, 10, 11, 11, 26, 26, 27, 27,
                                    12, 12, 13, 13, 28, 28, 29, 29, 14, 14, 15, 15, 30, 30, 31, 31};
static inline __m512i k45_ci(int c) {
    return _mm512_add_epi16(_mm512_loadu_si512((const void *)k45_ci0), _mm512_set1_epi16((short)(2 * c)));
}

/* k4_scales_mins of the blocks whose fields are at qa and qb (qb NULL: zeros), in
 * one register: bytes 0-15 qa's eight scales and eight mins, 16-31 qb's. */
static inline __m256i k4_scales_mins2(const uint8_t *qa, const uint8_t *qb) {
    if (!qb) return _mm256_zextsi128_si256(k4_scales_mins(qa));
    const __m256i v = _mm256_loadu2_m128i((const __m128i *)qb, (const __m128i *)qa);
    const __m256i u = _mm256_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0));
    const __m256i w = _mm256_srlv_epi32(_mm256_shuffle_epi32(v, _MM_SHUFFLE(2, 2, 2, 2)), _mm256_set_epi32(4, 0, 0, 0, 4, 0, 0, 0));
    const __m256i six = _mm256_and_si256(u, _mm256_set_epi32(0, 0x3f3f3f3f, 0, 0x3f3f3f3f, 0, 0x3f3f3f3f, 0, 0x3f3f3f3f));
    const __m256i top = _mm256_and_si256(_mm256_srli_epi32(u, 2), _mm256_set_epi32(0x30303030, 0, 0x30303030, 0, 0x30303030, 0, 0x30303030, 0));
    const __m256i low = _mm256_and_si256(w, _mm256_set_epi32(0x0f0f0f0f, 0, 0x0f0f0f0f, 0, 0x0f0f0f0f, 0, 0x0f0f0f0f, 0));
    return _mm256_or_si256(six, _mm256_or_si256(top, low));
}

/* Q4_K's quants 64 bytes at a time: register k = 2 c2 + hi of a block holds the low
 * (hi = 0) or high nibbles of qs[64 c2 ..] (chunks 2 c2, 2 c2 + 1), sub-blocks
 * 4 c2 + hi and 4 c2 + 2 + hi; the activation block's bytes in the same places
 * (k45q_y, once per call for the four rows), and the scales of packs(p_A, p_B) of
 * register k: word w = 8L + k' is (k' < 4 ? A : B)'s scale of sub-block
 * 4 c2 + hi + 2 (w / 16) (k45q_ci0 + 4 c2 + hi). */
static const int16_t k45q_ci0[32] = {0, 0, 0, 0, 16, 16, 16, 16, 0, 0, 0, 0, 16, 16, 16, 16,
                                     2, 2, 2, 2, 18, 18, 18, 18, 2, 2, 2, 2, 18, 18, 18, 18};
static inline __attribute__((always_inline)) void k45q_y(const og_block_q8_K *y, __m512i yq[4]) {
    for (int c2 = 0; c2 < 2; c2++)
        for (int hi = 0; hi < 2; hi++)
            yq[2 * c2 + hi] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(y->qs + 128 * c2 + 32 * hi))),
                                                 _mm256_loadu_si256((const __m256i *)(y->qs + 128 * c2 + 64 + 32 * hi)), 1);
}

/* Blocks xa and xb (xb NULL: absent, zero lanes) of one row against ya, yb: the
 * I register (r4p_isum's lanes, A = xa) and, in *ss, the S register in the same
 * layout (bsi: the two activation blocks' bsums interleaved by qwords). Q4_K takes
 * the activations as k45q_y's registers yqa, yqb. */
static inline __attribute__((always_inline)) __m512i k45s_pair(bool five, const uint8_t *xa, const uint8_t *xb, const og_block_q8_K *ya,
                                                                const og_block_q8_K *yb, const __m512i *yqa, const __m512i *yqb,
                                                                __m512i bsi, __m512i *ss) {
    /* words 0-7: A's scales, 8-15 its mins, 16-31 B's (zero when absent) */
    const __m512i s16 = _mm512_cvtepu8_epi16(k4_scales_mins2(xa + offsetof(og_block_q4_K, scales), xb ? xb + offsetof(og_block_q4_K, scales) : NULL));
    *ss = _mm512_madd_epi16(_mm512_permutexvar_epi16(_mm512_loadu_si512((const void *)k45s_mi), s16), bsi);
    __m512i acc = _mm512_setzero_si512();
    if (!five) {
        const __m512i m4 = _mm512_set1_epi8(0x0F);
        #pragma GCC unroll 2
        for (int c2 = 0; c2 < 2; c2++) {
            const __m512i qa = _mm512_loadu_si512(xa + offsetof(og_block_q4_K, qs) + 64 * c2);
            const __m512i qb = xb ? _mm512_loadu_si512(xb + offsetof(og_block_q4_K, qs) + 64 * c2) : _mm512_setzero_si512();
            #pragma GCC unroll 2
            for (int hi = 0; hi < 2; hi++) {
                const int k = 2 * c2 + hi;
                const __m512i ua = _mm512_and_si512(hi ? _mm512_srli_epi16(qa, 4) : qa, m4);
                const __m512i pa = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ua, yqa[k]);
                const __m512i pb = xb ? _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(hi ? _mm512_srli_epi16(qb, 4) : qb, m4), yqb[k])
                                      : _mm512_setzero_si512();
                const __m512i sidx = _mm512_add_epi16(_mm512_loadu_si512((const void *)k45q_ci0), _mm512_set1_epi16((short)(4 * c2 + hi)));
                acc = _mm512_dpwssd_epi32(acc, _mm512_packs_epi32(pa, pb), _mm512_permutexvar_epi16(sidx, s16));
            }
        }
        return acc;
    }
    k45_w wa, wb;
    k45_unpack(five, xa, &wa);
    if (xb) k45_unpack(five, xb, &wb);
    #pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        const __m512i pa = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wa.q[c], _mm512_loadu_si512(ya->qs + 64 * c));
        const __m512i pb = xb ? _mm512_dpbusd_epi32(_mm512_setzero_si512(), wb.q[c], _mm512_loadu_si512(yb->qs + 64 * c)) : _mm512_setzero_si512();
        acc = _mm512_dpwssd_epi32(acc, _mm512_packs_epi32(pa, pb), _mm512_permutexvar_epi16(k45_ci(c), s16));
    }
    return acc;
}

/* og_prefetch_span into L2 (prefetcht1), not L1: for the short rows' sequential run
 * it streams faster from DRAM than prefetcht0 (bench/RESULTS.md, "Canonical decode:
 * short rows in address order"); the kernel's own loads then miss L1 only to L2. */
static inline void prefetch_span_l2(const void *p, size_t ahead, size_t bytes) {
    for (size_t l = 0; l < bytes; l += 64) _mm_prefetch((const char *)((uintptr_t)p + ahead + l), _MM_HINT_T1);
}

/* Lanes from +0 of the v_b of blocks b0 .. b0 + 3 of the four rows (the layout
 * above), from their exact sums is, ss: the factors by two gathers, blocks from nb
 * on masked off (+0). */
static inline __attribute__((always_inline)) __m512 k45s_lanes(__m512i is, __m512i ss, const uint8_t *x, const og_block_q8_K *y,
                                                               size_t stride, size_t bs, int b0, int nb) {
    /* lane j's row is 2 ((j >> 2) & 1) + (j & 1), its block b0 + 2 (j >> 3) + ((j >> 1) & 1) */
    const __m512i row = _mm512_set_epi32(3, 2, 3, 2, 1, 0, 1, 0, 3, 2, 3, 2, 1, 0, 1, 0);
    const __m512i blk = _mm512_add_epi32(_mm512_set_epi32(3, 3, 2, 2, 3, 3, 2, 2, 1, 1, 0, 0, 1, 1, 0, 0), _mm512_set1_epi32(b0));
    const int cnt = nb - b0;
    const __mmask16 live = cnt >= 4 ? 0xFFFF : cnt == 3 ? 0x33FF : cnt == 2 ? 0x00FF : 0x0033;
    const __m512i xo = _mm512_add_epi32(_mm512_mullo_epi32(row, _mm512_set1_epi32((int)stride)), _mm512_mullo_epi32(blk, _mm512_set1_epi32((int)bs)));
    /* d and dmin: the block's first dword */
    const __m512i dd = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, xo, x, 1);
    const __m512 dy = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), live, _mm512_mullo_epi32(blk, _mm512_set1_epi32((int)sizeof *y)), &y->d, 1);
    const __m512 a = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd)), dy);
    const __m512 c = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16))), dy);
    const __m512 v = _mm512_maskz_fnmadd_ps(live, c, _mm512_cvtepi32_ps(ss), _mm512_mul_ps(a, _mm512_cvtepi32_ps(is)));
    return _mm512_add_ps(_mm512_setzero_ps(), v);
}

static inline __attribute__((always_inline)) void k45_r4_short(bool five, int nb, float *s, const void *vx, size_t stride, const void *vy) {
    const og_block_q8_K *y = vy;
    const size_t bs = five ? sizeof(og_block_q5_K) : sizeof(og_block_q4_K), ahead = r4_ahead(stride);
    const int halves = (nb + 1) / 2;
    const uint8_t *x = vx;
    /* the bsums of blocks 2h, 2h + 1 interleaved by qwords: unit L = [2h's qword L, 2h + 1's] */
    __m512i bsi[4];
    for (int h = 0; h < halves; h++) {
        const __m256i ba = _mm256_loadu_si256((const __m256i *)y[2 * h].bsums);
        const __m256i bb = 2 * h + 1 < nb ? _mm256_loadu_si256((const __m256i *)y[2 * h + 1].bsums) : _mm256_setzero_si256();
        bsi[h] = _mm512_permutex2var_epi64(_mm512_castsi256_si512(ba), _mm512_set_epi64(11, 3, 10, 2, 9, 1, 8, 0), _mm512_castsi256_si512(bb));
    }
    __m512i yq[8][4]; /* Q4_K: k45q_y of each activation block */
    if (!five)
        for (int b = 0; b < nb; b++) k45q_y(&y[b], yq[b]);
    __m512i vi[16], vs[16]; /* [4 h + r]: blocks 2h, 2h + 1 of row r */
    #pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        const uint8_t *xr = x + (size_t)r * stride;
        prefetch_span_l2(xr, ahead, (size_t)nb * bs);
        #pragma GCC unroll 4
        for (int h = 0; h < halves; h++) {
            const uint8_t *xa = xr + (size_t)(2 * h) * bs;
            const bool two = 2 * h + 1 < nb;
            vi[4 * h + r] = k45s_pair(five, xa, two ? xa + bs : NULL, &y[2 * h], two ? &y[2 * h + 1] : NULL, yq[2 * h],
                                      yq[two ? 2 * h + 1 : 2 * h], bsi[h], &vs[4 * h + r]);
        }
    }
    const int top = nb > 4 ? 16 : 8;
    for (int k = 4 * halves; k < top; k++) vi[k] = vs[k] = _mm512_setzero_si512();
    __m512 l = k45s_lanes(r4p_sum(vi, false), r4p_sum(vs, false), x, y, stride, bs, 0, nb);
    if (nb > 4) /* offset 4: lane l + lane l + 4 */
        l = _mm512_add_ps(l, k45s_lanes(r4p_sum(vi + 8, false), r4p_sum(vs + 8, false), x, y, stride, bs, 4, nb));
    const __m512 t = _mm512_add_ps(l, _mm512_shuffle_f32x4(l, l, _MM_SHUFFLE(1, 0, 3, 2))); /* offset 2: blocks b + b + 2 */
    const __m512 u = _mm512_add_ps(t, _mm512_permute_ps(t, _MM_SHUFFLE(1, 0, 3, 2)));       /* offset 1: + the other pair */
    _mm_storeu_ps(s, _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 4, 1, 0), u)));
}
/* k45_r4_short with nb a constant (1 .. 8), so its loops unroll */
#define K45_SHORT(NB) k45_r4_short(five, NB, s, vx, stride, vy)
static inline __attribute__((always_inline)) void k45_r4_short_nb(bool five, int64_t nb, float *s, const void *vx, size_t stride,
                                                                   const void *vy) {
    OG_SWITCH_NV8(nb, K45_SHORT)
}
#undef K45_SHORT

#define Q4P(xa, xb, yb, noff, ss) k45_pair(false, (const uint8_t *)(xa), (const uint8_t *)(xb), yb, ss)
#define Q5P(xa, xb, yb, noff, ss) k45_pair(true, (const uint8_t *)(xa), (const uint8_t *)(xb), yb, ss)
static void q4_K_r4(int64_t n, float *s, const void *vx, size_t stride, const void *vy) {
    if (n <= 8 * OG_QK_K) k45_r4_short_nb(false, n / OG_QK_K, s, vx, stride, vy);
    else OG_CANON_R4P_BODY(og_block_q4_K, 0, true, Q4P, OG_DMIN);
}
static void q5_K_r4(int64_t n, float *s, const void *vx, size_t stride, const void *vy) {
    if (n <= 8 * OG_QK_K) k45_r4_short_nb(true, n / OG_QK_K, s, vx, stride, vy);
    else OG_CANON_R4P_BODY(og_block_q5_K, 0, true, Q5P, OG_DMIN);
}
#undef Q4P
#undef Q5P

/* ---- 32-element formats, two blocks per register --------------------------- */

/* The 32-element formats differ only in how a block's bytes become u8 weights u
 * and what is added back: Q4_0 q = u - 8, Q5_0 q = u - 16 (u = nibble + 16 * fifth
 * bit), IQ4_NL q = table[nibble] = u - 128 (the table biased to unsigned), each
 * bias b taken off as b * sum(y), itself one vpdpbusd; Q4_1 and Q5_1 add m * s
 * (s = d_y sum(q_y), kept in the Q8_1 block). Every field sits at the same place
 * in each format's block: d at 0, m at 2, then qh (Q5), then qs. */
typedef enum { K32_Q4_0, K32_Q4_1, K32_Q5_0, K32_Q5_1, K32_IQ4_NL } k32_kind;

/* The int32 lanes of blocks at x0 and x1 (bytes) against y0 and y1, the bias's sum
 * off: exact in int32. x1 = x0 and y1 = y0 for an odd last block (its lanes low). */
static inline __attribute__((always_inline)) __m512i k32_pair(k32_kind k, const uint8_t *x0, const uint8_t *x1,
                                                               const uint8_t *y0, const uint8_t *y1) {
    static const size_t qs[] = {offsetof(og_block_q4_0, qs), offsetof(og_block_q4_1, qs), offsetof(og_block_q5_0, qs),
                                offsetof(og_block_q5_1, qs), offsetof(og_block_iq4_nl, qs)};
    static const int bias[] = {8, 0, 16, 0, 128};
    const size_t xq = qs[k], xh = k == K32_Q5_0 ? offsetof(og_block_q5_0, qh) : offsetof(og_block_q5_1, qh);
    __m512i u = nibbles_2x16(x0 + xq, x1 + xq);
    if (k == K32_IQ4_NL)
        u = _mm512_shuffle_epi8(_mm512_xor_si512(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)og_iq4nl_values)),
                                                 _mm512_set1_epi8((char)0x80)),
                                u);
    if (k == K32_Q5_0 || k == K32_Q5_1) u = add_fifth_bits(u, x0 + xh, x1 + xh);
    const __m512i yy = bytes_2x32(y0 + offsetof(og_block_q8_0, qs), y1 + offsetof(og_block_q8_0, qs));
    __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, yy);
    if (bias[k]) p = _mm512_sub_epi32(p, _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8((char)bias[k]), yy));
    return p;
}

/* The canonical order of the 32-element formats without mins (Q4_0, Q5_0,
 * IQ4_NL; og_quant.h "Canonical numerics"): as Q8_0's, groups of eight blocks in
 * pairs, then the odd last block. */
static inline __attribute__((always_inline)) void k32_canon_n(k32_kind k, int ny, int64_t n, float *s, const void *vx,
                                                               const void *const *vy) {
    static const size_t size[] = {sizeof(og_block_q4_0), 0, sizeof(og_block_q5_0), 0, sizeof(og_block_iq4_nl)};
    const size_t xs = size[k], ys = sizeof(og_block_q8_0);
    const uint8_t *x = vx;
    const int64_t nb = n / 32;
    __m256 cacc[NYMAX][4];
    og_canon8 g[NYMAX];
    for (int i = 0; i < ny; i++) cacc[i][0] = cacc[i][1] = cacc[i][2] = cacc[i][3] = _mm256_setzero_ps();
    for (int64_t b0 = 0; b0 < nb; b0 += 8) {
        for (int j = 0; j < 8 && b0 + j + 1 < nb; j += 2) {
            const int64_t b = b0 + j;
            const uint8_t *x0 = x + (size_t)b * xs, *x1 = x0 + xs;
            og_prefetch_span(x0, PF_DIST, 2 * xs);
            const float dx0 = og_h16(x0), dx1 = og_h16(x1);
#pragma GCC unroll 4
            for (int i = 0; i < ny; i++) {
                const uint8_t *y0 = (const uint8_t *)vy[i] + (size_t)b * ys, *y1 = y0 + ys;
                const __m512i p = k32_pair(k, x0, x1, y0, y1);
                og_canon_put(&g[i], j, _mm512_castsi512_si256(p), dx0 * og_h16(y0));
                og_canon_put(&g[i], j + 1, _mm512_extracti64x4_epi64(p, 1), dx1 * og_h16(y1));
            }
        }
        if ((nb & 1) && b0 + 8 >= nb) { /* the odd last block, nb - 1, is in this group */
            const uint8_t *x0 = x + (size_t)(nb - 1) * xs;
            for (int i = 0; i < ny; i++) {
                const uint8_t *y0 = (const uint8_t *)vy[i] + (size_t)(nb - 1) * ys;
                og_canon_put(&g[i], (int)(nb - 1 - b0), _mm512_castsi512_si256(k32_pair(k, x0, x0, y0, y0)),
                             og_h16(x0) * og_h16(y0));
            }
        }
        for (int i = 0; i < ny; i++) og_canon_flush(&g[i], cacc[i], b0, nb, false);
    }
    for (int i = 0; i < ny; i++) s[i] = og_canon_finish(cacc[i]);
}

/* og_vec_dot_r4_fn of the 32-element formats without mins (Q8_0, and kind k's
 * Q4_0, Q5_0, IQ4_NL where !q8): four weight rows, one activation row, the
 * canonical order (q8_r4). */
static inline __attribute__((always_inline)) void k32_r4_n(bool q8, k32_kind k, int64_t n, float *s, const void *vx,
                                                            size_t stride, const void *vy) {
    static const size_t size[] = {sizeof(og_block_q4_0), 0, sizeof(og_block_q5_0), 0, sizeof(og_block_iq4_nl)};
    const size_t xs = q8 ? sizeof(og_block_q8_0) : size[k];
    const og_block_q8_0 *y = vy;
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    const int64_t nb = n / 32;
    const size_t ahead = r4_ahead(stride);
    q8_r4 g;
    for (int p = 0; p < 2; p++)
        for (int q = 0; q < 4; q++) g.acc[p][q] = _mm512_setzero_ps();
    for (int64_t b0 = 0; b0 < nb; b0 += 8) {
        const int cnt = nb - b0 < 8 ? (int)(nb - b0) : 8;
        for (int j = 0; j < cnt; j += 2) {
            const int64_t b = b0 + j;
            const bool two = j + 1 < cnt;
            const __m512i yy = two ? bytes_2x32(y[b].qs, y[b + 1].qs) : _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)y[b].qs));
            const __m512i by = q8 ? _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, yy) : _mm512_setzero_si512();
            g.dy[q8_r4_pos(0, j)] = g.dy[q8_r4_pos(1, j)] = y[b].d;
            if (two) g.dy[q8_r4_pos(0, j + 1)] = g.dy[q8_r4_pos(1, j + 1)] = y[b + 1].d;
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
                const uint8_t *x0 = (const uint8_t *)vx + (size_t)r * stride + (size_t)b * xs, *x1 = two ? x0 + xs : x0;
                og_prefetch_span(x0, ahead, 2 * xs);
                if (q8) {
                    const og_block_q8_0 *x = (const og_block_q8_0 *)x0;
                    /* a lone last block: its high half 0x80 against zero activations, so zero lanes */
                    const __m512i xb = _mm512_xor_si512(two ? bytes_2x32(x[0].qs, x[1].qs)
                                                            : _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)x[0].qs)),
                                                        bias);
                    g.p[r][j / 2] = _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), xb, yy), by);
                } else {
                    const uint8_t *y0 = (const uint8_t *)&y[b], *y1 = two ? y0 + sizeof *y : y0;
                    const __m512i p = k32_pair(k, x0, x1, y0, y1);
                    g.p[r][j / 2] = two ? p : _mm512_zextsi256_si512(_mm512_castsi512_si256(p)); /* a lone block: its lanes only */
                }
                uint16_t d0, d1;
                memcpy(&d0, x0, 2);
                memcpy(&d1, x1, 2);
                g.d[r / 2][q8_r4_pos(r, j)] = d0;
                if (two) g.d[r / 2][q8_r4_pos(r, j + 1)] = d1;
            }
        }
        if (cnt == 8) q8_r4_group(&g, b0, 8);
        else q8_r4_group(&g, b0, cnt);
    }
    /* lane l of row A: block l's place; of row B the same, 4 further */
    const __m512i back = _mm512_set_epi32(15, 7, 14, 6, 13, 5, 12, 4, 11, 3, 10, 2, 9, 1, 8, 0);
    __m512 t[2];
    for (int p = 0; p < 2; p++)
        t[p] = _mm512_permutexvar_ps(back, _mm512_add_ps(_mm512_add_ps(g.acc[p][0], g.acc[p][2]), _mm512_add_ps(g.acc[p][1], g.acc[p][3])));
    r4_butterfly(t[0], t[1], s);
}
static void q8_0_r4(int64_t n, float *s, const void *vx, size_t stride, const void *vy) { k32_r4_n(true, K32_Q4_0, n, s, vx, stride, vy); }
static void q4_0_r4(int64_t n, float *s, const void *vx, size_t stride, const void *vy) { k32_r4_n(false, K32_Q4_0, n, s, vx, stride, vy); }
static void q5_0_r4(int64_t n, float *s, const void *vx, size_t stride, const void *vy) { k32_r4_n(false, K32_Q5_0, n, s, vx, stride, vy); }
static void iq4_nl_r4(int64_t n, float *s, const void *vx, size_t stride, const void *vy) { k32_r4_n(false, K32_IQ4_NL, n, s, vx, stride, vy); }

static inline __attribute__((always_inline)) void k32_dot_n(k32_kind k, og_ggml_type t, int ny, int64_t n, float *s,
                                                             const void *vx, const void *const *vy) {
    static const size_t size[] = {sizeof(og_block_q4_0), sizeof(og_block_q4_1), sizeof(og_block_q5_0),
                                  sizeof(og_block_q5_1), sizeof(og_block_iq4_nl)};
    static const size_t qs[] = {offsetof(og_block_q4_0, qs), offsetof(og_block_q4_1, qs), offsetof(og_block_q5_0, qs),
                                offsetof(og_block_q5_1, qs), offsetof(og_block_iq4_nl, qs)};
    static const int bias[] = {8, 0, 16, 0, 128};
    const bool has_min = k == K32_Q4_1 || k == K32_Q5_1, fifth = k == K32_Q5_0 || k == K32_Q5_1;
    const size_t xs = size[k], xq = qs[k], xh = k == K32_Q5_0 ? offsetof(og_block_q5_0, qh) : offsetof(og_block_q5_1, qh);
    const size_t ys = has_min ? sizeof(og_block_q8_1) : sizeof(og_block_q8_0);
    const size_t yq = has_min ? offsetof(og_block_q8_1, qs) : offsetof(og_block_q8_0, qs);
    const uint8_t *x = vx;
    const __m512i vbias = _mm512_set1_epi8((char)bias[k]);
    const __m512i table = _mm512_xor_si512(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)og_iq4nl_values)),
                                           _mm512_set1_epi8((char)0x80));
    __m512 acc[NYMAX];
    float mins0[NYMAX], mins1[NYMAX]; /* two chains: one would make the float adds' latency the pace */
    for (int i = 0; i < ny; i++) acc[i] = _mm512_setzero_ps(), mins0[i] = mins1[i] = 0;
    int64_t nb = n / 32, b = 0;
    for (; b + 1 < nb; b += 2) {
        const uint8_t *x0 = x + (size_t)b * xs, *x1 = x0 + xs;
        og_prefetch_span(x0, PF_DIST, 2 * xs);
        __m512i u = nibbles_2x16(x0 + xq, x1 + xq);
        if (k == K32_IQ4_NL) u = _mm512_shuffle_epi8(table, u);
        if (fifth) u = add_fifth_bits(u, x0 + xh, x1 + xh);
        const float dx0 = og_h16(x0), dx1 = og_h16(x1), mx0 = has_min ? og_h16(x0 + 2) : 0, mx1 = has_min ? og_h16(x1 + 2) : 0;
#pragma GCC unroll 4
        for (int i = 0; i < ny; i++) {
            const uint8_t *y0 = (const uint8_t *)vy[i] + (size_t)b * ys, *y1 = y0 + ys;
            __m512i yy = bytes_2x32(y0 + yq, y1 + yq);
            __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, yy);
            if (bias[k]) p = _mm512_sub_epi32(p, _mm512_dpbusd_epi32(_mm512_setzero_si512(), vbias, yy));
            acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), scales_2(dx0 * og_h16(y0), dx1 * og_h16(y1)), acc[i]);
            if (has_min) {
                mins0[i] += mx0 * og_h16(y0 + 2);
                mins1[i] += mx1 * og_h16(y1 + 2);
            }
        }
    }
    for (int i = 0; i < ny; i++) {
        float sum = _mm512_reduce_add_ps(acc[i]) + (mins0[i] + mins1[i]);
        if (b < nb) sum += ref_block(t, x + (size_t)b * xs, (const uint8_t *)vy[i] + (size_t)b * ys);
        s[i] = sum;
    }
}

#define Q4_0C(ny, n, s, x, y) k32_canon_n(K32_Q4_0, ny, n, s, x, y)
#define Q5_0C(ny, n, s, x, y) k32_canon_n(K32_Q5_0, ny, n, s, x, y)
#define IQ4_NLC(ny, n, s, x, y) k32_canon_n(K32_IQ4_NL, ny, n, s, x, y)
OG_NY_KERNELS(q4_0_canon, Q4_0C)
OG_NY_KERNELS(q5_0_canon, Q5_0C)
OG_NY_KERNELS(iq4_nl_canon, IQ4_NLC)
#undef Q4_0C
#undef Q5_0C
#undef IQ4_NLC
#define Q4_0(ny, n, s, x, y) k32_dot_n(K32_Q4_0, OG_TYPE_Q4_0, ny, n, s, x, y)
#define Q4_1(ny, n, s, x, y) k32_dot_n(K32_Q4_1, OG_TYPE_Q4_1, ny, n, s, x, y)
#define Q5_0(ny, n, s, x, y) k32_dot_n(K32_Q5_0, OG_TYPE_Q5_0, ny, n, s, x, y)
#define Q5_1(ny, n, s, x, y) k32_dot_n(K32_Q5_1, OG_TYPE_Q5_1, ny, n, s, x, y)
#define IQ4_NL(ny, n, s, x, y) k32_dot_n(K32_IQ4_NL, OG_TYPE_IQ4_NL, ny, n, s, x, y)
OG_NY_KERNELS(q4_0, Q4_0)
OG_NY_KERNELS(q4_1, Q4_1)
OG_NY_KERNELS(q5_0, Q5_0)
OG_NY_KERNELS(q5_1, Q5_1)
OG_NY_KERNELS(iq4_nl, IQ4_NL)
#undef Q4_0
#undef Q4_1
#undef Q5_0
#undef Q5_1
#undef IQ4_NL

/* vec_dot (one activation row) and vec_dot4 (four) of each NY kernel, in the
 * fork's order and (name_canon) the canonical one */
#define K4(canon, ny, n, s, x, y) k45_dot_n(false, canon, ny, n, s, x, y)
#define K5(canon, ny, n, s, x, y) k45_dot_n(true, canon, ny, n, s, x, y)
OG_FORK_CANON_KERNELS(q8_0, q8_0_dot_n)
OG_FORK_CANON_KERNELS(q2_K, q2_K_dot_n)
OG_FORK_CANON_KERNELS(q3_K, q3_K_dot_n)
OG_FORK_CANON_KERNELS(q4_K, K4)
OG_FORK_CANON_KERNELS(q5_K, K5)
OG_FORK_CANON_KERNELS(q6_K, q6_K_dot_n)
#undef K4
#undef K5

/* ---- float types -------------------------------------------------------------- */

static void f16_dot(int64_t n, float *s, const void *vx, const void *vy) {
    const uint16_t *x = vx, *y = vy;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        OG_PREFETCH(x + i, PF_DIST);
        a0 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i))),
                             _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(y + i))), a0);
        a1 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i + 16))),
                             _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(y + i + 16))), a1);
    }
    float sum = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
    for (; i < n; i++) sum += FP16(x[i]) * FP16(y[i]);
    *s = sum;
}

/* bf16 -> f32 is a 16-bit shift; no AVX512_BF16 needed (and vdpbf16ps would
 * flush denormals). */
static inline __m512 bf16_widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
static inline __m512 bf16x16(const uint16_t *p) { return bf16_widen(_mm256_loadu_si256((const __m256i *)p)); }
static void bf16_dot(int64_t n, float *s, const void *vx, const void *vy) {
    const uint16_t *x = vx, *y = vy;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        OG_PREFETCH(x + i, PF_DIST);
        a0 = _mm512_fmadd_ps(bf16x16(x + i), bf16x16(y + i), a0);
        a1 = _mm512_fmadd_ps(bf16x16(x + i + 16), bf16x16(y + i + 16), a1);
    }
    float sum = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
    for (; i < n; i++) sum += og_bf16_to_fp32(x[i]) * og_bf16_to_fp32(y[i]);
    *s = sum;
}

/* Lanes 0-15 and 16-31 of the device order, combined as og_warp_reduce32 does:
 * lane l + lane l^o for o = 16, 8, 4, 2, 1. Float addition commutes, so after the
 * first step both halves are equal and one register carries on; each later step
 * adds the register to itself with lanes swapped at distance o. */
static inline float warp_sum(__m512 a0, __m512 a1) {
    __m512 v = _mm512_add_ps(a0, a1);
    v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2))); /* o = 8 */
    v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1))); /* o = 4 */
    v = _mm512_add_ps(v, _mm512_permute_ps(v, _MM_SHUFFLE(1, 0, 3, 2)));       /* o = 2 */
    v = _mm512_add_ps(v, _mm512_permute_ps(v, _MM_SHUFFLE(2, 3, 0, 1)));       /* o = 1 */
    return _mm512_cvtss_f32(v);
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
        __mmask16 m0 = first16(n - i, 0), m1 = first16(n - i, 16);
        a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m0, w + i), _mm512_maskz_loadu_ps(m0, x + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m1, w + i + 16), _mm512_maskz_loadu_ps(m1, x + i + 16), a1);
    }
    return warp_sum(a0, a1);
}

/* Zeroes the lane accumulators of nr rows and says how far ahead to prefetch: the
 * rows are read side by side, so the next rows to stream are the group after
 * this one (one row alone: PF_DIST ahead). */
static inline size_t device_start(int nr, size_t stride, __m512 *a0, __m512 *a1) {
    for (int r = 0; r < nr; r++) a0[r] = a1[r] = _mm512_setzero_ps();
    return nr > 1 ? (size_t)nr * stride : PF_DIST;
}

/* Block i of row r (rows stride bytes apart, blocks bs bytes), with its bytes
 * `ahead` further on prefetched. */
static inline const uint8_t *row_block(const void *row, size_t stride, int r, int64_t i, size_t bs, size_t ahead) {
    const uint8_t *b = (const uint8_t *)row + (size_t)r * stride + (size_t)i * bs;
    og_prefetch_span(b, ahead, bs);
    return b;
}

/* ---- device order of the float types: widen a block, then the fmas ----
 * The block's weights go through the same lane fmas as og_dot_f32_device. */

/* F16 and BF16 rows take 32 elements at a time; the last cnt < 32 are zero-padded
 * (masked loads: +0.0 in both formats), as the device order pads. */
static inline void deq_f16_n(const uint8_t *b, float *w, int64_t cnt) {
    for (int j = 0; j < 32; j += 16)
        _mm512_storeu_ps(w + j, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(first16(cnt, j), b + 2 * j)));
}
static inline void deq_bf16_n(const uint8_t *b, float *w, int64_t cnt) {
    for (int j = 0; j < 32; j += 16)
        _mm512_storeu_ps(w + j, bf16_widen(_mm256_maskz_loadu_epi16(first16(cnt, j), b + 2 * j)));
}
static inline void deq_f16(const uint8_t *b, float *w) { deq_f16_n(b, w, 32); }
static inline void deq_bf16(const uint8_t *b, float *w) { deq_bf16_n(b, w, 32); }
/* nr rows (stride bytes apart) of blocks of qk weights (bs bytes) against x, in
 * device order, each block dequantized by deq into a buffer first. */
static inline __attribute__((always_inline)) void deq_dot_device_n(void (*deq)(const uint8_t *, float *),
                                                                   void (*tail)(const uint8_t *, float *, int64_t), int qk,
                                                                   size_t bs, int nr, const void *row, size_t stride,
                                                                   const float *x, int64_t n, float *out) {
    __m512 a0[NYMAX], a1[NYMAX];
    const size_t ahead = device_start(nr, stride, a0, a1);
    float w[NYMAX][OG_QK_K];
    for (int64_t i = 0; i < n / qk; i++, x += qk) {
#pragma GCC unroll 4
        for (int r = 0; r < nr; r++) {
            deq(row_block(row, stride, r, i, bs, ahead), w[r]);
        }
        for (int c = 0; c < qk; c += 32) {
            const __m512 x0 = _mm512_loadu_ps(x + c), x1 = _mm512_loadu_ps(x + c + 16);
#pragma GCC unroll 4
            for (int r = 0; r < nr; r++) {
                a0[r] = _mm512_fmadd_ps(_mm512_loadu_ps(w[r] + c), x0, a0[r]);
                a1[r] = _mm512_fmadd_ps(_mm512_loadu_ps(w[r] + c + 16), x1, a1[r]);
            }
        }
    }
    if (tail && n % qk) { /* float types: the last n % 32 elements, zero-padded */
        const int64_t cnt = n % qk;
        const __m512 x0 = _mm512_maskz_loadu_ps(first16(cnt, 0), x), x1 = _mm512_maskz_loadu_ps(first16(cnt, 16), x + 16);
        for (int r = 0; r < nr; r++) {
            tail((const uint8_t *)row + (size_t)r * stride + (size_t)(n / qk) * bs, w[r], cnt);
            a0[r] = _mm512_fmadd_ps(_mm512_loadu_ps(w[r]), x0, a0[r]);
            a1[r] = _mm512_fmadd_ps(_mm512_loadu_ps(w[r] + 16), x1, a1[r]);
        }
    }
    for (int r = 0; r < nr; r++) out[r] = warp_sum(a0[r], a1[r]);
}
#define DEQ_KERNEL(name, tail, qk, block)                                                                  \
    static inline __attribute__((always_inline)) void name##_dot_device_n(int nr, const void *row, size_t stride, \
                                                                          const float *x, int64_t n, float *out) { \
        deq_dot_device_n(deq_##name, tail, qk, block, nr, row, stride, x, n, out);                            \
    }
DEQ_KERNEL(f16, deq_f16_n, 32, 64)
DEQ_KERNEL(bf16, deq_bf16_n, 32, 64)
#undef DEQ_KERNEL

/* dot_device (one row) and dot_device4 (four rows row_bytes apart) of each kernel */
#define DEVICE_KERNELS(name)                                                                         \
    static float name##_dot_device(const void *row, const float *x, int64_t n) {                   \
        float out;                                                                                  \
        name##_dot_device_n(1, row, 0, x, n, &out);                                                 \
        return out;                                                                                 \
    }                                                                                               \
    static void name##_dot_device4(const void *row, size_t row_bytes, const float *x, int64_t n, float *out) { \
        name##_dot_device_n(4, row, row_bytes, x, n, out);                                          \
    }
DEVICE_KERNELS(f16)
DEVICE_KERNELS(bf16)
#undef DEVICE_KERNELS

/* ---- activation quantizer ------------------------------------------------------ */

/* Q8_K of a row with the reference's bytes (quant_ref.c q8_K_from_float): the first
 * element of largest magnitude sets iscale = -127 / max, q = round-half-even(iscale
 * x) (vcvtps2dq under the default rounding mode, as the reference's magic-number
 * rounding), at most 127, bsums of 16. A block holding NaN or infinity goes through
 * the reference, whose rounding of those differs. */
static void q8_K_act(const float *x, void *vy, int64_t n) {
    og_block_q8_K *y = vy;
    const og_from_float_fn ref = og_quant_traits(OG_TYPE_Q8_K)->from_float;
    for (int64_t b = 0; b < n / OG_QK_K; b++, x += OG_QK_K) {
        __m512 amax = _mm512_setzero_ps();
        __mmask16 bad = 0;
        for (int j = 0; j < OG_QK_K; j += 16) {
            __m512 v = _mm512_loadu_ps(x + j);
            bad |= _mm512_cmp_ps_mask(_mm512_abs_ps(v), _mm512_set1_ps(INFINITY), _CMP_NLT_UQ); /* NaN or inf */
            amax = _mm512_max_ps(_mm512_abs_ps(v), amax);
        }
        if (bad) {
            ref(x, &y[b], OG_QK_K);
            continue;
        }
        const float a = _mm512_reduce_max_ps(amax);
        if (a == 0) {
            memset(&y[b], 0, sizeof y[b]);
            continue;
        }
        float max = 0;
        for (int j = 0; j < OG_QK_K; j += 16) { /* the first element with |x| = a */
            __mmask16 hit = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + j)), _mm512_set1_ps(a), _CMP_EQ_OQ);
            if (hit) {
                max = x[j + __builtin_ctz(hit)];
                break;
            }
        }
        const float iscale = -127.0f / max;
        const __m512 is = _mm512_set1_ps(iscale);
        for (int j = 0; j < OG_QK_K; j += 16) {
            __m512i q = _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(is, _mm512_loadu_ps(x + j))), _mm512_set1_epi32(127));
            _mm_storeu_si128((__m128i *)(y[b].qs + j), _mm512_cvtepi32_epi8(q));
            y[b].bsums[j / 16] = (int16_t)_mm512_reduce_add_epi32(q);
        }
        y[b].d = 1 / iscale;
    }
}

static void axpy_f32(int64_t n, float a, const float *x, float *y) {
    const __m512 va = _mm512_set1_ps(a);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_add_ps(_mm512_loadu_ps(y + i), _mm512_mul_ps(va, _mm512_loadu_ps(x + i))));
    if (i < n) {
        const __mmask16 m = first16(n - i, 0);
        _mm512_mask_storeu_ps(y + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, y + i), _mm512_mul_ps(va, _mm512_maskz_loadu_ps(m, x + i))));
    }
}

static void f16_to_f32(const uint16_t *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i))));
    if (i < n) {
        const __mmask16 m = first16(n - i, 0);
        _mm512_mask_storeu_ps(y + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x + i)));
    }
}

void og_kernels_fill_avx512(og_kernels *k) {
    k->vec_dot[OG_TYPE_F32] = f32_dot;
    k->vec_dot[OG_TYPE_F16] = f16_dot;
    k->vec_dot[OG_TYPE_BF16] = bf16_dot;
    k->quantize_act[OG_TYPE_Q8_K] = q8_K_act;
    k->axpy_f32 = axpy_f32;
    k->f16_to_f32 = f16_to_f32;
    k->dot_f32_device = dot_f32_device;
    /* quantized types: the dot for one and four activation rows */
#define DOT(T, name) k->vec_dot[T] = name##_dot, k->vec_dot4[T] = name##_dot4
    DOT(OG_TYPE_Q8_0, q8_0);
    DOT(OG_TYPE_Q4_0, q4_0);
    DOT(OG_TYPE_Q4_1, q4_1);
    DOT(OG_TYPE_Q5_0, q5_0);
    DOT(OG_TYPE_Q5_1, q5_1);
    DOT(OG_TYPE_IQ4_NL, iq4_nl);
    DOT(OG_TYPE_Q2_K, q2_K);
    DOT(OG_TYPE_Q3_K, q3_K);
    DOT(OG_TYPE_Q4_K, q4_K);
    DOT(OG_TYPE_Q5_K, q5_K);
    DOT(OG_TYPE_Q6_K, q6_K);
#undef DOT
    /* the canonical order, one and four activation rows */
#define CANON(T, name) k->vec_dot_canonical[T] = name##_canon_dot, k->vec_dot4_canonical[T] = name##_canon_dot4
    CANON(OG_TYPE_Q8_0, q8_0);
    CANON(OG_TYPE_Q4_0, q4_0);
    CANON(OG_TYPE_Q5_0, q5_0);
    CANON(OG_TYPE_IQ4_NL, iq4_nl);
    CANON(OG_TYPE_Q2_K, q2_K);
    CANON(OG_TYPE_Q3_K, q3_K);
    CANON(OG_TYPE_Q4_K, q4_K);
    CANON(OG_TYPE_Q5_K, q5_K);
    CANON(OG_TYPE_Q6_K, q6_K);
#undef CANON
    /* four weight rows against one activation row (matrix x vector) */
    k->vec_dot_r4_canonical[OG_TYPE_Q8_0] = q8_0_r4;
    k->vec_dot_r4_canonical[OG_TYPE_Q4_0] = q4_0_r4;
    k->vec_dot_r4_canonical[OG_TYPE_Q5_0] = q5_0_r4;
    k->vec_dot_r4_canonical[OG_TYPE_IQ4_NL] = iq4_nl_r4;
    k->vec_dot_r4_canonical[OG_TYPE_Q2_K] = q2_K_r4;
    k->vec_dot_r4_canonical[OG_TYPE_Q3_K] = q3_K_r4;
    k->vec_dot_r4_canonical[OG_TYPE_Q4_K] = q4_K_r4;
    k->vec_dot_r4_canonical[OG_TYPE_Q5_K] = q5_K_r4;
    k->vec_dot_r4_canonical[OG_TYPE_Q6_K] = q6_K_r4;
    /* F16 and BF16: the device order for one and four weight rows */
#define DEV(T, name) k->dot_device[T] = name##_dot_device, k->dot_device4[T] = name##_dot_device4
    DEV(OG_TYPE_F16, f16);
    DEV(OG_TYPE_BF16, bf16);
#undef DEV
}
