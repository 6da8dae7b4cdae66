/* The model interface (og_model.h) over the architecture table (og_arch.h):
 * loading and describing by general.architecture, freeing, the per-sequence
 * state, the forward scratch and the calls that dispatch to the architecture. */
#include "fwd_ops.h"
#include "og_arch.h"
#include "og_device.h"
#include "og_quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every supported architecture, looked up by general.architecture. */
static const og_arch *const arch_table[] = {
    &og_arch_deepseek2,
    &og_arch_deepseek4,
    &og_arch_deepseek41,
};
#define N_ARCH (sizeof arch_table / sizeof arch_table[0])

const og_arch *og_arch_find(const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < N_ARCH; i++)
        if (!strcmp(arch_table[i]->name, name)) return arch_table[i];
    return NULL;
}

/* The architecture g's general.architecture names. Errors: OG_ERR_UNSUPPORTED
 * naming it (and the supported ones). */
static og_status arch_of(const og_gguf *g, const og_arch **out, char *err, size_t errlen) {
    char name[64] = "";
    og_gguf_get_cstr(g, "general.architecture", name, sizeof name);
    if ((*out = og_arch_find(name))) return OG_OK;
    char list[256] = "";
    size_t n = 0;
    for (size_t i = 0; i < N_ARCH && n < sizeof list; i++)
        n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "", arch_table[i]->name);
    return og_fail(err, errlen, OG_ERR_UNSUPPORTED, "architecture '%s' is not supported (%s %s)", name, list,
                   N_ARCH > 1 ? "are" : "is");
}

og_status og_arch_bind_weight(const og_gguf_tensor *t, og_weight *w, char *err, size_t errlen) {
    if (!t->data) return og_fail(err, errlen, OG_ERR_INVALID_ARG, "tensor %s has no data (a header-only open)", t->name);
    const og_type_traits *tr = og_quant_traits(t->type);
    if (!tr || !tr->vec_dot || !tr->to_float)
        return og_fail(err, errlen, OG_ERR_UNSUPPORTED, "tensor %s is %s, which onegpu has no kernels for", t->name,
                       og_type_name(t->type));
    uint64_t rb;
    if (og_row_bytes(t->type, (uint64_t)t->ne[0], &rb))
        return og_fail(err, errlen, OG_ERR_FORMAT, "tensor %s: rows of %lld are not whole %s blocks", t->name,
                       (long long)t->ne[0], og_type_name(t->type));
    *w = (og_weight){t->type, t->data, t->ne[0], t->ne[1] * t->ne[2] * t->ne[3], (size_t)rb};
    return OG_OK;
}

og_status og_arch_bind_moe(const og_gguf_tensor *const exps[3], const og_gguf_tensor *const shexp[3], float clamp_exp,
                           float clamp_shexp, int il, og_moe_weights *mw, char *err, size_t errlen) {
    og_weight *dst[6] = {&mw->gate_exps, &mw->up_exps, &mw->down_exps, &mw->gate_sh, &mw->up_sh, &mw->down_sh};
    mw->moe = true;
    for (int i = 0; i < 6; i++) {
        const og_gguf_tensor *t = i < 3 ? exps[i] : shexp[i - 3];
        memset(dst[i], 0, sizeof *dst[i]);
        og_status st = t ? og_arch_bind_weight(t, dst[i], err, errlen) : OG_OK;
        if (st) return st;
    }
    mw->swiglu_clamp = clamp_exp;
    if (clamp_shexp != clamp_exp)
        return og_fail(err, errlen, OG_ERR_UNSUPPORTED, "layer %d: swiglu_clamp_shexp %g differs from swiglu_clamp_exp %g "
                       "(onegpu applies one clamp to both)", il, (double)clamp_shexp, (double)clamp_exp);
    return OG_OK;
}

og_status og_arch_check_shape(const og_gguf_tensor *t, const int64_t ne[3], const int64_t *alt, char *err, size_t errlen) {
    bool ok = t->ne[3] == 1, ok_alt = ok && alt && t->n_dims == 3;
    for (int d = 0; d < 3; d++) {
        ok = ok && t->ne[d] == ne[d];
        ok_alt = ok_alt && t->ne[d] == alt[d];
    }
    if (ok || ok_alt) return OG_OK;
    /* a split set: the hyperparameters are part 1's, the tensor may be in a
     * part of another model's set (same name, same part count) */
    char where[96] = "";
    if (t->part)
        snprintf(where, sizeof where, " (it is in split part %u and the hyperparameters in part 1: is part %u from "
                 "another model?)", t->part + 1, t->part + 1);
    return og_fail(err, errlen, OG_ERR_FORMAT, "tensor %s has shape [%lld, %lld, %lld, %lld] but the hyperparameters say "
                   "[%lld, %lld, %lld]%s", t->name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                   (long long)t->ne[3], (long long)ne[0], (long long)ne[1], (long long)ne[2], where);
}

og_status og_model_describe(const og_gguf *g, const og_logger *lg, og_model_info *info, char *err, size_t errlen) {
    const og_arch *a;
    og_status st = arch_of(g, &a, err, errlen);
    if (st) return st;
    og_logger quiet = {.level = OG_LOG_WARN};
    memset(info, 0, sizeof *info);
    return a->describe(g, lg ? lg : &quiet, info, err, errlen);
}

og_status og_model_load_gguf(og_gguf *g, const og_logger *lg, og_model **out, char *err, size_t errlen) {
    *out = NULL;
    const og_arch *a;
    og_status st = arch_of(g, &a, err, errlen);
    og_model *m = st ? NULL : calloc(1, sizeof *m);
    if (!st && !m) st = og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    if (st) {
        og_gguf_close(g);
        return st;
    }
    m->arch = a;
    m->gguf = g;
    m->log = lg ? *lg : (og_logger){.level = OG_LOG_WARN};
    if ((st = a->load(m, err, errlen))) {
        og_gguf_close(g);
        free(m);
        return st;
    }
    *out = m;
    return OG_OK;
}

og_status og_model_load(const char *path, const og_logger *lg, og_model **out, char *err, size_t errlen) {
    *out = NULL;
    og_gguf *g;
    og_status st = og_gguf_open(path, 0, &g, err, errlen);
    if (st) return st;
    if ((st = og_model_load_gguf(g, lg, out, err, errlen))) {
        char tmp[1024];
        snprintf(tmp, sizeof tmp, "%s: %s", path, err);
        snprintf(err, errlen, "%s", tmp);
    }
    return st;
}

void og_model_free(og_model *m) {
    if (!m) return;
    m->arch->free_impl(m);
    og_gguf_close(m->gguf);
    free(m);
}

og_status og_model_set_option(og_model *m, const char *name, const char *value, char *err, size_t errlen) {
    if (!m->arch->set_option)
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "%s models have no option '%s'", m->arch->name, name);
    og_status st = m->arch->set_option(m, name, value, err, errlen);
    if (!st) { /* the states made from now on depend on it: og_model_kv_key */
        m->opt_key = og_fnv1a64(name, strlen(name) + 1, m->opt_key ? m->opt_key : OG_FNV1A64_INIT);
        m->opt_key = og_fnv1a64(value, strlen(value) + 1, m->opt_key);
    }
    return st;
}

uint64_t og_model_kv_key(const og_model *m) {
    const uint64_t file[5] = {og_gguf_file_size(m->gguf), og_gguf_n_tensors(m->gguf), og_gguf_data_offset(m->gguf),
                              og_gguf_n_kv(m->gguf), m->opt_key};
    const uint64_t h = og_fnv1a64(m->arch->name, strlen(m->arch->name), OG_FNV1A64_INIT);
    return og_fnv1a64(file, sizeof file, h);
}

void og_kv_snap_free(og_kv_snap *snap) {
    if (snap->data) og_seq_mem_free(snap->dev, snap->data);
    free(snap->host);
    memset(snap, 0, sizeof *snap);
}

/* Walks kv's state through the architecture into (to_snap) or out of snap,
 * then waits for the device's copies. */
static og_status snap_copy(const og_model *m, const og_run_ctx *rc, const og_kv *kv, const og_kv_snap *snap,
                           bool to_snap, char *err, size_t errlen) {
    og_snap_walk w = {.dev = kv->dev, .stream = kv->dev ? rc->stream : NULL, .base = snap->data, .host = snap->host,
                      .to_snap = to_snap, .err = err, .errlen = errlen};
    og_status st = m->arch->state_walk(m, kv, &w);
    if (!st) st = w.st;
    if (!st && (w.off != snap->bytes || w.host_off != snap->host_bytes))
        st = og_fail(err, errlen, OG_ERR_INVALID_ARG, "kv snapshot: %llu + %llu bytes walked, the snapshot holds %llu + %llu",
                     (unsigned long long)w.off, (unsigned long long)w.host_off, (unsigned long long)snap->bytes,
                     (unsigned long long)snap->host_bytes);
    return og_seq_copies_wait(kv->dev, w.stream, st, err, errlen);
}

/* The checks og_kv_snapshot and og_kv_restore share: snapshots exist, and a
 * device state comes with the run context's stream. */
static og_status snap_usable(const og_model *m, const og_run_ctx *rc, og_device *dev, char *err, size_t errlen) {
    if (!m->info.kv_snapshot || !m->arch->state_walk || !m->arch->state_new)
        return og_fail(err, errlen, OG_ERR_UNSUPPORTED, "kv snapshot: %s's caches have no snapshots", m->arch->name);
    if (dev && (!rc || rc->dev != dev || !rc->stream))
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "kv snapshot: the state is on a device the run context has no "
                       "stream for");
    return OG_OK;
}

og_status og_kv_snapshot(const og_model *m, const og_run_ctx *rc, const og_kv *src, og_kv_snap *out, char *err,
                         size_t errlen) {
    memset(out, 0, sizeof *out);
    og_status st = snap_usable(m, rc, src->dev, err, errlen);
    if (st) return st;
    if (!src->arch || src->n_pos < 1)
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "kv snapshot: the cache holds no state (%d positions)", src->n_pos);
    og_snap_walk count = {.dev = src->dev, .err = err, .errlen = errlen};
    if ((st = m->arch->state_walk(m, src, &count))) return st;
    og_kv_snap s = {.model = m, .key = og_model_kv_key(m), .dev = src->dev, .bytes = count.off,
                    .host_bytes = count.host_off, .n_pos = src->n_pos, .n_ctx = src->n_ctx};
    s.data = og_seq_alloc(s.dev, s.bytes ? s.bytes : 1);
    s.host = s.host_bytes ? malloc((size_t)s.host_bytes) : NULL;
    if (!s.data || (s.host_bytes && !s.host)) {
        og_kv_snap_free(&s);
        char b[32];
        return og_fail(err, errlen, OG_ERR_NOMEM, "kv snapshot: no %s of %s memory for %d positions' state",
                       og_fmt_bytes(count.off, b, sizeof b), s.dev ? "device" : "host", src->n_pos);
    }
    if ((st = snap_copy(m, rc, src, &s, true, err, errlen))) {
        og_kv_snap_free(&s);
        return st;
    }
    *out = s;
    return OG_OK;
}

og_status og_kv_restore(const og_model *m, const og_run_ctx *rc, const og_kv_snap *snap, og_kv *dst, char *err,
                        size_t errlen) {
    if (dst->n_blocks || dst->blocks || dst->arch || dst->n_pos)
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "kv restore: the destination is not empty");
    og_status st = snap_usable(m, rc, snap->dev, err, errlen);
    if (st) return st;
    if (snap->model != m || snap->key != og_model_kv_key(m) || !snap->data)
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "kv restore: the snapshot is of %s", snap->model != m ? "another "
                       "model" : snap->data ? "this model under other options" : "nothing (empty)");
    if (dst->n_ctx && dst->n_ctx != snap->n_ctx) /* the rings' rows follow n_ctx */
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "kv restore: a snapshot of a %d-position context into one of %d",
                       snap->n_ctx, dst->n_ctx);
    og_kv k = {.n_ctx = snap->n_ctx};
    if ((st = m->arch->state_new(m, snap->dev, snap->n_pos, &k)))
        return og_fail(err, errlen, st, "kv restore: no memory for a state of %d positions", snap->n_pos);
    /* the pieces' sizes first: a snapshot made elsewhere (read back from a file) that holds fewer
     * bytes than its n_pos needs is refused before a copy reads past it */
    og_snap_walk count = {.dev = snap->dev, .err = err, .errlen = errlen};
    if (!(st = m->arch->state_walk(m, &k, &count)) && (count.off != snap->bytes || count.host_off != snap->host_bytes))
        st = og_fail(err, errlen, OG_ERR_INVALID_ARG, "kv restore: a state of %d positions takes %llu + %llu bytes, "
                     "the snapshot holds %llu + %llu", snap->n_pos, (unsigned long long)count.off,
                     (unsigned long long)count.host_off, (unsigned long long)snap->bytes,
                     (unsigned long long)snap->host_bytes);
    if (st || (st = snap_copy(m, rc, &k, snap, false, err, errlen))) {
        og_kv_free(&k);
        return st;
    }
    *dst = k;
    return OG_OK;
}

const og_model_info *og_model_get_info(const og_model *m) { return &m->info; }

const og_gguf *og_model_gguf(const og_model *m) { return m->gguf; }

void og_kv_free(og_kv *kv) {
    for (int i = 0; i < kv->n_blocks; i++)
        if (kv->alloc) kv->alloc->give(kv->alloc->self, kv->blocks[i]);
        else if (kv->dev) kv->dev->ops->free(kv->dev, kv->blocks[i]);
        else free(kv->blocks[i]);
    free(kv->blocks);
    if (kv->arch && kv->arch_free) kv->arch_free(kv->arch);
    memset(kv, 0, sizeof *kv);
}

og_status og_kv_fork(const og_model *m, const og_run_ctx *rc, const og_kv *src, int n_share, og_kv *dst, char *err,
                     size_t errlen) {
    if (dst->n_blocks || dst->blocks || dst->arch || dst->n_pos)
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "kv fork: the destination is not empty");
    og_device *dev = src->dev;
    if (!m->info.kv_paged) { /* the architecture's state (og_arch.state_fork) */
        if (!m->arch->state_fork)
            return og_fail(err, errlen, OG_ERR_UNSUPPORTED, "kv fork: %s's per-sequence state cannot be forked",
                           m->arch->name);
        if (n_share || src->n_blocks)
            return og_fail(err, errlen, OG_ERR_INVALID_ARG, "kv fork: %s's cache has no blocks to share (%d asked, %d held)",
                           m->arch->name, n_share, src->n_blocks);
        if (!src->arch) { /* nothing run yet: an empty cache */
            if (src->n_pos)
                return og_fail(err, errlen, OG_ERR_INVALID_ARG, "kv fork: %d positions without a state", src->n_pos);
            dst->n_ctx = src->n_ctx;
            return OG_OK;
        }
        if (dev && (!rc || rc->dev != dev || !rc->stream))
            return og_fail(err, errlen, OG_ERR_INVALID_ARG, "kv fork: the state is on a device the run context has no stream for");
        return m->arch->state_fork(m, rc, src, dst, err, errlen);
    }
    if (src->arch)
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "kv fork: a paged %s cache holds an architecture state",
                       m->arch->name);
    if (src->n_blocks && og_kv_type_bytes(src->type) != m->info.kv_elem_bytes)
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "kv fork: a cache of %s blocks, the model's kv-type is not",
                       og_kv_type_name(src->type));
    if (n_share < 0 || n_share > src->n_blocks)
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "kv fork: %d shared blocks of %d", n_share, src->n_blocks);
    if (dev && n_share < src->n_blocks && (!rc || rc->dev != dev || !rc->stream))
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "kv fork: the cache is on a device the run context has no stream for");
    const int cap = src->n_blocks > 8 ? src->n_blocks : 8;
    og_kv k = {.blocks = malloc((size_t)cap * sizeof *k.blocks), .type = src->type, .dev = dev, .cap_blocks = cap,
               .alloc = src->alloc};
    if (!k.blocks) return og_fail(err, errlen, OG_ERR_NOMEM, "kv fork: out of memory");
    const uint64_t bytes = m->info.kv_block_bytes;
    og_status st = OG_OK;
    for (int i = 0; i < src->n_blocks && !st; i++) {
        if (i < n_share) {
            k.blocks[k.n_blocks++] = src->blocks[i];
            continue;
        }
        void *blk = NULL;
        if (src->alloc) {
            if (!(blk = src->alloc->take(src->alloc->self)))
                st = og_fail(err, errlen, OG_ERR_NOMEM, "kv fork: the KV pool has no free block");
        } else if (dev) st = dev->ops->alloc(dev, bytes, &blk, err, errlen);
        else if (!(blk = malloc(bytes))) st = og_fail(err, errlen, OG_ERR_NOMEM, "kv fork: out of memory for a block");
        if (st) break;
        k.blocks[k.n_blocks++] = blk;
        if (!dev) {
            memcpy(blk, src->blocks[i], bytes);
            continue;
        }
        og_copy_op cp = {.dst = blk, .src = src->blocks[i], .row_bytes = bytes, .n_rows = 1, .n_mats = 1};
        st = dev->ops->copy(dev, rc->stream, &cp, err, errlen);
    }
    if (!st && dev && n_share < src->n_blocks) { /* the copies are done before the blocks are read or written */
        og_event ev;
        st = dev->ops->event_record(dev, rc->stream, &ev, err, errlen);
        if (!st) st = dev->ops->event_wait(dev, ev, err, errlen);
    }
    if (st) { /* the shared pointers are not this cache's to free */
        for (int i = n_share; i < k.n_blocks; i++)
            if (k.alloc) k.alloc->give(k.alloc->self, k.blocks[i]);
            else if (dev) dev->ops->free(dev, k.blocks[i]);
            else free(k.blocks[i]);
        free(k.blocks);
        return st;
    }
    k.n_pos = src->n_pos;
    k.n_ctx = src->n_ctx;
    *dst = k;
    return OG_OK;
}

og_tensor_role og_model_tensor_role(const char *arch, const char *tensor_name) {
    const og_arch *a = og_arch_find(arch);
    return a ? a->role(tensor_name) : og_arch_generic_role(tensor_name);
}

/* ---- forward ------------------------------------------------------------- */

uint64_t og_fwd_scratch_bytes(const og_model *m, int64_t n_tok, int64_t n_out) {
    return m->arch->scratch_bytes(m, n_tok, n_out);
}

/* Frees the activations' allocation alone (the host side stays). */
static void scratch_free_dev(og_fwd_scratch *s) {
    if (s->base) {
        if (s->dev) s->dev->ops->free(s->dev, s->base);
        else free(s->base);
    }
    s->dev = NULL;
    s->base = NULL;
    s->bytes = 0;
}

og_status og_fwd_scratch_reserve(const og_model *m, og_fwd_scratch *s, og_device *dev, int64_t max_tok,
                                 int64_t max_out, char *err, size_t errlen) {
    if (max_tok < 1 || max_out < 0)
        return og_fail(err, errlen, OG_ERR_INVALID_ARG, "forward scratch: %lld tokens and %lld logits rows per step",
                       (long long)max_tok, (long long)max_out);
    const uint64_t need = og_fwd_scratch_bytes(m, max_tok, max_out);
    if (s->base && s->dev == dev && s->bytes >= need) return OG_OK;
    scratch_free_dev(s);
    void *b = NULL;
    if (dev) {
        og_status st = dev->ops->alloc(dev, need, &b, err, errlen);
        if (st) return st;
    } else if (!(b = aligned_alloc(64, (size_t)((need + 63) / 64 * 64)))) {
        char a[32];
        return og_fail(err, errlen, OG_ERR_NOMEM, "forward scratch: no %s of host memory", og_fmt_bytes(need, a, sizeof a));
    }
    s->dev = dev;
    s->base = b;
    s->bytes = need;
    return OG_OK;
}

void og_fwd_scratch_free(og_fwd_scratch *s) {
    scratch_free_dev(s);
    og_buf_free(&s->host);
    og_device_destroy(s->host_dev);
    const uint64_t grows = s->grows;
    *s = (og_fwd_scratch){.grows = grows};
}

og_status og_model_forward_batch(const og_model *m, const og_run_ctx *rc, og_kv *const *kvs, int n_seq,
                                 const og_batch *batch, float *logits, char *err, size_t errlen) {
    return m->arch->forward_batch(m, rc, kvs, n_seq, batch, logits, err, errlen);
}

og_status og_model_forward(const og_model *m, const og_run_ctx *rc, og_kv *kv, const int32_t *tokens, int n_tok,
                           float *logits, bool all_logits, char *err, size_t errlen) {
    if (n_tok <= 0) return og_fail(err, errlen, OG_ERR_INVALID_ARG, "no tokens");
    int32_t *seq = calloc((size_t)n_tok, sizeof *seq);
    bool *want = calloc((size_t)n_tok, sizeof *want);
    if (!seq || !want) {
        free(seq);
        free(want);
        return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < n_tok; i++) want[i] = all_logits || i == n_tok - 1;
    og_batch b = {n_tok, tokens, seq, want, NULL};
    og_status st = og_model_forward_batch(m, rc, &kv, 1, &b, logits, err, errlen);
    free(seq);
    free(want);
    return st;
}
