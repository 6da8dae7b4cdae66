/* ref_deepseek4: a plain double-precision forward pass of deepseek4 (DeepSeek
 * V4 Flash), written from shared/spec/deepseek4.md §4.1-4.2 for tests. It reads
 * the GGUF with onegpu's reader and gets weights as floats with the formats'
 * reference dequantizers (og_dequantize_row); everything else is its own and
 * shares no code with the engine's forward pass: its own key reading, mHC
 * mixes + Sinkhorn, both RoPE schedules with the YaRN ramp, the compressors
 * (overlapping ratio 4, ratio 128), the lightning indexer, the FP8/FP4 QAT,
 * sink attention, inverse RoPE + grouped output, sqrt-softplus / hash routing,
 * clamped SwiGLU, the HC head. Token by token, with its own per-sequence state.
 *
 * usage: ref_deepseek4 FILE --tokens a,b,c,... [--from P] [options]
 * Prints one JSON object: {"n_tokens": n, "options": {...}, "positions": [
 *   {"pos": p, "next": tokens[p+1] or null, "logprob": log p(next) or null,
 *    "argmax": id, "top": [[id, logprob] x5]} for p = P .. n-1 ]}
 *
 * Options (the spec's numerics are the default; llama.cpp v0.4.0 differs, see
 * tests/cli/ref_ds4.sh for the set that matches it):
 *   --no-kv-fp8       skip the FP8 E4M3 round trip of the non-RoPE KV dims
 *                     (raw rows and compressed rows; §4.2). llama.cpp's graph
 *                     has no such step (deepseek4.cpp stores kv as computed).
 *   --no-indexer-fp4  skip the FP4 E2M1 round trip of the indexer q and keys
 *                     (§4.2.1-4.2.2); the Hadamard rotation stays (orthogonal:
 *                     it alone changes no score). llama.cpp rotates
 *                     (llama_mul_mat_hadamard) but never rounds to FP4.
 *   --kv-f16          round every stored KV row (raw window, compressed rows,
 *                     indexer keys) to f16: ds4's storage, and llama.cpp's with
 *                     its default F16 KV cache (its --kv-f32 run stores F32).
 *   --act-f16         round the input of every product with an F16 weight to
 *                     f16 first, as ggml's CPU backend does (F16's vec_dot_type
 *                     is F16).
 *   --sinkhorn-iters N  override hyper_connection.sinkhorn_iterations (both the
 *                     spec and llama.cpp read the key; the spec's V4 value is 20). */
#include "og_gguf.h"
#include "og_quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXL 256

#include <stdarg.h>

__attribute__((format(printf, 1, 2))) static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ref_deepseek4: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static void *xcalloc(size_t n, size_t sz) {
    void *p = calloc(n ? n : 1, sz);
    if (!p) die("out of memory%s", "");
    return p;
}

/* ---- weights ------------------------------------------------------------ */

typedef struct mat {
    float *w;              /* [out][in] */
    int64_t in, out;       /* out counts every row of a 3-D stack */
    og_ggml_type type;     /* as stored (for --act-f16) */
} mat;

typedef struct opts {
    bool kv_fp8, indexer_fp4, kv_f16, act_f16;
    int sinkhorn_iters;    /* < 0: the key */
} opts;

static const og_gguf *G;

static bool load(const char *name, int64_t in, int64_t out, mat *m, bool required) {
    memset(m, 0, sizeof *m);
    const og_gguf_tensor *t = og_gguf_find_tensor(G, name);
    if (!t) {
        if (required) die("missing tensor %s", name);
        return false;
    }
    if (t->ne[0] != in || t->ne[1] * t->ne[2] * t->ne[3] != out) die("tensor %s: unexpected shape", name);
    uint64_t rb;
    if (og_row_bytes(t->type, (uint64_t)in, &rb)) die("tensor %s: bad row", name);
    m->w = xcalloc((size_t)(in * out), sizeof(float));
    m->in = in;
    m->out = out;
    m->type = t->type;
    for (int64_t r = 0; r < out; r++)
        if (og_dequantize_row(t->type, (const uint8_t *)t->data + r * rb, m->w + r * in, in))
            die("tensor %s: cannot dequantize", name);
    return true;
}

static mat ldl(int il, const char *suffix, int64_t in, int64_t out) {
    char nm[128];
    snprintf(nm, sizeof nm, "blk.%d.%s", il, suffix);
    mat m;
    load(nm, in, out, &m, true);
    return m;
}

/* y[r] = sum_i W[r][i] x[i] for rows [r0, r0 + n) */
static void matvec_rows(const opts *o, const mat *m, int64_t r0, int64_t n, const double *x, double *y) {
    double *xr = NULL;
    if (o->act_f16 && m->type == OG_TYPE_F16) {
        xr = xcalloc((size_t)m->in, sizeof *xr);
        for (int64_t i = 0; i < m->in; i++) xr[i] = og_fp16_to_fp32(og_fp32_to_fp16((float)x[i]));
        x = xr;
    }
    for (int64_t r = 0; r < n; r++) {
        const float *w = m->w + (r0 + r) * m->in;
        double s = 0;
        for (int64_t i = 0; i < m->in; i++) s += (double)w[i] * x[i];
        y[r] = s;
    }
    free(xr);
}

static void matvec(const opts *o, const mat *m, const double *x, double *y) { matvec_rows(o, m, 0, m->out, x, y); }

/* ---- hyperparameters (read here, not by the engine's reader) ------------ */

typedef struct rope_sched {
    double base, freq_scale, ext_factor, corr_lo, corr_hi;
} rope_sched;

typedef struct hparams {
    int n_layer, N, V, H, D, R, q_rank, o_rank, G, n_swa, IH, ID, top_k;
    int E, k, n_shared, F, hash_layers, hc, sinkhorn;
    int ratio[MAXL];
    bool norm_w;
    double w_scale, clamp_exp[MAXL], clamp_sh[MAXL], hc_eps, eps;
    rope_sched rope_swa, rope_comp;
} hparams;

static uint64_t ku(const char *key, bool required, uint64_t dflt) {
    char full[160];
    snprintf(full, sizeof full, "deepseek4.%s", key);
    uint64_t v;
    og_status st = og_gguf_get_u64(G, full, &v);
    if (st == OG_ERR_NOT_FOUND && !required) return dflt;
    if (st) die("key %s missing or not an integer", full);
    return v;
}

static double kf(const char *key, bool required, double dflt) {
    char full[160];
    snprintf(full, sizeof full, "deepseek4.%s", key);
    double v;
    og_status st = og_gguf_get_f64(G, full, &v);
    if (st == OG_ERR_NOT_FOUND && !required) return dflt;
    if (st) die("key %s missing or not a number", full);
    return v;
}

/* A per-layer float key: scalar or array. */
static void kf_layers(const char *key, int n, double *out, bool required, const double *fallback) {
    char full[160];
    snprintf(full, sizeof full, "deepseek4.%s", key);
    const og_gguf_kv *kv = og_gguf_find_kv(G, full);
    for (int i = 0; i < n; i++) {
        if (!kv) {
            if (required) die("key %s missing", full);
            out[i] = fallback[i];
        } else if (og_gguf_kv_num_f64(kv, kv->type == OG_GGUF_ARRAY ? (uint64_t)i : 0, &out[i])) {
            die("key %s: bad entry", full);
        }
    }
}

/* YaRN correction range (ggml_rope_yarn_corr_dims, spec §4.1.2): the pair
 * indices where the ramp goes from extrapolation to interpolation. */
static double corr_dim(int n_dims, double n_ctx_orig, double beta, double base) {
    const double pi = 3.14159265358979323846;
    return n_dims * log(n_ctx_orig / (beta * 2 * pi)) / (2 * log(base));
}

static void read_hparams(hparams *h) {
    memset(h, 0, sizeof *h);
    char arch[32] = "";
    og_gguf_get_cstr(G, "general.architecture", arch, sizeof arch);
    if (strcmp(arch, "deepseek4")) die("not a deepseek4 file (%s)", arch);
    h->n_layer = (int)(ku("block_count", true, 0) - ku("nextn_predict_layers", false, 0));
    if (h->n_layer < 1 || h->n_layer > MAXL) die("block_count out of range%s", "");
    h->N = (int)ku("embedding_length", true, 0);
    h->H = (int)ku("attention.head_count", true, 0);
    h->D = (int)ku("attention.key_length", true, 0);
    h->R = (int)ku("rope.dimension_count", true, 0);
    h->q_rank = (int)ku("attention.q_lora_rank", true, 0);
    h->o_rank = (int)ku("attention.output_lora_rank", true, 0);
    h->G = (int)ku("attention.output_group_count", true, 0);
    h->n_swa = (int)ku("attention.sliding_window", true, 0);
    h->IH = (int)ku("attention.indexer.head_count", false, 0);
    h->ID = (int)ku("attention.indexer.key_length", false, 0);
    h->top_k = (int)ku("attention.indexer.top_k", false, 0);
    h->E = (int)ku("expert_count", true, 0);
    h->k = (int)ku("expert_used_count", true, 0);
    h->n_shared = (int)ku("expert_shared_count", true, 0);
    h->F = (int)ku("expert_feed_forward_length", true, 0);
    h->hash_layers = (int)ku("hash_layer_count", true, 0);
    h->hc = (int)ku("hyper_connection.count", true, 0);
    h->sinkhorn = (int)ku("hyper_connection.sinkhorn_iterations", true, 0);
    if (ku("expert_gating_func", true, 0) != 4) die("expert_gating_func is not sqrt-softplus (4)%s", "");
    bool nw = false;
    og_gguf_get_bool(G, "deepseek4.expert_weights_norm", &nw);
    h->norm_w = nw;
    h->w_scale = kf("expert_weights_scale", true, 0);
    h->hc_eps = kf("hyper_connection.epsilon", true, 0);
    h->eps = kf("attention.layer_norm_rms_epsilon", true, 0);
    kf_layers("swiglu_clamp_exp", h->n_layer, h->clamp_exp, true, NULL);
    kf_layers("swiglu_clamp_shexp", h->n_layer, h->clamp_sh, false, h->clamp_exp);
    const og_gguf_kv *cr = og_gguf_find_kv(G, "deepseek4.attention.compress_ratios");
    if (!cr || cr->type != OG_GGUF_ARRAY || cr->arr_n < (uint64_t)h->n_layer) die("bad compress_ratios%s", "");
    for (int i = 0; i < h->n_layer; i++) {
        int64_t r;
        og_gguf_kv_num_i64(cr, (uint64_t)i, &r);
        if (r != 0 && r != 4 && r != 128) die("compress ratio other than 0, 4, 128%s", "");
        if (r == 4 && (h->ID < h->R || (h->ID & (h->ID - 1)) || h->IH < 1 || h->top_k < 1))
            die("indexer sizes outside what ref_deepseek4 handles%s", "");
        h->ratio[i] = (int)r;
    }
    /* the sizes this program's fixed buffers hold (row[4096], pre[16], sel[64], taken[4096]) */
    if (h->N < 1 || h->H < 1 || h->G < 1 || h->H % h->G || h->D < 2 || h->D > 4096 || h->R < 2 || h->R % 2 ||
        h->R > h->D || h->ID > 4096 || h->hc < 1 || h->hc > 16 || h->k < 1 || h->k > 64 || h->E < h->k ||
        h->E > 4096 || h->n_swa < 1 || h->hash_layers > h->n_layer)
        die("hyperparameters outside what ref_deepseek4 handles%s", "");
    const og_gguf_tensor *te = og_gguf_find_tensor(G, "token_embd.weight");
    if (!te) die("no token_embd%s", "");
    h->V = (int)te->ne[1];
    /* §4.1.2: window layers plain RoPE at rope.freq_base; compressed layers
     * compress_rope_freq_base with rope.scaling (YaRN: ramp, no magnitude) */
    h->rope_swa = (rope_sched){kf("rope.freq_base", false, 10000.0), 1.0, 0.0, 0, 0};
    char stype[16] = "linear";
    og_gguf_get_cstr(G, "deepseek4.rope.scaling.type", stype, sizeof stype);
    double factor = kf("rope.scaling.factor", false, 1.0);
    double base_c = kf("attention.compress_rope_freq_base", false, h->rope_swa.base);
    double n_orig = (double)ku("rope.scaling.original_context_length", false, ku("context_length", true, 0));
    double bf = kf("rope.scaling.yarn_beta_fast", false, 32.0), bs = kf("rope.scaling.yarn_beta_slow", false, 1.0);
    h->rope_comp.base = base_c;
    h->rope_comp.freq_scale = strcmp(stype, "none") && factor != 0 ? 1.0 / factor : 1.0;
    h->rope_comp.ext_factor = !strcmp(stype, "yarn") ? 1.0 : 0.0;
    h->rope_comp.corr_lo = fmax(0.0, floor(corr_dim(h->R, n_orig, bf, base_c)));
    h->rope_comp.corr_hi = fmin(h->R - 1.0, ceil(corr_dim(h->R, n_orig, bs, base_c)));
}

/* ---- model -------------------------------------------------------------- */

typedef struct layer {
    mat hc_attn_fn, hc_ffn_fn, hc_attn_base, hc_ffn_base, hc_attn_scale, hc_ffn_scale;
    mat attn_norm, q_a, q_a_norm, q_b, kv, kv_norm, sinks, o_a, o_b;
    mat comp_kv, comp_gate, comp_ape, comp_norm;
    mat idx_q_b, idx_proj, idx_kv, idx_gate, idx_ape, idx_norm;
    mat ffn_norm, gate_inp, bias, gate_exps, up_exps, down_exps, gate_sh, up_sh, down_sh;
    int32_t *tid2eid;      /* [V][k] */
} layer;

typedef struct model {
    hparams h;
    mat tok_embd, output, out_norm, hc_head_fn, hc_head_base, hc_head_scale;
    layer L[MAXL];
} model;

static void load_model(model *m) {
    hparams *h = &m->h;
    const int N = h->N, hcN = h->hc * h->N, mix = (2 + h->hc) * h->hc, D = h->D;
    load("token_embd.weight", N, h->V, &m->tok_embd, true);
    if (!load("output.weight", N, h->V, &m->output, false)) m->output = m->tok_embd;
    load("output_norm.weight", N, 1, &m->out_norm, true);
    load("output_hc_fn.weight", hcN, h->hc, &m->hc_head_fn, true);
    load("output_hc_base.weight", h->hc, 1, &m->hc_head_base, true);
    load("output_hc_scale.weight", 1, 1, &m->hc_head_scale, true);
    for (int il = 0; il < h->n_layer; il++) {
        layer *l = &m->L[il];
        const int r = h->ratio[il], c = r == 4 ? 2 : 1;
        l->hc_attn_fn = ldl(il, "hc_attn_fn.weight", hcN, mix);
        l->hc_attn_base = ldl(il, "hc_attn_base.weight", mix, 1);
        l->hc_attn_scale = ldl(il, "hc_attn_scale.weight", 3, 1);
        l->hc_ffn_fn = ldl(il, "hc_ffn_fn.weight", hcN, mix);
        l->hc_ffn_base = ldl(il, "hc_ffn_base.weight", mix, 1);
        l->hc_ffn_scale = ldl(il, "hc_ffn_scale.weight", 3, 1);
        l->attn_norm = ldl(il, "attn_norm.weight", N, 1);
        l->q_a = ldl(il, "attn_q_a.weight", N, h->q_rank);
        l->q_a_norm = ldl(il, "attn_q_a_norm.weight", h->q_rank, 1);
        l->q_b = ldl(il, "attn_q_b.weight", h->q_rank, (int64_t)h->H * D);
        l->kv = ldl(il, "attn_kv.weight", N, D);
        l->kv_norm = ldl(il, "attn_kv_a_norm.weight", D, 1);
        l->sinks = ldl(il, "attn_sinks.weight", h->H, 1);
        l->o_a = ldl(il, "attn_output_a.weight", (int64_t)h->H * D / h->G, (int64_t)h->G * h->o_rank);
        l->o_b = ldl(il, "attn_output_b.weight", (int64_t)h->G * h->o_rank, N);
        if (r) {
            l->comp_kv = ldl(il, "attn_compressor_kv.weight", N, c * D);
            l->comp_gate = ldl(il, "attn_compressor_gate.weight", N, c * D);
            l->comp_ape = ldl(il, "attn_compressor_ape.weight", c * D, r);
            l->comp_norm = ldl(il, "attn_compressor_norm.weight", D, 1);
        }
        if (r == 4) {
            l->idx_q_b = ldl(il, "indexer.attn_q_b.weight", h->q_rank, (int64_t)h->IH * h->ID);
            l->idx_proj = ldl(il, "indexer.proj.weight", N, h->IH);
            l->idx_kv = ldl(il, "indexer_compressor_kv.weight", N, 2 * h->ID);
            l->idx_gate = ldl(il, "indexer_compressor_gate.weight", N, 2 * h->ID);
            l->idx_ape = ldl(il, "indexer_compressor_ape.weight", 2 * h->ID, 4);
            l->idx_norm = ldl(il, "indexer_compressor_norm.weight", h->ID, 1);
        }
        l->ffn_norm = ldl(il, "ffn_norm.weight", N, 1);
        l->gate_inp = ldl(il, "ffn_gate_inp.weight", N, h->E);
        if (il < h->hash_layers) {
            char nm[96];
            snprintf(nm, sizeof nm, "blk.%d.ffn_gate_tid2eid.weight", il);
            const og_gguf_tensor *t = og_gguf_find_tensor(G, nm);
            if (!t || t->type != OG_TYPE_I32 || t->ne[0] != h->k || t->ne[1] != h->V) die("bad %s", nm);
            l->tid2eid = xcalloc((size_t)h->k * (size_t)h->V, sizeof(int32_t));
            memcpy(l->tid2eid, t->data, (size_t)h->k * (size_t)h->V * sizeof(int32_t));
            for (int64_t i = 0; i < (int64_t)h->k * h->V; i++)
                if (l->tid2eid[i] < 0 || l->tid2eid[i] >= h->E) die("%s: expert id out of range", nm);
        } else {
            l->bias = ldl(il, "exp_probs_b.bias", h->E, 1);
        }
        l->gate_exps = ldl(il, "ffn_gate_exps.weight", N, (int64_t)h->F * h->E);
        l->up_exps = ldl(il, "ffn_up_exps.weight", N, (int64_t)h->F * h->E);
        l->down_exps = ldl(il, "ffn_down_exps.weight", h->F, (int64_t)N * h->E);
        if (h->n_shared) {
            l->gate_sh = ldl(il, "ffn_gate_shexp.weight", N, (int64_t)h->F * h->n_shared);
            l->up_sh = ldl(il, "ffn_up_shexp.weight", N, (int64_t)h->F * h->n_shared);
            l->down_sh = ldl(il, "ffn_down_shexp.weight", (int64_t)h->F * h->n_shared, N);
        }
    }
}

/* ---- primitives (§4.1) ---------------------------------------------------- */

/* RMSNorm (§4.1.1) in place, times w[] when given */
static void rmsnorm(double *x, int n, const float *w, double eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    double s = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) x[i] = x[i] * s * (w ? (double)w[i] : 1.0);
}

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* Partial RoPE on x[0..R) (the caller passes the tail), adjacent pairs (§4.1.2);
 * inverse: the same rotation with sin negated. */
static void rope(const rope_sched *s, int R, double *x, double pos, bool inverse) {
    for (int j = 0; j < R / 2; j++) {
        double theta_extrap = pos * pow(s->base, -2.0 * j / R);
        double theta_interp = s->freq_scale * theta_extrap, theta = theta_interp;
        if (s->ext_factor != 0) {
            double y = (j - s->corr_lo) / fmax(0.001, s->corr_hi - s->corr_lo);
            double ramp = (1 - fmin(1, fmax(0, y))) * s->ext_factor;
            theta = theta_interp * (1 - ramp) + theta_extrap * ramp;
        }
        double c = cos(theta), sn = inverse ? -sin(theta) : sin(theta);
        double a = x[2 * j], b = x[2 * j + 1];
        x[2 * j] = a * c - b * sn;
        x[2 * j + 1] = a * sn + b * c;
    }
}

/* Simulated FP8 E4M3 round trip in blocks of 64 (§4.2): scale
 * 2^ceil(log2(max(amax, 1e-4) / 448)), clamp to +-448, nearest E4M3 value,
 * ties to even (3 mantissa bits; subnormals below 2^-6 step 2^-9). */
static double e4m3(double v) {
    double a = fabs(v);
    if (a == 0) return 0;
    if (a > 448) a = 448;
    int e = (int)floor(log2(a));
    if (e < -6) e = -6;
    double step = ldexp(1.0, e - 3);
    double q = nearbyint(a / step) * step;
    if (q > 448) q = 448;
    return v < 0 ? -q : q;
}

static void fp8_qat(double *x, int n) {
    for (int b0 = 0; b0 < n; b0 += 64) {
        int b1 = b0 + 64 < n ? b0 + 64 : n;
        double amax = 0;
        for (int i = b0; i < b1; i++) amax = fmax(amax, fabs(x[i]));
        double scale = ldexp(1.0, (int)ceil(log2(fmax(amax, 1e-4) / 448.0)));
        for (int i = b0; i < b1; i++) x[i] = e4m3(x[i] / scale) * scale;
    }
}

/* FP4 E2M1 round trip in blocks of 32 (§4.2.1): scale 2^ceil(log2(amax / 6)),
 * values {0, .5, 1, 1.5, 2, 3, 4, 6}, nearest, ties to the even code. */
static double e2m1(double v) {
    static const double grid[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    double a = fabs(v), best = 0;
    int bi = 0;
    for (int i = 0; i < 8; i++) {
        double d = fabs(a - grid[i]), db = fabs(a - best);
        if (d < db || (d == db && i % 2 == 0 && bi % 2 == 1)) best = grid[i], bi = i;
    }
    return v < 0 ? -best : best;
}

static void fp4_qat(double *x, int n) {
    for (int b0 = 0; b0 < n; b0 += 32) {
        int b1 = b0 + 32 < n ? b0 + 32 : n;
        double amax = 0;
        for (int i = b0; i < b1; i++) amax = fmax(amax, fabs(x[i]));
        if (amax == 0) continue;
        double scale = ldexp(1.0, (int)ceil(log2(amax / 6.0)));
        for (int i = b0; i < b1; i++) x[i] = e2m1(x[i] / scale) * scale;
    }
}

/* Orthonormal Hadamard rotation of n (a power of two) values: the butterfly
 * times 1/sqrt(n) (§4.2.1). */
static void hadamard(double *x, int n) {
    for (int len = 1; len < n; len *= 2)
        for (int i = 0; i < n; i += 2 * len)
            for (int j = i; j < i + len; j++) {
                double a = x[j], b = x[j + len];
                x[j] = a + b;
                x[j + len] = a - b;
            }
    for (int i = 0; i < n; i++) x[i] /= sqrt((double)n);
}

static void round_f16(double *x, int n) {
    for (int i = 0; i < n; i++) x[i] = og_fp16_to_fp32(og_fp32_to_fp16((float)x[i]));
}

/* ---- mHC (§4.1.3) ---------------------------------------------------------- */

/* pre[hc], post[hc], C[hc][hc] (C[a][b]: output copy a, input copy b) */
static void hc_mixes(const model *m, const opts *o, const double *S, const mat *fn, const mat *scale, const mat *base,
                     double *pre, double *post, double *C) {
    const hparams *h = &m->h;
    const int hc = h->hc, n = hc * h->N, mix = (2 + hc) * hc;
    double *flat = xcalloc((size_t)n, sizeof *flat), *mx = xcalloc((size_t)mix, sizeof *mx);
    memcpy(flat, S, (size_t)n * sizeof *flat);
    rmsnorm(flat, n, NULL, h->eps);
    matvec(o, fn, flat, mx);
    const float *sc = scale->w, *bs = base->w;
    for (int k = 0; k < hc; k++) {
        pre[k] = sigmoid(mx[k] * sc[0] + bs[k]) + h->hc_eps;
        post[k] = 2 * sigmoid(mx[hc + k] * sc[1] + bs[hc + k]);
    }
    for (int a = 0; a < hc; a++)
        for (int b = 0; b < hc; b++) C[a * hc + b] = mx[2 * hc + a + hc * b] * sc[2] + bs[2 * hc + a + hc * b];
    /* Sinkhorn: softmax over a for each b, + eps; rows / (sum over b + eps);
     * then iters - 1 times: columns / (sum over a + eps), rows / (sum over b + eps) */
    const double eps = h->hc_eps;
    const int iters = o->sinkhorn_iters >= 0 ? o->sinkhorn_iters : h->sinkhorn;
    for (int b = 0; b < hc; b++) {
        double mxv = -INFINITY, s = 0;
        for (int a = 0; a < hc; a++) mxv = fmax(mxv, C[a * hc + b]);
        for (int a = 0; a < hc; a++) s += exp(C[a * hc + b] - mxv);
        for (int a = 0; a < hc; a++) C[a * hc + b] = exp(C[a * hc + b] - mxv) / s + eps;
    }
    for (int it = 0; it < iters; it++) {
        if (it > 0)
            for (int b = 0; b < hc; b++) {
                double s = 0;
                for (int a = 0; a < hc; a++) s += C[a * hc + b];
                for (int a = 0; a < hc; a++) C[a * hc + b] /= s + eps;
            }
        for (int a = 0; a < hc; a++) {
            double s = 0;
            for (int b = 0; b < hc; b++) s += C[a * hc + b];
            for (int b = 0; b < hc; b++) C[a * hc + b] /= s + eps;
        }
    }
    free(flat);
    free(mx);
}

static void collapse(const hparams *h, const double *S, const double *w, double *x) {
    for (int i = 0; i < h->N; i++) {
        double s = 0;
        for (int k = 0; k < h->hc; k++) s += w[k] * S[k * h->N + i];
        x[i] = s;
    }
}

static void expand(const hparams *h, double *S, const double *y, const double *post, const double *C) {
    const int hc = h->hc, N = h->N;
    double *old = xcalloc((size_t)hc * N, sizeof *old);
    memcpy(old, S, (size_t)hc * N * sizeof *old);
    for (int a = 0; a < hc; a++)
        for (int i = 0; i < N; i++) {
            double s = post[a] * y[i];
            for (int b = 0; b < hc; b++) s += C[a * hc + b] * old[b * N + i];
            S[a * N + i] = s;
        }
    free(old);
}

/* ---- per-sequence state ---------------------------------------------------- */

typedef struct rows {
    double *v;   /* [n][w] */
    int n, cap, w;
} rows;

static double *rows_push(rows *r) {
    if (r->n == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 64;
        r->v = realloc(r->v, (size_t)r->cap * (size_t)r->w * sizeof *r->v);
        if (!r->v) die("out of memory%s", "");
    }
    return r->v + (size_t)r->n++ * (size_t)r->w;
}

typedef struct lstate {
    rows kv;                   /* raw rows by position [p][D] (the window reads the last n_swa) */
    rows comp_kv, comp_sc;     /* compressor inputs by position [p][c D] */
    rows comp;                 /* emitted compressed rows [D] */
    rows idx_kv, idx_sc;       /* indexer compressor inputs [p][2 ID] */
    rows idx;                  /* emitted index keys [ID] */
} lstate;

/* One compressor step at position p (§4.2.1): stores (kv_t, sc_t) and, when
 * (p+1) % r == 0, writes the compressed row of width dout into out (returns
 * true). r = 4 overlaps: lane j for the previous window, lane dout + j for the
 * current one, one softmax over the 8 entries; a window before position 0
 * counts with score -inf. */
static bool compress_step(const opts *o, const mat *wkv, const mat *wgate, const mat *ape, int r, int dout,
                          rows *kvs, rows *scs, const double *x, int p, double *out) {
    const int w = (int)wkv->out;
    double *kv = rows_push(kvs), *sc = rows_push(scs);
    matvec(o, wkv, x, kv);
    matvec(o, wgate, x, sc);
    for (int j = 0; j < w; j++) sc[j] += ape->w[(size_t)(p % r) * (size_t)w + (size_t)j];
    if ((p + 1) % r) return false;
    const int start = p + 1 - r;
    for (int j = 0; j < dout; j++) {
        double s[256], v[256];
        int n = 0;
        if (r == 4)
            for (int t = start - r; t < start; t++) {
                s[n] = t < 0 ? -INFINITY : scs->v[(size_t)t * w + j];
                v[n++] = t < 0 ? 0 : kvs->v[(size_t)t * w + j];
            }
        const int lane = r == 4 ? dout : 0;
        for (int t = start; t <= p; t++) {
            s[n] = scs->v[(size_t)t * w + lane + j];
            v[n++] = kvs->v[(size_t)t * w + lane + j];
        }
        double mx = -INFINITY, z = 0, acc = 0;
        for (int i = 0; i < n; i++) mx = fmax(mx, s[i]);
        for (int i = 0; i < n; i++) {
            double e = exp(s[i] - mx);
            z += e;
            acc += e * v[i];
        }
        out[j] = acc / z;
    }
    return true;
}

/* ---- the sublayers ----------------------------------------------------------- */

static void attention(const model *m, const opts *o, lstate *st, int il, const double *x, int p, double *y) {
    const hparams *h = &m->h;
    const layer *l = &m->L[il];
    const int D = h->D, H = h->H, R = h->R, nope = D - R, r = h->ratio[il];
    const rope_sched *rs = r ? &h->rope_comp : &h->rope_swa;
    double *qr = xcalloc((size_t)h->q_rank, sizeof *qr), *q = xcalloc((size_t)H * D, sizeof *q);
    matvec(o, &l->q_a, x, qr);
    rmsnorm(qr, h->q_rank, l->q_a_norm.w, h->eps);
    matvec(o, &l->q_b, qr, q);
    for (int hd = 0; hd < H; hd++) {
        rmsnorm(q + hd * D, D, NULL, h->eps); /* per head, no weight */
        rope(rs, R, q + hd * D + nope, p, false);
    }
    double *kv = rows_push(&st->kv);
    matvec(o, &l->kv, x, kv);
    rmsnorm(kv, D, l->kv_norm.w, h->eps);
    rope(rs, R, kv + nope, p, false);
    if (o->kv_fp8) fp8_qat(kv, nope);
    if (o->kv_f16) round_f16(kv, D);

    /* the compressors (§4.2.1), then the rows this query sees */
    int *sel = NULL, n_sel = 0;
    if (r) {
        double row[4096];
        if (compress_step(o, &l->comp_kv, &l->comp_gate, &l->comp_ape, r, D, &st->comp_kv, &st->comp_sc, x, p, row)) {
            rmsnorm(row, D, l->comp_norm.w, h->eps);
            rope(&h->rope_comp, R, row + nope, p + 1 - r, false);
            if (o->kv_fp8) fp8_qat(row, nope);
            if (o->kv_f16) round_f16(row, D);
            memcpy(rows_push(&st->comp), row, (size_t)D * sizeof *row);
        }
        if (r == 4 && compress_step(o, &l->idx_kv, &l->idx_gate, &l->idx_ape, 4, h->ID, &st->idx_kv, &st->idx_sc, x, p,
                                    row)) {
            rmsnorm(row, h->ID, l->idx_norm.w, h->eps);
            rope(&h->rope_comp, R, row + h->ID - R, p + 1 - 4, false);
            hadamard(row, h->ID);
            if (o->indexer_fp4) fp4_qat(row, h->ID);
            if (o->kv_f16) round_f16(row, h->ID);
            memcpy(rows_push(&st->idx), row, (size_t)h->ID * sizeof *row);
        }
        const int nc = st->comp.n;
        sel = xcalloc((size_t)nc + 1, sizeof *sel);
        if (r == 4 && nc > h->top_k) {
            /* lightning indexer (§4.2.2): top_k rows by sum_h w_h relu(q_h . k_c) */
            const int IH = h->IH, ID = h->ID;
            double *qi = xcalloc((size_t)IH * ID, sizeof *qi), *wt = xcalloc((size_t)IH, sizeof *wt);
            double *score = xcalloc((size_t)nc, sizeof *score);
            matvec(o, &l->idx_q_b, qr, qi);
            for (int hd = 0; hd < IH; hd++) {
                rope(&h->rope_comp, R, qi + hd * ID + ID - R, p, false);
                hadamard(qi + hd * ID, ID);
                if (o->indexer_fp4) fp4_qat(qi + hd * ID, ID);
            }
            matvec(o, &l->idx_proj, x, wt);
            for (int hd = 0; hd < IH; hd++) wt[hd] /= sqrt((double)ID * IH);
            for (int c = 0; c < nc; c++) {
                double s = 0;
                for (int hd = 0; hd < IH; hd++) {
                    double d = 0;
                    for (int i = 0; i < ID; i++) d += qi[hd * ID + i] * st->idx.v[(size_t)c * ID + i];
                    s += wt[hd] * fmax(0.0, d);
                }
                score[c] = s;
            }
            bool *taken = xcalloc((size_t)nc, sizeof *taken);
            for (int t = 0; t < h->top_k; t++) {
                int best = -1;
                for (int c = 0; c < nc; c++)
                    if (!taken[c] && (best < 0 || score[c] > score[best])) best = c;
                taken[best] = true;
                sel[n_sel++] = best;
            }
            free(taken);
            free(score);
            free(qi);
            free(wt);
        } else {
            for (int c = 0; c < nc; c++) sel[n_sel++] = c;
        }
    }

    /* attention with the sink over [window rows, selected compressed rows] (§4.1.4) */
    const int w0 = p - h->n_swa + 1 > 0 ? p - h->n_swa + 1 : 0, n_raw = p - w0 + 1, n_rows = n_raw + n_sel;
    const double **K = xcalloc((size_t)n_rows, sizeof *K);
    for (int t = 0; t < n_raw; t++) K[t] = st->kv.v + (size_t)(w0 + t) * D;
    for (int t = 0; t < n_sel; t++) K[n_raw + t] = st->comp.v + (size_t)sel[t] * D;
    double *att = xcalloc((size_t)H * D, sizeof *att), *s = xcalloc((size_t)n_rows, sizeof *s);
    for (int hd = 0; hd < H; hd++) {
        const double *qh = q + hd * D;
        double mx = l->sinks.w[hd];
        for (int t = 0; t < n_rows; t++) {
            double d = 0;
            for (int i = 0; i < D; i++) d += qh[i] * K[t][i];
            s[t] = d / sqrt((double)D);
            mx = fmax(mx, s[t]);
        }
        double z = exp(l->sinks.w[hd] - mx);
        double *oh = att + hd * D;
        for (int t = 0; t < n_rows; t++) {
            double e = exp(s[t] - mx);
            z += e;
            for (int i = 0; i < D; i++) oh[i] += e * K[t][i];
        }
        for (int i = 0; i < D; i++) oh[i] /= z;
        rope(rs, R, oh + nope, p, true); /* inverse RoPE at the query position (§4.1.5) */
    }
    /* grouped output (§4.1.5): group g (H/G heads) -> rows [g o_rank, (g+1) o_rank) of attn_output_a */
    const int gdim = H * D / h->G;
    double *low = xcalloc((size_t)h->G * h->o_rank, sizeof *low);
    for (int g = 0; g < h->G; g++)
        matvec_rows(o, &l->o_a, (int64_t)g * h->o_rank, h->o_rank, att + (size_t)g * gdim, low + (size_t)g * h->o_rank);
    matvec(o, &l->o_b, low, y);
    free(low);
    free(att);
    free(s);
    free(K);
    free(sel);
    free(qr);
    free(q);
}

/* silu(min(g, c)) * clamp(u, -c, c); c = 0: plain SwiGLU */
static double swiglu(double g, double u, double c) {
    if (c > 1e-6) {
        g = fmin(g, c);
        u = fmin(fmax(u, -c), c);
    }
    return g / (1 + exp(-g)) * u;
}

static void ffn_expert(const opts *o, const mat *gate, const mat *up, const mat *down, int64_t e, int F, int N, double c,
                       const double *x, double w, double *y) {
    double *g = xcalloc((size_t)F, sizeof *g), *u = xcalloc((size_t)F, sizeof *u), *d = xcalloc((size_t)N, sizeof *d);
    matvec_rows(o, gate, e * F, F, x, g);
    matvec_rows(o, up, e * F, F, x, u);
    for (int i = 0; i < F; i++) g[i] = swiglu(g[i], u[i], c);
    matvec_rows(o, down, e * N, N, g, d);
    for (int i = 0; i < N; i++) y[i] += w * d[i];
    free(g);
    free(u);
    free(d);
}

static void moe(const model *m, const opts *o, int il, const double *x, int token, double *y) {
    const hparams *h = &m->h;
    const layer *l = &m->L[il];
    const int E = h->E, k = h->k;
    double *logit = xcalloc((size_t)E, sizeof *logit), *score = xcalloc((size_t)E, sizeof *score);
    int sel[64];
    matvec(o, &l->gate_inp, x, logit);
    for (int e = 0; e < E; e++) { /* sqrt(softplus), softplus(z) = z above 20 (ggml's threshold) */
        double sp = logit[e] > 20 ? logit[e] : log1p(exp(logit[e]));
        score[e] = sqrt(sp);
    }
    if (il < h->hash_layers) {
        for (int i = 0; i < k; i++) sel[i] = l->tid2eid[(size_t)token * k + i];
    } else { /* the bias chooses, the weights are unbiased (§4.1.6) */
        bool taken[4096] = {false};
        for (int i = 0; i < k; i++) {
            int best = -1;
            for (int e = 0; e < E; e++)
                if (!taken[e] && (best < 0 || score[e] + l->bias.w[e] > score[best] + l->bias.w[best])) best = e;
            taken[best] = true;
            sel[i] = best;
        }
    }
    double w[64], sum = 0;
    for (int i = 0; i < k; i++) sum += w[i] = score[sel[i]];
    for (int i = 0; i < k; i++) {
        if (h->norm_w) w[i] /= fmax(sum, 6.103515625e-5);
        w[i] *= h->w_scale;
    }
    memset(y, 0, (size_t)h->N * sizeof *y);
    for (int i = 0; i < k; i++)
        ffn_expert(o, &l->gate_exps, &l->up_exps, &l->down_exps, sel[i], h->F, h->N, h->clamp_exp[il], x, w[i], y);
    if (h->n_shared)
        ffn_expert(o, &l->gate_sh, &l->up_sh, &l->down_sh, 0, h->F * h->n_shared, h->N, h->clamp_sh[il], x, 1.0, y);
    free(logit);
    free(score);
}

/* ---- one token -------------------------------------------------------------- */

static void forward(const model *m, const opts *o, lstate *st, int token, int p, double *logits) {
    const hparams *h = &m->h;
    const int N = h->N, hc = h->hc;
    double *S = xcalloc((size_t)hc * N, sizeof *S), *x = xcalloc((size_t)N, sizeof *x), *y = xcalloc((size_t)N, sizeof *y);
    double pre[16], post[16], C[256];
    for (int k = 0; k < hc; k++)
        for (int i = 0; i < N; i++) S[k * N + i] = m->tok_embd.w[(size_t)token * N + i];
    for (int il = 0; il < h->n_layer; il++) {
        const layer *l = &m->L[il];
        hc_mixes(m, o, S, &l->hc_attn_fn, &l->hc_attn_scale, &l->hc_attn_base, pre, post, C);
        collapse(h, S, pre, x);
        rmsnorm(x, N, l->attn_norm.w, h->eps);
        attention(m, o, &st[il], il, x, p, y);
        expand(h, S, y, post, C);
        hc_mixes(m, o, S, &l->hc_ffn_fn, &l->hc_ffn_scale, &l->hc_ffn_base, pre, post, C);
        collapse(h, S, pre, x);
        rmsnorm(x, N, l->ffn_norm.w, h->eps);
        moe(m, o, il, x, token, y);
        expand(h, S, y, post, C);
    }
    if (logits) { /* the HC head (§4.2 step 3) */
        double *flat = xcalloc((size_t)hc * N, sizeof *flat), mx[16], w[16];
        memcpy(flat, S, (size_t)hc * N * sizeof *flat);
        rmsnorm(flat, hc * N, NULL, h->eps);
        matvec(o, &m->hc_head_fn, flat, mx);
        for (int k = 0; k < hc; k++) w[k] = sigmoid(mx[k] * m->hc_head_scale.w[0] + m->hc_head_base.w[k]) + h->hc_eps;
        collapse(h, S, w, x);
        rmsnorm(x, N, m->out_norm.w, h->eps);
        matvec(o, &m->output, x, logits);
        free(flat);
    }
    free(S);
    free(x);
    free(y);
}

int main(int argc, char **argv) {
    const char *path = NULL, *toks = NULL;
    int from = 0;
    opts o = {.kv_fp8 = true, .indexer_fp4 = true, .sinkhorn_iters = -1};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokens") && i + 1 < argc) toks = argv[++i];
        else if (!strcmp(argv[i], "--from") && i + 1 < argc) from = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-kv-fp8")) o.kv_fp8 = false;
        else if (!strcmp(argv[i], "--no-indexer-fp4")) o.indexer_fp4 = false;
        else if (!strcmp(argv[i], "--kv-f16")) o.kv_f16 = true;
        else if (!strcmp(argv[i], "--act-f16")) o.act_f16 = true;
        else if (!strcmp(argv[i], "--sinkhorn-iters") && i + 1 < argc) o.sinkhorn_iters = atoi(argv[++i]);
        else if (argv[i][0] == '-') die("unknown option %s (see the comment at the top of ref_deepseek4.c)", argv[i]);
        else path = argv[i];
    }
    if (!path || !toks) die("usage: ref_deepseek4 FILE --tokens a,b,c [--from P] [options]%s", "");
    og_gguf *g;
    char err[512];
    if (og_gguf_open(path, 0, &g, err, sizeof err)) die("%s", err);
    G = g;
    static model m;
    read_hparams(&m.h);
    load_model(&m);
    const hparams *h = &m.h;
    int n = 0, cap = 64;
    int *tok = xcalloc((size_t)cap, sizeof *tok);
    for (const char *s = toks; *s;) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v >= h->V) die("bad token list %s", toks);
        if (n == cap) tok = realloc(tok, (size_t)(cap *= 2) * sizeof *tok);
        tok[n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') die("bad token list %s", toks);
    }
    lstate *st = xcalloc((size_t)h->n_layer, sizeof *st);
    for (int il = 0; il < h->n_layer; il++) {
        const int c = h->ratio[il] == 4 ? 2 : 1;
        st[il].kv.w = st[il].comp.w = h->D;
        st[il].comp_kv.w = st[il].comp_sc.w = c * h->D;
        st[il].idx_kv.w = st[il].idx_sc.w = 2 * h->ID;
        st[il].idx.w = h->ID > 0 ? h->ID : 1;
    }
    double *logits = xcalloc((size_t)h->V, sizeof *logits);
    printf("{\"n_tokens\": %d, \"options\": {\"kv_fp8\": %s, \"indexer_fp4\": %s, \"kv_f16\": %s, \"act_f16\": %s, "
           "\"sinkhorn_iters\": %d}, \"positions\": [",
           n, o.kv_fp8 ? "true" : "false", o.indexer_fp4 ? "true" : "false", o.kv_f16 ? "true" : "false",
           o.act_f16 ? "true" : "false", o.sinkhorn_iters >= 0 ? o.sinkhorn_iters : h->sinkhorn);
    for (int p = 0; p < n; p++) {
        forward(&m, &o, st, tok[p], p, p >= from ? logits : NULL);
        if (p < from) continue;
        double mx = -INFINITY, z = 0;
        for (int v = 0; v < h->V; v++) mx = fmax(mx, logits[v]);
        for (int v = 0; v < h->V; v++) z += exp(logits[v] - mx);
        const double lz = mx + log(z);
        int top[5];
        for (int t = 0; t < 5; t++) {
            top[t] = -1;
            for (int v = 0; v < h->V; v++) {
                bool used = false;
                for (int u = 0; u < t; u++) used |= top[u] == v;
                if (!used && (top[t] < 0 || logits[v] > logits[top[t]])) top[t] = v;
            }
        }
        printf("%s{\"pos\": %d, \"next\": ", p > from ? ", " : "", p);
        if (p + 1 < n) printf("%d, \"logprob\": %.10f", tok[p + 1], logits[tok[p + 1]] - lz);
        else printf("null, \"logprob\": null");
        printf(", \"argmax\": %d, \"top\": [", top[0]);
        for (int t = 0; t < 5; t++) printf("%s[%d, %.10f]", t ? ", " : "", top[t], logits[top[t]] - lz);
        printf("]}");
    }
    printf("]}\n");
    for (int il = 0; il < h->n_layer; il++) {
        rows *all[] = {&st[il].kv, &st[il].comp_kv, &st[il].comp_sc, &st[il].comp, &st[il].idx_kv, &st[il].idx_sc, &st[il].idx};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) free(all[k]->v);
    }
    free(st);
    free(logits);
    free(tok);
    og_gguf_close(g);
    return 0;
}
