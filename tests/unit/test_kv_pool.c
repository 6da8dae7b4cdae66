/* The engine's KV pool and the tiers of its prefix cache (issue 17 items 1, 2,
 * 4, 5) on a small make-model file with the real DeepSeek-V3 tokenizer:
 *  - one allocation of parallel x ceil(ctx / 64) blocks, the planner's KV term
 *    and the MLA formula from the file's keys (deepseek2.md §3), and nothing
 *    more allocated on the device by the requests;
 *  - a pool too small for a request: a clear error, the pool whole after;
 *    requests that fit one after another wait and run so, as each alone;
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
#include <errno.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "kv_pool.h"
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

/* A pool of 3 blocks: a prompt needing 4 fails with the pool's message, at
 * once (it can never fit); two prompts of 3 blocks at once run one after the
 * other (the second waits in the queue), each as it runs alone; a small one
 * afterwards runs; the pool stays whole. */
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
    assert_non_null(strstr(r.error, "needs up to 4 KV blocks"));
    assert_non_null(strstr(r.error, "the KV pool holds 3"));
    assert_int_equal(r.n_gen, 0);
    assert_pool_whole(e);
    og_seq *s[2];
    char err[256];
    og_seq_params p = greedy(20);
    result alone[2];
    for (int k = 0; k < 2; k++) {
        if (og_engine_submit(e, ids + 10 + 50 * k, 150, &p, &s[k], err, sizeof err)) fail_msg("%s", err);
        collect(e, s[k], &alone[k]);
        assert_int_equal(alone[k].finish, OG_FINISH_LENGTH);
    }
    og_engine_config oc = fx_engine_config(1, 64, 256, 4); /* the reference: no prefix cache, the default pool */
    oc.no_prefix_cache = true;
    og_engine *off = fx_start(&oc);
    for (int k = 0; k < 2; k++) {
        if (og_engine_submit(off, ids + 10 + 50 * k, 150, &p, &s[0], err, sizeof err)) fail_msg("%s", err);
        collect(off, s[0], &r);
        assert_same(&alone[k], &r);
    }
    og_engine_free(off);
    for (int k = 0; k < 2; k++)
        if (og_engine_submit(e, ids + 10 + 50 * k, 150, &p, &s[k], err, sizeof err)) fail_msg("%s", err);
    for (int k = 0; k < 2; k++) {
        collect(e, s[k], &r);
        if (r.finish == OG_FINISH_ERROR) fail_msg("request %d: %s", k, r.error);
        assert_same(&r, &alone[k]);
    }
    assert_pool_whole(e);
    run(e, ids + 100, 50, &r);
    assert_int_equal(r.finish, OG_FINISH_LENGTH);
    assert_int_equal(r.n, 6);
    assert_pool_whole(e);
    og_engine_free(e);
}

/* --parallel 3 over a pool of 4 blocks, no prefix cache (nothing to evict):
 * six sequences whose prompts fill most of a block and whose answers cross
 * into a second one. Admitted as they all came, three would hold a block each
 * and each want a second: the pool held between them. Admission keeps the
 * running ones' most within the pool instead, so they run two at a time and
 * none errors; each gives its tokens and log-probs alone, og_engine_check's
 * walk passes while they run, and no block is referenced at the end. */
static void test_pool_growing(void **state) {
    (void)state;
    enum { N = 6, PROMPT = 60, GEN = 12 };
    og_engine_config c = fx_engine_config(3, 64, 256, 8);
    c.kv_blocks = 4;
    c.no_prefix_cache = true;
    og_engine *e = fx_start(&c);
    og_engine_config oc = fx_engine_config(1, 64, 256, 4);
    oc.no_prefix_cache = true;
    og_engine *off = fx_start(&oc);
    static int32_t ids[N][PROMPT];
    og_seq_params p = greedy(GEN);
    char err[256];
    result alone[N], r;
    og_seq *s[N];
    for (int k = 0; k < N; k++) {
        random_ids(ids[k], PROMPT, 300 + (uint64_t)k);
        if (og_engine_submit(off, ids[k], PROMPT, &p, &s[k], err, sizeof err)) fail_msg("%s", err);
        collect(off, s[k], &alone[k]);
        assert_int_equal(alone[k].finish, OG_FINISH_LENGTH);
        assert_int_equal(alone[k].n, GEN);
    }
    og_engine_free(off);
    for (int k = 0; k < N; k++)
        if (og_engine_submit(e, ids[k], PROMPT, &p, &s[k], err, sizeof err)) fail_msg("%s", err);
    og_engine_metrics m;
    int most_running = 0;
    for (int t = 0; t < 2000; t++) { /* while they run: the walk, and never more than two at once */
        if (og_engine_check(e, err, sizeof err)) fail_msg("%s", err);
        og_engine_metrics_get(e, &m);
        if (m.running > most_running) most_running = m.running;
        assert_true(m.kv_blocks_used <= m.kv_blocks_total);
        if (m.running == 0 && m.queued == 0 && m.seqs_finished >= N) break;
        og_engine_wait(e, 0.01);
    }
    for (int k = 0; k < N; k++) {
        collect(e, s[k], &r);
        if (r.finish == OG_FINISH_ERROR) fail_msg("request %d: %s", k, r.error);
        assert_same(&r, &alone[k]);
    }
    print_message("pool of 4 blocks, --parallel 3: %d sequences, at most %d running at once\n", N, most_running);
    assert_true(most_running <= 2);
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

/* A pool the host cannot allocate (without --vram nothing plans it against
 * the host's memory): the error gives its size and the flags that shrink it,
 * not only the block count. 2^20 blocks of 1 GiB: 1 PiB, past any machine (the
 * plain build only). */
static void test_pool_out_of_memory(void **state) {
    (void)state;
#ifdef OG_TEST_SANITIZED
    skip(); /* ASan aborts on an allocation that large instead of returning NULL */
#endif
    og_kv_pool *p = NULL;
    char err[512];
    assert_int_equal(og_kv_pool_create(NULL, 1ull << 30, 1u << 20, &p, err, sizeof err), OG_ERR_NOMEM);
    assert_null(p);
    assert_non_null(strstr(err, "KV pool: out of memory for 1048576 blocks of 1073741824 bytes (1.00 PiB, "
                                "--parallel x ceil(--ctx / 64) blocks); a smaller --ctx or fewer --parallel shrinks it"));
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
    char dir[600]; /* folders that do not exist yet: made as mkdir -p does */
    snprintf(dir, sizeof dir, "%s/cache/of/kv", g_dir);
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
    for (int i = 0; i < nf; i++) flip_byte(names[i], 1, 0x01);
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
    /* the unsound files were removed where they were found (kept, each start
     * skipped them again with a warning); files gone under a running engine
     * (another server sharing DIR trimmed them) are dropped without one */
    memset(g_log, 0, sizeof g_log);
    rewind(g_lf);
    e = tier_engine(0, dir);
    og_engine_metrics_get(e, &m);
    assert_int_equal(m.cache_disk_skipped, 0);
    nf = tier_files(dir, ".kvb", names, 64);
    assert_true(nf >= 3);
    for (int i = 0; i < nf; i++) assert_int_equal(unlink(names[i]), 0);
    run(e, b, N, &r);
    assert_int_equal(r.n_cached, 0);
    og_engine_metrics_get(e, &m);
    assert_int_equal(m.cache_disk_restored, 0);
    assert_int_equal(count_in_log("cache-dir: skipping"), 0);
    assert_pool_whole(e);
    og_engine_free(e);
    fclose(g_lf);
}

/* A tier test's start: prompts a and b of n ids (seeds seed, seed + 1; b may
 * be NULL), dir = WORKDIR/name, the log captured. */
static void tier_case(const char *name, char *dir, size_t dirlen, int32_t *a, int32_t *b, int n, uint64_t seed) {
    random_ids(a, n, seed);
    if (b) random_ids(b, n, seed + 1);
    snprintf(dir, dirlen, "%s/%s", g_dir, name);
    log_open();
}

/* A FIFO under a block's name, there at start or put in a real block's place
 * while the engine runs: fopen blocked on it for ever (the start, or the
 * scheduler's lookup); now each is a file that cannot be read, skipped with a
 * log line, and the prompt is prefilled. */
static void test_fifo_files(void **state) {
    (void)state;
    enum { N = 200 };
    int32_t a[N], b[N];
    char dir[600];
    tier_case("fifo", dir, sizeof dir, a, b, N, 71);
    result ref, r;
    og_engine *e = tier_engine(0, dir);
    run(e, a, N, &ref);
    og_engine_free(e);
    char names[8][600], path[700];
    assert_int_equal(tier_files(dir, ".kvb", names, 8), 3);
    snprintf(path, sizeof path, "%s/%.17s00000000000000ff.kvb", dir, strrchr(names[0], '/') + 1);
    assert_int_equal(mkfifo(path, 0644), 0);
    e = tier_engine(0, dir);
    assert_int_equal(count_in_log("not a regular file"), 1);
    run(e, b, N, &r); /* a's 3 leave the pool: lookups go to the directory */
    for (int i = 0; i < 3; i++) {
        assert_int_equal(unlink(names[i]), 0);
        assert_int_equal(mkfifo(names[i], 0644), 0);
    }
    run(e, a, N, &r);
    assert_same(&r, &ref);
    assert_int_equal(r.n_cached, 0);
    assert_int_equal(count_in_log("not a regular file"), 2); /* the first block's: nothing after it is looked up */
    assert_pool_whole(e);
    og_engine_free(e);
    fclose(g_lf);
}

/* One directory shared by the same model at f16 and at f32 (two servers, or
 * one restarted with another --kv-type): each keeps its own files (the chain
 * hash of the same ids is the same under either kv-type, so a name without the
 * kv-type had the second write over the first's blocks), and each restart
 * reads its own blocks back, the other's left alone with one line. */
static void test_shared_dir_kv_types(void **state) {
    (void)state;
    enum { N = 200 };
    int32_t a[N], b[N];
    char dir[600], err[256];
    tier_case("shared", dir, sizeof dir, a, b, N, 31);
    result ref[2], r;
    static const char *const types[2] = {"f16", "f32"};
    for (int k = 0; k < 2; k++) { /* each kv-type's blocks: a's 3 and b's 3 */
        assert_int_equal(og_model_set_option(g_m, "kv-type", types[k], err, sizeof err), OG_OK);
        og_engine *e = tier_engine(0, dir);
        run(e, a, N, &ref[k]);
        run(e, b, N, &r);
        og_engine_free(e);
    }
    char names[64][600];
    assert_int_equal(tier_files(dir, ".kvb", names, 64), 12);
    for (int k = 0; k < 2; k++) {
        assert_int_equal(og_model_set_option(g_m, "kv-type", types[k], err, sizeof err), OG_OK);
        og_engine *e = tier_engine(0, dir);
        og_engine_metrics m;
        og_engine_metrics_get(e, &m);
        assert_int_equal(m.cache_disk_blocks, 6);
        run_same(e, a, &ref[k], 192);
        og_engine_metrics_get(e, &m);
        assert_int_equal(m.cache_disk_restored, 3);
        assert_int_equal(m.cache_disk_skipped, 0);
        og_engine_free(e);
    }
    assert_int_equal(og_model_set_option(g_m, "kv-type", "f16", err, sizeof err), OG_OK);
    assert_int_equal(count_in_log("cache-dir: skipping"), 0);
    assert_int_equal(count_in_log("6 block files of other models, kv-types or geometries left alone"), 3);
    fclose(g_lf);
}

/* A server killed mid-write (kill -9) leaves NAME.tmp.XXXXXX beside the block
 * file it was writing; the bound counts indexed files only, so such leftovers
 * piled up past --cache-dir-size over crashes. A restart removes ours that are
 * a minute old; a younger one (another server's of the same store, in flight)
 * and another store's stay. */
static void test_stale_writes(void **state) {
    (void)state;
    enum { N = 200 };
    int32_t a[N];
    char dir[600];
    tier_case("stale", dir, sizeof dir, a, NULL, N, 41);
    result ref;
    og_engine *e = tier_engine(0, dir);
    run(e, a, N, &ref);
    og_engine_free(e);
    char names[8][600];
    assert_int_equal(tier_files(dir, ".kvb", names, 8), 3);
    const char *store = strrchr(names[0], '/') + 1; /* 16 hex digits, then '-' */
    char old[700], young[700], other[700];
    snprintf(old, sizeof old, "%s/%.17s0000000000000001.kvb.tmp.AbC123", dir, store);
    snprintf(young, sizeof young, "%s/%.17s0000000000000002.kvb.tmp.XyZ789", dir, store);
    snprintf(other, sizeof other, "%s/%s0000000000000003.kvb.tmp.QqQqQq", dir,
             store[0] == 'f' ? "eeeeeeeeeeeeeeee-" : "ffffffffffffffff-");
    char junk[5000];
    memset(junk, 0x33, sizeof junk);
    const struct timeval hour_ago[2] = {{.tv_sec = time(NULL) - 3600}, {.tv_sec = time(NULL) - 3600}};
    write_bytes(old, junk, sizeof junk);
    assert_int_equal(utimes(old, hour_ago), 0);
    write_bytes(young, junk, sizeof junk);
    write_bytes(other, junk, sizeof junk);
    assert_int_equal(utimes(other, hour_ago), 0);
    e = tier_engine(0, dir);
    assert_int_equal(access(old, F_OK), -1);
    assert_int_equal(access(young, F_OK), 0);
    assert_int_equal(access(other, F_OK), 0);
    assert_int_equal(count_in_log("removed 1 unfinished block writes"), 1);
    run_same(e, a, &ref, 192);
    og_engine_free(e);
    fclose(g_lf);
}

/* A restart over a smaller --cache-dir-size removes the least recently used
 * files, by modification time: six files, a's dated 10 hours back and more,
 * b's 1-3 hours, a bound of three files: a's go, b's stay and are read back. */
static void test_restart_trims_oldest(void **state) {
    (void)state;
    enum { N = 200 };
    int32_t a[N], b[N];
    char dir[600];
    tier_case("trim", dir, sizeof dir, a, b, N, 81);
    result rb, r;
    og_engine *e = tier_engine(0, dir);
    run(e, a, N, &r);
    og_engine_free(e);
    char names[16][600], a_names[3][600];
    assert_int_equal(tier_files(dir, ".kvb", names, 16), 3);
    memcpy(a_names, names, sizeof a_names);
    e = tier_engine(0, dir);
    run(e, b, N, &rb);
    og_engine_free(e);
    const int nf = tier_files(dir, ".kvb", names, 16);
    assert_int_equal(nf, 6);
    for (int i = 0; i < nf; i++) { /* the directory's order says nothing of the age */
        bool is_a = false;
        for (int k = 0; k < 3; k++) is_a |= !strcmp(names[i], a_names[k]);
        const time_t t = time(NULL) - (is_a ? 36000 + 3600 * i : 3600 * (1 + i % 3));
        const struct timeval tv[2] = {{.tv_sec = t}, {.tv_sec = t}};
        assert_int_equal(utimes(names[i], tv), 0);
    }
    og_engine_config c = fx_engine_config(1, 64, 256, 4);
    c.kv_blocks = 4;
    c.cache_dir = dir;
    c.cache_dir_bytes = 3 * 12680; /* three files: 136 header + 256 ids + 12,288 payload bytes each */
    c.log = &g_lg;
    e = fx_start(&c);
    for (int k = 0; k < 3; k++) assert_int_equal(access(a_names[k], F_OK), -1);
    assert_int_equal(tier_files(dir, ".kvb", names, 16), 3);
    run_same(e, b, &rb, 192);
    og_engine_free(e);
    fclose(g_lf);
}

/* A small tmpfs at dir (flags: MS_RDONLY or 0); false, with a skip line, where
 * this process may not mount (it needs CAP_SYS_ADMIN). */
static bool mount_small(const char *dir, unsigned long flags, const char *opts) {
    mkdir(dir, 0755);
    if (!mount("tmpfs", dir, "tmpfs", flags, opts)) return true;
    printf("SKIP (hardware): this process may not mount a small tmpfs (%s); the full and read-only cache-dir cases "
           "need one\n", strerror(errno));
    return false;
}

/* --cache-dir on a filesystem smaller than --cache-dir-size (16G by default):
 * a tmpfs that holds 8 block files. Before, the 9th write failed and every one
 * after it, the oldest files staying forever and the newest blocks dropped; now
 * the full filesystem becomes the bound and the least recently used files make
 * room: c's 3 blocks, evicted when the directory was full of a's, b's and c's,
 * all come back. */
static void test_full_filesystem(void **state) {
    (void)state;
    enum { N = 200 };
    char dir[600];
    snprintf(dir, sizeof dir, "%s/full", g_dir);
    /* a file is 136 header + 256 ids + 2 x 64 x 48 x 2 payload bytes = 4 pages; 34 pages hold 8 */
    if (!mount_small(dir, 0, "size=136k")) skip();
    int32_t a[N], b[N], c[N], d[N];
    random_ids(a, N, 51);
    random_ids(b, N, 52);
    random_ids(c, N, 53);
    random_ids(d, N, 54);
    log_open();
    result rc, r;
    og_engine *e = tier_engine(0, dir);
    run(e, a, N, &r);
    run(e, b, N, &r);
    run(e, c, N, &rc);
    run(e, d, N, &r); /* c's 3 out: the 9th file does not fit */
    run_same(e, c, &rc, 192);
    og_engine_metrics m;
    og_engine_metrics_get(e, &m);
    assert_int_equal(m.cache_disk_restored, 3);
    assert_int_equal(m.cache_disk_errors, 0);
    assert_int_equal(m.cache_disk_blocks, 8);
    assert_int_equal(count_in_log("the filesystem is full"), 1);
    assert_pool_whole(e);
    og_engine_free(e);
    fclose(g_lf);
    assert_int_equal(umount2(dir, MNT_DETACH), 0);
}

/* A tier that holds no block (--cache-ram 1, a --cache-dir-size below one block
 * file) is refused with the size it takes, where it was on in name and held
 * nothing; a read-only --cache-dir is said at start. */
static void test_tier_limits(void **state) {
    (void)state;
    char dir[600], err[512];
    snprintf(dir, sizeof dir, "%s/limits", g_dir);
    og_engine_config c = fx_engine_config(1, 64, 256, 4);
    c.kv_blocks = 4;
    og_engine *e = NULL;
    c.cache_ram_bytes = 1;
    og_status st = og_engine_create(&c, &e, err, sizeof err);
    if (!st) st = og_engine_start(e, err, sizeof err);
    assert_int_equal(st, OG_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "--cache-ram 1 B holds no KV block (one is 12.00 KiB"));
    og_engine_free(e);
    e = NULL;
    c.cache_ram_bytes = 0;
    c.cache_dir = dir;
    c.cache_dir_bytes = 12000;
    st = og_engine_create(&c, &e, err, sizeof err);
    if (!st) st = og_engine_start(e, err, sizeof err);
    assert_int_equal(st, OG_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "--cache-dir-size 11.72 KiB holds no KV block file (one is 12.38 KiB"));
    og_engine_free(e);
    char ro[600];
    snprintf(ro, sizeof ro, "%s/ro", dir);
    mkdir(dir, 0755);
    if (!mount_small(ro, MS_RDONLY, "size=64k")) skip();
    log_open();
    e = tier_engine(0, ro);
    assert_int_equal(count_in_log("not writable (Read-only file system): its blocks are read"), 1);
    result r;
    int32_t a[200];
    random_ids(a, 200, 61);
    run(e, a, 200, &r);
    assert_int_equal(r.n, 6);
    og_engine_free(e);
    fclose(g_lf);
    assert_int_equal(umount2(ro, MNT_DETACH), 0);
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
    /* a --cache-dir-size below the smallest state file (the 136-byte header and one id padded to 8) is refused */
    og_kv_tier_config small = tc;
    small.dir_bytes = 143;
    assert_int_equal(og_kv_tier_create(&small, &t, err, sizeof err), OG_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "--cache-dir-size 143 B holds no state file (one is at least 144 B)"));
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
    /* a failed write: a directory where the file goes (STORE-HASH.kvs, STORE that of the files written) */
    char written[N][600];
    assert_true(tier_files(dir, ".kvs", written, N) >= 1);
    const char *store = strrchr(written[0], '/') + 1;
    assert_int_equal(og_kv_tier_create(&tc, &t, err, sizeof err), OG_OK);
    og_kv_tier_set_blocking(t, true);
    int32_t x[IDS];
    char path[800];
    for (int j = 0; j < 2; j++) {
        random_ids(x, IDS, 5000 + (uint64_t)j);
        const og_kv_key kx = {.hash = 0xdead00 + (uint64_t)j, .n_ids = IDS, .ids = x};
        snprintf(path, sizeof path, "%s/%.17s%016llx.kvs", dir, store, (unsigned long long)kx.hash);
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
    static const char *const mounts[] = {"full", "limits/ro"}; /* a failed run's tmpfs mounts */
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd, "%s/%s", g_dir, mounts[i]);
        umount2(cmd, MNT_DETACH);
    }
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
        cmocka_unit_test(test_pool_growing),
        cmocka_unit_test(test_pool_out_of_memory),
        cmocka_unit_test(test_stress),
        cmocka_unit_test(test_tiers_identical),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_fifo_files),
        cmocka_unit_test(test_shared_dir_kv_types),
        cmocka_unit_test(test_stale_writes),
        cmocka_unit_test(test_restart_trims_oldest),
        cmocka_unit_test(test_full_filesystem),
        cmocka_unit_test(test_tier_limits),
        cmocka_unit_test(test_tier_writer),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
