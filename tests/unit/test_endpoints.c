/* The Anthropic Messages and OpenAI Responses request mapping (og_ep_parse)
 * and their output assembler, on a make-model file with the real DeepSeek-V3
 * tokenizer (argv[1]). References are built another way: the prompt from
 * og_chat_tokenize_opts over hand-written og_chat_msg lists (what the request
 * means, written from shared/spec/anthropic-messages.md §2 and the Responses
 * item shapes), the events and objects from the specs' §3 / §4 by hand. */
#include "og_endpoints.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api_fixture.h"

static int setup(void **state) {
    (void)state;
    api_fixture_load(512);
    return 0;
}

static og_ep_meta meta(og_endpoint ep) { return (og_ep_meta){ep, "served-model", 42, 1700000000}; }

/* OG_WRITE_SEEDS=DIR: every body parsed here also becomes a fuzz_requests seed
 * (its selector byte: the endpoint's index there, then the body). */
static void seed(og_endpoint ep, const char *body) {
    const char *dir = getenv("OG_WRITE_SEEDS");
    if (!dir || !*dir) return;
    static const og_endpoint order[] = {OG_EP_CHAT, OG_EP_COMPLETIONS, OG_EP_MESSAGES, OG_EP_COUNT_TOKENS,
                                        OG_EP_RESPONSES};
    unsigned char sel = 0;
    while (order[sel] != ep) sel++;
    char path[512];
    snprintf(path, sizeof path, "%s/unit_%016llx", dir, (unsigned long long)og_fnv1a64(body, strlen(body), sel));
    FILE *f = fopen(path, "wb");
    if (!f) fail_msg("cannot write %s", path);
    fputc(sel, f);
    fputs(body, f);
    fclose(f);
}

static void parse_ok(og_endpoint ep, const char *body, og_api_req *r, og_ep_out **o) {
    og_api_err e;
    og_ep_meta m = meta(ep);
    seed(ep, body);
    if (!og_ep_parse(&m, body, strlen(body), &g_mdl, r, o, &e)) fail_msg("%d %s", e.status, e.message);
}

/* The prompt og_chat_tokenize_opts gives for msgs (the reference). */
static void expect_prompt(const og_api_req *r, const og_chat_msg *msgs, int n) {
    og_ids want = {0};
    char err[256];
    assert_int_equal(og_chat_tokenize_opts(g_tok, g_mdl.chat, msgs, n, NULL, true, &want, err, sizeof err), OG_OK);
    assert_int_equal(r->n_prompts, 1);
    assert_int_equal(r->prompts[0].n, want.n);
    assert_memory_equal(r->prompts[0].v, want.v, want.n * sizeof *want.v);
    og_ids_free(&want);
}

/* §2: system as text blocks, string and block content, consecutive user
 * turns merged, tool_use / tool_result round trip, thinking blocks. */
static void test_messages_mapping(void **state) {
    (void)state;
    og_api_req r;
    og_ep_out *o;
    parse_ok(OG_EP_MESSAGES,
             "{\"model\":\"m\",\"max_tokens\":9,\"system\":[{\"type\":\"text\",\"text\":\"Be \"},{\"type\":\"text\","
             "\"text\":\"brief.\"}],\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"},"
             "{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"get_weather\","
             "\"input\":{\"city\":\"Paris\",\"days\":2}}]},"
             "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\",\"content\":"
             "[{\"type\":\"text\",\"text\":\"sunny\"}]}]},"
             "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"easy\",\"signature\":\"s\"},"
             "{\"type\":\"text\",\"text\":\"It is sunny.\"}]},"
             "{\"role\":\"user\",\"content\":\"Thanks.\"},{\"role\":\"user\",\"content\":[{\"type\":\"text\","
             "\"text\":\"And Rome?\"}]}],\"stop_sequences\":[\"END\",\"STOP\"],\"temperature\":0.5,\"top_k\":5}",
             &r, &o);
    og_chat_tool_call call = {"function", "get_weather", "{\"city\":\"Paris\",\"days\":2}"};
    const og_chat_msg msgs[] = {
        {.role = "system", .content = "Be brief."},
        {.role = "user", .content = "Weather in Paris?"},
        {.role = "assistant", .tool_calls = &call, .n_tool_calls = 1},
        {.role = "tool", .content = "sunny", .tool_call_id = "toolu_1"},
        {.role = "assistant", .content = "It is sunny.", .reasoning = "easy"},
        {.role = "user", .content = "Thanks.\n\nAnd Rome?"},
    };
    expect_prompt(&r, msgs, 6);
    assert_int_equal(r.sp.max_tokens, 9);
    assert_int_equal(r.sp.n_stop, 2);
    assert_string_equal(r.sp.stop[1], "STOP");
    assert_float_equal(r.sp.sampling.temperature, 0.5f, 0);
    assert_int_equal(r.sp.sampling.top_k, 5);
    assert_false(r.stream);
    assert_non_null(o);
    og_ep_out_free(o);
    og_api_req_free(&r);

    /* count_tokens: max_tokens not needed; the count is the messages prompt's length */
    const char *conv = "\"messages\":[{\"role\":\"user\",\"content\":\"Count me, please.\"}]";
    char body[256];
    snprintf(body, sizeof body, "{\"model\":\"m\",%s}", conv);
    parse_ok(OG_EP_COUNT_TOKENS, body, &r, &o);
    assert_null(o);
    json_t *count = og_ep_count_json(&r);
    og_api_req_free(&r);
    snprintf(body, sizeof body, "{\"model\":\"m\",\"max_tokens\":5,\"stream\":true,%s}", conv);
    parse_ok(OG_EP_MESSAGES, body, &r, &o);
    assert_true(r.stream);
    assert_int_equal(json_integer_value(json_object_get(count, "input_tokens")), (json_int_t)r.prompts[0].n);
    const og_chat_msg one[] = {{.role = "user", .content = "Count me, please."}};
    expect_prompt(&r, one, 1);
    json_decref(count);
    og_ep_out_free(o);
    og_api_req_free(&r);
}

#define U "{\"role\":\"user\",\"content\":\"x\"}"

/* Each bad request: 400 with the field named (param) and a message that says what. */
static void test_messages_errors(void **state) {
    (void)state;
    static const struct {
        og_endpoint ep;
        const char *body, *param, *says;
    } cases[] = {
        {OG_EP_MESSAGES, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "max_tokens", "required"},
        {OG_EP_MESSAGES, "{\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "model", "required"},
        {OG_EP_MESSAGES, "{\"model\":\"m\",\"max_tokens\":0,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
         "max_tokens", ">= 1"},
        {OG_EP_MESSAGES, "{\"model\":\"m\",\"max_tokens\":4,\"messages\":[]}", "messages", "at least one"},
        {OG_EP_MESSAGES, "{\"model\":\"m\",\"max_tokens\":4,\"messages\":[{\"role\":\"system\",\"content\":\"x\"}]}",
         "messages[0]", "top-level 'system'"},
        {OG_EP_MESSAGES,
         "{\"model\":\"m\",\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\","
         "\"source\":{}}]}]}",
         "messages[0].content[0]", "text-only"},
        {OG_EP_MESSAGES,
         "{\"model\":\"m\",\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":\"x\"},{\"role\":"
         "\"assistant\",\"content\":\"pre\"}]}",
         "messages", "prefill"},
        {OG_EP_MESSAGES,
         "{\"model\":\"m\",\"max_tokens\":4,\"stop_sequences\":[\"a\",\"b\",\"c\",\"d\",\"e\"],\"messages\":[{\"role\":"
         "\"user\",\"content\":\"x\"}]}",
         "stop_sequences", "at most 4"},
        {OG_EP_MESSAGES,
         "{\"model\":\"m\",\"max_tokens\":4,\"temperature\":1.5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
         "temperature", "between 0 and 1"},
        {OG_EP_MESSAGES,
         "{\"model\":\"m\",\"max_tokens\":4,\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}],"
         "\"tool_choice\":{\"type\":\"tool\",\"name\":\"g\"},\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
         "tool_choice", "'g'"},
        {OG_EP_MESSAGES,
         "{\"model\":\"m\",\"max_tokens\":4,\"tool_choice\":{\"type\":\"any\"},\"messages\":[{\"role\":\"user\","
         "\"content\":\"x\"}]}",
         "tool_choice", "needs 'tools'"},
        {OG_EP_MESSAGES,
         "{\"model\":\"m\",\"max_tokens\":4,\"tools\":[{\"type\":\"web_search_20250305\",\"name\":\"web_search\"}],"
         "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
         "tools[0]", "web_search_20250305"},
        {OG_EP_MESSAGES,
         "{\"model\":\"m\",\"max_tokens\":4,\"thinking\":{\"type\":\"sometimes\"},\"messages\":[{\"role\":\"user\","
         "\"content\":\"x\"}]}",
         "thinking", "enabled"},
        {OG_EP_MESSAGES,
         "{\"model\":\"m\",\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\"}]}]}",
         "messages[0].content[0]", "tool_use_id"},
        {OG_EP_MESSAGES, "{\"model\":\"m\",\"max_tokens\":4,", NULL, "not valid JSON"},
        {OG_EP_MESSAGES, "[1]", NULL, "JSON object"},
        {OG_EP_MESSAGES, "{\"model\":\"m\",\"max_tokens\":600,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
         "messages", "context"},
        {OG_EP_COUNT_TOKENS, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":5}]}",
         "messages[0].content", "string or an array"},
        {OG_EP_RESPONSES, "{\"model\":\"m\"}", "input", "required"},
        {OG_EP_RESPONSES, "{\"input\":\"x\",\"previous_response_id\":\"resp_1\"}", "previous_response_id",
         "previous_response_id"},
        {OG_EP_RESPONSES, "{\"input\":\"x\",\"tools\":[{\"type\":\"web_search\"}]}", "tools[0]", "'web_search'"},
        {OG_EP_RESPONSES, "{\"input\":\"x\",\"tools\":[{\"type\":\"file_search\",\"vector_store_ids\":[]}]}",
         "tools[0]", "'file_search'"},
        {OG_EP_RESPONSES, "{\"input\":\"x\",\"conversation\":\"conv_1\"}", "conversation", "conversation"},
        {OG_EP_RESPONSES, "{\"input\":\"x\",\"background\":true}", "background", "background"},
        {OG_EP_RESPONSES, "{\"input\":[{\"type\":\"item_reference\",\"id\":\"msg_1\"}]}", "input[0]", "item_reference"},
        {OG_EP_RESPONSES, "{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\",\"image_url\":\"u\"}]}]}",
         "input[0].content[0]", "text-only"},
        {OG_EP_RESPONSES, "{\"input\":\"x\",\"max_output_tokens\":0}", "max_output_tokens", ">= 1"},
        {OG_EP_RESPONSES, "{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"grammar\"}}}", "text.format", "grammar"},
        /* an empty block list is no turn to drop: it is refused where it is */
        {OG_EP_MESSAGES,
         "{\"model\":\"m\",\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":"
         "\"assistant\",\"content\":\"The answer is\"},{\"role\":\"user\",\"content\":[]}]}",
         "messages[2].content", "messages[2].content holds no content blocks"},
        {OG_EP_COUNT_TOKENS, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[]}]}",
         "messages[0].content", "messages[0].content holds no content blocks"},
        {OG_EP_RESPONSES, "{\"input\":[{\"role\":\"user\",\"content\":[]}]}", "input[0].content",
         "input[0].content holds no content parts"},
        /* the caller's field names, not the chat request's (one tool name rule: og_api_parse's) */
        {OG_EP_MESSAGES,
         "{\"model\":\"m\",\"max_tokens\":4,\"tools\":[{\"name\":\"abcdefghijabcdefghijabcdefghijabcdefghijabcdefghij"
         "abcdefghijabcdefghij\",\"input_schema\":{\"type\":\"object\"}}],\"messages\":[" U "]}",
         "tools[0].name", "tools[0].name must be a string of 1-64 characters"},
        {OG_EP_MESSAGES, "{\"model\":\"m\",\"max_tokens\":4,\"tools\":[{\"input_schema\":{}}],\"messages\":[" U "]}",
         "tools[0].name", "tools[0].name must be a string of 1-64"},
        {OG_EP_MESSAGES,
         "{\"model\":\"m\",\"max_tokens\":4,\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"string\"}}],"
         "\"messages\":[" U "]}",
         "tools[0].input_schema", "tools[0].input_schema must describe an object"},
        {OG_EP_MESSAGES, "{\"model\":\"m\",\"max_tokens\":4,\"tools\":[{\"name\":\"f\",\"input_schema\":5}],"
         "\"messages\":[" U "]}",
         "tools[0]", "tools[0].input_schema must be a JSON Schema object"},
        {OG_EP_RESPONSES, "{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"a b\"}]}", "tools[0].name",
         "tools[0].name must be a string of 1-64"},
        {OG_EP_RESPONSES,
         "{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"parameters\":{\"type\":\"array\"}}]}",
         "tools[0].parameters", "tools[0].parameters must describe an object"},
        {OG_EP_RESPONSES, "{\"input\":\"x\",\"max_output_tokens\":600}", "max_output_tokens",
         "max_output_tokens asks for 600 more"},
        {OG_EP_RESPONSES, "{\"input\":\"x\",\"max_output_tokens\":3000000000}", "max_output_tokens",
         "'max_output_tokens' must be between 1 and"},
        {OG_EP_RESPONSES, "{\"input\":\"x\",\"reasoning\":{\"effort\":\"bogus\"}}", "reasoning.effort",
         "'reasoning.effort' must be one of"},
        {OG_EP_RESPONSES, "{\"input\":\"x\",\"reasoning\":{\"effort\":5}}", "reasoning.effort", "'reasoning.effort'"},
        {OG_EP_RESPONSES, "{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\",\"schema\":{}}}}",
         "text.format.name", "'text.format.name' must be a non-empty string"},
        /* options the server cannot honour */
        {OG_EP_RESPONSES, "{\"input\":\"x\",\"store\":true}", "store", "does not store responses"},
        {OG_EP_RESPONSES, "{\"input\":\"x\",\"store\":\"no\"}", "store", "'store' must be true or false"},
        {OG_EP_RESPONSES, "{\"input\":\"x\",\"background\":1}", "background", "'background' must be true or false"},
        {OG_EP_RESPONSES, "{\"input\":\"x\",\"truncation\":\"auto\"}", "truncation", "\"disabled\""},
        {OG_EP_RESPONSES, "{\"input\":\"x\",\"include\":[\"reasoning.encrypted_content\"]}", "include",
         "'include' is not supported"},
        {OG_EP_RESPONSES, "{\"input\":\"x\",\"include\":\"a\"}", "include", "must be an array"},
        {OG_EP_RESPONSES, "{\"input\":\"x\",\"user\":5}", "user", "'user' must be a string"},
        /* a final assistant message (a prefill), and calls without an id or a name */
        {OG_EP_RESPONSES,
         "{\"input\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":\"The answer "
         "is\"}]}",
         "input", "the last input item is an assistant message (a prefill to continue)"},
        {OG_EP_RESPONSES,
         "{\"input\":[{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\","
         "\"text\":\"a\"}]}]}",
         "input", "end with a user message"},
        {OG_EP_RESPONSES,
         "{\"input\":[{\"type\":\"function_call\",\"call_id\":\"\",\"name\":\"f\",\"arguments\":\"{}\"},{\"type\":"
         "\"function_call_output\",\"call_id\":\"\",\"output\":\"1\"}]}",
         "input[0]", "input[0].call_id must be a non-empty string"},
        {OG_EP_RESPONSES,
         "{\"input\":[{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":\"\",\"arguments\":\"{}\"},{\"type\":"
         "\"function_call_output\",\"call_id\":\"c1\",\"output\":\"1\"}]}",
         "input[0]", "input[0].name must be a non-empty string"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        og_api_req r;
        og_ep_out *o = (og_ep_out *)1;
        og_api_err e;
        og_ep_meta m = meta(cases[i].ep);
        seed(cases[i].ep, cases[i].body);
        if (og_ep_parse(&m, cases[i].body, strlen(cases[i].body), &g_mdl, &r, &o, &e))
            fail_msg("case %zu accepted: %s", i, cases[i].body);
        assert_null(o);
        assert_int_equal(e.status, 400);
        assert_string_equal(e.param, cases[i].param ? cases[i].param : "");
        if (!strstr(e.message, cases[i].says)) fail_msg("case %zu: '%s' does not say '%s'", i, e.message, cases[i].says);
        /* no name from the chat request the body was translated into */
        static const char *const chat_names[] = {"function.", "response_format", "reasoning_effort", "max_tokens"};
        for (size_t k = 0; k < 4; k++)
            if ((k < 3 || cases[i].ep == OG_EP_RESPONSES) &&
                (strstr(e.message, chat_names[k]) || strstr(e.param, chat_names[k])))
                fail_msg("case %zu names '%s': %s (param %s)", i, chat_names[k], e.message, e.param);
        og_api_req_free(&r);
    }
}

/* Content-Type: JSON (any case, parameters allowed) or none; what browsers send
 * cross-origin without a preflight is not. */
static void test_content_type(void **state) {
    (void)state;
    static const char *const ok[] = {"application/json", "application/json; charset=utf-8", "Application/JSON",
                                     " application/json ;charset=UTF-8", "application/json;"};
    static const char *const no[] = {"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                                     "application/jsonp", "application/json-patch+json", "", "text/plain; a=application/json"};
    assert_true(og_content_type_json(NULL));
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        if (!og_content_type_json(ok[i])) fail_msg("'%s' refused", ok[i]);
    for (size_t i = 0; i < sizeof no / sizeof *no; i++)
        if (og_content_type_json(no[i])) fail_msg("'%s' accepted", no[i]);
}

/* chat_template_kwargs: thinking and enable_thinking that disagree are a 400 naming both. */
static void test_thinking_kwargs(void **state) {
    (void)state;
    static const char *const bodies[] = {
        "{\"messages\":[" U "],\"chat_template_kwargs\":{\"enable_thinking\":true,\"thinking\":false}}",
        "{\"messages\":[" U "],\"chat_template_kwargs\":{\"thinking\":true,\"enable_thinking\":false}}"};
    for (int i = 0; i < 2; i++) {
        og_api_req r;
        og_api_err e;
        assert_false(og_api_parse(bodies[i], strlen(bodies[i]), true, &g_mdl, &r, &e));
        assert_int_equal(e.status, 400);
        assert_string_equal(e.param, "chat_template_kwargs");
        assert_non_null(strstr(e.message, "'chat_template_kwargs.thinking'"));
        assert_non_null(strstr(e.message, "'chat_template_kwargs.enable_thinking'"));
        og_api_req_free(&r);
    }
    for (int on = 0; on < 2; on++) { /* agreeing: accepted, and what they say */
        char body[256];
        snprintf(body, sizeof body, "{\"messages\":[" U "],\"chat_template_kwargs\":{\"enable_thinking\":%s,"
                 "\"thinking\":%s}}", on ? "true" : "false", on ? "true" : "false");
        og_api_req r;
        og_api_err e;
        if (!og_api_parse(body, strlen(body), true, &g_mdl, &r, &e)) fail_msg("%s", e.message);
        assert_int_equal(r.thinking, on);
        og_api_req_free(&r);
    }
}

/* §1: the envelope's type from the status. */
static void test_error_envelope(void **state) {
    (void)state;
    static const struct {
        int status;
        const char *type;
    } map[] = {{400, "invalid_request_error"}, {401, "authentication_error"}, {403, "permission_error"},
               {404, "not_found_error"},       {413, "request_too_large"},    {429, "rate_limit_error"},
               {500, "api_error"},             {503, "overloaded_error"},     {529, "overloaded_error"}};
    for (size_t i = 0; i < sizeof map / sizeof *map; i++) {
        og_api_err e;
        og_api_error(&e, map[i].status, "whatever_openai_type", "p", NULL, "message %d", map[i].status);
        char *txt = og_msgs_error_json(&e);
        char want[160];
        snprintf(want, sizeof want, "{\"type\":\"error\",\"error\":{\"type\":\"%s\",\"message\":\"message %d\"}}",
                 map[i].type, map[i].status);
        assert_string_equal(txt, want);
        free(txt);
    }
    assert_true(og_endpoint_anthropic("/v1/messages"));
    assert_true(og_endpoint_anthropic("/v1/messages/count_tokens"));
    assert_true(og_endpoint_anthropic("/v1/messages/nope"));
    assert_false(og_endpoint_anthropic("/v1/messagesx"));
    assert_false(og_endpoint_anthropic("/v1/responses"));
    assert_int_equal(og_endpoint_of("/v1/messages/count_tokens"), OG_EP_COUNT_TOKENS);
    assert_int_equal(og_endpoint_of("/v1/responses"), OG_EP_RESPONSES);
    assert_int_equal(og_endpoint_of("/v1/responses/x"), OG_EP_NONE);
}

/* input as a string with instructions, and as items: messages with parts,
 * function_call (consecutive ones one assistant turn) and function_call_output. */
static void test_responses_mapping(void **state) {
    (void)state;
    og_api_req r;
    og_ep_out *o;
    parse_ok(OG_EP_RESPONSES, "{\"model\":\"m\",\"instructions\":\"Answer in French.\",\"input\":\"Hello\","
                              "\"max_output_tokens\":7,\"temperature\":0}",
             &r, &o);
    const og_chat_msg a[] = {{.role = "system", .content = "Answer in French."}, {.role = "user", .content = "Hello"}};
    expect_prompt(&r, a, 2);
    assert_int_equal(r.sp.max_tokens, 7);
    assert_float_equal(r.sp.sampling.temperature, 0.0f, 0);
    og_ep_out_free(o);
    og_api_req_free(&r);

    parse_ok(OG_EP_RESPONSES,
             "{\"input\":[{\"role\":\"developer\",\"content\":\"Use tools.\"},{\"type\":\"message\",\"role\":\"user\","
             "\"content\":[{\"type\":\"input_text\",\"text\":\"Weather \"},{\"type\":\"input_text\",\"text\":"
             "\"here?\"}]},{\"type\":\"reasoning\",\"id\":\"rs_1\",\"summary\":[]},"
             "{\"type\":\"function_call\",\"call_id\":\"call_a\",\"name\":\"loc\",\"arguments\":\"{}\"},"
             "{\"type\":\"function_call\",\"call_id\":\"call_b\",\"name\":\"wx\",\"arguments\":\"{\\\"c\\\":1}\"},"
             "{\"type\":\"function_call_output\",\"call_id\":\"call_a\",\"output\":\"Paris\"},"
             "{\"type\":\"function_call_output\",\"call_id\":\"call_b\",\"output\":[{\"type\":\"input_text\","
             "\"text\":\"rain\"}]},"
             "{\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"Rain in Paris.\"}]},"
             "{\"role\":\"user\",\"content\":\"Thanks\"}]}",
             &r, &o);
    og_chat_tool_call calls[] = {{"function", "loc", "{}"}, {"function", "wx", "{\"c\":1}"}};
    const og_chat_msg b[] = {
        {.role = "developer", .content = "Use tools."},
        {.role = "user", .content = "Weather here?"},
        {.role = "assistant", .tool_calls = calls, .n_tool_calls = 2},
        {.role = "tool", .content = "Paris", .tool_call_id = "call_a"},
        {.role = "tool", .content = "rain", .tool_call_id = "call_b"},
        {.role = "assistant", .content = "Rain in Paris."},
        {.role = "user", .content = "Thanks"},
    };
    expect_prompt(&r, b, 7);
    assert_int_equal(r.sp.max_tokens, -1);
    og_ep_out_free(o);
    og_api_req_free(&r);
}

/* ---- the assembler ------------------------------------------------------ */

/* Feeds pieces of text, then the end. */
static void feed(og_ep_out *o, const char *const *pieces, int n, og_finish f, int stop_index, int n_gen) {
    for (int i = 0; i <= n; i++) {
        og_seq_out so = {.text = (char *)(i < n ? pieces[i] : ""), .n_prompt = 11, .n_gen = i < n ? i + 1 : n_gen,
                         .stop_index = -1, .admitted = true};
        so.len = strlen(so.text);
        if (i == n) {
            so.finish = f;
            so.stop_index = stop_index;
        }
        assert_int_equal(og_ep_out_feed(o, &so), OG_OK);
    }
}

/* The SSE text as a JSON array of {"event": name, "data": object}. */
static json_t *sse_events(const char *s) {
    json_t *a = json_array();
    while (*s) {
        assert_memory_equal(s, "event: ", 7);
        const char *nl = strchr(s, '\n');
        assert_non_null(nl);
        json_t *name = json_stringn(s + 7, (size_t)(nl - s - 7));
        assert_memory_equal(nl + 1, "data: ", 6);
        const char *end = strstr(nl + 7, "\n\n");
        assert_non_null(end);
        json_t *data = json_loadb(nl + 7, (size_t)(end - nl - 7), 0, NULL);
        assert_non_null(data);
        json_array_append_new(a, json_pack("{s:o,s:o}", "event", name, "data", data));
        s = end + 2;
    }
    return a;
}

static void assert_json_equal(json_t *got, const char *want_text) {
    json_t *want = json_loads(want_text, 0, NULL);
    assert_non_null(want);
    if (!json_equal(got, want)) {
        char *g = json_dumps(got, JSON_COMPACT);
        fail_msg("got  %s\nwant %s", g, want_text);
    }
    json_decref(want);
}

/* §3, §4: the events in order, names matching their data's type, the stream
 * reassembled equal to the object; stop_reason and stop_sequence. */
/* s's keep-alive: nothing before keepalive_s passed, then want (s's SSE text
 * is empty before; cleared after). */
static void assert_keepalive(og_ep_out *s, const char *want) {
    size_t n;
    assert_int_equal(og_ep_out_keepalive(s), OG_OK);
    og_ep_out_sse(s, &n);
    assert_int_equal(n, 0);
    const double keep = s->keepalive_s;
    s->keepalive_s = 0;
    assert_int_equal(og_ep_out_keepalive(s), OG_OK);
    assert_string_equal(og_ep_out_sse(s, &n), want);
    og_ep_out_sse_clear(s);
    s->keepalive_s = keep;
}

static void test_messages_output(void **state) {
    (void)state;
    static const char *const pieces[] = {"Hel", "lo", " there"};
    og_api_req r;
    og_ep_out *o, *s;
    const char *body = "{\"model\":\"m\",\"max_tokens\":5,\"stop_sequences\":[\"x\",\"END\"],\"messages\":[{\"role\":"
                       "\"user\",\"content\":\"hi\"}]";
    char buf[512];
    snprintf(buf, sizeof buf, "%s}", body);
    parse_ok(OG_EP_MESSAGES, buf, &r, &o);
    og_api_req_free(&r);
    snprintf(buf, sizeof buf, "%s,\"stream\":true}", body);
    parse_ok(OG_EP_MESSAGES, buf, &r, &s);
    og_api_req_free(&r);
    feed(o, pieces, 3, OG_FINISH_STOP, 1, 3);
    assert_int_equal(og_ep_out_begin(s), OG_OK);
    feed(s, pieces, 3, OG_FINISH_STOP, 1, 3);
    assert_true(og_ep_out_done(s));
    json_t *fin = og_ep_out_final(o);
    char id[64];
    snprintf(id, sizeof id, "%s", json_string_value(json_object_get(fin, "id")));
    assert_memory_equal(id, "msg_", 4);
    assert_int_equal(strlen(id), 4 + 24);
    char want[1024];
    snprintf(want, sizeof want,
             "{\"id\":\"%s\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"served-model\",\"content\":[{"
             "\"type\":\"text\",\"text\":\"Hello there\"}],\"stop_reason\":\"stop_sequence\",\"stop_sequence\":\"END\","
             "\"usage\":{\"input_tokens\":11,\"output_tokens\":3,\"cache_creation_input_tokens\":0,"
             "\"cache_read_input_tokens\":0}}",
             id);
    assert_json_equal(fin, want);
    size_t n;
    json_t *ev = sse_events(og_ep_out_sse(s, &n));
    static const char *const order[] = {"message_start",       "ping",          "content_block_start",
                                        "content_block_delta", "content_block_delta", "content_block_delta",
                                        "content_block_stop",  "message_delta", "message_stop"};
    assert_int_equal(json_array_size(ev), sizeof order / sizeof *order);
    for (size_t i = 0; i < json_array_size(ev); i++) {
        json_t *e = json_array_get(ev, i);
        assert_string_equal(json_string_value(json_object_get(e, "event")), order[i]);
        assert_string_equal(json_string_value(json_object_get(json_object_get(e, "data"), "type")), order[i]);
    }
    /* reassembled as the SDK does: message_start's message, blocks, deltas, message_delta */
    json_t *msg = json_deep_copy(json_object_get(json_object_get(json_array_get(ev, 0), "data"), "message"));
    assert_int_equal(json_array_size(json_object_get(msg, "content")), 0);
    for (size_t i = 1; i < json_array_size(ev); i++) {
        json_t *d = json_object_get(json_array_get(ev, i), "data");
        const char *t = json_string_value(json_object_get(d, "type"));
        json_t *content = json_object_get(msg, "content");
        if (!strcmp(t, "content_block_start")) {
            assert_int_equal(json_integer_value(json_object_get(d, "index")), json_array_size(content));
            json_array_append(content, json_object_get(d, "content_block"));
        } else if (!strcmp(t, "content_block_delta")) {
            json_t *b = json_array_get(content, (size_t)json_integer_value(json_object_get(d, "index")));
            char joined[256];
            snprintf(joined, sizeof joined, "%s%s", json_string_value(json_object_get(b, "text")),
                     json_string_value(json_object_get(json_object_get(d, "delta"), "text")));
            json_object_set_new(b, "text", json_string(joined));
        } else if (!strcmp(t, "message_delta")) {
            json_object_update(msg, json_object_get(d, "delta"));
            json_object_set(msg, "usage", json_object_get(d, "usage"));
        }
    }
    assert_true(json_equal(msg, fin));
    json_decref(msg);
    json_decref(ev);
    json_decref(fin);
    og_ep_out_free(o);
    og_ep_out_free(s);

    /* max_tokens and end_turn; an error mid-stream is the last event */
    snprintf(buf, sizeof buf, "%s}", body);
    parse_ok(OG_EP_MESSAGES, buf, &r, &o);
    og_api_req_free(&r);
    feed(o, pieces, 2, OG_FINISH_LENGTH, -1, 5);
    fin = og_ep_out_final(o);
    assert_string_equal(json_string_value(json_object_get(fin, "stop_reason")), "max_tokens");
    assert_true(json_is_null(json_object_get(fin, "stop_sequence")));
    assert_int_equal(json_integer_value(json_object_get(json_object_get(fin, "usage"), "output_tokens")), 5);
    json_decref(fin);
    og_ep_out_free(o);
    snprintf(buf, sizeof buf, "%s,\"stream\":true}", body);
    parse_ok(OG_EP_MESSAGES, buf, &r, &s);
    og_api_req_free(&r);
    feed(s, NULL, 0, OG_FINISH_STOP, -1, 0);
    ev = sse_events(og_ep_out_sse(s, &n));
    assert_int_equal(json_array_size(ev), 4); /* start, ping, delta, stop: no block */
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(json_object_get(json_array_get(ev, 2), "data"), "delta"), "stop_reason")),
                        "end_turn");
    json_decref(ev);
    og_ep_out_free(s);
    snprintf(buf, sizeof buf, "%s,\"stream\":true}", body);
    parse_ok(OG_EP_MESSAGES, buf, &r, &s);
    og_api_req_free(&r);
    og_ep_out_begin(s);
    og_ep_out_sse_clear(s);
    /* waiting for the first token (a long prefill): a ping once keepalive_s passed, not before */
    assert_keepalive(s, "event: ping\ndata: {\"type\":\"ping\"}\n\n");
    og_api_err e;
    og_api_error(&e, 500, "server_error", NULL, NULL, "the engine failed");
    og_ep_out_error(s, &e);
    assert_true(og_ep_out_done(s));
    ev = sse_events(og_ep_out_sse(s, &n));
    assert_int_equal(json_array_size(ev), 1);
    assert_json_equal(json_array_get(ev, 0), "{\"event\":\"error\",\"data\":{\"type\":\"error\",\"error\":{\"type\":"
                                             "\"api_error\",\"message\":\"the engine failed\"}}}");
    json_decref(ev);
    og_ep_out_free(s);

    /* queued, then admitted with 64 prompt tokens from the prefix cache:
     * nothing but a keep-alive comment while queued (no event may precede
     * message_start), then message_start with the admission's usage */
    snprintf(buf, sizeof buf, "%s,\"stream\":true}", body);
    parse_ok(OG_EP_MESSAGES, buf, &r, &s);
    og_api_req_free(&r);
    og_seq_out q = {.text = "", .n_prompt = 100, .stop_index = -1};
    assert_int_equal(og_ep_out_feed(s, &q), OG_OK);
    assert_keepalive(s, ": keep-alive\n\n");
    q.admitted = true;
    q.n_cached = 64;
    assert_int_equal(og_ep_out_feed(s, &q), OG_OK);
    ev = sse_events(og_ep_out_sse(s, &n));
    assert_int_equal(json_array_size(ev), 2); /* message_start, ping */
    json_t *u = json_object_get(json_object_get(json_object_get(json_array_get(ev, 0), "data"), "message"), "usage");
    assert_json_equal(u, "{\"input_tokens\":36,\"output_tokens\":0,\"cache_creation_input_tokens\":0,"
                         "\"cache_read_input_tokens\":64}"); /* 100 prompt tokens: 36 not cached */
    json_decref(ev);
    og_ep_out_free(s);
}

/* The Responses events: names and types agree, sequence_number counts from 0,
 * the deltas add up to the done text and to the final object's output_text. */
static void test_responses_output(void **state) {
    (void)state;
    static const char *const pieces[] = {"Bon", "jour"};
    og_api_req r;
    og_ep_out *o, *s;
    parse_ok(OG_EP_RESPONSES, "{\"input\":\"hi\",\"instructions\":\"I\",\"max_output_tokens\":2}", &r, &o);
    og_api_req_free(&r);
    parse_ok(OG_EP_RESPONSES, "{\"input\":\"hi\",\"instructions\":\"I\",\"max_output_tokens\":2,\"stream\":true}", &r,
             &s);
    og_api_req_free(&r);
    feed(o, pieces, 2, OG_FINISH_LENGTH, -1, 2);
    feed(s, pieces, 2, OG_FINISH_LENGTH, -1, 2);
    json_t *fin = og_ep_out_final(o);
    assert_string_equal(json_string_value(json_object_get(fin, "status")), "incomplete");
    assert_string_equal(json_string_value(json_object_get(json_object_get(fin, "incomplete_details"), "reason")),
                        "max_output_tokens");
    assert_string_equal(json_string_value(json_object_get(fin, "instructions")), "I");
    assert_string_equal(json_string_value(json_object_get(fin, "object")), "response");
    json_t *item = json_array_get(json_object_get(fin, "output"), 0);
    assert_string_equal(json_string_value(json_object_get(item, "type")), "message");
    assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(item, "content"), 0), "text")),
                        "Bonjour");
    json_t *u = json_object_get(fin, "usage");
    assert_int_equal(json_integer_value(json_object_get(u, "total_tokens")), 13);
    size_t n;
    json_t *ev = sse_events(og_ep_out_sse(s, &n));
    static const char *const order[] = {
        "response.created",           "response.in_progress",      "response.output_item.added",
        "response.content_part.added", "response.output_text.delta", "response.output_text.delta",
        "response.output_text.done",  "response.content_part.done", "response.output_item.done",
        "response.incomplete"};
    assert_int_equal(json_array_size(ev), sizeof order / sizeof *order);
    char text[64] = "";
    for (size_t i = 0; i < json_array_size(ev); i++) {
        json_t *d = json_object_get(json_array_get(ev, i), "data");
        assert_string_equal(json_string_value(json_object_get(json_array_get(ev, i), "event")), order[i]);
        assert_string_equal(json_string_value(json_object_get(d, "type")), order[i]);
        assert_int_equal(json_integer_value(json_object_get(d, "sequence_number")), (json_int_t)i);
        if (!strcmp(order[i], "response.output_text.delta"))
            strncat(text, json_string_value(json_object_get(d, "delta")), sizeof text - strlen(text) - 1);
        if (!strcmp(order[i], "response.output_text.done"))
            assert_string_equal(json_string_value(json_object_get(d, "text")), text);
    }
    assert_string_equal(text, "Bonjour");
    json_t *last = json_object_get(json_object_get(json_array_get(ev, 9), "data"), "response");
    json_t *created = json_object_get(json_object_get(json_array_get(ev, 0), "data"), "response");
    assert_string_equal(json_string_value(json_object_get(created, "status")), "in_progress");
    assert_int_equal(json_array_size(json_object_get(created, "output")), 0);
    /* the same response but for the ids, which differ per request */
    json_object_del(last, "id");
    json_object_del(fin, "id");
    json_object_del(json_array_get(json_object_get(last, "output"), 0), "id");
    json_object_del(json_array_get(json_object_get(fin, "output"), 0), "id");
    assert_true(json_equal(last, fin));
    json_decref(ev);
    json_decref(fin);
    og_ep_out_free(o);
    og_ep_out_free(s);
    /* the Responses stream's keep-alive: an SSE comment; none once the stream ended */
    parse_ok(OG_EP_RESPONSES, "{\"input\":\"hi\",\"stream\":true}", &r, &s);
    og_api_req_free(&r);
    og_ep_out_begin(s);
    og_ep_out_sse_clear(s);
    s->keepalive_s = 0;
    og_ep_out_keepalive(s);
    assert_string_equal(og_ep_out_sse(s, &n), ": keep-alive\n\n");
    feed(s, pieces, 1, OG_FINISH_STOP, -1, 1);
    og_ep_out_sse_clear(s);
    og_ep_out_keepalive(s);
    og_ep_out_sse(s, &n);
    assert_int_equal(n, 0);
    og_ep_out_free(s);
}

/* Hand-written model output (text with the chat encoding's markers) as the
 * engine reports it: every token with its text offset, and the text, cut
 * at keep bytes when a stop string cut it (keep = -1: all of it). */
static void feed_model_output(og_ep_out *o, const char *out, int keep, og_finish f, int stop_index) {
    og_ids ids = {0};
    assert_int_equal(og_tokenize(g_tok, out, strlen(out), false, true, &ids), OG_OK);
    og_tok_out *toks = calloc(ids.n, sizeof *toks);
    char text[1024];
    size_t len = 0;
    for (size_t i = 0; i < ids.n; i++) {
        toks[i].id = ids.v[i];
        toks[i].text_start = (uint32_t)len;
        int b = og_token_to_bytes(g_tok, ids.v[i], false, text + len, sizeof text - len);
        assert_true(b >= 0 && len + (size_t)b < sizeof text);
        len += (size_t)b;
    }
    if (keep >= 0) len = (size_t)keep;
    text[len] = 0;
    og_seq_out so = {.text = text, .len = len, .toks = toks, .n_toks = (int)ids.n, .finish = f, .n_prompt = 3,
                     .n_gen = (int)ids.n, .stop_index = stop_index, .admitted = true};
    assert_int_equal(og_ep_out_feed(o, &so), OG_OK);
    free(toks);
    og_ids_free(&ids);
}

#define CB "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define CE "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>"
#define KB "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define KE "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>"
#define SEP "<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>"

/* Through og_outparse: a V3.1 thinking-mode output with reasoning, text and a
 * call becomes thinking + text + tool_use blocks (messages) and reasoning +
 * message + function_call items (responses); a stop string that cut the last
 * token leaves only its bytes before the stop. */
static void test_parsed_output(void **state) {
    (void)state;
    og_api_model saved = g_mdl;
    g_mdl.chat = OG_CHAT_DEEPSEEK3_1;
    const char *tools = "\"tools\":[{\"name\":\"get_weather\",\"input_schema\":{\"type\":\"object\"}}]";
    const char *out = "Let me think</think>Calling." CB KB "get_weather" SEP "{\"city\":\"Paris\"}" KE CE;
    char body[512];
    og_api_req r;
    og_ep_out *o;
    snprintf(body, sizeof body, "{\"model\":\"m\",\"max_tokens\":50,\"thinking\":{\"type\":\"enabled\","
             "\"budget_tokens\":2000},%s,\"messages\":[{\"role\":\"user\",\"content\":\"Paris?\"}]}", tools);
    parse_ok(OG_EP_MESSAGES, body, &r, &o);
    assert_true(r.parse && r.out.in_reasoning && r.out.parse_tools);
    og_api_req_free(&r);
    feed_model_output(o, out, -1, OG_FINISH_STOP, -1);
    json_t *fin = og_ep_out_final(o);
    json_t *content = json_object_get(fin, "content");
    json_t *use = json_array_get(content, 2);
    char want[512];
    snprintf(want, sizeof want, "[{\"type\":\"thinking\",\"thinking\":\"Let me think\",\"signature\":\"\"},"
             "{\"type\":\"text\",\"text\":\"Calling.\"},{\"type\":\"tool_use\",\"id\":\"%s\",\"name\":"
             "\"get_weather\",\"input\":{\"city\":\"Paris\"}}]",
             json_string_value(json_object_get(use, "id")));
    assert_json_equal(content, want);
    assert_memory_equal(json_string_value(json_object_get(use, "id")), "toolu_", 6);
    assert_string_equal(json_string_value(json_object_get(fin, "stop_reason")), "tool_use");
    json_decref(fin);
    og_ep_out_free(o);

    parse_ok(OG_EP_RESPONSES, "{\"input\":\"Paris?\",\"reasoning\":{\"effort\":\"high\"},\"tools\":[{\"type\":"
                              "\"function\",\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\"}}]}",
             &r, &o);
    assert_true(r.parse && r.out.in_reasoning);
    og_api_req_free(&r);
    feed_model_output(o, out, -1, OG_FINISH_STOP, -1);
    fin = og_ep_out_final(o);
    json_t *items = json_object_get(fin, "output");
    assert_int_equal(json_array_size(items), 3);
    json_t *rs = json_array_get(items, 0), *msg = json_array_get(items, 1), *fc = json_array_get(items, 2);
    assert_string_equal(json_string_value(json_object_get(rs, "type")), "reasoning");
    assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(rs, "content"), 0), "text")),
                        "Let me think");
    assert_string_equal(json_string_value(json_object_get(msg, "type")), "message");
    assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(msg, "content"), 0), "text")),
                        "Calling.");
    assert_string_equal(json_string_value(json_object_get(fc, "type")), "function_call");
    assert_string_equal(json_string_value(json_object_get(fc, "name")), "get_weather");
    assert_string_equal(json_string_value(json_object_get(fc, "arguments")), "{\"city\":\"Paris\"}");
    assert_memory_equal(json_string_value(json_object_get(fc, "call_id")), "call_", 5);
    assert_string_equal(json_string_value(json_object_get(fin, "status")), "completed");
    /* reasoning_tokens: the tokens up to and with the closing marker (the reference: that text tokenized alone) */
    og_ids think = {0};
    assert_int_equal(og_tokenize(g_tok, "Let me think</think>", 20, false, true, &think), OG_OK);
    json_t *usage = json_object_get(fin, "usage");
    assert_true(think.n > 3 && (int)think.n < json_integer_value(json_object_get(usage, "output_tokens")));
    assert_int_equal(json_integer_value(json_object_get(json_object_get(usage, "output_tokens_details"), "reasoning_tokens")),
                     think.n);
    og_ids_free(&think);
    json_decref(fin);
    og_ep_out_free(o);
    g_mdl = saved;

    /* V3, tools parsed: "Hello world" cut by the stop string "wor" inside its last token */
    snprintf(body, sizeof body, "{\"model\":\"m\",\"max_tokens\":50,%s,\"stop_sequences\":[\"wor\"],"
             "\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}", tools);
    parse_ok(OG_EP_MESSAGES, body, &r, &o);
    assert_true(r.parse);
    og_api_req_free(&r);
    feed_model_output(o, "Hello world", 6, OG_FINISH_STOP, 0);
    fin = og_ep_out_final(o);
    assert_json_equal(json_object_get(fin, "content"), "[{\"type\":\"text\",\"text\":\"Hello \"}]");
    assert_string_equal(json_string_value(json_object_get(fin, "stop_reason")), "stop_sequence");
    assert_string_equal(json_string_value(json_object_get(fin, "stop_sequence")), "wor");
    json_decref(fin);
    og_ep_out_free(o);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_endpoints MODEL.gguf (with a tokenizer)\n");
        return 1;
    }
    g_path = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_messages_mapping), cmocka_unit_test(test_messages_errors),
        cmocka_unit_test(test_error_envelope),   cmocka_unit_test(test_responses_mapping),
        cmocka_unit_test(test_messages_output),  cmocka_unit_test(test_responses_output),
        cmocka_unit_test(test_parsed_output),    cmocka_unit_test(test_content_type),
        cmocka_unit_test(test_thinking_kwargs),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
