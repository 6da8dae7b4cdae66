/* quant: every type against the test vectors of kquants.md §8 (made with ggml's
 * own reference code), then every SIMD tier against the scalar reference on
 * random and adversarial blocks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "og_quant.h"
#include "og_quant_canon.h"
#include "sanitized_fixture.h" /* OG_TEST_SANITIZED: the sanitizer builds run smaller cases */
#include "skip_fixture.h"

static float vec_x(int i) { return (float)((((i * 37 + 11) % 97) - 48) * (1 + (i / 32) % 4)) / 64.0f; }
static float vec_y(int i) { return (float)(((i * 53 + 7) % 89) - 44) / 32.0f; }

typedef struct vector_case {
    og_ggml_type type;
    size_t bytes;        /* for 512 elements */
    float head[4];       /* x^[0..3] */
    float mid[4];        /* x^[300..303] */
    double sum;          /* sum of x^ */
    const char *first;   /* first block bytes, hex, or NULL */
    double dot;          /* ggml vec_dot with y, NAN if not listed */
} vector_case;

static const vector_case vcases[] = {
    {OG_TYPE_Q8_0, 544, {-0.578308105f, 0, 0.578308105f, -0.358551025f}, {0.16192627f, 1.30697632f, -0.566741943f, 0.589874268f}, -4.63969421,
     "ec1d9c0064c22684e84caa0e71cf3391f559b71b7fdd419f0367c52986ea4eac1074", -22.090218},
    {OG_TYPE_Q4_0, 288, {-0.55078125f, -0.f, 0.55078125f, -0.3671875f}, {0.18359375f, 1.28515625f, -0.55078125f, 0.55078125f}, -4.54296875,
     "e0adde6802ac46ef8a23cd57f19b35df7912", -21.714558},
    {OG_TYPE_Q4_1, 320, {-0.621887207f, -0.0407104492f, 0.540466309f, -0.331298828f}, {0.112304688f, 1.2746582f, -0.46887207f, 0.499755859f}, -5.63977051, NULL, NAN},
    {OG_TYPE_Q5_0, 352, {-0.596679688f, -0.f, 0.596679688f, -0.3671875f}, {0.18359375f, 1.28515625f, -0.55078125f, 0.55078125f}, -3.85546875,
     "e0a96b69692d9dd003488bcf03367bbef2366abee115", -23.786301},
    {OG_TYPE_Q5_1, 384, {-0.578125f, -0.015625f, 0.59375f, -0.34375f}, {0.15625f, 1.28125f, -0.59375f, 0.625f}, -4.76000977, NULL, NAN},
    {OG_TYPE_IQ4_NL, 288, {-0.522842407f, -0.00587463379f, 0.610961914f, -0.405349731f}, {0.118484497f, 1.23223877f, -0.627967834f, 0.580574036f}, -2.01309967, NULL, NAN},
    {OG_TYPE_Q2_K, 168, {-0.565063477f, 0.127441406f, 0.473693848f, -0.218811035f}, {0.600219727f, 1.5279541f, -0.327514648f, 0.600219727f}, -2.05371094,
     "33347877abbbdece34446778ab9aceffa43a93e54e94394fe43a93e54e943953e40e93f94ea43953e84e943952e43d9393e94e943952e40e93f94ea43953e54e943943e57a93e94ea43a93e54e90394f632f0732", -26.929518},
    {OG_TYPE_Q3_K, 220, {-0.539291382f, 0, 0.539291382f, -0.359527588f}, {-0.f, 1.47399902f, -0.736999512f, 0.736999512f}, -0.786071777,
     "2e718f7ad5ae70852a518f7ad5ae718fc52a50873ad5af78c73ad5af78c52e7885582ff2b5581ff2b5481fe2f6885c2f5e9bf8256e8ff835529fcbe5619ffb34fc21568bfc2d5687fc2d5287f83d62974957e6be895be3fe8d5427f2b95827ee7987efe19575d20e2dd2e20d93a6", -23.486898},
    {OG_TYPE_Q4_K, 288, {-0.616264343f, -0.0456619263f, 0.620040894f, -0.330963135f}, {0.109008789f, 1.27209473f, -0.47253418f, 0.690551758f}, -4.93889618,
     "7e1e122a0f5faefd4f5faefc0fffdeff51b71e74da3096fc62b82e85eb41a70d63c93f95eb52b81e74da40960c62c82fb81e74da41a70c63c92f85eb41a71d74da3096fc52b82e84da41a70d63c92f852f85eb41a71e74ca3f96fc52b81e75db41a70d63c92f85eb42a81e74da3096fc85eb51b71d74da3096fc62b82e84ea41a71d63c93f95eb52b71d74da40960c62", -21.639395},
    {OG_TYPE_Q5_K, 352, {-0.574922562f, 0.0183105469f, 0.565910339f, -0.346755981f}, {0.124286652f, 1.32186127f, -0.520561218f, 0.584892273f}, -4.66721153, NULL, -23.748726},
    {OG_TYPE_Q6_K, 420, {-0.5838871f, 0, 0.5838871f, -0.35033226f}, {0.139238834f, 1.29956245f, -0.556955338f, 0.603368282f}, -5.80235958,
     "e730e941f941aa53ab03bc04bd156d1692199129a038bf37cf46de55dd65ec730b730a920aa119a138a037df47de46ddab249c159d058ef67ff76fe850d951c9640b630aa20aa109a148a037df37de3633ab249c159d058ef67ff76fe850d951c84eb33ea42fa41a951a800b70fb71e6b039b049c25ad35ce36cf37df68d069fd806afd972ac0573d806afd572a8057f27cd503a8d67f950268d53fa8027fd505c36816bf69c2bc15c36816bf55c2a81a40973d40ea3d97e940963d43ea0097f1fe1c03ea95e7a83e01fc63d59a2807d2c12", -21.748589},
    {OG_TYPE_Q8_K, 584, {-0.566929102f, -0.f, 0.566929102f, -0.354330719f}, {0.161909446f, 1.31840551f, -0.555118084f, 0.601377964f}, -4.64616142, NULL, NAN},
};


static void test_fp16_bf16(void **state) {
    (void)state;
    /* kquants.md §8 spot checks */
    static const struct { float f; uint16_t h, b; } v[] = {
        {1.0f, 0x3c00, 0x3f80}, {-2.5f, 0xc100, 0xc020}, {0.1f, 0x2e66, 0x3dcd},
        {65504.0f, 0x7bff, 0x4780}, {1e-8f, 0x0000, 0x322c}, {70000.0f, 0x7c00, 0x4789},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        assert_int_equal(og_fp32_to_fp16(v[i].f), v[i].h);
        assert_int_equal(og_fp32_to_bf16(v[i].f), v[i].b);
    }
    /* every fp16 value round-trips, and exact midpoints round to even */
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = og_fp16_to_fp32((uint16_t)h);
        if (isnan(f)) continue;
        assert_int_equal(og_fp32_to_fp16(f), h);
        if (((h >> 10) & 0x1f) < 30 && (h & 0x8000) == 0) {
            float g = og_fp16_to_fp32((uint16_t)(h + 1));
            float mid = (float)(((double)f + (double)g) / 2.0);
            assert_int_equal(og_fp32_to_fp16(mid), (h & 1) ? h + 1 : h);
        }
    }
}

static void test_vectors(void **state) {
    (void)state;
    float x[512], y[512], xh[512];
    for (int i = 0; i < 512; i++) {
        x[i] = vec_x(i);
        y[i] = vec_y(i);
    }
    for (size_t c = 0; c < sizeof vcases / sizeof vcases[0]; c++) {
        const vector_case *vc = &vcases[c];
        const og_type_traits *tr = og_quant_traits(vc->type);
        assert_non_null(tr);
        uint64_t bytes;
        assert_int_equal(og_row_bytes(vc->type, 512, &bytes), OG_OK);
        assert_int_equal(bytes, vc->bytes);
        uint8_t q[1024];
        assert_int_equal(og_quantize_row(vc->type, x, q, 512), OG_OK);
        if (vc->first) {
            char hex[1024];
            for (uint32_t i = 0; i < tr->type_size; i++) snprintf(hex + 2 * i, 3, "%02x", q[i]);
            if (strcmp(hex, vc->first)) fail_msg("%s first block\n got  %s\n want %s", tr->name, hex, vc->first);
        }
        assert_int_equal(og_dequantize_row(vc->type, q, xh, 512), OG_OK);
        double sum = 0;
        for (int i = 0; i < 512; i++) sum += xh[i];
        for (int i = 0; i < 4; i++) {
            if (fabsf(xh[i] - vc->head[i]) > 1e-6f || fabsf(xh[300 + i] - vc->mid[i]) > 1e-6f)
                fail_msg("%s: x^[%d] = %.9g (want %.9g), x^[%d] = %.9g (want %.9g)", tr->name, i, xh[i], vc->head[i],
                         300 + i, xh[300 + i], vc->mid[i]);
        }
        if (fabs(sum - vc->sum) > 2e-5) fail_msg("%s: sum %.9g, want %.9g", tr->name, sum, vc->sum);
        if (!isnan(vc->dot)) {
            uint8_t yq[1024];
            assert_int_equal(og_quantize_row(tr->vec_dot_type, y, yq, 512), OG_OK);
            float d;
            tr->vec_dot(512, &d, q, yq);
            if (fabs(d - vc->dot) > 2e-5 * fabs(vc->dot)) fail_msg("%s dot %.9g, want %.9g", tr->name, d, vc->dot);
        }
    }
    /* Q8_K of y, block 0 */
    og_block_q8_K yk[2];
    assert_int_equal(og_quantize_row(OG_TYPE_Q8_K, y, yk, 512), OG_OK);
    assert_true(fabsf(yk[0].d - (-0.0108267711f)) < 1e-9f);
    static const int16_t bsums[16] = {307, -321, 74, 215, -156, -13, 126, -245, 154, 37, -80, 65, -50, -169, 230, -141};
    assert_memory_equal(yk[0].bsums, bsums, sizeof bsums);
}

/* ---- tiers vs reference ------------------------------------------------------ */

static uint64_t rng = 0x1234567;
static float frand(void) { return (float)(og_rand_unit(&rng) * 2.0 - 1.0); }

typedef enum { DATA_RANDOM, DATA_EQUAL, DATA_ZERO, DATA_EXTREME, DATA_SPARSE } data_kind;

static void fill(float *v, int64_t n, data_kind k, float scale) {
    for (int64_t i = 0; i < n; i++) {
        switch (k) {
        case DATA_RANDOM: v[i] = scale * frand(); break;
        case DATA_EQUAL: v[i] = scale * 0.37f; break;
        case DATA_ZERO: v[i] = (i / 32) % 3 == 0 ? 0.0f : scale * frand(); break; /* zero-scale blocks */
        case DATA_EXTREME: v[i] = (i % 97 == 0) ? scale * 60000.0f * (i % 2 ? -1 : 1) : scale * 1e-4f * frand(); break;
        case DATA_SPARSE: v[i] = (i % 7 == 0) ? scale * frand() : 0.0f; break;
        }
    }
}

static void test_tiers(void **state) {
    (void)state;
    og_cpu_features f;
    og_cpu_detect(&f);
    static const og_ggml_type types[] = {OG_TYPE_F32, OG_TYPE_F16, OG_TYPE_BF16, OG_TYPE_Q8_0, OG_TYPE_Q4_0,
                                         OG_TYPE_Q4_1, OG_TYPE_Q5_0, OG_TYPE_Q5_1, OG_TYPE_IQ4_NL, OG_TYPE_Q2_K,
                                         OG_TYPE_Q3_K, OG_TYPE_Q4_K, OG_TYPE_Q5_K, OG_TYPE_Q6_K,
                                         OG_TYPE_IQ2_XXS, OG_TYPE_MXFP4};
    og_kernels ref;
    assert_int_equal(og_kernels_init(OG_ISA_SCALAR, &ref), OG_OK);
    int tested_tiers = 0;
    for (int isa = OG_ISA_AVX2; isa <= OG_ISA_AVX512; isa++) {
        og_isa got;
        char note[256], err[256];
        if (og_isa_choose(&f, og_isa_name((og_isa)isa), &got, note, sizeof note, err, sizeof err) != OG_OK) {
            OG_NOTE_HW_SKIP("test_quant: SIMD tier %s: %s", og_isa_name((og_isa)isa), err);
            continue;
        }
        og_kernels k;
        assert_int_equal(og_kernels_init((og_isa)isa, &k), OG_OK);
        tested_tiers++;
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
            const og_type_traits *tr = og_quant_traits(types[ti]);
            const og_type_traits *act = og_quant_traits(tr->vec_dot_type);
            /* odd and even block counts (two-block SIMD loops and their tails) */
            static const int nblocks[] = {1, 2, 3, 7, 8, 29};
            for (size_t nbi = 0; nbi < 6; nbi++) {
                int64_t n = (int64_t)nblocks[nbi] * (tr->blck == 1 ? 33 : tr->blck);
                if (tr->blck == 1) n += 5; /* float types: not a multiple of the vector width */
                float *w = malloc((size_t)n * 4), *a = malloc((size_t)n * 4);
                uint8_t *qw = malloc((size_t)n * 4 + 64), *qa = malloc((size_t)n * 4 + 64);
                for (int kind = 0; kind <= DATA_SPARSE; kind++) {
                    fill(w, n, (data_kind)kind, 1.0f);
                    fill(a, n, kind == DATA_EXTREME ? DATA_RANDOM : (data_kind)kind, 3.0f);
                    tr->from_float(w, qw, n);
                    act->from_float(a, qa, n);
                    float r, s;
                    ref.vec_dot[tr->type](n, &r, qw, qa);
                    k.vec_dot[tr->type](n, &s, qw, qa);
                    /* bound: relative to sum |w^ * a^| */
                    float *wd = malloc((size_t)n * 4), *ad = malloc((size_t)n * 4);
                    tr->to_float(qw, wd, n);
                    act->to_float(qa, ad, n);
                    double mag = 0;
                    for (int64_t i = 0; i < n; i++) mag += fabs((double)wd[i] * ad[i]);
                    free(wd);
                    free(ad);
                    double bound = og_quant_dot_tolerance(tr->type) * mag + 1e-30;
                    if (!(fabs((double)r - s) <= bound))
                        fail_msg("%s %s n=%lld data %d: fast %.9g vs reference %.9g (bound %.3g)",
                                 og_isa_name((og_isa)isa), tr->name, (long long)n, kind, s, r, bound);
                }
                free(w);
                free(a);
                free(qw);
                free(qa);
            }
        }
    }
    print_message("SIMD tiers tested against the scalar reference: %d\n", tested_tiers);
    /* zero tiers is a failure unless the CPU lacks AVX2 itself (then it said so above) */
    if (!tested_tiers && f.avx2) fail_msg("no SIMD tier tested on a CPU with AVX2");
}

/* Kernel variants: the tiers (og_isa), then the AVX-512 tier with GFNI and VBMI
 * hidden (VARIANT_AVX512_PLAIN: its kernels without them, which a CPU with GFNI
 * never picks by itself). */
#define VARIANT_AVX512_PLAIN (OG_ISA_AVX512 + 1)
#define N_VARIANTS (VARIANT_AVX512_PLAIN + 1)
/* Sanitized builds check the kernels without GFNI in test_canonical only (time). */
#ifdef OG_TEST_SANITIZED
#define N_VARIANTS_SIDE VARIANT_AVX512_PLAIN
#else
#define N_VARIANTS_SIDE N_VARIANTS
#endif
static const char *variant_name(int v) { return v == VARIANT_AVX512_PLAIN ? "avx512 (no GFNI/VBMI)" : og_isa_name((og_isa)v); }

/* The kernels of variant isa (a tier, or VARIANT_AVX512_PLAIN), or false if this
 * CPU cannot run it (or, for VARIANT_AVX512_PLAIN, if it is the AVX-512 tier itself). */
static bool tier_kernels(const og_cpu_features *f, int isa, og_kernels *k) {
    og_isa got;
    char note[256], err[256];
    const int tier = isa == VARIANT_AVX512_PLAIN ? OG_ISA_AVX512 : isa;
    if (og_isa_choose(f, og_isa_name((og_isa)tier), &got, note, sizeof note, err, sizeof err) != OG_OK) return false;
    if (isa == VARIANT_AVX512_PLAIN) {
        if (!f->gfni || !f->avx512vbmi) return false;
        og_cpu_features fv = *f;
        fv.gfni = fv.avx512vbmi = false;
        assert_int_equal(og_kernels_init_features(OG_ISA_AVX512, &fv, k), OG_OK);
        return true;
    }
    assert_int_equal(og_kernels_init((og_isa)isa, k), OG_OK);
    return true;
}

/* vec_dot4 (four activation rows in one pass over the weights): for every row
 * exactly vec_dot's bits, which batch invariance rests on; on odd block counts
 * and every data kind, four different activation rows. */
static void test_vec_dot4(void **state) {
    (void)state;
    og_cpu_features f;
    og_cpu_detect(&f);
    int checked = 0, checked2 = 0;
    bool avx512 = false;
    for (int isa = OG_ISA_SCALAR; isa < N_VARIANTS_SIDE; isa++) {
        og_kernels k;
        if (!tier_kernels(&f, isa, &k)) continue;
        avx512 |= isa == OG_ISA_AVX512;
        for (int t = 0; t < OG_TYPE_COUNT; t++) {
            if (!k.vec_dot4[t]) continue;
            const og_type_traits *tr = og_quant_traits((og_ggml_type)t);
            const og_type_traits *act = og_quant_traits(tr->vec_dot_type);
            static const int nblocks[] = {1, 2, 3, 7, 29};
            for (size_t nbi = 0; nbi < 5; nbi++) {
                int64_t n = (int64_t)nblocks[nbi] * tr->blck;
                float *w = malloc((size_t)n * 4), *a = malloc((size_t)n * 4);
                uint8_t *qw = malloc((size_t)n * 4 + 64), *qa = malloc(4 * ((size_t)n * 4 + 64));
                const size_t stride = (size_t)n * 4 + 64;
                for (int kind = 0; kind <= DATA_SPARSE; kind++) {
                    fill(w, n, (data_kind)kind, 1.0f);
                    tr->from_float(w, qw, n);
                    const void *ys[4];
                    for (int i = 0; i < 4; i++) {
                        fill(a, n, i == 3 ? (data_kind)kind : DATA_RANDOM, 1.0f + (float)i);
                        act->from_float(a, qa + i * stride, n);
                        ys[i] = qa + i * stride;
                    }
                    float s4[4];
                    k.vec_dot4[t](n, s4, qw, ys);
                    for (int i = 0; i < 4; i++) {
                        float s1;
                        k.vec_dot[t](n, &s1, qw, ys[i]);
                        if (memcmp(&s1, &s4[i], sizeof s1))
                            fail_msg("%s %s n=%lld data %d row %d: vec_dot4 %.9g vs vec_dot %.9g", variant_name(isa),
                                     tr->name, (long long)n, kind, i, s4[i], s1);
                    }
                }
                free(w);
                free(a);
                free(qw);
                free(qa);
            }
            checked += isa == OG_ISA_AVX512 ? 1 : 0;
            checked2 += isa == OG_ISA_AVX2 ? 1 : 0;
        }
    }
    if (avx512) assert_int_equal(checked, 13); /* Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K-Q6_K, IQ2_XXS, MXFP4 */
    if (f.avx2 && f.fma && f.f16c) assert_int_equal(checked2, 7); /* avx2: Q8_0, Q2_K, Q4_K-Q6_K, IQ2_XXS, MXFP4 */
}

/* Activation quants replaced by random ones over their whole contract range:
 * Q8_K [-128, 127] (bsums kept true), Q8_0 and Q8_1 [-127, 127] (Q8_1's s = d sum
 * kept true), so kernels see every value, -128 included where allowed. */
static void randomize_activation(og_ggml_type t, uint8_t *q, int64_t n, uint64_t *seed) {
    if (t == OG_TYPE_Q8_K) {
        og_block_q8_K *y = (og_block_q8_K *)q;
        for (int64_t b = 0; b < n / 256; b++)
            for (int j = 0; j < 16; j++) {
                int sum = 0;
                for (int i = 0; i < 16; i++) {
                    int v = (int)(og_rand_unit(seed) * 256) - 128;
                    y[b].qs[16 * j + i] = (int8_t)v;
                    sum += v;
                }
                y[b].bsums[j] = (int16_t)sum;
            }
    } else if (t == OG_TYPE_Q8_0 || t == OG_TYPE_Q8_1) {
        const size_t bs = t == OG_TYPE_Q8_0 ? sizeof(og_block_q8_0) : sizeof(og_block_q8_1);
        const size_t off = t == OG_TYPE_Q8_0 ? offsetof(og_block_q8_0, qs) : offsetof(og_block_q8_1, qs);
        for (int64_t b = 0; b < n / 32; b++) {
            int sum = 0;
            for (int i = 0; i < 32; i++) {
                int v = (int)(og_rand_unit(seed) * 255) - 127;
                q[b * bs + off + i] = (uint8_t)(int8_t)v;
                sum += v;
            }
            if (t == OG_TYPE_Q8_1) {
                uint16_t dh, sh;
                memcpy(&dh, q + b * bs, 2);
                sh = og_fp32_to_fp16(og_fp16_to_fp32(dh) * (float)sum);
                memcpy(q + b * bs + 2, &sh, 2);
            }
        }
    }
}

/* axpy_f32: every tier the reference's bits (the product rounded, then the sum),
 * on every length up to 70 (masked and scalar tails). */
static void test_axpy(void **state) {
    (void)state;
    og_cpu_features f;
    og_cpu_detect(&f);
    float x[70], y0[70], y1[70];
    for (int isa = OG_ISA_SCALAR; isa <= OG_ISA_AVX512; isa++) {
        og_kernels k;
        if (!tier_kernels(&f, isa, &k)) continue;
        for (int n = 0; n <= 70; n++) {
            const float a = frand();
            for (int i = 0; i < 70; i++) x[i] = frand(), y0[i] = y1[i] = frand();
            og_axpy_f32_ref(n, a, x, y0);
            k.axpy_f32(n, a, x, y1);
            assert_memory_equal(y0, y1, sizeof y0); /* and nothing past n written */
        }
        /* the rounding shows: (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24 rounds (half to even)
         * to 1 + 2^-11, so y = -(1 + 2^-11) ends at 0; a fused multiply-add would
         * leave 2^-24. In a vector lane and in a tail. */
        for (int i = 0; i < 20; i++) x[i] = 1.0f + 0x1p-12f, y1[i] = -(1.0f + 0x1p-11f);
        k.axpy_f32(20, 1.0f + 0x1p-12f, x, y1);
        for (int i = 0; i < 20; i++) assert_true(y1[i] == 0.0f);
    }
}

/* The experts' SwiGLU (og_kernels.swiglu): every tier og_canon_silu_mul's bits (and
 * og_canon_silu_mul_clamp's with a limit) element by element, gate in place, over
 * gate bit patterns spread through all 2^32 (every exponent and sign, NaNs,
 * infinities, subnormals, the exp's clamp and overflow ends), calls of 1 .. 4096
 * elements (every tail length), nothing past n written. bench/RESULTS.md has the
 * exhaustive run over all 2^32 gates. */
static void test_swiglu(void **state) {
    (void)state;
    og_cpu_features f;
    og_cpu_detect(&f);
    enum { N = 4096 };
    static float g[N + 16], u[N], want[N + 16];
    const float ends[] = {0.0f, -0.0f, 88.72284f, -88.72284f, 103.98f, -103.98f, 88.8f, -88.8f, 104.0f, -104.0f,
                          0x1p-149f, -0x1p-149f, INFINITY, -INFINITY, NAN, 7.5f, -7.5f, 1e-30f, 30.0f, -30.0f};
#ifdef OG_TEST_SANITIZED
    const uint32_t stride = 4194301u; /* about 1,000 gates a limit */
#else
    const uint32_t stride = 4099u; /* about a million */
#endif
    for (int isa = OG_ISA_SCALAR; isa <= OG_ISA_AVX512; isa++) {
        og_kernels k;
        if (!tier_kernels(&f, isa, &k)) continue;
        for (int li = 0; li < 2; li++) {
            const float limit = li ? 7.5f : 0.0f;
            uint64_t bits = 12345u;
            for (int call = 0; bits < (1ull << 32); call++) {
                const int n = call < 30 ? call + 1 : N - call % 61; /* short calls first, then tails of 0..60 */
                for (int i = 0; i < n; i++) {
                    uint32_t b = (uint32_t)bits;
                    float x;
                    memcpy(&x, &b, 4);
                    g[i] = (i + call) % 7 == 0 ? ends[(i + call) % 20] : x;
                    u[i] = i % 5 == 0 ? ends[(i * 3 + call) % 20] : frand() * 64.0f;
                    want[i] = li ? og_canon_silu_mul_clamp(g[i], u[i], limit) : og_canon_silu_mul(g[i], u[i]);
                    bits += stride;
                }
                for (int i = n; i < n + 16; i++) g[i] = want[i] = 1234.5f; /* a sentinel */
                k.swiglu(g, g, u, n, limit);
                assert_memory_equal(g, want, (size_t)(n + 16) * sizeof(float));
            }
        }
    }
}

/* Attention's tiled kernels (dot_f32_device_tile, axpy_f32_rows): every tier
 * the scalar definitions' bits, one og_dot_f32_device_ref per score times the
 * scale and one og_axpy_f32_ref per row in order, over row lengths 1..200
 * (tails of every size, the 160 of the demo model's MLA), tiles of 1..70 rows
 * and 1..5 queries (odd counts, partial row groups), with a sentinel around
 * the outputs (nothing past n_rows or n_q written). Tiny values of both signs
 * make lanes reach -0, which the zero padding's fma(0, 0, -0) turns to +0. */
static void test_attn_tile(void **state) {
    (void)state;
    og_cpu_features f;
    og_cpu_detect(&f);
    enum { MAXN = 200, MAXR = 70, MAXQ = 5, RS = 211, QS = 203, LD = 77 };
    float *rows = malloc(sizeof(float) * MAXR * RS), *q = malloc(sizeof(float) * MAXQ * QS);
    float o0[(MAXQ + 1) * LD], o1[(MAXQ + 1) * LD], y0[MAXN + 8], y1[MAXN + 8], a[MAXR];
    int tiers = 0;
    for (int isa = OG_ISA_SCALAR; isa <= OG_ISA_AVX512; isa++) {
        og_kernels k;
        if (!tier_kernels(&f, isa, &k)) continue;
        tiers++;
        for (int it = 0; it < 400; it++) {
            const int n = 1 + (int)(og_rand_unit(&rng) * MAXN), nr = 1 + (int)(og_rand_unit(&rng) * MAXR);
            const int nq = 1 + (int)(og_rand_unit(&rng) * MAXQ);
            const float mag = it % 4 == 3 ? 1e-23f : 1.0f; /* products below the smallest subnormal */
            for (int i = 0; i < MAXR * RS; i++) rows[i] = frand() * mag;
            for (int i = 0; i < MAXQ * QS; i++) q[i] = frand() * mag;
            const float scale = it % 2 ? 0.0883883f : 1.0f;
            for (int i = 0; i < (MAXQ + 1) * LD; i++) o0[i] = o1[i] = -7.0f;
            og_dot_f32_device_tile_ref(rows, RS, nr, q, QS, nq, n, scale, o0, LD);
            k.dot_f32_device_tile(rows, RS, nr, q, QS, nq, n, scale, o1, LD);
            assert_memory_equal(o0, o1, sizeof o0);
            for (int i = 0; i < nq; i++)
                for (int r = 0; r < nr; r++) /* the definition, score by score, and the tier's own dot */
                    assert_true(o1[i * LD + r] == og_dot_f32_device_ref(rows + r * RS, q + i * QS, n) * scale &&
                                o1[i * LD + r] == k.dot_f32_device(rows + r * RS, q + i * QS, n) * scale);
            for (int r = 0; r < nr; r++) a[r] = frand();
            for (int i = 0; i < MAXN + 8; i++) y0[i] = y1[i] = frand();
            og_axpy_f32_rows_ref(n, nr, a, rows, RS, y0);
            k.axpy_f32_rows(n, nr, a, rows, RS, y1);
            assert_memory_equal(y0, y1, sizeof y0);
        }
        /* -0 lanes: every product -2^-200 rounds to -0 in its lane; the padding's
         * fma(0, 0, -0) is +0, so a 33-element row gives +0 ... and exactly that */
        for (int i = 0; i < 40; i++) rows[i] = -0x1p-100f, q[i] = 0x1p-100f;
        float z = -1.0f;
        k.dot_f32_device_tile(rows, 40, 1, q, 40, 1, 33, 1.0f, &z, 1);
        assert_true(z == 0.0f && !signbit(z) && og_dot_f32_device_ref(rows, q, 33) == z);
    }
    assert_true(tiers >= 1);
    free(rows);
    free(q);
}

/* f16_to_f32 (an f16 KV cache's rows as attention reads them): every tier
 * widens all 65,536 binary16 values exactly, against the IEEE value computed
 * another way (ldexp of the significand: subnormals m 2^-24, normals (1024 + m)
 * 2^(e-25), infinities; NaNs stay NaN of the sign), in one long row (vector
 * body) and at every length up to 40 (tails, nothing past n written). */
static void test_f16_to_f32(void **state) {
    (void)state;
    og_cpu_features f;
    og_cpu_detect(&f);
    enum { N = 65536 };
    uint16_t *h = malloc(N * sizeof *h);
    float *y = malloc((N + 1) * sizeof *y);
    for (int i = 0; i < N; i++) h[i] = (uint16_t)i;
    int n_tiers = 0;
    for (int isa = OG_ISA_SCALAR; isa <= OG_ISA_AVX512; isa++) {
        og_kernels k;
        if (!tier_kernels(&f, isa, &k)) continue;
        assert_non_null(k.f16_to_f32);
        y[N] = 42.0f;
        k.f16_to_f32(h, y, N);
        assert_true(y[N] == 42.0f);
        for (int i = 0; i < N; i++) {
            const int e = (i >> 10) & 31, m = i & 1023;
            const double sgn = (i & 0x8000) ? -1.0 : 1.0;
            if (e == 31 && m) {
                assert_true(isnan(y[i]) && !signbit(y[i]) == !(i & 0x8000));
                continue;
            }
            const double want = e == 31 ? sgn * INFINITY : e ? sgn * ldexp(1024 + m, e - 25) : sgn * ldexp(m, -24);
            if ((double)y[i] != want || !signbit(y[i]) != !signbit(want))
                fail_msg("%s: f16 0x%04x gave %a, want %a", og_isa_name(k.isa), i, (double)y[i], want);
        }
        for (int n = 0; n <= 40; n++) {
            float t[41];
            for (int i = 0; i <= 40; i++) t[i] = -1.0f;
            k.f16_to_f32(h + 15360, t, n); /* 0x3c00 = 1.0 onwards */
            for (int i = 0; i < n; i++) assert_true(t[i] == og_fp16_to_fp32((uint16_t)(15360 + i)));
            for (int i = n; i <= 40; i++) assert_true(t[i] == -1.0f);
        }
        n_tiers++;
    }
    assert_true(n_tiers >= 1);
    free(h);
    free(y);
}

/* Activation quantizers: every tier writes the reference's bytes, on random rows,
 * rows with ties for the largest magnitude (+a and -a: the first wins), zero
 * blocks, blocks with a NaN (also as the first element) and an infinity of either
 * sign, a -0 block with a denormal, exact halves, and the largest finite floats. */
static void test_quantize_act(void **state) {
    (void)state;
    og_cpu_features f;
    og_cpu_detect(&f);
    static const og_ggml_type acts[] = {OG_TYPE_Q8_0, OG_TYPE_Q8_1, OG_TYPE_Q8_K};
    og_kernels ref;
    assert_int_equal(og_kernels_init(OG_ISA_SCALAR, &ref), OG_OK);
    const int64_t n = 6 * 256;
    float x[6 * 256];
    uint8_t a[6 * 300], b[6 * 300];
    for (int isa = OG_ISA_AVX2; isa <= OG_ISA_AVX512; isa++) {
        og_kernels k;
        if (!tier_kernels(&f, isa, &k)) continue;
        for (size_t t = 0; t < 3; t++)
            for (int rep = 0; rep < 20; rep++) {
                for (int64_t i = 0; i < n; i++) x[i] = frand() * (float)(rep + 1);
                x[3] = 50.0f, x[200] = -50.0f;        /* a tie: +a first */
                x[256 + 7] = -60.0f, x[256 + 9] = 60.0f; /* a tie: -a first */
                for (int i = 512; i < 768; i++) x[i] = 0.0f; /* a zero block */
                if (rep == 1) x[800] = NAN;
                if (rep == 2) x[1100] = INFINITY;
                if (rep == 3) x[0] = NAN, x[1300] = -INFINITY, x[1301] = NAN; /* NaN first; -inf */
                if (rep == 4) /* a block of -0 with one denormal, and halves that round to even */
                    for (int i = 1024; i < 1280; i++) x[i] = i == 1100 ? 0x1p-140f : -0.0f;
                if (rep == 5)
                    for (int i = 0; i < 256; i++) x[i] = (float)(i % 64) * 0.5f - 16.0f; /* max -16: x id = -127 x / 16 */
                if (rep == 6) x[1290] = 3e38f, x[1291] = -3e38f; /* the largest finite magnitudes */
                memset(a, 0, sizeof a);
                memset(b, 0, sizeof b);
                ref.quantize_act[acts[t]](x, a, n);
                k.quantize_act[acts[t]](x, b, n);
                if (memcmp(a, b, sizeof a))
                    fail_msg("%s quantize_act %s differs from the reference (rep %d)", og_isa_name((og_isa)isa),
                             og_quant_traits(acts[t])->name, rep);
            }
    }
}

/* Blocks of random bytes (every scale, quant and high-bit pattern a file could
 * hold, not only what the reference quantizer writes) with finite fp16 scales:
 * each tier's dot within the bound of the reference, vec_dot4 and the device-order
 * kernels bit for bit against vec_dot and the reference's dequantize-then-dot. */
/* The quantized types and the offsets of their fp16 scales in a block (-1: none). */
static const struct { og_ggml_type t; int off[2]; } rtypes[] = {
    {OG_TYPE_Q8_0, {0, -1}}, {OG_TYPE_Q4_0, {0, -1}}, {OG_TYPE_Q4_1, {0, 2}},   {OG_TYPE_Q5_0, {0, -1}},
    {OG_TYPE_Q5_1, {0, 2}},  {OG_TYPE_IQ4_NL, {0, -1}}, {OG_TYPE_Q2_K, {80, 82}}, {OG_TYPE_Q3_K, {108, -1}},
    {OG_TYPE_Q4_K, {0, 2}},  {OG_TYPE_Q5_K, {0, 2}},  {OG_TYPE_Q6_K, {208, -1}}, {OG_TYPE_IQ2_XXS, {0, -1}},
    {OG_TYPE_MXFP4, {-1, -1}}, /* its E8M0 exponent: random_row keeps it in 2^-28 .. 2^12 */
};
#define N_RTYPES (sizeof rtypes / sizeof rtypes[0])

/* nb blocks of type rtypes[ti] of random bytes with finite fp16 scales in [-1, 1]. */
static void random_row(size_t ti, uint8_t *w, int64_t nb, uint64_t *seed) {
    const og_type_traits *tr = og_quant_traits(rtypes[ti].t);
    for (size_t i = 0; i < (size_t)nb * tr->type_size; i++) w[i] = (uint8_t)(og_rand_unit(seed) * 256);
    for (int64_t b = 0; b < nb; b++)
        for (int k = 0; k < 2; k++)
            if (rtypes[ti].off[k] >= 0) {
                uint16_t h = og_fp32_to_fp16((float)(og_rand_unit(seed) * 2 - 1));
                memcpy(w + b * tr->type_size + rtypes[ti].off[k], &h, 2);
            }
    if (rtypes[ti].t == OG_TYPE_MXFP4) /* finite products with any Q8_0 scale; e = 0 and 1 (subnormal scales) too */
        for (int64_t b = 0; b < nb; b++) w[b * tr->type_size] = (uint8_t)(b % 5 == 4 ? b % 2 : 100 + og_rand_unit(seed) * 40);
}

static void test_random_blocks(void **state) {
    (void)state;
    og_cpu_features f;
    og_cpu_detect(&f);
    og_kernels ref;
    assert_int_equal(og_kernels_init(OG_ISA_SCALAR, &ref), OG_OK);
    uint64_t seed = 99;
    for (size_t ti = 0; ti < N_RTYPES; ti++) {
        const og_type_traits *tr = og_quant_traits(rtypes[ti].t);
        const og_type_traits *act = og_quant_traits(tr->vec_dot_type);
        const int64_t n = 7 * tr->blck, nb = 7;
        uint8_t w[4][7 * 256], qa[4][7 * 300];
        float a[7 * 256], deq[7 * 256];
        for (int r = 0; r < 4; r++) {
            random_row(ti, w[r], nb, &seed);
            for (int64_t i = 0; i < n; i++) a[i] = (float)(og_rand_unit(&seed) * 2 - 1) * (float)(r + 1);
            act->from_float(a, qa[r], n);
            randomize_activation(act->type, qa[r], n, &seed);
        }
        const void *ys[4] = {qa[0], qa[1], qa[2], qa[3]};
        for (int isa = OG_ISA_AVX2; isa < N_VARIANTS_SIDE; isa++) {
            og_kernels k;
            if (!tier_kernels(&f, isa, &k)) continue;
            for (int r = 0; r < 4; r++) {
                float want, got;
                ref.vec_dot[tr->type](n, &want, w[0], qa[r]);
                k.vec_dot[tr->type](n, &got, w[0], qa[r]);
                tr->to_float(w[0], deq, n);
                float *ad = a; /* the activation as the dot sees it */
                act->to_float(qa[r], ad, n);
                double mag = 0;
                for (int64_t i = 0; i < n; i++) mag += fabs((double)deq[i] * ad[i]);
                if (!(fabs((double)want - got) <= og_quant_dot_tolerance(tr->type) * mag + 1e-30))
                    fail_msg("%s %s row %d: fast %.9g vs reference %.9g", variant_name(isa), tr->name, r, got, want);
                if (k.vec_dot4[tr->type]) {
                    float s4[4];
                    k.vec_dot4[tr->type](n, s4, w[0], ys);
                    assert_memory_equal(&s4[r], &got, sizeof got);
                }
            }
        }
    }
}

/* og_dot_f32_device: the warp order, checked by hand, and every tier bit-identical
 * to the reference on odd lengths and values of every magnitude. */
static void test_dot_f32_device(void **state) {
    (void)state;
    float w[100], x[100];
    /* 1..3 . 4..6 = 32 exactly */
    for (int i = 0; i < 3; i++) w[i] = (float)(i + 1), x[i] = (float)(i + 4);
    assert_true(og_dot_f32_device_ref(w, x, 3) == 32.0f);
    /* the order shows: lane 0 gets 1e8 then 1e8 + 1 (= 1e8 in float), lane 1 gets -1e8,
     * so the warp sum is 0 where a sequential sum (1e8 - 1e8 + 1) would give 1 */
    memset(w, 0, sizeof w);
    memset(x, 0, sizeof x);
    for (int i = 0; i < 64; i++) w[i] = 1.0f;
    x[0] = 1e8f;
    x[1] = -1e8f;
    x[32] = 1.0f;
    assert_true(og_dot_f32_device_ref(w, x, 64) == 0.0f);
    og_cpu_features f;
    og_cpu_detect(&f);
    uint64_t seed = 7;
    for (int isa = OG_ISA_SCALAR; isa <= OG_ISA_AVX512; isa++) {
        og_kernels k;
        if (!tier_kernels(&f, isa, &k)) continue;
        for (int n = 1; n <= 100; n++) {
            for (int i = 0; i < n; i++) {
                w[i] = (float)((og_rand_unit(&seed) - 0.5) * pow(10.0, (double)(i % 7) - 3));
                x[i] = (float)(og_rand_unit(&seed) - 0.5);
            }
            float a = og_dot_f32_device_ref(w, x, n), b = k.dot_f32_device(w, x, n);
            assert_memory_equal(&a, &b, sizeof a);
        }
        /* fused dequantize-and-dot kernels: the same bits as dequantize, then the reference */
        int fused = 0, fused4 = 0;
        for (int t = 0; t < OG_TYPE_COUNT; t++) {
            if (!k.dot_device[t]) continue;
            fused++;
            const og_type_traits *tr = og_quant_traits((og_ggml_type)t);
            const int64_t n = tr->blck == 1 ? 8 * 32 + 5 : 8 * tr->blck; /* float types: a zero-padded tail */
            if (tr->blck == 1) /* float types: short rows too, all tail */
                for (int64_t m = 1; m <= 40; m += 13) {
                    float wf1[64], xf1[64], deq1[64];
                    uint8_t q1[128];
                    for (int64_t i = 0; i < m; i++) wf1[i] = (float)(og_rand_unit(&seed) - 0.5), xf1[i] = (float)(og_rand_unit(&seed) - 0.5);
                    og_quantize_row((og_ggml_type)t, wf1, q1, m);
                    og_dequantize_row((og_ggml_type)t, q1, deq1, m);
                    float a1 = og_dot_f32_device_ref(deq1, xf1, m), b1 = k.dot_device[t](q1, xf1, m);
                    assert_memory_equal(&a1, &b1, sizeof a1);
                }
            float wf[8 * 256], xf[8 * 256], deq[8 * 256];
            uint8_t q[8 * 256 * 2];
            for (int64_t i = 0; i < n; i++) wf[i] = (float)(og_rand_unit(&seed) - 0.5), xf[i] = (float)(og_rand_unit(&seed) - 0.5);
            og_quantize_row((og_ggml_type)t, wf, q, n);
            og_dequantize_row((og_ggml_type)t, q, deq, n);
            float a = og_dot_f32_device_ref(deq, xf, n), b = k.dot_device[t](q, xf, n);
            assert_memory_equal(&a, &b, sizeof a);
            if (!k.dot_device4[t]) continue;
            /* four rows: rows 1-3 are row 0's blocks rotated, so each row differs */
            const size_t rb = (size_t)n / tr->blck * tr->type_size;
            uint8_t rows4[4 * sizeof q];
            for (int r = 0; r < 4; r++)
                for (size_t i = 0; i < rb; i++) rows4[r * rb + i] = q[(i + (size_t)r * tr->type_size) % rb];
            float out[4];
            k.dot_device4[t](rows4, rb, xf, n, out);
            for (int r = 0; r < 4; r++) {
                float one = k.dot_device[t](rows4 + r * rb, xf, n);
                assert_memory_equal(&one, &out[r], sizeof one);
            }
            fused4++;
        }
        /* the float types but F32 (quantized types have the canonical order instead) */
        if (isa == OG_ISA_AVX512) assert_int_equal(fused, 2);
        if (isa == OG_ISA_AVX512) assert_int_equal(fused4, 2);
    }
}

/* The canonical order (og_quant.h "Canonical numerics") by hand: a Q8_0 row whose
 * result shows the lanes, and one Q4_K block whose I, S and float operations are
 * known; then every tier's vec_dot_canonical and vec_dot4_canonical bit for bit
 * against the scalar statement (og_type_traits.vec_dot_canonical) on random
 * blocks (every byte pattern, finite fp16 scales) of 1 to 70 blocks (last groups
 * of one to eight, more blocks than lanes), and the statement within the float-order
 * bound of the reference vec_dot. */
static void test_canonical(void **state) {
    (void)state;
    og_cpu_features f;
    og_cpu_detect(&f);
    /* Q8_0, 64 blocks: block 0 gives 2^24 (I = 32 * 64 * 8, a = 1 * 1024), block 1
     * -2^24, block 32 gives 1. Lane 0 holds 2^24 + 1 = 2^24 (a tie, to even) and
     * lane 1 -2^24, so the canonical result is 0; the reference's sum in block
     * order is 1. */
    og_block_q8_0 w8[64], y8[64];
    memset(w8, 0, sizeof w8);
    memset(y8, 0, sizeof y8);
    for (int j = 0; j < 32; j++) w8[0].qs[j] = 64, w8[1].qs[j] = -64, y8[0].qs[j] = y8[1].qs[j] = 8;
    w8[0].d = w8[1].d = w8[32].d = og_fp32_to_fp16(1.0f);
    y8[0].d = y8[1].d = og_fp32_to_fp16(1024.0f);
    y8[32].d = og_fp32_to_fp16(1.0f);
    w8[32].qs[0] = y8[32].qs[0] = 1;
    const og_type_traits *t8 = og_quant_traits(OG_TYPE_Q8_0);
    float got, fork;
    t8->vec_dot(64 * 32, &fork, w8, y8);
    assert_true(fork == 1.0f);
    /* Q4_K, one block: quants 3, scales sc_j = j + 1, mins 2, d = 0.5, dmin = 0.25;
     * activations all 1 with d = 0.1: I = 96 * 36, S = 2 * 32 * 8 */
    og_block_q4_K w4;
    og_block_q8_K y4;
    memset(&w4, 0, sizeof w4);
    w4.d = og_fp32_to_fp16(0.5f);
    w4.dmin = og_fp32_to_fp16(0.25f);
    for (int j = 0; j < 4; j++) w4.scales[j] = (uint8_t)(j + 1), w4.scales[j + 4] = 2;
    for (int j = 4; j < 8; j++) w4.scales[j + 4] = (uint8_t)((j + 1) | (2 << 4));
    memset(w4.qs, 0x33, sizeof w4.qs);
    y4.d = 0.1f;
    memset(y4.qs, 1, sizeof y4.qs);
    for (int j = 0; j < 16; j++) y4.bsums[j] = 16;
    const float a4 = 0.5f * 0.1f, c4 = 0.25f * 0.1f, v4 = a4 * 3456.0f, want4 = fmaf(-c4, 512.0f, v4);
    int fast = 0, fast4 = 0;
    for (int isa = OG_ISA_SCALAR; isa <= OG_ISA_AVX512; isa++) {
        og_kernels k;
        if (!tier_kernels(&f, isa, &k)) continue;
        k.vec_dot_canonical[OG_TYPE_Q8_0](64 * 32, &got, w8, y8);
        if (got != 0.0f || signbit(got)) fail_msg("%s Q8_0 canonical by hand: %.9g, want +0", og_isa_name((og_isa)isa), got);
        k.vec_dot_canonical[OG_TYPE_Q4_K](256, &got, &w4, &y4);
        assert_memory_equal(&got, &want4, sizeof got);
        for (int t = 0; t < OG_TYPE_COUNT; t++) {
            const og_type_traits *tr = og_quant_traits((og_ggml_type)t);
            if (isa == OG_ISA_SCALAR || !tr || !tr->vec_dot_canonical) continue;
            fast += k.vec_dot_canonical[t] != tr->vec_dot_canonical;
            fast4 += k.vec_dot4_canonical[t] != NULL;
        }
    }
    /* AVX2 and AVX-512: Q8_0, Q2_K-Q6_K, IQ2_XXS, MXFP4, AVX-512 also Q4_0, Q5_0,
     * IQ4_NL; four rows at once all but AVX2's Q3_K */
    const int has512 = f.avx512f && f.avx512bw && f.avx512vl && f.avx512vnni && f.os_avx512;
    int tiers = (f.avx2 && f.fma && f.f16c) + has512;
    assert_int_equal(fast, 8 * tiers + 3 * has512);
    if (tiers) assert_int_equal(fast4, 7 + 8 * (tiers - 1) + 3 * has512);
    /* the AVX-512 tier's GFNI/VBMI kernels (Q3_K, IQ2_XXS, MXFP4) where the CPU has them:
     * checked below next to the same tier without them */
    if (has512 && f.gfni && f.avx512vbmi) {
        og_kernels k512, plain;
        assert_true(tier_kernels(&f, OG_ISA_AVX512, &k512) && tier_kernels(&f, VARIANT_AVX512_PLAIN, &plain));
        assert_true(k512.vec_dot_canonical[OG_TYPE_Q3_K] != plain.vec_dot_canonical[OG_TYPE_Q3_K]);
        assert_true(k512.vec_dot_canonical[OG_TYPE_IQ2_XXS] != plain.vec_dot_canonical[OG_TYPE_IQ2_XXS]);
        assert_true(k512.vec_dot_canonical[OG_TYPE_MXFP4] != plain.vec_dot_canonical[OG_TYPE_MXFP4]);
    } else if (has512) {
        print_message("SKIP (hardware): no GFNI/VBMI: the AVX-512 tier's GFNI kernels untested\n");
    }

    uint64_t seed = 4242;
    static const int64_t nbs[] = {1, 2, 4, 5, 7, 8, 9, 12, 33, 70};
    int rows = 0;
    for (size_t ti = 0; ti < N_RTYPES; ti++) {
        const og_type_traits *tr = og_quant_traits(rtypes[ti].t);
        const og_type_traits *act = og_quant_traits(tr->vec_dot_type);
        assert_non_null(tr->vec_dot_canonical);
        for (size_t ni = 0; ni < sizeof nbs / sizeof nbs[0]; ni++) {
            const int64_t nb = nbs[ni], n = nb * tr->blck;
            const size_t astride = (size_t)nb * act->type_size;
            uint8_t *w = malloc((size_t)nb * tr->type_size), *qa = malloc(4 * astride);
            float *a = malloc((size_t)n * sizeof *a), *deq = malloc((size_t)n * sizeof *deq);
            random_row(ti, w, nb, &seed);
            tr->to_float(w, deq, n);
            const void *ys[4];
            for (int r = 0; r < 4; r++) {
                for (int64_t i = 0; i < n; i++) a[i] = (float)(og_rand_unit(&seed) * 2 - 1) * (float)(r + 1);
                act->from_float(a, qa + r * astride, n);
                randomize_activation(act->type, qa + r * astride, n, &seed);
                ys[r] = qa + r * astride;
            }
            for (int r = 0; r < 4; r++) {
                float want, ref;
                tr->vec_dot_canonical(n, &want, w, ys[r]);
                tr->vec_dot(n, &ref, w, ys[r]);
                act->to_float(ys[r], a, n);
                double mag = 0;
                for (int64_t i = 0; i < n; i++) mag += fabs((double)deq[i] * a[i]);
                if (!(fabs((double)want - ref) <= og_quant_dot_tolerance(tr->type) * mag + 1e-30))
                    fail_msg("%s n=%lld row %d: canonical %.9g vs reference %.9g", tr->name, (long long)n, r, want, ref);
                for (int isa = OG_ISA_SCALAR; isa < N_VARIANTS; isa++) {
                    og_kernels k;
                    if (!tier_kernels(&f, isa, &k)) continue;
                    k.vec_dot_canonical[tr->type](n, &got, w, ys[r]);
                    if (memcmp(&got, &want, sizeof got))
                        fail_msg("%s %s n=%lld row %d: canonical %.9g vs the statement %.9g", variant_name(isa), tr->name,
                                 (long long)n, r, got, want);
                    if (k.vec_dot4_canonical[tr->type]) {
                        float s4[4];
                        k.vec_dot4_canonical[tr->type](n, s4, w, ys);
                        if (memcmp(&s4[r], &want, sizeof got))
                            fail_msg("%s %s n=%lld row %d: canonical x4 %.9g vs the statement %.9g", variant_name(isa),
                                     tr->name, (long long)n, r, s4[r], want);
                    }
                }
                rows++;
            }
            free(w);
            free(qa);
            free(a);
            free(deq);
        }
    }
    assert_int_equal(rows, (int)(N_RTYPES * 10 * 4));
}

/* The canonical dot of four weight rows against one activation row
 * (og_kernels.vec_dot_r4_canonical, matrix x vector) of every variant the CPU runs:
 * each row's result the scalar statement's bits (og_type_traits.vec_dot_canonical),
 * on random blocks and full-range activations, rows of 1 to 70 blocks (a last group
 * of one to eight, more blocks than lanes), the rows at their own size apart and
 * further apart (a stride that is not the row's). The AVX-512 tier has it for
 * Q8_0, Q4_0, Q5_0, IQ4_NL and the k-quants, the AVX2 tier for Q4_K and Q5_K. */
static void test_canonical_r4(void **state) {
    (void)state;
    og_cpu_features f;
    og_cpu_detect(&f);
    uint64_t seed = 5151;
    static const int64_t nbs[] = {1, 2, 3, 4, 5, 7, 8, 9, 12, 16, 33, 70};
    int kernels = 0, checked = 0;
    for (int isa = OG_ISA_SCALAR; isa < N_VARIANTS; isa++) {
        og_kernels k;
        if (!tier_kernels(&f, isa, &k)) continue;
        for (size_t ti = 0; ti < N_RTYPES; ti++) {
            const og_type_traits *tr = og_quant_traits(rtypes[ti].t), *act = og_quant_traits(tr->vec_dot_type);
            const og_vec_dot_r4_fn r4 = k.vec_dot_r4_canonical[tr->type];
            if (!r4) continue;
            kernels++;
            for (size_t ni = 0; ni < sizeof nbs / sizeof nbs[0]; ni++) {
                const int64_t nb = nbs[ni], n = nb * tr->blck;
                const size_t rb = (size_t)nb * tr->type_size;
                for (int gap = 0; gap < 2; gap++) {
                    const size_t stride = rb + (size_t)gap * 96;
                    uint8_t *w = malloc(4 * stride), *qa = malloc((size_t)nb * act->type_size);
                    float *a = malloc((size_t)n * sizeof *a);
                    for (int r = 0; r < 4; r++) random_row(ti, w + r * stride, nb, &seed);
                    for (int64_t i = 0; i < n; i++) a[i] = (float)(og_rand_unit(&seed) * 2 - 1);
                    act->from_float(a, qa, n);
                    randomize_activation(act->type, qa, n, &seed);
                    float s4[4];
                    r4(n, s4, w, stride, qa);
                    for (int r = 0; r < 4; r++) {
                        float want;
                        tr->vec_dot_canonical(n, &want, w + r * stride, qa);
                        if (memcmp(&s4[r], &want, sizeof want))
                            fail_msg("%s %s n=%lld stride %zu row %d: canonical r4 %.9g vs the statement %.9g", variant_name(isa),
                                     tr->name, (long long)n, stride, r, s4[r], want);
                        checked++;
                    }
                    free(w);
                    free(qa);
                    free(a);
                }
            }
        }
    }
    const int has512 = f.avx512f && f.avx512bw && f.avx512vl && f.avx512vnni && f.os_avx512;
    /* Q8_0, Q4_0, Q5_0, IQ4_NL, Q2_K-Q6_K in the AVX-512 tier, and in its variant without GFNI/VBMI where that
     * runs; Q4_K and Q5_K in the AVX2 tier */
    og_kernels plain, avx2;
    const int variants = has512 + (has512 && tier_kernels(&f, VARIANT_AVX512_PLAIN, &plain));
    const int has2 = tier_kernels(&f, OG_ISA_AVX2, &avx2);
    assert_int_equal(kernels, 9 * variants + 2 * has2);
    assert_int_equal(checked, kernels * 12 * 2 * 4);
    if (!has2) print_message("SKIP (hardware): no AVX2: the AVX2 four-row canonical kernels untested\n");
    if (!has512) print_message("SKIP (hardware): no AVX-512: the AVX-512 four-row canonical kernels untested\n");
}

/* The tiled canonical product (og_kernels.gemm_canonical) of every tier the CPU runs
 * (AVX2 with vpmaddubsw and with AVX-VNNI, AVX-512): every (activation row, weight
 * row) result is the scalar statement's bits (og_type_traits.vec_dot_canonical),
 * on random blocks and full-range activations (-128 included), for batches of 1, 2,
 * 3, 5, 16, 17 and 64 rows, odd weight row counts (a tile of 32 part empty, two
 * tiles) and rows of several lengths (over 32 blocks: lanes that take two), with an
 * output stride wider than the rows whose gaps must stay untouched, and weight rows
 * stored further apart than their size. */
static void test_gemm_canonical(void **state) {
    (void)state;
    og_cpu_features f;
    og_cpu_detect(&f);
#ifdef OG_TEST_SANITIZED /* the small cases only (the plain build runs them all) */
    static const int64_t ms[] = {1, 2, 3, 5, 17}, nrs[] = {1, 33};
    const int64_t MM = 17, NR = 33, n_lengths = 2;
#else
    static const int64_t ms[] = {1, 2, 3, 5, 16, 17, 64}, nrs[] = {1, 7, 33, 45};
    const int64_t MM = 64, NR = 45, n_lengths = 3;
#endif
    const int has512 = f.avx512f && f.avx512bw && f.avx512vl && f.avx512vnni && f.os_avx512;
    uint64_t seed = 777;
    int kernels = 0, checked = 0, variants = 0;
    /* the tiers, and the AVX2 tier twice: its vpmaddubsw tiles (AVX-VNNI hidden) and,
     * where the CPU has AVX-VNNI, its vpdpbusd ones */
    static const struct { og_isa isa; int vnni; const char *name; } tiers[] = {
        {OG_ISA_SCALAR, -1, "scalar"}, {OG_ISA_AVX2, 0, "avx2"}, {OG_ISA_AVX2, 1, "avx2+avx-vnni"}, {OG_ISA_AVX512, -1, "avx512"}};
    for (size_t vi = 0; vi < sizeof tiers / sizeof tiers[0]; vi++) {
        const int isa = tiers[vi].isa;
        og_kernels k;
        og_cpu_features fv = f;
        if (tiers[vi].vnni == 1 && !f.avxvnni) {
            print_message("SKIP (hardware): no AVX-VNNI: the AVX2 tier's VNNI tiles untested\n");
            continue;
        }
        if (tiers[vi].vnni == 0) fv.avxvnni = false;
        if (!tier_kernels(&f, isa, &k)) continue;
        assert_int_equal(og_kernels_init_features((og_isa)isa, &fv, &k), OG_OK);
        variants += isa != OG_ISA_SCALAR;
        for (size_t ti = 0; ti < N_RTYPES; ti++) {
            const og_type_traits *tr = og_quant_traits(rtypes[ti].t), *act = og_quant_traits(tr->vec_dot_type);
            og_gemm_fn gemm = k.gemm_canonical[tr->type];
            if (!gemm) continue;
            kernels++;
            /* k-quants 1, 3, 33 blocks; 32-element types 3, 9 (a part-filled tile block), 40 */
            const int64_t nbs[3] = {tr->blck == 32 ? 3 : 1, tr->blck == 32 ? 9 : 3, tr->blck == 32 ? 40 : 33};
            for (int64_t ni = 0; ni < n_lengths; ni++) {
                const int64_t nb = nbs[ni], n = nb * tr->blck;
                const size_t wrow = (size_t)nb * tr->type_size, arow = (size_t)nb * act->type_size;
                uint8_t *w = malloc(wrow * NR), *y = malloc(arow * MM);
                float *a = malloc((size_t)n * sizeof *a), *want = malloc((size_t)(MM * NR) * sizeof *want);
                const size_t ld = NR + 3;
                float *out = malloc((size_t)MM * ld * sizeof *out);
                void *work = malloc(og_gemm_canonical_work(tr->type, n));
                assert_true(w && y && a && want && out && work);
                for (int64_t r = 0; r < NR; r++) random_row(ti, w + r * wrow, nb, &seed);
                for (int64_t i = 0; i < MM; i++) {
                    for (int64_t e = 0; e < n; e++) a[e] = (float)(og_rand_unit(&seed) * 2 - 1) * (float)(1 + i % 7);
                    act->from_float(a, y + i * arow, n);
                    if (i % 3) randomize_activation(act->type, y + i * arow, n, &seed);
                }
                for (int64_t i = 0; i < MM; i++)
                    for (int64_t r = 0; r < NR; r++) tr->vec_dot_canonical(n, &want[i * NR + r], w + r * wrow, y + i * arow);
                for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
                    for (size_t ri = 0; ri < sizeof nrs / sizeof nrs[0]; ri++) {
                        const int64_t m = ms[mi], nr = nrs[ri];
                        for (size_t e = 0; e < (size_t)MM * ld; e++) out[e] = -12345.0f;
                        gemm(n, w, wrow, nr, y, arow, m, out, ld, work);
                        for (int64_t i = 0; i < MM; i++)
                            for (int64_t r = 0; r < (int64_t)ld; r++) {
                                const float g = out[i * ld + r];
                                if (i < m && r < nr) {
                                    if (memcmp(&g, &want[i * NR + r], sizeof g))
                                        fail_msg("%s %s n=%lld m=%lld rows=%lld: act %lld row %lld tiled %.9g, the statement %.9g",
                                                 tiers[vi].name, tr->name, (long long)n, (long long)m, (long long)nr,
                                                 (long long)i, (long long)r, g, want[i * NR + r]);
                                    checked++;
                                } else if (g != -12345.0f) {
                                    fail_msg("%s %s m=%lld rows=%lld: wrote act %lld row %lld outside the product",
                                             tiers[vi].name, tr->name, (long long)m, (long long)nr, (long long)i,
                                             (long long)r);
                                }
                            }
                    }
                { /* weight rows further apart than their bytes (an odd gap): the same results */
                    const size_t ws = wrow + 37;
                    uint8_t *wp = malloc(ws * NR);
                    assert_non_null(wp);
                    for (int64_t r = 0; r < NR; r++) memcpy(wp + r * ws, w + r * wrow, wrow);
                    gemm(n, wp, ws, NR, y, arow, MM, out, ld, work);
                    for (int64_t i = 0; i < MM; i++)
                        for (int64_t r = 0; r < NR; r++, checked++)
                            if (memcmp(&out[i * ld + r], &want[i * NR + r], sizeof(float)))
                                fail_msg("%s %s n=%lld, row stride %zu: act %lld row %lld differs", tiers[vi].name,
                                         tr->name, (long long)n, ws, (long long)i, (long long)r);
                    free(wp);
                }
                free(w);
                free(y);
                free(a);
                free(want);
                free(out);
                free(work);
            }
        }
    }
    /* the AVX2 and AVX-512 tiers tile Q8_0, Q4_0, Q5_0, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K */
    if (!has512) print_message("SKIP (hardware): no AVX-512 VNNI: its tiled canonical kernels untested\n");
    assert_int_equal(kernels, 8 * variants);
    print_message("tiled canonical products checked: %d results of %d kernels\n", checked, kernels);
}

static void test_isa_choice(void **state) {
    (void)state;
    og_cpu_features none = {0}, f;
    og_isa isa;
    char note[256], err[256];
    assert_int_equal(og_isa_choose(&none, NULL, &isa, note, sizeof note, err, sizeof err), OG_OK);
    assert_int_equal(isa, OG_ISA_SCALAR);
    assert_int_equal(og_isa_choose(&none, "avx2", &isa, note, sizeof note, err, sizeof err), OG_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "lacks AVX2"));
    assert_int_equal(og_isa_choose(&none, "amx", &isa, note, sizeof note, err, sizeof err), OG_ERR_UNSUPPORTED);
    assert_int_equal(og_isa_choose(&none, "sse9", &isa, note, sizeof note, err, sizeof err), OG_ERR_INVALID_ARG);
    /* AMX present but refused by Linux: best tier without it, and a note saying so */
    f = (og_cpu_features){.avx2 = true, .fma = true, .f16c = true, .avx512f = true, .avx512bw = true,
                          .avx512vl = true, .avx512vnni = true, .amx_tile = true, .amx_int8 = true};
    assert_int_equal(og_isa_choose(&f, "", &isa, note, sizeof note, err, sizeof err), OG_OK);
    assert_int_equal(isa, OG_ISA_AVX512);
    assert_non_null(strstr(note, "refused"));
    og_cpu_detect(&f);
    assert_int_equal(og_isa_choose(&f, NULL, &isa, note, sizeof note, err, sizeof err), OG_OK);
    print_message("this CPU: best tier %s (avx2 %d avx512f %d vnni %d bf16 %d amx %d/%d)\n", og_isa_name(isa), f.avx2,
                  f.avx512f, f.avx512vnni, f.avx512bf16, f.amx_int8, f.amx_permitted);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp16_bf16),
        cmocka_unit_test(test_vectors),
        cmocka_unit_test(test_tiers),
        cmocka_unit_test(test_vec_dot4),
        cmocka_unit_test(test_axpy),
        cmocka_unit_test(test_attn_tile),
        cmocka_unit_test(test_swiglu),
        cmocka_unit_test(test_f16_to_f32),
        cmocka_unit_test(test_quantize_act),
        cmocka_unit_test(test_random_blocks),
        cmocka_unit_test(test_dot_f32_device),
        cmocka_unit_test(test_canonical),
        cmocka_unit_test(test_canonical_r4),
        cmocka_unit_test(test_gemm_canonical),
        cmocka_unit_test(test_isa_choice),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
