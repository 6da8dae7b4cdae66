/* The engine (scheduler, stop strings, cancellation) on a make-model file with
 * the real DeepSeek-V3 tokenizer (argv[1]). References are computed another
 * way: a plain og_model_forward loop with argmax and a log-softmax here. */
#include "og_arch.h" /* white-box: a model whose info says its state is not paged (test_prefix_cache_unpaged) */
#include "og_engine.h"
#include "og_moe.h" /* og_plan_make: the planner's KV term */
#include "sanitized_fixture.h" /* OG_TEST_SANITIZED: the sanitizer builds run smaller cases */

#include <jansson.h>

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine_fixture.h" /* g_path, g_m, ..., setup, teardown, greedy */

static const char *g_onegpu;

/* An engine whose forward passes use numerics nm for every product (og_run_ctx). */
static og_engine *make_engine_nm(int parallel, int batch_tokens, int ctx, int queue, bool start, og_numerics nm) {
    og_engine_config c = {.model = g_m,
                          .tok = g_tok,
                          .rc = {.kern = &g_kern, .pool = g_pool, .dispatch = g_host, .device_numerics = nm, .host_numerics = nm},
                          .parallel = parallel,
                          .batch_tokens = batch_tokens,
                          .ctx = ctx,
                          .queue = queue};
    og_engine *e;
    char err[256];
    if (og_engine_create(&c, &e, err, sizeof err)) fail_msg("%s", err);
    if (start && og_engine_start(e, err, sizeof err)) fail_msg("%s", err);
    return e;
}

static og_engine *make_engine(int parallel, int batch_tokens, int ctx, int queue, bool start) {
    return make_engine_nm(parallel, batch_tokens, ctx, queue, start, OG_NUMERICS_FORK);
}

static og_ids prompt_ids(const char *text) {
    og_ids ids = {0};
    assert_int_equal(og_tokenize(g_tok, text, strlen(text), og_tokenizer_add_bos(g_tok), true, &ids), OG_OK);
    return ids;
}


static og_seq *submit(og_engine *e, const og_ids *ids, const og_seq_params *p) {
    og_seq *s;
    char err[256];
    if (og_engine_submit(e, ids->v, (int)ids->n, p, &s, err, sizeof err)) fail_msg("%s", err);
    return s;
}


static void test_holdback(void **state) {
    (void)state;
    const char *s1[] = {"world"};
    assert_int_equal(og_stop_holdback("hello wor", 9, s1, 1), 3);
    assert_int_equal(og_stop_holdback("hello world", 11, s1, 1), 0); /* a full match is the caller's */
    assert_int_equal(og_stop_holdback("hello", 5, s1, 1), 0);
    const char *s2[] = {"abx", "bab"};
    assert_int_equal(og_stop_holdback("xxab", 4, s2, 2), 2);  /* "ab" of "abx" */
    assert_int_equal(og_stop_holdback("xxba", 4, s2, 2), 2);  /* "ba" of "bab" */
    const char *s3[] = {"x"};
    assert_int_equal(og_stop_holdback("abc", 3, s3, 1), 0); /* one byte: never held, matched at once */
    assert_int_equal(og_stop_holdback("", 0, s1, 1), 0);
}

/* Greedy tokens and log-probs from the engine (chunked prefill, 4 slots) equal a
 * plain forward loop's argmax and log-softmax. */
static void test_greedy_matches_forward_loop(void **state) {
    (void)state;
    og_ids ids = prompt_ids("The quick brown fox jumps over the lazy dog, and then it");
    const int n_new = 10;
    og_run_ctx rc = {.kern = &g_kern, .pool = g_pool, .dispatch = g_host};
    og_kv kv = {0};
    float *logits = malloc(og_model_get_info(g_m)->n_vocab * sizeof *logits);
    int32_t ref[16];
    float ref_lp[16];
    char err[256];
    assert_int_equal(og_model_forward(g_m, &rc, &kv, ids.v, (int)ids.n, logits, false, err, sizeof err), OG_OK);
    for (int t = 0; t < n_new; t++) {
        int32_t best = 0;
        for (uint32_t j = 1; j < og_model_get_info(g_m)->n_vocab; j++)
            if (logits[j] > logits[best]) best = (int32_t)j;
        double lse = 0;
        for (uint32_t j = 0; j < og_model_get_info(g_m)->n_vocab; j++) lse += exp((double)logits[j] - logits[best]);
        ref[t] = best;
        ref_lp[t] = (float)(-log(lse));
        assert_int_equal(og_model_forward(g_m, &rc, &kv, &best, 1, logits, false, err, sizeof err), OG_OK);
    }
    og_kv_free(&kv);
    free(logits);

    og_engine *e = make_engine(4, 5, 256, 4, true); /* 5-token chunks: the prompt takes several steps */
    og_seq_params p = greedy(n_new);
    result r;
    collect(e, submit(e, &ids, &p), &r);
    og_engine_free(e);
    int n_eog = 0;
    for (int t = 0; t < n_new; t++) n_eog += og_tokenizer_is_eog(g_tok, ref[t]);
    assert_int_equal(n_eog, 0); /* the comparison below assumes no end of generation */
    assert_int_equal(r.n, n_new);
    assert_int_equal(r.n_gen, n_new);
    assert_int_equal(r.finish, OG_FINISH_LENGTH);
    for (int t = 0; t < n_new; t++) {
        assert_int_equal(r.ids[t], ref[t]);
        assert_float_equal(r.lps[t], ref_lp[t], 1e-4);
    }
    /* the text is the tokens' text */
    char text[4096];
    size_t len = 0;
    og_detok dt = {0};
    for (int t = 0; t < n_new; t++) og_detok_push(g_tok, &dt, ref[t], text, sizeof text, &len);
    og_detok_flush(&dt, text, sizeof text, &len);
    assert_int_equal(r.len, len);
    assert_memory_equal(r.text, text, len);
    og_ids_free(&ids);
}

#ifdef OG_TEST_SANITIZED
#define PC_LOOP 30
#define FORK_CASES 1   /* test_fork_greedy: the 150-token prompt (two full blocks and a partial one), cache on */
#define LONG_PROMPT 600 /* test_short_prompt_behind_long: still ten steps of prefill */
#define BI_OTHERS 3    /* test_batch_invariance: 3 others beside the request (a batch of 4) */
#define BI_TOKENS 6    /* test_batch_invariance: the request's tokens */
#else
#define PC_LOOP 200
#define FORK_CASES 3   /* test_fork_greedy: three prompt lengths, each with the cache on and off */
#define LONG_PROMPT 2000
#define BI_OTHERS 7
#define BI_TOKENS 12
#endif

/* A sampled request alone and alongside BI_OTHERS others (different prompts,
 * seeds, lengths): bit-identical tokens and log-probs, with the fork's numerics
 * and with the canonical ones (the CLI's default). The sanitizer builds run a
 * batch of 4 and 6 tokens (the same batched paths); the plain build 8 and 12. */
static void batch_invariance(og_numerics nm) {
    og_ids ids = prompt_ids("Once upon a time");
    og_seq_params p = greedy(BI_TOKENS);
    p.sampling.temperature = 0.9f;
    p.sampling.top_p = 0.95f;
    p.sampling.seed = 1234;
    p.n_top = 3;
    og_engine *e = make_engine_nm(BI_OTHERS + 1, 64, 256, BI_OTHERS + 1, true, nm);
    result alone, together;
    collect(e, submit(e, &ids, &p), &alone);
    og_seq *others[BI_OTHERS];
    og_ids oids[BI_OTHERS];
    for (int i = 0; i < BI_OTHERS; i++) {
        char txt[64];
        snprintf(txt, sizeof txt, "Other prompt number %d is a little longer than the rest %d", i, i * i);
        oids[i] = prompt_ids(txt);
        og_seq_params q = p;
        q.sampling.seed = (uint64_t)i;
        q.max_tokens = 5 + 3 * i;
        others[i] = submit(e, &oids[i], &q);
    }
    collect(e, submit(e, &ids, &p), &together);
    for (int i = 0; i < BI_OTHERS; i++) {
        result r;
        collect(e, others[i], &r);
        assert_int_equal(r.n_gen, 5 + 3 * i);
        og_ids_free(&oids[i]);
    }
    og_engine_free(e);
    assert_int_equal(alone.n, together.n);
    assert_true(alone.n > 0);
    assert_memory_equal(alone.ids, together.ids, (size_t)alone.n * sizeof *alone.ids);
    assert_memory_equal(alone.lps, together.lps, (size_t)alone.n * sizeof *alone.lps); /* bitwise */
    assert_int_equal(alone.len, together.len);
    assert_memory_equal(alone.text, together.text, alone.len);
    og_ids_free(&ids);
}

static void test_batch_invariance(void **state) {
    (void)state;
    batch_invariance(OG_NUMERICS_FORK);
    batch_invariance(OG_NUMERICS_CANONICAL);
}

/* A stop string that spans token boundaries ends the text right before it,
 * and no piece handed over ever held part of it. */
static void test_stop_across_tokens(void **state) {
    (void)state;
    og_ids ids = prompt_ids("Write a list of fruits:");
    og_engine *e = make_engine(2, 32, 256, 2, true);
    og_seq_params p = greedy(24);
    result full;
    collect(e, submit(e, &ids, &p), &full);
    assert_true(full.n >= 8);
    /* token texts' start offsets, from the token ids */
    size_t starts[256], pos = 0;
    char buf[256];
    for (int t = 0; t < full.n; t++) {
        starts[t] = pos;
        int b = og_token_to_bytes(g_tok, full.ids[t], false, buf, sizeof buf);
        pos += b > 0 ? (size_t)b : 0;
    }
    /* from the middle of a token's text (or its start) to past the next token's start */
    int t0 = 3;
    size_t a = starts[t0] + (starts[t0 + 1] - starts[t0]) / 2, b_end = starts[t0 + 2] + 1;
    assert_true(b_end <= full.len && b_end - a >= 2);
    char stop[128];
    memcpy(stop, full.text + a, b_end - a);
    stop[b_end - a] = 0;
    /* the expected end: the first occurrence of stop in the full text */
    const char *first = strstr(full.text, stop);
    assert_non_null(first);
    size_t expect = (size_t)(first - full.text);
    p.stop[0] = "\x01 never generated"; /* stop_index names the string that matched: 1 */
    p.stop[1] = stop;
    p.n_stop = 2;
    og_seq *s = submit(e, &ids, &p);
    char got[4096];
    size_t got_len = 0;
    og_finish f = OG_FINISH_NONE;
    int stop_index = -2;
    while (f == OG_FINISH_NONE) {
        og_seq_out o;
        assert_int_equal(og_seq_take(e, s, &o), OG_OK);
        memcpy(got + got_len, o.text, o.len);
        got_len += o.len;
        got[got_len] = 0;
        /* everything handed over so far lies before the stop string */
        assert_true(got_len <= expect);
        f = o.finish;
        stop_index = o.stop_index;
        og_seq_out_free(&o);
        if (f == OG_FINISH_NONE) og_engine_wait(e, 0.05);
    }
    og_seq_release(e, s);
    og_engine_free(e);
    assert_int_equal(f, OG_FINISH_STOP);
    assert_int_equal(stop_index, 1);
    assert_int_equal(got_len, expect);
    assert_memory_equal(got, full.text, expect);
    og_ids_free(&ids);
}

/* Sequences released while queued, prefilling or decoding leave no KV block,
 * no running sequence and no queue entry behind. */
static void test_cancel_frees_everything(void **state) {
    (void)state;
    og_ids ids = prompt_ids("A long enough prompt so that the prefill takes a few steps of eight tokens each, at least.");
    og_engine *e = make_engine(4, 8, 256, 16, true);
    og_seq_params p = greedy(200);
    og_seq *s[20];
    for (int i = 0; i < 20; i++) s[i] = submit(e, &ids, &p);
    og_engine_metrics m;
    for (int i = 0; i < 20; i++) {
        usleep((useconds_t)(i % 5) * 3000);
        og_seq_release(e, s[i]);
    }
    for (int k = 0; k < 200; k++) {
        og_engine_metrics_get(e, &m);
        if (m.running == 0 && m.queued == 0) break;
        og_engine_wait(e, 0.05);
    }
    og_engine_metrics_get(e, &m);
    assert_int_equal(m.running, 0);
    assert_int_equal(m.queued, 0);
    assert_int_equal(m.kv_blocks_used, 0);
    assert_int_equal(m.seqs_cancelled + m.seqs_finished, 20);
    assert_true(m.seqs_cancelled >= 16); /* 200 tokens each: almost none can finish */
    /* the engine still serves */
    og_seq_params q = greedy(3);
    result r;
    collect(e, submit(e, &ids, &q), &r);
    assert_int_equal(r.n_gen, 3);
    og_engine_free(e);
    og_ids_free(&ids);
}


static og_engine *make_pc_engine(int parallel, int batch_tokens, int ctx, int queue, bool off) {
    og_engine_config c = fx_engine_config(parallel, batch_tokens, ctx, queue);
    c.no_prefix_cache = off;
    return fx_start(&c);
}

static void pc_run(og_engine *e, const int32_t *ids, int n, result *r) {
    og_ids v = {.v = (int32_t *)ids, .n = (size_t)n};
    og_seq_params p = greedy(6);
    collect(e, submit(e, &v, &p), r);
}

/* The prefix cache: the same tokens and log-probs (bitwise) cold, warm, with a
 * shared prefix diverging inside a block and at a block boundary, and with the
 * cache off (the reference); the cached token counts follow the block rule. */
static void test_prefix_cache_identical(void **state) {
    (void)state;
    enum { N = 200 };
    int32_t a[N], b[N], c[N];
    uint64_t x = 12345;
    for (int i = 0; i < N; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        a[i] = b[i] = c[i] = (int32_t)((x >> 33) % (uint64_t)(og_model_get_info(g_m)->n_vocab - 10));
    }
    for (int i = 150; i < N; i++) b[i] = (a[i] + 7) % (int32_t)(og_model_get_info(g_m)->n_vocab - 10); /* inside block 2 */
    for (int i = 128; i < N; i++) c[i] = (a[i] + 3) % (int32_t)(og_model_get_info(g_m)->n_vocab - 10); /* at its start */
    const int32_t *pr[5] = {a, a, b, c, a};
    const int np[5] = {N, N, N, N, 192};
    const int want_cached[5] = {0, 192, 128, 128, 128}; /* 192 = 3 blocks: the last token is prefilled */
    og_engine *off = make_pc_engine(2, 64, 512, 8, true), *on = make_pc_engine(2, 64, 512, 8, false);
    for (int k = 0; k < 5; k++) {
        result ro, rn;
        pc_run(off, pr[k], np[k], &ro);
        pc_run(on, pr[k], np[k], &rn);
        assert_int_equal(ro.n_cached, 0);
        assert_int_equal(rn.n_cached, want_cached[k]);
        assert_int_equal(ro.n, 6);
        assert_int_equal(rn.n, ro.n);
        for (int i = 0; i < ro.n; i++) {
            assert_int_equal(rn.ids[i], ro.ids[i]);
            assert_memory_equal(&rn.lps[i], &ro.lps[i], sizeof(float));
        }
    }
    og_engine_metrics m;
    og_engine_metrics_get(on, &m);
    assert_int_equal(m.prefix_blocks_reused, 3 + 2 + 2 + 2);
    assert_int_equal(m.prefix_hits, 4);
    assert_int_equal(m.prefix_cached_tokens, 192 + 128 + 128 + 128);
    char err[256];
    if (og_engine_check(on, err, sizeof err)) fail_msg("%s", err);
    og_engine_free(off);
    og_engine_free(on);
}

/* Memory per cached token (issue 17): the KV blocks a forward call leaves on a
 * budgeted cpu device (its free memory before and after; the call's scratch is
 * its own and freed) are, per position, the MLA formula n_layer x (r_kv +
 * d_rope) x 2 bytes with the f16 cache (the default) and x 4 with f32, the
 * shapes read from the file's keys (deepseek2.md §1, §3); the planner's KV term
 * for the same --kv-type is that formula times ctx x parallel. */
static void test_kv_bytes_per_token(void **state) {
    (void)state;
    char err[256];
    uint32_t n_layer, r_kv, d_rope;
    fx_mla_shape(g_m, &n_layer, &r_kv, &d_rope);
    assert_int_equal(og_model_get_info(g_m)->kv_elem_bytes, 2); /* f16 unless set */
    og_device *dev;
    og_stream *s;
    og_run_ctx rc = fx_device_rc(256u << 20, &dev, &s);
    enum { T = 2 * OG_KV_BLOCK };
    int32_t ids[T];
    for (int i = 0; i < T; i++) ids[i] = (i * 37 + 5) % 1000;
    float *logits = malloc(og_model_get_info(g_m)->n_vocab * sizeof *logits);
    static const char *const types[2] = {"f16", "f32"};
    for (int kt = 0; kt < 2; kt++) {
        const uint64_t formula = (uint64_t)n_layer * (r_kv + d_rope) * (kt ? 4 : 2); /* bytes per token */
        assert_int_equal(og_model_set_option(g_m, "kv-type", types[kt], err, sizeof err), OG_OK);
        uint64_t free0, free1, total;
        assert_int_equal(dev->ops->mem_info(dev, &free0, &total), OG_OK);
        og_kv kv = {0};
        assert_int_equal(og_model_forward(g_m, &rc, &kv, ids, T, logits, false, err, sizeof err), OG_OK);
        assert_int_equal(dev->ops->mem_info(dev, &free1, &total), OG_OK);
        print_message("%s cache: %llu bytes for %d cached tokens = %llu per token (formula %u x (%u + %u) x %d = "
                      "%llu)\n", types[kt], (unsigned long long)(free0 - free1), T,
                      (unsigned long long)((free0 - free1) / T), n_layer, r_kv, d_rope, kt ? 4 : 2,
                      (unsigned long long)formula);
        assert_int_equal(free0 - free1, (uint64_t)T * formula);
        assert_int_equal(og_model_get_info(g_m)->kv_block_bytes, OG_KV_BLOCK * formula);
        og_kv_free(&kv);
        /* the plan for this --kv-type: ctx 256 x 3 sequences of it */
        og_gguf *hg;
        assert_int_equal(og_gguf_open(g_path, OG_GGUF_HEADER_ONLY, &hg, err, sizeof err), OG_OK);
        og_plan_input in = {.vram = 8ull << 30, .ram = 8ull << 30, .ctx = 256, .parallel = 3, .batch_tokens = 64,
                            .kv_bytes_per_elem = og_kv_type_bytes(kt ? OG_KV_F32 : OG_KV_F16), .slots_override = -1};
        og_plan p;
        assert_int_equal(og_plan_make(hg, &in, &p, err, sizeof err), OG_OK);
        assert_int_equal(p.kv_bytes, 256ull * 3 * formula);
        og_plan_free(&p);
        og_gguf_close(hg);
    }
    assert_int_equal(og_model_set_option(g_m, "kv-type", "f16", err, sizeof err), OG_OK);
    /* a cache made as f32 is refused by the f16 model, not misread */
    assert_int_equal(og_model_set_option(g_m, "kv-type", "f32", err, sizeof err), OG_OK);
    og_kv kv = {0};
    assert_int_equal(og_model_forward(g_m, &rc, &kv, ids, 4, logits, false, err, sizeof err), OG_OK);
    assert_int_equal(og_model_set_option(g_m, "kv-type", "f16", err, sizeof err), OG_OK);
    assert_int_equal(og_model_forward(g_m, &rc, &kv, ids + 4, 1, logits, false, err, sizeof err), OG_ERR_STATE);
    assert_non_null(strstr(err, "kv-type"));
    assert_int_equal(og_model_set_option(g_m, "kv-type", "f8", err, sizeof err), OG_ERR_INVALID_ARG);
    og_kv_free(&kv);
    free(logits);
    dev->ops->stream_destroy(dev, s);
    og_device_destroy(dev);
}

/* A model whose og_model_info.kv_paged is false (deepseek4's ring windows):
 * the prefix cache stays off whatever the config says (the log says so once),
 * repeated prompts prefill in full and give the bits of the cache-off engine;
 * og_kv_free frees an architecture's state through arch_free. */
static int g_arch_frees;
static void count_arch_free(void *arch) {
    g_arch_frees++;
    free(arch);
}

static void test_prefix_cache_unpaged(void **state) {
    (void)state;
    enum { N = 130 }; /* two full blocks: what a paged cache would share */
    int32_t a[N];
    for (int i = 0; i < N; i++) a[i] = (int32_t)((i * 7919 + 13) % (int32_t)(og_model_get_info(g_m)->n_vocab - 10));
    og_model unpaged = *g_m; /* the same weights */
    unpaged.info.kv_paged = false;
    unpaged.info.kv_block_bytes = 0;
    char logbuf[4096] = "";
    FILE *lf = fmemopen(logbuf, sizeof logbuf - 1, "w");
    assert_non_null(lf);
    og_logger lg = {.level = OG_LOG_INFO, .out = lf};
    og_engine_config c = {.model = &unpaged, .tok = g_tok,
                          .rc = {.kern = &g_kern, .pool = g_pool, .dispatch = g_host,
                                 .device_numerics = OG_NUMERICS_CANONICAL, .host_numerics = OG_NUMERICS_CANONICAL},
                          .parallel = 2, .batch_tokens = 64, .ctx = 512, .queue = 8, .log = &lg};
    og_engine *on, *off = make_pc_engine(2, 64, 512, 8, true);
    char err[256];
    if (og_engine_create(&c, &on, err, sizeof err) || og_engine_start(on, err, sizeof err)) fail_msg("%s", err);
    for (int k = 0; k < 2; k++) { /* cold, then the same prompt again */
        result ro, rn;
        pc_run(off, a, N, &ro);
        pc_run(on, a, N, &rn);
        assert_int_equal(rn.n_cached, 0);
        assert_int_equal(rn.n, ro.n);
        assert_memory_equal(rn.ids, ro.ids, (size_t)ro.n * sizeof ro.ids[0]);
        assert_memory_equal(rn.lps, ro.lps, (size_t)ro.n * sizeof ro.lps[0]);
    }
    og_engine_metrics m;
    og_engine_metrics_get(on, &m);
    assert_int_equal(m.prefix_hits, 0);
    assert_int_equal(m.prefix_blocks_reused, 0);
    if (og_engine_check(on, err, sizeof err)) fail_msg("%s", err);
    og_engine_free(on);
    og_engine_free(off);
    fclose(lf);
    const char *hit = strstr(logbuf, "prefix cache off");
    assert_non_null(hit);
    assert_null(strstr(hit + 1, "prefix cache off"));
    /* the architecture's state goes with the blocks */
    og_kv kv = {0};
    kv.arch = malloc(64);
    kv.arch_free = count_arch_free;
    g_arch_frees = 0;
    og_kv_free(&kv);
    assert_int_equal(g_arch_frees, 1);
    assert_null(kv.arch);
    assert_null(kv.arch_free);
    og_kv_free(&kv); /* an emptied cache frees nothing twice */
    assert_int_equal(g_arch_frees, 1);
}

/* PC_LOOP requests with random shared prefixes, lengths and cancels: nothing
 * stays referenced and the consistency check passes, during and after. */
static void test_prefix_cache_churn(void **state) {
    (void)state;
    enum { BASE = 3, L = 160 };
    int32_t base[BASE][L];
    uint64_t x = 777;
    for (int k = 0; k < BASE; k++)
        for (int i = 0; i < L; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            base[k][i] = (int32_t)((x >> 33) % (uint64_t)(og_model_get_info(g_m)->n_vocab - 10));
        }
    og_engine *e = make_pc_engine(3, 96, 256, PC_LOOP, false); /* budget: 3 x 4 blocks */
    og_seq *s[PC_LOOP];
    int32_t buf[L];
    char err[256];
    for (int r = 0; r < PC_LOOP; r++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        int k = (int)((x >> 20) % BASE), n = 1 + (int)((x >> 30) % L), cut = (int)((x >> 40) % (uint64_t)(n + 1));
        memcpy(buf, base[k], sizeof buf);
        for (int i = cut; i < n; i++) buf[i] = (buf[i] + 1 + r) % (int32_t)(og_model_get_info(g_m)->n_vocab - 10);
        og_ids v = {.v = buf, .n = (size_t)n};
        og_seq_params p = greedy(1 + (int)((x >> 50) % 3));
        s[r] = submit(e, &v, &p);
        if ((x >> 55) % 3 == 0) og_seq_release(e, s[r]), s[r] = NULL;
        if (r % 16 == 0 && og_engine_check(e, err, sizeof err)) fail_msg("%s", err);
    }
    for (int r = 0; r < PC_LOOP; r++)
        if (s[r]) {
            result res;
            collect(e, s[r], &res);
        }
    og_engine_metrics m;
    for (int k = 0; k < 200; k++) {
        og_engine_metrics_get(e, &m);
        if (m.running == 0 && m.queued == 0) break;
        og_engine_wait(e, 0.05);
    }
    /* the cache still serves after the churn: a whole base twice, the second from its 2 blocks */
    result r1, r2;
    pc_run(e, base[0], L, &r1);
    pc_run(e, base[0], L, &r2);
    assert_int_equal(r2.n_cached, 128);
    assert_int_equal(r2.n, r1.n);
    assert_memory_equal(r2.ids, r1.ids, (size_t)r1.n * sizeof *r1.ids);
    assert_memory_equal(r2.lps, r1.lps, (size_t)r1.n * sizeof *r1.lps);
    og_engine_drain(e, 0);
    og_engine_metrics_get(e, &m);
    assert_int_equal(m.running, 0);
    assert_int_equal(m.kv_blocks_used, 0);
    assert_int_equal(m.kv_blocks_shared, 0);
    assert_true(m.kv_blocks_cached > 0 && m.kv_blocks_cached <= m.kv_blocks_total);
    if (og_engine_check(e, err, sizeof err)) fail_msg("%s", err);
    og_engine_free(e);
}

/* `n` > 1 (og_engine_submit_n): PC_LOOP / 2 requests below. */
static void submit_n(og_engine *e, const int32_t *ids, int n_ids, const og_seq_params *p, int n, og_seq **s) {
    char err[256];
    if (og_engine_submit_n(e, ids, n_ids, p, n, s, err, sizeof err)) fail_msg("%s", err);
}

/* a's tokens and log-probs are b's, bit for bit. */
static void assert_same_tokens(const result *a, const result *b) {
    assert_int_equal(a->n, b->n);
    assert_memory_equal(a->ids, b->ids, (size_t)b->n * sizeof *b->ids);
    assert_memory_equal(a->lps, b->lps, (size_t)b->n * sizeof *b->lps);
}

/* No step in flight: the prefix cache is consistent and no block is held. */
static void assert_pool_clean(og_engine *e) {
    char err[256];
    if (og_engine_check(e, err, sizeof err)) fail_msg("%s", err);
    og_engine_metrics m;
    og_engine_metrics_get(e, &m);
    assert_int_equal(m.kv_blocks_used, 0);
}

static void random_ids(int32_t *v, int n, uint64_t x) {
    for (int i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        v[i] = (int32_t)((x >> 33) % (uint64_t)(og_model_get_info(g_m)->n_vocab - 10));
    }
}

/* n = 4 at temperature 0, with the prefix cache on and off, prompts of less
 * than a block, of whole blocks and of blocks plus a part: the 4 choices are
 * token for token and bit for bit (log-probs) what one sequence alone gives,
 * and the prompt was prefilled once. */
static void test_fork_greedy(void **state) {
    (void)state;
    int32_t ids[200];
    random_ids(ids, 200, 4242);
    const int lens[3] = {150, 40, 128};
    for (int off = 0; off < (FORK_CASES > 1 ? 2 : 1); off++) {
        og_engine *e = make_pc_engine(4, 64, 512, 8, off);
        for (int k = 0; k < FORK_CASES; k++) {
            ids[0] = 1000 + k + 10 * off; /* a new prompt each time: nothing cached from the last one */
            og_ids v = {.v = ids, .n = (size_t)lens[k]};
            og_seq_params p = greedy(8);
            p.n_top = 2;
            og_engine_metrics m0, m1;
            og_engine_metrics_get(e, &m0);
            og_seq *s[4];
            submit_n(e, ids, lens[k], &p, 4, s);
            result r[4], one;
            for (int i = 0; i < 4; i++) collect(e, s[i], &r[i]);
            og_engine_metrics_get(e, &m1);
            assert_int_equal(m1.prompt_tokens - m0.prompt_tokens, lens[k]); /* one prefill */
            og_engine *ref = make_pc_engine(1, 64, 512, 8, true); /* the reference: the prompt alone */
            collect(ref, submit(ref, &v, &p), &one);
            og_engine_free(ref);
            assert_int_equal(one.n, 8);
            for (int i = 0; i < 4; i++) {
                assert_same_tokens(&r[i], &one);
                assert_int_equal(r[i].len, one.len);
                assert_memory_equal(r[i].text, one.text, one.len);
                assert_int_equal(r[i].finish, OG_FINISH_LENGTH);
            }
        }
        assert_pool_clean(e);
        og_engine_free(e);
    }
}

/* n = 3 at temperature 1 with a seed: choice i is the sequence that seed + i
 * gives alone, so the same request twice gives the same choices, and they
 * differ from each other. */
static void test_fork_seeded(void **state) {
    (void)state;
    int32_t ids[100];
    random_ids(ids, 100, 99);
    og_seq_params p = greedy(6);
    p.sampling.temperature = 1;
    p.sampling.seed = 42;
    og_engine *e = make_pc_engine(3, 64, 512, 8, false);
    result r[2][3];
    for (int rep = 0; rep < 2; rep++) {
        og_seq *s[3];
        submit_n(e, ids, 100, &p, 3, s);
        for (int i = 0; i < 3; i++) collect(e, s[i], &r[rep][i]);
    }
    og_engine *ref = make_pc_engine(1, 64, 512, 8, true);
    og_ids v = {.v = ids, .n = 100};
    for (int i = 0; i < 3; i++) {
        og_seq_params q = p;
        q.sampling.seed = 42 + (uint64_t)i;
        result one;
        collect(ref, submit(ref, &v, &q), &one);
        assert_true(one.n > 0);
        for (int rep = 0; rep < 2; rep++) assert_same_tokens(&r[rep][i], &one);
    }
    og_engine_free(ref);
    assert_true(r[0][0].n != r[0][1].n || memcmp(r[0][0].ids, r[0][1].ids, (size_t)r[0][0].n * sizeof(int32_t)));
    assert_true(r[0][1].n != r[0][2].n || memcmp(r[0][1].ids, r[0][2].ids, (size_t)r[0][1].n * sizeof(int32_t)));
    og_engine_free(e);
}

/* PC_LOOP / 2 requests of n = 1..4 choices with random prompts (shared
 * prefixes or not) and random cancels of any choice, the one that prefills
 * included, before, during and after the prefill: the survivors end normally,
 * and afterwards no block is referenced and the consistency check passes. */
static void test_fork_churn(void **state) {
    (void)state;
    enum { L = 150, R = PC_LOOP / 2 };
    int32_t base[L];
    random_ids(base, L, 5);
    og_engine *e = make_pc_engine(4, 64, 256, 4 * R, false);
    og_seq *s[R][4];
    int n_of[R];
    uint64_t x = 31337;
    char err[256];
    int32_t buf[L];
    for (int r = 0; r < R; r++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        int n = 1 + (int)((x >> 20) % 4), len = 1 + (int)((x >> 24) % L), cut = (int)((x >> 34) % (uint64_t)(len + 1));
        memcpy(buf, base, sizeof buf);
        for (int i = cut; i < len; i++) buf[i] = (buf[i] + 1 + r) % (int32_t)(og_model_get_info(g_m)->n_vocab - 10);
        og_seq_params p = greedy(1 + (int)((x >> 44) % 4));
        p.sampling.temperature = (x >> 48) % 4 ? 0.0f : 1.0f;
        p.sampling.seed = x;
        submit_n(e, buf, len, &p, n, s[r]);
        n_of[r] = n;
        for (int i = 0; i < n; i++)
            if ((x >> (52 + i)) % 3 == 0) {
                if ((x >> 60) % 2) usleep(2000);
                og_seq_release(e, s[r][i]);
                s[r][i] = NULL;
            }
        if (r % 8 == 0 && og_engine_check(e, err, sizeof err)) fail_msg("%s", err);
    }
    for (int r = 0; r < R; r++)
        for (int i = 0; i < n_of[r]; i++)
            if (s[r][i]) {
                result res;
                collect(e, s[r][i], &res);
                assert_true(res.finish == OG_FINISH_LENGTH || res.finish == OG_FINISH_STOP);
            }
    og_engine_drain(e, 0);
    og_engine_metrics m;
    og_engine_metrics_get(e, &m);
    assert_int_equal(m.running, 0);
    assert_int_equal(m.queued, 0);
    assert_int_equal(m.kv_blocks_used, 0);
    assert_int_equal(m.kv_blocks_shared, 0);
    if (og_engine_check(e, err, sizeof err)) fail_msg("%s", err);
    og_engine_free(e);
}

/* The choice that prefills is released before its prompt is in: queued (the
 * group waits behind a running sequence) or while prefilling in small chunks.
 * The others take over the prefill and still give the n: 1 tokens. */
static void test_fork_leader_gone(void **state) {
    (void)state;
    int32_t ids[200];
    random_ids(ids, 200, 2024);
    og_seq_params p = greedy(5);
    og_engine *ref = make_pc_engine(1, 64, 512, 8, true);
    og_ids v = {.v = ids, .n = 200};
    result one;
    collect(ref, submit(ref, &v, &p), &one);
    og_engine_free(ref);
    for (int when = 0; when < 2; when++) {
        og_engine *e = make_pc_engine(when ? 3 : 2, when ? 16 : 64, 512, 8, false);
        og_seq *blocker = NULL, *s[3];
        og_seq_params pb = greedy(40);
        if (!when) blocker = submit(e, &v, &pb); /* holds 1 of the 2 places: the group of 2 waits */
        submit_n(e, ids, 200, &p, when ? 3 : 2, s);
        if (when) usleep(20000); /* 16-token chunks: the 200-token prompt is still prefilling */
        og_seq_release(e, s[0]);
        for (int i = 1; i < (when ? 3 : 2); i++) {
            result r;
            collect(e, s[i], &r);
            assert_same_tokens(&r, &one);
        }
        if (blocker) og_seq_release(e, blocker);
        og_engine_drain(e, 0);
        assert_pool_clean(e);
        og_engine_free(e);
    }
}

/* n outside 1..parallel is refused, and the queue takes all n or none. */
static void test_fork_refusals(void **state) {
    (void)state;
    int32_t ids[10];
    random_ids(ids, 10, 7);
    og_engine *e = make_pc_engine(2, 64, 256, 1, false);
    og_seq_params p = greedy(2);
    og_seq *s[3] = {0};
    char err[256];
    assert_int_equal(og_engine_submit_n(e, ids, 10, &p, 0, s, err, sizeof err), OG_ERR_INVALID_ARG);
    assert_int_equal(og_engine_submit_n(e, ids, 10, &p, 3, s, err, sizeof err), OG_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "1..2"));
    assert_null(s[0]);
    submit_n(e, ids, 10, &p, 2, s); /* 2 of the 3 places */
    og_seq *t[2] = {0};
    assert_int_equal(og_engine_submit_n(e, ids, 10, &p, 2, t, err, sizeof err), OG_ERR_STATE);
    assert_null(t[0]);
    assert_null(t[1]);
    for (int i = 0; i < 2; i++) {
        result r;
        collect(e, s[i], &r);
        assert_int_equal(r.n_gen, 2);
    }
    og_engine_free(e);
}

/* og_prefill_share against a reference that deals the budget out one token at
 * a time, round robin over the sequences still prefilling, in admission order. */
static void test_prefill_share(void **state) {
    (void)state;
    int take[8];
    const int a[] = {2000, 10};
    assert_int_equal(og_prefill_share(a, 2, 64, take), 64);
    assert_int_equal(take[0], 54); /* the short prompt fits its half: all of it now */
    assert_int_equal(take[1], 10);
    const int b[] = {0, 100, 0, 100, 100};
    assert_int_equal(og_prefill_share(b, 5, 10, take), 10);
    assert_int_equal(take[0], 0);
    assert_int_equal(take[1], 4); /* 10 = 3 + 3 + 3, the one left over to the oldest */
    assert_int_equal(take[2], 0);
    assert_int_equal(take[3], 3);
    assert_int_equal(take[4], 3);
    const int c[] = {5, 5, 5};
    assert_int_equal(og_prefill_share(c, 3, 2, take), 2); /* fewer tokens than sequences */
    assert_int_equal(take[0], 1);
    assert_int_equal(take[1], 1);
    assert_int_equal(take[2], 0);
    assert_int_equal(og_prefill_share(c, 3, 100, take), 15); /* more than they need */
    assert_int_equal(og_prefill_share(c, 3, 0, take), 0);
    assert_int_equal(take[0] + take[1] + take[2], 0);
    uint64_t x = 88172645463325252ull;
    for (int iter = 0; iter < 2000; iter++) {
        int need[8], ref[8], n = 1 + iter % 8, total = 0;
        for (int i = 0; i < n; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            need[i] = (x >> 8) % 4 == 0 ? 0 : (int)((x >> 16) % 300);
            total += need[i];
            ref[i] = 0;
        }
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int budget = (int)((x >> 20) % 700), dealt = 0;
        for (bool any = true; any && dealt < budget;) {
            any = false;
            for (int i = 0; i < n && dealt < budget; i++)
                if (ref[i] < need[i]) {
                    ref[i]++;
                    dealt++;
                    any = true;
                }
        }
        assert_int_equal(og_prefill_share(need, n, budget, take), budget < total ? budget : total);
        assert_memory_equal(take, ref, (size_t)n * sizeof *take);
    }
}

/* Fair prefill, counted in steps: a 10-token prompt submitted one step after a
 * 2,000-token one gets its first token before the long one, within two steps
 * of its submission, and both get exactly the tokens and log-probs they get
 * alone (their prompts were chunked differently). */
static void test_short_prompt_behind_long(void **state) {
    (void)state;
    size_t cap = 64 * 1024, len = 0;
    char *doc = malloc(cap);
    assert_non_null(doc);
    for (int i = 0; i < 400; i++)
        len += (size_t)snprintf(doc + len, cap - len, " Sentence %d of a very long document that goes on.", i);
    og_ids ids_long = {0}, ids_short = prompt_ids("A short question about the weather in Paris tomorrow morning");
    assert_int_equal(og_tokenize(g_tok, doc, len, og_tokenizer_add_bos(g_tok), true, &ids_long), OG_OK);
    free(doc);
    assert_true(ids_long.n >= LONG_PROMPT);
    assert_true(ids_short.n >= 10);
    ids_long.n = LONG_PROMPT;
    ids_short.n = 10;
    const int batch = 64;
    og_seq_params p = greedy(4);
    og_engine *e = make_engine(4, batch, 2048, 4, true);
    result long_alone, short_alone, long_r, short_r;
    collect(e, submit(e, &ids_long, &p), &long_alone);
    collect(e, submit(e, &ids_short, &p), &short_alone);
    og_engine_free(e);

    e = make_engine(4, batch, 2048, 4, true);
    og_seq *sl = submit(e, &ids_long, &p);
    og_engine_metrics m = {0};
    while (og_engine_metrics_get(e, &m) == OG_OK && m.steps < 1) og_engine_wait(e, 0.05);
    og_seq *ss = submit(e, &ids_short, &p);
    collect(e, ss, &short_r);
    collect(e, sl, &long_r);
    og_engine_free(e);

    assert_int_equal(long_r.step_submit, 0);
    assert_true(short_r.step_submit >= 1);
    assert_true(short_r.step_first > short_r.step_submit);
    assert_true(short_r.step_first <= short_r.step_submit + 2);
    assert_true(short_r.step_first < long_r.step_first);
    assert_true(long_r.step_first >= (LONG_PROMPT + batch - 1) / batch); /* it still needs its whole prompt */
    assert_true(long_alone.step_first >= (LONG_PROMPT + batch - 1) / batch);
    const result *pair[2][2] = {{&long_alone, &long_r}, {&short_alone, &short_r}};
    for (int k = 0; k < 2; k++) {
        const result *a = pair[k][0], *b = pair[k][1];
        assert_int_equal(a->n, 4);
        assert_int_equal(b->n, a->n);
        assert_memory_equal(a->ids, b->ids, (size_t)a->n * sizeof *a->ids);
        assert_memory_equal(a->lps, b->lps, (size_t)a->n * sizeof *a->lps); /* bitwise */
    }
    og_ids_free(&ids_long);
    og_ids_free(&ids_short);
}

static void test_refusals(void **state) {
    (void)state;
    og_engine *e = make_engine(1, 16, 64, 1, false); /* not started: nothing leaves the queue */
    og_ids ids = prompt_ids("Hello there");
    og_seq_params p = greedy(4);
    og_seq *a, *b, *c;
    char err[256];
    assert_int_equal(og_engine_submit(e, ids.v, (int)ids.n, &p, &a, err, sizeof err), OG_OK);
    assert_int_equal(og_engine_submit(e, ids.v, (int)ids.n, &p, &b, err, sizeof err), OG_OK);
    assert_int_equal(og_engine_submit(e, ids.v, (int)ids.n, &p, &c, err, sizeof err), OG_ERR_STATE);
    assert_non_null(strstr(err, "queue is full"));
    og_seq_release(e, a);
    og_seq_release(e, b);
    p.max_tokens = 64;
    assert_int_equal(og_engine_submit(e, ids.v, (int)ids.n, &p, &c, err, sizeof err), OG_ERR_RANGE);
    assert_non_null(strstr(err, "context is 64 tokens"));
    int32_t bad = (int32_t)og_model_get_info(g_m)->n_vocab;
    p.max_tokens = 1;
    assert_int_equal(og_engine_submit(e, &bad, 1, &p, &c, err, sizeof err), OG_ERR_INVALID_ARG);
    p.stop[0] = "";
    p.n_stop = 1;
    assert_int_equal(og_engine_submit(e, ids.v, (int)ids.n, &p, &c, err, sizeof err), OG_ERR_INVALID_ARG);
    og_engine_free(e);
    og_ids_free(&ids);
}

static void test_zero_tokens_and_drain(void **state) {
    (void)state;
    og_engine *e = make_engine(2, 16, 128, 4, true);
    og_ids ids = prompt_ids("Hi");
    og_seq_params p = greedy(0);
    result r;
    collect(e, submit(e, &ids, &p), &r);
    assert_int_equal(r.finish, OG_FINISH_LENGTH);
    assert_int_equal(r.len, 0);
    assert_int_equal(r.n_gen, 0);
    /* drain with no grace: a long request is cancelled, its reader sees it */
    p.max_tokens = -1;
    og_seq *s = submit(e, &ids, &p);
    og_engine_drain(e, 0);
    og_seq_out o;
    assert_int_equal(og_seq_take(e, s, &o), OG_OK);
    assert_int_equal(o.finish, OG_FINISH_CANCEL);
    og_seq_out_free(&o);
    char err[256];
    og_seq *t;
    assert_int_equal(og_engine_submit(e, ids.v, (int)ids.n, &p, &t, err, sizeof err), OG_ERR_STATE);
    og_seq_release(e, s);
    og_engine_metrics m;
    og_engine_metrics_get(e, &m);
    assert_int_equal(m.kv_blocks_used, 0);
    og_engine_free(e);
    og_ids_free(&ids);
}

/* A plain forward loop after the prompt: position t feeds feed[t] (NULL: its
 * own argmax); ids[t] the fed id, lp[t] the log-softmax at it, argmax[t] the
 * most likely id. */
static void forward_loop(const og_ids *prompt, const int32_t *feed, int n, og_numerics nm, int32_t *ids, float *lp,
                         int32_t *argmax) {
    og_run_ctx rc = {.kern = &g_kern, .pool = g_pool, .dispatch = g_host, .device_numerics = nm, .host_numerics = nm};
    og_kv kv = {0};
    float *logits = malloc(og_model_get_info(g_m)->n_vocab * sizeof *logits);
    char err[256];
    assert_int_equal(og_model_forward(g_m, &rc, &kv, prompt->v, (int)prompt->n, logits, false, err, sizeof err), OG_OK);
    for (int t = 0; t < n; t++) {
        int32_t best = 0;
        float max = logits[0];
        for (uint32_t j = 1; j < og_model_get_info(g_m)->n_vocab; j++)
            if (logits[j] > logits[best]) best = (int32_t)j, max = logits[j];
        double sum = 0;
        for (uint32_t j = 0; j < og_model_get_info(g_m)->n_vocab; j++) sum += exp((double)logits[j] - max);
        ids[t] = feed ? feed[t] : best;
        argmax[t] = best;
        lp[t] = (float)((double)logits[ids[t]] - max - log(sum));
        assert_int_equal(og_model_forward(g_m, &rc, &kv, &ids[t], 1, logits, false, err, sizeof err), OG_OK);
    }
    og_kv_free(&kv);
    free(logits);
}

static int32_t first_eog(void) {
    for (int32_t id = 0; id < (int32_t)og_model_get_info(g_m)->n_vocab; id++)
        if (og_tokenizer_is_eog(g_tok, id)) return id;
    fail_msg("the tokenizer has no end-of-generation token");
    return -1;
}

/* Teacher forcing (onegpu run --teacher): the forced ids come out, each with
 * the log-prob a plain forward loop feeding them gives (the same bits), the
 * top entry the loop's argmax, and an end-of-generation id among them does not
 * end the sequence. report_eog: a sampled end of generation is reported as a
 * token (no text); without it, it is not. */
static void test_forced_and_eog(void **state) {
    (void)state;
    og_ids ids = prompt_ids("The quick brown fox");
    const int32_t eog = first_eog();
    int32_t forced[12] = {100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1100, 1200};
    forced[5] = eog;
    int32_t ref[12], ref_max[12];
    float ref_lp[12];
    forward_loop(&ids, forced, 12, OG_NUMERICS_FORK, ref, ref_lp, ref_max);
    og_engine *e = make_engine(2, 64, 256, 2, true);
    og_seq_params p = greedy(12);
    p.forced = forced;
    p.n_forced = 12;
    p.n_top = 1;
    og_seq *s = submit(e, &ids, &p);
    result r = {0};
    int32_t tops[16];
    int n_tops = 0;
    for (;;) { /* collect() with the top entries */
        og_seq_out o;
        assert_int_equal(og_seq_take(e, s, &o), OG_OK);
        for (int i = 0; i < o.n_toks; i++, r.n++) {
            r.ids[r.n] = o.toks[i].id;
            r.lps[r.n] = o.toks[i].logprob;
            tops[n_tops++] = o.toks[i].top[0].id;
        }
        og_finish f = o.finish;
        og_seq_out_free(&o);
        if (f != OG_FINISH_NONE) {
            r.finish = f;
            break;
        }
        og_engine_wait(e, 0.05);
    }
    og_seq_release(e, s);
    assert_int_equal(r.finish, OG_FINISH_LENGTH);
    assert_int_equal(r.n, 12);
    for (int t = 0; t < 12; t++) {
        assert_int_equal(r.ids[t], forced[t]);
        assert_true(r.lps[t] == ref_lp[t]);
        assert_int_equal(tops[t], ref_max[t]);
    }
    /* a bad forced id is refused */
    char err[256];
    int32_t bad = (int32_t)og_model_get_info(g_m)->n_vocab;
    p.forced = &bad;
    p.n_forced = 1;
    assert_int_equal(og_engine_submit(e, ids.v, (int)ids.n, &p, &s, err, sizeof err), OG_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "forced token 0"));
    /* the end of generation, made the greedy choice by a bias */
    float big = 100.0f;
    og_seq_params q = greedy(8);
    q.sampling.bias_ids = &eog;
    q.sampling.bias_values = &big;
    q.sampling.n_bias = 1;
    for (int rep = 0; rep < 2; rep++) {
        q.report_eog = rep == 1;
        collect(e, submit(e, &ids, &q), &r);
        assert_int_equal(r.finish, OG_FINISH_STOP);
        assert_int_equal(r.n_gen, 0);
        assert_int_equal(r.len, 0);
        assert_int_equal(r.n, rep);
        if (rep) {
            assert_int_equal(r.ids[0], eog);
            assert_true(r.lps[0] > -1e-3f && r.lps[0] <= 0); /* a bias of 100: nearly certain */
        }
    }
    og_engine_free(e);
    og_ids_free(&ids);
}

/* The id whose bytes are exactly b[0..n), or -1. */
static int32_t token_of_bytes(const char *b, int n) {
    char t[64];
    for (int32_t id = 0; id < (int32_t)og_model_get_info(g_m)->n_vocab; id++)
        if (og_token_to_bytes(g_tok, id, false, t, sizeof t) == n && !memcmp(t, b, (size_t)n)) return id;
    return -1;
}

/* An output whose last tokens begin a character it never finishes (U+4E2D's
 * first two of three bytes, one token each, cut by max_tokens): the partial
 * bytes are dropped, as llama-server's stream does, never turned into U+FFFD;
 * with the third byte the character is there. */
static void test_cut_character(void **state) {
    (void)state;
    og_ids ids = prompt_ids("The quick brown fox");
    const int32_t hi = token_of_bytes("Hi", 2), b0 = token_of_bytes("\xe4", 1), b1 = token_of_bytes("\xb8", 1),
                  b2 = token_of_bytes("\xad", 1);
    assert_true(hi >= 0 && b0 >= 0 && b1 >= 0 && b2 >= 0); /* byte-level BPE: every byte is a token */
    int32_t forced[4] = {hi, b0, b1, b2};
    og_engine *e = make_engine(1, 64, 256, 2, true);
    static const struct {
        int n;
        const char *text;
    } cases[] = {{3, "Hi"}, {2, "Hi"}, {4, "Hi\xe4\xb8\xad"}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        og_seq_params p = greedy(cases[c].n);
        p.forced = forced;
        p.n_forced = cases[c].n;
        result r;
        collect(e, submit(e, &ids, &p), &r);
        assert_int_equal(r.finish, OG_FINISH_LENGTH);
        assert_int_equal(r.n, cases[c].n);
        assert_int_equal(r.len, strlen(cases[c].text));
        assert_memory_equal(r.text, cases[c].text, r.len);
    }
    og_engine_free(e);
    og_ids_free(&ids);
}

typedef struct step_log {
    og_placement *pl;
    int steps, prompt_steps, tokens;
    uint32_t last_in_flight;
} step_log;

static void log_step(void *arg, const og_engine_step *st) {
    step_log *l = arg;
    og_placement_stats ps;
    og_placement_get_stats(l->pl, &ps);
    l->steps++;
    l->prompt_steps += st->n_prompt > 0;
    l->tokens += st->n_tok;
    assert_int_equal((uint64_t)l->steps, st->step);
    assert_true(st->seconds >= 0);
    l->last_in_flight = ps.in_flight;
}

/* The engine with a placement (4 slots per MoE layer, migrating): the metrics
 * carry the placement's counters; selections are tokens x MoE layers x k; the
 * hook sees every step; and once the engine is at rest, the copies the last
 * step left in flight are resident: the plan's count, without another step. */
static void test_placement_at_rest(void **state) {
    (void)state;
    og_gguf *g;
    char err[512];
    if (og_gguf_open(g_path, OG_GGUF_HEADER_ONLY, &g, err, sizeof err)) fail_msg("%s", err);
    og_plan_input in = {.vram = 1ull << 30, .ram = 8ull << 30, .ctx = 256, .parallel = 2, .batch_tokens = 64,
                        .kv_bytes_per_elem = 4, .slots_override = 4};
    og_plan plan;
    assert_int_equal(og_plan_make(g, &in, &plan, err, sizeof err), OG_OK);
    og_gguf_close(g);
    assert_true(plan.fits);
    og_placement_config pc = og_placement_defaults();
    pc.vram = in.vram;
    pc.plan = &plan;
    pc.kern = &g_kern;
    pc.min_residency = 1;
    og_placement *pl;
    assert_int_equal(og_placement_create(g_m, &pc, &pl, err, sizeof err), OG_OK);
    step_log lg = {.pl = pl};
    og_engine_config c = {.model = g_m, .tok = g_tok, .rc = {.kern = &g_kern, .pool = g_pool}, .placement = pl,
                          .on_step = log_step, .on_step_arg = &lg, .parallel = 2, .batch_tokens = 64, .ctx = 256,
                          .queue = 2};
    og_engine *e;
    if (og_engine_create(&c, &e, err, sizeof err) || og_engine_start(e, err, sizeof err)) fail_msg("%s", err);
    og_ids ids = prompt_ids("The quick brown fox jumps over the lazy dog");
    og_seq_params p = greedy(24);
    p.sampling.temperature = 0.9f; /* wander: the hot set keeps moving */
    p.sampling.seed = 5;
    result r;
    collect(e, submit(e, &ids, &p), &r);
    og_engine_drain(e, 5);
    og_engine_metrics m;
    og_engine_metrics_get(e, &m);
    og_placement_stats ps;
    og_placement_get_stats(pl, &ps);
    const uint64_t n_moe = og_model_get_info(g_m)->n_layer - og_model_get_info(g_m)->n_dense, fed = ids.n + (uint64_t)r.n - (r.finish == OG_FINISH_LENGTH);
    assert_true(m.placement);
    assert_int_equal(lg.tokens, (int)fed);
    assert_int_equal(lg.prompt_steps, 1);
    assert_int_equal((uint64_t)lg.steps, m.steps);
    assert_int_equal(m.expert_routes, fed * n_moe * og_model_get_info(g_m)->n_expert_used);
    assert_int_equal(m.expert_routes, ps.selections);
    assert_int_equal(m.expert_hits, ps.hits);
    assert_int_equal(m.migrations, ps.migrations);
    assert_true(m.migrations > 0);
    assert_int_equal(m.pcie_bytes, ps.pcie_bytes);
    assert_true(lg.last_in_flight > 0); /* the last step started copies */
    assert_int_equal(ps.in_flight, 0);
    assert_int_equal(m.resident_experts, plan.resident_experts);
    uint64_t lr[64], lh[64], sum = 0;
    assert_true(og_model_get_info(g_m)->n_layer <= 64);
    assert_int_equal(og_engine_layer_hits(e, lr, lh, og_model_get_info(g_m)->n_layer), OG_OK);
    for (uint32_t l = 0; l < og_model_get_info(g_m)->n_layer; l++) sum += lh[l];
    assert_int_equal(sum, m.expert_hits);
    og_engine_free(e);
    og_placement_free(pl);
    og_plan_free(&plan);
    og_ids_free(&ids);
}

/* `onegpu run --json` (argv[2]) gives the ids and log-probs of a plain forward
 * loop: greedy at default settings (canonical numerics), teacher-forced with the
 * cpu device holding 4 experts per layer and migrating (canonical: placement
 * changes no bit), and greedy with --cpu-numerics fork (the fork's loop). */
static void test_run_cli(void **state) {
    (void)state;
    if (!g_onegpu) skip();
    char out[300], cmd[2048];
    snprintf(out, sizeof out, "/tmp/og-engine-run-%d.json", (int)getpid());
    og_ids ids = prompt_ids("The quick brown fox");
    int32_t feed[10] = {11, 22, 33, 44, 55, 66, 77, 88, 99, 111};
    for (int mode = 0; mode < 3; mode++) {
        snprintf(cmd, sizeof cmd,
                 mode == 0   ? "'%s' run -m '%s' -p 'The quick brown fox' -n 10 --temp 0 --json --threads 2 >'%s' 2>/dev/null"
                 : mode == 1 ? "'%s' run -m '%s' -p 'The quick brown fox' --teacher 11,22,33,44,55,66,77,88,99,111 --json "
                               "--vram 1G --ram 8G --expert-slots 4 --threads 2 >'%s' 2>/dev/null"
                             : "'%s' run -m '%s' -p 'The quick brown fox' -n 10 --temp 0 --json --threads 2 --cpu-numerics fork "
                               ">'%s' 2>/dev/null",
                 g_onegpu, g_path, out);
        assert_int_equal(system(cmd), 0);
        json_error_t je;
        json_t *j = json_load_file(out, 0, &je);
        if (!j) fail_msg("%s: %s", out, je.text);
        int32_t ref[10], ref_max[10];
        float ref_lp[10];
        forward_loop(&ids, mode == 1 ? feed : NULL, 10, mode == 2 ? OG_NUMERICS_FORK : OG_NUMERICS_CANONICAL, ref, ref_lp,
                     ref_max);
        json_t *pt = json_object_get(j, "prompt_tokens"), *tk = json_object_get(j, "tokens"),
               *lp = json_object_get(j, "logprobs");
        assert_int_equal(json_array_size(pt), ids.n);
        for (size_t i = 0; i < ids.n; i++) assert_int_equal(json_integer_value(json_array_get(pt, i)), ids.v[i]);
        int n = 10;
        for (int t = 0; t < 10 && mode != 1; t++)
            if (og_tokenizer_is_eog(g_tok, ref[t])) { /* greedy stops there, the EOG listed */
                n = t + 1;
                break;
            }
        assert_int_equal(json_array_size(tk), n);
        assert_int_equal(json_array_size(lp), n);
        for (int t = 0; t < n; t++) {
            json_t *e = json_array_get(lp, (size_t)t);
            assert_int_equal(json_integer_value(json_array_get(tk, (size_t)t)), ref[t]);
            assert_int_equal(json_integer_value(json_object_get(e, "token")), ref[t]);
            assert_true((float)json_real_value(json_object_get(e, "logprob")) == ref_lp[t]);
            assert_int_equal(json_integer_value(json_object_get(e, "argmax")), ref_max[t]);
            assert_int_equal(json_array_size(json_object_get(e, "top")), 5);
        }
        json_t *pm = json_object_get(j, "placement");
        if (mode == 1) {
            const uint64_t n_moe = og_model_get_info(g_m)->n_layer - og_model_get_info(g_m)->n_dense;
            assert_non_null(pm);
            assert_int_equal(json_integer_value(json_object_get(pm, "selections")),
                             (ids.n + 9) * n_moe * og_model_get_info(g_m)->n_expert_used);
            assert_int_equal(json_integer_value(json_object_get(pm, "resident_experts")), 4 * n_moe); /* at rest */
        } else {
            assert_null(pm);
        }
        json_decref(j);
    }
    unlink(out);
    og_ids_free(&ids);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_engine MODEL.gguf (with a tokenizer) [PATH/TO/onegpu]\n");
        return 1;
    }
    g_path = argv[1];
    g_onegpu = argc > 2 ? argv[2] : NULL;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_holdback),
        cmocka_unit_test(test_greedy_matches_forward_loop),
        cmocka_unit_test(test_batch_invariance),
        cmocka_unit_test(test_stop_across_tokens),
        cmocka_unit_test(test_cancel_frees_everything),
        cmocka_unit_test(test_prefill_share),
        cmocka_unit_test(test_short_prompt_behind_long),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_zero_tokens_and_drain),
        cmocka_unit_test(test_forced_and_eog),
        cmocka_unit_test(test_cut_character),
        cmocka_unit_test(test_placement_at_rest),
        cmocka_unit_test(test_run_cli),
        cmocka_unit_test(test_prefix_cache_identical),
        cmocka_unit_test(test_kv_bytes_per_token),
        cmocka_unit_test(test_prefix_cache_churn),
        cmocka_unit_test(test_prefix_cache_unpaged),
        cmocka_unit_test(test_fork_greedy),
        cmocka_unit_test(test_fork_seeded),
        cmocka_unit_test(test_fork_churn),
        cmocka_unit_test(test_fork_leader_gone),
        cmocka_unit_test(test_fork_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
