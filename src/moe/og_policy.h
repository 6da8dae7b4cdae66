/* Hot-set policies and the migrator that applies them, simulated on routing
 * traces (issue "The heart": LRU, decayed frequency, a static profile and the
 * offline oracle compared on the same trace). The same migrator rules will drive
 * the live device: between forward steps at most `swaps_per_step` experts per
 * layer are copied in, each evicting the resident expert with the lowest score,
 * only when the newcomer's score is higher; a copied expert is usable only after
 * `copy_delay_steps` steps (the forward pass never waits on a copy) and is not
 * evicted again for `min_residency` steps (hysteresis: no ping-pong). */
#ifndef OG_POLICY_H
#define OG_POLICY_H

#include "og_base.h"

/* A routing trace: for each step (one forward call), layer and token, the k
 * experts the router chose. Steps are batches of tokens_per_step tokens. */
typedef struct og_trace {
    uint32_t n_layer, n_expert, k, n_step, tokens_per_step;
    uint16_t *sel; /* [n_step][n_layer][tokens_per_step][k] */
} og_trace;

/* Synthetic traces with the two properties public routing measurements show:
 * weak static skew (global popularity ~ Zipf(skew) over a per-layer random
 * permutation of experts) and strong temporal locality (each of the
 * tokens_per_step sequences re-picks, with probability locality, one of the
 * experts it used in the last `window` steps; every `phase` steps a sequence
 * changes topic and forgets them). Deterministic in the seeds. */
typedef struct og_trace_params {
    uint32_t n_layer, n_expert, k, n_step, tokens_per_step;
    double skew, locality;
    uint32_t window, phase;
    uint64_t seed;       /* the traffic */
    uint64_t model_seed; /* which experts are popular (a property of the model: keep it to
                            replay "another run of the same model") */
} og_trace_params;

/* Errors: OG_ERR_INVALID_ARG (k > n_expert, n_expert > 65536, zero sizes),
 * OG_ERR_NOMEM. og_trace_free releases sel. */
og_status og_trace_synth(const og_trace_params *p, og_trace *out, char *err, size_t errlen);
void og_trace_free(og_trace *t);

/* Trace files (JSON): {"n_layer": L, "n_expert": E, "k": K, "tokens_per_step": T,
 * "sel": [n_step * L * T * K expert ids]}, written atomically. Reading checks
 * every field and id; errors name the file and what is wrong (OG_ERR_FORMAT,
 * OG_ERR_IO, OG_ERR_NOMEM). */
og_status og_trace_write(const char *path, const og_trace *t, char *err, size_t errlen);
og_status og_trace_read(const char *path, og_trace *out, char *err, size_t errlen);

typedef enum og_policy_kind {
    OG_POLICY_LRU,    /* score = last step the expert was selected */
    OG_POLICY_DECAY,  /* score = decay * score + selections this step (frequency and recency) */
    OG_POLICY_STATIC, /* score = the profile's count; the initial set never changes */
    OG_POLICY_ORACLE, /* offline (Belady's MIN): fetches on demand (only experts the step
                         just selected), keeps those used soonest; knows the future */
    OG_POLICY_COUNT
} og_policy_kind;
const char *og_policy_name(og_policy_kind k);
/* "lru", "decay", "static", "oracle" -> kind; -1 if unknown. */
int og_policy_parse(const char *name);

typedef struct og_migrator_params {
    uint32_t slots_per_layer;
    uint32_t swaps_per_step;   /* per layer; the PCIe byte budget divided by expert bytes */
    uint32_t copy_delay_steps; /* a copy lands this many steps after the decision (>= 0) */
    uint32_t min_residency;    /* steps before a newly copied expert may be evicted */
    double decay;              /* OG_POLICY_DECAY's factor per step, in (0, 1) */
} og_migrator_params;

typedef struct og_sim_result {
    double device_share;  /* selections served by usable resident experts / all selections */
    uint64_t selections, hits, migrations;
} og_sim_result;

/* The migrator's rule, shared by the simulator and the live device: the
 * non-resident expert with the highest score (when demand is given, only those
 * with demand[e] > 0) replaces the resident one with the lowest score among
 * those with pinned[e] <= now, if its score is strictly higher. Returns false
 * when no swap is worth it; else *in and *out. */
bool og_migrator_pick(uint32_t n_expert, const uint8_t *resident, const double *score, const uint64_t *pinned,
                      uint64_t now, const uint32_t *demand, uint32_t *in, uint32_t *out);

/* resident[e] = 1 for the S experts with the most counts (ties and counts NULL:
 * lower index first), 0 for the others; O(E log E). Errors: OG_ERR_NOMEM. */
og_status og_hot_set(uint32_t n_expert, uint32_t slots, const uint64_t *counts, uint8_t *resident);

/* Replays trace t under policy kind. The initial hot set is the profile's top
 * slots per layer (profile: [n_layer][n_expert] counts, e.g. the trace's own
 * totals for a static policy; NULL: experts 0..slots-1). Errors:
 * OG_ERR_INVALID_ARG (slots > n_expert), OG_ERR_NOMEM. */
og_status og_policy_simulate(const og_trace *t, og_policy_kind kind, const og_migrator_params *mp,
                             const uint64_t *profile, og_sim_result *out, char *err, size_t errlen);

#endif
