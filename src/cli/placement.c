/* See placement.h. */
#include "placement.h"

#include "cli.h"

#include <pthread.h>
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

int og_cli_numa_choose(const char *cmd, long numa_node, og_cli_numa *nu) {
    const char *sysfs = getenv("ONEGPU_SYSFS");
    nu->node = numa_node >= 0 ? (int)numa_node : og_sys_gpu_node(sysfs);
    nu->why = numa_node >= 0 ? "--numa-node" : "the GPU's node";
    nu->n_cpus = 0;
    if (nu->node < 0) return OG_EXIT_OK;
    char err[512], a[256], b[256];
    int n;
    if (og_sys_node_cpus(sysfs, nu->node, nu->cpus, OG_MAX_CPUS, &n, err, sizeof err)) {
        fprintf(stderr, "%s: %s%s\n", cmd, numa_node >= 0 ? "--numa-node: " : "the GPU's node: ", err);
        return OG_EXIT_USAGE;
    }
    og_cpulist_format(nu->cpus, n, a, sizeof a);
    cpu_set_t mine;
    if (sched_getaffinity(0, sizeof mine, &mine)) CPU_ZERO(&mine);
    for (int i = 0; i < n; i++)
        if (nu->cpus[i] < CPU_SETSIZE && CPU_ISSET(nu->cpus[i], &mine)) nu->cpus[nu->n_cpus++] = nu->cpus[i];
    if (!nu->n_cpus) {
        int all[CPU_SETSIZE], k = 0;
        for (int c = 0; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &mine)) all[k++] = c;
        fprintf(stderr, "%s: NUMA node %d (%s): none of its CPUs %s is one this process may use (%s)\n", cmd, nu->node,
                nu->why, a, og_cpulist_format(all, k, b, sizeof b));
        return OG_EXIT_USAGE;
    }
    return OG_EXIT_OK;
}

int og_cli_numa_pool(const char *cmd, const og_cli_numa *nu, const og_model *m, int threads, og_pool **pool) {
    char cpus[256], mem[512], err[512];
    if (nu->node < 0) {
        int rc = og_cli_pool(cmd, threads, pool);
        cpu_set_t mine;
        int all[CPU_SETSIZE], k = 0;
        if (!sched_getaffinity(0, sizeof mine, &mine))
            for (int c = 0; c < CPU_SETSIZE; c++)
                if (CPU_ISSET(c, &mine)) all[k++] = c;
        if (!rc)
            fprintf(stderr, "%s: NUMA: no binding (no GPU with a known node; --numa-node N binds): %d threads on CPUs %s "
                            "as inherited, memory policy unchanged\n", cmd, og_pool_size(*pool),
                    og_cpulist_format(all, k, cpus, sizeof cpus));
        return rc;
    }
    og_cpulist_format(nu->cpus, nu->n_cpus, cpus, sizeof cpus);
    if (threads <= 0) threads = nu->n_cpus;
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int i = 0; i < nu->n_cpus; i++) CPU_SET(nu->cpus[i], &set);
    int prc = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    /* memory: this thread's policy first, so the pool's workers inherit it (page-cache
     * pages follow the faulting thread), then the routed experts' ranges of the
     * mapping (pages already read are moved) */
    og_status st = og_sys_prefer_node(nu->node, mem, sizeof mem);
    int *pins = prc ? NULL : malloc((size_t)threads * sizeof *pins);
    for (int i = 0; pins && i < threads; i++) pins[i] = nu->cpus[i % nu->n_cpus];
    og_status pst = og_pool_create(threads, pins, pool, err, sizeof err);
    free(pins);
    if (pst) {
        fprintf(stderr, "%s: %s\n", cmd, err);
        return OG_EXIT_USAGE;
    }
    if (st) snprintf(err, sizeof err, "%s", mem);
    uint64_t bytes = 0;
    int ranges = 0;
    for (uint32_t l = 0; !st && l < m->hp.n_layer; l++) {
        const og_layer *L = &m->layers[l];
        const og_weight *w[3] = {&L->gate_exps, &L->up_exps, &L->down_exps};
        for (int k = 0; L->moe && k < 3 && !st; k++) {
            size_t n = (size_t)w[k]->n_rows * w[k]->row_bytes;
            st = og_sys_bind_memory(w[k]->data, n, nu->node, err, sizeof err);
            bytes += n;
            ranges++;
        }
    }
    char b[32];
    if (st) snprintf(mem, sizeof mem, "memory not bound (%s)", err);
    else snprintf(mem, sizeof mem, "memory preferred on node %d (this thread's policy, and mbind of %d routed-expert "
                  "ranges, %s)", nu->node, ranges, og_fmt_bytes(bytes, b, sizeof b));
    char pinned[160];
    if (prc) snprintf(pinned, sizeof pinned, "NOT pinned (pthread_setaffinity_np: %s) to", strerror(prc));
    else snprintf(pinned, sizeof pinned, "pinned to");
    fprintf(stderr, "%s: NUMA: node %d (%s), %d thread%s %s CPUs %s, %s\n", cmd, nu->node, nu->why, threads,
            threads == 1 ? "" : "s", pinned, cpus, mem);
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

int og_cli_placement_setup(const char *cmd, const og_model *m, const og_plan *plan, const uint64_t *profile,
                           uint64_t vram, long migrate, bool want_stats, og_cli_placement *p) {
    memset(p, 0, sizeof *p);
    char err[1024];
    p->n_le = (size_t)m->hp.n_layer * m->hp.n_expert;
    if (!(vram || want_stats) || !p->n_le) return 0;
    p->stats.counts = calloc(p->n_le, sizeof *p->stats.counts);
    p->stats.layer_routes = calloc(m->hp.n_layer, sizeof *p->stats.layer_routes);
    p->stats.layer_hits = calloc(m->hp.n_layer, sizeof *p->stats.layer_hits);
    if (!p->stats.counts || !p->stats.layer_routes || !p->stats.layer_hits ||
        (vram && (!(p->resident = malloc(p->n_le)) || og_plan_resident(plan, profile, p->resident)))) {
        fprintf(stderr, "%s: out of memory\n", cmd);
        return OG_EXIT_USAGE;
    }
    if (!vram) return 0;
    /* no GPU backend yet: the cpu device plays it (a budget of --vram), holding
     * the resident experts in the plan's slots */
    if (og_device_cpu_create(vram, &p->device, err, sizeof err) ||
        og_expert_cache_create(m, plan->slots, p->device, &p->dev, err, sizeof err) ||
        og_expert_cache_load(p->dev, m, p->resident, err, sizeof err) ||
        (migrate && og_migrator_create(m->hp.n_layer, m->hp.n_expert, (uint32_t)migrate, 8, 0.85, &p->mig, err,
                                       sizeof err))) {
        fprintf(stderr, "%s: %s\n", cmd, err);
        return OG_EXIT_USAGE;
    }
    p->stats.resident = p->dev->resident; /* follows the migrations */
    char pb[32];
    fprintf(stderr, "%s: cpu device: %llu experts resident, %s copied host->device\n", cmd,
            (unsigned long long)p->dev->n_resident, og_fmt_bytes(p->dev->dev->pcie_bytes, pb, sizeof pb));
    return 0;
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
