/* The engine's paged KV pool and the tiers its evicted prefix blocks go to
 * (issue 17 items 1 and 2; internal to src/engine).
 *
 * og_kv_pool: ONE allocation of n_blocks blocks of block_bytes each (deepseek2:
 * [n_layer][OG_KV_BLOCK][r_kv + d_rope] elements of the kv-type, og_model_info.
 * kv_block_bytes), in the forward device's memory (dev->ops->alloc) or the
 * host's without a device, and a free list. Sequences take blocks from it and
 * give them back; the engine's prefix cache keeps unreferenced full blocks in it
 * until a block is needed. Not thread-safe: the engine's lock guards it.
 *
 * og_kv_tier: where an evicted cached entry goes instead of being dropped:
 * host RAM (--cache-ram SIZE, LRU), then a directory (--cache-dir DIR, bounded
 * by --cache-dir-size, LRU by last use). One tier serves either kind of entry
 * (og_kv_tier_kind): deepseek2's paged blocks (fixed size, OG_KV_BLOCK ids,
 * files STORE-HASH.kvb) or the whole states of deepseek4 / deepseek41
 * (snap_cache.h: any size, n_pos ids, files STORE-HASH.kvs), 16 hex digits
 * each: STORE a hash of what the header's identity holds (the model's
 * og_kv_model_id, its options' og_model_kv_key, the architecture, the kind,
 * the kv-type and the geometry) and the entry's chain hash. Other stores'
 * files are left alone, never opened. Entries are kept as file images in RAM too (header,
 * ids, payload), so RAM -> directory is a hand-over. A file holds a header
 * (the kind, the architecture, the model's identity hash, its og_model_kv_key
 * (the options and the file), the kv-type, the geometry, the chain key, a
 * checksum of the ids and payload and one of the header), the ids, then the
 * payload. A hit is verified by the ids, never by the hash alone.
 *
 * Directory writes run on the tier's writer thread (a bounded queue of
 * images; the caller's put only hands an image over), so an eviction under the
 * engine's lock never waits for the disk: each file is written atomically
 * (og_write_file_atomic: temporary file, fsync, rename); a lookup finds an
 * entry still queued in the queue; a full queue drops the write (counted);
 * og_kv_tier_free drains it. Before a write the least recently used files
 * make room within the bound; a write that finds the filesystem full makes
 * what the directory holds the bound from then on (one warning) and retries.
 * A file of ours that is truncated, corrupt, not a regular file (opened
 * non-blocking: a FIFO never hangs), or whose header names another model,
 * architecture, option set, kv-type or geometry is skipped with one log line,
 * at start and at lookup, never trusted, and removed; one gone under a running
 * server (another sharing the directory trimmed it) is dropped from the index
 * without a line. Files are in the host's
 * byte order (x86-64: little-endian). Thread-safety: one caller thread at a
 * time (the engine's lock); the tier's own mutex orders it with the writer. */
#ifndef OG_KV_POOL_H
#define OG_KV_POOL_H

#include "og_model.h"

typedef struct og_kv_pool og_kv_pool;

/* Makes the pool: n_blocks x block_bytes in one allocation on dev (NULL: host
 * memory, 64-byte aligned). Errors: OG_ERR_INVALID_ARG (0 blocks or bytes, a
 * product over 2^63), OG_ERR_NOMEM or the device's (its budget, with the sizes). */
og_status og_kv_pool_create(og_device *dev, uint64_t block_bytes, uint32_t n_blocks, og_kv_pool **out, char *err,
                            size_t errlen);
/* Frees the allocation (on its device) and the free list; NULL is fine. No
 * status: freeing cannot fail. */
void og_kv_pool_free(og_kv_pool *p);
/* A free block of block_bytes (its contents are whatever it last held), or
 * NULL when none is: a pointer, not a status (og_kv_alloc.take's contract). */
void *og_kv_pool_take(og_kv_pool *p);
/* Returns a block taken from p. No status: a pointer that is not a taken block
 * of p is ignored (og_engine_check's walk then names the fault). */
void og_kv_pool_give(og_kv_pool *p, void *blk);
/* The index of blk in p (0..n_blocks), or -1 when blk is not the start of one
 * of its blocks. These accessors cannot fail (they return values). */
int64_t og_kv_pool_index(const og_kv_pool *p, const void *blk);
uint32_t og_kv_pool_n_blocks(const og_kv_pool *p);
uint32_t og_kv_pool_n_free(const og_kv_pool *p);
uint64_t og_kv_pool_block_bytes(const og_kv_pool *p);
/* Whether block i is on the free list (false for i out of range). */
bool og_kv_pool_is_free(const og_kv_pool *p, uint32_t i);
/* The free list's own consistency: every entry a block index, none twice, the
 * flags agree. Errors: OG_ERR_STATE with the first fault. */
og_status og_kv_pool_check(const og_kv_pool *p, char *err, size_t errlen);

typedef enum og_kv_tier_kind {
    OG_KV_TIER_BLOCKS = 1, /* deepseek2's paged blocks: payload [n_layer][OG_KV_BLOCK][row_elems] */
    OG_KV_TIER_STATES = 2, /* og_kv_snap states: payload the snapshot's device part then its host part */
} og_kv_tier_kind;

/* Copies n bytes between host memory and dev's (NULL: host to host, a
 * memcpy) on stream s and waits for it: to_device from host src into dev's
 * dst, else from dev's src into host dst. Errors: the device's. */
og_status og_kv_dev_copy(og_device *dev, og_stream *s, void *dst, const void *src, uint64_t n, bool to_device,
                         char *err, size_t errlen);

/* The key of a cached entry, all of it compared on lookup. Blocks: the
 * engine's chain hash (pc_hash: the parent's hash, the exact flag and the
 * ids), the parent's hash (0 for a first block), OG_KV_BLOCK ids. States: the
 * snap cache's hash (og_snapc_hash: FNV-1a 64 of the ids from a seed naming
 * the model's key and the exact flag), parent 0, the state's n_pos ids. */
typedef struct og_kv_key {
    uint64_t hash, parent_hash;
    bool exact;
    int32_t n_ids;
    const int32_t *ids; /* [n_ids] */
} og_kv_key;

typedef struct og_kv_tier_config {
    og_kv_tier_kind kind;
    uint64_t ram_bytes;        /* host RAM for evicted entries' payloads, bytes; 0: no RAM tier (else, blocks:
                                  at least one payload) */
    const char *dir;           /* the directory for evicted entries, or NULL: none (made if missing, with its
                                  parents) */
    uint64_t dir_bytes;        /* the directory's bound, bytes (its files' sizes, this kind's; at least the
                                  smallest file; a full filesystem lowers it to what the directory holds) */
    uint64_t queue_bytes;      /* the writer queue's bound, bytes of images (0: 256 MiB; one entry always fits) */
    uint64_t model_id;         /* og_kv_model_id of the model */
    uint64_t kv_key;           /* og_model_kv_key: the architecture, the file and every option set on it */
    const char *arch;          /* og_model_info.arch (at most 15 characters kept) */
    uint32_t kv_type;          /* og_kv_type of the model */
    uint32_t geom[4];          /* the geometry every file must have: blocks {n_layer, OG_KV_BLOCK, row_elems,
                                  elem_bytes}; states {n_layer, n_ctx, elem_bytes, 0} */
    uint64_t payload_bytes;    /* blocks: every payload's bytes; states: 0 (each its own) */
    const og_logger *log;
} og_kv_tier_config;

typedef struct og_kv_tier_stats {
    uint64_t ram_entries, ram_bytes;   /* held now (bytes: payloads) */
    uint64_t disk_entries, disk_bytes; /* files indexed now, their bytes */
    uint64_t queued, queued_bytes;     /* images waiting for the writer now, their bytes */
    uint64_t ram_hits, disk_hits;      /* entries read back, in all (a queued entry's: a disk hit) */
    uint64_t ram_stored, disk_stored;  /* entries put there, in all (disk: files written) */
    uint64_t disk_skipped;             /* files refused (corrupt, truncated, foreign), in all */
    uint64_t disk_errors;              /* writes that failed (logged once), in all */
    uint64_t queue_dropped;            /* writes dropped because the queue was full, in all */
} og_kv_tier_stats;

/* A hit: the payload (host memory) and the words put with it, valid until the
 * next call on the tier. */
typedef struct og_kv_hit {
    const void *payload;
    uint64_t bytes;
    uint64_t meta[2];
} og_kv_hit;

typedef struct og_kv_tier og_kv_tier;

/* Makes the tiers; with a directory, creates it if missing (with its parents),
 * removes our temporary files a minute old or more (a writer killed mid-write
 * left them), indexes the files of c->kind it holds (files are named by a hash
 * of the model's id, its options, the architecture, the kind, the kv-type and
 * the geometry: the others' are left alone, one log line says how many; ours
 * have their headers checked, one log line per file refused, and an unsound
 * one is removed; the oldest removed while over dir_bytes), says a read-only
 * directory, and starts the writer thread. Errors: OG_ERR_INVALID_ARG (neither
 * tier, no kind, zero geometry; a ram_bytes below the smallest payload or a
 * dir_bytes below the smallest file, with the size needed: blocks
 * payload_bytes, states a header and one id), OG_ERR_IO (the
 * directory cannot be made or read), OG_ERR_NOMEM (also: no thread). */
og_status og_kv_tier_create(const og_kv_tier_config *c, og_kv_tier **out, char *err, size_t errlen);
/* Hands what RAM holds to the directory (when there is one; least recently
 * used first, so the newest survive the bound), waits for the writer to drain
 * the queue, then frees; NULL is fine. No status: a write that fails is logged
 * and counted, then dropped. */
void og_kv_tier_free(og_kv_tier *t);
/* Keeps payload (host memory, bytes: blocks c->payload_bytes) under key with
 * the caller's meta words (states: the snapshot's device bytes and n_ctx): in
 * RAM when there is a RAM tier (the least recently used ones leave for the
 * directory's queue, or are dropped, while over ram_bytes), else queued for
 * the directory. A key already held is kept as it is. No status: an entry
 * that cannot be kept is dropped (counted where it is a failed or dropped write). */
void og_kv_tier_put(og_kv_tier *t, const og_kv_key *key, const uint64_t meta[2], const void *payload, uint64_t bytes);
/* Looks key up, RAM first, then the writer's queue, then the directory.
 * Returns 1 when found in RAM (the entry leaves RAM: it goes back to the
 * caller's cache), 2 in the directory or the queue (it stays), 0 when not held
 * or the file was refused (logged once, dropped from the index); *hit is set
 * on 1 and 2. */
int og_kv_tier_get(og_kv_tier *t, const og_kv_key *key, og_kv_hit *hit);
/* States: the longest held entry whose ids are ids[0, n) for n_min < n <=
 * n_max under exact, its hash og_fnv1a64(ids, 4 n, seed) (og_snapc_hash's
 * definition); each candidate length is one held entry's. Returns as
 * og_kv_tier_get, *n its n (0 when none). */
int og_kv_tier_get_prefix(og_kv_tier *t, uint64_t seed, bool exact, const int32_t *ids, int n_min, int n_max,
                          og_kv_hit *hit, int *n);
/* on: from now on a put whose image does not fit the writer's queue waits for
 * the writer to make room instead of dropping it (the engine's exit, when
 * every cached entry is to be written; never under the engine's lock while
 * serving). Cannot fail. */
void og_kv_tier_set_blocking(og_kv_tier *t, bool on);
/* Waits until the writer's queue is empty (tests, and before a restart's
 * files are read). Cannot fail. */
void og_kv_tier_sync(og_kv_tier *t);
/* The counters (og_kv_tier_stats). Cannot fail. */
void og_kv_tier_get_stats(og_kv_tier *t, og_kv_tier_stats *s);

/* A hash naming the model's weights for the directory's files: FNV-1a 64 over
 * the file's size, general.name, every tensor's name, type, shape and offset,
 * and the first 4 KiB of each tensor's data (two files of the same shapes with
 * other weights differ there). Cannot fail. */
uint64_t og_kv_model_id(const og_gguf *g);

#endif
