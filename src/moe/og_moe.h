/* onegpu moe: the planner (budgets -> layout), usage profiles, the expert cache
 * (the device's slots), the live migrator and the dispatcher that splits a MoE
 * layer between device and host (DESIGN.md "The planner", "The seams"). */
#ifndef OG_MOE_H
#define OG_MOE_H

#include "og_device.h"
#include "og_model.h"

/* What the planner is given. Sizes in bytes. */
typedef struct og_plan_input {
    uint64_t vram;          /* device memory to plan for (free memory of the GPU, or --vram) */
    uint64_t ram;           /* host memory (MemAvailable, capped by the cgroup limit, or --ram) */
    uint64_t reserve;       /* kept free on the device (runtime, fragmentation) */
    uint32_t ctx;           /* context length per sequence, tokens */
    uint32_t parallel;      /* sequences served at once */
    uint32_t batch_tokens;  /* tokens per forward step (workspace) */
    uint32_t kv_bytes_per_elem; /* 2 (f16 cache) or 4; og_model_info.kv_elem_bytes overrides it */
    int64_t slots_override; /* -1: planner decides; -2: all; else slots per MoE layer */
    const uint64_t *profile;/* [n_layer][n_expert] selection counts from a previous run, or NULL */
} og_plan_input;

typedef struct og_plan {
    bool fits;
    char reason[1024];              /* why not, with what would make it fit: every short side (device, host) */
    /* device side */
    uint64_t nonexpert_bytes;       /* every tensor but the routed experts and the host-only ones */
    uint64_t kv_bytes;              /* parallel x (kv_elems_fixed + ceil(ctx x kv_elems_per_token)) x elem
                                       (og_model_info); a paged cache (kv_paged, deepseek2) is the engine's KV
                                       pool: kv_blocks x OG_KV_BLOCK x kv_elems_per_token x elem, i.e. ctx
                                       rounded up to whole blocks, x parallel x layers x (r_kv + d_rope) x elem */
    uint64_t kv_blocks;             /* a paged cache: the pool's blocks, parallel x ceil(ctx / OG_KV_BLOCK)
                                       (og_engine_kv_blocks, what the engine allocates); else 0 */
    uint64_t workspace_bytes;
    uint64_t min_slot_bytes;        /* n_expert_used slots in every MoE layer */
    uint64_t device_bytes;          /* all of the above + resident experts */
    /* host side */
    uint64_t routed_bytes;          /* every routed expert */
    uint64_t host_only_bytes;       /* tensors that never go to the device (og_model_info.host_only_bytes:
                                       deepseek41's Engram tables and token_embd) */
    const char *host_only_what;     /* og_model_info.host_only_what (static), or NULL */
    uint64_t staging_bytes;
    uint64_t host_bytes;
    /* the layout */
    uint32_t n_layer, n_moe_layers, n_expert, n_expert_used;
    uint64_t expert_bytes_max;      /* largest single expert (gate + up + down of one layer) */
    uint32_t *slots;                /* [n_layer] resident experts per layer (0 for dense layers) */
    uint64_t resident_experts, resident_expert_bytes;
    double predicted_device_share;  /* expected share of selections served by the device */
    uint64_t role_bytes[OG_ROLE_COUNT];
} og_plan;

/* Plans from a GGUF opened header-only (no tensor data is read). Returns OG_OK
 * with plan->fits false and a reason when the machine is too small; errors
 * only for a file that is not a supported model (og_model_describe's). The plan
 * owns plan->slots (og_plan_free). */
og_status og_plan_make(const og_gguf *g, const og_plan_input *in, og_plan *plan, char *err, size_t errlen);
void og_plan_free(og_plan *plan);

/* Largest selection count a profile holds (sums of 65536 of them stay exact). */
#define OG_PROFILE_COUNT_MAX (1ll << 40)

/* Reads a usage profile ({"layers": [{"layer": i, "counts": [...]}, ...]}) into
 * counts[n_layer][n_expert] (malloc'ed). Errors name the file and what is wrong. */
og_status og_profile_read(const char *path, uint32_t n_layer, uint32_t n_expert, uint64_t **counts, char *err,
                          size_t errlen);

/* Writes counts[n_layer][n_expert] as a usage profile (the format
 * og_profile_read reads; layers without selections are left out), atomically:
 * a temporary file in the same directory, then rename. */
og_status og_profile_write(const char *path, uint32_t n_layer, uint32_t n_expert, const uint64_t *counts, char *err,
                           size_t errlen);

/* The initial hot set of a plan: resident[n_layer][n_expert] (caller's array)
 * gets 1 for the plan->slots[l] experts of layer l with the most selections in
 * profile (ties and no profile: lower index first), 0 elsewhere. Errors: OG_ERR_NOMEM. */
og_status og_plan_resident(const og_plan *plan, const uint64_t *profile, uint8_t *resident);

/* The expert cache: the device's expert slots. Layer l has slots[l] slots in
 * one device allocation (each: one expert's gate, up and down rows as in the
 * file). Copies go through the device interface on the cache's own stream; a
 * slot is published (og_expert_cache_slot finds it, counted resident) only once
 * its copy completed (og_expert_cache_poll), so the forward pass never waits on
 * a migration and never reads a half-copied expert; and a copy into a slot
 * starts only after the last op that read it (og_expert_cache_note_read), so a
 * queued op never reads an expert that changed under it. With the `cpu` device
 * this makes placement and migration real and measurable without a card. */
typedef struct og_expert_cache {
    og_device *dev;           /* not owned */
    uint8_t *arena;           /* device memory */
    uint64_t capacity;        /* bytes */
    uint64_t n_resident, migrations;
    uint32_t n_layer, n_expert;
    uint64_t *layer_off;      /* [n_layer] first slot's offset in the arena */
    uint64_t *expert_bytes;   /* [n_layer] bytes of one expert (0: dense layer) */
    uint64_t *gate_bytes, *up_bytes; /* [n_layer] its gate and up parts (down follows) */
    uint32_t *n_slots;        /* [n_layer] */
    int32_t *slot_of;         /* [n_layer][n_expert] slot holding or receiving the expert, or -1 */
    int32_t *expert_in;       /* [n_layer][max_slots] expert in (or on its way to) the slot, or -1 */
    og_event *pending;        /* [n_layer][max_slots] copy in flight, 0 when published */
    og_event *last_read;      /* [n_layer][max_slots] event of the last op issued that reads the slot, or 0 */
    og_stream *stream;        /* the copies' stream (NULL without slots) */
    uint32_t max_slots, n_pending;
    uint8_t *resident;        /* [n_layer][n_expert] 1 = usable on the device (for og_expert_stats) */
    uint8_t *occupied;        /* [n_layer][n_expert] 1 = in a slot, usable or arriving */
} og_expert_cache;

/* Allocates slots[l] slots per MoE layer on dev (nothing resident yet).
 * Errors: the device's OG_ERR_NOMEM (with the sizes). */
og_status og_expert_cache_create(const og_model *m, const uint32_t *slots, og_device *dev, og_expert_cache **out,
                                 char *err, size_t errlen);

/* Makes exactly the experts with resident[l * n_expert + e] != 0 resident,
 * copying them into the layer's slots in expert order and waiting for the
 * copies (start-up, not the forward path). Errors: OG_ERR_RANGE when a layer
 * has more than its slots (nothing changes then); the device's copy errors. */
og_status og_expert_cache_load(og_expert_cache *c, const og_model *m, const uint8_t *resident, char *err,
                               size_t errlen);

/* Migration: expert e_out of layer l leaves the device at once (its slot is
 * overwritten) and the copy of e_in into that slot starts; e_in becomes usable
 * when a later og_expert_cache_poll sees the copy complete. Errors:
 * OG_ERR_INVALID_ARG when e_out is not resident or e_in is resident or arriving. */
og_status og_expert_cache_swap(og_expert_cache *c, const og_model *m, uint32_t l, uint32_t e_in, uint32_t e_out,
                               char *err, size_t errlen);

/* Publishes every slot whose copy completed; returns how many are still in flight. */
uint32_t og_expert_cache_poll(og_expert_cache *c);
/* Waits (host wait on each copy's event) for every copy in flight, then
 * publishes them. Errors: the device's (a failed copy stays unpublished). */
og_status og_expert_cache_settle(og_expert_cache *c, char *err, size_t errlen);

/* The slot holding expert e of layer l, usable now (its copy published), or -1
 * (not resident, arriving, a dense layer, or l / e out of range). Never fails. */
int32_t og_expert_cache_slot(const og_expert_cache *c, uint32_t l, uint32_t e);

/* Layer l's slots as the device's expert op takes them (og_expert_slots: arena
 * address, slot size, the three matrices' layout). Errors: OG_ERR_INVALID_ARG
 * for a layer without slots. */
og_status og_expert_cache_slots(const og_expert_cache *c, const og_model *m, uint32_t l, og_expert_slots *out);

/* Records that work issued before ev reads slot `slot` of layer l: the next copy
 * into that slot waits for ev on the device. Out-of-range slots are ignored. */
void og_expert_cache_note_read(og_expert_cache *c, uint32_t l, int32_t slot, og_event ev);
void og_expert_cache_free(og_expert_cache *c);

/* The live migrator (decayed-frequency policy, og_policy.h's rule): after each
 * forward step it publishes completed copies, reads the selection counts the
 * step added, decays and adds them into per-expert scores, and starts at most
 * swaps_per_step copies per layer, an expert copied in staying min_residency
 * steps. */
typedef struct og_migrator {
    uint32_t n_layer, n_expert, swaps_per_step, min_residency;
    double decay;
    uint64_t step;
    double *score;       /* [n_layer][n_expert] */
    uint64_t *pinned;    /* [n_layer][n_expert] step until which it stays */
    uint64_t *last;      /* [n_layer][n_expert] counts seen at the previous step */
} og_migrator;

/* Errors: OG_ERR_NOMEM; OG_ERR_INVALID_ARG for decay outside (0, 1). */
og_status og_migrator_create(uint32_t n_layer, uint32_t n_expert, uint32_t swaps_per_step, uint32_t min_residency,
                             double decay, og_migrator **out, char *err, size_t errlen);
/* counts: the og_expert_stats counts (cumulative). Returns the swap's error, if any. */
og_status og_migrator_step(og_migrator *mg, og_expert_cache *c, const og_model *m, const uint64_t *counts, char *err,
                           size_t errlen);
void og_migrator_free(og_migrator *mg);

/* ---- the dispatcher (DESIGN.md "The seams") ---- */

/* Implements og_dispatch_type for the forward pass. Per MoE layer: the routes
 * are grouped by expert; the routes of resident experts (og_expert_cache_slot)
 * go to the device (their rows uploaded, the expert op issued grouped by expert
 * on the dispatcher's stream, the results copied back, an event recorded), the
 * cold experts and the shared expert run on the host pool meanwhile, then the
 * dispatcher waits on the event and sums every token's outputs in route order
 * (shared expert first), so where an expert ran never changes the order of a
 * sum. Resident experts compute with rc->device_numerics, cold ones with
 * rc->host_numerics (rows marked exact: canonical); the shared expert with
 * OG_NUMERICS_FORK on the host (until the forward pass runs on the device). */
typedef struct og_dispatch og_dispatch;

/* What the dispatcher reports to a test hook, in order, per MoE layer with
 * device work: OG_DISPATCH_DEVICE_ISSUED (the device part is queued), then
 * OG_DISPATCH_HOST_DONE (the host part finished), then OG_DISPATCH_DEVICE_DONE
 * (the event waited on). Layers without device work report only HOST_DONE. */
typedef enum og_dispatch_point {
    OG_DISPATCH_DEVICE_ISSUED = 0,
    OG_DISPATCH_HOST_DONE,
    OG_DISPATCH_DEVICE_DONE,
} og_dispatch_point;
typedef void (*og_dispatch_hook)(void *ctx, uint32_t layer, og_dispatch_point at);

/* dev and cache: both NULL (host only: every expert on the host pool) or the
 * device and its expert cache (cache->dev == dev). The dispatcher keeps its
 * per-layer buffers (the sorted routes, the gathered rows and results, the
 * jobs, the host experts' workspace, the device rows) from call to call,
 * grown when a layer needs more: a layer no larger than one before allocates
 * nothing. One layer at a time per dispatcher (the forward calls of one run
 * context). Errors: OG_ERR_INVALID_ARG, OG_ERR_NOMEM, the device's stream
 * creation. */
og_status og_dispatch_create(og_device *dev, og_expert_cache *cache, og_dispatch **out, char *err, size_t errlen);
/* The table to put in og_run_ctx.dispatch; valid while d lives. */
const og_dispatcher *og_dispatch_table(const og_dispatch *d);
/* Test hook (NULL clears): called on the forward pass's thread. */
void og_dispatch_set_hook(og_dispatch *d, og_dispatch_hook fn, void *ctx);
/* Waits for the dispatcher's device work and frees it; NULL is fine. */
void og_dispatch_free(og_dispatch *d);

#endif
