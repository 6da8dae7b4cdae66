/* The output parser (og_outparse.h) on hand-written model outputs in every
 * format (V3, R1, V3.1, V4 DSML, V4.1 DSML), on the real DeepSeek-V3 vocabulary
 * (argv[1]: a make-model file). The expected content, reasoning and calls are
 * written by hand from the formats (tokenizer.md §7, deepseek4.md §5). Every
 * output is fed three ways that must agree: all ids at once, one id per call,
 * and with every ordinary token replaced by one token per byte (so every
 * byte-matched marker and every UTF-8 character is split across tokens). In
 * V3's vocabulary the tool markers are single CONTROL tokens (recognized by
 * id), while <think> and the DSML tags are spelled by ordinary tokens. */
#include "og_outparse.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "markers_fixture.h"
#include <jansson.h>


static const char *g_path;
static og_gguf *g_gguf;
static og_tokenizer *g_tok;

/* What the events said, checked for order as they come. */
typedef struct rec {
    char content[4096], reasoning[4096];
    char names[8][64], ids[8][40], args[8][1024], end_args[8][1024];
    int n_begin, n_end, open; /* open: index of the call between BEGIN and END, -1 none */
} rec;

static void cat(char *dst, size_t cap, const char *s, size_t n) {
    size_t l = strlen(dst);
    assert_true(l + n < cap);
    memcpy(dst + l, s, n);
    dst[l + n] = 0;
}

static void on_ev(void *ud, const og_out_ev *ev) {
    rec *r = ud;
    switch (ev->kind) {
    case OG_OUT_CONTENT:
    case OG_OUT_REASONING:
        assert_int_equal(r->open, -1);
        assert_true(ev->len > 0);
        cat(ev->kind == OG_OUT_CONTENT ? r->content : r->reasoning, sizeof r->content, ev->text, ev->len);
        break;
    case OG_OUT_TOOL_BEGIN:
        assert_int_equal(r->open, -1);
        assert_int_equal(ev->tool_index, r->n_begin);
        assert_true(r->n_begin < 8);
        snprintf(r->names[r->n_begin], sizeof r->names[0], "%s", ev->name);
        snprintf(r->ids[r->n_begin], sizeof r->ids[0], "%s", ev->id);
        r->open = r->n_begin++;
        break;
    case OG_OUT_TOOL_ARGS:
        assert_int_equal(ev->tool_index, r->open);
        cat(r->args[r->open], sizeof r->args[0], ev->text, ev->len);
        break;
    case OG_OUT_TOOL_END:
        assert_int_equal(ev->tool_index, r->open);
        assert_string_equal(ev->name, r->names[r->open]);
        assert_string_equal(ev->id, r->ids[r->open]);
        snprintf(r->end_args[r->open], sizeof r->end_args[0], "%s", ev->arguments);
        r->open = -1;
        r->n_end++;
        break;
    default:
        fail_msg("unknown event kind %d", (int)ev->kind);
    }
}

/* The ids of text with control tokens parsed (the model's output); with
 * bytewise, every non-control token becomes one token per byte. */
static void ids_of(const char *text, bool bytewise, og_ids *out) {
    og_ids t = {0};
    assert_int_equal(og_tokenize(g_tok, text, strlen(text), false, true, &t), OG_OK);
    for (size_t i = 0; i < t.n; i++) {
        if (!bytewise || og_tokenizer_type(g_tok, t.v[i]) == OG_TOK_CONTROL) {
            if (out->n == out->cap) {
                out->cap = out->cap ? 2 * out->cap : 64;
                out->v = realloc(out->v, out->cap * sizeof *out->v);
            }
            out->v[out->n++] = t.v[i];
            continue;
        }
        char b[256];
        int n = og_token_to_bytes(g_tok, t.v[i], false, b, sizeof b);
        assert_true(n > 0 && n <= (int)sizeof b);
        for (int k = 0; k < n; k++) {
            size_t before = out->n;
            assert_int_equal(og_tokenize(g_tok, b + k, 1, false, false, out), OG_OK);
            assert_int_equal(out->n, before + 1); /* one byte, one token */
        }
    }
    og_ids_free(&t);
}

typedef struct expect {
    const char *content, *reasoning;
    int n_calls;
    const char *name[3], *args[3];
    bool malformed;
} expect;

typedef struct pcase {
    const char *what;
    og_chat_kind kind;
    bool in_reasoning, parse_reasoning, parse_tools;
    const char *output; /* control tokens written as their text */
    expect want;
} pcase;

static void run_one(const pcase *c, int mode) {
    og_outparse_opts o = {.kind = c->kind, .in_reasoning = c->in_reasoning, .parse_reasoning = c->parse_reasoning,
                          .parse_tools = c->parse_tools, .id_seed = 42};
    og_outparse *p = NULL;
    assert_int_equal(og_outparse_new(g_tok, &o, &p), OG_OK);
    og_ids ids = {0};
    ids_of(c->output, mode == 2, &ids);
    rec r = {.open = -1};
    if (mode == 0) {
        assert_int_equal(og_outparse_feed(p, ids.v, (int)ids.n, on_ev, &r), OG_OK);
    } else {
        for (size_t i = 0; i < ids.n; i++) assert_int_equal(og_outparse_feed(p, ids.v + i, 1, on_ev, &r), OG_OK);
    }
    assert_int_equal(og_outparse_finish(p, on_ev, &r), OG_OK);
    const expect *w = &c->want;
    if (strcmp(r.content, w->content ? w->content : "") || strcmp(r.reasoning, w->reasoning ? w->reasoning : ""))
        fail_msg("%s (mode %d): content '%s' reasoning '%s', want '%s' / '%s'", c->what, mode, r.content, r.reasoning,
                 w->content ? w->content : "", w->reasoning ? w->reasoning : "");
    if (r.n_end != w->n_calls || r.n_begin != w->n_calls)
        fail_msg("%s (mode %d): %d calls begun, %d ended, want %d", c->what, mode, r.n_begin, r.n_end, w->n_calls);
    assert_int_equal(og_outparse_n_calls(p), w->n_calls);
    for (int k = 0; k < w->n_calls; k++) {
        if (strcmp(r.names[k], w->name[k]) || strcmp(r.args[k], w->args[k]))
            fail_msg("%s (mode %d): call %d is %s(%s), want %s(%s)", c->what, mode, k, r.names[k], r.args[k],
                     w->name[k], w->args[k]);
        assert_string_equal(r.end_args[k], w->args[k]);
        /* call_ + 24 alphanumerics, distinct per call */
        assert_int_equal(strlen(r.ids[k]), 29);
        assert_memory_equal(r.ids[k], "call_", 5);
        for (int j = 5; j < 29; j++) assert_true(strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789", r.ids[k][j]));
        for (int j = 0; j < k; j++) assert_string_not_equal(r.ids[j], r.ids[k]);
    }
    if (og_outparse_malformed(p) != w->malformed)
        fail_msg("%s (mode %d): malformed %d, want %d", c->what, mode, og_outparse_malformed(p), w->malformed);
    og_ids_free(&ids);
    og_outparse_free(p);
}

static const pcase cases[] = {
    /* ---- DeepSeek V3: type<sep>name + ```json fence ---- */
    {"v3 two calls after text", OG_CHAT_DEEPSEEK3, false, false, true,
     "Let me check." CB KB "function" SEP "get_weather\n```json\n{\"city\": \"Paris\"}\n```" KE "\n" KB "function" SEP
     "get_time\n```json\n{}\n```" KE CE,
     {"Let me check.", NULL, 2, {"get_weather", "get_time"}, {"{\"city\": \"Paris\"}", "{}"}, false}},
    {"v3 plain text, unicode", OG_CHAT_DEEPSEEK3, false, false, true, "na\xc3\xafve caf\xc3\xa9 \xf0\x9f\x9a\x80 <b>x</b> <",
     {"na\xc3\xafve caf\xc3\xa9 \xf0\x9f\x9a\x80 <b>x</b> <", NULL, 0, {0}, {0}, false}},
    {"v3 call without calls_end before the end", OG_CHAT_DEEPSEEK3, false, false, true,
     CB KB "function" SEP "f\n```json\n{\"a\":[1,2,{\"b\":null}]}\n```" KE,
     {"", NULL, 1, {"f"}, {"{\"a\":[1,2,{\"b\":null}]}"}, false}},
    {"v3 malformed: arguments not JSON", OG_CHAT_DEEPSEEK3, false, false, true,
     "Hi" CB KB "function" SEP "get_weather\n```json\n{\"city\": Paris}\n```" KE CE " after",
     {"Hifunctionget_weather\n```json\n{\"city\": Paris}\n``` after", NULL, 0, {0}, {0}, true}},
    {"v3 malformed: arguments an array", OG_CHAT_DEEPSEEK3, false, false, true,
     CB KB "function" SEP "f\n```json\n[1]\n```" KE CE, {"functionf\n```json\n[1]\n```", NULL, 0, {0}, {0}, true}},
    {"v3 malformed: type is not function", OG_CHAT_DEEPSEEK3, false, false, true,
     CB KB "fn" SEP "f\n```json\n{}\n```" KE CE, {"fnf\n```json\n{}\n```", NULL, 0, {0}, {0}, true}},
    {"v3 malformed: the output ends inside the call", OG_CHAT_DEEPSEEK3, false, false, true,
     "ok" CB KB "function" SEP "f\n```json\n{\"a\":", {"okfunctionf\n```json\n{\"a\":", NULL, 0, {0}, {0}, true}},
    {"v3 malformed: empty block", OG_CHAT_DEEPSEEK3, false, false, true, "x" CB CE "y", {"xy", NULL, 0, {0}, {0}, true}},
    {"v3 malformed: call_end without sep", OG_CHAT_DEEPSEEK3, false, false, true, CB KB "function f" KE CE "z",
     {"function fz", NULL, 0, {0}, {0}, true}},
    {"v3 one good call, then a malformed one", OG_CHAT_DEEPSEEK3, false, false, true,
     CB KB "function" SEP "a\n```json\n{}\n```" KE "\n" KB "function" SEP "b\n```json\n{\n```" KE CE,
     {"\nfunctionb\n```json\n{\n```", NULL, 1, {"a"}, {"{}"}, true}},
    {"v3 without tools: markers are dropped as the detokenizer does", OG_CHAT_DEEPSEEK3, false, false, false,
     CB KB "function" SEP "f\n```json\n{}\n```" KE CE, {"functionf\n```json\n{}\n```", NULL, 0, {0}, {0}, false}},
    {"v3 without reasoning parsing: think text is content", OG_CHAT_DEEPSEEK3, false, false, true,
     "<think>a</think>b", {"<think>a</think>b", NULL, 0, {0}, {0}, false}},
    /* ---- R1: the prompt opened <think> ---- */
    {"r1 reasoning then answer", OG_CHAT_DEEPSEEK_R1, true, true, false,
     "Okay, the user wants 2+2.\nIt is 4.\n</think>\n\nThe answer is **4**.",
     {"\n\nThe answer is **4**.", "Okay, the user wants 2+2.\nIt is 4.\n", 0, {0}, {0}, false}},
    {"r1 reasoning then a call", OG_CHAT_DEEPSEEK_R1, true, true, true,
     "need weather</think>" CB KB "function" SEP "w\n```json\n{\"q\":\"\xe6\x9d\xb1\xe4\xba\xac\"}\n```" KE CE,
     {"", "need weather", 1, {"w"}, {"{\"q\":\"\xe6\x9d\xb1\xe4\xba\xac\"}"}, false}},
    {"r1 output that repeats <think> and never closes", OG_CHAT_DEEPSEEK_R1, true, true, false, "<think>\nhmm <thin",
     {"", "<think>\nhmm <thin", 0, {0}, {0}, false}},
    {"r1 reasoning text passed through when not parsed", OG_CHAT_DEEPSEEK_R1, true, false, false, "a</think>b",
     {"a</think>b", NULL, 0, {0}, {0}, false}},
    /* ---- V3.1: name<sep>{json} ---- */
    {"v3.1 thinking then call", OG_CHAT_DEEPSEEK3_1, true, true, true,
     "Let me think</think>Calling." CB KB "get_weather" SEP "{\"city\":\"Paris\",\"unit\":\"c\"}" KE KB "noop" SEP
     "{}" KE CE,
     {"Calling.", "Let me think", 2, {"get_weather", "noop"}, {"{\"city\":\"Paris\",\"unit\":\"c\"}", "{}"}, false}},
    {"v3.1 non-thinking with a <think> in the answer opened later", OG_CHAT_DEEPSEEK3_1, false, true, false,
     "a<think>b</think>c", {"ac", "b", 0, {0}, {0}, false}},
    {"v3.1 malformed name with a space", OG_CHAT_DEEPSEEK3_1, false, false, true, CB KB "get weather" SEP "{}" KE CE,
     {"get weather{}", NULL, 0, {0}, {0}, true}},
    /* ---- V4 DSML ---- */
    {"v4 one call, string and JSON parameters", OG_CHAT_DEEPSEEK4, false, true, true,
     "I'll look.\n\n" D "tool_calls>\n" D "invoke name=\"get_weather\">\n" D
     "parameter name=\"city\" string=\"true\">Paris \"centre\"\n\\ok</" BAR "DSML" BAR "parameter>\n" D
     "parameter name=\"days\" string=\"false\">3</" BAR "DSML" BAR "parameter>\n" D
     "parameter name=\"opts\" string=\"false\"> {\"a\": [true, null]} " DE "parameter>\n" DE "invoke>\n" DE "tool_calls>",
     {"I'll look.\n\n", NULL, 1, {"get_weather"},
      {"{\"city\":\"Paris \\\"centre\\\"\\n\\\\ok\",\"days\":3,\"opts\":{\"a\": [true, null]}}"}, false}},
    {"v4 thinking, two invokes, a parameterless one", OG_CHAT_DEEPSEEK4, true, true, true,
     "plan: a < b and </thin> too</think>" D "tool_calls>\n" D "invoke name=\"a\">\n" DE "invoke>\n" D
     "invoke name=\"b\">\n" D "parameter name=\"x\" string=\"true\">" DE "parameter>\n" DE "invoke>\n" DE
     "tool_calls>\ndone",
     {"\ndone", "plan: a < b and </thin> too", 2, {"a", "b"}, {"{}", "{\"x\":\"\"}"}, false}},
    {"v4 a calls block also ends the reasoning", OG_CHAT_DEEPSEEK4, true, true, true,
     "r" D "tool_calls>" D "invoke name=\"f\">" DE "invoke>" DE "tool_calls>", {"", "r", 1, {"f"}, {"{}"}, false}},
    {"v4 a think marker inside a string value is text", OG_CHAT_DEEPSEEK4, false, true, true,
     D "tool_calls>" D "invoke name=\"f\">" D "parameter name=\"s\" string=\"true\"><think>x</think>" DE
     "parameter>" DE "invoke>" DE "tool_calls>",
     {"", NULL, 1, {"f"}, {"{\"s\":\"<think>x</think>\"}"}, false}},
    {"v4 malformed: string attribute not true/false", OG_CHAT_DEEPSEEK4, false, true, true,
     "a" D "tool_calls>" D "invoke name=\"f\">" D "parameter name=\"s\" string=\"maybe\">x" DE "parameter>" DE
     "invoke>" DE "tool_calls>b",
     {"a" D "tool_calls>" D "invoke name=\"f\">" D "parameter name=\"s\" string=\"maybe\">x" DE "parameter>" DE
      "invoke>" DE "tool_calls>b",
      NULL, 0, {0}, {0}, true}},
    {"v4 malformed: a JSON parameter that is not JSON", OG_CHAT_DEEPSEEK4, false, true, true,
     D "tool_calls>" D "invoke name=\"f\">" D "parameter name=\"n\" string=\"false\">three" DE "parameter>" DE "invoke>"
     DE "tool_calls>",
     {D "tool_calls>" D "invoke name=\"f\">" D "parameter name=\"n\" string=\"false\">three" DE "parameter>" DE
      "invoke>" DE "tool_calls>",
      NULL, 0, {0}, {0}, true}},
    {"v4 malformed: duplicate parameter", OG_CHAT_DEEPSEEK4, false, true, true,
     D "tool_calls>" D "invoke name=\"f\">" D "parameter name=\"n\" string=\"false\">1" DE "parameter>" D
     "parameter name=\"n\" string=\"false\">2" DE "parameter>" DE "invoke>" DE "tool_calls>",
     {D "tool_calls>" D "invoke name=\"f\">" D "parameter name=\"n\" string=\"false\">1" DE "parameter>" D
      "parameter name=\"n\" string=\"false\">2" DE "parameter>" DE "invoke>" DE "tool_calls>",
      NULL, 0, {0}, {0}, true}},
    {"v4 malformed: text between invokes, the output ends in the block", OG_CHAT_DEEPSEEK4, false, true, true,
     D "tool_calls>" D "invoke name=\"f\">" DE "invoke>x", {"x", NULL, 1, {"f"}, {"{}"}, true}},
    {"v4 malformed: extra attribute", OG_CHAT_DEEPSEEK4, false, true, true,
     D "tool_calls>" D "invoke name=\"f\" id=\"1\">" DE "invoke>" DE "tool_calls>",
     {D "tool_calls>" D "invoke name=\"f\" id=\"1\">" DE "invoke>" DE "tool_calls>", NULL, 0, {0}, {0}, true}},
    {"v4 near-markers are text", OG_CHAT_DEEPSEEK4, false, true, true, "x <" BAR "DSML" BAR " y " D "tool_call> z <thi",
     {"x <" BAR "DSML" BAR " y " D "tool_call> z <thi", NULL, 0, {0}, {0}, false}},
    {"v4 without tools: DSML is text", OG_CHAT_DEEPSEEK4, false, true, false,
     D "tool_calls>" D "invoke name=\"f\">" DE "invoke>" DE "tool_calls>",
     {D "tool_calls>" D "invoke name=\"f\">" DE "invoke>" DE "tool_calls>", NULL, 0, {0}, {0}, false}},
    /* ---- V4.1 DSML: a space after the bar ---- */
    {"v4.1 call", OG_CHAT_DEEPSEEK4_1, true, true, true,
     "effort</think>ok\n" D " calls>\n" D " invoke name=\"search::lookup\">\n" D
     " parameter name=\"q\" string=\"true\">caf\xc3\xa9</" BAR "DSML" BAR " parameter>\n" D
     " parameter name=\"k\" string=\"false\">[1, 2]" DE " parameter>\n" DE " invoke>\n" DE " calls>",
     {"ok\n", "effort", 1, {"search::lookup"}, {"{\"q\":\"caf\xc3\xa9\",\"k\":[1, 2]}"}, false}},
    {"v4.1 V4's tags are text there", OG_CHAT_DEEPSEEK4_1, false, true, true,
     D "tool_calls>" D "invoke name=\"f\">" DE "invoke>" DE "tool_calls>",
     {D "tool_calls>" D "invoke name=\"f\">" DE "invoke>" DE "tool_calls>", NULL, 0, {0}, {0}, false}},
};

static void test_cases(void **state) {
    (void)state;
    int ran = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        for (int mode = 0; mode < 3; mode++) run_one(&cases[i], mode);
        ran++;
    }
    assert_true(ran >= 30);
}

/* In V3's vocabulary the tool markers are control tokens; the parser matches
 * them by id, and the same text spelled by ordinary tokens stays text. */
/* An output cut (max_tokens, a stop string) inside a call: og_outparse_finish
 * reports the partial call as text, og_outparse_finish_cut drops it (and the
 * text between calls in the block), keeping the complete calls. */
static void test_cut_call(void **state) {
    (void)state;
    static const struct {
        og_chat_kind kind;
        const char *output, *content; /* content reported by og_outparse_finish_cut */
        int n_calls;
        bool differs; /* og_outparse_finish reports text there (a partial call) */
    } cut_cases[] = {
        {OG_CHAT_DEEPSEEK3_1, "hi" CB KB "f" SEP "{\"a\": 1}" KE "\n" KB "g" SEP "{\"a\": -20", "hi", 1, true},
        {OG_CHAT_DEEPSEEK3_1, "hi" CB KB "f" SEP "{\"a\"", "hi", 0, true},
        {OG_CHAT_DEEPSEEK3_1, "hi" CB KB "f" SEP "{}" KE "\n", "hi", 1, false}, /* a block left open after a call: not malformed */
        {OG_CHAT_DEEPSEEK3, CB KB "function" SEP "f\n```json\n{\"a\": 1}\n```" KE "\n" KB "function", "", 1, true},
    };
    for (size_t c = 0; c < sizeof cut_cases / sizeof cut_cases[0]; c++)
        for (int cut = 0; cut < 2; cut++) {
            og_outparse_opts o = {.kind = cut_cases[c].kind, .parse_tools = true, .id_seed = 7};
            og_outparse *p;
            assert_int_equal(og_outparse_new(g_tok, &o, &p), OG_OK);
            og_ids ids = {0};
            ids_of(cut_cases[c].output, false, &ids);
            rec r = {.open = -1};
            assert_int_equal(og_outparse_feed(p, ids.v, (int)ids.n, on_ev, &r), OG_OK);
            assert_int_equal((cut ? og_outparse_finish_cut : og_outparse_finish)(p, on_ev, &r), OG_OK);
            assert_int_equal(r.n_end, cut_cases[c].n_calls);
            assert_int_equal(r.n_begin, cut_cases[c].n_calls);
            if (cut) {
                assert_string_equal(r.content, cut_cases[c].content);
                if (cut_cases[c].differs) assert_true(og_outparse_cut_call(p));
            } else if (!cut_cases[c].differs) {
                assert_string_equal(r.content, cut_cases[c].content);
            } else {
                assert_true(strlen(r.content) > strlen(cut_cases[c].content)); /* the partial call as text */
                assert_false(og_outparse_cut_call(p));
            }
            og_ids_free(&ids);
            og_outparse_free(p);
        }
}

/* Feeds output with og_outparse_take as og_seq_take reports it, in two takes
 * (so a token is held back across them; the second ends it): the engine's
 * text is the ids' bytes (control tokens empty), cut to keep bytes of the
 * last token (-1: all of them). */
static og_outparse *end_output(const og_outparse_opts *o, const char *output, int keep, og_finish why, int stop_index,
                               rec *r) {
    og_outparse *p;
    assert_int_equal(og_outparse_new(g_tok, o, &p), OG_OK);
    og_ids ids = {0};
    ids_of(output, false, &ids);
    assert_true(ids.n >= 2 && ids.n <= 64);
    og_tok_out toks[64];
    char text[1024];
    size_t len = 0;
    for (size_t i = 0; i < ids.n; i++) {
        toks[i] = (og_tok_out){.id = ids.v[i], .text_start = (uint32_t)len};
        int bn = og_token_to_bytes(g_tok, ids.v[i], false, text + len, sizeof text - len);
        assert_true(bn >= 0 && len + (size_t)bn < sizeof text);
        len += (size_t)bn;
    }
    if (keep >= 0) {
        size_t last_start = toks[ids.n - 1].text_start;
        assert_true(last_start + (size_t)keep < len); /* the stop string starts inside the last token */
        len = last_start + (size_t)keep;
    }
    int half = (int)ids.n / 2;
    size_t split = toks[half].text_start;
    og_seq_out first = {.text = text, .len = split, .toks = toks, .n_toks = half};
    og_seq_out rest = {.text = text + split, .len = len - split, .text_offset = split, .toks = toks + half,
                       .n_toks = (int)ids.n - half, .finish = why, .stop_index = stop_index};
    assert_int_equal(og_outparse_take(p, &first, on_ev, r), OG_OK);
    assert_int_equal(og_outparse_take(p, &rest, on_ev, r), OG_OK);
    og_ids_free(&ids);
    return p;
}

/* og_outparse_take's end: a stop string inside the held-back last token keeps only
 * its bytes before the stop; max_tokens or a stop string inside a call drops
 * the partial call, the end-of-generation token reports it as text; every
 * token fed inside the think block counts as reasoning (the closing marker's
 * too). */
static void test_end(void **state) {
    (void)state;
    const og_outparse_opts tools = {.kind = OG_CHAT_DEEPSEEK3_1, .parse_tools = true, .id_seed = 7};
    const char *plain = "Hello there, seafaring sailors";
    for (int keep = 0; keep < 2; keep++) {
        rec r = {.open = -1};
        og_outparse *p = end_output(&tools, plain, keep, OG_FINISH_STOP, 0, &r);
        /* the text before the stop: the output less the last token's bytes from keep on */
        og_ids ids = {0};
        ids_of(plain, false, &ids);
        char last[64];
        int bn = og_token_to_bytes(g_tok, ids.v[ids.n - 1], false, last, sizeof last);
        assert_true(bn > 1 && bn < (int)sizeof last);
        char want[128];
        snprintf(want, sizeof want, "%.*s%.*s", (int)(strlen(plain) - (size_t)bn), plain, keep, last);
        assert_string_equal(r.content, want);
        assert_int_equal(og_outparse_reasoning_tokens(p), 0);
        og_ids_free(&ids);
        og_outparse_free(p);
    }
    const char *partial = "hi" CB KB "f" SEP "{\"a\": 1";
    static const struct {
        og_finish why;
        int stop_index;
        bool cut;
    } ends[] = {{OG_FINISH_LENGTH, -1, true}, {OG_FINISH_STOP, 1, true}, {OG_FINISH_STOP, -1, false}};
    for (size_t k = 0; k < sizeof ends / sizeof ends[0]; k++) {
        rec r = {.open = -1};
        og_outparse *p = end_output(&tools, partial, -1, ends[k].why, ends[k].stop_index, &r);
        assert_int_equal(r.n_begin, 0);
        assert_int_equal(og_outparse_cut_call(p), ends[k].cut);
        assert_int_equal(og_outparse_malformed(p), !ends[k].cut);
        if (ends[k].cut) assert_string_equal(r.content, "hi");
        else assert_string_equal(r.content, "hi" "f" "{\"a\": 1"); /* the call as the detokenizer shows it */
        og_outparse_free(p);
    }
    /* reasoning tokens: counted against the tokens' own split (ids_of of the reasoning part) */
    const og_outparse_opts think = {.kind = OG_CHAT_DEEPSEEK3_1, .in_reasoning = true, .parse_reasoning = true};
    og_ids rid = {0}, cid = {0};
    ids_of("let me think it over", false, &rid);
    ids_of("</think>", false, &cid);
    rec r = {.open = -1};
    og_outparse *p = end_output(&think, "let me think it over", -1, OG_FINISH_LENGTH, -1, &r);
    assert_int_equal(og_outparse_reasoning_tokens(p), (int)rid.n);
    assert_string_equal(r.reasoning, "let me think it over");
    og_outparse_free(p);
    r = (rec){.open = -1};
    p = end_output(&think, "let me think it over</think>The answer is yes", -1, OG_FINISH_STOP, -1, &r);
    assert_string_equal(r.reasoning, "let me think it over");
    assert_string_equal(r.content, "The answer is yes");
    og_ids all = {0};
    ids_of("let me think it over</think>", false, &all);
    assert_int_equal(all.n, rid.n + cid.n); /* the split at </think> is a token boundary */
    assert_int_equal(og_outparse_reasoning_tokens(p), (int)all.n);
    og_outparse_free(p);
    og_ids_free(&rid);
    og_ids_free(&cid);
    og_ids_free(&all);
    r = (rec){.open = -1};
    assert_int_equal(og_outparse_new(g_tok, &think, &p), OG_OK);
    og_seq_out none = {.text = "", .finish = OG_FINISH_STOP, .stop_index = -1};
    assert_int_equal(og_outparse_take(p, &none, on_ev, &r), OG_OK); /* nothing held back */
    assert_int_equal(og_outparse_reasoning_tokens(p), 0);
    og_seq_out bad = {.len = 3, .finish = OG_FINISH_STOP, .stop_index = -1};
    assert_int_equal(og_outparse_take(p, &bad, on_ev, &r), OG_ERR_INVALID_ARG);
    bad = (og_seq_out){.n_toks = 2};
    assert_int_equal(og_outparse_take(p, &bad, on_ev, &r), OG_ERR_INVALID_ARG);
    og_outparse_free(p);
    assert_int_equal(og_outparse_reasoning_tokens(NULL), 0);
}

static void test_typed_marker(void **state) {
    (void)state;
    int32_t cb = og_tokenizer_find(g_tok, CB, strlen(CB));
    assert_true(cb >= 0);
    assert_int_equal(og_tokenizer_type(g_tok, cb), OG_TOK_CONTROL);
    assert_int_equal(og_tokenizer_find(g_tok, "<think>", 7), -1); /* spelled by ordinary tokens */
    assert_int_equal(og_tokenizer_find(g_tok, D "tool_calls>", strlen(D "tool_calls>")), -1);
    og_outparse_opts o = {.kind = OG_CHAT_DEEPSEEK3_1, .parse_tools = true, .parse_reasoning = true};
    og_outparse *p;
    assert_int_equal(og_outparse_new(g_tok, &o, &p), OG_OK);
    const char *text = "a" CB KB "f" SEP "{}" KE CE;
    og_ids ids = {0};
    assert_int_equal(og_tokenize(g_tok, text, strlen(text), false, false, &ids), OG_OK); /* no control tokens */
    for (size_t i = 0; i < ids.n; i++) assert_int_not_equal(og_tokenizer_type(g_tok, ids.v[i]), OG_TOK_CONTROL);
    rec r = {.open = -1};
    assert_int_equal(og_outparse_feed(p, ids.v, (int)ids.n, on_ev, &r), OG_OK);
    assert_int_equal(og_outparse_finish(p, on_ev, &r), OG_OK);
    assert_string_equal(r.content, text);
    assert_int_equal(r.n_begin, 0);
    assert_false(og_outparse_malformed(p));
    og_ids_free(&ids);
    og_outparse_free(p);
}

/* Call ids come from the seed: the same seed gives the same ids, another seed others. */
static void test_ids_and_errors(void **state) {
    (void)state;
    char got[3][40];
    uint64_t seeds[3] = {7, 7, 8};
    for (int k = 0; k < 3; k++) {
        og_outparse_opts o = {.kind = OG_CHAT_DEEPSEEK3_1, .parse_tools = true, .id_seed = seeds[k]};
        og_outparse *p;
        assert_int_equal(og_outparse_new(g_tok, &o, &p), OG_OK);
        og_ids ids = {0};
        ids_of(CB KB "f" SEP "{}" KE CE, false, &ids);
        rec r = {.open = -1};
        assert_int_equal(og_outparse_feed(p, ids.v, (int)ids.n, on_ev, &r), OG_OK);
        assert_int_equal(og_outparse_finish(p, on_ev, &r), OG_OK);
        assert_int_equal(r.n_end, 1);
        snprintf(got[k], sizeof got[k], "%s", r.ids[0]);
        og_ids_free(&ids);
        og_outparse_free(p);
    }
    assert_string_equal(got[0], got[1]);
    assert_string_not_equal(got[0], got[2]);
    /* bad arguments */
    og_outparse *p = NULL;
    og_outparse_opts bad = {.kind = OG_CHAT_UNKNOWN};
    assert_int_equal(og_outparse_new(g_tok, &bad, &p), OG_ERR_INVALID_ARG);
    assert_null(p);
    assert_int_equal(og_outparse_new(NULL, &bad, &p), OG_ERR_INVALID_ARG);
    og_outparse_opts ok = {.kind = OG_CHAT_DEEPSEEK3};
    assert_int_equal(og_outparse_new(g_tok, &ok, &p), OG_OK);
    int32_t out_of_range[2] = {-5, 1 << 30};
    rec r = {.open = -1};
    assert_int_equal(og_outparse_feed(p, out_of_range, 2, on_ev, &r), OG_OK); /* ignored, never a crash */
    assert_int_equal(og_outparse_feed(p, NULL, 1, on_ev, &r), OG_ERR_INVALID_ARG);
    assert_int_equal(og_outparse_finish(p, on_ev, &r), OG_OK);
    assert_string_equal(r.content, "");
    og_outparse_free(p);
    og_outparse_free(NULL);
}

/* Random token soup never crashes, and every byte of text the detokenizer
 * would show is reported somewhere (content, reasoning or a call), but for a
 * character left unfinished at the end. */
static void test_random_outputs(void **state) {
    (void)state;
    static const char *pieces[] = {CB, CE, KB, KE, SEP, "function", "\n```json\n", "{\"a\":1}", "<think>", "</think>",
                                   D "tool_calls>", D "invoke name=\"f\">", D "parameter name=\"p\" string=\"true\">",
                                   DE "parameter>", DE "invoke>", DE "tool_calls>", D " calls>", "x", " ", "<", "\"",
                                   "\xe2\x82", "\xac", "}"};
    uint64_t rng = 1;
    og_chat_kind kinds[] = {OG_CHAT_DEEPSEEK3, OG_CHAT_DEEPSEEK_R1, OG_CHAT_DEEPSEEK3_1, OG_CHAT_DEEPSEEK4,
                            OG_CHAT_DEEPSEEK4_1};
    for (int it = 0; it < 400; it++) {
        char text[2048] = "";
        int np = 1 + (int)(og_splitmix64(&rng) % 40);
        for (int k = 0; k < np; k++) {
            const char *s = pieces[og_splitmix64(&rng) % (sizeof pieces / sizeof *pieces)];
            cat(text, sizeof text, s, strlen(s));
        }
        og_outparse_opts o = {.kind = kinds[it % 5], .in_reasoning = it & 1, .parse_reasoning = it & 2,
                              .parse_tools = it & 4, .id_seed = (uint64_t)it};
        og_outparse *p;
        assert_int_equal(og_outparse_new(g_tok, &o, &p), OG_OK);
        og_ids ids = {0};
        ids_of(text, it & 8, &ids);
        rec r = {.open = -1};
        for (size_t i = 0; i < ids.n; i++) assert_int_equal(og_outparse_feed(p, ids.v + i, 1, on_ev, &r), OG_OK);
        assert_int_equal(og_outparse_finish(p, on_ev, &r), OG_OK);
        assert_int_equal(r.open, -1);
        assert_int_equal(r.n_begin, r.n_end);
        assert_int_equal(og_outparse_n_calls(p), r.n_end);
        for (int k = 0; k < r.n_end; k++) {
            json_error_t je;
            json_t *j = json_loads(r.args[k], 0, &je);
            assert_true(json_is_object(j));
            json_decref(j);
        }
        if (!o.parse_tools && !o.parse_reasoning) { /* nothing recognized: exactly the detokenizer's text */
            og_detok d = {0};
            char want[4096];
            size_t wl = 0;
            want[0] = 0;
            for (size_t i = 0; i < ids.n; i++) assert_true(og_detok_push(g_tok, &d, ids.v[i], want, sizeof want, &wl) >= 0);
            /* not flushed: a character the output never finished is dropped at its end (as the engine's text) */
            char fixed[3 * sizeof want];
            fixed[og_utf8_repair(want, wl, fixed)] = 0; /* the server repairs invalid bytes (og_api_jstr) */
            assert_string_equal(r.content, fixed);
        }
        og_ids_free(&ids);
        og_outparse_free(p);
    }
}


/* The call grammar of every encoding (og_outparse_call_layout +
 * og_grammar_tool_calls) writes what the parser reads back as calls: random
 * walks through the grammar's masks on the real vocabulary, fed to the parser,
 * give well-formed calls of the allowed tools whose arguments hold the
 * schema's required members. */
static void test_layout_roundtrip(void **state) {
    (void)state;
    og_vocab *v;
    assert_int_equal(og_vocab_create(g_tok, &v, NULL, 0), OG_OK);
    json_t *p0 = json_loads("{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":4},"
                            "\"n\":{\"enum\":[1,2]}},\"required\":[\"city\"],\"additionalProperties\":false}", 0, NULL);
    json_t *p1 = json_loads("{\"type\":\"object\",\"properties\":{\"tz\":{\"enum\":[\"UTC\",\"CET\"]}},\"required\":[\"tz\"],"
                            "\"additionalProperties\":false}", 0, NULL);
    const char *names[2] = {"get_weather", "ns::get_time"};
    const json_t *params[2] = {p0, p1};
    og_chat_kind kinds[] = {OG_CHAT_DEEPSEEK3, OG_CHAT_DEEPSEEK_R1, OG_CHAT_DEEPSEEK3_1, OG_CHAT_DEEPSEEK4,
                            OG_CHAT_DEEPSEEK4_1};
    uint64_t rng = 99;
    int walks = 0;
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++)
        for (int close = 0; close < 2; close++) {
            og_tool_layout lay;
            assert_int_equal(og_outparse_call_layout(g_tok, kinds[k], close, &lay), OG_OK);
            og_grammar *g;
            char err[256];
            if (og_grammar_tool_calls(&lay, names, params, 2, k % 2 ? 1 : 3, &g, err, sizeof err)) fail_msg("%s", err);
            for (int w = 0; w < 3; w++, walks++) {
                og_gmatch *m;
                assert_int_equal(og_gmatch_create(g, &m, NULL, 0), OG_OK);
                og_ids out = {0};
                bool ended = false;
                for (int step = 0; step < 400 && !ended; step++) {
                    const uint64_t *bits;
                    assert_int_equal(og_gmatch_mask(m, v, &bits), OG_OK);
                    int32_t n = og_vocab_n(v), pick = -1, seen = 0;
                    if (og_gmatch_accepting(m)) { /* end as soon as allowed */
                        pick = og_tokenizer_eos(g_tok);
                    } else {
                        for (int32_t id = 0; id < n; id++) /* reservoir: a uniform allowed token */
                            if ((bits[id >> 6] >> (id & 63)) & 1 && og_splitmix64(&rng) % (uint64_t)++seen == 0) pick = id;
                    }
                    assert_true(pick >= 0);
                    assert_int_equal(og_gmatch_accept(m, v, pick), OG_OK);
                    if (pick == og_tokenizer_eos(g_tok)) ended = true;
                    else {
                        if (out.n == out.cap) {
                            out.cap = out.cap ? 2 * out.cap : 64;
                            out.v = realloc(out.v, out.cap * sizeof *out.v);
                        }
                        out.v[out.n++] = pick;
                    }
                }
                assert_true(ended);
                og_outparse_opts o = {.kind = kinds[k], .in_reasoning = close, .parse_reasoning = close,
                                      .parse_tools = true, .id_seed = 1};
                og_outparse *p;
                assert_int_equal(og_outparse_new(g_tok, &o, &p), OG_OK);
                rec r = {.open = -1};
                assert_int_equal(og_outparse_feed(p, out.v, (int)out.n, on_ev, &r), OG_OK);
                assert_int_equal(og_outparse_finish(p, on_ev, &r), OG_OK);
                if (r.n_end < 1 || og_outparse_malformed(p) || r.content[0] || r.reasoning[0])
                    fail_msg("kind %d close %d: %d calls, malformed %d, content '%s', reasoning '%s'", (int)kinds[k],
                             close, r.n_end, og_outparse_malformed(p), r.content, r.reasoning);
                assert_true(r.n_end <= (k % 2 ? 1 : 3));
                for (int c = 0; c < r.n_end; c++) {
                    json_t *a = json_loads(r.args[c], 0, NULL);
                    bool weather = !strcmp(r.names[c], names[0]);
                    assert_true(weather || !strcmp(r.names[c], names[1]));
                    json_t *req = json_object_get(a, weather ? "city" : "tz");
                    assert_true(json_is_string(req));
                    if (weather) assert_true(json_string_length(req) <= 12); /* 4 code points */
                    else assert_true(!strcmp(json_string_value(req), "UTC") || !strcmp(json_string_value(req), "CET"));
                    json_decref(a);
                }
                og_outparse_free(p);
                /* cut by max_tokens after any of its tokens: no markup as content or reasoning, whatever
                 * the cut split (a DSML tag spelled by several tokens included), and no call that is not
                 * one of the whole output's */
                for (size_t cut = 0; cut < out.n; cut++) {
                    assert_int_equal(og_outparse_new(g_tok, &o, &p), OG_OK);
                    rec c = {.open = -1};
                    assert_int_equal(og_outparse_feed(p, out.v, (int)cut, on_ev, &c), OG_OK);
                    assert_int_equal(og_outparse_finish_cut(p, on_ev, &c), OG_OK);
                    if (c.content[0] || c.reasoning[0] || c.n_end > r.n_end)
                        fail_msg("kind %d close %d cut after %zu of %zu tokens: content '%s', reasoning '%s', %d calls",
                                 (int)kinds[k], close, cut, out.n, c.content, c.reasoning, c.n_end);
                    for (int i = 0; i < c.n_end; i++) assert_string_equal(c.end_args[i], r.end_args[i]);
                    og_outparse_free(p);
                }
                og_gmatch_free(m);
                og_ids_free(&out);
            }
            og_grammar_unref(g);
        }
    assert_int_equal(walks, 30);
    json_decref(p0);
    json_decref(p1);
    og_vocab_free(v);
}

static int setup(void **state) {
    (void)state;
    char err[512];
    if (og_gguf_open(g_path, 0, &g_gguf, err, sizeof err)) fail_msg("%s", err);
    if (og_tokenizer_load(g_gguf, &g_tok, err, sizeof err)) fail_msg("%s", err);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    og_tokenizer_free(g_tok);
    og_gguf_close(g_gguf);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_outparse MODEL.gguf\n");
        return 2;
    }
    g_path = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cases),
        cmocka_unit_test(test_typed_marker),
        cmocka_unit_test(test_cut_call),
        cmocka_unit_test(test_end),
        cmocka_unit_test(test_ids_and_errors),
        cmocka_unit_test(test_random_outputs),
        cmocka_unit_test(test_layout_roundtrip),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
