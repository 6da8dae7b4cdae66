/* See placement.h. */
#include "placement.h"

#include "cli.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

int og_cli_choose_isa(const char *cmd, og_isa *isa) {
    og_cpu_features feat;
    og_cpu_detect(&feat);
    char note[256], err[512];
    if (og_isa_choose(&feat, getenv("ONEGPU_CPU_ISA"), isa, note, sizeof note, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", cmd, err);
        return OG_EXIT_USAGE;
    }
    if (note[0]) fprintf(stderr, "%s: %s\n", cmd, note);
    return OG_EXIT_OK;
}

int og_cli_pool(const char *cmd, int threads, og_pool **pool) {
    if (threads <= 0) {
        cpu_set_t set;
        threads = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    }
    char err[512];
    if (og_pool_create(threads, NULL, pool, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", cmd, err);
        return OG_EXIT_USAGE;
    }
    return OG_EXIT_OK;
}

int og_cli_plan_prepare(const char *cmd, const og_gguf *hg, const og_hparams *hp, og_plan_input *pin, bool have_ram,
                        const char *profile_path, og_plan *plan, uint64_t **profile) {
    char err[1024];
    *profile = NULL;
    if (!have_ram) {
        uint64_t avail, limit;
        pin->ram = og_sys_memory(&avail, &limit) == OG_OK ? (avail < limit ? avail : limit) : UINT64_MAX;
    }
    og_status st = profile_path ? og_profile_read(profile_path, hp->n_layer, hp->n_expert, profile, err, sizeof err) : OG_OK;
    pin->profile = *profile;
    if (!st) st = og_plan_make(hg, pin, plan, err, sizeof err);
    if (st || !plan->fits) {
        if (st) fprintf(stderr, "%s: %s\n", cmd, err);
        else fprintf(stderr, "%s: does not fit: %s\n", cmd, plan->reason);
        if (!st) og_plan_free(plan);
        free(*profile);
        *profile = NULL;
        return !st ? OG_EXIT_REFUSED : st == OG_ERR_INVALID_ARG ? OG_EXIT_USAGE : OG_EXIT_BAD_INPUT;
    }
    og_cli_plan_line(stderr, plan, *profile != NULL);
    return OG_EXIT_OK;
}

/* The dispatcher over what setup built (host only without a device). */
static int make_dispatch(const char *cmd, og_cli_placement *p) {
    char err[512];
    if (og_dispatch_create(p->device, p->dev, &p->dispatch, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", cmd, err);
        return OG_EXIT_USAGE;
    }
    return 0;
}

int og_cli_placement_setup(const char *cmd, const og_model *m, const og_plan *plan, const uint64_t *profile,
                           uint64_t vram, long migrate, bool want_stats, const og_kernels *kern, int device_threads,
                           og_cli_placement *p) {
    memset(p, 0, sizeof *p);
    char err[1024];
    p->n_le = (size_t)m->hp.n_layer * m->hp.n_expert;
    if (!(vram || want_stats) || !p->n_le) return make_dispatch(cmd, p);
    p->stats.counts = calloc(p->n_le, sizeof *p->stats.counts);
    p->stats.layer_routes = calloc(m->hp.n_layer, sizeof *p->stats.layer_routes);
    p->stats.layer_hits = calloc(m->hp.n_layer, sizeof *p->stats.layer_hits);
    if (!p->stats.counts || !p->stats.layer_routes || !p->stats.layer_hits ||
        (vram && (!(p->resident = malloc(p->n_le)) || og_plan_resident(plan, profile, p->resident)))) {
        fprintf(stderr, "%s: out of memory\n", cmd);
        return OG_EXIT_USAGE;
    }
    if (!vram) return make_dispatch(cmd, p);
    /* no GPU backend yet: the cpu device plays it (a budget of --vram, its own
     * threads), holding the resident experts in the plan's slots */
    const int nth = device_threads > 0 ? device_threads : og_device_cpu_default_threads();
    if (og_device_cpu_create(vram, nth, kern, &p->device, err, sizeof err) ||
        og_expert_cache_create(m, plan->slots, p->device, &p->dev, err, sizeof err) ||
        og_expert_cache_load(p->dev, m, p->resident, err, sizeof err) ||
        (migrate && og_migrator_create(m->hp.n_layer, m->hp.n_expert, (uint32_t)migrate, 8, 0.85, &p->mig, err,
                                       sizeof err))) {
        fprintf(stderr, "%s: %s\n", cmd, err);
        return OG_EXIT_USAGE;
    }
    p->stats.resident = p->dev->resident; /* follows the migrations */
    char pb[32];
    fprintf(stderr, "%s: cpu device: %llu experts resident, %s copied host->device, %d threads\n", cmd,
            (unsigned long long)p->dev->n_resident, og_fmt_bytes(p->dev->dev->pcie_bytes, pb, sizeof pb), nth);
    return make_dispatch(cmd, p);
}

int og_cli_placement_save_profile(const char *cmd, const og_model *m, og_cli_placement *p, const uint64_t *profile,
                                  const char *path) {
    if (!path || !p->stats.counts) return 0;
    uint64_t *c = p->stats.counts;
    if (profile)
        for (size_t i = 0; i < p->n_le; i++) c[i] += profile[i];
    for (size_t i = 0; i < p->n_le; i++) /* saturate: the file stays readable */
        if (c[i] > (uint64_t)OG_PROFILE_COUNT_MAX) c[i] = (uint64_t)OG_PROFILE_COUNT_MAX;
    char err[1024];
    if (og_profile_write(path, m->hp.n_layer, m->hp.n_expert, c, err, sizeof err)) {
        fprintf(stderr, "%s: --save-profile: %s\n", cmd, err);
        return OG_EXIT_USAGE;
    }
    return 0;
}

void og_cli_placement_free(og_cli_placement *p) {
    og_dispatch_free(p->dispatch);
    og_migrator_free(p->mig);
    og_expert_cache_free(p->dev);
    og_device_destroy(p->device);
    free(p->stats.counts);
    free(p->stats.layer_routes);
    free(p->stats.layer_hits);
    free(p->resident);
    memset(p, 0, sizeof *p);
}

bool og_cli_parse_numerics(const char *cmd, const char *arg, bool *gpu) {
    if (!strcmp(arg, "gpu") || !strcmp(arg, "fork")) {
        *gpu = !strcmp(arg, "gpu");
        return true;
    }
    fprintf(stderr, "%s: --cpu-numerics takes fork or gpu (got '%s')\n", cmd, arg);
    return false;
}
