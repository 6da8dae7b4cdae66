/* See placement.h. */
#include "placement.h"

#include "og_device_cuda.h"

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
    const og_model_info *mi = og_model_get_info(m);
    for (uint32_t l = 0; !st && l < mi->n_layer; l++) {
        const og_moe_weights *L = &mi->moe[l];
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

int og_cli_plan_prepare(const char *cmd, const og_gguf *hg, const og_model_info *hp, og_plan_input *pin, bool have_ram,
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
    if (!st) og_cli_slots_note(stderr, cmd, pin->slots_override, plan);
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

/* --ds4-rounding LIST: each item a model option on (NAME) or off (no-NAME),
 * or a set (spec: every round trip of the architecture on; llama / none:
 * off), applied in order to m (NULL: only checked). deepseek4 has kv-fp8,
 * indexer-fp4; deepseek41 kv-fp8, kv-fp4, indexer-fp4 (the model refuses a
 * name it does not have). kv-f16, once an item here, is --kv-type now:
 * refused with that said. */
static og_status ds4_rounding_apply(og_model *m, const char *list, char *err, size_t errlen) {
    static const char *const names[] = {"kv-fp8", "indexer-fp4", "kv-fp4"};
    const bool v41 = m && !strcmp(og_model_get_info(m)->arch, "deepseek41");
    char buf[256];
    if (snprintf(buf, sizeof buf, "%s", list) >= (int)sizeof buf || !buf[0])
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "an empty or too long list");
    /* items split by hand: strtok_r skips empty ones, and ',' alone was taken as
     * a list that changes nothing */
    for (char *it = buf, *next; it; it = next) {
        if ((next = strchr(it, ','))) *next++ = '\0';
        if (!*it) return og_fail(err, errlen, OG_ERR_INVALID_ARG, "an empty item in the list");
        const bool on = strncmp(it, "no-", 3) != 0;
        const char *name = on ? it : it + 3;
        bool known = false;
        for (int i = 0; i < 3; i++) known |= !strcmp(name, names[i]);
        if (!strcmp(name, "kv-f16"))
            return og_fail(err, errlen, OG_ERR_INVALID_ARG, "%s is --kv-type %s now (f16 is the default)", it,
                           on ? "f16" : "f32");
        if (!strcmp(it, "spec") || !strcmp(it, "llama") || !strcmp(it, "none")) {
            const char *v = !strcmp(it, "spec") ? "on" : "off";
            og_status st = OG_OK;
            /* the round trips of the architecture (the f16 cache is --kv-type's) */
            const char *const *set = v41 ? (const char *const[]){"kv-fp8", "kv-fp4", "indexer-fp4"} : names;
            for (int i = 0; m && i < (v41 ? 3 : 2) && !st; i++) st = og_model_set_option(m, set[i], v, err, errlen);
            if (st) return st;
            continue;
        }
        if (!known) return og_fail(err, errlen, OG_ERR_INVALID_ARG, "'%s' is none of the options", it);
        og_status st = m ? og_model_set_option(m, name, on ? "on" : "off", err, errlen) : OG_OK;
        if (st) return st;
    }
    return OG_OK;
}

void og_cli_flags_init(og_cli_flags *f) {
    memset(f, 0, sizeof *f);
    f->kv_type = OG_KV_F16;
    f->pin = (og_plan_input){.reserve = 512ull << 20, .kv_bytes_per_elem = og_kv_type_bytes(f->kv_type),
                             .slots_override = -1};
    f->migrate = 2;
    f->numa_node = -1;
    f->numerics_gpu = true; /* --cpu-numerics gpu: canonical by default (issue 12) */
}

int og_cli_flag(const char *cmd, int c, const char *arg, og_cli_flags *f) {
    bool ok = true;
    const char *name, *want;
    switch (c) {
    case OG_OPT_VRAM:
        name = "vram", want = "a size (e.g. 96G)";
        ok = og_parse_size(arg, &f->pin.vram) == OG_OK;
        f->have_vram = true;
        break;
    case OG_OPT_RAM:
        name = "ram", want = "a size (e.g. 280G)";
        ok = og_parse_size(arg, &f->pin.ram) == OG_OK;
        f->have_ram = true;
        break;
    case OG_OPT_RESERVE:
        name = "reserve", want = "a size (e.g. 512M)";
        ok = og_parse_size(arg, &f->pin.reserve) == OG_OK;
        break;
    case OG_OPT_CTX: name = "ctx", want = "a positive count"; ok = og_cli_parse_count(arg, &f->ctx); break;
    case OG_OPT_SLOTS:
        name = "expert-slots", want = "a count or 'all'";
        ok = og_cli_parse_slots(arg, &f->pin.slots_override);
        break;
    case OG_OPT_PROFILE: name = "profile", want = ""; f->profile = arg; break;
    case OG_OPT_SAVE_PROFILE: name = "save-profile", want = ""; f->save_profile = arg; break;
    case OG_OPT_MIGRATE:
        name = "migrate", want = "a count, 0..1000000";
        ok = og_cli_parse_long(arg, 0, 1000000, &f->migrate);
        f->migrate_set = true;
        break;
    case OG_OPT_NUMERICS:
        name = "cpu-numerics", want = "fork or gpu";
        ok = !strcmp(arg, "gpu") || !strcmp(arg, "fork");
        f->numerics_gpu = !strcmp(arg, "gpu");
        break;
    case OG_OPT_THREADS:
        name = "threads", want = "a count, 1..4096";
        ok = og_cli_parse_count(arg, &f->threads) && f->threads <= 4096;
        break;
    case OG_OPT_NUMA_NODE:
        name = "numa-node", want = "a NUMA node, 0..1023";
        ok = og_cli_parse_long(arg, 0, OG_MAX_NUMA_NODES - 1, &f->numa_node);
        break;
    case OG_OPT_DEVICE:
        name = "device", want = "cuda, cpu or auto";
        ok = !strcmp(arg, "cuda") || !strcmp(arg, "cpu") || !strcmp(arg, "auto");
        f->device = !strcmp(arg, "cuda") ? OG_CLI_DEVICE_CUDA : !strcmp(arg, "cpu") ? OG_CLI_DEVICE_CPU : OG_CLI_DEVICE_AUTO;
        break;
    case OG_OPT_DEVICE_THREADS:
        name = "device-threads", want = "a count, 1..4096";
        ok = og_cli_parse_count(arg, &f->device_threads) && f->device_threads <= 4096;
        break;
    case OG_OPT_DEVICE_FORWARD: name = "device-forward", want = ""; f->device_forward = true; break;
    case OG_OPT_NO_DEVICE_FORWARD: name = "no-device-forward", want = ""; f->no_device_forward = true; break;
    case OG_OPT_DS4_ROUNDING: {
        char why[160] = "";
        name = "ds4-rounding";
        ok = ds4_rounding_apply(NULL, arg, why, sizeof why) == OG_OK;
        want = "a list of [no-]kv-fp8, [no-]indexer-fp4, [no-]kv-fp4, spec, llama or none";
        f->ds4_rounding = arg;
        if (!ok && strstr(why, "--kv-type")) { /* the old kv-f16 item: where it went */
            fprintf(stderr, "%s: bad value '%s' for --%s: %s\n", cmd, arg, name, why);
            return -1;
        }
        break;
    }
    case OG_OPT_KV_TYPE:
        name = "kv-type", want = "f16 or f32";
        ok = og_kv_type_parse(arg, &f->kv_type) == OG_OK;
        f->kv_type_set = true;
        f->pin.kv_bytes_per_elem = og_kv_type_bytes(f->kv_type); /* the plan's element: the cache's */
        break;
    case OG_OPT_CACHE_RAM:
        name = "cache-ram", want = "a size (e.g. 8G, or 0 for off)";
        ok = og_parse_size(arg, &f->cache_ram) == OG_OK;
        break;
    case OG_OPT_CACHE_DIR:
        name = "cache-dir", want = "a directory";
        ok = arg[0] != 0;
        f->cache_dir = arg;
        break;
    case OG_OPT_CACHE_DIR_SIZE:
        name = "cache-dir-size", want = "a size of at least 1M (e.g. 64G)";
        ok = og_parse_size(arg, &f->cache_dir_size) == OG_OK && f->cache_dir_size >= (1u << 20);
        break;
    default: return 0;
    }
    if (ok) return 1;
    fprintf(stderr, "%s: bad value '%s' for --%s: expected %s\n", cmd, arg, name, want);
    return -1;
}

int og_cli_model_options(const char *cmd, og_model *m, const og_cli_flags *f) {
    char err[256];
    /* an architecture without the option (deepseek41: F32 rows) keeps its cache
     * unless --kv-type was asked for */
    if (og_model_set_option(m, "kv-type", og_kv_type_name(f->kv_type), err, sizeof err) && f->kv_type_set) {
        fprintf(stderr, "%s: --kv-type %s: %s\n", cmd, og_kv_type_name(f->kv_type), err);
        return OG_EXIT_USAGE;
    }
    const og_model_info *mi = og_model_get_info(m);
    if (mi->kv_paged && mi->kv_elem_bytes != f->pin.kv_bytes_per_elem) { /* the plan and the pool disagree: a bug */
        fprintf(stderr, "%s: internal error: the cache holds %u-byte elements, the plan charged %u\n", cmd,
                mi->kv_elem_bytes, f->pin.kv_bytes_per_elem);
        return OG_EXIT_USAGE;
    }
    if (!f->ds4_rounding) return OG_EXIT_OK;
    if (strcmp(og_model_get_info(m)->arch, "deepseek4") && strcmp(og_model_get_info(m)->arch, "deepseek41")) {
        fprintf(stderr, "%s: --ds4-rounding applies to deepseek4 and deepseek41 models; this one is %s\n", cmd,
                og_model_get_info(m)->arch);
        return OG_EXIT_USAGE;
    }
    if (ds4_rounding_apply(m, f->ds4_rounding, err, sizeof err)) {
        fprintf(stderr, "%s: --ds4-rounding %s: %s\n", cmd, f->ds4_rounding, err);
        return OG_EXIT_USAGE;
    }
    return OG_EXIT_OK;
}

/* The flags that plan for a device, without a device. */
static int device_flags_check(const char *cmd, const og_cli_flags *f) {
    if (!f->have_vram &&
        (f->have_ram || f->profile || f->pin.slots_override != -1 || f->migrate_set || f->device_threads ||
         f->device_forward)) {
        fprintf(stderr,
                "%s: --ram, --profile, --expert-slots, --migrate, --device-threads and --device-forward plan for a device: "
                "give --vram SIZE too%s\n",
                cmd, og_cuda_built() && f->device != OG_CLI_DEVICE_CPU ? " (no GPU was found to plan for)" : "");
        return OG_EXIT_USAGE;
    }
    return OG_EXIT_OK;
}

int og_cli_flags_check(const char *cmd, const og_cli_flags *f) {
    /* with a GPU possible, its memory may stand for --vram: checked again once the device is chosen */
    if (!(og_cuda_built() && f->device != OG_CLI_DEVICE_CPU) && device_flags_check(cmd, f)) return OG_EXIT_USAGE;
    /* --cache-ram is a bound the RAM tier fills as blocks are evicted: one past
     * the memory this process may use is a typo (100T for 100G) that would run
     * until the kernel kills the server, hours later */
    uint64_t avail, limit;
    if (f->cache_ram && !og_sys_memory(&avail, &limit) && f->cache_ram > (avail < limit ? avail : limit)) {
        char want[32], have[32];
        fprintf(stderr,
                "%s: --cache-ram %s is more than the memory this process may use (%s: MemAvailable, or the "
                "cgroup limit); give a smaller size, or 0 for off\n",
                cmd, og_fmt_bytes(f->cache_ram, want, sizeof want),
                og_fmt_bytes(avail < limit ? avail : limit, have, sizeof have));
        return OG_EXIT_USAGE;
    }
    char werr[512];
    if (f->save_profile && og_check_writable(f->save_profile, werr, sizeof werr)) {
        fprintf(stderr, "%s: --save-profile %s\n", cmd, werr);
        return OG_EXIT_USAGE;
    }
    return OG_EXIT_OK;
}

int og_cli_device_choose(const char *cmd, og_cli_flags *f) {
    f->gpu = NULL;
    if (f->device == OG_CLI_DEVICE_CPU) return OG_EXIT_OK;
    if (!og_cuda_built()) {
        if (f->device == OG_CLI_DEVICE_CUDA) {
            fprintf(stderr, "%s: --device cuda: this build has no CUDA (rebuild with the CUDA toolkit installed: "
                    "cmake -S . -B build -DONEGPU_CUDA=ON && cmake --build build)\n", cmd);
            return OG_EXIT_USAGE;
        }
        if (og_cuda_machine_has_gpu())
            fprintf(stderr, "%s: this machine has an NVIDIA GPU but this build has no CUDA, so the CPU computes "
                    "(rebuild with the CUDA toolkit installed: cmake -S . -B build -DONEGPU_CUDA=ON && cmake --build build)\n",
                    cmd);
        return OG_EXIT_OK;
    }
    char err[512];
    og_status st = og_device_cuda_create(0, &f->gpu, err, sizeof err);
    if (st) {
        f->gpu = NULL;
        if (f->device == OG_CLI_DEVICE_CUDA) {
            fprintf(stderr, "%s: --device cuda: %s\n", cmd, err);
            return OG_EXIT_USAGE;
        }
        fprintf(stderr, "%s: %s: the CPU computes\n", cmd, err);
        return OG_EXIT_OK;
    }
    if (!f->have_vram) { /* the GPU's free memory is the plan's device budget */
        uint64_t fr = 0, tot = 0;
        if (f->gpu->ops->mem_info(f->gpu, &fr, &tot) || !fr) {
            fprintf(stderr, "%s: the GPU reports no free memory (cudaMemGetInfo); give --vram SIZE\n", cmd);
            og_device_destroy(f->gpu);
            f->gpu = NULL;
            return OG_EXIT_USAGE;
        }
        f->pin.vram = fr;
        f->have_vram = true;
    }
    return OG_EXIT_OK;
}

int og_cli_plan_flags(const char *cmd, const char *model_path, og_cli_flags *f, uint32_t parallel,
                      uint32_t batch_tokens, og_model_info *hp, og_plan *plan, uint64_t **profile) {
    char err[1024];
    memset(plan, 0, sizeof *plan);
    *profile = NULL;
    og_gguf *hg;
    if (og_gguf_open(model_path, OG_GGUF_HEADER_ONLY, &hg, err, sizeof err) ||
        (og_model_describe(hg, NULL, hp, err, sizeof err) && (og_gguf_close(hg), 1))) {
        fprintf(stderr, "%s: %s\n", cmd, err);
        return OG_EXIT_BAD_INPUT;
    }
    int drc = og_cli_device_choose(cmd, f);
    if (!drc) drc = device_flags_check(cmd, f);
    if (drc) {
        og_device_destroy(f->gpu);
        f->gpu = NULL;
        og_gguf_close(hg);
        return drc;
    }
    if (!f->ctx) f->ctx = og_cli_default_ctx(hp->n_ctx_train);
    int rc = OG_EXIT_OK;
    if (f->ctx > hp->n_ctx_train || f->ctx < 2) {
        fprintf(stderr, "%s: --ctx %u is outside 2..%u, the model's context\n", cmd, f->ctx, hp->n_ctx_train);
        rc = OG_EXIT_USAGE;
    } else if (f->have_vram) {
        f->pin.ctx = f->ctx;
        f->pin.parallel = parallel;
        f->pin.batch_tokens = batch_tokens;
        rc = og_cli_plan_prepare(cmd, hg, hp, &f->pin, f->have_ram, f->profile, plan, profile);
    }
    og_gguf_close(hg);
    if (rc) {
        og_device_destroy(f->gpu);
        f->gpu = NULL;
    }
    return rc;
}

int og_cli_placement_create(const char *cmd, const og_model *m, og_cli_flags *f, const og_plan *plan,
                            const uint64_t *profile, bool count, const og_kernels *kern, og_placement **out) {
    *out = NULL;
    og_placement_config pc = og_placement_defaults();
    pc.vram = f->have_vram ? f->pin.vram : 0;
    pc.plan = plan;
    pc.profile = profile;
    pc.migrate = (uint32_t)f->migrate;
    pc.count = count || f->save_profile;
    pc.kern = kern;
    pc.device_threads = (int)(f->device_threads ? f->device_threads : f->threads);
    /* on a GPU the forward pass runs there by default (deepseek2's ops are on the cuda device) */
    pc.forward_on_device = !f->no_device_forward &&
                           (f->device_forward || (pc.device && !strcmp(og_model_get_info(m)->arch, "deepseek2")));
    /* the cpu device's test mode: weights copied as on a GPU (tests/cli/device.sh) */
    const char *dw = getenv("ONEGPU_DEVICE_WEIGHTS");
    pc.copy_weights = dw && !strcmp(dw, "copy");
    pc.device = f->gpu; /* the placement's from here on */
    pc.pin = true;
    f->gpu = NULL;
    char err[1024], desc[256] = "";
    if (pc.device) og_device_cuda_describe(pc.device, desc, sizeof desc);
    if (og_placement_create(m, &pc, out, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", cmd, err);
        return OG_EXIT_USAGE;
    }
    og_placement_stats ps;
    og_placement_get_stats(*out, &ps);
    char pb[32], vb[32], hb[32];
    if (ps.device && desc[0]) {
        char pin[320];
        if (ps.pin_error) snprintf(pin, sizeof pin, "host experts not pinned (%s)", ps.pin_error);
        else snprintf(pin, sizeof pin, "%s of host experts pinned", og_fmt_bytes(ps.pinned_bytes, hb, sizeof hb));
        char fwd[96], wb[32];
        if (ps.forward_on_device)
            snprintf(fwd, sizeof fwd, "the forward pass on the GPU (%s of weights in its memory)",
                     og_fmt_bytes(ps.weight_bytes, wb, sizeof wb));
        else
            snprintf(fwd, sizeof fwd, "the rest of the forward pass on the CPU");
        fprintf(stderr, "%s: compute: cuda device %s: %llu experts resident in %s, %s copied host->device, %s; %s\n",
                cmd, desc, (unsigned long long)ps.resident_experts, og_fmt_bytes(f->pin.vram, vb, sizeof vb),
                og_fmt_bytes(ps.pcie_bytes, pb, sizeof pb), pin, fwd);
    } else if (ps.device) {
        char fwd[96] = "", wb[32];
        if (ps.forward_on_device && ps.weight_bytes)
            snprintf(fwd, sizeof fwd, "; the forward pass on the device, %s of weights copied",
                     og_fmt_bytes(ps.weight_bytes, wb, sizeof wb));
        else if (ps.forward_on_device)
            snprintf(fwd, sizeof fwd, "; the forward pass on the device, weights used in place");
        fprintf(stderr, "%s: compute: cpu device: %llu experts resident, %s copied host->device (the CPU plays a GPU "
                "of %s)%s\n", cmd, (unsigned long long)ps.resident_experts, og_fmt_bytes(ps.pcie_bytes, pb, sizeof pb),
                og_fmt_bytes(f->pin.vram, vb, sizeof vb), fwd);
    } else {
        fprintf(stderr, "%s: compute: CPU only (no device)\n", cmd);
    }
    return OG_EXIT_OK;
}

int og_cli_placement_save_profile(const char *cmd, const og_placement *p, const og_cli_flags *f,
                                  const uint64_t *profile) {
    if (!f->save_profile || !p) return OG_EXIT_OK;
    char err[1024];
    if (og_placement_save_profile(p, profile, f->save_profile, err, sizeof err)) {
        fprintf(stderr, "%s: --save-profile: %s\n", cmd, err);
        return OG_EXIT_USAGE;
    }
    return OG_EXIT_OK;
}
