/* onegpu command-line subcommands. Each returns the process exit status:
 * 0 success, 1 usage or internal error, 2 bad input file, 3 plan refused. */
#ifndef OG_CLI_H
#define OG_CLI_H

#include "hf_tokenizer.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#ifndef OG_VERSION
#define OG_VERSION "0.1.0" /* onegpu --version, and the API's system_fingerprint */
#endif

/* The context length run, serve and plan take without --ctx: the model's
 * (n_ctx_train), at most 4096 tokens. */
static inline uint32_t og_cli_default_ctx(uint32_t n_ctx_train) {
    return n_ctx_train && n_ctx_train < 4096 ? n_ctx_train : 4096;
}

enum { OG_EXIT_OK = 0, OG_EXIT_USAGE = 1, OG_EXIT_BAD_INPUT = 2, OG_EXIT_REFUSED = 3 };

int og_cmd_gguf(int argc, char **argv);
int og_cmd_make_model(int argc, char **argv);
/* make-model --arch deepseek4 (cmd_make_model_ds4.c) */
int og_cmd_make_model_ds4(int argc, char **argv);
int og_cmd_make_model_ds41(int argc, char **argv);
int og_cmd_bench(int argc, char **argv);
int og_cmd_bench_placement(int argc, char **argv);
int og_cmd_bench_grammar(int argc, char **argv);
int og_cmd_bench_cuda(int argc, char **argv);
int og_cmd_tokenize(int argc, char **argv);
int og_cmd_run(int argc, char **argv);
int og_cmd_plan(int argc, char **argv);
int og_cmd_serve(int argc, char **argv);

/* One line for `run` and `serve` at start: device and host bytes, resident
 * experts and the predicted device share (defined in cmd_plan.c). */
struct og_plan;
void og_cli_plan_line(FILE *out, const struct og_plan *p, bool from_profile);

/* What the planner did with --expert-slots N (slots_override) beyond a layer's
 * routed experts, which is every slot a layer can use: one line to out,
 * "CMD: --expert-slots N: capped to M because ...", and nothing when N was
 * taken as given (defined in cmd_plan.c). Cannot fail. */
void og_cli_slots_note(FILE *out, const char *cmd, int64_t slots_override, const struct og_plan *p);

/* Strict positive decimal count for flags like --ctx: "4096" yes; "", "0", "12k",
 * "-1" and values over 2^31 - 1 no (defined in cmd_plan.c). */
bool og_cli_parse_count(const char *s, uint32_t *out);

/* --expert-slots N|all: N >= 0 slots per MoE layer, "all" = -2 (og_plan_input's
 * slots_override). False on junk (defined in cmd_plan.c). */
bool og_cli_parse_slots(const char *s, int64_t *out);

/* A decimal in [lo, hi], nothing else (--migrate, --queue; defined in cmd_plan.c). */
bool og_cli_parse_long(const char *s, long lo, long hi, long *out);

/* make-model's shared steps (cmd_make_model.c), for each architecture's
 * argument parser. og_cli_make_first_value: the last value of option id
 * (getopt_long's val) in argv, or dflt, from a silent pass of getopt_long
 * (optind reset after), for what must be known before the real pass (--arch,
 * --preset). The others return an exit status (0: go on) after printing why:
 * og_cli_make_output_check refuses a directory or an unwritable folder;
 * og_cli_make_vocab loads the tokenizer from tok_dir (NULL: found as the help
 * says; "none": *have_vocab false) padded to n_vocab; og_cli_make_result
 * prints the writer's error or the "wrote" line. */
struct option;
const char *og_cli_make_first_value(int argc, char **argv, const char *optstring, const struct option *opts, int id,
                                    const char *dflt);
int og_cli_make_output_check(const char *cmd, const char *out_path);
/* After getopt_long's loop: og_cli_make_bad_value prints "bad value ARG for
 * --NAME" (opts[longindex]; "?" when longindex < 0); og_cli_make_args_done
 * refuses a missing -o or a leftover argument (printing usage), then runs
 * og_cli_make_output_check. Both return an exit status (0: go on). */
int og_cli_make_bad_value(const char *arg, const struct option *opts, int longindex);
int og_cli_make_args_done(const char *out_path, int argc, char **argv, void (*print_usage)(FILE *));
int og_cli_make_vocab(const char *cmd, const char *tok_dir, uint32_t n_vocab, og_hf_vocab *vocab, bool *have_vocab);
int og_cli_make_result(const char *cmd, og_status st, const char *err, const char *out_path, bool split, bool sparse);
/* Strict decimal u32 / u64 / float flag values (make-model). */
bool og_cli_parse_u32(const char *s, uint32_t *out);
bool og_cli_parse_u64(const char *s, uint64_t *out);
bool og_cli_parse_f32(const char *s, float *out);

#endif
