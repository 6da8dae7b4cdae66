/* chat template: the built-in DeepSeek-V3 formatter against the official Jinja
 * template as rendered by a reference engine (cases made by tests/js/chat_cases.mjs),
 * template detection on a real tokenizer.chat_template, and bad input.
 * usage: test_chat CASES.json MODEL.gguf */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "og_tokenizer.h"

static const char *g_cases, *g_model;
#define BOS_TEXT "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"

static void test_reference_cases(void **state) {
    (void)state;
    json_error_t je;
    json_t *cases = json_load_file(g_cases, 0, &je);
    assert_non_null(cases);
    if (json_array_size(cases) == 0) fail_msg("%s: no conversations to render (zero cases)", g_cases);
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        json_t *msgs = json_object_get(c, "messages");
        size_t n = json_array_size(msgs);
        og_chat_msg *m = calloc(n + 1, sizeof *m);
        og_chat_tool_call *calls = calloc(64, sizeof *calls);
        int nc = 0;
        for (size_t k = 0; k < n; k++) {
            json_t *jm = json_array_get(msgs, k);
            m[k].role = json_string_value(json_object_get(jm, "role"));
            m[k].content = json_string_value(json_object_get(jm, "content")); /* null -> NULL */
            json_t *tc = json_object_get(jm, "tool_calls");
            m[k].tool_calls = calls + nc;
            for (size_t t = 0; t < json_array_size(tc); t++, nc++) {
                json_t *f = json_object_get(json_array_get(tc, t), "function");
                calls[nc].type = json_string_value(json_object_get(json_array_get(tc, t), "type"));
                calls[nc].name = json_string_value(json_object_get(f, "name"));
                calls[nc].arguments = json_string_value(json_object_get(f, "arguments"));
                m[k].n_tool_calls++;
            }
        }
        char *out, err[256];
        bool gen = json_is_true(json_object_get(c, "add_generation_prompt"));
        assert_int_equal(og_chat_format(OG_CHAT_DEEPSEEK3, m, (int)n, gen, &out, err, sizeof err), OG_OK);
        const char *want = json_string_value(json_object_get(c, "expected"));
        /* the reference writes the BOS text; ours leaves it to the tokenizer's BOS id */
        assert_true(strncmp(want, BOS_TEXT, strlen(BOS_TEXT)) == 0);
        if (strcmp(out, want + strlen(BOS_TEXT)) != 0) fail_msg("case %zu:\n ours: %s\n want: %s", i, out, want);
        free(out);
        free(m);
        free(calls);
    }
    print_message("%zu conversations rendered as the reference does\n", json_array_size(cases));
    json_decref(cases);
}

static void test_detect_and_errors(void **state) {
    (void)state;
    og_gguf *g;
    char err[256];
    assert_int_equal(og_gguf_open(g_model, OG_GGUF_HEADER_ONLY, &g, err, sizeof err), OG_OK);
    og_str tmpl;
    assert_int_equal(og_gguf_get_str(g, "tokenizer.chat_template", &tmpl), OG_OK);
    assert_int_equal(og_chat_detect(tmpl.s, (size_t)tmpl.n), OG_CHAT_DEEPSEEK3);
    og_gguf_close(g);
    assert_int_equal(og_chat_detect("{{ messages }}", 14), OG_CHAT_UNKNOWN);
    char *out;
    og_chat_msg bad[1] = {{.role = "wizard", .content = "x"}};
    assert_int_equal(og_chat_format(OG_CHAT_DEEPSEEK3, bad, 1, true, &out, err, sizeof err), OG_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "wizard"));
    og_chat_msg empty_asst[1] = {{.role = "assistant", .content = NULL}};
    assert_int_equal(og_chat_format(OG_CHAT_DEEPSEEK3, empty_asst, 1, true, &out, err, sizeof err), OG_ERR_INVALID_ARG);
    assert_int_equal(og_chat_format(OG_CHAT_UNKNOWN, bad, 0, true, &out, err, sizeof err), OG_ERR_UNSUPPORTED);
    /* developer is the newer name of system (openai-api.md §3) */
    og_chat_msg dev[2] = {{.role = "developer", .content = "be brief"}, {.role = "user", .content = "hi"}};
    assert_int_equal(og_chat_format(OG_CHAT_DEEPSEEK3, dev, 2, true, &out, err, sizeof err), OG_OK);
    assert_string_equal(out, "be brief<\xef\xbd\x9cUser\xef\xbd\x9c>hi<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>");
    free(out);
}

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    g_cases = argv[1];
    g_model = argv[2];
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_reference_cases), cmocka_unit_test(test_detect_and_errors)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
