#include "hf_tokenizer.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

typedef struct priv {
    json_t *tok, *cfg;
    char **owned; /* strings we built ("[PAD..]", joined merges, rewritten tokens) */
    size_t n_owned, cap_owned;
} priv;

static const char *own(priv *p, char *s) {
    if (!s) return NULL;
    if (p->n_owned == p->cap_owned) {
        size_t cap = p->cap_owned ? p->cap_owned * 2 : 1024;
        char **n = realloc(p->owned, cap * sizeof *n);
        if (!n) {
            free(s);
            return NULL;
        }
        p->owned = n;
        p->cap_owned = cap;
    }
    p->owned[p->n_owned++] = s;
    return s;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}
static bool starts_with(const char *s, const char *prefix) {
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* llama.cpp converter's "does_token_look_special" (conversion/base.py). */
static bool looks_special(const char *t) {
    if (!strcmp(t, "<pad>") || !strcmp(t, "<mask>") || !strcmp(t, "<2mass>") || !strcmp(t, "[@BOS@]"))
        return true;
    if (starts_with(t, "<|") && ends_with(t, "|>")) return true;
    if (starts_with(t, "<\xef\xbd\x9c") && ends_with(t, "\xef\xbd\x9c>")) return true; /* <｜ … ｜> */
    return starts_with(t, "<unused") && ends_with(t, ">");
}

/* USER_DEFINED tokens get "▁" (U+2581) replaced by a space, as the converter does. */
static char *replace_sp_marker(const char *t) {
    size_t n = strlen(t);
    char *o = malloc(n + 1), *w = o;
    if (!o) return NULL;
    for (size_t i = 0; i < n;) {
        if (i + 3 <= n && !memcmp(t + i, "\xe2\x96\x81", 3)) {
            *w++ = ' ';
            i += 3;
        } else {
            *w++ = t[i++];
        }
    }
    *w = '\0';
    return o;
}

/* Loads dir/name (a regular file of at most 256 MiB; og_read_file refuses FIFOs
 * and devices, so a bad path cannot hang us). */
static og_status load_json(const char *dir, const char *name, json_t **out, char *err, size_t errlen) {
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path)
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "tokenizer path too long");
    char *text;
    size_t len;
    og_status st = og_read_file(path, 256u << 20, &text, &len, err, errlen);
    if (st) return st;
    json_error_t je;
    *out = json_loadb(text, len, 0, &je);
    free(text);
    if (!*out) return og_fail(err, errlen, OG_ERR_FORMAT, "%s: not valid JSON (line %d: %s)", path, je.line, je.text);
    return OG_OK;
}

static const char *token_content(json_t *v) {
    if (json_is_string(v)) return json_string_value(v);
    if (json_is_object(v)) return json_string_value(json_object_get(v, "content"));
    return NULL;
}

og_status og_hf_vocab_load(const char *dir, uint32_t pad_to, og_hf_vocab *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    priv *p = calloc(1, sizeof *p);
    if (!p) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    out->priv = p;
    og_status st;
    if ((st = load_json(dir, "tokenizer.json", &p->tok, err, errlen)) ||
        (st = load_json(dir, "tokenizer_config.json", &p->cfg, err, errlen))) {
        og_hf_vocab_free(out);
        return st;
    }
    json_t *model = json_object_get(p->tok, "model");
    json_t *vocab = json_object_get(model, "vocab");
    json_t *merges = json_object_get(model, "merges");
    json_t *added = json_object_get(p->tok, "added_tokens");
    if (!json_is_object(vocab) || !json_is_array(merges)) {
        og_hf_vocab_free(out);
        return og_fail(err, errlen, OG_ERR_FORMAT, "%s/tokenizer.json: no model.vocab / model.merges (not a BPE tokenizer?)", dir);
    }
    /* Highest id over the vocab and the added tokens. */
    int64_t max_id = -1;
    const char *k;
    json_t *v;
    size_t i;
    json_object_foreach(vocab, k, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0) {
            og_hf_vocab_free(out);
            return og_fail(err, errlen, OG_ERR_FORMAT, "%s/tokenizer.json: vocabulary id of a token is not a non-negative integer", dir);
        }
        if (json_integer_value(v) > max_id) max_id = json_integer_value(v);
    }
    json_array_foreach(added, i, v) {
        json_t *idv = json_object_get(v, "id");
        if (!json_is_integer(idv) || json_integer_value(idv) < 0) {
            og_hf_vocab_free(out);
            return og_fail(err, errlen, OG_ERR_FORMAT, "%s/tokenizer.json: added token %zu has no valid id", dir, i);
        }
        if (json_integer_value(idv) > max_id) max_id = json_integer_value(idv);
    }
    if (max_id < 0 || max_id > 10000000) {
        og_hf_vocab_free(out);
        return og_fail(err, errlen, OG_ERR_FORMAT, "%s/tokenizer.json: implausible vocabulary", dir);
    }
    uint32_t n = (uint32_t)max_id + 1;
    if (pad_to && pad_to < n) {
        og_hf_vocab_free(out);
        return og_fail(err, errlen, OG_ERR_RANGE, "vocabulary has %u ids, more than --vocab %u", n, pad_to);
    }
    if (pad_to) n = pad_to;
    out->n_vocab = n;
    out->tokens = calloc(n, sizeof *out->tokens);
    out->types = calloc(n, sizeof *out->types);
    if (!out->tokens || !out->types) {
        og_hf_vocab_free(out);
        return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    }
    json_object_foreach(vocab, k, v) {
        int64_t id = json_integer_value(v);
        if (id < 0) continue;
        out->tokens[id] = (og_str){k, strlen(k)};
        out->types[id] = OG_TOKEN_NORMAL;
    }
    json_array_foreach(added, i, v) {
        int64_t id = json_integer_value(json_object_get(v, "id"));
        const char *content = json_string_value(json_object_get(v, "content"));
        if (id < 0 || !content) continue;
        if (json_is_true(json_object_get(v, "special")) || looks_special(content)) {
            out->tokens[id] = (og_str){content, strlen(content)};
            out->types[id] = OG_TOKEN_CONTROL;
        } else {
            const char *t = own(p, replace_sp_marker(content));
            if (!t) goto oom;
            out->tokens[id] = (og_str){t, strlen(t)};
            out->types[id] = OG_TOKEN_USER_DEFINED;
        }
    }
    for (uint32_t id = 0; id < n; id++) {
        if (out->types[id]) continue;
        char buf[32];
        snprintf(buf, sizeof buf, "[PAD%u]", id);
        const char *t = own(p, strdup(buf));
        if (!t) goto oom;
        out->tokens[id] = (og_str){t, strlen(t)};
        out->types[id] = OG_TOKEN_UNUSED;
    }
    /* Merges: "a b" strings, or [a, b] pairs in newer tokenizer.json files. */
    out->n_merges = json_array_size(merges);
    out->merges = calloc(out->n_merges ? out->n_merges : 1, sizeof *out->merges);
    if (!out->merges) goto oom;
    json_array_foreach(merges, i, v) {
        if (json_is_string(v)) {
            out->merges[i] = (og_str){json_string_value(v), json_string_length(v)};
        } else if (json_is_array(v) && json_array_size(v) == 2) {
            const char *a = json_string_value(json_array_get(v, 0)), *b = json_string_value(json_array_get(v, 1));
            if (!a || !b) goto bad_merge;
            size_t la = strlen(a), lb = strlen(b);
            char *s = malloc(la + lb + 2);
            if (!s) goto oom;
            memcpy(s, a, la);
            s[la] = ' ';
            memcpy(s + la + 1, b, lb + 1);
            if (!own(p, s)) goto oom;
            out->merges[i] = (og_str){s, la + lb + 1};
        } else {
            goto bad_merge;
        }
    }
    /* Special ids and flags from tokenizer_config.json, looked up by text. */
    const char *bos = token_content(json_object_get(p->cfg, "bos_token"));
    const char *eos = token_content(json_object_get(p->cfg, "eos_token"));
    const char *pad = token_content(json_object_get(p->cfg, "pad_token"));
    out->bos_id = out->eos_id = out->pad_id = UINT32_MAX;
    for (uint32_t id = 0; id < n; id++) {
        const og_str *t = &out->tokens[id];
        if (bos && out->bos_id == UINT32_MAX && t->n == strlen(bos) && !memcmp(t->s, bos, t->n)) out->bos_id = id;
        if (eos && out->eos_id == UINT32_MAX && t->n == strlen(eos) && !memcmp(t->s, eos, t->n)) out->eos_id = id;
        if (pad && out->pad_id == UINT32_MAX && t->n == strlen(pad) && !memcmp(t->s, pad, t->n)) out->pad_id = id;
    }
    out->add_bos = json_is_true(json_object_get(p->cfg, "add_bos_token"));
    out->add_eos = json_is_true(json_object_get(p->cfg, "add_eos_token"));
    json_t *tmpl = json_object_get(p->cfg, "chat_template");
    if (json_is_string(tmpl)) out->chat_template = (og_str){json_string_value(tmpl), json_string_length(tmpl)};
    return OG_OK;
bad_merge:
    og_hf_vocab_free(out);
    return og_fail(err, errlen, OG_ERR_FORMAT, "%s/tokenizer.json: merge %zu is neither \"a b\" nor [a, b]", dir, i);
oom:
    og_hf_vocab_free(out);
    return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory reading the tokenizer");
}

void og_hf_vocab_free(og_hf_vocab *v) {
    priv *p = v->priv;
    if (p) {
        for (size_t i = 0; i < p->n_owned; i++) free(p->owned[i]);
        free(p->owned);
        json_decref(p->tok);
        json_decref(p->cfg);
        free(p);
    }
    free(v->tokens);
    free(v->types);
    free(v->merges);
    memset(v, 0, sizeof *v);
}
