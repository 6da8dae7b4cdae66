/* IQ2_XXS, MXFP4 and I32 against llama.cpp (node-llama-cpp 3.21.1's prebuilt ggml
 * libraries, loaded with dlopen; their source's ggml-common.h): run by
 * tests/cli/ref_iquants.sh as
 *   ref_iquants GGML_COMMON_H LIBDIR WORKDIR MODEL.gguf...
 * 1. our tables (grid, sign patterns, E2M1 values) entry by entry against the ones
 *    ggml-common.h defines, parsed here;
 * 2. every row of every IQ2_XXS and MXFP4 tensor in the make-model files dequantized
 *    by ggml's to_float and by ours: the same bits;
 * 3. dot products with Q8_K / Q8_0 activations (ours, written by og_kernels'
 *    quantize_act): ggml-cpu's vec_dot against our fork and canonical kernels of every
 *    tier, within og_quant_dot_tolerance of sum |w a|;
 * 4. quantizers: MXFP4 the same bytes as ggml's reference quantizer; IQ2_XXS's error
 *    next to ggml's quantizer's (given a uniform importance matrix) on the same data;
 * 5. an I32 tensor our writer wrote: ggml's gguf reader finds it as I32 at the offset
 *    whose bytes our accessor returns. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "og_quant.h"
#include "quant_internal.h"

#define GGML_TYPE_I32 26
/* The layouts of ggml.h / ggml-cpu.h / gguf.h at the bundled release (v0.4.0). */
typedef struct ggml_type_traits {
    const char *type_name;
    int64_t blck_size, blck_size_interleave;
    size_t type_size;
    bool is_quantized;
    void (*to_float)(const void *x, float *y, int64_t k);
    void (*from_float_ref)(const float *x, void *y, int64_t k);
} ggml_type_traits;
typedef struct ggml_type_traits_cpu {
    void (*from_float)(const float *x, void *y, int64_t k);
    void (*vec_dot)(int n, float *s, size_t bs, const void *x, size_t bx, const void *y, size_t by, int nrc);
    int vec_dot_type;
    int64_t nrows;
} ggml_type_traits_cpu;
struct gguf_init_params {
    bool no_alloc;
    void **ctx;
};

static int failures;
#define CHECK(cond, ...)                      \
    do {                                      \
        if (!(cond)) {                        \
            fprintf(stderr, "FAIL: " __VA_ARGS__); \
            fputc('\n', stderr);              \
            failures++;                       \
        }                                     \
    } while (0)

/* The numbers of table `name` in ggml-common.h (between its GGML_TABLE_BEGIN and
 * GGML_TABLE_END), at most max; returns how many. */
static int parse_table(const char *src, const char *name, long long *out, int max) {
    char begin[128];
    snprintf(begin, sizeof begin, "%s,", name);
    const char *p = strstr(src, begin);
    if (!p) return -1;
    p = strchr(p, ')');
    const char *end = p ? strstr(p, "GGML_TABLE_END") : NULL;
    if (!end) return -1;
    int n = 0;
    for (p++; p < end && n < max;) {
        char *q;
        long long v = strtoll(p, &q, 0);
        if (q == p) {
            p++;
            continue;
        }
        out[n++] = v;
        p = q;
    }
    return n;
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) n = 0;
    if (s) s[n] = '\0';
    fclose(f);
    return s;
}

static void check_tables(const char *header) {
    char *src = slurp(header);
    CHECK(src, "cannot read %s", header);
    if (!src) return;
    long long v[256];
    int n = parse_table(src, "iq2xxs_grid", v, 256);
    CHECK(n == 256, "iq2xxs_grid: %d entries parsed", n);
    for (int i = 0; i < n; i++) CHECK((uint64_t)v[i] == og_iq2xxs_grid[i], "iq2xxs_grid[%d]: ours %016llx, ggml %016llx", i, (unsigned long long)og_iq2xxs_grid[i], (unsigned long long)v[i]);
    n = parse_table(src, "ksigns_iq2xs", v, 128);
    CHECK(n == 128, "ksigns_iq2xs: %d entries parsed", n);
    for (int i = 0; i < n; i++) CHECK(v[i] == og_iq2xxs_signs[i], "ksigns_iq2xs[%d]: ours %d, ggml %lld", i, og_iq2xxs_signs[i], v[i]);
    n = parse_table(src, "kvalues_fp4", v, 16);
    CHECK(n == 16, "kvalues_fp4: %d entries parsed", n);
    for (int i = 0; i < n; i++) CHECK(v[i] == og_mxfp4_values[i], "kvalues_fp4[%d]: ours %d, ggml %lld", i, og_mxfp4_values[i], v[i]);
    printf("tables: iq2xxs_grid 256, ksigns_iq2xs 128, kvalues_fp4 16 entries equal to ggml-common.h's\n");
    free(src);
}

static uint64_t rng = 12345;
static float frand(void) { return (float)(og_rand_unit(&rng) * 2 - 1); }

/* Dequantization and dots of every row of tensor t (type IQ2_XXS or MXFP4). */
/* gt NULL: the dots only (a second ggml-cpu build). */
static void check_tensor(const og_gguf_tensor *t, const ggml_type_traits *gt, const ggml_type_traits_cpu *gc,
                         const og_kernels *tiers, int n_tiers, long *rows_deq, long *dots) {
    const og_type_traits *tr = og_quant_traits(t->type);
    const og_type_traits *act = og_quant_traits(tr->vec_dot_type);
    const int64_t K = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
    uint64_t rb, ab;
    og_row_bytes(t->type, (uint64_t)K, &rb);
    og_row_bytes(act->type, (uint64_t)K, &ab);
    float *a = malloc((size_t)K * 4), *b = malloc((size_t)K * 4), *x = malloc((size_t)K * 4), *xd = malloc((size_t)K * 4);
    uint8_t *xq = malloc(ab);
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *row = (const uint8_t *)t->data + (size_t)r * rb;
        og_dequantize_row(t->type, row, a, K);
        if (gt) gt->to_float(row, b, K);
        if (gt && memcmp(a, b, (size_t)K * 4)) {
            int64_t i = 0;
            while (a[i] == b[i] || (isnan(a[i]) && isnan(b[i]))) i++;
            CHECK(0, "%s row %lld: dequantized element %lld is %.9g here, %.9g in ggml", t->name, (long long)r, (long long)i, a[i], b[i]);
        }
        *rows_deq += gt != NULL;
        if (r % 7 || !gc || !gc->vec_dot) continue;
        for (int64_t i = 0; i < K; i++) x[i] = frand() * (r % 2 ? 4.0f : 1.0f);
        tiers[0].quantize_act[act->type](x, xq, K);
        act->to_float(xq, xd, K);
        double mag = 0;
        for (int64_t i = 0; i < K; i++) mag += fabs((double)a[i] * xd[i]);
        float want;
        gc->vec_dot((int)K, &want, 0, row, 0, xq, 0, 1);
        for (int k = 0; k < n_tiers; k++)
            for (int canon = 0; canon < 2; canon++) {
                float got;
                (canon ? tiers[k].vec_dot_canonical : tiers[k].vec_dot)[t->type](K, &got, row, xq);
                CHECK(fabs((double)got - want) <= og_quant_dot_tolerance(t->type) * mag + 1e-30,
                      "%s row %lld: %s %s dot %.9g, ggml %.9g (sum |w a| %.3g)", t->name, (long long)r,
                      og_isa_name(tiers[k].isa), canon ? "canonical" : "fork", got, want, mag);
            }
        (*dots)++;
    }
    free(a), free(b), free(x), free(xd), free(xq);
}

/* The quantizers on the same rows: MXFP4 byte for byte; IQ2_XXS's RMS error next
 * to ggml's with a uniform importance matrix. */
static void check_quantizers(const ggml_type_traits *mx, size_t (*quantize_chunk)(int, const float *, void *, int64_t, int64_t, int64_t, const float *)) {
    const int64_t K = 4096, rows = 8, n = K * rows;
    float *x = malloc((size_t)n * 4), *y = malloc((size_t)n * 4), *imat = malloc((size_t)K * 4);
    uint8_t *q1 = malloc((size_t)n), *q2 = malloc((size_t)n);
    for (int64_t i = 0; i < n; i++) { /* normal-ish (sum of uniforms), a spread of block magnitudes, zeros */
        const float g = (frand() + frand() + frand()) * (i / 256 % 3 == 0 ? 0.01f : 1.0f);
        x[i] = i / 32 % 41 == 5 ? 0.0f : g;
    }
    mx->from_float_ref(x, q1, n);
    og_quantize_row(OG_TYPE_MXFP4, x, q2, n);
    CHECK(!memcmp(q1, q2, (size_t)(n / 32 * 17)), "MXFP4 quantizer: bytes differ from ggml's quantize_row_mxfp4_ref");
    for (int64_t i = 0; i < K; i++) imat[i] = 1.0f;
    quantize_chunk(16, x, q1, 0, rows, K, imat);
    og_quantize_row(OG_TYPE_IQ2_XXS, x, q2, n);
    double e_ggml = 0, e_ours = 0, x2 = 0;
    og_dequantize_row(OG_TYPE_IQ2_XXS, q1, y, n);
    for (int64_t i = 0; i < n; i++) e_ggml += (double)(y[i] - x[i]) * (y[i] - x[i]), x2 += (double)x[i] * x[i];
    og_dequantize_row(OG_TYPE_IQ2_XXS, q2, y, n);
    for (int64_t i = 0; i < n; i++) e_ours += (double)(y[i] - x[i]) * (y[i] - x[i]);
    printf("IQ2_XXS quantizer, %lld weights, relative RMS error: ours %.4f, ggml (uniform importance) %.4f\n", (long long)n,
           sqrt(e_ours / x2), sqrt(e_ggml / x2));
    CHECK(sqrt(e_ours / x2) <= 1.15 * sqrt(e_ggml / x2), "IQ2_XXS quantizer: error %.4f, more than 1.15 x ggml's %.4f",
          sqrt(e_ours / x2), sqrt(e_ggml / x2));
    printf("MXFP4 quantizer: %lld blocks, the same bytes as ggml's reference\n", (long long)(n / 32));
    free(x), free(y), free(imat), free(q1), free(q2);
}

static void check_i32(const char *dir, void *base) {
    void *(*init)(const char *, struct gguf_init_params) = (void *(*)(const char *, struct gguf_init_params))dlsym(base, "gguf_init_from_file");
    int64_t (*find)(const void *, const char *) = (int64_t (*)(const void *, const char *))dlsym(base, "gguf_find_tensor");
    int (*ttype)(const void *, int64_t) = (int (*)(const void *, int64_t))dlsym(base, "gguf_get_tensor_type");
    size_t (*toff)(const void *, int64_t) = (size_t (*)(const void *, int64_t))dlsym(base, "gguf_get_tensor_offset");
    size_t (*doff)(const void *) = (size_t (*)(const void *))dlsym(base, "gguf_get_data_offset");
    void (*gfree)(void *) = (void (*)(void *))dlsym(base, "gguf_free");
    CHECK(init && find && ttype && toff && doff && gfree, "gguf functions missing from libggml-base");
    if (!(init && find && ttype && toff && doff && gfree)) return;
    enum { KU = 6, V = 1000, E = 64 };
    int32_t *tab = malloc(sizeof(int32_t) * KU * V);
    for (int i = 0; i < KU * V; i++) tab[i] = (int32_t)((i * 2654435761u) % E);
    og_gguf_writer *w;
    og_gguf_writer_create(32, &w);
    const int64_t ne[2] = {KU, V}, ne1[1] = {33};
    float f[33] = {0};
    og_gguf_writer_add_tensor(w, "before", OG_TYPE_F32, 1, ne1, f); /* so the table's offset is not 0 */
    og_gguf_writer_add_tensor(w, "blk.0.ffn_gate_tid2eid.weight", OG_TYPE_I32, 2, ne, tab);
    char path[1024], err[512];
    snprintf(path, sizeof path, "%s/i32.gguf", dir);
    og_status st = og_gguf_writer_write(w, path, NULL, NULL, err, sizeof err);
    og_gguf_writer_free(w);
    CHECK(!st, "write %s: %s", path, err);
    og_gguf *g = NULL;
    CHECK(!og_gguf_open(path, 0, &g, err, sizeof err), "open %s: %s", path, err);
    void *gg = init(path, (struct gguf_init_params){true, NULL});
    CHECK(g && gg, "ggml's gguf reader refused %s", path);
    if (g && gg) {
        const int64_t id = find(gg, "blk.0.ffn_gate_tid2eid.weight");
        const og_gguf_tensor *t = og_gguf_find_tensor(g, "blk.0.ffn_gate_tid2eid.weight");
        CHECK(id >= 0 && ttype(gg, id) == GGML_TYPE_I32, "ggml: the table is not an I32 tensor");
        CHECK(doff(gg) + toff(gg, id) == og_gguf_data_offset(g) + t->offset, "ggml and onegpu place the table at different offsets");
        FILE *fp = fopen(path, "rb");
        int32_t *raw = malloc(sizeof(int32_t) * KU * V);
        CHECK(fp && !fseek(fp, (long)(doff(gg) + toff(gg, id)), SEEK_SET) && fread(raw, 4, KU * V, fp) == KU * V, "read back");
        int same = 0;
        for (uint64_t i = 0; i < KU * V; i++) {
            int32_t v;
            same += og_gguf_tensor_i32(t, i, &v) == OG_OK && v == raw[i] && v == tab[i];
        }
        CHECK(same == KU * V, "I32: %d of %d values agree", same, KU * V);
        CHECK(og_gguf_tensor_i32_check(t, 0, E - 1, NULL) == OG_OK, "I32 range check");
        printf("I32: %d values of [%d, %d] read the same by ggml's gguf reader (offset %zu) and ours\n", KU * V, KU, V,
               doff(gg) + toff(gg, id));
        if (fp) fclose(fp);
        free(raw);
    }
    if (gg) gfree(gg);
    og_gguf_close(g);
    free(tab);
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: ref_iquants GGML_COMMON_H LIBDIR WORKDIR MODEL.gguf...\n");
        return 2;
    }
    check_tables(argv[1]);
    char lib[2048];
    snprintf(lib, sizeof lib, "%s/libggml-base.so", argv[2]);
    void *base = dlopen(lib, RTLD_NOW | RTLD_GLOBAL);
    if (!base) {
        fprintf(stderr, "FAIL: %s\n", dlerror());
        return 1;
    }
    const ggml_type_traits *(*traits)(int) = (const ggml_type_traits *(*)(int))dlsym(base, "ggml_get_type_traits");
    size_t (*chunk)(int, const float *, void *, int64_t, int64_t, int64_t, const float *) =
        (size_t (*)(int, const float *, void *, int64_t, int64_t, int64_t, const float *))dlsym(base, "ggml_quantize_chunk");
    /* the CPU backend's generic build (the kernels every other build falls back to),
     * then the AVX2 one (haswell) */
    const char *variants[] = {"x64", "haswell"};
    const ggml_type_traits_cpu *cpu[2][2] = {{0}};
    for (int v = 0; v < 2; v++) {
        snprintf(lib, sizeof lib, "%s/libggml-cpu-%s.so", argv[2], variants[v]);
        void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
        CHECK(h, "%s", dlerror());
        if (!h) continue;
        void (*cpu_init)(void) = (void (*)(void))dlsym(h, "ggml_cpu_init");
        const ggml_type_traits_cpu *(*ct)(int) = (const ggml_type_traits_cpu *(*)(int))dlsym(h, "ggml_get_type_traits_cpu");
        if (cpu_init) cpu_init();
        if (ct) cpu[v][0] = ct(OG_TYPE_IQ2_XXS), cpu[v][1] = ct(OG_TYPE_MXFP4);
        CHECK(cpu[v][0] && cpu[v][0]->vec_dot_type == OG_TYPE_Q8_K && cpu[v][1] && cpu[v][1]->vec_dot_type == OG_TYPE_Q8_0,
              "ggml-cpu-%s: IQ2_XXS / MXFP4 vec_dot types", variants[v]);
    }
    CHECK(traits && chunk, "ggml_get_type_traits / ggml_quantize_chunk missing");
    if (!traits || !chunk) return 1;
    const ggml_type_traits *gt[2] = {traits(OG_TYPE_IQ2_XXS), traits(OG_TYPE_MXFP4)};
    CHECK(gt[0]->blck_size == 256 && gt[0]->type_size == 66 && gt[1]->blck_size == 32 && gt[1]->type_size == 17,
          "ggml's block sizes differ from ours");
    og_cpu_features f;
    og_cpu_detect(&f);
    og_kernels tiers[3];
    int n_tiers = 0;
    for (int isa = OG_ISA_SCALAR; isa <= OG_ISA_AVX512; isa++) {
        og_isa got;
        char note[256], err[256];
        if (og_isa_choose(&f, og_isa_name((og_isa)isa), &got, note, sizeof note, err, sizeof err) == OG_OK)
            og_kernels_init((og_isa)isa, &tiers[n_tiers++]);
    }
    long rows[2] = {0}, dots[2] = {0};
    for (int m = 4; m < argc; m++) {
        og_gguf *g;
        char err[512];
        if (og_gguf_open(argv[m], 0, &g, err, sizeof err)) {
            CHECK(0, "%s", err);
            continue;
        }
        for (uint64_t i = 0; i < og_gguf_n_tensors(g); i++) {
            const og_gguf_tensor *t = og_gguf_tensor_at(g, i);
            const int k = t->type == OG_TYPE_IQ2_XXS ? 0 : t->type == OG_TYPE_MXFP4 ? 1 : -1;
            if (k < 0) continue;
            for (int v = 0; v < 2; v++) check_tensor(t, v ? NULL : gt[k], cpu[v][k], tiers, n_tiers, &rows[k], &dots[k]);
        }
        og_gguf_close(g);
    }
    printf("dequantized rows equal to ggml's: IQ2_XXS %ld, MXFP4 %ld; dots within the bound of ggml-cpu x64's and "
           "haswell's (rows x builds), each against %d tiers x fork and canonical: IQ2_XXS %ld, MXFP4 %ld\n",
           rows[0], rows[1], n_tiers, dots[0], dots[1]);
    CHECK(rows[0] > 0 && rows[1] > 0 && dots[0] > 0 && dots[1] > 0, "no IQ2_XXS or MXFP4 rows were checked");
    check_quantizers(gt[1], chunk);
    check_i32(argv[3], base);
    if (failures) fprintf(stderr, "ref_iquants: %d failures\n", failures);
    else printf("ok: IQ2_XXS, MXFP4 and I32 agree with llama.cpp\n");
    return failures ? 1 : 0;
}
