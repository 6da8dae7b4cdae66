/* Internal to the chat encodings (chat.c, chat_dsv3.c, chat_dsv4.c): the text
 * buffer that records where the template's own text lies, the rendering
 * context, and the JSON writer the tool definitions need. Not a public header. */
#ifndef OG_CHAT_IMPL_H
#define OG_CHAT_IMPL_H

#include <jansson.h>

#include "og_tokenizer.h"

/* Marker texts (U+FF5C fullwidth bar, U+2581 lower one eighth block). */
#define CHAT_BOS "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define CHAT_U "<\xef\xbd\x9cUser\xef\xbd\x9c>"
#define CHAT_A "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"
#define CHAT_S "<\xef\xbd\x9cSystem\xef\xbd\x9c>"
#define CHAT_EOS "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define CHAT_CALLS_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define CHAT_CALLS_END "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>"
#define CHAT_CALL_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define CHAT_CALL_END "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>"
#define CHAT_OUTS_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "outputs\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define CHAT_OUTS_END "<\xef\xbd\x9ctool\xe2\x96\x81" "outputs\xe2\x96\x81" "end\xef\xbd\x9c>"
#define CHAT_OUT_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "output\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define CHAT_OUT_END "<\xef\xbd\x9ctool\xe2\x96\x81" "output\xe2\x96\x81" "end\xef\xbd\x9c>"
#define CHAT_TOOL_SEP "<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>"
#define CHAT_THINK "<think>"
#define CHAT_THINK_END "</think>"
#define CHAT_DSML "\xef\xbd\x9c" "DSML\xef\xbd\x9c" /* V4: <DSML tool_calls>; V4.1 adds a space after it */

/* The rendered text, and where the template's own text lies in it (marks):
 * every other byte is a message's text (content, names, arguments, tool
 * definitions), which must never become a control token. */
typedef struct og_chat_buf {
    char *p;
    size_t n, cap;
    size_t *mark; /* [n_mark][2]: start, length */
    size_t n_mark, cap_mark;
    bool oom;
} og_chat_buf;

void og_chat_put(og_chat_buf *b, const char *s);               /* message text */
void og_chat_putn(og_chat_buf *b, const char *s, size_t n);    /* message text, n bytes */
void og_chat_mark(og_chat_buf *b, const char *s);              /* the template's own text */
/* Message text as Python's json.dumps writes it (separators ", " and ": ", or
 * indent > 0 spaces per level with "," line ends), non-ASCII kept as UTF-8
 * unless ensure_ascii (then \uXXXX, surrogate pairs above U+FFFF). */
void og_chat_put_json(og_chat_buf *b, const json_t *v, int indent, bool ensure_ascii);

/* What one rendering needs beyond the messages. tools: the request's function
 * tools (a JSON array with at least one element, each {"type":"function",
 * "function":{"name":...}} checked), or NULL. */
typedef struct og_chat_ctx {
    const og_chat_msg *m;
    int n;
    bool gen;     /* add_generation_prompt */
    bool thinking;
    int effort;   /* 1..100, 0 = the encoding's default */
    json_t *tools;
    char *err;
    size_t errlen;
} og_chat_ctx;

/* Renders into *b (the caller frees b->p and b->mark, on failure too). */
og_status og_chat_render_dsv3(og_chat_kind kind, const og_chat_ctx *c, og_chat_buf *b);
og_status og_chat_render_dsv4(og_chat_kind kind, const og_chat_ctx *c, og_chat_buf *b);

bool og_chat_is_system(const char *role); /* system or developer */

#endif
