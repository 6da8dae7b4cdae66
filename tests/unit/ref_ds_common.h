/* The double-precision primitives the two DeepSeek references share
 * (ref_deepseek4.c for deepseek4, ref_deepseek41.c for deepseek41), written
 * from shared/spec/deepseek4.md §4.1 and sharing no code with the engine's
 * forward passes: weights as doubles through the formats' reference
 * dequantizers (og_dequantize_row), key reading, RMSNorm, both RoPE schedules
 * with the YaRN ramp, the FP8 / FP4 round trips, Hadamard, mHC mixes +
 * Sinkhorn + collapse + expand, sink attention, the grouped output, clamped
 * SwiGLU experts, biased top-k routing, and the JSON the programs print.
 *
 * Tests only: every function is static, a failure prints "REF_PROG: why" and
 * exits 1 (a reference that cannot go on has nothing to compare). The
 * including file defines REF_PROG (its program name) first. */
#ifndef REF_DS_COMMON_H
#define REF_DS_COMMON_H

#include "og_gguf.h"
#include "og_quant.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef REF_PROG
#error "define REF_PROG (the program's name) before including ref_ds_common.h"
#endif

__attribute__((format(printf, 1, 2), noreturn, unused)) static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, REF_PROG ": ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

__attribute__((unused)) static void *xcalloc(size_t n, size_t sz) {
    void *p = calloc(n ? n : 1, sz);
    if (!p) die("out of memory");
    return p;
}

/* ---- weights ------------------------------------------------------------ */

typedef struct mat {
    float *w;              /* [out][in] */
    int64_t in, out;       /* out counts every row of a 3-D stack */
    og_ggml_type type;     /* as stored (for act_f16) */
} mat;

/* Tensor `name` as [out][in] floats; its ne0 must be `in` and the product of
 * the others `out`. Missing: dies when required, else returns false. */
__attribute__((unused)) static bool ref_load(const og_gguf *g, const char *name, int64_t in, int64_t out, mat *m,
                                             bool required) {
    memset(m, 0, sizeof *m);
    const og_gguf_tensor *t = og_gguf_find_tensor(g, name);
    if (!t) {
        if (required) die("missing tensor %s", name);
        return false;
    }
    if (t->ne[0] != in || t->ne[1] * t->ne[2] * t->ne[3] != out)
        die("tensor %s: shape [%lld, %lld], expected [%lld, %lld]", name, (long long)t->ne[0],
            (long long)(t->ne[1] * t->ne[2] * t->ne[3]), (long long)in, (long long)out);
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

/* blk.IL.SUFFIX, as ref_load */
__attribute__((unused)) static bool ref_load_blk(const og_gguf *g, int il, const char *suffix, int64_t in, int64_t out,
                                                 mat *m, bool required) {
    char nm[160];
    snprintf(nm, sizeof nm, "blk.%d.%s", il, suffix);
    return ref_load(g, nm, in, out, m, required);
}

/* The weights every layer of deepseek4 and deepseek41 has (§3.1, §3.2): the
 * two mHC mixes, attention (q LoRA, the one K = V head, sinks, grouped
 * output) and the MoE FFN (router, routed and shared experts). */
typedef struct ref_block {
    mat hc_attn_fn, hc_ffn_fn, hc_attn_base, hc_ffn_base, hc_attn_scale, hc_ffn_scale;
    mat attn_norm, q_a, q_a_norm, q_b, kv, kv_norm, sinks, o_a, o_b;
    mat ffn_norm, gate_inp, gate_exps, up_exps, down_exps, gate_sh, up_sh, down_sh; /* shared: F_sh 0: none */
} ref_block;

typedef struct ref_block_dims {
    int N, hc, q_rank, H, D, G, o_rank, E, F, F_sh; /* F_sh: the shared experts' width (0: none) */
} ref_block_dims;

__attribute__((unused)) static void ref_load_block(const og_gguf *g, int il, const ref_block_dims *d, ref_block *b) {
    const int64_t N = d->N, hcN = (int64_t)d->hc * d->N, mix = (int64_t)(2 + d->hc) * d->hc, D = d->D;
    ref_load_blk(g, il, "hc_attn_fn.weight", hcN, mix, &b->hc_attn_fn, true);
    ref_load_blk(g, il, "hc_attn_base.weight", mix, 1, &b->hc_attn_base, true);
    ref_load_blk(g, il, "hc_attn_scale.weight", 3, 1, &b->hc_attn_scale, true);
    ref_load_blk(g, il, "hc_ffn_fn.weight", hcN, mix, &b->hc_ffn_fn, true);
    ref_load_blk(g, il, "hc_ffn_base.weight", mix, 1, &b->hc_ffn_base, true);
    ref_load_blk(g, il, "hc_ffn_scale.weight", 3, 1, &b->hc_ffn_scale, true);
    ref_load_blk(g, il, "attn_norm.weight", N, 1, &b->attn_norm, true);
    ref_load_blk(g, il, "attn_q_a.weight", N, d->q_rank, &b->q_a, true);
    ref_load_blk(g, il, "attn_q_a_norm.weight", d->q_rank, 1, &b->q_a_norm, true);
    ref_load_blk(g, il, "attn_q_b.weight", d->q_rank, (int64_t)d->H * D, &b->q_b, true);
    ref_load_blk(g, il, "attn_kv.weight", N, D, &b->kv, true);
    ref_load_blk(g, il, "attn_kv_a_norm.weight", D, 1, &b->kv_norm, true);
    ref_load_blk(g, il, "attn_sinks.weight", d->H, 1, &b->sinks, true);
    ref_load_blk(g, il, "attn_output_a.weight", (int64_t)d->H * D / d->G, (int64_t)d->G * d->o_rank, &b->o_a, true);
    ref_load_blk(g, il, "attn_output_b.weight", (int64_t)d->G * d->o_rank, N, &b->o_b, true);
    ref_load_blk(g, il, "ffn_norm.weight", N, 1, &b->ffn_norm, true);
    ref_load_blk(g, il, "ffn_gate_inp.weight", N, d->E, &b->gate_inp, true);
    ref_load_blk(g, il, "ffn_gate_exps.weight", N, (int64_t)d->F * d->E, &b->gate_exps, true);
    ref_load_blk(g, il, "ffn_up_exps.weight", N, (int64_t)d->F * d->E, &b->up_exps, true);
    ref_load_blk(g, il, "ffn_down_exps.weight", d->F, N * d->E, &b->down_exps, true);
    if (d->F_sh) {
        ref_load_blk(g, il, "ffn_gate_shexp.weight", N, d->F_sh, &b->gate_sh, true);
        ref_load_blk(g, il, "ffn_up_shexp.weight", N, d->F_sh, &b->up_sh, true);
        ref_load_blk(g, il, "ffn_down_shexp.weight", d->F_sh, N, &b->down_sh, true);
    }
}

/* y[r] = sum_i W[r][i] x[i] for rows [r0, r0 + n); act_f16: x rounded to f16
 * first when W is F16 (ggml's CPU backend: F16's vec_dot_type is F16) */
__attribute__((unused)) static void matvec_rows(bool act_f16, const mat *m, int64_t r0, int64_t n, const double *x,
                                                double *y) {
    double *xr = NULL;
    if (act_f16 && m->type == OG_TYPE_F16) {
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

/* ---- keys (ARCH.KEY) ---------------------------------------------------- */

__attribute__((unused)) static uint64_t ref_ku(const og_gguf *g, const char *arch, const char *key, bool required,
                                               uint64_t dflt) {
    char full[160];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    uint64_t v;
    og_status st = og_gguf_get_u64(g, full, &v);
    if (st == OG_ERR_NOT_FOUND && !required) return dflt;
    if (st) die("key %s missing or not an integer", full);
    return v;
}

__attribute__((unused)) static double ref_kf(const og_gguf *g, const char *arch, const char *key, bool required,
                                             double dflt) {
    char full[160];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    double v;
    og_status st = og_gguf_get_f64(g, full, &v);
    if (st == OG_ERR_NOT_FOUND && !required) return dflt;
    if (st) die("key %s missing or not a number", full);
    return v;
}

/* A per-layer float key: a scalar (every layer) or an array of >= n entries;
 * absent: fallback[] when given, else an error. */
__attribute__((unused)) static void ref_kf_layers(const og_gguf *g, const char *arch, const char *key, int n,
                                                  double *out, const double *fallback) {
    char full[160];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    const og_gguf_kv *kv = og_gguf_find_kv(g, full);
    if (kv && kv->type == OG_GGUF_ARRAY && kv->arr_n < (uint64_t)n) die("key %s: fewer than %d entries", full, n);
    for (int i = 0; i < n; i++) {
        if (!kv) {
            if (!fallback) die("key %s missing", full);
            out[i] = fallback[i];
        } else if (og_gguf_kv_num_f64(kv, kv->type == OG_GGUF_ARRAY ? (uint64_t)i : 0, &out[i])) {
            die("key %s: bad entry", full);
        }
    }
}

/* ---- RoPE (§4.1.2) -------------------------------------------------------- */

typedef struct rope_sched {
    double base, freq_scale, ext_factor, corr_lo, corr_hi;
} rope_sched;

/* YaRN correction range (ggml_rope_yarn_corr_dims, spec §4.1.2): the pair
 * indices where the ramp goes from extrapolation to interpolation. */
static double ref_corr_dim(int n_dims, double n_ctx_orig, double beta, double base) {
    const double pi = 3.14159265358979323846;
    return n_dims * log(n_ctx_orig / (beta * 2 * pi)) / (2 * log(base));
}

/* §4.1.2: window-only layers plain RoPE at rope.freq_base; compressed layers
 * compress_rope_freq_base with rope.scaling (YaRN: the ramp, no magnitude) */
__attribute__((unused)) static void ref_read_rope(const og_gguf *g, const char *arch, int R, rope_sched *swa,
                                                  rope_sched *comp) {
    *swa = (rope_sched){ref_kf(g, arch, "rope.freq_base", false, 10000.0), 1.0, 0.0, 0, 0};
    char key[160], stype[16] = "linear";
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    og_gguf_get_cstr(g, key, stype, sizeof stype);
    const double factor = ref_kf(g, arch, "rope.scaling.factor", false, 1.0);
    const double base_c = ref_kf(g, arch, "attention.compress_rope_freq_base", false, swa->base);
    const double n_orig = (double)ref_ku(g, arch, "rope.scaling.original_context_length", false,
                                         ref_ku(g, arch, "context_length", true, 0));
    const double bf = ref_kf(g, arch, "rope.scaling.yarn_beta_fast", false, 32.0);
    const double bs = ref_kf(g, arch, "rope.scaling.yarn_beta_slow", false, 1.0);
    comp->base = base_c;
    comp->freq_scale = strcmp(stype, "none") && factor != 0 ? 1.0 / factor : 1.0;
    comp->ext_factor = !strcmp(stype, "yarn") ? 1.0 : 0.0;
    comp->corr_lo = fmax(0.0, floor(ref_corr_dim(R, n_orig, bf, base_c)));
    comp->corr_hi = fmin(R - 1.0, ceil(ref_corr_dim(R, n_orig, bs, base_c)));
}

/* Partial RoPE on x[0..R) (the caller passes the tail), adjacent pairs (§4.1.2);
 * inverse: the same rotation with sin negated. */
__attribute__((unused)) static void rope(const rope_sched *s, int R, double *x, double pos, bool inverse) {
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

/* ---- the hyperparameters both architectures read alike ------------------------ */

/* Fields of each program's hparams struct (V4.1 keeps V4's key names, §3.1,
 * §3.2): N = n_embd, H heads of D, R RoPE dims, G output groups, IH / ID
 * indexer heads / key length, E experts (k used) of width F, hc mHC copies;
 * the per-layer arrays are max_layer long. */
#define REF_SHAPE_FIELDS(max_layer)                                                                 \
    int n_layer, N, V, H, D, R, q_rank, o_rank, G, n_swa, IH, ID, top_k, E, k, F, hc, sinkhorn;    \
    bool norm_w;                                                                                    \
    double w_scale, hc_eps, eps, clamp_exp[max_layer], clamp_sh[max_layer];                         \
    rope_sched rope_swa, rope_comp

/* REF_DEFINE_READ_SHAPE(HP, MAX_LAYER) defines read_shape(g, arch, HP *h):
 * the REF_SHAPE_FIELDS from the keys under ARCH. (n_layer = block_count -
 * nextn_predict_layers, 1..MAX_LAYER; V from token_embd's ne1; the two RoPE
 * schedules), refusing sizes the programs' fixed buffers cannot hold
 * (pre[16], sel[64]) or that make no model. */
#define REF_DEFINE_READ_SHAPE(HP, MAX_LAYER)                                                                       \
    static void read_shape(const og_gguf *g, const char *arch, HP *h) {                                            \
        h->n_layer = (int)(ref_ku(g, arch, "block_count", true, 0) - ref_ku(g, arch, "nextn_predict_layers", false, 0)); \
        if (h->n_layer < 1 || h->n_layer > (MAX_LAYER)) die("block_count out of range");                            \
        h->N = (int)ref_ku(g, arch, "embedding_length", true, 0);                                                   \
        h->H = (int)ref_ku(g, arch, "attention.head_count", true, 0);                                               \
        h->D = (int)ref_ku(g, arch, "attention.key_length", true, 0);                                               \
        h->R = (int)ref_ku(g, arch, "rope.dimension_count", true, 0);                                               \
        h->q_rank = (int)ref_ku(g, arch, "attention.q_lora_rank", true, 0);                                         \
        h->o_rank = (int)ref_ku(g, arch, "attention.output_lora_rank", true, 0);                                    \
        h->G = (int)ref_ku(g, arch, "attention.output_group_count", true, 0);                                       \
        h->n_swa = (int)ref_ku(g, arch, "attention.sliding_window", true, 0);                                       \
        h->IH = (int)ref_ku(g, arch, "attention.indexer.head_count", false, 0);                                     \
        h->ID = (int)ref_ku(g, arch, "attention.indexer.key_length", false, 0);                                     \
        h->top_k = (int)ref_ku(g, arch, "attention.indexer.top_k", false, 0);                                       \
        h->E = (int)ref_ku(g, arch, "expert_count", true, 0);                                                       \
        h->k = (int)ref_ku(g, arch, "expert_used_count", true, 0);                                                  \
        h->F = (int)ref_ku(g, arch, "expert_feed_forward_length", true, 0);                                         \
        h->hc = (int)ref_ku(g, arch, "hyper_connection.count", true, 0);                                            \
        h->sinkhorn = (int)ref_ku(g, arch, "hyper_connection.sinkhorn_iterations", true, 0);                        \
        char key_[160];                                                                                             \
        snprintf(key_, sizeof key_, "%s.expert_weights_norm", arch);                                               \
        bool nw_ = false;                                                                                           \
        og_gguf_get_bool(g, key_, &nw_);                                                                            \
        h->norm_w = nw_;                                                                                            \
        h->w_scale = ref_kf(g, arch, "expert_weights_scale", true, 0);                                              \
        h->hc_eps = ref_kf(g, arch, "hyper_connection.epsilon", true, 0);                                           \
        h->eps = ref_kf(g, arch, "attention.layer_norm_rms_epsilon", true, 0);                                      \
        ref_kf_layers(g, arch, "swiglu_clamp_exp", h->n_layer, h->clamp_exp, NULL);                                 \
        ref_kf_layers(g, arch, "swiglu_clamp_shexp", h->n_layer, h->clamp_sh, h->clamp_exp);                        \
        if (h->N < 1 || h->H < 1 || h->G < 1 || h->H % h->G || h->D < 2 || h->R < 2 || h->R % 2 || h->R > h->D ||  \
            h->hc < 1 || h->hc > 16 || h->k < 1 || h->k > 64 || h->E < h->k || h->n_swa < 1 || h->q_rank < 1 ||     \
            h->o_rank < 1)                                                                                          \
            die("hyperparameters outside what " REF_PROG " handles");                                               \
        const og_gguf_tensor *te_ = og_gguf_find_tensor(g, "token_embd.weight");                                    \
        if (!te_) die("missing tensor token_embd.weight");                                                          \
        h->V = (int)te_->ne[1];                                                                                     \
        ref_read_rope(g, arch, h->R, &h->rope_swa, &h->rope_comp);                                                  \
    }

/* ---- norms and the simulated low-precision round trips ----------------------- */

/* RMSNorm (§4.1.1) in place, times w[] when given */
__attribute__((unused)) static void rmsnorm(double *x, int n, const float *w, double eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    double s = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) x[i] = x[i] * s * (w ? (double)w[i] : 1.0);
}

__attribute__((unused)) static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

/* The nearest E4M3 value (3 mantissa bits, ties to even; subnormals below
 * 2^-6 step 2^-9), clamped to +-448. */
__attribute__((unused)) static double e4m3(double v) {
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

/* Simulated FP8 E4M3 round trip in blocks of `block` (§4.2: V4's blocks of
 * 64): scale 2^ceil(log2(max(amax, 1e-4) / 448)), then the nearest E4M3 value. */
__attribute__((unused)) static void fp8_qat(double *x, int n, int block) {
    for (int b0 = 0; b0 < n; b0 += block) {
        int b1 = b0 + block < n ? b0 + block : n;
        double amax = 0;
        for (int i = b0; i < b1; i++) amax = fmax(amax, fabs(x[i]));
        double scale = ldexp(1.0, (int)ceil(log2(fmax(amax, 1e-4) / 448.0)));
        for (int i = b0; i < b1; i++) x[i] = e4m3(x[i] / scale) * scale;
    }
}

/* The nearest E2M1 value {0, .5, 1, 1.5, 2, 3, 4, 6} (clamped to +-6), ties
 * to the even code. */
__attribute__((unused)) static double e2m1(double v) {
    static const double grid[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    double a = fabs(v), best = 0;
    int bi = 0;
    for (int i = 0; i < 8; i++) {
        double d = fabs(a - grid[i]), db = fabs(a - best);
        if (d < db || (d == db && i % 2 == 0 && bi % 2 == 1)) best = grid[i], bi = i;
    }
    return v < 0 ? -best : best;
}

/* FP4 E2M1 round trip in blocks of `block` with a power-of-two scale
 * 2^ceil(log2(amax / 6)) (§4.2.1; V4's indexer: blocks of 32). */
__attribute__((unused)) static void fp4_qat(double *x, int n, int block) {
    for (int b0 = 0; b0 < n; b0 += block) {
        int b1 = b0 + block < n ? b0 + block : n;
        double amax = 0;
        for (int i = b0; i < b1; i++) amax = fmax(amax, fabs(x[i]));
        if (amax == 0) continue;
        double scale = ldexp(1.0, (int)ceil(log2(amax / 6.0)));
        for (int i = b0; i < b1; i++) x[i] = e2m1(x[i] / scale) * scale;
    }
}

/* Orthonormal Hadamard rotation of n (a power of two) values: the butterfly
 * times 1/sqrt(n) (§4.2.1). */
__attribute__((unused)) static void hadamard(double *x, int n) {
    for (int len = 1; len < n; len *= 2)
        for (int i = 0; i < n; i += 2 * len)
            for (int j = i; j < i + len; j++) {
                double a = x[j], b = x[j + len];
                x[j] = a + b;
                x[j + len] = a - b;
            }
    for (int i = 0; i < n; i++) x[i] /= sqrt((double)n);
}

__attribute__((unused)) static void round_f16(double *x, int n) {
    for (int i = 0; i < n; i++) x[i] = og_fp16_to_fp32(og_fp32_to_fp16((float)x[i]));
}

/* ---- mHC (§4.1.3) ---------------------------------------------------------- */

typedef struct hc_dims {
    int hc, N, iters;      /* copies, n_embd, Sinkhorn iterations */
    double eps, hc_eps;    /* the flatten RMSNorm's eps; eps_hc */
    bool act_f16;
} hc_dims;

/* mixes(S, fn, scale, base): pre[hc], post[hc], C[hc][hc] (C[a][b]: output
 * copy a, input copy b), C Sinkhorn-normalized. S is [hc][N]. */
__attribute__((unused)) static void hc_mixes(const hc_dims *d, const double *S, const mat *fn, const mat *scale,
                                             const mat *base, double *pre, double *post, double *C) {
    const int hc = d->hc, n = hc * d->N, mix = (2 + hc) * hc;
    double *flat = xcalloc((size_t)n, sizeof *flat), *mx = xcalloc((size_t)mix, sizeof *mx);
    memcpy(flat, S, (size_t)n * sizeof *flat);
    rmsnorm(flat, n, NULL, d->eps);
    matvec_rows(d->act_f16, fn, 0, fn->out, flat, mx);
    const float *sc = scale->w, *bs = base->w;
    for (int k = 0; k < hc; k++) {
        pre[k] = sigmoid(mx[k] * sc[0] + bs[k]) + d->hc_eps;
        post[k] = 2 * sigmoid(mx[hc + k] * sc[1] + bs[hc + k]);
    }
    for (int a = 0; a < hc; a++)
        for (int b = 0; b < hc; b++) C[a * hc + b] = mx[2 * hc + a + hc * b] * sc[2] + bs[2 * hc + a + hc * b];
    /* Sinkhorn: softmax over a for each b, + eps; rows / (sum over b + eps);
     * then iters - 1 times: columns / (sum over a + eps), rows / (sum over b + eps) */
    const double eps = d->hc_eps;
    for (int b = 0; b < hc; b++) {
        double mxv = -INFINITY, s = 0;
        for (int a = 0; a < hc; a++) mxv = fmax(mxv, C[a * hc + b]);
        for (int a = 0; a < hc; a++) s += exp(C[a * hc + b] - mxv);
        for (int a = 0; a < hc; a++) C[a * hc + b] = exp(C[a * hc + b] - mxv) / s + eps;
    }
    for (int it = 0; it < d->iters; it++) {
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

/* collapse(S, w) = sum_k w[k] S[k] -> x[N] */
__attribute__((unused)) static void collapse(const hc_dims *d, const double *S, const double *w, double *x) {
    for (int i = 0; i < d->N; i++) {
        double s = 0;
        for (int k = 0; k < d->hc; k++) s += w[k] * S[k * d->N + i];
        x[i] = s;
    }
}

/* expand(y, S, post, C): S'[a] = post[a] y + sum_b C[a][b] S[b], in place */
__attribute__((unused)) static void expand(const hc_dims *d, double *S, const double *y, const double *post,
                                           const double *C) {
    const int hc = d->hc, N = d->N;
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

/* ---- per-sequence rows -------------------------------------------------------- */

typedef struct rows {
    double *v;   /* [n][w] */
    int n, cap, w;
} rows;

__attribute__((unused)) static double *rows_push(rows *r) {
    if (r->n == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 64;
        r->v = realloc(r->v, (size_t)r->cap * (size_t)r->w * sizeof *r->v);
        if (!r->v) die("out of memory");
    }
    return r->v + (size_t)r->n++ * (size_t)r->w;
}

/* ---- attention (§4.1.4-4.1.5) ----------------------------------------------- */

/* Sink attention of H heads of D (K = V) over n rows K[r][D], scale D^-0.5,
 * then inverse RoPE of each head's tail at pos with schedule rs (R dims):
 * att[H][D] (zeroed by the caller). */
__attribute__((unused)) static void sink_attention(const double *q, int H, int D, int R, const double *const *K,
                                                   int n, const float *sinks, const rope_sched *rs, int pos,
                                                   double *att) {
    double *s = xcalloc((size_t)n, sizeof *s);
    for (int hd = 0; hd < H; hd++) {
        const double *qh = q + (size_t)hd * D;
        double mx = sinks[hd];
        for (int t = 0; t < n; t++) {
            double d = 0;
            for (int i = 0; i < D; i++) d += qh[i] * K[t][i];
            s[t] = d / sqrt((double)D);
            mx = fmax(mx, s[t]);
        }
        double z = exp(sinks[hd] - mx);
        double *oh = att + (size_t)hd * D;
        for (int t = 0; t < n; t++) {
            double e = exp(s[t] - mx);
            z += e;
            for (int i = 0; i < D; i++) oh[i] += e * K[t][i];
        }
        for (int i = 0; i < D; i++) oh[i] /= z;
        rope(rs, R, oh + D - R, pos, true); /* inverse RoPE at the query position (§4.1.5) */
    }
    free(s);
}

/* Grouped output (§4.1.5): group g (H/G heads of D) -> rows [g o_rank,
 * (g+1) o_rank) of attn_output_a, concatenated, then attn_output_b -> y[N]. */
__attribute__((unused)) static void grouped_output(bool act_f16, const mat *o_a, const mat *o_b, int H, int D, int G,
                                                   int o_rank, const double *att, double *y) {
    const int gdim = H * D / G;
    double *low = xcalloc((size_t)G * o_rank, sizeof *low);
    for (int g = 0; g < G; g++)
        matvec_rows(act_f16, o_a, (int64_t)g * o_rank, o_rank, att + (size_t)g * gdim, low + (size_t)g * o_rank);
    matvec_rows(act_f16, o_b, 0, o_b->out, low, y);
    free(low);
}

/* ---- MoE (§4.1.6) ------------------------------------------------------------ */

/* silu(min(g, c)) * clamp(u, -c, c); c = 0: plain SwiGLU */
static double swiglu(double g, double u, double c) {
    if (c > 1e-6) {
        g = fmin(g, c);
        u = fmin(fmax(u, -c), c);
    }
    return g / (1 + exp(-g)) * u;
}

/* y += w * down_e(swiglu(gate_e x, up_e x)) for expert e of a [E][F][N] stack */
__attribute__((unused)) static void ffn_expert(bool act_f16, const mat *gate, const mat *up, const mat *down, int64_t e,
                                               int F, int N, double c, const double *x, double w, double *y) {
    double *g = xcalloc((size_t)F, sizeof *g), *u = xcalloc((size_t)F, sizeof *u), *d = xcalloc((size_t)N, sizeof *d);
    matvec_rows(act_f16, gate, e * F, F, x, g);
    matvec_rows(act_f16, up, e * F, F, x, u);
    for (int i = 0; i < F; i++) g[i] = swiglu(g[i], u[i], c);
    matvec_rows(act_f16, down, e * N, N, g, d);
    for (int i = 0; i < N; i++) y[i] += w * d[i];
    free(g);
    free(u);
    free(d);
}

/* sqrt(softplus(z)), softplus(z) = z above 20 (ggml's threshold) */
__attribute__((unused)) static double sqrt_softplus(double z) { return sqrt(z > 20 ? z : log1p(exp(z))); }

/* The k experts of highest score + bias (the bias chooses only, §4.1.6);
 * ties to the lower id. */
__attribute__((unused)) static void select_biased(const double *score, const float *bias, int E, int k, int *sel) {
    bool *taken = xcalloc((size_t)E, sizeof *taken);
    for (int i = 0; i < k; i++) {
        int best = -1;
        for (int e = 0; e < E; e++)
            if (!taken[e] && (best < 0 || score[e] + bias[e] > score[best] + bias[best])) best = e;
        taken[best] = true;
        sel[i] = best;
    }
    free(taken);
}

/* ---- the indexer (§4.2.2, §4.3.3) ------------------------------------------- */

/* score[c] = sum_h wt[h] * relu(q_h . key_c) for the nc keys key[c][ID], q [IH][ID] */
__attribute__((unused)) static void indexer_scores(const double *q, const double *wt, int IH, int ID,
                                                   const double *key, int nc, double *score) {
    for (int c = 0; c < nc; c++) {
        double s = 0;
        for (int hd = 0; hd < IH; hd++) {
            double d = 0;
            for (int i = 0; i < ID; i++) d += q[hd * ID + i] * key[(size_t)c * ID + i];
            s += wt[hd] * fmax(0.0, d);
        }
        score[c] = s;
    }
}

/* The k (<= n) indices of highest score, highest first, ties to the lower
 * index; entries of score -inf are never taken (fewer are then returned).
 * Returns how many were taken. */
__attribute__((unused)) static int top_by_score(const double *score, int n, int k, int *sel) {
    bool *taken = xcalloc((size_t)n + 1, sizeof *taken);
    int got = 0;
    for (int t = 0; t < k; t++) {
        int best = -1;
        for (int c = 0; c < n; c++)
            if (!taken[c] && score[c] != -INFINITY && (best < 0 || score[c] > score[best])) best = c;
        if (best < 0) break;
        taken[best] = true;
        sel[got++] = best;
    }
    free(taken);
    return got;
}

/* ---- the command line and the output ------------------------------------------ */

/* "a,b,c" -> ids in [0, V); *n their count */
__attribute__((unused)) static int *parse_tokens(const char *toks, int V, int *n) {
    int cap = 64;
    int *tok = xcalloc((size_t)cap, sizeof *tok);
    *n = 0;
    for (const char *s = toks; *s;) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v >= V) die("bad token list %s (ids 0..%d)", toks, V - 1);
        if (*n == cap) {
            tok = realloc(tok, (size_t)(cap *= 2) * sizeof *tok);
            if (!tok) die("out of memory");
        }
        tok[(*n)++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') die("bad token list %s", toks);
    }
    return tok;
}

/* One entry of "positions": {"pos": p, "next": next or null, "logprob":
 * log p(next) or null, "argmax": id, "top": [[id, logprob] x5]EXTRA}; first:
 * no leading comma; extra (NULL: none) goes in as it is (", \"key\": ..."). */
__attribute__((unused)) static void print_position(const double *logits, int V, int p, int next, bool first,
                                                   const char *extra) {
    double mx = -INFINITY, z = 0;
    for (int v = 0; v < V; v++) mx = fmax(mx, logits[v]);
    for (int v = 0; v < V; v++) z += exp(logits[v] - mx);
    const double lz = mx + log(z);
    int top[5];
    const int ntop = V < 5 ? V : 5;
    for (int t = 0; t < ntop; t++) {
        top[t] = -1;
        for (int v = 0; v < V; v++) {
            bool used = false;
            for (int u = 0; u < t; u++) used |= top[u] == v;
            if (!used && (top[t] < 0 || logits[v] > logits[top[t]])) top[t] = v;
        }
    }
    printf("%s{\"pos\": %d, \"next\": ", first ? "" : ", ", p);
    if (next >= 0) printf("%d, \"logprob\": %.10f", next, logits[next] - lz);
    else printf("null, \"logprob\": null");
    printf(", \"argmax\": %d, \"top\": [", top[0]);
    for (int t = 0; t < ntop; t++) printf("%s[%d, %.10f]", t ? ", " : "", top[t], logits[top[t]] - lz);
    printf("]%s}", extra ? extra : "");
}

#endif
