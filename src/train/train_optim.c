/* train_optim: parameter sets, AdamW, schedule, clipping, checkpoints, progress and loss curves
 * (see train_optim.h). */
#include "train_optim.h"
#include "outfile.h"
#include "kernels.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------- */
/* Parameter sets */

void vs_train_tensor_from_ne(vs_train_tensor *t, const char *name, const int64_t ne[2], int nd) {
    memset(t, 0, sizeof(*t));
    snprintf(t->name, sizeof(t->name), "%s", name);
    t->ndim = nd;
    if (nd == 1) t->shape[0] = ne[0];
    else t->shape[0] = ne[1], t->shape[1] = ne[0]; /* row-major (outputs, inputs) */
    t->decay = nd == 2;
}

vs_status vs_train_params_init(vs_train_params *p, const vs_train_tensor *tensors, int n_tensors,
                               vs_error *err) {
    memset(p, 0, sizeof(*p));
    if (n_tensors <= 0) return vs_error_set(err, VS_ERR_INVALID, "parameter set: no tensors");
    p->tensors = vs_calloc((size_t)n_tensors, sizeof(vs_train_tensor));
    if (!p->tensors) return vs_error_set(err, VS_ERR_NOMEM, "parameter set: out of memory");
    p->n_tensors = n_tensors;
    size_t off = 0;
    for (int i = 0; i < n_tensors; i++) {
        vs_train_tensor *t = &p->tensors[i];
        *t = tensors[i];
        if (t->ndim < 1 || t->ndim > VS_TRAIN_MAX_DIMS || t->group < 0 || t->group >= VS_TRAIN_MAX_GROUPS) {
            vs_train_params_free(p);
            return vs_error_set(err, VS_ERR_INVALID, "parameter set: tensor %s has a bad rank or group",
                                tensors[i].name);
        }
        size_t numel = 1;
        for (int d = 0; d < t->ndim; d++) {
            if (t->shape[d] <= 0 || (size_t)t->shape[d] > ((size_t)1 << 34) / numel) {
                vs_train_params_free(p);
                return vs_error_set(err, VS_ERR_RANGE, "parameter set: tensor %s has a bad shape", t->name);
            }
            numel *= (size_t)t->shape[d];
        }
        for (int d = t->ndim; d < VS_TRAIN_MAX_DIMS; d++) t->shape[d] = 1;
        t->offset = off;
        t->numel = numel;
        off += (numel + 15) & ~(size_t)15; /* 64-byte aligned tensors */
    }
    p->n = off;
    p->data = vs_calloc(off, sizeof(float));
    p->grad = vs_calloc(off, sizeof(float));
    p->m = vs_calloc(off, sizeof(float));
    p->v = vs_calloc(off, sizeof(float));
    if (!p->data || !p->grad || !p->m || !p->v) {
        size_t mb = off * 16 >> 20;
        vs_train_params_free(p);
        return vs_error_set(err, VS_ERR_NOMEM, "parameter set: cannot allocate %zu MiB", mb);
    }
    return VS_OK;
}

void vs_train_params_free(vs_train_params *p) {
    if (!p) return;
    vs_free(p->tensors);
    vs_free(p->data);
    vs_free(p->grad);
    vs_free(p->m);
    vs_free(p->v);
    memset(p, 0, sizeof(*p));
}

const vs_train_tensor *vs_train_params_find(const vs_train_params *p, const char *name) {
    for (int i = 0; i < p->n_tensors; i++)
        if (!strcmp(p->tensors[i].name, name)) return &p->tensors[i];
    return NULL;
}

void vs_train_params_zero_grad(vs_train_params *p) { memset(p->grad, 0, p->n * sizeof(float)); }

double vs_train_grad_norm(const vs_train_params *p) {
    double ss = 0;
    for (int i = 0; i < p->n_tensors; i++) {
        const vs_train_tensor *t = &p->tensors[i];
        if (p->frozen[t->group]) continue;
        const float *g = p->grad + t->offset;
        for (size_t j = 0; j < t->numel; j++) ss += (double)g[j] * g[j];
    }
    return sqrt(ss);
}

double vs_train_clip_grad(vs_train_params *p, float max_norm) {
    double norm = vs_train_grad_norm(p);
    if (max_norm <= 0) return norm;
    double coef = max_norm / (norm + 1e-6);
    if (coef >= 1.0) return norm;
    float c = (float)coef;
    for (int i = 0; i < p->n_tensors; i++) {
        const vs_train_tensor *t = &p->tensors[i];
        if (p->frozen[t->group]) continue;
        float *g = p->grad + t->offset;
        for (size_t j = 0; j < t->numel; j++) g[j] *= c;
    }
    return norm;
}

/* ---------------------------------------------------------------------------------------------- */
/* AdamW */

void vs_adamw_default(vs_adamw *o) {
    o->beta1 = 0.9f;
    o->beta2 = 0.95f;
    o->eps = 1e-8f;
    o->weight_decay = 0.1f;
}

typedef struct adamw_job {
    vs_train_params *p;
    const vs_adamw *o;
    float decay_mul[VS_TRAIN_MAX_GROUPS], step_size[VS_TRAIN_MAX_GROUPS], bc2_sqrt; /* per group */
    bool avx; /* the 8-wide AVX loop (same bits as the scalar one) */
} adamw_job;

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#define ADAMW_HAVE_AVX 1
/* Elements [a, b) of the scalar loop in adamw_task, eight at a time: the same float operations in
 * the same order (AVX without FMA; sqrt and division are correctly rounded in both). Returns the
 * first element left for the scalar loop. */
__attribute__((target("avx"))) static int64_t adamw_avx(const adamw_job *j, int64_t a, int64_t b,
                                                        float dm, float step_size) {
    vs_train_params *p = j->p;
    const float b1 = j->o->beta1, b2 = j->o->beta2, eps = j->o->eps;
    const __m256 vb1 = _mm256_set1_ps(b1), vb2 = _mm256_set1_ps(b2), v1b1 = _mm256_set1_ps(1.0f - b1),
                 v1b2 = _mm256_set1_ps(1.0f - b2), veps = _mm256_set1_ps(eps), vdm = _mm256_set1_ps(dm),
                 vstep = _mm256_set1_ps(step_size), vbc2 = _mm256_set1_ps(j->bc2_sqrt);
    int64_t k = a;
    for (; k + 8 <= b; k += 8) {
        __m256 g = _mm256_loadu_ps(p->grad + k);
        __m256 w = _mm256_mul_ps(_mm256_loadu_ps(p->data + k), vdm);
        __m256 m = _mm256_add_ps(_mm256_mul_ps(vb1, _mm256_loadu_ps(p->m + k)), _mm256_mul_ps(v1b1, g));
        __m256 v = _mm256_add_ps(_mm256_mul_ps(vb2, _mm256_loadu_ps(p->v + k)),
                                 _mm256_mul_ps(_mm256_mul_ps(v1b2, g), g));
        _mm256_storeu_ps(p->m + k, m);
        _mm256_storeu_ps(p->v + k, v);
        __m256 den = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(v), vbc2), veps);
        _mm256_storeu_ps(p->data + k, _mm256_sub_ps(w, _mm256_mul_ps(vstep, _mm256_div_ps(m, den))));
    }
    return k;
}
#endif

static void adamw_task(void *ctx, int ith, int nth) {
    const adamw_job *j = ctx;
    vs_train_params *p = j->p;
    int64_t lo, hi;
    vs_split_range((int64_t)p->n, ith, nth, 16, &lo, &hi);
    const float b1 = j->o->beta1, b2 = j->o->beta2, eps = j->o->eps;
    for (int i = 0; i < p->n_tensors; i++) {
        const vs_train_tensor *t = &p->tensors[i];
        if (p->frozen[t->group]) continue;
        int64_t a = VS_MAX(lo, (int64_t)t->offset), b = VS_MIN(hi, (int64_t)(t->offset + t->numel));
        const float dm = t->decay ? j->decay_mul[t->group] : 1.0f, step_size = j->step_size[t->group];
        int64_t k0 = a;
#ifdef ADAMW_HAVE_AVX
        if (j->avx && a < b) k0 = adamw_avx(j, a, b, dm, step_size);
#endif
        for (int64_t k = k0; k < b; k++) {
            float g = p->grad[k];
            float w = p->data[k] * dm;
            float m = p->m[k] = b1 * p->m[k] + (1.0f - b1) * g;
            float v = p->v[k] = b2 * p->v[k] + (1.0f - b2) * g * g;
            p->data[k] = w - step_size * (m / (sqrtf(v) / j->bc2_sqrt + eps));
        }
    }
}

void vs_train_adamw_step(vs_train_params *p, vs_threadpool *tp, const vs_adamw *o, float lr) {
    vs_train_adamw_step_groups(p, tp, o, lr, NULL);
}

void vs_train_adamw_step_groups(vs_train_params *p, vs_threadpool *tp, const vs_adamw *o, float lr,
                                const float *group_lr_mul) {
    p->t++;
    double bc1 = 1.0 - pow(o->beta1, (double)p->t), bc2 = 1.0 - pow(o->beta2, (double)p->t);
    adamw_job j = {.p = p, .o = o, .bc2_sqrt = (float)sqrt(bc2)};
    for (int g = 0; g < VS_TRAIN_MAX_GROUPS; g++) {
        const double lg = (double)lr * (group_lr_mul ? (double)group_lr_mul[g] : 1.0); /* x 1.0: exact */
        j.decay_mul[g] = (float)(1.0 - lg * o->weight_decay);
        j.step_size[g] = (float)(lg / bc1);
    }
#ifdef ADAMW_HAVE_AVX
    j.avx = vs_isa_active() >= VS_ISA_AVX2; /* VLMSPEC_ISA / vs_isa_set_max cap it */
#endif
    vs_threadpool_run(tp, adamw_task, &j);
}

float vs_train_lr(const vs_lr_schedule *s, int64_t step) {
    if (step < s->warmup) return (float)((double)s->lr_max * (double)(step + 1) / (double)s->warmup);
    int64_t span = s->total - 1 - s->warmup; /* steps of the cosine phase */
    if (span <= 0) return s->lr_max;
    if (step >= s->total - 1) return s->lr_min;
    double prog = (double)(step - s->warmup) / (double)span;
    return (float)(s->lr_min +
                   0.5 * ((double)s->lr_max - s->lr_min) * (1.0 + cos(3.14159265358979323846 * prog)));
}

/* ---------------------------------------------------------------------------------------------- */
/* Checkpoints */

static void tensor_ne(const vs_train_tensor *t, int64_t *ne) {
    for (int d = 0; d < t->ndim; d++) ne[d] = t->shape[t->ndim - 1 - d];
}

/* Tensor name in a checkpoint: "<p|m|v>.<name>", or "<p|m|v>.<tag>.<name>" for a tagged set. */
static void ckpt_name(char *buf, size_t n, char kind, const char *tag, const char *name) {
    if (tag) snprintf(buf, n, "%c.%s.%s", kind, tag, name);
    else snprintf(buf, n, "%c.%s", kind, name);
}

static vs_status add_set_tensors(vs_gguf_writer *w, const vs_train_params *p, const char *tag, vs_error *err) {
    static const char prefix[3] = {'p', 'm', 'v'};
    const float *bufs[3] = {p->data, p->m, p->v};
    for (int b = 0; b < 3; b++)
        for (int i = 0; i < p->n_tensors; i++) {
            const vs_train_tensor *t = &p->tensors[i];
            char name[128];
            int64_t ne[VS_TRAIN_MAX_DIMS];
            ckpt_name(name, sizeof(name), prefix[b], tag, t->name);
            tensor_ne(t, ne);
            vs_status s = vs_gguf_add_tensor_ref(w, name, 0 /* F32 */, t->ndim, ne, bufs[b] + t->offset, err);
            if (s) return s;
        }
    return VS_OK;
}

static vs_status read_set_tensors(const vs_gguf *g, vs_train_params *p, const char *tag, vs_error *err) {
    static const char prefix[3] = {'p', 'm', 'v'};
    float *bufs[3] = {p->data, p->m, p->v};
    for (int b = 0; b < 3; b++)
        for (int i = 0; i < p->n_tensors; i++) {
            const vs_train_tensor *t = &p->tensors[i];
            char tname[128];
            int64_t ne[VS_TRAIN_MAX_DIMS];
            ckpt_name(tname, sizeof(tname), prefix[b], tag, t->name);
            tensor_ne(t, ne);
            const vs_gguf_tensor *gt;
            vs_status s = vs_gguf_require_tensor(g, tname, t->ndim, ne, &gt, err);
            if (s) return s;
            if (gt->type != 0 || gt->nbytes != t->numel * sizeof(float))
                return vs_error_set(err, VS_ERR_FORMAT, "%s: tensor %s must be F32 with %zu values",
                                    vs_gguf_name(g), tname, t->numel);
            memcpy(bufs[b] + t->offset, gt->data, gt->nbytes);
        }
    return VS_OK;
}

vs_status vs_train_checkpoint_add_set(vs_gguf_writer *w, const vs_train_params *p, const char *tag,
                                      vs_error *err) {
    char key[96];
    snprintf(key, sizeof(key), "train.%s.adam_t", tag);
    vs_gguf_set_i64(w, key, p->t);
    return add_set_tensors(w, p, tag, err);
}

vs_status vs_train_checkpoint_read_set(const vs_gguf *g, vs_train_params *p, const char *tag, vs_error *err) {
    char key[96];
    snprintf(key, sizeof(key), "train.%s.adam_t", tag);
    vs_status s = vs_gguf_require_int(g, key, &p->t, err);
    if (s) return s;
    if (p->t < 0) return vs_error_set(err, VS_ERR_FORMAT, "%s: negative %s", vs_gguf_name(g), key);
    return read_set_tensors(g, p, tag, err);
}

vs_status vs_train_checkpoint_write(vs_gguf_writer *w, const vs_train_params *p, const vs_train_state *st,
                                    const char *path, vs_error *err) {
    vs_gguf_set_i64(w, "train.step", st->step);
    vs_gguf_set_u64(w, "train.data_pos", st->data_pos);
    vs_gguf_set_u64(w, "train.epoch", st->epoch);
    vs_gguf_set_u64(w, "train.tokens", st->tokens);
    vs_gguf_set_f64(w, "train.elapsed_s", st->elapsed_s);
    vs_gguf_set_arr(w, "train.rng", VS_GGUF_U64, st->rng.s, 4);
    vs_gguf_set_i64(w, "train.adam_t", p->t);
    uint8_t frozen[VS_TRAIN_MAX_GROUPS];
    for (int g = 0; g < VS_TRAIN_MAX_GROUPS; g++) frozen[g] = p->frozen[g];
    vs_gguf_set_arr(w, "train.frozen", VS_GGUF_U8, frozen, VS_TRAIN_MAX_GROUPS);
    vs_status s = add_set_tensors(w, p, NULL, err);
    if (s) return vs_error_wrap(err, "checkpoint %s", path);
    s = vs_gguf_write(w, path, err);
    if (s) return vs_error_wrap(err, "checkpoint %s", path);
    return VS_OK;
}

static vs_status get_i64(const vs_gguf *g, const char *key, int64_t *out, vs_error *err) {
    return vs_gguf_require_int(g, key, out, err);
}

vs_status vs_train_checkpoint_read(const vs_gguf *g, vs_train_params *p, vs_train_state *st,
                                   vs_error *err) {
    const char *name = vs_gguf_name(g);
    int64_t v;
    vs_status s;
    memset(st, 0, sizeof(*st));
    if ((s = get_i64(g, "train.step", &st->step, err))) return s;
    if ((s = get_i64(g, "train.data_pos", &v, err))) return s;
    st->data_pos = (uint64_t)v;
    if ((s = get_i64(g, "train.epoch", &v, err))) return s;
    st->epoch = (uint64_t)v;
    if ((s = get_i64(g, "train.tokens", &v, err))) return s;
    st->tokens = (uint64_t)v;
    if ((s = vs_gguf_require_float(g, "train.elapsed_s", &st->elapsed_s, err))) return s;
    if ((s = get_i64(g, "train.adam_t", &p->t, err))) return s;
    if (st->step < 0 || p->t < 0)
        return vs_error_set(err, VS_ERR_FORMAT, "%s: negative train.step or train.adam_t", name);
    int64_t ki = vs_gguf_find_key(g, "train.rng");
    if (ki < 0 || vs_gguf_kv_type(g, ki) != VS_GGUF_ARRAY || vs_gguf_arr_type(g, ki) != VS_GGUF_U64 ||
        vs_gguf_arr_len(g, ki) != 4)
        return vs_error_set(err, VS_ERR_FORMAT, "%s: train.rng must be an array of 4 u64", name);
    memcpy(st->rng.s, vs_gguf_arr_data(g, ki), sizeof(st->rng.s));
    ki = vs_gguf_find_key(g, "train.frozen");
    if (ki < 0 || vs_gguf_kv_type(g, ki) != VS_GGUF_ARRAY || vs_gguf_arr_type(g, ki) != VS_GGUF_U8 ||
        vs_gguf_arr_len(g, ki) != VS_TRAIN_MAX_GROUPS)
        return vs_error_set(err, VS_ERR_FORMAT, "%s: train.frozen must be an array of %d u8", name,
                            VS_TRAIN_MAX_GROUPS);
    const uint8_t *fz = vs_gguf_arr_data(g, ki);
    for (int gi = 0; gi < VS_TRAIN_MAX_GROUPS; gi++) p->frozen[gi] = fz[gi] != 0;
    return read_set_tensors(g, p, NULL, err);
}

/* ---------------------------------------------------------------------------------------------- */
/* Progress and loss curves */

void vs_train_progress(vs_progress *pr, int64_t step, double loss, double tok_per_s, float lr) {
    vs_progress_update(pr, step, " loss %.4f  %.0f tok/s  lr %.2e ", loss, tok_per_s, (double)lr);
}

vs_status vs_train_curve_add(vs_train_curve *c, vs_train_curve_point p, vs_error *err) {
    if (c->n == c->cap) {
        int64_t cap = c->cap ? c->cap * 2 : 256;
        vs_train_curve_point *np = vs_realloc(c->pt, (size_t)cap * sizeof(*np));
        if (!np) return vs_error_set(err, VS_ERR_NOMEM, "loss curve: out of memory");
        c->pt = np;
        c->cap = cap;
    }
    c->pt[c->n++] = p;
    return VS_OK;
}

void vs_train_curve_free(vs_train_curve *c) {
    vs_free(c->pt);
    memset(c, 0, sizeof(*c));
}

vs_status vs_train_curve_write_csv(const vs_train_curve *c, const char *path, vs_error *err) {
    vs_outfile o;
    vs_status st = vs_outfile_open(&o, path, err);
    if (st != VS_OK) return st;
    FILE *f = o.f;
    fprintf(f, "step,loss,lr,tokens,time_s\n");
    for (int64_t i = 0; i < c->n; i++) {
        const vs_train_curve_point *p = &c->pt[i];
        /* %.9g: a float loss and lr read back exactly (a resumed run continues the same curve) */
        fprintf(f, "%lld,%.9g,%.9g,%.0f,%.3f\n", (long long)p->step, (double)p->loss, (double)p->lr,
                p->tokens, p->time_s);
    }
    return vs_outfile_commit(&o, err);
}

vs_status vs_train_curve_read_csv(vs_train_curve *c, const char *path, bool missing_ok, vs_error *err) {
    FILE *f = fopen(path, "r");
    if (!f) {
        if (missing_ok && errno == ENOENT) return VS_OK;
        return vs_error_set(err, VS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    }
    char line[512];
    int lineno = 0;
    vs_status s = VS_OK;
    while (fgets(line, sizeof(line), f)) {
        lineno++;
        if (lineno == 1) {
            if (strncmp(line, "step,loss,lr,tokens,time_s", 26) != 0) {
                s = vs_error_set(err, VS_ERR_FORMAT, "%s: not a loss-curve CSV (bad header)", path);
                break;
            }
            continue;
        }
        long long step;
        vs_train_curve_point p;
        if (sscanf(line, "%lld,%f,%f,%lf,%lf", &step, &p.loss, &p.lr, &p.tokens, &p.time_s) != 5) {
            s = vs_error_set(err, VS_ERR_FORMAT, "%s:%d: expected 5 comma-separated numbers", path, lineno);
            break;
        }
        p.step = step;
        if ((s = vs_train_curve_add(c, p, err))) break;
    }
    fclose(f);
    return s;
}

/* A "nice" tick spacing (1, 2 or 5 times a power of ten) giving about `n` ticks over range. */
static double nice_step(double range, int n) {
    double raw = range / n, p = pow(10.0, floor(log10(raw))), r = raw / p;
    return (r < 1.5 ? 1 : r < 3.5 ? 2 : r < 7.5 ? 5 : 10) * p;
}

vs_status vs_train_curve_write_svg(const vs_train_curve *c, const char *path, const char *title,
                                   int smooth, bool log_y, vs_error *err) {
    const double W = 800, H = 480, L = 70, R = 20, T = 40, Bm = 50; /* size and margins */
    vs_outfile o;
    vs_status st = vs_outfile_open(&o, path, err);
    if (st != VS_OK) return st;
    FILE *f = o.f;
    double x0 = 0, x1 = 1, y0 = 0, y1 = 1;
    bool any = false;
    for (int64_t i = 0; i < c->n; i++) {
        double x = (double)c->pt[i].step, y = c->pt[i].loss;
        if (!isfinite(y) || (log_y && y <= 0)) continue;
        if (log_y) y = log10(y);
        if (!any) x0 = x1 = x, y0 = y1 = y, any = true;
        x0 = fmin(x0, x), x1 = fmax(x1, x), y0 = fmin(y0, y), y1 = fmax(y1, y);
    }
    if (x1 <= x0) x1 = x0 + 1;
    if (y1 <= y0) y1 = y0 + 1, y0 -= 1;
    double pad = 0.04 * (y1 - y0);
    y0 -= pad, y1 += pad;
#define SX(x) (L + ((x) - x0) / (x1 - x0) * (W - L - R))
#define SY(y) (H - Bm - ((y) - y0) / (y1 - y0) * (H - T - Bm))
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n", W, H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"%.0f\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">", W / 2);
    for (const char *s = title ? title : "training loss"; *s; s++) { /* escape XML */
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else fputc(*s, f);
    }
    fprintf(f, "</text>\n");
    /* axes and ticks */
    fprintf(f, "<g stroke=\"#444\" fill=\"none\"><path d=\"M%.1f %.1f V%.1f H%.1f\"/></g>\n", L, T, H - Bm,
            W - R);
    double xs = nice_step(x1 - x0, 8);
    for (double x = ceil(x0 / xs) * xs; x <= x1 + 1e-9; x += xs)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                   "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n",
                SX(x), T, SX(x), H - Bm, SX(x), H - Bm + 16, x);
    if (log_y) {
        for (double e = floor(y0); e <= ceil(y1); e += 1)
            for (int m = 1; m <= 9; m++) {
                double y = e + log10((double)m);
                if (y < y0 || y > y1 || (m != 1 && m != 2 && m != 5)) continue;
                fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                           "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
                        L, SY(y), W - R, SY(y), L - 6, SY(y) + 4, pow(10.0, y));
            }
    } else {
        double ys = nice_step(y1 - y0, 6);
        for (double y = ceil(y0 / ys) * ys; y <= y1 + 1e-9; y += ys)
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                       "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
                    L, SY(y), W - R, SY(y), L - 6, SY(y) + 4, y);
    }
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">step</text>\n", (L + W - R) / 2, H - 12);
    fprintf(f, "<text transform=\"translate(16 %.0f) rotate(-90)\" text-anchor=\"middle\">loss%s</text>\n",
            (T + H - Bm) / 2, log_y ? " (log scale)" : "");
    /* raw points, then the moving average */
    for (int pass = 0; pass < (smooth > 1 ? 2 : 1); pass++) {
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%s\" points=\"",
                pass ? "#c0392b" : (smooth > 1 ? "#9ecae1" : "#2166ac"), pass ? "2" : "1");
        double acc = 0;
        int64_t cnt = 0, first = 0;
        for (int64_t i = 0; i < c->n; i++) {
            double y = c->pt[i].loss;
            if (!isfinite(y) || (log_y && y <= 0)) continue;
            if (pass) { /* trailing window of `smooth` points */
                acc += y, cnt++;
                while (cnt > smooth) {
                    double yo = c->pt[first++].loss;
                    if (isfinite(yo) && !(log_y && yo <= 0)) acc -= yo, cnt--;
                }
                y = acc / (double)cnt;
            }
            fprintf(f, "%.1f,%.1f ", SX((double)c->pt[i].step), SY(log_y ? log10(y) : y));
        }
        fprintf(f, "\"/>\n");
    }
#undef SX
#undef SY
    fprintf(f, "</svg>\n");
    return vs_outfile_commit(&o, err);
}
