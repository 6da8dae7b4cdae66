/* onegpu constrained decoding: response_format (json_object, json_schema)
 * compiled to a byte-level pushdown automaton, and the per-step token mask.
 *
 * A grammar is a set of rules (alternatives of byte sets and rule references);
 * the matcher keeps the set of live parse stacks (stack frames interned, so a
 * set of stacks is a small sorted id list) and builds a DFA over those sets on
 * the fly: each (set, byte) transition is computed once and cached. The mask of
 * a state walks a byte trie of the whole vocabulary along those transitions, so
 * a prefix-sharing group of tokens is rejected at its first dead byte, and the
 * mask is cached per state.
 *
 * What is generated (README.md "The server", response_format):
 * - no whitespace anywhere (compact JSON as json.dumps(separators=(",", ":"))),
 *   so generation cannot wander in blanks;
 * - object properties in the schema's order; required ones mandatory, the
 *   others may be skipped; with additionalProperties true or absent, extra
 *   members follow the declared ones, their keys printable ASCII without
 *   escapes and never equal to a declared key (extras may repeat each other);
 * - numbers: at most 16 integer digits, 16 fraction digits, 2 exponent digits
 *   (so every number is a finite double);
 * - strings: valid UTF-8 (no surrogates, no overlong forms), escapes as JSON
 *   allows, \u escapes of surrogates refused; min/maxLength count code points.
 * Schema keywords: type (one or a list), properties, required,
 * additionalProperties (true/false), enum, const, items, minItems, maxItems,
 * anyOf, $defs / definitions, $ref (local "#..." pointers, recursion allowed),
 * minLength, maxLength, and the annotations title, description, default,
 * examples, $schema, $id, $comment, deprecated, readOnly, writeOnly. Anything
 * else is refused with a message naming the keyword and where it is. */
#ifndef OG_GRAMMAR_H
#define OG_GRAMMAR_H

#include "og_tokenizer.h"

#include <jansson.h>

typedef struct og_grammar og_grammar; /* immutable once compiled; reference-counted */
typedef struct og_vocab og_vocab;     /* a tokenizer's token byte strings as a trie */
typedef struct og_gmatch og_gmatch;   /* one sequence's position in a grammar */

/* Limits on what a schema may compile to (bad input gets an error, not a hang). */
#define OG_GRAMMAR_MAX_DEPTH 64         /* schema nesting (subschemas within subschemas) */
#define OG_GRAMMAR_MAX_ELEMS (1 << 21)  /* grammar elements in all */
#define OG_GRAMMAR_MAX_REPEAT 4096      /* maxItems, maxLength, minItems, minLength */

/* Any JSON object ({"type": "json_object"}). Errors: OG_ERR_NOMEM. */
og_status og_grammar_json_object(og_grammar **out, char *err, size_t errlen);
/* A JSON Schema (the json_schema.schema object; not kept). Errors:
 * OG_ERR_UNSUPPORTED (a keyword outside the subset: the message names it and
 * its JSON pointer), OG_ERR_INVALID_ARG (a malformed value: "required must be an
 * array of strings", a $ref that resolves nowhere, minLength > maxLength, a
 * reference cycle that consumes no input, a schema no document satisfies),
 * OG_ERR_RANGE (over the limits above), OG_ERR_NOMEM. */
og_status og_grammar_from_schema(const json_t *schema, og_grammar **out, char *err, size_t errlen);
/* Reference counting (atomic: the API thread and the scheduler share one). */
og_grammar *og_grammar_ref(og_grammar *g);
void og_grammar_unref(og_grammar *g);

/* The vocabulary trie: every token's bytes (og_token_to_bytes without control
 * text; tokens with no bytes are never allowed except end-of-generation ones).
 * Errors: OG_ERR_NOMEM. Immutable after; safe to share between threads. */
og_status og_vocab_create(const og_tokenizer *tok, og_vocab **out, char *err, size_t errlen);
void og_vocab_free(og_vocab *v);
int32_t og_vocab_n(const og_vocab *v); /* tokens (the tokenizer's n_vocab) */

/* ---- tool calls (tool_choice "required" or a named function) ------------- */

#define OG_GRAMMAR_MAX_SPECIAL 16 /* distinct control tokens one grammar may write */

/* One piece of a tool-call layout: a control token by id (token >= 0; such
 * tokens have no bytes, so the grammar writes each as one symbol and the mask
 * allows exactly that id), or text bytes (token < 0). */
typedef struct og_gpiece {
    const char *text;
    int32_t token;
} og_gpiece;

/* How a chat encoding writes its calls (built by og_outparse_call_layout):
 * open, then calls separated by `between`, then close; a call is
 * call NAME name_end ARGUMENTS call_end. ARGUMENTS are one JSON object held to
 * the tool's parameters schema, or with param_open set (DSML), one
 * param_open KEY param_mid VALUE param_close per declared property, in the
 * schema's order (required ones always, the others possibly skipped), VALUE
 * the JSON text its schema allows. */
typedef struct og_tool_layout {
    og_gpiece open[4], call[4], name_end[4], call_end[4], between[2], close[4];
    int n_open, n_call, n_name_end, n_call_end, n_between, n_close;
    const char *param_open, *param_mid, *param_close;
} og_tool_layout;

/* A grammar that writes only tool calls: 1 to max_calls (0: no limit) calls
 * of the n_tools tools (names[i], each written as given; params[i] its
 * arguments' JSON Schema, the subset above, NULL for any object; not kept).
 * Errors: those of og_grammar_from_schema (the message names the tool),
 * OG_ERR_RANGE (over OG_GRAMMAR_MAX_SPECIAL control tokens), OG_ERR_INVALID_ARG
 * (no tools, a tool without a name), OG_ERR_NOMEM. */
og_status og_grammar_tool_calls(const og_tool_layout *lay, const char *const *names, const json_t *const *params,
                                int n_tools, int max_calls, og_grammar **out, char *err, size_t errlen);

/* A matcher at the grammar's start. Holds a reference to g. Errors: OG_ERR_NOMEM. */
og_status og_gmatch_create(og_grammar *g, og_gmatch **out, char *err, size_t errlen);
void og_gmatch_free(og_gmatch *m);
/* Feeds bytes[0..n). Returns false (and leaves the matcher as it was) when some
 * byte is not allowed. */
bool og_gmatch_feed(og_gmatch *m, const void *bytes, size_t n);
/* The bytes fed so far form a complete document. */
bool og_gmatch_accepting(const og_gmatch *m);
/* Complete and nothing else may follow (only end-of-generation is allowed). */
bool og_gmatch_finished(const og_gmatch *m);
/* The allowed tokens in the current state: a bitset of ceil(n_vocab / 64)
 * words (bit id % 64 of word id / 64), owned by the matcher and valid until the
 * next call on it. A token is allowed when all its bytes keep the automaton
 * alive (a layout's control token: when its symbol does); end-of-generation
 * tokens exactly when accepting. Errors: OG_ERR_NOMEM. */
og_status og_gmatch_mask(og_gmatch *m, const og_vocab *v, const uint64_t **bits);
/* Sets logits[0..n_logits) of the tokens the mask refuses to -INFINITY (ids
 * past the tokenizer's vocabulary too). Errors: OG_ERR_NOMEM (logits untouched). */
og_status og_gmatch_apply(og_gmatch *m, const og_vocab *v, float *logits, int32_t n_logits);
/* Advances by a sampled token: its bytes, or for an end-of-generation token
 * checks that the document is complete. Errors: OG_ERR_INVALID_ARG (the token
 * is not allowed here; the matcher is unchanged), OG_ERR_NOMEM. */
og_status og_gmatch_accept(og_gmatch *m, const og_vocab *v, int32_t id);

#endif
