/* analyze: how closely drafters follow a target VLM, token by token (MASSV sec. 4, fig. 4;
 * docs/algorithms.md, 'Drafting inputs' and 'MASSV drafter').
 * Owns: the TVD analysis - the target's greedy answers to the world's test prompts (eval.h's answerer,
 * the prompts of vs_eval_prompt), teacher forcing of prompt + answer through the target and through
 * every drafter (each with its own view of the images), the per-position total variation distance
 * TVD(p, q) = 1/2 sum_x |p(x) - q(x)| between the target's and a drafter's next-token distributions
 * (softmax at temperature 1, no truncation, computed in double), the token records, and their
 * summaries (count, mean, median, share below 0.1 / above 0.5), text histogram, JSON and SVG forms.
 *
 * Positions analysed for one turn: every token of the target's greedy answer, plus the
 * end-of-generation token when the answer ended by itself (the drafter has to propose it too). The
 * distribution at a position is the one the model gives after the prompt and the answer tokens before
 * it, exactly what a speculative engine compares when it verifies that position.
 *
 * Drafter views (docs/algorithms.md, 'Drafting inputs'):
 *   M  each image -> the drafter's own projector over ViT features: its mmproj's own tower when the
 *      file has one (it may differ from the target's), else the target's tower (a projector-only
 *      file, checked with vs_vision_check_projector);
 *   T  each image marker -> the tokens of "\n" (without SentencePiece's space-prefix token); no image.
 * A drafter without an mmproj always gets T; opts.text_only gives T to every drafter. Text pieces are
 * tokenised exactly as mmprompt.h does for the target (the same pieces, the same BOS), so on a sample
 * without images every view sees the same tokens as the target.
 *
 * Requirements (VS_ERR_INVALID, the message names the drafter and the files): every drafter has the
 * target's vocabulary size and a tokenizer that vs_tokenizer_compatible accepts against the target's;
 * an mmproj projects to its LM's width. A prompt + answer longer than a drafter's context is an error
 * naming the sample.
 *
 * Second turns: by default only first turns are analysed (the target still answers second turns
 * with nothing, so the eval counts of second turns are meaningless then). With second_turns, a
 * second turn is prompted with the target's own first answer, as eval and the benchmark do. */
#ifndef VS_ANALYZE_H
#define VS_ANALYZE_H

#include "eval.h"
#include "json.h"
#include "lm.h"
#include "plot.h"
#include "tokenizer.h"
#include "vision.h"
#include "world.h"

/* TVD between softmax(zp) and softmax(zq) over n logits, in double. In [0, 1]. */
double vs_tvd_logits(const float *zp, const float *zq, int64_t n);

typedef enum vs_tvd_view {
    VS_TVD_VIEW_M = 0, /* images through the drafter's own projector */
    VS_TVD_VIEW_T = 1, /* images replaced by "\n" */
} vs_tvd_view;
const char *vs_tvd_view_name(vs_tvd_view v); /* "M" / "T" */

typedef struct vs_tvd_drafter {
    const char *name;    /* label in tables, plots and JSON (copied) */
    vs_lm *lm;           /* borrowed; may be the target itself */
    const vs_mmproj *mm; /* borrowed; NULL: text-only */
} vs_tvd_drafter;

/* Progress after each analysed turn. */
typedef struct vs_tvd_progress {
    const vs_world_sample *sample;
    int turn;
    int64_t positions;    /* positions of this turn */
    int64_t turns, total; /* turns analysed so far, and positions so far */
} vs_tvd_progress;

typedef struct vs_tvd_opts {
    int64_t limit;     /* samples per suite, the first ones in file order; <= 0: all */
    uint32_t suites;   /* VS_WORLD_SUITE_BIT mask; 0: all */
    bool text_only;    /* T view for every drafter (default M: drafters with an mmproj see images) */
    bool second_turns; /* analyse second turns too (default: first turns only) */
    int max_tokens;    /* per target answer; <= 0: 256 */
    int n_batch;       /* rows per forward in teacher forcing; <= 0: 256 */
    void (*on_turn)(void *ctx, const vs_tvd_progress *p); /* or NULL */
    void *on_turn_ctx;
} vs_tvd_opts;

/* One analysed position (the same for every drafter). */
typedef struct vs_tvd_pos {
    int64_t sample; /* index into the dataset's samples */
    int8_t turn;
    int8_t suite;  /* vs_world_suite */
    bool eog;      /* the end-of-generation position */
    int32_t index; /* position within the answer (0 = first answer token) */
    int32_t token; /* the target's greedy token there (an end-of-generation id when eog) */
} vs_tvd_pos;

typedef struct vs_tvd_result {
    int n_drafters;
    char **names;        /* (n_drafters) */
    vs_tvd_view *views;  /* (n_drafters) the view each drafter got */
    int64_t n;           /* positions */
    vs_tvd_pos *pos;     /* (n) */
    double **tvd;        /* (n_drafters) arrays of (n): tvd[k][i] for drafter k at position i */
    int64_t turns;       /* turns analysed */
    vs_eval_result eval; /* the target's answers scored by the world's checker (first turns are what
                            counts unless second_turns) */
    int64_t cap;         /* internal: allocated positions */
} vs_tvd_result;

/* Runs the analysis over the test samples of d. target, target_mm, tok and tp are borrowed; target_mm
 * needs a vision tower projecting to the target's width; tok is the target's tokenizer. *res is
 * filled (free with vs_tvd_result_free, also after an error). */
vs_status vs_tvd_run(vs_lm *target, const vs_mmproj *target_mm, const vs_tokenizer *tok, vs_threadpool *tp,
                     const vs_tvd_drafter *drafters, int n_drafters, const vs_world_dataset *d,
                     const vs_tvd_opts *o, vs_tvd_result *res, vs_error *err);
void vs_tvd_result_free(vs_tvd_result *r);

/* Summary of drafter k over the positions whose suite is in mask (0: all). */
typedef struct vs_tvd_stats {
    int64_t n;
    double mean, median; /* median: the mean of the two middle values for even n; 0 when n = 0 */
    double frac_low;     /* share with TVD < 0.1 */
    double frac_high;    /* share with TVD > 0.5 */
    double max;
} vs_tvd_stats;
void vs_tvd_stats_of(const vs_tvd_result *r, int k, uint32_t mask, vs_tvd_stats *s);
/* Counts of drafter k's values (suite mask as above) in n_bins equal bins over [0, 1] (bin i is
 * [i/n, (i+1)/n), the last one closed, like vs_plot_bins). counts has n_bins entries. */
void vs_tvd_histogram(const vs_tvd_result *r, int k, uint32_t mask, int n_bins, int64_t *counts);

/* Plain-text report (vs_malloc'd): a table with one line per drafter and suite (count, mean, median,
 * < 0.1, > 0.5) plus each drafter's total, then each drafter's histogram with n_bins bars. */
char *vs_tvd_report(const vs_tvd_result *r, int n_bins);
/* {"positions":..,"turns":..,"bins":n,"drafters":[{"name":..,"view":"M","total":{"count":..,"mean":..,
 *  "median":..,"frac_below_0.1":..,"frac_above_0.5":..,"max":..},"suites":{"vqa":{...},...},
 *  "histogram":[counts]},...]} */
void vs_tvd_json(const vs_tvd_result *r, int n_bins, vs_json_writer *w);
/* A VS_PLOT_HIST chart (MASSV fig. 4): one series per drafter, n_bins bins over [0, 1], shares of
 * tokens. title may be NULL (a default). The caller frees the plot. */
vs_plot *vs_tvd_plot(const vs_tvd_result *r, int n_bins, const char *title, vs_error *err);

#endif
