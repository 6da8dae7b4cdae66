#include "og_quant.h"

#include <math.h>
#include <string.h>

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

bool og_quant_can_quantize(og_ggml_type t) {
    return t == OG_TYPE_F32 || t == OG_TYPE_F16 || t == OG_TYPE_BF16 || t == OG_TYPE_Q8_0;
}

/* kquants.md §6 "Q8_0": d = amax/127, q = roundf(x/d), fp16(d) stored. */
static void quantize_q8_0(const float *x, og_block_q8_0 *y, int64_t nb) {
    for (int64_t b = 0; b < nb; b++) {
        const float *xb = x + b * OG_QK8_0;
        float amax = 0;
        for (int i = 0; i < OG_QK8_0; i++) amax = fmaxf(amax, fabsf(xb[i]));
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = og_fp32_to_fp16(d);
        for (int i = 0; i < OG_QK8_0; i++) y[b].qs[i] = (int8_t)roundf(xb[i] * id);
    }
}

og_status og_quantize_row(og_ggml_type t, const float *x, void *dst, int64_t n) {
    const og_type_size *ts = og_type_size_of(t);
    if (!ts || !og_quant_can_quantize(t)) return OG_ERR_UNSUPPORTED;
    if (n < 0 || n % ts->blck) return OG_ERR_INVALID_ARG;
    switch (t) {
    case OG_TYPE_F32: memcpy(dst, x, (size_t)n * 4); break;
    case OG_TYPE_F16: {
        uint16_t *y = dst;
        for (int64_t i = 0; i < n; i++) y[i] = og_fp32_to_fp16(x[i]);
        break;
    }
    case OG_TYPE_BF16: {
        uint16_t *y = dst;
        for (int64_t i = 0; i < n; i++) y[i] = og_fp32_to_bf16(x[i]);
        break;
    }
    case OG_TYPE_Q8_0: quantize_q8_0(x, dst, n / OG_QK8_0); break;
    default: return OG_ERR_UNSUPPORTED;
    }
    return OG_OK;
}

og_status og_dequantize_row(og_ggml_type t, const void *src, float *y, int64_t n) {
    const og_type_size *ts = og_type_size_of(t);
    if (!ts || !og_quant_can_quantize(t)) return OG_ERR_UNSUPPORTED;
    if (n < 0 || n % ts->blck) return OG_ERR_INVALID_ARG;
    switch (t) {
    case OG_TYPE_F32: memcpy(y, src, (size_t)n * 4); break;
    case OG_TYPE_F16: {
        const uint16_t *x = src;
        for (int64_t i = 0; i < n; i++) y[i] = og_fp16_to_fp32(x[i]);
        break;
    }
    case OG_TYPE_BF16: {
        const uint16_t *x = src;
        for (int64_t i = 0; i < n; i++) y[i] = og_bf16_to_fp32(x[i]);
        break;
    }
    case OG_TYPE_Q8_0: {
        const og_block_q8_0 *x = src;
        for (int64_t b = 0; b < n / OG_QK8_0; b++) {
            float d = og_fp16_to_fp32(x[b].d);
            for (int i = 0; i < OG_QK8_0; i++) y[b * OG_QK8_0 + i] = d * (float)x[b].qs[i];
        }
        break;
    }
    default: return OG_ERR_UNSUPPORTED;
    }
    return OG_OK;
}
