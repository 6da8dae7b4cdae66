/* onegpu: one binary, subcommands (DESIGN.md "cli"). */
#include "cli.h"
#include "og_device_cuda.h"

#include <stdio.h>
#include <errno.h>
#include <string.h>

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *summary;
} commands[] = {
    {"serve", og_cmd_serve, "OpenAI-compatible HTTP server (continuous batching, SSE, /metrics) on port 8090"},
    {"gguf", og_cmd_gguf, "inspect a GGUF file: header, metadata, tensors, bytes per role"},
    {"make-model", og_cmd_make_model, "write a synthetic DeepSeek-class (deepseek2, deepseek4, deepseek41) GGUF model"},
    {"plan", og_cmd_plan, "the device/host layout for a model on this machine (header only; exit 3: does not fit)"},
    {"run", og_cmd_run, "generate from one prompt on the CPU (text to stdout, speed to stderr)"},
    {"tokenize", og_cmd_tokenize, "text -> token ids (or --decode ids -> text) with a model's tokenizer"},
    {"bench", og_cmd_bench, "benchmarks: 'bench kernels' (CPU matvec vs memory bandwidth, matmul), 'bench placement' (hot-set policies vs the oracle), 'bench grammar' (the response_format and tool-call masks' cost)"},
};

static void usage(FILE *out) {
    fprintf(out, "onegpu %s: serve giant MoE models from one GPU plus host RAM\n\n"
                 "usage: onegpu <command> [options]   (onegpu <command> --help for details)\n\n"
                 "commands:\n", OG_VERSION);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-12s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "  %-12s %s\n", "help", "show this list (onegpu help CMD: that command's flags)");
    fprintf(out, "  %-12s %s\n", "--version", "the version, and whether the CUDA device is built");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return OG_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        if (argc > 2) { /* onegpu help CMD = onegpu CMD --help */
            for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
                if (!strcmp(argv[2], commands[i].name)) {
                    char name[64], help[] = "--help";
                    snprintf(name, sizeof name, "onegpu %s", commands[i].name);
                    char *sub[] = {name, help, NULL};
                    return commands[i].fn(2, sub);
                }
            }
        }
        usage(stdout);
        return OG_EXIT_OK;
    }
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        printf("onegpu %s\n", OG_VERSION);
        printf(og_cuda_built() ? "cuda device: built\n" : "cuda device: not built (cmake -DONEGPU_CUDA=ON builds it)\n");
        return OG_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (!strcmp(cmd, commands[i].name)) {
            /* getopt prefixes its messages with argv[0]: make it "onegpu CMD" */
            char name[64];
            snprintf(name, sizeof name, "onegpu %s", commands[i].name);
            argv[1] = name;
            int rc = commands[i].fn(argc - 1, argv + 1);
            /* output that could not be written is a failure (a full disk, a closed pipe) */
            if (fflush(stdout) != 0 || ferror(stdout)) {
                fprintf(stderr, "onegpu %s: cannot write the output: %s\n", commands[i].name, strerror(errno));
                return OG_EXIT_USAGE;
            }
            return rc;
        }
    }
    fprintf(stderr, "onegpu: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return OG_EXIT_USAGE;
}
