/* `onegpu bench kernels`: CPU kernel speed against the physical limit measured in
 * the same run by the same threads: matrix x vector throughput in weight bytes
 * per second next to a plain memory read of the same buffer, and batched matmul
 * in GFLOP/s per SIMD tier. Figures are medians of several runs. */
#include "cli.h"
#include "og_backend.h"
#include "og_device.h"

#include <getopt.h>
#include <immintrin.h>
#include <jansson.h>
#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ---- memory read bandwidth ------------------------------------------------- */

/* prefetch `ahead` bytes past p, the address formed as an integer: it may lie
 * past the buffer's end (a prefetch never faults; a pointer there would be UB) */
#define OG_PREFETCH(p, ahead) _mm_prefetch((const char *)((uintptr_t)(p) + (ahead)), _MM_HINT_T0)

typedef struct read_job {
    const uint8_t *buf;
    size_t bytes;
    bool avx2;          /* the CPU has AVX2 (og_cpu_detect) */
    uint64_t sink[256]; /* one result per thread, so the reads are not optimized away */
} read_job;

__attribute__((target("avx2"))) static uint64_t read_avx2(const uint8_t *p, size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 128 <= n; i += 128) {
        /* the same software prefetch as the kernels (OG_PREFETCH_DIST), so the
         * limit is the best a core can stream, not the hardware prefetcher's */
        OG_PREFETCH(p + i, OG_PREFETCH_DIST);
        OG_PREFETCH(p + i, OG_PREFETCH_DIST + 64);
        a0 = _mm256_xor_si256(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_xor_si256(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
        a2 = _mm256_xor_si256(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
        a3 = _mm256_xor_si256(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    __m256i a = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
    return (uint64_t)_mm256_extract_epi64(a, 0) ^ (uint64_t)_mm256_extract_epi64(a, 3);
}
static uint64_t read_plain(const uint8_t *p, size_t n) {
    const uint64_t *q = (const uint64_t *)p;
    uint64_t a = 0, b = 0;
    for (size_t i = 0; i + 2 <= n / 8; i += 2) {
        a ^= q[i];
        b ^= q[i + 1];
    }
    return a ^ b;
}

static void read_slice(void *ctx, int ith, int nth) {
    read_job *j = ctx;
    size_t per = j->bytes / (size_t)nth / 4096 * 4096;
    const uint8_t *p = j->buf + per * (size_t)ith;
    j->sink[ith % 256] = j->avx2 ? read_avx2(p, per) : read_plain(p, per);
}

static double read_bandwidth(og_pool *pool, const uint8_t *buf, size_t bytes, int reps, bool avx2) {
    read_job j = {.buf = buf, .bytes = bytes, .avx2 = avx2};
    double t[16];
    og_pool_run(pool, read_slice, &j); /* warm-up */
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        og_pool_run(pool, read_slice, &j);
        t[r] = now_s() - t0;
    }
    size_t per = bytes / (size_t)og_pool_size(pool) / 4096 * 4096;
    return (double)(per * (size_t)og_pool_size(pool)) / median(t, reps);
}

/* ---- the VNNI peak ---------------------------------------------------------- */

/* The clock in MHz as Linux reports it (the first "cpu MHz" of /proc/cpuinfo; a
 * VM shows its nominal clock), 0 if unknown. */
static double cpu_mhz(void) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[256];
    double mhz = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "cpu MHz", 7) && strchr(line, ':')) {
            mhz = atof(strchr(line, ':') + 1);
            break;
        }
    if (f) fclose(f);
    return mhz;
}

/* vpdpbusd (zmm) per ns on this thread: twelve independent chains, best of three,
 * a check of the peak's two-per-cycle assumption. */
__attribute__((target("avx512f,avx512vnni"))) static double vnni_rate(void) {
    __m512i a[12];
    const __m512i w = _mm512_set1_epi8(1), v = _mm512_set1_epi8(2);
    for (int i = 0; i < 12; i++) a[i] = _mm512_set1_epi32(i);
    const long n = 20000000;
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now_s();
        for (long k = 0; k < n; k++) {
#define D(i) a[i] = _mm512_dpbusd_epi32(a[i], w, v);
            D(0) D(1) D(2) D(3) D(4) D(5) D(6) D(7) D(8) D(9) D(10) D(11)
#undef D
        }
        const double r = 12.0 * (double)n / (now_s() - t0) / 1e9;
        if (r > best) best = r;
    }
    volatile int sink = 0;
    for (int i = 0; i < 12; i++) sink += _mm512_reduce_add_epi32(a[i]);
    (void)sink;
    return best;
}

/* ---- helpers ---------------------------------------------------------------- */

/* Fills n_rows rows of K elements of `type` at dst by quantizing a few random rows
 * and repeating them: real quantized data (valid scales) at memcpy speed. */
static og_status fill_weights(og_ggml_type type, int64_t K, int64_t n_rows, uint8_t *dst, size_t row_bytes) {
    const int distinct = 16;
    float *row = malloc((size_t)K * sizeof *row);
    if (!row) return OG_ERR_NOMEM;
    uint64_t rng = 7;
    for (int r = 0; r < distinct && r < n_rows; r++) {
        for (int64_t i = 0; i < K; i++) row[i] = (float)(og_rand_unit(&rng) * 2 - 1);
        og_status st = og_quantize_row(type, row, dst + (size_t)r * row_bytes, K);
        if (st) {
            free(row);
            return st;
        }
    }
    free(row);
    for (int64_t r = distinct; r < n_rows; r++) memcpy(dst + (size_t)r * row_bytes, dst + (size_t)(r % distinct) * row_bytes, row_bytes);
    return OG_OK;
}

static og_pool *make_pool(int n, char *err, size_t errlen) {
    /* pin workers to the first n CPUs this process may use (the calling thread,
     * worker 0, stays where it is); fall back to unpinned */
    cpu_set_t set;
    int cpus[256], found = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        for (int c = 0; c < CPU_SETSIZE && found < n && found < 256; c++)
            if (CPU_ISSET(c, &set)) cpus[found++] = c;
    og_pool *p = NULL;
    if (found == n && og_pool_create(n, cpus, &p, err, errlen) == OG_OK) return p;
    if (og_pool_create(n, NULL, &p, err, errlen) == OG_OK) return p;
    return NULL;
}

static void usage(FILE *out) {
    fprintf(out,
            "usage: onegpu bench placement --help (hot-set policies on routing traces)\n"
            "       onegpu bench grammar --help (constrained decoding: mask time next to the decode step)\n"
            "       onegpu bench attention --help (MLA attention alone: the per-pair and the tiled path)\n"
            "       onegpu bench kernels [--json] [--size-mib N] [--threads LIST] [--types LIST] [--reps N]\n"
            "  matrix x vector on a weight matrix of N MiB (default 1024, far above the caches),\n"
            "  as weight bytes/s and as a fraction of a plain read of the same memory by the same\n"
            "  threads, in the fork's order (fork) and the canonical one (canon, --cpu-numerics gpu;\n"
            "  the runs alternate, and '/ fork' is their ratio); then batched matmul (batch 16, 64,\n"
            "  512) in GFLOP/s for every SIMD tier, fork and canonical (the tiled product), against\n"
            "  the VNNI peak computed from the clock and the core count.\n"
            "  --threads 1,2 (default: 1 and all CPUs)  --types Q4_K,Q2_K,... (default: all)\n"
            "  --reps N  timed runs per figure, median reported (default 5)\n"
            "  --k K --rows N  matrix shape for comparing with a peer (default K 7168, rows fill the buffer)\n"
            "  --only matvec|matmul  one of the two parts\n"
            "  --mm-rows N  weight rows of the batched products (default 2048, a layer's size: the\n"
            "  activations' quantization, part of each call, is spread over them as in a forward\n"
            "  pass; the scalar tier keeps 256, it is three orders of magnitude slower)\n"
            "  ONEGPU_CPU_ISA=scalar|avx2|avx512 picks the tier of the matrix x vector runs (and the\n"
            "  only tier of the batched ones).\n");
}

static int parse_list(const char *s, int *out, int max) {
    int n = 0;
    char *copy = strdup(s), *save = NULL;
    for (char *t = strtok_r(copy, ",", &save); t && n < max; t = strtok_r(NULL, ",", &save)) out[n++] = atoi(t);
    free(copy);
    return n;
}

/* ---- attention (`onegpu bench attention`) ------------------------------------ */

/* CPU seconds this process has used, all its threads. */
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* zmm fmas per ns on this thread: sixteen independent chains, best of three, a
 * check of the f32 peak's two-per-cycle assumption (as vnni_rate). */
__attribute__((target("avx512f"))) static double fma_rate(void) {
    __m512 a[16];
    const __m512 m = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(1e-3f);
    for (int i = 0; i < 16; i++) a[i] = _mm512_set1_ps((float)i);
    const long n = 10000000;
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = now_s();
        for (long k = 0; k < n; k++) {
#define F(i) a[i] = _mm512_fmadd_ps(a[i], m, c);
            F(0) F(1) F(2) F(3) F(4) F(5) F(6) F(7) F(8) F(9) F(10) F(11) F(12) F(13) F(14) F(15)
#undef F
        }
        const double r = 16.0 * (double)n / (now_s() - t0) / 1e9;
        if (r > best) best = r;
    }
    volatile float sink = 0;
    for (int i = 0; i < 16; i++) sink += _mm512_reduce_add_ps(a[i]);
    (void)sink;
    return best;
}

/* MLA attention alone on the demo model's shape (8 heads, r_kv 128, d_rope 32,
 * 64-position blocks, f16 cache, canonical): one call as deepseek2's forward
 * pass issues it in a prefill (--tokens tokens of one sequence, the last
 * positions of a --ctx context), the per-pair path (og_cpu_mla_attention_pairs_ws)
 * and the tiled one (og_cpu_mla_attention_ws) alternating, medians of --reps.
 * FLOPs per (token, head, position): 2 (r_kv + d_rope) for the score, 2 r_kv
 * for the weighted sum (a product and a sum per element); the f32 FMA peak:
 * cores x MHz (/proc/cpuinfo) x 2 FMA units x 16 lanes x 2. */
static int bench_attention(int argc, char **argv) {
    static const struct option opts[] = {{"ctx", required_argument, 0, 'c'},     {"threads", required_argument, 0, 't'},
                                         {"tokens", required_argument, 0, 'n'},  {"reps", required_argument, 0, 'r'},
                                         {"kv-type", required_argument, 0, 'k'}, {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    int ctxs[8] = {1024, 4096, 16384}, n_ctx = 3, threads[8], n_threads = 0, T = 16, reps = 5, c;
    og_kv_type kvt = OG_KV_F16;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'c': n_ctx = parse_list(optarg, ctxs, 8); break;
        case 't': n_threads = parse_list(optarg, threads, 8); break;
        case 'n': T = atoi(optarg); break;
        case 'r': reps = atoi(optarg); break;
        case 'k':
            if (!strcmp(optarg, "f16") || !strcmp(optarg, "f32")) kvt = strcmp(optarg, "f16") ? OG_KV_F32 : OG_KV_F16;
            else T = -1;
            break;
        case 'h':
            printf("usage: onegpu bench attention [--ctx 1024,4096,16384] [--threads 1,2] [--tokens 16] [--reps 5]\n"
                   "       [--kv-type f16|f32]\n"
                   "  MLA attention alone (demo shape: 8 heads, r_kv 128, d_rope 32, blocks of 64), one call of\n"
                   "  --tokens tokens at the end of a --ctx context: the per-pair path and the tiled one\n"
                   "  alternating, median ms, GFLOP/s and the fraction of the f32 FMA peak.\n");
            return OG_EXIT_OK;
        default: return OG_EXIT_USAGE;
        }
    }
    cpu_set_t set;
    const int ncpu = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    if (!n_threads) {
        threads[n_threads++] = 1;
        if (ncpu > 1) threads[n_threads++] = ncpu;
    }
    bool bad = T < 1 || T > 4096 || reps < 1 || reps > 99 || n_ctx < 1;
    for (int i = 0; i < n_ctx; i++) bad |= ctxs[i] < T || ctxs[i] > (1 << 22);
    for (int i = 0; i < n_threads; i++) bad |= threads[i] < 1 || threads[i] > 256;
    if (bad) {
        fprintf(stderr, "onegpu bench attention: --tokens 1..4096 <= every --ctx <= 4194304, --reps 1..99, "
                        "--threads 1..256, --kv-type f16 or f32\n");
        return OG_EXIT_USAGE;
    }
    og_cpu_features feat;
    og_cpu_detect(&feat);
    og_isa isa;
    char note[256], err[256];
    if (og_isa_choose(&feat, getenv("ONEGPU_CPU_ISA"), &isa, note, sizeof note, err, sizeof err)) {
        fprintf(stderr, "onegpu bench attention: %s\n", err);
        return OG_EXIT_USAGE;
    }
    og_kernels kern;
    og_kernels_init(isa, &kern);
    enum { H = 8, RKV = 128, DR = 32, W = RKV + DR, BR = 64 };
    const double mhz = cpu_mhz(), fma_ns = feat.os_avx512 && feat.avx512f ? fma_rate() : 0;
    printf("f32 FMA peak per core: %.0f GFLOP/s = %.0f MHz (/proc/cpuinfo) x 2 FMA units x 16 lanes x 2; measured here: "
           "%.2f zmm fma per ns on one core (%.0f GFLOP/s)\n",
           mhz * 1e6 * 64 / 1e9, mhz, fma_ns, fma_ns * 32);
    printf("MLA attention, %d heads, r_kv %d, d_rope %d, %s cache, %d tokens per call, tier %s, %.0f MHz, "
           "medians of %d alternating runs\n",
           H, RKV, DR, og_kv_type_name(kvt), T, og_isa_name(isa), mhz, reps);
    printf("(cpu ms: the process's CPU time per call, all threads: on a shared machine, the work without the waits)\n");
    printf("%7s %7s %10s %10s %8s %10s %10s %8s %8s %11s %11s %12s %5s\n", "ctx", "threads", "pairs ms", "tiled ms",
           "speedup", "pairs GF/s", "tiled GF/s", "peak", "tiled/pk", "pairs cpums", "tiled cpums", "tiled GF/cpus",
           "bits");
    uint64_t rng = 11;
    int rc = OG_EXIT_OK;
    for (int ci = 0; ci < n_ctx && rc == OG_EXIT_OK; ci++) {
        const int ctx = ctxs[ci], nb = (ctx + BR - 1) / BR;
        const size_t eb = og_kv_type_bytes(kvt), blk_elems = (size_t)BR * W;
        uint8_t *cache = malloc((size_t)nb * blk_elems * eb);
        float **blocks = malloc((size_t)nb * sizeof *blocks);
        float *qabs = malloc((size_t)H * T * RKV * sizeof(float)), *qpe = malloc((size_t)T * H * DR * sizeof(float));
        float *c1 = malloc((size_t)H * T * RKV * sizeof(float)), *c2 = malloc((size_t)H * T * RKV * sizeof(float));
        int32_t *pos = malloc((size_t)T * sizeof *pos), *first = calloc((size_t)T, sizeof *first);
        bool *canon = malloc((size_t)T * sizeof *canon);
        if (!cache || !blocks || !qabs || !qpe || !c1 || !c2 || !pos || !first || !canon) {
            fprintf(stderr, "onegpu bench attention: out of memory at ctx %d\n", ctx);
            rc = OG_EXIT_BAD_INPUT;
        }
        for (size_t i = 0; rc == OG_EXIT_OK && i < (size_t)nb * blk_elems; i++) {
            const float v = (float)(og_rand_unit(&rng) * 2 - 1);
            if (kvt == OG_KV_F16) ((uint16_t *)cache)[i] = og_fp32_to_fp16(v);
            else ((float *)cache)[i] = v;
        }
        for (int b = 0; rc == OG_EXIT_OK && b < nb; b++) blocks[b] = (float *)(void *)(cache + (size_t)b * blk_elems * eb);
        for (int i = 0; rc == OG_EXIT_OK && i < H * T * RKV; i++) qabs[i] = (float)(og_rand_unit(&rng) * 2 - 1);
        for (int i = 0; rc == OG_EXIT_OK && i < T * H * DR; i++) qpe[i] = (float)(og_rand_unit(&rng) * 2 - 1);
        for (int t = 0; rc == OG_EXIT_OK && t < T; t++) pos[t] = ctx - T + t, canon[t] = true;
        double flops = 0;
        for (int t = 0; t < T; t++) flops += (double)H * (pos[t] + 1) * (2.0 * W + 2.0 * RKV);
        og_mla_op op = {.n_tok = T, .n_head = H, .r_kv = RKV, .d_rope = DR, .kq_scale = 1.0f / sqrtf((float)W),
                        .q_abs = qabs, .qabs_head_stride = (int64_t)T * RKV, .q_pe = qpe, .qpe_tok_stride = H * DR,
                        .qpe_head_stride = DR, .ctx_head_stride = (int64_t)T * RKV,
                        .kv = {blocks, nb, BR, 0, W, W, kvt}, .kv_first = first, .pos = pos, .canonical = canon};
        for (int ti = 0; ti < n_threads && rc == OG_EXIT_OK; ti++) {
            og_pool *pool = make_pool(threads[ti], err, sizeof err);
            og_buf w1 = {0}, w2 = {0};
            double tp[99], tt[99], cp[99], ct[99];
            og_mla_op a = op, b = op;
            a.ctx = c1;
            b.ctx = c2;
            og_status st = og_cpu_mla_attention_pairs_ws(&kern, pool, &a, &w1); /* warm: scratch, caches */
            if (!st) st = og_cpu_mla_attention_ws(&kern, pool, &b, &w2);
            for (int r = 0; r < reps && !st; r++) {
                double t0 = now_s(), c0 = cpu_s();
                st = og_cpu_mla_attention_pairs_ws(&kern, pool, &a, &w1);
                tp[r] = now_s() - t0, cp[r] = cpu_s() - c0;
                t0 = now_s(), c0 = cpu_s();
                if (!st) st = og_cpu_mla_attention_ws(&kern, pool, &b, &w2);
                tt[r] = now_s() - t0, ct[r] = cpu_s() - c0;
            }
            if (st || !pool) {
                fprintf(stderr, "onegpu bench attention: %s\n", st ? og_status_str(st) : err);
                rc = OG_EXIT_BAD_INPUT;
            } else {
                const bool same = !memcmp(c1, c2, (size_t)H * T * RKV * sizeof(float));
                const double mp = median(tp, reps), mt = median(tt, reps), mcp = median(cp, reps), mct = median(ct, reps);
                const double peak = threads[ti] * mhz * 1e6 * 2 * 16 * 2 / 1e9;
                printf("%7d %7d %10.3f %10.3f %7.2fx %10.2f %10.2f %8.0f %8.3f %11.3f %11.3f %12.2f %5s\n", ctx,
                       threads[ti], mp * 1e3, mt * 1e3, mp / mt, flops / mp / 1e9, flops / mt / 1e9, peak,
                       peak > 0 ? flops / mt / 1e9 / peak : 0, mcp * 1e3, mct * 1e3, flops / mct / 1e9,
                       same ? "same" : "DIFF");
                if (!same) rc = OG_EXIT_BAD_INPUT;
            }
            og_buf_free(&w1);
            og_buf_free(&w2);
            og_pool_free(pool);
        }
        free(cache);
        free(blocks);
        free(qabs);
        free(qpe);
        free(c1);
        free(c2);
        free(pos);
        free(first);
        free(canon);
    }
    return rc;
}

int og_cmd_bench(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "placement")) return og_cmd_bench_placement(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "grammar")) return og_cmd_bench_grammar(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "cuda")) return og_cmd_bench_cuda(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "attention")) return bench_attention(argc - 1, argv + 1);
    if (argc < 2 || strcmp(argv[1], "kernels") != 0) {
        if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
            usage(stdout);
            return OG_EXIT_OK;
        }
        fprintf(stderr, "onegpu bench: 'kernels', 'attention', 'placement', 'grammar' or 'cuda' (onegpu bench placement --help)\n");
        usage(stderr);
        return OG_EXIT_USAGE;
    }
    static const struct option opts[] = {{"json", no_argument, 0, 'j'},          {"size-mib", required_argument, 0, 's'},
                                         {"threads", required_argument, 0, 't'}, {"types", required_argument, 0, 'T'},
                                         {"reps", required_argument, 0, 'r'},    {"help", no_argument, 0, 'h'},
                                         {"k", required_argument, 0, 'k'},       {"rows", required_argument, 0, 'R'},
                                         {"only", required_argument, 0, 'o'},    {"mm-rows", required_argument, 0, 'M'},
                                         {0, 0, 0, 0}};
    bool as_json = false;
    long size_mib = 1024;
    int reps = 5, threads[8], n_threads = 0;
    long K_arg = 7168, rows_arg = 0, mm_rows = 2048;
    const char *types_arg = NULL;
    int c, only = 0; /* 1: matrix x vector only, 2: batched matmul only */
    optind = 2;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'j': as_json = true; break;
        case 's': size_mib = atol(optarg); break;
        case 't': n_threads = parse_list(optarg, threads, 8); break;
        case 'T': types_arg = optarg; break;
        case 'r': reps = atoi(optarg); break;
        case 'k': K_arg = atol(optarg); break;
        case 'R': rows_arg = atol(optarg); break;
        case 'M': mm_rows = atol(optarg); break;
        case 'o':
            if (!strcmp(optarg, "matvec")) only = 1;
            else if (!strcmp(optarg, "matmul")) only = 2;
            else {
                fprintf(stderr, "onegpu bench: --only matvec or --only matmul\n");
                return OG_EXIT_USAGE;
            }
            break;
        case 'h': usage(stdout); return OG_EXIT_OK;
        default: usage(stderr); return OG_EXIT_USAGE;
        }
    }
    if (mm_rows < 16 || mm_rows > 4096) { /* y holds 4096 rows x 512 */
        fprintf(stderr, "onegpu bench: --mm-rows must be 16..4096 (got %ld)\n", mm_rows);
        return OG_EXIT_USAGE;
    }
    if (size_mib < 16 || size_mib > 1 << 20 || reps < 1 || reps > 15 || K_arg < 256 || K_arg % 256 || K_arg > 1 << 20 ||
        rows_arg < 0) {
        fprintf(stderr, "onegpu bench: --size-mib must be >= 16, --reps 1..15, --k a multiple of 256\n");
        return OG_EXIT_USAGE;
    }
    cpu_set_t set;
    int ncpu = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    if (n_threads == 0) {
        threads[n_threads++] = 1;
        if (ncpu > 1) threads[n_threads++] = ncpu;
    }
    for (int i = 0; i < n_threads; i++)
        if (threads[i] < 1 || threads[i] > 256) {
            fprintf(stderr, "onegpu bench: bad thread count\n");
            return OG_EXIT_USAGE;
        }
    og_ggml_type types[OG_TYPE_COUNT];
    int n_types = 0;
    if (types_arg) {
        char *copy = strdup(types_arg), *save = NULL;
        for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            og_ggml_type ty;
            if (og_type_from_name(t, &ty) != OG_OK || !og_quant_traits(ty) || !og_quant_traits(ty)->vec_dot) {
                fprintf(stderr, "onegpu bench: no kernels for type '%s'\n", t);
                free(copy);
                return OG_EXIT_USAGE;
            }
            types[n_types++] = ty;
        }
        free(copy);
    } else {
        static const og_ggml_type def[] = {OG_TYPE_Q4_K, OG_TYPE_Q2_K, OG_TYPE_Q8_0, OG_TYPE_Q6_K, OG_TYPE_Q3_K,
                                           OG_TYPE_Q5_K, OG_TYPE_Q4_0, OG_TYPE_IQ4_NL, OG_TYPE_IQ2_XXS, OG_TYPE_MXFP4,
                                           OG_TYPE_F16, OG_TYPE_BF16};
        memcpy(types, def, sizeof def);
        n_types = (int)(sizeof def / sizeof def[0]);
    }

    og_cpu_features feat;
    og_cpu_detect(&feat);
    char err[512], note[256];
    og_isa isa;
    if (og_isa_choose(&feat, getenv("ONEGPU_CPU_ISA"), &isa, note, sizeof note, err, sizeof err)) {
        fprintf(stderr, "onegpu bench: %s\n", err);
        return OG_EXIT_USAGE;
    }
    if (note[0]) fprintf(stderr, "onegpu bench: %s\n", note);
    og_kernels kern;
    og_kernels_init(isa, &kern);

    size_t bytes = (size_t)size_mib << 20;
    uint8_t *buf = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) {
        fprintf(stderr, "onegpu bench: cannot allocate %ld MiB\n", size_mib);
        return OG_EXIT_USAGE;
    }
    memset(buf, 1, bytes); /* fault every page in before timing */

    json_t *out = json_object(), *mv = json_array(), *mm = json_array();
    json_t *limits = json_object();
    double best_limit = 0;
    if (!as_json)
        printf("CPU tier %s; matrix x vector on %s of weights (K = %ld), median of %d runs\n\n"
               "%-8s %7s %12s %12s %9s %13s %9s\n", og_isa_name(isa), rows_arg ? "N rows" : "the whole buffer", K_arg, reps,
               "type", "threads", "fork GB/s", "read GB/s", "fraction", "canon GB/s", "/ fork");
    const int64_t K = K_arg;
    float *x = malloc((size_t)K * 4 * 512);
    uint64_t rng = 3;
    for (int64_t i = 0; i < K * 512; i++) x[i] = (float)(og_rand_unit(&rng) * 2 - 1);
    void *scratch = malloc(og_cpu_matmul_scratch(OG_TYPE_F32, K, 512));
    float *y = malloc(sizeof(float) * 4096 * 512);

    for (int ti = 0; ti < n_threads && only != 2; ti++) {
        og_pool *pool = make_pool(threads[ti], err, sizeof err);
        if (!pool) {
            fprintf(stderr, "onegpu bench: %s\n", err);
            return OG_EXIT_USAGE;
        }
        double limit = read_bandwidth(pool, buf, bytes, reps, feat.avx2);
        char key[16];
        snprintf(key, sizeof key, "%d", threads[ti]);
        json_object_set_new(limits, key, json_real(limit));
        if (limit > best_limit) best_limit = limit;
        for (int t = 0; t < n_types; t++) {
            const og_type_traits *tr = og_quant_traits(types[t]);
            uint64_t rb;
            og_row_bytes(tr->type, (uint64_t)K, &rb);
            int64_t n_rows = rows_arg && (uint64_t)rows_arg * rb <= bytes ? rows_arg : (int64_t)(bytes / rb);
            if (fill_weights(tr->type, K, n_rows, buf, rb)) continue;
            og_weight w = {tr->type, buf, K, n_rows, rb};
            float *yy = malloc((size_t)n_rows * sizeof *yy);
            /* the fork's order and the canonical one (--cpu-numerics gpu), through the
             * same call, run after run in turn so that both see the same machine */
            og_matmul_job fj = {.w = &w, .x = x, .m = 1, .y = yy, .numerics = OG_NUMERICS_FORK};
            og_matmul_job dj = {.w = &w, .x = x, .m = 1, .y = yy, .numerics = OG_NUMERICS_CANONICAL};
            const size_t sb = og_cpu_matmul_multi_scratch(&fj, 1);
            double tm[16], td[16];
            const bool canon = og_cpu_matmul_multi(&kern, pool, &dj, 1, scratch, sb) == OG_OK;
            og_cpu_matmul_multi(&kern, pool, &fj, 1, scratch, sb);
            for (int r = 0; r < reps; r++) {
                double t0 = now_s();
                og_cpu_matmul_multi(&kern, pool, &fj, 1, scratch, sb);
                tm[r] = now_s() - t0;
                if (!canon) continue;
                t0 = now_s();
                og_cpu_matmul_multi(&kern, pool, &dj, 1, scratch, sb);
                td[r] = now_s() - t0;
            }
            double bps = (double)(rb * (uint64_t)n_rows) / median(tm, reps);
            double dbps = canon ? (double)(rb * (uint64_t)n_rows) / median(td, reps) : 0;
            free(yy);
            json_array_append_new(mv, json_pack("{s:s, s:i, s:f, s:f, s:f, s:f}", "type", tr->name, "threads", threads[ti],
                                                "bytes_per_s", bps, "limit_bytes_per_s", limit, "fraction", bps / limit,
                                                "canonical_bytes_per_s", dbps));
            if (!as_json)
                printf("%-8s %7d %12.2f %12.2f %9.3f %13.2f %9.3f\n", tr->name, threads[ti], bps / 1e9, limit / 1e9,
                       bps / limit, dbps / 1e9, dbps / bps);
        }
        og_pool_free(pool);
    }

    /* Batched matmul: a weight matrix that stays in cache (256 rows of 7168), so
     * this measures arithmetic, per tier: the fork's order through og_cpu_matmul and
     * the canonical one (the default numerics, the tiled product where the tier has
     * it) through og_cpu_matmul_multi, run after run in turn. */
    og_pool *pool = only == 1 ? NULL : make_pool(threads[n_threads - 1], err, sizeof err);
    /* the measured vpdpbusd rate checks the peak below: only when the batched part runs */
    const double mhz = cpu_mhz(), dp_ns = pool && feat.avx512vnni && feat.os_avx512 ? vnni_rate() : 0;
    /* the VNNI peak: each core retires two 512-bit vpdpbusd per cycle (ports 0 and 5
     * of a core with two 512-bit FMA units), each 64 int8 multiply-adds = 128 ops */
    const double peak = pool ? og_pool_size(pool) * mhz * 1e6 * 2 * 64 * 2 / 1e9 : 0;
    if (!as_json && pool) {
        printf("\nVNNI peak %.0f GOP/s = %d cores x %.0f MHz (/proc/cpuinfo) x 2 vpdpbusd zmm per cycle x 64 int8 MACs x 2\n"
               "(measured here: %.2f vpdpbusd zmm per ns on one core = %.2f per cycle at that clock)\n",
               peak, og_pool_size(pool), mhz, dp_ns, mhz > 0 ? dp_ns * 1e3 / mhz : 0);
        printf("batched matmul, %d threads, weights N x %lld (N = %ld rows, the scalar tier 256), activations quantized "
               "in each call (canon) or beforehand (given), GFLOP/s (2 K N M / time)\n%-8s %-7s %7s %10s %10s %9s %12s %9s\n",
               threads[n_threads - 1], (long long)K, mm_rows, "type", "tier", "batch", "fork", "canon", "c / peak", "canon given", "g / peak");
    }
    static const int batches[] = {16, 64, 512};
    static const og_ggml_type mm_types[] = {OG_TYPE_Q4_K, OG_TYPE_Q2_K, OG_TYPE_Q3_K, OG_TYPE_Q8_0, OG_TYPE_Q6_K, OG_TYPE_Q5_K};
    void *mscratch = malloc(og_cpu_matmul_scratch(OG_TYPE_F32, K, 512) + 64); /* the largest activation rows */
    const char *forced = getenv("ONEGPU_CPU_ISA");
    for (int tier = 0; tier <= OG_ISA_AVX512 && pool && mscratch; tier++) {
        if (forced && *forced && tier != (int)isa) continue; /* ONEGPU_CPU_ISA: that tier only */
        og_isa got;
        if (og_isa_choose(&feat, og_isa_name((og_isa)tier), &got, note, sizeof note, err, sizeof err)) continue;
        og_kernels kt;
        og_kernels_init((og_isa)tier, &kt);
        for (size_t t = 0; t < sizeof mm_types / sizeof mm_types[0]; t++) {
            bool listed = !types_arg; /* --types: the batched types among them */
            for (int u = 0; u < n_types && !listed; u++) listed = types[u] == mm_types[t];
            if (!listed) continue;
            const og_type_traits *tr = og_quant_traits(mm_types[t]);
            uint64_t rb;
            og_row_bytes(tr->type, (uint64_t)K, &rb);
            const int64_t n_rows = tier == OG_ISA_SCALAR ? 256 : mm_rows;
            if ((uint64_t)n_rows * rb > bytes) continue; /* --size-mib below the matrix */
            fill_weights(tr->type, K, n_rows, buf, rb);
            og_weight w = {tr->type, buf, K, n_rows, rb};
            for (size_t bi = 0; bi < 3; bi++) {
                int M = batches[bi];
                size_t sb = og_cpu_matmul_scratch(tr->type, K, M);
                og_matmul_job cj = {.w = &w, .x = x, .m = M, .y = y, .numerics = OG_NUMERICS_CANONICAL};
                const size_t cb = og_cpu_matmul_multi_scratch(&cj, 1);
                /* the product alone: the rows quantized beforehand (og_act_rows), as a forward pass
                 * quantizes a token's row once for every product that reads it */
                uint64_t qrb = 0;
                og_row_bytes(tr->vec_dot_type, (uint64_t)K, &qrb);
                uint8_t *xq = kt.quantize_act[tr->vec_dot_type] ? malloc((size_t)qrb * (size_t)M) : NULL;
                for (int r = 0; xq && r < M; r++) kt.quantize_act[tr->vec_dot_type](x + (size_t)r * K, xq + (size_t)r * qrb, K);
                const og_act_rows given = {xq, (size_t)qrb};
                og_buf gws = {0};
                double tm[16], tc[16], tg[16], t0 = now_s();
                og_cpu_matmul(&kt, pool, &w, x, M, y, scratch, sb);
                og_cpu_matmul_multi(&kt, pool, &cj, 1, mscratch, cb);
                const bool given_ok = xq && !og_cpu_matmul_multi_given_ws(&kt, pool, &cj, 1, &given, &gws);
                double once = now_s() - t0;
                int r_here = once > 2.0 ? 1 : reps;
                for (int r = 0; r < r_here; r++) {
                    t0 = now_s();
                    og_cpu_matmul(&kt, pool, &w, x, M, y, scratch, sb);
                    tm[r] = now_s() - t0;
                    t0 = now_s();
                    og_cpu_matmul_multi(&kt, pool, &cj, 1, mscratch, cb);
                    tc[r] = now_s() - t0;
                    t0 = now_s();
                    if (given_ok) og_cpu_matmul_multi_given_ws(&kt, pool, &cj, 1, &given, &gws);
                    tg[r] = now_s() - t0;
                }
                free(xq);
                og_buf_free(&gws);
                const double ops = 2.0 * (double)K * (double)n_rows * M;
                double gflops = ops / median(tm, r_here) / 1e9, cflops = ops / median(tc, r_here) / 1e9;
                const double gv = given_ok ? ops / median(tg, r_here) / 1e9 : 0;
                json_array_append_new(mm, json_pack("{s:s, s:s, s:i, s:i, s:f, s:f, s:f}", "type", tr->name, "tier",
                                                    og_isa_name((og_isa)tier), "batch", M, "threads", og_pool_size(pool),
                                                    "gflops", gflops, "canonical_gflops", cflops, "vnni_peak_gops", peak));
                json_object_set_new(json_array_get(mm, json_array_size(mm) - 1), "rows", json_integer(n_rows));
                json_object_set_new(json_array_get(mm, json_array_size(mm) - 1), "canonical_given_gflops", json_real(gv));
                if (!as_json)
                    printf("%-8s %-7s %7d %10.2f %10.2f %9.3f %12.2f %9.3f\n", tr->name, og_isa_name((og_isa)tier), M, gflops,
                           cflops, peak > 0 ? cflops / peak : 0, gv, peak > 0 ? gv / peak : 0);
            }
        }
    }
    free(mscratch);
    json_object_set_new(out, "vnni_peak_gops", json_real(peak));
    json_object_set_new(out, "cpu_mhz", json_real(mhz));
    json_object_set_new(out, "vpdpbusd_per_ns_one_core", json_real(dp_ns));
    og_pool_free(pool);
    json_object_set_new(out, "cpu_tier", json_string(og_isa_name(isa)));
    json_object_set_new(out, "size_bytes", json_integer((json_int_t)bytes));
    json_object_set_new(out, "limit_bytes_per_s", json_real(best_limit));
    json_object_set_new(out, "limit_bytes_per_s_by_threads", limits);
    json_object_set_new(out, "matvec", mv);
    json_object_set_new(out, "matmul", mm);
    if (as_json) {
        char *s = json_dumps(out, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
        puts(s);
        free(s);
    }
    json_decref(out);
    free(x);
    free(y);
    free(scratch);
    munmap(buf, bytes);
    return OG_EXIT_OK;
}
