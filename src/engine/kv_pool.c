/* See kv_pool.h. */
#include "kv_pool.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
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

og_status og_kv_dev_copy(og_device *dev, og_stream *s, void *dst, const void *src, uint64_t n, bool to_device,
                          char *err, size_t errlen) {
    if (!dev) {
        memcpy(dst, src, (size_t)n);
        return OG_OK;
    }
    og_event ev;
    og_status st = to_device ? dev->ops->copy_to_device(dev, s, dst, src, n, err, errlen)
                             : dev->ops->copy_to_host(dev, s, dst, src, n, err, errlen);
    if (!st) st = dev->ops->event_record(dev, s, &ev, err, errlen);
    if (!st) st = dev->ops->event_wait(dev, ev, err, errlen);
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

#define KVT_MAGIC "OGKVTIER"
#define KVT_VERSION 2u
#define KVT_QUEUE_BYTES (256ull << 20)

/* An entry's header, in a file and in RAM alike; the ids (padded to 8 bytes)
 * and the payload follow it. */
typedef struct kvt_header {
    char magic[8];          /* KVT_MAGIC */
    uint32_t version;       /* KVT_VERSION */
    uint32_t kind;          /* og_kv_tier_kind */
    char arch[16];          /* og_model_info.arch, NUL-padded */
    uint64_t model_id;      /* og_kv_model_id */
    uint64_t kv_key;        /* og_model_kv_key */
    uint32_t kv_type;       /* og_kv_type */
    uint32_t exact;
    uint32_t geom[4];       /* og_kv_tier_config.geom */
    uint64_t hash, parent_hash;
    uint64_t meta[2];       /* the caller's words */
    int32_t n_ids, reserved;
    uint64_t payload_bytes;
    uint64_t payload_sum;   /* fnv_words over the ids (n_ids x 4 bytes), continued over the payload */
    uint64_t header_sum;    /* fnv_words over the bytes above */
} kvt_header;

static uint64_t ids_bytes(int32_t n) { return ((uint64_t)n * 4 + 7) / 8 * 8; }
static int32_t *img_ids(kvt_header *h) { return (int32_t *)(h + 1); }
static const int32_t *img_ids_c(const kvt_header *h) { return (const int32_t *)(h + 1); }
static char *img_payload(kvt_header *h) { return (char *)(h + 1) + ids_bytes(h->n_ids); }
static uint64_t img_bytes(const kvt_header *h) { return sizeof *h + ids_bytes(h->n_ids) + h->payload_bytes; }
static uint64_t img_sum(const kvt_header *h) {
    return fnv_words(fnv_words(OG_FNV1A64_INIT, img_ids_c(h), (size_t)h->n_ids * 4),
                     (const char *)(h + 1) + ids_bytes(h->n_ids), (size_t)h->payload_bytes);
}

typedef struct ram_ent {
    kvt_header *img;
    uint64_t lru;
} ram_ent;

typedef struct disk_ent {
    uint64_t hash;
    uint64_t bytes;         /* the file's */
    uint64_t lru;
    int32_t n_ids;
    bool exact;
} disk_ent;

struct og_kv_tier {
    og_kv_tier_config c;
    uint64_t store_id;      /* the files' name prefix (store_id) */
    char *dir;
    char arch[16];
    const char *what;       /* "block" or "state" */
    const char *ext;        /* ".kvb" or ".kvs" */
    pthread_mutex_t mu;     /* everything below, between the caller and the writer */
    pthread_cond_t cv_work, cv_done;
    ram_ent *ram;           /* [n_ram], unordered */
    int n_ram, cap_ram;
    disk_ent *disk;         /* [n_disk], unordered */
    int n_disk, cap_disk;
    kvt_header **queue;     /* [n_queue] images to write, oldest first; [0] is being written while busy */
    int n_queue, cap_queue;
    bool busy, stop, has_writer, dropped_logged;
    bool blocking;          /* puts wait for room in the queue instead of dropping (og_kv_tier_set_blocking) */
    bool full_said;         /* the filesystem-full line was logged (the writer's) */
    pthread_t writer;
    uint64_t tick;
    og_kv_tier_stats st;
    kvt_header *held;       /* the last hit's image (og_kv_hit points into it) */
};

/* DIR/STORE-HASH.kvb (.kvs), STORE a hash of every identity the header holds
 * but the entry's own (the model's id, its options, the architecture, the
 * kind, the kv-type, the geometry): two servers sharing a directory with other
 * models, or the same model at another --kv-type or options, never write over
 * each other's entries (the chain hash alone is the same for the same ids
 * under either kv-type), and never open each other's files. */
#define KVT_NAME_LEN 37 /* 16 + 1 + 16 + 4 */
static uint64_t store_id(const og_kv_tier *t) {
    const uint64_t f[8] = {t->c.model_id, t->c.kv_key, t->c.kind, t->c.kv_type,
                           t->c.geom[0], t->c.geom[1], t->c.geom[2], t->c.geom[3]};
    return fnv_words(fnv_words(OG_FNV1A64_INIT, f, sizeof f), t->arch, sizeof t->arch);
}

static void file_name(const og_kv_tier *t, uint64_t hash, char *buf, size_t n) {
    snprintf(buf, n, "%s/%016llx-%016llx%s", t->dir, (unsigned long long)t->store_id, (unsigned long long)hash, t->ext);
}

/* Whether h (read from a file of file_bytes bytes) is an entry of this tier's
 * kind, model, options and geometry; *why says what is not. */
static bool header_ok(const og_kv_tier *t, const kvt_header *h, uint64_t file_bytes, const char **why) {
    *why = NULL;
    if (file_bytes < sizeof *h || memcmp(h->magic, KVT_MAGIC, 8)) *why = t->c.kind == OG_KV_TIER_BLOCKS ? "not a block file (magic)" : "not a state file (magic)";
    else if (h->header_sum != fnv_words(OG_FNV1A64_INIT, h, offsetof(kvt_header, header_sum))) *why = "its header's checksum";
    else if (h->version != KVT_VERSION) *why = "another format version";
    else if (h->kind != (uint32_t)t->c.kind) *why = "another kind of entry";
    else if (memcmp(h->arch, t->arch, sizeof h->arch)) *why = "another architecture";
    else if (h->model_id != t->c.model_id) *why = "another model";
    else if (h->kv_type != t->c.kv_type) *why = "another kv-type";
    else if (h->kv_key != t->c.kv_key) *why = "other model options";
    else if (memcmp(h->geom, t->c.geom, sizeof h->geom) || h->n_ids < 1 ||
             (t->c.kind == OG_KV_TIER_BLOCKS && (h->n_ids != OG_KV_BLOCK || h->payload_bytes != t->c.payload_bytes)) ||
             (t->c.kind == OG_KV_TIER_STATES && (uint32_t)h->n_ids > t->c.geom[1]) || h->payload_bytes > (1ull << 48))
        *why = t->c.kind == OG_KV_TIER_BLOCKS ? "another block geometry" : "another state geometry";
    else if (file_bytes != img_bytes(h)) *why = file_bytes < img_bytes(h) ? "truncated" : "too long";
    return !*why;
}

static void disk_drop(og_kv_tier *t, int i, bool unlink_it) {
    if (unlink_it) {
        char path[4096];
        file_name(t, t->disk[i].hash, path, sizeof path);
        unlink(path);
    }
    t->st.disk_bytes -= t->disk[i].bytes;
    t->st.disk_entries--;
    t->disk[i] = t->disk[--t->n_disk];
}

static int disk_find(const og_kv_tier *t, uint64_t hash) {
    for (int i = 0; i < t->n_disk; i++)
        if (t->disk[i].hash == hash) return i;
    return -1;
}

static bool disk_add(og_kv_tier *t, const disk_ent *e) {
    if (t->n_disk == t->cap_disk) {
        int cap = t->cap_disk ? 2 * t->cap_disk : 64;
        disk_ent *d = realloc(t->disk, (size_t)cap * sizeof *d);
        if (!d) return false;
        t->disk = d;
        t->cap_disk = cap;
    }
    t->disk[t->n_disk++] = *e;
    t->st.disk_bytes += e->bytes;
    t->st.disk_entries++;
    return true;
}

/* Removes the least recently used files (mu held) while the directory holds
 * more than limit bytes. */
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

/* Room for a file of bytes within the bound (mu held): the least recently used
 * files go first, so the directory stays within it while the file is written. */
static void disk_room(og_kv_tier *t, uint64_t bytes) {
    disk_trim_to(t, t->c.dir_bytes > bytes ? t->c.dir_bytes - bytes : 0);
}

/* Whether the directory's filesystem has less than bytes free for us. */
static bool fs_full(const og_kv_tier *t, uint64_t bytes) {
    struct statvfs vs;
    return !statvfs(t->dir, &vs) && (uint64_t)vs.f_bavail * vs.f_frsize < bytes;
}

static int queue_find(const og_kv_tier *t, uint64_t hash) {
    for (int i = 0; i < t->n_queue; i++)
        if (t->queue[i]->hash == hash) return i;
    return -1;
}

/* Hands img (the tier's from now on) to the writer (mu held). A key on disk
 * or queued already is kept as it is. A full queue: wait, the writer makes
 * room (at exit), or drop it (counted, logged once). */
static void enqueue(og_kv_tier *t, kvt_header *img, bool wait) {
    const uint64_t bytes = img_bytes(img);
    const int have = t->dir ? disk_find(t, img->hash) : -1;
    if (have >= 0) t->disk[have].lru = ++t->tick;
    if (!t->dir || !t->has_writer || bytes > t->c.dir_bytes || have >= 0 || queue_find(t, img->hash) >= 0) {
        free(img);
        return;
    }
    while (wait && t->n_queue && t->st.queued_bytes + bytes > t->c.queue_bytes) pthread_cond_wait(&t->cv_done, &t->mu);
    if (t->n_queue == t->cap_queue) {
        const int cap = t->cap_queue ? 2 * t->cap_queue : 16;
        kvt_header **q = realloc(t->queue, (size_t)cap * sizeof *q);
        if (q) t->queue = q, t->cap_queue = cap;
    }
    if (t->n_queue == t->cap_queue || (t->n_queue && t->st.queued_bytes + bytes > t->c.queue_bytes)) {
        t->st.queue_dropped++;
        if (!t->dropped_logged)
            og_log(t->c.log, OG_LOG_WARN, "cache-dir: the writer's queue is full (%llu bytes): an evicted %s not "
                   "written (later ones are counted only)", (unsigned long long)t->st.queued_bytes, t->what);
        t->dropped_logged = true;
        free(img);
        return;
    }
    t->queue[t->n_queue++] = img;
    t->st.queued++;
    t->st.queued_bytes += bytes;
    pthread_cond_signal(&t->cv_work);
}

/* The writer thread: the queue's head written outside the lock (it stays in
 * the queue meanwhile, so a lookup finds it), then indexed. */
static void *writer_main(void *arg) {
    og_kv_tier *t = arg;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (!t->n_queue && !t->stop) pthread_cond_wait(&t->cv_work, &t->mu);
        if (!t->n_queue) break;
        kvt_header *img = t->queue[0];
        t->busy = true;
        char path[4096], err[512];
        file_name(t, img->hash, path, sizeof path);
        const uint64_t bytes = img_bytes(img);
        disk_room(t, bytes); /* room first: within the bound while it is written, too */
        pthread_mutex_unlock(&t->mu);
        og_status st = og_write_file_atomic(path, img, (size_t)bytes, err, sizeof err);
        pthread_mutex_lock(&t->mu);
        if (st && t->n_disk && fs_full(t, bytes)) {
            /* A filesystem smaller than --cache-dir-size (or filled by others):
             * what we hold now becomes the bound, so the least recently used
             * files make room, as over the bound, instead of the newest entries
             * being dropped from then on while the oldest stay. The trim's
             * unlinks run under mu (the index is the caller's too); the retry
             * outside it. */
            char held[32], asked[32];
            og_fmt_bytes(t->st.disk_bytes, held, sizeof held);
            og_fmt_bytes(t->c.dir_bytes, asked, sizeof asked);
            if (!t->full_said)
                og_log(t->c.log, OG_LOG_WARN,
                       "cache-dir %s: the filesystem is full with %s of %ss in it (--cache-dir-size %s): that is its "
                       "bound from now on, least recently used files removed for new ones",
                       t->dir, held, t->what, asked);
            t->full_said = true;
            t->c.dir_bytes = t->st.disk_bytes;
            disk_room(t, bytes);
            pthread_mutex_unlock(&t->mu);
            st = og_write_file_atomic(path, img, (size_t)bytes, err, sizeof err);
            pthread_mutex_lock(&t->mu);
        }
        if (st) {
            if (!t->st.disk_errors++)
                og_log(t->c.log, OG_LOG_WARN, "cache-dir: %s (later failures are counted only)", err);
        } else {
            const int have = disk_find(t, img->hash);
            if (have >= 0) disk_drop(t, have, false); /* its file was just replaced */
            const disk_ent d = {img->hash, bytes, ++t->tick, img->n_ids, img->exact != 0};
            if (disk_add(t, &d)) {
                t->st.disk_stored++;
                disk_trim(t);
            } else {
                unlink(path);
            }
        }
        memmove(t->queue, t->queue + 1, (size_t)(t->n_queue - 1) * sizeof *t->queue);
        t->n_queue--;
        t->busy = false;
        t->st.queued--;
        t->st.queued_bytes -= bytes;
        free(img);
        pthread_cond_broadcast(&t->cv_done);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

/* og_write_file_atomic writes NAME.tmp.XXXXXX beside NAME, then renames it: one
 * of ours (our store's prefix and kind) a minute old or more was left by a
 * process killed mid-write (a write takes milliseconds, the largest state
 * seconds; a younger one may be another server's of the same store, in
 * flight). Removes it; whether it did. The bound counts indexed files only, so
 * such leftovers would pile up past it. */
#define KVT_STALE_S 60
static bool stale_write(const og_kv_tier *t, const char *nm, time_t now) {
    char prefix[20], tail[16];
    snprintf(prefix, sizeof prefix, "%016llx-", (unsigned long long)t->store_id);
    snprintf(tail, sizeof tail, "%s.tmp.", t->ext);
    if (strlen(nm) != KVT_NAME_LEN + 11 || strncmp(nm, prefix, 17) || strncmp(nm + KVT_NAME_LEN - 4, tail, 9))
        return false;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", t->dir, nm);
    struct stat sb;
    return !lstat(path, &sb) && S_ISREG(sb.st_mode) && now - sb.st_mtime >= KVT_STALE_S && !unlink(path);
}

/* Opens path for reading if it is a regular file (*sb its status), else NULL:
 * without O_NONBLOCK a FIFO under an entry's name (put there by anyone who may
 * write the directory) blocked fopen, at start or in the scheduler's lookup,
 * for ever. */
static FILE *open_entry(const char *path, struct stat *sb) {
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return NULL;
    FILE *f = fstat(fd, sb) || !S_ISREG(sb->st_mode) ? NULL : fdopen(fd, "rb");
    if (!f) {
        close(fd);
        errno = EINVAL; /* not ENOENT: the caller tells a file that is gone from one that is unsound */
    }
    return f;
}

/* A file found at start: its index entry and modification time (s). */
typedef struct found {
    disk_ent e;
    double mtime;
} found;

static int by_mtime(const void *a, const void *b) {
    const double x = ((const found *)a)->mtime, y = ((const found *)b)->mtime;
    return (x > y) - (x < y);
}

/* Indexes the directory's files of this kind and store (start). */
static og_status disk_scan(og_kv_tier *t, char *err, size_t errlen) {
    DIR *d = opendir(t->dir);
    if (!d) return og_fail(err, errlen, OG_ERR_IO, "cache-dir %s: %s", t->dir, strerror(errno));
    found *fs = NULL;
    int n = 0, cap = 0, n_foreign = 0, n_stale = 0;
    og_status st = OG_OK;
    const time_t now = time(NULL);
    for (struct dirent *de; (de = readdir(d));) {
        const char *nm = de->d_name;
        unsigned long long store, hash;
        char tail[8];
        if (stale_write(t, nm, now)) {
            n_stale++;
            continue;
        }
        if (strlen(nm) != KVT_NAME_LEN || sscanf(nm, "%16llx-%16llx%7s", &store, &hash, tail) != 3 || strcmp(tail, t->ext))
            continue;
        if (store != t->store_id) { /* another model's, option set's, kv-type's or geometry's: theirs, not opened */
            n_foreign++;
            continue;
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", t->dir, nm);
        struct stat sb;
        FILE *f = open_entry(path, &sb);
        kvt_header h;
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
        fs[n++] = (found){{hash, (uint64_t)sb.st_size, 0, h.n_ids, h.exact != 0},
                          (double)sb.st_mtim.tv_sec + 1e-9 * (double)sb.st_mtim.tv_nsec};
    }
    closedir(d);
    if (n_stale)
        og_log(t->c.log, OG_LOG_WARN,
               "cache-dir %s: removed %d unfinished %s writes (left by a server killed while writing)", t->dir,
               n_stale, t->what);
    if (n_foreign)
        og_log(t->c.log, OG_LOG_INFO, "cache-dir %s: %d %s files of other models, kv-types or geometries left alone",
               t->dir, n_foreign, t->what);
    /* ticks in modification order: the oldest file is the least recently used
     * (sorted: a selection sort took minutes at start over the 10^5-10^6 files a
     * large --cache-dir-size holds) */
    if (!st && n > 1) qsort(fs, (size_t)n, sizeof *fs, by_mtime);
    for (int i = 0; i < n && !st; i++) {
        fs[i].e.lru = ++t->tick;
        if (!disk_add(t, &fs[i].e)) st = og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
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

/* A tier that cannot hold its smallest entry would hold nothing while the
 * ready line says it is on: refused, with the size it takes. RAM counts
 * payloads, the directory files (header, ids, payload). A state's payload has
 * no lower bound the tier knows (og_model_info does not give the window its
 * rings hold), so a state tier's floors are a file of one id and no payload. */
static og_status size_floors(const og_kv_tier_config *c, char *err, size_t errlen) {
    const bool blocks = c->kind == OG_KV_TIER_BLOCKS;
    const uint64_t payload = blocks ? c->payload_bytes : 0;
    const uint64_t file = sizeof(kvt_header) + ids_bytes(blocks ? OG_KV_BLOCK : 1) + payload;
    char need[32], got[32];
    if (c->ram_bytes && c->ram_bytes < payload) {
        og_fmt_bytes(payload, need, sizeof need);
        og_fmt_bytes(c->ram_bytes, got, sizeof got);
        return og_fail(err, errlen, OG_ERR_INVALID_ARG,
                       "--cache-ram %s holds no KV block (one is %s: n_layer x 64 positions x the row); give at "
                       "least that (e.g. 1G), or 0 for off", got, need);
    }
    if (c->dir && c->dir_bytes < file) {
        og_fmt_bytes(file, need, sizeof need);
        og_fmt_bytes(c->dir_bytes, got, sizeof got);
        return og_fail(err, errlen, OG_ERR_INVALID_ARG,
                       "--cache-dir-size %s holds no %s file (one is %s%s); give at least that (e.g. 16G)", got,
                       blocks ? "KV block" : "state", blocks ? "" : "at least ", need);
    }
    return OG_OK;
}

og_status og_kv_tier_create(const og_kv_tier_config *c, og_kv_tier **out, char *err, size_t errlen) {
    *out = NULL;
    if ((!c->ram_bytes && !c->dir) || (c->kind != OG_KV_TIER_BLOCKS && c->kind != OG_KV_TIER_STATES) || !c->geom[0] ||
        !c->geom[1] || !c->geom[2] || (c->kind == OG_KV_TIER_BLOCKS && !c->payload_bytes))
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "KV tiers: no tier, no kind, or a zero geometry");
    const og_status fl = size_floors(c, err, errlen);
    if (fl) return fl;
    og_kv_tier *t = calloc(1, sizeof *t);
    if (!t) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    t->c = *c;
    t->c.dir = NULL;
    t->c.arch = NULL;
    if (!t->c.queue_bytes) t->c.queue_bytes = KVT_QUEUE_BYTES;
    snprintf(t->arch, sizeof t->arch, "%s", c->arch ? c->arch : "");
    t->what = c->kind == OG_KV_TIER_BLOCKS ? "block" : "state";
    t->ext = c->kind == OG_KV_TIER_BLOCKS ? ".kvb" : ".kvs";
    t->store_id = store_id(t);
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv_work, NULL);
    pthread_cond_init(&t->cv_done, NULL);
    og_status st = OG_OK;
    if (c->dir) {
        t->dir = strdup(c->dir);
        if (!t->dir) st = og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
        else if (make_dirs(t->dir))
            st = og_fail(err, errlen, OG_ERR_IO, "cache-dir %s: %s", t->dir, strerror(errno));
        if (!st) st = disk_scan(t, err, errlen);
        if (!st && access(t->dir, W_OK | X_OK)) /* a read-only cache is usable, but say so now, not at the first eviction */
            og_log(t->c.log, OG_LOG_WARN,
                   "cache-dir %s: not writable (%s): its %ss are read, evicted %ss are not written to it", t->dir,
                   strerror(errno), t->what, t->what);
        if (!st) {
            const int rc = pthread_create(&t->writer, NULL, writer_main, t);
            if (rc) st = og_fail(err, errlen, OG_ERR_NOMEM, "cache-dir: cannot start the writer thread: %s", strerror(rc));
            t->has_writer = !rc;
        }
    }
    if (st) {
        og_kv_tier_free(t);
        return st;
    }
    *out = t;
    return OG_OK;
}

/* Takes RAM entry i out of RAM (mu held); its image is the caller's. */
static kvt_header *ram_take(og_kv_tier *t, int i) {
    kvt_header *img = t->ram[i].img;
    t->st.ram_bytes -= img->payload_bytes;
    t->st.ram_entries--;
    t->ram[i] = t->ram[--t->n_ram];
    return img;
}

void og_kv_tier_free(og_kv_tier *t) {
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    while (t->n_ram) { /* what RAM holds outlives the process on disk, the least recently used first */
        int old = 0;
        for (int i = 1; i < t->n_ram; i++)
            if (t->ram[i].lru < t->ram[old].lru) old = i;
        enqueue(t, ram_take(t, old), true);
    }
    t->stop = true;
    pthread_cond_signal(&t->cv_work);
    pthread_mutex_unlock(&t->mu);
    if (t->has_writer) pthread_join(t->writer, NULL);
    for (int i = 0; i < t->n_queue; i++) free(t->queue[i]);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv_work);
    pthread_cond_destroy(&t->cv_done);
    free(t->queue);
    free(t->ram);
    free(t->disk);
    free(t->dir);
    free(t->held);
    free(t);
}

/* Whether image h holds key. */
static bool img_is(const kvt_header *h, const og_kv_key *k) {
    return h->hash == k->hash && h->parent_hash == k->parent_hash && h->exact == (uint32_t)k->exact &&
           h->n_ids == k->n_ids && !memcmp(img_ids_c(h), k->ids, (size_t)k->n_ids * 4);
}

static int ram_find(const og_kv_tier *t, const og_kv_key *k) {
    for (int i = 0; i < t->n_ram; i++)
        if (img_is(t->ram[i].img, k)) return i;
    return -1;
}

void og_kv_tier_put(og_kv_tier *t, const og_kv_key *key, const uint64_t meta[2], const void *payload, uint64_t bytes) {
    if (key->n_ids < 1 || (t->c.kind == OG_KV_TIER_BLOCKS && (bytes != t->c.payload_bytes || key->n_ids != OG_KV_BLOCK)))
        return;
    pthread_mutex_lock(&t->mu);
    const bool to_ram = t->c.ram_bytes && bytes <= t->c.ram_bytes;
    const int have = to_ram ? ram_find(t, key) : -1;
    if (have >= 0) {
        t->ram[have].lru = ++t->tick;
        pthread_mutex_unlock(&t->mu);
        return;
    }
    if (!to_ram) { /* straight to the directory: nothing to copy for a key written or queued already */
        const int d = t->dir ? disk_find(t, key->hash) : -1;
        if (d >= 0) t->disk[d].lru = ++t->tick;
        if (!t->dir || d >= 0 || queue_find(t, key->hash) >= 0) {
            pthread_mutex_unlock(&t->mu);
            return;
        }
    }
    kvt_header *h = calloc(1, sizeof *h + ids_bytes(key->n_ids) + bytes);
    if (!h) {
        pthread_mutex_unlock(&t->mu);
        return;
    }
    memcpy(h->magic, KVT_MAGIC, 8);
    h->version = KVT_VERSION;
    h->kind = (uint32_t)t->c.kind;
    memcpy(h->arch, t->arch, sizeof h->arch);
    h->model_id = t->c.model_id;
    h->kv_key = t->c.kv_key;
    h->kv_type = t->c.kv_type;
    h->exact = key->exact;
    memcpy(h->geom, t->c.geom, sizeof h->geom);
    h->hash = key->hash;
    h->parent_hash = key->parent_hash;
    if (meta) memcpy(h->meta, meta, sizeof h->meta);
    h->n_ids = key->n_ids;
    h->payload_bytes = bytes;
    memcpy(img_ids(h), key->ids, (size_t)key->n_ids * 4);
    memcpy(img_payload(h), payload, (size_t)bytes);
    h->payload_sum = img_sum(h);
    h->header_sum = fnv_words(OG_FNV1A64_INIT, h, offsetof(kvt_header, header_sum));
    if (!to_ram) {
        enqueue(t, h, t->blocking);
        pthread_mutex_unlock(&t->mu);
        return;
    }
    while (t->n_ram && t->st.ram_bytes + bytes > t->c.ram_bytes) {
        int old = 0;
        for (int i = 1; i < t->n_ram; i++)
            if (t->ram[i].lru < t->ram[old].lru) old = i;
        kvt_header *o = ram_take(t, old);
        if (t->dir) enqueue(t, o, t->blocking);
        else free(o);
    }
    if (t->n_ram == t->cap_ram) {
        int cap = t->cap_ram ? 2 * t->cap_ram : 64;
        ram_ent *r = realloc(t->ram, (size_t)cap * sizeof *r);
        if (r) t->ram = r, t->cap_ram = cap;
    }
    if (t->n_ram == t->cap_ram) {
        free(h);
    } else {
        t->ram[t->n_ram++] = (ram_ent){h, ++t->tick};
        t->st.ram_bytes += bytes;
        t->st.ram_entries++;
        t->st.ram_stored++;
    }
    pthread_mutex_unlock(&t->mu);
}

/* Reads the directory's file i for key (mu held) into a new image; NULL
 * (logged, dropped from the index) when it is not a sound entry of this key. */
static kvt_header *disk_get(og_kv_tier *t, int i, const og_kv_key *key) {
    char path[4096];
    file_name(t, key->hash, path, sizeof path);
    const uint64_t bytes = t->disk[i].bytes;
    struct stat sb;
    FILE *f = open_entry(path, &sb);
    if (!f && errno == ENOENT) { /* gone: another server sharing the directory trimmed it, or a person */
        disk_drop(t, i, false);
        return NULL;
    }
    const char *why = NULL;
    kvt_header *h = bytes >= sizeof *h && bytes < (1ull << 48) ? malloc((size_t)bytes) : NULL;
    if (!h) why = "out of memory";
    else if (!f) why = "cannot be read (or not a regular file)";
    else if ((uint64_t)sb.st_size != bytes) why = (uint64_t)sb.st_size < bytes ? "truncated" : "too long";
    else if (fread(h, 1, (size_t)bytes, f) != bytes) why = "truncated";
    else if (!header_ok(t, h, bytes, &why)) {
    } else if (!img_is(h, key)) why = "another chain under its name";
    else if (h->payload_sum != img_sum(h)) why = "its payload's checksum";
    if (f) fclose(f);
    if (why) {
        t->st.disk_skipped++;
        og_log(t->c.log, OG_LOG_WARN, "cache-dir: skipping %s: %s%s", path, why, h ? " (removed)" : "");
        disk_drop(t, i, h != NULL); /* ours by its name and unsound: kept, it would be skipped at every start */
        free(h);
        return NULL;
    }
    t->disk[i].lru = ++t->tick;
    return h;
}

/* og_kv_tier_get with mu held. */
static int get_locked(og_kv_tier *t, const og_kv_key *key, og_kv_hit *hit) {
    kvt_header *h = NULL;
    int from = 0;
    const int r = ram_find(t, key);
    if (r >= 0) {
        h = ram_take(t, r);
        t->st.ram_hits++;
        from = 1;
    }
    const int q = h ? -1 : queue_find(t, key->hash);
    if (q >= 0 && img_is(t->queue[q], key) && (h = malloc((size_t)img_bytes(t->queue[q])))) {
        memcpy(h, t->queue[q], (size_t)img_bytes(t->queue[q]));
        t->st.disk_hits++;
        from = 2;
    }
    const int d = h || !t->dir ? -1 : disk_find(t, key->hash);
    if (d >= 0 && (h = disk_get(t, d, key))) {
        t->st.disk_hits++;
        from = 2;
    }
    if (!h) return 0;
    free(t->held);
    t->held = h;
    hit->payload = img_payload(h);
    hit->bytes = h->payload_bytes;
    memcpy(hit->meta, h->meta, sizeof hit->meta);
    return from;
}

int og_kv_tier_get(og_kv_tier *t, const og_kv_key *key, og_kv_hit *hit) {
    pthread_mutex_lock(&t->mu);
    const int from = get_locked(t, key, hit);
    pthread_mutex_unlock(&t->mu);
    return from;
}

/* Adds n to the set lens[0, *k) of candidate lengths (at most cap). */
static void add_len(int *lens, int *k, int cap, int n) {
    for (int i = 0; i < *k; i++)
        if (lens[i] == n) return;
    if (*k < cap) lens[(*k)++] = n;
}

int og_kv_tier_get_prefix(og_kv_tier *t, uint64_t seed, bool exact, const int32_t *ids, int n_min, int n_max,
                          og_kv_hit *hit, int *n) {
    *n = 0;
    pthread_mutex_lock(&t->mu);
    const int cap = t->n_ram + t->n_queue + t->n_disk;
    int *lens = cap ? malloc((size_t)cap * sizeof *lens) : NULL, k = 0, from = 0;
    for (int i = 0; lens && i < t->n_ram; i++)
        if (t->ram[i].img->exact == (uint32_t)exact && t->ram[i].img->n_ids > n_min && t->ram[i].img->n_ids <= n_max)
            add_len(lens, &k, cap, t->ram[i].img->n_ids);
    for (int i = 0; lens && i < t->n_queue; i++)
        if (t->queue[i]->exact == (uint32_t)exact && t->queue[i]->n_ids > n_min && t->queue[i]->n_ids <= n_max)
            add_len(lens, &k, cap, t->queue[i]->n_ids);
    for (int i = 0; lens && i < t->n_disk; i++)
        if (t->disk[i].exact == exact && t->disk[i].n_ids > n_min && t->disk[i].n_ids <= n_max)
            add_len(lens, &k, cap, t->disk[i].n_ids);
    while (k && !from) { /* the longest candidate first */
        int best = 0;
        for (int i = 1; i < k; i++)
            if (lens[i] > lens[best]) best = i;
        const int len = lens[best];
        lens[best] = lens[--k];
        const og_kv_key key = {.hash = og_fnv1a64(ids, (size_t)len * 4, seed), .exact = exact, .n_ids = len, .ids = ids};
        if ((from = get_locked(t, &key, hit))) *n = len;
    }
    free(lens);
    pthread_mutex_unlock(&t->mu);
    return from;
}

void og_kv_tier_set_blocking(og_kv_tier *t, bool on) {
    pthread_mutex_lock(&t->mu);
    t->blocking = on;
    pthread_mutex_unlock(&t->mu);
}

void og_kv_tier_sync(og_kv_tier *t) {
    pthread_mutex_lock(&t->mu);
    while (t->n_queue) pthread_cond_wait(&t->cv_done, &t->mu);
    pthread_mutex_unlock(&t->mu);
}

void og_kv_tier_get_stats(og_kv_tier *t, og_kv_tier_stats *s) {
    pthread_mutex_lock(&t->mu);
    *s = t->st;
    pthread_mutex_unlock(&t->mu);
}
