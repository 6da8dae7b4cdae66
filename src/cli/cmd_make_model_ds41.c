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
        "  --preset NAME             tiny (default; ~45 MB: 8 layers with every CSA2 role:\n"
        "                            window, window + Engram, ratio-2 source, ratio-2 reuser,\n"
        "                            ratio-1 and candidate source + Engram, ratio-1 reuser,\n"
        "                            reindex (candidate-masked), reuser; window 8, top_k 4,\n"
        "                            candidate blocks 2 x 3), demo (~275 MB, Q8_0, the same\n"
        "                            roles), v41-flash (V4.1 Flash's shapes and the vcruz305\n"
        "                            Q2_K types, 7 split parts, 264.5 GB: use --sparse)\n"
        "  --sparse                  tensor data is a hole: full size, no disk, for planning\n"
        "  --split-max-size SIZE     split into gguf-split parts of at most SIZE bytes each\n"
        "  --seed N                  weight seed (default 42)\n"
        "  --tokenizer DIR|none      as for deepseek2 (see make-model --help)\n"
        "shape (override the preset; the layer roles stay the preset's):\n"
        "  --vocab N --n-embd N --n-head N --head-dim N --n-rot N --q-lora-rank N --o-rank N\n"
        "  --o-groups N --window N --top-k N --indexer-heads N --indexer-dim N --n-expert N\n"
        "  --n-expert-used N --n-ff-exp N (routed and shared) --ctx N --hc N (mHC streams)\n"
        "  --engram-heads N --engram-ngram N (2..8) --engram-dim N (row width, a multiple of 32)\n"
        "  --engram-primes-above N (the tables' primes: the consecutive primes above N)\n"
        "types (rows that are not whole blocks fall back as llama-quantize does). Norms,\n"
        "sinks, biases, mHC base/scale and the Engram gate weights are always F32.\n"
        "  --type T (every matrix) --type-embd T --type-output T --type-attn T\n"
        "  --type-routed T (gate, up and down) --type-routed-down T --type-shared T\n"
        "  --type-aux T (mHC, compressor, indexer) --type-router T --type-engram T (tables)\n"
        "  --type-engram-proj T (engram_wkv)\n");
}

enum { O_ARCH = 256, O_PRESET, O_SPARSE, O_SEED, O_TOKENIZER, O_SPLITMAX, O_TYPE, O_PRIMES, O_T0, O_D0 = O_T0 + 64 };

int og_cmd_make_model_ds41(int argc, char **argv) {
    /* --type-X: the writer's class it sets (O_T0 + index) */
    static const struct { const char *name; og_ds41_wclass wc; } tflags[] = {
        {"type-embd", OG_DS41_W_EMBD}, {"type-output", OG_DS41_W_OUTPUT}, {"type-attn", OG_DS41_W_ATTN},
        {"type-routed", OG_DS41_W_ROUTED}, {"type-routed-down", OG_DS41_W_ROUTED_DOWN},
        {"type-shared", OG_DS41_W_SHARED}, {"type-aux", OG_DS41_W_AUX}, {"type-router", OG_DS41_W_ROUTER},
        {"type-engram", OG_DS41_W_ENGRAM}, {"type-engram-proj", OG_DS41_W_ENGRAM_PROJ},
    };
    enum { N_T = sizeof tflags / sizeof tflags[0] };
    og_ds41_write_config *cfg = malloc(sizeof *cfg); /* ~40 KB of roles and Engram constants */
    if (!cfg) {
        fprintf(stderr, "onegpu make-model: out of memory\n");
        return OG_EXIT_BAD_INPUT;
    }
    og_ds41_hparams *h = &cfg->hp;
    /* --NAME N: the dim it sets (O_D0 + index) */
    const struct { const char *name; uint32_t *v; } dflags[] = {
        {"vocab", &h->n_vocab}, {"n-embd", &h->n_embd}, {"n-head", &h->n_head}, {"head-dim", &h->head_dim},
        {"n-rot", &h->n_rot}, {"q-lora-rank", &h->q_lora_rank}, {"o-rank", &h->o_lora_rank},
        {"o-groups", &h->o_group_count}, {"window", &h->n_swa}, {"top-k", &h->indexer_top_k},
        {"indexer-heads", &h->indexer_n_head}, {"indexer-dim", &h->indexer_head_dim}, {"n-expert", &h->n_expert},
        {"n-expert-used", &h->n_expert_used}, {"n-ff-exp", &h->n_ff_exp}, {"ctx", &h->n_ctx_train},
        {"hc", &h->hc_count}, {"engram-heads", &h->engram_n_head}, {"engram-ngram", &h->engram_max_ngram}, {"engram-dim", &h->engram_head_dim},
    };
    enum { N_D = sizeof dflags / sizeof dflags[0] };
    struct option opts[10 + N_T + N_D + 1] = {
        {"output", required_argument, 0, 'o'}, {"help", no_argument, 0, 'h'},
        {"arch", required_argument, 0, O_ARCH}, {"preset", required_argument, 0, O_PRESET},
        {"sparse", no_argument, 0, O_SPARSE}, {"seed", required_argument, 0, O_SEED},
        {"tokenizer", required_argument, 0, O_TOKENIZER}, {"split-max-size", required_argument, 0, O_SPLITMAX},
        {"type", required_argument, 0, O_TYPE}, {"engram-primes-above", required_argument, 0, O_PRIMES}};
    for (int i = 0; i < N_T; i++) opts[10 + i] = (struct option){tflags[i].name, required_argument, 0, O_T0 + i};
    for (int i = 0; i < N_D; i++) opts[10 + N_T + i] = (struct option){dflags[i].name, required_argument, 0, O_D0 + i};
    const char *preset = og_cli_make_first_value(argc, argv, "o:h", opts, O_PRESET, "tiny");
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
        else if (c == O_PRIMES) ok = og_cli_parse_u64(optarg, &cfg->engram_prime_start) && cfg->engram_prime_start < (1ull << 31);
        else if (c == O_TOKENIZER) tok_dir = optarg;
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
        } else if (c >= O_D0 && c < O_D0 + N_D) {
            ok = og_cli_parse_u32(optarg, dflags[c - O_D0].v);
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
    h->n_ff_shexp = h->n_ff_exp;
    og_ds41_config_derive(cfg);
    char err[1024];
    if (og_ds41_config_check(cfg, err, sizeof err)) {
        fprintf(stderr, "onegpu make-model: %s\n", err);
        rc = OG_EXIT_USAGE;
        goto out;
    }
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
