/* Sampling chain (openai-api.md §9): penalties -> logit bias -> temperature ->
 * top-k -> top-p -> min-p -> draw with the sequence's own RNG (xoshiro256**,
 * Blackman & Vigna 2018, seeded through splitmix64). */
#include "og_sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct og_sampler {
    og_sampler_params p;
    int32_t n_vocab;
    int32_t *bias_ids;
    float *bias_values;
    uint32_t *count;      /* [n_vocab] tokens generated (and accepted) so far */
    int32_t *recent;      /* ring of the last repeat_last_n tokens */
    int n_recent, recent_pos;
    uint64_t rng[4];
    int32_t *idx;         /* scratch [n_vocab] */
    float *prob;          /* scratch [n_vocab] */
};

og_sampler_params og_sampler_defaults(void) {
    return (og_sampler_params){.temperature = 1.0f, .top_p = 1.0f, .repeat_penalty = 1.0f, .repeat_last_n = 64};
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
static uint64_t next_u64(uint64_t s[4]) {
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

og_status og_sampler_create(const og_sampler_params *p, int32_t n_vocab, og_sampler **out, char *err, size_t errlen) {
    *out = NULL;
    if (n_vocab <= 0) return og_fail(err, errlen, OG_ERR_INVALID_ARG, "empty vocabulary");
    if (!(p->temperature >= 0) || !isfinite(p->temperature))
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "temperature must be a finite number >= 0");
    if (!(p->top_p > 0 && p->top_p <= 1)) return og_fail(err, errlen, OG_ERR_INVALID_ARG, "top_p must be in (0, 1]");
    if (!(p->min_p >= 0 && p->min_p <= 1)) return og_fail(err, errlen, OG_ERR_INVALID_ARG, "min_p must be in [0, 1]");
    if (p->top_k < 0) return og_fail(err, errlen, OG_ERR_INVALID_ARG, "top_k must be >= 0");
    if (!isfinite(p->presence_penalty) || !isfinite(p->frequency_penalty) || !(p->repeat_penalty > 0) ||
        !isfinite(p->repeat_penalty) || p->repeat_last_n < 0)
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "penalties must be finite (repeat_penalty > 0)");
    for (int i = 0; i < p->n_bias; i++) {
        if (p->bias_ids[i] < 0 || p->bias_ids[i] >= n_vocab)
            return og_fail(err, errlen, OG_ERR_INVALID_ARG, "logit_bias token id %d is outside the vocabulary (0..%d)",
                           p->bias_ids[i], n_vocab - 1);
        if (!isfinite(p->bias_values[i]))
            return og_fail(err, errlen, OG_ERR_INVALID_ARG, "logit_bias value for %d is not finite", p->bias_ids[i]);
    }
    og_sampler *s = calloc(1, sizeof *s);
    if (!s) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    s->p = *p;
    s->n_vocab = n_vocab;
    s->count = calloc((size_t)n_vocab, sizeof *s->count);
    s->idx = malloc((size_t)n_vocab * sizeof *s->idx);
    s->prob = malloc((size_t)n_vocab * sizeof *s->prob);
    s->recent = malloc((size_t)(p->repeat_last_n ? p->repeat_last_n : 1) * sizeof *s->recent);
    s->bias_ids = malloc((size_t)(p->n_bias ? p->n_bias : 1) * sizeof *s->bias_ids);
    s->bias_values = malloc((size_t)(p->n_bias ? p->n_bias : 1) * sizeof *s->bias_values);
    if (!s->count || !s->idx || !s->prob || !s->recent || !s->bias_ids || !s->bias_values) {
        og_sampler_free(s);
        return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    }
    if (p->n_bias) {
        memcpy(s->bias_ids, p->bias_ids, (size_t)p->n_bias * sizeof *s->bias_ids);
        memcpy(s->bias_values, p->bias_values, (size_t)p->n_bias * sizeof *s->bias_values);
    }
    s->p.bias_ids = s->bias_ids;
    s->p.bias_values = s->bias_values;
    uint64_t sm = p->seed;
    for (int i = 0; i < 4; i++) s->rng[i] = og_splitmix64(&sm);
    *out = s;
    return OG_OK;
}

void og_sampler_free(og_sampler *s) {
    if (!s) return;
    free(s->count);
    free(s->idx);
    free(s->prob);
    free(s->recent);
    free(s->bias_ids);
    free(s->bias_values);
    free(s);
}

void og_sampler_accept(og_sampler *s, int32_t t) {
    if (t < 0 || t >= s->n_vocab) return;
    s->count[t]++;
    if (s->p.repeat_last_n > 0) {
        s->recent[s->recent_pos] = t;
        s->recent_pos = (s->recent_pos + 1) % s->p.repeat_last_n;
        if (s->n_recent < s->p.repeat_last_n) s->n_recent++;
    }
}

static void apply_penalties(og_sampler *s, float *logits) {
    const og_sampler_params *p = &s->p;
    if (p->repeat_penalty != 1.0f) {
        /* each distinct recent token once */
        for (int i = 0; i < s->n_recent; i++) {
            int32_t t = s->recent[i];
            bool seen = false;
            for (int j = 0; j < i && !seen; j++) seen = s->recent[j] == t;
            if (seen) continue;
            logits[t] = logits[t] > 0 ? logits[t] / p->repeat_penalty : logits[t] * p->repeat_penalty;
        }
    }
    if (p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f)
        for (int32_t t = 0; t < s->n_vocab; t++)
            if (s->count[t]) logits[t] -= (float)s->count[t] * p->frequency_penalty + p->presence_penalty;
    for (int i = 0; i < p->n_bias; i++) logits[p->bias_ids[i]] += p->bias_values[i];
}

/* log-sum-exp of logits, max-shifted, accumulated in double */
static double log_norm(const float *logits, int32_t n, float *max_out) {
    float max = -INFINITY;
    for (int32_t i = 0; i < n; i++)
        if (logits[i] > max) max = logits[i];
    double sum = 0;
    for (int32_t i = 0; i < n; i++) sum += exp((double)logits[i] - max);
    *max_out = max;
    return log(sum);
}

float og_sampler_logprob(const float *logits, int32_t n_vocab, int32_t id) {
    float max;
    double lse = log_norm(logits, n_vocab, &max);
    return (float)((double)logits[id] - max - lse);
}

static int cmp_desc(const void *a, const void *b, void *ctx) {
    const float *l = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (l[x] != l[y]) return l[x] > l[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* The m best ids by logit (ties: lower id first) into s->idx[0..m), sorted: a
 * bounded min-heap over the vocabulary, O(V log m), instead of sorting all V. */
static int32_t top_m(og_sampler *s, const float *l, int32_t m) {
    int32_t *h = s->idx, n = 0; /* heap of the best so far; h[0] = the worst of them */
    for (int32_t i = 0; i < s->n_vocab; i++) {
        if (n == m) {
            int32_t w = h[0];
            if (!(l[i] > l[w] || (l[i] == l[w] && i < w))) continue;
            h[0] = i;
        } else {
            h[n++] = i;
            for (int32_t c = n - 1; c > 0;) { /* sift up */
                int32_t p = (c - 1) / 2;
                if (cmp_desc(&h[c], &h[p], (void *)l) <= 0) break; /* h[c] is not worse */
                int32_t t = h[c];
                h[c] = h[p];
                h[p] = t;
                c = p;
            }
            continue;
        }
        for (int32_t c = 0;;) { /* sift down the new root */
            int32_t a = 2 * c + 1, b = a + 1, w = c;
            if (a < n && cmp_desc(&h[a], &h[w], (void *)l) > 0) w = a;
            if (b < n && cmp_desc(&h[b], &h[w], (void *)l) > 0) w = b;
            if (w == c) break;
            int32_t t = h[c];
            h[c] = h[w];
            h[w] = t;
            c = w;
        }
    }
    qsort_r(h, (size_t)n, sizeof *h, cmp_desc, (void *)l);
    return n;
}

/* Candidates worth sorting: ids whose logit is within `span` of the maximum
 * (probability ratio e^-span at temperature 1) or all ids when fewer than `need`
 * qualify. Sorted by logit, then id. Returns their number. */
static int32_t sorted_candidates(og_sampler *s, const float *logits, float max, float span, int32_t need) {
    int32_t m = 0;
    for (int32_t i = 0; i < s->n_vocab; i++)
        if (logits[i] >= max - span) s->idx[m++] = i;
    if (m < need) {
        m = 0;
        for (int32_t i = 0; i < s->n_vocab; i++) s->idx[m++] = i;
    }
    qsort_r(s->idx, (size_t)m, sizeof *s->idx, cmp_desc, (void *)logits);
    return m;
}

int32_t og_sampler_sample(og_sampler *s, float *logits, float *logprob, og_token_logprob *top, int n_top) {
    const og_sampler_params *p = &s->p;
    const int32_t n = s->n_vocab;
    apply_penalties(s, logits);
    float max = -INFINITY;
    double lse = 0;
    if (logprob || n_top > 0) {
        lse = log_norm(logits, n, &max); /* only the API's log-probs need the whole normalizer */
    } else {
        for (int32_t i = 0; i < n; i++)
            if (logits[i] > max) max = logits[i];
    }
    int32_t chosen = 0, n_sorted = 0;
    if (p->temperature == 0.0f) {
        for (int32_t i = 1; i < n; i++)
            if (logits[i] > logits[chosen]) chosen = i; /* first maximum: lowest id */
    } else {
        /* Tokens more than 40 T below the best have probability < e^-40 relative
         * to it: leaving them out of the draw changes nothing measurable and
         * avoids sorting 129k logits per token. */
        if (p->top_k > 0 && p->top_k < n) /* top-k first: only k ids are ever sorted */
            n_sorted = top_m(s, logits, p->top_k > n_top ? p->top_k : n_top);
        else
            n_sorted = sorted_candidates(s, logits, max, 40.0f * p->temperature, n_top > 0 ? n_top : 1);
        int32_t n_cand = p->top_k > 0 && p->top_k < n_sorted ? p->top_k : n_sorted;
        const double inv_t = 1.0 / p->temperature;
        double sum = 0;
        for (int32_t i = 0; i < n_cand; i++) {
            double e = exp(((double)logits[s->idx[i]] - max) * inv_t);
            s->prob[i] = (float)e;
            sum += e;
        }
        if (p->top_p < 1.0f) { /* smallest prefix with mass >= top_p */
            double acc = 0;
            for (int32_t i = 0; i < n_cand; i++) {
                acc += s->prob[i] / sum;
                if (acc >= p->top_p) {
                    n_cand = i + 1;
                    break;
                }
            }
        }
        if (p->min_p > 0.0f) {
            float floor_p = p->min_p * s->prob[0];
            int32_t keep = 1;
            while (keep < n_cand && s->prob[keep] >= floor_p) keep++;
            n_cand = keep;
        }
        double total = 0;
        for (int32_t i = 0; i < n_cand; i++) total += s->prob[i];
        double r = (double)(next_u64(s->rng) >> 11) * (1.0 / 9007199254740992.0) * total;
        chosen = s->idx[n_cand - 1];
        for (int32_t i = 0; i < n_cand; i++) {
            r -= s->prob[i];
            if (r < 0) {
                chosen = s->idx[i];
                break;
            }
        }
    }
    if (logprob) *logprob = (float)((double)logits[chosen] - max - lse);
    if (n_top > 0 && top) {
        if (n_sorted < n_top) n_sorted = top_m(s, logits, n_top);
        for (int i = 0; i < n_top && i < n_sorted; i++)
            top[i] = (og_token_logprob){s->idx[i], (float)((double)logits[s->idx[i]] - max - lse)};
    }
    og_sampler_accept(s, chosen);
    return chosen;
}
