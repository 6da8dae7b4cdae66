/* Scalar reference kernels: conversions, reference quantizers (kquants.md §6,
 * reproducing llama.cpp's quantize_row_*_ref byte for byte), dequantization
 * (§2-§4) and dot products (§5). Every faster path is tested against these. */
#include "quant_internal.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* ---- float conversions (gguf.md §6) ------------------------------------- */

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t og_fp32_to_fp16(float f) {
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t a = x & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00;           /* NaN */
    if (a >= 0x477ff000u) return sign | 0x7c00;          /* rounds to +-inf */
    if (a < 0x38800000u) {                               /* fp16 subnormal or zero */
        /* |f| * 2^24 is exact; rint rounds half to even in the default mode. */
        return sign | (uint16_t)lrintf(bits_f32(a) * 16777216.0f);
    }
    uint32_t h = ((a >> 23) - 112) << 10 | ((a & 0x7fffffu) >> 13);
    uint32_t rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++; /* carry may bump the exponent */
    return sign | (uint16_t)h;
}

float og_fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0) {
        float v = (float)m * (1.0f / 16777216.0f); /* m * 2^-24 */
        return sign ? -v : v;
    }
    if (e == 31) return bits_f32(sign | 0x7f800000u | (m << 13));
    return bits_f32(sign | ((e + 112) << 23) | (m << 13));
}

uint16_t og_fp32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

float og_bf16_to_fp32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

#define FP16(x) og_fp16_to_fp32(x)
#define TO_FP16(x) og_fp32_to_fp16(x)
#define MAXI(a, b) ((a) > (b) ? (a) : (b))
#define MINI(a, b) ((a) < (b) ? (a) : (b))

/* Round to nearest, ties to even, via the 1.5*2^23 trick (valid for |v| <= 2^22);
 * kquants.md notation nearest_int. */
static inline int nearest_int(float v) {
    float t = v + 12582912.0f;
    int32_t i;
    memcpy(&i, &t, 4);
    return (i & 0x007fffff) - 0x00400000;
}

/* ---- F32 / F16 / BF16 ------------------------------------------------------- */

static void f32_to_float(const void *x, float *y, int64_t n) { memcpy(y, x, (size_t)n * 4); }
static void f32_from_float(const float *x, void *y, int64_t n) { memcpy(y, x, (size_t)n * 4); }
static void f16_to_float(const void *x, float *y, int64_t n) {
    const uint16_t *h = x;
    for (int64_t i = 0; i < n; i++) y[i] = FP16(h[i]);
}
static void f16_from_float(const float *x, void *y, int64_t n) {
    uint16_t *h = y;
    for (int64_t i = 0; i < n; i++) h[i] = TO_FP16(x[i]);
}
static void bf16_to_float(const void *x, float *y, int64_t n) {
    const uint16_t *h = x;
    for (int64_t i = 0; i < n; i++) y[i] = og_bf16_to_fp32(h[i]);
}
static void bf16_from_float(const float *x, void *y, int64_t n) {
    uint16_t *h = y;
    for (int64_t i = 0; i < n; i++) h[i] = og_fp32_to_bf16(x[i]);
}

/* Float dots accumulate in double: the reference is the most accurate we have. */
static void f32_vec_dot(int64_t n, float *s, const void *x, const void *y) {
    const float *a = x, *b = y;
    double acc = 0;
    for (int64_t i = 0; i < n; i++) acc += (double)a[i] * b[i];
    *s = (float)acc;
}
static void f16_vec_dot(int64_t n, float *s, const void *x, const void *y) {
    const uint16_t *a = x, *b = y;
    double acc = 0;
    for (int64_t i = 0; i < n; i++) acc += (double)FP16(a[i]) * FP16(b[i]);
    *s = (float)acc;
}
static void bf16_vec_dot(int64_t n, float *s, const void *x, const void *y) {
    const uint16_t *a = x, *b = y;
    double acc = 0;
    for (int64_t i = 0; i < n; i++) acc += (double)og_bf16_to_fp32(a[i]) * og_bf16_to_fp32(b[i]);
    *s = (float)acc;
}

/* ---- 32-element formats (kquants.md §2, §6) ------------------------------- */

/* The element of largest magnitude, with its sign (first one wins on ties). */
static float signed_absmax(const float *x, int n, float *amax_out) {
    float amax = 0, max = 0;
    for (int j = 0; j < n; j++) {
        float a = fabsf(x[j]);
        if (a > amax) {
            amax = a;
            max = x[j];
        }
    }
    if (amax_out) *amax_out = amax;
    return max;
}

static void q4_0_from_float(const float *x, void *vy, int64_t n) {
    og_block_q4_0 *y = vy;
    for (int64_t b = 0; b < n / 32; b++, x += 32) {
        float d = signed_absmax(x, 32, NULL) / -8, id = d ? 1.0f / d : 0.0f;
        y[b].d = TO_FP16(d);
        for (int j = 0; j < 16; j++) {
            uint8_t lo = (uint8_t)MINI(15, (int8_t)(x[j] * id + 8.5f));
            uint8_t hi = (uint8_t)MINI(15, (int8_t)(x[j + 16] * id + 8.5f));
            y[b].qs[j] = lo | (uint8_t)(hi << 4);
        }
    }
}
static void q4_0_to_float(const void *vx, float *y, int64_t n) {
    const og_block_q4_0 *x = vx;
    for (int64_t b = 0; b < n / 32; b++, y += 32) {
        float d = FP16(x[b].d);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)((x[b].qs[j] & 0x0F) - 8);
            y[j + 16] = d * (float)((x[b].qs[j] >> 4) - 8);
        }
    }
}

static void minmax(const float *x, int n, float *mn, float *mx) {
    float lo = FLT_MAX, hi = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < lo) lo = x[j];
        if (x[j] > hi) hi = x[j];
    }
    *mn = lo;
    *mx = hi;
}

static void q4_1_from_float(const float *x, void *vy, int64_t n) {
    og_block_q4_1 *y = vy;
    for (int64_t b = 0; b < n / 32; b++, x += 32) {
        float mn, mx;
        minmax(x, 32, &mn, &mx);
        float d = (mx - mn) / 15, id = d ? 1.0f / d : 0.0f;
        y[b].d = TO_FP16(d);
        y[b].m = TO_FP16(mn);
        for (int j = 0; j < 16; j++) {
            uint8_t lo = (uint8_t)MINI(15, (int8_t)((x[j] - mn) * id + 0.5f));
            uint8_t hi = (uint8_t)MINI(15, (int8_t)((x[j + 16] - mn) * id + 0.5f));
            y[b].qs[j] = lo | (uint8_t)(hi << 4);
        }
    }
}
static void q4_1_to_float(const void *vx, float *y, int64_t n) {
    const og_block_q4_1 *x = vx;
    for (int64_t b = 0; b < n / 32; b++, y += 32) {
        float d = FP16(x[b].d), m = FP16(x[b].m);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)(x[b].qs[j] & 0x0F) + m;
            y[j + 16] = d * (float)(x[b].qs[j] >> 4) + m;
        }
    }
}

/* Q5_0 and Q5_1 store 32 five-bit quants the same way: low nibbles of elements
 * j and j+16 share qs[j], their fifth bits are bits j and j+16 of qh. */
static void q5_pack(const uint8_t L[32], uint8_t qs[16], uint8_t qh_out[4]) {
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (L[j] & 0x0F) | (uint8_t)((L[j + 16] & 0x0F) << 4);
        qh |= (uint32_t)((L[j] & 0x10) >> 4) << j;
        qh |= (uint32_t)((L[j + 16] & 0x10) >> 4) << (j + 16);
    }
    memcpy(qh_out, &qh, 4);
}
static void q5_unpack(const uint8_t qs[16], const uint8_t qh_in[4], int q[32]) {
    uint32_t qh;
    memcpy(&qh, qh_in, 4);
    for (int j = 0; j < 16; j++) {
        q[j] = (qs[j] & 0x0F) | (int)(((qh >> j) & 1) << 4);
        q[j + 16] = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
    }
}

static void q5_0_from_float(const float *x, void *vy, int64_t n) {
    og_block_q5_0 *y = vy;
    for (int64_t b = 0; b < n / 32; b++, x += 32) {
        float d = signed_absmax(x, 32, NULL) / -16, id = d ? 1.0f / d : 0.0f;
        y[b].d = TO_FP16(d);
        uint8_t L[32];
        for (int j = 0; j < 32; j++) L[j] = (uint8_t)MINI(31, (int8_t)(x[j] * id + 16.5f));
        q5_pack(L, y[b].qs, y[b].qh);
    }
}
static void q5_0_to_float(const void *vx, float *y, int64_t n) {
    const og_block_q5_0 *x = vx;
    for (int64_t b = 0; b < n / 32; b++, y += 32) {
        float d = FP16(x[b].d);
        int q[32];
        q5_unpack(x[b].qs, x[b].qh, q);
        for (int j = 0; j < 32; j++) y[j] = d * (float)(q[j] - 16);
    }
}

static void q5_1_from_float(const float *x, void *vy, int64_t n) {
    og_block_q5_1 *y = vy;
    for (int64_t b = 0; b < n / 32; b++, x += 32) {
        float mn, mx;
        minmax(x, 32, &mn, &mx);
        float d = (mx - mn) / 31, id = d ? 1.0f / d : 0.0f;
        y[b].d = TO_FP16(d);
        y[b].m = TO_FP16(mn);
        uint8_t L[32];
        for (int j = 0; j < 32; j++) L[j] = (uint8_t)((x[j] - mn) * id + 0.5f);
        q5_pack(L, y[b].qs, y[b].qh);
    }
}
static void q5_1_to_float(const void *vx, float *y, int64_t n) {
    const og_block_q5_1 *x = vx;
    for (int64_t b = 0; b < n / 32; b++, y += 32) {
        float d = FP16(x[b].d), m = FP16(x[b].m);
        int q[32];
        q5_unpack(x[b].qs, x[b].qh, q);
        for (int j = 0; j < 32; j++) y[j] = d * (float)q[j] + m;
    }
}

static void q8_0_from_float(const float *x, void *vy, int64_t n) {
    og_block_q8_0 *y = vy;
    for (int64_t b = 0; b < n / 32; b++, x += 32) {
        float amax;
        signed_absmax(x, 32, &amax);
        float d = amax / 127, id = d ? 1.0f / d : 0.0f;
        y[b].d = TO_FP16(d);
        for (int j = 0; j < 32; j++) y[b].qs[j] = (int8_t)roundf(x[j] * id);
    }
}
static void q8_0_to_float(const void *vx, float *y, int64_t n) {
    const og_block_q8_0 *x = vx;
    for (int64_t b = 0; b < n / 32; b++, y += 32) {
        float d = FP16(x[b].d);
        for (int j = 0; j < 32; j++) y[j] = d * (float)x[b].qs[j];
    }
}

/* Activation quantizers for dot products. ggml's x86 CPU backend, the peer we
 * check against, quantizes activations with the multiplier 127/max and rounds
 * half to even (not the weights' reference d = max/127 and roundf): a different
 * last bit now and then, which random-routed MoE models can amplify into a
 * different expert. Doing the same keeps onegpu and llama.cpp in step. */
/* nearbyintf(v) as an int8 for the activation quantizers: v is within [-127, 127]
 * for finite input; a non-finite activation (a broken model) must not be
 * undefined behaviour: NaN gives 0, the infinities +-127. */
static inline int8_t act_round(float v) {
    if (v != v) return 0;
    float r = nearbyintf(v);
    return (int8_t)(r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r);
}
static void q8_0_act(const float *x, void *vy, int64_t n) {
    og_block_q8_0 *y = vy;
    for (int64_t b = 0; b < n / 32; b++, x += 32) {
        float amax;
        signed_absmax(x, 32, &amax);
        float id = amax != 0.0f ? 127.f / amax : 0.0f;
        y[b].d = TO_FP16(amax / 127.f);
        for (int j = 0; j < 32; j++) y[b].qs[j] = act_round(x[j] * id);
    }
}
static void q8_1_act(const float *x, void *vy, int64_t n) {
    og_block_q8_1 *y = vy;
    for (int64_t b = 0; b < n / 32; b++, x += 32) {
        float amax;
        signed_absmax(x, 32, &amax);
        float d = amax / 127.f, id = amax != 0.0f ? 127.f / amax : 0.0f;
        y[b].d = TO_FP16(d);
        int sum = 0;
        for (int j = 0; j < 32; j++) sum += (y[b].qs[j] = act_round(x[j] * id));
        y[b].s = TO_FP16(d * (float)sum);
    }
}
og_from_float_fn og_act_quantizer(og_ggml_type t) {
    if (t == OG_TYPE_Q8_0) return q8_0_act;
    if (t == OG_TYPE_Q8_1) return q8_1_act;
    const og_type_traits *tr = og_quant_traits(t);
    return tr ? tr->from_float : NULL;
}

/* Q8_1: Q8_0 plus s = d * sum(q), the activation format of Q4_1/Q5_1. */
static void q8_1_from_float(const float *x, void *vy, int64_t n) {
    og_block_q8_1 *y = vy;
    for (int64_t b = 0; b < n / 32; b++, x += 32) {
        float amax;
        signed_absmax(x, 32, &amax);
        float d = amax / 127, id = d ? 1.0f / d : 0.0f;
        y[b].d = TO_FP16(d);
        int sum = 0;
        for (int j = 0; j < 16; j++) {
            y[b].qs[j] = (int8_t)roundf(x[j] * id);
            y[b].qs[j + 16] = (int8_t)roundf(x[j + 16] * id);
            sum += y[b].qs[j] + y[b].qs[j + 16];
        }
        y[b].s = TO_FP16((float)sum * d);
    }
}
static void q8_1_to_float(const void *vx, float *y, int64_t n) {
    const og_block_q8_1 *x = vx;
    for (int64_t b = 0; b < n / 32; b++, y += 32) {
        float d = FP16(x[b].d);
        for (int j = 0; j < 32; j++) y[j] = d * (float)x[b].qs[j];
    }
}

const int8_t og_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* Index of the table value closest to v (table sorted ascending). */
static int closest_index(const int8_t *t, int n, float v) {
    if (v <= t[0]) return 0;
    if (v >= t[n - 1]) return n - 1;
    int lo = 0, hi = n - 1;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (v < t[mid]) hi = mid;
        else lo = mid;
    }
    return v - t[hi - 1] < t[hi] - v ? hi - 1 : hi;
}

/* IQ4_NL reference quantizer (llama.cpp quantize_row_iq4_nl_ref: no importance
 * matrix, no scale search): map the extreme element to the table's end (-127),
 * pick the nearest table entry for every element, then set the block scale to
 * the weighted least-squares fit with weights x^2. */
static void iq4_nl_from_float(const float *x, void *vy, int64_t n) {
    og_block_iq4_nl *y = vy;
    const int8_t *T = og_iq4nl_values;
    for (int64_t b = 0; b < n / 32; b++, x += 32) {
        uint8_t L[32] = {0};
        float amax;
        float max = signed_absmax(x, 32, &amax);
        float d = 0;
        if (amax >= 1e-15f) {
            float id = 1 / (max / T[0]), sumqx = 0, sumq2 = 0;
            for (int j = 0; j < 32; j++) {
                L[j] = (uint8_t)closest_index(T, 16, id * x[j]);
                float q = T[L[j]], w = x[j] * x[j];
                sumqx += w * q * x[j];
                sumq2 += w * q * q;
            }
            d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
        }
        y[b].d = TO_FP16(d);
        for (int j = 0; j < 16; j++) y[b].qs[j] = L[j] | (uint8_t)(L[j + 16] << 4);
    }
}
static void iq4_nl_to_float(const void *vx, float *y, int64_t n) {
    const og_block_iq4_nl *x = vx;
    for (int64_t b = 0; b < n / 32; b++, y += 32) {
        float d = FP16(x[b].d);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)og_iq4nl_values[x[b].qs[j] & 15];
            y[j + 16] = d * (float)og_iq4nl_values[x[b].qs[j] >> 4];
        }
    }
}

/* ---- dots of 32-element formats (kquants.md §5) --------------------------- */

/* The exact integer sum of a block's quant products (the part of a dot product
 * every order shares), one function per format. */
static int q4_0_isum(const og_block_q4_0 *x, const og_block_q8_0 *y) {
    int isum = 0;
    for (int j = 0; j < 16; j++) isum += ((x->qs[j] & 0x0F) - 8) * y->qs[j] + ((x->qs[j] >> 4) - 8) * y->qs[j + 16];
    return isum;
}
static int q4_1_isum(const og_block_q4_1 *x, const og_block_q8_1 *y) {
    int isum = 0;
    for (int j = 0; j < 16; j++) isum += (x->qs[j] & 0x0F) * y->qs[j] + (x->qs[j] >> 4) * y->qs[j + 16];
    return isum;
}
static int q8_0_isum(const og_block_q8_0 *x, const og_block_q8_0 *y) {
    int isum = 0;
    for (int j = 0; j < 32; j++) isum += x->qs[j] * y->qs[j];
    return isum;
}
static int iq4_nl_isum(const og_block_iq4_nl *x, const og_block_q8_0 *y) {
    int isum = 0;
    for (int j = 0; j < 16; j++) isum += og_iq4nl_values[x->qs[j] & 15] * y->qs[j] + og_iq4nl_values[x->qs[j] >> 4] * y->qs[j + 16];
    return isum;
}

static void q4_0_vec_dot(int64_t n, float *s, const void *vx, const void *vy) {
    const og_block_q4_0 *x = vx;
    const og_block_q8_0 *y = vy;
    float sum = 0;
    for (int64_t b = 0; b < n / 32; b++) sum += (float)q4_0_isum(&x[b], &y[b]) * (FP16(x[b].d) * FP16(y[b].d));
    *s = sum;
}
static void q4_1_vec_dot(int64_t n, float *s, const void *vx, const void *vy) {
    const og_block_q4_1 *x = vx;
    const og_block_q8_1 *y = vy;
    float sum = 0;
    for (int64_t b = 0; b < n / 32; b++)
        sum += (FP16(x[b].d) * FP16(y[b].d)) * (float)q4_1_isum(&x[b], &y[b]) + FP16(x[b].m) * FP16(y[b].s);
    *s = sum;
}
/* sum of (q[j] - offset) * y[j] over a Q5 block's 32 quants */
static int q5_dot(const uint8_t qs[16], const uint8_t qh[4], int offset, const int8_t y[32]) {
    int q[32], isum = 0;
    q5_unpack(qs, qh, q);
    for (int j = 0; j < 32; j++) isum += (q[j] - offset) * y[j];
    return isum;
}
static void q5_0_vec_dot(int64_t n, float *s, const void *vx, const void *vy) {
    const og_block_q5_0 *x = vx;
    const og_block_q8_0 *y = vy;
    float sum = 0;
    for (int64_t b = 0; b < n / 32; b++)
        sum += (float)q5_dot(x[b].qs, x[b].qh, 16, y[b].qs) * (FP16(x[b].d) * FP16(y[b].d));
    *s = sum;
}
static void q5_1_vec_dot(int64_t n, float *s, const void *vx, const void *vy) {
    const og_block_q5_1 *x = vx;
    const og_block_q8_1 *y = vy;
    float sum = 0;
    for (int64_t b = 0; b < n / 32; b++)
        sum += (FP16(x[b].d) * FP16(y[b].d)) * (float)q5_dot(x[b].qs, x[b].qh, 0, y[b].qs) + FP16(x[b].m) * FP16(y[b].s);
    *s = sum;
}
static void q8_0_vec_dot(int64_t n, float *s, const void *vx, const void *vy) {
    const og_block_q8_0 *x = vx, *y = vy;
    float sum = 0;
    for (int64_t b = 0; b < n / 32; b++) sum += (float)q8_0_isum(&x[b], &y[b]) * (FP16(x[b].d) * FP16(y[b].d));
    *s = sum;
}
static void iq4_nl_vec_dot(int64_t n, float *s, const void *vx, const void *vy) {
    const og_block_iq4_nl *x = vx;
    const og_block_q8_0 *y = vy;
    float sum = 0;
    for (int64_t b = 0; b < n / 32; b++) sum += (float)iq4_nl_isum(&x[b], &y[b]) * (FP16(x[b].d) * FP16(y[b].d));
    *s = sum;
}

/* ---- Q8_K (kquants.md §3, §6) ----------------------------------------------- */

static void q8_K_from_float(const float *x, void *vy, int64_t n) {
    og_block_q8_K *y = vy;
    for (int64_t b = 0; b < n / OG_QK_K; b++, x += OG_QK_K) {
        float amax;
        float max = signed_absmax(x, OG_QK_K, &amax);
        if (amax == 0) {
            memset(&y[b], 0, sizeof y[b]);
            continue;
        }
        const float iscale = -127.0f / max;
        for (int j = 0; j < OG_QK_K; j++) y[b].qs[j] = (int8_t)MINI(127, nearest_int(iscale * x[j]));
        for (int j = 0; j < OG_QK_K / 16; j++) {
            int sum = 0;
            for (int i = 0; i < 16; i++) sum += y[b].qs[j * 16 + i];
            y[b].bsums[j] = (int16_t)sum;
        }
        y[b].d = 1 / iscale;
    }
}
static void q8_K_to_float(const void *vx, float *y, int64_t n) {
    const og_block_q8_K *x = vx;
    for (int64_t b = 0; b < n / OG_QK_K; b++, y += OG_QK_K)
        for (int j = 0; j < OG_QK_K; j++) y[j] = x[b].d * (float)x[b].qs[j];
}

/* ---- k-quant helpers (kquants.md §6) ------------------------------------------ */

/* Asymmetric fit x ~ scale*L - min with L in [0, nmax], by weighted least squares
 * over nstep+1 candidate scales ("qkx2"). Returns scale, sets *the_min. */
static float fit_asym(int n, int nmax, const float *x, const float *w, uint8_t *L, float *the_min,
                      uint8_t *Laux, float rmin, float rdelta, int nstep, bool use_mad) {
    float min = x[0], max = x[0], sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min), scale = 1 / iscale, best_error = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)MAXI(0, MINI(nmax, l));
        float diff = scale * L[i] + min - x[i];
        best_error += w[i] * (use_mad ? fabsf(diff) : diff * diff);
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * (float)is + (float)nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = MAXI(0, MINI(nmax, nearest_int(iscale * (x[i] - min))));
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * (float)l;
            sum_l2 += w[i] * (float)l * (float)l;
            sum_xl += w[i] * (float)l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float err = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                err += w[i] * (use_mad ? fabsf(diff) : diff * diff);
            }
            if (err < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = err;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* First pass of both symmetric fits: L = clamp(round(-nmax x / max)) (stored plus
 * `offset`) and the weighted sums (weights x^2) of x*L and L^2. Returns false (L
 * zeroed) for an all-zero group. */
static bool sym_start(int n, int nmax, const float *x, int8_t *L, int offset, float *max_out, float *sumlx,
                      float *suml2) {
    float amax;
    float max = signed_absmax(x, n, &amax);
    if (amax < 1e-15f) {
        memset(L, 0, (size_t)n);
        return false;
    }
    float iscale = -nmax / max;
    *sumlx = *suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = MAXI(-nmax, MINI(nmax - 1, nearest_int(iscale * x[i])));
        L[i] = (int8_t)(l + offset);
        float w = x[i] * x[i];
        *sumlx += w * x[i] * (float)l;
        *suml2 += w * (float)l * (float)l;
    }
    *max_out = max;
    return true;
}

/* Symmetric fit x ~ scale*(L - nmax), L in [0, 2 nmax), weights x^2, trying 19
 * scales around -nmax/max (Q6_K's "qx" fit). Returns scale; L is offset by nmax. */
static float fit_sym_qx(int n, int nmax, const float *x, int8_t *L) {
    float max, sumlx, suml2;
    if (!sym_start(n, nmax, x, L, nmax, &max, &sumlx, &suml2)) return 0.f;
    float iscale, scale = suml2 ? sumlx / suml2 : 0.0f, best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -((float)nmax + 0.1f * (float)is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = MAXI(-nmax, MINI(nmax - 1, nearest_int(iscale * x[i])));
            float w = x[i] * x[i];
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)l * (float)l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) L[i] = (int8_t)(nmax + MAXI(-nmax, MINI(nmax - 1, nearest_int(iscale * x[i]))));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Symmetric fit for Q3_K: start at -nmax/max, then up to 5 passes of coordinate
 * descent with weights x^2 (kquants.md §6 "Q3_K"). L offset by nmax. */
static float fit_sym_q3(int n, int nmax, const float *x, int8_t *L) {
    float max, sumlx, suml2;
    if (!sym_start(n, nmax, x, L, 0, &max, &sumlx, &suml2)) return 0.f;
    for (int itry = 0; itry < 5; itry++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * (float)L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * (float)L[i] * (float)L[i];
                int nl = MAXI(-nmax, MINI(nmax - 1, nearest_int(x[i] * sl2 / slx)));
                if (nl != L[i]) {
                    slx += w * x[i] * (float)nl;
                    sl2 += w * (float)nl * (float)nl;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)nl;
                        sumlx = slx;
                        suml2 = sl2;
                        changed++;
                    }
                }
            }
        }
        if (!changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return sumlx / suml2;
}

/* 6-bit scale j and min j of the Q4_K/Q5_K 12-byte packing (kquants.md §4). */
static inline void scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* ---- Q2_K ------------------------------------------------------------------- */

static void q2_K_from_float(const float *x, void *vy, int64_t n) {
    og_block_q2_K *y = vy;
    for (int64_t b = 0; b < n / OG_QK_K; b++, x += OG_QK_K) {
        uint8_t L[OG_QK_K], Laux[16];
        float w[16], scales[16], mins[16], max_scale = 0, max_min = 0;
        for (int j = 0; j < 16; j++) {
            for (int l = 0; l < 16; l++) w[l] = fabsf(x[16 * j + l]);
            scales[j] = fit_asym(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        if (max_scale > 0) {
            float iscale = 15.f / max_scale;
            for (int j = 0; j < 16; j++) y[b].scales[j] = (uint8_t)nearest_int(iscale * scales[j]);
            y[b].d = TO_FP16(max_scale / 15.f);
        } else {
            memset(y[b].scales, 0, 16);
            y[b].d = TO_FP16(0.f);
        }
        if (max_min > 0) {
            float iscale = 15.f / max_min;
            for (int j = 0; j < 16; j++) y[b].scales[j] |= (uint8_t)(nearest_int(iscale * mins[j]) << 4);
            y[b].dmin = TO_FP16(max_min / 15.f);
        } else {
            y[b].dmin = TO_FP16(0.f);
        }
        for (int j = 0; j < 16; j++) {
            float d = FP16(y[b].d) * (float)(y[b].scales[j] & 0xF);
            if (!d) continue;
            float dm = FP16(y[b].dmin) * (float)(y[b].scales[j] >> 4);
            for (int i = 0; i < 16; i++) L[16 * j + i] = (uint8_t)MAXI(0, MINI(3, nearest_int((x[16 * j + i] + dm) / d)));
        }
        for (int j = 0; j < OG_QK_K; j += 128)
            for (int l = 0; l < 32; l++)
                y[b].qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
    }
}
static void q2_K_to_float(const void *vx, float *y, int64_t n) {
    const og_block_q2_K *x = vx;
    for (int64_t b = 0; b < n / OG_QK_K; b++) {
        float d = FP16(x[b].d), dmin = FP16(x[b].dmin);
        for (int s = 0; s < 16; s++, y += 16) { /* the scale of 16 elements, then the elements */
            uint8_t sc = x[b].scales[s];
            const float dl = d * (float)(sc & 0xF), ml = dmin * (float)(sc >> 4);
            for (int i = 0; i < 16; i++) {
                int e = 16 * s + i, q = (x[b].qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
                y[i] = dl * (float)q - ml;
            }
        }
    }
}
/* sum over sub-blocks of scale * (q . y); *summs = sum of min * bsums */
static int q2_K_isum(const og_block_q2_K *x, const og_block_q8_K *y, int *summs) {
    int isum = 0, ms = 0;
    for (int j = 0; j < 16; j++) ms += y->bsums[j] * (x->scales[j] >> 4);
    for (int sb = 0; sb < 16; sb++) { /* sub-block of 16 elements */
        int is = 0;
        for (int e = 16 * sb; e < 16 * sb + 16; e++) is += y->qs[e] * ((x->qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3);
        isum += (x->scales[sb] & 0xF) * is;
    }
    *summs = ms;
    return isum;
}
static void q2_K_vec_dot(int64_t n, float *s, const void *vx, const void *vy) {
    const og_block_q2_K *x = vx;
    const og_block_q8_K *y = vy;
    float sum = 0;
    for (int64_t b = 0; b < n / OG_QK_K; b++) {
        int summs, isum = q2_K_isum(&x[b], &y[b], &summs);
        sum += y[b].d * FP16(x[b].d) * (float)isum - y[b].d * FP16(x[b].dmin) * (float)summs;
    }
    *s = sum;
}

/* ---- Q3_K ------------------------------------------------------------------- */

static inline int q3_scale(const uint8_t *sc, int s) {
    int lo4 = s < 8 ? sc[s] & 0x0F : sc[s - 8] >> 4;
    int hi2 = (sc[8 + s % 4] >> (2 * (s / 4))) & 3;
    return (lo4 | hi2 << 4) - 32;
}

static void q3_K_from_float(const float *x, void *vy, int64_t n) {
    og_block_q3_K *y = vy;
    for (int64_t b = 0; b < n / OG_QK_K; b++, x += OG_QK_K) {
        int8_t L[OG_QK_K];
        float scales[16], max_scale = 0, amax = 0;
        for (int j = 0; j < 16; j++) {
            scales[j] = fit_sym_q3(16, 4, x + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > amax) {
                amax = fabsf(scales[j]);
                max_scale = scales[j];
            }
        }
        memset(y[b].scales, 0, 12);
        if (max_scale) {
            float iscale = -32.f / max_scale;
            for (int j = 0; j < 16; j++) {
                int l = MAXI(-32, MINI(31, (int8_t)nearest_int(iscale * scales[j]))) + 32;
                if (j < 8) y[b].scales[j] = (uint8_t)(l & 0xF);
                else y[b].scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
                y[b].scales[j % 4 + 8] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
            }
            y[b].d = TO_FP16(1 / iscale);
        } else {
            y[b].d = TO_FP16(0.f);
        }
        for (int j = 0; j < 16; j++) {
            float d = FP16(y[b].d) * (float)q3_scale(y[b].scales, j);
            if (!d) continue;
            for (int i = 0; i < 16; i++) L[16 * j + i] = (int8_t)(MAXI(-4, MINI(3, nearest_int(x[16 * j + i] / d))) + 4);
        }
        memset(y[b].hmask, 0, 32);
        for (int j = 0; j < OG_QK_K; j++) { /* bit j/32 of hmask[j%32] holds element j's bit 2 */
            if (L[j] > 3) {
                y[b].hmask[j % 32] |= (uint8_t)(1 << (j / 32));
                L[j] = (int8_t)(L[j] - 4);
            }
        }
        for (int j = 0; j < OG_QK_K; j += 128)
            for (int l = 0; l < 32; l++)
                y[b].qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
    }
}
static void q3_K_to_float(const void *vx, float *y, int64_t n) {
    const og_block_q3_K *x = vx;
    for (int64_t b = 0; b < n / OG_QK_K; b++) {
        float d = FP16(x[b].d);
        for (int s = 0; s < 16; s++, y += 16) {
            const float dl = d * (float)q3_scale(x[b].scales, s);
            for (int i = 0; i < 16; i++) {
                int e = 16 * s + i;
                int q2 = (x[b].qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
                int h = (x[b].hmask[e % 32] >> (e / 32)) & 1;
                y[i] = dl * (float)(q2 + 4 * h - 4);
            }
        }
    }
}
static int q3_K_isum(const og_block_q3_K *x, const og_block_q8_K *y) {
    int isum = 0;
    for (int sb = 0; sb < 16; sb++) {
        int is = 0;
        for (int e = 16 * sb; e < 16 * sb + 16; e++) {
            int q2 = (x->qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
            int h = (x->hmask[e % 32] >> (e / 32)) & 1;
            is += y->qs[e] * (q2 + 4 * h - 4);
        }
        isum += q3_scale(x->scales, sb) * is;
    }
    return isum;
}
static void q3_K_vec_dot(int64_t n, float *s, const void *vx, const void *vy) {
    const og_block_q3_K *x = vx;
    const og_block_q8_K *y = vy;
    float sum = 0;
    for (int64_t b = 0; b < n / OG_QK_K; b++) sum += FP16(x[b].d) * y[b].d * (float)q3_K_isum(&x[b], &y[b]);
    *s = sum;
}

/* ---- Q4_K / Q5_K -------------------------------------------------------------- */

/* Shared by Q4_K (nmax 15) and Q5_K (nmax 31): per 32-element sub-block fit,
 * 6-bit scales/mins relative to the largest, then requantize (kquants.md §6). */
static void k4_scales(const float *x, int nmax, float rmin, int nstep, uint8_t *L, uint8_t packed[12],
                      uint16_t *d_out, uint16_t *dmin_out) {
    uint8_t Laux[32];
    float w[32], scales[8], mins[8], max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) w[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = fit_asym(32, nmax, x + 32 * j, w, L + 32 * j, &mins[j], Laux, rmin, 0.1f, nstep, false);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    memset(packed, 0, 12);
    for (int j = 0; j < 8; j++) {
        uint8_t ls = (uint8_t)MINI(63, (uint8_t)nearest_int(inv_scale * scales[j]));
        uint8_t lm = (uint8_t)MINI(63, (uint8_t)nearest_int(inv_min * mins[j]));
        if (j < 4) {
            packed[j] = ls;
            packed[j + 4] = lm;
        } else {
            packed[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
            packed[j - 4] |= (uint8_t)((ls >> 4) << 6);
            packed[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *d_out = TO_FP16(max_scale / 63.f);
    *dmin_out = TO_FP16(max_min / 63.f);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        scale_min_k4(j, packed, &sc, &m);
        float d = FP16(*d_out) * (float)sc;
        if (!d) continue;
        float dm = FP16(*dmin_out) * (float)m;
        for (int i = 0; i < 32; i++) L[32 * j + i] = (uint8_t)MAXI(0, MINI(nmax, nearest_int((x[32 * j + i] + dm) / d)));
    }
}

static void q4_K_from_float(const float *x, void *vy, int64_t n) {
    og_block_q4_K *y = vy;
    for (int64_t b = 0; b < n / OG_QK_K; b++, x += OG_QK_K) {
        uint8_t L[OG_QK_K];
        k4_scales(x, 15, -1.f, 20, L, y[b].scales, &y[b].d, &y[b].dmin);
        for (int j = 0; j < OG_QK_K; j += 64)
            for (int l = 0; l < 32; l++) y[b].qs[j / 2 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
    }
}
/* Q4_K and Q5_K share their layout but for Q5_K's fifth bit: element e's quant
 * is nibble e%32 of the 32-byte group e/64 (low nibbles for the first 32), plus
 * 16 times bit e/32 of qh[e%32] when qh is given. */
static inline int k45_quant(const uint8_t *qs, const uint8_t *qh, int e) {
    uint8_t byte = qs[32 * (e / 64) + e % 32];
    int q = (e % 64) < 32 ? byte & 0xF : byte >> 4;
    return qh ? q + 16 * ((qh[e % 32] >> (e / 32)) & 1) : q;
}

static void k45_block_to_float(uint16_t d16, uint16_t dmin16, const uint8_t *scales, const uint8_t *qs,
                               const uint8_t *qh, float *y) {
    float d = FP16(d16), dmin = FP16(dmin16);
    for (int j = 0; j < 8; j++) { /* scale and min of 32 elements, then the elements */
        uint8_t sc, m;
        scale_min_k4(j, scales, &sc, &m);
        const float dl = d * (float)sc, ml = dmin * (float)m;
        for (int e = 32 * j; e < 32 * j + 32; e++) y[e] = dl * (float)k45_quant(qs, qh, e) - ml;
    }
}

/* sum_j sc_j (q . y)_j; *summs = sum_j m_j (y sums of sub-block j) */
static int k45_isum(const uint8_t *scales, const uint8_t *qs, const uint8_t *qh, const og_block_q8_K *y, int *summs_out) {
    int isum = 0, summs = 0;
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        scale_min_k4(j, scales, &sc, &m);
        int is = 0;
        for (int e = 32 * j; e < 32 * j + 32; e++) is += y->qs[e] * k45_quant(qs, qh, e);
        isum += sc * is;
        summs += m * (y->bsums[2 * j] + y->bsums[2 * j + 1]);
    }
    *summs_out = summs;
    return isum;
}
/* d * isum - dmin * summs */
static float k45_block_dot(uint16_t d16, uint16_t dmin16, const uint8_t *scales, const uint8_t *qs, const uint8_t *qh,
                           const og_block_q8_K *y) {
    int summs, isum = k45_isum(scales, qs, qh, y, &summs);
    return FP16(d16) * y->d * (float)isum - FP16(dmin16) * y->d * (float)summs;
}

static void q4_K_to_float(const void *vx, float *y, int64_t n) {
    const og_block_q4_K *x = vx;
    for (int64_t b = 0; b < n / OG_QK_K; b++, y += OG_QK_K) k45_block_to_float(x[b].d, x[b].dmin, x[b].scales, x[b].qs, NULL, y);
}
static void q4_K_vec_dot(int64_t n, float *s, const void *vx, const void *vy) {
    const og_block_q4_K *x = vx;
    const og_block_q8_K *y = vy;
    float sum = 0;
    for (int64_t b = 0; b < n / OG_QK_K; b++) sum += k45_block_dot(x[b].d, x[b].dmin, x[b].scales, x[b].qs, NULL, &y[b]);
    *s = sum;
}

static void q5_K_from_float(const float *x, void *vy, int64_t n) {
    og_block_q5_K *y = vy;
    for (int64_t b = 0; b < n / OG_QK_K; b++, x += OG_QK_K) {
        uint8_t L[OG_QK_K];
        k4_scales(x, 31, -0.5f, 15, L, y[b].scales, &y[b].d, &y[b].dmin);
        memset(y[b].qh, 0, 32);
        for (int e = 0; e < OG_QK_K; e++) { /* 5th bit of element e: bit e/32 of qh[e%32] */
            if (L[e] > 15) y[b].qh[e % 32] |= (uint8_t)(1 << (e / 32));
        }
        for (int j = 0; j < OG_QK_K; j += 64)
            for (int l = 0; l < 32; l++) y[b].qs[j / 2 + l] = (uint8_t)((L[j + l] & 15) | ((L[j + l + 32] & 15) << 4));
    }
}
static void q5_K_to_float(const void *vx, float *y, int64_t n) {
    const og_block_q5_K *x = vx;
    for (int64_t b = 0; b < n / OG_QK_K; b++, y += OG_QK_K)
        k45_block_to_float(x[b].d, x[b].dmin, x[b].scales, x[b].qs, x[b].qh, y);
}
static void q5_K_vec_dot(int64_t n, float *s, const void *vx, const void *vy) {
    const og_block_q5_K *x = vx;
    const og_block_q8_K *y = vy;
    float sum = 0;
    for (int64_t b = 0; b < n / OG_QK_K; b++) sum += k45_block_dot(x[b].d, x[b].dmin, x[b].scales, x[b].qs, x[b].qh, &y[b]);
    *s = sum;
}

/* ---- Q6_K ------------------------------------------------------------------- */

static void q6_K_from_float(const float *x, void *vy, int64_t n) {
    og_block_q6_K *y = vy;
    for (int64_t b = 0; b < n / OG_QK_K; b++, x += OG_QK_K) {
        int8_t L[OG_QK_K];
        float scales[16], max_scale = 0, max_abs = 0;
        for (int j = 0; j < 16; j++) {
            scales[j] = fit_sym_qx(16, 32, x + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > max_abs) {
                max_abs = fabsf(scales[j]);
                max_scale = scales[j];
            }
        }
        if (max_abs < 1e-15f) {
            memset(&y[b], 0, sizeof y[b]);
            continue;
        }
        float iscale = -128.f / max_scale;
        y[b].d = TO_FP16(1 / iscale);
        for (int j = 0; j < 16; j++) y[b].scales[j] = (int8_t)MINI(127, nearest_int(iscale * scales[j]));
        for (int j = 0; j < 16; j++) {
            float d = FP16(y[b].d) * (float)y[b].scales[j];
            if (!d) continue;
            for (int i = 0; i < 16; i++) L[16 * j + i] = (int8_t)(MAXI(-32, MINI(31, nearest_int(x[16 * j + i] / d))) + 32);
        }
        uint8_t *ql = y[b].ql, *qh = y[b].qh;
        for (int j = 0; j < OG_QK_K; j += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; l++) {
                ql[l] = (uint8_t)((L[j + l] & 0xF) | ((L[j + l + 64] & 0xF) << 4));
                ql[l + 32] = (uint8_t)((L[j + l + 32] & 0xF) | ((L[j + l + 96] & 0xF) << 4));
                qh[l] = (uint8_t)((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                                  ((L[j + l + 96] >> 4) << 6));
            }
        }
    }
}
static inline int q6_quant(const og_block_q6_K *x, int e) {
    int h = e / 128, r = e % 128, k = r / 32, l = r % 32;
    int lo4 = (x->ql[64 * h + 32 * (k & 1) + l] >> (4 * (k >> 1))) & 0x0F;
    int hi2 = (x->qh[32 * h + l] >> (2 * k)) & 3;
    return (lo4 | hi2 << 4) - 32;
}
static void q6_K_to_float(const void *vx, float *y, int64_t n) {
    const og_block_q6_K *x = vx;
    for (int64_t b = 0; b < n / OG_QK_K; b++) {
        float d = FP16(x[b].d);
        for (int s = 0; s < 16; s++, y += 16) {
            const float dl = d * (float)x[b].scales[s];
            for (int i = 0; i < 16; i++) y[i] = dl * (float)q6_quant(&x[b], 16 * s + i);
        }
    }
}
static int q6_K_isum(const og_block_q6_K *x, const og_block_q8_K *y) {
    int isum = 0;
    for (int sb = 0; sb < 16; sb++) {
        int is = 0;
        for (int e = 16 * sb; e < 16 * sb + 16; e++) is += y->qs[e] * q6_quant(x, e);
        isum += x->scales[sb] * is;
    }
    return isum;
}
static void q6_K_vec_dot(int64_t n, float *s, const void *vx, const void *vy) {
    const og_block_q6_K *x = vx;
    const og_block_q8_K *y = vy;
    float sum = 0;
    for (int64_t b = 0; b < n / OG_QK_K; b++) sum += FP16(x[b].d) * y[b].d * (float)q6_K_isum(&x[b], &y[b]);
    *s = sum;
}

/* ---- the canonical order (og_quant.h "Canonical numerics") ------------------- */

/* One block's terms: v = fma(-c, m, a * (float)isum) goes to lane b mod 32. */
typedef struct canon_term {
    int32_t isum;
    float a, c, m;
} canon_term;

/* The canonical dot from the terms of each of nb blocks (term(x, y, b, &t) fills
 * block b's, t zeroed first): lanes from +0, the block's float operations as the
 * header states them, then the butterfly of og_dot_f32_device. */
static float canon_dot(void (*term)(const void *, const void *, int64_t, canon_term *), int64_t nb, const void *x,
                       const void *y) {
    float acc[32] = {0};
    for (int64_t b = 0; b < nb; b++) {
        canon_term t = {0, 0, 0, 0};
        term(x, y, b, &t);
        float v = t.a * (float)t.isum;
        v = fmaf(-t.c, t.m, v);
        acc[b & 31] += v;
    }
    return og_warp_reduce32(acc);
}

static void q8_0_term(const void *vx, const void *vy, int64_t b, canon_term *t) {
    const og_block_q8_0 *x = (const og_block_q8_0 *)vx + b, *y = (const og_block_q8_0 *)vy + b;
    t->isum = q8_0_isum(x, y);
    t->a = FP16(x->d) * FP16(y->d);
}
static void q4_0_term(const void *vx, const void *vy, int64_t b, canon_term *t) {
    const og_block_q4_0 *x = (const og_block_q4_0 *)vx + b;
    const og_block_q8_0 *y = (const og_block_q8_0 *)vy + b;
    t->isum = q4_0_isum(x, y);
    t->a = FP16(x->d) * FP16(y->d);
}
static void q4_1_term(const void *vx, const void *vy, int64_t b, canon_term *t) {
    const og_block_q4_1 *x = (const og_block_q4_1 *)vx + b;
    const og_block_q8_1 *y = (const og_block_q8_1 *)vy + b;
    t->isum = q4_1_isum(x, y);
    t->a = FP16(x->d) * FP16(y->d);
    t->c = -FP16(x->m); /* + m * s */
    t->m = FP16(y->s);
}
static void q5_0_term(const void *vx, const void *vy, int64_t b, canon_term *t) {
    const og_block_q5_0 *x = (const og_block_q5_0 *)vx + b;
    const og_block_q8_0 *y = (const og_block_q8_0 *)vy + b;
    t->isum = q5_dot(x->qs, x->qh, 16, y->qs);
    t->a = FP16(x->d) * FP16(y->d);
}
static void q5_1_term(const void *vx, const void *vy, int64_t b, canon_term *t) {
    const og_block_q5_1 *x = (const og_block_q5_1 *)vx + b;
    const og_block_q8_1 *y = (const og_block_q8_1 *)vy + b;
    t->isum = q5_dot(x->qs, x->qh, 0, y->qs);
    t->a = FP16(x->d) * FP16(y->d);
    t->c = -FP16(x->m);
    t->m = FP16(y->s);
}
static void iq4_nl_term(const void *vx, const void *vy, int64_t b, canon_term *t) {
    const og_block_iq4_nl *x = (const og_block_iq4_nl *)vx + b;
    const og_block_q8_0 *y = (const og_block_q8_0 *)vy + b;
    t->isum = iq4_nl_isum(x, y);
    t->a = FP16(x->d) * FP16(y->d);
}
static void q2_K_term(const void *vx, const void *vy, int64_t b, canon_term *t) {
    const og_block_q2_K *x = (const og_block_q2_K *)vx + b;
    const og_block_q8_K *y = (const og_block_q8_K *)vy + b;
    int summs;
    t->isum = q2_K_isum(x, y, &summs);
    t->a = FP16(x->d) * y->d;
    t->c = FP16(x->dmin) * y->d;
    t->m = (float)summs;
}
static void q3_K_term(const void *vx, const void *vy, int64_t b, canon_term *t) {
    const og_block_q3_K *x = (const og_block_q3_K *)vx + b;
    const og_block_q8_K *y = (const og_block_q8_K *)vy + b;
    t->isum = q3_K_isum(x, y);
    t->a = FP16(x->d) * y->d;
}
static void q4_K_term(const void *vx, const void *vy, int64_t b, canon_term *t) {
    const og_block_q4_K *x = (const og_block_q4_K *)vx + b;
    const og_block_q8_K *y = (const og_block_q8_K *)vy + b;
    int summs;
    t->isum = k45_isum(x->scales, x->qs, NULL, y, &summs);
    t->a = FP16(x->d) * y->d;
    t->c = FP16(x->dmin) * y->d;
    t->m = (float)summs;
}
static void q5_K_term(const void *vx, const void *vy, int64_t b, canon_term *t) {
    const og_block_q5_K *x = (const og_block_q5_K *)vx + b;
    const og_block_q8_K *y = (const og_block_q8_K *)vy + b;
    int summs;
    t->isum = k45_isum(x->scales, x->qs, x->qh, y, &summs);
    t->a = FP16(x->d) * y->d;
    t->c = FP16(x->dmin) * y->d;
    t->m = (float)summs;
}
static void q6_K_term(const void *vx, const void *vy, int64_t b, canon_term *t) {
    const og_block_q6_K *x = (const og_block_q6_K *)vx + b;
    const og_block_q8_K *y = (const og_block_q8_K *)vy + b;
    t->isum = q6_K_isum(x, y);
    t->a = FP16(x->d) * y->d;
}

#define CANON(name, qk)                                                                        \
    static void name##_canonical(int64_t n, float *s, const void *x, const void *y) {          \
        *s = canon_dot(name##_term, n / (qk), x, y);                                           \
    }
CANON(q8_0, 32)
CANON(q4_0, 32)
CANON(q4_1, 32)
CANON(q5_0, 32)
CANON(q5_1, 32)
CANON(iq4_nl, 32)
CANON(q2_K, OG_QK_K)
CANON(q3_K, OG_QK_K)
CANON(q4_K, OG_QK_K)
CANON(q5_K, OG_QK_K)
CANON(q6_K, OG_QK_K)
#undef CANON

/* ---- the table ----------------------------------------------------------------- */

static const og_type_traits traits[OG_TYPE_COUNT] = {
    [OG_TYPE_F32] = {OG_TYPE_F32, "F32", 1, 4, OG_TYPE_F32, f32_to_float, f32_from_float, f32_vec_dot, NULL},
    [OG_TYPE_F16] = {OG_TYPE_F16, "F16", 1, 2, OG_TYPE_F16, f16_to_float, f16_from_float, f16_vec_dot, NULL},
    [OG_TYPE_BF16] = {OG_TYPE_BF16, "BF16", 1, 2, OG_TYPE_BF16, bf16_to_float, bf16_from_float, bf16_vec_dot, NULL},
    [OG_TYPE_Q4_0] = {OG_TYPE_Q4_0, "Q4_0", 32, 18, OG_TYPE_Q8_0, q4_0_to_float, q4_0_from_float, q4_0_vec_dot, q4_0_canonical},
    [OG_TYPE_Q4_1] = {OG_TYPE_Q4_1, "Q4_1", 32, 20, OG_TYPE_Q8_1, q4_1_to_float, q4_1_from_float, q4_1_vec_dot, q4_1_canonical},
    [OG_TYPE_Q5_0] = {OG_TYPE_Q5_0, "Q5_0", 32, 22, OG_TYPE_Q8_0, q5_0_to_float, q5_0_from_float, q5_0_vec_dot, q5_0_canonical},
    [OG_TYPE_Q5_1] = {OG_TYPE_Q5_1, "Q5_1", 32, 24, OG_TYPE_Q8_1, q5_1_to_float, q5_1_from_float, q5_1_vec_dot, q5_1_canonical},
    [OG_TYPE_Q8_0] = {OG_TYPE_Q8_0, "Q8_0", 32, 34, OG_TYPE_Q8_0, q8_0_to_float, q8_0_from_float, q8_0_vec_dot, q8_0_canonical},
    [OG_TYPE_Q8_1] = {OG_TYPE_Q8_1, "Q8_1", 32, 36, OG_TYPE_Q8_1, q8_1_to_float, q8_1_from_float, NULL, NULL},
    [OG_TYPE_IQ4_NL] = {OG_TYPE_IQ4_NL, "IQ4_NL", 32, 18, OG_TYPE_Q8_0, iq4_nl_to_float, iq4_nl_from_float, iq4_nl_vec_dot, iq4_nl_canonical},
    [OG_TYPE_Q2_K] = {OG_TYPE_Q2_K, "Q2_K", 256, 84, OG_TYPE_Q8_K, q2_K_to_float, q2_K_from_float, q2_K_vec_dot, q2_K_canonical},
    [OG_TYPE_Q3_K] = {OG_TYPE_Q3_K, "Q3_K", 256, 110, OG_TYPE_Q8_K, q3_K_to_float, q3_K_from_float, q3_K_vec_dot, q3_K_canonical},
    [OG_TYPE_Q4_K] = {OG_TYPE_Q4_K, "Q4_K", 256, 144, OG_TYPE_Q8_K, q4_K_to_float, q4_K_from_float, q4_K_vec_dot, q4_K_canonical},
    [OG_TYPE_Q5_K] = {OG_TYPE_Q5_K, "Q5_K", 256, 176, OG_TYPE_Q8_K, q5_K_to_float, q5_K_from_float, q5_K_vec_dot, q5_K_canonical},
    [OG_TYPE_Q6_K] = {OG_TYPE_Q6_K, "Q6_K", 256, 210, OG_TYPE_Q8_K, q6_K_to_float, q6_K_from_float, q6_K_vec_dot, q6_K_canonical},
    [OG_TYPE_IQ2_XXS] = {OG_TYPE_IQ2_XXS, "IQ2_XXS", 256, 66, OG_TYPE_Q8_K, og_iq2_xxs_to_float, og_iq2_xxs_from_float, og_iq2_xxs_vec_dot, og_iq2_xxs_canonical},
    [OG_TYPE_MXFP4] = {OG_TYPE_MXFP4, "MXFP4", 32, 17, OG_TYPE_Q8_0, og_mxfp4_to_float, og_mxfp4_from_float, og_mxfp4_vec_dot, og_mxfp4_canonical},
    [OG_TYPE_Q8_K] = {OG_TYPE_Q8_K, "Q8_K", 256, 292, OG_TYPE_Q8_K, q8_K_to_float, q8_K_from_float, NULL, NULL},
};

const og_type_traits *og_quant_traits(og_ggml_type t) {
    if ((unsigned)t >= OG_TYPE_COUNT || traits[t].name == NULL) return NULL;
    return &traits[t];
}

og_ggml_type og_quant_fallback_type(og_ggml_type t, int64_t ne0) {
    for (int step = 0; step < 3; step++) {
        const og_type_size *ts = og_type_size_of(t);
        if (ts && ne0 % ts->blck == 0) return t;
        switch (t) {
        case OG_TYPE_Q2_K: case OG_TYPE_Q3_K: case OG_TYPE_TQ1_0: case OG_TYPE_TQ2_0: t = OG_TYPE_Q4_0; break;
        case OG_TYPE_IQ1_S: case OG_TYPE_IQ1_M: case OG_TYPE_IQ2_XXS: case OG_TYPE_IQ2_XS: case OG_TYPE_IQ2_S:
        case OG_TYPE_IQ3_XXS: case OG_TYPE_IQ3_S: case OG_TYPE_IQ4_XS: t = OG_TYPE_IQ4_NL; break;
        case OG_TYPE_Q4_K: t = OG_TYPE_Q5_0; break;
        case OG_TYPE_Q5_K: t = OG_TYPE_Q5_1; break;
        case OG_TYPE_Q6_K: t = OG_TYPE_Q8_0; break;
        default: t = OG_TYPE_F16; break;
        }
    }
    return OG_TYPE_F16;
}

bool og_quant_can_quantize(og_ggml_type t) {
    const og_type_traits *tr = og_quant_traits(t);
    return tr && tr->from_float;
}

og_status og_quantize_row(og_ggml_type t, const float *x, void *dst, int64_t n) {
    const og_type_traits *tr = og_quant_traits(t);
    if (!tr || !tr->from_float) return OG_ERR_UNSUPPORTED;
    if (n < 0 || n % tr->blck) return OG_ERR_INVALID_ARG;
    tr->from_float(x, dst, n);
    return OG_OK;
}

og_status og_dequantize_row(og_ggml_type t, const void *src, float *y, int64_t n) {
    const og_type_traits *tr = og_quant_traits(t);
    if (!tr || !tr->to_float) return OG_ERR_UNSUPPORTED;
    if (n < 0 || n % tr->blck) return OG_ERR_INVALID_ARG;
    tr->to_float(src, y, n);
    return OG_OK;
}

float og_dot_f32_device_ref(const float *w, const float *x, int64_t n) {
    float acc[32] = {0};
    int64_t padded = (n + 31) / 32 * 32;
    for (int64_t i = 0; i < padded; i++)
        acc[i & 31] = i < n ? fmaf(w[i], x[i], acc[i & 31]) : fmaf(0.0f, 0.0f, acc[i & 31]);
    return og_warp_reduce32(acc);
}

void og_f16_to_f32_ref(const uint16_t *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = og_fp16_to_fp32(x[i]);
}

void og_axpy_f32_ref(int64_t n, float a, const float *x, float *y) {
    for (int64_t i = 0; i < n; i++) {
        float p = a * x[i]; /* rounded: C11 without FP_CONTRACT never fuses across a statement */
        y[i] += p;
    }
}

void og_dot_f32_device_tile_ref(const float *rows, int64_t row_stride, int64_t n_rows, const float *q, int64_t q_stride,
                                int64_t n_q, int64_t n, float scale, float *out, int64_t ld) {
    for (int64_t i = 0; i < n_q; i++)
        for (int64_t r = 0; r < n_rows; r++)
            out[i * ld + r] = og_dot_f32_device_ref(rows + r * row_stride, q + i * q_stride, n) * scale;
}

void og_axpy_f32_rows_ref(int64_t n, int64_t n_rows, const float *a, const float *rows, int64_t row_stride, float *y) {
    for (int64_t r = 0; r < n_rows; r++) og_axpy_f32_ref(n, a[r], rows + r * row_stride, y);
}
