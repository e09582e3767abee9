/* analyze: per-position TVD between a target VLM and drafters along the target's greedy answers.
 * See analyze.h. */
#include "analyze.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mmprompt.h"
#include "sample.h"

double vs_tvd_logits(const float *zp, const float *zq, int64_t n) {
    double mp = -INFINITY, mq = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        if (zp[i] > mp) mp = zp[i];
        if (zq[i] > mq) mq = zq[i];
    }
    double sp = 0, sq = 0;
    for (int64_t i = 0; i < n; i++) sp += exp((double)zp[i] - mp), sq += exp((double)zq[i] - mq);
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += fabs(exp((double)zp[i] - mp) / sp - exp((double)zq[i] - mq) / sq);
    s *= 0.5;
    return s < 0 ? 0 : s > 1 ? 1 : s;
}

const char *vs_tvd_view_name(vs_tvd_view v) { return v == VS_TVD_VIEW_T ? "T" : "M"; }

/* ---------------------------------------------------------------------------------------------- */
/* Run state */

/* One model fed teacher-forced rows: the target (index 0) or a drafter. */
typedef struct tvd_model {
    const char *name;
    vs_lm *lm;
    const vs_mmproj *mm;
    vs_tvd_view view;
    bool own_tower; /* M: encode images with the mmproj's own tower (differs from the target's) */
    int width, n_ctx;
    vs_kv *kv;
    vs_mm_image imgs[VS_WORLD_MAX_IMAGES]; /* M: this model's rows of the current sample's images */
    int n_imgs;
} tvd_model;

typedef struct tvd_ctx {
    const vs_tokenizer *tok;
    vs_threadpool *tp;
    const vs_world_dataset *d;
    vs_tvd_opts o;
    int n_vocab, n_batch;
    tvd_model *m; /* (n_m): target first */
    int n_m;
    vs_eval_lm *ans;
    vs_tvd_result *res;
    const vs_world_sample *cur; /* the sample whose images are loaded */
    int turn;
    vs_vision_features feat[VS_WORLD_MAX_IMAGES]; /* the target tower's features of cur's images */
    int n_feat;
    int32_t nl[8]; /* tokens of "\n" (T view) */
    int n_nl;
    float *zero_row;     /* (max width) stands for an image row while a T prompt is built */
    int32_t *rtok;       /* (rcap) rows of the current forced sequence: token or -1 */
    const float **rembd; /* (rcap) image row or NULL */
    int64_t rcap;
    vs_lm_row *rows; /* (n_batch) */
    float *lp, *lq;  /* (lcap floats) target and drafter logits of the turn's positions */
    int64_t lcap;
} tvd_ctx;

/* The tokens of "\n" without the SentencePiece space-prefix token (the T view's image replacement,
 * as draft_ensemble.h documents it). */
static vs_status newline_tokens(tvd_ctx *c, vs_error *err) {
    int64_t n = 0;
    int32_t buf[8];
    vs_status st = vs_tokenize(c->tok, "\n", 1, false, false, buf, 8, &n, err);
    if (st) return vs_error_wrap(err, "tvd: tokenising \"\\n\"");
    int64_t from = 0;
    if (n > 1) {
        size_t len = 0;
        const char *piece = vs_tokenizer_token_piece(c->tok, buf[0], &len);
        if (piece && len == 1 && piece[0] == ' ') from = 1;
    }
    c->n_nl = 0;
    for (int64_t i = from; i < n; i++) c->nl[c->n_nl++] = buf[i];
    if (c->n_nl == 0)
        return vs_error_set(err, VS_ERR_INVALID, "tvd: the tokenizer gives no tokens for \"\\n\"");
    return VS_OK;
}

static void drop_images(tvd_ctx *c) {
    for (int i = 0; i < c->n_feat; i++) vs_vision_features_free(&c->feat[i]);
    c->n_feat = 0;
    for (int k = 0; k < c->n_m; k++) {
        vs_mm_images_free(c->m[k].imgs, c->m[k].n_imgs);
        c->m[k].n_imgs = 0;
    }
    c->cur = NULL;
}

/* Encodes every image of s once with the target's tower and projects it for every M model. */
static vs_status load_images(tvd_ctx *c, const vs_world_sample *s, vs_error *err) {
    drop_images(c);
    const vs_vision_tower *tt = vs_mmproj_tower(c->m[0].mm);
    vs_status st = VS_OK;
    for (int i = 0; st == VS_OK && i < s->n_images; i++) {
        st = vs_vision_encode_file(tt, c->tp, s->images[i], VS_PREPROC_LLAVA, NULL, &c->feat[i], err);
        if (st == VS_OK) c->n_feat = i + 1;
    }
    for (int k = 0; st == VS_OK && k < c->n_m; k++) {
        tvd_model *m = &c->m[k];
        if (m->view != VS_TVD_VIEW_M) continue;
        const vs_vision_projector *p = vs_mmproj_projector(m->mm);
        if (m->own_tower) {
            st = vs_mm_images_from_files(vs_mmproj_tower(m->mm), p, c->tp, (const char *const *)s->images,
                                         s->n_images, VS_PREPROC_LLAVA, 1, m->imgs, err);
            if (st == VS_OK) m->n_imgs = s->n_images;
            continue;
        }
        for (int i = 0; st == VS_OK && i < s->n_images; i++) {
            float *rows = NULL;
            int64_t nr = 0;
            st = vs_vision_embed(p, c->tp, &c->feat[i], 1, &rows, &nr, err);
            if (st == VS_OK) {
                m->imgs[i] = (vs_mm_image){rows, nr, vs_vision_projector_config(p)->proj_out};
                m->n_imgs = i + 1;
            }
        }
    }
    if (st != VS_OK) {
        drop_images(c);
        return vs_error_wrap(err, "tvd: images"); /* vs_eval_run adds the sample and turn */
    }
    c->cur = s;
    return VS_OK;
}

static vs_status grow_rows(tvd_ctx *c, int64_t n, vs_error *err) {
    if (n <= c->rcap) return VS_OK;
    int64_t cap = VS_MAX(n, 2 * c->rcap);
    int32_t *t = vs_realloc(c->rtok, sizeof(int32_t) * (size_t)cap);
    if (t) c->rtok = t;
    const float **e = t ? vs_realloc((void *)c->rembd, sizeof(float *) * (size_t)cap) : NULL;
    if (e) c->rembd = e;
    if (!t || !e) return vs_error_set(err, VS_ERR_NOMEM, "tvd: out of memory (%lld rows)", (long long)n);
    c->rcap = cap;
    return VS_OK;
}

/* The rows model m sees for prompt + answer: c->rtok / c->rembd [0, *n_rows); *n_prompt of them are the
 * prompt's. */
static vs_status build_rows(tvd_ctx *c, tvd_model *m, const vs_world_sample *s, const char *prompt,
                            int n_images, const int32_t *ans, int64_t n_ans, int64_t *n_rows,
                            int64_t *n_prompt, vs_error *err) {
    vs_mm_prompt p;
    vs_mm_prompt_opts po = {.lm_width = m->width};
    vs_mm_image dummy[VS_WORLD_MAX_IMAGES];
    const vs_mm_image *imgs = m->imgs;
    if (m->view == VS_TVD_VIEW_T) {
        for (int i = 0; i < n_images; i++) dummy[i] = (vs_mm_image){c->zero_row, 1, m->width};
        imgs = dummy;
    } else if (n_images > m->n_imgs) {
        return vs_error_set(err, VS_ERR_INVALID, "tvd: %d images asked, %d loaded", n_images, m->n_imgs);
    }
    vs_status st = vs_mm_prompt_build(&p, c->tok, prompt, strlen(prompt), imgs, n_images, &po, err);
    if (st != VS_OK) return vs_error_wrap(err, "tvd: the prompt of %s", m->name);
    int64_t np = 0;
    for (int64_t r = 0; r < p.n_rows; r++) np += p.embd[r] && m->view == VS_TVD_VIEW_T ? c->n_nl : 1;
    const int64_t total = np + n_ans;
    if (total > m->n_ctx) {
        vs_mm_prompt_free(&p);
        return vs_error_set(err, VS_ERR_RANGE,
                            "tvd: %s needs %lld rows (prompt %lld + answer %lld), its context holds %d",
                            m->name, (long long)total, (long long)np, (long long)n_ans, m->n_ctx);
    }
    if ((st = grow_rows(c, total, err)) != VS_OK) {
        vs_mm_prompt_free(&p);
        return st;
    }
    int64_t j = 0;
    for (int64_t r = 0; r < p.n_rows; r++) {
        if (p.embd[r] && m->view == VS_TVD_VIEW_T) {
            for (int i = 0; i < c->n_nl; i++) c->rtok[j] = c->nl[i], c->rembd[j++] = NULL;
        } else {
            c->rtok[j] = p.tokens[r], c->rembd[j++] = p.embd[r];
        }
    }
    for (int64_t i = 0; i < n_ans; i++) c->rtok[j] = ans[i], c->rembd[j++] = NULL;
    vs_mm_prompt_free(&p);
    *n_rows = total, *n_prompt = np;
    return VS_OK;
}

/* Teacher forcing: evaluates rows [0, n_rows) from an empty cache; logits of rows [first, first + k)
 * into logits (k, n_vocab). */
static vs_status force(tvd_ctx *c, tvd_model *m, int64_t n_rows, int64_t first, int64_t k, float *logits,
                       vs_error *err) {
    vs_kv_clear(m->kv);
    float *out = logits;
    for (int64_t r0 = 0; r0 < n_rows; r0 += c->n_batch) {
        const int64_t n = VS_MIN((int64_t)c->n_batch, n_rows - r0);
        int64_t want = 0;
        for (int64_t i = 0; i < n; i++) {
            const int64_t r = r0 + i;
            const bool w = r >= first && r < first + k;
            c->rows[i] = (vs_lm_row){.token = c->rembd[r] ? 0 : c->rtok[r],
                                     .embd = c->rembd[r],
                                     .pos = (int32_t)r,
                                     .want_logits = w};
            want += w;
        }
        vs_lm_out o = {.logits = want ? out : NULL};
        vs_status st = vs_lm_forward(m->lm, m->kv, c->tp, c->rows, (int)n, &o, err);
        if (st != VS_OK) return vs_error_wrap(err, "tvd: %s", m->name);
        out += want * c->n_vocab;
    }
    return VS_OK;
}

static vs_status grow_result(vs_tvd_result *r, int64_t n, vs_error *err) {
    if (n <= r->cap) return VS_OK;
    int64_t cap = VS_MAX(n, VS_MAX(2 * r->cap, 1024));
    vs_tvd_pos *p = vs_realloc(r->pos, sizeof(*p) * (size_t)cap);
    if (!p) return vs_error_set(err, VS_ERR_NOMEM, "tvd: out of memory");
    r->pos = p;
    for (int k = 0; k < r->n_drafters; k++) {
        double *t = vs_realloc(r->tvd[k], sizeof(double) * (size_t)cap);
        if (!t) return vs_error_set(err, VS_ERR_NOMEM, "tvd: out of memory");
        r->tvd[k] = t;
    }
    r->cap = cap;
    return VS_OK;
}

static vs_status grow_logits(tvd_ctx *c, int64_t k, vs_error *err) {
    const int64_t need = k * c->n_vocab;
    if (need <= c->lcap) return VS_OK;
    float *a = vs_realloc(c->lp, sizeof(float) * (size_t)need);
    if (a) c->lp = a;
    float *b = a ? vs_realloc(c->lq, sizeof(float) * (size_t)need) : NULL;
    if (b) c->lq = b;
    if (!a || !b) return vs_error_set(err, VS_ERR_NOMEM, "tvd: out of memory (%lld logits)", (long long)need);
    c->lcap = need;
    return VS_OK;
}

/* The positions of one answered turn: force the target and every drafter, record TVDs. */
static vs_status analyse_turn(tvd_ctx *c, const vs_world_sample *s, const char *prompt, int n_images,
                              bool eos, vs_error *err) {
    int64_t n_ans = 0;
    const int32_t *ans = vs_eval_lm_last_tokens(c->ans, &n_ans);
    const int64_t k = n_ans + (eos ? 1 : 0);
    vs_tvd_result *r = c->res;
    if (k > 0) {
        int64_t n_rows, n_prompt;
        vs_status st = grow_logits(c, k, err);
        if (st == VS_OK) st = grow_result(r, r->n + k, err);
        if (st == VS_OK)
            st = build_rows(c, &c->m[0], s, prompt, n_images, ans, n_ans, &n_rows, &n_prompt, err);
        if (st == VS_OK) st = force(c, &c->m[0], n_rows, n_prompt - 1, k, c->lp, err);
        for (int d = 1; st == VS_OK && d < c->n_m; d++) {
            tvd_model *m = &c->m[d];
            st = build_rows(c, m, s, prompt, n_images, ans, n_ans, &n_rows, &n_prompt, err);
            if (st == VS_OK) st = force(c, m, n_rows, n_prompt - 1, k, c->lq, err);
            for (int64_t i = 0; st == VS_OK && i < k; i++)
                r->tvd[d - 1][r->n + i] =
                    vs_tvd_logits(c->lp + i * c->n_vocab, c->lq + i * c->n_vocab, c->n_vocab);
        }
        if (st != VS_OK) return st;
        for (int64_t i = 0; i < k; i++) {
            const bool eog = i == n_ans;
            r->pos[r->n + i] = (vs_tvd_pos){
                .sample = s - c->d->samples,
                .turn = (int8_t)c->turn,
                .suite = (int8_t)s->suite,
                .eog = eog,
                .index = (int32_t)i,
                .token = eog ? vs_argmax(c->lp + i * c->n_vocab, c->n_vocab) : ans[i],
            };
        }
        r->n += k;
    }
    r->turns++;
    if (c->o.on_turn) {
        vs_tvd_progress p = {.sample = s, .turn = c->turn, .positions = k, .turns = r->turns, .total = r->n};
        c->o.on_turn(c->o.on_turn_ctx, &p);
    }
    return VS_OK;
}

static vs_status on_answer(void *ctx, const vs_world_sample *s, const char *prompt, int n_images,
                           char **answer, int64_t *n_tokens, bool *eos, vs_error *err) {
    tvd_ctx *c = ctx;
    *answer = NULL, *n_tokens = 0, *eos = false;
    /* vs_eval_run calls the turns of a sample in order, one sample after another */
    if (s != c->cur) {
        vs_status st = load_images(c, s, err);
        if (st != VS_OK) return st;
        c->turn = 0;
    } else {
        c->turn++;
    }
    if (c->turn > 0 && !c->o.second_turns) {
        *answer = vs_strdup("");
        return *answer ? VS_OK : vs_error_set(err, VS_ERR_NOMEM, "tvd: out of memory");
    }
    vs_status st = vs_eval_lm_answer(c->ans, s, prompt, n_images, answer, n_tokens, eos, err);
    if (st == VS_OK) st = analyse_turn(c, s, prompt, n_images, *eos, err);
    if (st != VS_OK) {
        vs_free(*answer);
        *answer = NULL;
    }
    return st;
}

/* ---------------------------------------------------------------------------------------------- */
/* Setup */

/* Checks drafter k against the target and fills its model entry. */
static vs_status setup_drafter(tvd_ctx *c, const vs_tvd_drafter *dr, tvd_model *m, vs_error *err) {
    const vs_lm_config *tc = vs_lm_cfg(c->m[0].lm);
    if (!dr->lm) return vs_error_set(err, VS_ERR_INVALID, "tvd: drafter %s has no model", dr->name);
    const vs_lm_config *dc = vs_lm_cfg(dr->lm);
    const char *dpath = vs_gguf_name(vs_lm_gguf(dr->lm)), *tpath = vs_gguf_name(vs_lm_gguf(c->m[0].lm));
    if (dc->n_vocab != tc->n_vocab)
        return vs_error_set(err, VS_ERR_INVALID,
                            "tvd: drafter %s (%s) has a vocabulary of %d tokens, the target (%s) %d: the "
                            "distributions cannot be compared",
                            dr->name, dpath, dc->n_vocab, tpath, tc->n_vocab);
    vs_tokenizer *dt = vs_tokenizer_from_gguf(vs_lm_gguf(dr->lm), err);
    if (!dt) return vs_error_wrap(err, "tvd: drafter %s (%s): its tokenizer", dr->name, dpath);
    vs_status st = vs_tokenizer_compatible(c->tok, dt, err);
    vs_tokenizer_free(dt);
    if (st != VS_OK)
        return vs_error_wrap(err, "tvd: drafter %s (%s) and the target (%s) have different vocabularies",
                             dr->name, dpath, tpath);
    m->name = dr->name;
    m->lm = dr->lm;
    m->width = dc->n_embd;
    m->n_ctx = dc->n_ctx_train;
    m->mm = dr->mm;
    m->view = dr->mm && !c->o.text_only ? VS_TVD_VIEW_M : VS_TVD_VIEW_T;
    if (m->view == VS_TVD_VIEW_M) {
        const vs_vision_projector *p = vs_mmproj_projector(dr->mm);
        const vs_vision_tower *own = vs_mmproj_tower(dr->mm), *tt = vs_mmproj_tower(c->m[0].mm);
        if (vs_vision_projector_config(p)->proj_out != m->width)
            return vs_error_set(err, VS_ERR_INVALID,
                                "tvd: drafter %s: %s projects to width %d, its LM's is %d", dr->name,
                                vs_mmproj_path(dr->mm), vs_vision_projector_config(p)->proj_out, m->width);
        m->own_tower = own && !vs_vision_tower_same(own, tt);
        st = vs_vision_check_projector(m->own_tower ? own : tt, p, err);
        if (st != VS_OK) return vs_error_wrap(err, "tvd: drafter %s", dr->name);
    }
    return VS_OK;
}

void vs_tvd_result_free(vs_tvd_result *r) {
    if (!r) return;
    for (int k = 0; k < r->n_drafters; k++) {
        if (r->names) vs_free(r->names[k]);
        if (r->tvd) vs_free(r->tvd[k]);
    }
    vs_free(r->names), vs_free(r->views), vs_free(r->tvd), vs_free(r->pos);
    memset(r, 0, sizeof(*r));
}

vs_status vs_tvd_run(vs_lm *target, const vs_mmproj *target_mm, const vs_tokenizer *tok, vs_threadpool *tp,
                     const vs_tvd_drafter *drafters, int n_drafters, const vs_world_dataset *d,
                     const vs_tvd_opts *o, vs_tvd_result *res, vs_error *err) {
    memset(res, 0, sizeof(*res));
    static const vs_tvd_opts defaults = {0};
    if (!o) o = &defaults;
    if (!target || !target_mm || !tok || !d || n_drafters < 1 || !drafters)
        return vs_error_set(err, VS_ERR_INVALID, "tvd: needs a target, its mmproj, a dataset and a drafter");
    const vs_lm_config *tc = vs_lm_cfg(target);
    if (!vs_mmproj_tower(target_mm))
        return vs_error_set(err, VS_ERR_INVALID, "tvd: the target's %s has no vision tower",
                            vs_mmproj_path(target_mm));
    if (vs_tokenizer_n_vocab(tok) != tc->n_vocab)
        return vs_error_set(err, VS_ERR_INVALID, "tvd: the tokenizer has %d tokens, the target %d",
                            vs_tokenizer_n_vocab(tok), tc->n_vocab);

    tvd_ctx c;
    memset(&c, 0, sizeof(c));
    c.tok = tok, c.tp = tp, c.d = d, c.o = *o, c.res = res;
    c.n_vocab = tc->n_vocab;
    c.n_batch = o->n_batch > 0 ? o->n_batch : 256;
    c.n_m = n_drafters + 1;
    vs_status st = VS_OK;
    res->n_drafters = n_drafters;
    res->names = vs_calloc((size_t)n_drafters, sizeof(char *));
    res->views = vs_calloc((size_t)n_drafters, sizeof(vs_tvd_view));
    res->tvd = vs_calloc((size_t)n_drafters, sizeof(double *));
    c.m = vs_calloc((size_t)c.n_m, sizeof(tvd_model));
    c.rows = vs_calloc((size_t)c.n_batch, sizeof(vs_lm_row));
    if (!res->names || !res->views || !res->tvd || !c.m || !c.rows) {
        st = vs_error_set(err, VS_ERR_NOMEM, "tvd: out of memory");
        goto done;
    }
    c.m[0] = (tvd_model){.name = "target",
                         .lm = target,
                         .mm = target_mm,
                         .view = VS_TVD_VIEW_M,
                         .width = tc->n_embd,
                         .n_ctx = tc->n_ctx_train};
    int max_width = tc->n_embd;
    for (int k = 0; k < n_drafters && st == VS_OK; k++) {
        const char *name = drafters[k].name ? drafters[k].name : "drafter";
        vs_tvd_drafter dr = drafters[k];
        dr.name = name;
        st = setup_drafter(&c, &dr, &c.m[k + 1], err);
        if (st != VS_OK) break;
        if (!(res->names[k] = vs_strdup(name))) st = vs_error_set(err, VS_ERR_NOMEM, "tvd: out of memory");
        res->views[k] = c.m[k + 1].view;
        max_width = VS_MAX(max_width, c.m[k + 1].width);
    }
    if (st != VS_OK) goto done;
    if ((st = newline_tokens(&c, err)) != VS_OK) goto done;
    if (!(c.zero_row = vs_calloc((size_t)max_width, sizeof(float)))) {
        st = vs_error_set(err, VS_ERR_NOMEM, "tvd: out of memory");
        goto done;
    }
    for (int k = 0; k < c.n_m; k++) {
        c.m[k].kv = vs_lm_kv_new(c.m[k].lm, 1, c.m[k].n_ctx, VS_TYPE_F32, err);
        if (!c.m[k].kv) {
            st = vs_error_wrap(err, "tvd: %s", c.m[k].name);
            goto done;
        }
    }
    vs_eval_lm_opts lo = {.max_tokens = o->max_tokens > 0 ? o->max_tokens : 256, .kv_f32 = true};
    if (!(c.ans = vs_eval_lm_new(target, target_mm, tok, tp, &lo, err))) {
        st = err && err->code ? err->code : VS_ERR_INVALID;
        goto done;
    }
    vs_eval_opts eo = {.limit = o->limit, .suites = o->suites};
    st = vs_eval_run(d, &eo, on_answer, &c, &res->eval, err);

done:
    drop_images(&c);
    vs_eval_lm_free(c.ans);
    for (int k = 0; c.m && k < c.n_m; k++) vs_kv_free(c.m[k].kv);
    vs_free(c.m), vs_free(c.rows), vs_free(c.zero_row), vs_free(c.rtok), vs_free((void *)c.rembd);
    vs_free(c.lp), vs_free(c.lq);
    return st;
}

/* ---------------------------------------------------------------------------------------------- */
/* Summaries */

static bool in_mask(const vs_tvd_result *r, int64_t i, uint32_t mask) {
    return !mask || (mask & VS_WORLD_SUITE_BIT(r->pos[i].suite));
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void vs_tvd_stats_of(const vs_tvd_result *r, int k, uint32_t mask, vs_tvd_stats *s) {
    memset(s, 0, sizeof(*s));
    if (k < 0 || k >= r->n_drafters || r->n == 0) return;
    double *v = vs_malloc(sizeof(double) * (size_t)r->n);
    double sum = 0;
    int64_t n = 0, lo = 0, hi = 0;
    for (int64_t i = 0; i < r->n; i++) {
        if (!in_mask(r, i, mask)) continue;
        const double x = r->tvd[k][i];
        if (v) v[n] = x;
        n++, sum += x, lo += x<0.1, hi += x> 0.5;
        if (x > s->max) s->max = x;
    }
    s->n = n;
    if (n) {
        s->mean = sum / (double)n;
        s->frac_low = (double)lo / (double)n, s->frac_high = (double)hi / (double)n;
        if (v) {
            qsort(v, (size_t)n, sizeof(double), cmp_double);
            s->median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
        } else {
            s->median = NAN; /* out of memory */
        }
    }
    vs_free(v);
}

void vs_tvd_histogram(const vs_tvd_result *r, int k, uint32_t mask, int n_bins, int64_t *counts) {
    if (n_bins < 1) return;
    memset(counts, 0, sizeof(int64_t) * (size_t)n_bins);
    if (k < 0 || k >= r->n_drafters) return;
    for (int64_t i = 0; i < r->n; i++) {
        if (!in_mask(r, i, mask)) continue;
        const double x = r->tvd[k][i];
        if (!(x >= 0 && x <= 1)) continue;
        int b = (int)(x * n_bins);
        counts[b < n_bins ? b : n_bins - 1]++;
    }
}

/* A growing string for the report. */
typedef struct sbuf {
    char *s;
    size_t len, cap;
    bool oom;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        const size_t room = b->cap - b->len;
        const int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? room : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = true;
            return;
        }
        if (b->s && (size_t)n < room) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = VS_MAX(2 * b->cap, b->len + (size_t)n + 256);
        char *t = vs_realloc(b->s, cap);
        if (!t) {
            b->oom = true;
            return;
        }
        b->s = t, b->cap = cap;
    }
}

static uint32_t suites_present(const vs_tvd_result *r) {
    uint32_t m = 0;
    for (int64_t i = 0; i < r->n; i++) m |= VS_WORLD_SUITE_BIT(r->pos[i].suite);
    return m;
}

static void stats_line(sbuf *b, const char *name, const char *view, const char *suite,
                       const vs_tvd_stats *s) {
    sb_printf(b, "%-16s %-4s %-9s %7lld  %6.3f  %6.3f  %5.1f%%  %5.1f%%  %6.3f\n", name, view, suite,
              (long long)s->n, s->mean, s->median, 100.0 * s->frac_low, 100.0 * s->frac_high, s->max);
}

char *vs_tvd_report(const vs_tvd_result *r, int n_bins) {
    sbuf b = {0};
    if (n_bins < 1) n_bins = 20;
    const uint32_t present = suites_present(r);
    sb_printf(&b, "TVD(target, drafter) at %lld answer positions of %lld turns\n", (long long)r->n,
              (long long)r->turns);
    sb_printf(&b, "%-16s %-4s %-9s %7s  %6s  %6s  %6s  %6s  %6s\n", "drafter", "view", "suite", "tokens",
              "mean", "median", "<0.1", ">0.5", "max");
    for (int k = 0; k < r->n_drafters; k++) {
        vs_tvd_stats s;
        for (int su = 0; su < VS_WORLD_N_SUITES; su++) {
            if (!(present & VS_WORLD_SUITE_BIT(su))) continue;
            vs_tvd_stats_of(r, k, VS_WORLD_SUITE_BIT(su), &s);
            stats_line(&b, r->names[k], vs_tvd_view_name(r->views[k]),
                       vs_world_suite_name((vs_world_suite)su), &s);
        }
        vs_tvd_stats_of(r, k, 0, &s);
        stats_line(&b, r->names[k], vs_tvd_view_name(r->views[k]), "all", &s);
    }
    int64_t *counts = vs_malloc(sizeof(int64_t) * (size_t)n_bins);
    for (int k = 0; counts && k < r->n_drafters; k++) {
        vs_tvd_histogram(r, k, 0, n_bins, counts);
        int64_t mx = 0;
        for (int i = 0; i < n_bins; i++) mx = VS_MAX(mx, counts[i]);
        sb_printf(&b, "\nhistogram: %s (%s), %lld positions\n", r->names[k], vs_tvd_view_name(r->views[k]),
                  (long long)r->n);
        for (int i = 0; i < n_bins; i++) {
            const int bar = mx ? (int)((counts[i] * 50 + mx - 1) / mx) : 0;
            sb_printf(&b, "  [%.3f, %.3f%c %7lld  %5.1f%%  ", (double)i / n_bins, (double)(i + 1) / n_bins,
                      i == n_bins - 1 ? ']' : ')', (long long)counts[i],
                      r->n ? 100.0 * (double)counts[i] / (double)r->n : 0.0);
            for (int j = 0; j < bar; j++) sb_printf(&b, "#");
            sb_printf(&b, "\n");
        }
    }
    vs_free(counts);
    if (b.oom || !counts) {
        vs_free(b.s);
        return NULL;
    }
    return b.s;
}

static void json_stats(vs_json_writer *w, const vs_tvd_stats *s) {
    vs_json_obj_begin(w);
    vs_json_kv_int(w, "count", s->n);
    vs_json_kv_num(w, "mean", s->mean);
    vs_json_kv_num(w, "median", s->median);
    vs_json_kv_num(w, "frac_below_0.1", s->frac_low);
    vs_json_kv_num(w, "frac_above_0.5", s->frac_high);
    vs_json_kv_num(w, "max", s->max);
    vs_json_obj_end(w);
}

void vs_tvd_json(const vs_tvd_result *r, int n_bins, vs_json_writer *w) {
    if (n_bins < 1) n_bins = 20;
    const uint32_t present = suites_present(r);
    vs_json_obj_begin(w);
    vs_json_kv_int(w, "positions", r->n);
    vs_json_kv_int(w, "turns", r->turns);
    vs_json_kv_int(w, "bins", n_bins);
    vs_json_key(w, "drafters");
    vs_json_arr_begin(w);
    int64_t *counts = vs_malloc(sizeof(int64_t) * (size_t)n_bins);
    for (int k = 0; k < r->n_drafters; k++) {
        vs_tvd_stats s;
        vs_json_obj_begin(w);
        vs_json_kv_str(w, "name", r->names[k]);
        vs_json_kv_str(w, "view", vs_tvd_view_name(r->views[k]));
        vs_tvd_stats_of(r, k, 0, &s);
        vs_json_key(w, "total");
        json_stats(w, &s);
        vs_json_key(w, "suites");
        vs_json_obj_begin(w);
        for (int su = 0; su < VS_WORLD_N_SUITES; su++) {
            if (!(present & VS_WORLD_SUITE_BIT(su))) continue;
            vs_tvd_stats_of(r, k, VS_WORLD_SUITE_BIT(su), &s);
            vs_json_key(w, vs_world_suite_name((vs_world_suite)su));
            json_stats(w, &s);
        }
        vs_json_obj_end(w);
        vs_json_key(w, "histogram");
        vs_json_arr_begin(w);
        if (counts) {
            vs_tvd_histogram(r, k, 0, n_bins, counts);
            for (int i = 0; i < n_bins; i++) vs_json_int(w, counts[i]);
        }
        vs_json_arr_end(w);
        vs_json_obj_end(w);
    }
    vs_free(counts);
    vs_json_arr_end(w);
    vs_json_obj_end(w);
}

vs_plot *vs_tvd_plot(const vs_tvd_result *r, int n_bins, const char *title, vs_error *err) {
    if (n_bins < 1) n_bins = 20;
    if (r->n == 0) {
        vs_error_set(err, VS_ERR_INVALID, "tvd: no positions to plot (no answer tokens)");
        return NULL;
    }
    vs_plot *p = vs_plot_new(VS_PLOT_HIST, err);
    if (!p) return NULL;
    char buf[256];
    if (!title) {
        snprintf(buf, sizeof(buf), "TVD between target and drafter, %lld tokens", (long long)r->n);
        title = buf;
    }
    vs_status st = vs_plot_title(p, title, err);
    if (st == VS_OK) st = vs_plot_labels(p, "TVD(p, q)", "share of tokens", err);
    vs_plot_bins(p, 0.0, 1.0, n_bins, true);
    vs_plot_xrange(p, 0.0, 1.0);
    for (int k = 0; st == VS_OK && k < r->n_drafters; k++) {
        char name[160];
        snprintf(name, sizeof(name), "%.140s (%s)", r->names[k], vs_tvd_view_name(r->views[k]));
        st = vs_plot_hist(p, name, r->tvd[k], r->n, err);
    }
    if (st != VS_OK) {
        vs_plot_free(p);
        return NULL;
    }
    return p;
}
