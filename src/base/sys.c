#include "og_base.h"

#include <stdlib.h>
#include <string.h>

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
