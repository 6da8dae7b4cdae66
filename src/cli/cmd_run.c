/* `onegpu run`: one prompt through the engine (the server's scheduler, sampler
 * and placement, one sequence), the generated text streamed to stdout (nothing
 * else), speeds to stderr. --json prints the ids and log-probs instead (what
 * the reference comparisons read). */
#include "cli.h"
#include "og_engine.h"
#include "og_model.h"
#include "og_moe.h"
#include "og_policy.h"
#include "og_sampler.h"
#include "og_tokenizer.h"
#include "placement.h"

#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void usage(FILE *out) {
    fprintf(out,
            "usage: onegpu run -m MODEL.gguf -p TEXT [-n N] [--chat] [--temp T] [--top-k K] [--top-p P]\n"
            "                  [--seed S] [--threads T] [--numa-node N] [--json [--top-logprobs K]] [--teacher ID,ID,...]\n"
            "  Streams the generated text to stdout; prefill and decode speeds go to stderr.\n"
            "  -p is tokenized as llama.cpp's completion tool does (BOS when the file says so,\n"
            "  special-token text parsed); --chat wraps it as one user turn of the model's template.\n"
            "  -n N          tokens to generate (default 128; stops early at end of generation)\n"
            "  --temp T      0 = greedy (default 0.8), --top-k (40), --top-p (0.95), --seed (random)\n"
            "  --json        print {prompt_tokens, tokens, logprobs:[{token, logprob, top:[[id, lp]...]}]}\n"
            "  --teacher IDS feed these ids after the prompt instead of sampling (reports their log-probs)\n"
            "  --numa-node N threads pinned to node N's CPUs, routed experts' memory preferred there (as serve)\n"
            "  --threads T   CPU threads, 1..4096 (default: the CPUs this process may use)\n"
            "placement (as `onegpu plan`; the plan is checked before anything is loaded, exit 3 if it does not fit):\n"
            "  --vram SIZE [--ram SIZE] [--reserve SIZE] [--ctx N] [--expert-slots N|all] [--profile FILE]\n"
            "                plans for a device of SIZE, prints the plan, and counts how many expert selections\n"
            "                hit the resident set (on a GPU: its free memory when not given; without one the cpu\n"
            "                device plays it, running the resident experts on its own threads while the host pool\n"
            "                runs the cold ones)\n"
            "  --device cuda|cpu|auto  who computes the resident experts (default auto: the GPU when this build has\n"
            "                CUDA and one answers, else the CPU); one line on stderr says which\n"
            "  --device-threads N  the cpu device's threads (default: as --threads)\n"
            "  --device-forward  the forward pass's own ops (attention, router, norms, head) on the device's stream\n"
            "                too, the non-expert weights and KV cache in its memory (default: the GPU's for a\n"
            "                deepseek2 model on the cuda device, else on the host pool); --no-device-forward: never\n"
            "  --migrate N   between forward steps, copy up to N experts per layer into the device (default 2;\n"
            "                0: the hot set stays as planned); decayed-frequency policy, 8-step minimum residency\n"
            "  --save-profile FILE  writes the expert selection counts of this run (plus --profile's) for --profile\n"
            "  --save-trace FILE    writes the experts each decode step selected (for onegpu bench placement --trace)\n"
            OG_CLI_CACHE_HELP
            "  --cpu-numerics gpu|fork  how the host computes every product: gpu (default) the canonical order that\n"
            "                every tier and the device compute bit for bit (resident experts always), so neither the CPU\n"
            "                tier nor placement changes a result; fork each CPU tier's fastest float order after the\n"
            "                exact integer block sums (faster, results differ between tiers and placements)\n"
            OG_CLI_MODEL_OPTIONS_HELP
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

/* What the engine's on_step hook gathers: speeds, and --save-trace's experts
 * of each decode step (from the counts the step added). */
typedef struct run_steps {
    og_placement *pl;
    uint32_t n_layer, n_dense, n_expert, k;
    uint64_t *snap;       /* [n_layer * n_expert] counts after the previous step, or NULL: no trace */
    uint16_t *tsel;       /* [cap][n_moe][k] */
    uint32_t t_steps, cap;
    double t_prefill, t_decode;
} run_steps;

static void on_step(void *arg, const og_engine_step *st) {
    run_steps *r = arg;
    if (st->n_prompt) r->t_prefill += st->seconds;
    else r->t_decode += st->seconds;
    const uint64_t *counts = og_placement_counts(r->pl);
    if (!r->snap || !counts) return;
    const size_t n_le = (size_t)r->n_layer * r->n_expert;
    if (!st->n_prompt && r->t_steps < r->cap) {
        const uint32_t n_moe = r->n_layer - r->n_dense;
        uint16_t *o = r->tsel + (size_t)r->t_steps * n_moe * r->k;
        for (uint32_t l = r->n_dense, j = 0; l < r->n_layer; l++, j++)
            for (uint32_t x = 0, w = 0; x < r->n_expert && w < r->k; x++) {
                const size_t at = (size_t)l * r->n_expert + x;
                if (counts[at] != r->snap[at]) o[(size_t)j * r->k + w++] = (uint16_t)x;
            }
        r->t_steps++;
    }
    memcpy(r->snap, counts, n_le * sizeof *r->snap);
}

int og_cmd_run(int argc, char **argv) {
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"prompt", required_argument, 0, 'p'}, {"n-predict", required_argument, 0, 'n'},
        {"chat", no_argument, 0, 'c'},        {"temp", required_argument, 0, 'T'},   {"top-k", required_argument, 0, 'K'},
        {"top-p", required_argument, 0, 'P'}, {"seed", required_argument, 0, 'S'},   {"json", no_argument, 0, 'j'},
        {"top-logprobs", required_argument, 0, 'L'}, {"teacher", required_argument, 0, 'F'},
        {"help", no_argument, 0, 'h'},        {"save-trace", required_argument, 0, 'X'}, OG_CLI_FLAG_OPTIONS,
        {0, 0, 0, 0}};
    const char *save_trace = NULL;
    og_cli_flags fl;
    og_cli_flags_init(&fl);
    const char *model_path = NULL, *prompt = NULL, *teacher_arg = NULL;
    int n_predict = 128, c, n_top = 5;
    bool chat = false, as_json = false;
    og_sampler_params sp = og_sampler_defaults();
    sp.temperature = 0.8f;
    sp.top_k = 40;
    sp.top_p = 0.95f;
    sp.seed = (uint64_t)time(NULL);
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:p:n:t:h", opts, NULL)) != -1) {
        int shared = og_cli_flag("onegpu run", c == 't' ? OG_OPT_THREADS : c, optarg, &fl);
        if (shared < 0) return OG_EXIT_USAGE;
        if (shared) continue;
        /* numbers are parsed strictly: atoi read "99999999999" as 1215752191
         * (and overflowing it is undefined), "abc" as 0 */
        long v = 0;
        float f = 0;
        uint64_t u = 0;
        const char *bad = NULL;
        switch (c) {
        case 'm': model_path = optarg; break;
        case 'p': prompt = optarg; break;
        case 'n':
            if (og_cli_parse_long(optarg, 0, INT32_MAX, &v)) n_predict = (int)v;
            else bad = "-n takes a token count in 0..2147483647";
            break;
        case 'c': chat = true; break;
        case 'T':
            if (og_cli_parse_f32(optarg, &f) && isfinite(f) && f >= 0) sp.temperature = f;
            else bad = "--temp takes a number >= 0";
            break;
        case 'K':
            if (og_cli_parse_long(optarg, 0, INT32_MAX, &v)) sp.top_k = (int)v;
            else bad = "--top-k takes a count in 0..2147483647";
            break;
        case 'P':
            if (og_cli_parse_f32(optarg, &f) && f >= 0 && f <= 1) sp.top_p = f;
            else bad = "--top-p takes a number in 0..1";
            break;
        case 'S':
            if (og_cli_parse_u64(optarg, &u)) sp.seed = u;
            else bad = "--seed takes an integer in 0..2^64 - 1";
            break;
        case 'j': as_json = true; break;
        case 'L':
            if (og_cli_parse_long(optarg, 0, 20, &v)) n_top = (int)v;
            else bad = "--top-logprobs must be in 0..20";
            break;
        case 'F': teacher_arg = optarg; break;
        case 'X': save_trace = optarg; break;
        case 'h': usage(stdout); return OG_EXIT_OK;
        default: usage(stderr); return OG_EXIT_USAGE;
        }
        if (bad) {
            fprintf(stderr, "onegpu run: %s, not '%s'\n", bad, optarg);
            return OG_EXIT_USAGE;
        }
    }
    int rc = og_cli_flags_check("onegpu run", &fl);
    if (rc) return rc;
    if (save_trace) {
        char werr[512];
        if (og_check_writable(save_trace, werr, sizeof werr)) {
            fprintf(stderr, "onegpu run: --save-trace %s\n", werr);
            return OG_EXIT_USAGE;
        }
    }
    if (!model_path || !prompt || optind != argc || n_predict < 0 || n_top < 0 || n_top > 20) {
        fprintf(stderr, "onegpu run: %s\n", !model_path ? "-m MODEL.gguf is required"
                                         : !prompt   ? "-p TEXT is required"
                                         : optind != argc ? "unexpected argument"
                                         : n_predict < 0 ? "-n must be >= 0"
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
    og_cli_numa numa;
    if (og_cli_numa_choose("onegpu run", fl.numa_node, &numa)) {
        free(teacher);
        return OG_EXIT_USAGE;
    }
    char err[1024];
    /* placement: planned from the header before anything is loaded */
    const bool ctx_given = fl.ctx != 0;
    og_model_info hph;
    og_plan plan;
    uint64_t *profile;
    if ((rc = og_cli_plan_flags("onegpu run", model_path, &fl, 1, 512, &hph, &plan, &profile))) {
        free(teacher);
        return rc;
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
    const og_model_info *mi = og_model_get_info(m);
    og_tokenizer *tok = NULL;
    og_pool *pool = NULL;
    og_engine *eng = NULL;
    og_seq *seq = NULL;
    og_ids ids = {0};
    char *text = NULL;
    og_placement *pl = NULL;
    json_t *jt = json_array(), *jl = json_array();
    const int steps = teacher ? n_teacher : n_predict;
    run_steps rs = {.n_layer = mi->n_layer, .n_dense = mi->n_dense, .n_expert = mi->n_expert,
                    .k = mi->n_expert_used};
    if (save_trace && mi->n_expert > 65536) {
        fprintf(stderr, "onegpu run: --save-trace holds expert ids below 65536; this model has %u experts\n",
                mi->n_expert);
        rc = OG_EXIT_USAGE;
        goto out;
    }
    if ((rc = og_cli_model_options("onegpu run", m, &fl))) goto out;
    og_isa isa;
    if ((rc = og_cli_choose_isa("onegpu run", &isa))) goto out;
    og_kernels kern;
    og_kernels_init(isa, &kern);
    if ((rc = og_cli_placement_create("onegpu run", m, &fl, &plan, profile, save_trace != NULL, &kern, &pl))) goto out;
    if (og_tokenizer_load(og_model_gguf(m), &tok, err, sizeof err)) {
        fprintf(stderr, "onegpu run: %s: %s\n", model_path, err);
        rc = OG_EXIT_BAD_INPUT;
        goto out;
    }
    if ((rc = og_cli_numa_pool("onegpu run", &numa, m, (int)fl.threads, &pool))) goto out;
    if (chat) {
        og_chat_kind kind = og_chat_kind_of(og_model_gguf(m));
        og_chat_msg msg = {.role = "user", .content = prompt};
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
    if (ids.n + (size_t)steps > mi->n_ctx_train) {
        fprintf(stderr, "onegpu run: %zu prompt + %d new tokens exceed the context of %u\n", ids.n, steps,
                mi->n_ctx_train);
        rc = OG_EXIT_USAGE;
        goto out;
    }
    if ((fl.have_vram || ctx_given) && ids.n + (size_t)steps > fl.ctx) {
        fprintf(stderr, "onegpu run: %zu prompt + %d new tokens exceed the planned --ctx %u\n", ids.n, steps, fl.ctx);
        rc = OG_EXIT_USAGE;
        goto out;
    }
    for (int i = 0; i < n_teacher; i++)
        if (teacher[i] < 0 || (uint32_t)teacher[i] >= mi->n_vocab) {
            fprintf(stderr, "onegpu run: --teacher id %d is outside the vocabulary\n", teacher[i]);
            rc = OG_EXIT_USAGE;
            goto out;
        }
    if (save_trace && og_placement_counts(pl)) {
        rs.cap = (uint32_t)steps + 1;
        rs.snap = calloc((size_t)mi->n_layer * mi->n_expert + 1, sizeof *rs.snap);
        rs.tsel = malloc(((size_t)rs.cap * (mi->n_layer - mi->n_dense) * rs.k + 1) * sizeof *rs.tsel);
        if (!rs.snap || !rs.tsel) {
            fprintf(stderr, "onegpu run: out of memory\n");
            rc = OG_EXIT_USAGE;
            goto out;
        }
    }
    rs.pl = pl;
    /* one sequence through the engine: the prompt in one step, then one token a step;
     * its KV pool holds what it runs (the planned --ctx when there is a plan) */
    const size_t run_need = ids.n + (steps > 0 ? (size_t)steps : 1);
    const int run_ctx = fl.have_vram || ctx_given ? (int)fl.ctx
                        : run_need < mi->n_ctx_train ? (int)run_need : (int)mi->n_ctx_train;
    og_engine_config ecfg = {.model = m, .tok = tok,
                             .rc = {.kern = &kern, .pool = pool, .device_numerics = OG_NUMERICS_CANONICAL,
                                    .host_numerics = fl.numerics_gpu ? OG_NUMERICS_CANONICAL : OG_NUMERICS_FORK},
                             .placement = pl, .on_step = on_step, .on_step_arg = &rs, .parallel = 1,
                             .batch_tokens = (int)ids.n, .ctx = run_ctx, .queue = 0, .log = &lg,
                             .cache_ram_bytes = fl.cache_ram, .cache_dir = fl.cache_dir,
                             .cache_dir_bytes = fl.cache_dir_size};
    if (teacher) sp.temperature = 0;
    og_seq_params qp = {.sampling = sp, .max_tokens = steps, .n_top = n_top > 0 ? n_top : 1 /* the argmax */,
                        .logprobs = true, .forced = teacher, .n_forced = n_teacher, .report_eog = true};
    if (og_engine_create(&ecfg, &eng, err, sizeof err) || og_engine_start(eng, err, sizeof err) ||
        og_engine_submit(eng, ids.v, (int)ids.n, &qp, &seq, err, sizeof err)) {
        fprintf(stderr, "onegpu run: %s\n", err);
        rc = OG_EXIT_USAGE;
        goto out;
    }
    int done = 0, n_cached = 0;
    og_seq_out o;
    for (og_finish fin = OG_FINISH_NONE; fin == OG_FINISH_NONE;) {
        if (og_seq_take(eng, seq, &o)) {
            fprintf(stderr, "onegpu run: out of memory\n");
            rc = OG_EXIT_USAGE;
            break;
        }
        if (!as_json && o.len) {
            fwrite(o.text, 1, o.len, stdout);
            fflush(stdout);
        }
        for (int i = 0; i < o.n_toks; i++, done++) {
            const og_tok_out *t = &o.toks[i];
            json_array_append_new(jt, json_integer(t->id));
            json_t *e = json_pack("{s:i, s:f, s:i}", "token", t->id, "logprob", (double)t->logprob, "argmax", t->top[0].id);
            json_t *ta = json_array();
            for (int k = 0; k < n_top; k++)
                json_array_append_new(ta, json_pack("[i, f]", t->top[k].id, (double)t->top[k].logprob));
            json_object_set_new(e, "top", ta);
            json_array_append_new(jl, e);
        }
        fin = o.finish;
        n_cached = o.n_cached;
        if (fin == OG_FINISH_ERROR) {
            fprintf(stderr, "onegpu run: %s\n", o.error);
            rc = OG_EXIT_BAD_INPUT;
        }
        og_seq_out_free(&o);
        if (fin == OG_FINISH_NONE) og_engine_wait(eng, 1.0);
    }
    og_seq_release(eng, seq);
    og_engine_drain(eng, 0); /* the scheduler is gone: the placement is this thread's again */
    og_placement_idle(pl);   /* at rest: the last step's copies are resident */
    og_placement_stats ps;
    og_placement_get_stats(pl, &ps);
    if (!rc && as_json) {
        json_t *pt = json_array();
        for (size_t i = 0; i < ids.n; i++) json_array_append_new(pt, json_integer(ids.v[i]));
        json_t *ob = json_pack("{s:o, s:O, s:O}", "prompt_tokens", pt, "tokens", jt, "logprobs", jl);
        uint64_t *lr = ps.device ? calloc(mi->n_layer, sizeof *lr) : NULL, *lh = lr ? calloc(mi->n_layer, sizeof *lh) : NULL;
        if (lh && !og_placement_layer_hits(pl, lr, lh, mi->n_layer)) { /* what the server exports */
            json_t *per = json_array();
            for (uint32_t l = mi->n_dense; l < mi->n_layer; l++)
                json_array_append_new(per, json_real(lr[l] ? (double)lh[l] / (double)lr[l] : 0.0));
            json_object_set_new(ob, "placement",
                                json_pack("{s:I, s:I, s:f, s:o, s:I, s:I, s:I}", "selections", (json_int_t)ps.selections,
                                          "hits", (json_int_t)ps.hits, "hit_rate", ps.hit_rate, "hit_rate_per_moe_layer",
                                          per, "migrations", (json_int_t)ps.migrations, "pcie_bytes",
                                          (json_int_t)ps.pcie_bytes, "resident_experts", (json_int_t)ps.resident_experts));
        }
        free(lr);
        free(lh);
        char *js = json_dumps(ob, JSON_COMPACT);
        puts(js);
        free(js);
        json_decref(ob);
    } else if (!rc) {
        putchar('\n');
        fflush(stdout);
    }
    char cached_note[80] = "";
    if (n_cached) snprintf(cached_note, sizeof cached_note, "; %d prompt tokens read from --cache-dir", n_cached);
    if (!rc)
        fprintf(stderr, "onegpu run: prefill %zu tokens %.1f tok/s, decode %d tokens %.1f tok/s (%s, %d threads%s)\n",
                ids.n, rs.t_prefill > 0 ? (double)ids.n / rs.t_prefill : 0.0, done - 1 > 0 ? done - 1 : 0,
                done > 1 ? (done - 1) / rs.t_decode : 0.0, og_isa_name(isa), og_pool_size(pool), cached_note);
    if (!rc && fl.have_vram && ps.selections) {
        char pb[32];
        fprintf(stderr, "onegpu run: %.1f%% of %llu expert selections hit the %llu resident experts (plan: %.1f%%)\n",
                100.0 * ps.hit_rate, (unsigned long long)ps.selections, (unsigned long long)plan.resident_experts,
                100.0 * plan.predicted_device_share);
        if (ps.device)
            fprintf(stderr, "onegpu run: %llu migrations, %s copied host->device in all\n",
                    (unsigned long long)ps.migrations, og_fmt_bytes(ps.pcie_bytes, pb, sizeof pb));
    }
    if (!rc && save_trace) {
        const uint32_t n_moe = mi->n_layer - mi->n_dense;
        og_trace tr = {n_moe, mi->n_expert, rs.k, rs.t_steps, 1, rs.tsel};
        if (!rs.tsel || !rs.t_steps || !n_moe) {
            fprintf(stderr, "onegpu run: --save-trace: no decode steps through MoE layers to record\n");
            rc = OG_EXIT_USAGE;
        } else if (og_trace_write(save_trace, &tr, err, sizeof err)) {
            fprintf(stderr, "onegpu run: --save-trace: %s\n", err);
            rc = OG_EXIT_USAGE;
        }
    }
    if (!rc) rc = og_cli_placement_save_profile("onegpu run", pl, &fl, profile);
out:
    og_engine_free(eng);
    json_decref(jt);
    json_decref(jl);
    free(rs.snap);
    free(rs.tsel);
    og_placement_free(pl);
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
