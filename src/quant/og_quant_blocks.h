/* Quantized block layouts, defined once for C and CUDA (kquants.md §1-§4).
 * Byte sizes are exact (no padding) and checked at compile time; fp16 fields are
 * raw IEEE binary16 bits. QK_K = 256 elements per k-quant super-block. */
#ifndef OG_QUANT_BLOCKS_H
#define OG_QUANT_BLOCKS_H

#include <stdint.h>

#define OG_QK4_0 32
#define OG_QK4_1 32
#define OG_QK5_0 32
#define OG_QK5_1 32
#define OG_QK8_0 32
#define OG_QK8_1 32
#define OG_QK4_NL 32
#define OG_QK_K 256
#define OG_QK_MXFP4 32
#define OG_K_SCALE_SIZE 12

typedef struct { uint16_t d; uint8_t qs[OG_QK4_0 / 2]; } og_block_q4_0;                 /* d*(q-8) */
typedef struct { uint16_t d, m; uint8_t qs[OG_QK4_1 / 2]; } og_block_q4_1;              /* d*q+m */
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[OG_QK5_0 / 2]; } og_block_q5_0;  /* d*(q-16) */
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t qs[OG_QK5_1 / 2]; } og_block_q5_1;
typedef struct { uint16_t d; int8_t qs[OG_QK8_0]; } og_block_q8_0;                      /* d*q */
typedef struct { uint16_t d, s; int8_t qs[OG_QK8_1]; } og_block_q8_1;                   /* s = d*sum(q) */
typedef struct { uint16_t d; uint8_t qs[OG_QK4_NL / 2]; } og_block_iq4_nl;              /* d*T[q] */

typedef struct {
    uint8_t scales[OG_QK_K / 16]; /* low nibble scale, high nibble min, per 16 */
    uint8_t qs[OG_QK_K / 4];      /* 2-bit quants */
    uint16_t d, dmin;
} og_block_q2_K;
typedef struct {
    uint8_t hmask[OG_QK_K / 8]; /* high bit */
    uint8_t qs[OG_QK_K / 4];    /* low 2 bits */
    uint8_t scales[12];         /* 16 six-bit scales */
    uint16_t d;
} og_block_q3_K;
typedef struct {
    uint16_t d, dmin;
    uint8_t scales[OG_K_SCALE_SIZE]; /* 8 six-bit scales + 8 six-bit mins */
    uint8_t qs[OG_QK_K / 2];
} og_block_q4_K;
typedef struct {
    uint16_t d, dmin;
    uint8_t scales[OG_K_SCALE_SIZE];
    uint8_t qh[OG_QK_K / 8];
    uint8_t qs[OG_QK_K / 2];
} og_block_q5_K;
typedef struct {
    uint8_t ql[OG_QK_K / 2];      /* low 4 bits */
    uint8_t qh[OG_QK_K / 4];      /* high 2 bits */
    int8_t scales[OG_QK_K / 16];  /* signed 8-bit scales */
    uint16_t d;
} og_block_q6_K;
/* IQ2_XXS (ggml type 16): 256 weights in 8 sub-blocks of 32. Sub-block s owns
 * qs[4s .. 4s + 3] read as two little-endian u32 words a0, a1: the bytes of a0 are
 * four indices into og_iq2xxs_grid (8 weights each, values 8, 25 or 43), bits 7l ..
 * 7l + 6 of a1 pick the sign pattern of group l (og_iq2xxs_signs: bit j set =
 * weight j negative) and a1 >> 28 is the sub-block scale ls, so weight =
 * d * (2 ls + 1) / 8 * grid * sign. */
typedef struct {
    uint16_t d;
    uint16_t qs[OG_QK_K / 8];
} og_block_iq2_xxs;
/* MXFP4 (ggml type 39, OCP microscaling): 32 E2M1 weights and one E8M0 exponent e;
 * nibble layout as Q4_0 (low nibbles elements 0-15, high 16-31); weight =
 * og_mxfp4_values[nibble] * 2^(e - 128) (the table holds twice the E2M1 value). */
typedef struct {
    uint8_t e;
    uint8_t qs[OG_QK_MXFP4 / 2];
} og_block_mxfp4;

typedef struct {
    float d;                       /* f32, not fp16 */
    int8_t qs[OG_QK_K];
    int16_t bsums[OG_QK_K / 16];   /* sums of 16 quants */
} og_block_q8_K;

#ifdef __cplusplus
#define OG_STATIC_ASSERT static_assert
#else
#define OG_STATIC_ASSERT _Static_assert
#endif
OG_STATIC_ASSERT(sizeof(og_block_q4_0) == 18, "Q4_0 block");
OG_STATIC_ASSERT(sizeof(og_block_q4_1) == 20, "Q4_1 block");
OG_STATIC_ASSERT(sizeof(og_block_q5_0) == 22, "Q5_0 block");
OG_STATIC_ASSERT(sizeof(og_block_q5_1) == 24, "Q5_1 block");
OG_STATIC_ASSERT(sizeof(og_block_q8_0) == 34, "Q8_0 block");
OG_STATIC_ASSERT(sizeof(og_block_q8_1) == 36, "Q8_1 block");
OG_STATIC_ASSERT(sizeof(og_block_iq4_nl) == 18, "IQ4_NL block");
OG_STATIC_ASSERT(sizeof(og_block_q2_K) == 84, "Q2_K block");
OG_STATIC_ASSERT(sizeof(og_block_q3_K) == 110, "Q3_K block");
OG_STATIC_ASSERT(sizeof(og_block_q4_K) == 144, "Q4_K block");
OG_STATIC_ASSERT(sizeof(og_block_q5_K) == 176, "Q5_K block");
OG_STATIC_ASSERT(sizeof(og_block_q6_K) == 210, "Q6_K block");
OG_STATIC_ASSERT(sizeof(og_block_q8_K) == 292, "Q8_K block");
OG_STATIC_ASSERT(sizeof(og_block_iq2_xxs) == 66, "IQ2_XXS block");
OG_STATIC_ASSERT(sizeof(og_block_mxfp4) == 17, "MXFP4 block");

#endif
