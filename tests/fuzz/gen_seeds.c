/* Writes the hand-built fixture files (valid + each corruption, and parts of
 * split models) as fuzz seeds.
 * Usage: gen_seeds DIR. Run once when the fixture changes; the output is committed. */
#include <stdio.h>

#include "../unit/gguf_fixture.h"

/* Writes b to DIR/NAME and frees it; false when the file cannot be written. */
static int put(const char *dir, const char *name, fx_buf b) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(b.p, 1, b.n, f) == b.n;
    if (f && fclose(f) != 0) ok = 0;
    free(b.p);
    return ok;
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    char name[64];
    for (int c = 0; c < CORRUPT_COUNT; c++) {
        snprintf(name, sizeof name, "fixture_%02d.gguf", c);
        if (!put(argv[1], name, fx_build((enum fx_corruption)c))) return 1;
    }
    /* split keys: a one-part set (joined in memory), a first part of three and a
     * later part (both refused in memory), split.count as a string */
    const struct { int no, count, total; const char *tensors; } split[] = {
        {0, 1, 2, "ab"}, {0, 3, 4, "a"}, {1, 3, 4, "bc"}, {0, FX_COUNT_AS_STRING, 4, "a"}};
    for (size_t i = 0; i < sizeof split / sizeof split[0]; i++) {
        snprintf(name, sizeof name, "split_%02zu.gguf", i);
        if (!put(argv[1], name, fx_build_split_part("test", split[i].no, split[i].count, split[i].total, split[i].tensors)))
            return 1;
    }
    return 0;
}
