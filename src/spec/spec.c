/* spec: the speculative engine (see spec.h). Sections: prompts and params, the run log, statistics,
 * the engine (prefill, one block: propose -> verify -> accept -> roll back -> commit), timing. */
#include "spec.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------------
 * Prompts and parameters */

int64_t vs_spec_prompt_rows(const vs_spec_prompt *p) {
    int64_t n = 0;
    for (int32_t i = 0; p && i < p->n_seg; i++) n += p->seg[i].n > 0 ? p->seg[i].n : 0;
    return n;
}

vs_status vs_spec_prompt_check(const vs_spec_prompt *p, int32_t n_vocab, vs_error *err) {
    if (!p || p->n_seg < 0 || (p->n_seg > 0 && !p->seg))
        return vs_error_set(err, VS_ERR_INVALID, "prompt: no segments");
    if (p->n_images < 0 || (p->n_images > 0 && !p->images))
        return vs_error_set(err, VS_ERR_INVALID, "prompt: %d images but no feature list", p->n_images);
    int64_t rows = 0;
    for (int32_t i = 0; i < p->n_seg; i++) {
        const vs_spec_segment *s = &p->seg[i];
        if (s->n < 0) return vs_error_set(err, VS_ERR_INVALID, "prompt: segment %d has %d rows", i, s->n);
        if (s->kind == VS_SPEC_SEG_TEXT) {
            if (s->n > 0 && !s->tokens)
                return vs_error_set(err, VS_ERR_INVALID, "prompt: text segment %d has no tokens", i);
            for (int32_t j = 0; j < s->n; j++)
                if (s->tokens[j] < 0 || s->tokens[j] >= n_vocab)
                    return vs_error_set(err, VS_ERR_INVALID,
                                        "prompt: segment %d: token %d is outside the vocabulary [0, %d)", i,
                                        s->tokens[j], n_vocab);
        } else if (s->kind == VS_SPEC_SEG_IMAGE) {
            if (s->n > 0 && !s->embd)
                return vs_error_set(err, VS_ERR_INVALID, "prompt: image segment %d has no embedding rows", i);
            if (s->image < -1 || s->image >= p->n_images)
                return vs_error_set(err, VS_ERR_INVALID, "prompt: image segment %d names image %d of %d", i,
                                    s->image, p->n_images);
            if (s->image >= 0 && !p->images[s->image])
                return vs_error_set(err, VS_ERR_INVALID, "prompt: image %d has no features", s->image);
            if (s->image_id < 0)
                return vs_error_set(err, VS_ERR_INVALID, "prompt: image segment %d has identity %d (< 0)", i,
                                    s->image_id);
        } else {
            return vs_error_set(err, VS_ERR_INVALID, "prompt: segment %d has unknown kind %d", i,
                                (int)s->kind);
        }
        rows += s->n;
    }
    if (rows < 1) return vs_error_set(err, VS_ERR_INVALID, "prompt: empty (no rows)");
    if (rows > INT32_MAX / 2) return vs_error_set(err, VS_ERR_RANGE, "prompt: %lld rows", (long long)rows);
    return VS_OK;
}

int64_t vs_spec_key_image(int32_t image_id, int64_t row) {
    if (image_id <= 0 || row < 0 || row > (int64_t)UINT32_MAX) return VS_SPEC_KEY_NONE;
    return -1 - (((int64_t)image_id << 32) | row);
}

int64_t vs_spec_segment_key(const vs_spec_segment *seg, int64_t row) {
    if (seg->kind == VS_SPEC_SEG_TEXT) return seg->tokens[row];
    return vs_spec_key_image(seg->image_id, row);
}

int32_t vs_spec_keys_common(const int64_t *a, const int64_t *b, int32_t n) {
    int32_t i = 0;
    while (i < n && a[i] != VS_SPEC_KEY_NONE && a[i] == b[i]) i++;
    return i;
}

vs_spec_params vs_spec_params_default(void) {
    vs_spec_params p;
    memset(&p, 0, sizeof(p));
    p.gamma = 0;
    p.n_predict = 128;
    p.sampling = vs_sampler_params_default();
    return p;
}

void vs_spec_drafter_free(vs_spec_drafter *d) {
    if (d && d->vt && d->vt->free) d->vt->free(d);
}

const char *vs_spec_stop_name(vs_spec_stop s) {
    switch (s) {
    case VS_SPEC_STOP_NONE: return "none";
    case VS_SPEC_STOP_EOS: return "eos";
    case VS_SPEC_STOP_LIMIT: return "limit";
    case VS_SPEC_STOP_CONTEXT: return "context";
    case VS_SPEC_STOP_CALLBACK: return "callback";
    }
    return "?";
}

/* ------------------------------------------------------------------------------------------------
 * Run log */

void vs_spec_log_init(vs_spec_log *log) { memset(log, 0, sizeof(*log)); }

void vs_spec_log_free(vs_spec_log *log) {
    vs_free(log->tokens);
    vs_free(log->blocks);
    vs_spec_log_init(log);
}

void vs_spec_log_reset(vs_spec_log *log) {
    int32_t *t = log->tokens;
    vs_spec_block *b = log->blocks;
    int32_t ct = log->cap_tokens, cb = log->cap_blocks;
    vs_spec_log_init(log);
    log->tokens = t, log->blocks = b, log->cap_tokens = ct, log->cap_blocks = cb;
}

vs_status vs_spec_log_add_block(vs_spec_log *log, const vs_spec_block *b, vs_error *err) {
    if (log->n_blocks == log->cap_blocks) {
        int32_t cap = log->cap_blocks ? log->cap_blocks * 2 : 64;
        vs_spec_block *nb = vs_realloc(log->blocks, sizeof(*nb) * (size_t)cap);
        if (!nb) return vs_error_set(err, VS_ERR_NOMEM, "spec log: out of memory");
        log->blocks = nb, log->cap_blocks = cap;
    }
    log->blocks[log->n_blocks++] = *b;
    return VS_OK;
}

vs_status vs_spec_log_add_tokens(vs_spec_log *log, const int32_t *t, int32_t n, vs_error *err) {
    if (n <= 0) return VS_OK;
    if (log->n_tokens + n > log->cap_tokens) {
        int32_t cap = log->cap_tokens ? log->cap_tokens : 64;
        while (cap < log->n_tokens + n) cap *= 2;
        int32_t *nt = vs_realloc(log->tokens, sizeof(*nt) * (size_t)cap);
        if (!nt) return vs_error_set(err, VS_ERR_NOMEM, "spec log: out of memory");
        log->tokens = nt, log->cap_tokens = cap;
    }
    memcpy(log->tokens + log->n_tokens, t, sizeof(*t) * (size_t)n);
    log->n_tokens += n;
    return VS_OK;
}

/* ------------------------------------------------------------------------------------------------
 * Statistics (pure functions of logs) */

static double ratio(double a, double b) { return b > 0 ? a / b : 0; }

void vs_spec_stats_compute(const vs_spec_log *log, const vs_spec_log *baseline, vs_spec_stats *o) {
    memset(o, 0, sizeof(*o));
    const int G = VS_MIN(VS_MAX(log->gamma, 0), VS_SPEC_MAX_GAMMA);
    o->gamma = log->gamma;
    o->n_blocks = log->n_blocks;
    o->n_tokens = log->n_tokens;
    int64_t steps = 0, n_eval = 0, n_full = 0;
    int32_t max_depth = 0;
    double t_full = 0;
    for (int32_t i = 0; i < log->n_blocks; i++) {
        const vs_spec_block *b = &log->blocks[i];
        o->n_drafted += b->n_draft;
        o->n_accepted += b->n_accept;
        n_eval += b->n_eval;
        steps += b->n_steps;
        o->t_draft += b->t_draft;
        o->t_verify += b->t_verify;
        o->hist[VS_MIN(VS_MAX(b->n_accept, 0), VS_SPEC_MAX_GAMMA)]++;
        /* position n (1-based) was decided in this block when n <= n_eval; accepted when n <= n_accept */
        for (int32_t n = 1; n <= VS_MIN(b->n_eval, VS_SPEC_MAX_GAMMA); n++) {
            o->n_alpha_den[n - 1]++;
            if (n <= b->n_accept) o->n_alpha_num[n - 1]++;
        }
        const int32_t depth = b->n_depth > 0 ? b->n_depth : b->n_draft;
        max_depth = VS_MAX(max_depth, depth);
        if (log->gamma > 0 && depth == log->gamma) n_full++, t_full += b->t_verify;
    }
    for (int n = 0; n < VS_SPEC_MAX_GAMMA; n++)
        o->n_alpha[n] = o->n_alpha_den[n] > 0 ? (double)o->n_alpha_num[n] / (double)o->n_alpha_den[n] : -1;
    (void)G;
    o->tau = ratio(log->n_tokens, log->n_blocks);
    o->accept_rate = ratio((double)o->n_accepted, (double)n_eval);
    o->draft_accept_rate = ratio((double)o->n_accepted, (double)o->n_drafted);
    o->nodes_per_block = ratio((double)o->n_drafted, log->n_blocks);
    o->max_depth = max_depth;
    o->t_vision = log->t_vision;
    o->t_prefill = log->t_prefill;
    o->t_draft_prefill = log->t_draft_prefill;
    o->t_decode = log->t_decode;
    o->t_total = log->t_total;
    o->tok_s_decode = ratio(log->n_tokens, log->t_decode);
    o->tok_s_total = ratio(log->n_tokens, log->t_total);
    o->tq = ratio(o->t_draft, (double)steps);
    o->tp = log->tp_step;
    if (o->tp <= 0 && baseline && baseline->n_blocks > 0) {
        /* a target-only run: every block is one single-row step */
        double t = 0;
        for (int32_t i = 0; i < baseline->n_blocks; i++) t += baseline->blocks[i].t_verify;
        o->tp = t / baseline->n_blocks;
    }
    o->tp_verify = log->tp_verify > 0 ? log->tp_verify : ratio(t_full, (double)n_full);
    if (o->tq > 0 && o->tp > 0) o->est_tabed = o->tau / (log->gamma * o->tq / o->tp + 1);
    if (o->tq > 0 && o->tp > 0 && o->tp_verify > 0)
        o->est_tabed_cpu = o->tau / (log->gamma * o->tq / o->tp + o->tp_verify / o->tp);
    if (baseline) {
        o->has_baseline = true;
        o->base_tok_s_decode = ratio(baseline->n_tokens, baseline->t_decode);
        o->base_tok_s_total = ratio(baseline->n_tokens, baseline->t_total);
        double base_dec = ratio(baseline->t_decode, baseline->n_tokens),
               dec = ratio(log->t_decode, log->n_tokens);
        double base_tot = ratio(baseline->t_total, baseline->n_tokens),
               tot = ratio(log->t_total, log->n_tokens);
        o->speedup_decode = ratio(base_dec, dec);
        o->speedup_total = ratio(base_tot, tot);
    }
}

void vs_spec_stats_print(const vs_spec_stats *s, FILE *f) {
    if (s->has_baseline)
        fprintf(f,
                "measured speedup %.3fx decode-only, %.3fx end-to-end (target-only %.2f tokens/s decode, %.2f "
                "end-to-end)\n",
                s->speedup_decode, s->speedup_total, s->base_tok_s_decode, s->base_tok_s_total);
    fprintf(f, "tokens %d in %d target passes, gamma %d: tau %.3f; %lld of %lld drafted tokens accepted (%.3f), "
               "%.3f of the positions the target checked\n",
            s->n_tokens, s->n_blocks, s->gamma, s->tau, (long long)s->n_accepted, (long long)s->n_drafted,
            s->draft_accept_rate, s->accept_rate);
    if (s->gamma > 0 && s->nodes_per_block > s->max_depth)
        fprintf(f, "tree: %.2f nodes drafted per block, deepest path %d\n", s->nodes_per_block, s->max_depth);
    if (s->gamma > 0) {
        fprintf(f, "n-alpha:");
        for (int n = 0; n < VS_MIN(s->gamma, VS_SPEC_MAX_GAMMA); n++) {
            if (s->n_alpha[n] < 0)
                fprintf(f, " %d:-", n + 1);
            else
                fprintf(f, " %d:%.3f", n + 1, s->n_alpha[n]);
        }
        fprintf(f, "\naccepted-length histogram:");
        for (int n = 0; n <= VS_MIN(s->gamma, VS_SPEC_MAX_GAMMA); n++)
            fprintf(f, " %d:%lld", n, (long long)s->hist[n]);
        fprintf(f, "\n");
    }
    fprintf(f,
            "times (s): vision %.3f, prefill %.3f (draft %.3f), drafting %.3f, verification %.3f, "
            "decode %.3f, total %.3f\n",
            s->t_vision, s->t_prefill, s->t_draft_prefill, s->t_draft, s->t_verify, s->t_decode, s->t_total);
    fprintf(f, "speed: %.2f tokens/s decode, %.2f tokens/s end-to-end\n", s->tok_s_decode, s->tok_s_total);
    if (s->gamma > 0)
        fprintf(f, "Tq %.3f ms (draft step), Tp %.3f ms (target step), Tp(gamma+1) %.3f ms (verify pass)\n",
                s->tq * 1e3, s->tp * 1e3, s->tp_verify * 1e3);
    if (s->gamma > 0 && s->est_tabed > 0)
        fprintf(f, "estimated speedup (TABED eq. 1): %.3f; with verification cost: %.3f\n", s->est_tabed,
                s->est_tabed_cpu);
}

void vs_spec_stats_json(const vs_spec_stats *s, vs_json_writer *w) {
    const int G = VS_MIN(VS_MAX(s->gamma, 0), VS_SPEC_MAX_GAMMA);
    vs_json_obj_begin(w);
    vs_json_kv_int(w, "gamma", s->gamma);
    vs_json_kv_int(w, "tokens", s->n_tokens);
    vs_json_kv_int(w, "blocks", s->n_blocks);
    vs_json_kv_int(w, "drafted", s->n_drafted);
    vs_json_kv_int(w, "accepted", s->n_accepted);
    vs_json_kv_num(w, "tau", s->tau);
    vs_json_kv_num(w, "acceptance", s->accept_rate);
    vs_json_kv_num(w, "acceptance_of_drafted", s->draft_accept_rate);
    vs_json_kv_num(w, "nodes_per_block", s->nodes_per_block);
    vs_json_kv_int(w, "max_depth", s->max_depth);
    vs_json_key(w, "n_alpha");
    vs_json_arr_begin(w);
    for (int n = 0; n < G; n++) {
        if (s->n_alpha[n] < 0)
            vs_json_null(w);
        else
            vs_json_num(w, s->n_alpha[n]);
    }
    vs_json_arr_end(w);
    vs_json_key(w, "accepted_hist");
    vs_json_arr_begin(w);
    for (int n = 0; n <= G; n++) vs_json_int(w, s->hist[n]);
    vs_json_arr_end(w);
    vs_json_kv_num(w, "t_vision", s->t_vision);
    vs_json_kv_num(w, "t_prefill", s->t_prefill);
    vs_json_kv_num(w, "t_draft_prefill", s->t_draft_prefill);
    vs_json_kv_num(w, "t_draft", s->t_draft);
    vs_json_kv_num(w, "t_verify", s->t_verify);
    vs_json_kv_num(w, "t_decode", s->t_decode);
    vs_json_kv_num(w, "t_total", s->t_total);
    vs_json_kv_num(w, "tok_s_decode", s->tok_s_decode);
    vs_json_kv_num(w, "tok_s_total", s->tok_s_total);
    vs_json_kv_num(w, "tq", s->tq);
    vs_json_kv_num(w, "tp", s->tp);
    vs_json_kv_num(w, "tp_verify", s->tp_verify);
    vs_json_kv_num(w, "est_tabed", s->est_tabed);
    vs_json_kv_num(w, "est_tabed_cpu", s->est_tabed_cpu);
    if (s->has_baseline) {
        vs_json_kv_num(w, "base_tok_s_decode", s->base_tok_s_decode);
        vs_json_kv_num(w, "base_tok_s_total", s->base_tok_s_total);
        vs_json_kv_num(w, "speedup_decode", s->speedup_decode);
        vs_json_kv_num(w, "speedup_total", s->speedup_total);
    }
    vs_json_obj_end(w);
}

/* ------------------------------------------------------------------------------------------------
 * The engine */

struct vs_spec {
    vs_lm *lm;
    vs_kv *kv;
    bool own_kv;
    int32_t seq; /* the engine's sequence of kv */
    vs_spec_verify_fn verify;
    void *verify_ctx;
    int32_t (*draft_limit)(void *ctx);
    void *draft_limit_ctx;
    vs_threadpool *tp;
    const vs_tokenizer *tok;
    int32_t eog[32], n_eog; /* the tokenizer's end-of-generation tokens, for --ignore-eos */
    bool eog_more;          /* more than 32 of them: ban_eog asks the tokenizer for every token */
    int32_t n_vocab, n_embd, n_ctx, n_batch;
    int64_t *hist;       /* [n_ctx] key of each cached row (vs_spec_segment_key; a token id after the
                          * prompt) */
    vs_sampler *sampler; /* the target's sampler (acceptance tests, corrections, bonus tokens) */

    /* per-request scratch, grown on demand for cap nodes */
    int32_t cap;
    vs_spec_proposal prop;
    vs_lm_row *rows;      /* [cap + 1] */
    int32_t *anc;         /* [(cap + 1) * (cap + 1)] ancestor lists (trees) */
    float *logits;        /* [cap + 1][n_vocab] */
    float *p;             /* [n_vocab] target distribution of the current row */
    float *resid;         /* [n_vocab] residual max(0, p - q) */
    float *qw;            /* [n_vocab] tree walk: the siblings' q as siblings are rejected */
    int32_t *first_child; /* [cap + 1] tree walk: first child of node i - 1 (0 = pending row), -1 none */
    int32_t *next_sib;    /* [cap] next sibling of node i, -1 none */
    int32_t *acc_nodes;   /* [cap] */
    int32_t *acc_tokens;  /* [cap + 1] accepted tokens + the next one (emission buffer) */
    int32_t *slots;       /* [cap] cache slots of the accepted path */
    float *hidden;        /* [max(cap + 1, n_batch)][n_embd] when a drafter wants features */
    float **layer_hidden; /* [n_layers] of the same size */
    int32_t n_layer_buf, hidden_rows;
    int32_t *feat_tokens; /* [max(cap + 1, n_batch)] */
    /* the attention received by each row in the prefill (want_attn_recv): fixed-point sums, the floats */
    _Atomic int64_t *attn_fx; /* [n_ctx] */
    float *attn_recv;         /* [n_ctx] */
    int32_t attn_heads;
    int32_t attn_n; /* rows of attn_recv the delivery in progress hands over (0: none) */
};

vs_spec *vs_spec_new(vs_lm *target, const vs_spec_config *cfg, vs_error *err) {
    if (!target) {
        vs_error_set(err, VS_ERR_INVALID, "spec: no target model");
        return NULL;
    }
    vs_spec_config def = {0};
    if (!cfg) cfg = &def;
    const vs_lm_config *c = vs_lm_cfg(target);
    vs_spec *s = vs_calloc(1, sizeof(*s));
    if (!s) {
        vs_error_set(err, VS_ERR_NOMEM, "spec: out of memory");
        return NULL;
    }
    s->lm = target;
    s->tp = cfg->tp;
    s->tok = cfg->tok;
    for (int32_t t = 0; s->tok && t < vs_tokenizer_n_vocab(s->tok); t++)
        if (vs_tokenizer_is_eog(s->tok, t)) {
            if (s->n_eog < (int32_t)VS_ARRAY_LEN(s->eog)) s->eog[s->n_eog++] = t;
            else s->eog_more = true;
        }
    s->n_vocab = c->n_vocab;
    s->n_embd = c->n_embd;
    s->n_ctx = cfg->kv ? vs_kv_n_ctx(cfg->kv) : cfg->n_ctx > 0 ? cfg->n_ctx : c->n_ctx_train;
    s->seq = cfg->kv ? cfg->seq : 0;
    s->verify = cfg->verify;
    s->verify_ctx = cfg->verify_ctx;
    s->draft_limit = cfg->draft_limit;
    s->draft_limit_ctx = cfg->draft_limit_ctx;
    if (cfg->kv && (cfg->seq < 0 || cfg->seq >= vs_kv_n_seq(cfg->kv) || vs_kv_n_layer(cfg->kv) != c->n_layer ||
                    vs_kv_n_head_kv(cfg->kv) != c->n_head_kv || vs_kv_head_dim(cfg->kv) != c->head_dim)) {
        vs_error_set(err, VS_ERR_INVALID, "spec: the shared cache does not fit the target (shape or sequence %d)",
                     (int)cfg->seq);
        vs_free(s);
        return NULL;
    }
    s->n_batch = cfg->n_batch > 0 ? cfg->n_batch : 512;
    vs_type kt = cfg->kv_type == VS_TYPE_F16 ? VS_TYPE_F16 : VS_TYPE_F32;
    if (!cfg->kv && cfg->kv_type != VS_TYPE_F16 && cfg->kv_type != VS_TYPE_F32) {
        vs_error_set(err, VS_ERR_INVALID, "spec: KV cache type must be F32 or F16");
        vs_free(s);
        return NULL;
    }
    if (s->tok && vs_tokenizer_n_vocab(s->tok) > s->n_vocab) {
        vs_error_set(err, VS_ERR_INVALID, "spec: tokenizer has %d tokens but the target %s has %d",
                     vs_tokenizer_n_vocab(s->tok), vs_gguf_name(vs_lm_gguf(target)), s->n_vocab);
        vs_free(s);
        return NULL;
    }
    s->own_kv = !cfg->kv;
    s->kv = cfg->kv ? cfg->kv : vs_lm_kv_new(target, 1, s->n_ctx, kt, err);
    s->hist = vs_malloc(sizeof(int64_t) * (size_t)s->n_ctx);
    vs_sampler_params sp = vs_sampler_params_default();
    s->sampler = vs_sampler_new(s->n_vocab, &sp, err);
    s->p = vs_malloc(sizeof(float) * (size_t)s->n_vocab);
    s->resid = vs_malloc(sizeof(float) * (size_t)s->n_vocab);
    s->qw = vs_malloc(sizeof(float) * (size_t)s->n_vocab);
    if (!s->kv || !s->hist || !s->sampler || !s->p || !s->resid || !s->qw) {
        if (s->kv && s->sampler) vs_error_set(err, VS_ERR_NOMEM, "spec: out of memory");
        vs_spec_free(s);
        return NULL;
    }
    return s;
}

static void free_scratch(vs_spec *s) {
    vs_free(s->prop.token), vs_free(s->prop.parent), vs_free(s->prop.depth), vs_free(s->prop.q_row);
    vs_free(s->prop.q);
    vs_free(s->rows), vs_free(s->anc), vs_free(s->logits), vs_free(s->acc_nodes), vs_free(s->acc_tokens);
    vs_free(s->slots), vs_free(s->first_child), vs_free(s->next_sib);
    memset(&s->prop, 0, sizeof(s->prop));
    s->rows = NULL, s->anc = NULL, s->logits = NULL, s->acc_nodes = NULL, s->acc_tokens = NULL,
    s->slots = NULL, s->first_child = NULL, s->next_sib = NULL;
    s->cap = 0;
}

static void free_hidden(vs_spec *s) {
    vs_free(s->hidden);
    for (int32_t i = 0; i < s->n_layer_buf; i++) vs_free(s->layer_hidden[i]);
    vs_free(s->layer_hidden);
    vs_free(s->feat_tokens);
    s->hidden = NULL, s->layer_hidden = NULL, s->feat_tokens = NULL;
    s->n_layer_buf = 0, s->hidden_rows = 0;
}

void vs_spec_free(vs_spec *s) {
    if (!s) return;
    free_scratch(s);
    free_hidden(s);
    vs_free((void *)s->attn_fx), vs_free(s->attn_recv);
    if (s->own_kv) vs_kv_free(s->kv);
    vs_sampler_free(s->sampler);
    vs_free(s->hist), vs_free(s->p), vs_free(s->resid), vs_free(s->qw);
    vs_free(s);
}

vs_kv *vs_spec_kv(vs_spec *s) { return s->kv; }
int32_t vs_spec_n_ctx(const vs_spec *s) { return s->n_ctx; }

static vs_status ensure_scratch(vs_spec *s, int32_t cap, vs_error *err) {
    if (cap < 1) cap = 1;
    if (cap <= s->cap) return VS_OK;
    free_scratch(s);
    const size_t V = (size_t)s->n_vocab, n1 = (size_t)cap + 1;
    s->prop.token = vs_malloc(sizeof(int32_t) * (size_t)cap);
    s->prop.parent = vs_malloc(sizeof(int32_t) * (size_t)cap);
    s->prop.depth = vs_malloc(sizeof(int32_t) * (size_t)cap);
    s->prop.q_row = vs_malloc(sizeof(int32_t) * (size_t)cap);
    s->prop.q = vs_malloc(sizeof(float) * (size_t)cap * V);
    s->rows = vs_calloc(n1, sizeof(vs_lm_row));
    s->anc = vs_malloc(sizeof(int32_t) * n1 * n1);
    s->logits = vs_malloc(sizeof(float) * n1 * V);
    s->acc_nodes = vs_malloc(sizeof(int32_t) * (size_t)cap);
    s->acc_tokens = vs_malloc(sizeof(int32_t) * n1);
    s->slots = vs_malloc(sizeof(int32_t) * (size_t)cap);
    s->first_child = vs_malloc(sizeof(int32_t) * n1);
    s->next_sib = vs_malloc(sizeof(int32_t) * (size_t)cap);
    if (!s->prop.token || !s->prop.parent || !s->prop.depth || !s->prop.q_row || !s->prop.q || !s->rows ||
        !s->anc || !s->logits || !s->acc_nodes || !s->acc_tokens || !s->slots || !s->first_child ||
        !s->next_sib) {
        free_scratch(s);
        return vs_error_set(err, VS_ERR_NOMEM, "spec: out of memory for %d draft nodes", cap);
    }
    s->cap = cap;
    s->prop.cap = cap;
    s->prop.n_vocab = s->n_vocab;
    return VS_OK;
}

static vs_status ensure_hidden(vs_spec *s, const vs_spec_drafter *d, int32_t rows, vs_error *err) {
    int32_t nl = d->n_want_layers;
    if (rows <= s->hidden_rows && nl == s->n_layer_buf) return VS_OK;
    free_hidden(s);
    size_t bytes = sizeof(float) * (size_t)rows * (size_t)s->n_embd;
    s->hidden = vs_malloc(bytes);
    s->feat_tokens = vs_malloc(sizeof(int32_t) * (size_t)rows);
    s->layer_hidden = nl > 0 ? vs_calloc((size_t)nl, sizeof(float *)) : NULL;
    bool ok = s->hidden && s->feat_tokens && (nl == 0 || s->layer_hidden);
    if (ok) {
        s->n_layer_buf = nl;
        for (int32_t i = 0; i < nl; i++) ok = ok && (s->layer_hidden[i] = vs_malloc(bytes)) != NULL;
    }
    if (!ok) {
        free_hidden(s);
        return vs_error_set(err, VS_ERR_NOMEM, "spec: out of memory for target features");
    }
    s->hidden_rows = rows;
    return VS_OK;
}

static bool wants_features(const vs_spec_drafter *d) { return d && (d->want_hidden || d->n_want_layers > 0); }

/* Output spec of a target forward: logits (when logits != NULL) and the drafter's features. */
static vs_lm_out make_out(vs_spec *s, const vs_spec_drafter *d, float *logits) {
    vs_lm_out o;
    memset(&o, 0, sizeof(o));
    o.logits = logits;
    o.attn_layer = -1;
    if (wants_features(d)) {
        o.hidden = s->hidden;
        o.n_layer_out = d->n_want_layers;
        o.layer_ids = d->want_layers;
        o.layer_hidden = s->layer_hidden;
    }
    return o;
}

/* Fixed point of the attention sums: 2^32 per unit of probability, so a key's sum stays below 2^63 for
 * up to 2^31 query heads per prefill chunk. Integer addition commutes exactly, so the sums do not depend
 * on the pool's schedule. */
#define ATTN_FX 4294967296.0

/* vs_lm_attn_fn of the prefill: adds the row's last-layer probabilities to the keys' sums. */
static void attn_recv_cb(void *ctx, int layer, int row, int head, const float *p, int n_keys) {
    vs_spec *s = ctx;
    (void)layer, (void)row, (void)head;
    for (int k = 0; k < n_keys && k < s->n_ctx; k++)
        if (p[k] > 0) atomic_fetch_add_explicit(&s->attn_fx[k], (int64_t)llround(p[k] * ATTN_FX), memory_order_relaxed);
}

/* Sets up out to collect the attention received (drafters with want_attn_recv); false: not wanted. */
static bool attn_recv_begin(vs_spec *s, const vs_spec_drafter *d, vs_lm_out *out, vs_error *err, vs_status *st) {
    *st = VS_OK;
    if (!d || !d->want_attn_recv) return false;
    if (!s->attn_fx || !s->attn_recv) {
        vs_free((void *)s->attn_fx), vs_free(s->attn_recv);
        s->attn_fx = vs_calloc((size_t)s->n_ctx, sizeof(*s->attn_fx));
        s->attn_recv = vs_malloc(sizeof(float) * (size_t)s->n_ctx);
        if (!s->attn_fx || !s->attn_recv) {
            vs_free((void *)s->attn_fx), vs_free(s->attn_recv);
            s->attn_fx = NULL, s->attn_recv = NULL;
            *st = vs_error_set(err, VS_ERR_NOMEM, "spec: out of memory for attention scores");
            return false;
        }
    }
    for (int32_t k = 0; k < s->n_ctx; k++) atomic_store_explicit(&s->attn_fx[k], 0, memory_order_relaxed);
    s->attn_heads = vs_lm_cfg(s->lm)->n_head;
    out->attn_fn = attn_recv_cb;
    out->attn_ctx = s;
    out->attn_layer = vs_lm_cfg(s->lm)->n_layer - 1;
    return true;
}

/* The sums of keys [0, n) as averages over heads. */
static void attn_recv_end(vs_spec *s, int32_t n) {
    const double scale = 1.0 / (ATTN_FX * (double)s->attn_heads);
    for (int32_t k = 0; k < n; k++)
        s->attn_recv[k] = (float)((double)atomic_load_explicit(&s->attn_fx[k], memory_order_relaxed) * scale);
}

/* Hands the drafter the features of n rows evaluated by the last forward, starting at batch row r0. */
static vs_status deliver_features(vs_spec *s, vs_spec_drafter *d, int32_t pos0, int32_t r0, int32_t n,
                                  const int32_t *tokens, vs_error *err) {
    if (!wants_features(d) || n <= 0 || !d->vt->target_rows) return VS_OK;
    const float *lh[64];
    int32_t nl = VS_MIN(d->n_want_layers, 64);
    const size_t off = (size_t)r0 * (size_t)s->n_embd;
    for (int32_t i = 0; i < nl; i++) lh[i] = s->layer_hidden[i] + off;
    vs_spec_features f = {.pos0 = pos0,
                          .n = n,
                          .n_embd = s->n_embd,
                          .tokens = tokens,
                          .hidden = s->hidden + off,
                          .n_layer_out = nl,
                          .layer_hidden = lh,
                          .attn_recv = s->attn_n > 0 ? s->attn_recv : NULL,
                          .n_attn = s->attn_n};
    return d->vt->target_rows(d, &f, err);
}

/* Row i of the flattened prompt. */
typedef struct prompt_cursor {
    const vs_spec_prompt *p;
    int32_t seg, off;
} prompt_cursor;

/* The next prompt row into r, its key into *key. */
static void prompt_row(prompt_cursor *c, vs_lm_row *r, int64_t *key, int32_t n_embd) {
    while (c->off >= c->p->seg[c->seg].n) c->seg++, c->off = 0;
    const vs_spec_segment *sg = &c->p->seg[c->seg];
    memset(r, 0, sizeof(*r));
    *key = vs_spec_segment_key(sg, c->off);
    if (sg->kind == VS_SPEC_SEG_TEXT)
        r->token = sg->tokens[c->off];
    else
        r->embd = sg->embd + (size_t)c->off * (size_t)n_embd, r->token = -1;
    c->off++;
}

static bool is_eog(const vs_spec *s, const vs_spec_params *pr, int32_t t) {
    return !pr->ignore_eos && s->tok && vs_tokenizer_is_eog(s->tok, t);
}

/* ignore_eos as llama.cpp's --ignore-eos: the target never picks an end-of-generation token (its logit is
 * -inf in every verified row), so the text goes on; a drafted one has probability 0 and is rejected like
 * any other mismatch, so the output stays the target's own. */
static void ban_eog(const vs_spec *s, const vs_spec_params *pr, float *logits, int32_t n_rows) {
    if (!pr->ignore_eos) return;
    for (int32_t r = 0; r < n_rows; r++) {
        float *lg = logits + (size_t)r * (size_t)s->n_vocab;
        if (s->eog_more) {
            for (int32_t t = 0; t < s->n_vocab && t < vs_tokenizer_n_vocab(s->tok); t++)
                if (vs_tokenizer_is_eog(s->tok, t)) lg[t] = -INFINITY;
        } else {
            for (int32_t i = 0; i < s->n_eog; i++) lg[s->eog[i]] = -INFINITY;
        }
    }
}

/* Checks a proposal against the limits (node count, token range, parents before children, depth =
 * parent's + 1 <= max_depth, q rows in range, siblings sharing one q row and distinct tokens) and builds
 * the child lists (first_child, next_sib: children in index order = drawing order). */
static vs_status check_proposal(vs_spec *s, const vs_spec_drafter *d, const vs_spec_proposal *pr,
                                const vs_spec_limits *lim, bool *is_chain, vs_error *err) {
    const char *name = d->vt->name ? d->vt->name : "drafter";
    if (pr->n < 0 || pr->n > lim->max_nodes)
        return vs_error_set(err, VS_ERR_INVALID, "%s: proposed %d nodes, limit %d", name, pr->n,
                            lim->max_nodes);
    bool chain = true;
    for (int32_t i = 0; i < pr->n; i++) {
        int32_t par = pr->parent[i];
        if (pr->token[i] < 0 || pr->token[i] >= s->n_vocab)
            return vs_error_set(err, VS_ERR_INVALID, "%s: node %d: token %d outside the vocabulary [0, %d)",
                                name, i, pr->token[i], s->n_vocab);
        if (par < -1 || par >= i)
            return vs_error_set(err, VS_ERR_INVALID, "%s: node %d: parent %d must precede it", name, i, par);
        int32_t want_depth = par < 0 ? 1 : pr->depth[par] + 1;
        if (pr->depth[i] != want_depth || pr->depth[i] > lim->max_depth)
            return vs_error_set(err, VS_ERR_INVALID, "%s: node %d: depth %d (parent's + 1 = %d, limit %d)",
                                name, i, pr->depth[i], want_depth, lim->max_depth);
        if (pr->q_row[i] < -1 || pr->q_row[i] >= pr->cap)
            return vs_error_set(err, VS_ERR_INVALID, "%s: node %d: q row %d outside [-1, %d)", name, i,
                                pr->q_row[i], pr->cap);
        if (par != i - 1) chain = false;
    }
    *is_chain = chain;
    /* child lists, built backwards so each list is in index order */
    for (int32_t i = 0; i <= pr->n; i++) s->first_child[i] = -1;
    for (int32_t i = pr->n - 1; i >= 0; i--) {
        s->next_sib[i] = s->first_child[pr->parent[i] + 1];
        s->first_child[pr->parent[i] + 1] = i;
    }
    for (int32_t i = 0; i < pr->n; i++)
        for (int32_t j = s->next_sib[i]; j >= 0; j = s->next_sib[j]) {
            if (pr->q_row[j] != pr->q_row[i])
                return vs_error_set(err, VS_ERR_INVALID,
                                    "%s: nodes %d and %d are siblings with different q rows (%d, %d): "
                                    "siblings must be drawn from one distribution",
                                    name, i, j, pr->q_row[i], pr->q_row[j]);
            if (pr->token[j] == pr->token[i])
                return vs_error_set(err, VS_ERR_INVALID, "%s: nodes %d and %d are siblings with one token %d",
                                    name, i, j, pr->token[i]);
        }
    return VS_OK;
}

/* Result of walking a verified proposal. */
typedef struct walk_result {
    int32_t n_accept;  /* accepted nodes (path in acc_nodes) */
    int32_t n_eval;    /* decided drafted positions */
    int32_t next;      /* correction / bonus token, -1 when an accepted EOS ended the request */
    bool eos;          /* generation ends with this block at an EOS (accepted or next) */
    bool eos_accepted; /* ... at an accepted draft (no correction / bonus token then) */
} walk_result;

/* Target distribution of verified row r into s->p. */
static vs_status target_probs(vs_spec *s, int32_t r, vs_error *err) {
    return vs_sampler_probs(s->sampler, s->logits + (size_t)r * (size_t)s->n_vocab, s->p, err);
}

/* Chain walk (docs/algorithms.md, 'Chain speculative decoding'). Row 0 of the verified batch is the
 * pending row; row i + 1 is node i; logits row r is the target's prediction after row r. */
static vs_status walk_chain(vs_spec *s, const vs_spec_drafter *d, const vs_spec_params *pr, walk_result *w,
                            vs_error *err) {
    const vs_spec_proposal *prop = &s->prop;
    const size_t V = (size_t)s->n_vocab;
    const bool greedy = pr->sampling.temperature == 0;
    memset(w, 0, sizeof(*w));
    w->next = -1;
    for (int32_t i = 0; i < prop->n; i++) {
        const int32_t t = prop->token[i];
        bool accept;
        if (greedy) {
            int32_t best = vs_argmax(s->logits + (size_t)i * V, (int64_t)V);
            accept = t == best;
            if (!accept) w->next = best;
        } else {
            vs_status st = target_probs(s, i, err);
            if (st) return st;
            const float *q = prop->q_row[i] >= 0 ? prop->q + (size_t)prop->q_row[i] * V : NULL;
            const double qd = q ? q[t] : 1.0, pd = s->p[t];
            if (!(qd > 0))
                return vs_error_set(err, VS_ERR_INVALID,
                                    "%s: drafted token %d with q = %g (q must be the "
                                    "distribution it was drawn from)",
                                    d->vt->name, t, qd);
            /* accept with probability min(1, p/q): u in [0, 1) so u * q < p */
            accept = vs_sampler_uniform(s->sampler) * qd < pd;
            if (!accept) {
                /* correction from norm(max(0, p - q)); q one-hot for a deterministic draft */
                double sum = 0;
                if (pr->debug_break_residual) {
                    memcpy(s->resid, s->p, V * sizeof(float)); /* TEST ONLY: wrong on purpose */
                    sum = 1;
                } else if (q) {
                    for (size_t j = 0; j < V; j++) {
                        float r = s->p[j] - q[j];
                        s->resid[j] = r > 0 ? r : 0;
                        sum += s->resid[j];
                    }
                } else {
                    memcpy(s->resid, s->p, V * sizeof(float));
                    s->resid[t] = 0;
                    for (size_t j = 0; j < V; j++) sum += s->resid[j];
                }
                /* p <= q everywhere (p == q up to rounding): the rejection had probability ~0; p is the
                 * distribution the residual converges to then */
                const float *wts = sum > 0 ? s->resid : s->p;
                if ((st = vs_sampler_pick(s->sampler, wts, &w->next, err))) return st;
            }
        }
        w->n_eval = i + 1;
        if (!accept) break;
        s->acc_nodes[w->n_accept++] = i;
        if (is_eog(s, pr, t)) {
            w->eos = w->eos_accepted = true;
            return VS_OK; /* tokens after an accepted EOS are discarded */
        }
    }
    if (w->n_accept == prop->n) {
        /* every draft accepted: the bonus token from the last row */
        const float *lg = s->logits + (size_t)prop->n * V;
        if (greedy) {
            w->next = vs_argmax(lg, (int64_t)V);
        } else {
            vs_status st = target_probs(s, prop->n, err);
            if (!st) st = vs_sampler_pick(s->sampler, s->p, &w->next, err);
            if (st) return st;
        }
    }
    if (is_eog(s, pr, w->next)) w->eos = true;
    return VS_OK;
}

/* Normalises x[0..V) in place; returns its sum before (0: left unchanged). */
static double normalise(float *x, size_t V) {
    double sum = 0;
    for (size_t j = 0; j < V; j++) sum += x[j];
    if (sum > 0) {
        const double inv = 1.0 / sum;
        for (size_t j = 0; j < V; j++) x[j] = (float)(x[j] * inv);
    }
    return sum;
}

/* Tree walk (docs/algorithms.md, 'Tree verification'; spec.h "Trees"): from the pending row, at each node take the
 * children in index order (check_proposal built the lists). Logits row 0 is the prediction after the
 * pending row, row i + 1 the prediction after node i. */
static vs_status walk_tree(vs_spec *s, const vs_spec_drafter *d, const vs_spec_params *pr, walk_result *w,
                           vs_error *err) {
    const vs_spec_proposal *prop = &s->prop;
    const size_t V = (size_t)s->n_vocab;
    const bool greedy = pr->sampling.temperature == 0;
    memset(w, 0, sizeof(*w));
    w->next = -1;
    int32_t cur = -1; /* the node whose children are examined (-1 = the pending row) */
    vs_status st;
    for (;;) {
        const int32_t c0 = s->first_child[cur + 1];
        const float *lg = s->logits + (size_t)(cur + 1) * V;
        if (c0 < 0) {
            /* a leaf (or the pending row of an empty proposal): the bonus token */
            if (greedy) {
                w->next = vs_argmax(lg, (int64_t)V);
            } else if ((st = target_probs(s, cur + 1, err)) ||
                       (st = vs_sampler_pick(s->sampler, s->p, &w->next, err))) {
                return st;
            }
            break;
        }
        w->n_eval = w->n_accept + 1;
        int32_t acc = -1;
        if (greedy) {
            const int32_t best = vs_argmax(lg, (int64_t)V);
            for (int32_t c = c0; c >= 0 && acc < 0; c = s->next_sib[c])
                if (prop->token[c] == best) acc = c;
            if (acc < 0) w->next = best;
        } else {
            if ((st = target_probs(s, cur + 1, err))) return st;
            const int32_t qr = prop->q_row[c0]; /* shared by the siblings (check_proposal) */
            if (qr >= 0) memcpy(s->qw, prop->q + (size_t)qr * V, V * sizeof(float));
            for (int32_t c = c0; c >= 0 && acc < 0; c = s->next_sib[c]) {
                const int32_t t = prop->token[c];
                const double qd = qr >= 0 ? s->qw[t] : 1.0, pd = s->p[t];
                if (!(qd > 0))
                    return vs_error_set(err, VS_ERR_INVALID,
                                        "%s: drafted token %d (node %d) with q = %g (q must be the "
                                        "distribution it was drawn from, without its earlier siblings)",
                                        d->vt->name, t, c, qd);
                if (vs_sampler_uniform(s->sampler) * qd < pd) {
                    acc = c;
                    break;
                }
                /* rejected: p = norm(max(p - q, 0)) (one-hot q: p without t), q(t) = 0, q = norm(q) */
                if (!pr->debug_break_residual) { /* TEST ONLY: the broken residual keeps p */
                    if (qr >= 0)
                        for (size_t j = 0; j < V; j++) {
                            float r = s->p[j] - s->qw[j];
                            s->resid[j] = r > 0 ? r : 0;
                        }
                    else {
                        memcpy(s->resid, s->p, V * sizeof(float));
                        s->resid[t] = 0;
                    }
                    /* p <= q everywhere (p == q up to rounding): the rejection had probability ~0; keep p */
                    if (normalise(s->resid, V) > 0) memcpy(s->p, s->resid, V * sizeof(float));
                }
                if (qr >= 0) {
                    s->qw[t] = 0;
                    normalise(s->qw, V);
                }
            }
            if (acc < 0 && (st = vs_sampler_pick(s->sampler, s->p, &w->next, err))) return st;
        }
        if (acc < 0) break;
        s->acc_nodes[w->n_accept++] = acc;
        if (is_eog(s, pr, prop->token[acc])) {
            w->eos = w->eos_accepted = true;
            return VS_OK; /* tokens after an accepted EOS are discarded */
        }
        cur = acc;
    }
    if (is_eog(s, pr, w->next)) w->eos = true;
    return VS_OK;
}

/* Target prefill of prompt rows [from, to) in chunks; the drafter gets their features. */
static vs_status prefill(vs_spec *s, vs_spec_drafter *d, const vs_spec_prompt *prompt, int32_t from,
                         int32_t to, vs_error *err) {
    prompt_cursor cur = {prompt, 0, 0};
    vs_lm_row tmp;
    int64_t key;
    for (int32_t i = 0; i < from; i++) prompt_row(&cur, &tmp, &key, s->n_embd);
    vs_lm_row *rows = vs_malloc(sizeof(vs_lm_row) * (size_t)VS_MIN(s->n_batch, VS_MAX(to - from, 1)));
    if (!rows) return vs_error_set(err, VS_ERR_NOMEM, "spec: out of memory for the prefill");
    vs_status st = VS_OK;
    for (int32_t a = from; a < to && !st; a += s->n_batch) {
        int32_t n = VS_MIN(s->n_batch, to - a);
        for (int32_t i = 0; i < n; i++) {
            prompt_row(&cur, &rows[i], &s->hist[a + i], s->n_embd);
            rows[i].pos = a + i;
            rows[i].seq = s->seq;
            if (s->feat_tokens) s->feat_tokens[i] = rows[i].embd ? -1 : rows[i].token;
        }
        vs_lm_out out = make_out(s, d, NULL);
        const bool attn = attn_recv_begin(s, d, &out, err, &st);
        if (!st) st = vs_lm_forward(s->lm, s->kv, s->tp, rows, n, &out, err);
        if (!st && attn) {
            attn_recv_end(s, a + n);
            s->attn_n = a + n;
        }
        if (!st) st = deliver_features(s, d, a, 0, n, s->feat_tokens, err);
        s->attn_n = 0;
    }
    vs_free(rows);
    return st;
}

vs_status vs_spec_generate(vs_spec *s, vs_spec_drafter *d, const vs_spec_prompt *prompt,
                           const vs_spec_params *pr, vs_spec_token_fn on_tokens, void *cb_ctx,
                           vs_spec_log *log, vs_error *err) {
    vs_spec_log_reset(log);
    const char *tname = vs_gguf_name(vs_lm_gguf(s->lm));
    if (!pr) return vs_error_set(err, VS_ERR_INVALID, "spec: no parameters");
    if (pr->gamma < 0 || pr->gamma > VS_SPEC_MAX_GAMMA)
        return vs_error_set(err, VS_ERR_INVALID, "spec: draft length %d outside [0, %d]", pr->gamma,
                            VS_SPEC_MAX_GAMMA);
    if (pr->n_predict < 0)
        return vs_error_set(err, VS_ERR_INVALID, "spec: token limit %d < 0", pr->n_predict);
    if (pr->gamma > 0 && !d)
        return vs_error_set(err, VS_ERR_INVALID, "spec: draft length %d needs a drafter", pr->gamma);
    if (pr->gamma == 0) d = NULL; /* plain decoding */
    if (d) {
        if (!d->vt || !d->vt->begin || !d->vt->propose || !d->vt->commit)
            return vs_error_set(err, VS_ERR_INVALID, "spec: drafter without begin/propose/commit");
        if (d->n_vocab != s->n_vocab)
            return vs_error_set(
                err, VS_ERR_INVALID,
                "spec: drafter %s has a vocabulary of %d tokens, the target %s has %d: they must "
                "share one tokenizer",
                d->vt->name, d->n_vocab, tname, s->n_vocab);
        if (d->n_want_layers < 0 || d->n_want_layers > 64 || (d->n_want_layers > 0 && !d->want_layers))
            return vs_error_set(err, VS_ERR_INVALID, "spec: drafter %s asks for %d layers", d->vt->name,
                                d->n_want_layers);
    }
    vs_status st = vs_spec_prompt_check(prompt, s->n_vocab, err);
    if (st) return st;
    const int32_t n_prompt = (int32_t)vs_spec_prompt_rows(prompt);
    if (n_prompt > s->n_ctx)
        return vs_error_set(err, VS_ERR_RANGE, "spec: prompt of %d rows does not fit the target cache of %d",
                            n_prompt, s->n_ctx);
    if ((st = vs_sampler_set_params(s->sampler, &pr->sampling, err))) return st;
    vs_sampler_seed(s->sampler, pr->sampling.seed);
    int32_t cap = pr->gamma; /* most nodes per proposal, known after begin (tree drafters) */
    log->gamma = pr->gamma;
    log->n_prompt = n_prompt;

    /* Prefix reuse: keep cached rows whose keys equal the prompt's leading rows (text rows by token,
     * image rows by (image_id, row); never the last prompt row: it is the pending row of the first
     * block). Feature drafters see every prompt row (no reuse for them) unless they keep the features of
     * the rows they saw (vs_spec_drafter.keeps_features). */
    int32_t keep = 0;
    if (pr->reuse_prefix && (!wants_features(d) || d->keeps_features)) {
        prompt_cursor cur = {prompt, 0, 0};
        int32_t len = vs_kv_seq_len(s->kv, s->seq);
        vs_lm_row r;
        int64_t key;
        while (keep < VS_MIN(len, n_prompt - 1)) {
            prompt_row(&cur, &r, &key, s->n_embd);
            if (key == VS_SPEC_KEY_NONE || s->hist[keep] != key) break;
            keep++;
        }
    }
    if ((st = vs_kv_seq_truncate(s->kv, s->seq, keep, err))) return st;

    /* Drafter prefill, then the target's. */
    const double t0 = vs_time_now();
    double t2 = t0;
    bool begun = false;
    int32_t block_L = -1; /* cache length before the block in flight (its rows are not in hist yet) */
    if (d) {
        vs_spec_begin_info bi = {.prompt = prompt, .params = pr, .n_ctx_target = s->n_ctx};
        st = d->vt->begin(d, &bi, err);
        if (st) {
            vs_error_wrap(err, "drafter %s", d->vt->name);
            goto done;
        }
        begun = true;
    }
    const double t1 = vs_time_now();
    log->t_draft_prefill = t1 - t0;
    if (d && d->max_nodes > 0) cap = VS_MAX(cap, d->max_nodes);
    if ((st = ensure_scratch(s, cap, err))) goto done;
    if (wants_features(d) && (st = ensure_hidden(s, d, VS_MAX(cap + 1, s->n_batch), err))) goto done;
    st = prefill(s, d, prompt, keep, n_prompt - 1, err);
    t2 = vs_time_now();
    log->t_prefill = t2 - t1;
    log->n_prefilled = n_prompt - 1 - keep;
    if (st) goto done;

    /* The pending row: the last prompt row. */
    vs_lm_row pending;
    int64_t pending_key;
    {
        prompt_cursor cur = {prompt, 0, 0};
        for (int32_t i = 0; i < n_prompt; i++) prompt_row(&cur, &pending, &pending_key, s->n_embd);
    }
    while (log->stop == VS_SPEC_STOP_NONE) {
        const int32_t remaining = pr->n_predict - log->n_tokens;
        const int32_t L = vs_kv_seq_len(s->kv, s->seq);
        const int32_t room = s->n_ctx - L - 1; /* drafts that fit behind the pending row */
        if (remaining <= 0) {
            log->stop = VS_SPEC_STOP_LIMIT;
            break;
        }
        if (room < 0) {
            log->stop = VS_SPEC_STOP_CONTEXT;
            break;
        }
        vs_spec_block blk;
        memset(&blk, 0, sizeof(blk));
        const double tb0 = vs_time_now();

        /* 1. propose: at most gamma, never past the token limit or the cache */
        s->prop.n = 0;
        s->prop.n_steps = 0;
        int32_t k_max = VS_MIN(VS_MIN(pr->gamma, remaining - 1), room);
        /* feature drafters' blocks want hidden states and never merge (batch.h): drafting on is cheaper */
        if (s->draft_limit && k_max > 0 && !wants_features(d)) {
            const int32_t lim = s->draft_limit(s->draft_limit_ctx);
            if (lim >= 0) k_max = VS_MIN(k_max, lim);
        }
        bool chain = true;
        if (d && k_max > 0) {
            /* every node takes a cache slot behind the pending row */
            vs_spec_limits lim = {.max_depth = k_max,
                                  .max_nodes = d->max_nodes > 0 ? VS_MIN(VS_MIN(d->max_nodes, cap), room)
                                                                : k_max};
            st = d->vt->propose(d, &lim, &s->prop, err);
            if (!st) st = check_proposal(s, d, &s->prop, &lim, &chain, err);
            if (st) goto done;
        }
        const int32_t k = s->prop.n;
        blk.n_draft = k;
        for (int32_t i = 0; i < k; i++) blk.n_depth = VS_MAX(blk.n_depth, s->prop.depth[i]);
        blk.n_steps = s->prop.n_steps > 0 ? s->prop.n_steps : k;
        const double tb1 = vs_time_now();
        blk.t_draft = tb1 - tb0;

        /* 2. verify: [pending, d_1 .. d_k] in one forward, logits for every row */
        vs_lm_row *rows = s->rows;
        rows[0] = pending;
        rows[0].pos = L;
        rows[0].seq = s->seq;
        rows[0].want_logits = true;
        rows[0].tree = false;
        for (int32_t i = 0; i < k; i++) {
            memset(&rows[i + 1], 0, sizeof(vs_lm_row));
            rows[i + 1].token = s->prop.token[i];
            rows[i + 1].seq = s->seq;
            rows[i + 1].pos = L + s->prop.depth[i];
            rows[i + 1].want_logits = true;
            if (!chain) {
                /* the pending row (batch row 0) and the node's ancestors (batch rows 1 + node) */
                int32_t *anc = s->anc + (size_t)(i + 1) * (size_t)(s->cap + 1);
                int32_t na = 0;
                for (int32_t a = s->prop.parent[i]; a >= 0; a = s->prop.parent[a]) anc[na++] = a + 1;
                anc[na++] = 0;
                rows[i + 1].tree = true;
                rows[i + 1].n_anc = na;
                rows[i + 1].anc = anc;
            }
        }
        vs_lm_out out = make_out(s, d, s->logits);
        st = s->verify ? s->verify(s->verify_ctx, s->lm, s->kv, s->tp, rows, k + 1, &out, err)
                       : vs_lm_forward(s->lm, s->kv, s->tp, rows, k + 1, &out, err);
        if (st) goto done;
        ban_eog(s, pr, s->logits, k + 1);
        block_L = L;

        /* 3. accept */
        walk_result w;
        if ((st = chain ? walk_chain(s, d, pr, &w, err) : walk_tree(s, d, pr, &w, err))) goto done;
        blk.n_accept = w.n_accept;
        blk.n_eval = w.n_eval;

        /* 4. emit: accepted drafts, then the correction / bonus (none after an accepted EOS) */
        int32_t n_emit = 0;
        for (int32_t i = 0; i < w.n_accept; i++) s->acc_tokens[n_emit++] = s->prop.token[s->acc_nodes[i]];
        if (!w.eos_accepted) s->acc_tokens[n_emit++] = w.next;
        bool ends = false;
        if (w.eos) {
            log->stop = VS_SPEC_STOP_EOS;
            ends = true;
        } else if (log->n_tokens + n_emit >= pr->n_predict) {
            log->stop = VS_SPEC_STOP_LIMIT;
            ends = true;
        }
        blk.n_emit = n_emit;
        if ((st = vs_spec_log_add_tokens(log, s->acc_tokens, n_emit, err))) goto done;

        /* 5. roll back: keep the pending row + the accepted path */
        for (int32_t i = 0; i < w.n_accept; i++) s->slots[i] = L + 1 + s->acc_nodes[i];
        if ((st = vs_kv_seq_compact(s->kv, s->seq, s->slots, w.n_accept, L + 1, err))) goto done;
        s->hist[L] = pending_key;
        for (int32_t i = 0; i < w.n_accept; i++) s->hist[L + 1 + i] = s->acc_tokens[i];
        block_L = -1;

        /* 6. tell the drafter: features of the rows that became final, then the commit */
        if (d) {
            if (wants_features(d)) {
                /* chain: batch rows 0 .. n_accept are already contiguous; trees: move the path's rows
                 * 1 + acc_nodes[i] >= i + 1 forward to i + 1 (in order, so nothing is overwritten early) */
                for (int32_t i = 0; !chain && i < w.n_accept; i++) {
                    const size_t E = (size_t)s->n_embd, from = (size_t)(1 + s->acc_nodes[i]) * E,
                                 to = (size_t)(i + 1) * E;
                    if (from == to) continue;
                    memmove(s->hidden + to, s->hidden + from, E * sizeof(float));
                    for (int32_t l = 0; l < d->n_want_layers; l++)
                        memmove(s->layer_hidden[l] + to, s->layer_hidden[l] + from, E * sizeof(float));
                }
                s->feat_tokens[0] = pending.embd ? -1 : pending.token;
                for (int32_t i = 0; i < w.n_accept; i++) s->feat_tokens[i + 1] = s->acc_tokens[i];
                if ((st = deliver_features(s, d, L, 0, w.n_accept + 1, s->feat_tokens, err))) goto done;
            }
            vs_spec_commit c = {.n_proposed = k,
                                .n_accepted = w.n_accept,
                                .accepted_nodes = s->acc_nodes,
                                .accepted = s->acc_tokens,
                                .next = ends ? -1 : w.next,
                                .target_logits = s->logits};
            if ((st = d->vt->commit(d, &c, err))) goto done;
        }
        memset(&pending, 0, sizeof(pending));
        pending.token = w.next;
        pending_key = w.next;
        blk.t_verify = vs_time_now() - tb1;
        if ((st = vs_spec_log_add_block(log, &blk, err))) goto done;
        if (on_tokens && !on_tokens(cb_ctx, s->acc_tokens, n_emit) && log->stop == VS_SPEC_STOP_NONE)
            log->stop = VS_SPEC_STOP_CALLBACK;
    }
    log->t_decode = vs_time_now() - t2;

done:
    /* an error inside a block: drop its rows, so the cache holds only rows hist describes (prefix reuse
     * compares hist) */
    if (st && block_L >= 0) vs_kv_seq_truncate(s->kv, s->seq, block_L, NULL);
    if (begun && d->vt->end) d->vt->end(d);
    if (log->t_decode == 0 && log->n_blocks > 0) log->t_decode = vs_time_now() - t2;
    log->t_total = log->t_vision + log->t_prefill + log->t_draft_prefill + log->t_decode;
    return st;
}

/* ------------------------------------------------------------------------------------------------
 * Timing */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

vs_status vs_spec_time_target(vs_spec *s, int32_t n_rows, int32_t reps, double *seconds, vs_error *err) {
    if (n_rows < 1 || reps < 1 || reps > 1000)
        return vs_error_set(err, VS_ERR_INVALID, "spec: timing needs n_rows >= 1 and 1..1000 repetitions");
    const int32_t L = vs_kv_seq_len(s->kv, s->seq);
    if (L + n_rows > s->n_ctx)
        return vs_error_set(err, VS_ERR_RANGE,
                            "spec: no room for %d more rows in the target cache (%d of %d used)", n_rows, L,
                            s->n_ctx);
    vs_status st = ensure_scratch(s, n_rows, err);
    if (st) return st;
    double *t = vs_malloc(sizeof(double) * (size_t)reps);
    if (!t) return vs_error_set(err, VS_ERR_NOMEM, "spec: out of memory");
    for (int32_t r = 0; r < reps && !st; r++) {
        for (int32_t i = 0; i < n_rows; i++) {
            memset(&s->rows[i], 0, sizeof(vs_lm_row));
            s->rows[i].token = L > 0 && s->hist[L - 1] >= 0 ? (int32_t)s->hist[L - 1] : 0;
            s->rows[i].pos = L + i;
            s->rows[i].seq = s->seq;
            s->rows[i].want_logits = true;
        }
        vs_lm_out out = {.logits = s->logits, .attn_layer = -1};
        double a = vs_time_now();
        st = vs_lm_forward(s->lm, s->kv, s->tp, s->rows, n_rows, &out, err);
        t[r] = vs_time_now() - a;
        vs_status st2 = vs_kv_seq_truncate(s->kv, s->seq, L, err);
        if (!st) st = st2;
    }
    if (!st) {
        qsort(t, (size_t)reps, sizeof(double), cmp_double);
        *seconds = t[reps / 2];
    }
    vs_free(t);
    return st;
}
