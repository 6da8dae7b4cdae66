/* The placement object (og_placement.h). */
#include "og_placement.h"

#include "og_device_cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct og_placement {
    uint32_t n_layer, n_expert;
    const og_model *m;
    og_device *dev;          /* owned */
    og_expert_cache *cache;  /* owned */
    og_migrator *mig;        /* owned; NULL: the hot set stays (or migration stopped) */
    og_dispatch *dispatch;   /* owned: the forward pass's MoE dispatcher (host only without a device) */
    og_expert_stats stats;   /* counts NULL when not counting */
    uint64_t planned;        /* experts resident after the initial load */
    og_stream *fwd;          /* the forward pass's stream on dev (its ops: attention, router, norms, head) */
    int64_t aliased;         /* non-expert weight bytes the cpu device uses in place (counted in its budget) */
    og_dev_tensor *wt;       /* [weights.n] the non-expert weights' device copies (weights.t), or NULL */
    og_dev_weights weights;
    void *wbase;             /* their one device allocation */
    uint64_t pinned, expert_bytes;
    char pin_error[256];     /* "" when pinning did not fail */
};

/* Pins the routed experts' host ranges (cfg.pin with a cuda device): the copies
 * into slots then run asynchronously at the bus's rate. Stops at the first refusal. */
static void pin_experts(og_placement *p, const og_model *m) {
    const og_model_info *mi = og_model_get_info(m);
    for (uint32_t l = 0; l < mi->n_layer; l++) {
        const og_moe_weights *L = &mi->moe[l];
        const og_weight *w[3] = {&L->gate_exps, &L->up_exps, &L->down_exps};
        for (int k = 0; L->moe && k < 3; k++) {
            const uint64_t n = (uint64_t)w[k]->n_rows * w[k]->row_bytes;
            uint64_t got = 0;
            p->expert_bytes += n;
            if (!p->pin_error[0] &&
                og_device_cuda_host_register(p->dev, w[k]->data, n, &got, p->pin_error, sizeof p->pin_error) &&
                !p->pin_error[0])
                snprintf(p->pin_error, sizeof p->pin_error, "refused");
            p->pinned += got;
        }
    }
}

static int cmp_host(const void *a, const void *b) {
    const uintptr_t x = (uintptr_t)((const og_dev_tensor *)a)->host, y = (uintptr_t)((const og_dev_tensor *)b)->host;
    return (x > y) - (x < y);
}

/* Copies every non-expert tensor (the planner's nonexpert_bytes: all but the
 * routed experts and the host-only ones) into one device allocation on the
 * forward stream and waits, then keys the copies by host address (og_dev_weights).
 * On a device other than cpu each matrix's type must have the device's kernels:
 * the first one without is refused by name, before any token. */
static og_status upload_weights(og_placement *p, const og_model *m, char *err, size_t errlen) {
    const og_gguf *g = og_model_gguf(m);
    const og_model_info *mi = og_model_get_info(m);
    const bool cuda = !strcmp(p->dev->ops->name, "cuda");
    const uint64_t nt = og_gguf_n_tensors(g);
    uint64_t total = 0;
    size_t n = 0;
    for (uint64_t i = 0; i < nt; i++) {
        const og_gguf_tensor *t = og_gguf_tensor_at(g, i);
        const og_tensor_role r = og_model_tensor_role(mi->arch, t->name);
        if (r == OG_ROLE_ROUTED_EXPERTS || r == OG_ROLE_ENGRAM || !t->data) continue;
        if (cuda && t->n_dims > 1 && r != OG_ROLE_SHARED_EXPERTS && t->type != OG_TYPE_I32 && !og_cuda_forward_type(t->type))
            return og_fail(err, errlen, OG_ERR_UNSUPPORTED,
                           "--device-forward: %s is %s, which the cuda device has no kernels for (it has F32, F16, "
                           "BF16, Q8_0, Q4_0, Q5_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ2_XXS, MXFP4); run without --device-forward",
                           t->name, og_type_name(t->type));
        total += (t->n_bytes + 63) & ~(uint64_t)63;
        n++;
    }
    if (!n) return OG_OK;
    if (!(p->wt = calloc(n, sizeof *p->wt))) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    og_status st = p->dev->ops->alloc(p->dev, total, &p->wbase, err, errlen);
    if (st) return st;
    uint64_t off = 0;
    size_t k = 0;
    for (uint64_t i = 0; i < nt && !st; i++) {
        const og_gguf_tensor *t = og_gguf_tensor_at(g, i);
        const og_tensor_role r = og_model_tensor_role(mi->arch, t->name);
        if (r == OG_ROLE_ROUTED_EXPERTS || r == OG_ROLE_ENGRAM || !t->data) continue;
        p->wt[k++] = (og_dev_tensor){t->data, t->n_bytes, (uint8_t *)p->wbase + off, t->name};
        st = p->dev->ops->copy_to_device(p->dev, p->fwd, (uint8_t *)p->wbase + off, t->data, t->n_bytes, err, errlen);
        off += (t->n_bytes + 63) & ~(uint64_t)63;
    }
    og_event ev = 0;
    og_status ws = p->dev->ops->event_record(p->dev, p->fwd, &ev, st ? NULL : err, st ? 0 : errlen);
    if (!ws) ws = p->dev->ops->event_wait(p->dev, ev, st ? NULL : err, st ? 0 : errlen);
    if (st || ws) return st ? st : ws;
    qsort(p->wt, n, sizeof *p->wt, cmp_host);
    p->weights = (og_dev_weights){p->wt, n};
    return OG_OK;
}

/* The first op that model architecture arch's forward pass issues and the
 * device has no kernel for, or NULL when it has them all (deepseek2: its ops;
 * deepseek4: those and mHC, QAT, the compressor, the indexer, the sink
 * attention; deepseek41: those and Engram's gates). */
static const char *missing_op(const og_device_ops *o, const char *arch) {
    const bool ds4 = !strcmp(arch, "deepseek4") || !strcmp(arch, "deepseek41"), ds41 = !strcmp(arch, "deepseek41");
    const struct { bool need, have; const char *name; } ops[] = {
        {true, o->matmul, "matmul"}, {true, o->rmsnorm, "rmsnorm"}, {true, o->rope, "rope"},
        {true, o->router, "router"}, {true, o->add, "add"}, {true, o->copy, "copy"}, {true, o->get_rows, "get_rows"},
        {true, o->moe_combine, "moe_combine"}, {!ds4, o->mla_attention, "mla_attention"},
        {!ds4, o->kv_store, "kv_store"}, {!ds4, o->softmax, "softmax"}, {!ds4, o->swiglu, "swiglu"},
        {ds4, o->scale, "scale"}, {ds4, o->hc_mix, "hc_mix"}, {ds4, o->hc_collapse, "hc_collapse"},
        {ds4, o->hc_expand, "hc_expand"}, {ds4, o->qat, "qat"}, {ds4, o->compress, "compress"},
        {ds4, o->indexer, "indexer"}, {ds4, o->sink_attention, "sink_attention"}, {ds41, o->engram, "engram"}};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (ops[i].need && !ops[i].have) return ops[i].name;
    return NULL;
}

/* The forward pass on the device (cfg->forward_on_device): its stream, and the
 * non-expert weights where the device reads them: the cpu device uses the
 * mapped file in place and counts the bytes (copies them with
 * cfg->copy_weights, the test mode of a GPU's layout), any other device holds
 * copies (upload_weights). Refused by name when the device lacks an op the
 * architecture's forward pass issues. */
static og_status forward_setup(og_placement *p, const og_model *m, const og_placement_config *cfg, char *err,
                               size_t errlen) {
    const og_model_info *mi = og_model_get_info(m);
    const bool cpu = !strcmp(p->dev->ops->name, "cpu");
    const char *miss = missing_op(p->dev->ops, mi->arch);
    if (miss)
        return og_fail(err, errlen, OG_ERR_UNSUPPORTED,
                       "--device-forward: the %s device has no %s op, which %s's forward pass issues (its resident "
                       "experts still compute there without the flag)",
                       p->dev->ops->name, miss, mi->arch);
    og_status st = p->dev->ops->stream_create(p->dev, &p->fwd, err, errlen);
    if (st) return st;
    if (!cpu || cfg->copy_weights) return upload_weights(p, m, err, errlen);
    if ((st = og_device_cpu_alias(p->dev, (int64_t)cfg->plan->nonexpert_bytes, err, errlen)) == OG_OK)
        p->aliased = (int64_t)cfg->plan->nonexpert_bytes;
    return st;
}

og_placement_config og_placement_defaults(void) {
    return (og_placement_config){.migrate = 2, .min_residency = 8, .decay = 0.85};
}

og_status og_placement_create(const og_model *m, const og_placement_config *cfg, og_placement **out, char *err,
                              size_t errlen) {
    *out = NULL;
    const og_model_info *mi = og_model_get_info(m);
    const uint32_t NL = mi->n_layer, E = mi->n_expert;
    const size_t n = (size_t)NL * E;
    og_device *given = cfg->device; /* ours from here on */
    if (given && !(cfg->vram && n)) {
        og_device_destroy(given);
        given = NULL;
    }
    if (cfg->vram) {
        const og_plan *pl = cfg->plan;
        og_status bad = OG_OK;
        if (!pl || !pl->fits || !pl->slots)
            bad = og_fail(err, errlen, OG_ERR_INVALID_ARG, "placement: a device needs a plan that fits");
        else if (pl->n_layer != NL || pl->n_expert != E)
            bad = og_fail(err, errlen, OG_ERR_INVALID_ARG,
                          "placement: the plan is for %u layers x %u experts, the model has %u x %u", pl->n_layer,
                          pl->n_expert, NL, E);
        else if (cfg->migrate && !(cfg->decay > 0 && cfg->decay < 1))
            bad = og_fail(err, errlen, OG_ERR_INVALID_ARG, "placement: decay %g is not in (0, 1)", cfg->decay);
        if (bad) {
            og_device_destroy(given);
            return bad;
        }
    }
    og_placement *p = calloc(1, sizeof *p);
    if (!p) {
        og_device_destroy(given);
        return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    }
    p->dev = given; /* freed with p from here on */
    p->n_layer = NL;
    p->n_expert = E;
    p->m = m;
    if ((cfg->vram || cfg->count) && n) {
        p->stats.counts = calloc(n, sizeof *p->stats.counts);
        p->stats.layer_routes = calloc(NL, sizeof *p->stats.layer_routes);
        p->stats.layer_hits = calloc(NL, sizeof *p->stats.layer_hits);
        if (!p->stats.counts || !p->stats.layer_routes || !p->stats.layer_hits) {
            og_placement_free(p);
            return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
        }
    }
    if (cfg->vram && n) {
        uint8_t *resident = malloc(n);
        og_status st = resident ? og_plan_resident(cfg->plan, cfg->profile, resident) : OG_ERR_NOMEM;
        if (st) og_fail(err, errlen, st, "out of memory");
        if (!st && !cfg->kern) st = og_fail(err, errlen, OG_ERR_INVALID_ARG, "placement: a device needs kernels");
        if (!st && !p->dev)
            st = og_device_cpu_create(cfg->vram, cfg->device_threads > 0 ? cfg->device_threads : og_device_cpu_default_threads(), cfg->kern, &p->dev, err, errlen);
        if (!st && cfg->pin && !strcmp(p->dev->ops->name, "cuda")) pin_experts(p, m);
        /* the non-expert weights first (the slots take the rest of the budget) */
        if (!st && cfg->forward_on_device) st = forward_setup(p, m, cfg, err, errlen);
        if (!st) st = og_expert_cache_create(m, cfg->plan->slots, p->dev, &p->cache, err, errlen);
        if (!st) st = og_expert_cache_load(p->cache, m, resident, err, errlen);
        if (!st && cfg->migrate)
            st = og_migrator_create(NL, E, cfg->migrate, cfg->min_residency, cfg->decay, &p->mig, err, errlen);
        free(resident);
        if (st) {
            og_placement_free(p);
            return st;
        }
        p->stats.resident = p->cache->resident; /* follows the migrations */
        p->planned = p->cache->n_resident;
    }
    og_status st = og_dispatch_create(p->dev, p->cache, &p->dispatch, err, errlen);
    if (st) {
        og_placement_free(p);
        return st;
    }
    *out = p;
    return OG_OK;
}

void og_placement_free(og_placement *p) {
    if (!p) return;
    og_migrator_free(p->mig);
    og_dispatch_free(p->dispatch); /* waits for its device work: before the slots go */
    og_expert_cache_free(p->cache);
    if (p->dev) p->dev->ops->stream_destroy(p->dev, p->fwd);
    if (p->aliased) (void)og_device_cpu_alias(p->dev, -p->aliased, NULL, 0);
    if (p->dev) p->dev->ops->free(p->dev, p->wbase);
    free(p->wt);
    og_device_destroy(p->dev);
    free(p->stats.counts);
    free(p->stats.layer_routes);
    free(p->stats.layer_hits);
    free(p);
}

void og_placement_bind(og_placement *p, og_run_ctx *rc) {
    rc->stats = p && p->stats.counts ? &p->stats : NULL;
    rc->dispatch = p ? og_dispatch_table(p->dispatch) : NULL;
    rc->dev = p && p->fwd ? p->dev : NULL; /* NULL: the forward pass runs its ops on a host device */
    rc->stream = p ? p->fwd : NULL;
    rc->weights = p && p->fwd && p->weights.n ? &p->weights : NULL;
}

og_status og_placement_step(og_placement *p, char *err, size_t errlen) {
    if (!p || !p->cache) return OG_OK;
    if (!p->mig) {
        og_expert_cache_poll(p->cache);
        return OG_OK;
    }
    og_status st = og_migrator_step(p->mig, p->cache, p->m, p->stats.counts, err, errlen);
    if (st) { /* a failed swap leaves the slots as they were: stop migrating */
        og_migrator_free(p->mig);
        p->mig = NULL;
    }
    return st;
}

uint32_t og_placement_idle(og_placement *p) {
    if (!p || !p->cache) return 0;
    char err[256];
    (void)og_expert_cache_settle(p->cache, err, sizeof err); /* a failed copy stays in flight: counted below */
    return p->cache->n_pending;
}

void og_placement_get_stats(const og_placement *p, og_placement_stats *out) {
    memset(out, 0, sizeof *out);
    if (!p) return;
    out->counting = p->stats.counts != NULL;
    out->selections = p->stats.routes;
    out->hits = p->stats.routes_resident;
    out->hit_rate = out->selections ? (double)out->hits / (double)out->selections : 0.0;
    if (!p->cache) return;
    out->device = true;
    out->migrations = p->cache->migrations;
    out->pcie_bytes = p->dev->pcie_bytes;
    out->resident_experts = p->cache->n_resident;
    out->planned_experts = p->planned;
    out->in_flight = p->cache->n_pending;
    out->pinned_bytes = p->pinned;
    out->expert_host_bytes = p->expert_bytes;
    out->pin_error = p->pin_error[0] ? p->pin_error : NULL;
    out->forward_on_device = p->fwd != NULL;
    for (size_t i = 0; i < p->weights.n; i++) out->weight_bytes += p->weights.t[i].bytes;
}

og_status og_placement_layer_hits(const og_placement *p, uint64_t *routes, uint64_t *hits, uint32_t n_layer) {
    if (!p || !p->cache) return OG_ERR_STATE;
    const uint32_t nl = n_layer < p->n_layer ? n_layer : p->n_layer;
    memcpy(routes, p->stats.layer_routes, nl * sizeof *routes);
    memcpy(hits, p->stats.layer_hits, nl * sizeof *hits);
    return OG_OK;
}

const uint64_t *og_placement_counts(const og_placement *p) { return p ? p->stats.counts : NULL; }

og_expert_cache *og_placement_cache(og_placement *p) { return p ? p->cache : NULL; }

int32_t og_placement_slot(const og_placement *p, uint32_t l, uint32_t e) {
    if (!p || !p->cache || l >= p->n_layer || e >= p->n_expert) return -1;
    const size_t at = (size_t)l * p->n_expert + e;
    return p->cache->resident[at] ? p->cache->slot_of[at] : -1;
}

og_device *og_placement_device(og_placement *p) { return p ? p->dev : NULL; }

og_status og_placement_save_profile(const og_placement *p, const uint64_t *add, const char *path, char *err,
                                    size_t errlen) {
    if (!p || !p->stats.counts)
        return og_fail(err, errlen, OG_ERR_STATE, "placement: selections were not counted");
    const size_t n = (size_t)p->n_layer * p->n_expert;
    uint64_t *c = malloc((n + 1) * sizeof *c);
    if (!c) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        uint64_t v = p->stats.counts[i], a = add ? add[i] : 0;
        v = v > UINT64_MAX - a ? UINT64_MAX : v + a;
        c[i] = v > (uint64_t)OG_PROFILE_COUNT_MAX ? (uint64_t)OG_PROFILE_COUNT_MAX : v; /* the file stays readable */
    }
    og_status st = og_profile_write(path, p->n_layer, p->n_expert, c, err, errlen);
    free(c);
    return st;
}
