/* The `cpu` device: a separate arena of expert slots standing in for device
 * memory, so the planner's budgets, the resident set, its PCIe traffic and
 * migration are real on a machine without a GPU. And the live migrator. */
#include "og_moe.h"
#include "og_policy.h"

#include <stdlib.h>
#include <string.h>

static uint64_t layer_expert_bytes(const og_model *m, uint32_t l) {
    const og_layer *L = &m->layers[l];
    if (!L->moe) return 0;
    return (uint64_t)m->hp.n_ff_exp * (L->gate_exps.row_bytes + L->up_exps.row_bytes) +
           (uint64_t)m->hp.n_embd * L->down_exps.row_bytes;
}

og_status og_cpu_device_create(const og_model *m, const uint32_t *slots, og_cpu_device **out, char *err, size_t errlen) {
    *out = NULL;
    const uint32_t NL = m->hp.n_layer, E = m->hp.n_expert;
    const size_t n = (size_t)NL * E;
    og_cpu_device *d = calloc(1, sizeof *d);
    uint64_t cap = 0;
    uint32_t max_slots = 0;
    for (uint32_t l = 0; l < NL; l++) {
        uint32_t s = layer_expert_bytes(m, l) ? (slots[l] < E ? slots[l] : E) : 0;
        cap += (uint64_t)s * layer_expert_bytes(m, l);
        max_slots = s > max_slots ? s : max_slots;
    }
    if (d) {
        d->n_layer = NL;
        d->n_expert = E;
        d->capacity = cap;
        d->max_slots = max_slots;
        d->ptr = calloc(3 * n + 1, sizeof *d->ptr);
        d->layer_off = calloc(NL + 1, sizeof *d->layer_off);
        d->expert_bytes = calloc(NL + 1, sizeof *d->expert_bytes);
        d->n_slots = calloc(NL + 1, sizeof *d->n_slots);
        d->slot_of = malloc((n + 1) * sizeof *d->slot_of);
        d->expert_in = malloc(((size_t)NL * max_slots + 1) * sizeof *d->expert_in);
        d->resident = calloc(n + 1, 1);
        d->arena = cap ? malloc(cap) : NULL;
    }
    if (!d || !d->ptr || !d->layer_off || !d->expert_bytes || !d->n_slots || !d->slot_of || !d->expert_in ||
        !d->resident || (cap && !d->arena)) {
        char b[32];
        og_cpu_device_free(d);
        return og_fail(err, errlen, OG_ERR_NOMEM, "cannot allocate the cpu device's expert arena of %s",
                       og_fmt_bytes(cap, b, sizeof b));
    }
    uint64_t off = 0;
    for (uint32_t l = 0; l < NL; l++) {
        d->expert_bytes[l] = layer_expert_bytes(m, l);
        d->n_slots[l] = d->expert_bytes[l] ? (slots[l] < E ? slots[l] : E) : 0;
        d->layer_off[l] = off;
        off += (uint64_t)d->n_slots[l] * d->expert_bytes[l];
    }
    for (size_t i = 0; i < n; i++) d->slot_of[i] = -1;
    for (size_t i = 0; i < (size_t)NL * max_slots; i++) d->expert_in[i] = -1;
    d->map.gate = d->ptr;
    d->map.up = d->ptr + n;
    d->map.down = d->ptr + 2 * n;
    *out = d;
    return OG_OK;
}

/* Copies expert e of layer l into slot j and points the map at it. */
static void place(og_cpu_device *d, const og_model *m, uint32_t l, uint32_t e, uint32_t j) {
    const og_layer *L = &m->layers[l];
    const size_t n = (size_t)d->n_layer * d->n_expert, at = (size_t)l * d->n_expert + e;
    uint8_t *dst = d->arena + d->layer_off[l] + (uint64_t)j * d->expert_bytes[l];
    const og_weight *w[3] = {&L->gate_exps, &L->up_exps, &L->down_exps};
    const uint64_t rows[3] = {m->hp.n_ff_exp, m->hp.n_ff_exp, m->hp.n_embd};
    for (int k = 0; k < 3; k++) {
        const size_t bytes = (size_t)rows[k] * w[k]->row_bytes;
        memcpy(dst, (const uint8_t *)w[k]->data + (size_t)e * bytes, bytes);
        d->ptr[(size_t)k * n + at] = dst;
        dst += bytes;
        d->pcie_bytes += bytes;
    }
    d->slot_of[at] = (int32_t)j;
    d->expert_in[(size_t)l * d->max_slots + j] = (int32_t)e;
    d->resident[at] = 1;
}

static void unplace(og_cpu_device *d, uint32_t l, uint32_t e) {
    const size_t n = (size_t)d->n_layer * d->n_expert, at = (size_t)l * d->n_expert + e;
    for (int k = 0; k < 3; k++) d->ptr[(size_t)k * n + at] = NULL;
    if (d->slot_of[at] >= 0) d->expert_in[(size_t)l * d->max_slots + (size_t)d->slot_of[at]] = -1;
    d->slot_of[at] = -1;
    d->resident[at] = 0;
}

og_status og_cpu_device_load(og_cpu_device *d, const og_model *m, const uint8_t *resident, char *err, size_t errlen) {
    const uint32_t E = d->n_expert;
    for (uint32_t l = 0; l < d->n_layer; l++) {
        uint32_t want = 0;
        if (d->expert_bytes[l])
            for (uint32_t e = 0; e < E; e++) want += resident[(size_t)l * E + e] != 0;
        if (want > d->n_slots[l])
            return og_fail(err, errlen, OG_ERR_RANGE, "layer %u: %u resident experts but %u slots on the cpu device", l,
                           want, d->n_slots[l]);
    }
    d->n_resident = 0;
    for (uint32_t l = 0; l < d->n_layer; l++) {
        for (uint32_t e = 0; e < E; e++) unplace(d, l, e);
        if (!d->expert_bytes[l]) continue;
        uint32_t j = 0;
        for (uint32_t e = 0; e < E; e++)
            if (resident[(size_t)l * E + e]) {
                place(d, m, l, e, j++);
                d->n_resident++;
            }
    }
    return OG_OK;
}

og_status og_cpu_device_swap(og_cpu_device *d, const og_model *m, uint32_t l, uint32_t e_in, uint32_t e_out, char *err,
                             size_t errlen) {
    const size_t base = (size_t)l * d->n_expert;
    if (l >= d->n_layer || e_in >= d->n_expert || e_out >= d->n_expert || d->slot_of[base + e_out] < 0 ||
        d->slot_of[base + e_in] >= 0)
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "layer %u: cannot swap expert %u in for %u", l, e_in, e_out);
    uint32_t j = (uint32_t)d->slot_of[base + e_out];
    unplace(d, l, e_out); /* the slot is gone before it is overwritten */
    place(d, m, l, e_in, j);
    d->migrations++;
    return OG_OK;
}

void og_cpu_device_free(og_cpu_device *d) {
    if (!d) return;
    free(d->arena);
    free(d->ptr);
    free(d->layer_off);
    free(d->expert_bytes);
    free(d->n_slots);
    free(d->slot_of);
    free(d->expert_in);
    free(d->resident);
    free(d);
}

og_status og_migrator_create(uint32_t n_layer, uint32_t n_expert, uint32_t swaps_per_step, uint32_t min_residency,
                             double decay, og_migrator **out, char *err, size_t errlen) {
    *out = NULL;
    if (!(decay > 0 && decay < 1)) return og_fail(err, errlen, OG_ERR_INVALID_ARG, "decay %g is not in (0, 1)", decay);
    const size_t n = (size_t)n_layer * n_expert + 1;
    og_migrator *mg = calloc(1, sizeof *mg);
    if (mg) {
        *mg = (og_migrator){n_layer, n_expert, swaps_per_step, min_residency, decay, 0, calloc(n, sizeof(double)),
                            calloc(n, sizeof(uint64_t)), calloc(n, sizeof(uint64_t)), calloc(n_expert + 1, sizeof(uint32_t))};
    }
    if (!mg || !mg->score || !mg->pinned || !mg->last || !mg->delta) {
        og_migrator_free(mg);
        return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    }
    *out = mg;
    return OG_OK;
}

og_status og_migrator_step(og_migrator *mg, og_cpu_device *d, const og_model *m, const uint64_t *counts, char *err,
                           size_t errlen) {
    const uint32_t E = mg->n_expert;
    const uint64_t now = mg->step++;
    for (uint32_t l = 0; l < mg->n_layer; l++) {
        const size_t base = (size_t)l * E;
        if (!d->expert_bytes[l]) continue;
        for (uint32_t e = 0; e < E; e++) {
            mg->delta[e] = (uint32_t)(counts[base + e] - mg->last[base + e]);
            mg->last[base + e] = counts[base + e];
            mg->score[base + e] = mg->decay * mg->score[base + e] + mg->delta[e];
        }
        for (uint32_t k = 0; k < mg->swaps_per_step; k++) {
            uint32_t in, out;
            if (!og_migrator_pick(E, d->resident + base, mg->score + base, mg->pinned + base, now, NULL, &in, &out)) break;
            og_status st = og_cpu_device_swap(d, m, l, in, out, err, errlen);
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
    free(mg->delta);
    free(mg);
}
