/* Element-wise operations of the forward pass, f32. Sources: RMSNorm (Zhang &
 * Sennrich 2019), SwiGLU (Shazeer 2020), RoPE (Su et al. 2021) with YaRN
 * (Peng et al. 2023) as deepseek2.md §4 states it. */
#include "og_backend.h"

#include <math.h>

#include "og_quant_canon.h"

static float rms_scale(const float *x, int64_t n, float eps) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    return (float)(1.0 / sqrt(ss / (double)n + (double)eps));
}

void og_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps) {
    const float scale = rms_scale(x, n, eps);
    for (int64_t i = 0; i < n; i++) y[i] = w[i] * (x[i] * scale);
}

void og_rmsnorm_noweight(float *y, const float *x, int64_t n, float eps) {
    const float scale = rms_scale(x, n, eps);
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * scale;
}

void og_softmax(float *x, int64_t n) {
    float max = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (x[i] > max) max = x[i];
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    const float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

/* The per-element functions are og_quant_canon.h's, which the CUDA expert op
 * calls too: its exp is IEEE operations only (libm's expf and CUDA's differ in
 * the last bit for about 8 in 100,000 inputs), so a resident expert's SwiGLU
 * gives the host's bits. */
void og_swiglu(float *out, const float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = og_canon_silu_mul(gate[i], up[i]);
}

void og_swiglu_clamp(float *out, const float *gate, const float *up, int64_t n, float limit) {
    for (int64_t i = 0; i < n; i++) out[i] = og_canon_silu_mul_clamp(gate[i], up[i], limit);
}

void og_topk(const float *x, int64_t n, int k, int32_t *idx) {
    /* k is small (experts per token, groups): selection by repeated scans keeps
     * the tie rule obvious. */
    for (int j = 0; j < k; j++) {
        int64_t best = -1;
        for (int64_t i = 0; i < n; i++) {
            bool taken = false;
            for (int t = 0; t < j; t++) taken |= idx[t] == i;
            if (taken || isnan(x[i])) continue;
            if (best < 0 || x[i] > x[best]) best = i;
        }
        if (best < 0) { /* only NaN left: take the lowest unused index */
            for (int64_t i = 0; i < n && best < 0; i++) {
                bool taken = false;
                for (int t = 0; t < j; t++) taken |= idx[t] == i;
                if (!taken) best = i;
            }
        }
        idx[j] = (int32_t)best;
    }
}

/* YaRN correction dimension for beta: d_rope * ln(n_ctx_orig / (2 pi beta)) / (2 ln base). */
static float yarn_corr_dim(int d_rope, int n_ctx_orig, float beta, float base) {
    return (float)d_rope * logf((float)n_ctx_orig / (beta * 2.0f * (float)M_PI)) / (2.0f * logf(base));
}

/* The angles in double: a float angle pos * base^(-2i/d) carries an absolute
 * error of pos ulps (at position 10^4 about 1e-3 rad), which the rotation
 * would pass on; the ramp's bounds stay the float ones (they are integers). */
static void rope_angles_f64(const og_rope *r, int64_t pos, double *theta) {
    const int half = r->d_rope / 2;
    float lo = 0, hi = 0;
    if (r->ext_factor != 0.0f) {
        lo = fmaxf(0.0f, floorf(yarn_corr_dim(r->d_rope, r->n_ctx_orig, r->beta_fast, r->base)));
        hi = fminf((float)(r->d_rope - 1), ceilf(yarn_corr_dim(r->d_rope, r->n_ctx_orig, r->beta_slow, r->base)));
    }
    for (int i = 0; i < half; i++) {
        const double theta_ext = (double)pos * pow((double)r->base, -2.0 * i / (double)r->d_rope);
        const double theta_int = (double)r->freq_scale * theta_ext;
        double t = theta_int;
        if (r->ext_factor != 0.0f) {
            const double y = ((double)i - lo) / fmax(0.001, (double)hi - lo);
            const double ramp = (1.0 - fmin(1.0, fmax(0.0, y))) * r->ext_factor;
            t = theta_int * (1.0 - ramp) + theta_ext * ramp;
        }
        theta[i] = t;
    }
}

void og_rope_angles(const og_rope *r, int64_t pos, float *theta) {
    double th[OG_ROPE_MAX_DIM / 2];
    if (r->d_rope < 0 || r->d_rope > OG_ROPE_MAX_DIM) return;
    rope_angles_f64(r, pos, th);
    for (int i = 0; i < r->d_rope / 2; i++) theta[i] = (float)th[i];
}

void og_rope_cos_sin(const og_rope *r, int64_t pos, float *c, float *sn) {
    double theta[OG_ROPE_MAX_DIM / 2];
    if (r->d_rope < 0 || r->d_rope > OG_ROPE_MAX_DIM) return;
    rope_angles_f64(r, pos, theta);
    for (int i = 0; i < r->d_rope / 2; i++) { /* cos, sin in double, rounded once */
        c[i] = (float)(cos(theta[i]) * r->mscale);
        sn[i] = (float)(sin(theta[i]) * r->mscale);
    }
}

void og_rope_apply(const og_rope *r, float *x, int n_vec, int64_t stride, int64_t pos) {
    float c[OG_ROPE_MAX_DIM / 2], sn[OG_ROPE_MAX_DIM / 2];
    const int half = r->d_rope / 2;
    if (r->d_rope < 0 || r->d_rope > OG_ROPE_MAX_DIM) return;
    og_rope_cos_sin(r, pos, c, sn);
    for (int v = 0; v < n_vec; v++) {
        float *p = x + v * stride;
        for (int i = 0; i < half; i++) {
            const float a = p[2 * i], b = p[2 * i + 1];
            p[2 * i] = a * c[i] - b * sn[i];
            p[2 * i + 1] = a * sn[i] + b * c[i];
        }
    }
}
