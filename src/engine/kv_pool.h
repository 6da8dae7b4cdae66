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
 * og_kv_tier: where an evicted cached block goes instead of being dropped:
 * host RAM (--cache-ram SIZE, LRU), then a directory (--cache-dir DIR, bounded
 * by --cache-dir-size, LRU by last use), one file per block named by the
 * model's id and the block's chain hash (MODEL-HASH.kvb, 16 hex digits each).
 * Files of other models are left alone. A file holds a header (the model's identity hash, kv-type, block
 * geometry, the chain key, a checksum of the payload and one of the header)
 * then the payload; it is written atomically (og_write_file_atomic: temporary
 * file, fsync, rename). A file that is truncated, corrupt, of another model,
 * kv-type or geometry is skipped with one log line, at start and at lookup, and
 * never trusted. Files are in the host's byte order (x86-64: little-endian). */
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

/* The key of a cached block: the engine's chain hash (pc_hash: its parent's
 * hash, the exact flag and its ids), the parent's hash (0 for a first block),
 * the flag and the ids, all compared on lookup. */
typedef struct og_kv_key {
    uint64_t hash, parent_hash;
    bool exact;
    int32_t ids[OG_KV_BLOCK];
} og_kv_key;

typedef struct og_kv_tier_config {
    uint64_t ram_bytes;        /* host RAM for evicted blocks, bytes; 0: no RAM tier */
    const char *dir;           /* the directory for evicted blocks, or NULL: none (made if missing, with its parents) */
    uint64_t dir_bytes;        /* the directory's bound, bytes (files' sizes) */
    uint64_t model_id;         /* og_kv_model_id of the model */
    uint32_t kv_type;          /* og_kv_type of the blocks */
    uint32_t n_layer, row_elems, elem_bytes; /* geometry: [n_layer][OG_KV_BLOCK][row_elems] of elem_bytes */
    const og_logger *log;
} og_kv_tier_config;

typedef struct og_kv_tier_stats {
    uint64_t ram_blocks, ram_bytes;   /* held now */
    uint64_t disk_blocks, disk_bytes; /* files indexed now, their bytes */
    uint64_t ram_hits, disk_hits;     /* blocks read back, in all */
    uint64_t ram_stored, disk_stored; /* blocks put there, in all */
    uint64_t disk_skipped;            /* files refused (corrupt, truncated, foreign), in all */
    uint64_t disk_errors;             /* writes that failed (logged), in all */
} og_kv_tier_stats;

typedef struct og_kv_tier og_kv_tier;

/* Makes the tiers; with a directory, creates it if missing and indexes the
 * block files it holds (files are named by a hash of the model's id, the
 * kv-type and the geometry: the others' are left alone, one log line says how
 * many; ours have their headers checked, one log line per file refused; the
 * oldest removed while over dir_bytes). Errors: OG_ERR_INVALID_ARG (neither tier,
 * zero geometry), OG_ERR_IO (the directory cannot be made or read), OG_ERR_NOMEM. */
og_status og_kv_tier_create(const og_kv_tier_config *c, og_kv_tier **out, char *err, size_t errlen);
/* Writes what RAM holds to the directory (when there is one), then frees; NULL
 * is fine. No status: a write that fails is logged and counted, then dropped. */
void og_kv_tier_free(og_kv_tier *t);
/* Keeps payload (host memory, the block's bytes) under key: in RAM when there
 * is a RAM tier (the least recently used ones leave for the directory, or are
 * dropped, while over ram_bytes), else in the directory. A key already held is
 * kept as it is. No status: a block that cannot be kept is dropped (a failed
 * write is logged and counted). */
void og_kv_tier_put(og_kv_tier *t, const og_kv_key *key, const void *payload);
/* Looks key up, RAM first: copies its payload into out (host memory, the
 * block's bytes). Returns 1 when found in RAM (the entry leaves RAM: the
 * block goes back to the pool), 2 in the directory (the file stays), 0 when
 * not held or the file was refused (logged once, dropped from the index). */
int og_kv_tier_get(og_kv_tier *t, const og_kv_key *key, void *out);
/* The counters (og_kv_tier_stats). Cannot fail. */
void og_kv_tier_get_stats(const og_kv_tier *t, og_kv_tier_stats *s);

/* A hash naming the model's weights for the directory's files: FNV-1a 64 over
 * the file's size, general.name, every tensor's name, type, shape and offset,
 * and the first 4 KiB of each tensor's data (two files of the same shapes with
 * other weights differ there). Cannot fail. */
uint64_t og_kv_model_id(const og_gguf *g);

#endif
