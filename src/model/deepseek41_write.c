/* Synthetic deepseek41 GGUF writer: the vcruz305 keys of spec §3.2 plus the
 * candidate keys (decision 1) from og_ds41_hparams, the nine Engram keys, and
 * every tensor of deepseek41.h's table for the roles the preset gives each
 * layer, with seeded weights scaled as deepseek4_write.c's (std gain /
 * sqrt(fan_in); norms and the Engram gate weights 1 +- 0.1; Engram rows of
 * unit std). */
#include "og_model_write.h"

#include "og_quant.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* V4.1 Flash's values (§1, §3.2) for everything a preset does not change. */
static void v41_defaults(og_ds41_hparams *h) {
    memset(h, 0, sizeof *h);
    h->n_layer = 40; h->n_embd = 5120; h->n_vocab = 129280; h->n_ctx_train = 1048576;
    h->n_head = 64; h->head_dim = 512; h->n_rot = 64;
    h->q_lora_rank = 1280; h->o_lora_rank = 1024; h->o_group_count = 8; h->n_swa = 128;
    h->indexer_n_head = 32; h->indexer_head_dim = 128; h->indexer_top_k = 512;
    h->n_expert = 384; h->n_expert_used = 6; h->n_expert_shared = 1; h->n_ff_exp = 2304; h->n_ff_shexp = 2304;
    h->expert_weights_norm = true; h->expert_weights_scale = 1.5f;
    for (uint32_t i = 0; i < OG_DS4_MAX_LAYER; i++) h->swiglu_clamp_exp[i] = h->swiglu_clamp_shexp[i] = 10.0f;
    h->hc_count = 4; h->hc_sinkhorn_iters = 20; h->hc_eps = 1e-6f; h->rms_eps = 1e-20f; /* decision 7 */
    h->rope_scaling = OG_DS4_ROPE_YARN;
    og_ds4_rope_schedules(OG_DS4_ROPE_YARN, 64, 10000.0f, 160000.0f, 16.0f, 65536, 32.0f, 1.0f, &h->rope_swa, &h->rope_comp);
    h->candidate_block_size = OG_DS41_CAND_BLOCK_DEFAULT;
    h->candidate_topk_blocks = OG_DS41_CAND_TOPK_DEFAULT;
    h->engram_n_head = 8; h->engram_head_dim = 256; h->engram_max_ngram = 4; h->engram_pad_id = 2; /* decision 3 */
}

/* The real layout (§4.3.3): ratios [0,0, 2 x18, 1 x20]; compressors and index
 * keys on 2, 8, 14, 20; indexers there and on 24, 28, 32, 36; Engram on 1, 14. */
static void real_layout(og_ds41_hparams *h) {
    static const int src[] = {2, 8, 14, 20}, idx[] = {24, 28, 32, 36};
    for (uint32_t i = 0; i < h->n_layer; i++) h->compress_ratio[i] = i < 2 ? 0 : i < 20 ? 2 : 1;
    for (int i = 0; i < 4; i++) {
        og_ds41_layer *L = &h->layer[src[i]];
        L->is_kv_source = L->is_key_owner = L->is_index_source = true;
        h->layer[idx[i]].is_index_source = true;
    }
    h->candidate_source = 20;
    h->n_engram_layer = 2;
    h->engram_layer[0] = 1;
    h->engram_layer[1] = 14;
}

/* Eight layers with one of each role (og_ds41_preset's comment). */
static void small_layout(og_ds41_hparams *h) {
    static const uint32_t ratio[8] = {0, 0, 2, 2, 1, 1, 1, 1};
    h->n_layer = 8;
    memcpy(h->compress_ratio, ratio, sizeof ratio);
    for (int l = 2; l <= 4; l += 2) h->layer[l].is_kv_source = h->layer[l].is_key_owner = h->layer[l].is_index_source = true;
    h->layer[6].is_index_source = true;
    h->candidate_source = 4;
    h->n_engram_layer = 2;
    h->engram_layer[0] = 1;
    h->engram_layer[1] = 4;
}

/* §3.2's multipliers of the real layers 1 and 14 (v41-flash) */
static const uint64_t real_mult[8] = {76632096046245ull, 4839876093313ull, 35959672319349ull, 73987337458391ull,
                                      67716810739261ull, 51510806800915ull, 30921347202721ull, 82619226485591ull};

void og_ds41_config_derive(og_ds41_write_config *c) {
    og_ds41_hparams *h = &c->hp;
    og_ds4_rope_schedules(h->rope_scaling, h->n_rot, h->rope_swa.base, h->rope_comp.base, 16.0f, 65536, 32.0f, 1.0f,
                          &h->rope_swa, &h->rope_comp);
    /* the Engram constants (§3.2): consecutive primes above the start handed out
     * in (layer, n-gram size, head) order, offsets their running sums per layer,
     * rows their sums; multipliers §3.2's or odd values below 2^47 from the seed */
    if (h->engram_n_head > OG_DS41_MAX_ENGRAM_HEAD || h->engram_max_ngram < 2 ||
        h->engram_max_ngram > OG_DS41_MAX_ENGRAM_NGRAM || h->n_engram_layer > OG_DS41_MAX_ENGRAM_LAYER)
        return; /* og_ds41_config_check refuses it */
    h->engram_n_bucket = (h->engram_max_ngram - 1) * h->engram_n_head;
    const bool real = c->engram_real_mult && h->n_engram_layer == 2 && h->engram_max_ngram == 4;
    uint64_t p = c->engram_prime_start, rng = c->seed ^ 0x656e6772616dull; /* "engram" */
    for (uint32_t s = 0; s < h->n_engram_layer; s++) {
        uint64_t run = 0;
        for (uint32_t b = 0; b < h->engram_n_bucket; b++) {
            do p++; while (!og_ds41_is_prime(p));
            h->engram_prime[s][b] = p;
            h->engram_offset[s][b] = run;
            run += p;
        }
        h->engram_rows[s] = run;
        for (uint32_t k = 0; k < h->engram_max_ngram; k++)
            h->engram_mult[s][k] = real ? real_mult[s * 4 + k] : (og_splitmix64(&rng) >> 18) | 1;
        h->layer[h->engram_layer[s]].has_engram = true;
        h->layer[h->engram_layer[s]].engram_slot = (int32_t)s;
    }
}

og_status og_ds41_preset(const char *name, og_ds41_write_config *c) {
    memset(c, 0, sizeof *c);
    c->seed = 42;
    og_ds41_hparams *h = &c->hp;
    v41_defaults(h);
    if (!strcmp(name, "tiny")) {
        /* a 64-token prompt + 64 generated crosses the window (8), makes 64 ratio-2
         * groups and 128 ratio-1 rows: more than top_k (4) and than the 3
         * candidate blocks of 2 hold */
        c->name = "onegpu-ds41-tiny";
        small_layout(h);
        h->n_embd = 64; h->n_ctx_train = 4096; h->n_head = 4; h->head_dim = 64; h->n_rot = 16;
        h->q_lora_rank = 32; h->o_lora_rank = 32; h->o_group_count = 2; h->n_swa = 8;
        h->indexer_n_head = 4; h->indexer_head_dim = 32; h->indexer_top_k = 4;
        h->n_expert = 8; h->n_expert_used = 2; h->n_ff_exp = h->n_ff_shexp = 32;
        for (uint32_t i = 0; i < OG_DS4_MAX_LAYER; i++) h->swiglu_clamp_exp[i] = h->swiglu_clamp_shexp[i] = 1.5f;
        h->candidate_block_size = 2; h->candidate_topk_blocks = 3;
        h->engram_head_dim = 32;
        c->engram_prime_start = 100;
        for (int r = 0; r < OG_DS41_W_NORM; r++) c->types[r] = OG_TYPE_F32;
        c->types[OG_DS41_W_EMBD] = c->types[OG_DS41_W_OUTPUT] = OG_TYPE_F16;
    } else if (!strcmp(name, "demo")) {
        c->name = "onegpu-ds41-demo";
        small_layout(h);
        h->n_embd = 512; h->n_ctx_train = 65536; h->n_head = 8; h->head_dim = 128; h->n_rot = 64;
        h->q_lora_rank = 256; h->o_lora_rank = 256; h->o_group_count = 4; h->n_swa = 128;
        h->indexer_n_head = 8; h->indexer_head_dim = 128; h->indexer_top_k = 64;
        h->n_expert = 16; h->n_expert_used = 4; h->n_ff_exp = h->n_ff_shexp = 384;
        h->candidate_block_size = 4; h->candidate_topk_blocks = 16;
        h->engram_head_dim = 128;
        c->engram_prime_start = 2000;
        for (int r = 0; r < OG_DS41_W_NORM; r++) c->types[r] = OG_TYPE_Q8_0;
    } else if (!strcmp(name, "v41-flash")) {
        /* vcruz305's Q2_K file (§3.2): llama.cpp's stock Q2_K mix. token_embd,
         * mHC, compressor and indexer types are unverified there: token_embd
         * Q2_K (the mix's default), the small matrices F16 as in V4's files. */
        c->name = "onegpu-v41-flash-shape";
        real_layout(h);
        c->engram_prime_start = 15999999;
        c->engram_real_mult = true;
        c->types[OG_DS41_W_EMBD] = c->types[OG_DS41_W_ATTN] = c->types[OG_DS41_W_ROUTED] = OG_TYPE_Q2_K;
        c->types[OG_DS41_W_SHARED] = c->types[OG_DS41_W_ENGRAM] = c->types[OG_DS41_W_ENGRAM_PROJ] = OG_TYPE_Q2_K;
        c->types[OG_DS41_W_ROUTED_DOWN] = c->types[OG_DS41_W_SHARED_DOWN] = OG_TYPE_Q3_K;
        c->types[OG_DS41_W_OUTPUT] = OG_TYPE_Q6_K;
        c->types[OG_DS41_W_AUX] = c->types[OG_DS41_W_ROUTER] = OG_TYPE_F16;
        c->split_max_bytes = 40ull << 30; /* 7 parts, as the published set */
    } else {
        return OG_ERR_NOT_FOUND;
    }
    og_ds41_config_derive(c);
    return OG_OK;
}

og_status og_ds41_config_check(const og_ds41_write_config *c, char *err, size_t errlen) {
    const og_ds41_hparams *h = &c->hp;
#define REQ(cond, ...) do { if (!(cond)) return og_fail(err, errlen, OG_ERR_INVALID_ARG, __VA_ARGS__); } while (0)
    REQ(h->n_layer >= 1 && h->n_layer <= OG_DS4_MAX_LAYER, "layers must be 1..%u", OG_DS4_MAX_LAYER);
    REQ(h->n_vocab >= 3 && h->n_vocab <= OG_DS41_MAX_COMPRESSED, "--vocab must be 3..%u (the Engram map's ids are "
        "below 2^17)", OG_DS41_MAX_COMPRESSED);
    REQ(h->n_embd >= 1 && h->n_embd <= OG_DS4_MAX_EMBD && h->n_ctx_train >= 1 && h->n_ctx_train <= OG_DS4_MAX_CTX,
        "--n-embd must be 1..%u and --ctx 1..%u", OG_DS4_MAX_EMBD, OG_DS4_MAX_CTX);
    REQ(h->n_head >= 1 && h->n_head <= OG_DS4_MAX_HEAD && h->o_group_count >= 1 && h->n_head % h->o_group_count == 0,
        "--n-head (%u) must be 1..%u and a multiple of --o-groups (%u)", h->n_head, OG_DS4_MAX_HEAD, h->o_group_count);
    REQ(h->head_dim >= 2 && h->head_dim <= OG_DS4_MAX_HEAD_DIM && h->n_rot >= 2 && h->n_rot % 2 == 0 &&
        h->n_rot <= h->head_dim && h->n_rot <= OG_ROPE_MAX_DIM,
        "--head-dim must be 2..%u and --n-rot (%u) even, within it and at most %u", OG_DS4_MAX_HEAD_DIM, h->n_rot,
        OG_ROPE_MAX_DIM);
    REQ(h->q_lora_rank >= 1 && h->q_lora_rank <= OG_DS4_MAX_RANK && h->o_lora_rank >= 1 &&
        h->o_lora_rank <= OG_DS4_MAX_RANK, "--q-lora-rank and --o-rank must be 1..%u", OG_DS4_MAX_RANK);
    REQ(h->n_swa >= 1 && h->n_swa <= OG_DS4_MAX_SWA && h->indexer_top_k >= 1 && h->indexer_top_k <= OG_DS4_MAX_TOP_K,
        "--window must be 1..%u and --top-k 1..%u", OG_DS4_MAX_SWA, OG_DS4_MAX_TOP_K);
    REQ(h->indexer_n_head >= 1 && h->indexer_n_head <= OG_DS4_MAX_INDEXER_HEAD && h->indexer_head_dim % 32 == 0 &&
        h->indexer_head_dim >= h->n_rot && h->indexer_head_dim <= OG_DS4_MAX_INDEXER_DIM,
        "--indexer-heads must be 1..%u and --indexer-dim (%u) a multiple of 32, >= --n-rot, <= %u",
        OG_DS4_MAX_INDEXER_HEAD, h->indexer_head_dim, OG_DS4_MAX_INDEXER_DIM);
    REQ(h->n_expert >= 1 && h->n_expert <= OG_DS4_MAX_EXPERT && h->n_expert_used >= 1 &&
        h->n_expert_used <= h->n_expert && h->n_expert_used <= OG_DS4_MAX_EXPERT_USED,
        "need 1 <= --n-expert-used (%u) <= --n-expert (%u) <= %u", h->n_expert_used, h->n_expert, OG_DS4_MAX_EXPERT);
    REQ(h->hc_count >= 1 && h->hc_count <= OG_DS4_MAX_HC, "--hc must be 1..%u", OG_DS4_MAX_HC);
    REQ(h->n_ff_exp >= 1 && h->n_ff_exp <= OG_DS4_MAX_FF && h->n_ff_shexp >= 1 && h->n_ff_shexp <= OG_DS4_MAX_FF,
        "--n-ff-exp must be 1..%u", OG_DS4_MAX_FF);
    REQ(h->n_engram_layer >= 1 && h->n_engram_layer <= OG_DS41_MAX_ENGRAM_LAYER && h->engram_n_head >= 1 &&
        h->engram_n_head <= OG_DS41_MAX_ENGRAM_HEAD && h->engram_max_ngram >= 2 &&
        h->engram_max_ngram <= OG_DS41_MAX_ENGRAM_NGRAM && h->engram_head_dim >= OG_DS41_ENGRAM_FP8_BLOCK &&
        h->engram_head_dim <= OG_DS41_MAX_ENGRAM_DIM && h->engram_head_dim % OG_DS41_ENGRAM_FP8_BLOCK == 0 &&
        h->engram_pad_id < h->n_vocab,
        "Engram: 1..%u layers, --engram-heads 1..%u, --engram-ngram 2..%u, --engram-dim a multiple of 32 up to %u, "
        "a pad id in the vocabulary", OG_DS41_MAX_ENGRAM_LAYER, OG_DS41_MAX_ENGRAM_HEAD, OG_DS41_MAX_ENGRAM_NGRAM,
        OG_DS41_MAX_ENGRAM_DIM);
    for (uint32_t s = 0; s < h->n_engram_layer; s++)
        REQ(h->engram_layer[s] < h->n_layer && (!s || h->engram_layer[s] > h->engram_layer[s - 1]),
            "Engram layer ids must ascend below %u", h->n_layer);
#undef REQ
    return OG_OK;
}

/* ---- keys ------------------------------------------------------------------ */

/* The compressed map (§3.2 token_map; the real one NFKC-normalizes, strips
 * accents, lowercases and collapses whitespace): tokens whose text is equal
 * once ASCII letters are lowercased share an id; ids are dense, in order of
 * each class's first token. Without a vocabulary the identity. map[V]. */
typedef struct lowered {
    char *s;
    uint64_t n;
    uint32_t id;
} lowered;

static int cmp_lowered(const void *a, const void *b) {
    const lowered *x = a, *y = b;
    const uint64_t n = x->n < y->n ? x->n : y->n;
    int c = memcmp(x->s, y->s, (size_t)n);
    if (c) return c;
    if (x->n != y->n) return x->n < y->n ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static og_status token_map(const og_model_vocab *vocab, uint32_t V, int32_t *map) {
    for (uint32_t t = 0; t < V; t++) map[t] = (int32_t)t;
    if (!vocab) return OG_OK;
    lowered *l = calloc(V, sizeof *l);
    uint32_t *rep = malloc(V * sizeof *rep);
    og_status st = l && rep ? OG_OK : OG_ERR_NOMEM;
    for (uint32_t t = 0; t < V && !st; t++) {
        const og_str *s = &vocab->tokens[t];
        if (!(l[t].s = malloc(s->n + 1))) st = OG_ERR_NOMEM;
        for (uint64_t i = 0; !st && i < s->n; i++) l[t].s[i] = (char)tolower((unsigned char)s->s[i]);
        l[t].n = s->n;
        l[t].id = t;
    }
    if (!st) {
        qsort(l, V, sizeof *l, cmp_lowered);
        for (uint32_t i = 0; i < V; i++) /* each class's first (lowest) token */
            rep[l[i].id] = i && l[i].n == l[i - 1].n && !memcmp(l[i].s, l[i - 1].s, (size_t)l[i].n) ? rep[l[i - 1].id]
                                                                                                      : l[i].id;
        int32_t next = 0;
        for (uint32_t t = 0; t < V; t++) map[t] = rep[t] == t ? next++ : map[rep[t]];
    }
    for (uint32_t t = 0; l && t < V; t++) free(l[t].s);
    free(l);
    free(rep);
    return st;
}

static og_status put_keys(og_gguf_writer *w, const og_ds41_write_config *c, const int32_t *tmap,
                          const uint64_t *type_bytes) {
    const og_ds41_hparams *h = &c->hp;
    og_status st;
#define K(expr) do { if ((st = (expr))) return st; } while (0)
#define KU(key, v) K(og_gguf_writer_set_u32(w, "deepseek41." key, (v)))
#define KF(key, v) K(og_gguf_writer_set_f32(w, "deepseek41." key, (v)))
#define KA(key, t, v, n) K(og_gguf_writer_set_arr(w, "deepseek41." key, t, v, n))
    K(og_gguf_writer_set_general(w, "deepseek41", c->name ? c->name : "onegpu-ds41-synthetic", type_bytes));
    OG_DS4_WRITE_SHARED_KEYS(KU, KF, h);
    /* vcruz305 writes three more ratios for the absent DSpark blocks (§3.2) */
    K(og_ds4_write_layer_keys(w, "deepseek41", h->compress_ratio, h->n_layer + 3, h->swiglu_clamp_exp,
                              h->swiglu_clamp_shexp, h->n_layer));
    /* the candidate keys (decision 1: small files exercise the candidate mask) */
    if (h->candidate_source >= 0) KU("attention.candidate_source_layer_id", (uint32_t)h->candidate_source);
    KU("attention.candidate_block_size", h->candidate_block_size);
    KU("attention.candidate_topk_blocks", h->candidate_topk_blocks);
    K(og_gguf_writer_set_str(w, "deepseek41.rope.scaling.type", "yarn"));
    KU("expert_shared_feed_forward_length", h->n_ff_shexp);
    KU("expert_gating_func", OG_DS4_GATING_SQRT_SOFTPLUS);
    K(og_gguf_writer_set_bool(w, "deepseek41.expert_weights_norm", h->expert_weights_norm));
    KU("hash_layer_count", 0);
    /* the nine Engram keys */
    int32_t ids[OG_DS41_MAX_ENGRAM_LAYER];
    uint64_t primes[OG_DS41_MAX_ENGRAM_LAYER * OG_DS41_MAX_ENGRAM_BUCKET];
    uint64_t offsets[OG_DS41_MAX_ENGRAM_LAYER * OG_DS41_MAX_ENGRAM_BUCKET];
    uint64_t mults[OG_DS41_MAX_ENGRAM_LAYER * OG_DS41_MAX_ENGRAM_NGRAM];
    const uint32_t ne = h->n_engram_layer, nb = h->engram_n_bucket, ng = h->engram_max_ngram;
    for (uint32_t s = 0; s < ne; s++) {
        ids[s] = (int32_t)h->engram_layer[s];
        for (uint32_t b = 0; b < nb; b++) {
            primes[s * nb + b] = h->engram_prime[s][b];
            offsets[s * nb + b] = h->engram_offset[s][b];
        }
        for (uint32_t k = 0; k < ng; k++) mults[s * ng + k] = h->engram_mult[s][k];
    }
    KA("engram.layer_ids", OG_GGUF_INT32, ids, ne);
    KU("engram.head_count", h->engram_n_head);
    KU("engram.key_length", h->engram_head_dim);
    KU("engram.max_ngram_size", ng);
    KU("engram.pad_id", h->engram_pad_id);
    KA("engram.primes", OG_GGUF_UINT64, primes, (uint64_t)ne * nb);
    KA("engram.offsets", OG_GGUF_UINT64, offsets, (uint64_t)ne * nb);
    KA("engram.multipliers", OG_GGUF_UINT64, mults, (uint64_t)ne * ng);
    KA("engram.token_map", OG_GGUF_INT32, tmap, h->n_vocab);
#undef K
#undef KU
#undef KF
#undef KA
    return OG_OK;
}

/* ---- tensors --------------------------------------------------------------- */

typedef struct wbuild {
    const og_ds41_write_config *c;
    og_ds41_tensor_id *ids; /* [n] the kind of each tensor added */
    size_t n;
    float *row;
    size_t row_cap;
} wbuild;

static og_ggml_type type_of(const og_ds41_write_config *c, og_ds41_wclass wc) {
    return wc >= OG_DS41_W_NORM ? OG_TYPE_F32 : c->types[wc];
}

/* og_model_write_row_fn over a kind (ctx: its og_ds41_tensor_id) */
static void kind_row(const void *ctx, int64_t ne0, uint64_t *rng, float *x) {
    const og_ds41_tensor_id id = *(const og_ds41_tensor_id *)ctx;
    float gain = 1.0f, amp = -1.0f, offset = 0.0f; /* amp >= 0: uniform offset +- amp, not fan-in scaled */
    switch (id) {
    case OG_DS41_TOKEN_EMBD: gain = sqrtf((float)ne0); break;
    case OG_DS41_OUTPUT: gain = 4.0f; break;
    case OG_DS41_ENGRAM_EMBD: amp = sqrtf(3.0f); break; /* unit std: the gathered rows feed engram_wkv */
    case OG_DS41_ATTN_SINKS: case OG_DS41_HC_ATTN_BASE: case OG_DS41_HC_FFN_BASE: amp = 1.0f; break;
    case OG_DS41_HC_ATTN_SCALE: case OG_DS41_HC_FFN_SCALE: amp = 0.25f; offset = 0.75f; break;
    case OG_DS41_EXP_PROBS_B: case OG_DS41_EXP_PROBS_B_VL: amp = 0.1f; break;
    default:
        if (og_ds41_tensors[id].wclass == OG_DS41_W_NORM || og_ds41_tensors[id].wclass == OG_DS41_W_F32M)
            amp = 0.1f, offset = 1.0f;
        break;
    }
    const float a = amp >= 0 ? amp : sqrtf(3.0f) * gain / sqrtf((float)ne0);
    for (int64_t j = 0; j < ne0; j++) x[j] = offset + a * (float)(2.0 * og_rand_unit(rng) - 1.0);
}

static og_status fill(void *ctx, uint64_t i, const og_gguf_tensor *t, void *buf, char *err, size_t errlen) {
    wbuild *b = ctx;
    return og_model_write_rows(t, buf, b->c->seed, kind_row, &b->ids[i], &b->row, &b->row_cap, err, errlen);
}

/* Reads the written file back as the loader will; its roles must be c's. One
 * info line per part. */
static og_status self_check(const og_ds41_write_config *c, const char *first, uint32_t n_parts, const og_logger *lg,
                            char *err, size_t errlen) {
    og_gguf *g;
    og_status st = og_gguf_open(first, OG_GGUF_HEADER_ONLY, &g, err, errlen);
    if (st) return st;
    og_ds41_hparams *hp = malloc(sizeof *hp);
    char e2[512] = "out of memory";
    st = hp ? og_ds41_hparams_read(g, NULL, hp, e2, sizeof e2) : OG_ERR_NOMEM;
    if (!st) st = og_ds41_tensors_check(g, hp, e2, sizeof e2);
    for (uint32_t il = 0; !st && il < hp->n_layer; il++) {
        const og_ds41_layer *a = &hp->layer[il], *want = &c->hp.layer[il];
        if (a->is_kv_source != want->is_kv_source || a->is_index_source != want->is_index_source ||
            a->is_key_owner != want->is_key_owner || a->has_engram != want->has_engram)
            st = og_fail(e2, sizeof e2, OG_ERR_FORMAT, "layer %u's roles read back differently", il);
    }
    if (!st && hp->candidate_source != c->hp.candidate_source)
        st = og_fail(e2, sizeof e2, OG_ERR_FORMAT, "candidate source %d read back as %d", c->hp.candidate_source,
                     hp->candidate_source);
    for (uint32_t k = 0; !st && n_parts > 1 && k < n_parts; k++) {
        og_gguf_part part;
        char sz[32];
        if (!og_gguf_part_at(g, k, &part))
            og_log(lg, OG_LOG_INFO, "part %u of %u: %s, %llu bytes (%s), %llu tensors", k + 1, n_parts, part.path,
                   (unsigned long long)part.file_size, og_fmt_bytes(part.file_size, sz, sizeof sz),
                   (unsigned long long)part.n_tensors);
    }
    free(hp);
    og_gguf_close(g);
    return st ? og_fail(err, errlen, st, "the written file does not read back (a bug): %s", e2) : OG_OK;
}

og_status og_ds41_write(const og_ds41_write_config *c, const og_model_vocab *vocab, const char *path, bool sparse,
                        const og_logger *lg, char *err, size_t errlen) {
    og_status st = og_ds41_config_check(c, err, errlen);
    if (st) return st;
    const og_ds41_hparams *h = &c->hp;
    if (vocab && vocab->n_vocab != h->n_vocab)
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "tokenizer has %u tokens but the model %u", vocab->n_vocab,
                       h->n_vocab);
    og_gguf_writer *w;
    if ((st = og_gguf_writer_create(32, &w))) return og_fail(err, errlen, st, "out of memory");
    wbuild b = {.c = c};
    uint64_t type_bytes[OG_TYPE_COUNT] = {0};
    uint32_t fallbacks[OG_TYPE_COUNT][OG_TYPE_COUNT] = {{0}};
    int32_t *tmap = malloc(h->n_vocab * sizeof *tmap);
    b.ids = malloc((size_t)(h->n_layer + 1) * OG_DS41_N_TENSOR * sizeof *b.ids);
    if (!tmap || !b.ids || token_map(vocab, h->n_vocab, tmap)) {
        st = og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (int il = -1; il < (int)h->n_layer; il++)
        for (int id = 0; id < OG_DS41_N_TENSOR; id++) {
            if (!og_ds41_tensor_in_layer(h, (og_ds41_tensor_id)id, il)) continue;
            int64_t ne[3];
            uint32_t nd;
            char name[96];
            og_ds41_tensor_shape(h, (og_ds41_tensor_id)id, il, ne, &nd);
            og_ds41_tensor_name((og_ds41_tensor_id)id, OG_DS41_VCRUZ305, il, name, sizeof name);
            if ((st = og_model_write_add(w, name, type_of(c, og_ds41_tensors[id].wclass), nd, ne, sparse, fallbacks,
                                         type_bytes, err, errlen)))
                goto out;
            b.ids[b.n++] = (og_ds41_tensor_id)id;
        }
    if ((st = put_keys(w, c, tmap, type_bytes)) ||
        (vocab && (st = og_model_write_vocab(w, vocab, "deepseek-v3", &vocab->chat_template)))) {
        og_fail(err, errlen, st, "cannot write metadata: %s", og_status_str(st));
        goto out;
    }
    og_model_write_log_fallbacks(lg, fallbacks);
    uint32_t n_parts;
    char first[4200];
    st = og_model_write_out(w, path, c->split_max_bytes, sparse ? NULL : fill, &b, first, sizeof first, &n_parts, err,
                            errlen);
    if (!st) st = self_check(c, first, n_parts, lg, err, errlen);
out:
    og_gguf_writer_free(w);
    free(tmap);
    free(b.ids);
    free(b.row);
    return st;
}
