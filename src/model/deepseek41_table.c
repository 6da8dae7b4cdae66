/* deepseek41: the hyperparameter reader of the three dialects, the CSA2 role
 * derivation, the Engram self-checks and the one tensor-name table
 * (shared/spec/deepseek4.md §3.2, §4.3; the V4.1 brief's decisions 1, 3, 6, 7). */
#include "deepseek41.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARCH "deepseek41."
#define TRY(x) do { og_status st_ = (x); if (st_) return st_; } while (0)

static const char *const dialect_names[OG_DS41_N_DIALECT] = {"vcruz305", "mxxm-t", "antirez"};

const char *og_ds41_dialect_name(og_ds41_dialect d) {
    return (unsigned)d < OG_DS41_N_DIALECT ? dialect_names[d] : "unknown";
}

/* ---- keys ------------------------------------------------------------------ */

/* The antirez dialect's raw HF text_config names for the keys vcruz305 and
 * mxxm-t spell as llama.cpp does (§3.2: "keys use raw HF text_config field
 * names under deepseek41."; the spec names rope_theta, compress_rope_theta,
 * rope_scaling.original_max_position_embeddings, scoring_func and the
 * engram.* keys; the rest are DeepSeek's config.json names). */
static const struct { const char *key, *antirez; } antirez_names[] = {
    {"block_count", "num_hidden_layers"},
    {"embedding_length", "hidden_size"},
    {"context_length", "max_position_embeddings"},
    {"vocab_size", "vocab_size"},
    {"attention.head_count", "num_attention_heads"},
    {"attention.head_count_kv", "num_key_value_heads"},
    {"attention.key_length", "head_dim"},
    {"attention.value_length", "head_dim"},
    {"rope.dimension_count", "qk_rope_head_dim"},
    {"attention.q_lora_rank", "q_lora_rank"},
    {"attention.output_lora_rank", "o_lora_rank"},
    {"attention.output_group_count", "o_groups"},
    {"attention.sliding_window", "sliding_window"},
    {"attention.compress_ratios", "compress_ratios"},
    {"attention.indexer.head_count", "index_n_heads"},
    {"attention.indexer.key_length", "index_head_dim"},
    {"attention.indexer.top_k", "index_topk"},
    {"attention.kv_source_layer_ids", "kv_source_layer_ids"},
    {"attention.index_source_layer_ids", "index_source_layer_ids"},
    {"attention.candidate_source_layer_id", "candidate_source_layer_id"},
    {"attention.candidate_block_size", "candidate_block_size"},
    {"attention.candidate_topk_blocks", "candidate_topk_blocks"},
    {"expert_count", "n_routed_experts"},
    {"expert_used_count", "num_experts_per_tok"},
    {"expert_shared_count", "n_shared_experts"},
    {"expert_feed_forward_length", "moe_intermediate_size"},
    {"expert_shared_feed_forward_length", "moe_intermediate_size"},
    {"expert_weights_scale", "routed_scaling_factor"},
    {"expert_weights_norm", "norm_topk_prob"},
    {"hash_layer_count", "num_hash_layers"},
    {"swiglu_clamp_exp", "swiglu_limit"},
    {"swiglu_clamp_shexp", "swiglu_limit"},
    {"hyper_connection.count", "hc_mult"},
    {"hyper_connection.sinkhorn_iterations", "hc_sinkhorn_iters"},
    {"hyper_connection.epsilon", "hc_eps"},
    {"attention.layer_norm_rms_epsilon", "rms_norm_eps"},
    {"rope.freq_base", "rope_theta"},
    {"attention.compress_rope_freq_base", "compress_rope_theta"},
    {"rope.scaling.type", "rope_scaling.type"},
    {"rope.scaling.factor", "rope_scaling.factor"},
    {"rope.scaling.original_context_length", "rope_scaling.original_max_position_embeddings"},
    {"rope.scaling.yarn_beta_fast", "rope_scaling.beta_fast"},
    {"rope.scaling.yarn_beta_slow", "rope_scaling.beta_slow"},
};

/* The reader's state: the file, its dialect, the message buffer. */
typedef struct rd {
    const og_gguf *g;
    og_ds41_dialect d;
    char *err;
    size_t errlen;
} rd;

const char *og_ds41_key_name(og_ds41_dialect d, const char *key) {
    if (d == OG_DS41_ANTIREZ)
        for (size_t i = 0; i < sizeof antirez_names / sizeof antirez_names[0]; i++)
            if (!strcmp(antirez_names[i].key, key)) return antirez_names[i].antirez;
    return key;
}

/* The full GGUF name of key (its vcruz305 spelling) in r's dialect. */
static const char *kname(const rd *r, const char *key, char *buf, size_t n) {
    snprintf(buf, n, ARCH "%s", og_ds41_key_name(r->d, key));
    return buf;
}

/* A file that mixes the dialects' spellings (an antirez file with a key
 * spelled as llama.cpp does, a vcruz305 / mxxm-t file with a raw HF name) is
 * refused: which of the two values holds is anyone's guess, and a value read
 * from one spelling while the other says otherwise would be silently wrong. */
static og_status mixed_keys(const rd *r) {
    char mine[160], other[160];
    for (size_t i = 0; i < sizeof antirez_names / sizeof antirez_names[0]; i++) {
        const char *vc = antirez_names[i].key, *hf = antirez_names[i].antirez;
        if (!strcmp(vc, hf)) continue;
        const bool az = r->d == OG_DS41_ANTIREZ;
        snprintf(mine, sizeof mine, ARCH "%s", az ? hf : vc);
        snprintf(other, sizeof other, ARCH "%s", az ? vc : hf);
        if (og_gguf_find_kv(r->g, other))
            return og_fail(r->err, r->errlen, OG_ERR_FORMAT, "mixes the GGUF dialects: read as the %s dialect (which "
                           "spells it %s), it also has %s, the %s spelling", dialect_names[r->d], mine, other,
                           az ? "vcruz305 / mxxm-t" : "antirez");
    }
    return OG_OK;
}

/* A missing key names the dialect the file was read as. */
static og_status missing(const rd *r, og_status st, const char *full) {
    if (st != OG_ERR_NOT_FOUND) return st;
    return og_fail(r->err, r->errlen, OG_ERR_NOT_FOUND, "fits none of the dialects: missing %s (read as the %s dialect)",
                   full, dialect_names[r->d]);
}

static og_status ku(const rd *r, const char *key, bool required, uint64_t dflt, uint64_t lo, uint64_t hi, uint32_t *out) {
    char full[160];
    kname(r, key, full, sizeof full);
    return missing(r, og_arch_key_uint(r->g, full, required, dflt, lo, hi, out, r->err, r->errlen), full);
}

static og_status kf(const rd *r, const char *key, bool required, float dflt, float lo, bool lo_open, float hi, float *out) {
    char full[160];
    kname(r, key, full, sizeof full);
    return missing(r, og_arch_key_float(r->g, full, required, dflt, lo, lo_open, hi, out, r->err, r->errlen), full);
}

/* An integer key that a dialect may store as a float (antirez:
 * original_max_position_embeddings is f32): a whole number in lo..hi. */
static og_status ku_whole(const rd *r, const char *key, uint32_t dflt, uint32_t lo, uint32_t hi, uint32_t *out) {
    char full[160];
    kname(r, key, full, sizeof full);
    double v = dflt;
    og_status st = og_gguf_get_f64(r->g, full, &v);
    if (st && st != OG_ERR_NOT_FOUND) return og_fail(r->err, r->errlen, OG_ERR_FORMAT, "key %s is not a number", full);
    if (!(v >= lo && v <= hi) || v != floor(v))
        return og_fail(r->err, r->errlen, OG_ERR_FORMAT, "key %s = %g is not a whole number in %u..%u", full, v, lo, hi);
    *out = (uint32_t)v;
    return OG_OK;
}

/* An array key of integers: *kv NULL when absent (OG_OK), else at least
 * n_min and at most n_max entries, each a non-negative integer. */
static og_status karr(const rd *r, const char *key, uint64_t n_min, uint64_t n_max, const og_gguf_kv **kv, char *full,
                      size_t fulln) {
    kname(r, key, full, fulln);
    *kv = og_gguf_find_kv(r->g, full);
    if (!*kv) return OG_OK;
    if ((*kv)->type != OG_GGUF_ARRAY || (*kv)->arr_n < n_min || (*kv)->arr_n > n_max)
        return og_fail(r->err, r->errlen, OG_ERR_FORMAT, "key %s must be an array of %llu..%llu integers", full,
                       (unsigned long long)n_min, (unsigned long long)n_max);
    for (uint64_t i = 0; i < (*kv)->arr_n; i++) {
        int64_t v;
        if (og_gguf_kv_num_i64(*kv, i, &v) || v < 0)
            return og_fail(r->err, r->errlen, OG_ERR_FORMAT, "key %s[%llu] is not a non-negative integer below 2^63",
                           full, (unsigned long long)i);
    }
    return OG_OK;
}

static uint64_t arr_u(const og_gguf_kv *kv, uint64_t i) {
    int64_t v = 0;
    og_gguf_kv_num_i64(kv, i, &v);
    return (uint64_t)v;
}

bool og_ds41_is_prime(uint64_t p) {
    if (p < 2) return false;
    if (p % 2 == 0) return p == 2;
    for (uint64_t d = 3; d * d <= p; d += 2)
        if (p % d == 0) return false;
    return true;
}

/* ---- CSA2 roles (decision 1) ----------------------------------------------- */

static bool has_tensor(const rd *r, og_ds41_tensor_id id, int il) {
    char name[96];
    return !og_ds41_tensor_name(id, r->d, il, name, sizeof name) && og_gguf_find_tensor(r->g, name);
}

/* Marks the layers of an explicit id array (kv or index sources). */
static og_status mark_ids(const rd *r, og_ds41_hparams *h, const char *key, bool *flag_kv) {
    char full[160];
    const og_gguf_kv *kv;
    TRY(karr(r, key, 0, h->n_layer, &kv, full, sizeof full));
    if (!kv) return og_fail(r->err, r->errlen, OG_ERR_NOT_FOUND, "fits none of the dialects: missing %s (read as the %s "
                            "dialect)", full, dialect_names[r->d]);
    uint64_t prev = 0;
    for (uint64_t i = 0; i < kv->arr_n; i++) {
        uint64_t l = arr_u(kv, i);
        if (l >= h->n_layer || (i && l <= prev))
            return og_fail(r->err, r->errlen, OG_ERR_FORMAT, "key %s[%llu] = %llu: ids must be ascending layers below %u",
                           full, (unsigned long long)i, (unsigned long long)l, h->n_layer);
        if (!h->compress_ratio[l])
            return og_fail(r->err, r->errlen, OG_ERR_FORMAT, "key %s names layer %llu, whose compress ratio is 0", full,
                           (unsigned long long)l);
        if (flag_kv) h->layer[l].is_kv_source = h->layer[l].is_key_owner = true;
        else h->layer[l].is_index_source = true;
        prev = l;
    }
    return OG_OK;
}

static og_status derive_roles(const rd *r, og_ds41_hparams *h) {
    char full[160];
    const og_gguf_kv *expl = og_gguf_find_kv(r->g, kname(r, "attention.kv_source_layer_ids", full, sizeof full));
    h->roles_explicit = expl != NULL;
    if (h->roles_explicit) {
        bool dummy = true;
        TRY(mark_ids(r, h, "attention.kv_source_layer_ids", &dummy));
        TRY(mark_ids(r, h, "attention.index_source_layer_ids", NULL));
    } else {
        for (uint32_t il = 0; il < h->n_layer; il++) {
            og_ds41_layer *L = &h->layer[il];
            L->is_kv_source = has_tensor(r, OG_DS41_ATTN_COMP_KV, (int)il);
            L->is_index_source = has_tensor(r, OG_DS41_INDEXER_Q_B, (int)il);
            L->is_key_owner = has_tensor(r, OG_DS41_INDEXER_K, (int)il);
            if (!h->compress_ratio[il] && (L->is_kv_source || L->is_index_source || L->is_key_owner))
                return og_fail(r->err, r->errlen, OG_ERR_FORMAT, "layer %u has compress ratio 0 but a %s tensor", il,
                               L->is_kv_source ? "compressor (attn_compressor_kv)" : "indexer");
            if (L->is_key_owner && !L->is_kv_source)
                return og_fail(r->err, r->errlen, OG_ERR_FORMAT, "layer %u makes index keys (indexer.attn_k) but has no "
                               "compressor (attn_compressor_kv) whose latent they come from", il);
        }
    }
    /* candidate keys (any dialect; decision 1: else the first ratio-1 kv source, 2048 x 8) */
    uint32_t cand = UINT32_MAX;
    TRY(ku(r, "attention.candidate_source_layer_id", false, UINT32_MAX, 0, UINT32_MAX, &cand));
    TRY(ku(r, "attention.candidate_block_size", false, OG_DS41_CAND_BLOCK_DEFAULT, 1, OG_DS41_MAX_CAND_BLOCK,
           &h->candidate_block_size));
    TRY(ku(r, "attention.candidate_topk_blocks", false, OG_DS41_CAND_TOPK_DEFAULT, 1, OG_DS41_MAX_CAND_TOPK,
           &h->candidate_topk_blocks));
    h->candidate_source = -1;
    if (cand != UINT32_MAX) {
        kname(r, "attention.candidate_source_layer_id", full, sizeof full);
        if (cand >= h->n_layer || !h->layer[cand].is_index_source || !h->layer[cand].is_kv_source)
            return og_fail(r->err, r->errlen, OG_ERR_FORMAT, "key %s = %u is not a layer that compresses and indexes "
                           "(a kv source with an indexer)", full, cand);
        h->candidate_source = (int32_t)cand;
    } else {
        for (uint32_t il = 0; il < h->n_layer && h->candidate_source < 0; il++)
            if (h->compress_ratio[il] == 1 && h->layer[il].is_kv_source && h->layer[il].is_index_source)
                h->candidate_source = (int32_t)il;
    }
    int32_t last_kv = -1, last_key = -1, last_idx = -1;
    for (uint32_t il = 0; il < h->n_layer; il++) {
        og_ds41_layer *L = &h->layer[il];
        L->ratio = h->compress_ratio[il];
        L->kv_source = L->key_owner = L->topk_source = -1;
        if (L->is_kv_source) last_kv = (int32_t)il;
        if (L->is_key_owner) last_key = (int32_t)il;
        if (L->is_index_source) last_idx = (int32_t)il;
        if (!L->ratio) continue;
        if (last_kv < 0 || h->compress_ratio[last_kv] != L->ratio)
            return og_fail(r->err, r->errlen, OG_ERR_FORMAT, "layer %u (compress ratio %u) has no kv source of that ratio "
                           "at or below it (the latest compressor is %s%d)", il, L->ratio, last_kv < 0 ? "none: " : "layer ",
                           last_kv);
        L->kv_source = last_kv;
        if (L->is_index_source) {
            /* a reindex layer scores the latest key owner's keys (decision 1): they
             * must index the rows it attends over */
            if (last_key != last_kv)
                return og_fail(r->err, r->errlen, OG_ERR_FORMAT, "layer %u runs an indexer (indexer.attn_q_b) over layer "
                               "%d's rows, but the latest index keys (indexer.attn_k) are %s%d's", il, last_kv,
                               last_key < 0 ? "none: " : "layer ", last_key);
            L->key_owner = last_key;
        }
        /* the top-k it attends with: the latest indexer over the same rows */
        if (last_idx >= 0 && h->layer[last_idx].kv_source == last_kv) L->topk_source = last_idx;
        L->is_candidate_source = (int32_t)il == h->candidate_source;
        L->candidate_masked = L->is_index_source && !L->is_kv_source && h->candidate_source >= 0 &&
                              h->candidate_source < (int32_t)il && h->layer[h->candidate_source].kv_source == last_kv;
    }
    /* a role's tensors on a layer without the role: a conversion that lost the
     * role's defining tensor (vcruz305) or a layer left out of the id keys
     * (mxxm-t, antirez); running without them would be silently wrong */
    static const struct { og_ds41_tensor_id id; int role; } parts[] = {
        {OG_DS41_ATTN_COMP_KV, 0}, {OG_DS41_ATTN_COMP_GATE, 0}, {OG_DS41_ATTN_COMP_NORM, 0},
        {OG_DS41_INDEXER_Q_B, 1}, {OG_DS41_INDEXER_PROJ, 1}, {OG_DS41_INDEXER_K, 2}, {OG_DS41_INDEXER_K_NORM, 2},
    };
    static const char *const defining[3] = {"attn_compressor_kv", "indexer.attn_q_b", "indexer.attn_k"};
    for (uint32_t il = 0; il < h->n_layer; il++) {
        const og_ds41_layer *L = &h->layer[il];
        const bool has_role[3] = {L->is_kv_source, L->is_index_source, L->is_key_owner};
        for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
            if (has_role[parts[i].role] || !has_tensor(r, parts[i].id, (int)il)) continue;
            char name[96];
            og_ds41_tensor_name(parts[i].id, r->d, (int)il, name, sizeof name);
            if (h->roles_explicit)
                return og_fail(r->err, r->errlen, OG_ERR_FORMAT, "tensor %s is there but layer %u is not in %s", name, il,
                               kname(r, parts[i].role == 1 ? "attention.index_source_layer_ids"
                                                           : "attention.kv_source_layer_ids", full, sizeof full));
            return og_fail(r->err, r->errlen, OG_ERR_FORMAT, "tensor %s is there but layer %u has no %s (the tensor that "
                           "gives a layer that role): a partial conversion?", name, il, defining[parts[i].role]);
        }
    }
    return OG_OK;
}

/* ---- Engram (§3.2 constants, with the self-checks) ----------------------- */

static og_status read_engram(const rd *r, og_ds41_hparams *h) {
    char full[160], f2[160];
    const og_gguf_kv *ids, *primes, *offsets, *mults, *tmap, *rows;
    TRY(karr(r, "engram.layer_ids", 1, OG_DS41_MAX_ENGRAM_LAYER, &ids, full, sizeof full));
    if (!ids) return missing(r, OG_ERR_NOT_FOUND, full);
    h->n_engram_layer = (uint32_t)ids->arr_n;
    for (uint32_t s = 0; s < h->n_engram_layer; s++) {
        uint64_t l = arr_u(ids, s);
        if (l >= h->n_layer || (s && l <= h->engram_layer[s - 1]))
            return og_fail(r->err, r->errlen, OG_ERR_FORMAT, "key %s[%u] = %llu: ids must be ascending layers below %u",
                           full, s, (unsigned long long)l, h->n_layer);
        h->engram_layer[s] = (uint32_t)l;
        h->layer[l].has_engram = true;
        h->layer[l].engram_slot = (int32_t)s;
    }
    TRY(ku(r, "engram.head_count", true, 0, 1, OG_DS41_MAX_ENGRAM_HEAD, &h->engram_n_head));
    TRY(ku(r, "engram.key_length", true, 0, OG_DS41_ENGRAM_FP8_BLOCK, OG_DS41_MAX_ENGRAM_DIM, &h->engram_head_dim));
    if (h->engram_head_dim % OG_DS41_ENGRAM_FP8_BLOCK)
        return og_fail(r->err, r->errlen, OG_ERR_FORMAT, "key " ARCH "engram.key_length = %u is not a multiple of %u",
                       h->engram_head_dim, OG_DS41_ENGRAM_FP8_BLOCK);
    TRY(ku(r, "engram.max_ngram_size", true, 0, 2, OG_DS41_MAX_ENGRAM_NGRAM, &h->engram_max_ngram));
    TRY(ku(r, "engram.pad_id", true, 0, 0, h->n_vocab - 1, &h->engram_pad_id));
    h->engram_n_bucket = (h->engram_max_ngram - 1) * h->engram_n_head;
    const uint64_t nb = h->engram_n_bucket, ne = h->n_engram_layer;
    TRY(karr(r, "engram.primes", ne * nb, ne * nb, &primes, full, sizeof full));
    if (!primes) return missing(r, OG_ERR_NOT_FOUND, full);
    TRY(karr(r, "engram.offsets", ne * nb, ne * nb, &offsets, f2, sizeof f2));
    if (!offsets) return missing(r, OG_ERR_NOT_FOUND, f2);
    for (uint64_t i = 0; i < ne * nb; i++) {
        uint64_t p = arr_u(primes, i);
        if (p > UINT32_MAX || !og_ds41_is_prime(p))
            return og_fail(r->err, r->errlen, OG_ERR_FORMAT, "Engram self-check failed: %s[%llu] = %llu is not a prime "
                           "below 2^32", full, (unsigned long long)i, (unsigned long long)p);
        for (uint64_t j = 0; j < i; j++)
            if (arr_u(primes, j) == p)
                return og_fail(r->err, r->errlen, OG_ERR_FORMAT, "Engram self-check failed: %s[%llu] = %llu repeats "
                               "entry %llu (primes are never reused)", full, (unsigned long long)i,
                               (unsigned long long)p, (unsigned long long)j);
    }
    for (uint32_t s = 0; s < ne; s++) {
        uint64_t sum = 0;
        for (uint32_t b = 0; b < nb; b++) {
            const uint64_t i = (uint64_t)s * nb + b, o = arr_u(offsets, i);
            if (o != sum)
                return og_fail(r->err, r->errlen, OG_ERR_FORMAT, "Engram self-check failed: %s[%llu] = %llu but the "
                               "running sum of layer %u's primes before bucket %u is %llu", f2, (unsigned long long)i,
                               (unsigned long long)o, h->engram_layer[s], b, (unsigned long long)sum);
            h->engram_prime[s][b] = arr_u(primes, i);
            h->engram_offset[s][b] = o;
            sum += h->engram_prime[s][b];
        }
        h->engram_rows[s] = sum;
    }
    TRY(karr(r, "engram.multipliers", ne * h->engram_max_ngram, ne * h->engram_max_ngram, &mults, full, sizeof full));
    if (!mults) return missing(r, OG_ERR_NOT_FOUND, full);
    for (uint64_t i = 0; i < mults->arr_n; i++) {
        const uint64_t m = arr_u(mults, i);
        if (!(m & 1) || m >= OG_DS41_MULTIPLIER_LIMIT)
            return og_fail(r->err, r->errlen, OG_ERR_FORMAT, "Engram self-check failed: %s[%llu] = %llu is not an odd "
                           "number below 2^47", full, (unsigned long long)i, (unsigned long long)m);
        h->engram_mult[i / h->engram_max_ngram][i % h->engram_max_ngram] = m;
    }
    TRY(karr(r, "engram.token_map", h->n_vocab, h->n_vocab, &tmap, full, sizeof full));
    if (!tmap) return missing(r, OG_ERR_NOT_FOUND, full);
    uint64_t mx = 0;
    for (uint64_t t = 0; t < tmap->arr_n; t++) {
        const uint64_t c = arr_u(tmap, t);
        if (c >= OG_DS41_MAX_COMPRESSED)
            return og_fail(r->err, r->errlen, OG_ERR_FORMAT, "Engram self-check failed: %s[%llu] = %llu is not below the "
                           "compressed vocabulary bound %u (2^17: the hash's products must fit 64 bits)", full,
                           (unsigned long long)t, (unsigned long long)c, OG_DS41_MAX_COMPRESSED);
        if (c > mx) mx = c;
    }
    h->token_map = tmap;
    h->n_compressed = (uint32_t)mx + 1;
    /* the tables: rows = the primes' sum (the dialect's name; antirez: FP8 rows) */
    h->engram_fp8 = r->d == OG_DS41_ANTIREZ;
    if (h->engram_fp8) {
        char enc[64] = "";
        if (!og_gguf_get_cstr(r->g, ARCH "engram.encoding", enc, sizeof enc) && strcmp(enc, "e4m3_e8m0_32_row264") &&
            strcmp(enc, "e4m3_e8m0_32"))
            return og_fail(r->err, r->errlen, OG_ERR_UNSUPPORTED, "key " ARCH "engram.encoding = '%s' (onegpu reads "
                           "e4m3_e8m0_32_row264)", enc);
    }
    /* antirez's engram.rows: one count per table (an array), or their sum */
    rows = og_gguf_find_kv(r->g, kname(r, "engram.rows", full, sizeof full));
    if (rows && rows->type == OG_GGUF_ARRAY) TRY(karr(r, "engram.rows", ne, ne, &rows, full, sizeof full));
    if (rows && rows->type != OG_GGUF_ARRAY) {
        uint64_t total = 0;
        for (uint32_t s = 0; s < ne; s++) total += h->engram_rows[s];
        if (arr_u(rows, 0) != total)
            return og_fail(r->err, r->errlen, OG_ERR_FORMAT, "Engram self-check failed: %s = %llu but the tables' primes "
                           "sum to %llu", full, (unsigned long long)arr_u(rows, 0), (unsigned long long)total);
        rows = NULL;
    }
    for (uint32_t s = 0; s < ne; s++) {
        if (rows && arr_u(rows, s) != h->engram_rows[s])
            return og_fail(r->err, r->errlen, OG_ERR_FORMAT, "Engram self-check failed: %s[%u] = %llu but layer %u's "
                           "primes sum to %llu", full, s, (unsigned long long)arr_u(rows, s), h->engram_layer[s],
                           (unsigned long long)h->engram_rows[s]);
        char name[96];
        og_ds41_tensor_name(OG_DS41_ENGRAM_EMBD, r->d, (int)h->engram_layer[s], name, sizeof name);
        const og_gguf_tensor *t = og_gguf_find_tensor(r->g, name);
        if (!t) return og_fail(r->err, r->errlen, OG_ERR_NOT_FOUND, "fits none of the dialects: missing tensor %s (read "
                               "as the %s dialect)", name, dialect_names[r->d]);
        if (t->n_dims != 2 || (uint64_t)t->ne[1] != h->engram_rows[s])
            return og_fail(r->err, r->errlen, OG_ERR_FORMAT, "Engram self-check failed: layer %u's %u primes sum to %llu "
                           "but its table %s has %lld rows", h->engram_layer[s], h->engram_n_bucket,
                           (unsigned long long)h->engram_rows[s], name, (long long)(t->n_dims == 2 ? t->ne[1] : -1));
    }
    return OG_OK;
}

uint32_t og_ds41_token_map(const og_ds41_hparams *hp, uint32_t tok) {
    int64_t v;
    if (!hp->token_map || tok >= hp->n_vocab || og_gguf_kv_num_i64(hp->token_map, tok, &v)) return UINT32_MAX;
    return (uint32_t)v;
}

/* ---- the reader ------------------------------------------------------------ */

og_status og_ds41_hparams_read(const og_gguf *g, const og_logger *lg, og_ds41_hparams *h, char *err, size_t errlen) {
    memset(h, 0, sizeof *h);
    char arch[32] = "";
    og_gguf_get_cstr(g, "general.architecture", arch, sizeof arch);
    if (strcmp(arch, "deepseek41"))
        return og_fail(err, errlen, OG_ERR_UNSUPPORTED, "architecture '%s' is not deepseek41", arch);
    rd r = {g, OG_DS41_VCRUZ305, err, errlen};
    if (og_gguf_find_kv(g, ARCH "num_hidden_layers") || og_gguf_find_kv(g, ARCH "hidden_size")) r.d = OG_DS41_ANTIREZ;
    else if (og_gguf_find_kv(g, ARCH "attention.kv_source_layer_ids")) r.d = OG_DS41_MXXM_T;
    h->dialect = r.d;
    TRY(mixed_keys(&r));
    uint32_t n_all, nextn, u;
    TRY(ku(&r, "block_count", true, 0, 1, OG_DS4_MAX_LAYER, &n_all));
    TRY(ku(&r, "nextn_predict_layers", false, 0, 0, n_all - 1, &nextn));
    h->n_layer = n_all - nextn;
    TRY(ku(&r, "embedding_length", true, 0, 1, OG_DS4_MAX_EMBD, &h->n_embd));
    TRY(ku(&r, "context_length", true, 0, 1, OG_DS4_MAX_CTX, &h->n_ctx_train));
    TRY(ku(&r, "attention.head_count", true, 0, 1, OG_DS4_MAX_HEAD, &h->n_head));
    TRY(ku(&r, "attention.head_count_kv", false, 1, 1, 1, &u)); /* one K = V head */
    TRY(ku(&r, "attention.key_length", true, 0, 2, OG_DS4_MAX_HEAD_DIM, &h->head_dim));
    TRY(ku(&r, "attention.value_length", false, h->head_dim, h->head_dim, h->head_dim, &u));
    TRY(ku(&r, "rope.dimension_count", true, 0, 2, h->head_dim < OG_ROPE_MAX_DIM ? h->head_dim : OG_ROPE_MAX_DIM,
           &h->n_rot));
    if (h->n_rot % 2)
        return og_fail(err, errlen, OG_ERR_FORMAT, "rope dimension count %u is odd (RoPE rotates pairs)", h->n_rot);
    TRY(ku(&r, "attention.q_lora_rank", true, 0, 1, OG_DS4_MAX_RANK, &h->q_lora_rank));
    TRY(ku(&r, "attention.output_lora_rank", true, 0, 1, OG_DS4_MAX_RANK, &h->o_lora_rank));
    TRY(ku(&r, "attention.output_group_count", true, 0, 1, h->n_head < OG_DS4_MAX_GROUP ? h->n_head : OG_DS4_MAX_GROUP,
           &h->o_group_count));
    if (h->n_head % h->o_group_count)
        return og_fail(err, errlen, OG_ERR_FORMAT, "output group count %u does not divide head count %u",
                       h->o_group_count, h->n_head);
    TRY(ku(&r, "attention.sliding_window", true, 0, 1, OG_DS4_MAX_SWA, &h->n_swa));

    /* compress_ratios: >= n_layer entries, each 0, 1 or 2 (§4.3.3); the
     * entries past the trunk (vcruz305: three absent DSpark blocks) are ignored */
    char full[160];
    const og_gguf_kv *cr;
    TRY(karr(&r, "attention.compress_ratios", n_all, OG_DS4_MAX_LAYER + 16, &cr, full, sizeof full));
    if (!cr) return missing(&r, OG_ERR_NOT_FOUND, full);
    bool any_comp = false;
    for (uint32_t i = 0; i < h->n_layer; i++) {
        const uint64_t v = arr_u(cr, i);
        if (v > 2)
            return og_fail(err, errlen, OG_ERR_FORMAT, "key %s[%u] = %llu: deepseek41 ratios are 0, 1 or 2", full, i,
                           (unsigned long long)v);
        h->compress_ratio[i] = (uint32_t)v;
        any_comp |= v != 0;
    }
    TRY(ku(&r, "attention.indexer.head_count", any_comp, 0, any_comp ? 1 : 0, OG_DS4_MAX_INDEXER_HEAD,
           &h->indexer_n_head));
    TRY(ku(&r, "attention.indexer.key_length", any_comp, 0, any_comp ? h->n_rot : 0, OG_DS4_MAX_INDEXER_DIM,
           &h->indexer_head_dim));
    if (any_comp && h->indexer_head_dim % 32)
        return og_fail(err, errlen, OG_ERR_FORMAT, "indexer key length %u is not a multiple of 32 (the FP4 blocks of "
                       "decision 2)", h->indexer_head_dim);
    TRY(ku(&r, "attention.indexer.top_k", any_comp, 0, any_comp ? 1 : 0, OG_DS4_MAX_TOP_K, &h->indexer_top_k));

    /* MoE (§4.1.6; decision 7) */
    TRY(ku(&r, "expert_count", true, 0, 1, OG_DS4_MAX_EXPERT, &h->n_expert));
    TRY(ku(&r, "expert_used_count", true, 0, 1, h->n_expert < OG_DS4_MAX_EXPERT_USED ? h->n_expert
                                                                                   : OG_DS4_MAX_EXPERT_USED,
           &h->n_expert_used));
    TRY(ku(&r, "expert_shared_count", true, 0, 0, OG_DS4_MAX_EXPERT_SHARED, &h->n_expert_shared));
    TRY(ku(&r, "expert_feed_forward_length", true, 0, 1, OG_DS4_MAX_FF, &h->n_ff_exp));
    TRY(ku(&r, "expert_shared_feed_forward_length", false, h->n_ff_exp, 1, OG_DS4_MAX_FF, &h->n_ff_shexp));
    TRY(ku(&r, "hash_layer_count", false, 0, 0, 0, &u)); /* V4.1 has none (§2) */
    if (r.d == OG_DS41_ANTIREZ) {
        char sf[32] = "";
        if (og_gguf_get_cstr(g, ARCH "scoring_func", sf, sizeof sf))
            return missing(&r, OG_ERR_NOT_FOUND, ARCH "scoring_func");
        if (strcmp(sf, "sqrtsoftplus"))
            return og_fail(err, errlen, OG_ERR_UNSUPPORTED, "key " ARCH "scoring_func = '%s' (deepseek41 scores with "
                           "sqrtsoftplus)", sf);
    } else {
        TRY(ku(&r, "expert_gating_func", false, OG_DS4_GATING_SQRT_SOFTPLUS, 0, 1000, &u));
        if (u != OG_DS4_GATING_SQRT_SOFTPLUS)
            return og_fail(err, errlen, OG_ERR_UNSUPPORTED, "key " ARCH "expert_gating_func = %u (deepseek41 scores "
                           "with sqrt(softplus), %u)", u, OG_DS4_GATING_SQRT_SOFTPLUS);
    }
    {
        char kb[160];
        kname(&r, "expert_weights_norm", kb, sizeof kb);
        if (og_gguf_get_bool(g, kb, &h->expert_weights_norm))
            return og_fail(err, errlen, OG_ERR_NOT_FOUND, "fits none of the dialects: missing %s (a bool; read as the "
                           "%s dialect)", kb, dialect_names[r.d]);
    }
    TRY(kf(&r, "expert_weights_scale", true, 0, 0.0f, true, 1e4f, &h->expert_weights_scale));
    bool found;
    kname(&r, "swiglu_clamp_exp", full, sizeof full);
    TRY(og_arch_key_float_per_layer(g, full, h->n_layer, 1e6f, h->swiglu_clamp_exp, &found, err, errlen));
    if (!found) return missing(&r, OG_ERR_NOT_FOUND, full);
    kname(&r, "swiglu_clamp_shexp", full, sizeof full);
    TRY(og_arch_key_float_per_layer(g, full, h->n_layer, 1e6f, h->swiglu_clamp_shexp, &found, err, errlen));
    if (!found) memcpy(h->swiglu_clamp_shexp, h->swiglu_clamp_exp, sizeof h->swiglu_clamp_exp);

    /* mHC (§4.1.3) and the norms (decision 7: the file's eps everywhere) */
    TRY(ku(&r, "hyper_connection.count", true, 0, 1, OG_DS4_MAX_HC, &h->hc_count));
    TRY(ku(&r, "hyper_connection.sinkhorn_iterations", true, 0, 1, OG_DS4_MAX_SINKHORN, &h->hc_sinkhorn_iters));
    TRY(kf(&r, "hyper_connection.epsilon", true, 0, 0.0f, true, 1.0f, &h->hc_eps));
    TRY(kf(&r, "attention.layer_norm_rms_epsilon", true, 0, 0.0f, true, 1.0f, &h->rms_eps));

    /* RoPE (§4.1.2; antirez: thetas as u32, the original context as f32) */
    float base, comp_base, factor, beta_fast, beta_slow;
    uint32_t n_ctx_orig = h->n_ctx_train;
    TRY(kf(&r, "rope.freq_base", false, 10000.0f, 1.0f, true, 1e12f, &base));
    TRY(kf(&r, "attention.compress_rope_freq_base", any_comp, base, 1.0f, true, 1e12f, &comp_base));
    char stype[16] = "yarn";
    kname(&r, "rope.scaling.type", full, sizeof full);
    og_gguf_get_cstr(g, full, stype, sizeof stype);
    if (!strcmp(stype, "yarn")) h->rope_scaling = OG_DS4_ROPE_YARN;
    else if (!strcmp(stype, "linear")) h->rope_scaling = OG_DS4_ROPE_LINEAR;
    else if (!strcmp(stype, "none")) h->rope_scaling = OG_DS4_ROPE_NONE;
    else return og_fail(err, errlen, OG_ERR_UNSUPPORTED, "key %s = '%s' (yarn, linear or none)", full, stype);
    TRY(kf(&r, "rope.scaling.factor", false, 1.0f, 1.0f, false, 1e6f, &factor));
    TRY(ku_whole(&r, "rope.scaling.original_context_length", h->n_ctx_train, 1, OG_DS4_MAX_CTX, &n_ctx_orig));
    TRY(kf(&r, "rope.scaling.yarn_beta_fast", false, 32.0f, 0.0f, true, 1e4f, &beta_fast));
    TRY(kf(&r, "rope.scaling.yarn_beta_slow", false, 1.0f, 0.0f, true, 1e4f, &beta_slow));
    og_ds4_rope_schedules(h->rope_scaling, h->n_rot, base, comp_base, factor, n_ctx_orig, beta_fast, beta_slow,
                          &h->rope_swa, &h->rope_comp);

    /* n_vocab from token_embd [N, V] */
    const og_gguf_tensor *te = og_gguf_find_tensor(g, "token_embd.weight");
    if (!te) return og_fail(err, errlen, OG_ERR_NOT_FOUND, "fits none of the dialects: missing tensor token_embd.weight");
    if (te->n_dims != 2 || te->ne[0] != (int64_t)h->n_embd || te->ne[1] < 1 || te->ne[1] > (int64_t)OG_DS4_MAX_VOCAB)
        return og_fail(err, errlen, OG_ERR_FORMAT, "tensor token_embd.weight must be [%u, 1..%u]", h->n_embd,
                       OG_DS4_MAX_VOCAB);
    h->n_vocab = (uint32_t)te->ne[1];
    TRY(ku(&r, "vocab_size", false, h->n_vocab, h->n_vocab, h->n_vocab, &u));

    for (uint32_t il = 0; il < h->n_layer; il++) h->layer[il].engram_slot = -1;
    TRY(read_engram(&r, h));
    TRY(derive_roles(&r, h));
    og_log(lg, OG_LOG_DEBUG, "deepseek41 (%s dialect): %u layers, roles from %s, candidate source %d (%u blocks x %u)",
           dialect_names[r.d], h->n_layer, h->roles_explicit ? "the source-layer keys" : "tensor presence",
           h->candidate_source, h->candidate_topk_blocks, h->candidate_block_size);
    return OG_OK;
}

/* ---- the table --------------------------------------------------------------- */

/* X(id, vcruz305 name, mxxm-t name, antirez name, where, n_dims, ne0, ne1, ne2,
 * required, applied, role, wclass). Names differ only where §3.2 says so. */
#define OG_DS41_ROWS(X) \
    X(TOKEN_EMBD, "token_embd.weight", "=", "=", GLOBAL, 2, EMBD, VOCAB, 1, true, true, EMBEDDINGS, EMBD) \
    X(OUTPUT_NORM, "output_norm.weight", "=", "=", GLOBAL, 1, EMBD, 1, 1, true, true, OUTPUT, NORM) \
    X(OUTPUT, "output.weight", "=", "=", GLOBAL, 2, EMBD, VOCAB, 1, true, true, OUTPUT, OUTPUT) \
    X(HC_ATTN_FN, "hc_attn_fn.weight", "=", "=", EVERY, 2, HC_EMBD, HC_MIX, 1, true, true, OTHER, AUX) \
    X(HC_ATTN_BASE, "hc_attn_base.weight", "=", "=", EVERY, 1, HC_MIX, 1, 1, true, true, OTHER, VEC) \
    X(HC_ATTN_SCALE, "hc_attn_scale.weight", "=", "=", EVERY, 1, 3, 1, 1, true, true, OTHER, VEC) \
    X(ATTN_NORM, "attn_norm.weight", "=", "=", EVERY, 1, EMBD, 1, 1, true, true, ATTENTION, NORM) \
    X(ATTN_Q_A, "attn_q_a.weight", "=", "=", EVERY, 2, EMBD, Q_RANK, 1, true, true, ATTENTION, ATTN) \
    X(ATTN_Q_A_NORM, "attn_q_a_norm.weight", "=", "=", EVERY, 1, Q_RANK, 1, 1, true, true, ATTENTION, NORM) \
    X(ATTN_Q_B, "attn_q_b.weight", "=", "=", EVERY, 2, Q_RANK, Q, 1, true, true, ATTENTION, ATTN) \
    X(ATTN_KV, "attn_kv.weight", "=", "=", EVERY, 2, EMBD, HEAD_DIM, 1, true, true, ATTENTION, ATTN) \
    X(ATTN_KV_A_NORM, "attn_kv_a_norm.weight", "=", "=", EVERY, 1, HEAD_DIM, 1, 1, true, true, ATTENTION, NORM) \
    X(ATTN_SINKS, "attn_sinks.weight", "=", "=", EVERY, 1, HEAD, 1, 1, true, true, ATTENTION, VEC) \
    X(ATTN_OUTPUT_A, "attn_output_a.weight", "=", "=", EVERY, 2, O_GROUP_IN, O_LOW, 1, true, true, ATTENTION, ATTN) \
    X(ATTN_OUTPUT_B, "attn_output_b.weight", "=", "=", EVERY, 2, O_LOW, EMBD, 1, true, true, ATTENTION, ATTN) \
    X(ATTN_COMP_KV, "attn_compressor_kv.weight", "=", "=", KV_SOURCE, 2, EMBD, HEAD_DIM, 1, true, true, ATTENTION, AUX) \
    X(ATTN_COMP_GATE, "attn_compressor_gate.weight", "=", "=", GATED, 2, EMBD, HEAD_DIM, 1, true, true, ATTENTION, AUX) \
    X(ATTN_COMP_NORM, "attn_compressor_norm.weight", "=", "=", KV_SOURCE, 1, HEAD_DIM, 1, 1, true, true, ATTENTION, NORM) \
    X(INDEXER_K, "indexer.attn_k.weight", "indexer_compressor_kv.weight", "=", KEY_OWNER, 2, HEAD_DIM, IDX_DIM, 1, true, \
      true, ATTENTION, AUX) \
    X(INDEXER_K_NORM, "indexer.k_norm.weight", "indexer_compressor_norm.weight", "=", KEY_OWNER, 1, IDX_DIM, 1, 1, true, \
      true, ATTENTION, NORM) \
    X(INDEXER_Q_B, "indexer.attn_q_b.weight", "=", "=", INDEX, 2, Q_RANK, IDX_Q, 1, true, true, ATTENTION, AUX) \
    X(INDEXER_PROJ, "indexer.proj.weight", "=", "=", INDEX, 2, EMBD, IDX_HEAD, 1, true, true, ATTENTION, AUX) \
    X(ENGRAM_EMBD, "engram_embd.weight", "engram_embed.weight", "=", ENGRAM, 2, ENGRAM_ROW, ENGRAM_ROWS, 1, true, true, \
      ENGRAM, ENGRAM) \
    X(ENGRAM_WKV, "engram_wkv.weight", "=", "engram_kv.weight", ENGRAM, 2, ENGRAM_IN, ENGRAM_OUT, 1, true, true, OTHER, \
      ENGRAM_PROJ) \
    X(ENGRAM_Q, "engram_q.weight", "=", "engram_q_norm.weight", ENGRAM, 2, EMBD, HC, 1, true, true, OTHER, F32M) \
    X(ENGRAM_K, "engram_k.weight", "=", "engram_k_norm.weight", ENGRAM, 2, EMBD, HC, 1, true, true, OTHER, F32M) \
    X(HC_FFN_FN, "hc_ffn_fn.weight", "=", "=", EVERY, 2, HC_EMBD, HC_MIX, 1, true, true, OTHER, AUX) \
    X(HC_FFN_BASE, "hc_ffn_base.weight", "=", "=", EVERY, 1, HC_MIX, 1, 1, true, true, OTHER, VEC) \
    X(HC_FFN_SCALE, "hc_ffn_scale.weight", "=", "=", EVERY, 1, 3, 1, 1, true, true, OTHER, VEC) \
    X(FFN_NORM, "ffn_norm.weight", "=", "=", EVERY, 1, EMBD, 1, 1, true, true, NORM, NORM) \
    X(FFN_GATE_INP, "ffn_gate_inp.weight", "=", "=", EVERY, 2, EMBD, EXPERT, 1, true, true, ROUTER, ROUTER) \
    X(EXP_PROBS_B, "exp_probs_b.bias", "=", "=", EVERY, 1, EXPERT, 1, 1, true, true, ROUTER, VEC) \
    X(EXP_PROBS_B_VL, "exp_probs_b_vl.bias", "=", "=", EVERY, 1, EXPERT, 1, 1, false, false, ROUTER, VEC) \
    X(FFN_GATE_EXPS, "ffn_gate_exps.weight", "=", "=", EVERY, 3, EMBD, FF, EXPERT, true, true, ROUTED_EXPERTS, ROUTED) \
    X(FFN_UP_EXPS, "ffn_up_exps.weight", "=", "=", EVERY, 3, EMBD, FF, EXPERT, true, true, ROUTED_EXPERTS, ROUTED) \
    X(FFN_DOWN_EXPS, "ffn_down_exps.weight", "=", "=", EVERY, 3, FF, EMBD, EXPERT, true, true, ROUTED_EXPERTS, \
      ROUTED_DOWN) \
    X(FFN_GATE_SHEXP, "ffn_gate_shexp.weight", "=", "=", SHARED, 2, EMBD, FF_SH, 1, true, true, SHARED_EXPERTS, SHARED) \
    X(FFN_UP_SHEXP, "ffn_up_shexp.weight", "=", "=", SHARED, 2, EMBD, FF_SH, 1, true, true, SHARED_EXPERTS, SHARED) \
    X(FFN_DOWN_SHEXP, "ffn_down_shexp.weight", "=", "=", SHARED, 2, FF_SH, EMBD, 1, true, true, SHARED_EXPERTS, \
      SHARED_DOWN)

/* "=": the vcruz305 spelling */
#define NM(v, x) (x[0] == '=' ? v : x)
#define D(x) OG_DS41_D_##x
#define KIND(id, v, m, a, wh, nd, n0, n1, n2, req, app, role, wc) \
    [OG_DS41_##id] = {{v, NM(v, m), NM(v, a)}, OG_DS41_##wh, nd, {D(n0), D(n1), D(n2)}, req, app, OG_ROLE_##role, \
                      OG_DS41_W_##wc},
#define ONE(...) +1
_Static_assert(0 OG_DS41_ROWS(ONE) == OG_DS41_N_TENSOR, "one row per og_ds41_tensor_id");
#undef ONE
const og_ds41_tensor_kind og_ds41_tensors[OG_DS41_N_TENSOR] = {OG_DS41_ROWS(KIND)};
#undef KIND
#undef D
#undef NM

bool og_ds41_tensor_in_layer(const og_ds41_hparams *hp, og_ds41_tensor_id id, int il) {
    if ((unsigned)id >= OG_DS41_N_TENSOR) return false;
    const og_ds41_where w = og_ds41_tensors[id].where;
    if (w == OG_DS41_GLOBAL) return il < 0;
    if (il < 0 || (uint32_t)il >= hp->n_layer) return false;
    const og_ds41_layer *L = &hp->layer[il];
    switch (w) {
    case OG_DS41_EVERY: return true;
    case OG_DS41_KV_SOURCE: return L->is_kv_source;
    case OG_DS41_GATED: return L->is_kv_source && hp->compress_ratio[il] > 1;
    case OG_DS41_KEY_OWNER: return L->is_key_owner;
    case OG_DS41_INDEX: return L->is_index_source;
    case OG_DS41_ENGRAM: return L->has_engram;
    case OG_DS41_SHARED: return hp->n_expert_shared > 0;
    case OG_DS41_GLOBAL: break;
    }
    return false;
}

static int64_t dim_value(const og_ds41_hparams *h, og_ds41_dim d, int il) {
    const int32_t slot = il >= 0 ? h->layer[il].engram_slot : -1;
    switch (d) {
    case OG_DS41_D_1: return 1;
    case OG_DS41_D_3: return 3;
    case OG_DS41_D_EMBD: return h->n_embd;
    case OG_DS41_D_VOCAB: return h->n_vocab;
    case OG_DS41_D_HC: return h->hc_count;
    case OG_DS41_D_HC_EMBD: return (int64_t)h->hc_count * h->n_embd;
    case OG_DS41_D_HC_MIX: return (int64_t)(2 + h->hc_count) * h->hc_count;
    case OG_DS41_D_Q_RANK: return h->q_lora_rank;
    case OG_DS41_D_HEAD: return h->n_head;
    case OG_DS41_D_HEAD_DIM: return h->head_dim;
    case OG_DS41_D_Q: return (int64_t)h->n_head * h->head_dim;
    case OG_DS41_D_O_GROUP_IN: return (int64_t)h->n_head * h->head_dim / h->o_group_count;
    case OG_DS41_D_O_LOW: return (int64_t)h->o_group_count * h->o_lora_rank;
    case OG_DS41_D_IDX_HEAD: return h->indexer_n_head;
    case OG_DS41_D_IDX_Q: return (int64_t)h->indexer_n_head * h->indexer_head_dim;
    case OG_DS41_D_IDX_DIM: return h->indexer_head_dim;
    case OG_DS41_D_EXPERT: return h->n_expert;
    case OG_DS41_D_FF: return h->n_ff_exp;
    case OG_DS41_D_FF_SH: return (int64_t)h->n_ff_shexp * h->n_expert_shared;
    case OG_DS41_D_ENGRAM_ROW:
        return h->engram_head_dim + (h->engram_fp8 ? h->engram_head_dim / OG_DS41_ENGRAM_FP8_BLOCK : 0);
    case OG_DS41_D_ENGRAM_ROWS: return slot >= 0 ? (int64_t)h->engram_rows[slot] : 0;
    case OG_DS41_D_ENGRAM_IN: return (int64_t)h->engram_n_bucket * h->engram_head_dim;
    case OG_DS41_D_ENGRAM_OUT: return (int64_t)(h->hc_count + 1) * h->n_embd;
    }
    return 0;
}

og_status og_ds41_tensor_shape(const og_ds41_hparams *hp, og_ds41_tensor_id id, int il, int64_t ne[3], uint32_t *n_dims) {
    if (!og_ds41_tensor_in_layer(hp, id, il)) return OG_ERR_INVALID_ARG;
    const og_ds41_tensor_kind *k = &og_ds41_tensors[id];
    for (int d = 0; d < 3; d++) ne[d] = dim_value(hp, k->ne[d], il);
    *n_dims = k->n_dims;
    return OG_OK;
}

og_status og_ds41_tensor_name(og_ds41_tensor_id id, og_ds41_dialect d, int il, char *buf, size_t buflen) {
    if ((unsigned)id >= OG_DS41_N_TENSOR || (unsigned)d >= OG_DS41_N_DIALECT || !buflen) return OG_ERR_INVALID_ARG;
    const og_ds41_tensor_kind *k = &og_ds41_tensors[id];
    int n = k->where == OG_DS41_GLOBAL ? snprintf(buf, buflen, "%s", k->name[d])
                                       : snprintf(buf, buflen, "blk.%d.%s", il, k->name[d]);
    return n < 0 || (size_t)n >= buflen ? OG_ERR_RANGE : OG_OK;
}

og_status og_ds41_tensor_find(const og_gguf *g, const og_ds41_hparams *hp, og_ds41_tensor_id id, int il,
                              const og_gguf_tensor **out, char *err, size_t errlen) {
    *out = NULL;
    char name[96];
    int64_t ne[3];
    uint32_t nd;
    if (og_ds41_tensor_shape(hp, id, il, ne, &nd) || og_ds41_tensor_name(id, hp->dialect, il, name, sizeof name))
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "deepseek41 tensor kind %d is not in layer %d", (int)id, il);
    const og_ds41_tensor_kind *k = &og_ds41_tensors[id];
    const og_gguf_tensor *t = og_gguf_find_tensor(g, name);
    if (!t)
        return k->required ? og_fail(err, errlen, OG_ERR_NOT_FOUND, "fits none of the dialects: missing tensor %s (read "
                                     "as the %s dialect)", name, dialect_names[hp->dialect])
                           : OG_OK;
    const int64_t alt[3] = {ne[0], hp->o_lora_rank, hp->o_group_count}; /* llama.cpp's 3-D attn_output_a */
    TRY(og_arch_check_shape(t, ne, id == OG_DS41_ATTN_OUTPUT_A ? alt : NULL, err, errlen));
    const bool f32 = k->wclass == OG_DS41_W_NORM || k->wclass == OG_DS41_W_VEC || k->wclass == OG_DS41_W_F32M;
    const bool fp8_rows = id == OG_DS41_ENGRAM_EMBD && hp->engram_fp8;
    if (f32 && t->type != OG_TYPE_F32)
        return og_fail(err, errlen, OG_ERR_FORMAT, "tensor %s is %s, expected F32", name, og_type_name(t->type));
    if (fp8_rows != (t->type == OG_TYPE_I8) || t->type == OG_TYPE_I32 || t->type == OG_TYPE_I16)
        return og_fail(err, errlen, OG_ERR_FORMAT, "tensor %s is %s, expected %s", name, og_type_name(t->type),
                       fp8_rows ? "I8 (FP8 E4M3 rows with E8M0 scales)" : "a float or quantized type");
    *out = t;
    return OG_OK;
}

og_status og_ds41_tensors_check(const og_gguf *g, const og_ds41_hparams *hp, char *err, size_t errlen) {
    for (int il = -1; il < (int)hp->n_layer; il++)
        for (int id = 0; id < OG_DS41_N_TENSOR; id++) {
            if (!og_ds41_tensor_in_layer(hp, (og_ds41_tensor_id)id, il)) continue;
            const og_gguf_tensor *t;
            TRY(og_ds41_tensor_find(g, hp, (og_ds41_tensor_id)id, il, &t, err, errlen));
        }
    return OG_OK;
}

og_ds41_tensor_id og_ds41_tensor_lookup(const char *name, int *il) {
    *il = og_model_tensor_layer(name);
    if (!strncmp(name, "blk.", 4) && *il < 0) return OG_DS41_N_TENSOR;
    const char *rest = *il >= 0 ? strchr(name + 4, '.') + 1 : name;
    for (int id = 0; id < OG_DS41_N_TENSOR; id++) {
        if ((og_ds41_tensors[id].where == OG_DS41_GLOBAL) != (*il < 0)) continue;
        for (int d = 0; d < OG_DS41_N_DIALECT; d++)
            if (!strcmp(rest, og_ds41_tensors[id].name[d])) return (og_ds41_tensor_id)id;
    }
    return OG_DS41_N_TENSOR;
}

og_tensor_role og_ds41_role(const char *name) {
    int il;
    og_ds41_tensor_id id = og_ds41_tensor_lookup(name, &il);
    return id == OG_DS41_N_TENSOR ? OG_ROLE_OTHER : og_ds41_tensors[id].role;
}

uint64_t og_ds41_host_only_bytes(const og_gguf *g, const og_ds41_hparams *hp) {
    (void)hp;
    uint64_t sum = 0;
    for (uint64_t i = 0; i < og_gguf_n_tensors(g); i++) {
        const og_gguf_tensor *t = og_gguf_tensor_at(g, i);
        const og_tensor_role r = og_ds41_role(t->name);
        if (r == OG_ROLE_ENGRAM || r == OG_ROLE_EMBEDDINGS) sum += t->n_bytes;
    }
    return sum;
}

void og_ds41_kv_elems(const og_ds41_hparams *hp, uint64_t *fixed, double *per_tok) {
    uint64_t f = 0;
    double pt = 0;
    for (uint32_t il = 0; il < hp->n_layer; il++) {
        const og_ds41_layer *L = &hp->layer[il];
        f += (uint64_t)hp->n_swa * hp->head_dim;
        if (L->is_kv_source) {
            if (L->ratio > 1) f += (uint64_t)L->ratio * 2 * hp->head_dim; /* the pending group: kv and gate */
            pt += (double)hp->head_dim / L->ratio;
        }
        if (L->is_key_owner) pt += (double)hp->indexer_head_dim / L->ratio;
    }
    *fixed = f;
    *per_tok = pt;
}
