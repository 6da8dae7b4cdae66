#include "og_base.h"

#include <dirent.h>
#include <errno.h>
#include <numaif.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool read_u64_file(const char *path, uint64_t *out) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    char buf[64] = "";
    bool ok = fgets(buf, sizeof buf, f) != NULL;
    fclose(f);
    if (!ok || !strncmp(buf, "max", 3)) return false;
    char *end;
    unsigned long long v = strtoull(buf, &end, 10);
    if (end == buf) return false;
    *out = v;
    return true;
}

og_status og_sys_memory(uint64_t *avail, uint64_t *limit) {
    *avail = 0;
    *limit = UINT64_MAX;
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return OG_ERR_IO;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        unsigned long long kb;
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) *avail = (uint64_t)kb * 1024;
    }
    fclose(f);
    uint64_t v;
    if (read_u64_file("/sys/fs/cgroup/memory.max", &v) && v < *limit) *limit = v;
    if (read_u64_file("/sys/fs/cgroup/memory/memory.limit_in_bytes", &v) && v < *limit) *limit = v;
    return *avail ? OG_OK : OG_ERR_IO;
}

/* ---- NUMA ------------------------------------------------------------------ */

og_status og_cpulist_parse(const char *s, int *cpus, int cap, int *n, char *err, size_t errlen) {
    *n = 0;
    const char *p = s;
    while (*p && *p != '\n') {
        char *end;
        if (*p < '0' || *p > '9') return og_fail(err, errlen, OG_ERR_FORMAT, "cpulist '%.64s': expected a CPU number", s);
        long a = strtol(p, &end, 10), b = a;
        if (*end == '-') {
            const char *q = end + 1;
            if (*q < '0' || *q > '9') return og_fail(err, errlen, OG_ERR_FORMAT, "cpulist '%.64s': range without an end", s);
            b = strtol(q, &end, 10);
        }
        if (a > b || b >= OG_MAX_CPUS)
            return og_fail(err, errlen, OG_ERR_FORMAT, "cpulist '%.64s': bad range %ld-%ld (CPUs 0..%d)", s, a, b,
                           OG_MAX_CPUS - 1);
        for (long c = a; c <= b; c++) {
            if (*n >= cap) return og_fail(err, errlen, OG_ERR_RANGE, "cpulist '%.64s': more than %d CPUs", s, cap);
            cpus[(*n)++] = (int)c;
        }
        p = end;
        if (*p == ',') p++;
        else if (*p && *p != '\n') return og_fail(err, errlen, OG_ERR_FORMAT, "cpulist '%.64s': unexpected '%c'", s, *p);
    }
    return OG_OK;
}

const char *og_cpulist_format(const int *cpus, int n, char *out, size_t outlen) {
    size_t len = 0;
    if (outlen) out[0] = 0;
    for (int i = 0; i < n && len < outlen; i++) {
        int j = i;
        while (j + 1 < n && cpus[j + 1] == cpus[j] + 1) j++;
        int w = j > i ? snprintf(out + len, outlen - len, "%s%d-%d", i ? "," : "", cpus[i], cpus[j])
                      : snprintf(out + len, outlen - len, "%s%d", i ? "," : "", cpus[i]);
        if (w < 0) break;
        len += (size_t)w;
        i = j;
    }
    return out;
}

/* The first line of SYSFS/rel into buf; false when it cannot be read. */
static bool read_line(const char *sysfs, const char *rel, char *buf, size_t len) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", sysfs ? sysfs : "/sys", rel);
    FILE *f = fopen(path, "r");
    if (!f) return false;
    bool ok = fgets(buf, (int)len, f) != NULL;
    fclose(f);
    return ok;
}

og_status og_sys_node_cpus(const char *sysfs, int node, int *cpus, int cap, int *n, char *err, size_t errlen) {
    *n = 0;
    char rel[128], line[4096];
    snprintf(rel, sizeof rel, "devices/system/node/node%d/cpulist", node);
    if (node < 0 || !read_line(sysfs, rel, line, sizeof line)) {
        char online[256] = "";
        if (!read_line(sysfs, "devices/system/node/online", online, sizeof online)) snprintf(online, sizeof online, "unknown");
        online[strcspn(online, "\n")] = 0;
        return og_fail(err, errlen, OG_ERR_NOT_FOUND, "NUMA node %d does not exist (this machine's nodes: %s)", node,
                       online);
    }
    og_status st = og_cpulist_parse(line, cpus, cap, n, err, errlen);
    if (!st && *n == 0) st = og_fail(err, errlen, OG_ERR_NOT_FOUND, "NUMA node %d has no CPUs", node);
    return st;
}

int og_sys_gpu_node(const char *sysfs) {
    char path[1024];
    snprintf(path, sizeof path, "%s/bus/pci/devices", sysfs ? sysfs : "/sys");
    DIR *d = opendir(path);
    if (!d) return -1;
    int node = -1;
    struct dirent *e;
    while (node < 0 && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char rel[512], vendor[32], cls[32], nn[32];
        snprintf(rel, sizeof rel, "bus/pci/devices/%s/vendor", e->d_name);
        if (!read_line(sysfs, rel, vendor, sizeof vendor) || strncmp(vendor, "0x10de", 6)) continue;
        snprintf(rel, sizeof rel, "bus/pci/devices/%s/class", e->d_name);
        if (!read_line(sysfs, rel, cls, sizeof cls) || strncmp(cls, "0x03", 4)) continue; /* display / 3D controller */
        snprintf(rel, sizeof rel, "bus/pci/devices/%s/numa_node", e->d_name);
        if (read_line(sysfs, rel, nn, sizeof nn)) node = atoi(nn) >= 0 ? atoi(nn) : -1;
    }
    closedir(d);
    return node;
}

og_status og_sys_prefer_node(int node, char *err, size_t errlen) {
    if (node < 0 || node >= OG_MAX_NUMA_NODES) return og_fail(err, errlen, OG_ERR_INVALID_ARG, "NUMA node %d", node);
    unsigned long mask[OG_MAX_NUMA_NODES / (8 * sizeof(unsigned long))] = {0};
    mask[node / (8 * sizeof(unsigned long))] = 1ul << (node % (8 * sizeof(unsigned long)));
    if (set_mempolicy(MPOL_PREFERRED, mask, OG_MAX_NUMA_NODES + 1))
        return og_fail(err, errlen, OG_ERR_IO, "set_mempolicy: %s", strerror(errno));
    return OG_OK;
}

og_status og_sys_bind_memory(const void *addr, size_t len, int node, char *err, size_t errlen) {
    if (node < 0 || node >= OG_MAX_NUMA_NODES) return og_fail(err, errlen, OG_ERR_INVALID_ARG, "NUMA node %d", node);
    if (!len) return OG_OK;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)addr & ~(page - 1);
    size_t n = (size_t)((uintptr_t)addr + len - a);
    unsigned long mask[OG_MAX_NUMA_NODES / (8 * sizeof(unsigned long))] = {0};
    mask[node / (8 * sizeof(unsigned long))] = 1ul << (node % (8 * sizeof(unsigned long)));
    if (mbind((void *)a, n, MPOL_PREFERRED, mask, OG_MAX_NUMA_NODES + 1, MPOL_MF_MOVE))
        return og_fail(err, errlen, OG_ERR_IO, "mbind: %s", strerror(errno));
    return OG_OK;
}
