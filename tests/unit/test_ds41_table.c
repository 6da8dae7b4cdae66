/* ds41_table: deepseek41's reader of the three GGUF dialects (spec §3.2),
 * the CSA2 role derivation (§4.3.3, decision 1), the Engram self-checks and
 * og_model_describe's info (issue 14 items 2, 5, 6). Headers are built here
 * by hand with the GGUF writer (tensor data is a hole), each dialect with its
 * own key and tensor spellings written out below (not taken from the table
 * under test), so:
 *   - the same model in vcruz305, mxxm-t and antirez spelling gives the same
 *     og_model_info and the same roles, and those equal the values computed
 *     here by hand from the spec's formulas;
 *   - the real 40-layer layout (vcruz305: roles from tensor presence) gives
 *     exactly §4.3.3's role table;
 *   - each Engram self-check, each missing or foreign key and tensor is
 *     refused with an error naming it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "deepseek41.h"
#include "og_moe.h"

static char g_dir[64];

/* The small model's dims (§3.2's names): N, H, D, R, q rank, o rank, G, window,
 * IH, ID, top-k, E, used, S, F, F_sh, hc, V; Engram: EH hashes per n-gram size,
 * n-grams up to NG, ED row width. */
enum { N = 64, H = 4, D = 64, R = 16, QR = 32, OR = 16, G = 2, SWA = 8, IH = 2, ID = 32, TOPK = 4, E = 8, EU = 2,
       ES = 1, F = 32, FSH = 32, HC = 4, V = 300, EH = 2, NG = 3, ED = 32, NB = (NG - 1) * EH };

/* A layout: per layer its compress ratio and which tensors it holds. */
typedef struct layout {
    uint32_t n_layer;
    uint32_t ratio[48];
    bool kv[48], key[48], idx[48], engram[48];
    int cand;                    /* candidate_source_layer_id to write, or -1: no candidate keys */
    uint32_t cand_block, cand_topk;
} layout;

/* One change to a header (the self-check and key cases). */
typedef struct mod {
    const char *drop_key;        /* full key name not written */
    const char *drop_tensor;     /* tensor name not written */
    bool prime, offset, mult, tmap; /* which of the four below applies */
    int prime_at;                /* primes[prime_at] += prime_add */
    int64_t prime_add;
    int offset_at;               /* offsets[offset_at] += 1 */
    int mult_at;                 /* multipliers[mult_at] = mult_value */
    uint64_t mult_value;
    int tmap_at;                 /* token_map[tmap_at] = tmap_value */
    int32_t tmap_value;
    int64_t table_rows_add;      /* added to the first Engram table's rows */
    const char *set_key;         /* full key set to set_u32 (UINT32) */
    uint32_t set_u32;
    int64_t rows_key_add;        /* antirez engram.rows[0] += this */
    const char *extra_key;       /* a full key written besides (UINT32 1): another dialect's spelling */
} mod;

static const mod NOMOD = {0};

/* The 8-layer layout with one layer of every role (item 5): 0 window, 1
 * window + Engram, 2 ratio-2 source (kv, keys, indexer), 3 ratio-2 reuser, 4
 * ratio-1 source and candidate source (+ Engram), 5 ratio-1 reuser, 6
 * reindex (candidate-masked), 7 ratio-1 reuser after the reindex. */
static layout small_layout(void) {
    layout l = {.n_layer = 8, .ratio = {0, 0, 2, 2, 1, 1, 1, 1}, .cand = 4, .cand_block = 2, .cand_topk = 3};
    l.kv[2] = l.key[2] = l.idx[2] = true;
    l.kv[4] = l.key[4] = l.idx[4] = true;
    l.idx[6] = true;
    l.engram[1] = l.engram[4] = true;
    return l;
}

/* The real model's layout (§4.3.3): 40 layers, ratios [0,0, 2 x18, 1 x20];
 * compressors on 2, 8, 14, 20; indexers on 2, 8, 14, 20, 24, 28, 32, 36; keys on
 * 2, 8, 14, 20; Engram on 1 and 14; no candidate keys (vcruz305). */
static layout real_layout(void) {
    layout l = {.n_layer = 40, .cand = -1};
    for (int i = 2; i < 40; i++) l.ratio[i] = i < 20 ? 2 : 1;
    const int src[] = {2, 8, 14, 20}, idx[] = {2, 8, 14, 20, 24, 28, 32, 36};
    for (int i = 0; i < 4; i++) l.kv[src[i]] = l.key[src[i]] = true;
    for (int i = 0; i < 8; i++) l.idx[idx[i]] = true;
    l.engram[1] = l.engram[14] = true;
    return l;
}

/* Consecutive primes from 101: bucket b of Engram slot s gets prime number
 * s * NB + b (the (layer, n-gram size, head) order of §3.2). */
static uint64_t nth_prime(int n) {
    static const uint64_t p[] = {101, 103, 107, 109, 113, 127, 131, 137, 139, 149, 151, 157};
    return p[n];
}

static uint64_t table_rows(int slot) { /* the 4 primes of a slot: 101+103+107+109 = 420, 113+127+131+137 = 508 */
    uint64_t s = 0;
    for (int b = 0; b < NB; b++) s += nth_prime(slot * NB + b);
    return s;
}

/* The key name in dialect d: vcruz305 and mxxm-t spell it as llama.cpp
 * (`vc`), antirez by its HF text_config field (`hf`). */
static void key(char *buf, size_t n, og_ds41_dialect d, const char *vc, const char *hf) {
    snprintf(buf, n, "deepseek41.%s", d == OG_DS41_ANTIREZ ? hf : vc);
}

typedef struct wr {
    og_gguf_writer *w;
    og_ds41_dialect d;
    const mod *m;
} wr;

static bool dropped(const wr *x, const char *k) { return x->m->drop_key && !strcmp(x->m->drop_key, k); }

static void put_u32(const wr *x, const char *vc, const char *hf, uint32_t v) {
    char k[128];
    key(k, sizeof k, x->d, vc, hf);
    if (dropped(x, k)) return;
    if (x->m->set_key && !strcmp(x->m->set_key, k)) v = x->m->set_u32;
    assert_int_equal(og_gguf_writer_set_u32(x->w, k, v), OG_OK);
}

static void put_f32(const wr *x, const char *vc, const char *hf, float v) {
    char k[128];
    key(k, sizeof k, x->d, vc, hf);
    if (!dropped(x, k)) assert_int_equal(og_gguf_writer_set_f32(x->w, k, v), OG_OK);
}

static void put_arr(const wr *x, const char *vc, const char *hf, og_gguf_vtype t, const void *v, uint64_t n) {
    char k[128];
    key(k, sizeof k, x->d, vc, hf);
    if (!dropped(x, k)) assert_int_equal(og_gguf_writer_set_arr(x->w, k, t, v, n), OG_OK);
}

static void put_tensor(const wr *x, const char *name, og_ggml_type t, uint32_t nd, int64_t a, int64_t b, int64_t c) {
    if (x->m->drop_tensor && !strcmp(x->m->drop_tensor, name)) return;
    const int64_t ne[3] = {a, b, c};
    assert_int_equal(og_gguf_writer_add_tensor(x->w, name, t, nd, ne, NULL), OG_OK);
}

static void put_layer_tensor(const wr *x, int il, const char *vc, const char *mx, const char *az, og_ggml_type t,
                             uint32_t nd, int64_t a, int64_t b, int64_t c) {
    char name[96];
    snprintf(name, sizeof name, "blk.%d.%s", il, x->d == OG_DS41_MXXM_T && mx ? mx : x->d == OG_DS41_ANTIREZ && az ? az : vc);
    put_tensor(x, name, t, nd, a, b, c);
}

/* Writes the header of layout l in dialect d with change m to path. */
static void build(const char *path, og_ds41_dialect d, const layout *l, const mod *m) {
    wr x = {NULL, d, m};
    assert_int_equal(og_gguf_writer_create(32, &x.w), OG_OK);
    assert_int_equal(og_gguf_writer_set_str(x.w, "general.architecture", "deepseek41"), OG_OK);
    if (m->extra_key) assert_int_equal(og_gguf_writer_set_u32(x.w, m->extra_key, 1), OG_OK);
    put_u32(&x, "block_count", "num_hidden_layers", l->n_layer);
    put_u32(&x, "embedding_length", "hidden_size", N);
    put_u32(&x, "context_length", "max_position_embeddings", 4096);
    put_u32(&x, "attention.head_count", "num_attention_heads", H);
    put_u32(&x, "attention.head_count_kv", "num_key_value_heads", 1);
    put_u32(&x, "attention.key_length", "head_dim", D);
    if (d != OG_DS41_ANTIREZ) put_u32(&x, "attention.value_length", "", D);
    put_u32(&x, "rope.dimension_count", "qk_rope_head_dim", R);
    put_u32(&x, "attention.q_lora_rank", "q_lora_rank", QR);
    put_u32(&x, "attention.output_lora_rank", "o_lora_rank", OR);
    put_u32(&x, "attention.output_group_count", "o_groups", G);
    put_u32(&x, "attention.sliding_window", "sliding_window", SWA);
    int32_t ratios[51];
    for (uint32_t i = 0; i < l->n_layer + 3; i++) ratios[i] = i < l->n_layer ? (int32_t)l->ratio[i] : 0;
    put_arr(&x, "attention.compress_ratios", "compress_ratios", OG_GGUF_INT32, ratios, l->n_layer + 3);
    put_u32(&x, "attention.indexer.head_count", "index_n_heads", IH);
    put_u32(&x, "attention.indexer.key_length", "index_head_dim", ID);
    put_u32(&x, "attention.indexer.top_k", "index_topk", TOPK);
    put_u32(&x, "expert_count", "n_routed_experts", E);
    put_u32(&x, "expert_used_count", "num_experts_per_tok", EU);
    put_u32(&x, "expert_shared_count", "n_shared_experts", ES);
    put_u32(&x, "expert_feed_forward_length", "moe_intermediate_size", F);
    if (d != OG_DS41_ANTIREZ) put_u32(&x, "expert_shared_feed_forward_length", "", FSH);
    put_f32(&x, "expert_weights_scale", "routed_scaling_factor", 1.5f);
    {
        char k[128];
        key(k, sizeof k, d, "expert_weights_norm", "norm_topk_prob");
        assert_int_equal(og_gguf_writer_set_bool(x.w, k, true), OG_OK);
    }
    if (d == OG_DS41_ANTIREZ) {
        assert_int_equal(og_gguf_writer_set_str(x.w, "deepseek41.scoring_func", "sqrtsoftplus"), OG_OK);
    } else {
        put_u32(&x, "expert_gating_func", "", 4);
        put_u32(&x, "hash_layer_count", "", 0);
    }
    float clamp[48];
    for (uint32_t i = 0; i < l->n_layer; i++) clamp[i] = 10.0f;
    put_arr(&x, "swiglu_clamp_exp", "swiglu_limit", OG_GGUF_FLOAT32, clamp, l->n_layer);
    put_u32(&x, "hyper_connection.count", "hc_mult", HC);
    put_u32(&x, "hyper_connection.sinkhorn_iterations", "hc_sinkhorn_iters", 20);
    put_f32(&x, "hyper_connection.epsilon", "hc_eps", 1e-6f);
    put_f32(&x, "attention.layer_norm_rms_epsilon", "rms_norm_eps", 1e-20f);
    /* RoPE: antirez stores the thetas as u32 and the original context as f32 (§3.2) */
    if (d == OG_DS41_ANTIREZ) {
        put_u32(&x, "", "rope_theta", 10000);
        put_u32(&x, "", "compress_rope_theta", 160000);
        put_f32(&x, "", "rope_scaling.original_max_position_embeddings", 65536.0f);
    } else {
        put_f32(&x, "rope.freq_base", "", 10000.0f);
        put_f32(&x, "attention.compress_rope_freq_base", "", 160000.0f);
        put_u32(&x, "rope.scaling.original_context_length", "", 65536);
    }
    {
        char k[128];
        key(k, sizeof k, d, "rope.scaling.type", "rope_scaling.type");
        assert_int_equal(og_gguf_writer_set_str(x.w, k, "yarn"), OG_OK);
    }
    put_f32(&x, "rope.scaling.factor", "rope_scaling.factor", 16.0f);
    put_f32(&x, "rope.scaling.yarn_beta_fast", "rope_scaling.beta_fast", 32.0f);
    put_f32(&x, "rope.scaling.yarn_beta_slow", "rope_scaling.beta_slow", 1.0f);
    /* the source-layer keys: mxxm-t under attention., antirez raw */
    if (d != OG_DS41_VCRUZ305) {
        int32_t kv[48], ix[48];
        uint64_t nk = 0, ni = 0;
        for (uint32_t i = 0; i < l->n_layer; i++) {
            if (l->kv[i]) kv[nk++] = (int32_t)i;
            if (l->idx[i]) ix[ni++] = (int32_t)i;
        }
        put_arr(&x, "attention.kv_source_layer_ids", "kv_source_layer_ids", OG_GGUF_INT32, kv, nk);
        put_arr(&x, "attention.index_source_layer_ids", "index_source_layer_ids", OG_GGUF_INT32, ix, ni);
    }
    if (l->cand >= 0) {
        put_u32(&x, "attention.candidate_source_layer_id", "candidate_source_layer_id", (uint32_t)l->cand);
        put_u32(&x, "attention.candidate_block_size", "candidate_block_size", l->cand_block);
        put_u32(&x, "attention.candidate_topk_blocks", "candidate_topk_blocks", l->cand_topk);
    }
    /* Engram constants (the same names in every dialect) */
    int32_t ids[4];
    uint64_t ne = 0, primes[4 * NB], offsets[4 * NB], mults[4 * NG];
    for (uint32_t i = 0; i < l->n_layer; i++)
        if (l->engram[i]) ids[ne++] = (int32_t)i;
    for (uint64_t s = 0; s < ne; s++) {
        uint64_t run = 0;
        for (int b = 0; b < NB; b++) {
            primes[s * NB + b] = nth_prime((int)(s * NB + b));
            offsets[s * NB + b] = run;
            run += primes[s * NB + b];
        }
        for (int k = 0; k < NG; k++) mults[s * NG + k] = 2 * (1000003 * (s + 1) + 7919 * (uint64_t)k) + 1;
    }
    if (m->prime) primes[m->prime_at] = (uint64_t)((int64_t)primes[m->prime_at] + m->prime_add);
    if (m->offset) offsets[m->offset_at] += 1;
    if (m->mult) mults[m->mult_at] = m->mult_value;
    int32_t tmap[V];
    for (int t = 0; t < V; t++) tmap[t] = t % 50; /* 50 compressed ids */
    if (m->tmap) tmap[m->tmap_at] = m->tmap_value;
    put_arr(&x, "engram.layer_ids", "engram.layer_ids", OG_GGUF_INT32, ids, ne);
    put_u32(&x, "engram.head_count", "engram.head_count", EH);
    put_u32(&x, "engram.key_length", "engram.key_length", ED);
    put_u32(&x, "engram.max_ngram_size", "engram.max_ngram_size", NG);
    put_u32(&x, "engram.pad_id", "engram.pad_id", 2);
    put_arr(&x, "engram.primes", "engram.primes", OG_GGUF_UINT64, primes, ne * NB);
    put_arr(&x, "engram.offsets", "engram.offsets", OG_GGUF_UINT64, offsets, ne * NB);
    put_arr(&x, "engram.multipliers", "engram.multipliers", OG_GGUF_UINT64, mults, ne * NG);
    put_arr(&x, "engram.token_map", "engram.token_map", OG_GGUF_INT32, tmap, V);
    if (d == OG_DS41_ANTIREZ) {
        uint64_t rows[4];
        for (uint64_t s = 0; s < ne; s++) rows[s] = table_rows((int)s) + (s ? 0 : (uint64_t)m->rows_key_add);
        put_arr(&x, "engram.rows", "engram.rows", OG_GGUF_UINT64, rows, ne);
        assert_int_equal(og_gguf_writer_set_str(x.w, "deepseek41.engram.encoding", "e4m3_e8m0_32_row264"), OG_OK);
    }
    /* tensors (§3.2's table, shapes [in, out]) */
    const og_ggml_type T = OG_TYPE_F32;
    put_tensor(&x, "token_embd.weight", T, 2, N, V, 1);
    put_tensor(&x, "output_norm.weight", T, 1, N, 1, 1);
    put_tensor(&x, "output.weight", T, 2, N, V, 1);
    for (int il = 0, slot = 0; il < (int)l->n_layer; il++) {
        put_layer_tensor(&x, il, "hc_attn_fn.weight", NULL, NULL, T, 2, HC * N, (2 + HC) * HC, 1);
        put_layer_tensor(&x, il, "hc_attn_base.weight", NULL, NULL, T, 1, (2 + HC) * HC, 1, 1);
        put_layer_tensor(&x, il, "hc_attn_scale.weight", NULL, NULL, T, 1, 3, 1, 1);
        put_layer_tensor(&x, il, "hc_ffn_fn.weight", NULL, NULL, T, 2, HC * N, (2 + HC) * HC, 1);
        put_layer_tensor(&x, il, "hc_ffn_base.weight", NULL, NULL, T, 1, (2 + HC) * HC, 1, 1);
        put_layer_tensor(&x, il, "hc_ffn_scale.weight", NULL, NULL, T, 1, 3, 1, 1);
        put_layer_tensor(&x, il, "attn_norm.weight", NULL, NULL, T, 1, N, 1, 1);
        put_layer_tensor(&x, il, "ffn_norm.weight", NULL, NULL, T, 1, N, 1, 1);
        put_layer_tensor(&x, il, "attn_q_a.weight", NULL, NULL, T, 2, N, QR, 1);
        put_layer_tensor(&x, il, "attn_q_a_norm.weight", NULL, NULL, T, 1, QR, 1, 1);
        put_layer_tensor(&x, il, "attn_q_b.weight", NULL, NULL, T, 2, QR, H * D, 1);
        put_layer_tensor(&x, il, "attn_kv.weight", NULL, NULL, T, 2, N, D, 1);
        put_layer_tensor(&x, il, "attn_kv_a_norm.weight", NULL, NULL, T, 1, D, 1, 1);
        put_layer_tensor(&x, il, "attn_sinks.weight", NULL, NULL, T, 1, H, 1, 1);
        put_layer_tensor(&x, il, "attn_output_a.weight", NULL, NULL, T, 2, H * D / G, G * OR, 1);
        put_layer_tensor(&x, il, "attn_output_b.weight", NULL, NULL, T, 2, G * OR, N, 1);
        if (l->kv[il]) {
            put_layer_tensor(&x, il, "attn_compressor_kv.weight", NULL, NULL, T, 2, N, D, 1);
            put_layer_tensor(&x, il, "attn_compressor_norm.weight", NULL, NULL, T, 1, D, 1, 1);
            if (l->ratio[il] == 2) put_layer_tensor(&x, il, "attn_compressor_gate.weight", NULL, NULL, T, 2, N, D, 1);
        }
        if (l->key[il]) {
            put_layer_tensor(&x, il, "indexer.attn_k.weight", "indexer_compressor_kv.weight", NULL, T, 2, D, ID, 1);
            put_layer_tensor(&x, il, "indexer.k_norm.weight", "indexer_compressor_norm.weight", NULL, T, 1, ID, 1, 1);
        }
        if (l->idx[il]) {
            put_layer_tensor(&x, il, "indexer.attn_q_b.weight", NULL, NULL, T, 2, QR, IH * ID, 1);
            put_layer_tensor(&x, il, "indexer.proj.weight", NULL, NULL, T, 2, N, IH, 1);
        }
        if (l->engram[il]) {
            const int64_t rows = (int64_t)table_rows(slot) + (slot ? 0 : m->table_rows_add);
            if (d == OG_DS41_ANTIREZ) /* FP8 rows: ED E4M3 bytes + ED/32 E8M0 scales */
                put_layer_tensor(&x, il, "engram_embd.weight", NULL, NULL, OG_TYPE_I8, 2, ED + ED / 32, rows, 1);
            else
                put_layer_tensor(&x, il, "engram_embd.weight", "engram_embed.weight", NULL, T, 2, ED, rows, 1);
            put_layer_tensor(&x, il, "engram_wkv.weight", NULL, "engram_kv.weight", T, 2, NB * ED, (HC + 1) * N, 1);
            put_layer_tensor(&x, il, "engram_q.weight", NULL, "engram_q_norm.weight", T, 2, N, HC, 1);
            put_layer_tensor(&x, il, "engram_k.weight", NULL, "engram_k_norm.weight", T, 2, N, HC, 1);
            slot++;
        }
        put_layer_tensor(&x, il, "ffn_gate_inp.weight", NULL, NULL, T, 2, N, E, 1);
        put_layer_tensor(&x, il, "exp_probs_b.bias", NULL, NULL, T, 1, E, 1, 1);
        if (d != OG_DS41_MXXM_T) put_layer_tensor(&x, il, "exp_probs_b_vl.bias", NULL, NULL, T, 1, E, 1, 1);
        put_layer_tensor(&x, il, "ffn_gate_exps.weight", NULL, NULL, T, 3, N, F, E);
        put_layer_tensor(&x, il, "ffn_up_exps.weight", NULL, NULL, T, 3, N, F, E);
        put_layer_tensor(&x, il, "ffn_down_exps.weight", NULL, NULL, T, 3, F, N, E);
        put_layer_tensor(&x, il, "ffn_gate_shexp.weight", NULL, NULL, T, 2, N, FSH, 1);
        put_layer_tensor(&x, il, "ffn_up_shexp.weight", NULL, NULL, T, 2, N, FSH, 1);
        put_layer_tensor(&x, il, "ffn_down_shexp.weight", NULL, NULL, T, 2, FSH, N, 1);
    }
    char err[256];
    assert_int_equal(og_gguf_writer_write(x.w, path, NULL, NULL, err, sizeof err), OG_OK);
    og_gguf_writer_free(x.w);
}

/* Reads path: the hparams (heap: the struct is large) and og_model_describe's
 * info; the reader's status (then describe's) with err. */
static og_status read_path(const char *path, og_ds41_hparams *hp, og_model_info *info, char *err, size_t errlen) {
    og_gguf *g;
    og_status st = og_gguf_open(path, OG_GGUF_HEADER_ONLY, &g, err, errlen);
    if (st) return st;
    og_logger quiet = {.level = OG_LOG_ERROR};
    st = og_ds41_hparams_read(g, &quiet, hp, err, errlen);
    if (!st) st = og_model_describe(g, &quiet, info, err, errlen);
    og_gguf_close(g);
    return st;
}

static void case_path(char *buf, size_t n, const char *tag) { snprintf(buf, n, "%s/%s.gguf", g_dir, tag); }

/* The same model in the three dialects: one og_model_info, one set of roles,
 * both equal to the spec's formulas evaluated here. */
static void test_dialects_agree(void **state) {
    (void)state;
    const layout l = small_layout();
    og_ds41_hparams *hp = calloc(OG_DS41_N_DIALECT, sizeof *hp);
    og_model_info info[OG_DS41_N_DIALECT];
    for (int d = 0; d < OG_DS41_N_DIALECT; d++) {
        char path[160], err[512] = "";
        case_path(path, sizeof path, og_ds41_dialect_name((og_ds41_dialect)d));
        build(path, (og_ds41_dialect)d, &l, &NOMOD);
        og_status st = read_path(path, &hp[d], &info[d], err, sizeof err);
        if (st) fail_msg("%s: %d %s", og_ds41_dialect_name((og_ds41_dialect)d), st, err);
        assert_int_equal(hp[d].dialect, d);
        assert_int_equal(hp[d].roles_explicit, d != OG_DS41_VCRUZ305);
        /* the loader binds every weight in each dialect's spelling (the holes read as zeros;
         * antirez's I8 FP8 rows as raw rows) and gives describe's info plus the experts */
        og_model *m;
        og_logger quiet = {.level = OG_LOG_ERROR};
        st = og_model_load(path, &quiet, &m, err, sizeof err);
        if (st) fail_msg("%s: load: %d %s", og_ds41_dialect_name((og_ds41_dialect)d), st, err);
        og_model_info li = *og_model_get_info(m);
        assert_non_null(li.moe);
        for (uint32_t il = 0; il < li.n_layer; il++) {
            assert_true(li.moe[il].moe);
            assert_int_equal(li.moe[il].gate_exps.n_rows, (int64_t)F * E);
            assert_int_equal(li.moe[il].down_sh.K, FSH);
            assert_true(li.moe[il].swiglu_clamp == 10.0f);
        }
        li.moe = NULL;
        assert_memory_equal(&li, &info[d], sizeof li);
        og_model_free(m);
        unlink(path);
    }
    /* by hand: fixed = 8 layers x window 8 x D 64 + layer 2's pending ratio-2
     * group (2 tokens x (kv + gate) x 64) = 4096 + 256; per token = kv rows
     * 64/2 (layer 2) + 64/1 (layer 4) + index keys 32/2 + 32/1 = 144 */
    for (int d = 0; d < OG_DS41_N_DIALECT; d++) {
        const og_model_info *a = &info[d];
        assert_string_equal(a->arch, "deepseek41");
        assert_int_equal(a->n_layer, 8);
        assert_int_equal(a->n_embd, N);
        assert_int_equal(a->n_vocab, V);
        assert_int_equal(a->n_ctx_train, 4096);
        assert_int_equal(a->n_expert, E);
        assert_int_equal(a->n_expert_used, EU);
        assert_int_equal(a->n_expert_shared, ES);
        assert_int_equal(a->n_ff_exp, F);
        assert_int_equal(a->kv_elems_fixed, 8 * SWA * D + 2 * 2 * D);
        assert_true(a->kv_elems_per_token == 64.0 / 2 + 64 + 32.0 / 2 + 32);
        assert_int_equal(a->kv_elem_bytes, 4);
        assert_false(a->kv_paged);
        assert_null(a->moe);
        /* host-only: token_embd (F32) + the two tables (F32 rows of ED; antirez FP8 rows of ED + ED/32 bytes) */
        const uint64_t row = d == OG_DS41_ANTIREZ ? ED + ED / 32 : 4 * ED;
        assert_int_equal(a->host_only_bytes, 4ull * N * V + (420 + 508) * row);
        /* everything else equal to the vcruz305 reading */
        og_model_info x = *a, y = info[0];
        x.host_only_bytes = y.host_only_bytes = 0;
        assert_memory_equal(&x, &y, sizeof x);
    }
    for (int d = 1; d < OG_DS41_N_DIALECT; d++) {
        assert_memory_equal(hp[d].layer, hp[0].layer, sizeof hp[0].layer);
        assert_int_equal(hp[d].candidate_source, 4);
        assert_int_equal(hp[d].candidate_block_size, 2);
        assert_int_equal(hp[d].candidate_topk_blocks, 3);
        assert_memory_equal(hp[d].engram_prime, hp[0].engram_prime, sizeof hp[0].engram_prime);
        assert_memory_equal(hp[d].engram_offset, hp[0].engram_offset, sizeof hp[0].engram_offset);
        assert_memory_equal(hp[d].engram_mult, hp[0].engram_mult, sizeof hp[0].engram_mult);
        assert_true(hp[d].rope_comp.base == 160000.0f && hp[d].rope_comp.n_ctx_orig == 65536);
        assert_true(hp[d].rope_comp.freq_scale == 1.0f / 16 && hp[d].rope_comp.ext_factor == 1.0f);
        assert_true(hp[d].rms_eps == 1e-20f && hp[d].hc_eps == 1e-6f);
        assert_int_equal(hp[d].n_ff_shexp, FSH);
    }
    /* the roles of item 5, as the layout comment says */
    const og_ds41_layer *L = hp[0].layer;
    assert_int_equal(L[0].ratio, 0);
    assert_int_equal(L[0].kv_source, -1);
    assert_true(L[1].has_engram && L[1].engram_slot == 0 && L[1].kv_source == -1);
    assert_true(L[2].is_kv_source && L[2].is_key_owner && L[2].is_index_source && L[2].kv_source == 2);
    assert_true(L[2].key_owner == 2 && L[2].topk_source == 2 && !L[2].candidate_masked);
    assert_true(!L[3].is_kv_source && L[3].kv_source == 2 && L[3].topk_source == 2 && L[3].ratio == 2);
    assert_true(L[4].is_kv_source && L[4].is_candidate_source && L[4].has_engram && L[4].engram_slot == 1);
    assert_true(L[5].kv_source == 4 && L[5].topk_source == 4 && !L[5].is_index_source);
    assert_true(L[6].is_index_source && !L[6].is_kv_source && L[6].key_owner == 4 && L[6].kv_source == 4);
    assert_true(L[6].candidate_masked && !L[6].is_candidate_source);
    assert_true(L[7].kv_source == 4 && L[7].topk_source == 6 && !L[7].candidate_masked);
    /* Engram constants and the token map */
    assert_int_equal(hp[0].engram_rows[0], 420);
    assert_int_equal(hp[0].engram_rows[1], 508);
    assert_int_equal(hp[0].engram_offset[1][3], 113 + 127 + 131);
    assert_int_equal(hp[0].engram_n_bucket, NB);
    assert_int_equal(hp[0].engram_pad_id, 2);
    assert_int_equal(hp[0].n_compressed, 50);
    {   /* the token map is read from the open file (og_ds41_hparams.token_map points into it) */
        char path[160], err[512] = "";
        case_path(path, sizeof path, "map");
        build(path, OG_DS41_ANTIREZ, &l, &NOMOD);
        og_gguf *g;
        og_logger quiet = {.level = OG_LOG_ERROR};
        assert_int_equal(og_gguf_open(path, OG_GGUF_HEADER_ONLY, &g, err, sizeof err), OG_OK);
        assert_int_equal(og_ds41_hparams_read(g, &quiet, &hp[1], err, sizeof err), OG_OK);
        assert_int_equal(og_ds41_token_map(&hp[1], 2), 2);
        assert_int_equal(og_ds41_token_map(&hp[1], 257), 7);
        assert_int_equal(og_ds41_token_map(&hp[1], V), UINT32_MAX);
        og_gguf_close(g);
        unlink(path);
    }
    assert_false(hp[0].engram_fp8);
    assert_true(hp[2].engram_fp8);
    free(hp);
}

/* vcruz305 (no source keys, no candidate keys) on the real layout: §4.3.3's
 * role table exactly, candidate source layer 20 with 2048 blocks of 8. */
static void test_real_roles(void **state) {
    (void)state;
    const layout l = real_layout();
    char path[160], err[512] = "";
    case_path(path, sizeof path, "real");
    build(path, OG_DS41_VCRUZ305, &l, &NOMOD);
    og_ds41_hparams *hp = calloc(1, sizeof *hp);
    og_model_info info;
    og_status st = read_path(path, hp, &info, err, sizeof err);
    if (st) fail_msg("%d %s", st, err);
    assert_false(hp->roles_explicit);
    assert_int_equal(hp->candidate_source, 20);
    assert_int_equal(hp->candidate_block_size, 8);
    assert_int_equal(hp->candidate_topk_blocks, 2048);
    for (int il = 0; il < 40; il++) {
        const og_ds41_layer *L = &hp->layer[il];
        const bool full2 = il == 2 || il == 8 || il == 14, full1 = il == 20;
        const bool reindex = il == 24 || il == 28 || il == 32 || il == 36;
        const int src = il < 2 ? -1 : il < 8 ? 2 : il < 14 ? 8 : il < 20 ? 14 : 20;
        const int topk = il < 2 ? -1 : il < 24 ? src : il / 4 * 4; /* 24..27 -> 24, ..., 36..39 -> 36 */
        if (L->ratio != (uint32_t)(il < 2 ? 0 : il < 20 ? 2 : 1) || L->kv_source != src ||
            L->is_kv_source != (full2 || full1) || L->is_key_owner != (full2 || full1) ||
            L->is_index_source != (full2 || full1 || reindex) || L->key_owner != (L->is_index_source ? src : -1) ||
            L->topk_source != topk || L->is_candidate_source != full1 || L->candidate_masked != reindex ||
            L->has_engram != (il == 1 || il == 14))
            fail_msg("layer %d: ratio %u kv_source %d kv %d key %d idx %d key_owner %d topk %d cand %d masked %d engram %d",
                     il, L->ratio, L->kv_source, L->is_kv_source, L->is_key_owner, L->is_index_source, L->key_owner,
                     L->topk_source, L->is_candidate_source, L->candidate_masked, L->has_engram);
    }
    /* per token: 3 ratio-2 sources x 512/2... here D 64: 3 x 32 + 64 = 160 rows; keys 3 x 16 + 32 = 80 */
    assert_true(info.kv_elems_per_token == 3 * 32.0 + 64 + 3 * 16.0 + 32);
    assert_int_equal(info.kv_elems_fixed, 40 * SWA * D + 3 * 2 * 2 * D);
    free(hp);
    unlink(path);
}

/* Each self-check, missing or foreign key / tensor: refused, naming it. */
static void test_refusals(void **state) {
    (void)state;
    const layout l = small_layout();
    typedef struct {
        const char *what;
        og_ds41_dialect d;
        mod m;
        og_status want;
        const char *needle;
    } refusal;
#define M(...) {__VA_ARGS__}
    static const refusal cases[] = {
        /* Engram self-checks: WHICH check, with the values */
        {"primes sum != rows", OG_DS41_VCRUZ305, M(.table_rows_add = 1), OG_ERR_FORMAT,
         "layer 1's 4 primes sum to 420 but its table blk.1.engram_embd.weight has 421 rows"},
        {"not a prime", OG_DS41_VCRUZ305, M(.prime = true, .prime_at = 5, .prime_add = 1), OG_ERR_FORMAT,
         "engram.primes[5] = 128 is not a prime"},
        {"a prime reused", OG_DS41_MXXM_T, M(.prime = true, .prime_at = 1, .prime_add = -2), OG_ERR_FORMAT,
         "engram.primes[1] = 101 repeats entry 0"},
        {"offsets not the running sums", OG_DS41_VCRUZ305, M(.offset = true, .offset_at = 6), OG_ERR_FORMAT,
         "engram.offsets[6] = 241 but the running sum of layer 4's primes before bucket 2 is 240"},
        {"even multiplier", OG_DS41_ANTIREZ, M(.mult = true, .mult_at = 4, .mult_value = 1000), OG_ERR_FORMAT,
         "engram.multipliers[4] = 1000 is not an odd number below 2^47"},
        {"multiplier >= 2^47", OG_DS41_VCRUZ305, M(.mult = true, .mult_at = 0, .mult_value = (1ull << 47) + 1), OG_ERR_FORMAT,
         "engram.multipliers[0] = 140737488355329 is not an odd"},
        {"token_map too large", OG_DS41_VCRUZ305, M(.tmap = true, .tmap_at = 17, .tmap_value = 1 << 17), OG_ERR_FORMAT,
         "engram.token_map[17] = 131072 is not below the compressed vocabulary bound"},
        {"token_map negative", OG_DS41_VCRUZ305, M(.tmap = true, .tmap_at = 3, .tmap_value = -1), OG_ERR_FORMAT,
         "engram.token_map[3] is not a non-negative integer"},
        {"antirez engram.rows", OG_DS41_ANTIREZ, M(.rows_key_add = 5), OG_ERR_FORMAT,
         "engram.rows[0] = 425 but layer 1's primes sum to 420"},
        {"pad id past the vocabulary", OG_DS41_VCRUZ305, M(.set_key = "deepseek41.engram.pad_id", .set_u32 = V),
         OG_ERR_FORMAT, "engram.pad_id = 300 is outside 0..299"},
        /* missing keys: the dialect's spelling, and the dialect it was read as */
        {"vcruz305 without q_lora_rank", OG_DS41_VCRUZ305, M(.drop_key = "deepseek41.attention.q_lora_rank"),
         OG_ERR_NOT_FOUND, "fits none of the dialects: missing deepseek41.attention.q_lora_rank (read as the vcruz305"},
        {"antirez without hidden_size", OG_DS41_ANTIREZ, M(.drop_key = "deepseek41.hidden_size"), OG_ERR_NOT_FOUND,
         "fits none of the dialects: missing deepseek41.hidden_size (read as the antirez"},
        {"antirez without compress_ratios", OG_DS41_ANTIREZ, M(.drop_key = "deepseek41.compress_ratios"),
         OG_ERR_NOT_FOUND, "missing deepseek41.compress_ratios"},
        {"mxxm-t without index sources", OG_DS41_MXXM_T, M(.drop_key = "deepseek41.attention.index_source_layer_ids"),
         OG_ERR_NOT_FOUND, "missing deepseek41.attention.index_source_layer_ids (read as the mxxm-t"},
        {"no token map", OG_DS41_VCRUZ305, M(.drop_key = "deepseek41.engram.token_map"), OG_ERR_NOT_FOUND,
         "missing deepseek41.engram.token_map"},
        {"no primes", OG_DS41_MXXM_T, M(.drop_key = "deepseek41.engram.primes"), OG_ERR_NOT_FOUND,
         "missing deepseek41.engram.primes"},
        /* foreign keys: another dialect's spelling is not read as this one's */
        {"an antirez key in a vcruz305 file", OG_DS41_VCRUZ305, M(.extra_key = "deepseek41.hidden_size"),
         OG_ERR_NOT_FOUND, "fits none of the dialects: missing deepseek41.num_hidden_layers (read as the antirez"},
        {"vcruz305 without expert_count", OG_DS41_VCRUZ305, M(.drop_key = "deepseek41.expert_count"),
         OG_ERR_NOT_FOUND, "missing deepseek41.expert_count"},
        {"softmax gating", OG_DS41_VCRUZ305, M(.set_key = "deepseek41.expert_gating_func", .set_u32 = 1),
         OG_ERR_UNSUPPORTED, "expert_gating_func = 1"},
        {"hash layers", OG_DS41_MXXM_T, M(.set_key = "deepseek41.hash_layer_count", .set_u32 = 2), OG_ERR_FORMAT,
         "hash_layer_count = 2 is outside 0..0"},
        /* bounds before sizing */
        {"300 layers", OG_DS41_VCRUZ305, M(.set_key = "deepseek41.block_count", .set_u32 = 300), OG_ERR_FORMAT,
         "deepseek41.block_count = 300 is outside 1..256"},
        {"huge hidden size", OG_DS41_ANTIREZ, M(.set_key = "deepseek41.hidden_size", .set_u32 = 1u << 20),
         OG_ERR_FORMAT, "deepseek41.hidden_size = 1048576"},
        {"65 Engram heads", OG_DS41_VCRUZ305, M(.set_key = "deepseek41.engram.head_count", .set_u32 = 65),
         OG_ERR_FORMAT, "engram.head_count = 65 is outside 1..32"},
        {"candidate source not an indexing source", OG_DS41_MXXM_T,
         M(.set_key = "deepseek41.attention.candidate_source_layer_id", .set_u32 = 5), OG_ERR_FORMAT,
         "candidate_source_layer_id = 5 is not a layer that compresses and indexes"},
        /* tensors: the dialect's names */
        {"mxxm-t table missing", OG_DS41_MXXM_T, M(.drop_tensor = "blk.4.engram_embed.weight"), OG_ERR_NOT_FOUND,
         "missing tensor blk.4.engram_embed.weight (read as the mxxm-t"},
        {"mxxm-t key projection missing", OG_DS41_MXXM_T, M(.drop_tensor = "blk.2.indexer_compressor_kv.weight"),
         OG_ERR_NOT_FOUND, "missing tensor blk.2.indexer_compressor_kv.weight"},
        {"antirez engram_kv missing", OG_DS41_ANTIREZ, M(.drop_tensor = "blk.1.engram_kv.weight"), OG_ERR_NOT_FOUND,
         "missing tensor blk.1.engram_kv.weight"},
        /* vcruz305 derives roles from tensors: a reuse layer needs a source below it */
        {"no compressor below a ratio-2 layer", OG_DS41_VCRUZ305, M(.drop_tensor = "blk.2.attn_compressor_kv.weight"),
         OG_ERR_FORMAT, "makes index keys (indexer.attn_k) but has no compressor"},
        {"no key owner below an indexer", OG_DS41_VCRUZ305, M(.drop_tensor = "blk.4.indexer.attn_k.weight"),
         OG_ERR_FORMAT, "layer 4 runs an indexer (indexer.attn_q_b) over layer 4's rows, but the latest index keys"},
    };
#undef M
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const refusal *c = &cases[i];
        char path[160], err[512] = "";
        case_path(path, sizeof path, "case");
        build(path, c->d, &l, &c->m);
        og_ds41_hparams *hp = calloc(1, sizeof *hp);
        og_model_info info;
        og_status st = read_path(path, hp, &info, err, sizeof err);
        free(hp);
        unlink(path);
        if (st != c->want || !strstr(err, c->needle))
            fail_msg("%s: gave %d '%s', expected %d naming '%s'", c->what, st, err, c->want, c->needle);
    }
    /* a compress ratio outside {0, 1, 2}, and a file of another architecture */
    layout bad = small_layout();
    bad.ratio[3] = 4;
    char path[160], err[512] = "";
    case_path(path, sizeof path, "ratio");
    build(path, OG_DS41_VCRUZ305, &bad, &NOMOD);
    og_ds41_hparams *hp = calloc(1, sizeof *hp);
    og_model_info info;
    assert_int_equal(read_path(path, hp, &info, err, sizeof err), OG_ERR_FORMAT);
    assert_non_null(strstr(err, "compress_ratios[3] = 4: deepseek41 ratios are 0, 1 or 2"));
    unlink(path);
    /* a reuse layer whose latest source has another ratio */
    bad = small_layout();
    bad.ratio[3] = 1;
    build(path, OG_DS41_MXXM_T, &bad, &NOMOD);
    assert_int_equal(read_path(path, hp, &info, err, sizeof err), OG_ERR_FORMAT);
    assert_non_null(strstr(err, "layer 3 (compress ratio 1) has no kv source of that ratio at or below it"));
    unlink(path);
    free(hp);
}

/* The table's roles: the Engram tables are their own (host-only) role in
 * every dialect's spelling; the planner counts them, and token_embd, in RAM. */
static void test_roles(void **state) {
    (void)state;
    static const struct {
        const char *name;
        og_tensor_role role;
    } cases[] = {
        {"blk.1.engram_embd.weight", OG_ROLE_ENGRAM},
        {"blk.14.engram_embed.weight", OG_ROLE_ENGRAM},
        {"blk.1.engram_wkv.weight", OG_ROLE_OTHER},
        {"blk.1.engram_kv.weight", OG_ROLE_OTHER},
        {"blk.1.engram_q_norm.weight", OG_ROLE_OTHER},
        {"token_embd.weight", OG_ROLE_EMBEDDINGS},
        {"output.weight", OG_ROLE_OUTPUT},
        {"blk.2.indexer_compressor_kv.weight", OG_ROLE_ATTENTION},
        {"blk.20.indexer.attn_k.weight", OG_ROLE_ATTENTION},
        {"blk.9.ffn_down_exps.weight", OG_ROLE_ROUTED_EXPERTS},
        {"blk.9.ffn_up_shexp.weight", OG_ROLE_SHARED_EXPERTS},
        {"blk.9.exp_probs_b_vl.bias", OG_ROLE_ROUTER},
        {"blk.9.hc_ffn_fn.weight", OG_ROLE_OTHER},
        {"output_hc_fn.weight", OG_ROLE_OTHER}, /* V4's head: V4.1 has none */
        {"blk.x.attn_kv.weight", OG_ROLE_OTHER},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (og_model_tensor_role("deepseek41", cases[i].name) != cases[i].role)
            fail_msg("%s: role %s, expected %s", cases[i].name,
                     og_model_role_name(og_model_tensor_role("deepseek41", cases[i].name)),
                     og_model_role_name(cases[i].role));
    assert_string_equal(og_model_role_name(OG_ROLE_ENGRAM), "engram");
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/og_ds41_table_XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dialects_agree),
        cmocka_unit_test(test_real_roles),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_roles),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    rmdir(g_dir);
    return rc;
}
