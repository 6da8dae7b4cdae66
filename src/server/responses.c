/* POST /v1/responses: the subset of OpenAI's Responses API that the openai
 * client's responses.create uses (input as a string or items, instructions,
 * max_output_tokens, function tools, text.format, reasoning.effort), as the
 * chat request it means; the output as output items (message / output_text,
 * reasoning, function_call), streamed as response.* events or returned as
 * the response object. Anything that needs state kept between requests
 * (previous_response_id, conversation, stored items) or a built-in tool is a
 * 400 that names it. */
#include "og_endpoints.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BAD(param, ...) og_api_error(e, 400, "invalid_request_error", param, NULL, __VA_ARGS__)
#define UNSUPPORTED(param, ...) og_api_error(e, 400, "invalid_request_error", param, "unsupported_parameter", __VA_ARGS__)
#define OOM() og_api_error(e, 500, "server_error", NULL, NULL, "out of memory")

static json_t *opt(json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    return json_is_null(v) ? NULL : v;
}

/* An item's content (a string, or input_text / output_text / refusal parts)
 * as one string: a new reference, or NULL with *e filled. */
static json_t *content_string(json_t *c, const char *where, og_api_err *e) {
    if (json_is_string(c)) return json_incref(c);
    if (!json_is_array(c)) {
        BAD(where, "%s must be a string or an array of content parts", where);
        return NULL;
    }
    char *buf = NULL;
    size_t len = 0, i;
    json_t *p;
    char w[96];
    json_array_foreach(c, i, p) {
        snprintf(w, sizeof w, "%s[%zu]", where, i);
        const char *t = json_string_value(json_object_get(p, "type"));
        const char *key = t && !strcmp(t, "refusal") ? "refusal" : "text";
        json_t *tx = json_object_get(p, key);
        if (!t || (strcmp(t, "input_text") && strcmp(t, "output_text") && strcmp(t, "refusal") && strcmp(t, "text"))) {
            char pt[48];
            free(buf);
            if (t && (!strcmp(t, "input_image") || !strcmp(t, "input_file") || !strcmp(t, "input_audio")))
                UNSUPPORTED(w, "%s is an %s part: this server serves a text-only model", w, t);
            else
                BAD(w, "%s must be an input_text or output_text part (got %s)", w,
                    t ? og_printable(t, strlen(t), pt, sizeof pt) : "no type");
            return NULL;
        }
        if (!json_is_string(tx)) {
            free(buf);
            BAD(w, "%s.%s must be a string", w, key);
            return NULL;
        }
        char *nb = realloc(buf, len + json_string_length(tx) + 1);
        if (!nb) {
            free(buf);
            OOM();
            return NULL;
        }
        buf = nb;
        memcpy(buf + len, json_string_value(tx), json_string_length(tx));
        len += json_string_length(tx);
    }
    json_t *s = json_stringn(buf ? buf : "", len);
    free(buf);
    if (!s) OOM();
    return s;
}

/* The chat message function calls go into: the last one when it is an
 * assistant turn (consecutive calls are one turn), else a new one. */
static json_t *assistant_for_calls(json_t *msgs) {
    size_t n = json_array_size(msgs);
    json_t *m = n ? json_array_get(msgs, n - 1) : NULL;
    if (m && !strcmp(json_string_value(json_object_get(m, "role")), "assistant")) return m;
    m = json_pack("{s:s,s:n}", "role", "assistant", "content");
    if (!m || json_array_append_new(msgs, m)) return NULL;
    return m;
}

static bool item_to_chat(json_t *it, const char *w, json_t *msgs, og_api_err *e) {
    if (!json_is_object(it)) return BAD(w, "%s must be an object", w);
    const char *type = json_string_value(opt(it, "type"));
    if (opt(it, "type") && !type) return BAD(w, "%s.type must be a string", w);
    if (!type || !strcmp(type, "message")) {
        const char *role = json_string_value(json_object_get(it, "role"));
        static const char *const roles[] = {"user", "assistant", "system", "developer"};
        bool known = false;
        for (size_t k = 0; role && k < sizeof roles / sizeof *roles; k++) known |= !strcmp(role, roles[k]);
        if (!known) return BAD(w, "%s.role must be one of user, assistant, system, developer", w);
        char wc[112];
        snprintf(wc, sizeof wc, "%s.content", w);
        json_t *ic = json_object_get(it, "content");
        if (json_is_array(ic) && !json_array_size(ic)) return BAD(wc, "%s holds no content parts", wc);
        json_t *c = content_string(ic, wc, e);
        if (!c) return false;
        json_t *m = json_pack("{s:s,s:o}", "role", role, "content", c);
        return m && !json_array_append_new(msgs, m) ? true : OOM();
    }
    if (!strcmp(type, "function_call")) {
        json_t *id = json_object_get(it, "call_id"), *name = json_object_get(it, "name"),
               *args = json_object_get(it, "arguments");
        if (!json_is_string(id) || !json_is_string(name) || !json_is_string(args))
            return BAD(w, "%s (function_call) needs string call_id, name and arguments", w);
        if (!json_string_length(id)) return BAD(w, "%s.call_id must be a non-empty string", w);
        if (!json_string_length(name)) return BAD(w, "%s.name must be a non-empty string", w);
        json_t *m = assistant_for_calls(msgs);
        if (!m) return OOM();
        json_t *calls = json_object_get(m, "tool_calls");
        if (!calls && json_object_set_new(m, "tool_calls", calls = json_array())) return OOM();
        json_t *call = json_pack("{s:O,s:s,s:{s:O,s:O}}", "id", id, "type", "function", "function", "name", name,
                                 "arguments", args);
        return call && !json_array_append_new(calls, call) ? true : OOM();
    }
    if (!strcmp(type, "function_call_output")) {
        json_t *id = json_object_get(it, "call_id");
        if (!json_is_string(id)) return BAD(w, "%s (function_call_output) needs a string call_id", w);
        char wc[112];
        snprintf(wc, sizeof wc, "%s.output", w);
        json_t *out = content_string(json_object_get(it, "output"), wc, e);
        if (!out) return false;
        json_t *m = json_pack("{s:s,s:O,s:o}", "role", "tool", "tool_call_id", id, "content", out);
        return m && !json_array_append_new(msgs, m) ? true : OOM();
    }
    if (!strcmp(type, "reasoning")) return true; /* earlier reasoning (summaries): not rendered back */
    char pt[64];
    return UNSUPPORTED(w, "%s: input items of type '%s' are not supported by this server (message, function_call, "
                          "function_call_output, reasoning)",
                       w, og_printable(type, strlen(type), pt, sizeof pt));
}

/* A function tool {type: "function", name, description?, parameters?,
 * strict?}; any other type is a built-in (hosted) tool. */
static bool read_tool(json_t *t, const char *w, og_ep_tool *f, og_api_err *e) {
    const char *type = json_string_value(json_object_get(t, "type"));
    if (!type) return BAD(w, "%s must be an object with a string 'type'", w);
    if (strcmp(type, "function")) {
        char pt[64];
        return UNSUPPORTED(w, "%s: the built-in tool '%s' is not supported by this server (function tools only)", w,
                           og_printable(type, strlen(type), pt, sizeof pt));
    }
    *f = (og_ep_tool){json_object_get(t, "name"), opt(t, "description"), opt(t, "parameters"), opt(t, "strict")};
    if (f->description && !json_is_string(f->description)) return BAD(w, "%s.description must be a string", w);
    if (f->parameters && !json_is_object(f->parameters)) return BAD(w, "%s.parameters must be a JSON Schema object", w);
    if (f->strict && !json_is_boolean(f->strict)) return BAD(w, "%s.strict must be true or false", w);
    return true;
}

static bool tools_to_chat(json_t *root, json_t *chat, og_api_err *e) {
    json_t *tools = opt(root, "tools"), *tc = opt(root, "tool_choice");
    if (tools && !og_ep_tools_to_chat(tools, chat, read_tool, e)) return false;
    if (!tc) return true;
    json_t *choice = NULL;
    if (json_is_string(tc)) {
        const char *s = json_string_value(tc);
        if (strcmp(s, "auto") && strcmp(s, "none") && strcmp(s, "required"))
            return BAD("tool_choice", "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": "
                                      "\"function\", \"name\": ...}");
        choice = json_incref(tc);
    } else if (json_is_object(tc)) {
        const char *type = json_string_value(json_object_get(tc, "type"));
        json_t *name = json_object_get(tc, "name");
        if (!type || strcmp(type, "function")) {
            char pt[64];
            return UNSUPPORTED("tool_choice", "tool_choice of type '%s' is not supported by this server (auto, none, "
                                              "required, function)",
                               type ? og_printable(type, strlen(type), pt, sizeof pt) : "(none)");
        }
        if (!json_is_string(name)) return BAD("tool_choice", "tool_choice of type \"function\" needs a 'name'");
        choice = json_pack("{s:s,s:{s:O}}", "type", "function", "function", "name", name);
    } else {
        return BAD("tool_choice", "'tool_choice' must be a string or an object");
    }
    if (!choice || json_object_set_new(chat, "tool_choice", choice)) return OOM();
    return true;
}

/* text.format -> response_format (the chat request's shape). */
static bool format_to_chat(json_t *root, json_t *chat, og_api_err *e) {
    json_t *text = opt(root, "text");
    if (!text) return true;
    if (!json_is_object(text)) return BAD("text", "'text' must be an object");
    json_t *f = opt(text, "format");
    if (!f) return true;
    const char *t = json_string_value(json_object_get(f, "type"));
    if (!t) return BAD("text.format", "'text.format' must be an object with a 'type'");
    json_t *rf;
    if (!strcmp(t, "text")) return true;
    if (!strcmp(t, "json_object")) {
        rf = json_pack("{s:s}", "type", "json_object");
    } else if (!strcmp(t, "json_schema")) {
        json_t *js = json_pack("{s:O?,s:O?,s:O?,s:O?}", "name", json_object_get(f, "name"), "schema",
                               json_object_get(f, "schema"), "strict", json_object_get(f, "strict"), "description",
                               json_object_get(f, "description"));
        rf = js ? json_pack("{s:s,s:o}", "type", "json_schema", "json_schema", js) : NULL;
    } else {
        char pt[48];
        return BAD("text.format", "text.format type '%s' is not supported (text, json_object, json_schema)",
                   og_printable(t, strlen(t), pt, sizeof pt));
    }
    if (!rf || json_object_set_new(chat, "response_format", rf)) return OOM();
    return true;
}

bool og_resp_to_chat(json_t *root, json_t **chat, json_t **echo, og_api_err *e) {
    *chat = *echo = NULL;
    if (!json_is_object(root)) return BAD(NULL, "the body must be a JSON object");
    /* state kept between requests, and hosted features: named, never ignored */
    static const struct {
        const char *field, *why;
    } refused[] = {
        {"previous_response_id", "this server keeps no responses: send the whole conversation in 'input'"},
        {"conversation", "this server keeps no conversations: send the whole conversation in 'input'"},
        {"prompt", "stored prompt templates are not supported: send 'instructions' and 'input'"},
        {"max_tool_calls", "a limit on built-in tool calls is not supported"},
    };
    for (size_t k = 0; k < sizeof refused / sizeof *refused; k++)
        if (opt(root, refused[k].field))
            return UNSUPPORTED(refused[k].field, "'%s' is not supported by this server: %s", refused[k].field,
                               refused[k].why);
    static const char *const flags[] = {"background", "store"};
    for (size_t k = 0; k < 2; k++) {
        json_t *b = opt(root, flags[k]);
        if (b && !json_is_boolean(b)) return BAD(flags[k], "'%s' must be true or false", flags[k]);
    }
    if (json_is_true(opt(root, "background")))
        return UNSUPPORTED("background", "'background' responses are not supported by this server");
    if (json_is_true(opt(root, "store")))
        return UNSUPPORTED("store", "'store': true is not supported: this server does not store responses (send "
                                    "false or leave it out)");
    json_t *tr = opt(root, "truncation");
    if (tr && !(json_is_string(tr) && !strcmp(json_string_value(tr), "disabled")))
        return UNSUPPORTED("truncation", "'truncation' must be \"disabled\" on this server: an input over the context "
                                         "is refused, never cut");
    json_t *inc = opt(root, "include");
    if (inc && !json_is_array(inc)) return BAD("include", "'include' must be an array");
    if (json_array_size(inc))
        return UNSUPPORTED("include", "'include' is not supported by this server (send an empty array or leave it out)");
    json_t *user = opt(root, "user");
    if (user && !json_is_string(user)) return BAD("user", "'user' must be a string");
    json_t *tl = opt(root, "top_logprobs");
    if (tl && !(json_is_integer(tl) && json_integer_value(tl) == 0))
        return UNSUPPORTED("top_logprobs", "'top_logprobs' is not supported on /v1/responses (use /v1/chat/completions)");
    json_t *c = json_object(), *msgs = json_array(), *v;
    if (!c || !msgs || json_object_set_new(c, "messages", msgs)) {
        json_decref(c);
        return OOM();
    }
    v = opt(root, "model");
    if (v && !json_is_string(v)) {
        BAD("model", "'model' must be a string");
        goto fail;
    }
    if (v) json_object_set(c, "model", v);
    json_t *ins = opt(root, "instructions");
    if (ins && !json_is_string(ins)) {
        BAD("instructions", "'instructions' must be a string");
        goto fail;
    }
    if (ins && json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "system", "content", ins))) {
        OOM();
        goto fail;
    }
    json_t *in = json_object_get(root, "input");
    if (!in || json_is_null(in)) {
        BAD("input", "'input' is required: a string or an array of input items");
        goto fail;
    }
    if (json_is_string(in)) {
        if (json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "user", "content", in))) {
            OOM();
            goto fail;
        }
    } else if (json_is_array(in)) {
        if (json_array_size(in) > 100000) {
            BAD("input", "too many input items (%zu)", json_array_size(in));
            goto fail;
        }
        size_t i;
        json_t *it;
        char w[48];
        json_array_foreach(in, i, it) {
            snprintf(w, sizeof w, "input[%zu]", i);
            if (!item_to_chat(it, w, msgs, e)) goto fail;
        }
    } else {
        BAD("input", "'input' must be a string or an array of input items");
        goto fail;
    }
    if (!json_array_size(msgs)) {
        BAD("input", "'input' holds no message");
        goto fail;
    }
    /* a last assistant message would be a prefill the response continues: not done here */
    json_t *last = json_array_get(in, json_array_size(in) - 1);
    const char *lt = json_string_value(json_object_get(last, "type")), *lr = json_string_value(json_object_get(last, "role"));
    if ((!lt || !strcmp(lt, "message")) && lr && !strcmp(lr, "assistant")) {
        BAD("input", "the last input item is an assistant message (a prefill to continue): not supported by this "
                     "server; end with a user message");
        goto fail;
    }
    v = opt(root, "max_output_tokens");
    if (v && (!json_is_integer(v) || json_integer_value(v) < 1)) {
        BAD("max_output_tokens", "'max_output_tokens' must be an integer >= 1");
        goto fail;
    }
    if (v) json_object_set(c, "max_tokens", v);
    static const char *const pass[] = {"temperature", "top_p", "stream", "parallel_tool_calls"};
    for (size_t k = 0; k < sizeof pass / sizeof *pass; k++)
        if ((v = opt(root, pass[k]))) json_object_set(c, pass[k], v);
    v = opt(root, "reasoning");
    if (v) {
        json_t *eff = opt(v, "effort");
        if (!json_is_object(v)) {
            BAD("reasoning", "'reasoning' must be an object with a string 'effort'");
            goto fail;
        }
        if (eff && !json_is_string(eff)) {
            BAD("reasoning.effort", "'reasoning.effort' must be a string");
            goto fail;
        }
        if (eff) json_object_set(c, "reasoning_effort", eff);
    }
    if (!tools_to_chat(root, c, e) || !format_to_chat(root, c, e)) goto fail;
    v = opt(root, "metadata");
    if (v && !json_is_object(v)) {
        BAD("metadata", "'metadata' must be an object");
        goto fail;
    }
    /* what the response object repeats of the request */
    json_t *ec = json_pack("{s:O?,s:O?,s:O?,s:O?,s:O?,s:O?,s:O?,s:O?,s:O?}", "instructions", ins, "max_output_tokens",
                           opt(root, "max_output_tokens"), "metadata", opt(root, "metadata"), "temperature",
                           opt(root, "temperature"), "top_p", opt(root, "top_p"), "parallel_tool_calls",
                           opt(root, "parallel_tool_calls"), "tool_choice", opt(root, "tool_choice"), "tools",
                           opt(root, "tools"), "user", opt(root, "user"));
    if (!ec) {
        OOM();
        goto fail;
    }
    static const struct {
        const char *k, *dflt;
    } dflt[] = {{"metadata", "{}"}, {"parallel_tool_calls", "true"}, {"tool_choice", "\"auto\""}, {"tools", "[]"},
                {"temperature", "1"}, {"top_p", "1"}};
    for (size_t k = 0; k < sizeof dflt / sizeof *dflt; k++)
        if (json_is_null(json_object_get(ec, dflt[k].k)))
            json_object_set_new(ec, dflt[k].k, json_loads(dflt[k].dflt, JSON_DECODE_ANY, NULL));
    json_t *text = opt(root, "text"), *fmt = text ? opt(text, "format") : NULL;
    json_object_set_new(ec, "text",
                        json_pack("{s:o}", "format", fmt ? json_incref(fmt) : json_pack("{s:s}", "type", "text")));
    json_object_set_new(ec, "reasoning", json_pack("{s:O?,s:n}", "effort", opt(opt(root, "reasoning"), "effort"), "summary"));
    json_object_set_new(ec, "truncation", json_string("disabled"));
    json_object_set_new(ec, "store", json_false());
    *chat = c;
    *echo = ec;
    return true;
fail:
    json_decref(c);
    return false;
}

/* ---- output ---------------------------------------------------------------- */

static void item_id(const og_ep_out *o, int i, char *out, size_t cap) {
    static const char *const prefix[] = {[OG_BLK_TEXT] = "msg_", [OG_BLK_THINKING] = "rs_", [OG_BLK_TOOL] = "fc_"};
    og_ep_id(out, cap, prefix[o->blk[i].kind], o->meta.id_seed, (uint64_t)i + 1);
}

/* The content part of a message / reasoning item (empty: as it opens). */
static json_t *part_json(const og_blk *b, bool empty) {
    json_t *t = og_api_jstr(b->text, empty ? 0 : b->len);
    if (b->kind == OG_BLK_THINKING) return json_pack("{s:s,s:o}", "type", "reasoning_text", "text", t);
    return json_pack("{s:s,s:o,s:[],s:[]}", "type", "output_text", "text", t, "annotations", "logprobs");
}

/* Output item i; done: complete (else as it opens, with no content yet). */
static json_t *item_json(const og_ep_out *o, int i, bool done) {
    const og_blk *b = &o->blk[i];
    char id[48];
    item_id(o, i, id, sizeof id);
    const char *status = done ? "completed" : "in_progress";
    switch (b->kind) {
    case OG_BLK_TEXT:
        return json_pack("{s:s,s:s,s:s,s:s,s:o}", "id", id, "type", "message", "status", status, "role", "assistant",
                         "content", done ? json_pack("[o]", part_json(b, false)) : json_array());
    case OG_BLK_THINKING:
        return json_pack("{s:s,s:s,s:[],s:o}", "id", id, "type", "reasoning", "summary", "content",
                         done ? json_pack("[o]", part_json(b, false)) : json_array());
    case OG_BLK_TOOL:
        return json_pack("{s:s,s:s,s:s,s:s,s:s,s:o}", "id", id, "type", "function_call", "status", status, "call_id",
                         b->call_id, "name", b->name ? b->name : "", "arguments",
                         og_api_jstr(b->text, done ? b->len : 0));
    }
    return NULL;
}

/* The response object: status in_progress (no output, no usage yet), or as it ended. */
static json_t *response_json(og_ep_out *o, bool ended) {
    json_t *r = json_deep_copy(o->echo);
    json_t *out = json_array();
    for (int i = 0; ended && i < o->n_blk; i++) json_array_append_new(out, item_json(o, i, true));
    bool cut = o->finish == OG_FINISH_LENGTH;
    int n_reason = og_outparse_reasoning_tokens(o->parser); /* of output_tokens, as chat's completion_tokens_details */
    json_t *fields = json_pack(
        "{s:s,s:s,s:I,s:s,s:n,s:o,s:s,s:o,s:n,s:o}", "id", o->id, "object", "response", "created_at",
        (json_int_t)o->meta.created, "status", !ended ? "in_progress" : cut ? "incomplete" : "completed", "error",
        "incomplete_details", ended && cut ? json_pack("{s:s}", "reason", "max_output_tokens") : json_null(), "model",
        o->meta.model, "output", out, "previous_response_id", "usage",
        ended ? json_pack("{s:i,s:{s:i},s:i,s:{s:i},s:i}", "input_tokens", o->n_prompt, "input_tokens_details",
                          "cached_tokens", o->n_cached, "output_tokens", o->n_gen, "output_tokens_details", "reasoning_tokens",
                          n_reason, "total_tokens", o->n_prompt + o->n_gen)
              : json_null());
    if (!r || !fields || json_object_update(r, fields)) {
        json_decref(r);
        r = NULL;
        o->oom = true;
    }
    json_decref(fields);
    return r;
}

/* An event with its type and sequence_number added. */
static void event(og_ep_out *o, const char *type, json_t *data) {
    if (data) {
        json_object_set_new(data, "type", json_string(type));
        json_object_set_new(data, "sequence_number", json_integer((json_int_t)o->seq_no++));
    }
    og_ep_sse_event(o, type, data);
}

static void ev_begin(og_ep_out *o) {
    event(o, "response.created", json_pack("{s:o}", "response", response_json(o, false)));
    event(o, "response.in_progress", json_pack("{s:o}", "response", response_json(o, false)));
}

static void ev_blk_start(og_ep_out *o, int i) {
    event(o, "response.output_item.added", json_pack("{s:i,s:o}", "output_index", i, "item", item_json(o, i, false)));
    if (o->blk[i].kind == OG_BLK_TOOL) return;
    char id[48];
    item_id(o, i, id, sizeof id);
    event(o, "response.content_part.added", json_pack("{s:s,s:i,s:i,s:o}", "item_id", id, "output_index", i,
                                                      "content_index", 0, "part", part_json(&o->blk[i], true)));
}

static void ev_blk_delta(og_ep_out *o, int i, const char *t, size_t n) {
    static const char *const type[] = {[OG_BLK_TEXT] = "response.output_text.delta",
                                       [OG_BLK_THINKING] = "response.reasoning_text.delta",
                                       [OG_BLK_TOOL] = "response.function_call_arguments.delta"};
    char id[48];
    item_id(o, i, id, sizeof id);
    json_t *d = json_pack("{s:s,s:i,s:o}", "item_id", id, "output_index", i, "delta", og_api_jstr(t, n));
    if (d && o->blk[i].kind != OG_BLK_TOOL) json_object_set_new(d, "content_index", json_integer(0));
    if (d && o->blk[i].kind == OG_BLK_TEXT) json_object_set_new(d, "logprobs", json_array());
    event(o, type[o->blk[i].kind], d);
}

static void ev_blk_stop(og_ep_out *o, int i) {
    const og_blk *b = &o->blk[i];
    char id[48];
    item_id(o, i, id, sizeof id);
    if (b->kind == OG_BLK_TOOL) {
        event(o, "response.function_call_arguments.done",
              json_pack("{s:s,s:i,s:s,s:o}", "item_id", id, "output_index", i, "name", b->name ? b->name : "",
                        "arguments", og_api_jstr(b->text, b->len)));
    } else {
        bool text = b->kind == OG_BLK_TEXT;
        json_t *d = json_pack("{s:s,s:i,s:i,s:o}", "item_id", id, "output_index", i, "content_index", 0, "text",
                              og_api_jstr(b->text, b->len));
        if (d && text) json_object_set_new(d, "logprobs", json_array());
        event(o, text ? "response.output_text.done" : "response.reasoning_text.done", d);
        event(o, "response.content_part.done", json_pack("{s:s,s:i,s:i,s:o}", "item_id", id, "output_index", i,
                                                         "content_index", 0, "part", part_json(b, false)));
    }
    event(o, "response.output_item.done", json_pack("{s:i,s:o}", "output_index", i, "item", item_json(o, i, true)));
}

static void ev_end(og_ep_out *o) {
    event(o, o->finish == OG_FINISH_LENGTH ? "response.incomplete" : "response.completed",
          json_pack("{s:o}", "response", response_json(o, true)));
}

static void ev_error(og_ep_out *o, const og_api_err *e) {
    event(o, "error", json_pack("{s:s?,s:o,s:s?}", "code", e->code ? e->code : e->type, "message",
                                og_api_jstr(e->message, strlen(e->message)), "param", e->param[0] ? e->param : NULL));
}

/* The Responses stream has no ping event: a comment line, which SSE readers skip. */
static void ev_keepalive(og_ep_out *o) { og_ep_sse_comment(o, "keep-alive"); }

static json_t *final_json(og_ep_out *o) { return response_json(o, true); }

const og_ep_ops og_resp_ops = {ev_begin, ev_blk_start, ev_blk_delta, ev_blk_stop, ev_end, ev_error, ev_keepalive,
                               final_json};
