/* train_dream: the DREAM draft model in training form (docs/algorithms.md, 'DREAM draft model'; the file
 * in docs/formats.md), on train.h's ops.
 * Owns: the model's parameters (the 32 tensors of a DREAM file, names and shapes from draft_dream.h), its
 * activations and gradient scratch for one batch, the loss, and the export to a DREAM file. Borrowed:
 * the target's LM head (frozen; the draft's logits and the target's distribution are both that matrix
 * applied to a feature).
 *
 * A batch holds B sequences of T target rows: E_p (the target's input rows), f_p (the target's last
 * hidden states after its final norm), optionally noise on f (the keys' and values' input, as the
 * released code's uniform feature noise), optionally m_p (the target's hidden state at the layer of
 * lowest attention entropy, the intermediate target), and a weight per row. Row p of the draft reads E_p,
 * runs block 1 (causal self-attention with RoPE at p, SwiGLU), block 2 (queries from row p, keys and
 * values from f_0 .. f_{p-1} (+ noise), gated), block 3, and the final norm, giving the draft feature d_p:
 *     loss = sum_p w_p [ 0.2 SmoothL1(d_p, f_p) + 0.2 SmoothL1(x2_p, m_p) + KL(softmax(W f_p) || softmax(W d_p)) ]
 * with x2_p the residual stream after block 2, W the target's LM head, w_p = mask_p / sum(mask) (row p
 * counts when token p + 1 is a response token). SmoothL1: the mean over the width, beta 1. Without m the
 * second term is absent. The logits are computed for counted rows only. */
#ifndef VS_TRAIN_DREAM_H
#define VS_TRAIN_DREAM_H

#include "draft_dream.h"
#include "train.h"
#include "train_optim.h"

#define VS_TRAIN_DREAM_FEAT_WEIGHT 0.2f
#define VS_TRAIN_DREAM_MID_WEIGHT 0.2f
#define VS_TRAIN_DREAM_KL_WEIGHT 1.0f

typedef struct vs_train_dream vs_train_dream;

/* shape: the model (width and vocabulary = the target's). lm_head: the target's output matrix (vocab,
 * width) in F32, borrowed for the model's lifetime. max_B x max_T: the largest batch. */
vs_train_dream *vs_train_dream_new(const vs_dream_shape *shape, const float *lm_head, int max_B, int max_T,
                                   vs_error *err);
void vs_train_dream_free(vs_train_dream *m);
const vs_dream_shape *vs_train_dream_shape(const vs_train_dream *m);
vs_train_params *vs_train_dream_params(vs_train_dream *m);
/* Matrices ~ N(0, 0.02^2), norms 1, both gates 0 (block 2 starts as the identity, as in the paper). */
void vs_train_dream_init(vs_train_dream *m, uint64_t seed);

typedef struct vs_train_dream_batch {
    int B, T;             /* T >= 1 rows per sequence */
    const float *emb;     /* (B, T, C) the target's input rows */
    const float *feat;    /* (B, T, C) the target's features (after its final norm) */
    const float *noise;   /* (B, T, C) added to feat where it feeds keys and values, or NULL */
    const float *mid;     /* (B, T, C) the intermediate target, or NULL */
    const float *mask;    /* (B, T) row p's weight before normalisation */
} vs_train_dream_batch;

typedef struct vs_train_dream_loss {
    double total, feat, mid, kl; /* total = 0.2 feat + 0.2 mid + kl, each the weighted sum over counted rows */
    int64_t counted;             /* rows with mask > 0 */
    int64_t top1;                /* of them, draft argmax == target argmax */
} vs_train_dream_loss;

vs_status vs_train_dream_forward(vs_train_dream *m, vs_threadpool *tp, const vs_train_dream_batch *b,
                                 vs_train_dream_loss *loss, vs_error *err);
/* Accumulates d(total)/d(parameters) of the last forward into the parameter gradients. */
vs_status vs_train_dream_backward(vs_train_dream *m, vs_threadpool *tp, vs_error *err);
/* The last forward's draft features d (B, T, C) and block-2 outputs x2 (B, T, C). */
const float *vs_train_dream_pred(const vs_train_dream *m);
const float *vs_train_dream_mid_out(const vs_train_dream *m);

/* Writes the DREAM file (docs/formats.md) with the target's embedding probe, its matrices as mat_type
 * (F32, F16 or BF16). */
vs_status vs_train_dream_export(const vs_train_dream *m, const float probe[VS_MSD_PROBE], vs_type mat_type,
                                const char *path, vs_error *err);

#endif
