/* distill: the self-distillation file and the run that writes it. See distill.h. */
#include "distill.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eval.h"
#include "json.h"
#include "train_drafter.h"

/* ---------------------------------------------------------------------------------------------- */
/* Settings and JSON */

/* A float setting as the double of its shortest decimal form (0.9f is written 0.9, and reads back as
 * the same float). */
static double fnum(float x) {
    char b[32];
    snprintf(b, sizeof(b), "%.7g", (double)x);
    return strtod(b, NULL);
}

vs_status vs_distill_parse_temps(const char *list, float top_p, vs_distill_header *h, vs_error *err) {
    if (!(top_p > 0 && top_p <= 1))
        return vs_error_set(err, VS_ERR_INVALID, "distill: top-p %g must be in (0, 1]", (double)top_p);
    h->n_settings = 0;
    const char *p = list ? list : "";
    while (*p) {
        char *end = NULL;
        errno = 0;
        double t = strtod(p, &end);
        if (end == p || errno || !(t >= 0 && t <= 100) || (*end && *end != ','))
            return vs_error_set(err, VS_ERR_INVALID, "distill: bad temperature list '%s'", list);
        if (h->n_settings == VS_DISTILL_MAX_SETTINGS)
            return vs_error_set(err, VS_ERR_INVALID, "distill: at most %d temperatures",
                                VS_DISTILL_MAX_SETTINGS);
        h->settings[h->n_settings++] = (vs_distill_setting){(float)t, top_p};
        p = *end ? end + 1 : end;
    }
    if (h->n_settings == 0) return vs_error_set(err, VS_ERR_INVALID, "distill: no temperatures given");
    return VS_OK;
}

char *vs_distill_header_json(const vs_distill_header *h) {
    vs_json_writer w;
    vs_json_writer_init(&w);
    vs_json_obj_begin(&w);
    vs_json_kv_str(&w, "format", "vlmspec-distill");
    vs_json_kv_int(&w, "version", 1);
    vs_json_kv_str(&w, "target", h->target);
    vs_json_kv_str(&w, "mmproj", h->mmproj);
    vs_json_kv_str(&w, "data", h->data);
    vs_json_kv_str(&w, "split", h->split);
    vs_json_kv_str(&w, "suites", h->suites);
    vs_json_kv_int(&w, "limit", h->limit);
    vs_json_kv_int(&w, "max_tokens", h->max_tokens);
    vs_json_kv_int(&w, "seed", (int64_t)h->seed);
    vs_json_kv_int(&w, "vocab", h->vocab);
    vs_json_key(&w, "settings");
    vs_json_arr_begin(&w);
    for (int i = 0; i < h->n_settings; i++) {
        vs_json_obj_begin(&w);
        vs_json_kv_num(&w, "temperature", fnum(h->settings[i].temperature));
        vs_json_kv_num(&w, "top_p", fnum(h->settings[i].top_p));
        vs_json_obj_end(&w);
    }
    vs_json_arr_end(&w);
    vs_json_obj_end(&w);
    char *s = vs_json_writer_take(&w, NULL);
    vs_json_writer_free(&w);
    return s;
}

char *vs_distill_record_json(const vs_distill_record *r) {
    vs_json_writer w;
    vs_json_writer_init(&w);
    vs_json_obj_begin(&w);
    vs_json_kv_str(&w, "id", r->id ? r->id : "");
    vs_json_kv_str(&w, "suite", vs_world_suite_name((vs_world_suite)r->suite));
    vs_json_kv_int(&w, "job", r->job);
    vs_json_kv_int(&w, "setting", r->setting);
    vs_json_kv_num(&w, "temperature", fnum(r->temperature));
    vs_json_kv_num(&w, "top_p", fnum(r->top_p));
    vs_json_kv_int(&w, "seed", (int64_t)r->seed);
    vs_json_key(&w, "turns");
    vs_json_arr_begin(&w);
    for (int t = 0; t < r->n_turns; t++) {
        vs_json_obj_begin(&w);
        vs_json_kv_str(&w, "answer", r->turns[t].answer ? r->turns[t].answer : "");
        vs_json_kv_int(&w, "tokens", r->turns[t].tokens);
        vs_json_kv_bool(&w, "eos", r->turns[t].eos);
        vs_json_obj_end(&w);
    }
    vs_json_arr_end(&w);
    vs_json_obj_end(&w);
    char *s = vs_json_writer_take(&w, NULL);
    vs_json_writer_free(&w);
    return s;
}

void vs_distill_record_clear(vs_distill_record *r) {
    vs_free(r->id);
    for (int t = 0; t < VS_WORLD_MAX_TURNS; t++) vs_free(r->turns[t].answer);
    memset(r, 0, sizeof(*r));
}

void vs_distill_file_free(vs_distill_file *f) {
    if (!f) return;
    for (int64_t i = 0; i < f->n; i++) vs_distill_record_clear(&f->r[i]);
    vs_free(f->r);
    memset(f, 0, sizeof(*f));
}

static char *dup_str(const char *s) {
    size_t n = strlen(s);
    char *d = vs_malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

static vs_status copy_field(char *dst, size_t cap, const vs_json *o, const char *key, const char *where,
                            vs_error *err) {
    const char *v = vs_json_get_str(o, key, NULL);
    if (!v || strlen(v) >= cap)
        return vs_error_set(err, VS_ERR_FORMAT, "%s: \"%s\" missing or too long", where, key);
    memcpy(dst, v, strlen(v) + 1);
    return VS_OK;
}

static vs_status parse_header(const vs_json *o, vs_distill_header *h, const char *where, vs_error *err) {
    memset(h, 0, sizeof(*h));
    if (!vs_json_get_str(o, "format", NULL) || strcmp(vs_json_get_str(o, "format", ""), "vlmspec-distill") ||
        vs_json_get_int(o, "version", 0) != 1)
        return vs_error_set(err, VS_ERR_FORMAT, "%s: not a vlmspec-distill version 1 header", where);
    vs_status s;
    if ((s = copy_field(h->target, sizeof(h->target), o, "target", where, err)) ||
        (s = copy_field(h->mmproj, sizeof(h->mmproj), o, "mmproj", where, err)) ||
        (s = copy_field(h->data, sizeof(h->data), o, "data", where, err)) ||
        (s = copy_field(h->split, sizeof(h->split), o, "split", where, err)) ||
        (s = copy_field(h->suites, sizeof(h->suites), o, "suites", where, err)))
        return s;
    h->limit = vs_json_get_int(o, "limit", 0);
    h->max_tokens = (int)vs_json_get_int(o, "max_tokens", 0);
    h->seed = (uint64_t)vs_json_get_int(o, "seed", 0);
    h->vocab = (int32_t)vs_json_get_int(o, "vocab", 0);
    const vs_json *st = vs_json_get(o, "settings");
    if (!st || st->type != VS_JSON_ARRAY || st->len < 1 || st->len > VS_DISTILL_MAX_SETTINGS ||
        h->max_tokens < 1 || h->vocab < 1)
        return vs_error_set(err, VS_ERR_FORMAT, "%s: settings, max_tokens or vocab missing or out of range",
                            where);
    h->n_settings = (int)st->len;
    for (size_t i = 0; i < st->len; i++) {
        const vs_json *e = vs_json_at(st, i);
        double t = vs_json_get_num(e, "temperature", -1), p = vs_json_get_num(e, "top_p", -1);
        if (!(t >= 0) || !(p > 0 && p <= 1))
            return vs_error_set(err, VS_ERR_FORMAT, "%s: setting %zu out of range", where, i);
        h->settings[i] = (vs_distill_setting){(float)t, (float)p};
    }
    return VS_OK;
}

static vs_status parse_record(const vs_json *o, const vs_distill_header *h, vs_distill_record *r,
                              const char *where, vs_error *err) {
    memset(r, 0, sizeof(*r));
    const char *id = vs_json_get_str(o, "id", NULL), *su = vs_json_get_str(o, "suite", NULL);
    const vs_json *turns = vs_json_get(o, "turns");
    r->suite = su ? vs_world_suite_from_name(su) : -1;
    r->job = vs_json_get_int(o, "job", -1);
    r->setting = (int)vs_json_get_int(o, "setting", -1);
    r->temperature = (float)vs_json_get_num(o, "temperature", -1);
    r->top_p = (float)vs_json_get_num(o, "top_p", -1);
    r->seed = (uint64_t)vs_json_get_int(o, "seed", 0);
    if (!id || r->suite < 0 || r->job < 0 || r->setting < 0 || r->setting >= h->n_settings || !turns ||
        turns->type != VS_JSON_ARRAY || turns->len < 1 || turns->len > VS_WORLD_MAX_TURNS)
        return vs_error_set(err, VS_ERR_FORMAT,
                            "%s: a record needs id, suite, job, setting (< %d) and 1-%d turns", where,
                            h->n_settings, VS_WORLD_MAX_TURNS);
    if (r->temperature != h->settings[r->setting].temperature || r->top_p != h->settings[r->setting].top_p)
        return vs_error_set(err, VS_ERR_FORMAT, "%s: temperature/top-p differ from the header's setting %d",
                            where, r->setting);
    if (!(r->id = dup_str(id))) return vs_error_set(err, VS_ERR_NOMEM, "out of memory");
    r->n_turns = (int)turns->len;
    for (int t = 0; t < r->n_turns; t++) {
        const vs_json *e = vs_json_at(turns, (size_t)t);
        const char *a = vs_json_get_str(e, "answer", NULL);
        const vs_json *eos = vs_json_get(e, "eos");
        if (!a || !eos || eos->type != VS_JSON_BOOL) {
            vs_distill_record_clear(r);
            return vs_error_set(err, VS_ERR_FORMAT, "%s: turn %d needs \"answer\" and \"eos\"", where, t);
        }
        r->turns[t].tokens = vs_json_get_int(e, "tokens", 0);
        r->turns[t].eos = eos->b;
        if (!(r->turns[t].answer = dup_str(a))) {
            vs_distill_record_clear(r);
            return vs_error_set(err, VS_ERR_NOMEM, "out of memory");
        }
    }
    return VS_OK;
}

vs_status vs_distill_read(const char *path, bool partial_ok, vs_distill_file *f, vs_error *err) {
    memset(f, 0, sizeof(*f));
    uint8_t *buf = NULL;
    size_t n = 0;
    vs_status s = vs_read_file(path, &buf, &n, err);
    if (s != VS_OK) return s;
    size_t pos = 0;
    int64_t line = 0;
    bool have_header = false;
    char where[1200];
    while (s == VS_OK && pos < n) {
        line++;
        const char *p = (const char *)buf + pos;
        const char *nl = memchr(p, '\n', n - pos);
        size_t len = nl ? (size_t)(nl - p) : n - pos;
        pos += len + (nl ? 1 : 0);
        snprintf(where, sizeof(where), "%s:%lld", path, (long long)line);
        if (!nl) {
            if (partial_ok) break;
            s = vs_error_set(err, VS_ERR_FORMAT, "%s: the last line has no newline (an interrupted run?)",
                             where);
            break;
        }
        vs_json_doc *doc = vs_json_parse(p, len, where, err);
        if (!doc) {
            s = VS_ERR_FORMAT;
            break;
        }
        const vs_json *o = vs_json_root(doc);
        if (!have_header) {
            s = parse_header(o, &f->h, where, err);
            have_header = s == VS_OK;
        } else {
            if (f->n == f->cap) {
                int64_t nc = f->cap ? f->cap * 2 : 256;
                vs_distill_record *r = vs_realloc(f->r, sizeof(*r) * (size_t)nc);
                if (!r)
                    s = vs_error_set(err, VS_ERR_NOMEM, "out of memory");
                else
                    f->r = r, f->cap = nc;
            }
            if (s == VS_OK) s = parse_record(o, &f->h, &f->r[f->n], where, err);
            if (s == VS_OK) f->n++;
        }
        vs_json_doc_free(doc);
    }
    vs_free(buf);
    if (s == VS_OK && !have_header) s = vs_error_set(err, VS_ERR_FORMAT, "%s: empty (no header line)", path);
    if (s != VS_OK) vs_distill_file_free(f);
    return s;
}

/* ---------------------------------------------------------------------------------------------- */
/* The run */

typedef struct job {
    const vs_world_sample *s;
    int n_turns;
} job;

/* The conversations to answer, in file order, the first `limit` kept per suite. */
static job *list_jobs(const vs_world_dataset *d, uint32_t suites, int64_t limit, int64_t *n_out) {
    job *j = vs_malloc(sizeof(job) * (size_t)VS_MAX(d->n, 1));
    int64_t per[VS_WORLD_N_SUITES] = {0}, n = 0;
    if (!j) return NULL;
    for (int64_t i = 0; i < d->n; i++) {
        const vs_world_sample *s = &d->samples[i];
        int k = vs_drafter_turns(s);
        if (!k || !(suites & VS_WORLD_SUITE_BIT(s->suite))) continue;
        if (limit > 0 && per[s->suite] >= limit) continue;
        per[s->suite]++;
        j[n++] = (job){s, k};
    }
    *n_out = n;
    return j;
}

/* Truncates a half-written last line so appending continues after the last complete record. */
static vs_status drop_partial_line(const char *path, vs_error *err) {
    uint8_t *buf = NULL;
    size_t n = 0;
    vs_status s = vs_read_file(path, &buf, &n, err);
    if (s != VS_OK) return s;
    size_t keep = n;
    while (keep > 0 && buf[keep - 1] != '\n') keep--;
    vs_free(buf);
    if (keep != n && truncate(path, (off_t)keep) != 0)
        return vs_error_set(err, VS_ERR_IO, "%s: cannot drop the half-written last line: %s", path,
                            strerror(errno));
    return VS_OK;
}

vs_status vs_distill_run(const vs_distill_opts *o, vs_distill_stats *st, vs_error *err) {
    memset(st, 0, sizeof(*st));
    const vs_distill_header *h0 = &o->h;
    if (h0->n_settings < 1 || h0->max_tokens < 1)
        return vs_error_set(err, VS_ERR_INVALID, "distill: no settings or max_tokens < 1");
    if (access(h0->target, R_OK) != 0)
        return vs_error_set(err, VS_ERR_IO, "distill: target model %s: %s", h0->target, strerror(errno));
    if (access(h0->mmproj, R_OK) != 0)
        return vs_error_set(err, VS_ERR_IO, "distill: target mmproj %s: %s", h0->mmproj, strerror(errno));
    uint32_t suites = 0;
    vs_status s = vs_world_parse_suites(h0->suites, &suites, err);
    if (s != VS_OK) return s;
    vs_lm *lm = NULL;
    vs_mmproj *mm = NULL;
    vs_tokenizer *tok = NULL;
    vs_threadpool *tp = NULL;
    vs_eval_lm *e = NULL;
    vs_world_dataset *d = NULL;
    job *jobs = NULL;
    FILE *f = NULL;
    char *line = NULL;
    vs_distill_header h = *h0;
    vs_distill_record rec;
    memset(&rec, 0, sizeof(rec));
    if (!(lm = vs_lm_load(h.target, err)) || !(mm = vs_mmproj_open(h.mmproj, err)) ||
        !(tok = vs_tokenizer_from_gguf(vs_lm_gguf(lm), err)) || !(tp = vs_threadpool_new(o->threads, err))) {
        s = err && err->code ? err->code : VS_ERR_INVALID;
        goto done;
    }
    h.vocab = vs_tokenizer_n_vocab(tok);
    vs_eval_lm_opts eo = {.max_tokens = h.max_tokens};
    if (!(e = vs_eval_lm_new(lm, mm, tok, tp, &eo, err))) {
        s = VS_ERR_INVALID;
        goto done;
    }
    if (!(d = vs_world_load(h.data, h.split, VS_WORLD_ALL_SUITES, err))) {
        s = VS_ERR_INVALID;
        goto done;
    }
    int64_t n_conv = 0;
    if (!(jobs = list_jobs(d, suites, h.limit, &n_conv))) {
        s = vs_error_set(err, VS_ERR_NOMEM, "out of memory");
        goto done;
    }
    st->jobs = n_conv * h.n_settings;
    char *hj = vs_distill_header_json(&h);
    if (!hj) {
        s = vs_error_set(err, VS_ERR_NOMEM, "out of memory");
        goto done;
    }
    /* resume: the file must hold the same header; complete records are kept */
    if (access(o->out, F_OK) == 0) {
        vs_distill_file old;
        if ((s = drop_partial_line(o->out, err)) || (s = vs_distill_read(o->out, false, &old, err))) {
            vs_free(hj);
            goto done;
        }
        char *oj = vs_distill_header_json(&old.h);
        if (!oj || strcmp(oj, hj))
            s = vs_error_set(
                err, VS_ERR_INVALID,
                "distill: %s was written with other settings:\n  stored: %s\n  now:    %s\n(delete "
                "it or repeat the original flags)",
                o->out, oj ? oj : "?", hj);
        for (int64_t i = 0; s == VS_OK && i < old.n; i++) {
            const vs_distill_record *r = &old.r[i];
            const int64_t c = i / h.n_settings;
            if (r->job != i || c >= n_conv || strcmp(r->id, jobs[c].s->id) ||
                r->setting != (int)(i % h.n_settings))
                s = vs_error_set(err, VS_ERR_INVALID,
                                 "distill: %s record %lld (%s) is not job %lld of this data", o->out,
                                 (long long)i + 1, r->id, (long long)i);
        }
        st->done = old.n;
        vs_free(oj);
        vs_distill_file_free(&old);
        if (s != VS_OK) {
            vs_free(hj);
            goto done;
        }
        f = fopen(o->out, "a");
    } else {
        f = fopen(o->out, "w");
        if (f && (fputs(hj, f) < 0 || fputc('\n', f) == EOF || fflush(f))) {
            fclose(f);
            f = NULL;
        }
    }
    vs_free(hj);
    if (!f) {
        s = vs_error_set(err, VS_ERR_IO, "distill: cannot write %s: %s", o->out, strerror(errno));
        goto done;
    }
    vs_progress pr;
    if (!o->quiet) vs_progress_begin(&pr, "distill", st->jobs);
    const double t0 = vs_time_now();
    for (int64_t i = st->done; i < st->jobs; i++) {
        if ((o->max_jobs > 0 && st->written >= o->max_jobs) ||
            (o->time_limit > 0 && vs_time_now() - t0 >= o->time_limit))
            break;
        const job *jb = &jobs[i / h.n_settings];
        const int si = (int)(i % h.n_settings);
        const vs_distill_setting *set = &h.settings[si];
        rec = (vs_distill_record){.suite = (int)jb->s->suite,
                                  .job = i,
                                  .setting = si,
                                  .temperature = set->temperature,
                                  .top_p = set->top_p,
                                  .seed = h.seed + (uint64_t)i,
                                  .n_turns = jb->n_turns};
        if (!(rec.id = dup_str(jb->s->id))) {
            s = vs_error_set(err, VS_ERR_NOMEM, "out of memory");
            break;
        }
        if ((s = vs_eval_lm_set_sampling(e, set->temperature, set->top_p, rec.seed, err))) break;
        const char *answers[VS_WORLD_MAX_TURNS] = {NULL, NULL};
        for (int t = 0; s == VS_OK && t < jb->n_turns; t++) {
            char *prompt = vs_eval_prompt(jb->s, t, answers);
            if (!prompt) {
                s = vs_error_set(err, VS_ERR_NOMEM, "out of memory");
                break;
            }
            s = vs_eval_lm_answer(e, jb->s, prompt, vs_drafter_turn_images(jb->s, t + 1),
                                  &rec.turns[t].answer, &rec.turns[t].tokens, &rec.turns[t].eos, err);
            vs_free(prompt);
            if (s != VS_OK) {
                vs_error_wrap(err, "distill %s turn %d", jb->s->id, t);
                break;
            }
            answers[t] = rec.turns[t].answer;
            st->tokens += rec.turns[t].tokens;
            st->no_eos += !rec.turns[t].eos;
        }
        if (s != VS_OK) break;
        if (!(line = vs_distill_record_json(&rec))) {
            s = vs_error_set(err, VS_ERR_NOMEM, "out of memory");
            break;
        }
        if (fputs(line, f) < 0 || fputc('\n', f) == EOF || fflush(f)) {
            s = vs_error_set(err, VS_ERR_IO, "distill: cannot write %s: %s", o->out, strerror(errno));
            break;
        }
        vs_free(line);
        line = NULL;
        vs_distill_record_clear(&rec);
        st->written++;
        if (!o->quiet) vs_progress_update(&pr, i + 1, "%lld tokens", (long long)st->tokens);
    }
    if (!o->quiet) vs_progress_end(&pr, st->done + st->written);
    st->seconds = vs_time_now() - t0;
done:
    vs_distill_record_clear(&rec);
    vs_free(line);
    if (f && fclose(f) != 0 && s == VS_OK)
        s = vs_error_set(err, VS_ERR_IO, "distill: cannot close %s", o->out);
    vs_free(jobs);
    vs_world_dataset_free(d);
    vs_eval_lm_free(e);
    vs_threadpool_free(tp);
    vs_tokenizer_free(tok);
    vs_mmproj_free(mm);
    vs_lm_free(lm);
    return s;
}
