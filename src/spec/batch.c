/* batch: verify blocks of several threads merged into one target forward (batch.h). */
#include "batch.h"

#include <pthread.h>
#include <string.h>

#define MAX_PENDING 256

typedef struct pending {
    vs_lm *lm;
    vs_kv *kv;
    vs_threadpool *tp;
    const vs_lm_row *rows;
    int n;
    const vs_lm_out *out;
    vs_status st;
    vs_error err;
    bool done;
} pending;

struct vs_batch {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool turn;   /* a thread holds the turn */
    int active;  /* threads between enter and leave */
    int waiting; /* of them, inside vs_batch_verify with a block not yet run */
    pending *p[MAX_PENDING];
    int n_p;
    int32_t max_rows;
    int draft_pause; /* drafting pauses at this many active threads; 0 never */
    /* the merged forward's scratch */
    vs_lm_row *rows;
    int32_t *anc;
    float *logits;
    size_t cap_rows, cap_anc, cap_logits;
    vs_batch_stats stats;
};

vs_batch *vs_batch_new(int32_t max_rows, vs_error *err) {
    vs_batch *b = vs_calloc(1, sizeof(*b));
    if (!b) return vs_error_set(err, VS_ERR_NOMEM, "batch: out of memory"), NULL;
    b->max_rows = max_rows <= 0 ? 96 : VS_MIN(max_rows, 127);
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    return b;
}

void vs_batch_free(vs_batch *b) {
    if (!b) return;
    vs_free(b->rows), vs_free(b->anc), vs_free(b->logits);
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
    vs_free(b);
}

/* Takes the turn. Lock held. */
static void take_turn(vs_batch *b) {
    while (b->turn) pthread_cond_wait(&b->cv, &b->mu);
    b->turn = true;
}

void vs_batch_enter(vs_batch *b) {
    pthread_mutex_lock(&b->mu);
    b->active++; /* counted before it has the turn: the blocks already waiting wait for its first one */
    take_turn(b);
    pthread_mutex_unlock(&b->mu);
}

static void run_alone(pending *q) {
    q->st = vs_lm_forward(q->lm, q->kv, q->tp, q->rows, q->n, q->out, &q->err);
}

static bool grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    void *n = vs_realloc(*p, need * elem);
    if (!n) return false;
    *p = n, *cap = need;
    return true;
}

/* Runs q[0..n) as one forward; false when it could not (then nothing was written to the cache). */
static bool run_merged(vs_batch *b, pending **q, int n) {
    size_t rows = 0, anc = 0, want = 0;
    for (int i = 0; i < n; i++) {
        rows += (size_t)q[i]->n;
        for (int r = 0; r < q[i]->n; r++) {
            if (q[i]->rows[r].tree) anc += (size_t)q[i]->rows[r].n_anc;
            want += q[i]->rows[r].want_logits;
        }
    }
    const size_t V = (size_t)vs_lm_cfg(q[0]->lm)->n_vocab;
    if (!grow((void **)&b->rows, &b->cap_rows, rows, sizeof(vs_lm_row)) ||
        !grow((void **)&b->anc, &b->cap_anc, anc + 1, sizeof(int32_t)) ||
        !grow((void **)&b->logits, &b->cap_logits, want * V + 1, sizeof(float)))
        return false;
    size_t at = 0, at_anc = 0;
    for (int i = 0; i < n; i++) {
        for (int r = 0; r < q[i]->n; r++) {
            vs_lm_row *row = &b->rows[at + (size_t)r];
            *row = q[i]->rows[r];
            if (row->tree) { /* ancestors are batch indices: shift them to the block's place */
                for (int a = 0; a < row->n_anc; a++) b->anc[at_anc + (size_t)a] = row->anc[a] + (int32_t)at;
                row->anc = b->anc + at_anc;
                at_anc += (size_t)row->n_anc;
            }
        }
        at += (size_t)q[i]->n;
    }
    vs_lm_out out = {.logits = b->logits, .attn_layer = -1, .mm_flags = q[0]->out ? q[0]->out->mm_flags : 0};
    vs_error err = {0};
    if (vs_lm_forward(q[0]->lm, q[0]->kv, q[0]->tp, b->rows, (int)rows, &out, &err)) return false;
    const float *lg = b->logits;
    for (int i = 0; i < n; i++) {
        size_t w = 0;
        for (int r = 0; r < q[i]->n; r++) w += q[i]->rows[r].want_logits;
        if (q[i]->out && q[i]->out->logits) memcpy(q[i]->out->logits, lg, w * V * sizeof(float));
        lg += w * V;
        q[i]->st = VS_OK;
    }
    return true;
}

/* Whether a block can share a forward with others: logits only, the same model, cache and flags. */
static bool mergeable(const pending *a, const pending *q) {
    const vs_lm_out *o = q->out;
    if (o && (o->hidden || o->n_layer_out > 0 || o->attn_fn || o->layer_fn)) return false;
    if (!a) return true;
    const unsigned fa = a->out ? a->out->mm_flags : 0, fq = o ? o->mm_flags : 0;
    return a->lm == q->lm && a->kv == q->kv && a->tp == q->tp && fa == fq;
}

/* Runs every waiting block. Called with the lock and the turn held; the lock is released while computing. */
static void run_pending(vs_batch *b) {
    pending *q[MAX_PENDING];
    const int n = b->n_p;
    memcpy(q, b->p, sizeof(pending *) * (size_t)n);
    b->n_p = 0;
    pthread_mutex_unlock(&b->mu);
    int64_t forwards = 0, merged_rows = 0;
    for (int i = 0; i < n;) {
        /* the longest run of mergeable blocks from i that fits max_rows */
        int j = i, rows = 0;
        while (j < n && mergeable(j > i ? q[i] : NULL, q[j]) && rows + q[j]->n <= b->max_rows) rows += q[j++]->n;
        if (j - i >= 2 && run_merged(b, q + i, j - i)) {
            forwards++, merged_rows += rows;
        } else {
            if (j == i) j = i + 1; /* a block that cannot merge (or does not fit) runs alone */
            for (int k = i; k < j; k++) run_alone(q[k]), forwards++;
        }
        i = j;
    }
    pthread_mutex_lock(&b->mu);
    b->stats.forwards += forwards, b->stats.merged_rows += merged_rows;
    b->stats.blocks += n;
    for (int i = 0; i < n; i++) q[i]->done = true;
    b->waiting -= n;
    pthread_cond_broadcast(&b->cv);
}

void vs_batch_leave(vs_batch *b) {
    pthread_mutex_lock(&b->mu);
    b->active--;
    if (b->n_p > 0 && b->waiting == b->active) run_pending(b);
    b->turn = false;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

vs_status vs_batch_verify(void *ctx, vs_lm *lm, vs_kv *kv, vs_threadpool *tp, const vs_lm_row *rows, int n,
                          const vs_lm_out *out, vs_error *err) {
    vs_batch *b = ctx;
    /* every block waits for the others, also one that will run alone (hidden states wanted, more rows than
     * max_rows): running it at once would keep the turn, and the others' blocks, until its request ends */
    pending me = {.lm = lm, .kv = kv, .tp = tp, .rows = rows, .n = n, .out = out};
    pthread_mutex_lock(&b->mu);
    if (b->n_p == MAX_PENDING) run_pending(b);
    b->p[b->n_p++] = &me;
    b->waiting++;
    if (b->waiting == b->active) {
        run_pending(b); /* the last to arrive runs everyone's blocks and keeps the turn */
    } else {
        b->turn = false; /* let the others draft their blocks */
        pthread_cond_broadcast(&b->cv);
        while (!me.done) pthread_cond_wait(&b->cv, &b->mu);
        take_turn(b);
    }
    pthread_mutex_unlock(&b->mu);
    if (me.st && err) *err = me.err;
    return me.st;
}

void vs_batch_set_draft_pause(vs_batch *b, int n_active) {
    pthread_mutex_lock(&b->mu);
    b->draft_pause = n_active > 0 ? n_active : 0;
    pthread_mutex_unlock(&b->mu);
}

int32_t vs_batch_draft_limit(void *ctx) {
    vs_batch *b = ctx;
    pthread_mutex_lock(&b->mu);
    const bool pause = b->draft_pause > 0 && b->active >= b->draft_pause;
    if (pause) b->stats.paused++;
    pthread_mutex_unlock(&b->mu);
    return pause ? 0 : -1;
}

void vs_batch_get_stats(vs_batch *b, vs_batch_stats *s) {
    pthread_mutex_lock(&b->mu);
    *s = b->stats;
    pthread_mutex_unlock(&b->mu);
}
