/* threadpool: a persistent pool of worker threads for data-parallel kernels.
 * Owns: the worker threads and the barrier-style dispatch of one job to all of them. A job is a
 * function called once per thread with (ctx, ith, nth); the caller's thread is worker 0, so a pool
 * of n threads starts n - 1 OS threads. Passing a NULL pool anywhere means "run on the caller". */
#ifndef VS_THREADPOOL_H
#define VS_THREADPOOL_H

#include "common.h"

typedef struct vs_threadpool vs_threadpool;
typedef void (*vs_task_fn)(void *ctx, int ith, int nth);

vs_threadpool *vs_threadpool_new(int n_threads, vs_error *err); /* n_threads >= 1 */
void vs_threadpool_free(vs_threadpool *tp);
int vs_threadpool_size(const vs_threadpool *tp); /* 1 for NULL */
/* Runs fn(ctx, ith, nth) for ith = 0..nth-1 and returns when all are done. Not re-entrant. */
void vs_threadpool_run(vs_threadpool *tp, vs_task_fn fn, void *ctx);
/* Splits [0, n) into nth contiguous chunks aligned to `align`; chunk ith is [*lo, *hi). */
void vs_split_range(int64_t n, int ith, int nth, int64_t align, int64_t *lo, int64_t *hi);
/* Scratch memory owned by the pool (64-byte aligned, grown on demand, freed with the pool), for kernels
 * that need a per-call buffer without allocating on the hot path. Call only from the thread that owns
 * the pool, outside vs_threadpool_run; the pointer is valid until the next call. NULL for a NULL pool
 * or when the allocation fails (callers must then fall back to something that needs no scratch). */
void *vs_threadpool_scratch(vs_threadpool *tp, size_t bytes);

#endif
