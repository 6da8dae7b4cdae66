/* onegpu engine: sequences, the scheduler (continuous batching + chunked
 * prefill) and what happens to each generated token (sampling, detokenizing,
 * stop strings, finish reasons). One scheduler thread owns the model's forward
 * calls; any number of other threads submit sequences and read their output.
 *
 * A scheduler step (DESIGN.md "Data flow"): every decoding sequence contributes
 * its last token, then the rest of the step's batch_tokens is shared fairly
 * among the prefilling sequences (og_prefill_share: equal shares, a share a
 * sequence does not need goes to the others), so a short prompt admitted behind
 * a long one is prefilled in its first step and samples its first token there,
 * instead of waiting for the whole long prompt; one og_model_forward_batch runs
 * them all; each sequence that produced logits samples its next token. A step
 * never holds more than batch_tokens tokens, so prompts delay the decoders by
 * at most one batch per step. A sequence is admitted at the start of a step, so
 * its first token comes at most two steps after og_engine_submit returns (the
 * step in flight, then its own) when a place is free and its prompt fits its
 * share. Between
 * steps the placement (if any) moves the hot set (og_placement_step); with
 * nothing to run it publishes the copies that completed (og_placement_idle). */
#ifndef OG_ENGINE_H
#define OG_ENGINE_H

#include "og_grammar.h"
#include "og_model.h"
#include "og_moe.h"
#include "og_placement.h"
#include "og_policy.h"
#include "og_sampler.h"
#include "og_tokenizer.h"

#define OG_ENGINE_MAX_STOP 4     /* stop strings per sequence (the OpenAI limit) */
#define OG_ENGINE_MAX_TOP 20     /* alternatives per position (top_logprobs limit) */

typedef struct og_engine og_engine;
typedef struct og_seq og_seq;

/* What on_step is told about one scheduler step. */
typedef struct og_engine_step {
    uint64_t step;                /* 1 for the first */
    int n_tok;                    /* tokens in the step */
    int n_prompt;                 /* of them prompt tokens (prefill chunks) */
    double seconds;               /* the forward call plus the placement step */
} og_engine_step;

typedef struct og_engine_config {
    const og_model *model;        /* not owned; outlives the engine */
    const og_tokenizer *tok;      /* not owned */
    og_run_ctx rc;                /* kernels, pool, numerics; with a placement, its stats and experts */
    og_placement *placement;      /* not owned, outlives the engine; stepped between forward steps and
                                     used only by the scheduler thread once started; NULL: none */
    /* Called on the scheduler thread after each forward step and its placement
     * step, before the step's tokens are sampled, without the engine's lock: it
     * may read the placement (the scheduler is its thread) but must not call the
     * engine. NULL: none. (onegpu run's speeds and --save-trace.) */
    void (*on_step)(void *arg, const og_engine_step *step);
    void *on_step_arg;
    int parallel;                 /* sequences decoding or prefilling at once (>= 1) */
    int batch_tokens;             /* tokens per forward step (>= parallel) */
    int ctx;                      /* positions per sequence (prompt + generated), <= the model's */
    int queue;                    /* sequences waiting for a place beyond `parallel` (>= 0) */
    bool no_prefix_cache;         /* true: no prefix sharing (--prefix-cache off); zero: on. The prefix
                                     cache: a sequence's full prompt blocks (OG_KV_BLOCK positions) are
                                     indexed by a chain hash of the token ids they hold and all ids before
                                     them, verified by the ids; a later prompt with the same leading blocks
                                     shares them read-only (refcounted) and prefills only the rest (at least
                                     one token: the last prompt position's logits are needed). Its last,
                                     partial block is its own. Unreferenced blocks stay cached in
                                     the KV pool (kv_blocks) until a sequence needs a block: the
                                     least recently used goes then (to the tiers when set).
                                     A model whose og_model_info.kv_paged is false but kv_snapshot true
                                     (deepseek4, deepseek41) keeps whole states instead (snap_cache.h): a
                                     prompt of more than OG_KV_BLOCK tokens leaves its state at n_prompt - 1
                                     and where it parts from the cached states' ids (its prefill chunks are
                                     cut there), a finished one its state at its end (prompt + fed-back
                                     tokens) when free room holds it (evicted first), each keyed by
                                     og_model_kv_key, the exact flag and a chain hash
                                     of the ids; admission restores the longest one the prompt starts with
                                     (og_kv_restore, n_pos < n_prompt). The states and the running
                                     sequences (each counted by og_model_info's formula at its prompt plus
                                     output) stay within parallel x one state of ctx positions, least
                                     recently used evicted first. Neither (kv_paged and kv_snapshot
                                     false): off whatever this says, logged once at create. */
    const og_logger *log;         /* not owned, outlives the engine; NULL: warnings to stderr */
    /* The KV pool (models whose og_model_info.kv_paged is true): ONE allocation
     * of kv_blocks blocks of og_model_info.kv_block_bytes, made at create on
     * rc.dev's memory (the host's without a device), from which every sequence
     * takes its blocks and in which the prefix cache keeps its unreferenced ones.
     * 0: og_engine_kv_blocks(parallel, ctx), what the planner charges (its KV
     * term), so `parallel` sequences always fit. Admission charges each
     * sequence the most blocks it may come to hold (ceil(min(n_prompt +
     * max_tokens - 1, ctx - 1) / OG_KV_BLOCK), ctx - 1 without max_tokens):
     * with fewer blocks, a request that does not fit beside the running ones
     * waits in the queue until they retire (so growing sequences never hold
     * the pool between them), and one that exceeds the whole pool ends with
     * an error saying so. */
    uint32_t kv_blocks;
    /* --cache-ram: bytes of host RAM that evicted full prefix-cache blocks (with
     * their chain keys) are copied to instead of being dropped (LRU), and copied
     * back into a pool block on a hit; 0: none. deepseek4 / deepseek41: evicted
     * whole states (with their ids) the same way, restored from there on a hit. */
    uint64_t cache_ram_bytes;
    /* --cache-dir: a directory where evicted blocks go (from RAM when both are
     * set, else from the pool), one file per block, written atomically by a
     * writer thread (never under the engine's lock), checked on start and on
     * lookup (kv_pool.h); the pool's cached blocks are written there when the
     * engine is freed, so a restart finds them. deepseek4 / deepseek41: one
     * file per evicted state, the cached states written at the end. NULL: none. */
    const char *cache_dir;
    uint64_t cache_dir_bytes;     /* the directory's bound, bytes; 0: OG_ENGINE_CACHE_DIR_BYTES */
} og_engine_config;

#define OG_ENGINE_CACHE_DIR_BYTES (16ull << 30) /* --cache-dir-size's default: 16 GiB */

/* The pool's blocks for parallel sequences of ctx positions each: parallel x
 * ceil(ctx / OG_KV_BLOCK), what og_plan_make charges for a paged cache. Cannot
 * fail (returns a count). */
static inline uint64_t og_engine_kv_blocks(int parallel, int ctx) {
    return (uint64_t)parallel * (((uint64_t)ctx + OG_KV_BLOCK - 1) / OG_KV_BLOCK);
}

/* Why a sequence ended (the API's finish_reason). */
typedef enum og_finish {
    OG_FINISH_NONE = 0,  /* still running */
    OG_FINISH_STOP,      /* end-of-generation token or a stop string */
    OG_FINISH_LENGTH,    /* max_tokens reached or the context is full */
    OG_FINISH_CANCEL,    /* released by its reader before the end */
    OG_FINISH_ERROR,     /* the engine failed (message in og_seq_out.error) */
} og_finish;

typedef struct og_seq_params {
    og_sampler_params sampling;   /* bias arrays are copied */
    int max_tokens;               /* tokens to generate; -1: until the context is full */
    const char *stop[OG_ENGINE_MAX_STOP];  /* NUL-terminated, non-empty; copied */
    int n_stop;
    int n_top;                    /* alternatives reported per token, 0..OG_ENGINE_MAX_TOP */
    bool logprobs;                /* report each token's log-probability */
    bool reproducible;            /* strata_reproducible "required": all its products (and attention
                                     scores) compute canonically whatever the engine's numerics, so its
                                     output never depends on placement, company or the CPU tier */
    const int32_t *forced;        /* teacher forcing: the first n_forced generated tokens are these ids
                                     (copied), not the sampled ones; each reports its own log-prob under
                                     the step's distribution (top: that distribution's), and an
                                     end-of-generation id among them does not end the sequence */
    int n_forced;
    bool report_eog;              /* the end-of-generation token that ends the sequence is reported as a
                                     token too (with its log-prob; no text): onegpu run --json lists it */
    og_grammar *grammar;          /* constrained decoding (response_format), or NULL; the sequence takes its
                                     own reference. Each step's logits are masked to the tokens that keep the
                                     output a prefix of the grammar; EOG only once it is complete. */
} og_seq_params;

/* One generated token as reported to the client. */
typedef struct og_tok_out {
    int32_t id;
    float logprob;                /* natural log, after bias and penalties, temperature 1 */
    uint32_t text_start;          /* byte offset of its text in the sequence's output */
    int n_top;
    og_token_logprob top[OG_ENGINE_MAX_TOP];
} og_tok_out;

/* What og_seq_take hands over: the output released since the last take. Text
 * is complete UTF-8 characters and never holds a prefix of a stop string that
 * might still match; tokens are those whose text starts in released text. */
typedef struct og_seq_out {
    char *text;                   /* malloc'ed, NUL-terminated (may be "") */
    size_t len;                   /* bytes */
    size_t text_offset;           /* byte offset of text in the whole output */
    og_tok_out *toks;             /* malloc'ed [n_toks] or NULL */
    int n_toks;
    og_finish finish;             /* NONE while more may come */
    int stop_index;               /* finish STOP by a stop string: its index in og_seq_params.stop (the one
                                     matched first in the text); -1 otherwise (EOG, or not ended) */
    int n_prompt, n_gen;          /* tokens (n_gen: generated so far, EOG excluded) */
    int n_cached;                 /* of the prompt's tokens, those read from the prefix cache (not prefilled) */
    bool admitted;                /* it left the queue: n_cached is final (the prefix lookup is done at
                                     admission, before its first step) */
    uint64_t step_submit;         /* scheduler steps done (og_engine_metrics.steps) when it was submitted */
    uint64_t step_first;          /* the step that sampled its first token (EOG too); 0: none yet */
    char error[256];              /* for OG_FINISH_ERROR */
} og_seq_out;
void og_seq_out_free(og_seq_out *o);

/* Counters for /metrics, read under the engine's lock. */
typedef struct og_engine_metrics {
    uint64_t seqs_admitted, seqs_finished, seqs_cancelled, seqs_rejected;
    uint64_t prompt_tokens, gen_tokens, steps;
    int queued, running;          /* now */
    uint64_t kv_blocks_used, kv_blocks_total; /* OG_KV_BLOCK positions each; total: the pool's; used:
                                                 the sequences' own blocks plus referenced cached ones */
    uint64_t kv_blocks_cached;    /* prefix-cache blocks no sequence references (kept for reuse, evictable) */
    uint64_t kv_blocks_shared;    /* prefix-cache blocks referenced by at least one sequence */
    uint64_t kv_blocks_free;      /* pool blocks on the free list (used + cached + free = total) */
    uint64_t kv_block_bytes;      /* bytes of one block (og_model_info.kv_block_bytes), 0 without a pool */
    uint64_t cache_ram_blocks, cache_ram_bytes;   /* --cache-ram: blocks held in host RAM now, their bytes */
    uint64_t cache_disk_blocks, cache_disk_bytes; /* --cache-dir: block files indexed now, their bytes */
    uint64_t cache_ram_restored, cache_disk_restored; /* blocks read back into the pool from each, in all */
    uint64_t cache_ram_stored, cache_disk_stored;     /* blocks put in each, in all */
    uint64_t cache_disk_skipped;  /* files refused (corrupt, truncated, another model's), in all */
    uint64_t cache_disk_errors;   /* block files that could not be written, in all */
    /* the same for deepseek4 / deepseek41's whole states (--cache-ram / --cache-dir) */
    uint64_t cache_ram_states, cache_ram_state_bytes;   /* states held in host RAM now, their payloads' bytes */
    uint64_t cache_disk_states, cache_disk_state_bytes; /* state files indexed now, their bytes */
    uint64_t cache_ram_states_restored, cache_disk_states_restored; /* states read back from each, in all */
    uint64_t cache_ram_states_stored, cache_disk_states_stored;     /* states put in each, in all */
    uint64_t cache_disk_states_skipped; /* state files refused (corrupt, truncated, foreign), in all */
    uint64_t cache_disk_states_errors;  /* state files that could not be written, in all */
    uint64_t cache_write_queue;   /* entries (blocks or states) waiting for the --cache-dir writer now */
    uint64_t cache_write_dropped; /* writes dropped because the writer's queue was full, in all */
    uint64_t prefix_hits;         /* sequences admitted with at least one cached block */
    uint64_t prefix_cached_tokens;/* prompt tokens read from the cache instead of prefilled, in all */
    uint64_t prefix_blocks_reused;/* cached blocks handed to admitted sequences, in all */
    uint64_t prefix_states;       /* a kv_snapshot model's prefix cache (deepseek4, deepseek41): whole states held */
    uint64_t prefix_state_bytes;  /* their bytes (og_kv_snap.bytes), within parallel x one state of ctx positions */
    double gen_tok_per_s;         /* generated tokens per second over the last ~10 s */
    double longest_step_s;        /* longest forward step so far, seconds */
    double forward_s;             /* seconds in forward steps, in all */
    double mask_s;                /* seconds computing grammar masks (og_grammar.h), in all */
    uint64_t masks;               /* grammar masks applied */
    bool placement;               /* the figures below are meaningful (a device holds experts) */
    uint64_t expert_routes, expert_hits, migrations, pcie_bytes, resident_experts; /* og_placement_stats' */
} og_engine_metrics;

/* Validates the configuration and allocates. Errors: OG_ERR_INVALID_ARG naming
 * the bad field, OG_ERR_NOMEM. The scheduler thread starts with og_engine_start. */
og_status og_engine_create(const og_engine_config *cfg, og_engine **out, char *err, size_t errlen);
og_status og_engine_start(og_engine *e, char *err, size_t errlen);
/* Stops admitting (og_engine_submit then fails with OG_ERR_STATE), lets running
 * and queued sequences finish for up to grace_s seconds, cancels the rest, and
 * joins the scheduler. Readers still see their sequences end. */
void og_engine_drain(og_engine *e, double grace_s);
/* Frees the engine after og_engine_drain (or when never started). Sequences
 * not yet released are freed too: release them first. */
void og_engine_free(og_engine *e);

/* Queues one sequence with prompt[0..n_prompt) (copied). Errors:
 * OG_ERR_RANGE (prompt + max_tokens over ctx; the message names the numbers),
 * OG_ERR_INVALID_ARG (bad sampling parameter, prompt or forced token id outside the vocabulary,
 * empty prompt, bad stop string), OG_ERR_NOMEM, OG_ERR_STATE (the queue is full
 * or the engine is draining: try again later; the message says which). */
og_status og_engine_submit(og_engine *e, const int32_t *prompt, int n_prompt, const og_seq_params *p, og_seq **out,
                           char *err, size_t errlen);

/* Queues n sequences (the API's `n` choices) with one prompt and p's
 * parameters, choice i with sampling seed p->sampling.seed + i, into out[0..n).
 * The prompt is prefilled once: the n are admitted together (when n places are
 * free; the queue stays in order meanwhile), choice 0 prefills it and the others
 * wait; in the step where its last position's logits come, each choice samples
 * its first token from its own copy of that row, and then forks the prompt's KV
 * cache (og_kv_fork: the prefix cache's full blocks shared, refcounted; the
 * others, the partial last block at least, copied; an unpaged cache such as
 * deepseek4's: its whole state copied). So at temperature 0 the n
 * choices are token for token and log-prob for log-prob the one og_engine_submit
 * gives. Each is its own og_seq afterwards (take, release: releasing choice 0
 * before its prompt is in hands the prefill to a waiting one). n_cached is the
 * prefix-cache hit of the one prefill for every choice. Errors: as
 * og_engine_submit's (for all n: none is queued), plus OG_ERR_INVALID_ARG for n
 * outside 1..parallel, OG_ERR_UNSUPPORTED for n > 1 on a model whose caches
 * do not fork (og_model_info.kv_fork false). */
og_status og_engine_submit_n(og_engine *e, const int32_t *prompt, int n_prompt, const og_seq_params *p, int n,
                             og_seq **out, char *err, size_t errlen);

/* Moves the output released since the last call into *out (which the caller
 * frees with og_seq_out_free). Never fails except for OG_ERR_NOMEM. */
og_status og_seq_take(og_engine *e, og_seq *s, og_seq_out *out);
/* Waits up to timeout_s seconds for new output or the end of any sequence of
 * this engine. Returns true when woken by output, false on timeout. */
bool og_engine_wait(og_engine *e, double timeout_s);
/* The reader is done with s: cancels it if it is still queued or running (its
 * KV cache is freed before the next step) and frees it. s is invalid after. */
void og_seq_release(og_engine *e, og_seq *s);

og_status og_engine_metrics_get(og_engine *e, og_engine_metrics *out);
/* Debug consistency check of the prefix cache and the KV pool (tests call
 * it): walks the live sequences and compares each cached block's refcount with
 * the sequences that hold it, every block's place in its hash chain, the
 * LRU/free bookkeeping and the chain links; then the pool: every block free
 * xor owned (by one sequence, or by one cache entry), none lost, the free list
 * sound. Errors: OG_ERR_STATE with the first inconsistency. */
/* Call it with no step in flight for the budget part (e.g. once every sequence ended). */
og_status og_engine_check(og_engine *e, char *err, size_t errlen);
/* Waits until the --cache-dir writer has written every entry handed to it
 * so far (tests read the directory's counters after it). No status: cannot
 * fail (returns at once without a directory). */
void og_engine_cache_sync(og_engine *e);
/* Per-layer expert traffic as of the last step: routes[l] selections and hits[l]
 * of them on the device, for l < n_layer (the model's layers; dense ones stay
 * 0). Errors: OG_ERR_STATE without placement statistics. */
og_status og_engine_layer_hits(og_engine *e, uint64_t *routes, uint64_t *hits, uint32_t n_layer);

/* Shares a step's prefill budget (tokens, the step's batch_tokens less its
 * decoders) among n running sequences in admission order: need[i] prompt
 * tokens each still has to feed (0: not prefilling). Writes take[i] in
 * 0..need[i], the tokens it feeds this step: max-min fair (equal shares; what a
 * sequence does not need goes to the others; when tokens are fewer than
 * sequences, one each, oldest first), sum(take) = min(budget, sum(need)).
 * Returns that sum (0 when budget <= 0). Exposed for tests. */
int og_prefill_share(const int *need, int n, int budget, int *take);

/* Longest suffix of text[0..len) that is a proper prefix of one of the stop
 * strings: the bytes a stream must hold back. Exposed for tests. */
size_t og_stop_holdback(const char *text, size_t len, const char *const *stop, int n_stop);

#endif
