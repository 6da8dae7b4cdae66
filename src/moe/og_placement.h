/* Placement (DESIGN.md "The seams"): one object that owns what decides where a
 * routed expert runs: the device handle, its expert slots (og_expert_cache,
 * addressed by slot index), the live migrator and the traffic counters. Built
 * from a plan and the flags; the engine binds it into its run context, calls
 * og_placement_step between forward steps and og_placement_idle when it has
 * nothing to run, and reads the counters only through the accessors here.
 *
 * Threads: one at a time. The forward pass adds to the counters and the
 * migrator rewrites slots, so every call below comes from the thread that runs
 * the forward steps (the engine's scheduler), or after it stopped. */
#ifndef OG_PLACEMENT_H
#define OG_PLACEMENT_H

#include "og_moe.h"

typedef struct og_placement og_placement;

typedef struct og_placement_config {
    uint64_t vram;           /* bytes of device memory; 0: no device (every expert on the host). With
                                no GPU backend the `cpu` device plays one of this budget */
    const og_plan *plan;     /* a fitting plan of this model (slots per layer); required when vram > 0 */
    const uint64_t *profile; /* [n_layer][n_expert] selection counts that rank the initial hot set, or
                                NULL (lower index first); read at create only */
    uint32_t migrate;        /* experts per MoE layer copied in per step; 0: the planned set stays */
    uint32_t min_residency;  /* steps an expert copied in stays before it may leave */
    double decay;            /* the decayed-frequency score's factor per step, in (0, 1) */
    bool count;              /* count selections without a device too (profiles, traces) */
    const og_kernels *kern;  /* what the device computes with (required with vram > 0; outlives the placement) */
    int device_threads;      /* the cpu device's threads; 0: og_device_cpu_default_threads() */
    bool forward_on_device;  /* the forward pass's own ops (attention, router, norms, head) on the device's
                                stream too, the non-expert weights counted in its budget; false (the default
                                while the CPU plays the device): they run on the host device, on the host pool */
    og_device *device;       /* a device the caller made (the cuda device), used instead of the cpu one when
                                vram > 0; NULL: the cpu device. Owned by the placement from og_placement_create
                                on, also when it fails (then destroyed) or when vram is 0 (unused: destroyed) */
    bool copy_weights;       /* a test mode of the cpu device with forward_on_device: the non-expert weights
                                are copied into its memory and looked up there (og_dev_weights), as on a GPU,
                                instead of used in place; the same bits either way */
    bool pin;                /* with a cuda device: pin the routed experts' host ranges for DMA
                                (og_device_cuda_host_register); a refusal is noted in the stats, not an error */
} og_placement_config;

/* The defaults run and serve use: no device, --migrate 2, 8-step residency,
 * decay 0.85, no counting. */
og_placement_config og_placement_defaults(void);

/* Creates the dispatcher (always), the device (vram > 0), its slots (plan->slots[l] per MoE layer), loads
 * the initial hot set (og_plan_resident: the profile's top experts) and waiting
 * for those copies, and the migrator (migrate > 0). Counts selections whenever
 * there is a device or cfg->count. Errors: OG_ERR_INVALID_ARG (vram without a
 * fitting plan, a plan of another shape, decay outside (0, 1)), OG_ERR_NOMEM,
 * the device's errors (its budget, with the sizes). */
og_status og_placement_create(const og_model *m, const og_placement_config *cfg, og_placement **out, char *err,
                              size_t errlen);
void og_placement_free(og_placement *p);

/* Points rc->stats at the counters (NULL when not counting), rc->dispatch at
 * the placement's dispatcher (device and host pool together; host only without
 * a device) and, with forward_on_device, rc->dev / rc->stream at the device
 * and the stream the forward pass's ops run on (else NULL: a host device per
 * call); the cpu device then uses the mapped non-expert weights in place and
 * counts their bytes (og_plan.nonexpert_bytes) in its budget. Cannot fail: it
 * only assigns. */
void og_placement_bind(og_placement *p, og_run_ctx *rc);

/* Between forward steps: publishes the copies that completed, then lets the
 * migrator move the hot set by the selections the step added. A failed copy
 * stops migration for good (the slots stay as they were, so serving goes on)
 * and returns the device's error once; later steps return OG_OK. */
og_status og_placement_step(og_placement *p, char *err, size_t errlen);

/* At rest (nothing to run): waits for the copies still in flight (host waits on
 * their events: at rest nothing else needs the thread) and publishes them, so
 * the resident count reaches the plan without another step. Returns the copies
 * still in flight after that (0 without a device; a copy the device failed
 * stays unpublished). Never fails. */
uint32_t og_placement_idle(og_placement *p);

/* The counters as of now (DESIGN.md "Placement"). */
typedef struct og_placement_stats {
    bool device;               /* a device holds experts (else only the selection counts are kept) */
    bool counting;             /* selections are counted */
    uint64_t selections;       /* (token, expert) selections routed so far */
    uint64_t hits;             /* of those, to experts usable on the device */
    double hit_rate;           /* hits / selections; 0 before the first selection */
    uint64_t migrations;       /* experts copied in by the migrator */
    uint64_t pcie_bytes;       /* host -> device bytes copied (the initial set included) */
    uint64_t resident_experts; /* experts usable in device slots now */
    uint64_t planned_experts;  /* experts the initial set put there (what resident returns to at rest) */
    uint32_t in_flight;        /* copies started and not yet published */
    uint64_t pinned_bytes;     /* host expert bytes pinned for the device's DMA (cfg.pin) */
    uint64_t expert_host_bytes;/* the routed experts' host bytes (what pinning covers at most) */
    const char *pin_error;     /* why pinning stopped, or NULL; the placement's */
    bool forward_on_device;    /* the forward pass's own ops run on the device's stream */
    uint64_t weight_bytes;     /* of the non-expert weights: bytes copied into device memory (0: used in place) */
} og_placement_stats;

/* Fills *out (all zero for p NULL). Cannot fail: it only reads. */
void og_placement_get_stats(const og_placement *p, og_placement_stats *out);

/* Per layer: routes[l] selections and hits[l] of them on the device, for l <
 * n_layer (dense layers stay 0). Errors: OG_ERR_STATE without a device. */
og_status og_placement_layer_hits(const og_placement *p, uint64_t *routes, uint64_t *hits, uint32_t n_layer);

/* [n_layer][n_expert] selections so far, or NULL when not counting. */
const uint64_t *og_placement_counts(const og_placement *p);

/* The device's expert slots (a dispatcher asks them for an expert's slot:
 * slot_of[l * n_expert + e], usable when resident[...]), or NULL without a
 * device. The cache stays the placement's. */
og_expert_cache *og_placement_cache(og_placement *p);
/* Where expert e of layer l is usable now: its slot index in the layer's
 * device allocation (og_expert_cache.layer_off[l] + slot x expert_bytes[l]), or
 * -1 when it runs on the host (not resident, its copy still in flight, no
 * device, or l / e out of range). */
int32_t og_placement_slot(const og_placement *p, uint32_t l, uint32_t e);

/* The device, or NULL without one. Stays the placement's. */
og_device *og_placement_device(og_placement *p);

/* Writes the counts plus add[n_layer][n_expert] (may be NULL) as a usage
 * profile (og_profile_write), each count saturated at OG_PROFILE_COUNT_MAX.
 * Errors: OG_ERR_STATE when not counting, OG_ERR_NOMEM, the write's. */
og_status og_placement_save_profile(const og_placement *p, const uint64_t *add, const char *path, char *err,
                                    size_t errlen);

#endif
