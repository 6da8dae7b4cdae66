/* The tiled MLA attention (og_cpu_mla_attention_ws) against the per-pair path
 * it replaces (og_cpu_mla_attention_pairs_ws, the reference that defines the
 * bits), bitwise, on random ops: positions up to 300, blocks of 1-64 rows,
 * 1-16 heads, f16 and f32 caches (whole-block widening and row by row), mixes
 * of canonical and non-canonical tokens, chunks starting mid-block, several
 * sequences in one call (runs and interleaved), on every tier the CPU runs,
 * with one thread and a pool of three; plus a double-precision reference from
 * deepseek2.md §3 for the first ops of each tier. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "og_backend.h"
#include "og_device.h"
#include "sanitized_fixture.h"

static uint64_t rng = 0x5eed1234;
static double urand(void) { return og_rand_unit(&rng); }
static int irand(int lo, int hi) { return lo + (int)(urand() * (hi - lo + 1)); } /* [lo, hi] */
static float frand(void) { return (float)(urand() * 2.0 - 1.0); }

enum { MAX_SEQ = 3, MAX_TOK = 48, MAX_POS = 300 };

typedef struct rand_op {
    og_mla_op op;
    float *qabs, *qpe, *ctx_a, *ctx_b, **blocks;
    void *cache;
    int32_t kv_first[MAX_TOK], pos[MAX_TOK];
    bool canon[MAX_TOK];
    int64_t ctx_n;
} rand_op;

/* The cache row of position p of sequence s, widened. */
static float row_elem(const rand_op *r, int32_t first, int32_t p, int64_t e) {
    const void *row = og_kv_view_row(&r->op.kv, first, p);
    return r->op.kv.type == OG_KV_F16 ? og_fp16_to_fp32(((const uint16_t *)row)[e]) : ((const float *)row)[e];
}

static void make_op(rand_op *r, int case_no) {
    memset(r, 0, sizeof *r);
    static const int brs[] = {1, 3, 4, 16, 64, 64};
    static const int rkvs[] = {8, 16, 33, 128, 128};
    static const int drs[] = {0, 4, 32, 32};
    const int br = brs[irand(0, 5)], r_kv = rkvs[irand(0, 4)], dr = drs[irand(0, 3)], H = irand(1, 16);
    const int w = r_kv + dr;
    const bool f16 = case_no % 2, packed = urand() < 0.5; /* packed: rows back to back (whole-block widening) */
    const int n_layers = packed ? 1 : 2, layer = n_layers - 1;
    const int64_t row_stride = packed ? w : w + 5, blk = (int64_t)n_layers * br * row_stride;
    const int n_seq = irand(1, MAX_SEQ);
    const int blocks_per_seq = (MAX_POS + br) / br;
    const int nb = n_seq * blocks_per_seq;
    const size_t eb = f16 ? 2 : 4;
    r->cache = malloc((size_t)nb * (size_t)blk * eb);
    r->blocks = malloc((size_t)nb * sizeof *r->blocks);
    for (int64_t i = 0; i < nb * blk; i++) {
        const float v = frand() * (case_no % 5 == 4 ? 8.0f : 1.0f); /* sharp softmaxes now and then */
        if (f16) ((uint16_t *)r->cache)[i] = og_fp32_to_fp16(v);
        else ((float *)r->cache)[i] = v;
    }
    /* sequence s's table: a shuffled set of blocks (a pool hands them out in any order) */
    int *perm = malloc((size_t)nb * sizeof *perm);
    for (int i = 0; i < nb; i++) perm[i] = i;
    for (int i = nb - 1; i > 0; i--) {
        const int k = irand(0, i), t = perm[i];
        perm[i] = perm[k];
        perm[k] = t;
    }
    for (int i = 0; i < nb; i++) r->blocks[i] = (float *)(void *)((char *)r->cache + (size_t)perm[i] * (size_t)blk * eb);
    free(perm);
    /* tokens: per sequence a chunk of consecutive positions from a random start
     * (mid-block), or one decode token; chunks whole or interleaved */
    int n_tok = 0;
    int32_t seq_of[MAX_TOK];
    for (int s = 0; s < n_seq && n_tok < MAX_TOK; s++) {
        const int len = urand() < 0.3 ? 1 : irand(2, MAX_TOK / n_seq);
        const int start = irand(0, MAX_POS - len);
        for (int t = 0; t < len && n_tok < MAX_TOK; t++, n_tok++) {
            seq_of[n_tok] = s;
            r->pos[n_tok] = start + t;
        }
    }
    if (urand() < 0.3)
        for (int i = n_tok - 1; i > 0; i--) { /* interleave: the runs split */
            const int k = irand(0, i);
            const int32_t ts = seq_of[i], tp = r->pos[i];
            seq_of[i] = seq_of[k], r->pos[i] = r->pos[k];
            seq_of[k] = ts, r->pos[k] = tp;
        }
    const int mix = irand(0, 2); /* all non-canonical, all canonical, mixed */
    for (int i = 0; i < n_tok; i++) {
        r->kv_first[i] = seq_of[i] * blocks_per_seq;
        r->canon[i] = mix == 1 || (mix == 2 && urand() < 0.5);
    }
    r->qabs = malloc((size_t)H * n_tok * r_kv * sizeof(float));
    r->qpe = malloc((size_t)n_tok * H * (dr + 3) * sizeof(float) + sizeof(float));
    for (int64_t i = 0; i < (int64_t)H * n_tok * r_kv; i++) r->qabs[i] = frand();
    for (int64_t i = 0; i < (int64_t)n_tok * H * (dr + 3); i++) r->qpe[i] = frand();
    r->ctx_n = (int64_t)H * n_tok * r_kv;
    r->ctx_a = malloc((size_t)r->ctx_n * sizeof(float));
    r->ctx_b = malloc((size_t)r->ctx_n * sizeof(float));
    for (int64_t i = 0; i < r->ctx_n; i++) r->ctx_a[i] = r->ctx_b[i] = -3.0f;
    r->op = (og_mla_op){.n_tok = n_tok, .n_head = H, .r_kv = r_kv, .d_rope = dr, .kq_scale = 1.0f / sqrtf((float)w),
                        .q_abs = r->qabs, .qabs_head_stride = (int64_t)n_tok * r_kv, .q_pe = r->qpe,
                        .qpe_tok_stride = H * (dr + 3), .qpe_head_stride = dr + 3, .ctx = NULL,
                        .ctx_head_stride = (int64_t)n_tok * r_kv,
                        .kv = {r->blocks, nb, br, layer * br * row_stride, row_stride, w, f16 ? OG_KV_F16 : OG_KV_F32},
                        .kv_first = r->kv_first, .pos = r->pos, .canonical = mix ? r->canon : NULL};
}

static void free_op(rand_op *r) {
    free(r->cache);
    free(r->blocks);
    free(r->qabs);
    free(r->qpe);
    free(r->ctx_a);
    free(r->ctx_b);
}

/* deepseek2.md §3's attention in double for token i head h: |ctx - ref| small. */
static void check_double(const rand_op *r, const float *ctx) {
    const og_mla_op *op = &r->op;
    double *sc = malloc((MAX_POS + 1) * sizeof *sc);
    for (int64_t i = 0; i < op->n_tok; i++)
        for (int64_t h = 0; h < op->n_head; h++) {
            const int32_t P = op->pos[i], first = op->kv_first[i];
            double mx = -INFINITY, sum = 0;
            for (int32_t p = 0; p <= P; p++) {
                double d = 0;
                for (int64_t e = 0; e < op->r_kv; e++)
                    d += (double)op->q_abs[h * op->qabs_head_stride + i * op->r_kv + e] * row_elem(r, first, p, e);
                for (int64_t e = 0; e < op->d_rope; e++)
                    d += (double)op->q_pe[i * op->qpe_tok_stride + h * op->qpe_head_stride + e] *
                         row_elem(r, first, p, op->r_kv + e);
                sc[p] = d * op->kq_scale;
                if (sc[p] > mx) mx = sc[p];
            }
            for (int32_t p = 0; p <= P; p++) sum += exp(sc[p] - mx);
            for (int64_t e = 0; e < op->r_kv; e++) {
                double acc = 0, mag = 0;
                for (int32_t p = 0; p <= P; p++) {
                    const double t = exp(sc[p] - mx) / sum * row_elem(r, first, p, e);
                    acc += t;
                    mag += fabs(t);
                }
                assert_true(fabs(ctx[h * op->ctx_head_stride + i * op->r_kv + e] - acc) <= 2e-5 * (mag + 1e-3));
            }
        }
    free(sc);
}

/* Tier isa's kernels into *k when this CPU runs it. */
static bool tier_kernels(int isa, og_kernels *k) {
    og_cpu_features f;
    og_cpu_detect(&f);
    og_isa got;
    char note[128], err[256];
    if (og_isa_choose(&f, og_isa_name((og_isa)isa), &got, note, sizeof note, err, sizeof err) != OG_OK) return false;
    assert_int_equal(og_kernels_init((og_isa)isa, k), OG_OK);
    return true;
}

static void test_tiled_equals_pairs(void **state) {
    (void)state;
    og_pool *pool = NULL;
    char err[256];
    assert_int_equal(og_pool_create(3, NULL, &pool, err, sizeof err), OG_OK);
#ifdef OG_TEST_SANITIZED
    const int n_ops = 12;
#else
    const int n_ops = 80;
#endif
    int tiers = 0;
    og_buf wa = {0}, wb = {0};
    for (int isa = OG_ISA_SCALAR; isa <= OG_ISA_AVX512; isa++) {
        og_kernels k;
        if (!tier_kernels(isa, &k)) continue;
        assert_non_null(k.dot_f32_device_tile);
        tiers++;
        for (int c = 0; c < n_ops; c++) {
            rand_op r;
            make_op(&r, c);
            og_mla_op a = r.op, b = r.op;
            a.ctx = r.ctx_a;
            b.ctx = r.ctx_b;
            og_pool *p = c % 3 ? pool : NULL;
            assert_int_equal(og_cpu_mla_attention_pairs_ws(&k, c % 2 ? pool : NULL, &a, &wa), OG_OK);
            assert_int_equal(og_cpu_mla_attention_ws(&k, p, &b, &wb), OG_OK);
            assert_memory_equal(r.ctx_a, r.ctx_b, (size_t)r.ctx_n * sizeof(float));
            if (c < 4) check_double(&r, r.ctx_b);
            free_op(&r);
        }
    }
    assert_true(tiers >= 1);
    og_buf_free(&wa);
    og_buf_free(&wb);
    og_pool_free(pool);
}

/* A canonical token's context is the same bits on every tier, tiled or not;
 * a second call of the same size allocates nothing (ws kept). */
static void test_tiers_agree(void **state) {
    (void)state;
    rand_op r;
    make_op(&r, 1);
    for (int i = 0; i < MAX_TOK; i++) r.canon[i] = true;
    r.op.canonical = r.canon;
    float *first = NULL;
    og_buf ws = {0};
    for (int isa = OG_ISA_SCALAR; isa <= OG_ISA_AVX512; isa++) {
        og_kernels k;
        if (!tier_kernels(isa, &k)) continue;
        og_mla_op b = r.op;
        b.ctx = r.ctx_b;
        assert_int_equal(og_cpu_mla_attention_ws(&k, NULL, &b, &ws), OG_OK);
        const void *p = ws.p;
        assert_int_equal(og_cpu_mla_attention_ws(&k, NULL, &b, &ws), OG_OK);
        assert_ptr_equal(p, ws.p);
        if (!first) {
            first = malloc((size_t)r.ctx_n * sizeof(float));
            memcpy(first, r.ctx_b, (size_t)r.ctx_n * sizeof(float));
        } else {
            assert_memory_equal(first, r.ctx_b, (size_t)r.ctx_n * sizeof(float));
        }
    }
    /* bad input: a position outside its table is refused by both paths */
    og_kernels k;
    assert_int_equal(og_kernels_init(OG_ISA_SCALAR, &k), OG_OK);
    og_mla_op b = r.op;
    b.ctx = r.ctx_b;
    r.pos[0] = (int32_t)(r.op.kv.n_blocks * r.op.kv.block_rows);
    assert_int_equal(og_cpu_mla_attention_ws(&k, NULL, &b, &ws), OG_ERR_INVALID_ARG);
    assert_int_equal(og_cpu_mla_attention_pairs_ws(&k, NULL, &b, &ws), OG_ERR_INVALID_ARG);
    free(first);
    og_buf_free(&ws);
    free_op(&r);
}

/* deepseek4's indexer (og_indexer_op on the host device): the tiled scoring
 * of a canonical token's keys (its heads against a block of keys at once)
 * against the key-by-key path (kernels without dot_f32_device_tile): the same
 * selections and candidate blocks on random ops (V4: top_k only; V4.1: sel_all
 * and candidate blocks out, or in as a mask), several tokens (threads take
 * tokens) and one (threads share its keys), every tier. The scores are not an
 * output, so this checks the plumbing (rows, blocks, queries, threads: a wrong
 * row or query changes the picks; coarse keys make ties, broken by index);
 * each score's bits are dot_f32_device_tile's, test_quant's test_attn_tile. */
static void test_indexer_tiled(void **state) {
    (void)state;
    og_pool *pool = NULL;
    char err[256];
    assert_int_equal(og_pool_create(2, NULL, &pool, err, sizeof err), OG_OK);
    enum { MAXK = 300, MAXT = 6 };
    int tiers = 0, compared = 0;
    for (int isa = OG_ISA_SCALAR; isa <= OG_ISA_AVX512; isa++) {
        og_kernels kt, kp;
        if (!tier_kernels(isa, &kt)) continue;
        kp = kt;
        kp.dot_f32_device_tile = NULL; /* the key-by-key path */
        og_device *dt, *dp;
        og_stream *st, *sp;
        assert_int_equal(og_device_host_create(pool, &kt, &dt, err, sizeof err), OG_OK);
        assert_int_equal(og_device_host_create(pool, &kp, &dp, err, sizeof err), OG_OK);
        assert_int_equal(dt->ops->stream_create(dt, &st, err, sizeof err), OG_OK);
        assert_int_equal(dp->ops->stream_create(dp, &sp, err, sizeof err), OG_OK);
        tiers++;
        for (int c = 0; c < 30; c++) {
            static const int brs[] = {1, 4, 16, 64}, dhs[] = {16, 33, 64};
            const int br = brs[irand(0, 3)], dh = dhs[irand(0, 2)], H = irand(1, 16), n_tok = c % 3 ? irand(2, MAXT) : 1;
            const int nb = (MAXK + br - 1) / br, top_k = irand(4, 40), v41 = irand(0, 2); /* 1: cand_out, 2: cand_in */
            float *keys = malloc((size_t)nb * br * dh * sizeof(float)), **blocks = malloc((size_t)nb * sizeof *blocks);
            for (int i = 0; i < nb * br * dh; i++) keys[i] = (float)irand(-3, 3) * 0.25f; /* coarse: ties */
            for (int b = 0; b < nb; b++) blocks[b] = keys + (size_t)b * br * dh;
            float *q = malloc((size_t)n_tok * H * dh * sizeof(float)), *w = malloc((size_t)n_tok * H * sizeof(float));
            for (int i = 0; i < n_tok * H * dh; i++) q[i] = frand();
            for (int i = 0; i < n_tok * H; i++) w[i] = frand();
            int32_t first[MAXT], nk[MAXT], sel_t[MAXT * 40], sel_p[MAXT * 40], co_t[MAXT * 4], co_p[MAXT * 4];
            int32_t cin[MAXT * 4];
            bool canon[MAXT];
            for (int i = 0; i < n_tok; i++) {
                first[i] = 0;
                nk[i] = irand(1, MAXK);
                canon[i] = urand() < 0.7;
                for (int b = 0; b < 4; b++) cin[i * 4 + b] = -1;
                if (v41 == 2 && nk[i] > 32 && urand() < 0.7) /* a mask of 4 blocks of 8 below its keys */
                    for (int b = 0; b < 4; b++) cin[i * 4 + b] = b * ((nk[i] / 8) / 4);
            }
            og_indexer_op op = {.n_tok = n_tok, .n_head = H, .d_head = dh, .top_k = top_k, .q = q, .w = w,
                                .keys = {blocks, nb, br, 0, dh, dh, OG_KV_F32}, .key_first = first, .n_keys = nk,
                                .canonical = canon, .cand_block = 8, .cand_topk = 4, .sel_all = v41 != 0};
            op.cand_in = v41 == 2 ? cin : NULL;
            og_indexer_op a = op, b = op;
            a.sel = sel_t, b.sel = sel_p;
            a.cand_out = v41 == 1 ? co_t : NULL, b.cand_out = v41 == 1 ? co_p : NULL;
            memset(sel_t, 0x7f, sizeof sel_t), memset(sel_p, 0x7f, sizeof sel_p);
            memset(co_t, 0x7f, sizeof co_t), memset(co_p, 0x7f, sizeof co_p);
            assert_int_equal(dt->ops->indexer(dt, st, &a, err, sizeof err), OG_OK);
            assert_int_equal(dp->ops->indexer(dp, sp, &b, err, sizeof err), OG_OK);
            assert_memory_equal(sel_t, sel_p, sizeof sel_t);
            assert_memory_equal(co_t, co_p, sizeof co_t);
            compared++;
            free(keys);
            free(blocks);
            free(q);
            free(w);
        }
        dt->ops->stream_destroy(dt, st);
        dp->ops->stream_destroy(dp, sp);
        og_device_destroy(dt);
        og_device_destroy(dp);
    }
    assert_true(tiers >= 1 && compared == 30 * tiers);
    og_pool_free(pool);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiled_equals_pairs),
        cmocka_unit_test(test_tiers_agree),
        cmocka_unit_test(test_indexer_tiled),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
