/* What the table-driven model writers (deepseek4_write.c, deepseek41_write.c)
 * share: adding a tensor with llama-quantize's type fallback and the byte
 * count per type, filling a tensor's rows from a row initializer, and writing
 * one file or gguf-split parts (og_model_write.h). */
#include "og_model_write.h"

#include "og_quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

og_status og_model_write_add(og_gguf_writer *w, const char *name, og_ggml_type asked, uint32_t n_dims,
                             const int64_t ne[3], bool sparse, uint32_t fallbacks[OG_TYPE_COUNT][OG_TYPE_COUNT],
                             uint64_t type_bytes[OG_TYPE_COUNT], char *err, size_t errlen) {
    og_ggml_type type = asked;
    og_status st;
    if (asked != OG_TYPE_I32 && asked != OG_TYPE_I8 &&
        (st = og_model_write_type(name, asked, ne[0], sparse, fallbacks, &type, err, errlen)))
        return st;
    if ((st = og_gguf_writer_add_tensor(w, name, type, n_dims, ne, NULL)))
        return og_fail(err, errlen, st, "%s: cannot add tensor (%s)", name, og_status_str(st));
    uint64_t row;
    og_row_bytes(type, (uint64_t)ne[0], &row);
    type_bytes[type] += row * (uint64_t)ne[1] * (uint64_t)ne[2];
    return OG_OK;
}

og_status og_model_write_rows(const og_gguf_tensor *t, void *buf, uint64_t seed, og_model_write_row_fn init,
                              const void *ctx, float **row, size_t *row_cap, char *err, size_t errlen) {
    const int64_t ne0 = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
    uint64_t rng = seed ^ og_fnv1a64(t->name, strlen(t->name), OG_FNV1A64_INIT);
    if ((size_t)ne0 > *row_cap) {
        float *nr = realloc(*row, (size_t)ne0 * sizeof *nr);
        if (!nr) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
        *row = nr;
        *row_cap = (size_t)ne0;
    }
    uint64_t row_bytes;
    og_row_bytes(t->type, (uint64_t)ne0, &row_bytes);
    for (int64_t r = 0; r < rows; r++) {
        init(ctx, ne0, &rng, *row);
        og_status st = og_quantize_row(t->type, *row, (uint8_t *)buf + (uint64_t)r * row_bytes, ne0);
        if (st) return og_fail(err, errlen, st, "%s: cannot quantize to %s", t->name, og_type_name(t->type));
    }
    return OG_OK;
}

og_status og_model_write_out(og_gguf_writer *w, const char *path, uint64_t split_max_bytes, og_gguf_fill_fn fill,
                             void *ctx, char *first, size_t first_len, uint32_t *n_parts, char *err, size_t errlen) {
    *n_parts = 1;
    og_status st = split_max_bytes ? og_gguf_writer_write_split(w, path, split_max_bytes, fill, ctx, n_parts, err, errlen)
                                   : og_gguf_writer_write(w, path, fill, ctx, err, errlen);
    if (st) return st;
    if (*n_parts == 1 && !split_max_bytes) {
        snprintf(first, first_len, "%s", path);
        return OG_OK;
    }
    char prefix[4096];
    if (og_gguf_split_prefix(path, prefix, sizeof prefix) || og_gguf_split_path(prefix, 0, *n_parts, first, first_len))
        return og_fail(err, errlen, OG_ERR_RANGE, "%s: name too long", path);
    return OG_OK;
}
