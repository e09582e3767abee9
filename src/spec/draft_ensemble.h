/* draft_ensemble: in-batch ensemble drafting (IbED) with test-time adaptive weights (TABED); the single
 * drafting methods M, T, C and P are its m = 1 case. docs/algorithms.md, 'Drafting inputs',
 * 'In-batch ensemble drafting' and 'TABED adaptive weights'.
 * Owns: one KV cache with one sequence per drafting input ("row"), each row's prompt (its own prefix:
 * the request's text with each image replaced as the input says), the rows' pending (fed-but-not-yet-
 * evaluated) tokens, the sampler (the request's transforms, its own seed), the per-block distributions of
 * every row (for the history), the TABED history and the current block's weights, the weight trace, the
 * projected image rows of the current request. Borrowed: the draft model, the target (only for the
 * compatibility check), the projector, the caption source.
 *
 * Drafting inputs (one row each, at most one of each kind):
 *   M  each image -> the drafter's projector over the request's shared ViT features;
 *   T  each image -> the tokens of "\n" (without SentencePiece's space-prefix token);
 *   C  each image -> the tokens of "image: " + its caption (no BOS); captions come from the caption
 *      source (caption.h), possibly computed on another thread during the target's prefill, in which
 *      case the C row's prompt is evaluated at the first draft step, after the prefill;
 *   P  each image -> the features average-pooled k x k (pool_k; 24 x 24 -> 12 x 12 at k = 2) and then
 *      projected (a window that sticks out at the edge averages the cells inside: image.h).
 * Text segments are the same in every row. A request without images gives every row the same prefix.
 *
 * One draft step = ONE vs_lm_forward over all m rows (each row its own sequence and positions: the
 * prefixes differ in length), so the weights are read once per step for all rows. The first step of a
 * block feeds each row's pending rows (the correction / bonus token, plus the last accepted draft when
 * the whole chain was accepted; at the first block the last prompt row); later steps feed the previous
 * draft to every row. With z_r the row's logits:
 *   q_r   = the request's sampling transforms of z_r (vs_sampler_probs: temperature, top-k, top-p, min-p),
 *           or softmax(z_r) (temperature 1, no truncation) when drafting greedily;
 *   q_ens = sum_r w_r q_r (probabilities, not logits);
 *   d     = argmax q_ens (greedy: request temperature 0, or opts.greedy; q_row = -1) or d ~ q_ens
 *           (sampled; the proposal's q row is q_ens, so the engine's min(1, p/q) test and the residual
 *           use exactly the distribution d was drawn from: lossless).
 * m = 1 with greedy drafting takes d = argmax z directly (what draft_lm does).
 *
 * Width-d trees (opts.tree_width = d > 1, TABED app. D): the first drafted distribution gives d sibling
 * branches: its d best tokens (greedy; the first is the argmax) or d tokens drawn from q_ens WITHOUT
 * replacement (sampled; the siblings share q row 0, spec.h's sibling convention); each branch is then
 * continued chain-wise to the block's depth with its own q_ens. Nodes are numbered depth-major: node
 * (j - 1) d + b is branch b at depth j, its parent node (j - 2) d + b (depth 1: the pending row), its q row
 * its own index (depth 1: row 0). Depth j's d nodes are drafted in ONE forward per depth (all m rows x d
 * branches): each tree row sits at position base + j - 1 and sees its row's prefix and its own branch's
 * cached nodes only (vs_lm_row.mask_past), so node n lands in cache slot base + n of every row. commit
 * moves the accepted path's slots to base.. (vs_kv_seq_compact). The drafter sets max_nodes = d * gamma
 * in begin; near a cache end it shrinks the depth (and the width when max_nodes < d). Fewer distinct
 * tokens than d (top-k truncation) gives fewer branches. tree_width 0 or 1 = chains (the default).
 *
 * EAGLE-2 dynamic trees (opts.tree_top_k = K > 0, docs/algorithms.md 'Token trees'): the children of a
 * node are its K most likely tokens under the drafted distribution (q_ens, or the softmax of the logits
 * for m = 1 greedy), scored by the cumulative log-probability of the path. Depth 1 is the root's K best
 * tokens; they are the first beams. Each later depth feeds the K current beams to every row in ONE
 * forward (tree rows: position base + depth - 1, attending to the prefix and the beam's own cached
 * ancestors), expands each beam into its K best children and keeps the K best of those K x K as the next
 * beams; the block's depth is the request's gamma (forwards: the pending rows + gamma - 1). Of every node
 * created, the best tree_nodes by cumulative score (ties: shallower, then earlier) become the proposal,
 * ordered by depth: a child never scores above its parent, so the set is closed under ancestors.
 * Children are deterministic (q row -1) even when the request samples: the pruning looks at the tokens'
 * scores, and the engine's rule for deterministic siblings (accept x with probability p(x), else remove
 * x from p) stays exact for any fixed candidate set, where the rule for drawn siblings would not.
 * Beams sit in cache slots base + (their feeding order); commit moves the accepted path's fed nodes to
 * base.. (a last accepted node that was never fed becomes a pending row). TABED's history receives the
 * root's position and the position after every accepted fed node. tree_nodes 0 = 8 K (at most
 * VS_TREE_MAX_NODES); tree_top_k and tree_width > 1 exclude each other.
 *
 * Prefix reuse (params.reuse_prefix): each row keeps the cached rows whose keys equal its new prompt's
 * leading rows (spec.h keys: tokens; M / P image rows by the segment's image_id and row) and evaluates
 * only the rest; an image whose image_id (and pooling) was in the previous request is not projected
 * again (the projections are kept until the next request).
 *
 * After verification every row is truncated to its own prefix + the accepted drafts it evaluated;
 * nothing evaluated is ever fed again (tests count rows). TABED's history receives, for the verified
 * positions (min(accepted + 1, drafted)), the target's distribution from the engine's target_logits
 * (same transform as q: softmax when greedy, the sampler's transforms when sampling) and each row's q_r
 * of that position; the weights for the next block are chosen at the start of propose
 * (ens_weights.h). A row whose cache is full makes the drafter propose nothing (the engine decodes
 * plainly).
 *
 * Bad input (clear errors at creation or at begin): an unknown or repeated input, M / P without a
 * projector, P with pool_k < 1 or larger than an image's patch grid, C without a caption source, an
 * image without a caption (fixed texts), an image segment without features for M / P / a captioner.
 * Documented fallback: an EMPTY caption (a captioner that produced nothing) gives the row "image: "
 * alone for that image (counted in stats.n_empty_captions). */
#ifndef VS_DRAFT_ENSEMBLE_H
#define VS_DRAFT_ENSEMBLE_H

#include "caption.h"
#include "ens_weights.h"
#include "lm.h"
#include "spec.h"
#include "tree_build.h"
#include "vision.h"

typedef enum vs_ens_input {
    VS_ENS_IN_M = 0, /* multimodal */
    VS_ENS_IN_T = 1, /* text-only */
    VS_ENS_IN_C = 2, /* caption */
    VS_ENS_IN_P = 3, /* pooled multimodal */
} vs_ens_input;

const char *vs_ens_input_name(vs_ens_input in); /* "m", "t", "c", "p" */
/* "m,t,c,p", "mtcp", "m" ... (case-insensitive, commas optional) into in[] and *n; VS_ERR_INVALID for an
 * unknown letter, a repeat, or more than VS_ENS_MAX_ROWS. */
vs_status vs_ens_inputs_parse(const char *s, vs_ens_input *in, int32_t *n, vs_error *err);

#define VS_DRAFT_ENS_MAX_WIDTH 8

typedef struct vs_draft_ens_opts {
    int32_t n_inputs; /* m rows */
    vs_ens_input inputs[VS_ENS_MAX_ROWS];
    vs_ens_weights_cfg weights;      /* policy (vs_ens_weights_cfg_default: static uniform) */
    int32_t pool_k;                  /* P: pooling window (default 2) */
    int32_t n_ctx;                   /* rows per row's cache; <= 0: the draft model's n_ctx_train */
    vs_type kv_type;                 /* VS_TYPE_F32 (0), VS_TYPE_F16 or VS_TYPE_BF16 (kv.h; the CLI default) */
    vs_threadpool *tp;               /* borrowed; NULL = caller's thread */
    const vs_vision_projector *proj; /* M / P: the drafter's projector (width = the draft model's) */
    const vs_vision_tower *tower;    /* optional: vs_vision_check_projector(tower, proj) must pass */
    vs_caption_src *captions;        /* C: borrowed; a captioner runs on another thread unless it
                                      * shares the target's LM or this drafter's pool */
    bool greedy;                     /* draft greedily even when the request samples */
    int32_t tree_width;              /* branches per block (1 .. VS_DRAFT_ENS_MAX_WIDTH); 0 or 1 = chain */
    int32_t tree_top_k;              /* EAGLE-2 dynamic trees: K (1 .. VS_TREE_MAX_TOP_K); 0 = off */
    int32_t tree_nodes;              /* EAGLE-2 trees: nodes per proposal (1 .. VS_TREE_MAX_NODES);
                                      * 0 = 8 K */
    /* Adaptive draft length (chains): a block's drafting stops before a token whose drafted probability
     * (the drafter's q, softmax of its logits when greedy) is below p_min, as llama.cpp's --draft-p-min;
     * 0 = off, [0, 1). Proposing fewer tokens never changes the output (verification decides). */
    float p_min;
    bool trace;                      /* keep the per-block weight trace (vs_draft_ens_trace) */
    /* DEBUG / BENCHMARK ONLY: run the draft model as usual but propose the LEAST likely token
     * (m = 1: argmin of the logits; m > 1: argmin of q_ens over softmax(z_r)), deterministically and
     * greedily even when the request samples, so the target (almost) always rejects it: the cost of
     * speculation when nothing is gained (`--draft-mode reject`). Output stays lossless. */
    bool debug_reject;
    uint64_t seed;                   /* mixed into the request's seed (random policy, sampled drafts) */
} vs_draft_ens_opts;

/* One row T, static uniform weights, pool 2. */
void vs_draft_ens_opts_default(vs_draft_ens_opts *o);

/* A drafter over `draft` for `target` (may be the same vs_lm; both borrowed, must outlive it). NULL + err
 * when the vocabularies or tokenizers differ or an option is invalid. Free with vs_spec_drafter_free. */
vs_spec_drafter *vs_draft_ens_new(vs_lm *draft, const vs_lm *target, const vs_draft_ens_opts *o,
                                  vs_error *err);

typedef struct vs_draft_ens_stats {
    int64_t rows_evaluated; /* rows fed to the draft model since creation (all sequences) */
    int64_t forwards;       /* vs_lm_forward calls since creation (prefill chunks + draft steps) */
    int64_t draft_steps;    /* batched draft steps since creation */
    int64_t rows_discarded; /* evaluated rows later removed from the cache by a rollback (rejected
                             * drafts, tree nodes off the accepted path), all sequences, since creation */
    int32_t prefix_rows[VS_ENS_MAX_ROWS]; /* each row's prompt rows in the last request */
    int32_t prefilled[VS_ENS_MAX_ROWS];   /* of them, the rows its prefill evaluated (not reused) */
    int32_t n_empty_captions;             /* images of the last request whose generated caption was empty */
    double t_caption;                     /* seconds the captioner ran for the last request (other thread) */
    double t_caption_wait;                /* seconds the drafter waited for it (the part not hidden) */
    double t_c_prefill;                   /* seconds evaluating the C row's prompt after the wait */
    double t_weights; /* seconds choosing weights and updating the history (last request) */
} vs_draft_ens_stats;

/* NULL when d is not an ensemble drafter. */
const vs_draft_ens_stats *vs_draft_ens_get_stats(const vs_spec_drafter *d);
/* The weight trace of every request since creation (opts.trace), request index counting begins. */
const vs_ens_trace *vs_draft_ens_trace(const vs_spec_drafter *d);
/* The current block's weights (m values; the last block's after commit). */
const float *vs_draft_ens_weights(const vs_spec_drafter *d);
/* The history (tests inspect it). */
const vs_ens_hist *vs_draft_ens_history(const vs_spec_drafter *d);
/* The cache (one sequence per row) and m. */
vs_kv *vs_draft_ens_kv(vs_spec_drafter *d);
int32_t vs_draft_ens_rows(const vs_spec_drafter *d);

#endif
