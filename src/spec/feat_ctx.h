/* feat_ctx: what the feature-level drafters (the MSD head, draft_msd.h; the DREAM model, draft_dream.h)
 * keep of a request's context, and the steps they share over the target they draft for.
 * Owns: per context row its key (vs_spec_segment_key; the token id after the prompt), its token (-1 on
 * image rows) and its image row (the request's projected row, valid until end), and the row count.
 * Shared steps: a row's input embedding, the target's LM head over draft features, the request's
 * distribution of a draft's logits, and one EAGLE-2 expansion (tree_build.h). */
#ifndef VS_FEAT_CTX_H
#define VS_FEAT_CTX_H

#include "lm.h"
#include "sample.h"
#include "spec.h"
#include "tree_build.h"

typedef struct vs_feat_ctx {
    int64_t *key;
    int32_t *tok;
    const float **img;
    int32_t n_rows; /* rows known (prompt, accepted, pending) */
    int32_t cap;    /* rows the arrays hold */
    int32_t H;      /* width of an image row */
} vs_feat_ctx;

/* Room for cap rows (contents kept); false when out of memory. */
bool vs_feat_ctx_reserve(vs_feat_ctx *c, int32_t cap);
void vs_feat_ctx_free(vs_feat_ctx *c);
/* Mirrors the prompt's rows (the caller reserved room); returns how many leading rows equal the previous
 * context's (keys that match, VS_SPEC_KEY_NONE never does; 0 unless reuse). */
int32_t vs_feat_ctx_begin(vs_feat_ctx *c, const vs_spec_prompt *p, bool reuse);
/* Appends a block's accepted tokens and its next token behind the pending row; false when they would
 * pass cap (nothing appended). */
bool vs_feat_ctx_commit(vs_feat_ctx *c, const vs_spec_commit *cm);
/* Forgets the request's image rows (their memory is the caller's). */
void vs_feat_ctx_end(vs_feat_ctx *c);
/* Row i's input: the target's token embedding, or the image row. `who` names the drafter in errors. */
vs_status vs_feat_ctx_row_embd(const vs_feat_ctx *c, const vs_lm *target, int32_t i, float *out, const char *who,
                               vs_error *err);

/* The checks every feature drafter makes at creation: EAGLE-2 top-k in [0, VS_TREE_MAX_TOP_K] (0 =
 * chains), nodes in [0, VS_TREE_MAX_NODES] (0 = 8 K), a target with an LM head and a final norm.
 * VS_ERR_INVALID with `what` ("MSD drafter") in the message. */
vs_status vs_feat_check_opts(const char *what, int32_t tree_top_k, int32_t tree_nodes, const vs_lm *target,
                             vs_error *err);

/* The target's LM head `out` (no norm) over n draft features f: logits [n][out->n_out]. */
void vs_feat_lm_head(vs_threadpool *tp, const vs_lm_mat *out, const float *f, int32_t n, float *logits);
/* The distribution q of logits lg: the request's transforms through its sampler, or a plain softmax when
 * drafting greedily. */
vs_status vs_feat_transform(vs_sampler *s, bool greedy, const float *lg, float *q, int32_t V, vs_error *err);
/* EAGLE-2: the K best children of candidate `parent` (-1 = the root) from the draft feature f, appended to
 * cand (logits and q: scratch of V values). */
vs_status vs_feat_expand(vs_threadpool *tp, const vs_lm_mat *out, vs_sampler *s, bool greedy, const float *f,
                         float *logits, float *q, int32_t K, vs_tree_cand *cand, int32_t *nc, int32_t parent,
                         vs_error *err);

#endif
