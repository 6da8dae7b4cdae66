/* `onegpu serve`: the OpenAI-compatible server. Order of events: plan (header
 * only; refuse before anything is loaded), listen (/health 503 "loading"),
 * load the model and start the scheduler (/health 200), serve until SIGTERM or
 * SIGINT, then stop admitting, let running requests finish for --grace
 * seconds, cancel the rest, and exit 0. */
#include "cli.h"
#include "og_engine.h"
#include "og_moe.h"
#include "og_policy.h"
#include "og_server.h"
#include "placement.h"

#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void usage(FILE *out) {
    fprintf(out,
            "usage: onegpu serve -m MODEL.gguf [--host ADDR] [--port P] [--api-key KEY] [--alias ID]\n"
            "                    [--ctx N] [--parallel N] [--batch-tokens N] [--queue N] [--threads T] [--numa-node N]\n"
            "                    [--max-tokens N] [--log-format text|json] [--reasoning on|off] [--prefix-cache on|off]\n"
            "                    [--cache-ram SIZE] [--cache-dir DIR [--cache-dir-size SIZE]]\n"
            "                    [--chat-template v3|r1|v3.1|v4|v4.1]\n"
            "                    [--device cuda|cpu|auto] [--vram SIZE [--ram SIZE] [--reserve SIZE] [--expert-slots N|all]\n"
            "                     [--profile FILE] [--save-profile FILE] [--migrate N]]\n"
            "  OpenAI-compatible API at http://HOST:PORT/v1 (chat/completions, completions, responses, models),\n"
            "  the Anthropic Messages API (/v1/messages, /v1/messages/count_tokens),\n"
            "  /health (503 while loading) and /metrics (Prometheus text).\n"
            "  --host ADDR        address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)\n"
            "  --port P           TCP port (default 8090; 0 = any free port, printed at start)\n"
            "  --api-key KEY      require 'Authorization: Bearer KEY' or 'x-api-key: KEY' (also ONEGPU_API_KEY)\n"
            "  --alias ID         model id in /v1/models and responses (default: the file name without .gguf)\n"
            "  --ctx N            positions per sequence, prompt + output (default: the model's, at most 4096)\n"
            "  --parallel N       sequences served at once (default 4); --queue N more wait (default 64; then 503)\n"
            "  --batch-tokens N   tokens per forward step: decoders + prefill chunks (default 512)\n"
            "  --prefix-cache on|off  reuse the cache of a prompt prefix seen before (default on): deepseek2 shares\n"
            "                     whole 64-token KV blocks, kept in the KV pool (parallel x ctx positions) until a\n"
            "                     block is needed, least recently used evicted; deepseek4 / deepseek41 restore a\n"
            "                     copy of the whole state taken at a prompt's last position but one (prompts of\n"
            "                     65+ tokens), kept within the plan's KV less the running sequences'\n"
            OG_CLI_CACHE_HELP
            "  --max-tokens N     tokens generated for a request that sets no max_tokens (default: until the\n"
            "                     context is full for chat, 16 for completions); a request's own max_tokens wins\n"
            "  --reasoning on|off thinking mode for chats that do not choose (reasoning_effort, chat_template_kwargs\n"
            "                     thinking / enable_thinking); for encodings with one (V3.1, V4, V4.1; R1 always\n"
            "                     thinks): the reasoning comes back as reasoning_content (default off)\n"
            "  --chat-template NAME  the chat encoding, instead of the one detected from the file's\n"
            "                     tokenizer.chat_template: v3, r1, v3.1, v4 or v4.1\n"
            "  --log-format text|json  the access log on stdout, one line per request: time, method, path, status,\n"
            "                     prompt / cached / completion tokens, seconds (default text)\n"
            "  --max-body SIZE    request body limit (default 4M; 413 beyond)\n"
            "  --timeout S        idle connection timeout, seconds (default 60; a request being answered is never idle)\n"
            "  --grace S          on SIGTERM or SIGINT, seconds running requests may take to finish (default 30)\n"
            "  --threads T        CPU threads (default: the CPUs this process may use; with a NUMA node, its CPUs)\n"
            "  --numa-node N      pin the threads to node N's CPUs and prefer node N for the routed experts' memory\n"
            "                     (default: the GPU's node when Linux knows it, else no binding; run.sh passes it)\n"
            "  --cpu-numerics gpu|fork  gpu (default): every host product in the canonical order the device computes\n"
            "                     resident experts in, bit for bit in every tier, so no result depends on the tier or\n"
            "                     placement; fork: each CPU tier's fastest order (faster); requests with\n"
            "                     \"strata_reproducible\": \"required\" get gpu numerics either way\n"
            OG_CLI_MODEL_OPTIONS_HELP
            "placement (as onegpu plan; the plan is checked before anything is loaded, exit 3 if it does not fit):\n"
            "  --device cuda|cpu|auto  who computes the resident experts (default auto: the GPU when this build has\n"
            "                     CUDA and one answers, else the CPU); one line on stderr says which\n"
            "  --vram SIZE        device memory to plan for (on a GPU: its free memory when not given); without a GPU\n"
            "                     the cpu device plays one of SIZE bytes: it holds\n"
            "                     the planned hot set and runs those experts on its own threads while the host pool\n"
            "                     runs the cold ones; hit rate, migrations and PCIe bytes show in /metrics\n"
            "  --device-threads N the cpu device's threads (default: as --threads)\n"
            "  --device-forward   the forward pass's own ops on the device's stream too, the non-expert weights and\n"
            "                     KV cache in its memory (default: the GPU's for a deepseek2 model on the cuda\n"
            "                     device, else on the host pool); --no-device-forward: never\n"
            "  --ram SIZE         host memory for the plan (default: MemAvailable and any cgroup limit)\n"
            "  --reserve SIZE     device memory kept free (default 512M)\n"
            "  --expert-slots N|all  expert slots per MoE layer instead of the planner's (0: all on the host)\n"
            "  --profile FILE     a usage profile (--save-profile) that seeds the initial hot set\n"
            "  --migrate N        experts per layer moved into the device between steps (default 2)\n"
            "  --save-profile F   writes the expert selection counts at shutdown (for --profile)\n");
}

/* SIGTERM/SIGINT, taken by one thread: while the model loads there is nothing to
 * finish, so the process ends at once; once serving, main is woken to drain. */
typedef struct sig_watch {
    sigset_t sigs;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool serving;
    int sig;
} sig_watch;

static void *watch_signals(void *arg) {
    sig_watch *w = arg;
    int sig = 0;
    sigwait(&w->sigs, &sig);
    pthread_mutex_lock(&w->mu);
    if (!w->serving) {
        fprintf(stderr, "onegpu serve: %s while loading: stopped\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
        _exit(0); /* nothing admitted yet: no request to finish, nothing to save */
    }
    w->sig = sig;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static double parse_seconds(const char *s, bool *bad) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !(v >= 0) || v > 1e7) *bad = true;
    return v;
}

/* --FLAG on|off into *out; false after printing why. */
static bool parse_on_off(const char *flag, const char *arg, bool *out) {
    if (strcmp(arg, "on") && strcmp(arg, "off")) {
        fprintf(stderr, "onegpu serve: bad value '%s' for --%s: expected on or off\n", arg, flag);
        return false;
    }
    *out = !strcmp(arg, "on");
    return true;
}

int og_cmd_serve(int argc, char **argv) {
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},      {"host", required_argument, 0, 'H'},
        {"port", required_argument, 0, 'p'},       {"api-key", required_argument, 0, 'k'},
        {"alias", required_argument, 0, 'a'},      {"parallel", required_argument, 0, 'P'},
        {"batch-tokens", required_argument, 0, 'B'}, {"queue", required_argument, 0, 'Q'},
        {"max-body", required_argument, 0, 'b'},   {"timeout", required_argument, 0, 'T'},
        {"grace", required_argument, 0, 'g'},      OG_CLI_FLAG_OPTIONS,
        {"max-tokens", required_argument, 0, 'x'}, {"log-format", required_argument, 0, 'l'},
        {"reasoning", required_argument, 0, 'R'}, {"chat-template", required_argument, 0, 'C'},
        {"prefix-cache", required_argument, 0, 1000},
        {"help", no_argument, 0, 'h'},             {0, 0, 0, 0}};
    const char *model_path = NULL, *host = "127.0.0.1", *api_key = getenv("ONEGPU_API_KEY"), *alias = NULL;
    uint32_t parallel = 4, batch_tokens = 512, queue = 64;
    long port = 8090, max_tokens = 0;
    bool log_json = false, reasoning = false, prefix_cache = true, prefix_cache_given = false;
    og_chat_kind chat_kind = OG_CHAT_UNKNOWN; /* UNKNOWN: detect */
    uint64_t max_body = 4u << 20;
    double timeout = 60, grace = 30;
    bool bad = false;
    og_cli_flags fl;
    og_cli_flags_init(&fl);
    int c, li = 0;
    optind = 1;
    while ((li = -1, c = getopt_long(argc, argv, "m:h", opts, &li)) != -1) {
        bool was_bad = bad;
        int shared = og_cli_flag("onegpu serve", c, optarg, &fl);
        if (shared < 0) return OG_EXIT_USAGE;
        if (shared) continue;
        switch (c) {
        case 'm': model_path = optarg; break;
        case 'H': host = optarg; break;
        case 'p': bad |= !og_cli_parse_long(optarg, 0, 65535, &port); break;
        case 'k': api_key = optarg; break;
        case 'a': alias = optarg; break;
        case 'P': bad |= !og_cli_parse_count(optarg, &parallel) || parallel > 4096; break;
        case 'B': bad |= !og_cli_parse_count(optarg, &batch_tokens) || batch_tokens > (1u << 20); break;
        case 'Q': {
            long v = 0;
            bad |= !og_cli_parse_long(optarg, 0, 1000000, &v);
            queue = (uint32_t)v;
            break;
        }
        case 'b': bad |= og_parse_size(optarg, &max_body) != OG_OK || max_body < 1024 || max_body > (1ull << 31); break;
        case 'T': timeout = parse_seconds(optarg, &bad); break;
        case 'g': grace = parse_seconds(optarg, &bad); break;
        case 'x': bad |= !og_cli_parse_long(optarg, 1, INT32_MAX, &max_tokens); break;
        case 'l':
            if (strcmp(optarg, "text") && strcmp(optarg, "json")) {
                fprintf(stderr, "onegpu serve: bad value '%s' for --log-format: expected text or json\n", optarg);
                return OG_EXIT_USAGE;
            }
            log_json = !strcmp(optarg, "json");
            break;
        case 1000:
            if (!parse_on_off("prefix-cache", optarg, &prefix_cache)) return OG_EXIT_USAGE;
            prefix_cache_given = true;
            break;
        case 'R':
            if (!parse_on_off("reasoning", optarg, &reasoning)) return OG_EXIT_USAGE;
            break;
        case 'C': {
            static const struct {
                const char *name;
                og_chat_kind kind;
            } kinds[] = {{"v3", OG_CHAT_DEEPSEEK3}, {"r1", OG_CHAT_DEEPSEEK_R1}, {"v3.1", OG_CHAT_DEEPSEEK3_1},
                         {"v4", OG_CHAT_DEEPSEEK4}, {"v4.1", OG_CHAT_DEEPSEEK4_1}};
            for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++)
                if (!strcmp(optarg, kinds[k].name)) chat_kind = kinds[k].kind;
            if (chat_kind == OG_CHAT_UNKNOWN) {
                fprintf(stderr, "onegpu serve: bad value '%s' for --chat-template: expected v3, r1, v3.1, v4 or v4.1\n",
                        optarg);
                return OG_EXIT_USAGE;
            }
            break;
        }
        case 'h': usage(stdout); return OG_EXIT_OK;
        default:
            fprintf(stderr, "(onegpu serve --help lists the flags)\n");
            return OG_EXIT_USAGE;
        }
        if (bad && !was_bad) {
            const char *name = li >= 0 ? opts[li].name : "?";
            static const struct {
                char flag;
                const char *want;
            } hints[] = {{'p', "a port, 0..65535"}, {'P', "a count, 1..4096"}, {'B', "a count, 1..1048576"},
                         {'Q', "a count, 0..1000000"}, {'b', "a size, 1K..2G (e.g. 4M)"}, {'T', "seconds, >= 0"},
                         {'g', "seconds, >= 0"}, {'x', "a count, 1..2147483647"}};
            const char *want = "";
            for (size_t k = 0; k < sizeof hints / sizeof *hints; k++)
                if (hints[k].flag == c) want = hints[k].want;
            fprintf(stderr, "onegpu serve: bad value '%s' for --%s: expected %s\n", optarg, name, want);
            return OG_EXIT_USAGE;
        }
    }
    if (!model_path || optind != argc) {
        if (!model_path) fprintf(stderr, "onegpu serve: -m MODEL.gguf is required (the model to serve)\n");
        else fprintf(stderr, "onegpu serve: unexpected argument '%s'\n", argv[optind]);
        fprintf(stderr, "(onegpu serve --help lists the flags)\n");
        return OG_EXIT_USAGE;
    }
    if (batch_tokens < parallel) {
        fprintf(stderr, "onegpu serve: --batch-tokens (%u) must be at least --parallel (%u): every decoding sequence "
                        "gets a token each step\n", batch_tokens, parallel);
        return OG_EXIT_USAGE;
    }
    int frc = og_cli_flags_check("onegpu serve", &fl);
    if (frc) return frc;
    og_cli_numa numa;
    if (og_cli_numa_choose("onegpu serve", fl.numa_node, &numa)) return OG_EXIT_USAGE;
    char err[1024];
    /* the model's context bounds --ctx, and the plan comes before loading: from the header only */
    og_model_info hph;
    og_plan plan;
    uint64_t *profile;
    frc = og_cli_plan_flags("onegpu serve", model_path, &fl, parallel, batch_tokens, &hph, &plan, &profile);
    if (frc) return frc;
    const uint32_t ctx = fl.ctx, threads = fl.threads;

    /* signals go to sigwait below, never to a worker thread */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    char model_id[256];
    if (alias) snprintf(model_id, sizeof model_id, "%s", alias);
    else {
        char tmp[PATH_MAX];
        snprintf(tmp, sizeof tmp, "%s", model_path);
        snprintf(model_id, sizeof model_id, "%s", basename(tmp));
        size_t l = strlen(model_id);
        if (l > 5 && !strcmp(model_id + l - 5, ".gguf")) model_id[l - 5] = 0;
    }
    og_isa isa;
    if (og_cli_choose_isa("onegpu serve", &isa)) {
        og_plan_free(&plan);
        free(profile);
        return OG_EXIT_USAGE;
    }
    char fingerprint[64];
    snprintf(fingerprint, sizeof fingerprint, "onegpu-" OG_VERSION "-%s", og_isa_name(isa));
    og_logger lg = {.level = OG_LOG_WARN, .out = stderr};
    og_server_config scfg = {.host = host, .port = (int)port, .api_key = api_key, .max_body = (size_t)max_body,
                             .timeout_s = (unsigned)timeout, .max_connections = parallel + queue + 64,
                             .model_id = model_id, .fingerprint = fingerprint, .log = &lg, .access_log = stdout,
                             .access_json = log_json};
    og_server *srv;
    if (og_server_start(&scfg, &srv, err, sizeof err)) {
        fprintf(stderr, "onegpu serve: %s\n", err);
        og_plan_free(&plan);
        free(profile);
        return OG_EXIT_USAGE;
    }
    fprintf(stderr, "onegpu serve: listening on http://%s:%d/v1 (loading %s)\n", host, og_server_port(srv), model_path);

    sig_watch sw = {.sigs = sigs};
    pthread_mutex_init(&sw.mu, NULL);
    pthread_cond_init(&sw.cv, NULL);
    pthread_t watcher;
    bool watching = pthread_create(&watcher, NULL, watch_signals, &sw) == 0;
    int rc = OG_EXIT_OK;
    og_model *m = NULL;
    og_tokenizer *tok = NULL;
    og_pool *pool = NULL;
    og_engine *eng = NULL;
    og_placement *pl = NULL;
    if (og_model_load(model_path, &lg, &m, err, sizeof err)) {
        fprintf(stderr, "onegpu serve: %s\n", err);
        rc = OG_EXIT_BAD_INPUT;
        goto out;
    }
    if ((rc = og_cli_model_options("onegpu serve", m, &fl))) goto out;
    const og_model_info *mi = og_model_get_info(m);
    if (og_tokenizer_load(og_model_gguf(m), &tok, err, sizeof err)) {
        fprintf(stderr, "onegpu serve: %s: %s\n", model_path, err);
        rc = OG_EXIT_BAD_INPUT;
        goto out;
    }
    og_kernels kern;
    og_kernels_init(isa, &kern);
    if ((rc = og_cli_placement_create("onegpu serve", m, &fl, &plan, profile, false, &kern, &pl))) goto out;
    if ((rc = og_cli_numa_pool("onegpu serve", &numa, m, (int)threads, &pool))) goto out;
    og_engine_config ecfg = {.model = m, .tok = tok,
                             .rc = {.kern = &kern, .pool = pool, .device_numerics = OG_NUMERICS_CANONICAL,
                                    .host_numerics = fl.numerics_gpu ? OG_NUMERICS_CANONICAL : OG_NUMERICS_FORK},
                             .placement = pl, .parallel = (int)parallel, .batch_tokens = (int)batch_tokens,
                             .ctx = (int)ctx, .queue = (int)queue, .no_prefix_cache = !prefix_cache,
                             .log = &lg, .cache_ram_bytes = fl.cache_ram, .cache_dir = fl.cache_dir,
                             .cache_dir_bytes = fl.cache_dir_size};
    /* where the forward pass runs, read before the scheduler thread starts
     * updating the placement's counters */
    og_placement_stats pst;
    og_placement_get_stats(pl, &pst);
    const og_device *pdev = og_placement_device(pl);
    const char *fwd_on = pst.forward_on_device && pdev ? (strcmp(pdev->ops->name, "cuda") ? "cpu device" : "GPU") : "host pool";
    if (og_engine_create(&ecfg, &eng, err, sizeof err) || og_engine_start(eng, err, sizeof err)) {
        fprintf(stderr, "onegpu serve: %s\n", err);
        rc = OG_EXIT_USAGE;
        goto out;
    }
    og_api_model mdl = {.tok = tok, .chat = chat_kind ? chat_kind : og_chat_kind_of(og_model_gguf(m)),
                        .n_vocab = og_tokenizer_n_vocab(tok), .ctx = (int)ctx, .n_layer = mi->n_layer,
                        .capacity = (int)(parallel + queue), .parallel = (int)parallel,
                        .no_fork = !mi->kv_fork, .max_tokens = (int)max_tokens, .reasoning = reasoning};
    /* the engine shares blocks of a paged cache (og_model_info.kv_paged) or
     * keeps whole states of one with snapshots (kv_snapshot), else none:
     * asking for it on another model is told, not pretended */
    if (prefix_cache && prefix_cache_given && !mi->kv_paged && !mi->kv_snapshot)
        fprintf(stderr, "onegpu serve: --prefix-cache on: %s has no prefix cache (its per-sequence state, e.g. "
                        "sliding windows and compressor state, lies outside the paged KV blocks): serving without one\n",
                mi->arch);
    og_server_set_engine(srv, eng, &mdl);
    og_engine_metrics em;
    og_engine_metrics_get(eng, &em);
    char pool_line[PATH_MAX + 256] = "";
    if (em.kv_block_bytes) { /* the pool and the tiers with their sizes: what the flags took */
        char pb[32], rb[32], db[32], ram[64] = "", dir[PATH_MAX + 64] = "";
        if (fl.cache_ram && prefix_cache)
            snprintf(ram, sizeof ram, ", --cache-ram %s", og_fmt_bytes(fl.cache_ram, rb, sizeof rb));
        if (fl.cache_dir && prefix_cache)
            snprintf(dir, sizeof dir, ", --cache-dir %s (at most %s)", fl.cache_dir,
                     og_fmt_bytes(fl.cache_dir_size ? fl.cache_dir_size : OG_ENGINE_CACHE_DIR_BYTES, db, sizeof db));
        snprintf(pool_line, sizeof pool_line, ", KV pool %llu blocks of %d positions (%s)%s%s",
                 (unsigned long long)em.kv_blocks_total, OG_KV_BLOCK,
                 og_fmt_bytes(em.kv_blocks_total * em.kv_block_bytes, pb, sizeof pb), ram, dir);
    }
    fprintf(stderr, "onegpu serve: ready: model '%s', ctx %u x %u sequences, batch %u tokens, %s, %u threads, prefix "
                    "cache %s%s, forward pass on the %s\n",
            model_id, ctx, parallel, batch_tokens, og_isa_name(isa), og_pool_size(pool),
            prefix_cache && (mi->kv_paged || mi->kv_snapshot) ? "on" : "off", pool_line,
            fwd_on);
    fflush(stderr);
    int sig = 0;
    if (watching) {
        pthread_mutex_lock(&sw.mu);
        sw.serving = true;
        while (!sw.sig) pthread_cond_wait(&sw.cv, &sw.mu);
        sig = sw.sig;
        pthread_mutex_unlock(&sw.mu);
        pthread_join(watcher, NULL);
        watching = false;
    } else {
        sigwait(&sigs, &sig);
    }
    fprintf(stderr, "onegpu serve: %s: no new requests; finishing the running ones (up to %.0f s)\n",
            sig == SIGINT ? "SIGINT" : "SIGTERM", grace);
out:
    if (watching) { /* a load error: the watcher still waits for a signal */
        pthread_mutex_lock(&sw.mu);
        sw.serving = true; /* from here a signal only wakes it */
        pthread_mutex_unlock(&sw.mu);
        pthread_kill(watcher, SIGTERM);
        pthread_join(watcher, NULL);
    }
    pthread_mutex_destroy(&sw.mu);
    pthread_cond_destroy(&sw.cv);
    og_server_stop_admitting(srv);
    og_engine_drain(eng, grace);
    og_server_stop(srv); /* waits for every connection thread */
    og_engine_free(eng); /* the scheduler stopped: the placement is this thread's now */
    if (!rc) rc = og_cli_placement_save_profile("onegpu serve", pl, &fl, profile);
    og_placement_free(pl);
    free(profile);
    og_plan_free(&plan);
    og_pool_free(pool);
    og_tokenizer_free(tok);
    og_model_free(m);
    if (!rc) fprintf(stderr, "onegpu serve: stopped\n");
    return rc;
}
