/* IQ2_XXS and MXFP4: the format constants (grid, sign patterns, E2M1 values), the
 * scalar reference (dequantize, the fork's dot, the canonical dot of og_quant.h)
 * and the quantizers make-model uses. Layouts: og_quant_blocks.h. The tables are
 * ours, written from the formats' definitions; tests/cli/ref_iquants.sh checks every
 * entry against llama.cpp's ggml-common.h and our dequantization and dots against
 * llama.cpp's own code on make-model files. */
#include "quant_internal.h"

#include <math.h>
#include <string.h>

/* ---- the IQ2_XXS grid ----------------------------------------------------------
 * Each of the 256 points is 8 weights from {8, 25, 43}; we write a point as the
 * base-3 number whose digit j (least significant first) is weight j's level (0: 8,
 * 1: 25, 2: 43), and expand it into the 8 bytes the kernels read at compile time. */
#define IQ2_LEVEL(d) ((d) == 0 ? UINT64_C(8) : (d) == 1 ? UINT64_C(25) : UINT64_C(43))
#define IQ2_W(c, j, p3) (IQ2_LEVEL(((c) / (p3)) % 3) << (8 * (j)))
#define G(c)                                                                                                   \
    (IQ2_W(c, 0, 1) | IQ2_W(c, 1, 3) | IQ2_W(c, 2, 9) | IQ2_W(c, 3, 27) | IQ2_W(c, 4, 81) | IQ2_W(c, 5, 243) | \
     IQ2_W(c, 6, 729) | IQ2_W(c, 7, 2187))
const uint64_t og_iq2xxs_grid[256] = {
    G(0), G(2), G(4), G(6), G(8), G(10), G(12), G(18), G(20), G(24), G(26), G(28), G(30), G(36), G(42), G(46),
    G(48), G(54), G(56), G(62), G(74), G(82), G(84), G(90), G(94), G(108), G(138), G(150), G(162), G(164), G(182), G(218),
    G(244), G(246), G(252), G(262), G(264), G(270), G(272), G(276), G(288), G(298), G(300), G(306), G(318), G(324), G(326), G(330),
    G(342), G(356), G(376), G(378), G(388), G(412), G(414), G(432), G(462), G(480), G(486), G(490), G(492), G(498), G(510), G(514),
    G(516), G(522), G(524), G(546), G(570), G(594), G(650), G(660), G(730), G(732), G(738), G(748), G(756), G(774), G(786), G(792),
    G(796), G(810), G(816), G(828), G(846), G(854), G(864), G(912), G(922), G(972), G(978), G(990), G(994), G(1006), G(1026), G(1068),
    G(1100), G(1134), G(1148), G(1216), G(1218), G(1224), G(1242), G(1270), G(1296), G(1300), G(1368), G(1414), G(1458), G(1460), G(1466), G(1488),
    G(1504), G(1512), G(1514), G(1564), G(1572), G(1620), G(1622), G(1702), G(1704), G(1710), G(1728), G(1742), G(1782), G(1810), G(1830), G(1926),
    G(1950), G(1962), G(2010), G(2136), G(2188), G(2190), G(2196), G(2202), G(2206), G(2208), G(2214), G(2220), G(2228), G(2232), G(2242), G(2244),
    G(2250), G(2268), G(2286), G(2314), G(2322), G(2326), G(2350), G(2358), G(2382), G(2390), G(2400), G(2430), G(2436), G(2448), G(2484), G(2500),
    G(2522), G(2532), G(2592), G(2674), G(2676), G(2682), G(2700), G(2704), G(2754), G(2796), G(2800), G(2810), G(2866), G(2898), G(2916), G(2922),
    G(2926), G(2932), G(2934), G(2970), G(2976), G(3000), G(3026), G(3072), G(3142), G(3222), G(3224), G(3248), G(3322), G(3360), G(3402), G(3412),
    G(3418), G(3450), G(3510), G(3570), G(3648), G(3654), G(3672), G(3696), G(3726), G(3766), G(3822), G(3852), G(3888), G(3892), G(3978), G(3980),
    G(4026), G(4160), G(4374), G(4376), G(4382), G(4402), G(4430), G(4458), G(4470), G(4482), G(4546), G(4618), G(4620), G(4626), G(4630), G(4644),
    G(4662), G(4698), G(4730), G(4764), G(4786), G(4806), G(4824), G(4862), G(4944), G(5032), G(5106), G(5112), G(5124), G(5130), G(5176), G(5198),
    G(5238), G(5296), G(5346), G(5366), G(5376), G(5464), G(5644), G(5688), G(5834), G(5868), G(5890), G(5920), G(5994), G(6090), G(6354), G(6402),
};
#undef G
#undef IQ2_W
#undef IQ2_LEVEL

/* Sign pattern i: its 7 bits, and bit 7 set when they hold an odd count of ones. */
#define PAR7(i) (((i) ^ (i) >> 1 ^ (i) >> 2 ^ (i) >> 3 ^ (i) >> 4 ^ (i) >> 5 ^ (i) >> 6) & 1)
#define S(i) (uint8_t)((i) | PAR7(i) << 7)
#define S8(b) S(b), S(b + 1), S(b + 2), S(b + 3), S(b + 4), S(b + 5), S(b + 6), S(b + 7)
const uint8_t og_iq2xxs_signs[128] = {S8(0),  S8(8),  S8(16), S8(24), S8(32),  S8(40),  S8(48),  S8(56),
                                      S8(64), S8(72), S8(80), S8(88), S8(96), S8(104), S8(112), S8(120)};
#undef S8
#undef S
#undef PAR7

/* E2M1 (1 sign, 2 exponent, 1 mantissa bit; OCP MX spec 1.0 §5.3.3): magnitudes 0,
 * 0.5, 1, 1.5, 2, 3, 4, 6, doubled to integers; the sign is the nibble's bit 3. */
const int8_t og_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

#define FP16(x) og_fp16_to_fp32(x)

/* ---- IQ2_XXS ------------------------------------------------------------------- */

/* Sub-block s of block x: its four grid indices, four 7-bit sign fields and scale. */
static inline void iq2_sub(const og_block_iq2_xxs *x, int s, uint32_t *a0, uint32_t *a1) {
    memcpy(a0, (const uint8_t *)x->qs + 8 * s, 4);
    memcpy(a1, (const uint8_t *)x->qs + 8 * s + 4, 4);
}

void og_iq2_xxs_to_float(const void *vx, float *y, int64_t n) {
    const og_block_iq2_xxs *x = vx;
    for (int64_t b = 0; b < n / OG_QK_K; b++) {
        const float d = FP16(x[b].d);
        for (int s = 0; s < 8; s++) {
            uint32_t a0, a1;
            iq2_sub(&x[b], s, &a0, &a1);
            const float db = d * (0.5f + (float)(a1 >> 28)) * 0.25f; /* d (2 ls + 1) / 8, ggml's float steps */
            for (int l = 0; l < 4; l++, y += 8) {
                const uint64_t g = og_iq2xxs_grid[(a0 >> 8 * l) & 255];
                const uint8_t sg = og_iq2xxs_signs[(a1 >> 7 * l) & 127];
                for (int j = 0; j < 8; j++) {
                    const float v = db * (float)((g >> 8 * j) & 255);
                    y[j] = (sg >> j) & 1 ? -v : v;
                }
            }
        }
    }
}

/* I_b of the canonical dot: sum over sub-blocks of (2 ls + 1) * (grid * sign . y). */
static int32_t iq2_xxs_isum(const og_block_iq2_xxs *x, const og_block_q8_K *y) {
    int32_t isum = 0;
    const int8_t *q8 = y->qs;
    for (int s = 0; s < 8; s++) {
        uint32_t a0, a1;
        iq2_sub(x, s, &a0, &a1);
        int32_t sub = 0;
        for (int l = 0; l < 4; l++, q8 += 8) {
            const uint64_t g = og_iq2xxs_grid[(a0 >> 8 * l) & 255];
            const uint8_t sg = og_iq2xxs_signs[(a1 >> 7 * l) & 127];
            for (int j = 0; j < 8; j++) {
                const int32_t w = (int32_t)((g >> 8 * j) & 255);
                sub += (sg >> j) & 1 ? -w * q8[j] : w * q8[j];
            }
        }
        isum += (int32_t)(2 * (a1 >> 28) + 1) * sub;
    }
    return isum;
}

/* The fork's order (ggml's generic kernel): sum of dx dy I_b over blocks, then / 8. */
void og_iq2_xxs_vec_dot(int64_t n, float *s, const void *vx, const void *vy) {
    const og_block_iq2_xxs *x = vx;
    const og_block_q8_K *y = vy;
    float sum = 0;
    for (int64_t b = 0; b < n / OG_QK_K; b++) sum += FP16(x[b].d) * y[b].d * (float)iq2_xxs_isum(&x[b], &y[b]);
    *s = 0.125f * sum;
}

/* og_quant.h "Canonical numerics": a_b = (dx dy) / 8 (two roundings), v_b = a_b I_b. */
void og_iq2_xxs_canonical(int64_t n, float *s, const void *vx, const void *vy) {
    const og_block_iq2_xxs *x = vx;
    const og_block_q8_K *y = vy;
    float acc[32] = {0};
    for (int64_t b = 0; b < n / OG_QK_K; b++) {
        const float a = FP16(x[b].d) * y[b].d * 0.125f;
        acc[b & 31] += a * (float)iq2_xxs_isum(&x[b], &y[b]);
    }
    *s = og_warp_reduce32(acc);
}

/* The grid as floats, gv[g][j] = weight j of point g, and gg[g] = sum of its
 * squares: what the quantizer's searches read (built once per quantized row). */
typedef struct iq2_grid_f {
    float gv[256][8], gg[256];
} iq2_grid_f;

static void iq2_grid_floats(iq2_grid_f *G) {
    for (int g = 0; g < 256; g++) {
        G->gg[g] = 0;
        for (int j = 0; j < 8; j++) {
            G->gv[g][j] = (float)((og_iq2xxs_grid[g] >> 8 * j) & 255);
            G->gg[g] += G->gv[g][j] * G->gv[g][j];
        }
    }
}

/* The grid point closest to t[0..8) at scale sc (least squares: the smallest
 * sc^2 |g|^2 - 2 sc t.g). */
static int iq2_nearest(const iq2_grid_f *G, const float *t, float sc) {
    int best = 0;
    float best_e = INFINITY;
    for (int g = 0; g < 256; g++) {
        float tg = 0;
        for (int j = 0; j < 8; j++) tg += t[j] * G->gv[g][j];
        const float e = sc * (sc * G->gg[g] - 2 * tg);
        if (e < best_e) best_e = e, best = g;
    }
    return best;
}

/* The scale of one sub-block of 32 targets t (signs already folded in): for a few
 * trial scales, every group's nearest grid point, then the least-squares scale of
 * those points; the trial with the smallest error wins. */
static float iq2_fit_sub(const iq2_grid_f *G, const float *t) {
    float amax = 0;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, t[j]);
    if (!(amax > 0)) return 0;
    float best_sc = amax / 43, best_e = INFINITY;
    for (int trial = 0; trial < 4; trial++) {
        const float sc = amax / 43 * (0.6f + 0.15f * (float)trial);
        float sum_tg = 0, sum_gg = 0, e = 0;
        int idx[4];
        for (int l = 0; l < 4; l++) {
            idx[l] = iq2_nearest(G, t + 8 * l, sc);
            for (int j = 0; j < 8; j++) sum_tg += t[8 * l + j] * G->gv[idx[l]][j];
            sum_gg += G->gg[idx[l]];
        }
        const float fit = sum_tg > 0 ? sum_tg / sum_gg : sc;
        for (int l = 0; l < 4; l++)
            for (int j = 0; j < 8; j++) {
                const float r = t[8 * l + j] - fit * G->gv[idx[l]][j];
                e += r * r;
            }
        if (e < best_e) best_e = e, best_sc = fit;
    }
    return best_sc;
}

/* Our IQ2_XXS quantizer, with uniform importance (llama.cpp's wants an importance
 * matrix; make-model's test weights have none): per group of 8 the signs, made an
 * even count by flipping the smallest magnitude (the format stores 7 sign bits);
 * per sub-block a least-squares scale (iq2_fit_sub); the block's d = the largest
 * scale * 8 / 31, each sub-block's ls = the nearest (2 ls + 1) d / 8; then every
 * group's nearest grid point at its stored scale. */
void og_iq2_xxs_from_float(const float *x, void *vy, int64_t n) {
    og_block_iq2_xxs *y = vy;
    iq2_grid_f G;
    if (n >= OG_QK_K) iq2_grid_floats(&G);
    for (int64_t b = 0; b < n / OG_QK_K; b++, x += OG_QK_K) {
        float t[OG_QK_K], sc[8], smax = 0;
        uint32_t signs[8] = {0};
        for (int k = 0; k < 32; k++) { /* group k of 8 */
            const float *xg = x + 8 * k;
            unsigned neg = 0, cnt = 0;
            int imin = 0;
            for (int j = 0; j < 8; j++) {
                t[8 * k + j] = fabsf(xg[j]);
                if (xg[j] < 0) neg |= 1u << j, cnt++;
                if (fabsf(xg[j]) < fabsf(xg[imin])) imin = j;
            }
            if (cnt & 1) { /* odd: this one takes the other sign, so its target is -|x| */
                neg ^= 1u << imin;
                t[8 * k + imin] = -t[8 * k + imin];
            }
            signs[k / 4] |= (neg & 127u) << 7 * (k % 4);
        }
        for (int s = 0; s < 8; s++) smax = fmaxf(smax, sc[s] = iq2_fit_sub(&G, t + 32 * s));
        memset(&y[b], 0, sizeof y[b]);
        if (!(smax > 0) || !isfinite(smax)) continue; /* all zero (or not finite): d = 0 */
        y[b].d = og_fp32_to_fp16(smax * 8 / 31);
        const float d = FP16(y[b].d);
        if (!(d > 0)) continue;
        for (int s = 0; s < 8; s++) {
            int ls = (int)lrintf((sc[s] * 8 / d - 1) / 2);
            ls = ls < 0 ? 0 : ls > 15 ? 15 : ls;
            const float sq = d * (0.5f + (float)ls) * 0.25f;
            uint32_t a0 = 0, a1 = signs[s] | (uint32_t)ls << 28;
            for (int l = 0; l < 4; l++) a0 |= (uint32_t)iq2_nearest(&G, t + 32 * s + 8 * l, sq) << 8 * l;
            memcpy((uint8_t *)y[b].qs + 8 * s, &a0, 4);
            memcpy((uint8_t *)y[b].qs + 8 * s + 4, &a1, 4);
        }
    }
}

/* ---- MXFP4 ----------------------------------------------------------------------- */

void og_mxfp4_to_float(const void *vx, float *y, int64_t n) {
    const og_block_mxfp4 *x = vx;
    for (int64_t b = 0; b < n / OG_QK_MXFP4; b++, y += OG_QK_MXFP4) {
        const float d = og_e8m0_half(x[b].e);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)og_mxfp4_values[x[b].qs[j] & 15] * d;
            y[j + 16] = (float)og_mxfp4_values[x[b].qs[j] >> 4] * d;
        }
    }
}

/* The E2M1 nibble closest to x at scale d (the first on a tie: +0 before -0, the
 * smaller magnitude before the larger), as ggml's reference quantizer picks it. */
static uint8_t mxfp4_nearest(float x, float d) {
    uint8_t best = 0;
    float best_e = fabsf(x);
    for (uint8_t i = 1; i < 16; i++) {
        const float e = fabsf((float)og_mxfp4_values[i] * d - x);
        if (e < best_e) best_e = e, best = i;
    }
    return best;
}

/* The OCP scale choice: the exponent puts the block's largest magnitude in [4, 8)
 * times 2^(e - 127) (E2M1's top binade), i.e. e = floor(log2 amax) - 2 + 127, kept in
 * 0 .. 254 (254: the largest finite scale; a non-finite amax gets it too). */
void og_mxfp4_from_float(const float *x, void *vy, int64_t n) {
    og_block_mxfp4 *y = vy;
    for (int64_t b = 0; b < n / OG_QK_MXFP4; b++, x += OG_QK_MXFP4) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
        int e = 0;
        if (amax > 0) {
            const float l2 = floorf(log2f(amax));
            e = !isfinite(l2) ? 254 : l2 + 125 < 0 ? 0 : l2 + 125 > 254 ? 254 : (int)l2 + 125;
        }
        y[b].e = (uint8_t)e;
        const float d = og_e8m0_half(y[b].e);
        for (int j = 0; j < 16; j++)
            y[b].qs[j] = (uint8_t)(mxfp4_nearest(x[j], d) | mxfp4_nearest(x[j + 16], d) << 4);
    }
}

static int32_t mxfp4_isum(const og_block_mxfp4 *x, const og_block_q8_0 *y) {
    int32_t isum = 0;
    for (int j = 0; j < 16; j++)
        isum += og_mxfp4_values[x->qs[j] & 15] * y->qs[j] + og_mxfp4_values[x->qs[j] >> 4] * y->qs[j + 16];
    return isum;
}

void og_mxfp4_vec_dot(int64_t n, float *s, const void *vx, const void *vy) {
    const og_block_mxfp4 *x = vx;
    const og_block_q8_0 *y = vy;
    float sum = 0;
    for (int64_t b = 0; b < n / OG_QK_MXFP4; b++) sum += FP16(y[b].d) * og_e8m0_half(x[b].e) * (float)mxfp4_isum(&x[b], &y[b]);
    *s = sum;
}

/* og_quant.h "Canonical numerics": a_b = 2^(e - 128) dy (one rounding), v_b = a_b I_b. */
void og_mxfp4_canonical(int64_t n, float *s, const void *vx, const void *vy) {
    const og_block_mxfp4 *x = vx;
    const og_block_q8_0 *y = vy;
    float acc[32] = {0};
    for (int64_t b = 0; b < n / OG_QK_MXFP4; b++) {
        const float a = og_e8m0_half(x[b].e) * FP16(y[b].d);
        acc[b & 31] += a * (float)mxfp4_isum(&x[b], &y[b]);
    }
    *s = og_warp_reduce32(acc);
}
