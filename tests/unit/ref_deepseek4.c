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
#define REF_PROG "ref_deepseek4"
#include "ref_ds_common.h"

#define MAXL 256

/* ---- weights ------------------------------------------------------------ */

typedef struct opts {
    bool kv_fp8, indexer_fp4, kv_f16, act_f16;
    int sinkhorn_iters;    /* < 0: the key */
} opts;

static bool load(const og_gguf *g, const char *name, int64_t in, int64_t out, mat *m, bool required) {
    return ref_load(g, name, in, out, m, required);
}

static mat ldl(const og_gguf *g, int il, const char *suffix, int64_t in, int64_t out) {
    mat m;
    ref_load_blk(g, il, suffix, in, out, &m, true);
    return m;
}

static void matvec(const opts *o, const mat *m, const double *x, double *y) { matvec_rows(o->act_f16, m, 0, m->out, x, y); }

/* ---- hyperparameters (read here, not by the engine's reader) ------------ */

typedef struct hparams {
    REF_SHAPE_FIELDS(MAXL);
    int n_shared, hash_layers;
    int ratio[MAXL];
} hparams;

REF_DEFINE_READ_SHAPE(hparams, MAXL)

static uint64_t ku(const og_gguf *g, const char *key, bool required, uint64_t dflt) { return ref_ku(g, "deepseek4", key, required, dflt); }

static void read_hparams(const og_gguf *g, hparams *h) {
    memset(h, 0, sizeof *h);
    char arch[32] = "";
    og_gguf_get_cstr(g, "general.architecture", arch, sizeof arch);
    if (strcmp(arch, "deepseek4")) die("not a deepseek4 file (%s)", arch);
    read_shape(g, "deepseek4", h);
    h->n_shared = (int)ku(g, "expert_shared_count", true, 0);
    h->hash_layers = (int)ku(g, "hash_layer_count", true, 0);
    if (ku(g, "expert_gating_func", true, 0) != 4) die("expert_gating_func is not sqrt-softplus (4)%s", "");
    const og_gguf_kv *cr = og_gguf_find_kv(g, "deepseek4.attention.compress_ratios");
    if (!cr || cr->type != OG_GGUF_ARRAY || cr->arr_n < (uint64_t)h->n_layer) die("bad compress_ratios%s", "");
    for (int i = 0; i < h->n_layer; i++) {
        int64_t r;
        og_gguf_kv_num_i64(cr, (uint64_t)i, &r);
        if (r != 0 && r != 4 && r != 128) die("compress ratio other than 0, 4, 128%s", "");
        if (r == 4 && (h->ID < h->R || (h->ID & (h->ID - 1)) || h->IH < 1 || h->top_k < 1))
            die("indexer sizes outside what ref_deepseek4 handles%s", "");
        h->ratio[i] = (int)r;
    }
    /* the sizes this program's fixed buffers also hold (row[4096], taken[4096]) */
    if (h->D > 4096 || h->ID > 4096 || h->E > 4096 || h->hash_layers > h->n_layer)
        die("hyperparameters outside what ref_deepseek4 handles%s", "");
}

/* ---- model -------------------------------------------------------------- */

typedef struct layer {
    ref_block b;           /* mHC, attention, MoE */
    mat comp_kv, comp_gate, comp_ape, comp_norm;
    mat idx_q_b, idx_proj, idx_kv, idx_gate, idx_ape, idx_norm;
    mat bias;
    int32_t *tid2eid;      /* [V][k] */
} layer;

typedef struct model {
    hparams h;
    mat tok_embd, output, out_norm, hc_head_fn, hc_head_base, hc_head_scale;
    layer L[MAXL];
} model;

static void load_model(const og_gguf *g, model *m) {
    hparams *h = &m->h;
    const int N = h->N, hcN = h->hc * h->N, D = h->D;
    load(g, "token_embd.weight", N, h->V, &m->tok_embd, true);
    if (!load(g, "output.weight", N, h->V, &m->output, false)) m->output = m->tok_embd;
    load(g, "output_norm.weight", N, 1, &m->out_norm, true);
    load(g, "output_hc_fn.weight", hcN, h->hc, &m->hc_head_fn, true);
    load(g, "output_hc_base.weight", h->hc, 1, &m->hc_head_base, true);
    load(g, "output_hc_scale.weight", 1, 1, &m->hc_head_scale, true);
    const ref_block_dims bd = {N, h->hc, h->q_rank, h->H, D, h->G, h->o_rank, h->E, h->F, h->F * h->n_shared};
    for (int il = 0; il < h->n_layer; il++) {
        layer *l = &m->L[il];
        const int r = h->ratio[il], c = r == 4 ? 2 : 1;
        ref_load_block(g, il, &bd, &l->b);
        if (r) {
            l->comp_kv = ldl(g, il, "attn_compressor_kv.weight", N, c * D);
            l->comp_gate = ldl(g, il, "attn_compressor_gate.weight", N, c * D);
            l->comp_ape = ldl(g, il, "attn_compressor_ape.weight", c * D, r);
            l->comp_norm = ldl(g, il, "attn_compressor_norm.weight", D, 1);
        }
        if (r == 4) {
            l->idx_q_b = ldl(g, il, "indexer.attn_q_b.weight", h->q_rank, (int64_t)h->IH * h->ID);
            l->idx_proj = ldl(g, il, "indexer.proj.weight", N, h->IH);
            l->idx_kv = ldl(g, il, "indexer_compressor_kv.weight", N, 2 * h->ID);
            l->idx_gate = ldl(g, il, "indexer_compressor_gate.weight", N, 2 * h->ID);
            l->idx_ape = ldl(g, il, "indexer_compressor_ape.weight", 2 * h->ID, 4);
            l->idx_norm = ldl(g, il, "indexer_compressor_norm.weight", h->ID, 1);
        }
        if (il < h->hash_layers) {
            char nm[96];
            snprintf(nm, sizeof nm, "blk.%d.ffn_gate_tid2eid.weight", il);
            const og_gguf_tensor *t = og_gguf_find_tensor(g, nm);
            if (!t || t->type != OG_TYPE_I32 || t->ne[0] != h->k || t->ne[1] != h->V) die("bad %s", nm);
            l->tid2eid = xcalloc((size_t)h->k * (size_t)h->V, sizeof(int32_t));
            memcpy(l->tid2eid, t->data, (size_t)h->k * (size_t)h->V * sizeof(int32_t));
            for (int64_t i = 0; i < (int64_t)h->k * h->V; i++)
                if (l->tid2eid[i] < 0 || l->tid2eid[i] >= h->E) die("%s: expert id out of range", nm);
        } else {
            l->bias = ldl(g, il, "exp_probs_b.bias", h->E, 1);
        }
    }
}

/* ---- mHC (§4.1.3) ---------------------------------------------------------- */

static hc_dims hc_of(const hparams *h, const opts *o) {
    return (hc_dims){h->hc, h->N, o->sinkhorn_iters >= 0 ? o->sinkhorn_iters : h->sinkhorn, h->eps, h->hc_eps, o->act_f16};
}

/* ---- per-sequence state ---------------------------------------------------- */

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
    matvec(o, &l->b.q_a, x, qr);
    rmsnorm(qr, h->q_rank, l->b.q_a_norm.w, h->eps);
    matvec(o, &l->b.q_b, qr, q);
    for (int hd = 0; hd < H; hd++) {
        rmsnorm(q + hd * D, D, NULL, h->eps); /* per head, no weight */
        rope(rs, R, q + hd * D + nope, p, false);
    }
    double *kv = rows_push(&st->kv);
    matvec(o, &l->b.kv, x, kv);
    rmsnorm(kv, D, l->b.kv_norm.w, h->eps);
    rope(rs, R, kv + nope, p, false);
    if (o->kv_fp8) fp8_qat(kv, nope, 64);
    if (o->kv_f16) round_f16(kv, D);

    /* the compressors (§4.2.1), then the rows this query sees */
    int *sel = NULL, n_sel = 0;
    if (r) {
        double row[4096];
        if (compress_step(o, &l->comp_kv, &l->comp_gate, &l->comp_ape, r, D, &st->comp_kv, &st->comp_sc, x, p, row)) {
            rmsnorm(row, D, l->comp_norm.w, h->eps);
            rope(&h->rope_comp, R, row + nope, p + 1 - r, false);
            if (o->kv_fp8) fp8_qat(row, nope, 64);
            if (o->kv_f16) round_f16(row, D);
            memcpy(rows_push(&st->comp), row, (size_t)D * sizeof *row);
        }
        if (r == 4 && compress_step(o, &l->idx_kv, &l->idx_gate, &l->idx_ape, 4, h->ID, &st->idx_kv, &st->idx_sc, x, p,
                                    row)) {
            rmsnorm(row, h->ID, l->idx_norm.w, h->eps);
            rope(&h->rope_comp, R, row + h->ID - R, p + 1 - 4, false);
            hadamard(row, h->ID);
            if (o->indexer_fp4) fp4_qat(row, h->ID, 32);
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
                if (o->indexer_fp4) fp4_qat(qi + hd * ID, ID, 32);
            }
            matvec(o, &l->idx_proj, x, wt);
            for (int hd = 0; hd < IH; hd++) wt[hd] /= sqrt((double)ID * IH);
            indexer_scores(qi, wt, IH, ID, st->idx.v, nc, score);
            n_sel = top_by_score(score, nc, h->top_k, sel);
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
    double *att = xcalloc((size_t)H * D, sizeof *att);
    sink_attention(q, H, D, R, K, n_rows, l->b.sinks.w, rs, p, att);
    grouped_output(o->act_f16, &l->b.o_a, &l->b.o_b, H, D, h->G, h->o_rank, att, y);
    free(att);
    free(K);
    free(sel);
    free(qr);
    free(q);
}

static void moe(const model *m, const opts *o, int il, const double *x, int token, double *y) {
    const hparams *h = &m->h;
    const layer *l = &m->L[il];
    const int E = h->E, k = h->k;
    double *logit = xcalloc((size_t)E, sizeof *logit), *score = xcalloc((size_t)E, sizeof *score);
    int sel[64];
    matvec(o, &l->b.gate_inp, x, logit);
    for (int e = 0; e < E; e++) score[e] = sqrt_softplus(logit[e]);
    if (il < h->hash_layers) {
        for (int i = 0; i < k; i++) sel[i] = l->tid2eid[(size_t)token * k + i];
    } else {
        select_biased(score, l->bias.w, E, k, sel);
    }
    double w[64], sum = 0;
    for (int i = 0; i < k; i++) sum += w[i] = score[sel[i]];
    for (int i = 0; i < k; i++) {
        if (h->norm_w) w[i] /= fmax(sum, 6.103515625e-5);
        w[i] *= h->w_scale;
    }
    memset(y, 0, (size_t)h->N * sizeof *y);
    for (int i = 0; i < k; i++)
        ffn_expert(o->act_f16, &l->b.gate_exps, &l->b.up_exps, &l->b.down_exps, sel[i], h->F, h->N, h->clamp_exp[il], x, w[i], y);
    if (h->n_shared)
        ffn_expert(o->act_f16, &l->b.gate_sh, &l->b.up_sh, &l->b.down_sh, 0, h->F * h->n_shared, h->N, h->clamp_sh[il], x, 1.0, y);
    free(logit);
    free(score);
}

/* ---- one token -------------------------------------------------------------- */

static void forward(const model *m, const opts *o, lstate *st, int token, int p, double *logits) {
    const hparams *h = &m->h;
    const int N = h->N, hc = h->hc;
    double *S = xcalloc((size_t)hc * N, sizeof *S), *x = xcalloc((size_t)N, sizeof *x), *y = xcalloc((size_t)N, sizeof *y);
    double pre[16], post[16], C[256];
    const hc_dims hd = hc_of(h, o);
    for (int k = 0; k < hc; k++)
        for (int i = 0; i < N; i++) S[k * N + i] = m->tok_embd.w[(size_t)token * N + i];
    for (int il = 0; il < h->n_layer; il++) {
        const layer *l = &m->L[il];
        hc_mixes(&hd, S, &l->b.hc_attn_fn, &l->b.hc_attn_scale, &l->b.hc_attn_base, pre, post, C);
        collapse(&hd, S, pre, x);
        rmsnorm(x, N, l->b.attn_norm.w, h->eps);
        attention(m, o, &st[il], il, x, p, y);
        expand(&hd, S, y, post, C);
        hc_mixes(&hd, S, &l->b.hc_ffn_fn, &l->b.hc_ffn_scale, &l->b.hc_ffn_base, pre, post, C);
        collapse(&hd, S, pre, x);
        rmsnorm(x, N, l->b.ffn_norm.w, h->eps);
        moe(m, o, il, x, token, y);
        expand(&hd, S, y, post, C);
    }
    if (logits) { /* the HC head (§4.2 step 3) */
        double *flat = xcalloc((size_t)hc * N, sizeof *flat), mx[16], w[16];
        memcpy(flat, S, (size_t)hc * N * sizeof *flat);
        rmsnorm(flat, hc * N, NULL, h->eps);
        matvec(o, &m->hc_head_fn, flat, mx);
        for (int k = 0; k < hc; k++) w[k] = sigmoid(mx[k] * m->hc_head_scale.w[0] + m->hc_head_base.w[k]) + h->hc_eps;
        collapse(&hd, S, w, x);
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
    static model m;
    read_hparams(g, &m.h);
    load_model(g, &m);
    const hparams *h = &m.h;
    int n;
    int *tok = parse_tokens(toks, h->V, &n);
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
        print_position(logits, h->V, p, p + 1 < n ? tok[p + 1] : -1, p == from, NULL);
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
