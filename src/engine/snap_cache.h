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
} og_snapc;

/* The chain hash of ids[0, n): FNV-1a 64 over the key, the exact flag and each
 * id's 4 bytes, continued id by id (so the hash of a prefix is a step of the
 * hash of the whole). Cannot fail. */
uint64_t og_snapc_hash(uint64_t key, bool exact, const int32_t *ids, int n);

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

/* Evicts unreferenced entries, least recently used first, while the held
 * bytes pass room_bytes. Returns the entries evicted. */
int og_snapc_trim(og_snapc *c, uint64_t room_bytes);

/* Referenced entries (0 between steps). */
int og_snapc_referenced(const og_snapc *c);

/* The consistency check (og_engine_check): every entry's hash is its ids',
 * its snapshot holds its n_pos, refcounts are 0 (no restore in flight) and
 * the bytes add up. Errors: OG_ERR_STATE naming the entry. */
og_status og_snapc_check(const og_snapc *c, char *err, size_t errlen);

/* Frees every entry and the table (c itself is the caller's). */
void og_snapc_free(og_snapc *c);

#endif
