/* The planner (DESIGN.md "The planner"): from the header alone, decide what the
 * device holds (non-expert weights, KV cache, workspace, expert slots) and what
 * the host holds (every routed expert plus staging), or refuse before anything
 * is loaded, saying which side is short, by how much, and what would help. */
#include "og_moe.h"
#include "moe_json.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define MIB (1024ull * 1024)

static bool is_routed(const char *name) { return strstr(name, "_exps.") != NULL; }

static int cmp_desc(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Fills the free device bytes `left` with expert slots, one at a time. Without a
 * profile: round-robin over the MoE layers, so slots differ by at most one
 * between layers (uniform traffic makes every slot worth the same). With one:
 * each slot goes to the layer whose next-hottest expert carries the largest
 * share of that layer's selections per byte (greedy on the marginal gain, which
 * is optimal here as each layer's gains only decrease). Returns false on OOM. */
static bool fill_slots(const og_hparams *hp, const uint64_t *layer_expert_bytes, const uint64_t *profile,
                       uint64_t left, uint32_t *slots) {
    uint64_t *sorted = NULL, *total = NULL;
    if (profile) {
        sorted = malloc((size_t)hp->n_layer * hp->n_expert * sizeof *sorted);
        total = calloc(hp->n_layer, sizeof *total);
        if (!sorted || !total) {
            free(sorted);
            free(total);
            return false;
        }
        memcpy(sorted, profile, (size_t)hp->n_layer * hp->n_expert * sizeof *sorted);
        for (uint32_t l = 0; l < hp->n_layer; l++) {
            qsort(sorted + (size_t)l * hp->n_expert, hp->n_expert, sizeof *sorted, cmp_desc);
            for (uint32_t e = 0; e < hp->n_expert; e++) total[l] += sorted[(size_t)l * hp->n_expert + e];
        }
    }
    uint64_t used = 0;
    for (;;) {
        bool grew = false;
        for (uint32_t l = 0; l < hp->n_layer; l++) {
            uint64_t per = layer_expert_bytes[l] / hp->n_expert;
            if (!per || slots[l] >= hp->n_expert || left - used < per) continue;
            if (profile) { /* pick the best layer instead of l */
                double best_gain = -1;
                uint32_t best = l;
                for (uint32_t m = 0; m < hp->n_layer; m++) {
                    uint64_t pm = layer_expert_bytes[m] / hp->n_expert;
                    if (!pm || slots[m] >= hp->n_expert || left - used < pm) continue;
                    double gain = total[m] ? (double)sorted[(size_t)m * hp->n_expert + slots[m]] / (double)total[m]
                                           : 1.0 / hp->n_expert;
                    gain /= (double)pm;
                    /* ties go to the layer with fewer slots, so equal traffic spreads evenly */
                    if (gain > best_gain || (gain == best_gain && slots[m] < slots[best])) best_gain = gain, best = m;
                }
                l = best;
                per = layer_expert_bytes[l] / hp->n_expert;
            }
            slots[l]++;
            used += per;
            grew = true;
            if (profile) break;
        }
        if (!grew) break;
    }
    free(sorted);
    free(total);
    return true;
}

og_status og_plan_make(const og_gguf *g, const og_plan_input *in, og_plan *p, char *err, size_t errlen) {
    memset(p, 0, sizeof *p);
    og_hparams hp;
    og_status st = og_hparams_read(g, NULL, &hp, err, errlen);
    if (st) return st;
    char arch[32] = "";
    og_gguf_get_cstr(g, "general.architecture", arch, sizeof arch);
    p->n_layer = hp.n_layer;
    p->n_moe_layers = hp.n_layer - hp.n_dense;
    p->n_expert = hp.n_expert;
    p->n_expert_used = hp.n_expert_used;
    p->slots = calloc(hp.n_layer ? hp.n_layer : 1, sizeof *p->slots);
    uint64_t *layer_expert_bytes = calloc(hp.n_layer ? hp.n_layer : 1, sizeof *layer_expert_bytes);
    if (!p->slots || !layer_expert_bytes) {
        free(layer_expert_bytes);
        return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    }
    /* bytes per role, and the routed experts per layer, from the tensor infos */
    for (uint64_t i = 0; i < og_gguf_n_tensors(g); i++) {
        const og_gguf_tensor *t = og_gguf_tensor_at(g, i);
        og_tensor_role r = og_model_tensor_role(arch, t->name);
        p->role_bytes[r] += t->n_bytes;
        if (is_routed(t->name)) {
            int l = og_model_tensor_layer(t->name);
            p->routed_bytes += t->n_bytes;
            if (l >= 0 && (uint32_t)l < hp.n_layer) layer_expert_bytes[l] += t->n_bytes;
        } else {
            p->nonexpert_bytes += t->n_bytes;
        }
    }
    for (uint32_t l = 0; l < hp.n_layer; l++) {
        uint64_t per = hp.n_expert ? layer_expert_bytes[l] / hp.n_expert : 0;
        if (per > p->expert_bytes_max) p->expert_bytes_max = per;
    }
    /* device: KV (MLA latent + rope key per token and layer, §3), workspace, minimum slots */
    p->kv_bytes = (uint64_t)in->ctx * in->parallel * hp.n_layer * (hp.kv_lora_rank + hp.d_rope) * in->kv_bytes_per_elem;
    /* activations of one step, f32: a few rows of width n_embd and the expert FFN
     * per batch token, logits for one row per sequence; plus 256 MiB for the
     * runtime's own buffers (library workspaces, router scratch) */
    uint64_t per_tok = 4ull * (16ull * hp.n_embd + 4ull * (hp.n_ff_exp ? hp.n_ff_exp : hp.n_ff));
    p->workspace_bytes = (uint64_t)in->batch_tokens * per_tok + 4ull * in->parallel * hp.n_vocab + 256 * MIB;
    uint32_t min_slots = hp.n_expert_used;
    for (uint32_t l = 0; l < hp.n_layer; l++)
        if (layer_expert_bytes[l]) p->min_slot_bytes += (uint64_t)min_slots * (layer_expert_bytes[l] / hp.n_expert);
    uint64_t device_need = p->nonexpert_bytes + p->kv_bytes + p->workspace_bytes + p->min_slot_bytes + in->reserve;
    /* host: every routed expert (any may be evicted to it) plus pinned staging for
     * migrations: four experts in flight and 256 MiB */
    p->staging_bytes = 4 * p->expert_bytes_max + 256 * MIB;
    p->host_bytes = p->routed_bytes + p->staging_bytes;
    char a[32], b[32];
    if (device_need > in->vram) {
        uint64_t kv_one = in->parallel ? p->kv_bytes / in->parallel : p->kv_bytes;
        uint64_t short_by = device_need - in->vram;
        uint64_t ctx_fit = 0;
        if (p->kv_bytes > short_by && in->ctx)
            ctx_fit = (uint64_t)in->ctx * (p->kv_bytes - short_by) / p->kv_bytes / 256 * 256;
        char nb[32], kb[32], wb[32], vb[32], sb[32], rb[32];
        const char *hint;
        if (ctx_fit) hint = "; it fits with --ctx ";
        else if (kv_one && p->kv_bytes >= short_by) hint = "; fewer --parallel would fit";
        else if (p->nonexpert_bytes + p->min_slot_bytes > in->vram) hint = "; the weights alone do not fit: a bigger GPU";
        else hint = "; a smaller --batch-tokens, --reserve or --ctx would help";
        snprintf(p->reason, sizeof p->reason,
                 "device short by %s: needs %s (non-expert weights %s, KV cache %s for %u sequence%s x %u tokens, "
                 "workspace %s, %u expert slots per MoE layer, reserve %s) but --vram gives %s%s",
                 og_fmt_bytes(short_by, sb, sizeof sb), og_fmt_bytes(device_need, a, sizeof a),
                 og_fmt_bytes(p->nonexpert_bytes, nb, sizeof nb), og_fmt_bytes(p->kv_bytes, kb, sizeof kb), in->parallel,
                 in->parallel == 1 ? "" : "s", in->ctx, og_fmt_bytes(p->workspace_bytes, wb, sizeof wb), min_slots,
                 og_fmt_bytes(in->reserve, rb, sizeof rb), og_fmt_bytes(in->vram, vb, sizeof vb), hint);
        if (ctx_fit) {
            size_t l = strlen(p->reason);
            snprintf(p->reason + l, sizeof p->reason - l, "%llu or less, or fewer --parallel", (unsigned long long)ctx_fit);
        }
        free(layer_expert_bytes);
        return OG_OK;
    }
    if (p->host_bytes > in->ram) {
        char hb[32], rb[32], sb2[32], gb[32];
        snprintf(p->reason, sizeof p->reason,
                 "host short by %s: the routed experts (%s) and staging (%s) need %s but %s is available; "
                 "add RAM or use a smaller quantization",
                 og_fmt_bytes(p->host_bytes - in->ram, gb, sizeof gb), og_fmt_bytes(p->routed_bytes, rb, sizeof rb),
                 og_fmt_bytes(p->staging_bytes, sb2, sizeof sb2), og_fmt_bytes(p->host_bytes, hb, sizeof hb),
                 og_fmt_bytes(in->ram, a, sizeof a));
        free(layer_expert_bytes);
        return OG_OK;
    }
    /* the rest of the device becomes expert slots, spread evenly over MoE layers
     * (or as the override says), never more than a layer has experts */
    uint64_t left = in->vram - (device_need - p->min_slot_bytes);
    p->fits = true;
    if (p->n_moe_layers && hp.n_expert) {
        if (in->slots_override == -2 || in->slots_override >= 0) {
            uint32_t want = in->slots_override == -2 ? hp.n_expert : (uint32_t)(in->slots_override > hp.n_expert ? hp.n_expert : in->slots_override);
            uint64_t need = 0;
            for (uint32_t l = 0; l < hp.n_layer; l++)
                if (layer_expert_bytes[l]) need += (uint64_t)want * (layer_expert_bytes[l] / hp.n_expert);
            if (need > left) {
                p->fits = false;
                snprintf(p->reason, sizeof p->reason, "--expert-slots %u needs %s of expert slots but %s is left on the device",
                         want, og_fmt_bytes(need, a, sizeof a), og_fmt_bytes(left, b, sizeof b));
            }
            for (uint32_t l = 0; l < hp.n_layer; l++) p->slots[l] = layer_expert_bytes[l] ? want : 0;
        } else if (!fill_slots(&hp, layer_expert_bytes, in->profile, left, p->slots)) {
            free(layer_expert_bytes);
            return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
        }
    }
    for (uint32_t l = 0; l < hp.n_layer; l++) {
        uint64_t per = hp.n_expert ? layer_expert_bytes[l] / hp.n_expert : 0;
        p->resident_experts += p->slots[l];
        p->resident_expert_bytes += (uint64_t)p->slots[l] * per;
    }
    p->device_bytes = p->nonexpert_bytes + p->kv_bytes + p->workspace_bytes + p->resident_expert_bytes;
    /* predicted device share: with a profile, the hot set is each layer's most
     * selected experts; without, selections are taken as uniform */
    double share = 0;
    uint32_t nm = 0;
    for (uint32_t l = 0; l < hp.n_layer; l++) {
        if (!layer_expert_bytes[l]) continue;
        nm++;
        if (!in->profile) {
            share += (double)p->slots[l] / hp.n_expert;
            continue;
        }
        const uint64_t *cnt = in->profile + (size_t)l * hp.n_expert;
        uint64_t total = 0, top = 0;
        uint64_t *sorted = malloc(hp.n_expert * sizeof *sorted);
        if (!sorted) continue;
        memcpy(sorted, cnt, hp.n_expert * sizeof *sorted);
        for (uint32_t e = 0; e < hp.n_expert; e++) total += sorted[e];
        for (uint32_t k = 0; k < p->slots[l]; k++) { /* selection of the k-th largest */
            uint32_t best = k;
            for (uint32_t e = k + 1; e < hp.n_expert; e++)
                if (sorted[e] > sorted[best]) best = e;
            uint64_t t = sorted[k];
            sorted[k] = sorted[best];
            sorted[best] = t;
            top += sorted[k];
        }
        share += total ? (double)top / (double)total : (double)p->slots[l] / hp.n_expert;
        free(sorted);
    }
    p->predicted_device_share = nm ? share / nm : 1.0;
    free(layer_expert_bytes);
    return OG_OK;
}

void og_plan_free(og_plan *p) {
    free(p->slots);
    p->slots = NULL;
}

og_status og_moe_json_load(const char *path, size_t max_bytes, json_t **out, char *err, size_t errlen) {
    *out = NULL;
    char *text;
    size_t len;
    og_status st = og_read_file(path, max_bytes, &text, &len, err, errlen);
    if (st) return st;
    json_error_t je;
    *out = json_loadb(text, len, 0, &je);
    free(text);
    if (!*out) return og_fail(err, errlen, OG_ERR_FORMAT, "%s: not JSON (line %d: %s)", path, je.line, je.text);
    return OG_OK;
}

og_status og_profile_read(const char *path, uint32_t n_layer, uint32_t n_expert, uint64_t **counts, char *err,
                          size_t errlen) {
    *counts = NULL;
    json_t *root;
    og_status st = og_moe_json_load(path, 256u << 20, &root, err, errlen);
    if (st) return st;
    uint64_t *c = calloc((size_t)n_layer * n_expert + 1, sizeof *c);
    json_t *layers = json_object_get(root, "layers");
    if (!c || !json_is_array(layers)) {
        free(c);
        json_decref(root);
        return og_fail(err, errlen, OG_ERR_FORMAT, "%s: no \"layers\" array", path);
    }
    size_t i;
    json_t *lv;
    json_array_foreach(layers, i, lv) {
        json_t *lj = json_object_get(lv, "layer");
        json_int_t l = json_is_integer(lj) ? json_integer_value(lj) : -1;
        json_t *arr = json_object_get(lv, "counts");
        if (l < 0 || (uint64_t)l >= n_layer || !json_is_array(arr) || json_array_size(arr) != n_expert) {
            free(c);
            json_decref(root);
            return og_fail(err, errlen, OG_ERR_FORMAT, "%s: layer entry %zu does not match the model (%u layers, %u experts)",
                           path, i, n_layer, n_expert);
        }
        for (uint32_t e = 0; e < n_expert; e++) {
            json_t *vj = json_array_get(arr, e);
            if (!json_is_integer(vj) || json_integer_value(vj) < 0) {
                free(c);
                json_decref(root);
                return og_fail(err, errlen, OG_ERR_FORMAT, "%s: layer %lld, expert %u: counts must be integers >= 0",
                               path, (long long)l, e);
            }
            c[(size_t)l * n_expert + e] = (uint64_t)json_integer_value(vj);
        }
    }
    json_decref(root);
    *counts = c;
    return OG_OK;
}

og_status og_profile_write(const char *path, uint32_t n_layer, uint32_t n_expert, const uint64_t *counts, char *err,
                           size_t errlen) {
    json_t *layers = json_array();
    for (uint32_t l = 0; l < n_layer && layers; l++) {
        uint64_t sum = 0;
        for (uint32_t e = 0; e < n_expert; e++) sum += counts[(size_t)l * n_expert + e];
        if (!sum) continue;
        json_t *c = json_array();
        for (uint32_t e = 0; e < n_expert; e++) json_array_append_new(c, json_integer((json_int_t)counts[(size_t)l * n_expert + e]));
        json_array_append_new(layers, json_pack("{s:i, s:o}", "layer", (json_int_t)l, "counts", c));
    }
    json_t *root = layers ? json_pack("{s:i, s:i, s:o}", "n_layer", (json_int_t)n_layer, "n_expert", (json_int_t)n_expert,
                                      "layers", layers)
                          : NULL;
    char *text = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    if (!text) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    size_t n = strlen(text);
    text[n] = '\n';
    og_status st = og_write_file_atomic(path, text, n + 1, err, errlen);
    free(text);
    return st;
}

void og_plan_resident(const og_plan *p, const uint64_t *profile, uint8_t *resident) {
    const uint32_t E = p->n_expert;
    memset(resident, 0, (size_t)p->n_layer * E);
    for (uint32_t l = 0; l < p->n_layer; l++) {
        uint8_t *r = resident + (size_t)l * E;
        const uint64_t *c = profile ? profile + (size_t)l * E : NULL;
        for (uint32_t k = 0; k < p->slots[l] && k < E; k++) { /* the hottest expert not yet chosen */
            uint32_t best = UINT32_MAX;
            for (uint32_t e = 0; e < E; e++)
                if (!r[e] && (best == UINT32_MAX || (c && c[e] > c[best]))) best = e;
            r[best] = 1;
        }
    }
}
