/* `onegpu make-model --arch deepseek4`: synthetic DeepSeek V4 Flash files
 * (src/model/deepseek4_write.c) with the real V3/V4 vocabulary. */
#include "cli.h"
#include "hf_tokenizer.h"
#include "og_model_write.h"

#include <getopt.h>

static void usage(FILE *out) {
    fprintf(out,
        "usage: onegpu make-model --arch deepseek4 -o FILE [--preset tiny|demo|v4-flash] [options]\n"
        "Writes a deepseek4 (DeepSeek V4 Flash) GGUF with seeded random weights, the real\n"
        "129,280-token vocabulary (pre-tokenizer joyai-llm) and a V4 chat template.\n\n"
        "  -o, --output FILE         where to write (atomically)\n"
        "  --preset NAME             tiny (default; ~44 MB: 6 layers, compress ratios\n"
        "                            [0,0,4,128,4,128], window 8, indexer top_k 4, 3 hash layers),\n"
        "                            demo (~280 MB, Q8_0), v4-flash (V4 Flash's shapes and the\n"
        "                            published Q2 file's types: gate/up IQ2_XXS, down Q2_K, Q8_0\n"
        "                            attention/shared/output, F16 embeddings/router/mHC/compressor/\n"
        "                            indexer; 81 GiB: use --sparse)\n"
        "  --sparse                  tensor data is a hole: full size, no disk, for planning\n"
        "  --split-max-size SIZE     split into gguf-split parts of at most SIZE bytes each\n"
        "  --seed N                  weight seed (default 42)\n"
        "  --tokenizer DIR|none      as for deepseek2 (see make-model --help)\n"
        "shape (override the preset; compress ratios follow V4's rule: 0 for layers 0-1,\n"
        "then 4 on even and 128 on odd layers; llama.cpp accepts only 0, 4 and 128):\n"
        "  --n-layer N --n-embd N --n-head N --head-dim N --n-rot N --q-lora-rank N\n"
        "  --n-expert N --n-expert-used N --n-expert-shared N --n-ff-exp N --ctx N --vocab N\n"
        "  --window N (sliding window) --top-k N --indexer-heads N --indexer-dim N (indexer)\n"
        "  --o-rank N --o-groups N (grouped output) --hash-layers N\n"
        "  --sinkhorn-iters N --swiglu-clamp F (routed and shared)\n"
        "types (as deepseek2's make-model; rows that are not whole blocks fall back as\n"
        "llama-quantize does, each fallback reported). IQ2_XXS is quantized with a uniform\n"
        "importance matrix (llama.cpp's quantizer wants one from real activations; these are\n"
        "test weights). Norms, sinks, biases and mHC base/scale are always F32, the hash\n"
        "table ffn_gate_tid2eid I32.\n"
        "  --type T (every matrix) --type-embd T --type-output T --type-attn T\n"
        "  --type-routed T (gate, up and down) --type-routed-down T --type-shared T\n"
        "  --type-aux T (router, mHC, compressor, indexer)\n");
}

enum {
    O_ARCH = 256, O_PRESET, O_SPARSE, O_SEED, O_TOKENIZER, O_SPLITMAX, O_NLAYER, O_NEMBD, O_NHEAD, O_HEADDIM,
    O_NROT, O_QRANK, O_NEXP, O_NEXPUSED, O_NEXPSH, O_NFFEXP, O_CTX, O_VOCAB, O_WINDOW, O_TOPK, O_HASH,
    O_SINKHORN, O_CLAMP, O_IDXHEAD, O_IDXDIM, O_ORANK, O_OGROUP, O_TYPE, O_TEMBD, O_TOUT, O_TATTN, O_TROUTED, O_TDOWN, O_TSHARED, O_TAUX,
};

int og_cmd_make_model_ds4(int argc, char **argv) {
    static const struct option opts[] = {
        {"output", required_argument, 0, 'o'}, {"help", no_argument, 0, 'h'},
        {"arch", required_argument, 0, O_ARCH}, {"preset", required_argument, 0, O_PRESET},
        {"sparse", no_argument, 0, O_SPARSE}, {"seed", required_argument, 0, O_SEED},
        {"tokenizer", required_argument, 0, O_TOKENIZER}, {"split-max-size", required_argument, 0, O_SPLITMAX},
        {"n-layer", required_argument, 0, O_NLAYER}, {"n-embd", required_argument, 0, O_NEMBD},
        {"n-head", required_argument, 0, O_NHEAD}, {"head-dim", required_argument, 0, O_HEADDIM},
        {"n-rot", required_argument, 0, O_NROT}, {"q-lora-rank", required_argument, 0, O_QRANK},
        {"n-expert", required_argument, 0, O_NEXP}, {"n-expert-used", required_argument, 0, O_NEXPUSED},
        {"n-expert-shared", required_argument, 0, O_NEXPSH}, {"n-ff-exp", required_argument, 0, O_NFFEXP},
        {"ctx", required_argument, 0, O_CTX}, {"vocab", required_argument, 0, O_VOCAB},
        {"window", required_argument, 0, O_WINDOW}, {"top-k", required_argument, 0, O_TOPK},
        {"hash-layers", required_argument, 0, O_HASH}, {"sinkhorn-iters", required_argument, 0, O_SINKHORN},
        {"swiglu-clamp", required_argument, 0, O_CLAMP}, {"indexer-heads", required_argument, 0, O_IDXHEAD},
        {"indexer-dim", required_argument, 0, O_IDXDIM}, {"o-rank", required_argument, 0, O_ORANK},
        {"o-groups", required_argument, 0, O_OGROUP}, {"type", required_argument, 0, O_TYPE},
        {"type-embd", required_argument, 0, O_TEMBD}, {"type-output", required_argument, 0, O_TOUT},
        {"type-attn", required_argument, 0, O_TATTN}, {"type-routed", required_argument, 0, O_TROUTED},
        {"type-routed-down", required_argument, 0, O_TDOWN}, {"type-shared", required_argument, 0, O_TSHARED},
        {"type-aux", required_argument, 0, O_TAUX}, {0, 0, 0, 0}};
    const char *preset = og_cli_make_first_value(argc, argv, "o:h", opts, O_PRESET, "tiny");
    int c;
    og_ds4_write_config cfg;
    if (og_ds4_preset(preset, &cfg) != OG_OK) {
        fprintf(stderr, "onegpu make-model: unknown deepseek4 preset '%s' (tiny, demo, v4-flash)\n", preset);
        return OG_EXIT_USAGE;
    }
    og_ds4_hparams *h = &cfg.hp;
    const char *out_path = NULL, *tok_dir = NULL;
    bool sparse = false;
    optind = 1;
    int longindex = -1;
    while ((c = getopt_long(argc, argv, "o:h", opts, &longindex)) != -1) {
        uint32_t *u = NULL;
        bool ok = true;
        switch (c) {
        case 'o': out_path = optarg; break;
        case 'h': usage(stdout); return OG_EXIT_OK;
        case O_ARCH: case O_PRESET: break;
        case O_SPARSE: sparse = true; break;
        case O_SEED: ok = og_cli_parse_u64(optarg, &cfg.seed); break;
        case O_TOKENIZER: tok_dir = optarg; break;
        case O_SPLITMAX: ok = og_parse_size(optarg, &cfg.split_max_bytes) == OG_OK && cfg.split_max_bytes > 0; break;
        case O_NLAYER: u = &h->n_layer; break;
        case O_NEMBD: u = &h->n_embd; break;
        case O_NHEAD: u = &h->n_head; break;
        case O_HEADDIM: u = &h->head_dim; break;
        case O_NROT: u = &h->n_rot; break;
        case O_QRANK: u = &h->q_lora_rank; break;
        case O_NEXP: u = &h->n_expert; break;
        case O_NEXPUSED: u = &h->n_expert_used; break;
        case O_NEXPSH: u = &h->n_expert_shared; break;
        case O_NFFEXP: u = &h->n_ff_exp; break;
        case O_CTX: u = &h->n_ctx_train; break;
        case O_VOCAB: u = &h->n_vocab; break;
        case O_WINDOW: u = &h->n_swa; break;
        case O_TOPK: u = &h->indexer_top_k; break;
        case O_HASH: u = &h->hash_layer_count; break;
        case O_SINKHORN: u = &h->hc_sinkhorn_iters; break;
        case O_IDXHEAD: u = &h->indexer_n_head; break;
        case O_IDXDIM: u = &h->indexer_head_dim; break;
        case O_ORANK: u = &h->o_lora_rank; break;
        case O_OGROUP: u = &h->o_group_count; break;
        case O_CLAMP: {
            float v;
            ok = og_cli_parse_f32(optarg, &v) && v >= 0 && v <= 1e6f;
            for (uint32_t i = 0; ok && i < OG_DS4_MAX_LAYER; i++) h->swiglu_clamp_exp[i] = h->swiglu_clamp_shexp[i] = v;
            break;
        }
        case O_TYPE: case O_TEMBD: case O_TOUT: case O_TATTN: case O_TROUTED: case O_TDOWN: case O_TSHARED: case O_TAUX: {
            og_ggml_type t;
            if (og_type_from_name(optarg, &t) != OG_OK) {
                fprintf(stderr, "onegpu make-model: unknown ggml type '%s'\n", optarg);
                return OG_EXIT_USAGE;
            }
            if (c == O_TYPE)
                for (int r = 0; r < OG_DS4_W_NORM; r++) cfg.types[r] = t;
            else if (c == O_TROUTED)
                cfg.types[OG_DS4_W_ROUTED] = cfg.types[OG_DS4_W_ROUTED_DOWN] = t;
            else
                cfg.types[c == O_TEMBD ? OG_DS4_W_EMBD : c == O_TOUT ? OG_DS4_W_OUTPUT : c == O_TATTN ? OG_DS4_W_ATTN
                          : c == O_TDOWN ? OG_DS4_W_ROUTED_DOWN : c == O_TSHARED ? OG_DS4_W_SHARED : OG_DS4_W_AUX] = t;
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
    h->rope_swa.d_rope = h->rope_comp.d_rope = (int)h->n_rot;
    og_ds4_config_ratios(h);
    char err[1024];
    if (og_ds4_config_check(&cfg, err, sizeof err)) {
        fprintf(stderr, "onegpu make-model: %s\n", err);
        return OG_EXIT_USAGE;
    }
    og_hf_vocab vocab;
    bool have_vocab;
    if ((rc = og_cli_make_vocab("onegpu make-model", tok_dir, h->n_vocab, &vocab, &have_vocab))) return rc;
    og_logger lg = {.level = OG_LOG_INFO, .out = stderr};
    og_status st = og_ds4_write(&cfg, have_vocab ? &vocab : NULL, out_path, sparse, &lg, err, sizeof err);
    if (have_vocab) og_hf_vocab_free(&vocab);
    return og_cli_make_result("onegpu make-model", st, err, out_path, cfg.split_max_bytes != 0, sparse);
}
