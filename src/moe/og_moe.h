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

/* Reads a usage profile ({"layers": [{"layer": i, "counts": [...]}, ...]}) into
 * counts[n_layer][n_expert] (malloc'ed). Errors name the file and what is wrong. */
og_status og_profile_read(const char *path, uint32_t n_layer, uint32_t n_expert, uint64_t **counts, char *err,
                          size_t errlen);

#endif
