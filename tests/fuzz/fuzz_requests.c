/* libFuzzer target over the API's request parsers: POST /v1/chat/completions
 * and /v1/completions bodies (og_api_parse), /v1/messages, count_tokens and
 * /v1/responses bodies (og_ep_parse: the translation, then og_api_parse).
 * Input: one selector byte, then the body. The selector picks the endpoint
 * (value % 5), the chat encoding the model is taken to have (value / 5 % 5:
 * V3, R1, V3.1, V4, V4.1; the same tokenizer) and whether the server's
 * reasoning default is on (value >= 128). Any body must give a parsed request
 * or a clean error (a status, a message); on success for messages and
 * responses the output assembler is fed generated token ids (drawn from the
 * body's hash, detokenized as the engine would) in two pieces, streamed and
 * not, and must produce its events and a response object. ASan/UBSan check
 * every access. The tokenizer: the GGUF named by OG_FUZZ_TOKENIZER (a tiny
 * make-model file; run_fuzz_requests.sh makes one).
 * Run 10 minutes: OG_FUZZ_TOKENIZER=tiny.gguf fuzz_requests -max_total_time=600
 *   -max_len=65536 CORPUS tests/fuzz/corpus_requests */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "og_endpoints.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static og_gguf *g_gguf;   /* the harness's fixture, loaded once */
static og_tokenizer *g_tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *path = getenv("OG_FUZZ_TOKENIZER");
    char err[512];
    if (!path) {
        fprintf(stderr, "fuzz_requests: set OG_FUZZ_TOKENIZER to a GGUF with a tokenizer (onegpu make-model)\n");
        exit(2);
    }
    if (og_gguf_open(path, OG_GGUF_HEADER_ONLY, &g_gguf, err, sizeof err) ||
        og_tokenizer_load(g_gguf, &g_tok, err, sizeof err)) {
        fprintf(stderr, "fuzz_requests: %s: %s\n", path, err);
        exit(2);
    }
    return 0;
}

/* Feeds n generated tokens (ids drawn from seed) to o in two pieces, then the end. */
static void feed_output(og_ep_out *o, uint64_t seed, int n, og_finish f) {
    og_tok_out toks[32];
    char text[32 * 64 + 1];
    size_t len = 0;
    og_detok dt = {0};
    int32_t nv = og_tokenizer_n_vocab(g_tok);
    for (int i = 0; i < n; i++) {
        uint64_t r = og_splitmix64(&seed);
        /* mostly small ids (markers and bytes live low and high): both ends */
        int32_t id = (int32_t)(r % 4 == 0 ? (r >> 8) % 1024 : (r >> 8) % (uint64_t)nv);
        memset(&toks[i], 0, sizeof toks[i]);
        toks[i].id = id;
        toks[i].text_start = (uint32_t)len;
        if (og_detok_push(g_tok, &dt, id, text, sizeof text, &len) < 0) __builtin_trap();
    }
    if (og_detok_flush(&dt, text, sizeof text, &len) < 0) __builtin_trap();
    int half = n / 2;
    size_t cut = half < n ? toks[half].text_start : len;
    og_seq_out a = {.text = text, .len = cut, .toks = toks, .n_toks = half, .n_prompt = 7, .n_gen = half,
                    .stop_index = -1};
    char saved = text[cut];
    text[cut] = 0;
    if (og_ep_out_feed(o, &a)) return;
    text[cut] = saved;
    og_seq_out b = {.text = text + cut, .len = len - cut, .toks = toks + half, .n_toks = n - half, .finish = f,
                    .n_prompt = 7, .n_gen = n, .stop_index = -1, .text_offset = cut};
    if (og_ep_out_feed(o, &b)) return;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    static const og_endpoint eps[] = {OG_EP_CHAT, OG_EP_COMPLETIONS, OG_EP_MESSAGES, OG_EP_COUNT_TOKENS,
                                      OG_EP_RESPONSES};
    static const og_chat_kind kinds[] = {OG_CHAT_DEEPSEEK3, OG_CHAT_DEEPSEEK_R1, OG_CHAT_DEEPSEEK3_1,
                                         OG_CHAT_DEEPSEEK4, OG_CHAT_DEEPSEEK4_1};
    og_endpoint ep = eps[data[0] % 5];
    og_api_model mdl = {.tok = g_tok, .chat = kinds[data[0] / 5 % 5], .n_vocab = og_tokenizer_n_vocab(g_tok),
                        .ctx = 4096, .n_layer = 1, .capacity = 8, .reasoning = data[0] >= 128};
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    og_api_req req;
    og_api_err e = {0};
    e.status = -1;
    bool ok;
    og_ep_out *out = NULL;
    if (ep == OG_EP_CHAT || ep == OG_EP_COMPLETIONS) {
        ok = og_api_parse(body, len, ep == OG_EP_CHAT, &mdl, &req, &e);
    } else {
        og_ep_meta meta = {ep, "fuzz", og_fnv1a64(data, size, 1), 1700000000};
        ok = og_ep_parse(&meta, body, len, &mdl, &req, &out, &e);
    }
    if (!ok) {
        /* a clean error: a status for the client and a message that says why, no object left */
        if (e.status < 400 || e.status > 599 || !e.message[0] || !e.type || out) __builtin_trap();
        char *env = og_api_error_json(&e), *anth = og_msgs_error_json(&e);
        if (!env || !anth) __builtin_trap();
        free(env);
        free(anth);
        og_api_req_free(&req);
        return 0;
    }
    if (req.n_prompts < 1 || !req.prompts[0].n) __builtin_trap();
    if (ep == OG_EP_COUNT_TOKENS) {
        json_t *c = og_ep_count_json(&req);
        if (!c) __builtin_trap();
        json_decref(c);
    }
    if (out) {
        uint64_t seed = og_fnv1a64(data, size, 2);
        int n = (int)(seed % 33);
        feed_output(out, seed, n, seed & 64 ? OG_FINISH_LENGTH : OG_FINISH_STOP);
        json_t *fin = og_ep_out_final(out);
        char *txt = fin ? json_dumps(fin, JSON_COMPACT) : NULL;
        if (!txt) __builtin_trap();
        free(txt);
        json_decref(fin);
        size_t sl;
        const char *sse = og_ep_out_sse(out, &sl);
        if (req.stream && (!og_ep_out_done(out) || sl == 0 || strncmp(sse, "event: ", 7))) __builtin_trap();
        og_ep_out_free(out);
    }
    og_api_req_free(&req);
    return 0;
}
