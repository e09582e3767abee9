/* spec: the speculative decoding engine, independent of how drafts are made.
 * Owns: the target's KV cache (one sequence; or a sequence of a cache shared with other engines, whose
 * verify forwards a batcher merges: vs_spec_config.kv / .verify, batch.h) and verification scratch (the
 * target model itself is borrowed), the draft/verify loop, the acceptance rules (greedy; stochastic min(1, p/q) with the
 * residual norm(max(0, p - q)) and the bonus token), EOS / token-limit / context-end handling, rolling
 * the target cache back, the run log, and the pure statistics computed from logs.
 *
 * A drafter is a vtable (vs_spec_drafter_vt). Per request the engine calls
 *   begin(request)            the prompt as segments (text tokens, images with the target's embedding
 *                             rows and the shared ViT features), the sampling parameters;
 *   target_rows(features)     only if the drafter asks for them: the target's hidden states of rows
 *                             that just became final in the target cache (prompt rows after the prefill,
 *                             the verified rows after each block), for feature-level heads (MSD, DREAM);
 *   propose(limits) -> proposal   per block: a chain or a tree of tokens, each with the exact
 *                             distribution q it was drawn from (or marked deterministic); not called
 *                             for a block that may hold no draft (the token limit or the cache's end,
 *                             or vs_spec_config.draft_limit 0), possibly many blocks in a row in the
 *                             middle of a request: the drafter catches up on the committed tokens;
 *   commit(result)            per block (also without a propose): the accepted nodes and the
 *                             correction / bonus token;
 *   end()                     after the request (also after an error).
 *
 * Generation state. The target cache holds every token of the context except the last one, the
 * "pending" row: a block evaluates [pending, d_1 .. d_k] (k + 1 rows at positions L .. L + k) in ONE
 * vs_lm_forward, so the first block also produces the first new token (no separate first step), and
 * gamma = 0 is plain decoding (one row per step). After a block the cache keeps pending + the accepted
 * drafts, and the correction / bonus token becomes the new pending row.
 *
 * Trees. A proposal is a list of nodes in topological order (every parent precedes its children), each
 * with its parent (-1 = child of the pending row), depth and q row; a chain is the tree where node i's
 * parent is i - 1. Rows are built with the tree mask when the proposal is not a chain (position = L +
 * depth; a node attends to the cache, the pending row, its ancestors and itself), the accepted path is
 * moved into place with vs_kv_seq_compact, and features are gathered along the path. The tree walk
 * (docs/algorithms.md, 'Tree verification') starts at the pending row and at each node looks at its children in index
 * order (= drawing order):
 *   greedy: descend into the first child whose token is the target's argmax at the node; none: emit
 *           that argmax; a leaf reached: emit the bonus argmax there. (The longest matching path.)
 *   sampling (SpecInfer / MCSD without replacement): p = the target's distribution at the node, q = the
 *           children's q row; for each child x in order: accept with probability min(1, p(x)/q(x)) and
 *           descend; else p = norm(max(p - q, 0)), q(x) = 0, q = norm(q). No child accepted: emit a
 *           sample of p. Deterministic children (q_row -1): q is one-hot at each child in turn (accept
 *           with probability p(x), else p(x) = 0 and renormalise: EAGLE's rule).
 * Sibling convention: the children of one node share ONE q_row (or are all -1): the distribution the
 * first child was drawn from; each later child was drawn from it without replacement (the earlier
 * siblings' probability zeroed, renormalised). check_proposal refuses siblings with different q rows.
 *
 * Distributions. p is the target's distribution after the request's sampling transforms
 * (vs_sampler_probs: temperature, top-k, top-p, min-p); q must be the exact distribution the drafter
 * drew the token from (for an ensemble, q_ens). Temperature 0 is greedy: accept while the draft equals
 * the target's argmax; q is not read.
 *
 * Not thread-safe: one request at a time per vs_spec. */
#ifndef VS_SPEC_H
#define VS_SPEC_H

#include <stdio.h>

#include "common.h"
#include "json.h"
#include "kv.h"
#include "lm.h"
#include "sample.h"
#include "threadpool.h"
#include "tokenizer.h"
#include "vision.h"

/* Longest chain (gamma) the statistics tables cover. */
#define VS_SPEC_MAX_GAMMA 64

/* ------------------------------------------------------------------------------------------------
 * The request */

typedef enum vs_spec_seg_kind {
    VS_SPEC_SEG_TEXT = 0,  /* tokens */
    VS_SPEC_SEG_IMAGE = 1, /* one image: the target's projected rows + the shared ViT features */
} vs_spec_seg_kind;

/* One piece of a prompt. The target's rows are the segments' rows in order. */
typedef struct vs_spec_segment {
    vs_spec_seg_kind kind;
    int32_t n;             /* text: tokens; image: target embedding rows */
    const int32_t *tokens; /* text: [n] token ids */
    const float *embd;     /* image: [n][target n_embd] the target's projected rows */
    int32_t image;         /* image: index into vs_spec_prompt.images (-1 = no features given) */
    int32_t image_id;      /* image: the caller's identity of this image (> 0), the same number for the
                            * same image in every request (chat turns); 0 = unknown: its rows are never
                            * reused from a cache. Prefix reuse keys image rows by (image_id, row). */
} vs_spec_segment;

/* Identity of one cached row, for prefix reuse (engine and drafters): a text row's key is its token id
 * (>= 0); row j of an image with image_id > 0 has the key -1 - (image_id * 2^32 + j); VS_SPEC_KEY_NONE
 * (rows of an image without identity, unknown rows) never matches anything. */
#define VS_SPEC_KEY_NONE INT64_MIN
int64_t vs_spec_key_image(int32_t image_id, int64_t row);
/* Key of row `row` (0-based) of segment seg: its token, or vs_spec_key_image(seg->image_id, row). */
int64_t vs_spec_segment_key(const vs_spec_segment *seg, int64_t row);
/* Length of the longest common prefix of two key lists (VS_SPEC_KEY_NONE never matches). */
int32_t vs_spec_keys_common(const int64_t *a, const int64_t *b, int32_t n);

typedef struct vs_spec_prompt {
    const vs_spec_segment *seg; /* [n_seg] */
    int32_t n_seg;
    /* [n_images] the ViT output of each image, computed once and shared by every projector (a
     * multimodal drafter projects them with its own projector); NULL when there are none. */
    const vs_vision_features *const *images;
    int32_t n_images;
} vs_spec_prompt;

/* Rows the target evaluates for a prompt (sum of the segments' n). */
int64_t vs_spec_prompt_rows(const vs_spec_prompt *p);
/* Checks a prompt against a model width: counts >= 0, pointers present, image indices in range,
 * at least one row. VS_ERR_INVALID naming the segment. */
vs_status vs_spec_prompt_check(const vs_spec_prompt *p, int32_t n_vocab, vs_error *err);

typedef struct vs_spec_params {
    int32_t gamma;              /* longest draft per block (chain length); 0 = plain decoding */
    int32_t n_predict;          /* token limit (>= 0; 0 = prefill only: the prompt is evaluated up to
                                 * its last row, which stays pending as between requests, and the
                                 * request stops at once with VS_SPEC_STOP_LIMIT and no tokens) */
    vs_sampler_params sampling; /* the user's sampling (temperature 0 = greedy) and seed */
    bool ignore_eos;            /* end-of-generation tokens are never generated (logits -inf in every
                                 * verified row, as llama.cpp's --ignore-eos): the text runs to n_predict */
    bool reuse_prefix;          /* keep the cached rows whose keys (vs_spec_segment_key: tokens, and
                                 * image rows of images with an image_id) equal the new prompt's leading
                                 * rows (chat turns, repeated requests); drafters do the same with their
                                 * caches; false: start from an empty cache */
    /* TEST ONLY: on a rejection sample the correction from p instead of norm(max(0, p - q)) (tree walk:
     * p is not replaced by the residual after a rejected sibling, for the later siblings either). This
     * makes speculative sampling WRONG (biased towards tokens the drafter overrates); it exists so
     * tests/test_spec_sampling.c can prove its distribution test detects a broken residual. */
    bool debug_break_residual;
} vs_spec_params;

/* gamma 0, n_predict 128, default sampling (temperature 1, seed 0), stop at EOS, no reuse. */
vs_spec_params vs_spec_params_default(void);

/* ------------------------------------------------------------------------------------------------
 * Drafter interface */

/* What begin receives. Pointers are valid until end(). */
typedef struct vs_spec_begin_info {
    const vs_spec_prompt *prompt;
    const vs_spec_params *params; /* sampling: a drafter normally draws with the same transforms */
    int32_t n_ctx_target;         /* the target cache's size (rows) */
} vs_spec_begin_info;

/* Limits of one proposal. */
typedef struct vs_spec_limits {
    int32_t max_depth; /* longest root-to-leaf path (chain: gamma, shrunk near the context / token
                        * limit); >= 1 */
    int32_t max_nodes; /* most nodes (chain: == max_depth) */
} vs_spec_limits;

/* A proposal: n nodes in topological order. The engine owns the arrays (capacity `cap` nodes, `cap`
 * q rows of n_vocab); the drafter fills them in propose and may leave n = 0 (nothing to propose).
 * For a chain: parent[i] = i - 1, depth[i] = i + 1, q_row[i] = i (or -1). */
typedef struct vs_spec_proposal {
    int32_t n;   /* nodes proposed */
    int32_t cap; /* capacity (>= limits.max_nodes) */
    int32_t n_vocab;
    int32_t *token;  /* [cap] */
    int32_t *parent; /* [cap] index of the parent node (< own index), -1 = child of the pending row */
    int32_t *depth;  /* [cap] 1 + parent's depth */
    int32_t *q_row;  /* [cap] row of q this node was drawn from, -1 = deterministic (q one-hot at the
                      * token). Siblings (children of one node) share one row: the first was drawn from
                      * it, each later one from it without replacement (see "Sibling convention"). */
    float *q;        /* [cap][n_vocab] distributions, each summing to 1 */
    int32_t n_steps; /* draft forward passes spent on this proposal (for the measured Tq); the
                      * engine counts one per node when left 0 */
} vs_spec_proposal;

/* Result of one block, given to commit. */
typedef struct vs_spec_commit {
    int32_t n_proposed;            /* nodes of the proposal */
    int32_t n_accepted;            /* accepted drafts (length of the accepted path) */
    const int32_t *accepted_nodes; /* [n_accepted] node indices along the path (chain: 0, 1, ...) */
    const int32_t *accepted;       /* [n_accepted] their tokens */
    int32_t next;                  /* the correction / bonus token, the new pending row; -1 when the
                                    * request ended in this block (EOS accepted, token limit) */
    /* The target's raw logits of the verified batch, valid during the call, for drafters that adapt to
     * the target at test time (TABED's ensemble weights): row 0 is the prediction for the first drafted
     * position (after the pending row), row i + 1 the prediction after node i. */
    const float *target_logits; /* [n_proposed + 1][n_vocab] */
} vs_spec_commit;

/* Target hidden states of rows that became final in the target cache. */
typedef struct vs_spec_features {
    int32_t pos0;                     /* position of the first row */
    int32_t n;                        /* rows */
    int32_t n_embd;                   /* target width */
    const int32_t *tokens;            /* [n] token of each row, -1 for embedding rows */
    const float *hidden;              /* [n][n_embd] last layer before the final norm */
    int32_t n_layer_out;              /* extra layers (drafter's want_layers) */
    const float *const *layer_hidden; /* [n_layer_out] of [n][n_embd] */
    /* With want_attn_recv, in the prefill's deliveries only (NULL after verify blocks): the attention each
     * cached row 0 .. n_attn - 1 received in the target's last layer from these n rows' queries, averaged
     * over heads and summed over the queries (DREAM's visual token scores). Summed in fixed point, so the
     * values do not depend on the thread count or schedule. */
    const float *attn_recv;           /* [n_attn] */
    int32_t n_attn;
} vs_spec_features;

typedef struct vs_spec_drafter vs_spec_drafter;

typedef struct vs_spec_drafter_vt {
    const char *name;
    vs_status (*begin)(vs_spec_drafter *d, const vs_spec_begin_info *req, vs_error *err);
    /* May be NULL when the drafter does not set want_hidden / want_layers. */
    vs_status (*target_rows)(vs_spec_drafter *d, const vs_spec_features *f, vs_error *err);
    vs_status (*propose)(vs_spec_drafter *d, const vs_spec_limits *lim, vs_spec_proposal *out, vs_error *err);
    vs_status (*commit)(vs_spec_drafter *d, const vs_spec_commit *c, vs_error *err);
    void (*end)(vs_spec_drafter *d);
    void (*free)(vs_spec_drafter *d);
} vs_spec_drafter_vt;

/* Every drafter starts with this header (implementations embed it as their first member). */
struct vs_spec_drafter {
    const vs_spec_drafter_vt *vt;
    int32_t n_vocab;       /* must equal the target's */
    int32_t max_nodes;     /* tree drafters: most nodes per proposal; 0 = chains (gamma nodes). Read after
                            * begin (a drafter may size it from params->gamma there). The engine's limits
                            * never exceed it nor the target cache's room behind the pending row. */
    bool want_hidden;      /* deliver the last hidden state through target_rows */
    bool keeps_features;   /* the drafter keeps the features of the rows it saw across requests, so the
                            * engine may reuse a cached prompt prefix (delivering only the rows after it);
                            * without it, prefix reuse is off for feature drafters (every prompt row is
                            * evaluated and delivered). Such a drafter must cope with a delivery that
                            * starts past the rows it knows (draft_msd: it then drafts nothing). */
    int32_t n_want_layers; /* and these layers' outputs */
    const int *want_layers;
    bool want_attn_recv;   /* and, with the prefill's features, the attention each row received
                            * (vs_spec_features.attn_recv); costs an observer over the last layer */
};

void vs_spec_drafter_free(vs_spec_drafter *d); /* NULL ok */

/* ------------------------------------------------------------------------------------------------
 * Run log and statistics */

typedef enum vs_spec_stop {
    VS_SPEC_STOP_NONE = 0,
    VS_SPEC_STOP_EOS,      /* an end-of-generation token was accepted */
    VS_SPEC_STOP_LIMIT,    /* n_predict tokens */
    VS_SPEC_STOP_CONTEXT,  /* the target cache is full */
    VS_SPEC_STOP_CALLBACK, /* the token callback asked to stop */
} vs_spec_stop;
const char *vs_spec_stop_name(vs_spec_stop s);

/* One block = one target verify pass. */
typedef struct vs_spec_block {
    int32_t n_draft;  /* drafted nodes verified (chain: its length; tree: all nodes) */
    int32_t n_eval;   /* drafted positions whose acceptance was decided: min(n_draft, n_accept + 1),
                       * or n_accept when an accepted EOS ended the request */
    int32_t n_accept; /* accepted drafts */
    int32_t n_emit;   /* tokens emitted (accepted + correction / bonus, fewer at an EOS) */
    int32_t n_steps;  /* draft forward passes */
    double t_draft;   /* seconds in propose */
    double t_verify;  /* seconds in the target forward + acceptance + rollback (+ commit) */
    int32_t n_depth;  /* the proposal's deepest path (0 in hand-made logs: taken as n_draft) */
} vs_spec_block;

typedef struct vs_spec_log {
    int32_t gamma;       /* configured draft length */
    int32_t n_prompt;    /* prompt rows */
    int32_t n_prefilled; /* prompt rows the target evaluated in the prefill (after prefix reuse) */
    int32_t n_tokens;    /* generated tokens */
    int32_t *tokens;     /* [n_tokens] (vs_malloc'ed, owned) */
    int32_t cap_tokens;
    vs_spec_block *blocks; /* [n_blocks] (owned) */
    int32_t n_blocks, cap_blocks;
    vs_spec_stop stop;
    /* seconds */
    double t_vision;        /* image encoding + projection, set by the caller (0 if none) */
    double t_prefill;       /* target prefill */
    double t_draft_prefill; /* drafter begin */
    double t_decode;        /* the block loop (drafting + verification + callbacks) */
    double t_total;         /* t_vision + t_prefill + t_draft_prefill + t_decode */
    double tp_step;         /* measured single-row target step, 0 = unknown (vs_spec_time_target) */
    double tp_verify;       /* measured (gamma + 1)-row target pass, 0 = unknown */
} vs_spec_log;

void vs_spec_log_init(vs_spec_log *log);
void vs_spec_log_free(vs_spec_log *log);  /* frees the arrays, keeps the struct reusable */
void vs_spec_log_reset(vs_spec_log *log); /* empties it, keeping allocations */
/* Appends a block / tokens (used by the engine; tests build logs with known answers). */
vs_status vs_spec_log_add_block(vs_spec_log *log, const vs_spec_block *b, vs_error *err);
vs_status vs_spec_log_add_tokens(vs_spec_log *log, const int32_t *t, int32_t n, vs_error *err);

typedef struct vs_spec_stats {
    int32_t gamma;
    int32_t n_blocks, n_tokens;
    int64_t n_drafted, n_accepted;
    double tau;                        /* new tokens / verify passes (0 if no block) */
    double accept_rate;                /* accepted / decided drafted positions */
    double draft_accept_rate;          /* accepted / all drafted positions (tree: nodes) */
    double nodes_per_block;            /* drafted nodes / blocks (chain: the mean draft length) */
    int32_t max_depth;                 /* deepest proposal of the run (< nodes per block: trees) */
    double n_alpha[VS_SPEC_MAX_GAMMA]; /* [n-1]: P(position n accepted | 1..n-1 accepted); -1 = no data */
    int64_t n_alpha_num[VS_SPEC_MAX_GAMMA], n_alpha_den[VS_SPEC_MAX_GAMMA];
    int64_t hist[VS_SPEC_MAX_GAMMA + 1]; /* blocks by accepted length 0..gamma */
    double t_vision, t_prefill, t_draft_prefill, t_draft, t_verify, t_decode, t_total;
    double tok_s_decode;  /* tokens / t_decode */
    double tok_s_total;   /* tokens / t_total */
    double tq;            /* mean draft step: t_draft / draft forward passes (0 = no drafting) */
    double tp;            /* single-row target step: log->tp_step, else the baseline's decode step */
    double tp_verify;     /* (gamma + 1)-row verify pass: log->tp_verify, else the mean t_verify of the
                           * blocks that verified gamma drafts */
    double est_tabed;     /* TABED eq. 1: tau / (gamma * tq / tp + 1); 0 when tq or tp unknown */
    double est_tabed_cpu; /* tau / (gamma * tq / tp + tp_verify / tp); 0 when unknown */
    bool has_baseline;
    double base_tok_s_decode, base_tok_s_total;
    double speedup_decode; /* (baseline t_decode / its tokens) / (t_decode / tokens) */
    double speedup_total;  /* same with t_total */
} vs_spec_stats;

/* Pure aggregation: statistics of a speculative run, optionally against a target-only run of the same
 * request (baseline may be NULL). */
void vs_spec_stats_compute(const vs_spec_log *log, const vs_spec_log *baseline, vs_spec_stats *out);
/* Human-readable report (several lines) into f. */
void vs_spec_stats_print(const vs_spec_stats *s, FILE *f);
/* The statistics as one JSON object value (at the writer's current position: after a key, in an
 * array, or at the top). Unknown quantities are 0; n-alpha entries without data are null. */
void vs_spec_stats_json(const vs_spec_stats *s, vs_json_writer *w);

/* ------------------------------------------------------------------------------------------------
 * The engine */

/* The target forward of a verify block: evaluates rows[0..n) into the engine's cache like vs_lm_forward
 * (the rows name the engine's sequence) and fills out. A batcher (batch.h) puts the blocks of several
 * engines that share one cache into one forward. */
typedef vs_status (*vs_spec_verify_fn)(void *ctx, vs_lm *lm, vs_kv *kv, vs_threadpool *tp, const vs_lm_row *rows,
                                       int n, const vs_lm_out *out, vs_error *err);

typedef struct vs_spec_config {
    int32_t n_ctx;           /* target cache rows; <= 0: the model's n_ctx_train (with kv: its n_ctx) */
    vs_type kv_type;         /* VS_TYPE_F32 (0 = F32) or VS_TYPE_F16 (ignored with kv) */
    int32_t n_batch;         /* prefill chunk (rows per forward); <= 0: 512 */
    vs_threadpool *tp;       /* borrowed; NULL = caller's thread */
    const vs_tokenizer *tok; /* borrowed, for end-of-generation ids; NULL = never stop at EOS */
    vs_kv *kv;               /* borrowed: a cache shared with other engines, this one using sequence seq;
                              * NULL: the engine's own cache of one sequence */
    int32_t seq;
    vs_spec_verify_fn verify; /* NULL: vs_lm_forward */
    void *verify_ctx;
    /* Called before each block of a drafter that wants no target features: the most tokens it may
     * propose for it (< 0: no limit beyond gamma). 0 verifies the pending row alone (a plain decoding
     * step; the drafter is not asked and sees the block's token in its commit). Lossless whatever it
     * returns. NULL: no limit. */
    int32_t (*draft_limit)(void *ctx);
    void *draft_limit_ctx;
} vs_spec_config;

typedef struct vs_spec vs_spec;

/* The target is borrowed (free it after the engine). */
vs_spec *vs_spec_new(vs_lm *target, const vs_spec_config *cfg, vs_error *err);
void vs_spec_free(vs_spec *s);
vs_kv *vs_spec_kv(vs_spec *s); /* the target cache (read it, do not resize it) */
int32_t vs_spec_n_ctx(const vs_spec *s);

/* Called after each block with the tokens it emitted; return false to stop the request. */
typedef bool (*vs_spec_token_fn)(void *ctx, const int32_t *tokens, int32_t n);

/* Runs one request. drafter may be NULL only when params->gamma == 0. log is reset and filled
 * (tokens, blocks, times); on error it holds what was generated before the error. */
vs_status vs_spec_generate(vs_spec *s, vs_spec_drafter *drafter, const vs_spec_prompt *prompt,
                           const vs_spec_params *params, vs_spec_token_fn on_tokens, void *cb_ctx,
                           vs_spec_log *log, vs_error *err);

/* Measures the target's forward time for n_rows rows appended at the end of the cache (then rolled
 * back), median of reps runs; for Tp (n_rows = 1) and the verify cost (gamma + 1). The cache must have
 * room for n_rows more rows. */
vs_status vs_spec_time_target(vs_spec *s, int32_t n_rows, int32_t reps, double *seconds, vs_error *err);

#endif
