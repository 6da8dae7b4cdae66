/* quant_tile_avx2.c with AVX-VNNI's vpdpbusd and vpdpwssd (ymm, VEX): the AVX2 tier's
 * tiled products where CPUID says the CPU has AVX-VNNI. Built with -mavx2 -mfma
 * -mf16c -mavxvnni. */
#define TV_VNNI 1
#include "quant_tile_avx2.c"
