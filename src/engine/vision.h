/* vision: the CLIP vision tower and the LLaVA projector of an "mmproj" GGUF, their forward passes,
 * and the writer that makes such files.
 * Owns: vs_mmproj (one opened file: its config, an optional tower, a projector), the tower forward
 * (pixels -> patch features, HF CLIPVisionModel semantics up to the last stored block), the
 * projector forward (features -> LM embedding rows, mm.0 -> GELU -> mm.2), vs_vision_features
 * (the ViT output of one image: computed ONCE, then fed to any number of projectors, optionally
 * k x k pooled first), per-patch importance scores and the top-k row selection built on them, and
 * writing mmproj files from float weights (tests, the trainer, random models for benchmarks).
 *
 * Forward (docs/vision.md has the full description and the facts it relies on):
 *   pixels (3, S, S) -> conv patch embedding (stride P, no bias) -> prepend v.class_embd -> add
 *   v.position_embd -> v.pre_ln -> n_blocks pre-LN blocks [x += attn_out(MHA(ln1(x)));
 *   x += fc2(act(fc1(ln2(x))))], act = quick-GELU or GELU (clip.use_gelu) -> v.post_ln when the file
 *   has it (vlmspec's own towers) -> drop the class token
 *   -> features (G*G, width) with G = S / P.
 *   Projector: rows = mm.2(GELU(mm.0(features))) with the exact (erf) GELU, like HF's LLaVA.
 *   All blocks stored in the file are run (LLaVA's converter already dropped CLIP's last block).
 *
 * Sharing a tower: the target's and the drafters' projectors read the same ViT output. A drafter's
 * mmproj may be "projector-only" (clip.has_vision_encoder = false, no v.* tensors) or carry a copy
 * of the tower; vs_vision_check_projector() decides whether features computed by one file's tower
 * may be fed to another file's projector (same width always; identical tower bytes when the
 * projector's file has a tower; equal tower hash when it recorded "vlmspec.vision.tower_hash").
 *
 * Threads: every forward takes a vs_threadpool (NULL = caller's thread); the big products go
 * through vs_matmul. Scratch memory is allocated per call (documented sizes) and freed before
 * return. Objects are read-only after load, so several threads may encode with one tower. */
#ifndef VS_VISION_H
#define VS_VISION_H

#include "common.h"
#include "image.h"
#include "quant.h"
#include "threadpool.h"

/* Hyperparameters of a tower + projector pair (docs/formats.md, 'mmproj keys'). */
typedef struct vs_vision_config {
    int32_t image_size;     /* clip.vision.image_size: input side in pixels (336) */
    int32_t patch_size;     /* clip.vision.patch_size (14); image_size % patch_size == 0 */
    int32_t width;          /* clip.vision.embedding_length (1024) */
    int32_t ffn;            /* clip.vision.feed_forward_length (4096) */
    int32_t n_heads;        /* clip.vision.attention.head_count (16); width % n_heads == 0 */
    int32_t n_blocks;       /* clip.vision.block_count: blocks stored and run (23) */
    int32_t projection_dim; /* clip.vision.projection_dim: CLIP's own head, informational (768) */
    int32_t proj_hidden;    /* rows of mm.0.weight (4096) */
    int32_t proj_out;       /* rows of mm.2.weight = the LM's embedding width (4096) */
    float eps;              /* clip.vision.attention.layer_norm_epsilon (1e-5) */
    float mean[3], std[3];  /* clip.vision.image_mean / image_std */
    bool use_gelu;          /* clip.use_gelu: GELU (true) or quick-GELU x*sigmoid(1.702x) (false) */
    bool has_tower;         /* clip.has_vision_encoder: false for a projector-only file */
    bool post_ln;           /* v.post_ln.{weight,bias} present: a LayerNorm after the last block (not in
                               LLaVA-1.5 files; vlmspec's own towers, trained from scratch, have it) */
} vs_vision_config;

/* LLaVA-1.5 (CLIP ViT-L/14-336 + 2-layer MLP projector to a 4096-wide LM). */
void vs_vision_config_llava15(vs_vision_config *c);
/* Checks the values are consistent and within this build's limits (VS_ERR_INVALID + message). */
vs_status vs_vision_config_check(const vs_vision_config *c, const char *what, vs_error *err);
static inline int32_t vs_vision_grid(const vs_vision_config *c) { return c->image_size / c->patch_size; }
static inline int32_t vs_vision_n_patches(const vs_vision_config *c) {
    return vs_vision_grid(c) * vs_vision_grid(c);
}
/* The preprocessing a tower expects (size, mean, std) in the given mode. */
void vs_vision_preproc(const vs_vision_config *c, vs_preproc_mode mode, vs_preproc *out);

/* ------------------------------------------------------------------------------------------------
 * Files */

typedef struct vs_mmproj vs_mmproj;
typedef struct vs_vision_tower vs_vision_tower;
typedef struct vs_vision_projector vs_vision_projector;

/* Opens an mmproj GGUF (general.architecture "clip", projector type "mlp"). Matrices may be F32,
 * F16, BF16, Q8_0 or Q4_0 (whatever vs_matmul multiplies); vectors F32 or F16. The legacy naming
 * where v.blk.N.ffn_down holds the FIRST MLP matrix is detected by shape (ffn_down.ne[0] == width,
 * llama.cpp's rule). Missing keys and wrong shapes give VS_ERR_FORMAT naming the file. */
vs_mmproj *vs_mmproj_open(const char *path, vs_error *err);
void vs_mmproj_free(vs_mmproj *m);
const char *vs_mmproj_path(const vs_mmproj *m);
const vs_vision_config *vs_mmproj_config(const vs_mmproj *m);
const vs_vision_tower *vs_mmproj_tower(const vs_mmproj *m);         /* NULL: projector-only */
const vs_vision_projector *vs_mmproj_projector(const vs_mmproj *m); /* never NULL */

const vs_vision_config *vs_vision_tower_config(const vs_vision_tower *t);
const vs_vision_config *vs_vision_projector_config(const vs_vision_projector *p);
const char *vs_vision_tower_name(const vs_vision_tower *t);         /* its file's path */
const char *vs_vision_projector_name(const vs_vision_projector *p); /* its file's path */

/* True if both towers compute the same function: equal hyperparameters and byte-identical tensors
 * of the same types (a and b may come from different files). */
bool vs_vision_tower_same(const vs_vision_tower *a, const vs_vision_tower *b);
/* 64-bit hash of a tower's hyperparameters and tensor bytes (types included). Reads every weight
 * byte once (about 0.2 s for CLIP-L F16). */
uint64_t vs_vision_tower_hash(const vs_vision_tower *t);
/* May features computed by `t` be fed to `p`? VS_ERR_INVALID naming both files when the widths
 * differ, when p's file carries a different tower, or when it recorded a different tower hash. */
vs_status vs_vision_check_projector(const vs_vision_tower *t, const vs_vision_projector *p, vs_error *err);

/* ------------------------------------------------------------------------------------------------
 * Features and forward passes */

/* The ViT output of one image (or a pooled version of it). */
typedef struct vs_vision_features {
    int32_t grid_h, grid_w; /* patch grid; row r * grid_w + c of data is patch (r, c) */
    int32_t width;          /* ViT width */
    float *data;            /* (grid_h * grid_w, width), vs_malloc'ed, owned */
    float *importance;      /* (grid_h * grid_w) or NULL: see vs_vision_encode_opts.importance */
} vs_vision_features;
void vs_vision_features_free(vs_vision_features *f);
static inline int64_t vs_vision_features_rows(const vs_vision_features *f) {
    return (int64_t)f->grid_h * f->grid_w;
}

/* Stages reported to the trace hook: the embeddings before pre_ln, after pre_ln, then block i's
 * output (i = 0 .. n_blocks-1). */
enum { VS_VISION_STAGE_EMBED = -2, VS_VISION_STAGE_PRE_LN = -1 };
/* x is (n_tokens, width) with the class token first (row 0); valid only during the call. */
typedef void (*vs_vision_trace_fn)(void *ctx, int stage, const float *x, int64_t n_tokens, int64_t width);

typedef struct vs_vision_encode_opts {
    /* Importance hook (for visual-token compression, e.g. DREAM's "keep the top 75%"): when true,
     * features->importance[i] = the attention the class token pays patch i in the last block,
     * averaged over heads (a ViT-side score; LM-side scores come from the LM and use the same
     * vs_vision_select_top / vs_vision_gather_rows below). */
    bool importance;
    vs_vision_trace_fn trace; /* optional: called after each stage (tests, debugging) */
    void *trace_ctx;
} vs_vision_encode_opts;

/* pixels (3, S, S) channel-major, as vs_image_preprocess makes them. out is filled (allocated).
 * Scratch: about n_tok * (6 * width + ffn + n_tok) floats, n_tok = G*G + 1. */
vs_status vs_vision_encode(const vs_vision_tower *t, vs_threadpool *tp, const float *pixels,
                           const vs_vision_encode_opts *opts, vs_vision_features *out, vs_error *err);
/* Load an image file, preprocess it for this tower (mode), encode it. */
vs_status vs_vision_encode_file(const vs_vision_tower *t, vs_threadpool *tp, const char *path,
                                vs_preproc_mode mode, const vs_vision_encode_opts *opts,
                                vs_vision_features *out, vs_error *err);
/* Same for an already decoded image. */
vs_status vs_vision_encode_image(const vs_vision_tower *t, vs_threadpool *tp, const vs_image *img,
                                 vs_preproc_mode mode, const vs_vision_encode_opts *opts,
                                 vs_vision_features *out, vs_error *err);

/* k x k average pooling of the patch grid (image.h's vs_pool_grid_avg; importance is pooled too).
 * k = 1 copies. out is allocated. */
vs_status vs_vision_features_pool(const vs_vision_features *in, int32_t k, vs_vision_features *out,
                                  vs_error *err);

/* out (n_rows, proj_out) = mm.2(GELU(mm.0(feat))), feat (n_rows, width). Scratch: n_rows * proj_hidden. */
vs_status vs_vision_project(const vs_vision_projector *p, vs_threadpool *tp, const float *feat,
                            int64_t n_rows, float *out, vs_error *err);
/* The usual composition: optional k x k pooling (pool_k <= 1: none), then the projector. *rows is
 * allocated (n_rows, proj_out); *n_rows receives the row count. */
vs_status vs_vision_embed(const vs_vision_projector *p, vs_threadpool *tp, const vs_vision_features *f,
                          int32_t pool_k, float **rows, int64_t *n_rows, vs_error *err);

/* Visual-token selection by importance: idx receives the indices of the n_keep highest scores in
 * ascending index order (ties: lower index first), so kept rows keep their relative order. */
void vs_vision_select_top(const float *scores, int64_t n, int64_t n_keep, int64_t *idx);
/* out (n_idx, width) = rows[idx[i]]. */
void vs_vision_gather_rows(const float *rows, int64_t width, const int64_t *idx, int64_t n_idx, float *out);

/* ------------------------------------------------------------------------------------------------
 * Writing mmproj files */

/* Float weights of one block, PyTorch layouts: a matrix is (out, in) row-major. */
typedef struct vs_vision_block_weights {
    float *ln1_w, *ln1_b; /* (width) */
    float *q_w, *q_b;     /* (width, width), (width) */
    float *k_w, *k_b;     /* (width, width), (width) */
    float *v_w, *v_b;     /* (width, width), (width) */
    float *o_w, *o_b;     /* (width, width), (width) attention output projection */
    float *ln2_w, *ln2_b; /* (width) */
    float *fc1_w, *fc1_b; /* (ffn, width), (ffn) */
    float *fc2_w, *fc2_b; /* (width, ffn), (width) */
} vs_vision_block_weights;

typedef struct vs_vision_weights {
    /* tower (all NULL / blocks NULL for a projector-only file) */
    float *class_embd;               /* (width) */
    float *patch_w;                  /* (width, 3, P, P): conv weight, torch layout */
    float *pos_embd;                 /* (G*G + 1, width) */
    float *pre_ln_w, *pre_ln_b;      /* (width) */
    vs_vision_block_weights *blocks; /* (n_blocks) */
    float *post_ln_w, *post_ln_b;    /* (width), only with cfg->post_ln */
    /* projector */
    float *mm0_w, *mm0_b; /* (proj_hidden, width), (proj_hidden) */
    float *mm2_w, *mm2_b; /* (proj_out, proj_hidden), (proj_out) */
} vs_vision_weights;

/* Allocates zeroed arrays for every tensor of cfg (tower too if cfg->has_tower). */
vs_status vs_vision_weights_alloc(vs_vision_weights *w, const vs_vision_config *cfg, vs_error *err);
/* Frees arrays allocated by vs_vision_weights_alloc / _read (not caller-owned pointers). */
void vs_vision_weights_free(vs_vision_weights *w, const vs_vision_config *cfg);
/* Fills allocated weights with a deterministic random model: matrices ~ N(0, 1/in), embeddings
 * ~ N(0, 0.5^2), biases ~ N(0, 0.1^2), LayerNorm gains 1 + N(0, 0.1^2). */
void vs_vision_weights_randomize(vs_vision_weights *w, const vs_vision_config *cfg, uint64_t seed);
/* Dequantised float copy of an opened file's weights (allocated like vs_vision_weights_alloc). */
vs_status vs_mmproj_read_weights(const vs_mmproj *m, vs_vision_weights *w, vs_error *err);

typedef struct vs_mmproj_write_opts {
    vs_type mat_type;    /* type of the matrices (F32, F16, BF16, Q8_0, Q4_0 where the row length
                          * allows) and of the patch embedding (F16 when mat_type is block-quantised);
                          * vectors and embeddings are written F32 */
    uint64_t tower_hash; /* projector-only files: hash of the tower the projector was trained
                          * against (vs_vision_tower_hash), 0 = none recorded */
    const char *name;    /* general.name, optional */
} vs_mmproj_write_opts;

/* Writes an mmproj GGUF with docs/formats.md's keys and tensor names (MLP matrices in the legacy naming
 * ffn_down = first, ffn_up = second, as LLaVA's released files and llama.cpp expect). */
vs_status vs_mmproj_write(const char *path, const vs_vision_config *cfg, const vs_vision_weights *w,
                          const vs_mmproj_write_opts *opts, vs_error *err);
/* Random model of cfg written to path (vs_vision_weights_randomize with seed). */
vs_status vs_mmproj_write_random(const char *path, const vs_vision_config *cfg, vs_type mat_type,
                                 uint64_t seed, vs_error *err);

#endif
