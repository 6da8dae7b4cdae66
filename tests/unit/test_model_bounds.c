/* model_bounds: the deepseek2 loader against untrusted files (issue 13 item 7).
 * Each file is otherwise consistent (tensors shaped from the same numbers as
 * the keys, ds2_fixture.h) and breaks one bound; og_model_load and the
 * planner's og_model_describe must refuse it with the right code and a message
 * naming the key. The values at the bounds themselves load and run. */
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

#include "ds2_fixture.h"
#include "deepseek2.h" /* the OG_DS2_MAX_* bounds */
#include "og_model.h"
#include "og_moe.h"
#include "og_quant.h"

static char g_dir[64];

static void path_of(const char *name, char *out, size_t n) { snprintf(out, n, "%s/%s.gguf", g_dir, name); }

/* Writes the file and expects og_model_load (and, when hp_too, og_model_describe
 * on a header-only open) to fail with want and a message containing needle. */
static void expect_refused(const char *name, const fx_ds2 *c, const fx_key *keys, int n_keys, og_status want,
                           const char *needle, bool hp_too) {
    char path[160], err[512] = "";
    path_of(name, path, sizeof path);
    assert_true(fx_ds2_write(path, c, keys, n_keys));
    og_model *m = (og_model *)1;
    og_logger quiet = {.level = OG_LOG_ERROR};
    og_status st = og_model_load(path, &quiet, &m, err, sizeof err);
    if (st != want || !strstr(err, needle))
        fail_msg("%s: og_model_load gave %d '%s', expected %d naming '%s'", name, st, err, want, needle);
    assert_null(m);
    if (hp_too) {
        og_gguf *g;
        assert_int_equal(og_gguf_open(path, OG_GGUF_HEADER_ONLY, &g, err, sizeof err), OG_OK);
        og_model_info info;
        err[0] = '\0';
        st = og_model_describe(g, &quiet, &info, err, sizeof err);
        og_gguf_close(g);
        if (st != want || !strstr(err, needle))
            fail_msg("%s: og_model_describe gave %d '%s', expected %d naming '%s'", name, st, err, want, needle);
    }
    unlink(path);
}

static void expect_key(const char *name, fx_key key, og_status want, const char *needle) {
    fx_ds2 c = fx_ds2_base();
    expect_refused(name, &c, &key, 1, want, needle, true);
}

/* Loads and runs 3 tokens; the logits must be finite. */
static void expect_runs(const char *name, const fx_ds2 *c) {
    char path[160], err[512] = "";
    path_of(name, path, sizeof path);
    assert_true(fx_ds2_write(path, c, NULL, 0));
    og_model *m;
    og_logger quiet = {.level = OG_LOG_ERROR};
    if (og_model_load(path, &quiet, &m, err, sizeof err)) fail_msg("%s: %s", name, err);
    og_kernels k;
    og_kernels_init(OG_ISA_SCALAR, &k);
    og_dispatch *d;
    assert_int_equal(og_dispatch_create(NULL, NULL, &d, err, sizeof err), OG_OK);
    og_run_ctx rc = {.kern = &k, .dispatch = og_dispatch_table(d)}; /* host only */
    og_kv kv = {0};
    float *lg = malloc(3 * (size_t)og_model_get_info(m)->n_vocab * sizeof *lg);
    int32_t tok[3] = {1, 2, 3};
    assert_int_equal(og_model_forward(m, &rc, &kv, tok, 3, lg, true, err, sizeof err), OG_OK);
    for (size_t i = 0; i < 3 * (size_t)og_model_get_info(m)->n_vocab; i++) assert_true(isfinite(lg[i]));
    assert_int_equal(kv.n_pos, 3);
    free(lg);
    og_dispatch_free(d);
    og_kv_free(&kv);
    og_model_free(m);
    unlink(path);
}

static void test_base_and_limits_run(void **state) {
    (void)state;
    fx_ds2 c = fx_ds2_base();
    expect_runs("base", &c);
    c.d_rope = OG_DS2_MAX_ROPE; /* the whole stack buffer of og_rope_apply */
    expect_runs("rope-max", &c);
    c = fx_ds2_base();
    c.n_expert = 128, c.n_group = 2, c.n_group_used = 1, c.n_used = OG_DS2_MAX_EXPERT_USED, c.n_ff_exp = 2;
    expect_runs("used-max", &c);
}

/* Shapes that used to reach the forward pass: a d_rope above the 512-float
 * stack buffer overflowed it; an odd one left an element unrotated; more
 * experts per token than the kept groups hold routed to dropped groups. */
static void test_consistent_but_out_of_bounds(void **state) {
    (void)state;
    fx_ds2 c = fx_ds2_base();
    c.d_rope = 2 * OG_DS2_MAX_ROPE;
    expect_refused("rope-big", &c, NULL, 0, OG_ERR_FORMAT, "deepseek2.rope.dimension_count = 1024", true);
    c.d_rope = 5;
    expect_refused("rope-odd", &c, NULL, 0, OG_ERR_FORMAT, "deepseek2.rope.dimension_count = 5 is odd", true);
    c = fx_ds2_base();
    c.n_used = 3; /* 2 groups of 2, keep 1: 2 experts */
    expect_refused("used-groups", &c, NULL, 0, OG_ERR_FORMAT, "deepseek2.expert_used_count = 3", true);
    c = fx_ds2_base();
    c.n_expert = 128, c.n_group = 1, c.n_group_used = 1, c.n_used = OG_DS2_MAX_EXPERT_USED + 1, c.n_ff_exp = 2;
    expect_refused("used-big", &c, NULL, 0, OG_ERR_FORMAT, "deepseek2.expert_used_count = 65", true);
    c = fx_ds2_base();
    c.n_head = OG_DS2_MAX_HEAD + 1, c.n_dense = 2; /* a dense model: once checked only with MoE layers */
    expect_refused("heads", &c, NULL, 0, OG_ERR_FORMAT, "deepseek2.attention.head_count = 257", true);
    c = fx_ds2_base();
    c.n_vocab = OG_DS2_MAX_VOCAB + 1; /* token_embd and output: holes of 256 MiB */
    expect_refused("vocab", &c, NULL, 0, OG_ERR_FORMAT, "token_embd.weight has 4194305 rows", true);
}

static void test_integer_keys(void **state) {
    (void)state;
    const struct {
        const char *name;
        fx_key key;
        og_status want;
        const char *needle;
    } cases[] = {
        {"layers", FX_KU("block_count", 5000), OG_ERR_FORMAT, "deepseek2.block_count = 5000 is outside 1..1024"},
        {"layers0", FX_KU("block_count", 0), OG_ERR_FORMAT, "deepseek2.block_count = 0"},
        {"embd", FX_KU("embedding_length", 100000), OG_ERR_FORMAT, "deepseek2.embedding_length = 100000"},
        {"ctx0", FX_KU("context_length", 0), OG_ERR_FORMAT, "deepseek2.context_length = 0"},
        {"ctx", FX_KU("context_length", (1u << 24) + 1), OG_ERR_FORMAT, "deepseek2.context_length = 16777217"},
        {"heads0", FX_KU("attention.head_count", 0), OG_ERR_FORMAT, "deepseek2.attention.head_count = 0"},
        {"qrank", FX_KU("attention.q_lora_rank", 20000), OG_ERR_FORMAT, "deepseek2.attention.q_lora_rank = 20000"},
        {"kvrank", FX_KU("attention.kv_lora_rank", 9000), OG_ERR_FORMAT, "deepseek2.attention.kv_lora_rank = 9000"},
        {"kvrank0", FX_KU("attention.kv_lora_rank", 0), OG_ERR_FORMAT, "deepseek2.attention.kv_lora_rank = 0"},
        {"rope0", FX_KU("rope.dimension_count", 0), OG_ERR_FORMAT, "deepseek2.rope.dimension_count = 0"},
        {"dqk", FX_KU("attention.key_length_mla", 4), OG_ERR_FORMAT, "deepseek2.attention.key_length_mla = 4 is outside 5.."},
        {"dqk-big", FX_KU("attention.key_length_mla", 5000), OG_ERR_FORMAT, "deepseek2.attention.key_length_mla = 5000"},
        {"dv", FX_KU("attention.value_length_mla", 4097), OG_ERR_FORMAT, "deepseek2.attention.value_length_mla = 4097"},
        {"dense", FX_KU("leading_dense_block_count", 3), OG_ERR_FORMAT, "deepseek2.leading_dense_block_count = 3"},
        {"ff", FX_KU("feed_forward_length", 0), OG_ERR_FORMAT, "deepseek2.feed_forward_length = 0"},
        {"experts", FX_KU("expert_count", 5000), OG_ERR_FORMAT, "deepseek2.expert_count = 5000"},
        {"experts0", FX_KU("expert_count", 0), OG_ERR_FORMAT, "deepseek2.expert_count = 0"},
        {"used0", FX_KU("expert_used_count", 0), OG_ERR_FORMAT, "deepseek2.expert_used_count = 0"},
        {"used-e", FX_KU("expert_used_count", 5), OG_ERR_FORMAT, "deepseek2.expert_used_count = 5 is outside 1..4"},
        {"shared", FX_KU("expert_shared_count", 65), OG_ERR_FORMAT, "deepseek2.expert_shared_count = 65"},
        {"ffexp", FX_KU("expert_feed_forward_length", (1u << 20) + 1), OG_ERR_FORMAT,
         "deepseek2.expert_feed_forward_length = 1048577"},
        {"groups", FX_KU("expert_group_count", 2048), OG_ERR_FORMAT, "deepseek2.expert_group_count = 2048"},
        {"groups3", FX_KU("expert_group_count", 3), OG_ERR_FORMAT, "deepseek2.expert_group_count = 3 must divide"},
        {"groups4", FX_KU("expert_group_count", 4), OG_ERR_FORMAT, "groups of >= 2 experts"},
        {"gused", FX_KU("expert_group_used_count", 2), OG_ERR_FORMAT, "deepseek2.expert_group_used_count = 2 is outside 1..1"},
        {"gused0", FX_KU("expert_group_used_count", 0), OG_ERR_FORMAT, "deepseek2.expert_group_used_count = 0"},
        {"gating", FX_KU("expert_gating_func", 3), OG_ERR_UNSUPPORTED, "deepseek2.expert_gating_func = 3"},
        {"orig0", FX_KU("rope.scaling.original_context_length", 0), OG_ERR_FORMAT,
         "deepseek2.rope.scaling.original_context_length = 0"},
        {"notint", FX_KF("block_count", 2.0f), OG_ERR_FORMAT, "deepseek2.block_count is not a non-negative integer"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_key(cases[i].name, cases[i].key, cases[i].want, cases[i].needle);
}

static void test_float_keys(void **state) {
    (void)state;
    const struct {
        const char *name;
        const char *key;
        float v;
    } cases[] = {
        {"eps-nan", "attention.layer_norm_rms_epsilon", NAN},
        {"eps-neg", "attention.layer_norm_rms_epsilon", -1e-6f},
        {"eps-0", "attention.layer_norm_rms_epsilon", 0.0f},
        {"eps-inf", "attention.layer_norm_rms_epsilon", INFINITY},
        {"base-0", "rope.freq_base", 0.0f},
        {"base-neg", "rope.freq_base", -10000.0f},
        {"base-1", "rope.freq_base", 1.0f},
        {"base-inf", "rope.freq_base", INFINITY},
        {"factor-nan", "rope.scaling.factor", NAN},
        {"factor-neg", "rope.scaling.factor", -40.0f},
        {"logmul-neg", "rope.scaling.yarn_log_multiplier", -0.1f},
        {"logmul-nan", "rope.scaling.yarn_log_multiplier", NAN},
        {"beta-fast-0", "rope.scaling.yarn_beta_fast", 0.0f},
        {"beta-slow-inf", "rope.scaling.yarn_beta_slow", INFINITY},
        {"scale-inf", "expert_weights_scale", INFINITY},
        {"scale-neg", "expert_weights_scale", -2.5f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char needle[128];
        snprintf(needle, sizeof needle, "key deepseek2.%s = ", cases[i].key);
        expect_key(cases[i].name, FX_KF(cases[i].key, cases[i].v), OG_ERR_FORMAT, needle);
    }
}

/* Shapes are cross-checked against the keys: a tensor that disagrees is named. */
static void test_shapes(void **state) {
    (void)state;
    fx_ds2 c = fx_ds2_base();
    fx_key k = FX_KU("attention.kv_lora_rank", 12); /* the tensors say 8 */
    expect_refused("kvrank-shape", &c, &k, 1, OG_ERR_FORMAT, "tensor blk.0.attn_kv_a_mqa.weight has shape [16, 12]", false);
    k = FX_KU("expert_feed_forward_length", 16);
    expect_refused("ffexp-shape", &c, &k, 1, OG_ERR_FORMAT, "tensor blk.1.ffn_gate_exps.weight", false);
}

/* A dense model with a routed tensor: the planner divided by its expert_count 0. */
static void test_plan_dense_with_stray_experts(void **state) {
    (void)state;
    fx_ds2 c = fx_ds2_base();
    c.n_dense = c.n_layer, c.n_expert = 0, c.n_used = 0, c.n_group = 1, c.stray_exps = true;
    char path[160], err[512];
    path_of("stray", path, sizeof path);
    assert_true(fx_ds2_write(path, &c, NULL, 0));
    og_gguf *g;
    assert_int_equal(og_gguf_open(path, OG_GGUF_HEADER_ONLY, &g, err, sizeof err), OG_OK);
    og_plan_input in = {.vram = 1ull << 30, .ram = 1ull << 30, .ctx = 64, .parallel = 1, .batch_tokens = 16,
                        .kv_bytes_per_elem = 2, .slots_override = -1};
    og_plan p;
    assert_int_equal(og_plan_make(g, &in, &p, err, sizeof err), OG_OK);
    assert_true(p.fits);
    assert_int_equal(p.n_expert, 0);
    assert_int_equal(p.resident_experts, 0);
    assert_int_equal(p.routed_bytes, 16 * 4); /* the stray [16] F32 tensor */
    og_plan_free(&p);
    og_gguf_close(g);
    unlink(path);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/og_bounds_XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_base_and_limits_run), cmocka_unit_test(test_consistent_but_out_of_bounds),
        cmocka_unit_test(test_integer_keys),        cmocka_unit_test(test_float_keys),
        cmocka_unit_test(test_shapes),              cmocka_unit_test(test_plan_dense_with_stray_experts),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    rmdir(g_dir);
    return rc;
}
