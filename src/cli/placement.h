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
    og_dispatch *dispatch;     /* the forward pass's dispatcher (host only without a device) */
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
 * --profile's counts or NULL; want_stats: count traffic even without a device;
 * kern: the kernels the cpu device computes with; device_threads: its threads
 * (0: og_device_cpu_default_threads). Always sets p->dispatch.
 * Prints "CMD: cpu device: ..." to stderr. Returns 0, or OG_EXIT_USAGE after
 * printing "CMD: reason" (out of memory, device budget). */
int og_cli_placement_setup(const char *cmd, const og_model *m, const og_plan *plan, const uint64_t *profile,
                           uint64_t vram, long migrate, bool want_stats, const og_kernels *kern, int device_threads,
                           og_cli_placement *p);

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

/* --cpu-numerics fork|gpu: *gpu set; false after printing "CMD: ..." for anything else. */
bool og_cli_parse_numerics(const char *cmd, const char *arg, bool *gpu);

#endif
