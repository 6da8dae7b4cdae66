/* GGUF reader: every structure is validated against the bytes actually present
 * (gguf.md §4) before anything is allocated for it, so a hostile file costs at
 * most a small multiple of its header size in memory and never crashes.
 *
 * Header-only mode reads the header with pread into a buffer that grows until
 * the header fits, and never maps the file: a file that shrinks while it is read
 * gives an error, not SIGBUS. Full mode maps the whole file (tensor data is used
 * in place); a file truncated by someone else while mapped can still fault, as
 * with any mmap-based loader. */
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
#define HEADER_FIRST_READ (4u << 20)       /* header-only: first read, then x4 */
#define PART_FIRST_READ (64u << 10)        /* the same for a later part of a split model:
                                            * its header holds only the split keys and its
                                            * tensor infos, and the buffer lives as long as
                                            * the model */
#define HEADER_MAX_BYTES (4ull << 30)      /* header-only: give up beyond this */
#define NAME_BLOCK_BYTES 65536

typedef struct name_block {
    struct name_block *next;
    size_t used;
    char data[];
} name_block;

struct og_gguf {
    char *path;              /* for messages */
    const uint8_t *base;     /* start of the bytes in memory */
    uint64_t avail;          /* bytes at base (all of them in full mode) */
    uint64_t file_size;      /* bytes in the file */
    void *map;               /* mmap'ed region (full mode) */
    size_t map_len;
    uint8_t *buf;            /* pread buffer (header-only mode) */
    bool short_read;         /* parse stopped at the end of a partial buffer */
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;    /* file offset of tensor data */
    uint64_t n_kv, n_tensors;        /* as the header claims */
    og_gguf_kv *kvs;                 /* [n_kv] once parsed */
    og_gguf_tensor *tensors;         /* [n_tensors] once parsed */
    uint64_t *info_off;              /* file offset of each tensor info */
    name_block *names;               /* NUL-terminated copies of keys and names */
    size_t *kv_index, *t_index;      /* open addressing: slot -> index + 1 */
    size_t kv_index_cap, t_index_cap;
    uint64_t hash_key[2];            /* SipHash key, random per open */
    /* Split model (gguf.md §7.4): this og_gguf is part 0 and tensors[] holds every
     * part's tensors; parts[k] (1 <= k < n_parts) are the others, each a complete
     * og_gguf whose names and mappings the merged table points into. */
    uint32_t n_parts;                /* 0 until joined: a single file */
    og_gguf **parts;                 /* [n_parts]; parts[0] unused */
    og_gguf_part *part_info;         /* [n_parts] */
};

/* Parsing cursor over the bytes in memory; every read is bounds-checked. */
typedef struct cursor {
    og_gguf *g;
    uint64_t off;
    char *err;
    size_t errlen;
} cursor;

/* A name from the file as it may appear in a message: escaped and bounded. */
#define SAFE(buf, s) og_printable((s), strlen(s), (buf), sizeof(buf))

static og_status cfail(const cursor *c, uint64_t off, og_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static og_status cfail(const cursor *c, uint64_t off, og_status st, const char *fmt, ...) {
    if (c->err && c->errlen) {
        char what[768], path[256];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(what, sizeof what, fmt, ap);
        va_end(ap);
        size_t pl = strlen(c->g->path);
        const char *p = pl > 200 ? c->g->path + pl - 200 : c->g->path; /* keep the tail of a long path */
        og_printable(p, strlen(p), path, sizeof path);
        snprintf(c->err, c->errlen, "%s%s: offset %llu: %s", pl > 200 ? "..." : "", path,
                 (unsigned long long)off, what);
    }
    return st;
}

static uint64_t remaining(const cursor *c) { return c->g->avail - c->off; }

static og_status need(cursor *c, uint64_t n, const char *what) {
    if (remaining(c) >= n) return OG_OK;
    if (c->g->avail < c->g->file_size) {
        c->g->short_read = true; /* read more of the file and parse again */
        return OG_ERR_FORMAT;
    }
    return cfail(c, c->off, OG_ERR_FORMAT, "file ends inside %s (needs %llu bytes, %llu left): truncated header",
                 what, (unsigned long long)n, (unsigned long long)remaining(c));
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

/* Reads a GGUF string (u64 length + bytes) as a view into the buffer. */
static og_status rd_str(cursor *c, og_str *s, uint64_t max_len, const char *what) {
    uint64_t at = c->off;
    uint64_t n;
    og_status st = rd_u64(c, &n, what);
    if (st) return st;
    if (n > max_len)
        return cfail(c, at, OG_ERR_FORMAT, "%s length %llu exceeds the limit of %llu bytes", what,
                     (unsigned long long)n, (unsigned long long)max_len);
    if (n > c->g->file_size - c->off)
        return cfail(c, at, OG_ERR_FORMAT, "%s length %llu runs past the end of the file (%llu bytes left)", what,
                     (unsigned long long)n, (unsigned long long)(c->g->file_size - c->off));
    if ((st = need(c, n, what))) return st;
    s->s = (const char *)c->g->base + c->off;
    s->n = n;
    c->off += n;
    return OG_OK;
}

/* Keeps a NUL-terminated copy of s in the name arena; copies never move. */
static og_status keep_name(og_gguf *g, og_str s, const char **out) {
    size_t need_bytes = (size_t)s.n + 1;
    name_block *b = g->names;
    if (!b || b->used + need_bytes > NAME_BLOCK_BYTES) {
        size_t cap = need_bytes > NAME_BLOCK_BYTES ? need_bytes : NAME_BLOCK_BYTES;
        name_block *nb = malloc(sizeof *nb + cap);
        if (!nb) return OG_ERR_NOMEM;
        nb->next = g->names;
        nb->used = 0;
        g->names = b = nb;
    }
    char *copy = b->data + b->used;
    memcpy(copy, s.s, (size_t)s.n);
    copy[s.n] = '\0';
    b->used += need_bytes;
    *out = copy;
    return OG_OK;
}

/* Grows *arr (of elem bytes each) to hold at least n; doubling keeps the total
 * proportional to what the file really contains, whatever its header claims. */
static og_status grow(void **arr, uint64_t *cap, uint64_t n, size_t elem) {
    if (n <= *cap) return OG_OK;
    uint64_t nc = *cap ? *cap * 2 : 64;
    while (nc < n) nc *= 2;
    void *p = realloc(*arr, (size_t)(nc * elem));
    if (!p) return OG_ERR_NOMEM;
    memset((uint8_t *)p + *cap * elem, 0, (size_t)((nc - *cap) * elem));
    *arr = p;
    *cap = nc;
    return OG_OK;
}

/* ---- name -> index hash tables ------------------------------------------ */

typedef const char *(*name_at_fn)(const og_gguf *, size_t);
static const char *kv_name_at(const og_gguf *g, size_t i) { return g->kvs[i].key; }
static const char *tensor_name_at(const og_gguf *g, size_t i) { return g->tensors[i].name; }

/* Slot holding `name`, or the empty slot where it would go. */
static size_t hash_slot(const og_gguf *g, const size_t *index, size_t cap, const char *name, name_at_fn name_at) {
    size_t mask = cap - 1;
    size_t h = (size_t)og_siphash13(g->hash_key, name, strlen(name)) & mask;
    while (index[h]) {
        if (strcmp(name_at(g, index[h] - 1), name) == 0) break;
        h = (h + 1) & mask;
    }
    return h;
}

/* Builds the index over n names; on a duplicate returns its position in *dup. */
static og_status build_index(og_gguf *g, uint64_t n, name_at_fn name_at, size_t **index, size_t *cap, uint64_t *dup) {
    size_t c = 16;
    while (c < n * 2) c <<= 1;
    *index = calloc(c, sizeof **index);
    if (!*index) return OG_ERR_NOMEM;
    *cap = c;
    for (uint64_t i = 0; i < n; i++) {
        size_t slot = hash_slot(g, *index, c, name_at(g, (size_t)i), name_at);
        if ((*index)[slot]) {
            *dup = i;
            return OG_ERR_FORMAT;
        }
        (*index)[slot] = (size_t)i + 1;
    }
    return OG_OK;
}

/* ---- metadata values ---------------------------------------------------- */

static og_status read_kv_value(cursor *c, og_gguf_kv *kv) {
    char kn[128];
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
            return cfail(c, c->off, OG_ERR_FORMAT, "bool value of key '%s' is %u, not 0 or 1", SAFE(kn, kv->key),
                         c->g->base[c->off]);
        c->off += sz;
        return OG_OK;
    }
    /* ARRAY: element type, count, elements. */
    uint64_t at = c->off;
    uint32_t et;
    og_status st = rd_u32(c, &et, "array element type");
    if (st) return st;
    if (et >= OG_GGUF_VTYPE_COUNT)
        return cfail(c, at, OG_ERR_FORMAT, "array '%s' has unknown element type %u", SAFE(kn, kv->key), et);
    if (et == OG_GGUF_ARRAY)
        return cfail(c, at, OG_ERR_FORMAT, "array '%s' contains arrays (nested arrays are not allowed)",
                     SAFE(kn, kv->key));
    uint64_t n;
    if ((st = rd_u64(c, &n, "array length"))) return st;
    if (n > GGUF_MAX_ARRAY_ELEMS)
        return cfail(c, at + 4, OG_ERR_FORMAT, "array '%s' claims %llu elements (limit %llu)", SAFE(kn, kv->key),
                     (unsigned long long)n, (unsigned long long)GGUF_MAX_ARRAY_ELEMS);
    kv->arr_type = (og_gguf_vtype)et;
    kv->arr_n = n;
    kv->data = c->g->base + c->off;
    if (et != OG_GGUF_STRING) {
        uint64_t bytes = n * og_gguf_vtype_size(et); /* n <= 2^30, size <= 8 */
        if (bytes > c->g->file_size - c->off)
            return cfail(c, at + 4, OG_ERR_FORMAT, "array '%s' of %llu %s values needs %llu bytes but only %llu remain",
                         SAFE(kn, kv->key), (unsigned long long)n, og_gguf_vtype_name(et), (unsigned long long)bytes,
                         (unsigned long long)(c->g->file_size - c->off));
        if ((st = need(c, bytes, "array"))) return st;
        if (et == OG_GGUF_BOOL) {
            for (uint64_t i = 0; i < n; i++)
                if (c->g->base[c->off + i] > 1)
                    return cfail(c, c->off + i, OG_ERR_FORMAT, "bool element %llu of '%s' is not 0 or 1",
                                 (unsigned long long)i, SAFE(kn, kv->key));
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
    og_str *strs = n ? malloc((size_t)n * sizeof *strs) : NULL;
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
    char tn[128];
    uint64_t at = c->off;
    og_str name;
    og_status st = rd_str(c, &name, UINT64_MAX, "tensor name");
    if (st) return st;
    if (name.n == 0) return cfail(c, at, OG_ERR_FORMAT, "tensor %llu has an empty name", (unsigned long long)idx);
    if (name.n > GGUF_MAX_NAME_BYTES)
        return cfail(c, at, OG_ERR_FORMAT, "tensor %llu name is %llu bytes (at most %u allowed)",
                     (unsigned long long)idx, (unsigned long long)name.n, GGUF_MAX_NAME_BYTES);
    if (memchr(name.s, '\0', (size_t)name.n))
        return cfail(c, at, OG_ERR_FORMAT, "tensor %llu name contains a NUL byte", (unsigned long long)idx);
    if ((st = keep_name(c->g, name, &t->name))) return st;
    SAFE(tn, t->name);

    uint32_t n_dims;
    if ((st = rd_u32(c, &n_dims, "tensor dimension count"))) return st;
    if (n_dims > 4)
        return cfail(c, c->off - 4, OG_ERR_FORMAT, "tensor '%s' has %u dimensions (at most 4)", tn, n_dims);
    t->n_dims = n_dims;
    uint64_t nelem = 1;
    for (int d = 0; d < 4; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        uint64_t v;
        if ((st = rd_u64(c, &v, "tensor dimension"))) return st;
        if (v > (uint64_t)INT64_MAX)
            return cfail(c, c->off - 8, OG_ERR_FORMAT, "tensor '%s' dimension %u is negative (%lld)", tn, d,
                         (long long)v);
        if (!og_mul_u64(nelem, v, &nelem) || nelem > (uint64_t)INT64_MAX)
            return cfail(c, c->off - 8, OG_ERR_FORMAT, "tensor '%s' element count overflows 64 bits", tn);
        t->ne[d] = (int64_t)v;
    }
    uint32_t type;
    uint64_t type_at = c->off;
    if ((st = rd_u32(c, &type, "tensor type"))) return st;
    const og_type_size *ts = og_type_size_of(type);
    if (!ts) return cfail(c, type_at, OG_ERR_FORMAT, "tensor '%s' has unknown or removed ggml type id %u", tn, type);
    t->type = (og_ggml_type)type;
    if (t->ne[0] % ts->blck != 0)
        return cfail(c, type_at, OG_ERR_FORMAT, "tensor '%s': row length %lld is not a multiple of the %s block size %u",
                     tn, (long long)t->ne[0], ts->name, ts->blck);
    uint64_t row, bytes = 0;
    if (og_row_bytes(type, (uint64_t)t->ne[0], &row) != OG_OK || !og_mul_u64(row, (uint64_t)t->ne[1], &bytes) ||
        !og_mul_u64(bytes, (uint64_t)t->ne[2], &bytes) || !og_mul_u64(bytes, (uint64_t)t->ne[3], &bytes))
        return cfail(c, type_at, OG_ERR_FORMAT, "tensor '%s' byte size overflows 64 bits", tn);
    t->n_bytes = bytes;
    return rd_u64(c, &t->offset, "tensor offset");
}

static int cmp_by_offset(const void *a, const void *b, void *ctx) {
    const og_gguf_tensor *ts = ctx;
    uint64_t oa = ts[*(const uint64_t *)a].offset, ob = ts[*(const uint64_t *)b].offset;
    return oa < ob ? -1 : oa > ob;
}

/* Offsets: aligned, inside the file, and non-overlapping. ggml additionally
 * demands the exact packed layout; we accept any valid one (tolerant reader). */
static og_status check_tensor_offsets(cursor *c) {
    og_gguf *g = c->g;
    char tn[128], tn2[128];
    uint64_t packed = 0; /* where a standard writer puts this tensor (gguf.md §3) */
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        og_gguf_tensor *t = &g->tensors[i];
        SAFE(tn, t->name);
        if (t->offset % g->alignment != 0)
            return cfail(c, g->info_off[i], OG_ERR_FORMAT, "tensor '%s' offset %llu is not a multiple of the alignment %u",
                         tn, (unsigned long long)t->offset, g->alignment);
        uint64_t start, end;
        bool ok = og_add_u64(g->data_offset, t->offset, &start) && og_add_u64(start, t->n_bytes, &end);
        if (!ok || end > g->file_size) {
            /* At its standard packed place, the tensor is missing because the file
             * is short; anywhere else, the offset itself is wrong. */
            if (ok && t->offset == packed)
                return cfail(c, g->info_off[i], OG_ERR_FORMAT,
                             "tensor '%s' data ends at byte %llu but the file has only %llu bytes: "
                             "the file is truncated (interrupted download?)",
                             tn, (unsigned long long)end, (unsigned long long)g->file_size);
            return cfail(c, g->info_off[i], OG_ERR_FORMAT,
                         "tensor '%s' offset %llu (+%llu bytes) points outside the file (%llu bytes)", tn,
                         (unsigned long long)t->offset, (unsigned long long)t->n_bytes,
                         (unsigned long long)g->file_size);
        }
        uint64_t padded;
        if (og_align_up_u64(t->n_bytes, g->alignment, &padded)) og_add_u64(packed, padded, &packed);
    }
    if (g->n_tensors < 2) return OG_OK;
    uint64_t *order = malloc((size_t)g->n_tensors * sizeof *order);
    if (!order) return OG_ERR_NOMEM;
    for (uint64_t i = 0; i < g->n_tensors; i++) order[i] = i;
    qsort_r(order, (size_t)g->n_tensors, sizeof *order, cmp_by_offset, g->tensors);
    /* Sweep in offset order keeping the furthest end seen so far: an overlap is
     * caught even when empty tensors sit between the two. */
    og_status st = OG_OK;
    uint64_t max_end = 0, max_owner = UINT64_MAX;
    for (uint64_t k = 0; k < g->n_tensors; k++) {
        const og_gguf_tensor *b = &g->tensors[order[k]];
        if (b->n_bytes == 0) continue;
        if (max_owner != UINT64_MAX && b->offset < max_end) {
            const og_gguf_tensor *a = &g->tensors[max_owner];
            st = cfail(c, g->info_off[order[k]], OG_ERR_FORMAT,
                       "tensor '%s' data (offset %llu) overlaps tensor '%s' (offset %llu, %llu bytes)", SAFE(tn, b->name),
                       (unsigned long long)b->offset, SAFE(tn2, a->name), (unsigned long long)a->offset,
                       (unsigned long long)a->n_bytes);
            break;
        }
        if (b->offset + b->n_bytes > max_end) {
            max_end = b->offset + b->n_bytes;
            max_owner = order[k];
        }
    }
    free(order);
    return st;
}

/* ---- whole header ------------------------------------------------------- */

static void reset_parse(og_gguf *g) {
    if (g->kvs)
        for (uint64_t i = 0; i < g->n_kv; i++) free((void *)g->kvs[i].strs);
    free(g->kvs);
    free(g->tensors);
    free(g->info_off);
    free(g->kv_index);
    free(g->t_index);
    g->kvs = NULL;
    g->tensors = NULL;
    g->info_off = NULL;
    g->kv_index = g->t_index = NULL;
    while (g->names) {
        name_block *n = g->names->next;
        free(g->names);
        g->names = n;
    }
    g->short_read = false;
}

static og_status parse(og_gguf *g, unsigned flags, char *err, size_t errlen) {
    cursor c = {.g = g, .off = 0, .err = err, .errlen = errlen};
    char kn[128];
    og_status st;
    if (g->file_size < 4 || memcmp(g->base, GGUF_MAGIC, 4) != 0) {
        if (g->file_size == 0) return cfail(&c, 0, OG_ERR_FORMAT, "empty file, not a GGUF model");
        return cfail(&c, 0, OG_ERR_FORMAT, "bad magic: not a GGUF file (expected 'GGUF' at the start)");
    }
    c.off = 4;
    if ((st = rd_u32(&c, &g->version, "version"))) return st;
    if (g->version != 0 && (g->version & 0xFFFF) == 0)
        return cfail(&c, 4, OG_ERR_UNSUPPORTED, "version field 0x%08x looks byte-swapped: big-endian GGUF is not supported",
                     g->version);
    if (g->version == 1)
        return cfail(&c, 4, OG_ERR_UNSUPPORTED, "GGUF version 1 (32-bit counts) is not supported; convert the model again");
    if (g->version != 2 && g->version != 3)
        return cfail(&c, 4, OG_ERR_UNSUPPORTED, "unsupported GGUF version %u (supported: 2, 3)", g->version);
    if ((st = rd_u64(&c, &g->n_tensors, "tensor count"))) return st;
    if ((st = rd_u64(&c, &g->n_kv, "metadata count"))) return st;
    /* The smallest KV record is 13 bytes and the smallest tensor info 25; counts
     * the file cannot possibly hold are refused outright. */
    uint64_t left = g->file_size - c.off;
    if (g->n_kv > left / 13)
        return cfail(&c, 16, OG_ERR_FORMAT, "metadata count %llu is impossible for a %llu-byte file",
                     (unsigned long long)g->n_kv, (unsigned long long)g->file_size);
    if (g->n_tensors > left / 25)
        return cfail(&c, 8, OG_ERR_FORMAT, "tensor count %llu is impossible for a %llu-byte file",
                     (unsigned long long)g->n_tensors, (unsigned long long)g->file_size);

    uint64_t cap = 0;
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        if ((st = grow((void **)&g->kvs, &cap, i + 1, sizeof *g->kvs))) return st;
        og_gguf_kv *kv = &g->kvs[i];
        uint64_t at = c.off;
        kv->file_offset = at;
        og_str key;
        if ((st = rd_str(&c, &key, GGUF_MAX_KEY_BYTES, "metadata key"))) goto kv_fail;
        if (key.n == 0) {
            st = cfail(&c, at, OG_ERR_FORMAT, "metadata key %llu is empty", (unsigned long long)i);
            goto kv_fail;
        }
        if (memchr(key.s, '\0', (size_t)key.n)) {
            st = cfail(&c, at, OG_ERR_FORMAT, "metadata key %llu contains a NUL byte", (unsigned long long)i);
            goto kv_fail;
        }
        if ((st = keep_name(g, key, &kv->key))) goto kv_fail;
        uint32_t vt;
        uint64_t vt_at = c.off;
        if ((st = rd_u32(&c, &vt, "value type"))) goto kv_fail;
        if (vt >= OG_GGUF_VTYPE_COUNT) {
            st = cfail(&c, vt_at, OG_ERR_FORMAT, "key '%s' has unknown value type %u", SAFE(kn, kv->key), vt);
            goto kv_fail;
        }
        kv->type = (og_gguf_vtype)vt;
        if ((st = read_kv_value(&c, kv))) goto kv_fail;
        if (strcmp(kv->key, "general.alignment") == 0) {
            if (kv->type != OG_GGUF_UINT32) {
                st = cfail(&c, at, OG_ERR_FORMAT, "general.alignment must be uint32, not %s", og_gguf_vtype_name(kv->type));
                goto kv_fail;
            }
            uint32_t a;
            memcpy(&a, kv->data, 4);
            if (a == 0 || (a & (a - 1)) != 0) {
                st = cfail(&c, at, OG_ERR_FORMAT, "general.alignment %u is not a non-zero power of two", a);
                goto kv_fail;
            }
            if (a < 4) { /* legal GGUF, but onegpu's kernels read f32 and fp16 fields in place */
                st = cfail(&c, at, OG_ERR_UNSUPPORTED,
                           "general.alignment %u: onegpu needs tensor data aligned to at least 4 bytes "
                           "(re-save the file with the default alignment, 32)", a);
                goto kv_fail;
            }
            g->alignment = a;
        }
        continue;
    kv_fail:
        g->n_kv = i + 1; /* what exists, for cleanup */
        return st;
    }
    uint64_t dup;
    if ((st = build_index(g, g->n_kv, kv_name_at, &g->kv_index, &g->kv_index_cap, &dup)))
        return st == OG_ERR_FORMAT ? cfail(&c, g->kvs[dup].file_offset, OG_ERR_FORMAT, "duplicate metadata key '%s'",
                                           SAFE(kn, g->kvs[dup].key))
                                   : st;

    cap = 0;
    uint64_t cap_off = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        if ((st = grow((void **)&g->tensors, &cap, i + 1, sizeof *g->tensors)) ||
            (st = grow((void **)&g->info_off, &cap_off, i + 1, sizeof *g->info_off)))
            return st;
        g->info_off[i] = c.off;
        if ((st = read_tensor_info(&c, &g->tensors[i], i))) return st;
    }
    if ((st = build_index(g, g->n_tensors, tensor_name_at, &g->t_index, &g->t_index_cap, &dup)))
        return st == OG_ERR_FORMAT ? cfail(&c, g->info_off[dup], OG_ERR_FORMAT, "duplicate tensor name '%s'",
                                           SAFE(kn, g->tensors[dup].name))
                                   : st;
    g->data_offset = c.off;
    if (g->n_tensors > 0) {
        og_align_up_u64(c.off, g->alignment, &g->data_offset);
        if (g->data_offset > g->file_size)
            return cfail(&c, c.off, OG_ERR_FORMAT, "file ends before the data section (at %llu): truncated after the header",
                         (unsigned long long)g->data_offset);
    }
    if ((st = check_tensor_offsets(&c))) return st;
    if (!(flags & OG_GGUF_HEADER_ONLY))
        for (uint64_t i = 0; i < g->n_tensors; i++) g->tensors[i].data = g->base + g->data_offset + g->tensors[i].offset;
    return OG_OK;
}

static og_gguf *new_gguf(const char *name) {
    og_gguf *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->path = strdup(name);
    if (!g->path) {
        free(g);
        return NULL;
    }
    og_random_key(g->hash_key);
    return g;
}

static og_status finish(og_gguf *g, og_status st, og_gguf **out, char *err, size_t errlen) {
    if (st == OG_ERR_NOMEM) og_fail(err, errlen, st, "%s: out of memory while reading the header", g->path);
    if (st) {
        og_gguf_close(g);
        return st;
    }
    *out = g;
    return OG_OK;
}

/* ---- split models (gguf.md §7.4) ----------------------------------------- */

/* The split.* keys of one file; present is false when it has no split.count. */
typedef struct split_keys {
    bool present;
    uint32_t no, count;         /* split.no (0-based), split.count */
    bool has_total;
    uint64_t total;             /* split.tensors.count */
} split_keys;

/* A path from the command line or derived from one, as it may appear inside a
 * message: escaped and bounded (buf of 256 bytes). */
#define SAFEP(buf, p) og_printable((p), strlen(p), (buf), sizeof(buf))

/* A message naming the file: "<path>: <what>" (path escaped, long ones cut). */
static og_status pfail(const char *path, char *err, size_t errlen, og_status st, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static og_status pfail(const char *path, char *err, size_t errlen, og_status st, const char *fmt, ...) {
    if (err && errlen) {
        char what[768], pp[256];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(what, sizeof what, fmt, ap);
        va_end(ap);
        size_t pl = strlen(path);
        const char *p = pl > 200 ? path + pl - 200 : path;
        og_printable(p, strlen(p), pp, sizeof pp);
        snprintf(err, errlen, "%s%s: %s", pl > 200 ? "..." : "", pp, what);
    }
    return st;
}

/* One split key as an integer in [0, max]; any integer type is taken (files in
 * the wild vary, gguf.md §2), gguf-split writes u16, u16 and i32. */
static og_status split_key(const og_gguf *g, const char *key, uint64_t max, bool *present, uint64_t *v, char *err,
                           size_t errlen) {
    const og_gguf_kv *kv = og_gguf_find_kv(g, key);
    *present = kv != NULL;
    if (!kv) return OG_OK;
    int64_t x;
    if (kv->type == OG_GGUF_ARRAY || og_gguf_kv_num_i64(kv, 0, &x) != OG_OK)
        return pfail(g->path, err, errlen, OG_ERR_FORMAT, "%s has type %s, not an integer", key,
                     og_gguf_vtype_name(kv->type));
    if (x < 0 || (uint64_t)x > max)
        return pfail(g->path, err, errlen, OG_ERR_FORMAT, "%s is %lld, outside 0..%llu", key, (long long)x,
                     (unsigned long long)max);
    *v = (uint64_t)x;
    return OG_OK;
}

static og_status read_split_keys(const og_gguf *g, split_keys *s, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    bool has_no, has_count;
    uint64_t no = 0, count = 0;
    og_status st;
    if ((st = split_key(g, "split.no", UINT16_MAX, &has_no, &no, err, errlen)) ||
        (st = split_key(g, "split.count", UINT16_MAX, &has_count, &count, err, errlen)) ||
        (st = split_key(g, "split.tensors.count", INT32_MAX, &s->has_total, &s->total, err, errlen)))
        return st;
    if (!has_count) {
        if (has_no && no > 0)
            return pfail(g->path, err, errlen, OG_ERR_FORMAT, "split.no is %llu but split.count is missing",
                         (unsigned long long)no);
        return OG_OK;
    }
    if (count == 0) return OG_OK; /* gguf-split --merge writes split.count 0 into the merged file */
    if (!has_no && count > 1)
        return pfail(g->path, err, errlen, OG_ERR_FORMAT, "split.count is %llu but split.no is missing",
                     (unsigned long long)count);
    if (no >= count)
        return pfail(g->path, err, errlen, OG_ERR_FORMAT, "split.no %llu is not below split.count %llu",
                     (unsigned long long)no, (unsigned long long)count);
    s->present = true;
    s->no = (uint32_t)no;
    s->count = (uint32_t)count;
    return OG_OK;
}

og_status og_gguf_split_path(const char *prefix, uint32_t k, uint32_t n, char *buf, size_t buflen) {
    if (k >= n) return OG_ERR_RANGE;
    int w = snprintf(buf, buflen, "%s-%05u-of-%05u.gguf", prefix, k + 1, n);
    return w < 0 || (size_t)w >= buflen ? OG_ERR_RANGE : OG_OK;
}

/* The prefix of a part's path when it ends in -%05u-of-%05u.gguf for part k of n;
 * false when the name is not a gguf-split name for that place. */
static bool split_prefix_of(const char *path, uint32_t k, uint32_t n, char *prefix, size_t prefix_len) {
    char tail[48];
    snprintf(tail, sizeof tail, "-%05u-of-%05u.gguf", k + 1, n);
    size_t pl = strlen(path), tl = strlen(tail);
    if (pl <= tl || strcmp(path + pl - tl, tail) != 0 || pl - tl >= prefix_len) return false;
    memcpy(prefix, path, pl - tl);
    prefix[pl - tl] = '\0';
    return true;
}

/* Two values of the same key stored identically (type and bytes). */
static bool same_kv(const og_gguf_kv *a, const og_gguf_kv *b) {
    if (a->type != b->type) return false;
    if (a->type == OG_GGUF_STRING) return a->str.n == b->str.n && memcmp(a->str.s, b->str.s, (size_t)a->str.n) == 0;
    if (a->type != OG_GGUF_ARRAY) return memcmp(a->data, b->data, og_gguf_vtype_size(a->type)) == 0;
    if (a->arr_type != b->arr_type || a->arr_n != b->arr_n) return false;
    if (a->arr_type != OG_GGUF_STRING)
        return memcmp(a->data, b->data, (size_t)(a->arr_n * og_gguf_vtype_size(a->arr_type))) == 0;
    for (uint64_t i = 0; i < a->arr_n; i++)
        if (a->strs[i].n != b->strs[i].n || memcmp(a->strs[i].s, b->strs[i].s, (size_t)a->strs[i].n) != 0)
            return false;
    return true;
}

static void fill_part_info(const og_gguf *g, og_gguf_part *p) {
    *p = (og_gguf_part){g->path, g->file_size, g->data_offset, g->n_tensors, g->alignment};
}

static og_status open_file(const char *path, unsigned flags, uint64_t first_read, og_gguf **out, char *err,
                           size_t errlen);

/* Part k (1 <= k < n) of the split model whose first part is g: opened, and its
 * split keys and metadata checked against the first part's. */
static og_status open_part(og_gguf *g, const split_keys *s0, const char *prefix, uint32_t k, unsigned flags,
                           og_gguf **out, char *err, size_t errlen) {
    char path[4096], inner[1024], first[256];
    *out = NULL;
    SAFEP(first, g->path);
    if (og_gguf_split_path(prefix, k, s0->count, path, sizeof path))
        return pfail(g->path, err, errlen, OG_ERR_RANGE, "the path of part %u is too long", k + 1);
    og_gguf *p;
    og_status st = open_file(path, flags, PART_FIRST_READ, &p, inner, sizeof inner);
    if (st) {
        if (err && errlen)
            snprintf(err, errlen, "%s (part %u of %u of the split model %s%s)", inner, k + 1, s0->count, first,
                     st == OG_ERR_IO ? ": every part must be next to the first" : "");
        return st;
    }
    split_keys s;
    if ((st = read_split_keys(p, &s, err, errlen))) goto fail;
    if (!s.present) {
        st = pfail(path, err, errlen, OG_ERR_FORMAT,
                   "is not a part of a split model (split.count absent or 0), but its name makes it part %u of %u "
                   "of %s", k + 1, s0->count, first);
        goto fail;
    }
    if (s.count != s0->count) {
        st = pfail(path, err, errlen, OG_ERR_FORMAT,
                   "split.count is %u but the first part (%s) says %u: the parts are from different split sets",
                   s.count, first, s0->count);
        goto fail;
    }
    if (s.no != k) {
        st = pfail(path, err, errlen, OG_ERR_FORMAT,
                   "split.no is %u (part %u) but its name makes it part %u (split.no %u): a part is duplicated, "
                   "renamed or out of order", s.no, s.no + 1, k + 1, k);
        goto fail;
    }
    if (s.has_total != s0->has_total || s.total != s0->total) {
        char a[32] = "absent", b[32] = "absent";
        if (s.has_total) snprintf(a, sizeof a, "%llu", (unsigned long long)s.total);
        if (s0->has_total) snprintf(b, sizeof b, "%llu", (unsigned long long)s0->total);
        st = pfail(path, err, errlen, OG_ERR_FORMAT,
                   "split.tensors.count is %s but the first part (%s) says %s: the parts come from different models", a,
                   first, b);
        goto fail;
    }
    /* gguf-split writes only the split keys into later parts; any other key
     * the first part also has must agree (general.architecture, general.name).
     * The split keys were compared by value above; each file has its own
     * alignment. */
    for (uint64_t i = 0; i < p->n_kv; i++) {
        const og_gguf_kv *kv = &p->kvs[i];
        if (!strncmp(kv->key, "split.", 6) || !strcmp(kv->key, "general.alignment")) continue;
        const og_gguf_kv *k0 = og_gguf_find_kv(g, kv->key);
        if (k0 && !same_kv(kv, k0)) {
            char kn[128];
            st = pfail(path, err, errlen, OG_ERR_FORMAT,
                       "metadata key '%s' differs from the first part's (%s): the parts come from different models",
                       SAFE(kn, kv->key), first);
            goto fail;
        }
    }
    *out = p;
    return OG_OK;
fail:
    og_gguf_close(p);
    return st;
}

/* Merges every part's tensors into g's table (part order, then file order). */
static og_status merge_tensors(og_gguf *g, char *err, size_t errlen) {
    uint64_t total = g->n_tensors;
    for (uint32_t k = 1; k < g->n_parts; k++) total += g->parts[k]->n_tensors; /* each <= its file size / 25 */
    og_gguf_tensor *all = malloc((size_t)(total ? total : 1) * sizeof *all);
    if (!all) return OG_ERR_NOMEM;
    uint64_t n = 0;
    for (uint32_t k = 0; k < g->n_parts; k++) {
        const og_gguf *p = k ? g->parts[k] : g;
        for (uint64_t i = 0; i < p->n_tensors; i++) {
            all[n] = p->tensors[i];
            all[n++].part = k;
        }
    }
    free(g->tensors);
    free(g->t_index);
    g->t_index = NULL;
    g->tensors = all;
    g->n_tensors = total;
    uint64_t dup;
    og_status st = build_index(g, total, tensor_name_at, &g->t_index, &g->t_index_cap, &dup);
    if (st != OG_ERR_FORMAT) return st;
    uint64_t first = 0;
    while (first < dup && strcmp(all[first].name, all[dup].name) != 0) first++;
    char tn[128], other[256];
    return pfail(g->part_info[all[dup].part].path, err, errlen, OG_ERR_FORMAT,
                 "tensor '%s' is also in %s: a tensor in two parts (parts of different split sets?)",
                 SAFE(tn, all[dup].name), SAFEP(other, g->part_info[all[first].part].path));
}

/* After part 0 parsed: a single file stays as it is; the first part of a split
 * model opens and joins the rest; a later part is refused. */
static og_status join_parts(og_gguf *g, bool from_file, unsigned flags, char *err, size_t errlen) {
    split_keys s0;
    og_status st = read_split_keys(g, &s0, err, errlen);
    if (st || !s0.present) return st;
    char prefix[4096];
    bool named = split_prefix_of(g->path, s0.no, s0.count, prefix, sizeof prefix);
    if (s0.no != 0) {
        char first[4096], fp[256];
        if (named && og_gguf_split_path(prefix, 0, s0.count, first, sizeof first) == OG_OK)
            return pfail(g->path, err, errlen, OG_ERR_INVALID_ARG,
                         "this is part %u of %u of a split model; give the first part, %s", s0.no + 1, s0.count,
                         SAFEP(fp, first));
        return pfail(g->path, err, errlen, OG_ERR_INVALID_ARG,
                     "this is part %u of %u of a split model; give the first part (split.no 0, named ...-00001-of-%05u.gguf)",
                     s0.no + 1, s0.count, s0.count);
    }
    if (s0.count > 1 && !from_file)
        return pfail(g->path, err, errlen, OG_ERR_UNSUPPORTED,
                     "part 1 of %u of a split model: open it from its file so that the other parts can be read",
                     s0.count);
    if (s0.count > 1 && !named)
        return pfail(g->path, err, errlen, OG_ERR_FORMAT,
                     "part 1 of a model split into %u files, but its name does not end in -00001-of-%05u.gguf, so the "
                     "other parts cannot be found (give the files their gguf-split names)", s0.count, s0.count);
    g->parts = calloc(s0.count, sizeof *g->parts);
    g->part_info = calloc(s0.count, sizeof *g->part_info);
    if (!g->parts || !g->part_info) return OG_ERR_NOMEM;
    g->n_parts = s0.count;
    fill_part_info(g, &g->part_info[0]);
    for (uint32_t k = 1; k < s0.count; k++) {
        if ((st = open_part(g, &s0, prefix, k, flags, &g->parts[k], err, errlen))) return st;
        fill_part_info(g->parts[k], &g->part_info[k]);
    }
    if ((st = merge_tensors(g, err, errlen))) return st;
    if (s0.has_total && g->n_tensors != s0.total)
        return pfail(g->path, err, errlen, OG_ERR_FORMAT,
                     "the %u parts hold %llu tensors but split.tensors.count is %llu: a part is incomplete or from "
                     "another model", s0.count, (unsigned long long)g->n_tensors, (unsigned long long)s0.total);
    return OG_OK;
}

og_status og_gguf_open_memory(const void *buf, size_t len, const char *name, unsigned flags, og_gguf **out,
                              char *err, size_t errlen) {
    *out = NULL;
    og_gguf *g = new_gguf(name ? name : "<memory>");
    if (!g) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    g->base = buf;
    g->avail = g->file_size = len;
    og_status st = parse(g, flags, err, errlen);
    if (!st) st = join_parts(g, false, flags, err, errlen);
    return finish(g, st, out, err, errlen);
}

/* Header-only: pread a growing prefix until the header parses (or fails on its
 * own terms), so no part of the file is mapped. */
static og_status parse_prefix(og_gguf *g, int fd, unsigned flags, uint64_t first_read, char *err, size_t errlen) {
    uint64_t want = g->file_size < first_read ? g->file_size : first_read;
    for (;;) {
        uint8_t *nb = realloc(g->buf, want ? (size_t)want : 1);
        if (!nb) return OG_ERR_NOMEM;
        g->buf = nb;
        uint64_t got = 0;
        while (got < want) {
            ssize_t r = pread(fd, g->buf + got, (size_t)(want - got), (off_t)got);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) return og_fail(err, errlen, OG_ERR_IO, "%s: read failed: %s", g->path, strerror(errno));
            if (r == 0) break; /* the file shrank under us */
            got += (uint64_t)r;
        }
        if (got < want) g->file_size = got;
        g->base = g->buf;
        g->avail = got;
        og_status st = parse(g, flags, err, errlen);
        if (st == OG_OK || !g->short_read) return st;
        if (want >= HEADER_MAX_BYTES)
            return og_fail(err, errlen, OG_ERR_FORMAT, "%s: the header is larger than %llu bytes", g->path,
                           (unsigned long long)HEADER_MAX_BYTES);
        reset_parse(g);
        want = want * 4 > g->file_size ? g->file_size : want * 4;
        if (want > HEADER_MAX_BYTES) want = HEADER_MAX_BYTES;
    }
}

/* One file, parsed and validated on its own (no split handling). */
static og_status open_file(const char *path, unsigned flags, uint64_t first_read, og_gguf **out, char *err,
                           size_t errlen) {
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
    og_gguf *g = new_gguf(path);
    if (!g) {
        close(fd);
        return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    }
    g->file_size = (uint64_t)sb.st_size;
    og_status st;
    if (flags & OG_GGUF_HEADER_ONLY) {
        st = parse_prefix(g, fd, flags, first_read, err, errlen);
    } else if (g->file_size == 0) {
        g->base = (const uint8_t *)"";
        st = parse(g, flags, err, errlen);
    } else {
        void *m = mmap(NULL, (size_t)g->file_size, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) {
            st = og_fail(err, errlen, OG_ERR_IO, "%s: cannot map %llu bytes: %s", path, (unsigned long long)sb.st_size,
                         strerror(errno));
        } else {
            g->map = m;
            g->map_len = (size_t)g->file_size;
            g->base = m;
            g->avail = g->file_size;
            st = parse(g, flags, err, errlen);
        }
    }
    close(fd);
    return finish(g, st, out, err, errlen);
}

og_status og_gguf_open(const char *path, unsigned flags, og_gguf **out, char *err, size_t errlen) {
    *out = NULL;
    og_gguf *g;
    og_status st = open_file(path, flags, HEADER_FIRST_READ, &g, err, errlen);
    if (st) return st;
    st = join_parts(g, true, flags, err, errlen);
    if (st == OG_ERR_NOMEM) og_fail(err, errlen, st, "%s: out of memory while reading the parts", path);
    if (st) {
        og_gguf_close(g);
        return st;
    }
    *out = g;
    return OG_OK;
}

void og_gguf_close(og_gguf *g) {
    if (!g) return;
    for (uint32_t k = 1; k < g->n_parts; k++) og_gguf_close(g->parts[k]);
    free(g->parts);
    free(g->part_info);
    reset_parse(g);
    if (g->map) munmap(g->map, g->map_len);
    free(g->buf);
    free(g->path);
    free(g);
}

uint32_t og_gguf_version(const og_gguf *g) { return g->version; }
uint64_t og_gguf_n_kv(const og_gguf *g) { return g->n_kv; }
uint64_t og_gguf_n_tensors(const og_gguf *g) { return g->n_tensors; }
uint32_t og_gguf_alignment(const og_gguf *g) { return g->alignment; }
uint64_t og_gguf_data_offset(const og_gguf *g) { return g->data_offset; }
uint64_t og_gguf_file_size(const og_gguf *g) {
    uint64_t n = g->n_parts ? 0 : g->file_size;
    for (uint32_t k = 0; k < g->n_parts; k++) n += g->part_info[k].file_size;
    return n;
}

uint32_t og_gguf_n_parts(const og_gguf *g) { return g->n_parts ? g->n_parts : 1; }

og_status og_gguf_part_at(const og_gguf *g, uint32_t k, og_gguf_part *out) {
    if (k >= og_gguf_n_parts(g)) return OG_ERR_RANGE;
    if (g->n_parts) *out = g->part_info[k];
    else fill_part_info(g, out);
    return OG_OK;
}

const og_gguf_kv *og_gguf_kv_at(const og_gguf *g, uint64_t i) { return i < g->n_kv ? &g->kvs[i] : NULL; }
const og_gguf_tensor *og_gguf_tensor_at(const og_gguf *g, uint64_t i) {
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const og_gguf_kv *og_gguf_find_kv(const og_gguf *g, const char *key) {
    size_t slot = hash_slot(g, g->kv_index, g->kv_index_cap, key, kv_name_at);
    return g->kv_index[slot] ? &g->kvs[g->kv_index[slot] - 1] : NULL;
}
const og_gguf_tensor *og_gguf_find_tensor(const og_gguf *g, const char *name) {
    size_t slot = hash_slot(g, g->t_index, g->t_index_cap, name, tensor_name_at);
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
