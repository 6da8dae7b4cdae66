/* The command-line steps deepseek2's and deepseek4's make-model share
 * (defined in cmd_make_model.c). Each prints why it refuses. */
#ifndef OG_MAKE_MODEL_H
#define OG_MAKE_MODEL_H

#include "cli.h"
#include "hf_tokenizer.h"

/* Decimal u32 / u64 option values ("12"; not "", "-1", "1x" or out of range). */
bool og_make_model_parse_u32(const char *s, uint32_t *out);
bool og_make_model_parse_seed(const char *s, uint64_t *out);

/* After getopt: -o given, no stray argument (usage_fn prints the usage), the
 * output not a directory and its folder writable. OG_EXIT_OK to go on, else
 * the exit status. */
int og_make_model_check_output(const char *out_path, int optind_, int argc, char **argv, void (*usage_fn)(FILE *));

/* The vocabulary padded to n_vocab ids from tok_dir (NULL: found as
 * og_make_model_find_tokenizer finds it; "none": *have false, no vocabulary).
 * OG_EXIT_OK, or OG_EXIT_BAD_INPUT when it is missing or unreadable. */
int og_make_model_load_vocab(const char *tok_dir, uint32_t n_vocab, og_hf_vocab *vocab, bool *have);

/* The writer's status as the exit status: err printed (1 for a wrong request:
 * INVALID_ARG, UNSUPPORTED, RANGE; 2 otherwise), or "wrote PATH (N bytes)" for
 * a single file. */
int og_make_model_done(og_status st, const char *err, const char *out_path, bool split, bool sparse);

#endif
