/* base: size parsing, byte formatting, hashing (hand-checked values). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <numaif.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "og_base.h"

/* Expected outputs worked out by hand from Unicode 15 §3.9 (one U+FFFD per
 * maximal subpart; the same as WHATWG's TextDecoder). */
static void test_utf8_repair(void **state) {
    (void)state;
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"plain", "plain"},
        {"caf\xC3\xA9", "caf\xC3\xA9"},                       /* valid 2-byte */
        {"a\xFF" "b", "a\xEF\xBF\xBD" "b"},                     /* never-valid byte */
        {"\xE2\x82", "\xEF\xBF\xBD"},                          /* truncated 3-byte: one subpart */
        {"\xE2\x82" "x", "\xEF\xBF\xBD" "x"},
        {"\xF0\x80\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"}, /* overlong lead: each byte */
        {"\xED\xA0\x80", "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"}, /* surrogate */
        {"\xF0\x9F\x98", "\xEF\xBF\xBD"},                     /* truncated 4-byte */
        {"\xF0\x9F\x98\x80", "\xF0\x9F\x98\x80"},             /* U+1F600 */
        {"\xC0\xAF", "\xEF\xBF\xBD\xEF\xBF\xBD"},             /* C0 never valid */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char out[64];
        size_t n = og_utf8_repair(cases[i].in, strlen(cases[i].in), out);
        assert_int_equal(n, strlen(cases[i].out));
        assert_memory_equal(out, cases[i].out, n);
        assert_true(og_utf8_valid(out, n));
    }
}

static void test_parse_size(void **state) {
    (void)state;
    static const struct { const char *s; uint64_t v; } ok[] = {
        {"0", 0}, {"512", 512}, {"1K", 1024}, {"64M", 64ull << 20}, {"96G", 96ull << 30},
        {"280g", 280ull << 30}, {"1.5GiB", 3ull << 29}, {"2T", 2ull << 40}, {"10MB", 10ull << 20},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        uint64_t v = 1;
        assert_int_equal(og_parse_size(ok[i].s, &v), OG_OK);
        assert_int_equal(v, ok[i].v);
    }
    static const char *bad[] = {"", "G", "-1G", "12X", "1GG", "nan", "1e30T", "0x10G", "1e3G", "+96G", " 96G", "1.5", "2000000T"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t v;
        assert_int_equal(og_parse_size(bad[i], &v), OG_ERR_INVALID_ARG);
    }
}

static void test_fmt_bytes(void **state) {
    (void)state;
    char b[32];
    assert_string_equal(og_fmt_bytes(1023, b, sizeof b), "1023 B");
    assert_string_equal(og_fmt_bytes(1536, b, sizeof b), "1.50 KiB");
    assert_string_equal(og_fmt_bytes(96ull << 30, b, sizeof b), "96.00 GiB");
}

static void test_fnv1a(void **state) {
    (void)state;
    /* Published FNV-1a 64 test vectors: "" and "a". */
    assert_true(og_fnv1a64("", 0, OG_FNV1A64_INIT) == 0xcbf29ce484222325ULL);
    assert_true(og_fnv1a64("a", 1, OG_FNV1A64_INIT) == 0xaf63dc4c8601ec8cULL);
    assert_true(og_fnv1a64("foobar", 6, OG_FNV1A64_INIT) == 0x85944171f73967e8ULL);
}

static void test_checked_math(void **state) {
    (void)state;
    uint64_t r;
    assert_true(og_mul_u64(1ull << 32, 1ull << 31, &r) && r == 1ull << 63);
    assert_false(og_mul_u64(1ull << 32, 1ull << 32, &r));
    assert_false(og_add_u64(UINT64_MAX, 1, &r));
    assert_true(og_align_up_u64(33, 32, &r) && r == 64);
    assert_true(og_align_up_u64(64, 32, &r) && r == 64);
    assert_false(og_align_up_u64(UINT64_MAX - 3, 32, &r));
    char err[64];
    assert_int_equal(og_fail(err, sizeof err, OG_ERR_FORMAT, "x=%d", 7), OG_ERR_FORMAT);
    assert_string_equal(err, "x=7");
    assert_string_equal(og_status_str(OG_ERR_FORMAT), "malformed input");
}

static void test_printable(void **state) {
    (void)state;
    char out[64];
    assert_string_equal(og_printable("ok \xc3\xa9", 5, out, sizeof out), "ok \xc3\xa9");     /* valid UTF-8 kept */
    assert_string_equal(og_printable("\x1b[2J", 4, out, sizeof out), "\\x1b[2J");           /* escape escaped */
    assert_string_equal(og_printable("a\xff" "b", 3, out, sizeof out), "a\\xffb");             /* invalid UTF-8 */
    assert_string_equal(og_printable("\xed\xa0\x80", 3, out, sizeof out), "\\xed\\xa0\\x80"); /* surrogate */
    char small[8];
    og_printable("abcdefghijkl", 12, small, sizeof small);
    assert_string_equal(small, "abcd..."); /* 7 bytes + NUL */
    uint64_t k1[2] = {1, 2}, k2[2] = {1, 3};
    /* SipHash-1-3: deterministic per key, different across keys */
    assert_true(og_siphash13(k1, "abc", 3) == og_siphash13(k1, "abc", 3));
    assert_true(og_siphash13(k1, "abc", 3) != og_siphash13(k2, "abc", 3));
    assert_true(og_siphash13(k1, "abc", 3) != og_siphash13(k1, "abd", 3));
}

static void test_cpulist(void **state) {
    (void)state;
    int c[16], n;
    char err[256], out[64];
    assert_int_equal(og_cpulist_parse("0-3,8,10-11\n", c, 16, &n, err, sizeof err), OG_OK);
    static const int want[] = {0, 1, 2, 3, 8, 10, 11};
    assert_int_equal(n, 7);
    assert_memory_equal(c, want, sizeof want);
    assert_string_equal(og_cpulist_format(c, n, out, sizeof out), "0-3,8,10-11");
    assert_int_equal(og_cpulist_parse("", c, 16, &n, err, sizeof err), OG_OK);
    assert_int_equal(n, 0);
    assert_int_equal(og_cpulist_parse("3-1", c, 16, &n, err, sizeof err), OG_ERR_FORMAT);
    assert_non_null(strstr(err, "bad range 3-1"));
    assert_int_equal(og_cpulist_parse("1,a", c, 16, &n, err, sizeof err), OG_ERR_FORMAT);
    assert_int_equal(og_cpulist_parse("2-", c, 16, &n, err, sizeof err), OG_ERR_FORMAT);
    assert_int_equal(og_cpulist_parse("1 2", c, 16, &n, err, sizeof err), OG_ERR_FORMAT);
    assert_int_equal(og_cpulist_parse("0-99999", c, 16, &n, err, sizeof err), OG_ERR_FORMAT);
    assert_int_equal(og_cpulist_parse("0-16", c, 16, &n, err, sizeof err), OG_ERR_RANGE);
}

static void put(const char *root, const char *rel, const char *text) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    for (char *p = path + strlen(root) + 1; *p; p++) /* mkdir -p of the parents */
        if (*p == '/') {
            *p = 0;
            mkdir(path, 0755);
            *p = '/';
        }
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* A fake two-node machine: node 1's CPUs, a node that does not exist, the GPU's node. */
static void test_numa_topology(void **state) {
    (void)state;
    char root[] = "/tmp/og_sysfs_XXXXXX", err[256];
    assert_non_null(mkdtemp(root));
    put(root, "devices/system/node/online", "0-1\n");
    put(root, "devices/system/node/node0/cpulist", "0-1,4\n");
    put(root, "devices/system/node/node1/cpulist", "2-3,5-7\n");
    int c[OG_MAX_CPUS], n;
    assert_int_equal(og_sys_node_cpus(root, 1, c, OG_MAX_CPUS, &n, err, sizeof err), OG_OK);
    static const int want[] = {2, 3, 5, 6, 7};
    assert_int_equal(n, 5);
    assert_memory_equal(c, want, sizeof want);
    assert_int_equal(og_sys_node_cpus(root, 2, c, OG_MAX_CPUS, &n, err, sizeof err), OG_ERR_NOT_FOUND);
    assert_string_equal(err, "NUMA node 2 does not exist (this machine's nodes: 0-1)");
    assert_int_equal(og_sys_node_cpus(root, -1, c, OG_MAX_CPUS, &n, err, sizeof err), OG_ERR_NOT_FOUND);
    /* GPUs: none; an NVIDIA non-display device and another vendor's GPU do not count */
    assert_int_equal(og_sys_gpu_node(root), -1);
    put(root, "bus/pci/devices/0000:03:00.0/vendor", "0x8086\n");
    put(root, "bus/pci/devices/0000:03:00.0/class", "0x030000\n");
    put(root, "bus/pci/devices/0000:03:00.0/numa_node", "0\n");
    put(root, "bus/pci/devices/0000:04:00.0/vendor", "0x10de\n");
    put(root, "bus/pci/devices/0000:04:00.0/class", "0x068000\n"); /* an NVSwitch bridge */
    put(root, "bus/pci/devices/0000:04:00.0/numa_node", "0\n");
    assert_int_equal(og_sys_gpu_node(root), -1);
    put(root, "bus/pci/devices/0000:17:00.0/vendor", "0x10de\n");
    put(root, "bus/pci/devices/0000:17:00.0/class", "0x030200\n");
    put(root, "bus/pci/devices/0000:17:00.0/numa_node", "-1\n");
    assert_int_equal(og_sys_gpu_node(root), -1); /* Linux does not know its node */
    put(root, "bus/pci/devices/0000:17:00.0/numa_node", "1\n");
    assert_int_equal(og_sys_gpu_node(root), 1);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    assert_int_equal(system(cmd), 0);
}

/* mbind on real pages (node 0 exists on every Linux machine): the kernel then reports
 * MPOL_PREFERRED on node 0 for an address inside; a refusal must carry its reason. */
static void test_numa_bind(void **state) {
    (void)state;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    char *m = mmap(NULL, 4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(m != MAP_FAILED);
    m[0] = 1; /* one page already there: it is moved, not refused */
    char err[256] = "";
    og_status st = og_sys_bind_memory(m + 100, 2 * page, 0, err, sizeof err);
    if (st) {
        assert_int_equal(st, OG_ERR_IO);
        assert_true(!strncmp(err, "mbind: ", 7) && strlen(err) > 7);
        print_message("mbind refused here: %s\n", err);
    } else {
        int mode = -1;
        unsigned long mask[OG_MAX_NUMA_NODES / (8 * sizeof(unsigned long))] = {0};
        assert_int_equal(get_mempolicy(&mode, mask, OG_MAX_NUMA_NODES + 1, m + page, MPOL_F_ADDR), 0);
        assert_int_equal(mode, MPOL_PREFERRED);
        assert_int_equal(mask[0], 1);
        assert_int_equal(get_mempolicy(&mode, NULL, 0, m + 3 * page, MPOL_F_ADDR), 0);
        assert_int_equal(mode, MPOL_DEFAULT); /* past the range: untouched */
    }
    assert_int_equal(og_sys_bind_memory(m, page, -1, err, sizeof err), OG_ERR_INVALID_ARG);
    assert_int_equal(og_sys_prefer_node(OG_MAX_NUMA_NODES, err, sizeof err), OG_ERR_INVALID_ARG);
    munmap(m, 4 * page);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_size), cmocka_unit_test(test_utf8_repair), cmocka_unit_test(test_fmt_bytes),
        cmocka_unit_test(test_fnv1a), cmocka_unit_test(test_checked_math), cmocka_unit_test(test_printable),
        cmocka_unit_test(test_cpulist), cmocka_unit_test(test_numa_topology), cmocka_unit_test(test_numa_bind),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
