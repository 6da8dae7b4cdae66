/* `onegpu bench grammar`: what constrained decoding (og_grammar.h) costs next
 * to the decode step it constrains. N users generate JSON under a schema
 * through the real engine (continuous batching); the engine's own counters
 * give the seconds in forward steps and in masks (computed after each step,
 * outside the engine lock). Every finished sequence is replaced by a new one,
 * whose matcher starts cold, as a new request's does. */
#include "cli.h"
#include "og_engine.h"
#include "og_outparse.h"
#include "placement.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

/* A typical API schema: bounded strings, numbers, an enum array, a nested object. */
static const char k_default_schema[] =
    "{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\",\"maxLength\":24},\"age\":{\"type\":\"integer\"},"
    "\"email\":{\"type\":\"string\",\"maxLength\":32},\"active\":{\"type\":\"boolean\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"admin\",\"user\",\"guest\"]},\"maxItems\":4},"
    "\"address\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":16},"
    "\"zip\":{\"type\":\"string\",\"maxLength\":8}},\"required\":[\"city\",\"zip\"],\"additionalProperties\":false}},"
    "\"required\":[\"name\",\"age\",\"email\",\"active\",\"tags\",\"address\"],\"additionalProperties\":false}";

static void usage(FILE *out) {
    fprintf(out, "usage: onegpu bench grammar -m FILE [--users LIST] [--tokens N]\n"
                 "                            [--schema FILE | --json-object | --tools FILE|default] [--threads N] [--json]\n"
                 "                            [--kv-type f16|f32]\n"
                 "  N users (default 1,8: one run each) generate JSON under the schema (default: a mixed\n"
                 "  object schema) until N x --tokens (default 256) tokens are generated; prints the\n"
                 "  seconds per decode step in the forward pass and in the grammar masks, and their ratio.\n"
                 "  --tools: forced tool calls instead (tool_choice \"required\"), in the model's chat encoding:\n"
                 "  FILE holds an OpenAI tools array; default: two tools, one taking the default schema\n"
                 "  --kv-type f16|f32: the KV cache's element type, as run and serve (default f16)\n");
}

typedef struct bench_out {
    double forward_s, mask_s;
    uint64_t steps, masks, tokens, seqs;
} bench_out;

static int run_users(og_model *m, og_tokenizer *tok, og_kernels *kern, og_pool *pool, og_placement *pl, og_grammar *g,
                     int users, int tokens, bench_out *out) {
    char err[512];
    og_engine_config c = {.model = m, .tok = tok, .rc = {.kern = kern, .pool = pool}, .placement = pl, .parallel = users,
                          .batch_tokens = users > 64 ? users : 64, .ctx = 1024, .queue = users};
    og_engine *e;
    if (og_engine_create(&c, &e, err, sizeof err) || og_engine_start(e, err, sizeof err)) {
        fprintf(stderr, "onegpu bench grammar: %s\n", err);
        return OG_EXIT_USAGE;
    }
    const char *prompt = "Describe a user as JSON.";
    og_ids ids = {0};
    og_tokenize(tok, prompt, strlen(prompt), og_tokenizer_add_bos(tok), true, &ids);
    og_seq_params p = {.sampling = og_sampler_defaults(), .max_tokens = 512, .grammar = g};
    og_seq **seqs = calloc((size_t)users, sizeof *seqs);
    uint64_t generated = 0 /* by finished sequences */, target = (uint64_t)users * (uint64_t)tokens, submitted = 0;
    int rc = OG_EXIT_OK;
    while (seqs && rc == OG_EXIT_OK) {
        bool live = false;
        for (int i = 0; i < users; i++) {
            if (!seqs[i] && generated < target) {
                p.sampling.seed = ++submitted;
                if (og_engine_submit(e, ids.v, (int)ids.n, &p, &seqs[i], err, sizeof err)) {
                    fprintf(stderr, "onegpu bench grammar: %s\n", err);
                    rc = OG_EXIT_USAGE;
                    break;
                }
            }
            if (!seqs[i]) continue;
            og_seq_out o;
            if (og_seq_take(e, seqs[i], &o)) {
                rc = OG_EXIT_USAGE;
                break;
            }
            if (o.finish != OG_FINISH_NONE) {
                generated += (uint64_t)o.n_gen;
                if (o.finish == OG_FINISH_ERROR) {
                    fprintf(stderr, "onegpu bench grammar: %s\n", o.error);
                    rc = OG_EXIT_USAGE;
                }
                og_seq_release(e, seqs[i]);
                seqs[i] = NULL;
            }
            og_seq_out_free(&o);
            live |= seqs[i] != NULL;
        }
        if (!live && generated >= target) break;
        og_engine_wait(e, 0.05);
    }
    og_engine_metrics met;
    og_engine_metrics_get(e, &met);
    *out = (bench_out){met.forward_s, met.mask_s, met.steps, met.masks, met.gen_tokens, submitted};
    for (int i = 0; seqs && i < users; i++) og_seq_release(e, seqs[i]);
    og_engine_drain(e, 0);
    og_engine_free(e);
    og_ids_free(&ids);
    free(seqs);
    return seqs ? rc : OG_EXIT_USAGE;
}

/* --tools: the grammar of tool_choice "required" over the tools array in path
 * ("default": two tools, one taking k_default_schema), in the model's encoding. */
static int tool_grammar(const og_model *m, const og_tokenizer *tok, const char *path, og_grammar **out) {
    json_error_t je;
    json_t *tools = strcmp(path, "default") ? json_load_file(path, 0, &je) : NULL;
    if (!tools && strcmp(path, "default")) {
        fprintf(stderr, "onegpu bench grammar: %s: %s\n", path, je.text);
        return OG_EXIT_BAD_INPUT;
    }
    if (!tools) {
        json_t *user = json_loads(k_default_schema, 0, &je);
        tools = json_pack("[{s:s,s:{s:s,s:o}},{s:s,s:{s:s,s:{s:s,s:{s:{s:[s,s,s]}},s:[s],s:b}}}]", "type", "function",
                          "function", "name", "create_user", "parameters", user, "type", "function", "function", "name",
                          "get_time", "parameters", "type", "object", "properties", "tz", "enum", "UTC", "CET", "JST",
                          "required", "tz", "additionalProperties", 0);
    }
    size_t n = json_array_size(tools);
    const char **names = calloc(n ? n : 1, sizeof *names);
    const json_t **params = calloc(n ? n : 1, sizeof *params);
    for (size_t i = 0; names && params && i < n; i++) {
        json_t *fn = json_object_get(json_array_get(tools, i), "function");
        names[i] = json_string_value(json_object_get(fn, "name"));
        params[i] = json_object_get(fn, "parameters");
    }
    og_tool_layout lay;
    char err[512] = "this model's chat template has no tool-call layout";
    og_status st = names && params ? og_outparse_call_layout(tok, og_chat_kind_of(og_model_gguf(m)), false, &lay)
                                   : OG_ERR_NOMEM;
    if (!st) st = og_grammar_tool_calls(&lay, names, params, (int)n, 0, out, err, sizeof err);
    free(names);
    free(params);
    json_decref(tools);
    if (st) {
        fprintf(stderr, "onegpu bench grammar: --tools %s: %s\n", path, err);
        return OG_EXIT_BAD_INPUT;
    }
    return OG_EXIT_OK;
}

int og_cmd_bench_grammar(int argc, char **argv) {
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},  {"users", required_argument, 0, 'u'},
                                         {"tokens", required_argument, 0, 'n'}, {"schema", required_argument, 0, 's'},
                                         {"json-object", no_argument, 0, 'o'},  {"threads", required_argument, 0, 't'},
                                         {"json", no_argument, 0, 'j'},         {"help", no_argument, 0, 'h'},
                                         {"tools", required_argument, 0, 'T'},  {"kv-type", required_argument, 0, 'K'},
                                         {0, 0, 0, 0}};
    const char *model_path = NULL, *schema_path = NULL, *users_arg = "1,8", *tools_path = NULL;
    long tokens = 256, threads = 0;
    bool json_object = false, as_json = false;
    og_cli_flags fl; /* --kv-type, and the placement's flags: all experts on the host */
    og_cli_flags_init(&fl);
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "m:u:n:s:ot:jh", opts, NULL)) != -1) {
        switch (ch) {
        case 'm': model_path = optarg; break;
        case 'u': users_arg = optarg; break;
        case 'n':
            if (!og_cli_parse_long(optarg, 1, 1 << 20, &tokens)) return usage(stderr), OG_EXIT_USAGE;
            break;
        case 's': schema_path = optarg; break;
        case 'o': json_object = true; break;
        case 't':
            if (!og_cli_parse_long(optarg, 1, 1024, &threads)) return usage(stderr), OG_EXIT_USAGE;
            break;
        case 'j': as_json = true; break;
        case 'T': tools_path = optarg; break;
        case 'K':
            if (og_cli_flag("onegpu bench grammar", OG_OPT_KV_TYPE, optarg, &fl) != 1) return OG_EXIT_USAGE;
            break;
        case 'h': usage(stdout); return OG_EXIT_OK;
        default: usage(stderr); return OG_EXIT_USAGE;
        }
    }
    int users[16], n_users = 0;
    char *copy = strdup(users_arg), *save = NULL;
    for (char *t = strtok_r(copy, ",", &save); t && n_users < 16; t = strtok_r(NULL, ",", &save)) {
        long u;
        if (!og_cli_parse_long(t, 1, 256, &u)) {
            free(copy);
            fprintf(stderr, "onegpu bench grammar: --users takes counts in 1..256, comma-separated\n");
            return OG_EXIT_USAGE;
        }
        users[n_users++] = (int)u;
    }
    free(copy);
    if (!model_path || !n_users) return usage(stderr), OG_EXIT_USAGE;
    char err[1024];
    og_grammar *g = NULL;
    json_error_t je;
    json_t *schema = json_object || tools_path ? NULL
                     : schema_path ? json_load_file(schema_path, 0, &je)
                                   : json_loads(k_default_schema, 0, &je);
    if (!json_object && !tools_path && !schema) {
        fprintf(stderr, "onegpu bench grammar: %s: %s\n", schema_path ? schema_path : "schema", je.text);
        return OG_EXIT_BAD_INPUT;
    }
    og_status st = tools_path ? OG_OK
                   : json_object ? og_grammar_json_object(&g, err, sizeof err)
                                 : og_grammar_from_schema(schema, &g, err, sizeof err);
    json_decref(schema);
    if (st) {
        fprintf(stderr, "onegpu bench grammar: the schema: %s\n", err);
        return OG_EXIT_BAD_INPUT;
    }
    og_model *m = NULL;
    og_tokenizer *tok = NULL;
    og_pool *pool = NULL;
    og_placement *pl = NULL;
    int rc = OG_EXIT_OK;
    if (og_model_load(model_path, NULL, &m, err, sizeof err) || og_tokenizer_load(og_model_gguf(m), &tok, err, sizeof err)) {
        fprintf(stderr, "onegpu bench grammar: %s: %s\n", model_path, err);
        rc = OG_EXIT_BAD_INPUT;
        goto out;
    }
    if ((rc = og_cli_model_options("onegpu bench grammar", m, &fl))) goto out;
    if (tools_path && (rc = tool_grammar(m, tok, tools_path, &g))) goto out;
    og_isa isa;
    if ((rc = og_cli_choose_isa("onegpu bench grammar", &isa))) goto out;
    og_kernels kern;
    og_kernels_init(isa, &kern);
    if ((rc = og_cli_pool("onegpu bench grammar", (int)threads, &pool))) goto out;
    og_plan plan = {0}; /* the placement owns the forward pass's dispatcher */
    if ((rc = og_cli_placement_create("onegpu bench grammar", m, &fl, &plan, NULL, false, &kern, &pl))) goto out;
    json_t *arr = json_array();
    for (int i = 0; i < n_users && !rc; i++) {
        bench_out b;
        if ((rc = run_users(m, tok, &kern, pool, pl, g, users[i], (int)tokens, &b))) break;
        double step_ms = b.steps ? 1e3 * b.forward_s / (double)b.steps : 0;
        double mask_ms = b.steps ? 1e3 * b.mask_s / (double)b.steps : 0;
        double ratio = b.forward_s > 0 ? b.mask_s / b.forward_s : 0;
        if (as_json) {
            json_array_append_new(arr, json_pack("{s:i,s:I,s:I,s:I,s:I,s:f,s:f,s:f}", "users", users[i], "steps",
                                                 (json_int_t)b.steps, "tokens", (json_int_t)b.tokens, "sequences",
                                                 (json_int_t)b.seqs, "masks", (json_int_t)b.masks, "forward_ms_per_step",
                                                 step_ms, "mask_ms_per_step", mask_ms, "mask_over_step", ratio));
        } else {
            printf("users %3d: %5llu steps, %6llu tokens, %4llu sequences, %6llu masks: forward %.2f ms/step, "
                   "masks %.3f ms/step (%.3f ms/mask): mask/step = %.1f%%\n",
                   users[i], (unsigned long long)b.steps, (unsigned long long)b.tokens, (unsigned long long)b.seqs,
                   (unsigned long long)b.masks, step_ms, mask_ms,
                   b.masks ? 1e3 * b.mask_s / (double)b.masks : 0.0, 100 * ratio);
            fflush(stdout);
        }
    }
    if (as_json && !rc) {
        char *s = json_dumps(arr, JSON_INDENT(2));
        if (s) puts(s);
        free(s);
    }
    json_decref(arr);
out:
    og_placement_free(pl);
    og_pool_free(pool);
    og_tokenizer_free(tok);
    og_model_free(m);
    og_grammar_unref(g);
    return rc;
}
