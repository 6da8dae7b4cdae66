/* Built-in chat formatters. DeepSeek-V3: a transcription of the official Jinja
 * template shipped in DeepSeek-V3's tokenizer_config.json (tokenizer.md §7),
 * keeping its quirks: system prompts are gathered first and joined by a blank
 * line; "first tool call" and "first tool output" are tracked over the whole
 * conversation, not per turn. */
#include "og_tokenizer.h"

#include <stdlib.h>
#include <string.h>

#define U "<\xef\xbd\x9cUser\xef\xbd\x9c>"
#define A "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"
#define EOS "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define CALLS_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define CALLS_END "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>"
#define CALL_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define CALL_END "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>"
#define OUTS_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "outputs\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define OUTS_END "<\xef\xbd\x9ctool\xe2\x96\x81" "outputs\xe2\x96\x81" "end\xef\xbd\x9c>"
#define OUT_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "output\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define OUT_END "<\xef\xbd\x9ctool\xe2\x96\x81" "output\xe2\x96\x81" "end\xef\xbd\x9c>"
#define TOOL_SEP "<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>"

og_chat_kind og_chat_detect(const char *t, size_t n) {
    if (t && memmem(t, n, A, strlen(A)) && memmem(t, n, U, strlen(U)) && memmem(t, n, EOS, strlen(EOS)))
        return OG_CHAT_DEEPSEEK3;
    return OG_CHAT_UNKNOWN;
}

/* The rendered text, and where the template's markers lie in it: every other
 * byte is text (a message's, or the template's own plain text). */
typedef struct sbuf {
    char *p;
    size_t n, cap;
    size_t *mark;                 /* [n_mark][2]: start, length */
    size_t n_mark, cap_mark;
    bool oom;
} sbuf;

static void put(sbuf *b, const char *s) {
    size_t l = strlen(s);
    if (b->oom) return;
    if (b->n + l + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + l + 1) cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, l + 1);
    b->n += l;
}

/* A template marker (one control token's text). */
static void mark(sbuf *b, const char *s) {
    if (b->oom) return;
    if (b->n_mark == b->cap_mark) {
        size_t cap = b->cap_mark ? 2 * b->cap_mark : 32;
        size_t *nm = realloc(b->mark, cap * 2 * sizeof *nm);
        if (!nm) {
            b->oom = true;
            return;
        }
        b->mark = nm;
        b->cap_mark = cap;
    }
    b->mark[2 * b->n_mark] = b->n;
    b->mark[2 * b->n_mark + 1] = strlen(s);
    b->n_mark++;
    put(b, s);
}

static void put_call(sbuf *b, const og_chat_tool_call *c) {
    put(b, c->type ? c->type : "function");
    mark(b, TOOL_SEP);
    put(b, c->name ? c->name : "");
    put(b, "\n```json\n");
    put(b, c->arguments ? c->arguments : "");
    put(b, "\n```");
    mark(b, CALL_END);
}

/* Renders into *b (the caller frees b->p and b->mark, on failure too). */
static og_status render(og_chat_kind kind, const og_chat_msg *m, int n, bool add_generation_prompt, sbuf *b,
                        char *err, size_t errlen) {
    if (kind != OG_CHAT_DEEPSEEK3) return og_fail(err, errlen, OG_ERR_UNSUPPORTED, "no built-in formatter for this chat template");
    put(b, ""); /* the BOS text would come first: the tokenizer adds its id */
    bool first_sp = true;
    for (int i = 0; i < n; i++) {
        if (!m[i].role) return og_fail(err, errlen, OG_ERR_INVALID_ARG, "message %d has no role", i);
        if (strcmp(m[i].role, "system") && strcmp(m[i].role, "developer")) continue;
        if (!first_sp) put(b, "\n\n");
        put(b, m[i].content ? m[i].content : "");
        first_sp = false;
    }
    bool is_first = false, is_tool = false, output_first = true;
    for (int i = 0; i < n && !b->oom; i++) {
        const char *r = m[i].role;
        if (!strcmp(r, "system") || !strcmp(r, "developer")) continue;
        if (!strcmp(r, "user")) {
            is_tool = false;
            mark(b, U);
            put(b, m[i].content ? m[i].content : "");
        } else if (!strcmp(r, "assistant")) {
            if (!m[i].content) {
                if (m[i].n_tool_calls <= 0)
                    return og_fail(err, errlen, OG_ERR_INVALID_ARG, "assistant message %d has neither content nor tool calls", i);
                is_tool = false;
                for (int c = 0; c < m[i].n_tool_calls; c++) {
                    if (!is_first) {
                        mark(b, A);
                        mark(b, CALLS_BEGIN);
                        mark(b, CALL_BEGIN);
                        put_call(b, &m[i].tool_calls[c]);
                        is_first = true;
                    } else {
                        put(b, "\n");
                        mark(b, CALL_BEGIN);
                        put_call(b, &m[i].tool_calls[c]);
                        mark(b, CALLS_END);
                        mark(b, EOS);
                    }
                }
            } else {
                mark(b, is_tool ? OUTS_END : A);
                put(b, m[i].content);
                mark(b, EOS);
                is_tool = false;
            }
        } else if (!strcmp(r, "tool")) {
            is_tool = true;
            if (output_first) mark(b, OUTS_BEGIN);
            else put(b, "\n");
            mark(b, OUT_BEGIN);
            put(b, m[i].content ? m[i].content : "");
            mark(b, OUT_END);
            output_first = false;
        } else {
            return og_fail(err, errlen, OG_ERR_INVALID_ARG, "message %d: unknown role '%.32s'", i, r);
        }
    }
    if (is_tool) mark(b, OUTS_END);
    if (add_generation_prompt && !is_tool) mark(b, A);
    if (b->oom) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    return OG_OK;
}

og_status og_chat_format(og_chat_kind kind, const og_chat_msg *m, int n, bool add_generation_prompt, char **out,
                         char *err, size_t errlen) {
    *out = NULL;
    sbuf b = {0};
    og_status st = render(kind, m, n, add_generation_prompt, &b, err, errlen);
    free(b.mark);
    if (st) {
        free(b.p);
        return st;
    }
    *out = b.p;
    return OG_OK;
}

og_status og_chat_tokenize(const og_tokenizer *tok, og_chat_kind kind, const og_chat_msg *m, int n,
                           bool add_generation_prompt, og_ids *out, char *err, size_t errlen) {
    sbuf b = {0};
    og_status st = render(kind, m, n, add_generation_prompt, &b, err, errlen);
    if (!st) st = og_tokenize(tok, "", 0, og_tokenizer_add_bos(tok), false, out);
    for (size_t k = 0, at = 0; !st && k <= b.n_mark; k++) {
        size_t end = k < b.n_mark ? b.mark[2 * k] : b.n;
        if (end > at) st = og_tokenize(tok, b.p + at, end - at, false, false, out); /* text: never a control token */
        if (st || k == b.n_mark) break;
        st = og_tokenize(tok, b.p + end, b.mark[2 * k + 1], false, true, out);
        at = end + b.mark[2 * k + 1];
    }
    if (st == OG_ERR_NOMEM && !b.oom) og_fail(err, errlen, st, "out of memory");
    free(b.p);
    free(b.mark);
    return st;
}
