/* GGUF reader: every structure is validated against the bytes actually present
 * (gguf.md §4) before anything is allocated for it, so a hostile file can cost at
 * most a small multiple of its header size in memory and never crashes. */
#include "og_gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32u
#define GGUF_MAX_KEY_BYTES 65535u     /* spec: keys are at most 65535 bytes */
#define GGUF_MAX_NAME_BYTES 63u       /* ggml's 64-byte name buffer incl. NUL */
#define GGUF_MAX_STRING_BYTES (1ull << 30) /* ggml refuses longer strings */
#define GGUF_MAX_ARRAY_ELEMS (1ull << 30)  /* ggml's cap on array length */

struct og_gguf {
    char *path;              /* for messages */
    const uint8_t *base;     /* start of file bytes */
    uint64_t file_size;      /* bytes */
    void *map;               /* mmap'ed region or NULL (memory mode) */
    size_t map_len;          /* bytes still mapped */
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;    /* file offset of tensor data */
    uint64_t n_kv, n_tensors;
    og_gguf_kv *kvs;         /* [n_kv] */
    og_gguf_tensor *tensors; /* [n_tensors] */
    char **names;            /* NUL-terminated copies of keys and tensor names */
    uint64_t n_names, cap_names;
    size_t *kv_index;        /* open addressing: slot -> kv index + 1 (0 empty) */
    size_t *t_index;         /* same for tensors */
    size_t kv_index_cap, t_index_cap; /* powers of two */
};

/* Parsing cursor over the file bytes; every read is bounds-checked. */
typedef struct cursor {
    og_gguf *g;
    uint64_t off;
    char *err;
    size_t errlen;
} cursor;

static og_status cfail(const cursor *c, uint64_t off, og_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static og_status cfail(const cursor *c, uint64_t off, og_status st, const char *fmt, ...) {
    if (c->err && c->errlen) {
        char what[768];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(what, sizeof what, fmt, ap);
        va_end(ap);
        snprintf(c->err, c->errlen, "%s: offset %llu: %s", c->g->path,
                 (unsigned long long)off, what);
    }
    return st;
}

static uint64_t remaining(const cursor *c) { return c->g->file_size - c->off; }

static og_status need(cursor *c, uint64_t n, const char *what) {
    if (remaining(c) < n)
        return cfail(c, c->off, OG_ERR_FORMAT,
                     "file ends inside %s (needs %llu bytes, %llu left): truncated header",
                     what, (unsigned long long)n, (unsigned long long)remaining(c));
    return OG_OK;
}

static og_status rd_u32(cursor *c, uint32_t *v, const char *what) {
    og_status st = need(c, 4, what);
    if (st) return st;
    memcpy(v, c->g->base + c->off, 4);
    c->off += 4;
    return OG_OK;
}

static og_status rd_u64(cursor *c, uint64_t *v, const char *what) {
    og_status st = need(c, 8, what);
    if (st) return st;
    memcpy(v, c->g->base + c->off, 8);
    c->off += 8;
    return OG_OK;
}

/* Reads a GGUF string (u64 length + bytes) as a view into the file. */
static og_status rd_str(cursor *c, og_str *s, uint64_t max_len, const char *what) {
    uint64_t at = c->off;
    uint64_t n;
    og_status st = rd_u64(c, &n, what);
    if (st) return st;
    if (n > max_len)
        return cfail(c, at, OG_ERR_FORMAT, "%s length %llu exceeds the limit of %llu bytes", what,
                     (unsigned long long)n, (unsigned long long)max_len);
    if (n > remaining(c))
        return cfail(c, at, OG_ERR_FORMAT,
                     "%s length %llu runs past the end of the file (%llu bytes left)", what,
                     (unsigned long long)n, (unsigned long long)remaining(c));
    s->s = (const char *)c->g->base + c->off;
    s->n = n;
    c->off += n;
    return OG_OK;
}

/* Keeps a NUL-terminated copy of s; the gguf owns it. */
static og_status keep_name(og_gguf *g, og_str s, const char **out) {
    if (g->n_names == g->cap_names) {
        uint64_t cap = g->cap_names ? g->cap_names * 2 : 64;
        char **nn = realloc(g->names, cap * sizeof *nn);
        if (!nn) return OG_ERR_NOMEM;
        g->names = nn;
        g->cap_names = cap;
    }
    char *copy = malloc(s.n + 1);
    if (!copy) return OG_ERR_NOMEM;
    memcpy(copy, s.s, s.n);
    copy[s.n] = '\0';
    g->names[g->n_names++] = copy;
    *out = copy;
    return OG_OK;
}

/* ---- name -> index hash tables ------------------------------------------ */

static size_t hash_cap_for(uint64_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    return cap;
}

/* Finds the slot holding `name` or the empty slot where it would go. */
static size_t hash_slot(const size_t *index, size_t cap, const char *name, size_t len,
                        const char *(*name_at)(const og_gguf *, size_t), const og_gguf *g) {
    size_t mask = cap - 1;
    size_t h = (size_t)og_fnv1a64(name, len, OG_FNV1A64_INIT) & mask;
    while (index[h]) {
        const char *other = name_at(g, index[h] - 1);
        if (strcmp(other, name) == 0) break;
        h = (h + 1) & mask;
    }
    return h;
}

static const char *kv_name_at(const og_gguf *g, size_t i) { return g->kvs[i].key; }
static const char *tensor_name_at(const og_gguf *g, size_t i) { return g->tensors[i].name; }

/* ---- metadata values ---------------------------------------------------- */

static og_status read_kv_value(cursor *c, og_gguf_kv *kv) {
    og_gguf_vtype t = kv->type;
    if (t == OG_GGUF_STRING) {
        kv->data = c->g->base + c->off;
        return rd_str(c, &kv->str, GGUF_MAX_STRING_BYTES, "string value");
    }
    if (t != OG_GGUF_ARRAY) {
        size_t sz = og_gguf_vtype_size(t);
        og_status st = need(c, sz, "value");
        if (st) return st;
        kv->data = c->g->base + c->off;
        if (t == OG_GGUF_BOOL && c->g->base[c->off] > 1)
            return cfail(c, c->off, OG_ERR_FORMAT, "bool value of key '%s' is %u, not 0 or 1",
                         kv->key, c->g->base[c->off]);
        c->off += sz;
        return OG_OK;
    }
    /* ARRAY: element type, count, elements. */
    uint64_t at = c->off;
    uint32_t et;
    og_status st = rd_u32(c, &et, "array element type");
    if (st) return st;
    if (et >= OG_GGUF_VTYPE_COUNT)
        return cfail(c, at, OG_ERR_FORMAT, "array '%s' has unknown element type %u", kv->key, et);
    if (et == OG_GGUF_ARRAY)
        return cfail(c, at, OG_ERR_FORMAT,
                     "array '%s' contains arrays (nested arrays are not allowed)", kv->key);
    uint64_t n;
    if ((st = rd_u64(c, &n, "array length"))) return st;
    if (n > GGUF_MAX_ARRAY_ELEMS)
        return cfail(c, at + 4, OG_ERR_FORMAT, "array '%s' claims %llu elements (limit %llu)",
                     kv->key, (unsigned long long)n, (unsigned long long)GGUF_MAX_ARRAY_ELEMS);
    kv->arr_type = (og_gguf_vtype)et;
    kv->arr_n = n;
    kv->data = c->g->base + c->off;
    if (et != OG_GGUF_STRING) {
        uint64_t bytes = n * og_gguf_vtype_size(et); /* n <= 2^30, size <= 8 */
        if (bytes > remaining(c))
            return cfail(c, at + 4, OG_ERR_FORMAT,
                         "array '%s' of %llu %s values needs %llu bytes but only %llu remain",
                         kv->key, (unsigned long long)n, og_gguf_vtype_name(et),
                         (unsigned long long)bytes, (unsigned long long)remaining(c));
        if (et == OG_GGUF_BOOL) {
            for (uint64_t i = 0; i < n; i++)
                if (c->g->base[c->off + i] > 1)
                    return cfail(c, c->off + i, OG_ERR_FORMAT,
                                 "bool element %llu of '%s' is not 0 or 1", (unsigned long long)i,
                                 kv->key);
        }
        c->off += bytes;
        return OG_OK;
    }
    /* String array: validate every length first (no allocation), then index. */
    uint64_t start = c->off;
    for (uint64_t i = 0; i < n; i++) {
        og_str s;
        if ((st = rd_str(c, &s, GGUF_MAX_STRING_BYTES, "string array element"))) return st;
    }
    og_str *strs = n ? malloc(n * sizeof *strs) : NULL;
    if (n && !strs) return OG_ERR_NOMEM;
    uint64_t end = c->off;
    c->off = start;
    for (uint64_t i = 0; i < n; i++) rd_str(c, &strs[i], GGUF_MAX_STRING_BYTES, "");
    c->off = end;
    kv->strs = strs;
    return OG_OK;
}

/* ---- tensor infos --------------------------------------------------------- */

static og_status read_tensor_info(cursor *c, og_gguf_tensor *t, uint64_t idx) {
    uint64_t at = c->off;
    og_str name;
    og_status st = rd_str(c, &name, UINT64_MAX, "tensor name");
    if (st) return st;
    if (name.n == 0) return cfail(c, at, OG_ERR_FORMAT, "tensor %llu has an empty name",
                                  (unsigned long long)idx);
    if (name.n > GGUF_MAX_NAME_BYTES)
        return cfail(c, at, OG_ERR_FORMAT, "tensor %llu name is %llu bytes (at most %u allowed)",
                     (unsigned long long)idx, (unsigned long long)name.n, GGUF_MAX_NAME_BYTES);
    if (memchr(name.s, '\0', name.n))
        return cfail(c, at, OG_ERR_FORMAT, "tensor %llu name contains a NUL byte",
                     (unsigned long long)idx);
    if ((st = keep_name(c->g, name, &t->name))) return st;

    uint32_t n_dims;
    if ((st = rd_u32(c, &n_dims, "tensor dimension count"))) return st;
    if (n_dims > 4)
        return cfail(c, c->off - 4, OG_ERR_FORMAT, "tensor '%s' has %u dimensions (at most 4)",
                     t->name, n_dims);
    t->n_dims = n_dims;
    uint64_t nelem = 1;
    for (int d = 0; d < 4; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        uint64_t v;
        if ((st = rd_u64(c, &v, "tensor dimension"))) return st;
        if (v > (uint64_t)INT64_MAX)
            return cfail(c, c->off - 8, OG_ERR_FORMAT, "tensor '%s' dimension %u is negative (%lld)",
                         t->name, d, (long long)v);
        if (!og_mul_u64(nelem, v, &nelem) || nelem > (uint64_t)INT64_MAX)
            return cfail(c, c->off - 8, OG_ERR_FORMAT,
                         "tensor '%s' element count overflows 64 bits", t->name);
        t->ne[d] = (int64_t)v;
    }
    uint32_t type;
    uint64_t type_at = c->off;
    if ((st = rd_u32(c, &type, "tensor type"))) return st;
    const og_type_size *ts = og_type_size_of(type);
    if (!ts)
        return cfail(c, type_at, OG_ERR_FORMAT, "tensor '%s' has unknown or removed ggml type id %u",
                     t->name, type);
    t->type = (og_ggml_type)type;
    if (t->ne[0] % ts->blck != 0)
        return cfail(c, type_at, OG_ERR_FORMAT,
                     "tensor '%s': row length %lld is not a multiple of the %s block size %u",
                     t->name, (long long)t->ne[0], ts->name, ts->blck);
    uint64_t row, bytes = 0;
    if (og_row_bytes(type, (uint64_t)t->ne[0], &row) != OG_OK ||
        !og_mul_u64(row, (uint64_t)t->ne[1], &bytes) || !og_mul_u64(bytes, (uint64_t)t->ne[2], &bytes) ||
        !og_mul_u64(bytes, (uint64_t)t->ne[3], &bytes))
        return cfail(c, type_at, OG_ERR_FORMAT, "tensor '%s' byte size overflows 64 bits", t->name);
    t->n_bytes = bytes;
    if ((st = rd_u64(c, &t->offset, "tensor offset"))) return st;
    return OG_OK;
}

static int cmp_by_offset(const void *a, const void *b, void *ctx) {
    const og_gguf_tensor *ts = ctx;
    uint64_t oa = ts[*(const uint64_t *)a].offset, ob = ts[*(const uint64_t *)b].offset;
    return oa < ob ? -1 : oa > ob;
}

/* Offsets: aligned, inside the file, and non-overlapping. ggml additionally
 * demands the exact packed layout; we accept any valid one (tolerant reader). */
static og_status check_tensor_offsets(cursor *c, const uint64_t *info_off) {
    og_gguf *g = c->g;
    uint64_t packed = 0; /* where a standard writer puts this tensor (gguf.md §3) */
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        og_gguf_tensor *t = &g->tensors[i];
        if (t->offset % g->alignment != 0)
            return cfail(c, info_off[i], OG_ERR_FORMAT,
                         "tensor '%s' offset %llu is not a multiple of the alignment %u", t->name,
                         (unsigned long long)t->offset, g->alignment);
        uint64_t start, end;
        bool ok = og_add_u64(g->data_offset, t->offset, &start) && og_add_u64(start, t->n_bytes, &end);
        if (!ok || end > g->file_size) {
            /* At its standard packed place, the tensor is missing because the file
             * is short; anywhere else, the offset itself is wrong. */
            if (ok && t->offset == packed)
                return cfail(c, info_off[i], OG_ERR_FORMAT,
                             "tensor '%s' data ends at byte %llu but the file has only %llu bytes: "
                             "the file is truncated (interrupted download?)",
                             t->name, (unsigned long long)end, (unsigned long long)g->file_size);
            return cfail(c, info_off[i], OG_ERR_FORMAT,
                         "tensor '%s' offset %llu (+%llu bytes) points outside the file (%llu bytes)",
                         t->name, (unsigned long long)t->offset, (unsigned long long)t->n_bytes,
                         (unsigned long long)g->file_size);
        }
        uint64_t padded;
        if (og_align_up_u64(t->n_bytes, g->alignment, &padded)) og_add_u64(packed, padded, &packed);
    }
    if (g->n_tensors < 2) return OG_OK;
    uint64_t *order = malloc(g->n_tensors * sizeof *order);
    if (!order) return OG_ERR_NOMEM;
    for (uint64_t i = 0; i < g->n_tensors; i++) order[i] = i;
    qsort_r(order, g->n_tensors, sizeof *order, cmp_by_offset, g->tensors);
    og_status st = OG_OK;
    for (uint64_t k = 1; k < g->n_tensors; k++) {
        const og_gguf_tensor *a = &g->tensors[order[k - 1]], *b = &g->tensors[order[k]];
        if (a->offset + a->n_bytes > b->offset && a->n_bytes > 0 && b->n_bytes > 0) {
            st = cfail(c, info_off[order[k]], OG_ERR_FORMAT,
                       "tensor '%s' data (offset %llu) overlaps tensor '%s' (offset %llu, %llu bytes)",
                       b->name, (unsigned long long)b->offset, a->name,
                       (unsigned long long)a->offset, (unsigned long long)a->n_bytes);
            break;
        }
    }
    free(order);
    return st;
}

/* ---- whole header ------------------------------------------------------- */

static og_status parse(og_gguf *g, unsigned flags, char *err, size_t errlen) {
    cursor c = {.g = g, .off = 0, .err = err, .errlen = errlen};
    og_status st;
    if (g->file_size < 4 || memcmp(g->base, GGUF_MAGIC, 4) != 0) {
        if (g->file_size == 0) return cfail(&c, 0, OG_ERR_FORMAT, "empty file, not a GGUF model");
        return cfail(&c, 0, OG_ERR_FORMAT,
                     "bad magic: not a GGUF file (expected 'GGUF' at the start)");
    }
    c.off = 4;
    if ((st = rd_u32(&c, &g->version, "version"))) return st;
    if (g->version != 0 && (g->version & 0xFFFF) == 0)
        return cfail(&c, 4, OG_ERR_UNSUPPORTED,
                     "version field 0x%08x looks byte-swapped: big-endian GGUF is not supported",
                     g->version);
    if (g->version == 1)
        return cfail(&c, 4, OG_ERR_UNSUPPORTED,
                     "GGUF version 1 (32-bit counts) is not supported; convert the model again");
    if (g->version != 2 && g->version != 3)
        return cfail(&c, 4, OG_ERR_UNSUPPORTED, "unsupported GGUF version %u (supported: 2, 3)",
                     g->version);
    if ((st = rd_u64(&c, &g->n_tensors, "tensor count"))) return st;
    if ((st = rd_u64(&c, &g->n_kv, "metadata count"))) return st;
    /* The smallest KV record is 13 bytes and the smallest tensor info 25; counts
     * the file cannot possibly hold are refused before any allocation. */
    if (g->n_kv > remaining(&c) / 13)
        return cfail(&c, 16, OG_ERR_FORMAT, "metadata count %llu is impossible for a %llu-byte file",
                     (unsigned long long)g->n_kv, (unsigned long long)g->file_size);
    if (g->n_tensors > remaining(&c) / 25)
        return cfail(&c, 8, OG_ERR_FORMAT, "tensor count %llu is impossible for a %llu-byte file",
                     (unsigned long long)g->n_tensors, (unsigned long long)g->file_size);

    g->kvs = calloc(g->n_kv ? g->n_kv : 1, sizeof *g->kvs);
    g->kv_index_cap = hash_cap_for(g->n_kv);
    g->kv_index = calloc(g->kv_index_cap, sizeof *g->kv_index);
    if (!g->kvs || !g->kv_index) return OG_ERR_NOMEM;

    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        og_gguf_kv *kv = &g->kvs[i];
        uint64_t at = c.off;
        kv->file_offset = at;
        og_str key;
        if ((st = rd_str(&c, &key, GGUF_MAX_KEY_BYTES, "metadata key"))) return st;
        if (key.n == 0)
            return cfail(&c, at, OG_ERR_FORMAT, "metadata key %llu is empty", (unsigned long long)i);
        if (memchr(key.s, '\0', key.n))
            return cfail(&c, at, OG_ERR_FORMAT, "metadata key %llu contains a NUL byte",
                         (unsigned long long)i);
        if ((st = keep_name(g, key, &kv->key))) return st;
        size_t slot = hash_slot(g->kv_index, g->kv_index_cap, kv->key, key.n, kv_name_at, g);
        if (g->kv_index[slot])
            return cfail(&c, at, OG_ERR_FORMAT, "duplicate metadata key '%s'", kv->key);
        g->kv_index[slot] = i + 1;
        uint32_t vt;
        uint64_t vt_at = c.off;
        if ((st = rd_u32(&c, &vt, "value type"))) return st;
        if (vt >= OG_GGUF_VTYPE_COUNT)
            return cfail(&c, vt_at, OG_ERR_FORMAT, "key '%s' has unknown value type %u", kv->key, vt);
        kv->type = (og_gguf_vtype)vt;
        if ((st = read_kv_value(&c, kv))) return st;
        if (strcmp(kv->key, "general.alignment") == 0) {
            if (kv->type != OG_GGUF_UINT32)
                return cfail(&c, at, OG_ERR_FORMAT, "general.alignment must be uint32, not %s",
                             og_gguf_vtype_name(kv->type));
            uint32_t a;
            memcpy(&a, kv->data, 4);
            if (a == 0 || (a & (a - 1)) != 0)
                return cfail(&c, at, OG_ERR_FORMAT,
                             "general.alignment %u is not a non-zero power of two", a);
            g->alignment = a;
        }
    }

    g->tensors = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *g->tensors);
    uint64_t *info_off = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *info_off);
    g->t_index_cap = hash_cap_for(g->n_tensors);
    g->t_index = calloc(g->t_index_cap, sizeof *g->t_index);
    if (!g->tensors || !g->t_index || !info_off) {
        free(info_off);
        return OG_ERR_NOMEM;
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        info_off[i] = c.off;
        if ((st = read_tensor_info(&c, &g->tensors[i], i))) goto out;
        const char *nm = g->tensors[i].name;
        size_t slot = hash_slot(g->t_index, g->t_index_cap, nm, strlen(nm), tensor_name_at, g);
        if (g->t_index[slot]) {
            st = cfail(&c, info_off[i], OG_ERR_FORMAT, "duplicate tensor name '%s'", nm);
            goto out;
        }
        g->t_index[slot] = i + 1;
    }
    g->data_offset = c.off;
    if (g->n_tensors > 0) {
        og_align_up_u64(c.off, g->alignment, &g->data_offset);
        if (g->data_offset > g->file_size) {
            st = cfail(&c, c.off, OG_ERR_FORMAT,
                       "file ends before the data section (at %llu): truncated after the header",
                       (unsigned long long)g->data_offset);
            goto out;
        }
    }
    if ((st = check_tensor_offsets(&c, info_off))) goto out;
    if (!(flags & OG_GGUF_HEADER_ONLY)) {
        for (uint64_t i = 0; i < g->n_tensors; i++)
            g->tensors[i].data = g->base + g->data_offset + g->tensors[i].offset;
    }
out:
    free(info_off);
    return st;
}

static og_status finish_open(og_gguf *g, unsigned flags, og_gguf **out, char *err, size_t errlen) {
    og_status st = parse(g, flags, err, errlen);
    if (st == OG_ERR_NOMEM) og_fail(err, errlen, st, "%s: out of memory while reading the header", g->path);
    if (st) {
        og_gguf_close(g);
        return st;
    }
    /* Header-only: give back the mapping of the data section, so nothing can
     * touch tensor bytes by accident. */
    if ((flags & OG_GGUF_HEADER_ONLY) && g->map) {
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        size_t keep = (size_t)((g->data_offset + page - 1) / page * page);
        if (keep < g->map_len) {
            munmap((uint8_t *)g->map + keep, g->map_len - keep);
            g->map_len = keep;
        }
    }
    *out = g;
    return OG_OK;
}

og_status og_gguf_open_memory(const void *buf, size_t len, const char *name, unsigned flags,
                              og_gguf **out, char *err, size_t errlen) {
    *out = NULL;
    og_gguf *g = calloc(1, sizeof *g);
    if (!g) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    g->path = strdup(name ? name : "<memory>");
    if (!g->path) {
        free(g);
        return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    }
    g->base = buf;
    g->file_size = len;
    return finish_open(g, flags, out, err, errlen);
}

og_status og_gguf_open(const char *path, unsigned flags, og_gguf **out, char *err, size_t errlen) {
    *out = NULL;
    /* O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below). */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return og_fail(err, errlen, OG_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return og_fail(err, errlen, OG_ERR_IO, "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return og_fail(err, errlen, OG_ERR_IO, "%s: not a regular file", path);
    }
    og_gguf *g = calloc(1, sizeof *g);
    if (!g || !(g->path = strdup(path))) {
        free(g);
        close(fd);
        return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    }
    g->file_size = (uint64_t)sb.st_size;
    if (g->file_size > 0) {
        void *m = mmap(NULL, (size_t)g->file_size, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            og_gguf_close(g);
            return og_fail(err, errlen, OG_ERR_IO, "%s: cannot map %llu bytes: %s", path,
                           (unsigned long long)sb.st_size, strerror(e));
        }
        g->map = m;
        g->map_len = (size_t)g->file_size;
        g->base = m;
    } else {
        g->base = (const uint8_t *)"";
    }
    close(fd);
    return finish_open(g, flags, out, err, errlen);
}

void og_gguf_close(og_gguf *g) {
    if (!g) return;
    if (g->map) munmap(g->map, g->map_len);
    if (g->kvs) {
        for (uint64_t i = 0; i < g->n_kv; i++) free((void *)g->kvs[i].strs);
    }
    for (uint64_t i = 0; i < g->n_names; i++) free(g->names[i]);
    free(g->names);
    free(g->kvs);
    free(g->tensors);
    free(g->kv_index);
    free(g->t_index);
    free(g->path);
    free(g);
}

uint32_t og_gguf_version(const og_gguf *g) { return g->version; }
uint64_t og_gguf_n_kv(const og_gguf *g) { return g->n_kv; }
uint64_t og_gguf_n_tensors(const og_gguf *g) { return g->n_tensors; }
uint32_t og_gguf_alignment(const og_gguf *g) { return g->alignment; }
uint64_t og_gguf_data_offset(const og_gguf *g) { return g->data_offset; }
uint64_t og_gguf_file_size(const og_gguf *g) { return g->file_size; }

const og_gguf_kv *og_gguf_kv_at(const og_gguf *g, uint64_t i) {
    return i < g->n_kv ? &g->kvs[i] : NULL;
}
const og_gguf_tensor *og_gguf_tensor_at(const og_gguf *g, uint64_t i) {
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const og_gguf_kv *og_gguf_find_kv(const og_gguf *g, const char *key) {
    size_t slot = hash_slot(g->kv_index, g->kv_index_cap, key, strlen(key), kv_name_at, g);
    return g->kv_index[slot] ? &g->kvs[g->kv_index[slot] - 1] : NULL;
}
const og_gguf_tensor *og_gguf_find_tensor(const og_gguf *g, const char *name) {
    size_t slot = hash_slot(g->t_index, g->t_index_cap, name, strlen(name), tensor_name_at, g);
    return g->t_index[slot] ? &g->tensors[g->t_index[slot] - 1] : NULL;
}

/* ---- typed access -------------------------------------------------------- */

/* Element i of a numeric value as either an int (is_int) or a double. */
static og_status num_at(const og_gguf_kv *kv, uint64_t i, bool *is_int, int64_t *iv, uint64_t *uv,
                        double *dv) {
    og_gguf_vtype t = kv->type;
    const uint8_t *p = kv->data;
    if (t == OG_GGUF_ARRAY) {
        if (i >= kv->arr_n) return OG_ERR_RANGE;
        t = kv->arr_type;
        p += i * og_gguf_vtype_size(t);
    } else if (i != 0) {
        return OG_ERR_RANGE;
    }
    *is_int = true;
    *uv = 0;
    switch (t) {
    case OG_GGUF_UINT8: { uint8_t v; memcpy(&v, p, 1); *iv = v; break; }
    case OG_GGUF_INT8: { int8_t v; memcpy(&v, p, 1); *iv = v; break; }
    case OG_GGUF_UINT16: { uint16_t v; memcpy(&v, p, 2); *iv = v; break; }
    case OG_GGUF_INT16: { int16_t v; memcpy(&v, p, 2); *iv = v; break; }
    case OG_GGUF_UINT32: { uint32_t v; memcpy(&v, p, 4); *iv = v; break; }
    case OG_GGUF_INT32: { int32_t v; memcpy(&v, p, 4); *iv = v; break; }
    case OG_GGUF_INT64: { int64_t v; memcpy(&v, p, 8); *iv = v; break; }
    case OG_GGUF_UINT64: {
        uint64_t v;
        memcpy(&v, p, 8);
        *uv = v;
        *iv = v > (uint64_t)INT64_MAX ? -1 : (int64_t)v; /* -1 + uv marks "too big" */
        break;
    }
    case OG_GGUF_FLOAT32: { float v; memcpy(&v, p, 4); *dv = v; *is_int = false; return OG_OK; }
    case OG_GGUF_FLOAT64: { double v; memcpy(&v, p, 8); *dv = v; *is_int = false; return OG_OK; }
    default: return OG_ERR_TYPE;
    }
    *dv = (double)*iv;
    if (*uv) *dv = (double)*uv;
    return OG_OK;
}

og_status og_gguf_kv_num_i64(const og_gguf_kv *kv, uint64_t i, int64_t *out) {
    bool is_int;
    int64_t iv;
    uint64_t uv;
    double dv;
    og_status st = num_at(kv, i, &is_int, &iv, &uv, &dv);
    if (st) return st;
    if (!is_int) return OG_ERR_TYPE;
    if (uv > (uint64_t)INT64_MAX) return OG_ERR_RANGE;
    *out = iv;
    return OG_OK;
}

og_status og_gguf_kv_num_f64(const og_gguf_kv *kv, uint64_t i, double *out) {
    bool is_int;
    int64_t iv;
    uint64_t uv;
    return num_at(kv, i, &is_int, &iv, &uv, out);
}

og_status og_gguf_get_u64(const og_gguf *g, const char *key, uint64_t *out) {
    const og_gguf_kv *kv = og_gguf_find_kv(g, key);
    if (!kv) return OG_ERR_NOT_FOUND;
    if (kv->type == OG_GGUF_ARRAY) return OG_ERR_TYPE;
    bool is_int;
    int64_t iv;
    uint64_t uv;
    double dv;
    og_status st = num_at(kv, 0, &is_int, &iv, &uv, &dv);
    if (st) return st;
    if (!is_int) return OG_ERR_TYPE;
    if (uv) {
        *out = uv;
        return OG_OK;
    }
    if (iv < 0) return OG_ERR_RANGE;
    *out = (uint64_t)iv;
    return OG_OK;
}

og_status og_gguf_get_u32(const og_gguf *g, const char *key, uint32_t *out) {
    uint64_t v;
    og_status st = og_gguf_get_u64(g, key, &v);
    if (st) return st;
    if (v > UINT32_MAX) return OG_ERR_RANGE;
    *out = (uint32_t)v;
    return OG_OK;
}

og_status og_gguf_get_i64(const og_gguf *g, const char *key, int64_t *out) {
    const og_gguf_kv *kv = og_gguf_find_kv(g, key);
    if (!kv) return OG_ERR_NOT_FOUND;
    if (kv->type == OG_GGUF_ARRAY) return OG_ERR_TYPE;
    return og_gguf_kv_num_i64(kv, 0, out);
}

og_status og_gguf_get_f64(const og_gguf *g, const char *key, double *out) {
    const og_gguf_kv *kv = og_gguf_find_kv(g, key);
    if (!kv) return OG_ERR_NOT_FOUND;
    if (kv->type == OG_GGUF_ARRAY) return OG_ERR_TYPE;
    return og_gguf_kv_num_f64(kv, 0, out);
}

og_status og_gguf_get_f32(const og_gguf *g, const char *key, float *out) {
    double v;
    og_status st = og_gguf_get_f64(g, key, &v);
    if (st == OG_OK) *out = (float)v;
    return st;
}

og_status og_gguf_get_bool(const og_gguf *g, const char *key, bool *out) {
    const og_gguf_kv *kv = og_gguf_find_kv(g, key);
    if (!kv) return OG_ERR_NOT_FOUND;
    if (kv->type != OG_GGUF_BOOL) return OG_ERR_TYPE;
    *out = *(const uint8_t *)kv->data != 0;
    return OG_OK;
}

og_status og_gguf_get_str(const og_gguf *g, const char *key, og_str *out) {
    const og_gguf_kv *kv = og_gguf_find_kv(g, key);
    if (!kv) return OG_ERR_NOT_FOUND;
    if (kv->type != OG_GGUF_STRING) return OG_ERR_TYPE;
    *out = kv->str;
    return OG_OK;
}

og_status og_gguf_get_cstr(const og_gguf *g, const char *key, char *buf, size_t buflen) {
    og_str s;
    og_status st = og_gguf_get_str(g, key, &s);
    if (st) return st;
    if (buflen == 0) return OG_ERR_INVALID_ARG;
    size_t n = s.n < buflen - 1 ? (size_t)s.n : buflen - 1;
    memcpy(buf, s.s, n);
    buf[n] = '\0';
    return OG_OK;
}
