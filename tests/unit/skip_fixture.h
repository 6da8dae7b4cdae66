/* Skips in the C unit tests, as tests/cli/lib.sh's: one line test.sh counts.
 * OG_SKIP_DEP: a dependency is missing (scripts/deps.sh installs every one), so
 * under CI=true the test fails instead, else it ends the cmocka test as skipped;
 * OG_NOTE_HW_SKIP: hardware this machine lacks (an ISA tier, a GPU), never a
 * failure, and the test goes on with what it can test. Both print one line,
 * "SKIP (dependency|hardware): why". */
#ifndef OG_SKIP_FIXTURE_H
#define OG_SKIP_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline int og_test_in_ci(void) {
    const char *ci = getenv("CI");
    return ci && !strcmp(ci, "true");
}

#define OG_SKIP_DEP(why)                                                                                            \
    do {                                                                                                            \
        if (og_test_in_ci()) fail_msg("CI=true and a dependency is missing, which would skip: %s", (why));         \
        printf("SKIP (dependency): %s\n", (why));                                                                   \
        fflush(stdout);                                                                                             \
        skip();                                                                                                     \
    } while (0)

/* Prints the hardware skip line only; the caller goes on with what it can test. */
#define OG_NOTE_HW_SKIP(...)                                                                                        \
    do {                                                                                                            \
        printf("SKIP (hardware): " __VA_ARGS__);                                                                    \
        printf("\n");                                                                                               \
        fflush(stdout);                                                                                             \
    } while (0)

#endif
