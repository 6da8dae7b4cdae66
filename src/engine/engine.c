/* The scheduler: continuous batching with chunked prefill (og_engine.h). One
 * mutex guards the queue, the running set, every sequence's output and the
 * metrics; the forward call itself runs without it, so readers are never
 * blocked for a whole step. A running sequence is freed only by the scheduler
 * (a reader that leaves marks it), so the forward never sees freed memory. */
#include "og_engine.h"
#include "snap_cache.h"

#include "kv_pool.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef enum { SEQ_QUEUED, SEQ_RUNNING, SEQ_RETIRED } seq_state;

struct og_seq {
    og_seq *prev, *next;          /* every live sequence of the engine */
    seq_state state;
    bool reader_gone;
    int32_t *prompt;
    int n_prompt, n_fed, chunk;   /* chunk: prompt tokens in the current step */
    og_kv kv;
    og_sampler *smp;
    int max_tokens, n_stop, n_top;
    bool logprobs, need_feed;     /* need_feed: last sampled token not yet in the cache */
    bool reproducible, report_eog;
    int32_t *forced;              /* teacher forcing: generated tokens 0..n_forced-1 */
    int n_forced, n_sampled;      /* n_sampled: tokens accepted so far, EOG included */
    char *stop[OG_ENGINE_MAX_STOP];
    size_t max_stop;
    int32_t last;
    og_detok dt;
    char *gen;                    /* generated text (NUL-terminated) */
    size_t gen_len, gen_cap, released, taken;
    og_tok_out *toks;
    int n_toks, cap_toks, toks_taken;
    int n_gen;
    uint64_t step_submit, step_first; /* og_seq_out's */
    og_finish finish;
    int stop_index;               /* og_seq_out's */
    char error[256];
    og_gmatch *gm;                /* constrained decoding, or NULL; touched only by the scheduler */
    bool gm_failed;               /* the mask could not be computed this step */
    int *pc_ent;                  /* [n_prompt / OG_KV_BLOCK] prefix-cache entries of kv.blocks[0..n_shared) */
    int n_shared;                 /* leading blocks of kv owned by the prefix cache (refcounted, read-only) */
    bool pc_stop;                 /* no more of its blocks go into the cache (an equal one was there) */
    int n_cached;                 /* prompt tokens read from the cache */
    int snap_mid, snap_at;        /* a kv_snapshot model's prefix cache: its states at these prompt positions go
                                     into the cache (prefill cuts its chunks there); 0: none */
    int32_t *ids;                 /* [cap_ids] the prompt then every accepted token (kv_snapshot models: the
                                     state's ids when it retires, snap_retire), or NULL */
    int n_ids, cap_ids;
    int kv_most;                  /* KV pool blocks it may hold at most (seq_kv_most), charged from its
                                     admission to its retirement (paged models) */
    og_seq *fork_of;              /* a choice of og_engine_submit_n waiting for this leader's prompt: it is
                                     admitted with it, prefills nothing and forks its cache and first
                                     token's logits when the leader's prompt is in (fork_kv); NULL after */
};

/* One prefix-cache block: the KV rows of OG_KV_BLOCK prompt positions whose
 * ids, and all ids before them, are known (the chain: parent + ids). */
typedef struct pc_entry {
    void *blk;                    /* the block (og_kv's layout), in dev's memory or the host's */
    og_device *dev;
    og_kv_type type;              /* its elements' (the model's kv-type) */
    uint64_t hash;                /* chain hash: parent's hash, exact flag and the block's ids */
    int parent;                   /* entry of the previous block, -1 for the first */
    uint32_t parent_gen;          /* the parent's gen when this was made: a reused slot never matches */
    uint32_t gen;                 /* bumped each time the slot is reused */
    int ref;                      /* sequences holding it */
    bool used, exact;             /* exact: computed with canonical rows (og_batch.exact) */
    int next;                     /* next entry in its hash bucket, -1 */
    uint64_t lru;                 /* tick of its last use */
    int32_t ids[OG_KV_BLOCK];
} pc_entry;

#define RATE_SAMPLES 64

struct og_engine {
    og_engine_config cfg;
    int32_t n_vocab;
    pthread_t thread;
    bool started, draining;
    double drain_deadline;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_out;
    og_seq **queue, **running;
    int n_queue, n_running;
    og_seq *all;                  /* list head of live sequences */
    int32_t *b_tokens, *b_seq;
    bool *b_want, *b_exact;
    int *b_share;                 /* [2][parallel]: prompt tokens left, this step's share */
    og_kv **b_kvs;
    float *logits;                /* [parallel][n_vocab] */
    og_engine_metrics met;
    double rate_t[RATE_SAMPLES];
    uint64_t rate_n[RATE_SAMPLES];
    int rate_pos, rate_count;
    uint64_t *layer_routes, *layer_hits; /* [n_layer] copies taken after each step */
    uint32_t in_flight;           /* the placement's copies not yet published, as of the last look */
    og_fwd_scratch scratch;       /* the forward pass's activations, sized once for batch_tokens / parallel */
    og_vocab *vocab;              /* token byte trie for grammar masks: built at the first grammar step */
    float *fork_row;              /* [n_vocab] a leader's first logits row, unmodified, for each forked choice */
    pc_entry *pc;                 /* [pc_cap] the prefix cache (NULL: off) */
    int *pc_bucket;               /* [pc_nbucket] first entry per hash bucket, -1 */
    int pc_cap, pc_nbucket, pc_used;
    uint64_t pc_tick;
    og_kv_pool *kv_pool;          /* every paged block (kv_paged models), or NULL */
    og_kv_alloc kv_alloc;         /* the sequences' allocator over kv_pool (pool_take / pool_give) */
    og_kv_type kv_type;           /* the pool's blocks' element type */
    og_kv_tier *tier;             /* --cache-ram / --cache-dir: where evicted cached blocks go, or NULL */
    char *tier_buf;               /* [kv_block_bytes] host staging of a block going to the tier (one coming
                                     back is in the tier's hit) */
    bool tier_spill;              /* pc_evict hands blocks to the tier (false while freeing without a directory) */
    bool sc_on;                   /* the prefix cache of a kv_snapshot model (snap_cache.h): whole states */
    og_snapc sc;
    og_kv_tier *stier;            /* --cache-ram / --cache-dir for those states (evicted ones), or NULL */
    char *stier_buf;              /* [stier_cap] host staging of a state going to it */
    uint64_t stier_cap;
    bool stier_spill;             /* evicted states go to stier (false while freeing without a directory) */
    uint64_t sc_budget;           /* bytes: parallel x the state of ctx positions (the plan's KV term) */
};

/* FNV-1a, 64 bits, over the parent's hash, the exact flag and the ids. */
static uint64_t pc_hash(uint64_t parent, bool exact, const int32_t *ids) {
    uint64_t h = 1469598103934665603ull ^ parent;
    h = (h ^ (uint64_t)exact) * 1099511628211ull;
    for (int i = 0; i < OG_KV_BLOCK; i++) {
        uint32_t v = (uint32_t)ids[i];
        for (int b = 0; b < 4; b++) h = (h ^ ((v >> (8 * b)) & 0xffu)) * 1099511628211ull;
    }
    return h;
}

/* The entry holding the block after `parent` (-1: the first) with these ids,
 * or -1: hash first, then the chain link and every id compared. */
static int pc_find(const og_engine *e, int parent, bool exact, const int32_t *ids, uint64_t *hash) {
    const uint64_t ph = parent >= 0 ? e->pc[parent].hash : 0;
    *hash = pc_hash(ph, exact, ids);
    for (int i = e->pc_bucket[*hash & (uint64_t)(e->pc_nbucket - 1)]; i >= 0; i = e->pc[i].next) {
        const pc_entry *c = &e->pc[i];
        if (c->hash == *hash && c->parent == parent && c->exact == exact &&
            (parent < 0 || c->parent_gen == e->pc[parent].gen) && !memcmp(c->ids, ids, sizeof c->ids))
            return i;
    }
    return -1;
}

/* An evicted entry's block, full and with its chain key, goes to the tiers
 * (og_kv_tier_put: RAM, else the directory) by way of host memory. A copy that
 * fails drops the block (logged by the device's error). */
static void pc_spill(og_engine *e, const pc_entry *c) {
    const og_kv_key k = {.hash = c->hash, .parent_hash = c->parent >= 0 ? e->pc[c->parent].hash : 0,
                         .exact = c->exact, .n_ids = OG_KV_BLOCK, .ids = c->ids};
    const uint64_t bytes = og_kv_pool_block_bytes(e->kv_pool);
    char err[256];
    if (og_kv_dev_copy(c->dev, e->cfg.rc.stream, e->tier_buf, c->blk, bytes, false, err, sizeof err)) {
        og_log(e->cfg.log, OG_LOG_WARN, "prefix cache: a block not kept in the tiers: %s", err);
        return;
    }
    og_kv_tier_put(e->tier, &k, NULL, e->tier_buf, bytes);
}

/* Removes an unreferenced entry from its bucket and gives its block back to
 * the pool (its contents to the tiers first, when there are any), then its
 * descendants (unreferenced too: a sequence holding a block holds its chain).
 * Returns the entries evicted. */
static int pc_evict(og_engine *e, int i) {
    pc_entry *c = &e->pc[i];
    const uint32_t gen = c->gen;
    int *link = &e->pc_bucket[c->hash & (uint64_t)(e->pc_nbucket - 1)];
    while (*link != i) link = &e->pc[*link].next;
    *link = c->next;
    if (e->tier && e->tier_spill) pc_spill(e, c);
    og_kv_pool_give(e->kv_pool, c->blk);
    c->blk = NULL;
    c->used = false;
    c->gen++;
    e->pc_used--;
    int n = 1;
    for (int k = 0; k < e->pc_cap; k++)
        if (e->pc[k].used && e->pc[k].parent == i && e->pc[k].parent_gen == gen) n += pc_evict(e, k);
    return n;
}

/* The least recently used unreferenced entry, or -1. */
static int pc_lru(const og_engine *e) {
    int best = -1;
    for (int i = 0; i < e->pc_cap; i++)
        if (e->pc[i].used && !e->pc[i].ref && (best < 0 || e->pc[i].lru < e->pc[best].lru)) best = i;
    return best;
}

/* og_kv_alloc.take over the pool (lock held): a free block, else the least
 * recently used unreferenced cached one's (evicted: to the tiers when there are
 * any), else NULL: every block is held by a sequence. */
static void *pool_take(void *self) {
    og_engine *e = self;
    for (;;) {
        void *b = og_kv_pool_take(e->kv_pool);
        if (b) return b;
        const int v = e->pc ? pc_lru(e) : -1;
        if (v < 0) return NULL;
        pc_evict(e, v);
    }
}

static void pool_give(void *self, void *blk) {
    og_engine *e = self;
    og_kv_pool_give(e->kv_pool, blk);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void og_seq_out_free(og_seq_out *o) {
    if (!o) return;
    free(o->text);
    free(o->toks);
    o->text = NULL;
    o->toks = NULL;
}

size_t og_stop_holdback(const char *text, size_t len, const char *const *stop, int n_stop) {
    size_t best = 0;
    for (int i = 0; i < n_stop; i++) {
        size_t sl = strlen(stop[i]);
        for (size_t k = (sl - 1 < len ? sl - 1 : len); k > best; k--)
            if (!memcmp(text + len - k, stop[i], k)) {
                best = k;
                break;
            }
    }
    return best;
}

/* Copies the placement's counters into the metrics (lock held, or before the
 * scheduler starts; on the placement's thread). */
static void placement_metrics(og_engine *e) {
    if (!e->met.placement) return;
    og_placement_stats ps;
    og_placement_get_stats(e->cfg.placement, &ps);
    e->met.expert_routes = ps.selections;
    e->met.expert_hits = ps.hits;
    e->met.migrations = ps.migrations;
    e->met.pcie_bytes = ps.pcie_bytes;
    e->met.resident_experts = ps.resident_experts;
    e->in_flight = ps.in_flight;
    og_placement_layer_hits(e->cfg.placement, e->layer_routes, e->layer_hits, og_model_get_info(e->cfg.model)->n_layer);
}

static void snap_admit(og_engine *e, og_seq *s);
static void snap_retire(og_engine *e, og_seq *s);
static void snap_ids_push(og_seq *s, int32_t id);
static uint64_t snap_state_bytes(const og_model_info *mi, int n);
static void snap_spill(void *ctx, const og_snapc_entry *x);
static uint64_t snap_room(const og_engine *e);
static int snap_from_tier(og_engine *e, og_seq *s, int n_mem, int *i, og_status *st);

og_status og_engine_create(const og_engine_config *cfg, og_engine **out, char *err, size_t errlen) {
    *out = NULL;
    if (!cfg->model || !cfg->tok || !cfg->rc.kern || !cfg->rc.pool)
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "engine: model, tokenizer, kernels and pool are required");
    if (cfg->parallel < 1 || cfg->parallel > 4096)
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "parallel must be in 1..4096 (got %d)", cfg->parallel);
    if (cfg->batch_tokens < cfg->parallel || cfg->batch_tokens > (1 << 20))
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "batch-tokens must be at least parallel (%d) and at most %d (got %d)",
                       cfg->parallel, 1 << 20, cfg->batch_tokens);
    const og_model_info *mi = og_model_get_info(cfg->model);
    if (cfg->ctx < 2 || (uint64_t)cfg->ctx > mi->n_ctx_train)
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "ctx must be in 2..%u, the model's context (got %d)",
                       mi->n_ctx_train, cfg->ctx);
    if (cfg->queue < 0 || cfg->queue > 1000000)
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "queue must be in 0..1000000 (got %d)", cfg->queue);
    og_engine *e = calloc(1, sizeof *e);
    if (!e) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    e->cfg = *cfg;
    e->n_vocab = (int32_t)mi->n_vocab;
    size_t nb = (size_t)cfg->batch_tokens + (size_t)cfg->parallel;
    e->queue = calloc((size_t)cfg->queue + (size_t)cfg->parallel + 1, sizeof *e->queue); /* not yet admitted ones too */
    e->running = calloc((size_t)cfg->parallel, sizeof *e->running);
    e->b_tokens = malloc(nb * sizeof *e->b_tokens);
    e->b_seq = malloc(nb * sizeof *e->b_seq);
    e->b_want = malloc(nb * sizeof *e->b_want);
    e->b_exact = malloc(nb * sizeof *e->b_exact);
    e->b_share = malloc(2 * (size_t)cfg->parallel * sizeof *e->b_share);
    e->b_kvs = malloc((size_t)cfg->parallel * sizeof *e->b_kvs);
    e->logits = malloc((size_t)cfg->parallel * (size_t)e->n_vocab * sizeof *e->logits);
    e->fork_row = malloc((size_t)e->n_vocab * sizeof *e->fork_row);
    pthread_mutex_init(&e->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&e->cv_work, &ca);
    pthread_cond_init(&e->cv_out, &ca);
    pthread_condattr_destroy(&ca);
    e->met.kv_blocks_total = cfg->kv_blocks ? cfg->kv_blocks : og_engine_kv_blocks(cfg->parallel, cfg->ctx);
    /* blocks are shared only where the model's whole per-sequence state is its
     * paged blocks (og_model_info.kv_paged) */
    if (!cfg->no_prefix_cache && !mi->kv_paged && !mi->kv_snapshot)
        og_log(cfg->log, OG_LOG_INFO, "prefix cache off: %s keeps per-sequence state outside the paged KV blocks",
               mi->arch);
    /* an unpaged state with snapshots: whole states at prompt positions (snap_admit) */
    e->sc_on = !cfg->no_prefix_cache && !mi->kv_paged && mi->kv_snapshot;
    e->sc_budget = (uint64_t)cfg->parallel * snap_state_bytes(mi, cfg->ctx);
    if (!cfg->no_prefix_cache && mi->kv_paged) {
        const int cap = (int)e->met.kv_blocks_total;
        for (e->pc_nbucket = 16; e->pc_nbucket < 2 * cap; e->pc_nbucket *= 2) {}
        e->pc = calloc((size_t)cap, sizeof *e->pc);
        e->pc_bucket = malloc((size_t)e->pc_nbucket * sizeof *e->pc_bucket);
        if (!e->pc || !e->pc_bucket) {
            og_engine_free(e);
            return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory for the prefix cache");
        }
        for (int i = 0; i < e->pc_nbucket; i++) e->pc_bucket[i] = -1;
        e->pc_cap = cap;
    }
    if (mi->kv_paged) { /* the pool: every block of every sequence and of the prefix cache, made once */
        og_status pst = e->met.kv_blocks_total > UINT32_MAX
                            ? og_fail(err, errlen, OG_ERR_INVALID_ARG, "%llu KV blocks: too many",
                                      (unsigned long long)e->met.kv_blocks_total)
                            : og_kv_pool_create(cfg->rc.dev, mi->kv_block_bytes, (uint32_t)e->met.kv_blocks_total,
                                                &e->kv_pool, err, errlen);
        if (pst) {
            og_engine_free(e);
            return pst;
        }
        e->kv_alloc = (og_kv_alloc){pool_take, pool_give, e};
        e->kv_type = mi->kv_elem_bytes == 2 ? OG_KV_F16 : OG_KV_F32;
        e->met.kv_block_bytes = mi->kv_block_bytes;
    }
    if ((e->pc || e->sc_on) && (cfg->cache_ram_bytes || cfg->cache_dir)) {
        /* the identity every entry's file names besides the weights (og_kv_model_id) and the kv-type: the
         * numerics, and for states the options they depend on (og_model_kv_key; deepseek2's blocks depend
         * on the kv-type alone) */
        const uint64_t num[3] = {e->pc ? 0 : og_model_kv_key(cfg->model), cfg->rc.host_numerics,
                                 cfg->rc.device_numerics};
        og_kv_tier_config tc = {.kind = e->pc ? OG_KV_TIER_BLOCKS : OG_KV_TIER_STATES, .ram_bytes = cfg->cache_ram_bytes,
                                .dir = cfg->cache_dir,
                                .dir_bytes = cfg->cache_dir_bytes ? cfg->cache_dir_bytes : OG_ENGINE_CACHE_DIR_BYTES,
                                .model_id = og_kv_model_id(og_model_gguf(cfg->model)),
                                .kv_key = og_fnv1a64(num, sizeof num, OG_FNV1A64_INIT), .arch = mi->arch,
                                .kv_type = mi->kv_elem_bytes == 2 ? OG_KV_F16 : OG_KV_F32, .log = cfg->log};
        if (e->pc) {
            tc.payload_bytes = mi->kv_block_bytes;
            tc.geom[0] = mi->n_layer;
            tc.geom[1] = OG_KV_BLOCK;
            tc.geom[2] = (uint32_t)(mi->kv_block_bytes / ((uint64_t)mi->n_layer * OG_KV_BLOCK * mi->kv_elem_bytes));
            tc.geom[3] = mi->kv_elem_bytes;
        } else { /* a state's size follows its n_pos; its rings' rows the context (no sound lower bound of
                  * its payload here: og_model_info does not give the window, so the floors are one id's file) */
            tc.geom[0] = mi->n_layer;
            tc.geom[1] = (uint32_t)cfg->ctx;
            tc.geom[2] = mi->kv_elem_bytes;
        }
        og_status tst = og_kv_tier_create(&tc, e->pc ? &e->tier : &e->stier, err, errlen);
        if (!tst && e->pc && !(e->tier_buf = malloc(mi->kv_block_bytes)))
            tst = og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
        if (tst) {
            og_engine_free(e);
            return tst;
        }
        e->tier_spill = e->pc != NULL;
        e->stier_spill = e->stier != NULL;
        if (e->stier) {
            e->sc.on_evict = snap_spill;
            e->sc.evict_ctx = e;
        }
    } else if (cfg->cache_ram_bytes || cfg->cache_dir) {
        /* asked for and not there: a warning that says why (it was an info line,
         * hidden by default, that said the prefix cache was off where V4's
         * whole-state cache is on) */
        og_log(cfg->log, OG_LOG_WARN, "--cache-ram / --cache-dir off: %s",
               cfg->no_prefix_cache ? "the prefix cache is off (--prefix-cache off)" : "this model has no prefix cache");
    }
    if (cfg->placement) og_placement_bind(cfg->placement, &e->cfg.rc);
    og_placement_stats ps;
    og_placement_get_stats(cfg->placement, &ps);
    e->met.placement = ps.device;
    if (e->met.placement) {
        e->layer_routes = calloc(mi->n_layer, sizeof *e->layer_routes);
        e->layer_hits = calloc(mi->n_layer, sizeof *e->layer_hits);
        if (!e->layer_routes || !e->layer_hits) {
            og_engine_free(e);
            return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
        }
    }
    if (!e->queue || !e->running || !e->b_tokens || !e->b_seq || !e->b_want || !e->b_exact || !e->b_share ||
        !e->b_kvs || !e->logits || !e->fork_row) {
        og_engine_free(e);
        return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory for the engine's batch buffers");
    }
    /* the forward steps' activations: a step holds at most batch_tokens tokens and
     * one logits row per running sequence (build_batch), so one allocation on the
     * device the forward runs on serves every step */
    og_status sst = og_fwd_scratch_reserve(cfg->model, &e->scratch, e->cfg.rc.dev, cfg->batch_tokens, cfg->parallel, err,
                                           errlen);
    if (sst) {
        og_engine_free(e);
        return sst;
    }
    e->cfg.rc.scratch = &e->scratch;
    placement_metrics(e); /* /metrics shows the initial set before the first step */
    *out = e;
    return OG_OK;
}

static void pc_admit(og_engine *e, og_seq *s);

/* s retires (lock held): the choices still waiting for it (og_seq.fork_of, its
 * prompt not in yet: cancelled or failed first) get the oldest live one as
 * their leader, which prefills the prompt itself (from the prefix cache where
 * it can); the oldest, so that a queued group keeps its leader at its head
 * (fork_group); no sequence keeps a pointer to s. */
static void fork_orphans(og_engine *e, og_seq *s) {
    og_seq *lead = NULL;
    for (og_seq *f = e->all; f; f = f->next) /* e->all is newest first */
        if (f->fork_of == s && f->finish == OG_FINISH_NONE && f->state != SEQ_RETIRED) lead = f;
    for (og_seq *f = e->all; f; f = f->next)
        if (f->fork_of == s)
            f->fork_of = f == lead || f->finish != OG_FINISH_NONE || f->state == SEQ_RETIRED ? NULL : lead;
    if (lead && lead->state == SEQ_RUNNING) pc_admit(e, lead); /* a queued one is admitted later */
}

/* Gives s's shared blocks back to the prefix cache (lock held): they stay
 * cached, unreferenced ones evictable; then frees its own blocks. */
static void seq_kv_free(og_engine *e, og_seq *s) {
    for (int j = 0; j < s->n_shared; j++) {
        pc_entry *c = &e->pc[s->pc_ent[j]];
        c->ref--;
        c->lru = ++e->pc_tick;
    }
    if (s->n_shared) {
        memmove(s->kv.blocks, s->kv.blocks + s->n_shared, (size_t)(s->kv.n_blocks - s->n_shared) * sizeof *s->kv.blocks);
        s->kv.n_blocks -= s->n_shared;
        s->n_shared = 0;
    }
    og_kv_free(&s->kv);
}

static void seq_free(og_engine *e, og_seq *s) {
    if (!s) return;
    seq_kv_free(e, s);
    free(s->pc_ent);
    free(s->ids);
    og_sampler_free(s->smp);
    og_gmatch_free(s->gm);
    for (int i = 0; i < s->n_stop; i++) free(s->stop[i]);
    free(s->prompt);
    free(s->forced);
    free(s->gen);
    free(s->toks);
    free(s);
}

/* Unlinks s from the engine's list and frees it (lock held). */
static void seq_destroy(og_engine *e, og_seq *s) {
    if (s->prev) s->prev->next = s->next;
    else e->all = s->next;
    if (s->next) s->next->prev = s->prev;
    seq_free(e, s);
}

/* The scheduler is done with s (lock held): its cache and sampler go at once. */
static void seq_retire(og_engine *e, og_seq *s) {
    fork_orphans(e, s);
    snap_retire(e, s);
    s->state = SEQ_RETIRED;
    seq_kv_free(e, s);
    memset(&s->kv, 0, sizeof s->kv);
    og_sampler_free(s->smp);
    s->smp = NULL;
    og_gmatch_free(s->gm);
    s->gm = NULL;
    if (s->finish == OG_FINISH_CANCEL) e->met.seqs_cancelled++;
    else e->met.seqs_finished++;
    if (s->reader_gone) seq_destroy(e, s);
}

/* Grows the generated-text buffer to hold at least `more` bytes beyond gen_len. */
static bool gen_reserve(og_seq *s, size_t more) {
    if (s->gen_len + more + 1 <= s->gen_cap) return true;
    size_t cap = s->gen_cap * 2;
    while (cap < s->gen_len + more + 1) cap *= 2;
    char *g = realloc(s->gen, cap);
    if (!g) return false;
    s->gen = g;
    s->gen_cap = cap;
    return true;
}

static void seq_end(og_seq *s, og_finish f) {
    if (s->finish != OG_FINISH_NONE) return;
    s->finish = f;
    /* the bytes of a character the output never finished (max_tokens cut it,
     * or it ended inside one) are dropped, not shown as U+FFFD: they are no
     * text. llama-server's stream drops them too (its non-streamed answer
     * keeps them); og_outparse_finish drops them the same way, so streamed and
     * non-streamed, parsed or not, give the same text. */
    s->dt.n_pending = 0;
    s->released = s->gen_len;
}

/* A new sequence for og_engine_submit(_n), checked and copied, not yet queued. */
static og_status seq_make(og_engine *e, const int32_t *prompt, int n_prompt, const og_seq_params *p, og_seq **out,
                          char *err, size_t errlen) {
    *out = NULL;
    if (n_prompt < 1) return og_fail(err, errlen, OG_ERR_INVALID_ARG, "the prompt is empty");
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= e->n_vocab)
            return og_fail(err, errlen, OG_ERR_INVALID_ARG, "prompt token %d (id %d) is outside the vocabulary (0..%d)",
                           i, prompt[i], e->n_vocab - 1);
    if (p->n_stop < 0 || p->n_stop > OG_ENGINE_MAX_STOP)
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "at most %d stop strings", OG_ENGINE_MAX_STOP);
    if (p->n_top < 0 || p->n_top > OG_ENGINE_MAX_TOP)
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "top log-probs must be in 0..%d", OG_ENGINE_MAX_TOP);
    if (p->max_tokens < -1) return og_fail(err, errlen, OG_ERR_INVALID_ARG, "max_tokens must be >= 0");
    if (p->n_forced < 0 || (p->n_forced && !p->forced))
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "forced tokens: %d ids but no array", p->n_forced);
    for (int i = 0; i < p->n_forced; i++)
        if (p->forced[i] < 0 || p->forced[i] >= e->n_vocab)
            return og_fail(err, errlen, OG_ERR_INVALID_ARG, "forced token %d (id %d) is outside the vocabulary (0..%d)",
                           i, p->forced[i], e->n_vocab - 1);
    const int ctx = e->cfg.ctx;
    if (n_prompt >= ctx || (p->max_tokens > 0 && (int64_t)n_prompt + p->max_tokens > ctx))
        return og_fail(err, errlen, OG_ERR_RANGE,
                       "this model's context is %d tokens; the prompt has %d tokens and %d more were asked for", ctx,
                       n_prompt, p->max_tokens > 0 ? p->max_tokens : 1);
    og_seq *s = calloc(1, sizeof *s);
    if (!s) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    s->kv.n_ctx = ctx; /* deepseek4's window rings: min(window, ctx) rows */
    og_status st = og_sampler_create(&p->sampling, e->n_vocab, &s->smp, err, errlen);
    if (st) {
        free(s);
        return st;
    }
    if (p->grammar && (st = og_gmatch_create(p->grammar, &s->gm, err, errlen))) {
        seq_free(e, s);
        return st;
    }
    s->prompt = malloc((size_t)n_prompt * sizeof *s->prompt);
    s->gen_cap = 256;
    s->gen = malloc(s->gen_cap);
    s->forced = p->n_forced ? malloc((size_t)p->n_forced * sizeof *s->forced) : NULL;
    bool oom = !s->prompt || !s->gen || (p->n_forced && !s->forced);
    for (int i = 0; i < p->n_stop && !oom; i++) {
        if (!p->stop[i] || !p->stop[i][0]) {
            seq_free(e, s);
            return og_fail(err, errlen, OG_ERR_INVALID_ARG, "stop strings must not be empty");
        }
        oom = !(s->stop[s->n_stop++] = strdup(p->stop[i]));
        size_t l = strlen(p->stop[i]);
        if (l > s->max_stop) s->max_stop = l;
    }
    if (oom) {
        seq_free(e, s);
        return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    }
    memcpy(s->prompt, prompt, (size_t)n_prompt * sizeof *prompt);
    s->gen[0] = 0;
    s->n_prompt = n_prompt;
    s->max_tokens = p->max_tokens;
    s->n_top = p->n_top;
    s->logprobs = p->logprobs || p->n_top > 0;
    s->reproducible = p->reproducible;
    s->report_eog = p->report_eog;
    s->n_forced = p->n_forced;
    if (p->n_forced) memcpy(s->forced, p->forced, (size_t)p->n_forced * sizeof *s->forced);
    *out = s;
    return OG_OK;
}

/* Queues s[0..n) together, s[1..n) as choices waiting for s[0] (og_seq.fork_of),
 * or frees them all: OG_ERR_STATE when the queue has no room for n. */
static og_status seq_enqueue(og_engine *e, og_seq **s, int n, char *err, size_t errlen) {
    pthread_mutex_lock(&e->mu);
    const char *why = e->draining                                                       ? "the server is shutting down"
                      : e->n_running + e->n_queue + n > e->cfg.parallel + e->cfg.queue ? "the queue is full"
                                                                                        : NULL;
    if (why) {
        e->met.seqs_rejected += (uint64_t)n;
        int running = e->n_running, queued = e->n_queue;
        pthread_mutex_unlock(&e->mu);
        for (int i = 0; i < n; i++) seq_free(e, s[i]);
        return og_fail(err, errlen, OG_ERR_STATE, "%s (%d running of %d, %d queued of %d); retry later", why, running,
                       e->cfg.parallel, queued, e->cfg.queue);
    }
    for (int i = 0; i < n; i++) {
        s[i]->state = SEQ_QUEUED;
        s[i]->stop_index = -1;
        s[i]->step_submit = e->met.steps;
        s[i]->fork_of = i ? s[0] : NULL;
        s[i]->next = e->all;
        if (e->all) e->all->prev = s[i];
        e->all = s[i];
        e->queue[e->n_queue++] = s[i];
    }
    e->met.seqs_admitted += (uint64_t)n;
    pthread_cond_signal(&e->cv_work);
    pthread_mutex_unlock(&e->mu);
    return OG_OK;
}

og_status og_engine_submit(og_engine *e, const int32_t *prompt, int n_prompt, const og_seq_params *p, og_seq **out,
                           char *err, size_t errlen) {
    og_status st = seq_make(e, prompt, n_prompt, p, out, err, errlen);
    if (!st && (st = seq_enqueue(e, out, 1, err, errlen))) *out = NULL;
    return st;
}

og_status og_engine_submit_n(og_engine *e, const int32_t *prompt, int n_prompt, const og_seq_params *p, int n,
                             og_seq **out, char *err, size_t errlen) {
    for (int i = 0; i < n; i++) out[i] = NULL;
    if (n < 1 || n > e->cfg.parallel)
        return og_fail(err, errlen, OG_ERR_INVALID_ARG,
                       "%d choices of one prompt, but they decode together and the engine runs %d sequences at once "
                       "(parallel): 1..%d", n, e->cfg.parallel, e->cfg.parallel);
    if (n > 1 && !og_model_get_info(e->cfg.model)->kv_fork)
        return og_fail(err, errlen, OG_ERR_UNSUPPORTED, "%d choices of one prompt, but %s's caches cannot fork", n,
                       og_model_get_info(e->cfg.model)->arch);
    og_status st = OG_OK;
    for (int i = 0; i < n && !st; i++) {
        og_seq_params q = *p;
        q.sampling.seed = p->sampling.seed + (uint64_t)i;
        st = seq_make(e, prompt, n_prompt, &q, &out[i], err, errlen);
    }
    if (!st) st = seq_enqueue(e, out, n, err, errlen);
    else
        for (int i = 0; i < n; i++) seq_free(e, out[i]);
    if (st)
        for (int i = 0; i < n; i++) out[i] = NULL;
    return st;
}

void og_seq_release(og_engine *e, og_seq *s) {
    if (!s) return;
    pthread_mutex_lock(&e->mu);
    s->reader_gone = true;
    if (s->state == SEQ_QUEUED) {
        for (int i = 0; i < e->n_queue; i++)
            if (e->queue[i] == s) {
                memmove(e->queue + i, e->queue + i + 1, (size_t)(e->n_queue - i - 1) * sizeof *e->queue);
                e->n_queue--;
                break;
            }
        seq_end(s, OG_FINISH_CANCEL);
        seq_retire(e, s); /* frees it: reader_gone */
    } else if (s->state == SEQ_RETIRED) {
        seq_destroy(e, s);
    } else {
        seq_end(s, OG_FINISH_CANCEL); /* the scheduler frees it before its next step */
        pthread_cond_signal(&e->cv_work);
    }
    pthread_mutex_unlock(&e->mu);
}

og_status og_seq_take(og_engine *e, og_seq *s, og_seq_out *o) {
    memset(o, 0, sizeof *o);
    pthread_mutex_lock(&e->mu);
    size_t n = s->released - s->taken;
    /* tokens whose text ends within the released text (all of them at the end) */
    int nt = s->toks_taken;
    while (nt < s->n_toks) {
        size_t end = nt + 1 < s->n_toks ? s->toks[nt + 1].text_start : s->gen_len;
        if (s->finish == OG_FINISH_NONE && end > s->released) break;
        nt++;
    }
    o->text = malloc(n + 1);
    o->toks = nt > s->toks_taken ? malloc((size_t)(nt - s->toks_taken) * sizeof *o->toks) : NULL;
    if (!o->text || (nt > s->toks_taken && !o->toks)) {
        pthread_mutex_unlock(&e->mu);
        og_seq_out_free(o);
        return OG_ERR_NOMEM;
    }
    memcpy(o->text, s->gen + s->taken, n);
    o->text[n] = 0;
    o->len = n;
    o->text_offset = s->taken;
    s->taken = s->released;
    if (nt > s->toks_taken) memcpy(o->toks, s->toks + s->toks_taken, (size_t)(nt - s->toks_taken) * sizeof *o->toks);
    o->n_toks = nt - s->toks_taken;
    s->toks_taken = nt;
    o->finish = s->taken == s->gen_len && nt == s->n_toks ? s->finish : OG_FINISH_NONE;
    o->stop_index = o->finish == OG_FINISH_STOP ? s->stop_index : -1;
    o->n_prompt = s->n_prompt;
    o->n_cached = s->n_cached;
    o->admitted = s->state != SEQ_QUEUED;
    o->n_gen = s->n_gen;
    o->step_submit = s->step_submit;
    o->step_first = s->step_first;
    memcpy(o->error, s->error, sizeof o->error);
    pthread_mutex_unlock(&e->mu);
    return OG_OK;
}

bool og_engine_wait(og_engine *e, double timeout_s) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double t = (double)ts.tv_nsec * 1e-9 + (timeout_s > 0 ? timeout_s : 0);
    ts.tv_sec += (time_t)t;
    ts.tv_nsec = (long)((t - floor(t)) * 1e9);
    pthread_mutex_lock(&e->mu);
    int rc = pthread_cond_timedwait(&e->cv_out, &e->mu, &ts);
    pthread_mutex_unlock(&e->mu);
    return rc != ETIMEDOUT;
}

/* A tier's counters into the metrics' fields f: RAM entries and bytes, disk
 * entries and bytes, RAM and disk stored, disk skipped and write errors; its
 * writer's queue and drops add to the totals. */
static void tier_metrics(og_kv_tier *t, og_engine_metrics *out, uint64_t *const f[8]) {
    og_kv_tier_stats ts;
    og_kv_tier_get_stats(t, &ts);
    const uint64_t v[8] = {ts.ram_entries, ts.ram_bytes,  ts.disk_entries, ts.disk_bytes,
                           ts.ram_stored,  ts.disk_stored, ts.disk_skipped, ts.disk_errors};
    for (int i = 0; i < 8; i++) *f[i] = v[i];
    out->cache_write_queue += ts.queued;
    out->cache_write_dropped += ts.queue_dropped;
}

og_status og_engine_metrics_get(og_engine *e, og_engine_metrics *out) {
    pthread_mutex_lock(&e->mu);
    *out = e->met;
    out->queued = e->n_queue;
    out->running = e->n_running;
    if (e->kv_pool) out->kv_blocks_free = og_kv_pool_n_free(e->kv_pool);
    if (e->tier)
        tier_metrics(e->tier, out, (uint64_t *const[8]){&out->cache_ram_blocks, &out->cache_ram_bytes,
                                                       &out->cache_disk_blocks, &out->cache_disk_bytes,
                                                       &out->cache_ram_stored, &out->cache_disk_stored,
                                                       &out->cache_disk_skipped, &out->cache_disk_errors});
    if (e->stier)
        tier_metrics(e->stier, out, (uint64_t *const[8]){&out->cache_ram_states, &out->cache_ram_state_bytes,
                                                        &out->cache_disk_states, &out->cache_disk_state_bytes,
                                                        &out->cache_ram_states_stored, &out->cache_disk_states_stored,
                                                        &out->cache_disk_states_skipped, &out->cache_disk_states_errors});
    out->gen_tok_per_s = 0;
    if (e->rate_count > 1) {
        double t_now = now_s();
        int newest = (e->rate_pos + RATE_SAMPLES - 1) % RATE_SAMPLES;
        int oldest = newest;
        for (int i = 1; i < e->rate_count; i++) {
            int k = (newest + RATE_SAMPLES - i) % RATE_SAMPLES;
            if (t_now - e->rate_t[k] > 10.0) break;
            oldest = k;
        }
        double dt = t_now - e->rate_t[oldest];
        if (oldest != newest && dt > 0 && t_now - e->rate_t[newest] < 10.0)
            out->gen_tok_per_s = (double)(e->rate_n[newest] - e->rate_n[oldest]) / dt;
    }
    pthread_mutex_unlock(&e->mu);
    return OG_OK;
}

/* A token was sampled (or forced) for s (lock held): text, stop strings, finish. */
static void seq_accept(og_engine *e, og_seq *s, int32_t id, float lp, const og_token_logprob *top, bool forced) {
    if (e->sc_on) snap_ids_push(s, id);
    s->last = id;
    s->need_feed = true;
    s->n_sampled++;
    const bool eog = !forced && og_tokenizer_is_eog(e->cfg.tok, id);
    if (eog && !(s->report_eog && s->logprobs)) {
        seq_end(s, OG_FINISH_STOP);
        return;
    }
    if (!eog) {
        s->n_gen++;
        e->met.gen_tokens++;
    }
    if (s->logprobs) {
        if (s->n_toks == s->cap_toks) {
            int cap = s->cap_toks ? 2 * s->cap_toks : 16;
            og_tok_out *t = realloc(s->toks, (size_t)cap * sizeof *t);
            if (!t) goto oom;
            s->toks = t;
            s->cap_toks = cap;
        }
        og_tok_out *t = &s->toks[s->n_toks++];
        t->id = id;
        t->logprob = lp;
        t->text_start = (uint32_t)s->gen_len;
        t->n_top = s->n_top;
        if (s->n_top) memcpy(t->top, top, (size_t)s->n_top * sizeof *top);
    }
    if (eog) { /* reported, no text */
        seq_end(s, OG_FINISH_STOP);
        return;
    }
    size_t before = s->gen_len;
    for (size_t want = 64;; want *= 2) {
        if (!gen_reserve(s, want)) goto oom;
        if (og_detok_push(e->cfg.tok, &s->dt, id, s->gen, s->gen_cap, &s->gen_len) >= 0) break;
        if (want > (1u << 24)) break; /* a token cannot be this long; keep going without its text */
    }
    if (s->n_stop && s->gen_len > before) {
        size_t from = before >= s->max_stop ? before - s->max_stop + 1 : 0, best = SIZE_MAX;
        int which = -1;
        for (int i = 0; i < s->n_stop; i++) {
            char *hit = memmem(s->gen + from, s->gen_len - from, s->stop[i], strlen(s->stop[i]));
            if (hit && (size_t)(hit - s->gen) < best) {
                best = (size_t)(hit - s->gen);
                which = i;
            }
        }
        if (best != SIZE_MAX) {
            s->stop_index = which;
            s->gen_len = best;
            s->gen[best] = 0;
            while (s->n_toks > s->toks_taken && s->toks[s->n_toks - 1].text_start >= best) s->n_toks--;
            s->finish = OG_FINISH_STOP; /* no flush: held-back bytes lie past the stop */
            s->released = s->gen_len;
            return;
        }
    }
    if (s->max_tokens >= 0 && s->n_gen >= s->max_tokens) seq_end(s, OG_FINISH_LENGTH);
    else if (s->n_prompt + s->n_gen >= e->cfg.ctx) seq_end(s, OG_FINISH_LENGTH);
    else s->released = s->gen_len - og_stop_holdback(s->gen, s->gen_len, (const char *const *)s->stop, s->n_stop);
    return;
oom:
    snprintf(s->error, sizeof s->error, "out of memory for the generated text");
    s->finish = OG_FINISH_ERROR;
    s->released = s->gen_len;
}

int og_prefill_share(const int *need, int n, int budget, int *take) {
    int left = budget > 0 ? budget : 0, active = 0;
    for (int i = 0; i < n; i++) {
        take[i] = 0;
        active += need[i] > 0;
    }
    while (left > 0 && active > 0) {
        int share = left / active;
        if (share == 0) { /* fewer tokens than sequences: one each, oldest first */
            for (int i = 0; i < n && left > 0; i++)
                if (take[i] < need[i]) {
                    take[i]++;
                    left--;
                }
            break;
        }
        for (int i = 0; i < n; i++) {
            if (take[i] >= need[i]) continue;
            int g = need[i] - take[i] < share ? need[i] - take[i] : share;
            take[i] += g;
            left -= g;
            active -= take[i] == need[i];
        }
    }
    return (budget > 0 ? budget : 0) - left;
}

/* One scheduler step's batch (lock held). Returns the token count (0: nothing).
 * The decoders come first, then the prefill budget is shared among the
 * prefilling sequences (og_prefill_share). */
static int build_batch(og_engine *e) {
    int n = 0, n_pre = 0;
    int *need = e->b_share, *take = e->b_share + e->cfg.parallel;
    for (int i = 0; i < e->n_running; i++) {
        og_seq *s = e->running[i];
        e->b_kvs[i] = &s->kv;
        s->chunk = 0;
        /* a waiting choice prefills nothing; a chunk ends at the snapshot's position */
        need[i] = s->fork_of                ? 0
                  : s->n_fed < s->snap_mid ? s->snap_mid - s->n_fed
                  : s->n_fed < s->snap_at  ? s->snap_at - s->n_fed
                                           : s->n_prompt - s->n_fed;
        n_pre += need[i] > 0;
        if (s->n_fed == s->n_prompt && s->need_feed) {
            e->b_tokens[n] = s->last;
            e->b_seq[n] = i;
            e->b_exact[n] = s->reproducible;
            e->b_want[n++] = true;
        }
    }
    if (n_pre == 0) return n;
    og_prefill_share(need, e->n_running, e->cfg.batch_tokens - n, take);
    for (int i = 0; i < e->n_running; i++) { /* admission order */
        og_seq *s = e->running[i];
        for (int j = 0; j < take[i]; j++) {
            e->b_tokens[n] = s->prompt[s->n_fed + j];
            e->b_seq[n] = i;
            e->b_exact[n] = s->reproducible;
            e->b_want[n++] = s->n_fed + j == s->n_prompt - 1;
        }
        s->chunk = take[i];
    }
    return n;
}

static void rate_sample(og_engine *e) {
    e->rate_t[e->rate_pos] = now_s();
    e->rate_n[e->rate_pos] = e->met.gen_tokens;
    e->rate_pos = (e->rate_pos + 1) % RATE_SAMPLES;
    if (e->rate_count < RATE_SAMPLES) e->rate_count++;
}

/* KV blocks held by every sequence the engine still knows, running, queued or
 * retired but not yet released by its reader (lock held): a sequence that kept
 * its cache past retirement shows here. */
static uint64_t kv_blocks_in_use(og_engine *e) {
    if (e->kv_pool) e->met.kv_blocks_free = og_kv_pool_n_free(e->kv_pool);
    uint64_t blocks = 0;
    for (const og_seq *s = e->all; s; s = s->next) blocks += (uint64_t)(s->kv.n_blocks - s->n_shared);
    uint64_t shared = 0, cached = 0;
    for (int i = 0; i < e->pc_cap; i++)
        if (e->pc[i].used) {
            shared += e->pc[i].ref > 0;
            cached += e->pc[i].ref == 0;
        }
    e->met.kv_blocks_shared = shared;
    e->met.kv_blocks_cached = cached;
    return blocks + shared;
}

/* A new cache entry for block blk (the pool's) after parent, referenced once
 * (lock held). Returns its slot, or -1 when the table is full. */
static int pc_add(og_engine *e, void *blk, int parent, uint64_t h, bool exact, const int32_t *ids) {
    int slot = -1;
    for (int i = 0; i < e->pc_cap && slot < 0; i++)
        if (!e->pc[i].used) slot = i;
    if (slot < 0) return -1;
    pc_entry *c = &e->pc[slot];
    c->blk = blk;
    c->dev = e->cfg.rc.dev;
    c->type = e->kv_type;
    c->hash = h;
    c->parent = parent;
    c->parent_gen = parent >= 0 ? e->pc[parent].gen : 0;
    c->ref = 1;
    c->used = true;
    c->exact = exact;
    c->lru = ++e->pc_tick;
    memcpy(c->ids, ids, sizeof c->ids);
    int *b = &e->pc_bucket[h & (uint64_t)(e->pc_nbucket - 1)];
    c->next = *b;
    *b = slot;
    e->pc_used++;
    return slot;
}

/* The block after parent with these ids from the tiers (lock held): into a
 * pool block (taken, evicting others where needed: the chain found so far is
 * referenced, so it stays), as a new entry referenced once. Returns its slot,
 * or -1 (not held, no block, a copy failed). */
static int pc_restore(og_engine *e, int parent, bool exact, const int32_t *ids) {
    og_kv_key k = {.parent_hash = parent >= 0 ? e->pc[parent].hash : 0, .exact = exact, .n_ids = OG_KV_BLOCK,
                   .ids = ids};
    k.hash = pc_hash(k.parent_hash, exact, ids);
    og_kv_hit hit;
    const int from = og_kv_tier_get(e->tier, &k, &hit);
    if (!from) return -1;
    void *blk = pool_take(e); /* may evict to the tier: the hit stays valid (only a get replaces it) */
    og_status st = blk ? OG_OK : OG_ERR_NOMEM;
    const uint64_t bytes = og_kv_pool_block_bytes(e->kv_pool);
    char err[256] = "no free block";
    if (!st) st = og_kv_dev_copy(e->cfg.rc.dev, e->cfg.rc.stream, blk, hit.payload, bytes, true, err, sizeof err);
    const int slot = st ? -1 : pc_add(e, blk, parent, k.hash, exact, ids);
    if (slot < 0) {
        if (blk) og_kv_pool_give(e->kv_pool, blk);
        if (from == 1) og_kv_tier_put(e->tier, &k, NULL, hit.payload, hit.bytes); /* it left RAM: back there */
        og_log(e->cfg.log, OG_LOG_WARN, "prefix cache: a %s block not restored: %s", from == 1 ? "RAM" : "disk", err);
        return -1;
    }
    if (from == 1) e->met.cache_ram_restored++;
    else e->met.cache_disk_restored++;
    return slot;
}

/* Admission (lock held): s shares the longest cached run of its leading full
 * prompt blocks, leaving at least one prompt token to prefill: from the pool,
 * then from the tiers (--cache-ram, --cache-dir) into pool blocks. Each block
 * found is referenced at once, so a block taken for the next one never evicts
 * the chain. */
static void pc_admit(og_engine *e, og_seq *s) {
    if (e->sc_on) {
        snap_admit(e, s);
        return;
    }
    const int n_full = s->n_prompt / OG_KV_BLOCK;
    if (!e->pc || !n_full) return;
    if (!s->pc_ent && !(s->pc_ent = malloc((size_t)n_full * sizeof *s->pc_ent))) return;
    int j = 0, parent = -1;
    for (; (j + 1) * OG_KV_BLOCK <= s->n_prompt - 1; j++) {
        uint64_t h;
        const int32_t *ids = s->prompt + j * OG_KV_BLOCK;
        int c = pc_find(e, parent, s->reproducible, ids, &h);
        if (c >= 0) e->pc[c].ref++;
        else if (e->tier) c = pc_restore(e, parent, s->reproducible, ids);
        if (c < 0) break;
        e->pc[c].lru = ++e->pc_tick;
        s->pc_ent[j] = parent = c;
    }
    if (!j) return;
    const int want = (s->kv.n_ctx + OG_KV_BLOCK - 1) / OG_KV_BLOCK;
    const int cap = j > want ? j : want;
    if (!(s->kv.blocks = malloc((size_t)cap * sizeof *s->kv.blocks))) {
        for (int k = 0; k < j; k++) e->pc[s->pc_ent[k]].ref--;
        return;
    }
    s->kv.cap_blocks = cap;
    for (int k = 0; k < j; k++) s->kv.blocks[k] = e->pc[s->pc_ent[k]].blk;
    s->kv.dev = e->pc[s->pc_ent[0]].dev;
    s->kv.type = e->pc[s->pc_ent[0]].type;
    s->kv.alloc = &e->kv_alloc;
    s->kv.n_blocks = s->n_shared = j;
    s->kv.n_pos = j * OG_KV_BLOCK;
    s->n_fed = s->n_cached = j * OG_KV_BLOCK;
    e->met.prefix_hits++;
    e->met.prefix_cached_tokens += (uint64_t)s->n_cached;
    e->met.prefix_blocks_reused += (uint64_t)j;
}

/* After a step (lock held): s's prompt blocks that are now full move into the
 * cache (s holds a reference); an entry with the same chain already there
 * (another sequence made it meanwhile) stops this sequence's caching. Space:
 * the blocks are s's own already (the pool's); one is evicted only when a
 * sequence needs a block (pool_take). */
static void pc_insert(og_engine *e, og_seq *s) {
    if (!e->pc || !s->pc_ent || s->pc_stop) return;
    while (!s->pc_stop && (s->n_shared + 1) * OG_KV_BLOCK <= s->n_fed && s->n_shared < s->kv.n_blocks) {
        const int j = s->n_shared, parent = j ? s->pc_ent[j - 1] : -1;
        uint64_t h;
        if (pc_find(e, parent, s->reproducible, s->prompt + j * OG_KV_BLOCK, &h) >= 0) {
            s->pc_stop = true;
            break;
        }
        /* every entry holds a pool block other than s's own ones: the table (one
         * slot per pool block) has room */
        const int slot = pc_add(e, s->kv.blocks[j], parent, h, s->reproducible, s->prompt + j * OG_KV_BLOCK);
        if (slot < 0) {
            s->pc_stop = true;
            break;
        }
        s->pc_ent[j] = slot;
        s->n_shared++;
    }
}

/* Before a step (lock held): the blocks in use. The pool bounds the cache:
 * a cached block is evicted only when a sequence needs its block (pool_take). */
static uint64_t pc_trim(og_engine *e) { return kv_blocks_in_use(e); }

/* Before a step (lock held): each sequence of the batch gets from the pool the
 * blocks its new positions need, so the forward pass (outside the lock) takes
 * none. Admission (kv_admit) keeps the running sequences' most within the
 * pool, so every block wanted here is free or a cached one to evict; a pool
 * that has none left all the same (an accounting fault) ends the sequence with
 * an error and the pass stops, so its blocks serve the older ones. Returns
 * false when one did: the batch is built again. */
static bool kv_reserve_step(og_engine *e, int n) {
    if (!e->kv_pool) return true;
    int *add = e->b_share; /* build_batch is done with it */
    for (int i = 0; i < e->n_running; i++) add[i] = 0;
    for (int t = 0; t < n; t++) add[e->b_seq[t]]++;
    bool ok = true;
    for (int i = 0; i < e->n_running; i++) {
        og_seq *s = e->running[i];
        og_kv *kv = &s->kv;
        const int need = (kv->n_pos + add[i] + OG_KV_BLOCK - 1) / OG_KV_BLOCK;
        if (!add[i] || kv->n_blocks >= need) continue;
        if (!kv->n_blocks) kv->dev = e->cfg.rc.dev, kv->type = e->kv_type, kv->alloc = &e->kv_alloc;
        if (need > kv->cap_blocks) {
            const int most = (e->cfg.ctx + OG_KV_BLOCK - 1) / OG_KV_BLOCK, cap = need > most ? need : most;
            float **nb = realloc(kv->blocks, (size_t)cap * sizeof *nb);
            if (!nb) {
                snprintf(s->error, sizeof s->error, "engine failure: out of memory for a block table");
                seq_end(s, OG_FINISH_ERROR);
                ok = false;
                continue;
            }
            kv->blocks = nb;
            kv->cap_blocks = cap;
        }
        while (kv->n_blocks < need) {
            void *b = pool_take(e);
            if (!b) break;
            kv->blocks[kv->n_blocks++] = b;
        }
        if (kv->n_blocks < need) {
            snprintf(s->error, sizeof s->error,
                     "the KV pool's %llu blocks of %d positions are all held by running sequences (%d more needed); "
                     "retry later", (unsigned long long)e->met.kv_blocks_total, OG_KV_BLOCK, need - kv->n_blocks);
            seq_end(s, OG_FINISH_ERROR);
            return false; /* its blocks go back at its retirement: the older ones go on with them */
        }
    }
    return ok;
}

/* The pool's blocks (lock held; og_engine_check): each is free xor one
 * sequence's own xor one cache entry's; none is lost. A running sequence's
 * block table is read too: the engine reserves a step's blocks under the lock
 * before the forward call, which then only reads the table. */
static og_status pool_walk(og_engine *e, char *err, size_t errlen) {
    og_status st = og_kv_pool_check(e->kv_pool, err, errlen);
    const uint32_t n = og_kv_pool_n_blocks(e->kv_pool);
    enum { NONE, FREE, OWN, CACHED };
    static const char *const what[] = {"nobody's", "free", "a sequence's", "a cache entry's"};
    uint8_t *who = st ? NULL : calloc(n, 1);
    if (!st && !who) st = og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    for (uint32_t i = 0; i < n && !st; i++) who[i] = og_kv_pool_is_free(e->kv_pool, i) ? FREE : NONE;
    for (const og_seq *s = e->all; s && !st; s = s->next)
        for (int j = s->n_shared; j < s->kv.n_blocks && !st; j++) {
            const int64_t b = og_kv_pool_index(e->kv_pool, s->kv.blocks[j]);
            if (b < 0) st = og_fail(err, errlen, OG_ERR_STATE, "a sequence's block %d is not one of the pool's", j);
            else if (who[b]) st = og_fail(err, errlen, OG_ERR_STATE, "pool block %lld is %s and a sequence's", (long long)b, what[who[b]]);
            else who[b] = OWN;
        }
    for (int i = 0; i < e->pc_cap && !st; i++) {
        if (!e->pc[i].used) continue;
        const int64_t b = og_kv_pool_index(e->kv_pool, e->pc[i].blk);
        if (b < 0) st = og_fail(err, errlen, OG_ERR_STATE, "cache entry %d's block is not one of the pool's", i);
        else if (who[b]) st = og_fail(err, errlen, OG_ERR_STATE, "pool block %lld is %s and cache entry %d's", (long long)b, what[who[b]], i);
        else who[b] = CACHED;
    }
    for (uint32_t i = 0; i < n && !st; i++)
        if (who[i] == NONE) st = og_fail(err, errlen, OG_ERR_STATE, "pool block %u is neither free nor held (lost)", i);
    free(who);
    return st;
}

/* ---- the prefix cache of a kv_snapshot model (snap_cache.h) ---------------- */

/* Admission (lock held, the scheduler's thread: a restore copies on its
 * stream): s restores the longest cached state of its prompt's leading ids,
 * leaving at least one prompt token to prefill, and is to leave its own state
 * at n_prompt - 1 (the last position before the one whose logits come first)
 * and where its prompt leaves the cached ones' ids (snap_mid: the next prompt
 * with that shared part, a system prompt, restores it), each when it is at
 * least a block and past what it restored. */
static void snap_admit(og_engine *e, og_seq *s) {
    const uint64_t key = og_model_kv_key(e->cfg.model);
    int i = og_snapc_find(&e->sc, key, s->reproducible, s->prompt, s->n_prompt - 1);
    const int common = og_snapc_common(&e->sc, key, s->reproducible, s->prompt, s->n_prompt - 1);
    char err[256];
    og_status st = OG_OK;
    const int from = e->stier ? snap_from_tier(e, s, i >= 0 ? e->sc.ent[i].snap.n_pos : 0, &i, &st) : 0;
    if (!from && i >= 0) st = og_snapc_restore(&e->sc, i, e->cfg.model, &e->cfg.rc, &s->kv, err, sizeof err);
    if (st)
        og_log(e->cfg.log, OG_LOG_WARN, "prefix cache: a cached state could not be restored (%s): prefilling in full",
               from ? "from the tiers" : err);
    else if (from || i >= 0) {
        s->n_fed = s->n_cached = s->kv.n_pos;
        e->met.prefix_hits++;
        e->met.prefix_cached_tokens += (uint64_t)s->n_cached;
    }
    const int at = s->n_prompt - 1;
    s->snap_at = at >= OG_KV_BLOCK && at > s->n_fed ? at : 0;
    s->snap_mid = common >= OG_KV_BLOCK && common > s->n_fed && common < at ? common : 0;
}

/* A state longer than the n_mem positions the cache holds for s's prompt,
 * from the tiers (lock held: the admission's): RAM, the writer's queue, the
 * directory. It goes into the cache (as entry *i, restored into s) when the
 * room holds it, else s is restored from it and it goes back to the tiers
 * (RAM). Returns og_kv_tier_get's 1 (RAM) or 2 (disk) with *st the restore's
 * status, 0 when the tiers hold none. */
static int snap_from_tier(og_engine *e, og_seq *s, int n_mem, int *i, og_status *st) {
    og_kv_hit hit;
    int n;
    const uint64_t seed = og_snapc_seed(og_model_kv_key(e->cfg.model), s->reproducible);
    const int from = og_kv_tier_get_prefix(e->stier, seed, s->reproducible, s->prompt, n_mem, s->n_prompt - 1, &hit, &n);
    if (!from) return 0;
    char err[256];
    og_kv_snap snap;
    *st = og_snapc_unpack(e->cfg.model, &e->cfg.rc, hit.payload, hit.bytes, hit.meta[0], n, (int)hit.meta[1], &snap,
                          err, sizeof err);
    if (!*st && !og_snapc_insert(&e->sc, &snap, s->prompt, s->reproducible, snap_room(e), i, err, sizeof err)) {
        *st = og_snapc_restore(&e->sc, *i, e->cfg.model, &e->cfg.rc, &s->kv, err, sizeof err);
    } else if (!*st) { /* no room in the cache: s from it, it back to the tiers */
        *st = og_kv_restore(e->cfg.model, &e->cfg.rc, &snap, &s->kv, err, sizeof err);
        og_kv_snap_free(&snap);
        const og_kv_key k = {.hash = og_fnv1a64(s->prompt, (size_t)n * sizeof *s->prompt, seed),
                             .exact = s->reproducible, .n_ids = n, .ids = s->prompt};
        og_kv_tier_put(e->stier, &k, hit.meta, hit.payload, hit.bytes);
    }
    if (*st) og_log(e->cfg.log, OG_LOG_WARN, "prefix cache: a state of %d positions from the %s: %s", n,
                    from == 1 ? "RAM tier" : "cache-dir", err);
    else if (from == 1) e->met.cache_ram_states_restored++;
    else e->met.cache_disk_states_restored++;
    return from;
}

/* A state for the tiers (lock held) by way of a host image (og_snapc_pack),
 * under the snap cache's hash of ids[0, snap->n_pos). A copy that fails
 * drops it (logged). */
static void snap_put(og_engine *e, const og_kv_snap *snap, const int32_t *ids, uint64_t hash, bool exact) {
    const uint64_t bytes = snap->bytes + snap->host_bytes;
    if (bytes > e->stier_cap) {
        char *b = realloc(e->stier_buf, (size_t)bytes);
        if (!b) return;
        e->stier_buf = b;
        e->stier_cap = bytes;
    }
    char err[256];
    if (og_snapc_pack(snap, &e->cfg.rc, e->stier_buf, err, sizeof err)) {
        og_log(e->cfg.log, OG_LOG_WARN, "prefix cache: a state not kept in the tiers: %s", err);
        return;
    }
    const og_kv_key k = {.hash = hash, .exact = exact, .n_ids = snap->n_pos, .ids = ids};
    const uint64_t meta[2] = {snap->bytes, (uint64_t)snap->n_ctx};
    og_kv_tier_put(e->stier, &k, meta, e->stier_buf, bytes);
}

/* An entry the snap cache evicts (og_snapc.on_evict, lock held) goes to the
 * tiers: spare ones too, an agent's next turn resends a finished sequence's
 * prompt and answer. */
static void snap_spill(void *ctx, const og_snapc_entry *x) {
    og_engine *e = ctx;
    if (e->stier && e->stier_spill) snap_put(e, &x->snap, x->ids, x->hash, x->exact);
}

/* A state the memory's room cannot take (snap_take, snap_retire: with
 * --parallel 1 a running sequence leaves none) goes to the tiers straight
 * from kv (lock held): a snapshot, its image, freed. */
static void snap_direct(og_engine *e, const og_kv *kv, const int32_t *ids, bool exact) {
    if (!e->stier || !e->stier_spill) return;
    og_kv_snap snap;
    char err[256];
    if (og_kv_snapshot(e->cfg.model, &e->cfg.rc, kv, &snap, err, sizeof err)) {
        og_log(e->cfg.log, OG_LOG_DEBUG, "prefix cache: a state not kept in the tiers: %s", err);
        return;
    }
    snap_put(e, &snap, ids, og_snapc_hash(snap.key, exact, ids, snap.n_pos), exact);
    og_kv_snap_free(&snap);
}

/* Bytes of a state of n positions by og_model_info's formula (at least what
 * one holds: its rows are floor(n / ratio) and its rings at most the window). */
static uint64_t snap_state_bytes(const og_model_info *mi, int n) {
    return (mi->kv_elems_fixed + (uint64_t)ceil((double)n * mi->kv_elems_per_token)) * mi->kv_elem_bytes;
}

/* What the cached states may hold (lock held): the budget less each running
 * sequence's state at its whole prompt and output so far, plus one. */
static uint64_t snap_room(const og_engine *e) {
    const og_model_info *mi = og_model_get_info(e->cfg.model);
    uint64_t live = 0;
    for (int i = 0; i < e->n_running; i++) {
        const og_seq *s = e->running[i];
        const int n = s->n_prompt + s->n_gen + 1;
        live += snap_state_bytes(mi, n < e->cfg.ctx ? n : e->cfg.ctx);
    }
    return live < e->sc_budget ? e->sc_budget - live : 0;
}

/* After a step (lock held): s's prefill reached a snapshot position. */
static void snap_take(og_engine *e, og_seq *s) {
    if (!e->sc_on || !s->n_fed || (s->n_fed != s->snap_at && s->n_fed != s->snap_mid)) return;
    if (s->n_fed == s->snap_mid) s->snap_mid = 0;
    else s->snap_at = 0;
    char err[256];
    og_status st = og_snapc_take(&e->sc, e->cfg.model, &e->cfg.rc, &s->kv, s->prompt, s->reproducible, false,
                                 snap_state_bytes(og_model_get_info(e->cfg.model), s->n_fed), snap_room(e), err,
                                 sizeof err);
    if (st) og_log(e->cfg.log, OG_LOG_DEBUG, "prefix cache: %s", err);
    if (st == OG_ERR_NOMEM) snap_direct(e, &s->kv, s->prompt, s->reproducible);
    e->met.prefix_states = (uint64_t)e->sc.n;
    e->met.prefix_state_bytes = e->sc.bytes;
}

/* An accepted token of s (lock held) after its prompt in s->ids; out of
 * memory: no ids, no state kept at its end. */
static void snap_ids_push(og_seq *s, int32_t id) {
    if (s->n_ids < 0) return;
    if (s->n_ids + 1 > s->cap_ids) {
        const int cap = s->cap_ids ? 2 * s->cap_ids : s->n_prompt + 64;
        int32_t *v = realloc(s->ids, (size_t)cap * sizeof *v);
        if (!v) {
            s->n_ids = -1;
            return;
        }
        if (!s->ids) memcpy(v, s->prompt, (size_t)s->n_prompt * sizeof *v), s->n_ids = s->n_prompt;
        s->ids = v;
        s->cap_ids = cap;
    }
    s->ids[s->n_ids++] = id;
}

/* s retires (lock held): a finished sequence's state (its prompt and the
 * tokens it fed back, the answer an agent's next turn may resend: not when the
 * chat template drops the reasoning) goes into the cache when the room the
 * others leave holds it without evicting anything (a spare entry: evicted
 * first). */
static void snap_retire(og_engine *e, og_seq *s) {
    if (!e->sc_on || !s->kv.arch || (s->finish != OG_FINISH_STOP && s->finish != OG_FINISH_LENGTH) || s->n_ids < 0 ||
        s->kv.n_pos <= s->n_prompt || s->kv.n_pos != s->n_ids - (s->need_feed ? 1 : 0))
        return;
    char err[256]; /* a spare entry: the prompts' states are the ones that must hit */
    const og_status st = og_snapc_take(&e->sc, e->cfg.model, &e->cfg.rc, &s->kv, s->ids, s->reproducible, true,
                                       snap_state_bytes(og_model_get_info(e->cfg.model), s->kv.n_pos), snap_room(e),
                                       err, sizeof err);
    if (st) og_log(e->cfg.log, OG_LOG_DEBUG, "prefix cache: %s", err);
    if (st == OG_ERR_NOMEM) snap_direct(e, &s->kv, s->ids, s->reproducible);
    e->met.prefix_states = (uint64_t)e->sc.n;
    e->met.prefix_state_bytes = e->sc.bytes;
}

/* Before a step (lock held): the cached states within the room the running
 * sequences leave. */
static void snap_trim(og_engine *e) {
    if (!e->sc_on) return;
    og_snapc_trim(&e->sc, snap_room(e));
    e->met.prefix_states = (uint64_t)e->sc.n;
    e->met.prefix_state_bytes = e->sc.bytes;
}

og_status og_engine_check(og_engine *e, char *err, size_t errlen) {
    og_status st = OG_OK;
    pthread_mutex_lock(&e->mu);
    int *ref = e->pc_cap ? calloc((size_t)e->pc_cap, sizeof *ref) : NULL;
    if (e->pc_cap && !ref) st = og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    for (const og_seq *s = e->all; s && !st; s = s->next) {
        /* a running sequence's kv is the forward pass's while a step runs (outside the lock): not read here */
        if ((s->state != SEQ_RUNNING && s->n_shared > s->kv.n_blocks) || (s->n_shared && !e->pc))
            st = og_fail(err, errlen, OG_ERR_STATE, "a sequence shares %d blocks it does not hold", s->n_shared);
        for (int j = 0; j < s->n_shared && !st; j++) {
            const int c = s->pc_ent[j];
            if (c < 0 || c >= e->pc_cap || !e->pc[c].used || (s->state != SEQ_RUNNING && e->pc[c].blk != s->kv.blocks[j]) ||
                e->pc[c].parent != (j ? s->pc_ent[j - 1] : -1) ||
                memcmp(e->pc[c].ids, s->prompt + j * OG_KV_BLOCK, sizeof e->pc[c].ids))
                st = og_fail(err, errlen, OG_ERR_STATE, "a sequence's shared block %d is not its cache entry %d", j, c);
            else ref[c]++;
        }
    }
    int used = 0;
    for (int i = 0; i < e->pc_cap && !st; i++) {
        const pc_entry *c = &e->pc[i];
        used += c->used;
        if (c->ref != ref[i] || c->ref < 0 || (!c->used && (c->ref || c->blk)))
            st = og_fail(err, errlen, OG_ERR_STATE, "cache entry %d: refcount %d, %d sequences hold it", i, c->ref, ref[i]);
        else if (c->used && c->parent >= 0 && (!e->pc[c->parent].used || e->pc[c->parent].gen != c->parent_gen))
            st = og_fail(err, errlen, OG_ERR_STATE, "cache entry %d: its parent %d is gone", i, c->parent);
        else if (c->used && (!c->blk || c->hash != pc_hash(c->parent >= 0 ? e->pc[c->parent].hash : 0, c->exact, c->ids)))
            st = og_fail(err, errlen, OG_ERR_STATE, "cache entry %d: its hash is not its chain's", i);
        if (c->used && !st) {
            int k = e->pc_bucket[c->hash & (uint64_t)(e->pc_nbucket - 1)];
            while (k >= 0 && k != i) k = e->pc[k].next;
            if (k != i) st = og_fail(err, errlen, OG_ERR_STATE, "cache entry %d is not in its hash bucket", i);
        }
    }
    if (!st && used != e->pc_used)
        st = og_fail(err, errlen, OG_ERR_STATE, "%d cache entries in use, %d counted", used, e->pc_used);
    if (!st && e->kv_pool) st = pool_walk(e, err, errlen);
    /* the budget, when no step is in flight (running sequences' caches belong to the scheduler) */
    if (!st && !e->n_running && kv_blocks_in_use(e) + e->met.kv_blocks_cached > e->met.kv_blocks_total)
        st = og_fail(err, errlen, OG_ERR_STATE, "%llu blocks held, over the budget of %llu",
                     (unsigned long long)(kv_blocks_in_use(e) + e->met.kv_blocks_cached),
                     (unsigned long long)e->met.kv_blocks_total);
    int64_t most = 0; /* what admission charged the running sequences (kv_admit): within the pool */
    for (int i = 0; i < e->n_running && e->kv_pool; i++) most += e->running[i]->kv_most;
    if (!st && (uint64_t)most > e->met.kv_blocks_total)
        st = og_fail(err, errlen, OG_ERR_STATE, "the running sequences may hold %lld KV blocks, over the pool's %llu",
                     (long long)most, (unsigned long long)e->met.kv_blocks_total);
    if (!st && e->sc_on) st = og_snapc_check(&e->sc, err, errlen);
    if (!st && e->sc_on && !e->n_running && e->sc.bytes > e->sc_budget)
        st = og_fail(err, errlen, OG_ERR_STATE, "prefix cache: %llu bytes of states held, over the budget of %llu",
                     (unsigned long long)e->sc.bytes, (unsigned long long)e->sc_budget);
    free(ref);
    pthread_mutex_unlock(&e->mu);
    return st;
}

/* ---- constrained decoding hooks (og_grammar.h) ----------------------------
 * Masks are computed after the forward step, outside the lock: only the
 * scheduler thread touches a matcher, and the sequences' rows are split over
 * the pool's threads. */
typedef struct mask_job {
    og_engine *e;
    int n;                        /* batch tokens */
} mask_job;

static void mask_rows(void *ctx, int ith, int nth) {
    const mask_job *j = ctx;
    og_engine *e = j->e;
    int k = 0, g = 0; /* k: logits row; g: rows with a grammar, dealt round-robin to the threads */
    for (int t = 0; t < j->n; t++) {
        if (!e->b_want[t]) continue;
        og_seq *s = e->running[e->b_seq[t]];
        float *row = e->logits + (size_t)k++ * (size_t)e->n_vocab;
        if (!s->gm || g++ % nth != ith) continue;
        if (og_gmatch_apply(s->gm, e->vocab, row, e->n_vocab)) s->gm_failed = true;
    }
}

/* Masks the rows of this step's sequences that have a grammar. Returns the
 * number of masks applied. */
static int grammar_masks(og_engine *e, int n) {
    int n_gm = 0;
    for (int t = 0; t < n; t++) n_gm += e->b_want[t] && e->running[e->b_seq[t]]->gm;
    if (!n_gm) return 0;
    if (!e->vocab && og_vocab_create(e->cfg.tok, &e->vocab, NULL, 0)) {
        for (int t = 0; t < n; t++)
            if (e->b_want[t] && e->running[e->b_seq[t]]->gm) e->running[e->b_seq[t]]->gm_failed = true;
        return 0;
    }
    mask_job j = {e, n};
    if (n_gm > 1) og_pool_run(e->cfg.rc.pool, mask_rows, &j);
    else mask_rows(&j, 0, 1);
    return n_gm;
}

/* After sampling id for s (lock held): advances its matcher; an id the mask
 * did not allow (or a failed mask) ends the sequence with an error. Log-probs
 * of masked tokens are reported as -9999 (JSON has no -Infinity), as OpenAI does. */
static bool grammar_advance(og_engine *e, og_seq *s, int32_t id, float *lp, og_token_logprob *top) {
    if (!s->gm) return true;
    og_status st = s->gm_failed ? OG_ERR_NOMEM : og_gmatch_accept(s->gm, e->vocab, id);
    if (!st) {
        if (!(*lp > -9999.0f)) *lp = -9999.0f;
        for (int i = 0; i < s->n_top; i++)
            if (!(top[i].logprob > -9999.0f)) top[i].logprob = -9999.0f;
        return true;
    }
    snprintf(s->error, sizeof s->error, "constrained decoding failed: %s",
             st == OG_ERR_NOMEM ? "out of memory" : "the sampled token is outside the grammar's mask");
    seq_end(s, OG_FINISH_ERROR);
    return false;
}

/* Samples s's next token from row (lock held; row is changed: penalties, bias). */
static void sample_token(og_engine *e, og_seq *s, float *row, og_token_logprob *top) {
    float lp = 0;
    int32_t id = og_sampler_sample(s->smp, row, s->logprobs ? &lp : NULL, top, s->n_top);
    const bool forced = s->n_sampled < s->n_forced;
    if (forced) { /* teacher forcing: the fed id's log-prob under the same distribution */
        id = s->forced[s->n_sampled];
        lp = og_sampler_logprob(row, e->n_vocab, id);
    }
    if (!s->step_first) s->step_first = e->met.steps;
    if (s->finish == OG_FINISH_NONE && grammar_advance(e, s, id, &lp, top)) seq_accept(e, s, id, lp, top, forced);
}

/* The queue's head and the choices queued behind it that wait for it
 * (og_engine_submit_n queues them together, in order; lock held). */
static int fork_group(const og_engine *e) {
    int g = 1;
    while (g < e->n_queue && e->queue[g]->fork_of == e->queue[0]) g++;
    return g;
}

/* The leader's prompt ends in this step's row (lock held): each choice waiting
 * for it samples its first token from its own copy of the row, as the leader
 * is about to (same logits, same grammar state; its own sampler and seed). */
static void fork_sample(og_engine *e, og_seq *lead, const float *row, og_token_logprob *top) {
    for (int i = 0; i < e->n_running; i++) {
        og_seq *f = e->running[i];
        if (f->fork_of != lead || f->finish != OG_FINISH_NONE) continue;
        memcpy(e->fork_row, row, (size_t)e->n_vocab * sizeof *e->fork_row);
        sample_token(e, f, e->fork_row, top);
    }
}

/* The leader's prompt is in its cache (lock held, after pc_insert): each
 * waiting choice gets the prompt's cache, the leader's prefix-cache blocks
 * shared (one more reference each) and its own blocks copied (the partial last
 * one; full ones too when the cache is off or did not take them: og_kv_fork),
 * and goes on decoding from the token fork_sample gave it. */
static void fork_kv(og_engine *e, og_seq *lead) {
    char err[256];
    for (int i = 0; i < e->n_running; i++) {
        og_seq *f = e->running[i];
        if (f->fork_of != lead) continue;
        f->fork_of = NULL;
        if (f->finish != OG_FINISH_NONE) continue;
        const int n_full = f->n_prompt / OG_KV_BLOCK;
        og_status st = lead->n_shared && !f->pc_ent && !(f->pc_ent = malloc((size_t)n_full * sizeof *f->pc_ent))
                           ? og_fail(err, sizeof err, OG_ERR_NOMEM, "out of memory")
                           : og_kv_fork(e->cfg.model, &e->cfg.rc, &lead->kv, lead->n_shared, &f->kv, err, sizeof err);
        if (st) {
            snprintf(f->error, sizeof f->error, "engine failure: the choice's cache could not be forked: %s", err);
            seq_end(f, OG_FINISH_ERROR);
            continue;
        }
        for (int j = 0; j < lead->n_shared; j++) {
            f->pc_ent[j] = lead->pc_ent[j];
            e->pc[f->pc_ent[j]].ref++;
            e->pc[f->pc_ent[j]].lru = ++e->pc_tick;
        }
        f->n_shared = lead->n_shared;
        f->pc_stop = true; /* its prompt's blocks are the leader's business */
        f->n_fed = f->n_prompt;
        f->n_cached = lead->n_cached;
    }
}

/* The KV pool blocks s may hold at most: its fed positions grow to
 * n_prompt + max_tokens - 1 (the last sampled token is never fed), or to
 * ctx - 1 (it ends at the context), shared prompt blocks counted as its own.
 * 0 for a model without a pool. */
static int seq_kv_most(const og_engine *e, const og_seq *s) {
    if (!e->kv_pool) return 0;
    int64_t pos = s->max_tokens >= 0 ? (int64_t)s->n_prompt + s->max_tokens - 1 : (int64_t)e->cfg.ctx - 1;
    if (pos > e->cfg.ctx - 1) pos = e->cfg.ctx - 1;
    if (pos < s->n_prompt) pos = s->n_prompt;
    return (int)((pos + OG_KV_BLOCK - 1) / OG_KV_BLOCK);
}

/* Whether the queue's head group (group sequences: a prompt and the choices
 * forking it) may start now (lock held). Its sequences' most (seq_kv_most)
 * plus the running ones' must fit the pool, so a step never lacks a block
 * and no mix of growing sequences can hold the pool between them: a group
 * that does not fit now waits in the queue, holding nothing, until running
 * ones retire. One whose most exceeds the whole pool can never run: its
 * sequences end with an error saying so (admitted, then retired as any
 * ended one). Always true without a pool. */
static bool kv_admit(og_engine *e, int group) {
    if (!e->kv_pool) return true;
    int64_t held = 0, want = 0;
    for (int i = 0; i < e->n_running; i++) held += e->running[i]->kv_most;
    for (int k = 0; k < group; k++) want += seq_kv_most(e, e->queue[k]);
    const uint64_t total = e->met.kv_blocks_total;
    if ((uint64_t)want > total) {
        const og_seq *h = e->queue[0];
        for (int k = 0; k < group; k++) {
            og_seq *s = e->queue[k];
            snprintf(s->error, sizeof s->error,
                     "the request needs up to %lld KV blocks of %d positions (a prompt of %d tokens, up to %d more "
                     "generated%s) and the KV pool holds %llu in all: shorten the prompt or max_tokens, or give the "
                     "server a larger --ctx x --parallel", (long long)want, OG_KV_BLOCK, h->n_prompt,
                     h->max_tokens >= 0 ? h->max_tokens : e->cfg.ctx - h->n_prompt,
                     group > 1 ? ", for each of its choices" : "", (unsigned long long)total);
            seq_end(s, OG_FINISH_ERROR);
        }
        return true;
    }
    return (uint64_t)(held + want) <= total;
}

static void *scheduler(void *arg) {
    og_engine *e = arg;
    char err[512];
    og_token_logprob top[OG_ENGINE_MAX_TOP];
    pthread_mutex_lock(&e->mu);
    for (;;) {
        /* retire what ended (or was cancelled) since the last step */
        for (int i = 0; i < e->n_running;) {
            og_seq *s = e->running[i];
            if (s->finish != OG_FINISH_NONE) {
                memmove(e->running + i, e->running + i + 1, (size_t)(e->n_running - i - 1) * sizeof *e->running);
                e->n_running--;
                seq_retire(e, s);
            } else {
                i++;
            }
        }
        if (e->draining && now_s() >= e->drain_deadline) {
            while (e->n_queue) {
                og_seq *s = e->queue[--e->n_queue];
                seq_end(s, OG_FINISH_CANCEL);
                seq_retire(e, s);
            }
            for (int i = 0; i < e->n_running; i++) seq_end(e->running[i], OG_FINISH_CANCEL);
            while (e->n_running) seq_retire(e, e->running[--e->n_running]);
        }
        while (e->n_running < e->cfg.parallel && e->n_queue) {
            const int group = fork_group(e); /* the head and the choices waiting for it come in together */
            if (e->n_running + group > e->cfg.parallel) break;
            if (!kv_admit(e, group)) break; /* the pool cannot hold it beside the running ones yet: it waits */
            for (int k = 0; k < group; k++) {
                og_seq *s = e->queue[0];
                memmove(e->queue, e->queue + 1, (size_t)(e->n_queue - 1) * sizeof *e->queue);
                e->n_queue--;
                s->state = SEQ_RUNNING;
                s->kv_most = s->finish == OG_FINISH_NONE ? seq_kv_most(e, s) : 0;
                e->running[e->n_running++] = s;
                if (s->finish != OG_FINISH_NONE) continue; /* kv_admit: it can never fit */
                if (s->max_tokens == 0) seq_end(s, OG_FINISH_LENGTH);
                else if (!s->fork_of) pc_admit(e, s);
            }
        }
        e->met.kv_blocks_used = pc_trim(e);
        snap_trim(e);
        int n = build_batch(e);
        if (n > 0 && !kv_reserve_step(e, n)) continue; /* a sequence without blocks ended: retire it, build again */
        if (n == 0) {
            if (e->in_flight) { /* at rest: copies that completed become resident without another step */
                /* the wait for the copies runs without the engine lock (submissions,
                 * cancels and /metrics go on meanwhile); only this thread touches the
                 * placement. Then the loop looks again: work may have arrived. */
                const uint32_t before = e->in_flight;
                pthread_mutex_unlock(&e->mu);
                const uint32_t left = og_placement_idle(e->cfg.placement);
                pthread_mutex_lock(&e->mu);
                placement_metrics(e);
                if (left < before) continue;
            }
            bool any_ended = false;
            for (int i = 0; i < e->n_running; i++) any_ended |= e->running[i]->finish != OG_FINISH_NONE;
            pthread_cond_broadcast(&e->cv_out);
            if (any_ended) continue;
            if (e->draining && e->n_queue == 0) break;
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            ts.tv_nsec += 100000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&e->cv_work, &e->mu, &ts);
            continue;
        }
        const int n_seq = e->n_running;
        int n_prompt_tok = 0;
        for (int i = 0; i < n_seq; i++) n_prompt_tok += e->running[i]->chunk;
        pthread_mutex_unlock(&e->mu);

        og_batch b = {.n_tok = n, .tokens = e->b_tokens, .seq = e->b_seq, .logits = e->b_want, .exact = e->b_exact};
        double t0 = now_s();
        err[0] = 0;
        og_status st = og_model_forward_batch(e->cfg.model, &e->cfg.rc, e->b_kvs, n_seq, &b, e->logits, err, sizeof err);
        double dt = now_s() - t0;
        double t_mask = now_s();
        int n_masks = st ? 0 : grammar_masks(e, n);
        t_mask = now_s() - t_mask;
        char merr[256] = "";
        /* a failed swap stops the migration and leaves the slots as they were: keep serving */
        if (!st) (void)og_placement_step(e->cfg.placement, merr, sizeof merr);
        if (e->cfg.on_step) {
            og_engine_step info = {e->met.steps + 1, n, n_prompt_tok, now_s() - t0};
            e->cfg.on_step(e->cfg.on_step_arg, &info);
        }

        pthread_mutex_lock(&e->mu);
        e->met.steps++;
        if (dt > e->met.longest_step_s) e->met.longest_step_s = dt;
        e->met.forward_s += dt;
        e->met.mask_s += t_mask;
        e->met.masks += (uint64_t)n_masks;
        if (st) {
            /* out of memory with several sequences fed (deepseek4 makes a
             * sequence's state at its first call): only the newest one fails; the
             * others' caches are as they were (og_model_forward_batch) and they
             * run again next step, so one step's shortage costs one request */
            int only = -1, n_fed = 0;
            for (int i = 0; i < n_seq; i++) {
                const og_seq *s = e->running[i];
                if (s->chunk || (s->n_fed == s->n_prompt && s->need_feed)) only = i, n_fed++;
            }
            if (st != OG_ERR_NOMEM || n_fed < 2) only = -1;
            for (int i = 0; i < n_seq; i++) {
                og_seq *s = e->running[i];
                if ((only < 0 || i == only) && (s->chunk || (s->n_fed == s->n_prompt && s->need_feed))) {
                    snprintf(s->error, sizeof s->error, "engine failure: %s", err);
                    seq_end(s, OG_FINISH_ERROR);
                }
            }
        } else {
            for (int i = 0; i < n_seq; i++) /* the decoders' last tokens are in their caches now */
                if (e->running[i]->chunk == 0 && e->running[i]->n_fed == e->running[i]->n_prompt)
                    e->running[i]->need_feed = false;
            int k = 0;
            for (int t = 0; t < n; t++) {
                og_seq *s = e->running[e->b_seq[t]];
                if (!e->b_want[t]) continue;
                float *row = e->logits + (size_t)k++ * (size_t)e->n_vocab;
                if (s->chunk && s->n_fed + s->chunk == s->n_prompt) fork_sample(e, s, row, top); /* before s's own */
                sample_token(e, s, row, top);
            }
            for (int i = 0; i < n_seq; i++) {
                og_seq *s = e->running[i];
                s->n_fed += s->chunk;
                e->met.prompt_tokens += (uint64_t)s->chunk;
                if (s->chunk) pc_insert(e, s), snap_take(e, s);
                if (s->chunk && s->n_fed == s->n_prompt) fork_kv(e, s);
            }
        }
        placement_metrics(e);
        rate_sample(e);
        pthread_cond_broadcast(&e->cv_out);
    }
    e->met.kv_blocks_used = kv_blocks_in_use(e);
    pthread_cond_broadcast(&e->cv_out);
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

og_status og_engine_start(og_engine *e, char *err, size_t errlen) {
    if (e->started) return og_fail(err, errlen, OG_ERR_STATE, "engine already started");
    int rc = pthread_create(&e->thread, NULL, scheduler, e);
    if (rc) return og_fail(err, errlen, OG_ERR_NOMEM, "cannot start the scheduler thread: %s", strerror(rc));
    e->started = true;
    return OG_OK;
}

void og_engine_drain(og_engine *e, double grace_s) {
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    e->draining = true;
    e->drain_deadline = now_s() + (grace_s > 0 ? grace_s : 0);
    pthread_cond_signal(&e->cv_work);
    pthread_mutex_unlock(&e->mu);
    if (e->started) pthread_join(e->thread, NULL);
    e->started = false;
    pthread_mutex_lock(&e->mu);
    while (e->n_queue) { /* never started: nothing else will */
        og_seq *s = e->queue[--e->n_queue];
        seq_end(s, OG_FINISH_CANCEL);
        seq_retire(e, s);
    }
    pthread_cond_broadcast(&e->cv_out);
    pthread_mutex_unlock(&e->mu);
}

void og_engine_free(og_engine *e) {
    if (!e) return;
    if (e->started) og_engine_drain(e, 0);
    while (e->all) seq_destroy(e, e->all);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv_work);
    pthread_cond_destroy(&e->cv_out);
    free(e->queue);
    free(e->running);
    free(e->b_tokens);
    free(e->b_seq);
    free(e->b_want);
    free(e->b_exact);
    free(e->b_share);
    free(e->b_kvs);
    free(e->logits);
    free(e->fork_row);
    free(e->layer_routes);
    free(e->layer_hits);
    og_fwd_scratch_free(&e->scratch);
    og_vocab_free(e->vocab);
    /* the cached blocks outlive the process in the directory (a restart with the
     * same --cache-dir reads them); RAM alone would only be copied to be freed */
    e->tier_spill = e->tier && e->cfg.cache_dir;
    if (e->tier) og_kv_tier_set_blocking(e->tier, true); /* every one written, however many */
    if (e->stier) og_kv_tier_set_blocking(e->stier, true);
    for (int i = 0; i < e->pc_cap; i++)
        if (e->pc[i].used) pc_evict(e, i);
    og_kv_tier_free(e->tier);
    free(e->tier_buf);
    og_kv_pool_free(e->kv_pool);
    free(e->pc);
    free(e->pc_bucket);
    /* the same for the cached states (least recently used first: the newest survive --cache-dir-size) */
    e->stier_spill = e->stier && e->cfg.cache_dir;
    og_snapc_free(&e->sc);
    og_kv_tier_free(e->stier); /* drains the writer's queue */
    free(e->stier_buf);
    free(e);
}

void og_engine_cache_sync(og_engine *e) {
    if (e->tier) og_kv_tier_sync(e->tier);
    if (e->stier) og_kv_tier_sync(e->stier);
}

og_status og_engine_layer_hits(og_engine *e, uint64_t *routes, uint64_t *hits, uint32_t n_layer) {
    if (!e->layer_routes) return OG_ERR_STATE;
    uint32_t n = n_layer < og_model_get_info(e->cfg.model)->n_layer ? n_layer : og_model_get_info(e->cfg.model)->n_layer;
    pthread_mutex_lock(&e->mu);
    memcpy(routes, e->layer_routes, n * sizeof *routes);
    memcpy(hits, e->layer_hits, n * sizeof *hits);
    pthread_mutex_unlock(&e->mu);
    return OG_OK;
}
