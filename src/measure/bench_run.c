/* bench_run: the method table and the runner of `vlmspec bench spec`. See bench.h.
 *
 * Plan: the dataset's samples (the selected suites, the first --limit of each) are visited
 * round-robin over the suites, so a partial run covers every suite. A unit is one (sample, turn,
 * temperature); its cells are the target-only run ("ar") and every (method, gamma). Within a unit the
 * runs follow each other in one process on one engine - interleaved per sample, so slow drift of the
 * machine (thermal, other load) hits the baseline and the methods alike; the order is rotated from
 * unit to unit so no method always runs right after the baseline. A unit's records are appended to
 * the results file together when it finishes. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench.h"
#include "draft_ensemble.h"
#include "mmprompt.h"

/* ------------------------------------------------------------------------------------------------
 * Configuration */

void vs_bench_config_default(vs_bench_config *c) {
    memset(c, 0, sizeof(*c));
    c->split = "test";
    c->methods[0] = "ar", c->methods[1] = "m", c->methods[2] = "t";
    c->n_methods = 3;
    c->gammas[0] = 5;
    c->n_gammas = 1;
    c->temps[0] = 0;
    c->n_temps = 1;
    c->turns[0] = 1, c->turns[1] = 2;
    c->n_turns = 2;
    c->threads = 1;
    c->n_predict = 128;
    c->repeat = 1;
    c->kv_type = VS_TYPE_F16;
    c->draft_kv_type = VS_TYPE_BF16;
    c->seed = 1;
    c->progress = true;
}

static vs_status mkdir_p(const char *dir, vs_error *err) {
    char buf[4096];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof(buf))
        return vs_error_set(err, VS_ERR_INVALID, "bad output directory '%s'", dir);
    memcpy(buf, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != 0) continue;
        char c = buf[i];
        buf[i] = 0;
        if (mkdir(buf, 0777) && errno != EEXIST)
            return vs_error_set(err, VS_ERR_IO, "%s: cannot create: %s", buf, strerror(errno));
        buf[i] = c;
    }
    struct stat sb;
    if (stat(dir, &sb) || !S_ISDIR(sb.st_mode))
        return vs_error_set(err, VS_ERR_IO, "%s: not a directory", dir);
    return VS_OK;
}

/* models_dir/name, or name itself when absolute. */
static void model_path(char *buf, size_t cap, const char *dir, const char *name) {
    if (name[0] == '/' || !dir || !dir[0])
        snprintf(buf, cap, "%s", name);
    else
        snprintf(buf, cap, "%s/%s", dir, name);
}

static bool file_exists(const char *path, int64_t *bytes) {
    struct stat sb;
    if (stat(path, &sb) || !S_ISREG(sb.st_mode)) return false;
    if (bytes) *bytes = (int64_t)sb.st_size;
    return true;
}

/* The model files: target, its mmproj, the LLaVA-recipe drafter and its mmproj, MASSV's two, the MSD
 * and EAGLE heads, the DREAM model. */
enum { N_FILES = 9 };

/* The header line: what must be equal for results to be comparable (not the method / gamma / limit
 * lists: a resumed run may add cells). */
static char *make_header(const vs_bench_config *c, const char *const paths[N_FILES], const bool heads[N_FILES],
                         const vs_world_dataset *d, int32_t n_ctx) {
    static const char *const keys[N_FILES] = {"target", "target_mmproj", "draft",      "draft_mmproj", "massv",
                                              "massv_mmproj", "msd_head", "eagle_head", "dream"};
    vs_json_writer w;
    vs_json_writer_init(&w);
    vs_json_obj_begin(&w);
    vs_json_kv_str(&w, "type", "header");
    vs_json_kv_str(&w, "format", "vlmspec-bench-results");
    vs_json_kv_int(&w, "version", 1);
    vs_json_key(&w, "models");
    vs_json_obj_begin(&w);
    for (int i = 0; i < N_FILES; i++) { /* the heads only when a method reads them (older headers stay) */
        if (i >= 6 && !heads[i]) continue;
        int64_t bytes = 0;
        vs_json_key(&w, keys[i]);
        if (!file_exists(paths[i], &bytes)) {
            vs_json_null(&w);
            continue;
        }
        vs_json_obj_begin(&w);
        vs_json_kv_str(&w, "path", paths[i]);
        vs_json_kv_int(&w, "bytes", bytes);
        vs_json_obj_end(&w);
    }
    vs_json_obj_end(&w);
    vs_json_kv_str(&w, "data", c->data_dir);
    vs_json_kv_int(&w, "data_seed", (int64_t)d->seed);
    vs_json_kv_str(&w, "split", c->split);
    vs_json_kv_int(&w, "n_predict", c->n_predict);
    vs_json_kv_int(&w, "n_ctx", n_ctx);
    vs_json_kv_str(&w, "kv_type", vs_type_name(c->kv_type));
    vs_json_kv_str(&w, "draft_kv_type", vs_type_name(c->draft_kv_type));
    vs_json_kv_bool(&w, "ignore_eos", c->ignore_eos);
    vs_json_kv_int(&w, "seed", (int64_t)c->seed);
    vs_json_kv_int(&w, "threads", c->threads);
    if (c->repeat > 1) vs_json_kv_int(&w, "repeat", c->repeat); /* 1 keeps older headers valid */
    vs_json_kv_str(&w, "second_turn_context", "dataset reference answer");
    vs_json_obj_end(&w);
    char *s = vs_json_writer_take(&w, NULL);
    vs_json_writer_free(&w);
    return s;
}

/* ------------------------------------------------------------------------------------------------
 * One turn's request */

/* Images the prompt of turn t (0-based) shows: those of turns 0..t. */
static int turn_images(const vs_world_sample *s, int t) {
    int n = 0;
    for (int k = 0; k <= t; k++) n = VS_MAX(n, s->turns[k].first_image + s->turns[k].n_images);
    return n;
}

typedef struct turn_req {
    vs_request rq;
    vs_req_image img[VS_WORLD_MAX_IMAGES];
    char *text; /* the conversation text (earlier turns with the dataset's reference answers) */
} turn_req;

static vs_status turn_req_build(turn_req *tr, const vs_world_sample *s, int t, const vs_bench_config *c,
                                int64_t max_rows, vs_error *err) {
    memset(tr, 0, sizeof(*tr));
    vs_request_default(&tr->rq);
    if (!(tr->text = vs_world_prompt(s, t, false))) return vs_error_set(err, VS_ERR_NOMEM, "out of memory");
    const int ni = turn_images(s, t);
    for (int i = 0; i < ni; i++) tr->img[i] = (vs_req_image){.path = s->images[i]};
    tr->rq.prompt = tr->text;
    tr->rq.images = tr->img;
    tr->rq.n_images = ni;
    tr->rq.max_prompt_rows = max_rows;
    tr->rq.n_predict = c->n_predict;
    tr->rq.ignore_eos = c->ignore_eos;
    return VS_OK;
}

/* ------------------------------------------------------------------------------------------------
 * The run */

typedef struct cell {
    const vs_method *m;
    int mi; /* index into the configured methods (drafters[]) */
    int32_t gamma;
    bool missing; /* not in the results file yet */
    vs_result run;  /* the latest run */
    vs_result best; /* the fastest run so far (config repeat); its records are written */
    double t_caption, best_t_caption;
} cell;

/* Sample order: round-robin over suites, the first `limit` of each. */
static int64_t plan_order(const vs_world_dataset *d, int64_t limit, int64_t *order) {
    int64_t first[VS_WORLD_N_SUITES], count[VS_WORLD_N_SUITES] = {0};
    for (int s = 0; s < VS_WORLD_N_SUITES; s++) first[s] = -1;
    for (int64_t i = 0; i < d->n; i++) {
        int s = d->samples[i].suite;
        if (first[s] < 0) first[s] = i;
        count[s]++;
    }
    int64_t n = 0;
    int64_t taken[VS_WORLD_N_SUITES] = {0};
    int64_t cursor[VS_WORLD_N_SUITES];
    for (int s = 0; s < VS_WORLD_N_SUITES; s++) cursor[s] = first[s];
    for (bool more = true; more;) {
        more = false;
        for (int s = 0; s < VS_WORLD_N_SUITES; s++) {
            if (first[s] < 0 || taken[s] >= count[s] || (limit > 0 && taken[s] >= limit)) continue;
            /* the next sample of suite s in file order */
            while (cursor[s] < d->n && (int)d->samples[cursor[s]].suite != s) cursor[s]++;
            if (cursor[s] >= d->n) continue;
            order[n++] = cursor[s]++;
            taken[s]++;
            more = true;
        }
    }
    return n;
}

static vs_status check_config(const vs_bench_config *c, vs_error *err) {
    if (!c->models_dir || !c->data_dir || !c->out_dir)
        return vs_error_set(err, VS_ERR_INVALID, "bench: --models, --data and --out are required");
    if (c->n_methods < 1 || c->n_methods > VS_BENCH_MAX_LIST)
        return vs_error_set(err, VS_ERR_INVALID, "bench: %d methods (1..%d)", c->n_methods,
                            VS_BENCH_MAX_LIST);
    for (int i = 0; i < c->n_methods; i++) {
        if (!vs_method_find(c->methods[i])) {
            char names[512] = "";
            int n;
            const vs_method *t = vs_methods(&n);
            for (int k = 0; k < n; k++)
                snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s", k ? ", " : "",
                         t[k].name);
            return vs_error_set(err, VS_ERR_INVALID, "bench: unknown method '%s' (known: %s)", c->methods[i],
                                names);
        }
        for (int k = 0; k < i; k++)
            if (!strcmp(c->methods[i], c->methods[k]))
                return vs_error_set(err, VS_ERR_INVALID, "bench: method '%s' listed twice", c->methods[i]);
    }
    if (c->n_gammas < 1 || c->n_gammas > VS_BENCH_MAX_LIST)
        return vs_error_set(err, VS_ERR_INVALID, "bench: no gamma");
    for (int i = 0; i < c->n_gammas; i++)
        if (c->gammas[i] < 1 || c->gammas[i] > VS_SPEC_MAX_GAMMA)
            return vs_error_set(err, VS_ERR_INVALID, "bench: gamma %d outside [1, %d]", c->gammas[i],
                                VS_SPEC_MAX_GAMMA);
    if (c->n_temps < 1 || c->n_temps > VS_BENCH_MAX_LIST)
        return vs_error_set(err, VS_ERR_INVALID, "bench: no temperature");
    for (int i = 0; i < c->n_temps; i++)
        if (!(c->temps[i] >= 0 && c->temps[i] <= 100))
            return vs_error_set(err, VS_ERR_INVALID, "bench: temperature %g outside [0, 100]", c->temps[i]);
    if (c->n_turns < 1 || c->n_turns > 2)
        return vs_error_set(err, VS_ERR_INVALID, "bench: turns must be 1 and/or 2");
    for (int i = 0; i < c->n_turns; i++)
        if (c->turns[i] < 1 || c->turns[i] > VS_WORLD_MAX_TURNS)
            return vs_error_set(err, VS_ERR_INVALID, "bench: turn %d outside [1, %d]", c->turns[i],
                                VS_WORLD_MAX_TURNS);
    if (c->threads < 1) return vs_error_set(err, VS_ERR_INVALID, "bench: threads %d < 1", c->threads);
    if (c->repeat < 1 || c->repeat > 100)
        return vs_error_set(err, VS_ERR_INVALID, "bench: repeat %d outside [1, 100]", c->repeat);
    if (c->n_predict < 1) return vs_error_set(err, VS_ERR_INVALID, "bench: token limit %d < 1", c->n_predict);
    return VS_OK;
}

typedef struct runner {
    const vs_bench_config *c;
    vs_models *models;
    vs_session *sess;
    const vs_method *meth[VS_BENCH_MAX_LIST + 1]; /* "ar" first, then the list */
    const char *spec[VS_BENCH_MAX_LIST + 1];      /* the names as given (with a tree shape: methods.h) */
    int n_meth;
    vs_world_dataset *d;
    vs_bench_results res;
    vs_bench_results_file rf;
    int32_t n_ctx;
} runner;

static bool uses(const runner *r, vs_method_role f) {
    for (int i = 0; i < r->n_meth; i++)
        if (r->meth[i]->role == f) return true;
    return false;
}

/* The model set (drafters only when a method uses them; the projectors when their files exist) and the
 * session whose engine and drafters every cell runs on. Every method's drafter is made here, so a missing
 * file is reported before the first run. */
static vs_status load_models(runner *r, const char *const paths[N_FILES], vs_error *err) {
    const vs_bench_config *c = r->c;
    vs_models_opts mo = {.model = paths[0], .threads = c->threads, .warm_up = true};
    if (file_exists(paths[1], NULL)) mo.mmproj = paths[1];
    const vs_method_role roles[2] = {VS_ROLE_LLAVA, VS_ROLE_MASSV};
    for (int k = 0; k < 2; k++) {
        if (!uses(r, roles[k])) continue;
        mo.draft[roles[k]] = paths[2 + 2 * k];
        if (file_exists(paths[3 + 2 * k], NULL)) mo.draft_mmproj[roles[k]] = paths[3 + 2 * k];
    }
    if (uses(r, VS_ROLE_MSD)) mo.draft[VS_ROLE_MSD] = paths[6];
    if (uses(r, VS_ROLE_EAGLE)) mo.draft[VS_ROLE_EAGLE] = paths[7];
    if (uses(r, VS_ROLE_DREAM)) mo.draft[VS_ROLE_DREAM] = paths[8];
    bool captions = false;
    for (int i = 0; i < r->n_meth; i++) captions |= r->meth[i]->captions;
    if (captions && !mo.draft_mmproj[VS_ROLE_LLAVA])
        return vs_error_set(err, VS_ERR_INVALID, "caption drafting needs the drafter's projector (%s)", paths[3]);
    if (!(r->models = vs_models_load(&mo, err))) return err->code;
    vs_session_opts so = {
        .n_ctx = c->n_ctx, .kv_type = c->kv_type, .draft_n_ctx = c->n_ctx, .draft_kv_type = c->draft_kv_type};
    if (!(r->sess = vs_session_new(r->models, &so, err))) return err->code;
    r->n_ctx = vs_session_n_ctx(r->sess);
    for (int i = 0; i < r->n_meth; i++) {
        vs_draft_cfg dc;
        vs_draft_cfg_default(&dc);
        dc.method = r->spec[i];
        if (vs_session_prepare(r->sess, &dc, err)) return vs_error_wrap(err, "method %s", r->spec[i]);
    }
    return VS_OK;
}

static void runner_free(runner *r) {
    vs_session_free(r->sess);
    vs_models_free(r->models);
    vs_bench_results_close(&r->rf);
    vs_bench_results_free(&r->res);
    vs_world_dataset_free(r->d);
}

/* The cells of a unit (ar first), marking those already in the results. */
static int unit_cells(const runner *r, const vs_world_sample *s, int turn, double temp, cell *cells,
                      int *n_missing) {
    int n = 0;
    *n_missing = 0;
    for (int i = 0; i < r->n_meth; i++) {
        const vs_method *m = r->meth[i];
        int ng = m->kind == VS_METHOD_TARGET ? 1 : r->c->n_gammas;
        for (int g = 0; g < ng; g++) {
            cell *x = &cells[n++]; /* x->run keeps its allocations from unit to unit */
            x->m = m, x->mi = i;
            x->t_caption = 0;
            x->gamma = m->kind == VS_METHOD_TARGET ? 0 : r->c->gammas[g];
            x->missing = vs_bench_results_find(&r->res, s->id, turn, r->spec[i], x->gamma, temp) < 0;
            *n_missing += x->missing;
        }
    }
    return n;
}

/* Runs one unit: the target-only run and every missing cell, in a rotated order; appends the records. */
static vs_status run_unit(runner *r, const vs_world_sample *s, int turn, double temp, turn_req *tr,
                          cell *cells, int nc, vs_bench_run_info *info, vs_progress *pg, int64_t *done,
                          vs_error *err) {
    const vs_bench_config *c = r->c;
    vs_request *rq = &tr->rq;
    rq->sampling = vs_sampler_params_default();
    rq->sampling.temperature = (float)temp;
    /* the unit's seed and run order depend on the unit only (the same after a resume) */
    uint64_t h = 1469598103934665603ull;
    for (const char *p = s->id; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    const uint64_t unit = vs_mix64(h ^ vs_mix64((uint64_t)turn * 1000003u + (uint64_t)llround(temp * 1000)));
    rq->sampling.seed = vs_mix64(c->seed ^ unit);
    const int rot = (int)(unit % (uint64_t)nc);
    int base = -1;
    for (int i = 0; i < nc; i++)
        if (cells[i].m->kind == VS_METHOD_TARGET) base = i;
    vs_status st = VS_OK;
    /* repeat: the whole rotated order again (drift hits every cell alike); each cell keeps its fastest
     * run. Greedy runs repeat token for token; sampled ones too (the seed depends on the unit only). */
    for (int rep = 0; rep < c->repeat && !st; rep++) {
        for (int k = 0; k < nc && !st; k++) {
            cell *x = &cells[(k + rot) % nc];
            if (!x->missing && x->m->kind != VS_METHOD_TARGET) continue;
            rq->draft.method = r->spec[x->mi];
            rq->draft.gamma = x->gamma;
            st = vs_session_run(r->sess, rq, &x->run, err);
            const vs_draft_ens_stats *es = x->run.drafter ? vs_draft_ens_get_stats(x->run.drafter) : NULL;
            x->t_caption = es ? es->t_caption : 0;
            if (st) {
                vs_error_wrap(err, "sample %s turn %d method %s gamma %d", s->id, turn, r->spec[x->mi], x->gamma);
                break;
            }
            if (rep == 0 || x->run.log.t_total < x->best.log.t_total) {
                vs_result tmp = x->best; /* swap: both keep their allocations */
                x->best = x->run, x->run = tmp;
                x->best_t_caption = x->t_caption;
            }
            (*done)++;
            if (rep == 0) info->n_run += x->missing;
            if (pg) vs_progress_update(pg, *done, "%s t%d %s", s->id, turn, r->spec[x->mi]);
        }
    }
    if (st) return st;
    /* records */
    vs_bench_record *recs = vs_calloc((size_t)nc, sizeof(vs_bench_record));
    if (!recs) return vs_error_set(err, VS_ERR_NOMEM, "out of memory");
    int nr = 0;
    for (int i = 0; i < nc; i++) {
        cell *x = &cells[i];
        if (!x->missing) continue;
        vs_bench_record *rec = &recs[nr++];
        memset(rec, 0, sizeof(*rec));
        snprintf(rec->sample, sizeof(rec->sample), "%s", s->id);
        snprintf(rec->suite, sizeof(rec->suite), "%s", vs_world_suite_name(s->suite));
        rec->turn = turn;
        snprintf(rec->turn_kind, sizeof(rec->turn_kind), "%s",
                 vs_world_turn_kind_name(s->turns[turn - 1].kind));
        snprintf(rec->method, sizeof(rec->method), "%s", r->spec[x->mi]);
        rec->temp = temp;
        rec->n_images = x->best.n_images;
        rec->t_vision = x->best.t_vision;
        rec->t_caption = x->best_t_caption;
        rec->identical = -1;
        vs_bench_record_fill(rec, &x->best.log, &cells[base].best.log);
        if (temp > 0 || x->m->kind == VS_METHOD_TARGET)
            rec->identical = -1; /* sampling: differs by design */
        else if (!rec->identical && x->m->kind != VS_METHOD_TARGET) {
            info->n_mismatch++;
            vs_log("bench: WARNING: greedy output of %s (gamma %d) differs from target-only on %s turn %d\n",
                   r->spec[x->mi], x->gamma, s->id, turn);
        }
        const vs_spec_log *bl = &x->best.log;
        char *text = vs_detokenize(vs_models_tokenizer(r->models), bl->tokens, bl->n_tokens, 0, NULL, NULL);
        rec->correct = text ? (int8_t)vs_world_check(s, turn - 1, text, NULL) : -1;
        vs_free(text);
    }
    st = vs_bench_results_append(&r->rf, recs, nr, err);
    for (int i = 0; !st && i < nr; i++) st = vs_bench_results_add(&r->res, &recs[i], err);
    vs_free(recs);
    return st;
}

vs_status vs_bench_run(const vs_bench_config *c, vs_bench_run_info *info, vs_error *err) {
    vs_bench_run_info dummy;
    if (!info) info = &dummy;
    memset(info, 0, sizeof(*info));
    const double t_start = vs_time_now();
    vs_status st = check_config(c, err);
    if (st) return st;
    runner r = {.c = c};
    vs_bench_results_init(&r.res);
    /* "ar" first, always */
    r.spec[r.n_meth] = "ar";
    r.meth[r.n_meth++] = vs_method_find("ar");
    for (int i = 0; i < c->n_methods; i++)
        if (strcmp(c->methods[i], "ar")) r.spec[r.n_meth] = c->methods[i], r.meth[r.n_meth++] = vs_method_find(c->methods[i]);
    if (r.n_meth > VS_BENCH_MAX_LIST + 1) return vs_error_set(err, VS_ERR_INVALID, "bench: too many methods");

    char paths[N_FILES][4096];
    const char *names[N_FILES] = {c->target ? c->target : VS_BENCH_FILE_TARGET,
                            c->target_mmproj ? c->target_mmproj : VS_BENCH_FILE_TARGET_MMPROJ,
                            c->draft ? c->draft : VS_BENCH_FILE_DRAFT,
                            c->draft_mmproj ? c->draft_mmproj : VS_BENCH_FILE_DRAFT_MMPROJ,
                            c->massv ? c->massv : VS_BENCH_FILE_MASSV,
                            c->massv_mmproj ? c->massv_mmproj : VS_BENCH_FILE_MASSV_MMPROJ,
                            c->msd_head ? c->msd_head : VS_BENCH_FILE_MSD,
                            c->eagle_head ? c->eagle_head : VS_BENCH_FILE_EAGLE,
                            c->dream ? c->dream : VS_BENCH_FILE_DREAM};
    const char *pp[N_FILES];
    for (int i = 0; i < N_FILES; i++)
        model_path(paths[i], sizeof(paths[i]), c->models_dir, names[i]), pp[i] = paths[i];

    uint32_t mask = c->suites ? c->suites : VS_WORLD_DEFAULT_SUITES; /* drills are training data, not a benchmark */
    int64_t *order = NULL;
    char *header = NULL;
    cell *cells = NULL;
    turn_req tr = {0};
    char res_path[4200];
    snprintf(res_path, sizeof(res_path), "%s/results.jsonl", c->out_dir);

    if (!(r.d = vs_world_load(c->data_dir, c->split, mask, err))) {
        st = err->code;
        goto done;
    }
    if ((st = mkdir_p(c->out_dir, err))) goto done;
    if ((st = load_models(&r, pp, err))) goto done;
    const bool heads[N_FILES] = {[6] = uses(&r, VS_ROLE_MSD), [7] = uses(&r, VS_ROLE_EAGLE),
                                 [8] = uses(&r, VS_ROLE_DREAM)};
    if (!(header = make_header(c, pp, heads, r.d, r.n_ctx))) {
        st = vs_error_set(err, VS_ERR_NOMEM, "out of memory");
        goto done;
    }
    if (c->fresh && remove(res_path) && errno != ENOENT) {
        st = vs_error_set(err, VS_ERR_IO, "%s: cannot remove: %s", res_path, strerror(errno));
        goto done;
    }
    if ((st = vs_bench_results_load(res_path, &r.res, err))) goto done;
    if (r.res.n_dropped && !c->quiet)
        vs_log("bench: %s: dropped %lld incomplete line(s) of an interrupted run\n", res_path,
               (long long)r.res.n_dropped);
    if ((st = vs_bench_results_open(&r.rf, res_path, &r.res, header, err))) goto done;

    /* the plan */
    order = vs_malloc(sizeof(int64_t) * (size_t)VS_MAX(r.d->n, 1));
    int max_cells = 1 + (r.n_meth - 1) * c->n_gammas;
    cells = vs_calloc((size_t)max_cells, sizeof(cell));
    if (!order || !cells) {
        st = vs_error_set(err, VS_ERR_NOMEM, "out of memory");
        goto done;
    }
    const int64_t n_samples = plan_order(r.d, c->limit, order);
    int64_t total_runs = 0;
    for (int64_t oi = 0; oi < n_samples; oi++) {
        const vs_world_sample *s = &r.d->samples[order[oi]];
        for (int ti = 0; ti < c->n_turns; ti++) {
            if (c->turns[ti] > s->n_turns) continue;
            for (int k = 0; k < c->n_temps; k++) {
                int miss = 0;
                int nc = unit_cells(&r, s, c->turns[ti], c->temps[k], cells, &miss);
                info->n_units++;
                info->n_cells += nc;
                info->n_done_before += nc - miss;
                /* the baseline always runs when anything is missing (it pairs the timings) */
                if (miss) total_runs += (int64_t)c->repeat * (miss + !cells[0].missing);
            }
        }
    }
    if (!c->quiet)
        vs_log("bench: %lld samples, %lld units, %lld cells (%lld done before), %lld runs to do; results in "
               "%s\n",
               (long long)n_samples, (long long)info->n_units, (long long)info->n_cells,
               (long long)info->n_done_before, (long long)total_runs, res_path);
    vs_progress pg;
    if (c->progress) vs_progress_begin(&pg, "bench spec", total_runs);
    int64_t done_runs = 0;
    /* a prompt must leave room for the whole answer and the longest draft */
    int32_t max_gamma = 0;
    for (int i = 0; i < c->n_gammas; i++) max_gamma = VS_MAX(max_gamma, c->gammas[i]);
    const int32_t prompt_room = r.n_ctx - c->n_predict - max_gamma - 1;
    for (int64_t oi = 0; oi < n_samples && !st; oi++) {
        const vs_world_sample *s = &r.d->samples[order[oi]];
        for (int ti = 0; ti < c->n_turns && !st; ti++) {
            const int turn = c->turns[ti];
            if (turn > s->n_turns) continue;
            bool built = false;
            for (int k = 0; k < c->n_temps && !st; k++) {
                int miss = 0;
                int nc = unit_cells(&r, s, turn, c->temps[k], cells, &miss);
                if (!miss) continue;
                if (!built) {
                    int64_t rows = 0;
                    st = turn_req_build(&tr, s, turn - 1, c, VS_MAX(prompt_room, 1), err);
                    if (!st) st = vs_session_prompt_rows(r.sess, &tr.rq, &rows, err);
                    if (st && st != VS_ERR_RANGE) vs_error_wrap(err, "sample %s turn %d", s->id, turn);
                    if (st == VS_ERR_RANGE) { /* longer than the context: skip the unit */
                        if (!c->quiet) vs_log("bench: skipping %s turn %d: %s\n", s->id, turn, err->msg);
                        info->n_skipped_units++;
                        st = VS_OK;
                        break;
                    }
                    if (st) break;
                    built = true;
                }
                st = run_unit(&r, s, turn, c->temps[k], &tr, cells, nc, info, c->progress ? &pg : NULL,
                              &done_runs, err);
            }
            vs_free(tr.text);
            tr.text = NULL;
        }
    }
    if (c->progress) vs_progress_end(&pg, done_runs);
done:
    for (int i = 0; cells && i < 1 + (r.n_meth - 1) * c->n_gammas; i++) {
        vs_result_free(&cells[i].run);
        vs_result_free(&cells[i].best);
    }
    vs_free(tr.text);
    vs_free(cells);
    vs_free(order);
    vs_free(header);
    runner_free(&r);
    info->seconds = vs_time_now() - t_start;
    return st;
}

/* ------------------------------------------------------------------------------------------------
 * Random model sets */

void vs_bench_random_opts_default(vs_bench_random_opts *o) {
    *o = (vs_bench_random_opts){.n_embd = 256,
                                .n_layer = 4,
                                .n_head = 4,
                                .n_ff = 512,
                                .n_vocab = 512,
                                .n_ctx = 2048,
                                .draft_layers = 1,
                                .type = VS_TYPE_F16,
                                .init_std = 0.1f,
                                .image_size = 56,
                                .patch_size = 14,
                                .vit_width = 64,
                                .vit_blocks = 1,
                                .seed = 1};
}

vs_status vs_bench_make_random_models(const char *dir, const vs_bench_random_opts *o, vs_error *err) {
    if (o->draft_layers < 1 || o->draft_layers >= o->n_layer)
        return vs_error_set(err, VS_ERR_INVALID, "random models: drafter layers %d must be in [1, %d)",
                            o->draft_layers, o->n_layer);
    vs_status st = mkdir_p(dir, err);
    if (st) return st;
    char path[4200];
    vs_lm_random_opts lo = {.n_embd = o->n_embd,
                            .n_layer = o->n_layer,
                            .n_head = o->n_head,
                            .n_head_kv = o->n_head,
                            .n_ff = o->n_ff,
                            .n_ctx = o->n_ctx,
                            .n_vocab = o->n_vocab,
                            .type = o->type,
                            .init_std = o->init_std,
                            .tied = true,
                            .seed = o->seed};
    snprintf(path, sizeof(path), "%s/%s", dir, VS_BENCH_FILE_TARGET);
    if ((st = vs_lm_write_random(&lo, path, err))) return st;
    /* the twin: same seed and width, tied embeddings, fewer layers (the first ones are identical) */
    lo.n_layer = o->draft_layers;
    const char *lm_names[2] = {VS_BENCH_FILE_DRAFT, VS_BENCH_FILE_MASSV};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, lm_names[i]);
        if ((st = vs_lm_write_random(&lo, path, err))) return st;
    }
    vs_vision_config vc;
    vs_vision_config_llava15(&vc);
    vc.image_size = o->image_size, vc.patch_size = o->patch_size, vc.width = o->vit_width;
    vc.ffn = 2 * o->vit_width, vc.n_heads = VS_MAX(1, o->vit_width / 32), vc.n_blocks = o->vit_blocks;
    vc.projection_dim = o->vit_width, vc.proj_hidden = 2 * o->vit_width, vc.proj_out = o->n_embd;
    vc.has_tower = true;
    if ((st = vs_vision_config_check(&vc, "random mmproj", err))) return st;
    snprintf(path, sizeof(path), "%s/%s", dir, VS_BENCH_FILE_TARGET_MMPROJ);
    if ((st = vs_mmproj_write_random(path, &vc, VS_TYPE_F32, o->seed + 7, err))) return st;
    /* drafters' projectors: projector-only copies of the target's, recording the tower's hash */
    vs_mmproj *mp = vs_mmproj_open(path, err);
    if (!mp) return err->code;
    vs_vision_weights w;
    if ((st = vs_mmproj_read_weights(mp, &w, err))) {
        vs_mmproj_free(mp);
        return st;
    }
    vs_vision_config pc = vc;
    pc.has_tower = false;
    vs_mmproj_write_opts wo = {.mat_type = VS_TYPE_F32,
                               .tower_hash = vs_vision_tower_hash(vs_mmproj_tower(mp)),
                               .name = "random drafter projector"};
    const char *mm_names[2] = {VS_BENCH_FILE_DRAFT_MMPROJ, VS_BENCH_FILE_MASSV_MMPROJ};
    for (int i = 0; i < 2 && !st; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, mm_names[i]);
        st = vs_mmproj_write(path, &pc, &w, &wo, err);
    }
    vs_vision_weights_free(&w, &vc);
    vs_mmproj_free(mp);
    return st;
}
