/* quant_canon: the header the CUDA kernels share with the host (og_quant_canon.h),
 * run on the CPU against the references written apart from it: every block term
 * summed in the canonical lane order equals og_type_traits.vec_dot_canonical
 * (quant_ref.c) bit for bit, the activation quantizers write og_kernels'
 * quantize_act bytes, the fp16 conversions equal og_fp16_to_fp32 /
 * og_fp32_to_fp16, og_canon_expf is within 2 ulp of libm's double exp, and the
 * SwiGLU helpers are og_swiglu / og_swiglu_clamp's bits. So a CUDA kernel built
 * from the header computes the CPU's numbers; tests/gpu/run.sh checks that on a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "og_backend.h"
#include "og_quant_canon.h"

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}
static float rng_f(uint64_t *s) { return (float)((double)(rng_next(s) >> 11) / 9007199254740992.0 * 2.0 - 1.0); }

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* The canonical dot of one weight row from og_quant_canon.h terms: lane b % 32,
 * increasing b, then the butterfly (what kernels.cu does with one block per lane). */
static float header_dot(og_ggml_type t, const void *x, const void *y, int64_t nb) {
    float acc[32] = {0};
    for (int64_t b = 0; b < nb; b++) {
        og_canon_term tm;
        switch (t) {
        case OG_TYPE_Q8_0: tm = og_canon_q8_0((const og_block_q8_0 *)x + b, (const og_block_q8_0 *)y + b); break;
        case OG_TYPE_Q4_0: tm = og_canon_q4_0((const og_block_q4_0 *)x + b, (const og_block_q8_0 *)y + b); break;
        case OG_TYPE_Q5_0: tm = og_canon_q5_0((const og_block_q5_0 *)x + b, (const og_block_q8_0 *)y + b); break;
        case OG_TYPE_Q2_K: tm = og_canon_q2_K((const og_block_q2_K *)x + b, (const og_block_q8_K *)y + b); break;
        case OG_TYPE_Q3_K: tm = og_canon_q3_K((const og_block_q3_K *)x + b, (const og_block_q8_K *)y + b); break;
        case OG_TYPE_Q4_K: tm = og_canon_q4_K((const og_block_q4_K *)x + b, (const og_block_q8_K *)y + b); break;
        case OG_TYPE_Q5_K: tm = og_canon_q5_K((const og_block_q5_K *)x + b, (const og_block_q8_K *)y + b); break;
        case OG_TYPE_Q6_K: tm = og_canon_q6_K((const og_block_q6_K *)x + b, (const og_block_q8_K *)y + b); break;
        case OG_TYPE_IQ2_XXS: tm = og_canon_iq2_xxs((const og_block_iq2_xxs *)x + b, (const og_block_q8_K *)y + b); break;
        case OG_TYPE_MXFP4: tm = og_canon_mxfp4((const og_block_mxfp4 *)x + b, (const og_block_q8_0 *)y + b); break;
        default: fail_msg("no header term for type %d", (int)t); return 0;
        }
        acc[b & 31] += og_canon_v(tm);
    }
    for (int o = 16; o; o >>= 1) {
        float tt[32];
        for (int l = 0; l < 32; l++) tt[l] = acc[l] + acc[l ^ o];
        memcpy(acc, tt, sizeof acc);
    }
    return acc[0];
}

static void header_act(og_ggml_type vdt, const float *x, void *y, int64_t n) {
    if (vdt == OG_TYPE_Q8_0)
        for (int64_t b = 0; b < n / 32; b++) og_canon_act_q8_0(x + 32 * b, (og_block_q8_0 *)y + b);
    else
        for (int64_t b = 0; b < n / OG_QK_K; b++) og_canon_act_q8_K(x + OG_QK_K * b, (og_block_q8_K *)y + b);
}

static const og_ggml_type types[] = {OG_TYPE_Q8_0, OG_TYPE_Q4_0, OG_TYPE_Q5_0, OG_TYPE_Q2_K, OG_TYPE_Q3_K,
                                     OG_TYPE_Q4_K, OG_TYPE_Q5_K, OG_TYPE_Q6_K, OG_TYPE_IQ2_XXS, OG_TYPE_MXFP4};
#define N_TYPES (int)(sizeof types / sizeof types[0])

/* Every type, row lengths below, at and above one warp's 32 blocks, inputs of
 * several scales and signs (incl. a row of zeros for Q8_K's zero block), against
 * vec_dot_canonical and quantize_act of the scalar tier. */
static void test_terms_vs_reference(void **state) {
    (void)state;
    og_kernels k;
    assert_int_equal(og_kernels_init(OG_ISA_SCALAR, &k), OG_OK);
    uint64_t s = 0x9e3779b97f4a7c15ull;
    int n_cases = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const og_type_traits *tr = og_quant_traits(types[ti]);
        assert_non_null(tr);
        const og_type_traits *ta = og_quant_traits(tr->vec_dot_type);
        const int64_t lens[] = {tr->blck, 7 * (int64_t)tr->blck, 32 * (int64_t)tr->blck, 45 * (int64_t)tr->blck};
        for (size_t li = 0; li < 4; li++) {
            const int64_t n = lens[li];
            float *w = malloc((size_t)n * 4), *a = malloc((size_t)n * 4);
            void *wq = malloc((size_t)(n / tr->blck) * tr->type_size);
            void *aq = malloc((size_t)(n / ta->blck) * ta->type_size), *aq2 = malloc((size_t)(n / ta->blck) * ta->type_size);
            for (int rep = 0; rep < 6; rep++) {
                const float scale = rep == 5 ? 0.0f : powf(10.0f, (float)(rep - 2));
                for (int64_t i = 0; i < n; i++) {
                    w[i] = rng_f(&s);
                    a[i] = scale * rng_f(&s) * (i % 17 == 0 ? 8.0f : 1.0f);
                }
                tr->from_float(w, wq, n);
                k.quantize_act[tr->vec_dot_type](a, aq, n);
                header_act(tr->vec_dot_type, a, aq2, n);
                assert_memory_equal(aq, aq2, (size_t)(n / ta->blck) * ta->type_size);
                float want;
                tr->vec_dot_canonical(n, &want, wq, aq);
                const float got = header_dot(types[ti], wq, aq, n / tr->blck);
                if (bits(want) != bits(got))
                    fail_msg("%s n=%lld rep %d: header %.9g (0x%08x), vec_dot_canonical %.9g (0x%08x)", tr->name,
                             (long long)n, rep, got, bits(got), want, bits(want));
                n_cases++;
            }
            free(w);
            free(a);
            free(wq);
            free(aq);
            free(aq2);
        }
    }
    assert_int_equal(n_cases, N_TYPES * 4 * 6);
}

/* Every type's dequantizer (og_canon_deq), element by element, against og_dequantize_row
 * (quant_ref.c's to_float), bit for bit, on random rows of several scales
 * (random bytes too: every scale, min and quant pattern a file may hold). */
static void test_dequantize(void **state) {
    (void)state;
    uint64_t s = 0x2545f4914f6cdd1dull;
    int n_cases = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const og_type_traits *tr = og_quant_traits(types[ti]);
        const int64_t n = 8 * (int64_t)tr->blck;
        const size_t bytes = (size_t)(n / tr->blck) * tr->type_size;
        float *w = malloc((size_t)n * 4), *want = malloc((size_t)n * 4);
        uint8_t *wq = malloc(bytes);
        for (int rep = 0; rep < 6; rep++) {
            if (rep < 4) {
                for (int64_t i = 0; i < n; i++) w[i] = powf(10.0f, (float)(rep - 2)) * rng_f(&s);
                tr->from_float(w, wq, n);
            } else { /* raw bytes, their fp16 scales kept finite */
                for (size_t i = 0; i < bytes; i++) wq[i] = (uint8_t)rng_next(&s);
                for (int64_t b = 0; b < n / tr->blck; b++)
                    for (size_t i = 0; i + 1 < tr->type_size; i += 2) {
                        uint16_t h;
                        memcpy(&h, wq + (size_t)b * tr->type_size + i, 2);
                        if (((h >> 10) & 0x1f) == 0x1f) h ^= 0x4000; /* no inf / NaN exponent */
                        memcpy(wq + (size_t)b * tr->type_size + i, &h, 2);
                    }
            }
            assert_int_equal(og_dequantize_row(types[ti], wq, want, n), OG_OK);
            for (int64_t e = 0; e < n; e++) {
                const float got = og_canon_deq(types[ti], wq, e);
                if (bits(got) != bits(want[e]))
                    fail_msg("%s rep %d element %lld: header %.9g (0x%08x), to_float %.9g (0x%08x)", tr->name, rep,
                             (long long)e, got, bits(got), want[e], bits(want[e]));
            }
            n_cases++;
        }
        free(w);
        free(want);
        free(wq);
    }
    assert_int_equal(n_cases, N_TYPES * 6);
}

/* Every fp16 value to f32; f32 -> fp16 on every 4099th bit pattern plus the edges. */
static void test_fp16(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        const float a = og_fp16_to_fp32((uint16_t)h), b = og_canon_h2f((uint16_t)h);
        if (memcmp(&a, &b, 4) && !(a != a && b != b)) fail_msg("h2f 0x%04x: 0x%08x vs 0x%08x", h, bits(a), bits(b));
    }
    long n = 0;
    for (uint64_t u = 0; u <= 0xffffffffull; u += 4099) {
        float f;
        uint32_t v = (uint32_t)u;
        memcpy(&f, &v, 4);
        if (og_fp32_to_fp16(f) != og_canon_f2h(f)) fail_msg("f2h 0x%08x: 0x%04x vs 0x%04x", v, og_fp32_to_fp16(f), og_canon_f2h(f));
        n++;
    }
    /* the subnormal ties and the rounding edges around them */
    for (uint32_t v = 0x33000000u - 64; v < 0x38800000u + 64; v += 97) {
        float f;
        memcpy(&f, &v, 4);
        assert_int_equal(og_fp32_to_fp16(f), og_canon_f2h(f));
        assert_int_equal(og_fp32_to_fp16(-f), og_canon_f2h(-f));
    }
    assert_true(n > 1000000);
}

/* og_canon_expf within 2 ulp of the double exp rounded, over the whole range. */
static void test_expf(void **state) {
    (void)state;
    int worst = 0;
    long n = 0;
    for (float x = -103.0f; x < 88.7f; x += 0.00731f) {
        const float got = og_canon_expf(x), want = (float)exp((double)x);
        if (want < 1.17549435e-38f) continue; /* subnormal results: checked below as an absolute error */
        const int d = abs((int)bits(got) - (int)bits(want));
        if (d > worst) worst = d;
        n++;
    }
    assert_true(worst <= 2);
    assert_true(n > 20000);
    for (float x = -103.9f; x < -87.3f; x += 0.01f)
        assert_true(fabs((double)og_canon_expf(x) - exp((double)x)) <= 2.0 * 1.4e-45);
    assert_true(isinf(og_canon_expf(89.0f)) && og_canon_expf(-104.0f) == 0.0f && isnan(og_canon_expf(NAN)));
    assert_true(og_canon_expf(0.0f) == 1.0f);
    printf("og_canon_expf: worst %d ulp over %ld points\n", worst, n);
}

/* og_swiglu / og_swiglu_clamp compute exactly the header's per-element functions. */
static void test_swiglu(void **state) {
    (void)state;
    enum { N = 4096 };
    static float g[N], u[N], y[N];
    uint64_t s = 12345;
    for (int i = 0; i < N; i++) {
        g[i] = 30.0f * rng_f(&s);
        u[i] = 10.0f * rng_f(&s);
    }
    g[0] = NAN, u[1] = NAN, g[2] = INFINITY, g[3] = -200.0f, g[4] = 200.0f;
    og_swiglu(y, g, u, N);
    for (int i = 0; i < N; i++) {
        const float h = og_canon_silu_mul(g[i], u[i]);
        assert_true(!memcmp(&h, &y[i], 4) || (h != h && y[i] != y[i]));
        if (i > 4) assert_true(fabs((double)y[i] - g[i] / (1.0 + exp(-(double)g[i])) * u[i]) <= 1e-5 * (1 + fabs((double)y[i])));
    }
    og_swiglu_clamp(y, g, u, N, 7.0f);
    for (int i = 0; i < N; i++) {
        const float h = og_canon_silu_mul_clamp(g[i], u[i], 7.0f);
        assert_true(!memcmp(&h, &y[i], 4));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_terms_vs_reference),
        cmocka_unit_test(test_dequantize),
        cmocka_unit_test(test_fp16),
        cmocka_unit_test(test_expf),
        cmocka_unit_test(test_swiglu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
