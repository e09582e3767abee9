/* vlmspec analyze: analyses of drafters against a target.
 *   analyze tvd   per-token total variation distance between the target's and each drafter's
 *                 next-token distributions along the target's greedy answers on the world's test split
 *                 (MASSV fig. 4): table, text histogram, SVG with one histogram series per drafter,
 *                 optional JSON. The work is src/measure/analyze.h. */
#include <stdio.h>
#include <string.h>

#include "analyze.h"
#include "outfile.h"
#include "cli.h"

#define CMD "analyze"
#define MAX_DRAFTERS 16

static void usage(FILE *f) {
    fprintf(
        f,
        "usage: vlmspec analyze tvd --model T.gguf --mmproj T-mm.gguf --drafter NAME=D.gguf[,D-mm.gguf]\n"
        "                           [--drafter ...] --data DIR [options]\n"
        "For each selected test sample the target answers greedily (as `vlmspec eval` does); then the\n"
        "prompt + answer is teacher-forced through the target and through every drafter, and at every\n"
        "answer token (and the end-of-generation token) TVD(p, q) = 1/2 sum |p - q| between the target's\n"
        "and the drafter's next-token distributions (softmax, temperature 1) is recorded. Prints count,\n"
        "mean, median and the shares below 0.1 / above 0.5 per drafter and suite, and a text histogram;\n"
        "-o draws all drafters' histograms on one SVG (MASSV fig. 4).\n"
        "Drafter views: M (default) feeds a drafter with an mmproj the images through its own projector\n"
        "(its own tower if the file has one, else the target's); T replaces each image by \"\\n\". A\n"
        "drafter given without an mmproj is text-only in either mode. Vocabularies must match the\n"
        "target's.\n\n"
        "options:\n"
        "  -m, --model FILE       target LM GGUF (with tokenizer); --target is the same\n"
        "  --mmproj FILE          the target's mmproj (vision tower + projector)\n"
        "  --drafter SPEC         NAME=LM.gguf[,MMPROJ.gguf], or LM.gguf[,MMPROJ.gguf] (name: the file\n"
        "                         name); repeat for several drafters (at most %d)\n"
        "  --data DIR             dataset directory ('vlmspec data gen')\n"
        "  --split S              test (default), train or captions\n"
        "  --suites LIST          comma-separated suites or 'all' (default all)\n"
        "  --limit N              first N samples of each suite (default all)\n"
        "  --mode M               m (default): drafters with an mmproj see the images; t: text-only\n"
        "  --second-turns         analyse second turns too (prompted with the target's own first\n"
        "                         answer); default first turns only\n"
        "  -n, --max-tokens N     tokens per target answer (default 256; also --n-predict)\n"
        "  --bins N               histogram bins over [0, 1] (default 20)\n"
        "  -o, --output FILE      write the SVG histogram\n"
        "  --title TEXT           SVG title\n"
        "  --json FILE            write the summary as JSON ('-' = stdout)\n"
        "  --tokens FILE          write a CSV line per analysed position (sample, suite, turn, index,\n"
        "                         token, eog, one TVD column per drafter)\n"
        "  -t, --threads N        threads (default 2)\n"
        "  -q, --quiet            no progress line\n"
        "  -h, --help             this help\n",
        MAX_DRAFTERS);
}

typedef struct draft_spec {
    char name[128];
    char *lm_path, *mm_path; /* into the copy of the argument */
    char *buf;
} draft_spec;

/* NAME=LM[,MM] or LM[,MM]. */
static bool parse_draft(const char *v, draft_spec *d) {
    memset(d, 0, sizeof(*d));
    if (!(d->buf = vs_strdup(v))) return false;
    char *s = d->buf, *eq = strchr(s, '=');
    if (eq) {
        *eq = 0;
        snprintf(d->name, sizeof(d->name), "%s", s);
        s = eq + 1;
    }
    char *comma = strchr(s, ',');
    if (comma) *comma = 0, d->mm_path = comma + 1;
    d->lm_path = s;
    if (!*d->lm_path || (eq && !d->name[0]) || (comma && !*d->mm_path) ||
        (d->mm_path && strchr(d->mm_path, ',')) || strchr(d->name, ','))
        return false;
    if (!eq) {
        const char *base = strrchr(s, '/');
        base = base ? base + 1 : s;
        size_t n = strlen(base);
        if (n > 5 && !strcmp(base + n - 5, ".gguf")) n -= 5;
        snprintf(d->name, sizeof(d->name), "%.*s", (int)VS_MIN(n, sizeof(d->name) - 1), base);
    }
    return true;
}

typedef struct tvd_cli_ctx {
    vs_progress pr;
    bool quiet;
} tvd_cli_ctx;

static void on_turn(void *ctx, const vs_tvd_progress *p) {
    tvd_cli_ctx *c = ctx;
    if (!c->quiet) vs_progress_update(&c->pr, p->turns, " turns, %lld tokens ", (long long)p->total);
}

static vs_status write_text(const char *path, const char *s, vs_error *err) {
    if (!s) return vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory", path);
    vs_outfile o;
    vs_status st = vs_outfile_open(&o, path, err);
    if (st != VS_OK) return st;
    fprintf(o.f, "%s\n", s);
    return vs_outfile_commit(&o, err);
}

/* One CSV line per analysed position. */
static vs_status write_tokens(const char *path, const vs_tvd_result *r, const vs_world_dataset *d, vs_error *err) {
    vs_outfile o;
    vs_status st = vs_outfile_open(&o, path, err);
    if (st != VS_OK) return st;
    FILE *f = o.f;
    fprintf(f, "sample,suite,turn,index,token,eog");
    for (int k = 0; k < r->n_drafters; k++) fprintf(f, ",%s", r->names[k]);
    fprintf(f, "\n");
    for (int64_t i = 0; i < r->n; i++) {
        const vs_tvd_pos *p = &r->pos[i];
        fprintf(f, "%s,%s,%d,%d,%d,%d", d->samples[p->sample].id,
                vs_world_suite_name((vs_world_suite)p->suite), p->turn, p->index, p->token, p->eog ? 1 : 0);
        for (int k = 0; k < r->n_drafters; k++) fprintf(f, ",%.6f", r->tvd[k][i]);
        fprintf(f, "\n");
    }
    return vs_outfile_commit(&o, err);
}

/* ------------------------------------------------------------------------------------------------
 * flags */

typedef struct draft_list {
    draft_spec ds[MAX_DRAFTERS];
    int n;
} draft_list;

typedef struct tvd_args {
    const char *model, *mmproj, *data, *split, *suites, *json, *svg, *title, *tokens;
    int threads, bins;
    bool quiet;
    vs_tvd_opts o;
    draft_list dl; /* the --drafter specs (their buffers: draft_list_free) */
} tvd_args;

static void draft_list_free(draft_list *l) {
    for (int i = 0; i < l->n; i++) vs_free(l->ds[i].buf);
    l->n = 0;
}

/* --drafter / --draft SPEC: appends to the draft_list at dst. */
/* --draft is the draft length in generate and chat: analyze names its drafters with --drafter. */
static bool refuse_draft(const char *cmd, const char *flag, const char *v, void *dst) {
    (void)dst;
    cli_fail(cmd, "%s %s: analyze takes drafters with --drafter NAME=LM.gguf[,MMPROJ.gguf] (--draft is the draft "
                  "length in generate and chat)", flag, v);
    return false;
}

static bool parse_drafter(const char *cmd, const char *flag, const char *v, void *dst) {
    draft_list *l = dst;
    if (l->n == MAX_DRAFTERS) {
        cli_fail(cmd, "at most %d drafters", MAX_DRAFTERS);
        return false;
    }
    if (!parse_draft(v, &l->ds[l->n])) {
        vs_free(l->ds[l->n].buf);
        cli_fail(cmd, "%s %s: expected NAME=LM.gguf[,MMPROJ.gguf]", flag, v);
        return false;
    }
    l->n++;
    return true;
}

/* --mode m|t (or M|T): sets the bool text_only at dst. */
static bool parse_mode(const char *cmd, const char *flag, const char *v, void *dst) {
    if (!strcmp(v, "m") || !strcmp(v, "M") || !strcmp(v, "t") || !strcmp(v, "T")) {
        *(bool *)dst = v[0] == 't' || v[0] == 'T';
        return true;
    }
    cli_fail(cmd, "%s %s: expected m or t", flag, v);
    return false;
}

/* --limit N: int64_t in [1, INT64_MAX] (a double range cannot hold INT64_MAX). */
static bool parse_limit(const char *cmd, const char *flag, const char *v, void *dst) {
    return cli_parse_i64(cmd, flag, v, 1, INT64_MAX, (int64_t *)dst);
}

/* argv[0] is "tvd". Returns -1 when the options are fine, else the exit status; a->dl holds the drafters
 * parsed so far either way. */
static int tvd_parse(int argc, char **argv, tvd_args *a) {
    memset(a, 0, sizeof(*a));
    a->split = "test", a->suites = "all";
    a->threads = 2, a->bins = 20;
    a->o.max_tokens = 256;
    cli_flags fs = {0};
    cli_flag_add(&fs, "-m|--model|--target", CLI_STR, &a->model, 0, 0);
    cli_flag_add(&fs, "--mmproj", CLI_STR, &a->mmproj, 0, 0);
    cli_flag_fn_add(&fs, "--drafter", parse_drafter, &a->dl);
    cli_flag_fn_add(&fs, "--draft", refuse_draft, NULL); /* the draft length elsewhere: say what to use */
    cli_flag_add(&fs, "--data", CLI_STR, &a->data, 0, 0);
    cli_flag_add(&fs, "--split", CLI_STR, &a->split, 0, 0);
    cli_flag_add(&fs, "--suites", CLI_STR, &a->suites, 0, 0);
    cli_flag_fn_add(&fs, "--limit", parse_limit, &a->o.limit);
    cli_flag_fn_add(&fs, "--mode", parse_mode, &a->o.text_only);
    cli_flag_add(&fs, "--second-turns", CLI_BOOL, &a->o.second_turns, 0, 0);
    cli_flag_add(&fs, "-n|--max-tokens|--n-predict", CLI_INT, &a->o.max_tokens, 1, 1 << 20);
    cli_flag_add(&fs, "--bins", CLI_INT, &a->bins, 1, 1000);
    cli_flag_add(&fs, "-o|--output", CLI_STR, &a->svg, 0, 0);
    cli_flag_add(&fs, "--title", CLI_STR, &a->title, 0, 0);
    cli_flag_add(&fs, "--json", CLI_STR, &a->json, 0, 0);
    cli_flag_add(&fs, "--tokens", CLI_STR, &a->tokens, 0, 0);
    cli_flag_add(&fs, "-t|--threads", CLI_INT, &a->threads, 1, 1024);
    cli_flag_add(&fs, "-q|--quiet", CLI_BOOL, &a->quiet, 0, 0);
    const int r = cli_flags_parse(CMD, argc, argv, &fs, usage);
    if (r >= 0) return r;
    if (!a->model || !a->mmproj || !a->data) return cli_fail(CMD, "tvd: --model, --mmproj and --data are required"), 2;
    if (a->dl.n == 0) return cli_fail(CMD, "tvd: at least one --drafter is required"), 2;
    for (int i = 0; i < a->dl.n; i++)
        for (int j = 0; j < i; j++)
            if (!strcmp(a->dl.ds[i].name, a->dl.ds[j].name))
                return cli_fail(CMD, "tvd: two drafters named '%s' (use NAME=...)", a->dl.ds[i].name), 2;
    vs_error err = {0};
    if (vs_world_parse_suites(a->suites, &a->o.suites, &err)) return cli_fail_err(CMD, &err), 2;
    return -1;
}

/* ------------------------------------------------------------------------------------------------
 * the run */

typedef struct tvd_models {
    vs_lm *lm, *dlm[MAX_DRAFTERS];
    vs_mmproj *mm, *dmm[MAX_DRAFTERS];
    vs_tokenizer *tok;
    vs_threadpool *tp;
    vs_world_dataset *d;
    vs_tvd_drafter dr[MAX_DRAFTERS];
} tvd_models;

/* Loads the target, the drafters, the thread pool and the dataset; false with err set on failure (what was
 * loaded: tvd_models_free). */
static bool tvd_load(const tvd_args *a, tvd_models *m, vs_error *err) {
    if (!(m->lm = vs_lm_load(a->model, err)) || !(m->mm = vs_mmproj_open(a->mmproj, err))) return false;
    if (!(m->tok = vs_tokenizer_from_gguf(vs_lm_gguf(m->lm), err))) return false;
    for (int i = 0; i < a->dl.n; i++) {
        const draft_spec *ds = &a->dl.ds[i];
        if (!(m->dlm[i] = vs_lm_load(ds->lm_path, err))) return false;
        if (ds->mm_path && !(m->dmm[i] = vs_mmproj_open(ds->mm_path, err))) return false;
        m->dr[i] = (vs_tvd_drafter){.name = ds->name, .lm = m->dlm[i], .mm = m->dmm[i]};
    }
    if (!(m->tp = vs_threadpool_new(a->threads, err))) return false;
    return (m->d = vs_world_load(a->data, a->split, a->o.suites, err)) != NULL;
}

static void tvd_models_free(tvd_models *m, int n_drafters) {
    vs_world_dataset_free(m->d);
    vs_threadpool_free(m->tp);
    for (int i = 0; i < n_drafters; i++) vs_mmproj_free(m->dmm[i]), vs_lm_free(m->dlm[i]);
    vs_tokenizer_free(m->tok);
    vs_mmproj_free(m->mm);
    vs_lm_free(m->lm);
}

/* The turns the run will analyse (for the progress line). */
static int64_t count_turns(const vs_world_dataset *d, const vs_tvd_opts *o) {
    int64_t n_turns = 0, per[VS_WORLD_N_SUITES] = {0};
    for (int64_t i = 0; i < d->n; i++)
        if (o->limit <= 0 || per[d->samples[i].suite]++ < o->limit)
            n_turns += o->second_turns ? d->samples[i].n_turns : 1;
    return n_turns;
}

/* The target's accuracy line on stdout. */
static void print_target(const vs_tvd_result *res, bool second_turns, double sec) {
    const vs_eval_counts *tc = &res->eval.total;
    printf("\ntarget: %lld turns answered in %.1f s; first-turn accuracy %.1f%% (%lld/%lld)",
           (long long)res->turns, sec, tc->first_turns ? 100.0 * tc->first_correct / tc->first_turns : 0.0,
           (long long)tc->first_correct, (long long)tc->first_turns);
    if (second_turns && tc->second_turns)
        printf(", second-turn %.1f%% (%lld/%lld)", 100.0 * tc->second_correct / tc->second_turns,
               (long long)tc->second_correct, (long long)tc->second_turns);
    printf("\n");
}

/* --json: the inputs, the TVD summary and the target's accuracy. */
static vs_status write_json(const tvd_args *a, const vs_tvd_result *res, vs_error *err) {
    const vs_tvd_opts *o = &a->o;
    const vs_eval_counts *tc = &res->eval.total;
    vs_json_writer w;
    vs_json_writer_init(&w);
    vs_json_obj_begin(&w);
    vs_json_kv_str(&w, "target", a->model);
    vs_json_kv_str(&w, "mmproj", a->mmproj);
    vs_json_kv_str(&w, "data", a->data);
    vs_json_kv_str(&w, "split", a->split);
    vs_json_kv_str(&w, "mode", o->text_only ? "t" : "m");
    vs_json_kv_int(&w, "limit", o->limit);
    vs_json_kv_int(&w, "max_tokens", o->max_tokens);
    vs_json_kv_bool(&w, "second_turns", o->second_turns);
    vs_json_key(&w, "files");
    vs_json_arr_begin(&w);
    for (int i = 0; i < a->dl.n; i++) {
        vs_json_obj_begin(&w);
        vs_json_kv_str(&w, "name", a->dl.ds[i].name);
        vs_json_kv_str(&w, "lm", a->dl.ds[i].lm_path);
        if (a->dl.ds[i].mm_path) vs_json_kv_str(&w, "mmproj", a->dl.ds[i].mm_path);
        vs_json_obj_end(&w);
    }
    vs_json_arr_end(&w);
    vs_json_key(&w, "tvd");
    vs_tvd_json(res, a->bins, &w);
    vs_json_key(&w, "target_accuracy"); /* the checker's verdicts on the analysed turns */
    vs_json_obj_begin(&w);
    vs_json_kv_int(&w, "first_turns", tc->first_turns);
    vs_json_kv_int(&w, "first_correct", tc->first_correct);
    if (o->second_turns) {
        vs_json_kv_int(&w, "second_turns", tc->second_turns);
        vs_json_kv_int(&w, "second_correct", tc->second_correct);
    }
    vs_json_obj_end(&w);
    vs_json_obj_end(&w);
    char *s = vs_json_writer_take(&w, NULL);
    vs_json_writer_free(&w);
    vs_status st = write_text(a->json, s, err);
    vs_free(s);
    return st;
}

/* The report on stdout, then the files asked for. Returns the exit status (errors printed). */
static int tvd_report(const tvd_args *a, const vs_tvd_result *res, const vs_world_dataset *d, double sec,
                      vs_error *err) {
    char *rep = vs_tvd_report(res, a->bins);
    if (!rep) return cli_fail(CMD, "out of memory");
    fputs(rep, stdout);
    vs_free(rep);
    print_target(res, a->o.second_turns, sec);
    if (a->svg) {
        vs_plot *p = vs_tvd_plot(res, a->bins, a->title, err);
        const bool ok = p && vs_plot_write(p, a->svg, err) == VS_OK;
        vs_plot_free(p);
        if (!ok) return cli_fail_err(CMD, err);
        fprintf(stderr, "[tvd] wrote %s\n", a->svg);
    }
    if (a->json && write_json(a, res, err) != VS_OK) return cli_fail_err(CMD, err);
    if (a->tokens && write_tokens(a->tokens, res, d, err) != VS_OK) return cli_fail_err(CMD, err);
    return 0;
}

/* Loads everything, runs the analysis and reports. Returns the exit status (errors printed). */
static int tvd_run(tvd_args *a) {
    vs_error err = {0};
    tvd_models m = {0};
    vs_tvd_result res = {0};
    tvd_cli_ctx cx = {.quiet = a->quiet};
    int rc = 1;
    if (!tvd_load(a, &m, &err)) {
        cli_fail_err(CMD, &err);
        goto done;
    }
    const int64_t n_turns = count_turns(m.d, &a->o);
    fprintf(stderr, "[tvd] target %s + %s, %d drafter(s), mode %s, %s/%s.jsonl: %lld turns (%s)\n", a->model,
            a->mmproj, a->dl.n, a->o.text_only ? "T" : "M", a->data, a->split, (long long)n_turns,
            a->o.second_turns ? "all turns" : "first turns");
    vs_progress_begin(&cx.pr, "tvd", n_turns);
    a->o.on_turn = on_turn, a->o.on_turn_ctx = &cx;
    const double t0 = vs_time_now();
    if (vs_tvd_run(m.lm, m.mm, m.tok, m.tp, m.dr, a->dl.n, m.d, &a->o, &res, &err) != VS_OK) {
        if (!cx.quiet && res.turns) fprintf(stderr, "\n");
        cli_fail_err(CMD, &err);
        goto done;
    }
    if (!cx.quiet) vs_progress_end(&cx.pr, res.turns);
    rc = tvd_report(a, &res, m.d, vs_time_now() - t0, &err);
done:
    vs_tvd_result_free(&res);
    tvd_models_free(&m, a->dl.n);
    return rc;
}

int vs_cmd_analyze(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "tvd")) {
        cli_fail(CMD, "unknown analysis '%s' (available: tvd)", argv[1]);
        return 2;
    }
    tvd_args a;
    int rc = tvd_parse(argc - 1, argv + 1, &a);
    if (rc < 0) rc = tvd_run(&a);
    draft_list_free(&a.dl);
    return rc;
}
