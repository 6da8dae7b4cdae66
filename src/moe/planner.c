/* The planner (DESIGN.md "The planner"): from the header alone, decide what the
 * device holds (non-expert weights, KV cache, workspace, expert slots) and what
 * the host holds (every routed expert plus staging), or refuse before anything
 * is loaded, saying which side is short, by how much, and what would help. */
#include "og_moe.h"
#include "moe_json.h"
#include "og_policy.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MIB (1024ull * 1024)

static uint64_t sat_add(uint64_t a, uint64_t b) { return a + b < a ? UINT64_MAX : a + b; }
static uint64_t sat_mul(uint64_t a, uint64_t b) {
    uint64_t r;
    return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

/* *acc += v; false on uint64 overflow (a file's byte counts: refused, never wrapped). */
static bool add_to(uint64_t *acc, uint64_t v) { return og_add_u64(*acc, v, acc); }

/* KV cache bytes of one sequence of n tokens: (kv_elems_fixed + ceil(n
 * kv_elems_per_token)) elements of bpe bytes (og_model_info), saturating. */
static uint64_t kv_seq_bytes(const og_model_info *mi, uint64_t n, uint64_t bpe) {
    const double per = ceil((double)n * mi->kv_elems_per_token);
    const uint64_t elems = per >= 18446744073709551616.0 ? UINT64_MAX : sat_add(mi->kv_elems_fixed, (uint64_t)per);
    return sat_mul(elems, bpe);
}

/* The largest n with parallel sequences of n tokens in at most budget bytes. */
static uint64_t kv_ctx_within(const og_model_info *mi, uint64_t budget, uint64_t parallel, uint64_t bpe) {
    if (!parallel || !bpe || mi->kv_elems_per_token <= 0) return 0;
    const uint64_t per_seq = budget / parallel / bpe; /* elements of one sequence */
    if (per_seq < mi->kv_elems_fixed) return 0;
    double guess = floor((double)(per_seq - mi->kv_elems_fixed) / mi->kv_elems_per_token);
    uint64_t n = guess >= 9007199254740992.0 ? (1ull << 53) : (uint64_t)guess;
    /* the double's rounding, corrected exactly against kv_seq_bytes */
    while (n && sat_mul(kv_seq_bytes(mi, n, bpe), parallel) > budget) n--;
    while (n < (1ull << 53) && sat_mul(kv_seq_bytes(mi, n + 1, bpe), parallel) <= budget) n++;
    return n;
}

static int cmp_desc(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The greedy's view of the layers when a profile is given (fill_slots). */
typedef struct slot_heap {
    const og_model_info *hp;
    const uint64_t *layer_expert_bytes, *sorted, *total; /* sorted: each layer's counts, descending */
    const uint32_t *slots;
    uint32_t *at, n; /* a binary heap of layer indices, best first */
} slot_heap;

/* The share of layer m's selections its next slot would serve, per byte. */
static double slot_gain(const slot_heap *h, uint32_t m) {
    const uint32_t E = h->hp->n_expert;
    double gain = h->total[m] ? (double)h->sorted[(size_t)m * E + h->slots[m]] / (double)h->total[m] : 1.0 / E;
    return gain / (double)(h->layer_expert_bytes[m] / E);
}

/* Whether layer a's next slot goes before b's: the larger gain; ties to the
 * layer with fewer slots (equal traffic spreads evenly), then the lower index. */
static bool slot_before(const slot_heap *h, uint32_t a, uint32_t b) {
    double ga = slot_gain(h, a), gb = slot_gain(h, b);
    if (ga != gb) return ga > gb;
    if (h->slots[a] != h->slots[b]) return h->slots[a] < h->slots[b];
    return a < b;
}

static void slot_sift_down(slot_heap *h, uint32_t i) {
    for (;;) {
        uint32_t best = i, c = 2 * i + 1;
        if (c < h->n && slot_before(h, h->at[c], h->at[best])) best = c;
        if (c + 1 < h->n && slot_before(h, h->at[c + 1], h->at[best])) best = c + 1;
        if (best == i) return;
        uint32_t t = h->at[i];
        h->at[i] = h->at[best];
        h->at[best] = t;
        i = best;
    }
}

/* Fills the free device bytes `left` with expert slots, one at a time. Without a
 * profile: round-robin over the MoE layers, so slots differ by at most one
 * between layers (uniform traffic makes every slot worth the same). With one:
 * each slot goes to the layer whose next-hottest expert carries the largest
 * share of that layer's selections per byte (greedy on the marginal gain, which
 * is optimal here as each layer's gains only decrease), kept in a heap so each
 * slot costs log(n_layer). Returns false on OOM. */
static bool fill_slots(const og_model_info *hp, const uint64_t *layer_expert_bytes, const uint64_t *profile,
                       uint64_t left, uint32_t *slots) {
    const uint32_t E = hp->n_expert;
    uint64_t used = 0;
    if (!profile) {
        for (bool grew = true; grew;) {
            grew = false;
            for (uint32_t l = 0; l < hp->n_layer; l++) {
                uint64_t per = layer_expert_bytes[l] / E;
                if (!per || slots[l] >= E || left - used < per) continue;
                slots[l]++;
                used += per;
                grew = true;
            }
        }
        return true;
    }
    uint64_t *sorted = malloc((size_t)hp->n_layer * E * sizeof *sorted);
    uint64_t *total = calloc(hp->n_layer, sizeof *total);
    uint32_t *at = malloc((size_t)hp->n_layer * sizeof *at);
    if (!sorted || !total || !at) {
        free(sorted);
        free(total);
        free(at);
        return false;
    }
    memcpy(sorted, profile, (size_t)hp->n_layer * E * sizeof *sorted);
    slot_heap h = {hp, layer_expert_bytes, sorted, total, slots, at, 0};
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        qsort(sorted + (size_t)l * E, E, sizeof *sorted, cmp_desc);
        for (uint32_t e = 0; e < E; e++) total[l] += sorted[(size_t)l * E + e];
        if (layer_expert_bytes[l] / E && slots[l] < E) at[h.n++] = l;
    }
    for (uint32_t i = h.n / 2; i-- > 0;) slot_sift_down(&h, i);
    /* a layer whose expert no longer fits never will (used only grows): it
     * leaves the heap when it comes to the top */
    while (h.n) {
        const uint32_t l = at[0];
        const uint64_t per = layer_expert_bytes[l] / E;
        if (left - used >= per) {
            slots[l]++;
            used += per;
        }
        if (slots[l] >= E || left - used < per) at[0] = at[--h.n];
        slot_sift_down(&h, 0); /* l's gain only fell, or another layer took its place */
    }
    free(sorted);
    free(total);
    free(at);
    return true;
}

og_status og_plan_make(const og_gguf *g, const og_plan_input *in, og_plan *p, char *err, size_t errlen) {
    memset(p, 0, sizeof *p);
    og_model_info hp;
    og_status st = og_model_describe(g, NULL, &hp, err, errlen);
    if (st) return st;
    if (hp.n_ctx_train && in->ctx > hp.n_ctx_train) /* a wrong request, not a machine too small */
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "--ctx %u is above the model's context length %u", in->ctx,
                       hp.n_ctx_train);
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
        og_plan_free(p);
        return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    }
    /* bytes per role, and the routed experts per layer, from the tensor infos
     * (og_gguf_open holds each inside its file, so the sums fit; checked all the
     * same, as this function sees only an og_gguf) */
    bool ok = true;
    for (uint64_t i = 0; i < og_gguf_n_tensors(g) && ok; i++) {
        const og_gguf_tensor *t = og_gguf_tensor_at(g, i);
        og_tensor_role r = og_model_tensor_role(arch, t->name);
        ok = add_to(&p->role_bytes[r], t->n_bytes);
        if (r == OG_ROLE_ROUTED_EXPERTS) { /* the architecture's name table says which */
            int l = og_model_tensor_layer(t->name);
            ok = ok && add_to(&p->routed_bytes, t->n_bytes);
            if (l >= 0 && (uint32_t)l < hp.n_layer && hp.n_expert) /* (no experts: a dense model's stray tensor) */
                ok = ok && add_to(&layer_expert_bytes[l], t->n_bytes);
        } else {
            ok = ok && add_to(&p->nonexpert_bytes, t->n_bytes);
        }
    }
    /* host: every routed expert (any may be evicted to it) plus pinned staging for
     * migrations: four experts in flight and 256 MiB */
    for (uint32_t l = 0; l < hp.n_layer; l++) {
        uint64_t per = hp.n_expert ? layer_expert_bytes[l] / hp.n_expert : 0;
        if (per > p->expert_bytes_max) p->expert_bytes_max = per;
    }
    /* host-only tensors (the architecture's figure: deepseek41's Engram tables and
     * token_embd, gathered by row on the host) are RAM, never device bytes */
    p->host_only_bytes = hp.host_only_bytes <= p->nonexpert_bytes ? hp.host_only_bytes : p->nonexpert_bytes;
    p->host_only_what = hp.host_only_what;
    p->nonexpert_bytes -= p->host_only_bytes;
    ok = ok && og_mul_u64(4, p->expert_bytes_max, &p->staging_bytes) && add_to(&p->staging_bytes, 256 * MIB) &&
         og_add_u64(p->routed_bytes, p->staging_bytes, &p->host_bytes) && add_to(&p->host_bytes, p->host_only_bytes);
    if (!ok) {
        free(layer_expert_bytes);
        og_plan_free(p);
        return og_fail(err, errlen, OG_ERR_FORMAT, "the tensors' sizes add up to more than 2^64 bytes");
    }
    /* device: KV (the architecture's per-sequence elements, og_model_info:
     * deepseek2's MLA latent + rope key per token and layer), workspace,
     * minimum slots. Saturating arithmetic: absurd --ctx / --parallel give a
     * huge need and a refusal, never a wrapped small one. */
    /* the architecture's own element size wins over the asked cache type
     * (deepseek4 stores F32 rows: planning them as f16 halved its KV) */
    const uint64_t kv_bpe = hp.kv_elem_bytes ? hp.kv_elem_bytes : in->kv_bytes_per_elem;
    /* one sequence of ctx tokens; a paged cache holds whole blocks of OG_KV_BLOCK
     * positions (the engine's pool, og_engine_kv_blocks: the same count) */
    const uint64_t kv_ctx = hp.kv_paged ? ((uint64_t)in->ctx + OG_KV_BLOCK - 1) / OG_KV_BLOCK * OG_KV_BLOCK : in->ctx;
    const uint64_t kv_seq = kv_seq_bytes(&hp, kv_ctx, kv_bpe);
    p->kv_blocks = hp.kv_paged ? sat_mul(kv_ctx / OG_KV_BLOCK, in->parallel) : 0;
    /* (hparams are bounded by the architecture's bounds: their products below fit 64 bits) */
    p->kv_bytes = sat_mul(kv_seq, in->parallel);
    /* activations of one step, f32: a few rows of width n_embd and the expert FFN
     * per batch token, logits for one row per sequence; plus 256 MiB for the
     * runtime's own buffers (library workspaces, router scratch) */
    uint64_t per_tok = 4ull * (16ull * hp.n_embd + 4ull * (hp.n_ff_exp ? hp.n_ff_exp : hp.n_ff));
    uint64_t act = sat_add(sat_mul(in->batch_tokens, per_tok), sat_mul(4ull * hp.n_vocab, in->parallel));
    /* the architecture's own forward scratch where it gives one (deepseek4's
     * mHC streams: the generic figure was a third of it) */
    const uint64_t arch_act = sat_add(sat_mul(in->batch_tokens, hp.fwd_bytes_per_token),
                                      sat_mul(in->parallel, hp.fwd_bytes_per_output));
    if (arch_act > act) act = arch_act;
    p->workspace_bytes = sat_add(act, 256 * MIB);
    /* at least n_expert_used slots per MoE layer, unless --expert-slots asks for fewer */
    uint32_t min_slots = hp.n_expert_used;
    if (in->slots_override >= 0 && (uint64_t)in->slots_override < min_slots) min_slots = (uint32_t)in->slots_override;
    for (uint32_t l = 0; l < hp.n_layer; l++)
        if (layer_expert_bytes[l])
            p->min_slot_bytes = sat_add(p->min_slot_bytes, sat_mul(min_slots, layer_expert_bytes[l] / hp.n_expert));
    uint64_t device_need = sat_add(sat_add(sat_add(p->nonexpert_bytes, p->kv_bytes), sat_add(p->workspace_bytes,
                                                                                             p->min_slot_bytes)),
                                   in->reserve);
    char a[32], b[32];
    /* Every short side is named at once (a user fixing one should not meet the
     * next only on the second try): the device's reason, then the host's. */
    p->reason[0] = 0;
    if (device_need > in->vram) {
        uint64_t short_by = device_need - in->vram;
        /* the largest ctx (multiple of 256) whose KV closes the gap, all else equal */
        uint64_t ctx_fit = 0;
        if (p->kv_bytes > short_by)
            ctx_fit = kv_ctx_within(&hp, p->kv_bytes - short_by, in->parallel, kv_bpe) / 256 * 256;
        if (ctx_fit >= in->ctx) ctx_fit = 0;
        char nb[32], kb[32], wb[32], vb[32], sb[32], rb[32], mb[32], hint[256];
        const uint64_t fixed = sat_add(sat_add(p->nonexpert_bytes, p->min_slot_bytes), in->reserve);
        /* the KV cache is "the large item" when it outweighs the weights: then
         * --ctx / --parallel are named even when they cannot close the gap alone */
        const bool kv_large = p->kv_bytes >= p->nonexpert_bytes && p->kv_bytes >= p->min_slot_bytes;
        size_t h = 0;
        hint[0] = 0;
        if (ctx_fit)
            h += (size_t)snprintf(hint + h, sizeof hint - h, "; it fits with --ctx %llu or less%s", (unsigned long long)ctx_fit,
                                  in->parallel > 1 ? ", or with fewer --parallel" : "");
        else if (in->reserve >= in->vram)
            h += (size_t)snprintf(hint + h, sizeof hint - h, "; --reserve takes the whole device");
        else if (in->reserve > short_by) /* the reserve is what a user sets, and enough to close the gap */
            h += (size_t)snprintf(hint + h, sizeof hint - h, "; it fits with --reserve %s or less",
                                  og_fmt_bytes(in->reserve - short_by, rb, sizeof rb));
        else if (fixed > in->vram)
            h += (size_t)snprintf(hint + h, sizeof hint - h, "; the weights%s and the reserve alone do not fit: a bigger GPU%s",
                                  min_slots ? ", the minimum expert slots" : "", min_slots ? " or fewer --expert-slots" : "");
        else if (in->parallel > 1)
            h += (size_t)snprintf(hint + h, sizeof hint - h,
                                  "; fewer --parallel (each sequence costs %s of KV and logits) would help",
                                  og_fmt_bytes(sat_add(kv_seq, 4ull * hp.n_vocab), mb, sizeof mb));
        else
            h += (size_t)snprintf(hint + h, sizeof hint - h, "; a smaller --batch-tokens%s or --ctx would help",
                                  in->reserve ? ", --reserve" : "");
        if (in->reserve && in->reserve < device_need && h < sizeof hint) /* what a user can set the card to */
            h += (size_t)snprintf(hint + h, sizeof hint - h, "; with --reserve 0 it needs --vram %s",
                                  og_fmt_bytes(device_need - in->reserve, mb, sizeof mb));
        if (kv_large && !ctx_fit && h < sizeof hint)
            snprintf(hint + h, sizeof hint - h, "; the KV cache is the largest item: a smaller --ctx (%u now)%s shrinks it",
                     in->ctx, in->parallel > 1 ? " or fewer --parallel" : "");
        snprintf(p->reason, sizeof p->reason,
                 "device short by %s: needs %s (non-expert weights %s, KV cache %s for %u sequence%s x %u tokens, "
                 "workspace %s, %u expert slots per MoE layer %s, reserve %s) but --vram gives %s%s",
                 og_fmt_bytes(short_by, sb, sizeof sb), og_fmt_bytes(device_need, a, sizeof a),
                 og_fmt_bytes(p->nonexpert_bytes, nb, sizeof nb), og_fmt_bytes(p->kv_bytes, kb, sizeof kb), in->parallel,
                 in->parallel == 1 ? "" : "s", in->ctx, og_fmt_bytes(p->workspace_bytes, wb, sizeof wb), min_slots,
                 og_fmt_bytes(p->min_slot_bytes, b, sizeof b), og_fmt_bytes(in->reserve, rb, sizeof rb),
                 og_fmt_bytes(in->vram, vb, sizeof vb), hint);
    }
    if (p->host_bytes > in->ram) {
        char hb[32], rb[32], sb2[32], gb[32], ob[32], only[96] = "";
        size_t r = strlen(p->reason);
        if (p->host_only_bytes)
            snprintf(only, sizeof only, ", the host-only tensors (%s: %s)", og_fmt_bytes(p->host_only_bytes, ob, sizeof ob),
                     p->host_only_what ? p->host_only_what : "kept in RAM");
        snprintf(p->reason + r, sizeof p->reason - r,
                 "%shost short by %s: the routed experts (%s)%s and staging (%s: pinned buffers for migrations, four "
                 "experts in flight plus 256 MiB) need %s but %s is available; "
                 "add RAM or use a smaller quantization",
                 r ? "; and " : "", og_fmt_bytes(p->host_bytes - in->ram, gb, sizeof gb),
                 og_fmt_bytes(p->routed_bytes, rb, sizeof rb), only, og_fmt_bytes(p->staging_bytes, sb2, sizeof sb2),
                 og_fmt_bytes(p->host_bytes, hb, sizeof hb), og_fmt_bytes(in->ram, a, sizeof a));
    }
    if (p->reason[0]) {
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
                if (layer_expert_bytes[l]) need = sat_add(need, sat_mul(want, layer_expert_bytes[l] / hp.n_expert));
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
        uint8_t *hot = malloc(hp.n_expert);
        if (!hot || og_hot_set(hp.n_expert, p->slots[l], cnt, hot)) { /* the hottest slots[l] experts */
            free(hot);
            free(layer_expert_bytes);
            og_plan_free(p);
            return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
        }
        for (uint32_t e = 0; e < hp.n_expert; e++) {
            total += cnt[e];
            if (hot[e]) top += cnt[e];
        }
        free(hot);
        share += total ? (double)top / (double)total : (double)p->slots[l] / hp.n_expert;
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
    uint8_t *seen = calloc((size_t)n_layer + 1, 1);
    json_t *layers = json_object_get(root, "layers");
#define PROFILE_FAIL(...)                                                                                              \
    do { /* the message first: its arguments may point into root */                                                \
        og_status fst = og_fail(err, errlen, OG_ERR_FORMAT, __VA_ARGS__);                                              \
        free(c);                                                                                                       \
        free(seen);                                                                                                    \
        json_decref(root);                                                                                             \
        return fst;                                                                                                    \
    } while (0)
    if (!c || !seen) PROFILE_FAIL("%s: out of memory", path);
    if (!json_is_array(layers)) PROFILE_FAIL("%s: no \"layers\" array", path);
    json_t *jl = json_object_get(root, "n_layer"), *je2 = json_object_get(root, "n_expert");
    if ((jl && json_integer_value(jl) != n_layer) || (je2 && json_integer_value(je2) != n_expert))
        PROFILE_FAIL("%s: made for %lld layers x %lld experts, the model has %u x %u", path,
                     (long long)json_integer_value(jl), (long long)json_integer_value(je2), n_layer, n_expert);
    size_t i;
    json_t *lv;
    json_array_foreach(layers, i, lv) {
        json_t *lj = json_object_get(lv, "layer");
        json_t *arr = json_object_get(lv, "counts");
        if (!json_is_integer(lj)) PROFILE_FAIL("%s: layers[%zu] has no integer \"layer\"", path, i);
        json_int_t l = json_integer_value(lj);
        if (l < 0 || (uint64_t)l >= n_layer)
            PROFILE_FAIL("%s: layers[%zu]: layer %lld, but the model has layers 0..%u", path, i, (long long)l, n_layer - 1);
        if (seen[l]) PROFILE_FAIL("%s: layers[%zu]: layer %lld appears twice", path, i, (long long)l);
        seen[l] = 1;
        if (!json_is_array(arr) || json_array_size(arr) != n_expert)
            PROFILE_FAIL("%s: layers[%zu]: \"counts\" must be an array of %u integers (one per expert), has %zu", path, i,
                         n_expert, json_is_array(arr) ? json_array_size(arr) : (size_t)0);
        for (uint32_t e = 0; e < n_expert; e++) {
            json_t *vj = json_array_get(arr, e);
            if (!json_is_integer(vj) || json_integer_value(vj) < 0 || json_integer_value(vj) > OG_PROFILE_COUNT_MAX)
                PROFILE_FAIL("%s: layer %lld, expert %u: counts must be integers in 0..2^40", path, (long long)l, e);
            c[(size_t)l * n_expert + e] = (uint64_t)json_integer_value(vj);
        }
    }
#undef PROFILE_FAIL
    free(seen);
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

og_status og_plan_resident(const og_plan *p, const uint64_t *profile, uint8_t *resident) {
    for (uint32_t l = 0; l < p->n_layer; l++) {
        og_status st = og_hot_set(p->n_expert, p->slots[l], profile ? profile + (size_t)l * p->n_expert : NULL,
                                  resident + (size_t)l * p->n_expert);
        if (st) return st;
    }
    return OG_OK;
}
