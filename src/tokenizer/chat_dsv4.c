/* The DeepSeek V4 and V4.1 chat encodings (deepseek4.md §5). Both ship as
 * Python encoders, not Jinja; this follows them:
 *  - V4: encoding/encoding_dsv4.py of DeepSeek-V4-Flash/Pro (encode_messages:
 *    merge_tool_messages, sort_tool_results_by_call_order, the drop_thinking
 *    rule, render_message).
 *  - V4.1: encoding/encoding.py and chat_template.jinja of DeepSeek-V4.1-Flash as
 *    the public renderers that follow them describe it (deepseek4.md §5 lists
 *    the differences from V4).
 * Shared shape: BOS, then the messages in order. Consecutive user and tool
 * messages form one user turn (<User> once, the parts joined by a blank line,
 * each tool result as <tool_result>...</tool_result>, results reordered stably
 * into the order of the latest assistant turn's calls by tool_call_id, an
 * unknown id counting as the first call). An assistant turn is [reasoning
 * </think>] content [tool calls in DSML] <EOS>, behind <Assistant> plus <think>
 * (its reasoning is shown) or </think>. In thinking mode the reasoning of turns
 * before the last user turn is dropped unless the request has tools.
 * Choices where the OpenAI request shape meets the encoders:
 *  - the request's tools join the first message when it is a system message,
 *    else an empty system message put first (as V4.1's template does): system
 *    text + "\n\n" + the tools block;
 *  - developer is system (openai-api.md; V4's encoder reads it as a user turn
 *    with its own tools, a shape OpenAI requests do not have);
 *  - the final <Assistant> header (+ <think> or </think>) is written when
 *    add_generation_prompt, after whatever came last, as llama.cpp's Jinja
 *    rendition of V4 and the V3 templates do (the encoders write it after a
 *    user turn whether asked or not, and never after an assistant turn);
 *  - V4: reasoning effort 100 (max) in thinking mode writes the think-max
 *    paragraph first; other efforts write nothing (V4 knows only max and high).
 *  - tool-call arguments that are not a JSON object become one string
 *    parameter "arguments" holding the text (the encoders' fallback for text
 *    that is not JSON; V4.1 first unwraps a JSON string holding JSON). */
#include "chat_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* encoding_dsv4.py REASONING_EFFORT_MAX */
static const char k_think_max[] =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root cause, "
    "rigorously stress-testing your logic against all potential paths, edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered "
    "alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n";

enum { ITEM_SYS, ITEM_USER, ITEM_ASSISTANT };

/* One rendered unit: a system message, a user turn (messages first..last, user
 * and tool), or an assistant message. */
typedef struct item {
    int kind, first, last;
} item;

typedef struct v4_style {
    bool v41;
    const char *dsml;  /* "|DSML|" or "|DSML| " */
    const char *block; /* "tool_calls" or "calls" */
} v4_style;

static void mark3(og_chat_buf *b, const char *a, const char *s, const char *c) {
    char t[64];
    snprintf(t, sizeof t, "%s%s%s", a, s, c);
    og_chat_mark(b, t);
}

static void put_tools(const og_chat_ctx *c, const v4_style *st, og_chat_buf *b) {
    const char *d = st->dsml, *k = st->block;
    char t[2048];
    int len = snprintf(t, sizeof t,
            "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can invoke tools by "
            "writing a \"<%s%s>\" block like the following:\n\n<%s%s>\n<%sinvoke name=\"$TOOL_NAME\">\n<%sparameter "
            "name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</%sparameter>\n...\n</%sinvoke>\n<%sinvoke "
            "name=\"$TOOL_NAME2\">\n...\n</%sinvoke>\n</%s%s>\n\nString parameters should be specified as is and set "
            "`string=\"true\"`. For all other types (numbers, booleans, arrays, objects), pass the value in JSON format "
            "and set `string=\"false\"`.\n\nIf thinking_mode is enabled (triggered by " CHAT_THINK "), you MUST output "
            "your complete reasoning inside " CHAT_THINK "..." CHAT_THINK_END " BEFORE any tool calls or final "
            "response.\n\nOtherwise, output directly after " CHAT_THINK_END " with tool calls or final response.\n\n"
            "### Available Tool Schemas\n\n",
            d, k, d, k, d, d, d, d, d, d, d, k);
    if (len < 0 || (size_t)len >= sizeof t) { /* cannot happen: the text is fixed, d and k are short */
        b->oom = true;
        return;
    }
    og_chat_mark(b, t);
    size_t i;
    json_t *e;
    json_array_foreach(c->tools, i, e) { /* one JSON line per function (json.dumps, ensure_ascii=False) */
        if (i) og_chat_put(b, "\n");
        og_chat_put_json(b, json_object_get(e, "function"), 0, false);
    }
    og_chat_mark(b, "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool "
                    "calls.\n");
}

/* The arguments as the encoders read them: a JSON object's members, or one
 * string member "arguments" holding the text. */
static json_t *call_args(const char *text, bool unwrap) {
    json_t *a = text ? json_loads(text, JSON_DECODE_ANY, NULL) : NULL;
    if (unwrap && json_is_string(a)) {
        json_t *inner = json_loadb(json_string_value(a), json_string_length(a), JSON_DECODE_ANY, NULL);
        if (inner) {
            json_decref(a);
            a = inner;
        }
    }
    if (json_is_object(a)) return a;
    json_decref(a);
    a = json_object();
    if (a) json_object_set_new(a, "arguments", json_string(text ? text : ""));
    return a;
}

static void put_calls(const og_chat_msg *m, const v4_style *st, og_chat_buf *b) {
    const char *d = st->dsml;
    mark3(b, "\n\n<", d, st->block);
    og_chat_mark(b, ">\n");
    for (int k = 0; k < m->n_tool_calls && !b->oom; k++) {
        const og_chat_tool_call *t = &m->tool_calls[k];
        if (k) og_chat_mark(b, "\n");
        mark3(b, "<", d, "invoke name=\"");
        og_chat_put(b, t->name);
        og_chat_mark(b, "\">\n");
        json_t *args = call_args(t->arguments, st->v41);
        if (!args) {
            b->oom = true;
            return;
        }
        const char *key;
        json_t *v;
        bool first = true;
        json_object_foreach(args, key, v) {
            if (!first) og_chat_mark(b, "\n");
            first = false;
            mark3(b, "<", d, "parameter name=\"");
            og_chat_put(b, key);
            og_chat_mark(b, json_is_string(v) ? "\" string=\"true\">" : "\" string=\"false\">");
            if (json_is_string(v)) og_chat_putn(b, json_string_value(v), json_string_length(v));
            else og_chat_put_json(b, v, 0, false);
            mark3(b, "</", d, "parameter>");
        }
        json_decref(args);
        mark3(b, "\n</", d, "invoke>");
    }
    mark3(b, "\n</", d, st->block);
    og_chat_mark(b, ">");
}

/* The call whose id is id in the latest assistant turn with calls before
 * message i, or 0 (sort_tool_results_by_call_order: an unknown id sorts first). */
static int call_order(const og_chat_msg *m, int i, const char *id) {
    for (int k = i - 1; k >= 0; k--) {
        if (strcmp(m[k].role, "assistant") || m[k].n_tool_calls <= 0) continue;
        for (int c = 0; id && m[k].tool_call_ids && c < m[k].n_tool_calls; c++)
            if (m[k].tool_call_ids[c] && !strcmp(m[k].tool_call_ids[c], id)) return c;
        return 0;
    }
    return 0;
}

/* A user turn: its user texts in place, its tool results in the slots tool
 * messages hold, sorted stably by call order. */
static og_status put_user_turn(const og_chat_ctx *c, const item *it, og_chat_buf *b) {
    const og_chat_msg *m = c->m;
    int n = it->last - it->first + 1, n_tool = 0;
    int *tools = malloc((size_t)n * sizeof *tools), *order = malloc((size_t)n * sizeof *order);
    if (!tools || !order) {
        free(tools);
        free(order);
        return og_fail(c->err, c->errlen, OG_ERR_NOMEM, "out of memory");
    }
    for (int i = it->first; i <= it->last; i++)
        if (!strcmp(m[i].role, "tool")) {
            order[n_tool] = call_order(m, it->first, m[i].tool_call_id);
            tools[n_tool++] = i;
        }
    for (int a = 1; a < n_tool; a++) /* insertion sort: stable */
        for (int k = a; k > 0 && order[k - 1] > order[k]; k--) {
            int t = order[k];
            order[k] = order[k - 1];
            order[k - 1] = t;
            t = tools[k];
            tools[k] = tools[k - 1];
            tools[k - 1] = t;
        }
    og_chat_mark(b, CHAT_U);
    for (int i = it->first, slot = 0; i <= it->last; i++) {
        if (i > it->first) og_chat_mark(b, "\n\n");
        if (strcmp(m[i].role, "tool")) {
            og_chat_put(b, m[i].content ? m[i].content : "");
            continue;
        }
        og_chat_mark(b, "<tool_result>");
        const char *r = m[tools[slot++]].content;
        og_chat_put(b, r ? r : "");
        og_chat_mark(b, "</tool_result>");
    }
    free(tools);
    free(order);
    return OG_OK;
}

static og_status render(const og_chat_ctx *c, const v4_style *st, og_chat_buf *b) {
    const og_chat_msg *m = c->m;
    /* the items; the tools' empty system message first when the first message is not one */
    item *it = malloc((size_t)(c->n + 1) * sizeof *it);
    if (!it) return og_fail(c->err, c->errlen, OG_ERR_NOMEM, "out of memory");
    int n = 0;
    bool tools_sys = c->tools && (c->n == 0 || !og_chat_is_system(m[0].role));
    if (tools_sys) it[n++] = (item){ITEM_SYS, -1, -1};
    for (int i = 0; i < c->n; i++) {
        bool user = !strcmp(m[i].role, "user") || !strcmp(m[i].role, "tool");
        if (user && n > 0 && it[n - 1].kind == ITEM_USER) it[n - 1].last = i;
        else it[n++] = (item){user ? ITEM_USER : og_chat_is_system(m[i].role) ? ITEM_SYS : ITEM_ASSISTANT, i, i};
    }
    /* the last user turn (V4.1: a system message after the first one counts) */
    int last_user = -1;
    for (int k = 0; k < n; k++)
        if (it[k].kind == ITEM_USER || (st->v41 && it[k].kind == ITEM_SYS && k > 0)) last_user = k;
    bool drop = c->thinking && !c->tools;
    int effort = c->effort ? c->effort : 75;
    og_status s = OG_OK;
    og_chat_put(b, ""); /* the BOS text would come first: the tokenizer adds its id */
    for (int k = 0; k < n && !s && !b->oom; k++) {
        const item *x = &it[k];
        if (k == 0 && st->v41 && (c->thinking || x->kind == ITEM_SYS)) {
            og_chat_mark(b, CHAT_S);
            if (c->thinking) {
                char line[128];
                snprintf(line, sizeof line,
                         "Reasoning Effort: %d (range 1-100, the higher the value, the more thorough the reasoning)\n\n",
                         effort);
                og_chat_mark(b, line);
            }
        }
        if (k == 0 && !st->v41 && c->thinking && c->effort == 100) og_chat_mark(b, k_think_max);
        if (x->kind == ITEM_SYS) {
            if (k > 0 && st->v41) og_chat_mark(b, CHAT_S);
            if (x->first >= 0) og_chat_put(b, m[x->first].content ? m[x->first].content : "");
            if (k == 0 && c->tools) {
                og_chat_mark(b, "\n\n");
                put_tools(c, st, b);
            }
        } else if (x->kind == ITEM_USER) {
            s = put_user_turn(c, x, b);
        } else {
            const og_chat_msg *a = &m[x->first];
            bool keep = c->thinking && (!drop || k > last_user);
            /* the header: V4 writes it after a user turn (render_message's transition);
             * V4.1 after a user turn or a later system message */
            bool header = k > 0 && (it[k - 1].kind == ITEM_USER || (st->v41 && it[k - 1].kind == ITEM_SYS && k - 1 > 0));
            if (header) {
                bool open = st->v41 ? keep : c->thinking && (!drop || k - 1 >= last_user);
                og_chat_mark(b, open ? CHAT_A CHAT_THINK : CHAT_A CHAT_THINK_END);
            }
            if (keep) {
                og_chat_put(b, a->reasoning ? a->reasoning : "");
                og_chat_mark(b, CHAT_THINK_END);
            }
            og_chat_put(b, a->content ? a->content : "");
            if (a->n_tool_calls > 0) put_calls(a, st, b);
            og_chat_mark(b, CHAT_EOS);
        }
    }
    if (!s && c->gen)
        og_chat_mark(b, c->thinking ? CHAT_A CHAT_THINK : CHAT_A CHAT_THINK_END);
    free(it);
    return s;
}

og_status og_chat_render_dsv4(og_chat_kind kind, const og_chat_ctx *c, og_chat_buf *b) {
    static const v4_style v4 = {false, CHAT_DSML, "tool_calls"}, v41 = {true, CHAT_DSML " ", "calls"};
    if (kind == OG_CHAT_DEEPSEEK4) return render(c, &v4, b);
    if (kind == OG_CHAT_DEEPSEEK4_1) return render(c, &v41, b);
    return og_fail(c->err, c->errlen, OG_ERR_UNSUPPORTED, "not a V4-family chat kind");
}
