/* batch: several requests on several threads verify their draft blocks in ONE target forward.
 * Owns: the turn (one thread at a time uses the model set: drafting, prefills, images, the thread pool),
 * the verify blocks waiting to be merged, and the merged forward's rows and logits.
 *
 * The engines (spec.h) of several sessions share one target KV cache, each on a sequence of its own, and
 * hand their verify forward to vs_batch_verify (vs_spec_config.verify). A thread that runs a request holds
 * the turn between vs_batch_enter and vs_batch_leave; in vs_batch_verify it gives the turn up and waits
 * until every active thread has a block waiting (or has left), and the last one to arrive runs all the
 * blocks as one forward: the weights are read once for all of them, which is what makes several clients
 * cost little more than one on a memory-bound CPU. Rows keep their results bitwise (the kernels are
 * batch invariant below 128 rows: a merged forward never exceeds max_rows < 128), so every request's
 * output is the one it gets alone. Blocks that ask for hidden states or attention observers, or that
 * would not fit, wait like the others and then run alone; when a merged forward fails, each block runs
 * alone so that one request's error stays its own. A thread's prefill and image encoding (done with the
 * turn held) delay the others' waiting blocks by their duration. */
#ifndef VS_BATCH_H
#define VS_BATCH_H

#include "lm.h"

typedef struct vs_batch vs_batch;

/* max_rows: the most rows of one merged forward (1 .. 127; <= 0: 96). */
vs_batch *vs_batch_new(int32_t max_rows, vs_error *err);
void vs_batch_free(vs_batch *b); /* NULL ok; no thread may be inside */

void vs_batch_enter(vs_batch *b); /* takes the turn and counts the thread active */
void vs_batch_leave(vs_batch *b); /* runs the waiting blocks when every other active thread waits; gives up the turn */

/* A vs_spec_verify_fn (ctx = the vs_batch): called with the turn held; returns with it held. */
vs_status vs_batch_verify(void *ctx, vs_lm *lm, vs_kv *kv, vs_threadpool *tp, const vs_lm_row *rows, int n,
                          const vs_lm_out *out, vs_error *err);

/* Drafting pauses while n_active or more threads are between enter and leave (0: never): their blocks
 * then verify one row each (vs_spec_config.draft_limit = vs_batch_draft_limit, ctx = the vs_batch; not
 * for feature drafters, whose blocks want hidden states and run alone anyway).
 * Where the target's rows are bound by arithmetic, several requests' one-row steps merged cost little
 * more than one, while drafts add rows and the drafters' own forwards: beyond a few requests drafting
 * costs more than it saves. Lossless either way (a drafter may always propose fewer tokens). */
void vs_batch_set_draft_pause(vs_batch *b, int n_active);
int32_t vs_batch_draft_limit(void *ctx); /* 0 while paused, else -1 (no limit) */

typedef struct vs_batch_stats {
    int64_t forwards;    /* target forwards run for verify blocks */
    int64_t blocks;      /* verify blocks */
    int64_t merged_rows; /* rows of the forwards that merged two or more blocks */
    int64_t paused;      /* blocks told to draft nothing because drafting was paused */
} vs_batch_stats;
void vs_batch_get_stats(vs_batch *b, vs_batch_stats *s);

#endif
