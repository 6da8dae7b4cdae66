/* Byte-level BPE tokenizer (shared/spec/tokenizer.md). Pipeline per text:
 * special-token split (§2.1) -> regex pre-tokenizer via PCRE2 (§4) -> byte-level
 * alphabet (§3) -> BPE by merge rank with a heap (§5) -> ids. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "og_tokenizer.h"

#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

/* ---- string -> int map (open addressing over an arena of keys) ------------ */

typedef struct strmap {
    uint32_t *slot_key;  /* key index + 1, 0 = empty */
    int32_t *slot_val;
    size_t cap;          /* power of two */
    const char **key;    /* key i text (not NUL-terminated) */
    uint32_t *key_len;
    uint64_t hkey[2];
} strmap;

static og_status strmap_init(strmap *m, size_t n) {
    memset(m, 0, sizeof *m);
    m->cap = 16;
    while (m->cap < n * 2) m->cap <<= 1;
    m->slot_key = calloc(m->cap, sizeof *m->slot_key);
    m->slot_val = calloc(m->cap, sizeof *m->slot_val);
    m->key = calloc(n ? n : 1, sizeof *m->key);
    m->key_len = calloc(n ? n : 1, sizeof *m->key_len);
    og_random_key(m->hkey);
    return m->slot_key && m->slot_val && m->key && m->key_len ? OG_OK : OG_ERR_NOMEM;
}
static void strmap_free(strmap *m) {
    free(m->slot_key);
    free(m->slot_val);
    free(m->key);
    free(m->key_len);
}
static size_t strmap_find_slot(const strmap *m, const char *s, size_t n) {
    size_t mask = m->cap - 1, h = (size_t)og_siphash13(m->hkey, s, n) & mask;
    while (m->slot_key[h]) {
        uint32_t k = m->slot_key[h] - 1;
        if (m->key_len[k] == n && memcmp(m->key[k], s, n) == 0) break;
        h = (h + 1) & mask;
    }
    return h;
}
/* Inserts key #idx (text s, n bytes) -> val unless present (first one wins). */
static void strmap_put(strmap *m, uint32_t idx, const char *s, size_t n, int32_t val) {
    size_t h = strmap_find_slot(m, s, n);
    if (m->slot_key[h]) return;
    m->key[idx] = s;
    m->key_len[idx] = (uint32_t)n;
    m->slot_key[h] = idx + 1;
    m->slot_val[h] = val;
}
static int32_t strmap_get(const strmap *m, const char *s, size_t n) {
    size_t h = strmap_find_slot(m, s, n);
    return m->slot_key[h] ? m->slot_val[h] : -1;
}

/* ---- the tokenizer ----------------------------------------------------------- */

typedef enum { PRE_DEEPSEEK_V3, PRE_DEEPSEEK_LLM } pre_kind;

struct og_tokenizer {
    int32_t n_vocab;
    char *text;            /* all token texts back to back */
    uint32_t *tok_off, *tok_len;
    uint8_t *type;         /* OG_TOK_* per id */
    strmap vocab;          /* token text -> id */
    strmap merges;         /* "left right" -> rank */
    char *merge_text;
    int32_t bos, eos;
    bool add_bos;
    pre_kind pre;
    pcre2_code *re[6];
    int n_re;
    int32_t *specials;     /* CONTROL / USER_DEFINED / UNKNOWN ids, longest text first */
    int n_specials;
    uint16_t byte_cp[256]; /* byte -> code point of the byte-level alphabet (§3) */
    int16_t cp_byte[0x144]; /* inverse, -1 where none */
};

int32_t og_tokenizer_n_vocab(const og_tokenizer *t) { return t->n_vocab; }
int32_t og_tokenizer_bos(const og_tokenizer *t) { return t->bos; }
int32_t og_tokenizer_eos(const og_tokenizer *t) { return t->eos; }
bool og_tokenizer_add_bos(const og_tokenizer *t) { return t->add_bos; }
bool og_tokenizer_is_eog(const og_tokenizer *t, int32_t id) { return id >= 0 && id == t->eos; }
int og_tokenizer_type(const og_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab ? t->type[id] : 0;
}
int32_t og_tokenizer_find(const og_tokenizer *t, const char *s, size_t n) { return strmap_get(&t->vocab, s, n); }

void og_ids_free(og_ids *ids) {
    free(ids->v);
    memset(ids, 0, sizeof *ids);
}
static og_status ids_push(og_ids *ids, int32_t id) {
    if (ids->n == ids->cap) {
        size_t cap = ids->cap ? ids->cap * 2 : 64;
        int32_t *v = realloc(ids->v, cap * sizeof *v);
        if (!v) return OG_ERR_NOMEM;
        ids->v = v;
        ids->cap = cap;
    }
    ids->v[ids->n++] = id;
    return OG_OK;
}

/* GPT-2 byte map: printable bytes keep their value, the other 68 take U+0100+ in
 * byte order (§3). */
static void build_byte_map(og_tokenizer *t) {
    int next = 0;
    for (int i = 0; i < 0x144; i++) t->cp_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        bool keep = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
        t->byte_cp[b] = (uint16_t)(keep ? b : 0x100 + next++);
        t->cp_byte[t->byte_cp[b]] = (int16_t)b;
    }
}

/* Pre-tokenizer patterns (§4), applied one after another. */
static const char *const re_v3[] = {
    "\\p{N}{1,3}",
    "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
    ("[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
     " ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"),
};
static const char *const re_llm[] = {
    "[\\r\\n]",
    ("\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}"
    "\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}"
    "\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}"
    "\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}"
    "\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}"
    "\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}"
    "\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-\\x{1FD3}"
    "\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}"
    "\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-\\x{212D}"
    "\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}\\x{214E}\\x{2183}\\x{2184}"
    "\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}"
    "\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}"
    "\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}"
    "\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}"
    "\\x{1E900}-\\x{1E943}]+"),
    "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
    "\\s+$",
    "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+",
    "\\p{N}+",
};

static void free_parts(og_tokenizer *t) {
    for (int i = 0; i < t->n_re; i++) pcre2_code_free(t->re[i]);
    strmap_free(&t->vocab);
    strmap_free(&t->merges);
    free(t->text);
    free(t->tok_off);
    free(t->tok_len);
    free(t->type);
    free(t->merge_text);
    free(t->specials);
}

void og_tokenizer_free(og_tokenizer *t) {
    if (!t) return;
    free_parts(t);
    free(t);
}

static int cmp_special(const void *a, const void *b, void *ctx) {
    const og_tokenizer *t = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (t->tok_len[x] != t->tok_len[y]) return t->tok_len[x] > t->tok_len[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}

og_status og_tokenizer_load(const og_gguf *g, og_tokenizer **out, char *err, size_t errlen) {
    *out = NULL;
    char model[32] = "", pre[64] = "";
    if (og_gguf_get_cstr(g, "tokenizer.ggml.model", model, sizeof model) != OG_OK)
        return og_fail(err, errlen, OG_ERR_NOT_FOUND, "the file has no tokenizer (tokenizer.ggml.model missing)");
    if (strcmp(model, "gpt2") != 0)
        return og_fail(err, errlen, OG_ERR_UNSUPPORTED, "tokenizer model '%s' is not supported (only gpt2 byte-level BPE)",
                       model);
    og_gguf_get_cstr(g, "tokenizer.ggml.pre", pre, sizeof pre);
    pre_kind kind;
    /* joyai-llm: what V4 GGUFs declare; llama.cpp (src/llama-vocab.cpp) gives it
     * the deepseek-v3 regexes and clean_spaces = false, as deepseek4.md §5 says */
    if (!strcmp(pre, "deepseek-v3") || !strcmp(pre, "joyai-llm")) kind = PRE_DEEPSEEK_V3;
    else if (!strcmp(pre, "deepseek-llm")) kind = PRE_DEEPSEEK_LLM;
    else
        return og_fail(err, errlen, OG_ERR_UNSUPPORTED,
                       "pre-tokenizer '%s' is not supported (deepseek-v3, joyai-llm, deepseek-llm): refusing to tokenize wrongly",
                       pre[0] ? pre : "(none)");
    const og_gguf_kv *toks = og_gguf_find_kv(g, "tokenizer.ggml.tokens");
    const og_gguf_kv *types = og_gguf_find_kv(g, "tokenizer.ggml.token_type");
    const og_gguf_kv *merges = og_gguf_find_kv(g, "tokenizer.ggml.merges");
    if (!toks || toks->type != OG_GGUF_ARRAY || toks->arr_type != OG_GGUF_STRING || toks->arr_n == 0 ||
        toks->arr_n > (1u << 24))
        return og_fail(err, errlen, OG_ERR_FORMAT, "tokenizer.ggml.tokens is missing or not a string array");
    if (!merges || merges->type != OG_GGUF_ARRAY || merges->arr_type != OG_GGUF_STRING)
        return og_fail(err, errlen, OG_ERR_FORMAT, "tokenizer.ggml.merges is missing or not a string array");
    if (types && (types->type != OG_GGUF_ARRAY || types->arr_n != toks->arr_n))
        return og_fail(err, errlen, OG_ERR_FORMAT, "tokenizer.ggml.token_type has %llu entries for %llu tokens",
                       (unsigned long long)(types ? types->arr_n : 0), (unsigned long long)toks->arr_n);

    og_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    t->pre = kind;
    t->n_vocab = (int32_t)toks->arr_n;
    build_byte_map(t);
    size_t total = 0;
    for (uint64_t i = 0; i < toks->arr_n; i++) total += (size_t)toks->strs[i].n;
    t->text = malloc(total + 1);
    t->tok_off = malloc((size_t)t->n_vocab * sizeof *t->tok_off);
    t->tok_len = malloc((size_t)t->n_vocab * sizeof *t->tok_len);
    t->type = malloc((size_t)t->n_vocab);
    og_status st = (t->text && t->tok_off && t->tok_len && t->type) ? strmap_init(&t->vocab, (size_t)t->n_vocab) : OG_ERR_NOMEM;
    if (st) goto oom;
    size_t o = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        memcpy(t->text + o, toks->strs[i].s, (size_t)toks->strs[i].n);
        t->tok_off[i] = (uint32_t)o;
        t->tok_len[i] = (uint32_t)toks->strs[i].n;
        o += (size_t)toks->strs[i].n;
        int64_t ty = OG_TOK_NORMAL;
        if (types) og_gguf_kv_num_i64(types, (uint64_t)i, &ty);
        t->type[i] = (uint8_t)(ty >= 1 && ty <= 6 ? ty : OG_TOK_NORMAL);
    }
    for (int32_t i = 0; i < t->n_vocab; i++) strmap_put(&t->vocab, (uint32_t)i, t->text + t->tok_off[i], t->tok_len[i], i);
    /* merges: "left right" -> rank, the text kept as it is */
    total = 0;
    for (uint64_t i = 0; i < merges->arr_n; i++) total += (size_t)merges->strs[i].n;
    t->merge_text = malloc(total + 1);
    if (!t->merge_text || strmap_init(&t->merges, (size_t)merges->arr_n)) goto oom;
    o = 0;
    for (uint64_t i = 0; i < merges->arr_n; i++) {
        memcpy(t->merge_text + o, merges->strs[i].s, (size_t)merges->strs[i].n);
        strmap_put(&t->merges, (uint32_t)i, t->merge_text + o, (size_t)merges->strs[i].n, (int32_t)i);
        o += (size_t)merges->strs[i].n;
    }
    uint32_t v;
    t->bos = og_gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &v) == OG_OK && (int64_t)v < t->n_vocab ? (int32_t)v : -1;
    t->eos = og_gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &v) == OG_OK && (int64_t)v < t->n_vocab ? (int32_t)v : -1;
    bool ab = false;
    t->add_bos = og_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &ab) == OG_OK ? ab : true;
    /* special tokens, longest text first (§2.1) */
    t->specials = malloc((size_t)t->n_vocab * sizeof *t->specials);
    if (!t->specials) goto oom;
    for (int32_t i = 0; i < t->n_vocab; i++)
        if ((t->type[i] == OG_TOK_CONTROL || t->type[i] == OG_TOK_USER_DEFINED || t->type[i] == OG_TOK_UNKNOWN) &&
            t->tok_len[i] > 0)
            t->specials[t->n_specials++] = i;
    qsort_r(t->specials, (size_t)t->n_specials, sizeof *t->specials, cmp_special, t);
    /* regexes */
    const char *const *pats = kind == PRE_DEEPSEEK_V3 ? re_v3 : re_llm;
    t->n_re = kind == PRE_DEEPSEEK_V3 ? 3 : 6;
    for (int i = 0; i < t->n_re; i++) {
        int ec;
        PCRE2_SIZE eo;
        t->re[i] = pcre2_compile((PCRE2_SPTR)pats[i], PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK,
                                 &ec, &eo, NULL);
        if (!t->re[i]) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(ec, msg, sizeof msg);
            t->n_re = i;
            og_tokenizer_free(t);
            return og_fail(err, errlen, OG_ERR_STATE, "pre-tokenizer regex %d: %s at %zu", i, (char *)msg, (size_t)eo);
        }
    }
    *out = t;
    return OG_OK;
oom:
    og_tokenizer_free(t);
    return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory building the tokenizer");
}

/* ---- BPE of one pre-tokenized piece (§5) ------------------------------------- */

typedef struct sym {
    int start, len;   /* bytes of the byte-level string */
    int prev, next;   /* linked list, -1 at the ends */
} sym;

typedef struct cand {
    int32_t rank;
    int left;         /* symbol index of the pair's left side */
    int left_len, right_len; /* lengths when queued: a changed pair is stale */
} cand;

static bool cand_less(const cand *a, const cand *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}
static void heap_push(cand *h, int *n, cand c) {
    int i = (*n)++;
    h[i] = c;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!cand_less(&h[i], &h[p])) break;
        cand tmp = h[i];
        h[i] = h[p];
        h[p] = tmp;
        i = p;
    }
}
static cand heap_pop(cand *h, int *n) {
    cand top = h[0];
    h[0] = h[--(*n)];
    int i = 0;
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < *n && cand_less(&h[l], &h[m])) m = l;
        if (r < *n && cand_less(&h[r], &h[m])) m = r;
        if (m == i) break;
        cand tmp = h[i];
        h[i] = h[m];
        h[m] = tmp;
        i = m;
    }
    return top;
}

/* Rank of merging symbols a and b of string s ("A B" lookup), -1 if none. */
static int32_t pair_rank(const og_tokenizer *t, const char *s, const sym *a, const sym *b, char *scratch) {
    memcpy(scratch, s + a->start, (size_t)a->len);
    scratch[a->len] = ' ';
    memcpy(scratch + a->len + 1, s + b->start, (size_t)b->len);
    return strmap_get(&t->merges, scratch, (size_t)(a->len + 1 + b->len));
}

static int utf8_char_len(unsigned char c) {
    return c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 1;
}

/* s: the byte-level string of one piece (n bytes). */
static og_status bpe_piece(const og_tokenizer *t, const char *s, int n, og_ids *out) {
    int n_sym = 0;
    for (int i = 0; i < n; i += utf8_char_len((unsigned char)s[i])) n_sym++;
    sym *sy = malloc((size_t)n_sym * sizeof *sy);
    cand *heap = malloc((size_t)(n_sym * 2 + 1) * sizeof *heap);
    char *scratch = malloc((size_t)n * 2 + 2);
    og_status st = OG_OK;
    if (!sy || !heap || !scratch) {
        st = OG_ERR_NOMEM;
        goto out;
    }
    int k = 0;
    for (int i = 0; i < n; k++) {
        int l = utf8_char_len((unsigned char)s[i]);
        if (i + l > n) l = n - i;
        sy[k] = (sym){i, l, k - 1, k + 1};
        i += l;
    }
    n_sym = k;
    sy[n_sym - 1].next = -1;
    int hn = 0;
    for (int i = 0; i + 1 < n_sym; i++) {
        int32_t r = pair_rank(t, s, &sy[i], &sy[i + 1], scratch);
        if (r >= 0) heap_push(heap, &hn, (cand){r, i, sy[i].len, sy[i + 1].len});
    }
    while (hn > 0) {
        cand c = heap_pop(heap, &hn);
        sym *a = &sy[c.left];
        if (a->len == 0 || a->len != c.left_len || a->next < 0) continue; /* stale */
        sym *b = &sy[a->next];
        if (b->len != c.right_len) continue;
        /* merge b into a */
        a->len += b->len;
        b->len = 0;
        a->next = b->next;
        if (b->next >= 0) sy[b->next].prev = (int)(a - sy);
        if (a->prev >= 0) {
            int32_t r = pair_rank(t, s, &sy[a->prev], a, scratch);
            if (r >= 0) heap_push(heap, &hn, (cand){r, a->prev, sy[a->prev].len, a->len});
        }
        if (a->next >= 0) {
            int32_t r = pair_rank(t, s, a, &sy[a->next], scratch);
            if (r >= 0) heap_push(heap, &hn, (cand){r, (int)(a - sy), a->len, sy[a->next].len});
        }
    }
    for (int i = 0; i >= 0 && i < n_sym; i = sy[i].next) {
        if (sy[i].len == 0) continue;
        int32_t id = strmap_get(&t->vocab, s + sy[i].start, (size_t)sy[i].len);
        if (id >= 0) {
            if ((st = ids_push(out, id))) goto out;
            continue;
        }
        /* not in the vocabulary: fall back to its single characters (§5) */
        for (int j = sy[i].start; j < sy[i].start + sy[i].len;) {
            int l = utf8_char_len((unsigned char)s[j]);
            int32_t cid = strmap_get(&t->vocab, s + j, (size_t)l);
            if (cid >= 0 && (st = ids_push(out, cid))) goto out;
            j += l;
        }
    }
out:
    free(sy);
    free(heap);
    free(scratch);
    return st;
}

/* Byte-level encodes raw bytes (§3) and runs BPE on them. */
static og_status encode_piece(const og_tokenizer *t, const char *p, size_t n, og_ids *out) {
    char *bl = malloc(n * 2 + 1);
    if (!bl) return OG_ERR_NOMEM;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        uint16_t cp = t->byte_cp[(unsigned char)p[i]];
        if (cp < 0x80) bl[o++] = (char)cp;
        else {
            bl[o++] = (char)(0xc0 | (cp >> 6));
            bl[o++] = (char)(0x80 | (cp & 0x3f));
        }
    }
    og_status st = bpe_piece(t, bl, (int)o, out);
    free(bl);
    return st;
}

/* ---- pre-tokenizer (§4) ----------------------------------------------------- */

typedef struct span {
    size_t start, len;
} span;
typedef struct spans {
    span *v;
    size_t n, cap;
} spans;
static og_status spans_push(spans *s, size_t start, size_t len) {
    if (len == 0) return OG_OK;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        span *v = realloc(s->v, cap * sizeof *v);
        if (!v) return OG_ERR_NOMEM;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = (span){start, len};
    return OG_OK;
}

/* Splits every current piece by pattern re, keeping matches and the stretches
 * between them as pieces ("Isolated"). */
static og_status split_by(const pcre2_code *re, const char *text, spans *in, spans *out, pcre2_match_data *md,
                          uint32_t opts) {
    out->n = 0;
    for (size_t i = 0; i < in->n; i++) {
        size_t s = in->v[i].start, end = s + in->v[i].len, pos = s;
        while (pos < end) {
            int rc = pcre2_match(re, (PCRE2_SPTR)text, end, pos, opts, md, NULL);
            if (rc < 0) break;
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            if (ov[1] <= ov[0]) break; /* the patterns cannot match empty; be safe */
            if (spans_push(out, pos, ov[0] - pos) || spans_push(out, ov[0], ov[1] - ov[0])) return OG_ERR_NOMEM;
            pos = ov[1];
        }
        if (spans_push(out, pos, end - pos)) return OG_ERR_NOMEM;
    }
    return OG_OK;
}

/* Length of the valid UTF-8 character at s (1-4), 0 if the bytes are invalid. */
static int valid_char_len(const unsigned char *s, size_t n) {
    int l = utf8_char_len(s[0]);
    if ((size_t)l > n || (l == 1 && s[0] >= 0x80)) return 0;
    return og_utf8_valid((const char *)s, (size_t)l) ? l : 0;
}

/* Pre-tokenizes raw text [start, start+len) of `text` and BPEs every piece.
 * Invalid UTF-8 bytes take part in the regexes as U+FFFD (one per byte), as
 * llama.cpp does, while BPE still sees the original bytes. */
static og_status encode_raw(const og_tokenizer *t, const char *text, size_t start, size_t len, og_ids *out) {
    if (len == 0) return OG_OK;
    const char *src = text + start;
    char *san = NULL;
    size_t *orig = NULL, san_len = len;
    if (!og_utf8_valid(src, len)) {
        san = malloc(len * 3 + 1);
        orig = malloc((len * 3 + 1) * sizeof *orig); /* sanitized offset -> original offset */
        if (!san || !orig) {
            free(san);
            free(orig);
            return OG_ERR_NOMEM;
        }
        size_t o = 0;
        for (size_t i = 0; i < len;) {
            int l = valid_char_len((const unsigned char *)src + i, len - i);
            if (l == 0) {
                memcpy(san + o, "\xef\xbf\xbd", 3);
                orig[o] = orig[o + 1] = orig[o + 2] = i;
                o += 3;
                i += 1;
            } else {
                memcpy(san + o, src + i, (size_t)l);
                for (int k = 0; k < l; k++) orig[o + (size_t)k] = i;
                o += (size_t)l;
                i += (size_t)l;
            }
        }
        orig[o] = len;
        san_len = o;
    }
    const char *re_text = san ? san : src;
    spans a = {0}, b = {0};
    og_status st = spans_push(&a, 0, san_len);
    pcre2_match_data *md = NULL;
    for (int i = 0; i < t->n_re && !st; i++) {
        md = md ? md : pcre2_match_data_create_from_pattern(t->re[i], NULL);
        if (!md) {
            st = OG_ERR_NOMEM;
            break;
        }
        st = split_by(t->re[i], re_text, &a, &b, md, PCRE2_NO_UTF_CHECK);
        spans tmp = a;
        a = b;
        b = tmp;
    }
    for (size_t i = 0; i < a.n && !st; i++) {
        size_t s0 = a.v[i].start, s1 = s0 + a.v[i].len;
        if (san) {
            s0 = orig[s0];
            s1 = orig[s1];
        }
        st = encode_piece(t, src + s0, s1 - s0, out);
    }
    pcre2_match_data_free(md);
    free(a.v);
    free(b.v);
    free(san);
    free(orig);
    return st;
}

/* ---- special tokens (§2.1) and the whole text ------------------------------ */

typedef struct frag {
    size_t start, len;
    int32_t id; /* >= 0: a special token; -1: raw text */
} frag;

/* Cuts text into fragments in text order: the special tokens found in it (longest
 * first; CONTROL ones only when parse_special) and the raw text between them.
 * *out: malloc'ed, *n_out of them. Errors: OG_ERR_NOMEM. */
static og_status split_specials(const og_tokenizer *t, const char *text, size_t len, bool parse_special, frag **out,
                                size_t *n_out) {
    size_t cap = 16, n = 1;
    frag *fr = malloc(cap * sizeof *fr);
    if (!fr) return OG_ERR_NOMEM;
    fr[0] = (frag){0, len, -1};
    for (int si = 0; si < t->n_specials; si++) {
        int32_t id = t->specials[si];
        if (t->type[id] == OG_TOK_CONTROL && !parse_special) continue;
        const char *tok = t->text + t->tok_off[id];
        size_t tl = t->tok_len[id];
        for (size_t f = 0; f < n; f++) {
            if (fr[f].id >= 0 || fr[f].len < tl) continue;
            const char *hit = memmem(text + fr[f].start, fr[f].len, tok, tl);
            if (!hit) continue;
            size_t at = (size_t)(hit - text);
            /* split fragment f into [before][token][after] */
            if (n + 2 > cap) {
                cap *= 2;
                frag *nf = realloc(fr, cap * sizeof *nf);
                if (!nf) {
                    free(fr);
                    return OG_ERR_NOMEM;
                }
                fr = nf;
            }
            frag before = {fr[f].start, at - fr[f].start, -1};
            frag tokf = {at, tl, id};
            frag after = {at + tl, fr[f].start + fr[f].len - at - tl, -1};
            memmove(&fr[f + 3], &fr[f + 1], (n - f - 1) * sizeof *fr);
            fr[f] = before;
            fr[f + 1] = tokf;
            fr[f + 2] = after;
            n += 2;
            /* f + 2 ("after") is visited next and may hold more occurrences */
        }
    }
    *out = fr;
    *n_out = n;
    return OG_OK;
}

og_status og_tokenizer_first_control(const og_tokenizer *t, const char *text, size_t len, int32_t *id) {
    frag *fr;
    size_t n;
    og_status st = split_specials(t, text, len, true, &fr, &n);
    if (st) return st;
    *id = -1;
    for (size_t f = 0; f < n && *id < 0; f++)
        if (fr[f].id >= 0 && t->type[fr[f].id] == OG_TOK_CONTROL) *id = fr[f].id;
    free(fr);
    return OG_OK;
}

og_status og_tokenize(const og_tokenizer *t, const char *text, size_t len, bool add_bos, bool parse_special,
                      og_ids *out) {
    og_status st = OG_OK;
    if (add_bos && t->bos >= 0 && (st = ids_push(out, t->bos))) return st;
    frag *fr;
    size_t n;
    if ((st = split_specials(t, text, len, parse_special, &fr, &n))) return st;
    for (size_t f = 0; f < n && !st; f++) {
        if (fr[f].id >= 0) st = ids_push(out, fr[f].id);
        else st = encode_raw(t, text, fr[f].start, fr[f].len, out);
    }
    free(fr);
    return st;
}

/* ---- decoding (§6) ------------------------------------------------------------ */

int og_token_to_bytes(const og_tokenizer *t, int32_t id, bool render_special, char *buf, size_t cap) {
    if (id < 0 || id >= t->n_vocab) return -1;
    const char *s = t->text + t->tok_off[id];
    size_t n = t->tok_len[id];
    int type = t->type[id];
    if ((type == OG_TOK_CONTROL || type == OG_TOK_UNUSED || type == OG_TOK_UNKNOWN) && !render_special) return 0;
    if (type != OG_TOK_NORMAL) { /* USER_DEFINED (and rendered specials): verbatim */
        memcpy(buf, s, n < cap ? n : cap);
        return (int)n;
    }
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        uint32_t cp;
        int l = utf8_char_len(c);
        if (l == 1) cp = c;
        else if (l == 2 && i + 1 < n) cp = (uint32_t)(c & 0x1f) << 6 | ((unsigned char)s[i + 1] & 0x3f);
        else cp = 0x10000; /* not in the byte alphabet */
        i += (size_t)l;
        int b = cp < 0x144 ? t->cp_byte[cp] : -1;
        if (b < 0) continue; /* a NORMAL token outside the byte alphabet: no bytes */
        if (o < cap) buf[o] = (char)b;
        o++;
    }
    return (int)o;
}

/* Bytes of the longest complete-UTF-8 prefix of s (n bytes): a trailing partial
 * character is left out; invalid bytes count as complete (they are passed on). */
static int complete_prefix(const unsigned char *s, int n) {
    int i = n - 1, back = 0;
    while (i >= 0 && back < 3 && (s[i] & 0xc0) == 0x80) {
        i--;
        back++;
    }
    if (i < 0) return n;
    int need = utf8_char_len(s[i]);
    if (s[i] >= 0xc0 && need > n - i) return i; /* a lead byte waiting for more */
    return n;
}

int og_detok_push(const og_tokenizer *t, og_detok *d, int32_t id, char *out, size_t cap, size_t *len) {
    char piece[256];
    int n = og_token_to_bytes(t, id, false, piece, sizeof piece);
    if (n < 0) return -1;
    char *big = NULL;
    const char *src = piece;
    if (n > (int)sizeof piece) {
        big = malloc((size_t)n);
        if (!big) return -1;
        og_token_to_bytes(t, id, false, big, (size_t)n);
        src = big;
    }
    int total = d->n_pending + n;
    unsigned char *all = malloc((size_t)total + 1);
    if (!all) {
        free(big);
        return -1;
    }
    memcpy(all, d->pending, (size_t)d->n_pending);
    memcpy(all + d->n_pending, src, (size_t)n);
    free(big);
    int emit = complete_prefix(all, total);
    if (total - emit > (int)sizeof d->pending) emit = total - (int)sizeof d->pending;
    if (*len + (size_t)emit + 1 > cap) {
        free(all);
        return -1;
    }
    memcpy(out + *len, all, (size_t)emit);
    *len += (size_t)emit;
    out[*len] = '\0';
    d->n_pending = total - emit;
    memcpy(d->pending, all + emit, (size_t)d->n_pending);
    free(all);
    return emit;
}

int og_detok_flush(og_detok *d, char *out, size_t cap, size_t *len) {
    if (d->n_pending == 0) return 0;
    if (*len + 4 > cap) return -1;
    memcpy(out + *len, "\xef\xbf\xbd", 3); /* U+FFFD for the incomplete character */
    *len += 3;
    out[*len] = '\0';
    d->n_pending = 0;
    return 3;
}
