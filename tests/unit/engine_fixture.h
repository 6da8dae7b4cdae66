/* What the engine tests share (test_engine, test_engine_ds4): one model file
 * with its tokenizer (g_path, loaded by setup), a 2-thread pool, the best
 * kernels and a host-only dispatcher, and greedy sampling parameters. Include
 * after cmocka.h. */
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

#endif
