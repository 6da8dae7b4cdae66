/* The engine's KV pool and the tiers of its prefix cache (issue 17 items 1, 2,
 * 4, 5) on a small make-model file with the real DeepSeek-V3 tokenizer:
 *  - one allocation of parallel x ceil(ctx / 64) blocks, the planner's KV term
 *    and the MLA formula from the file's keys (deepseek2.md §3), and nothing
 *    more allocated on the device by the requests;
 *  - a pool too small for a request: a clear error, the pool whole after;
 *  - 1,000 requests (fewer under the sanitizers) with random shared prefixes,
 *    n > 1, cancels while queued, prefilling and decoding: nothing referenced
 *    after, free + cached = N, og_engine_check's walk passes throughout, and
 *    the blocks left (pool and RAM round trips) give a cache-off engine's bits;
 *  - tokens and log-probs bitwise the same with the cache off, cold, warm
 *    from the pool, from --cache-ram, from --cache-dir and after a restart on
 *    the same directory; a corrupt, truncated, foreign file is skipped with a
 *    log line and never read as a block.
 * The reference for the bits is the engine with the prefix cache off (every
 * prompt prefilled). usage: test_kv_pool ONEGPU WORKDIR */
#include "og_moe.h" /* og_plan_make: the planner's KV term */
#include "sanitized_fixture.h"

#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine_fixture.h" /* g_m, g_tok, g_pool, g_kern, g_host, setup / teardown, greedy, fx_device_rc */
#include "kv_pool.h"       /* og_kv_tier alone: its writer thread */
#include "tier_fixture.h"  /* g_log, g_lg, log_open, count_in_log, write_bytes */

#ifdef OG_TEST_SANITIZED
#define STRESS_REQUESTS 120
#else
#define STRESS_REQUESTS 1000
#endif

static char g_model[512], g_dir[512];



static void run(og_engine *e, const int32_t *ids, int n, result *r) {
    og_seq_params p = greedy(6);
    og_seq *s;
    char err[256];
    if (og_engine_submit(e, ids, n, &p, &s, err, sizeof err)) fail_msg("%s", err);
    collect(e, s, r);
}

static void random_ids(int32_t *v, int n, uint64_t x) {
    for (int i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        v[i] = (int32_t)((x >> 33) % (uint64_t)(og_model_get_info(g_m)->n_vocab - 10));
    }
}

#define assert_same(a, b) assert_same_at(a, b, __LINE__)
static void assert_same_at(const result *a, const result *b, int line) {
    if (a->n != b->n || memcmp(a->ids, b->ids, (size_t)b->n * sizeof *b->ids))
        print_message("line %d: n %d vs %d, cached %d vs %d\n", line, a->n, b->n, a->n_cached, b->n_cached);
    assert_int_equal(a->finish, b->finish);
    assert_int_equal(a->n, b->n);
    assert_memory_equal(a->ids, b->ids, (size_t)b->n * sizeof *b->ids);
    assert_memory_equal(a->lps, b->lps, (size_t)b->n * sizeof *b->lps);
}

/* Waits until nothing runs or waits; then the pool must be whole: no block
 * referenced, free + cached = N, and the walk passes. */
static void assert_pool_whole(og_engine *e) {
    og_engine_metrics m;
    for (int k = 0; k < 400; k++) {
        og_engine_metrics_get(e, &m);
        if (m.running == 0 && m.queued == 0) break;
        og_engine_wait(e, 0.05);
    }
    char err[256];
    if (og_engine_check(e, err, sizeof err)) fail_msg("%s", err);
    og_engine_metrics_get(e, &m);
    assert_int_equal(m.running, 0);
    assert_int_equal(m.kv_blocks_used, 0);
    assert_int_equal(m.kv_blocks_shared, 0);
    assert_int_equal(m.kv_blocks_free + m.kv_blocks_cached, m.kv_blocks_total);
}

/* One allocation: the pool is parallel x ceil(ctx / 64) blocks of the MLA
 * formula's bytes (file keys), the planner charges the same bytes, and on a
 * budgeted cpu device the requests allocate nothing more (its free memory
 * after create is its free memory after them). */
static void test_one_allocation(void **state) {
    (void)state;
    char err[256];
    uint32_t n_layer, r_kv, d_rope;
    fx_mla_shape(g_m, &n_layer, &r_kv, &d_rope);
    const uint64_t block = (uint64_t)n_layer * 64 * (r_kv + d_rope) * 2; /* f16 */
    og_device *dev;
    og_stream *s;
    (void)fx_device_rc(256u << 20, &dev, &s);
    uint64_t free0, free1, free2, total;
    assert_int_equal(dev->ops->mem_info(dev, &free0, &total), OG_OK);
    og_engine_config c = fx_engine_config(3, 64, 200, 8); /* 200 positions: 4 blocks each */
    c.rc.dev = dev;
    c.rc.stream = s;
    og_engine *e = fx_start(&c);
    assert_int_equal(dev->ops->mem_info(dev, &free1, &total), OG_OK);
    og_engine_metrics m;
    og_engine_metrics_get(e, &m);
    assert_int_equal(m.kv_blocks_total, 3 * 4);
    assert_int_equal(m.kv_blocks_free, 3 * 4);
    assert_int_equal(m.kv_block_bytes, block);
    const uint64_t scratch = og_fwd_scratch_bytes(g_m, 64, 3);
    print_message("pool: %llu blocks x %llu bytes; the device lost %llu bytes at create (scratch ~%llu)\n",
                  (unsigned long long)m.kv_blocks_total, (unsigned long long)block,
                  (unsigned long long)(free0 - free1), (unsigned long long)scratch);
    assert_true(free0 - free1 >= 12 * block + scratch);
    assert_true(free0 - free1 < 12 * block + scratch + 4096); /* the two allocations, aligned */
    int32_t ids[190];
    random_ids(ids, 190, 1);
    result r[3];
    for (int k = 0; k < 3; k++) run(e, ids, 60 + 60 * k, &r[k]); /* 1, 2, 3 blocks + output */
    assert_int_equal(dev->ops->mem_info(dev, &free2, &total), OG_OK);
    assert_int_equal(free2, free1); /* the forward passes took their blocks from the pool */
    assert_pool_whole(e);
    og_engine_free(e);
    /* the plan for the same --ctx / --parallel: the same bytes */
    og_gguf *hg;
    assert_int_equal(og_gguf_open(g_path, OG_GGUF_HEADER_ONLY, &hg, err, sizeof err), OG_OK);
    og_plan_input in = {.vram = 8ull << 30, .ram = 8ull << 30, .ctx = 200, .parallel = 3, .batch_tokens = 64,
                        .kv_bytes_per_elem = 2, .slots_override = -1};
    og_plan p;
    assert_int_equal(og_plan_make(hg, &in, &p, err, sizeof err), OG_OK);
    assert_int_equal(p.kv_blocks, 12);
    assert_int_equal(p.kv_bytes, 12 * block);
    og_plan_free(&p);
    og_gguf_close(hg);
    dev->ops->stream_destroy(dev, s);
    dev->ops->destroy(dev);
}

/* A pool of 3 blocks: a prompt needing 4 fails with the pool's message; two
 * prompts of 3 blocks at once: at least one ends normally, any other with the
 * message; a small one afterwards runs; the pool stays whole. */
static void test_pool_too_small(void **state) {
    (void)state;
    og_engine_config c = fx_engine_config(2, 64, 256, 8);
    c.kv_blocks = 3;
    og_engine *e = fx_start(&c);
    int32_t ids[300];
    random_ids(ids, 300, 2);
    result r;
    run(e, ids, 200, &r);
    assert_int_equal(r.finish, OG_FINISH_ERROR);
    assert_non_null(strstr(r.error, "KV pool"));
    assert_pool_whole(e);
    og_seq *s[2];
    char err[256];
    og_seq_params p = greedy(20);
    for (int k = 0; k < 2; k++)
        if (og_engine_submit(e, ids + 10 + 50 * k, 150, &p, &s[k], err, sizeof err)) fail_msg("%s", err);
    int ok = 0;
    for (int k = 0; k < 2; k++) {
        collect(e, s[k], &r);
        if (r.finish == OG_FINISH_ERROR) assert_non_null(strstr(r.error, "KV pool"));
        else ok++;
    }
    assert_true(ok >= 1);
    assert_pool_whole(e);
    run(e, ids + 100, 50, &r);
    assert_int_equal(r.finish, OG_FINISH_LENGTH);
    assert_int_equal(r.n, 6);
    assert_pool_whole(e);
    og_engine_free(e);
}

/* STRESS_REQUESTS requests: prompts of 1..160 ids sharing a random-length
 * prefix of one of 4 bases, 1..4 choices, 1..3 tokens; each either read to
 * its end, released at once (queued), after a short sleep (prefilling), or
 * after its first token (decoding). Waves of 32. A small --cache-ram takes
 * evicted blocks and hands them back. */
static void test_stress(void **state) {
    (void)state;
    enum { BASES = 4, L = 160, WAVE = 32 };
    static int32_t base[BASES][L], buf[WAVE][L];
    for (int k = 0; k < BASES; k++) random_ids(base[k], L, 100 + (uint64_t)k);
    og_engine_config c = fx_engine_config(8, 256, 192, 4 * WAVE);
    c.cache_ram_bytes = 8 * og_model_get_info(g_m)->kv_block_bytes;
    og_engine *e = fx_start(&c);
    uint64_t x = 4711;
    char err[256];
    int done = 0, n_seq = 0, actions[4] = {0};
    while (done < STRESS_REQUESTS) {
        og_seq *s[WAVE][4];
        int n_of[WAVE], act[WAVE], w = 0;
        for (; w < WAVE && done < STRESS_REQUESTS; w++, done++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            const int k = (int)((x >> 8) % BASES), len = 1 + (int)((x >> 12) % L);
            const int cut = (int)((x >> 24) % (uint64_t)(len + 1));
            memcpy(buf[w], base[k], sizeof buf[w]);
            random_ids(buf[w] + cut, len - cut, x);
            const int n = (x >> 36) % 4 ? 1 : 2 + (int)((x >> 38) % 3);
            og_seq_params p = greedy(1 + (int)((x >> 40) % 3));
            p.sampling.temperature = (x >> 44) % 4 ? 0.0f : 1.0f;
            p.logprobs = false;
            p.sampling.top_k = 40; /* random weights: every logit within reach, a full sort per token without it */
            p.sampling.seed = x;
            if (og_engine_submit_n(e, buf[w], len, &p, n, s[w], err, sizeof err)) fail_msg("%s", err);
            n_of[w] = n;
            act[w] = (int)((x >> 48) % 4);
            actions[act[w]]++;
            n_seq += n;
            if (act[w] == 1)
                for (int i = 0; i < n; i++) og_seq_release(e, s[w][i]), s[w][i] = NULL;
        }
        if (w > 2) usleep(500);
        for (int q = 0; q < w; q++) {
            for (int i = 0; i < n_of[q]; i++) {
                og_seq *sq = s[q][i];
                if (!sq) continue;
                if (act[q] == 2) {
                    og_seq_release(e, sq);
                    continue;
                }
                if (act[q] == 3) { /* its first token, then gone */
                    for (int t = 0; t < 400; t++) {
                        og_seq_out o;
                        assert_int_equal(og_seq_take(e, sq, &o), OG_OK);
                        const bool any = o.n_gen > 0 || o.finish != OG_FINISH_NONE;
                        assert_true(o.finish != OG_FINISH_ERROR);
                        og_seq_out_free(&o);
                        if (any) break;
                        og_engine_wait(e, 0.02);
                    }
                    og_seq_release(e, sq);
                    continue;
                }
                result r;
                collect(e, sq, &r);
                if (r.finish == OG_FINISH_ERROR) fail_msg("request failed: %s", r.error);
                assert_true(r.finish == OG_FINISH_LENGTH || r.finish == OG_FINISH_STOP);
            }
        }
        if (done % 128 < WAVE && og_engine_check(e, err, sizeof err)) fail_msg("%s", err);
    }
    assert_pool_whole(e);
    /* the blocks that lived through the churn (pool and RAM round trips) still
     * hold the right rows: each base's tokens and log-probs as a cache-off engine's */
    og_engine_config oc = fx_engine_config(1, 256, 192, 4);
    oc.no_prefix_cache = true;
    og_engine *off = fx_start(&oc);
    int from_churn = 0;
    for (int k = 0; k < BASES; k++) {
        result want, got;
        run(off, base[k], L, &want);
        run(e, base[k], L, &got); /* whatever the churn left cached of it */
        assert_same(&got, &want);
        from_churn += got.n_cached;
        run(e, base[k], L, &got); /* its own blocks, from the pool */
        assert_same(&got, &want);
        assert_int_equal(got.n_cached, (L - 1) / 64 * 64);
    }
    print_message("stress: the bases after the churn: %d of %d prompt tokens read from what it left\n", from_churn,
                  BASES * L);
    og_engine_free(off);
    assert_pool_whole(e);
    og_engine_metrics m;
    og_engine_metrics_get(e, &m);
    print_message("stress: %d requests (%d sequences; kept %d, released queued %d, prefilling %d, decoding %d): "
                  "%llu prefix hits, %llu cached tokens, %llu blocks to RAM, %llu back; pool %llu = %llu free + %llu "
                  "cached\n", STRESS_REQUESTS, n_seq, actions[0], actions[1], actions[2], actions[3],
                  (unsigned long long)m.prefix_hits, (unsigned long long)m.prefix_cached_tokens,
                  (unsigned long long)m.cache_ram_stored, (unsigned long long)m.cache_ram_restored,
                  (unsigned long long)m.kv_blocks_total, (unsigned long long)m.kv_blocks_free,
                  (unsigned long long)m.kv_blocks_cached);
    assert_true(m.prefix_hits > 0);
    assert_true(m.cache_ram_stored > 0);
    og_engine_drain(e, 0);
    og_engine_free(e);
}

/* ---- the tiers: bitwise ---- */


/* parallel 1, ctx 256, a pool of 4 blocks: a 200-token prompt caches 3 and a
 * second one evicts them. */
static og_engine *tier_engine(uint64_t ram, const char *dir) {
    og_engine_config c = fx_engine_config(1, 64, 256, 4);
    c.kv_blocks = 4;
    c.cache_ram_bytes = ram;
    c.cache_dir = dir;
    c.log = &g_lg;
    return fx_start(&c);
}


/* a (N ids) through e gives ref's tokens and log-probs, cached of them read from the cache. */
static void run_same(og_engine *e, const int32_t *a, const result *ref, int cached) {
    result r;
    run(e, a, 200, &r);
    assert_same(&r, ref);
    assert_int_equal(r.n_cached, cached);
}

static void test_tiers_identical(void **state) {
    (void)state;
    enum { N = 200 };
    int32_t a[N], b[N];
    random_ids(a, N, 11);
    random_ids(b, N, 12);
    log_open();
    result ref, r;
    og_engine_config oc = fx_engine_config(1, 64, 256, 4);
    oc.no_prefix_cache = true;
    og_engine *off = fx_start(&oc);
    run(off, a, N, &ref);
    og_engine_free(off);
    assert_int_equal(ref.n, 6);
    assert_int_equal(ref.n_cached, 0);
    og_engine_metrics m;
    /* RAM: cold, warm from the pool, evicted to RAM by b, warm from RAM */
    og_engine *e = tier_engine(64ull << 20, NULL);
    run_same(e, a, &ref, 0);
    run_same(e, a, &ref, 192);
    run(e, b, N, &r);
    og_engine_metrics_get(e, &m);
    assert_int_equal(m.cache_ram_stored, 3);
    assert_int_equal(m.cache_ram_blocks, 3);
    run_same(e, a, &ref, 192);
    og_engine_metrics_get(e, &m);
    assert_int_equal(m.cache_ram_restored, 3);
    assert_pool_whole(e);
    og_engine_free(e);
    /* the directory: cold, evicted to disk by b, warm from disk; then (RAM and
     * directory) a restart reads a's blocks back */
    char dir[600];
    snprintf(dir, sizeof dir, "%s/cache", g_dir);
    for (int restart = 0; restart < 2; restart++) {
        e = tier_engine(restart ? 1ull << 20 : 0, dir);
        og_engine_metrics_get(e, &m);
        assert_int_equal(m.cache_disk_blocks, restart ? 6 : 0);
        if (!restart) {
            run_same(e, a, &ref, 0);
            run(e, b, N, &r);
            og_engine_cache_sync(e); /* the writer thread's files are written */
            og_engine_metrics_get(e, &m);
            assert_int_equal(m.cache_disk_stored, 3);
            assert_int_equal(m.cache_write_queue, 0);
        }
        run_same(e, a, &ref, 192);
        og_engine_metrics_get(e, &m);
        assert_int_equal(m.cache_disk_restored, 3);
        assert_int_equal(m.cache_disk_skipped, 0);
        assert_pool_whole(e);
        og_engine_free(e); /* the pool's cached blocks go to the directory */
        char names[64][600];
        assert_int_equal(tier_files(dir, ".kvb", names, 64), 6); /* a's 3 and b's 3 */
    }
    assert_int_equal(count_in_log("cache-dir: skipping"), 0);
    fclose(g_lf);
}


/* Bad files in the directory: a truncated copy, junk under a block name, a
 * block of another kv-type (an f32 engine's files for the f16 model), and
 * every real block with its last payload byte flipped: the start skips the
 * first three kinds with a log line each, the lookups the flipped ones; the
 * output is the cold one, nothing read from them. */
static void test_bad_files(void **state) {
    (void)state;
    enum { N = 200 };
    int32_t a[N], b[N];
    random_ids(a, N, 21);
    random_ids(b, N, 22);
    char dir[600], err[256];
    snprintf(dir, sizeof dir, "%s/bad", g_dir);
    log_open();
    result ref, r;
    og_engine *e = tier_engine(0, dir);
    run(e, a, N, &ref);
    run(e, b, N, &r);
    og_engine_free(e);
    char names[64][600];
    int nf = tier_files(dir, ".kvb", names, 64);
    assert_int_equal(nf, 6);
    /* files of another kv-type: an f32 engine's */
    char dir32[600];
    snprintf(dir32, sizeof dir32, "%s/bad32", g_dir);
    assert_int_equal(og_model_set_option(g_m, "kv-type", "f32", err, sizeof err), OG_OK);
    e = tier_engine(0, dir32);
    run(e, a, N, &r);
    og_engine_free(e);
    assert_int_equal(og_model_set_option(g_m, "kv-type", "f16", err, sizeof err), OG_OK);
    char n32[8][600];
    assert_int_equal(tier_files(dir32, ".kvb", n32, 8), 3);
    char path[700];
    snprintf(path, sizeof path, "%s/%.16s-00000000000000aa.kvb", dir, strrchr(names[0], '/') + 1);
    assert_int_equal(rename(n32[0], path), 0);
    /* a truncated copy, junk */
    bad_copies(names[0]);
    /* every real block: its last byte flipped */
    for (int i = 0; i < nf; i++) {
        FILE *f = fopen(names[i], "r+b");
        assert_non_null(f);
        fseek(f, -1, SEEK_END);
        int ch = fgetc(f);
        fseek(f, -1, SEEK_END);
        fputc(ch ^ 0x01, f);
        fclose(f);
    }
    log_clear();
    e = tier_engine(0, dir);
    og_engine_metrics m;
    og_engine_metrics_get(e, &m);
    assert_int_equal(m.cache_disk_skipped, 3);
    assert_int_equal(m.cache_disk_blocks, 6);
    assert_int_equal(count_in_log("cache-dir: skipping"), 3);
    assert_non_null(strstr(g_log, "another kv-type"));
    assert_non_null(strstr(g_log, "truncated"));
    assert_non_null(strstr(g_log, "not a block file"));
    run(e, a, N, &r);
    assert_same(&r, &ref);
    assert_int_equal(r.n_cached, 0); /* the first block's file is refused: nothing after it is read */
    og_engine_metrics_get(e, &m);
    assert_int_equal(m.cache_disk_restored, 0);
    assert_int_equal(m.cache_disk_skipped, 4);
    assert_non_null(strstr(g_log, "payload's checksum"));
    assert_pool_whole(e);
    og_engine_free(e);
    fclose(g_lf);
}


/* The tier's writer thread alone (states: payloads of their own sizes):
 * entries still queued are found by a lookup with their bytes; a queue of one
 * image at a time with blocking puts writes every entry; without blocking
 * every put is written or counted as dropped; a write that fails (a directory
 * where the file goes) is counted each time and logged once; freeing drains
 * the queue (every entry's file is there, and a new tier reads each back bit
 * for bit). Under TSan (label tsan) the caller and the writer race on nothing. */
static void test_tier_writer(void **state) {
    (void)state;
    enum { N = 24, IDS = 70 };
    char dir[600], err[256];
    snprintf(dir, sizeof dir, "%s/writer", g_dir);
    log_open();
    og_kv_tier_config tc = {.kind = OG_KV_TIER_STATES, .dir = dir, .dir_bytes = 1ull << 30, .queue_bytes = 1,
                            .model_id = 0x1234, .kv_key = 0x5678, .arch = "deepseek41", .kv_type = OG_KV_F32,
                            .geom = {2, 4096, 4, 0}, .log = &g_lg};
    int32_t ids[N][IDS];
    static unsigned char pay[N][3000];
    og_kv_key k[N];
    for (int i = 0; i < N; i++) {
        random_ids(ids[i], IDS, 900 + (uint64_t)i);
        for (size_t b = 0; b < sizeof pay[i]; b++) pay[i][b] = (unsigned char)(i * 31 + (int)b * 7);
        k[i] = (og_kv_key){.hash = og_fnv1a64(ids[i], sizeof ids[i], 77), .n_ids = IDS - i % 3, .ids = ids[i]};
    }
    og_kv_tier *t;
    og_kv_hit hit;
    og_kv_tier_stats st;
    for (int blocking = 1; blocking >= 0; blocking--) {
        char cmd[700];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        assert_int_equal(system(cmd), 0);
        assert_int_equal(og_kv_tier_create(&tc, &t, err, sizeof err), OG_OK);
        og_kv_tier_set_blocking(t, blocking);
        for (int i = 0; i < N; i++) {
            const uint64_t meta[2] = {(uint64_t)i, 4096};
            const uint64_t bytes = 1000 + 80 * (uint64_t)i; /* its own size */
            og_kv_tier_put(t, &k[i], meta, pay[i], bytes);
            if (og_kv_tier_get(t, &k[i], &hit)) { /* queued or written already: its bytes */
                assert_int_equal(hit.bytes, bytes);
                assert_int_equal(hit.meta[0], (uint64_t)i);
                assert_memory_equal(hit.payload, pay[i], bytes);
            }
        }
        og_kv_tier_sync(t);
        og_kv_tier_get_stats(t, &st);
        assert_int_equal(st.queued, 0);
        assert_int_equal(st.disk_stored + st.queue_dropped, N);
        if (blocking) assert_int_equal(st.disk_stored, N);
        assert_int_equal(st.disk_entries, st.disk_stored);
        og_kv_tier_free(t);
    }
    /* a failed write: a directory where the file goes */
    assert_int_equal(og_kv_tier_create(&tc, &t, err, sizeof err), OG_OK);
    og_kv_tier_set_blocking(t, true);
    int32_t x[IDS];
    char path[800];
    for (int j = 0; j < 2; j++) {
        random_ids(x, IDS, 5000 + (uint64_t)j);
        const og_kv_key kx = {.hash = 0xdead00 + (uint64_t)j, .n_ids = IDS, .ids = x};
        snprintf(path, sizeof path, "%s/%016llx-%016llx.kvs", dir, 0x1234ull, (unsigned long long)kx.hash);
        assert_int_equal(mkdir(path, 0755), 0);
        og_kv_tier_put(t, &kx, NULL, pay[0], 100);
    }
    og_kv_tier_sync(t);
    og_kv_tier_get_stats(t, &st);
    assert_int_equal(st.disk_errors, 2);
    assert_int_equal(count_in_log("later failures are counted only"), 1);
    og_kv_tier_free(t);
    /* a new tier reads back every entry written (the directories under file names: skipped, logged) */
    log_clear();
    tc.queue_bytes = 0;
    assert_int_equal(og_kv_tier_create(&tc, &t, err, sizeof err), OG_OK);
    og_kv_tier_get_stats(t, &st);
    assert_int_equal(st.disk_skipped, 2);
    int found = 0;
    for (int i = 0; i < N; i++) {
        if (og_kv_tier_get(t, &k[i], &hit) != 2) continue;
        found++;
        assert_int_equal(hit.bytes, 1000 + 80 * (uint64_t)i);
        assert_memory_equal(hit.payload, pay[i], hit.bytes);
        int n;
        /* the longest prefix: its hash is og_fnv1a64 of the ids from the seed, so the entries of
         * all IDS ids (hashed so above) are found that way, the shorter ones (hashed over IDS) not */
        assert_int_equal(og_kv_tier_get_prefix(t, 77, false, ids[i], 0, IDS, &hit, &n), k[i].n_ids == IDS ? 2 : 0);
        assert_int_equal(n, k[i].n_ids == IDS ? IDS : 0);
    }
    assert_int_equal((uint64_t)found, st.disk_entries);
    og_kv_tier_free(t);
    fclose(g_lf);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_kv_pool ONEGPU WORKDIR\n");
        return 2;
    }
    snprintf(g_dir, sizeof g_dir, "%s", argv[2]);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", g_dir, g_dir);
    if (system(cmd)) return 1;
    snprintf(g_model, sizeof g_model, "%s/small.gguf", g_dir);
    g_path = g_model;
    /* 2 layers (the first dense) of width 64, 8 experts: small, so that 1,000 requests take seconds */
    snprintf(cmd, sizeof cmd,
             "'%s' make-model --n-layer 2 --n-dense 1 --n-embd 64 --n-head 2 --q-lora-rank 32 --kv-lora-rank 32 "
             "--qk-nope 16 --qk-rope 16 --v-head 16 --n-ff 64 --n-expert 8 --n-expert-used 2 --n-ff-exp 64 "
             "--n-expert-shared 1 --type Q8_0 --seed 9 -o '%s' >'%s/make.log' 2>&1",
             argv[1], g_model, g_dir);
    if (system(cmd)) {
        snprintf(cmd, sizeof cmd, "grep -q tokenizer '%s/make.log'", g_dir);
        if (!system(cmd)) {
            printf("SKIP (dependency): no tokenizer files for make-model (run scripts/deps.sh)\n");
            return 77;
        }
        fprintf(stderr, "make-model failed (%s/make.log)\n", g_dir);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_allocation),
        cmocka_unit_test(test_pool_too_small),
        cmocka_unit_test(test_stress),
        cmocka_unit_test(test_tiers_identical),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_tier_writer),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
