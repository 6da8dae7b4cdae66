/* The `cuda` device (og_device.h on an NVIDIA GPU; src/backend/cuda/). Built when
 * CMake finds nvcc (-DONEGPU_CUDA=AUTO, the default; ON requires it, OFF never
 * builds it). In a build without it every function here still exists and
 * og_device_cuda_create fails with OG_ERR_UNSUPPORTED and a line saying how to
 * rebuild, so callers need no #ifdef.
 *
 * What it implements of og_device_ops: memory (cudaMalloc; mem_info is
 * cudaMemGetInfo, so the planner can size the device without --vram), streams
 * (one non-blocking cudaStream_t each) and events (cudaEvent_t per record,
 * og_event = (stream index + 1) << 48 | record count, as the cpu device), copies
 * both ways (a copy to pageable host memory lands in a pinned staging buffer of
 * the stream and is copied out by a host function in stream order, so
 * copy_to_host never blocks the caller), and the routed-expert op on the
 * canonical kernels (Q8_0, Q4_0, Q5_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K: bit for bit
 * the host's og_kernels.vec_dot_canonical; other types are OG_ERR_UNSUPPORTED).
 * Every CUDA call is checked through one macro: a failure becomes an og_status
 * (OG_ERR_NOMEM for memory, OG_ERR_IO otherwise) with "CALL failed at FILE:LINE:
 * cudaErrorName (text)" in err, never an abort. */
#ifndef OG_DEVICE_CUDA_H
#define OG_DEVICE_CUDA_H

#include "og_device.h"

/* Whether this build has the cuda device (cannot fail). */
bool og_cuda_built(void);

/* Whether this machine looks like it has an NVIDIA GPU with a driver loaded
 * (/proc/driver/nvidia/version exists, or /dev/nvidia0; $ONEGPU_NVIDIA_PROC names
 * another file to look for instead, for tests); read-only, no CUDA call, so a
 * build without CUDA can say that it is leaving a GPU unused. */
bool og_cuda_machine_has_gpu(void);

/* Creates the cuda device on GPU `gpu` (0-based, as CUDA_VISIBLE_DEVICES
 * numbers them). Errors: OG_ERR_UNSUPPORTED when the build has no CUDA, when no
 * driver or no GPU is present, or when the GPU has no kernel image for its
 * architecture (the build has sm_90 and sm_120), each one line; OG_ERR_RANGE for
 * a gpu index beyond the GPUs present; OG_ERR_IO for another CUDA failure. */
og_status og_device_cuda_create(int gpu, og_device **out, char *err, size_t errlen);

/* Whether the cuda device's forward-pass ops take weights of type t: the
 * matmul op (the canonical products of Q8_0, Q4_0, Q5_0, Q2_K ... Q6_K, IQ2_XXS
 * and MXFP4, and of
 * F32, F16, BF16 in og_dot_f32_device's order) and get_rows (each type's
 * dequantization). Always false in a build without CUDA. */
bool og_cuda_forward_type(og_ggml_type t);

/* One line about the device: "NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB, 131.2 GiB
 * free)" into buf. OG_ERR_INVALID_ARG when d is not a cuda device. */
og_status og_device_cuda_describe(og_device *d, char *buf, size_t buflen);

/* Pins host memory [p, p + bytes) for the device's DMA (cudaHostRegister,
 * read-only: the mapped model file is mapped read-only), so copies from it run
 * at the bus's rate and asynchronously. Only the whole pages inside the range are
 * pinned (neighbouring ranges of one file never overlap). Unpinned at destroy.
 * NUMA: pinning locks the pages where they are; bind them to the GPU's node
 * first (run.sh's numactl, or --numa-node's mbind happens before the placement
 * is built), or the copies cross the socket link. Returns the bytes pinned in
 * *pinned. Errors: OG_ERR_INVALID_ARG (not a cuda device), OG_ERR_IO with the
 * CUDA error (the range stays pageable; copies still work, only slower). */
og_status og_device_cuda_host_register(og_device *d, const void *p, uint64_t bytes, uint64_t *pinned, char *err,
                                       size_t errlen);

/* ---- for tests and benchmarks: one product and the copy rate ---- */

/* y[r][o] = vec_dot_canonical(weight row o, quantize_act(x[r])) for r < m, o <
 * w->n_rows, on stream s: w->data, x [m][w->K] f32 and y [m][w->n_rows] f32 in
 * device memory. The product kernel of the expert op. Errors as og_device_ops.experts. */
og_status og_device_cuda_matmul(og_device *d, og_stream *s, const og_weight *w, const float *x, int64_t m, float *y,
                                char *err, size_t errlen);

/* Device-to-device copy bandwidth in bytes/s (cudaMemcpy of bytes, median of
 * reps timed with events; counted as read + write, 2 x bytes per copy). */
og_status og_device_cuda_copy_rate(og_device *d, uint64_t bytes, int reps, double *bytes_per_s, char *err,
                                   size_t errlen);

/* Milliseconds between two events of one stream recorded with timing (for the
 * benchmark): runs fn(ctx) reps times on s between them and waits. */
og_status og_device_cuda_time(og_device *d, og_stream *s, og_status (*fn)(void *ctx, char *err, size_t errlen),
                              void *ctx, int reps, double *ms_per_rep, char *err, size_t errlen);

#endif
