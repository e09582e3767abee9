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
           "                        draft-llava-mmproj.gguf, draft-massv.gguf, draft-massv-mmproj.gguf\n"
           "  --target F, --target-mmproj F, --draft F, --draft-mmproj F, --massv F, --massv-mmproj F\n"
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
           "  --ignore-eos          do not stop at end-of-generation tokens\n"
           "  --seed S              sampling seed (default 1)\n"
           "  -t, --threads N       threads (default 1)\n"
           "output:\n"
           "  --out DIR             report folder (created); results resume when it holds a run of the same\n"
           "                        configuration\n"
           "  --fresh               discard the results already in --out\n"
           "  --report-only         only rewrite the report from --out's results\n"
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

/* Splits a comma list into out[] (pointers into a copy kept in *store). */
static int split_list(char *s, const char **out, int cap) {
    int n = 0;
    for (char *tok = strtok(s, ","); tok; tok = strtok(NULL, ",")) {
        if (n == cap) return -1;
        out[n++] = tok;
    }
    return n;
}

/* Runs `vlmspec bench -m MODEL --json` with its stdout going to path. */
static int model_bench(const char *model, const char *path, int threads) {
    char th[16];
    snprintf(th, sizeof(th), "%d", threads);
    char *args[] = {"bench", "-m", (char *)model, "--json", "-t", th, "--reps", "3", NULL};
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
    int rc = vs_cmd_bench(8, args);
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

int vs_cli_bench_spec(int argc, char **argv) {
    vs_bench_config c;
    vs_bench_config_default(&c);
    char *lists[4] = {0}; /* copies of the --methods / --gamma / --temp / --turns values */
    bool report_only = false, with_model_bench = false, measure_bw = true, list_methods = false;
    const char *random_dir = NULL, *compare_dir = NULL, *suites_arg = NULL;
    const char *methods_arg = NULL, *gamma_arg = NULL, *temp_arg = NULL, *turns_arg = NULL;
    double tolerance = 0.05;
    /* flags whose value is kept as a string */
    struct {
        const char *flag;
        const char **dst;
    } str_flags[] = {{"--models", &c.models_dir},
                     {"--data", &c.data_dir},
                     {"--out", &c.out_dir},
                     {"--split", &c.split},
                     {"--suites", &suites_arg},
                     {"--methods", &methods_arg},
                     {"--gamma", &gamma_arg},
                     {"--temp", &temp_arg},
                     {"--turns", &turns_arg},
                     {"--target", &c.target},
                     {"--target-mmproj", &c.target_mmproj},
                     {"--draft", &c.draft},
                     {"--draft-mmproj", &c.draft_mmproj},
                     {"--massv", &c.massv},
                     {"--massv-mmproj", &c.massv_mmproj},
                     {"--make-random-models", &random_dir},
                     {"--compare-with", &compare_dir}};
    int rc = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        bool done_flag = true;
        if (!strcmp(a, "--ignore-eos")) c.ignore_eos = true;
        else if (!strcmp(a, "--fresh")) c.fresh = true;
        else if (!strcmp(a, "--report-only")) report_only = true;
        else if (!strcmp(a, "--with-model-bench")) with_model_bench = true;
        else if (!strcmp(a, "--no-bandwidth")) measure_bw = false;
        else if (!strcmp(a, "--no-progress")) c.progress = false;
        else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) c.quiet = true, c.progress = false;
        else if (!strcmp(a, "--list-methods")) list_methods = true;
        else done_flag = false;
        if (done_flag) continue;
        for (size_t k = 0; k < VS_ARRAY_LEN(str_flags) && !done_flag; k++) {
            if (strcmp(a, str_flags[k].flag)) continue;
            if (!(v = cli_value(CMD, argc, argv, &i))) goto done;
            *str_flags[k].dst = v;
            done_flag = true;
        }
        if (done_flag) continue;
        static const char *const num_flags[] = {"--limit",   "-n",     "--n-predict", "--max-tokens",
                                                "--ctx",     "--kv-type", "--draft-kv-type", "--seed",
                                                "-t",        "--threads", "--tolerance", "--repeat"};
        bool num = false;
        for (size_t k = 0; k < VS_ARRAY_LEN(num_flags); k++) num |= !strcmp(a, num_flags[k]);
        if (!num) {
            cli_fail(CMD, "unknown option '%s' (see vlmspec bench spec --help)", a);
            goto done;
        }
        if (!(v = cli_value(CMD, argc, argv, &i))) goto done;
        int64_t x = 0;
        bool ok = true;
        if (!strcmp(a, "--limit")) {
            ok = cli_parse_i64(CMD, a, v, 0, INT64_MAX, &c.limit);
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict") || !strcmp(a, "--max-tokens")) {
            ok = cli_parse_int(CMD, a, v, 1, 1 << 20, &c.n_predict);
        } else if (!strcmp(a, "--repeat")) {
            ok = cli_parse_int(CMD, a, v, 1, 100, &c.repeat);
        } else if (!strcmp(a, "--ctx")) {
            ok = cli_parse_int(CMD, a, v, 0, 1 << 24, &c.n_ctx);
        } else if (!strcmp(a, "--seed")) {
            ok = cli_parse_i64(CMD, a, v, 0, INT64_MAX, &x);
            c.seed = (uint64_t)x;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            ok = cli_parse_int(CMD, a, v, 1, 1024, &c.threads);
        } else if (!strcmp(a, "--tolerance")) {
            ok = cli_parse_f64(CMD, a, v, 0, 100, &tolerance);
        } else if (!strcmp(a, "--draft-kv-type")) {
            ok = cli_parse_kv_type(CMD, a, v, true, &c.draft_kv_type);
        } else {
            ok = cli_parse_kv_type(CMD, a, v, false, &c.kv_type);
        }
        if (!ok) goto done;
    }
    if (list_methods) {
        int n;
        const vs_method *m = vs_methods(&n);
        for (int i = 0; i < n; i++) printf("  %-12s %-12s %s\n", m[i].name, m[i].label, m[i].what);
        return 0;
    }
    vs_error err = {0};
    if (random_dir) {
        vs_bench_random_opts ro;
        vs_bench_random_opts_default(&ro);
        if (vs_bench_make_random_models(random_dir, &ro, &err)) return cli_fail_err(CMD, &err);
        printf("random models written to %s (target %s, drafters %s / %s)\n", random_dir,
               VS_BENCH_FILE_TARGET, VS_BENCH_FILE_DRAFT, VS_BENCH_FILE_MASSV);
        return 0;
    }
    if (!c.out_dir) {
        cli_fail(CMD, "--out DIR is required");
        goto done;
    }
    if (!report_only && (!c.models_dir || !c.data_dir)) {
        cli_fail(CMD, "--models DIR and --data DIR are required (or --report-only)");
        goto done;
    }
    /* lists */
    if (methods_arg) {
        if (!(lists[0] = vs_strdup(methods_arg)) ||
            (c.n_methods = split_list(lists[0], c.methods, VS_BENCH_MAX_LIST)) < 1) {
            cli_fail(CMD, "--methods '%s': expected a comma list of at most %d names", methods_arg,
                     VS_BENCH_MAX_LIST);
            goto done;
        }
    }
    const char *items[VS_BENCH_MAX_LIST];
    if (gamma_arg) {
        int n = (lists[1] = vs_strdup(gamma_arg)) ? split_list(lists[1], items, VS_BENCH_MAX_LIST) : -1;
        if (n < 1) {
            cli_fail(CMD, "--gamma '%s': expected a comma list like 3,5,7", gamma_arg);
            goto done;
        }
        for (int k = 0; k < n; k++)
            if (!cli_parse_int(CMD, "--gamma", items[k], 1, VS_SPEC_MAX_GAMMA, &c.gammas[k])) goto done;
        c.n_gammas = n;
    }
    if (temp_arg) {
        int n = (lists[2] = vs_strdup(temp_arg)) ? split_list(lists[2], items, VS_BENCH_MAX_LIST) : -1;
        if (n < 1) {
            cli_fail(CMD, "--temp '%s': expected a comma list like 0,1", temp_arg);
            goto done;
        }
        for (int k = 0; k < n; k++)
            if (!cli_parse_f64(CMD, "--temp", items[k], 0, 100, &c.temps[k])) goto done;
        c.n_temps = n;
    }
    if (turns_arg) {
        int n = (lists[3] = vs_strdup(turns_arg)) ? split_list(lists[3], items, 2) : -1;
        if (n < 1) {
            cli_fail(CMD, "--turns '%s': expected 1, 2 or 1,2", turns_arg);
            goto done;
        }
        for (int k = 0; k < n; k++)
            if (!cli_parse_int(CMD, "--turns", items[k], 1, 2, &c.turns[k])) goto done;
        c.n_turns = n;
    }
    if (suites_arg && strcmp(suites_arg, "all") && vs_world_parse_suites(suites_arg, &c.suites, &err)) {
        cli_fail_err(CMD, &err);
        goto done;
    }
    rc = 1;
    if (!report_only) {
        vs_bench_run_info info;
        if (vs_bench_run(&c, &info, &err)) {
            cli_fail_err(CMD, &err);
            goto done;
        }
        if (!c.quiet)
            fprintf(stderr,
                    "bench spec: %lld cells measured in %.1f s (%lld found done, %lld units skipped)%s\n",
                    (long long)info.n_run, info.seconds, (long long)info.n_done_before,
                    (long long)info.n_skipped_units,
                    info.n_mismatch ? "; GREEDY OUTPUTS DIFFERED FROM TARGET-ONLY (a bug)" : "");
        if (with_model_bench) {
            char path[4200], mp[4200];
            const char *roles[3][2] = {{"target", c.target ? c.target : VS_BENCH_FILE_TARGET},
                                       {"draft-llava", c.draft ? c.draft : VS_BENCH_FILE_DRAFT},
                                       {"draft-massv", c.massv ? c.massv : VS_BENCH_FILE_MASSV}};
            for (int k = 0; k < 3; k++) {
                if (roles[k][1][0] == '/')
                    snprintf(mp, sizeof(mp), "%s", roles[k][1]);
                else
                    snprintf(mp, sizeof(mp), "%s/%s", c.models_dir, roles[k][1]);
                if (access(mp, R_OK) != 0) continue;
                snprintf(path, sizeof(path), "%s/model-bench-%s.json", c.out_dir, roles[k][0]);
                if (!c.quiet) fprintf(stderr, "bench spec: vlmspec bench -m %s\n", mp);
                if (model_bench(mp, path, c.threads)) goto done;
            }
        }
        if (info.n_mismatch) {
            /* the report is still written: it shows which cells */
            vs_bench_report_dir(c.out_dir, c.threads, measure_bw, &err);
            cli_fail(CMD, "%lld greedy outputs differed from target-only decoding",
                     (long long)info.n_mismatch);
            goto done;
        }
    }
    if (vs_bench_report_dir(c.out_dir, c.threads, measure_bw, &err)) {
        cli_fail_err(CMD, &err);
        goto done;
    }
    if (!c.quiet) print_headline(c.out_dir);
    if (compare_dir && compare(c.out_dir, compare_dir, tolerance)) {
        rc = 1;
        goto done;
    }
    rc = 0;
done:
    for (int k = 0; k < 4; k++) vs_free(lists[k]);
    return rc;
}
