/* `onegpu make-model --arch deepseek41`: synthetic DeepSeek V4.1 Flash files
 * (src/model/deepseek41_write.c) with the real V3 vocabulary. */
#include "cli.h"
#include "hf_tokenizer.h"
#include "og_model_write.h"

#include <getopt.h>
#include <stdlib.h>

static void usage(FILE *out) {
    fprintf(out,
        "usage: onegpu make-model --arch deepseek41 -o FILE [--preset tiny|demo|v41-flash] [options]\n"
        "Writes a deepseek41 (DeepSeek V4.1 Flash) GGUF in the vcruz305 dialect (plus the\n"
        "candidate keys) with seeded random weights, the real 129,280-token vocabulary and\n"
        "Engram tables whose token map lowercases the vocabulary's ASCII letters.\n\n"
        "  -o, --output FILE         where to write (atomically)\n"
        "  --preset NAME             tiny (default; ~40 MB: 8 layers with every CSA2 role:\n"
        "                            window, window + Engram, ratio-2 source, ratio-2 reuser,\n"
        "                            ratio-1 and candidate source + Engram, ratio-1 reuser,\n"
        "                            reindex (candidate-masked), reuser; window 8, top_k 4,\n"
        "                            candidate blocks 2 x 3), demo (~250 MB, Q8_0, the same\n"
        "                            roles), v41-flash (V4.1 Flash's shapes and the vcruz305\n"
        "                            Q2_K types, 7 split parts, 264.5 GB: use --sparse)\n"
        "  --sparse                  tensor data is a hole: full size, no disk, for planning\n"
        "  --split-max-size SIZE     split into gguf-split parts of at most SIZE bytes each\n"
        "  --seed N                  weight seed (default 42)\n"
        "  --tokenizer DIR|none      as for deepseek2 (see make-model --help)\n"
        "  --vocab N                 the vocabulary cut to N tokens (3..131072; tests: small logits)\n"
        "types (rows that are not whole blocks fall back as llama-quantize does). Norms,\n"
        "sinks, biases, mHC base/scale and the Engram gate weights are always F32.\n"
        "  --type T (every matrix) --type-embd T --type-output T --type-attn T\n"
        "  --type-routed T (gate, up and down) --type-routed-down T --type-shared T\n"
        "  --type-aux T (mHC, compressor, indexer) --type-router T --type-engram T (tables)\n"
        "  --type-engram-proj T (engram_wkv)\n");
}

enum { O_ARCH = 256, O_PRESET, O_SPARSE, O_SEED, O_TOKENIZER, O_SPLITMAX, O_TYPE, O_VOCAB, O_T0 };

int og_cmd_make_model_ds41(int argc, char **argv) {
    /* --type-X: the writer's class it sets (O_T0 + index) */
    static const struct { const char *name; og_ds41_wclass wc; } tflags[] = {
        {"type-embd", OG_DS41_W_EMBD}, {"type-output", OG_DS41_W_OUTPUT}, {"type-attn", OG_DS41_W_ATTN},
        {"type-routed", OG_DS41_W_ROUTED}, {"type-routed-down", OG_DS41_W_ROUTED_DOWN},
        {"type-shared", OG_DS41_W_SHARED}, {"type-aux", OG_DS41_W_AUX}, {"type-router", OG_DS41_W_ROUTER},
        {"type-engram", OG_DS41_W_ENGRAM}, {"type-engram-proj", OG_DS41_W_ENGRAM_PROJ},
    };
    enum { N_T = sizeof tflags / sizeof tflags[0] };
    struct option opts[10 + N_T + 1] = {
        {"output", required_argument, 0, 'o'}, {"help", no_argument, 0, 'h'},
        {"arch", required_argument, 0, O_ARCH}, {"preset", required_argument, 0, O_PRESET},
        {"sparse", no_argument, 0, O_SPARSE}, {"seed", required_argument, 0, O_SEED},
        {"tokenizer", required_argument, 0, O_TOKENIZER}, {"split-max-size", required_argument, 0, O_SPLITMAX},
        {"type", required_argument, 0, O_TYPE}, {"vocab", required_argument, 0, O_VOCAB}};
    for (int i = 0; i < N_T; i++) opts[10 + i] = (struct option){tflags[i].name, required_argument, 0, O_T0 + i};
    const char *preset = og_cli_make_first_value(argc, argv, "o:h", opts, O_PRESET, "tiny");
    og_ds41_write_config *cfg = malloc(sizeof *cfg); /* ~40 KB of roles and Engram constants */
    if (!cfg) {
        fprintf(stderr, "onegpu make-model: out of memory\n");
        return OG_EXIT_BAD_INPUT;
    }
    int rc = OG_EXIT_USAGE, c, longindex = -1;
    if (og_ds41_preset(preset, cfg) != OG_OK) {
        fprintf(stderr, "onegpu make-model: unknown deepseek41 preset '%s' (tiny, demo, v41-flash)\n", preset);
        goto out;
    }
    const char *out_path = NULL, *tok_dir = NULL;
    bool sparse = false;
    optind = 1;
    while ((c = getopt_long(argc, argv, "o:h", opts, &longindex)) != -1) {
        bool ok = true;
        if (c == 'o') out_path = optarg;
        else if (c == 'h') {
            usage(stdout);
            rc = OG_EXIT_OK;
            goto out;
        } else if (c == O_SPARSE) sparse = true;
        else if (c == O_SEED) ok = og_cli_parse_u64(optarg, &cfg->seed);
        else if (c == O_TOKENIZER) tok_dir = optarg;
        else if (c == O_VOCAB) ok = og_cli_parse_count(optarg, &cfg->hp.n_vocab) && cfg->hp.n_vocab >= 3;
        else if (c == O_SPLITMAX) ok = og_parse_size(optarg, &cfg->split_max_bytes) == OG_OK && cfg->split_max_bytes > 0;
        else if (c == O_TYPE || (c >= O_T0 && c < O_T0 + N_T)) {
            og_ggml_type t;
            if (og_type_from_name(optarg, &t) != OG_OK) {
                fprintf(stderr, "onegpu make-model: unknown ggml type '%s'\n", optarg);
                goto out;
            }
            for (int r = 0; r < OG_DS41_W_NORM; r++)
                if (c == O_TYPE) cfg->types[r] = t;
            if (c != O_TYPE) cfg->types[tflags[c - O_T0].wc] = t;
            if (c != O_TYPE && tflags[c - O_T0].wc == OG_DS41_W_ROUTED) cfg->types[OG_DS41_W_ROUTED_DOWN] = t;
        } else if (c != O_ARCH && c != O_PRESET) {
            usage(stderr);
            goto out;
        }
        if (!ok) {
            rc = og_cli_make_bad_value(optarg, opts, longindex);
            goto out;
        }
        longindex = -1;
    }
    if ((rc = og_cli_make_args_done(out_path, argc, argv, usage))) goto out;
    char err[1024];
    og_hf_vocab vocab;
    bool have_vocab;
    if ((rc = og_cli_make_vocab("onegpu make-model", tok_dir, cfg->hp.n_vocab, &vocab, &have_vocab))) goto out;
    og_logger lg = {.level = OG_LOG_INFO, .out = stderr};
    og_status st = og_ds41_write(cfg, have_vocab ? &vocab : NULL, out_path, sparse, &lg, err, sizeof err);
    if (have_vocab) og_hf_vocab_free(&vocab);
    rc = og_cli_make_result("onegpu make-model", st, err, out_path, cfg->split_max_bytes != 0, sparse);
out:
    free(cfg);
    return rc;
}
