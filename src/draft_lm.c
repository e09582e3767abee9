/* draft_lm: a separate small LM as drafter (see draft_lm.h). Sections: creation and the compatibility
 * check, begin (the drafter's prompt rows and their prefill), propose (one chain), commit (roll back,
 * queue the unevaluated rows), end. */
#include "draft_lm.h"

#include <string.h>

#include "tokenizer.h"

typedef struct dl_image {
    int32_t id; /* the segment's image_id (0 = none: never reused) */
    float *rows; /* [n][n_embd] the drafter's projection */
    int64_t n;
} dl_image;

typedef struct draft_lm {
    vs_spec_drafter hdr; /* first member: the engine sees this */
    vs_lm *lm;
    vs_kv *kv;
    vs_threadpool *tp;
    vs_tokenizer *tok;
    vs_draft_lm_mode mode;
    const vs_vision_projector *proj;
    bool debug_reject;
    bool force_greedy; /* opts.greedy */
    int32_t n_ctx, n_vocab, n_embd;
    int32_t nl[8]; /* tokens of "\n" (T mode) */
    int32_t n_nl;
    vs_sampler *sampler;
    bool greedy;
    int64_t *hist; /* [n_ctx] keys of the cached rows (spec.h: token id, image rows by (image_id, row)) */

    /* the current request's prompt rows (image rows point into img[]) and their keys */
    vs_lm_row *prow;
    int64_t *pkey;
    int32_t n_prow, cap_prow;
    /* [n_img] projected rows of the images (M mode), kept after the request: the next request reuses
     * an image's rows when its segment carries the same image_id (chat turns do not project again) */
    dl_image *img;
    int32_t n_img, cap_img;

    /* rows known to be in the context but not evaluated yet, in order, and their keys */
    vs_lm_row *pend;
    int64_t *pend_key;
    int32_t n_pend, cap_pend;

    float *logits; /* [n_vocab] */
    /* the block in flight */
    bool fed;      /* propose evaluated the pending rows and k - 1 drafts */
    int32_t base;  /* cache length after the pending rows */
    int32_t n_fed; /* drafts evaluated (k - 1) */
    int64_t rows_evaluated;
    int32_t prefilled; /* prompt rows the last begin evaluated */
} draft_lm;

static const char *dname(const draft_lm *d) { return vs_gguf_name(vs_lm_gguf(d->lm)); }

/* Grows a row array and its key array together to hold need entries. */
static vs_status grow_rows(draft_lm *d, vs_lm_row **rows, int64_t **keys, int32_t *cap, int32_t need,
                           vs_error *err) {
    if (need <= *cap) return VS_OK;
    int32_t c = *cap ? *cap * 2 : 64;
    while (c < need) c *= 2;
    vs_lm_row *r = vs_realloc(*rows, sizeof(*r) * (size_t)c);
    if (r) *rows = r;
    int64_t *k = r ? vs_realloc(*keys, sizeof(*k) * (size_t)c) : NULL;
    if (k) *keys = k;
    if (!r || !k) return vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory", dname(d));
    *cap = c;
    return VS_OK;
}

static vs_status push_pending(draft_lm *d, const vs_lm_row *r, int64_t key, vs_error *err) {
    vs_status st = grow_rows(d, &d->pend, &d->pend_key, &d->cap_pend, d->n_pend + 1, err);
    if (st) return st;
    d->pend_key[d->n_pend] = key;
    d->pend[d->n_pend++] = *r;
    return VS_OK;
}

static vs_status push_token(draft_lm *d, int32_t token, vs_error *err) {
    vs_lm_row r = {.token = token};
    return push_pending(d, &r, token, err);
}

static vs_status push_prow(draft_lm *d, int32_t token, const float *embd, int64_t key, vs_error *err) {
    vs_status st = grow_rows(d, &d->prow, &d->pkey, &d->cap_prow, d->n_prow + 1, err);
    if (st) return st;
    d->pkey[d->n_prow] = key;
    vs_lm_row *r = &d->prow[d->n_prow++];
    memset(r, 0, sizeof(*r));
    r->token = embd ? -1 : token;
    r->embd = embd;
    return VS_OK;
}

/* Evaluates rows[0..n) (keys[0..n)) at the end of the cache; the last row's logits into d->logits when
 * want. */
static vs_status feed(draft_lm *d, vs_lm_row *rows, const int64_t *keys, int32_t n, bool want,
                      vs_error *err) {
    int32_t L = vs_kv_seq_len(d->kv, 0);
    for (int32_t i = 0; i < n; i++) {
        rows[i].seq = 0;
        rows[i].pos = L + i;
        rows[i].want_logits = want && i == n - 1;
        rows[i].tree = false;
    }
    vs_lm_out out = {.logits = want ? d->logits : NULL, .attn_layer = -1};
    vs_status st = vs_lm_forward(d->lm, d->kv, d->tp, rows, n, &out, err);
    if (st) return st;
    for (int32_t i = 0; i < n; i++) d->hist[L + i] = keys[i];
    d->rows_evaluated += n;
    return VS_OK;
}

/* ------------------------------------------------------------------------------------------------ */

static void free_images(draft_lm *d, int32_t from) {
    for (int32_t i = from; i < d->n_img; i++) vs_free(d->img[i].rows);
    d->n_img = VS_MIN(d->n_img, from);
}

/* The request's state (the projected images stay for the next request). */
static void free_request(draft_lm *d) {
    d->n_prow = 0;
    d->n_pend = 0;
    d->fed = false;
}

static vs_status dl_begin(vs_spec_drafter *base, const vs_spec_begin_info *req, vs_error *err) {
    draft_lm *d = (draft_lm *)base;
    free_request(d);
    const vs_spec_prompt *p = req->prompt;
    vs_sampler_params sp = req->params->sampling;
    /* the drafter's own stream of random numbers, fixed by the request's seed */
    sp.seed ^= 0xD1B54A32D192ED03ull;
    vs_status st = vs_sampler_set_params(d->sampler, &sp, err);
    if (st) return st;
    vs_sampler_seed(d->sampler, sp.seed);
    d->greedy = sp.temperature == 0 || d->force_greedy;

    /* The drafter's prompt rows. M mode: the previous request's projected images come first in img[]
     * (n_old of them); an image segment whose image_id matches one takes it over, the others are
     * projected and appended, and what no segment took is freed below. */
    const int32_t n_old = d->n_img;
    for (int32_t i = 0; i < p->n_seg && !st; i++) {
        const vs_spec_segment *sg = &p->seg[i];
        if (sg->kind == VS_SPEC_SEG_TEXT) {
            for (int32_t j = 0; j < sg->n && !st; j++)
                st = push_prow(d, sg->tokens[j], NULL, sg->tokens[j], err);
        } else if (d->mode == VS_DRAFT_LM_TEXT) {
            for (int32_t j = 0; j < d->n_nl && !st; j++) st = push_prow(d, d->nl[j], NULL, d->nl[j], err);
        } else {
            if (sg->image < 0 || !p->images || !p->images[sg->image]) {
                st = vs_error_set(err, VS_ERR_INVALID,
                                  "%s: multimodal drafting needs the features of image "
                                  "segment %d (the request carries none)",
                                  dname(d), i);
                break;
            }
            dl_image im = {.id = sg->image_id};
            for (int32_t k = 0; k < n_old && sg->image_id > 0 && !im.rows; k++)
                if (d->img[k].id == sg->image_id && d->img[k].rows) im = d->img[k], d->img[k].rows = NULL;
            if (!im.rows) {
                st = vs_vision_embed(d->proj, d->tp, p->images[sg->image], 1, &im.rows, &im.n, err);
                if (st) {
                    vs_error_wrap(err, "%s: projecting image %d", dname(d), sg->image);
                    break;
                }
            }
            if (d->n_img == d->cap_img) {
                int32_t cap = d->cap_img ? d->cap_img * 2 : 8;
                dl_image *n = vs_realloc(d->img, sizeof(*n) * (size_t)cap);
                if (!n) {
                    vs_free(im.rows);
                    st = vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory", dname(d));
                    break;
                }
                d->img = n, d->cap_img = cap;
            }
            d->img[d->n_img++] = im;
            for (int64_t j = 0; j < im.n && !st; j++)
                st = push_prow(d, -1, im.rows + j * d->n_embd, vs_spec_key_image(sg->image_id, j), err);
        }
    }
    /* drop the previous request's images no segment took over */
    int32_t w = 0;
    for (int32_t k = 0; k < d->n_img; k++) {
        if (k < n_old && d->img[k].rows) vs_free(d->img[k].rows);
        if (k >= n_old) d->img[w++] = d->img[k];
    }
    d->n_img = w;
    if (st) return st;
    if (d->n_prow < 1) return vs_error_set(err, VS_ERR_INVALID, "%s: empty prompt", dname(d));
    if (d->n_prow > d->n_ctx)
        return vs_error_set(err, VS_ERR_RANGE,
                            "%s: the prompt's %d rows do not fit the draft cache of %d rows", dname(d),
                            d->n_prow, d->n_ctx);

    /* Prefix reuse (rows whose keys match: tokens, and image rows of identified images), then evaluate
     * everything but the last row, which stays pending. */
    int32_t keep = 0;
    if (req->params->reuse_prefix)
        keep = vs_spec_keys_common(d->pkey, d->hist, VS_MIN(vs_kv_seq_len(d->kv, 0), d->n_prow - 1));
    if ((st = vs_kv_seq_truncate(d->kv, 0, keep, err))) return st;
    d->prefilled = d->n_prow - 1 - keep;
    for (int32_t a = keep; a < d->n_prow - 1 && !st; a += 512)
        st = feed(d, d->prow + a, d->pkey + a, VS_MIN(512, d->n_prow - 1 - a), false, err);
    if (st) return st;
    return push_pending(d, &d->prow[d->n_prow - 1], d->pkey[d->n_prow - 1], err);
}

static int32_t argmin(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] < x[best]) best = i;
    return best;
}

static vs_status dl_propose(vs_spec_drafter *base, const vs_spec_limits *lim, vs_spec_proposal *out,
                            vs_error *err) {
    draft_lm *d = (draft_lm *)base;
    out->n = 0;
    out->n_steps = 0;
    d->fed = false;
    const int32_t D = vs_kv_seq_len(d->kv, 0), u = d->n_pend;
    if (u < 1 || u > d->n_ctx - D) return VS_OK; /* cache full: nothing to propose, the engine decodes */
    /* the pending rows + k - 1 drafts must fit */
    const int32_t k = VS_MIN(lim->max_depth, d->n_ctx - D - u + 1);
    if (k < 1) return VS_OK;
    vs_status st = feed(d, d->pend, d->pend_key, u, true, err);
    if (st) return st;
    d->n_pend = 0;
    d->base = D + u;
    d->n_fed = 0;
    d->fed = true;
    const size_t V = (size_t)d->n_vocab;
    for (int32_t i = 0; i < k; i++) {
        int32_t t;
        if (d->debug_reject) {
            t = argmin(d->logits, d->n_vocab);
            out->q_row[i] = -1;
        } else if (d->greedy) {
            t = vs_argmax(d->logits, (int64_t)V);
            out->q_row[i] = -1;
        } else {
            float *q = out->q + (size_t)i * V;
            if ((st = vs_sampler_probs(d->sampler, d->logits, q, err))) return st;
            if ((st = vs_sampler_pick(d->sampler, q, &t, err))) return st;
            out->q_row[i] = i;
        }
        out->token[i] = t;
        out->parent[i] = i - 1;
        out->depth[i] = i + 1;
        out->n = i + 1;
        out->n_steps++;
        if (i + 1 < k) {
            vs_lm_row r = {.token = t};
            const int64_t key = t;
            if ((st = feed(d, &r, &key, 1, true, err))) return st;
            d->n_fed++;
        }
    }
    return VS_OK;
}

static vs_status dl_commit(vs_spec_drafter *base, const vs_spec_commit *c, vs_error *err) {
    draft_lm *d = (draft_lm *)base;
    vs_status st = VS_OK;
    if (d->fed) {
        /* keep the evaluated accepted drafts; the last draft was never evaluated */
        int32_t a = c->n_accepted;
        if ((st = vs_kv_seq_truncate(d->kv, 0, d->base + VS_MIN(a, d->n_fed), err))) return st;
        if (a > d->n_fed && (st = push_token(d, c->accepted[a - 1], err))) return st;
        d->fed = false;
    }
    if (c->next >= 0) st = push_token(d, c->next, err);
    return st;
}

static void dl_end(vs_spec_drafter *base) {
    draft_lm *d = (draft_lm *)base;
    free_request(d);
}

static void dl_free(vs_spec_drafter *base) {
    draft_lm *d = (draft_lm *)base;
    if (!d) return;
    free_request(d);
    free_images(d, 0);
    vs_free(d->img);
    vs_kv_free(d->kv);
    vs_tokenizer_free(d->tok);
    vs_sampler_free(d->sampler);
    vs_free(d->hist), vs_free(d->prow), vs_free(d->pkey), vs_free(d->pend), vs_free(d->pend_key);
    vs_free(d->logits);
    vs_free(d);
}

static const vs_spec_drafter_vt draft_lm_vt = {
    .name = "draft-lm",
    .begin = dl_begin,
    .target_rows = NULL,
    .propose = dl_propose,
    .commit = dl_commit,
    .end = dl_end,
    .free = dl_free,
};

/* The tokens of "\n" without the SentencePiece space prefix (T mode's image replacement). */
static vs_status newline_tokens(draft_lm *d, vs_error *err) {
    int64_t n = 0;
    int32_t buf[8];
    vs_status st = vs_tokenize(d->tok, "\n", 1, false, false, buf, 8, &n, err);
    if (st) return vs_error_wrap(err, "%s: tokenising \"\\n\"", dname(d));
    int64_t from = 0;
    if (n > 1) {
        size_t len = 0;
        const char *piece = vs_tokenizer_token_piece(d->tok, buf[0], &len);
        if (piece && len == 1 && piece[0] == ' ') from = 1;
    }
    d->n_nl = 0;
    for (int64_t i = from; i < n; i++) d->nl[d->n_nl++] = buf[i];
    return VS_OK;
}

vs_spec_drafter *vs_draft_lm_new(vs_lm *draft, const vs_lm *target, const vs_draft_lm_opts *opts,
                                 vs_error *err) {
    vs_draft_lm_opts def = {0};
    if (!opts) opts = &def;
    if (!draft || !target) {
        vs_error_set(err, VS_ERR_INVALID, "draft-lm: needs a draft and a target model");
        return NULL;
    }
    const char *dn = vs_gguf_name(vs_lm_gguf(draft)), *tn = vs_gguf_name(vs_lm_gguf(target));
    const vs_lm_config *dc = vs_lm_cfg(draft), *tc = vs_lm_cfg(target);
    if (dc->n_vocab != tc->n_vocab) {
        vs_error_set(err, VS_ERR_INVALID,
                     "draft model %s has %d tokens but the target %s has %d: a drafter must "
                     "share the target's vocabulary",
                     dn, dc->n_vocab, tn, tc->n_vocab);
        return NULL;
    }
    if (opts->mode != VS_DRAFT_LM_TEXT && opts->mode != VS_DRAFT_LM_MM) {
        vs_error_set(err, VS_ERR_INVALID, "draft-lm: unknown drafting mode %d", (int)opts->mode);
        return NULL;
    }
    if (opts->mode == VS_DRAFT_LM_MM) {
        if (!opts->proj) {
            vs_error_set(err, VS_ERR_INVALID,
                         "draft model %s: multimodal drafting needs a projector (--mmproj-draft)", dn);
            return NULL;
        }
        const vs_vision_config *pc = vs_vision_projector_config(opts->proj);
        if (pc->proj_out != dc->n_embd) {
            vs_error_set(err, VS_ERR_INVALID,
                         "draft projector %s outputs rows of %d but the draft model %s is %d wide",
                         vs_vision_projector_name(opts->proj), pc->proj_out, dn, dc->n_embd);
            return NULL;
        }
        if (opts->tower && vs_vision_check_projector(opts->tower, opts->proj, err) != VS_OK) return NULL;
    }
    vs_tokenizer *tt = vs_tokenizer_from_gguf(vs_lm_gguf(target), err);
    if (!tt) {
        vs_error_wrap(err, "target %s", tn);
        return NULL;
    }
    draft_lm *d = vs_calloc(1, sizeof(*d));
    if (!d) {
        vs_tokenizer_free(tt);
        vs_error_set(err, VS_ERR_NOMEM, "draft-lm: out of memory");
        return NULL;
    }
    d->hdr.vt = &draft_lm_vt;
    d->hdr.n_vocab = dc->n_vocab;
    d->lm = draft;
    d->tp = opts->tp;
    d->mode = opts->mode;
    d->proj = opts->proj;
    d->debug_reject = opts->debug_reject;
    d->force_greedy = opts->greedy;
    d->n_vocab = dc->n_vocab;
    d->n_embd = dc->n_embd;
    d->n_ctx = opts->n_ctx > 0 ? opts->n_ctx : dc->n_ctx_train;
    d->tok = vs_tokenizer_from_gguf(vs_lm_gguf(draft), err);
    if (!d->tok) {
        vs_error_wrap(err, "draft model %s", dn);
        goto fail;
    }
    if (vs_tokenizer_compatible(tt, d->tok, err) != VS_OK) {
        vs_error_wrap(err, "draft model %s cannot draft for %s", dn, tn);
        goto fail;
    }
    vs_tokenizer_free(tt);
    tt = NULL;
    if (newline_tokens(d, err)) goto fail;
    vs_sampler_params sp = vs_sampler_params_default();
    d->sampler = vs_sampler_new(d->n_vocab, &sp, err);
    if (!d->sampler) goto fail;
    d->kv = vs_lm_kv_new(draft, 1, d->n_ctx, opts->kv_type == VS_TYPE_F16 ? VS_TYPE_F16 : VS_TYPE_F32, err);
    if (!d->kv) goto fail;
    d->hist = vs_malloc(sizeof(int64_t) * (size_t)d->n_ctx);
    d->logits = vs_malloc(sizeof(float) * (size_t)d->n_vocab);
    if (!d->hist || !d->logits) {
        vs_error_set(err, VS_ERR_NOMEM, "draft-lm: out of memory");
        goto fail;
    }
    return &d->hdr;
fail:
    vs_tokenizer_free(tt);
    dl_free(&d->hdr);
    return NULL;
}

int64_t vs_draft_lm_rows_evaluated(const vs_spec_drafter *d) {
    return d && d->vt == &draft_lm_vt ? ((const draft_lm *)d)->rows_evaluated : -1;
}

int32_t vs_draft_lm_prefilled(const vs_spec_drafter *d) {
    return d && d->vt == &draft_lm_vt ? ((const draft_lm *)d)->prefilled : -1;
}

vs_kv *vs_draft_lm_kv(vs_spec_drafter *d) { return d && d->vt == &draft_lm_vt ? ((draft_lm *)d)->kv : NULL; }
