/* Constrained decoding (og_grammar.h): JSON Schema -> rules, the matcher (a set
 * of interned parse stacks, determinized lazily), the vocabulary trie and the
 * token mask. */
#include "og_grammar.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ---- grammar --------------------------------------------------------------- */

enum { E_END = 0, E_CHARS, E_REF };

typedef struct gel {
    int32_t type; /* E_* */
    int32_t arg;  /* E_CHARS: byte set index; E_REF: rule id */
} gel;

/* Symbols: the 256 byte values, then OG_GRAMMAR_MAX_SPECIAL control tokens
 * (symbol 256 + k stands for the grammar's special[k], a token with no bytes). */
#define N_SYM (256 + OG_GRAMMAR_MAX_SPECIAL)

typedef struct bset {
    uint64_t w[(N_SYM + 63) / 64];
} bset;

typedef struct grule {
    int32_t *alts; /* start element of each alternative (a run ending in E_END) */
    int n_alt, cap_alt;
} grule;

struct og_grammar {
    atomic_int refs;
    gel *el;
    int n_el, cap_el;
    bset *sets;
    int n_sets, cap_sets;
    grule *rules;
    int n_rules, cap_rules;
    int root;
    int32_t special[OG_GRAMMAR_MAX_SPECIAL]; /* control token ids written as symbols 256 + k */
    int n_special;
};

static bool bs_has(const bset *s, unsigned b) { return (s->w[b >> 6] >> (b & 63)) & 1; }
static void bs_add(bset *s, unsigned lo, unsigned hi) {
    for (unsigned b = lo; b <= hi; b++) s->w[b >> 6] |= 1ull << (b & 63);
}
static void bs_del(bset *s, unsigned b) { s->w[b >> 6] &= ~(1ull << (b & 63)); }

static void grammar_free(og_grammar *g) {
    if (!g) return;
    for (int i = 0; i < g->n_rules; i++) free(g->rules[i].alts);
    free(g->rules);
    free(g->el);
    free(g->sets);
    free(g);
}

og_grammar *og_grammar_ref(og_grammar *g) {
    if (g) atomic_fetch_add(&g->refs, 1);
    return g;
}

void og_grammar_unref(og_grammar *g) {
    if (g && atomic_fetch_sub(&g->refs, 1) == 1) grammar_free(g);
}

/* The compiler's state. Errors set err and make every helper a no-op. */
typedef struct builder {
    og_grammar *g;
    og_status st;
    char *err;
    size_t errlen;
    const json_t *root_schema;
    struct memo {
        const json_t *s;
        int r;
    } *memo;               /* compiled subschemas -> rule (recursion through $ref) */
    int n_memo, cap_memo;
    int r_value, r_obj, r_arr, r_str, r_num, r_int, r_char, r_quote, r_digits16, r_pchars;
} builder;

typedef struct seq {
    gel v[64];
    int n;
    bool overflow;
} seq;

static bool grow(void **p, int *cap, int need, size_t elsz) {
    if (need <= *cap) return true;
    int c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * elsz);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

static bool bfail(builder *b, og_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool bfail(builder *b, og_status st, const char *fmt, ...) {
    if (b->st) return false;
    b->st = st;
    if (b->err && b->errlen) {
        /* Messages are "PATH: reason"; a deep schema's path could fill the
         * client's buffer before the reason: keep its first and last 48 bytes. */
        char full[4096];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(full, sizeof full, fmt, ap);
        va_end(ap);
        const char *sep = strstr(full, ": ");
        const size_t plen = sep ? (size_t)(sep - full) : 0;
        if (sep && plen > 112)
            snprintf(b->err, b->errlen, "%.48s...%s", full, sep - 48);
        else
            snprintf(b->err, b->errlen, "%s", full);
    }
    return false;
}
#define B_OOM(b) bfail(b, OG_ERR_NOMEM, "out of memory compiling the schema")

static int new_rule(builder *b) {
    og_grammar *g = b->g;
    if (b->st) return -1;
    if (g->n_rules >= OG_GRAMMAR_MAX_ELEMS / 2)
        return bfail(b, OG_ERR_RANGE, "the schema is too large (over %d grammar rules)", OG_GRAMMAR_MAX_ELEMS / 2), -1;
    if (!grow((void **)&g->rules, &g->cap_rules, g->n_rules + 1, sizeof *g->rules)) return B_OOM(b), -1;
    g->rules[g->n_rules] = (grule){0};
    return g->n_rules++;
}

static int set_id(builder *b, const bset *s) {
    og_grammar *g = b->g;
    for (int i = 0; i < g->n_sets; i++)
        if (!memcmp(&g->sets[i], s, sizeof *s)) return i;
    if (!grow((void **)&g->sets, &g->cap_sets, g->n_sets + 1, sizeof *g->sets)) return B_OOM(b), 0;
    g->sets[g->n_sets] = *s;
    return g->n_sets++;
}

static void sq_push(seq *q, int type, int arg) {
    if (q->n == (int)(sizeof q->v / sizeof q->v[0])) {
        q->overflow = true;
        return;
    }
    q->v[q->n++] = (gel){type, arg};
}
static void sq_set(builder *b, seq *q, const bset *s) { sq_push(q, E_CHARS, set_id(b, s)); }
static void sq_range(builder *b, seq *q, unsigned lo, unsigned hi) {
    bset s = {{0}};
    bs_add(&s, lo, hi);
    sq_set(b, q, &s);
}
static void sq_byte(builder *b, seq *q, unsigned c) { sq_range(b, q, c, c); }
static void sq_ref(seq *q, int r) { sq_push(q, E_REF, r); }

/* Appends q (plus E_END) as an alternative of rule r. */
static void add_alt(builder *b, int r, const seq *q) {
    og_grammar *g = b->g;
    if (b->st || r < 0) return;
    if (q->overflow) {
        bfail(b, OG_ERR_RANGE, "internal: grammar sequence too long");
        return;
    }
    for (int i = 0; i < q->n; i++)
        if (q->v[i].type == E_REF && q->v[i].arg < 0) return; /* a failed sub-rule: b->st is set */
    if (g->n_el + q->n + 1 > OG_GRAMMAR_MAX_ELEMS) {
        bfail(b, OG_ERR_RANGE, "the schema is too large (over %d grammar elements)", OG_GRAMMAR_MAX_ELEMS);
        return;
    }
    if (!grow((void **)&g->el, &g->cap_el, g->n_el + q->n + 1, sizeof *g->el) ||
        !grow((void **)&g->rules[r].alts, &g->rules[r].cap_alt, g->rules[r].n_alt + 1, sizeof *g->rules[r].alts)) {
        B_OOM(b);
        return;
    }
    g->rules[r].alts[g->rules[r].n_alt++] = g->n_el;
    memcpy(g->el + g->n_el, q->v, (size_t)q->n * sizeof *q->v);
    g->n_el += q->n;
    g->el[g->n_el++] = (gel){E_END, 0};
}

/* Adds the literal s as an alternative of r (a long one as a chain of rules). */
static void add_lit(builder *b, int r, const char *s) {
    for (;;) {
        seq q = {0};
        size_t n = strlen(s), k = n > 48 ? 48 : n;
        for (size_t i = 0; i < k; i++) sq_byte(b, &q, (unsigned char)s[i]);
        int next = n > k ? new_rule(b) : -1;
        if (next >= 0) sq_ref(&q, next);
        add_alt(b, r, &q);
        if (next < 0 || b->st) return;
        r = next;
        s += k;
    }
}

/* R_0 ::= item^min (item (item ...)?)? then tail: a chain R_i ::= item R_i+1 |
 * tail (i >= min); max < 0: unbounded (R_min loops). tail < 0: nothing. */
static int rep_chain(builder *b, const seq *item, int min, int max, int tail) {
    int top = max < 0 ? min : max;
    int first = -1;
    for (int i = 0; i <= top && !b->st; i++) {
        int r = new_rule(b);
        if (i == 0) first = r;
        (void)r;
    }
    if (b->st) return -1;
    for (int i = 0; i <= top; i++) {
        int r = first + i;
        if (i < top || max < 0) {
            seq q = *item;
            sq_ref(&q, i < top ? r + 1 : r);
            add_alt(b, r, &q);
        }
        if (i >= min) {
            seq q = {0};
            if (tail >= 0) sq_ref(&q, tail);
            add_alt(b, r, &q);
        }
    }
    return first;
}

/* The shared rules of free JSON, built once per grammar. */
static void base_rules(builder *b) {
    int value = b->r_value = new_rule(b), obj = b->r_obj = new_rule(b), arr = b->r_arr = new_rule(b);
    int str = b->r_str = new_rule(b), num = b->r_num = new_rule(b), in = b->r_int = new_rule(b);
    int ch = b->r_char = new_rule(b), quote = b->r_quote = new_rule(b);
    int obj1 = new_rule(b), obj2 = new_rule(b), member = new_rule(b), arr1 = new_rule(b), arr2 = new_rule(b);
    int srest = new_rule(b), esc = new_rule(b), hexu = new_rule(b), cont = new_rule(b), frac = new_rule(b);
    int expo = new_rule(b);
    if (b->st) return;
    seq q;
    int alts[] = {obj, arr, str, num};
    for (int i = 0; i < 4; i++) {
        q = (seq){0};
        sq_ref(&q, alts[i]);
        add_alt(b, value, &q);
    }
    add_lit(b, value, "true");
    add_lit(b, value, "false");
    add_lit(b, value, "null");
    /* OBJ ::= "{" OBJ1; OBJ1 ::= "}" | MEMBER OBJ2; OBJ2 ::= "}" | "," MEMBER OBJ2 */
    q = (seq){0}, sq_byte(b, &q, '{'), sq_ref(&q, obj1), add_alt(b, obj, &q);
    add_lit(b, obj1, "}");
    q = (seq){0}, sq_ref(&q, member), sq_ref(&q, obj2), add_alt(b, obj1, &q);
    add_lit(b, obj2, "}");
    q = (seq){0}, sq_byte(b, &q, ','), sq_ref(&q, member), sq_ref(&q, obj2), add_alt(b, obj2, &q);
    q = (seq){0}, sq_ref(&q, str), sq_byte(b, &q, ':'), sq_ref(&q, value), add_alt(b, member, &q);
    q = (seq){0}, sq_byte(b, &q, '['), sq_ref(&q, arr1), add_alt(b, arr, &q);
    add_lit(b, arr1, "]");
    q = (seq){0}, sq_ref(&q, value), sq_ref(&q, arr2), add_alt(b, arr1, &q);
    add_lit(b, arr2, "]");
    q = (seq){0}, sq_byte(b, &q, ','), sq_ref(&q, value), sq_ref(&q, arr2), add_alt(b, arr2, &q);
    /* strings */
    add_lit(b, quote, "\"");
    q = (seq){0}, sq_byte(b, &q, '"'), sq_ref(&q, srest), add_alt(b, str, &q);
    add_lit(b, srest, "\"");
    q = (seq){0}, sq_ref(&q, ch), sq_ref(&q, srest), add_alt(b, srest, &q);
    bset plain = {{0}};
    bs_add(&plain, 0x20, 0x7f);
    bs_del(&plain, '"');
    bs_del(&plain, '\\');
    q = (seq){0}, sq_set(b, &q, &plain), add_alt(b, ch, &q);
    q = (seq){0}, sq_byte(b, &q, '\\'), sq_ref(&q, esc), add_alt(b, ch, &q);
    q = (seq){0}, sq_range(b, &q, 0x80, 0xbf), add_alt(b, cont, &q);
    /* UTF-8 (RFC 3629 table): no overlong forms, no surrogates, <= U+10FFFF */
    q = (seq){0}, sq_range(b, &q, 0xc2, 0xdf), sq_ref(&q, cont), add_alt(b, ch, &q);
    q = (seq){0}, sq_byte(b, &q, 0xe0), sq_range(b, &q, 0xa0, 0xbf), sq_ref(&q, cont), add_alt(b, ch, &q);
    bset e3 = {{0}};
    bs_add(&e3, 0xe1, 0xec);
    bs_add(&e3, 0xee, 0xef);
    q = (seq){0}, sq_set(b, &q, &e3), sq_ref(&q, cont), sq_ref(&q, cont), add_alt(b, ch, &q);
    q = (seq){0}, sq_byte(b, &q, 0xed), sq_range(b, &q, 0x80, 0x9f), sq_ref(&q, cont), add_alt(b, ch, &q);
    q = (seq){0}, sq_byte(b, &q, 0xf0), sq_range(b, &q, 0x90, 0xbf), sq_ref(&q, cont), sq_ref(&q, cont);
    add_alt(b, ch, &q);
    q = (seq){0}, sq_range(b, &q, 0xf1, 0xf3), sq_ref(&q, cont), sq_ref(&q, cont), sq_ref(&q, cont);
    add_alt(b, ch, &q);
    q = (seq){0}, sq_byte(b, &q, 0xf4), sq_range(b, &q, 0x80, 0x8f), sq_ref(&q, cont), sq_ref(&q, cont);
    add_alt(b, ch, &q);
    bset es = {{0}};
    for (const char *p = "\"\\/bfnrt"; *p; p++) bs_add(&es, (unsigned char)*p, (unsigned char)*p);
    q = (seq){0}, sq_set(b, &q, &es), add_alt(b, esc, &q);
    q = (seq){0}, sq_byte(b, &q, 'u'), sq_ref(&q, hexu), add_alt(b, esc, &q);
    bset hex = {{0}}, h1 = {{0}}, hd = {{0}}, he = {{0}};
    bs_add(&hex, '0', '9'), bs_add(&hex, 'a', 'f'), bs_add(&hex, 'A', 'F');
    bs_add(&h1, '0', '9'), bs_add(&h1, 'a', 'c'), bs_add(&h1, 'A', 'C');
    bs_add(&hd, 'd', 'd'), bs_add(&hd, 'D', 'D');
    bs_add(&he, 'e', 'f'), bs_add(&he, 'E', 'F');
    q = (seq){0}, sq_set(b, &q, &h1), sq_set(b, &q, &hex), sq_set(b, &q, &hex), sq_set(b, &q, &hex);
    add_alt(b, hexu, &q);
    q = (seq){0}, sq_set(b, &q, &hd), sq_range(b, &q, '0', '7'), sq_set(b, &q, &hex), sq_set(b, &q, &hex);
    add_alt(b, hexu, &q);
    q = (seq){0}, sq_set(b, &q, &he), sq_set(b, &q, &hex), sq_set(b, &q, &hex), sq_set(b, &q, &hex);
    add_alt(b, hexu, &q);
    /* numbers: INT ::= "-"? ("0" | [1-9] D{0,15}); NUM ::= INT FRAC EXP, EXP with at most 2
     * digits: every number stays a finite double (JSON parsers refuse or make Infinity of 1e400) */
    seq digit = {0};
    sq_range(b, &digit, '0', '9');
    b->r_digits16 = rep_chain(b, &digit, 0, 15, -1);
    int d1_16 = rep_chain(b, &digit, 1, 16, -1), d1_2 = rep_chain(b, &digit, 1, 2, -1);
    int uint = new_rule(b);
    if (b->st) return;
    add_lit(b, uint, "0");
    q = (seq){0}, sq_range(b, &q, '1', '9'), sq_ref(&q, b->r_digits16), add_alt(b, uint, &q);
    q = (seq){0}, sq_ref(&q, uint), add_alt(b, in, &q);
    q = (seq){0}, sq_byte(b, &q, '-'), sq_ref(&q, uint), add_alt(b, in, &q);
    add_lit(b, frac, "");
    q = (seq){0}, sq_byte(b, &q, '.'), sq_ref(&q, d1_16), add_alt(b, frac, &q);
    add_lit(b, expo, "");
    bset ee = {{0}}, pm = {{0}};
    bs_add(&ee, 'e', 'e'), bs_add(&ee, 'E', 'E'), bs_add(&pm, '+', '+'), bs_add(&pm, '-', '-');
    q = (seq){0}, sq_set(b, &q, &ee), sq_ref(&q, d1_2), add_alt(b, expo, &q);
    q = (seq){0}, sq_set(b, &q, &ee), sq_set(b, &q, &pm), sq_ref(&q, d1_2), add_alt(b, expo, &q);
    q = (seq){0}, sq_ref(&q, in), sq_ref(&q, frac), sq_ref(&q, expo), add_alt(b, num, &q);
}

/* ---- byte tries of literals (enum/const values, declared keys) ------------- */

typedef struct ltrie {
    struct lnode {
        int child, sibling;
        unsigned char c;
        bool term;
    } *n;
    int count, cap;
} ltrie;

static bool lt_insert(ltrie *t, const unsigned char *s, size_t len) {
    if (!t->count) {
        if (!grow((void **)&t->n, &t->cap, 1, sizeof *t->n)) return false;
        t->n[0] = (struct lnode){-1, -1, 0, false};
        t->count = 1;
    }
    int at = 0;
    for (size_t i = 0; i < len; i++) {
        int c = t->n[at].child;
        while (c >= 0 && t->n[c].c != s[i]) c = t->n[c].sibling;
        if (c < 0) {
            if (!grow((void **)&t->n, &t->cap, t->count + 1, sizeof *t->n)) return false;
            c = t->count++;
            t->n[c] = (struct lnode){-1, t->n[at].child, s[i], false};
            t->n[at].child = c;
        }
        at = c;
    }
    t->n[at].term = true;
    return true;
}

/* One rule per trie node: T ::= "" (a literal ends here) | c T_child. */
static int lt_rules(builder *b, const ltrie *t) {
    int first = -1;
    for (int i = 0; i < t->count && !b->st; i++) {
        int r = new_rule(b);
        if (!i) first = r;
    }
    for (int i = 0; i < t->count && !b->st; i++) {
        if (t->n[i].term) add_lit(b, first + i, "");
        for (int c = t->n[i].child; c >= 0; c = t->n[c].sibling) {
            seq q = {0};
            sq_byte(b, &q, t->n[c].c);
            sq_ref(&q, first + c);
            add_alt(b, first + i, &q);
        }
    }
    return b->st ? -1 : first;
}

/* A key string (quotes included) that is none of the trie's keys: printable
 * ASCII without '"' or '\\', so it is compared byte for byte. */
static int notkey_rules(builder *b, const ltrie *t) {
    bset plain = {{0}};
    bs_add(&plain, 0x20, 0x7e);
    bs_del(&plain, '"');
    bs_del(&plain, '\\');
    seq item = {0};
    sq_set(b, &item, &plain);
    int rest = rep_chain(b, &item, 0, -1, b->r_quote); /* any plain run, then '"' */
    int first = -1;
    for (int i = 0; i < t->count && !b->st; i++) {
        int r = new_rule(b);
        if (!i) first = r;
    }
    for (int i = 0; i < t->count && !b->st; i++) {
        if (!t->n[i].term) add_lit(b, first + i, "\"");
        bset other = plain;
        for (int c = t->n[i].child; c >= 0; c = t->n[c].sibling) {
            if (!bs_has(&plain, t->n[c].c)) continue;
            bs_del(&other, t->n[c].c);
            seq q = {0};
            sq_byte(b, &q, t->n[c].c);
            sq_ref(&q, first + c);
            add_alt(b, first + i, &q);
        }
        seq q = {0};
        sq_set(b, &q, &other);
        sq_ref(&q, rest);
        add_alt(b, first + i, &q);
    }
    int key = new_rule(b);
    seq q = {0};
    sq_byte(b, &q, '"');
    sq_ref(&q, first);
    add_alt(b, key, &q);
    return b->st ? -1 : key;
}

/* ---- JSON Schema ----------------------------------------------------------- */

static const char *const k_annotations[] = {"title",   "description", "default",  "examples", "$schema",
                                             "$id",     "$comment",    "deprecated", "readOnly", "writeOnly",
                                             "$defs",   "definitions", NULL};
static const char *const k_keywords[] = {"type",     "properties", "required",  "additionalProperties",
                                          "enum",     "const",      "items",     "minItems",
                                          "maxItems", "anyOf",      "$ref",      "minLength",
                                          "maxLength", NULL};

static bool in_list(const char *const *l, const char *k) {
    for (; *l; l++)
        if (!strcmp(*l, k)) return true;
    return false;
}

static int compile(builder *b, const json_t *s, const char *path, int depth);

static int sub(builder *b, const json_t *s, const char *path, const char *a, const char *c, int depth) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s%s%s", path, a, c ? "/" : "", c ? c : "");
    return compile(b, s, p, depth + 1);
}

/* a non-negative integer keyword, or def when absent */
static bool get_count(builder *b, const json_t *s, const char *k, const char *path, long long def, long long *out) {
    const json_t *v = json_object_get(s, k);
    *out = def;
    if (!v) return true;
    if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) && json_real_value(v) >= 0 &&
        json_real_value(v) <= 1e9)
        *out = (long long)json_real_value(v);
    else if (json_is_integer(v) && json_integer_value(v) >= 0)
        *out = json_integer_value(v);
    else
        return bfail(b, OG_ERR_INVALID_ARG, "%s: '%s' must be a non-negative integer", path, k);
    if (*out > OG_GRAMMAR_MAX_REPEAT)
        return bfail(b, OG_ERR_RANGE, "%s: '%s' over %d is not supported", path, k, OG_GRAMMAR_MAX_REPEAT);
    return true;
}

static bool type_ok(const json_t *v, const char *t) {
    if (!strcmp(t, "object")) return json_is_object(v);
    if (!strcmp(t, "array")) return json_is_array(v);
    if (!strcmp(t, "string")) return json_is_string(v);
    if (!strcmp(t, "number")) return json_is_number(v);
    if (!strcmp(t, "integer"))
        return json_is_integer(v) || (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)));
    if (!strcmp(t, "boolean")) return json_is_boolean(v);
    if (!strcmp(t, "null")) return json_is_null(v);
    return false;
}

static const char *const k_types[] = {"object", "array", "string", "number", "integer", "boolean", "null", NULL};

/* enum / const: the values' compact JSON texts as a trie (filtered by type). */
static int compile_enum(builder *b, const json_t *s, const char *path) {
    const json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const"), *ty = json_object_get(s, "type");
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (strcmp(k, "enum") && strcmp(k, "const") && strcmp(k, "type") && !in_list(k_annotations, k))
            return bfail(b, OG_ERR_UNSUPPORTED, "%s: '%s' next to enum/const is not supported", path, k), -1;
    }
    if (en && !json_is_array(en)) return bfail(b, OG_ERR_INVALID_ARG, "%s: 'enum' must be an array", path), -1;
    ltrie t = {0};
    size_t n = en ? json_array_size(en) : 1;
    int kept = 0;
    for (size_t i = 0; i < n && !b->st; i++) {
        const json_t *x = en ? json_array_get(en, i) : cn;
        if (cn && en && !json_equal((json_t *)x, (json_t *)cn)) continue;
        bool ok = !ty;
        if (json_is_string(ty)) ok = type_ok(x, json_string_value(ty));
        for (size_t j = 0; json_is_array(ty) && j < json_array_size(ty); j++)
            ok |= json_is_string(json_array_get(ty, j)) && type_ok(x, json_string_value(json_array_get(ty, j)));
        if (!ok) continue;
        char *txt = json_dumps(x, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(17));
        if (!txt || !lt_insert(&t, (const unsigned char *)txt, strlen(txt))) B_OOM(b);
        free(txt);
        kept++;
    }
    int r = -1;
    if (!b->st && !kept)
        bfail(b, OG_ERR_INVALID_ARG, "%s: no value of 'enum'/'const' satisfies the schema", path);
    else if (!b->st)
        r = lt_rules(b, &t);
    free(t.n);
    return r;
}

/* Property k is named in the schema's "required" array (NULL or not an array: no). */
static bool is_required(const json_t *req, const char *k) {
    for (size_t j = 0; json_is_array(req) && j < json_array_size(req); j++)
        if (json_is_string(json_array_get(req, j)) && !strcmp(json_string_value(json_array_get(req, j)), k))
            return true;
    return false;
}

static int compile_object(builder *b, const json_t *s, const char *path, int depth) {
    const json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    const json_t *ap = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props))
        return bfail(b, OG_ERR_INVALID_ARG, "%s: 'properties' must be an object", path), -1;
    if (req && !json_is_array(req))
        return bfail(b, OG_ERR_INVALID_ARG, "%s: 'required' must be an array of strings", path), -1;
    if (ap && !json_is_boolean(ap) && !(json_is_object(ap) && json_object_size(ap) == 0))
        return bfail(b, OG_ERR_UNSUPPORTED, "%s: 'additionalProperties' other than true or false is not supported",
                     path),
               -1;
    bool extra = !json_is_false(ap);
    for (size_t i = 0; req && i < json_array_size(req); i++) {
        const char *k = json_string_value(json_array_get(req, i));
        if (!k) return bfail(b, OG_ERR_INVALID_ARG, "%s: 'required' must be an array of strings", path), -1;
        if (!props || !json_object_get(props, k))
            return bfail(b, OG_ERR_UNSUPPORTED, "%s: 'required' names '%s', which 'properties' does not declare", path,
                         k),
                   -1;
    }
    size_t n = props ? json_object_size(props) : 0;
    if (!n && extra) return b->r_obj;
    /* R[i][f] (f: a member was written already) = 2 * i + f */
    int base = -1;
    for (size_t i = 0; i <= n && !b->st; i++) {
        int r0 = new_rule(b);
        new_rule(b);
        if (!i) base = r0;
    }
    int obj = new_rule(b);
    if (b->st) return -1;
    ltrie keys = {0};
    size_t i = 0;
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)props, k, v) {
        if (b->st) break;
        int vr = sub(b, v, path, "properties", k, depth);
        bool required = is_required(req, k);
        json_t *ks = json_stringn(k, strlen(k));
        char *kt = ks ? json_dumps(ks, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
        json_decref(ks);
        if (!kt || !lt_insert(&keys, (const unsigned char *)k, strlen(k))) {
            free(kt);
            B_OOM(b);
            break;
        }
        for (int f = 0; f < 2; f++) {
            seq q = {0};
            if (f) sq_byte(b, &q, ',');
            if (strlen(kt) <= 48) {
                for (const char *p = kt; *p; p++) sq_byte(b, &q, (unsigned char)*p);
            } else { /* a long key: its bytes as a literal rule */
                int lr = new_rule(b);
                add_lit(b, lr, kt);
                sq_ref(&q, lr);
            }
            sq_byte(b, &q, ':');
            sq_ref(&q, vr);
            sq_ref(&q, base + 2 * ((int)i + 1) + 1);
            add_alt(b, base + 2 * (int)i + f, &q);
            if (!required) {
                q = (seq){0};
                sq_ref(&q, base + 2 * ((int)i + 1) + f);
                add_alt(b, base + 2 * (int)i + f, &q);
            }
        }
        free(kt);
        i++;
    }
    int end0 = base + 2 * (int)n;
    add_lit(b, end0, "}");
    add_lit(b, end0 + 1, "}");
    if (extra && !b->st) {
        int key = notkey_rules(b, &keys);
        for (int f = 0; f < 2; f++) {
            seq q = {0};
            if (f) sq_byte(b, &q, ',');
            sq_ref(&q, key);
            sq_byte(b, &q, ':');
            sq_ref(&q, b->r_value);
            sq_ref(&q, end0 + 1);
            add_alt(b, end0 + f, &q);
        }
    }
    free(keys.n);
    seq q = {0};
    sq_byte(b, &q, '{');
    sq_ref(&q, base);
    add_alt(b, obj, &q);
    return b->st ? -1 : obj;
}

static int compile_array(builder *b, const json_t *s, const char *path, int depth) {
    const json_t *items = json_object_get(s, "items");
    long long mn, mx;
    if (!get_count(b, s, "minItems", path, 0, &mn) || !get_count(b, s, "maxItems", path, -1, &mx)) return -1;
    if (mx >= 0 && mn > mx) return bfail(b, OG_ERR_INVALID_ARG, "%s: 'minItems' is over 'maxItems'", path), -1;
    if (items && json_is_array(items))
        return bfail(b, OG_ERR_UNSUPPORTED, "%s: 'items' as an array of schemas (tuples) is not supported", path), -1;
    int it = items ? sub(b, items, path, "items", NULL, depth) : b->r_value;
    if (it < 0) return -1;
    if (!items && mn == 0 && mx < 0) return b->r_arr;
    /* "[" then "]" | item A_1; A_i ::= "]" (i >= min) | "," item A_i+1 (i < max) */
    int arr = new_rule(b), close = new_rule(b);
    add_lit(b, close, "]");
    seq item = {0};
    sq_byte(b, &item, ',');
    sq_ref(&item, it);
    int rest = mx == 0 ? -1 : rep_chain(b, &item, mn > 0 ? (int)mn - 1 : 0, mx < 0 ? -1 : (int)mx - 1, close);
    seq q = {0};
    sq_byte(b, &q, '[');
    if (mn == 0) {
        seq e = q;
        sq_ref(&e, close);
        add_alt(b, arr, &e);
    }
    if (mx != 0) {
        sq_ref(&q, it);
        sq_ref(&q, rest);
        add_alt(b, arr, &q);
    }
    return b->st ? -1 : arr;
}

static int compile_string(builder *b, const json_t *s, const char *path) {
    long long mn, mx;
    if (!get_count(b, s, "minLength", path, 0, &mn) || !get_count(b, s, "maxLength", path, -1, &mx)) return -1;
    if (mx >= 0 && mn > mx) return bfail(b, OG_ERR_INVALID_ARG, "%s: 'minLength' is over 'maxLength'", path), -1;
    if (mn == 0 && mx < 0) return b->r_str;
    seq item = {0};
    sq_ref(&item, b->r_char);
    int chain = rep_chain(b, &item, (int)mn, (int)mx, b->r_quote);
    int r = new_rule(b);
    seq q = {0};
    sq_byte(b, &q, '"');
    sq_ref(&q, chain);
    add_alt(b, r, &q);
    return b->st ? -1 : r;
}

static int compile_type(builder *b, const json_t *s, const char *t, const char *path, int depth) {
    int r;
    if (!strcmp(t, "object")) return compile_object(b, s, path, depth);
    if (!strcmp(t, "array")) return compile_array(b, s, path, depth);
    if (!strcmp(t, "string")) return compile_string(b, s, path);
    if (!strcmp(t, "number")) return b->r_num;
    if (!strcmp(t, "integer")) return b->r_int;
    if (!strcmp(t, "boolean")) {
        r = new_rule(b);
        add_lit(b, r, "true");
        add_lit(b, r, "false");
        return r;
    }
    if (!strcmp(t, "null")) {
        r = new_rule(b);
        add_lit(b, r, "null");
        return r;
    }
    return bfail(b, OG_ERR_UNSUPPORTED, "%s: 'type' \"%.40s\" is not a JSON Schema type", path, t), -1;
}

/* "#", "#/a/b~1c": a JSON pointer into the root schema */
static const json_t *resolve_ref(builder *b, const char *ref, const char *path) {
    if (ref[0] != '#') {
        bfail(b, OG_ERR_UNSUPPORTED, "%s: '$ref' \"%.80s\": only local references (\"#/...\") are supported", path, ref);
        return NULL;
    }
    const json_t *at = b->root_schema;
    const char *p = ref + 1;
    while (*p == '/') {
        p++;
        char tok[256];
        size_t n = 0;
        for (; *p && *p != '/'; p++) {
            char c = *p;
            if (c == '~' && (p[1] == '0' || p[1] == '1')) c = *++p == '0' ? '~' : '/';
            if (n + 1 < sizeof tok) tok[n++] = c;
        }
        tok[n] = 0;
        if (json_is_object(at)) {
            at = json_object_get(at, tok);
        } else if (json_is_array(at)) {
            char *e;
            long idx = strtol(tok, &e, 10);
            at = *e || e == tok ? NULL : json_array_get(at, (size_t)idx);
        } else {
            at = NULL;
        }
        if (!at) break;
    }
    if (!at || *p) bfail(b, OG_ERR_INVALID_ARG, "%s: '$ref' \"%.80s\" resolves to nothing in the schema", path, ref);
    return at && !*p ? at : NULL;
}

static int compile(builder *b, const json_t *s, const char *path, int depth) {
    if (b->st) return -1;
    for (int i = 0; i < b->n_memo; i++)
        if (b->memo[i].s == s) return b->memo[i].r;
    if (depth > OG_GRAMMAR_MAX_DEPTH)
        return bfail(b, OG_ERR_RANGE, "%s: the schema nests deeper than %d levels", path, OG_GRAMMAR_MAX_DEPTH), -1;
    if (json_is_true(s)) return b->r_value;
    if (json_is_false(s)) return bfail(b, OG_ERR_INVALID_ARG, "%s: the schema false admits no document", path), -1;
    if (!json_is_object(s)) return bfail(b, OG_ERR_INVALID_ARG, "%s: a schema must be an object or a boolean", path), -1;
    const char *k;
    const json_t *v;
    bool value_kw = false;
    json_object_foreach((json_t *)s, k, v) {
        if (in_list(k_annotations, k)) continue;
        if (!in_list(k_keywords, k))
            return bfail(b, OG_ERR_UNSUPPORTED, "%s: the JSON Schema keyword '%.60s' is not supported", path, k), -1;
        value_kw = true;
    }
    if (!value_kw) return b->r_value;
    /* a rule for this schema first, so that a $ref back to it finds it */
    int r = new_rule(b);
    if (r < 0) return -1;
    if (!grow((void **)&b->memo, &b->cap_memo, b->n_memo + 1, sizeof *b->memo)) return B_OOM(b), -1;
    b->memo[b->n_memo++] = (struct memo){s, r};

    const json_t *ref = json_object_get(s, "$ref"), *any = json_object_get(s, "anyOf");
    const json_t *ty = json_object_get(s, "type");
    seq q;
    if (ref || any) {
        json_object_foreach((json_t *)s, k, v) {
            if (!in_list(k_annotations, k) && strcmp(k, ref ? "$ref" : "anyOf"))
                return bfail(b, OG_ERR_UNSUPPORTED, "%s: '%s' next to '%s' is not supported", path, k,
                             ref ? "$ref" : "anyOf"),
                       -1;
        }
    }
    if (ref) {
        if (!json_is_string(ref)) return bfail(b, OG_ERR_INVALID_ARG, "%s: '$ref' must be a string", path), -1;
        const json_t *t = resolve_ref(b, json_string_value(ref), path);
        if (!t) return -1;
        char p[512];
        snprintf(p, sizeof p, "%.500s", json_string_value(ref));
        int tr = compile(b, t, p, depth + 1);
        q = (seq){0}, sq_ref(&q, tr), add_alt(b, r, &q);
    } else if (any) {
        if (!json_is_array(any) || !json_array_size(any))
            return bfail(b, OG_ERR_INVALID_ARG, "%s: 'anyOf' must be a non-empty array of schemas", path), -1;
        for (size_t i = 0; i < json_array_size(any) && !b->st; i++) {
            char idx[24];
            snprintf(idx, sizeof idx, "%zu", i);
            int ar = sub(b, json_array_get(any, i), path, "anyOf", idx, depth);
            q = (seq){0}, sq_ref(&q, ar), add_alt(b, r, &q);
        }
    } else if (json_object_get(s, "enum") || json_object_get(s, "const")) {
        int er = compile_enum(b, s, path);
        q = (seq){0}, sq_ref(&q, er), add_alt(b, r, &q);
    } else {
        const char *one[2] = {NULL, NULL};
        const json_t *list = NULL;
        if (json_is_string(ty)) {
            one[0] = json_string_value(ty);
        } else if (json_is_array(ty) && json_array_size(ty)) {
            list = ty;
        } else if (ty) {
            return bfail(b, OG_ERR_INVALID_ARG, "%s: 'type' must be a type name or a non-empty array of them", path), -1;
        } else if (json_object_get(s, "properties") || json_object_get(s, "required") ||
                   json_object_get(s, "additionalProperties")) {
            one[0] = "object";
        } else if (json_object_get(s, "items") || json_object_get(s, "minItems") || json_object_get(s, "maxItems")) {
            one[0] = "array";
        } else {
            one[0] = "string"; /* minLength / maxLength */
        }
        size_t n = list ? json_array_size(list) : 1;
        for (size_t i = 0; i < n && !b->st; i++) {
            const char *t = list ? json_string_value(json_array_get(list, i)) : one[0];
            if (!t || !in_list(k_types, t))
                return bfail(b, OG_ERR_UNSUPPORTED, "%s: 'type' must name JSON Schema types (object, array, string, "
                                                    "number, integer, boolean, null)",
                             path),
                       -1;
            int tr = compile_type(b, s, t, path, depth);
            q = (seq){0}, sq_ref(&q, tr), add_alt(b, r, &q);
        }
    }
    return b->st ? -1 : r;
}

/* After compiling: drop alternatives that can never complete (they reference
 * rules that derive no finite string), refuse a grammar whose root is such a
 * rule, and refuse left recursion (a cycle of references that consumes no
 * byte: the matcher would expand it forever). */
static bool finish_grammar(builder *b) {
    og_grammar *g = b->g;
    int nr = g->n_rules;
    bool *prod = calloc((size_t)nr, 1), *null = calloc((size_t)nr, 1);
    int *color = calloc((size_t)nr, sizeof *color), *stk = malloc((size_t)nr * 2 * sizeof *stk);
    bool ok = prod && null && color && stk;
    if (!ok) B_OOM(b);
    for (bool changed = true; ok && changed;) { /* productive and nullable: least fixpoints */
        changed = false;
        for (int r = 0; r < nr; r++)
            for (int a = 0; a < g->rules[r].n_alt; a++) {
                bool p = true, nu = true;
                for (const gel *e = g->el + g->rules[r].alts[a]; e->type != E_END; e++) {
                    if (e->type == E_CHARS) nu = false;
                    else p &= prod[e->arg], nu &= null[e->arg];
                }
                if (p && !prod[r]) prod[r] = changed = true;
                if (nu && !null[r]) null[r] = changed = true;
            }
    }
    /* left recursion: iterative DFS over "leftmost reference" edges */
    for (int s0 = 0; ok && s0 < nr; s0++) {
        if (color[s0]) continue;
        int sp = 0;
        stk[sp++] = s0, stk[sp++] = 0;
        color[s0] = 1;
        while (sp && ok) {
            int r = stk[sp - 2], *it = &stk[sp - 1];
            /* the it-th left edge of r: walk alternatives, each up to its first non-nullable element */
            int idx = 0, next = -1;
            for (int a = 0; a < g->rules[r].n_alt && next < 0; a++)
                for (const gel *e = g->el + g->rules[r].alts[a]; e->type == E_REF; e++) {
                    if (idx++ == *it) {
                        next = e->arg;
                        break;
                    }
                    if (!null[e->arg]) break;
                }
            if (next < 0) {
                color[r] = 2;
                sp -= 2;
                continue;
            }
            (*it)++;
            if (color[next] == 1) {
                ok = bfail(b, OG_ERR_INVALID_ARG,
                           "$ref/anyOf: a reference cycle that consumes no input (left recursion) is not supported");
            } else if (!color[next]) {
                color[next] = 1;
                stk[sp++] = next, stk[sp++] = 0;
            }
        }
    }
    for (int r = 0; ok && r < nr; r++) { /* prune */
        int k = 0;
        for (int a = 0; a < g->rules[r].n_alt; a++) {
            bool p = true;
            for (const gel *e = g->el + g->rules[r].alts[a]; e->type != E_END; e++)
                if (e->type == E_REF) p &= prod[e->arg];
            if (p) g->rules[r].alts[k++] = g->rules[r].alts[a];
        }
        g->rules[r].n_alt = k;
    }
    if (ok && !prod[g->root]) ok = bfail(b, OG_ERR_INVALID_ARG, "the schema admits no finite JSON document");
    free(prod);
    free(null);
    free(color);
    free(stk);
    return ok;
}

/* A builder with an empty grammar and the shared JSON rules. False: out of memory (err set). */
static bool build_begin(builder *b) {
    b->g = calloc(1, sizeof *b->g);
    if (!b->g) return og_fail(b->err, b->errlen, OG_ERR_NOMEM, "out of memory"), false;
    atomic_init(&b->g->refs, 1);
    base_rules(b);
    return true;
}

/* Checks and prunes the grammar (its root set), hands it over or frees it. */
static og_status build_end(builder *b, og_grammar **out) {
    if (!b->st) finish_grammar(b);
    free(b->memo);
    if (b->st) {
        grammar_free(b->g);
        return b->st;
    }
    *out = b->g;
    return OG_OK;
}

static og_status build(const json_t *schema, og_grammar **out, char *err, size_t errlen) {
    *out = NULL;
    builder b = {.err = err, .errlen = errlen, .root_schema = schema};
    if (!build_begin(&b)) return OG_ERR_NOMEM;
    int top = b.st ? -1 : schema ? compile(&b, schema, "#", 0) : b.r_obj;
    if (!b.st) {
        b.g->root = new_rule(&b); /* ROOT ::= top: the root rule is never referenced */
        seq q = {0};
        sq_ref(&q, top);
        add_alt(&b, b.g->root, &q);
    }
    return build_end(&b, out);
}

og_status og_grammar_json_object(og_grammar **out, char *err, size_t errlen) { return build(NULL, out, err, errlen); }

og_status og_grammar_from_schema(const json_t *schema, og_grammar **out, char *err, size_t errlen) {
    if (!schema) {
        *out = NULL;
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "no schema");
    }
    return build(schema, out, err, errlen);
}

/* ---- tool calls ------------------------------------------------------------ */

/* The symbol of control token id (registered in the grammar's special list). */
static int special_sym(builder *b, int32_t id) {
    og_grammar *g = b->g;
    for (int k = 0; k < g->n_special; k++)
        if (g->special[k] == id) return 256 + k;
    if (g->n_special == OG_GRAMMAR_MAX_SPECIAL)
        return bfail(b, OG_ERR_RANGE, "over %d control tokens in one tool-call layout", OG_GRAMMAR_MAX_SPECIAL), -1;
    g->special[g->n_special] = id;
    return 256 + g->n_special++;
}

/* A rule matching pieces[0..n) one after the other (n == 0: the empty string). */
static int pieces_rule(builder *b, const og_gpiece *pc, int n) {
    int r = new_rule(b);
    seq q = {0};
    for (int i = 0; i < n && !b->st; i++) {
        if (pc[i].token >= 0) {
            int sym = special_sym(b, pc[i].token);
            if (sym >= 0) sq_range(b, &q, (unsigned)sym, (unsigned)sym);
        } else if (pc[i].text && pc[i].text[0]) {
            int lr = new_rule(b);
            add_lit(b, lr, pc[i].text);
            sq_ref(&q, lr);
        }
    }
    add_alt(b, r, &q);
    return b->st ? -1 : r;
}

/* DSML arguments: one parameter per declared property, in the schema's order
 * (required ones always, the others possibly skipped), each
 * open KEY mid JSON-VALUE close with the value held to the property's schema. */
static int dsml_params(builder *b, const og_tool_layout *lay, const json_t *params, const char *path) {
    const json_t *props = json_object_get(params, "properties"), *req = json_object_get(params, "required");
    if (props && !json_is_object(props))
        return bfail(b, OG_ERR_INVALID_ARG, "%s: 'properties' must be an object", path), -1;
    size_t n = props ? json_object_size(props) : 0;
    int base = -1;
    for (size_t i = 0; i <= n && !b->st; i++) {
        int r = new_rule(b);
        if (!i) base = r;
    }
    if (b->st) return -1;
    add_lit(b, base + (int)n, "");
    size_t i = 0;
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)props, k, v) {
        if (b->st) break;
        bool required = is_required(req, k);
        if (strchr(k, '"') || strchr(k, '<') || strchr(k, '>'))
            return bfail(b, OG_ERR_UNSUPPORTED, "%s: the property name '%.60s' cannot be written as a DSML parameter",
                         path, k), -1;
        int vr = sub(b, v, path, "properties", k, 0);
        int head = new_rule(b), tail = new_rule(b);
        char *h = malloc(strlen(lay->param_open) + strlen(k) + strlen(lay->param_mid) + 1);
        if (!h) return B_OOM(b), -1;
        strcpy(h, lay->param_open);
        strcat(h, k);
        strcat(h, lay->param_mid);
        add_lit(b, head, h);
        free(h);
        add_lit(b, tail, lay->param_close);
        seq q = {0};
        sq_ref(&q, head);
        sq_ref(&q, vr);
        sq_ref(&q, tail);
        sq_ref(&q, base + (int)i + 1);
        add_alt(b, base + (int)i, &q);
        if (!required) {
            q = (seq){0};
            sq_ref(&q, base + (int)i + 1);
            add_alt(b, base + (int)i, &q);
        }
        i++;
    }
    return b->st ? -1 : base;
}

og_status og_grammar_tool_calls(const og_tool_layout *lay, const char *const *names, const json_t *const *params,
                                int n_tools, int max_calls, og_grammar **out, char *err, size_t errlen) {
    *out = NULL;
    if (!lay || !names || n_tools <= 0 || max_calls < 0)
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "a tool-call grammar needs a layout and at least one tool");
    builder b = {.err = err, .errlen = errlen};
    if (!build_begin(&b)) return OG_ERR_NOMEM;
    int call = new_rule(&b);
    int r_call = pieces_rule(&b, lay->call, lay->n_call), r_name_end = pieces_rule(&b, lay->name_end, lay->n_name_end);
    int r_call_end = pieces_rule(&b, lay->call_end, lay->n_call_end);
    for (int t = 0; t < n_tools && !b.st; t++) {
        if (!names[t] || !names[t][0]) {
            bfail(&b, OG_ERR_INVALID_ARG, "tool %d has no name", t);
            break;
        }
        char path[96];
        snprintf(path, sizeof path, "tool '%.60s' parameters #", names[t]);
        const json_t *ps = params ? params[t] : NULL;
        json_t *any = ps ? NULL : json_object();
        b.root_schema = ps ? ps : any;
        int args = lay->param_open ? dsml_params(&b, lay, b.root_schema, path)
                   : ps ? compile(&b, ps, path, 0) : b.r_obj;
        json_decref(any);
        int nr = new_rule(&b);
        add_lit(&b, nr, names[t]);
        seq q = {0};
        sq_ref(&q, r_call);
        sq_ref(&q, nr);
        sq_ref(&q, r_name_end);
        sq_ref(&q, args);
        sq_ref(&q, r_call_end);
        add_alt(&b, call, &q);
    }
    int r_open = pieces_rule(&b, lay->open, lay->n_open), r_close = pieces_rule(&b, lay->close, lay->n_close);
    int r_between = pieces_rule(&b, lay->between, lay->n_between);
    if (!b.st) {
        /* ROOT ::= open call (between call){0, max-1} close */
        seq item = {0};
        sq_ref(&item, r_between);
        sq_ref(&item, call);
        int rest = rep_chain(&b, &item, 0, max_calls ? max_calls - 1 : -1, r_close);
        b.g->root = new_rule(&b);
        seq q = {0};
        sq_ref(&q, r_open);
        sq_ref(&q, call);
        sq_ref(&q, rest);
        add_alt(&b, b.g->root, &q);
    }
    return build_end(&b, out);
}

/* ---- vocabulary trie ------------------------------------------------------- */

struct og_vocab {
    int32_t n_vocab;
    int32_t n_node;       /* trie nodes in preorder */
    uint8_t *byte;        /* [n_node] the byte into this node */
    uint16_t *depth;      /* [n_node] 1 for the root's children */
    int32_t *end;         /* [n_node] first node after this one's subtree */
    int32_t *tok_first;   /* [n_node] into tok_ids */
    int32_t *tok_n;       /* [n_node] tokens whose bytes end here */
    int32_t *tok_end;     /* [n_node] one past the subtree's last token in tok_ids (tok_first: its first) */
    uint16_t *plain_h;    /* [n_node] when this node and its subtree hold only plain string bytes
                             (printable ASCII but '"' and '\\'): the subtree's deepest depth; else 0 */
    int32_t *tok_ids;     /* token ids in byte order */
    int max_depth;
    int32_t *eog;         /* end-of-generation ids */
    int n_eog;
    uint32_t *off;        /* [n_vocab + 1] each token's bytes in blob */
    uint8_t *blob;
};

typedef struct sort_ctx {
    const uint32_t *off;
    const uint8_t *blob;
} sort_ctx;

static int cmp_bytes(const void *a, const void *b, void *c) {
    const sort_ctx *x = c;
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    uint32_t li = x->off[i + 1] - x->off[i], lj = x->off[j + 1] - x->off[j];
    int r = memcmp(x->blob + x->off[i], x->blob + x->off[j], li < lj ? li : lj);
    if (r) return r;
    if (li != lj) return li < lj ? -1 : 1;
    return i < j ? -1 : i > j;
}

void og_vocab_free(og_vocab *v) {
    if (!v) return;
    free(v->byte);
    free(v->depth);
    free(v->end);
    free(v->tok_first);
    free(v->tok_n);
    free(v->tok_end);
    free(v->plain_h);
    free(v->tok_ids);
    free(v->eog);
    free(v->off);
    free(v->blob);
    free(v);
}

int32_t og_vocab_n(const og_vocab *v) { return v->n_vocab; }

og_status og_vocab_create(const og_tokenizer *tok, og_vocab **out, char *err, size_t errlen) {
    *out = NULL;
    og_vocab *v = calloc(1, sizeof *v);
    int32_t n = og_tokenizer_n_vocab(tok);
    if (!v) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    v->n_vocab = n;
    v->off = malloc(((size_t)n + 1) * sizeof *v->off);
    v->eog = malloc(((size_t)n + 1) * sizeof *v->eog);
    v->tok_ids = malloc(((size_t)n + 1) * sizeof *v->tok_ids);
    size_t cap = 1 << 20, len = 0;
    v->blob = malloc(cap);
    if (!v->off || !v->eog || !v->tok_ids || !v->blob) goto oom;
    int32_t n_sorted = 0;
    for (int32_t id = 0; id < n; id++) {
        v->off[id] = (uint32_t)len;
        if (og_tokenizer_is_eog(tok, id)) v->eog[v->n_eog++] = id;
        char piece[256];
        int k = og_token_to_bytes(tok, id, false, piece, sizeof piece);
        if (k <= 0 || k > 65535) continue;
        if (len + (size_t)k > cap) {
            while (len + (size_t)k > cap) cap *= 2;
            uint8_t *nb = realloc(v->blob, cap);
            if (!nb) goto oom;
            v->blob = nb;
        }
        if (k <= (int)sizeof piece) memcpy(v->blob + len, piece, (size_t)k);
        else og_token_to_bytes(tok, id, false, (char *)v->blob + len, (size_t)k);
        len += (size_t)k;
        v->tok_ids[n_sorted++] = id;
    }
    v->off[n] = (uint32_t)len;
    qsort_r(v->tok_ids, (size_t)n_sorted, sizeof *v->tok_ids, cmp_bytes, &(sort_ctx){v->off, v->blob});
    /* nodes: at most the bytes of all tokens */
    size_t maxn = len + 1;
    v->byte = malloc(maxn);
    v->depth = malloc(maxn * sizeof *v->depth);
    v->end = malloc(maxn * sizeof *v->end);
    v->tok_first = malloc(maxn * sizeof *v->tok_first);
    v->tok_n = malloc(maxn * sizeof *v->tok_n);
    v->tok_end = malloc(maxn * sizeof *v->tok_end);
    v->plain_h = malloc(maxn * sizeof *v->plain_h);
    int32_t *path = malloc(65537 * sizeof *path); /* node index at each depth of the current string */
    if (!v->byte || !v->depth || !v->end || !v->tok_first || !v->tok_n || !v->tok_end || !v->plain_h || !path) {
        free(path);
        goto oom;
    }
    int32_t nn = 0;
    const uint8_t *prev = NULL;
    uint32_t prev_len = 0;
    for (int32_t k = 0; k < n_sorted; k++) {
        int32_t id = v->tok_ids[k];
        const uint8_t *s = v->blob + v->off[id];
        uint32_t l = v->off[id + 1] - v->off[id], lcp = 0;
        while (prev && lcp < l && lcp < prev_len && s[lcp] == prev[lcp]) lcp++;
        for (uint32_t d = lcp; d < l; d++) {
            v->byte[nn] = s[d];
            v->depth[nn] = (uint16_t)(d + 1);
            v->tok_first[nn] = k;
            v->tok_n[nn] = 0;
            path[d] = nn++;
        }
        int32_t at = path[l - 1];
        if (!v->tok_n[at]) v->tok_first[at] = k;
        v->tok_n[at]++;
        if ((int)l > v->max_depth) v->max_depth = (int)l;
        prev = s;
        prev_len = l;
    }
    /* subtree ends: the next node at the same or a smaller depth */
    int sp = 0;
    for (int32_t i = 0; i < nn; i++) {
        while (sp && v->depth[path[sp - 1]] >= v->depth[i]) v->end[path[--sp]] = i;
        path[sp++] = i;
    }
    while (sp) v->end[path[--sp]] = nn;
    /* subtree summaries, children before parents (reverse preorder) */
    for (int32_t i = nn - 1; i >= 0; i--) {
        uint8_t c = v->byte[i];
        bool plain = c >= 0x20 && c <= 0x7e && c != '"' && c != '\\';
        int32_t te = v->tok_n[i] ? v->tok_first[i] + v->tok_n[i] : v->tok_first[i];
        uint16_t h = plain ? v->depth[i] : 0;
        for (int32_t j = i + 1; j < v->end[i]; j = v->end[j]) {
            if (v->tok_end[j] > te) te = v->tok_end[j];
            if (!v->plain_h[j]) h = 0;
            else if (h && v->plain_h[j] > h) h = v->plain_h[j];
        }
        v->tok_end[i] = te;
        v->plain_h[i] = h;
    }
    free(path);
    v->n_node = nn;
    *out = v;
    return OG_OK;
oom:
    og_vocab_free(v);
    return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory for the vocabulary trie");
}

/* ---- matcher --------------------------------------------------------------- */

#define NODE_ROOT 0          /* the empty stack; as a member of a state: accepting */
#define MAX_STACKS 4096      /* stacks kept per state (more: the rest dropped; output stays valid) */
#define MAX_WORK (1 << 16)   /* expansion steps per transition */
#define COMPACT_NODES (1 << 19)
#define COMPACT_STATES 8192
#define COMPACT_MASKS 256    /* cached masks (16 KiB each for 129,280 tokens) per matcher */

typedef struct gnode {
    int32_t pos, parent; /* continue at element pos, then return to parent */
} gnode;

typedef struct gstate {
    int32_t off, n;      /* node ids in m->pool[off..off+n), sorted */
    uint32_t hash;
    int32_t *trans;      /* [N_SYM] next state, -1 dead, -2 not computed; NULL until needed */
    uint64_t *mask;      /* cached mask or NULL */
    int32_t plain_cap;   /* every run of up to this many plain string bytes keeps it alive (a lower
                            bound; INT32_MAX: any run); -1 not computed */
} gstate;

struct og_gmatch {
    og_grammar *g;
    gnode *nodes;
    int32_t n_nodes, cap_nodes;
    int32_t *nh;         /* node hash: open addressing, -1 empty */
    uint32_t nh_cap;
    gstate *st;
    int32_t n_st, cap_st;
    int32_t *sh;         /* state hash */
    uint32_t sh_cap;
    int32_t *pool;
    int32_t n_pool, cap_pool;
    int32_t cur;         /* current state; -1: ended (an end-of-generation token was accepted) */
    int32_t *out, *work; /* scratch */
    int n_words;
    int n_masks;         /* masks cached in st[] */
    int32_t *walk;       /* [max_depth + 1] states along the trie walk */
    uint64_t *none;      /* the empty mask (after the end) */
    int walk_cap;
};

static uint32_t mix(uint32_t h, uint32_t x) {
    h ^= x + 0x9e3779b9u + (h << 6) + (h >> 2);
    return h;
}

static uint32_t node_hash(const og_gmatch *m, int32_t i) {
    return mix(mix(0, (uint32_t)m->nodes[i].pos), (uint32_t)m->nodes[i].parent);
}
static uint32_t st_hash(const og_gmatch *m, int32_t i) { return m->st[i].hash; }

/* Rebuilds an open-addressing table of ids 0..n-1 (-1: empty) with cap slots. */
static bool rehash(const og_gmatch *m, int32_t **tab, uint32_t *tab_cap, uint32_t cap, int32_t n,
                   uint32_t (*hf)(const og_gmatch *, int32_t)) {
    int32_t *t = malloc((size_t)cap * sizeof *t);
    if (!t) return false;
    memset(t, 0xff, (size_t)cap * sizeof *t);
    for (int32_t i = 0; i < n; i++) {
        uint32_t h = hf(m, i) & (cap - 1);
        while (t[h] >= 0) h = (h + 1) & (cap - 1);
        t[h] = i;
    }
    free(*tab);
    *tab = t;
    *tab_cap = cap;
    return true;
}

static int32_t node_get(og_gmatch *m, int32_t pos, int32_t parent) {
    uint32_t h = mix(mix(0, (uint32_t)pos), (uint32_t)parent) & (m->nh_cap - 1);
    for (; m->nh[h] >= 0; h = (h + 1) & (m->nh_cap - 1))
        if (m->nodes[m->nh[h]].pos == pos && m->nodes[m->nh[h]].parent == parent) return m->nh[h];
    if ((uint32_t)(m->n_nodes + 1) * 2 > m->nh_cap) {
        if (!rehash(m, &m->nh, &m->nh_cap, m->nh_cap * 2, m->n_nodes, node_hash)) return -1;
        return node_get(m, pos, parent);
    }
    if (!grow((void **)&m->nodes, &m->cap_nodes, m->n_nodes + 1, sizeof *m->nodes)) return -1;
    m->nodes[m->n_nodes] = (gnode){pos, parent};
    m->nh[h] = m->n_nodes;
    return m->n_nodes++;
}

static uint32_t state_hash(const int32_t *v, int n) {
    uint32_t h = (uint32_t)n;
    for (int i = 0; i < n; i++) h = mix(h, (uint32_t)v[i]);
    return h;
}

/* The state of the sorted node set v[0..n): found or added. -1: out of memory. */
static int32_t state_get(og_gmatch *m, const int32_t *v, int n) {
    uint32_t hv = state_hash(v, n);
    if ((uint32_t)(m->n_st + 1) * 2 > m->sh_cap && !rehash(m, &m->sh, &m->sh_cap, m->sh_cap * 2, m->n_st, st_hash))
        return -1;
    uint32_t h = hv & (m->sh_cap - 1);
    for (; m->sh[h] >= 0; h = (h + 1) & (m->sh_cap - 1)) {
        const gstate *s = &m->st[m->sh[h]];
        if (s->hash == hv && s->n == n && !memcmp(m->pool + s->off, v, (size_t)n * sizeof *v)) return m->sh[h];
    }
    if (!grow((void **)&m->st, &m->cap_st, m->n_st + 1, sizeof *m->st) ||
        !grow((void **)&m->pool, &m->cap_pool, m->n_pool + n, sizeof *m->pool))
        return -1;
    memcpy(m->pool + m->n_pool, v, (size_t)n * sizeof *v);
    m->st[m->n_st] = (gstate){m->n_pool, n, hv, NULL, NULL, -1};
    m->n_pool += n;
    m->sh[h] = m->n_st;
    return m->n_st++;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Expands the work items m->work[0..2*nw) (pos, parent pairs) into stack tops
 * (nodes at a byte set, or NODE_ROOT when a stack is complete), then makes the
 * state. Returns the state, -1 when no stack survives, -3 out of memory. */
static int32_t expand(og_gmatch *m, int nw) {
    const og_grammar *g = m->g;
    int n_out = 0, steps = 0;
    while (nw > 0 && steps++ < MAX_WORK) {
        nw--;
        int32_t pos = m->work[2 * nw], par = m->work[2 * nw + 1];
        const gel *e = &g->el[pos];
        if (e->type == E_CHARS) {
            int32_t id = node_get(m, pos, par);
            if (id < 0) return -3;
            if (n_out < MAX_STACKS) m->out[n_out++] = id;
        } else if (e->type == E_END) {
            if (par == NODE_ROOT) {
                if (n_out < MAX_STACKS) m->out[n_out++] = NODE_ROOT;
            } else {
                m->work[2 * nw] = m->nodes[par].pos, m->work[2 * nw + 1] = m->nodes[par].parent;
                nw++;
            }
        } else {
            /* the continuation after the reference (none to keep when the alternative ends there) */
            int32_t np = e[1].type == E_END ? par : node_get(m, pos + 1, par);
            if (np < 0) return -3;
            const grule *r = &g->rules[e->arg];
            for (int a = 0; a < r->n_alt && nw < MAX_WORK; a++) {
                m->work[2 * nw] = r->alts[a], m->work[2 * nw + 1] = np;
                nw++;
            }
        }
    }
    if (!n_out) return -1;
    if (n_out > 16) {
        qsort(m->out, (size_t)n_out, sizeof *m->out, cmp_i32);
    } else { /* the usual handful of stacks: insertion sort beats qsort's call overhead */
        for (int i = 1; i < n_out; i++) {
            int32_t x = m->out[i];
            int j = i;
            for (; j > 0 && m->out[j - 1] > x; j--) m->out[j] = m->out[j - 1];
            m->out[j] = x;
        }
    }
    int k = 0;
    for (int i = 0; i < n_out; i++)
        if (!k || m->out[k - 1] != m->out[i]) m->out[k++] = m->out[i];
    int32_t s = state_get(m, m->out, k);
    return s < 0 ? -3 : s;
}

/* The state after byte c from state s: -1 dead, -3 out of memory. */
static int32_t step(og_gmatch *m, int32_t s, unsigned c) {
    if (!m->st[s].trans) {
        int32_t *t = malloc(N_SYM * sizeof *t);
        if (!t) return -3;
        for (int i = 0; i < N_SYM; i++) t[i] = -2;
        m->st[s].trans = t;
    }
    int32_t r = m->st[s].trans[c];
    if (r != -2) return r;
    int nw = 0;
    const gstate *gs = &m->st[s];
    for (int i = 0; i < gs->n; i++) {
        int32_t id = m->pool[gs->off + i];
        if (id == NODE_ROOT) continue;
        const gnode *nd = &m->nodes[id];
        if (!bs_has(&m->g->sets[m->g->el[nd->pos].arg], c)) continue;
        m->work[2 * nw] = nd->pos + 1, m->work[2 * nw + 1] = nd->parent;
        nw++;
    }
    r = nw ? expand(m, nw) : -1;
    if (r == -3) return -3;
    m->st[s].trans[c] = r; /* m->st may have moved in expand */
    return r;
}

static void tables_free(og_gmatch *m) {
    for (int32_t i = 0; i < m->n_st; i++) {
        free(m->st[i].trans);
        free(m->st[i].mask);
    }
    free(m->st);
    free(m->sh);
    free(m->pool);
    free(m->nodes);
    free(m->nh);
    m->st = NULL, m->sh = NULL, m->pool = NULL, m->nodes = NULL, m->nh = NULL;
    m->n_st = m->cap_st = m->n_pool = m->cap_pool = m->n_nodes = m->cap_nodes = 0;
}

static bool tables_init(og_gmatch *m) {
    m->nh_cap = 1024;
    m->sh_cap = 256;
    m->nh = malloc(m->nh_cap * sizeof *m->nh);
    m->sh = malloc(m->sh_cap * sizeof *m->sh);
    if (!m->nh || !m->sh) return false;
    memset(m->nh, 0xff, m->nh_cap * sizeof *m->nh);
    memset(m->sh, 0xff, m->sh_cap * sizeof *m->sh);
    return node_get(m, -1, -1) == NODE_ROOT;
}

/* The interned tables only grow: past a size, start them over from the current
 * state (its stacks re-interned), dropping every cached transition and mask. */
static og_status compact(og_gmatch *m) {
    if (m->n_nodes < COMPACT_NODES && m->n_st < COMPACT_STATES && m->n_masks < COMPACT_MASKS) return OG_OK;
    const gstate *cs = &m->st[m->cur];
    int n = cs->n;
    size_t total = 0;
    for (int i = 0; i < n; i++)
        for (int32_t x = m->pool[cs->off + i]; x != NODE_ROOT; x = m->nodes[x].parent) total++;
    gnode *chain = malloc((total + 1) * sizeof *chain);
    int32_t *len = malloc(((size_t)n + 1) * sizeof *len);
    if (!chain || !len) {
        free(chain);
        free(len);
        return OG_ERR_NOMEM;
    }
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        len[i] = 0;
        for (int32_t x = m->pool[cs->off + i]; x != NODE_ROOT; x = m->nodes[x].parent) chain[k++] = m->nodes[x], len[i]++;
    }
    tables_free(m);
    m->n_masks = 0;
    og_status st = tables_init(m) ? OG_OK : OG_ERR_NOMEM;
    k = 0;
    int kept = 0;
    for (int i = 0; i < n && !st; i++) {
        int32_t par = NODE_ROOT;
        for (int j = len[i] - 1; j >= 0 && !st; j--)
            if ((par = node_get(m, chain[k + (size_t)j].pos, par)) < 0) st = OG_ERR_NOMEM;
        k += (size_t)len[i];
        m->out[kept++] = par;
    }
    free(chain);
    free(len);
    if (st) return st;
    qsort(m->out, (size_t)kept, sizeof *m->out, cmp_i32);
    m->cur = state_get(m, m->out, kept);
    return m->cur < 0 ? OG_ERR_NOMEM : OG_OK;
}

void og_gmatch_free(og_gmatch *m) {
    if (!m) return;
    tables_free(m);
    free(m->out);
    free(m->work);
    free(m->walk);
    free(m->none);
    og_grammar_unref(m->g);
    free(m);
}

og_status og_gmatch_create(og_grammar *g, og_gmatch **out, char *err, size_t errlen) {
    *out = NULL;
    og_gmatch *m = calloc(1, sizeof *m);
    if (!m) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    m->g = og_grammar_ref(g);
    m->out = malloc(MAX_STACKS * sizeof *m->out);
    m->work = malloc(2 * (MAX_WORK + 1) * sizeof *m->work);
    if (!m->out || !m->work || !tables_init(m)) goto oom;
    const grule *root = &g->rules[g->root];
    int nw = 0;
    for (int a = 0; a < root->n_alt; a++) m->work[2 * nw] = root->alts[a], m->work[2 * nw + 1] = NODE_ROOT, nw++;
    m->cur = expand(m, nw);
    if (m->cur < 0) goto oom; /* a finished grammar always has a live start */
    *out = m;
    return OG_OK;
oom:
    og_gmatch_free(m);
    return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory for the grammar matcher");
}

bool og_gmatch_feed(og_gmatch *m, const void *bytes, size_t n) {
    if (m->cur < 0) return n == 0;
    int32_t s = m->cur;
    for (size_t i = 0; i < n; i++) {
        s = step(m, s, ((const uint8_t *)bytes)[i]);
        if (s < 0) return false;
    }
    m->cur = s;
    compact(m);
    return true;
}

bool og_gmatch_accepting(const og_gmatch *m) {
    if (m->cur < 0) return true;
    const gstate *s = &m->st[m->cur];
    return s->n && m->pool[s->off] == NODE_ROOT; /* sorted: NODE_ROOT (0) comes first */
}

bool og_gmatch_finished(const og_gmatch *m) {
    return m->cur < 0 || (og_gmatch_accepting(m) && m->st[m->cur].n == 1);
}

static bool plain_byte(unsigned c) { return c >= 0x20 && c <= 0x7e && c != '"' && c != '\\'; }

/* plain_cap of state s (see gstate), computed along the chain where every plain
 * byte leads to one same next state (inside a string, bounded or not); the
 * states met get theirs too. -3: out of memory. */
static int32_t plain_cap(og_gmatch *m, int32_t s) {
    if (m->st[s].plain_cap >= 0) return m->st[s].plain_cap;
    int32_t chain[256], n = 0, cap = 0, at = s;
    for (;;) {
        int32_t next = -2;
        for (unsigned c = 0x20; c <= 0x7e; c++) {
            if (!plain_byte(c)) continue;
            int32_t t = step(m, at, c);
            if (t == -3) return -3;
            if (t < 0 || (next != -2 && t != next)) {
                next = -1;
                break;
            }
            next = t;
        }
        chain[n++] = at;
        if (next < 0) break;                 /* some run of one more byte dies (or runs diverge) here */
        if (next == at) {                    /* a loop: any run */
            cap = INT32_MAX;
            break;
        }
        if (m->st[next].plain_cap >= 0) {    /* known from an earlier chain */
            int32_t c1 = m->st[next].plain_cap;
            cap = c1 == INT32_MAX ? INT32_MAX : c1 + 1;
            break;
        }
        if (n == (int32_t)(sizeof chain / sizeof chain[0])) break;
        at = next;
    }
    /* chain[j]: cap - j ... with cap counted from the end of the chain */
    if (cap != INT32_MAX) cap += n - 1;
    for (int32_t j = 0; j < n; j++) m->st[chain[j]].plain_cap = cap == INT32_MAX ? INT32_MAX : cap - j;
    return m->st[s].plain_cap;
}

og_status og_gmatch_mask(og_gmatch *m, const og_vocab *v, const uint64_t **bits) {
    int nw = (v->n_vocab + 63) / 64;
    if (m->n_words && m->n_words != nw) return OG_ERR_INVALID_ARG;
    m->n_words = nw;
    if (m->cur < 0) { /* ended: nothing more */
        if (!m->none) m->none = calloc((size_t)nw, sizeof *m->none);
        if (!m->none) return OG_ERR_NOMEM;
        *bits = m->none;
        return OG_OK;
    }
    if (m->st[m->cur].mask) {
        *bits = m->st[m->cur].mask;
        return OG_OK;
    }
    uint64_t *mask = calloc((size_t)nw, sizeof *mask);
    if (!mask) return OG_ERR_NOMEM;
    if (m->walk_cap < v->max_depth + 1) {
        free(m->walk);
        m->walk = malloc(((size_t)v->max_depth + 1) * sizeof *m->walk);
        if (!m->walk) {
            m->walk_cap = 0;
            free(mask);
            return OG_ERR_NOMEM;
        }
        m->walk_cap = v->max_depth + 1;
    }
    int32_t *walk = m->walk;
    walk[0] = m->cur;
    for (int32_t i = 0; i < v->n_node;) {
        int32_t from = walk[v->depth[i] - 1];
        if (v->plain_h[i]) { /* plain bytes only below: all of the subtree is allowed when the state takes any such run */
            int32_t cap = m->st[from].plain_cap >= 0 ? m->st[from].plain_cap : plain_cap(m, from);
            if (cap == -3) {
                free(mask);
                return OG_ERR_NOMEM;
            }
            if (v->plain_h[i] - (v->depth[i] - 1) <= cap) {
                for (int32_t k = v->tok_first[i]; k < v->tok_end[i]; k++) {
                    int32_t id = v->tok_ids[k];
                    mask[id >> 6] |= 1ull << (id & 63);
                }
                i = v->end[i];
                continue;
            }
        }
        const int32_t *tr = m->st[from].trans; /* the cached transition, else computed */
        int32_t t = tr && tr[v->byte[i]] != -2 ? tr[v->byte[i]] : step(m, from, v->byte[i]);
        if (t == -3) {
            free(mask);
            return OG_ERR_NOMEM;
        }
        if (t < 0) { /* no token under this node can be written here */
            i = v->end[i];
            continue;
        }
        walk[v->depth[i]] = t;
        for (int32_t k = 0; k < v->tok_n[i]; k++) {
            int32_t id = v->tok_ids[v->tok_first[i] + k];
            mask[id >> 6] |= 1ull << (id & 63);
        }
        i++;
    }
    for (int k = 0; k < m->g->n_special; k++) { /* control tokens: one symbol each */
        int32_t t = step(m, m->cur, 256u + (unsigned)k), id = m->g->special[k];
        if (t == -3) {
            free(mask);
            return OG_ERR_NOMEM;
        }
        if (t >= 0 && id < v->n_vocab) mask[id >> 6] |= 1ull << (id & 63);
    }
    if (og_gmatch_accepting(m))
        for (int k = 0; k < v->n_eog; k++) mask[v->eog[k] >> 6] |= 1ull << (v->eog[k] & 63);
    m->st[m->cur].mask = mask;
    m->n_masks++;
    *bits = mask;
    return OG_OK;
}

og_status og_gmatch_apply(og_gmatch *m, const og_vocab *v, float *logits, int32_t n_logits) {
    const uint64_t *bits;
    og_status st = og_gmatch_mask(m, v, &bits);
    if (st) return st;
    for (int32_t i = v->n_vocab; i < n_logits; i++) logits[i] = -INFINITY; /* ids the tokenizer lacks */
    int32_t n = n_logits < v->n_vocab ? n_logits : v->n_vocab;
    for (int32_t w = 0; w * 64 < n; w++) {
        uint64_t x = bits[w];
        if (x == ~0ull) continue;
        int32_t lim = n - w * 64 < 64 ? n - w * 64 : 64;
        if (x == 0) { /* the common case outside strings: a whole word refused */
            for (int32_t j = 0; j < lim; j++) logits[w * 64 + j] = -INFINITY;
            continue;
        }
        for (int32_t j = 0; j < lim; j++)
            if (!((x >> j) & 1)) logits[w * 64 + j] = -INFINITY;
    }
    return OG_OK;
}

og_status og_gmatch_accept(og_gmatch *m, const og_vocab *v, int32_t id) {
    if (id < 0 || id >= v->n_vocab) return OG_ERR_INVALID_ARG;
    for (int k = 0; k < m->g->n_special; k++)
        if (m->g->special[k] == id) {
            if (m->cur < 0) return OG_ERR_INVALID_ARG;
            int32_t s = step(m, m->cur, 256u + (unsigned)k);
            if (s == -3) return OG_ERR_NOMEM;
            if (s < 0) return OG_ERR_INVALID_ARG;
            m->cur = s;
            return compact(m);
        }
    for (int k = 0; k < v->n_eog; k++)
        if (v->eog[k] == id) {
            if (!og_gmatch_accepting(m)) return OG_ERR_INVALID_ARG;
            m->cur = -1;
            return OG_OK;
        }
    uint32_t len = v->off[id + 1] - v->off[id];
    if (!len || m->cur < 0) return OG_ERR_INVALID_ARG;
    int32_t s = m->cur;
    for (uint32_t i = 0; i < len; i++) {
        s = step(m, s, v->blob[v->off[id] + i]);
        if (s == -3) return OG_ERR_NOMEM;
        if (s < 0) return OG_ERR_INVALID_ARG;
    }
    m->cur = s;
    return compact(m);
}
