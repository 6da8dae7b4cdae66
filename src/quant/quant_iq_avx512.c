/* AVX-512 (F, BW, VL, VNNI) kernels of IQ2_XXS and MXFP4, the fork's order and the
 * canonical one (og_quant.h), one and four activation rows; two sub-blocks (IQ2_XXS)
 * or two blocks (MXFP4) per 512-bit register. Integer sums exact as in
 * quant_iq_avx2.c. Built with the AVX-512 flags plus -mbmi2 (pdep). The bodies are
 * in quant_avx512_canon.h (quant_avx512_gfni.c builds them with GFNI and VBMI too). */
#include "quant_avx512_canon.h"

OG_FORK_CANON_KERNELS(iq2_xxs, iq2_xxs_n)
OG_FORK_CANON_KERNELS(mxfp4, mxfp4_n)

void og_kernels_fill_iq_avx512(og_kernels *k) {
    OG_SET_FORK_CANON(k, OG_TYPE_IQ2_XXS, iq2_xxs);
    OG_SET_FORK_CANON(k, OG_TYPE_MXFP4, mxfp4);
}
