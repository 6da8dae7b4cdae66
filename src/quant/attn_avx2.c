/* AVX2 tier of attention's tiled kernels (og_kernels.dot_f32_device_tile,
 * axpy_f32_rows): the bits of og_dot_f32_device_tile_ref and
 * og_axpy_f32_rows_ref, as attn_avx512.c with 8-lane registers. A (query,
 * row) pair keeps og_dot_f32_device's 32 lanes in four registers (lanes 0-7,
 * 8-15, 16-23, 24-31); offsets 16 and 8 of the butterfly are (a0 + a2) +
 * (a1 + a3) per pair; offsets 4, 2, 1 fold eight pairs into one register
 * (lanes with bit o set continue the second register's butterfly, the sums
 * are the butterfly's own up to the order of one addition's operands), row
 * bitrev3(j) fed in slot j landing in lane bitrev3(j)'s bit reverse: its own
 * index. */
#include "quant_internal.h"

#include <immintrin.h>
#include <stddef.h>
#include <string.h>

static inline __m256 fold4(__m256 p, __m256 q) {
    return _mm256_add_ps(_mm256_blend_ps(p, q, 0xf0), _mm256_permute2f128_ps(p, q, 0x21));
}
static inline __m256 fold2(__m256 p, __m256 q) {
    return _mm256_add_ps(_mm256_blend_ps(p, q, 0xcc), _mm256_shuffle_ps(p, q, _MM_SHUFFLE(1, 0, 3, 2)));
}
static inline __m256 fold1(__m256 p, __m256 q) {
    const __m256 y = _mm256_blend_ps(_mm256_permute_ps(p, _MM_SHUFFLE(2, 3, 0, 1)), _mm256_permute_ps(q, _MM_SHUFFLE(2, 3, 0, 1)), 0xaa);
    return _mm256_add_ps(_mm256_blend_ps(p, q, 0xaa), y);
}

/* An integer mask of the first cnt of 8 lanes (cnt may exceed 8). */
static inline __m256i first8(int64_t cnt) {
    const int c = cnt > 8 ? 8 : (int)cnt;
    int m[8];
    for (int l = 0; l < 8; l++) m[l] = l < c ? -1 : 0;
    return _mm256_loadu_si256((const __m256i *)m);
}

/* One query against two rows: s[rr] = the pair's butterfly after offsets 16 and 8. */
static inline __attribute__((always_inline)) void lanes_1x2(const float *w0, const float *w1, const float *x, int64_t n,
                                                            __m256 *s) {
    __m256 a[2][4];
    for (int rr = 0; rr < 2; rr++)
        for (int l = 0; l < 4; l++) a[rr][l] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 32 <= n; k += 32)
        for (int l = 0; l < 4; l++) {
            const __m256 xv = _mm256_loadu_ps(x + k + 8 * l);
            a[0][l] = _mm256_fmadd_ps(_mm256_loadu_ps(w0 + k + 8 * l), xv, a[0][l]);
            a[1][l] = _mm256_fmadd_ps(_mm256_loadu_ps(w1 + k + 8 * l), xv, a[1][l]);
        }
    if (k < n) { /* the zero padding: fma(0, 0, acc) as the reference does */
        for (int l = 0; l < 4; l++) {
            const int64_t left = n - k - 8 * l;
            const __m256i m = first8(left > 0 ? left : 0);
            const __m256 xv = _mm256_maskload_ps(x + k + 8 * l, m);
            a[0][l] = _mm256_fmadd_ps(_mm256_maskload_ps(w0 + k + 8 * l, m), xv, a[0][l]);
            a[1][l] = _mm256_fmadd_ps(_mm256_maskload_ps(w1 + k + 8 * l, m), xv, a[1][l]);
        }
    }
    for (int rr = 0; rr < 2; rr++)
        s[rr] = _mm256_add_ps(_mm256_add_ps(a[rr][0], a[rr][2]), _mm256_add_ps(a[rr][1], a[rr][3]));
}

static void dot_f32_device_tile(const float *rows, int64_t row_stride, int64_t n_rows, const float *q, int64_t q_stride,
                                int64_t n_q, int64_t n, float scale, float *out, int64_t ld) {
    const __m256 vs = _mm256_set1_ps(scale);
    for (int64_t i = 0; i < n_q; i++) {
        const float *x = q + i * q_stride;
        for (int64_t r0 = 0; r0 < n_rows; r0 += 8) {
            const float *rp[8];
            for (int rr = 0; rr < 8; rr++) /* rows past the tile repeat its last one (results dropped) */
                rp[rr] = rows + (r0 + rr < n_rows ? r0 + rr : n_rows - 1) * row_stride;
            /* slot j holds row bitrev3(j): slots 0..7 = rows 0, 4, 2, 6, 1, 5, 3, 7 */
            __m256 s04[2], s26[2], s15[2], s37[2];
            lanes_1x2(rp[0], rp[4], x, n, s04);
            lanes_1x2(rp[2], rp[6], x, n, s26);
            lanes_1x2(rp[1], rp[5], x, n, s15);
            lanes_1x2(rp[3], rp[7], x, n, s37);
            const __m256 b0 = fold4(s04[0], s04[1]), b1 = fold4(s26[0], s26[1]);
            const __m256 b2 = fold4(s15[0], s15[1]), b3 = fold4(s37[0], s37[1]);
            const __m256 z = _mm256_mul_ps(fold1(fold2(b0, b1), fold2(b2, b3)), vs);
            const int64_t nr = n_rows - r0;
            if (nr >= 8) _mm256_storeu_ps(out + i * ld + r0, z);
            else _mm256_maskstore_ps(out + i * ld + r0, first8(nr), z);
        }
    }
}

/* y[0 .. 8 nv) (the last register masked by `last`) += a[r] * rows[r], rows in order. */
static inline __attribute__((always_inline)) void axpy_rows_nv(int nv, __m256i last, int64_t n_rows, const float *a,
                                                               const float *rows, int64_t row_stride, float *y) {
    __m256 acc[8];
    for (int v = 0; v < nv; v++) acc[v] = v + 1 < nv ? _mm256_loadu_ps(y + 8 * v) : _mm256_maskload_ps(y + 8 * v, last);
    for (int64_t r = 0; r < n_rows; r++) {
        const __m256 va = _mm256_set1_ps(a[r]);
        const float *x = rows + r * row_stride;
        for (int v = 0; v < nv; v++) {
            const __m256 xv = v + 1 < nv ? _mm256_loadu_ps(x + 8 * v) : _mm256_maskload_ps(x + 8 * v, last);
            acc[v] = _mm256_add_ps(acc[v], _mm256_mul_ps(va, xv)); /* the product rounded, then the sum */
        }
    }
    for (int v = 0; v + 1 < nv; v++) _mm256_storeu_ps(y + 8 * v, acc[v]);
    _mm256_maskstore_ps(y + 8 * (nv - 1), last, acc[nv - 1]);
}

static void axpy_f32_rows(int64_t n, int64_t n_rows, const float *a, const float *rows, int64_t row_stride, float *y) {
    for (int64_t j = 0; j < n; j += 64) {
        const int64_t left = n - j < 64 ? n - j : 64;
        const int nv = (int)((left + 7) / 8);
        const __m256i last = first8(left - 8 * (nv - 1));
#define ROWS(NV) axpy_rows_nv(NV, last, n_rows, a, rows + j, row_stride, y + j)
        OG_SWITCH_NV8(nv, ROWS) /* constant register counts, so the sums stay in registers */
#undef ROWS
    }
}

void og_kernels_fill_attn_avx2(og_kernels *k) {
    k->dot_f32_device_tile = dot_f32_device_tile;
    k->axpy_f32_rows = axpy_f32_rows;
}
