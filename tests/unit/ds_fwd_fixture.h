/* What the deepseek4 and deepseek41 forward-pass tests share: seeded prompts,
 * loading with model options, whole-prompt runs, decode steps, forks, the
 * double references' JSON (ref_deepseek4 / ref_deepseek41 print the same
 * shape) and the distance from it, and patched-file loads. cmocka asserts. */
#ifndef OG_DS_FWD_FIXTURE_H
#define OG_DS_FWD_FIXTURE_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "og_model.h"

/* Prompt `which` of len tokens in [0, V) (xorshift, seeded by which). */
static inline void fx_prompt(int which, int len, int32_t V, int32_t *out) {
    uint64_t x = 0x9E3779B97F4A7C15ull * (uint64_t)(which + 1);
    for (int i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out[i] = (int32_t)(x % (uint64_t)V);
    }
}

/* The model at path with its options ("kv-fp8=off,..." or NULL: the defaults). */
static inline og_model *fx_load(const char *path, const char *opts) {
    og_model *m;
    char err[512], buf[128];
    if (og_model_load(path, NULL, &m, err, sizeof err)) fail_msg("%s", err);
    snprintf(buf, sizeof buf, "%s", opts ? opts : "");
    for (char *save = NULL, *it = strtok_r(buf, ",", &save); it; it = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(it, '=');
        *eq = 0;
        if (og_model_set_option(m, it, eq + 1, err, sizeof err)) fail_msg("%s", err);
    }
    return m;
}

/* All logits of one prompt run as one prefill call. */
static inline void fx_prefill(const og_model *m, const og_run_ctx *rc, const int32_t *toks, int n, float *logits) {
    og_kv kv = {0};
    char err[512];
    if (og_model_forward(m, rc, &kv, toks, n, logits, true, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(kv.n_pos, n);
    og_kv_free(&kv);
}

static inline bool fx_finite(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return false;
    return true;
}

/* n single-token decode steps of toks on kv, each step's logits to out[t][V]. */
static inline void fx_decode_steps(const og_model *m, const og_run_ctx *rc, og_kv *kv, const int32_t *toks, int n, int64_t V,
                            float *out) {
    char err[512];
    for (int t = 0; t < n; t++)
        if (og_model_forward(m, rc, kv, toks + t, 1, out + (int64_t)t * V, false, err, sizeof err)) fail_msg("%s", err);
}

/* A fork of src into dst (a new, independent state). */
static inline void fx_fork(const og_model *m, const og_run_ctx *rc, const og_kv *src, og_kv *dst) {
    char err[512];
    *dst = (og_kv){0};
    if (og_kv_fork(m, rc, src, 0, dst, err, sizeof err)) fail_msg("%s", err);
    assert_int_equal(dst->n_pos, src->n_pos);
    assert_non_null(dst->arch);
    assert_true(dst->arch != src->arch);
    assert_true(dst->dev == src->dev);
}

/* The reference program ref on model's toks[n] (every position): its JSON. */
static inline json_t *fx_run_ref(const char *ref, const char *model, const int32_t *toks, int n, const char *flags) {
    size_t cap = (size_t)n * 12 + strlen(ref) + strlen(model) + strlen(flags) + 256, at = 0;
    char *cmd = malloc(cap);
    at += (size_t)snprintf(cmd + at, cap - at, "'%s' '%s' --from 0 %s --tokens ", ref, model, flags);
    for (int i = 0; i < n; i++) at += (size_t)snprintf(cmd + at, cap - at, "%s%d", i ? "," : "", toks[i]);
    FILE *p = popen(cmd, "r");
    if (!p) fail_msg("cannot run %s", ref);
    json_error_t je;
    json_t *j = json_loadf(p, 0, &je);
    if (pclose(p) != 0 || !j) fail_msg("%s failed (%s)", ref, j ? "exit status" : je.text);
    free(cmd);
    return j;
}

static inline void fx_logsoftmax(const float *l, int64_t n, double *out) {
    double mx = -INFINITY, z = 0;
    for (int64_t i = 0; i < n; i++) mx = fmax(mx, l[i]);
    for (int64_t i = 0; i < n; i++) z += exp(l[i] - mx);
    for (int64_t i = 0; i < n; i++) out[i] = l[i] - mx - log(z);
}

/* Per position, |ours - reference| for the next token's log-prob and the
 * reference's top 5, the largest of them into d[t]; *agree counts the
 * positions whose argmax is the reference's. lf: [V] scratch. */
static inline void fx_diff_vs_ref(json_t *ref, const float *logits, int n, int64_t V, double *lf, double *d, int *agree) {
    json_t *pos = json_object_get(ref, "positions");
    assert_int_equal((int)json_array_size(pos), n);
    for (int t = 0; t < n; t++) {
        json_t *P = json_array_get(pos, (size_t)t);
        fx_logsoftmax(logits + (int64_t)t * V, V, lf);
        double w = 0;
        json_t *next = json_object_get(P, "next");
        if (json_is_integer(next))
            w = fabs(lf[json_integer_value(next)] - json_real_value(json_object_get(P, "logprob")));
        json_t *top = json_object_get(P, "top");
        for (size_t i = 0; i < json_array_size(top); i++) {
            json_t *e = json_array_get(top, i);
            w = fmax(w, fabs(lf[json_integer_value(json_array_get(e, 0))] - json_number_value(json_array_get(e, 1))));
        }
        d[t] = w;
        int64_t am = 0;
        for (int64_t v = 1; v < V; v++)
            if (lf[v] > lf[am]) am = v;
        *agree += am == json_integer_value(json_object_get(P, "argmax"));
    }
}

static inline int fx_cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of d[n] (sorted in place) and its max. */
static inline double fx_median(double *d, int n, double *max) {
    *max = 0;
    for (int t = 0; t < n; t++) *max = fmax(*max, d[t]);
    qsort(d, (size_t)n, sizeof *d, fx_cmp_double);
    return d[n / 2];
}

/* Batch invariance: the prompts toks[p][len[p]] (their logits alone in
 * alone[p][len[p]][V]) interleaved in one batch in uneven runs of 1 ..
 * max_run tokens, every token's logits wanted, must give bitwise each
 * token's logits alone; every cache then holds its prompt. */
static inline void fx_batch_invariance(const og_model *m, const og_run_ctx *rc, int32_t *const *toks, const int *len,
                                       int n_prompt, int64_t V, float *const *alone, int max_run) {
    int total = 0;
    for (int p = 0; p < n_prompt; p++) total += len[p];
    int32_t *bt = malloc((size_t)total * sizeof *bt), *bs = malloc((size_t)total * sizeof *bs);
    bool *want = malloc((size_t)total * sizeof *want);
    int *done = calloc((size_t)n_prompt, sizeof *done), *seen = calloc((size_t)n_prompt, sizeof *seen), n = 0;
    for (int round = 0; n < total; round++)
        for (int p = 0; p < n_prompt; p++) {
            const int run = 1 + (round * 7 + p * 3) % max_run;
            for (int r = 0; r < run && done[p] < len[p]; r++) {
                bt[n] = toks[p][done[p]++];
                bs[n] = p;
                want[n++] = true;
            }
        }
    float *lg = malloc((size_t)total * (size_t)V * sizeof *lg);
    og_kv *kv = calloc((size_t)n_prompt, sizeof *kv);
    og_kv **kvs = malloc((size_t)n_prompt * sizeof *kvs);
    for (int p = 0; p < n_prompt; p++) kvs[p] = &kv[p];
    og_batch b = {total, bt, bs, want, NULL};
    char err[512];
    if (og_model_forward_batch(m, rc, kvs, n_prompt, &b, lg, err, sizeof err)) fail_msg("%s", err);
    for (int i = 0; i < total; i++) {
        const int p = bs[i];
        assert_memory_equal(lg + (int64_t)i * V, alone[p] + (int64_t)seen[p]++ * V, (size_t)V * sizeof *lg);
    }
    for (int p = 0; p < n_prompt; p++) {
        assert_int_equal(kv[p].n_pos, len[p]);
        og_kv_free(&kv[p]);
    }
    free(kv);
    free(kvs);
    free(bt);
    free(bs);
    free(want);
    free(done);
    free(seen);
    free(lg);
}

/* A sequence whose context (og_kv.n_ctx = 6) is below the window gets rings
 * of 6 rows: the same bits as an unbounded one up to 6 positions (also
 * forked after 4), then OG_ERR_RANGE with n_pos unchanged. toks: at least 7. */
static inline void fx_ring_ctx(const og_model *m, const og_run_ctx *rc, const int32_t *toks, int64_t V) {
    enum { CTX = 6 };
    char err[512];
    float *ref = malloc((size_t)(CTX * V) * sizeof *ref), *got = malloc((size_t)(CTX * V) * sizeof *got);
    og_kv u = {0}, bnd = {.n_ctx = CTX}, f;
    fx_decode_steps(m, rc, &u, toks, CTX, V, ref);
    if (og_model_forward(m, rc, &bnd, toks, CTX - 2, got, true, err, sizeof err)) fail_msg("%s", err);
    fx_fork(m, rc, &bnd, &f);
    assert_int_equal(f.n_ctx, CTX);
    fx_decode_steps(m, rc, &bnd, toks + CTX - 2, 2, V, got + (CTX - 2) * V);
    assert_memory_equal(ref, got, (size_t)(CTX * V) * sizeof *got);
    fx_decode_steps(m, rc, &f, toks + CTX - 2, 2, V, got);
    assert_memory_equal(ref + (CTX - 2) * V, got, (size_t)(2 * V) * sizeof *got);
    assert_int_equal(og_model_forward(m, rc, &bnd, toks + CTX, 1, got, false, err, sizeof err), OG_ERR_RANGE);
    assert_non_null(strstr(err, "context of 6"));
    assert_int_equal(bnd.n_pos, CTX);
    og_kv_free(&u);
    og_kv_free(&bnd);
    og_kv_free(&f);
    free(ref);
    free(got);
}

static inline uint8_t *fx_read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot read %s", path);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*n);
    if (fread(b, 1, *n, f) != *n) fail_msg("short read of %s", path);
    fclose(f);
    return b;
}

/* The header offset just past the GGUF string s (u64 length, then bytes). */
static inline size_t fx_after_string(const uint8_t *b, size_t n, const char *s) {
    const size_t len = strlen(s);
    for (size_t i = 8; i + len < n && i < (1u << 20); i++)
        if (!memcmp(b + i, s, len) && !memcmp(b + i - 8, &(uint64_t){len}, 8)) return i + len;
    fail_msg("no %s in the header", s);
    return 0;
}

/* Loads the patched bytes; returns the status and the message. */
static inline og_status fx_load_bytes(const uint8_t *b, size_t n, char *err, size_t errlen) {
    og_gguf *g;
    og_status st = og_gguf_open_memory(b, n, "patched.gguf", 0, &g, err, errlen);
    if (st) return st;
    og_model *m;
    st = og_model_load_gguf(g, NULL, &m, err, errlen);
    if (!st) og_model_free(m);
    return st;
}

#endif
