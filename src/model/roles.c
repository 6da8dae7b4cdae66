/* Tensor roles by name: the lookup in an architecture's one name table
 * (og_arch_tensor), and the generic rules for llama.cpp's MoE names that
 * og_model_tensor_role applies to a file of an architecture without an entry
 * (`onegpu gguf` on any GGUF). */
#include "og_arch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const role_names[OG_ROLE_COUNT] = {
    "embeddings", "attention", "norm", "router", "dense_ffn",
    "routed_experts", "shared_experts", "output", "engram", "other",
};

const char *og_model_role_name(og_tensor_role role) {
    return (unsigned)role < OG_ROLE_COUNT ? role_names[role] : "other";
}

int og_model_tensor_layer(const char *name) {
    if (strncmp(name, "blk.", 4) != 0) return -1;
    char *end;
    long n = strtol(name + 4, &end, 10);
    if (end == name + 4 || *end != '.' || n < 0 || n > 1000000) return -1;
    return (int)n;
}

static bool starts(const char *s, const char *prefix) {
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* Prefix of the per-layer part of a name -> role; first match wins. */
static const struct {
    const char *prefix;
    og_tensor_role role;
} layer_rules[] = {
    {"attn_", OG_ROLE_ATTENTION},
    {"ffn_gate_inp", OG_ROLE_ROUTER},
    {"exp_probs_b", OG_ROLE_ROUTER},
    {"ffn_norm", OG_ROLE_NORM},
    {"layer_output_norm", OG_ROLE_NORM},
    {"ffn_gate_up_exps", OG_ROLE_ROUTED_EXPERTS},
    {"ffn_gate_exps", OG_ROLE_ROUTED_EXPERTS},
    {"ffn_up_exps", OG_ROLE_ROUTED_EXPERTS},
    {"ffn_down_exps", OG_ROLE_ROUTED_EXPERTS},
    {"ffn_gate_shexp", OG_ROLE_SHARED_EXPERTS},
    {"ffn_up_shexp", OG_ROLE_SHARED_EXPERTS},
    {"ffn_down_shexp", OG_ROLE_SHARED_EXPERTS},
    {"ffn_gate.", OG_ROLE_DENSE_FFN},
    {"ffn_up.", OG_ROLE_DENSE_FFN},
    {"ffn_down.", OG_ROLE_DENSE_FFN},
    {"engram_embd", OG_ROLE_ENGRAM},  /* deepseek41's n-gram tables (mxxm-t: engram_embed) */
    {"engram_embed", OG_ROLE_ENGRAM},
};

const char *og_arch_tensor_name(const og_arch_tensor *t, uint32_t layer, char *buf, size_t n) {
    if (t->per_layer) snprintf(buf, n, "blk.%u.%s", layer, t->name);
    else snprintf(buf, n, "%s", t->name);
    return buf;
}

og_tensor_role og_arch_table_role(const og_arch_tensor *table, int n, const char *name) {
    const char *rest = og_model_tensor_layer(name) >= 0 ? strchr(name + 4, '.') + 1 : NULL;
    for (int i = 0; i < n; i++)
        if (!strcmp(table[i].per_layer ? (rest ? rest : "") : name, table[i].name)) return table[i].role;
    return OG_ROLE_OTHER;
}

og_tensor_role og_arch_generic_role(const char *name) {
    if (starts(name, "token_embd")) return OG_ROLE_EMBEDDINGS;
    if (starts(name, "output")) return OG_ROLE_OUTPUT; /* output.weight, output_norm.weight */
    if (og_model_tensor_layer(name) < 0) return OG_ROLE_OTHER;
    const char *rest = strchr(name + 4, '.') + 1;
    for (size_t i = 0; i < sizeof layer_rules / sizeof layer_rules[0]; i++)
        if (starts(rest, layer_rules[i].prefix)) return layer_rules[i].role;
    return OG_ROLE_OTHER;
}
