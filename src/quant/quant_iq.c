/* IQ2_XXS and MXFP4: the format constants (grid, sign patterns, E2M1 values), the
 * scalar reference (dequantize, the fork's dot, the canonical dot of og_quant.h)
 * and the quantizers make-model uses. Layouts: og_quant_blocks.h. The tables are
 * ours, written from the formats' definitions; tests/cli/ref_iquants.sh checks every
 * entry against llama.cpp's ggml-common.h and our dequantization and dots against
 * llama.cpp's own code on make-model files. */
#include "quant_internal.h"

#include "og_quant_canon.h"

#include <math.h>
#include <string.h>

/* ---- the IQ2_XXS grid ----------------------------------------------------------
 * Each of the 256 points is 8 weights from {8, 25, 43}; we write a point as the
 * base-3 number whose digit j (least significant first) is weight j's level (0: 8,
 * 1: 25, 2: 43), and expand it into the 8 bytes the kernels read at compile time. */
#define G(c) OG_IQ2XXS_G8(c),
const uint64_t og_iq2xxs_grid[256] = {OG_IQ2XXS_POINTS(G)};
/* The same points as 2-bit levels, weight j at bits 2j (what the GFNI kernels look up:
 * 256 entries fit eight registers). */
#define C2(c) (uint16_t)((c) % 3 | (c) / 3 % 3 << 2 | (c) / 9 % 3 << 4 | (c) / 27 % 3 << 6 | (c) / 81 % 3 << 8 | \
                         (c) / 243 % 3 << 10 | (c) / 729 % 3 << 12 | (c) / 2187 % 3 << 14),
const uint16_t og_iq2xxs_grid2[256] = {OG_IQ2XXS_POINTS(C2)};
#undef C2
#undef G

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

/* I_b of the canonical dot: sum over sub-blocks of (2 ls + 1) * (grid * sign . y)
 * (og_quant_canon.h's, which the cuda device's kernels run too). */
static int32_t iq2_xxs_isum(const og_block_iq2_xxs *x, const og_block_q8_K *y) { return og_canon_iq2_xxs_isum(x, y); }

/* The fork's order (ggml's generic kernel): sum of dx dy I_b over blocks, then / 8. */
void og_iq2_xxs_vec_dot(int64_t n, float *s, const void *vx, const void *vy) {
    const og_block_iq2_xxs *x = vx;
    const og_block_q8_K *y = vy;
    float sum = 0;
    for (int64_t b = 0; b < n / OG_QK_K; b++) sum += FP16(x[b].d) * y[b].d * (float)iq2_xxs_isum(&x[b], &y[b]);
    *s = 0.125f * sum;
}

/* og_quant.h "Canonical numerics": a_b = (dx dy) / 8 (two roundings), v_b = a_b I_b
 * (og_quant_canon.h's term, the cuda device's). */
void og_iq2_xxs_canonical(int64_t n, float *s, const void *vx, const void *vy) {
    const og_block_iq2_xxs *x = vx;
    const og_block_q8_K *y = vy;
    float acc[32] = {0};
    for (int64_t b = 0; b < n / OG_QK_K; b++) acc[b & 31] += og_canon_v(og_canon_iq2_xxs(&x[b], &y[b]));
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

static int32_t mxfp4_isum(const og_block_mxfp4 *x, const og_block_q8_0 *y) { return og_canon_mxfp4_isum(x, y); }

void og_mxfp4_vec_dot(int64_t n, float *s, const void *vx, const void *vy) {
    const og_block_mxfp4 *x = vx;
    const og_block_q8_0 *y = vy;
    float sum = 0;
    for (int64_t b = 0; b < n / OG_QK_MXFP4; b++) sum += FP16(y[b].d) * og_e8m0_half(x[b].e) * (float)mxfp4_isum(&x[b], &y[b]);
    *s = sum;
}

/* og_quant.h "Canonical numerics": a_b = 2^(e - 128) dy (one rounding), v_b = a_b I_b
 * (og_quant_canon.h's term, the cuda device's). */
void og_mxfp4_canonical(int64_t n, float *s, const void *vx, const void *vy) {
    const og_block_mxfp4 *x = vx;
    const og_block_q8_0 *y = vy;
    float acc[32] = {0};
    for (int64_t b = 0; b < n / OG_QK_MXFP4; b++) acc[b & 31] += og_canon_v(og_canon_mxfp4(&x[b], &y[b]));
    *s = og_warp_reduce32(acc);
}
