/* HTTP plumbing of the API (og_server.h): libmicrohttpd in thread-per-connection
 * mode. A generation request blocks its own connection thread: non-streaming
 * requests wait in the access handler, streams in the response's content
 * reader; both poll the socket so a client that goes away cancels its
 * sequences within ~100 ms (and the engine frees their KV before its next step). */
#include "og_server.h"
#include "og_endpoints.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { ST_LOADING, ST_READY, ST_DRAINING };

/* status codes counted for /metrics */
static const int counted[] = {200, 400, 401, 404, 405, 413, 415, 429, 500, 503};
#define N_COUNTED (sizeof counted / sizeof *counted)

struct og_server {
    struct MHD_Daemon *d;
    og_server_config cfg;
    char *host, *api_key, *model_id, *fingerprint;
    int port;
    pthread_mutex_t mu;
    int state;
    og_engine *engine;
    og_api_model mdl;
    uint64_t by_status[N_COUNTED + 1]; /* API requests answered; last: other codes */
    uint64_t probes[2];                /* /health, /metrics requests answered */
    uint64_t id_seq, id_key;
    time_t created;
    int active;                        /* generation requests whose answer has not left yet (request_done) */
    pthread_cond_t idle;               /* signalled when active drops to 0 */
};

/* One request (libmicrohttpd's per-request pointer): its body, and what the
 * access log and /metrics say about it. */
typedef struct conn_ctx {
    char *body;
    size_t len, cap;
    bool responded;
    bool probe;                   /* /health or /metrics: counted apart from the API requests */
    bool gen_counted;             /* a generation request: counted in og_server.active until request_done */
    int status;                   /* of the answer sent; 0: none (the client left first) */
    long long n_prompt, n_gen;    /* tokens of a generation request, for the access log */
    long long n_cached;           /* of n_prompt, read from the prefix cache */
    double t0;                    /* CLOCK_MONOTONIC seconds when its headers arrived */
    struct timespec wall0;        /* the same moment, CLOCK_REALTIME */
    char method[16];
    char path[256];               /* the URL path, cut at 255 bytes */
} conn_ctx;

/* One generation request's state: owned by the stream response (freed by its
 * free callback) or by the access handler (non-streaming). */
typedef struct gen_ctx {
    og_server *srv;
    conn_ctx *cc;                 /* its request: token counts for the access log (read only while it runs) */
    og_engine *e;
    og_api_req req;
    og_seq *seqs[OG_API_MAX_CHOICES];
    bool released[OG_API_MAX_CHOICES];
    og_finish finish[OG_API_MAX_CHOICES];
    int n;                        /* sequences: per prompt, prompt i's run seqs[i * per ..] */
    int per;                      /* sequences per prompt (best_of, else n) */
    int fd;
    char id[48];
    time_t created;
    /* streaming: bytes produced but not yet handed to MHD */
    char *out;
    size_t out_len, out_pos, out_cap;
    bool started, sent_done;
    double last_out_s;            /* when the stream last got bytes (a keep-alive after OG_EP_KEEPALIVE_S without) */
    /* non-streaming: accumulated output per choice */
    char *text[OG_API_MAX_CHOICES];
    size_t text_len[OG_API_MAX_CHOICES];
    og_tok_out *toks[OG_API_MAX_CHOICES];
    int n_toks[OG_API_MAX_CHOICES];
    int n_prompt[OG_API_MAX_CHOICES], n_gen[OG_API_MAX_CHOICES], n_cached[OG_API_MAX_CHOICES];
    og_api_offsets off[OG_API_MAX_CHOICES]; /* completions text_offset cursors */
    char error[256];
    og_ep_out *ep;                /* /v1/messages, /v1/responses: their output (og_endpoints.h), else NULL */
    /* chat output parsing (req.parse): one parser per choice and what it reported */
    og_outparse *op[OG_API_MAX_CHOICES];
    json_t *calls[OG_API_MAX_CHOICES];      /* non-streaming: the message's tool_calls */
    char *content[OG_API_MAX_CHOICES], *reasoning[OG_API_MAX_CHOICES];
    size_t content_len[OG_API_MAX_CHOICES], reasoning_len[OG_API_MAX_CHOICES];
    int n_calls[OG_API_MAX_CHOICES];        /* calls reported (at most req.max_calls when it is set) */
    bool drop_call[OG_API_MAX_CHOICES];     /* the call being reported is over req.max_calls */
    int cur;                                /* the choice whose events are being handled */
    bool stream_now;
} gen_ctx;

static void count_status(og_server *s, conn_ctx *cc, int status) {
    cc->status = status;
    pthread_mutex_lock(&s->mu);
    if (cc->probe) {
        s->probes[strcmp(cc->path, "/health") ? 1 : 0]++;
    } else {
        size_t k = 0;
        while (k < N_COUNTED && counted[k] != status) k++;
        s->by_status[k]++;
    }
    pthread_mutex_unlock(&s->mu);
}

static enum MHD_Result send_text_allow(og_server *s, struct MHD_Connection *c, conn_ctx *cc, int status,
                                       const char *ctype, const char *text, size_t len, const char *retry_after,
                                       const char *allow) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)text, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", ctype);
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    if (retry_after) MHD_add_response_header(r, "Retry-After", retry_after);
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    if (status == 405) MHD_add_response_header(r, "Allow", allow ? allow : "GET, HEAD");
    count_status(s, cc, status); /* before the response can reach the client, so /metrics read after it counts it */
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_text(og_server *s, struct MHD_Connection *c, conn_ctx *cc, int status, const char *ctype,
                                 const char *text, size_t len, const char *retry_after) {
    return send_text_allow(s, c, cc, status, ctype, text, len, retry_after, NULL);
}

static enum MHD_Result send_json(og_server *s, struct MHD_Connection *c, conn_ctx *cc, int status, json_t *o) {
    char *txt = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!txt) return MHD_NO;
    enum MHD_Result r = send_text(s, c, cc, status, "application/json", txt, strlen(txt), NULL);
    free(txt);
    return r;
}

/* The error envelope with e's status; allow: the Allow header of a 405 (NULL:
 * "GET, HEAD"). */
static enum MHD_Result send_error(og_server *s, struct MHD_Connection *c, conn_ctx *cc, const og_api_err *e,
                                  const char *allow) {
    char *txt = og_endpoint_anthropic(cc->path) ? og_msgs_error_json(e) : og_api_error_json(e);
    if (!txt) return MHD_NO;
    if (s->cfg.log) og_log(s->cfg.log, OG_LOG_INFO, "%d %s", e->status, e->message);
    const char *retry = e->status == 503 || e->status == 429 ? "1" : NULL;
    enum MHD_Result r = send_text_allow(s, c, cc, e->status, "application/json", txt, strlen(txt), retry, allow);
    free(txt);
    return r;
}

static enum MHD_Result fail(og_server *s, struct MHD_Connection *c, conn_ctx *cc, int status, const char *type,
                            const char *code, const char *fmt, ...) __attribute__((format(printf, 7, 8)));
static enum MHD_Result fail(og_server *s, struct MHD_Connection *c, conn_ctx *cc, int status, const char *type,
                            const char *code, const char *fmt, ...) {
    og_api_err e;
    va_list ap;
    va_start(ap, fmt);
    og_api_verror(&e, status, type, NULL, code, fmt, ap);
    va_end(ap);
    return send_error(s, c, cc, &e, NULL);
}

/* The error a request that ended with ERROR or CANCEL gets (msg: why). */
static void finish_error(og_finish f, const char *msg, og_api_err *e) {
    bool cancel = f == OG_FINISH_CANCEL;
    og_api_error(e, cancel ? 503 : 500, cancel ? "unavailable_error" : "server_error", NULL, NULL, "%s", msg);
}

/* ---- the client's socket ------------------------------------------------- */

static bool client_gone(int fd) {
    if (fd < 0) return false;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

static void gen_release_all(gen_ctx *g) {
    for (int i = 0; i < g->n; i++)
        if (!g->released[i]) {
            og_seq_release(g->e, g->seqs[i]);
            g->released[i] = true;
        }
}

static void gen_free(gen_ctx *g) {
    if (!g) return;
    gen_release_all(g);
    og_api_req_free(&g->req);
    og_ep_out_free(g->ep);
    for (int i = 0; i < OG_API_MAX_CHOICES; i++) {
        free(g->text[i]);
        free(g->toks[i]);
        og_outparse_free(g->op[i]);
        json_decref(g->calls[i]);
        free(g->content[i]);
        free(g->reasoning[i]);
    }
    free(g->out);
    free(g);
}

/* ---- responses ------------------------------------------------------------ */

static json_t *usage_json(const gen_ctx *g) {
    long long p = 0, c = 0, k = 0;
    for (int i = 0; i < g->n; i++) { /* a prompt's tokens once, whatever its n; every choice's completion */
        p += i % g->per ? 0 : g->n_prompt[i];
        c += g->n_gen[i];
        k += i % g->per ? 0 : g->n_cached[i];
    }
    json_t *u = json_pack("{s:I,s:I,s:I,s:{s:I}}", "prompt_tokens", (json_int_t)p, "completion_tokens", (json_int_t)c,
                          "total_tokens", (json_int_t)(p + c), "prompt_tokens_details", "cached_tokens", (json_int_t)k);
    if (u && g->req.out.parse_reasoning) { /* thinking requests: how many of them were reasoning */
        long long r = 0;
        for (int i = 0; i < g->n; i++) r += og_outparse_reasoning_tokens(g->op[i]);
        json_object_set_new(u, "completion_tokens_details", json_pack("{s:I}", "reasoning_tokens", (json_int_t)r));
    }
    return u;
}

static json_t *envelope(const gen_ctx *g, const char *object) {
    return json_pack("{s:s,s:s,s:I,s:s,s:s}", "id", g->id, "object", object, "created", (json_int_t)g->created,
                     "model", g->srv->model_id, "system_fingerprint", g->srv->fingerprint);
}

/* Appends s to the stream buffer. */
static bool emit_raw(gen_ctx *g, const char *s) {
    size_t l = strlen(s);
    if (g->out_len + l + 1 > g->out_cap) {
        size_t cap = g->out_cap ? g->out_cap * 2 : 4096;
        while (cap < g->out_len + l + 1) cap *= 2;
        char *b = realloc(g->out, cap);
        if (!b) return false;
        g->out = b;
        g->out_cap = cap;
    }
    memcpy(g->out + g->out_len, s, l + 1);
    g->out_len += l;
    return true;
}

/* Appends one SSE event (data: JSON) to the stream buffer; takes o. */
static bool emit(gen_ctx *g, json_t *o) {
    char *txt = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    bool ok = txt && emit_raw(g, "data: ") && emit_raw(g, txt) && emit_raw(g, "\n\n");
    free(txt);
    return ok;
}

/* A stream chunk for choice i: chat {"delta": ...} or completions {"text": ...}. */
static json_t *chunk(const gen_ctx *g, int i, json_t *delta_or_text, json_t *logprobs, const char *finish) {
    bool chat = g->req.chat;
    json_t *o = envelope(g, chat ? "chat.completion.chunk" : "text_completion");
    json_t *ch = json_pack("{s:i,s:o,s:o,s:o}", "index", i, chat ? "delta" : "text", delta_or_text, "logprobs",
                           logprobs ? logprobs : json_null(), "finish_reason", finish ? json_string(finish) : json_null());
    json_object_set_new(o, "choices", json_pack("[o]", ch));
    if (g->req.include_usage) json_object_set_new(o, "usage", json_null());
    return o;
}

/* gen_collect for /v1/messages and /v1/responses (one sequence): the output
 * assembler makes their events and their response object. */
static bool ep_collect(gen_ctx *g, bool stream) {
    bool changed = false; /* the opening events wait for the admission (og_ep_out_feed) */
    og_seq_out o;
    if (g->finish[0] == OG_FINISH_NONE && og_seq_take(g->e, g->seqs[0], &o) == OG_OK) {
        g->n_prompt[0] = o.n_prompt;
        g->n_gen[0] = o.n_gen;
        g->n_cached[0] = o.n_cached;
        changed |= o.len || o.n_toks || o.finish != OG_FINISH_NONE;
        bool failed = o.finish == OG_FINISH_ERROR || o.finish == OG_FINISH_CANCEL;
        if (!failed && og_ep_out_feed(g->ep, &o)) {
            o.finish = OG_FINISH_ERROR;
            snprintf(o.error, sizeof o.error, "out of memory for the response");
            failed = true;
        }
        if (o.finish != OG_FINISH_NONE) g->finish[0] = o.finish;
        if (failed) {
            snprintf(g->error, sizeof g->error, "%s",
                     o.finish == OG_FINISH_ERROR ? o.error : "the request was cancelled: the server is shutting down");
            og_api_err fe;
            finish_error(o.finish, g->error, &fe);
            if (stream) og_ep_out_error(g->ep, &fe);
        }
        og_seq_out_free(&o);
    }
    if (stream && !changed) og_ep_out_keepalive(g->ep); /* a long prefill: ping */
    size_t n;
    const char *sse = og_ep_out_sse(g->ep, &n);
    if (stream && n) {
        emit_raw(g, sse);
        og_ep_out_sse_clear(g->ep);
        changed = true;
    }
    if (stream && og_ep_out_done(g->ep) && !g->sent_done) g->sent_done = changed = true;
    g->cc->n_prompt = g->n_prompt[0];
    g->cc->n_gen = g->n_gen[0];
    g->cc->n_cached = g->n_cached[0];
    return changed;
}

static bool append(char **p, size_t *n, const char *s, size_t l) {
    char *q = realloc(*p, *n + l + 1);
    if (!q) return false;
    memcpy(q + *n, s, l);
    q[*n + l] = 0;
    *p = q;
    *n += l;
    return true;
}

/* An og_outparse event of choice g->cur: a stream delta, or the message's parts. */
static void on_out(void *ud, const og_out_ev *ev) {
    gen_ctx *g = ud;
    int i = g->cur;
    if (ev->kind == OG_OUT_TOOL_BEGIN) g->drop_call[i] = g->req.max_calls && g->n_calls[i] >= g->req.max_calls;
    bool call_ev = ev->kind == OG_OUT_TOOL_BEGIN || ev->kind == OG_OUT_TOOL_ARGS || ev->kind == OG_OUT_TOOL_END;
    if (call_ev && g->drop_call[i]) return; /* parallel_tool_calls false: the first call only */
    if (!g->stream_now) {
        if (ev->kind == OG_OUT_CONTENT) append(&g->content[i], &g->content_len[i], ev->text, ev->len);
        else if (ev->kind == OG_OUT_REASONING) append(&g->reasoning[i], &g->reasoning_len[i], ev->text, ev->len);
        else if (ev->kind == OG_OUT_TOOL_END) {
            if (!g->calls[i]) g->calls[i] = json_array();
            json_array_append_new(g->calls[i], json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", ev->id, "type", "function",
                                                         "function", "name", ev->name, "arguments", ev->arguments));
            g->n_calls[i]++;
        }
        return;
    }
    json_t *d = NULL;
    switch (ev->kind) {
    case OG_OUT_CONTENT: d = json_pack("{s:o}", "content", og_api_jstr(ev->text, ev->len)); break;
    case OG_OUT_REASONING: d = json_pack("{s:o}", "reasoning_content", og_api_jstr(ev->text, ev->len)); break;
    case OG_OUT_TOOL_BEGIN: /* index, id, type and name first, then the argument pieces */
        d = json_pack("{s:[{s:i,s:s,s:s,s:{s:s,s:s}}]}", "tool_calls", "index", g->n_calls[i], "id", ev->id, "type",
                      "function", "function", "name", ev->name, "arguments", "");
        break;
    case OG_OUT_TOOL_ARGS:
        d = json_pack("{s:[{s:i,s:{s:o}}]}", "tool_calls", "index", g->n_calls[i], "function", "arguments",
                      og_api_jstr(ev->text, ev->len));
        break;
    case OG_OUT_TOOL_END: g->n_calls[i]++; return;
    default: return;
    }
    emit(g, chunk(g, i, d, NULL, NULL));
}

/* finish_reason: "tool_calls" when the model called tools and stopped. */
static const char *finish_name(const gen_ctx *g, int i) {
    if (g->req.parse && g->n_calls[i] > 0 && g->finish[i] == OG_FINISH_STOP) return "tool_calls";
    return og_api_finish_reason(g->finish[i]);
}

/* Appends o's tokens to choice i's (the non-streaming response's logprobs). */
static void keep_toks(gen_ctx *g, int i, const og_seq_out *o) {
    og_tok_out *tk = o->n_toks ? realloc(g->toks[i], (size_t)(g->n_toks[i] + o->n_toks) * sizeof *tk) : g->toks[i];
    if (tk) {
        g->toks[i] = tk;
        if (o->n_toks) memcpy(tk + g->n_toks[i], o->toks, (size_t)o->n_toks * sizeof *tk);
        g->n_toks[i] += o->n_toks;
    }
}

static double mono_s(void);

/* Moves new engine output into stream events (or the non-streaming
 * accumulators). Returns true if anything changed. A stream that has had
 * nothing to say for OG_EP_KEEPALIVE_S seconds (a long prompt's prefill) gets an
 * SSE comment, so that clients and proxies with idle timeouts (Node's fetch:
 * 300 s) keep the connection; SSE readers skip comments. */
static bool gen_collect(gen_ctx *g, bool stream) {
    if (g->ep) return ep_collect(g, stream);
    bool changed = false;
    if (stream && !g->started) {
        g->started = true;
        changed = true;
        for (int i = 0; i < g->n; i++) {
            if (g->req.chat) emit(g, chunk(g, i, json_pack("{s:s,s:s}", "role", "assistant", "content", ""), NULL, NULL));
            else if (g->req.echo && g->req.prompt_text[i / g->per])
                emit(g, chunk(g, i, og_api_jstr(g->req.prompt_text[i / g->per], strlen(g->req.prompt_text[i / g->per])),
                              NULL, NULL));
        }
    }
    for (int i = 0; i < g->n; i++) {
        if (g->finish[i] != OG_FINISH_NONE) continue; /* ended */
        og_seq_out o;
        if (og_seq_take(g->e, g->seqs[i], &o)) continue;
        g->n_prompt[i] = o.n_prompt;
        g->n_gen[i] = o.n_gen;
        g->n_cached[i] = o.n_cached;
        if (o.len || o.n_toks) changed = true;
        if (!stream || (g->req.logprobs && !g->req.chat)) { /* the final text; what text_offset counts in */
            char *nt = realloc(g->text[i], g->text_len[i] + o.len + 1);
            if (nt) {
                g->text[i] = nt;
                memcpy(nt + g->text_len[i], o.text, o.len + 1);
                g->text_len[i] += o.len;
            }
            g->off[i].text = g->text[i];
            const char *pt = g->req.prompt_text[i / g->per];
            if (g->req.echo && pt && !g->off[i].base) g->off[i].base = og_api_chars(pt, strlen(pt));
        }
        if (g->req.parse) { /* content, reasoning and tool calls from the token ids */
            g->stream_now = stream;
            g->cur = i;
            og_outparse_take(g->op[i], &o, on_out, g);
            if (stream && g->req.logprobs && o.n_toks)
                emit(g, chunk(g, i, json_object(), og_api_logprobs(g->srv->mdl.tok, true, o.toks, o.n_toks, NULL), NULL));
            if (!stream && g->req.logprobs) keep_toks(g, i, &o);
        } else if (stream) {
            if (o.len || o.n_toks) {
                json_t *lp =
                    g->req.logprobs ? og_api_logprobs(g->srv->mdl.tok, g->req.chat, o.toks, o.n_toks, &g->off[i]) : NULL;
                json_t *t = og_api_jstr(o.text, o.len);
                emit(g, chunk(g, i, g->req.chat ? json_pack("{s:o}", "content", t) : t, lp, NULL));
            }
        } else {
            keep_toks(g, i, &o);
        }
        if (o.finish != OG_FINISH_NONE) {
            changed = true;
            g->finish[i] = o.finish;
            if (o.finish == OG_FINISH_ERROR || o.finish == OG_FINISH_CANCEL)
                snprintf(g->error, sizeof g->error, "%s",
                         o.finish == OG_FINISH_ERROR ? o.error : "the request was cancelled: the server is shutting down");
            if (stream) {
                if (o.finish == OG_FINISH_ERROR || o.finish == OG_FINISH_CANCEL) {
                    og_api_err fe;
                    finish_error(o.finish, g->error, &fe);
                    emit(g, og_api_error_obj(&fe));
                } else
                    emit(g, chunk(g, i, g->req.chat ? json_object() : json_string(""), NULL, finish_name(g, i)));
            }
        }
        og_seq_out_free(&o);
    }
    bool all = true;
    for (int i = 0; i < g->n; i++) all &= g->finish[i] != OG_FINISH_NONE;
    if (stream && all && !g->sent_done) {
        if (g->req.include_usage) {
            json_t *u = envelope(g, g->req.chat ? "chat.completion.chunk" : "text_completion");
            json_object_set_new(u, "choices", json_array());
            json_object_set_new(u, "usage", usage_json(g));
            emit(g, u);
        }
        emit_raw(g, "data: [DONE]\n\n");
        g->sent_done = true;
        changed = true;
    }
    if (stream && !g->sent_done) {
        const double t = mono_s();
        if (changed) g->last_out_s = t;
        else if (t - g->last_out_s >= OG_EP_KEEPALIVE_S && emit_raw(g, ": keep-alive\n\n")) {
            g->last_out_s = t;
            changed = true;
        }
    }
    g->cc->n_prompt = g->cc->n_gen = g->cc->n_cached = 0;
    for (int i = 0; i < g->n; i++) {
        g->cc->n_prompt += i % g->per ? 0 : g->n_prompt[i];
        g->cc->n_gen += g->n_gen[i];
        g->cc->n_cached += i % g->per ? 0 : g->n_cached[i];
    }
    return changed;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    gen_ctx *g = cls;
    for (;;) {
        if (g->out_pos < g->out_len) {
            size_t n = g->out_len - g->out_pos < max ? g->out_len - g->out_pos : max;
            memcpy(buf, g->out + g->out_pos, n);
            g->out_pos += n;
            if (g->out_pos == g->out_len) g->out_pos = g->out_len = 0;
            return (ssize_t)n;
        }
        if (g->sent_done) return MHD_CONTENT_READER_END_OF_STREAM;
        if (gen_collect(g, true)) continue;
        if (client_gone(g->fd)) {
            gen_release_all(g); /* cancels: the KV goes before the next step */
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        og_engine_wait(g->e, 0.1);
    }
}

static void stream_free(void *cls) { gen_free(cls); }

/* Sequence i's choice object, reported as choice `index`. */
static json_t *choice_json(gen_ctx *g, int i, int index) {
    bool chat = g->req.chat;
    size_t base = 0;
    json_t *text;
    const char *pt = g->req.prompt_text[i / g->per];
    if (!chat && g->req.echo && pt) {
        base = strlen(pt);
        size_t tl = base + g->text_len[i];
        char *t = malloc(tl + 1);
        if (t) {
            memcpy(t, pt, base);
            memcpy(t + base, g->text[i] ? g->text[i] : "", g->text_len[i]);
        }
        text = t ? og_api_jstr(t, tl) : NULL;
        free(t);
    } else {
        text = og_api_jstr(g->text[i] ? g->text[i] : "", g->text_len[i]);
    }
    json_t *lp =
        g->req.logprobs ? og_api_logprobs(g->srv->mdl.tok, chat, g->toks[i], g->n_toks[i], &g->off[i]) : NULL;
    const char *fr = finish_name(g, i);
    if (chat && g->req.parse) { /* the parser's parts: content null when only calls (§4) */
        json_decref(text);
        bool only_calls = g->n_calls[i] > 0 && !g->content_len[i];
        json_t *msg = json_pack("{s:s,s:o,s:n}", "role", "assistant", "content",
                                only_calls ? json_null() : og_api_jstr(g->content[i] ? g->content[i] : "",
                                                                      g->content_len[i]), "refusal");
        if (g->req.out.parse_reasoning)
            json_object_set_new(msg, "reasoning_content",
                                og_api_jstr(g->reasoning[i] ? g->reasoning[i] : "", g->reasoning_len[i]));
        if (g->n_calls[i]) json_object_set(msg, "tool_calls", g->calls[i]);
        return json_pack("{s:i,s:o,s:o,s:s}", "index", index, "message", msg, "logprobs", lp ? lp : json_null(),
                         "finish_reason", fr);
    }
    return chat ? json_pack("{s:i,s:{s:s,s:o,s:n},s:o,s:s}", "index", index, "message", "role", "assistant",
                            "content", text, "refusal", "logprobs", lp ? lp : json_null(), "finish_reason", fr)
                : json_pack("{s:i,s:o,s:o,s:s}", "index", index, "text", text, "logprobs", lp ? lp : json_null(),
                            "finish_reason", fr);
}

/* The sum of sequence i's tokens' log-probs (best_of's ranking; the end token is not among them). */
static double logprob_sum(const gen_ctx *g, int i) {
    double sum = 0;
    for (int t = 0; t < g->n_toks[i]; t++) sum += g->toks[i][t].logprob;
    return sum;
}

static json_t *final_response(gen_ctx *g) {
    bool chat = g->req.chat;
    json_t *o = envelope(g, chat ? "chat.completion" : "text_completion");
    json_t *choices = json_array();
    const int n = g->req.n > 0 ? g->req.n : 1;
    for (int p = 0; p * g->per < g->n; p++) {
        /* best_of > n: prompt p's n candidates whose log-probs sum highest, best first (ties: the lower seed) */
        int order[OG_API_MAX_N];
        double sum[OG_API_MAX_N]; /* candidate k's, summed once */
        for (int k = 0; k < g->per; k++) {
            order[k] = k;
            sum[k] = g->per > n ? logprob_sum(g, p * g->per + k) : 0;
        }
        for (int k = 1; g->per > n && k < g->per; k++)
            for (int j = k; j > 0 && sum[order[j]] > sum[order[j - 1]]; j--) {
                int t = order[j];
                order[j] = order[j - 1];
                order[j - 1] = t;
            }
        for (int k = 0; k < n && k < g->per; k++)
            json_array_append_new(choices, choice_json(g, p * g->per + order[k], p * n + k));
    }
    json_object_set_new(o, "choices", choices);
    json_object_set_new(o, "usage", usage_json(g));
    return o;
}

static enum MHD_Result handle_generate(og_server *s, struct MHD_Connection *c, conn_ctx *cc, og_endpoint ep) {
    bool chat = ep != OG_EP_COMPLETIONS;
    pthread_mutex_lock(&s->mu);
    int state = s->state;
    og_engine *e = s->engine;
    og_api_model mdl = s->mdl;
    uint64_t seq_no = ++s->id_seq;
    pthread_mutex_unlock(&s->mu);
    if (state == ST_LOADING) return fail(s, c, cc, 503, "unavailable_error", NULL, "the model is still loading; retry shortly");
    if (state == ST_DRAINING) return fail(s, c, cc, 503, "unavailable_error", NULL, "the server is shutting down");
    gen_ctx *g = calloc(1, sizeof *g);
    if (!g) return fail(s, c, cc, 500, "server_error", NULL, "out of memory");
    g->srv = s;
    g->cc = cc;
    g->e = e;
    pthread_mutex_lock(&s->mu);
    s->active++; /* until request_done: the answer has then left, not only been queued */
    pthread_mutex_unlock(&s->mu);
    cc->gen_counted = true;
    g->created = time(NULL);
    snprintf(g->id, sizeof g->id, "%s%016llx", chat ? "chatcmpl-" : "cmpl-",
             (unsigned long long)og_splitmix64(&(uint64_t){s->id_key ^ seq_no}));
    og_api_err err;
    const char *body = cc->body ? cc->body : "";
    og_ep_meta meta = {ep, s->model_id, og_splitmix64(&(uint64_t){s->id_key ^ seq_no ^ 0x5eed}), g->created};
    bool parsed = ep == OG_EP_CHAT || ep == OG_EP_COMPLETIONS ? og_api_parse(body, cc->len, chat, &mdl, &g->req, &err)
                                                              : og_ep_parse(&meta, body, cc->len, &mdl, &g->req, &g->ep, &err);
    if (!parsed) {
        gen_free(g);
        return send_error(s, c, cc, &err, NULL);
    }
    if (ep == OG_EP_COUNT_TOKENS) {
        json_t *o = og_ep_count_json(&g->req);
        gen_free(g);
        return send_json(s, c, cc, 200, o);
    }
    g->per = g->req.best_of > 0 ? g->req.best_of : 1; /* n, or best_of; 1 for /v1/messages and /v1/responses */
    const int n_seqs = g->req.n_prompts * g->per;
    if (n_seqs > mdl.capacity || n_seqs > OG_API_MAX_CHOICES) {
        const int cap = mdl.capacity < OG_API_MAX_CHOICES ? mdl.capacity : OG_API_MAX_CHOICES, n_p = g->req.n_prompts,
                  per = g->per;
        gen_free(g);
        if (per == 1)
            return fail(s, c, cc, 400, "invalid_request_error", NULL,
                        "%d prompts in one request, but this server holds %d sequences at once (--parallel + "
                        "--queue, and at most %d per request): send fewer per request", n_p, cap, OG_API_MAX_CHOICES);
        return fail(s, c, cc, 400, "invalid_request_error", NULL,
                    "%d prompts x %d choices (n or best_of) = %d sequences in one request, but this server holds %d "
                    "sequences at once (--parallel + --queue, and at most %d per request): send fewer per request",
                    n_p, per, n_seqs, cap, OG_API_MAX_CHOICES);
    }
    for (int i = 0; !g->ep && g->req.parse && i < n_seqs; i++) {
        og_outparse_opts po = g->req.out;
        po.id_seed ^= (uint64_t)i * 0x9E3779B97F4A7C15ull; /* each choice's tool-call ids its own */
        if (og_outparse_new(mdl.tok, &po, &g->op[i])) {
            gen_free(g);
            return fail(s, c, cc, 500, "server_error", NULL, "out of memory");
        }
    }
    for (int i = 0; i < g->req.n_prompts; i++) {
        char msg[512];
        og_status st = og_engine_submit_n(e, g->req.prompts[i].v, (int)g->req.prompts[i].n, &g->req.sp, g->per,
                                          &g->seqs[i * g->per], msg, sizeof msg);
        if (st) {
            gen_free(g);
            if (st == OG_ERR_STATE) return fail(s, c, cc, 503, "unavailable_error", NULL, "%s", msg);
            if (st == OG_ERR_RANGE)
                return fail(s, c, cc, 400, "invalid_request_error", "context_length_exceeded", "%s", msg);
            if (st == OG_ERR_NOMEM) return fail(s, c, cc, 500, "server_error", NULL, "%s", msg);
            return fail(s, c, cc, 400, "invalid_request_error", NULL, "%s", msg);
        }
        g->n = (i + 1) * g->per;
    }
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    g->fd = ci ? ci->connect_fd : -1;
    if (g->req.stream) {
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, g, stream_free);
        if (!r) {
            gen_free(g);
            return MHD_NO;
        }
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        MHD_add_response_header(r, "X-Accel-Buffering", "no");
        count_status(s, cc, 200); /* before the stream can start (send_text_allow's order) */
        enum MHD_Result ret = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        return ret;
    }
    for (;;) {
        gen_collect(g, false);
        bool all = true;
        for (int i = 0; i < g->n; i++) all &= g->finish[i] != OG_FINISH_NONE;
        if (all) break;
        if (client_gone(g->fd)) {
            gen_free(g); /* cancels */
            return MHD_NO;
        }
        og_engine_wait(e, 0.1);
    }
    for (int i = 0; i < g->n; i++)
        if (g->finish[i] == OG_FINISH_ERROR || g->finish[i] == OG_FINISH_CANCEL) {
            og_api_err fe;
            finish_error(g->finish[i], g->error, &fe);
            gen_free(g);
            return send_error(s, c, cc, &fe, NULL);
        }
    json_t *o = g->ep ? og_ep_out_final(g->ep) : final_response(g);
    gen_free(g);
    return send_json(s, c, cc, 200, o);
}

/* ---- other endpoints ------------------------------------------------------ */

static json_t *model_json(og_server *s) {
    pthread_mutex_lock(&s->mu);
    int ctx = s->mdl.ctx;
    pthread_mutex_unlock(&s->mu);
    json_t *o = json_pack("{s:s,s:s,s:I,s:s}", "id", s->model_id, "object", "model", "created", (json_int_t)s->created,
                          "owned_by", "onegpu");
    if (o && ctx > 0) json_object_set_new(o, "context_length", json_integer(ctx));
    return o;
}

static enum MHD_Result handle_metrics(og_server *s, struct MHD_Connection *c, conn_ctx *cc) {
    pthread_mutex_lock(&s->mu);
    og_engine *e = s->engine;
    uint64_t by[N_COUNTED + 1], probes[2];
    memcpy(by, s->by_status, sizeof by);
    memcpy(probes, s->probes, sizeof probes);
    int state = s->state;
    uint32_t nl = s->mdl.n_layer;
    pthread_mutex_unlock(&s->mu);
    og_engine_metrics m = {0};
    if (e) og_engine_metrics_get(e, &m);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return fail(s, c, cc, 500, "server_error", NULL, "out of memory");
    fprintf(f, "# HELP onegpu_requests_total API requests answered (every path but /health and /metrics), by status "
               "code.\n# TYPE onegpu_requests_total counter\n");
    for (size_t k = 0; k < N_COUNTED; k++)
        fprintf(f, "onegpu_requests_total{code=\"%d\"} %llu\n", counted[k], (unsigned long long)by[k]);
    fprintf(f, "onegpu_requests_total{code=\"other\"} %llu\n", (unsigned long long)by[N_COUNTED]);
    fprintf(f, "# HELP onegpu_probe_requests_total Requests to /health and /metrics answered (this one not yet).\n"
               "# TYPE onegpu_probe_requests_total counter\n"
               "onegpu_probe_requests_total{path=\"/health\"} %llu\nonegpu_probe_requests_total{path=\"/metrics\"} %llu\n",
            (unsigned long long)probes[0], (unsigned long long)probes[1]);
    const struct {
        const char *name, *type, *help;
        double v;
        bool placement; /* only with --vram */
    } rows[] = {
        {"ready", "gauge", "1 when the model is loaded and requests are admitted.", state == ST_READY, false},
        {"prompt_tokens_total", "counter", "Prompt tokens run through the model.", (double)m.prompt_tokens, false},
        {"generation_tokens_total", "counter", "Tokens generated.", (double)m.gen_tokens, false},
        {"generation_tokens_per_second", "gauge", "Generated tokens per second over the last 10 s.", m.gen_tok_per_s,
         false},
        {"queue_depth", "gauge", "Sequences waiting for a place.", m.queued, false},
        {"sequences_running", "gauge", "Sequences prefilling or decoding.", m.running, false},
        {"sequences_admitted_total", "counter", "Sequences accepted into the queue.", (double)m.seqs_admitted, false},
        {"sequences_cancelled_total", "counter", "Sequences cancelled (client gone or shutdown).",
         (double)m.seqs_cancelled, false},
        {"sequences_finished_total", "counter", "Sequences that ran to their end.", (double)m.seqs_finished, false},
        {"sequences_rejected_total", "counter", "Sequences refused because the queue was full.",
         (double)m.seqs_rejected, false},
        {"kv_blocks_used", "gauge", "KV cache blocks held by live sequences.", (double)m.kv_blocks_used, false},
        {"kv_blocks_total", "gauge", "KV pool blocks (parallel x ctx; used + cached + free).", (double)m.kv_blocks_total,
         false},
        {"kv_blocks_free", "gauge", "KV pool blocks on the free list.", (double)m.kv_blocks_free, false},
        {"kv_block_bytes", "gauge", "Bytes of one KV block (64 positions, every layer).", (double)m.kv_block_bytes,
         false},
        {"kv_usage_ratio", "gauge", "kv_blocks_used / kv_blocks_total.",
         m.kv_blocks_total ? (double)m.kv_blocks_used / (double)m.kv_blocks_total : 0.0, false},
        {"kv_blocks_cached", "gauge", "Prefix-cache KV blocks no sequence references (kept for reuse, evicted LRU).",
         (double)m.kv_blocks_cached, false},
        {"prefix_cache_hits_total", "counter", "Sequences admitted with a cached prompt prefix.", (double)m.prefix_hits,
         false},
        {"prefix_cached_tokens_total", "counter", "Prompt tokens read from the prefix cache instead of prefilled.",
         (double)m.prefix_cached_tokens, false},
        {"prefix_cache_states", "gauge", "Whole sequence states held by the prefix cache (deepseek4, deepseek41).",
         (double)m.prefix_states, false},
        {"prefix_cache_state_bytes", "gauge", "Bytes of those states (within the plan's KV: parallel x ctx).",
         (double)m.prefix_state_bytes, false},
        {"kv_cache_ram_blocks", "gauge", "Evicted prefix blocks held in host RAM (--cache-ram).",
         (double)m.cache_ram_blocks, false},
        {"kv_cache_ram_bytes", "gauge", "Bytes of those blocks.", (double)m.cache_ram_bytes, false},
        {"kv_cache_disk_blocks", "gauge", "Prefix block files in --cache-dir.", (double)m.cache_disk_blocks, false},
        {"kv_cache_disk_bytes", "gauge", "Bytes of those files.", (double)m.cache_disk_bytes, false},
        {"kv_cache_ram_restored_total", "counter", "Blocks copied back into the pool from host RAM.",
         (double)m.cache_ram_restored, false},
        {"kv_cache_disk_restored_total", "counter", "Blocks read back into the pool from --cache-dir.",
         (double)m.cache_disk_restored, false},
        {"kv_cache_ram_stored_total", "counter", "Evicted blocks copied to host RAM.", (double)m.cache_ram_stored, false},
        {"kv_cache_disk_stored_total", "counter", "Evicted blocks written to --cache-dir.", (double)m.cache_disk_stored,
         false},
        {"kv_cache_disk_skipped_total", "counter", "Block files refused (corrupt, truncated, another model's).",
         (double)m.cache_disk_skipped, false},
        {"kv_cache_disk_write_errors_total", "counter", "Block files that could not be written.",
         (double)m.cache_disk_errors, false},
        {"kv_cache_ram_states", "gauge", "Evicted prefix-cache states held in host RAM (--cache-ram; deepseek4, "
         "deepseek41).", (double)m.cache_ram_states, false},
        {"kv_cache_ram_state_bytes", "gauge", "Bytes of those states.", (double)m.cache_ram_state_bytes, false},
        {"kv_cache_disk_states", "gauge", "Prefix-cache state files in --cache-dir.", (double)m.cache_disk_states, false},
        {"kv_cache_disk_state_bytes", "gauge", "Bytes of those files.", (double)m.cache_disk_state_bytes, false},
        {"kv_cache_ram_states_restored_total", "counter", "States restored from host RAM.",
         (double)m.cache_ram_states_restored, false},
        {"kv_cache_disk_states_restored_total", "counter", "States restored from --cache-dir (or its writer's queue).",
         (double)m.cache_disk_states_restored, false},
        {"kv_cache_ram_states_stored_total", "counter", "Evicted states copied to host RAM.",
         (double)m.cache_ram_states_stored, false},
        {"kv_cache_disk_states_stored_total", "counter", "State files written to --cache-dir.",
         (double)m.cache_disk_states_stored, false},
        {"kv_cache_disk_states_skipped_total", "counter", "State files refused (corrupt, truncated, another model's, "
         "options or architecture).", (double)m.cache_disk_states_skipped, false},
        {"kv_cache_disk_states_write_errors_total", "counter", "State files that could not be written.",
         (double)m.cache_disk_states_errors, false},
        {"kv_cache_write_queue", "gauge", "Entries waiting for the --cache-dir writer thread.",
         (double)m.cache_write_queue, false},
        {"kv_cache_write_dropped_total", "counter", "Evicted entries not written: the writer's queue was full.",
         (double)m.cache_write_dropped, false},
        {"steps_total", "counter", "Scheduler steps (forward calls).", (double)m.steps, false},
        {"step_seconds_max", "gauge", "Longest scheduler step so far, seconds.", m.longest_step_s, false},
        {"expert_selections_total", "counter", "Routed (token, expert) selections.", (double)m.expert_routes, true},
        {"expert_device_hits_total", "counter", "Selections of experts resident on the device.",
         (double)m.expert_hits, true},
        {"expert_hit_rate", "gauge", "expert_device_hits_total / expert_selections_total.",
         m.expert_routes ? (double)m.expert_hits / (double)m.expert_routes : 0.0, true},
        {"expert_migrations_total", "counter", "Experts moved into device slots.", (double)m.migrations, true},
        {"pcie_bytes_total", "counter", "Bytes copied host -> device.", (double)m.pcie_bytes, true},
        {"resident_experts", "gauge", "Experts usable in device slots (copies in flight not counted).", (double)m.resident_experts, true},
    };
    for (size_t k = 0; k < sizeof rows / sizeof *rows; k++) {
        if (rows[k].placement && !m.placement) continue;
        fprintf(f, "# HELP onegpu_%s %s\n# TYPE onegpu_%s %s\nonegpu_%s %.17g\n", rows[k].name, rows[k].help,
                rows[k].name, rows[k].type, rows[k].name, rows[k].v);
    }
    uint64_t *lr = nl ? calloc(nl, sizeof *lr) : NULL, *lh = nl ? calloc(nl, sizeof *lh) : NULL;
    if (m.placement && lr && lh && !og_engine_layer_hits(e, lr, lh, nl)) {
        fprintf(f, "# HELP onegpu_expert_hit_rate_layer Device share of expert selections per MoE layer.\n"
                   "# TYPE onegpu_expert_hit_rate_layer gauge\n");
        for (uint32_t l = 0; l < nl; l++)
            if (lr[l]) fprintf(f, "onegpu_expert_hit_rate_layer{layer=\"%u\"} %.17g\n", l, (double)lh[l] / (double)lr[l]);
    }
    free(lr);
    free(lh);
    if (fclose(f) || !buf) {
        free(buf);
        return fail(s, c, cc, 500, "server_error", NULL, "out of memory");
    }
    enum MHD_Result r = send_text(s, c, cc, 200, "text/plain; version=0.0.4", buf, len, NULL);
    free(buf);
    return r;
}

/* h is the key, spaces and tabs around it ignored; the time taken does not
 * depend on where they differ. */
static bool key_matches(const char *key, const char *h) {
    while (*h == ' ' || *h == '\t') h++;
    size_t a = strlen(h), b = strlen(key);
    while (a && (h[a - 1] == ' ' || h[a - 1] == '\t')) a--;
    unsigned char diff = (unsigned char)(a != b);
    for (size_t i = 0; i < b; i++) diff |= (unsigned char)(key[i] ^ (i < a ? h[i] : 0));
    return diff == 0;
}

/* "Authorization: Bearer KEY" (the scheme case-insensitive, RFC 7235 §2.1),
 * or "x-api-key: KEY" (the Anthropic clients' header, anthropic-messages.md
 * §1); a header holding NUL never matches. */
static bool authorized(og_server *s, struct MHD_Connection *c) {
    if (!s->api_key) return true;
    const char *h;
    size_t hl;
    if (MHD_lookup_connection_value_n(c, MHD_HEADER_KIND, "Authorization", 13, &h, &hl) == MHD_YES && h &&
        strlen(h) == hl && hl >= 7 && !strncasecmp(h, "Bearer ", 7) && key_matches(s->api_key, h + 7))
        return true;
    return MHD_lookup_connection_value_n(c, MHD_HEADER_KIND, "x-api-key", 9, &h, &hl) == MHD_YES && h &&
           strlen(h) == hl && key_matches(s->api_key, h);
}

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Writes p[0..n) to the socket by deadline (CLOCK_MONOTONIC seconds). */
static bool send_all(int fd, const char *p, size_t n, double deadline) {
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k > 0) {
            p += k;
            n -= (size_t)k;
            continue;
        }
        if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
        double left = deadline - mono_s();
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        if (left <= 0 || poll(&pf, 1, (int)(left * 1000) + 1) <= 0) return false;
    }
    return true;
}

#define LINGER_QUIET_S 2.0 /* refuse_early: a client silent this long is done sending */

/* Answers e (a 401 or 413) before the request's body is read, on the socket
 * itself. Queued through libmicrohttpd, the answer would be followed by a close
 * with the client's unread bytes pending, which resets the connection: a client
 * that sends its whole body before reading (most do) gets a broken pipe and
 * never the answer. Here the answer goes out, our side shuts down for writing,
 * and what the client still sends is read and dropped (never stored) until it
 * closes, stays silent for LINGER_QUIET_S, or --timeout (60 s if 0) has passed
 * in all; then libmicrohttpd closes the connection (MHD_NO). */
static enum MHD_Result refuse_early(og_server *s, struct MHD_Connection *c, conn_ctx *cc, const char *version,
                                    const og_api_err *e) {
    cc->responded = true;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    char *body = og_endpoint_anthropic(cc->path) ? og_msgs_error_json(e) : og_api_error_json(e);
    if (!ci || !body) {
        free(body);
        return MHD_NO;
    }
    int fd = ci->connect_fd;
    double deadline = mono_s() + (s->cfg.timeout_s ? s->cfg.timeout_s : 60);
    char head[512];
    int hl = snprintf(head, sizeof head,
                      "%s %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\nCache-Control: no-cache\r\n"
                      "%sConnection: close\r\n\r\n",
                      version && !strcmp(version, "HTTP/1.0") ? "HTTP/1.0" : "HTTP/1.1", e->status,
                      e->status == 401 ? "Unauthorized" : "Content Too Large", strlen(body),
                      e->status == 401 ? "WWW-Authenticate: Bearer\r\n" : "");
    if (s->cfg.log) og_log(s->cfg.log, OG_LOG_INFO, "%d %s", e->status, e->message);
    count_status(s, cc, e->status);
    if (send_all(fd, head, (size_t)hl, deadline) && send_all(fd, body, strlen(body), deadline)) {
        shutdown(fd, SHUT_WR);
        char buf[65536];
        for (;;) {
            double left = deadline - mono_s();
            if (left > LINGER_QUIET_S) left = LINGER_QUIET_S;
            struct pollfd pf = {.fd = fd, .events = POLLIN};
            if (left <= 0 || poll(&pf, 1, (int)(left * 1000) + 1) <= 0) break;
            ssize_t k = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
            if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) break;
        }
    }
    free(body);
    return MHD_NO;
}

static enum MHD_Result access_handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                      const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    og_server *s = cls;
    conn_ctx *cc = *con_cls;
    if (!cc) {
        if (!(cc = calloc(1, sizeof *cc))) return MHD_NO;
        *con_cls = cc;
        cc->t0 = mono_s();
        clock_gettime(CLOCK_REALTIME, &cc->wall0);
        snprintf(cc->method, sizeof cc->method, "%s", method);
        snprintf(cc->path, sizeof cc->path, "%s", url);
        cc->probe = !strcmp(url, "/health") || !strcmp(url, "/metrics");
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        bool has_body = (cl && strtoull(cl, NULL, 10) > 0) ||
                        MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Transfer-Encoding");
        og_api_err e;
        if (strcmp(url, "/health") && !authorized(s, c)) { /* before reading any body */
            og_api_error(&e, 401, "authentication_error", NULL, "invalid_api_key",
                         "a valid API key is required: send the header 'Authorization: Bearer KEY' or 'x-api-key: "
                         "KEY' (onegpu serve --api-key)");
            if (has_body) return refuse_early(s, c, cc, version, &e);
            cc->responded = true;
            return send_error(s, c, cc, &e, NULL);
        }
        if (cl && strtoull(cl, NULL, 10) > s->cfg.max_body) {
            og_api_error(&e, 413, "invalid_request_error", NULL, "request_too_large",
                         "the request body (%s bytes) is over this server's limit of %zu bytes", cl, s->cfg.max_body);
            return refuse_early(s, c, cc, version, &e);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (cc->responded) return MHD_NO;
        if (cc->len + *upload_size > s->cfg.max_body) { /* no Content-Length (chunked): found out while reading */
            og_api_err e;
            og_api_error(&e, 413, "invalid_request_error", NULL, "request_too_large",
                         "the request body is over this server's limit of %zu bytes", s->cfg.max_body);
            return refuse_early(s, c, cc, version, &e);
        }
        if (cc->len + *upload_size + 1 > cc->cap) {
            size_t cap = cc->cap ? cc->cap : 4096;
            while (cap < cc->len + *upload_size + 1) cap *= 2;
            char *b = realloc(cc->body, cap);
            if (!b) return MHD_NO;
            cc->body = b;
            cc->cap = cap;
        }
        memcpy(cc->body + cc->len, upload, *upload_size);
        cc->len += *upload_size;
        cc->body[cc->len] = 0;
        *upload_size = 0;
        return MHD_YES;
    }
    if (cc->responded) return MHD_YES;
    cc->responded = true;
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    if (!strcmp(url, "/health")) {
        if (!get) return fail(s, c, cc, 405, "invalid_request_error", NULL, "use GET for /health");
        pthread_mutex_lock(&s->mu);
        int st = s->state;
        pthread_mutex_unlock(&s->mu);
        return send_json(s, c, cc, st == ST_READY ? 200 : 503,
                         json_pack("{s:s}", "status", st == ST_READY ? "ok" : st == ST_LOADING ? "loading" : "shutting down"));
    }
    og_endpoint ep = og_endpoint_of(url);
    if (ep != OG_EP_NONE) {
        if (!post) {
            og_api_err e;
            char pr[128];
            og_api_error(&e, 405, "invalid_request_error", NULL, NULL, "use POST for %s",
                         og_printable(url, strlen(url), pr, sizeof pr));
            return send_error(s, c, cc, &e, "POST");
        }
        const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
        if (!og_content_type_json(ct)) {
            og_api_err e;
            char pc[96];
            og_api_error(&e, 415, "invalid_request_error", NULL, "unsupported_media_type",
                         "the body must be JSON sent with the header 'Content-Type: application/json' (got '%s')",
                         og_printable(ct, strlen(ct), pc, sizeof pc));
            return send_error(s, c, cc, &e, NULL);
        }
        return handle_generate(s, c, cc, ep);
    }
    if (!strcmp(url, "/metrics")) {
        if (!get) return fail(s, c, cc, 405, "invalid_request_error", NULL, "use GET for /metrics");
        return handle_metrics(s, c, cc);
    }
    if (!strcmp(url, "/v1/models") || !strncmp(url, "/v1/models/", 11)) {
        if (!get) return fail(s, c, cc, 405, "invalid_request_error", NULL, "use GET for %s", url);
        if (!strcmp(url, "/v1/models"))
            return send_json(s, c, cc, 200, json_pack("{s:s,s:[o]}", "object", "list", "data", model_json(s)));
        if (!strcmp(url + 11, s->model_id)) return send_json(s, c, cc, 200, model_json(s));
        char pr[128];
        og_api_err e;
        og_api_error(&e, 404, "invalid_request_error", "model", "model_not_found",
                     "the model '%s' does not exist; this server has '%s'",
                     og_printable(url + 11, strlen(url + 11), pr, sizeof pr), s->model_id);
        return send_error(s, c, cc, &e, NULL);
    }
    char pr[128], v1[256];
    /* a client given the server's root as its base URL (http://host:8090, not
     * .../v1) sends /chat/completions: say where the API is */
    snprintf(v1, sizeof v1, "/v1%s", url);
    if (strncmp(url, "/v1/", 4) && (og_endpoint_of(v1) != OG_EP_NONE || !strcmp(v1, "/v1/models")))
        return fail(s, c, cc, 404, "not_found_error", NULL,
                    "no such endpoint: %s %s; the API is under /v1 (%s %s): a client's base URL ends in /v1", method,
                    og_printable(url, strlen(url), pr, sizeof pr), method, v1);
    return fail(s, c, cc, 404, "not_found_error", NULL, "no such endpoint: %s %s", method,
                og_printable(url, strlen(url), pr, sizeof pr));
}

/* The access-log line of a finished request: when its headers arrived (UTC),
 * method, path, status (499: the client left before any answer), prompt /
 * cached (read from the prefix cache) / completion tokens (0 but for
 * generation requests), and seconds from its headers to its end. */
static void access_log(og_server *s, const conn_ctx *cc) {
    FILE *f = s->cfg.access_log;
    if (!f) return;
    struct tm tm;
    gmtime_r(&cc->wall0.tv_sec, &tm);
    char ts[48];
    size_t tl = strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(ts + tl, sizeof ts - tl, ".%03ldZ", cc->wall0.tv_nsec / 1000000);
    double dur = mono_s() - cc->t0;
    int status = cc->status ? cc->status : 499;
    if (s->cfg.access_json) {
        json_t *o = json_pack("{s:s,s:o,s:o,s:i,s:I,s:I,s:I,s:f}", "time", ts, "method",
                              og_api_jstr(cc->method, strlen(cc->method)), "path", og_api_jstr(cc->path, strlen(cc->path)),
                              "status", status, "prompt_tokens", (json_int_t)cc->n_prompt, "cached_tokens", (json_int_t)cc->n_cached,
                              "completion_tokens", (json_int_t)cc->n_gen, "duration_s", round(dur * 1e6) / 1e6);
        char *t = o ? json_dumps(o, JSON_COMPACT) : NULL;
        json_decref(o);
        if (t) fprintf(f, "%s\n", t);
        free(t);
    } else {
        char pm[64], pp[1100];
        fprintf(f, "%s %s %s %d prompt=%lld cached=%lld completion=%lld %.3fs\n", ts,
                og_printable(cc->method, strlen(cc->method), pm, sizeof pm),
                og_printable(cc->path, strlen(cc->path), pp, sizeof pp), status, cc->n_prompt, cc->n_cached, cc->n_gen, dur);
    }
    fflush(f);
}

static void request_done(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)c;
    (void)toe;
    conn_ctx *cc = *con_cls;
    if (cc && cc->gen_counted) { /* a generation request's answer is out (or its client gone): og_server_stop may close */
        og_server *s = cls;
        pthread_mutex_lock(&s->mu);
        if (--s->active == 0) pthread_cond_broadcast(&s->idle);
        pthread_mutex_unlock(&s->mu);
    }
    if (cc) {
        access_log(cls, cc);
        free(cc->body);
        free(cc);
    }
    *con_cls = NULL;
}

static int listen_on(const char *host, int port, int *out_port, char *err, size_t errlen) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *res;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int rc = getaddrinfo(host, ps, &hints, &res);
    if (rc) {
        og_fail(err, errlen, OG_ERR_IO, "cannot resolve --host %s: %s", host, gai_strerror(rc));
        return -1;
    }
    int fd = -1, last = 0;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            last = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) || listen(fd, 128)) {
            last = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0) {
        og_fail(err, errlen, OG_ERR_IO, "cannot listen on %s port %d: %s%s", host, port, strerror(last),
                last == EADDRINUSE ? " (another server is there: stop it or choose --port)" : "");
        return -1;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *out_port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                               : ((struct sockaddr_in *)&ss)->sin_port);
    return fd;
}

og_status og_server_start(const og_server_config *cfg, og_server **out, char *err, size_t errlen) {
    *out = NULL;
    og_server *s = calloc(1, sizeof *s);
    if (!s) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    s->cfg = *cfg;
    s->host = strdup(cfg->host ? cfg->host : "127.0.0.1");
    s->model_id = strdup(cfg->model_id ? cfg->model_id : "onegpu");
    s->fingerprint = strdup(cfg->fingerprint ? cfg->fingerprint : "onegpu");
    s->api_key = cfg->api_key && cfg->api_key[0] ? strdup(cfg->api_key) : NULL;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->idle, NULL);
    s->created = time(NULL);
    uint64_t key[2];
    og_random_key(key);
    s->id_key = key[0] ^ key[1];
    if (!s->host || !s->model_id || !s->fingerprint || (cfg->api_key && cfg->api_key[0] && !s->api_key)) {
        og_server_stop(s);
        return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    }
    int fd = listen_on(s->host, cfg->port, &s->port, err, errlen);
    if (fd < 0) {
        og_server_stop(s);
        return OG_ERR_IO;
    }
    s->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL,
                            0, NULL, NULL, access_handler, s, MHD_OPTION_LISTEN_SOCKET, fd,
                            MHD_OPTION_CONNECTION_TIMEOUT, cfg->timeout_s, MHD_OPTION_CONNECTION_LIMIT,
                            cfg->max_connections ? cfg->max_connections : 256u, MHD_OPTION_NOTIFY_COMPLETED,
                            request_done, s, MHD_OPTION_END);
    if (!s->d) {
        close(fd);
        og_server_stop(s);
        return og_fail(err, errlen, OG_ERR_IO, "libmicrohttpd could not start on %s port %d", cfg->host, cfg->port);
    }
    *out = s;
    return OG_OK;
}

int og_server_port(const og_server *s) { return s->port; }

void og_server_set_engine(og_server *s, og_engine *e, const og_api_model *mdl) {
    pthread_mutex_lock(&s->mu);
    s->engine = e;
    s->mdl = *mdl;
    s->state = ST_READY;
    pthread_mutex_unlock(&s->mu);
}

void og_server_stop_admitting(og_server *s) {
    pthread_mutex_lock(&s->mu);
    s->state = ST_DRAINING;
    pthread_mutex_unlock(&s->mu);
}

void og_server_stop(og_server *s) {
    if (!s) return;
    if (s->d) { /* let the answers whose sequences ended reach their clients (at most 10 s) */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 10;
        pthread_mutex_lock(&s->mu);
        while (s->active > 0 && pthread_cond_timedwait(&s->idle, &s->mu, &ts) == 0) {
        }
        pthread_mutex_unlock(&s->mu);
        MHD_stop_daemon(s->d);
    }
    pthread_cond_destroy(&s->idle);
    pthread_mutex_destroy(&s->mu);
    free(s->host);
    free(s->model_id);
    free(s->fingerprint);
    free(s->api_key);
    free(s);
}
