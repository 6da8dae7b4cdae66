/* The `cpu` device: a separate arena standing in for device memory, so the
 * planner's budgets, the resident set and its PCIe traffic are real on a
 * machine without a GPU. */
#include "og_moe.h"

#include <stdlib.h>
#include <string.h>

og_status og_cpu_device_create(const og_model *m, uint64_t capacity, og_cpu_device **out, char *err, size_t errlen) {
    *out = NULL;
    og_cpu_device *d = calloc(1, sizeof *d);
    const size_t n = (size_t)m->hp.n_layer * m->hp.n_expert;
    if (d) {
        d->n_layer = m->hp.n_layer;
        d->n_expert = m->hp.n_expert;
        d->capacity = capacity;
        d->ptr = calloc(3 * n + 1, sizeof *d->ptr);
        d->arena = capacity ? malloc(capacity) : NULL;
    }
    if (!d || !d->ptr || (capacity && !d->arena)) {
        char b[32];
        og_cpu_device_free(d);
        return og_fail(err, errlen, OG_ERR_NOMEM, "cannot allocate the cpu device's expert arena of %s",
                       og_fmt_bytes(capacity, b, sizeof b));
    }
    d->map.gate = d->ptr;
    d->map.up = d->ptr + n;
    d->map.down = d->ptr + 2 * n;
    *out = d;
    return OG_OK;
}

og_status og_cpu_device_load(og_cpu_device *d, const og_model *m, const uint8_t *resident, char *err, size_t errlen) {
    const uint32_t E = m->hp.n_expert;
    const size_t n = (size_t)m->hp.n_layer * E;
    memset(d->ptr, 0, 3 * n * sizeof *d->ptr);
    d->used = 0;
    d->n_resident = 0;
    uint64_t need = 0;
    for (uint32_t l = 0; l < m->hp.n_layer; l++) {
        const og_layer *L = &m->layers[l];
        if (!L->moe) continue;
        for (uint32_t e = 0; e < E; e++)
            if (resident[(size_t)l * E + e])
                need += (uint64_t)m->hp.n_ff_exp * (L->gate_exps.row_bytes + L->up_exps.row_bytes) +
                        (uint64_t)m->hp.n_embd * L->down_exps.row_bytes;
    }
    if (need > d->capacity) {
        char a[32], b[32];
        return og_fail(err, errlen, OG_ERR_RANGE, "the resident experts need %s but the cpu device holds %s",
                       og_fmt_bytes(need, a, sizeof a), og_fmt_bytes(d->capacity, b, sizeof b));
    }
    for (uint32_t l = 0; l < m->hp.n_layer; l++) {
        const og_layer *L = &m->layers[l];
        if (!L->moe) continue;
        for (uint32_t e = 0; e < E; e++) {
            const size_t at = (size_t)l * E + e;
            if (!resident[at]) continue;
            const og_weight *w[3] = {&L->gate_exps, &L->up_exps, &L->down_exps};
            const uint64_t rows[3] = {m->hp.n_ff_exp, m->hp.n_ff_exp, m->hp.n_embd};
            for (int k = 0; k < 3; k++) {
                const size_t bytes = (size_t)rows[k] * w[k]->row_bytes;
                uint8_t *dst = d->arena + d->used;
                memcpy(dst, (const uint8_t *)w[k]->data + (size_t)e * bytes, bytes);
                d->ptr[(size_t)k * n + at] = dst;
                d->used += bytes;
                d->pcie_bytes += bytes;
            }
            d->n_resident++;
        }
    }
    return OG_OK;
}

void og_cpu_device_free(og_cpu_device *d) {
    if (!d) return;
    free(d->arena);
    free(d->ptr);
    free(d);
}
