/* What the engine tests share (test_engine, test_engine_ds4, test_kv_pool): one model file
 * with its tokenizer (g_path, loaded by setup), a 2-thread pool, the best
 * kernels and a host-only dispatcher, greedy sampling parameters, and
 * collect (a sequence's output read to its end). Include after cmocka.h. */
#ifndef OG_ENGINE_FIXTURE_H
#define OG_ENGINE_FIXTURE_H

#include "kernels_fixture.h"
#include "og_engine.h"

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
    if (og_tokenizer_load(og_model_gguf(g_m), &g_tok, err, sizeof err)) fail_msg("%s", err);
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

/* Temperature 0, log-probs on, max_tokens tokens. */
static og_seq_params greedy(int max_tokens) {
    og_seq_params p = {.sampling = og_sampler_defaults(), .max_tokens = max_tokens, .logprobs = true};
    p.sampling.temperature = 0;
    return p;
}

/* A cpu device of budget bytes with a stream, and a run context on it (canonical numerics). */
static og_run_ctx fx_device_rc(uint64_t budget, og_device **dev, og_stream **s) {
    char err[256];
    assert_int_equal(og_device_cpu_create(budget, 1, &g_kern, dev, err, sizeof err), OG_OK);
    assert_int_equal((*dev)->ops->stream_create(*dev, s, err, sizeof err), OG_OK);
    return (og_run_ctx){.kern = &g_kern, .pool = g_pool, .dispatch = g_host, .dev = *dev, .stream = *s,
                        .device_numerics = OG_NUMERICS_CANONICAL, .host_numerics = OG_NUMERICS_CANONICAL};
}

/* An engine config in the CLI's default numerics (canonical products on the
 * host: the bits do not depend on the batch), host-only dispatcher. */
static inline og_engine_config fx_engine_config(int parallel, int batch_tokens, int ctx, int queue) {
    return (og_engine_config){.model = g_m, .tok = g_tok,
                              .rc = {.kern = &g_kern, .pool = g_pool, .dispatch = g_host,
                                     .device_numerics = OG_NUMERICS_CANONICAL, .host_numerics = OG_NUMERICS_CANONICAL},
                              .parallel = parallel, .batch_tokens = batch_tokens, .ctx = ctx, .queue = queue};
}

/* The engine of c, created and started (a failure fails the test). */
static inline og_engine *fx_start(const og_engine_config *c) {
    og_engine *e;
    char err[512];
    if (og_engine_create(c, &e, err, sizeof err)) fail_msg("%s", err);
    if (og_engine_start(e, err, sizeof err)) fail_msg("%s", err);
    return e;
}

/* deepseek2's MLA row shape read from the file's own keys (deepseek2.md §1),
 * not from the loader's og_model_info: the tests' independent formula. */
static inline void fx_mla_shape(const og_model *m, uint32_t *n_layer, uint32_t *r_kv, uint32_t *d_rope) {
    const og_gguf *g = og_model_gguf(m);
    assert_int_equal(og_gguf_get_u32(g, "deepseek2.block_count", n_layer), OG_OK);
    assert_int_equal(og_gguf_get_u32(g, "deepseek2.attention.kv_lora_rank", r_kv), OG_OK);
    assert_int_equal(og_gguf_get_u32(g, "deepseek2.rope.dimension_count", d_rope), OG_OK);
}

/* One sequence's output as collect reads it. */
typedef struct result {
    char text[4096];
    size_t len;
    int32_t ids[256];
    float lps[256];
    int n;
    og_finish finish;
    int n_gen, n_cached;
    uint64_t step_submit, step_first;
    char error[256]; /* an OG_FINISH_ERROR's message */
} result;

/* Reads s to its end (then releases it), concatenating what each og_seq_take
 * hands over: text, the first 256 tokens' ids and log-probs. */
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
        if (f == OG_FINISH_ERROR) memcpy(r->error, o.error, sizeof r->error);
        r->n_gen = o.n_gen;
        r->n_cached = o.n_cached;
        r->step_submit = o.step_submit;
        r->step_first = o.step_first;
        int stop_index = o.stop_index;
        og_seq_out_free(&o);
        /* only a sequence a stop string ended names one (collect's requests have none) */
        assert_int_equal(stop_index, -1);
        if (f != OG_FINISH_NONE) {
            r->finish = f;
            break;
        }
        og_engine_wait(e, 0.05);
    }
    og_seq_release(e, s);
}

#endif
