/* Thread pool: one generation counter per job; workers spin briefly (a decode
 * step issues hundreds of small jobs, and a futex wake costs ~10 us), then sleep
 * on a condition variable, so an idle pool uses no CPU. */
#include "og_backend.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "spin.h"

typedef struct worker {
    struct og_pool *pool;
    int ith;
    pthread_t tid;
} worker;

struct og_pool {
    int n;                         /* threads including the caller */
    worker *w;
    pthread_mutex_t mu;
    pthread_cond_t wake, done_cv;
    atomic_uint_fast64_t gen;      /* bumped once per job */
    atomic_int pending;            /* workers still running the current job */
    atomic_bool stop;
    og_pool_fn fn;
    void *ctx;
};

static void *worker_main(void *arg) {
    worker *me = arg;
    og_pool *p = me->pool;
    uint64_t seen = 0;
    for (;;) {
        uint64_t g = atomic_load_explicit(&p->gen, memory_order_acquire);
        if (g == seen) {
            uint64_t t0 = og_now_ns();
            /* read the clock only every 64 pauses: it is not free either */
            for (unsigned spin = 1; (g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen &&
                                    !atomic_load(&p->stop) && ((spin & 63) || og_now_ns() - t0 < OG_SPIN_NS);
                 spin++)
                og_cpu_relax();
            if (g == seen) {
                pthread_mutex_lock(&p->mu);
                while ((g = atomic_load(&p->gen)) == seen && !atomic_load(&p->stop)) pthread_cond_wait(&p->wake, &p->mu);
                pthread_mutex_unlock(&p->mu);
            }
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = g;
        p->fn(p->ctx, me->ith, p->n);
        if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done_cv);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

og_status og_pool_create(int n_threads, const int *cpus, og_pool **out, char *err, size_t errlen) {
    *out = NULL;
    if (n_threads < 1 || n_threads > 4096) return og_fail(err, errlen, OG_ERR_INVALID_ARG, "thread count %d", n_threads);
    og_pool *p = calloc(1, sizeof *p);
    if (!p) return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    p->w = calloc((size_t)n_threads, sizeof *p->w);
    if (!p->w) {
        og_pool_free(p);
        return og_fail(err, errlen, OG_ERR_NOMEM, "out of memory");
    }
    for (int i = 1; i < n_threads; i++) {
        p->w[i] = (worker){.pool = p, .ith = i};
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        if (cpus) {
            cpu_set_t set;
            CPU_ZERO(&set);
            CPU_SET(cpus[i], &set);
            pthread_attr_setaffinity_np(&attr, sizeof set, &set);
        }
        int rc = pthread_create(&p->w[i].tid, &attr, worker_main, &p->w[i]);
        pthread_attr_destroy(&attr);
        if (rc) {
            p->n = i; /* only these exist */
            og_pool_free(p);
            return og_fail(err, errlen, rc == EINVAL ? OG_ERR_INVALID_ARG : OG_ERR_NOMEM,
                           "cannot start worker %d%s: %s", i, cpus ? " (pinned)" : "", strerror(rc));
        }
    }
    *out = p;
    return OG_OK;
}

void og_pool_free(og_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n && p->w; i++) pthread_join(p->w[i].tid, NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done_cv);
    free(p->w);
    free(p);
}

int og_pool_size(const og_pool *p) { return p ? p->n : 1; }

void og_pool_run(og_pool *p, og_pool_fn fn, void *ctx) {
    if (!p || p->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    atomic_store(&p->pending, p->n - 1);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    fn(ctx, 0, p->n);
    uint64_t t0 = og_now_ns();
    for (unsigned spin = 1; atomic_load_explicit(&p->pending, memory_order_acquire) > 0 &&
                            ((spin & 63) || og_now_ns() - t0 < OG_SPIN_NS);
         spin++)
        og_cpu_relax();
    if (atomic_load(&p->pending) > 0) {
        pthread_mutex_lock(&p->mu);
        while (atomic_load(&p->pending) > 0) pthread_cond_wait(&p->done_cv, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
}
