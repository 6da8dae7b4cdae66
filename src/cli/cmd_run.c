/* `onegpu run`: one prompt through the model on the CPU, the generated text
 * streamed to stdout (nothing else), speeds to stderr. --json prints the ids and
 * log-probs instead (what the reference comparisons read). */
#include "cli.h"
#include "og_model.h"
#include "og_moe.h"
#include "og_policy.h"
#include "og_sampler.h"
#include "og_tokenizer.h"
#include "placement.h"

#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void usage(FILE *out) {
    fprintf(out,
            "usage: onegpu run -m MODEL.gguf -p TEXT [-n N] [--chat] [--temp T] [--top-k K] [--top-p P]\n"
            "                  [--seed S] [--threads T] [--json [--top-logprobs K]] [--teacher ID,ID,...]\n"
            "  Streams the generated text to stdout; prefill and decode speeds go to stderr.\n"
            "  -p is tokenized as llama.cpp's completion tool does (BOS when the file says so,\n"
            "  special-token text parsed); --chat wraps it as one user turn of the model's template.\n"
            "  -n N          tokens to generate (default 128; stops early at end of generation)\n"
            "  --temp T      0 = greedy (default 0.8), --top-k (40), --top-p (0.95), --seed (random)\n"
            "  --json        print {prompt_tokens, tokens, logprobs:[{token, logprob, top:[[id, lp]...]}]}\n"
            "  --teacher IDS feed these ids after the prompt instead of sampling (reports their log-probs)\n"
            "placement (as `onegpu plan`; the plan is checked before anything is loaded, exit 3 if it does not fit):\n"
            "  --vram SIZE [--ram SIZE] [--reserve SIZE] [--ctx N] [--expert-slots N|all] [--profile FILE]\n"
            "                plans for a device of SIZE, prints the plan, and counts how many expert selections\n"
            "                hit the resident set (this build has no GPU backend: all experts still run on the CPU)\n"
            "  --migrate N   between forward steps, copy up to N experts per layer into the device (default 2;\n"
            "                0: the hot set stays as planned); decayed-frequency policy, 8-step minimum residency\n"
            "  --save-profile FILE  writes the expert selection counts of this run (plus --profile's) for --profile\n"
            "  --save-trace FILE    writes the experts each decode step selected (for onegpu bench placement --trace)\n"
            "  --cpu-numerics fork|gpu  how host (cold) experts compute: fork (default) each CPU tier's fastest float\n"
            "                order after the exact integer block sums; gpu the canonical order that every tier and the\n"
            "                device compute bit for bit (resident experts always), so placement never changes a result\n"
            "  ONEGPU_CPU_ISA=scalar|avx2|avx512 picks the CPU tier.\n");
}

static int32_t *parse_ids(const char *s, int *n) {
    int cap = 64;
    int32_t *v = malloc((size_t)cap * sizeof *v);
    *n = 0;
    for (const char *p = s; v && *p;) {
        char *end;
        long id = strtol(p, &end, 10);
        if (end == p) {
            free(v);
            return NULL;
        }
        if (*n == cap) v = realloc(v, (size_t)(cap *= 2) * sizeof *v);
        if (v) v[(*n)++] = (int32_t)id;
        p = *end == ',' ? end + 1 : end;
    }
    return v;
}

int og_cmd_run(int argc, char **argv) {
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"prompt", required_argument, 0, 'p'}, {"n-predict", required_argument, 0, 'n'},
        {"chat", no_argument, 0, 'c'},        {"temp", required_argument, 0, 'T'},   {"top-k", required_argument, 0, 'K'},
        {"top-p", required_argument, 0, 'P'}, {"seed", required_argument, 0, 'S'},   {"threads", required_argument, 0, 't'},
        {"json", no_argument, 0, 'j'},        {"top-logprobs", required_argument, 0, 'L'},
        {"teacher", required_argument, 0, 'F'}, {"cpu-numerics", required_argument, 0, 'N'}, {"help", no_argument, 0, 'h'},
        {"vram", required_argument, 0, 'V'},    {"ram", required_argument, 0, 'R'},    {"reserve", required_argument, 0, 'r'},
        {"ctx", required_argument, 0, 'C'},     {"expert-slots", required_argument, 0, 'e'},
        {"profile", required_argument, 0, 'f'}, {"save-profile", required_argument, 0, 's'},
        {"migrate", required_argument, 0, 'M'}, {"save-trace", required_argument, 0, 'X'}, {0, 0, 0, 0}};
    const char *save_trace = NULL;
    long migrate = 2;
    bool migrate_set = false;
    og_plan_input pin = {.reserve = 512ull << 20, .ctx = 0 /* below: as serve */, .parallel = 1, .batch_tokens = 512, .kv_bytes_per_elem = 4,
                         .slots_override = -1};
    bool have_vram = false, have_ram = false, bad_value = false;
    const char *profile_path = NULL, *save_profile = NULL;
    const char *model_path = NULL, *prompt = NULL, *teacher_arg = NULL;
    int n_predict = 128, threads = 0, c, n_top = 5;
    bool chat = false, as_json = false, numerics_gpu = false;
    og_sampler_params sp = og_sampler_defaults();
    sp.temperature = 0.8f;
    sp.top_k = 40;
    sp.top_p = 0.95f;
    sp.seed = (uint64_t)time(NULL);
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:p:n:t:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model_path = optarg; break;
        case 'p': prompt = optarg; break;
        case 'n': n_predict = atoi(optarg); break;
        case 'c': chat = true; break;
        case 'T': sp.temperature = strtof(optarg, NULL); break;
        case 'K': sp.top_k = atoi(optarg); break;
        case 'P': sp.top_p = strtof(optarg, NULL); break;
        case 'S': sp.seed = strtoull(optarg, NULL, 10); break;
        case 't': threads = atoi(optarg); break;
        case 'j': as_json = true; break;
        case 'L': n_top = atoi(optarg); break;
        case 'F': teacher_arg = optarg; break;
        case 'V': bad_value |= og_parse_size(optarg, &pin.vram) != OG_OK; have_vram = true; break;
        case 'R': bad_value |= og_parse_size(optarg, &pin.ram) != OG_OK; have_ram = true; break;
        case 'r': bad_value |= og_parse_size(optarg, &pin.reserve) != OG_OK; break;
        case 'C': bad_value |= !og_cli_parse_count(optarg, &pin.ctx); break;
        case 'e': bad_value |= !og_cli_parse_slots(optarg, &pin.slots_override); break;
        case 'f': profile_path = optarg; break;
        case 'X': save_trace = optarg; break;
        case 'M':
            bad_value |= !og_cli_parse_long(optarg, 0, 1000000, &migrate);
            migrate_set = true;
            break;
        case 's': save_profile = optarg; break;
        case 'N':
            if (!og_cli_parse_numerics("onegpu run", optarg, &numerics_gpu)) return OG_EXIT_USAGE;
            break;
        case 'h': usage(stdout); return OG_EXIT_OK;
        default: usage(stderr); return OG_EXIT_USAGE;
        }
    }
    if (bad_value) {
        fprintf(stderr, "onegpu run: bad size or count in the placement flags\n");
        return OG_EXIT_USAGE;
    }
    if (!have_vram && (have_ram || profile_path || pin.slots_override != -1 || migrate_set)) {
        fprintf(stderr, "onegpu run: --ram, --profile, --expert-slots and --migrate plan for a device: give --vram SIZE too\n");
        return OG_EXIT_USAGE;
    }
    {
        char werr[512];
        const char *outs[2] = {save_profile, save_trace};
        for (int i = 0; i < 2; i++)
            if (outs[i] && og_check_writable(outs[i], werr, sizeof werr)) {
                fprintf(stderr, "onegpu run: %s %s\n", i ? "--save-trace" : "--save-profile", werr);
                return OG_EXIT_USAGE;
            }
    }
    if (!model_path || !prompt || optind != argc || n_predict < 0 || threads < 0 || n_top < 0 || n_top > 20) {
        fprintf(stderr, "onegpu run: %s\n", !model_path ? "-m MODEL.gguf is required"
                                         : !prompt   ? "-p TEXT is required"
                                         : optind != argc ? "unexpected argument"
                                         : n_predict < 0 ? "-n must be >= 0"
                                         : threads < 0   ? "--threads must be >= 1"
                                                         : "--top-logprobs must be in 0..20");
        usage(stderr);
        return OG_EXIT_USAGE;
    }
    int n_teacher = 0;
    int32_t *teacher = teacher_arg ? parse_ids(teacher_arg, &n_teacher) : NULL;
    if (teacher_arg && !teacher) {
        fprintf(stderr, "onegpu run: --teacher takes comma-separated token ids\n");
        return OG_EXIT_USAGE;
    }
    char err[1024];
    /* placement: planned from the header before anything is loaded */
    og_plan plan = {0};
    uint64_t *profile = NULL;
    if (have_vram) {
        og_gguf *hg;
        og_hparams hph;
        if (og_gguf_open(model_path, OG_GGUF_HEADER_ONLY, &hg, err, sizeof err) ||
            (og_hparams_read(hg, NULL, &hph, err, sizeof err) && (og_gguf_close(hg), 1))) {
            fprintf(stderr, "onegpu run: %s\n", err);
            free(teacher);
            return OG_EXIT_BAD_INPUT;
        }
        if (!pin.ctx) pin.ctx = og_cli_default_ctx(hph.n_ctx_train);
        int prc = og_cli_plan_prepare("onegpu run", hg, &hph, &pin, have_ram, profile_path, &plan, &profile);
        og_gguf_close(hg);
        if (prc) {
            free(teacher);
            return prc;
        }
    }
    og_logger lg = {.level = OG_LOG_WARN, .out = stderr};
    og_model *m;
    if (og_model_load(model_path, &lg, &m, err, sizeof err)) {
        fprintf(stderr, "onegpu run: %s\n", err);
        og_plan_free(&plan);
        free(profile);
        free(teacher);
        return OG_EXIT_BAD_INPUT;
    }
    og_tokenizer *tok = NULL;
    og_pool *pool = NULL;
    int rc = OG_EXIT_OK;
    og_ids ids = {0};
    char *text = NULL;
    og_cli_placement pl = {0};
    const size_t n_le = (size_t)m->hp.n_layer * m->hp.n_expert;
    if (save_trace && m->hp.n_expert > 65536) {
        fprintf(stderr, "onegpu run: --save-trace holds expert ids below 65536; this model has %u experts\n",
                m->hp.n_expert);
        rc = OG_EXIT_USAGE;
        goto out;
    }
    if ((rc = og_cli_placement_setup("onegpu run", m, &plan, profile, have_vram ? pin.vram : 0, migrate,
                                     save_profile || save_trace, &pl)))
        goto out;
    og_migrator *mig = pl.mig;
    og_expert_cache *dev = pl.dev;
    og_expert_stats *stats = &pl.stats; /* saved with the profile at the end */
    if (og_tokenizer_load(m->gguf, &tok, err, sizeof err)) {
        fprintf(stderr, "onegpu run: %s: %s\n", model_path, err);
        rc = OG_EXIT_BAD_INPUT;
        goto out;
    }
    og_isa isa;
    if ((rc = og_cli_choose_isa("onegpu run", &isa))) goto out;
    og_kernels kern;
    og_kernels_init(isa, &kern);
    if ((rc = og_cli_pool("onegpu run", threads, &pool))) goto out;
    if (chat) {
        og_str tmpl = {0};
        og_gguf_get_str(m->gguf, "tokenizer.chat_template", &tmpl);
        og_chat_kind kind = og_chat_detect(tmpl.s, (size_t)tmpl.n);
        og_chat_msg msg = {"user", prompt, NULL, 0};
        if (og_chat_format(kind, &msg, 1, true, &text, err, sizeof err)) {
            fprintf(stderr, "onegpu run: --chat: %s\n", err);
            rc = OG_EXIT_BAD_INPUT;
            goto out;
        }
    }
    og_tokenize(tok, text ? text : prompt, strlen(text ? text : prompt), og_tokenizer_add_bos(tok), true, &ids);
    if (ids.n == 0) {
        fprintf(stderr, "onegpu run: the prompt is empty\n");
        rc = OG_EXIT_USAGE;
        goto out;
    }
    if (ids.n + (size_t)(teacher ? n_teacher : n_predict) > m->hp.n_ctx_train) {
        fprintf(stderr, "onegpu run: %zu prompt + %d new tokens exceed the context of %u\n", ids.n,
                teacher ? n_teacher : n_predict, m->hp.n_ctx_train);
        rc = OG_EXIT_USAGE;
        goto out;
    }
    if (have_vram && ids.n + (size_t)(teacher ? n_teacher : n_predict) > pin.ctx) {
        fprintf(stderr, "onegpu run: %zu prompt + %d new tokens exceed the planned --ctx %u\n", ids.n,
                teacher ? n_teacher : n_predict, pin.ctx);
        rc = OG_EXIT_USAGE;
        goto out;
    }
    og_sampler *smp;
    if (teacher) sp.temperature = 0;
    if (og_sampler_create(&sp, (int32_t)m->hp.n_vocab, &smp, err, sizeof err)) {
        fprintf(stderr, "onegpu run: %s\n", err);
        rc = OG_EXIT_USAGE;
        goto out;
    }
    for (size_t i = 0; i < ids.n; i++) og_sampler_accept(smp, ids.v[i]);
    og_run_ctx rcx = {.kern = &kern, .pool = pool, .stats = stats->counts ? stats : NULL,
                      .experts = dev ? &dev->map : NULL, .device_numerics = OG_NUMERICS_CANONICAL,
                      .host_numerics = numerics_gpu ? OG_NUMERICS_CANONICAL : OG_NUMERICS_FORK};
    og_kv kv = {0};
    float *logits = malloc(m->hp.n_vocab * sizeof *logits);
    json_t *jt = json_array(), *jl = json_array();
    double t0 = now_s();
    og_status st = og_model_forward(m, &rcx, &kv, ids.v, (int)ids.n, logits, false, err, sizeof err);
    if (!st && mig) st = og_migrator_step(mig, dev, m, stats->counts, err, sizeof err); /* between steps */
    /* --save-trace: the decode steps' selections, from the counts each step adds */
    const uint32_t n_moe = m->hp.n_layer - m->hp.n_dense, kx = m->hp.n_expert_used;
    uint64_t *snap = save_trace && stats->counts ? malloc(n_le * sizeof *snap) : NULL;
    uint16_t *tsel = NULL;
    uint32_t t_steps = 0;
    if (snap) {
        memcpy(snap, stats->counts, n_le * sizeof *snap);
        tsel = malloc(((size_t)(teacher ? n_teacher : n_predict) + 1) * n_moe * kx * sizeof *tsel);
    }    double t_prefill = now_s() - t0, t_decode = 0;
    int steps = teacher ? n_teacher : n_predict, done = 0;
    og_detok dt = {0};
    char outbuf[4096];
    for (int i = 0; i < steps && !st; i++) {
        og_token_logprob top[20];
        float lp;
        int32_t pick = og_sampler_sample(smp, logits, &lp, top, n_top > 0 ? n_top : 1);
        int32_t next = teacher ? teacher[i] : pick;
        if (teacher) { /* log-prob of the fed token under the same distribution */
            if (next < 0 || (uint32_t)next >= m->hp.n_vocab) {
                fprintf(stderr, "onegpu run: --teacher id %d is outside the vocabulary\n", next);
                rc = OG_EXIT_USAGE;
                break;
            }
            float mx = -INFINITY;
            for (uint32_t v = 0; v < m->hp.n_vocab; v++) mx = logits[v] > mx ? logits[v] : mx;
            double sum = 0;
            for (uint32_t v = 0; v < m->hp.n_vocab; v++) sum += exp((double)logits[v] - mx);
            lp = (float)((double)logits[next] - mx - log(sum));
        }
        json_array_append_new(jt, json_integer(next));
        json_t *e = json_pack("{s:i, s:f, s:i}", "token", next, "logprob", (double)lp, "argmax", top[0].id);
        json_t *ta = json_array();
        for (int k = 0; k < n_top; k++) json_array_append_new(ta, json_pack("[i, f]", top[k].id, (double)top[k].logprob));
        json_object_set_new(e, "top", ta);
        json_array_append_new(jl, e);
        done++;
        if (!as_json) {
            size_t len = 0;
            outbuf[0] = '\0';
            if (og_detok_push(tok, &dt, next, outbuf, sizeof outbuf, &len) > 0) {
                fwrite(outbuf, 1, len, stdout);
                fflush(stdout);
            }
        }
        if (!teacher && og_tokenizer_is_eog(tok, next)) break;
        if (i + 1 < steps) {
            double t1 = now_s();
            st = og_model_forward(m, &rcx, &kv, &next, 1, logits, false, err, sizeof err);
            if (!st && mig) st = og_migrator_step(mig, dev, m, stats->counts, err, sizeof err);
            if (!st && snap && tsel) {
                uint16_t *o = tsel + (size_t)t_steps * n_moe * kx;
                for (uint32_t l = m->hp.n_dense, j = 0; l < m->hp.n_layer; l++, j++)
                    for (uint32_t x = 0, w = 0; x < m->hp.n_expert && w < kx; x++) {
                        const size_t at = (size_t)l * m->hp.n_expert + x;
                        if (stats->counts[at] != snap[at]) o[(size_t)j * kx + w++] = (uint16_t)x;
                        snap[at] = stats->counts[at];
                    }
                t_steps++;
            }
            t_decode += now_s() - t1;
        }
    }
    if (st) {
        fprintf(stderr, "onegpu run: %s\n", err);
        rc = OG_EXIT_BAD_INPUT;
    } else if (as_json) {
        json_t *pt = json_array();
        for (size_t i = 0; i < ids.n; i++) json_array_append_new(pt, json_integer(ids.v[i]));
        json_t *o = json_pack("{s:o, s:O, s:O}", "prompt_tokens", pt, "tokens", jt, "logprobs", jl);
        if (have_vram && dev && stats->layer_routes && stats->layer_hits) { /* what the server will export */
            json_t *per = json_array();
            for (uint32_t l = m->hp.n_dense; l < m->hp.n_layer; l++)
                json_array_append_new(per, json_real(stats->layer_routes[l]
                                                         ? (double)stats->layer_hits[l] / (double)stats->layer_routes[l]
                                                         : 0.0));
            json_object_set_new(o, "placement",
                                json_pack("{s:I, s:I, s:f, s:o, s:I, s:I, s:I}", "selections", (json_int_t)stats->routes,
                                          "hits", (json_int_t)stats->routes_resident, "hit_rate",
                                          stats->routes ? (double)stats->routes_resident / (double)stats->routes : 0.0,
                                          "hit_rate_per_moe_layer", per, "migrations", (json_int_t)dev->migrations,
                                          "pcie_bytes", (json_int_t)dev->dev->pcie_bytes, "resident_experts",
                                          (json_int_t)dev->n_resident));
        }
        char *s = json_dumps(o, JSON_COMPACT);
        puts(s);
        free(s);
        json_decref(o);
    } else {
        size_t len = 0;
        if (og_detok_flush(&dt, outbuf, sizeof outbuf, &len) > 0) fwrite(outbuf, 1, len, stdout);
        putchar('\n');
        fflush(stdout);
    }
    if (!st)
        fprintf(stderr, "onegpu run: prefill %zu tokens %.1f tok/s, decode %d tokens %.1f tok/s (%s, %d threads)\n", ids.n,
                (double)ids.n / t_prefill, done - 1 > 0 ? done - 1 : 0, done > 1 ? (done - 1) / t_decode : 0.0,
                og_isa_name(isa), og_pool_size(pool));
    if (!st && have_vram && stats->routes) {
        char pb[32];
        fprintf(stderr, "onegpu run: %.1f%% of %llu expert selections hit the %llu resident experts (plan: %.1f%%)\n",
                100.0 * (double)stats->routes_resident / (double)stats->routes, (unsigned long long)stats->routes,
                (unsigned long long)plan.resident_experts, 100.0 * plan.predicted_device_share);
        if (dev)
            fprintf(stderr, "onegpu run: %llu migrations, %s copied host->device in all\n",
                    (unsigned long long)dev->migrations, og_fmt_bytes(dev->dev->pcie_bytes, pb, sizeof pb));
    }
    if (!st && save_trace) {
        og_trace tr = {n_moe, m->hp.n_expert, kx, t_steps, 1, tsel};
        if (!tsel || !t_steps || !n_moe) {
            fprintf(stderr, "onegpu run: --save-trace: no decode steps through MoE layers to record\n");
            rc = OG_EXIT_USAGE;
        } else if (og_trace_write(save_trace, &tr, err, sizeof err)) {
            fprintf(stderr, "onegpu run: --save-trace: %s\n", err);
            rc = OG_EXIT_USAGE;
        }
    }
    free(snap);
    free(tsel);
    if (!st && save_profile && !rc) rc = og_cli_placement_save_profile("onegpu run", m, &pl, profile, save_profile);
    json_decref(jt);
    json_decref(jl);
    free(logits);
    og_kv_free(&kv);
    og_sampler_free(smp);
out:
    og_cli_placement_free(&pl);
    free(profile);
    og_plan_free(&plan);
    free(text);
    og_ids_free(&ids);
    free(teacher);
    og_pool_free(pool);
    og_tokenizer_free(tok);
    og_model_free(m);
    return rc;
}
