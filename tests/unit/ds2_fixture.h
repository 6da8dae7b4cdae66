/* Tiny deepseek2 GGUF files for the loader's bound checks: the keys as
 * make-model writes them (shared/spec/deepseek2.md §1) from a shape, F32
 * tensors shaped from that same shape (§2), so a file whose shape is out of
 * bounds is otherwise consistent, as one made to crash a loader would be; then
 * key overrides on top. Tensor data is a small deterministic pattern; a
 * token_embd or output of more than FX_DS2_DENSE_MAX_VOCAB rows is left a hole
 * (a sparse file: no disk). */
#ifndef OG_DS2_FIXTURE_H
#define OG_DS2_FIXTURE_H

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "og_gguf.h"

#define FX_DS2_DENSE_MAX_VOCAB 4096

typedef struct fx_ds2 {
    uint32_t n_layer, n_dense, n_embd, n_head, q_rank, kv_rank, d_nope, d_rope, d_v, n_ff;
    uint32_t n_expert, n_used, n_shared, n_ff_exp, n_group, n_group_used, n_vocab, n_ctx;
    bool stray_exps; /* adds blk.0.ffn_up_exps.weight [D, 1, 1] (a routed tensor in a dense layer) */
} fx_ds2;

/* One key written over the shape's: kind 'u' (u32), 'f' (f32) or 's' (string). */
typedef struct fx_key {
    const char *key; /* without the "deepseek2." prefix */
    char kind;
    uint32_t u;
    float f;
    const char *s;
} fx_key;
#define FX_KU(key, v) ((fx_key){key, 'u', v, 0.0f, NULL})
#define FX_KF(key, v) ((fx_key){key, 'f', 0, v, NULL})

/* 2 layers (1 dense), D 16, 2 heads, r_q 8, r_kv 8, d_nope 4, d_rope 4, d_v 4,
 * 4 experts (2 per token, 2 groups keep 1), one shared, vocab 32, YaRN. */
static inline fx_ds2 fx_ds2_base(void) {
    return (fx_ds2){.n_layer = 2, .n_dense = 1, .n_embd = 16, .n_head = 2, .q_rank = 8, .kv_rank = 8, .d_nope = 4,
                    .d_rope = 4, .d_v = 4, .n_ff = 16, .n_expert = 4, .n_used = 2, .n_shared = 1, .n_ff_exp = 8,
                    .n_group = 2, .n_group_used = 1, .n_vocab = 32, .n_ctx = 256};
}

typedef struct fx_ds2_build {
    og_gguf_writer *w;
    float **bufs;
    size_t n_bufs;
    bool ok;
} fx_ds2_build;

static inline void fx_ds2_tensor(fx_ds2_build *b, const char *name, int64_t ne0, int64_t ne1, int64_t ne2) {
    const int64_t ne[3] = {ne0, ne1, ne2};
    const uint32_t nd = ne2 > 1 ? 3 : ne1 > 1 ? 2 : 1;
    const size_t n = (size_t)(ne0 * ne1 * ne2);
    float *d = NULL;
    const bool vocab_rows = !strcmp(name, "token_embd.weight") || !strcmp(name, "output.weight");
    if (!vocab_rows || ne1 <= FX_DS2_DENSE_MAX_VOCAB) {
        d = malloc(n * sizeof *d);
        float **nb = realloc(b->bufs, (b->n_bufs + 1) * sizeof *nb);
        if (!d || !nb) {
            free(d);
            if (nb) b->bufs = nb;
            b->ok = false;
            return;
        }
        b->bufs = nb;
        b->bufs[b->n_bufs++] = d;
        const bool norm = strstr(name, "norm") != NULL;
        for (size_t i = 0; i < n; i++) d[i] = norm ? 1.0f : 0.25f * sinf((float)(i * 7 + b->n_bufs));
    }
    if (og_gguf_writer_add_tensor(b->w, name, OG_TYPE_F32, nd, ne, d)) b->ok = false;
}

/* Writes the model of shape c with keys[n_keys] written over its own keys to
 * path. Returns false when the file cannot be made. */
static inline bool fx_ds2_write(const char *path, const fx_ds2 *c, const fx_key *keys, int n_keys) {
    fx_ds2_build b = {.ok = true};
    if (og_gguf_writer_create(32, &b.w)) return false;
    og_gguf_writer *w = b.w;
    char k[160], n[96];
    const struct {
        const char *key;
        uint32_t v;
    } u32s[] = {{"block_count", c->n_layer}, {"context_length", c->n_ctx}, {"embedding_length", c->n_embd},
                {"feed_forward_length", c->n_ff}, {"attention.head_count", c->n_head}, {"attention.head_count_kv", 1},
                {"expert_used_count", c->n_used}, {"expert_group_count", c->n_group},
                {"expert_group_used_count", c->n_group_used}, {"vocab_size", c->n_vocab},
                {"attention.q_lora_rank", c->q_rank}, {"attention.kv_lora_rank", c->kv_rank},
                {"attention.key_length", c->kv_rank + c->d_rope}, {"attention.value_length", c->kv_rank},
                {"attention.key_length_mla", c->d_nope + c->d_rope}, {"attention.value_length_mla", c->d_v},
                {"leading_dense_block_count", c->n_dense}, {"expert_feed_forward_length", c->n_ff_exp},
                {"expert_count", c->n_expert}, {"expert_shared_count", c->n_shared}, {"expert_gating_func", 2},
                {"rope.dimension_count", c->d_rope}, {"rope.scaling.original_context_length", 4096}};
    const struct {
        const char *key;
        float v;
    } f32s[] = {{"rope.freq_base", 10000.0f}, {"attention.layer_norm_rms_epsilon", 1e-6f},
                {"expert_weights_scale", 2.5f}, {"rope.scaling.factor", 40.0f},
                {"rope.scaling.yarn_log_multiplier", 0.1f}};
    b.ok = !og_gguf_writer_set_str(w, "general.architecture", "deepseek2") &&
           !og_gguf_writer_set_bool(w, "deepseek2.expert_weights_norm", true) &&
           !og_gguf_writer_set_str(w, "deepseek2.rope.scaling.type", "yarn");
    for (size_t i = 0; i < sizeof u32s / sizeof u32s[0]; i++) {
        snprintf(k, sizeof k, "deepseek2.%s", u32s[i].key);
        b.ok = b.ok && !og_gguf_writer_set_u32(w, k, u32s[i].v);
    }
    for (size_t i = 0; i < sizeof f32s / sizeof f32s[0]; i++) {
        snprintf(k, sizeof k, "deepseek2.%s", f32s[i].key);
        b.ok = b.ok && !og_gguf_writer_set_f32(w, k, f32s[i].v);
    }
    for (int i = 0; i < n_keys; i++) {
        snprintf(k, sizeof k, "deepseek2.%s", keys[i].key);
        if (keys[i].kind == 'u') b.ok = b.ok && !og_gguf_writer_set_u32(w, k, keys[i].u);
        else if (keys[i].kind == 'f') b.ok = b.ok && !og_gguf_writer_set_f32(w, k, keys[i].f);
        else b.ok = b.ok && !og_gguf_writer_set_str(w, k, keys[i].s);
    }
    const int64_t D = c->n_embd, H = c->n_head, dqk = c->d_nope + c->d_rope;
    fx_ds2_tensor(&b, "token_embd.weight", D, c->n_vocab, 1);
    fx_ds2_tensor(&b, "output_norm.weight", D, 1, 1);
    fx_ds2_tensor(&b, "output.weight", D, c->n_vocab, 1);
#define NM(s) (snprintf(n, sizeof n, "blk.%u." s, i), n)
    for (uint32_t i = 0; i < c->n_layer; i++) {
        fx_ds2_tensor(&b, NM("attn_norm.weight"), D, 1, 1);
        if (c->q_rank) {
            fx_ds2_tensor(&b, NM("attn_q_a.weight"), D, c->q_rank, 1);
            fx_ds2_tensor(&b, NM("attn_q_a_norm.weight"), c->q_rank, 1, 1);
            fx_ds2_tensor(&b, NM("attn_q_b.weight"), c->q_rank, H * dqk, 1);
        } else {
            fx_ds2_tensor(&b, NM("attn_q.weight"), D, H * dqk, 1);
        }
        fx_ds2_tensor(&b, NM("attn_kv_a_mqa.weight"), D, c->kv_rank + c->d_rope, 1);
        fx_ds2_tensor(&b, NM("attn_kv_a_norm.weight"), c->kv_rank, 1, 1);
        fx_ds2_tensor(&b, NM("attn_k_b.weight"), c->d_nope, c->kv_rank, H);
        fx_ds2_tensor(&b, NM("attn_v_b.weight"), c->kv_rank, c->d_v, H);
        fx_ds2_tensor(&b, NM("attn_output.weight"), H * c->d_v, D, 1);
        fx_ds2_tensor(&b, NM("ffn_norm.weight"), D, 1, 1);
        if (i < c->n_dense) {
            fx_ds2_tensor(&b, NM("ffn_gate.weight"), D, c->n_ff, 1);
            fx_ds2_tensor(&b, NM("ffn_up.weight"), D, c->n_ff, 1);
            fx_ds2_tensor(&b, NM("ffn_down.weight"), c->n_ff, D, 1);
            if (i == 0 && c->stray_exps) fx_ds2_tensor(&b, NM("ffn_up_exps.weight"), D, 1, 1);
            continue;
        }
        fx_ds2_tensor(&b, NM("ffn_gate_inp.weight"), D, c->n_expert, 1);
        fx_ds2_tensor(&b, NM("ffn_gate_exps.weight"), D, c->n_ff_exp, c->n_expert);
        fx_ds2_tensor(&b, NM("ffn_up_exps.weight"), D, c->n_ff_exp, c->n_expert);
        fx_ds2_tensor(&b, NM("ffn_down_exps.weight"), c->n_ff_exp, D, c->n_expert);
        if (c->n_shared) {
            fx_ds2_tensor(&b, NM("ffn_gate_shexp.weight"), D, (int64_t)c->n_shared * c->n_ff_exp, 1);
            fx_ds2_tensor(&b, NM("ffn_up_shexp.weight"), D, (int64_t)c->n_shared * c->n_ff_exp, 1);
            fx_ds2_tensor(&b, NM("ffn_down_shexp.weight"), (int64_t)c->n_shared * c->n_ff_exp, D, 1);
        }
    }
#undef NM
    char err[512];
    if (b.ok && og_gguf_writer_write(w, path, NULL, NULL, err, sizeof err)) {
        fprintf(stderr, "fx_ds2_write: %s\n", err);
        b.ok = false;
    }
    og_gguf_writer_free(w);
    for (size_t i = 0; i < b.n_bufs; i++) free(b.bufs[i]);
    free(b.bufs);
    return b.ok;
}

#endif
