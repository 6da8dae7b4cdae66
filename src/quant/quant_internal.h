/* Shared between the reference and the SIMD tiers of src/quant; not public. */
#ifndef OG_QUANT_INTERNAL_H
#define OG_QUANT_INTERNAL_H

#include "og_quant.h"

extern const int8_t og_iq4nl_values[16];
void og_scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m);

/* Fill the entries a tier implements; leave others untouched. */
void og_kernels_fill_avx2(og_kernels *k);
void og_kernels_fill_avx512(og_kernels *k);

#endif
