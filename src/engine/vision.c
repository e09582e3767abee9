/* vision: mmproj loading, tower + projector forward, features, pooling, importance, writer.
 * See vision.h for what the module owns and the forward's definition. Sections: config, loading,
 * row operations (threaded), tower forward, projector forward, features / selection, tower
 * identity, writer. */
#include "vision.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "kernels.h"

/* ------------------------------------------------------------------------------------------------
 * Config */

void vs_vision_config_llava15(vs_vision_config *c) {
    memset(c, 0, sizeof(*c));
    c->image_size = 336;
    c->patch_size = 14;
    c->width = 1024;
    c->ffn = 4096;
    c->n_heads = 16;
    c->n_blocks = 23;
    c->projection_dim = 768;
    c->proj_hidden = 4096;
    c->proj_out = 4096;
    c->eps = 1e-5f;
    /* OpenAI CLIP's normalisation constants (CLIPImageProcessor). */
    const float mean[3] = {0.48145466f, 0.4578275f, 0.40821073f};
    const float std[3] = {0.26862954f, 0.26130258f, 0.27577711f};
    memcpy(c->mean, mean, sizeof(mean));
    memcpy(c->std, std, sizeof(std));
    c->use_gelu = false;
    c->has_tower = true;
}

#define VS_VISION_MAX_DIM (1 << 18)

vs_status vs_vision_config_check(const vs_vision_config *c, const char *what, vs_error *err) {
    if (!what) what = "vision config";
#define BAD(...) return vs_error_set(err, VS_ERR_INVALID, __VA_ARGS__)
    if (c->width < 1 || c->width > VS_VISION_MAX_DIM)
        BAD("%s: embedding width %d out of range", what, c->width);
    if (c->proj_hidden < 1 || c->proj_hidden > VS_VISION_MAX_DIM)
        BAD("%s: projector hidden width %d out of range", what, c->proj_hidden);
    if (c->proj_out < 1 || c->proj_out > VS_VISION_MAX_DIM)
        BAD("%s: projector output width %d out of range", what, c->proj_out);
    if (c->image_size < 1 || c->image_size > 8192) BAD("%s: image size %d out of range", what, c->image_size);
    if (c->patch_size < 1 || c->patch_size > c->image_size)
        BAD("%s: patch size %d out of range for image size %d", what, c->patch_size, c->image_size);
    if (c->image_size % c->patch_size)
        BAD("%s: image size %d is not a multiple of the patch size %d", what, c->image_size, c->patch_size);
    if ((int64_t)vs_vision_n_patches(c) + 1 > 65536)
        BAD("%s: %d patches per image is more than this build supports", what, vs_vision_n_patches(c));
    for (int i = 0; i < 3; i++)
        if (!(c->std[i] > 0.0f) || !isfinite(c->std[i]) || !isfinite(c->mean[i]))
            BAD("%s: bad image mean/std for channel %d", what, i);
    if (!c->has_tower) return VS_OK;
    if (c->ffn < 1 || c->ffn > VS_VISION_MAX_DIM) BAD("%s: feed-forward width %d out of range", what, c->ffn);
    if (c->n_heads < 1 || c->width % c->n_heads)
        BAD("%s: width %d is not divisible by the head count %d", what, c->width, c->n_heads);
    if (c->n_blocks < 0 || c->n_blocks > 1024) BAD("%s: block count %d out of range", what, c->n_blocks);
    if (!(c->eps > 0.0f) || !isfinite(c->eps)) BAD("%s: bad layer-norm epsilon", what);
#undef BAD
    return VS_OK;
}

void vs_vision_preproc(const vs_vision_config *c, vs_preproc_mode mode, vs_preproc *out) {
    out->size = c->image_size;
    memcpy(out->mean, c->mean, sizeof(out->mean));
    memcpy(out->std, c->std, sizeof(out->std));
    out->mode = mode;
}

/* ------------------------------------------------------------------------------------------------
 * Objects */

/* A weight matrix: n_out rows of n_in values of `type`, pointing into the file mapping. */
typedef struct vmat {
    vs_type type;
    int64_t n_out, n_in;
    const void *data;
    const vs_gguf_tensor *t; /* source tensor (identity checks, hashing) */
} vmat;

typedef struct vblock {
    float *ln1_w, *ln1_b, *ln2_w, *ln2_b; /* (width) */
    vmat q, k, v, o;                      /* (width, width) */
    float *q_b, *k_b, *v_b, *o_b;         /* (width) */
    vmat fc1, fc2;                        /* (ffn, width), (width, ffn) */
    float *fc1_b, *fc2_b;                 /* (ffn), (width) */
    const vs_gguf_tensor *vec_t[10];      /* ln1 w/b, ln2 w/b, q/k/v/o b, fc1 b, fc2 b sources */
} vblock;

struct vs_vision_tower {
    const vs_mmproj *file;
    vs_vision_config cfg;
    float *class_embd;              /* (width) */
    float *pos_embd;                /* (n_tok, width) */
    float *pre_ln_w, *pre_ln_b;     /* (width) */
    vmat patch;                     /* (width, 3 * P * P): conv weight as a matrix */
    vblock *blocks;                 /* (n_blocks) */
    float *post_ln_w, *post_ln_b;   /* (width), NULL without cfg.post_ln */
    const vs_gguf_tensor *vec_t[6]; /* class, pos, pre_ln w/b, post_ln w/b sources */
};

struct vs_vision_projector {
    const vs_mmproj *file;
    vs_vision_config cfg;
    vmat mm0, mm2;        /* (proj_hidden, width), (proj_out, proj_hidden) */
    float *mm0_b, *mm2_b; /* (proj_hidden), (proj_out) */
    bool has_tower_hash;
    uint64_t tower_hash;
};

struct vs_mmproj {
    char *path;
    vs_gguf *g;
    vs_vision_config cfg;
    bool has_tower;
    vs_vision_tower tower;
    vs_vision_projector proj;
    float **owned; /* float copies of vectors, freed with the file */
    int64_t n_owned, cap_owned;
};

const char *vs_mmproj_path(const vs_mmproj *m) { return m->path; }
const vs_vision_config *vs_mmproj_config(const vs_mmproj *m) { return &m->cfg; }
const vs_vision_tower *vs_mmproj_tower(const vs_mmproj *m) { return m->has_tower ? &m->tower : NULL; }
const vs_vision_projector *vs_mmproj_projector(const vs_mmproj *m) { return &m->proj; }
const vs_vision_config *vs_vision_tower_config(const vs_vision_tower *t) { return &t->cfg; }
const vs_vision_config *vs_vision_projector_config(const vs_vision_projector *p) { return &p->cfg; }
const char *vs_vision_tower_name(const vs_vision_tower *t) { return t->file->path; }
const char *vs_vision_projector_name(const vs_vision_projector *p) { return p->file->path; }

void vs_mmproj_free(vs_mmproj *m) {
    if (!m) return;
    for (int64_t i = 0; i < m->n_owned; i++)
        vs_free(m->owned[i]);
    vs_free(m->owned);
    vs_free(m->tower.blocks);
    vs_gguf_close(m->g);
    vs_free(m->path);
    vs_free(m);
}

/* ------------------------------------------------------------------------------------------------
 * Loading */

static float *own_floats(vs_mmproj *m, int64_t n) {
    if (m->n_owned == m->cap_owned) {
        int64_t cap = m->cap_owned ? 2 * m->cap_owned : 64;
        float **p = vs_realloc(m->owned, (size_t)cap * sizeof(float *));
        if (!p) return NULL;
        m->owned = p;
        m->cap_owned = cap;
    }
    float *f = vs_calloc((size_t)n, sizeof(float));
    if (f) m->owned[m->n_owned++] = f;
    return f;
}

/* A vector-like tensor of the given shape, dequantised into an owned float array. */
static vs_status load_vec(vs_mmproj *m, const char *name, int n_dims, const int64_t *ne, float **out,
                          const vs_gguf_tensor **src, vs_error *err) {
    const vs_gguf_tensor *t = NULL;
    vs_status st = vs_gguf_require_tensor(m->g, name, n_dims, ne, &t, err);
    if (st != VS_OK) return st;
    int64_t n = 1;
    for (int i = 0; i < n_dims; i++)
        n *= ne[i];
    if (n % vs_type_block_size((vs_type)t->type))
        return vs_error_set(err, VS_ERR_FORMAT, "%s: tensor %s: type %s does not fit its %lld values",
                            m->path, name, vs_type_name(t->type), (long long)n);
    float *f = own_floats(m, n);
    if (!f) return vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory for tensor %s", m->path, name);
    vs_dequantize_row((vs_type)t->type, t->data, f, n);
    *out = f;
    if (src) *src = t;
    return VS_OK;
}

static vs_status load_vec1(vs_mmproj *m, const char *name, int64_t n, float **out, const vs_gguf_tensor **src,
                           vs_error *err) {
    return load_vec(m, name, 1, &n, out, src, err);
}

/* A matrix of n_out rows of n_in values (ne = [n_in, n_out], or the given 4-D shape). */
static vs_status load_mat_shape(vs_mmproj *m, const char *name, int n_dims, const int64_t *ne, int64_t n_in,
                                int64_t n_out, vmat *out, vs_error *err) {
    const vs_gguf_tensor *t = NULL;
    vs_status st = vs_gguf_require_tensor(m->g, name, n_dims, ne, &t, err);
    if (st != VS_OK) return st;
    int64_t bs = vs_type_block_size((vs_type)t->type);
    if (n_in % bs)
        return vs_error_set(err, VS_ERR_UNSUPPORTED,
                            "%s: tensor %s: type %s needs rows of a multiple of %lld values, "
                            "rows have %lld",
                            m->path, name, vs_type_name(t->type), (long long)bs, (long long)n_in);
    out->type = (vs_type)t->type;
    out->n_out = n_out;
    out->n_in = n_in;
    out->data = t->data;
    out->t = t;
    return VS_OK;
}

static vs_status load_mat(vs_mmproj *m, const char *name, int64_t n_in, int64_t n_out, vmat *out,
                          vs_error *err) {
    int64_t ne[2] = {n_in, n_out};
    return load_mat_shape(m, name, 2, ne, n_in, n_out, out, err);
}

static vs_status get_i32(const vs_gguf *g, const char *path, const char *key, bool required, int32_t *out,
                         vs_error *err) {
    int64_t v = 0;
    int r = vs_gguf_get_int(g, key, &v);
    if (r == 0 && !required) return VS_OK;
    if (r == 0) return vs_error_set(err, VS_ERR_FORMAT, "%s: missing key %s", path, key);
    if (r < 0) return vs_error_set(err, VS_ERR_FORMAT, "%s: key %s is not an integer", path, key);
    if (v < 0 || v > INT32_MAX)
        return vs_error_set(err, VS_ERR_FORMAT, "%s: key %s = %lld out of range", path, key, (long long)v);
    *out = (int32_t)v;
    return VS_OK;
}

static vs_status read_config(vs_mmproj *m, vs_error *err) {
    const vs_gguf *g = m->g;
    const char *path = m->path;
    vs_vision_config *c = &m->cfg;
    memset(c, 0, sizeof(*c));
    vs_gguf_str s;
    int r = vs_gguf_get_str(g, "general.architecture", &s);
    if (r != 1)
        return vs_error_set(err, VS_ERR_FORMAT, "%s: missing key general.architecture (not an mmproj file?)",
                            path);
    if (!vs_gguf_str_eq(s, "clip"))
        return vs_error_set(err, VS_ERR_FORMAT, "%s: general.architecture is '%.*s', expected 'clip'", path,
                            (int)VS_MIN(s.len, 64), s.ptr);
    r = vs_gguf_get_str(g, "clip.projector_type", &s);
    if (r == -1) return vs_error_set(err, VS_ERR_FORMAT, "%s: clip.projector_type is not a string", path);
    if (r == 1 && !vs_gguf_str_eq(s, "mlp"))
        return vs_error_set(err, VS_ERR_UNSUPPORTED,
                            "%s: projector type '%.*s' is not supported (only 'mlp')", path,
                            (int)VS_MIN(s.len, 64), s.ptr);
    /* LLaVA-1.6's "anyres" projectors (the image cut into a grid of tiles, each encoded, then merged) are
     * refused: vlmspec encodes one view per image, which would silently answer differently. */
    r = vs_gguf_get_str(g, "clip.vision.mm_patch_merge_type", &s);
    if (r == 1 && !vs_gguf_str_eq(s, "flat"))
        return vs_error_set(err, VS_ERR_UNSUPPORTED,
                            "%s: patch merge type '%.*s' (LLaVA-1.6 anyres tiling) is not supported (only 'flat', "
                            "LLaVA-1.5)", path, (int)VS_MIN(s.len, 64), s.ptr);
    if (vs_gguf_find_key(g, "clip.vision.image_grid_pinpoints") >= 0)
        return vs_error_set(err, VS_ERR_UNSUPPORTED,
                            "%s: clip.vision.image_grid_pinpoints is set: LLaVA-1.6 anyres tiling is not supported "
                            "(only LLaVA-1.5 projectors)", path);
    bool b = true;
    r = vs_gguf_get_bool(g, "clip.has_vision_encoder", &b);
    if (r == -1) return vs_error_set(err, VS_ERR_FORMAT, "%s: clip.has_vision_encoder is not a bool", path);
    c->has_tower = (r == 1) ? b : true;
    bool gelu = false;
    r = vs_gguf_get_bool(g, "clip.use_gelu", &gelu);
    if (r == -1) return vs_error_set(err, VS_ERR_FORMAT, "%s: clip.use_gelu is not a bool", path);
    c->use_gelu = gelu;

    bool t = c->has_tower;
    vs_status st;
    if ((st = get_i32(g, path, "clip.vision.embedding_length", true, &c->width, err)) != VS_OK) return st;
    if ((st = get_i32(g, path, "clip.vision.image_size", t, &c->image_size, err)) != VS_OK) return st;
    if ((st = get_i32(g, path, "clip.vision.patch_size", t, &c->patch_size, err)) != VS_OK) return st;
    if ((st = get_i32(g, path, "clip.vision.feed_forward_length", t, &c->ffn, err)) != VS_OK) return st;
    if ((st = get_i32(g, path, "clip.vision.attention.head_count", t, &c->n_heads, err)) != VS_OK) return st;
    if ((st = get_i32(g, path, "clip.vision.block_count", t, &c->n_blocks, err)) != VS_OK) return st;
    if ((st = get_i32(g, path, "clip.vision.projection_dim", false, &c->projection_dim, err)) != VS_OK)
        return st;
    double eps = 1e-5;
    if (t && (st = vs_gguf_require_float(g, "clip.vision.attention.layer_norm_epsilon", &eps, err)) != VS_OK)
        return st;
    c->eps = (float)eps;
    const char *arr_keys[2] = {"clip.vision.image_mean", "clip.vision.image_std"};
    float *arr_out[2] = {c->mean, c->std};
    for (int i = 0; i < 2; i++) {
        if (vs_gguf_find_key(g, arr_keys[i]) < 0) {
            if (t) return vs_error_set(err, VS_ERR_FORMAT, "%s: missing key %s", path, arr_keys[i]);
            for (int j = 0; j < 3; j++)
                arr_out[i][j] = i ? 1.0f : 0.0f;
            continue;
        }
        int64_t n = vs_gguf_get_f32_array(g, arr_keys[i], arr_out[i], 3);
        if (n != 3)
            return vs_error_set(err, VS_ERR_FORMAT, "%s: key %s must be an array of 3 floats", path,
                                arr_keys[i]);
    }
    if (!t) {
        /* A projector-only file needs only the width; keep the rest plausible for the check. */
        if (c->image_size <= 0) c->image_size = 1;
        if (c->patch_size <= 0) c->patch_size = 1;
    }
    return VS_OK;
}

static vs_status load_tower(vs_mmproj *m, vs_error *err) {
    vs_vision_tower *tw = &m->tower;
    const vs_vision_config *c = &m->cfg;
    const int64_t D = c->width, F = c->ffn, P = c->patch_size;
    const int64_t n_tok = (int64_t)vs_vision_n_patches(c) + 1;
    tw->file = m;
    tw->cfg = *c;
    vs_status st;
    int64_t ne_pos[2] = {D, n_tok};
    int64_t ne_patch[4] = {P, P, 3, D};
    if ((st = load_vec1(m, "v.class_embd", D, &tw->class_embd, &tw->vec_t[0], err)) != VS_OK) return st;
    if ((st = load_vec(m, "v.position_embd.weight", 2, ne_pos, &tw->pos_embd, &tw->vec_t[1], err)) != VS_OK)
        return st;
    if ((st = load_vec1(m, "v.pre_ln.weight", D, &tw->pre_ln_w, &tw->vec_t[2], err)) != VS_OK) return st;
    if ((st = load_vec1(m, "v.pre_ln.bias", D, &tw->pre_ln_b, &tw->vec_t[3], err)) != VS_OK) return st;
    /* optional post-LayerNorm: both tensors or neither */
    bool pw = vs_gguf_find_tensor(m->g, "v.post_ln.weight") != NULL, pb = vs_gguf_find_tensor(m->g, "v.post_ln.bias") != NULL;
    if (pw != pb)
        return vs_error_set(err, VS_ERR_FORMAT, "%s: v.post_ln.%s without v.post_ln.%s", m->path,
                            pw ? "weight" : "bias", pw ? "bias" : "weight");
    if (pw) {
        if ((st = load_vec1(m, "v.post_ln.weight", D, &tw->post_ln_w, &tw->vec_t[4], err)) != VS_OK) return st;
        if ((st = load_vec1(m, "v.post_ln.bias", D, &tw->post_ln_b, &tw->vec_t[5], err)) != VS_OK) return st;
    }
    m->cfg.post_ln = tw->cfg.post_ln = pw;
    if ((st = load_mat_shape(m, "v.patch_embd.weight", 4, ne_patch, 3 * P * P, D, &tw->patch, err)) != VS_OK)
        return st;
    tw->blocks = vs_calloc((size_t)VS_MAX(c->n_blocks, 1), sizeof(vblock));
    if (!tw->blocks) return vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory", m->path);
    char name[96];
    for (int i = 0; i < c->n_blocks; i++) {
        vblock *b = &tw->blocks[i];
#define NM(suffix) (snprintf(name, sizeof(name), "v.blk.%d.%s", i, suffix), name)
        if ((st = load_vec1(m, NM("ln1.weight"), D, &b->ln1_w, &b->vec_t[0], err)) != VS_OK) return st;
        if ((st = load_vec1(m, NM("ln1.bias"), D, &b->ln1_b, &b->vec_t[1], err)) != VS_OK) return st;
        if ((st = load_vec1(m, NM("ln2.weight"), D, &b->ln2_w, &b->vec_t[2], err)) != VS_OK) return st;
        if ((st = load_vec1(m, NM("ln2.bias"), D, &b->ln2_b, &b->vec_t[3], err)) != VS_OK) return st;
        if ((st = load_mat(m, NM("attn_q.weight"), D, D, &b->q, err)) != VS_OK) return st;
        if ((st = load_mat(m, NM("attn_k.weight"), D, D, &b->k, err)) != VS_OK) return st;
        if ((st = load_mat(m, NM("attn_v.weight"), D, D, &b->v, err)) != VS_OK) return st;
        if ((st = load_mat(m, NM("attn_out.weight"), D, D, &b->o, err)) != VS_OK) return st;
        if ((st = load_vec1(m, NM("attn_q.bias"), D, &b->q_b, &b->vec_t[4], err)) != VS_OK) return st;
        if ((st = load_vec1(m, NM("attn_k.bias"), D, &b->k_b, &b->vec_t[5], err)) != VS_OK) return st;
        if ((st = load_vec1(m, NM("attn_v.bias"), D, &b->v_b, &b->vec_t[6], err)) != VS_OK) return st;
        if ((st = load_vec1(m, NM("attn_out.bias"), D, &b->o_b, &b->vec_t[7], err)) != VS_OK) return st;
        /* MLP naming: llama.cpp's rule - if ffn_down's rows have `width` values it is the FIRST
         * matrix (legacy LLaVA naming), else the standard naming (ffn_up first). */
        const vs_gguf_tensor *down = vs_gguf_find_tensor(m->g, NM("ffn_down.weight"));
        if (!down) return vs_error_set(err, VS_ERR_FORMAT, "%s: missing tensor %s", m->path, name);
        bool legacy = down->ne[0] == D;
        const char *first = legacy ? "ffn_down" : "ffn_up", *second = legacy ? "ffn_up" : "ffn_down";
        char suffix[32];
        snprintf(suffix, sizeof(suffix), "%s.weight", first);
        if ((st = load_mat(m, NM(suffix), D, F, &b->fc1, err)) != VS_OK) return st;
        snprintf(suffix, sizeof(suffix), "%s.bias", first);
        if ((st = load_vec1(m, NM(suffix), F, &b->fc1_b, &b->vec_t[8], err)) != VS_OK) return st;
        snprintf(suffix, sizeof(suffix), "%s.weight", second);
        if ((st = load_mat(m, NM(suffix), F, D, &b->fc2, err)) != VS_OK) return st;
        snprintf(suffix, sizeof(suffix), "%s.bias", second);
        if ((st = load_vec1(m, NM(suffix), D, &b->fc2_b, &b->vec_t[9], err)) != VS_OK) return st;
#undef NM
    }
    return VS_OK;
}

static vs_status load_projector(vs_mmproj *m, vs_error *err) {
    vs_vision_projector *p = &m->proj;
    vs_vision_config *c = &m->cfg;
    p->file = m;
    const vs_gguf_tensor *t0 = vs_gguf_find_tensor(m->g, "mm.0.weight");
    const vs_gguf_tensor *t2 = vs_gguf_find_tensor(m->g, "mm.2.weight");
    if (!t0) return vs_error_set(err, VS_ERR_FORMAT, "%s: missing tensor mm.0.weight", m->path);
    if (!t2) return vs_error_set(err, VS_ERR_FORMAT, "%s: missing tensor mm.2.weight", m->path);
    if (t0->n_dims != 2 || t2->n_dims != 2)
        return vs_error_set(err, VS_ERR_FORMAT, "%s: projector matrices mm.0 / mm.2 must be 2-D", m->path);
    if (t0->ne[1] < 1 || t0->ne[1] > VS_VISION_MAX_DIM || t2->ne[1] < 1 || t2->ne[1] > VS_VISION_MAX_DIM)
        return vs_error_set(err, VS_ERR_FORMAT, "%s: projector widths out of range", m->path);
    c->proj_hidden = (int32_t)t0->ne[1];
    c->proj_out = (int32_t)t2->ne[1];
    vs_status st;
    if ((st = load_mat(m, "mm.0.weight", c->width, c->proj_hidden, &p->mm0, err)) != VS_OK) return st;
    if ((st = load_mat(m, "mm.2.weight", c->proj_hidden, c->proj_out, &p->mm2, err)) != VS_OK) return st;
    if ((st = load_vec1(m, "mm.0.bias", c->proj_hidden, &p->mm0_b, NULL, err)) != VS_OK) return st;
    if ((st = load_vec1(m, "mm.2.bias", c->proj_out, &p->mm2_b, NULL, err)) != VS_OK) return st;
    int64_t h = 0;
    int r = vs_gguf_get_int(m->g, "vlmspec.vision.tower_hash", &h);
    if (r == -1)
        return vs_error_set(err, VS_ERR_FORMAT, "%s: vlmspec.vision.tower_hash is not an integer", m->path);
    p->has_tower_hash = r == 1;
    p->tower_hash = (uint64_t)h;
    p->cfg = *c;
    return VS_OK;
}

vs_mmproj *vs_mmproj_open(const char *path, vs_error *err) {
    vs_mmproj *m = vs_calloc(1, sizeof(vs_mmproj));
    if (!m) {
        vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory", path);
        return NULL;
    }
    m->path = vs_strdup(path);
    m->g = vs_gguf_open(path, err);
    if (!m->path || !m->g) {
        if (!m->path) vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory", path);
        vs_mmproj_free(m);
        return NULL;
    }
    vs_status st = read_config(m, err);
    if (st == VS_OK) st = vs_gguf_check_finite(m->g, err);
    if (st == VS_OK) {
        m->cfg.proj_hidden = m->cfg.proj_out = 1; /* checked for real once the projector is read */
        st = vs_vision_config_check(&m->cfg, path, err);
    }
    if (st == VS_OK && m->cfg.has_tower) {
        st = load_tower(m, err);
        m->has_tower = st == VS_OK;
    }
    if (st == VS_OK) st = load_projector(m, err);
    if (st == VS_OK) {
        m->tower.cfg = m->cfg;
        st = vs_vision_config_check(&m->cfg, path, err);
    }
    if (st != VS_OK) {
        vs_mmproj_free(m);
        return NULL;
    }
    return m;
}

/* ------------------------------------------------------------------------------------------------
 * Row operations, split over the pool's threads by rows. */

typedef enum act_kind { ACT_NONE = 0, ACT_QUICK_GELU, ACT_GELU } act_kind;

static inline float quick_gelu(float x) { return x / (1.0f + expf(-1.702f * x)); }
static inline float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }

typedef struct rowjob rowjob;
struct rowjob {
    void (*fn)(const rowjob *j, int64_t r0, int64_t r1);
    int64_t n_rows, d;
    float *x;           /* in/out rows (n_rows, d) */
    const float *y;     /* second operand rows, or NULL */
    const float *w, *b; /* per-column weight / bias (d), or NULL */
    float eps, scale;
    act_kind act;
};

static void rowjob_task(void *ctx, int ith, int nth) {
    const rowjob *j = ctx;
    int64_t lo, hi;
    vs_split_range(j->n_rows, ith, nth, 1, &lo, &hi);
    if (lo < hi) j->fn(j, lo, hi);
}

/* x = LayerNorm(y) * w + b (x and y may not alias unless y == x). */
static void op_layernorm(const rowjob *j, int64_t r0, int64_t r1) {
    const int64_t d = j->d;
    for (int64_t r = r0; r < r1; r++) {
        const float *in = j->y + r * d;
        float *out = j->x + r * d;
        double s = 0.0;
        for (int64_t i = 0; i < d; i++)
            s += in[i];
        const double mean = s / (double)d;
        double v = 0.0;
        for (int64_t i = 0; i < d; i++)
            v += ((double)in[i] - mean) * ((double)in[i] - mean);
        const float inv = (float)(1.0 / sqrt(v / (double)d + (double)j->eps));
        const float mf = (float)mean;
        for (int64_t i = 0; i < d; i++)
            out[i] = (in[i] - mf) * inv * j->w[i] + j->b[i];
    }
}

/* x = act(x + b) */
static void op_bias_act(const rowjob *j, int64_t r0, int64_t r1) {
    const int64_t d = j->d;
    for (int64_t r = r0; r < r1; r++) {
        float *x = j->x + r * d;
        if (j->b)
            for (int64_t i = 0; i < d; i++)
                x[i] += j->b[i];
        if (j->act == ACT_QUICK_GELU)
            for (int64_t i = 0; i < d; i++)
                x[i] = quick_gelu(x[i]);
        else if (j->act == ACT_GELU)
            for (int64_t i = 0; i < d; i++)
                x[i] = gelu_erf(x[i]);
    }
}

/* x += y + b (residual) */
static void op_residual(const rowjob *j, int64_t r0, int64_t r1) {
    const int64_t d = j->d;
    for (int64_t r = r0; r < r1; r++) {
        float *x = j->x + r * d;
        const float *y = j->y + r * d;
        for (int64_t i = 0; i < d; i++)
            x[i] += y[i] + j->b[i];
    }
}

/* x = softmax(scale * x) per row */
static void op_softmax(const rowjob *j, int64_t r0, int64_t r1) {
    const int64_t d = j->d;
    for (int64_t r = r0; r < r1; r++) {
        float *x = j->x + r * d;
        float mx = -INFINITY;
        for (int64_t i = 0; i < d; i++) {
            x[i] *= j->scale;
            mx = x[i] > mx ? x[i] : mx;
        }
        float sum = 0.0f;
        for (int64_t i = 0; i < d; i++) {
            x[i] = expf(x[i] - mx);
            sum += x[i];
        }
        const float inv = 1.0f / sum;
        for (int64_t i = 0; i < d; i++)
            x[i] *= inv;
    }
}

static void run_rows(vs_threadpool *tp, rowjob *j) {
    if (j->n_rows <= 0) return;
    if (!tp || vs_threadpool_size(tp) == 1 || j->n_rows * j->d < 4096)
        j->fn(j, 0, j->n_rows);
    else
        vs_threadpool_run(tp, rowjob_task, j);
}

static void layernorm_rows(vs_threadpool *tp, float *out, const float *in, int64_t n, int64_t d,
                           const float *w, const float *b, float eps) {
    rowjob j = {.fn = op_layernorm, .n_rows = n, .d = d, .x = out, .y = in, .w = w, .b = b, .eps = eps};
    run_rows(tp, &j);
}
static void bias_act_rows(vs_threadpool *tp, float *x, int64_t n, int64_t d, const float *b, act_kind act) {
    rowjob j = {.fn = op_bias_act, .n_rows = n, .d = d, .x = x, .b = b, .act = act};
    run_rows(tp, &j);
}
static void residual_rows(vs_threadpool *tp, float *x, const float *y, int64_t n, int64_t d, const float *b) {
    rowjob j = {.fn = op_residual, .n_rows = n, .d = d, .x = x, .y = y, .b = b};
    run_rows(tp, &j);
}
static void softmax_rows(vs_threadpool *tp, float *x, int64_t n, int64_t d, float scale) {
    rowjob j = {.fn = op_softmax, .n_rows = n, .d = d, .x = x, .scale = scale};
    run_rows(tp, &j);
}

/* y (n, m->n_out) = x (n, m->n_in) W^T */
static void matmul(vs_threadpool *tp, const vmat *m, const float *x, int64_t n, float *y) {
    vs_matmul(tp, m->type, m->data, m->n_out, m->n_in, x, n, y);
}

/* ------------------------------------------------------------------------------------------------
 * Tower forward */

typedef struct tower_scratch {
    float *x;                 /* (n, D) residual stream */
    float *h;                 /* (n, D) normed input of a sub-layer */
    float *q, *k, *v;         /* (n, D) */
    float *att;               /* (n, D) concatenated head outputs */
    float *ff;                /* (n, F) MLP hidden (also holds the patch matrix (G*G, 3*P*P) at the start) */
    float *qh, *kh, *vt, *oh; /* (n, dh), (n, dh), (dh, n), (n, dh) one head */
    float *s;                 /* (n, n) one head's scores / probabilities */
    float *buf;
} tower_scratch;

static vs_status scratch_alloc(tower_scratch *s, const vs_vision_config *c, vs_error *err) {
    const int64_t n = (int64_t)vs_vision_n_patches(c) + 1, D = c->width, F = c->ffn, dh = D / c->n_heads;
    const int64_t P = c->patch_size;
    const int64_t ffn_sz = VS_MAX(n * F, (n - 1) * 3 * P * P);
    /* every piece rounded to 16 floats so each starts 64-byte aligned */
#define R16(v) (((v) + 15) / 16 * 16)
    const int64_t sizes[] = {R16(n * D),  R16(n * D),  R16(n * D),  R16(n * D),  R16(n * D),  R16(n * D),
                             R16(ffn_sz), R16(n * dh), R16(n * dh), R16(n * dh), R16(n * dh), R16(n * n)};
#undef R16
    int64_t total = 0;
    for (size_t i = 0; i < VS_ARRAY_LEN(sizes); i++)
        total += sizes[i];
    s->buf = vs_malloc((size_t)total * sizeof(float));
    if (!s->buf)
        return vs_error_set(err, VS_ERR_NOMEM, "vision encode: out of memory for %lld floats of scratch",
                            (long long)total);
    float **dst[] = {&s->x,  &s->h,  &s->q,  &s->k,  &s->v,  &s->att,
                     &s->ff, &s->qh, &s->kh, &s->vt, &s->oh, &s->s};
    float *p = s->buf;
    for (size_t i = 0; i < VS_ARRAY_LEN(sizes); i++) {
        *dst[i] = p;
        p += sizes[i];
    }
    return VS_OK;
}

/* Patch embedding: rows 1..G*G of x = conv(pixels) (no bias), row 0 = class embedding, + positions. */
static void embed_patches(const vs_vision_tower *t, vs_threadpool *tp, const float *pixels,
                          tower_scratch *s) {
    const vs_vision_config *c = &t->cfg;
    const int64_t S = c->image_size, P = c->patch_size, G = S / P, D = c->width, K = 3 * P * P;
    float *cols = s->ff; /* (G*G, 3*P*P) im2col: element (ch, ky, kx) of patch (r, q) */
    for (int64_t r = 0; r < G; r++)
        for (int64_t q = 0; q < G; q++) {
            float *dst = cols + (r * G + q) * K;
            for (int64_t ch = 0; ch < 3; ch++)
                for (int64_t ky = 0; ky < P; ky++)
                    memcpy(dst + (ch * P + ky) * P, pixels + (ch * S + r * P + ky) * S + q * P,
                           (size_t)P * sizeof(float));
        }
    matmul(tp, &t->patch, cols, G * G, s->x + D);
    memcpy(s->x, t->class_embd, (size_t)D * sizeof(float));
    const int64_t n = G * G + 1;
    for (int64_t i = 0; i < n * D; i++)
        s->x[i] += t->pos_embd[i];
}

/* Multi-head bidirectional attention of h (n, D) into s->att, using q/k/v scratch. When imp is
 * non-NULL it receives the class token's attention to each patch, averaged over heads. */
static void attention(const vs_vision_tower *t, const vblock *b, vs_threadpool *tp, tower_scratch *s,
                      int64_t n, float *imp) {
    const vs_vision_config *c = &t->cfg;
    const int64_t D = c->width, H = c->n_heads, dh = D / H;
    matmul(tp, &b->q, s->h, n, s->q);
    matmul(tp, &b->k, s->h, n, s->k);
    matmul(tp, &b->v, s->h, n, s->v);
    bias_act_rows(tp, s->q, n, D, b->q_b, ACT_NONE);
    bias_act_rows(tp, s->k, n, D, b->k_b, ACT_NONE);
    bias_act_rows(tp, s->v, n, D, b->v_b, ACT_NONE);
    const float scale = 1.0f / sqrtf((float)dh);
    if (imp) memset(imp, 0, (size_t)(n - 1) * sizeof(float));
    for (int64_t hd = 0; hd < H; hd++) {
        for (int64_t i = 0; i < n; i++) {
            memcpy(s->qh + i * dh, s->q + i * D + hd * dh, (size_t)dh * sizeof(float));
            memcpy(s->kh + i * dh, s->k + i * D + hd * dh, (size_t)dh * sizeof(float));
            for (int64_t e = 0; e < dh; e++)
                s->vt[e * n + i] = s->v[i * D + hd * dh + e];
        }
        /* scores (n queries, n keys): the keys act as the "weight" rows */
        vs_matmul(tp, VS_TYPE_F32, s->kh, n, dh, s->qh, n, s->s);
        softmax_rows(tp, s->s, n, n, scale);
        if (imp)
            for (int64_t i = 1; i < n; i++)
                imp[i - 1] += s->s[i] / (float)H;
        vs_matmul(tp, VS_TYPE_F32, s->vt, dh, n, s->s, n, s->oh);
        for (int64_t i = 0; i < n; i++)
            memcpy(s->att + i * D + hd * dh, s->oh + i * dh, (size_t)dh * sizeof(float));
    }
}

vs_status vs_vision_encode(const vs_vision_tower *t, vs_threadpool *tp, const float *pixels,
                           const vs_vision_encode_opts *opts, vs_vision_features *out, vs_error *err) {
    memset(out, 0, sizeof(*out));
    if (!t || !pixels) return vs_error_set(err, VS_ERR_INVALID, "vision encode: no tower or no pixels");
    const vs_vision_config *c = &t->cfg;
    const int64_t G = vs_vision_grid(c), n = G * G + 1, D = c->width, F = c->ffn;
    const bool want_imp = opts && opts->importance;
    tower_scratch s;
    vs_status st = scratch_alloc(&s, c, err);
    if (st != VS_OK) return st;
    out->data = vs_malloc((size_t)(n - 1) * (size_t)D * sizeof(float));
    out->importance = want_imp ? vs_calloc((size_t)(n - 1), sizeof(float)) : NULL;
    if (!out->data || (want_imp && !out->importance)) {
        vs_free(s.buf);
        vs_vision_features_free(out);
        return vs_error_set(err, VS_ERR_NOMEM, "vision encode: out of memory for features");
    }
    const act_kind act = c->use_gelu ? ACT_GELU : ACT_QUICK_GELU;
#define TRACE(stage)                                                                                         \
    do {                                                                                                     \
        if (opts && opts->trace) opts->trace(opts->trace_ctx, (stage), s.x, n, D);                           \
    } while (0)

    embed_patches(t, tp, pixels, &s);
    TRACE(VS_VISION_STAGE_EMBED);
    layernorm_rows(tp, s.x, s.x, n, D, t->pre_ln_w, t->pre_ln_b, c->eps);
    TRACE(VS_VISION_STAGE_PRE_LN);
    for (int i = 0; i < c->n_blocks; i++) {
        const vblock *b = &t->blocks[i];
        layernorm_rows(tp, s.h, s.x, n, D, b->ln1_w, b->ln1_b, c->eps);
        attention(t, b, tp, &s, n, (want_imp && i == c->n_blocks - 1) ? out->importance : NULL);
        matmul(tp, &b->o, s.att, n, s.h);
        residual_rows(tp, s.x, s.h, n, D, b->o_b);
        layernorm_rows(tp, s.h, s.x, n, D, b->ln2_w, b->ln2_b, c->eps);
        matmul(tp, &b->fc1, s.h, n, s.ff);
        bias_act_rows(tp, s.ff, n, F, b->fc1_b, act);
        matmul(tp, &b->fc2, s.ff, n, s.h);
        residual_rows(tp, s.x, s.h, n, D, b->fc2_b);
        TRACE(i);
    }
#undef TRACE
    if (t->post_ln_w) layernorm_rows(tp, s.x, s.x, n, D, t->post_ln_w, t->post_ln_b, c->eps);
    /* drop the class token */
    memcpy(out->data, s.x + D, (size_t)(n - 1) * (size_t)D * sizeof(float));
    if (want_imp && c->n_blocks == 0) { /* no block, no attention: no scores */
        vs_free(out->importance);
        out->importance = NULL;
    }
    out->grid_h = out->grid_w = (int32_t)G;
    out->width = (int32_t)D;
    vs_free(s.buf);
    return VS_OK;
}

vs_status vs_vision_encode_image(const vs_vision_tower *t, vs_threadpool *tp, const vs_image *img,
                                 vs_preproc_mode mode, const vs_vision_encode_opts *opts,
                                 vs_vision_features *out, vs_error *err) {
    memset(out, 0, sizeof(*out));
    if (!t) return vs_error_set(err, VS_ERR_INVALID, "vision encode: no vision tower (projector-only file?)");
    const int64_t S = t->cfg.image_size;
    float *pixels = vs_malloc((size_t)(3 * S * S) * sizeof(float));
    if (!pixels) return vs_error_set(err, VS_ERR_NOMEM, "vision encode: out of memory");
    vs_preproc p;
    vs_vision_preproc(&t->cfg, mode, &p);
    vs_status st = vs_image_preprocess(img, &p, pixels, err);
    if (st == VS_OK) st = vs_vision_encode(t, tp, pixels, opts, out, err);
    vs_free(pixels);
    return st;
}

vs_status vs_vision_encode_file(const vs_vision_tower *t, vs_threadpool *tp, const char *path,
                                vs_preproc_mode mode, const vs_vision_encode_opts *opts,
                                vs_vision_features *out, vs_error *err) {
    memset(out, 0, sizeof(*out));
    vs_image img;
    /* the size limit follows the model's input side (image.h); load errors already name the path */
    vs_status st = vs_image_load_max(&img, path, vs_image_max_side(t ? t->cfg.image_size : 0), err);
    if (st != VS_OK) return st;
    st = vs_vision_encode_image(t, tp, &img, mode, opts, out, err);
    if (st != VS_OK) vs_error_wrap(err, "%s", path); /* the wrap adds the ": " */
    vs_image_free(&img);
    return st;
}

/* ------------------------------------------------------------------------------------------------
 * Projector forward */

vs_status vs_vision_project(const vs_vision_projector *p, vs_threadpool *tp, const float *feat,
                            int64_t n_rows, float *out, vs_error *err) {
    if (!p || (!feat && n_rows > 0) || n_rows < 0)
        return vs_error_set(err, VS_ERR_INVALID, "vision project: bad arguments");
    if (n_rows == 0) return VS_OK;
    const int64_t H = p->cfg.proj_hidden, O = p->cfg.proj_out;
    float *hid = vs_malloc((size_t)n_rows * (size_t)H * sizeof(float));
    if (!hid)
        return vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory projecting %lld rows", p->file->path,
                            (long long)n_rows);
    matmul(tp, &p->mm0, feat, n_rows, hid);
    bias_act_rows(tp, hid, n_rows, H, p->mm0_b, ACT_GELU);
    matmul(tp, &p->mm2, hid, n_rows, out);
    bias_act_rows(tp, out, n_rows, O, p->mm2_b, ACT_NONE);
    vs_free(hid);
    return VS_OK;
}

vs_status vs_vision_embed(const vs_vision_projector *p, vs_threadpool *tp, const vs_vision_features *f,
                          int32_t pool_k, float **rows, int64_t *n_rows, vs_error *err) {
    *rows = NULL;
    *n_rows = 0;
    if (!p || !f || !f->data)
        return vs_error_set(err, VS_ERR_INVALID, "vision embed: no projector or no features");
    if (f->width != p->cfg.width)
        return vs_error_set(err, VS_ERR_INVALID, "%s: projector expects features of width %d, got %d",
                            p->file->path, p->cfg.width, f->width);
    vs_vision_features pooled = {0};
    const vs_vision_features *src = f;
    vs_status st;
    if (pool_k > 1) {
        if ((st = vs_vision_features_pool(f, pool_k, &pooled, err)) != VS_OK) return st;
        src = &pooled;
    }
    const int64_t n = vs_vision_features_rows(src);
    float *o = vs_malloc((size_t)VS_MAX(n, 1) * (size_t)p->cfg.proj_out * sizeof(float));
    if (!o) {
        vs_vision_features_free(&pooled);
        return vs_error_set(err, VS_ERR_NOMEM, "vision embed: out of memory");
    }
    st = vs_vision_project(p, tp, src->data, n, o, err);
    vs_vision_features_free(&pooled);
    if (st != VS_OK) {
        vs_free(o);
        return st;
    }
    *rows = o;
    *n_rows = n;
    return VS_OK;
}

/* ------------------------------------------------------------------------------------------------
 * Features, pooling, selection */

void vs_vision_features_free(vs_vision_features *f) {
    if (!f) return;
    vs_free(f->data);
    vs_free(f->importance);
    memset(f, 0, sizeof(*f));
}

vs_status vs_vision_features_pool(const vs_vision_features *in, int32_t k, vs_vision_features *out,
                                  vs_error *err) {
    memset(out, 0, sizeof(*out));
    if (!in || !in->data || k < 1 || in->grid_h < 1 || in->grid_w < 1)
        return vs_error_set(err, VS_ERR_INVALID, "pool: bad features or pool size %d", (int)k);
    const int32_t oh = vs_pool_out_side(in->grid_h, k), ow = vs_pool_out_side(in->grid_w, k);
    out->data = vs_malloc((size_t)oh * (size_t)ow * (size_t)in->width * sizeof(float));
    if (in->importance) out->importance = vs_malloc((size_t)oh * (size_t)ow * sizeof(float));
    if (!out->data || (in->importance && !out->importance)) {
        vs_vision_features_free(out);
        return vs_error_set(err, VS_ERR_NOMEM, "pool: out of memory");
    }
    vs_pool_grid_avg(in->data, in->grid_h, in->grid_w, in->width, k, out->data, &out->grid_h, &out->grid_w);
    if (in->importance)
        vs_pool_grid_avg(in->importance, in->grid_h, in->grid_w, 1, k, out->importance, NULL, NULL);
    out->width = in->width;
    return VS_OK;
}

typedef struct scored {
    float s;
    int64_t i;
} scored;

static int cmp_scored_desc(const void *a, const void *b) {
    const scored *x = a, *y = b;
    if (x->s > y->s) return -1;
    if (x->s < y->s) return 1;
    return (x->i > y->i) - (x->i < y->i);
}
static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

void vs_vision_select_top(const float *scores, int64_t n, int64_t n_keep, int64_t *idx) {
    if (n_keep > n) n_keep = n;
    if (n_keep <= 0) return;
    scored *v = vs_malloc((size_t)n * sizeof(scored));
    if (!v) { /* fall back to the first n_keep rows: a valid (if uninformed) selection */
        for (int64_t i = 0; i < n_keep; i++)
            idx[i] = i;
        return;
    }
    for (int64_t i = 0; i < n; i++)
        v[i] = (scored){isnan(scores[i]) ? -INFINITY : scores[i], i};
    qsort(v, (size_t)n, sizeof(scored), cmp_scored_desc);
    for (int64_t i = 0; i < n_keep; i++)
        idx[i] = v[i].i;
    qsort(idx, (size_t)n_keep, sizeof(int64_t), cmp_i64);
    vs_free(v);
}

void vs_vision_gather_rows(const float *rows, int64_t width, const int64_t *idx, int64_t n_idx, float *out) {
    for (int64_t i = 0; i < n_idx; i++)
        memcpy(out + i * width, rows + idx[i] * width, (size_t)width * sizeof(float));
}

/* ------------------------------------------------------------------------------------------------
 * Tower identity */

/* Every tensor of a tower in a fixed logical order (fc1 before fc2 whatever the naming). */
static int64_t tower_tensors(const vs_vision_tower *t, const vs_gguf_tensor **out, int64_t cap) {
    int64_t n = 0;
#define PUT(x)                                                                                               \
    do {                                                                                                     \
        if (n < cap) out[n] = (x);                                                                           \
        n++;                                                                                                 \
    } while (0)
    for (int i = 0; i < 4; i++)
        PUT(t->vec_t[i]);
    PUT(t->patch.t);
    for (int i = 0; i < t->cfg.n_blocks; i++) {
        const vblock *b = &t->blocks[i];
        for (int j = 0; j < 10; j++)
            PUT(b->vec_t[j]);
        PUT(b->q.t);
        PUT(b->k.t);
        PUT(b->v.t);
        PUT(b->o.t);
        PUT(b->fc1.t);
        PUT(b->fc2.t);
    }
    if (t->post_ln_w) {
        PUT(t->vec_t[4]);
        PUT(t->vec_t[5]);
    }
#undef PUT
    return n;
}

/* How many tensors tower_tensors lists. */
static int64_t tower_n_tensors(const vs_vision_tower *t) {
    return 5 + 16 * (int64_t)t->cfg.n_blocks + (t->post_ln_w ? 2 : 0);
}

static bool config_same(const vs_vision_config *a, const vs_vision_config *b) {
    return a->image_size == b->image_size && a->patch_size == b->patch_size && a->width == b->width &&
           a->ffn == b->ffn && a->n_heads == b->n_heads && a->n_blocks == b->n_blocks && a->eps == b->eps &&
           a->use_gelu == b->use_gelu && a->post_ln == b->post_ln && !memcmp(a->mean, b->mean, sizeof(a->mean)) &&
           !memcmp(a->std, b->std, sizeof(a->std));
}

bool vs_vision_tower_same(const vs_vision_tower *a, const vs_vision_tower *b) {
    if (!a || !b) return false;
    if (a == b) return true;
    if (!config_same(&a->cfg, &b->cfg)) return false;
    const int64_t n = tower_n_tensors(a);
    const vs_gguf_tensor **ta = vs_malloc((size_t)n * sizeof(*ta)), **tb = vs_malloc((size_t)n * sizeof(*tb));
    bool same = ta && tb;
    if (same) {
        tower_tensors(a, ta, n);
        tower_tensors(b, tb, n);
        for (int64_t i = 0; i < n && same; i++) {
            const vs_gguf_tensor *x = ta[i], *y = tb[i];
            same = x->type == y->type && x->nbytes == y->nbytes && !memcmp(x->ne, y->ne, sizeof(x->ne)) &&
                   (x->data == y->data || !memcmp(x->data, y->data, (size_t)x->nbytes));
        }
    }
    vs_free(ta);
    vs_free(tb);
    return same;
}

static uint64_t hash_bytes(uint64_t h, const void *p, size_t n) {
    const uint64_t prime = 0x100000001b3ull;
    const uint8_t *b = p;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = (h ^ w) * prime;
        h ^= h >> 29;
    }
    for (; i < n; i++)
        h = (h ^ b[i]) * prime;
    return h;
}

uint64_t vs_vision_tower_hash(const vs_vision_tower *t) {
    uint64_t h = 0xcbf29ce484222325ull;
    const vs_vision_config *c = &t->cfg;
    const int32_t ints[] = {c->image_size, c->patch_size, c->width,   c->ffn,
                            c->n_heads,    c->n_blocks,   c->use_gelu};
    h = hash_bytes(h, ints, sizeof(ints));
    h = hash_bytes(h, &c->eps, sizeof(c->eps));
    h = hash_bytes(h, c->mean, sizeof(c->mean));
    h = hash_bytes(h, c->std, sizeof(c->std));
    const int64_t n = tower_n_tensors(t);
    const vs_gguf_tensor **ts = vs_malloc((size_t)n * sizeof(*ts));
    if (!ts) return 0;
    tower_tensors(t, ts, n);
    for (int64_t i = 0; i < n; i++) {
        const int64_t meta[5] = {ts[i]->type, ts[i]->ne[0], ts[i]->ne[1], ts[i]->ne[2], ts[i]->ne[3]};
        h = hash_bytes(h, meta, sizeof(meta));
        h = hash_bytes(h, ts[i]->data, (size_t)ts[i]->nbytes);
    }
    vs_free(ts);
    /* 63 bits so it reads back through integer getters; 0 means "no hash recorded" in files */
    h &= 0x7fffffffffffffffull;
    return h ? h : 1;
}

vs_status vs_vision_check_projector(const vs_vision_tower *t, const vs_vision_projector *p, vs_error *err) {
    if (!t || !p) return vs_error_set(err, VS_ERR_INVALID, "vision: no tower or no projector");
    if (t->cfg.width != p->cfg.width)
        return vs_error_set(err, VS_ERR_INVALID,
                            "%s: projector reads features of width %d but the vision tower of "
                            "%s produces width %d",
                            p->file->path, p->cfg.width, t->file->path, t->cfg.width);
    if (p->file == t->file) return VS_OK;
    const vs_vision_tower *pt = vs_mmproj_tower(p->file);
    if (pt && !vs_vision_tower_same(t, pt))
        return vs_error_set(err, VS_ERR_INVALID,
                            "%s carries a different vision tower than %s: its projector was "
                            "not trained on that tower's features",
                            p->file->path, t->file->path);
    if (!pt && p->has_tower_hash && p->tower_hash != vs_vision_tower_hash(t))
        return vs_error_set(err, VS_ERR_INVALID,
                            "%s: projector was trained on a different vision tower than the one "
                            "in %s (vlmspec.vision.tower_hash differs)",
                            p->file->path, t->file->path);
    return VS_OK;
}

/* ------------------------------------------------------------------------------------------------
 * Float weights: allocation, randomisation, reading back */

/* Visits every array of w with its length: fn(ctx, &pointer, n, kind) where kind 0 = matrix
 * (n_in in `in`), 1 = bias, 2 = LN gain, 3 = embedding. */
typedef void (*visit_fn)(void *ctx, float **p, int64_t n, int kind, int64_t in);

static void visit_weights(vs_vision_weights *w, const vs_vision_config *c, visit_fn fn, void *ctx) {
    const int64_t D = c->width, F = c->ffn, P = c->patch_size, H = c->proj_hidden, O = c->proj_out;
    const int64_t n_tok = (int64_t)vs_vision_n_patches(c) + 1;
    if (c->has_tower) {
        fn(ctx, &w->class_embd, D, 3, 0);
        fn(ctx, &w->patch_w, D * 3 * P * P, 0, 3 * P * P);
        fn(ctx, &w->pos_embd, n_tok * D, 3, 0);
        fn(ctx, &w->pre_ln_w, D, 2, 0);
        fn(ctx, &w->pre_ln_b, D, 1, 0);
        if (c->post_ln) {
            fn(ctx, &w->post_ln_w, D, 2, 0);
            fn(ctx, &w->post_ln_b, D, 1, 0);
        }
        for (int i = 0; w->blocks && i < c->n_blocks; i++) {
            vs_vision_block_weights *b = &w->blocks[i];
            fn(ctx, &b->ln1_w, D, 2, 0);
            fn(ctx, &b->ln1_b, D, 1, 0);
            fn(ctx, &b->q_w, D * D, 0, D);
            fn(ctx, &b->q_b, D, 1, 0);
            fn(ctx, &b->k_w, D * D, 0, D);
            fn(ctx, &b->k_b, D, 1, 0);
            fn(ctx, &b->v_w, D * D, 0, D);
            fn(ctx, &b->v_b, D, 1, 0);
            fn(ctx, &b->o_w, D * D, 0, D);
            fn(ctx, &b->o_b, D, 1, 0);
            fn(ctx, &b->ln2_w, D, 2, 0);
            fn(ctx, &b->ln2_b, D, 1, 0);
            fn(ctx, &b->fc1_w, F * D, 0, D);
            fn(ctx, &b->fc1_b, F, 1, 0);
            fn(ctx, &b->fc2_w, D * F, 0, F);
            fn(ctx, &b->fc2_b, D, 1, 0);
        }
    }
    fn(ctx, &w->mm0_w, H * D, 0, D);
    fn(ctx, &w->mm0_b, H, 1, 0);
    fn(ctx, &w->mm2_w, O * H, 0, H);
    fn(ctx, &w->mm2_b, O, 1, 0);
}

static void visit_alloc(void *ctx, float **p, int64_t n, int kind, int64_t in) {
    bool *ok = ctx;
    *p = vs_calloc((size_t)n, sizeof(float));
    if (!*p) *ok = false;
}
static void visit_free(void *ctx, float **p, int64_t n, int kind, int64_t in) {
    vs_free(*p);
    *p = NULL;
}

vs_status vs_vision_weights_alloc(vs_vision_weights *w, const vs_vision_config *cfg, vs_error *err) {
    memset(w, 0, sizeof(*w));
    vs_status st = vs_vision_config_check(cfg, "vision weights", err);
    if (st != VS_OK) return st;
    if (cfg->has_tower) {
        w->blocks = vs_calloc((size_t)VS_MAX(cfg->n_blocks, 1), sizeof(vs_vision_block_weights));
        if (!w->blocks) return vs_error_set(err, VS_ERR_NOMEM, "vision weights: out of memory");
    }
    bool ok = true;
    visit_weights(w, cfg, visit_alloc, &ok);
    if (!ok) {
        vs_vision_weights_free(w, cfg);
        return vs_error_set(err, VS_ERR_NOMEM, "vision weights: out of memory");
    }
    return VS_OK;
}

void vs_vision_weights_free(vs_vision_weights *w, const vs_vision_config *cfg) {
    if (!w) return;
    visit_weights(w, cfg, visit_free, NULL);
    vs_free(w->blocks);
    memset(w, 0, sizeof(*w));
}

static void visit_random(void *ctx, float **p, int64_t n, int kind, int64_t in) {
    vs_rng *r = ctx;
    float *a = *p;
    if (!a) return;
    const float sd = kind == 0 ? 1.0f / sqrtf((float)in) : kind == 3 ? 0.5f : 0.1f;
    for (int64_t i = 0; i < n; i++)
        a[i] = (kind == 2 ? 1.0f : 0.0f) + sd * vs_rng_normal(r);
}

void vs_vision_weights_randomize(vs_vision_weights *w, const vs_vision_config *cfg, uint64_t seed) {
    vs_rng r;
    vs_rng_seed(&r, seed);
    visit_weights(w, cfg, visit_random, &r);
}

static void deq_mat(const vmat *m, float *dst) {
    vs_dequantize_row(m->type, m->data, dst, m->n_out * m->n_in);
}

vs_status vs_mmproj_read_weights(const vs_mmproj *m, vs_vision_weights *w, vs_error *err) {
    const vs_vision_config *c = &m->cfg;
    vs_status st = vs_vision_weights_alloc(w, c, err);
    if (st != VS_OK) return st;
    const int64_t D = c->width, F = c->ffn, n_tok = (int64_t)vs_vision_n_patches(c) + 1;
#define CPY(dst, src, n) memcpy((dst), (src), (size_t)(n) * sizeof(float))
    if (m->has_tower) {
        const vs_vision_tower *t = &m->tower;
        CPY(w->class_embd, t->class_embd, D);
        CPY(w->pos_embd, t->pos_embd, n_tok * D);
        CPY(w->pre_ln_w, t->pre_ln_w, D);
        CPY(w->pre_ln_b, t->pre_ln_b, D);
        if (c->post_ln) {
            CPY(w->post_ln_w, t->post_ln_w, D);
            CPY(w->post_ln_b, t->post_ln_b, D);
        }
        deq_mat(&t->patch, w->patch_w);
        for (int i = 0; i < c->n_blocks; i++) {
            const vblock *b = &t->blocks[i];
            vs_vision_block_weights *o = &w->blocks[i];
            CPY(o->ln1_w, b->ln1_w, D);
            CPY(o->ln1_b, b->ln1_b, D);
            CPY(o->ln2_w, b->ln2_w, D);
            CPY(o->ln2_b, b->ln2_b, D);
            deq_mat(&b->q, o->q_w);
            deq_mat(&b->k, o->k_w);
            deq_mat(&b->v, o->v_w);
            deq_mat(&b->o, o->o_w);
            CPY(o->q_b, b->q_b, D);
            CPY(o->k_b, b->k_b, D);
            CPY(o->v_b, b->v_b, D);
            CPY(o->o_b, b->o_b, D);
            deq_mat(&b->fc1, o->fc1_w);
            CPY(o->fc1_b, b->fc1_b, F);
            deq_mat(&b->fc2, o->fc2_w);
            CPY(o->fc2_b, b->fc2_b, D);
        }
    }
    deq_mat(&m->proj.mm0, w->mm0_w);
    CPY(w->mm0_b, m->proj.mm0_b, c->proj_hidden);
    deq_mat(&m->proj.mm2, w->mm2_w);
    CPY(w->mm2_b, m->proj.mm2_b, c->proj_out);
#undef CPY
    return VS_OK;
}

/* ------------------------------------------------------------------------------------------------
 * Writer */

/* llama.cpp's general.file_type for the matrix type. */
static uint32_t file_type_of(vs_type t) {
    switch (t) {
    case VS_TYPE_F32: return 0;
    case VS_TYPE_F16: return 1;
    case VS_TYPE_Q4_0: return 2;
    case VS_TYPE_Q8_0: return 7;
    case VS_TYPE_Q4_K: return 14; /* llama.cpp's "mostly Q4_K" (Q4_K_S): every matrix one type */
    case VS_TYPE_Q5_K: return 16; /* Q5_K_S */
    case VS_TYPE_Q6_K: return 18;
    case VS_TYPE_BF16: return 32;
    }
    return 0;
}

static vs_status add_f32(vs_gguf_writer *gw, const char *name, int n_dims, const int64_t *ne,
                         const float *data, vs_error *err) {
    if (!data) return vs_error_set(err, VS_ERR_INVALID, "mmproj write: tensor %s has no data", name);
    return vs_gguf_add_tensor(gw, name, VS_TYPE_F32, n_dims, ne, data, err);
}

static vs_status add_mat(vs_gguf_writer *gw, const char *name, int n_dims, const int64_t *ne, int64_t n_in,
                         int64_t n_out, const float *data, vs_type type, vs_error *err) {
    if (!data) return vs_error_set(err, VS_ERR_INVALID, "mmproj write: tensor %s has no data", name);
    if (type == VS_TYPE_F32) return vs_gguf_add_tensor(gw, name, type, n_dims, ne, data, err);
    const size_t rb = vs_type_row_bytes(type, n_in);
    if (rb == 0)
        return vs_error_set(err, VS_ERR_UNSUPPORTED,
                            "mmproj write: tensor %s: rows of %lld values cannot be stored as %s", name,
                            (long long)n_in, vs_type_name(type));
    uint8_t *buf = vs_malloc(rb * (size_t)n_out);
    if (!buf) return vs_error_set(err, VS_ERR_NOMEM, "mmproj write: out of memory for %s", name);
    for (int64_t r = 0; r < n_out; r++)
        vs_quantize_row(type, data + r * n_in, buf + (size_t)r * rb, n_in);
    vs_status st = vs_gguf_add_tensor(gw, name, type, n_dims, ne, buf, err);
    vs_free(buf);
    return st;
}

static vs_status write_tensors(vs_gguf_writer *gw, const vs_vision_config *c, const vs_vision_weights *w,
                               vs_type mt, vs_error *err) {
    const int64_t D = c->width, F = c->ffn, P = c->patch_size, H = c->proj_hidden, O = c->proj_out;
    const int64_t n_tok = (int64_t)vs_vision_n_patches(c) + 1;
    vs_status st;
    char name[96];
    const int64_t ne_d[1] = {D}, ne_f[1] = {F}, ne_dd[2] = {D, D}, ne_df[2] = {D, F}, ne_fd[2] = {F, D};
#define CHK(x)                                                                                               \
    do {                                                                                                     \
        if ((st = (x)) != VS_OK) return st;                                                                  \
    } while (0)
    if (c->has_tower) {
        const int64_t ne_pos[2] = {D, n_tok}, ne_patch[4] = {P, P, 3, D};
        CHK(add_f32(gw, "v.class_embd", 1, ne_d, w->class_embd, err));
        /* a block-quantised type cannot store ne[0] = P values per row: the patch embedding stays F16 */
        const vs_type pt = vs_type_block_size(mt) > 1 ? VS_TYPE_F16 : mt;
        CHK(add_mat(gw, "v.patch_embd.weight", 4, ne_patch, 3 * P * P, D, w->patch_w, pt, err));
        CHK(add_f32(gw, "v.position_embd.weight", 2, ne_pos, w->pos_embd, err));
        CHK(add_f32(gw, "v.pre_ln.weight", 1, ne_d, w->pre_ln_w, err));
        CHK(add_f32(gw, "v.pre_ln.bias", 1, ne_d, w->pre_ln_b, err));
        if (c->post_ln) {
            if (!w->post_ln_w || !w->post_ln_b)
                return vs_error_set(err, VS_ERR_INVALID, "mmproj write: post_ln set but no weights given");
            CHK(add_f32(gw, "v.post_ln.weight", 1, ne_d, w->post_ln_w, err));
            CHK(add_f32(gw, "v.post_ln.bias", 1, ne_d, w->post_ln_b, err));
        }
        if (c->n_blocks > 0 && !w->blocks)
            return vs_error_set(err, VS_ERR_INVALID, "mmproj write: no blocks given");
        for (int i = 0; i < c->n_blocks; i++) {
            const vs_vision_block_weights *b = &w->blocks[i];
#define NM(s) (snprintf(name, sizeof(name), "v.blk.%d.%s", i, s), name)
            CHK(add_mat(gw, NM("attn_q.weight"), 2, ne_dd, D, D, b->q_w, mt, err));
            CHK(add_f32(gw, NM("attn_q.bias"), 1, ne_d, b->q_b, err));
            CHK(add_mat(gw, NM("attn_k.weight"), 2, ne_dd, D, D, b->k_w, mt, err));
            CHK(add_f32(gw, NM("attn_k.bias"), 1, ne_d, b->k_b, err));
            CHK(add_mat(gw, NM("attn_v.weight"), 2, ne_dd, D, D, b->v_w, mt, err));
            CHK(add_f32(gw, NM("attn_v.bias"), 1, ne_d, b->v_b, err));
            CHK(add_mat(gw, NM("attn_out.weight"), 2, ne_dd, D, D, b->o_w, mt, err));
            CHK(add_f32(gw, NM("attn_out.bias"), 1, ne_d, b->o_b, err));
            CHK(add_f32(gw, NM("ln1.weight"), 1, ne_d, b->ln1_w, err));
            CHK(add_f32(gw, NM("ln1.bias"), 1, ne_d, b->ln1_b, err));
            CHK(add_f32(gw, NM("ln2.weight"), 1, ne_d, b->ln2_w, err));
            CHK(add_f32(gw, NM("ln2.bias"), 1, ne_d, b->ln2_b, err));
            /* legacy naming: ffn_down = first matrix (width -> ffn), ffn_up = second */
            CHK(add_mat(gw, NM("ffn_down.weight"), 2, ne_df, D, F, b->fc1_w, mt, err));
            CHK(add_f32(gw, NM("ffn_down.bias"), 1, ne_f, b->fc1_b, err));
            CHK(add_mat(gw, NM("ffn_up.weight"), 2, ne_fd, F, D, b->fc2_w, mt, err));
            CHK(add_f32(gw, NM("ffn_up.bias"), 1, ne_d, b->fc2_b, err));
#undef NM
        }
    }
    const int64_t ne_m0[2] = {D, H}, ne_h[1] = {H}, ne_m2[2] = {H, O}, ne_o[1] = {O};
    CHK(add_mat(gw, "mm.0.weight", 2, ne_m0, D, H, w->mm0_w, mt, err));
    CHK(add_f32(gw, "mm.0.bias", 1, ne_h, w->mm0_b, err));
    CHK(add_mat(gw, "mm.2.weight", 2, ne_m2, H, O, w->mm2_w, mt, err));
    CHK(add_f32(gw, "mm.2.bias", 1, ne_o, w->mm2_b, err));
#undef CHK
    return VS_OK;
}

vs_status vs_mmproj_write(const char *path, const vs_vision_config *cfg, const vs_vision_weights *w,
                          const vs_mmproj_write_opts *opts, vs_error *err) {
    vs_status st = vs_vision_config_check(cfg, path, err);
    if (st != VS_OK) return st;
    const vs_type mt = opts ? opts->mat_type : VS_TYPE_F32;
    if (!vs_type_supported(mt))
        return vs_error_set(err, VS_ERR_UNSUPPORTED, "%s: unsupported matrix type %d", path, mt);
    vs_gguf_writer *gw = vs_gguf_writer_new();
    if (!gw) return vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory", path);
    vs_gguf_set_str(gw, "general.architecture", "clip");
    if (opts && opts->name) vs_gguf_set_str(gw, "general.name", opts->name);
    vs_gguf_set_u32(gw, "general.file_type", file_type_of(mt));
    vs_gguf_set_bool(gw, "clip.has_text_encoder", false);
    vs_gguf_set_bool(gw, "clip.has_vision_encoder", cfg->has_tower);
    vs_gguf_set_bool(gw, "clip.has_llava_projector", true);
    vs_gguf_set_str(gw, "clip.projector_type", "mlp");
    vs_gguf_set_bool(gw, "clip.use_gelu", cfg->use_gelu);
    vs_gguf_set_u32(gw, "clip.vision.image_size", (uint32_t)cfg->image_size);
    vs_gguf_set_u32(gw, "clip.vision.patch_size", (uint32_t)cfg->patch_size);
    vs_gguf_set_u32(gw, "clip.vision.embedding_length", (uint32_t)cfg->width);
    vs_gguf_set_u32(gw, "clip.vision.feed_forward_length", (uint32_t)cfg->ffn);
    vs_gguf_set_u32(gw, "clip.vision.projection_dim", (uint32_t)cfg->projection_dim);
    vs_gguf_set_u32(gw, "clip.vision.attention.head_count", (uint32_t)cfg->n_heads);
    vs_gguf_set_f32(gw, "clip.vision.attention.layer_norm_epsilon", cfg->eps);
    vs_gguf_set_u32(gw, "clip.vision.block_count", (uint32_t)cfg->n_blocks);
    vs_gguf_set_arr(gw, "clip.vision.image_mean", VS_GGUF_F32, cfg->mean, 3);
    vs_gguf_set_arr(gw, "clip.vision.image_std", VS_GGUF_F32, cfg->std, 3);
    if (opts && opts->tower_hash) vs_gguf_set_u64(gw, "vlmspec.vision.tower_hash", opts->tower_hash);
    st = write_tensors(gw, cfg, w, mt, err);
    if (st == VS_OK) st = vs_gguf_write(gw, path, err);
    vs_gguf_writer_free(gw);
    return st;
}

vs_status vs_mmproj_write_random(const char *path, const vs_vision_config *cfg, vs_type mat_type,
                                 uint64_t seed, vs_error *err) {
    vs_vision_weights w;
    vs_status st = vs_vision_weights_alloc(&w, cfg, err);
    if (st != VS_OK) return st;
    vs_vision_weights_randomize(&w, cfg, seed);
    vs_mmproj_write_opts o = {.mat_type = mat_type, .name = "vlmspec random mmproj"};
    st = vs_mmproj_write(path, cfg, &w, &o, err);
    vs_vision_weights_free(&w, cfg);
    return st;
}
