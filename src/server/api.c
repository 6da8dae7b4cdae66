/* Request validation and response pieces for the OpenAI API (og_api.h). Every
 * rule names the spec section it follows (shared/spec/openai-api.md). */
#include "og_api.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool og_api_verror(og_api_err *e, int status, const char *type, const char *param, const char *code, const char *fmt,
                   va_list ap) {
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    return false;
}

bool og_api_error(og_api_err *e, int status, const char *type, const char *param, const char *code, const char *fmt,
                  ...) {
    va_list ap;
    va_start(ap, fmt);
    og_api_verror(e, status, type, param, code, fmt, ap);
    va_end(ap);
    return false;
}

#define BAD(param, ...) og_api_error(e, 400, "invalid_request_error", param, NULL, __VA_ARGS__)
#define BADC(param, code, ...) og_api_error(e, 400, "invalid_request_error", param, code, __VA_ARGS__)
#define OOM() og_api_error(e, 500, "server_error", NULL, NULL, "out of memory")

json_t *og_api_error_obj(const og_api_err *e) {
    return json_pack("{s:{s:o,s:s,s:o,s:o}}", "error", "message", og_api_jstr(e->message, strlen(e->message)), "type",
                     e->type ? e->type : "server_error", "param", e->param[0] ? json_string(e->param) : json_null(),
                     "code", e->code ? json_string(e->code) : json_null());
}

char *og_api_error_json(const og_api_err *e) {
    json_t *o = og_api_error_obj(e);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

json_t *og_api_jstr(const char *s, size_t n) {
    if (og_utf8_valid(s, n)) return json_stringn(s, n);
    char *o = malloc(3 * n + 1);
    if (!o) return NULL;
    json_t *j = json_stringn(o, og_utf8_repair(s, n, o));
    free(o);
    return j;
}

const char *og_api_finish_reason(og_finish f) {
    return f == OG_FINISH_STOP ? "stop" : f == OG_FINISH_LENGTH ? "length" : NULL;
}

static json_t *token_json(const og_tokenizer *tok, int32_t id, char *buf, size_t cap, int *n) {
    *n = og_token_to_bytes(tok, id, true, buf, cap);
    if (*n < 0) *n = 0;
    if ((size_t)*n > cap) *n = (int)cap;
    return og_api_jstr(buf, (size_t)*n);
}

static json_t *bytes_json(const char *buf, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_integer((unsigned char)buf[i]));
    return a;
}

size_t og_api_chars(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

json_t *og_api_logprobs(const og_tokenizer *tok, bool chat, const og_tok_out *toks, int n, og_api_offsets *off) {
    char buf[256];
    int bn;
    if (chat) {
        json_t *content = json_array();
        for (int i = 0; i < n; i++) {
            json_t *top = json_array();
            for (int j = 0; j < toks[i].n_top; j++) {
                json_t *t = token_json(tok, toks[i].top[j].id, buf, sizeof buf, &bn);
                json_array_append_new(top, json_pack("{s:o,s:f,s:o}", "token", t, "logprob",
                                                     (double)toks[i].top[j].logprob, "bytes", bytes_json(buf, bn)));
            }
            json_t *t = token_json(tok, toks[i].id, buf, sizeof buf, &bn);
            json_array_append_new(content, json_pack("{s:o,s:f,s:o,s:o}", "token", t, "logprob",
                                                     (double)toks[i].logprob, "bytes", bytes_json(buf, bn),
                                                     "top_logprobs", top));
        }
        return json_pack("{s:o,s:n}", "content", content, "refusal");
    }
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    for (int i = 0; i < n; i++) {
        json_array_append_new(tokens, token_json(tok, toks[i].id, buf, sizeof buf, &bn));
        json_array_append_new(lps, json_real(toks[i].logprob));
        json_t *top = json_object();
        for (int j = 0; j < toks[i].n_top; j++) {
            json_t *t = token_json(tok, toks[i].top[j].id, buf, sizeof buf, &bn);
            json_object_set_new(top, json_string_value(t), json_real(toks[i].top[j].logprob));
            json_decref(t);
        }
        json_array_append_new(tops, top);
        if (off && off->text && toks[i].text_start >= off->byte) {
            off->chars += og_api_chars(off->text + off->byte, toks[i].text_start - off->byte);
            off->byte = toks[i].text_start;
        }
        json_array_append_new(offs, json_integer((json_int_t)(off ? off->base + off->chars : toks[i].text_start)));
    }
    return json_pack("{s:o,s:o,s:o,s:o}", "tokens", tokens, "token_logprobs", lps, "top_logprobs", tops,
                     "text_offset", offs);
}

void og_api_req_free(og_api_req *r) {
    for (int i = 0; i < r->n_prompts; i++) {
        og_ids_free(&r->prompts[i]);
        free(r->prompt_text[i]);
    }
    free(r->bias_ids);
    free(r->bias_values);
    free(r->teacher);
    json_decref(r->call_tools);
    og_grammar_unref(r->grammar);
    json_decref(r->root);
    memset(r, 0, sizeof *r);
}

/* ---- field readers: absent and null mean "default" ---------------------- */

static json_t *field(json_t *root, const char *k) {
    json_t *v = json_object_get(root, k);
    return json_is_null(v) ? NULL : v;
}

static bool get_number(json_t *root, const char *k, double lo, double hi, double *out, og_api_err *e) {
    json_t *v = field(root, k);
    if (!v) return true;
    if (!json_is_number(v)) return BAD(k, "'%s' must be a number", k);
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi)) return BAD(k, "'%s' must be between %g and %g (got %.17g)", k, lo, hi, x);
    *out = x;
    return true;
}

static bool get_int(json_t *root, const char *k, long long lo, long long hi, long long *out, og_api_err *e) {
    json_t *v = field(root, k);
    if (!v) return true;
    if (!json_is_integer(v)) return BAD(k, "'%s' must be an integer", k);
    long long x = json_integer_value(v);
    if (x < lo || x > hi) return BAD(k, "'%s' must be between %lld and %lld (got %lld)", k, lo, hi, x);
    *out = x;
    return true;
}

static bool get_bool(json_t *root, const char *k, bool *out, og_api_err *e) {
    json_t *v = field(root, k);
    if (!v) return true;
    if (!json_is_boolean(v)) return BAD(k, "'%s' must be true or false", k);
    *out = json_is_true(v);
    return true;
}

/* The text of a content part: "refusal" for refusal parts, else "text". */
static json_t *part_text(json_t *p) {
    const char *type = json_string_value(json_object_get(p, "type"));
    return json_object_get(p, type && !strcmp(type, "refusal") ? "refusal" : "text");
}

/* §3: a message's content as one string (text parts concatenated), malloc'ed;
 * *out NULL for null/absent content. */
static bool content_text(json_t *c, const char *param, char **out, og_api_err *e) {
    *out = NULL;
    if (!c || json_is_null(c)) return true;
    if (json_is_string(c)) {
        *out = strndup(json_string_value(c), json_string_length(c));
        return *out ? true : OOM();
    }
    if (!json_is_array(c)) return BAD(param, "%s must be a string or an array of content parts", param);
    size_t total = 0, i;
    json_t *p;
    json_array_foreach(c, i, p) {
        json_t *type = json_object_get(p, "type"), *text = part_text(p);
        if (!json_is_object(p) || !json_is_string(type))
            return BAD(param, "%s[%zu] must be an object with a 'type'", param, i);
        if (strcmp(json_string_value(type), "text") && strcmp(json_string_value(type), "refusal"))
            return BAD(param, "%s[%zu] is of type '%s': this server reads only text parts", param, i,
                       json_string_value(type));
        if (!json_is_string(text))
            return BAD(param, "%s[%zu].%s must be a string", param, i,
                       strcmp(json_string_value(type), "refusal") ? "text" : "refusal");
        total += json_string_length(text);
    }
    char *s = malloc(total + 1);
    if (!s) return OOM();
    size_t k = 0;
    json_array_foreach(c, i, p) {
        json_t *text = part_text(p);
        memcpy(s + k, json_string_value(text), json_string_length(text));
        k += json_string_length(text);
    }
    s[k] = 0;
    *out = s;
    return true;
}

static bool parse_messages(json_t *root, const og_api_model *mdl, const og_chat_opts *opts, og_api_req *r,
                           og_api_err *e) {
    json_t *msgs = json_object_get(root, "messages");
    if (!msgs) return BAD("messages", "'messages' is required");
    if (!json_is_array(msgs)) return BAD("messages", "'messages' must be an array");
    size_t n = json_array_size(msgs);
    if (n == 0) return BAD("messages", "'messages' must hold at least one message");
    if (n > 100000) return BAD("messages", "too many messages (%zu)", n);
    og_chat_msg *cm = calloc(n, sizeof *cm);
    char **texts = calloc(n, sizeof *texts);
    og_chat_tool_call **calls = calloc(n, sizeof *calls);
    const char ***call_ids = calloc(n, sizeof *call_ids);
    char **reasoning = calloc(n, sizeof *reasoning);
    bool ok = cm && texts && calls && call_ids && reasoning ? true : OOM();
    char param[64];
    for (size_t i = 0; ok && i < n; i++) {
        json_t *m = json_array_get(msgs, i);
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(m)) {
            ok = BAD(param, "%s must be an object", param);
            break;
        }
        json_t *role = json_object_get(m, "role");
        snprintf(param, sizeof param, "messages[%zu].role", i);
        if (!json_is_string(role)) {
            ok = BAD(param, "%s must be a string", param);
            break;
        }
        const char *rs = json_string_value(role);
        static const char *roles[] = {"system", "developer", "user", "assistant", "tool", "function"};
        bool known = false;
        for (size_t k = 0; k < sizeof roles / sizeof *roles; k++) known |= !strcmp(rs, roles[k]);
        if (!known) {
            char pr[80];
            ok = BAD(param, "%s '%s' is not one of system, developer, user, assistant, tool", param,
                     og_printable(rs, json_string_length(role), pr, sizeof pr));
            break;
        }
        cm[i].role = !strcmp(rs, "function") ? "tool" : rs;
        snprintf(param, sizeof param, "messages[%zu].content", i);
        if (!(ok = content_text(json_object_get(m, "content"), param, &texts[i], e))) break;
        cm[i].content = texts[i];
        json_t *tc = json_object_get(m, "tool_calls");
        if (tc && !json_is_null(tc) && !strcmp(rs, "assistant")) {
            snprintf(param, sizeof param, "messages[%zu].tool_calls", i);
            if (!json_is_array(tc)) {
                ok = BAD(param, "%s must be an array", param);
                break;
            }
            size_t nc = json_array_size(tc), j;
            json_t *c;
            calls[i] = calloc(nc ? nc : 1, sizeof **calls);
            call_ids[i] = calloc(nc ? nc : 1, sizeof **call_ids);
            if (!calls[i] || !call_ids[i]) {
                ok = OOM();
                break;
            }
            json_array_foreach(tc, j, c) {
                json_t *fn = json_object_get(c, "function"), *cid = json_object_get(c, "id");
                json_t *name = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
                if (!json_is_string(name) || !json_is_string(args)) {
                    ok = BAD(param, "%s[%zu].function needs string 'name' and 'arguments'", param, j);
                    break;
                }
                if (cid && !json_is_null(cid) && !json_is_string(cid)) {
                    ok = BAD(param, "%s[%zu].id must be a string", param, j);
                    break;
                }
                calls[i][j] = (og_chat_tool_call){"function", json_string_value(name), json_string_value(args)};
                call_ids[i][j] = json_string_value(cid);
            }
            cm[i].tool_calls = calls[i];
            cm[i].tool_call_ids = call_ids[i];
            cm[i].n_tool_calls = (int)nc;
        }
        if (!ok) break;
        if (!strcmp(rs, "tool")) { /* §3: tool_call_id names the call it answers */
            json_t *tid = json_object_get(m, "tool_call_id");
            snprintf(param, sizeof param, "messages[%zu].tool_call_id", i);
            if (!json_is_string(tid)) {
                ok = BAD(param, "%s is required for a tool message (a string: the id of the call it answers)", param);
                break;
            }
            cm[i].tool_call_id = json_string_value(tid);
        }
        json_t *rc = json_object_get(m, "reasoning_content"); /* DeepSeek's convention for past reasoning */
        if (rc && !json_is_null(rc) && !strcmp(rs, "assistant")) {
            snprintf(param, sizeof param, "messages[%zu].reasoning_content", i);
            if (!(ok = content_text(rc, param, &reasoning[i], e))) break;
            cm[i].reasoning = reasoning[i];
        }
        snprintf(param, sizeof param, "messages[%zu].content", i);
        if (!texts[i] && !cm[i].n_tool_calls) {
            if (strcmp(rs, "assistant")) {
                ok = BAD(param, "%s is required for a %s message", param, rs);
                break;
            }
        }
    }
    if (ok) { /* control-token text in a message is plain text: only the template's markers are control tokens */
        char err[256];
        r->n_prompts = 1;
        og_status st = og_chat_tokenize_opts(mdl->tok, mdl->chat, cm, (int)n, opts, true, &r->prompts[0], err, sizeof err);
        if (st == OG_ERR_NOMEM) ok = OOM();
        else if (st) ok = BAD("messages", "%s", err);
        /* where the prompt ends: inside the think block or not (R1 after tool outputs writes no generation prompt) */
        if (ok) r->out.in_reasoning = og_chat_conversation_opens_reasoning(mdl->chat, cm, (int)n, opts);
    }
    for (size_t i = 0; texts && i < n; i++) free(texts[i]);
    for (size_t i = 0; calls && i < n; i++) free(calls[i]);
    for (size_t i = 0; call_ids && i < n; i++) free(call_ids[i]);
    for (size_t i = 0; reasoning && i < n; i++) free(reasoning[i]);
    free(texts);
    free(calls);
    free(call_ids);
    free(reasoning);
    free(cm);
    return ok;
}

/* §6: prompt is a string, an array of strings, an array of token ids, or an
 * array of arrays of token ids. */
static bool parse_prompt(json_t *root, const og_api_model *mdl, og_api_req *r, og_api_err *e) {
    json_t *p = json_object_get(root, "prompt");
    if (!p) return BAD("prompt", "'prompt' is required");
    json_t *list[OG_API_MAX_PROMPTS];
    int n = 0;
    bool ids_one = false;
    if (json_is_string(p)) list[n++] = p;
    else if (json_is_array(p) && json_array_size(p) > 0 && json_is_integer(json_array_get(p, 0))) {
        list[n++] = p;
        ids_one = true;
    } else if (json_is_array(p)) {
        if (json_array_size(p) == 0) return BAD("prompt", "'prompt' must not be an empty array");
        if (json_array_size(p) > OG_API_MAX_PROMPTS)
            return BAD("prompt", "at most %d prompts per request (got %zu)", OG_API_MAX_PROMPTS, json_array_size(p));
        size_t i;
        json_t *v;
        json_array_foreach(p, i, v) list[n++] = v;
    } else {
        return BAD("prompt", "'prompt' must be a string, an array of strings or an array of token ids");
    }
    for (int i = 0; i < n; i++) {
        json_t *v = list[i];
        og_ids *ids = &r->prompts[i];
        r->n_prompts = i + 1;
        if (json_is_string(v)) {
            const char *s = json_string_value(v);
            size_t l = json_string_length(v);
            if (og_tokenize(mdl->tok, s, l, og_tokenizer_add_bos(mdl->tok), true, ids)) return OOM();
            int32_t bos = og_tokenizer_bos(mdl->tok);
            if (og_tokenizer_add_bos(mdl->tok) && ids->n >= 2 && ids->v[0] == bos && ids->v[1] == bos) {
                memmove(ids->v, ids->v + 1, (ids->n - 1) * sizeof *ids->v); /* the text's own BOS: not a second */
                ids->n--;
            }
            if (!(r->prompt_text[i] = strndup(s, l))) return OOM();
        } else if (json_is_array(v) && (ids_one || json_array_size(v) > 0)) {
            size_t k;
            json_t *t;
            size_t cap = json_array_size(v);
            ids->v = malloc(cap * sizeof *ids->v);
            if (!ids->v) return OOM();
            ids->cap = cap;
            size_t text_len = 0;
            char buf[256];
            json_array_foreach(v, k, t) {
                if (!json_is_integer(t)) return BAD("prompt", "prompt %d: token ids must be integers", i);
                json_int_t id = json_integer_value(t);
                if (id < 0 || id >= mdl->n_vocab)
                    return BAD("prompt", "prompt %d: token id %lld is outside the vocabulary (0..%d)", i,
                               (long long)id, mdl->n_vocab - 1);
                ids->v[ids->n++] = (int32_t)id;
                int bn = og_token_to_bytes(mdl->tok, (int32_t)id, false, buf, sizeof buf);
                text_len += bn > 0 ? (size_t)bn : 0;
            }
            char *txt = malloc(text_len + 1), *w = txt;
            if (!txt) return OOM();
            for (size_t j = 0; j < ids->n; j++) {
                int bn = og_token_to_bytes(mdl->tok, ids->v[j], false, w, (size_t)(txt + text_len - w));
                if (bn > 0) w += bn;
            }
            *w = 0;
            r->prompt_text[i] = txt;
        } else {
            return BAD("prompt", "prompt %d must be a string or a non-empty array of token ids", i);
        }
        if (ids->n == 0) return BAD("prompt", "prompt %d is empty", i);
    }
    return true;
}

/* response_format: text (nothing), json_object, or json_schema {name, schema,
 * strict} compiled into r->grammar (og_grammar.h; strict or not, the output
 * is held to the schema). A schema outside the subset is a 400 naming the keyword. */
static bool parse_response_format(json_t *root, og_api_req *r, og_api_err *e) {
    json_t *rf = field(root, "response_format");
    if (!rf) return true;
    const char *t = json_string_value(json_object_get(rf, "type"));
    if (!json_is_object(rf) || !t) return BAD("response_format", "'response_format' must be an object with a 'type'");
    char msg[400];
    og_status st;
    if (!strcmp(t, "text")) return true;
    if (!strcmp(t, "json_object")) {
        st = og_grammar_json_object(&r->grammar, msg, sizeof msg);
    } else if (!strcmp(t, "json_schema")) {
        json_t *js = json_object_get(rf, "json_schema");
        if (!json_is_object(js))
            return BAD("response_format", "response_format json_schema needs a 'json_schema' object {name, schema}");
        json_t *name = json_object_get(js, "name"), *strict = field(js, "strict"), *schema = field(js, "schema");
        if (!json_is_string(name) || !json_string_length(name))
            return BAD("response_format", "'response_format.json_schema.name' must be a non-empty string");
        if (strict && !json_is_boolean(strict))
            return BAD("response_format", "'response_format.json_schema.strict' must be true or false");
        if (schema && !json_is_object(schema))
            return BAD("response_format", "'response_format.json_schema.schema' must be a JSON Schema object");
        json_t *any = schema ? NULL : json_object();
        st = og_grammar_from_schema(schema ? schema : any, &r->grammar, msg, sizeof msg);
        json_decref(any);
    } else {
        char pt[48];
        return BADC("response_format", "unsupported_parameter",
                    "response_format type '%s' is not supported (text, json_object, json_schema)",
                    og_printable(t, strlen(t), pt, sizeof pt));
    }
    if (st == OG_ERR_NOMEM) return OOM();
    if (st) return BAD("response_format", "response_format.json_schema.schema: %s", msg);
    r->sp.grammar = r->grammar;
    return true;
}

/* reasoning_effort and chat_template_kwargs (og_api.h, og_api_reasoning). */
bool og_api_reasoning(json_t *root, const og_api_model *mdl, bool *thinking, int *effort, og_api_err *e) {
    *thinking = mdl->reasoning;
    *effort = 0;
    json_t *re = field(root, "reasoning_effort");
    if (re) {
        /* OpenAI's names (openai-api.md §2: none, minimal, low, medium, high,
         * xhigh) and max, on V4.1's 1..100 scale (deepseek4.md §5: low 50, high
         * 75, max 100; minimal 25, medium 62 and xhigh 88 are our choices
         * between them), or a number on that scale as V4.1 takes it. */
        static const struct {
            const char *name;
            int effort; /* V4.1's 1..100; 0: thinking off */
        } levels[] = {{"none", 0},  {"minimal", 25}, {"low", 50}, {"medium", 62},
                      {"high", 75}, {"xhigh", 88},   {"max", 100}};
        const char *v = json_string_value(re);
        size_t k = 0;
        while (v && k < sizeof levels / sizeof *levels && strcmp(v, levels[k].name)) k++;
        if (json_is_integer(re) && json_integer_value(re) >= 1 && json_integer_value(re) <= 100) {
            *thinking = true;
            *effort = (int)json_integer_value(re);
        } else if (!v || k == sizeof levels / sizeof *levels) {
            char got[64];
            if (v) snprintf(got, sizeof got, "'%.40s'", v);
            else if (json_is_integer(re)) snprintf(got, sizeof got, "%lld", (long long)json_integer_value(re));
            else if (json_is_real(re)) snprintf(got, sizeof got, "%g", json_real_value(re));
            else snprintf(got, sizeof got, "%s", json_is_boolean(re) ? "a boolean" : "an array or object");
            return BAD("reasoning_effort",
                       "'reasoning_effort' must be one of none, minimal, low, medium, high, xhigh, max, or an integer "
                       "from 1 to 100 (DeepSeek V4.1's effort scale); got %s", got);
        } else {
            *thinking = levels[k].effort > 0;
            *effort = levels[k].effort;
        }
    }
    json_t *kw = field(root, "chat_template_kwargs");
    if (kw) {
        if (!json_is_object(kw)) return BAD("chat_template_kwargs", "'chat_template_kwargs' must be an object");
        static const char *const keys[] = {"thinking", "enable_thinking"};
        json_t *a = field(kw, keys[0]), *b = field(kw, keys[1]);
        if (json_is_boolean(a) && json_is_boolean(b) && json_is_true(a) != json_is_true(b))
            return BAD("chat_template_kwargs", "'chat_template_kwargs.thinking' (%s) and "
                       "'chat_template_kwargs.enable_thinking' (%s) disagree: set one of them",
                       json_is_true(a) ? "true" : "false", json_is_true(b) ? "true" : "false");
        for (int i = 0; i < 2; i++) {
            json_t *t = field(kw, keys[i]);
            if (!t) continue;
            char pn[64];
            snprintf(pn, sizeof pn, "chat_template_kwargs.%s", keys[i]);
            if (!json_is_boolean(t)) return BAD(pn, "'%s' must be true or false", pn);
            *thinking = json_is_true(t);
        }
    }
    if (!*thinking) *effort = 0;
    return true;
}

/* For the tool-call grammar: object schemas that do not say get
 * additionalProperties false, so a forced call writes the declared members
 * only (still valid against the tool's own schema, which allows extras but
 * does not ask for them; random weights would otherwise ramble in extra keys). */
static void no_extras(json_t *s, int depth) {
    if (!json_is_object(s) || depth > OG_GRAMMAR_MAX_DEPTH) return;
    json_t *ty = json_object_get(s, "type");
    if (json_object_get(s, "properties") || (json_is_string(ty) && !strcmp(json_string_value(ty), "object")))
        if (!json_object_get(s, "additionalProperties")) json_object_set_new(s, "additionalProperties", json_false());
    static const char *const maps[] = {"properties", "$defs", "definitions"};
    for (int i = 0; i < 3; i++) {
        const char *k;
        json_t *v, *m = json_object_get(s, maps[i]);
        if (json_is_object(m)) json_object_foreach(m, k, v) no_extras(v, depth + 1);
    }
    no_extras(json_object_get(s, "items"), depth + 1);
    size_t i;
    json_t *v, *any = json_object_get(s, "anyOf");
    if (json_is_array(any)) json_array_foreach(any, i, v) no_extras(v, depth + 1);
}

/* A function name as OpenAI allows it (a-zA-Z0-9_-, at most 64), plus '.' and
 * ':' for namespaced tools (V4.1's search::lookup, deepseek4.md §5). */
static bool tool_name_ok(const char *s, size_t n) {
    if (n == 0 || n > 64) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
              c == '.' || c == ':'))
            return false;
    }
    return true;
}

/* tools, tool_choice, parallel_tool_calls and the reasoning controls: fills
 * opts (rendering), r->out (parsing), r->tool_choice, the call grammar and the
 * masked call tokens. *tools_json (malloc'ed) is what opts->tools_json points to. */
static bool parse_tools(json_t *root, const og_api_model *mdl, og_api_req *r, og_chat_opts *opts, char **tools_json,
                        og_api_err *e) {
    if (!og_api_reasoning(root, mdl, &r->thinking, &r->reasoning_effort, e)) return false;
    opts->thinking = r->thinking;
    opts->reasoning_effort = mdl->chat == OG_CHAT_DEEPSEEK4_1 ? r->reasoning_effort : 0;
    json_t *tools = field(root, "tools"), *tc = field(root, "tool_choice");
    size_t nt = 0;
    if (tools) {
        if (!json_is_array(tools)) return BAD("tools", "'tools' must be an array of function tools");
        nt = json_array_size(tools);
        if (nt > 128) return BAD("tools", "at most 128 tools per request (got %zu)", nt);
    }
    /* the tools: validated, parameters normalized (type object); the schemas a
     * forced call's grammar holds the arguments to are compiled below */
    const char **names = calloc(nt ? nt : 1, sizeof *names);
    json_t **params = calloc(nt ? nt : 1, sizeof *params);
    bool ok = names && params ? true : OOM();
    char pn[96], pv[80];
    for (size_t i = 0; ok && i < nt; i++) {
        json_t *t = json_array_get(tools, i), *fn = json_object_get(t, "function");
        const char *type = json_string_value(json_object_get(t, "type"));
        snprintf(pn, sizeof pn, "tools[%zu]", i);
        if (!json_is_object(t) || !type) {
            ok = BAD(pn, "%s must be an object {\"type\": \"function\", \"function\": {...}}", pn);
            break;
        }
        if (strcmp(type, "function")) {
            ok = BADC(pn, "unsupported_parameter", "%s.type '%s' is not supported (only \"function\" tools)", pn,
                      og_printable(type, strlen(type), pv, sizeof pv));
            break;
        }
        snprintf(pn, sizeof pn, "tools[%zu].function", i);
        if (!json_is_object(fn)) {
            ok = BAD(pn, "%s must be an object {name, description, parameters}", pn);
            break;
        }
        json_t *name = json_object_get(fn, "name"), *desc = field(fn, "description"), *ps = field(fn, "parameters");
        json_t *strict = field(fn, "strict");
        snprintf(pn, sizeof pn, "tools[%zu].function.name", i);
        if (!json_is_string(name) || !tool_name_ok(json_string_value(name), json_string_length(name))) {
            ok = BAD(pn, "%s must be a string of 1-64 characters a-z, A-Z, 0-9, '_', '-', '.', ':'", pn);
            break;
        }
        names[i] = json_string_value(name);
        for (size_t j = 0; j < i; j++)
            if (!strcmp(names[j], names[i])) {
                ok = BAD(pn, "%s: the name '%s' is used by tools[%zu] too", pn, names[i], j);
                break;
            }
        if (!ok) break;
        snprintf(pn, sizeof pn, "tools[%zu].function.description", i);
        if (desc && !json_is_string(desc)) {
            ok = BAD(pn, "%s must be a string", pn);
            break;
        }
        snprintf(pn, sizeof pn, "tools[%zu].function.strict", i);
        if (strict && !json_is_boolean(strict)) {
            ok = BAD(pn, "%s must be true or false", pn);
            break;
        }
        snprintf(pn, sizeof pn, "tools[%zu].function.parameters", i);
        if (ps && !json_is_object(ps)) {
            ok = BAD(pn, "%s must be a JSON Schema object", pn);
            break;
        }
        json_t *ty = ps ? json_object_get(ps, "type") : NULL;
        if (ty && !(json_is_string(ty) && !strcmp(json_string_value(ty), "object"))) {
            ok = BAD(pn, "%s must describe an object (\"type\": \"object\"): the arguments are a JSON object", pn);
            break;
        }
        params[i] = ps ? json_deep_copy(ps) : json_object();
        if (!params[i]) {
            ok = OOM();
            break;
        }
        if (!ty) json_object_set_new(params[i], "type", json_string("object"));
        no_extras(params[i], 0);
    }
    /* tool_choice: "none" | "auto" | "required" | {"type": "function", "function": {"name"}} */
    int named = -1;
    r->tool_choice = nt ? OG_TOOLS_AUTO : OG_TOOLS_NONE;
    if (ok && tc) {
        const char *v = json_string_value(tc);
        if (v && !strcmp(v, "none")) r->tool_choice = OG_TOOLS_NONE;
        else if (v && !strcmp(v, "auto")) r->tool_choice = OG_TOOLS_AUTO;
        else if (v && !strcmp(v, "required")) r->tool_choice = OG_TOOLS_REQUIRED;
        else if (json_is_object(tc)) {
            const char *ty = json_string_value(json_object_get(tc, "type"));
            const char *nm = json_string_value(json_object_get(json_object_get(tc, "function"), "name"));
            if (!ty || strcmp(ty, "function") || !nm)
                ok = BAD("tool_choice", "'tool_choice' as an object must be {\"type\": \"function\", \"function\": "
                                        "{\"name\": NAME}}");
            for (size_t i = 0; ok && i < nt && named < 0; i++)
                if (!strcmp(names[i], nm)) named = (int)i;
            if (ok && named < 0)
                ok = BAD("tool_choice", "tool_choice names the function '%s', which 'tools' does not declare",
                         og_printable(nm, strlen(nm), pv, sizeof pv));
            r->tool_choice = OG_TOOLS_NAMED;
        } else {
            ok = BAD("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                                    "\"function\": {\"name\": NAME}}");
        }
        if (ok && r->tool_choice != OG_TOOLS_NONE && !nt)
            ok = BAD("tool_choice", "'tool_choice' other than \"none\" needs 'tools'");
    }
    bool parallel = true;
    if (ok && !get_bool(root, "parallel_tool_calls", &parallel, e)) ok = false;
    r->max_calls = parallel ? 0 : 1;
    bool forced = r->tool_choice == OG_TOOLS_REQUIRED || r->tool_choice == OG_TOOLS_NAMED;
    /* a forced call's grammar holds the arguments to the schema, so those
     * schemas must be in the subset the grammar compiles (a keyword outside
     * it is a 400 naming it). With "auto" or "none" a schema is only rendered
     * into the prompt, whatever it says: agents' tools carry "format",
     * "minimum", "pattern", "$schema" and the like, which must not refuse
     * the request. */
    for (size_t i = 0; ok && forced && i < nt; i++) {
        if (named >= 0 && (size_t)named != i) continue;
        og_grammar *g = NULL;
        char msg[400];
        og_status st = og_grammar_from_schema(params[i], &g, msg, sizeof msg);
        og_grammar_unref(g);
        snprintf(pn, sizeof pn, "tools[%zu].function.parameters", i);
        if (st == OG_ERR_NOMEM) ok = OOM();
        else if (st)
            ok = BAD(pn, "%s: %s (a forced call's grammar holds the arguments to the schema; with tool_choice "
                         "\"auto\" any schema is accepted)", pn, msg);
    }
    if (ok && forced && r->grammar)
        ok = BAD("response_format", "response_format cannot be combined with tool_choice \"%s\": the output is the "
                                    "tool call", r->tool_choice == OG_TOOLS_REQUIRED ? "required" : "function");
    if (ok && nt && !(*tools_json = json_dumps(tools, JSON_COMPACT))) ok = OOM();
    opts->tools_json = *tools_json;
    /* how the output is read */
    bool thinks = mdl->chat == OG_CHAT_DEEPSEEK_R1 ||
                  (r->thinking && (mdl->chat == OG_CHAT_DEEPSEEK3_1 || mdl->chat == OG_CHAT_DEEPSEEK4 ||
                                   mdl->chat == OG_CHAT_DEEPSEEK4_1));
    r->out = (og_outparse_opts){.kind = mdl->chat, .in_reasoning = og_chat_opens_reasoning(mdl->chat, opts),
                                .parse_reasoning = thinks, .parse_tools = nt && r->tool_choice != OG_TOOLS_NONE,
                                .id_seed = r->sp.sampling.seed ^ 0x746f6f6c73ULL};
    r->parse = ok && (r->out.parse_tools || r->out.parse_reasoning);
    if (ok && forced) { /* the tools the call grammar chooses from (built in call_grammar) */
        r->call_tools = json_array();
        for (size_t i = 0; ok && i < nt; i++)
            if ((named < 0 || (size_t)named == i) &&
                json_array_append_new(r->call_tools, json_pack("[s,O]", names[i], params[i])))
                ok = OOM();
        if (!r->call_tools) ok = OOM();
    }
    if (ok && nt && r->tool_choice == OG_TOOLS_NONE) { /* "none": the call markers are masked (a bias no logit survives) */
        int32_t ban[4];
        int nb = og_outparse_call_tokens(mdl->tok, mdl->chat, ban, 4), have = r->sp.sampling.n_bias;
        int32_t *ids = realloc(r->bias_ids, (size_t)(have + nb + 1) * sizeof *ids);
        if (ids) r->bias_ids = ids;
        float *vals = ids ? realloc(r->bias_values, (size_t)(have + nb + 1) * sizeof *vals) : NULL;
        if (vals) r->bias_values = vals;
        if (!ids || !vals) ok = OOM();
        for (int k = 0; ok && k < nb; k++) {
            r->bias_ids[have + k] = ban[k];
            r->bias_values[have + k] = -1e30f;
        }
        if (ok) {
            r->sp.sampling.bias_ids = r->bias_ids;
            r->sp.sampling.bias_values = r->bias_values;
            r->sp.sampling.n_bias = have + nb;
        }
    }
    for (size_t i = 0; params && i < nt; i++) json_decref(params[i]);
    free(params);
    free(names);
    return ok;
}

/* tool_choice required / named: the grammar that writes only calls of
 * r->call_tools in the encoding's layout (closing the think block first when
 * the rendered prompt left it open). */
static bool call_grammar(const og_api_model *mdl, og_api_req *r, og_api_err *e) {
    size_t n = json_array_size(r->call_tools);
    const char **names = calloc(n ? n : 1, sizeof *names);
    const json_t **params = calloc(n ? n : 1, sizeof *params);
    bool ok = names && params ? true : OOM();
    for (size_t i = 0; ok && i < n; i++) {
        names[i] = json_string_value(json_array_get(json_array_get(r->call_tools, i), 0));
        params[i] = json_array_get(json_array_get(r->call_tools, i), 1);
    }
    og_tool_layout lay;
    char msg[400];
    og_status st = ok ? og_outparse_call_layout(mdl->tok, mdl->chat, r->out.in_reasoning, &lay) : OG_OK;
    if (ok && st) snprintf(msg, sizeof msg, "this model's chat encoding has no tool-call layout");
    else if (ok) st = og_grammar_tool_calls(&lay, names, params, (int)n, r->max_calls, &r->grammar, msg, sizeof msg);
    if (ok && st == OG_ERR_NOMEM) ok = OOM();
    else if (ok && st) ok = BAD("tools", "tools: %s", msg);
    r->sp.grammar = r->grammar;
    free(names);
    free(params);
    return ok;
}

bool og_api_parse(const char *body, size_t len, bool chat, const og_api_model *mdl, og_api_req *r, og_api_err *e) {
    memset(r, 0, sizeof *r);
    r->chat = chat;
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!root && strstr(je.text, "NUL"))
        return BAD(NULL, "NUL characters (\\u0000) in strings are not supported (line %d, column %d)", je.line, je.column);
    if (!root) return BAD(NULL, "the body is not valid JSON: %s (line %d, column %d)", je.text, je.line, je.column);
    r->root = root;
    if (!json_is_object(root)) return BAD(NULL, "the body must be a JSON object");
    json_t *model = field(root, "model");
    if (model && !json_is_string(model)) return BAD("model", "'model' must be a string");

    og_sampler_params *sp = &r->sp.sampling;
    *sp = og_sampler_defaults();
    double x;
    long long i;
    x = 1;
    if (!get_number(root, "temperature", 0, 2, &x, e)) return false;
    sp->temperature = (float)x;
    x = 1;
    if (!get_number(root, "top_p", 0, 1, &x, e)) return false;
    sp->top_p = x > 0 ? (float)x : 1e-9f; /* 0: only the most likely token */
    x = 0;
    if (!get_number(root, "min_p", 0, 1, &x, e)) return false;
    sp->min_p = (float)x;
    x = 0;
    if (!get_number(root, "presence_penalty", -2, 2, &x, e)) return false;
    sp->presence_penalty = (float)x;
    x = 0;
    if (!get_number(root, "frequency_penalty", -2, 2, &x, e)) return false;
    sp->frequency_penalty = (float)x;
    i = 0;
    if (!get_int(root, "top_k", 0, mdl->n_vocab, &i, e)) return false;
    sp->top_k = (int)i;
    /* n (and completions' best_of below): the choices decode together, one place each */
    const int max_n = mdl->no_fork ? 1 : mdl->parallel > 0 && mdl->parallel < OG_API_MAX_N ? mdl->parallel : OG_API_MAX_N;
    i = 1;
    if (mdl->no_fork && !get_int(root, "n", 1, 1, &i, e))
        return BAD("n", "'n' must be 1 for this model: its per-sequence state cannot be forked "
                        "(og_model_info.kv_fork)");
    if (!get_int(root, "n", 1, max_n, &i, e))
        return BAD("n", "'n' must be an integer in 1..%d: this server decodes at most %d choices of one prompt at "
                        "once (--parallel %d, and at most %d)", max_n, max_n, mdl->parallel, OG_API_MAX_N);
    r->n = r->best_of = (int)i;
    json_t *seed = field(root, "seed");
    if (seed && !json_is_integer(seed)) return BAD("seed", "'seed' must be an integer");
    if (seed) {
        sp->seed = (uint64_t)json_integer_value(seed);
    } else { /* no seed asked for: a fresh one (one getrandom) */
        uint64_t key[2];
        og_random_key(key);
        sp->seed = key[0];
    }
    if (!get_bool(root, "stream", &r->stream, e)) return false;
    json_t *so = field(root, "stream_options");
    if (so) {
        if (!json_is_object(so)) return BAD("stream_options", "'stream_options' must be an object");
        json_t *iu = field(so, "include_usage");
        if (iu && !json_is_boolean(iu))
            return BAD("stream_options.include_usage", "'stream_options.include_usage' must be true or false");
        r->include_usage = json_is_true(iu);
    }
    json_t *repro = field(root, "strata_reproducible");
    if (repro) {
        const char *v = json_string_value(repro);
        if (!v || (strcmp(v, "required") && strcmp(v, "off")))
            return BAD("strata_reproducible", "'strata_reproducible' must be \"required\" or \"off\"");
        r->reproducible = !strcmp(v, "required");
        r->sp.reproducible = r->reproducible;
    }
    /* stop: a string or up to 4 non-empty strings */
    json_t *stop = field(root, "stop");
    if (stop) {
        if (json_is_string(stop)) {
            r->sp.stop[r->sp.n_stop++] = json_string_value(stop);
        } else if (json_is_array(stop)) {
            if (json_array_size(stop) > OG_ENGINE_MAX_STOP)
                return BAD("stop", "'stop' holds at most %d strings (got %zu)", OG_ENGINE_MAX_STOP, json_array_size(stop));
            size_t k;
            json_t *v;
            json_array_foreach(stop, k, v) {
                if (!json_is_string(v)) return BAD("stop", "'stop' must be a string or an array of strings");
                r->sp.stop[r->sp.n_stop++] = json_string_value(v);
            }
        } else {
            return BAD("stop", "'stop' must be a string or an array of strings");
        }
        for (int k = 0; k < r->sp.n_stop; k++) {
            if (!r->sp.stop[k][0]) return BAD("stop", "stop strings must not be empty");
            if (strlen(r->sp.stop[k]) != json_string_length(json_is_string(stop) ? stop : json_array_get(stop, (size_t)k)))
                return BAD("stop", "stop strings must not contain NUL");
        }
    }
    /* logit_bias: {"token id": -100..100} */
    json_t *lb = field(root, "logit_bias");
    if (lb) {
        if (!json_is_object(lb)) return BAD("logit_bias", "'logit_bias' must be an object of token id -> number");
        size_t nb = json_object_size(lb);
        r->bias_ids = malloc((nb ? nb : 1) * sizeof *r->bias_ids);
        r->bias_values = malloc((nb ? nb : 1) * sizeof *r->bias_values);
        if (!r->bias_ids || !r->bias_values) return OOM();
        const char *k;
        json_t *v;
        int nbias = 0;
        json_object_foreach(lb, k, v) {
            char *end;
            long long id = strtoll(k, &end, 10);
            char pk[64];
            /* canonical decimal only: " 5", "+5" and "05" would name token 5 twice */
            bool canonical = k[0] >= '0' && k[0] <= '9' && (k[0] != '0' || !k[1]) && strlen(k) <= 10;
            if (!canonical || end == k || *end || id < 0 || id >= mdl->n_vocab)
                return BAD("logit_bias", "logit_bias key '%s' is not a token id in 0..%d",
                           og_printable(k, strlen(k), pk, sizeof pk), mdl->n_vocab - 1);
            if (!json_is_number(v) || !(json_number_value(v) >= -100 && json_number_value(v) <= 100))
                return BAD("logit_bias", "logit_bias for token %lld must be a number in -100..100", id);
            r->bias_ids[nbias] = (int32_t)id;
            r->bias_values[nbias++] = (float)json_number_value(v);
        }
        sp->bias_ids = r->bias_ids;
        sp->bias_values = r->bias_values;
        sp->n_bias = nbias;
    }
    /* max tokens: chat prefers max_completion_tokens (§2); completions default 16 (§6) */
    long long max_tokens = chat ? -1 : 16;
    const char *mt_name = "max_tokens";
    if (chat && field(root, "max_completion_tokens")) mt_name = "max_completion_tokens";
    if (!get_int(root, mt_name, chat ? 1 : 0, INT32_MAX, &max_tokens, e)) return false;
    bool mt_set = field(root, mt_name) != NULL;
    r->sp.max_tokens = (int)max_tokens;
    /* log-probs */
    if (chat) {
        if (!get_bool(root, "logprobs", &r->logprobs, e)) return false;
        i = 0;
        if (!get_int(root, "top_logprobs", 0, OG_ENGINE_MAX_TOP, &i, e)) return false;
        if (i > 0 && !r->logprobs) return BAD("top_logprobs", "'top_logprobs' needs 'logprobs': true");
        r->top_logprobs = (int)i;
    } else {
        i = -1;
        if (!get_int(root, "logprobs", 0, OG_ENGINE_MAX_TOP, &i, e)) return false;
        r->logprobs = i >= 0;
        r->top_logprobs = i > 0 ? (int)i : 0;
        if (!get_bool(root, "echo", &r->echo, e)) return false;
        json_t *suffix = field(root, "suffix");
        if (suffix && !(json_is_string(suffix) && json_string_length(suffix) == 0))
            return BAD("suffix", "'suffix' (insertion) is not supported by this server");
        i = r->n;
        if (mdl->no_fork && !get_int(root, "best_of", 1, 1, &i, e))
            return BAD("best_of", "'best_of' must be 1 for this model: its per-sequence state cannot be "
                                  "forked (og_model_info.kv_fork)");
        if (!get_int(root, "best_of", r->n, max_n, &i, e))
            return BAD("best_of", "'best_of' must be an integer in n..%d (n is %d): the candidates generated per "
                                  "prompt, of which the n best are returned (--parallel %d, and at most %d)",
                       max_n, r->n, mdl->parallel, OG_API_MAX_N);
        r->best_of = (int)i;
        if (r->best_of > r->n && r->stream)
            return BAD("best_of", "'best_of' greater than 'n' cannot be streamed: the best are known at the end");
    }
    r->sp.logprobs = r->logprobs || r->best_of > r->n; /* best_of ranks by the tokens' log-probs */
    r->sp.n_top = r->top_logprobs;
    if (!parse_response_format(root, r, e)) return false;
    og_chat_opts opts = {0};
    char *tools_json = NULL;
    if (chat && !parse_tools(root, mdl, r, &opts, &tools_json, e)) {
        free(tools_json);
        return false;
    }
    if (!chat && (field(root, "tools") || field(root, "tool_choice")))
        return BAD(field(root, "tools") ? "tools" : "tool_choice", "tools are for /v1/chat/completions");
    if (field(root, "functions"))
        return BADC("functions", "unsupported_parameter",
                    "'functions' (deprecated) is not supported: send 'tools' with tool_choice instead");
    if (field(root, "function_call"))
        return BADC("function_call", "unsupported_parameter",
                    "'function_call' (deprecated) is not supported: send 'tool_choice' instead");

    bool parsed = chat ? parse_messages(root, mdl, &opts, r, e) : parse_prompt(root, mdl, r, e);
    free(tools_json);
    if (!parsed) return false;
    if (r->call_tools && !call_grammar(mdl, r, e)) return false;
    if (r->parse) r->sp.logprobs = true; /* the parser reads every token's id (og_seq_out.toks) */
    /* teacher_tokens (our extension): the first generated tokens are these ids, as onegpu run --teacher
       does; for tests and replays of a known output (each still reports its log-prob) */
    json_t *tt = field(root, "teacher_tokens");
    if (tt) {
        if (!json_is_array(tt) || json_array_size(tt) > 65536)
            return BAD("teacher_tokens", "'teacher_tokens' must be an array of at most 65536 token ids");
        if (r->sp.grammar)
            return BAD("teacher_tokens", "'teacher_tokens' cannot be combined with constrained decoding "
                                         "(response_format, tool_choice required or a function)");
        size_t nt = json_array_size(tt), k;
        json_t *v;
        if (!(r->teacher = malloc((nt ? nt : 1) * sizeof *r->teacher))) return OOM();
        json_array_foreach(tt, k, v) {
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= mdl->n_vocab)
                return BAD("teacher_tokens", "teacher_tokens[%zu] is not a token id in 0..%d", k, mdl->n_vocab - 1);
            r->teacher[k] = (int32_t)json_integer_value(v);
        }
        r->sp.forced = r->teacher;
        r->sp.n_forced = (int)nt;
    }
    if (!mt_set && (mdl->max_tokens > 0 || r->sp.max_tokens > 0)) {
        /* the server's cap or completions' default 16, within what the context leaves: a
           request that asked for no number never gets a 400 for it (README, --max-tokens) */
        long long longest = 0;
        for (int k = 0; k < r->n_prompts; k++)
            if ((long long)r->prompts[k].n > longest) longest = (long long)r->prompts[k].n;
        long long cap = mdl->max_tokens > 0 ? mdl->max_tokens : r->sp.max_tokens;
        if (r->sp.max_tokens >= 0 && r->sp.max_tokens < cap) cap = r->sp.max_tokens;
        if (longest < mdl->ctx && cap > mdl->ctx - longest) cap = mdl->ctx - longest;
        r->sp.max_tokens = (int)cap;
    }
    for (int k = 0; k < r->n_prompts; k++) {
        long long n = (long long)r->prompts[k].n, need = n + (r->sp.max_tokens > 0 ? r->sp.max_tokens : 0);
        const char *what = chat ? "messages" : "prompt";
        char label[32];
        snprintf(label, sizeof label, chat ? "messages take" : r->n_prompts > 1 ? "prompt %d has" : "prompt has", k);
        if (n >= mdl->ctx)
            return BADC(what, "context_length_exceeded",
                        "this model's context is %d tokens and the %s %lld tokens: shorten it", mdl->ctx, label, n);
        if (need > mdl->ctx)
            return BADC(what, "context_length_exceeded",
                        "this model's context is %d tokens; the %s %lld tokens and max_tokens asks for %d more "
                        "(%lld in all): lower max_tokens to %lld or less",
                        mdl->ctx, label, n, r->sp.max_tokens, need, mdl->ctx - n);
    }
    return true;
}
