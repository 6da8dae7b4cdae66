/* The Anthropic Messages endpoint (POST /v1/messages, /v1/messages/count_tokens;
 * shared/spec/anthropic-messages.md) and the OpenAI Responses endpoint (POST
 * /v1/responses, the subset the openai client's responses.create uses), for
 * server.c. Internal to the server part.
 *
 * A request is translated into the OpenAI chat request it means (messages,
 * tools, tool_choice, thinking, stop strings, sampling) and parsed by
 * og_api_parse, so every endpoint renders, tokenizes, samples, constrains and
 * checks the context the same way. The output (the engine's og_seq_out pieces,
 * split by og_outparse into text, reasoning and tool calls) is assembled into
 * content blocks (messages) or output items (responses): as the endpoint's SSE
 * events while streaming, and as its response object at the end. */
#ifndef OG_ENDPOINTS_H
#define OG_ENDPOINTS_H

#include "og_api.h"
#include "og_outparse.h"

#include <time.h>

typedef enum og_endpoint {
    OG_EP_NONE = 0,
    OG_EP_CHAT,          /* POST /v1/chat/completions */
    OG_EP_COMPLETIONS,   /* POST /v1/completions */
    OG_EP_MESSAGES,      /* POST /v1/messages */
    OG_EP_COUNT_TOKENS,  /* POST /v1/messages/count_tokens */
    OG_EP_RESPONSES,     /* POST /v1/responses */
} og_endpoint;

/* The generation endpoint a URL path names, or OG_EP_NONE. */
og_endpoint og_endpoint_of(const char *path);

/* True for the paths whose errors use the Anthropic envelope (/v1/messages...). */
bool og_endpoint_anthropic(const char *path);

/* True when a request's Content-Type header (NULL: none) says JSON:
 * "application/json", any case, with or without parameters (charset=...).
 * The API endpoints refuse other types with 415: a browser sends text/plain,
 * application/x-www-form-urlencoded and multipart/form-data cross-origin
 * without a CORS preflight, so a web page could otherwise drive a local server. */
bool og_content_type_json(const char *ct);

/* The Anthropic error envelope {"type": "error", "error": {"type", "message"}}
 * of e, its type from e->status as anthropic-messages.md §1 lists them (400
 * invalid_request_error, 401 authentication_error, 403 permission_error, 404
 * not_found_error, 413 request_too_large, 429 rate_limit_error, 503 and 529
 * overloaded_error, other 5xx api_error). A new reference / a malloc'ed JSON
 * text; NULL when out of memory. */
json_t *og_msgs_error_obj(const og_api_err *e);
char *og_msgs_error_json(const og_api_err *e);

/* What the output assembler needs to know about its request. */
typedef struct og_ep_meta {
    og_endpoint ep;
    const char *model;       /* the served model id, echoed */
    uint64_t id_seed;        /* ids (msg_, resp_, tool call ids) derive from it */
    time_t created;          /* Unix seconds */
} og_ep_meta;

typedef struct og_ep_out og_ep_out;

/* Translates an Anthropic Messages body (count_only: count_tokens', where
 * max_tokens is not required) or a Responses body into an OpenAI chat body:
 * a new reference in *chat, or NULL with *e filled (400 naming the field, 500
 * when out of memory). *echo (responses only, else NULL): the request fields
 * the response object repeats (instructions, max_output_tokens, tools, ...),
 * a new reference. Exposed for the unit tests and the fuzzer. */
bool og_msgs_to_chat(json_t *root, bool count_only, json_t **chat, og_api_err *e);
bool og_resp_to_chat(json_t *root, json_t **chat, json_t **echo, og_api_err *e);

/* Parses body (len bytes) for endpoint meta->ep (MESSAGES, COUNT_TOKENS or
 * RESPONSES): the translation above, then og_api_parse(chat = true) into *req
 * (the prompt in req->prompts[0]; the caller frees it with og_api_req_free),
 * and, unless ep is COUNT_TOKENS, the output assembler in *out (the caller
 * frees it with og_ep_out_free). Returns false with *e filled: the status and
 * message for the client (the server renders the envelope by path). */
bool og_ep_parse(const og_ep_meta *meta, const char *body, size_t len, const og_api_model *mdl, og_api_req *req,
                 og_ep_out **out, og_api_err *e);

/* count_tokens' answer {"input_tokens": N}: N = the rendered prompt's tokens
 * (BOS included, generation prompt included), as the messages endpoint would
 * prefill them and report them in usage.input_tokens. */
json_t *og_ep_count_json(const og_api_req *req);

void og_ep_out_free(og_ep_out *o);

/* One piece of the sequence's output (og_seq_take's): its text or token ids
 * go through the output parser into blocks; when o->finish is set, the
 * assembler closes what is open and records why it ended (finish, stop_index,
 * usage). Streaming, the events these produce are appended to the SSE buffer
 * (og_ep_out_sse). Errors: OG_ERR_NOMEM (the request should end in an error). */
og_status og_ep_out_feed(og_ep_out *o, const og_seq_out *so);

/* Streaming: the events that open the stream (message_start + ping;
 * response.created + response.in_progress), once, before any output. */
og_status og_ep_out_begin(og_ep_out *o);

/* Streaming: the error event for e after the stream began (the HTTP status
 * is already 200), which ends the stream. */
og_status og_ep_out_error(og_ep_out *o, const og_api_err *e);

/* Streaming, called while waiting for output: when nothing was sent for
 * keepalive_s seconds (OG_EP_KEEPALIVE_S unless a test sets it), a keep-alive
 * (messages: a ping event, anthropic-messages.md §4; responses: an SSE comment
 * line), so that a long prefill does not look like a dead connection to a
 * proxy or client. Errors: OG_ERR_NOMEM. */
#define OG_EP_KEEPALIVE_S 10.0
og_status og_ep_out_keepalive(og_ep_out *o);

/* The SSE text produced since the last og_ep_out_sse_clear (NUL-terminated;
 * *len bytes). */
const char *og_ep_out_sse(const og_ep_out *o, size_t *len);
void og_ep_out_sse_clear(og_ep_out *o);

/* True once the stream's last event was produced (message_stop,
 * response.completed / response.incomplete, or an error). */
bool og_ep_out_done(const og_ep_out *o);

/* The non-streamed response object (a new reference; NULL when out of
 * memory), after the feed that carried the finish. */
json_t *og_ep_out_final(og_ep_out *o);

/* Tokens the assembler saw as output (usage.output_tokens). */
int og_ep_out_n_gen(const og_ep_out *o);

/* ---- the assembler's state, for endpoints.c, messages.c and responses.c --- */

typedef enum og_blk_kind { OG_BLK_TEXT, OG_BLK_THINKING, OG_BLK_TOOL } og_blk_kind;

/* One content block (messages) / output item (responses). */
typedef struct og_blk {
    og_blk_kind kind;
    char *text;              /* the text, the thinking, or the tool call's arguments (JSON text) */
    size_t len, cap;         /* bytes */
    char call_id[48];        /* tool: the parser's "call_..." id */
    char *name;              /* tool: the function's name (malloc'ed) */
} og_blk;

/* What an endpoint writes, called by the assembler as the output comes. */
typedef struct og_ep_ops {
    void (*begin)(og_ep_out *o);                                 /* streaming: the opening events */
    void (*blk_start)(og_ep_out *o, int i);                      /* streaming: block i opens */
    void (*blk_delta)(og_ep_out *o, int i, const char *t, size_t n); /* streaming: n bytes added to block i */
    void (*blk_stop)(og_ep_out *o, int i);                       /* streaming: block i is complete */
    void (*end)(og_ep_out *o);                                   /* streaming: the closing events */
    void (*error)(og_ep_out *o, const og_api_err *e);            /* streaming: the error event */
    void (*keepalive)(og_ep_out *o);                             /* streaming: nothing to say yet */
    json_t *(*final)(og_ep_out *o);                              /* the response object */
} og_ep_ops;

extern const og_ep_ops og_msgs_ops, og_resp_ops;

struct og_ep_out {
    og_ep_meta meta;
    const og_ep_ops *ops;
    char id[48];             /* msg_... / resp_... */
    bool stream, begun, done, oom;
    json_t *echo;            /* responses: the request fields the response repeats (owned) */
    char *stop[OG_ENGINE_MAX_STOP]; /* the stop strings (owned), for stop_sequence */
    int n_stop;
    og_blk *blk;             /* [n_blk] in output order */
    int n_blk, cap_blk;
    bool open;               /* blk[n_blk - 1] is still growing */
    og_outparse *parser;     /* splits token ids into events; NULL: the text is all CONTENT */
    int max_calls, n_calls;  /* tool calls kept at most (1: parallel tool use off; 0: any), kept so far */
    bool drop_call;          /* the call being reported is over max_calls */
    int n_prompt, n_gen;     /* tokens */
    int n_cached;            /* of n_prompt, read from the prefix cache (usage's cached / cache_read tokens) */
    og_finish finish;        /* NONE until the sequence ended */
    int stop_index;          /* og_seq_out's */
    char *sse;               /* streaming: events not yet taken (og_ep_out_sse) */
    size_t sse_len, sse_cap;
    uint64_t seq_no;         /* responses: the next event's sequence_number */
    double last_event_s;     /* CLOCK_MONOTONIC seconds of the last event appended */
    double keepalive_s;      /* og_ep_out_keepalive's interval, seconds */
};

/* Appends one SSE event "event: NAME\ndata: JSON\n\n" (takes data; sets
 * o->oom when out of memory). */
void og_ep_sse_event(og_ep_out *o, const char *name, json_t *data);

/* One function tool as an endpoint defines it, read and checked by its
 * og_ep_tool_fn (borrowed values; NULL: absent): what the chat request's
 * {"type": "function", "function": {...}} holds. */
typedef struct og_ep_tool {
    json_t *name, *description, *parameters, *strict;
} og_ep_tool;
typedef bool (*og_ep_tool_fn)(json_t *t, const char *where, og_ep_tool *out, og_api_err *e);

/* tools (an endpoint's array; where = "tools[i]" for each element) as the
 * chat request's function tools in chat["tools"]. Returns false with *e
 * filled (400 from read or for a non-array / non-object, 500 out of memory). */
bool og_ep_tools_to_chat(json_t *tools, json_t *chat, og_ep_tool_fn read, og_api_err *e);

/* Appends an SSE comment line ": TEXT" (clients skip it). */
void og_ep_sse_comment(og_ep_out *o, const char *text);

/* A derived id: prefix + 24 alphanumerics from seed and salt. */
void og_ep_id(char *out, size_t cap, const char *prefix, uint64_t seed, uint64_t salt);

#endif
