/* libFuzzer target over the GGUF reader: any input must give OG_OK or a clean
 * error; on OG_OK every KV, string and tensor byte must be readable (ASan
 * checks the bounds). Run: fuzz_gguf -max_total_time=600 CORPUS tests/fuzz/corpus_gguf */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "og_gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink;

static void walk(const og_gguf *g) {
    for (uint64_t i = 0; i < og_gguf_n_kv(g); i++) {
        const og_gguf_kv *kv = og_gguf_kv_at(g, i);
        sink += strlen(kv->key);
        if (og_gguf_find_kv(g, kv->key) != kv) __builtin_trap();
        int64_t iv;
        double dv;
        if (kv->type == OG_GGUF_STRING && kv->str.n) sink += (uint8_t)kv->str.s[kv->str.n - 1];
        if (kv->type == OG_GGUF_ARRAY) {
            for (uint64_t k = 0; k < kv->arr_n; k++) {
                if (kv->arr_type == OG_GGUF_STRING) {
                    if (kv->strs[k].n) sink += (uint8_t)kv->strs[k].s[kv->strs[k].n - 1];
                } else if (og_gguf_kv_num_f64(kv, k, &dv) == OG_OK) {
                    sink += (uint64_t)(dv != 0);
                }
            }
        } else if (og_gguf_kv_num_i64(kv, 0, &iv) == OG_OK) {
            sink += (uint64_t)iv;
        }
        uint64_t u;
        og_gguf_get_u64(g, kv->key, &u);
    }
    for (uint64_t i = 0; i < og_gguf_n_tensors(g); i++) {
        const og_gguf_tensor *t = og_gguf_tensor_at(g, i);
        if (og_gguf_find_tensor(g, t->name) != t || t->part >= og_gguf_n_parts(g)) __builtin_trap();
        if (t->data && t->n_bytes) {
            const uint8_t *p = t->data;
            sink += p[0] + p[t->n_bytes - 1];
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    og_gguf *g = NULL;
    if (og_gguf_open_memory(data, size, "fuzz", 0, &g, err, sizeof err) == OG_OK) {
        walk(g);
        og_gguf_close(g);
    } else if (g != NULL || err[0] == '\0') {
        __builtin_trap(); /* a failure must leave no object and say why */
    }
    if (og_gguf_open_memory(data, size, "fuzz", OG_GGUF_HEADER_ONLY, &g, err, sizeof err) == OG_OK) {
        walk(g);
        og_gguf_close(g);
    }
    return 0;
}
