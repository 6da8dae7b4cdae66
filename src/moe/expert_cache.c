/* The expert cache (the device's expert slots, filled through the device
 * interface) and the live migrator. */
#include "og_moe.h"
#include "og_policy.h"

#include <stdlib.h>
#include <string.h>

static uint64_t layer_expert_bytes(const og_model *m, uint32_t l) {
    const og_model_info *mi = og_model_get_info(m);
    const og_moe_weights *L = &mi->moe[l];
    if (!L->moe) return 0;
    return (uint64_t)mi->n_ff_exp * (L->gate_exps.row_bytes + L->up_exps.row_bytes) +
           (uint64_t)mi->n_embd * L->down_exps.row_bytes;
}

og_status og_expert_cache_create(const og_model *m, const uint32_t *slots, og_device *dev, og_expert_cache **out,
                                 char *err, size_t errlen) {
    *out = NULL;
    const og_model_info *mi = og_model_get_info(m);
    const uint32_t NL = mi->n_layer, E = mi->n_expert;
    const size_t n = (size_t)NL * E;
    og_expert_cache *c = calloc(1, sizeof *c);
    if (c) {
        c->dev = dev;
        c->n_layer = NL;
        c->n_expert = E;
        c->layer_off = calloc(NL + 1, sizeof *c->layer_off);
        c->expert_bytes = calloc(NL + 1, sizeof *c->expert_bytes);
        c->gate_bytes = calloc(NL + 1, sizeof *c->gate_bytes);
        c->up_bytes = calloc(NL + 1, sizeof *c->up_bytes);
        c->occupied = calloc(n + 1, 1);
        c->n_slots = calloc(NL + 1, sizeof *c->n_slots);
        c->slot_of = malloc((n + 1) * sizeof *c->slot_of);
        c->resident = calloc(n + 1, 1);
    }
    if (!c || !c->layer_off || !c->expert_bytes || !c->gate_bytes || !c->up_bytes || !c->occupied ||
        !c->n_slots || !c->slot_of || !c->resident) {
        og_expert_cache_free(c);
        return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    }
    /* per layer: one expert's bytes, its slots (none on dense layers, at most E),
     * where its slots start in the arena */
    for (uint32_t l = 0; l < NL; l++) {
        c->expert_bytes[l] = layer_expert_bytes(m, l);
        if (c->expert_bytes[l]) {
            c->gate_bytes[l] = (uint64_t)mi->n_ff_exp * mi->moe[l].gate_exps.row_bytes;
            c->up_bytes[l] = (uint64_t)mi->n_ff_exp * mi->moe[l].up_exps.row_bytes;
        }
        c->n_slots[l] = c->expert_bytes[l] ? (slots[l] < E ? slots[l] : E) : 0;
        c->layer_off[l] = c->capacity;
        uint64_t lb; /* (bounded by the routed tensors' bytes; checked all the same) */
        if (!og_mul_u64(c->n_slots[l], c->expert_bytes[l], &lb) || !og_add_u64(c->capacity, lb, &c->capacity)) {
            og_expert_cache_free(c);
            return og_fail(err, errlen, OG_ERR_RANGE, "expert slots of layer %u overflow 64 bits", l);
        }
        c->max_slots = c->n_slots[l] > c->max_slots ? c->n_slots[l] : c->max_slots;
    }
    c->expert_in = malloc(((size_t)NL * c->max_slots + 1) * sizeof *c->expert_in);
    c->pending = calloc((size_t)NL * c->max_slots + 1, sizeof *c->pending);
    c->last_read = calloc((size_t)NL * c->max_slots + 1, sizeof *c->last_read);
    if (!c->expert_in || !c->pending || !c->last_read) {
        og_expert_cache_free(c);
        return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    }
    if (c->capacity) {
        void *arena;
        og_status st = dev->ops->alloc(dev, c->capacity, &arena, err, errlen);
        if (!st) {
            c->arena = arena;
            st = dev->ops->stream_create(dev, &c->stream, err, errlen);
        }
        if (st) {
            og_expert_cache_free(c);
            return st;
        }
    }
    for (size_t i = 0; i < n; i++) c->slot_of[i] = -1;
    for (size_t i = 0; i < (size_t)NL * c->max_slots; i++) c->expert_in[i] = -1;
    *out = c;
    return OG_OK;
}

/* Starts copying expert e of layer l into slot j on the cache's stream, after
 * the last op that read the slot (a queued op never sees its expert change);
 * published by poll. */
static og_status start_copy(og_expert_cache *c, const og_model *m, uint32_t l, uint32_t e, uint32_t j, char *err,
                            size_t errlen) {
    const og_model_info *mi = og_model_get_info(m);
    const og_moe_weights *L = &mi->moe[l];
    const size_t at = (size_t)l * c->n_expert + e, sj = (size_t)l * c->max_slots + j;
    uint8_t *dst = c->arena + c->layer_off[l] + (uint64_t)j * c->expert_bytes[l];
    const og_weight *w[3] = {&L->gate_exps, &L->up_exps, &L->down_exps};
    const uint64_t rows[3] = {mi->n_ff_exp, mi->n_ff_exp, mi->n_embd};
    const og_device_ops *ops = c->dev->ops;
    og_status st = ops->stream_wait(c->dev, c->stream, c->last_read[sj], err, errlen);
    for (int k = 0; k < 3 && !st; k++) { /* one event for the three: a stream runs in order */
        const size_t bytes = (size_t)rows[k] * w[k]->row_bytes;
        st = ops->copy_to_device(c->dev, c->stream, dst, (const uint8_t *)w[k]->data + (size_t)e * bytes, bytes, err,
                                 errlen);
        dst += bytes; /* the device counts the bytes (og_device.pcie_bytes) */
    }
    og_event ev = 0;
    if (!st) st = ops->event_record(c->dev, c->stream, &ev, err, errlen);
    if (st) return st;
    c->last_read[sj] = 0; /* the wait above covers it */
    c->slot_of[at] = (int32_t)j;
    c->occupied[at] = 1;
    c->expert_in[sj] = (int32_t)e;
    c->pending[sj] = ev ? ev : 1;
    c->n_pending++;
    return OG_OK;
}

static void publish(og_expert_cache *c, uint32_t l, uint32_t j) {
    const size_t sj = (size_t)l * c->max_slots + j;
    const uint32_t e = (uint32_t)c->expert_in[sj];
    const size_t at = (size_t)l * c->n_expert + e;
    c->resident[at] = 1;
    c->pending[sj] = 0;
    c->n_pending--;
    c->n_resident++;
}

uint32_t og_expert_cache_poll(og_expert_cache *c) {
    if (!c->n_pending) return 0;
    for (uint32_t l = 0; l < c->n_layer; l++)
        for (uint32_t j = 0; j < c->n_slots[l]; j++) {
            const size_t sj = (size_t)l * c->max_slots + j;
            if (c->pending[sj] && c->dev->ops->event_done(c->dev, c->pending[sj])) publish(c, l, j);
        }
    return c->n_pending;
}

/* Takes expert e of layer l off the device: unusable at once. */
static void evict(og_expert_cache *c, uint32_t l, uint32_t e) {
    const size_t at = (size_t)l * c->n_expert + e;
    if (c->slot_of[at] < 0) return;
    const size_t sj = (size_t)l * c->max_slots + (size_t)c->slot_of[at];
    if (c->pending[sj]) {
        c->pending[sj] = 0;
        c->n_pending--;
    } else if (c->resident[at]) {
        c->n_resident--;
    }
    c->expert_in[sj] = -1;
    c->slot_of[at] = -1;
    c->occupied[at] = 0;
    c->resident[at] = 0;
}

og_status og_expert_cache_load(og_expert_cache *c, const og_model *m, const uint8_t *resident, char *err,
                               size_t errlen) {
    const uint32_t E = c->n_expert;
    for (uint32_t l = 0; l < c->n_layer; l++) {
        uint32_t want = 0;
        if (c->expert_bytes[l])
            for (uint32_t e = 0; e < E; e++) want += resident[(size_t)l * E + e] != 0;
        if (want > c->n_slots[l])
            return og_fail(err, errlen, OG_ERR_RANGE, "layer %u: %u resident experts but %u slots on the %s device", l,
                           want, c->n_slots[l], c->dev->ops->name);
    }
    for (uint32_t l = 0; l < c->n_layer; l++) {
        for (uint32_t e = 0; e < E; e++) evict(c, l, e);
        if (!c->expert_bytes[l]) continue;
        uint32_t j = 0;
        for (uint32_t e = 0; e < E; e++)
            if (resident[(size_t)l * E + e]) {
                og_status st = start_copy(c, m, l, e, j++, err, errlen);
                if (st) return st;
            }
    }
    return og_expert_cache_settle(c, err, errlen); /* start-up: wait for the copies */
}

og_status og_expert_cache_settle(og_expert_cache *c, char *err, size_t errlen) {
    og_status st = OG_OK;
    for (size_t i = 0; i < (size_t)c->n_layer * c->max_slots && !st && c->n_pending; i++)
        if (c->pending[i]) st = c->dev->ops->event_wait(c->dev, c->pending[i], err, errlen);
    og_expert_cache_poll(c);
    return st;
}

og_status og_expert_cache_swap(og_expert_cache *c, const og_model *m, uint32_t l, uint32_t e_in, uint32_t e_out,
                               char *err, size_t errlen) {
    const size_t base = (size_t)l * c->n_expert;
    if (l >= c->n_layer || e_in >= c->n_expert || e_out >= c->n_expert || !c->resident[base + e_out] ||
        c->slot_of[base + e_in] >= 0)
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "layer %u: cannot swap expert %u in for %u", l, e_in, e_out);
    uint32_t j = (uint32_t)c->slot_of[base + e_out];
    evict(c, l, e_out); /* the slot is gone before it is overwritten */
    og_status st = start_copy(c, m, l, e_in, j, err, errlen);
    if (st) return st;
    c->migrations++;
    return OG_OK;
}

int32_t og_expert_cache_slot(const og_expert_cache *c, uint32_t l, uint32_t e) {
    if (!c || l >= c->n_layer || e >= c->n_expert) return -1;
    const size_t at = (size_t)l * c->n_expert + e;
    return c->resident[at] ? c->slot_of[at] : -1;
}

og_status og_expert_cache_slots(const og_expert_cache *c, const og_model *m, uint32_t l, og_expert_slots *out) {
    memset(out, 0, sizeof *out);
    const og_model_info *mi = og_model_get_info(m);
    if (l >= c->n_layer || l >= mi->n_layer || !c->n_slots[l]) return OG_ERR_INVALID_ARG;
    const og_moe_weights *L = &mi->moe[l];
    const int64_t Fe = mi->n_ff_exp, D = mi->n_embd;
    out->base = c->arena + c->layer_off[l];
    out->slot_bytes = c->expert_bytes[l];
    out->n_slots = c->n_slots[l];
    out->gate = (og_weight){L->gate_exps.type, NULL, L->gate_exps.K, Fe, L->gate_exps.row_bytes};
    out->up = (og_weight){L->up_exps.type, NULL, L->up_exps.K, Fe, L->up_exps.row_bytes};
    out->down = (og_weight){L->down_exps.type, NULL, L->down_exps.K, D, L->down_exps.row_bytes};
    out->gate_off = 0;
    out->up_off = c->gate_bytes[l];
    out->down_off = c->gate_bytes[l] + c->up_bytes[l];
    return OG_OK;
}

void og_expert_cache_note_read(og_expert_cache *c, uint32_t l, int32_t slot, og_event ev) {
    if (l < c->n_layer && slot >= 0 && (uint32_t)slot < c->n_slots[l]) c->last_read[(size_t)l * c->max_slots + (size_t)slot] = ev;
}

void og_expert_cache_free(og_expert_cache *c) {
    if (!c) return;
    if (c->stream) c->dev->ops->stream_destroy(c->dev, c->stream); /* waits for its copies */
    if (c->arena) c->dev->ops->free(c->dev, c->arena);
    free(c->last_read);
    free(c->layer_off);
    free(c->expert_bytes);
    free(c->gate_bytes);
    free(c->up_bytes);
    free(c->occupied);
    free(c->n_slots);
    free(c->slot_of);
    free(c->expert_in);
    free(c->pending);
    free(c->resident);
    free(c);
}

og_status og_migrator_create(uint32_t n_layer, uint32_t n_expert, uint32_t swaps_per_step, uint32_t min_residency,
                             double decay, og_migrator **out, char *err, size_t errlen) {
    *out = NULL;
    if (!(decay > 0 && decay < 1)) return og_fail(err, errlen, OG_ERR_INVALID_ARG, "decay %g is not in (0, 1)", decay);
    const size_t n = (size_t)n_layer * n_expert + 1;
    og_migrator *mg = calloc(1, sizeof *mg);
    if (mg) {
        *mg = (og_migrator){n_layer, n_expert, swaps_per_step, min_residency, decay, 0, calloc(n, sizeof(double)),
                            calloc(n, sizeof(uint64_t)), calloc(n, sizeof(uint64_t))};
    }
    if (!mg || !mg->score || !mg->pinned || !mg->last) {
        og_migrator_free(mg);
        return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    }
    *out = mg;
    return OG_OK;
}

og_status og_migrator_step(og_migrator *mg, og_expert_cache *d, const og_model *m, const uint64_t *counts, char *err,
                           size_t errlen) {
    const uint32_t E = mg->n_expert;
    const uint64_t now = mg->step++;
    og_expert_cache_poll(d); /* copies that landed during the step become usable */
    for (uint32_t l = 0; l < mg->n_layer; l++) {
        const size_t base = (size_t)l * E;
        if (!d->expert_bytes[l]) continue;
        for (uint32_t e = 0; e < E; e++) {
            const uint32_t delta = (uint32_t)(counts[base + e] - mg->last[base + e]); /* selections this step */
            mg->last[base + e] = counts[base + e];
            mg->score[base + e] = mg->decay * mg->score[base + e] + delta;
        }
        for (uint32_t e = 0; e < E; e++)
            if (d->occupied[base + e] && !d->resident[base + e] && mg->pinned[base + e] <= now)
                mg->pinned[base + e] = now + 1;
        for (uint32_t k = 0; k < mg->swaps_per_step; k++) {
            uint32_t in, out;
            /* experts on their way count as resident (no second copy) and stay */
            if (!og_migrator_pick(E, d->occupied + base, mg->score + base, mg->pinned + base, now, NULL, &in, &out)) break;
            og_status st = og_expert_cache_swap(d, m, l, in, out, err, errlen);
            if (st) return st;
            mg->pinned[base + in] = now + 1 + mg->min_residency;
        }
    }
    return OG_OK;
}

void og_migrator_free(og_migrator *mg) {
    if (!mg) return;
    free(mg->score);
    free(mg->pinned);
    free(mg->last);
    free(mg);
}
