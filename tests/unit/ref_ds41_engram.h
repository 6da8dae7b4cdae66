/* The Engram hash of deepseek41 (shared/spec/deepseek4.md §4.3.2), written
 * from the spec for the double-precision reference (ref_deepseek41.c) and
 * its hand-computed test (test_ds41_engram.c); no code shared with
 * src/model. Tests only: static, no allocation. */
#ifndef REF_DS41_ENGRAM_H
#define REF_DS41_ENGRAM_H

#include <stdint.h>

#define REF_ENGRAM_MAX_NGRAM 8 /* max_ngram_size this reference handles (V4.1: 4) */

typedef struct ref_engram_hash {
    int max_ngram;             /* engram.max_ngram_size: n-grams of 2..max_ngram tokens (V4.1: 4) */
    int n_head;                /* engram.head_count: hashes per n-gram size (V4.1: 8) */
    const uint64_t *mult;      /* [max_ngram] this layer's multipliers m_0.. (engram.multipliers) */
    const uint64_t *primes;    /* [(max_ngram - 1) n_head] this layer's primes, bucket order */
    const uint64_t *offsets;   /* [(max_ngram - 1) n_head] this layer's row offsets, bucket order */
    const int32_t *token_map;  /* [n_map] raw token id -> compressed id (engram.token_map) */
    int n_map;
    int pad_id;                /* engram.pad_id: the RAW pad token id (lead's decision 3) */
} ref_engram_hash;

/* The (max_ngram - 1) n_head table rows of position p of tok[0..p], bucket
 * b = (s-1) n_head + k for n-gram size s+1 (s = 1..max_ngram-1) and head k:
 *   c_s = token_map[tok[p-s]], or token_map[pad_id] before the sequence start
 *   h_1 = (c_0 m_0) XOR (c_1 m_1), h_s = h_{s-1} XOR (c_s m_s)   (u64)
 *   row_b = h_s mod primes[b] + offsets[b]
 * Returns 0, or -1 when a token (or pad_id) is outside the map or maps to a
 * negative id, or a prime is 0. */
static inline int ref_engram_rows(const ref_engram_hash *e, const int *tok, int p, uint64_t *rows) {
    uint64_t c[REF_ENGRAM_MAX_NGRAM];
    if (e->max_ngram < 2 || e->max_ngram > REF_ENGRAM_MAX_NGRAM) return -1;
    for (int s = 0; s < e->max_ngram; s++) {
        const int raw = p - s >= 0 ? tok[p - s] : e->pad_id; /* before the start: the pad id (decision 3) */
        if (raw < 0 || raw >= e->n_map || e->token_map[raw] < 0) return -1;
        c[s] = (uint64_t)e->token_map[raw];
    }
    uint64_t h = c[0] * e->mult[0];
    for (int s = 1; s < e->max_ngram; s++) {
        h ^= c[s] * e->mult[s];
        for (int k = 0; k < e->n_head; k++) {
            const int b = (s - 1) * e->n_head + k;
            if (!e->primes[b]) return -1;
            rows[b] = h % e->primes[b] + e->offsets[b];
        }
    }
    return 0;
}

#endif
