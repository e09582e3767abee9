/* draft_lm: a separate small LM as drafter (see draft_lm.h). Sections: creation and the compatibility
 * check, begin (the drafter's prompt rows and their prefill), propose (one chain), commit (roll back,
 * queue the unevaluated rows), end. */
#include "draft_lm.h"

#include <string.h>

#include "tokenizer.h"

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
    int32_t *hist; /* [n_ctx] keys of the cached rows: token id, -1 for an embedding row */

    /* the current request's prompt rows (image rows point into img[]) */
    vs_lm_row *prow;
    int32_t n_prow, cap_prow;
    float **img; /* [n_img] projected rows of each image segment (M mode) */
    int32_t n_img;

    /* rows known to be in the context but not evaluated yet, in order */
    vs_lm_row *pend;
    int32_t n_pend, cap_pend;

    float *logits; /* [n_vocab] */
    /* the block in flight */
    bool fed;      /* propose evaluated the pending rows and k - 1 drafts */
    int32_t base;  /* cache length after the pending rows */
    int32_t n_fed; /* drafts evaluated (k - 1) */
    int64_t rows_evaluated;
} draft_lm;

static const char *dname(const draft_lm *d) { return vs_gguf_name(vs_lm_gguf(d->lm)); }

static vs_status push_pending(draft_lm *d, const vs_lm_row *r, vs_error *err) {
    if (d->n_pend == d->cap_pend) {
        int32_t cap = d->cap_pend ? d->cap_pend * 2 : 16;
        vs_lm_row *n = vs_realloc(d->pend, sizeof(*n) * (size_t)cap);
        if (!n) return vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory", dname(d));
        d->pend = n, d->cap_pend = cap;
    }
    d->pend[d->n_pend++] = *r;
    return VS_OK;
}

static vs_status push_prow(draft_lm *d, int32_t token, const float *embd, vs_error *err) {
    if (d->n_prow == d->cap_prow) {
        int32_t cap = d->cap_prow ? d->cap_prow * 2 : 256;
        vs_lm_row *n = vs_realloc(d->prow, sizeof(*n) * (size_t)cap);
        if (!n) return vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory", dname(d));
        d->prow = n, d->cap_prow = cap;
    }
    vs_lm_row *r = &d->prow[d->n_prow++];
    memset(r, 0, sizeof(*r));
    r->token = embd ? -1 : token;
    r->embd = embd;
    return VS_OK;
}

/* Evaluates rows[0..n) at the end of the cache; the last row's logits into d->logits when want. */
static vs_status feed(draft_lm *d, vs_lm_row *rows, int32_t n, bool want, vs_error *err) {
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
    for (int32_t i = 0; i < n; i++) d->hist[L + i] = rows[i].embd ? -1 : rows[i].token;
    d->rows_evaluated += n;
    return VS_OK;
}

/* ------------------------------------------------------------------------------------------------ */

static void free_request(draft_lm *d) {
    for (int32_t i = 0; i < d->n_img; i++) vs_free(d->img[i]);
    vs_free(d->img);
    d->img = NULL;
    d->n_img = 0;
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

    /* The drafter's prompt rows. */
    if (p->n_seg > 0 && d->mode == VS_DRAFT_LM_MM) {
        d->img = vs_calloc((size_t)p->n_seg, sizeof(float *));
        if (!d->img) return vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory", dname(d));
    }
    for (int32_t i = 0; i < p->n_seg && !st; i++) {
        const vs_spec_segment *sg = &p->seg[i];
        if (sg->kind == VS_SPEC_SEG_TEXT) {
            for (int32_t j = 0; j < sg->n && !st; j++) st = push_prow(d, sg->tokens[j], NULL, err);
        } else if (d->mode == VS_DRAFT_LM_TEXT) {
            for (int32_t j = 0; j < d->n_nl && !st; j++) st = push_prow(d, d->nl[j], NULL, err);
        } else {
            if (sg->image < 0 || !p->images || !p->images[sg->image])
                return vs_error_set(err, VS_ERR_INVALID,
                                    "%s: multimodal drafting needs the features of image "
                                    "segment %d (the request carries none)",
                                    dname(d), i);
            float *rows = NULL;
            int64_t n_rows = 0;
            st = vs_vision_embed(d->proj, d->tp, p->images[sg->image], 1, &rows, &n_rows, err);
            if (st) return vs_error_wrap(err, "%s: projecting image %d", dname(d), sg->image);
            d->img[d->n_img++] = rows;
            for (int64_t j = 0; j < n_rows && !st; j++) st = push_prow(d, -1, rows + j * d->n_embd, err);
        }
    }
    if (st) return st;
    if (d->n_prow < 1) return vs_error_set(err, VS_ERR_INVALID, "%s: empty prompt", dname(d));
    if (d->n_prow > d->n_ctx)
        return vs_error_set(err, VS_ERR_RANGE,
                            "%s: the prompt's %d rows do not fit the draft cache of %d rows", dname(d),
                            d->n_prow, d->n_ctx);

    /* Prefix reuse (text rows only), then evaluate everything but the last row, which stays pending. */
    int32_t keep = 0;
    if (req->params->reuse_prefix) {
        int32_t len = vs_kv_seq_len(d->kv, 0);
        while (keep < VS_MIN(len, d->n_prow - 1) && !d->prow[keep].embd &&
               d->hist[keep] == d->prow[keep].token)
            keep++;
    }
    if ((st = vs_kv_seq_truncate(d->kv, 0, keep, err))) return st;
    for (int32_t a = keep; a < d->n_prow - 1 && !st; a += 512)
        st = feed(d, d->prow + a, VS_MIN(512, d->n_prow - 1 - a), false, err);
    if (st) return st;
    return push_pending(d, &d->prow[d->n_prow - 1], err);
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
    vs_status st = feed(d, d->pend, u, true, err);
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
            if ((st = feed(d, &r, 1, true, err))) return st;
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
        if (a > d->n_fed) {
            vs_lm_row r = {.token = c->accepted[a - 1]};
            if ((st = push_pending(d, &r, err))) return st;
        }
        d->fed = false;
    }
    if (c->next >= 0) {
        vs_lm_row r = {.token = c->next};
        st = push_pending(d, &r, err);
    }
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
    vs_kv_free(d->kv);
    vs_tokenizer_free(d->tok);
    vs_sampler_free(d->sampler);
    vs_free(d->hist), vs_free(d->prow), vs_free(d->pend), vs_free(d->logits);
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
    d->hist = vs_malloc(sizeof(int32_t) * (size_t)d->n_ctx);
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

vs_kv *vs_draft_lm_kv(vs_spec_drafter *d) { return d && d->vt == &draft_lm_vt ? ((draft_lm *)d)->kv : NULL; }
