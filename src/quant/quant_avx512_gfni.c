/* AVX-512 kernels that also take GFNI (gf2p8affineqb) and VBMI (vpmultishiftqb):
 * Ice Lake, Sapphire Rapids, Zen 4 and later. Built with those flags on top of the
 * AVX-512 tier's and filled in only where og_cpu_features says the CPU has both
 * (og_kernels_init_features), so the AVX-512 tier runs on Skylake-X too. Each
 * kernel gives the AVX-512 one's bits (the same integer sums; tested). */
#include "quant_avx512_canon.h"

#if !OG_AVX512_GFNI
#error "quant_avx512_gfni.c is built with -mgfni -mavx512vbmi"
#endif

OG_FORK_CANON_KERNELS(q3_K_gfni, q3_K_dot_n)
OG_FORK_CANON_KERNELS(iq2_xxs_gfni, iq2_xxs_n)
OG_FORK_CANON_KERNELS(mxfp4_gfni, mxfp4_n)
static void q3_K_gfni_r4(int64_t n, float *s, const void *vx, size_t stride, const void *vy) { q3_K_r4_body(n, s, vx, stride, vy); }

void og_kernels_fill_avx512_gfni(og_kernels *k) {
    OG_SET_FORK_CANON(k, OG_TYPE_Q3_K, q3_K_gfni);
    k->vec_dot_r4_canonical[OG_TYPE_Q3_K] = q3_K_gfni_r4;
    OG_SET_FORK_CANON(k, OG_TYPE_IQ2_XXS, iq2_xxs_gfni);
    OG_SET_FORK_CANON(k, OG_TYPE_MXFP4, mxfp4_gfni);
}
