/* threadpool: persistent workers woken by a generation counter.
 * Dispatch: the caller publishes (fn, ctx), bumps `gen` and runs share 0 itself. Workers spin on `gen`
 * for a short while (decode dispatches ~100 small jobs per token, so a futex round trip per job would
 * dominate) and then sleep on a condition variable, so an idle pool burns no CPU. Completion is a
 * countdown the caller spins on (yielding after a while: the machine may be oversubscribed). */
#include "threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* A worker waiting for the next job spins for VS_TP_PURE_SPIN seconds, then keeps polling but yields
 * its core between polls (so an oversubscribed machine still runs the threads that have work) until
 * VS_TP_SPIN_SECONDS, then sleeps. The caller waiting for stragglers spins, then yields. */
#define VS_TP_PURE_SPIN 0.00002
#define VS_TP_SPIN_SECONDS 0.0005

struct vs_threadpool {
    int n_threads;
    pthread_t *threads; /* (n_threads - 1) */
    struct worker_arg *args;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    _Alignas(64) atomic_uint gen; /* bumped once per job */
    atomic_int n_sleeping;
    atomic_bool stop;
    vs_task_fn fn; /* the current job (written before gen is bumped) */
    void *ctx;
    _Alignas(64) atomic_int pending; /* workers still running the current job */
    /* Scratch owned by the pool for kernels (see vs_threadpool_scratch). */
    void *scratch;
    size_t scratch_bytes;
};

typedef struct worker_arg {
    vs_threadpool *tp;
    int ith;
} worker_arg;

/* Waits until gen differs from `seen` (or stop); returns the new generation. */
static unsigned wait_for_job(vs_threadpool *tp, unsigned seen) {
    double t0 = 0.0;
    for (unsigned spins = 0;; spins++) {
        unsigned g = atomic_load_explicit(&tp->gen, memory_order_acquire);
        if (g != seen || atomic_load_explicit(&tp->stop, memory_order_acquire)) return g;
        cpu_relax();
        if ((spins & 63) == 63) {
            double t = vs_time_now();
            if (t0 == 0.0) t0 = t;
            else if (t - t0 > VS_TP_SPIN_SECONDS) break;
            else if (t - t0 > VS_TP_PURE_SPIN) sched_yield();
        }
    }
    pthread_mutex_lock(&tp->mu);
    atomic_fetch_add(&tp->n_sleeping, 1); /* seq_cst: pairs with the caller's bump + load */
    unsigned g;
    while ((g = atomic_load(&tp->gen)) == seen && !atomic_load(&tp->stop)) pthread_cond_wait(&tp->cv, &tp->mu);
    atomic_fetch_sub(&tp->n_sleeping, 1);
    pthread_mutex_unlock(&tp->mu);
    return g;
}

static void *worker_main(void *p) {
    worker_arg *a = p;
    vs_threadpool *tp = a->tp;
    unsigned seen = 0; /* gen at creation: a job may be published before this thread first looks */
    for (;;) {
        seen = wait_for_job(tp, seen);
        if (atomic_load_explicit(&tp->stop, memory_order_acquire)) break;
        tp->fn(tp->ctx, a->ith, tp->n_threads);
        atomic_fetch_sub_explicit(&tp->pending, 1, memory_order_release);
    }
    return NULL;
}

vs_threadpool *vs_threadpool_new(int n_threads, vs_error *err) {
    if (n_threads < 1 || n_threads > 1024) {
        vs_error_set(err, VS_ERR_INVALID, "thread pool: %d threads requested (need 1..1024)", n_threads);
        return NULL;
    }
    vs_threadpool *tp = vs_calloc(1, sizeof(*tp));
    if (!tp) {
        vs_error_set(err, VS_ERR_NOMEM, "thread pool: out of memory");
        return NULL;
    }
    tp->n_threads = n_threads;
    atomic_init(&tp->gen, 0);
    atomic_init(&tp->n_sleeping, 0);
    atomic_init(&tp->stop, false);
    atomic_init(&tp->pending, 0);
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->cv, NULL);
    if (n_threads > 1) {
        tp->threads = vs_calloc((size_t)n_threads - 1, sizeof(pthread_t));
        tp->args = vs_calloc((size_t)n_threads - 1, sizeof(worker_arg));
        if (!tp->threads || !tp->args) {
            vs_threadpool_free(tp);
            vs_error_set(err, VS_ERR_NOMEM, "thread pool: out of memory");
            return NULL;
        }
        for (int i = 1; i < n_threads; i++) {
            tp->args[i - 1] = (worker_arg){tp, i};
            if (pthread_create(&tp->threads[i - 1], NULL, worker_main, &tp->args[i - 1]) != 0) {
                tp->n_threads = i; /* only threads 1..i-1 exist: free joins exactly those */
                vs_threadpool_free(tp);
                vs_error_set(err, VS_ERR_NOMEM, "thread pool: could not start thread %d of %d", i,
                             n_threads);
                return NULL;
            }
        }
    }
    return tp;
}

void vs_threadpool_free(vs_threadpool *tp) {
    if (!tp) return;
    if (tp->threads) {
        pthread_mutex_lock(&tp->mu);
        atomic_store(&tp->stop, true);
        atomic_fetch_add(&tp->gen, 1);
        pthread_cond_broadcast(&tp->cv);
        pthread_mutex_unlock(&tp->mu);
        for (int i = 1; i < tp->n_threads; i++) pthread_join(tp->threads[i - 1], NULL);
    }
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->cv);
    vs_free(tp->threads);
    vs_free(tp->args);
    vs_free(tp->scratch);
    vs_free(tp);
}

int vs_threadpool_size(const vs_threadpool *tp) { return tp ? tp->n_threads : 1; }

void vs_threadpool_run(vs_threadpool *tp, vs_task_fn fn, void *ctx) {
    if (!tp || tp->n_threads == 1) {
        fn(ctx, 0, 1);
        return;
    }
    tp->fn = fn;
    tp->ctx = ctx;
    atomic_store_explicit(&tp->pending, tp->n_threads - 1, memory_order_relaxed);
    atomic_fetch_add(&tp->gen, 1); /* seq_cst: publishes fn/ctx/pending, orders before the load below */
    if (atomic_load(&tp->n_sleeping) > 0) {
        pthread_mutex_lock(&tp->mu);
        pthread_cond_broadcast(&tp->cv);
        pthread_mutex_unlock(&tp->mu);
    }
    fn(ctx, 0, tp->n_threads);
    double t0 = 0.0;
    for (unsigned spins = 0; atomic_load_explicit(&tp->pending, memory_order_acquire) > 0; spins++) {
        cpu_relax();
        if ((spins & 63) == 63) {
            double t = vs_time_now();
            if (t0 == 0.0) t0 = t;
            else if (t - t0 > VS_TP_PURE_SPIN) sched_yield();
        }
    }
}

void vs_split_range(int64_t n, int ith, int nth, int64_t align, int64_t *lo, int64_t *hi) {
    if (align < 1) align = 1;
    if (nth < 1) nth = 1;
    int64_t units = (n + align - 1) / align; /* chunks of `align`, the last may be short */
    int64_t per = units / nth, extra = units % nth;
    int64_t u0 = (int64_t)ith * per + (ith < extra ? ith : extra);
    int64_t u1 = u0 + per + (ith < extra ? 1 : 0);
    int64_t a = u0 * align, b = u1 * align;
    *lo = a < n ? a : n;
    *hi = b < n ? b : n;
}

void *vs_threadpool_scratch(vs_threadpool *tp, size_t bytes) {
    if (!tp) return NULL;
    if (bytes <= tp->scratch_bytes) return tp->scratch;
    size_t want = bytes + bytes / 4 + 4096;
    void *p = vs_malloc(want);
    if (!p) return NULL;
    vs_free(tp->scratch);
    tp->scratch = p;
    tp->scratch_bytes = want;
    return p;
}
