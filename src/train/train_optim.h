/* train_optim: what turns gradients into training, for any model built from train.h's ops.
 * Owns: the parameter set (a table of named tensors laid over ONE buffer each of parameters,
 * gradients and AdamW moments, llm.c style, with parameter groups that can be frozen), AdamW with
 * decoupled weight decay, the warmup + cosine learning-rate schedule, gradient clipping by global
 * norm, checkpoints (parameters + optimizer state + step + data position + RNG state in one GGUF
 * file), the progress line, and the loss curve (CSV + a hand-written SVG plot).
 *
 * Gradient accumulation: the ops' backwards accumulate (+=), so a step is
 *   zero_grad; k x (forward, backward) with the loss normalised over the k micro-batches;
 *   clip; adamw_step.
 * Frozen groups: their tensors get no AdamW update (no decay, moments untouched), do not count in
 * the gradient norm, and models skip computing their gradients. */
#ifndef VS_TRAIN_OPTIM_H
#define VS_TRAIN_OPTIM_H

#include "gguf.h"
#include "threadpool.h"

#define VS_TRAIN_MAX_GROUPS 8
#define VS_TRAIN_MAX_DIMS 4

/* One named tensor of a parameter set. shape is row-major (shape[ndim-1] varies fastest). */
typedef struct vs_train_tensor {
    char name[48];
    int ndim;
    int64_t shape[VS_TRAIN_MAX_DIMS];
    int group;     /* parameter group, < VS_TRAIN_MAX_GROUPS */
    bool decay;    /* AdamW weight decay applies (matrices and embeddings; not norms or biases) */
    size_t offset; /* into the set's buffers (set by vs_train_params_init) */
    size_t numel;
} vs_train_tensor;

typedef struct vs_train_params {
    int n_tensors;
    vs_train_tensor *tensors;            /* (n_tensors) */
    size_t n;                            /* values in all tensors */
    float *data;                         /* (n) parameters */
    float *grad;                         /* (n) gradients (accumulated by backwards) */
    float *m, *v;                        /* (n) AdamW first and second moments */
    int64_t t;                           /* AdamW updates applied so far (bias correction) */
    bool frozen[VS_TRAIN_MAX_GROUPS];    /* group g is not trained */
} vs_train_params;

/* A table entry from a GGUF-style tensor (ne[0] the fastest dimension, nd of ne used): 2-D tensors become
 * row-major (ne[1] outputs, ne[0] inputs) with weight decay, 1-D ones (norms, gates) without; group 0. */
void vs_train_tensor_from_ne(vs_train_tensor *t, const char *name, const int64_t ne[2], int nd);
/* Bump allocation from a scratch buffer: n floats at *cur, *cur advanced to the next 64-byte boundary. */
static inline float *vs_train_take(float **cur, size_t n) {
    float *p = *cur;
    *cur += (n + 15) & ~(size_t)15;
    return p;
}

/* Copies the table, lays the tensors out in order and allocates the four buffers (zeroed). */
vs_status vs_train_params_init(vs_train_params *p, const vs_train_tensor *tensors, int n_tensors,
                               vs_error *err);
void vs_train_params_free(vs_train_params *p);
/* Tensor by name (NULL if absent) and the address of its values in a buffer of the set. */
const vs_train_tensor *vs_train_params_find(const vs_train_params *p, const char *name);
static inline float *vs_train_params_at(float *buf, const vs_train_tensor *t) { return buf + t->offset; }
void vs_train_params_zero_grad(vs_train_params *p);
/* Global L2 norm of the gradients of the non-frozen tensors (accumulated in double). */
double vs_train_grad_norm(const vs_train_params *p);
/* Clipping by global norm, like torch.nn.utils.clip_grad_norm_: when max_norm > 0, scales the
 * non-frozen gradients by min(1, max_norm / (norm + 1e-6)). Returns the norm before clipping. */
double vs_train_clip_grad(vs_train_params *p, float max_norm);

/* AdamW (Loshchilov & Hutter; torch.optim.AdamW's arithmetic): t = t + 1,
 *   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
 *   w = w - lr wd w (decayed tensors only);  w = w - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps). */
typedef struct vs_adamw {
    float beta1, beta2, eps, weight_decay;
} vs_adamw;
void vs_adamw_default(vs_adamw *o); /* 0.9, 0.95, 1e-8, 0.1 */
void vs_train_adamw_step(vs_train_params *p, vs_threadpool *tp, const vs_adamw *o, float lr);
/* The same with group g's learning rate lr * group_lr_mul[g] (NULL: 1 for every group; a multiplier of 1
 * gives exactly vs_train_adamw_step's bits). For warming up a group that was frozen: its moments start
 * at zero while the step count t (bias correction) is already large. */
void vs_train_adamw_step_groups(vs_train_params *p, vs_threadpool *tp, const vs_adamw *o, float lr,
                                const float *group_lr_mul);

/* Learning rate at step s (0-based): linear warmup lr_max (s + 1) / warmup for s < warmup, then a
 * cosine from lr_max down to lr_min at s = total - 1 (lr_min after that). */
typedef struct vs_lr_schedule {
    float lr_max, lr_min;
    int64_t warmup, total;
} vs_lr_schedule;
float vs_train_lr(const vs_lr_schedule *s, int64_t step);

/* ---------------------------------------------------------------------------------------------- */
/* Checkpoints: one GGUF file with the caller's keys (model config), "train.*" keys for the state
 * below, and per tensor "p.<name>", "m.<name>", "v.<name>" (F32). Loading checks every tensor's
 * presence, type and shape against the set. */
typedef struct vs_train_state {
    int64_t step;      /* optimiser steps completed */
    uint64_t data_pos; /* the data reader's position (e.g. samples consumed) */
    uint64_t epoch;    /* passes over the data completed */
    uint64_t tokens;   /* training tokens seen */
    double elapsed_s;  /* training wall time so far */
    vs_rng rng;        /* the trainer's RNG (shuffling, noise), captured at the checkpoint */
} vs_train_state;

/* Adds the state and the set to w (which may already hold config keys) and writes path. */
vs_status vs_train_checkpoint_write(vs_gguf_writer *w, const vs_train_params *p, const vs_train_state *st,
                                    const char *path, vs_error *err);
/* Reads the state and the set's values (data, m, v, t, frozen groups) from an open checkpoint. */
vs_status vs_train_checkpoint_read(const vs_gguf *g, vs_train_params *p, vs_train_state *st,
                                   vs_error *err);
/* A second parameter set in the same checkpoint (e.g. training-only heads beside a model): tensors
 * "p.<tag>.<name>", "m.<tag>.<name>", "v.<tag>.<name>" and its AdamW count "train.<tag>.adam_t". Add
 * before vs_train_checkpoint_write; read after opening the file. */
vs_status vs_train_checkpoint_add_set(vs_gguf_writer *w, const vs_train_params *p, const char *tag,
                                      vs_error *err);
vs_status vs_train_checkpoint_read_set(const vs_gguf *g, vs_train_params *p, const char *tag, vs_error *err);

/* ---------------------------------------------------------------------------------------------- */
/* Progress and loss curves */

/* One progress line (via common.h's vs_progress: redrawn on a TTY, every few seconds otherwise):
 * "label step/total loss L tok/s R lr X elapsed mm:ss ETA mm:ss". */
void vs_train_progress(vs_progress *pr, int64_t step, double loss, double tok_per_s, float lr);

typedef struct vs_train_curve_point {
    int64_t step;
    float loss, lr;
    double tokens, time_s;
} vs_train_curve_point;

typedef struct vs_train_curve {
    int64_t n, cap;
    vs_train_curve_point *pt; /* (n) */
} vs_train_curve;

vs_status vs_train_curve_add(vs_train_curve *c, vs_train_curve_point p, vs_error *err);
void vs_train_curve_free(vs_train_curve *c);
/* CSV with header "step,loss,lr,tokens,time_s". read_csv appends the file's rows (a resumed run
 * keeps its curve); a missing file is not an error when missing_ok. */
vs_status vs_train_curve_write_csv(const vs_train_curve *c, const char *path, vs_error *err);
vs_status vs_train_curve_read_csv(vs_train_curve *c, const char *path, bool missing_ok, vs_error *err);
/* SVG line plot (800 x 480) of loss against step: the raw points, their moving average over `smooth`
 * points (<= 1: none), axes with ticks, a log-scaled y axis when log_y. */
vs_status vs_train_curve_write_svg(const vs_train_curve *c, const char *path, const char *title,
                                   int smooth, bool log_y, vs_error *err);

#endif
