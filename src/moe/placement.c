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
        if (!st) st = og_expert_cache_create(m, cfg->plan->slots, p->dev, &p->cache, err, errlen);
        if (!st) st = og_expert_cache_load(p->cache, m, resident, err, errlen);
        /* the non-expert weights are device memory: the cpu device uses the mapped
         * file in place (a copy would double the RAM) and counts the bytes */
        if (!st && cfg->forward_on_device && strcmp(p->dev->ops->name, "cpu"))
            st = og_fail(err, errlen, OG_ERR_UNSUPPORTED,
                         "--device-forward needs the cpu device: the %s device has no forward-pass ops yet "
                         "(its resident experts still compute there without the flag)", p->dev->ops->name);
        if (!st && cfg->forward_on_device && (st = og_device_cpu_alias(p->dev, (int64_t)cfg->plan->nonexpert_bytes, err, errlen)) == OG_OK)
            p->aliased = (int64_t)cfg->plan->nonexpert_bytes;
        if (!st && cfg->forward_on_device) st = p->dev->ops->stream_create(p->dev, &p->fwd, err, errlen);
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
