/* The served model as the API parsers see it, for test_api and test_endpoints:
 * a make-model GGUF with the real DeepSeek-V3 tokenizer (its chat template is
 * V3's), loaded by the cmocka group setup. Include after cmocka.h. */
#ifndef API_FIXTURE_H
#define API_FIXTURE_H

#include "og_api.h"

static const char *g_path; /* argv[1] */
static og_gguf *g_gguf;
static og_tokenizer *g_tok;
static og_api_model g_mdl;

/* Loads g_path into g_tok and g_mdl (ctx positions; chat detected: V3). */
static void api_fixture_load(int ctx) {
    char err[512];
    if (og_gguf_open(g_path, 0, &g_gguf, err, sizeof err)) fail_msg("%s", err);
    if (og_tokenizer_load(g_gguf, &g_tok, err, sizeof err)) fail_msg("%s", err);
    og_str tmpl = {0};
    og_gguf_get_str(g_gguf, "tokenizer.chat_template", &tmpl);
    g_mdl = (og_api_model){.tok = g_tok, .chat = og_chat_detect(tmpl.s, (size_t)tmpl.n),
                           .n_vocab = og_tokenizer_n_vocab(g_tok), .ctx = ctx, .n_layer = 1, .capacity = 8};
    assert_int_equal(g_mdl.chat, OG_CHAT_DEEPSEEK3);
}

static int teardown(void **state) {
    (void)state;
    og_tokenizer_free(g_tok);
    og_gguf_close(g_gguf);
    return 0;
}

#endif
