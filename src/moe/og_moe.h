/* onegpu moe: the planner (budgets -> layout) for now; residency, traffic
 * statistics, migration and the device/host dispatcher come next (DESIGN.md
 * "The planner", issue "The heart"). */
#ifndef OG_MOE_H
#define OG_MOE_H

#include "og_model.h"

/* What the planner is given. Sizes in bytes. */
typedef struct og_plan_input {
    uint64_t vram;          /* device memory to plan for (free memory of the GPU, or --vram) */
    uint64_t ram;           /* host memory (MemAvailable, capped by the cgroup limit, or --ram) */
    uint64_t reserve;       /* kept free on the device (runtime, fragmentation) */
    uint32_t ctx;           /* context length per sequence, tokens */
    uint32_t parallel;      /* sequences served at once */
    uint32_t batch_tokens;  /* tokens per forward step (workspace) */
    uint32_t kv_bytes_per_elem; /* 2 (f16 cache) or 4 */
    int64_t slots_override; /* -1: planner decides; -2: all; else slots per MoE layer */
    const uint64_t *profile;/* [n_layer][n_expert] selection counts from a previous run, or NULL */
} og_plan_input;

typedef struct og_plan {
    bool fits;
    char reason[512];               /* why not, with what would make it fit */
    /* device side */
    uint64_t nonexpert_bytes;       /* every tensor but the routed experts */
    uint64_t kv_bytes;              /* ctx x parallel x layers x (r_kv + d_rope) x elem */
    uint64_t workspace_bytes;
    uint64_t min_slot_bytes;        /* n_expert_used slots in every MoE layer */
    uint64_t device_bytes;          /* all of the above + resident experts */
    /* host side */
    uint64_t routed_bytes;          /* every routed expert */
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
 * only for a file that is not a supported model (og_hparams_read's). The plan
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
 * profile (ties and no profile: lower index first), 0 elsewhere. */
void og_plan_resident(const og_plan *plan, const uint64_t *profile, uint8_t *resident);

/* The `cpu` device: plays the GPU when there is none (DESIGN.md "The device
 * without a GPU"). Layer l has slots[l] expert slots in a separate arena (one
 * expert's gate, up and down rows each, as in the file); every byte copied in is
 * counted as a PCIe byte, so placement and migration are real, measurable and
 * testable without a card. Copies are synchronous here: a slot is usable as soon
 * as og_cpu_device_swap returns. */
typedef struct og_cpu_device {
    uint8_t *arena;
    uint64_t capacity;        /* bytes */
    uint64_t pcie_bytes;      /* host -> device bytes copied so far */
    uint64_t n_resident, migrations;
    uint32_t n_layer, n_expert;
    uint64_t *layer_off;      /* [n_layer] first slot's offset in the arena */
    uint64_t *expert_bytes;   /* [n_layer] bytes of one expert (0: dense layer) */
    uint32_t *n_slots;        /* [n_layer] */
    int32_t *slot_of;         /* [n_layer][n_expert] slot holding the expert, or -1 */
    int32_t *expert_in;       /* [n_layer][max slots] expert in the slot, or -1 */
    uint32_t max_slots;
    uint8_t *resident;        /* [n_layer][n_expert] 1 = in a slot (for og_expert_stats) */
    const void **ptr;         /* [3][n_layer * n_expert]: gate, up, down in the arena or NULL */
    og_expert_map map;        /* views of ptr for og_run_ctx.experts */
} og_cpu_device;

/* Arena with slots[l] slots per layer for model m's experts (nothing resident
 * yet). Errors: OG_ERR_NOMEM (the message gives the size). */
og_status og_cpu_device_create(const og_model *m, const uint32_t *slots, og_cpu_device **out, char *err, size_t errlen);

/* Makes exactly the experts with resident[l * n_expert + e] != 0 resident,
 * copying them into the layer's slots in expert order. Errors: OG_ERR_RANGE when
 * a layer has more than its slots (nothing changes then). */
og_status og_cpu_device_load(og_cpu_device *d, const og_model *m, const uint8_t *resident, char *err, size_t errlen);

/* Migration: copies expert e_in of layer l into the slot of resident expert
 * e_out, which leaves the device. Errors: OG_ERR_INVALID_ARG when e_out is not
 * resident or e_in already is. */
og_status og_cpu_device_swap(og_cpu_device *d, const og_model *m, uint32_t l, uint32_t e_in, uint32_t e_out, char *err,
                             size_t errlen);
void og_cpu_device_free(og_cpu_device *d);

/* The live migrator (decayed-frequency policy, og_policy.h's rule): after each
 * forward step it reads the selection counts the step added, decays and adds
 * them into per-expert scores, and swaps at most swaps_per_step experts per
 * layer into the device, an expert copied in staying min_residency steps. */
typedef struct og_migrator {
    uint32_t n_layer, n_expert, swaps_per_step, min_residency;
    double decay;
    uint64_t step;
    double *score;       /* [n_layer][n_expert] */
    uint64_t *pinned;    /* [n_layer][n_expert] step until which it stays */
    uint64_t *last;      /* [n_layer][n_expert] counts seen at the previous step */
    uint32_t *delta;     /* [n_expert] scratch */
} og_migrator;

/* Errors: OG_ERR_NOMEM; OG_ERR_INVALID_ARG for decay outside (0, 1). */
og_status og_migrator_create(uint32_t n_layer, uint32_t n_expert, uint32_t swaps_per_step, uint32_t min_residency,
                             double decay, og_migrator **out, char *err, size_t errlen);
/* counts: the og_expert_stats counts (cumulative). Returns the swap's error, if any. */
og_status og_migrator_step(og_migrator *mg, og_cpu_device *d, const og_model *m, const uint64_t *counts, char *err,
                           size_t errlen);
void og_migrator_free(og_migrator *mg);

#endif
