/* api: the public API (include/vlmspec.h) over the library's session (src/spec/session.h).
 * Owns: the translation of the public parameter, request and result structs to and from the session's,
 * and the per-thread last error message. Everything else is the session's. */
#include "vlmspec.h"

#include <string.h>

#include "session.h"

static _Thread_local char last_error[512];

static vlmspec_status fail(const vs_error *err) {
    snprintf(last_error, sizeof(last_error), "%s", err->msg);
    return (vlmspec_status)err->code;
}

const char *vlmspec_status_name(vlmspec_status s) { return vs_status_name((vs_status)s); }
const char *vlmspec_last_error(void) { return last_error; }

void vlmspec_model_params_init(vlmspec_model_params *p) {
    memset(p, 0, sizeof(*p));
    p->threads = 2;
}

struct vlmspec_models {
    vs_models *m;
};

struct vlmspec_session {
    vs_session *s;
    vs_result res; /* reused from request to request */
};

vlmspec_status vlmspec_models_load(const vlmspec_model_params *p, vlmspec_models **out) {
    vs_error err = {0};
    if (!out) return fail(&(vs_error){VS_ERR_INVALID, "no place for the model set (out is NULL)"});
    *out = NULL;
    if (!p) return fail(&(vs_error){VS_ERR_INVALID, "no model parameters"});
    vs_models_opts o = {.model = p->model, .mmproj = p->mmproj, .threads = p->threads,
                        .chat_template = p->chat_template, .warm_up = true};
    o.draft[VS_ROLE_LLAVA] = p->draft, o.draft_mmproj[VS_ROLE_LLAVA] = p->mmproj_draft;
    o.draft[VS_ROLE_MASSV] = p->massv, o.draft_mmproj[VS_ROLE_MASSV] = p->mmproj_massv;
    vlmspec_models *m = vs_calloc(1, sizeof(*m));
    if (!m) return fail(&(vs_error){VS_ERR_NOMEM, "out of memory"});
    if (!(m->m = vs_models_load(&o, &err))) {
        vs_free(m);
        return fail(&err);
    }
    *out = m;
    return VLMSPEC_OK;
}

void vlmspec_models_free(vlmspec_models *m) {
    if (!m) return;
    vs_models_free(m->m);
    vs_free(m);
}

int vlmspec_method_count(void) {
    int n;
    vs_methods(&n);
    return n;
}

const char *vlmspec_method_name(int i) {
    int n;
    const vs_method *t = vs_methods(&n);
    return i >= 0 && i < n ? t[i].name : NULL;
}

const char *vlmspec_method_help(int i) {
    int n;
    const vs_method *t = vs_methods(&n);
    return i >= 0 && i < n ? t[i].what : NULL;
}

vlmspec_status vlmspec_session_new(vlmspec_models *m, int n_ctx, vlmspec_session **out) {
    vs_error err = {0};
    if (!out) return fail(&(vs_error){VS_ERR_INVALID, "no place for the session (out is NULL)"});
    *out = NULL;
    if (!m) return fail(&(vs_error){VS_ERR_INVALID, "no model set"});
    if (n_ctx < 0) return fail(&(vs_error){VS_ERR_INVALID, "negative context size"});
    vlmspec_session *s = vs_calloc(1, sizeof(*s));
    if (!s) return fail(&(vs_error){VS_ERR_NOMEM, "out of memory"});
    vs_session_opts so = {.n_ctx = n_ctx, .kv_type = VS_TYPE_F16, .draft_kv_type = VS_TYPE_BF16};
    if (!(s->s = vs_session_new(m->m, &so, &err))) {
        vs_free(s);
        return fail(&err);
    }
    vs_result_init(&s->res);
    *out = s;
    return VLMSPEC_OK;
}

void vlmspec_session_free(vlmspec_session *s) {
    if (!s) return;
    vs_result_free(&s->res);
    vs_session_free(s->s);
    vs_free(s);
}

void vlmspec_session_cancel(vlmspec_session *s) {
    if (s) vs_session_cancel(s->s);
}

void vlmspec_request_init(vlmspec_request *r) {
    memset(r, 0, sizeof(*r));
    r->draft_max = 5;
    r->tree_width = 1;
    r->n_predict = 128;
    r->top_p = 1;
    r->reuse = 1;
}

/* The public callback behind the session's. */
typedef struct text_cb {
    vlmspec_text_fn fn;
    void *user;
} text_cb;

static bool on_text(void *ctx, const char *text, size_t len) {
    const text_cb *t = ctx;
    return t->fn(t->user, text, len) != 0;
}

#define MAX_MESSAGES 256
#define MAX_IMAGES 64

static vs_status to_request(const vlmspec_request *r, vs_chat_msg *msgs, vs_req_image *imgs, text_cb *cb,
                            vs_request *rq, vs_error *err) {
    vs_request_default(rq);
    if (r->n_messages > 0 && !r->messages) return vs_error_set(err, VS_ERR_INVALID, "n_messages without messages");
    if (r->n_images > 0 && !r->images) return vs_error_set(err, VS_ERR_INVALID, "n_images without images");
    if (r->n_messages < 0 || r->n_messages > MAX_MESSAGES)
        return vs_error_set(err, VS_ERR_INVALID, "%d messages (0 to %d)", r->n_messages, MAX_MESSAGES);
    if (r->n_images < 0 || r->n_images > MAX_IMAGES)
        return vs_error_set(err, VS_ERR_INVALID, "%d images (0 to %d)", r->n_images, MAX_IMAGES);
    for (int i = 0; i < r->n_messages; i++) {
        const vlmspec_role role = r->messages[i].role;
        if (role != VLMSPEC_SYSTEM && role != VLMSPEC_USER && role != VLMSPEC_ASSISTANT)
            return vs_error_set(err, VS_ERR_INVALID, "message %d: unknown role %d", i, (int)role);
        msgs[i] = (vs_chat_msg){.role = role == VLMSPEC_SYSTEM ? VS_CHAT_SYSTEM
                                        : role == VLMSPEC_USER ? VS_CHAT_USER : VS_CHAT_ASSISTANT,
                                .content = r->messages[i].content,
                                .n_images = r->messages[i].n_images};
    }
    for (int i = 0; i < r->n_images; i++)
        imgs[i] = (vs_req_image){.path = r->images[i].path, .data = r->images[i].data, .size = r->images[i].size};
    if (r->n_messages > 0) rq->msgs = msgs, rq->n_msgs = r->n_messages;
    rq->prompt = r->prompt;
    rq->images = imgs, rq->n_images = r->n_images;
    rq->draft.method = r->method;
    rq->draft.gamma = r->draft_max;
    rq->draft.opts.tree_width = r->tree_width;
    rq->n_predict = r->n_predict;
    rq->sampling.temperature = r->temperature;
    rq->sampling.top_k = r->top_k;
    rq->sampling.top_p = r->top_p;
    rq->sampling.min_p = r->min_p;
    rq->sampling.seed = r->seed;
    rq->reuse_prefix = r->reuse != 0;
    while (rq->n_stop < VLMSPEC_MAX_STOP && r->stop[rq->n_stop] && r->stop[rq->n_stop][0]) {
        rq->stop[rq->n_stop] = r->stop[rq->n_stop];
        rq->n_stop++;
    }
    rq->want_text = true;
    if (r->on_text) {
        *cb = (text_cb){r->on_text, r->user};
        rq->on_text = on_text, rq->cb_ctx = cb;
    }
    return VS_OK;
}

static void to_result(const vs_result *res, vlmspec_result *out) {
    vs_spec_stats st;
    vs_spec_stats_compute(&res->log, NULL, &st);
    out->n_tokens = res->log.n_tokens;
    out->n_prompt_rows = (int)res->n_prompt_rows;
    out->n_prompt_reused = VS_MAX(0, res->log.n_prompt - 1 - res->log.n_prefilled); /* the last row is never cached */
    out->finish = vs_finish_name(res->finish);
    out->target_passes = st.n_blocks;
    out->drafted = (int)st.n_drafted;
    out->accepted = (int)st.n_accepted;
    out->tau = st.tau;
    out->t_vision = res->t_vision;
    out->t_prefill = res->log.t_prefill;
    out->t_decode = res->log.t_decode;
    out->t_total = res->log.t_total + res->t_vision;
    out->tokens_per_s = st.tok_s_decode;
}

vlmspec_status vlmspec_generate(vlmspec_session *s, const vlmspec_request *r, vlmspec_result *out) {
    vs_error err = {0};
    if (!out) return fail(&(vs_error){VS_ERR_INVALID, "no result"});
    memset(out, 0, sizeof(*out));
    out->finish = "none";
    if (!s || !r) return fail(&(vs_error){VS_ERR_INVALID, "no session or no request"});
    vs_chat_msg msgs[MAX_MESSAGES];
    vs_req_image imgs[MAX_IMAGES];
    text_cb cb;
    vs_request rq;
    vs_status st = to_request(r, msgs, imgs, &cb, &rq, &err);
    if (st) { /* refused before it ran: nothing was generated */
        out->text = vs_strndup("", 0);
        return fail(&err);
    }
    st = vs_session_run(s->s, &rq, &s->res, &err);
    to_result(&s->res, out);
    out->text = vs_strndup(s->res.text ? s->res.text : "", s->res.text_len);
    if (!out->text && !st) st = vs_error_set(&err, VS_ERR_NOMEM, "out of memory");
    return st ? fail(&err) : VLMSPEC_OK;
}

void vlmspec_result_free(vlmspec_result *r) {
    if (!r) return;
    vs_free(r->text);
    memset(r, 0, sizeof(*r));
}
