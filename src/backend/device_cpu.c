/* The `cpu` device: device memory is host memory under a budget, so budgets,
 * residency and PCIe traffic behave as on a card (DESIGN.md "The device without
 * a GPU"). Each block carries its size in a 64-byte header. */
#include "og_device.h"

#include <stdlib.h>
#include <string.h>

typedef struct cpu_device {
    og_device base;
    uint64_t budget, used;
    uint64_t next_event;
} cpu_device;

#define HDR 64

static og_status cpu_mem_info(og_device *d, uint64_t *free_bytes, uint64_t *total_bytes) {
    cpu_device *c = (cpu_device *)d;
    *free_bytes = c->budget - c->used;
    *total_bytes = c->budget;
    return OG_OK;
}

static og_status cpu_alloc(og_device *d, uint64_t bytes, void **out, char *err, size_t errlen) {
    cpu_device *c = (cpu_device *)d;
    *out = NULL;
    char a[32], b[32], u[32];
    if (bytes > c->budget - c->used)
        return og_fail(err, errlen, OG_ERR_NOMEM, "cpu device: %s asked, %s of its %s in use",
                       og_fmt_bytes(bytes, a, sizeof a), og_fmt_bytes(c->used, u, sizeof u),
                       og_fmt_bytes(c->budget, b, sizeof b));
    uint8_t *p = aligned_alloc(64, (size_t)((bytes + HDR + 63) / 64 * 64));
    if (!p) return og_fail(err, errlen, OG_ERR_NOMEM, "cpu device: the host has no %s", og_fmt_bytes(bytes, a, sizeof a));
    memcpy(p, &bytes, sizeof bytes);
    c->used += bytes;
    *out = p + HDR;
    return OG_OK;
}

static void cpu_free(og_device *d, void *ptr) {
    if (!ptr) return;
    cpu_device *c = (cpu_device *)d;
    uint8_t *p = (uint8_t *)ptr - HDR;
    uint64_t bytes;
    memcpy(&bytes, p, sizeof bytes);
    c->used -= bytes;
    free(p);
}

static og_status cpu_copy(og_device *d, void *dst, const void *src, uint64_t bytes, og_event *ev, char *err,
                          size_t errlen) {
    (void)err, (void)errlen;
    cpu_device *c = (cpu_device *)d;
    memcpy(dst, src, (size_t)bytes);
    d->pcie_bytes += bytes;
    *ev = ++c->next_event;
    return OG_OK;
}

static bool cpu_event_done(og_device *d, og_event ev) {
    return ev <= ((cpu_device *)d)->next_event; /* synchronous copies */
}

static void cpu_destroy(og_device *d) { free(d); }

static const og_device_ops cpu_ops = {"cpu", cpu_mem_info, cpu_alloc, cpu_free, cpu_copy, cpu_event_done, cpu_destroy};

og_status og_device_cpu_create(uint64_t budget, og_device **out, char *err, size_t errlen) {
    cpu_device *c = calloc(1, sizeof *c);
    *out = NULL;
    if (!c) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    c->base.ops = &cpu_ops;
    c->budget = budget;
    *out = &c->base;
    return OG_OK;
}
