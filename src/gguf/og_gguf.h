/* onegpu gguf: GGUF v3 reader (mmap, validated), header-only mode, and writer.
 * Spec: shared/spec/gguf.md (section numbers below refer to it).
 *
 * Ownership: an og_gguf owns its mapping; every pointer it hands out (key names,
 * string values, tensor names, tensor data) lives until og_gguf_close. */
#ifndef OG_GGUF_H
#define OG_GGUF_H

#include "og_base.h"

/* ---- ggml tensor types (gguf.md §6) ----------------------------------- */
typedef enum og_ggml_type {
    OG_TYPE_F32 = 0, OG_TYPE_F16 = 1, OG_TYPE_Q4_0 = 2, OG_TYPE_Q4_1 = 3,
    OG_TYPE_Q5_0 = 6, OG_TYPE_Q5_1 = 7, OG_TYPE_Q8_0 = 8, OG_TYPE_Q8_1 = 9,
    OG_TYPE_Q2_K = 10, OG_TYPE_Q3_K = 11, OG_TYPE_Q4_K = 12, OG_TYPE_Q5_K = 13,
    OG_TYPE_Q6_K = 14, OG_TYPE_Q8_K = 15, OG_TYPE_IQ2_XXS = 16, OG_TYPE_IQ2_XS = 17,
    OG_TYPE_IQ3_XXS = 18, OG_TYPE_IQ1_S = 19, OG_TYPE_IQ4_NL = 20, OG_TYPE_IQ3_S = 21,
    OG_TYPE_IQ2_S = 22, OG_TYPE_IQ4_XS = 23, OG_TYPE_I8 = 24, OG_TYPE_I16 = 25,
    OG_TYPE_I32 = 26, OG_TYPE_I64 = 27, OG_TYPE_F64 = 28, OG_TYPE_IQ1_M = 29,
    OG_TYPE_BF16 = 30, OG_TYPE_TQ1_0 = 34, OG_TYPE_TQ2_0 = 35, OG_TYPE_MXFP4 = 39,
    OG_TYPE_NVFP4 = 40, OG_TYPE_Q1_0 = 41, OG_TYPE_Q2_0 = 42,
    OG_TYPE_COUNT = 43, /* ids >= this are unknown */
} og_ggml_type;

/* Block geometry of one ggml type: blck elements are stored in type_size bytes. */
typedef struct og_type_size {
    const char *name;   /* "Q4_K"; NULL for removed/unknown ids */
    uint32_t blck;      /* elements per block */
    uint32_t type_size; /* bytes per block */
} og_type_size;

/* Geometry of type id t; returns NULL for removed or unknown ids (t >= OG_TYPE_COUNT). */
const og_type_size *og_type_size_of(uint32_t t);
/* Name of type id t ("Q8_0"), or "?" when unknown. */
const char *og_type_name(uint32_t t);
/* Type id from its name (case-insensitive); OG_ERR_NOT_FOUND if no such type. */
og_status og_type_from_name(const char *name, og_ggml_type *out);
/* Bytes of a row of n elements of type t; OG_ERR_FORMAT if n % blck != 0. */
og_status og_row_bytes(uint32_t t, uint64_t n, uint64_t *out_bytes);

/* ---- metadata value types (gguf.md §2) -------------------------------- */
typedef enum og_gguf_vtype {
    OG_GGUF_UINT8 = 0, OG_GGUF_INT8 = 1, OG_GGUF_UINT16 = 2, OG_GGUF_INT16 = 3,
    OG_GGUF_UINT32 = 4, OG_GGUF_INT32 = 5, OG_GGUF_FLOAT32 = 6, OG_GGUF_BOOL = 7,
    OG_GGUF_STRING = 8, OG_GGUF_ARRAY = 9, OG_GGUF_UINT64 = 10, OG_GGUF_INT64 = 11,
    OG_GGUF_FLOAT64 = 12,
    OG_GGUF_VTYPE_COUNT = 13,
} og_gguf_vtype;

/* Name of a value type ("uint32"), or "?" */
const char *og_gguf_vtype_name(uint32_t vt);
/* Bytes of one fixed-size value; 0 for STRING/ARRAY/unknown. */
size_t og_gguf_vtype_size(uint32_t vt);

/* A string inside the file: n bytes, NOT NUL-terminated. */
typedef struct og_str {
    const char *s;
    uint64_t n;
} og_str;

/* One metadata key/value as stored. For scalars, `data` points at the raw
 * little-endian value; for STRING at the og_str in `str`; for ARRAY, arr_type and
 * arr_n describe it and `data` points at the first element (raw, or for string
 * arrays use og_gguf_kv_arr_str). */
typedef struct og_gguf_kv {
    const char *key;     /* NUL-terminated copy */
    og_gguf_vtype type;
    og_gguf_vtype arr_type; /* only for ARRAY */
    uint64_t arr_n;         /* only for ARRAY: element count */
    const void *data;       /* raw value bytes in the mapping */
    og_str str;             /* only for STRING */
    uint64_t file_offset;   /* byte offset of the record's key in the file */
    const og_str *strs;     /* only for ARRAY of STRING: arr_n entries */
} og_gguf_kv;

typedef struct og_gguf_tensor {
    const char *name;     /* NUL-terminated copy, < 64 bytes */
    uint32_t n_dims;      /* 1..4 */
    int64_t ne[4];        /* sizes, innermost first (gguf.md §5); unused dims are 1 */
    og_ggml_type type;
    uint64_t offset;      /* bytes from the data section start of its part */
    uint64_t n_bytes;     /* exact size, without padding */
    const void *data;     /* NULL in header-only mode */
    uint32_t part;        /* index of the part holding it (0-based; 0 for a single file) */
} og_gguf_tensor;

typedef struct og_gguf og_gguf;

enum {
    /* Parse and validate the header only; tensor data is never read or mapped
     * beyond the header (the planner opens 260 GB files this way). */
    OG_GGUF_HEADER_ONLY = 1u << 0,
};

/* Opens and validates a GGUF file. On failure *out is NULL and err holds
 * "<path>: offset <byte>: <what is wrong>". Errors: OG_ERR_IO (cannot open/map),
 * OG_ERR_FORMAT (any malformed structure, gguf.md §4), OG_ERR_UNSUPPORTED (a
 * well-formed big-endian or version-1 file), OG_ERR_NOMEM. Never aborts on bad
 * input and never allocates more than a small multiple of the header size.
 *
 * Split models (gguf.md §7.4): a file without split.count, or with split.count
 * 0 (what llama.cpp's gguf-split --merge leaves), is a single file. Given the
 * first part PREFIX-00001-of-0000N.gguf (split.no 0, split.count N), every part
 * PREFIX-0000k-of-0000N.gguf is
 * opened with the same flags and the result reads as one model: the metadata is
 * the first part's, the tensors are every part's in part order (tensor_at,
 * find_tensor, n_tensors cover them all), each tensor's data points into its own
 * part's mapping and its `part` field says which. The parts must agree, or the
 * open fails naming the file at fault: every part exists (OG_ERR_IO names the
 * missing path); each part's split.no is its place in the name (no part twice,
 * none out of order) and its split.count and split.tensors.count equal the
 * first part's; a key present in a later part and in the first (other than
 * split.* and general.alignment) has the same type and value in both; no tensor name is
 * in two parts; the parts hold split.tensors.count tensors together (when the
 * key is present). Those are OG_ERR_FORMAT. A later part given alone (split.no >
 * 0) is refused with OG_ERR_INVALID_ARG, naming the first part to give instead.
 * Parts of two models with the same tensor names and counts split at the same
 * places cannot be told apart from the split keys (gguf-split writes nothing
 * else into later parts); the model loader's shape checks remain. */
og_status og_gguf_open(const char *path, unsigned flags, og_gguf **out, char *err, size_t errlen);

/* Same checks on an in-memory image (not copied; must outlive the og_gguf).
 * `name` is used in error messages. Tensor data pointers point into `buf`.
 * A part of a split model with more than one part is refused (OG_ERR_UNSUPPORTED):
 * the other parts can only be found next to a file. */
og_status og_gguf_open_memory(const void *buf, size_t len, const char *name, unsigned flags,
                              og_gguf **out, char *err, size_t errlen);

/* One file of a model: the only one, or one part of a split model. */
typedef struct og_gguf_part {
    const char *path;       /* as opened (the name given for a memory image) */
    uint64_t file_size;     /* bytes */
    uint64_t data_offset;   /* file offset of its data section */
    uint64_t n_tensors;     /* tensors stored in this file */
    uint32_t alignment;     /* bytes */
} og_gguf_part;

/* Number of files the model was read from: 1 for a single file, split.count for
 * a split model. */
uint32_t og_gguf_n_parts(const og_gguf *g);
/* Part k (0-based, k < og_gguf_n_parts). OG_ERR_RANGE when k is out of range. */
og_status og_gguf_part_at(const og_gguf *g, uint32_t k, og_gguf_part *out);

/* Path of part k (0-based) of n of a split model whose parts are named
 * PREFIX-%05u-of-%05u.gguf, as llama.cpp's gguf-split writes them (k + 1 in the
 * name). OG_ERR_RANGE if k >= n or the path does not fit buflen. */
og_status og_gguf_split_path(const char *prefix, uint32_t k, uint32_t n, char *buf, size_t buflen);

/* Releases the mapping and tables; NULL is fine. No status (cannot fail). */
void og_gguf_close(og_gguf *g);

/* For a split model: version, n_kv, alignment and data_offset are the first
 * part's, n_tensors counts every part's tensors and file_size adds every part's
 * bytes (og_gguf_part_at has each part's own). */
uint32_t og_gguf_version(const og_gguf *g);
uint64_t og_gguf_n_kv(const og_gguf *g);
uint64_t og_gguf_n_tensors(const og_gguf *g);
uint32_t og_gguf_alignment(const og_gguf *g);     /* bytes */
uint64_t og_gguf_data_offset(const og_gguf *g);   /* file offset of the data section */
uint64_t og_gguf_file_size(const og_gguf *g);     /* bytes */

/* i-th KV / tensor in file order (i < n). */
const og_gguf_kv *og_gguf_kv_at(const og_gguf *g, uint64_t i);
const og_gguf_tensor *og_gguf_tensor_at(const og_gguf *g, uint64_t i);

/* O(1) lookups by exact name; NULL when absent. */
const og_gguf_kv *og_gguf_find_kv(const og_gguf *g, const char *key);
const og_gguf_tensor *og_gguf_find_tensor(const og_gguf *g, const char *name);

/* Typed getters. Integer getters accept any integer value type whose value fits
 * (files in the wild vary, gguf.md §2); float getters accept f32/f64 and integers.
 * Errors: OG_ERR_NOT_FOUND (absent), OG_ERR_TYPE (other type), OG_ERR_RANGE. */
og_status og_gguf_get_u64(const og_gguf *g, const char *key, uint64_t *out);
og_status og_gguf_get_u32(const og_gguf *g, const char *key, uint32_t *out);
og_status og_gguf_get_i64(const og_gguf *g, const char *key, int64_t *out);
og_status og_gguf_get_f64(const og_gguf *g, const char *key, double *out);
og_status og_gguf_get_f32(const og_gguf *g, const char *key, float *out);
og_status og_gguf_get_bool(const og_gguf *g, const char *key, bool *out);
og_status og_gguf_get_str(const og_gguf *g, const char *key, og_str *out);
/* Copies a string value into buf with a NUL (truncates to buflen-1). */
og_status og_gguf_get_cstr(const og_gguf *g, const char *key, char *buf, size_t buflen);

/* Numeric element i of an array kv (or of a scalar kv when i == 0) as int64 /
 * double. OG_ERR_TYPE for strings/bools mismatches, OG_ERR_RANGE for i >= n. */
og_status og_gguf_kv_num_i64(const og_gguf_kv *kv, uint64_t i, int64_t *out);
og_status og_gguf_kv_num_f64(const og_gguf_kv *kv, uint64_t i, double *out);

/* I32 tensors (ggml type 26; V4's ffn_gate_tid2eid [n_expert_used, n_vocab], the
 * hash-routing table): element i (flat, ne0 fastest; i < the element count) into
 * *out. Errors: OG_ERR_TYPE (t is not I32), OG_ERR_INVALID_ARG (no data: a
 * header-only open), OG_ERR_RANGE (i out of range). */
og_status og_gguf_tensor_i32(const og_gguf_tensor *t, uint64_t i, int32_t *out);
/* Checks every element of I32 tensor t lies in [lo, hi]; on OG_ERR_RANGE *bad_index
 * (may be NULL) gets the first one that does not. Same other errors. */
og_status og_gguf_tensor_i32_check(const og_gguf_tensor *t, int32_t lo, int32_t hi, uint64_t *bad_index);

/* ---- writer (gguf.md §8) --------------------------------------------- */
typedef struct og_gguf_writer og_gguf_writer;

/* alignment: power of two >= 1 (32 is the default and is not written as a key). */
og_status og_gguf_writer_create(uint32_t alignment, og_gguf_writer **out);
void og_gguf_writer_free(og_gguf_writer *w);

/* Set a scalar of any non-array type; value points at a host value of that type
 * (for STRING: an og_str). Replaces an existing key of the same name. */
og_status og_gguf_writer_set(og_gguf_writer *w, const char *key, og_gguf_vtype type,
                             const void *value);
og_status og_gguf_writer_set_u32(og_gguf_writer *w, const char *key, uint32_t v);
og_status og_gguf_writer_set_f32(og_gguf_writer *w, const char *key, float v);
og_status og_gguf_writer_set_bool(og_gguf_writer *w, const char *key, bool v);
og_status og_gguf_writer_set_str(og_gguf_writer *w, const char *key, const char *v);
/* Array of n fixed-size values (host layout, little-endian machine) or, for
 * STRING, of n og_str. Nested arrays are refused (llama.cpp rejects them). */
og_status og_gguf_writer_set_arr(og_gguf_writer *w, const char *key, og_gguf_vtype elem,
                                 const void *values, uint64_t n);

/* The general.* keys of a model file: general.architecture = arch,
 * general.name, general.type "model", general.file_type (llama.cpp's
 * LLAMA_FTYPE of the type holding the most bytes in type_bytes[OG_TYPE_COUNT];
 * 1024 "guessed" for a type without one) and, when any quantized type holds
 * bytes, general.quantization_version 2. Errors: the setters'. */
og_status og_gguf_writer_set_general(og_gguf_writer *w, const char *arch, const char *name,
                                     const uint64_t *type_bytes);

/* Adds a tensor. data (n_bytes as computed from type and ne) is borrowed until
 * the write; NULL means the data comes from the fill callback or, without one,
 * is left as a hole in a sparse file. */
og_status og_gguf_writer_add_tensor(og_gguf_writer *w, const char *name, og_ggml_type type,
                                    uint32_t n_dims, const int64_t *ne, const void *data);

/* Produces tensor i's bytes into buf (n_bytes long). Returns OG_OK or an error. */
typedef og_status (*og_gguf_fill_fn)(void *ctx, uint64_t i, const og_gguf_tensor *t,
                                     void *buf, char *err, size_t errlen);

/* Writes the file atomically: a mkstemp file beside path, fsync, then rename
 * (an existing path that is not a regular file is refused). Tensors whose data
 * is NULL are produced by fill (if given) or left as holes (sparse file).
 * Errors: OG_ERR_IO naming the path (before any byte is written when the bytes
 * to write, holes excluded, exceed the free disk there: "needs X GiB of disk"). */
og_status og_gguf_writer_write(og_gguf_writer *w, const char *path, og_gguf_fill_fn fill,
                               void *fill_ctx, char *err, size_t errlen);

/* Writes the model split into parts of at most max_part_bytes each (header
 * included), as llama.cpp's gguf-split does: path "NAME.gguf" (or "NAME") gives
 * NAME-00001-of-0000N.gguf ... NAME-0000N-of-0000N.gguf; every part carries
 * split.no (u16, 0-based), split.count (u16) and split.tensors.count (i32), the
 * first part also every key set on w; tensors go in the order added, each part
 * holding at least one, so a part exceeds the limit only when its header and its
 * single tensor do. Each part is written as og_gguf_writer_write writes a file
 * and none appears until all are written. *n_parts_out receives N. Errors:
 * OG_ERR_INVALID_ARG (max_part_bytes 0), OG_ERR_RANGE (more than 65535 parts or
 * a name too long), then as og_gguf_writer_write. */
og_status og_gguf_writer_write_split(og_gguf_writer *w, const char *path, uint64_t max_part_bytes,
                                     og_gguf_fill_fn fill, void *fill_ctx, uint32_t *n_parts_out,
                                     char *err, size_t errlen);

/* Prefix of the parts og_gguf_writer_write_split writes for path: path without
 * a trailing ".gguf". OG_ERR_RANGE if it does not fit buflen. */
og_status og_gguf_split_prefix(const char *path, char *buf, size_t buflen);

/* Number of tensors added so far / bytes the data section will take. */
uint64_t og_gguf_writer_n_tensors(const og_gguf_writer *w);
uint64_t og_gguf_writer_data_bytes(const og_gguf_writer *w);

#endif
