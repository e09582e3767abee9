/* threadpool: a persistent pool of worker threads for data-parallel kernels.
 * Owns: the worker threads and the dispatch of one job to them. A job is a function called once per
 * share with (ctx, ith, nth), share ith of nth; the caller's thread takes part, so a pool of n threads
 * starts n - 1 OS threads. Shares are claimed by whichever threads are running: a share runs on exactly
 * one thread (per-share scratch indexed by ith needs no lock) but not on a fixed one, so a job never
 * waits for a thread the OS has not scheduled; when shares claimed by a thread the OS then descheduled keep
 * the caller waiting, the caller runs the next jobs alone for a while. Passing a NULL pool anywhere means
 * "run on the caller". */
#ifndef VS_THREADPOOL_H
#define VS_THREADPOOL_H

#include "common.h"

typedef struct vs_threadpool vs_threadpool;
typedef void (*vs_task_fn)(void *ctx, int ith, int nth);

vs_threadpool *vs_threadpool_new(int n_threads, vs_error *err); /* n_threads >= 1 */
void vs_threadpool_free(vs_threadpool *tp);
int vs_threadpool_size(const vs_threadpool *tp); /* 1 for NULL */
/* Runs fn(ctx, ith, nth) for ith = 0..nth-1, nth = the pool's size, and returns when all are done.
 * Not re-entrant. */
void vs_threadpool_run(vs_threadpool *tp, vs_task_fn fn, void *ctx);
/* The same with n_shares shares (1..65535) whatever the pool's size: more shares than threads balance
 * the load when a thread is slowed (shared cores) at the cost of one atomic claim per share. A share's
 * result must not depend on which thread or how many threads run the others. */
void vs_threadpool_run_shares(vs_threadpool *tp, vs_task_fn fn, void *ctx, int n_shares);
/* Oversubscribed cores: when the caller of a job of more shares than threads waits for a share another
 * thread claimed longer than 1 ms and longer than twice its own part took (that thread was descheduled),
 * the caller runs the jobs of the next 20 ms alone, then tries the workers again. How often that
 * happened: */
int64_t vs_threadpool_solo_count(const vs_threadpool *tp);
/* Splits [0, n) into nth contiguous chunks aligned to `align`; chunk ith is [*lo, *hi). */
void vs_split_range(int64_t n, int ith, int nth, int64_t align, int64_t *lo, int64_t *hi);
/* Scratch memory owned by the pool (64-byte aligned, grown on demand, freed with the pool), for kernels
 * that need a per-call buffer without allocating on the hot path. Call only from the thread that owns
 * the pool, outside vs_threadpool_run; the pointer is valid until the next call. NULL for a NULL pool
 * or when the allocation fails (callers must then fall back to something that needs no scratch). */
void *vs_threadpool_scratch(vs_threadpool *tp, size_t bytes);

#endif
