/* POST /v1/messages and /v1/messages/count_tokens (the Anthropic Messages API,
 * shared/spec/anthropic-messages.md; § numbers below are its sections): the
 * request translated into the OpenAI chat request it means, and the output as
 * content blocks, streamed as the §4 events or returned as the §3 object. */
#include "og_endpoints.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BAD(param, ...) og_api_error(e, 400, "invalid_request_error", param, NULL, __VA_ARGS__)
#define OOM() og_api_error(e, 500, "server_error", NULL, NULL, "out of memory")

/* §1: the error type of each status. */
static const char *error_type(int status) {
    switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 405: return "invalid_request_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503:
    case 529: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

json_t *og_msgs_error_obj(const og_api_err *e) {
    return json_pack("{s:s,s:{s:s,s:o}}", "type", "error", "error", "type", error_type(e->status), "message",
                     og_api_jstr(e->message, strlen(e->message)));
}

char *og_msgs_error_json(const og_api_err *e) {
    json_t *o = og_msgs_error_obj(e);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

/* ---- request (§2) -> OpenAI chat request ---------------------------------- */

/* absent or null */
static json_t *opt(json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    return json_is_null(v) ? NULL : v;
}

/* The block's "type" string, or a 400 naming where. */
static const char *block_type(json_t *b, const char *where, og_api_err *e) {
    const char *t = json_string_value(json_object_get(b, "type"));
    if (!t) BAD(where, "%s must be an object with a string 'type'", where);
    return t;
}

/* Appends s to a growing text (\n\n between the pieces of merged turns when sep). */
static bool text_add(char **buf, size_t *len, const char *s, size_t n, bool sep, og_api_err *e) {
    size_t add = n + (sep && *len ? 2 : 0);
    char *b = realloc(*buf, *len + add + 1);
    if (!b) return OOM();
    if (sep && *len) {
        memcpy(b + *len, "\n\n", 2);
        *len += 2;
    }
    memcpy(b + *len, s, n);
    *len += n;
    b[*len] = 0;
    *buf = b;
    return true;
}

/* A string or an array of text blocks (system, tool_result content) as one
 * text (text blocks concatenated), malloc'ed in *out. */
static bool text_of(json_t *c, const char *where, char **out, og_api_err *e) {
    *out = NULL;
    size_t len = 0;
    if (json_is_string(c)) return text_add(out, &len, json_string_value(c), json_string_length(c), false, e);
    if (!json_is_array(c)) return BAD(where, "%s must be a string or an array of text blocks", where);
    size_t i;
    json_t *b;
    char w[96];
    json_array_foreach(c, i, b) {
        snprintf(w, sizeof w, "%s[%zu]", where, i);
        const char *t = block_type(b, w, e);
        if (!t) goto bad;
        if (strcmp(t, "text")) {
            char pt[48];
            BAD(w, "%s is a '%s' block: only text blocks are read here (this server serves a text-only model)", w,
                og_printable(t, strlen(t), pt, sizeof pt));
            goto bad;
        }
        json_t *tx = json_object_get(b, "text");
        if (!json_is_string(tx)) {
            BAD(w, "%s.text must be a string", w);
            goto bad;
        }
        if (!text_add(out, &len, json_string_value(tx), json_string_length(tx), false, e)) goto bad;
    }
    if (!*out) return text_add(out, &len, "", 0, false, e);
    return true;
bad:
    free(*out);
    *out = NULL;
    return false;
}

/* The chat message the translation is growing (the last one, if it has role). */
static json_t *last_with_role(json_t *msgs, const char *role) {
    size_t n = json_array_size(msgs);
    json_t *m = n ? json_array_get(msgs, n - 1) : NULL;
    return m && !strcmp(json_string_value(json_object_get(m, "role")), role) ? m : NULL;
}

/* Adds text to the chat message of role (merging consecutive same-role turns,
 * §2: their texts joined by a blank line), opening one when the last is not. */
static bool add_text(json_t *msgs, const char *role, const char *s, size_t n, og_api_err *e) {
    json_t *m = last_with_role(msgs, role);
    if (!m) {
        m = json_pack("{s:s,s:n}", "role", role, "content");
        if (!m || json_array_append_new(msgs, m)) return OOM();
    }
    json_t *c = json_object_get(m, "content");
    char *buf = NULL;
    size_t len = 0;
    if (json_is_string(c) && !text_add(&buf, &len, json_string_value(c), json_string_length(c), false, e)) return false;
    bool ok = text_add(&buf, &len, s, n, json_is_string(c), e) &&
              (json_object_set_new(m, "content", json_stringn(buf, len)) == 0 || OOM());
    free(buf);
    return ok;
}

/* A tool_result block (user turns) as a tool message. */
static bool tool_result(json_t *msgs, json_t *b, const char *w, og_api_err *e) {
    json_t *id = json_object_get(b, "tool_use_id"), *c = opt(b, "content"), *err = opt(b, "is_error");
    if (!json_is_string(id) || !json_string_length(id))
        return BAD(w, "%s.tool_use_id must be the id of the tool_use block it answers", w);
    if (err && !json_is_boolean(err)) return BAD(w, "%s.is_error must be true or false", w);
    char *text = NULL;
    char wc[112];
    snprintf(wc, sizeof wc, "%s.content", w);
    if (c && !text_of(c, wc, &text, e)) return false;
    /* an error result says so in the text the model reads */
    json_t *m = json_pack("{s:s,s:O,s:s+}", "role", "tool", "tool_call_id", id, "content", json_is_true(err) ? "Error: " : "",
                          text ? text : "");
    free(text);
    return m && !json_array_append_new(msgs, m) ? true : OOM();
}

/* A tool_use block (assistant turns) as a tool call of m (input as JSON text). */
static bool tool_use(json_t *m, json_t *b, const char *w, og_api_err *e) {
    json_t *id = json_object_get(b, "id"), *name = json_object_get(b, "name"), *in = json_object_get(b, "input");
    if (!json_is_string(id) || !json_string_length(id)) return BAD(w, "%s.id must be a non-empty string", w);
    if (!json_is_string(name) || !json_string_length(name)) return BAD(w, "%s.name must be a non-empty string", w);
    if (!json_is_object(in)) return BAD(w, "%s.input must be an object", w);
    char *args = json_dumps(in, JSON_COMPACT);
    if (!args) return OOM();
    json_t *calls = json_object_get(m, "tool_calls");
    if (!calls && json_object_set_new(m, "tool_calls", calls = json_array())) {
        free(args);
        return OOM();
    }
    json_t *call =
        json_pack("{s:O,s:s,s:{s:O,s:s}}", "id", id, "type", "function", "function", "name", name, "arguments", args);
    free(args);
    return call && !json_array_append_new(calls, call) ? true : OOM();
}

/* A thinking block (assistant turns) as m's reasoning_content (the DeepSeek
 * API's name), after what earlier blocks gave. */
static bool thinking(json_t *m, json_t *b, const char *w, og_api_err *e) {
    json_t *th = json_object_get(b, "thinking"), *r = json_object_get(m, "reasoning_content");
    if (!json_is_string(th)) return BAD(w, "%s.thinking must be a string", w);
    char *buf = NULL;
    size_t len = 0;
    bool ok = (!r || text_add(&buf, &len, json_string_value(r), json_string_length(r), false, e)) &&
              text_add(&buf, &len, json_string_value(th), json_string_length(th), r != NULL, e) &&
              (json_object_set_new(m, "reasoning_content", json_stringn(buf, len)) == 0 || OOM());
    free(buf);
    return ok;
}

/* One turn's blocks (§2): text for either role; tool_result blocks of a user
 * turn become tool messages, in order; tool_use and thinking blocks of an
 * assistant turn its tool calls and reasoning. */
static bool turn_blocks(json_t *msgs, bool user, json_t *content, const char *where, og_api_err *e) {
    const char *role = user ? "user" : "assistant";
    json_t *m = user ? NULL : last_with_role(msgs, "assistant");
    if (!user && !m) {
        m = json_pack("{s:s,s:n}", "role", "assistant", "content");
        if (!m || json_array_append_new(msgs, m)) return OOM();
    }
    size_t i;
    json_t *b;
    char w[96];
    json_array_foreach(content, i, b) {
        snprintf(w, sizeof w, "%s[%zu]", where, i);
        const char *t = block_type(b, w, e);
        if (!t) return false;
        json_t *tx = json_object_get(b, "text");
        bool ok;
        if (!strcmp(t, "text"))
            ok = json_is_string(tx) ? add_text(msgs, role, json_string_value(tx), json_string_length(tx), e)
                                    : BAD(w, "%s.text must be a string", w);
        else if (user && !strcmp(t, "tool_result")) ok = tool_result(msgs, b, w, e);
        else if (!user && !strcmp(t, "tool_use")) ok = tool_use(m, b, w, e);
        else if (!user && !strcmp(t, "thinking")) ok = thinking(m, b, w, e);
        else if (!user && !strcmp(t, "redacted_thinking")) ok = true; /* another model's sealed reasoning */
        else if (!strcmp(t, "image") || !strcmp(t, "document"))
            ok = BAD(w, "%s is an %s block: this server serves a text-only model", w, t);
        else {
            char pt[48];
            ok = BAD(w, "%s: a%s turn's block type '%s' is not supported (%s)", w, user ? " user" : "n assistant",
                     og_printable(t, strlen(t), pt, sizeof pt), user ? "text, tool_result" : "text, tool_use, thinking");
        }
        if (!ok) return false;
    }
    return true;
}

static bool messages_to_chat(json_t *root, json_t *msgs, og_api_err *e) {
    json_t *in = json_object_get(root, "messages");
    if (!in) return BAD("messages", "'messages' is required");
    if (!json_is_array(in)) return BAD("messages", "'messages' must be an array");
    if (!json_array_size(in)) return BAD("messages", "'messages' must hold at least one message");
    if (json_array_size(in) > 100000) return BAD("messages", "too many messages (%zu)", json_array_size(in));
    size_t i;
    json_t *m;
    char w[64];
    json_array_foreach(in, i, m) {
        snprintf(w, sizeof w, "messages[%zu]", i);
        if (!json_is_object(m)) return BAD(w, "%s must be an object", w);
        const char *role = json_string_value(json_object_get(m, "role"));
        bool user = role && !strcmp(role, "user"), assistant = role && !strcmp(role, "assistant");
        if (!user && !assistant) {
            char pr[48];
            return BAD(w, "%s.role must be \"user\" or \"assistant\" (got %s); the system prompt is the top-level "
                          "'system' field",
                       w, role ? og_printable(role, strlen(role), pr, sizeof pr) : "no string");
        }
        json_t *c = json_object_get(m, "content");
        snprintf(w, sizeof w, "messages[%zu].content", i);
        if (json_is_string(c)) {
            if (!add_text(msgs, role, json_string_value(c), json_string_length(c), e)) return false;
        } else if (json_is_array(c) && !json_array_size(c)) {
            return BAD(w, "%s holds no content blocks", w);
        } else if (json_is_array(c)) {
            if (!turn_blocks(msgs, user, c, w, e)) return false;
        } else {
            return BAD(w, "%s must be a string or an array of content blocks", w);
        }
    }
    /* a last assistant turn would be a prefill the response continues: not done here */
    const char *last = json_string_value(json_object_get(json_array_get(in, json_array_size(in) - 1), "role"));
    if (!strcmp(last, "assistant"))
        return BAD("messages", "the last message is an assistant turn (a prefill to continue): not supported by this "
                               "server; end with a user turn");
    /* an assistant turn of only thinking blocks has no content: give it empty text */
    json_array_foreach(msgs, i, m) {
        if (json_is_null(json_object_get(m, "content")) && !json_object_get(m, "tool_calls") &&
            json_object_set_new(m, "content", json_string("")))
            return OOM();
    }
    return true;
}

/* §2: a tool {name, description?, input_schema}; a "type" other than custom
 * names a built-in (server or client) tool, which this server does not have. */
static bool read_tool(json_t *t, const char *w, og_ep_tool *f, og_api_err *e) {
    const char *type = json_string_value(opt(t, "type"));
    if (opt(t, "type") && (!type || strcmp(type, "custom"))) {
        char pt[64];
        return BAD(w, "%s: the built-in tool type '%s' is not supported by this server; define the tool with name, "
                      "description and input_schema",
                   w, type ? og_printable(type, strlen(type), pt, sizeof pt) : "(not a string)");
    }
    *f = (og_ep_tool){json_object_get(t, "name"), opt(t, "description"), opt(t, "input_schema"), NULL};
    if (f->description && !json_is_string(f->description)) return BAD(w, "%s.description must be a string", w);
    if (!json_is_object(f->parameters)) return BAD(w, "%s.input_schema must be a JSON Schema object", w);
    return true;
}

/* tools (§2) as OpenAI function tools; tool_choice onto the chat's. */
static bool tools_to_chat(json_t *root, json_t *chat, og_api_err *e) {
    json_t *tools = opt(root, "tools"), *tc = opt(root, "tool_choice");
    if (tools && !og_ep_tools_to_chat(tools, chat, read_tool, e)) return false;
    size_t n = json_array_size(tools);
    if (!tc) return true;
    if (!json_is_object(tc)) return BAD("tool_choice", "'tool_choice' must be an object with a 'type'");
    const char *type = json_string_value(json_object_get(tc, "type"));
    json_t *dp = opt(tc, "disable_parallel_tool_use");
    if (dp && !json_is_boolean(dp)) return BAD("tool_choice", "'tool_choice.disable_parallel_tool_use' must be a boolean");
    json_t *choice;
    if (type && !strcmp(type, "auto")) choice = json_string("auto");
    else if (type && !strcmp(type, "none")) choice = json_string("none");
    else if (type && !strcmp(type, "any")) choice = json_string("required");
    else if (type && !strcmp(type, "tool")) {
        json_t *name = json_object_get(tc, "name");
        if (!json_is_string(name)) return BAD("tool_choice", "tool_choice of type \"tool\" needs the tool's 'name'");
        bool found = false;
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t) found |= json_equal(json_object_get(t, "name"), name);
        if (!found) {
            char pn[80];
            return BAD("tool_choice", "tool_choice names the tool '%s', which is not in 'tools'",
                       og_printable(json_string_value(name), json_string_length(name), pn, sizeof pn));
        }
        choice = json_pack("{s:s,s:{s:O}}", "type", "function", "function", "name", name);
    } else {
        return BAD("tool_choice", "'tool_choice.type' must be one of auto, any, tool, none");
    }
    if (!choice) return OOM();
    if ((strcmp(type, "auto") && strcmp(type, "none")) && !n) {
        json_decref(choice);
        return BAD("tool_choice", "tool_choice \"%s\" needs 'tools'", type);
    }
    if (!n) { /* auto / none without tools: nothing to choose from */
        json_decref(choice);
        return true;
    }
    if (json_object_set_new(chat, "tool_choice", choice)) return OOM();
    if (json_is_true(dp) && json_object_set_new(chat, "parallel_tool_calls", json_false())) return OOM();
    return true;
}

bool og_msgs_to_chat(json_t *root, bool count_only, json_t **chat, og_api_err *e) {
    *chat = NULL;
    if (!json_is_object(root)) return BAD(NULL, "the body must be a JSON object");
    json_t *c = json_object(), *msgs = json_array();
    if (!c || !msgs || json_object_set_new(c, "messages", msgs)) {
        json_decref(c);
        return OOM();
    }
    json_t *model = json_object_get(root, "model"), *v;
    const char *bad = NULL; /* the first field whose check failed (e is filled) */
    if (!json_is_string(model)) {
        BAD("model", "'model' is required: a string");
        goto fail;
    }
    json_object_set(c, "model", model);
    v = opt(root, "max_tokens");
    if (!count_only) {
        if (!v) {
            BAD("max_tokens", "'max_tokens' is required");
            goto fail;
        }
        if (!json_is_integer(v) || json_integer_value(v) < 1) {
            BAD("max_tokens", "'max_tokens' must be an integer >= 1");
            goto fail;
        }
        json_object_set(c, "max_tokens", v);
    }
    v = opt(root, "system");
    if (v) {
        char *sys;
        if (!text_of(v, "system", &sys, e)) goto fail;
        int rc = json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "system", "content", sys));
        free(sys);
        if (rc) {
            OOM();
            goto fail;
        }
    }
    if (!messages_to_chat(root, msgs, e) || !tools_to_chat(root, c, e)) goto fail;
    v = opt(root, "stop_sequences");
    if (v) {
        if (!json_is_array(v)) bad = "stop_sequences";
        size_t i;
        json_t *s;
        json_array_foreach(v, i, s) if (!json_is_string(s) || !json_string_length(s)) bad = "stop_sequences";
        if (bad) {
            BAD(bad, "'stop_sequences' must be an array of non-empty strings");
            goto fail;
        }
        if (json_array_size(v) > OG_ENGINE_MAX_STOP) {
            BAD("stop_sequences", "'stop_sequences' holds at most %d strings on this server (got %zu)",
                OG_ENGINE_MAX_STOP, json_array_size(v));
            goto fail;
        }
        if (json_array_size(v)) json_object_set(c, "stop", v);
    }
    /* §2: temperature 0..1 (the chat request's range is wider); top_p, top_k as given */
    v = opt(root, "temperature");
    if (v && (!json_is_number(v) || json_number_value(v) < 0 || json_number_value(v) > 1)) {
        BAD("temperature", "'temperature' must be a number between 0 and 1");
        goto fail;
    }
    static const char *const pass[] = {"temperature", "top_p", "top_k"};
    for (size_t k = 0; k < sizeof pass / sizeof *pass; k++)
        if ((v = opt(root, pass[k]))) json_object_set(c, pass[k], v);
    v = opt(root, "stream");
    if (v && !json_is_boolean(v)) {
        BAD("stream", "'stream' must be true or false");
        goto fail;
    }
    if (v && !count_only) json_object_set(c, "stream", v);
    v = opt(root, "metadata");
    if (v && !json_is_object(v)) {
        BAD("metadata", "'metadata' must be an object");
        goto fail;
    }
    v = opt(root, "thinking");
    if (v) {
        const char *t = json_string_value(json_object_get(v, "type"));
        bool on = t && !strcmp(t, "enabled");
        if (!t || (!on && strcmp(t, "disabled"))) {
            BAD("thinking", "'thinking' must be {\"type\": \"enabled\", \"budget_tokens\": N} or {\"type\": \"disabled\"}");
            goto fail;
        }
        json_t *b = json_object_get(v, "budget_tokens");
        if (on && (!json_is_integer(b) || json_integer_value(b) < 1)) {
            BAD("thinking", "'thinking.budget_tokens' must be an integer >= 1");
            goto fail;
        }
        /* the reasoning counts toward max_tokens, which caps it; the budget is not enforced apart */
        if (json_object_set_new(c, "chat_template_kwargs", json_pack("{s:b}", "thinking", on))) {
            OOM();
            goto fail;
        }
    }
    v = opt(root, "mcp_servers");
    if (v && (!json_is_array(v) || json_array_size(v))) {
        BAD("mcp_servers", "'mcp_servers' (server-side MCP tools) is not supported by this server");
        goto fail;
    }
    *chat = c;
    return true;
fail:
    json_decref(c);
    return false;
}

/* ---- output: §3 object and §4 events --------------------------------------- */

/* "toolu_" + the parser's call id without its "call_". */
static void tool_id(const og_blk *b, char *out, size_t cap) {
    snprintf(out, cap, "toolu_%s", strncmp(b->call_id, "call_", 5) ? b->call_id : b->call_id + 5);
}

/* The tool call's input as an object (the parser guarantees one; {} else). */
static json_t *tool_input(const og_blk *b) {
    json_t *in = json_loadb(b->text, b->len, 0, NULL);
    if (json_is_object(in)) return in;
    json_decref(in);
    return json_object();
}

static json_t *block_json(const og_blk *b, bool empty) {
    char id[64];
    switch (b->kind) {
    case OG_BLK_TEXT: return json_pack("{s:s,s:o}", "type", "text", "text", og_api_jstr(b->text, empty ? 0 : b->len));
    case OG_BLK_THINKING:
        return json_pack("{s:s,s:o,s:s}", "type", "thinking", "thinking", og_api_jstr(b->text, empty ? 0 : b->len),
                         "signature", "");
    case OG_BLK_TOOL:
        tool_id(b, id, sizeof id);
        return json_pack("{s:s,s:s,s:s,s:o}", "type", "tool_use", "id", id, "name", b->name ? b->name : "", "input",
                         empty ? json_object() : tool_input(b));
    }
    return NULL;
}

/* Anthropic's usage splits the prompt: input_tokens are the ones not read from
 * the cache, cache_read_input_tokens the ones that were (their sum is the
 * prompt, count_tokens' number; llama-server's /v1/messages reports them so). */
static json_t *usage_json(const og_ep_out *o) {
    return json_pack("{s:i,s:i,s:i,s:i}", "input_tokens", o->n_prompt - o->n_cached, "output_tokens", o->n_gen,
                     "cache_creation_input_tokens", 0, "cache_read_input_tokens", o->n_cached);
}

static const char *stop_reason(const og_ep_out *o) {
    if (o->finish == OG_FINISH_LENGTH) return "max_tokens";
    for (int i = 0; i < o->n_blk; i++)
        if (o->blk[i].kind == OG_BLK_TOOL) return "tool_use";
    return o->stop_index >= 0 ? "stop_sequence" : "end_turn";
}

static json_t *stop_sequence(const og_ep_out *o) {
    return o->stop_index >= 0 && o->stop_index < o->n_stop && !strcmp(stop_reason(o), "stop_sequence")
               ? json_string(o->stop[o->stop_index])
               : json_null();
}

/* The message object: ended (content, stop_reason) or, for message_start, empty. */
static json_t *message_json(og_ep_out *o, bool ended) {
    json_t *content = json_array();
    for (int i = 0; ended && i < o->n_blk; i++) json_array_append_new(content, block_json(&o->blk[i], false));
    json_t *m = json_pack("{s:s,s:s,s:s,s:s,s:o,s:o,s:o,s:o}", "id", o->id, "type", "message", "role", "assistant",
                          "model", o->meta.model, "content", content, "stop_reason",
                          ended ? json_string(stop_reason(o)) : json_null(), "stop_sequence",
                          ended ? stop_sequence(o) : json_null(), "usage", usage_json(o));
    if (!m) o->oom = true;
    return m;
}

static void ev_ping(og_ep_out *o) { og_ep_sse_event(o, "ping", json_pack("{s:s}", "type", "ping")); }

static void ev_begin(og_ep_out *o) {
    int n_gen = o->n_gen;
    o->n_gen = 0;
    og_ep_sse_event(o, "message_start", json_pack("{s:s,s:o}", "type", "message_start", "message", message_json(o, false)));
    o->n_gen = n_gen;
    ev_ping(o);
}

static void ev_blk_start(og_ep_out *o, int i) {
    og_ep_sse_event(o, "content_block_start", json_pack("{s:s,s:i,s:o}", "type", "content_block_start", "index", i,
                                                        "content_block", block_json(&o->blk[i], true)));
}

static void ev_blk_delta(og_ep_out *o, int i, const char *t, size_t n) {
    static const char *const kinds[][2] = {
        [OG_BLK_TEXT] = {"text_delta", "text"},
        [OG_BLK_THINKING] = {"thinking_delta", "thinking"},
        [OG_BLK_TOOL] = {"input_json_delta", "partial_json"},
    };
    const char *const *k = kinds[o->blk[i].kind];
    og_ep_sse_event(o, "content_block_delta", json_pack("{s:s,s:i,s:{s:s,s:o}}", "type", "content_block_delta", "index",
                                                        i, "delta", "type", k[0], k[1], og_api_jstr(t, n)));
}

static void ev_blk_stop(og_ep_out *o, int i) {
    if (o->blk[i].kind == OG_BLK_THINKING) /* the block's signature: none (a local model signs nothing) */
        og_ep_sse_event(o, "content_block_delta", json_pack("{s:s,s:i,s:{s:s,s:s}}", "type", "content_block_delta",
                                                            "index", i, "delta", "type", "signature_delta",
                                                            "signature", ""));
    og_ep_sse_event(o, "content_block_stop", json_pack("{s:s,s:i}", "type", "content_block_stop", "index", i));
}

static void ev_end(og_ep_out *o) {
    og_ep_sse_event(o, "message_delta", json_pack("{s:s,s:{s:s,s:o},s:o}", "type", "message_delta", "delta",
                                                  "stop_reason", stop_reason(o), "stop_sequence", stop_sequence(o),
                                                  "usage", usage_json(o)));
    og_ep_sse_event(o, "message_stop", json_pack("{s:s}", "type", "message_stop"));
}

static void ev_error(og_ep_out *o, const og_api_err *e) { og_ep_sse_event(o, "error", og_msgs_error_obj(e)); }

static json_t *final_json(og_ep_out *o) { return message_json(o, true); }

const og_ep_ops og_msgs_ops = {ev_begin, ev_blk_start, ev_blk_delta, ev_blk_stop, ev_end, ev_error, ev_ping, final_json};
