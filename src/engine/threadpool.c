/* threadpool: persistent workers that claim the shares of a job.
 * Dispatch: the caller publishes (fn, ctx) and one 64-bit word `claim` = generation (32 bits) | number
 * of shares (16) | next unclaimed share (16). Every thread, the caller included, claims shares with a
 * compare-and-swap on that word until none is left, so a worker that is not running (descheduled by
 * another process, or still waking) never holds the job up: the threads that run take its shares. A
 * share runs on exactly one thread, so per-share scratch indexed by ith needs no locking.
 * Waiting is bounded spinning, then sleeping on a condition variable, on both sides: workers wait for
 * the next generation (decode dispatches ~100 small jobs per token, so a short spin catches the next
 * one without a futex round trip) and the caller waits for the shares other threads are running.
 * Nobody spins for more than VS_TP_SPIN_SECONDS, so a shared machine gets its cores back. */
#include "threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* How long a thread spins before it sleeps: workers waiting for the next job, the caller waiting for
 * the last shares. About the gap between two kernels of one decode step, far shorter than a scheduler
 * time slice. Measured (shipped target, tg32, 2 threads, Zen 3, alternating): 10 us against 50 us, 0.5
 * and 2 ms kept the quiet speed within noise and decoded 15-60% faster beside one busy process. */
#define VS_TP_SPIN_SECONDS 0.00001
#define VS_TP_MAX_SHARES 0xffff
/* Oversubscribed cores: when the caller, done with the shares it could claim, waits longer than
 * VS_TP_STRAGGLE_SECONDS and longer than twice its own part of the job for shares another thread claimed,
 * that thread was descheduled mid-share (a quiet machine never shows it: shares run at the same speed on
 * every core). Only jobs split finer than the pool (n_shares > threads: the matrix products, near-equal
 * shares) are judged: a job of one share per thread may split its work unevenly (an empty share), and
 * then a long wait says nothing. The caller then runs the next jobs alone for VS_TP_SOLO_SECONDS, and
 * tries the workers again. Decoding is memory-bound (one thread reads ~90% of what two do), so beside
 * another busy process one thread on a core of its own beats two threads sharing cores with it. Measured
 * in docs/kernels.md. */
#define VS_TP_STRAGGLE_SECONDS 0.001
#define VS_TP_SOLO_SECONDS 0.02

struct vs_threadpool {
    int n_threads;
    pthread_t *threads; /* (n_threads - 1) */
    struct worker_arg *args;
    pthread_mutex_t mu;
    pthread_cond_t job_cv;  /* workers sleep here for the next generation */
    pthread_cond_t done_cv; /* the caller sleeps here for the last shares */
    _Alignas(64) _Atomic uint64_t claim; /* gen << 32 | n_shares << 16 | next share */
    atomic_int n_sleeping;               /* workers asleep on job_cv */
    atomic_bool stop;
    uint32_t gen;      /* the caller's copy of the current generation */
    vs_task_fn fn;     /* the current job: written before claim is published, read after a claim */
    void *ctx;
    _Alignas(64) atomic_int pending; /* shares of the current job not finished */
    atomic_bool caller_sleeping;
    double solo_until; /* the caller runs jobs alone until then (vs_time_now; see VS_TP_STRAGGLE_SECONDS) */
    int64_t n_solo;    /* how often the caller went solo (vs_threadpool_solo_count) */
    /* Scratch owned by the pool for kernels (see vs_threadpool_scratch). */
    void *scratch;
    size_t scratch_bytes;
};

typedef struct worker_arg {
    vs_threadpool *tp;
    int ith;
} worker_arg;

static uint32_t claim_gen(uint64_t v) { return (uint32_t)(v >> 32); }

/* Claims and runs shares of the job published in `claim` until none is left; returns its generation. */
static uint32_t run_shares(vs_threadpool *tp) {
    uint64_t v = atomic_load_explicit(&tp->claim, memory_order_acquire);
    for (;;) {
        int n = (int)((v >> 16) & 0xffff), i = (int)(v & 0xffff);
        if (i >= n) return claim_gen(v);
        if (!atomic_compare_exchange_weak_explicit(&tp->claim, &v, v + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue; /* v holds the current word: another thread claimed, or a new job */
        /* share i of a job that cannot finish before this share does: fn and ctx are this job's */
        tp->fn(tp->ctx, i, n);
        /* seq_cst, both: pairs with the caller's store of caller_sleeping and its load of pending */
        if (atomic_fetch_sub(&tp->pending, 1) == 1 && atomic_load(&tp->caller_sleeping)) {
            pthread_mutex_lock(&tp->mu);
            pthread_cond_signal(&tp->done_cv);
            pthread_mutex_unlock(&tp->mu);
        }
        v = atomic_load_explicit(&tp->claim, memory_order_acquire);
    }
}

/* Waits until the generation differs from `seen` (or stop). */
static void wait_for_job(vs_threadpool *tp, uint32_t seen) {
    double t0 = 0.0;
    for (unsigned spins = 0;; spins++) {
        if (claim_gen(atomic_load_explicit(&tp->claim, memory_order_acquire)) != seen ||
            atomic_load_explicit(&tp->stop, memory_order_acquire))
            return;
        cpu_relax();
        if ((spins & 63) == 63) {
            double t = vs_time_now();
            if (t0 == 0.0) t0 = t;
            else if (t - t0 > VS_TP_SPIN_SECONDS) break;
        }
    }
    pthread_mutex_lock(&tp->mu);
    atomic_fetch_add(&tp->n_sleeping, 1); /* seq_cst: pairs with the caller's publish + load */
    while (claim_gen(atomic_load(&tp->claim)) == seen && !atomic_load(&tp->stop))
        pthread_cond_wait(&tp->job_cv, &tp->mu);
    atomic_fetch_sub(&tp->n_sleeping, 1);
    pthread_mutex_unlock(&tp->mu);
}

static void *worker_main(void *p) {
    worker_arg *a = p;
    vs_threadpool *tp = a->tp;
    uint32_t seen = 0; /* the generation at creation: a job may be published before this thread looks */
    for (;;) {
        wait_for_job(tp, seen);
        if (atomic_load_explicit(&tp->stop, memory_order_acquire)) break;
        seen = run_shares(tp);
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
    atomic_init(&tp->claim, 0);
    atomic_init(&tp->n_sleeping, 0);
    atomic_init(&tp->stop, false);
    atomic_init(&tp->pending, 0);
    atomic_init(&tp->caller_sleeping, false);
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->job_cv, NULL);
    pthread_cond_init(&tp->done_cv, NULL);
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
        pthread_cond_broadcast(&tp->job_cv);
        pthread_mutex_unlock(&tp->mu);
        for (int i = 1; i < tp->n_threads; i++) pthread_join(tp->threads[i - 1], NULL);
    }
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->job_cv);
    pthread_cond_destroy(&tp->done_cv);
    vs_free(tp->threads);
    vs_free(tp->args);
    vs_free(tp->scratch);
    vs_free(tp);
}

int vs_threadpool_size(const vs_threadpool *tp) { return tp ? tp->n_threads : 1; }

void vs_threadpool_run_shares(vs_threadpool *tp, vs_task_fn fn, void *ctx, int n_shares) {
    if (n_shares < 1) n_shares = 1;
    if (n_shares > VS_TP_MAX_SHARES) n_shares = VS_TP_MAX_SHARES;
    if (!tp || tp->n_threads == 1 || n_shares == 1 || (tp->solo_until > 0.0 && vs_time_now() < tp->solo_until)) {
        for (int i = 0; i < n_shares; i++) fn(ctx, i, n_shares);
        return;
    }
    const double t_start = vs_time_now();
    tp->fn = fn;
    tp->ctx = ctx;
    atomic_store_explicit(&tp->pending, n_shares, memory_order_relaxed);
    tp->gen++;
    /* seq_cst: publishes fn, ctx and pending, and orders before the load of n_sleeping below */
    atomic_store(&tp->claim, (uint64_t)tp->gen << 32 | (uint64_t)n_shares << 16);
    if (atomic_load(&tp->n_sleeping) > 0) {
        pthread_mutex_lock(&tp->mu);
        pthread_cond_broadcast(&tp->job_cv);
        pthread_mutex_unlock(&tp->mu);
    }
    run_shares(tp);
    double t0 = 0.0, t_own = 0.0;
    if (atomic_load_explicit(&tp->pending, memory_order_acquire) > 0) t_own = vs_time_now();
    for (unsigned spins = 0; atomic_load_explicit(&tp->pending, memory_order_acquire) > 0; spins++) {
        cpu_relax();
        if ((spins & 63) == 63) {
            double t = vs_time_now();
            if (t0 == 0.0) t0 = t;
            else if (t - t0 > VS_TP_SPIN_SECONDS) break;
        }
    }
    if (atomic_load_explicit(&tp->pending, memory_order_acquire) > 0) {
        pthread_mutex_lock(&tp->mu);
        atomic_store(&tp->caller_sleeping, true); /* seq_cst: pairs with a finisher's decrement + load */
        while (atomic_load(&tp->pending) > 0) pthread_cond_wait(&tp->done_cv, &tp->mu);
        atomic_store(&tp->caller_sleeping, false);
        pthread_mutex_unlock(&tp->mu);
    }
    if (t_own > 0.0 && n_shares > tp->n_threads) {
        const double now = vs_time_now(), waited = now - t_own;
        if (waited > VS_TP_STRAGGLE_SECONDS && waited > 2.0 * (t_own - t_start)) {
            tp->solo_until = now + VS_TP_SOLO_SECONDS;
            tp->n_solo++;
        }
    }
}

int64_t vs_threadpool_solo_count(const vs_threadpool *tp) { return tp ? tp->n_solo : 0; }

void vs_threadpool_run(vs_threadpool *tp, vs_task_fn fn, void *ctx) {
    vs_threadpool_run_shares(tp, fn, ctx, vs_threadpool_size(tp));
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
