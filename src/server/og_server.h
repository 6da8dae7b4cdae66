/* onegpu's HTTP server: the OpenAI-compatible API (shared/spec/openai-api.md)
 * over libmicrohttpd, one thread per connection (a connection waiting for its
 * tokens blocks only itself), with /health, /metrics (Prometheus text),
 * optional bearer-key auth and an access log (one line per request). The server listens before the model is loaded
 * (/health says 503 "loading" until og_server_set_engine). */
#ifndef OG_SERVER_H
#define OG_SERVER_H

#include "og_api.h"
#include "og_engine.h"

typedef struct og_server og_server;

typedef struct og_server_config {
    const char *host;        /* address to bind, numeric or a name (default 127.0.0.1) */
    int port;                /* 0: any free port (og_server_port tells which) */
    const char *api_key;     /* NULL: no auth; else every path but /health needs "Authorization: Bearer KEY" */
    size_t max_body;         /* request body limit, bytes (413 beyond) */
    unsigned timeout_s;      /* idle connection timeout, seconds (0: none) */
    unsigned max_connections;
    const char *model_id;    /* the id /v1/models lists and responses echo */
    const char *fingerprint; /* system_fingerprint of responses */
    const og_logger *log;    /* request errors are logged at INFO, failures at WARN */
    FILE *access_log;        /* one line per request (server.c access_log), or NULL for none */
    bool access_json;        /* those lines as JSON objects (--log-format json), else text */
} og_server_config;

/* Binds and starts serving (/health answers 503 until the engine is set).
 * Errors: OG_ERR_IO naming the address and errno's text (port in use, bad
 * address), OG_ERR_NOMEM. */
og_status og_server_start(const og_server_config *cfg, og_server **out, char *err, size_t errlen);
/* The TCP port bound. */
int og_server_port(const og_server *s);
/* The model is ready: requests go to e (not owned; must outlive the server's use
 * of it: call og_server_stop before og_engine_free). */
void og_server_set_engine(og_server *s, og_engine *e, const og_api_model *mdl);
/* New generation requests get 503 (shutting down); /health says so too. */
void og_server_stop_admitting(og_server *s);
/* Stops listening, waits for every connection thread, frees. */
void og_server_stop(og_server *s);

#endif
