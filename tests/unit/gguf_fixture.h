/* Hand-assembled GGUF files for tests, written byte by byte from
 * shared/spec/gguf.md §3 without using onegpu's writer, so the reader and the
 * writer are both checked against the spec rather than against each other.
 * `corruption` selects one defect; CORRUPT_NONE gives a valid file. */
#ifndef OG_GGUF_FIXTURE_H
#define OG_GGUF_FIXTURE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct fx_buf {
    uint8_t *p;
    size_t n, cap;
} fx_buf;

static inline void fx_bytes(fx_buf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        b->p = realloc(b->p, cap);
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static inline void fx_u8(fx_buf *b, uint8_t v) { fx_bytes(b, &v, 1); }
static inline void fx_u32(fx_buf *b, uint32_t v) { fx_bytes(b, &v, 4); }
static inline void fx_u64(fx_buf *b, uint64_t v) { fx_bytes(b, &v, 8); }
static inline void fx_strn(fx_buf *b, const char *s, uint64_t n) {
    fx_u64(b, n);
    fx_bytes(b, s, (size_t)n);
}
static inline void fx_str(fx_buf *b, const char *s) { fx_strn(b, s, strlen(s)); }

enum fx_corruption {
    CORRUPT_NONE,
    CORRUPT_MAGIC, CORRUPT_VERSION1, CORRUPT_VERSION4, CORRUPT_BIG_ENDIAN, CORRUPT_EMPTY,
    CORRUPT_TRUNC_HEADER, CORRUPT_TRUNC_DATA, CORRUPT_N_KV, CORRUPT_N_TENSORS,
    CORRUPT_KEY_LEN, CORRUPT_EMPTY_KEY, CORRUPT_DUP_KEY, CORRUPT_VALUE_TYPE, CORRUPT_NESTED,
    CORRUPT_BOOL, CORRUPT_ALIGN_VALUE, CORRUPT_ALIGN_TYPE, CORRUPT_ARRAY_LEN, CORRUPT_STRARR_EOF,
    CORRUPT_KEY_NUL, CORRUPT_NAME_LONG, CORRUPT_DUP_NAME, CORRUPT_NDIMS, CORRUPT_NEG_DIM,
    CORRUPT_DIM_OVERFLOW, CORRUPT_TYPE_UNKNOWN, CORRUPT_TYPE_REMOVED, CORRUPT_BLOCK,
    CORRUPT_MISALIGNED, CORRUPT_OUTSIDE, CORRUPT_OVERLAP,
    CORRUPT_COUNT
};

/* Base file: 5 KVs (string, u32 alignment 32, bool, u32[3], string[2]) and two
 * tensors, "w.f32" F32 [8, 2] at 0 (64 bytes) and "w.q8" Q8_0 [32] at 64
 * (34 bytes, padded to 96). Data bytes are a counter pattern. */
static inline fx_buf fx_build(enum fx_corruption c) {
    fx_buf b = {0};
    if (c == CORRUPT_EMPTY) {
        b.p = malloc(1);
        return b;
    }
    fx_bytes(&b, c == CORRUPT_MAGIC ? "GGML" : "GGUF", 4);
    fx_u32(&b, c == CORRUPT_VERSION1 ? 1 : c == CORRUPT_VERSION4 ? 4 : c == CORRUPT_BIG_ENDIAN ? 0x03000000u : 3);
    fx_u64(&b, c == CORRUPT_N_TENSORS ? (1ull << 60) : 2);
    fx_u64(&b, c == CORRUPT_N_KV ? (1ull << 59) : 5);
    /* KV 1: general.architecture */
    if (c == CORRUPT_KEY_LEN) fx_u64(&b, 1ull << 40);
    else if (c == CORRUPT_EMPTY_KEY) fx_str(&b, "");
    else if (c == CORRUPT_KEY_NUL) fx_strn(&b, "gen\0ral.architecture", 20);
    else fx_str(&b, "general.architecture");
    fx_u32(&b, 8);
    fx_str(&b, "test");
    /* KV 2: general.alignment */
    fx_str(&b, "general.alignment");
    if (c == CORRUPT_ALIGN_TYPE) {
        fx_u32(&b, 10);
        fx_u64(&b, 32);
    } else {
        fx_u32(&b, 4);
        fx_u32(&b, c == CORRUPT_ALIGN_VALUE ? 48 : 32);
    }
    /* KV 3: bool */
    fx_str(&b, c == CORRUPT_DUP_KEY ? "general.architecture" : "test.flag");
    fx_u32(&b, c == CORRUPT_VALUE_TYPE ? 99 : 7);
    fx_u8(&b, c == CORRUPT_BOOL ? 2 : 1);
    /* KV 4: u32 array */
    fx_str(&b, "test.list");
    fx_u32(&b, 9);
    fx_u32(&b, c == CORRUPT_NESTED ? 9 : 4);
    fx_u64(&b, c == CORRUPT_ARRAY_LEN ? (1ull << 40) : 3);
    fx_u32(&b, 1);
    fx_u32(&b, 2);
    fx_u32(&b, 3);
    /* KV 5: string array */
    fx_str(&b, "test.names");
    fx_u32(&b, 9);
    fx_u32(&b, 8);
    fx_u64(&b, 2);
    fx_str(&b, "a");
    if (c == CORRUPT_STRARR_EOF) {
        fx_u64(&b, 1ull << 20); /* length past the end, then the file stops */
        return b;
    }
    fx_str(&b, "bc");
    /* Tensor 0: "w.f32" F32 [8, 2] */
    if (c == CORRUPT_NAME_LONG) fx_str(&b, "a_tensor_name_that_is_exactly_sixty_four_bytes_long_xxxxxxxxxxxx");
    else fx_str(&b, "w.f32");
    if (c == CORRUPT_NDIMS) {
        fx_u32(&b, 5);
        for (int i = 0; i < 5; i++) fx_u64(&b, 1);
    } else if (c == CORRUPT_DIM_OVERFLOW) {
        fx_u32(&b, 3);
        fx_u64(&b, 1ull << 32);
        fx_u64(&b, 1ull << 32);
        fx_u64(&b, 1ull << 32);
    } else {
        fx_u32(&b, 2);
        fx_u64(&b, 8);
        fx_u64(&b, c == CORRUPT_NEG_DIM ? UINT64_MAX : 2);
    }
    fx_u32(&b, c == CORRUPT_TYPE_UNKNOWN ? 99 : c == CORRUPT_TYPE_REMOVED ? 4 : 0);
    fx_u64(&b, 0);
    if (c == CORRUPT_TRUNC_HEADER) {
        b.n -= 3; /* cut inside the next record */
        return b;
    }
    /* Tensor 1: "w.q8" Q8_0 [32] */
    fx_str(&b, c == CORRUPT_DUP_NAME ? "w.f32" : "w.q8");
    fx_u32(&b, 1);
    fx_u64(&b, c == CORRUPT_BLOCK ? 33 : 32);
    fx_u32(&b, 8);
    fx_u64(&b, c == CORRUPT_MISALIGNED ? 70 : c == CORRUPT_OUTSIDE ? (1ull << 40) : c == CORRUPT_OVERLAP ? 32 : 64);
    while (b.n % 32) fx_u8(&b, 0);
    for (int i = 0; i < 64 + 34; i++) fx_u8(&b, (uint8_t)(i * 7 + 1));
    while (b.n % 32) fx_u8(&b, 0);
    if (c == CORRUPT_TRUNC_DATA) b.n -= 40;
    return b;
}

#define FX_COUNT_AS_STRING (-2) /* split.count written as the string "3" */

/* A part of a split model (gguf.md §7.4), assembled byte by byte:
 * general.architecture when arch is set, the split keys as gguf-split writes
 * them (split.no u16, split.count u16, split.tensors.count i32; no < 0 leaves
 * them out), then one F32 [8] tensor per letter of `tensors`, its 32 bytes all
 * equal to the letter. */
static inline fx_buf fx_build_split_part(const char *arch, int no, int count, int total, const char *tensors) {
    fx_buf b = {0};
    size_t nt = strlen(tensors);
    fx_bytes(&b, "GGUF", 4);
    fx_u32(&b, 3);
    fx_u64(&b, nt);
    fx_u64(&b, (arch ? 1 : 0) + (no >= 0 ? 3 : 0));
    if (arch) {
        fx_str(&b, "general.architecture");
        fx_u32(&b, 8);
        fx_str(&b, arch);
    }
    if (no >= 0) {
        uint16_t v = (uint16_t)no;
        fx_str(&b, "split.no");
        fx_u32(&b, 2);
        fx_bytes(&b, &v, 2);
        fx_str(&b, "split.count");
        if (count == FX_COUNT_AS_STRING) {
            fx_u32(&b, 8);
            fx_str(&b, "3");
        } else {
            v = (uint16_t)count;
            fx_u32(&b, 2);
            fx_bytes(&b, &v, 2);
        }
        int32_t t = total;
        fx_str(&b, "split.tensors.count");
        fx_u32(&b, 5);
        fx_bytes(&b, &t, 4);
    }
    for (size_t i = 0; i < nt; i++) {
        char name[2] = {tensors[i], 0};
        fx_str(&b, name);
        fx_u32(&b, 1);
        fx_u64(&b, 8);
        fx_u32(&b, 0);
        fx_u64(&b, 32 * i);
    }
    while (b.n % 32) fx_u8(&b, 0);
    for (size_t i = 0; i < nt; i++)
        for (int k = 0; k < 32; k++) fx_u8(&b, (uint8_t)tensors[i]);
    return b;
}

#endif
