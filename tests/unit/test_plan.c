/* The planner against numbers worked out by hand for DeepSeek-V3's shapes
 * (make-model --preset v3-671b --sparse: real sizes, no disk), and the
 * `onegpu plan` command's refusals and exit codes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "kernels_fixture.h"

#include "og_moe.h"
#include "og_placement.h"

#include <jansson.h>

static const char *g_onegpu;
static char g_tmp[256], g_v3[300], g_ref[300], g_small[300], g_v41[300], g_ds4[300], g_ds41[300];

#define GIB (1024ull * 1024 * 1024)
/* Q2_K: 256 weights in 84 bytes. One expert of V3 = gate + up (7168 x 2048) +
 * down (2048 x 7168) = 3 x 14,680,064 weights = 3 x 57,344 blocks x 84 B. */
#define V3_EXPERT_BYTES (3ull * 14680064 / 256 * 84)
#define V3_MOE_LAYERS 58
#define V3_EXPERTS 256
/* KV cache per token: 61 layers x (kv_lora_rank 512 + rope 64) x 2 B (f16) */
#define V3_KV_PER_TOKEN (61ull * 576 * 2)

static int cli(const char *args) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' plan %s >/dev/null 2>&1", g_onegpu, args);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static og_plan_input base_input(void) {
    og_plan_input in = {.vram = 96 * GIB, .ram = 280 * GIB, .reserve = 512ull << 20, .ctx = 4096, .parallel = 1,
                        .batch_tokens = 512, .kv_bytes_per_elem = 2, .slots_override = -1};
    return in;
}

static void plan_file(const char *path, const og_plan_input *in, og_plan *p) {
    og_gguf *g;
    char err[512];
    if (og_gguf_open(path, OG_GGUF_HEADER_ONLY, &g, err, sizeof err)) fail_msg("%s", err);
    og_status st = og_plan_make(g, in, p, err, sizeof err);
    og_gguf_close(g);
    if (st) fail_msg("%s", err);
}

static void plan(const og_plan_input *in, og_plan *p) { plan_file(g_v3, in, p); }

static void check_consistent(const og_plan *p, const og_plan_input *in) {
    uint64_t n = 0;
    for (uint32_t l = 0; l < p->n_layer; l++) {
        if (l < 3) assert_int_equal(p->slots[l], 0); /* V3's three dense layers */
        assert_true(p->slots[l] <= V3_EXPERTS);
        n += p->slots[l];
    }
    assert_int_equal(n, p->resident_experts);
    assert_int_equal(p->resident_expert_bytes, p->resident_experts * V3_EXPERT_BYTES);
    assert_int_equal(p->device_bytes, p->nonexpert_bytes + p->kv_bytes + p->workspace_bytes + p->resident_expert_bytes);
    if (p->fits) assert_true(p->device_bytes + in->reserve <= in->vram);
    assert_int_equal(p->host_bytes, p->routed_bytes + p->staging_bytes);
    assert_int_equal(p->host_only_bytes, 0); /* deepseek2 keeps nothing host-only */
}

static void test_hand_numbers(void **state) {
    (void)state;
    og_plan_input in = base_input();
    og_plan p;
    plan(&in, &p);
    assert_true(p.fits);
    assert_int_equal(p.n_layer, 61);
    assert_int_equal(p.n_moe_layers, V3_MOE_LAYERS);
    assert_int_equal(p.expert_bytes_max, 14450688);
    assert_int_equal(V3_EXPERT_BYTES, 14450688);
    assert_int_equal(p.routed_bytes, (uint64_t)V3_MOE_LAYERS * V3_EXPERTS * V3_EXPERT_BYTES); /* 214,563,815,424 */
    assert_int_equal(p.routed_bytes, 214563815424ull);
    assert_int_equal(p.kv_bytes, V3_KV_PER_TOKEN * 4096);
    assert_int_equal(p.role_bytes[OG_ROLE_ROUTED_EXPERTS], p.routed_bytes);
    uint64_t sum = 0;
    for (int r = 0; r < OG_ROLE_COUNT; r++) sum += p.role_bytes[r];
    assert_int_equal(sum, p.routed_bytes + p.nonexpert_bytes);
    check_consistent(&p, &in);
    /* the device is full: one more expert would not fit */
    assert_true(p.device_bytes + in.reserve + V3_EXPERT_BYTES > in.vram);
    /* uniform traffic: slots spread evenly, the share is slots / experts */
    uint32_t lo = UINT32_MAX, hi = 0;
    for (uint32_t l = 3; l < p.n_layer; l++) {
        lo = p.slots[l] < lo ? p.slots[l] : lo;
        hi = p.slots[l] > hi ? p.slots[l] : hi;
    }
    assert_true(hi - lo <= 1);
    assert_true(lo >= 100); /* about 85 GiB of 14.45 MB experts over 58 layers */
    double share = (double)p.resident_experts / (V3_MOE_LAYERS * V3_EXPERTS);
    assert_true(p.predicted_device_share > share - 1e-9 && p.predicted_device_share < share + 1e-9);
    og_plan_free(&p);

    /* KV scales with ctx x parallel x element size; slots shrink to make room */
    og_plan q;
    in.ctx = 8192, in.parallel = 8, in.kv_bytes_per_elem = 4;
    plan(&in, &q);
    assert_true(q.fits);
    assert_int_equal(q.kv_bytes, V3_KV_PER_TOKEN * 2 * 8192 * 8);
    assert_true(q.resident_experts < 6308);
    check_consistent(&q, &in);
    og_plan_free(&q);
}

/* The reference model's shape (DESIGN.md): hidden 5120, 40 MoE layers x 384
 * experts of FFN 2304, 6 used. One Q2_K expert = 3 x 2304 x 5120 / 256 x 84 B. */
static void test_reference_shape(void **state) {
    (void)state;
    og_plan_input in = base_input();
    og_plan p;
    plan_file(g_ref, &in, &p);
    assert_true(p.fits);
    assert_int_equal(p.n_moe_layers, 40);
    assert_int_equal(p.n_expert, 384);
    assert_int_equal(p.n_expert_used, 6);
    assert_int_equal(p.expert_bytes_max, 3ull * 2304 * 5120 / 256 * 84); /* 11,612,160 */
    assert_int_equal(p.routed_bytes, 40ull * 384 * 11612160);           /* 178,362,777,600 */
    assert_int_equal(p.kv_bytes, 41ull * 576 * 2 * 4096);               /* 47,232 B/token */
    assert_int_equal(p.resident_expert_bytes, p.resident_experts * 11612160);
    assert_true(p.device_bytes + in.reserve <= in.vram);
    assert_true(p.device_bytes + in.reserve + 11612160 > in.vram);
    assert_int_equal(p.slots[0], 0);
    for (uint32_t l = 1; l < 41; l++) assert_true(p.slots[l] >= p.resident_experts / 40 && p.slots[l] <= p.resident_experts / 40 + 1);
    og_plan_free(&p);
    in.ram = 120 * GIB;
    plan_file(g_ref, &in, &p);
    assert_false(p.fits);
    assert_non_null(strstr(p.reason, "host short by"));
    og_plan_free(&p);
}

static void test_refusals(void **state) {
    (void)state;
    og_plan_input in = base_input();
    og_plan p;
    in.ram = 120 * GIB;
    plan(&in, &p);
    assert_false(p.fits);
    assert_non_null(strstr(p.reason, "host short by"));
    og_plan_free(&p);

    in = base_input();
    in.vram = 8 * GIB;
    plan(&in, &p);
    assert_false(p.fits);
    assert_non_null(strstr(p.reason, "device short by"));
    assert_non_null(strstr(p.reason, "bigger GPU")); /* 9.6 GiB of weights alone */
    assert_null(strstr(p.reason, "largest item"));   /* a 4K context's KV is not what is too big */
    og_plan_free(&p);

    /* both sides short: both named in one reason, the device first */
    in.ram = 120 * GIB;
    plan(&in, &p);
    assert_false(p.fits);
    const char *d = strstr(p.reason, "device short by"), *h = strstr(p.reason, "; and host short by");
    assert_non_null(d);
    assert_non_null(h);
    assert_true(d < h);
    og_plan_free(&p);

    /* the KV cache as the large item on a card too small even without it: the
     * advice names --ctx and --parallel, not only the weights' remedies */
    in = base_input();
    in.vram = 8 * GIB, in.ctx = 163840, in.parallel = 64;
    plan(&in, &p);
    assert_false(p.fits);
    assert_non_null(strstr(p.reason, "bigger GPU"));
    assert_non_null(strstr(p.reason, "the KV cache is the largest item: a smaller --ctx (163840 now) or fewer --parallel"));
    og_plan_free(&p);

    /* a KV cache too big for the card: the reason names a --ctx that fits */
    in = base_input();
    in.ctx = 163840, in.parallel = 64;
    plan(&in, &p);
    assert_false(p.fits);
    assert_non_null(strstr(p.reason, "fits with --ctx"));
    const char *c = strstr(p.reason, "--ctx ") + 6;
    og_plan_free(&p);
    in.ctx = (uint32_t)strtoul(c, NULL, 10);
    assert_true(in.ctx > 0 && in.ctx < 163840);
    plan(&in, &p);
    assert_true(p.fits);
    og_plan_free(&p);
}

static void test_overrides(void **state) {
    (void)state;
    og_plan_input in = base_input();
    og_plan p;
    in.slots_override = 0;
    plan(&in, &p);
    assert_true(p.fits);
    assert_int_equal(p.resident_experts, 0);
    assert_true(p.predicted_device_share == 0.0);
    check_consistent(&p, &in);
    og_plan_free(&p);

    in.slots_override = -2; /* all: 200 GiB of experts do not fit a 96 GiB card */
    plan(&in, &p);
    assert_false(p.fits);
    assert_non_null(strstr(p.reason, "--expert-slots 256"));
    og_plan_free(&p);

    in.vram = 256 * GIB;
    plan(&in, &p);
    assert_true(p.fits);
    assert_int_equal(p.resident_experts, V3_MOE_LAYERS * V3_EXPERTS);
    assert_true(p.predicted_device_share == 1.0);
    check_consistent(&p, &in);
    og_plan_free(&p);
}

/* Layer 3 sends all its traffic to experts 0..9, the rest is uniform: the
 * planner gives layer 3 exactly those ten slots and the rest to the others. */
static void test_profile(void **state) {
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/profile.json", g_tmp);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "{\"layers\": [");
    for (uint32_t l = 3; l < 61; l++) {
        fprintf(f, "%s{\"layer\": %u, \"counts\": [", l > 3 ? "," : "", l);
        for (uint32_t e = 0; e < V3_EXPERTS; e++) fprintf(f, "%s%u", e ? "," : "", l == 3 ? (e < 10 ? 1000 : 0) : 7);
        fprintf(f, "]}");
    }
    fprintf(f, "]}\n");
    fclose(f);
    uint64_t *counts;
    char err[512];
    assert_int_equal(og_profile_read(path, 61, V3_EXPERTS, &counts, err, sizeof err), OG_OK);
    assert_int_equal(counts[3 * V3_EXPERTS + 9], 1000);
    assert_int_equal(counts[3 * V3_EXPERTS + 10], 0);
    assert_int_equal(counts[60 * V3_EXPERTS + 255], 7);
    og_plan_input in = base_input();
    in.profile = counts;
    og_plan p;
    plan(&in, &p);
    assert_true(p.fits);
    check_consistent(&p, &in);
    assert_int_equal(p.slots[3], 10);
    uint32_t lo = UINT32_MAX, hi = 0;
    double expect = 1.0;
    for (uint32_t l = 4; l < 61; l++) {
        lo = p.slots[l] < lo ? p.slots[l] : lo;
        hi = p.slots[l] > hi ? p.slots[l] : hi;
        expect += (double)p.slots[l] / V3_EXPERTS;
    }
    assert_true(hi - lo <= 1);
    expect /= V3_MOE_LAYERS;
    assert_true(p.predicted_device_share > expect - 1e-9 && p.predicted_device_share < expect + 1e-9);
    /* same bytes as the uniform plan, more of the traffic */
    assert_true(p.device_bytes + in.reserve + V3_EXPERT_BYTES > in.vram);
    assert_true(p.predicted_device_share > (double)p.resident_experts / (V3_MOE_LAYERS * V3_EXPERTS) + 0.005);
    og_plan_free(&p);
    free(counts);

    /* the profile is checked against the model */
    assert_int_equal(og_profile_read(path, 61, 128, &counts, err, sizeof err), OG_ERR_FORMAT);
    assert_non_null(strstr(err, "array of 128 integers"));
    f = fopen(path, "w");
    fprintf(f, "{\"n_layer\": 27, \"n_expert\": 64, \"layers\": []}");
    fclose(f);
    assert_int_equal(og_profile_read(path, 61, V3_EXPERTS, &counts, err, sizeof err), OG_ERR_FORMAT);
    assert_non_null(strstr(err, "made for 27 layers x 64 experts"));
    f = fopen(path, "w");
    fprintf(f, "{\"layers\": [{\"layer\": 70, \"counts\": []}]}");
    fclose(f);
    assert_int_equal(og_profile_read(path, 61, V3_EXPERTS, &counts, err, sizeof err), OG_ERR_FORMAT);
    assert_non_null(strstr(err, "layer 70, but the model has layers 0..60"));
    f = fopen(path, "w");
    fprintf(f, "{\"layers\": [{\"layer\": 4, \"counts\": [");
    for (uint32_t e = 0; e < V3_EXPERTS; e++) fprintf(f, "%s1", e ? "," : "");
    fprintf(f, "]}, {\"layer\": 4, \"counts\": []}]}");
    fclose(f);
    assert_int_equal(og_profile_read(path, 61, V3_EXPERTS, &counts, err, sizeof err), OG_ERR_FORMAT);
    assert_non_null(strstr(err, "layer 4 appears twice"));
    f = fopen(path, "w");
    fprintf(f, "{\"layers\": [{\"layer\": 3, \"counts\": [");
    for (uint32_t e = 0; e < V3_EXPERTS; e++) fprintf(f, "%s%s", e ? "," : "", e == 5 ? "-1" : "1");
    fprintf(f, "]}]}");
    fclose(f);
    assert_int_equal(og_profile_read(path, 61, V3_EXPERTS, &counts, err, sizeof err), OG_ERR_FORMAT);
    assert_non_null(strstr(err, "expert 5"));
}

/* The expert cache on the cpu device, on a small F32 model (4 layers, the first dense; 16 experts of
 * FFN 256 over width 256): one expert = 3 x 256 x 256 x 4 B = 786,432 B. */
#define SMALL_EXPERT_BYTES (3ull * 256 * 256 * 4)

/* Part (0 gate, 1 up, 2 down) of resident expert e of layer l, copied back from
 * the device (the host never reads device memory itself). */
static void read_back(og_expert_cache *d, const og_model *m, uint32_t l, uint32_t e, int part, void *out, size_t bytes) {
    og_expert_slots sl;
    char err[256];
    const int32_t j = og_expert_cache_slot(d, l, e);
    assert_true(j >= 0);
    assert_int_equal(og_expert_cache_slots(d, m, l, &sl), OG_OK);
    const uint64_t off[3] = {sl.gate_off, sl.up_off, sl.down_off};
    og_stream *s;
    og_event ev;
    assert_int_equal(d->dev->ops->stream_create(d->dev, &s, err, sizeof err), OG_OK);
    assert_int_equal(d->dev->ops->copy_to_host(d->dev, s, out, (const uint8_t *)sl.base + (uint64_t)j * sl.slot_bytes + off[part],
                                               bytes, err, sizeof err),
                     OG_OK);
    assert_int_equal(d->dev->ops->event_record(d->dev, s, &ev, err, sizeof err), OG_OK);
    assert_int_equal(d->dev->ops->event_wait(d->dev, ev, err, sizeof err), OG_OK);
    d->dev->ops->stream_destroy(d->dev, s);
}

static void test_cpu_device(void **state) {
    (void)state;
    og_model *m;
    char err[512];
    if (og_model_load(g_small, NULL, &m, err, sizeof err)) fail_msg("%s", err);
    const uint32_t NL = og_model_get_info(m)->n_layer, E = og_model_get_info(m)->n_expert;
    assert_int_equal(NL, 4);
    assert_int_equal(E, 16);
    uint32_t slots[4] = {4, 4, 4, 4}; /* the dense layer gets none whatever it asks */
    og_kernels k = fx_best_kernels();
    og_device *dev;
    assert_int_equal(og_device_cpu_create(3 * 4 * SMALL_EXPERT_BYTES + 100, 2, &k, &dev, err, sizeof err), OG_OK);
    og_device *roomy; /* for the forward passes below: slots plus the dispatcher's rows */
    assert_int_equal(og_device_cpu_create(3 * 4 * SMALL_EXPERT_BYTES + (1 << 20), 2, &k, &roomy, err, sizeof err), OG_OK);
    og_expert_cache *d;
    assert_int_equal(og_expert_cache_create(m, slots, dev, &d, err, sizeof err), OG_OK);
    uint64_t dfree, dtotal;
    assert_int_equal(dev->ops->mem_info(dev, &dfree, &dtotal), OG_OK);
    assert_int_equal(dfree, 100); /* the slots took the budget */
    og_expert_cache *d2;
    assert_int_equal(og_expert_cache_create(m, slots, dev, &d2, err, sizeof err), OG_ERR_NOMEM);
    assert_non_null(strstr(err, "in use"));
    assert_int_equal(d->capacity, 3 * 4 * SMALL_EXPERT_BYTES);
    uint8_t res[4 * 16] = {0};
    for (uint32_t l = 1; l < NL; l++)
        for (uint32_t e = 0; e < 4; e++) res[l * E + e] = 1;
    res[0 * E + 3] = 1; /* dense layer: ignored */
    assert_int_equal(og_expert_cache_load(d, m, res, err, sizeof err), OG_OK);
    assert_int_equal(d->n_resident, 12);
    assert_int_equal(d->dev->pcie_bytes, 12 * SMALL_EXPERT_BYTES);
    const size_t gate_bytes = 256ull * 256 * 4;
    /* a resident expert's device copy holds the file's bytes */
    uint8_t *back = malloc(gate_bytes);
    read_back(d, m, 2, 2, 0, back, gate_bytes);
    assert_memory_equal(back, (const uint8_t *)og_model_get_info(m)->moe[2].gate_exps.data + 2 * gate_bytes, gate_bytes);
    read_back(d, m, 2, 3, 2, back, gate_bytes);
    assert_memory_equal(back, (const uint8_t *)og_model_get_info(m)->moe[2].down_exps.data + 3 * gate_bytes, gate_bytes);
    assert_int_equal(og_expert_cache_slot(d, 2, 4), -1);
    assert_int_equal(og_expert_cache_slot(d, 0, 3), -1); /* dense layer */
    assert_int_equal(og_expert_cache_slot(d, 9, 0), -1); /* no such layer */
    /* swap 9 in for 0 in layer 1: 0 is gone at once, 9 usable after the poll */
    assert_int_equal(og_expert_cache_swap(d, m, 1, 9, 0, err, sizeof err), OG_OK);
    assert_int_equal(d->dev->pcie_bytes, 13 * SMALL_EXPERT_BYTES);
    assert_ptr_equal(d->dev, dev); /* the counter is the device's own */
    assert_int_equal(d->migrations, 1);
    assert_int_equal(og_expert_cache_slot(d, 1, 0), -1);
    assert_false(d->resident[1 * E + 0]);
    assert_false(d->resident[1 * E + 9]);
    assert_int_equal(og_expert_cache_slot(d, 1, 9), -1);
    assert_int_equal(d->n_resident, 11);
    assert_int_equal(d->dev->ops->event_wait(d->dev, d->pending[1 * d->max_slots + 0], err, sizeof err), OG_OK);
    assert_int_equal(og_expert_cache_poll(d), 0);
    assert_int_equal(og_expert_cache_slot(d, 1, 9), 0); /* 0's slot */
    assert_true(d->resident[1 * E + 9]);
    assert_int_equal(d->n_resident, 12);
    read_back(d, m, 1, 9, 1, back, gate_bytes);
    assert_memory_equal(back, (const uint8_t *)og_model_get_info(m)->moe[1].up_exps.data + 9 * gate_bytes, gate_bytes);
    free(back);
    assert_int_equal(og_expert_cache_swap(d, m, 1, 9, 1, err, sizeof err), OG_ERR_INVALID_ARG); /* 9 is in */
    assert_int_equal(og_expert_cache_swap(d, m, 1, 10, 0, err, sizeof err), OG_ERR_INVALID_ARG); /* 0 is out */
    res[1 * E + 5] = 1; /* five in a layer of four slots */
    assert_int_equal(og_expert_cache_load(d, m, res, err, sizeof err), OG_ERR_RANGE);
    assert_int_equal(d->n_resident, 12); /* unchanged */

    og_expert_cache_free(d);
    assert_int_equal(dev->ops->mem_info(dev, &dfree, &dtotal), OG_OK);
    assert_int_equal(dfree, dtotal); /* freed */
    og_device_destroy(dev);

    /* forward: resident experts computed by the device (on a device with room
     * for the dispatcher's rows too), with the migrator moving them between
     * steps, gives bitwise the logits of the host-only run */
    res[1 * E + 5] = 0;
    assert_int_equal(og_expert_cache_create(m, slots, roomy, &d, err, sizeof err), OG_OK);
    assert_int_equal(og_expert_cache_load(d, m, res, err, sizeof err), OG_OK);
    og_migrator *mg;
    assert_int_equal(og_migrator_create(NL, E, 2, 1, 0.85, &mg, err, sizeof err), OG_OK);
    uint64_t counts[4 * 16] = {0};
    og_expert_stats es = {.counts = counts, .resident = d->resident};
    og_dispatch *host_only, *split;
    assert_int_equal(og_dispatch_create(NULL, NULL, &host_only, err, sizeof err), OG_OK);
    assert_int_equal(og_dispatch_create(roomy, d, &split, err, sizeof err), OG_OK);
    og_run_ctx plain = {.kern = &k, .dispatch = og_dispatch_table(host_only)},
               placed = {.kern = &k, .stats = &es, .dispatch = og_dispatch_table(split)};
    og_kv ka = {0}, kb = {0};
    const uint32_t V = og_model_get_info(m)->n_vocab;
    float *la = malloc(V * sizeof *la), *lb = malloc(V * sizeof *lb);
    for (int32_t t = 0; t < 24; t++) {
        int32_t tok = (t * 37 + 11) % (int32_t)V;
        assert_int_equal(og_model_forward(m, &plain, &ka, &tok, 1, la, false, err, sizeof err), OG_OK);
        assert_int_equal(og_model_forward(m, &placed, &kb, &tok, 1, lb, false, err, sizeof err), OG_OK);
        assert_memory_equal(la, lb, V * sizeof *la);
        assert_int_equal(og_migrator_step(mg, d, m, counts, err, sizeof err), OG_OK);
    }
    assert_true(d->migrations > 0);
    assert_int_equal(es.routes, 24ull * 3 * og_model_get_info(m)->n_expert_used);
    assert_true(es.routes_resident > 0);
    /* PCIe: the expert copies, and one hidden row (n_embd f32) up per resident route */
    assert_int_equal(roomy->pcie_bytes, (12 + d->migrations) * SMALL_EXPERT_BYTES + es.routes_resident * 256 * 4);
    og_kv_free(&ka);
    og_kv_free(&kb);
    free(la);
    free(lb);
    og_migrator_free(mg);
    og_dispatch_free(host_only);
    og_dispatch_free(split);
    og_expert_cache_free(d);
    og_device_destroy(roomy);
    og_model_free(m);
}

/* The forward pass on a device whose memory is not the mapped file's (as on a
 * GPU): the placement copies every non-expert tensor into the device (the
 * plan's nonexpert_bytes), binds the table (og_run_ctx.weights), and the
 * forward pass, reading only the copies and combining the MoE layers on the
 * device, gives the host-only run's logits bit for bit. Devices: the host
 * device (any device but cpu uploads) and the cpu device's copy mode; the cpu
 * device without it binds no table (the file used in place). */
static void test_placement_forward(void **state) {
    (void)state;
    og_model *m;
    char err[512];
    if (og_model_load(g_small, NULL, &m, err, sizeof err)) fail_msg("%s", err);
    og_plan_input in = {.vram = 1 * GIB, .ram = 8 * GIB, .reserve = 0, .ctx = 64, .parallel = 1, .batch_tokens = 16,
                        .kv_bytes_per_elem = 4, .slots_override = 0};
    og_plan pl;
    plan_file(g_small, &in, &pl);
    assert_true(pl.fits);
    og_kernels k = fx_best_kernels();
    og_pool *pool;
    assert_int_equal(og_pool_create(2, NULL, &pool, err, sizeof err), OG_OK);
    og_dispatch *host_only;
    assert_int_equal(og_dispatch_create(NULL, NULL, &host_only, err, sizeof err), OG_OK);
    const uint32_t V = og_model_get_info(m)->n_vocab;
    float *want = malloc(V * sizeof *want), *got = malloc(V * sizeof *got);
    int32_t toks[5] = {11, 48, 85, 122, 7};
    og_run_ctx plain = {.kern = &k, .pool = pool, .dispatch = og_dispatch_table(host_only),
                        .device_numerics = OG_NUMERICS_CANONICAL, .host_numerics = OG_NUMERICS_CANONICAL};
    og_kv kw = {0};
    assert_int_equal(og_model_forward(m, &plain, &kw, toks, 5, want, false, err, sizeof err), OG_OK);
    for (int mode = 0; mode < 3; mode++) { /* host device, cpu device copying, cpu device in place */
        og_placement_config pc = og_placement_defaults();
        pc.kern = &k;
        pc.vram = in.vram;
        pc.plan = &pl;
        pc.migrate = 0;
        pc.forward_on_device = true;
        pc.copy_weights = mode == 1;
        if (mode == 0) assert_int_equal(og_device_host_create(pool, &k, &pc.device, err, sizeof err), OG_OK);
        og_placement *p;
        if (og_placement_create(m, &pc, &p, err, sizeof err)) fail_msg("mode %d: %s", mode, err);
        og_run_ctx rc = plain;
        og_placement_bind(p, &rc);
        og_placement_stats ps;
        og_placement_get_stats(p, &ps);
        assert_true(ps.forward_on_device);
        assert_non_null(rc.dev);
        if (mode < 2) {
            assert_non_null(rc.weights);
            assert_int_equal(ps.weight_bytes, pl.nonexpert_bytes); /* every tensor the planner counted */
            for (size_t i = 0; i < rc.weights->n; i++) /* copies, not the file */
                assert_ptr_not_equal(rc.weights->t[i].dev, rc.weights->t[i].host);
        } else {
            assert_null(rc.weights);
            assert_int_equal(ps.weight_bytes, 0);
        }
        og_kv kv = {0};
        if (og_model_forward(m, &rc, &kv, toks, 5, got, false, err, sizeof err)) fail_msg("mode %d: %s", mode, err);
        assert_memory_equal(want, got, V * sizeof *got);
        int32_t next = 99;
        assert_int_equal(og_model_forward(m, &rc, &kv, &next, 1, got, false, err, sizeof err), OG_OK); /* decode */
        assert_int_equal(kv.n_pos, 6);
        og_kv_free(&kv);
        og_placement_free(p);
    }
    /* a table without a weight's copy is an error naming it, never a host address handed over */
    og_device *hd;
    assert_int_equal(og_device_host_create(pool, &k, &hd, err, sizeof err), OG_OK);
    og_stream *hs;
    assert_int_equal(hd->ops->stream_create(hd, &hs, err, sizeof err), OG_OK);
    const og_dev_weights empty = {NULL, 0};
    og_run_ctx rc = plain;
    rc.dev = hd;
    rc.stream = hs;
    rc.weights = &empty;
    og_kv kv = {0};
    assert_int_equal(og_model_forward(m, &rc, &kv, toks, 1, got, false, err, sizeof err), OG_ERR_STATE);
    assert_non_null(strstr(err, "token_embd has no copy in device memory"));
    og_kv_free(&kv);
    og_kv_free(&kw);
    hd->ops->stream_destroy(hd, hs);
    og_device_destroy(hd);
    og_plan_free(&pl);
    og_dispatch_free(host_only);
    og_pool_free(pool);
    free(want);
    free(got);
    og_model_free(m);
}

/* og_placement on the small model (4 slots of 16 per MoE layer, migration on):
 * the counters read through the accessors equal a plain count kept here from
 * the selections a host-only run makes (same routes: the F32 results are
 * bitwise the same), migration moves the set, the bytes are (initial +
 * migrations) experts, and at rest (og_placement_idle) the resident count is
 * the plan's again although the last step left copies in flight. */
static void test_placement(void **state) {
    (void)state;
    og_model *m;
    char err[512];
    if (og_model_load(g_small, NULL, &m, err, sizeof err)) fail_msg("%s", err);
    const uint32_t NL = og_model_get_info(m)->n_layer, E = og_model_get_info(m)->n_expert, K = og_model_get_info(m)->n_expert_used;
    og_plan_input in = {.vram = 1 * GIB, .ram = 8 * GIB, .reserve = 0, .ctx = 64, .parallel = 1, .batch_tokens = 16,
                        .kv_bytes_per_elem = 4, .slots_override = 4};
    og_plan pl;
    plan_file(g_small, &in, &pl);
    assert_true(pl.fits);
    assert_int_equal(pl.resident_experts, 3 * 4);

    og_kernels k = fx_best_kernels();
    og_placement_config pc = og_placement_defaults();
    pc.kern = &k;
    og_placement *bad;
    pc.vram = in.vram; /* no plan */
    assert_int_equal(og_placement_create(m, &pc, &bad, err, sizeof err), OG_ERR_INVALID_ARG);
    assert_null(bad);
    og_plan other = pl;
    other.n_expert = E + 1; /* another model's plan */
    pc.plan = &other;
    assert_int_equal(og_placement_create(m, &pc, &bad, err, sizeof err), OG_ERR_INVALID_ARG);
    assert_non_null(strstr(err, "the model has"));
    pc.plan = &pl;
    pc.decay = 1.5;
    assert_int_equal(og_placement_create(m, &pc, &bad, err, sizeof err), OG_ERR_INVALID_ARG);
    pc.decay = og_placement_defaults().decay;
    pc.min_residency = 1; /* moves within the test's few steps */
    og_placement *p;
    assert_int_equal(og_placement_create(m, &pc, &p, err, sizeof err), OG_OK);
    og_placement_stats ps;
    og_placement_get_stats(p, &ps);
    assert_true(ps.device && ps.counting);
    assert_int_equal(ps.resident_experts, 12);
    assert_int_equal(ps.planned_experts, 12);
    assert_int_equal(ps.pcie_bytes, 12 * SMALL_EXPERT_BYTES);
    assert_int_equal(ps.selections, 0);
    assert_non_null(og_placement_cache(p));
    assert_ptr_equal(og_placement_cache(p)->dev, og_placement_device(p));
    assert_int_equal(og_placement_cache(p)->slot_of[1 * E + 0], 0); /* no profile: experts 0..3, in order */
    assert_int_equal(og_placement_cache(p)->slot_of[1 * E + 4], -1);

    og_dispatch *host_only;
    assert_int_equal(og_dispatch_create(NULL, NULL, &host_only, err, sizeof err), OG_OK);
    og_run_ctx placed = {.kern = &k}, plain = {.kern = &k, .dispatch = og_dispatch_table(host_only)};
    og_placement_bind(p, &placed);
    assert_non_null(placed.stats);
    assert_non_null(placed.dispatch);
    assert_ptr_not_equal(placed.dispatch, plain.dispatch);
    uint64_t counts[4 * 16] = {0}, before[4 * 16], hits = 0, layer_hits[4] = {0};
    og_expert_stats es = {.counts = counts};
    plain.stats = &es;
    og_kv ka = {0}, kb = {0};
    const uint32_t V = og_model_get_info(m)->n_vocab;
    float *la = malloc(V * sizeof *la), *lb = malloc(V * sizeof *lb);
    uint8_t res[4 * 16];
    bool saw_in_flight = false;
    const int T = 20;
    for (int32_t t = 0; t < T; t++) {
        int32_t tok = (t * 37 + 11) % (int32_t)V;
        memcpy(res, og_placement_cache(p)->resident, sizeof res); /* usable during this step */
        memcpy(before, counts, sizeof before);
        assert_int_equal(og_model_forward(m, &placed, &ka, &tok, 1, la, false, err, sizeof err), OG_OK);
        assert_int_equal(og_model_forward(m, &plain, &kb, &tok, 1, lb, false, err, sizeof err), OG_OK);
        assert_memory_equal(la, lb, V * sizeof *la);
        for (uint32_t i = 0; i < NL * E; i++) {
            hits += (counts[i] - before[i]) * res[i];
            layer_hits[i / E] += (counts[i] - before[i]) * res[i];
        }
        assert_int_equal(og_placement_step(p, err, sizeof err), OG_OK);
        og_placement_get_stats(p, &ps);
        if (ps.in_flight) { /* copies started: not yet counted resident */
            saw_in_flight = true;
            assert_int_equal(ps.resident_experts + ps.in_flight, ps.planned_experts);
        }
        /* the slot a dispatcher gets: usable experts only, each layer's slots taken once */
        const og_expert_cache *c = og_placement_cache(p);
        for (uint32_t l = 0; l < NL; l++) {
            uint32_t used = 0, n_usable = 0;
            for (uint32_t e = 0; e < E; e++) {
                int32_t j = og_placement_slot(p, l, e);
                assert_int_equal(j, c->resident[l * E + e] ? c->slot_of[l * E + e] : -1);
                if (j < 0) continue;
                assert_true(j < 4 && !(used & (1u << j)));
                used |= 1u << j;
                n_usable++;
            }
            assert_true(l == 0 ? n_usable == 0 : n_usable <= 4);
        }
        assert_int_equal(og_placement_slot(p, NL, 0), -1);
        assert_int_equal(og_placement_slot(p, 1, E), -1);
    }
    assert_true(saw_in_flight);
    og_placement_get_stats(p, &ps);
    assert_int_equal(ps.selections, (uint64_t)T * 3 * K);
    assert_int_equal(ps.hits, hits);
    assert_true(hits > 0 && hits < ps.selections);
    assert_true(ps.hit_rate == (double)hits / (double)(T * 3 * K));
    assert_true(ps.migrations > 0);
    /* the expert copies, and one hidden row (n_embd f32) up per resident route */
    assert_int_equal(ps.pcie_bytes, (12 + ps.migrations) * SMALL_EXPERT_BYTES + hits * og_model_get_info(m)->n_embd * 4);
    assert_memory_equal(og_placement_counts(p), counts, sizeof counts);
    uint64_t lr[4], lh[4];
    assert_int_equal(og_placement_layer_hits(p, lr, lh, 4), OG_OK);
    assert_int_equal(lr[0], 0); /* the dense layer */
    for (uint32_t l = 1; l < NL; l++) {
        assert_int_equal(lr[l], (uint64_t)T * K);
        assert_int_equal(lh[l], layer_hits[l]);
    }
    /* at rest: what completed is published without another step */
    assert_true(ps.in_flight > 0); /* the last step left copies in flight */
    assert_true(ps.resident_experts < pl.resident_experts);
    assert_int_equal(og_placement_idle(p), 0);
    og_placement_get_stats(p, &ps);
    assert_int_equal(ps.in_flight, 0);
    assert_int_equal(ps.resident_experts, pl.resident_experts);

    /* the profile: these counts plus the added ones, read back */
    char path[400];
    snprintf(path, sizeof path, "%s/placement-profile.json", g_tmp);
    uint64_t add[4 * 16] = {0}, *back;
    add[2 * E + 5] = 7;
    assert_int_equal(og_placement_save_profile(p, add, path, err, sizeof err), OG_OK);
    assert_int_equal(og_profile_read(path, NL, E, &back, err, sizeof err), OG_OK);
    for (uint32_t i = 0; i < NL * E; i++) assert_int_equal(back[i], counts[i] + add[i]);
    free(back);
    og_placement_free(p);

    /* --migrate 0: the planned set stays; no device: counts only, nothing bound */
    pc.migrate = 0;
    assert_int_equal(og_placement_create(m, &pc, &p, err, sizeof err), OG_OK);
    og_placement_bind(p, &placed);
    for (int32_t t = 0; t < 4; t++) {
        int32_t tok = t + 1;
        assert_int_equal(og_model_forward(m, &placed, &ka, &tok, 1, la, false, err, sizeof err), OG_OK);
        assert_int_equal(og_placement_step(p, err, sizeof err), OG_OK);
    }
    og_placement_get_stats(p, &ps);
    assert_int_equal(ps.migrations, 0);
    assert_int_equal(ps.resident_experts, 12);
    assert_int_equal(ps.selections, 4ull * 3 * K);
    og_placement_free(p);
    pc = og_placement_defaults();
    pc.kern = &k;
    pc.count = true;
    assert_int_equal(og_placement_create(m, &pc, &p, err, sizeof err), OG_OK);
    og_placement_bind(p, &placed);
    assert_non_null(placed.stats);
    assert_non_null(placed.dispatch); /* host only */
    assert_null(og_placement_cache(p));
    assert_int_equal(og_placement_layer_hits(p, lr, lh, 4), OG_ERR_STATE);
    assert_int_equal(og_placement_idle(p), 0);
    assert_int_equal(og_placement_step(p, err, sizeof err), OG_OK);
    og_placement_get_stats(p, &ps);
    assert_true(ps.counting && !ps.device);
    og_placement_free(p);
    og_placement_get_stats(NULL, &ps);
    assert_false(ps.counting);

    og_dispatch_free(host_only);
    og_kv_free(&ka);
    og_kv_free(&kb);
    free(la);
    free(lb);
    og_plan_free(&pl);
    og_model_free(m);
}

/* A device whose copies complete only when the test says (events up to `released`,
 * or all of them while `instant`), over the cpu device: the expert cache's
 * in-flight states, which the cpu device's instant copies never show. */
typedef struct slow_device {
    og_device base;
    og_device *inner;
    og_event last, released;
    og_event inner_last; /* the inner device's latest event: what a wait really waits for */
    bool instant;
} slow_device;
#define INNER(d) (((slow_device *)(d))->inner)
static og_status slow_mem(og_device *d, uint64_t *f, uint64_t *t) { return INNER(d)->ops->mem_info(INNER(d), f, t); }
static og_status slow_alloc(og_device *d, uint64_t bytes, void **out, char *err, size_t errlen) {
    return INNER(d)->ops->alloc(INNER(d), bytes, out, err, errlen);
}
static void slow_free(og_device *d, void *p) { INNER(d)->ops->free(INNER(d), p); }
static og_status slow_stream_create(og_device *d, og_stream **out, char *err, size_t errlen) {
    return INNER(d)->ops->stream_create(INNER(d), out, err, errlen);
}
static void slow_stream_destroy(og_device *d, og_stream *s) { INNER(d)->ops->stream_destroy(INNER(d), s); }
static og_status slow_copy(og_device *d, og_stream *s, void *dst, const void *src, uint64_t bytes, char *err,
                           size_t errlen) {
    og_status st = INNER(d)->ops->copy_to_device(INNER(d), s, dst, src, bytes, err, errlen);
    d->pcie_bytes += bytes;
    return st;
}
static og_status slow_copy_back(og_device *d, og_stream *s, void *dst, const void *src, uint64_t bytes, char *err,
                                size_t errlen) {
    return INNER(d)->ops->copy_to_host(INNER(d), s, dst, src, bytes, err, errlen);
}
static og_status slow_experts(og_device *d, og_stream *s, const og_expert_op *op, char *err, size_t errlen) {
    return INNER(d)->ops->experts(INNER(d), s, op, err, errlen);
}
static og_status slow_record(og_device *d, og_stream *s, og_event *ev, char *err, size_t errlen) {
    slow_device *sd = (slow_device *)d;
    og_status st = sd->inner->ops->event_record(sd->inner, s, &sd->inner_last, err, errlen);
    *ev = ++sd->last;
    return st;
}
static og_status slow_stream_wait(og_device *d, og_stream *s, og_event ev, char *err, size_t errlen) {
    (void)d, (void)s, (void)ev, (void)err, (void)errlen;
    return OG_OK; /* no reader in these tests */
}
static bool slow_done(og_device *d, og_event ev) {
    const slow_device *s = (const slow_device *)d;
    return s->instant || ev <= s->released;
}
static og_status slow_wait(og_device *d, og_event ev, char *err, size_t errlen) {
    slow_device *sd = (slow_device *)d;
    assert_true(slow_done(d, ev)); /* the tests wait only where the copy may complete */
    return sd->inner->ops->event_wait(sd->inner, sd->inner_last, err, errlen);
}
static void slow_destroy(og_device *d) { (void)d; }
static const og_device_ops slow_ops = {.name = "slow", .mem_info = slow_mem, .alloc = slow_alloc, .free = slow_free,
                                       .stream_create = slow_stream_create, .stream_destroy = slow_stream_destroy,
                                       .copy_to_device = slow_copy, .copy_to_host = slow_copy_back,
                                       .experts = slow_experts, .event_record = slow_record,
                                       .stream_wait = slow_stream_wait, .event_wait = slow_wait,
                                       .event_done = slow_done, .destroy = slow_destroy}; /* no forward-pass ops */

static void test_copies_in_flight(void **state) {
    (void)state;
    og_model *m;
    char err[512];
    if (og_model_load(g_small, NULL, &m, err, sizeof err)) fail_msg("%s", err);
    const uint32_t E = og_model_get_info(m)->n_expert;
    uint32_t slots[4] = {4, 4, 4, 4};
    og_device *cpu;
    assert_int_equal(og_device_cpu_create(3 * 4 * SMALL_EXPERT_BYTES, 1, NULL, &cpu, err, sizeof err), OG_OK);
    slow_device sd = {.base = {.ops = &slow_ops}, .inner = cpu, .instant = true};
    og_expert_cache *d;
    assert_int_equal(og_expert_cache_create(m, slots, &sd.base, &d, err, sizeof err), OG_OK);
    uint8_t res[4 * 16] = {0};
    for (uint32_t l = 1; l < 4; l++)
        for (uint32_t e = 0; e < 4; e++) res[l * E + e] = 1;
    assert_int_equal(og_expert_cache_load(d, m, res, err, sizeof err), OG_OK); /* start-up: waits for its copies */
    assert_int_equal(d->n_resident, 12);
    sd.instant = false;
    sd.released = sd.last;
    /* a swap in flight: the arriving expert is neither resident nor in the map, and
     * can neither be swapped out nor in again */
    assert_int_equal(og_expert_cache_swap(d, m, 1, 9, 0, err, sizeof err), OG_OK);
    const og_event ev9 = sd.last;
    assert_int_equal(og_expert_cache_poll(d), 1);
    assert_false(d->resident[1 * E + 9]);
    assert_int_equal(og_expert_cache_slot(d, 1, 9), -1);
    assert_int_equal(og_expert_cache_slot(d, 1, 0), -1); /* the leaving one at once */
    assert_int_equal(d->n_resident, 11);
    assert_int_equal(og_expert_cache_swap(d, m, 1, 10, 9, err, sizeof err), OG_ERR_INVALID_ARG);
    assert_int_equal(og_expert_cache_swap(d, m, 1, 9, 1, err, sizeof err), OG_ERR_INVALID_ARG);
    /* the migrator pins an expert whose copy is still arriving */
    og_migrator *mg;
    assert_int_equal(og_migrator_create(4, E, 2, 1, 0.85, &mg, err, sizeof err), OG_OK);
    uint64_t counts[4 * 16] = {0};
    assert_int_equal(og_migrator_step(mg, d, m, counts, err, sizeof err), OG_OK);
    assert_true(mg->pinned[1 * E + 9] > 0);
    /* a second swap; only 9's copy completes: 9 published, 10 still in flight */
    assert_int_equal(og_expert_cache_swap(d, m, 1, 10, 1, err, sizeof err), OG_OK);
    sd.released = ev9;
    assert_int_equal(og_expert_cache_poll(d), 1);
    assert_true(d->resident[1 * E + 9]);
    assert_int_equal(og_expert_cache_slot(d, 1, 9), 0);
    assert_false(d->resident[1 * E + 10]);
    /* a new load evicts the slot still receiving 10: 10 is never published */
    sd.instant = true;
    assert_int_equal(og_expert_cache_load(d, m, res, err, sizeof err), OG_OK);
    assert_int_equal(og_expert_cache_poll(d), 0);
    assert_false(d->resident[1 * E + 10]);
    assert_int_equal(og_expert_cache_slot(d, 1, 10), -1);
    assert_int_equal(d->n_resident, 12);
    og_migrator_free(mg);
    og_expert_cache_free(d);
    og_device_destroy(cpu);
    og_model_free(m);
}

static void test_cli(void **state) {
    (void)state;
    char a[1024], bad[512];
    /* exit status per flags on the V3 file: 0 fits, 1 usage, 3 does not fit */
    static const struct {
        const char *flags;
        int rc;
    } cases[] = {
        {"--vram 96G --ram 280G", 0},
        {"--vram 96G --ram 120G", 3},
        {"--vram 8G --ram 280G --json", 3},
        {"--vram 96G --ram 280G --ctx 12k", 1},
        {"--vram lots --ram 280G", 1},
        /* no wrap-around: a reserve of the whole card, absurd ctx x parallel, 0x sizes */
        {"--vram 96G --ram 280G --reserve 96G", 3},
        {"--vram 96G --ram 280G --ctx 163840 --parallel 2147483647", 3},
        {"--vram 0x10G --ram 280G", 1},
        /* --expert-slots 0 lowers the minimum: 10.35 GiB fit in 11 */
        {"--vram 11G --ram 280G --expert-slots 0", 0},
        {"--vram 11G --ram 280G", 3},
        {"--vram 96G --ram 280G --ctx 163840", 0}, /* V3's context length */
        {"--vram 96G --ram 280G --ctx 163841", 1}, /* above it: a usage error, not a refusal */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(a, sizeof a, "-m '%s' %s", g_v3, cases[i].flags);
        if (cli(a) != cases[i].rc) fail_msg("plan %s: exit %d, want %d", cases[i].flags, cli(a), cases[i].rc);
    }
    snprintf(a, sizeof a, "-m '%s' --vram 96G --ram 280G --profile '%s/profile.json'", g_v3, g_tmp);
    assert_int_equal(cli(a), 2); /* left invalid by test_profile */
    snprintf(bad, sizeof bad, "%s/not-a-model.gguf", g_tmp);
    FILE *f = fopen(bad, "w");
    fputs("GGUF but not really", f);
    fclose(f);
    snprintf(a, sizeof a, "-m '%s' --vram 96G --ram 280G", bad);
    assert_int_equal(cli(a), 2);
    /* the JSON output carries the same numbers */
    char cmd[1024], out[512];
    snprintf(cmd, sizeof cmd, "'%s' plan -m '%s' --vram 96G --ram 280G --json > '%s/plan.json'", g_onegpu, g_v3,
             g_tmp);
    assert_int_equal(system(cmd), 0);
    snprintf(out, sizeof out, "%s/plan.json", g_tmp);
    json_error_t je;
    json_t *j = json_load_file(out, 0, &je);
    assert_non_null(j);
    assert_true(json_is_true(json_object_get(j, "fits")));
    assert_int_equal(json_integer_value(json_object_get(j, "routed_expert_bytes")), 214563815424ll);
    assert_int_equal(json_integer_value(json_object_get(j, "kv_bytes")), (long long)(V3_KV_PER_TOKEN * 4096));
    json_t *slots = json_object_get(j, "expert_slots_per_layer");
    assert_int_equal(json_array_size(slots), 61);
    long long n = 0;
    for (size_t i = 0; i < json_array_size(slots); i++) n += json_integer_value(json_array_get(slots, i));
    assert_int_equal(n, json_integer_value(json_object_get(j, "resident_experts")));
    json_decref(j);
}


/* deepseek41 (issue 14 item 3): the v41-flash split set (make-model --preset
 * v41-flash --sparse: the vcruz305 Q2_K shapes) on the reference deployment,
 * 96 GiB card, 280 GiB RAM, 4 sequences of 64K. Hand numbers from spec §3.2 /
 * §4.3.3: Engram tables (384,006,168 + 384,016,682) rows x 256 Q2_K (84 B per
 * 256) and token_embd 5120 x 129,280 Q2_K are host-only; one expert is
 * 12,810,240 B; the CSA2 cache per sequence of n tokens is 40 windows x 128 x
 * 512 + 3 ratio-2 groups (2 tokens x kv and gate x 512) fixed, plus per token
 * 3 x 512/2 + 512 rows and 3 x 128/2 + 128 index keys, F32. */
#define V41_HOST_ONLY (768022850ull * 84 + 5120ull * 129280 / 256 * 84)
#define V41_EXPERT_BYTES 12810240ull
#define V41_KV_SEQ_64K ((40ull * 128 * 512 + 3 * 2 * 2 * 512 + 65536ull * (3 * 256 + 512 + 3 * 64 + 128)) * 4)
static void test_deepseek41(void **state) {
    (void)state;
    og_plan_input in = base_input();
    in.ctx = 65536, in.parallel = 4;
    og_plan p;
    plan_file(g_v41, &in, &p);
    assert_true(p.fits);
    assert_int_equal(p.n_layer, 40);
    assert_int_equal(p.n_moe_layers, 40);
    assert_int_equal(p.expert_bytes_max, V41_EXPERT_BYTES);
    assert_int_equal(p.routed_bytes, 15360 * V41_EXPERT_BYTES);
    assert_int_equal(p.host_only_bytes, V41_HOST_ONLY);
    assert_int_equal(p.host_only_bytes, p.role_bytes[OG_ROLE_ENGRAM] + p.role_bytes[OG_ROLE_EMBEDDINGS]);
    uint64_t all = 0;
    for (int r = 0; r < OG_ROLE_COUNT; r++) all += p.role_bytes[r];
    assert_int_equal(p.nonexpert_bytes, all - p.routed_bytes - p.host_only_bytes); /* never device bytes */
    assert_int_equal(p.host_bytes, p.routed_bytes + p.host_only_bytes + p.staging_bytes);
    assert_int_equal(p.kv_bytes, 4 * V41_KV_SEQ_64K); /* F32 rows whatever --kv-type asks */
    /* at least the published layout: 5,825 resident experts, 69.5 GiB */
    assert_true(p.resident_experts >= 5825);
    assert_true(p.resident_expert_bytes >= (uint64_t)(69.5 * GIB));
    assert_int_equal(p.resident_expert_bytes, p.resident_experts * V41_EXPERT_BYTES);
    assert_true(p.device_bytes + in.reserve <= in.vram);
    assert_true(p.predicted_device_share > 0.45 && p.predicted_device_share < 0.55); /* uniform traffic: slots / 384 */
    og_plan_free(&p);

    /* 240 GiB of RAM: the host side is short (243.8 GiB with the Engram tables), and only it */
    in.ram = 240 * GIB;
    plan_file(g_v41, &in, &p);
    assert_false(p.fits);
    assert_non_null(strstr(p.reason, "host short by 3.84 GiB"));
    assert_non_null(strstr(p.reason, "the host-only tensors (60.29 GiB: Engram tables and token embeddings)"));
    assert_null(strstr(p.reason, "device short"));
    og_plan_free(&p);
    /* both sides short at once: both named, in one reason */
    in.vram = 2 * GIB;
    plan_file(g_v41, &in, &p);
    assert_false(p.fits);
    assert_non_null(strstr(p.reason, "device short by"));
    assert_non_null(strstr(p.reason, "; and host short by 3.84 GiB"));
    og_plan_free(&p);
    /* the KV cache as the large item (8 x 1M tokens: 53.8 GB): --ctx and --parallel named */
    in = base_input();
    in.vram = 24 * GIB, in.ctx = 1048576, in.parallel = 8;
    plan_file(g_v41, &in, &p);
    assert_false(p.fits);
    assert_non_null(strstr(p.reason, "it fits with --ctx"));
    assert_non_null(strstr(p.reason, "or with fewer --parallel"));
    og_plan_free(&p);
}

/* deepseek4 and deepseek41 with their forward pass on a device (--device-forward):
 * on a device whose memory is not the file's (the host device: the placement
 * uploads the weights, and the forward pass reads each one through the table,
 * og_fwd_weight / og_fwd_ptr, as on a GPU) and in the cpu device's copy mode,
 * the logits of a prefill and a decode step are the host-only run's bit for bit.
 * A device without one of the ops the architecture issues is refused by name
 * when the placement is built. */
static void test_placement_forward_ds4(void **state) {
    (void)state;
    char err[512];
    og_kernels k = fx_best_kernels();
    og_pool *pool;
    assert_int_equal(og_pool_create(2, NULL, &pool, err, sizeof err), OG_OK);
    og_dispatch *host_only;
    assert_int_equal(og_dispatch_create(NULL, NULL, &host_only, err, sizeof err), OG_OK);
    const char *files[2] = {g_ds4, g_ds41};
    for (int fi = 0; fi < 2; fi++) {
        og_model *m;
        if (og_model_load(files[fi], NULL, &m, err, sizeof err)) fail_msg("%s", err);
        const char *arch = og_model_get_info(m)->arch;
        og_plan_input in = {.vram = 1 * GIB, .ram = 8 * GIB, .reserve = 0, .ctx = 256, .parallel = 1, .batch_tokens = 16,
                            .kv_bytes_per_elem = 4, .slots_override = 0};
        og_plan pl;
        plan_file(files[fi], &in, &pl);
        assert_true(pl.fits);
        const uint32_t V = og_model_get_info(m)->n_vocab;
        float *want = malloc(V * sizeof *want), *want1 = malloc(V * sizeof *want1), *got = malloc(V * sizeof *got);
        int32_t toks[6] = {11, 48, 85, 122, 7, 301}, next = 99;
        og_run_ctx plain = {.kern = &k, .pool = pool, .dispatch = og_dispatch_table(host_only),
                            .device_numerics = OG_NUMERICS_CANONICAL, .host_numerics = OG_NUMERICS_CANONICAL};
        og_kv kw = {0};
        if (og_model_forward(m, &plain, &kw, toks, 6, want, false, err, sizeof err)) fail_msg("%s: %s", arch, err);
        assert_int_equal(og_model_forward(m, &plain, &kw, &next, 1, want1, false, err, sizeof err), OG_OK);
        og_kv_free(&kw);
        for (int mode = 0; mode < 2; mode++) { /* host device (uploads), cpu device copying */
            og_placement_config pc = og_placement_defaults();
            pc.kern = &k;
            pc.vram = in.vram;
            pc.plan = &pl;
            pc.migrate = 0;
            pc.forward_on_device = true;
            pc.copy_weights = mode == 1;
            if (mode == 0) assert_int_equal(og_device_host_create(pool, &k, &pc.device, err, sizeof err), OG_OK);
            og_placement *p;
            if (og_placement_create(m, &pc, &p, err, sizeof err)) fail_msg("%s mode %d: %s", arch, mode, err);
            og_run_ctx rc = plain;
            og_placement_bind(p, &rc);
            assert_non_null(rc.weights);
            og_kv kv = {0};
            if (og_model_forward(m, &rc, &kv, toks, 6, got, false, err, sizeof err)) fail_msg("%s mode %d: %s", arch, mode, err);
            if (memcmp(want, got, V * sizeof *got)) fail_msg("%s mode %d: other prefill logits on the device", arch, mode);
            if (og_model_forward(m, &rc, &kv, &next, 1, got, false, err, sizeof err)) fail_msg("%s mode %d: %s", arch, mode, err);
            if (memcmp(want1, got, V * sizeof *got)) fail_msg("%s mode %d: other decode logits on the device", arch, mode);
            og_kv_free(&kv);
            og_placement_free(p);
        }
        /* a device without an op the architecture issues: refused by name, before any token */
        og_device *dev;
        assert_int_equal(og_device_cpu_create(in.vram, 1, &k, &dev, err, sizeof err), OG_OK);
        og_device_ops less = *dev->ops;
        if (fi) less.engram = NULL;
        else less.sink_attention = NULL;
        dev->ops = &less;
        og_placement_config pc = og_placement_defaults();
        pc.kern = &k;
        pc.vram = in.vram;
        pc.plan = &pl;
        pc.migrate = 0;
        pc.forward_on_device = true;
        pc.device = dev;
        og_placement *p = NULL;
        assert_int_equal(og_placement_create(m, &pc, &p, err, sizeof err), OG_ERR_UNSUPPORTED);
        char want_msg[160];
        snprintf(want_msg, sizeof want_msg, "--device-forward: the cpu device has no %s op, which %s's forward pass issues",
                 fi ? "engram" : "sink_attention", arch);
        if (!strstr(err, want_msg)) fail_msg("refusal: %s", err);
        free(want), free(want1), free(got);
        og_plan_free(&pl);
        og_model_free(m);
    }
    og_dispatch_free(host_only);
    og_pool_free(pool);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_plan PATH/TO/onegpu\n");
        return 2;
    }
    g_onegpu = argv[1];
    snprintf(g_tmp, sizeof g_tmp, "/tmp/og-plan-XXXXXX");
    if (!mkdtemp(g_tmp)) return 2;
    snprintf(g_v3, sizeof g_v3, "%s/v3.gguf", g_tmp);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' make-model --preset v3-671b --sparse --tokenizer none -o '%s' >/dev/null", g_onegpu,
             g_v3);
    if (system(cmd) != 0) {
        fprintf(stderr, "make-model failed\n");
        return 1;
    }
    snprintf(g_small, sizeof g_small, "%s/small.gguf", g_tmp);
    snprintf(cmd, sizeof cmd,
             "'%s' make-model --tokenizer none --vocab 512 --n-layer 4 --n-dense 1 --n-embd 256 --n-head 4 "
             "--q-lora-rank 64 --kv-lora-rank 64 --qk-nope 32 --qk-rope 16 --v-head 32 --n-ff 256 --n-expert 16 "
             "--n-expert-used 4 --n-ff-exp 256 --n-group 4 --n-group-used 2 --type F32 -o '%s' >/dev/null 2>&1",
             g_onegpu, g_small);
    if (system(cmd) != 0) {
        fprintf(stderr, "make-model (small) failed\n");
        return 1;
    }
    snprintf(g_ref, sizeof g_ref, "%s/ref.gguf", g_tmp);
    snprintf(cmd, sizeof cmd,
             "'%s' make-model --preset v3-671b --sparse --tokenizer none --n-embd 5120 --n-layer 41 --n-dense 1 "
             "--n-expert 384 --n-expert-used 6 --n-ff-exp 2304 -o '%s' >/dev/null 2>&1",
             g_onegpu, g_ref);
    if (system(cmd) != 0) {
        fprintf(stderr, "make-model (reference shape) failed\n");
        return 1;
    }
    snprintf(g_v41, sizeof g_v41, "%s/v41.gguf", g_tmp);
    snprintf(cmd, sizeof cmd, "'%s' make-model --arch deepseek41 --preset v41-flash --sparse --tokenizer none -o '%s' "
             ">/dev/null 2>&1", g_onegpu, g_v41);
    if (system(cmd) != 0) {
        fprintf(stderr, "make-model (v41-flash) failed\n");
        return 1;
    }
    snprintf(g_v41, sizeof g_v41, "%s/v41-00001-of-00007.gguf", g_tmp);
    snprintf(g_ds4, sizeof g_ds4, "%s/ds4.gguf", g_tmp);
    snprintf(g_ds41, sizeof g_ds41, "%s/ds41.gguf", g_tmp);
    snprintf(cmd, sizeof cmd, "'%s' make-model --arch deepseek4 --preset tiny --tokenizer none --vocab 512 -o '%s' >/dev/null 2>&1 && "
             "'%s' make-model --arch deepseek41 --preset tiny --tokenizer none --vocab 512 -o '%s' >/dev/null 2>&1",
             g_onegpu, g_ds4, g_onegpu, g_ds41);
    if (system(cmd) != 0) {
        fprintf(stderr, "make-model (deepseek4 / deepseek41 tiny) failed\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deepseek41),
        cmocka_unit_test(test_hand_numbers), cmocka_unit_test(test_reference_shape), cmocka_unit_test(test_refusals), cmocka_unit_test(test_overrides),
        cmocka_unit_test(test_profile), cmocka_unit_test(test_cpu_device),
        cmocka_unit_test(test_copies_in_flight), cmocka_unit_test(test_placement), cmocka_unit_test(test_placement_forward),
        cmocka_unit_test(test_placement_forward_ds4),
        cmocka_unit_test(test_cli),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_tmp);
    return rc;
}
