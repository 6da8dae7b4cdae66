/* The state snapshots' prefix cache (snap_cache.h). */
#include "snap_cache.h"

#include <stdlib.h>
#include <string.h>

static uint64_t hash_seed(uint64_t key, bool exact) {
    const uint64_t k[2] = {key, exact};
    return og_fnv1a64(k, sizeof k, OG_FNV1A64_INIT);
}

uint64_t og_snapc_hash(uint64_t key, bool exact, const int32_t *ids, int n) {
    return og_fnv1a64(ids, (size_t)n * sizeof *ids, hash_seed(key, exact));
}

/* Whether entry x is a candidate for ids under key and exact. */
static bool same_chain(const og_snapc_entry *x, uint64_t key, bool exact) { return x->key == key && x->exact == exact; }

int og_snapc_find(const og_snapc *c, uint64_t key, bool exact, const int32_t *ids, int n_max) {
    /* one pass over ids: the hash continued from one candidate length to the
     * next longer one; the longest that matches wins */
    int best = -1, done = 0; /* ids[0, done) are hashed into h */
    uint64_t h = hash_seed(key, exact);
    for (;;) {
        int next = -1; /* the shortest candidate length past done */
        for (int i = 0; i < c->n; i++) {
            const int n = c->ent[i].snap.n_pos;
            if (same_chain(&c->ent[i], key, exact) && n > done && n <= n_max && (next < 0 || n < next)) next = n;
        }
        if (next < 0) return best;
        h = og_fnv1a64(ids + done, (size_t)(next - done) * sizeof *ids, h);
        done = next;
        for (int i = 0; i < c->n; i++) {
            const og_snapc_entry *y = &c->ent[i];
            if (y->snap.n_pos == done && same_chain(y, key, exact) && y->hash == h &&
                !memcmp(y->ids, ids, (size_t)done * sizeof *ids))
                best = i;
        }
    }
}

int og_snapc_common(const og_snapc *c, uint64_t key, bool exact, const int32_t *ids, int n_max) {
    int best = 0;
    for (int i = 0; i < c->n; i++) {
        const og_snapc_entry *x = &c->ent[i];
        const int n = x->snap.n_pos < n_max ? x->snap.n_pos : n_max;
        int k = 0;
        if (same_chain(x, key, exact))
            while (k < n && x->ids[k] == ids[k]) k++;
        if (k > best) best = k;
    }
    return best;
}

og_status og_snapc_restore(og_snapc *c, int i, const og_model *m, const og_run_ctx *rc, og_kv *dst, char *err,
                           size_t errlen) {
    og_snapc_entry *x = &c->ent[i];
    x->ref++;
    og_status st = og_kv_restore(m, rc, &x->snap, dst, err, errlen);
    x->ref--;
    x->lru = ++c->tick;
    if (!st) x->spare = false; /* it served: an ordinary entry now */
    return st;
}

static void evict(og_snapc *c, int i) {
    og_snapc_entry *x = &c->ent[i];
    c->bytes -= x->snap.bytes;
    og_kv_snap_free(&x->snap);
    free(x->ids);
    c->ent[i] = c->ent[--c->n];
}

/* The unreferenced entry to evict first: spare ones, then the least recently used. */
static int lru(const og_snapc *c) {
    int best = -1;
    for (int i = 0; i < c->n; i++) {
        const og_snapc_entry *x = &c->ent[i], *b = best >= 0 ? &c->ent[best] : NULL;
        if (!x->ref && (!b || x->spare > b->spare || (x->spare == b->spare && x->lru < b->lru))) best = i;
    }
    return best;
}

int og_snapc_trim(og_snapc *c, uint64_t room_bytes) {
    int n = 0;
    for (int v; c->bytes > room_bytes && (v = lru(c)) >= 0; n++) evict(c, v);
    return n;
}

og_status og_snapc_take(og_snapc *c, const og_model *m, const og_run_ctx *rc, const og_kv *src, const int32_t *ids,
                        bool exact, bool spare, uint64_t need_bytes, uint64_t room_bytes, char *err, size_t errlen) {
    const uint64_t key = og_model_kv_key(m);
    const int n = src->n_pos;
    const uint64_t h = og_snapc_hash(key, exact, ids, n);
    for (int i = 0; i < c->n; i++) {
        og_snapc_entry *x = &c->ent[i];
        if (x->snap.n_pos == n && same_chain(x, key, exact) && x->hash == h &&
            !memcmp(x->ids, ids, (size_t)n * sizeof *ids)) {
            x->lru = ++c->tick;
            return OG_OK;
        }
    }
    if (need_bytes > room_bytes || (spare && c->bytes > room_bytes - need_bytes) ||
        (og_snapc_trim(c, room_bytes - need_bytes), c->bytes > room_bytes - need_bytes))
        return og_fail(err, errlen, OG_ERR_NOMEM, "prefix cache: no room for a state of %d positions", n);
    if (c->n == c->cap) {
        const int cap = c->cap ? 2 * c->cap : 8;
        og_snapc_entry *e = realloc(c->ent, (size_t)cap * sizeof *e);
        if (!e) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
        c->ent = e;
        c->cap = cap;
    }
    og_snapc_entry x = {.hash = h, .key = key, .exact = exact, .spare = spare, .lru = ++c->tick};
    if (!(x.ids = malloc((size_t)n * sizeof *x.ids))) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    og_status st = og_kv_snapshot(m, rc, src, &x.snap, err, errlen);
    if (st) {
        free(x.ids);
        return st;
    }
    memcpy(x.ids, ids, (size_t)n * sizeof *ids);
    c->ent[c->n++] = x;
    c->bytes += x.snap.bytes;
    return OG_OK;
}

int og_snapc_referenced(const og_snapc *c) {
    int n = 0;
    for (int i = 0; i < c->n; i++) n += c->ent[i].ref != 0;
    return n;
}

og_status og_snapc_check(const og_snapc *c, char *err, size_t errlen) {
    uint64_t bytes = 0;
    for (int i = 0; i < c->n; i++) {
        const og_snapc_entry *x = &c->ent[i];
        bytes += x->snap.bytes;
        if (x->ref)
            return og_fail(err, errlen, OG_ERR_STATE, "prefix cache entry %d: %d references between steps", i, x->ref);
        if (!x->snap.data || x->snap.n_pos < 1 || !x->ids)
            return og_fail(err, errlen, OG_ERR_STATE, "prefix cache entry %d holds no state", i);
        if (x->hash != og_snapc_hash(x->key, x->exact, x->ids, x->snap.n_pos) || x->key != x->snap.key)
            return og_fail(err, errlen, OG_ERR_STATE, "prefix cache entry %d: its hash is not its ids'", i);
    }
    if (bytes != c->bytes)
        return og_fail(err, errlen, OG_ERR_STATE, "prefix cache: %llu bytes held, %llu counted", (unsigned long long)bytes,
                       (unsigned long long)c->bytes);
    return OG_OK;
}

void og_snapc_free(og_snapc *c) {
    while (c->n) evict(c, c->n - 1);
    free(c->ent);
    memset(c, 0, sizeof *c);
}
