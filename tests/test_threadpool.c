/* test_threadpool: vs_split_range covers [0, n) exactly with aligned chunks; pools of 1..4 threads run
 * every share exactly once per job, with as many shares as threads or any other count, over many tiny
 * jobs back to back (the decode pattern), after idling long enough for the workers to fall asleep, and
 * beside a busy process (shares are claimed by whichever thread runs); a share that keeps the caller
 * waiting (a descheduled worker) makes the caller run the next jobs alone, then the workers again;
 * scratch memory grows and stays aligned. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "testutil.h"
#include "threadpool.h"

static void test_split(void) {
    int bad = 0;
    for (int64_t n = 0; n < 300; n += 7) {
        for (int nth = 1; nth <= 5; nth++) {
            for (int64_t align = 1; align <= 32; align *= 4) {
                int64_t next = 0;
                for (int ith = 0; ith < nth; ith++) {
                    int64_t lo, hi;
                    vs_split_range(n, ith, nth, align, &lo, &hi);
                    if (lo != next || hi < lo || hi > n) bad++;
                    if (lo % align && lo != n) bad++;
                    if (hi % align && hi != n) bad++;
                    next = hi;
                }
                if (next != n) bad++;
            }
        }
    }
    VT_CHECK(bad == 0, "%d split_range violations", bad);
    int64_t lo, hi;
    vs_split_range(5632, 1, 2, 16, &lo, &hi);
    VT_CHECK(lo == 2816 && hi == 5632, "even split [%lld, %lld)", (long long)lo, (long long)hi);
}

#define MAX_SHARES 80

typedef struct job {
    atomic_int calls[MAX_SHARES];
    atomic_long sum;
    int nth_seen;
    int64_t n;
    int32_t *data; /* (n) each element incremented by exactly one share */
} job;

static void job_fn(void *p, int ith, int nth) {
    job *j = p;
    atomic_fetch_add(&j->calls[ith], 1);
    if (ith == 0) j->nth_seen = nth;
    int64_t lo, hi;
    vs_split_range(j->n, ith, nth, 16, &lo, &hi);
    long s = 0;
    for (int64_t i = lo; i < hi; i++) {
        j->data[i] += 1;
        s += i;
    }
    atomic_fetch_add(&j->sum, s);
}

/* n_shares 0: vs_threadpool_run (one share per thread) */
static void run_many_shares(vs_threadpool *tp, int n_shares, int jobs, int64_t n, const char *what) {
    int32_t *data = calloc((size_t)n + 1, sizeof(int32_t));
    job j;
    memset(&j, 0, sizeof(j));
    j.n = n;
    j.data = data;
    const int nsh = n_shares ? n_shares : vs_threadpool_size(tp);
    for (int k = 0; k < jobs; k++) {
        if (n_shares) vs_threadpool_run_shares(tp, job_fn, &j, n_shares);
        else vs_threadpool_run(tp, job_fn, &j);
    }
    int bad = 0;
    for (int i = 0; i < nsh; i++) bad += atomic_load(&j.calls[i]) != jobs;
    for (int i = nsh; i < MAX_SHARES; i++) bad += atomic_load(&j.calls[i]) != 0;
    for (int64_t i = 0; i < n; i++) bad += data[i] != jobs;
    long want = (long)jobs * (long)(n * (n - 1) / 2);
    VT_CHECK(bad == 0 && j.nth_seen == nsh && atomic_load(&j.sum) == want,
             "%s: %d threads, %d shares, %d jobs of %lld: %d bad shares", what, vs_threadpool_size(tp), nsh,
             jobs, (long long)n, bad);
    free(data);
}

static void run_many(vs_threadpool *tp, int n_threads, int jobs, int64_t n, const char *what) {
    VT_CHECK(vs_threadpool_size(tp) == n_threads, "%s: pool size", what);
    run_many_shares(tp, 0, jobs, n, what);
}

/* A process that keeps one core busy while the pool works. */
static void *spinner(void *p) {
    atomic_bool *stop = p;
    volatile unsigned long x = 0;
    while (!atomic_load(stop)) x++;
    return NULL;
}

/* A share that sleeps 3 ms when a worker runs it (what a worker descheduled mid-share looks like) and
 * works 20 us on the caller. */
typedef struct straggle_job {
    pthread_t caller;
    atomic_int on_worker; /* shares run by a worker */
} straggle_job;

static void straggle_fn(void *p, int ith, int nth) {
    (void)ith, (void)nth;
    straggle_job *j = p;
    if (pthread_equal(pthread_self(), j->caller)) { /* 20 us of work: time for a worker to claim a share */
        const double t0 = vs_time_now();
        while (vs_time_now() - t0 < 20e-6) {
        }
        return;
    }
    atomic_fetch_add(&j->on_worker, 1);
    struct timespec ts = {0, 3 * 1000 * 1000};
    nanosleep(&ts, NULL);
}

static void test_solo(void) {
    vs_error err;
    vs_threadpool *tp = vs_threadpool_new(2, &err);
    VT_REQUIRE(tp, "pool: %s", err.msg);
    straggle_job j = {.caller = pthread_self()};
    /* until a worker claims a share (it may still be waking for the first jobs) */
    for (int k = 0; k < 200 && vs_threadpool_solo_count(tp) == 0; k++) vs_threadpool_run_shares(tp, straggle_fn, &j, 8);
    VT_CHECK(vs_threadpool_solo_count(tp) == 1 && atomic_load(&j.on_worker) > 0,
             "a straggling share puts the caller in solo mode (count %lld)", (long long)vs_threadpool_solo_count(tp));
    /* solo: the next jobs run on the caller alone */
    const int before = atomic_load(&j.on_worker);
    for (int k = 0; k < 20; k++) vs_threadpool_run_shares(tp, straggle_fn, &j, 8); /* 3.2 ms of the 20 */
    VT_CHECK(atomic_load(&j.on_worker) == before, "solo mode: %d shares ran on a worker",
             atomic_load(&j.on_worker) - before);
    /* after the solo window the workers take part again */
    struct timespec ts = {0, 30 * 1000 * 1000};
    nanosleep(&ts, NULL);
    for (int k = 0; k < 200 && atomic_load(&j.on_worker) == before; k++) run_many(tp, 2, 1, 1000, "after solo");
    for (int k = 0; k < 200 && atomic_load(&j.on_worker) == before; k++) {
        vs_threadpool_run_shares(tp, straggle_fn, &j, 8);
        nanosleep(&(struct timespec){0, 30 * 1000 * 1000}, NULL);
    }
    VT_CHECK(atomic_load(&j.on_worker) > before, "the workers run shares again after the solo window");
    printf("threadpool: solo mode after a straggling share, workers back after it: %lld solo episodes\n",
           (long long)vs_threadpool_solo_count(tp));
    vs_threadpool_free(tp);
}

int main(void) {
    test_split();
    test_solo();
    VT_CHECK(vs_threadpool_size(NULL) == 1, "NULL pool size");
    vs_error err;
    VT_CHECK(vs_threadpool_new(0, &err) == NULL && err.code == VS_ERR_INVALID, "0 threads rejected");
    run_many(NULL, 1, 10, 100, "NULL pool");
    for (int nt = 1; nt <= 4; nt++) {
        vs_threadpool *tp = vs_threadpool_new(nt, &err);
        VT_REQUIRE(tp, "pool of %d: %s", nt, err.msg);
        VT_CHECK(vs_threadpool_size(tp) == nt, "size");
        double t0 = vs_time_now();
        /* more threads than this machine's cores make every job wait for the scheduler: fewer jobs */
        int n_tiny = nt <= 2 ? 20000 : 2000;
        run_many(tp, nt, n_tiny, 3, "tiny jobs");
        double dt = vs_time_now() - t0;
        printf("threadpool: %d threads: %.2f us per tiny job\n", nt, dt / n_tiny * 1e6);
        run_many(tp, nt, 200, 10000, "medium jobs");
        /* let the workers fall asleep, then wake them */
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
        run_many(tp, nt, 3, 1000, "after sleep");
        for (int k = 0; k < 50; k++) {
            run_many(tp, nt, 1, 64, "alternating idle");
            struct timespec ts2 = {0, (k % 5) * 100 * 1000};
            nanosleep(&ts2, NULL);
        }
        for (int ns = 1; ns <= MAX_SHARES; ns += 13) {
            run_many_shares(tp, ns, 500, 1000, "shares");
            run_many_shares(tp, ns, 2000, 3, "tiny shared jobs");
        }
        /* shared cores: every job still completes with each share run once */
        atomic_bool stop = false;
        pthread_t busy[2];
        for (int b = 0; b < 2; b++) pthread_create(&busy[b], NULL, spinner, &stop);
        run_many(tp, nt, 2000, 1000, "beside busy threads");
        run_many_shares(tp, 4 * nt + 1, 2000, 1000, "shares beside busy threads");
        atomic_store(&stop, true);
        for (int b = 0; b < 2; b++) pthread_join(busy[b], NULL);
        uint8_t *s1 = vs_threadpool_scratch(tp, 100);
        VT_CHECK(s1 && ((uintptr_t)s1 & 63) == 0, "scratch aligned");
        uint8_t *s2 = vs_threadpool_scratch(tp, 1 << 20);
        VT_CHECK(s2 && ((uintptr_t)s2 & 63) == 0, "scratch grows");
        memset(s2, 1, 1 << 20);
        VT_CHECK(vs_threadpool_scratch(tp, 10) == s2, "scratch reused when big enough");
        vs_threadpool_free(tp);
    }
    VT_CHECK(vs_threadpool_scratch(NULL, 10) == NULL, "NULL pool has no scratch");
    vs_threadpool_free(NULL);
    return vt_finish("threadpool");
}
