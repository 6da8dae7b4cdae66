/* GGUF writer (gguf.md §8): header, KVs, tensor infos, padding, then each tensor's
 * bytes padded to the alignment. The file appears atomically (tmp + rename). */
#include "og_gguf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

typedef struct wkv {
    char *key;
    uint8_t *val; /* serialized: u32 type then the value, as stored in the file */
    size_t val_len;
} wkv;

typedef struct wtensor {
    og_gguf_tensor t; /* name owned (strdup), data borrowed */
} wtensor;

struct og_gguf_writer {
    uint32_t alignment;
    wkv *kvs;
    size_t n_kv, cap_kv;
    wtensor *tensors;
    size_t n_tensors, cap_tensors;
    uint64_t data_bytes; /* running padded size of the data section */
};

/* A growable byte buffer for serializing one value. */
typedef struct bbuf {
    uint8_t *p;
    size_t n, cap;
    bool oom;
} bbuf;

static void bput(bbuf *b, const void *src, size_t n) {
    if (b->oom || n == 0) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n) cap *= 2;
        uint8_t *np = realloc(b->p, cap);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void bput_u32(bbuf *b, uint32_t v) { bput(b, &v, 4); }
static void bput_u64(bbuf *b, uint64_t v) { bput(b, &v, 8); }
static void bput_str(bbuf *b, const char *s, uint64_t n) {
    bput_u64(b, n);
    bput(b, s, (size_t)n);
}

og_status og_gguf_writer_create(uint32_t alignment, og_gguf_writer **out) {
    *out = NULL;
    if (alignment == 0 || (alignment & (alignment - 1))) return OG_ERR_INVALID_ARG;
    og_gguf_writer *w = calloc(1, sizeof *w);
    if (!w) return OG_ERR_NOMEM;
    w->alignment = alignment;
    if (alignment != 32) {
        og_status st = og_gguf_writer_set_u32(w, "general.alignment", alignment);
        if (st) {
            og_gguf_writer_free(w);
            return st;
        }
    }
    *out = w;
    return OG_OK;
}

void og_gguf_writer_free(og_gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kvs[i].key);
        free(w->kvs[i].val);
    }
    for (size_t i = 0; i < w->n_tensors; i++) free((char *)w->tensors[i].t.name);
    free(w->kvs);
    free(w->tensors);
    free(w);
}

static og_status put_kv(og_gguf_writer *w, const char *key, bbuf *b) {
    if (b->oom) {
        free(b->p);
        return OG_ERR_NOMEM;
    }
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kvs[i].key, key) == 0) {
            free(w->kvs[i].val);
            w->kvs[i].val = b->p;
            w->kvs[i].val_len = b->n;
            return OG_OK;
        }
    }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? w->cap_kv * 2 : 32;
        wkv *nk = realloc(w->kvs, cap * sizeof *nk);
        if (!nk) {
            free(b->p);
            return OG_ERR_NOMEM;
        }
        w->kvs = nk;
        w->cap_kv = cap;
    }
    char *k = strdup(key);
    if (!k) {
        free(b->p);
        return OG_ERR_NOMEM;
    }
    w->kvs[w->n_kv++] = (wkv){k, b->p, b->n};
    return OG_OK;
}

static og_status check_key(const char *key) {
    size_t n = key ? strlen(key) : 0;
    return (n == 0 || n > 65535) ? OG_ERR_INVALID_ARG : OG_OK;
}

og_status og_gguf_writer_set(og_gguf_writer *w, const char *key, og_gguf_vtype type,
                             const void *value) {
    if (check_key(key) || type >= OG_GGUF_VTYPE_COUNT || type == OG_GGUF_ARRAY || !value)
        return OG_ERR_INVALID_ARG;
    bbuf b = {0};
    bput_u32(&b, type);
    if (type == OG_GGUF_STRING) {
        const og_str *s = value;
        bput_str(&b, s->s, s->n);
    } else {
        if (type == OG_GGUF_BOOL && *(const uint8_t *)value > 1) {
            free(b.p);
            return OG_ERR_INVALID_ARG;
        }
        bput(&b, value, og_gguf_vtype_size(type));
    }
    return put_kv(w, key, &b);
}

og_status og_gguf_writer_set_u32(og_gguf_writer *w, const char *key, uint32_t v) {
    return og_gguf_writer_set(w, key, OG_GGUF_UINT32, &v);
}
og_status og_gguf_writer_set_f32(og_gguf_writer *w, const char *key, float v) {
    return og_gguf_writer_set(w, key, OG_GGUF_FLOAT32, &v);
}
og_status og_gguf_writer_set_bool(og_gguf_writer *w, const char *key, bool v) {
    uint8_t b = v ? 1 : 0;
    return og_gguf_writer_set(w, key, OG_GGUF_BOOL, &b);
}
/* llama.cpp's LLAMA_FTYPE_MOSTLY_* of a file whose largest part is type t */
static uint32_t ftype_of(og_ggml_type t) {
    switch (t) {
    case OG_TYPE_F32: return 0;
    case OG_TYPE_F16: return 1;
    case OG_TYPE_Q4_0: return 2;
    case OG_TYPE_Q4_1: return 3;
    case OG_TYPE_Q8_0: return 7;
    case OG_TYPE_Q5_0: return 8;
    case OG_TYPE_Q5_1: return 9;
    case OG_TYPE_Q2_K: return 10;
    case OG_TYPE_Q3_K: return 12;
    case OG_TYPE_Q4_K: return 15;
    case OG_TYPE_Q5_K: return 17;
    case OG_TYPE_Q6_K: return 18;
    case OG_TYPE_IQ4_NL: return 25;
    case OG_TYPE_IQ2_XXS: return 19;
    case OG_TYPE_MXFP4: return 38; /* MOSTLY_MXFP4_MOE */
    case OG_TYPE_BF16: return 32;
    default: return 1024; /* "guessed" */
    }
}

og_status og_gguf_writer_set_general(og_gguf_writer *w, const char *arch, const char *name,
                                     const uint64_t *type_bytes) {
    og_ggml_type major = OG_TYPE_F32;
    bool quantized = false;
    for (int t = 0; t < OG_TYPE_COUNT; t++) {
        if (type_bytes[t] > type_bytes[major]) major = (og_ggml_type)t;
        if (type_bytes[t] && og_type_size_of((uint32_t)t) && og_type_size_of((uint32_t)t)->blck > 1) quantized = true;
    }
    og_status st;
    if ((st = og_gguf_writer_set_str(w, "general.architecture", arch)) ||
        (st = og_gguf_writer_set_str(w, "general.name", name)) ||
        (st = og_gguf_writer_set_str(w, "general.type", "model")) ||
        (st = og_gguf_writer_set_u32(w, "general.file_type", ftype_of(major))))
        return st;
    return quantized ? og_gguf_writer_set_u32(w, "general.quantization_version", 2) : OG_OK;
}

og_status og_gguf_writer_set_str(og_gguf_writer *w, const char *key, const char *v) {
    og_str s = {v, strlen(v)};
    return og_gguf_writer_set(w, key, OG_GGUF_STRING, &s);
}

og_status og_gguf_writer_set_arr(og_gguf_writer *w, const char *key, og_gguf_vtype elem,
                                 const void *values, uint64_t n) {
    if (check_key(key) || elem >= OG_GGUF_VTYPE_COUNT || elem == OG_GGUF_ARRAY || (n && !values))
        return OG_ERR_INVALID_ARG;
    bbuf b = {0};
    bput_u32(&b, OG_GGUF_ARRAY);
    bput_u32(&b, elem);
    bput_u64(&b, n);
    if (elem == OG_GGUF_STRING) {
        const og_str *s = values;
        for (uint64_t i = 0; i < n; i++) bput_str(&b, s[i].s, s[i].n);
    } else {
        bput(&b, values, (size_t)(n * og_gguf_vtype_size(elem)));
    }
    return put_kv(w, key, &b);
}

og_status og_gguf_writer_add_tensor(og_gguf_writer *w, const char *name, og_ggml_type type,
                                    uint32_t n_dims, const int64_t *ne, const void *data) {
    if (!name || !*name || strlen(name) > 63 || n_dims < 1 || n_dims > 4 || !ne)
        return OG_ERR_INVALID_ARG;
    for (size_t i = 0; i < w->n_tensors; i++)
        if (strcmp(w->tensors[i].t.name, name) == 0) return OG_ERR_INVALID_ARG;
    og_gguf_tensor t = {.n_dims = n_dims, .type = type, .data = data};
    for (int d = 0; d < 4; d++) t.ne[d] = d < (int)n_dims ? ne[d] : 1;
    uint64_t bytes;
    for (int d = 0; d < 4; d++)
        if (t.ne[d] < 0) return OG_ERR_INVALID_ARG;
    og_status st = og_row_bytes(type, (uint64_t)t.ne[0], &bytes);
    if (st) return st == OG_ERR_FORMAT ? OG_ERR_INVALID_ARG : st;
    for (int d = 1; d < 4; d++)
        if (!og_mul_u64(bytes, (uint64_t)t.ne[d], &bytes)) return OG_ERR_RANGE;
    t.n_bytes = bytes;
    t.offset = w->data_bytes;
    uint64_t padded;
    if (!og_align_up_u64(bytes, w->alignment, &padded) || !og_add_u64(w->data_bytes, padded, &w->data_bytes))
        return OG_ERR_RANGE;
    if (w->n_tensors == w->cap_tensors) {
        size_t cap = w->cap_tensors ? w->cap_tensors * 2 : 64;
        wtensor *nt = realloc(w->tensors, cap * sizeof *nt);
        if (!nt) return OG_ERR_NOMEM;
        w->tensors = nt;
        w->cap_tensors = cap;
    }
    if (!(t.name = strdup(name))) return OG_ERR_NOMEM;
    w->tensors[w->n_tensors++].t = t;
    return OG_OK;
}

uint64_t og_gguf_writer_n_tensors(const og_gguf_writer *w) { return w->n_tensors; }
uint64_t og_gguf_writer_data_bytes(const og_gguf_writer *w) { return w->data_bytes; }

static og_status write_all(FILE *f, const void *p, size_t n, const char *path, char *err, size_t errlen) {
    if (n && fwrite(p, 1, n, f) != n)
        return og_fail(err, errlen, OG_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    return OG_OK;
}

/* A fresh temporary file beside `path` (same filesystem, so rename is atomic):
 * mkstemp never follows a symlink, never clobbers a file and never collides
 * with a concurrent writer. */
static og_status open_temp(const char *path, char **tmp_out, FILE **f_out, char *err, size_t errlen) {
    const char *slash = strrchr(path, '/');
    size_t dlen = slash ? (size_t)(slash - path) + 1 : 0;
    char *tmp = malloc(dlen + 32);
    if (!tmp) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    memcpy(tmp, path, dlen);
    memcpy(tmp + dlen, ".onegpu-write-XXXXXX", 21);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        og_status st = og_fail(err, errlen, OG_ERR_IO, "%s: cannot create a temporary file beside it: %s", path,
                               strerror(errno));
        free(tmp);
        return st;
    }
    fchmod(fd, 0644);
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        close(fd);
        unlink(tmp);
        free(tmp);
        return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    }
    *tmp_out = tmp;
    *f_out = f;
    return OG_OK;
}

/* What one file holds: tensors [t0, t1) and, for a part of a split model, the
 * split keys (split.count 0: a plain file with every key). */
typedef struct part_spec {
    size_t t0, t1;
    uint32_t split_no, split_count;
} part_spec;

static bool is_split_key(const char *key) { return strncmp(key, "split.", 6) == 0; }

/* Appends the KV records a part carries to h; *n_kv counts them. */
static void put_kvs(const og_gguf_writer *w, const part_spec *ps, bbuf *h, uint64_t *n_kv) {
    *n_kv = 0;
    for (size_t i = 0; i < w->n_kv; i++) {
        const char *key = w->kvs[i].key;
        /* later parts: only the split keys and the alignment their layout needs
         * (gguf-split writes only the split keys; it uses the default alignment) */
        bool keep = !ps->split_count || (!is_split_key(key) && (ps->split_no == 0 || !strcmp(key, "general.alignment")));
        if (!keep) continue;
        bput_str(h, key, strlen(key));
        bput(h, w->kvs[i].val, w->kvs[i].val_len);
        ++*n_kv;
    }
    if (!ps->split_count) return;
    uint16_t no = (uint16_t)ps->split_no, count = (uint16_t)ps->split_count;
    int32_t total = (int32_t)w->n_tensors;
    bput_str(h, "split.no", 8);
    bput_u32(h, OG_GGUF_UINT16);
    bput(h, &no, 2);
    bput_str(h, "split.count", 11);
    bput_u32(h, OG_GGUF_UINT16);
    bput(h, &count, 2);
    bput_str(h, "split.tensors.count", 19);
    bput_u32(h, OG_GGUF_INT32);
    bput(h, &total, 4);
    *n_kv += 3;
}

/* Writes one file into a fresh temporary beside path; *tmp_out names it (the
 * caller renames or unlinks it). */
static og_status write_part(og_gguf_writer *w, const part_spec *ps, const char *path, og_gguf_fill_fn fill,
                            void *fill_ctx, char **tmp_out, char *err, size_t errlen) {
    struct stat sb;
    *tmp_out = NULL;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode))
        return og_fail(err, errlen, OG_ERR_IO, "%s exists and is not a regular file; not replacing it", path);
    char *tmp = NULL;
    FILE *f = NULL;
    uint8_t *buf = NULL;
    og_status st = open_temp(path, &tmp, &f, err, errlen);
    if (st) return st;
    static const uint8_t zeros[256];
    /* Header, KVs and tensor infos; offsets from this part's data section. */
    const uint64_t base = ps->t0 < ps->t1 ? w->tensors[ps->t0].t.offset : 0;
    bbuf h = {0}, kvb = {0};
    uint64_t n_kv;
    put_kvs(w, ps, &kvb, &n_kv);
    bput(&h, "GGUF", 4);
    bput_u32(&h, 3);
    bput_u64(&h, ps->t1 - ps->t0);
    bput_u64(&h, n_kv);
    bput(&h, kvb.p, kvb.n);
    h.oom |= kvb.oom;
    free(kvb.p);
    uint64_t max_fill = 0, data_bytes = 0;
    for (size_t i = ps->t0; i < ps->t1; i++) {
        const og_gguf_tensor *t = &w->tensors[i].t;
        bput_str(&h, t->name, strlen(t->name));
        bput_u32(&h, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) bput_u64(&h, (uint64_t)t->ne[d]);
        bput_u32(&h, t->type);
        bput_u64(&h, t->offset - base);
        if (!t->data && fill && t->n_bytes > max_fill) max_fill = t->n_bytes;
    }
    if (ps->t1 > ps->t0) { /* the part's tensors are packed: its data ends after the last, padded */
        const og_gguf_tensor *last = &w->tensors[ps->t1 - 1].t;
        og_align_up_u64(last->n_bytes, w->alignment, &data_bytes); /* checked when added */
        data_bytes += last->offset - base;
    }
    if (ps->t1 > ps->t0) {
        while (h.n % w->alignment) bput(&h, zeros, 1);
    }
    if (h.oom) {
        st = og_fail(err, errlen, OG_ERR_NOMEM, "out of memory while building the header");
        goto fail;
    }
    /* Refuse up front what the filesystem cannot hold (statvfs's f_bavail: the
     * blocks an unprivileged writer may use) instead of filling it and failing on
     * ENOSPC much later; holes (tensors neither given nor filled) cost no disk.
     * A split model's first part counts every part's tensors, later ones theirs
     * and the rest (the later parts' small headers aside). */
    uint64_t to_write = h.n;
    for (size_t i = ps->t0; i < w->n_tensors; i++)
        if (w->tensors[i].t.data || fill) to_write += w->tensors[i].t.n_bytes;
    struct statvfs vfs;
    if (fstatvfs(fileno(f), &vfs) == 0 && vfs.f_frsize && to_write / vfs.f_frsize > vfs.f_bavail) {
        st = og_fail(err, errlen, OG_ERR_IO, "%s: needs %.2f GiB of disk, %.2f GiB free there", path,
                     (double)to_write / 1073741824.0, (double)vfs.f_bavail * (double)vfs.f_frsize / 1073741824.0);
        goto fail;
    }
    if ((st = write_all(f, h.p, h.n, path, err, errlen))) goto fail;
    uint64_t data_start = h.n;
    if (max_fill) {
        buf = max_fill <= SIZE_MAX ? malloc((size_t)max_fill) : NULL;
        if (!buf) {
            st = og_fail(err, errlen, OG_ERR_NOMEM, "cannot allocate %llu bytes for a tensor", (unsigned long long)max_fill);
            goto fail;
        }
    }
    /* Tensor data in order; holes stay unwritten so a sparse file costs no disk. */
    for (size_t i = ps->t0; i < ps->t1; i++) {
        const og_gguf_tensor *t = &w->tensors[i].t;
        const void *src = t->data;
        if (!src && fill) {
            if ((st = fill(fill_ctx, i, t, buf, err, errlen))) goto fail;
            src = buf;
        }
        if (!src) continue;
        if (fseeko(f, (off_t)(data_start + t->offset - base), SEEK_SET) != 0) {
            st = og_fail(err, errlen, OG_ERR_IO, "%s: seek failed: %s", path, strerror(errno));
            goto fail;
        }
        if ((st = write_all(f, src, (size_t)t->n_bytes, path, err, errlen))) goto fail;
    }
    /* Flush to the disk before the rename: after a crash the path holds either
     * the old file or the whole new one. */
    if (fflush(f) != 0 || ftruncate(fileno(f), (off_t)(data_start + data_bytes)) != 0 || fsync(fileno(f)) != 0) {
        st = og_fail(err, errlen, OG_ERR_IO, "%s: %s", path, strerror(errno));
        goto fail;
    }
    if (fclose(f) != 0) {
        f = NULL;
        st = og_fail(err, errlen, OG_ERR_IO, "%s: close failed: %s", path, strerror(errno));
        goto fail;
    }
    free(h.p);
    free(buf);
    *tmp_out = tmp;
    return OG_OK;
fail:
    if (f) fclose(f);
    unlink(tmp);
    free(h.p);
    free(buf);
    free(tmp);
    return st;
}

og_status og_gguf_writer_write(og_gguf_writer *w, const char *path, og_gguf_fill_fn fill, void *fill_ctx, char *err,
                               size_t errlen) {
    part_spec ps = {0, w->n_tensors, 0, 0};
    char *tmp;
    og_status st = write_part(w, &ps, path, fill, fill_ctx, &tmp, err, errlen);
    if (st) return st;
    if (rename(tmp, path) != 0) {
        st = og_fail(err, errlen, OG_ERR_IO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
        unlink(tmp);
    }
    free(tmp);
    return st;
}

og_status og_gguf_split_prefix(const char *path, char *buf, size_t buflen) {
    size_t n = strlen(path);
    if (n > 5 && strcmp(path + n - 5, ".gguf") == 0) n -= 5;
    if (n >= buflen) return OG_ERR_RANGE;
    memcpy(buf, path, n);
    buf[n] = '\0';
    return OG_OK;
}

/* Bytes of one tensor info record (gguf.md §3). */
static uint64_t info_bytes(const og_gguf_tensor *t) { return 8 + strlen(t->name) + 4 + 8ull * t->n_dims + 4 + 8; }

og_status og_gguf_writer_write_split(og_gguf_writer *w, const char *path, uint64_t max_part_bytes, og_gguf_fill_fn fill,
                                     void *fill_ctx, uint32_t *n_parts_out, char *err, size_t errlen) {
    *n_parts_out = 0;
    if (max_part_bytes == 0) return og_fail(err, errlen, OG_ERR_INVALID_ARG, "the largest part size must be above 0");
    if (w->n_tensors > INT32_MAX)
        return og_fail(err, errlen, OG_ERR_RANGE, "%zu tensors do not fit split.tensors.count (int32)", w->n_tensors);
    char prefix[4096];
    if (og_gguf_split_prefix(path, prefix, sizeof prefix))
        return og_fail(err, errlen, OG_ERR_RANGE, "%s: the path is too long", path);
    /* Parts in tensor order, greedily: a tensor starts a new part when the
     * current one (header padded, data padded) would exceed the limit. */
    size_t cap = 16, n_parts = 0;
    part_spec *parts = malloc(cap * sizeof *parts);
    if (!parts) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    bbuf kv0 = {0}, kvk = {0};
    uint64_t n_kv;
    put_kvs(w, &(part_spec){0, 0, 0, 1}, &kv0, &n_kv);
    put_kvs(w, &(part_spec){0, 0, 1, 2}, &kvk, &n_kv);
    const uint64_t kv_bytes[2] = {kv0.n, kvk.n};
    bool oom = kv0.oom || kvk.oom;
    free(kv0.p);
    free(kvk.p);
    if (oom) {
        free(parts);
        return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    }
    size_t t = 0;
    do {
        if (n_parts == cap) {
            part_spec *np = realloc(parts, 2 * cap * sizeof *parts);
            if (!np) {
                free(parts);
                return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
            }
            parts = np;
            cap *= 2;
        }
        part_spec *ps = &parts[n_parts];
        *ps = (part_spec){t, t, (uint32_t)n_parts, 0};
        uint64_t header = 24 + kv_bytes[n_parts ? 1 : 0], data = 0;
        while (t < w->n_tensors) {
            const og_gguf_tensor *ti = &w->tensors[t].t;
            uint64_t h2 = header + info_bytes(ti), hp, dp;
            og_align_up_u64(h2, w->alignment, &hp);
            og_align_up_u64(ti->n_bytes, w->alignment, &dp); /* checked when added */
            if (ps->t1 > ps->t0 && hp + data + dp > max_part_bytes) break;
            header = h2;
            data += dp;
            ps->t1 = ++t;
        }
        n_parts++;
    } while (t < w->n_tensors);
    if (n_parts > UINT16_MAX) {
        free(parts);
        return og_fail(err, errlen, OG_ERR_RANGE,
                       "%zu parts of at most %llu bytes: more than the 65535 split.count can number; give a larger size",
                       n_parts, (unsigned long long)max_part_bytes);
    }
    char **tmps = calloc(n_parts, sizeof *tmps);
    if (!tmps) {
        free(parts);
        return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    }
    og_status st = OG_OK;
    char part_path[4200];
    for (size_t k = 0; k < n_parts && !st; k++) {
        parts[k].split_count = (uint32_t)n_parts;
        if (og_gguf_split_path(prefix, (uint32_t)k, (uint32_t)n_parts, part_path, sizeof part_path))
            st = og_fail(err, errlen, OG_ERR_RANGE, "%s: the path is too long", path);
        else
            st = write_part(w, &parts[k], part_path, fill, fill_ctx, &tmps[k], err, errlen);
    }
    /* Every part is on the disk: now they appear, in order. */
    for (size_t k = 0; k < n_parts && !st; k++) {
        og_gguf_split_path(prefix, (uint32_t)k, (uint32_t)n_parts, part_path, sizeof part_path);
        if (rename(tmps[k], part_path) != 0)
            st = og_fail(err, errlen, OG_ERR_IO, "cannot rename %s to %s: %s", tmps[k], part_path, strerror(errno));
        else {
            free(tmps[k]);
            tmps[k] = NULL;
        }
    }
    for (size_t k = 0; k < n_parts; k++) {
        if (tmps[k]) unlink(tmps[k]);
        free(tmps[k]);
    }
    free(tmps);
    free(parts);
    if (!st) *n_parts_out = (uint32_t)n_parts;
    return st;
}
