/* draft_ensemble: in-batch ensemble drafter (see draft_ensemble.h). Sections: inputs, rows and feeding,
 * the rows' prompts (begin, deferred caption row), propose (batched steps, q_ens), commit (history,
 * per-row rollback, trace), end, creation. */
#include "draft_ensemble.h"

#include <ctype.h>
#include <math.h>
#include <string.h>

#include "kernels.h"
#include "sample.h"
#include "tokenizer.h"
#include "tree_build.h"

#define PREFILL_CHUNK 512

/* ------------------------------------------------------------------------------------------------
 * Inputs */

static const char *const input_names[] = {"m", "t", "c", "p"};

const char *vs_ens_input_name(vs_ens_input in) {
    return (unsigned)in < VS_ARRAY_LEN(input_names) ? input_names[in] : "?";
}

vs_status vs_ens_inputs_parse(const char *s, vs_ens_input *in, int32_t *n, vs_error *err) {
    *n = 0;
    if (!s || !*s)
        return vs_error_set(err, VS_ERR_INVALID, "drafting inputs: empty list (expected e.g. m,t,c,p)");
    bool seen[4] = {false, false, false, false};
    for (const char *p = s; *p; p++) {
        if (*p == ',' || *p == ' ') continue;
        int k = -1;
        for (int i = 0; i < 4; i++)
            if (tolower((unsigned char)*p) == input_names[i][0]) k = i;
        if (k < 0)
            return vs_error_set(err, VS_ERR_INVALID,
                                "drafting inputs '%s': unknown input '%c' (expected m, t, c, p)", s, *p);
        if (seen[k])
            return vs_error_set(err, VS_ERR_INVALID, "drafting inputs '%s': '%c' given twice", s, *p);
        seen[k] = true;
        in[(*n)++] = (vs_ens_input)k;
    }
    if (*n == 0) return vs_error_set(err, VS_ERR_INVALID, "drafting inputs '%s': no input", s);
    return VS_OK;
}

void vs_draft_ens_opts_default(vs_draft_ens_opts *o) {
    memset(o, 0, sizeof(*o));
    o->n_inputs = 1;
    o->inputs[0] = VS_ENS_IN_T;
    vs_ens_weights_cfg_default(&o->weights);
    o->pool_k = 2;
}

/* ------------------------------------------------------------------------------------------------
 * State */

typedef struct ens_row {
    vs_ens_input in;
    vs_lm_row *prow; /* [n_prow] this row's prompt (image rows point into ens.img) */
    int64_t *pkey;   /* [n_prow] their keys (spec.h: token id, image rows by (image_id, row)) */
    int32_t n_prow, cap_prow;
    int64_t *hist;   /* [n_ctx] key of each cached row */
    vs_lm_row *pend; /* [n_pend] rows in the context, not evaluated yet */
    int64_t *pend_key;
    int32_t n_pend, cap_pend;
    bool deferred; /* C row whose captions are being computed: prompt not built yet */
    int32_t base;  /* block in flight: cache length after the pending rows */
} ens_row;

typedef struct ens_image {
    int32_t id, pool_k; /* the segment's image_id (0 = never reused), the pooling window */
    float *rows;        /* [n][n_embd] */
    int64_t n;
} ens_image;

typedef struct ens {
    vs_spec_drafter hdr; /* first member: the engine sees this */
    vs_lm *lm;
    const vs_lm *target;
    vs_kv *kv; /* one sequence per row */
    vs_threadpool *tp;
    vs_tokenizer *tok;
    int32_t m, n_ctx, n_vocab, n_embd;
    unsigned mm_flags; /* F16/BF16 products: AMX tiles for m >= 2 rows on one thread (see below) */
    ens_row row[VS_ENS_MAX_ROWS];
    const vs_vision_projector *proj;
    int32_t pool_k;
    vs_caption_src *caps;
    bool caps_async;
    int32_t nl[8]; /* tokens of "\n" (T) */
    int32_t n_nl;
    /* weights */
    vs_ens_weights_cfg wcfg;
    vs_ens_hist *hist; /* m > 1 */
    bool learns;       /* the policy reads the history */
    vs_rng rng;
    uint64_t seed;
    float w[VS_ENS_MAX_ROWS];
    /* sampling */
    vs_sampler *sampler;
    bool greedy, force_greedy, debug_reject;
    int32_t width; /* configured tree width (1 = chains) */
    float p_min;   /* adaptive draft length (vs_draft_ens_opts.p_min; chains) */
    int32_t topk, tnodes; /* EAGLE-2 trees: K (0 = off), nodes per proposal */
    /* buffers */
    float *logits; /* [max(width, topk)][m][V] the rows' logits of the current step (branch-major) */
    float *qrow;   /* [qcap][m][V] each row's q of each distribution of the block (id = the q row: 0 for
                    * depth 1, else the node's index); only for policies that learn (NULL otherwise) */
    int32_t qcap;
    float *qtmp;    /* [V] sampling siblings without replacement; dist's scratch row when nothing learns */
    int32_t *panc;  /* [cap_panc] cached-ancestor slot lists of the tree rows of one step */
    int32_t cap_panc;
    float *qens;      /* [V] q_ens when drafting greedily */
    float *pbuf;      /* [V] the target's distribution of a verified position */
    vs_lm_row *batch; /* [cap_batch] */
    int64_t *bkey;    /* [cap_batch] the batch rows' keys */
    int32_t cap_batch;
    /* the request */
    const vs_spec_prompt *prompt; /* valid between begin and end */
    bool reuse;
    /* [n_img] projected images (M, P), kept after the request: the next request takes an image's rows
     * over when its segment has the same image_id (and the same pooling): chat turns do not project
     * again */
    ens_image *img;
    int32_t n_img, cap_img, n_old_img;
    bool caps_started;
    /* the block in flight */
    bool fed;
    int32_t k, n_fed, wcur; /* depth, depths fed, branches (1 = chain) */
    int32_t *node_slot;     /* [cap_node] per proposal node: its cache slot - base, -1 = never fed */
    int32_t *node_qid;      /* [cap_node] id of the distribution drawn after the node, -1 = none */
    int32_t cap_node, cap_node2;
    vs_tree_cand *cand; /* [cap_cand] EAGLE-2 candidates of the block */
    int32_t *order;     /* [cap_cand] proposal node -> candidate */
    int32_t cap_cand, cap_order;
    /* trace */
    bool tracing;
    vs_ens_trace trace;
    int32_t n_requests, request, block, step;
    vs_draft_ens_stats stats;
} ens;

static const char *dname(const ens *d) { return vs_gguf_name(vs_lm_gguf(d->lm)); }

static vs_status oom(const ens *d, vs_error *err) {
    return vs_error_set(err, VS_ERR_NOMEM, "ensemble drafter %s: out of memory", dname(d));
}


/* Appends a row (token or embedding) with its key to a row array and its parallel key array. */
static vs_status push_row(ens *d, vs_lm_row **arr, int64_t **keys, int32_t *n, int32_t *cap, int32_t token,
                          const float *embd, int64_t key, vs_error *err) {
    int32_t c1 = *cap, c2 = *cap;
    if (vs_grow((void **)arr, &c1, *n + 1, sizeof(vs_lm_row)) ||
        vs_grow((void **)keys, &c2, *n + 1, sizeof(int64_t)))
        return oom(d, err);
    *cap = c1;
    (*keys)[*n] = key;
    vs_lm_row *r = &(*arr)[(*n)++];
    memset(r, 0, sizeof(*r));
    r->token = embd ? -1 : token;
    r->embd = embd;
    return VS_OK;
}

/* Evaluates batch[0..n) (rows of any sequences, seq already set, want_logits set by the caller): each
 * row's position continues its sequence. Logits of the wanted rows land in d->logits in batch order. */
static vs_status feed(ens *d, int32_t n, vs_error *err) {
    int32_t off[VS_ENS_MAX_ROWS] = {0};
    bool want = false;
    for (int32_t i = 0; i < n; i++) {
        vs_lm_row *r = &d->batch[i];
        r->pos = vs_kv_seq_len(d->kv, r->seq) + off[r->seq]++;
        r->tree = false;
        want |= r->want_logits;
    }
    vs_lm_out out = {.logits = want ? d->logits : NULL, .attn_layer = -1, .mm_flags = d->mm_flags};
    vs_status st = vs_lm_forward(d->lm, d->kv, d->tp, d->batch, n, &out, err);
    if (st) return st;
    for (int32_t i = 0; i < n; i++)
        d->row[d->batch[i].seq].hist[d->batch[i].pos] = d->bkey[i];
    d->stats.rows_evaluated += n;
    d->stats.forwards++;
    return VS_OK;
}

static vs_status ensure_batch(ens *d, int32_t n, vs_error *err) {
    int32_t c1 = d->cap_batch, c2 = d->cap_batch;
    if (vs_grow((void **)&d->batch, &c1, n, sizeof(vs_lm_row)) ||
        vs_grow((void **)&d->bkey, &c2, n, sizeof(int64_t)))
        return oom(d, err);
    d->cap_batch = c1;
    return VS_OK;
}

/* Evaluates the tree rows batch[0..n) (pos, tree, mask_past set by the caller): each lands in its
 * sequence's next slot, in batch order. */
static vs_status feed_tree(ens *d, int32_t n, vs_error *err) {
    int32_t len[VS_ENS_MAX_ROWS];
    for (int32_t r = 0; r < d->m; r++) len[r] = vs_kv_seq_len(d->kv, r);
    vs_lm_out out = {.logits = d->logits, .attn_layer = -1, .mm_flags = d->mm_flags};
    vs_status st = vs_lm_forward(d->lm, d->kv, d->tp, d->batch, n, &out, err);
    if (st) return st;
    for (int32_t i = 0; i < n; i++) d->row[d->batch[i].seq].hist[len[d->batch[i].seq]++] = d->bkey[i];
    d->stats.rows_evaluated += n;
    d->stats.forwards++;
    return VS_OK;
}

/* ------------------------------------------------------------------------------------------------
 * The rows' prompts */

/* The request's state (the projected images stay for the next request). */
static void free_request(ens *d) {
    for (int32_t r = 0; r < d->m; r++) {
        d->row[r].n_prow = 0;
        d->row[r].n_pend = 0;
        d->row[r].deferred = false;
    }
    d->fed = false;
    d->prompt = NULL;
}

/* The drafter's projection of an image (pooled k x k): taken over from the previous request's images
 * (img[0 .. n_old_img)) when one has the same image_id > 0 and pool_k, else computed. */
static vs_status project(ens *d, const vs_vision_features *f, int32_t image_id, int32_t pool_k, float **rows,
                         int64_t *n_rows, vs_error *err) {
    if (vs_grow((void **)&d->img, &d->cap_img, d->n_img + 1, sizeof(ens_image))) return oom(d, err);
    ens_image im = {.id = image_id, .pool_k = pool_k};
    for (int32_t k = 0; k < d->n_old_img && image_id > 0 && !im.rows; k++) {
        ens_image *o = &d->img[k];
        if (o->rows && o->id == image_id && o->pool_k == pool_k)
            im.rows = o->rows, im.n = o->n, o->rows = NULL;
    }
    if (!im.rows) {
        vs_status st = vs_vision_embed(d->proj, d->tp, f, pool_k, &im.rows, &im.n, err);
        if (st) return st;
    }
    d->img[d->n_img++] = im;
    *rows = im.rows, *n_rows = im.n;
    return VS_OK;
}

/* Frees the previous request's images no segment took over (img[0 .. n_old_img)). */
static void drop_old_images(ens *d) {
    int32_t w = 0;
    for (int32_t k = 0; k < d->n_img; k++) {
        if (k < d->n_old_img)
            vs_free(d->img[k].rows);
        else
            d->img[w++] = d->img[k];
    }
    d->n_img = w;
    d->n_old_img = 0;
}

/* Builds row r's prompt from the request's segments. */
static vs_status build_prompt(ens *d, int32_t r, vs_error *err) {
    ens_row *w = &d->row[r];
    const vs_spec_prompt *p = d->prompt;
    const char *in = vs_ens_input_name(w->in);
    vs_status st = VS_OK;
    w->n_prow = 0;
    for (int32_t i = 0; i < p->n_seg && !st; i++) {
        const vs_spec_segment *sg = &p->seg[i];
        if (sg->kind == VS_SPEC_SEG_TEXT) {
            for (int32_t j = 0; j < sg->n && !st; j++)
                st = push_row(d, &w->prow, &w->pkey, &w->n_prow, &w->cap_prow, sg->tokens[j], NULL,
                              sg->tokens[j], err);
            continue;
        }
        switch (w->in) {
        case VS_ENS_IN_T:
            for (int32_t j = 0; j < d->n_nl && !st; j++)
                st = push_row(d, &w->prow, &w->pkey, &w->n_prow, &w->cap_prow, d->nl[j], NULL, d->nl[j], err);
            break;
        case VS_ENS_IN_M:
        case VS_ENS_IN_P: {
            if (sg->image < 0 || !p->images || !p->images[sg->image])
                return vs_error_set(err, VS_ERR_INVALID,
                                    "%s: drafting input %s needs the features of image segment "
                                    "%d (the request carries none)",
                                    dname(d), in, i);
            const vs_vision_features *f = p->images[sg->image];
            int32_t k = w->in == VS_ENS_IN_P ? d->pool_k : 1;
            if (k > f->grid_h || k > f->grid_w)
                return vs_error_set(err, VS_ERR_INVALID,
                                    "%s: pooled drafting: pool size %d is larger than image "
                                    "%d's %d x %d patch grid",
                                    dname(d), k, sg->image, f->grid_h, f->grid_w);
            float *rows = NULL;
            int64_t n_rows = 0;
            if ((st = project(d, f, sg->image_id, k, &rows, &n_rows, err)))
                return vs_error_wrap(err, "%s: drafting input %s, image %d", dname(d), in, sg->image);
            for (int64_t j = 0; j < n_rows && !st; j++)
                st = push_row(d, &w->prow, &w->pkey, &w->n_prow, &w->cap_prow, -1, rows + j * d->n_embd,
                              vs_spec_key_image(sg->image_id, j), err);
            break;
        }
        case VS_ENS_IN_C: {
            const char *cap = sg->image >= 0 ? vs_caption_src_get(d->caps, sg->image) : NULL;
            if (!cap)
                return vs_error_set(err, VS_ERR_INVALID,
                                    "%s: caption drafting: no caption for image %d (segment %d)", dname(d),
                                    sg->image, i);
            if (!*cap) d->stats.n_empty_captions++;
            size_t cl = strlen(cap);
            char *text = vs_malloc(cl + 8);
            if (!text) return oom(d, err);
            memcpy(text, "image: ", 7);
            memcpy(text + 7, cap, cl + 1);
            int32_t *ids = NULL;
            int64_t n_ids = 0;
            st = vs_tokenize_alloc(d->tok, text, cl + 7, false, false, &ids, &n_ids, err);
            vs_free(text);
            if (st) return vs_error_wrap(err, "%s: tokenising the caption of image %d", dname(d), sg->image);
            for (int64_t j = 0; j < n_ids && !st; j++)
                st = push_row(d, &w->prow, &w->pkey, &w->n_prow, &w->cap_prow, ids[j], NULL, ids[j], err);
            vs_free(ids);
            break;
        }
        }
    }
    if (st) return st;
    if (w->n_prow < 1)
        return vs_error_set(err, VS_ERR_INVALID, "%s: empty prompt for input %s", dname(d), in);
    if (w->n_prow > d->n_ctx)
        return vs_error_set(err, VS_ERR_RANGE,
                            "%s: input %s's prompt of %d rows does not fit the draft cache of %d "
                            "rows",
                            dname(d), in, w->n_prow, d->n_ctx);
    d->stats.prefix_rows[r] = w->n_prow;
    return VS_OK;
}

/* Evaluates the prompts of the rows in mask (all but each prompt's last row, which becomes pending), as
 * rows of shared forwards of at most PREFILL_CHUNK rows. Cached leading rows whose keys equal the
 * prompt's (tokens; image rows by image_id and row) are kept when the request allows reuse. */
static vs_status prefill(ens *d, uint32_t mask, vs_error *err) {
    vs_status st;
    int32_t from[VS_ENS_MAX_ROWS] = {0};
    for (int32_t r = 0; r < d->m; r++) {
        if (!(mask >> r & 1)) continue;
        ens_row *w = &d->row[r];
        int32_t keep = 0;
        if (d->reuse)
            keep = vs_spec_keys_common(w->pkey, w->hist, VS_MIN(vs_kv_seq_len(d->kv, r), w->n_prow - 1));
        if ((st = vs_kv_seq_truncate(d->kv, r, keep, err))) return st;
        from[r] = keep;
        d->stats.prefilled[r] = w->n_prow - 1 - keep;
    }
    if ((st = ensure_batch(d, PREFILL_CHUNK, err))) return st;
    int32_t n = 0;
    for (int32_t r = 0; r < d->m; r++) {
        if (!(mask >> r & 1)) continue;
        ens_row *w = &d->row[r];
        for (int32_t j = from[r]; j < w->n_prow - 1; j++) {
            d->batch[n] = w->prow[j];
            d->bkey[n] = w->pkey[j];
            d->batch[n].seq = r;
            d->batch[n].want_logits = false;
            if (++n == PREFILL_CHUNK) {
                if ((st = feed(d, n, err))) return st;
                n = 0;
            }
        }
    }
    if (n && (st = feed(d, n, err))) return st;
    for (int32_t r = 0; r < d->m; r++) {
        if (!(mask >> r & 1)) continue;
        ens_row *w = &d->row[r];
        w->n_pend = 0;
        if ((st = push_row(d, &w->pend, &w->pend_key, &w->n_pend, &w->cap_pend, w->prow[w->n_prow - 1].token,
                           w->prow[w->n_prow - 1].embd, w->pkey[w->n_prow - 1], err)))
            return st;
    }
    return VS_OK;
}

/* The C row, once its captions exist: wait for the thread, build and evaluate its prompt. Called at the
 * start of propose and commit, so nothing was queued on a deferred row. */
static vs_status resolve_deferred(ens *d, vs_error *err) {
    uint32_t mask = 0;
    for (int32_t r = 0; r < d->m; r++)
        if (d->row[r].deferred) mask |= 1u << r;
    if (!mask) return VS_OK;
    double waited = 0;
    vs_status st = vs_caption_src_wait(d->caps, &waited, err);
    d->stats.t_caption_wait += waited;
    d->stats.t_caption = vs_caption_src_seconds(d->caps);
    if (st) return vs_error_wrap(err, "%s: captioning", dname(d));
    const double t0 = vs_time_now();
    for (int32_t r = 0; r < d->m; r++) {
        if (!(mask >> r & 1)) continue;
        d->row[r].deferred = false;
        if ((st = build_prompt(d, r, err))) return st;
    }
    /* commit resolves deferred rows before queueing anything, so nothing is pending on them yet */
    st = prefill(d, mask, err);
    d->stats.t_c_prefill += vs_time_now() - t0;
    return st;
}

static vs_status begin_request(ens *d, const vs_spec_begin_info *req, vs_error *err) {
    const vs_spec_prompt *p = req->prompt;
    d->prompt = p;
    d->reuse = req->params->reuse_prefix;
    d->request = d->n_requests++;
    d->block = 0;
    d->step = 0;
    d->stats.n_empty_captions = 0;
    d->stats.t_caption = d->stats.t_caption_wait = d->stats.t_c_prefill = d->stats.t_weights = 0;
    vs_sampler_params sp = req->params->sampling;
    sp.seed ^= 0x6A09E667F3BCC909ull ^ d->seed; /* the drafter's own stream, fixed by the request's seed */
    vs_status st = vs_sampler_set_params(d->sampler, &sp, err);
    if (st) return st;
    vs_sampler_seed(d->sampler, sp.seed);
    vs_rng_seed(&d->rng, sp.seed ^ 0xBB67AE8584CAA73Bull);
    d->greedy = sp.temperature == 0 || d->force_greedy || d->debug_reject;
    /* trees: W branches of the request's depth (the engine sizes its proposal from this after begin) */
    d->hdr.max_nodes = d->topk ? d->tnodes : d->width > 1 ? d->width * VS_MAX(req->params->gamma, 1) : 0;
    if (d->hist) vs_ens_hist_clear(d->hist);
    for (int32_t r = 0; r < d->m; r++) d->w[r] = 1.0f / (float)d->m;

    /* Captions. A captioner on another thread starts AFTER this drafter's own prefill (it may borrow the
     * draft model, which runs one forward at a time) and overlaps the target's prefill; the C row is then
     * built at the first propose. Fixed texts and synchronous captioning are ready at once. */
    bool has_c = false;
    for (int32_t r = 0; r < d->m; r++) has_c |= d->row[r].in == VS_ENS_IN_C;
    const bool defer = has_c && vs_caption_src_lm(d->caps) != NULL && d->caps_async;
    if (has_c && !defer) {
        if ((st = vs_caption_src_start(d->caps, p->images, p->n_images, false, err)))
            return vs_error_wrap(err, "%s: captioning", dname(d));
        d->stats.t_caption = vs_caption_src_seconds(d->caps);
    }
    uint32_t mask = 0;
    d->n_old_img = d->n_img; /* the previous request's projections, taken over by image_id */
    for (int32_t r = 0; r < d->m && !st; r++) {
        if (d->row[r].in == VS_ENS_IN_C && defer) {
            d->row[r].deferred = true;
            continue;
        }
        st = build_prompt(d, r, err);
        mask |= 1u << r;
    }
    drop_old_images(d);
    if (st) return st;
    if ((st = prefill(d, mask, err))) return st;
    if (defer) {
        if ((st = vs_caption_src_start(d->caps, p->images, p->n_images, true, err)))
            return vs_error_wrap(err, "%s: captioning", dname(d));
        d->caps_started = true;
    }
    return VS_OK;
}

static vs_status en_begin(vs_spec_drafter *base, const vs_spec_begin_info *req, vs_error *err) {
    ens *d = (ens *)base;
    free_request(d);
    vs_status st = begin_request(d, req, err);
    if (st && d->caps_started) {
        /* the engine calls no end() after a failed begin: the captioning thread must not outlive it */
        vs_caption_src_wait(d->caps, NULL, NULL);
        d->caps_started = false;
    }
    return st;
}

/* ------------------------------------------------------------------------------------------------
 * Propose */

/* softmax(z) at temperature 1 into p (vectorised kernels: every draft step takes m of them). A NaN logit or
 * logits without a finite maximum leave a NaN in p, found by one dot product; only then are the logits
 * scanned, to name the problem. */
static vs_status softmax(const ens *d, const float *z, float *p, vs_error *err) {
    const int32_t V = d->n_vocab;
    memcpy(p, z, sizeof(float) * (size_t)V);
    vs_softmax_inplace(p, V);
    if (!isnan(vs_dot_f32(p, p, V))) return VS_OK;
    for (int32_t i = 0; i < V; i++)
        if (z[i] != z[i]) return vs_error_set(err, VS_ERR_INVALID, "%s: NaN logit for token %d", dname(d), i);
    return vs_error_set(err, VS_ERR_INVALID, "%s: logits without a finite maximum", dname(d));
}

/* The distribution of logits z under the request's transform (softmax when greedy). */
static vs_status transform(ens *d, const float *z, float *p, vs_error *err) {
    return d->greedy ? softmax(d, z, p, err) : vs_sampler_probs(d->sampler, z, p, err);
}

static int32_t argmin(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] < x[best]) best = i;
    return best;
}

/* Distribution `id` of the block from the m rows' logits lg [m][V]: q_ens into *qo (the proposal's q row id
 * when sampling, d->qens when greedy); each row's q_r into qrow[id] when the policy learns from them (the
 * commit's history), else into one scratch row that stays in L1 (the block's qrow lines would come from
 * memory: the target's verification streams its weights through the caches between blocks). m = 1
 * greedy: *qo = NULL (the logits decide; no history for m = 1). */
static vs_status dist(ens *d, const float *lg, int32_t id, vs_spec_proposal *out, float **qo,
                      vs_error *err) {
    const int32_t m = d->m, V = d->n_vocab;
    vs_status st;
    *qo = NULL;
    if (m == 1 && d->greedy) return VS_OK;
    float *q = d->greedy || d->topk ? d->qens : out->q + (size_t)id * V;
    if (m == 1) { /* never learns */
        if ((st = transform(d, lg, q, err))) return st;
        *qo = q;
        return VS_OK;
    }
    /* sum_r (w_r / sum w) q_r: each q_r sums to 1, so q_ens does too (to float rounding) */
    double ws = 0;
    for (int32_t r = 0; r < m; r++) ws += d->w[r] > 0 ? d->w[r] : 0;
    float *qr = d->learns ? d->qrow + (size_t)id * (size_t)m * (size_t)V : NULL;
    memset(q, 0, sizeof(float) * (size_t)V);
    for (int32_t r = 0; r < m; r++) {
        float *qd = qr ? qr + (size_t)r * V : d->qtmp;
        if ((st = transform(d, lg + (size_t)r * V, qd, err))) return st;
        if (ws > 0 && d->w[r] > 0) vs_axpy_f32(q, (float)(d->w[r] / ws), qd, V);
    }
    if (!(ws > 0)) return vs_error_set(err, VS_ERR_INVALID, "%s: the ensemble distribution is empty", dname(d));
    *qo = q;
    return VS_OK;
}

/* Up to n distinct tokens from a distribution (q, or the logits lg when q is NULL): greedy the n best
 * (the first is vs_argmax; debug_reject: the n worst), sampled n draws from q without replacement
 * (fewer when q has fewer tokens). *got = how many. */
static vs_status pick(ens *d, const float *lg, const float *q, int32_t n, int32_t *tok, int32_t *got,
                      vs_error *err) {
    const int32_t V = d->n_vocab;
    const float *x = q ? q : lg;
    *got = 0;
    if (d->greedy) {
        tok[0] = d->debug_reject ? argmin(x, V) : vs_argmax(x, V);
        *got = 1;
        for (int32_t b = 1; b < n; b++) {
            int32_t best = -1;
            for (int32_t i = 0; i < V; i++) {
                bool taken = false;
                for (int32_t c = 0; c < b; c++) taken |= tok[c] == i;
                if (taken || x[i] != x[i]) continue;
                if (best < 0 || (d->debug_reject ? x[i] < x[best] : x[i] > x[best])) best = i;
            }
            if (best < 0) break;
            tok[b] = best;
            *got = b + 1;
        }
        return VS_OK;
    }
    vs_status st = vs_sampler_pick(d->sampler, q, &tok[0], err);
    if (st) return st;
    *got = 1;
    if (n > 1) memcpy(d->qtmp, q, sizeof(float) * (size_t)V);
    for (int32_t b = 1; b < n; b++) {
        d->qtmp[tok[b - 1]] = 0;
        double s = 0;
        for (int32_t i = 0; i < V; i++) s += d->qtmp[i];
        if (!(s > 0)) break;
        if ((st = vs_sampler_pick(d->sampler, d->qtmp, &tok[b], err))) return st;
        *got = b + 1;
    }
    return VS_OK;
}

/* Grows the per-node arrays to n nodes. */
static vs_status ensure_nodes(ens *d, int32_t n, vs_error *err) {
    if (vs_grow((void **)&d->node_slot, &d->cap_node, n, sizeof(int32_t)) ||
        vs_grow((void **)&d->node_qid, &d->cap_node2, n, sizeof(int32_t)))
        return oom(d, err);
    return VS_OK;
}

/* EAGLE-2: the K best children of candidate `parent` (-1 = the pending row) from the rows' logits lg [m][V]
 * under distribution id `qid`, appended to d->cand. */
static vs_status expand(ens *d, const float *lg, int32_t qid, int32_t parent, vs_spec_proposal *out,
                        int32_t *n_cand, vs_error *err) {
    const int32_t V = d->n_vocab;
    float *q;
    vs_status st = dist(d, lg, qid, out, &q, err);
    if (st) return st;
    int32_t tok[VS_TREE_MAX_TOP_K];
    double lp[VS_TREE_MAX_TOP_K];
    const int32_t n = vs_tree_top_k(q ? q : lg, V, d->topk, q != NULL, tok);
    double lse = 0;
    if (!q && n > 0) { /* m = 1 greedy: log-softmax of the logits */
        const double mx = lg[tok[0]];
        double sum = 0;
        for (int32_t i = 0; i < V; i++) sum += exp((double)lg[i] - mx);
        lse = mx + log(sum);
    }
    for (int32_t i = 0; i < n; i++) lp[i] = q ? log((double)q[tok[i]]) : (double)lg[tok[i]] - lse;
    vs_tree_add_children(d->cand, n_cand, parent, tok, lp, n);
    return VS_OK;
}

/* EAGLE-2 dynamic tree of depth k and at most N nodes, after step 0 (the pending rows evaluated, their
 * logits in d->logits). Header, 'EAGLE-2 dynamic trees'. */
static vs_status propose_eagle2(ens *d, int32_t k, int32_t N, vs_spec_proposal *out, vs_error *err) {
    const int32_t m = d->m, V = d->n_vocab, K = d->topk;
    const int32_t need = K + (k - 1) * K * K;
    if (vs_grow((void **)&d->cand, &d->cap_cand, need, sizeof(vs_tree_cand)) ||
        vs_grow((void **)&d->order, &d->cap_order, need, sizeof(int32_t)))
        return oom(d, err);
    int32_t nc = 0, beams[VS_TREE_MAX_TOP_K], nb = 0, qid = 0, nfed = 0;
    vs_status st = expand(d, d->logits, qid++, -1, out, &nc, err);
    for (int32_t i = 0; i < nc; i++) beams[nb++] = i; /* the root's K best, best first */
    for (int32_t j = 1; !st && j < k && nb > 0; j++) {
        /* depth j's beams, every row, one forward */
        int32_t n = 0;
        for (int32_t b = 0; b < nb; b++) {
            const vs_tree_cand *c = &d->cand[beams[b]];
            for (int32_t r = 0; r < m; r++) {
                vs_lm_row *row = &d->batch[n];
                memset(row, 0, sizeof(*row));
                row->token = c->token;
                d->bkey[n] = c->token;
                row->seq = r;
                row->want_logits = true;
                int32_t *pa = d->panc + (size_t)n * k, na = 0;
                for (int32_t a = c->parent; a >= 0; a = d->cand[a].parent)
                    pa[na++] = d->row[r].base + d->cand[a].slot;
                row->pos = d->row[r].base + j - 1;
                row->tree = true;
                row->mask_past = true;
                row->past_len = d->row[r].base;
                row->n_past_anc = na;
                row->past_anc = pa;
                n++;
            }
        }
        if ((st = feed_tree(d, n, err))) break;
        d->n_fed++;
        out->n_steps++;
        d->stats.draft_steps++;
        const int32_t c0 = nc;
        for (int32_t b = 0; b < nb && !st; b++) {
            d->cand[beams[b]].slot = nfed++;
            d->cand[beams[b]].qid = qid;
            st = expand(d, d->logits + (size_t)b * m * V, qid++, beams[b], out, &nc, err);
        }
        nb = st ? 0 : vs_tree_next_beams(d->cand, c0, nc, K, beams);
    }
    if (st) return st;
    if ((st = vs_tree_emit(d->cand, nc, N, out, d->order, err))) return vs_error_wrap(err, "%s", dname(d));
    if ((st = ensure_nodes(d, out->n, err))) return st;
    for (int32_t i = 0; i < out->n; i++) {
        d->node_slot[i] = d->cand[d->order[i]].slot;
        d->node_qid[i] = d->cand[d->order[i]].qid;
    }
    return VS_OK;
}

/* The adaptive draft length: whether drafted token t (drawn from q, or the logits' argmax when q is NULL)
 * is confident enough to propose: q[t] (greedy, m = 1: softmax of the logits at t) >= p_min. A sampled
 * draft that passes is then a draw from q restricted to A = {x : q(x) >= p_min}: its q row becomes q / q(A)
 * on A and 0 elsewhere, the distribution verification must test it against (with probability q(A) a
 * token is proposed from q_A, else the target samples alone: both give the target's distribution). */
static bool confident(const ens *d, const float *lg, float *q, int32_t t) {
    if (!q) {
        const float top = lg[t];
        double s = 0;
        for (int32_t i = 0; i < d->n_vocab; i++) s += expf(lg[i] - top);
        return 1.0 / s >= d->p_min;
    }
    if (q[t] < d->p_min) return false;
    if (d->greedy) return true; /* one-hot for verification (q_row -1): nothing to restrict */
    double mass = 0;
    for (int32_t i = 0; i < d->n_vocab; i++) mass += q[i] >= d->p_min ? q[i] : 0;
    const float inv = (float)(1.0 / mass);
    for (int32_t i = 0; i < d->n_vocab; i++) q[i] = q[i] >= d->p_min ? q[i] * inv : 0.0f;
    return true;
}

static vs_status en_propose(vs_spec_drafter *base, const vs_spec_limits *lim, vs_spec_proposal *out,
                            vs_error *err) {
    ens *d = (ens *)base;
    const int32_t m = d->m, V = d->n_vocab;
    out->n = 0;
    out->n_steps = 0;
    d->fed = false;
    vs_status st = resolve_deferred(d, err);
    if (st) return st;

    /* this block's weights */
    const double tw = vs_time_now();
    if (d->hist) {
        vs_ens_choice ch;
        if ((st = vs_ens_weights_choose(d->hist, &d->rng, &ch, err))) return st;
        memcpy(d->w, ch.w, sizeof(float) * (size_t)m);
    } else {
        d->w[0] = 1;
    }
    d->stats.t_weights += vs_time_now() - tw;

    /* the tree's shape: W branches (EAGLE-2: K beams) of depth k within the engine's limits; every row's
     * pending rows and W (k - 1) fed drafts must fit its cache */
    const bool dyn = d->topk > 0;
    int32_t W = dyn ? d->topk : VS_MAX(1, VS_MIN(d->width, lim->max_nodes));
    int32_t k = lim->max_depth, n0 = 0;
    if (!dyn && W > 1) k = VS_MIN(k, lim->max_nodes / W);
    for (int32_t r = 0; r < m; r++) {
        const int32_t D = vs_kv_seq_len(d->kv, r), u = d->row[r].n_pend;
        if (u < 1) return VS_OK;
        const int32_t free_rows = d->n_ctx - D - u;
        if (free_rows < 0) return VS_OK;
        k = VS_MIN(k, free_rows / W + 1);
        n0 += u;
    }
    if (k < 1) return VS_OK; /* a cache is full: the engine decodes plainly */
    const int32_t ids = dyn ? 1 + W * (k - 1) : W * k; /* distributions of the block */
    if (d->learns && ids > d->qcap) { /* each row's q of the block: the commit's history reads them */
        float *q = vs_realloc(d->qrow, sizeof(float) * (size_t)ids * (size_t)m * (size_t)V);
        if (!q) return oom(d, err);
        d->qrow = q, d->qcap = ids;
    }
    if ((st = ensure_batch(d, VS_MAX(n0, m * W), err))) return st;
    if (W > 1 && vs_grow((void **)&d->panc, &d->cap_panc, m * W * k, sizeof(int32_t))) return oom(d, err);

    /* step 0: each row's pending rows, logits after the last of each */
    int32_t n = 0;
    for (int32_t r = 0; r < m; r++) {
        ens_row *w = &d->row[r];
        d->row[r].base = vs_kv_seq_len(d->kv, r) + w->n_pend;
        for (int32_t j = 0; j < w->n_pend; j++) {
            d->batch[n] = w->pend[j];
            d->bkey[n] = w->pend_key[j];
            d->batch[n].seq = r;
            d->batch[n].want_logits = j == w->n_pend - 1;
            n++;
        }
    }
    if ((st = feed(d, n, err))) return st;
    for (int32_t r = 0; r < m; r++) d->row[r].n_pend = 0;
    d->fed = true;
    d->k = k;
    d->n_fed = 0;
    out->n_steps++;
    d->stats.draft_steps++;
    if (dyn) {
        d->wcur = W;
        return propose_eagle2(d, k, VS_MIN(d->tnodes, lim->max_nodes), out, err);
    }
    if ((st = ensure_nodes(d, W * k, err))) return st;

    /* depth 1: W siblings from distribution 0 */
    float *q;
    int32_t got = 0;
    if ((st = dist(d, d->logits, 0, out, &q, err))) return st;
    if ((st = pick(d, d->logits, q, W, out->token, &got, err))) return st;
    if (d->p_min > 0 && !confident(d, d->logits, q, out->token[0])) { /* nothing proposed */
        d->k = 0;
        return VS_OK;
    }
    W = got;
    d->wcur = W;
    for (int32_t b = 0; b < W; b++) {
        out->parent[b] = -1;
        out->depth[b] = 1;
        out->q_row[b] = d->greedy ? -1 : 0;
    }
    out->n = W;
    /* depths 2 .. k: feed depth j's nodes to every row in one forward, draw each branch's next node */
    for (int32_t j = 1; j < k; j++) {
        n = 0;
        for (int32_t b = 0; b < W; b++) {
            const int32_t node = (j - 1) * W + b;
            for (int32_t r = 0; r < m; r++) {
                vs_lm_row *row = &d->batch[n];
                memset(row, 0, sizeof(*row));
                row->token = out->token[node];
                d->bkey[n] = out->token[node];
                row->seq = r;
                row->want_logits = true;
                if (W > 1) {
                    /* position base + j - 1; sees the prefix and its own branch's cached nodes
                     * (node i's slot is base + i) */
                    int32_t *pa = d->panc + (size_t)n * k;
                    for (int32_t i = 0; i < j - 1; i++) pa[i] = d->row[r].base + i * W + b;
                    row->pos = d->row[r].base + j - 1;
                    row->tree = true;
                    row->mask_past = true;
                    row->past_len = d->row[r].base;
                    row->n_past_anc = j - 1;
                    row->past_anc = pa;
                }
                n++;
            }
        }
        if ((st = W > 1 ? feed_tree(d, n, err) : feed(d, n, err))) return st;
        d->n_fed++;
        out->n_steps++;
        d->stats.draft_steps++;
        bool stop = false;
        for (int32_t b = 0; b < W; b++) {
            const int32_t node = j * W + b, par = (j - 1) * W + b;
            const float *lg = d->logits + (size_t)b * m * V;
            if ((st = dist(d, lg, node, out, &q, err))) return st;
            if ((st = pick(d, lg, q, 1, &out->token[node], &got, err))) return st;
            out->parent[node] = par;
            out->depth[node] = j + 1;
            out->q_row[node] = d->greedy ? -1 : node;
            stop = d->p_min > 0 && !confident(d, lg, q, out->token[node]); /* chains: W = 1 */
        }
        if (stop) { /* the chain ends before its first unconfident token */
            d->k = j;
            break;
        }
        out->n = (j + 1) * W;
    }
    /* node x (depth-major) sits in slot x when its depth was fed (the last proposed depth is fed only when
     * drafting stopped early); the distribution after it is x + W */
    for (int32_t x = 0; x < out->n; x++) {
        const bool fed = x < d->n_fed * W;
        d->node_slot[x] = fed ? x : -1;
        d->node_qid[x] = fed ? x + W : -1;
    }
    return VS_OK;
}

/* ------------------------------------------------------------------------------------------------
 * Commit */

static vs_status en_commit(vs_spec_drafter *base, const vs_spec_commit *c, vs_error *err) {
    ens *d = (ens *)base;
    const int32_t m = d->m, V = d->n_vocab;
    vs_status st = resolve_deferred(d, err);
    if (st) return st;
    if (d->fed) {
        const int32_t a = c->n_accepted;
        /* the accepted path's leading nodes that sit in the caches (every node but the last has a child
         * on the path, so it was fed) */
        int32_t kept = 0;
        while (kept < a && d->node_slot[c->accepted_nodes[kept]] >= 0) kept++;
        /* TABED history: the verified positions of this block */
        if (d->learns && c->target_logits && c->next >= 0 && !(m == 1 && d->greedy)) {
            const double t0 = vs_time_now();
            const int32_t nv = VS_MIN(a, kept) + 1;
            for (int32_t j = 0; j < nv; j++) {
                /* position j: the target's row after the path's node j - 1 (0: the pending row) and the
                 * distribution drawn after that node (0: the root's) */
                const int32_t tr = j == 0 ? 0 : 1 + c->accepted_nodes[j - 1];
                const int32_t id = j == 0 ? 0 : d->node_qid[c->accepted_nodes[j - 1]];
                if ((st = transform(d, c->target_logits + (size_t)tr * V, d->pbuf, err))) return st;
                const float *q[VS_ENS_MAX_ROWS];
                for (int32_t r = 0; r < m; r++) q[r] = d->qrow + ((size_t)id * m + r) * (size_t)V;
                if ((st = vs_ens_hist_push(d->hist, d->pbuf, q, err))) return st;
            }
            d->stats.t_weights += vs_time_now() - t0;
        }
            if (d->tracing) {
            vs_ens_trace_rec rec = {
                .request = d->request, .block = d->block, .step = d->step, .n_draft = d->k, .n_accept = a};
            memcpy(rec.w, d->w, sizeof(float) * (size_t)m);
            if ((st = vs_ens_trace_add(&d->trace, &rec, err))) return st;
        }
        d->block++;
        /* every row back to its own prefix + the accepted drafts it evaluated (a last draft that was never
         * fed becomes pending); trees: the accepted path's fed nodes move to base .. */
        int32_t slots[VS_SPEC_MAX_GAMMA];
        for (int32_t r = 0; r < m; r++) {
            ens_row *w = &d->row[r];
            const int32_t len = vs_kv_seq_len(d->kv, r);
            if (d->wcur > 1) {
                for (int32_t i = 0; i < kept; i++) slots[i] = w->base + d->node_slot[c->accepted_nodes[i]];
                if ((st = vs_kv_seq_compact(d->kv, r, slots, kept, w->base, err))) return st;
                for (int32_t i = 0; i < kept; i++) w->hist[w->base + i] = c->accepted[i];
            } else if ((st = vs_kv_seq_truncate(d->kv, r, w->base + kept, err))) {
                return st;
            }
            d->stats.rows_discarded += len - vs_kv_seq_len(d->kv, r);
            if (a > kept &&
                (st = push_row(d, &w->pend, &w->pend_key, &w->n_pend, &w->cap_pend, c->accepted[a - 1], NULL,
                               c->accepted[a - 1], err)))
                return st;
        }
        d->fed = false;
    }
    d->step += c->n_accepted + (c->next >= 0 ? 1 : 0);
    if (c->next >= 0)
        for (int32_t r = 0; r < m; r++)
            if ((st = push_row(d, &d->row[r].pend, &d->row[r].pend_key, &d->row[r].n_pend,
                               &d->row[r].cap_pend, c->next, NULL, c->next, err)))
                return st;
    return VS_OK;
}

static void en_end(vs_spec_drafter *base) {
    ens *d = (ens *)base;
    if (d->caps_started) {
        vs_caption_src_wait(d->caps, NULL, NULL); /* never leave the thread running */
        d->caps_started = false;
    }
    free_request(d);
}

static void en_free(vs_spec_drafter *base) {
    ens *d = (ens *)base;
    if (!d) return;
    en_end(base);
    for (int32_t r = 0; r < VS_ENS_MAX_ROWS; r++) {
        vs_free(d->row[r].prow), vs_free(d->row[r].pkey);
        vs_free(d->row[r].hist);
        vs_free(d->row[r].pend), vs_free(d->row[r].pend_key);
    }
    d->n_old_img = d->n_img;
    drop_old_images(d);
    vs_free(d->img);
    vs_kv_free(d->kv);
    vs_tokenizer_free(d->tok);
    vs_sampler_free(d->sampler);
    vs_ens_hist_free(d->hist);
    vs_ens_trace_free(&d->trace);
    vs_free(d->logits), vs_free(d->qrow), vs_free(d->qens), vs_free(d->pbuf), vs_free(d->batch);
    vs_free(d->qtmp), vs_free(d->panc);
    vs_free(d->node_slot), vs_free(d->node_qid), vs_free(d->cand), vs_free(d->order);
    vs_free(d->bkey);
    vs_free(d);
}

static const vs_spec_drafter_vt ens_vt = {
    .name = "ensemble",
    .begin = en_begin,
    .target_rows = NULL,
    .propose = en_propose,
    .commit = en_commit,
    .end = en_end,
    .free = en_free,
};

/* ------------------------------------------------------------------------------------------------
 * Creation */

/* The tokens of "\n" without the SentencePiece space-prefix token (T's image replacement). */
static vs_status newline_tokens(ens *d, vs_error *err) {
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

vs_spec_drafter *vs_draft_ens_new(vs_lm *draft, const vs_lm *target, const vs_draft_ens_opts *o,
                                  vs_error *err) {
    vs_draft_ens_opts def;
    vs_draft_ens_opts_default(&def);
    if (!o) o = &def;
    if (!draft || !target) {
        vs_error_set(err, VS_ERR_INVALID, "ensemble drafter: needs a draft and a target model");
        return NULL;
    }
    const char *dn = vs_gguf_name(vs_lm_gguf(draft)), *tn = vs_gguf_name(vs_lm_gguf(target));
    const vs_lm_config *dc = vs_lm_cfg(draft), *tc = vs_lm_cfg(target);
    const int32_t m = o->n_inputs;
    if (m < 1 || m > VS_ENS_MAX_ROWS) {
        vs_error_set(err, VS_ERR_INVALID, "ensemble drafter: %d drafting inputs (1 .. %d)", m,
                     VS_ENS_MAX_ROWS);
        return NULL;
    }
    bool seen[4] = {false, false, false, false}, mm = false, has_c = false;
    for (int32_t r = 0; r < m; r++) {
        if ((unsigned)o->inputs[r] > VS_ENS_IN_P) {
            vs_error_set(err, VS_ERR_INVALID, "ensemble drafter: unknown drafting input %d",
                         (int)o->inputs[r]);
            return NULL;
        }
        if (seen[o->inputs[r]]) {
            vs_error_set(err, VS_ERR_INVALID, "ensemble drafter: drafting input %s given twice",
                         vs_ens_input_name(o->inputs[r]));
            return NULL;
        }
        seen[o->inputs[r]] = true;
        mm |= o->inputs[r] == VS_ENS_IN_M || o->inputs[r] == VS_ENS_IN_P;
        has_c |= o->inputs[r] == VS_ENS_IN_C;
    }
    if (vs_ens_weights_check(&o->weights, m, err)) return NULL;
    if (o->tree_width < 0 || o->tree_width > VS_DRAFT_ENS_MAX_WIDTH) {
        vs_error_set(err, VS_ERR_INVALID, "ensemble drafter: tree width %d outside [1, %d] (0 = 1: chains)",
                     o->tree_width, VS_DRAFT_ENS_MAX_WIDTH);
        return NULL;
    }
    if (o->tree_top_k < 0 || o->tree_top_k > VS_TREE_MAX_TOP_K) {
        vs_error_set(err, VS_ERR_INVALID, "ensemble drafter: tree top-k %d outside [1, %d] (0 = no EAGLE-2 trees)",
                     o->tree_top_k, VS_TREE_MAX_TOP_K);
        return NULL;
    }
    if (o->tree_nodes < 0 || o->tree_nodes > VS_TREE_MAX_NODES) {
        vs_error_set(err, VS_ERR_INVALID, "ensemble drafter: %d tree nodes outside [1, %d] (0 = 8 x top-k)",
                     o->tree_nodes, VS_TREE_MAX_NODES);
        return NULL;
    }
    if (!(o->p_min >= 0 && o->p_min < 1) || (o->p_min > 0 && (o->tree_top_k > 0 || o->tree_width > 1))) {
        vs_error_set(err, VS_ERR_INVALID, "draft-ens: draft p-min %g: wants [0, 1), and chains (no token trees)",
                     (double)o->p_min);
        return NULL;
    }
    if (o->tree_top_k > 0 && o->tree_width > 1) {
        vs_error_set(err, VS_ERR_INVALID,
                     "ensemble drafter: EAGLE-2 trees (top-k %d) and width-%d trees exclude each other",
                     o->tree_top_k, o->tree_width);
        return NULL;
    }
    if (o->tree_top_k > 0 && o->debug_reject) {
        vs_error_set(err, VS_ERR_INVALID, "ensemble drafter: the reject mode drafts chains or width trees, not "
                     "EAGLE-2 trees");
        return NULL;
    }
    if (dc->n_vocab != tc->n_vocab) {
        vs_error_set(err, VS_ERR_INVALID,
                     "draft model %s has %d tokens but the target %s has %d: a drafter must "
                     "share the target's vocabulary",
                     dn, dc->n_vocab, tn, tc->n_vocab);
        return NULL;
    }
    if (seen[VS_ENS_IN_P] && o->pool_k < 1) {
        vs_error_set(err, VS_ERR_INVALID, "ensemble drafter: pool size %d (pooled drafting needs k >= 1)",
                     o->pool_k);
        return NULL;
    }
    if (mm) {
        if (!o->proj) {
            vs_error_set(err, VS_ERR_INVALID,
                         "draft model %s: multimodal and pooled drafting need the drafter's "
                         "projector (--mmproj-draft)",
                         dn);
            return NULL;
        }
        const vs_vision_config *pc = vs_vision_projector_config(o->proj);
        if (pc->proj_out != dc->n_embd) {
            vs_error_set(err, VS_ERR_INVALID,
                         "draft projector %s outputs rows of %d but the draft model %s is %d wide",
                         vs_vision_projector_name(o->proj), pc->proj_out, dn, dc->n_embd);
            return NULL;
        }
        if (o->tower && vs_vision_check_projector(o->tower, o->proj, err) != VS_OK) return NULL;
    }
    if (has_c && !o->captions) {
        vs_error_set(err, VS_ERR_INVALID,
                     "ensemble drafter: caption drafting needs captions (--captions FILE or a "
                     "captioner)");
        return NULL;
    }
    vs_tokenizer *tt = vs_tokenizer_from_gguf(vs_lm_gguf(target), err);
    if (!tt) {
        vs_error_wrap(err, "target %s", tn);
        return NULL;
    }
    ens *d = vs_calloc(1, sizeof(*d));
    if (!d) {
        vs_tokenizer_free(tt);
        vs_error_set(err, VS_ERR_NOMEM, "ensemble drafter: out of memory");
        return NULL;
    }
    d->hdr.vt = &ens_vt;
    d->hdr.n_vocab = dc->n_vocab;
    d->lm = draft;
    d->target = target;
    d->tp = o->tp;
    d->m = m;
    /* Every forward of an ensemble carries m rows (or more), and a drafter's small matrices sit in L1/L2:
     * the FMA kernel's cost grows with the rows, the AMX tiles' does not. test_ensemble bench (F16
     * drafter of width 192, MTCP over a 600-position multimodal prompt), one thread: draft step 0.845 ->
     * 0.716 ms. With two threads the tiles were slower (0.445 -> 0.51 ms: splitting such small matrices
     * costs more than it saves), so only a single-threaded drafter takes them. One set of flags for all
     * the drafter's forwards keeps its batch invariance. */
    d->mm_flags = m >= 2 && vs_threadpool_size(o->tp) == 1 ? VS_MM_AMX_BF16 : VS_MM_DEFAULT;
    d->n_vocab = dc->n_vocab;
    d->n_embd = dc->n_embd;
    d->n_ctx = o->n_ctx > 0 ? o->n_ctx : dc->n_ctx_train;
    d->proj = o->proj;
    d->pool_k = o->pool_k;
    d->caps = o->captions;
    d->force_greedy = o->greedy;
    d->debug_reject = o->debug_reject;
    d->width = VS_MAX(o->tree_width, 1);
    d->p_min = o->p_min;
    d->topk = o->tree_top_k;
    d->tnodes = o->tree_nodes > 0 ? o->tree_nodes : vs_tree_default_nodes(o->tree_top_k);
    d->seed = o->seed;
    d->wcfg = o->weights;
    d->learns = m > 1 && (o->weights.policy == VS_ENS_GRID || o->weights.policy == VS_ENS_INV_KL ||
                          o->weights.policy == VS_ENS_INV_TVD || o->weights.policy == VS_ENS_ADABOOST);
    d->tracing = o->trace;
    vs_ens_trace_init(&d->trace);
    d->trace.m = m;
    snprintf(d->trace.policy, sizeof(d->trace.policy), "%s", vs_ens_policy_name(o->weights.policy));
    for (int32_t r = 0; r < m; r++) {
        d->row[r].in = o->inputs[r];
        snprintf(d->trace.names[r], sizeof(d->trace.names[r]), "%s", vs_ens_input_name(o->inputs[r]));
    }
    if (d->caps) {
        const vs_lm *cl = vs_caption_src_lm(d->caps);
        const vs_threadpool *ct = vs_caption_src_tp(d->caps);
        d->caps_async = cl && cl != target && (!ct || ct != o->tp) && !vs_caption_src_same_thread(d->caps);
    }
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
    if (!(d->sampler = vs_sampler_new(d->n_vocab, &sp, err))) goto fail;
    if (m > 1 && !(d->hist = vs_ens_hist_new(&o->weights, m, d->n_vocab, err))) goto fail;
    const vs_type kvt = o->kv_type == VS_TYPE_F16 || o->kv_type == VS_TYPE_BF16 ? o->kv_type : VS_TYPE_F32;
    d->kv = vs_lm_kv_new(draft, m, d->n_ctx, kvt, err);
    if (!d->kv) goto fail;
    d->logits = vs_malloc(sizeof(float) * (size_t)VS_MAX(d->width, d->topk) * (size_t)m * (size_t)d->n_vocab);
    d->qens = vs_malloc(sizeof(float) * (size_t)d->n_vocab);
    d->pbuf = vs_malloc(sizeof(float) * (size_t)d->n_vocab);
    d->qtmp = vs_malloc(sizeof(float) * (size_t)d->n_vocab);
    if (!d->logits || !d->qens || !d->pbuf || !d->qtmp) goto nomem;
    for (int32_t r = 0; r < m; r++) {
        d->row[r].hist = vs_malloc(sizeof(int64_t) * (size_t)d->n_ctx);
        if (!d->row[r].hist) goto nomem;
    }
    for (int32_t r = 0; r < m; r++) d->w[r] = 1.0f / (float)m;
    return &d->hdr;
nomem:
    vs_error_set(err, VS_ERR_NOMEM, "ensemble drafter: out of memory");
fail:
    vs_tokenizer_free(tt);
    en_free(&d->hdr);
    return NULL;
}

/* ------------------------------------------------------------------------------------------------
 * Accessors */

static const ens *as_ens(const vs_spec_drafter *d) { return d && d->vt == &ens_vt ? (const ens *)d : NULL; }

const vs_draft_ens_stats *vs_draft_ens_get_stats(const vs_spec_drafter *d) {
    const ens *e = as_ens(d);
    return e ? &e->stats : NULL;
}
const vs_ens_trace *vs_draft_ens_trace(const vs_spec_drafter *d) {
    const ens *e = as_ens(d);
    return e ? &e->trace : NULL;
}
const float *vs_draft_ens_weights(const vs_spec_drafter *d) {
    const ens *e = as_ens(d);
    return e ? e->w : NULL;
}
const vs_ens_hist *vs_draft_ens_history(const vs_spec_drafter *d) {
    const ens *e = as_ens(d);
    return e ? e->hist : NULL;
}
vs_kv *vs_draft_ens_kv(vs_spec_drafter *d) { return as_ens(d) ? ((ens *)d)->kv : NULL; }
int32_t vs_draft_ens_rows(const vs_spec_drafter *d) {
    const ens *e = as_ens(d);
    return e ? e->m : 0;
}
