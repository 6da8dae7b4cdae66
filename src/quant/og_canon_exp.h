/* The constants of og_canon_expf (og_quant_canon.h), shared with its vector forms
 * (og_kernels.swiglu in the SIMD tiers, whose files cannot include og_quant_canon.h
 * beside quant_internal.h): one definition, so the forms cannot drift apart. */
#ifndef OG_CANON_EXP_H
#define OG_CANON_EXP_H

#define OG_CANON_EXP_LOG2E 1.44269502f
#define OG_CANON_EXP_SHIFT 12582912.0f /* 1.5 * 2^23 */
#define OG_CANON_EXP_LN2_HI 0.693145751953125f
#define OG_CANON_EXP_LN2_LO 1.42860677e-06f
#define OG_CANON_EXP_P7 1.98412698e-04f
#define OG_CANON_EXP_P6 1.38888889e-03f
#define OG_CANON_EXP_P5 8.33333333e-03f
#define OG_CANON_EXP_P4 4.16666667e-02f
#define OG_CANON_EXP_P3 1.66666667e-01f
#define OG_CANON_EXP_HI 88.72284f  /* above: +inf */
#define OG_CANON_EXP_LO -103.98f   /* below: +0 */
#endif
