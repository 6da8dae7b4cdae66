/* The prefix cache of deepseek4 / deepseek41 (issue 17 item 2: whole-state
 * snapshots, og_kv_snapshot / og_kv_restore, kept by the engine) on a
 * make-model --arch deepseek4|deepseek41 --preset tiny file with the real
 * tokenizer (argv[1]). The reference is the same engine with the cache off
 * (every prompt prefilled in full), and og_model_info's size formula for the
 * bytes, with the shapes read from the file's keys. */
#include "sanitized_fixture.h" /* OG_TEST_SANITIZED: the sanitizer builds run smaller cases */

#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine_fixture.h" /* g_path, g_m, ..., setup, teardown, greedy */
#include "kv_pool.h"       /* og_kv_tier: files of another model / architecture / options, written as the engine would */
#include "tier_fixture.h"  /* g_log, g_lg, log_open, count_in_log, write_bytes */

#ifdef OG_TEST_SANITIZED
#define CHURN 12 /* test_cache_churn's requests (plain: 100); the identical, fork and after-answer cases
                    are the plain build's (the sanitizer stage is the suite's critical path) */
#else
#define CHURN 100
#endif
#define N_PROMPT 300

/* The loaded model's architecture ("deepseek4" or "deepseek41"). */
static const char *arch_name(void) { return og_model_get_info(g_m)->arch; }

/* The CLI's default numerics (canonical) on the host; cache on or off. */
static og_engine *make_engine(int parallel, int batch_tokens, int ctx, int queue, bool off) {
    og_engine_config c = fx_engine_config(parallel, batch_tokens, ctx, queue);
    c.no_prefix_cache = off;
    return fx_start(&c);
}



static og_seq *submit(og_engine *e, const int32_t *ids, int n, const og_seq_params *p) {
    og_seq *s;
    char err[256];
    if (og_engine_submit(e, ids, n, p, &s, err, sizeof err)) fail_msg("%s", err);
    return s;
}

static void run(og_engine *e, const int32_t *ids, int n, result *r) {
    og_seq_params p = greedy(3);
    collect(e, submit(e, ids, n, &p), r);
}

static void assert_same(const result *a, const result *b) {
    assert_int_equal(a->n, b->n);
    assert_memory_equal(a->ids, b->ids, (size_t)b->n * sizeof *b->ids);
    assert_memory_equal(a->lps, b->lps, (size_t)b->n * sizeof *b->lps); /* bitwise */
}

static uint64_t rng(uint64_t *x) {
    *x = *x * 6364136223846793005ull + 1442695040888963407ull;
    return *x >> 33;
}

static void random_ids(int32_t *v, int n, uint64_t x) {
    for (int i = 0; i < n; i++) v[i] = (int32_t)(rng(&x) % (uint64_t)(og_model_get_info(g_m)->n_vocab - 10));
}

static void check_clean(og_engine *e) {
    char err[256];
    if (og_engine_check(e, err, sizeof err)) fail_msg("%s", err);
}

/* The model's compression ratios, from the file's key (at least 1 each). */
static int ratios_lcm(void) {
    char key[96];
    snprintf(key, sizeof key, "%s.attention.compress_ratios", arch_name());
    const og_gguf_kv *kv = og_gguf_find_kv(og_model_gguf(g_m), key);
    assert_non_null(kv);
    int l = 1;
    for (uint64_t i = 0; i < kv->arr_n; i++) {
        int64_t r;
        assert_int_equal(og_gguf_kv_num_i64(kv, i, &r), OG_OK);
        if (r < 2) continue;
        int a = l, b = (int)r;
        while (b) {
            const int t = a % b;
            a = b;
            b = t;
        }
        l = l / a * (int)r;
    }
    return l;
}

/* Bitwise identical tokens and log-probs with the cache cold, warm, off; the
 * shared part of two prompts ending off a compression boundary (150: not a
 * multiple of the ratios) and on one (a multiple of every ratio, past the
 * window), a prompt shorter than a block (never cached), a prefix of a cached
 * prompt, and a prompt that extends one (the next turn of an agent). The
 * cached counts: a whole earlier prompt but its last token, or where two
 * earlier prompts part. */
static void test_cache_identical(void **state) {
    (void)state;
#ifdef OG_TEST_SANITIZED
    skip();
#endif
    /* off_b: odd, so no ratio's multiple; on_b: the next multiple of every ratio */
    const int N = N_PROMPT, off_b = 151, on_b = ratios_lcm() * (off_b / ratios_lcm() + 1);
    assert_true(on_b > off_b && on_b < N - 20);
    int32_t a[N_PROMPT + 40], v[N_PROMPT + 40];
    random_ids(a, N + 40, 4242);
    /* room for every state below: 4 x one of 4096 positions */
    og_engine *off = make_engine(4, 96, 4096, 8, true), *on = make_engine(4, 96, 4096, 8, false);
    /* prompts: a shares its first `share` ids with the cached ones, then ids of its own (seed) */
    const struct {
        int n, share, seed, cached;
    } cases[] = {
        {N, N, 0, 0},                  /* cold */
        {N, N, 0, N - 1},              /* warm: all but the last token */
        {N, off_b, 1, 0},              /* parts from a at off_b: nothing cached, its state at off_b kept */
        {N, off_b, 2, off_b},          /* the same shared part again */
        {N, on_b, 3, off_b},           /* on a boundary: off_b cached, on_b kept */
        {N, on_b, 4, on_b},
        {40, 40, 0, 0},                /* shorter than a block: never cached */
        {40, 40, 0, 0},
        {N - 20, N - 20, 0, on_b},     /* a prefix of a: the longest cached state within it */
        {N + 40, N + 40, 0, N - 1},    /* a plus more: the next turn */
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        memcpy(v, a, sizeof v);
        if (cases[k].seed) random_ids(v + cases[k].share, N + 40 - cases[k].share, 99 + (uint64_t)cases[k].seed);
        result ro, rn;
        run(off, v, cases[k].n, &ro);
        run(on, v, cases[k].n, &rn);
        print_message("%s case %zu: %d tokens, %d cached (want %d)\n", arch_name(), k, cases[k].n, rn.n_cached,
                      cases[k].cached);
        assert_int_equal(ro.n_cached, 0);
        assert_int_equal(rn.n_cached, cases[k].cached);
        assert_int_equal(ro.n, 3);
        assert_same(&rn, &ro);
    }
    og_engine_metrics m;
    og_engine_metrics_get(on, &m);
    assert_int_equal(m.prefix_hits, 6);
    assert_int_equal(m.prefix_cached_tokens, (uint64_t)(N - 1 + off_b + off_b + on_b + on_b + N - 1));
    assert_true(m.prefix_states >= 5 && m.prefix_state_bytes > 0);
    check_clean(on);
    og_engine_free(off);
    og_engine_free(on);
}

/* A finished sequence leaves its state at its end too (prompt plus the
 * tokens it fed back): a prompt that resends the answer and goes on reads all
 * of it from the cache, and gives the cache-off engine's bits. */
static void test_cache_after_answer(void **state) {
    (void)state;
#ifdef OG_TEST_SANITIZED
    skip();
#endif
    enum { N = 200, G = 6, M = N + G + 20 };
    int32_t a[M];
    random_ids(a, M, 8080);
    og_engine *off = make_engine(4, 96, 4096, 8, true), *on = make_engine(4, 96, 4096, 8, false);
    og_seq_params p = greedy(G);
    result r0, ro, rn;
    collect(on, submit(on, a, N, &p), &r0);
    assert_int_equal(r0.n, G);
    assert_int_equal(r0.finish, OG_FINISH_LENGTH);
    memcpy(a + N, r0.ids, G * sizeof *a); /* the answer resent, then a new message */
    run(off, a, M, &ro);
    run(on, a, M, &rn);
    assert_int_equal(rn.n_cached, N + G - 1); /* the last answer token was never fed back */
    assert_same(&rn, &ro);
    check_clean(on);
    og_engine_free(off);
    og_engine_free(on);
}

/* Memory per cached token: the device bytes a snapshot takes on a budgeted cpu
 * device (its free memory before and after) are og_kv_snap.bytes and, at a
 * position that is a multiple of every ratio (read from the file), exactly
 * og_model_info's formula (kv_elems_fixed + n x kv_elems_per_token) x
 * kv_elem_bytes; elsewhere at most it (a partial block holds no row). A
 * restored state runs on to the logits the source gives, bit for bit. */
static void test_snapshot_bytes(void **state) {
    (void)state;
    char err[256];
    const og_model_info *mi = og_model_get_info(g_m);
    assert_true(mi->kv_snapshot);
    og_device *dev;
    og_stream *s;
    og_run_ctx rc = fx_device_rc(512u << 20, &dev, &s);
    const int L = ratios_lcm(), P = L * ((200 + L - 1) / L); /* past the window and several blocks */
    int32_t ids[512];
    assert_true(P + 8 <= 512);
    random_ids(ids, P + 8, 77);
    const size_t V = mi->n_vocab;
    float *la = malloc(V * sizeof *la), *lb = malloc(V * sizeof *lb);
    for (int at = 0; at < 2; at++) { /* at a multiple of the ratios, then 3 positions past one */
        const int n = P + 3 * at;
        og_kv kv = {.n_ctx = 1024};
        assert_int_equal(og_model_forward(g_m, &rc, &kv, ids, n, la, false, err, sizeof err), OG_OK);
        uint64_t free0, free1, total;
        assert_int_equal(dev->ops->mem_info(dev, &free0, &total), OG_OK);
        og_kv_snap snap;
        if (og_kv_snapshot(g_m, &rc, &kv, &snap, err, sizeof err)) fail_msg("%s", err);
        assert_int_equal(dev->ops->mem_info(dev, &free1, &total), OG_OK);
        const uint64_t formula =
            (mi->kv_elems_fixed + (uint64_t)((double)n * mi->kv_elems_per_token + 0.999999)) * mi->kv_elem_bytes;
        print_message("%s: a state of %d positions: %llu bytes (%.1f per position), formula %llu\n", arch_name(), n,
                      (unsigned long long)snap.bytes, (double)snap.bytes / n, (unsigned long long)formula);
        assert_int_equal(free0 - free1, snap.bytes);
        if (!at) assert_int_equal(snap.bytes, formula);
        else assert_true(snap.bytes <= formula && snap.bytes > formula - mi->kv_elems_per_token * 3 * L * 4);
        assert_int_equal(snap.n_pos, n);
        /* restore, then both run the same 5 tokens */
        og_kv b = {.n_ctx = 1024};
        if (og_kv_restore(g_m, &rc, &snap, &b, err, sizeof err)) fail_msg("%s", err);
        assert_int_equal(b.n_pos, n);
        assert_int_equal(og_model_forward(g_m, &rc, &kv, ids + n, 5, la, false, err, sizeof err), OG_OK);
        assert_int_equal(og_model_forward(g_m, &rc, &b, ids + n, 5, lb, false, err, sizeof err), OG_OK);
        assert_memory_equal(la, lb, V * sizeof *la);
        /* bad cases: a restore into a full cache, into another context, of another option set */
        assert_int_equal(og_kv_restore(g_m, &rc, &snap, &b, err, sizeof err), OG_ERR_INVALID_ARG);
        og_kv c = {.n_ctx = 512};
        assert_int_equal(og_kv_restore(g_m, &rc, &snap, &c, err, sizeof err), OG_ERR_INVALID_ARG);
        assert_non_null(strstr(err, "context"));
        og_run_ctx host = rc;
        host.dev = NULL;
        host.stream = NULL;
        assert_int_equal(og_kv_restore(g_m, &host, &snap, &c, err, sizeof err), OG_ERR_INVALID_ARG);
        og_kv_free(&b);
        og_kv_free(&kv);
        uint64_t free2, free3;
        assert_int_equal(dev->ops->mem_info(dev, &free2, &total), OG_OK);
        og_kv_snap_free(&snap);
        assert_int_equal(dev->ops->mem_info(dev, &free3, &total), OG_OK);
        assert_int_equal(free3 - free2, free0 - free1); /* the snapshot's bytes come back */
    }
    og_kv empty = {0};
    og_kv_snap snap;
    assert_int_equal(og_kv_snapshot(g_m, &rc, &empty, &snap, err, sizeof err), OG_ERR_INVALID_ARG);
    free(la);
    free(lb);
    dev->ops->stream_destroy(dev, s);
    og_device_destroy(dev);
}

/* A snapshot of another option set is never restored: og_kv_restore refuses
 * it, and the engine's cache (keyed on og_model_kv_key) misses and prefills
 * in full, giving what a cold engine with the new option gives. */
static void test_other_options(void **state) {
    (void)state;
    char err[256];
    enum { N = 200 };
    int32_t a[N];
    random_ids(a, N, 31337);
    og_run_ctx rc = {.kern = &g_kern, .pool = g_pool, .dispatch = g_host, .device_numerics = OG_NUMERICS_CANONICAL,
                     .host_numerics = OG_NUMERICS_CANONICAL};
    float *lg = malloc(og_model_get_info(g_m)->n_vocab * sizeof *lg);
    og_kv kv = {.n_ctx = 1024}, b = {.n_ctx = 1024};
    assert_int_equal(og_model_forward(g_m, &rc, &kv, a, 100, lg, false, err, sizeof err), OG_OK);
    og_kv_snap snap;
    if (og_kv_snapshot(g_m, &rc, &kv, &snap, err, sizeof err)) fail_msg("%s", err);
    /* a snapshot that holds fewer bytes than its positions need (a crafted file's): refused before a copy */
    og_kv_snap short_snap = snap;
    short_snap.bytes -= 4;
    assert_int_equal(og_kv_restore(g_m, &rc, &short_snap, &b, err, sizeof err), OG_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "the snapshot holds"));
    assert_null(b.arch);
    og_engine *on = make_engine(4, 96, 4096, 8, false);
    result r0, r1, ro;
    run(on, a, N, &r0);
    run(on, a, N, &r1);
    assert_int_equal(r1.n_cached, N - 1);
    assert_same(&r1, &r0);
    const uint64_t key = og_model_kv_key(g_m);
    /* kv-fp8: deepseek4's default on, deepseek41's off; the other value */
    const char *flip = strcmp(arch_name(), "deepseek4") ? "on" : "off";
    assert_int_equal(og_model_set_option(g_m, "kv-fp8", flip, err, sizeof err), OG_OK);
    assert_true(og_model_kv_key(g_m) != key);
    assert_int_equal(og_kv_restore(g_m, &rc, &snap, &b, err, sizeof err), OG_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "other options"));
    assert_null(b.arch);
    run(on, a, N, &r1);
    assert_int_equal(r1.n_cached, 0);
    og_engine *off = make_engine(4, 96, 4096, 8, true);
    run(off, a, N, &ro);
    assert_same(&r1, &ro);
    /* the option makes a difference on this prompt (else the miss proves nothing) */
    assert_true(r1.ids[0] != r0.ids[0] || memcmp(&r1.lps[0], &r0.lps[0], sizeof(float)));
    og_engine_free(off);
    check_clean(on);
    og_engine_free(on);
    assert_int_equal(og_model_set_option(g_m, "kv-fp8", strcmp(flip, "on") ? "on" : "off", err, sizeof err), OG_OK);
    og_kv_snap_free(&snap);
    og_kv_free(&kv);
    free(lg);
}

/* n > 1 with the cache on: 3 choices at temperature 0, cold and warm, are
 * each the cache-off single sequence, bit for bit, and share its cached count. */
static void test_cache_fork(void **state) {
    (void)state;
#ifdef OG_TEST_SANITIZED
    skip();
#endif
    enum { N = 180 };
    int32_t a[N];
    random_ids(a, N, 5151);
    og_engine *off = make_engine(4, 96, 4096, 8, true), *on = make_engine(4, 96, 4096, 8, false);
    result ro;
    run(off, a, N, &ro);
    for (int warm = 0; warm < 2; warm++) {
        og_seq *s[3];
        og_seq_params p = greedy(3);
        char err[256];
        if (og_engine_submit_n(on, a, N, &p, 3, s, err, sizeof err)) fail_msg("%s", err);
        for (int i = 0; i < 3; i++) {
            result r;
            collect(on, s[i], &r);
            assert_int_equal(r.n_cached, warm ? N - 1 : 0);
            assert_same(&r, &ro);
        }
    }
    check_clean(on);
    og_engine_free(off);
    og_engine_free(on);
}

/* CHURN requests (a few of them n = 2) with random shared prefixes, lengths
 * and cancels: between and after them no entry stays referenced, the check
 * passes and the states stay within the budget; then the cache still serves. */
static void test_cache_churn(void **state) {
    (void)state;
    enum { BASE = 3, L = 160 };
    int32_t base[BASE][L], buf[L];
    for (int k = 0; k < BASE; k++) random_ids(base[k], L, 900 + (uint64_t)k);
    og_engine *e = make_engine(3, 64, 512, CHURN * 2, false);
    og_seq *s[CHURN][2];
    uint64_t x = 2024;
    for (int r = 0; r < CHURN; r++) {
        const int k = (int)(rng(&x) % BASE), n = 1 + (int)(rng(&x) % L), cut = (int)(rng(&x) % (uint64_t)(n + 1));
        memcpy(buf, base[k], sizeof buf);
        for (int i = cut; i < n; i++) buf[i] = (buf[i] + 1 + r) % 1000;
        og_seq_params p = greedy(1 + (int)(rng(&x) % 2));
        const int nc = rng(&x) % 8 == 0 ? 2 : 1;
        char err[256];
        s[r][1] = NULL;
        if (og_engine_submit_n(e, buf, n, &p, nc, s[r], err, sizeof err)) fail_msg("%s", err);
        for (int c = 0; c < nc; c++)
            if (rng(&x) % 3 == 0) {
                if (rng(&x) % 2) usleep(2000);
                og_seq_release(e, s[r][c]);
                s[r][c] = NULL;
            }
        if (r % 16 == 0) check_clean(e);
    }
    for (int r = 0; r < CHURN; r++)
        for (int c = 0; c < 2; c++)
            if (s[r][c]) {
                result res;
                collect(e, s[r][c], &res);
                assert_true(res.finish == OG_FINISH_STOP || res.finish == OG_FINISH_LENGTH);
            }
    og_engine_metrics m;
    for (int k = 0; k < 200; k++) {
        og_engine_metrics_get(e, &m);
        if (m.running == 0 && m.queued == 0) break;
        og_engine_wait(e, 0.05);
    }
    check_clean(e);
    result r1, r2;
    run(e, base[0], L, &r1);
    run(e, base[0], L, &r2);
    assert_int_equal(r2.n_cached, L - 1);
    assert_same(&r2, &r1);
    og_engine_drain(e, 0);
    og_engine_metrics_get(e, &m);
    assert_int_equal(m.running, 0);
    assert_true(m.prefix_states > 0 && m.prefix_hits > 0);
    check_clean(e);
    og_engine_free(e);
}


/* ---- the tiers of the states (--cache-ram / --cache-dir) ---- */

static char g_dir[512];

/* parallel 2, ctx 512: the memory's room holds about two states of 300
 * positions, so a few other prompts push a prompt's state out to the tiers. */
static og_engine *tier_engine(uint64_t ram, const char *dir) {
    og_engine_config c = fx_engine_config(2, 96, 512, 8);
    c.cache_ram_bytes = ram;
    c.cache_dir = dir;
    c.log = &g_lg;
    return fx_start(&c);
}


enum { TN = 300, TK = 3 }; /* a prompt's length; the other prompts that push its state out */

/* a, then TK other prompts (their states push a's out of memory), then a
 * again: its tokens and log-probs are ref's and all but its last token are
 * read from the cache. */
static void run_evicting(og_engine *e, const int32_t *a, const result *ref, int want_first) {
    result r;
    int32_t b[TN];
    run(e, a, TN, &r);
    assert_same(&r, ref);
    assert_int_equal(r.n_cached, want_first);
    for (int k = 0; k < TK; k++) {
        random_ids(b, TN, 500 + (uint64_t)k);
        run(e, b, TN, &r);
    }
    run(e, a, TN, &r);
    assert_same(&r, ref);
    assert_int_equal(r.n_cached, TN - 1);
}

/* Bitwise the cache-off tokens and log-probs with a's state warm from memory,
 * from RAM (memory's room too small for it: it left), from the directory, and
 * from the directory after a restart (engine freed: its states written, then a
 * new engine on the same directory); og_engine_check passes after each. */
static void test_tiers_identical(void **state) {
    (void)state;
#ifdef OG_TEST_SANITIZED
    skip();
#endif
    if (!g_dir[0]) skip(); /* no directory given */
    int32_t a[TN];
    random_ids(a, TN, 777);
    log_open();
    result ref, r;
    og_engine *off = make_engine(2, 96, 512, 8, true);
    run(off, a, TN, &ref);
    og_engine_free(off);
    og_engine_metrics m;
    /* memory: a right after itself */
    og_engine *e = tier_engine(0, NULL);
    run(e, a, TN, &r);
    run(e, a, TN, &r);
    assert_same(&r, &ref);
    assert_int_equal(r.n_cached, TN - 1);
    og_engine_free(e);
    /* RAM */
    e = tier_engine(256ull << 20, NULL);
    run_evicting(e, a, &ref, 0);
    og_engine_metrics_get(e, &m);
    print_message("%s RAM: %llu states stored, %llu restored, %llu held (%llu bytes)\n", arch_name(),
                  (unsigned long long)m.cache_ram_states_stored, (unsigned long long)m.cache_ram_states_restored,
                  (unsigned long long)m.cache_ram_states, (unsigned long long)m.cache_ram_state_bytes);
    assert_true(m.cache_ram_states_stored >= 1);
    assert_int_equal(m.cache_ram_states_restored, 1);
    assert_int_equal(m.cache_disk_states_restored, 0);
    check_clean(e);
    og_engine_free(e);
    /* the directory, then a restart on it (RAM and the directory) */
    char dir[600], names[64][600];
    snprintf(dir, sizeof dir, "%s/states", g_dir);
    e = tier_engine(0, dir);
    run_evicting(e, a, &ref, 0);
    og_engine_cache_sync(e);
    og_engine_metrics_get(e, &m);
    assert_true(m.cache_disk_states_stored >= 1);
    assert_int_equal(m.cache_disk_states_restored, 1);
    assert_int_equal(m.cache_write_queue, 0);
    assert_int_equal((int)m.cache_disk_states, tier_files(dir, ".kvs", names, 64));
    check_clean(e);
    og_engine_free(e); /* the cached states are written: the writer's queue drains first */
    const int nf = tier_files(dir, ".kvs", names, 64);
    assert_true(nf >= TK + 1);
    e = tier_engine(64ull << 20, dir);
    og_engine_metrics_get(e, &m);
    assert_int_equal((int)m.cache_disk_states, nf);
    run(e, a, TN, &r);
    assert_same(&r, &ref);
    assert_int_equal(r.n_cached, TN - 1);
    og_engine_metrics_get(e, &m);
    assert_int_equal(m.cache_disk_states_restored, 1);
    assert_int_equal(m.cache_disk_states_skipped, 0);
    check_clean(e);
    og_engine_free(e);
    assert_int_equal(count_in_log("cache-dir: skipping"), 0);
    fclose(g_lf);
}


/* A state file written through og_kv_tier as the engine's would be, but of
 * another model (model_id), architecture or option set (kv_key): under its
 * own name in dir (another store's: left alone) when store is NULL, else moved
 * to dir under store (the first 17 characters of one of ours, STORE-), so that
 * its header is what refuses it. */
static void foreign_file(const char *dir, uint64_t model_id, const char *arch, uint64_t kv_key, const char *store) {
    const og_model_info *mi = og_model_get_info(g_m);
    char scratch[700];
    snprintf(scratch, sizeof scratch, "%s.foreign", dir);
    og_kv_tier_config tc = {.kind = OG_KV_TIER_STATES, .dir = store ? scratch : dir, .dir_bytes = 1ull << 30,
                            .model_id = model_id, .kv_key = kv_key, .arch = arch, .kv_type = OG_KV_F32,
                            .geom = {mi->n_layer, 512, mi->kv_elem_bytes, 0}, .log = &g_quiet};
    og_kv_tier *t;
    char err[256];
    assert_int_equal(og_kv_tier_create(&tc, &t, err, sizeof err), OG_OK);
    int32_t ids[100];
    random_ids(ids, 100, model_id ^ kv_key);
    const og_kv_key k = {.hash = og_fnv1a64(ids, sizeof ids, model_id), .n_ids = 100, .ids = ids};
    const uint64_t meta[2] = {64, 512};
    char payload[128] = {0};
    og_kv_tier_put(t, &k, meta, payload, sizeof payload);
    og_kv_tier_free(t);
    if (!store) return;
    char names[2][600], path[800];
    assert_int_equal(tier_files(scratch, ".kvs", names, 2), 1);
    snprintf(path, sizeof path, "%s/%.17s%s", dir, store, strrchr(names[0], '/') + 18);
    assert_int_equal(rename(names[0], path), 0);
}

/* Bad files in the directory under our store's names, each skipped with one
 * log line, never read, and removed: at start a truncated copy, junk under a
 * state file's name, a state of another model, another architecture, and one
 * of this model under another option (kv-fp8 flipped: a real engine's file);
 * at lookup every real state with a byte of its payload flipped. The output is
 * the cold one. Another model's file under its own name is left alone (one
 * line), and a restart finds none of the unsound ones. */
static void test_tiers_bad_files(void **state) {
    (void)state;
    if (!g_dir[0]) skip();
    int32_t a[TN], b[TN];
    random_ids(a, TN, 4321);
    random_ids(b, TN, 4322);
    char dir[600], dir2[600], err[256], names[64][600], path[700];
    snprintf(dir, sizeof dir, "%s/bad", g_dir);
    snprintf(dir2, sizeof dir2, "%s/bad-opt", g_dir);
    log_open();
    result ref, r;
    /* another option: the same prompt's state with kv-fp8 flipped (first: setting it back gives the
     * model a key of its own too, og_model_kv_key, which the files below are written under) */
    const char *flip = strcmp(arch_name(), "deepseek4") ? "on" : "off";
    assert_int_equal(og_model_set_option(g_m, "kv-fp8", flip, err, sizeof err), OG_OK);
    og_engine *e = tier_engine(0, dir2);
    run(e, a, TN, &r);
    og_engine_free(e);
    assert_int_equal(og_model_set_option(g_m, "kv-fp8", strcmp(flip, "on") ? "on" : "off", err, sizeof err), OG_OK);
    e = tier_engine(0, dir);
    run(e, a, TN, &ref);
    run(e, b, TN, &r);
    og_engine_free(e);
    const int nf = tier_files(dir, ".kvs", names, 64);
    assert_true(nf >= 2);
    char opt[8][600];
    assert_true(tier_files(dir2, ".kvs", opt, 8) >= 1);
    const char *base = strrchr(names[0], '/') + 1; /* STORE-HASH.kvs: this model's store */
    snprintf(path, sizeof path, "%s/%.16s-00000000000000aa.kvs", dir, base);
    assert_int_equal(rename(opt[0], path), 0);
    const uint64_t id = og_kv_model_id(og_model_gguf(g_m));
    foreign_file(dir, id ^ 1, arch_name(), 0, base);
    foreign_file(dir, id, "deepseek2", 0, base);
    foreign_file(dir, id ^ 2, arch_name(), 0, NULL);
    /* a truncated copy, junk */
    bad_copies(names[0]);
    /* every real state: a byte in the middle of its payload flipped */
    for (int i = 0; i < nf; i++) flip_byte(names[i], 1000, 0x10);
    log_clear();
    e = tier_engine(0, dir);
    og_engine_metrics m;
    og_engine_metrics_get(e, &m);
    print_message("%s: %s\n", arch_name(), g_log);
    assert_int_equal(m.cache_disk_states_skipped, 5);
    assert_int_equal((int)m.cache_disk_states, nf);
    assert_int_equal(count_in_log("cache-dir: skipping"), 5);
    assert_int_equal(count_in_log("other model options"), 1);
    assert_int_equal(count_in_log("another model"), 1);
    assert_int_equal(count_in_log("another architecture"), 1);
    assert_int_equal(count_in_log("truncated"), 1);
    assert_int_equal(count_in_log("not a state file"), 1);
    assert_int_equal(count_in_log("1 state files of other models, kv-types or geometries left alone"), 1);
    run(e, a, TN, &r);
    assert_same(&r, &ref);
    assert_int_equal(r.n_cached, 0); /* a's state's file is refused */
    og_engine_metrics_get(e, &m);
    assert_int_equal(m.cache_disk_states_restored, 0);
    assert_int_equal(m.cache_disk_states_skipped, 6);
    assert_int_equal(count_in_log("payload's checksum"), 1);
    check_clean(e);
    og_engine_free(e);
    /* the unsound ones were removed where they were found: a restart skips none */
    log_clear();
    e = tier_engine(0, dir);
    og_engine_metrics_get(e, &m);
    assert_int_equal(m.cache_disk_states_skipped, 0);
    assert_int_equal(count_in_log("cache-dir: skipping"), 0);
    og_engine_free(e);
    fclose(g_lf);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_engine_ds4 MODEL.gguf [TIER_DIR] (deepseek4 or deepseek41, with a tokenizer; "
                "TIER_DIR: a scratch directory for the --cache-dir cases, emptied first)\n");
        return 1;
    }
    g_path = argv[1];
    /* the tiers' directories: argv[2], else beside the model */
    if (argc > 2) {
        snprintf(g_dir, sizeof g_dir, "%s", argv[2]);
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", g_dir, g_dir);
        if (system(cmd)) return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_snapshot_bytes), cmocka_unit_test(test_cache_identical),
        cmocka_unit_test(test_other_options),  cmocka_unit_test(test_cache_fork),
        cmocka_unit_test(test_cache_churn),   cmocka_unit_test(test_cache_after_answer),
        cmocka_unit_test(test_tiers_identical), cmocka_unit_test(test_tiers_bad_files),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
