/* cli_bench_spec: `vlmspec bench spec`. See cli_bench_spec.h and docs/bench.md. */
#include "cli_bench_spec.h"
#include "outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "cli.h"

#define CMD "bench spec"

/* The model benchmark of cmd_bench.c (same executable): its --json output joins the report folder. */
int vs_cmd_bench(int argc, char **argv);

static void usage(FILE *f) {
    fprintf(
        f, "usage: vlmspec bench spec --models DIR --data DIR --out DIR [options]\n"
           "Speculative decoding benchmark: for each sample of the world dataset, target-only decoding and\n"
           "every method x gamma x temperature x turn, interleaved per sample; tau, n-alpha, accepted\n"
           "lengths, times, measured walltime speedups (mean, median) and TABED eq. 1. Results are appended\n"
           "to DIR/results.jsonl (an interrupted run resumes), the report goes next to it: report.md,\n"
           "results.csv, summary.json, *.svg. See docs/bench.md.\n\n"
           "inputs:\n"
           "  --models DIR          model directory: target.gguf, target-mmproj.gguf, draft-llava.gguf,\n"
           "                        draft-llava-mmproj.gguf, draft-massv.gguf, draft-massv-mmproj.gguf,\n"
           "                        msd-head.gguf (the msd methods), eagle-head.gguf (the eagle methods),\n"
           "                        dream.gguf (the dream methods)\n"
           "  --target F, --target-mmproj F, --draft F, --draft-mmproj F, --massv F, --massv-mmproj F,\n"
           "  --msd-head F, --eagle-head F, --dream F\n"
           "                        other file names (relative to --models, or absolute)\n"
           "  --data DIR            world dataset (vlmspec data gen)\n"
           "  --split NAME          split to read (default test)\n"
           "  --suites LIST         suites, e.g. vqa,pope,story (default all but caption)\n"
           "what to measure:\n"
           "  --methods LIST        drafting methods (default ar,m,t; ar = target only, always run);\n"
           "                        --list-methods shows them all\n"
           "  --gamma LIST          draft lengths (default 5)\n"
           "  --temp LIST           temperatures (default 0; 0 = greedy)\n"
           "  --turns LIST          1, 2 or 1,2 (default 1,2); second turns carry the dataset's reference\n"
           "                        answer of the first turn\n"
           "  --limit N             samples per suite (default all)\n"
           "  -n, --max-tokens N    tokens per turn (default 128; also --n-predict)\n"
           "  --repeat N            time every cell N times, interleaved, and record the fastest run\n"
           "                        (default 1; 3-5 steadies speed-ups on a noisy machine)\n"
           "  --ctx N               target cache rows (default the model's context)\n"
           "  --kv-type T           the target's KV cache: f16 (default) or f32\n"
           "  --draft-kv-type T     the drafters' KV caches: bf16 (default), f16 or f32\n"
           "  --ignore-eos          never generate end-of-generation tokens (as llama.cpp's)\n"
           "  --seed S              sampling seed (default 1)\n"
           "  -t, --threads N       threads (default 1)\n"
           "output:\n"
           "  --out DIR             report folder (created); results resume when it holds a run of the same\n"
           "                        configuration\n"
           "  --fresh               discard the results already in --out\n"
           "  --report-only         only rewrite the report from --out's results\n"
           "  --compare-with DIR    compare the median speedups with another run's folder (of the same\n"
           "                        command); exit 1 when one differs by more than the tolerance\n"
           "  --tolerance X         relative tolerance of --compare-with (default 0.05)\n"
           "  --with-model-bench    also run `vlmspec bench -m` on the target and drafters "
           "(model-bench-*.json)\n"
           "  --no-bandwidth        do not measure the memory bandwidth for the machine description\n"
           "  --no-progress         no progress line\n"
           "  -q, --quiet           no informational lines\n"
           "other:\n"
           "  --make-random-models DIR  write a random model set under the default names (for trying the\n"
           "                        harness before trained models exist) and exit\n"
           "  --list-methods        list the methods and exit\n"
           "  -h, --help            this help\n");
}

/* Splits s in place at its commas into out[] (empty items are skipped); the count, or -1 when there are
 * more than cap. */
static int split_list(char *s, const char **out, int cap) {
    int n = 0;
    for (char *tok = strtok(s, ","); tok; tok = strtok(NULL, ",")) {
        if (n == cap) return -1;
        out[n++] = tok;
    }
    return n;
}

/* Runs `vlmspec bench -m MODEL --json -` with its stdout going to path. */
static int model_bench(const char *model, const char *path, int threads) {
    char th[16];
    snprintf(th, sizeof(th), "%d", threads);
    char *args[] = {"bench", "-m", (char *)model, "--json", "-", "-t", th, "--reps", "3", NULL};
    vs_error err = {0};
    vs_outfile o;
    if (fflush(stdout) != 0) return cli_fail(CMD, "standard output: write failed: %s", strerror(errno));
    if (vs_outfile_open(&o, path, &err) != VS_OK) return cli_fail_err(CMD, &err);
    int saved = dup(1);
    if (saved < 0 || dup2(fileno(o.f), 1) < 0) {
        int e = errno;
        if (saved >= 0) close(saved);
        vs_outfile_abort(&o);
        return cli_fail(CMD, "%s: cannot redirect standard output: %s", path, strerror(e));
    }
    int rc = vs_cmd_bench((int)VS_ARRAY_LEN(args) - 1, args);
    bool out_ok = fflush(stdout) == 0 && !ferror(stdout);
    dup2(saved, 1);
    close(saved);
    clearerr(stdout);
    if (rc || !out_ok) {
        vs_outfile_abort(&o);
        if (rc) return cli_fail(CMD, "vlmspec bench -m %s failed (exit %d)", model, rc);
        return cli_fail(CMD, "%s: write failed", path);
    }
    return vs_outfile_commit(&o, &err) == VS_OK ? 0 : cli_fail_err(CMD, &err);
}

/* Prints the headline section of report.md to stdout. */
static void print_headline(const char *out_dir) {
    char path[4200];
    snprintf(path, sizeof(path), "%s/report.md", out_dir);
    uint8_t *d = NULL;
    size_t n = 0;
    if (vs_read_file(path, &d, &n, NULL)) return;
    const char *s = strstr((const char *)d, "## Headline");
    if (s) {
        const char *e = strstr(s + 3, "\n## ");
        fwrite(s, 1, e ? (size_t)(e - s) + 1 : strlen(s), stdout);
    }
    printf("full report: %s\n", path);
    vs_free(d);
}

/* Compares this run's results with another folder's; 0 when every median speedup agrees within tol. */
static int compare(const char *out_dir, const char *ref_dir, double tol) {
    char pa[4200], pb[4200];
    snprintf(pa, sizeof(pa), "%s/results.jsonl", out_dir);
    snprintf(pb, sizeof(pb), "%s/results.jsonl", ref_dir);
    vs_bench_results a, b;
    vs_bench_results_init(&a);
    vs_bench_results_init(&b);
    vs_error err = {0};
    int rc = 1;
    double max_rel = 0;
    if (vs_bench_results_load(pa, &a, &err) || vs_bench_results_load(pb, &b, &err)) {
        cli_fail_err(CMD, &err);
    } else if (b.n == 0) {
        cli_fail(CMD, "--compare-with %s: no results there", ref_dir);
    } else if (vs_bench_compare(a.rec, a.n, b.rec, b.n, NULL, &max_rel, &err)) {
        cli_fail_err(CMD, &err);
    } else {
        printf("\nreproducibility: this run (%s) against %s\n\n", out_dir, ref_dir);
        vs_bench_compare(a.rec, a.n, b.rec, b.n, stdout, &max_rel, &err);
        printf("\nlargest relative difference of a median speedup: %.1f%% (tolerance %.1f%%)\n",
               100 * max_rel, 100 * tol);
        fflush(stdout);
        rc = max_rel > tol ? cli_fail(CMD, "the runs differ by more than the tolerance") : 0;
    }
    vs_bench_results_free(&a);
    vs_bench_results_free(&b);
    return rc;
}

/* The command line: the benchmark's configuration and what else to do. */
typedef struct spec_opts {
    vs_bench_config c;
    char *methods_store; /* the copy of the --methods value that c.methods point into */
    bool report_only, with_model_bench, no_bandwidth, no_progress, list_methods;
    const char *random_dir, *compare_dir;
    double tolerance;
} spec_opts;

/* Splits a copy of the comma list v into items[] (at most cap); the count, or -1. *copy is to be freed. */
static int split_copy(const char *v, const char **items, int cap, char **copy) {
    *copy = vs_strdup(v);
    return *copy ? split_list(*copy, items, cap) : -1;
}

/* --methods: dst is the spec_opts. */
static bool parse_methods(const char *cmd, const char *flag, const char *v, void *dst) {
    spec_opts *o = dst;
    vs_free(o->methods_store);
    const int n = split_copy(v, o->c.methods, VS_BENCH_MAX_LIST, &o->methods_store);
    if (n < 1) {
        cli_fail(cmd, "%s '%s': expected a comma list of at most %d names", flag, v, VS_BENCH_MAX_LIST);
        return false;
    }
    o->c.n_methods = n;
    return true;
}

/* --gamma: dst is the vs_bench_config. */
static bool parse_gammas(const char *cmd, const char *flag, const char *v, void *dst) {
    vs_bench_config *c = dst;
    const char *items[VS_BENCH_MAX_LIST];
    char *copy;
    const int n = split_copy(v, items, VS_BENCH_MAX_LIST, &copy);
    bool ok = n >= 1;
    if (!ok) cli_fail(cmd, "%s '%s': expected a comma list like 3,5,7", flag, v);
    for (int k = 0; ok && k < n; k++) ok = cli_parse_int(cmd, flag, items[k], 1, VS_SPEC_MAX_GAMMA, &c->gammas[k]);
    if (ok) c->n_gammas = n;
    vs_free(copy);
    return ok;
}

/* --temp: dst is the vs_bench_config. */
static bool parse_temps(const char *cmd, const char *flag, const char *v, void *dst) {
    vs_bench_config *c = dst;
    const char *items[VS_BENCH_MAX_LIST];
    char *copy;
    const int n = split_copy(v, items, VS_BENCH_MAX_LIST, &copy);
    bool ok = n >= 1;
    if (!ok) cli_fail(cmd, "%s '%s': expected a comma list like 0,1", flag, v);
    for (int k = 0; ok && k < n; k++) ok = cli_parse_f64(cmd, flag, items[k], 0, 100, &c->temps[k]);
    if (ok) c->n_temps = n;
    vs_free(copy);
    return ok;
}

/* --turns: dst is the vs_bench_config. */
static bool parse_turns(const char *cmd, const char *flag, const char *v, void *dst) {
    vs_bench_config *c = dst;
    const char *items[2];
    char *copy;
    const int n = split_copy(v, items, 2, &copy);
    bool ok = n >= 1;
    if (!ok) cli_fail(cmd, "%s '%s': expected 1, 2 or 1,2", flag, v);
    for (int k = 0; ok && k < n; k++) ok = cli_parse_int(cmd, flag, items[k], 1, 2, &c->turns[k]);
    if (ok) c->n_turns = n;
    vs_free(copy);
    return ok;
}

/* --suites: a list of suite names; "all" keeps the default (all but caption, mask 0). */
static bool parse_suites(const char *cmd, const char *flag, const char *v, void *dst) {
    (void)flag;
    uint32_t *mask = dst;
    vs_error err = {0};
    if (!strcmp(v, "all")) {
        *mask = 0;
        return true;
    }
    if (vs_world_parse_suites(v, mask, &err)) {
        cli_fail_err(cmd, &err);
        return false;
    }
    return true;
}

/* --limit: a sample count in [0, INT64_MAX]. */
static bool parse_limit(const char *cmd, const char *flag, const char *v, void *dst) {
    return cli_parse_i64(cmd, flag, v, 0, INT64_MAX, dst);
}

/* Parses the flags into o (freeing o->methods_store is the caller's): -1 to go on, else the exit status
 * (0 after --help, 2 on a usage error). */
static int spec_parse(int argc, char **argv, spec_opts *o) {
    *o = (spec_opts){.tolerance = 0.05};
    vs_bench_config *c = &o->c;
    vs_bench_config_default(c);
    cli_flags fs = {0};
    cli_flag_add(&fs, "--models", CLI_STR, &c->models_dir, 0, 0);
    cli_flag_add(&fs, "--target", CLI_STR, &c->target, 0, 0);
    cli_flag_add(&fs, "--target-mmproj", CLI_STR, &c->target_mmproj, 0, 0);
    cli_flag_add(&fs, "--draft", CLI_STR, &c->draft, 0, 0);
    cli_flag_add(&fs, "--draft-mmproj", CLI_STR, &c->draft_mmproj, 0, 0);
    cli_flag_add(&fs, "--massv", CLI_STR, &c->massv, 0, 0);
    cli_flag_add(&fs, "--massv-mmproj", CLI_STR, &c->massv_mmproj, 0, 0);
    cli_flag_add(&fs, "--msd-head", CLI_STR, &c->msd_head, 0, 0);
    cli_flag_add(&fs, "--eagle-head", CLI_STR, &c->eagle_head, 0, 0);
    cli_flag_add(&fs, "--dream", CLI_STR, &c->dream, 0, 0);
    cli_flag_add(&fs, "--data", CLI_STR, &c->data_dir, 0, 0);
    cli_flag_add(&fs, "--split", CLI_STR, &c->split, 0, 0);
    cli_flag_fn_add(&fs, "--suites", parse_suites, &c->suites);
    cli_flag_fn_add(&fs, "--methods", parse_methods, o);
    cli_flag_fn_add(&fs, "--gamma", parse_gammas, c);
    cli_flag_fn_add(&fs, "--temp", parse_temps, c);
    cli_flag_fn_add(&fs, "--turns", parse_turns, c);
    cli_flag_fn_add(&fs, "--limit", parse_limit, &c->limit);
    cli_flag_add(&fs, "-n|--max-tokens|--n-predict", CLI_INT, &c->n_predict, 1, 1 << 20);
    cli_flag_add(&fs, "--repeat", CLI_INT, &c->repeat, 1, 100);
    cli_flag_add(&fs, "--ctx", CLI_INT, &c->n_ctx, 0, 1 << 24);
    cli_flag_add(&fs, "--kv-type", CLI_KV, &c->kv_type, 0, 0);
    cli_flag_add(&fs, "--draft-kv-type", CLI_KV_DRAFT, &c->draft_kv_type, 0, 0);
    cli_flag_add(&fs, "--ignore-eos", CLI_BOOL, &c->ignore_eos, 0, 0);
    cli_flag_add(&fs, "--seed", CLI_U64, &c->seed, 0, 9.3e18);
    cli_flag_add(&fs, "-t|--threads", CLI_INT, &c->threads, 1, 1024);
    cli_flag_add(&fs, "--out", CLI_STR, &c->out_dir, 0, 0);
    cli_flag_add(&fs, "--fresh", CLI_BOOL, &c->fresh, 0, 0);
    cli_flag_add(&fs, "--report-only", CLI_BOOL, &o->report_only, 0, 0);
    cli_flag_add(&fs, "--with-model-bench", CLI_BOOL, &o->with_model_bench, 0, 0);
    cli_flag_add(&fs, "--no-bandwidth", CLI_BOOL, &o->no_bandwidth, 0, 0);
    cli_flag_add(&fs, "--no-progress", CLI_BOOL, &o->no_progress, 0, 0);
    cli_flag_add(&fs, "-q|--quiet", CLI_BOOL, &c->quiet, 0, 0);
    cli_flag_add(&fs, "--compare-with", CLI_STR, &o->compare_dir, 0, 0);
    cli_flag_add(&fs, "--tolerance", CLI_F64, &o->tolerance, 0, 100);
    cli_flag_add(&fs, "--make-random-models", CLI_STR, &o->random_dir, 0, 0);
    cli_flag_add(&fs, "--list-methods", CLI_BOOL, &o->list_methods, 0, 0);
    const int r = cli_flags_parse(CMD, argc, argv, &fs, usage);
    if (r >= 0) return r;
    if (o->no_progress || c->quiet) c->progress = false;
    return -1;
}

/* --with-model-bench: `vlmspec bench -m` on each model file present; the exit status. */
static int model_benches(const vs_bench_config *c) {
    char path[4200], mp[4200];
    const char *roles[3][2] = {{"target", c->target ? c->target : VS_BENCH_FILE_TARGET},
                               {"draft-llava", c->draft ? c->draft : VS_BENCH_FILE_DRAFT},
                               {"draft-massv", c->massv ? c->massv : VS_BENCH_FILE_MASSV}};
    for (int k = 0; k < 3; k++) {
        if (roles[k][1][0] == '/')
            snprintf(mp, sizeof(mp), "%s", roles[k][1]);
        else
            snprintf(mp, sizeof(mp), "%s/%s", c->models_dir, roles[k][1]);
        if (access(mp, R_OK) != 0) continue;
        snprintf(path, sizeof(path), "%s/model-bench-%s.json", c->out_dir, roles[k][0]);
        if (!c->quiet) fprintf(stderr, "bench spec: vlmspec bench -m %s\n", mp);
        if (model_bench(mp, path, c->threads)) return 1;
    }
    return 0;
}

/* Measures the missing cells (and the models with --with-model-bench); the exit status. */
static int measure(const spec_opts *o) {
    const vs_bench_config *c = &o->c;
    vs_error err = {0};
    vs_bench_run_info info;
    if (vs_bench_run(c, &info, &err)) return cli_fail_err(CMD, &err);
    if (!c->quiet)
        fprintf(stderr, "bench spec: %lld cells measured in %.1f s (%lld found done, %lld units skipped)%s\n",
                (long long)info.n_run, info.seconds, (long long)info.n_done_before, (long long)info.n_skipped_units,
                info.n_mismatch ? "; GREEDY OUTPUTS DIFFERED FROM TARGET-ONLY (a bug)" : "");
    if (o->with_model_bench && model_benches(c)) return 1;
    if (info.n_mismatch) {
        /* the report is still written: it shows which cells */
        vs_bench_report_dir(c->out_dir, c->threads, !o->no_bandwidth, &err);
        return cli_fail(CMD, "%lld greedy outputs differed from target-only decoding", (long long)info.n_mismatch);
    }
    return 0;
}

/* Does what the parsed command line asks; the exit status. */
static int spec_run(const spec_opts *o) {
    const vs_bench_config *c = &o->c;
    vs_error err = {0};
    if (o->list_methods) {
        int n;
        const vs_method *m = vs_methods(&n);
        for (int i = 0; i < n; i++) printf("  %-12s %-12s %s\n", m[i].name, m[i].label, m[i].what);
        return 0;
    }
    if (o->random_dir) {
        vs_bench_random_opts ro;
        vs_bench_random_opts_default(&ro);
        if (vs_bench_make_random_models(o->random_dir, &ro, &err)) return cli_fail_err(CMD, &err);
        printf("random models written to %s (target %s, drafters %s / %s)\n", o->random_dir, VS_BENCH_FILE_TARGET,
               VS_BENCH_FILE_DRAFT, VS_BENCH_FILE_MASSV);
        return 0;
    }
    if (!c->out_dir) return cli_fail(CMD, "--out DIR is required"), 2;
    if (!o->report_only && (!c->models_dir || !c->data_dir))
        return cli_fail(CMD, "--models DIR and --data DIR are required (or --report-only)"), 2;
    if (!o->report_only) {
        const int rc = measure(o);
        if (rc) return rc;
    }
    if (vs_bench_report_dir(c->out_dir, c->threads, !o->no_bandwidth, &err)) return cli_fail_err(CMD, &err);
    if (!c->quiet) print_headline(c->out_dir);
    if (o->compare_dir && compare(c->out_dir, o->compare_dir, o->tolerance)) return 1;
    return 0;
}

int vs_cli_bench_spec(int argc, char **argv) {
    spec_opts o;
    int rc = spec_parse(argc, argv, &o);
    if (rc < 0) rc = spec_run(&o);
    vs_free(o.methods_store);
    return rc;
}
