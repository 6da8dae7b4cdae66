/* base: size parsing, byte formatting, hashing (hand-checked values). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_size), cmocka_unit_test(test_utf8_repair), cmocka_unit_test(test_fmt_bytes),
        cmocka_unit_test(test_fnv1a), cmocka_unit_test(test_checked_math), cmocka_unit_test(test_printable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
