/* onegpu sampler: turns one position's logits into a token, with the controls of
 * the OpenAI API (shared/spec/openai-api.md §9) plus top-k, min-p and llama.cpp's
 * repetition penalty. One sampler per sequence: it owns that sequence's RNG and
 * token counts, so sequences never share random state. */
#ifndef OG_SAMPLER_H
#define OG_SAMPLER_H

#include "og_base.h"

typedef struct og_sampler_params {
    float temperature;       /* 0 = greedy (argmax; ties to the lowest id) */
    int top_k;               /* keep the k most likely; 0 = off */
    float top_p;             /* nucleus: smallest set with mass >= top_p; 1 = off */
    float min_p;             /* drop tokens with p < min_p * p_max; 0 = off */
    float presence_penalty;  /* OpenAI: logit -= presence * (count > 0) */
    float frequency_penalty; /* OpenAI: logit -= frequency * count */
    float repeat_penalty;    /* llama.cpp: positive logits / r, negative * r, over the last repeat_last_n; 1 = off */
    int repeat_last_n;
    const int32_t *bias_ids; /* logit_bias: added to these ids' logits */
    const float *bias_values;
    int n_bias;
    uint64_t seed;
} og_sampler_params;

/* Defaults: temperature 1, top_p 1, everything else off, seed 0. */
og_sampler_params og_sampler_defaults(void);

typedef struct og_sampler og_sampler;

/* Errors: OG_ERR_INVALID_ARG naming the bad parameter (temperature < 0, top_p
 * outside (0, 1], min_p outside [0, 1], a bias id outside the vocabulary,
 * penalties not finite), OG_ERR_NOMEM. */
og_status og_sampler_create(const og_sampler_params *p, int32_t n_vocab, og_sampler **out, char *err, size_t errlen);
void og_sampler_free(og_sampler *s);

typedef struct og_token_logprob {
    int32_t id;
    float logprob;
} og_token_logprob;

/* Samples from logits[n_vocab] (modified in place: penalties and bias applied).
 * *logprob (may be NULL) gets the chosen token's log-probability under the
 * model's distribution after penalties and bias, at temperature 1 (what the
 * API's logprobs report); top[0..n_top) the n_top most likely tokens under the
 * same distribution, most likely first. Then counts the token for the penalties
 * (og_sampler_accept is implied). Never fails. */
int32_t og_sampler_sample(og_sampler *s, float *logits, float *logprob, og_token_logprob *top, int n_top);

/* log-softmax of logits[n_vocab] at id, accumulated in double as
 * og_sampler_sample's log-probs (the same bits for the same logits): the
 * log-prob of a forced token. Never fails (id must be in range). */
float og_sampler_logprob(const float *logits, int32_t n_vocab, int32_t id);

/* Counts a token that was not sampled (prompt tokens for the repetition
 * penalty, or a forced token). */
void og_sampler_accept(og_sampler *s, int32_t token);

#endif
