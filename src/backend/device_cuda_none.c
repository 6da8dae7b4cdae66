/* og_device_cuda.h in a build without CUDA (-DONEGPU_CUDA=OFF, or AUTO without
 * nvcc): the device cannot be created, and says how to get one. */
#include "og_device_cuda.h"

#include <unistd.h>

bool og_cuda_built(void) { return false; }

bool og_cuda_forward_type(og_ggml_type t) {
    (void)t;
    return false;
}

og_status og_device_cuda_create(int gpu, og_device **out, char *err, size_t errlen) {
    (void)gpu;
    *out = NULL;
    return og_fail(err, errlen, OG_ERR_UNSUPPORTED,
                   "this build has no CUDA (rebuild with nvcc on PATH or /usr/local/cuda: cmake -DONEGPU_CUDA=ON)");
}

og_status og_device_cuda_describe(og_device *d, char *buf, size_t buflen) {
    (void)d, (void)buf, (void)buflen;
    return OG_ERR_INVALID_ARG;
}

og_status og_device_cuda_host_register(og_device *d, const void *p, uint64_t bytes, uint64_t *pinned, char *err,
                                       size_t errlen) {
    (void)d, (void)p, (void)bytes;
    *pinned = 0;
    return og_fail(err, errlen, OG_ERR_INVALID_ARG, "not a cuda device (this build has no CUDA)");
}

og_status og_device_cuda_matmul(og_device *d, og_stream *s, const og_weight *w, const float *x, int64_t m, float *y,
                                char *err, size_t errlen) {
    (void)d, (void)s, (void)w, (void)x, (void)m, (void)y;
    return og_fail(err, errlen, OG_ERR_UNSUPPORTED, "this build has no CUDA");
}

og_status og_device_cuda_copy_rate(og_device *d, uint64_t bytes, int reps, double *bytes_per_s, char *err,
                                   size_t errlen) {
    (void)d, (void)bytes, (void)reps;
    *bytes_per_s = 0;
    return og_fail(err, errlen, OG_ERR_UNSUPPORTED, "this build has no CUDA");
}

og_status og_device_cuda_time(og_device *d, og_stream *s, og_status (*fn)(void *ctx, char *err, size_t errlen),
                              void *ctx, int reps, double *ms_per_rep, char *err, size_t errlen) {
    (void)d, (void)s, (void)fn, (void)ctx, (void)reps;
    *ms_per_rep = 0;
    return og_fail(err, errlen, OG_ERR_UNSUPPORTED, "this build has no CUDA");
}
