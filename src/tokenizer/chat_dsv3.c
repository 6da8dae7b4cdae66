/* The DeepSeek V3-family chat templates (tokenizer.md §7), transcribed from
 * their Jinja texts with their quirks:
 *  - V3 (tokenizer_config.json of DeepSeek-V3 / V3-0324): system prompts are
 *    gathered first and joined by a blank line; "first tool call" and "first
 *    tool output" are tracked over the whole conversation, not per turn.
 *  - R1: V3's template with two changes (tokenizer.md §7): a past assistant
 *    turn's content is cut to the text after its last </think>, and the
 *    generation prompt is <Assistant><think>\n. R1 always thinks.
 *  - V3.1: the thinking switch (<Assistant></think> or <Assistant><think>),
 *    tool calls as name<tool_sep>{json}, tool outputs without the outputs
 *    wrapper, past reasoning dropped (content cut after the first </think>).
 * Tool definitions. V3's and R1's official templates render none. llama.cpp
 * (v0.4.0) renders the official template as is (the tools are dropped, with a
 * warning that the template "does not natively describe tools") and ships its
 * own R1 template for tool use, models/templates/llama-cpp-deepseek-r1.jinja
 * (docs/function-calling.md: pass it with --chat-template-file, "we provide a
 * custom llama-cpp-deepseek-r1.jinja for DeepSeek R1 distills"):
 * right after BOS, "You can call any of the following function tools to satisfy
 * the user's requests: " + the functions as JSON (indent 2) + an example call
 * in V3's call syntax. We render that block for V3 and R1 (their call syntax is
 * the same), before the system prompt as that template does. V3.1's model card
 * gives its tool prompt ("## Tools\nYou have access to the following tools:"
 * with one "### name / Description / Parameters: json.dumps(parameters)" entry
 * per tool and the call format), placed after the system prompt and a blank
 * line; we render it so (ollama's DeepSeek-V3.1 renderer writes the same text). */
#include "chat_impl.h"

#include <string.h>

static const char *str_or_empty(const char *s) { return s ? s : ""; }

/* The system prompts, joined by a blank line (all three templates). */
static void put_system(const og_chat_ctx *c, og_chat_buf *b) {
    bool first = true;
    for (int i = 0; i < c->n; i++) {
        if (!og_chat_is_system(c->m[i].role)) continue;
        if (!first) og_chat_put(b, "\n\n");
        og_chat_put(b, str_or_empty(c->m[i].content));
        first = false;
    }
}

static bool has_system(const og_chat_ctx *c) {
    for (int i = 0; i < c->n; i++)
        if (og_chat_is_system(c->m[i].role)) return true;
    return false;
}

/* llama-cpp-deepseek-r1.jinja's tool block (trim_blocks: the block starts right
 * after BOS and ends with a blank line before the system prompt). */
static void put_tools_r1(const og_chat_ctx *c, og_chat_buf *b) {
    og_chat_mark(b, "You can call any of the following function tools to satisfy the user's requests: ");
    json_t *fns = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(c->tools, i, t) json_array_append(fns, json_object_get(t, "function"));
    if (!fns) b->oom = true;
    else og_chat_put_json(b, fns, 2, false);
    json_decref(fns);
    og_chat_mark(b, "\n\nExample function tool call syntax:\n\n" CHAT_CALLS_BEGIN CHAT_CALL_BEGIN "function" CHAT_TOOL_SEP
                    "example_function_name\n```json\n{\n  \"arg1\": \"some_value\"\n  ...\n}\n```\n" CHAT_CALL_END
                        CHAT_CALLS_END "\n\n");
}

/* V3.1's tool prompt (model card). */
static void put_tools_v31(const og_chat_ctx *c, og_chat_buf *b) {
    og_chat_mark(b, "## Tools\nYou have access to the following tools:\n");
    size_t i;
    json_t *t;
    json_array_foreach(c->tools, i, t) {
        json_t *fn = json_object_get(t, "function"), *params = json_object_get(fn, "parameters");
        og_chat_mark(b, "\n### ");
        og_chat_put(b, json_string_value(json_object_get(fn, "name")));
        og_chat_mark(b, "\nDescription: ");
        og_chat_put(b, str_or_empty(json_string_value(json_object_get(fn, "description"))));
        og_chat_mark(b, "\n\nParameters: ");
        if (params) og_chat_put_json(b, params, 0, true);
        else og_chat_put(b, "{}");
        og_chat_mark(b, "\n");
    }
    og_chat_mark(b, "\nIMPORTANT: ALWAYS adhere to this exact format for tool use:\n" CHAT_CALLS_BEGIN CHAT_CALL_BEGIN
                    "tool_call_name" CHAT_TOOL_SEP "tool_call_arguments" CHAT_CALL_END "{{additional_tool_calls}}"
                        CHAT_CALLS_END "\n\nWhere:\n\n"
                    "- `tool_call_name` must be an exact match to one of the available tools\n"
                    "- `tool_call_arguments` must be valid JSON that strictly follows the tool's Parameters Schema\n"
                    "- For multiple tool calls, chain them directly without separators or spaces\n");
}

static void put_call_v3(og_chat_buf *b, const og_chat_tool_call *t) {
    og_chat_put(b, t->type ? t->type : "function");
    og_chat_mark(b, CHAT_TOOL_SEP);
    og_chat_put(b, t->name);
    og_chat_mark(b, "\n```json\n");
    og_chat_put(b, str_or_empty(t->arguments));
    og_chat_mark(b, "\n```");
    og_chat_mark(b, CHAT_CALL_END);
}

/* The text after the last (R1) or first (V3.1) </think>, or all of s. */
static const char *after_think(const char *s, bool last) {
    const char *cut = NULL;
    for (const char *p = s; (p = strstr(p, CHAT_THINK_END)); p += strlen(CHAT_THINK_END)) {
        cut = p + strlen(CHAT_THINK_END);
        if (!last) break;
    }
    return cut ? cut : s;
}

static og_status render_v3(const og_chat_ctx *c, og_chat_buf *b, bool r1) {
    const og_chat_msg *m = c->m;
    og_chat_put(b, ""); /* the BOS text would come first: the tokenizer adds its id */
    if (c->tools) put_tools_r1(c, b);
    put_system(c, b);
    bool is_first = false, is_tool = false, output_first = true;
    for (int i = 0; i < c->n && !b->oom; i++) {
        const char *r = m[i].role;
        if (og_chat_is_system(r)) continue;
        if (!strcmp(r, "user")) {
            is_tool = false;
            og_chat_mark(b, CHAT_U);
            og_chat_put(b, str_or_empty(m[i].content));
        } else if (!strcmp(r, "assistant")) {
            if (!m[i].content && m[i].n_tool_calls > 0) {
                is_tool = false;
                for (int k = 0; k < m[i].n_tool_calls; k++) {
                    if (!is_first) {
                        og_chat_mark(b, CHAT_A CHAT_CALLS_BEGIN CHAT_CALL_BEGIN);
                        put_call_v3(b, &m[i].tool_calls[k]);
                        is_first = true;
                    } else {
                        og_chat_mark(b, "\n" CHAT_CALL_BEGIN);
                        put_call_v3(b, &m[i].tool_calls[k]);
                        og_chat_mark(b, CHAT_CALLS_END CHAT_EOS);
                    }
                }
            } else {
                const char *content = str_or_empty(m[i].content);
                if (is_tool) {
                    og_chat_mark(b, CHAT_OUTS_END);
                } else {
                    og_chat_mark(b, CHAT_A);
                    if (r1) content = after_think(content, true);
                }
                og_chat_put(b, content);
                og_chat_mark(b, CHAT_EOS);
                is_tool = false;
            }
        } else { /* tool */
            is_tool = true;
            og_chat_mark(b, output_first ? CHAT_OUTS_BEGIN CHAT_OUT_BEGIN : "\n" CHAT_OUT_BEGIN);
            og_chat_put(b, str_or_empty(m[i].content));
            og_chat_mark(b, CHAT_OUT_END);
            output_first = false;
        }
    }
    if (is_tool) og_chat_mark(b, CHAT_OUTS_END);
    if (c->gen && !is_tool) og_chat_mark(b, r1 ? CHAT_A CHAT_THINK "\n" : CHAT_A);
    return OG_OK;
}

static void put_call_v31(og_chat_buf *b, const og_chat_tool_call *t) {
    og_chat_mark(b, CHAT_CALL_BEGIN);
    og_chat_put(b, t->name);
    og_chat_mark(b, CHAT_TOOL_SEP);
    og_chat_put(b, str_or_empty(t->arguments));
    og_chat_mark(b, CHAT_CALL_END);
}

static og_status render_v31(const og_chat_ctx *c, og_chat_buf *b) {
    const og_chat_msg *m = c->m;
    og_chat_put(b, "");
    put_system(c, b);
    if (c->tools) {
        if (has_system(c)) og_chat_put(b, "\n\n");
        put_tools_v31(c, b);
    }
    bool is_tool = false, is_last_user = false;
    for (int i = 0; i < c->n && !b->oom; i++) {
        const char *r = m[i].role;
        if (og_chat_is_system(r)) continue;
        if (!strcmp(r, "user")) {
            is_tool = false;
            is_last_user = true;
            og_chat_mark(b, CHAT_U);
            og_chat_put(b, str_or_empty(m[i].content));
        } else if (!strcmp(r, "assistant") && m[i].n_tool_calls > 0) {
            if (is_last_user) og_chat_mark(b, CHAT_A CHAT_THINK_END);
            is_last_user = is_tool = false;
            og_chat_put(b, str_or_empty(m[i].content));
            og_chat_mark(b, CHAT_CALLS_BEGIN);
            for (int k = 0; k < m[i].n_tool_calls; k++) put_call_v31(b, &m[i].tool_calls[k]);
            og_chat_mark(b, CHAT_CALLS_END CHAT_EOS);
        } else if (!strcmp(r, "assistant")) {
            /* a prefilled thinking turn (the template's message.prefix) is not part of og_chat_msg */
            if (is_last_user) og_chat_mark(b, CHAT_A CHAT_THINK_END);
            is_last_user = false;
            const char *content = str_or_empty(m[i].content);
            if (!is_tool) content = after_think(content, false);
            og_chat_put(b, content);
            og_chat_mark(b, CHAT_EOS);
            is_tool = false;
        } else { /* tool */
            is_last_user = false;
            is_tool = true;
            og_chat_mark(b, CHAT_OUT_BEGIN);
            og_chat_put(b, str_or_empty(m[i].content));
            og_chat_mark(b, CHAT_OUT_END);
        }
    }
    if (c->gen && is_last_user && !is_tool) og_chat_mark(b, c->thinking ? CHAT_A CHAT_THINK : CHAT_A CHAT_THINK_END);
    return OG_OK;
}

og_status og_chat_render_dsv3(og_chat_kind kind, const og_chat_ctx *c, og_chat_buf *b) {
    switch (kind) {
    case OG_CHAT_DEEPSEEK3: return render_v3(c, b, false);
    case OG_CHAT_DEEPSEEK_R1: return render_v3(c, b, true);
    case OG_CHAT_DEEPSEEK3_1: return render_v31(c, b);
    default: return og_fail(c->err, c->errlen, OG_ERR_UNSUPPORTED, "not a V3-family chat kind");
    }
}
