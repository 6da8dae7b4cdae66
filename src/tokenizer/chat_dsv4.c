/* The DeepSeek V4 and V4.1 chat encodings (deepseek4.md §5). */
#include "chat_impl.h"

og_status og_chat_render_dsv4(og_chat_kind kind, const og_chat_ctx *c, og_chat_buf *b) {
    (void)kind;
    (void)b;
    return og_fail(c->err, c->errlen, OG_ERR_UNSUPPORTED, "the V4 and V4.1 chat encodings are not built yet");
}
