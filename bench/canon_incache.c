/* Matrix x vector in cache (L2), per-thread CPU time: the fork's vec_dot, the
 * single-row canonical vec_dot_canonical and, where the tier has it, the four-row
 * canonical vec_dot_r4_canonical (what the matvec driver calls), on 48 rows of
 * K = 7168 or as many rows of the same bytes for a shorter K, one activation row.
 * Prints ns per 256 weights, the best of ROUNDS x 40 passes. A CPU-time figure is
 * steadier than bytes/s from DRAM on a shared machine (bench/RESULTS.md,
 * "Canonical matrix x vector, four rows at a time"). Not part of the build:
 *   gcc -O2 -march=native -Isrc/quant -Isrc/gguf -Isrc/base bench/canon_incache.c \
 *       build/libog_quant.a build/libog_gguf.a build/libog_base.a -lm -o /tmp/canon_incache
 *   /tmp/canon_incache ROUNDS K1 K2 [ISA]   (ISA: 1 avx2, 2 avx512; default 2) */
#define _GNU_SOURCE
#include "og_quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s ROUNDS K1 K2 [ISA]\n", argv[0]);
        return 2;
    }
    og_kernels k;
    if (og_kernels_init(argc > 4 ? (og_isa)atoi(argv[4]) : OG_ISA_AVX512, &k) != OG_OK) return 1;
    static const og_ggml_type ts[] = {OG_TYPE_Q2_K, OG_TYPE_Q3_K, OG_TYPE_Q4_K, OG_TYPE_Q6_K, OG_TYPE_Q8_0};
    const int rounds = atoi(argv[1]);
    for (int ki = 0; ki < 2; ki++) {
        const int K = atoi(argv[2 + ki]), rows = 48 * 7168 / K;
        if (K <= 0 || K % 256 || rows < 4) return 2;
        for (size_t t = 0; t < sizeof ts / sizeof ts[0]; t++) {
            const og_type_traits *tr = og_quant_traits(ts[t]);
            uint64_t rb, yb;
            og_row_bytes(ts[t], (uint64_t)K, &rb);
            og_row_bytes(tr->vec_dot_type, (uint64_t)K, &yb);
            uint8_t *w = malloc(rb * (uint64_t)rows), *y = malloc(yb);
            float *f = malloc(sizeof *f * (size_t)K), *out = malloc(sizeof *out * (size_t)rows);
            uint64_t s = 1;
            for (int r = 0; r < rows; r++) {
                for (int i = 0; i < K; i++) f[i] = (float)(og_rand_unit(&s) * 2 - 1);
                og_quantize_row(ts[t], f, w + rb * (uint64_t)r, K);
            }
            k.quantize_act[tr->vec_dot_type](f, y, K);
            const og_vec_dot_r4_fn r4 = k.vec_dot_r4_canonical[ts[t]];
            double best[3] = {1e9, 1e9, 1e9};
            for (int rd = 0; rd < rounds; rd++)
                for (int m = 0; m < 3; m++) {
                    if (m == 2 && !r4) continue;
                    const og_vec_dot_fn d = m == 1 ? k.vec_dot_canonical[ts[t]] : k.vec_dot[ts[t]];
                    const double t0 = cpu_s();
                    for (int p = 0; p < 40; p++)
                        for (int r = 0; r + (m == 2 ? 4 : 1) <= rows; r += m == 2 ? 4 : 1) {
                            if (m == 2) r4(K, &out[r], w + rb * (uint64_t)r, rb, y);
                            else d(K, &out[r], w + rb * (uint64_t)r, y);
                        }
                    const double e = (cpu_s() - t0) / 40 / rows / (K / 256.0) * 1e9;
                    if (e < best[m]) best[m] = e;
                }
            printf("K=%5d %s fork %.2f canon %.2f r4 %.2f ns/256w\n", K, tr->name, best[0], best[1], r4 ? best[2] : 0.0);
            free(w);
            free(y);
            free(f);
            free(out);
        }
    }
    return 0;
}
