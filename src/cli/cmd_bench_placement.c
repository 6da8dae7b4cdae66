/* `onegpu bench placement`: device share of expert selections for each hot-set
 * policy on synthetic routing traces with temporal locality, next to the
 * offline oracle (Belady) replayed under the same migrator rules, for several
 * resident fractions. The figure that matters is the ratio to the oracle. */
#include "cli.h"
#include "og_policy.h"

#include <getopt.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out) {
    fprintf(out,
            "usage: onegpu bench placement [--json] [trace and migrator options]\n"
            "  Replays a synthetic routing trace (weak static skew, strong temporal locality) under\n"
            "  each hot-set policy and prints the device share of expert selections and its ratio\n"
            "  to the offline oracle's, for resident fractions 10%%, 25%% (the --json 'policies'), 50%%.\n"
            "trace:    --layers N (8) --experts N (256) --k N (8) --steps N (2000) --tokens N (1, per step)\n"
            "          --skew S (0.6, Zipf exponent of static popularity) --locality P (0.8)\n"
            "          --window N (8 steps) --phase N (128 steps) --seed N (1)\n"
            "migrator: --swaps N (2 per layer and step) --delay N (1 step) --min-residency N (8)\n"
            "          --decay F (0.85)\n"
            "  static: the profile of another run of the same model (--seed + 1000). oracle: Belady's MIN\n"
            "  under the same --swaps and --delay (it knows the future, so no --min-residency).\n"
            "  An evicted expert's slot is gone at once; its replacement counts once its copy lands.\n"
            "  --trace FILE  replay a trace recorded by onegpu run --save-trace instead (static then\n"
            "                uses the trace's own counts: an upper bound for a static profile)\n");
}

typedef struct row {
    double fraction;
    og_sim_result r[OG_POLICY_COUNT];
} row;

static og_status run_row(const og_trace *t, const og_trace *prev, const og_migrator_params *base, double fraction,
                         row *out, char *err, size_t errlen) {
    og_migrator_params mp = *base;
    mp.slots_per_layer = (uint32_t)(fraction * t->n_expert + 0.5);
    if (mp.slots_per_layer < t->k) mp.slots_per_layer = t->k;
    if (mp.slots_per_layer > t->n_expert) mp.slots_per_layer = t->n_expert;
    out->fraction = (double)mp.slots_per_layer / t->n_expert;
    /* the profile a previous run would have saved: its selection counts */
    uint64_t *profile = calloc((size_t)t->n_layer * t->n_expert, sizeof *profile);
    if (!profile) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    const size_t per_step = (size_t)prev->n_layer * prev->tokens_per_step * prev->k;
    for (uint32_t s = 0; s < prev->n_step; s++)
        for (size_t i = 0; i < per_step; i++) {
            uint32_t l = (uint32_t)(i / ((size_t)prev->tokens_per_step * prev->k));
            profile[(size_t)l * t->n_expert + prev->sel[s * per_step + i]]++;
        }
    og_status st = OG_OK;
    for (int k = 0; k < OG_POLICY_COUNT && !st; k++)
        st = og_policy_simulate(t, (og_policy_kind)k, &mp, profile, &out->r[k], err, errlen);
    free(profile);
    return st;
}

int og_cmd_bench_placement(int argc, char **argv) {
    static const struct option opts[] = {
        {"json", no_argument, 0, 'j'},        {"layers", required_argument, 0, 'L'},  {"experts", required_argument, 0, 'E'},
        {"k", required_argument, 0, 'k'},     {"steps", required_argument, 0, 'n'},   {"tokens", required_argument, 0, 't'},
        {"skew", required_argument, 0, 's'},  {"locality", required_argument, 0, 'l'}, {"window", required_argument, 0, 'w'},
        {"phase", required_argument, 0, 'p'}, {"seed", required_argument, 0, 'S'},    {"swaps", required_argument, 0, 'W'},
        {"delay", required_argument, 0, 'd'}, {"min-residency", required_argument, 0, 'm'},
        {"decay", required_argument, 0, 'D'}, {"help", no_argument, 0, 'h'},
        {"trace", required_argument, 0, 'F'}, {0, 0, 0, 0}};
    const char *trace_path = NULL;
    og_trace_params tp = {.n_layer = 8, .n_expert = 256, .k = 8, .n_step = 2000, .tokens_per_step = 1, .skew = 0.6,
                          .locality = 0.8, .window = 8, .phase = 128, .seed = 1, .model_seed = 7};
    og_migrator_params mp = {.swaps_per_step = 2, .copy_delay_steps = 1, .min_residency = 8, .decay = 0.85};
    bool as_json = false;
    int c, longindex;
    optind = 1;
    while ((longindex = -1, c = getopt_long(argc, argv, "h", opts, &longindex)) != -1) {
        char *end = NULL;
        double v = 0;
        if (optarg && c != 'F') {
            v = strtod(optarg, &end);
            if (end == optarg || *end || !(v >= 0 && v <= 1e9)) { /* NaN fails too */
                fprintf(stderr, "onegpu bench placement: bad value '%s' for --%s\n", optarg,
                        longindex >= 0 ? opts[longindex].name : "?");
                return OG_EXIT_USAGE;
            }
        }
        switch (c) {
        case 'j': as_json = true; break;
        case 'L': tp.n_layer = (uint32_t)v; break;
        case 'E': tp.n_expert = (uint32_t)v; break;
        case 'k': tp.k = (uint32_t)v; break;
        case 'n': tp.n_step = (uint32_t)v; break;
        case 't': tp.tokens_per_step = (uint32_t)v; break;
        case 's': tp.skew = v; break;
        case 'l': tp.locality = v; break;
        case 'w': tp.window = (uint32_t)v; break;
        case 'p': tp.phase = (uint32_t)v; break;
        case 'S': tp.seed = (uint64_t)v; break;
        case 'W': mp.swaps_per_step = (uint32_t)v; break;
        case 'd': mp.copy_delay_steps = (uint32_t)v; break;
        case 'm': mp.min_residency = (uint32_t)v; break;
        case 'D': mp.decay = v; break;
        case 'F': trace_path = optarg; break;
        case 'h': usage(stdout); return OG_EXIT_OK;
        default: usage(stderr); return OG_EXIT_USAGE;
        }
    }
    if (optind != argc || tp.locality > 1 || mp.decay <= 0 || mp.decay >= 1) {
        fprintf(stderr, "onegpu bench placement: --locality is in [0, 1], --decay in (0, 1)\n");
        return OG_EXIT_USAGE;
    }
    char err[512];
    og_trace t, prev;
    og_trace_params pp = tp;
    pp.seed = tp.seed + 1000;
    if (trace_path) {
        if (og_trace_read(trace_path, &t, err, sizeof err)) {
            fprintf(stderr, "onegpu bench placement: %s\n", err);
            return OG_EXIT_BAD_INPUT;
        }
        prev = t; /* its own counts */
        prev.sel = malloc((size_t)t.n_step * t.n_layer * t.tokens_per_step * t.k * sizeof *prev.sel);
        if (!prev.sel) {
            og_trace_free(&t);
            fprintf(stderr, "onegpu bench placement: out of memory\n");
            return OG_EXIT_USAGE;
        }
        memcpy(prev.sel, t.sel, (size_t)t.n_step * t.n_layer * t.tokens_per_step * t.k * sizeof *prev.sel);
        tp = (og_trace_params){.n_layer = t.n_layer, .n_expert = t.n_expert, .k = t.k, .n_step = t.n_step,
                               .tokens_per_step = t.tokens_per_step};
    } else if (og_trace_synth(&tp, &t, err, sizeof err) || og_trace_synth(&pp, &prev, err, sizeof err)) {
        fprintf(stderr, "onegpu bench placement: %s\n", err);
        og_trace_free(&t);
        return OG_EXIT_USAGE;
    }
    const double fractions[3] = {0.10, 0.25, 0.50};
    row rows[3];
    og_status st = OG_OK;
    for (int i = 0; i < 3 && !st; i++) st = run_row(&t, &prev, &mp, fractions[i], &rows[i], err, sizeof err);
    og_trace_free(&t);
    og_trace_free(&prev);
    if (st) {
        fprintf(stderr, "onegpu bench placement: %s\n", err);
        return OG_EXIT_USAGE;
    }
    if (as_json) {
        json_t *o = json_object(), *sweep = json_array();
        for (int i = 0; i < 3; i++) {
            json_t *pol = json_array();
            double oracle = rows[i].r[OG_POLICY_ORACLE].device_share;
            for (int k = 0; k < OG_POLICY_COUNT; k++)
                json_array_append_new(pol, json_pack("{s:s, s:f, s:f, s:I}", "name", og_policy_name((og_policy_kind)k),
                                                     "device_share", rows[i].r[k].device_share, "vs_oracle",
                                                     oracle > 0 ? rows[i].r[k].device_share / oracle : 0.0,
                                                     "migrations", (json_int_t)rows[i].r[k].migrations));
            if (i == 1) {
                json_object_set_new(o, "resident_fraction", json_real(rows[i].fraction));
                json_object_set(o, "policies", pol);
            }
            json_array_append_new(sweep, json_pack("{s:f, s:o}", "resident_fraction", rows[i].fraction, "policies", pol));
        }
        json_object_set_new(o, "sweep", sweep);
        json_object_set_new(o, "trace", json_pack("{s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:i, s:i}", "layers", tp.n_layer,
                                                  "experts", tp.n_expert, "k", tp.k, "steps", tp.n_step, "tokens",
                                                  tp.tokens_per_step, "skew", tp.skew, "locality", tp.locality,
                                                  "window", tp.window, "phase", tp.phase));
        char *s = json_dumps(o, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
        puts(s);
        free(s);
        json_decref(o);
        return OG_EXIT_OK;
    }
    if (trace_path)
        printf("trace: %s: %u layers x %u experts, k %u, %u steps x %u tokens\n", trace_path, tp.n_layer, tp.n_expert,
               tp.k, tp.n_step, tp.tokens_per_step);
    else
        printf("trace: %u layers x %u experts, k %u, %u steps x %u tokens; skew %.2f, locality %.2f, window %u, phase %u\n",
               tp.n_layer, tp.n_expert, tp.k, tp.n_step, tp.tokens_per_step, tp.skew, tp.locality, tp.window, tp.phase);
    printf("migrator: %u swaps per layer and step, copies land after %u step(s), min residency %u, decay %.2f\n\n",
           mp.swaps_per_step, mp.copy_delay_steps, mp.min_residency, mp.decay);
    printf("%-9s", "resident");
    for (int k = 0; k < OG_POLICY_COUNT; k++) printf(" %18s", og_policy_name((og_policy_kind)k));
    printf("\n");
    for (int i = 0; i < 3; i++) {
        double oracle = rows[i].r[OG_POLICY_ORACLE].device_share;
        printf("%7.1f%% ", 100 * rows[i].fraction);
        for (int k = 0; k < OG_POLICY_COUNT; k++)
            printf("    %5.1f%% (%5.3fx)", 100 * rows[i].r[k].device_share,
                   oracle > 0 ? rows[i].r[k].device_share / oracle : 0.0);
        printf("\n");
    }
    printf("\ndevice share of expert selections (ratio to the oracle's)\n");
    return OG_EXIT_OK;
}
