/* The kernels a run would pick on this CPU (og_isa_choose with no override),
 * for tests that check results across code paths rather than one tier. */
#ifndef OG_KERNELS_FIXTURE_H
#define OG_KERNELS_FIXTURE_H

#include "og_quant.h"

static inline og_kernels fx_best_kernels(void) {
    og_cpu_features f;
    og_cpu_detect(&f);
    og_isa isa = OG_ISA_SCALAR;
    char err[256], note[128];
    if (og_isa_choose(&f, NULL, &isa, note, sizeof note, err, sizeof err) != OG_OK) isa = OG_ISA_SCALAR;
    og_kernels k;
    og_kernels_init(isa, &k);
    return k;
}

#endif
