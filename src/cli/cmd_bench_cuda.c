/* `onegpu bench cuda`: each quantized product kernel of the cuda device against
 * the device's own copy bandwidth (issue 15's goal: >= 0.7 of it). A matrix of
 * about --size-mib MiB of each type (random block bytes: the kernels do the same
 * work whatever the values) times one activation row, as a decode step's
 * product; the time per product is the mean of --reps back-to-back launches
 * between two CUDA events, after one warm-up; the rate is the matrix's bytes per
 * second. The copy rate is a cudaMemcpy device-to-device of the same size
 * (median of --reps, counted as read + write). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "og_device_cuda.h"

static void usage(FILE *f) {
    fprintf(f, "usage: onegpu bench cuda [--gpu N] [--size-mib M] [--k K] [--reps R] [--json]\n"
               "  each canonical product kernel (Q8_0, Q4_0, Q5_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) on a matrix of about\n"
               "  M MiB (default 512) with rows of K (default 7168), one activation row, as GB/s of weight bytes\n"
               "  and as a share of the device's measured copy bandwidth (cudaMemcpy device to device)\n");
}

typedef struct mm_ctx {
    og_device *d;
    og_stream *s;
    og_weight w;
    const float *x;
    float *y;
} mm_ctx;

static og_status run_mm(void *vctx, char *err, size_t errlen) {
    mm_ctx *c = vctx;
    return og_device_cuda_matmul(c->d, c->s, &c->w, c->x, 1, c->y, err, errlen);
}

int og_cmd_bench_cuda(int argc, char **argv) {
    static const struct option opts[] = {{"gpu", required_argument, 0, 'g'},  {"size-mib", required_argument, 0, 's'},
                                         {"k", required_argument, 0, 'k'},    {"reps", required_argument, 0, 'r'},
                                         {"json", no_argument, 0, 'j'},       {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    long gpu = 0, mib = 512, K = 7168, reps = 20;
    bool as_json = false;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        char *end = NULL;
        long v = optarg ? strtol(optarg, &end, 10) : 0;
        const bool bad = optarg && (*end || v < 0);
        switch (c) {
        case 'g': gpu = v; break;
        case 's': mib = v; break;
        case 'k': K = v; break;
        case 'r': reps = v; break;
        case 'j': as_json = true; break;
        case 'h': usage(stdout); return OG_EXIT_OK;
        default: usage(stderr); return OG_EXIT_USAGE;
        }
        if (bad || (c == 's' && (v < 1 || v > 65536)) || (c == 'r' && (v < 1 || v > 1000)) ||
            (c == 'k' && (v < 256 || v % 256)) || (c == 'g' && v > 64)) {
            fprintf(stderr, "onegpu bench cuda: bad value '%s' for --%s\n", optarg,
                    c == 'g' ? "gpu" : c == 's' ? "size-mib" : c == 'k' ? "k (a multiple of 256)" : "reps");
            return OG_EXIT_USAGE;
        }
    }
    char err[512], desc[256];
    og_device *d;
    if (og_device_cuda_create((int)gpu, &d, err, sizeof err)) {
        fprintf(stderr, "onegpu bench cuda: %s\n", err);
        return OG_EXIT_USAGE;
    }
    og_device_cuda_describe(d, desc, sizeof desc);
    const uint64_t bytes = (uint64_t)mib << 20;
    double copy = 0;
    og_stream *s = NULL;
    og_status st = og_device_cuda_copy_rate(d, bytes, (int)reps, &copy, err, sizeof err);
    if (!st) st = d->ops->stream_create(d, &s, err, sizeof err);
    static const og_ggml_type types[] = {OG_TYPE_Q8_0, OG_TYPE_Q4_0, OG_TYPE_Q5_0, OG_TYPE_Q2_K,
                                         OG_TYPE_Q3_K, OG_TYPE_Q4_K, OG_TYPE_Q5_K, OG_TYPE_Q6_K};
    double rate[8] = {0};
    uint8_t *host = st ? NULL : malloc(bytes);
    float *xh = st ? NULL : malloc((size_t)K * 4);
    if (!st && (!host || !xh)) st = og_fail(err, sizeof err, OG_ERR_NOMEM, "out of memory");
    uint64_t r = 0x2545F4914F6CDD1Dull;
    for (uint64_t i = 0; !st && i < bytes; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        host[i] = (uint8_t)(r >> 56);
    }
    for (long i = 0; !st && i < K; i++) xh[i] = (float)((i * 37) % 101 - 50) / 50.0f;
    void *dw = NULL, *dx = NULL, *dy = NULL;
    if (!st) st = d->ops->alloc(d, bytes, &dw, err, sizeof err);
    if (!st) st = d->ops->alloc(d, (uint64_t)K * 4, &dx, err, sizeof err);
    if (!st) st = d->ops->alloc(d, bytes / 16 + 4096, &dy, err, sizeof err); /* n_rows floats, rows >= 18 bytes */
    if (!st) st = d->ops->copy_to_device(d, s, dw, host, bytes, err, sizeof err);
    if (!st) st = d->ops->copy_to_device(d, s, dx, xh, (uint64_t)K * 4, err, sizeof err);
    for (size_t t = 0; !st && t < sizeof types / sizeof types[0]; t++) {
        uint64_t rb;
        og_row_bytes(types[t], (uint64_t)K, &rb);
        mm_ctx mc = {d, s, {types[t], dw, K, (int64_t)(bytes / rb), (size_t)rb}, dx, dy};
        double ms;
        st = og_device_cuda_time(d, s, run_mm, &mc, (int)reps, &ms, err, sizeof err);
        if (!st) rate[t] = (double)(mc.w.n_rows * rb) / (ms * 1e-3);
    }
    if (st) {
        fprintf(stderr, "onegpu bench cuda: %s\n", err);
    } else if (as_json) {
        printf("{\"device\": \"%s\", \"k\": %ld, \"size_mib\": %ld, \"copy_bytes_per_s\": %.0f, \"kernels\": [", desc, K,
               mib, copy);
        for (size_t t = 0; t < 8; t++)
            printf("%s{\"type\": \"%s\", \"bytes_per_s\": %.0f, \"of_copy\": %.3f}", t ? ", " : "",
                   og_quant_traits(types[t])->name, rate[t], rate[t] / copy);
        printf("]}\n");
    } else {
        printf("device: %s\ncopy (device to device, read + write): %.1f GB/s\n", desc, copy / 1e9);
        printf("%-6s %10s %8s\n", "type", "GB/s", "of copy");
        for (size_t t = 0; t < 8; t++)
            printf("%-6s %10.1f %8.2f\n", og_quant_traits(types[t])->name, rate[t] / 1e9, rate[t] / copy);
    }
    if (dw) d->ops->free(d, dw);
    if (dx) d->ops->free(d, dx);
    if (dy) d->ops->free(d, dy);
    if (s) d->ops->stream_destroy(d, s);
    og_device_destroy(d);
    free(host);
    free(xh);
    return st ? OG_EXIT_BAD_INPUT : OG_EXIT_OK;
}
