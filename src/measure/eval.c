/* eval: the world's test split scored by its checker. See eval.h. Sections: prompts, the loop,
 * reports, the greedy answerer. */
#include "eval.h"

#include <stdio.h>
#include <string.h>

#include "mmprompt.h"

/* ---------------------------------------------------------------------------------------------- */
/* Prompts */

/* A model answer as history text: one leading space dropped, "<image>" removed. */
static char *clean_answer(const char *a) {
    if (a[0] == ' ') a++;
    size_t n = strlen(a), ml = strlen("<image>");
    char *out = vs_malloc(n + 1);
    if (!out) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        if (i + ml <= n && !memcmp(a + i, "<image>", ml)) {
            i += ml;
            continue;
        }
        out[k++] = a[i++];
    }
    out[k] = 0;
    return out;
}

static char *eval_prompt(const vs_world_sample *s, int t, const char *const *answers, bool words) {
    if (t < 0 || t >= s->n_turns) return NULL;
    vs_world_sample tmp = *s;
    char *clean[VS_WORLD_MAX_TURNS] = {0};
    bool ok = true;
    for (int i = 0; i < t && answers; i++)
        if (answers[i]) {
            clean[i] = clean_answer(answers[i]);
            ok &= clean[i] != NULL;
            tmp.turns[i].assistant = clean[i];
        }
    char *p = ok ? (words ? vs_world_prompt_words : vs_world_prompt)(&tmp, t, false) : NULL;
    for (int i = 0; i < VS_WORLD_MAX_TURNS; i++) vs_free(clean[i]);
    return p;
}

char *vs_eval_prompt(const vs_world_sample *s, int t, const char *const *answers) {
    return eval_prompt(s, t, answers, false);
}

/* ---------------------------------------------------------------------------------------------- */
/* The loop */

static void count(vs_eval_counts *c, int t, bool correct, int64_t n_tokens, bool eos, double sec) {
    c->turns++, c->correct += correct;
    if (t == 0)
        c->first_turns++, c->first_correct += correct;
    else
        c->second_turns++, c->second_correct += correct;
    c->answer_tokens += n_tokens;
    c->no_eos += !eos;
    c->seconds += sec;
}

/* Swap partner of sample i (VS_EVAL_IMAGES_SWAP): the next sample in file order, cyclically, of the same
 * suite with the same number of images; -1 when i has no images; -2 when no other sample qualifies. */
static int64_t swap_partner(const vs_world_dataset *d, int64_t i) {
    const vs_world_sample *s = &d->samples[i];
    if (s->n_images == 0) return -1;
    for (int64_t k = 1; k < d->n; k++) {
        const int64_t j = (i + k) % d->n;
        if (d->samples[j].suite == s->suite && d->samples[j].n_images == s->n_images) return j;
    }
    return -2;
}

/* The prompt with every "<image>" marker (and the one newline or space right after it) taken out. */
static void strip_markers(char *p) {
    static const char mk[] = "<image>";
    char *w = p;
    for (const char *r = p; *r;) {
        if (!strncmp(r, mk, sizeof(mk) - 1)) {
            r += sizeof(mk) - 1;
            if (*r == '\n' || *r == ' ') r++;
            continue;
        }
        *w++ = *r++;
    }
    *w = 0;
}

vs_status vs_eval_run(const vs_world_dataset *d, const vs_eval_opts *o, vs_eval_answer_fn fn, void *fn_ctx,
                      vs_eval_result *res, vs_error *err) {
    memset(res, 0, sizeof(*res));
    static const vs_eval_opts defaults = {0};
    if (!o) o = &defaults;
    if (!d || !fn) return vs_error_set(err, VS_ERR_INVALID, "eval: no dataset or no answerer");
    const uint32_t mask = o->suites ? o->suites : VS_WORLD_ALL_SUITES;
    int64_t seen[VS_WORLD_N_SUITES] = {0};
    for (int64_t i = 0; i < d->n; i++) {
        const vs_world_sample *s = &d->samples[i];
        const int su = (int)s->suite;
        if (!(mask & VS_WORLD_SUITE_BIT(su)) || (o->limit > 0 && seen[su] >= o->limit)) continue;
        seen[su]++;
        /* the sample whose images the answerer sees (the callback's s: its images are what the
         * prompt's markers refer to) */
        const vs_world_sample *img_s = s;
        if (o->ablate == VS_EVAL_IMAGES_SWAP) {
            const int64_t j = swap_partner(d, i);
            if (j == -2)
                return vs_error_set(err, VS_ERR_INVALID,
                                    "eval: --ablate-images swap: no other %s sample has %d images to swap with %s",
                                    vs_world_suite_name(s->suite), s->n_images, s->id);
            if (j >= 0) img_s = &d->samples[j];
        }
        res->suite[su].samples++, res->total.samples++;
        char *own[VS_WORLD_MAX_TURNS] = {0};
        vs_status st = VS_OK;
        for (int t = 0; t < s->n_turns; t++) {
            char *prompt = eval_prompt(s, t, o->reference_history ? NULL : (const char *const *)own,
                                       o->ablate == VS_EVAL_IMAGES_WORDS);
            if (!prompt) {
                st = vs_error_set(err, VS_ERR_NOMEM, "eval: out of memory");
                break;
            }
            if (o->ablate == VS_EVAL_IMAGES_NONE) strip_markers(prompt);
            int n_images = vs_mm_count_markers(prompt, strlen(prompt), NULL);
            char *ans = NULL;
            int64_t n_tok = 0;
            bool eos = false;
            double t0 = vs_time_now();
            st = fn(fn_ctx, img_s, prompt, n_images, &ans, &n_tok, &eos, err);
            double sec = vs_time_now() - t0;
            if (st != VS_OK) {
                vs_error_wrap(err, "eval: %s turn %d", s->id, t);
                vs_free(prompt);
                break;
            }
            if (!ans) {
                vs_free(prompt);
                st = vs_error_set(err, VS_ERR_INVALID, "eval: %s turn %d: the answerer gave no text", s->id,
                                  t);
                break;
            }
            vs_eval_turn r = {.sample = s,
                              .turn = t,
                              .prompt = prompt,
                              .answer = ans,
                              .n_tokens = n_tok,
                              .eos = eos,
                              .seconds = sec};
            vs_world_check(s, t, ans, &r.verdict);
            count(&res->suite[su], t, r.verdict.correct, n_tok, eos, sec);
            count(&res->total, t, r.verdict.correct, n_tok, eos, sec);
            const int qt = (int)s->turns[t].query.type;
            if (qt >= 0 && qt < VS_WORLD_N_QUERY_TYPES) {
                vs_eval_counts *qc = &res->question[su][qt];
                qc->samples += t == 0; /* samples whose first turn asks this */
                count(qc, t, r.verdict.correct, n_tok, eos, sec);
            }
            if (o->on_turn) o->on_turn(o->on_turn_ctx, &r);
            own[t] = ans;
            vs_free(prompt);
        }
        for (int t = 0; t < VS_WORLD_MAX_TURNS; t++) vs_free(own[t]);
        if (st != VS_OK) return st;
    }
    return VS_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* Reports */

static double frac(int64_t a, int64_t b) { return b ? (double)a / (double)b : 0.0; }

static void table_line(char *buf, size_t cap, size_t *len, const char *name, const vs_eval_counts *c) {
    char f[16] = "-", s[16] = "-";
    if (c->first_turns) snprintf(f, sizeof(f), "%.1f%%", 100.0 * frac(c->first_correct, c->first_turns));
    if (c->second_turns) snprintf(s, sizeof(s), "%.1f%%", 100.0 * frac(c->second_correct, c->second_turns));
    int n = snprintf(buf + *len, cap - *len, "%-9s %8lld %6lld %8.1f%% %7s %7s %11.1f %6lld %9.1f\n", name,
                     (long long)c->samples, (long long)c->turns, 100.0 * vs_eval_accuracy(c), f, s,
                     vs_eval_mean_tokens(c), (long long)c->no_eos, c->seconds);
    if (n > 0) *len += VS_MIN((size_t)n, cap - *len - 1);
}

char *vs_eval_table(const vs_eval_result *r) {
    const size_t cap = 128 * (VS_WORLD_N_SUITES + 4);
    char *buf = vs_malloc(cap);
    if (!buf) return NULL;
    size_t len = 0;
    int n = snprintf(buf, cap, "%-9s %8s %6s %9s %7s %7s %11s %6s %9s\n", "suite", "samples", "turns",
                     "accuracy", "first", "second", "mean tokens", "cut", "seconds");
    len = (size_t)n;
    for (int s = 0; s < VS_WORLD_N_SUITES; s++)
        if (r->suite[s].turns)
            table_line(buf, cap, &len, vs_world_suite_name((vs_world_suite)s), &r->suite[s]);
    table_line(buf, cap, &len, "total", &r->total);
    return buf;
}

char *vs_eval_question_table(const vs_eval_result *r) {
    size_t cap = 256 + (size_t)VS_WORLD_N_SUITES * VS_WORLD_N_QUERY_TYPES * 96, len;
    char *buf = vs_malloc(cap);
    if (!buf) return NULL;
    int n = snprintf(buf, cap, "%-10s %-12s %6s %9s %7s %7s %11s\n", "suite", "question", "turns", "accuracy", "first",
                     "second", "mean tokens");
    len = (size_t)n;
    for (int s = 0; s < VS_WORLD_N_SUITES; s++)
        for (int q = 0; q < VS_WORLD_N_QUERY_TYPES; q++) {
            const vs_eval_counts *c = &r->question[s][q];
            if (!c->turns || len >= cap) continue;
            char f[16] = "-", sc[16] = "-";
            if (c->first_turns) snprintf(f, sizeof(f), "%.1f%%", 100.0 * frac(c->first_correct, c->first_turns));
            if (c->second_turns) snprintf(sc, sizeof(sc), "%.1f%%", 100.0 * frac(c->second_correct, c->second_turns));
            n = snprintf(buf + len, cap - len, "%-10s %-12s %6lld %8.1f%% %7s %7s %11.1f\n",
                         vs_world_suite_name((vs_world_suite)s), vs_world_query_name((vs_world_query_type)q),
                         (long long)c->turns, 100.0 * vs_eval_accuracy(c), f, sc, vs_eval_mean_tokens(c));
            len += n > 0 ? (size_t)n : 0;
        }
    if (len >= cap) buf[cap - 1] = 0;
    return buf;
}

static void json_counts(vs_json_writer *w, const vs_eval_counts *c) {
    vs_json_obj_begin(w);
    vs_json_key(w, "samples"), vs_json_int(w, c->samples);
    vs_json_key(w, "turns"), vs_json_int(w, c->turns);
    vs_json_key(w, "correct"), vs_json_int(w, c->correct);
    vs_json_key(w, "accuracy"), vs_json_num(w, vs_eval_accuracy(c));
    vs_json_key(w, "first_turns"), vs_json_int(w, c->first_turns);
    vs_json_key(w, "first_accuracy"), vs_json_num(w, frac(c->first_correct, c->first_turns));
    vs_json_key(w, "second_turns"), vs_json_int(w, c->second_turns);
    vs_json_key(w, "second_accuracy"), vs_json_num(w, frac(c->second_correct, c->second_turns));
    vs_json_key(w, "answer_tokens"), vs_json_int(w, c->answer_tokens);
    vs_json_key(w, "mean_answer_tokens"), vs_json_num(w, vs_eval_mean_tokens(c));
    vs_json_key(w, "no_eos"), vs_json_int(w, c->no_eos);
    vs_json_key(w, "seconds"), vs_json_num(w, c->seconds);
    vs_json_obj_end(w);
}

void vs_eval_json(const vs_eval_result *r, vs_json_writer *w) {
    vs_json_obj_begin(w);
    vs_json_key(w, "suites");
    vs_json_obj_begin(w);
    for (int s = 0; s < VS_WORLD_N_SUITES; s++)
        if (r->suite[s].turns) {
            vs_json_key(w, vs_world_suite_name((vs_world_suite)s));
            json_counts(w, &r->suite[s]);
        }
    vs_json_obj_end(w);
    vs_json_key(w, "total");
    json_counts(w, &r->total);
    vs_json_key(w, "questions");
    vs_json_obj_begin(w);
    for (int s = 0; s < VS_WORLD_N_SUITES; s++) {
        if (!r->suite[s].turns) continue;
        vs_json_key(w, vs_world_suite_name((vs_world_suite)s));
        vs_json_obj_begin(w);
        for (int q = 0; q < VS_WORLD_N_QUERY_TYPES; q++)
            if (r->question[s][q].turns) {
                vs_json_key(w, vs_world_query_name((vs_world_query_type)q));
                json_counts(w, &r->question[s][q]);
            }
        vs_json_obj_end(w);
    }
    vs_json_obj_end(w);
    vs_json_obj_end(w);
}

/* ---------------------------------------------------------------------------------------------- */
/* Greedy answerer */

struct vs_eval_lm {
    vs_models *models; /* over the caller's LM, mmproj, tokenizer and pool */
    vs_session *sess;
    vs_result res;
    vs_eval_lm_opts o;
    int32_t *gen; /* (max_tokens) the last answer, without its end-of-generation token */
    int64_t n_gen;
    int64_t n_prefilled, n_reused, n_decoded;
    uint64_t n_since_seed; /* answers sampled since vs_eval_lm_set_sampling */
};

vs_eval_lm *vs_eval_lm_new(vs_lm *lm, const vs_mmproj *mm, const vs_tokenizer *tok, vs_threadpool *tp,
                           const vs_eval_lm_opts *o, vs_error *err) {
    if (!lm || !mm || !tok) {
        vs_error_set(err, VS_ERR_INVALID, "eval: a model, an mmproj and a tokenizer are needed");
        return NULL;
    }
    const vs_lm_config *c = vs_lm_cfg(lm);
    /* the tower and the projector's width are checked by vs_models_borrow below */
    if (vs_tokenizer_n_vocab(tok) != c->n_vocab) {
        vs_error_set(err, VS_ERR_INVALID, "eval: the tokenizer has %d tokens, the LM %d",
                     vs_tokenizer_n_vocab(tok), c->n_vocab);
        return NULL;
    }
    vs_eval_lm *e = vs_calloc(1, sizeof(*e));
    if (!e) {
        vs_error_set(err, VS_ERR_NOMEM, "eval: out of memory");
        return NULL;
    }
    if (o) e->o = *o;
    if (e->o.max_tokens <= 0) e->o.max_tokens = 256;
    vs_result_init(&e->res);
    vs_session_opts so = {.n_ctx = e->o.n_ctx, .kv_type = e->o.kv_f32 ? VS_TYPE_F32 : VS_TYPE_F16};
    e->gen = vs_malloc(sizeof(int32_t) * (size_t)e->o.max_tokens);
    if (!e->gen) vs_error_set(err, VS_ERR_NOMEM, "eval: out of memory");
    if (!e->gen || !(e->models = vs_models_borrow(lm, tok, mm, tp, NULL, err)) ||
        !(e->sess = vs_session_new(e->models, &so, err)) ||
        (e->o.temperature != 0 && vs_eval_lm_set_sampling(e, e->o.temperature, e->o.top_p, e->o.seed, err))) {
        vs_eval_lm_free(e);
        return NULL;
    }
    return e;
}

void vs_eval_lm_free(vs_eval_lm *e) {
    if (!e) return;
    vs_result_free(&e->res);
    vs_session_free(e->sess);
    vs_models_free(e->models);
    vs_free(e->gen);
    vs_free(e);
}

vs_status vs_eval_lm_set_sampling(vs_eval_lm *e, float temperature, float top_p, uint64_t seed,
                                  vs_error *err) {
    if (!(temperature >= 0) || !(top_p >= 0 && top_p <= 1))
        return vs_error_set(err, VS_ERR_INVALID, "eval: temperature %g / top-p %g out of range",
                            (double)temperature, (double)top_p);
    e->o.temperature = temperature, e->o.top_p = top_p > 0 ? top_p : 1.0f, e->o.seed = seed;
    e->n_since_seed = 0;
    return VS_OK;
}

const int32_t *vs_eval_lm_last_tokens(const vs_eval_lm *e, int64_t *n) {
    if (n) *n = e->n_gen;
    return e->gen;
}

void vs_eval_lm_counters(const vs_eval_lm *e, int64_t *prefilled, int64_t *reused, int64_t *decoded) {
    if (prefilled) *prefilled = e->n_prefilled;
    if (reused) *reused = e->n_reused;
    if (decoded) *decoded = e->n_decoded;
}

vs_status vs_eval_lm_answer(void *ctx, const vs_world_sample *s, const char *prompt, int n_images,
                            char **answer, int64_t *n_tokens, bool *eos, vs_error *err) {
    vs_eval_lm *e = ctx;
    *answer = NULL, *n_tokens = 0, *eos = false;
    e->n_gen = 0;
    if (n_images < 0 || n_images > s->n_images)
        return vs_error_set(err, VS_ERR_INVALID, "eval: %d images asked, the sample has %d", n_images,
                            s->n_images);
    vs_req_image imgs[VS_WORLD_MAX_IMAGES];
    for (int i = 0; i < n_images; i++) imgs[i] = (vs_req_image){.path = s->images[i]};
    vs_request rq;
    vs_request_default(&rq);
    rq.prompt = prompt;
    rq.images = imgs, rq.n_images = n_images;
    rq.n_predict = e->o.max_tokens;
    rq.reuse_prefix = !e->o.no_reuse;
    if (e->o.temperature > 0) {
        rq.sampling = vs_sampler_params_default();
        rq.sampling.temperature = e->o.temperature, rq.sampling.top_p = e->o.top_p;
        /* the k-th answer after vs_eval_lm_set_sampling draws from its own stream (k = 0: the seed itself) */
        rq.sampling.seed = e->o.seed + e->n_since_seed++ * 0x9e3779b97f4a7c15ull;
    }
    vs_status st = vs_session_run(e->sess, &rq, &e->res, err);
    if (st != VS_OK) return st;
    const vs_spec_log *l = &e->res.log;
    *eos = e->res.finish == VS_FINISH_EOS;
    e->n_gen = l->n_tokens - (*eos ? 1 : 0); /* the end-of-generation token is not part of the answer */
    if (e->n_gen > 0) memcpy(e->gen, l->tokens, sizeof(int32_t) * (size_t)e->n_gen);
    const int64_t reused = VS_MAX(0, l->n_prompt - 1 - l->n_prefilled); /* the last row is never cached */
    e->n_reused += reused;
    e->n_prefilled += l->n_prompt - reused;
    e->n_decoded += VS_MAX(0, l->n_tokens - 1); /* the first token comes from the prefill */
    *n_tokens = e->n_gen;
    *answer = vs_detokenize(vs_models_tokenizer(e->models), e->gen, e->n_gen, 0, NULL, err);
    return *answer ? VS_OK : (err && err->code ? err->code : VS_ERR_NOMEM);
}
