/* The device interface: what the engine needs from the accelerator that holds
 * the hot experts (issue "The heart"). Two implementations: `cpu` here (always
 * available: plays the device when there is no GPU, in a separate budgeted
 * allocation, every copy counted as PCIe bytes) and `cuda` (its own issue).
 * Copies are asynchronous in the interface: a copy returns an event, and the
 * data may be used only once og_device_event_done says so. */
#ifndef OG_DEVICE_H
#define OG_DEVICE_H

#include "og_base.h"

typedef struct og_device og_device;
typedef uint64_t og_event; /* 0: no event (already complete) */

typedef struct og_device_ops {
    const char *name;
    /* free and total device memory, bytes */
    og_status (*mem_info)(og_device *d, uint64_t *free_bytes, uint64_t *total_bytes);
    /* bytes of device memory, 64-byte aligned; OG_ERR_NOMEM with the sizes when it does not fit */
    og_status (*alloc)(og_device *d, uint64_t bytes, void **out, char *err, size_t errlen);
    void (*free)(og_device *d, void *p);
    /* starts copying bytes from host src to device dst; *ev completes when done */
    og_status (*copy_to_device)(og_device *d, void *dst, const void *src, uint64_t bytes, og_event *ev, char *err,
                                size_t errlen);
    bool (*event_done)(og_device *d, og_event ev);
    void (*destroy)(og_device *d);
} og_device_ops;

struct og_device {
    const og_device_ops *ops;
    uint64_t pcie_bytes; /* host -> device bytes copied so far */
};

/* The `cpu` device with budget bytes of "device memory" (allocated on demand,
 * refused beyond the budget). Copies complete at once (memcpy). Errors: OG_ERR_NOMEM. */
og_status og_device_cpu_create(uint64_t budget, og_device **out, char *err, size_t errlen);

static inline void og_device_destroy(og_device *d) {
    if (d) d->ops->destroy(d);
}

#endif
