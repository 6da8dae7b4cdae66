/* See kv_pool.h. */
#include "kv_pool.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

/* ---- the pool --------------------------------------------------------------- */

struct og_kv_pool {
    og_device *dev;       /* where base lives, or NULL: host memory */
    char *base;           /* [n_blocks][block_bytes] */
    uint64_t block_bytes;
    uint32_t n_blocks, n_free;
    uint32_t *free_list;  /* [n_blocks]: the first n_free are free blocks, a stack */
    uint8_t *is_free;     /* [n_blocks] */
};

og_status og_kv_pool_create(og_device *dev, uint64_t block_bytes, uint32_t n_blocks, og_kv_pool **out, char *err,
                            size_t errlen) {
    *out = NULL;
    uint64_t bytes;
    if (!block_bytes || !n_blocks || !og_mul_u64(block_bytes, n_blocks, &bytes) || bytes > (1ull << 62))
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "KV pool: %u blocks of %llu bytes", n_blocks,
                       (unsigned long long)block_bytes);
    og_kv_pool *p = calloc(1, sizeof *p);
    if (!p) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    p->dev = dev;
    p->block_bytes = block_bytes;
    p->n_blocks = n_blocks;
    p->free_list = malloc((size_t)n_blocks * sizeof *p->free_list);
    p->is_free = malloc(n_blocks);
    og_status st = p->free_list && p->is_free ? OG_OK : og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    if (!st && dev) {
        void *b = NULL;
        char why[256] = "";
        st = dev->ops->alloc(dev, bytes, &b, why, sizeof why);
        p->base = b;
        if (st) og_fail(err, errlen, st, "KV pool: %u blocks of %llu bytes on the device: %s", n_blocks,
                        (unsigned long long)block_bytes, why);
    } else if (!st) {
        p->base = aligned_alloc(64, (bytes + 63) / 64 * 64);
        char total[32];
        if (!p->base) /* without --vram nothing planned the pool against the host's memory: say what sizes it */
            st = og_fail(err, errlen, OG_ERR_NOMEM,
                         "KV pool: out of memory for %u blocks of %llu bytes (%s, --parallel x ceil(--ctx / 64) "
                         "blocks); a smaller --ctx or fewer --parallel shrinks it",
                         n_blocks, (unsigned long long)block_bytes, og_fmt_bytes(bytes, total, sizeof total));
    }
    if (st) {
        og_kv_pool_free(p);
        return st;
    }
    /* the stack hands out low blocks first: block 0 on top */
    for (uint32_t i = 0; i < n_blocks; i++) {
        p->free_list[i] = n_blocks - 1 - i;
        p->is_free[i] = 1;
    }
    p->n_free = n_blocks;
    *out = p;
    return OG_OK;
}

void og_kv_pool_free(og_kv_pool *p) {
    if (!p) return;
    if (p->dev) p->dev->ops->free(p->dev, p->base);
    else free(p->base);
    free(p->free_list);
    free(p->is_free);
    free(p);
}

void *og_kv_pool_take(og_kv_pool *p) {
    if (!p->n_free) return NULL;
    const uint32_t i = p->free_list[--p->n_free];
    p->is_free[i] = 0;
    return p->base + (uint64_t)i * p->block_bytes;
}

int64_t og_kv_pool_index(const og_kv_pool *p, const void *blk) {
    const char *b = blk;
    if (!b || b < p->base) return -1;
    const uint64_t off = (uint64_t)(b - p->base);
    if (off % p->block_bytes || off / p->block_bytes >= p->n_blocks) return -1;
    return (int64_t)(off / p->block_bytes);
}

void og_kv_pool_give(og_kv_pool *p, void *blk) {
    const int64_t i = og_kv_pool_index(p, blk);
    /* a block not of this pool, or given twice, is a programmer's mistake: og_engine_check names it */
    if (i < 0 || p->is_free[i] || p->n_free >= p->n_blocks) return;
    p->is_free[i] = 1;
    p->free_list[p->n_free++] = (uint32_t)i;
}

uint32_t og_kv_pool_n_blocks(const og_kv_pool *p) { return p->n_blocks; }
uint32_t og_kv_pool_n_free(const og_kv_pool *p) { return p->n_free; }
uint64_t og_kv_pool_block_bytes(const og_kv_pool *p) { return p->block_bytes; }
bool og_kv_pool_is_free(const og_kv_pool *p, uint32_t i) { return i < p->n_blocks && p->is_free[i]; }

og_status og_kv_pool_check(const og_kv_pool *p, char *err, size_t errlen) {
    uint8_t *seen = calloc(p->n_blocks, 1);
    if (!seen) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    og_status st = OG_OK;
    uint32_t flagged = 0;
    for (uint32_t i = 0; i < p->n_blocks; i++) flagged += p->is_free[i];
    if (flagged != p->n_free)
        st = og_fail(err, errlen, OG_ERR_STATE, "KV pool: %u blocks flagged free, %u on the free list", flagged, p->n_free);
    for (uint32_t k = 0; k < p->n_free && !st; k++) {
        const uint32_t i = p->free_list[k];
        if (i >= p->n_blocks || seen[i] || !p->is_free[i])
            st = og_fail(err, errlen, OG_ERR_STATE, "KV pool: free-list entry %u (block %u) is %s", k, i,
                         i >= p->n_blocks ? "not a block" : seen[i] ? "there twice" : "not flagged free");
        else seen[i] = 1;
    }
    free(seen);
    return st;
}

/* ---- checksums ------------------------------------------------------------------ */

#define FNV_PRIME 0x100000001b3ull /* og_fnv1a64's */

/* FNV-1a 64 over bytes (the tail) after 8-byte words (each word one step, 8x
 * og_fnv1a64's rate over a block's payload): the files' checksums, seeded with
 * OG_FNV1A64_INIT. */
static uint64_t fnv_words(uint64_t h, const void *data, size_t n) {
    const unsigned char *b = data;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = (h ^ w) * FNV_PRIME;
    }
    for (; i < n; i++) h = (h ^ b[i]) * FNV_PRIME;
    return h;
}

uint64_t og_kv_model_id(const og_gguf *g) {
    uint64_t h = OG_FNV1A64_INIT, size = og_gguf_file_size(g), n = og_gguf_n_tensors(g);
    h = fnv_words(h, &size, sizeof size);
    char name[256] = "";
    if (og_gguf_get_cstr(g, "general.name", name, sizeof name)) name[0] = 0;
    h = fnv_words(h, name, strlen(name));
    for (uint64_t i = 0; i < n; i++) {
        const og_gguf_tensor *t = og_gguf_tensor_at(g, i);
        h = fnv_words(h, t->name, strlen(t->name));
        const uint64_t f[7] = {t->type, t->n_dims, (uint64_t)t->ne[0], (uint64_t)t->ne[1], (uint64_t)t->ne[2],
                               (uint64_t)t->ne[3], t->offset};
        h = fnv_words(h, f, sizeof f);
        if (t->data) h = fnv_words(h, t->data, t->n_bytes < 4096 ? t->n_bytes : 4096);
    }
    return h;
}

/* ---- the tiers ------------------------------------------------------------------ */

#define KVB_MAGIC "OGKVBLK1"
#define KVB_VERSION 1u

/* A block file's header; the payload follows it. */
typedef struct kvb_header {
    char magic[8];          /* KVB_MAGIC */
    uint32_t version;       /* KVB_VERSION */
    uint32_t kv_type;       /* og_kv_type */
    uint64_t model_id;      /* og_kv_model_id */
    uint32_t n_layer, block_pos, row_elems, elem_bytes; /* block_pos: OG_KV_BLOCK */
    uint64_t payload_bytes; /* n_layer x block_pos x row_elems x elem_bytes */
    uint64_t hash, parent_hash;
    uint32_t exact, reserved;
    int32_t ids[OG_KV_BLOCK];
    uint64_t payload_sum;   /* fnv_words over the payload */
    uint64_t header_sum;    /* fnv_words over the bytes above */
} kvb_header;

typedef struct ram_ent {
    og_kv_key key;
    void *payload;
    uint64_t lru;
} ram_ent;

typedef struct disk_ent {
    uint64_t hash;
    uint64_t bytes;         /* the file's */
    uint64_t lru;
} disk_ent;

struct og_kv_tier {
    og_kv_tier_config c;
    uint64_t store_id;      /* the files' name prefix: the model, kv-type and block geometry */
    char *dir;
    uint64_t payload_bytes;
    ram_ent *ram;           /* [n_ram], unordered */
    int n_ram, cap_ram;
    disk_ent *disk;         /* [n_disk], unordered */
    int n_disk, cap_disk;
    uint64_t tick;
    og_kv_tier_stats st;
    bool full_said;         /* the filesystem-full line was logged */
    kvb_header *buf;        /* a header + payload, for writes and reads */
};

/* DIR/STORE-HASH.kvb, STORE a hash of the model's id, the kv-type and the block
 * geometry: two servers sharing a directory with other models, or the same model
 * at another --kv-type, never write over each other's blocks (the chain hash
 * alone is the same for the same ids under either kv-type). */
#define KVB_NAME_LEN 37 /* 16 + 1 + 16 + 4 */
static uint64_t store_id(const og_kv_tier_config *c) {
    const uint64_t f[6] = {c->model_id, c->kv_type, c->n_layer, OG_KV_BLOCK, c->row_elems, c->elem_bytes};
    return fnv_words(OG_FNV1A64_INIT, f, sizeof f);
}

static void file_name(const og_kv_tier *t, uint64_t hash, char *buf, size_t n) {
    snprintf(buf, n, "%s/%016llx-%016llx.kvb", t->dir, (unsigned long long)t->store_id, (unsigned long long)hash);
}

/* Whether h (read from a file of file_bytes bytes) is a block of this model's
 * geometry; *why says what is not. */
static bool header_ok(const og_kv_tier *t, const kvb_header *h, uint64_t file_bytes, const char **why) {
    *why = NULL;
    if (file_bytes < sizeof *h || memcmp(h->magic, KVB_MAGIC, 8)) *why = "not a block file (magic)";
    else if (h->header_sum != fnv_words(OG_FNV1A64_INIT, h, offsetof(kvb_header, header_sum))) *why = "its header's checksum";
    else if (h->version != KVB_VERSION) *why = "another format version";
    else if (h->model_id != t->c.model_id) *why = "another model";
    else if (h->kv_type != t->c.kv_type) *why = "another kv-type";
    else if (h->n_layer != t->c.n_layer || h->block_pos != OG_KV_BLOCK || h->row_elems != t->c.row_elems ||
             h->elem_bytes != t->c.elem_bytes || h->payload_bytes != t->payload_bytes)
        *why = "another block geometry";
    else if (file_bytes != sizeof *h + t->payload_bytes) *why = file_bytes < sizeof *h + t->payload_bytes ? "truncated" : "too long";
    return !*why;
}

static void disk_drop(og_kv_tier *t, int i, bool unlink_it) {
    if (unlink_it) {
        char path[4096];
        file_name(t, t->disk[i].hash, path, sizeof path);
        unlink(path);
    }
    t->st.disk_bytes -= t->disk[i].bytes;
    t->st.disk_blocks--;
    t->disk[i] = t->disk[--t->n_disk];
}

static int disk_find(const og_kv_tier *t, uint64_t hash) {
    for (int i = 0; i < t->n_disk; i++)
        if (t->disk[i].hash == hash) return i;
    return -1;
}

static bool disk_add(og_kv_tier *t, uint64_t hash, uint64_t bytes, uint64_t lru) {
    if (t->n_disk == t->cap_disk) {
        int cap = t->cap_disk ? 2 * t->cap_disk : 64;
        disk_ent *d = realloc(t->disk, (size_t)cap * sizeof *d);
        if (!d) return false;
        t->disk = d;
        t->cap_disk = cap;
    }
    t->disk[t->n_disk++] = (disk_ent){hash, bytes, lru};
    t->st.disk_bytes += bytes;
    t->st.disk_blocks++;
    return true;
}

/* Removes the least recently used files while the directory holds more than
 * limit bytes. */
static void disk_trim_to(og_kv_tier *t, uint64_t limit) {
    while (t->n_disk && t->st.disk_bytes > limit) {
        int old = 0;
        for (int i = 1; i < t->n_disk; i++)
            if (t->disk[i].lru < t->disk[old].lru) old = i;
        disk_drop(t, old, true);
    }
}

/* Removes the least recently used files while the directory is over its bound. */
static void disk_trim(og_kv_tier *t) { disk_trim_to(t, t->c.dir_bytes); }

/* Whether the directory's filesystem has less than bytes free for us. */
static bool fs_full(const og_kv_tier *t, uint64_t bytes) {
    struct statvfs vs;
    return !statvfs(t->dir, &vs) && (uint64_t)vs.f_bavail * vs.f_frsize < bytes;
}

static void disk_put(og_kv_tier *t, const og_kv_key *key, const void *payload) {
    const uint64_t bytes = sizeof(kvb_header) + t->payload_bytes;
    if (!t->dir || bytes > t->c.dir_bytes) return;
    const int have = disk_find(t, key->hash);
    if (have >= 0) {
        t->disk[have].lru = ++t->tick;
        return;
    }
    kvb_header *h = t->buf;
    memset(h, 0, sizeof *h);
    memcpy(h->magic, KVB_MAGIC, 8);
    h->version = KVB_VERSION;
    h->kv_type = t->c.kv_type;
    h->model_id = t->c.model_id;
    h->n_layer = t->c.n_layer;
    h->block_pos = OG_KV_BLOCK;
    h->row_elems = t->c.row_elems;
    h->elem_bytes = t->c.elem_bytes;
    h->payload_bytes = t->payload_bytes;
    h->hash = key->hash;
    h->parent_hash = key->parent_hash;
    h->exact = key->exact;
    memcpy(h->ids, key->ids, sizeof h->ids);
    memcpy(h + 1, payload, t->payload_bytes);
    h->payload_sum = fnv_words(OG_FNV1A64_INIT, h + 1, t->payload_bytes);
    h->header_sum = fnv_words(OG_FNV1A64_INIT, h, offsetof(kvb_header, header_sum));
    char path[4096], err[512];
    file_name(t, key->hash, path, sizeof path);
    disk_trim_to(t, t->c.dir_bytes - bytes); /* room first: within the bound while it is written, too */
    og_status ws = og_write_file_atomic(path, h, (size_t)bytes, err, sizeof err);
    if (ws && t->n_disk && fs_full(t, bytes)) {
        /* A filesystem smaller than --cache-dir-size (or filled by others): what
         * we hold now becomes the bound, so the least recently used files make
         * room, as over the bound, instead of the newest blocks being dropped
         * from then on while the oldest stay. */
        char held[32], asked[32];
        og_fmt_bytes(t->st.disk_bytes, held, sizeof held);
        og_fmt_bytes(t->c.dir_bytes, asked, sizeof asked);
        if (!t->full_said)
            og_log(t->c.log, OG_LOG_WARN,
                   "cache-dir %s: the filesystem is full with %s of blocks in it (--cache-dir-size %s): that is its "
                   "bound from now on, least recently used files removed for new ones",
                   t->dir, held, asked);
        t->full_said = true;
        t->c.dir_bytes = t->st.disk_bytes;
        disk_trim_to(t, t->c.dir_bytes - bytes);
        ws = og_write_file_atomic(path, h, (size_t)bytes, err, sizeof err);
    }
    if (ws) {
        if (!t->st.disk_errors++) og_log(t->c.log, OG_LOG_WARN, "cache-dir: %s (later failures are counted only)", err);
        return;
    }
    if (!disk_add(t, key->hash, bytes, ++t->tick)) {
        unlink(path);
        return;
    }
    t->st.disk_stored++;
    disk_trim(t);
}

/* og_write_file_atomic writes NAME.tmp.XXXXXX beside NAME, then renames it: one
 * of ours (our store's prefix) a minute old or more was left by a process
 * killed mid-write (a write takes milliseconds; a younger one may be another
 * server's of the same store, in flight). Removes it; whether it did. The bound
 * counts indexed files only, so such leftovers would pile up past it. */
#define KVB_STALE_S 60
static bool stale_write(const og_kv_tier *t, const char *nm, time_t now) {
    char prefix[20];
    snprintf(prefix, sizeof prefix, "%016llx-", (unsigned long long)t->store_id);
    if (strlen(nm) != KVB_NAME_LEN + 11 || strncmp(nm, prefix, 17) || strncmp(nm + KVB_NAME_LEN - 4, ".kvb.tmp.", 9))
        return false;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", t->dir, nm);
    struct stat sb;
    return !lstat(path, &sb) && S_ISREG(sb.st_mode) && now - sb.st_mtime >= KVB_STALE_S && !unlink(path);
}

/* Opens path for reading if it is a regular file (*sb its status), else NULL:
 * without O_NONBLOCK a FIFO under a block's name (put there by anyone who may
 * write the directory) blocked fopen, at start or in the scheduler's lookup,
 * for ever. */
static FILE *open_block(const char *path, struct stat *sb) {
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return NULL;
    FILE *f = fstat(fd, sb) || !S_ISREG(sb->st_mode) ? NULL : fdopen(fd, "rb");
    if (!f) {
        close(fd);
        errno = EINVAL; /* not ENOENT: the caller tells a file that is gone from one that is unsound */
    }
    return f;
}

/* A block file found at start: its key's hash, size and modification time (s). */
typedef struct found { uint64_t hash, bytes; double mtime; } found;

static int by_mtime(const void *a, const void *b) {
    const double x = ((const found *)a)->mtime, y = ((const found *)b)->mtime;
    return (x > y) - (x < y);
}

/* Indexes the directory's block files (start). */
static og_status disk_scan(og_kv_tier *t, char *err, size_t errlen) {
    DIR *d = opendir(t->dir);
    if (!d) return og_fail(err, errlen, OG_ERR_IO, "cache-dir %s: %s", t->dir, strerror(errno));
    found *fs = NULL;
    int n = 0, cap = 0, n_foreign = 0, n_stale = 0;
    og_status st = OG_OK;
    const time_t now = time(NULL);
    for (struct dirent *de; (de = readdir(d));) {
        const char *nm = de->d_name;
        unsigned long long model, hash;
        char tail[8];
        if (stale_write(t, nm, now)) {
            n_stale++;
            continue;
        }
        if (strlen(nm) != KVB_NAME_LEN || sscanf(nm, "%16llx-%16llx%7s", &model, &hash, tail) != 3 || strcmp(tail, ".kvb"))
            continue;
        if (model != t->store_id) { /* another model's, kv-type's or geometry's: theirs, not opened */
            n_foreign++;
            continue;
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", t->dir, nm);
        struct stat sb;
        FILE *f = open_block(path, &sb);
        kvb_header h;
        const char *why = NULL;
        if (!f) why = "cannot be read (or not a regular file)";
        else if (fread(&h, 1, sizeof h, f) != sizeof h) why = "truncated";
        else if (header_ok(t, &h, (uint64_t)sb.st_size, &why) && h.hash != hash)
            why = "its name is not its key";
        if (f) fclose(f);
        if (why) {
            t->st.disk_skipped++;
            og_log(t->c.log, OG_LOG_WARN, "cache-dir: skipping %s: %s (removed)", path, why);
            unlink(path); /* ours by its name and unsound: kept, it would be skipped at every start */
            continue;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            found *g = realloc(fs, (size_t)cap * sizeof *g);
            if (!g) {
                st = og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
                break;
            }
            fs = g;
        }
        fs[n++] = (found){hash, (uint64_t)sb.st_size, (double)sb.st_mtim.tv_sec + 1e-9 * (double)sb.st_mtim.tv_nsec};
    }
    closedir(d);
    if (n_stale)
        og_log(t->c.log, OG_LOG_WARN,
               "cache-dir %s: removed %d unfinished block writes (left by a server killed while writing)", t->dir,
               n_stale);
    if (n_foreign)
        og_log(t->c.log, OG_LOG_INFO, "cache-dir %s: %d block files of other models, kv-types or geometries left alone",
               t->dir, n_foreign);
    /* ticks in modification order: the oldest file is the least recently used
     * (sorted: a selection sort took minutes at start over the 10^5-10^6 files a
     * large --cache-dir-size holds) */
    if (n > 1) qsort(fs, (size_t)n, sizeof *fs, by_mtime);
    for (int i = 0; i < n && !st; i++) {
        if (!disk_add(t, fs[i].hash, fs[i].bytes, ++t->tick)) st = og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    }
    free(fs);
    if (!st) disk_trim(t);
    return st;
}

/* mkdir -p: dir and the folders above it that are missing (a cache path such as
 * ~/.cache/onegpu/kv on a fresh machine); 0, or -1 with errno. */
static int make_dirs(const char *dir) {
    char p[4096];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *c = p + 1; *c; c++) {
        if (*c != '/') continue;
        *c = 0;
        if (mkdir(p, 0755) && errno != EEXIST) return -1;
        *c = '/';
    }
    return mkdir(p, 0755) && errno != EEXIST ? -1 : 0;
}

og_status og_kv_tier_create(const og_kv_tier_config *c, og_kv_tier **out, char *err, size_t errlen) {
    *out = NULL;
    if ((!c->ram_bytes && !c->dir) || !c->n_layer || !c->row_elems || !c->elem_bytes)
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "KV tiers: no tier, or a zero block geometry");
    og_kv_tier *t = calloc(1, sizeof *t);
    if (!t) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    t->c = *c;
    t->c.dir = NULL;
    t->store_id = store_id(c);
    t->payload_bytes = (uint64_t)c->n_layer * OG_KV_BLOCK * c->row_elems * c->elem_bytes;
    /* a tier that cannot hold one block would hold nothing while the ready line
     * says it is on: refused, with the size it takes */
    char need[32], got[32];
    const uint64_t file_bytes = sizeof(kvb_header) + t->payload_bytes;
    if (c->ram_bytes && c->ram_bytes < t->payload_bytes) {
        og_fmt_bytes(t->payload_bytes, need, sizeof need);
        og_fmt_bytes(c->ram_bytes, got, sizeof got);
        free(t);
        return og_fail(err, errlen, OG_ERR_INVALID_ARG,
                       "--cache-ram %s holds no KV block (one is %s: n_layer x 64 positions x the row); give at "
                       "least that (e.g. 1G), or 0 for off", got, need);
    }
    if (c->dir && c->dir_bytes < file_bytes) {
        og_fmt_bytes(file_bytes, need, sizeof need);
        og_fmt_bytes(c->dir_bytes, got, sizeof got);
        free(t);
        return og_fail(err, errlen, OG_ERR_INVALID_ARG,
                       "--cache-dir-size %s holds no KV block file (one is %s); give at least that (e.g. 16G)", got,
                       need);
    }
    t->buf = malloc(sizeof *t->buf + t->payload_bytes);
    og_status st = t->buf ? OG_OK : og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    if (!st && c->dir) {
        t->dir = strdup(c->dir);
        if (!t->dir) st = og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
        else if (make_dirs(t->dir))
            st = og_fail(err, errlen, OG_ERR_IO, "cache-dir %s: %s", t->dir, strerror(errno));
        if (!st) st = disk_scan(t, err, errlen);
        if (!st && access(t->dir, W_OK | X_OK)) /* a read-only cache is usable, but say so now, not at the first eviction */
            og_log(t->c.log, OG_LOG_WARN,
                   "cache-dir %s: not writable (%s): its blocks are read, evicted blocks are not written to it", t->dir,
                   strerror(errno));
    }
    if (st) {
        og_kv_tier_free(t);
        return st;
    }
    *out = t;
    return OG_OK;
}

static void ram_drop(og_kv_tier *t, int i) {
    free(t->ram[i].payload);
    t->st.ram_bytes -= t->payload_bytes;
    t->st.ram_blocks--;
    t->ram[i] = t->ram[--t->n_ram];
}

void og_kv_tier_free(og_kv_tier *t) {
    if (!t) return;
    while (t->n_ram) { /* what RAM holds outlives the process on disk */
        if (t->dir) disk_put(t, &t->ram[0].key, t->ram[0].payload);
        ram_drop(t, 0);
    }
    free(t->ram);
    free(t->disk);
    free(t->dir);
    free(t->buf);
    free(t);
}

static int ram_find(const og_kv_tier *t, const og_kv_key *k) {
    for (int i = 0; i < t->n_ram; i++) {
        const og_kv_key *r = &t->ram[i].key;
        if (r->hash == k->hash && r->parent_hash == k->parent_hash && r->exact == k->exact &&
            !memcmp(r->ids, k->ids, sizeof r->ids))
            return i;
    }
    return -1;
}

void og_kv_tier_put(og_kv_tier *t, const og_kv_key *key, const void *payload) {
    if (!t->c.ram_bytes || t->payload_bytes > t->c.ram_bytes) {
        disk_put(t, key, payload);
        return;
    }
    if (ram_find(t, key) >= 0) return;
    while (t->n_ram && t->st.ram_bytes + t->payload_bytes > t->c.ram_bytes) {
        int old = 0;
        for (int i = 1; i < t->n_ram; i++)
            if (t->ram[i].lru < t->ram[old].lru) old = i;
        if (t->dir) disk_put(t, &t->ram[old].key, t->ram[old].payload);
        ram_drop(t, old);
    }
    if (t->n_ram == t->cap_ram) {
        int cap = t->cap_ram ? 2 * t->cap_ram : 64;
        ram_ent *r = realloc(t->ram, (size_t)cap * sizeof *r);
        if (!r) return;
        t->ram = r;
        t->cap_ram = cap;
    }
    void *p = malloc(t->payload_bytes);
    if (!p) return;
    memcpy(p, payload, t->payload_bytes);
    t->ram[t->n_ram++] = (ram_ent){*key, p, ++t->tick};
    t->st.ram_bytes += t->payload_bytes;
    t->st.ram_blocks++;
    t->st.ram_stored++;
}

/* Reads the directory's file for key into out; false (logged, dropped from the
 * index) when it is not a sound block of this key. */
static bool disk_get(og_kv_tier *t, int i, const og_kv_key *key, void *out) {
    char path[4096];
    file_name(t, key->hash, path, sizeof path);
    const uint64_t bytes = sizeof(kvb_header) + t->payload_bytes;
    struct stat sb;
    FILE *f = open_block(path, &sb);
    if (!f && errno == ENOENT) { /* gone: another server sharing the directory trimmed it, or a person */
        disk_drop(t, i, false);
        return false;
    }
    const char *why = NULL;
    kvb_header *h = t->buf;
    if (!f) why = "cannot be read (or not a regular file)";
    else if ((uint64_t)sb.st_size != bytes) why = (uint64_t)sb.st_size < bytes ? "truncated" : "too long";
    else if (fread(h, 1, (size_t)bytes, f) != bytes) why = "truncated";
    else if (!header_ok(t, h, bytes, &why)) {
    } else if (h->hash != key->hash || h->parent_hash != key->parent_hash || h->exact != (uint32_t)key->exact ||
               memcmp(h->ids, key->ids, sizeof h->ids))
        why = "another chain under its name";
    else if (h->payload_sum != fnv_words(OG_FNV1A64_INIT, h + 1, t->payload_bytes)) why = "its payload's checksum";
    if (f) fclose(f);
    if (why) {
        t->st.disk_skipped++;
        og_log(t->c.log, OG_LOG_WARN, "cache-dir: skipping %s: %s (removed)", path, why);
        disk_drop(t, i, true); /* ours by its name and unsound: kept, it would be skipped at every start */
        return false;
    }
    memcpy(out, h + 1, t->payload_bytes);
    t->disk[i].lru = ++t->tick;
    return true;
}

int og_kv_tier_get(og_kv_tier *t, const og_kv_key *key, void *out) {
    const int r = ram_find(t, key);
    if (r >= 0) {
        memcpy(out, t->ram[r].payload, t->payload_bytes);
        ram_drop(t, r);
        t->st.ram_hits++;
        return 1;
    }
    const int d = t->dir ? disk_find(t, key->hash) : -1;
    if (d >= 0 && disk_get(t, d, key, out)) {
        t->st.disk_hits++;
        return 2;
    }
    return 0;
}

void og_kv_tier_get_stats(const og_kv_tier *t, og_kv_tier_stats *s) { *s = t->st; }
