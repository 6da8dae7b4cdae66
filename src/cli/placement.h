/* The placement side shared by `onegpu run` and `onegpu serve`: after the plan,
 * hold the resident experts on the cpu device (it plays the GPU), count expert
 * traffic and migrate; at the end, save the usage profile. */
#ifndef OG_CLI_PLACEMENT_H
#define OG_CLI_PLACEMENT_H

#include "og_moe.h"
#include "og_policy.h"

typedef struct og_cli_placement {
    og_device *device;         /* the cpu device, or NULL without --vram */
    og_expert_cache *dev;      /* its expert slots */
    og_migrator *mig;          /* NULL with --migrate 0 */
    og_expert_stats stats;     /* counts allocated when placing or profiling */
    uint8_t *resident;         /* [n_layer * n_expert] the plan's initial set */
    size_t n_le;               /* n_layer * n_expert */
} og_cli_placement;

/* The plan before anything is loaded (run and serve): --ram defaults to
 * MemAvailable capped by the cgroup limit (unknown: no limit), --profile's counts
 * read into *profile (caller frees), og_plan_make. Prints the plan's summary line
 * and returns 0; or prints "CMD: reason" and returns OG_EXIT_USAGE (a wrong
 * request, e.g. --ctx above the model's), OG_EXIT_BAD_INPUT (file, profile) or
 * OG_EXIT_REFUSED (does not fit), with nothing left allocated. */
int og_cli_plan_prepare(const char *cmd, const og_gguf *hg, const og_hparams *hp, og_plan_input *pin, bool have_ram,
                        const char *profile_path, og_plan *plan, uint64_t **profile);

/* plan: a fitting plan when vram > 0 (else nothing goes on a device); profile:
 * --profile's counts or NULL; want_stats: count traffic even without a device.
 * Prints "CMD: cpu device: ..." to stderr. Returns 0, or OG_EXIT_USAGE after
 * printing "CMD: reason" (out of memory, device budget). */
int og_cli_placement_setup(const char *cmd, const og_model *m, const og_plan *plan, const uint64_t *profile,
                           uint64_t vram, long migrate, bool want_stats, og_cli_placement *p);

/* Adds profile (may be NULL) to the counts, saturates them and writes path.
 * Returns 0 or OG_EXIT_USAGE after printing the error. */
int og_cli_placement_save_profile(const char *cmd, const og_model *m, og_cli_placement *p, const uint64_t *profile,
                                  const char *path);

void og_cli_placement_free(og_cli_placement *p);

/* The SIMD tier: $ONEGPU_CPU_ISA, else the best the CPU has (a note on AMX
 * refused is printed). Returns 0, or OG_EXIT_USAGE after printing why. */
int og_cli_choose_isa(const char *cmd, og_isa *isa);

/* A pool of `threads` workers; 0: one per CPU this process may run on. Returns 0,
 * or OG_EXIT_USAGE after printing why. */
int og_cli_pool(const char *cmd, int threads, og_pool **pool);

/* The NUMA binding of run and serve (--numa-node N). */
typedef struct og_cli_numa {
    int node;                  /* -1: no binding */
    const char *why;           /* "--numa-node", "the GPU's node" */
    int n_cpus;
    int cpus[OG_MAX_CPUS];     /* the node's CPUs this process may run on, ascending */
} og_cli_numa;

/* Before loading: the node is numa_node (>= 0, from --numa-node; run.sh passes the
 * node it bound to), else (-1) the GPU's node when sysfs knows it, else none. The
 * topology is read from $ONEGPU_SYSFS (tests: a fake tree) or /sys. Returns 0, or
 * OG_EXIT_USAGE after printing "CMD: --numa-node N: NUMA node N does not exist
 * (this machine's nodes: ...)" or that none of its CPUs is in this process's set. */
int og_cli_numa_choose(const char *cmd, long numa_node, og_cli_numa *nu);

/* After loading, instead of og_cli_pool: with a node, the calling thread (and so
 * the threads it starts later) may run on the node's CPUs, worker i of the pool
 * is pinned to its CPU i (modulo), threads 0 = one per node CPU; the thread's
 * memory policy and the routed experts' ranges of the mapped file prefer the
 * node (mbind). Prints one line "CMD: NUMA: node, CPUs, memory policy"; a pin or
 * policy the kernel refuses is said there, not a failure. Returns 0, or
 * OG_EXIT_USAGE after printing why the pool could not start. */
int og_cli_numa_pool(const char *cmd, const og_cli_numa *nu, const og_model *m, int threads, og_pool **pool);

/* --cpu-numerics fork|gpu: *gpu set; false after printing "CMD: ..." for anything else. */
bool og_cli_parse_numerics(const char *cmd, const char *arg, bool *gpu);

#endif
