/* onegpu quant: ggml type traits, float conversions, reference (scalar) quantize,
 * dequantize and dot kernels, and the SIMD tiers chosen once at start-up.
 * Layouts and formulas: shared/spec/kquants.md (sections cited below).
 *
 * A "row" is n consecutive elements of one tensor row (ggml ne0 direction); n is
 * a multiple of the type's block size. Dot products pair a weight row with an
 * activation row quantized to the weight type's vec_dot_type (kquants.md §5). */
#ifndef OG_QUANT_H
#define OG_QUANT_H

#include "og_gguf.h"
#include "og_quant_blocks.h"

/* IEEE binary16 <-> binary32, round to nearest even (matches ggml, gguf.md §6). */
uint16_t og_fp32_to_fp16(float f);
float og_fp16_to_fp32(uint16_t h);
/* bfloat16: NaN keeps quiet, else round to nearest even (gguf.md §6). */
uint16_t og_fp32_to_bf16(float f);
float og_bf16_to_fp32(uint16_t h);

/* y[0..n) = dequantized x (one row of n elements). */
typedef void (*og_to_float_fn)(const void *x, float *y, int64_t n);
/* Quantizes x[0..n) into a row of blocks. */
typedef void (*og_from_float_fn)(const float *x, void *y, int64_t n);
/* *s = dot(weight row x, activation row y) over n elements; y is in the weight
 * type's vec_dot_type. Q8_0 and Q8_1 activation quants must lie in [-127, 127],
 * as og_kernels.quantize_act writes them (the AVX2 tier moves signs with vpsignb,
 * which cannot negate -128); Q8_K ones may be -128. */
typedef void (*og_vec_dot_fn)(int64_t n, float *s, const void *x, const void *y);
/* s[0..4) = dot(x, y[i]) for four activation rows at once (one pass over the
 * weight row), each the bits og_vec_dot_fn gives for that row alone. */
typedef void (*og_vec_dot4_fn)(int64_t n, float *s, const void *x, const void *const *y);
/* s[r] = dot(weight row x + r * x_stride bytes, y) for the four weight rows r < 4
 * against one activation row (one pass over y for four rows: matrix x vector),
 * each the bits the single-row kernel gives for that row alone. */
typedef void (*og_vec_dot_r4_fn)(int64_t n, float *s, const void *x, size_t x_stride, const void *y);

/* One row per supported ggml type (ggml's type_traits habit). */
typedef struct og_type_traits {
    og_ggml_type type;
    const char *name;
    uint32_t blck;               /* elements per block */
    uint32_t type_size;          /* bytes per block */
    og_ggml_type vec_dot_type;   /* activation format for dot products */
    og_to_float_fn to_float;     /* dequantize */
    og_from_float_fn from_float; /* reference quantizer (kquants.md §6) */
    og_vec_dot_fn vec_dot;       /* scalar reference dot: the truth in every test */
    og_vec_dot_fn vec_dot_canonical; /* scalar canonical dot (below); NULL for float types */
} og_type_traits;

/* Traits of type t, or NULL if onegpu has no kernels for it. */
const og_type_traits *og_quant_traits(og_ggml_type t);

/* True if og_quantize_row supports type t (has a reference quantizer). */
bool og_quant_can_quantize(og_ggml_type t);

/* The type llama-quantize stores rows of ne0 elements in when ne0 is not a
 * multiple of t's block (kquants.md §7): Q2_K/Q3_K -> Q4_0, IQ* -> IQ4_NL,
 * Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, then F16; t itself when it fits. */
og_ggml_type og_quant_fallback_type(og_ggml_type t, int64_t ne0);

/* Quantizes n floats (one row; n a multiple of the type's block size) into dst
 * (og_row_bytes(t, n) bytes) with the reference quantizer of kquants.md §6.
 * Errors: OG_ERR_UNSUPPORTED (type has no quantizer), OG_ERR_INVALID_ARG (n). */
og_status og_quantize_row(og_ggml_type t, const float *x, void *dst, int64_t n);

/* Dequantizes one row of n elements of type t into y[n]. Same errors. */
og_status og_dequantize_row(og_ggml_type t, const void *src, float *y, int64_t n);

/* ---- CPU tiers ------------------------------------------------------------ */

typedef enum og_isa { OG_ISA_SCALAR = 0, OG_ISA_AVX2, OG_ISA_AVX512, OG_ISA_AMX, OG_ISA_COUNT } og_isa;

typedef struct og_cpu_features {
    bool avx2, fma, f16c, avxvnni; /* avxvnni: AVX-VNNI (VEX vpdpbusd on ymm) */
    bool avx512f, avx512bw, avx512vl, avx512vnni, avx512bf16;
    bool gfni, avx512vbmi;             /* GFNI (gf2p8affineqb, with AVX-512), AVX512_VBMI (vpmultishiftqb) */
    bool amx_tile, amx_int8, amx_bf16; /* CPUID says so */
    bool amx_permitted;                /* Linux granted XTILEDATA (arch_prctl) */
    bool os_avx512;                    /* OS saves ZMM state (XGETBV) */
} og_cpu_features;

/* Reads CPUID/XGETBV and asks Linux for AMX tile permission when the CPU has AMX
 * (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)); a refusal only clears
 * amx_permitted. Never executes an instruction the CPU lacks. No status: the
 * answer is always a (possibly empty) feature set. */
void og_cpu_detect(og_cpu_features *f);

/* "scalar", "avx2", "avx512", "amx". */
const char *og_isa_name(og_isa isa);

/* Best tier the features allow, or the one `forced` names ("scalar", "avx2",
 * "avx512", "amx"; NULL or "" = best; typically $ONEGPU_CPU_ISA). A forced tier
 * the CPU cannot run is OG_ERR_UNSUPPORTED with a message naming what is missing.
 * `note` (may be NULL) receives a line worth logging, e.g. why AMX fell back. */
og_status og_isa_choose(const og_cpu_features *f, const char *forced, og_isa *out, char *note,
                        size_t notelen, char *err, size_t errlen);

/* Device-order f32 dot product (the canonical order of float rows, DESIGN.md "Numerics"):
 * sum of w[i] * x[i], i < n, computed as a 32-lane GPU warp does it, so a CUDA
 * kernel can reproduce it bit for bit: lane l (l < 32) accumulates
 * acc_l = fma(w[i], x[i], acc_l) for i = l, l + 32, l + 64, ... in increasing i,
 * starting from +0 and with n padded by zeros to a multiple of 32 (the padding's
 * fma(0, 0, acc) included); then the lanes are combined by the butterfly of
 * __shfl_xor_sync with offsets 16, 8, 4, 2, 1 (acc_l += acc_{l^o}), and lane 0
 * is the result. Every tier gives the same bits. */
typedef float (*og_dot_f32_fn)(const float *w, const float *x, int64_t n);
float og_dot_f32_device_ref(const float *w, const float *x, int64_t n);

/* Canonical numerics (DESIGN.md "Numerics"): the dot product of a quantized weight
 * row x and an activation row y (the weight type's vec_dot_type, written by
 * og_kernels.quantize_act, which every tier writes the same), defined so that any
 * hardware can give its bits:
 *  1. per block b, exact integers: I_b = sum over the block's sub-blocks of scale *
 *     (q . y) (the type's quants with their offsets, e.g. Q3_K q2 + 4h - 4, Q6_K
 *     u - 32; Q4_0 q - 8), and for the k-quants with mins (Q2_K, Q4_K, Q5_K) S_b =
 *     sum over sub-blocks of min * (sums of y). Integer sums are exact in any order.
 *     IQ2_XXS: I_b = sum over its 8 sub-blocks of (2 ls + 1) * (grid . sign . y);
 *     MXFP4: I_b = sum of og_mxfp4_values[q] * y (the doubled E2M1 values).
 *  2. per block, the float factors a_b = dx_b * dy_b, and for types with mins
 *     c_b = dmin_b * dy_b, m_b = (float)S_b (Q4_1 and Q5_1: c_b = -m_x, m_b = s_y,
 *     the fp16 fields), each product rounded; then v_b = a_b * (float)I_b, rounded,
 *     and v_b = fma(-c_b, m_b, v_b), one rounding (types without mins: c = m = 0,
 *     so v_b = a_b * (float)I_b). dx, dmin, m_x, s_y: fp16 to float; dy: the
 *     activation block's scale (fp16 for Q8_0/Q8_1, f32 for Q8_K). IQ2_XXS:
 *     a_b = (dx_b * dy_b) * 0.125f, two roundings (the format's 1/8); MXFP4: dx_b
 *     = 2^(e - 128) (the E8M0 scale halved, exact; og_quant_blocks.h).
 *  3. across blocks: lane l < 32 accumulates acc_l += v_b for b = l, l + 32, ... in
 *     increasing b, from +0; then the butterfly of og_dot_f32_device (offsets 16,
 *     8, 4, 2, 1) and lane 0 is the result: a warp with one block per lane.
 * og_type_traits.vec_dot_canonical is the scalar statement of it; every tier's
 * og_kernels.vec_dot_canonical gives its bits (tested). Float weight types have
 * no quantized activations: their canonical product is og_dot_f32_device on the
 * f32 row (og_kernels.dot_device). */

/* y[i] += a * x[i] for i < n, each product rounded to float before the sum. */
void og_axpy_f32_ref(int64_t n, float a, const float *x, float *y);

/* Attention's scores of a tile (prefill: many queries against one block of
 * cached rows): out[i * ld + r] = og_dot_f32_device_ref(rows + r * row_stride,
 * q + i * q_stride, n) * scale (the dot rounded, then the product rounded) for
 * i < n_q, r < n_rows, bit for bit; strides and ld in floats. */
void og_dot_f32_device_tile_ref(const float *rows, int64_t row_stride, int64_t n_rows, const float *q, int64_t q_stride,
                                int64_t n_q, int64_t n, float scale, float *out, int64_t ld);

/* Attention's weighted sum over a tile: for r = 0 .. n_rows - 1 in this order,
 * og_axpy_f32_ref(n, a[r], rows + r * row_stride, y), bit for bit (y stays in
 * registers across the rows in the SIMD tiers); row_stride in floats. */
void og_axpy_f32_rows_ref(int64_t n, int64_t n_rows, const float *a, const float *rows, int64_t row_stride, float *y);

/* y[i] = og_fp16_to_fp32(x[i]) for i < n: exact (every binary16 value is a
 * binary32 one). */
void og_f16_to_f32_ref(const uint16_t *x, float *y, int64_t n);

/* How far ahead (bytes) the SIMD kernels prefetch the weights they stream: one
 * core keeps enough reads in flight to run at its memory read rate (measured in
 * bench/RESULTS.md). `onegpu bench kernels` prefetches its read limit the same way. */
#define OG_PREFETCH_DIST 6144

/* Tiled canonical product of several activation rows (prefill, grouped experts):
 * out[a * ld + r] = the canonical dot (og_type_traits.vec_dot_canonical, bit for
 * bit) of weight row r (at w + r * w_stride bytes, n elements) and activation row a
 * (at y + a * y_stride, the weight type's vec_dot_type), for r < nr, a < m. The
 * weights are unpacked once per tile of 32 rows into `work` and each unpacked
 * block serves every activation row: the integer block sums come from vpdpbusd
 * with 32 weight rows in the lanes (exact, so any order), then the canonical
 * per-block float operations and the lane-by-lane order for each (a, r) pair.
 * work: og_gemm_canonical_work(type, n) bytes, any alignment, one caller at a time.
 * n: a multiple of the type's block size (the caller checks; as vec_dot). w_stride:
 * at most OG_GEMM_MAX_STRIDE bytes (the tiles are unpacked by 32-bit gathers over 16
 * rows; the caller checks). */
typedef void (*og_gemm_fn)(int64_t n, const void *w, size_t w_stride, int64_t nr, const void *y, size_t y_stride,
                           int64_t m, float *out, size_t ld, void *work);

#define OG_GEMM_MAX_STRIDE ((size_t)INT32_MAX / 16) /* bytes between weight rows of an og_gemm_fn */

/* Bytes of `work` og_kernels.gemm_canonical[t] needs for rows of n elements (0 when
 * t has no tiled kernel in any tier). */
size_t og_gemm_canonical_work(og_ggml_type t, int64_t n);

/* The kernels of one tier. Types without a fast kernel in that tier use the
 * scalar reference, so every entry is callable. Owned by the caller (engine). */
typedef struct og_kernels {
    og_isa isa;
    og_vec_dot_fn vec_dot[OG_TYPE_COUNT];       /* NULL: type unsupported */
    og_vec_dot4_fn vec_dot4[OG_TYPE_COUNT];     /* NULL: this tier has none (then vec_dot per row) */
    og_from_float_fn quantize_act[OG_TYPE_COUNT]; /* activation quantizers by vec_dot_type: as ggml's x86
                                                     backend (Q8_0/Q8_1: 127/max, round half even); every
                                                     tier writes the same bytes (tested) */
    og_dot_f32_fn dot_f32_device;                 /* og_dot_f32_device_ref's result, this tier's speed */
    /* y[i] += a * x[i], i < n: the product rounded, then the sum (no fma), so every
     * tier gives og_axpy_f32_ref's bits. Attention's weighted sum of cached rows. */
    void (*axpy_f32)(int64_t n, float a, const float *x, float *y);
    /* y[i] = x[i] widened from IEEE f16, i < n: og_f16_to_f32_ref's bits (F16C's
     * vcvtph2ps in the SIMD tiers: exact, denormals included). An f16 KV cache's
     * rows as attention reads them. */
    void (*f16_to_f32)(const uint16_t *x, float *y, int64_t n);
    /* og_dot_f32_device_tile_ref's and og_axpy_f32_rows_ref's bits, this tier's
     * speed: a tiled prefill attention (src/backend/attention.c) on the canonical
     * per-score order of dot_f32_device and the per-element order of axpy_f32. */
    void (*dot_f32_device_tile)(const float *rows, int64_t row_stride, int64_t n_rows, const float *q, int64_t q_stride,
                                int64_t n_q, int64_t n, float scale, float *out, int64_t ld);
    void (*axpy_f32_rows)(int64_t n, int64_t n_rows, const float *a, const float *rows, int64_t row_stride, float *y);
    /* out[i] = og_canon_silu_mul(gate[i], up[i]) (limit 0) or og_canon_silu_mul_clamp(
     * gate[i], up[i], limit) (limit > 0), i < n: og_swiglu's / og_swiglu_clamp's bits
     * (og_quant_canon.h: IEEE single operations element by element, so a vector of
     * them is the same), this tier's speed. out may be gate. The experts' SwiGLU. */
    void (*swiglu)(float *out, const float *gate, const float *up, int64_t n, float limit);
    /* The canonical dot (above) of quantized types, one and four activation rows
     * (vec_dot4's shape), each the bits of og_type_traits.vec_dot_canonical;
     * vec_dot4_canonical NULL: this tier has none (then one row at a time). */
    og_vec_dot_fn vec_dot_canonical[OG_TYPE_COUNT];
    og_vec_dot4_fn vec_dot4_canonical[OG_TYPE_COUNT];
    /* The canonical dot of four weight rows against one activation row
     * (og_vec_dot_r4_fn): each row's result the bits of vec_dot_canonical. The
     * rows' blocks share one reduction tree and one pass of the float operations
     * (rows in the lanes), so matrix x vector pays the canonical order's per-block
     * reduction once for four rows' blocks. NULL: this tier has none (then one
     * row at a time). */
    og_vec_dot_r4_fn vec_dot_r4_canonical[OG_TYPE_COUNT];
    /* Float weight types (F16, BF16): dot_f32_device(to_float(row), x, n) without
     * the f32 row, bit for bit; NULL where a tier has none (then dequantize, then
     * dot_f32_device). */
    float (*dot_device[OG_TYPE_COUNT])(const void *row, const float *x, int64_t n);
    /* Four weight rows (row, row + row_bytes, ...) against one x: out[r] is
     * dot_device of row r, bit for bit. NULL where a tier has none. */
    void (*dot_device4[OG_TYPE_COUNT])(const void *row, size_t row_bytes, const float *x, int64_t n, float *out);
    /* The tiled canonical product (og_gemm_fn) of quantized types; NULL where a tier
     * has none (then vec_dot4_canonical / vec_dot_canonical per row: the same bits). */
    og_gemm_fn gemm_canonical[OG_TYPE_COUNT];
} og_kernels;

/* Fills k for tier isa with the kernels the CPU's features f allow within it (the
 * AVX2 tier's tiled products use AVX-VNNI where f->avxvnni; the AVX-512 tier's
 * matrix x vector kernels of some types use GFNI and VBMI where f->gfni and
 * f->avx512vbmi, the same bits). OG_ERR_UNSUPPORTED if
 * this build lacks that tier. The caller has checked that the CPU runs the tier
 * (og_isa_choose). */
og_status og_kernels_init_features(og_isa isa, const og_cpu_features *f, og_kernels *k);
/* og_kernels_init_features with this CPU's features (og_cpu_detect). */
og_status og_kernels_init(og_isa isa, og_kernels *k);

/* Documented per-type bound for |fast - reference| of one dot product of n
 * elements, relative to sum |x_i * y_i| (the float-order error budget; integer
 * inner sums are exact in every tier): the test asserts it. */
double og_quant_dot_tolerance(og_ggml_type t);

#endif
