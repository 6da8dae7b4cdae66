/* `onegpu tokenize`: the ids of a text with a model's tokenizer (as llama.cpp's
 * llama-tokenize), or the text of ids (--decode). */
#include "cli.h"
#include "og_tokenizer.h"

#include <getopt.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out) {
    fprintf(out, "usage: onegpu tokenize -m MODEL.gguf (-p TEXT | --file F ...) [--no-bos] [--special]\n"
                 "       onegpu tokenize -m MODEL.gguf --decode ID,ID,...\n"
                 "  Prints {\"tokens\": [...]} (one line per --file, with \"file\"), or with --decode the text.\n"
                 "  BOS is added when the model says so (tokenizer.ggml.add_bos_token) unless --no-bos;\n"
                 "  control-token text such as <\xef\xbd\x9cUser\xef\xbd\x9c> is parsed only with --special.\n");
}

static int print_ids(const og_tokenizer *t, const char *file, const char *text, size_t len, bool bos, bool special) {
    og_ids ids = {0};
    if (og_tokenize(t, text, len, bos, special, &ids) != OG_OK) {
        fprintf(stderr, "onegpu tokenize: out of memory\n");
        return OG_EXIT_USAGE;
    }
    json_t *o = json_object(), *a = json_array();
    if (file) json_object_set_new(o, "file", json_string(file));
    for (size_t i = 0; i < ids.n; i++) json_array_append_new(a, json_integer(ids.v[i]));
    json_object_set_new(o, "tokens", a);
    char *s = json_dumps(o, JSON_COMPACT);
    puts(s);
    free(s);
    json_decref(o);
    og_ids_free(&ids);
    return OG_EXIT_OK;
}

int og_cmd_tokenize(int argc, char **argv) {
    static const struct option opts[] = {{"model", required_argument, 0, 'm'}, {"prompt", required_argument, 0, 'p'},
                                         {"file", required_argument, 0, 'f'},  {"no-bos", no_argument, 0, 'B'},
                                         {"special", no_argument, 0, 's'},     {"decode", required_argument, 0, 'd'},
                                         {"help", no_argument, 0, 'h'},        {0, 0, 0, 0}};
    const char *model = NULL, *prompt = NULL, *decode = NULL;
    const char **files = calloc((size_t)argc + 1, sizeof *files); /* at most one per argument */
    int n_files = 0, c;
    if (!files) return OG_EXIT_USAGE;
    bool no_bos = false, special = false;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:p:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'p': prompt = optarg; break;
        case 'f': files[n_files++] = optarg; break;
        case 'B': no_bos = true; break;
        case 's': special = true; break;
        case 'd': decode = optarg; break;
        case 'h': usage(stdout); free(files); return OG_EXIT_OK;
        default: usage(stderr); free(files); return OG_EXIT_USAGE;
        }
    }
    if (!model || optind != argc || (!prompt && !n_files && !decode)) {
        usage(stderr);
        free(files);
        return OG_EXIT_USAGE;
    }
    char err[1024];
    og_gguf *g;
    if (og_gguf_open(model, OG_GGUF_HEADER_ONLY, &g, err, sizeof err)) {
        fprintf(stderr, "onegpu tokenize: %s\n", err);
        free(files);
        return OG_EXIT_BAD_INPUT;
    }
    og_tokenizer *t;
    og_status st = og_tokenizer_load(g, &t, err, sizeof err);
    og_gguf_close(g);
    if (st) {
        fprintf(stderr, "onegpu tokenize: %s: %s\n", model, err);
        free(files);
        return OG_EXIT_BAD_INPUT;
    }
    int rc = OG_EXIT_OK;
    bool bos = og_tokenizer_add_bos(t) && !no_bos;
    if (decode) {
        og_detok d = {0};
        size_t cap = 1 << 16, len = 0;
        char *out = malloc(cap);
        out[0] = '\0';
        for (char *p = (char *)decode; *p && rc == OG_EXIT_OK;) {
            char *end;
            long id = strtol(p, &end, 10);
            if (end == p || id < 0 || id >= og_tokenizer_n_vocab(t)) {
                fprintf(stderr, "onegpu tokenize: bad token id near '%s'\n", p);
                rc = OG_EXIT_USAGE;
                break;
            }
            if (len + 4096 > cap) out = realloc(out, cap *= 2);
            og_detok_push(t, &d, (int32_t)id, out, cap, &len);
            p = *end == ',' ? end + 1 : end;
        }
        og_detok_flush(&d, out, cap, &len);
        if (rc == OG_EXIT_OK) fwrite(out, 1, len, stdout);
        free(out);
    } else if (prompt) {
        rc = print_ids(t, NULL, prompt, strlen(prompt), bos, special);
    }
    for (int i = 0; i < n_files && rc == OG_EXIT_OK; i++) {
        char *text;
        size_t len;
        if (og_read_file(files[i], 1u << 30, &text, &len, err, sizeof err)) {
            fprintf(stderr, "onegpu tokenize: %s\n", err);
            rc = OG_EXIT_BAD_INPUT;
            break;
        }
        rc = print_ids(t, files[i], text, len, bos, special);
        free(text);
    }
    og_tokenizer_free(t);
    free(files);
    return rc;
}
