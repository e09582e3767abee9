/* train_vision: vision pretraining on the world's labels. See train_vision.h. Sections: batches,
 * heads, the run. */
#include "train_vision.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "json.h"
#include "train.h"
#include "train_drafter.h"
#include "train_loop.h"
#include "vision.h"
#include "world.h"

static const char *const k_head_names[VS_VHEAD_N] = {"shape", "colour", "size",    "char",  "value",     "row",
                                                     "column", "kind", "objects", "items", "background"};
static const int k_head_classes[VS_VHEAD_N] = {VS_WORLD_N_SHAPES + 1, VS_WORLD_N_COLORS + 1,    3,
                                               VS_WORLD_N_CHARS + 1,  10,                       9,
                                               9,                     3,                        VS_WORLD_MAX_OBJECTS + 1,
                                               VS_WORLD_MAX_BARS + 1, VS_WORLD_N_BGS};

const char *vs_vision_head_name(int h) { return h >= 0 && h < VS_VHEAD_N ? k_head_names[h] : "?"; }
int vs_vision_head_classes(int h) { return h >= 0 && h < VS_VHEAD_N ? k_head_classes[h] : 0; }

/* ---------------------------------------------------------------------------------------------- */
/* Batches */

vs_status vs_vision_batch_alloc(vs_vision_batch *b, int cap, int S, int patch, vs_error *err) {
    memset(b, 0, sizeof(*b));
    if (cap < 1 || S < 32 || patch < 1 || S % patch)
        return vs_error_set(err, VS_ERR_INVALID, "vision batch: %d images of %d pixels, patch %d", cap, S, patch);
    b->cap = cap, b->S = S, b->P = patch, b->NP = (S / patch) * (S / patch);
    b->pixels = vs_malloc((size_t)cap * 3 * S * S * sizeof(float));
    bool ok = b->pixels != NULL;
    for (int h = 0; h < VS_VHEAD_N && ok; h++)
        ok = (b->label[h] = vs_malloc((size_t)cap * (h < VS_VHEAD_N_PATCH ? b->NP : 1) * sizeof(int32_t))) != NULL;
    if (!ok) {
        vs_vision_batch_free(b);
        return vs_error_set(err, VS_ERR_NOMEM, "vision batch: out of memory for %d images", cap);
    }
    return VS_OK;
}

void vs_vision_batch_free(vs_vision_batch *b) {
    vs_free(b->pixels);
    for (int h = 0; h < VS_VHEAD_N; h++) vs_free(b->label[h]);
    memset(b, 0, sizeof(*b));
}

vs_vision_batch vs_vision_batch_slice(const vs_vision_batch *b, int i0, int n) {
    vs_vision_batch s = *b;
    s.n = s.cap = n;
    s.pixels = b->pixels + (size_t)i0 * 3 * b->S * b->S;
    for (int h = 0; h < VS_VHEAD_N; h++) s.label[h] = b->label[h] + (size_t)i0 * (h < VS_VHEAD_N_PATCH ? b->NP : 1);
    return s;
}

/* Labels of image i of b from its scene. */
static vs_status label_image(vs_vision_batch *b, int i, const vs_world_scene *sc, vs_world_patch_label *pl,
                             vs_error *err) {
    vs_status s = vs_world_patch_labels(sc, b->S, b->P, pl, err);
    if (s) return s;
    const int side = b->S / b->P;
    for (int p = 0; p < b->NP; p++) {
        const size_t k = (size_t)i * b->NP + p;
        b->label[VS_VHEAD_ROW][k] = (p / side) * 8 / side + 1;
        b->label[VS_VHEAD_COLUMN][k] = (p % side) * 8 / side + 1;
        b->label[VS_VHEAD_SHAPE][k] = pl[p].shape + 1;
        b->label[VS_VHEAD_COLOR][k] = pl[p].color + 1;
        b->label[VS_VHEAD_SIZE][k] = pl[p].size + 1;
        b->label[VS_VHEAD_CHAR][k] = pl[p].ch + 1;
        b->label[VS_VHEAD_VALUE][k] = pl[p].value < 0 ? 0 : pl[p].value;
    }
    b->label[VS_VHEAD_KIND][i] = (int32_t)sc->kind;
    b->label[VS_VHEAD_OBJECTS][i] = sc->kind == VS_SCENE_SHAPES ? sc->n_objects : 0;
    b->label[VS_VHEAD_ITEMS][i] = sc->kind == VS_SCENE_GLYPH ? sc->n_lines : sc->kind == VS_SCENE_CHART ? sc->n_bars : 0;
    b->label[VS_VHEAD_BG][i] = sc->bg;
    return VS_OK;
}

vs_status vs_vision_batch_fill(vs_vision_batch *b, vs_rng *r, const vs_preproc *pp, int n, vs_error *err) {
    if (n < 1 || n > b->cap) return vs_error_set(err, VS_ERR_INVALID, "vision batch: %d images (1..%d)", n, b->cap);
    if (pp->size != b->S)
        return vs_error_set(err, VS_ERR_INVALID, "vision batch: preprocessing size %d, images %d", pp->size, b->S);
    const int S = b->S;
    vs_image img = {.w = S, .h = S, .rgb = vs_malloc((size_t)S * S * 3)};
    vs_world_patch_label *pl = vs_malloc((size_t)b->NP * sizeof(*pl));
    vs_status s = img.rgb && pl ? VS_OK : vs_error_set(err, VS_ERR_NOMEM, "vision batch: out of memory");
    for (int i = 0; i < n && s == VS_OK; i++) {
        const uint32_t u = vs_rng_below(r, 4);
        const vs_world_scene_kind kind = u < 2 ? VS_SCENE_SHAPES : u == 2 ? VS_SCENE_GLYPH : VS_SCENE_CHART;
        vs_world_scene sc;
        vs_world_random_scene(r, kind, &sc);
        s = vs_world_render(&sc, S, img.rgb, err);
        if (s == VS_OK) s = vs_image_preprocess(&img, pp, b->pixels + (size_t)i * 3 * S * S, err);
        if (s == VS_OK) s = label_image(b, i, &sc, pl, err);
    }
    vs_free(img.rgb);
    vs_free(pl);
    if (s == VS_OK) b->n = n;
    return s;
}

/* ---------------------------------------------------------------------------------------------- */
/* Heads */

struct vs_vision_heads {
    int W, NP, max_images;
    vs_train_params p;
    float *logits[VS_VHEAD_N], *probs[VS_VHEAD_N]; /* (rows, classes) of the last forward */
    float *dlogits;                                /* the largest head's (rows, classes) */
    float *pooled, *dpooled;                       /* (max_images, W) */
    float *wpatch, *wimage;                        /* row weights 1 / rows */
};

static int head_rows(const vs_vision_heads *h, int head, int n) { return head < VS_VHEAD_N_PATCH ? n * h->NP : n; }

vs_vision_heads *vs_vision_heads_new(int width, int NP, int max_images, vs_error *err) {
    vs_vision_heads *h = vs_calloc(1, sizeof(*h));
    if (!h) return vs_error_set(err, VS_ERR_NOMEM, "vision heads: out of memory"), NULL;
    h->W = width, h->NP = NP, h->max_images = max_images;
    vs_train_tensor t[2 * VS_VHEAD_N];
    memset(t, 0, sizeof(t));
    for (int k = 0; k < VS_VHEAD_N; k++) {
        snprintf(t[2 * k].name, sizeof(t[2 * k].name), "%s.weight", k_head_names[k]);
        t[2 * k].ndim = 2, t[2 * k].shape[0] = k_head_classes[k], t[2 * k].shape[1] = width, t[2 * k].decay = true;
        snprintf(t[2 * k + 1].name, sizeof(t[2 * k + 1].name), "%s.bias", k_head_names[k]);
        t[2 * k + 1].ndim = 1, t[2 * k + 1].shape[0] = k_head_classes[k];
    }
    if (vs_train_params_init(&h->p, t, 2 * VS_VHEAD_N, err)) {
        vs_free(h);
        return NULL;
    }
    bool ok = true;
    size_t most = 0;
    for (int k = 0; k < VS_VHEAD_N && ok; k++) {
        size_t n = (size_t)head_rows(h, k, max_images) * k_head_classes[k];
        most = n > most ? n : most;
        ok = (h->logits[k] = vs_malloc(n * sizeof(float))) && (h->probs[k] = vs_malloc(n * sizeof(float)));
    }
    ok = ok && (h->dlogits = vs_malloc(most * sizeof(float))) &&
         (h->pooled = vs_malloc((size_t)max_images * width * sizeof(float))) &&
         (h->dpooled = vs_malloc((size_t)max_images * width * sizeof(float))) &&
         (h->wpatch = vs_malloc((size_t)max_images * NP * sizeof(float))) &&
         (h->wimage = vs_malloc((size_t)max_images * sizeof(float)));
    if (!ok) {
        vs_vision_heads_free(h);
        return vs_error_set(err, VS_ERR_NOMEM, "vision heads: out of memory"), NULL;
    }
    return h;
}

void vs_vision_heads_free(vs_vision_heads *h) {
    if (!h) return;
    vs_train_params_free(&h->p);
    for (int k = 0; k < VS_VHEAD_N; k++) vs_free(h->logits[k]), vs_free(h->probs[k]);
    vs_free(h->dlogits);
    vs_free(h->pooled);
    vs_free(h->dpooled);
    vs_free(h->wpatch);
    vs_free(h->wimage);
    vs_free(h);
}

vs_train_params *vs_vision_heads_params(vs_vision_heads *h) { return &h->p; }

void vs_vision_heads_init(vs_vision_heads *h, uint64_t seed) {
    vs_rng r;
    vs_rng_seed(&r, seed);
    for (int i = 0; i < h->p.n_tensors; i++) {
        const vs_train_tensor *t = &h->p.tensors[i];
        float *x = vs_train_params_at(h->p.data, t);
        for (size_t j = 0; j < t->numel; j++) x[j] = t->ndim == 2 ? 0.02f * vs_rng_normal(&r) : 0.0f;
    }
}

static const float *head_w(const vs_vision_heads *h, const float *buf, int k) {
    return buf + h->p.tensors[2 * k].offset;
}
static const float *head_b(const vs_vision_heads *h, const float *buf, int k) {
    return buf + h->p.tensors[2 * k + 1].offset;
}

double vs_vision_heads_forward(vs_vision_heads *h, vs_threadpool *tp, const float *feat, const vs_vision_batch *b,
                               vs_vision_counts *counts) {
    const int n = b->n, W = h->W, NP = h->NP;
    if (n < 1 || n > h->max_images || b->NP != NP) return NAN; /* not the batch the heads were made for */
    for (int i = 0; i < n; i++) { /* mean of each image's patch features */
        float *m = h->pooled + (size_t)i * W;
        memset(m, 0, sizeof(float) * W);
        for (int p = 0; p < NP; p++)
            for (int c = 0; c < W; c++) m[c] += feat[((size_t)i * NP + p) * W + c];
        for (int c = 0; c < W; c++) m[c] /= (float)NP;
    }
    for (int i = 0; i < n * NP; i++) h->wpatch[i] = 1.0f / (float)(n * NP);
    for (int i = 0; i < n; i++) h->wimage[i] = 1.0f / (float)n;
    double loss = 0;
    for (int k = 0; k < VS_VHEAD_N; k++) {
        const bool patch = k < VS_VHEAD_N_PATCH;
        const int rows = head_rows(h, k, n), V = k_head_classes[k];
        vs_train_linear_forward(tp, h->logits[k], patch ? feat : h->pooled, head_w(h, h->p.data, k),
                                head_b(h, h->p.data, k), rows, W, V);
        loss += vs_train_xent_forward(h->probs[k], h->logits[k], b->label[k], patch ? h->wpatch : h->wimage, rows, V);
        if (!counts) continue;
        for (int r = 0; r < rows; r++) {
            const int32_t y = b->label[k][r];
            if (patch && y == 0) continue;
            const float *x = h->logits[k] + (size_t)r * V;
            int best = 0;
            for (int v = 1; v < V; v++)
                if (x[v] > x[best]) best = v;
            counts->correct[k] += best == y;
            counts->total[k]++;
        }
    }
    return loss;
}

void vs_vision_heads_backward(vs_vision_heads *h, vs_threadpool *tp, const float *feat, const vs_vision_batch *b,
                              float *dfeat) {
    const int n = b->n, W = h->W, NP = h->NP;
    memset(dfeat, 0, sizeof(float) * (size_t)n * NP * W);
    memset(h->dpooled, 0, sizeof(float) * (size_t)n * W);
    for (int k = 0; k < VS_VHEAD_N; k++) {
        const bool patch = k < VS_VHEAD_N_PATCH;
        const int rows = head_rows(h, k, n), V = k_head_classes[k];
        memset(h->dlogits, 0, sizeof(float) * (size_t)rows * V);
        vs_train_xent_backward(h->dlogits, h->probs[k], b->label[k], patch ? h->wpatch : h->wimage, 1.0f, rows, V);
        vs_train_linear_backward(tp, patch ? dfeat : h->dpooled, (float *)head_w(h, h->p.grad, k),
                                 (float *)head_b(h, h->p.grad, k), h->dlogits, patch ? feat : h->pooled,
                                 head_w(h, h->p.data, k), rows, W, V);
    }
    for (int i = 0; i < n; i++)
        for (int p = 0; p < NP; p++)
            for (int c = 0; c < W; c++) dfeat[((size_t)i * NP + p) * W + c] += h->dpooled[(size_t)i * W + c] / (float)NP;
}

/* ---------------------------------------------------------------------------------------------- */
/* The run */

void vs_train_vision_opts_default(vs_train_vision_opts *o) {
    memset(o, 0, sizeof(*o));
    o->cfg = vs_train_vlm_target_shape(); /* the tower's fields; model_config sets the LM's */
    o->steps = 3000, o->seed = 1;
    o->batch = 32, o->threads = 2, o->ckpt_every = 200, o->eval_every = 250, o->eval_images = 512;
    o->lr = 1e-3, o->lr_min = 1e-4, o->warmup = 100, o->wd = 0.05, o->clip = 1.0, o->beta2 = 0.95;
}

typedef struct vrun {
    const vs_train_vision_opts *o;
    vs_train_loop L; /* the directory's files (train_loop's names and helpers); its step loop is not used */
    vs_train_vlm_config cfg;
    vs_train_vlm *m;
    vs_vision_heads *h;
    vs_threadpool *tp;
    vs_preproc pp;
    vs_vision_batch batch, held;
    float *dfeat;
    char evalcsv[1200], mmproj[1200], summary[1200];
    char *evals; /* eval.csv's text: the header and a line per evaluation (no final newline) */
    vs_train_vision_result res;
} vrun;

/* The training model: the tower and projector to train, an LM of the smallest legal shape that is never
 * run (vs_train_vlm holds a whole VLM; only the tower and the exported mmproj matter here). */
static vs_status model_config(vrun *r, vs_error *err) {
    const vs_train_vision_opts *o = r->o;
    r->cfg = o->cfg;
    if (o->init_mmproj) {
        vs_mmproj *mm = vs_mmproj_open(o->init_mmproj, err);
        if (!mm) return VS_ERR_INVALID;
        const vs_vision_config *v = vs_mmproj_config(mm);
        vs_status s = vs_mmproj_tower(mm) ? VS_OK
                                          : vs_error_set(err, VS_ERR_INVALID, "%s has no vision tower", o->init_mmproj);
        r->cfg.image_size = v->image_size, r->cfg.patch_size = v->patch_size, r->cfg.v_width = v->width;
        r->cfg.v_ffn = v->ffn, r->cfg.v_heads = v->n_heads, r->cfg.v_blocks = v->n_blocks, r->cfg.v_eps = v->eps;
        r->cfg.v_post_ln = v->post_ln, r->cfg.width = v->proj_out;
        for (int i = 0; i < 3; i++) r->cfg.image_mean[i] = v->mean[i], r->cfg.image_std[i] = v->std[i];
        vs_mmproj_free(mm);
        if (s) return s;
    } else if (!(r->cfg.image_std[0] > 0)) {
        static const float mean[3] = {0.48145466f, 0.4578275f, 0.40821073f}, stdv[3] = {0.26862954f, 0.26130258f, 0.27577711f};
        for (int i = 0; i < 3; i++) r->cfg.image_mean[i] = mean[i], r->cfg.image_std[i] = stdv[i];
    }
    r->cfg.vocab = 2, r->cfg.n_layers = 1, r->cfg.n_heads = 1, r->cfg.n_kv_heads = 1, r->cfg.ffn = 1;
    r->cfg.max_seq = 1, r->cfg.rms_eps = 1e-5f, r->cfg.rope_base = 10000.0f;
    if (r->cfg.width % 2) /* the unused LM is one head of width/2 pairs */
        return vs_error_set(err, VS_ERR_INVALID, "the projector's output width %d must be even", r->cfg.width);
    return vs_train_vlm_config_check(&r->cfg, err);
}

static char *run_settings(const vrun *r, int64_t total) {
    const vs_train_vision_opts *o = r->o;
    const vs_train_vlm_config *c = &r->cfg;
    vs_json_writer w;
    vs_json_writer_init(&w);
    vs_json_obj_begin(&w);
    if (o->init_mmproj) vs_json_kv_str(&w, "init_mmproj", o->init_mmproj);
    vs_json_kv_bool(&w, "probe", o->probe);
    vs_json_kv_int(&w, "steps", total);
    vs_json_kv_int(&w, "batch", o->batch);
    vs_json_kv_num(&w, "lr", o->lr);
    vs_json_kv_num(&w, "lr_min", o->lr_min);
    vs_json_kv_int(&w, "warmup", (int64_t)o->warmup);
    vs_json_kv_num(&w, "weight_decay", o->wd);
    vs_json_kv_num(&w, "beta2", o->beta2);
    vs_json_kv_num(&w, "clip", o->clip);
    vs_json_kv_int(&w, "seed", o->seed);
    vs_json_kv_int(&w, "eval_images", o->eval_images);
    vs_json_key(&w, "model");
    vs_json_obj_begin(&w);
    vs_json_kv_int(&w, "image_size", c->image_size);
    vs_json_kv_int(&w, "patch_size", c->patch_size);
    vs_json_kv_int(&w, "v_width", c->v_width);
    vs_json_kv_int(&w, "v_ffn", c->v_ffn);
    vs_json_kv_int(&w, "v_heads", c->v_heads);
    vs_json_kv_int(&w, "v_blocks", c->v_blocks);
    vs_json_kv_bool(&w, "v_post_ln", c->v_post_ln);
    vs_json_kv_int(&w, "width", c->width);
    vs_json_obj_end(&w);
    vs_json_obj_end(&w);
    char *s = vs_json_writer_take(&w, NULL);
    vs_json_writer_free(&w);
    return s;
}

/* Loads checkpoint `path` (model, heads, state); *other: it holds another model (no fallback then). */
static vs_status load_ckpt(void *ctx, const char *path, bool *other, vs_error *err) {
    vrun *r = ctx;
    vs_train_vlm_free(r->m);
    r->m = vs_train_load_for_run(path, &r->cfg, "the flags say", 1, 1, r->o->batch, &r->L.st, other, err);
    if (!r->m) return VS_ERR_INVALID;
    vs_gguf *g = vs_gguf_open(path, err);
    if (!g) return VS_ERR_INVALID;
    vs_status s = vs_train_checkpoint_read_set(g, vs_vision_heads_params(r->h), "head", err);
    vs_gguf_close(g);
    return s;
}

/* eval.csv's header, then (resuming) the lines of evaluations up to step `upto` from the file; the last
 * kept evaluation stands for the run's latest (a finished run resumed again). */
static vs_status evals_start(vrun *r, int64_t upto, bool keep, vs_error *err) {
    char head[256];
    int n = snprintf(head, sizeof(head), "step,loss");
    for (int k = 0; k < VS_VHEAD_N; k++) n += snprintf(head + n, sizeof(head) - (size_t)n, ",%s", k_head_names[k]);
    const char *last = NULL;
    vs_status s = vs_train_evals_read(r->evalcsv, head, keep, upto, &r->evals, &last, err);
    if (s == VS_OK && last) {
        char *q = NULL;
        r->res.step = strtoll(last, &q, 10);
        r->res.loss = *q == ',' ? strtod(q + 1, &q) : 0;
        for (int k = 0; k < VS_VHEAD_N; k++) r->res.acc[k] = *q == ',' ? strtod(q + 1, &q) : 0;
    }
    return s;
}

static vs_status resume(vrun *r, vs_error *err) {
    vs_train_loop *L = &r->L;
    vs_status s = vs_train_loop_load_newest(L, load_ckpt, r, err);
    if (s || (s = vs_train_loop_restore_curve(L, err)) || (s = evals_start(r, L->st.step, true, err))) return s;
    printf("resumed from step %lld (%llu images, %.0f s trained)\n", (long long)L->st.step,
           (unsigned long long)L->st.tokens, L->st.elapsed_s);
    return VS_OK;
}

static vs_status fresh(vrun *r, vs_error *err) {
    const vs_train_vision_opts *o = r->o;
    if (!(r->m = vs_train_vlm_new(&r->cfg, 1, 1, o->batch, err))) return VS_ERR_INVALID;
    vs_train_vlm_init(r->m, (uint64_t)o->seed);
    vs_status s = o->init_mmproj ? vs_train_vlm_set_vision_file(r->m, o->init_mmproj, err) : VS_OK;
    if (s) return s;
    vs_vision_heads_init(r->h, (uint64_t)o->seed ^ 0x6865616473ull);
    memset(&r->L.st, 0, sizeof(r->L.st));
    vs_rng_seed(&r->L.st.rng, (uint64_t)o->seed);
    return VS_OK;
}

static vs_status save(vrun *r, vs_error *err) {
    vs_train_loop *L = &r->L;
    vs_status s = vs_train_loop_rotate(L, err);
    if (s == VS_OK) s = vs_train_vlm_save_ex(r->m, &L->st, vs_vision_heads_params(r->h), "head", L->ckpt, err);
    if (s == VS_OK) s = vs_train_loop_write_curve(L, err);
    return s;
}

/* Held-out accuracy per head and mean loss over the fixed held-out images. */
static vs_status evaluate(vrun *r, vs_error *err) {
    vs_vision_counts cnt;
    memset(&cnt, 0, sizeof(cnt));
    double loss = 0;
    for (int i0 = 0; i0 < r->held.n; i0 += r->o->batch) {
        vs_vision_batch s = vs_vision_batch_slice(&r->held, i0, VS_MIN(r->o->batch, r->held.n - i0));
        vs_status st = vs_train_vlm_tower_forward(r->m, r->tp, s.pixels, s.n, err);
        if (st) return st;
        loss += vs_vision_heads_forward(r->h, r->tp, vs_train_vlm_tower_features(r->m), &s, &cnt) * s.n;
    }
    r->res.step = r->L.st.step, r->res.loss = loss / r->held.n;
    for (int k = 0; k < VS_VHEAD_N; k++) r->res.acc[k] = cnt.total[k] ? (double)cnt.correct[k] / cnt.total[k] : 0;
    /* eval.csv: one line per evaluation, the whole file rewritten each time */
    char line[512];
    int n = snprintf(line, sizeof(line), "%lld,%.9g", (long long)r->res.step, r->res.loss);
    for (int k = 0; k < VS_VHEAD_N; k++) n += snprintf(line + n, sizeof(line) - (size_t)n, ",%.9g", r->res.acc[k]);
    vs_status st = vs_train_evals_append(r->evalcsv, &r->evals, line, err);
    if (st) return st;
    printf("held-out step %lld: loss %.4f ", (long long)r->res.step, r->res.loss);
    for (int k = 0; k < VS_VHEAD_N; k++) printf(" %s %.1f%%", k_head_names[k], 100 * r->res.acc[k]);
    printf("\n");
    fflush(stdout);
    return VS_OK;
}

/* One optimiser step on a fresh batch; the loss through *loss. */
static vs_status step(vrun *r, const vs_adamw *opt, float lr, double *loss, vs_error *err) {
    vs_train_params *pm = vs_train_vlm_params(r->m), *ph = vs_vision_heads_params(r->h);
    vs_status s = vs_vision_batch_fill(&r->batch, &r->L.st.rng, &r->pp, r->o->batch, err);
    if (s == VS_OK) s = vs_train_vlm_tower_forward(r->m, r->tp, r->batch.pixels, r->batch.n, err);
    if (s) return s;
    const float *feat = vs_train_vlm_tower_features(r->m);
    vs_train_params_zero_grad(pm);
    vs_train_params_zero_grad(ph);
    *loss = vs_vision_heads_forward(r->h, r->tp, feat, &r->batch, NULL);
    vs_vision_heads_backward(r->h, r->tp, feat, &r->batch, r->dfeat);
    vs_train_vlm_tower_backward(r->m, r->tp, r->dfeat);
    if (r->o->clip > 0) { /* one global norm over the tower and the heads */
        const double nm = vs_train_grad_norm(pm), nh = vs_train_grad_norm(ph), norm = sqrt(nm * nm + nh * nh);
        const float sc = norm > r->o->clip ? (float)(r->o->clip / (norm + 1e-6)) : 1.0f;
        if (sc < 1.0f) {
            for (size_t i = 0; i < pm->n; i++) pm->grad[i] *= sc;
            for (size_t i = 0; i < ph->n; i++) ph->grad[i] *= sc;
        }
    }
    vs_train_adamw_step(pm, r->tp, opt, lr);
    vs_train_adamw_step(ph, r->tp, opt, lr);
    return VS_OK;
}

static vs_status write_summary(vrun *r, vs_error *err) {
    const vs_train_loop *L = &r->L;
    vs_json_writer w;
    vs_json_writer_init(&w);
    vs_json_obj_begin(&w);
    vs_json_kv_int(&w, "steps", L->st.step);
    vs_json_kv_int(&w, "images", (int64_t)L->st.tokens);
    vs_json_kv_num(&w, "wall_s", L->st.elapsed_s);
    vs_json_kv_num(&w, "final_loss", vs_train_curve_recent(&L->curve, 20));
    vs_json_kv_int(&w, "tower_params", vs_train_vlm_n_params(r->m, VS_TRAIN_GROUP_VISION));
    vs_json_kv_num(&w, "held_out_loss", r->res.loss);
    vs_json_key(&w, "held_out_accuracy");
    vs_json_obj_begin(&w);
    for (int k = 0; k < VS_VHEAD_N; k++) vs_json_kv_num(&w, k_head_names[k], r->res.acc[k]);
    vs_json_obj_end(&w);
    vs_json_obj_end(&w);
    return vs_train_write_json(r->summary, &w, err);
}

/* Directories, buffers, the model and heads (fresh or resumed), the held-out set, the banner. */
static vs_status setup(vrun *r, vs_error *err) {
    const vs_train_vision_opts *o = r->o;
    vs_train_loop *L = &r->L;
    vs_status s;
    L->cmd = "train vision";
    L->title = "vision pretraining: loss";
    if ((s = model_config(r, err)) || (s = vs_train_loop_dirs(L, o->out, err))) return s;
    snprintf(r->evalcsv, sizeof(r->evalcsv), "%s/eval.csv", o->out);
    snprintf(r->mmproj, sizeof(r->mmproj), "%s/vision-mmproj.gguf", o->out);
    snprintf(r->summary, sizeof(r->summary), "%s/vision.json", o->out);
    const vs_train_vlm_config *c = &r->cfg;
    const int G = c->image_size / c->patch_size;
    r->pp = (vs_preproc){.size = c->image_size, .mode = VS_PREPROC_LLAVA};
    for (int i = 0; i < 3; i++) r->pp.mean[i] = c->image_mean[i], r->pp.std[i] = c->image_std[i];
    if (!(r->tp = vs_threadpool_new(o->threads, err))) return VS_ERR_NOMEM;
    vs_train_set_blas_threads(o->threads);
    if (!(r->h = vs_vision_heads_new(c->v_width, G * G, o->batch, err))) return VS_ERR_NOMEM;
    if ((s = vs_vision_batch_alloc(&r->batch, o->batch, c->image_size, c->patch_size, err)) ||
        (s = vs_vision_batch_alloc(&r->held, o->eval_images, c->image_size, c->patch_size, err)))
        return s;
    if (!(r->dfeat = vs_malloc((size_t)o->batch * G * G * c->v_width * sizeof(float))))
        return vs_error_set(err, VS_ERR_NOMEM, "out of memory");
    char *settings = run_settings(r, o->steps);
    if (!settings) return vs_error_set(err, VS_ERR_NOMEM, "out of memory");
    if (o->resume && vs_train_loop_has_ckpt(L)) {
        s = vs_train_loop_check_settings(L, settings, err);
        if (s == VS_OK) s = resume(r, err);
    } else {
        if (o->resume) printf("no checkpoint in %s/ckpt: starting fresh\n", o->out);
        s = vs_train_write_text(L->runjson, settings, err);
        if (s == VS_OK) s = fresh(r, err);
        if (s == VS_OK) s = evals_start(r, 0, false, err);
    }
    vs_free(settings);
    if (s) return s;
    vs_train_params *pm = vs_train_vlm_params(r->m);
    pm->frozen[VS_TRAIN_GROUP_LM] = pm->frozen[VS_TRAIN_GROUP_PROJECTOR] = true;
    pm->frozen[VS_TRAIN_GROUP_VISION] = o->probe;
    /* the held-out images: the same for every run of this seed, never drawn by training's RNG */
    vs_rng hr;
    vs_rng_seed(&hr, (uint64_t)o->seed ^ 0x68656c646f7574ull);
    if ((s = vs_vision_batch_fill(&r->held, &hr, &r->pp, o->eval_images, err))) return s;
    printf("train vision: tower %dx%d/%d, width %d, %d blocks, %d heads, MLP %d (%lld parameters%s)%s%s\n",
           c->image_size, c->image_size, c->patch_size, c->v_width, c->v_blocks, c->v_heads, c->v_ffn,
           (long long)vs_train_vlm_n_params(r->m, VS_TRAIN_GROUP_VISION), o->probe ? ", frozen: linear probe" : "",
           o->init_mmproj ? " from " : "", o->init_mmproj ? o->init_mmproj : "");
    printf("  %lld steps of %d fresh images, lr %g -> %g, %d held-out images\n", (long long)o->steps, o->batch,
           o->lr, o->lr_min, o->eval_images);
    fflush(stdout);
    return VS_OK;
}

/* The steps from the checkpoint's to the end or to a chunk/time limit; then the export. */
static vs_status train(vrun *r, vs_error *err) {
    const vs_train_vision_opts *o = r->o;
    vs_train_loop *L = &r->L;
    vs_status s = setup(r, err);
    if (s) return s;
    vs_adamw opt;
    vs_adamw_default(&opt);
    opt.beta2 = (float)o->beta2, opt.weight_decay = (float)o->wd;
    vs_lr_schedule sched = {(float)o->lr, (float)o->lr_min, (int64_t)o->warmup, o->steps};
    vs_progress pr;
    vs_progress_begin(&pr, "train vision", o->steps);
    pr.t_start -= L->st.elapsed_s;
    pr.rate_done0 = L->st.step;
    const double t0 = vs_time_now(), elapsed0 = L->st.elapsed_s;
    const double deadline = o->time_limit > 0 ? t0 + o->time_limit : 0;
    int64_t run_steps = 0;
    bool stop = false;
    if (L->st.step == 0 && r->res.step == 0 && (s = evaluate(r, err))) return s;
    while (L->st.step < o->steps && !stop) {
        const float lr = vs_train_lr(&sched, L->st.step);
        double loss;
        if ((s = step(r, &opt, lr, &loss, err))) return s;
        const double now = vs_time_now();
        L->st.tokens += (uint64_t)o->batch;
        L->st.elapsed_s = elapsed0 + (now - t0);
        vs_train_curve_point pt = {L->st.step, (float)loss, lr, (double)L->st.tokens, L->st.elapsed_s};
        if ((s = vs_train_curve_add(&L->curve, pt, err))) return s;
        L->st.step++, run_steps++;
        if (!isfinite(loss)) return vs_error_set(err, VS_ERR_INVALID, "loss is %f at step %lld", loss, (long long)pt.step);
        if (!o->quiet)
            vs_progress_update(&pr, L->st.step, " loss %.4f  %.1f img/s  lr %.2e  held-out shape %.0f%% char %.0f%% ",
                               vs_train_curve_recent(&L->curve, 20), (double)run_steps * o->batch / (now - t0),
                               (double)lr, 100 * r->res.acc[VS_VHEAD_SHAPE], 100 * r->res.acc[VS_VHEAD_CHAR]);
        stop = (o->chunk_steps > 0 && run_steps >= o->chunk_steps) || (deadline > 0 && now >= deadline);
        if ((L->st.step % o->eval_every == 0 || L->st.step == o->steps) && (s = evaluate(r, err))) return s;
        if ((L->st.step % o->ckpt_every == 0 || L->st.step == o->steps || stop) && (s = save(r, err))) return s;
    }
    if (!o->quiet) vs_progress_end(&pr, L->st.step);
    const double run_s = vs_time_now() - t0;
    printf("this run: %lld steps, %lld images in %.1f s (%.1f images/s); total %lld/%lld steps, %.0f s\n",
           (long long)run_steps, (long long)run_steps * o->batch, run_s,
           run_s > 0 ? (double)run_steps * o->batch / run_s : 0.0, (long long)L->st.step, (long long)o->steps,
           L->st.elapsed_s);
    if (L->st.step < o->steps) {
        printf("stopped at step %lld of %lld: continue with the same flags and --resume\n", (long long)L->st.step,
               (long long)o->steps);
        return VS_OK;
    }
    r->res.finished = true;
    if (r->res.step != L->st.step && (s = evaluate(r, err))) return s;
    if (!o->probe) {
        vs_train_export_opts eo = {.type = VS_TYPE_F32, .name = "vlmspec vision pretraining"};
        if ((s = vs_train_vlm_export(r->m, NULL, r->mmproj, &eo, err))) return s;
        printf("wrote %s\n", r->mmproj);
    }
    return write_summary(r, err);
}

vs_status vs_train_vision_run(const vs_train_vision_opts *o, vs_train_vision_result *res, vs_error *err) {
    if (o->batch < 1 || o->steps < 1 || o->eval_images < 1 || o->eval_every < 1 || o->ckpt_every < 1)
        return vs_error_set(err, VS_ERR_INVALID, "train vision: batch, steps, eval images and intervals must be >= 1");
    vrun r;
    memset(&r, 0, sizeof(r));
    r.o = o;
    vs_status s = train(&r, err);
    if (res) *res = r.res;
    vs_train_curve_free(&r.L.curve);
    vs_train_vlm_free(r.m);
    vs_vision_heads_free(r.h);
    vs_threadpool_free(r.tp);
    vs_vision_batch_free(&r.batch);
    vs_vision_batch_free(&r.held);
    vs_free(r.dfeat);
    vs_free(r.evals);
    return s;
}
