/* The output parser: splits a chat model's generated token ids into answer
 * text, reasoning text and tool calls, for every chat encoding the project
 * renders (og_chat_kind: DeepSeek V3, V3.1, R1-style, V4 DSML, V4.1 DSML).
 * It works on token ids, not on detokenized text: the think and tool markers
 * are control tokens the text detokenizer drops. One parser per choice; the
 * OpenAI chat, Anthropic messages and OpenAI responses endpoints all consume
 * its events. No HTTP, no JSON envelopes here.
 *
 * Contract (written before the implementation so the endpoints can be built
 * in parallel; refine the implementation, keep these names and meanings):
 * - events come in output order; a tool call is BEGIN (index, id, name), then
 *   zero or more ARGS pieces whose concatenation is the call's arguments as a
 *   JSON text, then END;
 * - text that is inside no marker is CONTENT; text between the think markers
 *   (or from the start, when the prompt opened the think block) is REASONING;
 * - a malformed call (a marker sequence the format does not allow, arguments
 *   that are not a JSON object when the call ends, the output ending inside a
 *   call) never crashes: what was not yet reported as a call is reported as
 *   CONTENT text, and og_outparse_malformed() says so;
 * - a marker split across several tokens (a DSML tag spelled by ordinary
 *   tokens) is recognized: text that might be the start of a marker is held
 *   back until it is known, and released by og_outparse_finish.
 * Implementation notes (outparse.c): a marker the vocabulary holds as one
 * CONTROL token is recognized by that id only (its text spelled by ordinary
 * tokens stays text); a call is reported when it is complete and well formed,
 * BEGIN, its ARGS and END together, so a malformed call is never half
 * reported (its text, as the detokenizer shows it, becomes CONTENT); DSML
 * string="true" values become JSON strings, string="false" values are kept as
 * the JSON text written. */
#ifndef OG_OUTPARSE_H
#define OG_OUTPARSE_H

#include "og_base.h"
#include "og_engine.h"
#include "og_grammar.h"
#include "og_tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum og_out_kind {
    OG_OUT_CONTENT = 1, /* answer text: text/len */
    OG_OUT_REASONING,   /* reasoning text: text/len */
    OG_OUT_TOOL_BEGIN,  /* a tool call starts: tool_index, id ("call_..."), name */
    OG_OUT_TOOL_ARGS,   /* a piece of the call's arguments (JSON text): tool_index, text/len */
    OG_OUT_TOOL_END,    /* the call is complete: tool_index; arguments is the whole JSON text */
} og_out_kind;

typedef struct og_out_ev {
    og_out_kind kind;
    int tool_index;          /* 0, 1, ... in output order (tool events only) */
    const char *id;          /* BEGIN/END: "call_" + 24 alphanumerics, NUL-terminated */
    const char *name;        /* BEGIN/END: the function's name, NUL-terminated */
    const char *text;        /* CONTENT/REASONING/ARGS: bytes (valid UTF-8), not NUL-terminated */
    size_t len;
    const char *arguments;   /* END: the complete arguments, NUL-terminated */
} og_out_ev;

/* Receives events; pointers are valid only during the call. */
typedef void (*og_out_cb)(void *ud, const og_out_ev *ev);

typedef struct og_outparse_opts {
    og_chat_kind kind;       /* the encoding the prompt was rendered in */
    bool in_reasoning;       /* the prompt ended inside the think block (thinking mode's generation
                                prompt): output is REASONING until the closing marker */
    bool parse_reasoning;    /* false: think markers' text is passed through as CONTENT */
    bool parse_tools;        /* the request carried tools: tool markers start calls (else they are text) */
    uint64_t id_seed;        /* call ids are derived from it (deterministic per request) */
} og_outparse_opts;

typedef struct og_outparse og_outparse;

/* Errors: OG_ERR_INVALID_ARG (NULL or an unknown kind), OG_ERR_NOMEM. */
og_status og_outparse_new(const og_tokenizer *tok, const og_outparse_opts *o, og_outparse **out);
void og_outparse_free(og_outparse *p);

/* Feeds n generated token ids (the end-of-generation token excluded) and emits
 * the events they complete. Errors: OG_ERR_NOMEM (the parser is then unusable). */
og_status og_outparse_feed(og_outparse *p, const int32_t *ids, int n, og_out_cb cb, void *ud);

/* The output ended: releases held-back text (but for a character it never
 * finished: dropped, as the engine's text drops it), and reports an
 * unterminated call as CONTENT (og_outparse_malformed then returns true).
 * Errors: OG_ERR_NOMEM. */
og_status og_outparse_finish(og_outparse *p, og_out_cb cb, void *ud);

/* As og_outparse_finish, for an output that was cut (max_tokens, a stop
 * string): an unfinished call, and the text inside a calls block after its
 * last complete call, are dropped instead of reported as CONTENT (the call's
 * arguments are incomplete and its marker syntax is not the model's answer);
 * og_outparse_cut_call then returns true. So is the held-back start of a
 * byte-matched marker the cut split (a DSML tag spelled by several tokens:
 * "<｜DSML｜ ca" is markup, never content). Complete calls stay reported.
 * Errors: OG_ERR_NOMEM. */
og_status og_outparse_finish_cut(og_outparse *p, og_out_cb cb, void *ud);
bool og_outparse_cut_call(const og_outparse *p);

/* Feeds one og_seq_take's output (its text and tokens), holding back the
 * last token until the next take or the end (a stop string found later may
 * cut its text; the parser keeps the output's text from that token on). When
 * so->finish says the output ended: feeds the held-back token, only its bytes
 * before the stop when the text ends inside them, then finishes with
 * og_outparse_finish_cut when the output was cut (OG_FINISH_LENGTH, or
 * OG_FINISH_STOP by a stop string: stop_index >= 0), else og_outparse_finish.
 * The one way every endpoint feeds its parser. Errors: OG_ERR_INVALID_ARG,
 * OG_ERR_NOMEM (the first one met; every token is still taken). */
og_status og_outparse_take(og_outparse *p, const og_seq_out *so, og_out_cb cb, void *ud);

/* Tokens fed by og_outparse_take while inside the think block (its closing
 * marker's included), for usage.completion_tokens_details.reasoning_tokens;
 * 0 for NULL. */
int og_outparse_reasoning_tokens(const og_outparse *p);

/* Tool calls completed so far (END events). */
int og_outparse_n_calls(const og_outparse *p);

/* True while the output is inside the think block (what the next token
 * continues), for usage.completion_tokens_details.reasoning_tokens. */
bool og_outparse_in_reasoning(const og_outparse *p);

/* True once some call was malformed and reported as text. */
bool og_outparse_malformed(const og_outparse *p);

/* Feeds raw text bytes as if ordinary tokens had spelled them (the last token
 * of an output a stop string cut: only its bytes before the stop). Errors:
 * OG_ERR_INVALID_ARG, OG_ERR_NOMEM. */
og_status og_outparse_feed_bytes(og_outparse *p, const char *bytes, size_t n, og_out_cb cb, void *ud);

/* How kind writes tool calls, for og_grammar_tool_calls (tool_choice
 * "required" or a named function): its markers as control tokens where the
 * vocabulary has them, else as text; close_reasoning: the prompt left the
 * think block open, so the layout starts with </think>. DSML parameters are
 * all written string="false" (JSON values, which the parser takes for every
 * type). Errors: OG_ERR_INVALID_ARG (an unknown kind). */
og_status og_outparse_call_layout(const og_tokenizer *tok, og_chat_kind kind, bool close_reasoning,
                                  og_tool_layout *lay);

/* The control tokens that start a call block in kind (V3 family: the calls
 * and call begin markers; DSML: none unless the vocabulary has the tag as one
 * token), at most cap of them into ids: what tool_choice "none" masks.
 * Returns the count. */
int og_outparse_call_tokens(const og_tokenizer *tok, og_chat_kind kind, int32_t *ids, int cap);

#endif
