/* draft_lm: the first drafter, a separate small LM (LLaMA family) sharing the target's tokenizer.
 * It is the one-input case of the ensemble drafter (draft_ensemble.h): vs_draft_lm_new maps its options
 * to vs_draft_ens_new with the single input T or M, and the drafter it returns IS an ensemble drafter
 * (vs_draft_ens_* accessors work on it). Owns (through it): its KV cache (one sequence), its sampler
 * (the request's transforms, its own seed: the request's XOR 0xD1B54A32D192ED03), its copy of the
 * prompt rows it drafts from, the projections of the last request's images, and the bookkeeping that
 * keeps it from ever evaluating a token twice. The model itself, the target (only read for the
 * compatibility check) and the projector are borrowed.
 *
 * Drafting inputs (docs/algorithms.md, 'Drafting inputs'):
 *   VS_DRAFT_LM_TEXT  (T): each image segment is replaced by the tokens of "\n" (no image features);
 *   VS_DRAFT_LM_MM    (M): each image segment becomes the drafter's own projection of the SAME ViT
 *                          features the target's projector read (vs_spec_prompt.images, computed once).
 * Prefix reuse (params.reuse_prefix): begin keeps the cached rows whose keys equal the new prompt's
 * leading rows (spec.h: tokens; image rows by the segment's image_id and row; T mode's "\n" by token)
 * and evaluates only the rest; in M mode an image whose image_id was in the previous request is not
 * projected again (its rows are kept until the next request).
 * Chains (or width-d trees: opts.tree_width, see draft_ensemble.h): each step feeds the rows the drafter
 * has not evaluated yet (the first step of a block: the correction / bonus token, plus the last accepted
 * draft when the whole chain was accepted), takes
 * the last row's logits, and draws d_i with the request's sampling transforms (q = that exact
 * distribution) or greedily (deterministic). After a block the rejected suffix is truncated from its
 * cache; nothing already evaluated is fed again. Its cache shrinks the chain when nearly full and
 * proposes nothing when full (the engine then decodes plainly).
 *
 * Compatibility (checked at creation, clear errors): the same tokenizer (vs_tokenizer_compatible: model,
 * pre-tokeniser, token texts, types, scores/merges, special ids) and the same n_vocab as the target. */
#ifndef VS_DRAFT_LM_H
#define VS_DRAFT_LM_H

#include "lm.h"
#include "spec.h"
#include "vision.h"

typedef enum vs_draft_lm_mode {
    VS_DRAFT_LM_TEXT = 0, /* T: images -> "\n" */
    VS_DRAFT_LM_MM = 1,   /* M: images -> own projector over the shared features */
} vs_draft_lm_mode;

typedef struct vs_draft_lm_opts {
    vs_draft_lm_mode mode;
    int32_t n_ctx;                   /* draft cache rows; <= 0: the draft model's n_ctx_train */
    vs_type kv_type;                 /* VS_TYPE_F32 (0), VS_TYPE_F16 or VS_TYPE_BF16 (kv.h; the CLI default) */
    vs_threadpool *tp;               /* borrowed; NULL = caller's thread */
    const vs_vision_projector *proj; /* M mode (required): the drafter's projector (output width = the
                                      * draft model's width), borrowed */
    const vs_vision_tower *tower;    /* M mode (optional): the tower whose features the requests carry;
                                      * when given, vs_vision_check_projector must accept proj */
    /* Draft greedily (argmax, deterministic: q one-hot) even when the request samples; verification
     * stays lossless (accept with probability p(d), residual p without d). */
    bool greedy;
    /* Width-d token trees (draft_ensemble.h): d branches per block from the first drafted distribution,
     * each continued chain-wise; 0 or 1 = chains. */
    int32_t tree_width;
    float p_min; /* adaptive draft length (chains): vs_draft_ens_opts.p_min */
    /* EAGLE-2 dynamic trees (draft_ensemble.h): K children per beam, K beams per depth, the best
     * tree_nodes nodes (0 = 8 K) of depth gamma; 0 = off. Excludes tree_width > 1. */
    int32_t tree_top_k, tree_nodes;
    /* DEBUG / BENCHMARK ONLY: run the draft model as usual but propose its LEAST likely token,
     * deterministically, so the target (almost) always rejects it: the cost of speculation when
     * nothing is gained (`--draft-mode reject`). Output stays lossless. */
    bool debug_reject;
} vs_draft_lm_opts;

/* A drafter over `draft` for the target `target` (which may be the very same vs_lm: the draft then
 * keeps its own cache). Both models are borrowed and must outlive the drafter. NULL + err when the
 * tokenizers or vocabulary sizes differ, or M mode lacks a fitting projector. Free with
 * vs_spec_drafter_free. */
vs_spec_drafter *vs_draft_lm_new(vs_lm *draft, const vs_lm *target, const vs_draft_lm_opts *opts,
                                 vs_error *err);

/* Rows the drafter evaluated in total (prompt + fed tokens) since creation (vs_draft_ens_stats
 * .rows_evaluated): tests use it to prove no token is evaluated twice. -1 when d is no such drafter. */
int64_t vs_draft_lm_rows_evaluated(const vs_spec_drafter *d);
/* Prompt rows the last begin() evaluated (the rest was reused from the cache: params.reuse_prefix);
 * -1 when d is no such drafter. */
int32_t vs_draft_lm_prefilled(const vs_spec_drafter *d);
/* Its cache (tests inspect lengths). */
vs_kv *vs_draft_lm_kv(vs_spec_drafter *d);

#endif
