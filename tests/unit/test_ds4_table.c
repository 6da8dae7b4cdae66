/* ds4_table: deepseek4's hyperparameter reader and tensor-name table against
 * untrusted files (issue 13 item 7). A valid tiny file from the writer
 * (og_ds4_write, sparse) is copied with one key or tensor changed; each copy
 * must be refused by og_ds4_hparams_read / og_ds4_tensors_check with the right
 * code and a message naming the key or tensor. Also: the writer's presets read
 * back as written, llama.cpp's variants (3-D attn_output_a, the unapplied
 * .scale/.input_scale tensors) are accepted, and roles come from the table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "og_ds4_write.h"
#include "og_moe.h"

static char g_dir[64];
static char g_base[128];

/* One change to the copy: a key set to a value (or dropped), or a tensor
 * reshaped / added / dropped / filled. */
typedef struct change {
    const char *key;          /* metadata key, or NULL */
    og_gguf_vtype type;       /* UINT32, FLOAT32, STRING, or ARRAY (of arr_type) */
    uint32_t u;
    float f;
    const char *s;
    og_gguf_vtype arr_type;   /* INT32 or FLOAT32 */
    const void *arr;
    uint64_t arr_n;
    bool drop;
    const char *tensor;       /* tensor name, or NULL */
    uint32_t n_dims;          /* 0: keep the shape */
    int64_t ne[3];
    const void *data;         /* tensor data (else a hole) */
    bool add;                 /* the tensor is new: F32 with ne */
    bool retype;              /* the tensor is stored as ttype (its data a hole) */
    og_ggml_type ttype;
} change;

static og_status set_change(og_gguf_writer *w, const change *c) {
    switch (c->type) {
    case OG_GGUF_UINT32: return og_gguf_writer_set_u32(w, c->key, c->u);
    case OG_GGUF_FLOAT32: return og_gguf_writer_set_f32(w, c->key, c->f);
    case OG_GGUF_STRING: return og_gguf_writer_set_str(w, c->key, c->s);
    default: return og_gguf_writer_set_arr(w, c->key, c->arr_type, c->arr, c->arr_n);
    }
}

/* Copies g_base to path with change c applied. */
static void copy_with(const char *path, const change *c) {
    char err[512];
    og_gguf *g;
    assert_int_equal(og_gguf_open(g_base, OG_GGUF_HEADER_ONLY, &g, err, sizeof err), OG_OK);
    og_gguf_writer *w;
    assert_int_equal(og_gguf_writer_create(32, &w), OG_OK);
    bool key_done = false;
    for (uint64_t i = 0; i < og_gguf_n_kv(g); i++) {
        const og_gguf_kv *kv = og_gguf_kv_at(g, i);
        if (!strcmp(kv->key, "general.alignment")) continue;
        if (c->key && !strcmp(kv->key, c->key)) {
            key_done = true;
            if (!c->drop) assert_int_equal(set_change(w, c), OG_OK);
            continue;
        }
        og_status st;
        if (kv->type == OG_GGUF_STRING) st = og_gguf_writer_set(w, kv->key, OG_GGUF_STRING, &kv->str);
        else if (kv->type == OG_GGUF_ARRAY && kv->arr_type == OG_GGUF_STRING)
            st = og_gguf_writer_set_arr(w, kv->key, OG_GGUF_STRING, kv->strs, kv->arr_n);
        else if (kv->type == OG_GGUF_ARRAY) st = og_gguf_writer_set_arr(w, kv->key, kv->arr_type, kv->data, kv->arr_n);
        else st = og_gguf_writer_set(w, kv->key, kv->type, kv->data);
        assert_int_equal(st, OG_OK);
    }
    if (c->key && !key_done && !c->drop) assert_int_equal(set_change(w, c), OG_OK);
    for (uint64_t i = 0; i < og_gguf_n_tensors(g); i++) {
        const og_gguf_tensor *t = og_gguf_tensor_at(g, i);
        const bool hit = c->tensor && !c->add && !strcmp(t->name, c->tensor);
        if (hit && c->drop) continue;
        const int64_t *ne = hit && c->n_dims ? c->ne : t->ne;
        assert_int_equal(og_gguf_writer_add_tensor(w, t->name, hit && c->retype ? c->ttype : t->type,
                                                   hit && c->n_dims ? c->n_dims : t->n_dims, ne,
                                                   hit ? c->data : NULL),
                         OG_OK);
    }
    if (c->tensor && c->add)
        assert_int_equal(og_gguf_writer_add_tensor(w, c->tensor, OG_TYPE_F32, c->n_dims, c->ne, c->data), OG_OK);
    assert_int_equal(og_gguf_writer_write(w, path, NULL, NULL, err, sizeof err), OG_OK);
    og_gguf_writer_free(w);
    og_gguf_close(g);
}

/* The reader and the table check on a header-only open (with data when
 * with_data) of path: the status, err in *err. */
static og_status read_back(const char *path, bool with_data, og_ds4_hparams *hp, char *err, size_t errlen) {
    og_gguf *g;
    og_status st = og_gguf_open(path, with_data ? 0 : OG_GGUF_HEADER_ONLY, &g, err, errlen);
    if (st) return st;
    og_logger quiet = {.level = OG_LOG_ERROR};
    st = og_ds4_hparams_read(g, &quiet, hp, err, errlen);
    if (!st) st = og_ds4_tensors_check(g, hp, err, errlen);
    og_gguf_close(g);
    return st;
}

static void expect(const char *what, const change *c, og_status want, const char *needle, bool with_data) {
    char path[160], err[512] = "";
    snprintf(path, sizeof path, "%s/case.gguf", g_dir);
    copy_with(path, c);
    og_ds4_hparams *hp = malloc(sizeof *hp);
    og_status st = read_back(path, with_data, hp, err, sizeof err);
    free(hp);
    if (st != want || (needle && !strstr(err, needle)))
        fail_msg("%s: gave %d '%s', expected %d naming '%s'", what, st, err, want, needle ? needle : "");
    unlink(path);
}

/* The whole loader (og_model_load: the reader, the table, the weights bound)
 * on the copy: refused with want and a message naming needle, nothing kept. */
static void expect_load(const char *what, const change *c, og_status want, const char *needle) {
    char path[160], err[512] = "";
    snprintf(path, sizeof path, "%s/case.gguf", g_dir);
    copy_with(path, c);
    og_logger quiet = {.level = OG_LOG_ERROR};
    og_model *m = (og_model *)1;
    og_status st = og_model_load(path, &quiet, &m, err, sizeof err);
    if (st != want || (needle && !strstr(err, needle)))
        fail_msg("%s: og_model_load gave %d '%s', expected %d naming '%s'", what, st, err, want, needle ? needle : "");
    if (!st) og_model_free(m);
    else assert_null(m);
    unlink(path);
}

#define KU(k, v) ((change){.key = "deepseek4." k, .type = OG_GGUF_UINT32, .u = (v)})
#define KF(k, v) ((change){.key = "deepseek4." k, .type = OG_GGUF_FLOAT32, .f = (v)})

static void test_keys_refused(void **state) {
    (void)state;
    static const struct {
        const char *what;
        change c;
        og_status want;
        const char *needle;
    } cases[] = {
        {"no layers", KU("block_count", 0), OG_ERR_FORMAT, "block_count = 0"},
        {"too many layers", KU("block_count", 100000), OG_ERR_FORMAT, "block_count = 100000"},
        {"huge n_embd", KU("embedding_length", 1u << 20), OG_ERR_FORMAT, "embedding_length"},
        {"huge head count", KU("attention.head_count", 1000), OG_ERR_FORMAT, "attention.head_count = 1000"},
        {"two kv heads", KU("attention.head_count_kv", 2), OG_ERR_FORMAT, "head_count_kv = 2"},
        {"value != key length", KU("attention.value_length", 32), OG_ERR_FORMAT, "value_length = 32"},
        {"odd rope dims", KU("rope.dimension_count", 15), OG_ERR_FORMAT, "rope.dimension_count = 15"},
        {"rope dims > head", KU("rope.dimension_count", 128), OG_ERR_FORMAT, "rope.dimension_count = 128"},
        {"groups do not divide heads", KU("attention.output_group_count", 3), OG_ERR_FORMAT, "output_group_count = 3"},
        {"no window", KU("attention.sliding_window", 0), OG_ERR_FORMAT, "sliding_window = 0"},
        {"indexer dim not 2^k", KU("attention.indexer.key_length", 48), OG_ERR_FORMAT, "indexer.key_length = 48"},
        /* a power of two under the FP4 blocks of 32: the forward's QAT op would refuse it mid-run (fuzz_model) */
        {"indexer dim 8", KU("attention.indexer.key_length", 8), OG_ERR_FORMAT, "indexer.key_length = 8"},
        {"indexer top_k 0", KU("attention.indexer.top_k", 0), OG_ERR_FORMAT, "indexer.top_k = 0"},
        {"no experts", KU("expert_count", 0), OG_ERR_FORMAT, "expert_count = 0"},
        {"more used than experts", KU("expert_used_count", 9), OG_ERR_FORMAT, "expert_used_count = 9"},
        {"huge FFN", KU("expert_feed_forward_length", 1u << 24), OG_ERR_FORMAT, "expert_feed_forward_length"},
        {"sigmoid gating", KU("expert_gating_func", 2), OG_ERR_UNSUPPORTED, "expert_gating_func = 2"},
        {"expert groups", KU("expert_group_count", 4), OG_ERR_FORMAT, "expert_group_count = 4"},
        {"hash layers > layers", KU("hash_layer_count", 7), OG_ERR_FORMAT, "hash_layer_count = 7"},
        {"no streams", KU("hyper_connection.count", 0), OG_ERR_FORMAT, "hyper_connection.count = 0"},
        {"17 streams", KU("hyper_connection.count", 17), OG_ERR_FORMAT, "hyper_connection.count = 17"},
        {"no Sinkhorn", KU("hyper_connection.sinkhorn_iterations", 0), OG_ERR_FORMAT, "sinkhorn_iterations = 0"},
        {"NaN hc eps", KF("hyper_connection.epsilon", NAN), OG_ERR_FORMAT, "hyper_connection.epsilon"},
        {"rms eps 0", KF("attention.layer_norm_rms_epsilon", 0.0f), OG_ERR_FORMAT, "layer_norm_rms_epsilon"},
        {"inf expert scale", KF("expert_weights_scale", INFINITY), OG_ERR_FORMAT, "expert_weights_scale"},
        {"YaRN factor < 1", KF("rope.scaling.factor", 0.5f), OG_ERR_FORMAT, "rope.scaling.factor"},
        {"rope base 1", KF("rope.freq_base", 1.0f), OG_ERR_FORMAT, "rope.freq_base"},
        {"short context", KU("context_length", 0), OG_ERR_FORMAT, "context_length = 0"},
        {"window rope dims differ", KU("rope.dimension_count_swa", 32), OG_ERR_FORMAT, "dimension_count_swa = 32"},
        {"window key length differs", KU("attention.key_length_swa", 128), OG_ERR_FORMAT, "key_length_swa = 128"},
        {"vocab_size vs token_embd", KU("vocab_size", 1000), OG_ERR_FORMAT, "vocab_size = 1000"},
        {"unknown rope scaling", {.key = "deepseek4.rope.scaling.type", .type = OG_GGUF_STRING, .s = "ntk"},
         OG_ERR_UNSUPPORTED, "rope.scaling.type"},
        {"deepseek2 file", {.key = "general.architecture", .type = OG_GGUF_STRING, .s = "deepseek2"},
         OG_ERR_UNSUPPORTED, "deepseek2"},
        {"missing hc count", {.key = "deepseek4.hyper_connection.count", .drop = true}, OG_ERR_NOT_FOUND,
         "hyper_connection.count"},
        {"missing compress ratios", {.key = "deepseek4.attention.compress_ratios", .drop = true}, OG_ERR_NOT_FOUND,
         "compress_ratios"},
        {"missing clamp", {.key = "deepseek4.swiglu_clamp_exp", .drop = true}, OG_ERR_NOT_FOUND, "swiglu_clamp_exp"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) expect(cases[i].what, &cases[i].c, cases[i].want, cases[i].needle, false);

    static const int32_t bad_ratio[6] = {0, 0, 4, 5, 4, 128}, short_ratio[3] = {0, 0, 4};
    change c = {.key = "deepseek4.attention.compress_ratios", .type = OG_GGUF_ARRAY, .arr_type = OG_GGUF_INT32,
                .arr = bad_ratio, .arr_n = 6};
    expect("ratio 5", &c, OG_ERR_FORMAT, "compress_ratios[3]", false);
    c.arr = short_ratio;
    c.arr_n = 3;
    expect("3 ratios for 6 layers", &c, OG_ERR_FORMAT, "compress_ratios", false);
    static const float short_clamp[3] = {10, 10, 10}, neg_clamp[6] = {10, 10, -1, 10, 10, 10};
    c = (change){.key = "deepseek4.swiglu_clamp_exp", .type = OG_GGUF_ARRAY, .arr_type = OG_GGUF_FLOAT32,
                 .arr = short_clamp, .arr_n = 3};
    expect("3 clamps for 6 layers", &c, OG_ERR_FORMAT, "swiglu_clamp_exp has 3 entries", false);
    c.arr = neg_clamp;
    c.arr_n = 6;
    expect("negative clamp", &c, OG_ERR_FORMAT, "swiglu_clamp_exp[2]", false);
}

static void test_tensors_checked(void **state) {
    (void)state;
    change c = {.tensor = "blk.3.attn_compressor_ape.weight", .n_dims = 2, .ne = {64, 4, 1}};
    expect("ratio-128 layer with a ratio-4 ape", &c, OG_ERR_FORMAT, "blk.3.attn_compressor_ape.weight", false);
    c = (change){.tensor = "blk.2.indexer.attn_q_b.weight", .drop = true};
    expect("CSA layer without its indexer", &c, OG_ERR_NOT_FOUND, "blk.2.indexer.attn_q_b.weight", false);
    c = (change){.tensor = "blk.4.exp_probs_b.bias", .drop = true};
    expect("routed layer without its bias", &c, OG_ERR_NOT_FOUND, "blk.4.exp_probs_b.bias", false);
    c = (change){.tensor = "output_hc_fn.weight", .n_dims = 2, .ne = {256, 3, 1}};
    expect("HC head for 3 streams", &c, OG_ERR_FORMAT, "output_hc_fn.weight", false);
    c = (change){.tensor = "token_embd.weight", .drop = true};
    expect("no token_embd", &c, OG_ERR_NOT_FOUND, "token_embd.weight", false);
    /* a hash table naming expert 99 of 8 (needs the data: the rest are holes) */
    static int32_t tid[2 * 129280];
    for (size_t i = 0; i < sizeof tid / sizeof tid[0]; i++) tid[i] = (int32_t)(i % 8);
    tid[2 * 500 + 1] = 99;
    c = (change){.tensor = "blk.1.ffn_gate_tid2eid.weight", .data = tid};
    expect("expert id 99", &c, OG_ERR_RANGE, "element 1001 = 99", true);
    /* llama.cpp's writer: 3-D attn_output_a [H D / G, o_rank, G] and .scale tensors */
    c = (change){.tensor = "blk.0.attn_output_a.weight", .n_dims = 3, .ne = {128, 32, 2}};
    expect("3-D attn_output_a", &c, OG_OK, NULL, false);
    c = KU("rope.dimension_count_swa", 16); /* equal to the full value: as llama.cpp's writer puts it */
    expect("rope.dimension_count_swa equal", &c, OG_OK, NULL, false);
    c = (change){.tensor = "blk.0.attn_output_a.weight", .n_dims = 3, .ne = {128, 2, 32}};
    expect("3-D attn_output_a, groups last swapped", &c, OG_ERR_FORMAT, "attn_output_a", false);
    c = (change){.tensor = "blk.2.ffn_up_exps.scale", .add = true, .n_dims = 1, .ne = {8, 1, 1}};
    expect("unapplied expert scale", &c, OG_OK, NULL, false);
    c = (change){.tensor = "blk.2.ffn_up_exps.scale", .add = true, .n_dims = 1, .ne = {7, 1, 1}};
    expect("expert scale for 7 experts", &c, OG_ERR_FORMAT, "blk.2.ffn_up_exps.scale", false);
}

/* Every preset reads back as the writer's config says (the reader and the
 * writer share the table, not the keys' code). */
static void test_presets_read_back(void **state) {
    (void)state;
    static const char *const names[] = {"tiny", "demo", "v4-flash"};
    for (int i = 0; i < 3; i++) {
        og_ds4_write_config *c = malloc(sizeof *c);
        og_ds4_hparams *hp = malloc(sizeof *hp);
        assert_int_equal(og_ds4_preset(names[i], c), OG_OK);
        char path[160], err[512] = "";
        snprintf(path, sizeof path, "%s/%s.gguf", g_dir, names[i]);
        og_logger quiet = {.level = OG_LOG_ERROR};
        if (og_ds4_write(c, NULL, path, true, &quiet, err, sizeof err)) fail_msg("%s: %s", names[i], err);
        if (read_back(path, false, hp, err, sizeof err)) fail_msg("%s: %s", names[i], err);
        const og_ds4_hparams *w = &c->hp;
        assert_int_equal(hp->n_layer, w->n_layer);
        assert_int_equal(hp->n_embd, w->n_embd);
        assert_int_equal(hp->n_vocab, w->n_vocab);
        assert_int_equal(hp->head_dim, w->head_dim);
        assert_int_equal(hp->n_swa, w->n_swa);
        assert_int_equal(hp->indexer_top_k, w->indexer_top_k);
        assert_int_equal(hp->hash_layer_count, w->hash_layer_count);
        assert_int_equal(hp->hc_sinkhorn_iters, w->hc_sinkhorn_iters);
        assert_true(hp->rope_scaling == OG_DS4_ROPE_YARN);
        assert_true(fabsf(hp->rope_comp.freq_scale - 1.0f / 16) < 1e-7f && hp->rope_comp.ext_factor == 1.0f);
        assert_true(hp->rope_swa.freq_scale == 1.0f && hp->rope_swa.ext_factor == 0.0f);
        assert_true(hp->rope_comp.base == 160000.0f && hp->rope_swa.base == 10000.0f);
        for (uint32_t l = 0; l < hp->n_layer; l++) {
            /* V4's rule (§3.1): 0 for layers 0-1, then 4 even / 128 odd */
            assert_int_equal(hp->compress_ratio[l], l < 2 ? 0 : l % 2 ? 128 : 4);
            assert_true(hp->swiglu_clamp_exp[l] == w->swiglu_clamp_exp[l]);
        }
        unlink(path);
        free(c);
        free(hp);
    }
}

static void test_roles(void **state) {
    (void)state;
    static const struct {
        const char *name;
        og_tensor_role role;
    } cases[] = {
        {"token_embd.weight", OG_ROLE_EMBEDDINGS},
        {"output.weight", OG_ROLE_OUTPUT},
        {"output_hc_fn.weight", OG_ROLE_OUTPUT},
        {"blk.7.hc_attn_fn.weight", OG_ROLE_OTHER},
        {"blk.7.attn_kv.weight", OG_ROLE_ATTENTION},
        {"blk.2.indexer.attn_q_b.weight", OG_ROLE_ATTENTION},
        {"blk.3.attn_compressor_ape.weight", OG_ROLE_ATTENTION},
        {"blk.0.ffn_gate_tid2eid.weight", OG_ROLE_ROUTER},
        {"blk.9.exp_probs_b.bias", OG_ROLE_ROUTER},
        {"blk.9.ffn_norm.weight", OG_ROLE_NORM},
        {"blk.9.ffn_down_exps.weight", OG_ROLE_ROUTED_EXPERTS},
        {"blk.9.ffn_down_exps.input_scale", OG_ROLE_ROUTED_EXPERTS},
        {"blk.9.ffn_up_shexp.weight", OG_ROLE_SHARED_EXPERTS},
        {"blk.43.nextn.eh_proj.weight", OG_ROLE_OTHER},
        {"blk.x.attn_kv.weight", OG_ROLE_OTHER},
        {"attn_kv.weight", OG_ROLE_OTHER},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (og_ds4_role(cases[i].name) != cases[i].role)
            fail_msg("%s: role %s, expected %s", cases[i].name, og_model_role_name(og_ds4_role(cases[i].name)),
                     og_model_role_name(cases[i].role));
    }
    /* every row named, its og_arch.h view the same names and roles */
    for (int id = 0; id < OG_DS4_N_TENSOR; id++) {
        assert_non_null(og_ds4_tensors[id].name);
        assert_string_equal(og_ds4_arch_tensors[id].name, og_ds4_tensors[id].name);
        assert_int_equal(og_ds4_arch_tensors[id].role, og_ds4_tensors[id].role);
        assert_int_equal(og_ds4_arch_tensors[id].per_layer, og_ds4_tensors[id].where != OG_DS4_GLOBAL);
    }
    int il;
    assert_int_equal(og_ds4_tensor_lookup("blk.12.attn_sinks.weight", &il), OG_DS4_ATTN_SINKS);
    assert_int_equal(il, 12);
}

/* The planner's KV term for deepseek4 (attack: onegpu plan counted its cache
 * as f16 while the model stores F32 rows, half the bytes). The reference is
 * written from spec/deepseek4.md §4.2 (per layer: the raw window of n_swa rows
 * of D; a compressed layer's state of (kv, score) pairs in r slots, 2r for the
 * overlapping r = 4, each 2D wide there, D otherwise, plus one compressed row
 * of D per r tokens; a CSA layer's indexer the same with the indexer's width),
 * in elements of 4 bytes whatever cache type is asked. */
static void test_plan_kv_is_f32(void **state) {
    (void)state;
    og_ds4_hparams hp;
    char err[512];
    assert_int_equal(read_back(g_base, false, &hp, err, sizeof err), OG_OK);
    og_gguf *g;
    assert_int_equal(og_gguf_open(g_base, OG_GGUF_HEADER_ONLY, &g, err, sizeof err), OG_OK);
    const uint32_t ctx = 1024, parallel = 3; /* ctx: a multiple of both ratios */
    double elems = 0;
    for (uint32_t il = 0; il < hp.n_layer; il++) {
        const double r = hp.compress_ratio[il], D = hp.head_dim, ID = hp.indexer_head_dim;
        elems += (double)hp.n_swa * D;
        if (r == 4) elems += 2 * (2 * r) * (2 * D) + ctx / r * D + 2 * (2 * r) * (2 * ID) + ctx / r * ID;
        else if (r == 128) elems += 2 * r * D + ctx / r * D;
    }
    for (uint32_t bpe = 2; bpe <= 4; bpe += 2) { /* --kv-type f16 and f32 plan the same F32 rows */
        og_plan_input in = {.vram = 8ull << 30, .ram = 8ull << 30, .reserve = 16ull << 20, .ctx = ctx,
                            .parallel = parallel, .batch_tokens = 64, .kv_bytes_per_elem = bpe, .slots_override = -1};
        og_plan p;
        assert_int_equal(og_plan_make(g, &in, &p, err, sizeof err), OG_OK);
        if ((double)p.kv_bytes != 4.0 * elems * parallel)
            fail_msg("kv-type of %u bytes: planned KV %llu bytes, the spec's F32 rows are %.0f", bpe,
                     (unsigned long long)p.kv_bytes, 4.0 * elems * parallel);
        og_plan_free(&p);
    }
    og_gguf_close(g);
}

/* The planner's workspace holds the forward call's scratch (attack: onegpu plan
 * on v4-flash gave 144 MiB of activations for 512 tokens; the forward pass
 * takes 333 MiB). The reference: og_fwd_scratch_bytes of the loaded model, what
 * the forward pass allocates, plus the planner's 256 MiB for the runtime. */
static void test_plan_workspace_holds_scratch(void **state) {
    (void)state;
    og_ds4_write_config *c = malloc(sizeof *c);
    assert_int_equal(og_ds4_preset("v4-flash", c), OG_OK);
    char path[160], err[512] = "";
    snprintf(path, sizeof path, "%s/v4f.gguf", g_dir);
    og_logger quiet = {.level = OG_LOG_ERROR};
    if (og_ds4_write(c, NULL, path, true, &quiet, err, sizeof err)) fail_msg("v4-flash: %s", err);
    free(c);
    og_model *m;
    if (og_model_load(path, &quiet, &m, err, sizeof err)) fail_msg("v4-flash: %s", err);
    og_gguf *g;
    assert_int_equal(og_gguf_open(path, OG_GGUF_HEADER_ONLY, &g, err, sizeof err), OG_OK);
    static const uint32_t batch[] = {1, 7, 512, 2048}, parallel[] = {1, 4, 8, 2};
    for (int i = 0; i < 4; i++) {
        og_plan_input in = {.vram = 96ull << 30, .ram = 280ull << 30, .reserve = 512ull << 20, .ctx = 4096,
                            .parallel = parallel[i], .batch_tokens = batch[i], .kv_bytes_per_elem = 2,
                            .slots_override = -1};
        og_plan p;
        assert_int_equal(og_plan_make(g, &in, &p, err, sizeof err), OG_OK);
        const uint64_t need = og_fwd_scratch_bytes(m, batch[i], parallel[i]) + (256ull << 20);
        if (p.workspace_bytes < need)
            fail_msg("batch %u x parallel %u: planned workspace %llu bytes, the forward pass takes %llu", batch[i],
                     parallel[i], (unsigned long long)p.workspace_bytes, (unsigned long long)need);
        og_plan_free(&p);
    }
    og_gguf_close(g);
    og_model_free(m);
    unlink(path);
}

/* Hostile files through the whole loader (attacks of issue ds4atk). */
static void test_load_refused(void **state) {
    (void)state;
    static const int32_t neg_ratio[6] = {0, 0, 4, -4, 4, 128}, big_ratio[6] = {0, 0, 4, 1 << 30, 4, 128};
    static const float frac_ratio[6] = {0, 0, 4, 4.5f, 4, 128};
    change c = {.key = "deepseek4.attention.compress_ratios", .type = OG_GGUF_ARRAY, .arr_type = OG_GGUF_INT32,
                .arr = neg_ratio, .arr_n = 6};
    expect_load("ratio -4", &c, OG_ERR_FORMAT, "compress_ratios[3]");
    c.arr = big_ratio;
    expect_load("ratio 2^30", &c, OG_ERR_FORMAT, "compress_ratios[3]");
    c.arr = frac_ratio, c.arr_type = OG_GGUF_FLOAT32;
    expect_load("ratios as floats", &c, OG_ERR_FORMAT, "compress_ratios[0] is not an integer");
    c = (change){.key = "deepseek4.block_count", .type = OG_GGUF_STRING, .s = "6"};
    expect_load("block_count a string", &c, OG_ERR_FORMAT, "block_count");
    c = (change){.key = "deepseek4.hyper_connection.sinkhorn_iterations", .type = OG_GGUF_FLOAT32, .f = 20.0f};
    expect_load("sinkhorn iterations a float", &c, OG_ERR_FORMAT, "sinkhorn_iterations");
    c = KU("hyper_connection.sinkhorn_iterations", 1u << 31);
    expect_load("2^31 Sinkhorn iterations", &c, OG_ERR_FORMAT, "sinkhorn_iterations");
    c = KU("attention.indexer.top_k", 1u << 31);
    expect_load("top_k 2^31", &c, OG_ERR_FORMAT, "indexer.top_k");
    c = KU("hash_layer_count", 6); /* layers 3..5 then need tid2eid tables the file lacks */
    expect_load("hash layers without tables", &c, OG_ERR_NOT_FOUND, "blk.3.ffn_gate_tid2eid.weight");
    /* wrong types: an I32 matrix, F32 where I32 is expected, F16 and Q8_0 norms, I32 sinks */
    c = (change){.tensor = "blk.0.attn_q_a.weight", .retype = true, .ttype = OG_TYPE_I32};
    expect_load("I32 attn_q_a", &c, OG_ERR_FORMAT, "blk.0.attn_q_a.weight is I32");
    c = (change){.tensor = "blk.1.ffn_gate_tid2eid.weight", .retype = true, .ttype = OG_TYPE_F32};
    expect_load("F32 tid2eid", &c, OG_ERR_FORMAT, "blk.1.ffn_gate_tid2eid.weight is F32, expected I32");
    c = (change){.tensor = "blk.2.attn_norm.weight", .retype = true, .ttype = OG_TYPE_F16};
    expect_load("F16 norm", &c, OG_ERR_FORMAT, "blk.2.attn_norm.weight is F16, expected F32");
    c = (change){.tensor = "blk.4.ffn_norm.weight", .retype = true, .ttype = OG_TYPE_Q8_0};
    expect_load("Q8_0 norm", &c, OG_ERR_FORMAT, "blk.4.ffn_norm.weight is Q8_0, expected F32");
    c = (change){.tensor = "blk.2.attn_sinks.weight", .retype = true, .ttype = OG_TYPE_I32};
    expect_load("I32 sinks", &c, OG_ERR_FORMAT, "blk.2.attn_sinks.weight is I32");
    /* a hash table naming expert -1 */
    static int32_t tid[2 * 129280];
    for (size_t i = 0; i < sizeof tid / sizeof tid[0]; i++) tid[i] = (int32_t)(i % 8);
    tid[7] = -1;
    c = (change){.tensor = "blk.0.ffn_gate_tid2eid.weight", .data = tid};
    expect_load("expert id -1", &c, OG_ERR_RANGE, "element 7 = -1");
    c = (change){.tensor = "output.weight", .drop = true}; /* llama.cpp requires it too (deepseek4.cpp) */
    expect_load("no output.weight", &c, OG_ERR_NOT_FOUND, "missing tensor output.weight");
    /* optional (image tokens only; the base file lacks it): loads when present */
    c = (change){.tensor = "blk.4.exp_probs_b_vl.bias", .add = true, .n_dims = 1, .ne = {8, 1, 1}};
    expect_load("with exp_probs_b_vl", &c, OG_OK, NULL);
    c.ne[0] = 9;
    expect_load("exp_probs_b_vl for 9 experts", &c, OG_ERR_FORMAT, "blk.4.exp_probs_b_vl.bias");
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/og_ds4_table.XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    snprintf(g_base, sizeof g_base, "%s/base.gguf", g_dir);
    og_ds4_write_config *c = malloc(sizeof *c);
    og_ds4_preset("tiny", c);
    char err[512];
    og_logger quiet = {.level = OG_LOG_ERROR};
    if (og_ds4_write(c, NULL, g_base, true, &quiet, err, sizeof err)) {
        fprintf(stderr, "cannot write the base file: %s\n", err);
        return 1;
    }
    free(c);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keys_refused),
        cmocka_unit_test(test_tensors_checked),
        cmocka_unit_test(test_presets_read_back),
        cmocka_unit_test(test_roles),
        cmocka_unit_test(test_plan_kv_is_f32),
        cmocka_unit_test(test_load_refused),
        cmocka_unit_test(test_plan_workspace_holds_scratch),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    unlink(g_base);
    rmdir(g_dir);
    return rc;
}
