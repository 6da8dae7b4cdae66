/* gguf: reader vs hand-assembled files, writer byte-exactness, round trip of
 * every metadata type, header-only mode, and the table of corrupt files (each
 * must fail with its own message; the same table runs through `onegpu gguf`,
 * which must exit 2). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gguf_fixture.h"
#include "og_gguf.h"

static const char *g_onegpu;  /* path of the onegpu binary (argv[1]) */
static char g_tmpdir[256];

static void write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n) assert_int_equal(fwrite(p, 1, n, f), n);
    fclose(f);
}

static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc((size_t)len + 1);
    assert_int_equal(fread(p, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return p;
}

/* The file at path holds exactly b's bytes; frees b. */
static void expect_file_bytes(const char *path, fx_buf *b) {
    size_t n;
    uint8_t *got = slurp(path, &n);
    assert_int_equal(n, b->n);
    assert_memory_equal(got, b->p, n);
    free(got);
    free(b->p);
}

/* ---- reading a hand-built file ------------------------------------------ */

static void test_read_fixture(void **state) {
    (void)state;
    fx_buf b = fx_build(CORRUPT_NONE);
    char err[512];
    og_gguf *g;
    assert_int_equal(og_gguf_open_memory(b.p, b.n, "fixture", 0, &g, err, sizeof err), OG_OK);
    assert_int_equal(og_gguf_version(g), 3);
    assert_int_equal(og_gguf_n_kv(g), 5);
    assert_int_equal(og_gguf_n_tensors(g), 2);
    assert_int_equal(og_gguf_alignment(g), 32);
    char arch[16];
    assert_int_equal(og_gguf_get_cstr(g, "general.architecture", arch, sizeof arch), OG_OK);
    assert_string_equal(arch, "test");
    bool flag = false;
    assert_int_equal(og_gguf_get_bool(g, "test.flag", &flag), OG_OK);
    assert_true(flag);
    const og_gguf_kv *list = og_gguf_find_kv(g, "test.list");
    assert_non_null(list);
    assert_int_equal(list->type, OG_GGUF_ARRAY);
    assert_int_equal(list->arr_type, OG_GGUF_UINT32);
    assert_int_equal(list->arr_n, 3);
    int64_t v;
    assert_int_equal(og_gguf_kv_num_i64(list, 2, &v), OG_OK);
    assert_int_equal(v, 3);
    assert_int_equal(og_gguf_kv_num_i64(list, 3, &v), OG_ERR_RANGE);
    const og_gguf_kv *names = og_gguf_find_kv(g, "test.names");
    assert_int_equal(names->arr_n, 2);
    assert_int_equal(names->strs[1].n, 2);
    assert_memory_equal(names->strs[1].s, "bc", 2);
    /* Wrong-type access is an error, not a crash. */
    uint32_t u;
    assert_int_equal(og_gguf_get_u32(g, "general.architecture", &u), OG_ERR_TYPE);
    assert_int_equal(og_gguf_get_u32(g, "no.such.key", &u), OG_ERR_NOT_FOUND);
    assert_int_equal(og_gguf_get_u32(g, "general.alignment", &u), OG_OK);
    assert_int_equal(u, 32);
    const og_gguf_tensor *t = og_gguf_find_tensor(g, "w.q8");
    assert_non_null(t);
    assert_int_equal(t->type, OG_TYPE_Q8_0);
    assert_int_equal(t->n_bytes, 34);
    assert_int_equal(t->offset, 64);
    /* data section starts at the first multiple of 32 after the infos */
    assert_int_equal(og_gguf_data_offset(g) % 32, 0);
    assert_ptr_equal(t->data, b.p + og_gguf_data_offset(g) + 64);
    assert_int_equal(((const uint8_t *)t->data)[0], (uint8_t)(64 * 7 + 1));
    assert_null(og_gguf_find_tensor(g, "w.missing"));
    og_gguf_close(g);

    /* Header-only: same tables, no data pointers. */
    assert_int_equal(og_gguf_open_memory(b.p, b.n, "fixture", OG_GGUF_HEADER_ONLY, &g, err, sizeof err), OG_OK);
    assert_null(og_gguf_find_tensor(g, "w.f32")->data);
    og_gguf_close(g);
    free(b.p);
}

/* Our writer, given the fixture's content, must produce the fixture's bytes. */
static void test_writer_matches_spec_bytes(void **state) {
    (void)state;
    fx_buf b = fx_build(CORRUPT_NONE);
    og_gguf_writer *w;
    assert_int_equal(og_gguf_writer_create(32, &w), OG_OK);
    assert_int_equal(og_gguf_writer_set_str(w, "general.architecture", "test"), OG_OK);
    assert_int_equal(og_gguf_writer_set_u32(w, "general.alignment", 32), OG_OK);
    assert_int_equal(og_gguf_writer_set_bool(w, "test.flag", true), OG_OK);
    uint32_t list[3] = {1, 2, 3};
    assert_int_equal(og_gguf_writer_set_arr(w, "test.list", OG_GGUF_UINT32, list, 3), OG_OK);
    og_str names[2] = {{"a", 1}, {"bc", 2}};
    assert_int_equal(og_gguf_writer_set_arr(w, "test.names", OG_GGUF_STRING, names, 2), OG_OK);
    uint8_t data[98];
    for (int i = 0; i < 98; i++) data[i] = (uint8_t)(i * 7 + 1);
    int64_t ne0[2] = {8, 2}, ne1[1] = {32};
    assert_int_equal(og_gguf_writer_add_tensor(w, "w.f32", OG_TYPE_F32, 2, ne0, data), OG_OK);
    assert_int_equal(og_gguf_writer_add_tensor(w, "w.q8", OG_TYPE_Q8_0, 1, ne1, data + 64), OG_OK);
    /* Refused: duplicate name, bad row length, too many dims. */
    assert_int_equal(og_gguf_writer_add_tensor(w, "w.q8", OG_TYPE_Q8_0, 1, ne1, data), OG_ERR_INVALID_ARG);
    int64_t bad[1] = {33};
    assert_int_equal(og_gguf_writer_add_tensor(w, "w.bad", OG_TYPE_Q8_0, 1, bad, data), OG_ERR_INVALID_ARG);
    char path[300], err[512];
    snprintf(path, sizeof path, "%s/writer.gguf", g_tmpdir);
    assert_int_equal(og_gguf_writer_write(w, path, NULL, NULL, err, sizeof err), OG_OK);
    og_gguf_writer_free(w);
    expect_file_bytes(path, &b);
}

/* general.alignment 1 or 2 is legal GGUF, but the kernels read f32 and fp16
 * fields in place: refused with a message that says what to do. */
static void test_small_alignment(void **state) {
    (void)state;
    for (uint32_t align = 1; align <= 2; align++) {
        og_gguf_writer *w;
        assert_int_equal(og_gguf_writer_create(align, &w), OG_OK);
        static uint8_t data[34];
        int64_t dims[1] = {32};
        assert_int_equal(og_gguf_writer_add_tensor(w, "t.q8", OG_TYPE_Q8_0, 1, dims, data), OG_OK);
        char path[300], err[512];
        snprintf(path, sizeof path, "%s/align%u.gguf", g_tmpdir, align);
        assert_int_equal(og_gguf_writer_write(w, path, NULL, NULL, err, sizeof err), OG_OK);
        og_gguf_writer_free(w);
        og_gguf *g = NULL;
        assert_int_equal(og_gguf_open(path, 0, &g, err, sizeof err), OG_ERR_UNSUPPORTED);
        assert_null(g);
        assert_non_null(strstr(err, "aligned to at least 4 bytes"));
    }
}

/* Every value type, scalars and arrays, written and read back equal; a second
 * write from what was read is byte-identical to the first file. */
static void test_round_trip_all_types(void **state) {
    (void)state;
    for (uint32_t align = 32; align <= 64; align *= 2) {
        og_gguf_writer *w;
        assert_int_equal(og_gguf_writer_create(align, &w), OG_OK);
        uint8_t u8 = 250; int8_t i8 = -7; uint16_t u16 = 65000; int16_t i16 = -30000;
        uint32_t u32 = 4000000000u; int32_t i32 = -2000000000; float f32 = 3.25f; uint8_t bo = 1;
        og_str str = {"h\xc3\xa9llo \xe4\xb8\x96", 10};
        uint64_t u64 = 18000000000000000000ull; int64_t i64 = -9000000000000000000ll; double f64 = -1.0 / 3.0;
        const void *vals[] = {&u8, &i8, &u16, &i16, &u32, &i32, &f32, &bo, &str, NULL, &u64, &i64, &f64};
        char key[64];
        for (uint32_t t = 0; t < OG_GGUF_VTYPE_COUNT; t++) {
            if (t == OG_GGUF_ARRAY) continue;
            snprintf(key, sizeof key, "rt.scalar.%s", og_gguf_vtype_name(t));
            assert_int_equal(og_gguf_writer_set(w, key, (og_gguf_vtype)t, vals[t]), OG_OK);
            uint8_t arr[5 * 8];
            for (int k = 0; k < 5; k++) memcpy(arr + k * og_gguf_vtype_size(t), vals[t], og_gguf_vtype_size(t));
            og_str sarr[5] = {str, {"", 0}, {"x", 1}, str, {"end", 3}};
            snprintf(key, sizeof key, "rt.array.%s", og_gguf_vtype_name(t));
            assert_int_equal(og_gguf_writer_set_arr(w, key, (og_gguf_vtype)t, t == OG_GGUF_STRING ? (void *)sarr : (void *)arr, 5), OG_OK);
        }
        assert_int_equal(og_gguf_writer_set_arr(w, "rt.array.empty", OG_GGUF_INT32, NULL, 0), OG_OK);
        assert_int_equal(og_gguf_writer_set_arr(w, "rt.nested", OG_GGUF_ARRAY, &u8, 1), OG_ERR_INVALID_ARG);
        /* tensors of several types, odd sizes so padding is exercised */
        static uint8_t data[3][4096];
        for (int k = 0; k < 3; k++)
            for (int i = 0; i < 4096; i++) data[k][i] = (uint8_t)(i * (k + 3) + k);
        int64_t a[1] = {7}, bq[2] = {64, 3}, c3[3] = {5, 3, 2};
        assert_int_equal(og_gguf_writer_add_tensor(w, "t.f16", OG_TYPE_F16, 1, a, data[0]), OG_OK);
        assert_int_equal(og_gguf_writer_add_tensor(w, "t.q8", OG_TYPE_Q8_0, 2, bq, data[1]), OG_OK);
        assert_int_equal(og_gguf_writer_add_tensor(w, "t.f32", OG_TYPE_F32, 3, c3, data[2]), OG_OK);
        char p1[300], p2[300], err[512];
        snprintf(p1, sizeof p1, "%s/rt1.gguf", g_tmpdir);
        snprintf(p2, sizeof p2, "%s/rt2.gguf", g_tmpdir);
        assert_int_equal(og_gguf_writer_write(w, p1, NULL, NULL, err, sizeof err), OG_OK);
        og_gguf_writer_free(w);

        og_gguf *g;
        assert_int_equal(og_gguf_open(p1, 0, &g, err, sizeof err), OG_OK);
        assert_int_equal(og_gguf_alignment(g), align);
        for (uint32_t t = 0; t < OG_GGUF_VTYPE_COUNT; t++) {
            if (t == OG_GGUF_ARRAY) continue;
            snprintf(key, sizeof key, "rt.scalar.%s", og_gguf_vtype_name(t));
            const og_gguf_kv *kv = og_gguf_find_kv(g, key);
            assert_non_null(kv);
            assert_int_equal(kv->type, t);
            if (t == OG_GGUF_STRING) {
                assert_int_equal(kv->str.n, str.n);
                assert_memory_equal(kv->str.s, str.s, str.n);
            } else {
                assert_memory_equal(kv->data, vals[t], og_gguf_vtype_size(t));
            }
            snprintf(key, sizeof key, "rt.array.%s", og_gguf_vtype_name(t));
            kv = og_gguf_find_kv(g, key);
            assert_int_equal(kv->arr_type, t);
            assert_int_equal(kv->arr_n, 5);
            if (t == OG_GGUF_STRING) {
                assert_int_equal(kv->strs[1].n, 0);
                assert_int_equal(kv->strs[4].n, 3);
                assert_memory_equal(kv->strs[4].s, "end", 3);
            } else {
                assert_memory_equal((const uint8_t *)kv->data + 4 * og_gguf_vtype_size(t), vals[t], og_gguf_vtype_size(t));
            }
        }
        uint64_t got64;
        assert_int_equal(og_gguf_get_u64(g, "rt.scalar.uint64", &got64), OG_OK);
        assert_true(got64 == u64);
        int64_t gi;
        assert_int_equal(og_gguf_get_i64(g, "rt.scalar.int8", &gi), OG_OK);
        assert_int_equal(gi, -7);
        double gd;
        assert_int_equal(og_gguf_get_f64(g, "rt.scalar.float64", &gd), OG_OK);
        assert_true(gd == f64);
        assert_int_equal(og_gguf_find_kv(g, "rt.array.empty")->arr_n, 0);
        const og_gguf_tensor *tq = og_gguf_find_tensor(g, "t.q8");
        assert_int_equal(tq->n_bytes, 2 * 34 * 3);
        assert_memory_equal(tq->data, data[1], tq->n_bytes);
        assert_int_equal(tq->offset % align, 0);
        const og_gguf_tensor *t3 = og_gguf_find_tensor(g, "t.f32");
        assert_int_equal(t3->n_dims, 3);
        assert_int_equal(t3->ne[2], 2);
        assert_memory_equal(t3->data, data[2], 5 * 3 * 2 * 4);

        /* Re-write everything that was read: identical file. */
        og_gguf_writer *w2;
        assert_int_equal(og_gguf_writer_create(align, &w2), OG_OK);
        for (uint64_t i = 0; i < og_gguf_n_kv(g); i++) {
            const og_gguf_kv *kv = og_gguf_kv_at(g, i);
            if (kv->type == OG_GGUF_ARRAY)
                assert_int_equal(og_gguf_writer_set_arr(w2, kv->key, kv->arr_type,
                                                        kv->arr_type == OG_GGUF_STRING ? (const void *)kv->strs : kv->data, kv->arr_n), OG_OK);
            else
                assert_int_equal(og_gguf_writer_set(w2, kv->key, kv->type, kv->type == OG_GGUF_STRING ? (const void *)&kv->str : kv->data), OG_OK);
        }
        for (uint64_t i = 0; i < og_gguf_n_tensors(g); i++) {
            const og_gguf_tensor *t = og_gguf_tensor_at(g, i);
            assert_int_equal(og_gguf_writer_add_tensor(w2, t->name, t->type, t->n_dims, t->ne, t->data), OG_OK);
        }
        assert_int_equal(og_gguf_writer_write(w2, p2, NULL, NULL, err, sizeof err), OG_OK);
        og_gguf_writer_free(w2);
        og_gguf_close(g);
        size_t n1, n2;
        uint8_t *b1 = slurp(p1, &n1), *b2 = slurp(p2, &n2);
        assert_int_equal(n1, n2);
        assert_memory_equal(b1, b2, n1);
        free(b1);
        free(b2);
    }
}

/* Sparse write: tensor data left as a hole, file still the full size and valid. */
/* I32 tensors (V4's ffn_gate_tid2eid hash-routing table): written, read back through
 * the checked accessor (each value, the index bounds, the type, header-only), the
 * range check, and a hand-made tensor whose bytes the accessor reads unaligned. */
static void test_i32_tensor(void **state) {
    (void)state;
    enum { K = 6, V = 37 }; /* [n_expert_used, n_vocab] as V4 stores it */
    int32_t tab[K * V];
    for (int i = 0; i < K * V; i++) tab[i] = (int32_t)((i * 7919) % 256) - (i == 5 ? 1000 : 0);
    og_gguf_writer *w;
    assert_int_equal(og_gguf_writer_create(32, &w), OG_OK);
    const int64_t ne[2] = {K, V}, ne1[1] = {3};
    const float f3[3] = {1, 2, 3};
    assert_int_equal(og_gguf_writer_add_tensor(w, "blk.0.ffn_gate_tid2eid.weight", OG_TYPE_I32, 2, ne, tab), OG_OK);
    assert_int_equal(og_gguf_writer_add_tensor(w, "f", OG_TYPE_F32, 1, ne1, f3), OG_OK);
    char path[300], err[512];
    snprintf(path, sizeof path, "%s/i32.gguf", g_tmpdir);
    assert_int_equal(og_gguf_writer_write(w, path, NULL, NULL, err, sizeof err), OG_OK);
    og_gguf_writer_free(w);
    og_gguf *g;
    assert_int_equal(og_gguf_open(path, 0, &g, err, sizeof err), OG_OK);
    const og_gguf_tensor *t = og_gguf_find_tensor(g, "blk.0.ffn_gate_tid2eid.weight");
    assert_non_null(t);
    assert_int_equal(t->type, OG_TYPE_I32);
    assert_int_equal(t->n_bytes, 4 * K * V);
    for (uint64_t i = 0; i < K * V; i++) {
        int32_t v = 0;
        assert_int_equal(og_gguf_tensor_i32(t, i, &v), OG_OK);
        assert_int_equal(v, tab[i]);
    }
    int32_t v = 12345;
    assert_int_equal(og_gguf_tensor_i32(t, K * V, &v), OG_ERR_RANGE);
    assert_int_equal(og_gguf_tensor_i32(t, UINT64_MAX, &v), OG_ERR_RANGE);
    assert_int_equal(v, 12345);
    assert_int_equal(og_gguf_tensor_i32(og_gguf_find_tensor(g, "f"), 0, &v), OG_ERR_TYPE);
    uint64_t bad = 0;
    assert_int_equal(og_gguf_tensor_i32_check(t, -1000, 255, &bad), OG_OK);
    assert_int_equal(og_gguf_tensor_i32_check(t, 0, 255, &bad), OG_ERR_RANGE);
    assert_int_equal(bad, 5); /* the one negative value */
    assert_int_equal(og_gguf_tensor_i32_check(t, -1000, 200, &bad), OG_ERR_RANGE);
    assert_true(tab[bad] > 200); /* the first one above 200 */
    for (uint64_t i = 0; i < bad; i++) assert_true(tab[i] <= 200);
    og_gguf_close(g);
    assert_int_equal(og_gguf_open(path, OG_GGUF_HEADER_ONLY, &g, err, sizeof err), OG_OK);
    t = og_gguf_find_tensor(g, "blk.0.ffn_gate_tid2eid.weight");
    assert_int_equal(og_gguf_tensor_i32(t, 0, &v), OG_ERR_INVALID_ARG);
    assert_int_equal(og_gguf_tensor_i32_check(t, 0, 1, NULL), OG_ERR_INVALID_ARG);
    og_gguf_close(g);
    /* a tensor struct over unaligned bytes (as a memory image may hold them) */
    uint8_t raw[1 + 8];
    const int32_t two[2] = {-7, 1 << 30};
    memcpy(raw + 1, two, 8);
    og_gguf_tensor ht = {.name = "h", .n_dims = 1, .ne = {2, 1, 1, 1}, .type = OG_TYPE_I32, .n_bytes = 8, .data = raw + 1};
    assert_int_equal(og_gguf_tensor_i32(&ht, 1, &v), OG_OK);
    assert_int_equal(v, 1 << 30);
    ht.ne[0] = 3; /* a shape larger than its bytes (never from the reader): still bounded by the bytes */
    assert_int_equal(og_gguf_tensor_i32(&ht, 2, &v), OG_ERR_RANGE);
}

static void test_sparse_write(void **state) {
    (void)state;
    og_gguf_writer *w;
    assert_int_equal(og_gguf_writer_create(32, &w), OG_OK);
    og_gguf_writer_set_str(w, "general.architecture", "test");
    int64_t ne[3] = {4096, 4096, 64}; /* 4 GiB of F32 */
    assert_int_equal(og_gguf_writer_add_tensor(w, "big", OG_TYPE_F32, 3, ne, NULL), OG_OK);
    char path[300], err[512];
    snprintf(path, sizeof path, "%s/sparse.gguf", g_tmpdir);
    assert_int_equal(og_gguf_writer_write(w, path, NULL, NULL, err, sizeof err), OG_OK);
    og_gguf_writer_free(w);
    og_gguf *g;
    assert_int_equal(og_gguf_open(path, OG_GGUF_HEADER_ONLY, &g, err, sizeof err), OG_OK);
    assert_int_equal(og_gguf_file_size(g), og_gguf_data_offset(g) + (4096ull * 4096 * 64 * 4));
    og_gguf_close(g);
    unlink(path);
}

static og_status fill_never(void *ctx, uint64_t i, const og_gguf_tensor *t, void *buf, char *err, size_t errlen) {
    (void)ctx, (void)i, (void)t, (void)buf, (void)err, (void)errlen;
    fail_msg("fill called for a file the disk cannot hold");
    return OG_ERR_STATE;
}

/* 1 PiB of tensor data to fill: refused before any byte is written (no temporary
 * left, fill never called), with the sizes; the same tensor as a hole is written. */
static void test_write_refuses_over_free_disk(void **state) {
    (void)state;
    og_gguf_writer *w;
    assert_int_equal(og_gguf_writer_create(32, &w), OG_OK);
    og_gguf_writer_set_str(w, "general.architecture", "test");
    int64_t ne[3] = {1 << 20, 1 << 20, 256}; /* 2^48 F32 = 1 PiB */
    assert_int_equal(og_gguf_writer_add_tensor(w, "huge", OG_TYPE_F32, 3, ne, NULL), OG_OK);
    char dir[300], path[400], err[512];
    snprintf(dir, sizeof dir, "%s/nospace", g_tmpdir);
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/huge.gguf", dir);
    assert_int_equal(og_gguf_writer_write(w, path, fill_never, NULL, err, sizeof err), OG_ERR_IO);
    assert_non_null(strstr(err, "needs 1048576.00 GiB of disk"));
    assert_non_null(strstr(err, "GiB free there"));
    assert_int_equal(rmdir(dir), 0); /* empty: neither the file nor a temporary was left */
    og_gguf_writer_free(w);
}

/* ---- corrupt files ---------------------------------------------------------- */

typedef struct corrupt_case {
    enum fx_corruption c;
    const char *name;
    const char *expect; /* distinctive part of the message */
} corrupt_case;

static const corrupt_case cases[] = {
    {CORRUPT_MAGIC, "bad magic", "bad magic"},
    {CORRUPT_VERSION1, "version 1", "version 1 (32-bit counts)"},
    {CORRUPT_VERSION4, "version 4", "unsupported GGUF version 4"},
    {CORRUPT_BIG_ENDIAN, "big endian", "big-endian"},
    {CORRUPT_EMPTY, "empty file", "empty file"},
    {CORRUPT_TRUNC_HEADER, "truncated header", "truncated header"},
    {CORRUPT_TRUNC_DATA, "truncated data", "the file is truncated"},
    {CORRUPT_N_KV, "absurd n_kv", "metadata count 576460752303423488 is impossible"},
    {CORRUPT_N_TENSORS, "absurd n_tensors", "tensor count 1152921504606846976 is impossible"},
    {CORRUPT_KEY_LEN, "key length", "metadata key length 1099511627776 exceeds"},
    {CORRUPT_EMPTY_KEY, "empty key", "metadata key 0 is empty"},
    {CORRUPT_DUP_KEY, "duplicate key", "duplicate metadata key 'general.architecture'"},
    {CORRUPT_VALUE_TYPE, "value type", "unknown value type 99"},
    {CORRUPT_NESTED, "nested array", "nested arrays are not allowed"},
    {CORRUPT_BOOL, "bool 2", "is 2, not 0 or 1"},
    {CORRUPT_ALIGN_VALUE, "alignment 48", "general.alignment 48 is not a non-zero power of two"},
    {CORRUPT_ALIGN_TYPE, "alignment type", "general.alignment must be uint32, not uint64"},
    {CORRUPT_ARRAY_LEN, "array length", "claims 1099511627776 elements"},
    {CORRUPT_STRARR_EOF, "string past EOF", "string array element length 1048576 runs past the end"},
    {CORRUPT_KEY_NUL, "NUL in key", "contains a NUL byte"},
    {CORRUPT_NAME_LONG, "long tensor name", "name is 64 bytes (at most 63 allowed)"},
    {CORRUPT_DUP_NAME, "duplicate tensor", "duplicate tensor name 'w.f32'"},
    {CORRUPT_NDIMS, "5 dims", "has 5 dimensions"},
    {CORRUPT_NEG_DIM, "negative dim", "dimension 1 is negative"},
    {CORRUPT_DIM_OVERFLOW, "dim overflow", "element count overflows"},
    {CORRUPT_TYPE_UNKNOWN, "type 99", "unknown or removed ggml type id 99"},
    {CORRUPT_TYPE_REMOVED, "type 4 (Q4_2)", "unknown or removed ggml type id 4"},
    {CORRUPT_BLOCK, "row vs block", "row length 33 is not a multiple of the Q8_0 block size 32"},
    {CORRUPT_MISALIGNED, "misaligned offset", "offset 70 is not a multiple of the alignment 32"},
    {CORRUPT_OUTSIDE, "offset outside", "points outside the file"},
    {CORRUPT_OVERLAP, "overlap", "overlaps tensor 'w.f32'"},
};
#define N_CASES (sizeof cases / sizeof cases[0])

static void test_corrupt_library(void **state) {
    const corrupt_case *cc = *state;
    fx_buf b = fx_build(cc->c);
    char err[1024] = "";
    og_gguf *g = (og_gguf *)1;
    og_status st = og_gguf_open_memory(b.p, b.n, "bad.gguf", 0, &g, err, sizeof err);
    if (st == OG_OK || !strstr(err, cc->expect) || !strstr(err, "bad.gguf: offset "))
        fail_msg("case '%s': status %d, message '%s' (want '%s')", cc->name, st, err, cc->expect);
    assert_null(g);
    /* header-only mode catches the same defects */
    st = og_gguf_open_memory(b.p, b.n, "bad.gguf", OG_GGUF_HEADER_ONLY, &g, err, sizeof err);
    assert_int_not_equal(st, OG_OK);
    free(b.p);
}

/* `onegpu gguf PATH`: its exit code (-1 if it did not exit), stderr into out. */
static int gguf_cli(const char *path, char *out, size_t outlen) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' gguf '%s' 2>&1 >/dev/null", g_onegpu, path);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, outlen - 1, p);
    out[n] = '\0';
    int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void test_corrupt_cli(void **state) {
    const corrupt_case *cc = *state;
    fx_buf b = fx_build(cc->c);
    char path[300], out[2048] = "";
    snprintf(path, sizeof path, "%s/corrupt_%d.gguf", g_tmpdir, (int)cc->c);
    write_file(path, b.p, b.n);
    free(b.p);
    int rc = gguf_cli(path, out, sizeof out);
    if (rc != 2 || !strstr(out, cc->expect) || !strstr(out, path))
        fail_msg("case '%s': exit %d, stderr '%s' (want exit 2 and '%s')", cc->name, rc, out, cc->expect);
    unlink(path);
}

/* Every case has its own message: no two expectations match the same text. */
static void test_messages_distinct(void **state) {
    (void)state;
    char msgs[N_CASES][1024];
    for (size_t i = 0; i < N_CASES; i++) {
        fx_buf b = fx_build(cases[i].c);
        og_gguf *g;
        og_gguf_open_memory(b.p, b.n, "bad.gguf", 0, &g, msgs[i], sizeof msgs[i]);
        free(b.p);
    }
    for (size_t i = 0; i < N_CASES; i++)
        for (size_t j = 0; j < N_CASES; j++)
            if (i != j && strstr(msgs[j], cases[i].expect))
                fail_msg("message of '%s' also matches '%s'", cases[j].name, cases[i].name);
}

/* An overlap must be found even when an empty tensor sorts between the two. */
static void test_overlap_behind_empty_tensor(void **state) {
    (void)state;
    fx_buf b = {0};
    fx_bytes(&b, "GGUF", 4);
    fx_u32(&b, 3);
    fx_u64(&b, 3);
    fx_u64(&b, 0);
    const struct { const char *name; uint64_t ne0, off; } t[3] = {{"a", 256, 0}, {"z", 0, 256}, {"c", 8, 512}};
    for (int i = 0; i < 3; i++) {
        fx_str(&b, t[i].name);
        fx_u32(&b, 1);
        fx_u64(&b, t[i].ne0);
        fx_u32(&b, 0);
        fx_u64(&b, t[i].off);
    }
    while (b.n % 32) fx_u8(&b, 0);
    for (int i = 0; i < 1024 + 64; i++) fx_u8(&b, 0);
    og_gguf *g;
    char err[512];
    assert_int_equal(og_gguf_open_memory(b.p, b.n, "ov.gguf", 0, &g, err, sizeof err), OG_ERR_FORMAT);
    assert_non_null(strstr(err, "tensor 'c' data (offset 512) overlaps tensor 'a'"));
    free(b.p);
}

/* Names from a file are escaped before they reach a terminal. */
static void test_escaped_names(void **state) {
    (void)state;
    fx_buf b = {0};
    fx_bytes(&b, "GGUF", 4);
    fx_u32(&b, 3);
    fx_u64(&b, 0);
    fx_u64(&b, 2);
    for (int i = 0; i < 2; i++) {
        fx_str(&b, "\x1b]0;pwned\x07\xff");
        fx_u32(&b, 7);
        fx_u8(&b, 1);
    }
    og_gguf *g;
    char err[512];
    assert_int_equal(og_gguf_open_memory(b.p, b.n, "esc.gguf", 0, &g, err, sizeof err), OG_ERR_FORMAT);
    assert_non_null(strstr(err, "duplicate metadata key '\\x1b]0;pwned\\x07\\xff'"));
    for (const char *p = err; *p; p++) assert_true((unsigned char)*p >= 0x20);
    free(b.p);
}

/* Every prefix of a valid file is refused cleanly (no crash, no success). */
static void test_every_truncation(void **state) {
    (void)state;
    fx_buf b = fx_build(CORRUPT_NONE);
    char err[512];
    for (size_t n = 0; n < b.n - 30; n++) { /* the last 30 bytes are data padding + tail */
        uint8_t *copy = malloc(n ? n : 1);
        memcpy(copy, b.p, n);
        og_gguf *g;
        og_status st = og_gguf_open_memory(copy, n, "cut.gguf", 0, &g, err, sizeof err);
        if (st == OG_OK) fail_msg("prefix of %zu bytes accepted", n);
        free(copy);
    }
    free(b.p);
}

/* ---- split models (gguf.md §7.4) ------------------------------------------ */

typedef struct split_part_def {
    bool absent;       /* not written: a missing part */
    const char *arch;
    int no, count, total;
    const char *tensors;
} split_part_def;

typedef struct split_case {
    const char *name;
    split_part_def parts[3]; /* written as m-0000k-of-00003.gguf */
    int given;               /* the part given to the reader, 1-based */
    og_status st;
    int blame;               /* the part whose path the message must name, 1-based */
    int also;                /* another part it must name (0: none) */
    const char *expect;
} split_case;

#define P(no, total, t) {false, NULL, no, 3, total, t}
static const split_case split_cases[] = {
    {"split: valid", {P(0, 4, "a"), P(1, 4, "bc"), P(2, 4, "d")}, 1, OG_OK, 0, 0, NULL},
    {"split: missing part", {P(0, 4, "a"), P(1, 4, "bc"), {true, NULL, 0, 0, 0, ""}}, 1, OG_ERR_IO, 3, 1,
     "cannot open: No such file or directory (part 3 of 3 of the split model"},
    {"split: wrong split.count", {P(0, 4, "a"), {false, NULL, 1, 4, 4, "bc"}, P(2, 4, "d")}, 1, OG_ERR_FORMAT, 2, 1,
     "split.count is 4 but the first part"},
    {"split: out of order", {P(0, 4, "a"), P(2, 4, "bc"), P(1, 4, "d")}, 1, OG_ERR_FORMAT, 2, 0,
     "split.no is 2 (part 3) but its name makes it part 2 (split.no 1)"},
    {"split: duplicated part", {P(0, 4, "a"), P(1, 4, "bc"), P(1, 4, "bc")}, 1, OG_ERR_FORMAT, 3, 0,
     "split.no is 1 (part 2) but its name makes it part 3 (split.no 2)"},
    {"split: split.no past the count", {P(0, 4, "a"), P(1, 4, "bc"), P(3, 4, "d")}, 1, OG_ERR_FORMAT, 3, 0,
     "split.no 3 is not below split.count 3"},
    {"split: tensor in two parts", {P(0, 4, "a"), P(1, 4, "bc"), P(2, 4, "c")}, 1, OG_ERR_FORMAT, 3, 2,
     "tensor 'c' is also in"},
    {"split: other model's tensor count", {P(0, 4, "a"), P(1, 5, "bc"), P(2, 4, "d")}, 1, OG_ERR_FORMAT, 2, 1,
     "split.tensors.count is 5 but the first part"},
    {"split: other model's key", {{false, "deepseek2", 0, 3, 4, "a"}, {false, "llama", 1, 3, 4, "bc"}, P(2, 4, "d")}, 1,
     OG_ERR_FORMAT, 2, 1, "metadata key 'general.architecture' differs from the first part's"},
    {"split: tensor total", {P(0, 5, "a"), P(1, 5, "bc"), P(2, 5, "d")}, 1, OG_ERR_FORMAT, 1, 0,
     "the 3 parts hold 4 tensors but split.tensors.count is 5"},
    {"split: part without split keys", {P(0, 4, "a"), P(-1, 0, "bc"), P(2, 4, "d")}, 1, OG_ERR_FORMAT, 2, 1,
     "is not a part of a split model (split.count absent or 0)"},
    {"split: split.count a string", {{false, NULL, 0, FX_COUNT_AS_STRING, 4, "a"}, P(1, 4, "bc"), P(2, 4, "d")}, 1,
     OG_ERR_FORMAT, 1, 0, "split.count has type string, not an integer"},
    {"split: later part given", {P(0, 4, "a"), P(1, 4, "bc"), P(2, 4, "d")}, 2, OG_ERR_INVALID_ARG, 2, 1,
     "this is part 2 of 3 of a split model; give the first part, "},
};
#undef P
#define N_SPLIT_CASES (sizeof split_cases / sizeof split_cases[0])

static void split_case_path(size_t i, int part, char *buf, size_t n) {
    snprintf(buf, n, "%s/split%zu/m-%05d-of-00003.gguf", g_tmpdir, i, part);
}

/* Writes fx_build_split_part's file at path. */
static void fx_split_part(const char *path, const char *arch, int no, int count, int total, const char *tensors) {
    fx_buf b = fx_build_split_part(arch, no, count, total, tensors);
    write_file(path, b.p, b.n);
    free(b.p);
}

static void write_split_case(size_t i) {
    char dir[300], path[400];
    snprintf(dir, sizeof dir, "%s/split%zu", g_tmpdir, i);
    mkdir(dir, 0755);
    for (int k = 0; k < 3; k++) {
        const split_part_def *d = &split_cases[i].parts[k];
        split_case_path(i, k + 1, path, sizeof path);
        unlink(path);
        if (!d->absent) fx_split_part(path, d->arch, d->no, d->count, d->total, d->tensors);
    }
}

/* Every case, full and header-only: its status, its message, and the path of
 * the file at fault (and of the other file involved) in the message. */
static void test_split_errors(void **state) {
    const split_case *sc = *state;
    size_t i = (size_t)(sc - split_cases);
    write_split_case(i);
    char given[400], blame[400], also[400];
    split_case_path(i, sc->given, given, sizeof given);
    for (int mode = 0; mode < 2; mode++) {
        char err[2048] = "";
        og_gguf *g = (og_gguf *)1;
        og_status st = og_gguf_open(given, mode ? OG_GGUF_HEADER_ONLY : 0, &g, err, sizeof err);
        if (st != sc->st) fail_msg("%s: status %d (want %d): %s", sc->name, st, sc->st, err);
        if (st != OG_OK) {
            assert_null(g);
            split_case_path(i, sc->blame, blame, sizeof blame);
            if (sc->also) split_case_path(i, sc->also, also, sizeof also);
            /* the blamed file leads the message */
            if (!strstr(err, sc->expect) || strncmp(err, blame, strlen(blame)) != 0 || (sc->also && !strstr(err, also)))
                fail_msg("%s: message '%s' (want '%s', naming %s first%s%s)", sc->name, err, sc->expect, blame,
                         sc->also ? " and " : "", sc->also ? also : "");
            continue;
        }
        /* the valid set reads as one model of 4 tensors, each in its own part */
        assert_int_equal(og_gguf_n_parts(g), 3);
        assert_int_equal(og_gguf_n_tensors(g), 4);
        const char *names = "abcd";
        const uint32_t part_of[4] = {0, 1, 1, 2};
        uint64_t size_sum = 0;
        for (uint32_t k = 0; k < 3; k++) {
            og_gguf_part p;
            assert_int_equal(og_gguf_part_at(g, k, &p), OG_OK);
            split_case_path(i, (int)k + 1, blame, sizeof blame);
            assert_string_equal(p.path, blame);
            assert_int_equal(p.n_tensors, k == 1 ? 2 : 1);
            size_sum += p.file_size;
        }
        og_gguf_part p;
        assert_int_equal(og_gguf_part_at(g, 3, &p), OG_ERR_RANGE);
        assert_int_equal(og_gguf_file_size(g), size_sum);
        for (int t = 0; t < 4; t++) {
            char name[2] = {names[t], 0};
            const og_gguf_tensor *ti = og_gguf_find_tensor(g, name);
            assert_non_null(ti);
            assert_ptr_equal(ti, og_gguf_tensor_at(g, (uint64_t)t));
            assert_int_equal(ti->part, part_of[t]);
            assert_int_equal(ti->offset, t == 2 ? 32 : 0);
            if (mode) {
                assert_null(ti->data);
            } else {
                uint8_t want[32];
                memset(want, names[t], 32);
                assert_memory_equal(ti->data, want, 32);
            }
        }
        og_gguf_close(g);
    }
    /* the CLI says the same and exits 2 */
    if (sc->st != OG_OK) {
        char out[4096] = "";
        int rc = gguf_cli(given, out, sizeof out);
        if (rc != 2 || !strstr(out, sc->expect) || !strstr(out, blame))
            fail_msg("%s: onegpu gguf exit %d, stderr '%s'", sc->name, rc, out);
    }
}

/* The first part renamed away from its gguf-split name: the others cannot be
 * found, and the message says why. A memory image of a first part is refused. */
static void test_split_first_renamed(void **state) {
    (void)state;
    char path[300], err[1024];
    snprintf(path, sizeof path, "%s/renamed.gguf", g_tmpdir);
    fx_split_part(path, NULL, 0, 3, 4, "a");
    og_gguf *g;
    assert_int_equal(og_gguf_open(path, 0, &g, err, sizeof err), OG_ERR_FORMAT);
    assert_int_equal(strncmp(err, path, strlen(path)), 0);
    assert_non_null(strstr(err, "its name does not end in -00001-of-00003.gguf"));
    size_t n;
    uint8_t *img = slurp(path, &n);
    assert_int_equal(og_gguf_open_memory(img, n, "img", 0, &g, err, sizeof err), OG_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "img: part 1 of 3 of a split model"));
    free(img);
    /* split.count 0 (gguf-split --merge writes it into the merged file): a single file */
    fx_split_part(path, NULL, 0, 0, 0, "ab");
    assert_int_equal(og_gguf_open(path, 0, &g, err, sizeof err), OG_OK);
    assert_int_equal(og_gguf_n_parts(g), 1);
    assert_int_equal(og_gguf_n_tensors(g), 2);
    og_gguf_close(g);
    /* a one-part split set is just a file (llama.cpp's gguf-split writes those too) */
    fx_split_part(path, NULL, 0, 1, 2, "ab");
    assert_int_equal(og_gguf_open(path, 0, &g, err, sizeof err), OG_OK);
    assert_int_equal(og_gguf_n_parts(g), 1);
    assert_int_equal(og_gguf_n_tensors(g), 2);
    og_gguf_close(g);
    fx_split_part(path, NULL, 0, 1, 3, "ab");
    assert_int_equal(og_gguf_open(path, 0, &g, err, sizeof err), OG_ERR_FORMAT);
    assert_non_null(strstr(err, "the 1 parts hold 2 tensors but split.tensors.count is 3"));
    unlink(path);
}

/* The writer's split, against parts assembled by hand from gguf.md: tensors
 * t0 F32[8] (32 B), t1 F32[200] (800 B), t2, t3 F32[8]; at most 1024 bytes.
 * Part 1 header: 24 + general.architecture (44) + split keys (22 + 25 + 35) +
 * info (34) = 184 -> 192, + 32 data = 224; adding t1 would make 1056 > 1024.
 * Part 2: 24 + 82 + 2 * 34 = 174 -> 192, + 800 + 32 = 1024 (exactly the limit);
 * t3 would make 1088. Part 3: t3, 140 -> 160 + 32 = 192. */
static void test_split_writer_bytes(void **state) {
    (void)state;
    og_gguf_writer *w;
    assert_int_equal(og_gguf_writer_create(32, &w), OG_OK);
    assert_int_equal(og_gguf_writer_set_str(w, "general.architecture", "test"), OG_OK);
    static float data[4][200];
    const int64_t ne[4] = {8, 200, 8, 8};
    for (int t = 0; t < 4; t++) {
        for (int i = 0; i < 200; i++) data[t][i] = (float)(t * 1000 + i);
        char name[8];
        snprintf(name, sizeof name, "t%d", t);
        assert_int_equal(og_gguf_writer_add_tensor(w, name, OG_TYPE_F32, 1, &ne[t], data[t]), OG_OK);
    }
    char base[300], err[512];
    snprintf(base, sizeof base, "%s/ws.gguf", g_tmpdir);
    uint32_t n_parts = 0;
    assert_int_equal(og_gguf_writer_write_split(w, base, 0, NULL, NULL, &n_parts, err, sizeof err), OG_ERR_INVALID_ARG);
    assert_int_equal(og_gguf_writer_write_split(w, base, 1024, NULL, NULL, &n_parts, err, sizeof err), OG_OK);
    og_gguf_writer_free(w);
    assert_int_equal(n_parts, 3);
    const size_t want_size[3] = {224, 1024, 192};
    const int first[3] = {0, 1, 3}, count[3] = {1, 2, 1};
    for (int k = 0; k < 3; k++) {
        fx_buf b = {0};
        fx_bytes(&b, "GGUF", 4);
        fx_u32(&b, 3);
        fx_u64(&b, (uint64_t)count[k]);
        fx_u64(&b, k == 0 ? 4 : 3);
        if (k == 0) {
            fx_str(&b, "general.architecture");
            fx_u32(&b, 8);
            fx_str(&b, "test");
        }
        uint16_t no = (uint16_t)k, cnt = 3;
        int32_t total = 4;
        fx_str(&b, "split.no");
        fx_u32(&b, 2);
        fx_bytes(&b, &no, 2);
        fx_str(&b, "split.count");
        fx_u32(&b, 2);
        fx_bytes(&b, &cnt, 2);
        fx_str(&b, "split.tensors.count");
        fx_u32(&b, 5);
        fx_bytes(&b, &total, 4);
        uint64_t off = 0;
        for (int t = first[k]; t < first[k] + count[k]; t++) {
            char name[8];
            snprintf(name, sizeof name, "t%d", t);
            fx_str(&b, name);
            fx_u32(&b, 1);
            fx_u64(&b, (uint64_t)ne[t]);
            fx_u32(&b, 0);
            fx_u64(&b, off);
            off += (uint64_t)ne[t] * 4;
        }
        while (b.n % 32) fx_u8(&b, 0);
        for (int t = first[k]; t < first[k] + count[k]; t++) fx_bytes(&b, data[t], (size_t)ne[t] * 4);
        assert_int_equal(b.n, want_size[k]);
        char path[400];
        snprintf(path, sizeof path, "%s/ws-%05d-of-00003.gguf", g_tmpdir, k + 1);
        expect_file_bytes(path, &b);
    }
    /* and the reader joins them back */
    char first_part[400];
    snprintf(first_part, sizeof first_part, "%s/ws-00001-of-00003.gguf", g_tmpdir);
    og_gguf *g;
    assert_int_equal(og_gguf_open(first_part, 0, &g, err, sizeof err), OG_OK);
    assert_int_equal(og_gguf_n_tensors(g), 4);
    assert_memory_equal(og_gguf_find_tensor(g, "t3")->data, data[3], 32);
    og_gguf_close(g);
}

/* A command's whole stdout; fails the test unless it exits 0. */
static char *run_stdout(const char *cmd) {
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t cap = 1 << 16, n = 0;
    char *out = malloc(cap);
    size_t r;
    while ((r = fread(out + n, 1, cap - n - 1, p)) > 0) {
        n += r;
        if (n + 1 == cap) out = realloc(out, cap *= 2);
    }
    out[n] = '\0';
    int st = pclose(p);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) fail_msg("'%s' failed (exit %d)", cmd, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    return out;
}

/* A later part whose header (2000 tensor infos of 60-byte names, ~200 KB) is
 * larger than the reader's first read of a part: header-only mode reads on
 * until it fits, and both modes find every tensor with its bytes. */
static void test_split_large_part_header(void **state) {
    (void)state;
    og_gguf_writer *w;
    assert_int_equal(og_gguf_writer_create(32, &w), OG_OK);
    assert_int_equal(og_gguf_writer_set_str(w, "general.architecture", "test"), OG_OK);
    static float big[65536];
    for (int i = 0; i < 65536; i++) big[i] = (float)i;
    int64_t ne_big = 65536, ne = 8;
    assert_int_equal(og_gguf_writer_add_tensor(w, "big", OG_TYPE_F32, 1, &ne_big, big), OG_OK);
    static float small[2000][8];
    char name[64];
    for (int t = 0; t < 2000; t++) {
        for (int i = 0; i < 8; i++) small[t][i] = (float)(t * 8 + i);
        snprintf(name, sizeof name, "tensor.%04d.with.a.long.name.to.make.the.infos.large.......", t);
        assert_int_equal(og_gguf_writer_add_tensor(w, name, OG_TYPE_F32, 1, &ne, small[t]), OG_OK);
    }
    char base[300], first[400], err[1024];
    snprintf(base, sizeof base, "%s/wide.gguf", g_tmpdir);
    uint32_t n_parts;
    assert_int_equal(og_gguf_writer_write_split(w, base, 300 * 1024, NULL, NULL, &n_parts, err, sizeof err), OG_OK);
    og_gguf_writer_free(w);
    assert_int_equal(n_parts, 2);
    snprintf(first, sizeof first, "%s/wide-00001-of-00002.gguf", g_tmpdir);
    for (int mode = 0; mode < 2; mode++) {
        og_gguf *g;
        if (og_gguf_open(first, mode ? OG_GGUF_HEADER_ONLY : 0, &g, err, sizeof err)) fail_msg("%s", err);
        assert_int_equal(og_gguf_n_tensors(g), 2001);
        og_gguf_part p;
        assert_int_equal(og_gguf_part_at(g, 1, &p), OG_OK);
        assert_true(p.data_offset > 128 * 1024); /* the header really is larger than the first read */
        for (int t = 0; t < 2000; t++) {
            snprintf(name, sizeof name, "tensor.%04d.with.a.long.name.to.make.the.infos.large.......", t);
            const og_gguf_tensor *ti = og_gguf_find_tensor(g, name);
            if (!ti) fail_msg("%s missing", name);
            if (!mode) assert_memory_equal(ti->data, small[t], sizeof small[t]);
        }
        if (!mode) assert_memory_equal(og_gguf_find_tensor(g, "big")->data, big, sizeof big);
        og_gguf_close(g);
    }
}

/* make-model --split-max-size against the same model unsplit (same seed):
 * every tensor found with identical bytes and shape, every key of the unsplit
 * file with the same value in the first part, each part within the size unless
 * it holds a single tensor; header-only planning sees every tensor's size. */
static void test_split_make_model(void **state) {
    (void)state;
    char cmd[2048], one[300], base[300], first[400], err[1024];
    snprintf(one, sizeof one, "%s/mm.gguf", g_tmpdir);
    snprintf(base, sizeof base, "%s/mms.gguf", g_tmpdir);
    const char *shape = "--tokenizer none --vocab 100 --n-layer 4 --n-dense 1 --n-embd 64 --n-head 2 --n-expert 8 "
                        "--n-expert-used 2 --n-ff-exp 64 --type Q8_0 --seed 7";
    snprintf(cmd, sizeof cmd, "'%s' make-model -o '%s' %s 2>/dev/null && '%s' make-model -o '%s' %s --split-max-size 100K "
             "2>/dev/null", g_onegpu, one, shape, g_onegpu, base, shape);
    assert_int_equal(system(cmd), 0);
    og_gguf *a, *b;
    assert_int_equal(og_gguf_open(one, 0, &a, err, sizeof err), OG_OK);
    /* the part count is not known in advance: find the first part by its name */
    uint32_t n = 0;
    for (uint32_t c = 2; c < 100 && !n; c++) {
        snprintf(first, sizeof first, "%s/mms-00001-of-%05u.gguf", g_tmpdir, c);
        if (access(first, F_OK) == 0) n = c;
    }
    assert_true(n >= 3);
    for (int mode = 0; mode < 2; mode++) {
        if (og_gguf_open(first, mode ? OG_GGUF_HEADER_ONLY : 0, &b, err, sizeof err)) fail_msg("%s", err);
        assert_int_equal(og_gguf_n_parts(b), n);
        assert_int_equal(og_gguf_n_tensors(b), og_gguf_n_tensors(a));
        uint64_t per_part[128] = {0};
        for (uint64_t i = 0; i < og_gguf_n_tensors(a); i++) {
            const og_gguf_tensor *ta = og_gguf_tensor_at(a, i), *tb = og_gguf_find_tensor(b, ta->name);
            if (!tb) fail_msg("tensor %s missing from the split model", ta->name);
            assert_ptr_equal(tb, og_gguf_tensor_at(b, i)); /* same order */
            assert_int_equal(tb->type, ta->type);
            assert_int_equal(tb->n_dims, ta->n_dims);
            assert_memory_equal(tb->ne, ta->ne, sizeof ta->ne);
            assert_int_equal(tb->n_bytes, ta->n_bytes);
            assert_true(tb->part < n);
            if (i) assert_true(tb->part >= og_gguf_tensor_at(b, i - 1)->part); /* parts in tensor order */
            per_part[tb->part]++;
            if (!mode) assert_memory_equal(tb->data, ta->data, ta->n_bytes);
        }
        for (uint32_t k = 0; k < n; k++) {
            og_gguf_part p;
            assert_int_equal(og_gguf_part_at(b, k, &p), OG_OK);
            assert_int_equal(p.n_tensors, per_part[k]);
            assert_true(p.n_tensors >= 1);
            if (p.n_tensors > 1 && p.file_size > 100 * 1024)
                fail_msg("part %u is %llu bytes with %llu tensors", k + 1, (unsigned long long)p.file_size,
                         (unsigned long long)p.n_tensors);
        }
        for (uint64_t i = 0; i < og_gguf_n_kv(a); i++) {
            const og_gguf_kv *ka = og_gguf_kv_at(a, i), *kb = og_gguf_find_kv(b, ka->key);
            if (!kb) fail_msg("key %s missing from the first part", ka->key);
            assert_int_equal(kb->type, ka->type);
            if (ka->type == OG_GGUF_STRING) {
                assert_int_equal(kb->str.n, ka->str.n);
                assert_memory_equal(kb->str.s, ka->str.s, ka->str.n);
            } else if (ka->type != OG_GGUF_ARRAY) {
                assert_memory_equal(kb->data, ka->data, og_gguf_vtype_size(ka->type));
            } else {
                assert_int_equal(kb->arr_n, ka->arr_n);
            }
        }
        uint32_t v;
        assert_int_equal(og_gguf_get_u32(b, "split.count", &v), OG_OK);
        assert_int_equal(v, n);
        assert_int_equal(og_gguf_get_u32(b, "split.tensors.count", &v), OG_OK);
        assert_int_equal(v, og_gguf_n_tensors(a));
        og_gguf_close(b);
    }
    og_gguf_close(a);
    /* onegpu gguf lists the parts, the last one by its name */
    char last[400], want[512];
    snprintf(last, sizeof last, "%s/mms-%05u-of-%05u.gguf", g_tmpdir, n, n);
    snprintf(cmd, sizeof cmd, "'%s' gguf '%s'", g_onegpu, first);
    char *out = run_stdout(cmd);
    snprintf(want, sizeof want, "split into %u parts", n);
    assert_non_null(strstr(out, want));
    snprintf(want, sizeof want, "  part %u: %s (", n, last);
    assert_non_null(strstr(out, want));
    free(out);
}

/* `onegpu run --json` (token ids and log-probs, greedy and teacher-forced),
 * `tokenize` and `plan` give the same on the split files as on the unsplit
 * file of the same seed. Skipped without the DeepSeek-V3 tokenizer package. */
static void test_split_cli_same_results(void **state) {
    (void)state;
    char cmd[4096], one[300], base[300], first[400];
    snprintf(one, sizeof one, "%s/cli.gguf", g_tmpdir);
    snprintf(base, sizeof base, "%s/clis.gguf", g_tmpdir);
    snprintf(first, sizeof first, "%s/clis-00001-of-00003.gguf", g_tmpdir);
    snprintf(cmd, sizeof cmd, "'%s' make-model -o '%s' --seed 5 2>/dev/null && '%s' make-model -o '%s' --seed 5 "
             "--split-max-size 10M 2>/dev/null", g_onegpu, one, g_onegpu, base);
    if (system(cmd) != 0) {
        print_message("make-model failed (no tokenizer package?): skipped\n");
        skip();
    }
    assert_int_equal(access(first, F_OK), 0);
    const char *runs[] = {
        "run -p 'The capital of France is' -n 12 --temp 0 --json --top-logprobs 3",
        "run -p 'Hello' -n 4 --json --teacher 100,2000,30000,5 --top-logprobs 2",
        "tokenize -p 'split files, one model'",
        "plan --vram 2G --ram 8G --json",
        "run -p 'Hello' -n 6 --temp 0 --json --vram 2G --ram 8G",
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        char *out[2];
        for (int k = 0; k < 2; k++) {
            snprintf(cmd, sizeof cmd, "'%s' %s -m '%s' 2>/dev/null", g_onegpu, runs[i], k ? first : one);
            out[k] = run_stdout(cmd);
        }
        char *pa = strstr(out[0], one), *pb = strstr(out[1], first);
        if (pa && pb) { /* output that names its file: compare past the name */
            memmove(pa, pa + strlen(one), strlen(pa + strlen(one)) + 1);
            memmove(pb, pb + strlen(first), strlen(pb + strlen(first)) + 1);
        }
        if (strcmp(out[0], out[1]) != 0 || !strchr(out[0], '{'))
            fail_msg("'%s' differs:\nunsplit: %.600s\nsplit:   %.600s", runs[i], out[0], out[1]);
        free(out[0]);
        free(out[1]);
    }
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_gguf PATH_TO_ONEGPU\n");
        return 2;
    }
    g_onegpu = argv[1];
    snprintf(g_tmpdir, sizeof g_tmpdir, "/tmp/og_test_gguf_XXXXXX");
    if (!mkdtemp(g_tmpdir)) return 2;
    struct CMUnitTest tests[16 + 2 * N_CASES + N_SPLIT_CASES];
    size_t n = 0;
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_read_fixture);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_writer_matches_spec_bytes);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_round_trip_all_types);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_small_alignment);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_sparse_write);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_write_refuses_over_free_disk);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_i32_tensor);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_messages_distinct);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_every_truncation);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_overlap_behind_empty_tensor);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_escaped_names);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_split_first_renamed);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_split_writer_bytes);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_split_large_part_header);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_split_make_model);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_split_cli_same_results);
    for (size_t i = 0; i < N_SPLIT_CASES; i++)
        tests[n++] = (struct CMUnitTest){split_cases[i].name, test_split_errors, NULL, NULL, (void *)&split_cases[i]};
    for (size_t i = 0; i < N_CASES; i++) {
        tests[n++] = (struct CMUnitTest){cases[i].name, test_corrupt_library, NULL, NULL, (void *)&cases[i]};
    }
    for (size_t i = 0; i < N_CASES; i++) {
        tests[n++] = (struct CMUnitTest){cases[i].name, test_corrupt_cli, NULL, NULL, (void *)&cases[i]};
    }
    int rc = _cmocka_run_group_tests("gguf", tests, n, NULL, NULL);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_tmpdir);
    return rc;
}
