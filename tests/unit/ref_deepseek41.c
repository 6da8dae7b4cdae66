/* ref_deepseek41: a plain double-precision forward pass of deepseek41
 * (DeepSeek V4.1 Flash), written from shared/spec/deepseek4.md §3.2, §4.1 and
 * §4.3 and the lead's decisions on its open items (numbered below as in the
 * V4.1 brief), for tests: issue 14's acceptance reference. It reads the GGUF
 * with onegpu's reader and gets weights as doubles with the formats'
 * reference dequantizers (og_dequantize_row); everything else is its own and
 * shares no code with the engine's forward pass (src/model/deepseek41*.c):
 * its own key reading and layer-role derivation (it checks
 * og_ds41_hparams_read, so it does not call it), the Engram hash
 * (ref_ds41_engram.h) and gates, the lagged mHC schedule, the CSA2
 * compressors, index keys, indexers, candidate blocks and reuse, the QAT
 * options. The primitives it shares with ref_deepseek4 (RMSNorm, RoPE, mHC
 * mixes, sink attention, grouped output, experts) are in ref_ds_common.h.
 * Token by token, with its own per-sequence state.
 *
 * usage: ref_deepseek41 FILE --tokens a,b,c,... [--from P] [options]
 * Prints one JSON object (ref_deepseek4's shape, so scripts can swap them):
 *   {"n_tokens": n, "options": {...}, "positions": [
 *    {"pos": p, "next": tokens[p+1] or null, "logprob": log p(next) or null,
 *     "argmax": id, "top": [[id, logprob] x5]} for p = P .. n-1 ]}
 * Options (the lead's decision 2: every QAT round trip is off by default):
 *   --window-fp8      FP8 E4M3 round trip of each window KV row's non-RoPE
 *                     dims, blocks of 32, power-of-two scale (as V4's, §4.2).
 *   --comp-fp4        FP4 E2M1 round trip of each compressed row after its
 *                     RoPE (all D dims), one E4M3 scale per 16 channels:
 *                     scale = e4m3(amax / 6), values clamped to +-6.
 *   --indexer-fp4     FP4 E2M1 round trip of the indexer queries and the
 *                     index keys (after RoPE), blocks of 32, power-of-two
 *                     scale 2^ceil(log2(amax / 6)), no Hadamard rotation.
 *   --rounding spec   all three above (--rounding none: none, the default).
 *   --no-candidate-mask  reindex layers score every row (the candidate
 *                     source still picks its blocks): shows what the mask does.
 *   --selections      adds "sel": [[layer, [rows...]], ...] to each position:
 *                     the compressed rows each index source selected, and
 *                     "cand": [blocks] while the candidate mask is on.
 *   --save-state F    after the last token, writes the per-sequence state
 *                     (every layer's rows, the token history) to F.
 *   --load-state F    starts from a state F saved by --save-state: --tokens
 *                     then continues that sequence (positions go on from it).
 *   --sinkhorn-iters N  override hyper_connection.sinkhorn_iterations.
 *   --full P          adds "logprobs": [V log-probs] to each position >= P.
 *   --describe        prints the hyperparameters and the layer roles it
 *                     derived (JSON) and exits (no --tokens needed).
 * --from P prints positions P.. only (positions count from the sequence
 * start, also after --load-state). */
#define REF_PROG "ref_deepseek41"
#include "ref_ds41_engram.h"
#include "ref_ds_common.h"

#define MAXL 256
#define MAX_ENGRAM 8
#define MAX_BUCKET 64

typedef struct opts {
    bool window_fp8, comp_fp4, indexer_fp4, no_cand_mask, selections;
    int sinkhorn_iters; /* < 0: the key */
} opts;

/* ---- hyperparameters and roles (read here, not by og_ds41_hparams_read) --- */

typedef struct hparams {
    REF_SHAPE_FIELDS(MAXL); /* decision 7: eps, the file's, is every RMSNorm's (1e-20 in real files) */
    int F_sh;               /* the shared experts' width (0: none) */
    int ratio[MAXL];
    /* CSA2 roles (§4.3.3, decision 1) */
    bool kv_src[MAXL], idx_src[MAXL], key_owner[MAXL], masked[MAXL];
    int kv_of[MAXL];   /* the kv source whose rows layer il attends over (-1: window only) */
    int key_of[MAXL];  /* index sources: the key owner whose keys they score */
    int sel_of[MAXL];  /* the index source whose selection layer il uses (-1: every row) */
    int cand_src, cand_block, cand_topk;
    /* Engram (§3.2, §4.3.2) */
    int n_engram, engram_layer[MAX_ENGRAM], eng_head, eng_dim, eng_ngram, eng_bucket, pad_id;
    uint64_t eng_rows[MAX_ENGRAM], primes[MAX_ENGRAM][MAX_BUCKET], offsets[MAX_ENGRAM][MAX_BUCKET];
    uint64_t mult[MAX_ENGRAM][REF_ENGRAM_MAX_NGRAM];
    int32_t *token_map; /* [V] */
} hparams;

REF_DEFINE_READ_SHAPE(hparams, MAXL)

static uint64_t ku(const og_gguf *g, const char *key, bool required, uint64_t dflt) {
    return ref_ku(g, "deepseek41", key, required, dflt);
}

/* deepseek41.KEY as an array of integers: its count (-1 when absent) */
static int k_arr(const og_gguf *g, const char *key, int64_t *out, int max) {
    char full[160];
    snprintf(full, sizeof full, "deepseek41.%s", key);
    const og_gguf_kv *kv = og_gguf_find_kv(g, full);
    if (!kv) return -1;
    if (kv->type != OG_GGUF_ARRAY || kv->arr_n > (uint64_t)max) die("key %s: not an array of at most %d", full, max);
    for (uint64_t i = 0; i < kv->arr_n; i++)
        if (og_gguf_kv_num_i64(kv, i, &out[i])) die("key %s: entry %llu is not an integer", full, (unsigned long long)i);
    return (int)kv->arr_n;
}

/* deepseek41.KEY as an array of u64 (the Engram constants: 47-bit and
 * larger values, read from the raw array as UINT64 / INT64) */
static int k_arr_u64(const og_gguf *g, const char *key, uint64_t *out, int max) {
    int64_t tmp[MAX_ENGRAM * MAX_BUCKET];
    if (max > MAX_ENGRAM * MAX_BUCKET) die("k_arr_u64: %d entries", max);
    const int n = k_arr(g, key, tmp, max);
    for (int i = 0; i < n; i++) {
        if (tmp[i] < 0) die("key deepseek41.%s: entry %d is negative", key, i);
        out[i] = (uint64_t)tmp[i];
    }
    return n;
}

static bool has_blk(const og_gguf *g, int il, const char *suffix) {
    char nm[160];
    snprintf(nm, sizeof nm, "blk.%d.%s", il, suffix);
    return og_gguf_find_tensor(g, nm) != NULL;
}

/* The index-key tensors under either spelling (§3.2: mxxm-t writes
 * indexer_compressor_kv / _norm for indexer.attn_k / k_norm). */
static const char *key_w_name(const og_gguf *g, int il) {
    return has_blk(g, il, "indexer_compressor_kv.weight") && !has_blk(g, il, "indexer.attn_k.weight")
               ? "indexer_compressor_kv.weight"
               : "indexer.attn_k.weight";
}

static bool is_prime(uint64_t v) {
    if (v < 2) return false;
    for (uint64_t d = 2; d * d <= v; d++)
        if (v % d == 0) return false;
    return true;
}

/* Layer roles (decision 1): from the explicit keys when present (mxxm-t /
 * antirez: attention.kv_source_layer_ids, index_source_layer_ids,
 * candidate_source_layer_id, candidate_block_size, candidate_topk_blocks),
 * each key on its own; else (vcruz305) from tensor presence. */
/* flag[il] for the layers the id-array key lists, else for the layers that
 * hold tensor blk.il.SUFFIX */
static void mark_layers(const og_gguf *g, int L, const char *key, const char *suffix, bool *flag) {
    int64_t ids[MAXL];
    const int n = k_arr(g, key, ids, MAXL);
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= L) die("%s: layer %lld out of range", key, (long long)ids[i]);
        flag[ids[i]] = true;
    }
    for (int il = 0; n < 0 && il < L; il++) flag[il] = has_blk(g, il, suffix);
}

static void read_roles(const og_gguf *g, hparams *h) {
    const int L = h->n_layer;
    mark_layers(g, L, "attention.kv_source_layer_ids", "attn_compressor_kv.weight", h->kv_src);
    mark_layers(g, L, "attention.index_source_layer_ids", "indexer.attn_q_b.weight", h->idx_src);
    /* the index-key owners: always by presence (no key names them) */
    for (int il = 0; il < L; il++)
        h->key_owner[il] = has_blk(g, il, "indexer.attn_k.weight") || has_blk(g, il, "indexer_compressor_kv.weight");
    h->cand_src = -1;
    const uint64_t cs = ku(g, "attention.candidate_source_layer_id", false, UINT64_MAX);
    if (cs != UINT64_MAX) {
        if (cs >= (uint64_t)L) die("attention.candidate_source_layer_id %llu out of range", (unsigned long long)cs);
        h->cand_src = (int)cs;
    } else { /* the FIRST ratio-1 kv source (layer 20 in the real model) */
        for (int il = 0; il < L && h->cand_src < 0; il++)
            if (h->kv_src[il] && h->ratio[il] == 1) h->cand_src = il;
    }
    h->cand_block = (int)ku(g, "attention.candidate_block_size", false, 8);
    h->cand_topk = (int)ku(g, "attention.candidate_topk_blocks", false, 2048);
    if (h->cand_block < 1 || h->cand_topk < 1) die("candidate_block_size / candidate_topk_blocks must be >= 1");

    int last_kv = -1, last_owner = -1, last_idx = -1;
    for (int il = 0; il < L; il++) {
        if (h->kv_src[il] && !h->ratio[il]) die("layer %d: a kv source with compress ratio 0", il);
        if (h->kv_src[il]) last_kv = il;
        if (h->key_owner[il]) {
            if (!h->kv_src[il]) die("layer %d: index keys (indexer.attn_k) without a compressor", il);
            last_owner = il;
        }
        /* a reuse layer reads the most recent kv source at or below it */
        h->kv_of[il] = h->ratio[il] ? last_kv : -1;
        if (h->ratio[il] && last_kv < 0) die("layer %d: compress ratio %d but no kv source at or below it", il, h->ratio[il]);
        if (h->ratio[il] && h->ratio[last_kv] != h->ratio[il])
            die("layer %d: ratio %d but its kv source %d has ratio %d", il, h->ratio[il], last_kv, h->ratio[last_kv]);
        h->key_of[il] = -1;
        if (h->idx_src[il]) {
            if (!h->ratio[il]) die("layer %d: an indexer on a window-only layer", il);
            /* a reindex layer scores the keys of the most recent index-key owner */
            h->key_of[il] = last_owner;
            if (last_owner < 0) die("layer %d: an indexer but no index-key owner at or below it", il);
            if (last_owner != h->kv_of[il])
                die("layer %d: its indexer scores layer %d's keys but it attends over layer %d's rows", il, last_owner,
                    h->kv_of[il]);
            last_idx = il;
        }
        /* the selection: the most recent index source at or below, if it ranks
         * the same rows (else every row) */
        h->sel_of[il] = h->ratio[il] && last_idx >= 0 && h->kv_of[last_idx] == h->kv_of[il] ? last_idx : -1;
        /* candidate-masked: a reindex layer (index source, not a kv source) with
         * a candidate source at or below it */
        h->masked[il] = h->idx_src[il] && !h->kv_src[il] && h->cand_src >= 0 && h->cand_src <= il;
        if (h->masked[il] && h->key_of[il] != h->cand_src)
            die("layer %d: candidate-masked, but it scores layer %d's rows, not the candidate source %d's", il,
                h->key_of[il], h->cand_src);
    }
    if (h->cand_src >= 0 && !h->idx_src[h->cand_src]) die("candidate source %d has no indexer", h->cand_src);
}

/* Engram constants (§3.2), self-checked: a layer's primes are prime and sum
 * to its table's rows, offsets are their running sums from 0, multipliers
 * odd and < 2^47; token_map has V entries >= 0 below 2^17; pad_id < V. */
static void read_engram(const og_gguf *g, hparams *h) {
    int64_t ids[MAX_ENGRAM];
    int n = k_arr(g, "engram.layer_ids", ids, MAX_ENGRAM);
    if (n < 0) die("missing key deepseek41.engram.layer_ids");
    h->n_engram = n;
    h->eng_head = (int)ku(g, "engram.head_count", true, 0);
    h->eng_dim = (int)ku(g, "engram.key_length", true, 0);
    h->eng_ngram = (int)ku(g, "engram.max_ngram_size", true, 0);
    h->pad_id = (int)ku(g, "engram.pad_id", true, 0);
    if (h->eng_ngram < 2 || h->eng_ngram > REF_ENGRAM_MAX_NGRAM || h->eng_head < 1 || h->eng_dim < 1 ||
        (h->eng_ngram - 1) * h->eng_head > MAX_BUCKET)
        die("Engram sizes outside what ref_deepseek41 handles");
    h->eng_bucket = (h->eng_ngram - 1) * h->eng_head;
    static const int cap = MAX_ENGRAM * MAX_BUCKET;
    uint64_t primes[MAX_ENGRAM * MAX_BUCKET], offsets[MAX_ENGRAM * MAX_BUCKET], mult[MAX_ENGRAM * REF_ENGRAM_MAX_NGRAM];
    if (k_arr_u64(g, "engram.primes", primes, cap) != n * h->eng_bucket)
        die("engram.primes: not %d x %d entries", n, h->eng_bucket);
    if (k_arr_u64(g, "engram.offsets", offsets, cap) != n * h->eng_bucket)
        die("engram.offsets: not %d x %d entries", n, h->eng_bucket);
    if (k_arr_u64(g, "engram.multipliers", mult, MAX_ENGRAM * REF_ENGRAM_MAX_NGRAM) != n * h->eng_ngram)
        die("engram.multipliers: not %d x %d entries", n, h->eng_ngram);
    for (int j = 0; j < n; j++) {
        if (ids[j] < 0 || ids[j] >= h->n_layer || (j && ids[j] <= ids[j - 1]))
            die("engram.layer_ids: entry %d (%lld) out of range or not ascending", j, (long long)ids[j]);
        h->engram_layer[j] = (int)ids[j];
        char nm[160];
        snprintf(nm, sizeof nm, "blk.%d.engram_embd.weight", h->engram_layer[j]);
        const og_gguf_tensor *t = og_gguf_find_tensor(g, nm);
        if (!t) {
            snprintf(nm, sizeof nm, "blk.%d.engram_embed.weight", h->engram_layer[j]);
            t = og_gguf_find_tensor(g, nm);
        }
        if (!t) die("missing tensor blk.%d.engram_embd.weight", h->engram_layer[j]);
        if (t->type == OG_TYPE_I8) die("%s: FP8 Engram rows (the antirez dialect) are not read by ref_deepseek41", nm);
        h->eng_rows[j] = (uint64_t)t->ne[1];
        uint64_t sum = 0;
        for (int b = 0; b < h->eng_bucket; b++) {
            const uint64_t pr = primes[j * h->eng_bucket + b], off = offsets[j * h->eng_bucket + b];
            if (!is_prime(pr)) die("engram.primes: layer %d bucket %d: %llu is not prime", h->engram_layer[j], b,
                                   (unsigned long long)pr);
            if (off != sum) die("engram.offsets: layer %d bucket %d: %llu, the running sum of the primes is %llu",
                                h->engram_layer[j], b, (unsigned long long)off, (unsigned long long)sum);
            h->primes[j][b] = pr;
            h->offsets[j][b] = off;
            sum += pr;
        }
        if (sum != h->eng_rows[j])
            die("engram.primes: layer %d's primes sum to %llu, its table has %llu rows", h->engram_layer[j],
                (unsigned long long)sum, (unsigned long long)h->eng_rows[j]);
        for (int s = 0; s < h->eng_ngram; s++) {
            const uint64_t m = mult[j * h->eng_ngram + s];
            if (!(m & 1) || m >= (1ull << 47))
                die("engram.multipliers: layer %d entry %d (%llu) is not odd and below 2^47", h->engram_layer[j], s,
                    (unsigned long long)m);
            h->mult[j][s] = m;
        }
    }
    const og_gguf_kv *tm = og_gguf_find_kv(g, "deepseek41.engram.token_map");
    if (!tm || tm->type != OG_GGUF_ARRAY || tm->arr_n != (uint64_t)h->V)
        die("engram.token_map: missing or not %d entries", h->V);
    h->token_map = xcalloc((size_t)h->V, sizeof *h->token_map);
    for (int i = 0; i < h->V; i++) {
        int64_t v;
        if (og_gguf_kv_num_i64(tm, (uint64_t)i, &v) || v < 0 || v >= (1 << 17))
            die("engram.token_map[%d]: not an id in [0, 2^17)", i);
        h->token_map[i] = (int32_t)v;
    }
    if (h->pad_id < 0 || h->pad_id >= h->V) die("engram.pad_id %d is not a token id (vocabulary %d)", h->pad_id, h->V);
}

static void read_hparams(const og_gguf *g, hparams *h) {
    memset(h, 0, sizeof *h);
    char arch[32] = "";
    og_gguf_get_cstr(g, "general.architecture", arch, sizeof arch);
    if (strcmp(arch, "deepseek41")) die("not a deepseek41 file (%s)", arch);
    if (og_gguf_find_kv(g, "deepseek41.num_hidden_layers") || og_gguf_find_kv(g, "deepseek41.hidden_size"))
        die("the antirez dialect (raw HF key names) is not read by ref_deepseek41");
    read_shape(g, "deepseek41", h);
    const int n_shared = (int)ku(g, "expert_shared_count", false, 1);
    h->F_sh = n_shared ? (int)ku(g, "expert_shared_feed_forward_length", false, (uint64_t)h->F * n_shared) : 0;
    if (ku(g, "hash_layer_count", false, 0)) die("hash_layer_count is not 0 (V4.1 has no hash layers)");
    const uint64_t gating = ku(g, "expert_gating_func", false, 4);
    if (gating != 4) die("expert_gating_func %llu is not sqrt-softplus (4)", (unsigned long long)gating);
    const og_gguf_kv *cr = og_gguf_find_kv(g, "deepseek41.attention.compress_ratios");
    if (!cr || cr->type != OG_GGUF_ARRAY || cr->arr_n < (uint64_t)h->n_layer) die("bad compress_ratios");
    for (int i = 0; i < h->n_layer; i++) { /* entries past the trunk (absent DSpark blocks) are ignored */
        int64_t r;
        if (og_gguf_kv_num_i64(cr, (uint64_t)i, &r) || (r != 0 && r != 1 && r != 2))
            die("compress_ratios[%d]: not 0, 1 or 2", i);
        h->ratio[i] = (int)r;
    }
    read_roles(g, h);
    for (int il = 0; il < h->n_layer; il++)
        if ((h->idx_src[il] || h->key_owner[il]) && (h->IH < 1 || h->ID < h->R || h->top_k < 1))
            die("indexer sizes (head_count, key_length >= rope dims, top_k) missing or outside what ref_deepseek41 handles");
    read_engram(g, h);
}

/* ---- model -------------------------------------------------------------- */

typedef struct layer {
    ref_block b;                    /* mHC, attention, MoE */
    mat comp_kv, comp_gate, comp_norm, idx_k, idx_k_norm, idx_q_b, idx_proj;
    const og_gguf_tensor *eng_embd; /* [ED][rows]: rows dequantized when gathered (tables can be large) */
    mat eng_wkv, eng_q, eng_k;
    mat bias;
    int eng_slot;                   /* index into hparams' Engram arrays, -1 */
} layer;

typedef struct model {
    const og_gguf *g;
    hparams h;
    mat tok_embd, output, out_norm;
    layer L[MAXL];
} model;

static mat ldl(const model *m, int il, const char *suffix, int64_t in, int64_t out) {
    mat w;
    ref_load_blk(m->g, il, suffix, in, out, &w, true);
    return w;
}

static void load_model(model *m) {
    const og_gguf *g = m->g;
    hparams *h = &m->h;
    const int N = h->N, D = h->D;
    ref_load(g, "token_embd.weight", N, h->V, &m->tok_embd, true);
    if (!ref_load(g, "output.weight", N, h->V, &m->output, false)) m->output = m->tok_embd;
    ref_load(g, "output_norm.weight", N, 1, &m->out_norm, true);
    if (og_gguf_find_tensor(g, "output_hc_fn.weight")) die("output_hc_fn.weight: V4.1 has no HC head (§4.3.1)");
    const ref_block_dims bd = {N, h->hc, h->q_rank, h->H, D, h->G, h->o_rank, h->E, h->F, h->F_sh};
    for (int il = 0; il < h->n_layer; il++) {
        layer *l = &m->L[il];
        ref_load_block(m->g, il, &bd, &l->b);
        if (h->kv_src[il]) {
            l->comp_kv = ldl(m, il, "attn_compressor_kv.weight", N, D);
            l->comp_norm = ldl(m, il, "attn_compressor_norm.weight", D, 1);
            /* the gate: ratio-2 sources only (a ratio-1 latent is W_kv x alone) */
            if (h->ratio[il] > 1) l->comp_gate = ldl(m, il, "attn_compressor_gate.weight", N, D);
        }
        if (h->key_owner[il]) {
            const char *kw = key_w_name(g, il);
            l->idx_k = ldl(m, il, kw, D, h->ID);
            l->idx_k_norm = ldl(m, il, strcmp(kw, "indexer.attn_k.weight") ? "indexer_compressor_norm.weight"
                                                                          : "indexer.k_norm.weight",
                                h->ID, 1);
        }
        if (h->idx_src[il]) {
            l->idx_q_b = ldl(m, il, "indexer.attn_q_b.weight", h->q_rank, (int64_t)h->IH * h->ID);
            l->idx_proj = ldl(m, il, "indexer.proj.weight", N, h->IH);
        }
        l->eng_slot = -1;
        for (int j = 0; j < h->n_engram; j++)
            if (h->engram_layer[j] == il) l->eng_slot = j;
        if (l->eng_slot >= 0) {
            char nm[160];
            snprintf(nm, sizeof nm, "blk.%d.engram_embd.weight", il);
            l->eng_embd = og_gguf_find_tensor(g, nm);
            if (!l->eng_embd) {
                snprintf(nm, sizeof nm, "blk.%d.engram_embed.weight", il);
                l->eng_embd = og_gguf_find_tensor(g, nm);
            }
            if (l->eng_embd->ne[0] != h->eng_dim || l->eng_embd->n_dims != 2)
                die("%s: rows of %lld, engram.key_length is %d", nm, (long long)l->eng_embd->ne[0], h->eng_dim);
            l->eng_wkv = ldl(m, il, "engram_wkv.weight", (int64_t)h->eng_bucket * h->eng_dim, (int64_t)(h->hc + 1) * N);
            l->eng_q = ldl(m, il, "engram_q.weight", N, h->hc);
            l->eng_k = ldl(m, il, "engram_k.weight", N, h->hc);
        }
        l->bias = ldl(m, il, "exp_probs_b.bias", h->E, 1);
        mat vl; /* decision 7: exp_probs_b_vl is read and ignored (image tokens only) */
        if (ref_load_blk(g, il, "exp_probs_b_vl.bias", h->E, 1, &vl, false)) free(vl.w);
    }
}

static void matvec(const mat *m, const double *x, double *y) { matvec_rows(false, m, 0, m->out, x, y); }

/* ---- per-sequence state ---------------------------------------------------- */

typedef struct lstate {
    rows win;                  /* raw rows by position [p][D] (attention reads the last n_swa) */
    rows grp_kv, grp_sc;       /* kv sources: W_kv x, W_gate x by position [p][D] (the group's inputs) */
    rows comp;                 /* kv sources: compressed rows [g][D], visible once their group is complete */
    rows ik;                   /* key owners: index keys [g][ID] */
} lstate;

typedef struct seq {
    int n_pos;                 /* tokens processed */
    int *tok, cap;             /* [n_pos] the token history (Engram's n-grams) */
    lstate L[MAXL];
} seq;

static void seq_init(const hparams *h, seq *s) {
    memset(s, 0, sizeof *s);
    for (int il = 0; il < h->n_layer; il++) {
        lstate *st = &s->L[il];
        st->win.w = st->grp_kv.w = st->grp_sc.w = st->comp.w = h->D;
        st->ik.w = h->ID > 0 ? h->ID : 1;
    }
}

static void seq_free(const hparams *h, seq *s) {
    for (int il = 0; il < h->n_layer; il++) {
        rows *all[] = {&s->L[il].win, &s->L[il].grp_kv, &s->L[il].grp_sc, &s->L[il].comp, &s->L[il].ik};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) free(all[k]->v);
    }
    free(s->tok);
}

/* The state file: "OGR41ST1", n_layer, n_pos, tok[n_pos], then per layer
 * its five row sets as (n, w, n*w doubles). */
static void seq_save(const hparams *h, const seq *s, const char *path) {
    FILE *f = fopen(path, "wb");
    if (!f) die("cannot write %s", path);
    bool ok = fwrite("OGR41ST1", 8, 1, f) == 1;
    int hdr[2] = {h->n_layer, s->n_pos};
    ok &= fwrite(hdr, sizeof hdr, 1, f) == 1;
    ok &= !s->n_pos || fwrite(s->tok, sizeof *s->tok, (size_t)s->n_pos, f) == (size_t)s->n_pos;
    for (int il = 0; il < h->n_layer; il++) {
        const rows *all[] = {&s->L[il].win, &s->L[il].grp_kv, &s->L[il].grp_sc, &s->L[il].comp, &s->L[il].ik};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) {
            int nw[2] = {all[k]->n, all[k]->w};
            ok &= fwrite(nw, sizeof nw, 1, f) == 1;
            const size_t cnt = (size_t)all[k]->n * (size_t)all[k]->w;
            ok &= !cnt || fwrite(all[k]->v, sizeof(double), cnt, f) == cnt;
        }
    }
    if (fclose(f) || !ok) die("cannot write %s", path);
}

static void seq_load(const hparams *h, seq *s, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) die("cannot read %s", path);
    char magic[8];
    int hdr[2];
    if (fread(magic, 8, 1, f) != 1 || memcmp(magic, "OGR41ST1", 8) || fread(hdr, sizeof hdr, 1, f) != 1 ||
        hdr[0] != h->n_layer || hdr[1] < 0 || hdr[1] > (1 << 26))
        die("%s: not a state of this model", path);
    s->n_pos = s->cap = hdr[1];
    s->tok = xcalloc((size_t)s->cap + 1, sizeof *s->tok);
    if (s->n_pos && fread(s->tok, sizeof *s->tok, (size_t)s->n_pos, f) != (size_t)s->n_pos) die("%s: truncated", path);
    for (int il = 0; il < h->n_layer; il++) {
        rows *all[] = {&s->L[il].win, &s->L[il].grp_kv, &s->L[il].grp_sc, &s->L[il].comp, &s->L[il].ik};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) {
            int nw[2];
            if (fread(nw, sizeof nw, 1, f) != 1 || nw[1] != all[k]->w || nw[0] < 0 || nw[0] > s->n_pos)
                die("%s: layer %d does not fit this model", path, il);
            for (int r = 0; r < nw[0]; r++)
                if (fread(rows_push(all[k]), sizeof(double), (size_t)nw[1], f) != (size_t)nw[1]) die("%s: truncated", path);
        }
    }
    fclose(f);
}

/* ---- the QAT options (decision 2) ------------------------------------------- */

/* FP4 E2M1 with one E4M3 scale per 16 channels (--comp-fp4): the scale is
 * amax / 6 rounded to the nearest E4M3 value, each value x / scale rounded
 * to the nearest E2M1 value (clamped to +-6), times the scale. */
static void fp4_e4m3_scaled(double *x, int n) {
    for (int b0 = 0; b0 < n; b0 += 16) {
        const int b1 = b0 + 16 < n ? b0 + 16 : n;
        double amax = 0;
        for (int i = b0; i < b1; i++) amax = fmax(amax, fabs(x[i]));
        const double scale = e4m3(amax / 6.0);
        if (scale == 0) {
            for (int i = b0; i < b1; i++) x[i] = 0;
            continue;
        }
        for (int i = b0; i < b1; i++) x[i] = e2m1(x[i] / scale) * scale;
    }
}

/* ---- Engram (§4.3.2) --------------------------------------------------------- */

static ref_engram_hash engram_hash_of(const hparams *h, int slot) {
    return (ref_engram_hash){h->eng_ngram, h->eng_head, h->mult[slot], h->primes[slot], h->offsets[slot],
                             h->token_map, h->V, h->pad_id};
}

/* S[k] += sigmoid(sign(d) sqrt(max(|d|, 1e-6))) value, d the gated product of
 * rms(S[k]) and rms(key_k) (§4.3.2) */
static void engram(const model *m, const layer *l, const seq *s, int p, double *S) {
    const hparams *h = &m->h;
    const int N = h->N, ED = h->eng_dim, EB = h->eng_bucket;
    uint64_t row[MAX_BUCKET];
    const ref_engram_hash eh = engram_hash_of(h, l->eng_slot);
    if (ref_engram_rows(&eh, s->tok, p, row)) die("Engram hash: a token outside the token map");
    double *emb = xcalloc((size_t)EB * ED, sizeof *emb), *kv = xcalloc((size_t)(h->hc + 1) * N, sizeof *kv);
    float *tmp = xcalloc((size_t)ED, sizeof *tmp);
    uint64_t rb;
    if (og_row_bytes(l->eng_embd->type, (uint64_t)ED, &rb)) die("engram_embd: bad row");
    for (int b = 0; b < EB; b++) { /* the 24 rows in bucket order */
        if (row[b] >= (uint64_t)l->eng_embd->ne[1]) die("Engram row %llu outside the table", (unsigned long long)row[b]);
        if (og_dequantize_row(l->eng_embd->type, (const uint8_t *)l->eng_embd->data + row[b] * rb, tmp, ED))
            die("engram_embd: cannot dequantize");
        for (int i = 0; i < ED; i++) emb[b * ED + i] = tmp[i];
    }
    matvec(&l->eng_wkv, emb, kv);
    const double *value = kv + (size_t)h->hc * N;
    double *sn = xcalloc((size_t)N, sizeof *sn), *kn = xcalloc((size_t)N, sizeof *kn);
    for (int k = 0; k < h->hc; k++) {
        memcpy(sn, S + (size_t)k * N, (size_t)N * sizeof *sn);
        memcpy(kn, kv + (size_t)k * N, (size_t)N * sizeof *kn);
        rmsnorm(sn, N, NULL, h->eps); /* no weight, the file's eps (decision 7) */
        rmsnorm(kn, N, NULL, h->eps);
        double d = 0;
        for (int i = 0; i < N; i++) d += sn[i] * kn[i] * l->eng_q.w[(size_t)k * N + i] * l->eng_k.w[(size_t)k * N + i];
        d /= sqrt((double)N);
        const double sg = d > 0 ? 1 : d < 0 ? -1 : 0;
        const double gate = sigmoid(sg * sqrt(fmax(fabs(d), 1e-6)));
        for (int i = 0; i < N; i++) S[(size_t)k * N + i] += gate * value[i];
    }
    free(sn);
    free(kn);
    free(tmp);
    free(emb);
    free(kv);
}

/* ---- attention (§4.3.3) -------------------------------------------------------- */

/* What one token's index sources chose, for the layers above them. */
typedef struct tsel {
    int *sel[MAXL], n_sel[MAXL]; /* index sources: selected rows of their kv source, ascending */
    bool *cand;                  /* the candidate source's blocks as a row mask [nc], NULL: no mask */
} tsel;

/* The compressor of a kv source (§4.3.3) at position p with input x (the
 * layer's own attention-normed input; decision 4 for the ratio-1 source):
 * a group of `ratio` tokens emits one row once complete: per channel a
 * softmax over the group's gate scores weighting W_kv x (ratio 1: W_kv x),
 * RMSNorm(attn_compressor_norm); its index key (key owners) RMSNorm(
 * indexer.attn_k latent, k_norm) taken before RoPE, RoPE'd on its last R
 * dims; the row RoPE'd at the group's first position g ratio. */
static void compress(const model *m, const opts *o, lstate *st, int il, const double *x, int p) {
    const hparams *h = &m->h;
    const layer *l = &m->L[il];
    const int D = h->D, R = h->R, r = h->ratio[il];
    matvec(&l->comp_kv, x, rows_push(&st->grp_kv));
    double *sc = rows_push(&st->grp_sc);
    if (r > 1) matvec(&l->comp_gate, x, sc);
    if ((p + 1) % r) return;
    const int g = p / r, p0 = g * r;
    double *lat = xcalloc((size_t)D, sizeof *lat);
    for (int j = 0; j < D; j++) {
        double mx = -INFINITY, z = 0, acc = 0;
        for (int t = p0; t <= p; t++) mx = fmax(mx, r > 1 ? st->grp_sc.v[(size_t)t * D + j] : 0);
        for (int t = p0; t <= p; t++) {
            const double e = exp((r > 1 ? st->grp_sc.v[(size_t)t * D + j] : 0) - mx);
            z += e;
            acc += e * st->grp_kv.v[(size_t)t * D + j];
        }
        lat[j] = acc / z;
    }
    rmsnorm(lat, D, l->comp_norm.w, h->eps);
    if (h->key_owner[il]) {
        double *ik = rows_push(&st->ik);
        matvec(&l->idx_k, lat, ik);
        rmsnorm(ik, h->ID, l->idx_k_norm.w, h->eps);
        rope(&h->rope_comp, R, ik + h->ID - R, p0, false);
        if (o->indexer_fp4) fp4_qat(ik, h->ID, 32);
    }
    rope(&h->rope_comp, R, lat + D - R, p0, false);
    if (o->comp_fp4) fp4_e4m3_scaled(lat, D);
    memcpy(rows_push(&st->comp), lat, (size_t)D * sizeof *lat);
    free(lat);
}

static int cmp_int(const void *a, const void *b) { return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b); }

/* The candidate blocks (§4.3.3) of the candidate source over its nc rows'
 * scores: blocks of cand_block positions, block score = the max score in
 * the block; the block holding the newest row is always kept, then the
 * highest-scoring others (ties to the older block) up to cand_topk blocks in
 * all. Only when nc > cand_topk x cand_block (decision 6: fewer positions
 * than the blocks hold: no mask). Returns the row mask or NULL. */
static bool *candidates(const hparams *h, const double *score, int nc) {
    const int B = h->cand_block, T = h->cand_topk;
    if ((int64_t)nc <= (int64_t)T * B) return NULL;
    const int nb = (nc + B - 1) / B;
    double *bs = xcalloc((size_t)nb, sizeof *bs);
    for (int b = 0; b < nb; b++) {
        bs[b] = -INFINITY;
        for (int c = b * B; c < nc && c < (b + 1) * B; c++) bs[b] = fmax(bs[b], score[c]);
    }
    bs[nb - 1] = -INFINITY; /* the newest block: kept anyway, not ranked */
    int *kept = xcalloc((size_t)T, sizeof *kept);
    const int got = top_by_score(bs, nb - 1, T - 1, kept);
    bool *mask = xcalloc((size_t)nc, sizeof *mask);
    for (int c = (nb - 1) * B; c < nc; c++) mask[c] = true;
    for (int i = 0; i < got; i++)
        for (int c = kept[i] * B; c < (kept[i] + 1) * B; c++) mask[c] = true;
    free(kept);
    free(bs);
    return mask;
}

/* An index source's indexer (§4.3.3): iq = indexer.attn_q_b qr (IH x ID),
 * RoPE'd on its last R dims at p; w = indexer.proj x / sqrt(ID IH); score(c)
 * = sum_h w_h relu(iq_h . ik_c) over the visible rows of its key owner. The
 * top top_k rows, sorted by position (every row while they fit). */
static void indexer(const model *m, const opts *o, const seq *s, tsel *ts, int il, const double *x, const double *qr,
                    int p) {
    const hparams *h = &m->h;
    const layer *l = &m->L[il];
    const int IH = h->IH, ID = h->ID, R = h->R;
    /* decision 5: a ratio-2 owner on a step whose group is incomplete scores
     * its OWN keys over its visible (completed) rows, never another layer's */
    const rows *keys = &s->L[h->key_of[il]].ik;
    const int nc = keys->n;
    if (nc != s->L[h->kv_of[il]].comp.n) die("layer %d: %d index keys for %d rows", il, nc, s->L[h->kv_of[il]].comp.n);
    int *sel = xcalloc((size_t)nc + 1, sizeof *sel), n_sel = 0;
    const bool is_cand = il == h->cand_src;
    const bool mask = h->masked[il] && !o->no_cand_mask && ts->cand;
    if (nc > h->top_k || is_cand || mask) {
        double *qi = xcalloc((size_t)IH * ID, sizeof *qi), *wt = xcalloc((size_t)IH, sizeof *wt);
        double *score = xcalloc((size_t)nc + 1, sizeof *score);
        matvec(&l->idx_q_b, qr, qi);
        for (int hd = 0; hd < IH; hd++) {
            rope(&h->rope_comp, R, qi + (size_t)hd * ID + ID - R, p, false);
            if (o->indexer_fp4) fp4_qat(qi + (size_t)hd * ID, ID, 32);
        }
        matvec(&l->idx_proj, x, wt);
        for (int hd = 0; hd < IH; hd++) wt[hd] /= sqrt((double)ID * IH);
        indexer_scores(qi, wt, IH, ID, keys->v, nc, score);
        if (is_cand) {
            free(ts->cand);
            ts->cand = candidates(h, score, nc);
        }
        /* the candidate mask: rows outside the candidate blocks are never
         * selected (even when fewer than top_k remain) */
        if (mask)
            for (int c = 0; c < nc; c++)
                if (!ts->cand[c]) score[c] = -INFINITY;
        n_sel = top_by_score(score, nc, nc < h->top_k ? nc : h->top_k, sel);
        qsort(sel, (size_t)n_sel, sizeof *sel, cmp_int);
        free(score);
        free(qi);
        free(wt);
    } else {
        for (int c = 0; c < nc; c++) sel[n_sel++] = c;
    }
    ts->sel[il] = sel;
    ts->n_sel[il] = n_sel;
}

static void attention(const model *m, const opts *o, seq *s, tsel *ts, int il, const double *x, int p, double *y) {
    const hparams *h = &m->h;
    const layer *l = &m->L[il];
    lstate *st = &s->L[il];
    const int D = h->D, H = h->H, R = h->R, r = h->ratio[il];
    const rope_sched *rs = r ? &h->rope_comp : &h->rope_swa;
    double *qr = xcalloc((size_t)h->q_rank, sizeof *qr), *q = xcalloc((size_t)H * D, sizeof *q);
    matvec(&l->b.q_a, x, qr);
    rmsnorm(qr, h->q_rank, l->b.q_a_norm.w, h->eps);
    matvec(&l->b.q_b, qr, q);
    for (int hd = 0; hd < H; hd++) rope(rs, R, q + (size_t)hd * D + D - R, p, false); /* no per-head norm in V4.1 */
    double *kv = rows_push(&st->win);
    matvec(&l->b.kv, x, kv);
    rmsnorm(kv, D, l->b.kv_norm.w, h->eps);
    rope(rs, R, kv + D - R, p, false);
    if (o->window_fp8) fp8_qat(kv, D - R, 32);

    if (h->kv_src[il]) compress(m, o, st, il, x, p);
    if (h->idx_src[il]) indexer(m, o, s, ts, il, x, qr, p);
    /* the compressed rows this query sees: its kv source's, through the
     * selection of its index source (reuse layers: the latest one's) */
    const rows *comp = r ? &s->L[h->kv_of[il]].comp : NULL;
    const int nc = comp ? comp->n : 0, si = h->sel_of[il];
    const int n_sel = si >= 0 ? ts->n_sel[si] : nc;
    const int w0 = p - h->n_swa + 1 > 0 ? p - h->n_swa + 1 : 0, n_raw = p - w0 + 1, n_rows = n_raw + n_sel;
    const double **K = xcalloc((size_t)n_rows, sizeof *K);
    for (int t = 0; t < n_raw; t++) K[t] = st->win.v + (size_t)(w0 + t) * D;
    for (int t = 0; t < n_sel; t++) K[n_raw + t] = comp->v + (size_t)(si >= 0 ? ts->sel[si][t] : t) * D;
    double *att = xcalloc((size_t)H * D, sizeof *att);
    sink_attention(q, H, D, R, K, n_rows, l->b.sinks.w, rs, p, att);
    grouped_output(false, &l->b.o_a, &l->b.o_b, H, D, h->G, h->o_rank, att, y);
    free(att);
    free(K);
    free(qr);
    free(q);
}

/* ---- MoE (§4.1.6, V4.1) ------------------------------------------------------- */

static void moe(const model *m, int il, const double *x, double *y) {
    const hparams *h = &m->h;
    const layer *l = &m->L[il];
    const int E = h->E, k = h->k;
    double *logit = xcalloc((size_t)E, sizeof *logit), *score = xcalloc((size_t)E, sizeof *score);
    int sel[64];
    matvec(&l->b.gate_inp, x, logit);
    for (int e = 0; e < E; e++) score[e] = sqrt_softplus(logit[e]);
    select_biased(score, l->bias.w, E, k, sel);
    double w[64], sum = 0;
    for (int i = 0; i < k; i++) sum += w[i] = score[sel[i]];
    for (int i = 0; i < k; i++) { /* decision 7: w / (sum + 1e-20) x 1.5 */
        if (h->norm_w) w[i] /= sum + 1e-20;
        w[i] *= h->w_scale;
    }
    memset(y, 0, (size_t)h->N * sizeof *y);
    for (int i = 0; i < k; i++)
        ffn_expert(false, &l->b.gate_exps, &l->b.up_exps, &l->b.down_exps, sel[i], h->F, h->N, h->clamp_exp[il], x, w[i], y);
    if (h->F_sh) ffn_expert(false, &l->b.gate_sh, &l->b.up_sh, &l->b.down_sh, 0, h->F_sh, h->N, h->clamp_sh[il], x, 1.0, y);
    free(logit);
    free(score);
}

/* ---- one token (§4.3.1) --------------------------------------------------------- */

static void forward(const model *m, const opts *o, seq *s, int token, double *logits, char **sel_out) {
    const hparams *h = &m->h;
    const int N = h->N, hc = h->hc, p = s->n_pos;
    if (s->n_pos == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        s->tok = realloc(s->tok, (size_t)s->cap * sizeof *s->tok);
        if (!s->tok) die("out of memory");
    }
    s->tok[s->n_pos++] = token;
    double *S = xcalloc((size_t)hc * N, sizeof *S), *x = xcalloc((size_t)N, sizeof *x), *y = xcalloc((size_t)N, sizeof *y);
    double pre_mix[16] = {1}, apre[16], post[16], C[256]; /* layer 0's attention collapses with [1, 0, 0, 0] */
    const hc_dims hd = {hc, N, o->sinkhorn_iters >= 0 ? o->sinkhorn_iters : h->sinkhorn, h->eps, h->hc_eps, false};
    tsel ts;
    memset(&ts, 0, sizeof ts);
    for (int k = 0; k < hc; k++)
        for (int i = 0; i < N; i++) S[(size_t)k * N + i] = m->tok_embd.w[(size_t)token * N + i];
    for (int il = 0; il < h->n_layer; il++) {
        const layer *l = &m->L[il];
        if (l->eng_slot >= 0) engram(m, l, s, p, S);
        /* the lag: this sublayer's pre goes to the next one; its own input
         * collapses with the pre the previous sublayer handed on */
        hc_mixes(&hd, S, &l->b.hc_attn_fn, &l->b.hc_attn_scale, &l->b.hc_attn_base, apre, post, C);
        collapse(&hd, S, pre_mix, x);
        rmsnorm(x, N, l->b.attn_norm.w, h->eps);
        attention(m, o, s, &ts, il, x, p, y);
        expand(&hd, S, y, post, C);
        hc_mixes(&hd, S, &l->b.hc_ffn_fn, &l->b.hc_ffn_scale, &l->b.hc_ffn_base, pre_mix, post, C);
        collapse(&hd, S, apre, x);
        rmsnorm(x, N, l->b.ffn_norm.w, h->eps);
        moe(m, il, x, y);
        expand(&hd, S, y, post, C);
    }
    if (logits) { /* no HC head: the last FFN's unused pre collapses the copies */
        collapse(&hd, S, pre_mix, x);
        rmsnorm(x, N, m->out_norm.w, h->eps);
        matvec(&m->output, x, logits);
    }
    if (sel_out) { /* --selections: ", \"sel\": [[layer, [rows]], ...]" */
        size_t cap = 64, len = 0;
        for (int il = 0; il < h->n_layer; il++) cap += 32 + 12 * (size_t)ts.n_sel[il];
        char *b = xcalloc(cap, 1);
        len += (size_t)snprintf(b + len, cap - len, ", \"sel\": [");
        bool first = true;
        for (int il = 0; il < h->n_layer; il++) {
            if (!h->idx_src[il]) continue;
            len += (size_t)snprintf(b + len, cap - len, "%s[%d, [", first ? "" : ", ", il);
            for (int t = 0; t < ts.n_sel[il]; t++) len += (size_t)snprintf(b + len, cap - len, "%s%d", t ? ", " : "", ts.sel[il][t]);
            len += (size_t)snprintf(b + len, cap - len, "]]");
            first = false;
        }
        len += (size_t)snprintf(b + len, cap - len, "]");
        if (ts.cand) { /* the candidate blocks kept (ascending), when the mask is on */
            const int nc = s->L[h->cand_src].comp.n, B = h->cand_block;
            b = realloc(b, cap += 16 + 12 * (size_t)((nc + B - 1) / B));
            if (!b) die("out of memory");
            len += (size_t)snprintf(b + len, cap - len, ", \"cand\": [");
            bool fb = true;
            for (int c = 0; c < nc; c += B)
                if (ts.cand[c]) {
                    len += (size_t)snprintf(b + len, cap - len, "%s%d", fb ? "" : ", ", c / B);
                    fb = false;
                }
            snprintf(b + len, cap - len, "]");
        }
        *sel_out = b;
    }
    for (int il = 0; il < h->n_layer; il++) free(ts.sel[il]);
    free(ts.cand);
    free(S);
    free(x);
    free(y);
}

/* --describe: the hyperparameters and roles this program derived (JSON) */
static void describe(const hparams *h) {
    printf("{\"n_layer\": %d, \"n_embd\": %d, \"n_vocab\": %d, \"n_swa\": %d, \"top_k\": %d, \"candidate_source\": %d, "
           "\"candidate_block_size\": %d, \"candidate_topk_blocks\": %d, \"engram_layers\": [",
           h->n_layer, h->N, h->V, h->n_swa, h->top_k, h->cand_src, h->cand_block, h->cand_topk);
    for (int j = 0; j < h->n_engram; j++) printf("%s%d", j ? ", " : "", h->engram_layer[j]);
    printf("], \"layers\": [");
    for (int il = 0; il < h->n_layer; il++)
        printf("%s{\"ratio\": %d, \"kv_source\": %s, \"index_source\": %s, \"key_owner\": %s, \"rows_of\": %d, "
               "\"keys_of\": %d, \"selection_of\": %d, \"candidate_masked\": %s}",
               il ? ", " : "", h->ratio[il], h->kv_src[il] ? "true" : "false", h->idx_src[il] ? "true" : "false",
               h->key_owner[il] ? "true" : "false", h->kv_of[il], h->key_of[il], h->sel_of[il],
               h->masked[il] ? "true" : "false");
    printf("]}\n");
}

int main(int argc, char **argv) {
    const char *path = NULL, *toks = NULL, *save = NULL, *load_st = NULL;
    bool desc = false;
    int full_from = -1; /* --full P: every log-prob at positions >= P */
    int from = 0;
    opts o = {.sinkhorn_iters = -1};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokens") && i + 1 < argc) toks = argv[++i];
        else if (!strcmp(argv[i], "--from") && i + 1 < argc) from = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--window-fp8")) o.window_fp8 = true;
        else if (!strcmp(argv[i], "--comp-fp4")) o.comp_fp4 = true;
        else if (!strcmp(argv[i], "--indexer-fp4")) o.indexer_fp4 = true;
        else if (!strcmp(argv[i], "--rounding") && i + 1 < argc) {
            const char *v = argv[++i];
            if (strcmp(v, "spec") && strcmp(v, "none")) die("--rounding %s: expected spec or none", v);
            o.window_fp8 = o.comp_fp4 = o.indexer_fp4 = !strcmp(v, "spec");
        } else if (!strcmp(argv[i], "--no-candidate-mask")) o.no_cand_mask = true;
        else if (!strcmp(argv[i], "--selections")) o.selections = true;
        else if (!strcmp(argv[i], "--describe")) desc = true;
        else if (!strcmp(argv[i], "--full") && i + 1 < argc) full_from = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--save-state") && i + 1 < argc) save = argv[++i];
        else if (!strcmp(argv[i], "--load-state") && i + 1 < argc) load_st = argv[++i];
        else if (!strcmp(argv[i], "--sinkhorn-iters") && i + 1 < argc) o.sinkhorn_iters = atoi(argv[++i]);
        else if (argv[i][0] == '-') {
            static const char *const valued[] = {"--tokens", "--from", "--rounding", "--full", "--save-state",
                                                 "--load-state", "--sinkhorn-iters"};
            for (size_t k = 0; k < sizeof valued / sizeof valued[0]; k++)
                if (!strcmp(argv[i], valued[k])) die("option %s needs a value", argv[i]);
            die("unknown option %s (see the comment at the top of ref_deepseek41.c)", argv[i]);
        }
        else path = argv[i];
    }
    if (!path || (!toks && !desc)) die("usage: ref_deepseek41 FILE --tokens a,b,c [--from P] [options]");
    og_gguf *g;
    char err[512];
    if (og_gguf_open(path, 0, &g, err, sizeof err)) die("%s", err);
    static model m;
    m.g = g;
    read_hparams(g, &m.h);
    const hparams *h = &m.h;
    if (desc) {
        describe(h);
        free(m.h.token_map);
        og_gguf_close(g);
        return 0;
    }
    load_model(&m);
    int n;
    int *tok = parse_tokens(toks, h->V, &n);
    static seq s;
    seq_init(h, &s);
    if (load_st) seq_load(h, &s, load_st);
    const int p0 = s.n_pos;
    double *logits = xcalloc((size_t)h->V, sizeof *logits);
    printf("{\"n_tokens\": %d, \"options\": {\"window_fp8\": %s, \"comp_fp4\": %s, \"indexer_fp4\": %s, "
           "\"candidate_mask\": %s, \"sinkhorn_iters\": %d}, \"positions\": [",
           p0 + n, o.window_fp8 ? "true" : "false", o.comp_fp4 ? "true" : "false", o.indexer_fp4 ? "true" : "false",
           o.no_cand_mask ? "false" : "true", o.sinkhorn_iters >= 0 ? o.sinkhorn_iters : h->sinkhorn);
    bool first = true;
    for (int i = 0; i < n; i++) {
        const int p = p0 + i;
        const bool out = p >= from;
        char *sel = NULL;
        forward(&m, &o, &s, tok[i], out ? logits : NULL, out && o.selections ? &sel : NULL);
        if (!out) continue;
        if (full_from >= 0 && p >= full_from) { /* ", \"logprobs\": [V]" after any "sel" */
            const size_t cap = (sel ? strlen(sel) : 0) + 24 + 20 * (size_t)h->V;
            char *b = xcalloc(cap, 1);
            size_t len = (size_t)snprintf(b, cap, "%s, \"logprobs\": [", sel ? sel : "");
            double mx = -INFINITY, z = 0;
            for (int v = 0; v < h->V; v++) mx = fmax(mx, logits[v]);
            for (int v = 0; v < h->V; v++) z += exp(logits[v] - mx);
            for (int v = 0; v < h->V; v++)
                len += (size_t)snprintf(b + len, cap - len, "%s%.12g", v ? ", " : "", logits[v] - mx - log(z));
            snprintf(b + len, cap - len, "]");
            free(sel);
            sel = b;
        }
        print_position(logits, h->V, p, i + 1 < n ? tok[i + 1] : -1, first, sel);
        first = false;
        free(sel);
    }
    printf("]}\n");
    if (save) seq_save(h, &s, save);
    seq_free(h, &s);
    free(h->token_map);
    free(logits);
    free(tok);
    og_gguf_close(g);
    return 0;
}
