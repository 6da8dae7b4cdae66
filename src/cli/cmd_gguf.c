/* `onegpu gguf FILE [--json]`: what a GGUF file holds, for people and scripts. */
#include "cli.h"
#include "og_gguf.h"
#include "og_model.h"

#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ARRAY_HEAD 8 /* array elements shown before "..." */

/* JSON string from possibly invalid UTF-8: invalid bytes become U+FFFD. */
static json_t *json_str_lossy(const char *s, size_t n) {
    json_t *j = json_stringn(s, n);
    if (j) return j;
    char *buf = malloc(n * 3 + 1);
    if (!buf) return json_null();
    j = json_stringn(buf, og_utf8_repair(s, n, buf));
    free(buf);
    return j ? j : json_null();
}

/* JSON has no NaN/Inf and jansson no integers above INT64_MAX: those become
 * strings ("nan", "inf", "-inf", "18446744073709551615") so nothing is dropped. */
static json_t *scalar_json(const og_gguf_kv *kv, og_gguf_vtype t, uint64_t i) {
    if (t == OG_GGUF_BOOL) {
        const uint8_t *p = kv->data;
        return json_boolean(p[i]);
    }
    if (t == OG_GGUF_FLOAT32 || t == OG_GGUF_FLOAT64) {
        double d = 0;
        og_gguf_kv_num_f64(kv, i, &d);
        if (isnan(d)) return json_string("nan");
        if (isinf(d)) return json_string(d > 0 ? "inf" : "-inf");
        return json_real(d);
    }
    int64_t v = 0;
    if (og_gguf_kv_num_i64(kv, i, &v) == OG_OK) return json_integer(v);
    uint64_t u; /* uint64 above INT64_MAX */
    memcpy(&u, (const uint8_t *)kv->data + (kv->type == OG_GGUF_ARRAY ? i * 8 : 0), 8);
    char buf[24];
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)u);
    return json_string(buf);
}

#define JSON_STRING_CAP (1u << 20) /* longer string values are cut in --json */

static json_t *str_json(og_str s, json_t *owner) {
    if (s.n <= JSON_STRING_CAP) return json_str_lossy(s.s, (size_t)s.n);
    size_t cut = JSON_STRING_CAP;
    while (cut > 0 && ((unsigned char)s.s[cut] & 0xc0) == 0x80) cut--;
    if (owner) {
        json_object_set_new(owner, "truncated", json_true());
        json_object_set_new(owner, "bytes", json_integer((json_int_t)s.n));
    }
    return json_str_lossy(s.s, cut);
}

static json_t *kv_json(const og_gguf_kv *kv) {
    json_t *o = json_object();
    json_object_set_new(o, "key", json_str_lossy(kv->key, strlen(kv->key)));
    json_object_set_new(o, "type", json_string(og_gguf_vtype_name(kv->type)));
    if (kv->type == OG_GGUF_STRING) {
        json_object_set_new(o, "value", str_json(kv->str, o));
    } else if (kv->type == OG_GGUF_ARRAY) {
        json_object_set_new(o, "elem_type", json_string(og_gguf_vtype_name(kv->arr_type)));
        json_object_set_new(o, "n", json_integer((json_int_t)kv->arr_n));
        json_t *head = json_array();
        for (uint64_t i = 0; i < kv->arr_n && i < ARRAY_HEAD; i++) {
            if (kv->arr_type == OG_GGUF_STRING)
                json_array_append_new(head, str_json(kv->strs[i], NULL));
            else
                json_array_append_new(head, scalar_json(kv, kv->arr_type, i));
        }
        json_object_set_new(o, kv->arr_n > ARRAY_HEAD ? "head" : "value", head);
    } else {
        json_object_set_new(o, "value", scalar_json(kv, kv->type, 0));
    }
    return o;
}

/* Prints a string for people: escapes controls, cuts long ones. */
/* Prints a string for people: controls and invalid UTF-8 escaped (a file must
 * not drive the terminal), cut to about max bytes on a character boundary. */
static void print_str(const char *s, uint64_t n, uint64_t max) {
    uint64_t cut = n < max ? n : max;
    while (cut < n && cut > 0 && ((unsigned char)s[cut] & 0xc0) == 0x80) cut--; /* whole characters */
    char buf[512];
    printf("\"%s\"", og_printable(s, (size_t)cut, buf, sizeof buf));
    if (cut < n) printf("... (%llu bytes)", (unsigned long long)n);
}

/* Shortest decimal that reads back as the same value (1e-06, not 9.99999997e-07). */
static void print_float(double d, bool is_f32) {
    char buf[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, d);
        double back = strtod(buf, NULL);
        if (is_f32 ? (float)back == (float)d : back == d) break;
    }
    fputs(buf, stdout);
}

static void print_scalar(const og_gguf_kv *kv, og_gguf_vtype t, uint64_t i) {
    if (t == OG_GGUF_BOOL) {
        fputs(((const uint8_t *)kv->data)[i] ? "true" : "false", stdout);
    } else if (t == OG_GGUF_FLOAT32 || t == OG_GGUF_FLOAT64) {
        double d = 0;
        og_gguf_kv_num_f64(kv, i, &d);
        print_float(d, t == OG_GGUF_FLOAT32);
    } else {
        int64_t v;
        if (og_gguf_kv_num_i64(kv, i, &v) == OG_OK) {
            printf("%lld", (long long)v);
        } else { /* uint64 above INT64_MAX */
            uint64_t u;
            memcpy(&u, (const uint8_t *)kv->data + (kv->type == OG_GGUF_ARRAY ? i * 8 : 0), 8);
            printf("%llu", (unsigned long long)u);
        }
    }
}

/* llama_ftype names for general.file_type (gguf.md §7.1). */
static const char *ftype_name(int64_t v) {
    static const char *names[] = {
        [0] = "ALL_F32", [1] = "MOSTLY_F16", [2] = "MOSTLY_Q4_0", [3] = "MOSTLY_Q4_1", [7] = "MOSTLY_Q8_0",
        [8] = "MOSTLY_Q5_0", [9] = "MOSTLY_Q5_1", [10] = "MOSTLY_Q2_K", [11] = "MOSTLY_Q3_K_S",
        [12] = "MOSTLY_Q3_K_M", [13] = "MOSTLY_Q3_K_L", [14] = "MOSTLY_Q4_K_S", [15] = "MOSTLY_Q4_K_M",
        [16] = "MOSTLY_Q5_K_S", [17] = "MOSTLY_Q5_K_M", [18] = "MOSTLY_Q6_K", [19] = "MOSTLY_IQ2_XXS",
        [20] = "MOSTLY_IQ2_XS", [21] = "MOSTLY_Q2_K_S", [22] = "MOSTLY_IQ3_XS", [23] = "MOSTLY_IQ3_XXS",
        [24] = "MOSTLY_IQ1_S", [25] = "MOSTLY_IQ4_NL", [26] = "MOSTLY_IQ3_S", [27] = "MOSTLY_IQ3_M",
        [28] = "MOSTLY_IQ2_S", [29] = "MOSTLY_IQ2_M", [30] = "MOSTLY_IQ4_XS", [31] = "MOSTLY_IQ1_M",
        [32] = "MOSTLY_BF16", [36] = "MOSTLY_TQ1_0", [37] = "MOSTLY_TQ2_0", [38] = "MOSTLY_MXFP4_MOE",
        [39] = "MOSTLY_NVFP4", [40] = "MOSTLY_Q1_0", [41] = "MOSTLY_Q2_0",
    };
    if (v == 1024) return "GUESSED";
    return v >= 0 && v < (int64_t)(sizeof names / sizeof names[0]) && names[v] ? names[v] : NULL;
}

static void print_kv(const og_gguf_kv *kv, int key_width) {
    char key[256];
    printf("  %-*s ", key_width, og_printable(kv->key, strlen(kv->key), key, sizeof key));
    if (kv->type == OG_GGUF_STRING) {
        printf("%-8s ", "string");
        print_str(kv->str.s, kv->str.n, 72);
    } else if (kv->type == OG_GGUF_ARRAY) {
        printf("[%s x %llu] ", og_gguf_vtype_name(kv->arr_type), (unsigned long long)kv->arr_n);
        for (uint64_t i = 0; i < kv->arr_n && i < 4; i++) {
            if (i) fputs(", ", stdout);
            if (kv->arr_type == OG_GGUF_STRING) print_str(kv->strs[i].s, kv->strs[i].n, 24);
            else print_scalar(kv, kv->arr_type, i);
        }
        if (kv->arr_n > 4) fputs(", ...", stdout);
    } else {
        printf("%-8s ", og_gguf_vtype_name(kv->type));
        print_scalar(kv, kv->type, 0);
        int64_t v;
        const char *name;
        if (!strcmp(kv->key, "general.file_type") && og_gguf_kv_num_i64(kv, 0, &v) == OG_OK && (name = ftype_name(v)))
            printf(" (%s)", name);
        if (strstr(kv->key, ".expert_gating_func") && og_gguf_kv_num_i64(kv, 0, &v) == OG_OK)
            printf("%s", v == 1 ? " (softmax)" : v == 2 ? " (sigmoid)" : "");
    }
    putchar('\n');
}

static void shape_str(const og_gguf_tensor *t, char *buf, size_t n) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, n - o, "[");
    for (uint32_t d = 0; d < t->n_dims && o < n; d++)
        o += (size_t)snprintf(buf + o, n - o, "%s%lld", d ? ", " : "", (long long)t->ne[d]);
    if (o < n) snprintf(buf + o, n - o, "]");
}

static void usage(FILE *out) {
    fprintf(out, "usage: onegpu gguf FILE [--json]\n"
                 "  Prints the header, metadata (long arrays summarized), the tensor table\n"
                 "  (name, ggml type, shape, bytes, offset) and bytes per tensor role.\n"
                 "  A split model (NAME-00001-of-0000N.gguf ...): give the first part; every part\n"
                 "  is read, listed, and each tensor's part shown (JSON: \"parts\", tensors' \"part\").\n"
                 "  --json   one JSON object on stdout instead\n"
                 "exit status: 0 ok, 1 usage, 2 unreadable or invalid file\n");
}

int og_cmd_gguf(int argc, char **argv) {
    static const struct option opts[] = {{"json", no_argument, 0, 'j'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    bool as_json = false;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "jh", opts, NULL)) != -1) {
        if (c == 'j') as_json = true;
        else if (c == 'h') {
            usage(stdout);
            return OG_EXIT_OK;
        } else {
            usage(stderr);
            return OG_EXIT_USAGE;
        }
    }
    if (optind != argc - 1) {
        usage(stderr);
        return OG_EXIT_USAGE;
    }
    const char *path = argv[optind];
    char err[1024];
    og_gguf *g = NULL;
    og_status st = og_gguf_open(path, OG_GGUF_HEADER_ONLY, &g, err, sizeof err);
    if (st) {
        fprintf(stderr, "onegpu gguf: %s\n", err);
        return OG_EXIT_BAD_INPUT;
    }
    char arch[64] = "";
    og_gguf_get_cstr(g, "general.architecture", arch, sizeof arch);

    uint64_t role_bytes[OG_ROLE_COUNT] = {0}, role_n[OG_ROLE_COUNT] = {0}, total = 0;
    uint64_t n_t = og_gguf_n_tensors(g);
    for (uint64_t i = 0; i < n_t; i++) {
        const og_gguf_tensor *t = og_gguf_tensor_at(g, i);
        og_tensor_role r = og_model_tensor_role(arch, t->name);
        role_bytes[r] += t->n_bytes;
        role_n[r]++;
        total += t->n_bytes;
    }

    if (as_json) {
        json_t *o = json_object();
        json_object_set_new(o, "file", json_str_lossy(path, strlen(path)));
        json_object_set_new(o, "file_bytes", json_integer((json_int_t)og_gguf_file_size(g)));
        json_object_set_new(o, "version", json_integer(og_gguf_version(g)));
        json_object_set_new(o, "alignment", json_integer(og_gguf_alignment(g)));
        json_object_set_new(o, "architecture", json_str_lossy(arch, strlen(arch)));
        json_object_set_new(o, "n_kv", json_integer((json_int_t)og_gguf_n_kv(g)));
        json_object_set_new(o, "n_tensors", json_integer((json_int_t)n_t));
        json_object_set_new(o, "data_offset", json_integer((json_int_t)og_gguf_data_offset(g)));
        json_object_set_new(o, "tensor_bytes", json_integer((json_int_t)total));
        json_t *parts = json_array(); /* one entry per file: the only one, or each part of a split model */
        for (uint32_t k = 0; k < og_gguf_n_parts(g); k++) {
            og_gguf_part p;
            og_gguf_part_at(g, k, &p);
            json_array_append_new(parts, json_pack("{s:o, s:I, s:I, s:I}", "file", json_str_lossy(p.path, strlen(p.path)),
                                                   "file_bytes", (json_int_t)p.file_size, "n_tensors",
                                                   (json_int_t)p.n_tensors, "data_offset", (json_int_t)p.data_offset));
        }
        json_object_set_new(o, "parts", parts);
        json_t *md = json_array();
        for (uint64_t i = 0; i < og_gguf_n_kv(g); i++) json_array_append_new(md, kv_json(og_gguf_kv_at(g, i)));
        json_object_set_new(o, "metadata", md);
        json_t *ts = json_array();
        for (uint64_t i = 0; i < n_t; i++) {
            const og_gguf_tensor *t = og_gguf_tensor_at(g, i);
            json_t *shape = json_array();
            for (uint32_t d = 0; d < t->n_dims; d++) json_array_append_new(shape, json_integer(t->ne[d]));
            json_array_append_new(ts, json_pack("{s:o, s:s, s:o, s:I, s:I, s:i, s:s}", "name", json_str_lossy(t->name, strlen(t->name)), "type",
                                                og_type_name(t->type), "shape", shape, "bytes",
                                                (json_int_t)t->n_bytes, "offset", (json_int_t)t->offset, "part", (int)t->part,
                                                "role", og_model_role_name(og_model_tensor_role(arch, t->name))));
        }
        json_object_set_new(o, "tensors", ts);
        json_t *roles = json_object();
        for (int r = 0; r < OG_ROLE_COUNT; r++)
            json_object_set_new(roles, og_model_role_name((og_tensor_role)r),
                                json_pack("{s:I, s:I}", "n_tensors", (json_int_t)role_n[r], "bytes",
                                          (json_int_t)role_bytes[r]));
        json_object_set_new(o, "roles", roles);
        char *s = json_dumps(o, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
        if (s) {
            puts(s);
            free(s);
        }
        json_decref(o);
        og_gguf_close(g);
        return s ? OG_EXIT_OK : OG_EXIT_USAGE;
    }

    char b1[32], b2[32], pn[300];
    const uint32_t n_parts = og_gguf_n_parts(g);
    printf("file: %s (%s%s)\n", og_printable(path, strlen(path), pn, sizeof pn),
           og_fmt_bytes(og_gguf_file_size(g), b1, sizeof b1), n_parts > 1 ? " in all parts" : "");
    printf("GGUF v%u, alignment %u, %llu metadata keys, %llu tensors, data at offset %llu\n",
           og_gguf_version(g), og_gguf_alignment(g), (unsigned long long)og_gguf_n_kv(g),
           (unsigned long long)n_t, (unsigned long long)og_gguf_data_offset(g));
    if (n_parts > 1) {
        printf("split into %u parts (offsets and sizes are each file's own):\n", n_parts);
        for (uint32_t k = 0; k < n_parts; k++) {
            og_gguf_part p;
            og_gguf_part_at(g, k, &p);
            printf("  part %u: %s (%s, %llu tensors, data at offset %llu)\n", k + 1,
                   og_printable(p.path, strlen(p.path), pn, sizeof pn), og_fmt_bytes(p.file_size, b1, sizeof b1),
                   (unsigned long long)p.n_tensors, (unsigned long long)p.data_offset);
        }
    }
    printf("\nmetadata:\n");
    int key_width = 20;
    for (uint64_t i = 0; i < og_gguf_n_kv(g); i++) {
        int w = (int)strlen(og_gguf_kv_at(g, i)->key);
        if (w > key_width && w <= 60) key_width = w;
    }
    for (uint64_t i = 0; i < og_gguf_n_kv(g); i++) print_kv(og_gguf_kv_at(g, i), key_width);
    printf("\ntensors (offsets from the data section start%s):\n  %-40s %-7s %-24s %14s %14s%s\n",
           n_parts > 1 ? " of their part" : "", "name", "type", "shape", "bytes", "offset", n_parts > 1 ? "  part" : "");
    for (uint64_t i = 0; i < n_t; i++) {
        const og_gguf_tensor *t = og_gguf_tensor_at(g, i);
        char shape[96], name[300], part[16] = "";
        shape_str(t, shape, sizeof shape);
        if (n_parts > 1) snprintf(part, sizeof part, "  %4u", t->part + 1);
        printf("  %-40s %-7s %-24s %14llu %14llu%s\n", og_printable(t->name, strlen(t->name), name, sizeof name),
               og_type_name(t->type), shape,
               (unsigned long long)t->n_bytes, (unsigned long long)t->offset, part);
    }
    printf("\nbytes per role:\n");
    for (int r = 0; r < OG_ROLE_COUNT; r++) {
        if (!role_n[r]) continue;
        printf("  %-16s %5llu tensors %12s %6.2f%%\n", og_model_role_name((og_tensor_role)r),
               (unsigned long long)role_n[r], og_fmt_bytes(role_bytes[r], b1, sizeof b1),
               total ? 100.0 * (double)role_bytes[r] / (double)total : 0.0);
    }
    printf("  %-16s %5llu tensors %12s\n", "total", (unsigned long long)n_t, og_fmt_bytes(total, b2, sizeof b2));
    og_gguf_close(g);
    return OG_EXIT_OK;
}
