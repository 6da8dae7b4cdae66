/* What the tests of the prefix cache's tiers share (test_kv_pool, test_engine_ds4): a
 * logger whose lines land in g_log (the tiers' "skipping" lines are counted there),
 * and a file written whole (the bad files a test puts in a cache directory). Include
 * after cmocka.h. */
#ifndef OG_TIER_FIXTURE_H
#define OG_TIER_FIXTURE_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "og_base.h"

static char g_log[32768];
static FILE *g_lf;
static og_logger g_lg;    /* INFO and above into g_log */
static og_logger g_quiet; /* ERROR only, into g_log: helpers whose warnings are not the test's */

/* Opens g_log empty (closed with fclose(g_lf)). */
static inline void log_open(void) {
    memset(g_log, 0, sizeof g_log);
    g_lf = fmemopen(g_log, sizeof g_log - 1, "w");
    assert_non_null(g_lf);
    setvbuf(g_lf, NULL, _IONBF, 0);
    g_lg = (og_logger){.level = OG_LOG_INFO, .out = g_lf};
    g_quiet = (og_logger){.level = OG_LOG_ERROR, .out = g_lf};
}

/* Empties g_log again (the stream rewound). */
static inline void log_clear(void) {
    memset(g_log, 0, sizeof g_log);
    rewind(g_lf);
}

/* How many times what stands in g_log. */
static inline int count_in_log(const char *what) {
    int n = 0;
    for (const char *p = g_log; (p = strstr(p, what)); p++) n++;
    return n;
}

/* path holds the n bytes at p (created or truncated). */
static inline void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    fclose(f);
}

/* Two bad files beside the tier file src (DIR/STORE-HASH.EXT): a copy cut to half
 * its bytes named STORE-00000000000000bb.EXT, and junk of its size (0x5a bytes)
 * named STORE-00000000000000cc.EXT. */
static inline void bad_copies(const char *src) {
    size_t len;
    char *bytes, err[256], path[700];
    assert_int_equal(og_read_file(src, 256u << 20, &bytes, &len, err, sizeof err), OG_OK);
    const char *base = strrchr(src, '/') + 1;
    const int dir_len = (int)(base - src);
    snprintf(path, sizeof path, "%.*s%.16s-00000000000000bb%s", dir_len, src, base, base + 33);
    write_bytes(path, bytes, len / 2);
    snprintf(path, sizeof path, "%.*s%.16s-00000000000000cc%s", dir_len, src, base, base + 33);
    memset(bytes, 0x5a, len);
    write_bytes(path, bytes, len);
    free(bytes);
}

/* Flips the bits mask of the byte from_end bytes before the end of path (a
 * payload byte of a tier file: its checksum then refuses it at lookup). */
static inline void flip_byte(const char *path, long from_end, int mask) {
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, -from_end, SEEK_END), 0);
    const int ch = fgetc(f);
    assert_int_equal(fseek(f, -from_end, SEEK_END), 0);
    fputc(ch ^ mask, f);
    fclose(f);
}

/* The tier files (STORE-HASH.kvb or .kvs as ext says: 16 + 1 + 16 hex digits and
 * the ending) in dir, at most cap of their paths into names; returns how many. */
static inline int tier_files(const char *dir, const char *ext, char names[][600], int cap) {
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return 0;
    for (struct dirent *de; (de = readdir(d));)
        if (strlen(de->d_name) == 33 + strlen(ext) && !strcmp(de->d_name + 33, ext) && n < cap)
            snprintf(names[n++], 600, "%s/%s", dir, de->d_name);
    closedir(d);
    return n;
}

#endif
