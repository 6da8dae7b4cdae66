/* Built-in chat encodings: detection, the shared text buffer, the JSON writer
 * tool definitions are rendered with, and the tokenization that keeps message
 * text out of the control tokens. The encodings themselves: chat_dsv3.c
 * (V3, R1, V3.1: tokenizer.md §7) and chat_dsv4.c (V4, V4.1: deepseek4.md §5). */
#include "chat_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool has(const char *t, size_t n, const char *s) { return memmem(t, n, s, strlen(s)) != NULL; }

/* Markers each official template text carries (checked most specific first):
 * V4.1's encoder writes <System>; V4's Jinja renditions define the DSML token
 * with a tool_calls block (llama.cpp common/chat.cpp looks for "dsml_token" and
 * "DSML"); V3.1 has the thinking switch and name<tool_sep> calls; R1 opens
 * <think> in its generation prompt; V3 has User, Assistant and EOS markers
 * (llama.cpp src/llama-chat.cpp "deepseek3"). */
og_chat_kind og_chat_detect(const char *t, size_t n) {
    if (!t) return OG_CHAT_UNKNOWN;
    bool dsml = has(t, n, "DSML") && (has(t, n, "dsml_token") || has(t, n, CHAT_DSML));
    if (dsml && has(t, n, CHAT_S)) return OG_CHAT_DEEPSEEK4_1;
    /* V3.2 names its block function_calls (llama.cpp tells V4 by its absence); V3.2
     * is not built in and keeps the V3 formatter its markers gave it before */
    if (dsml && has(t, n, "tool_calls") && !has(t, n, "function_calls")) return OG_CHAT_DEEPSEEK4;
    if (!(has(t, n, CHAT_A) && has(t, n, CHAT_U) && has(t, n, CHAT_EOS))) return OG_CHAT_UNKNOWN;
    if (has(t, n, "thinking") && has(t, n, "is_last_user")) return OG_CHAT_DEEPSEEK3_1;
    if (has(t, n, CHAT_A "<think>")) return OG_CHAT_DEEPSEEK_R1;
    return OG_CHAT_DEEPSEEK3;
}

og_chat_kind og_chat_kind_for_arch(const char *arch) {
    if (!arch) return OG_CHAT_UNKNOWN;
    if (!strcmp(arch, "deepseek4")) return OG_CHAT_DEEPSEEK4;
    if (!strcmp(arch, "deepseek41")) return OG_CHAT_DEEPSEEK4_1;
    return OG_CHAT_UNKNOWN;
}

og_chat_kind og_chat_kind_of(const og_gguf *g) {
    char arch[64];
    og_chat_kind k = OG_CHAT_UNKNOWN;
    if (og_gguf_get_cstr(g, "general.architecture", arch, sizeof arch) == OG_OK) k = og_chat_kind_for_arch(arch);
    og_str tmpl = {0};
    if (k == OG_CHAT_UNKNOWN && og_gguf_get_str(g, "tokenizer.chat_template", &tmpl) == OG_OK)
        k = og_chat_detect(tmpl.s, (size_t)tmpl.n);
    return k;
}

bool og_chat_is_system(const char *role) { return !strcmp(role, "system") || !strcmp(role, "developer"); }

void og_chat_putn(og_chat_buf *b, const char *s, size_t l) {
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
    memcpy(b->p + b->n, s, l);
    b->n += l;
    b->p[b->n] = '\0';
}

void og_chat_put(og_chat_buf *b, const char *s) { og_chat_putn(b, s, strlen(s)); }

void og_chat_mark(og_chat_buf *b, const char *s) {
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
    og_chat_put(b, s);
}

/* A JSON string body as json.dumps escapes it. */
static void put_json_str(og_chat_buf *b, const char *s, size_t n, bool ensure_ascii) {
    og_chat_put(b, "\"");
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[16] = {0};
        size_t adv = 0;
        if (c == '"') strcpy(esc, "\\\"");
        else if (c == '\\') strcpy(esc, "\\\\");
        else if (c == '\n') strcpy(esc, "\\n");
        else if (c == '\r') strcpy(esc, "\\r");
        else if (c == '\t') strcpy(esc, "\\t");
        else if (c == '\b') strcpy(esc, "\\b");
        else if (c == '\f') strcpy(esc, "\\f");
        else if (c < 0x20) snprintf(esc, sizeof esc, "\\u%04x", c);
        else if (c >= 0x80 && ensure_ascii) {
            /* jansson hands over valid UTF-8 only */
            uint32_t cp;
            if (c >= 0xf0) cp = (uint32_t)(c & 7) << 18, adv = 3;
            else if (c >= 0xe0) cp = (uint32_t)(c & 15) << 12, adv = 2;
            else cp = (uint32_t)(c & 31) << 6, adv = 1;
            if (i + adv >= n) adv = n - 1 - i;
            for (size_t k = 1; k <= adv; k++) cp |= (uint32_t)((unsigned char)s[i + k] & 63) << (6 * (adv - k));
            if (cp >= 0x10000) {
                cp -= 0x10000;
                snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
            } else {
                snprintf(esc, sizeof esc, "\\u%04x", cp);
            }
        }
        if (!esc[0]) {
            run++;
            continue;
        }
        og_chat_putn(b, s + i - run, run);
        run = 0;
        og_chat_put(b, esc);
        i += adv;
    }
    og_chat_putn(b, s + n - run, run);
    og_chat_put(b, "\"");
}

/* A double as Python's float repr writes it (json.dumps uses it): the shortest
 * digits that read back as the same value, positional for decimal exponents
 * -4..15 ("1e-05", "0.0001", "1000000000000000.0", "1e+16"), else d.ddde+XX. */
static void put_py_float(og_chat_buf *b, double d) {
    char e[40], out[64];
    int prec = 1;
    for (; prec < 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec - 1, d);
        if (strtod(e, NULL) == d) break;
    }
    snprintf(e, sizeof e, "%.*e", prec - 1, d);
    /* e: [-]D[.DDD]e(+|-)XX */
    char *ep = strchr(e, 'e');
    int exp = atoi(ep + 1);
    *ep = '\0';
    char digits[24];
    size_t nd = 0;
    for (const char *p = e; *p; p++)
        if (*p >= '0' && *p <= '9') digits[nd++] = *p;
    digits[nd] = '\0';
    size_t o = 0;
    if (signbit(d)) out[o++] = '-';
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            o += (size_t)snprintf(out + o, sizeof out - o, "0.");
            for (int k = -1; k > exp; k--) out[o++] = '0';
            o += (size_t)snprintf(out + o, sizeof out - o, "%s", digits);
        } else {
            for (int k = 0; k <= exp; k++) out[o++] = (size_t)k < nd ? digits[k] : '0';
            out[o++] = '.';
            if ((size_t)exp + 1 < nd) o += (size_t)snprintf(out + o, sizeof out - o, "%s", digits + exp + 1);
            else out[o++] = '0';
        }
        out[o] = '\0';
    } else {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            o += (size_t)snprintf(out + o, sizeof out - o, "%s", digits + 1);
        }
        snprintf(out + o, sizeof out - o, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
    og_chat_put(b, out);
}

static void put_indent(og_chat_buf *b, int indent, int depth) {
    og_chat_put(b, "\n");
    for (int k = 0; k < indent * depth; k++) og_chat_put(b, " ");
}

static void put_json_at(og_chat_buf *b, const json_t *v, int indent, bool ensure_ascii, int depth) {
    char num[64];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        if (json_object_size(v) == 0) {
            og_chat_put(b, "{}");
            break;
        }
        og_chat_put(b, "{");
        const char *k;
        json_t *e;
        bool first = true;
        json_object_foreach((json_t *)v, k, e) {
            if (!first) og_chat_put(b, indent ? "," : ", ");
            if (indent) put_indent(b, indent, depth + 1);
            put_json_str(b, k, strlen(k), ensure_ascii);
            og_chat_put(b, ": ");
            put_json_at(b, e, indent, ensure_ascii, depth + 1);
            first = false;
        }
        if (indent) put_indent(b, indent, depth);
        og_chat_put(b, "}");
        break;
    }
    case JSON_ARRAY: {
        if (json_array_size(v) == 0) {
            og_chat_put(b, "[]");
            break;
        }
        og_chat_put(b, "[");
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i) og_chat_put(b, indent ? "," : ", ");
            if (indent) put_indent(b, indent, depth + 1);
            put_json_at(b, json_array_get(v, i), indent, ensure_ascii, depth + 1);
        }
        if (indent) put_indent(b, indent, depth);
        og_chat_put(b, "]");
        break;
    }
    case JSON_STRING: put_json_str(b, json_string_value(v), json_string_length(v), ensure_ascii); break;
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        og_chat_put(b, num);
        break;
    case JSON_REAL: put_py_float(b, json_real_value(v)); break;
    case JSON_TRUE: og_chat_put(b, "true"); break;
    case JSON_FALSE: og_chat_put(b, "false"); break;
    case JSON_NULL: og_chat_put(b, "null"); break;
    }
}

void og_chat_put_json(og_chat_buf *b, const json_t *v, int indent, bool ensure_ascii) {
    put_json_at(b, v, indent, ensure_ascii, 0);
}

/* The request's tools: a JSON array of {"type":"function","function":{"name":
 * string, ...}} (openai-api.md). An empty array is no tools, as the templates'
 * `if tools` reads it. */
static og_status parse_tools(const char *tools_json, json_t **out, char *err, size_t errlen) {
    *out = NULL;
    if (!tools_json) return OG_OK;
    json_error_t je;
    json_t *t = json_loads(tools_json, JSON_DECODE_ANY, &je);
    if (!t) return og_fail(err, errlen, OG_ERR_INVALID_ARG, "tools: not JSON (%s at %d:%d)", je.text, je.line, je.column);
    if (!json_is_array(t)) {
        json_decref(t);
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "tools: not a JSON array");
    }
    size_t i;
    json_t *e;
    json_array_foreach(t, i, e) {
        json_t *type = json_object_get(e, "type"), *fn = json_object_get(e, "function");
        const char *why = NULL;
        if (!json_is_object(e)) why = "is not an object";
        else if (!json_is_string(type) || strcmp(json_string_value(type), "function"))
            why = "has a type other than \"function\"";
        else if (!json_is_object(fn)) why = "has no function object";
        else if (!json_is_string(json_object_get(fn, "name")) || !json_string_length(json_object_get(fn, "name")))
            why = "has no function name";
        if (why) {
            json_decref(t);
            return og_fail(err, errlen, OG_ERR_INVALID_ARG, "tools[%zu] %s", i, why);
        }
    }
    if (json_array_size(t) == 0) json_decref(t);
    else *out = t;
    return OG_OK;
}

static og_status render(og_chat_kind kind, const og_chat_msg *m, int n, const og_chat_opts *opts, bool gen,
                        og_chat_buf *b, char *err, size_t errlen) {
    static const og_chat_opts defaults = {0};
    if (!opts) opts = &defaults;
    if (kind < OG_CHAT_DEEPSEEK3 || kind > OG_CHAT_DEEPSEEK4_1)
        return og_fail(err, errlen, OG_ERR_UNSUPPORTED, "no built-in formatter for this chat template");
    if (n < 0 || (n > 0 && !m)) return og_fail(err, errlen, OG_ERR_INVALID_ARG, "no messages array");
    if (opts->reasoning_effort < 0 || opts->reasoning_effort > 100)
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "reasoning effort %d is outside 1..100", opts->reasoning_effort);
    for (int i = 0; i < n; i++) {
        const char *r = m[i].role;
        if (!r) return og_fail(err, errlen, OG_ERR_INVALID_ARG, "message %d has no role", i);
        if (!og_chat_is_system(r) && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "tool"))
            return og_fail(err, errlen, OG_ERR_INVALID_ARG, "message %d: unknown role '%.32s'", i, r);
        if (!strcmp(r, "assistant") && !m[i].content && m[i].n_tool_calls <= 0 && !m[i].reasoning)
            return og_fail(err, errlen, OG_ERR_INVALID_ARG, "assistant message %d has neither content nor tool calls", i);
        for (int k = 0; k < m[i].n_tool_calls; k++)
            if (!m[i].tool_calls || !m[i].tool_calls[k].name)
                return og_fail(err, errlen, OG_ERR_INVALID_ARG, "message %d: tool call %d has no name", i, k);
    }
    og_chat_ctx c = {.m = m, .n = n, .gen = gen, .thinking = opts->thinking, .effort = opts->reasoning_effort,
                     .err = err, .errlen = errlen};
    og_status st = parse_tools(opts->tools_json, &c.tools, err, errlen);
    if (st) return st;
    if (kind >= OG_CHAT_DEEPSEEK4) st = og_chat_render_dsv4(kind, &c, b);
    else st = og_chat_render_dsv3(kind, &c, b);
    json_decref(c.tools);
    if (!st && b->oom) st = og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    return st;
}

og_status og_chat_format_opts(og_chat_kind kind, const og_chat_msg *m, int n, const og_chat_opts *opts,
                              bool add_generation_prompt, char **out, char *err, size_t errlen) {
    *out = NULL;
    og_chat_buf b = {0};
    og_status st = render(kind, m, n, opts, add_generation_prompt, &b, err, errlen);
    free(b.mark);
    if (!st && !b.p) {
        b.p = calloc(1, 1); /* nothing rendered: an empty string, not NULL */
        if (!b.p) st = og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    }
    if (st) {
        free(b.p);
        return st;
    }
    *out = b.p;
    return OG_OK;
}

og_status og_chat_format(og_chat_kind kind, const og_chat_msg *m, int n, bool add_generation_prompt, char **out,
                         char *err, size_t errlen) {
    return og_chat_format_opts(kind, m, n, NULL, add_generation_prompt, out, err, errlen);
}

/* The control tokens inside one mark: where, and which (at most CTL_MAX; a
 * mark is one template piece, a few markers at the most). */
enum { CTL_MAX = 8, CTL_CACHE = 64 };
typedef struct mark_ctl {
    const char *text; /* the mark's first occurrence in the rendered text */
    size_t len;
    int n;
    size_t at[CTL_MAX], tl[CTL_MAX]; /* offset in the mark, token text length */
    int32_t id[CTL_MAX];
} mark_ctl;

static og_status find_controls(const og_tokenizer *tok, const char *text, size_t len, mark_ctl *c) {
    *c = (mark_ctl){.text = text, .len = len};
    char piece[256];
    for (size_t at = 0; at < len && c->n < CTL_MAX;) {
        int32_t id;
        og_status st = og_tokenizer_first_control(tok, text + at, len - at, &id);
        if (st || id < 0) return st;
        int tl = og_token_to_bytes(tok, id, true, piece, sizeof piece);
        const char *hit = tl > 0 && (size_t)tl <= sizeof piece ? memmem(text + at, len - at, piece, (size_t)tl) : NULL;
        if (!hit) return OG_OK; /* cannot happen: the token was found in this text */
        c->at[c->n] = (size_t)(hit - text);
        c->tl[c->n] = (size_t)tl;
        c->id[c->n++] = id;
        at = (size_t)(hit - text) + (size_t)tl;
    }
    return OG_OK;
}

/* The control tokens come from the marks only: inside each mark, the control
 * tokens the vocabulary has there (og_tokenizer_first_control, found one after
 * another; the answer kept per distinct mark text, since a conversation repeats
 * a few dozen pieces); every other byte, the marks' plain text included, is
 * joined into runs tokenized with parse_special = false. So the ids equal
 * tokenizing the whole text with parse_special = true whenever the messages
 * hold no control-token text, whatever the vocabulary makes a control token (a
 * DSML tag is plain text in the V3 vocabulary). */
og_status og_chat_tokenize_opts(const og_tokenizer *tok, og_chat_kind kind, const og_chat_msg *m, int n,
                                const og_chat_opts *opts, bool add_generation_prompt, og_ids *out, char *err,
                                size_t errlen) {
    og_chat_buf b = {0};
    og_status st = render(kind, m, n, opts, add_generation_prompt, &b, err, errlen);
    if (!st) st = og_tokenize(tok, "", 0, og_tokenizer_add_bos(tok), false, out);
    mark_ctl *cache = st ? NULL : malloc(CTL_CACHE * sizeof *cache);
    if (!st && !cache) st = OG_ERR_NOMEM;
    int n_cache = 0;
    size_t run = 0; /* start of the text not yet tokenized */
    for (size_t k = 0; !st && k < b.n_mark; k++) {
        const char *text = b.p + b.mark[2 * k];
        size_t len = b.mark[2 * k + 1];
        mark_ctl one, *c = NULL;
        for (int i = 0; i < n_cache && !c; i++)
            if (cache[i].len == len && !memcmp(cache[i].text, text, len)) c = &cache[i];
        if (!c) {
            c = n_cache < CTL_CACHE ? &cache[n_cache++] : &one;
            st = find_controls(tok, text, len, c);
        }
        for (int i = 0; !st && i < c->n; i++) {
            size_t pos = b.mark[2 * k] + c->at[i];
            if (pos > run) st = og_tokenize(tok, b.p + run, pos - run, false, false, out);
            if (!st) st = og_tokenize(tok, b.p + pos, c->tl[i], false, true, out);
            run = pos + c->tl[i];
        }
    }
    if (!st && b.n > run) st = og_tokenize(tok, b.p + run, b.n - run, false, false, out); /* text: never a control token */
    if (st == OG_ERR_NOMEM && !b.oom) og_fail(err, errlen, st, "out of memory");
    free(cache);
    free(b.p);
    free(b.mark);
    return st;
}

og_status og_chat_tokenize(const og_tokenizer *tok, og_chat_kind kind, const og_chat_msg *m, int n,
                           bool add_generation_prompt, og_ids *out, char *err, size_t errlen) {
    return og_chat_tokenize_opts(tok, kind, m, n, NULL, add_generation_prompt, out, err, errlen);
}

/* R1's generation prompt always opens <think>; V3.1, V4 and V4.1 open it in
 * thinking mode; V3 has no reasoning block. */
bool og_chat_opens_reasoning(og_chat_kind kind, const og_chat_opts *opts) {
    bool thinking = opts && opts->thinking;
    switch (kind) {
    case OG_CHAT_DEEPSEEK_R1: return true;
    case OG_CHAT_DEEPSEEK3_1:
    case OG_CHAT_DEEPSEEK4:
    case OG_CHAT_DEEPSEEK4_1: return thinking;
    default: return false;
    }
}

bool og_chat_conversation_opens_reasoning(og_chat_kind kind, const og_chat_msg *m, int n, const og_chat_opts *opts) {
    og_chat_buf b = {0};
    bool opens = false;
    if (render(kind, m, n, opts, true, &b, NULL, 0) == OG_OK && b.p) {
        static const char *const ends[] = {CHAT_THINK, CHAT_THINK "\n"};
        for (size_t k = 0; k < sizeof ends / sizeof *ends; k++) {
            size_t l = strlen(ends[k]);
            if (b.n >= l && !memcmp(b.p + b.n - l, ends[k], l)) opens = true;
        }
    }
    free(b.p);
    free(b.mark);
    return opens;
}
