/* CPU feature detection, tier choice and the kernel table of each tier. */
#include "quant_internal.h"
#include "og_quant_canon.h"

#include <cpuid.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023 /* Linux, asm/prctl.h */
#define XFEATURE_XTILEDATA 18

static uint64_t xgetbv0(void) {
    uint32_t eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((uint64_t)edx << 32) | eax;
}

void og_cpu_detect(og_cpu_features *f) {
    memset(f, 0, sizeof *f);
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    bool osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
    f->fma = (c >> 12) & 1;
    f->f16c = (c >> 29) & 1;
    uint64_t xcr0 = osxsave ? xgetbv0() : 0;
    bool os_avx = (xcr0 & 0x6) == 0x6;
    f->os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0;
    if (!os_avx || !avx) {
        f->fma = f->f16c = false;
        return;
    }
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
        f->avx2 = (b >> 5) & 1;
        if (f->os_avx512) {
            f->avx512f = (b >> 16) & 1;
            f->avx512bw = (b >> 30) & 1;
            f->avx512vl = (b >> 31) & 1;
            f->avx512vnni = (c >> 11) & 1;
            f->avx512vbmi = (c >> 1) & 1;
            f->gfni = (c >> 8) & 1;
        }
        f->amx_bf16 = (d >> 22) & 1;
        f->amx_tile = (d >> 24) & 1;
        f->amx_int8 = (d >> 25) & 1;
    }
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) {
        f->avxvnni = (a >> 4) & 1; /* ymm state is enabled (os_avx, above) */
        if (f->os_avx512) f->avx512bf16 = (a >> 5) & 1;
    }
    /* AMX tiles need XCR0 bits 17-18 and a per-process permission from Linux; a
     * refused request (old kernel, hypervisor, seccomp) just means no AMX. */
    if (f->amx_tile && f->amx_int8 && (xcr0 & 0x60000) == 0x60000)
        f->amx_permitted = syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

const char *og_isa_name(og_isa isa) {
    static const char *names[OG_ISA_COUNT] = {"scalar", "avx2", "avx512", "amx"};
    return (unsigned)isa < OG_ISA_COUNT ? names[isa] : "?";
}

static bool has_avx2(const og_cpu_features *f) { return f->avx2 && f->fma && f->f16c; }
static bool has_avx512(const og_cpu_features *f) {
    return has_avx2(f) && f->avx512f && f->avx512bw && f->avx512vl && f->avx512vnni;
}

og_status og_isa_choose(const og_cpu_features *f, const char *forced, og_isa *out, char *note, size_t notelen,
                        char *err, size_t errlen) {
    if (note && notelen) note[0] = '\0';
    if (!forced || !*forced) {
        *out = has_avx512(f) ? OG_ISA_AVX512 : has_avx2(f) ? OG_ISA_AVX2 : OG_ISA_SCALAR;
        if (f->amx_tile && f->amx_int8 && !f->amx_permitted && note)
            snprintf(note, notelen, "the CPU has AMX but Linux refused tile permission; using %s",
                     og_isa_name(*out));
        /* AMX tiles would serve batched matmuls; until their kernels exist the
         * AVX-512 tier is the best one even on AMX machines. */
        return OG_OK;
    }
    if (!strcmp(forced, "scalar")) {
        *out = OG_ISA_SCALAR;
    } else if (!strcmp(forced, "avx2")) {
        if (!has_avx2(f)) return og_fail(err, errlen, OG_ERR_UNSUPPORTED, "ONEGPU_CPU_ISA=avx2: this CPU lacks AVX2/FMA/F16C");
        *out = OG_ISA_AVX2;
    } else if (!strcmp(forced, "avx512")) {
        if (!has_avx512(f))
            return og_fail(err, errlen, OG_ERR_UNSUPPORTED,
                           "ONEGPU_CPU_ISA=avx512: this CPU lacks AVX-512 F/BW/VL/VNNI (or the OS does not enable it)");
        *out = OG_ISA_AVX512;
    } else if (!strcmp(forced, "amx")) {
        if (!(f->amx_tile && f->amx_int8))
            return og_fail(err, errlen, OG_ERR_UNSUPPORTED, "ONEGPU_CPU_ISA=amx: this CPU has no AMX-INT8 tiles");
        if (!f->amx_permitted)
            return og_fail(err, errlen, OG_ERR_UNSUPPORTED,
                           "ONEGPU_CPU_ISA=amx: Linux refused AMX tile permission (arch_prctl ARCH_REQ_XCOMP_PERM)");
        return og_fail(err, errlen, OG_ERR_UNSUPPORTED, "ONEGPU_CPU_ISA=amx: AMX kernels are not built yet; use avx512");
    } else {
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "ONEGPU_CPU_ISA='%s': expected scalar, avx2, avx512 or amx", forced);
    }
    return OG_OK;
}

og_status og_kernels_init(og_isa isa, og_kernels *k) {
    og_cpu_features f;
    og_cpu_detect(&f);
    return og_kernels_init_features(isa, &f, k);
}

/* og_kernels.swiglu's scalar reference: og_quant_canon.h per element. */
static void swiglu_ref(float *out, const float *gate, const float *up, int64_t n, float limit) {
    if (limit > 0)
        for (int64_t i = 0; i < n; i++) out[i] = og_canon_silu_mul_clamp(gate[i], up[i], limit);
    else
        for (int64_t i = 0; i < n; i++) out[i] = og_canon_silu_mul(gate[i], up[i]);
}

og_status og_kernels_init_features(og_isa isa, const og_cpu_features *f, og_kernels *k) {
    memset(k, 0, sizeof *k);
    k->isa = isa;
    k->dot_f32_device = og_dot_f32_device_ref;
    k->axpy_f32 = og_axpy_f32_ref;
    k->f16_to_f32 = og_f16_to_f32_ref;
    k->dot_f32_device_tile = og_dot_f32_device_tile_ref;
    k->axpy_f32_rows = og_axpy_f32_rows_ref;
    k->swiglu = swiglu_ref;
    for (int t = 0; t < OG_TYPE_COUNT; t++) {
        const og_type_traits *tr = og_quant_traits((og_ggml_type)t);
        if (!tr) continue;
        k->vec_dot[t] = tr->vec_dot;
        k->vec_dot_canonical[t] = tr->vec_dot_canonical;
        /* scalar; the AVX2 / AVX-512 tiers replace them below with kernels writing the same bytes */
        k->quantize_act[t] = og_act_quantizer((og_ggml_type)t);
    }
    switch (isa) {
    case OG_ISA_SCALAR: return OG_OK;
    case OG_ISA_AVX2:
        og_kernels_fill_avx2(k);
        og_kernels_fill_iq_avx2(k);
        og_kernels_fill_attn_avx2(k);
        if (f->avxvnni) og_kernels_fill_tile_avxvnni(k);
        else og_kernels_fill_tile_avx2(k);
        return OG_OK;
    case OG_ISA_AVX512:
        og_kernels_fill_avx2(k);
        og_kernels_fill_avx512(k);
        og_kernels_fill_iq_avx2(k);
        og_kernels_fill_iq_avx512(k);
        if (f->gfni && f->avx512vbmi) og_kernels_fill_avx512_gfni(k);
        og_kernels_fill_tile_avx512(k);
        og_kernels_fill_attn_avx512(k);
        return OG_OK;
    default: return OG_ERR_UNSUPPORTED;
    }
}

size_t og_gemm_canonical_work(og_ggml_type t, int64_t n) {
    switch (t) {
    case OG_TYPE_Q2_K: case OG_TYPE_Q3_K: case OG_TYPE_Q4_K: case OG_TYPE_Q5_K: case OG_TYPE_Q6_K:
        return n > 0 ? OG_TILE_WORK(n / OG_QK_K) : 0;
    case OG_TYPE_Q8_0: case OG_TYPE_Q4_0: case OG_TYPE_Q5_0: /* eight 32-element blocks per tile block */
        return n > 0 ? OG_TILE_WORK((n / 32 + 7) / 8) : 0;
    default: return 0;
    }
}

double og_quant_dot_tolerance(og_ggml_type t) {
    /* Quantized types: integer inner sums are exact in every tier; only the float
     * accumulation of per-block terms differs (order, FMA), a few ulps of the sum
     * of magnitudes. Float types: FMA and lane-wise partial sums vs a double
     * accumulator. */
    switch (t) {
    case OG_TYPE_F32: return 1e-5;
    case OG_TYPE_F16: case OG_TYPE_BF16: return 1e-5;
    default: return 2e-6;
    }
}
