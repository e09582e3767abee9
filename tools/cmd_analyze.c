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

static int cmd_tvd(int argc, char **argv) {
    const char *model = NULL, *mmproj = NULL, *data = NULL, *split = "test", *suites = "all", *json = NULL;
    const char *svg = NULL, *title = NULL, *mode = "m", *tokens = NULL;
    int threads = 2, bins = 20;
    vs_tvd_opts o = {.max_tokens = 256};
    draft_spec ds[MAX_DRAFTERS];
    int n_ds = 0, rc = 2;
    tvd_cli_ctx cx = {0};
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            rc = 0;
            goto out;
        }
        if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            cx.quiet = true;
            continue;
        }
        if (!strcmp(a, "--second-turns")) {
            o.second_turns = true;
            continue;
        }
        if (!(v = cli_value(CMD, argc, argv, &i))) goto out;
        if (!strcmp(a, "-m") || !strcmp(a, "--model") || !strcmp(a, "--target"))
            model = v;
        else if (!strcmp(a, "--mmproj"))
            mmproj = v;
        else if (!strcmp(a, "--data"))
            data = v;
        else if (!strcmp(a, "--split"))
            split = v;
        else if (!strcmp(a, "--suite") || !strcmp(a, "--suites"))
            suites = v;
        else if (!strcmp(a, "--json"))
            json = v;
        else if (!strcmp(a, "--tokens"))
            tokens = v;
        else if (!strcmp(a, "-o") || !strcmp(a, "--output"))
            svg = v;
        else if (!strcmp(a, "--title"))
            title = v;
        else if (!strcmp(a, "--mode"))
            mode = v;
        else if (!strcmp(a, "--drafter") || !strcmp(a, "--draft")) { /* --draft: the older spelling */
            if (n_ds == MAX_DRAFTERS) {
                cli_fail(CMD, "at most %d drafters", MAX_DRAFTERS);
                goto out;
            }
            if (!parse_draft(v, &ds[n_ds])) {
                vs_free(ds[n_ds].buf);
                cli_fail(CMD, "%s %s: expected NAME=LM.gguf[,MMPROJ.gguf]", a, v);
                goto out;
            }
            n_ds++;
        } else if (!strcmp(a, "--limit")) {
            if (!cli_parse_i64(CMD, a, v, 1, INT64_MAX, &o.limit)) goto out;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict") || !strcmp(a, "--max-tokens")) {
            if (!cli_parse_int(CMD, a, v, 1, 1 << 20, &o.max_tokens)) goto out;
        } else if (!strcmp(a, "--bins")) {
            if (!cli_parse_int(CMD, a, v, 1, 1000, &bins)) goto out;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!cli_parse_int(CMD, a, v, 1, 1024, &threads)) goto out;
        } else {
            fprintf(stderr, "vlmspec %s: unknown option '%s'\n", CMD, a);
            usage(stderr);
            goto out;
        }
    }
    if (!strcmp(mode, "m") || !strcmp(mode, "M"))
        o.text_only = false;
    else if (!strcmp(mode, "t") || !strcmp(mode, "T"))
        o.text_only = true;
    else {
        cli_fail(CMD, "--mode %s: expected m or t", mode);
        goto out;
    }
    if (!model || !mmproj || !data) {
        cli_fail(CMD, "tvd: --model, --mmproj and --data are required");
        goto out;
    }
    if (n_ds == 0) {
        cli_fail(CMD, "tvd: at least one --drafter is required");
        goto out;
    }
    for (int i = 0; i < n_ds; i++)
        for (int j = 0; j < i; j++)
            if (!strcmp(ds[i].name, ds[j].name)) {
                cli_fail(CMD, "tvd: two drafters named '%s' (use NAME=...)", ds[i].name);
                goto out;
            }
    vs_error err = {0};
    if (vs_world_parse_suites(suites, &o.suites, &err)) {
        cli_fail_err(CMD, &err);
        goto out;
    }

    rc = 1;
    vs_lm *lm = NULL, *dlm[MAX_DRAFTERS] = {0};
    vs_mmproj *mm = NULL, *dmm[MAX_DRAFTERS] = {0};
    vs_tokenizer *tok = NULL;
    vs_threadpool *tp = NULL;
    vs_world_dataset *d = NULL;
    vs_tvd_result res = {0};
    vs_tvd_drafter dr[MAX_DRAFTERS];
    if (!(lm = vs_lm_load(model, &err)) || !(mm = vs_mmproj_open(mmproj, &err))) goto fail;
    if (!(tok = vs_tokenizer_from_gguf(vs_lm_gguf(lm), &err))) goto fail;
    for (int i = 0; i < n_ds; i++) {
        if (!(dlm[i] = vs_lm_load(ds[i].lm_path, &err))) goto fail;
        if (ds[i].mm_path && !(dmm[i] = vs_mmproj_open(ds[i].mm_path, &err))) goto fail;
        dr[i] = (vs_tvd_drafter){.name = ds[i].name, .lm = dlm[i], .mm = dmm[i]};
    }
    if (!(tp = vs_threadpool_new(threads, &err))) goto fail;
    if (!(d = vs_world_load(data, split, o.suites, &err))) goto fail;
    int64_t n_turns = 0, per[VS_WORLD_N_SUITES] = {0};
    for (int64_t i = 0; i < d->n; i++)
        if (o.limit <= 0 || per[d->samples[i].suite]++ < o.limit)
            n_turns += o.second_turns ? d->samples[i].n_turns : 1;
    fprintf(stderr, "[tvd] target %s + %s, %d drafter(s), mode %s, %s/%s.jsonl: %lld turns (%s)\n", model,
            mmproj, n_ds, o.text_only ? "T" : "M", data, split, (long long)n_turns,
            o.second_turns ? "all turns" : "first turns");
    vs_progress_begin(&cx.pr, "tvd", n_turns);
    o.on_turn = on_turn, o.on_turn_ctx = &cx;
    double t0 = vs_time_now();
    vs_status st = vs_tvd_run(lm, mm, tok, tp, dr, n_ds, d, &o, &res, &err);
    if (!cx.quiet && st == VS_OK) vs_progress_end(&cx.pr, res.turns);
    if (st != VS_OK) goto fail;
    const double sec = vs_time_now() - t0;
    char *rep = vs_tvd_report(&res, bins);
    if (!rep) {
        cli_fail(CMD, "out of memory");
        goto done;
    }
    fputs(rep, stdout);
    vs_free(rep);
    const vs_eval_counts *tc = &res.eval.total;
    printf("\ntarget: %lld turns answered in %.1f s; first-turn accuracy %.1f%% (%lld/%lld)",
           (long long)res.turns, sec, tc->first_turns ? 100.0 * tc->first_correct / tc->first_turns : 0.0,
           (long long)tc->first_correct, (long long)tc->first_turns);
    if (o.second_turns && tc->second_turns)
        printf(", second-turn %.1f%% (%lld/%lld)", 100.0 * tc->second_correct / tc->second_turns,
               (long long)tc->second_correct, (long long)tc->second_turns);
    printf("\n");
    if (svg) {
        vs_plot *p = vs_tvd_plot(&res, bins, title, &err);
        if (!p || vs_plot_write(p, svg, &err) != VS_OK) {
            vs_plot_free(p);
            goto fail;
        }
        vs_plot_free(p);
        fprintf(stderr, "[tvd] wrote %s\n", svg);
    }
    if (json) {
        vs_json_writer w;
        vs_json_writer_init(&w);
        vs_json_obj_begin(&w);
        vs_json_kv_str(&w, "target", model);
        vs_json_kv_str(&w, "mmproj", mmproj);
        vs_json_kv_str(&w, "data", data);
        vs_json_kv_str(&w, "split", split);
        vs_json_kv_str(&w, "mode", o.text_only ? "t" : "m");
        vs_json_kv_int(&w, "limit", o.limit);
        vs_json_kv_int(&w, "max_tokens", o.max_tokens);
        vs_json_kv_bool(&w, "second_turns", o.second_turns);
        vs_json_key(&w, "files");
        vs_json_arr_begin(&w);
        for (int i = 0; i < n_ds; i++) {
            vs_json_obj_begin(&w);
            vs_json_kv_str(&w, "name", ds[i].name);
            vs_json_kv_str(&w, "lm", ds[i].lm_path);
            if (ds[i].mm_path) vs_json_kv_str(&w, "mmproj", ds[i].mm_path);
            vs_json_obj_end(&w);
        }
        vs_json_arr_end(&w);
        vs_json_key(&w, "tvd");
        vs_tvd_json(&res, bins, &w);
        vs_json_key(&w, "target_accuracy"); /* the checker's verdicts on the analysed turns */
        vs_json_obj_begin(&w);
        vs_json_kv_int(&w, "first_turns", tc->first_turns);
        vs_json_kv_int(&w, "first_correct", tc->first_correct);
        if (o.second_turns) {
            vs_json_kv_int(&w, "second_turns", tc->second_turns);
            vs_json_kv_int(&w, "second_correct", tc->second_correct);
        }
        vs_json_obj_end(&w);
        vs_json_obj_end(&w);
        char *s = vs_json_writer_take(&w, NULL);
        vs_json_writer_free(&w);
        vs_status ws = write_text(json, s, &err);
        vs_free(s);
        if (ws != VS_OK) goto fail;
    }
    if (tokens && write_tokens(tokens, &res, d, &err) != VS_OK) goto fail;
    rc = 0;
    goto done;
fail:
    if (!cx.quiet && res.turns) fprintf(stderr, "\n");
    cli_fail_err(CMD, &err);
done:
    vs_tvd_result_free(&res);
    vs_world_dataset_free(d);
    vs_threadpool_free(tp);
    for (int i = 0; i < n_ds; i++) vs_mmproj_free(dmm[i]), vs_lm_free(dlm[i]);
    vs_tokenizer_free(tok);
    vs_mmproj_free(mm);
    vs_lm_free(lm);
out:
    for (int i = 0; i < n_ds; i++) vs_free(ds[i].buf);
    return rc;
}

int vs_cmd_analyze(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "tvd")) return cmd_tvd(argc, argv);
    cli_fail(CMD, "unknown analysis '%s' (available: tvd)", argv[1]);
    return 2;
}
