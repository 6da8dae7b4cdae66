/* ggml type geometry (gguf.md §6) and metadata value type sizes (§2). */
#include "og_gguf.h"

#include <string.h>
#include <strings.h>

/* One row per type id; removed ids have a NULL name. */
static const og_type_size type_sizes[OG_TYPE_COUNT] = {
    [OG_TYPE_F32] = {"F32", 1, 4},
    [OG_TYPE_F16] = {"F16", 1, 2},
    [OG_TYPE_Q4_0] = {"Q4_0", 32, 18},
    [OG_TYPE_Q4_1] = {"Q4_1", 32, 20},
    [OG_TYPE_Q5_0] = {"Q5_0", 32, 22},
    [OG_TYPE_Q5_1] = {"Q5_1", 32, 24},
    [OG_TYPE_Q8_0] = {"Q8_0", 32, 34},
    [OG_TYPE_Q8_1] = {"Q8_1", 32, 36},
    [OG_TYPE_Q2_K] = {"Q2_K", 256, 84},
    [OG_TYPE_Q3_K] = {"Q3_K", 256, 110},
    [OG_TYPE_Q4_K] = {"Q4_K", 256, 144},
    [OG_TYPE_Q5_K] = {"Q5_K", 256, 176},
    [OG_TYPE_Q6_K] = {"Q6_K", 256, 210},
    [OG_TYPE_Q8_K] = {"Q8_K", 256, 292},
    [OG_TYPE_IQ2_XXS] = {"IQ2_XXS", 256, 66},
    [OG_TYPE_IQ2_XS] = {"IQ2_XS", 256, 74},
    [OG_TYPE_IQ3_XXS] = {"IQ3_XXS", 256, 98},
    [OG_TYPE_IQ1_S] = {"IQ1_S", 256, 50},
    [OG_TYPE_IQ4_NL] = {"IQ4_NL", 32, 18},
    [OG_TYPE_IQ3_S] = {"IQ3_S", 256, 110},
    [OG_TYPE_IQ2_S] = {"IQ2_S", 256, 82},
    [OG_TYPE_IQ4_XS] = {"IQ4_XS", 256, 136},
    [OG_TYPE_I8] = {"I8", 1, 1},
    [OG_TYPE_I16] = {"I16", 1, 2},
    [OG_TYPE_I32] = {"I32", 1, 4},
    [OG_TYPE_I64] = {"I64", 1, 8},
    [OG_TYPE_F64] = {"F64", 1, 8},
    [OG_TYPE_IQ1_M] = {"IQ1_M", 256, 56},
    [OG_TYPE_BF16] = {"BF16", 1, 2},
    [OG_TYPE_TQ1_0] = {"TQ1_0", 256, 54},
    [OG_TYPE_TQ2_0] = {"TQ2_0", 256, 66},
    [OG_TYPE_MXFP4] = {"MXFP4", 32, 17},
    [OG_TYPE_NVFP4] = {"NVFP4", 64, 36},
    [OG_TYPE_Q1_0] = {"Q1_0", 128, 18},
    [OG_TYPE_Q2_0] = {"Q2_0", 64, 18},
};

const og_type_size *og_type_size_of(uint32_t t) {
    if (t >= OG_TYPE_COUNT || type_sizes[t].name == NULL) return NULL;
    return &type_sizes[t];
}

const char *og_type_name(uint32_t t) {
    const og_type_size *ts = og_type_size_of(t);
    return ts ? ts->name : "?";
}

og_status og_type_from_name(const char *name, og_ggml_type *out) {
    for (uint32_t t = 0; t < OG_TYPE_COUNT; t++) {
        if (type_sizes[t].name && strcasecmp(type_sizes[t].name, name) == 0) {
            *out = (og_ggml_type)t;
            return OG_OK;
        }
    }
    return OG_ERR_NOT_FOUND;
}

og_status og_row_bytes(uint32_t t, uint64_t n, uint64_t *out_bytes) {
    const og_type_size *ts = og_type_size_of(t);
    if (!ts) return OG_ERR_UNSUPPORTED;
    if (n % ts->blck != 0) return OG_ERR_FORMAT;
    /* n / blck * type_size cannot overflow for n < 2^63 and type_size <= 292 only if
     * n/blck < 2^55; check anyway. */
    return og_mul_u64(n / ts->blck, ts->type_size, out_bytes) ? OG_OK : OG_ERR_RANGE;
}

static const char *vtype_names[OG_GGUF_VTYPE_COUNT] = {
    "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
    "bool", "string", "array", "uint64", "int64", "float64",
};
static const uint8_t vtype_sizes[OG_GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

const char *og_gguf_vtype_name(uint32_t vt) {
    return vt < OG_GGUF_VTYPE_COUNT ? vtype_names[vt] : "?";
}

size_t og_gguf_vtype_size(uint32_t vt) {
    return vt < OG_GGUF_VTYPE_COUNT ? vtype_sizes[vt] : 0;
}

/* Element count of t, or 0 when its shape is not a valid one (the reader has
 * checked its byte size against ne already). */
static uint64_t n_elements(const og_gguf_tensor *t) {
    uint64_t n = 1;
    for (int d = 0; d < 4; d++)
        if (t->ne[d] < 0 || !og_mul_u64(n, (uint64_t)t->ne[d], &n)) return 0;
    return n;
}

og_status og_gguf_tensor_i32(const og_gguf_tensor *t, uint64_t i, int32_t *out) {
    if (t->type != OG_TYPE_I32) return OG_ERR_TYPE;
    if (!t->data) return OG_ERR_INVALID_ARG;
    const uint64_t n = n_elements(t);
    if (i >= n || i >= t->n_bytes / 4) return OG_ERR_RANGE;
    memcpy(out, (const uint8_t *)t->data + 4 * i, 4); /* the mapping may be unaligned for a hand-made file */
    return OG_OK;
}

og_status og_gguf_tensor_i32_check(const og_gguf_tensor *t, int32_t lo, int32_t hi, uint64_t *bad_index) {
    if (t->type != OG_TYPE_I32) return OG_ERR_TYPE;
    if (!t->data) return OG_ERR_INVALID_ARG;
    const uint64_t n = n_elements(t) < t->n_bytes / 4 ? n_elements(t) : t->n_bytes / 4;
    for (uint64_t i = 0; i < n; i++) {
        int32_t v;
        memcpy(&v, (const uint8_t *)t->data + 4 * i, 4);
        if (v < lo || v > hi) {
            if (bad_index) *bad_index = i;
            return OG_ERR_RANGE;
        }
    }
    return OG_OK;
}
