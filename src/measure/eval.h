/* eval: scoring a VLM on the generated world's test split with the world's checker.
 * Owns: the evaluation loop (every turn of every selected sample, in file order; prompts in the
 * vicuna form of world.h), the per-suite counts (accuracy by vs_world_check, first and second
 * turns apart, mean answer length in generated tokens, answers cut before end-of-generation), their
 * table and JSON forms, and a greedy answerer over vlmspec's inference engine (vs_lm + an mmproj
 * through mmprompt.h, the same layout the trainer trains on: train_data.h).
 *
 * History of second turns: by default a second turn is prompted with the MODEL'S OWN first answer
 * (what a user of the model, and the speculative-decoding benchmark, sees):
 *   "USER: {user 0} ASSISTANT: {model's answer 0}</s>USER: {user 1} ASSISTANT:"
 * With reference_history the reference first answer is used instead (teacher forcing), which scores
 * the second turn in isolation. Either way the checker's expected answer of a follow-up question is
 * computed from the scenes (the TRUE first answer), so a wrong first answer usually makes its
 * follow-up wrong too. A model answer is put into the history with one leading space removed (the
 * prompt adds it) and any "<image>" text taken out (it would count as an image marker).
 *
 * The answerer is a callback, so the loop and its counting are tested with oracles, and other
 * decoders (speculative ones) can be scored by the same code. */
#ifndef VS_EVAL_H
#define VS_EVAL_H

#include "json.h"
#include "session.h"
#include "lm.h"
#include "tokenizer.h"
#include "vision.h"
#include "world.h"

/* Answers the conversation `prompt` (ending in "ASSISTANT:") of sample s, whose first n_images images
 * are the ones its markers refer to. *answer is vs_malloc'd text; *n_tokens the tokens generated
 * (end-of-generation excluded); *eos whether generation ended by itself. */
typedef vs_status (*vs_eval_answer_fn)(void *ctx, const vs_world_sample *s, const char *prompt, int n_images,
                                       char **answer, int64_t *n_tokens, bool *eos, vs_error *err);

/* One scored turn, reported to vs_eval_opts.on_turn. */
typedef struct vs_eval_turn {
    const vs_world_sample *sample;
    int turn;
    const char *prompt; /* the conversation fed */
    const char *answer; /* the answer text */
    int64_t n_tokens;
    bool eos;
    vs_world_verdict verdict;
    double seconds; /* answering time */
} vs_eval_turn;

/* Image ablation: does the model's answer depend on its images? A model that looks at them must fall
 * towards chance under either. Samples without images are evaluated unchanged. */
typedef enum vs_eval_ablate {
    VS_EVAL_IMAGES = 0,     /* the sample's own images (no ablation) */
    VS_EVAL_IMAGES_SWAP,    /* every sample gets the images of the next sample in file order of the same
                             * suite with as many images (cyclic, over the whole split); the question,
                             * the history and the expected answer stay the sample's own */
    VS_EVAL_IMAGES_NONE,    /* the "<image>" markers are taken out of the prompt: no image rows at all */
    VS_EVAL_IMAGES_WORDS,   /* every picture in words (vs_world_prompt_words), no image rows: what an LM
                             * trained with `train target --images-as-text` reads */
} vs_eval_ablate;

typedef struct vs_eval_opts {
    int64_t limit;          /* samples per suite, the first ones in file order; <= 0: all */
    uint32_t suites;        /* VS_WORLD_SUITE_BIT mask; 0: all */
    bool reference_history; /* second turns see the reference first answer (default: the model's) */
    vs_eval_ablate ablate;  /* image ablation (default none) */
    void (*on_turn)(void *ctx, const vs_eval_turn *t); /* after each turn, or NULL */
    void *on_turn_ctx;
} vs_eval_opts;

typedef struct vs_eval_counts {
    int64_t samples;
    int64_t turns, correct; /* all turns */
    int64_t first_turns, first_correct;
    int64_t second_turns, second_correct;
    int64_t answer_tokens; /* generated tokens over all turns */
    int64_t no_eos;        /* answers that hit the token limit or the context */
    double seconds;
} vs_eval_counts;

typedef struct vs_eval_result {
    vs_eval_counts suite[VS_WORLD_N_SUITES];
    vs_eval_counts total;
    /* the same counts per suite and kind of question (the turn's query type: count, color, position,
     * exists, read_line, bar_value, ...), which says what a model can and cannot read in its images */
    vs_eval_counts question[VS_WORLD_N_SUITES][VS_WORLD_N_QUERY_TYPES];
} vs_eval_result;

static inline double vs_eval_accuracy(const vs_eval_counts *c) {
    return c->turns ? (double)c->correct / (double)c->turns : 0.0;
}
static inline double vs_eval_mean_tokens(const vs_eval_counts *c) {
    return c->turns ? (double)c->answer_tokens / (double)c->turns : 0.0;
}

/* Runs every turn of the selected samples of d through fn and scores it. */
vs_status vs_eval_run(const vs_world_dataset *d, const vs_eval_opts *o, vs_eval_answer_fn fn, void *fn_ctx,
                      vs_eval_result *res, vs_error *err);

/* The prompt of turn t with the given earlier answers (NULL entries: the reference), vs_malloc'd.
 * Model answers are cleaned as described at the top. */
char *vs_eval_prompt(const vs_world_sample *s, int t, const char *const *answers);

/* A plain-text table: one line per suite with samples, turns, accuracy (all / first / second
 * turns), mean answer tokens, cut answers; then the total. vs_malloc'd. */
char *vs_eval_table(const vs_eval_result *r);
/* One line per suite and kind of question that occurred: turns, accuracy (all / first / second turns),
 * mean answer tokens. vs_malloc'd. */
char *vs_eval_question_table(const vs_eval_result *r);
/* {"suites":{"vqa":{"samples":..,"turns":..,"correct":..,"accuracy":..,"first_accuracy":..,
 *  "second_accuracy":..,"mean_answer_tokens":..,"no_eos":..,"seconds":..},...},"total":{...},
 *  "questions":{"vqa":{"count":{...the same fields...},...},...}} */
void vs_eval_json(const vs_eval_result *r, vs_json_writer *w);

/* ---------------------------------------------------------------------------------------------- */
/* Greedy answerer over vs_lm + mmproj: target-only requests through a session (src/spec/session.h) over
 * the caller's models. Images are encoded once (the session's image cache); a later turn reuses the KV rows
 * its prompt shares with what the cache holds (the first turn's prompt and answer), so it prefills only the
 * new rows. Generation is greedy (the lowest id among equal maxima; or sampled, see vs_eval_lm_opts), stops
 * at end-of-generation, after max_tokens tokens, or when the context is full. */
typedef struct vs_eval_lm vs_eval_lm;

typedef struct vs_eval_lm_opts {
    int max_tokens; /* per answer; <= 0: 256 */
    int n_ctx;      /* KV rows; <= 0: the model's context length */
    bool kv_f32;    /* F32 KV cache (default F16, as `vlmspec generate`) */
    bool no_reuse;  /* prefill every prompt from scratch (tests) */
    /* sampling instead of greedy decoding (e.g. self-distillation data): temperature > 0 draws each
     * token with sample.h (temperature, then top-p) from a sampler seeded with seed; 0: greedy */
    float temperature;
    float top_p; /* in (0, 1]; 0 is read as 1 (off) */
    uint64_t seed;
} vs_eval_lm_opts;

/* lm, mm, tok and tp are borrowed. The mmproj needs a tower whose projector outputs the LM's width. */
vs_eval_lm *vs_eval_lm_new(vs_lm *lm, const vs_mmproj *mm, const vs_tokenizer *tok, vs_threadpool *tp,
                           const vs_eval_lm_opts *o, vs_error *err);
void vs_eval_lm_free(vs_eval_lm *e);
/* A vs_eval_answer_fn; ctx is the vs_eval_lm. */
vs_status vs_eval_lm_answer(void *ctx, const vs_world_sample *s, const char *prompt, int n_images,
                            char **answer, int64_t *n_tokens, bool *eos, vs_error *err);
/* Changes the sampling settings (see vs_eval_lm_opts) and restarts the answers' random streams: the k-th
 * answer after this call draws with seed + k * 0x9e3779b97f4a7c15 (the first with seed itself), so an answer
 * depends only on (prompt, settings, seed, k). VS_ERR_INVALID for bad values. */
vs_status vs_eval_lm_set_sampling(vs_eval_lm *e, float temperature, float top_p, uint64_t seed,
                                  vs_error *err);
/* The tokens of the last answer (end-of-generation excluded), valid until the next call. */
const int32_t *vs_eval_lm_last_tokens(const vs_eval_lm *e, int64_t *n);
/* Rows prefilled and rows reused from the cache, over all calls so far. */
void vs_eval_lm_counters(const vs_eval_lm *e, int64_t *prefilled, int64_t *reused, int64_t *decoded);

#endif
