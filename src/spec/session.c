/* session: model sets, sessions and the request path. See session.h.
 * Sections: the model set, the image cache, drafters, streaming (text, stop strings, cancel), the run. */
#include "session.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mmprompt.h"

#define MAX_CACHED_IMAGES 64
#define MAX_DRAFTERS 32 /* as many as `bench spec --methods` lists (VS_BENCH_MAX_LIST) */

/* ------------------------------------------------------------------------------------------------
 * The model set */

struct vs_models {
    bool borrowed; /* target and tp belong to the caller (vs_models_borrow) */
    vs_lm *target;
    const vs_tokenizer *tok;
    const vs_mmproj *mmproj;
    vs_tokenizer *tok_owned; /* what vs_models_load opened (the same objects as tok / mmproj) */
    vs_mmproj *mmproj_owned;
    vs_lm *draft[VS_N_ROLES];
    vs_mmproj *draft_mmproj[VS_N_ROLES];
    vs_msd_head *head[VS_N_ROLES]; /* the head roles' files (vs_role_is_head) */
    vs_dream_head *dream;          /* VS_ROLE_DREAM's file */
    vs_threadpool *tp;
    const vs_chat_template *tpl;
    vs_preproc_mode preproc;
};

/* One forward over one row on a scratch cache, so the first timed request does not pay the page faults
 * of the weights' mapping. */
static vs_status warm_up(vs_lm *lm, vs_threadpool *tp, vs_error *err) {
    vs_kv *kv = vs_lm_kv_new(lm, 1, 2, VS_TYPE_F32, err);
    if (!kv) return err->code;
    float *lg = vs_malloc(sizeof(float) * (size_t)vs_lm_cfg(lm)->n_vocab);
    vs_lm_row r = {.token = 0, .want_logits = true};
    vs_lm_out out = {.logits = lg, .attn_layer = -1};
    vs_status st =
        lg ? vs_lm_forward(lm, kv, tp, &r, 1, &out, err) : vs_error_set(err, VS_ERR_NOMEM, "out of memory");
    vs_free(lg);
    vs_kv_free(kv);
    return st;
}

static vs_status check_projector(const vs_mmproj *mp, const vs_lm *lm, const char *lm_path, vs_error *err) {
    const int32_t w = vs_vision_projector_config(vs_mmproj_projector(mp))->proj_out;
    if (w != vs_lm_cfg(lm)->n_embd)
        return vs_error_set(err, VS_ERR_INVALID, "projector width %d of %s differs from the LM width %d of %s",
                            (int)w, vs_mmproj_path(mp), (int)vs_lm_cfg(lm)->n_embd, lm_path);
    return VS_OK;
}

/* The chat template by name (NULL: vicuna-short, the shipped models' format). */
static const vs_chat_template *find_template(const char *name, vs_error *err) {
    const char *tn = name ? name : "vicuna-short";
    const vs_chat_template *t = vs_chat_template_find(tn);
    if (!t) vs_error_set(err, VS_ERR_INVALID, "unknown chat template '%s'", tn);
    return t;
}

static vs_status models_load(vs_models *m, const vs_models_opts *o, vs_error *err) {
    vs_status st;
    if (!o->model) return vs_error_set(err, VS_ERR_INVALID, "no target model given");
    if (!(m->tpl = find_template(o->chat_template, err))) return err->code;
    m->preproc = o->preproc;
    if (!(m->target = vs_lm_load(o->model, err))) return err->code;
    /* a file without a tokenizer still runs on token ids */
    if (vs_gguf_find_key(vs_lm_gguf(m->target), "tokenizer.ggml.tokens") >= 0 &&
        !(m->tok = m->tok_owned = vs_tokenizer_from_gguf(vs_lm_gguf(m->target), err)))
        return err->code;
    if (o->mmproj) {
        if (!(m->mmproj = m->mmproj_owned = vs_mmproj_open(o->mmproj, err))) return err->code;
        if (!vs_mmproj_tower(m->mmproj))
            return vs_error_set(err, VS_ERR_INVALID,
                                "%s has no vision tower (a projector-only file cannot encode images)", o->mmproj);
        if ((st = check_projector(m->mmproj, m->target, o->model, err))) return st;
    }
    for (int r = 1; r < VS_N_ROLES; r++) {
        if (o->draft_mmproj[r] && !o->draft[r])
            return vs_error_set(err, VS_ERR_INVALID, "%s: a drafter projector without its drafter",
                                o->draft_mmproj[r]);
        if (!o->draft[r]) continue;
        if (vs_role_is_head(r)) {
            if (o->draft_mmproj[r])
                return vs_error_set(err, VS_ERR_INVALID, "%s: a draft head reads the target's image rows: it has no "
                                    "projector", o->draft_mmproj[r]);
            if (!(m->head[r] = vs_msd_head_load(o->draft[r], err))) return err->code;
            if ((st = vs_msd_head_check(m->head[r], m->target, err))) return st;
            continue;
        }
        if (r == VS_ROLE_DREAM) {
            if (o->draft_mmproj[r])
                return vs_error_set(err, VS_ERR_INVALID, "%s: a DREAM model reads the target's image rows: it has no "
                                    "projector", o->draft_mmproj[r]);
            if (!(m->dream = vs_dream_head_load(o->draft[r], err))) return err->code;
            if ((st = vs_dream_head_check(m->dream, m->target, err))) return st;
            continue;
        }
        if (!(m->draft[r] = vs_lm_load(o->draft[r], err))) return err->code;
        if (o->draft_mmproj[r]) {
            if (!(m->draft_mmproj[r] = vs_mmproj_open(o->draft_mmproj[r], err))) return err->code;
            if ((st = check_projector(m->draft_mmproj[r], m->draft[r], o->draft[r], err))) return st;
        }
    }
    if (o->threads > 1 && !(m->tp = vs_threadpool_new(o->threads, err))) return err->code;
    if (o->warm_up) {
        if ((st = warm_up(m->target, m->tp, err))) return st;
        for (int r = 1; r < VS_N_ROLES; r++)
            if (m->draft[r] && (st = warm_up(m->draft[r], m->tp, err))) return st;
    }
    return VS_OK;
}

vs_models *vs_models_load(const vs_models_opts *o, vs_error *err) {
    vs_error local;
    if (!err) err = &local; /* the messages are read below */
    vs_models *m = vs_calloc(1, sizeof(*m));
    if (!m) {
        vs_error_set(err, VS_ERR_NOMEM, "out of memory");
        return NULL;
    }
    if (models_load(m, o, err)) {
        vs_models_free(m);
        return NULL;
    }
    return m;
}

vs_models *vs_models_borrow(vs_lm *target, const vs_tokenizer *tok, const vs_mmproj *mmproj, vs_threadpool *tp,
                            const char *chat_template, vs_error *err) {
    vs_error local;
    if (!err) err = &local; /* the messages are read below */
    if (!target) {
        vs_error_set(err, VS_ERR_INVALID, "no target model");
        return NULL;
    }
    const vs_chat_template *tpl = find_template(chat_template, err);
    if (!tpl) return NULL;
    if (mmproj && !vs_mmproj_tower(mmproj)) {
        vs_error_set(err, VS_ERR_INVALID, "%s has no vision tower", vs_mmproj_path(mmproj));
        return NULL;
    }
    if (mmproj && check_projector(mmproj, target, vs_gguf_name(vs_lm_gguf(target)), err)) return NULL;
    vs_models *m = vs_calloc(1, sizeof(*m));
    if (!m) {
        vs_error_set(err, VS_ERR_NOMEM, "out of memory");
        return NULL;
    }
    *m = (vs_models){.borrowed = true, .target = target, .tok = tok, .mmproj = mmproj, .tp = tp, .tpl = tpl};
    return m;
}

void vs_models_free(vs_models *m) {
    if (!m) return;
    for (int r = 0; r < VS_N_ROLES; r++) {
        vs_mmproj_free(m->draft_mmproj[r]);
        vs_lm_free(m->draft[r]);
        vs_msd_head_free(m->head[r]);
    }
    vs_dream_head_free(m->dream);
    vs_mmproj_free(m->mmproj_owned);
    vs_tokenizer_free(m->tok_owned);
    if (!m->borrowed) {
        vs_lm_free(m->target);
        vs_threadpool_free(m->tp);
    }
    vs_free(m);
}

vs_lm *vs_models_target(const vs_models *m) { return m->target; }
const vs_tokenizer *vs_models_tokenizer(const vs_models *m) { return m->tok; }
const vs_vision_tower *vs_models_tower(const vs_models *m) { return m->mmproj ? vs_mmproj_tower(m->mmproj) : NULL; }
const vs_msd_head *vs_models_head(const vs_models *m, vs_method_role r) {
    return vs_role_is_head(r) ? m->head[r] : NULL;
}
vs_lm *vs_models_draft(const vs_models *m, vs_method_role r) {
    return r > 0 && r < VS_N_ROLES ? m->draft[r] : NULL;
}
const vs_vision_projector *vs_models_draft_projector(const vs_models *m, vs_method_role r) {
    return r > 0 && r < VS_N_ROLES && m->draft_mmproj[r] ? vs_mmproj_projector(m->draft_mmproj[r]) : NULL;
}
vs_threadpool *vs_models_threadpool(const vs_models *m) { return m->tp; }
const vs_chat_template *vs_models_template(const vs_models *m) { return m->tpl; }

/* ------------------------------------------------------------------------------------------------
 * Sessions */

typedef struct cached_image {
    uint64_t hash; /* of the encoded bytes */
    uint8_t *bytes; /* the encoded bytes themselves: a hash match is confirmed byte for byte */
    size_t size;
    int32_t id;    /* image_id of its segments (> 0) */
    uint64_t used; /* request serial of its last use (LRU) */
    vs_vision_features feat;
    float *rows; /* the target's projection (n_rows, target n_embd) */
    int64_t n_rows;
    double secs; /* encode + project */
} cached_image;

typedef struct cached_drafter {
    char key[320];
    vs_spec_drafter *d;
    const vs_method *m;
} cached_drafter;

struct vs_session {
    vs_models *m;
    vs_session_opts o;
    vs_spec *eng; /* created at the first request */
    cached_image img[MAX_CACHED_IMAGES];
    int32_t n_img;
    int32_t next_image_id;
    uint64_t serial;
    cached_drafter dr[MAX_DRAFTERS];
    int32_t n_dr;
    vs_captioner *captioner;
    vs_caption_src *captions; /* the session's own (captioner or empty), or NULL */
    atomic_bool cancel;
};

/* The engine and its cache of n_ctx rows (opts.n_ctx when set, else `rows` when > 0, else the target's
 * n_ctx_train). */
static vs_spec *engine_make(vs_session *s, int64_t rows, vs_error *err) {
    const int32_t train = vs_lm_cfg(s->m->target)->n_ctx_train;
    const int32_t n_ctx = s->o.n_ctx > 0 ? s->o.n_ctx : rows > 0 ? (int32_t)VS_MIN(rows, (int64_t)train) : train;
    vs_spec_config ec = {.n_ctx = n_ctx, .kv_type = s->o.kv_type, .n_batch = s->o.n_batch, .tp = s->m->tp,
                         .tok = s->m->tok, .kv = s->o.kv, .seq = s->o.seq};
    if (s->o.batch) {
        ec.verify = vs_batch_verify, ec.verify_ctx = s->o.batch;
        ec.draft_limit = vs_batch_draft_limit, ec.draft_limit_ctx = s->o.batch;
    }
    return s->eng = vs_spec_new(s->m->target, &ec, err);
}

vs_session *vs_session_new(vs_models *m, const vs_session_opts *o, vs_error *err) {
    vs_error local;
    if (!err) err = &local; /* the messages are read below */
    if (!m) {
        vs_error_set(err, VS_ERR_INVALID, "session: no model set");
        return NULL;
    }
    vs_session *s = vs_calloc(1, sizeof(*s));
    if (!s) {
        vs_error_set(err, VS_ERR_NOMEM, "out of memory");
        return NULL;
    }
    s->m = m;
    if (o) s->o = *o;
    if (s->o.kv && s->o.fit_ctx) {
        vs_free(s);
        vs_error_set(err, VS_ERR_INVALID, "session: a shared cache has its own size: not with fit_ctx");
        return NULL;
    }
    s->next_image_id = 1;
    atomic_init(&s->cancel, false);
    if (!s->o.fit_ctx && !engine_make(s, 0, err)) {
        vs_free(s);
        return NULL;
    }
    return s;
}

static void image_free(cached_image *c) {
    vs_free(c->bytes);
    vs_vision_features_free(&c->feat);
    vs_free(c->rows);
    memset(c, 0, sizeof(*c));
}

void vs_session_free(vs_session *s) {
    if (!s) return;
    for (int32_t i = 0; i < s->n_dr; i++) vs_spec_drafter_free(s->dr[i].d);
    vs_caption_src_free(s->captions);
    vs_captioner_free(s->captioner);
    for (int32_t i = 0; i < s->n_img; i++) image_free(&s->img[i]);
    vs_spec_free(s->eng);
    vs_free(s);
}

void vs_session_cancel(vs_session *s) { atomic_store(&s->cancel, true); }
vs_models *vs_session_models(vs_session *s) { return s->m; }
vs_spec *vs_session_engine(vs_session *s) { return s->eng; }
int32_t vs_session_n_ctx(const vs_session *s) {
    return s->eng ? vs_spec_n_ctx(s->eng) : s->o.n_ctx > 0 ? s->o.n_ctx : vs_lm_cfg(s->m->target)->n_ctx_train;
}

/* ------------------------------------------------------------------------------------------------
 * The image cache */

static uint64_t fnv1a(const uint8_t *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* The cache slot for a new image: a free one, else the least recently used one not used by this request. */
static cached_image *image_slot(vs_session *s) {
    if (s->n_img < MAX_CACHED_IMAGES) return &s->img[s->n_img++];
    cached_image *lru = NULL;
    for (int32_t i = 0; i < s->n_img; i++)
        if (s->img[i].used != s->serial && (!lru || s->img[i].used < lru->used)) lru = &s->img[i];
    if (lru) image_free(lru);
    return lru;
}

/* Encodes one image of a request (or finds it in the cache). *fresh: encoded now. */
static vs_status image_get(vs_session *s, const vs_req_image *ri, int32_t index, cached_image **out,
                           bool *fresh, vs_error *err) {
    const vs_vision_tower *tower = vs_models_tower(s->m);
    char name[64];
    snprintf(name, sizeof(name), "image %d", (int)index + 1);
    const char *what = ri->path ? ri->path : ri->name ? ri->name : name;
    const double t0 = vs_time_now();
    uint8_t *owned = NULL;
    const uint8_t *data = ri->data;
    size_t size = ri->size;
    vs_status st;
    *fresh = false;
    if (ri->path) {
        if ((st = vs_read_file(ri->path, &owned, &size, err))) return st;
        data = owned;
    } else if (!data || !size) {
        return vs_error_set(err, VS_ERR_INVALID, "%s: no file and no data", what);
    }
    const uint64_t h = fnv1a(data, size);
    for (int32_t i = 0; i < s->n_img; i++)
        if (s->img[i].hash == h && s->img[i].size == size && !memcmp(s->img[i].bytes, data, size)) {
            vs_free(owned);
            s->img[i].used = s->serial;
            *out = &s->img[i];
            return VS_OK;
        }
    cached_image *c = image_slot(s);
    if (!c) {
        vs_free(owned);
        return vs_error_set(err, VS_ERR_RANGE, "more than %d images in one request", MAX_CACHED_IMAGES);
    }
    vs_image img;
    st = vs_image_decode_max(&img, data, size, what, vs_image_max_side(vs_vision_tower_config(tower)->image_size),
                             err);
    if (!st && owned) {
        c->bytes = owned, owned = NULL;
    } else if (!st && !(c->bytes = vs_malloc(size))) {
        vs_image_free(&img);
        st = vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory", what);
    } else if (!st) {
        memcpy(c->bytes, data, size);
    }
    vs_free(owned);
    if (!st) {
        st = vs_vision_encode_image(tower, s->m->tp, &img, s->m->preproc, NULL, &c->feat, err);
        if (st) vs_error_wrap(err, "%s", what);
        vs_image_free(&img);
    }
    if (!st && (st = vs_vision_embed(vs_mmproj_projector(s->m->mmproj), s->m->tp, &c->feat, 1, &c->rows,
                                     &c->n_rows, err)))
        vs_error_wrap(err, "%s", what);
    if (st) {
        image_free(c);
        if (c == &s->img[s->n_img - 1]) s->n_img--;
        return st;
    }
    c->hash = h, c->size = size, c->used = s->serial, c->id = s->next_image_id++;
    c->secs = vs_time_now() - t0;
    *out = c;
    *fresh = true;
    return VS_OK;
}

/* ------------------------------------------------------------------------------------------------
 * Drafters */

void vs_draft_cfg_default(vs_draft_cfg *c) {
    memset(c, 0, sizeof(*c));
    c->gamma = 5;
    vs_ens_weights_cfg_default(&c->weights);
    c->pool_k = 2;
}

static bool is_target_only(const vs_draft_cfg *c) {
    return c->n_inputs == 0 && (!c->method || !strcmp(c->method, "ar"));
}

static void drafter_key(const vs_draft_cfg *c, char *k, size_t cap) {
    int n = snprintf(k, cap, "%s|%d|%d|%d|%d|%d|%d", c->method ? c->method : "custom", (int)c->opts.tree_width,
                     (int)c->opts.tree_top_k, (int)c->opts.tree_nodes, (int)c->opts.greedy, (int)c->opts.visual_keep,
                     (int)c->opts.p_min);
    if (c->method) return;
    const vs_ens_weights_cfg *w = &c->weights;
    n += snprintf(k + n, cap - (size_t)n, "|%d|%d|%d|%d|%d|%d|%g|%d|%d|%g|", (int)c->pool_k, (int)c->trace,
                  (int)c->debug_reject, (int)w->policy, (int)w->n_ratios, (int)w->grid_n, (double)w->tau,
                  (int)w->window, (int)w->topk, (double)w->adaboost_c);
    for (int32_t i = 0; i < c->n_inputs && n < (int)cap; i++)
        n += snprintf(k + n, cap - (size_t)n, "%s", vs_ens_input_name(c->inputs[i]));
    for (int32_t i = 0; i < w->n_ratios && n < (int)cap; i++)
        n += snprintf(k + n, cap - (size_t)n, ",%g", (double)w->ratios[i]);
}

/* The caption source of the caption methods: the session options', else the session's captioner (the
 * LLaVA-recipe drafter and its projector), else an empty source (a request with images then fails with
 * the drafter's message). Made once per session. */
static vs_caption_src *captions(vs_session *s, vs_error *err) {
    if (s->o.captions) return s->o.captions;
    if (s->captions) return s->captions;
    const vs_vision_projector *p = vs_models_draft_projector(s->m, VS_ROLE_LLAVA);
    if (p && s->m->draft[VS_ROLE_LLAVA]) {
        /* its own thread, no pool: the target's pool is busy with the prefill meanwhile; with a batcher the
         * drafter model is shared with other threads: on the requesting thread and its turn, with the pool */
        vs_captioner_opts co = {.max_tokens = s->o.caption_tokens, .same_thread = s->o.batch != NULL,
                                .tp = s->o.batch ? s->m->tp : NULL};
        if (!(s->captioner = vs_captioner_new(s->m->draft[VS_ROLE_LLAVA], p, &co, err))) return NULL;
        if (!(s->captions = vs_caption_src_new_captioner(s->captioner, err))) {
            vs_captioner_free(s->captioner);
            s->captioner = NULL;
        }
    } else {
        s->captions = vs_caption_src_new_texts(NULL, 0, err);
    }
    return s->captions;
}

static vs_spec_drafter *custom_drafter(vs_session *s, const vs_draft_cfg *c, vs_error *err) {
    vs_lm *draft = s->m->draft[VS_ROLE_LLAVA];
    if (!draft) {
        vs_error_set(err, VS_ERR_INVALID, "drafting needs a draft model (-md FILE)");
        return NULL;
    }
    vs_draft_ens_opts eo;
    vs_draft_ens_opts_default(&eo);
    eo.n_inputs = c->n_inputs;
    memcpy(eo.inputs, c->inputs, sizeof(eo.inputs));
    eo.weights = c->weights;
    eo.pool_k = c->pool_k > 0 ? c->pool_k : 2;
    eo.n_ctx = s->o.draft_n_ctx;
    eo.kv_type = s->o.draft_kv_type;
    eo.tp = s->m->tp;
    eo.proj = vs_models_draft_projector(s->m, VS_ROLE_LLAVA);
    eo.tower = eo.proj ? vs_models_tower(s->m) : NULL;
    for (int32_t i = 0; i < c->n_inputs; i++)
        if (c->inputs[i] == VS_ENS_IN_C && !(eo.captions = captions(s, err))) return NULL;
    eo.greedy = c->opts.greedy;
    eo.tree_width = c->opts.tree_width;
    eo.tree_top_k = c->opts.tree_top_k;
    eo.tree_nodes = c->opts.tree_nodes;
    eo.p_min = c->debug_reject ? 0.0f : vs_method_p_min(&c->opts); /* the reject drafter is never confident */
    eo.trace = c->trace;
    eo.debug_reject = c->debug_reject;
    return vs_draft_ens_new(draft, s->m->target, &eo, err);
}

/* The drafter of a configuration: the session's, made at its first use. NULL + err for an unknown method
 * or a model it lacks. */
static cached_drafter *drafter_get(vs_session *s, const vs_draft_cfg *c, vs_error *err) {
    char key[320];
    drafter_key(c, key, sizeof(key));
    for (int32_t i = 0; i < s->n_dr; i++)
        if (!strcmp(s->dr[i].key, key)) return &s->dr[i];
    if (s->n_dr == MAX_DRAFTERS) {
        vs_error_set(err, VS_ERR_RANGE, "a session keeps at most %d drafting configurations", MAX_DRAFTERS);
        return NULL;
    }
    const vs_method *m = NULL;
    vs_spec_drafter *d;
    if (c->method) {
        if (!(m = vs_method_find(c->method))) {
            char names[512];
            vs_method_names(names, sizeof(names));
            vs_error_set(err, VS_ERR_INVALID, "unknown drafting method '%s' (known: %s)", c->method, names);
            return NULL;
        }
        vs_method_models mm = {.target = s->m->target, .tower = vs_models_tower(s->m), .tp = s->m->tp};
        for (int r = 1; r < VS_N_ROLES; r++)
            mm.draft[r] = s->m->draft[r], mm.head[r] = s->m->head[r],
            mm.proj[r] = vs_models_draft_projector(s->m, (vs_method_role)r);
        mm.dream = s->m->dream;
        if (m->captions && !(mm.captions = captions(s, err))) return NULL;
        vs_method_opts mo = c->opts;
        vs_method_shape(c->method, &mo);
        mo.n_ctx = s->o.draft_n_ctx;
        mo.kv_type = s->o.draft_kv_type;
        d = vs_method_drafter_new(m, &mm, &mo, err);
    } else {
        d = custom_drafter(s, c, err);
    }
    if (!d) return NULL;
    cached_drafter *e = &s->dr[s->n_dr++];
    snprintf(e->key, sizeof(e->key), "%s", key);
    e->d = d, e->m = m;
    return e;
}

vs_status vs_session_add_image(vs_session *s, const vs_req_image *img, int64_t *n_rows, vs_error *err) {
    vs_error local;
    if (!err) err = &local; /* the messages are read below */
    *n_rows = 0;
    if (!vs_models_tower(s->m))
        return vs_error_set(err, VS_ERR_INVALID, "images need the target's vision tower (its mmproj file)");
    s->serial++;
    cached_image *c;
    bool fresh;
    vs_status st = image_get(s, img, 0, &c, &fresh, err);
    if (!st) *n_rows = c->n_rows;
    return st;
}

vs_status vs_session_prepare(vs_session *s, const vs_draft_cfg *c, vs_error *err) {
    vs_error local;
    if (!err) err = &local; /* the messages are read below */
    if (is_target_only(c)) return VS_OK;
    return drafter_get(s, c, err) ? VS_OK : err->code;
}

/* ------------------------------------------------------------------------------------------------
 * Streaming: token ids, text, stop strings, cancel */

typedef struct stream {
    vs_session *s;
    const vs_request *rq;
    vs_detok *dt; /* NULL when no text is wanted */
    char *text;
    size_t len, cap, emitted;
    vs_finish why;   /* set when a callback, a stop string or a cancel ends the request */
    bool failed;
    vs_error err;
} stream;

static bool text_append(stream *st, const char *p, size_t n) {
    if (st->len + n + 1 > st->cap) {
        size_t cap = VS_MAX(st->cap * 2, st->len + n + 256);
        char *t = vs_realloc(st->text, cap);
        if (!t) {
            vs_error_set(&st->err, VS_ERR_NOMEM, "out of memory");
            return false;
        }
        st->text = t, st->cap = cap;
    }
    memcpy(st->text + st->len, p, n);
    st->len += n;
    st->text[st->len] = 0;
    return true;
}

static bool emit(stream *st, size_t upto) {
    if (upto <= st->emitted) return true;
    bool ok = !st->rq->on_text || st->rq->on_text(st->rq->cb_ctx, st->text + st->emitted, upto - st->emitted);
    st->emitted = upto;
    if (!ok) st->why = VS_FINISH_CALLBACK;
    return ok;
}

/* Looks for a stop string in the text not yet emitted (a stop string cannot begin before it: the held-back
 * tail below keeps every possible beginning); cuts the text there. Returns the end of the text that can be
 * emitted: all of it but a tail that may begin a stop string. */
static size_t stop_scan(stream *st, bool *hit) {
    const vs_request *rq = st->rq;
    *hit = false;
    const size_t from = st->emitted;
    size_t best = SIZE_MAX;
    for (int32_t k = 0; k < rq->n_stop; k++) {
        const char *f = strstr(st->text + from, rq->stop[k]);
        if (f && (size_t)(f - st->text) < best) best = (size_t)(f - st->text);
    }
    if (best != SIZE_MAX) {
        st->len = best;
        st->text[best] = 0;
        *hit = true;
        return best;
    }
    /* hold back the longest tail that is a proper prefix of a stop string */
    size_t hold = 0;
    for (int32_t k = 0; k < rq->n_stop; k++) {
        const size_t sl = strlen(rq->stop[k]);
        for (size_t t = VS_MIN(sl - 1, st->len - from); t > hold; t--)
            if (!memcmp(st->text + st->len - t, rq->stop[k], t)) {
                hold = t;
                break;
            }
    }
    return st->len - hold;
}

static bool on_block(void *ctx, const int32_t *t, int32_t n) {
    stream *st = ctx;
    const vs_request *rq = st->rq;
    if (rq->on_tokens && !rq->on_tokens(rq->cb_ctx, t, n)) {
        st->why = VS_FINISH_CALLBACK;
        return false;
    }
    if (st->dt) {
        size_t len = 0;
        const char *p = vs_detok_feed(st->dt, t, n, &len, &st->err);
        if (!p || !text_append(st, p, len)) {
            st->failed = true;
            return false;
        }
        bool hit = false;
        const size_t upto = rq->n_stop ? stop_scan(st, &hit) : st->len;
        const bool more = emit(st, upto);
        if (hit) st->why = VS_FINISH_STOP; /* the stop string ends it, whatever the callback said */
        if (hit || !more) return false;
    }
    if (atomic_load(&st->s->cancel)) {
        st->why = VS_FINISH_CANCEL;
        return false;
    }
    return true;
}

/* ------------------------------------------------------------------------------------------------
 * The run */

void vs_request_default(vs_request *r) {
    memset(r, 0, sizeof(*r));
    vs_draft_cfg_default(&r->draft);
    r->n_predict = 128;
    r->sampling = vs_sampler_params_default();
    r->sampling.temperature = 0;
}

void vs_result_init(vs_result *r) {
    memset(r, 0, sizeof(*r));
    vs_spec_log_init(&r->log);
}

void vs_result_free(vs_result *r) {
    vs_spec_log_free(&r->log);
    vs_free(r->text);
    vs_result_init(r);
}

/* Empties a result for the next request, keeping the log's allocations. */
static void result_reset(vs_result *r) {
    vs_spec_log log = r->log;
    vs_free(r->text);
    memset(r, 0, sizeof(*r));
    r->log = log;
    vs_spec_log_reset(&r->log);
}

const char *vs_finish_name(vs_finish f) {
    static const char *const names[] = {"none", "eos", "length", "context", "stop", "cancel", "callback"};
    return f >= 0 && f < (int)VS_ARRAY_LEN(names) ? names[f] : "?";
}

static vs_status check_request(const vs_session *s, const vs_request *rq, vs_error *err) {
    const int n_prompts = (rq->msgs != NULL) + (rq->prompt != NULL) + (rq->ids != NULL);
    if (n_prompts != 1)
        return vs_error_set(err, VS_ERR_INVALID, "a request needs exactly one of chat messages, prompt text or "
                                                 "token ids (%d given)", n_prompts);
    if (rq->n_msgs < 0 || rq->n_ids < 0 || rq->n_images < 0 || (rq->n_images > 0 && !rq->images))
        return vs_error_set(err, VS_ERR_INVALID, "a request with a negative count or missing images");
    if (rq->n_images > MAX_CACHED_IMAGES)
        return vs_error_set(err, VS_ERR_RANGE, "%d images in one request (at most %d)", (int)rq->n_images,
                            MAX_CACHED_IMAGES);
    if (rq->n_images > 0 && rq->ids)
        return vs_error_set(err, VS_ERR_INVALID, "images need a text prompt with <image> markers, not token ids");
    if (rq->n_images > 0 && !vs_models_tower(s->m))
        return vs_error_set(err, VS_ERR_INVALID, "images need the target's vision tower (its mmproj file)");
    if (rq->n_predict < 0) return vs_error_set(err, VS_ERR_INVALID, "token limit %d < 0", (int)rq->n_predict);
    if (!s->m->tok && (!rq->ids || rq->want_text || rq->on_text || rq->n_stop))
        return vs_error_set(err, VS_ERR_INVALID, "%s has no tokenizer: give token ids and read token ids",
                            vs_gguf_name(vs_lm_gguf(s->m->target)));
    if (rq->n_stop < 0 || rq->n_stop > VS_REQ_MAX_STOP)
        return vs_error_set(err, VS_ERR_INVALID, "%d stop strings (at most %d)", (int)rq->n_stop,
                            VS_REQ_MAX_STOP);
    for (int32_t k = 0; k < rq->n_stop; k++)
        if (!rq->stop[k] || !rq->stop[k][0]) return vs_error_set(err, VS_ERR_INVALID, "an empty stop string");
    if (!is_target_only(&rq->draft) && (rq->draft.gamma < 1 || rq->draft.gamma > VS_SPEC_MAX_GAMMA))
        return vs_error_set(err, VS_ERR_INVALID, "draft length %d outside [1, %d]", (int)rq->draft.gamma,
                            VS_SPEC_MAX_GAMMA);
    return VS_OK;
}

/* Splits the prompt rows into segments: runs of text rows, and each image's rows (image_id = its cache id). */
static int32_t make_segments(const vs_mm_prompt *mp, cached_image *const *imgs, vs_spec_segment *seg) {
    int32_t ns = 0;
    int64_t at = 0;
    for (int32_t i = 0; i <= mp->n_images; i++) {
        const int64_t end = i < mp->n_images ? mp->image_first[i] : mp->n_rows;
        if (end > at)
            seg[ns++] = (vs_spec_segment){
                .kind = VS_SPEC_SEG_TEXT, .n = (int32_t)(end - at), .tokens = mp->tokens + at, .image = -1};
        if (i == mp->n_images) break;
        seg[ns++] = (vs_spec_segment){.kind = VS_SPEC_SEG_IMAGE,
                                      .n = (int32_t)imgs[i]->n_rows,
                                      .embd = imgs[i]->rows,
                                      .image = i,
                                      .image_id = imgs[i]->id};
        at = end + imgs[i]->n_rows;
    }
    return ns;
}

typedef struct run_state {
    vs_mm_prompt mp;
    vs_spec_segment *seg;
    char *chat_text;
    cached_image *img[MAX_CACHED_IMAGES];
    const vs_vision_features *feat[MAX_CACHED_IMAGES];
    stream st;
} run_state;

/* The prompt's rows: text (chat-formatted or as given) with each image's target rows at its marker. */
static vs_status build_prompt(vs_session *s, const vs_request *rq, run_state *rs, vs_spec_prompt *p,
                              vs_result *res, vs_error *err) {
    vs_status st;
    const int32_t width = vs_lm_cfg(s->m->target)->n_embd;
    if (rq->ids) {
        if (!(rs->seg = vs_calloc(1, sizeof(*rs->seg)))) return vs_error_set(err, VS_ERR_NOMEM, "out of memory");
        if (rq->max_prompt_rows > 0 && rq->n_ids > rq->max_prompt_rows)
            return vs_error_set(err, VS_ERR_RANGE, "the prompt has %d tokens, more than %lld", (int)rq->n_ids,
                                (long long)rq->max_prompt_rows);
        rs->seg[0] = (vs_spec_segment){.kind = VS_SPEC_SEG_TEXT, .n = rq->n_ids, .tokens = rq->ids, .image = -1};
        *p = (vs_spec_prompt){.seg = rs->seg, .n_seg = 1};
        return VS_OK;
    }
    const char *text = rq->prompt;
    if (rq->msgs) {
        if ((st = vs_chat_format(s->m->tpl, rq->msgs, rq->n_msgs, true, &rs->chat_text, NULL, err))) return st;
        text = rs->chat_text;
    }
    vs_mm_image mimg[MAX_CACHED_IMAGES];
    for (int32_t i = 0; i < rq->n_images; i++) {
        bool fresh;
        if ((st = image_get(s, &rq->images[i], i, &rs->img[i], &fresh, err))) return st;
        res->n_images_encoded += fresh;
        res->t_vision += rs->img[i]->secs;
        rs->feat[i] = &rs->img[i]->feat;
        mimg[i] = (vs_mm_image){.rows = rs->img[i]->rows, .n_rows = rs->img[i]->n_rows, .width = width};
    }
    res->n_images = rq->n_images;
    vs_mm_prompt_opts po = {.no_special = rq->no_bos,
                            .no_parse_special = rq->no_parse_special,
                            .lm_width = width,
                            .n_ctx = rq->max_prompt_rows};
    if ((st = vs_mm_prompt_build(&rs->mp, s->m->tok, text, strlen(text), mimg, rq->n_images, &po, err))) return st;
    if (!(rs->seg = vs_calloc((size_t)(2 * rq->n_images + 1), sizeof(*rs->seg))))
        return vs_error_set(err, VS_ERR_NOMEM, "out of memory");
    *p = (vs_spec_prompt){.seg = rs->seg,
                          .n_seg = make_segments(&rs->mp, rs->img, rs->seg),
                          .images = rq->n_images ? rs->feat : NULL,
                          .n_images = rq->n_images};
    return VS_OK;
}

static vs_finish finish_of(vs_spec_stop stop, vs_finish why) {
    switch (stop) {
    case VS_SPEC_STOP_EOS: return VS_FINISH_EOS;
    case VS_SPEC_STOP_LIMIT: return VS_FINISH_LIMIT;
    case VS_SPEC_STOP_CONTEXT: return VS_FINISH_CONTEXT;
    case VS_SPEC_STOP_CALLBACK: return why ? why : VS_FINISH_CALLBACK;
    default: return VS_FINISH_NONE;
    }
}

/* A request's prompt, checked: the request, its images encoded, its rows (res->n_prompt_rows, >= 1). */
static vs_status prepare(vs_session *s, const vs_request *rq, run_state *rs, vs_spec_prompt *prompt, vs_result *res,
                         vs_error *err) {
    vs_status st;
    if ((st = check_request(s, rq, err)) || (st = build_prompt(s, rq, rs, prompt, res, err))) return st;
    res->n_prompt_rows = vs_spec_prompt_rows(prompt);
    return res->n_prompt_rows < 1 ? vs_error_set(err, VS_ERR_INVALID, "the prompt is empty") : VS_OK;
}

static vs_status too_long(int64_t rows, int32_t n_ctx, vs_error *err) {
    return vs_error_set(err, VS_ERR_RANGE, "the prompt has %lld rows (text and image) but the context holds %d",
                        (long long)rows, (int)n_ctx);
}

static vs_status run(vs_session *s, const vs_request *rq, run_state *rs, vs_result *res, vs_error *err) {
    vs_status st;
    vs_spec_prompt prompt;
    if ((st = prepare(s, rq, rs, &prompt, res, err))) return st;
    /* fit_ctx: the prompt, the reply and the widest verify batch (a width-D tree verifies D gamma + 1 rows,
     * an EAGLE-2 tree its nodes + 1); a later request that needs more gets a new, larger engine (its cache
     * is not reused) */
    vs_method_opts mo = rq->draft.opts;
    vs_method_shape(rq->draft.method, &mo);
    const int32_t draft = is_target_only(&rq->draft) ? 0 : vs_method_verify_rows(&mo, rq->draft.gamma) - 1;
    const int64_t need = res->n_prompt_rows + rq->n_predict + draft + 1;
    if (s->eng && s->o.fit_ctx && s->o.n_ctx <= 0 && need > vs_spec_n_ctx(s->eng) &&
        vs_spec_n_ctx(s->eng) < vs_lm_cfg(s->m->target)->n_ctx_train) {
        vs_spec_free(s->eng);
        s->eng = NULL;
    }
    if (!s->eng && !engine_make(s, need, err)) return err->code;
    if (res->n_prompt_rows > vs_spec_n_ctx(s->eng)) return too_long(res->n_prompt_rows, vs_spec_n_ctx(s->eng), err);
    vs_spec_params par = vs_spec_params_default();
    par.n_predict = rq->n_predict;
    par.sampling = rq->sampling;
    par.ignore_eos = rq->ignore_eos;
    par.reuse_prefix = rq->reuse_prefix;
    if (!is_target_only(&rq->draft)) {
        cached_drafter *cd = drafter_get(s, &rq->draft, err);
        if (!cd) return err->code;
        res->drafter = cd->d, res->method = cd->m;
        par.gamma = rq->draft.gamma;
    }
    stream *sm = &rs->st;
    sm->s = s, sm->rq = rq;
    if ((rq->want_text || rq->on_text || rq->n_stop) && !(sm->dt = vs_detok_new(s->m->tok, 0, err))) return err->code;
    if (atomic_load(&s->cancel)) { /* cancelled while the prompt was being built */
        res->finish = VS_FINISH_CANCEL;
        return VS_OK;
    }
    st = vs_spec_generate(s->eng, res->drafter, &prompt, &par, on_block, sm, &res->log, err);
    if (sm->failed) {
        *err = sm->err;
        st = err->code;
    }
    /* a stop string, a cancel or a callback ends the request even in a block that also reached the limit or
     * an end-of-generation token: then nothing more is emitted */
    res->finish = sm->why ? sm->why : finish_of(res->log.stop, VS_FINISH_NONE);
    if (!st && sm->dt && !sm->why) { /* the held-back tail: it may still complete a stop string */
        size_t len = 0;
        const char *tail = vs_detok_flush(sm->dt, &len);
        if (!text_append(sm, tail, len)) {
            *err = sm->err;
            return err->code;
        }
        bool hit = false;
        if (rq->n_stop) stop_scan(sm, &hit);
        const bool more = emit(sm, sm->len);
        if (hit) res->finish = VS_FINISH_STOP;
        else if (!more) res->finish = VS_FINISH_CALLBACK;
    }
    return st;
}

static void run_state_free(run_state *rs) {
    vs_detok_free(rs->st.dt);
    vs_free(rs->seg);
    vs_free(rs->chat_text);
    vs_mm_prompt_free(&rs->mp);
}

vs_status vs_session_prompt_rows(vs_session *s, const vs_request *rq, int64_t *n_rows, vs_error *err) {
    vs_error local;
    if (!err) err = &local; /* the messages are read below */
    run_state rs;
    memset(&rs, 0, sizeof(rs));
    vs_result res;
    memset(&res, 0, sizeof(res));
    s->serial++;
    vs_spec_prompt prompt;
    vs_status st = prepare(s, rq, &rs, &prompt, &res, err);
    *n_rows = res.n_prompt_rows;
    if (!st && *n_rows > vs_session_n_ctx(s)) st = too_long(*n_rows, vs_session_n_ctx(s), err);
    run_state_free(&rs);
    return st;
}

vs_status vs_session_run(vs_session *s, const vs_request *rq, vs_result *res, vs_error *err) {
    vs_error local;
    if (!err) err = &local; /* the messages are read below */
    result_reset(res);
    atomic_store(&s->cancel, false); /* a cancel from before this request is not for it */
    s->serial++;
    run_state rs;
    memset(&rs, 0, sizeof(rs));
    vs_status st = run(s, rq, &rs, res, err);
    if (rs.st.text) {
        res->text = rs.st.text;
        res->text_len = rs.st.len;
    } else if (rq->want_text || rq->on_text || rq->n_stop) {
        res->text = vs_calloc(1, 1);
    }
    run_state_free(&rs);
    return st;
}
