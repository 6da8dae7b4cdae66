/* What the Anthropic Messages and OpenAI Responses endpoints share
 * (og_endpoints.h): which path is which, parsing through the chat request a
 * body means, and the output assembler that turns a sequence's output into
 * blocks and, while streaming, into the endpoint's events. */
#include "og_endpoints.h"

#include <limits.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

og_endpoint og_endpoint_of(const char *path) {
    static const struct {
        const char *path;
        og_endpoint ep;
    } paths[] = {{"/v1/chat/completions", OG_EP_CHAT},
                 {"/v1/completions", OG_EP_COMPLETIONS},
                 {"/v1/messages", OG_EP_MESSAGES},
                 {"/v1/messages/count_tokens", OG_EP_COUNT_TOKENS},
                 {"/v1/responses", OG_EP_RESPONSES}};
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++)
        if (!strcmp(path, paths[i].path)) return paths[i].ep;
    return OG_EP_NONE;
}

bool og_endpoint_anthropic(const char *path) {
    return !strncmp(path, "/v1/messages", 12) && (path[12] == 0 || path[12] == '/' || path[12] == '?');
}

void og_ep_id(char *out, size_t cap, const char *prefix, uint64_t seed, uint64_t salt) {
    static const char alnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    uint64_t st = seed ^ (salt * 0x9E3779B97F4A7C15ull);
    int k = snprintf(out, cap, "%s", prefix);
    for (int i = 0; i < 24 && k >= 0 && (size_t)k + 1 < cap; i++) out[k++] = alnum[og_splitmix64(&st) % 62];
    if (k >= 0 && (size_t)k < cap) out[k] = 0;
}

bool og_content_type_json(const char *ct) {
    if (!ct) return true; /* curl -X POST --data-binary without -H: no header at all */
    while (*ct == ' ' || *ct == '\t') ct++;
    size_t n = strcspn(ct, ";");
    while (n && (ct[n - 1] == ' ' || ct[n - 1] == '\t')) n--;
    return n == 16 && !strncasecmp(ct, "application/json", 16);
}

/* ---- parsing ------------------------------------------------------------- */

/* Replaces every "from" in s (cap bytes, NUL-terminated) by "to", as far as cap allows. */
static void replace_all(char *s, size_t cap, const char *from, const char *to) {
    size_t fl = strlen(from), tl = strlen(to);
    for (char *p = strstr(s, from); p; p = strstr(p, from)) {
        size_t len = strlen(s), tail = len - (size_t)(p - s) - fl;
        if (len - fl + tl + 1 > cap) return;
        memmove(p + tl, p + fl, tail + 1);
        memcpy(p, to, tl);
        p += tl;
    }
}

/* The chat request's field names in og_api_parse's errors, as the caller's
 * request spells them (in order: the longer names first). */
typedef struct {
    const char *chat, *caller;
} field_map;
static const field_map msgs_fields[] = {{".function.parameters", ".input_schema"},
                                        {".function.", "."},
                                        {"].function", "]"},
                                        {"chat_template_kwargs.thinking", "thinking"},
                                        {"'stop'", "'stop_sequences'"}};
static const field_map resp_fields[] = {{".function.", "."},
                                        {"].function", "]"},
                                        {"response_format.json_schema.", "text.format."},
                                        {"response_format", "text.format"},
                                        {"reasoning_effort", "reasoning.effort"},
                                        {"max_tokens", "max_output_tokens"},
                                        {"the messages take", "the input takes"},
                                        {"'messages'", "'input'"}};

/* e (from og_api_parse of the translated request) in the endpoint's terms. */
static void name_fields(og_endpoint ep, og_api_err *e) {
    const field_map *m = ep == OG_EP_RESPONSES ? resp_fields : msgs_fields;
    size_t n = ep == OG_EP_RESPONSES ? sizeof resp_fields / sizeof *resp_fields : sizeof msgs_fields / sizeof *msgs_fields;
    /* a context error caused by the output budget names the field that asked for it */
    if (ep == OG_EP_RESPONSES && e->code && !strcmp(e->code, "context_length_exceeded") &&
        strstr(e->message, "max_tokens asks"))
        snprintf(e->param, sizeof e->param, "max_output_tokens");
    else if (ep == OG_EP_RESPONSES && !strcmp(e->param, "messages"))
        snprintf(e->param, sizeof e->param, "input");
    if (!strcmp(e->param, "stop")) snprintf(e->param, sizeof e->param, "stop_sequences");
    for (size_t k = 0; k < n; k++) {
        if (strcmp(m[k].chat, "'stop'") && strcmp(m[k].chat, "'messages'") && strcmp(m[k].chat, "the messages take"))
            replace_all(e->param, sizeof e->param, m[k].chat, m[k].caller);
        replace_all(e->message, sizeof e->message, m[k].chat, m[k].caller);
    }
    /* "'text.format.name' must be ..." with param text.format: the member the message names */
    size_t pl = strlen(e->param), q = e->message[0] == '\'' ? strcspn(e->message + 1, "'") : 0;
    if (pl && q > pl && q < sizeof e->param && !strncmp(e->message + 1, e->param, pl) && e->message[1 + pl] == '.')
        snprintf(e->param, sizeof e->param, "%.*s", (int)q, e->message + 1);
}

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

bool og_ep_parse(const og_ep_meta *meta, const char *body, size_t len, const og_api_model *mdl, og_api_req *req,
                 og_ep_out **out, og_api_err *e) {
    memset(req, 0, sizeof *req);
    *out = NULL;
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!root && strstr(je.text, "NUL"))
        return og_api_error(e, 400, "invalid_request_error", NULL, NULL,
                            "NUL characters (\\u0000) in strings are not supported (line %d, column %d)", je.line,
                            je.column);
    if (!root)
        return og_api_error(e, 400, "invalid_request_error", NULL, NULL,
                            "the body is not valid JSON: %s (line %d, column %d)", je.text, je.line, je.column);
    json_t *chat = NULL, *echo = NULL;
    bool ok = meta->ep == OG_EP_RESPONSES ? og_resp_to_chat(root, &chat, &echo, e)
                                          : og_msgs_to_chat(root, meta->ep == OG_EP_COUNT_TOKENS, &chat, e);
    json_decref(root);
    if (!ok) return false;
    char *txt = json_dumps(chat, JSON_COMPACT);
    json_decref(chat);
    if (!txt) {
        json_decref(echo);
        return og_api_error(e, 500, "server_error", NULL, NULL, "out of memory");
    }
    og_api_model m = *mdl;
    if (meta->ep == OG_EP_COUNT_TOKENS) { /* a count for any length: nothing is generated */
        m.ctx = INT_MAX;
        m.max_tokens = 0;
    }
    ok = og_api_parse(txt, strlen(txt), true, &m, req, e);
    free(txt);
    if (!ok) name_fields(meta->ep, e);
    if (!ok || meta->ep == OG_EP_COUNT_TOKENS) {
        json_decref(echo);
        return ok;
    }
    og_ep_out *o = calloc(1, sizeof *o);
    if (!o) {
        json_decref(echo);
        return og_api_error(e, 500, "server_error", NULL, NULL, "out of memory");
    }
    o->meta = *meta;
    o->ops = meta->ep == OG_EP_RESPONSES ? &og_resp_ops : &og_msgs_ops;
    o->stream = req->stream;
    o->echo = echo;
    o->stop_index = -1;
    o->keepalive_s = OG_EP_KEEPALIVE_S;
    o->last_event_s = mono_s(); /* a keep-alive comes keepalive_s after the request, not at once */
    o->max_calls = req->max_calls;
    o->n_prompt = (int)req->prompts[0].n;
    if (req->parse && og_outparse_new(mdl->tok, &req->out, &o->parser)) {
        og_ep_out_free(o);
        return og_api_error(e, 500, "server_error", NULL, NULL, "out of memory");
    }
    og_ep_id(o->id, sizeof o->id, meta->ep == OG_EP_RESPONSES ? "resp_" : "msg_", meta->id_seed, 0);
    for (int i = 0; i < req->sp.n_stop; i++) {
        if (!(o->stop[i] = strdup(req->sp.stop[i]))) {
            og_ep_out_free(o);
            return og_api_error(e, 500, "server_error", NULL, NULL, "out of memory");
        }
        o->n_stop = i + 1;
    }
    *out = o;
    return true;
}

bool og_ep_tools_to_chat(json_t *tools, json_t *chat, og_ep_tool_fn read, og_api_err *e) {
    if (!json_is_array(tools)) return og_api_error(e, 400, "invalid_request_error", "tools", NULL, "'tools' must be an array");
    json_t *out = json_array();
    if (!out || json_object_set_new(chat, "tools", out)) return og_api_error(e, 500, "server_error", NULL, NULL, "out of memory");
    size_t i;
    json_t *t;
    char w[48];
    json_array_foreach(tools, i, t) {
        snprintf(w, sizeof w, "tools[%zu]", i);
        og_ep_tool f = {0};
        if (!json_is_object(t)) return og_api_error(e, 400, "invalid_request_error", w, NULL, "%s must be an object", w);
        if (!read(t, w, &f, e)) return false;
        /* the name is checked once, by og_api_parse (its rule and limit) */
        json_t *fn = json_pack("{s:O?,s:O?,s:O?,s:O?}", "name", f.name, "description", f.description, "parameters",
                               f.parameters, "strict", f.strict);
        if (fn && !f.description) json_object_del(fn, "description");
        if (fn && !f.parameters) json_object_del(fn, "parameters");
        if (fn && !f.strict) json_object_del(fn, "strict");
        if (!fn || json_array_append_new(out, json_pack("{s:s,s:o}", "type", "function", "function", fn)))
            return og_api_error(e, 500, "server_error", NULL, NULL, "out of memory");
    }
    return true;
}

json_t *og_ep_count_json(const og_api_req *req) {
    return json_pack("{s:I}", "input_tokens", (json_int_t)(req->n_prompts ? req->prompts[0].n : 0));
}

/* ---- the assembler ------------------------------------------------------- */

void og_ep_out_free(og_ep_out *o) {
    if (!o) return;
    for (int i = 0; i < o->n_blk; i++) {
        free(o->blk[i].text);
        free(o->blk[i].name);
    }
    free(o->blk);
    for (int i = 0; i < o->n_stop; i++) free(o->stop[i]);
    og_outparse_free(o->parser);
    json_decref(o->echo);
    free(o->sse);
    free(o);
}


static bool sse_append(og_ep_out *o, const char *s, size_t n) {
    o->last_event_s = mono_s();
    if (o->sse_len + n + 1 > o->sse_cap) {
        size_t cap = o->sse_cap ? o->sse_cap : 1024;
        while (cap < o->sse_len + n + 1) cap *= 2;
        char *b = realloc(o->sse, cap);
        if (!b) return !(o->oom = true);
        o->sse = b;
        o->sse_cap = cap;
    }
    memcpy(o->sse + o->sse_len, s, n);
    o->sse_len += n;
    o->sse[o->sse_len] = 0;
    return true;
}

void og_ep_sse_event(og_ep_out *o, const char *name, json_t *data) {
    char *txt = data ? json_dumps(data, JSON_COMPACT) : NULL;
    json_decref(data);
    if (!txt) {
        o->oom = true;
        return;
    }
    (void)(sse_append(o, "event: ", 7) && sse_append(o, name, strlen(name)) && sse_append(o, "\ndata: ", 7) &&
           sse_append(o, txt, strlen(txt)) && sse_append(o, "\n\n", 2));
    free(txt);
}

const char *og_ep_out_sse(const og_ep_out *o, size_t *len) {
    *len = o->sse_len;
    return o->sse ? o->sse : "";
}

void og_ep_out_sse_clear(og_ep_out *o) { o->sse_len = 0; }

bool og_ep_out_done(const og_ep_out *o) { return o->done; }

og_status og_ep_out_keepalive(og_ep_out *o) {
    /* queued, before the opening events (which wait for the admission's
     * numbers): an SSE comment, which readers skip (the Anthropic SDK's
     * _iterSSEMessages, the openai client's), so that no event comes first */
    if (o->stream && !o->done && mono_s() - o->last_event_s >= o->keepalive_s) {
        if (o->begun) o->ops->keepalive(o);
        else og_ep_sse_comment(o, "keep-alive");
    }
    return o->oom ? OG_ERR_NOMEM : OG_OK;
}

void og_ep_sse_comment(og_ep_out *o, const char *text) {
    (void)(sse_append(o, ": ", 2) && sse_append(o, text, strlen(text)) && sse_append(o, "\n\n", 2));
}

int og_ep_out_n_gen(const og_ep_out *o) { return o->n_gen; }

og_status og_ep_out_begin(og_ep_out *o) {
    if (o->stream && !o->begun) {
        o->begun = true;
        o->ops->begin(o);
    }
    return o->oom ? OG_ERR_NOMEM : OG_OK;
}

/* Appends t[0..n) to a growing NUL-terminated text. */
static bool grow(og_ep_out *o, char **buf, size_t *len, size_t *cap, const char *t, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 64;
        while (c < *len + n + 1) c *= 2;
        char *p = realloc(*buf, c);
        if (!p) return !(o->oom = true);
        *buf = p;
        *cap = c;
    }
    memcpy(*buf + *len, t, n);
    *len += n;
    (*buf)[*len] = 0;
    return true;
}

static bool blk_append(og_ep_out *o, og_blk *b, const char *t, size_t n) {
    return grow(o, &b->text, &b->len, &b->cap, t, n);
}

static void close_open(og_ep_out *o) {
    if (!o->open) return;
    o->open = false;
    if (o->stream) o->ops->blk_stop(o, o->n_blk - 1);
}

static og_blk *open_blk(og_ep_out *o, og_blk_kind kind, const char *call_id, const char *name) {
    close_open(o);
    if (o->n_blk == o->cap_blk) {
        int cap = o->cap_blk ? 2 * o->cap_blk : 4;
        og_blk *b = realloc(o->blk, (size_t)cap * sizeof *b);
        if (!b) {
            o->oom = true;
            return NULL;
        }
        o->blk = b;
        o->cap_blk = cap;
    }
    og_blk *b = &o->blk[o->n_blk];
    memset(b, 0, sizeof *b);
    b->kind = kind;
    if (call_id) snprintf(b->call_id, sizeof b->call_id, "%s", call_id);
    if (name && !(b->name = strdup(name))) {
        o->oom = true;
        return NULL;
    }
    if (!blk_append(o, b, "", 0)) { /* text is never NULL */
        free(b->name);
        return NULL;
    }
    o->n_blk++;
    o->open = true;
    if (o->stream) o->ops->blk_start(o, o->n_blk - 1);
    return b;
}

/* The parser's events (og_out_cb): text and reasoning grow the open block of
 * their kind or open one; a tool call is a block of its own. */
static void on_event(void *ud, const og_out_ev *ev) {
    og_ep_out *o = ud;
    og_blk *last = o->open ? &o->blk[o->n_blk - 1] : NULL;
    if (ev->kind == OG_OUT_TOOL_BEGIN) o->drop_call = o->max_calls && o->n_calls >= o->max_calls;
    if (o->drop_call && (ev->kind == OG_OUT_TOOL_BEGIN || ev->kind == OG_OUT_TOOL_ARGS || ev->kind == OG_OUT_TOOL_END))
        return; /* parallel tool use off: the first call only */
    switch (ev->kind) {
    case OG_OUT_CONTENT:
    case OG_OUT_REASONING: {
        if (!ev->len) return;
        og_blk_kind k = ev->kind == OG_OUT_CONTENT ? OG_BLK_TEXT : OG_BLK_THINKING;
        if (!last || last->kind != k) last = open_blk(o, k, NULL, NULL);
        if (last && blk_append(o, last, ev->text, ev->len) && o->stream)
            o->ops->blk_delta(o, o->n_blk - 1, ev->text, ev->len);
        return;
    }
    case OG_OUT_TOOL_BEGIN:
        open_blk(o, OG_BLK_TOOL, ev->id, ev->name);
        return;
    case OG_OUT_TOOL_ARGS:
        if (last && last->kind == OG_BLK_TOOL && blk_append(o, last, ev->text, ev->len) && o->stream)
            o->ops->blk_delta(o, o->n_blk - 1, ev->text, ev->len);
        return;
    case OG_OUT_TOOL_END:
        if (!last || last->kind != OG_BLK_TOOL) return;
        o->n_calls++;
        if (ev->arguments) { /* the whole arguments: what the pieces add up to */
            last->len = 0;
            blk_append(o, last, ev->arguments, strlen(ev->arguments));
        }
        close_open(o);
        return;
    }
}

og_status og_ep_out_feed(og_ep_out *o, const og_seq_out *so) {
    if (o->finish != OG_FINISH_NONE) return OG_OK;
    if (so->n_prompt) o->n_prompt = so->n_prompt;
    if (so->n_prompt) o->n_cached = so->n_cached;
    /* the opening events carry the prompt's usage (message_start's
     * cache_read_input_tokens): sent once the sequence is admitted, when the
     * prefix lookup is done, or when it ended without ever being admitted */
    if (o->stream && !o->begun && (so->admitted || so->finish != OG_FINISH_NONE)) og_ep_out_begin(o);
    if (o->stream && !o->begun) return OG_OK; /* queued: nothing else can have come */
    o->n_gen = so->n_gen;
    if (!o->parser && so->len) {
        og_out_ev ev = {.kind = OG_OUT_CONTENT, .text = so->text, .len = so->len};
        on_event(o, &ev);
    }
    if (o->parser && og_outparse_take(o->parser, so, on_event, o)) o->oom = true;
    if (so->finish != OG_FINISH_NONE) {
        close_open(o);
        o->finish = so->finish;
        o->stop_index = so->finish == OG_FINISH_STOP ? so->stop_index : -1;
        if (o->stream && (so->finish == OG_FINISH_STOP || so->finish == OG_FINISH_LENGTH)) {
            o->ops->end(o);
            o->done = true;
        }
    }
    return o->oom ? OG_ERR_NOMEM : OG_OK;
}

og_status og_ep_out_error(og_ep_out *o, const og_api_err *e) {
    if (o->done) return OG_OK;
    if (!o->begun) og_ep_out_begin(o);
    o->ops->error(o, e);
    o->done = true;
    return o->oom ? OG_ERR_NOMEM : OG_OK;
}

json_t *og_ep_out_final(og_ep_out *o) { return o->ops->final(o); }
