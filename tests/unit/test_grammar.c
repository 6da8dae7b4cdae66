/* Constrained decoding (og_grammar.h): schema errors, the automaton byte by
 * byte on hand-written documents, and the token mask against a brute-force
 * check on the real DeepSeek-V3 vocabulary (argv[1]: a make-model file). */
#include "og_grammar.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static const char *g_path;
static og_gguf *g_gguf;
static og_tokenizer *g_tok;
static og_vocab *g_vocab;

static og_grammar *compile_text(const char *schema_text, og_status *st, char *err, size_t errlen) {
    og_grammar *g = NULL;
    if (!schema_text) {
        *st = og_grammar_json_object(&g, err, errlen);
        return g;
    }
    json_error_t je;
    json_t *s = json_loads(schema_text, JSON_DECODE_ANY, &je);
    if (!s) fail_msg("test schema is not JSON: %s: %s", schema_text, je.text);
    *st = og_grammar_from_schema(s, &g, err, errlen);
    json_decref(s);
    return g;
}

static og_grammar *compile_ok(const char *schema_text) {
    char err[512] = "";
    og_status st;
    og_grammar *g = compile_text(schema_text, &st, err, sizeof err);
    if (st || !g) fail_msg("schema %s: %s", schema_text ? schema_text : "(json_object)", err);
    return g;
}

/* ---- schema errors name the keyword ---------------------------------------- */

static void test_schema_errors(void **state) {
    (void)state;
    static const struct {
        const char *schema;
        og_status st;
        const char *want1, *want2; /* substrings of the message */
    } cases[] = {
        {"{\"type\":\"string\",\"pattern\":\"a+\"}", OG_ERR_UNSUPPORTED, "'pattern'", "#"},
        {"{\"type\":\"number\",\"minimum\":0}", OG_ERR_UNSUPPORTED, "'minimum'", "#"},
        {"{\"type\":\"object\",\"properties\":{\"d\":{\"type\":\"string\",\"format\":\"date\"}}}", OG_ERR_UNSUPPORTED,
         "'format'", "#/properties/d"},
        {"{\"oneOf\":[{\"type\":\"string\"}]}", OG_ERR_UNSUPPORTED, "'oneOf'", "#"},
        {"{\"allOf\":[{\"type\":\"string\"}]}", OG_ERR_UNSUPPORTED, "'allOf'", "#"},
        {"{\"$ref\":\"http://example.com/s.json\"}", OG_ERR_UNSUPPORTED, "'$ref'", "local"},
        {"{\"$ref\":\"#/$defs/missing\"}", OG_ERR_INVALID_ARG, "'$ref'", "resolves to nothing"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"maxLength\":-1}}}", OG_ERR_INVALID_ARG,
         "'maxLength'", "#/properties/a"},
        {"{\"type\":\"object\",\"properties\":{},\"required\":[\"x\"]}", OG_ERR_UNSUPPORTED, "'required'", "'x'"},
        {"{\"type\":\"object\",\"required\":\"x\"}", OG_ERR_INVALID_ARG, "'required'", "array of strings"},
        {"{\"type\":\"strin\"}", OG_ERR_UNSUPPORTED, "'type'", "#"},
        {"{\"type\":42}", OG_ERR_INVALID_ARG, "'type'", "#"},
        {"{\"type\":\"string\",\"minLength\":5,\"maxLength\":2}", OG_ERR_INVALID_ARG, "'minLength'", "'maxLength'"},
        {"{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", OG_ERR_INVALID_ARG, "'minItems'", "'maxItems'"},
        {"{\"type\":\"array\",\"maxItems\":100000}", OG_ERR_RANGE, "'maxItems'", "4096"},
        {"{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}", OG_ERR_INVALID_ARG, "$ref",
         "left recursion"},
        {"{\"$defs\":{\"a\":{\"anyOf\":[{\"$ref\":\"#/$defs/a\"},{\"type\":\"null\"}]}},\"$ref\":\"#/$defs/a\"}",
         OG_ERR_INVALID_ARG, "anyOf", "left recursion"},
        {"{\"$defs\":{\"a\":{\"type\":\"object\",\"properties\":{\"x\":{\"$ref\":\"#/$defs/a\"}},\"required\":[\"x\"],"
         "\"additionalProperties\":false}},\"$ref\":\"#/$defs/a\"}",
         OG_ERR_INVALID_ARG, "no finite", "document"},
        {"{\"enum\":[]}", OG_ERR_INVALID_ARG, "'enum'", "#"},
        {"{\"enum\":\"a\"}", OG_ERR_INVALID_ARG, "'enum'", "array"},
        {"{\"type\":\"integer\",\"enum\":[\"a\",\"b\"]}", OG_ERR_INVALID_ARG, "'enum'", "satisfies"},
        {"{\"enum\":[1],\"minLength\":2}", OG_ERR_UNSUPPORTED, "'minLength'", "enum"},
        {"{\"anyOf\":[]}", OG_ERR_INVALID_ARG, "'anyOf'", "non-empty"},
        {"{\"anyOf\":[{\"type\":\"string\"}],\"type\":\"string\"}", OG_ERR_UNSUPPORTED, "'type'", "'anyOf'"},
        {"{\"$ref\":\"#\",\"type\":\"string\"}", OG_ERR_UNSUPPORTED, "'type'", "'$ref'"},
        {"{\"additionalProperties\":{\"type\":\"string\"}}", OG_ERR_UNSUPPORTED, "'additionalProperties'", "#"},
        {"{\"type\":\"array\",\"items\":[{\"type\":\"string\"}]}", OG_ERR_UNSUPPORTED, "'items'", "tuples"},
        {"false", OG_ERR_INVALID_ARG, "false", "#"},
        {"{\"type\":\"object\",\"properties\":{\"a\":false},\"required\":[\"a\"]}", OG_ERR_INVALID_ARG, "false",
         "#/properties/a"},
        {"[1]", OG_ERR_INVALID_ARG, "schema must be", "#"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[512] = "";
        og_status st;
        og_grammar *g = compile_text(cases[i].schema, &st, err, sizeof err);
        if (st != cases[i].st || g || !strstr(err, cases[i].want1) || !strstr(err, cases[i].want2))
            fail_msg("schema %s: status %d (want %d), message \"%s\" (want \"%s\" and \"%s\")", cases[i].schema, st,
                     cases[i].st, err, cases[i].want1, cases[i].want2);
    }
    /* too deep: 100 nested items */
    char deep[2048] = "";
    for (int i = 0; i < 100; i++) strcat(deep, "{\"items\":");
    strcat(deep, "{}");
    for (int i = 0; i < 100; i++) strcat(deep, "}");
    char err[512] = "";
    og_status st;
    og_grammar *g = compile_text(deep, &st, err, sizeof err);
    assert_int_equal(st, OG_ERR_RANGE);
    assert_null(g);
    assert_non_null(strstr(err, "deeper than 64"));
    /* a long path (100 nested properties: 13 bytes a level) is shortened in the
     * middle, so the reason still fits a client's 400-byte message */
    static char deep2[4096];
    deep2[0] = 0;
    for (int i = 0; i < 100; i++) strcat(deep2, "{\"type\":\"object\",\"properties\":{\"a\":");
    strcat(deep2, "{}");
    for (int i = 0; i < 100; i++) strcat(deep2, "}}");
    char err2[400] = "";
    g = compile_text(deep2, &st, err2, sizeof err2);
    assert_int_equal(st, OG_ERR_RANGE);
    assert_null(g);
    assert_non_null(strstr(err2, "deeper than 64"));
    assert_memory_equal(err2, "#/properties/a/properties/a/properties/a", 40);
    assert_non_null(strstr(err2, "...")); /* e.g. "#/properties/a/.../propert...ties/a/pr: the schema nests ..." */
    assert_true(strlen(err2) < 200);
}

/* ---- the automaton, byte by byte ------------------------------------------ */

#define OK -1     /* every byte accepted and the document complete */
#define PREFIX -2 /* every byte accepted, the document incomplete */

/* Feeds doc one byte at a time: OK, PREFIX or the index of the first refused byte. */
static int run_doc(og_grammar *g, const char *doc, size_t n) {
    og_gmatch *m;
    char err[256];
    assert_int_equal(og_gmatch_create(g, &m, err, sizeof err), OG_OK);
    int r = OK;
    for (size_t i = 0; i < n; i++)
        if (!og_gmatch_feed(m, doc + i, 1)) {
            r = (int)i;
            break;
        }
    if (r == OK && !og_gmatch_accepting(m)) r = PREFIX;
    og_gmatch_free(m);
    return r;
}

static void test_documents(void **state) {
    (void)state;
    static const char *const S_OBJ = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":"
                                     "\"string\"}},\"required\":[\"a\"],\"additionalProperties\":false}";
    static const char *const S_OPEN = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
                                      "\"required\":[\"a\"]}";
    static const char *const S_TREE = "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":"
                                      "\"integer\"},\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},"
                                      "\"required\":[\"v\"],\"additionalProperties\":false}},\"$ref\":\"#/$defs/node\"}";
    static const char *const S_ROOTREF = "{\"type\":\"array\",\"items\":{\"anyOf\":[{\"type\":\"integer\"},{\"$ref\":"
                                         "\"#\"}]},\"maxItems\":2}";
    static const char *const S_ARR = "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,"
                                     "\"maxItems\":2}";
    static const char *const S_ANY = "{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"object\",\"properties\":{\"k\":"
                                     "{\"const\":1}},\"required\":[\"k\"],\"additionalProperties\":false}]}";
    static const char *const S_ENUM = "{\"enum\":[\"red\",\"green\",3,null,{\"x\":[1,2]}]}";
    static const char *const S_LEN = "{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}";
    static const struct {
        const char *schema; /* NULL: json_object */
        const char *doc;
        int want;
    } cases[] = {
        /* strings */
        {"{\"type\":\"string\"}", "\"abc\"", OK},
        {"{\"type\":\"string\"}", "\"a", PREFIX},
        {"{\"type\":\"string\"}", "abc", 0},
        {"{\"type\":\"string\"}", "\"a\"x", 3},
        {"{\"type\":\"string\"}", " \"a\"", 0}, /* no whitespace */
        {"{\"type\":\"string\"}", "\"\\n\\\"\\\\\\/\\u00e9\\uFFFF\"", OK},
        {"{\"type\":\"string\"}", "\"\\x\"", 2},
        {"{\"type\":\"string\"}", "\"\\ud800\"", 4}, /* a surrogate escape */
        {"{\"type\":\"string\"}", "\"\\u12g4\"", 5},
        {"{\"type\":\"string\"}", "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"", OK}, /* é € 😀 */
        {"{\"type\":\"string\"}", "\"\xc0\x80\"", 1},                              /* overlong */
        {"{\"type\":\"string\"}", "\"\xed\xa0\x80\"", 2},                          /* UTF-8 surrogate */
        {"{\"type\":\"string\"}", "\"\xf4\x90\x80\x80\"", 2},                      /* over U+10FFFF */
        {"{\"type\":\"string\"}", "\"\xc3\"", 2},                                  /* truncated */
        {"{\"type\":\"string\"}", "\"a\x01\"", 2},                                 /* control character */
        {"{\"type\":\"string\"}", "\"tab\there\"", 4},
        /* min/maxLength in code points */
        {S_LEN, "\"ab\"", OK},
        {S_LEN, "\"abc\"", OK},
        {S_LEN, "\"a\"", 2},
        {S_LEN, "\"abcd\"", 4},
        {S_LEN, "\"\xc3\xa9\xc3\xa9\"", OK},
        {S_LEN, "\"\\n\\t\\u0041\"", OK},
        {S_LEN, "\"\\n\\t\\u0041x\"", 11},
        /* numbers */
        {"{\"type\":\"integer\"}", "-12", OK},
        {"{\"type\":\"integer\"}", "0", OK},
        {"{\"type\":\"integer\"}", "-", PREFIX},
        {"{\"type\":\"integer\"}", "012", 1},
        {"{\"type\":\"integer\"}", "1.5", 1},
        {"{\"type\":\"integer\"}", "1234567890123456", OK},
        {"{\"type\":\"integer\"}", "12345678901234567", 16},
        {"{\"type\":\"integer\"}", "+1", 0},
        {"{\"type\":\"number\"}", "1.5e+10", OK},
        {"{\"type\":\"number\"}", "-0.25E-3", OK},
        {"{\"type\":\"number\"}", "1.", PREFIX},
        {"{\"type\":\"number\"}", ".5", 0},
        {"{\"type\":\"number\"}", "1e123", 4},
        {"{\"type\":\"number\"}", "1e", PREFIX},
        /* boolean, null, type lists */
        {"{\"type\":\"boolean\"}", "true", OK},
        {"{\"type\":\"boolean\"}", "false", OK},
        {"{\"type\":\"boolean\"}", "tru", PREFIX},
        {"{\"type\":\"boolean\"}", "trux", 3},
        {"{\"type\":\"boolean\"}", "null", 0},
        {"{\"type\":\"null\"}", "null", OK},
        {"{\"type\":\"null\"}", "nul", PREFIX},
        {"{\"type\":[\"string\",\"null\"]}", "null", OK},
        {"{\"type\":[\"string\",\"null\"]}", "\"x\"", OK},
        {"{\"type\":[\"string\",\"null\"]}", "1", 0},
        /* objects: schema order, required mandatory, optional skippable */
        {S_OBJ, "{\"a\":1,\"b\":\"x\"}", OK},
        {S_OBJ, "{\"a\":1}", OK},
        {S_OBJ, "{\"b\":\"x\"}", 2},
        {S_OBJ, "{\"b\":\"x\",\"a\":1}", 2},
        {S_OBJ, "{\"a\":1,\"c\":1}", 8},
        {S_OBJ, "{}", 1},
        {S_OBJ, "{\"a\":\"1\"}", 5},
        {S_OBJ, "{\"a\": 1}", 5},
        {S_OBJ, "{\"a\":1,\"b\":\"x\",\"b\":\"y\"}", 14},
        /* additionalProperties absent: extras after the declared ones, never a declared key again */
        {S_OPEN, "{\"a\":1,\"zz\":null}", OK},
        {S_OPEN, "{\"a\":1,\"ab\":[{\"q\":2}]}", OK},
        {S_OPEN, "{\"a\":1,\"a\":2}", 9},
        {S_OPEN, "{\"zz\":1,\"a\":2}", 2},
        {"{\"type\":\"object\",\"additionalProperties\":false}", "{}", OK},
        {"{\"type\":\"object\",\"additionalProperties\":false}", "{\"a\":1}", 1},
        {"{\"type\":\"object\"}", "{\"a\":1,\"b\":{}}", OK},
        /* enum / const */
        {S_ENUM, "\"green\"", OK},
        {S_ENUM, "\"gre\"", 4},
        {S_ENUM, "\"blue\"", 1},
        {S_ENUM, "3", OK},
        {S_ENUM, "4", 0},
        {S_ENUM, "null", OK},
        {S_ENUM, "{\"x\":[1,2]}", OK},
        {S_ENUM, "{\"x\":[1]}", 7},
        {"{\"const\":\"\xc3\xa9t\xc3\xa9\"}", "\"\xc3\xa9t\xc3\xa9\"", OK},
        {"{\"type\":\"string\",\"enum\":[\"a\",1]}", "1", 0}, /* enum values filtered by type */
        /* arrays */
        {S_ARR, "[1]", OK},
        {S_ARR, "[1,2]", OK},
        {S_ARR, "[]", 1},
        {S_ARR, "[1,2,3]", 4},
        {S_ARR, "[\"a\"]", 1},
        {S_ARR, "[1,]", 3},
        {"{\"type\":\"array\"}", "[1,\"a\",[],{}]", OK},
        {"{\"type\":\"array\",\"maxItems\":0}", "[]", OK},
        {"{\"type\":\"array\",\"maxItems\":0}", "[1]", 1},
        /* anyOf, $defs / $ref (recursion) */
        {S_ANY, "5", OK},
        {S_ANY, "{\"k\":1}", OK},
        {S_ANY, "{\"k\":2}", 5},
        {S_ANY, "\"s\"", 0},
        {S_TREE, "{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[]},{\"v\":3}]}", OK},
        {S_TREE, "{\"v\":1,\"kids\":[{\"kids\":[]}]}", 17},
        {S_ROOTREF, "[1,[2,[[]]]]", OK},
        {S_ROOTREF, "[1,2,3]", 4},
        /* json_object: any object, no whitespace */
        {NULL, "{\"a\":[1,{\"b\":null}],\"c\":\"d\"}", OK},
        {NULL, "{}", OK},
        {NULL, "[1]", 0},
        {NULL, "{\"a\" :1}", 4},
        {NULL, "{ }", 1},
        {NULL, "{\"a\":1}x", 7},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        og_grammar *g = compile_ok(cases[i].schema);
        int got = run_doc(g, cases[i].doc, strlen(cases[i].doc));
        og_grammar_unref(g);
        if (got != cases[i].want)
            fail_msg("schema %s, document %s: got %d, want %d (-1 complete, -2 prefix, else the refused byte)",
                     cases[i].schema ? cases[i].schema : "(json_object)", cases[i].doc, got, cases[i].want);
    }
}

/* a refused feed leaves the matcher where it was; accepting/finished states */
static void test_feed_states(void **state) {
    (void)state;
    og_grammar *g = compile_ok("{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"}},"
                               "\"additionalProperties\":false}");
    og_gmatch *m;
    char err[256];
    assert_int_equal(og_gmatch_create(g, &m, err, sizeof err), OG_OK);
    og_grammar_unref(g); /* the matcher holds its own reference */
    assert_true(og_gmatch_feed(m, "{\"n\":1", 6));
    assert_false(og_gmatch_accepting(m));
    assert_false(og_gmatch_feed(m, "2x", 2)); /* refused as a whole */
    assert_true(og_gmatch_feed(m, "2}", 2));  /* so "2" was not consumed: {"n":12} */
    assert_true(og_gmatch_accepting(m));
    assert_true(og_gmatch_finished(m));
    assert_false(og_gmatch_feed(m, "}", 1));
    og_gmatch_free(m);

    g = compile_ok("{\"type\":\"integer\"}");
    assert_int_equal(og_gmatch_create(g, &m, err, sizeof err), OG_OK);
    og_grammar_unref(g);
    assert_true(og_gmatch_feed(m, "12", 2));
    assert_true(og_gmatch_accepting(m));
    assert_false(og_gmatch_finished(m)); /* more digits may follow */
    og_gmatch_free(m);
}

/* a huge enum compiles and matches */
static void test_big_enum(void **state) {
    (void)state;
    json_t *vals = json_array();
    for (int i = 0; i < 20000; i++) {
        char s[32];
        snprintf(s, sizeof s, "value-%d", i * 7);
        json_array_append_new(vals, json_string(s));
    }
    json_t *s = json_pack("{s:o}", "enum", vals);
    og_grammar *g;
    char err[256];
    assert_int_equal(og_grammar_from_schema(s, &g, err, sizeof err), OG_OK);
    json_decref(s);
    assert_int_equal(run_doc(g, "\"value-139993\"", 14), OK);
    assert_int_equal(run_doc(g, "\"value-139994\"", 14), 12);
    assert_int_equal(run_doc(g, "\"value-1\"", 9), 8);
    og_grammar_unref(g);
}

/* ---- the mask against brute force on the real vocabulary ----------------- */

static bool bit(const uint64_t *m, int32_t id) { return (m[id >> 6] >> (id & 63)) & 1; }

/* For each token: a fresh matcher fed the prefix, then the token's bytes as
 * the tokenizer gives them (not the trie's copy); EOG tokens by accepting(). */
/* The brute-force walk over the vocabulary dominates this test (~100 s under
 * ASan): the sanitizer builds (OG_SANITIZED set by tests/CMakeLists.txt) check
 * every 16th id (the residue from the prefix's length, so the cases cover
 * different ids), and leave the counts (and the
 * full sweep) to the plain build. */
static void check_mask(const char *schema, const char *prefix, int *n_allowed) {
    og_grammar *g = compile_ok(schema);
    og_gmatch *m, *b = NULL;
    char err[256];
    assert_int_equal(og_gmatch_create(g, &m, err, sizeof err), OG_OK);
    assert_true(og_gmatch_feed(m, prefix, strlen(prefix)));
    const uint64_t *mask;
    assert_int_equal(og_gmatch_mask(m, g_vocab, &mask), OG_OK);
    int32_t n = og_tokenizer_n_vocab(g_tok);
    const bool sampled = getenv("OG_SANITIZED") != NULL;
    const int32_t step = sampled ? 16 : 1, first = sampled ? (int32_t)(strlen(prefix) % 16) : 0;
    int allowed = 0;
    for (int32_t id = first; id < n; id += step) {
        if (!b) {
            assert_int_equal(og_gmatch_create(g, &b, err, sizeof err), OG_OK);
            assert_true(og_gmatch_feed(b, prefix, strlen(prefix)));
        }
        char buf[1024];
        int k = og_token_to_bytes(g_tok, id, false, buf, sizeof buf);
        bool want;
        if (og_tokenizer_is_eog(g_tok, id)) want = og_gmatch_accepting(b);
        else if (k <= 0) want = false;
        else {
            assert_true(k <= (int)sizeof buf);
            want = og_gmatch_feed(b, buf, (size_t)k);
            if (want) { /* b moved on: a fresh one for the next token */
                og_gmatch_free(b);
                b = NULL;
            }
        }
        if (bit(mask, id) != want)
            fail_msg("schema %s after \"%s\": token %d (%d bytes) mask %d, brute force %d", schema, prefix, id, k,
                     bit(mask, id), want);
        allowed += want;
    }
    /* cached: the same state gives the same mask */
    const uint64_t *again;
    assert_int_equal(og_gmatch_mask(m, g_vocab, &again), OG_OK);
    assert_ptr_equal(again, mask);
    og_gmatch_free(b);
    og_gmatch_free(m);
    og_grammar_unref(g);
    *n_allowed = sampled ? -1 : allowed; /* -1: not counted (a sampled sweep) */
}

static void test_mask_brute_force(void **state) {
    (void)state;
    static const char *const S = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":8},"
                                 "\"age\":{\"type\":\"integer\"},\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\","
                                 "\"bb\"]}}},\"required\":[\"name\"],\"additionalProperties\":false}";
    static const struct {
        const char *prefix;
        int min_allowed, max_allowed; /* a sanity range on top of the exact check */
    } cases[] = {
        {"", 1, 50},                 /* "{" and tokens starting {"name... */
        {"{\"name\":\"", 1000, 200000}, /* inside a string: most tokens */
        {"{\"name\":\"abcdefg", 1, 20000}, /* one character left (single-character tokens, CJK too) */
        {"{\"name\":\"x\",\"age\":12", 10, 2000},
        {"{\"name\":\"x\",\"tags\":[\"a\"", 1, 50},
        {"{\"name\":\"x\",\"tags\":[]}", 1, 4}, /* finished: only end-of-generation */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int n;
        check_mask(S, cases[i].prefix, &n);
        if (n >= 0 && (n < cases[i].min_allowed || n > cases[i].max_allowed))
            fail_msg("after \"%s\": %d tokens allowed, expected %d..%d", cases[i].prefix, n, cases[i].min_allowed,
                     cases[i].max_allowed);
    }
    int n;
    check_mask("{\"type\":\"string\"}", "\"\xe2\x82", &n); /* mid-character: only continuation bytes first */
    assert_true(n != 0);
    check_mask("{\"type\":\"string\"}", "\"", &n); /* an unbounded string: plain runs of any length */
    assert_true(n < 0 || n > 100000);
    check_mask("{\"type\":\"string\",\"minLength\":3,\"maxLength\":40}", "\"a", &n); /* bounded on both sides */
    assert_true(n < 0 || n > 1000);
    check_mask("{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"string\",\"maxLength\":3}},"
               "\"additionalProperties\":false}", "{\"k\":\"", &n);
    assert_true(n < 0 || n > 100);
    check_mask("{\"type\":\"integer\"}", "12", &n); /* digits or the end */
    assert_true(n < 0 || n > 10);
}

/* Random walks: tokens drawn from the mask until the grammar is finished (then
 * an EOG token) or 300 tokens; the text must then parse and fit the schema. */
static void test_random_walk(void **state) {
    (void)state;
    static const char *const S = "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"},\"ok\":{\"type\":"
                                 "\"boolean\"},\"xs\":{\"type\":\"array\",\"items\":{\"type\":\"number\"},\"maxItems\":3}},"
                                 "\"required\":[\"id\",\"ok\",\"xs\"],\"additionalProperties\":false}";
    og_grammar *g = compile_ok(S);
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    int32_t n = og_tokenizer_n_vocab(g_tok);
    int completed = 0;
    for (int walk = 0; walk < 20; walk++) {
        og_gmatch *m;
        char err[256], text[8192];
        size_t len = 0;
        assert_int_equal(og_gmatch_create(g, &m, err, sizeof err), OG_OK);
        bool ended = false;
        for (int t = 0; t < 300 && !ended; t++) {
            const uint64_t *mask;
            assert_int_equal(og_gmatch_mask(m, g_vocab, &mask), OG_OK);
            /* prefer short tokens half of the time so that walks end */
            int32_t cand[4096];
            int nc = 0;
            for (int32_t id = 0; id < n && nc < 4096; id++) {
                if (!bit(mask, id)) continue;
                char tb[512];
                if ((rng & 1) && !og_tokenizer_is_eog(g_tok, id) && og_token_to_bytes(g_tok, id, false, tb, sizeof tb) > 1 &&
                    nc > 0)
                    continue;
                cand[nc++] = id;
            }
            assert_true(nc > 0); /* never a dead end */
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            int32_t id = cand[rng % (uint64_t)nc];
            if (og_tokenizer_is_eog(g_tok, id)) {
                assert_true(og_gmatch_accepting(m));
                ended = true;
            } else {
                len += (size_t)og_token_to_bytes(g_tok, id, false, text + len, sizeof text - len - 1);
                assert_true(len < sizeof text - 64);
            }
            assert_int_equal(og_gmatch_accept(m, g_vocab, id), OG_OK);
        }
        og_gmatch_free(m);
        if (!ended) continue;
        text[len] = 0;
        json_error_t je;
        json_t *doc = json_loads(text, 0, &je);
        if (!doc) fail_msg("walk %d produced invalid JSON: %s (%s)", walk, text, je.text);
        assert_true(json_is_integer(json_object_get(doc, "id")));
        assert_true(json_is_boolean(json_object_get(doc, "ok")));
        assert_true(json_is_array(json_object_get(doc, "xs")));
        assert_true(json_array_size(json_object_get(doc, "xs")) <= 3);
        assert_int_equal(json_object_size(doc), 3);
        json_decref(doc);
        completed++;
    }
    assert_true(completed >= 5);
    og_grammar_unref(g);
}

/* A long generation compacts the matcher's tables (past 256 cached masks):
 * afterwards its masks still equal those of a fresh matcher fed the same text. */
static void test_compaction(void **state) {
    (void)state;
    og_grammar *g = compile_ok("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"maxItems\":4000}");
    og_gmatch *m;
    char err[256], text[16384];
    size_t len = 0;
    assert_int_equal(og_gmatch_create(g, &m, err, sizeof err), OG_OK);
    int32_t n = og_tokenizer_n_vocab(g_tok);
    uint64_t rng = 12345;
    for (int t = 0; t < 700; t++) {
        const uint64_t *mask;
        assert_int_equal(og_gmatch_mask(m, g_vocab, &mask), OG_OK);
        int32_t cand[512];
        int nc = 0;
        for (int32_t id = 0; id < n && nc < 512; id++) { /* never closing the array, so it runs on */
            char tb[512];
            int k = og_token_to_bytes(g_tok, id, false, tb, sizeof tb);
            if (bit(mask, id) && !og_tokenizer_is_eog(g_tok, id) && k > 0 && !memchr(tb, ']', (size_t)k)) cand[nc++] = id;
        }
        assert_true(nc > 0);
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        int32_t id = cand[rng % (uint64_t)nc];
        len += (size_t)og_token_to_bytes(g_tok, id, false, text + len, sizeof text - len - 1);
        assert_true(len < sizeof text - 64);
        assert_int_equal(og_gmatch_accept(m, g_vocab, id), OG_OK);
    }
    og_gmatch *f;
    assert_int_equal(og_gmatch_create(g, &f, err, sizeof err), OG_OK);
    assert_true(og_gmatch_feed(f, text, len));
    const uint64_t *a, *b;
    assert_int_equal(og_gmatch_mask(m, g_vocab, &a), OG_OK);
    assert_int_equal(og_gmatch_mask(f, g_vocab, &b), OG_OK);
    assert_memory_equal(a, b, (size_t)(n + 63) / 64 * sizeof *a);
    assert_int_equal(og_gmatch_accepting(m), og_gmatch_accepting(f));
    og_gmatch_free(f);
    og_gmatch_free(m);
    og_grammar_unref(g);
}

/* accept() refuses a token the mask refuses, and EOG before the end */
static void test_accept_refuses(void **state) {
    (void)state;
    og_grammar *g = compile_ok("{\"type\":\"boolean\"}");
    og_gmatch *m;
    char err[256];
    assert_int_equal(og_gmatch_create(g, &m, err, sizeof err), OG_OK);
    int32_t eos = og_tokenizer_eos(g_tok);
    assert_true(eos >= 0);
    assert_int_equal(og_gmatch_accept(m, g_vocab, eos), OG_ERR_INVALID_ARG);
    int32_t t = og_tokenizer_find(g_tok, "true", 4);
    int32_t x = og_tokenizer_find(g_tok, "x", 1);
    assert_true(t >= 0 && x >= 0);
    assert_int_equal(og_gmatch_accept(m, g_vocab, x), OG_ERR_INVALID_ARG);
    assert_int_equal(og_gmatch_accept(m, g_vocab, t), OG_OK);
    assert_true(og_gmatch_finished(m));
    float *logits = malloc((size_t)og_tokenizer_n_vocab(g_tok) * sizeof *logits);
    for (int32_t i = 0; i < og_tokenizer_n_vocab(g_tok); i++) logits[i] = 1.0f;
    assert_int_equal(og_gmatch_apply(m, g_vocab, logits, og_tokenizer_n_vocab(g_tok)), OG_OK);
    int finite = 0;
    for (int32_t i = 0; i < og_tokenizer_n_vocab(g_tok); i++)
        if (logits[i] == 1.0f) {
            finite++;
            assert_true(og_tokenizer_is_eog(g_tok, i));
        }
    assert_true(finite >= 1);
    assert_int_equal(og_gmatch_accept(m, g_vocab, eos), OG_OK);
    free(logits);
    og_gmatch_free(m);
    og_grammar_unref(g);
}

static int setup(void **state) {
    (void)state;
    char err[512];
    if (og_gguf_open(g_path, OG_GGUF_HEADER_ONLY, &g_gguf, err, sizeof err)) fail_msg("%s", err);
    if (og_tokenizer_load(g_gguf, &g_tok, err, sizeof err)) fail_msg("%s", err);
    if (og_vocab_create(g_tok, &g_vocab, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(og_vocab_n(g_vocab), og_tokenizer_n_vocab(g_tok));
    return 0;
}

static int teardown(void **state) {
    (void)state;
    og_vocab_free(g_vocab);
    og_tokenizer_free(g_tok);
    og_gguf_close(g_gguf);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_grammar MODEL.gguf (a make-model file with the real tokenizer)\n");
        return 2;
    }
    g_path = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_schema_errors),   cmocka_unit_test(test_documents),
        cmocka_unit_test(test_feed_states),     cmocka_unit_test(test_big_enum),
        cmocka_unit_test(test_mask_brute_force), cmocka_unit_test(test_random_walk),
        cmocka_unit_test(test_accept_refuses),  cmocka_unit_test(test_compaction),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
