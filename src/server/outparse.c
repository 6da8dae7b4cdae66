/* The output parser (og_outparse.h): a marker lexer over the generated tokens,
 * then a small state machine per call format.
 *
 * Markers. Each format's markers are strings (tokenizer.md §7, deepseek4.md §5,
 * and llama.cpp's common/chat.cpp for the DSML layout). A marker that the
 * vocabulary holds as one CONTROL token (DeepSeek-V3's <｜tool▁calls▁begin｜> ...)
 * is recognized by that id only: its text spelled by ordinary tokens stays
 * text, as control-token text typed in a prompt does. Any other marker (the
 * DSML tags, and <think> in V3's vocabulary, which has no such token) is
 * recognized in the token bytes, across token boundaries: bytes that may be
 * the start of a marker are held back until they are known.
 *
 * Text. What the parser reports as CONTENT or REASONING is what the text
 * detokenizer shows (control tokens have no text), less the markers it
 * recognized. A tool call is reported when it is complete and well formed
 * (BEGIN, ARGS, END together), so a malformed call is never half reported:
 * its text (as the detokenizer shows it, markers spelled by ordinary tokens
 * included) becomes CONTENT. The cost: a call's arguments arrive in one piece,
 * when the call's end marker is generated.
 *
 * Formats (og_chat_kind):
 *   V3, R1:  <calls_begin><call_begin>function<sep>NAME\n```json\nARGS\n```<call_end>
 *            [\n<call_begin>...<call_end>]<calls_end>
 *   V3.1:    <calls_begin><call_begin>NAME<sep>ARGS<call_end>...<calls_end>
 *   V4:      <｜DSML｜tool_calls>\n<｜DSML｜invoke name="NAME">\n
 *            <｜DSML｜parameter name="P" string="true|false">VALUE</｜DSML｜parameter>\n
 *            </｜DSML｜invoke>\n</｜DSML｜tool_calls>
 *   V4.1:    the same with a space after the DSML bar: <｜DSML｜ calls>, <｜DSML｜ invoke ...>,
 *            <｜DSML｜ parameter ...> and their closing tags.
 * DSML values with string="true" are raw text and become JSON strings; with
 * string="false" they are JSON texts, kept as written. The think block is
 * <think>...</think> in every format. */
#include "og_outparse.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define BAR "\xef\xbd\x9c"   /* U+FF5C FULLWIDTH VERTICAL LINE */
#define SPC "\xe2\x96\x81"   /* U+2581 LOWER ONE EIGHTH BLOCK */
#define DSML "<" BAR "DSML" BAR
#define DSML_END "</" BAR "DSML" BAR

enum role {
    R_THINK_OPEN,
    R_THINK_CLOSE,
    R_CALLS_BEGIN, /* V3 family: <｜tool▁calls▁begin｜>; DSML: the calls block's opening tag */
    R_CALLS_END,
    R_CALL_BEGIN,  /* V3 family only */
    R_CALL_END,
    R_SEP,
    R_INVOKE_OPEN, /* DSML only: "<｜DSML｜invoke", attributes follow up to '>' */
    R_INVOKE_CLOSE,
    R_PARAM_OPEN,
    R_PARAM_CLOSE,
    N_ROLE
};

enum family { FAM_V3, FAM_V31, FAM_DSML };

/* The DSML tags: [0] V4 (llama.cpp common/chat.cpp: the tool_calls block),
 * [1] V4.1 (a space after the bar, deepseek4.md §5). */
typedef struct dsml_tags {
    const char *calls, *calls_end, *invoke, *invoke_end, *param, *param_end;
    const char *calls_nl, *invoke_name, *invoke_end_nl, *param_name, *param_end_nl; /* as the call grammar writes them */
} dsml_tags;
#define DSML_TAGS(sp, block)                                                                                           \
    {DSML sp block ">", DSML_END sp block ">", DSML sp "invoke", DSML_END sp "invoke>", DSML sp "parameter",            \
     DSML_END sp "parameter>", DSML sp block ">\n", DSML sp "invoke name=\"", DSML_END sp "invoke>\n",                \
     DSML sp "parameter name=\"", DSML_END sp "parameter>\n"}
static const dsml_tags k_dsml[2] = {DSML_TAGS("", "tool_calls"), DSML_TAGS(" ", "calls")};

enum state {
    S_CONTENT,
    S_REASONING,
    S_BLOCK,       /* inside the calls block, between calls */
    S_HEAD,        /* V3 family: after <call_begin>, up to <sep> */
    S_BODY,        /* V3 family: after <sep>, up to <call_end> */
    S_INVOKE_ATTR, /* DSML: after "<｜DSML｜invoke", up to '>' */
    S_INVOKE_BODY, /* DSML: between parameters */
    S_PARAM_ATTR,  /* DSML: after "<｜DSML｜parameter", up to '>' */
    S_PARAM_VALUE, /* DSML: up to </｜DSML｜parameter> */
};

typedef struct buf {
    char *p;
    size_t n, cap;
} buf;

typedef struct marker {
    const char *text;
    size_t len;
    int32_t id; /* >= 0: a CONTROL token, recognized by this id only; -1: recognized in the bytes */
    bool on;    /* used by this parser (tools and reasoning switched on) */
} marker;

struct og_outparse {
    const og_tokenizer *tok;
    og_outparse_opts o;
    enum family fam;
    marker mk[N_ROLE];
    size_t longest;          /* the longest byte-matched marker */
    enum state st;
    buf lex;                 /* bytes not yet lexed (a possible marker start, an unfinished character) */
    buf raw;                 /* the current call attempt as text, for the malformed fallback */
    buf head, body;          /* V3: type/name and body; DSML: attributes and a parameter's value */
    buf name, args;          /* the call being built */
    buf pname;               /* DSML: the current parameter's name */
    bool pstring;            /* DSML: its string attribute */
    int n_params;
    int block_calls;         /* calls completed in the current block */
    bool cut_call;           /* og_outparse_finish_cut dropped an unfinished call */
    int32_t held;            /* og_outparse_take: the last token, held back until the next or the end, or -1 */
    size_t held_start;       /* its text's byte offset in the output */
    buf tail;                /* the output's text from byte tail_start on (the held token's, once there is one) */
    size_t tail_start;
    int n_reasoning;         /* tokens fed by og_outparse_take inside the think block */
    int n_calls;
    bool malformed, oom;
    char id[32];
};

/* ---- buffers ---------------------------------------------------------------- */

static bool put(og_outparse *p, buf *b, const char *s, size_t n) {
    if (p->oom) return false;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            p->oom = true;
            return false;
        }
        b->p = q;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return true;
}

static bool puts_(og_outparse *p, buf *b, const char *s) { return put(p, b, s, strlen(s)); }

static void clear(buf *b) {
    b->n = 0;
    if (b->p) b->p[0] = 0;
}

static bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

/* s[0..*n) without leading and trailing whitespace: returns the start. */
static const char *trim(const char *s, size_t *n) {
    while (*n && is_ws(*s)) s++, (*n)--;
    while (*n && is_ws(s[*n - 1])) (*n)--;
    return s;
}

/* ---- events ----------------------------------------------------------------- */

static void emit_text(og_outparse *p, og_out_kind kind, const char *s, size_t n, og_out_cb cb, void *ud) {
    if (!n) return;
    og_out_ev ev = {.kind = kind, .text = s, .len = n};
    if (og_utf8_valid(s, n)) {
        cb(ud, &ev);
        return;
    }
    char *r = malloc(3 * n);
    if (!r) {
        p->oom = true;
        return;
    }
    ev.text = r;
    ev.len = og_utf8_repair(s, n, r);
    cb(ud, &ev);
    free(r);
}

/* "call_" + 24 alphanumerics from the request's seed and the call's index. */
static void make_id(og_outparse *p, int index) {
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    uint64_t s = p->o.id_seed ^ (0x6f67746f6f6c73ULL + (uint64_t)index * 0x9e3779b97f4a7c15ULL);
    memcpy(p->id, "call_", 5);
    for (int i = 0; i < 24; i += 8) {
        uint64_t r = og_splitmix64(&s);
        for (int k = 0; k < 8; k++, r >>= 8) p->id[5 + i + k] = al[(r & 0xff) % 62];
    }
    p->id[29] = 0;
}

/* The call in name/args is complete: reports it if it is well formed (a
 * name without blanks or quotes, arguments a JSON object). */
static bool report_call(og_outparse *p, og_out_cb cb, void *ud) {
    size_t nl = p->name.n, al = p->args.n;
    const char *nm = trim(p->name.p ? p->name.p : "", &nl), *ar = trim(p->args.p ? p->args.p : "", &al);
    if (!nl || nl > 256) return false;
    for (size_t i = 0; i < nl; i++)
        if (is_ws(nm[i]) || nm[i] == '"' || (unsigned char)nm[i] < 0x20) return false;
    if (!og_utf8_valid(nm, nl)) return false;
    json_error_t je;
    json_t *j = json_loadb(ar, al, JSON_REJECT_DUPLICATES, &je);
    bool obj = json_is_object(j);
    json_decref(j);
    if (!obj) return false;
    char *name = strndup(nm, nl), *args = strndup(ar, al);
    if (!name || !args) {
        free(name);
        free(args);
        p->oom = true;
        return false;
    }
    int idx = p->n_calls;
    make_id(p, idx);
    og_out_ev ev = {.kind = OG_OUT_TOOL_BEGIN, .tool_index = idx, .id = p->id, .name = name};
    cb(ud, &ev);
    ev = (og_out_ev){.kind = OG_OUT_TOOL_ARGS, .tool_index = idx, .text = args, .len = al};
    cb(ud, &ev);
    ev = (og_out_ev){.kind = OG_OUT_TOOL_END, .tool_index = idx, .id = p->id, .name = name, .arguments = args};
    cb(ud, &ev);
    free(name);
    free(args);
    p->n_calls++;
    p->block_calls++;
    clear(&p->raw);
    return true;
}

/* The current call attempt is not well formed: its text becomes CONTENT and
 * the rest of the output is parsed from the content state. */
static void malformed(og_outparse *p, og_out_cb cb, void *ud) {
    p->malformed = true;
    emit_text(p, OG_OUT_CONTENT, p->raw.p, p->raw.n, cb, ud);
    clear(&p->raw);
    p->st = S_CONTENT;
}

/* ---- the state machine ------------------------------------------------------ */

/* The value of attribute key in s[0..n) (key="value"), NULL if absent. */
static const char *attr(const char *s, size_t n, const char *key, size_t *vlen) {
    size_t kl = strlen(key);
    for (size_t i = 0; i + kl + 2 <= n; i++) {
        if ((i == 0 || is_ws(s[i - 1])) && !memcmp(s + i, key, kl) && s[i + kl] == '=' && s[i + kl + 1] == '"') {
            const char *v = s + i + kl + 2, *e = memchr(v, '"', (size_t)(s + n - v));
            if (!e) return NULL;
            *vlen = (size_t)(e - v);
            return v;
        }
    }
    return NULL;
}

/* DSML: the attributes of an invoke tag (one: name) or a parameter tag
 * (name, string) are in p->head; checks that nothing else is there. */
static bool dsml_attrs(og_outparse *p, bool param) {
    size_t n = p->head.n, vl = 0, sl = 0;
    const char *s = p->head.p ? p->head.p : "";
    const char *v = attr(s, n, "name", &vl), *sv = param ? attr(s, n, "string", &sl) : NULL;
    if (!v || !vl || (param && !sv)) return false;
    size_t expect = 1 + 4 + 2 + vl + 1 + (param ? 1 + 6 + 2 + sl + 1 : 0); /* ` name="v"` [` string="x"`] */
    size_t tn = n;
    while (tn && is_ws(s[tn - 1])) tn--;
    if (tn != expect || !is_ws(s[0])) return false;
    if (!param) {
        clear(&p->name);
        return put(p, &p->name, v, vl);
    }
    if (sl == 4 && !memcmp(sv, "true", 4)) p->pstring = true;
    else if (sl == 5 && !memcmp(sv, "false", 5)) p->pstring = false;
    else return false;
    clear(&p->pname);
    return put(p, &p->pname, v, vl);
}

/* DSML: a parameter's value is complete (p->body): appends "name":value to the args. */
static bool dsml_param(og_outparse *p) {
    json_t *k = json_stringn(p->pname.p, p->pname.n);
    char *ks = k ? json_dumps(k, JSON_ENCODE_ANY) : NULL;
    json_decref(k);
    if (!ks) return false;
    bool ok = puts_(p, &p->args, p->n_params ? "," : "{") && puts_(p, &p->args, ks) && puts_(p, &p->args, ":");
    free(ks);
    if (!ok) return false;
    const char *v = p->body.p ? p->body.p : "";
    size_t vn = p->body.n;
    if (p->pstring) {
        json_t *js = og_utf8_valid(v, vn) ? json_stringn(v, vn) : NULL;
        char *s = js ? json_dumps(js, JSON_ENCODE_ANY) : NULL;
        json_decref(js);
        ok = s && puts_(p, &p->args, s);
        free(s);
    } else {
        v = trim(v, &vn);
        json_error_t je;
        json_t *j = json_loadb(v, vn, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
        ok = j && put(p, &p->args, v, vn);
        json_decref(j);
    }
    p->n_params++;
    return ok;
}

/* Text in a call state (already in p->raw). Returns false when it is not allowed there. */
static bool call_text(og_outparse *p, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        switch (p->st) {
        case S_BLOCK:
        case S_INVOKE_BODY:
            if (!is_ws(c)) return false;
            break;
        case S_HEAD:
            if (!put(p, &p->head, &c, 1)) return false;
            break;
        case S_BODY:
        case S_PARAM_VALUE:
            return put(p, &p->body, s + i, n - i);
        case S_INVOKE_ATTR:
        case S_PARAM_ATTR:
            if (c != '>') {
                if (!put(p, &p->head, &c, 1) || p->head.n > 1024) return false;
                break;
            }
            if (p->st == S_INVOKE_ATTR) {
                if (!dsml_attrs(p, false)) return false;
                clear(&p->args);
                p->n_params = 0;
                p->st = S_INVOKE_BODY;
            } else {
                if (!dsml_attrs(p, true)) return false;
                clear(&p->body);
                p->st = S_PARAM_VALUE;
            }
            break;
        default:
            return false;
        }
    }
    return true;
}

/* V3 family: the call between <call_begin> and <call_end> is in head/body. */
static bool v3_call(og_outparse *p) {
    size_t hn = p->head.n, bn = p->body.n;
    const char *h = trim(p->head.p ? p->head.p : "", &hn), *b = p->body.p ? p->body.p : "";
    clear(&p->name);
    clear(&p->args);
    if (p->fam == FAM_V31) {
        return put(p, &p->name, h, hn) && put(p, &p->args, b, bn);
    }
    if (hn != 8 || memcmp(h, "function", 8)) return false;
    const char *nl = memchr(b, '\n', bn);
    if (!nl) return false;
    if (!put(p, &p->name, b, (size_t)(nl - b))) return false;
    size_t an = bn - (size_t)(nl + 1 - b);
    const char *a = trim(nl + 1, &an);
    if (an >= 7 && !memcmp(a, "```json", 7)) a += 7, an -= 7;
    else if (an >= 3 && !memcmp(a, "```", 3)) a += 3, an -= 3;
    a = trim(a, &an);
    if (an >= 3 && !memcmp(a + an - 3, "```", 3)) an -= 3;
    return put(p, &p->args, a, an);
}

static void on_text(og_outparse *p, const char *s, size_t n, og_out_cb cb, void *ud) {
    if (!n) return;
    if (p->st == S_CONTENT || p->st == S_REASONING) {
        emit_text(p, p->st == S_CONTENT ? OG_OUT_CONTENT : OG_OUT_REASONING, s, n, cb, ud);
        return;
    }
    if (!put(p, &p->raw, s, n)) return;
    if (!call_text(p, s, n) && !p->oom) malformed(p, cb, ud);
}

/* A recognized marker. Its text (what the detokenizer shows: nothing for a
 * control token) goes to the content where it means nothing. */
static void on_mark(og_outparse *p, int r, og_out_cb cb, void *ud) {
    const marker *m = &p->mk[r];
    const char *mt = m->id >= 0 ? "" : m->text;
    size_t ml = m->id >= 0 ? 0 : m->len;
    switch (p->st) {
    case S_CONTENT:
    case S_REASONING:
        if (r == R_THINK_OPEN && p->st == S_CONTENT) {
            p->st = S_REASONING;
        } else if (r == R_THINK_CLOSE && p->st == S_REASONING) {
            p->st = S_CONTENT;
        } else if (r == R_CALLS_BEGIN) { /* a calls block also ends the reasoning (llama.cpp: V4's end tags) */
            p->st = S_BLOCK;
            p->block_calls = 0;
            clear(&p->raw);
            put(p, &p->raw, mt, ml);
        } else {
            on_text(p, mt, ml, cb, ud);
        }
        return;
    default:
        break;
    }
    put(p, &p->raw, mt, ml);
    bool ok = false;
    switch (p->st) {
    case S_BLOCK:
        if (r == R_CALLS_END) {
            ok = p->block_calls > 0;
            if (ok) {
                clear(&p->raw);
                p->st = S_CONTENT;
            }
        } else if (r == R_CALL_BEGIN && p->fam != FAM_DSML) {
            clear(&p->head);
            clear(&p->body);
            p->st = S_HEAD;
            ok = true;
        } else if (r == R_INVOKE_OPEN && p->fam == FAM_DSML) {
            clear(&p->head);
            p->st = S_INVOKE_ATTR;
            ok = true;
        }
        break;
    case S_HEAD:
        if (r == R_SEP) {
            p->st = S_BODY;
            ok = true;
        }
        break;
    case S_BODY:
        if (r == R_CALL_END) {
            ok = v3_call(p) && report_call(p, cb, ud);
            p->st = S_BLOCK;
        } else if (m->id < 0) {
            ok = put(p, &p->body, mt, ml); /* a marker's text inside the arguments */
        }
        break;
    case S_INVOKE_BODY:
        if (r == R_PARAM_OPEN) {
            clear(&p->head);
            p->st = S_PARAM_ATTR;
            ok = true;
        } else if (r == R_INVOKE_CLOSE) {
            if (!p->n_params) puts_(p, &p->args, "{");
            ok = puts_(p, &p->args, "}") && report_call(p, cb, ud);
            p->st = S_BLOCK;
        }
        break;
    case S_PARAM_VALUE:
        if (r == R_PARAM_CLOSE) {
            ok = dsml_param(p);
            p->st = S_INVOKE_BODY;
        } else if (m->id < 0) {
            ok = put(p, &p->body, mt, ml);
        }
        break;
    default:
        break;
    }
    if (!ok && !p->oom) malformed(p, cb, ud);
}

/* ---- the lexer -------------------------------------------------------------- */

/* Bytes at the end of s[0..n) that begin a UTF-8 character and want more:
 * a lead byte within the last 3 and what follows it. */
static size_t utf8_unfinished(const char *s, size_t n) {
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        unsigned char c = (unsigned char)s[n - k];
        if ((c & 0xC0) == 0x80) continue;
        size_t want = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return want > k ? k : 0;
    }
    return 0;
}

/* Bytes at the end of s[0..n) that may begin a byte-matched marker or finish
 * a UTF-8 character: they wait for more. */
static size_t holdback(const og_outparse *p, const char *s, size_t n) {
    size_t keep = 0;
    size_t from = n > p->longest ? n - p->longest + 1 : 0;
    for (size_t i = from; i < n && !keep; i++)
        for (int r = 0; r < N_ROLE; r++) {
            const marker *m = &p->mk[r];
            if (m->on && m->id < 0 && n - i < m->len && !memcmp(s + i, m->text, n - i)) {
                keep = n - i;
                break;
            }
        }
    const size_t u = utf8_unfinished(s, n); /* an unfinished UTF-8 character */
    return u > keep ? u : keep;
}

/* Lexes p->lex: text and byte-matched markers; keeps what is undecided unless final. */
static void lex_run(og_outparse *p, bool final, og_out_cb cb, void *ud) {
    size_t at = 0;
    if (!p->lex.p) return; /* nothing was ever fed as bytes */
    while (!p->oom) {
        const char *s = p->lex.p + at;
        size_t n = p->lex.n - at, best = n;
        int br = -1;
        for (size_t i = 0; i < n && br < 0; i++)
            for (int r = 0; r < N_ROLE; r++) {
                const marker *m = &p->mk[r];
                if (m->on && m->id < 0 && m->len <= n - i && !memcmp(s + i, m->text, m->len)) {
                    best = i;
                    br = r;
                    break;
                }
            }
        if (br < 0) {
            size_t keep = final ? 0 : holdback(p, s, n);
            on_text(p, s, n - keep, cb, ud);
            at += n - keep;
            break;
        }
        on_text(p, s, best, cb, ud);
        on_mark(p, br, cb, ud);
        at += best + p->mk[br].len;
    }
    memmove(p->lex.p, p->lex.p + at, p->lex.n - at);
    p->lex.n -= at;
}

/* Whether a control token's text is part of a byte-matched marker (a
 * vocabulary that holds "<｜DSML｜" as one token): then its text is lexed. */
static bool inside_marker(const og_outparse *p, const char *t, int n) {
    if (n <= 0) return false;
    for (int r = 0; r < N_ROLE; r++) {
        const marker *m = &p->mk[r];
        if (m->on && m->id < 0 && m->len >= (size_t)n && memmem(m->text, m->len, t, (size_t)n)) return true;
    }
    return false;
}

og_status og_outparse_feed(og_outparse *p, const int32_t *ids, int n, og_out_cb cb, void *ud) {
    if (!p || (n > 0 && !ids) || !cb) return OG_ERR_INVALID_ARG;
    if (p->oom) return OG_ERR_NOMEM;
    char small[256];
    for (int i = 0; i < n && !p->oom; i++) {
        int32_t id = ids[i];
        int r = 0;
        while (r < N_ROLE && !(p->mk[r].on && p->mk[r].id == id)) r++;
        if (r < N_ROLE) { /* a control-token marker: what was held back is text */
            lex_run(p, true, cb, ud);
            on_mark(p, r, cb, ud);
            continue;
        }
        bool ctl = og_tokenizer_type(p->tok, id) == OG_TOK_CONTROL;
        int bn = og_token_to_bytes(p->tok, id, ctl, small, sizeof small);
        if (bn < 0) continue;
        if (ctl && !inside_marker(p, small, bn < (int)sizeof small ? bn : (int)sizeof small)) continue;
        if (bn <= (int)sizeof small) {
            put(p, &p->lex, small, (size_t)bn);
        } else {
            char *big = malloc((size_t)bn);
            if (!big) return OG_ERR_NOMEM;
            og_token_to_bytes(p->tok, id, ctl, big, (size_t)bn);
            put(p, &p->lex, big, (size_t)bn);
            free(big);
        }
        lex_run(p, false, cb, ud);
    }
    return p->oom ? OG_ERR_NOMEM : OG_OK;
}

/* Ends the output; cut: it was cut (og_outparse_finish_cut), else it ended
 * (og_outparse_finish). p->raw is read only in a call state (entered from
 * the content states with it cleared), so clearing it always is the same as
 * clearing it only there. */
static og_status finish(og_outparse *p, bool cut, og_out_cb cb, void *ud) {
    if (!p || !cb) return OG_ERR_INVALID_ARG;
    if (p->oom) return OG_ERR_NOMEM;
    /* what lexing leaves is held back (holdback): the start of a byte-matched
     * marker, or a character not finished. A cut output drops both: a marker
     * the cut split (a forced call's "<｜DSML｜ ca") is markup, never content;
     * an ended one keeps the marker start as text. A character never finished
     * is dropped either way, as the engine's text drops it (seq_end). */
    lex_run(p, false, cb, ud);
    if (cut) p->lex.n = 0;
    else p->lex.n -= utf8_unfinished(p->lex.p, p->lex.n);
    lex_run(p, true, cb, ud);
    if (p->st != S_CONTENT && p->st != S_REASONING) {
        /* a V3 block may end without its <calls_end> once a call completed */
        const bool block_done = p->st == S_BLOCK && p->block_calls > 0;
        if (cut) /* inside a call or a calls block: drop it */
            p->cut_call = p->raw.n > 0 || !block_done;
        else if (!block_done) /* any other unfinished call is malformed */
            malformed(p, cb, ud);
    }
    clear(&p->raw);
    p->st = S_CONTENT;
    return p->oom ? OG_ERR_NOMEM : OG_OK;
}

og_status og_outparse_finish(og_outparse *p, og_out_cb cb, void *ud) { return finish(p, false, cb, ud); }

og_status og_outparse_finish_cut(og_outparse *p, og_out_cb cb, void *ud) { return finish(p, true, cb, ud); }

/* Feeds the held-back token, counting it as reasoning when it is fed inside
 * the think block (the closing marker's tokens count too); only its bytes
 * before the stop when the output's text ends inside them (a stop string cut
 * it). */
static og_status feed_held(og_outparse *p, bool last, og_out_cb cb, void *ud) {
    p->n_reasoning += og_outparse_in_reasoning(p);
    if (last) {
        char b[256];
        int bn = og_token_to_bytes(p->tok, p->held, false, b, sizeof b);
        size_t rel = p->held_start - p->tail_start; /* the token's text in tail */
        size_t have = p->tail.n > rel ? p->tail.n - rel : 0;
        if (bn > 0 && bn <= (int)sizeof b && have < (size_t)bn && (!have || !memcmp(b, p->tail.p + rel, have)))
            return og_outparse_feed_bytes(p, b, have, cb, ud); /* cut by a stop string */
    }
    return og_outparse_feed(p, &p->held, 1, cb, ud);
}

og_status og_outparse_take(og_outparse *p, const og_seq_out *so, og_out_cb cb, void *ud) {
    if (!p || !so || (so->len && !so->text) || (so->n_toks > 0 && !so->toks) || !cb) return OG_ERR_INVALID_ARG;
    og_status st = OG_OK;
    if (so->len && !put(p, &p->tail, so->text, so->len)) st = OG_ERR_NOMEM;
    for (int k = 0; k < so->n_toks; k++) {
        if (p->held >= 0) {
            og_status s = feed_held(p, false, cb, ud);
            if (!st) st = s;
        }
        p->held = so->toks[k].id;
        p->held_start = so->toks[k].text_start;
    }
    if (p->held >= 0 && p->held_start > p->tail_start) { /* only the held token's text can still be cut */
        size_t d = p->held_start - p->tail_start < p->tail.n ? p->held_start - p->tail_start : p->tail.n;
        if (d) memmove(p->tail.p, p->tail.p + d, p->tail.n - d);
        p->tail.n -= d;
        p->tail_start += d;
    }
    if (so->finish == OG_FINISH_NONE) return st;
    if (p->held >= 0) {
        og_status s = feed_held(p, true, cb, ud);
        if (!st) st = s;
        p->held = -1;
    }
    /* cut by max_tokens or a stop string inside a call: the partial call is dropped, not shown as text */
    const bool cut = so->finish == OG_FINISH_LENGTH || (so->finish == OG_FINISH_STOP && so->stop_index >= 0);
    og_status fst = finish(p, cut, cb, ud);
    return st ? st : fst;
}

int og_outparse_reasoning_tokens(const og_outparse *p) { return p ? p->n_reasoning : 0; }

bool og_outparse_cut_call(const og_outparse *p) { return p && p->cut_call; }

int og_outparse_n_calls(const og_outparse *p) { return p ? p->n_calls : 0; }

bool og_outparse_malformed(const og_outparse *p) { return p && p->malformed; }

bool og_outparse_in_reasoning(const og_outparse *p) { return p && p->st == S_REASONING; }

/* ---- construction ----------------------------------------------------------- */

static void set_marker(og_outparse *p, int r, const char *text, bool on) {
    marker *m = &p->mk[r];
    m->text = text;
    m->len = strlen(text);
    m->on = on;
    int32_t id = og_tokenizer_find(p->tok, text, m->len);
    m->id = id >= 0 && og_tokenizer_type(p->tok, id) == OG_TOK_CONTROL ? id : -1;
    if (on && m->id < 0 && m->len > p->longest) p->longest = m->len;
}

og_status og_outparse_new(const og_tokenizer *tok, const og_outparse_opts *o, og_outparse **out) {
    if (!out) return OG_ERR_INVALID_ARG;
    *out = NULL;
    if (!tok || !o) return OG_ERR_INVALID_ARG;
    enum family fam;
    switch (o->kind) {
    case OG_CHAT_DEEPSEEK3:
    case OG_CHAT_DEEPSEEK_R1: fam = FAM_V3; break;
    case OG_CHAT_DEEPSEEK3_1: fam = FAM_V31; break;
    case OG_CHAT_DEEPSEEK4:
    case OG_CHAT_DEEPSEEK4_1: fam = FAM_DSML; break;
    default: return OG_ERR_INVALID_ARG;
    }
    og_outparse *p = calloc(1, sizeof *p);
    if (!p) return OG_ERR_NOMEM;
    p->tok = tok;
    p->o = *o;
    p->fam = fam;
    p->held = -1;
    p->st = o->in_reasoning && o->parse_reasoning ? S_REASONING : S_CONTENT;
    bool th = o->parse_reasoning, tl = o->parse_tools;
    set_marker(p, R_THINK_OPEN, "<think>", th);
    set_marker(p, R_THINK_CLOSE, "</think>", th);
    if (fam != FAM_DSML) {
        set_marker(p, R_CALLS_BEGIN, "<" BAR "tool" SPC "calls" SPC "begin" BAR ">", tl);
        set_marker(p, R_CALLS_END, "<" BAR "tool" SPC "calls" SPC "end" BAR ">", tl);
        set_marker(p, R_CALL_BEGIN, "<" BAR "tool" SPC "call" SPC "begin" BAR ">", tl);
        set_marker(p, R_CALL_END, "<" BAR "tool" SPC "call" SPC "end" BAR ">", tl);
        set_marker(p, R_SEP, "<" BAR "tool" SPC "sep" BAR ">", tl);
    } else {
        const dsml_tags *d = &k_dsml[o->kind == OG_CHAT_DEEPSEEK4_1];
        set_marker(p, R_CALLS_BEGIN, d->calls, tl);
        set_marker(p, R_CALLS_END, d->calls_end, tl);
        set_marker(p, R_INVOKE_OPEN, d->invoke, tl);
        set_marker(p, R_INVOKE_CLOSE, d->invoke_end, tl);
        set_marker(p, R_PARAM_OPEN, d->param, tl);
        set_marker(p, R_PARAM_CLOSE, d->param_end, tl);
    }
    for (int r = 0; r < N_ROLE; r++)
        if (!p->mk[r].text) p->mk[r] = (marker){.text = "", .len = 0, .id = -1, .on = false};
    *out = p;
    return OG_OK;
}

void og_outparse_free(og_outparse *p) {
    if (!p) return;
    buf *bs[] = {&p->lex, &p->raw, &p->head, &p->body, &p->name, &p->args, &p->pname, &p->tail};
    for (size_t i = 0; i < sizeof bs / sizeof *bs; i++) free(bs[i]->p);
    free(p);
}

/* ---- what the tool-choice controls need ------------------------------------- */

/* A layout piece for marker text: its control token when the vocabulary has one. */
static og_gpiece piece(const og_tokenizer *tok, const char *text) {
    int32_t id = og_tokenizer_find(tok, text, strlen(text));
    if (id >= 0 && og_tokenizer_type(tok, id) == OG_TOK_CONTROL) return (og_gpiece){NULL, id};
    return (og_gpiece){text, -1};
}

og_status og_outparse_call_layout(const og_tokenizer *tok, og_chat_kind kind, bool close_reasoning,
                                  og_tool_layout *lay) {
    if (!tok || !lay) return OG_ERR_INVALID_ARG;
    memset(lay, 0, sizeof *lay);
    if (close_reasoning) lay->open[lay->n_open++] = piece(tok, "</think>");
    switch (kind) {
    case OG_CHAT_DEEPSEEK3:
    case OG_CHAT_DEEPSEEK_R1:
    case OG_CHAT_DEEPSEEK3_1: {
        bool v31 = kind == OG_CHAT_DEEPSEEK3_1;
        lay->open[lay->n_open++] = piece(tok, "<" BAR "tool" SPC "calls" SPC "begin" BAR ">");
        lay->call[lay->n_call++] = piece(tok, "<" BAR "tool" SPC "call" SPC "begin" BAR ">");
        og_gpiece sep = piece(tok, "<" BAR "tool" SPC "sep" BAR ">"), end = piece(tok, "<" BAR "tool" SPC "call" SPC "end" BAR ">");
        if (v31) {
            lay->name_end[lay->n_name_end++] = sep;
        } else { /* type<sep>name\n```json\nARGS\n```<call_end>, calls on their own lines */
            lay->call[lay->n_call++] = (og_gpiece){"function", -1};
            lay->call[lay->n_call++] = sep;
            lay->name_end[lay->n_name_end++] = (og_gpiece){"\n```json\n", -1};
            lay->call_end[lay->n_call_end++] = (og_gpiece){"\n```", -1};
            lay->between[lay->n_between++] = (og_gpiece){"\n", -1};
        }
        lay->call_end[lay->n_call_end++] = end;
        lay->close[lay->n_close++] = piece(tok, "<" BAR "tool" SPC "calls" SPC "end" BAR ">");
        return OG_OK;
    }
    case OG_CHAT_DEEPSEEK4:
    case OG_CHAT_DEEPSEEK4_1: {
        const dsml_tags *d = &k_dsml[kind == OG_CHAT_DEEPSEEK4_1];
        lay->open[lay->n_open++] = piece(tok, d->calls_nl);
        lay->call[lay->n_call++] = (og_gpiece){d->invoke_name, -1};
        lay->name_end[lay->n_name_end++] = (og_gpiece){"\">\n", -1};
        lay->param_open = d->param_name;
        lay->param_mid = "\" string=\"false\">";
        lay->param_close = d->param_end_nl;
        lay->call_end[lay->n_call_end++] = (og_gpiece){d->invoke_end_nl, -1};
        lay->close[lay->n_close++] = (og_gpiece){d->calls_end, -1};
        return OG_OK;
    }
    default:
        return OG_ERR_INVALID_ARG;
    }
}

int og_outparse_call_tokens(const og_tokenizer *tok, og_chat_kind kind, int32_t *ids, int cap) {
    const char *texts[2] = {NULL, NULL};
    switch (kind) {
    case OG_CHAT_DEEPSEEK3:
    case OG_CHAT_DEEPSEEK_R1:
    case OG_CHAT_DEEPSEEK3_1:
        texts[0] = "<" BAR "tool" SPC "calls" SPC "begin" BAR ">";
        texts[1] = "<" BAR "tool" SPC "call" SPC "begin" BAR ">";
        break;
    case OG_CHAT_DEEPSEEK4:
    case OG_CHAT_DEEPSEEK4_1: texts[0] = k_dsml[kind == OG_CHAT_DEEPSEEK4_1].calls; break;
    default: return 0;
    }
    int n = 0;
    for (int i = 0; i < 2 && texts[i]; i++) {
        int32_t id = og_tokenizer_find(tok, texts[i], strlen(texts[i]));
        if (id >= 0 && og_tokenizer_type(tok, id) == OG_TOK_CONTROL && n < cap) ids[n++] = id;
    }
    return n;
}

og_status og_outparse_feed_bytes(og_outparse *p, const char *bytes, size_t n, og_out_cb cb, void *ud) {
    if (!p || (n && !bytes) || !cb) return OG_ERR_INVALID_ARG;
    if (p->oom) return OG_ERR_NOMEM;
    put(p, &p->lex, bytes, n);
    lex_run(p, false, cb, ud);
    return p->oom ? OG_ERR_NOMEM : OG_OK;
}
