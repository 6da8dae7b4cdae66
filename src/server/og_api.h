/* The OpenAI request/response mapping (shared/spec/openai-api.md): a request
 * body becomes token ids and og_seq_params, or an error with the status code,
 * type, param and code the spec's §8 asks for. No HTTP here. */
#ifndef OG_API_H
#define OG_API_H

#include "og_engine.h"
#include "og_outparse.h"

#include <jansson.h>
#include <stdarg.h>

#define OG_API_MAX_PROMPTS 16 /* prompts per /v1/completions request */
#define OG_API_MAX_N 16       /* n and best_of: choices (candidates) per prompt, also at most --parallel */
#define OG_API_MAX_CHOICES 64 /* sequences per request: prompts x best_of (or n) */

/* An error for the client: HTTP status plus the OpenAI error envelope fields. */
typedef struct og_api_err {
    int status;              /* 400, 401, 404, 413, 503, ... */
    const char *type;        /* invalid_request_error, ... */
    const char *code;        /* or NULL */
    char param[64];          /* "" = null */
    char message[512];
} og_api_err;

/* What the parser needs to know about the served model. */
typedef struct og_api_model {
    const og_tokenizer *tok;
    og_chat_kind chat;
    int32_t n_vocab;
    int ctx;                 /* positions per sequence */
    uint32_t n_layer;        /* for per-layer metrics */
    int capacity;            /* sequences the engine holds at once: parallel + queue */
    int parallel;            /* sequences decoding at once: n (best_of) is at most this; 0: only OG_API_MAX_N */
    bool no_fork;            /* the model's caches cannot fork (og_model_info.kv_fork false): n and best_of must be 1 */
    int max_tokens;          /* tokens generated for a request that sets no max_tokens (--max-tokens; 0: until
                                the context is full, or completions' 16), clipped to what the context leaves */
    bool reasoning;          /* --reasoning on: thinking mode for chats that do not say (reasoning_effort,
                                chat_template_kwargs.thinking / enable_thinking) */
} og_api_model;

/* tool_choice (openai-api.md §2) */
typedef enum og_tool_choice {
    OG_TOOLS_NONE = 0,       /* no tools, or "none": the tools stay in the prompt, the call markers are masked */
    OG_TOOLS_AUTO,           /* the model may call */
    OG_TOOLS_REQUIRED,       /* constrained decoding: only calls (og_grammar_tool_calls) */
    OG_TOOLS_NAMED,          /* {"type":"function","function":{"name"}}: only calls of that one */
} og_tool_choice;

typedef struct og_api_req {
    bool chat;               /* /v1/chat/completions (else /v1/completions) */
    bool stream, include_usage, echo, reproducible;
    bool logprobs;           /* chat: logprobs; completions: logprobs != null */
    int top_logprobs;        /* alternatives per token */
    og_seq_params sp;        /* stop strings point into root */
    int n;                   /* choices returned per prompt (n; 1 for the other endpoints: 0 reads as 1) */
    int best_of;             /* sequences generated per prompt (completions' best_of, >= n; else n): one
                                prefill each (og_engine_submit_n); with best_of > n the n whose tokens' log-probs
                                sum highest are returned, not streamed */
    og_ids prompts[OG_API_MAX_PROMPTS];
    int n_prompts;
    char *prompt_text[OG_API_MAX_PROMPTS]; /* for echo: the prompt as text (malloc'ed) */
    int32_t *bias_ids;       /* [n_bias] (sp.sampling points here) */
    int32_t *teacher;        /* teacher_tokens (sp.forced points here), or NULL */
    float *bias_values;
    json_t *root;            /* the parsed body (owned) */
    og_grammar *grammar;     /* response_format, or the tool-call grammar (owned; sp.grammar points here) */
    /* chat output parsing (og_outparse): the engine then reports every token (sp.logprobs), the client
       sees log-probs only when it asked (logprobs) */
    bool parse;              /* the output goes through og_outparse (parse_tools or parse_reasoning) */
    og_outparse_opts out;    /* the parser's options for this request (kind, reasoning state, tools) */
    og_tool_choice tool_choice;
    int max_calls;           /* tool calls reported at most (1: parallel_tool_calls false; 0: any) */
    bool thinking;           /* the prompt was rendered in thinking mode */
    int reasoning_effort;    /* V4.1's 1..100 rendered (0: the encoding's default) */
    json_t *call_tools;      /* tool_choice required / named: [[name, parameters], ...] for the call grammar,
                                built once the conversation is rendered (owned) */
} og_api_req;

/* Parses and validates a request body (len bytes) for the chat (chat = true)
 * or completions endpoint, renders and tokenizes the prompt: messages with
 * og_chat_tokenize_opts (control-token text typed in a message is plain text;
 * tools, assistant tool_calls, tool results with tool_call_id and the thinking
 * mode rendered as the encoding does), tool_choice and reasoning controls
 * mapped (og_api_req.out, .tool_choice, sp.grammar), a
 * completions prompt with special tokens parsed, and a prompt text that begins
 * with the BOS text gets no second BOS. Returns true on
 * success; false with *e filled (status 400, or 500 for out of memory). The
 * context check (prompt + max tokens against ctx) is done here too
 * (code "context_length_exceeded", the numbers in the message). */
bool og_api_parse(const char *body, size_t len, bool chat, const og_api_model *mdl, og_api_req *out, og_api_err *e);
void og_api_req_free(og_api_req *r);

/* Sets *e and returns false (for one-line error returns). param and code may be
 * NULL (JSON null). og_api_verror: the same with a va_list. */
bool og_api_error(og_api_err *e, int status, const char *type, const char *param, const char *code, const char *fmt,
                  ...) __attribute__((format(printf, 6, 7)));
bool og_api_verror(og_api_err *e, int status, const char *type, const char *param, const char *code, const char *fmt,
                   va_list ap) __attribute__((format(printf, 6, 0)));

/* The error envelope {"error": {message, type, param, code}}: as a JSON value
 * (caller owns; NULL if out of memory), and as a JSON text (malloc'ed). */
json_t *og_api_error_obj(const og_api_err *e);
char *og_api_error_json(const og_api_err *e);

/* A JSON string from bytes that may not be valid UTF-8 (invalid bytes become
 * U+FFFD). New reference, NULL when out of memory. */
json_t *og_api_jstr(const char *s, size_t n);

/* Where completions' text_offset counts from: text is the output so far (the
 * tokens' text_start are byte offsets into it), base the characters before it
 * (an echoed prompt); byte/chars a cursor kept between calls (start at 0). */
typedef struct og_api_offsets {
    const char *text;
    size_t base, byte, chars;
} og_api_offsets;

/* The logprobs object of one chunk or response for tokens toks[0..n):
 * chat shape ({"content": [...], "refusal": null}) or completions shape
 * ({"tokens", "token_logprobs", "top_logprobs", "text_offset"}: offsets in
 * characters, as OpenAI counts them; off may be NULL for chat). */
json_t *og_api_logprobs(const og_tokenizer *tok, bool chat, const og_tok_out *toks, int n, og_api_offsets *off);

/* Characters (UTF-8 code points; an invalid byte counts as one) in s[0..n). */
size_t og_api_chars(const char *s, size_t n);

/* The thinking mode and V4.1 effort a chat asks for (README "Reasoning"):
 * chat_template_kwargs.thinking (or enable_thinking) wins, then
 * reasoning_effort ("none": off; low, medium, high, max: on), then the server's
 * --reasoning default. V4.1's effort: low 50, medium 62 (our choice, between
 * the spec's low and high, deepseek4.md §5 defines none), high 75, max 100;
 * 0 (the encoding's default, 75) when the request names none. Returns false
 * with *e (400 naming the field) on a bad value. */
bool og_api_reasoning(json_t *root, const og_api_model *mdl, bool *thinking, int *effort, og_api_err *e);

/* "stop" / "length" / NULL (still running, cancelled, error). */
const char *og_api_finish_reason(og_finish f);

#endif
