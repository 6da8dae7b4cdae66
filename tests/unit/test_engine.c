/* The engine (scheduler, stop strings, cancellation) on a make-model file with
 * the real DeepSeek-V3 tokenizer (argv[1]). References are computed another
 * way: a plain og_model_forward loop with argmax and a log-softmax here. */
#include "kernels_fixture.h"
#include "og_engine.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

static const char *g_path;
static og_model *g_m;
static og_tokenizer *g_tok;
static og_pool *g_pool;
static og_kernels g_kern;
static og_dispatch *g_dispatch;      /* host only */
static const og_dispatcher *g_host;

static int setup(void **state) {
    (void)state;
    char err[512];
    if (og_model_load(g_path, NULL, &g_m, err, sizeof err)) fail_msg("%s", err);
    if (og_tokenizer_load(g_m->gguf, &g_tok, err, sizeof err)) fail_msg("%s", err);
    if (og_pool_create(2, NULL, &g_pool, err, sizeof err)) fail_msg("%s", err);
    g_kern = fx_best_kernels();
    if (og_dispatch_create(NULL, NULL, &g_dispatch, err, sizeof err)) fail_msg("%s", err);
    g_host = og_dispatch_table(g_dispatch);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    og_dispatch_free(g_dispatch);
    og_pool_free(g_pool);
    og_tokenizer_free(g_tok);
    og_model_free(g_m);
    return 0;
}

static og_engine *make_engine(int parallel, int batch_tokens, int ctx, int queue, bool start) {
    og_engine_config c = {.model = g_m, .tok = g_tok, .rc = {.kern = &g_kern, .pool = g_pool, .dispatch = g_host}, .parallel = parallel,
                          .batch_tokens = batch_tokens, .ctx = ctx, .queue = queue};
    og_engine *e;
    char err[256];
    if (og_engine_create(&c, &e, err, sizeof err)) fail_msg("%s", err);
    if (start && og_engine_start(e, err, sizeof err)) fail_msg("%s", err);
    return e;
}

static og_ids prompt_ids(const char *text) {
    og_ids ids = {0};
    assert_int_equal(og_tokenize(g_tok, text, strlen(text), og_tokenizer_add_bos(g_tok), true, &ids), OG_OK);
    return ids;
}

typedef struct result {
    char text[4096];
    size_t len;
    int32_t ids[256];
    float lps[256];
    int n;
    og_finish finish;
    int n_gen;
} result;

/* Reads s to its end, concatenating what each og_seq_take hands over. */
static void collect(og_engine *e, og_seq *s, result *r) {
    memset(r, 0, sizeof *r);
    for (;;) {
        og_seq_out o;
        assert_int_equal(og_seq_take(e, s, &o), OG_OK);
        assert_true(r->len + o.len < sizeof r->text);
        assert_int_equal(o.text_offset, r->len);
        memcpy(r->text + r->len, o.text, o.len);
        r->len += o.len;
        for (int i = 0; i < o.n_toks && r->n < 256; i++) {
            r->ids[r->n] = o.toks[i].id;
            r->lps[r->n++] = o.toks[i].logprob;
        }
        og_finish f = o.finish;
        r->n_gen = o.n_gen;
        og_seq_out_free(&o);
        if (f != OG_FINISH_NONE) {
            r->finish = f;
            break;
        }
        og_engine_wait(e, 0.05);
    }
    og_seq_release(e, s);
}

static og_seq *submit(og_engine *e, const og_ids *ids, const og_seq_params *p) {
    og_seq *s;
    char err[256];
    if (og_engine_submit(e, ids->v, (int)ids->n, p, &s, err, sizeof err)) fail_msg("%s", err);
    return s;
}

static og_seq_params greedy(int max_tokens) {
    og_seq_params p = {.sampling = og_sampler_defaults(), .max_tokens = max_tokens, .logprobs = true};
    p.sampling.temperature = 0;
    return p;
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
    float *logits = malloc(g_m->hp.n_vocab * sizeof *logits);
    int32_t ref[16];
    float ref_lp[16];
    char err[256];
    assert_int_equal(og_model_forward(g_m, &rc, &kv, ids.v, (int)ids.n, logits, false, err, sizeof err), OG_OK);
    for (int t = 0; t < n_new; t++) {
        int32_t best = 0;
        for (uint32_t j = 1; j < g_m->hp.n_vocab; j++)
            if (logits[j] > logits[best]) best = (int32_t)j;
        double lse = 0;
        for (uint32_t j = 0; j < g_m->hp.n_vocab; j++) lse += exp((double)logits[j] - logits[best]);
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

/* A sampled request alone and alongside 7 others (different prompts, seeds,
 * lengths): bit-identical tokens and log-probs. */
static void test_batch_invariance(void **state) {
    (void)state;
    og_ids ids = prompt_ids("Once upon a time");
    og_seq_params p = greedy(12);
    p.sampling.temperature = 0.9f;
    p.sampling.top_p = 0.95f;
    p.sampling.seed = 1234;
    p.n_top = 3;
    og_engine *e = make_engine(8, 64, 256, 8, true);
    result alone, together;
    collect(e, submit(e, &ids, &p), &alone);
    og_seq *others[7];
    og_ids oids[7];
    for (int i = 0; i < 7; i++) {
        char txt[64];
        snprintf(txt, sizeof txt, "Other prompt number %d is a little longer than the rest %d", i, i * i);
        oids[i] = prompt_ids(txt);
        og_seq_params q = p;
        q.sampling.seed = (uint64_t)i;
        q.max_tokens = 5 + 3 * i;
        others[i] = submit(e, &oids[i], &q);
    }
    collect(e, submit(e, &ids, &p), &together);
    for (int i = 0; i < 7; i++) {
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
    p.stop[0] = stop;
    p.n_stop = 1;
    og_seq *s = submit(e, &ids, &p);
    char got[4096];
    size_t got_len = 0;
    og_finish f = OG_FINISH_NONE;
    while (f == OG_FINISH_NONE) {
        og_seq_out o;
        assert_int_equal(og_seq_take(e, s, &o), OG_OK);
        memcpy(got + got_len, o.text, o.len);
        got_len += o.len;
        got[got_len] = 0;
        /* everything handed over so far lies before the stop string */
        assert_true(got_len <= expect);
        f = o.finish;
        og_seq_out_free(&o);
        if (f == OG_FINISH_NONE) og_engine_wait(e, 0.05);
    }
    og_seq_release(e, s);
    og_engine_free(e);
    assert_int_equal(f, OG_FINISH_STOP);
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
    int32_t bad = (int32_t)g_m->hp.n_vocab;
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

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_engine MODEL.gguf (with a tokenizer)\n");
        return 1;
    }
    g_path = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_holdback),
        cmocka_unit_test(test_greedy_matches_forward_loop),
        cmocka_unit_test(test_batch_invariance),
        cmocka_unit_test(test_stop_across_tokens),
        cmocka_unit_test(test_cancel_frees_everything),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_zero_tokens_and_drain),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
