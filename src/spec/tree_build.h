/* tree_build: the bookkeeping of EAGLE-2 dynamic trees shared by the drafters that build them (the small-LM
 * drafters of draft_ensemble.h, the MSD head of draft_msd.h). docs/algorithms.md, 'EAGLE-2 dynamic trees'.
 * Owns nothing: pure functions over a caller's candidate array.
 *
 * A drafter keeps every node it creates in a block as a vs_tree_cand (score = cumulative log-probability of
 * its path). Per depth it feeds the current beams to its model (one forward), then for each beam appends
 * the beam's K best children (vs_tree_top_k + vs_tree_add_children), and takes the K best of the new
 * candidates as the next beams (vs_tree_next_beams). vs_tree_emit finally writes the best N candidates as a
 * proposal ordered by depth (parents first; a child never scores above its parent, so the best N are
 * closed under ancestors), each child deterministic (q_row -1). */
#ifndef VS_TREE_BUILD_H
#define VS_TREE_BUILD_H

#include "spec.h"

#define VS_TREE_MAX_TOP_K 16  /* children per beam and beams per depth */
#define VS_TREE_MAX_NODES 256 /* nodes per proposal */

/* Nodes of an EAGLE-2 tree of top-k K when the user gives none: 8 K (at most VS_TREE_MAX_NODES). */
static inline int32_t vs_tree_default_nodes(int32_t K) { return K * 8 < VS_TREE_MAX_NODES ? K * 8 : VS_TREE_MAX_NODES; }

typedef struct vs_tree_cand {
    double score;   /* cumulative log-probability of the path (<= the parent's) */
    int32_t token;
    int32_t parent; /* candidate index, -1 = child of the pending row */
    int32_t depth;  /* 1 + the parent's */
    int32_t slot;   /* the drafter's: where the fed node sits (cache slot - base), -1 = never fed */
    int32_t qid;    /* the drafter's: the distribution drawn after the fed node, -1 = none */
    int32_t node;   /* set by vs_tree_emit: index in the proposal, -1 = pruned */
} vs_tree_cand;

/* The up to K best entries of x[0..V) into tok, best first (ties: the lower index); probs: x is a
 * distribution (zeros skipped), else logits (-inf skipped); NaN is skipped. Returns how many. */
int32_t vs_tree_top_k(const float *x, int32_t V, int32_t K, bool probs, int32_t *tok);

/* Appends n children of candidate `parent` (-1: the root) with the given tokens and log-probabilities
 * (clamped to <= 0) at c[*nc ..]; the caller sized c. */
void vs_tree_add_children(vs_tree_cand *c, int32_t *nc, int32_t parent, const int32_t *tok, const double *logp,
                          int32_t n);

/* The K best (score; ties: earlier) of candidates [c0, nc) into beams, best first. Returns how many. */
int32_t vs_tree_next_beams(const vs_tree_cand *c, int32_t c0, int32_t nc, int32_t K, int32_t *beams);

/* The best N of the nc candidates (score; ties: shallower, then earlier) as out's nodes (token, parent,
 * depth, q_row -1), by depth; sets c[i].node and order[node] = candidate index (order: [min(nc, N)]).
 * out->n = the count. VS_ERR_NOMEM, or VS_ERR_INVALID for a node whose parent was pruned (cannot happen
 * with scores that never rise along a path). */
vs_status vs_tree_emit(vs_tree_cand *c, int32_t nc, int32_t N, vs_spec_proposal *out, int32_t *order,
                       vs_error *err);

#endif
