/* server: the HTTP front end and the inference thread of `vlmspec serve` (server.h). */
#include "server.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "lm.h"
#include "oai.h"
#include "tokenizer.h"

extern const char vs_server_page[];    /* the chat page (chat_page.html, embedded at build time) */
extern const size_t vs_server_page_len;

/* ------------------------------------------------------------------------------------------------
 * Requests in flight */

typedef enum job_state { JOB_QUEUED = 0, JOB_RUNNING, JOB_DONE } job_state;

typedef struct job job;
struct job {
    vs_oai_req req;
    char id[48];
    int64_t created;
    job_state state;
    bool started;   /* the prompt was accepted: a stream's headers may go out */
    bool cancelled; /* the client went away (or the server stops) */
    int refs;       /* the connection and the queue / inference thread */
    int32_t slot;   /* while running: its slot */
    uint64_t n_id;  /* its number (the id's) */
    pthread_cond_t cv;
    /* a stream's SSE bytes, produced by the inference thread, sent by the connection */
    char *out;
    size_t out_len, out_sent, out_cap;
    bool out_oom;
    /* the answer when not streamed, or the error of either */
    int http;
    char *body;
    size_t body_len;
    /* a stream's text since the last chunk in segments that the drafter proposed and the target accepted
     * ("drafted": true) or that the target produced itself: {"segments":[{"text","drafted"}...]} */
    vs_detok *dt;
    vs_json_writer seg;
    bool seg_open;
    vs_result *res; /* while running */
    job *next;
};

typedef struct slot {
    vs_session *sess;
    job *running; /* the request it runs, NULL when free */
    char *key; /* the conversation it holds (roles, texts, image hashes, the reply) */
    size_t key_len;
    uint64_t last_used;
} slot;

#define N_POS VS_SPEC_MAX_GAMMA

struct vs_server {
    vs_server_opts o;
    char model_id[256];
    struct MHD_Daemon *mhd;
    int32_t port;
    pthread_t *workers; /* one per slot: the slots' requests run at once, their verify blocks merged */
    int32_t n_workers;
    bool loader_done;
    pthread_mutex_t mu;
    pthread_cond_t work_cv, ready_cv;
    bool ready, load_failed, stopping;
    vs_error load_err;
    vs_models *models;
    vs_kv *kv;        /* the target cache of every slot (one sequence each) */
    vs_batch *batch;  /* merges the slots' verify forwards */
    slot *slots;
    job *head, *tail; /* the queue */
    int32_t n_queued, n_running;
    uint64_t serial;  /* slot use order */
    uint64_t n_ids;   /* reply ids */
    /* metrics */
    int64_t m_requests, m_failed, m_prompt_tokens, m_predicted, m_drafts, m_drafted, m_accepted;
    int64_t m_accepted_at[N_POS];
    double m_prompt_s, m_predicted_s;
};

static void job_unref_locked(job *j) {
    if (--j->refs > 0) return;
    vs_oai_req_free(&j->req);
    vs_detok_free(j->dt);
    vs_json_writer_free(&j->seg);
    vs_free(j->out);
    vs_free(j->body);
    pthread_cond_destroy(&j->cv);
    vs_free(j);
}

/* Sets a job's error answer (when it has none yet). */
static void job_error(job *j, const vs_oai_error *e) {
    vs_json_writer w;
    vs_json_writer_init(&w);
    vs_oai_write_error(&w, e);
    vs_free(j->body);
    j->http = e->http;
    j->body = vs_json_writer_take(&w, &j->body_len);
    vs_json_writer_free(&w);
}

/* Appends "data: JSON\n\n" (json NULL: "data: [DONE]\n\n") to a stream. Lock held. */
static void job_sse(job *j, const char *json, size_t len) {
    const char *pre = "data: ";
    const char *done = "[DONE]";
    if (!json) json = done, len = strlen(done);
    const size_t need = j->out_len + 6 + len + 2;
    if (need > j->out_cap) {
        size_t cap = VS_MAX(need, j->out_cap * 2 + 1024);
        char *p = vs_realloc(j->out, cap);
        if (!p) {
            j->out_oom = true;
            return;
        }
        j->out = p, j->out_cap = cap;
    }
    memcpy(j->out + j->out_len, pre, 6);
    memcpy(j->out + j->out_len + 6, json, len);
    memcpy(j->out + j->out_len + 6 + len, "\n\n", 2);
    j->out_len = need;
    pthread_cond_broadcast(&j->cv);
}

/* ------------------------------------------------------------------------------------------------
 * The inference thread */

static uint64_t fnv1a(const uint8_t *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static bool key_add(char **k, size_t *len, const char *s, size_t n) {
    char *p = vs_realloc(*k, *len + n + 1);
    if (!p) return false;
    memcpy(p + *len, s, n);
    *len += n;
    p[*len] = 0;
    *k = p;
    return true;
}

/* The conversation key of a request: what a slot must have seen for its caches to be reused. */
static char *request_key(const vs_oai_req *r, size_t *len) {
    char *k = NULL;
    *len = 0;
    bool ok = key_add(&k, len, r->kind == VS_OAI_CHAT ? "C" : "P", 1);
    int32_t img = 0;
    if (r->kind == VS_OAI_COMPLETION) ok = ok && key_add(&k, len, r->prompt, strlen(r->prompt));
    for (int32_t i = 0; ok && i < r->n_msgs; i++) {
        char head[8];
        snprintf(head, sizeof(head), "\x1e%d", (int)r->msgs[i].role);
        ok = key_add(&k, len, head, strlen(head));
        for (int m = 0; ok && m < r->msgs[i].n_images; m++, img++) {
            char h[24];
            snprintf(h, sizeof(h), "\x1f%016llx", (unsigned long long)fnv1a(r->images[img].data, r->images[img].size));
            ok = key_add(&k, len, h, strlen(h));
        }
        ok = ok && key_add(&k, len, r->msgs[i].content, strlen(r->msgs[i].content));
    }
    if (!ok) {
        vs_free(k);
        return NULL;
    }
    return k;
}

/* The free slot whose conversation shares the longest prefix with the key (the least recently used one among
 * equals). Lock held; a worker only looks for one when it is free itself, so one is free. */
static int32_t pick_slot(vs_server *s, const char *key, size_t len) {
    int32_t best = -1;
    size_t best_common = 0;
    for (int32_t i = 0; i < s->o.n_slots; i++) {
        const slot *sl = &s->slots[i];
        if (sl->running) continue;
        size_t c = 0;
        if (sl->key)
            while (c < len && c < sl->key_len && key[c] == sl->key[c]) c++;
        if (best < 0 || c > best_common || (c == best_common && sl->last_used < s->slots[best].last_used))
            best = i, best_common = c;
    }
    return best;
}

typedef struct run_ctx {
    vs_server *s;
    job *j;
} run_ctx;

/* Adds the text of t[0..n) as one segment (nothing when it is empty). */
static void seg_add(job *j, const int32_t *t, int32_t n, bool drafted) {
    size_t len = 0;
    const char *p = n > 0 ? vs_detok_feed(j->dt, t, n, &len, NULL) : NULL;
    if (!p || !len) return;
    if (!j->seg_open) {
        vs_json_writer_reset(&j->seg);
        vs_json_obj_begin(&j->seg);
        vs_json_key(&j->seg, "segments");
        vs_json_arr_begin(&j->seg);
        j->seg_open = true;
    }
    vs_json_obj_begin(&j->seg);
    vs_json_key(&j->seg, "text");
    vs_json_strn(&j->seg, p, len);
    vs_json_kv_bool(&j->seg, "drafted", drafted);
    vs_json_obj_end(&j->seg);
}

/* After each verify block: its tokens are the drafts the target accepted, then the one it chose itself. */
static bool on_tokens(void *ctx, const int32_t *t, int32_t n) {
    run_ctx *rc = ctx;
    job *j = rc->j;
    if (j->dt) {
        const vs_spec_log *log = &j->res->log;
        const int32_t drafted = log->n_blocks > 0 ? VS_MIN(log->blocks[log->n_blocks - 1].n_accept, n) : 0;
        seg_add(j, t, drafted, true);
        seg_add(j, t + drafted, n - drafted, false);
    }
    pthread_mutex_lock(&rc->s->mu);
    const bool go = !j->cancelled;
    pthread_mutex_unlock(&rc->s->mu);
    return go;
}

/* The pending segments as the chunk's "vlmspec" value (NULL: none), closed and emptied for the next. */
static const char *seg_take(job *j, size_t *len) {
    if (!j->seg_open) return NULL;
    vs_json_arr_end(&j->seg);
    vs_json_obj_end(&j->seg);
    j->seg_open = false;
    *len = j->seg.len;
    return j->seg.oom ? NULL : j->seg.buf;
}

static bool on_text(void *ctx, const char *text, size_t len) {
    run_ctx *rc = ctx;
    job *j = rc->j;
    vs_server *s = rc->s;
    vs_json_writer w;
    vs_json_writer_init(&w);
    size_t ext_len = 0;
    const char *ext = seg_take(j, &ext_len);
    vs_oai_write_chunk(&w, j->req.kind, j->id, j->created, s->model_id, NULL, text, len, NULL, NULL, ext, ext_len);
    pthread_mutex_lock(&s->mu);
    if (!w.oom) job_sse(j, w.buf, w.len);
    const bool go = !j->cancelled && !w.oom && !j->out_oom;
    pthread_mutex_unlock(&s->mu);
    vs_json_writer_free(&w);
    return go;
}

static void fill_usage(const vs_result *res, const vs_request *rq, vs_oai_usage *u) {
    memset(u, 0, sizeof(*u));
    u->prompt_tokens = res->n_prompt_rows;
    u->completion_tokens = res->log.n_tokens;
    u->prompt_n = res->log.n_prefilled;
    u->prompt_ms = (res->t_vision + res->log.t_prefill + res->log.t_draft_prefill) * 1e3;
    u->predicted_ms = res->log.t_decode * 1e3;
    u->verify_passes = res->log.n_blocks;
    for (int32_t b = 0; b < res->log.n_blocks; b++) {
        u->draft_n += res->log.blocks[b].n_draft;
        u->draft_n_accepted += res->log.blocks[b].n_accept;
    }
    u->method = rq->draft.method ? rq->draft.method : "ar";
    u->gamma = res->drafter ? rq->draft.gamma : 0;
    u->tree_width = res->drafter ? VS_MAX(1, rq->draft.opts.tree_width) : 0;
}

/* Maps a session error to the HTTP answer. */
static void session_error(const vs_error *err, vs_oai_error *e) {
    switch (err->code) {
    case VS_ERR_INVALID:
    case VS_ERR_FORMAT:
    case VS_ERR_UNSUPPORTED: vs_oai_fail(e, 400, "invalid_request_error", NULL, "%s", err->msg); break;
    case VS_ERR_RANGE:
        vs_oai_fail(e, 400, "exceed_context_size_error", "messages", "%s", err->msg);
        e->code = "context_length_exceeded";
        break;
    default: vs_oai_fail(e, 500, "server_error", NULL, "%s", err->msg); break;
    }
}

/* Runs a request on its slot (j->slot), the batcher's turn held. key: its conversation key (taken). */
static void run_job(vs_server *s, job *j, char *key, size_t key_len) {
    vs_oai_req *r = &j->req;
    vs_oai_error e = {0};
    const int32_t si = j->slot;
    slot *sl = &s->slots[si];
    vs_request rq;
    vs_request_default(&rq);
    if (r->kind == VS_OAI_CHAT) rq.msgs = r->msgs, rq.n_msgs = r->n_msgs;
    else rq.prompt = r->prompt;
    rq.images = r->images, rq.n_images = r->n_images;
    rq.draft = s->o.draft;
    if (r->method) rq.draft.method = r->method;
    if (r->gamma > 0) rq.draft.gamma = r->gamma;
    if (r->tree_width > 0) rq.draft.opts.tree_width = r->tree_width;
    if (r->draft_greedy >= 0) rq.draft.opts.greedy = r->draft_greedy;
    rq.sampling = s->o.sampling;
    if (r->has_temperature) rq.sampling.temperature = (float)r->temperature;
    if (r->has_top_p) rq.sampling.top_p = (float)r->top_p;
    if (r->has_min_p) rq.sampling.min_p = (float)r->min_p;
    if (r->has_top_k) rq.sampling.top_k = (int32_t)VS_MIN(r->top_k, INT32_MAX);
    if (r->has_seed) rq.sampling.seed = r->seed;
    else if (!s->o.seed_given) rq.sampling.seed = (uint64_t)(vs_time_now() * 1e6) ^ (j->n_id << 32);
    for (int32_t k = 0; k < r->n_stop; k++) rq.stop[k] = r->stop[k];
    rq.n_stop = r->n_stop;
    rq.reuse_prefix = true;
    rq.want_text = true;
    run_ctx rc = {s, j};
    rq.cb_ctx = &rc;
    rq.on_tokens = on_tokens;
    if (r->stream) {
        rq.on_text = on_text;
        const vs_tokenizer *tok = vs_models_tokenizer(s->models);
        vs_json_writer_init(&j->seg);
        if (tok && !(j->dt = vs_detok_new(tok, 0, NULL))) {
            vs_oai_fail(&e, 500, "server_error", NULL, "out of memory");
            goto fail_key;
        }
    }
    /* the prompt must leave room for the reply */
    const int64_t n_ctx = vs_session_n_ctx(sl->sess);
    int64_t rows = 0;
    vs_error err = {0};
    /* the pictures first: a broken or oversized one is the request's fault (400), whatever its error code */
    for (int32_t i = 0; i < r->n_images; i++) {
        int64_t img_rows = 0;
        if (vs_session_add_image(sl->sess, &r->images[i], &img_rows, &err)) {
            if (err.code == VS_ERR_NOMEM) vs_oai_fail(&e, 500, "server_error", NULL, "%s", err.msg);
            else vs_oai_fail(&e, 400, "invalid_request_error", r->kind == VS_OAI_CHAT ? "messages" : "prompt", "%s", err.msg);
            goto fail_key;
        }
    }
    if (vs_session_prompt_rows(sl->sess, &rq, &rows, &err)) {
        session_error(&err, &e);
        goto fail_key;
    }
    /* the request's drafter (made at its first use): a method whose model is missing, or a slot that keeps
     * too many drafting configurations, is refused before anything is streamed */
    if (vs_session_prepare(sl->sess, &rq.draft, &err)) {
        if (err.code == VS_ERR_NOMEM) vs_oai_fail(&e, 500, "server_error", NULL, "%s", err.msg);
        else vs_oai_fail(&e, 400, "invalid_request_error", "vlmspec", "%s", err.msg);
        goto fail_key;
    }
    const int64_t want = r->max_tokens > 0 ? r->max_tokens : s->o.n_predict > 0 ? s->o.n_predict : 0;
    if (rows + VS_MAX(want, 1) > n_ctx) {
        vs_oai_fail(&e, 400, "exceed_context_size_error", r->kind == VS_OAI_CHAT ? "messages" : "prompt",
                    "the request needs %lld prompt rows + %lld tokens, more than the context of %lld",
                    (long long)rows, (long long)VS_MAX(want, 1), (long long)n_ctx);
        e.code = "context_length_exceeded";
        goto fail_key;
    }
    rq.n_predict = (int32_t)(want > 0 ? want : n_ctx - rows);
    vs_result res;
    vs_result_init(&res);
    pthread_mutex_lock(&s->mu);
    if (j->cancelled) { /* the client went away, or the server stops, while the prompt was prepared */
        vs_oai_fail(&e, 503, "unavailable_error", NULL, "the request was cancelled");
        job_error(j, &e);
        pthread_mutex_unlock(&s->mu);
        vs_free(key);
        return;
    }
    j->res = &res;
    j->started = true;
    if (r->stream && r->kind == VS_OAI_CHAT) { /* the role comes first */
        vs_json_writer w;
        vs_json_writer_init(&w);
        vs_oai_write_chunk(&w, r->kind, j->id, j->created, s->model_id, "assistant", "", 0, NULL, NULL, NULL, 0);
        if (!w.oom) job_sse(j, w.buf, w.len);
        vs_json_writer_free(&w);
    }
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&s->mu);

    const vs_status st = vs_session_run(sl->sess, &rq, &res, &err);

    pthread_mutex_lock(&s->mu);
    j->res = NULL;
    sl->last_used = ++s->serial;
    vs_free(sl->key);
    sl->key = NULL, sl->key_len = 0;
    if (!st && res.text && key_add(&key, &key_len, "\x1e" "2", 2) && key_add(&key, &key_len, res.text, res.text_len))
        sl->key = key, sl->key_len = key_len, key = NULL;
    vs_oai_usage u;
    fill_usage(&res, &rq, &u);
    s->m_prompt_tokens += u.prompt_n;
    s->m_predicted += u.completion_tokens;
    s->m_prompt_s += u.prompt_ms / 1e3;
    s->m_predicted_s += u.predicted_ms / 1e3;
    for (int32_t b = 0; b < res.log.n_blocks; b++) {
        const vs_spec_block *blk = &res.log.blocks[b];
        if (blk->n_draft <= 0) continue;
        s->m_drafts++;
        s->m_drafted += blk->n_draft;
        s->m_accepted += blk->n_accept;
        for (int32_t p = 0; p < VS_MIN(blk->n_accept, N_POS); p++) s->m_accepted_at[p]++;
    }
    const char *finish = vs_oai_finish_reason(res.finish);
    vs_json_writer w;
    vs_json_writer_init(&w);
    if (st) {
        session_error(&err, &e);
        if (j->started && r->stream) { /* the headers are out: the error goes into the stream */
            vs_oai_write_error(&w, &e);
            if (!w.oom) job_sse(j, w.buf, w.len);
            job_sse(j, NULL, 0);
        } else {
            job_error(j, &e);
        }
        s->m_failed++;
    } else if (j->cancelled) { /* the client went away or the server stops: no reply to give */
        vs_oai_fail(&e, 503, "unavailable_error", NULL, "the request was cancelled");
        if (r->stream) {
            vs_oai_write_error(&w, &e);
            if (!w.oom) job_sse(j, w.buf, w.len);
            job_sse(j, NULL, 0);
        } else {
            job_error(j, &e);
        }
    } else if (r->stream) {
        size_t ext_len = 0;
        const char *ext = seg_take(j, &ext_len);
        vs_oai_write_chunk(&w, r->kind, j->id, j->created, s->model_id, NULL, NULL, 0, finish ? finish : "stop", NULL,
                           ext, ext_len);
        if (!w.oom) job_sse(j, w.buf, w.len);
        if (r->include_usage) {
            vs_json_writer_reset(&w);
            vs_oai_write_chunk(&w, r->kind, j->id, j->created, s->model_id, NULL, NULL, 0, NULL, &u, NULL, 0);
            if (!w.oom) job_sse(j, w.buf, w.len);
        }
        job_sse(j, NULL, 0);
    } else {
        vs_oai_write_reply(&w, r->kind, j->id, j->created, s->model_id, res.text ? res.text : "", res.text_len,
                           finish ? finish : "stop", &u);
        j->http = 200;
        j->body = vs_json_writer_take(&w, &j->body_len);
        if (!j->body) {
            vs_oai_fail(&e, 500, "server_error", NULL, "out of memory");
            job_error(j, &e);
        }
    }
    if (s->o.verbose)
        fprintf(stderr, "vlmspec serve: %s slot %d: %lld prompt rows (%lld evaluated), %d tokens, %s%s\n", j->id, (int)si,
                (long long)res.n_prompt_rows, (long long)res.log.n_prefilled, (int)res.log.n_tokens,
                st ? "error: " : vs_finish_name(res.finish), st ? err.msg : "");
    pthread_mutex_unlock(&s->mu);
    vs_json_writer_free(&w);
    vs_result_free(&res);
    vs_free(key);
    return;
fail_key:
    vs_free(key);
    pthread_mutex_lock(&s->mu);
    job_error(j, &e);
    s->m_failed++;
    if (s->o.verbose) fprintf(stderr, "vlmspec serve: %s refused (%d): %s\n", j->id, e.http, e.message);
    pthread_mutex_unlock(&s->mu);
}

static bool load_models(vs_server *s) {
    vs_error err = {0};
    vs_models *m = vs_models_load(&s->o.models, &err);
    slot *slots = m ? vs_calloc((size_t)s->o.n_slots, sizeof(slot)) : NULL;
    if (m && !slots) vs_error_set(&err, VS_ERR_NOMEM, "out of memory");
    const int32_t n_ctx = m ? (s->o.n_ctx > 0 ? s->o.n_ctx : vs_lm_cfg(vs_models_target(m))->n_ctx_train) : 0;
    vs_kv *kv = slots ? vs_lm_kv_new(vs_models_target(m), s->o.n_slots, n_ctx, s->o.kv_type, &err) : NULL;
    vs_batch *batch = kv ? vs_batch_new(0, &err) : NULL;
    if (slots && !batch) goto fail;
    if (batch) vs_batch_set_draft_pause(batch, s->o.draft_pause);
    vs_session_opts so = {.n_ctx = n_ctx, .kv_type = s->o.kv_type, .draft_n_ctx = n_ctx,
                          .draft_kv_type = s->o.draft_kv_type, .kv = kv, .batch = batch};
    for (int32_t i = 0; slots && i < s->o.n_slots; i++) {
        so.seq = i;
        if (!(slots[i].sess = vs_session_new(m, &so, &err))) goto fail;
    }
    /* the default drafting must work before the first request */
    for (int32_t i = 0; slots && (s->o.draft.method || s->o.draft.n_inputs > 0) && i < s->o.n_slots; i++)
        if (vs_session_prepare(slots[i].sess, &s->o.draft, &err)) goto fail;
    pthread_mutex_lock(&s->mu);
    s->models = m, s->slots = slots, s->kv = kv, s->batch = batch;
    s->ready = slots != NULL;
    s->load_failed = !s->ready;
    s->load_err = err;
    pthread_cond_broadcast(&s->ready_cv);
    pthread_mutex_unlock(&s->mu);
    return s->ready;
fail:
    for (int32_t i = 0; slots && i < s->o.n_slots; i++) vs_session_free(slots[i].sess);
    vs_free(slots);
    vs_batch_free(batch);
    vs_kv_free(kv);
    vs_models_free(m);
    pthread_mutex_lock(&s->mu);
    s->load_failed = true;
    s->load_err = err;
    pthread_cond_broadcast(&s->ready_cv);
    pthread_mutex_unlock(&s->mu);
    return false;
}

/* One per slot: takes the next request, runs it on the best free slot (taking turns with the other workers
 * through the batcher, which merges their verify forwards). */
static void *worker_main(void *arg) {
    vs_server *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->ready && !s->load_failed && !s->stopping) pthread_cond_wait(&s->ready_cv, &s->mu);
    for (;;) {
        while (!s->stopping && !s->load_failed && !s->head) pthread_cond_wait(&s->work_cv, &s->mu);
        if (s->stopping || s->load_failed) break;
        job *j = s->head;
        s->head = j->next;
        if (!s->head) s->tail = NULL;
        s->n_queued--;
        size_t key_len = 0;
        char *key = request_key(&j->req, &key_len);
        j->slot = pick_slot(s, key ? key : "", key ? key_len : 0);
        j->state = JOB_RUNNING;
        s->slots[j->slot].running = j;
        s->n_running++;
        const bool skip = j->cancelled || !key;
        pthread_mutex_unlock(&s->mu);
        if (!key) {
            vs_oai_error e;
            vs_oai_fail(&e, 500, "server_error", NULL, "out of memory");
            pthread_mutex_lock(&s->mu);
            job_error(j, &e);
            pthread_mutex_unlock(&s->mu);
        } else if (skip) {
            vs_free(key);
            vs_oai_error e;
            vs_oai_fail(&e, 503, "unavailable_error", NULL, "the request was cancelled");
            pthread_mutex_lock(&s->mu);
            job_error(j, &e);
            pthread_mutex_unlock(&s->mu);
        } else {
            vs_batch_enter(s->batch);
            run_job(s, j, key, key_len);
            vs_batch_leave(s->batch);
        }
        pthread_mutex_lock(&s->mu);
        s->slots[j->slot].running = NULL;
        s->n_running--;
        j->state = JOB_DONE;
        pthread_cond_broadcast(&j->cv);
        job_unref_locked(j);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static void *loader_main(void *arg) {
    load_models(arg);
    return NULL;
}

/* ------------------------------------------------------------------------------------------------
 * HTTP */

typedef struct conn {
    char *body;
    size_t len, cap;
    bool too_large;
} conn;

static enum MHD_Result send_buf(struct MHD_Connection *c, int status, const char *type, const char *body,
                                size_t len) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    MHD_add_response_header(r, "Access-Control-Allow-Origin", "*");
    const enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result send_json(struct MHD_Connection *c, int status, const char *body, size_t len) {
    return send_buf(c, status, "application/json; charset=utf-8", body, len);
}

static enum MHD_Result send_error(struct MHD_Connection *c, const vs_oai_error *e) {
    vs_json_writer w;
    vs_json_writer_init(&w);
    vs_oai_write_error(&w, e);
    const enum MHD_Result r = send_json(c, e->http, w.buf ? w.buf : "{}", w.buf ? w.len : 2);
    vs_json_writer_free(&w);
    return r;
}

static enum MHD_Result fail(struct MHD_Connection *c, int http, const char *type, const char *code, const char *fmt,
                            const char *arg) {
    vs_oai_error e;
    vs_oai_fail(&e, http, type, NULL, fmt, arg);
    e.code = code;
    return send_error(c, &e);
}

typedef struct stream_ref {
    vs_server *s;
    job *j;
    struct MHD_Connection *c;
} stream_ref;

/* Whether the client closed its connection (checked while a request waits or computes: the connection
 * thread is blocked, so libmicrohttpd would notice only at the next write). */
static bool client_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return false;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* Marks a job cancelled and stops its request (lock held). */
static void job_cancel(vs_server *s, job *j) {
    if (j->state == JOB_DONE) return;
    j->cancelled = true;
    if (j->state == JOB_RUNNING) vs_session_cancel(s->slots[j->slot].sess);
}

/* Waits on a job's condition for at most ms milliseconds (lock held). */
static void job_wait(vs_server *s, job *j, int ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&j->cv, &s->mu, &ts);
}

#define KEEPALIVE_S 15 /* a stream with nothing to send for this long sends an SSE comment */

/* A stream's body: blocks until the inference thread has more (a thread per connection allows it). */
static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    stream_ref *sr = cls;
    job *j = sr->j;
    pthread_mutex_lock(&sr->s->mu);
    const double t0 = vs_time_now();
    bool keepalive = false;
    while (j->out_sent == j->out_len && j->state != JOB_DONE) {
        job_wait(sr->s, j, 500);
        if (client_gone(sr->c)) job_cancel(sr->s, j);
        if (j->out_sent == j->out_len && vs_time_now() - t0 > KEEPALIVE_S) { /* a long prefill or turn */
            keepalive = true;
            break;
        }
    }
    ssize_t n;
    if (keepalive) {
        static const char ka[] = ": keep-alive\n\n";
        n = (ssize_t)VS_MIN(max, sizeof(ka) - 1);
        memcpy(buf, ka, (size_t)n);
    } else if (j->out_sent < j->out_len) {
        const size_t k = VS_MIN(max, j->out_len - j->out_sent);
        memcpy(buf, j->out + j->out_sent, k);
        j->out_sent += k;
        n = (ssize_t)k;
    } else {
        n = MHD_CONTENT_READER_END_OF_STREAM;
    }
    pthread_mutex_unlock(&sr->s->mu);
    return n;
}

/* The stream's response is gone: the request finished, or the client went away (then the request stops
 * at its next token). */
static void stream_free(void *cls) {
    stream_ref *sr = cls;
    vs_server *s = sr->s;
    pthread_mutex_lock(&s->mu);
    job *j = sr->j;
    job_cancel(s, j);
    job_unref_locked(j);
    pthread_mutex_unlock(&s->mu);
    vs_free(sr);
}

static bool authorised(vs_server *s, struct MHD_Connection *c) {
    if (!s->o.api_key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7)) return false;
    h += 7;
    /* the comparison takes the same time wherever the first difference is */
    const size_t a = strlen(h), b = strlen(s->o.api_key);
    unsigned diff = a != b;
    for (size_t i = 0; i < a; i++) diff |= (unsigned char)h[i] ^ (unsigned char)s->o.api_key[i % (b ? b : 1)];
    return diff == 0;
}

static enum MHD_Result handle_completion(vs_server *s, struct MHD_Connection *c, vs_oai_kind kind, conn *cn) {
    job *j = vs_calloc(1, sizeof(job));
    if (!j) return fail(c, 500, "server_error", NULL, "%s", "out of memory");
    vs_oai_limits lim = {.max_images = s->o.max_images, .max_image_bytes = s->o.max_image_bytes,
                         .media_path = s->o.media_path};
    vs_oai_error e = {0};
    if (!vs_oai_parse(kind, cn->body ? cn->body : "", cn->len, &lim, &j->req, &e)) {
        vs_free(j);
        pthread_mutex_lock(&s->mu);
        s->m_requests++, s->m_failed++;
        pthread_mutex_unlock(&s->mu);
        return send_error(c, &e);
    }
    pthread_cond_init(&j->cv, NULL);
    j->created = (int64_t)time(NULL);
    pthread_mutex_lock(&s->mu);
    s->m_requests++;
    j->n_id = ++s->n_ids;
    snprintf(j->id, sizeof(j->id), "%s-%llu", kind == VS_OAI_CHAT ? "chatcmpl" : "cmpl", (unsigned long long)j->n_id);
    if (s->stopping || s->n_queued >= s->o.queue + (s->o.n_slots - s->n_running)) {
        s->m_failed++;
        j->refs = 1;
        job_unref_locked(j);
        pthread_mutex_unlock(&s->mu);
        return fail(c, 503, "unavailable_error", NULL, "%s", "the server is busy: too many requests waiting, retry later");
    }
    j->refs = 2;
    if (s->tail) s->tail->next = j;
    else s->head = j;
    s->tail = j;
    s->n_queued++;
    pthread_cond_signal(&s->work_cv);
    vs_free(cn->body); /* parsed: the request holds what it needs */
    cn->body = NULL, cn->len = cn->cap = 0;
    /* a stream starts once the prompt was accepted; a reply when it is done; a client that leaves
     * meanwhile stops its request */
    while (j->state != JOB_DONE && !(j->req.stream && j->started)) {
        job_wait(s, j, 500);
        if (j->state != JOB_DONE && client_gone(c)) job_cancel(s, j);
    }
    if (j->state == JOB_DONE && (!j->req.stream || j->http != 0)) {
        const int http = j->http ? j->http : 500;
        char *body = j->body;
        size_t len = j->body_len;
        j->body = NULL;
        job_unref_locked(j);
        pthread_mutex_unlock(&s->mu);
        enum MHD_Result r = send_json(c, http, body ? body : "{}", body ? len : 2);
        vs_free(body);
        return r;
    }
    pthread_mutex_unlock(&s->mu);
    stream_ref *sr = vs_malloc(sizeof(*sr));
    struct MHD_Response *resp =
        sr ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, sr, stream_free) : NULL;
    if (!resp) {
        pthread_mutex_lock(&s->mu);
        j->cancelled = true;
        job_unref_locked(j);
        pthread_mutex_unlock(&s->mu);
        vs_free(sr);
        return MHD_NO;
    }
    sr->s = s, sr->j = j, sr->c = c;
    MHD_add_response_header(resp, "Content-Type", "text/event-stream; charset=utf-8");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", "*");
    const enum MHD_Result r = MHD_queue_response(c, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    return r;
}

static enum MHD_Result handle_models(vs_server *s, struct MHD_Connection *c) {
    vs_json_writer w;
    vs_json_writer_init(&w);
    vs_json_obj_begin(&w);
    vs_json_kv_str(&w, "object", "list");
    vs_json_key(&w, "data");
    vs_json_arr_begin(&w);
    vs_json_obj_begin(&w);
    vs_json_kv_str(&w, "id", s->model_id);
    vs_json_kv_str(&w, "object", "model");
    vs_json_kv_int(&w, "created", 0);
    vs_json_kv_str(&w, "owned_by", "vlmspec");
    vs_json_obj_end(&w);
    vs_json_arr_end(&w);
    vs_json_obj_end(&w);
    const enum MHD_Result r = send_json(c, 200, w.buf ? w.buf : "{}", w.buf ? w.len : 2);
    vs_json_writer_free(&w);
    return r;
}

static enum MHD_Result handle_metrics(vs_server *s, struct MHD_Connection *c) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return fail(c, 500, "server_error", NULL, "%s", "out of memory");
    pthread_mutex_lock(&s->mu);
#define COUNTER(name, help, v) \
    fprintf(f, "# HELP vlmspec_" name " " help "\n# TYPE vlmspec_" name " counter\nvlmspec_" name " %lld\n", (long long)(v))
#define GAUGE(name, help, fmt, v) \
    fprintf(f, "# HELP vlmspec_" name " " help "\n# TYPE vlmspec_" name " gauge\nvlmspec_" name " " fmt "\n", v)
    COUNTER("requests_total", "Completion requests received.", s->m_requests);
    COUNTER("requests_failed_total", "Completion requests answered with an error.", s->m_failed);
    COUNTER("prompt_tokens_total", "Prompt rows the target evaluated (after prefix reuse).", s->m_prompt_tokens);
    COUNTER("tokens_predicted_total", "Tokens generated.", s->m_predicted);
    GAUGE("prompt_seconds_total", "Seconds spent on prompts (images, prefill).", "%.6f", s->m_prompt_s);
    GAUGE("tokens_predicted_seconds_total", "Seconds spent generating.", "%.6f", s->m_predicted_s);
    COUNTER("drafts_total", "Verify passes that checked drafted tokens.", s->m_drafts);
    COUNTER("draft_tokens_total", "Drafted tokens (tree nodes) verified.", s->m_drafted);
    COUNTER("draft_tokens_accepted_total", "Drafted tokens the target accepted.", s->m_accepted);
    vs_batch_stats bs = {0};
    if (s->batch) vs_batch_get_stats(s->batch, &bs);
    COUNTER("verify_blocks_total", "Verify blocks of all requests.", bs.blocks);
    COUNTER("verify_forwards_total", "Target forwards that ran them (merged blocks share one).", bs.forwards);
    COUNTER("verify_blocks_undrafted_total", "Verify blocks that drafted nothing because drafting was paused "
            "(--draft-pause).", bs.paused);
    fprintf(f, "# HELP vlmspec_draft_accepted_at_position_total Verify passes whose first N drafted tokens were "
               "accepted.\n# TYPE vlmspec_draft_accepted_at_position_total counter\n");
    for (int p = 0; p < N_POS; p++)
        fprintf(f, "vlmspec_draft_accepted_at_position_total{position=\"%d\"} %lld\n", p + 1,
                (long long)s->m_accepted_at[p]);
    GAUGE("requests_processing", "Requests running.", "%d", (int)s->n_running);
    GAUGE("requests_deferred", "Requests waiting in the queue.", "%d", (int)s->n_queued);
    GAUGE("slots", "Slots (conversations with their own caches).", "%d", (int)s->o.n_slots);
#undef COUNTER
#undef GAUGE
    pthread_mutex_unlock(&s->mu);
    fclose(f);
    const enum MHD_Result r = send_buf(c, 200, "text/plain; version=0.0.4; charset=utf-8", buf, len);
    free(buf);
    return r;
}

static enum MHD_Result refuse_key(struct MHD_Connection *c) {
    vs_oai_error e;
    vs_oai_fail(&e, 401, "authentication_error", NULL, "invalid or missing API key (Authorization: Bearer KEY)");
    e.code = "invalid_api_key";
    return send_error(c, &e);
}

static enum MHD_Result refuse_too_large(const vs_server *s, struct MHD_Connection *c) {
    char lim[32];
    snprintf(lim, sizeof(lim), "%zu", s->o.max_body);
    return fail(c, 413, "invalid_request_error", NULL, "request body larger than the limit of %s bytes", lim);
}

static bool is_route(const char *url, const char *path) {
    return !strcmp(url, path) || (!strncmp(url, "/v1", 3) && !strcmp(url + 3, path));
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    vs_server *s = cls;
    conn *cn = *con_cls;
    if (!cn) { /* the headers: the body (if any) follows in later calls */
        if (!(cn = vs_calloc(1, sizeof(conn)))) return MHD_NO;
        *con_cls = cn;
        /* a body over the limit is read and dropped, and refused once it is in: an answer sent while the
         * client is still sending makes the socket close with unread data, which resets the connection
         * and can lose the answer. Only a body over four times the limit is refused at once (its client
         * may then see a reset instead of the 413). A wrong key is refused before the body. */
        if (!strcmp(method, "POST") && (is_route(url, "/chat/completions") || is_route(url, "/completions"))) {
            const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
            const unsigned long long len = cl ? strtoull(cl, NULL, 10) : 0;
            if (len > (unsigned long long)s->o.max_body) {
                cn->too_large = true;
                if (len / 4 > (unsigned long long)s->o.max_body) return refuse_too_large(s, c);
            }
            if (!authorised(s, c)) return refuse_key(c);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (!cn->too_large) {
            if (cn->len + *upload_size > s->o.max_body) {
                cn->too_large = true;
            } else {
                if (cn->len + *upload_size + 1 > cn->cap) {
                    const size_t cap = VS_MIN(VS_MAX(cn->cap * 2, cn->len + *upload_size + 1), s->o.max_body + 1);
                    char *b = vs_realloc(cn->body, cap);
                    if (!b) return MHD_NO;
                    cn->body = b, cn->cap = cap;
                }
                memcpy(cn->body + cn->len, upload, *upload_size);
                cn->len += *upload_size;
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    /* the whole request is in */
    const bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    if (!strcmp(method, "OPTIONS")) { /* CORS preflight */
        struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        MHD_add_response_header(r, "Access-Control-Allow-Origin", "*");
        MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        MHD_add_response_header(r, "Access-Control-Allow-Headers", "Authorization, Content-Type");
        const enum MHD_Result ok = MHD_queue_response(c, 204, r);
        MHD_destroy_response(r);
        return ok;
    }
    if (cn->too_large) return refuse_too_large(s, c);
    const bool chat = is_route(url, "/chat/completions"), compl = is_route(url, "/completions");
    const bool models = is_route(url, "/models"), metrics = !strcmp(url, "/metrics");
    const bool health = !strcmp(url, "/health") || !strcmp(url, "/v1/health"), page = !strcmp(url, "/");
    if (!chat && !compl && !models && !metrics && !health && !page)
        return fail(c, 404, "not_found_error", NULL, "no route %s", url);
    if (((chat || compl) && !post) || (!(chat || compl) && !get)) {
        vs_oai_error e;
        vs_oai_fail(&e, 405, "invalid_request_error", NULL, "%s is not allowed on %s", method, url);
        return send_error(c, &e);
    }
    if (page) return send_buf(c, 200, "text/html; charset=utf-8", vs_server_page, vs_server_page_len);
    pthread_mutex_lock(&s->mu);
    const bool ready = s->ready && !s->stopping, failed = s->load_failed, stopping = s->stopping;
    pthread_mutex_unlock(&s->mu);
    const char *why = stopping ? "the server is shutting down" : failed ? "the models failed to load" : "loading the models";
    if (health) {
        if (ready) return send_json(c, 200, "{\"status\":\"ok\"}", 15);
        return fail(c, 503, "unavailable_error", NULL, "%s", why);
    }
    if (!authorised(s, c)) return refuse_key(c);
    if (models) return handle_models(s, c);
    if (metrics) return handle_metrics(s, c);
    if (!ready) return fail(c, 503, "unavailable_error", NULL, "%s", why);
    return handle_completion(s, c, chat ? VS_OAI_CHAT : VS_OAI_COMPLETION, cn);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode t) {
    (void)cls, (void)c, (void)t;
    conn *cn = *con_cls;
    if (!cn) return;
    vs_free(cn->body);
    vs_free(cn);
    *con_cls = NULL;
}

/* ------------------------------------------------------------------------------------------------
 * Life cycle */

void vs_server_opts_default(vs_server_opts *o) {
    memset(o, 0, sizeof(*o));
    o->host = "127.0.0.1";
    o->port = 8080;
    o->n_slots = 1;
    o->queue = 64;
    o->draft_pause = 3;
    o->kv_type = VS_TYPE_F16;
    o->draft_kv_type = VS_TYPE_BF16;
    vs_draft_cfg_default(&o->draft);
    o->sampling = vs_sampler_params_default();
    o->sampling.temperature = 0.8f, o->sampling.top_k = 40, o->sampling.top_p = 0.95f, o->sampling.min_p = 0.05f;
    o->max_body = 32u << 20;
    o->max_images = 8;
    o->max_image_bytes = 8u << 20;
    o->max_connections = 512;
}

vs_server *vs_server_start(const vs_server_opts *o, vs_error *err) {
    if (!o->models.model) return vs_error_set(err, VS_ERR_INVALID, "serve: no model"), NULL;
    if (o->n_slots < 1 || o->queue < 0 || o->draft_pause < 0 || o->max_images < 0 || o->port < 0 || o->port > 65535)
        return vs_error_set(err, VS_ERR_INVALID, "serve: invalid slots, queue, draft pause, image limit or port"), NULL;
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)o->port)};
    if (inet_pton(AF_INET, o->host ? o->host : "127.0.0.1", &addr.sin_addr) != 1)
        return vs_error_set(err, VS_ERR_INVALID, "serve: --host '%s' is not an IPv4 address", o->host), NULL;
    vs_server *s = vs_calloc(1, sizeof(*s));
    if (!s) return vs_error_set(err, VS_ERR_NOMEM, "out of memory"), NULL;
    s->o = *o;
    const char *id = o->alias;
    if (!id) {
        id = strrchr(o->models.model, '/');
        id = id ? id + 1 : o->models.model;
    }
    snprintf(s->model_id, sizeof(s->model_id), "%s", id);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work_cv, NULL);
    pthread_cond_init(&s->ready_cv, NULL);
    s->mhd = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL,
                              on_request, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                              MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_CONNECTION_LIMIT,
                              (unsigned)(o->max_connections > 0 ? o->max_connections : 512),
                              MHD_OPTION_CONNECTION_TIMEOUT, 600u, MHD_OPTION_END);
    if (!s->mhd) {
        vs_error_set(err, VS_ERR_IO, "serve: cannot listen on %s:%d (in use, or not an address of this machine)",
                     o->host, (int)o->port);
        vs_server_stop(s);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : o->port;
    s->workers = vs_calloc((size_t)o->n_slots + 1, sizeof(pthread_t));
    if (!s->workers) {
        vs_error_set(err, VS_ERR_NOMEM, "out of memory");
        vs_server_stop(s);
        return NULL;
    }
    /* workers[0] loads the models; then one worker per slot */
    for (int32_t i = 0; i <= o->n_slots; i++) {
        if (pthread_create(&s->workers[i], NULL, i ? worker_main : loader_main, s)) {
            vs_error_set(err, VS_ERR_NOMEM, "serve: cannot start the inference threads");
            vs_server_stop(s);
            return NULL;
        }
        s->n_workers++;
    }
    return s;
}

int vs_server_poll_ready(vs_server *s, vs_error *err) {
    pthread_mutex_lock(&s->mu);
    const int st = s->ready ? 1 : s->load_failed ? -1 : 0;
    if (s->load_failed && err) *err = s->load_err;
    pthread_mutex_unlock(&s->mu);
    return st;
}

int32_t vs_server_port(const vs_server *s) { return s->port; }

void vs_server_stop(vs_server *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    /* queued requests are answered 503; the running one stops at its next token */
    vs_oai_error e;
    vs_oai_fail(&e, 503, "unavailable_error", NULL, "the server is shutting down");
    while (s->head) {
        job *j = s->head;
        s->head = j->next;
        j->state = JOB_DONE;
        if (!j->started) job_error(j, &e);
        pthread_cond_broadcast(&j->cv);
        job_unref_locked(j);
    }
    s->tail = NULL;
    s->n_queued = 0;
    for (int32_t i = 0; s->slots && i < s->o.n_slots; i++)
        if (s->slots[i].running) {
            s->slots[i].running->cancelled = true;
            vs_session_cancel(s->slots[i].sess);
        }
    pthread_cond_broadcast(&s->work_cv);
    pthread_cond_broadcast(&s->ready_cv);
    pthread_mutex_unlock(&s->mu);
    for (int32_t i = 0; i < s->n_workers; i++) pthread_join(s->workers[i], NULL);
    vs_free(s->workers);
    if (s->mhd) MHD_stop_daemon(s->mhd);
    for (int32_t i = 0; s->slots && i < s->o.n_slots; i++) {
        vs_session_free(s->slots[i].sess);
        vs_free(s->slots[i].key);
    }
    vs_free(s->slots);
    vs_batch_free(s->batch);
    vs_kv_free(s->kv);
    vs_models_free(s->models);
    pthread_cond_destroy(&s->ready_cv);
    pthread_cond_destroy(&s->work_cv);
    pthread_mutex_destroy(&s->mu);
    vs_free(s);
}
