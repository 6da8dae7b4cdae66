/* `onegpu plan`: the layout the planner chooses for this model on this machine
 * (or on the sizes given), for people or as JSON; exit 3 when it does not fit. */
#include "cli.h"
#include "og_moe.h"

#include <errno.h>
#include <limits.h>
#include <getopt.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out) {
    fprintf(out,
            "usage: onegpu plan -m MODEL.gguf --vram SIZE [--ram SIZE] [--reserve SIZE] [--ctx N]\n"
            "                   [--parallel N] [--batch-tokens N] [--kv-type f16|f32] [--expert-slots N|all]\n"
            "                   [--profile FILE] [--json]\n"
            "  Reads the GGUF header only. --vram is the device memory to plan for (required until the\n"
            "  CUDA backend can ask the GPU; the CPU plays the device with it); --ram defaults to\n"
            "  MemAvailable, capped by the cgroup limit. Defaults: --reserve 512M, --ctx the model's\n"
            "  context length up to 4096 (as onegpu serve), --parallel 1, --batch-tokens 512, --kv-type f16. Sizes take K, M, G, T (powers of 1024).\n"
            "  --parallel N       sequences served at once (KV cache and logits for each)\n"
            "  --expert-slots N|all  experts per MoE layer held on the device (0: all on the host),\n"
            "                     instead of filling the device; checked against the budget\n"
            "  --profile FILE     a usage profile (onegpu run --save-profile) seeds the hot set\n"
            "  --json             the plan as JSON (fits, reason, bytes, expert_slots_per_layer, ...)\n"
            "  The host keeps every routed expert (resident ones too: evicted experts are computed\n"
            "  there at once), so RAM must hold all of them plus staging.\n"
            "exit status: 0 fits, 1 usage, 2 bad model or profile file, 3 does not fit\n");
}

void og_cli_slots_note(FILE *out, const char *cmd, int64_t slots_override, const og_plan *p) {
    if (slots_override <= (int64_t)p->n_expert || !p->n_moe_layers) return;
    fprintf(out, "%s: --expert-slots %lld: capped to %u because a MoE layer has %u routed experts (slots beyond them "
                 "hold nothing; --expert-slots all asks for every one)\n",
            cmd, (long long)slots_override, p->n_expert, p->n_expert);
}

void og_cli_plan_line(FILE *out, const og_plan *p, bool from_profile) {
    char a[32], b[32], c[32];
    uint64_t total = (uint64_t)p->n_moe_layers * p->n_expert;
    fprintf(out, "plan: uses device %s (%llu of %llu experts resident, %s) and host %s; predicted device share of "
                 "expert selections %.1f%% (%s)\n",
            og_fmt_bytes(p->device_bytes, a, sizeof a), (unsigned long long)p->resident_experts,
            (unsigned long long)total, og_fmt_bytes(p->resident_expert_bytes, b, sizeof b),
            og_fmt_bytes(p->host_bytes, c, sizeof c), 100.0 * p->predicted_device_share,
            from_profile ? "from the profile" : "uniform traffic");
}

bool og_cli_parse_count(const char *s, uint32_t *out) {
    long v;
    if (!og_cli_parse_long(s, 1, 0x7fffffffL, &v)) return false;
    *out = (uint32_t)v;
    return true;
}

bool og_cli_parse_long(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

bool og_cli_parse_slots(const char *s, int64_t *out) {
    if (!strcmp(s, "all")) {
        *out = -2;
        return true;
    }
    long v;
    if (!og_cli_parse_long(s, 0, LONG_MAX, &v)) return false;
    *out = v;
    return true;
}

int og_cmd_plan(int argc, char **argv) {
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"vram", required_argument, 0, 'V'}, {"ram", required_argument, 0, 'R'},
        {"reserve", required_argument, 0, 'r'}, {"ctx", required_argument, 0, 'c'}, {"parallel", required_argument, 0, 'p'},
        {"batch-tokens", required_argument, 0, 'b'}, {"kv-type", required_argument, 0, 'k'},
        {"expert-slots", required_argument, 0, 'e'}, {"profile", required_argument, 0, 'P'}, {"json", no_argument, 0, 'j'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *model = NULL, *profile = NULL;
    og_plan_input in = {.reserve = 512ull << 20, .ctx = 0 /* below: as serve */, .parallel = 1, .batch_tokens = 512,
                        .kv_bytes_per_elem = og_kv_type_bytes(OG_KV_F16),
                        .slots_override = -1};
    bool as_json = false, have_vram = false, have_ram = false, have_kv_type = false;
    int c;
    optind = 1;
    int longindex = -1;
    while ((longindex = -1, c = getopt_long(argc, argv, "m:h", opts, &longindex)) != -1) {
        bool ok = true;
        switch (c) {
        case 'm': model = optarg; break;
        case 'V': ok = og_parse_size(optarg, &in.vram) == OG_OK; have_vram = true; break;
        case 'R': ok = og_parse_size(optarg, &in.ram) == OG_OK; have_ram = true; break;
        case 'r': ok = og_parse_size(optarg, &in.reserve) == OG_OK; break;
        case 'c': ok = og_cli_parse_count(optarg, &in.ctx); break;
        case 'p': ok = og_cli_parse_count(optarg, &in.parallel); break;
        case 'b': ok = og_cli_parse_count(optarg, &in.batch_tokens); break;
        case 'k': {
            og_kv_type t = OG_KV_F16;
            ok = og_kv_type_parse(optarg, &t) == OG_OK;
            in.kv_bytes_per_elem = og_kv_type_bytes(t); /* what run and serve store (og_cli_flag) */
            have_kv_type = true;
            break;
        }
        case 'e': ok = og_cli_parse_slots(optarg, &in.slots_override); break;
        case 'P': profile = optarg; break;
        case 'j': as_json = true; break;
        case 'h': usage(stdout); return OG_EXIT_OK;
        default: usage(stderr); return OG_EXIT_USAGE;
        }
        if (!ok) {
            const char *name = longindex >= 0 ? opts[longindex].name : "?";
            const char *want = !strcmp(name, "vram") || !strcmp(name, "ram") || !strcmp(name, "reserve")
                                   ? "a size (e.g. 96G)"
                               : !strcmp(name, "kv-type")       ? "f16 or f32"
                               : !strcmp(name, "expert-slots")  ? "a count or 'all'"
                                                                : "see onegpu plan --help";
            fprintf(stderr, "onegpu plan: bad value '%s' for --%s: expected %s\n", optarg, name, want);
            return OG_EXIT_USAGE;
        }
    }
    if (!model || optind != argc) {
        if (!model) fprintf(stderr, "onegpu plan: -m MODEL.gguf is required\n");
        else fprintf(stderr, "onegpu plan: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return OG_EXIT_USAGE;
    }
    if (!have_vram) {
        fprintf(stderr, "onegpu plan: give the device's memory with --vram SIZE (plan reads no GPU; run and serve take "
                        "it from a CUDA GPU when there is one)\n");
        return OG_EXIT_USAGE;
    }
    char err[1024];
    if (!have_ram) {
        uint64_t avail, limit;
        if (og_sys_memory(&avail, &limit)) {
            fprintf(stderr, "onegpu plan: cannot read /proc/meminfo; give --ram SIZE\n");
            return OG_EXIT_USAGE;
        }
        in.ram = avail < limit ? avail : limit;
    }
    og_gguf *g;
    if (og_gguf_open(model, OG_GGUF_HEADER_ONLY, &g, err, sizeof err)) {
        fprintf(stderr, "onegpu plan: %s\n", err);
        return OG_EXIT_BAD_INPUT;
    }
    uint64_t *counts = NULL;
    og_model_info hp;
    if (og_model_describe(g, NULL, &hp, err, sizeof err)) {
        fprintf(stderr, "onegpu plan: %s\n", err);
        og_gguf_close(g);
        return OG_EXIT_BAD_INPUT;
    }
    if (!in.ctx) in.ctx = og_cli_default_ctx(hp.n_ctx_train);
    if (hp.kv_elem_bytes && have_kv_type && hp.kv_elem_bytes != in.kv_bytes_per_elem)
        fprintf(stderr, "onegpu plan: note: %s's cache holds %u-byte elements whatever --kv-type (f16 rounds their "
                        "values); planned with those\n", hp.arch, hp.kv_elem_bytes);
    if (profile) {
        if (og_profile_read(profile, hp.n_layer, hp.n_expert, &counts, err, sizeof err)) {
            fprintf(stderr, "onegpu plan: %s\n", err);
            og_gguf_close(g);
            return OG_EXIT_BAD_INPUT;
        }
        in.profile = counts;
    }
    og_plan p;
    og_status st = og_plan_make(g, &in, &p, err, sizeof err);
    og_gguf_close(g);
    free(counts);
    if (!st) og_cli_slots_note(stderr, "onegpu plan", in.slots_override, &p);
    if (st == OG_ERR_INVALID_ARG) { /* e.g. --ctx above the model's */
        fprintf(stderr, "onegpu plan: %s\n", err);
        return OG_EXIT_USAGE;
    }
    if (st) {
        fprintf(stderr, "onegpu plan: %s: %s\n", model, err);
        return OG_EXIT_BAD_INPUT;
    }
    if (as_json) {
        json_t *o = json_object(), *sl = json_array(), *roles = json_object();
        for (uint32_t l = 0; l < p.n_layer; l++) json_array_append_new(sl, json_integer(p.slots[l]));
        for (int r = 0; r < OG_ROLE_COUNT; r++)
            json_object_set_new(roles, og_model_role_name((og_tensor_role)r), json_integer((json_int_t)p.role_bytes[r]));
        json_object_set_new(o, "fits", json_boolean(p.fits));
        json_object_set_new(o, "reason", json_string(p.reason));
        json_object_set_new(o, "resident_experts", json_integer((json_int_t)p.resident_experts));
        json_object_set_new(o, "resident_expert_bytes", json_integer((json_int_t)p.resident_expert_bytes));
        json_object_set_new(o, "device_bytes", json_integer((json_int_t)p.device_bytes));
        json_object_set_new(o, "host_bytes", json_integer((json_int_t)p.host_bytes));
        json_object_set_new(o, "kv_bytes", json_integer((json_int_t)p.kv_bytes));
        json_object_set_new(o, "kv_blocks", json_integer((json_int_t)p.kv_blocks));
        json_object_set_new(o, "workspace_bytes", json_integer((json_int_t)p.workspace_bytes));
        json_object_set_new(o, "nonexpert_bytes", json_integer((json_int_t)p.nonexpert_bytes));
        json_object_set_new(o, "routed_expert_bytes", json_integer((json_int_t)p.routed_bytes));
        json_object_set_new(o, "host_only_bytes", json_integer((json_int_t)p.host_only_bytes));
        json_object_set_new(o, "kv_bytes_per_token",
                            json_real(hp.kv_elems_per_token * (hp.kv_elem_bytes ? hp.kv_elem_bytes : in.kv_bytes_per_elem)));
        json_object_set_new(o, "staging_bytes", json_integer((json_int_t)p.staging_bytes));
        json_object_set_new(o, "expert_bytes_max", json_integer((json_int_t)p.expert_bytes_max));
        json_object_set_new(o, "n_expert_used", json_integer((json_int_t)p.n_expert_used));
        json_object_set_new(o, "total_experts", json_integer((json_int_t)p.n_moe_layers * p.n_expert));
        json_object_set_new(o, "predicted_device_share", json_real(p.predicted_device_share));
        json_object_set_new(o, "expert_slots_per_layer", sl);
        json_object_set_new(o, "bytes_per_role", roles);
        json_object_set_new(o, "vram", json_integer((json_int_t)in.vram));
        json_object_set_new(o, "ram", json_integer((json_int_t)in.ram));
        char *s = json_dumps(o, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
        puts(s);
        free(s);
        json_decref(o);
    } else {
        char a[32], b[32], c2[32], d[32];
        printf("plan for %s within device memory %s and host RAM %s\n", model, og_fmt_bytes(in.vram, a, sizeof a),
               og_fmt_bytes(in.ram, b, sizeof b));
        uint64_t total_exp = (uint64_t)p.n_moe_layers * p.n_expert;
        char e[32];
        if (!p.fits) {
            printf("does not fit: %s\n", p.reason);
        } else {
            printf("device: non-expert weights %s + KV cache %s + workspace %s + %llu resident experts %s = %s\n",
                   og_fmt_bytes(p.nonexpert_bytes, a, sizeof a), og_fmt_bytes(p.kv_bytes, b, sizeof b),
                   og_fmt_bytes(p.workspace_bytes, c2, sizeof c2), (unsigned long long)p.resident_experts,
                   og_fmt_bytes(p.resident_expert_bytes, d, sizeof d), og_fmt_bytes(p.device_bytes, e, sizeof e));
            if (p.host_only_bytes)
                printf("host:   routed experts %s + host-only tensors %s (never on the device%s%s) + staging %s = %s\n",
                       og_fmt_bytes(p.routed_bytes, a, sizeof a), og_fmt_bytes(p.host_only_bytes, d, sizeof d),
                       p.host_only_what ? ": " : "", p.host_only_what ? p.host_only_what : "",
                       og_fmt_bytes(p.staging_bytes, b, sizeof b), og_fmt_bytes(p.host_bytes, c2, sizeof c2));
            else
                printf("host:   routed experts %s + staging %s = %s\n", og_fmt_bytes(p.routed_bytes, a, sizeof a),
                       og_fmt_bytes(p.staging_bytes, b, sizeof b), og_fmt_bytes(p.host_bytes, c2, sizeof c2));
            if (hp.kv_elems_per_token > 0) {
                const double per_tok = hp.kv_elems_per_token * (hp.kv_elem_bytes ? hp.kv_elem_bytes : in.kv_bytes_per_elem);
                printf("kv:     %.0f bytes per token + %s per sequence (the model's cache layout), %u x %u tokens\n",
                       per_tok, og_fmt_bytes(hp.kv_elems_fixed * (hp.kv_elem_bytes ? hp.kv_elem_bytes : in.kv_bytes_per_elem),
                                             a, sizeof a), in.parallel, in.ctx);
                if (p.kv_blocks)
                    printf("kv:     the pool: %llu blocks of %d positions x %s = %s, one allocation\n",
                           (unsigned long long)p.kv_blocks, OG_KV_BLOCK,
                           og_fmt_bytes(p.kv_bytes / p.kv_blocks, a, sizeof a), og_fmt_bytes(p.kv_bytes, b, sizeof b));
            }
            printf("resident: %llu of %llu experts (%.1f%%); predicted device share of expert selections %.1f%%%s\n",
                   (unsigned long long)p.resident_experts, (unsigned long long)total_exp,
                   100.0 * (double)p.resident_experts / (double)(total_exp ? total_exp : 1),
                   100.0 * p.predicted_device_share, profile ? " (from the profile)" : " (uniform traffic)");
            printf("expert slots per layer:");
            for (uint32_t l = 0; l < p.n_layer; l++) printf(" %u", p.slots[l]);
            printf("\nbytes per role:");
            for (int r = 0; r < OG_ROLE_COUNT; r++)
                if (p.role_bytes[r]) printf(" %s %s;", og_model_role_name((og_tensor_role)r), og_fmt_bytes(p.role_bytes[r], a, sizeof a));
            printf("\n");
        }
    }
    int rc = p.fits ? OG_EXIT_OK : OG_EXIT_REFUSED;
    if (!p.fits && as_json) fprintf(stderr, "onegpu plan: does not fit: %s\n", p.reason);
    og_plan_free(&p);
    return rc;
}
