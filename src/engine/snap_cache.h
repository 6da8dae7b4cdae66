/* The prefix cache of a model whose per-sequence state is not paged blocks
 * (og_model_info.kv_snapshot: deepseek4, deepseek41; issue 17 item 2),
 * internal to the engine. An entry is one og_kv_snap, a whole state at n_pos
 * positions, keyed by a chain hash of the token ids [0, n_pos) seeded with the
 * model's og_model_kv_key and the exact flag (og_batch.exact), and verified by
 * the ids themselves: an entry of another model or option set, or of the other
 * numerics, never matches. A state is restorable at any position (its
 * compressor states' partial blocks are part of it), so entries are not tied
 * to block boundaries. Entries are refcounted while a sequence is restored
 * from one and evicted least recently used first within the caller's byte
 * room (spare entries first). One thread at a time (the engine's lock). */
#ifndef OG_SNAP_CACHE_H
#define OG_SNAP_CACHE_H

#include "og_model.h"

typedef struct og_snapc_entry {
    og_kv_snap snap;     /* the state at snap.n_pos */
    int32_t *ids;        /* [snap.n_pos] the tokens it holds */
    uint64_t hash;       /* og_snapc_hash(key, exact, ids, n_pos) */
    uint64_t key;        /* og_model_kv_key when taken */
    bool exact;          /* computed with canonical rows (a strata_reproducible request) */
    int ref;             /* restores in progress */
    bool spare;          /* taken only into free room (a finished sequence's end): evicted before the
                            others; a restore makes it an ordinary entry */
    uint64_t lru;        /* tick of its last use */
} og_snapc_entry;

typedef struct og_snapc {
    og_snapc_entry *ent; /* [n] (cap allocated) */
    int n, cap;
    uint64_t tick;
    uint64_t bytes;      /* sum of the entries' snap.bytes */
    /* Called with each entry an eviction (og_snapc_trim, og_snapc_take's room,
     * og_snapc_free) is about to free, or NULL: the engine hands it to the
     * tiers (--cache-ram / --cache-dir). */
    void (*on_evict)(void *ctx, const og_snapc_entry *x);
    void *evict_ctx;
} og_snapc;

/* The chain hash of ids[0, n): FNV-1a 64 over the key, the exact flag and each
 * id's 4 bytes, continued id by id (so the hash of a prefix is a step of the
 * hash of the whole). Cannot fail. */
uint64_t og_snapc_hash(uint64_t key, bool exact, const int32_t *ids, int n);

/* The seed of og_snapc_hash under key and exact: the hash of no ids (the
 * tiers continue it over a prefix, og_kv_tier_get_prefix). Cannot fail. */
uint64_t og_snapc_seed(uint64_t key, bool exact);

/* The entry holding the longest prefix of ids[0, n_max] (n_pos <= n_max) under
 * key and exact, or -1. Never fails. */
int og_snapc_find(const og_snapc *c, uint64_t key, bool exact, const int32_t *ids, int n_max);

/* The longest run of leading ids (at most n_max) that ids shares with any
 * entry under key and exact: where a prompt leaves the cached ones (a system
 * prompt shared by requests that differ after it). Never fails. */
int og_snapc_common(const og_snapc *c, uint64_t key, bool exact, const int32_t *ids, int n_max);

/* Restores entry i into dst (og_kv_restore; the entry referenced meanwhile,
 * its LRU tick bumped). Errors: og_kv_restore's (dst stays empty). */
og_status og_snapc_restore(og_snapc *c, int i, const og_model *m, const og_run_ctx *rc, og_kv *dst, char *err,
                           size_t errlen);

/* Takes src's state (og_kv_snapshot) as the entry for ids[0, src->n_pos)
 * unless an entry holds exactly those already (its tick is bumped: OG_OK).
 * Before taking, unreferenced entries are evicted (spare ones, then least
 * recently used first) until room_bytes holds the held bytes plus need_bytes
 * (the state's size by og_model_info's formula, an upper bound); if it
 * cannot, nothing is taken (OG_ERR_NOMEM). spare: take it only if that needs
 * no eviction (OG_ERR_NOMEM otherwise), and evict it before the others.
 * Errors: og_kv_snapshot's, OG_ERR_NOMEM. */
og_status og_snapc_take(og_snapc *c, const og_model *m, const og_run_ctx *rc, const og_kv *src, const int32_t *ids,
                        bool exact, bool spare, uint64_t need_bytes, uint64_t room_bytes, char *err, size_t errlen);

/* Takes *snap (a state of m at snap->n_pos positions, e.g. one read back from
 * a tier: og_snapc_unpack) as the entry for ids[0, snap->n_pos), within
 * room_bytes as og_snapc_take (never spare). On success *snap is the cache's
 * (zeroed) and *index the entry; an entry holding those ids already is kept
 * (its index, *snap freed). Errors: OG_ERR_NOMEM (no room: *snap stays the
 * caller's). */
og_status og_snapc_insert(og_snapc *c, og_kv_snap *snap, const int32_t *ids, bool exact, uint64_t room_bytes,
                          int *index, char *err, size_t errlen);

/* The host image of a snapshot for the tiers: its device (or host) part
 * [snap->bytes] then its host part [snap->host_bytes], into dst (host memory
 * of both). rc: the stream of a device snapshot. Errors: the device's copy's. */
og_status og_snapc_pack(const og_kv_snap *snap, const og_run_ctx *rc, void *dst, char *err, size_t errlen);

/* The snapshot of m a tier's image holds (og_snapc_pack's layout, bytes in
 * all, data_bytes of them the device part), at n_pos positions of an n_ctx
 * context, made in rc->dev's memory (NULL: the host's). A wrong split or size
 * shows at og_kv_restore (its walk checks every piece). Errors:
 * OG_ERR_INVALID_ARG (data_bytes over bytes, n_pos < 1), OG_ERR_NOMEM, the
 * device's copy's (*out stays empty). */
og_status og_snapc_unpack(const og_model *m, const og_run_ctx *rc, const void *payload, uint64_t bytes,
                          uint64_t data_bytes, int n_pos, int n_ctx, og_kv_snap *out, char *err, size_t errlen);

/* Evicts unreferenced entries, least recently used first, while the held
 * bytes pass room_bytes. Returns the entries evicted. */
int og_snapc_trim(og_snapc *c, uint64_t room_bytes);

/* Referenced entries (0 between steps). */
int og_snapc_referenced(const og_snapc *c);

/* The consistency check (og_engine_check): every entry's hash is its ids',
 * its snapshot holds its n_pos, refcounts are 0 (no restore in flight) and
 * the bytes add up. Errors: OG_ERR_STATE naming the entry. */
og_status og_snapc_check(const og_snapc *c, char *err, size_t errlen);

/* Frees every entry (evicted least recently used first, so on_evict sees
 * them in use order) and the table (c itself is the caller's). */
void og_snapc_free(og_snapc *c);

#endif
