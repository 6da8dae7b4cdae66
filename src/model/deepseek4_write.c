/* Synthetic deepseek4 GGUF writer: the keys of spec §3.1 (plus the ones
 * llama.cpp v0.4.0's loader requires) from og_ds4_hparams, and every tensor of
 * deepseek4.h's table with seeded weights. Scaling (as deepseek2's synth.c):
 * uniform noise with std gain / sqrt(fan_in), so each projection keeps the RMS
 * of its (RMS-normalized) input; norms 1 +- 0.1; the mHC mixes give pre/post
 * gates around sigmoid(+-1) and a Sinkhorn matrix near uniform, so the 4
 * streams stay O(1) through the layers; the output has gain 4 (logits with
 * std ~4: greedy picks far from ties). */
#include "og_model_write.h"

#include "og_quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void og_ds4_config_ratios(og_ds4_hparams *hp) {
    for (uint32_t i = 0; i < OG_DS4_MAX_LAYER; i++)
        hp->compress_ratio[i] = i >= hp->n_layer || i < 2 ? 0 : i % 2 == 0 ? OG_DS4_RATIO_CSA : OG_DS4_RATIO_HCA;
}

/* V4 Flash's values of §3.1 for everything a preset does not change. */
static void v4_defaults(og_ds4_hparams *h) {
    memset(h, 0, sizeof *h);
    h->n_layer = 43; h->n_embd = 4096; h->n_vocab = 129280; h->n_ctx_train = 1048576;
    h->n_head = 64; h->head_dim = 512; h->n_rot = 64;
    h->q_lora_rank = 1024; h->o_lora_rank = 1024; h->o_group_count = 8; h->n_swa = 128;
    h->indexer_n_head = 64; h->indexer_head_dim = 128; h->indexer_top_k = 512;
    h->n_expert = 256; h->n_expert_used = 6; h->n_expert_shared = 1; h->n_ff_exp = 2048;
    h->expert_gating_func = OG_DS4_GATING_SQRT_SOFTPLUS; h->hash_layer_count = 3;
    h->expert_weights_norm = true; h->expert_weights_scale = 1.5f;
    for (uint32_t i = 0; i < OG_DS4_MAX_LAYER; i++) h->swiglu_clamp_exp[i] = h->swiglu_clamp_shexp[i] = 10.0f;
    h->hc_count = 4; h->hc_sinkhorn_iters = 20; h->hc_eps = 1e-6f; h->rms_eps = 1e-6f;
    h->rope_scaling = OG_DS4_ROPE_YARN;
    h->rope_swa = (og_rope){.d_rope = 64, .base = 10000.0f, .freq_scale = 1.0f, .mscale = 1.0f};
    h->rope_comp = (og_rope){.d_rope = 64, .base = 160000.0f, .freq_scale = 1.0f / 16.0f, .ext_factor = 1.0f,
                             .n_ctx_orig = 65536, .beta_fast = 32.0f, .beta_slow = 1.0f, .mscale = 1.0f};
}

og_status og_ds4_preset(const char *name, og_ds4_write_config *c) {
    memset(c, 0, sizeof *c);
    c->seed = 42;
    og_ds4_hparams *h = &c->hp;
    v4_defaults(h);
    if (!strcmp(name, "tiny")) {
        /* Every part small enough that 64-token prompts cross the window (8),
         * many ratio-4 blocks (top_k 4 of up to 32 rows), and with a prompt of
         * > 256 tokens several ratio-128 blocks (llama.cpp hard-codes 4 and
         * 128). The indexer key length is 64: llama.cpp's Hadamard for the
         * indexer cache is at least 64 wide (llama_kv_cache::build_input_k_rot). */
        c->name = "onegpu-ds4-tiny";
        h->n_layer = 6; h->n_embd = 64; h->n_ctx_train = 4096;
        h->n_head = 4; h->head_dim = 64; h->n_rot = 16;
        h->q_lora_rank = 32; h->o_lora_rank = 32; h->o_group_count = 2; h->n_swa = 8;
        h->indexer_n_head = 16; h->indexer_head_dim = 64; h->indexer_top_k = 4;
        h->n_expert = 8; h->n_expert_used = 2; h->n_ff_exp = 32;
        /* a clamp the activations reach (10 is rarely hit by these weights) */
        for (uint32_t i = 0; i < OG_DS4_MAX_LAYER; i++) h->swiglu_clamp_exp[i] = h->swiglu_clamp_shexp[i] = 1.5f;
        for (int r = 0; r < OG_DS4_W_NORM; r++) c->types[r] = OG_TYPE_F32;
        c->types[OG_DS4_W_EMBD] = c->types[OG_DS4_W_OUTPUT] = OG_TYPE_F16;
    } else if (!strcmp(name, "demo")) {
        c->name = "onegpu-ds4-demo";
        h->n_layer = 8; h->n_embd = 512; h->n_ctx_train = 65536;
        h->n_head = 8; h->head_dim = 128; h->n_rot = 64;
        h->q_lora_rank = 256; h->o_lora_rank = 256; h->o_group_count = 4; h->n_swa = 128;
        h->indexer_n_head = 8; h->indexer_head_dim = 128; h->indexer_top_k = 64;
        h->n_expert = 16; h->n_expert_used = 4; h->n_ff_exp = 512;
        for (int r = 0; r < OG_DS4_W_NORM; r++) c->types[r] = OG_TYPE_Q8_0;
    } else if (!strcmp(name, "v4-flash")) {
        /* antirez's DeepSeek-V4-Flash IQ2XXS-w2Q2K Q2 file (§3.1) */
        c->name = "onegpu-v4-flash-shape";
        c->types[OG_DS4_W_EMBD] = OG_TYPE_F16;
        c->types[OG_DS4_W_OUTPUT] = c->types[OG_DS4_W_ATTN] = c->types[OG_DS4_W_SHARED] = OG_TYPE_Q8_0;
        c->types[OG_DS4_W_ROUTED] = OG_TYPE_IQ2_XXS;
        c->types[OG_DS4_W_ROUTED_DOWN] = OG_TYPE_Q2_K;
        c->types[OG_DS4_W_AUX] = OG_TYPE_F16;
    } else {
        return OG_ERR_NOT_FOUND;
    }
    h->rope_swa.d_rope = h->rope_comp.d_rope = (int)h->n_rot;
    og_ds4_config_ratios(h);
    return OG_OK;
}

og_status og_ds4_config_check(const og_ds4_write_config *c, char *err, size_t errlen) {
    const og_ds4_hparams *h = &c->hp;
#define REQ(cond, ...) do { if (!(cond)) return og_fail(err, errlen, OG_ERR_INVALID_ARG, __VA_ARGS__); } while (0)
    REQ(h->n_layer >= 1 && h->n_layer <= OG_DS4_MAX_LAYER, "--n-layer must be 1..%u", OG_DS4_MAX_LAYER);
    REQ(h->n_embd >= 1 && h->n_embd <= OG_DS4_MAX_EMBD, "--n-embd must be 1..%u", OG_DS4_MAX_EMBD);
    REQ(h->o_group_count >= 1 && h->o_group_count <= OG_DS4_MAX_GROUP && h->o_lora_rank >= 1 &&
        h->o_lora_rank <= OG_DS4_MAX_RANK && h->q_lora_rank >= 1 && h->q_lora_rank <= OG_DS4_MAX_RANK,
        "--o-groups must be 1..%u and --o-rank, --q-lora-rank 1..%u", OG_DS4_MAX_GROUP, OG_DS4_MAX_RANK);
    REQ(h->head_dim >= 2 && h->head_dim <= OG_DS4_MAX_HEAD_DIM, "--head-dim must be 2..%u", OG_DS4_MAX_HEAD_DIM);
    REQ(h->indexer_n_head >= 1 && h->indexer_n_head <= OG_DS4_MAX_INDEXER_HEAD && h->indexer_head_dim <= OG_DS4_MAX_INDEXER_DIM,
        "--indexer-heads must be 1..%u and --indexer-dim at most %u", OG_DS4_MAX_INDEXER_HEAD, OG_DS4_MAX_INDEXER_DIM);
    REQ(h->n_head >= 1 && h->n_head <= OG_DS4_MAX_HEAD && h->n_head % h->o_group_count == 0,
        "--n-head must be 1..%u and a multiple of the output groups (%u)", OG_DS4_MAX_HEAD, h->o_group_count);
    REQ(h->n_rot >= 2 && h->n_rot % 2 == 0 && h->n_rot <= h->head_dim && h->n_rot <= OG_ROPE_MAX_DIM,
        "the RoPE dims (%u) must be even and at most the head dim (%u)", h->n_rot, h->head_dim);
    REQ(h->indexer_head_dim >= h->n_rot && h->indexer_head_dim >= OG_DS4_MIN_INDEXER_DIM &&
            (h->indexer_head_dim & (h->indexer_head_dim - 1)) == 0,
        "the indexer key length (%u) must be a power of two >= the RoPE dims and >= %u", h->indexer_head_dim,
        OG_DS4_MIN_INDEXER_DIM);
    REQ(h->n_expert >= 1 && h->n_expert <= OG_DS4_MAX_EXPERT, "--n-expert must be 1..%u", OG_DS4_MAX_EXPERT);
    REQ(h->n_expert_used >= 1 && h->n_expert_used <= h->n_expert && h->n_expert_used <= OG_DS4_MAX_EXPERT_USED,
        "need 1 <= --n-expert-used (%u) <= --n-expert (%u), at most %u", h->n_expert_used, h->n_expert,
        OG_DS4_MAX_EXPERT_USED);
    REQ(h->n_expert_shared <= OG_DS4_MAX_EXPERT_SHARED, "--n-expert-shared is at most %u", OG_DS4_MAX_EXPERT_SHARED);
    REQ(h->n_ff_exp >= 1 && h->n_ff_exp <= OG_DS4_MAX_FF, "--n-ff-exp must be 1..%u", OG_DS4_MAX_FF);
    REQ(h->hash_layer_count <= h->n_layer, "--hash-layers (%u) exceeds --n-layer (%u)", h->hash_layer_count, h->n_layer);
    REQ(h->n_vocab >= 1 && h->n_vocab <= OG_DS4_MAX_VOCAB, "--vocab must be 1..%u", OG_DS4_MAX_VOCAB);
    REQ(h->n_ctx_train >= 1 && h->n_ctx_train <= OG_DS4_MAX_CTX, "--ctx must be 1..%u", OG_DS4_MAX_CTX);
    REQ(h->n_swa >= 1 && h->n_swa <= OG_DS4_MAX_SWA, "--window must be 1..%u", OG_DS4_MAX_SWA);
    REQ(h->indexer_top_k >= 1 && h->indexer_top_k <= OG_DS4_MAX_TOP_K, "--top-k must be 1..%u", OG_DS4_MAX_TOP_K);
#undef REQ
    return OG_OK;
}

/* ---- keys ------------------------------------------------------------------ */

/* V4's chat conventions as a Jinja template of our own: BOS, system text
 * without a marker, <User>/<Assistant> turns, </think> opening a non-thinking
 * answer (deepseek4.md §5). It defines dsml_token and names the tool_calls
 * block, which is how llama.cpp (common/chat.cpp) recognizes V4; onegpu picks
 * its V4 encoder from general.architecture (src/tokenizer/chat.c). */
static const char v4_template[] =
    "{%- set dsml_token = '\xef\xbd\x9c" "DSML\xef\xbd\x9c' -%}"
    "{#- tool calls are a <{dsml_token}tool_calls> block of invoke/parameter elements -#}"
    "{{- bos_token -}}"
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'system' -%}{{- m['content'] -}}"
    "{%- elif m['role'] == 'user' -%}{{- '<\xef\xbd\x9cUser\xef\xbd\x9c>' + m['content'] -}}"
    "{%- elif m['role'] == 'assistant' -%}"
    "{{- '<\xef\xbd\x9c" "Assistant\xef\xbd\x9c></think>' + (m['content'] or '') + "
    "'<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<\xef\xbd\x9c" "Assistant\xef\xbd\x9c></think>' -}}{%- endif -%}";

og_status og_ds4_write_layer_keys(og_gguf_writer *w, const char *arch, const uint32_t *ratio, uint32_t n_ratio,
                                  const float *clamp_exp, const float *clamp_shexp, uint32_t n_layer) {
    int32_t ratios[OG_DS4_MAX_LAYER + 16] = {0};
    char key[64];
    for (uint32_t i = 0; i < n_layer && i < n_ratio; i++) ratios[i] = (int32_t)ratio[i];
    snprintf(key, sizeof key, "%s.attention.compress_ratios", arch);
    og_status st = og_gguf_writer_set_arr(w, key, OG_GGUF_INT32, ratios, n_ratio);
    snprintf(key, sizeof key, "%s.swiglu_clamp_exp", arch);
    if (!st) st = og_gguf_writer_set_arr(w, key, OG_GGUF_FLOAT32, clamp_exp, n_layer);
    snprintf(key, sizeof key, "%s.swiglu_clamp_shexp", arch);
    if (!st) st = og_gguf_writer_set_arr(w, key, OG_GGUF_FLOAT32, clamp_shexp, n_layer);
    return st;
}

static og_status put_keys(og_gguf_writer *w, const og_ds4_write_config *c, const uint64_t *type_bytes) {
    const og_ds4_hparams *h = &c->hp;
    og_status st;
#define K(expr) do { if ((st = (expr))) return st; } while (0)
#define KU(key, v) K(og_gguf_writer_set_u32(w, "deepseek4." key, (v)))
#define KF(key, v) K(og_gguf_writer_set_f32(w, "deepseek4." key, (v)))
    K(og_gguf_writer_set_general(w, "deepseek4", c->name ? c->name : "onegpu-ds4-synthetic", type_bytes));
    OG_DS4_WRITE_SHARED_KEYS(KU, KF, h);
    K(og_ds4_write_layer_keys(w, "deepseek4", h->compress_ratio, h->n_layer, h->swiglu_clamp_exp, h->swiglu_clamp_shexp,
                              h->n_layer));
    K(og_gguf_writer_set_str(w, "deepseek4.rope.scaling.type",
                             h->rope_scaling == OG_DS4_ROPE_YARN ? "yarn" : h->rope_scaling == OG_DS4_ROPE_LINEAR ? "linear" : "none"));
    KU("expert_group_count", 0);
    KU("expert_group_used_count", 0);
    KU("expert_gating_func", h->expert_gating_func);
    K(og_gguf_writer_set_bool(w, "deepseek4.expert_weights_norm", h->expert_weights_norm));
    KU("hash_layer_count", h->hash_layer_count);
#undef K
#undef KU
#undef KF
    return OG_OK;
}

/* ---- tensors ------------------------------------------------------------- */

typedef struct wtensor {
    og_ds4_tensor_id id;
    int il;
} wtensor;

typedef struct wbuild {
    const og_ds4_write_config *c;
    wtensor *t;
    size_t n;
    float *row;
    size_t row_cap;
} wbuild;

static og_ggml_type type_of(const og_ds4_write_config *c, og_ds4_wclass wc) {
    if (wc == OG_DS4_W_I32) return OG_TYPE_I32;
    if (wc >= OG_DS4_W_NORM) return OG_TYPE_F32;
    return c->types[wc];
}

/* Row r of tensor `id` (ne0 values) as floats. */
static void init_row(const og_ds4_write_config *c, og_ds4_tensor_id id, int64_t ne0, uint64_t *rng, float *x) {
    const og_ds4_tensor_kind *k = &og_ds4_tensors[id];
    float gain = 1.0f, amp = -1.0f, offset = 0.0f; /* amp >= 0: uniform offset +- amp, not fan-in scaled */
    switch (id) {
    case OG_DS4_TOKEN_EMBD: gain = sqrtf((float)ne0); break;
    case OG_DS4_OUTPUT: gain = 4.0f; break;
    case OG_DS4_ATTN_SINKS: amp = 1.0f; break;
    case OG_DS4_ATTN_COMP_APE: case OG_DS4_INDEXER_COMP_APE: amp = 0.5f; break;
    case OG_DS4_HC_ATTN_BASE: case OG_DS4_HC_FFN_BASE: case OG_DS4_OUTPUT_HC_BASE: amp = 1.0f; break;
    case OG_DS4_HC_ATTN_SCALE: case OG_DS4_HC_FFN_SCALE: case OG_DS4_OUTPUT_HC_SCALE: amp = 0.25f; offset = 0.75f; break;
    case OG_DS4_EXP_PROBS_B: amp = 0.1f; break; /* the scores spread ~0.3: the bias changes some picks */
    default:
        if (k->wclass == OG_DS4_W_NORM) amp = 0.1f, offset = 1.0f;
        else if (k->wclass == OG_DS4_W_VEC) amp = 0.0f, offset = 1.0f; /* the unapplied .scale tensors: 1 */
        break;
    }
    const float a = amp >= 0 ? amp : sqrtf(3.0f) * gain / sqrtf((float)ne0); /* uniform(-a, a): std a/sqrt(3) */
    for (int64_t j = 0; j < ne0; j++) x[j] = offset + a * (float)(2.0 * og_rand_unit(rng) - 1.0);
    (void)c;
}

/* ffn_gate_tid2eid row (one token): k distinct experts (a partial shuffle). */
static void hash_row(const og_ds4_hparams *h, uint64_t *rng, int32_t *out) {
    int32_t pool[OG_DS4_MAX_EXPERT];
    for (uint32_t e = 0; e < h->n_expert; e++) pool[e] = (int32_t)e;
    for (uint32_t i = 0; i < h->n_expert_used; i++) {
        uint32_t j = i + (uint32_t)(og_splitmix64(rng) % (h->n_expert - i));
        int32_t t = pool[i];
        pool[i] = pool[j];
        pool[j] = t;
        out[i] = pool[i];
    }
}

/* og_model_write_row_fn over a kind (ctx: its og_ds4_tensor_id) */
static void kind_row(const void *ctx, int64_t ne0, uint64_t *rng, float *x) {
    init_row(NULL, *(const og_ds4_tensor_id *)ctx, ne0, rng, x);
}

static og_status fill(void *ctx, uint64_t i, const og_gguf_tensor *t, void *buf, char *err, size_t errlen) {
    wbuild *b = ctx;
    const og_ds4_write_config *c = b->c;
    const og_ds4_tensor_id id = b->t[i].id;
    if (t->type == OG_TYPE_I32) {
        const int64_t ne0 = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
        uint64_t rng = c->seed ^ og_fnv1a64(t->name, strlen(t->name), OG_FNV1A64_INIT);
        for (int64_t r = 0; r < rows; r++) hash_row(&c->hp, &rng, (int32_t *)buf + r * ne0);
        return OG_OK;
    }
    return og_model_write_rows(t, buf, c->seed, kind_row, &id, &b->row, &b->row_cap, err, errlen);
}

/* Reopens what was written (first: its first file) header-only and reads it
 * back as the loader will. */
static og_status self_check(const char *first, char *err, size_t errlen) {
    og_gguf *g;
    og_status st = og_gguf_open(first, OG_GGUF_HEADER_ONLY, &g, err, errlen);
    if (st) return st;
    og_ds4_hparams hp;
    char e2[512];
    st = og_ds4_hparams_read(g, NULL, &hp, e2, sizeof e2);
    if (!st) st = og_ds4_tensors_check(g, &hp, e2, sizeof e2);
    og_gguf_close(g);
    return st ? og_fail(err, errlen, st, "the written file does not read back (a bug): %s", e2) : OG_OK;
}

og_status og_ds4_write(const og_ds4_write_config *c, const og_model_vocab *vocab, const char *path, bool sparse,
                       const og_logger *lg, char *err, size_t errlen) {
    og_status st = og_ds4_config_check(c, err, errlen);
    if (st) return st;
    if (vocab && vocab->n_vocab != c->hp.n_vocab)
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "tokenizer has %u tokens but the model %u", vocab->n_vocab,
                       c->hp.n_vocab);
    const og_str tmpl = {v4_template, sizeof v4_template - 1};
    const og_ds4_hparams *h = &c->hp;
    og_gguf_writer *w;
    if ((st = og_gguf_writer_create(32, &w))) return og_fail(err, errlen, st, "out of memory");
    wbuild b = {.c = c};
    size_t cap = (size_t)(h->n_layer + 1) * OG_DS4_N_TENSOR;
    uint64_t type_bytes[OG_TYPE_COUNT] = {0};
    uint32_t fallbacks[OG_TYPE_COUNT][OG_TYPE_COUNT] = {{0}};
    if (!(b.t = malloc(cap * sizeof *b.t))) {
        st = og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (int il = -1; il < (int)h->n_layer; il++) {
        /* global tensors: the embeddings first, the head last (file order as llama.cpp's) */
        int lo = il < 0 ? OG_DS4_TOKEN_EMBD : OG_DS4_HC_ATTN_FN, hi = il < 0 ? OG_DS4_HC_ATTN_FN : OG_DS4_N_TENSOR;
        for (int id = lo; id < hi; id++) {
            const og_ds4_tensor_kind *k = &og_ds4_tensors[id];
            if (!k->required || !og_ds4_tensor_in_layer(h, (og_ds4_tensor_id)id, il)) continue;
            int64_t ne[3];
            uint32_t nd;
            char name[96];
            og_ds4_tensor_shape(h, (og_ds4_tensor_id)id, il, ne, &nd);
            og_ds4_tensor_name((og_ds4_tensor_id)id, il, name, sizeof name);
            /* I32 (the hash table) is stored as it is */
            if ((st = og_model_write_add(w, name, type_of(c, k->wclass), nd, ne, sparse, fallbacks, type_bytes, err,
                                         errlen)))
                goto out;
            b.t[b.n++] = (wtensor){(og_ds4_tensor_id)id, il};
        }
    }
    if ((st = put_keys(w, c, type_bytes)) || (vocab && (st = og_model_write_vocab(w, vocab, "joyai-llm", &tmpl)))) {
        og_fail(err, errlen, st, "cannot write metadata: %s", og_status_str(st));
        goto out;
    }
    og_model_write_log_fallbacks(lg, fallbacks);
    uint32_t n_parts;
    char first[4200];
    st = og_model_write_out(w, path, c->split_max_bytes, sparse ? NULL : fill, &b, first, sizeof first, &n_parts, err,
                            errlen);
    if (!st) st = self_check(first, err, errlen);
out:
    og_gguf_writer_free(w);
    free(b.t);
    free(b.row);
    return st;
}
