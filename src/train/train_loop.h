/* train_loop: one resumable training run - the loop that `vlmspec train target` and every phase of
 * `vlmspec train drafter` run, and its directory.
 * Owns: the run directory's files (DIR/ckpt/ckpt.gguf and ckpt-prev.gguf, DIR/run.json with the run's
 * settings, DIR/loss.csv and loss.svg, DIR/threads, gemm and attention: what the run started with), the
 * checkpoint rotation, resuming (the newest readable checkpoint, the data reader's position and RNG, the
 * loss curve up to it), and the step loop: gradient accumulation, clipping, AdamW with warm-up + cosine,
 * a frozen-then-warming vision tower, the progress line, chunk and time limits that stop with a
 * checkpoint. A run stopped and resumed gives bit-identical weights to one that was not (same threads
 * and products; tests/test_train_loop.c). The model, the data and the schedule are the caller's.
 *
 * Use: fill cmd, label, title, o and total; vs_train_loop_dirs; then either (resume) check the settings,
 * vs_train_loop_load and vs_train_loop_restore, or (fresh) write the settings, set L->m and L->data and
 * vs_train_loop_fresh_state; then vs_train_loop_run; vs_train_loop_free. */
#ifndef VS_TRAIN_LOOP_H
#define VS_TRAIN_LOOP_H

#include "json.h"
#include "threadpool.h"
#include "train_data.h"
#include "train_model.h"
#include "train_optim.h"

/* What a training run is told besides its data and model (target, every drafter phase). */
typedef struct vs_train_sched {
    int64_t steps; /* 0: from epochs */
    double epochs;
    int batch, accum, seq, bucket, threads, ckpt_every, chunk_steps;
    double lr, lr_min, warmup, wd, clip, beta2, time_limit;
    int64_t seed;
    int64_t freeze_vision; /* target: the vision tower is frozen for steps < this (0: never) */
    int64_t freeze_lm;     /* target: the LM is frozen for steps < this (0: never): the projector aligns
                            * to a fixed LM first, LLaVA's stage 1 */
    int64_t freeze_projector; /* target: the projector is frozen for steps < this (0: never) */
    int64_t vision_warmup; /* target: the unfrozen tower's lr ramps up linearly over this many steps */
    double vision_lr;      /* target: the tower's lr as a multiple of the schedule's (1: the same) */
    double norm_cap;        /* target: cap image rows at this multiple of the token embeddings' mean norm (0: off) */
    double norm_cap_weight; /* the cap's weight in the step's loss */
    double ground;          /* target: weight of the attention grounding term in the step's loss (0: off) */
    int ground_layer;       /* target: the LM layer whose head 0 is grounded */
    vs_train_ground_mode ground_mode; /* target: where the term's gradient goes (train_model.h) */
    const char *gemm;      /* vs_train_set_gemm name, NULL = default */
    const char *attention; /* vs_train_set_attention name, NULL = auto */
    bool resume, quiet;
} vs_train_sched;

/* One resumable training run in a directory: DIR/ckpt/ckpt.gguf (+ ckpt-prev.gguf), DIR/run.json,
 * DIR/loss.csv, DIR/loss.svg. The caller sets the model, the data, the schedule and the paths. */
typedef struct vs_train_loop {
    const char *cmd;   /* for messages ("train target") */
    const char *label; /* progress label */
    const char *title; /* SVG title */
    char dir[1100], ckpt[1200], prev[1200], csv[1200], svg[1200], runjson[1200];
    vs_train_vlm *m;
    vs_train_data *data;
    vs_threadpool *tp;
    vs_train_curve curve;
    vs_train_state st;
    int64_t total;
    vs_train_sched o;
    double deadline; /* vs_time_now() after which the run stops with a checkpoint (0: none) */
    /* this run */
    int64_t steps_run;
    double rows_run, padded_run, run_s;
} vs_train_loop;

/* DIR and DIR/ckpt (created) and the file names under them. */
vs_status vs_train_loop_dirs(vs_train_loop *L, const char *dir, vs_error *err);
bool vs_train_loop_has_ckpt(const vs_train_loop *L);
/* Before writing a new checkpoint: the current one becomes ckpt-prev (nothing when there is none). */
vs_status vs_train_loop_rotate(const vs_train_loop *L, vs_error *err);
/* run.json must hold exactly `settings` (a resumed or reused run repeats its settings). */
vs_status vs_train_loop_check_settings(const vs_train_loop *L, const char *settings, vs_error *err);
/* The newest readable checkpoint of a run of any model: load(ctx, path, other, err) is called for L->ckpt
 * and, when that fails for another reason than holding another model (*other set by load), for
 * L->prev. Errors are wrapped with "--resume". */
typedef vs_status (*vs_train_ckpt_load_fn)(void *ctx, const char *path, bool *other, vs_error *err);
vs_status vs_train_loop_load_newest(const vs_train_loop *L, vs_train_ckpt_load_fn load, void *ctx, vs_error *err);
/* The loss curve of L->csv up to the loaded checkpoint (later points belong to steps that will be redone). */
vs_status vs_train_loop_restore_curve(vs_train_loop *L, vs_error *err);
/* L->curve as L->csv and L->svg (titled L->title). */
vs_status vs_train_loop_write_curve(const vs_train_loop *L, vs_error *err);
/* Loads the newest readable checkpoint (ckpt, else ckpt-prev) into L->m and L->st. It must hold the
 * run's model (*want; want_what says who says so): a checkpoint of another model is an error, not a
 * reason to fall back to ckpt-prev (only a damaged or unreadable one is). */
vs_status vs_train_loop_load(vs_train_loop *L, const vs_train_vlm_config *want, const char *want_what, int max_B,
                             int max_T, int max_I, vs_error *err);
/* After vs_train_loop_load (and with L->data set): the data position and the loss curve up to the
 * checkpoint. */
vs_status vs_train_loop_restore(vs_train_loop *L, vs_error *err);
/* A fresh run's state: step 0, the data reader's initial RNG. */
void vs_train_loop_fresh_state(vs_train_loop *L);
/* Trains from L->st.step to L->total, or until a chunk / time limit (with a checkpoint). */
vs_status vs_train_loop_run(vs_train_loop *L, vs_error *err);
void vs_train_loop_free(vs_train_loop *L); /* the model, the data and the curve; the pool stays the caller's */

/* Loads checkpoint `path` for a run whose model is *want. A readable file that holds another model is
 * refused before anything is allocated (*other = true; VS_ERR_INVALID naming the checkpoint, the field
 * and both values); other failures are vs_train_vlm_load's. */
vs_train_vlm *vs_train_load_for_run(const char *path, const vs_train_vlm_config *want, const char *want_what,
                                    int max_B, int max_T, int max_I, vs_train_state *st, bool *other,
                                    vs_error *err);
/* A run's evaluation log (e.g. DIR/eval.csv): a header line, then one line per evaluation that starts
 * with its step. vs_train_evals_read sets *text (vs_malloc'd) to the header and, when keep and the file
 * exists, the file's lines whose step <= upto (a resumed run drops evaluations after its checkpoint);
 * *last (may be NULL) points at the start of the last kept line inside *text, or is NULL. */
vs_status vs_train_evals_read(const char *path, const char *header, bool keep, int64_t upto, char **text,
                              const char **last, vs_error *err);
/* Writes w's document to path (vs_train_write_text) and frees w. */
vs_status vs_train_write_json(const char *path, vs_json_writer *w, vs_error *err);
/* Appends line (without a newline) to *text and rewrites path with it. */
vs_status vs_train_evals_append(const char *path, char **text, const char *line, vs_error *err);
/* Mean loss of the last n curve points. */
double vs_train_curve_recent(const vs_train_curve *c, int64_t n);
/* mkdir that accepts an existing directory; a text file written safely (outfile.h) with a final newline. */
vs_status vs_train_mkdir(const char *path, vs_error *err);
vs_status vs_train_write_text(const char *path, const char *text, vs_error *err);

#endif
