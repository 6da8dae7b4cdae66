/* The canonical numerics (og_quant.h "Canonical numerics") written once for the
 * host C compiler and for nvcc: one function per weight type giving a block's
 * term (its exact integer sums and the float factors of step 2), the per-block
 * float sequence og_canon_v, and the activation quantizers of og_kernels
 * (Q8_0 act, Q8_K), all as inline functions with no libm call whose result
 * could differ between the two compilers: every float operation here is a single
 * IEEE operation (+, -, *, /, fma, rint), which CUDA performs correctly rounded
 * when built without --use_fast_math and with --fmad=false (so no a * b + c is
 * contracted into an fma behind our back; the C side is ISO C11, which gcc and
 * clang never contract across statements, and every product here is its own
 * statement). The CUDA kernels (src/backend/cuda/kernels.cu) call exactly these;
 * tests/unit/test_quant_canon.c checks them on the CPU against quant_ref.c's
 * og_type_traits.vec_dot_canonical and og_kernels.quantize_act, bit for bit.
 *
 * Block layouts: og_quant_blocks.h (kquants.md §1-§4). Not a public header of a
 * part: included by src/quant tests and by the CUDA backend. */
#ifndef OG_QUANT_CANON_H
#define OG_QUANT_CANON_H

#include <stdint.h>
#include <string.h>

#include "og_gguf.h"
#include "og_canon_exp.h"
#include "og_quant_blocks.h"

#ifdef __CUDACC__
#define OG_HD __host__ __device__ __forceinline__
#else
#define OG_HD __attribute__((always_inline)) inline
#endif

/* ---- bit-exact conversions ---- */

static OG_HD float og_canon_bits_f32(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}
static OG_HD uint32_t og_canon_f32_bits(float f) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
#endif
}

/* binary16 -> binary32 (exact; gguf.md §6), integer operations only. */
static OG_HD float og_canon_h2f(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu;
    uint32_t m = h & 0x3ffu;
    if (e == 0x1f) return og_canon_bits_f32(sign | 0x7f800000u | (m << 13));
    if (e) return og_canon_bits_f32(sign | ((e + 112) << 23) | (m << 13));
    if (!m) return og_canon_bits_f32(sign);
    uint32_t k = 0; /* subnormal m * 2^-24: normalize so bit 10 is set */
    while (!(m & 0x400u)) {
        m <<= 1;
        k++;
    }
    return og_canon_bits_f32(sign | ((113 - k) << 23) | ((m & 0x3ffu) << 13));
}

/* binary32 -> binary16, round to nearest even (og_fp32_to_fp16's result, bit for bit:
 * NaN becomes the quiet 0x7e00 with the sign), integer operations only. */
static OG_HD uint16_t og_canon_f2h(float f) {
    const uint32_t x = og_canon_f32_bits(f), a = x & 0x7fffffffu;
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* fp16 subnormal or zero: |f| * 2^24 rounded half to even */
        const uint32_t e = a >> 23;
        if (e < 102) return sign; /* below 2^-25: rounds to 0 (2^-25 itself is a tie to even 0) */
        const uint32_t mant = (a & 0x7fffffu) | 0x800000u, shift = 126 - e; /* value = mant * 2^(e-150) */
        uint32_t q = mant >> shift; /* |f| * 2^24 = mant * 2^(e - 126) */
        const uint32_t rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t h = ((a >> 23) - 112) << 10 | ((a & 0x7fffffu) >> 13);
    const uint32_t rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

static OG_HD float og_canon_fma(float a, float b, float c) {
#ifdef __CUDA_ARCH__
    return __fmaf_rn(a, b, c);
#else
    return __builtin_fmaf(a, b, c);
#endif
}
static OG_HD float og_canon_mul(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
static OG_HD float og_canon_add(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}

/* ---- one block's term (og_quant.h "Canonical numerics" steps 1 and 2) ---- */

typedef struct og_canon_term {
    int32_t isum; /* I_b */
    float a;      /* a_b = dx_b * dy_b */
    float c, m;   /* c_b, m_b (0, 0 for types without mins) */
} og_canon_term;

/* Step 2: v_b = fma(-c_b, m_b, a_b * (float)I_b), the product rounded first. */
static OG_HD float og_canon_v(og_canon_term t) {
    const float v = og_canon_mul(t.a, (float)t.isum);
    return og_canon_fma(-t.c, t.m, v);
}

/* Q8_0 x Q8_0: I = sum q_x q_y; a = dx * dy (both fp16). */
static OG_HD og_canon_term og_canon_q8_0(const og_block_q8_0 *x, const og_block_q8_0 *y) {
    int32_t is = 0;
    for (int j = 0; j < 32; j++) is += (int32_t)x->qs[j] * y->qs[j];
    og_canon_term t = {is, og_canon_mul(og_canon_h2f(x->d), og_canon_h2f(y->d)), 0.0f, 0.0f};
    return t;
}
/* Q4_0 x Q8_0: I = sum (q - 8) q_y; element j low nibble of qs[j], j + 16 the high one. */
static OG_HD og_canon_term og_canon_q4_0(const og_block_q4_0 *x, const og_block_q8_0 *y) {
    int32_t is = 0;
    for (int j = 0; j < 16; j++) is += ((x->qs[j] & 0x0F) - 8) * y->qs[j] + ((x->qs[j] >> 4) - 8) * y->qs[j + 16];
    og_canon_term t = {is, og_canon_mul(og_canon_h2f(x->d), og_canon_h2f(y->d)), 0.0f, 0.0f};
    return t;
}
/* Q5_0 x Q8_0: I = sum (q - 16) q_y, the fifth bit of element j is bit j of qh. */
static OG_HD og_canon_term og_canon_q5_0(const og_block_q5_0 *x, const og_block_q8_0 *y) {
    const uint32_t qh = (uint32_t)x->qh[0] | (uint32_t)x->qh[1] << 8 | (uint32_t)x->qh[2] << 16 | (uint32_t)x->qh[3] << 24;
    int32_t is = 0;
    for (int j = 0; j < 16; j++) {
        const int lo = (x->qs[j] & 0x0F) | (int)(((qh >> j) & 1) << 4);
        const int hi = (x->qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
        is += (lo - 16) * y->qs[j] + (hi - 16) * y->qs[j + 16];
    }
    og_canon_term t = {is, og_canon_mul(og_canon_h2f(x->d), og_canon_h2f(y->d)), 0.0f, 0.0f};
    return t;
}

/* The 2-bit field of element e of a Q2_K / Q3_K block's qs (kquants.md §4). */
static OG_HD int og_canon_q2bits(const uint8_t *qs, int e) {
    return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

/* Q2_K x Q8_K: I = sum_sb (scale_sb & 15) (q . y)_sb, S = sum_sb (scale_sb >> 4) bsums_sb;
 * a = d * dy, c = dmin * dy, m = (float)S. */
static OG_HD og_canon_term og_canon_q2_K(const og_block_q2_K *x, const og_block_q8_K *y) {
    int32_t is = 0, ms = 0;
    for (int sb = 0; sb < 16; sb++) {
        int32_t s = 0;
        for (int e = 16 * sb; e < 16 * sb + 16; e++) s += y->qs[e] * og_canon_q2bits(x->qs, e);
        is += (x->scales[sb] & 0xF) * s;
        ms += y->bsums[sb] * (x->scales[sb] >> 4);
    }
    og_canon_term t = {is, og_canon_mul(og_canon_h2f(x->d), y->d), og_canon_mul(og_canon_h2f(x->dmin), y->d), (float)ms};
    return t;
}

/* Q3_K x Q8_K: I = sum_sb (scale_sb - 32) (sum (q2 + 4h - 4) y)_sb; a = d * dy. */
static OG_HD og_canon_term og_canon_q3_K(const og_block_q3_K *x, const og_block_q8_K *y) {
    int32_t is = 0;
    for (int sb = 0; sb < 16; sb++) {
        const int lo4 = sb < 8 ? x->scales[sb] & 0x0F : x->scales[sb - 8] >> 4;
        const int hi2 = (x->scales[8 + sb % 4] >> (2 * (sb / 4))) & 3;
        int32_t s = 0;
        for (int e = 16 * sb; e < 16 * sb + 16; e++) {
            const int h = (x->hmask[e % 32] >> (e / 32)) & 1;
            s += y->qs[e] * (og_canon_q2bits(x->qs, e) + 4 * h - 4);
        }
        is += ((lo4 | hi2 << 4) - 32) * s;
    }
    og_canon_term t = {is, og_canon_mul(og_canon_h2f(x->d), y->d), 0.0f, 0.0f};
    return t;
}

/* Q4_K / Q5_K: sub-block j's 6-bit scale and min (kquants.md §3). */
static OG_HD void og_canon_k4_scale_min(const uint8_t *scales, int j, int *sc, int *mn) {
    if (j < 4) {
        *sc = scales[j] & 63;
        *mn = scales[j + 4] & 63;
    } else {
        *sc = (scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4);
        *mn = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
    }
}
/* Q4_K / Q5_K: element e's quant, nibble e % 32 of 32-byte group e / 64 (+ 16 x bit e / 32 of qh[e % 32]). */
static OG_HD int og_canon_k45_quant(const uint8_t *qs, const uint8_t *qh, int e) {
    const uint8_t byte = qs[32 * (e / 64) + e % 32];
    const int q = (e % 64) < 32 ? byte & 0xF : byte >> 4;
    return qh ? q + 16 * ((qh[e % 32] >> (e / 32)) & 1) : q;
}

/* Q4_K / Q5_K (qh NULL for Q4_K): I = sum_j sc_j (q . y)_j over 8 sub-blocks of 32,
 * S = sum_j m_j (bsums_2j + bsums_2j+1); a = d * dy, c = dmin * dy, m = (float)S. */
static OG_HD og_canon_term og_canon_k45(uint16_t d, uint16_t dmin, const uint8_t *scales, const uint8_t *qs,
                                        const uint8_t *qh, const og_block_q8_K *y) {
    int32_t is = 0, ms = 0;
    for (int j = 0; j < 8; j++) {
        int sc, mn;
        og_canon_k4_scale_min(scales, j, &sc, &mn);
        int32_t s = 0;
        for (int e = 32 * j; e < 32 * j + 32; e++) s += y->qs[e] * og_canon_k45_quant(qs, qh, e);
        is += sc * s;
        ms += mn * (y->bsums[2 * j] + y->bsums[2 * j + 1]);
    }
    og_canon_term t = {is, og_canon_mul(og_canon_h2f(d), y->d), og_canon_mul(og_canon_h2f(dmin), y->d), (float)ms};
    return t;
}
static OG_HD og_canon_term og_canon_q4_K(const og_block_q4_K *x, const og_block_q8_K *y) {
    return og_canon_k45(x->d, x->dmin, x->scales, x->qs, 0, y);
}
static OG_HD og_canon_term og_canon_q5_K(const og_block_q5_K *x, const og_block_q8_K *y) {
    return og_canon_k45(x->d, x->dmin, x->scales, x->qs, x->qh, y);
}

/* Q6_K x Q8_K: I = sum_sb scale_sb (sum (u - 32) y)_sb, u the 6-bit quant; a = d * dy. */
static OG_HD og_canon_term og_canon_q6_K(const og_block_q6_K *x, const og_block_q8_K *y) {
    int32_t is = 0;
    for (int sb = 0; sb < 16; sb++) {
        int32_t s = 0;
        for (int e = 16 * sb; e < 16 * sb + 16; e++) {
            const int h = e / 128, r = e % 128, k = r / 32, l = r % 32;
            const int lo4 = (x->ql[64 * h + 32 * (k & 1) + l] >> (4 * (k >> 1))) & 0x0F;
            const int hi2 = (x->qh[32 * h + l] >> (2 * k)) & 3;
            s += y->qs[e] * ((lo4 | hi2 << 4) - 32);
        }
        is += x->scales[sb] * s;
    }
    og_canon_term t = {is, og_canon_mul(og_canon_h2f(x->d), y->d), 0.0f, 0.0f};
    return t;
}

/* ---- IQ2_XXS and MXFP4 (og_quant_blocks.h's layouts) ----
 * The IQ2_XXS grid: each of the 256 points is 8 weights from {8, 25, 43}, written
 * as the base-3 number whose digit j (least significant first) is weight j's level
 * (0: 8, 1: 25, 2: 43), expanded at compile time into the 8 bytes a kernel reads
 * (byte j = weight j). quant_iq.c builds og_iq2xxs_grid (the SIMD tiers' table)
 * from the same list; tests/cli/ref_iquants.sh checks it against llama.cpp's. */
#define OG_IQ2XXS_LEVEL(d) ((d) == 0 ? UINT64_C(8) : (d) == 1 ? UINT64_C(25) : UINT64_C(43))
#define OG_IQ2XXS_W(c, j, p3) (OG_IQ2XXS_LEVEL(((c) / (p3)) % 3) << (8 * (j)))
#define OG_IQ2XXS_G8(c)                                                                                        \
    (OG_IQ2XXS_W(c, 0, 1) | OG_IQ2XXS_W(c, 1, 3) | OG_IQ2XXS_W(c, 2, 9) | OG_IQ2XXS_W(c, 3, 27) |               \
     OG_IQ2XXS_W(c, 4, 81) | OG_IQ2XXS_W(c, 5, 243) | OG_IQ2XXS_W(c, 6, 729) | OG_IQ2XXS_W(c, 7, 2187))
#define OG_IQ2XXS_POINTS(X) \
    X(0) X(2) X(4) X(6) X(8) X(10) X(12) X(18) X(20) X(24) X(26) X(28) X(30) X(36) X(42) X(46) \
    X(48) X(54) X(56) X(62) X(74) X(82) X(84) X(90) X(94) X(108) X(138) X(150) X(162) X(164) X(182) X(218) \
    X(244) X(246) X(252) X(262) X(264) X(270) X(272) X(276) X(288) X(298) X(300) X(306) X(318) X(324) X(326) X(330) \
    X(342) X(356) X(376) X(378) X(388) X(412) X(414) X(432) X(462) X(480) X(486) X(490) X(492) X(498) X(510) X(514) \
    X(516) X(522) X(524) X(546) X(570) X(594) X(650) X(660) X(730) X(732) X(738) X(748) X(756) X(774) X(786) X(792) \
    X(796) X(810) X(816) X(828) X(846) X(854) X(864) X(912) X(922) X(972) X(978) X(990) X(994) X(1006) X(1026) X(1068) \
    X(1100) X(1134) X(1148) X(1216) X(1218) X(1224) X(1242) X(1270) X(1296) X(1300) X(1368) X(1414) X(1458) X(1460) X(1466) X(1488) \
    X(1504) X(1512) X(1514) X(1564) X(1572) X(1620) X(1622) X(1702) X(1704) X(1710) X(1728) X(1742) X(1782) X(1810) X(1830) X(1926) \
    X(1950) X(1962) X(2010) X(2136) X(2188) X(2190) X(2196) X(2202) X(2206) X(2208) X(2214) X(2220) X(2228) X(2232) X(2242) X(2244) \
    X(2250) X(2268) X(2286) X(2314) X(2322) X(2326) X(2350) X(2358) X(2382) X(2390) X(2400) X(2430) X(2436) X(2448) X(2484) X(2500) \
    X(2522) X(2532) X(2592) X(2674) X(2676) X(2682) X(2700) X(2704) X(2754) X(2796) X(2800) X(2810) X(2866) X(2898) X(2916) X(2922) \
    X(2926) X(2932) X(2934) X(2970) X(2976) X(3000) X(3026) X(3072) X(3142) X(3222) X(3224) X(3248) X(3322) X(3360) X(3402) X(3412) \
    X(3418) X(3450) X(3510) X(3570) X(3648) X(3654) X(3672) X(3696) X(3726) X(3766) X(3822) X(3852) X(3888) X(3892) X(3978) X(3980) \
    X(4026) X(4160) X(4374) X(4376) X(4382) X(4402) X(4430) X(4458) X(4470) X(4482) X(4546) X(4618) X(4620) X(4626) X(4630) X(4644) \
    X(4662) X(4698) X(4730) X(4764) X(4786) X(4806) X(4824) X(4862) X(4944) X(5032) X(5106) X(5112) X(5124) X(5130) X(5176) X(5198) \
    X(5238) X(5296) X(5346) X(5366) X(5376) X(5464) X(5644) X(5688) X(5834) X(5868) X(5890) X(5920) X(5994) X(6090) X(6354) X(6402)
#define OG_IQ2XXS_ENTRY(c) OG_IQ2XXS_G8(c),
/* The grid for the functions below: a device copy for the kernels, a host one
 * for the C callers (quant_iq.c's scalar canonical dot, the tests). */
#ifdef __CUDACC__
static __device__ const uint64_t og_canon_iq2_grid_dev[256] = {OG_IQ2XXS_POINTS(OG_IQ2XXS_ENTRY)};
#else
static const uint64_t og_canon_iq2_grid_host[256] = {OG_IQ2XXS_POINTS(OG_IQ2XXS_ENTRY)};
#endif

static OG_HD uint64_t og_canon_iq2_grid(uint32_t i) {
#ifdef __CUDA_ARCH__
    return og_canon_iq2_grid_dev[i];
#elif defined(__CUDACC__)
    (void)i;
    return 0; /* the host side of a .cu file computes no IQ2_XXS product */
#else
    return og_canon_iq2_grid_host[i];
#endif
}

/* Sign pattern i < 128 of IQ2_XXS: its 7 bits, bit 7 set when they hold an odd
 * count of ones (so the count of negatives is even); og_iq2xxs_signs[i]. */
static OG_HD uint32_t og_canon_iq2_signs(uint32_t i) {
    const uint32_t p = (i ^ i >> 1 ^ i >> 2 ^ i >> 3 ^ i >> 4 ^ i >> 5 ^ i >> 6) & 1;
    return i | p << 7;
}

/* Sub-block s of an IQ2_XXS block as its two little-endian u32 words (a0: four
 * grid indices; a1: four 7-bit sign fields and the scale ls = a1 >> 28). */
static OG_HD void og_canon_iq2_words(const og_block_iq2_xxs *x, int s, uint32_t *a0, uint32_t *a1) {
    *a0 = (uint32_t)x->qs[4 * s] | (uint32_t)x->qs[4 * s + 1] << 16;
    *a1 = (uint32_t)x->qs[4 * s + 2] | (uint32_t)x->qs[4 * s + 3] << 16;
}

/* IQ2_XXS x Q8_K's I_b: sum over sub-blocks of (2 ls + 1) * (grid * sign . y). */
static OG_HD int32_t og_canon_iq2_xxs_isum(const og_block_iq2_xxs *x, const og_block_q8_K *y) {
    int32_t isum = 0;
    for (int s = 0; s < 8; s++) {
        uint32_t a0, a1;
        og_canon_iq2_words(x, s, &a0, &a1);
        int32_t sub = 0;
        for (int l = 0; l < 4; l++) {
            const uint64_t g = og_canon_iq2_grid((a0 >> 8 * l) & 255);
            const uint32_t sg = og_canon_iq2_signs((a1 >> 7 * l) & 127);
            const int8_t *q8 = y->qs + 32 * s + 8 * l;
            for (int j = 0; j < 8; j++) {
                const int32_t w = (int32_t)((g >> 8 * j) & 255);
                sub += (sg >> j) & 1 ? -w * q8[j] : w * q8[j];
            }
        }
        isum += (int32_t)(2 * (a1 >> 28) + 1) * sub;
    }
    return isum;
}
/* IQ2_XXS x Q8_K: a = (d * dy) * 0.125f, two roundings (the format's 1/8). */
static OG_HD og_canon_term og_canon_iq2_xxs(const og_block_iq2_xxs *x, const og_block_q8_K *y) {
    og_canon_term t = {og_canon_iq2_xxs_isum(x, y), og_canon_mul(og_canon_mul(og_canon_h2f(x->d), y->d), 0.125f), 0.0f,
                       0.0f};
    return t;
}

/* The E2M1 value of nibble q doubled (og_mxfp4_values[q]): magnitudes 0, 1, 2, 3,
 * 4, 6, 8, 12, bit 3 the sign. */
static OG_HD int og_canon_e2m1x2(int q) {
    const int m = q & 7, v = m < 4 ? m : (2 + (m & 1)) << ((m >> 1) - 1);
    return q & 8 ? -v : v;
}
/* 2^(e - 128) exactly (og_e8m0_half: e = 0 and 1 the subnormals 2^-128, 2^-127). */
static OG_HD float og_canon_e8m0_half(uint8_t e) {
    return og_canon_bits_f32(e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23);
}
/* MXFP4 x Q8_0's I_b: sum of the doubled E2M1 values times y (element j low nibble of qs[j], j + 16 the high one). */
static OG_HD int32_t og_canon_mxfp4_isum(const og_block_mxfp4 *x, const og_block_q8_0 *y) {
    int32_t is = 0;
    for (int j = 0; j < 16; j++) is += og_canon_e2m1x2(x->qs[j] & 15) * y->qs[j] + og_canon_e2m1x2(x->qs[j] >> 4) * y->qs[j + 16];
    return is;
}
/* MXFP4 x Q8_0: a = 2^(e - 128) * dy (one rounding). */
static OG_HD og_canon_term og_canon_mxfp4(const og_block_mxfp4 *x, const og_block_q8_0 *y) {
    og_canon_term t = {og_canon_mxfp4_isum(x, y), og_canon_mul(og_canon_e8m0_half(x->e), og_canon_h2f(y->d)), 0.0f, 0.0f};
    return t;
}

/* ---- dequantization, one element at a time (og_type_traits.to_float's bits:
 * quant_ref.c's float operations, each rounded; the cuda device's get_rows) ---- */

static OG_HD float og_canon_sub(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}
/* element j < 32 of a Q8_0 / Q4_0 / Q5_0 block: d * q (q - 8, q - 16) */
static OG_HD float og_canon_deq_q8_0(const og_block_q8_0 *x, int j) {
    return og_canon_mul(og_canon_h2f(x->d), (float)x->qs[j]);
}
static OG_HD float og_canon_deq_q4_0(const og_block_q4_0 *x, int j) {
    const int q = j < 16 ? x->qs[j] & 0x0F : x->qs[j - 16] >> 4;
    return og_canon_mul(og_canon_h2f(x->d), (float)(q - 8));
}
static OG_HD float og_canon_deq_q5_0(const og_block_q5_0 *x, int j) {
    const uint32_t qh = (uint32_t)x->qh[0] | (uint32_t)x->qh[1] << 8 | (uint32_t)x->qh[2] << 16 | (uint32_t)x->qh[3] << 24;
    const int q = (j < 16 ? x->qs[j] & 0x0F : x->qs[j - 16] >> 4) | (int)(((qh >> j) & 1) << 4);
    return og_canon_mul(og_canon_h2f(x->d), (float)(q - 16));
}
/* element e < 256 of a k-quant block: dl * q - ml with dl = d * scale, ml = dmin * min */
static OG_HD float og_canon_deq_q2_K(const og_block_q2_K *x, int e) {
    const uint8_t sc = x->scales[e / 16];
    const float dl = og_canon_mul(og_canon_h2f(x->d), (float)(sc & 0xF)), ml = og_canon_mul(og_canon_h2f(x->dmin), (float)(sc >> 4));
    return og_canon_sub(og_canon_mul(dl, (float)og_canon_q2bits(x->qs, e)), ml);
}
static OG_HD float og_canon_deq_q3_K(const og_block_q3_K *x, int e) {
    const int s = e / 16, lo4 = s < 8 ? x->scales[s] & 0x0F : x->scales[s - 8] >> 4;
    const int hi2 = (x->scales[8 + s % 4] >> (2 * (s / 4))) & 3, h = (x->hmask[e % 32] >> (e / 32)) & 1;
    const float dl = og_canon_mul(og_canon_h2f(x->d), (float)((lo4 | hi2 << 4) - 32));
    return og_canon_mul(dl, (float)(og_canon_q2bits(x->qs, e) + 4 * h - 4));
}
static OG_HD float og_canon_deq_k45(uint16_t d, uint16_t dmin, const uint8_t *scales, const uint8_t *qs, const uint8_t *qh,
                                    int e) {
    int sc, mn;
    og_canon_k4_scale_min(scales, e / 32, &sc, &mn);
    const int q = og_canon_k45_quant(qs, qh, e);
    const float dl = og_canon_mul(og_canon_h2f(d), (float)sc), ml = og_canon_mul(og_canon_h2f(dmin), (float)mn);
    return og_canon_sub(og_canon_mul(dl, (float)q), ml);
}
static OG_HD float og_canon_deq_q4_K(const og_block_q4_K *x, int e) {
    return og_canon_deq_k45(x->d, x->dmin, x->scales, x->qs, 0, e);
}
static OG_HD float og_canon_deq_q5_K(const og_block_q5_K *x, int e) {
    return og_canon_deq_k45(x->d, x->dmin, x->scales, x->qs, x->qh, e);
}
static OG_HD float og_canon_deq_q6_K(const og_block_q6_K *x, int e) {
    const int h = e / 128, r = e % 128, k = r / 32, l = r % 32;
    const int lo4 = (x->ql[64 * h + 32 * (k & 1) + l] >> (4 * (k >> 1))) & 0x0F, hi2 = (x->qh[32 * h + l] >> (2 * k)) & 3;
    const float dl = og_canon_mul(og_canon_h2f(x->d), (float)x->scales[e / 16]);
    return og_canon_mul(dl, (float)((lo4 | hi2 << 4) - 32));
}

/* element e < 256 of an IQ2_XXS block: db = (d (0.5 + ls)) 0.25 (ggml's float steps), +-db * grid */
static OG_HD float og_canon_deq_iq2_xxs(const og_block_iq2_xxs *x, int e) {
    uint32_t a0, a1;
    const int s = e / 32, l = (e % 32) / 8, j = e % 8;
    og_canon_iq2_words(x, s, &a0, &a1);
    const float db = og_canon_mul(og_canon_mul(og_canon_h2f(x->d), og_canon_add(0.5f, (float)(a1 >> 28))), 0.25f);
    const float v = og_canon_mul(db, (float)((og_canon_iq2_grid((a0 >> 8 * l) & 255) >> 8 * j) & 255));
    return (og_canon_iq2_signs((a1 >> 7 * l) & 127) >> j) & 1 ? -v : v;
}
/* element j < 32 of an MXFP4 block: the doubled E2M1 value times 2^(e - 128) */
static OG_HD float og_canon_deq_mxfp4(const og_block_mxfp4 *x, int j) {
    const int q = j < 16 ? x->qs[j] & 15 : x->qs[j - 16] >> 4;
    return og_canon_mul((float)og_canon_e2m1x2(q), og_canon_e8m0_half(x->e));
}

/* Element e of a row of type t (F32, F16, BF16 widened; the quantized types
 * above), or 0 for a type without a dequantizer here (callers refuse those). */
static OG_HD float og_canon_deq(og_ggml_type t, const void *row, int64_t e) {
    const uint8_t *r = (const uint8_t *)row;
    switch (t) {
    case OG_TYPE_F32: return ((const float *)r)[e];
    case OG_TYPE_F16: return og_canon_h2f(((const uint16_t *)r)[e]);
    case OG_TYPE_BF16: return og_canon_bits_f32((uint32_t)((const uint16_t *)r)[e] << 16);
    case OG_TYPE_Q8_0: return og_canon_deq_q8_0((const og_block_q8_0 *)r + e / 32, (int)(e % 32));
    case OG_TYPE_Q4_0: return og_canon_deq_q4_0((const og_block_q4_0 *)r + e / 32, (int)(e % 32));
    case OG_TYPE_Q5_0: return og_canon_deq_q5_0((const og_block_q5_0 *)r + e / 32, (int)(e % 32));
    case OG_TYPE_Q2_K: return og_canon_deq_q2_K((const og_block_q2_K *)r + e / 256, (int)(e % 256));
    case OG_TYPE_Q3_K: return og_canon_deq_q3_K((const og_block_q3_K *)r + e / 256, (int)(e % 256));
    case OG_TYPE_Q4_K: return og_canon_deq_q4_K((const og_block_q4_K *)r + e / 256, (int)(e % 256));
    case OG_TYPE_Q5_K: return og_canon_deq_q5_K((const og_block_q5_K *)r + e / 256, (int)(e % 256));
    case OG_TYPE_Q6_K: return og_canon_deq_q6_K((const og_block_q6_K *)r + e / 256, (int)(e % 256));
    case OG_TYPE_IQ2_XXS: return og_canon_deq_iq2_xxs((const og_block_iq2_xxs *)r + e / 256, (int)(e % 256));
    case OG_TYPE_MXFP4: return og_canon_deq_mxfp4((const og_block_mxfp4 *)r + e / 32, (int)(e % 32));
    default: return 0.0f;
    }
}

/* ---- activation quantizers (og_kernels.quantize_act: every tier's bytes) ---- */

/* rint as the CPU's nearbyintf in the default rounding mode (half to even). */
static OG_HD float og_canon_rint(float v) {
#ifdef __CUDA_ARCH__
    return rintf(v);
#else
    return __builtin_rintf(v);
#endif
}
static OG_HD float og_canon_fabs(float v) { return og_canon_bits_f32(og_canon_f32_bits(v) & 0x7fffffffu); }

/* One Q8_0 activation block from x[32]: amax = max |x| (NaN never wins), d =
 * fp16(amax / 127), q = rint(x * (127 / amax)) clamped to [-127, 127], NaN 0. */
static OG_HD void og_canon_act_q8_0(const float *x, og_block_q8_0 *y) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) {
        const float a = og_canon_fabs(x[j]);
        if (a > amax) amax = a;
    }
    const float id = amax != 0.0f ? 127.f / amax : 0.0f;
    y->d = og_canon_f2h(amax / 127.f);
    for (int j = 0; j < 32; j++) {
        const float v = og_canon_mul(x[j], id);
        if (v != v) {
            y->qs[j] = 0;
            continue;
        }
        const float r = og_canon_rint(v);
        y->qs[j] = (int8_t)(r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r);
    }
}

/* One Q8_K block from x[256] (kquants.md §6): max = the element of largest
 * magnitude with its sign (the first on ties), iscale = -127 / max, q =
 * min(127, nearest(iscale * x)), bsums, d = 1 / iscale; all zero when max is 0.
 * nearest is the 1.5 * 2^23 trick of quant_ref.c (half to even for |v| <= 2^22). */
static OG_HD void og_canon_act_q8_K(const float *x, og_block_q8_K *y) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < OG_QK_K; j++) {
        const float a = og_canon_fabs(x[j]);
        if (a > amax) {
            amax = a;
            max = x[j];
        }
    }
    if (amax == 0.0f) {
        y->d = 0.0f;
        for (int j = 0; j < OG_QK_K; j++) y->qs[j] = 0;
        for (int j = 0; j < OG_QK_K / 16; j++) y->bsums[j] = 0;
        return;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < OG_QK_K; j++) {
        const float t = og_canon_add(og_canon_mul(iscale, x[j]), 12582912.0f);
        const int32_t q = (int32_t)(og_canon_f32_bits(t) & 0x007fffffu) - 0x00400000;
        y->qs[j] = (int8_t)(q < 127 ? q : 127);
    }
    for (int j = 0; j < OG_QK_K / 16; j++) {
        int s = 0;
        for (int i = 0; i < 16; i++) s += y->qs[16 * j + i];
        y->bsums[j] = (int16_t)s;
    }
    y->d = 1 / iscale;
}

/* ---- SwiGLU (og_swiglu / og_swiglu_clamp: the host and CUDA both call these) ---- */

/* e^x from IEEE single operations only, and no fma (baseline x86-64 has none: a
 * libm fmaf is slow), so the host and CUDA give the same bits (libm's expf and
 * CUDA's expf differ in the last bit now and then): x = k ln2 + r with k =
 * rint(x log2 e) by the 1.5 * 2^23 trick, r = (x - k ln2_hi) - k ln2_lo (Cody and
 * Waite: ln2_hi has 16 significant bits, so k ln2_hi is exact for |k| <= 150),
 * |r| <= ln2 / 2; e^r by its Taylor polynomial of degree 7 in Horner form
 * (truncation below 6e-9 relative); then times 2^k as two powers of two (each a
 * normal float, so only the last product rounds, into a subnormal when the result
 * is one). Error within 2 ulp of e^x for normal results (tested against double
 * exp). +inf above 88.72284, +0 below -103.98. */
static OG_HD float og_canon_expf(float x) {
    /* branch free, so the host loop vectorizes: the arithmetic runs on x clamped to
     * [-104, 88.8] (k stays in [-150, 128]) and the ends are chosen at the return */
    /* a NaN x takes the upper end (!(x <= 88.8)), so k converts to int defined; the
     * return gives the NaN back */
    const float xc = !(x <= 88.8f) ? 88.8f : x < -104.0f ? -104.0f : x;
    const float k = og_canon_add(og_canon_add(og_canon_mul(xc, OG_CANON_EXP_LOG2E), OG_CANON_EXP_SHIFT), -OG_CANON_EXP_SHIFT);
    const float hi = og_canon_add(xc, og_canon_mul(-k, OG_CANON_EXP_LN2_HI));
    const float r = og_canon_add(hi, og_canon_mul(-k, OG_CANON_EXP_LN2_LO));
    float p = OG_CANON_EXP_P7; /* 1/7!, then 1/6! ... 1/0! */
    p = og_canon_add(og_canon_mul(p, r), OG_CANON_EXP_P6);
    p = og_canon_add(og_canon_mul(p, r), OG_CANON_EXP_P5);
    p = og_canon_add(og_canon_mul(p, r), OG_CANON_EXP_P4);
    p = og_canon_add(og_canon_mul(p, r), OG_CANON_EXP_P3);
    p = og_canon_add(og_canon_mul(p, r), 0.5f);
    p = og_canon_add(og_canon_mul(p, r), 1.0f);
    p = og_canon_add(og_canon_mul(p, r), 1.0f);
    const int32_t n = (int32_t)k, n1 = n / 2, n2 = n - n1; /* n in [-150, 128]: n1, n2 in [-75, 64] */
    p = og_canon_mul(p, og_canon_bits_f32((uint32_t)(n1 + 127) << 23));
    p = og_canon_mul(p, og_canon_bits_f32((uint32_t)(n2 + 127) << 23));
    return x != x ? x : x > OG_CANON_EXP_HI ? og_canon_bits_f32(0x7f800000u) : x < OG_CANON_EXP_LO ? 0.0f : p;
}

/* silu(g) * u = g / (1 + e^-g) * u (Shazeer 2020), three rounded operations after the exp. */
static OG_HD float og_canon_silu_mul(float g, float u) {
    const float den = og_canon_add(1.0f, og_canon_expf(-g));
    const float s = g / den;
    return og_canon_mul(s, u);
}

/* V4's clamped SwiGLU (deepseek4.md §4.1): silu(min(g, limit)) * clamp(u, -limit, limit), limit > 0,
 * with fminf / fmaxf's NaN rule (a NaN g becomes limit, a NaN u -limit). */
static OG_HD float og_canon_silu_mul_clamp(float g, float u, float limit) {
    const float gc = !(g <= limit) ? limit : g;
    const float ul = !(u >= -limit) ? -limit : u, uc = ul > limit ? limit : ul;
    return og_canon_silu_mul(gc, uc);
}

#endif
