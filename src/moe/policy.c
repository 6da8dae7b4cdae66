/* Hot-set policies and the migrator, replayed on routing traces (og_policy.h). */
#include "og_policy.h"
#include "moe_json.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static double unit(uint64_t *s) { return (double)(og_splitmix64(s) >> 11) * (1.0 / 9007199254740992.0); }

og_status og_trace_synth(const og_trace_params *p, og_trace *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (!p->n_layer || !p->n_expert || !p->k || !p->n_step || !p->tokens_per_step || p->k > p->n_expert ||
        p->n_expert > 65536 || p->k > 256 || !p->window || !p->phase)
        return og_fail(err, errlen, OG_ERR_INVALID_ARG,
                       "trace: sizes must be > 0, k <= 256 and k <= n_expert <= 65536, window and phase >= 1");
    if (!(p->skew >= 0 && p->skew <= 10) || !(p->locality >= 0 && p->locality <= 1))
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "trace: skew must be in [0, 10] and locality in [0, 1]");
    const double total = (double)p->n_step * p->n_layer * p->tokens_per_step * p->k;
    if (total > (double)(1u << 27))
        return og_fail(err, errlen, OG_ERR_INVALID_ARG,
                       "trace: %.0f selections (steps x layers x tokens x k) is above the 2^27 limit", total);
    const uint32_t L = p->n_layer, E = p->n_expert, K = p->k, T = p->tokens_per_step, W = p->window;
    const size_t n_sel = (size_t)p->n_step * L * T * K;
    uint16_t *sel = malloc(n_sel * sizeof *sel);
    double *cdf = malloc((size_t)E * sizeof *cdf);
    uint32_t *perm = malloc((size_t)L * E * sizeof *perm);
    uint16_t *ws = malloc((size_t)T * L * W * K * sizeof *ws); /* [seq][layer][W*K] ring of recent picks */
    uint32_t *ws_n = calloc((size_t)T * L, sizeof *ws_n), *ws_head = calloc((size_t)T * L, sizeof *ws_head);
    if (!sel || !cdf || !perm || !ws || !ws_n || !ws_head) {
        free(sel), free(cdf), free(perm), free(ws), free(ws_n), free(ws_head);
        return og_fail(err, errlen, OG_ERR_NOMEM, "trace: out of memory (%zu selections)", n_sel);
    }
    uint64_t rng = p->seed ^ 0x5eed;
    double acc = 0;
    for (uint32_t r = 0; r < E; r++) cdf[r] = acc += 1.0 / pow((double)r + 1.0, p->skew);
    for (uint32_t r = 0; r < E; r++) cdf[r] /= acc;
    uint64_t mrng = p->model_seed ^ 0x30de1;
    for (uint32_t l = 0; l < L; l++) { /* which expert has popularity rank r in layer l */
        uint32_t *pl = perm + (size_t)l * E;
        for (uint32_t e = 0; e < E; e++) pl[e] = e;
        for (uint32_t e = E - 1; e > 0; e--) {
            uint32_t j = (uint32_t)(og_splitmix64(&mrng) % (e + 1));
            uint32_t t = pl[e];
            pl[e] = pl[j], pl[j] = t;
        }
    }
    for (uint32_t s = 0; s < p->n_step; s++) {
        for (uint32_t q = 0; q < T; q++) {
            if ((s + q * (p->phase / T + 1)) % p->phase == 0) /* staggered topic changes */
                for (uint32_t l = 0; l < L; l++) ws_n[(size_t)q * L + l] = ws_head[(size_t)q * L + l] = 0;
            for (uint32_t l = 0; l < L; l++) {
                const size_t wi = (size_t)q * L + l;
                uint16_t *w = ws + wi * W * K;
                uint16_t *o = sel + (((size_t)s * L + l) * T + q) * K;
                for (uint32_t j = 0; j < K; j++) {
                    uint16_t e = 0;
                    for (int tries = 0;; tries++) {
                        if (tries >= 64) { /* all candidates taken: the first free expert */
                            for (e = 0;; e++) {
                                bool dup = false;
                                for (uint32_t i = 0; i < j; i++) dup |= o[i] == e;
                                if (!dup) break;
                            }
                            break;
                        }
                        if (ws_n[wi] && unit(&rng) < p->locality) {
                            e = w[og_splitmix64(&rng) % ws_n[wi]];
                        } else {
                            double u = unit(&rng);
                            uint32_t lo = 0, hi = E - 1;
                            while (lo < hi) {
                                uint32_t mid = (lo + hi) / 2;
                                if (cdf[mid] < u) lo = mid + 1;
                                else hi = mid;
                            }
                            e = (uint16_t)perm[(size_t)l * E + lo];
                        }
                        bool dup = false;
                        for (uint32_t i = 0; i < j; i++) dup |= o[i] == e;
                        if (!dup) break;
                    }
                    o[j] = e;
                }
                for (uint32_t j = 0; j < K; j++) { /* remember this step's picks */
                    w[ws_head[wi]] = o[j];
                    ws_head[wi] = (ws_head[wi] + 1) % (W * K);
                    if (ws_n[wi] < W * K) ws_n[wi]++;
                }
            }
        }
    }
    free(cdf), free(perm), free(ws), free(ws_n), free(ws_head);
    *out = (og_trace){L, E, K, p->n_step, T, sel};
    return OG_OK;
}

void og_trace_free(og_trace *t) {
    free(t->sel);
    t->sel = NULL;
}

og_status og_trace_write(const char *path, const og_trace *t, char *err, size_t errlen) {
    const size_t n = (size_t)t->n_step * t->n_layer * t->tokens_per_step * t->k;
    json_t *sel = json_array();
    for (size_t i = 0; i < n && sel; i++) json_array_append_new(sel, json_integer(t->sel[i]));
    json_t *o = sel ? json_pack("{s:I, s:I, s:I, s:I, s:o}", "n_layer", (json_int_t)t->n_layer, "n_expert",
                                (json_int_t)t->n_expert, "k", (json_int_t)t->k, "tokens_per_step",
                                (json_int_t)t->tokens_per_step, "sel", sel)
                    : NULL;
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!text) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    og_status st = og_write_file_atomic(path, text, strlen(text), err, errlen);
    free(text);
    return st;
}

static bool get_u32(json_t *o, const char *key, uint32_t max, uint32_t *out) {
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > max) return false;
    *out = (uint32_t)json_integer_value(v);
    return true;
}

og_status og_trace_read(const char *path, og_trace *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    json_t *o;
    og_status st = og_moe_json_load(path, 1u << 30, &o, err, errlen);
    if (st) return st;
    og_trace t = {0};
    json_t *sel = json_object_get(o, "sel");
    if (!get_u32(o, "n_layer", 4096, &t.n_layer) || !get_u32(o, "n_expert", 65536, &t.n_expert) ||
        !get_u32(o, "k", t.n_expert ? t.n_expert : 1, &t.k) || !get_u32(o, "tokens_per_step", 1u << 20, &t.tokens_per_step) ||
        !json_is_array(sel)) {
        json_decref(o);
        return og_fail(err, errlen, OG_ERR_FORMAT,
                       "%s: needs n_layer (1..4096), n_expert (1..65536), k (1..n_expert), tokens_per_step and a sel array",
                       path);
    }
    const size_t per_step = (size_t)t.n_layer * t.tokens_per_step * t.k, n = json_array_size(sel);
    if (n == 0 || n % per_step) {
        json_decref(o);
        return og_fail(err, errlen, OG_ERR_FORMAT, "%s: sel has %zu ids, not a positive multiple of %zu (layers x tokens x k)",
                       path, n, per_step);
    }
    t.n_step = (uint32_t)(n / per_step);
    t.sel = malloc(n * sizeof *t.sel);
    if (!t.sel) {
        json_decref(o);
        return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(sel, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= t.n_expert) {
            free(t.sel);
            json_decref(o);
            return og_fail(err, errlen, OG_ERR_FORMAT, "%s: sel[%zu] is not an expert id below %u", path, i, t.n_expert);
        }
        t.sel[i] = (uint16_t)json_integer_value(v);
    }
    json_decref(o);
    *out = t;
    return OG_OK;
}

static const char *const policy_names[OG_POLICY_COUNT] = {"lru", "decay", "static", "oracle"};
const char *og_policy_name(og_policy_kind k) { return (unsigned)k < OG_POLICY_COUNT ? policy_names[k] : "?"; }
int og_policy_parse(const char *name) {
    for (int k = 0; k < OG_POLICY_COUNT; k++)
        if (!strcmp(name, policy_names[k])) return k;
    return -1;
}

bool og_migrator_pick(uint32_t E, const uint8_t *res, const double *score, const uint64_t *pinned, uint64_t now,
                      const uint32_t *demand, uint32_t *in_out, uint32_t *out_out) {
    uint32_t in = UINT32_MAX, out = UINT32_MAX;
    for (uint32_t e = 0; e < E; e++) {
        if (!res[e]) {
            if (demand && !demand[e]) continue; /* Belady fetches on demand: only what was just missed */
            if (in == UINT32_MAX || score[e] > score[in]) in = e;
        } else if (pinned[e] <= now && (out == UINT32_MAX || score[e] < score[out])) {
            out = e;
        }
    }
    if (in == UINT32_MAX || out == UINT32_MAX || !(score[in] > score[out])) return false;
    *in_out = in;
    *out_out = out;
    return true;
}

typedef struct ranked {
    uint64_t count;
    uint32_t e;
} ranked;
static int cmp_ranked(const void *a, const void *b) { /* more selections first, then lower index */
    const ranked *x = a, *y = b;
    if (x->count != y->count) return x->count > y->count ? -1 : 1;
    return x->e < y->e ? -1 : x->e > y->e;
}

/* og_hot_set with the caller's scratch order[E]. */
static void hot_set(uint32_t E, uint32_t S, const uint64_t *counts, ranked *order, uint8_t *res) {
    memset(res, 0, E);
    for (uint32_t e = 0; e < E; e++) order[e] = (ranked){counts ? counts[e] : 0, e};
    qsort(order, E, sizeof *order, cmp_ranked);
    for (uint32_t j = 0; j < S && j < E; j++) res[order[j].e] = 1;
}

og_status og_hot_set(uint32_t E, uint32_t S, const uint64_t *counts, uint8_t *res) {
    ranked *order = malloc(((size_t)E + 1) * sizeof *order);
    if (!order) return OG_ERR_NOMEM;
    hot_set(E, S, counts, order, res);
    free(order);
    return OG_OK;
}

og_status og_policy_simulate(const og_trace *t, og_policy_kind kind, const og_migrator_params *mp,
                             const uint64_t *profile, og_sim_result *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    const uint32_t E = t->n_expert, S = mp->slots_per_layer, N = t->n_step, TK = t->tokens_per_step * t->k;
    if (S > E) return og_fail(err, errlen, OG_ERR_INVALID_ARG, "%u slots per layer but %u experts", S, E);
    if ((unsigned)kind >= OG_POLICY_COUNT) return og_fail(err, errlen, OG_ERR_INVALID_ARG, "unknown policy");
    uint32_t *cnt = malloc((size_t)N * E * sizeof *cnt);          /* [step][expert] of one layer */
    uint32_t *next_use = kind == OG_POLICY_ORACLE ? malloc((size_t)(N + 1) * E * sizeof *next_use) : NULL;
    double *score = malloc((size_t)E * sizeof *score);
    uint8_t *res = malloc(E);
    uint64_t *usable = malloc((size_t)E * sizeof *usable), *pinned = malloc((size_t)E * sizeof *pinned);
    ranked *order = malloc((size_t)E * sizeof *order);
    if (!cnt || (kind == OG_POLICY_ORACLE && !next_use) || !score || !res || !usable || !pinned || !order) {
        free(cnt), free(next_use), free(score), free(res), free(usable), free(pinned), free(order);
        return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    }
    for (uint32_t l = 0; l < t->n_layer; l++) {
        memset(cnt, 0, (size_t)N * E * sizeof *cnt);
        for (uint32_t s = 0; s < N; s++) {
            const uint16_t *o = t->sel + ((size_t)s * t->n_layer + l) * TK;
            for (uint32_t i = 0; i < TK; i++) cnt[(size_t)s * E + o[i]]++;
        }
        if (next_use) { /* next_use[s][e]: first step >= s selecting e (N: never) */
            for (uint32_t e = 0; e < E; e++) next_use[(size_t)N * E + e] = N;
            for (uint32_t s = N; s-- > 0;)
                for (uint32_t e = 0; e < E; e++)
                    next_use[(size_t)s * E + e] = cnt[(size_t)s * E + e] ? s : next_use[(size_t)(s + 1) * E + e];
        }
        /* initial hot set: the profile's top S (ties: lower index), usable at once */
        const uint64_t *pl = profile ? profile + (size_t)l * E : NULL;
        hot_set(E, S, pl, order, res);
        for (uint32_t e = 0; e < E; e++) {
            usable[e] = pinned[e] = 0;
            score[e] = kind == OG_POLICY_STATIC && pl ? (double)pl[e] : kind == OG_POLICY_LRU ? -1.0 : 0.0;
        }
        for (uint32_t s = 0; s < N; s++) {
            const uint32_t *c = cnt + (size_t)s * E;
            for (uint32_t e = 0; e < E; e++) {
                out->selections += c[e];
                if (res[e] && usable[e] <= s) out->hits += c[e];
            }
            /* the policy sees this step, then the migrator decides for later steps */
            const uint64_t lands = (uint64_t)s + 1 + mp->copy_delay_steps;
            for (uint32_t e = 0; e < E; e++) {
                switch (kind) {
                case OG_POLICY_LRU: if (c[e]) score[e] = (double)s; break;
                case OG_POLICY_DECAY: score[e] = mp->decay * score[e] + c[e]; break;
                case OG_POLICY_STATIC: break;
                case OG_POLICY_ORACLE: {
                    /* a resident expert is lost from the next step on (its slot is
                     * overwritten); a newcomer only helps once its copy lands */
                    uint64_t from = res[e] ? (uint64_t)s + 1 : lands;
                    uint32_t nu = from <= N ? next_use[(size_t)from * E + e] : N;
                    /* sooner next use first; within one step, more selections first */
                    score[e] = nu >= N ? -1e18 : -(double)nu + (double)cnt[(size_t)nu * E + e] / (TK + 1.0);
                    break;
                }
                default: break;
                }
            }
            if (kind == OG_POLICY_STATIC || s + 1 == N) continue;
            for (uint32_t m = 0; m < mp->swaps_per_step; m++) {
                uint32_t in, outx;
                if (!og_migrator_pick(E, res, score, pinned, s, kind == OG_POLICY_ORACLE ? c : NULL, &in, &outx)) break;
                res[outx] = 0;
                res[in] = 1;
                usable[in] = lands;
                /* the oracle knows the future: hysteresis would only hold it back */
                pinned[in] = kind == OG_POLICY_ORACLE ? lands : lands + mp->min_residency;
                out->migrations++;
            }
        }
    }
    out->device_share = out->selections ? (double)out->hits / (double)out->selections : 0.0;
    free(cnt), free(next_use), free(score), free(res), free(usable), free(pinned), free(order);
    return OG_OK;
}
