/* Writes the hand-built fixture files (valid + each corruption) as fuzz seeds.
 * Usage: gen_seeds DIR. Run once when the fixture changes; the output is committed. */
#include <stdio.h>

#include "../unit/gguf_fixture.h"

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    for (int c = 0; c < CORRUPT_COUNT; c++) {
        fx_buf b = fx_build((enum fx_corruption)c);
        char path[512];
        snprintf(path, sizeof path, "%s/fixture_%02d.gguf", argv[1], c);
        FILE *f = fopen(path, "wb");
        if (!f) return 1;
        fwrite(b.p, 1, b.n, f);
        fclose(f);
        free(b.p);
    }
    return 0;
}
