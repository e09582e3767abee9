/* train_model: the LLaVA-style VLM as a trainable model.
 * Owns: the VLM's configuration, its parameter set (train_optim.h: one buffer each of parameters,
 * gradients and AdamW moments, viewed through vs_train_vlm_tensors), the activations of the last
 * forward (allocated once for the largest batch given at creation), the forward and backward passes,
 * checkpoints of the whole training state, growth into a model of twice its LM size (train_grow.c),
 * and export to llama.cpp's LLaVA layout (an LM GGUF "llama" + an mmproj GGUF "clip",
 * docs/formats.md) that vlmspec's inference engine loads.
 *
 * The model (HF CLIPVisionModel + LLaVA projector + LLaMA semantics, as src/engine/vision.h and src/engine/lm.h run
 * it):
 *   vision (per image): pixels (3, S, S) -> patch conv (stride P, no bias) -> [cls; patches] + pos
 *     -> pre-LayerNorm -> VL pre-LN blocks [x += o(MHA(ln1 x)); x += fc2(quickGELU(fc1(ln2 x)))]
 *     -> drop cls -> projector mm.2(GELU_erf(mm.0 f)) -> NP image rows of the LM's width
 *   LM: rows are token embeddings or image rows (batch.img_row) -> L blocks [x += wo(attn(RoPE(wq
 *     rms1 x), RoPE(wk rms1 x), wv rms1 x)); x += w_down(silu(w_gate rms2 x) * w_up rms2 x)]
 *     -> RMSNorm -> lm_head -> logits; causal attention with GQA, RoPE on adjacent pairs.
 *   loss: softmax cross-entropy of the logits against batch.targets where batch.loss_mask is set,
 *     summed and divided by batch.loss_norm (default: the number of counted rows).
 * Dimension letters as in train.h; in addition W = ViT width, VF = ViT MLP width, VH = ViT heads,
 * VL = ViT blocks, L = LM layers, TV = NP + 1 ViT tokens per image, NI = images in a batch. */
#ifndef VS_TRAIN_MODEL_H
#define VS_TRAIN_MODEL_H

#include "train.h"
#include "train_optim.h"

typedef struct vs_train_vlm_config {
    /* vision tower */
    int image_size;      /* S */
    int patch_size;      /* P */
    int v_width;         /* W */
    int v_ffn;           /* VF */
    int v_heads;         /* VH */
    int v_blocks;        /* VL */
    float v_eps;         /* LayerNorm epsilon */
    float image_mean[3]; /* preprocessing recorded in the mmproj file */
    bool v_post_ln;      /* LayerNorm (v.post_ln) on the last block's patch rows; without it the
                            tensors exist but are unused and not exported */
    float image_std[3];
    /* language model (the projector maps W -> C -> C) */
    int vocab;           /* V */
    int width;           /* C */
    int n_layers;        /* L */
    int n_heads;         /* H */
    int n_kv_heads;      /* KVH */
    int ffn;             /* F */
    int max_seq;         /* longest sequence (llama.context_length, RoPE table) */
    float rms_eps;
    float rope_base;
} vs_train_vlm_config;

/* Parameter groups (vs_train_params.frozen[group]). */
enum { VS_TRAIN_GROUP_VISION = 0, VS_TRAIN_GROUP_PROJECTOR = 1, VS_TRAIN_GROUP_LM = 2 };

/* Views of one buffer of the parameter set (values, gradients or moments), per-layer tensors
 * stacked along a leading layer axis. Matrices are (out, in) row-major. */
typedef struct vs_train_vlm_tensors {
    /* vision tower */
    float *v_patch;             /* (W, 3*P*P) conv weight, (ch, y, x) order */
    float *v_cls;               /* (W) */
    float *v_pos;               /* (NP + 1, W) */
    float *v_pre_ln_w, *v_pre_ln_b; /* (W) */
    float *v_ln1_w, *v_ln1_b;   /* (VL, W) */
    float *v_q_w, *v_q_b;       /* (VL, W, W), (VL, W) */
    float *v_k_w, *v_k_b;       /* (VL, W, W), (VL, W) */
    float *v_v_w, *v_v_b;       /* (VL, W, W), (VL, W) */
    float *v_o_w, *v_o_b;       /* (VL, W, W), (VL, W) */
    float *v_ln2_w, *v_ln2_b;   /* (VL, W) */
    float *v_fc1_w, *v_fc1_b;   /* (VL, VF, W), (VL, VF) */
    float *v_fc2_w, *v_fc2_b;   /* (VL, W, VF), (VL, W) */
    float *v_post_ln_w, *v_post_ln_b; /* (W) LayerNorm of the last block's patch rows */
    /* projector */
    float *mm0_w, *mm0_b;       /* (C, W), (C) */
    float *mm2_w, *mm2_b;       /* (C, C), (C) */
    /* language model */
    float *wte;                 /* (V, C) */
    float *attn_norm;           /* (L, C) */
    float *wq;                  /* (L, H*D, C) */
    float *wk, *wv;             /* (L, KVH*D, C) */
    float *wo;                  /* (L, C, H*D) */
    float *ffn_norm;            /* (L, C) */
    float *w_gate, *w_up;       /* (L, F, C) */
    float *w_down;              /* (L, C, F) */
    float *out_norm;            /* (C) */
    float *lm_head;             /* (V, C) */
} vs_train_vlm_tensors;

#define VS_TRAIN_VLM_N_TENSORS 39

/* One training batch: B sequences of T rows. Row (b, t) is a text token (tokens >= 0, img_row < 0)
 * or an image row (img_row = image * NP + patch, tokens < 0; NP: vs_train_vlm_image_rows). Pad a short
 * sequence at its end with
 * any token and loss_mask 0 (causal attention never lets earlier rows see it). */
typedef struct vs_train_batch {
    int B, T;
    int n_images;           /* NI */
    const float *pixels;    /* (NI, 3, S, S) preprocessed (mean/std normalised) */
    const int32_t *tokens;  /* (B, T) */
    const int32_t *img_row; /* (B, T), or NULL when there are no image rows */
    const int32_t *targets; /* (B, T) next-token ids (read where loss_mask != 0) */
    const float *loss_mask; /* (B, T) 1 = counted */
    const int32_t *pos;     /* (B, T) RoPE positions, or NULL for 0..T-1 */
    double loss_norm;       /* divisor of the masked sum; 0 = this batch's counted rows. For
                             * gradient accumulation pass the count over all micro-batches. */
    int n_ground;                  /* attention grounds (vs_train_vlm_set_ground), b < B, rows < T */
    const vs_train_ground *ground; /* (n_ground), or NULL */
} vs_train_batch;

typedef struct vs_train_vlm vs_train_vlm;

/* The shipped target's shape (docs/target.md): ViT 64x64/8, width 192, 6 blocks, 3 heads, MLP 768,
 * post-LN; LM width 512, 8 layers, 8/4 heads, SwiGLU 1408; eps 1e-5, RoPE base 10000. Vocabulary,
 * context and preprocessing are left 0 for the caller. `train target`'s and `train vision`'s defaults. */
vs_train_vlm_config vs_train_vlm_target_shape(void);
/* Checks a config (VS_ERR_INVALID naming the problem). */
vs_status vs_train_vlm_config_check(const vs_train_vlm_config *c, vs_error *err);
/* Creates a model with zero parameters and activations for batches up to max_B x max_T rows and
 * max_images images (max_T <= max_seq). */
vs_train_vlm *vs_train_vlm_new(const vs_train_vlm_config *cfg, int max_B, int max_T, int max_images,
                               vs_error *err);
void vs_train_vlm_free(vs_train_vlm *m);
const vs_train_vlm_config *vs_train_vlm_cfg(const vs_train_vlm *m);
vs_train_params *vs_train_vlm_params(vs_train_vlm *m);
/* Views of the parameter, gradient and moment buffers. */
void vs_train_vlm_views(vs_train_vlm *m, vs_train_vlm_tensors *w, vs_train_vlm_tensors *dw);
/* Parameters in a group (-1 = all). */
int64_t vs_train_vlm_n_params(const vs_train_vlm *m, int group);
/* Random initialisation: matrices and embeddings ~ N(0, 0.02^2), output projections of residual
 * branches (v_o, v_fc2, wo, w_down) scaled by 1/sqrt(2 * blocks), norms 1, biases 0. */
void vs_train_vlm_init(vs_train_vlm *m, uint64_t seed);

/* Forward pass: validates the batch, computes the activations and *loss. Keeps what the backward
 * needs; the logits of the last forward are available until the next one. */
vs_status vs_train_vlm_forward(vs_train_vlm *m, vs_threadpool *tp, const vs_train_batch *b, float *loss,
                               vs_error *err);
/* Backward of the last forward: ACCUMULATES d(loss)/d(parameter) into the gradient buffer for
 * every tensor whose group is not frozen (skipping the work frozen groups do not need). */
vs_status vs_train_vlm_backward(vs_train_vlm *m, vs_threadpool *tp, vs_error *err);
/* Image-row norm cap (off by default): with ratio > 0 and weight > 0, every forward with images adds
 * weight * vs_train_norm_cap_forward(image rows, tau) to the loss, tau = ratio * the mean L2 norm of
 * the token embeddings (read at that forward, no gradient through it), and the backward its gradient:
 * projected rows louder than the text rows by more than `ratio` are pulled back (docs/target.md). The
 * term is per forward (a micro-batch): divide the weight by the accumulation count for a per-step one.
 * norm_cap_loss: the term the last forward added (0 when off). */
void vs_train_vlm_set_norm_cap(vs_train_vlm *m, float ratio, float weight);
/* Pooled image rows (IbED's pooled-finetuned drafter): with k > 1 the tower's G x G patch features are
 * average-pooled k x k (vs_train_pool_grid_forward, the engine's pooling) before the projector, so an
 * image gives ceil(G / k)^2 rows (batch.img_row = image * that + row); k = 1 (the default) pools nothing.
 * VS_ERR_INVALID when k is not in 1 .. G. vs_train_vlm_image_rows: the rows per image now. */
vs_status vs_train_vlm_set_pool(vs_train_vlm *m, int k, vs_error *err);
int vs_train_vlm_image_rows(const vs_train_vlm *m);
double vs_train_vlm_norm_cap_loss(const vs_train_vlm *m);
/* Where the grounding term's gradient goes. ALL: its true gradient, through the whole model (the layers
 * below the grounded one, the image rows, the projector, a trained tower). LM: into every LM weight as
 * ALL, but not into the image rows: the projector and tower learn from the other terms alone (a second,
 * shorter backward pass from the grounded layer down). QK: into the grounded layer's query and key
 * weights alone. */
typedef enum vs_train_ground_mode { VS_TRAIN_GROUND_ALL, VS_TRAIN_GROUND_LM, VS_TRAIN_GROUND_QK } vs_train_ground_mode;

/* Attention grounding (off by default): with weight > 0, every forward whose batch has grounds adds
 * weight * vs_train_attn_ground_forward(head 0 of LM layer `layer`) to the loss, and the backward its
 * gradient: that head learns to look, from the row that predicts an answer, at the image rows the
 * answer lies in (docs/target.md). Per forward, as the norm cap: divide the weight by the accumulation
 * count for a per-step one. mode says where the term's gradient goes (the type above). VS_ERR_INVALID
 * when layer is not in 0 .. n_layers - 1 or mode is none of them. ground_loss: the term the last forward
 * added, without the weight (0 when off or without grounds). */
vs_status vs_train_vlm_set_ground(vs_train_vlm *m, int layer, float weight, vs_train_ground_mode mode,
                                  vs_error *err);
double vs_train_vlm_ground_loss(const vs_train_vlm *m);
/* (B, T, V) logits of the last forward. */
const float *vs_train_vlm_logits(const vs_train_vlm *m);

/* The vision tower alone (vision pretraining): pixels (n_images, 3, S, S) preprocessed ->
 * features (n_images * NP, v_width), the last block's patch rows after the post-LayerNorm (what the
 * projector reads). tower_backward accumulates the tower's gradients from dfeat = dL/d(features) of
 * the last tower forward (nothing when the vision group is frozen). A tower forward replaces the last
 * full forward (vs_train_vlm_backward then refuses). */
vs_status vs_train_vlm_tower_forward(vs_train_vlm *m, vs_threadpool *tp, const float *pixels, int n_images,
                                     vs_error *err);
const float *vs_train_vlm_tower_features(const vs_train_vlm *m);
void vs_train_vlm_tower_backward(vs_train_vlm *m, vs_threadpool *tp, const float *dfeat);

/* Growth (train_grow.c): copies `small`'s function into `big`, whose LM has twice small's width, layers,
 * heads, KV heads and SwiGLU width (the same head size, vocabulary, epsilons, RoPE base and vision tower;
 * the context may differ). Every LM feature, head and hidden unit is duplicated (matrices that read a
 * duplicate take half weights), each grown block is followed by a new one whose output matrices are
 * zeroed (the rest keep big's current initialisation), the projector is widened the same way and the
 * tower copied; Gaussian noise of std `noise` (seeded) on the grown matrices breaks the copies'
 * symmetry. With noise 0 big's logits equal small's up to float rounding. VS_ERR_INVALID, naming
 * `small_name` and the first differing field, when the shapes do not fit. Parameters only: moments and
 * gradients are left as they are. */
vs_status vs_train_vlm_grow(vs_train_vlm *big, vs_train_vlm *small, float noise, uint64_t seed,
                            const char *small_name, vs_error *err);

/* FLOPs of one forward+backward over a batch (matrix products and attention; 2 per multiply-add). */
double vs_train_vlm_flops(const vs_train_vlm *m, int B, int T, int n_images);

/* Checkpoint: config keys "vlm.*" + vs_train_checkpoint_write. load creates the model from the
 * file's config (activations sized as given) and restores parameters, optimizer state and *st. */
vs_status vs_train_vlm_save(const vs_train_vlm *m, const vs_train_state *st, const char *path,
                            vs_error *err);
/* The same with a second parameter set stored under `tag` (vs_train_checkpoint_add_set). */
vs_status vs_train_vlm_save_ex(const vs_train_vlm *m, const vs_train_state *st, const vs_train_params *extra,
                               const char *tag, const char *path, vs_error *err);
vs_train_vlm *vs_train_vlm_load(const char *path, int max_B, int max_T, int max_images,
                                vs_train_state *st, vs_error *err);
/* The model configuration stored in checkpoint `path`, without loading its tensors. */
vs_status vs_train_vlm_config_read(const char *path, vs_train_vlm_config *c, vs_error *err);
/* Whether checkpoint `path`, whose model is *have (vs_train_vlm_config_read), holds the model a run
 * expects (*want): every dimension, post-LN, the epsilons, the RoPE base and the preprocessing.
 * VS_ERR_INVALID naming the checkpoint, the first differing field and both values:
 * "PATH: its model has LM width 48, WANT_WHAT 32" (want_what e.g. "the flags say"). */
vs_status vs_train_vlm_config_match(const vs_train_vlm_config *want, const char *want_what,
                                    const vs_train_vlm_config *have, const char *path, vs_error *err);

/* Export in llama.cpp's LLaVA layout: lm_path gets general.architecture "llama" (token_embd, blk.N.*,
 * output_norm, output), mmproj_path gets "clip" (v.*, mm.*; written by vision.h's vs_mmproj_write).
 * type: VS_TYPE_F32 or VS_TYPE_F16 for the matrices (norms and biases stay F32). tokenizer: every
 * "tokenizer.*" key is copied from it (NULL: none; the file then needs a tokenizer from elsewhere). */
typedef struct vs_train_export_opts {
    int type;               /* vs_type */
    const vs_gguf *tokenizer;
    const char *name;       /* general.name, optional */
} vs_train_export_opts;
vs_status vs_train_vlm_export(const vs_train_vlm *m, const char *lm_path, const char *mmproj_path,
                              const vs_train_export_opts *o, vs_error *err);

#endif
