/* What `onegpu run` and `onegpu serve` share: their placement and plan flags
 * (one parser, one validation), the plan before loading, the placement
 * (og_placement) after it, and at the end the usage profile. */
#ifndef OG_CLI_PLACEMENT_H
#define OG_CLI_PLACEMENT_H

#include "og_moe.h"
#include "og_placement.h"
#include "og_policy.h"

#include <getopt.h>

/* The flags `run` and `serve` share, parsed and checked in one place (one
 * validation, one set of defaults; a new shared flag is one more case here). */
typedef struct og_cli_flags {
    og_plan_input pin;       /* --vram, --ram, --reserve, --expert-slots; ctx, parallel and batch_tokens
                                are filled by og_cli_plan_flags */
    uint32_t ctx;            /* --ctx: positions per sequence; 0 = the model's (og_cli_default_ctx) */
    uint32_t threads;        /* --threads; 0 = one per CPU this process may run on */
    uint32_t device_threads; /* --device-threads: the cpu device's threads; 0 = as --threads */
    long numa_node;          /* --numa-node N; -1 = the GPU's node when known (og_cli_numa_choose) */
    long migrate;            /* --migrate: experts per MoE layer per step (default 2) */
    const char *profile;     /* --profile FILE, or NULL */
    const char *save_profile;/* --save-profile FILE, or NULL */
    bool numerics_gpu;       /* --cpu-numerics gpu (true) or fork */
    bool have_vram, have_ram, migrate_set;
    bool device_forward;     /* --device-forward: the forward pass's own ops on the device's stream too */
    bool no_device_forward;  /* --no-device-forward: on the host pool even on a GPU (where the default is the device) */
    int device;              /* --device: OG_CLI_DEVICE_AUTO (default), _CPU or _CUDA */
    og_device *gpu;          /* the cuda device og_cli_plan_flags made (handed to the placement), or NULL */
    const char *ds4_rounding;/* --ds4-rounding LIST (deepseek4's model options), or NULL: the model's defaults */
    og_kv_type kv_type;      /* --kv-type (default f16): the model's "kv-type" option and, through
                                og_kv_type_bytes, the plan's pin.kv_bytes_per_elem: one value for both */
    bool kv_type_set;        /* --kv-type given (an architecture without the option then refuses it) */
    uint64_t cache_ram;      /* --cache-ram SIZE: host RAM for evicted prefix blocks, bytes (0: off) */
    const char *cache_dir;   /* --cache-dir DIR, or NULL */
    uint64_t cache_dir_size; /* --cache-dir-size SIZE, bytes (0: OG_ENGINE_CACHE_DIR_BYTES) */
} og_cli_flags;

/* --device: auto = the cuda device when the build has it and a GPU answers, else
 * the CPU; cpu = never a GPU (--vram then sizes the cpu device playing one);
 * cuda = the GPU or a refusal. */
enum { OG_CLI_DEVICE_AUTO = 0, OG_CLI_DEVICE_CPU, OG_CLI_DEVICE_CUDA };

/* getopt_long values of the shared flags (above any short option). */
enum {
    OG_OPT_VRAM = 0x100, OG_OPT_RAM, OG_OPT_RESERVE, OG_OPT_CTX, OG_OPT_SLOTS, OG_OPT_PROFILE, OG_OPT_SAVE_PROFILE,
    OG_OPT_MIGRATE, OG_OPT_NUMERICS, OG_OPT_THREADS, OG_OPT_DEVICE_THREADS, OG_OPT_NUMA_NODE,
    OG_OPT_DEVICE_FORWARD, OG_OPT_DEVICE, OG_OPT_DS4_ROUNDING, OG_OPT_KV_TYPE, OG_OPT_CACHE_RAM, OG_OPT_CACHE_DIR,
    OG_OPT_CACHE_DIR_SIZE, OG_OPT_NO_DEVICE_FORWARD
};

/* The shared flags' entries for a command's getopt_long table. */
#define OG_CLI_FLAG_OPTIONS                                                                                            \
    {"vram", required_argument, 0, OG_OPT_VRAM}, {"ram", required_argument, 0, OG_OPT_RAM},                            \
        {"reserve", required_argument, 0, OG_OPT_RESERVE}, {"ctx", required_argument, 0, OG_OPT_CTX},                  \
        {"expert-slots", required_argument, 0, OG_OPT_SLOTS}, {"profile", required_argument, 0, OG_OPT_PROFILE},       \
        {"save-profile", required_argument, 0, OG_OPT_SAVE_PROFILE},                                                   \
        {"migrate", required_argument, 0, OG_OPT_MIGRATE}, {"cpu-numerics", required_argument, 0, OG_OPT_NUMERICS},    \
        {"threads", required_argument, 0, OG_OPT_THREADS}, {"device-threads", required_argument, 0, OG_OPT_DEVICE_THREADS}, \
        {"numa-node", required_argument, 0, OG_OPT_NUMA_NODE}, {"device-forward", no_argument, 0, OG_OPT_DEVICE_FORWARD}, \
        {"no-device-forward", no_argument, 0, OG_OPT_NO_DEVICE_FORWARD}, \
        {"device", required_argument, 0, OG_OPT_DEVICE}, {"ds4-rounding", required_argument, 0, OG_OPT_DS4_ROUNDING}, \
        {"kv-type", required_argument, 0, OG_OPT_KV_TYPE}, {"cache-ram", required_argument, 0, OG_OPT_CACHE_RAM},   \
        {"cache-dir", required_argument, 0, OG_OPT_CACHE_DIR},                                                        \
        {"cache-dir-size", required_argument, 0, OG_OPT_CACHE_DIR_SIZE}

/* The defaults: no device, --reserve 512M, --migrate 2, gpu numerics, every CPU, --kv-type f16. */
void og_cli_flags_init(og_cli_flags *f);

/* One flag: c is getopt_long's value, arg its optarg. Returns 1 when c is a
 * shared flag with a good value, 0 when c is not a shared flag, -1 after
 * printing "CMD: bad value 'ARG' for --NAME: expected ...". */
int og_cli_flag(const char *cmd, int c, const char *arg, og_cli_flags *f);

/* After loading: the model options the flags name (--kv-type on deepseek2 and
 * deepseek4, and on another architecture when asked for; --ds4-rounding on a
 * deepseek4 or deepseek41 model). Returns 0, or OG_EXIT_USAGE after printing
 * why (another architecture, an option the model does not have). */
int og_cli_model_options(const char *cmd, og_model *m, const og_cli_flags *f);

/* The --help lines of the model options. */
#define OG_CLI_MODEL_OPTIONS_HELP                                                                                      \
    "  --kv-type f16|f32  the KV cache's element type (default f16, as llama.cpp's and ds4's caches): f16\n"         \
    "                halves the cache (deepseek2: n_layer x (r_kv + d_rope) x 2 bytes per cached token, what\n"     \
    "                `onegpu plan` charges), each value rounded once when stored; deepseek4 keeps F32 rows\n"        \
    "                and with f16 rounds every stored KV row to f16 (the values, not the size); deepseek41\n"       \
    "                has F32 rows only\n"                                                                        \
    "  --ds4-rounding LIST  deepseek4 / deepseek41: the low-precision rounding the forward pass simulates, a\n"       \
    "                comma list of kv-fp8 (the FP8 E4M3 round trip of the KV: V4 raw and compressed rows,\n"        \
    "                V4.1 the window in blocks of 32), indexer-fp4 (FP4 E2M1 of the indexer's queries and\n"        \
    "                keys: V4 after a Hadamard rotation, V4.1 without), kv-fp4 (deepseek41: the compressed\n"       \
    "                rows in FP4 E2M1 with an E4M3 scale per 16), each may be no-NAME; or spec = all of the\n"      \
    "                architecture's round trips (deepseek4's default: as V4 was trained and ds4 runs it),\n"       \
    "                llama or none = none of them (deepseek41's default: V4.1's QAT is unverified; deepseek4\n"     \
    "                with llama.cpp's F32 cache: add --kv-type f32)\n"

/* The --help lines of the prefix cache's tiers (run and serve). */
#define OG_CLI_CACHE_HELP                                                                                              \
    "  --cache-ram SIZE   host RAM that evicted prefix-cache entries (deepseek2: whole 64-token blocks;\n"        \
    "                     deepseek4/41: whole states; with their chain keys) are copied to instead of being\n"  \
    "                     dropped, least recently used out first, and copied back on a hit (default 0: off)\n"  \
    "  --cache-dir DIR    evicted entries (from --cache-ram when both are set) written to DIR, one file per\n"      \
    "                     entry, atomically, checked on start and on lookup (a corrupt or truncated file is\n"   \
    "                     skipped with a log line; other models' and kv-types' files, named apart, are left\n"   \
    "                     alone); the cached entries are written there at exit, so a restart with the same DIR\n" \
    "                     reads them (default: off)\n"                                                          \
    "  --cache-dir-size SIZE  DIR's bound, least recently used files removed beyond it (default 16G; a full\n"   \
    "                     filesystem lowers it to what DIR then holds)\n"

/* After the command line: the combinations (--ram, --profile, --expert-slots and
 * --migrate need --vram; --save-profile must be writable). Returns 0, or
 * OG_EXIT_USAGE after printing why. */
int og_cli_flags_check(const char *cmd, const og_cli_flags *f);

/* Before loading: chooses the device (og_cli_device_choose), reads model_path's
 * header, sets f->ctx (the model's when not
 * given; refused outside 2..n_ctx_train) and, with --vram, plans for parallel
 * sequences and batch_tokens (og_cli_plan_prepare) into *plan and *profile (the
 * caller frees both; zero / NULL without --vram). *hp gets the header's
 * model info (og_model_describe). Returns 0 or an exit status after printing why. */
int og_cli_plan_flags(const char *cmd, const char *model_path, og_cli_flags *f, uint32_t parallel,
                      uint32_t batch_tokens, og_model_info *hp, og_plan *plan, uint64_t **profile);

/* --device (f->device): with a GPU (auto or cuda) creates the cuda device into
 * f->gpu and, without --vram, sets the plan's device memory to its free memory
 * (cudaMemGetInfo). Prints one line when auto finds no GPU it can use, or finds a
 * GPU that this build cannot use (built without CUDA: how to rebuild). Returns 0,
 * or OG_EXIT_USAGE after printing why (--device cuda without a usable GPU). */
int og_cli_device_choose(const char *cmd, og_cli_flags *f);

/* The placement of run and serve (always made: it owns the forward pass's
 * dispatcher): with a GPU (f->gpu, handed over) or --vram (the cpu device plays
 * the GPU) the device holds the plan's
 * hot set and computes those experts (the cpu device on its own --device-threads threads with
 * kern), migrating --migrate experts per layer per step; selections are counted
 * with a device, --save-profile or count. Prints one line saying which device
 * computes the resident experts ("CMD: compute: ...") to stderr. Returns 0, or OG_EXIT_USAGE after printing "CMD: reason". */
int og_cli_placement_create(const char *cmd, const og_model *m, og_cli_flags *f, const og_plan *plan,
                            const uint64_t *profile, bool count, const og_kernels *kern, og_placement **out);

/* --save-profile: the counts plus profile's (may be NULL) written to
 * f->save_profile (nothing without it). Returns 0 or OG_EXIT_USAGE after
 * printing the error. */
int og_cli_placement_save_profile(const char *cmd, const og_placement *p, const og_cli_flags *f,
                                  const uint64_t *profile);

/* The SIMD tier: $ONEGPU_CPU_ISA, else the best the CPU has (a note on AMX
 * refused is printed). Returns 0, or OG_EXIT_USAGE after printing why. */
int og_cli_choose_isa(const char *cmd, og_isa *isa);

/* A pool of `threads` workers; 0: one per CPU this process may run on. Returns 0,
 * or OG_EXIT_USAGE after printing why. */
int og_cli_pool(const char *cmd, int threads, og_pool **pool);

/* The NUMA binding of run and serve (--numa-node N). */
typedef struct og_cli_numa {
    int node;                  /* -1: no binding */
    const char *why;           /* "--numa-node", "the GPU's node" */
    int n_cpus;
    int cpus[OG_MAX_CPUS];     /* the node's CPUs this process may run on, ascending */
} og_cli_numa;

/* Before loading: the node is numa_node (>= 0, from --numa-node; run.sh passes the
 * node it bound to), else (-1) the GPU's node when sysfs knows it, else none. The
 * topology is read from $ONEGPU_SYSFS (tests: a fake tree) or /sys. Returns 0, or
 * OG_EXIT_USAGE after printing "CMD: --numa-node N: NUMA node N does not exist
 * (this machine's nodes: ...)" or that none of its CPUs is in this process's set. */
int og_cli_numa_choose(const char *cmd, long numa_node, og_cli_numa *nu);

/* After loading, instead of og_cli_pool: with a node, the calling thread (and so
 * the threads it starts later) may run on the node's CPUs, worker i of the pool
 * is pinned to its CPU i (modulo), threads 0 = one per node CPU; the thread's
 * memory policy and the routed experts' ranges of the mapped file prefer the
 * node (mbind). Prints one line "CMD: NUMA: node, CPUs, memory policy"; a pin or
 * policy the kernel refuses is said there, not a failure. Returns 0, or
 * OG_EXIT_USAGE after printing why the pool could not start. */
int og_cli_numa_pool(const char *cmd, const og_cli_numa *nu, const og_model *m, int threads, og_pool **pool);

#endif
