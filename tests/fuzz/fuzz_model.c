/* libFuzzer target over the deepseek2 loader (keys, bounds, shapes, binding),
 * deepseek4's hyperparameter reader and tensor table (og_ds4_hparams_read,
 * og_ds4_tensors_check, on the header-only and the mapped open) and
 * deepseek41's (og_ds41_hparams_read: three dialects, roles, Engram checks):
 * any input must give OG_OK or a clean error that says why. When the model
 * loads and is small (FUZZ_MAX_BYTES of buffers, FUZZ_MAX_OPS of arithmetic,
 * estimated from the hyperparameters before anything runs), one forward step
 * of 2 tokens runs on the scalar kernels and the file is planned, with and
 * without a profile; the header-only open is planned too (the planner's input
 * in `onegpu plan`). ASan/UBSan check every access and size product.
 * Run: fuzz_model -max_total_time=600 CORPUS tests/fuzz/corpus_model
 * Seeds: tiny `onegpu make-model --tokenizer none` files (tests/fuzz/gen_model_seeds.sh). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deepseek2.h" /* white-box: sizes from the hyperparameters */
#include "deepseek41.h" /* includes deepseek4.h */
#include "og_model.h"
#include "og_moe.h"
#include "og_quant.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_MAX_BYTES (64ull << 20)
#define FUZZ_MAX_OPS (1ull << 26)
#define FUZZ_TOKENS 2

static volatile float sink;

/* Whether a forward step of FUZZ_TOKENS tokens stays inside the fuzz budget:
 * the KV block, the scratch arena, the routers' top-k scans and the matmuls
 * (every weight element once per token; the weights are inside the input). */
static bool small_enough(const og_model *m, size_t input_bytes) {
    const og_model_info *mi = og_model_get_info(m);
    if (strcmp(mi->arch, "deepseek2")) { /* deepseek4: its scratch and state, every weight once per token */
        const uint64_t T = FUZZ_TOKENS;
        const uint64_t bytes = og_fwd_scratch_bytes(m, T, T) + 4ull * mi->kv_elems_fixed + 4ull * T * mi->n_vocab;
        const uint64_t ops = (uint64_t)input_bytes * 8 * T + T * mi->n_layer * mi->n_expert * (1ull + mi->n_expert_used);
        return bytes <= FUZZ_MAX_BYTES && ops <= FUZZ_MAX_OPS;
    }
    const og_hparams *h = &og_ds2_of(m)->hp;
    const uint64_t T = FUZZ_TOKENS, w = (uint64_t)h->kv_lora_rank + h->d_rope;
    uint64_t bytes = 4ull * h->n_layer * OG_KV_BLOCK * w;
    bytes += 4ull * T * (3ull * h->n_embd + (uint64_t)h->n_head * h->d_qk + h->q_lora_rank + w +
                         (uint64_t)h->n_head * h->d_v + h->n_expert + h->n_vocab);
    bytes += 4ull * h->n_head * 16 * (h->d_nope + 2ull * h->kv_lora_rank + h->d_v);
    bytes += 4ull * T * h->n_expert_used * (2ull * h->n_embd + 2ull * h->n_ff_exp);
    uint64_t ops = (uint64_t)input_bytes * 8 * T; /* at most 8 weights per byte (Q2_K and up) */
    ops += T * (h->n_layer - h->n_dense) * h->n_expert * (1ull + h->n_expert_used * h->n_expert_used);
    ops += T * h->n_layer * h->n_head * (uint64_t)(h->d_nope + h->d_v) * h->kv_lora_rank; /* legacy kv_b */
    return bytes <= FUZZ_MAX_BYTES && ops <= FUZZ_MAX_OPS;
}

static void forward(const og_model *m) {
    og_kernels k;
    if (og_kernels_init(OG_ISA_SCALAR, &k)) __builtin_trap();
    og_dispatch *d;
    char derr[256];
    if (og_dispatch_create(NULL, NULL, &d, derr, sizeof derr)) return; /* out of memory */
    og_run_ctx rc = {.kern = &k, .pool = NULL, .dispatch = og_dispatch_table(d)}; /* host only */
    og_kv kv = {0};
    float *logits = malloc((size_t)FUZZ_TOKENS * og_model_get_info(m)->n_vocab * sizeof *logits);
    if (!logits) {
        og_dispatch_free(d);
        return;
    }
    int32_t tok[FUZZ_TOKENS] = {0, (int32_t)og_model_get_info(m)->n_vocab - 1};
    char err[512] = "";
    og_status st = og_model_forward(m, &rc, &kv, tok, FUZZ_TOKENS, logits, true, err, sizeof err);
    if (st == OG_OK) {
        if (kv.n_pos != FUZZ_TOKENS) __builtin_trap();
        sink += logits[0] + logits[(size_t)FUZZ_TOKENS * og_model_get_info(m)->n_vocab - 1];
    } else if (st != OG_ERR_NOMEM || kv.n_pos != 0 || !err[0]) {
        __builtin_trap(); /* the only way a loaded model's forward may fail */
    }
    og_kv_free(&kv);
    free(logits);
    og_dispatch_free(d);
}

/* Plans g (any open mode) for a 24 GiB device and 128 GiB of host memory, then
 * with a profile made of the input bytes when the model has one to take. */
static void plan(const og_gguf *g, const uint8_t *data, size_t size) {
    og_plan_input in = {.vram = 24ull << 30, .ram = 128ull << 30, .reserve = 512ull << 20, .ctx = 64,
                        .parallel = 1, .batch_tokens = 512, .kv_bytes_per_elem = 2, .slots_override = -1};
    og_plan p;
    char err[512] = "";
    og_status st = og_plan_make(g, &in, &p, err, sizeof err);
    if (st != OG_OK) {
        if (!err[0]) __builtin_trap();
        return;
    }
    const uint32_t nl = p.n_layer, ne = p.n_expert;
    if (p.fits && p.device_bytes + in.reserve > in.vram) __builtin_trap();
    og_plan_free(&p);
    if (!ne || (uint64_t)nl * ne > 65536) return;
    uint64_t *prof = malloc((size_t)nl * ne * sizeof *prof);
    if (!prof) return;
    for (size_t i = 0; i < (size_t)nl * ne; i++) prof[i] = size ? data[i % size] : 0;
    in.profile = prof;
    if (og_plan_make(g, &in, &p, err, sizeof err) == OG_OK) og_plan_free(&p);
    free(prof);
}

/* deepseek4's and deepseek41's readers and tables (deepseek41: three
 * dialects, roles, the Engram self-checks): OG_OK, or a clean error that says
 * why. */
static void table_check(const og_gguf *g) {
    char arch[16] = "", err[512] = "";
    if (og_gguf_get_cstr(g, "general.architecture", arch, sizeof arch)) return;
    const bool v4 = !strcmp(arch, "deepseek4"), v41 = !strcmp(arch, "deepseek41");
    if (!v4 && !v41) return;
    void *hp = malloc(v4 ? sizeof(og_ds4_hparams) : sizeof(og_ds41_hparams));
    if (!hp) return;
    og_logger quiet = {.level = OG_LOG_ERROR};
    og_status st = v4 ? og_ds4_hparams_read(g, &quiet, hp, err, sizeof err) : og_ds41_hparams_read(g, &quiet, hp, err, sizeof err);
    if (st == OG_OK) st = v4 ? og_ds4_tensors_check(g, hp, err, sizeof err) : og_ds41_tensors_check(g, hp, err, sizeof err);
    if (st != OG_OK && !err[0]) __builtin_trap();
    free(hp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512] = "";
    og_gguf *g = NULL;
    if (og_gguf_open_memory(data, size, "fuzz", OG_GGUF_HEADER_ONLY, &g, err, sizeof err) == OG_OK) {
        table_check(g);
        plan(g, data, size);
        og_gguf_close(g);
    }
    if (og_gguf_open_memory(data, size, "fuzz", 0, &g, err, sizeof err) != OG_OK) return 0;
    table_check(g); /* with data: the hash tables' expert ids too */
    og_model *m = NULL;
    og_logger quiet = {.level = OG_LOG_ERROR};
    err[0] = '\0';
    if (og_model_load_gguf(g, &quiet, &m, err, sizeof err) != OG_OK) {
        if (m != NULL || err[0] == '\0') __builtin_trap(); /* a failure leaves no model and says why */
        return 0;
    }
    /* deepseek41's forward is not built yet (branch v41fwd): load and plan only */
    const bool has_forward = strcmp(og_model_get_info(m)->arch, "deepseek41") != 0;
    if (!has_forward) plan(og_model_gguf(m), data, size);
    if (has_forward && small_enough(m, size)) {
        forward(m);
        plan(og_model_gguf(m), data, size);
    }
    og_model_free(m);
    return 0;
}
