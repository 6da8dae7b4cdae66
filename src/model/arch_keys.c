/* GGUF metadata readers the architectures' hyperparameter readers share
 * (og_arch.h): bounded integers, bounded floats and per-layer floats, each
 * error naming the key and the value. */
#include "og_arch.h"

#include <math.h>
#include <stdio.h>

og_status og_arch_key_uint(const og_gguf *g, const char *key, bool required, uint64_t dflt, uint64_t lo, uint64_t hi,
                           uint32_t *out, char *err, size_t errlen) {
    uint64_t v = dflt;
    og_status st = og_gguf_get_u64(g, key, &v);
    if (st == OG_ERR_NOT_FOUND) {
        if (required) return og_fail(err, errlen, OG_ERR_NOT_FOUND, "missing key %s", key);
        v = dflt;
    } else if (st) {
        return og_fail(err, errlen, OG_ERR_FORMAT, "key %s is not a non-negative integer", key);
    }
    if (v < lo || v > hi)
        return og_fail(err, errlen, OG_ERR_FORMAT, "key %s = %llu is outside %llu..%llu", key, (unsigned long long)v,
                       (unsigned long long)lo, (unsigned long long)hi);
    *out = (uint32_t)v;
    return OG_OK;
}

og_status og_arch_key_float(const og_gguf *g, const char *key, bool required, float dflt, float lo, bool lo_open,
                            float hi, float *out, char *err, size_t errlen) {
    float v = dflt;
    og_status st = og_gguf_get_f32(g, key, &v);
    if (st == OG_ERR_NOT_FOUND) {
        if (required) return og_fail(err, errlen, OG_ERR_NOT_FOUND, "missing key %s", key);
        v = dflt;
    } else if (st) {
        return og_fail(err, errlen, OG_ERR_FORMAT, "key %s is not a number", key);
    }
    if (!isfinite(v) || (lo_open ? !(v > lo) : !(v >= lo)) || !(v <= hi))
        return og_fail(err, errlen, OG_ERR_FORMAT, "key %s = %g is outside %s%g, %g]", key, (double)v,
                       lo_open ? "(" : "[", (double)lo, (double)hi);
    *out = v;
    return OG_OK;
}

og_status og_arch_key_float_per_layer(const og_gguf *g, const char *key, uint32_t n, float hi, float *out, bool *found,
                                      char *err, size_t errlen) {
    const og_gguf_kv *kv = og_gguf_find_kv(g, key);
    *found = kv != NULL;
    if (!kv) return OG_OK;
    uint64_t n_have = kv->type == OG_GGUF_ARRAY ? kv->arr_n : 1;
    if (n_have < n)
        return og_fail(err, errlen, OG_ERR_FORMAT, "key %s has %llu entries but there are %u layers", key,
                       (unsigned long long)n_have, n);
    for (uint32_t i = 0; i < n; i++) {
        double v;
        if (og_gguf_kv_num_f64(kv, kv->type == OG_GGUF_ARRAY ? i : 0, &v))
            return og_fail(err, errlen, OG_ERR_FORMAT, "key %s is not a number or an array of numbers", key);
        if (!isfinite(v) || v < 0 || v > hi)
            return og_fail(err, errlen, OG_ERR_FORMAT, "key %s[%u] = %g is outside [0, %g]", key, i, v, (double)hi);
        out[i] = (float)v;
    }
    return OG_OK;
}
