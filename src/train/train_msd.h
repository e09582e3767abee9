/* train_msd: the MSD draft head in training form (docs/algorithms.md, 'MSD draft head'; the head file in
 * docs/formats.md), on train.h's ops.
 * Owns: the head's parameters (the ten tensors of a head file, names and shapes from draft_msd.h), its
 * activations and gradient scratch for one batch, the loss (SmoothL1 on the predicted feature plus 0.1 x
 * the soft cross-entropy between the target's next-token distribution and the head's, on the counted
 * slots), and the export to a head file. Borrowed: the target's LM head (frozen; the head's logits and
 * the target's distribution are both that matrix applied to a feature).
 *
 * A batch holds B sequences of T target rows: E_p (the target's input rows: token embeddings, or the
 * projected image rows), f_p (the target's last hidden states after its final norm) and whether row p is
 * an image row. The head has T - 1 slots per sequence; slot p's input is
 *     E_{p+1}                                     when row p + 1 is an image row and images are decoupled,
 *     fc(concat(E_{p+1}, f_p + noise_p)) + bias   otherwise,
 * one LLaMA decoder block without input norm follows (causal, RoPE at position p), and the output o_p
 * predicts f_{p+1}:
 *     loss = sum_p w_p [ SmoothL1(o_p, f_{p+1}) + 0.1 * H(softmax(W f_{p+1}), softmax(W o_p)) ]
 * with W the target's LM head and w_p = mask_p / sum(mask) (mask_p: slot p's prediction counts, i.e.
 * token p + 2 is a response token). SmoothL1 is the mean over the width with beta 1 (PyTorch's default).
 * The logits are computed for counted slots only. */
#ifndef VS_TRAIN_MSD_H
#define VS_TRAIN_MSD_H

#include "draft_msd.h"
#include "train.h"
#include "train_optim.h"

#define VS_TRAIN_MSD_XENT_WEIGHT 0.1f

typedef struct vs_train_msd vs_train_msd;

/* shape: the head (width and vocabulary = the target's). lm_head: the target's output matrix (vocab,
 * width) in F32, borrowed for the model's lifetime. max_B x max_T: the largest batch. */
vs_train_msd *vs_train_msd_new(const vs_msd_shape *shape, const float *lm_head, int max_B, int max_T,
                               vs_error *err);
void vs_train_msd_free(vs_train_msd *m);
const vs_msd_shape *vs_train_msd_shape(const vs_train_msd *m);
vs_train_params *vs_train_msd_params(vs_train_msd *m);
/* Weights ~ N(0, 0.02^2) (fc and its bias 0.01), the norm 1: vs_msd_head_write_random's spread. */
void vs_train_msd_init(vs_train_msd *m, uint64_t seed);
/* Copies the weights of a head file into the parameters (same shape). */
vs_status vs_train_msd_load_head(vs_train_msd *m, const vs_msd_head *h, vs_error *err);

typedef struct vs_train_msd_batch {
    int B, T;                /* T >= 2 target rows per sequence */
    const float *mid;        /* (B, T, C) intermediate targets, or NULL (the MSD head does not read them) */
    const float *emb;        /* (B, T, C) the target's input rows */
    const uint8_t *is_image; /* (B, T) nonzero where the row is an image row */
    const float *feat;       /* (B, T, C) the target's features (after its final norm) */
    const float *noise;      /* (B, T, C) added to feat at the head's input, or NULL */
    const float *mask;       /* (B, T) slot p's weight before normalisation; entry T - 1 unused */
} vs_train_msd_batch;

typedef struct vs_train_msd_loss {
    double total, feat, xent; /* total = feat + 0.1 xent, each the weighted sum over counted slots */
    int64_t counted;          /* slots with mask > 0 */
    int64_t top1;             /* of them, head argmax == target argmax */
} vs_train_msd_loss;

vs_status vs_train_msd_forward(vs_train_msd *m, vs_threadpool *tp, const vs_train_msd_batch *b,
                               vs_train_msd_loss *loss, vs_error *err);
/* Accumulates d(total)/d(parameters) of the last forward into the parameter gradients. */
vs_status vs_train_msd_backward(vs_train_msd *m, vs_threadpool *tp, vs_error *err);
/* The last forward's head outputs o (B, T - 1, C). */
const float *vs_train_msd_pred(const vs_train_msd *m);

/* ---------------------------------------------------------------------------------------------- */
/* Training data from the target */

/* The target's LM head as F32 (n_vocab x n_embd, vs_malloc'd; whatever its stored type). */
float *vs_train_msd_lm_head(const vs_lm *target, vs_error *err);

/* One training sequence of T rows for the head, made by the target (vs_msd_seq_free releases it). */
typedef struct vs_msd_seq {
    int32_t T;
    float *emb;       /* (T, C) the target's input rows */
    float *feat;      /* (T, C) its last hidden states after the final norm */
    uint8_t *is_image;/* (T) */
    float *mask;      /* (T) slot p counts (1) when row p + 2 is an answer row: the token the head's
                       * logits at slot p stand for is one the target answers with */
    float *mid;       /* (T, C) DREAM's intermediate target: the target's hidden state entering layer
                       * mid_layer (the residual stream, no norm); NULL when not made */
    int32_t mid_layer;
} vs_msd_seq;
/* Runs the target over the rows of ex (train_data.h's layout: tokens, image rows, answer flags; image
 * row r of the conversation is img_rows + r * C, the target's projected images, NULL without images)
 * with a fresh cache and keeps the rows and features. tp may be NULL. */
vs_status vs_train_msd_sequence(vs_lm *target, vs_threadpool *tp, const int32_t *tokens, const int32_t *img_row,
                                const uint8_t *answer, int32_t T, const float *img_rows, vs_msd_seq *out,
                                vs_error *err);
/* The intermediate target of a sequence (DREAM, docs/algorithms.md): none; the layer of least mean
 * attention entropy, chosen per sequence among layers 1 .. max(1, L - 2) (AE(l) = the mean over the
 * sequence's rows and the heads of -sum_j A_ij log A_ij); or a fixed layer in 1 .. L - 1. */
#define VS_MSD_MID_NONE (-2)
#define VS_MSD_MID_AUTO (-1)
/* vs_train_msd_sequence that also keeps the intermediate target (mid_layer: VS_MSD_MID_NONE, _AUTO or a
 * layer); out->mid_layer says which layer (-1 without). */
vs_status vs_train_msd_sequence_mid(vs_lm *target, vs_threadpool *tp, const int32_t *tokens, const int32_t *img_row,
                                    const uint8_t *answer, int32_t T, const float *img_rows, int mid_layer,
                                    vs_msd_seq *out, vs_error *err);
/* Allocates a T-row sequence of width C (contents undefined, no mid); on failure *s is zeroed and false. */
bool vs_msd_seq_alloc(vs_msd_seq *s, int32_t T, int C);
void vs_msd_seq_free(vs_msd_seq *s);

/* Writes the head file (docs/formats.md) with the target's embedding probe (vs_msd_embd_probe), its
 * matrices as mat_type (F32, F16 or BF16). */
vs_status vs_train_msd_export(const vs_train_msd *m, const float probe[VS_MSD_PROBE], vs_type mat_type,
                              const char *path, vs_error *err);

#endif
