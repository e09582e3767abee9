/* train_model_internal: the layout of vs_train_vlm, shared by the train_model*.c / train_export.c
 * files only (not part of the public API). Activations keep a leading layer axis sized for the
 * capacity given at creation; gradient scratch holds one layer's worth and is reused. */
#ifndef VS_TRAIN_MODEL_INTERNAL_H
#define VS_TRAIN_MODEL_INTERNAL_H

#include "train_model.h"

typedef struct vlm_acts {
    /* vision tower: Nv = max_images * TV rows per block slice, Np = max_images * NP */
    float *v_col;                   /* (Np, 3*P*P) im2col of the pixels */
    float *v_patch;                 /* (Np, W) */
    float *v_emb;                   /* (Nv, W) [cls; patches] + pos */
    float *v_x0;                    /* (Nv, W) pre-LayerNorm output = block 0 input */
    float *v_pre_mean, *v_pre_rstd; /* (Nv) */
    float *v_ln1;                   /* (VL, Nv, W) */
    float *v_ln1_mean, *v_ln1_rstd; /* (VL, Nv) */
    float *v_q, *v_k, *v_v;         /* (VL, Nv, W) */
    float *v_att;                   /* (VL, NI, VH, TV, TV) */
    float *v_atty;                  /* (VL, Nv, W) */
    float *v_res1;                  /* (VL, Nv, W) */
    float *v_ln2;                   /* (VL, Nv, W) */
    float *v_ln2_mean, *v_ln2_rstd; /* (VL, Nv) */
    float *v_fc1, *v_act;           /* (VL, Nv, VF) */
    float *v_res2;                  /* (VL, Nv, W) block outputs */
    float *v_feat_raw;              /* (Np, W) last block's output, class token dropped */
    float *v_post_mean, *v_post_rstd; /* (Np) */
    float *v_feat;                  /* (Np, W) post-LN(v_feat_raw): the projector's input */
    float *v_pool;                  /* (NI * NR, W) v_feat pooled (pool_k > 1): then the projector's input */
    float *mm_h, *mm_act, *mm_out;  /* (Np, C) projector: mm.0, GELU, mm.2 = image rows */
    /* LM: N = max_B * max_T rows per layer slice */
    float *x_emb;                   /* (N, C) */
    float *ln1, *ln1_rstd;          /* (L, N, C), (L, N) */
    float *q;                       /* (L, N, H*D) after RoPE */
    float *k, *v;                   /* (L, N, KVH*D), k after RoPE */
    float *att;                     /* (L, B, H, T, T) */
    float *atty;                    /* (L, N, H*D) */
    float *res1;                    /* (L, N, C) */
    float *ln2, *ln2_rstd;          /* (L, N, C), (L, N) */
    float *gate, *up, *hmid;        /* (L, N, F) */
    float *res2;                    /* (L, N, C) layer outputs */
    float *lnf, *lnf_rstd;          /* (N, C), (N) */
    float *logits, *probs;          /* (N, V) */
    float *tmp;                     /* (max(N*C, Nv*W)) branch output before the residual add */
    float *rope_cs;                 /* (max_seq, D/2, 2) */
    float *lw;                      /* (N) loss weight per row */
} vlm_acts;

typedef struct vlm_grads {
    float *dlogits;                           /* (N, V) */
    float *dx, *dln;                          /* (N, C) residual stream, norm output */
    float *dq, *dk, *dv, *dqr, *dkr, *datty;  /* (N, H*D or KVH*D); dqr/dkr before RoPE */
    float *datt;                              /* attention scratch */
    float *dgate, *dup, *dh;                  /* (N, F) */
    float *dmm_out, *dmm_act, *dmm_h;         /* (Np, C) */
    float *dfeat, *dfeat_raw, *dvpatch;       /* (Np, W) */
    float *dpool;                             /* (NI * NR, W) */
    float *dvx, *dvln, *dvq, *dvk, *dvv, *dvatty; /* (Nv, W) */
    float *dvact, *dvfc1;                     /* (Nv, VF) */
} vlm_grads;

struct vs_train_vlm {
    vs_train_vlm_config cfg;
    int max_B, max_T, max_images;
    int G, NP, TV, D, HD, KVD; /* derived sizes */
    int pool_k, NR;            /* vs_train_vlm_set_pool; image rows per image: NP, or ceil(G / pool_k)^2 */
    vs_train_params params;
    vs_train_vlm_tensors w, g; /* views of params.data and params.grad */
    float *arena;              /* all activations and gradient scratch */
    size_t arena_floats;
    vlm_acts a;
    vlm_grads d;
    /* the last forward's batch (copied) */
    int B, T, NI;
    bool has_images, have_forward;
    /* image-row norm cap (vs_train_vlm_set_norm_cap): weight 0 = off; tau and the term of the last forward */
    float cap_ratio, cap_weight, cap_tau;
    double cap_loss;
    /* attention grounding (vs_train_vlm_set_ground): weight 0 = off; the last forward's grounds (copied)
     * and term */
    int ground_layer;
    float ground_weight;
    vs_train_ground_mode ground_mode; /* where the term's gradient goes */
    double ground_loss;
    vs_train_ground *ground;
    int n_ground, ground_cap;
    int32_t *tokens;  /* (N) -1 at image rows */
    int32_t *img_row; /* (N) -1 at text rows */
    int32_t *targets; /* (N) 0 where not counted */
    int32_t *pos;     /* (N) */
};

#endif
