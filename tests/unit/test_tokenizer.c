/* tokenizer: decode(encode(x)) == x on real text, special-token rules, BOS, the
 * incremental detokenizer, refusal of unsupported pre-tokenizers, and the
 * joyai-llm name (V4) tokenizing as deepseek-v3. The ids
 * themselves are checked against llama.cpp by tests/cli/ref_tokenizer.sh.
 * usage: test_tokenizer MODEL.gguf TEXT_FILE... */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "og_tokenizer.h"

static const char *g_model;
static char **g_files;
static int g_n_files;
static og_tokenizer *g_tok;

static int setup(void **state) {
    (void)state;
    og_gguf *g;
    char err[512];
    if (og_gguf_open(g_model, OG_GGUF_HEADER_ONLY, &g, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    og_status st = og_tokenizer_load(g, &g_tok, err, sizeof err);
    og_gguf_close(g);
    if (st) fprintf(stderr, "%s\n", err);
    return st ? -1 : 0;
}
static int teardown(void **state) {
    (void)state;
    og_tokenizer_free(g_tok);
    return 0;
}

static char *decode_all(const og_ids *ids, size_t *len) {
    size_t cap = ids->n * 64 + 64;
    char *out = malloc(cap);
    *len = 0;
    out[0] = '\0';
    og_detok d = {0};
    for (size_t i = 0; i < ids->n; i++) assert_true(og_detok_push(g_tok, &d, ids->v[i], out, cap, len) >= 0);
    assert_int_equal(og_detok_flush(&d, out, cap, len), 0); /* valid text leaves nothing pending */
    return out;
}

static void test_round_trip(void **state) {
    (void)state;
    size_t total = 0;
    for (int i = 0; i < g_n_files; i++) {
        char *text;
        size_t len;
        char err[256];
        assert_int_equal(og_read_file(g_files[i], 1u << 28, &text, &len, err, sizeof err), OG_OK);
        if (!og_utf8_valid(text, len)) {
            free(text);
            continue;
        }
        og_ids ids = {0};
        /* special text (e.g. <think>) stays text when decoded: USER_DEFINED tokens
         * decode to themselves, CONTROL ones are not parsed here */
        assert_int_equal(og_tokenize(g_tok, text, len, false, false, &ids), OG_OK);
        size_t dlen;
        char *back = decode_all(&ids, &dlen);
        if (dlen != len || memcmp(back, text, len)) fail_msg("%s: decode(encode(x)) != x", g_files[i]);
        total += len;
        free(back);
        free(text);
        og_ids_free(&ids);
    }
    print_message("round trip: %zu bytes in %d files\n", total, g_n_files);
    assert_true(total > 0);
}

static void test_specials_and_bos(void **state) {
    (void)state;
    const char *user = "<\xef\xbd\x9cUser\xef\xbd\x9c>";
    int32_t user_id = og_tokenizer_find(g_tok, user, strlen(user));
    assert_true(user_id > 0);
    assert_int_equal(og_tokenizer_type(g_tok, user_id), OG_TOK_CONTROL);
    char text[64];
    snprintf(text, sizeof text, "%shi", user);
    og_ids a = {0}, b = {0};
    assert_int_equal(og_tokenize(g_tok, text, strlen(text), true, true, &a), OG_OK);
    assert_int_equal(a.v[0], og_tokenizer_bos(g_tok)); /* BOS first */
    assert_int_equal(a.v[1], user_id);                  /* control text parsed on request */
    assert_int_equal(og_tokenize(g_tok, text, strlen(text), false, false, &b), OG_OK);
    for (size_t i = 0; i < b.n; i++) assert_int_not_equal(b.v[i], user_id); /* never from user text otherwise */
    og_ids_free(&a);
    og_ids_free(&b);
    /* og_tokenizer_first_control: the first CONTROL token in text order, as og_tokenize finds them */
    const char *eos = "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>";
    int32_t eos_id = og_tokenizer_find(g_tok, eos, strlen(eos)), first;
    assert_true(eos_id > 0 && eos_id != user_id);
    snprintf(text, sizeof text, "x %s y %s", eos, user);
    assert_int_equal(og_tokenizer_first_control(g_tok, text, strlen(text), &first), OG_OK);
    assert_int_equal(first, eos_id);
    assert_int_equal(og_tokenizer_first_control(g_tok, "plain <think> text", 18, &first), OG_OK);
    assert_int_equal(first, -1);
    /* USER_DEFINED <think> is matched even without parse_special (spec §2.1) */
    int32_t think = og_tokenizer_find(g_tok, "<think>", 7);
    if (think >= 0 && og_tokenizer_type(g_tok, think) == OG_TOK_USER_DEFINED) {
        assert_int_equal(og_tokenize(g_tok, "a<think>b", 9, false, false, &a), OG_OK);
        bool found = false;
        for (size_t i = 0; i < a.n; i++) found |= a.v[i] == think;
        assert_true(found);
        og_ids_free(&a);
    }
    /* EOS is end of generation; BOS text decodes to nothing */
    assert_true(og_tokenizer_is_eog(g_tok, og_tokenizer_eos(g_tok)));
    char buf[64];
    assert_int_equal(og_token_to_bytes(g_tok, og_tokenizer_bos(g_tok), false, buf, sizeof buf), 0);
    assert_int_equal(og_token_to_bytes(g_tok, -1, false, buf, sizeof buf), -1);
}

/* A 4-byte emoji spans several byte-level tokens: nothing is emitted until it is
 * complete, and a cut-off one becomes U+FFFD at the end. */
static void test_incremental_utf8(void **state) {
    (void)state;
    const char *rocket = "\xf0\x9f\x9a\x80";
    og_ids ids = {0};
    assert_int_equal(og_tokenize(g_tok, rocket, 4, false, false, &ids), OG_OK);
    assert_true(ids.n >= 2);
    char out[64];
    size_t len = 0;
    og_detok d = {0};
    for (size_t i = 0; i + 1 < ids.n; i++) {
        assert_int_equal(og_detok_push(g_tok, &d, ids.v[i], out, sizeof out, &len), 0);
        assert_int_equal(len, 0);
    }
    assert_int_equal(og_detok_push(g_tok, &d, ids.v[ids.n - 1], out, sizeof out, &len), 4);
    assert_memory_equal(out, rocket, 4);
    /* cut off after the first token */
    len = 0;
    og_detok d2 = {0};
    og_detok_push(g_tok, &d2, ids.v[0], out, sizeof out, &len);
    assert_int_equal(og_detok_flush(&d2, out, sizeof out, &len), 3);
    assert_string_equal(out, "\xef\xbf\xbd");
    og_ids_free(&ids);
}

static void test_unsupported_pre(void **state) {
    (void)state;
    og_gguf_writer *w;
    assert_int_equal(og_gguf_writer_create(32, &w), OG_OK);
    og_gguf_writer_set_str(w, "general.architecture", "x");
    og_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    og_gguf_writer_set_str(w, "tokenizer.ggml.pre", "qwen2");
    og_str toks[2] = {{"a", 1}, {"b", 1}};
    og_gguf_writer_set_arr(w, "tokenizer.ggml.tokens", OG_GGUF_STRING, toks, 2);
    og_gguf_writer_set_arr(w, "tokenizer.ggml.merges", OG_GGUF_STRING, toks, 0);
    char path[] = "/tmp/og_tok_pre_XXXXXX", err[512];
    int fd = mkstemp(path);
    close(fd);
    assert_int_equal(og_gguf_writer_write(w, path, NULL, NULL, err, sizeof err), OG_OK);
    og_gguf_writer_free(w);
    og_gguf *g;
    og_tokenizer *t;
    assert_int_equal(og_gguf_open(path, OG_GGUF_HEADER_ONLY, &g, err, sizeof err), OG_OK);
    assert_int_equal(og_tokenizer_load(g, &t, err, sizeof err), OG_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "qwen2"));
    og_gguf_close(g);
    unlink(path);
}

/* tokenizer.ggml.pre = "joyai-llm" (V4 GGUFs): the same vocabulary under that
 * name tokenizes every text file exactly as under "deepseek-v3" (llama.cpp's
 * src/llama-vocab.cpp gives both the same three regexes; the deepseek-v3 ids are
 * checked against llama.cpp itself by ref_tokenizer.sh). */
static void test_joyai_pre(void **state) {
    (void)state;
    og_gguf *g;
    char err[512];
    assert_int_equal(og_gguf_open(g_model, OG_GGUF_HEADER_ONLY, &g, err, sizeof err), OG_OK);
    og_gguf_writer *w;
    assert_int_equal(og_gguf_writer_create(32, &w), OG_OK);
    assert_int_equal(og_gguf_writer_set_str(w, "general.architecture", "deepseek4"), OG_OK);
    for (uint64_t i = 0; i < og_gguf_n_kv(g); i++) {
        const og_gguf_kv *kv = og_gguf_kv_at(g, i);
        if (strncmp(kv->key, "tokenizer.", 10) || !strcmp(kv->key, "tokenizer.ggml.pre")) continue;
        og_status st;
        if (kv->type == OG_GGUF_ARRAY)
            st = og_gguf_writer_set_arr(w, kv->key, kv->arr_type, kv->arr_type == OG_GGUF_STRING ? (const void *)kv->strs : kv->data,
                                        kv->arr_n);
        else st = og_gguf_writer_set(w, kv->key, kv->type, kv->type == OG_GGUF_STRING ? (const void *)&kv->str : kv->data);
        assert_int_equal(st, OG_OK);
    }
    assert_int_equal(og_gguf_writer_set_str(w, "tokenizer.ggml.pre", "joyai-llm"), OG_OK);
    char path[] = "/tmp/og_tok_joyai_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    assert_int_equal(og_gguf_writer_write(w, path, NULL, NULL, err, sizeof err), OG_OK);
    og_gguf_writer_free(w);
    og_gguf_close(g);
    og_tokenizer *t;
    assert_int_equal(og_gguf_open(path, OG_GGUF_HEADER_ONLY, &g, err, sizeof err), OG_OK);
    if (og_tokenizer_load(g, &t, err, sizeof err)) fail_msg("joyai-llm refused: %s", err);
    og_gguf_close(g);
    unlink(path);
    size_t n_ids = 0;
    for (int f = 0; f < g_n_files; f++) {
        FILE *fp = fopen(g_files[f], "rb");
        assert_non_null(fp);
        static char buf[1 << 20];
        size_t n = fread(buf, 1, sizeof buf, fp);
        fclose(fp);
        og_ids a = {0}, b = {0};
        assert_int_equal(og_tokenize(g_tok, buf, n, true, true, &a), OG_OK);
        assert_int_equal(og_tokenize(t, buf, n, true, true, &b), OG_OK);
        if (a.n != b.n || memcmp(a.v, b.v, a.n * sizeof *a.v)) fail_msg("%s: joyai-llm ids differ", g_files[f]);
        n_ids += a.n;
        og_ids_free(&a);
        og_ids_free(&b);
    }
    assert_true(n_ids > 0);
    og_tokenizer_free(t);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_tokenizer MODEL.gguf TEXT_FILE...\n");
        return 2;
    }
    g_model = argv[1];
    g_files = argv + 2;
    g_n_files = argc - 2;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip), cmocka_unit_test(test_specials_and_bos),
        cmocka_unit_test(test_incremental_utf8), cmocka_unit_test(test_unsupported_pre),
        cmocka_unit_test(test_joyai_pre),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
