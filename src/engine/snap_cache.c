/* The state snapshots' prefix cache (snap_cache.h). */
#include "snap_cache.h"

#include "kv_pool.h"

#include <stdlib.h>
#include <string.h>

uint64_t og_snapc_seed(uint64_t key, bool exact) {
    const uint64_t k[2] = {key, exact};
    return og_fnv1a64(k, sizeof k, OG_FNV1A64_INIT);
}

uint64_t og_snapc_hash(uint64_t key, bool exact, const int32_t *ids, int n) {
    return og_fnv1a64(ids, (size_t)n * sizeof *ids, og_snapc_seed(key, exact));
}

/* Whether entry x is a candidate for ids under key and exact. */
static bool same_chain(const og_snapc_entry *x, uint64_t key, bool exact) { return x->key == key && x->exact == exact; }

int og_snapc_find(const og_snapc *c, uint64_t key, bool exact, const int32_t *ids, int n_max) {
    /* one pass over ids: the hash continued from one candidate length to the
     * next longer one; the longest that matches wins */
    int best = -1, done = 0; /* ids[0, done) are hashed into h */
    uint64_t h = og_snapc_seed(key, exact);
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
    if (c->on_evict) c->on_evict(c->evict_ctx, x);
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

/* The entry holding exactly ids[0, n) under key and exact (its hash h), or -1. */
static int find_exact(const og_snapc *c, uint64_t key, bool exact, const int32_t *ids, int n, uint64_t h) {
    for (int i = 0; i < c->n; i++) {
        const og_snapc_entry *x = &c->ent[i];
        if (x->snap.n_pos == n && same_chain(x, key, exact) && x->hash == h &&
            !memcmp(x->ids, ids, (size_t)n * sizeof *ids))
            return i;
    }
    return -1;
}

/* Room for need_bytes more within room_bytes (evicting, unless spare) and a
 * free slot, with ids[0, n) copied into *ids_out. Errors: OG_ERR_NOMEM. */
static og_status make_room(og_snapc *c, int n, const int32_t *ids, bool spare, uint64_t need_bytes, uint64_t room_bytes,
                           int32_t **ids_out, char *err, size_t errlen) {
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
    if (!(*ids_out = malloc((size_t)n * sizeof **ids_out))) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    memcpy(*ids_out, ids, (size_t)n * sizeof *ids);
    return OG_OK;
}

og_status og_snapc_take(og_snapc *c, const og_model *m, const og_run_ctx *rc, const og_kv *src, const int32_t *ids,
                        bool exact, bool spare, uint64_t need_bytes, uint64_t room_bytes, char *err, size_t errlen) {
    const uint64_t key = og_model_kv_key(m);
    const int n = src->n_pos;
    const uint64_t h = og_snapc_hash(key, exact, ids, n);
    const int have = find_exact(c, key, exact, ids, n, h);
    if (have >= 0) {
        c->ent[have].lru = ++c->tick;
        return OG_OK;
    }
    og_snapc_entry x = {.hash = h, .key = key, .exact = exact, .spare = spare};
    og_status st = make_room(c, n, ids, spare, need_bytes, room_bytes, &x.ids, err, errlen);
    if (!st && (st = og_kv_snapshot(m, rc, src, &x.snap, err, errlen))) free(x.ids);
    if (st) return st;
    x.lru = ++c->tick;
    c->ent[c->n++] = x;
    c->bytes += x.snap.bytes;
    return OG_OK;
}

og_status og_snapc_insert(og_snapc *c, og_kv_snap *snap, const int32_t *ids, bool exact, uint64_t room_bytes,
                          int *index, char *err, size_t errlen) {
    const int n = snap->n_pos;
    const uint64_t h = og_snapc_hash(snap->key, exact, ids, n);
    *index = find_exact(c, snap->key, exact, ids, n, h);
    if (*index >= 0) {
        og_kv_snap_free(snap);
        c->ent[*index].lru = ++c->tick;
        return OG_OK;
    }
    og_snapc_entry x = {.hash = h, .key = snap->key, .exact = exact};
    og_status st = make_room(c, n, ids, false, snap->bytes, room_bytes, &x.ids, err, errlen);
    if (st) return st;
    x.snap = *snap;
    memset(snap, 0, sizeof *snap);
    x.lru = ++c->tick;
    *index = c->n;
    c->ent[c->n++] = x;
    c->bytes += x.snap.bytes;
    return OG_OK;
}

og_status og_snapc_pack(const og_kv_snap *snap, const og_run_ctx *rc, void *dst, char *err, size_t errlen) {
    og_status st = og_kv_dev_copy(snap->dev, rc->stream, dst, snap->data, snap->bytes, false, err, errlen);
    if (!st && snap->host_bytes) memcpy((char *)dst + snap->bytes, snap->host, (size_t)snap->host_bytes);
    return st;
}

og_status og_snapc_unpack(const og_model *m, const og_run_ctx *rc, const void *payload, uint64_t bytes,
                          uint64_t data_bytes, int n_pos, int n_ctx, og_kv_snap *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (data_bytes > bytes || n_pos < 1 || n_ctx < n_pos)
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "prefix cache: a state image of %llu bytes split at %llu, "
                       "%d positions of %d", (unsigned long long)bytes, (unsigned long long)data_bytes, n_pos, n_ctx);
    og_kv_snap s = {.model = m, .key = og_model_kv_key(m), .dev = rc->dev, .bytes = data_bytes,
                    .host_bytes = bytes - data_bytes, .n_pos = n_pos, .n_ctx = n_ctx};
    /* og_kv_snap_free's allocations: the device's, or 64-byte aligned host memory */
    if (s.dev) {
        void *p = NULL;
        s.data = s.dev->ops->alloc(s.dev, data_bytes ? data_bytes : 1, &p, NULL, 0) ? NULL : p;
    } else {
        s.data = aligned_alloc(64, (size_t)((data_bytes + 64) / 64 * 64));
    }
    s.host = s.host_bytes ? malloc((size_t)s.host_bytes) : NULL;
    og_status st = s.data && (!s.host_bytes || s.host) ? OG_OK
                   : og_fail(err, errlen, OG_ERR_NOMEM, "prefix cache: no memory for a state of %llu bytes",
                             (unsigned long long)bytes);
    if (!st) st = og_kv_dev_copy(s.dev, rc->stream, s.data, payload, data_bytes, true, err, errlen);
    if (st) {
        og_kv_snap_free(&s);
        return st;
    }
    if (s.host_bytes) memcpy(s.host, (const char *)payload + data_bytes, (size_t)s.host_bytes);
    *out = s;
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
    while (c->n) {
        int old = 0;
        for (int i = 1; i < c->n; i++)
            if (c->ent[i].lru < c->ent[old].lru) old = i;
        c->ent[old].ref = 0;
        evict(c, old);
    }
    free(c->ent);
    memset(c, 0, sizeof *c);
}
