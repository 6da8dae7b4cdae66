/* onegpu tokenizer: byte-level BPE as llama.cpp runs it for DeepSeek GGUFs
 * (tokenizer.ggml.model = "gpt2", pre "deepseek-v3", its V4 name "joyai-llm", or "deepseek-llm"), special
 * tokens, and a UTF-8 safe incremental detokenizer. Spec: shared/spec/tokenizer.md
 * (section numbers below). */
#ifndef OG_TOKENIZER_H
#define OG_TOKENIZER_H

#include "og_gguf.h"

typedef struct og_tokenizer og_tokenizer;

/* Token types (tokenizer.ggml.token_type). */
enum { OG_TOK_NORMAL = 1, OG_TOK_UNKNOWN = 2, OG_TOK_CONTROL = 3, OG_TOK_USER_DEFINED = 4,
       OG_TOK_UNUSED = 5, OG_TOK_BYTE = 6 };

/* Builds the tokenizer from a GGUF's tokenizer.ggml.* keys. The strings are
 * copied: the og_gguf may be closed afterwards. Errors: OG_ERR_NOT_FOUND (no
 * vocabulary), OG_ERR_UNSUPPORTED (a model or pre-tokenizer other than gpt2 with
 * deepseek-v3 / joyai-llm / deepseek-llm: refused rather than silently wrong, §0),
 * OG_ERR_FORMAT (inconsistent arrays), OG_ERR_NOMEM. */
og_status og_tokenizer_load(const og_gguf *g, og_tokenizer **out, char *err, size_t errlen);
void og_tokenizer_free(og_tokenizer *t);

int32_t og_tokenizer_n_vocab(const og_tokenizer *t);
int32_t og_tokenizer_bos(const og_tokenizer *t);   /* -1 if none */
int32_t og_tokenizer_eos(const og_tokenizer *t);   /* -1 if none */
bool og_tokenizer_add_bos(const og_tokenizer *t);  /* tokenizer.ggml.add_bos_token */
/* True for end-of-generation tokens (EOS; §1: <|EOT|> is not). */
bool og_tokenizer_is_eog(const og_tokenizer *t, int32_t id);
int og_tokenizer_type(const og_tokenizer *t, int32_t id); /* OG_TOK_*, 0 if out of range */
/* Id of a token by its exact text, -1 if none. */
int32_t og_tokenizer_find(const og_tokenizer *t, const char *text, size_t len);

/* A growable id list owned by the caller (og_ids_free). */
typedef struct og_ids {
    int32_t *v;
    size_t n, cap;
} og_ids;
void og_ids_free(og_ids *ids);

/* Appends the ids of text (len bytes of UTF-8) to out: BOS first when add_bos,
 * CONTROL tokens recognized in the text only when parse_special (USER_DEFINED
 * ones, e.g. <think>, always are: §2). Invalid UTF-8 is tokenized byte for byte
 * as the byte-level vocabulary allows. Errors: OG_ERR_NOMEM. */
og_status og_tokenize(const og_tokenizer *t, const char *text, size_t len, bool add_bos, bool parse_special,
                      og_ids *out);

/* The first CONTROL token written in text (as og_tokenize with parse_special
 * finds them, without tokenizing the rest) in *id, or -1. Errors: OG_ERR_NOMEM. */
og_status og_tokenizer_first_control(const og_tokenizer *t, const char *text, size_t len, int32_t *id);

/* The bytes token id stands for (§6): NORMAL tokens decoded from the byte-level
 * alphabet, USER_DEFINED verbatim, CONTROL/UNUSED empty unless render_special.
 * Returns the byte count (may exceed cap: then buf holds the first cap bytes), or
 * -1 for an id out of range. */
int og_token_to_bytes(const og_tokenizer *t, int32_t id, bool render_special, char *buf, size_t cap);

/* Incremental detokenizer: feed ids, receive only complete UTF-8 characters; a
 * character split across tokens is held back until it completes (§6). */
typedef struct og_detok {
    char pending[8];
    int n_pending;
} og_detok;

/* Appends the text of id to out (a NUL-terminated buffer of cap bytes; *len is
 * its current length). Returns the number of bytes appended, or -1 if out is too
 * small or id is out of range (nothing appended). */
int og_detok_push(const og_tokenizer *t, og_detok *d, int32_t id, char *out, size_t cap, size_t *len);
/* Flushes held-back bytes at the end of generation: an incomplete sequence
 * becomes U+FFFD. Same return convention. */
int og_detok_flush(og_detok *d, char *out, size_t cap, size_t *len);

/* ---- chat templates (tokenizer.md §7) ------------------------------------- */

typedef enum og_chat_kind {
    OG_CHAT_UNKNOWN = 0,
    OG_CHAT_DEEPSEEK3, /* the official DeepSeek-V3 template */
    OG_CHAT_DEEPSEEK_R1,  /* R1 / R1-0528: generation prompt opens <think> (tokenizer.md §7) */
    OG_CHAT_DEEPSEEK3_1,  /* V3.1: thinking switch, name<tool_sep>{json} calls (tokenizer.md §7) */
    OG_CHAT_DEEPSEEK4,    /* V4: DSML tool calls, results merged into the user turn (deepseek4.md §5) */
    OG_CHAT_DEEPSEEK4_1,  /* V4.1: <System> marker, reasoning effort 1-100, DSML with the space (§5) */
} og_chat_kind;

/* Which built-in formatter renders this tokenizer.chat_template text (detected
 * by its markers, as llama.cpp does without a Jinja engine). */
og_chat_kind og_chat_detect(const char *template_text, size_t len);
/* The encoding a general.architecture implies: deepseek4 -> V4, deepseek41 ->
 * V4.1 (their official encoders are Python, not Jinja, deepseek4.md §5: a GGUF
 * of theirs may carry no tokenizer.chat_template), anything else UNKNOWN. */
og_chat_kind og_chat_kind_for_arch(const char *arch);
/* A model's encoding: og_chat_kind_for_arch(general.architecture) for V4 and
 * V4.1 (their official encoders are Python; a Jinja template a converter put in
 * such a file is an approximation, deepseek4.md §5), else its
 * tokenizer.chat_template detected. Returns UNKNOWN when neither tells (no
 * status: nothing can fail but the key lookups, and a missing key means
 * "unknown"). */
og_chat_kind og_chat_kind_of(const og_gguf *g);

typedef struct og_chat_tool_call {
    const char *type;      /* "function" */
    const char *name;
    const char *arguments; /* JSON text */
} og_chat_tool_call;

typedef struct og_chat_msg {
    const char *role;      /* system, developer (= system), user, assistant, tool */
    const char *content;   /* NULL: none (an assistant turn with only tool calls) */
    const og_chat_tool_call *tool_calls;
    int n_tool_calls;
    const char *reasoning;    /* assistant: its reasoning_content (rendered where the encoding keeps it), or NULL */
    const char *tool_call_id; /* tool: the call it answers (V4 reorders results to the calls' order), or NULL */
    const char *const *tool_call_ids; /* assistant: [n_tool_calls] the calls' ids (call_...), or NULL; what
                                         tool_call_id refers to (kept out of og_chat_tool_call, which callers
                                         initialize positionally) */
} og_chat_msg;

/* How a conversation is rendered beyond its messages. Zero-initialized = the
 * encoding's defaults (thinking off, effort default, no tools). */
typedef struct og_chat_opts {
    bool thinking;            /* thinking mode, for the kinds that have one (R1 always thinks) */
    int reasoning_effort;     /* 1..100 (low 50, high 75, max 100); 0: the encoding's default (V4.1: 75) */
    const char *tools_json;   /* the request's `tools` array as JSON text (OpenAI shape), or NULL: rendered
                                 into the prompt as the encoding does */
} og_chat_opts;

/* Renders messages as the kind's official template or encoder does, quirks
 * included (chat_dsv3.c, chat_dsv4.c say which source and where a choice was
 * made), WITHOUT the leading BOS text: the tokenizer adds the BOS id
 * (add_bos_token), so a BOS is never doubled. Tokenize the result with
 * parse_special = true (the markers are control tokens), or use
 * og_chat_tokenize, which keeps message text from ever becoming a control token. *out is malloc'ed, NUL-terminated.
 * Errors: OG_ERR_UNSUPPORTED (kind), OG_ERR_INVALID_ARG (unknown role, or an assistant
 * turn with neither content nor tool calls), OG_ERR_NOMEM. */
og_status og_chat_format(og_chat_kind kind, const og_chat_msg *msgs, int n, bool add_generation_prompt, char **out,
                         char *err, size_t errlen);

/* Renders messages as og_chat_format does and appends the prompt's token ids to
 * out (BOS first when the tokenizer adds one): the template's markers become
 * their control tokens, and all other text, every message's content, tool
 * names and arguments included, is tokenized with parse_special = false, so
 * control-token text typed in a message stays plain text (USER_DEFINED tokens
 * such as <think> are still recognized, §2). For text without control-token
 * text the ids equal og_tokenize(og_chat_format(...), parse_special = true).
 * Errors: those of og_chat_format, OG_ERR_NOMEM. */
og_status og_chat_tokenize(const og_tokenizer *tok, og_chat_kind kind, const og_chat_msg *msgs, int n,
                           bool add_generation_prompt, og_ids *out, char *err, size_t errlen);

/* The same two with rendering options (opts NULL = all defaults): every kind
 * above, thinking on/off, tools rendered into the prompt. og_chat_format and
 * og_chat_tokenize are these with opts = NULL. Per kind: V3 ignores thinking;
 * R1 always thinks; reasoning (og_chat_msg.reasoning) is rendered by V4 and
 * V4.1 only (where their drop rule keeps it; V3.1 and R1 drop past reasoning);
 * reasoning_effort: V4.1 writes it as its effort line in thinking mode (0 =
 * 75), V4 writes its think-max paragraph for 100 in thinking mode (meant for
 * contexts of at least 384K, deepseek4.md §5: the caller decides), the others
 * ignore it. Errors: as above, plus OG_ERR_INVALID_ARG for tools_json that is
 * not a JSON array of {"type":"function","function":{"name":...}} objects, a
 * tool call without a name, or an effort outside 0..100. */
og_status og_chat_format_opts(og_chat_kind kind, const og_chat_msg *msgs, int n, const og_chat_opts *opts,
                              bool add_generation_prompt, char **out, char *err, size_t errlen);
og_status og_chat_tokenize_opts(const og_tokenizer *tok, og_chat_kind kind, const og_chat_msg *msgs, int n,
                                const og_chat_opts *opts, bool add_generation_prompt, og_ids *out, char *err,
                                size_t errlen);

/* The generation prompt's state: true when the rendered prompt ends inside the
 * think block (the output starts as reasoning), for og_outparse. */
bool og_chat_opens_reasoning(og_chat_kind kind, const og_chat_opts *opts);
/* The same for one conversation: true when the prompt og_chat_format_opts
 * renders for it with the generation prompt ends inside the think block. It
 * differs from og_chat_opens_reasoning where a template writes no generation
 * prompt: R1 after tool outputs, V3.1 after a tool output or an assistant turn
 * (the model then goes on with content). Returns false for a conversation that
 * does not render (no status: og_chat_tokenize_opts reports that error). */
bool og_chat_conversation_opens_reasoning(og_chat_kind kind, const og_chat_msg *msgs, int n, const og_chat_opts *opts);

#endif
