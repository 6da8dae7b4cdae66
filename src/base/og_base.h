/* onegpu base: status codes, error messages, logging, small checked arithmetic.
 *
 * Every fallible public function of onegpu returns an og_status and, where the
 * caller can use more detail, writes a one-line message into a caller-owned
 * buffer (err, errlen). No part keeps global mutable state: loggers, pools and
 * RNGs hang off the object that uses them. */
#ifndef OG_BASE_H
#define OG_BASE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Status codes: 0 is success, every failure is negative (libuv/redis habit). */
typedef enum og_status {
    OG_OK = 0,
    OG_ERR_INVALID_ARG = -1,  /* caller passed a bad value (a usage error) */
    OG_ERR_IO = -2,           /* open/read/write/mmap failed; errno text in message */
    OG_ERR_NOMEM = -3,        /* allocation failed */
    OG_ERR_FORMAT = -4,       /* input file or data is malformed */
    OG_ERR_UNSUPPORTED = -5,  /* well-formed but not supported by this build */
    OG_ERR_NOT_FOUND = -6,    /* key, tensor or file not present */
    OG_ERR_TYPE = -7,         /* value present but of the wrong type */
    OG_ERR_RANGE = -8,        /* value out of the allowed range or overflow */
    OG_ERR_STATE = -9,        /* call not valid in the object's current state */
} og_status;

/* Short constant text for a status ("malformed input"). Never NULL. */
const char *og_status_str(og_status st);

/* Formats a message into err (if err != NULL && errlen > 0) and returns st, so a
 * failing path can be `return og_fail(err, errlen, OG_ERR_FORMAT, "...", ...);`. */
og_status og_fail(char *err, size_t errlen, og_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* --- logging ------------------------------------------------------------- */
typedef enum og_log_level {
    OG_LOG_ERROR = 0,
    OG_LOG_WARN = 1,
    OG_LOG_INFO = 2,
    OG_LOG_DEBUG = 3,
} og_log_level;

/* A logger is a plain value owned by whoever runs the show (main, an engine). */
typedef struct og_logger {
    og_log_level level; /* messages above this level are dropped */
    FILE *out;          /* NULL means stderr */
} og_logger;

/* Writes "onegpu: <level>: message\n". A NULL logger logs warnings and errors to
 * stderr. No status: logging failures are not actionable. */
void og_log(const og_logger *lg, og_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* --- checked arithmetic and helpers -------------------------------------- */

/* *out = a * b; returns false on uint64 overflow. */
static inline bool og_mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
/* *out = a + b; returns false on uint64 overflow. */
static inline bool og_add_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_add_overflow(a, b, out);
}
/* Round o up to a multiple of a (a > 0); returns false on overflow. */
static inline bool og_align_up_u64(uint64_t o, uint64_t a, uint64_t *out) {
    uint64_t pad = (a - o % a) % a;
    return og_add_u64(o, pad, out);
}

/* FNV-1a 64-bit hash of n bytes (offset 0xcbf29ce484222325, prime 0x100000001b3). */
uint64_t og_fnv1a64(const void *data, size_t n, uint64_t seed);
#define OG_FNV1A64_INIT 0xcbf29ce484222325ULL

/* A host buffer kept between calls (the forward pass's workspaces: issue 18):
 * grown when a call needs more, never shrunk, so that calls of a size already
 * seen allocate nothing (no malloc, no fresh pages for the kernel to zero-fill).
 * Zero-initialized = empty. One user at a time (whoever owns it serializes). */
typedef struct og_buf {
    void *p;        /* 64-byte aligned, cap bytes */
    size_t cap;     /* bytes */
    uint64_t grows; /* allocations made (the tests' and benchmarks' count) */
} og_buf;

/* Makes b hold at least `bytes` bytes: a smaller buffer is replaced by one of
 * max(bytes, 1.5 x cap) (rounded up to 64 bytes), so a slowly rising need
 * reallocates O(log) times; the contents are NOT kept. Errors: OG_ERR_NOMEM (b
 * is then empty). */
og_status og_buf_reserve(og_buf *b, size_t bytes);
/* Frees the memory and empties *b (grows stays). */
void og_buf_free(og_buf *b);

/* Parses a byte size such as "512", "96G", "1.5GiB", "280g", "64M" (powers of 1024;
 * suffixes K, M, G, T with optional "i"/"B"; plain decimal digits only). Returns
 * OG_ERR_INVALID_ARG on junk, fractional bytes and sizes above 1 EiB. */
og_status og_parse_size(const char *s, uint64_t *out_bytes);

/* Formats bytes for people: "1.50 GiB". Returns buf. */
const char *og_fmt_bytes(uint64_t bytes, char *buf, size_t buflen);

/* Reads a whole file into a malloc'ed, NUL-terminated buffer (*out_len excludes
 * the NUL). Refuses files above max_bytes with OG_ERR_RANGE. */
og_status og_read_file(const char *path, size_t max_bytes, char **out, size_t *out_len,
                       char *err, size_t errlen);

/* Writes len bytes to path atomically: a temporary file beside it (mkstemp),
 * fsync, rename; keeps an existing file's mode (new files 0644); refuses what
 * og_check_writable refuses. On any error the old file is untouched and the
 * temporary removed. Errors: OG_ERR_IO naming the path and errno's text. */
og_status og_write_file_atomic(const char *path, const void *data, size_t len, char *err, size_t errlen);

/* Whether og_write_file_atomic could write path: it is a regular file or does
 * not exist (never a link, device or directory, which the rename would
 * replace) and its directory is writable. Errors: OG_ERR_IO with the reason. */
og_status og_check_writable(const char *path, char *err, size_t errlen);

/* splitmix64: a tiny seeded generator for tests and synthetic models (state owned
 * by the caller). Source: Steele, Lea, Flood, "Fast splittable PRNGs" (2014). */
static inline uint64_t og_splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
/* Uniform double in [0, 1) from 53 random bits. */
static inline double og_rand_unit(uint64_t *state) {
    return (double)(og_splitmix64(state) >> 11) * (1.0 / 9007199254740992.0);
}

#endif

/* SipHash-1-3 of n bytes under a 128-bit key (Aumasson & Bernstein, "SipHash: a
 * fast short-input PRF", 2012; 1-3 rounds as Python and Rust use for hash
 * tables). With a random key, file contents cannot force hash collisions. */
uint64_t og_siphash13(const uint64_t key[2], const void *data, size_t n);

/* Fills key with random bits (getrandom; falls back to time and address bits if
 * the kernel refuses: the key only needs to be unpredictable to file authors). */
void og_random_key(uint64_t key[2]);

/* True if s (n bytes) is valid UTF-8 (no overlongs, surrogates or > U+10FFFF). */
bool og_utf8_valid(const char *s, size_t n);
/* Copies s (n bytes) to out (room for 3 n bytes) with each maximal invalid
 * subpart replaced by U+FFFD (Unicode 15 §3.9 "Substitution of Maximal
 * Subparts", as WHATWG's decoder does); returns the bytes written. Never fails. */
size_t og_utf8_repair(const char *s, size_t n, char *out);

/* Writes s (n bytes) into out as printable text: control bytes and invalid UTF-8
 * become \xNN, output cut to outlen-1 bytes with "..." when longer. Used wherever
 * a name from an untrusted file reaches a terminal. Returns out. */
const char *og_printable(const char *s, size_t n, char *out, size_t outlen);

/* Host memory facts: MemAvailable from /proc/meminfo, and the tightest cgroup
 * memory limit that applies to this process (v2 memory.max, or v1
 * memory.limit_in_bytes; UINT64_MAX when none). Bytes. Errors: OG_ERR_IO when
 * /proc/meminfo cannot be read. */
og_status og_sys_memory(uint64_t *mem_available, uint64_t *cgroup_limit);

/* --- NUMA: topology from sysfs, memory policy ----------------------------- */
/* sysfs: the directory read as Linux's /sys; NULL means "/sys" (tests give a
 * tree they build, with devices/system/node/nodeN/cpulist files). */
#define OG_MAX_CPUS 4096
#define OG_MAX_NUMA_NODES 1024

/* A Linux cpulist ("0-3,8,10-11", a trailing newline allowed) into cpus[0..*n),
 * in the order written, CPU ids < OG_MAX_CPUS. Errors: OG_ERR_FORMAT (junk, a
 * range whose end is below its start), OG_ERR_RANGE (more than cap CPUs). */
og_status og_cpulist_parse(const char *s, int *cpus, int cap, int *n, char *err, size_t errlen);

/* cpus[0..n) as a cpulist ("0-3,8"), cut to outlen. Returns out; never fails. */
const char *og_cpulist_format(const int *cpus, int n, char *out, size_t outlen);

/* The CPUs of NUMA node `node` (SYSFS/devices/system/node/nodeN/cpulist), at most
 * cap. Errors: OG_ERR_NOT_FOUND when the node does not exist ("NUMA node 5 does
 * not exist (this machine's nodes: 0-1)", from .../node/online) or has no CPUs;
 * OG_ERR_FORMAT, OG_ERR_RANGE as og_cpulist_parse. */
og_status og_sys_node_cpus(const char *sysfs, int node, int *cpus, int cap, int *n, char *err, size_t errlen);

/* The NUMA node of the first NVIDIA GPU on PCI (SYSFS/bus/pci/devices/X with
 * vendor 0x10de and a display class 0x03xxxx: its numa_node). -1 when there is
 * none or Linux does not know its node (numa_node -1, as on one-node machines).
 * No status: "unknown" is an answer. */
int og_sys_gpu_node(const char *sysfs);

/* The calling thread's memory policy (inherited by threads it creates later):
 * preferred node `node` (set_mempolicy MPOL_PREFERRED). Errors: OG_ERR_IO with
 * the errno text when the kernel refuses (EPERM under a container's seccomp),
 * OG_ERR_INVALID_ARG for a node outside 0..OG_MAX_NUMA_NODES-1. */
og_status og_sys_prefer_node(int node, char *err, size_t errlen);

/* [addr, addr + len) bytes (widened to whole pages) preferred on node `node`
 * (mbind MPOL_PREFERRED; pages already in memory are moved there, MPOL_MF_MOVE,
 * where only this process maps them). For a MAP_SHARED file mapping Linux keeps
 * the policy for moves only: new page-cache pages follow the faulting thread's
 * policy (og_sys_prefer_node). Errors as og_sys_prefer_node ("mbind: ..."). */
og_status og_sys_bind_memory(const void *addr, size_t len, int node, char *err, size_t errlen);
