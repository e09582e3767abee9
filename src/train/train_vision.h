/* train_vision: supervised pretraining of the ViT tower on labels the generated world already knows.
 * Owns: fresh labelled batches (every step draws new scenes from the world's generators, renders
 * them, preprocesses them as inference does and labels every patch), the label heads (small linear
 * classifiers on the tower's patch features and on their mean, trained with the tower and discarded
 * after), the fixed held-out set and its accuracies, and the resumable run behind `vlmspec train
 * vision`: checkpoints of tower + heads + AdamW state + RNG, loss curve, progress line, export of the
 * tower as an mmproj. With `probe` the tower is frozen and only the heads learn: a linear probe of
 * what a given tower's features encode. docs/target.md describes the recipe. */
#ifndef VS_TRAIN_VISION_H
#define VS_TRAIN_VISION_H

#include "image.h"
#include "train_model.h"
#include "train_optim.h"

/* The heads: seven per patch (on each patch feature), four per image (on the mean of its patches).
 * Class 0 of a patch head is "nothing of this kind here". The two position heads label every patch with
 * its row / column in eighths of the image (classes 1-8), so the tower keeps where each patch is in the
 * rows the LM reads (the world's answers name cells; content heads alone do not ask for position). */
typedef enum vs_vision_head {
    VS_VHEAD_SHAPE = 0, /* 9 classes: none, the 8 shapes */
    VS_VHEAD_COLOR,     /* 10: none, the 9 colours (objects, text lines, bars) */
    VS_VHEAD_SIZE,      /* 3: none, small, large */
    VS_VHEAD_CHAR,      /* 37: none, A-Z, 0-9 (glyph text, chart labels and values) */
    VS_VHEAD_VALUE,     /* 10: none, a bar's value 1-9 */
    VS_VHEAD_ROW,       /* 9: (unused), the patch's row in eighths of the image, top first */
    VS_VHEAD_COLUMN,    /* 9: (unused), the patch's column in eighths, left first */
    VS_VHEAD_KIND,      /* 3: shapes, glyph text, chart */
    VS_VHEAD_OBJECTS,   /* 9: objects in a shapes scene, 0..8 */
    VS_VHEAD_ITEMS,     /* 7: text lines or bars, 0..6 */
    VS_VHEAD_BG,        /* 4: the background colour */
    VS_VHEAD_N
} vs_vision_head;
#define VS_VHEAD_N_PATCH 7
const char *vs_vision_head_name(int h);
int vs_vision_head_classes(int h);

/* A labelled batch of images. */
typedef struct vs_vision_batch {
    int n, cap, S, P, NP;
    float *pixels;              /* (n, 3, S, S) preprocessed */
    int32_t *label[VS_VHEAD_N]; /* patch heads (n * NP), image heads (n) */
} vs_vision_batch;
vs_status vs_vision_batch_alloc(vs_vision_batch *b, int cap, int S, int patch, vs_error *err);
void vs_vision_batch_free(vs_vision_batch *b);
/* n fresh scenes drawn from r (shapes half the time, glyph text and charts a quarter each), rendered
 * at b->S, preprocessed with pp (what inference computes) and labelled. */
vs_status vs_vision_batch_fill(vs_vision_batch *b, vs_rng *r, const vs_preproc *pp, int n, vs_error *err);
/* Images [i0, i0 + n) of b as a batch of its own (pointers into b, nothing allocated). */
vs_vision_batch vs_vision_batch_slice(const vs_vision_batch *b, int i0, int n);

/* Correct and counted predictions per head; patch heads count labelled patches (class > 0) only. */
typedef struct vs_vision_counts {
    int64_t correct[VS_VHEAD_N], total[VS_VHEAD_N];
} vs_vision_counts;

typedef struct vs_vision_heads vs_vision_heads;
vs_vision_heads *vs_vision_heads_new(int width, int NP, int max_images, vs_error *err);
void vs_vision_heads_free(vs_vision_heads *h);
vs_train_params *vs_vision_heads_params(vs_vision_heads *h);
/* Weights N(0, 0.02^2), biases 0. */
void vs_vision_heads_init(vs_vision_heads *h, uint64_t seed);
/* b->n <= max_images and b's grid = NP (else NaN). loss = sum over the heads of the mean cross-entropy (patch heads over all n * NP patches, image
 * heads over the n images) of the heads applied to feat (n * NP, width). counts (may be NULL)
 * accumulate the argmax predictions. Keeps what the backward needs. */
double vs_vision_heads_forward(vs_vision_heads *h, vs_threadpool *tp, const float *feat, const vs_vision_batch *b,
                               vs_vision_counts *counts);
/* Backward of the last forward: the heads' gradients accumulate, dfeat (n * NP, width) is overwritten
 * with d(loss)/d(feat). */
void vs_vision_heads_backward(vs_vision_heads *h, vs_threadpool *tp, const float *feat, const vs_vision_batch *b,
                              float *dfeat);

/* ---------------------------------------------------------------------------------------------- */
/* The run: DIR/ckpt/ckpt.gguf (+ ckpt-prev.gguf), DIR/run.json, DIR/loss.csv + loss.svg, DIR/eval.csv
 * (held-out accuracy per head at every evaluation), and at the end DIR/vision-mmproj.gguf (F32: the
 * trained tower with a randomly initialised projector) and DIR/vision.json. */
typedef struct vs_train_vision_opts {
    const char *out;         /* run directory */
    const char *init_mmproj; /* start from this mmproj's tower (NULL: random initialisation) */
    vs_train_vlm_config cfg; /* the tower's shape; width = the projector's output width */
    bool probe;              /* the tower stays frozen, only the heads learn (no export) */
    int64_t steps, seed;
    int batch, threads, ckpt_every, chunk_steps, eval_every, eval_images;
    double lr, lr_min, warmup, wd, clip, beta2, time_limit;
    bool resume, quiet;
} vs_train_vision_opts;
void vs_train_vision_opts_default(vs_train_vision_opts *o);
/* The held-out accuracies of the last evaluation (fraction per head). */
typedef struct vs_train_vision_result {
    int64_t step;
    double loss, acc[VS_VHEAD_N];
    bool finished; /* all steps done (not stopped by a chunk or time limit) */
} vs_train_vision_result;
vs_status vs_train_vision_run(const vs_train_vision_opts *o, vs_train_vision_result *res, vs_error *err);

#endif
