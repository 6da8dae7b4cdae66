/* onegpu quant: float conversions and per-type row (de)quantization.
 * Layouts and formulas: shared/spec/kquants.md. This file holds the scalar
 * reference for the types that exist so far (F32, F16, BF16, Q8_0); the kernels
 * issue adds the k-quants and the SIMD tiers behind the same entry points. */
#ifndef OG_QUANT_H
#define OG_QUANT_H

#include "og_gguf.h"

/* Block layouts, shared by C and CUDA (kquants.md §1). */
#define OG_QK8_0 32
typedef struct og_block_q8_0 {
    uint16_t d;             /* fp16 scale */
    int8_t qs[OG_QK8_0];    /* quants */
} og_block_q8_0;
_Static_assert(sizeof(og_block_q8_0) == 34, "Q8_0 block is 34 bytes");

/* IEEE binary16 <-> binary32, round to nearest even (matches ggml, gguf.md §6). */
uint16_t og_fp32_to_fp16(float f);
float og_fp16_to_fp32(uint16_t h);
/* bfloat16: NaN keeps quiet, else round to nearest even (gguf.md §6). */
uint16_t og_fp32_to_bf16(float f);
float og_bf16_to_fp32(uint16_t h);

/* True if og_quantize_row supports type t. */
bool og_quant_can_quantize(og_ggml_type t);

/* Quantizes n floats (one row; n a multiple of the type's block size) into dst
 * (og_row_bytes(t, n) bytes) with the reference quantizer of kquants.md §6.
 * Errors: OG_ERR_UNSUPPORTED (type not implemented), OG_ERR_INVALID_ARG (n). */
og_status og_quantize_row(og_ggml_type t, const float *x, void *dst, int64_t n);

/* Dequantizes one row of n elements of type t into y[n]. Same errors. */
og_status og_dequantize_row(og_ggml_type t, const void *src, float *y, int64_t n);

#endif
