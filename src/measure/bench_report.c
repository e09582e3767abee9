/* bench_report: markdown tables, CSV, JSON summary and SVG plots of benchmark records. See bench.h. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "outfile.h"
#include "plot.h"

/* Suites by role in the papers' tables (TABED Table 1): benchmark datasets, OOD datasets (multi-image
 * stories the drafters never saw), NLP datasets (text only). */
static bool suite_is_ood(const char *s) { return !strcmp(s, "story"); }
static bool suite_is_nlp(const char *s) { return !strcmp(s, "text"); }
static bool suite_is_benchmark(const char *s) { return !suite_is_ood(s) && !suite_is_nlp(s); }

/* The distinct values present in the records, in a stable order. */
typedef struct dims {
    const char *methods[64]; /* method table order, then unknown names in first-seen order */
    int n_methods;
    int32_t gammas[VS_SPEC_MAX_GAMMA + 1]; /* of non-baseline records, ascending */
    int n_gammas;
    double temps[64]; /* ascending */
    int n_temps;
    const char *suites[VS_WORLD_N_SUITES + 8]; /* world suite order, then unknown names */
    int n_suites;
    int32_t turns[8];
    int n_turns;
} dims;

static void add_name(const char **list, int *n, int cap, const char *s) {
    for (int i = 0; i < *n; i++)
        if (!strcmp(list[i], s)) return;
    if (*n < cap) list[(*n)++] = s;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void find_dims(const vs_bench_record *recs, int64_t n, dims *d) {
    memset(d, 0, sizeof(*d));
    int nm = 0;
    const vs_method *mt = vs_methods(&nm);
    for (int k = 0; k < nm; k++)
        for (int64_t i = 0; i < n; i++)
            if (!strcmp(recs[i].method, mt[k].name)) {
                add_name(d->methods, &d->n_methods, 64, mt[k].name);
                break;
            }
    for (int64_t i = 0; i < n; i++) add_name(d->methods, &d->n_methods, 64, recs[i].method);
    for (int s = 0; s < VS_WORLD_N_SUITES; s++)
        for (int64_t i = 0; i < n; i++)
            if (!strcmp(recs[i].suite, vs_world_suite_name((vs_world_suite)s))) {
                add_name(d->suites, &d->n_suites, VS_WORLD_N_SUITES + 8, recs[i].suite);
                break;
            }
    for (int64_t i = 0; i < n; i++) {
        const vs_bench_record *r = &recs[i];
        add_name(d->suites, &d->n_suites, VS_WORLD_N_SUITES + 8, r->suite);
        bool seen = false;
        if (r->gamma > 0) {
            for (int k = 0; k < d->n_gammas; k++) seen |= d->gammas[k] == r->gamma;
            if (!seen && d->n_gammas < VS_SPEC_MAX_GAMMA + 1) d->gammas[d->n_gammas++] = r->gamma;
        }
        seen = false;
        for (int k = 0; k < d->n_temps; k++) seen |= fabs(d->temps[k] - r->temp) < 5e-4;
        if (!seen && d->n_temps < 64) d->temps[d->n_temps++] = r->temp;
        seen = false;
        for (int k = 0; k < d->n_turns; k++) seen |= d->turns[k] == r->turn;
        if (!seen && d->n_turns < 8) d->turns[d->n_turns++] = r->turn;
    }
    qsort(d->gammas, (size_t)d->n_gammas, sizeof(int32_t), cmp_i32);
    qsort(d->temps, (size_t)d->n_temps, sizeof(double), cmp_dbl);
    qsort(d->turns, (size_t)d->n_turns, sizeof(int32_t), cmp_i32);
}

static bool is_baseline(const char *method) {
    const vs_method *m = vs_method_find(method);
    return m ? m->kind == VS_METHOD_TARGET : !strcmp(method, "ar");
}

static bool is_ensemble(const char *method) {
    const vs_method *m = vs_method_find(method);
    return m && m->kind == VS_METHOD_ENSEMBLE;
}

/* The group of (method, gamma, temp, suite, turn, kind); the baseline ignores gamma (it has none). */
static void group(const vs_bench_record *recs, int64_t n, const char *method, int32_t gamma, double temp,
                  const char *suite, int32_t turn, const char *kind, vs_bench_group *g) {
    vs_bench_filter f = vs_bench_filter_any();
    f.method = method;
    f.gamma = is_baseline(method) ? 0 : gamma;
    f.temp = temp;
    f.suite = suite;
    f.turn = turn;
    f.turn_kind = kind;
    if (vs_bench_aggregate(recs, n, &f, g, NULL)) memset(g, 0, sizeof(*g));
}

/* Mean over the given suites of the per-suite tau (suites without records are left out); 0 if none. */
static double avg_tau(const vs_bench_record *recs, int64_t n, const char *method, int32_t gamma, double temp,
                      const dims *d, bool (*keep)(const char *), int32_t turn) {
    double sum = 0;
    int k = 0;
    for (int s = 0; s < d->n_suites; s++) {
        if (keep && !keep(d->suites[s])) continue;
        vs_bench_group g;
        group(recs, n, method, gamma, temp, d->suites[s], turn, NULL, &g);
        if (g.n_blocks > 0) sum += g.tau, k++;
    }
    return k ? sum / k : 0;
}

static void fmt_temp(char *buf, size_t cap, double t) { snprintf(buf, cap, "%g", t); }

/* ------------------------------------------------------------------------------------------------
 * Markdown helpers: a row of numbers with the best value bold and the second best underlined. */

#define MAX_ROWS 64
#define MAX_COLS 40

typedef struct table {
    const char *rows[MAX_ROWS]; /* row labels (markdown) */
    const char *types[MAX_ROWS];
    double v[MAX_ROWS][MAX_COLS]; /* NaN = no data */
    int n_rows, n_cols;
    const char *cols[MAX_COLS];
    int decimals;
    const char *suffix; /* after each number ("x" for speedups) */
    bool rank;          /* mark best / second best per column */
} table;

static void table_print(FILE *f, const table *t) {
    fprintf(f, "| Type | Method |");
    for (int c = 0; c < t->n_cols; c++) fprintf(f, " %s |", t->cols[c]);
    fprintf(f, "\n| --- | --- |");
    for (int c = 0; c < t->n_cols; c++) fprintf(f, " ---: |");
    fprintf(f, "\n");
    for (int r = 0; r < t->n_rows; r++) {
        fprintf(f, "| %s | %s |", t->types[r] ? t->types[r] : "", t->rows[r]);
        for (int c = 0; c < t->n_cols; c++) {
            double v = t->v[r][c];
            if (isnan(v)) {
                fprintf(f, " - |");
                continue;
            }
            /* rank by the value as printed: distinct printed values above this one (ties share a rank) */
            double scale = pow(10, t->decimals), me = round(v * scale);
            int distinct_above = 0;
            for (int k = 0; k < t->n_rows; k++) {
                if (isnan(t->v[k][c])) continue;
                double o = round(t->v[k][c] * scale);
                if (o <= me) continue;
                bool dup = false;
                for (int j = 0; j < k && !dup; j++)
                    dup = !isnan(t->v[j][c]) && round(t->v[j][c] * scale) == o;
                distinct_above += !dup;
            }
            int n_data = 0;
            for (int k = 0; k < t->n_rows; k++) n_data += !isnan(t->v[k][c]);
            const char *pre = "", *post = "";
            if (t->rank && n_data > 1) {
                if (distinct_above == 0)
                    pre = "**", post = "**";
                else if (distinct_above == 1 && n_data > 2)
                    pre = "<u>", post = "</u>";
            }
            fprintf(f, " %s%.*f%s%s |", pre, t->decimals, v, t->suffix ? t->suffix : "", post);
        }
        fprintf(f, "\n");
    }
    fprintf(f, "\n");
}

static const char *type_of(const char *method) {
    if (is_baseline(method)) return "Baseline";
    return is_ensemble(method) ? "Ensemble" : "Single";
}

/* Labels as markdown ("TABED^MT" -> "TABED<sup>MT</sup>"), kept in a small ring of buffers. */
static const char *md_label(const char *method, char (*ring)[64], int *next) {
    char *b = ring[(*next)++ % MAX_ROWS];
    char lb[64];
    const char *l = vs_method_label(method, lb, sizeof(lb));
    const char *hat = strchr(l, '^');
    if (hat)
        snprintf(b, 64, "%.*s<sup>%s</sup>", (int)(hat - l), l, hat + 1);
    else
        snprintf(b, 64, "%s", l);
    return b;
}

/* ------------------------------------------------------------------------------------------------
 * The markdown report */

static void md_headline(FILE *f, const vs_bench_record *recs, int64_t n, const dims *d, int32_t G, double T,
                        char (*ring)[64], int *rn) {
    char ts[32];
    fmt_temp(ts, sizeof(ts), T);
    fprintf(f, "### gamma = %d, temperature = %s\n\n", G, ts);
    fprintf(
        f,
        "| Method | tau (avg. over suites) | speedup decode mean | median | speedup end-to-end mean | median "
        "| eq. 1 | eq. 1 CPU | Tq/Tp | tok/s decode | runs |\n");
    fprintf(f, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (int m = 0; m < d->n_methods; m++) {
        const char *meth = d->methods[m];
        vs_bench_group g;
        group(recs, n, meth, G, T, NULL, 0, NULL, &g);
        if (g.n == 0) continue;
        double tau = avg_tau(recs, n, meth, G, T, d, NULL, 0);
        fprintf(f, "| %s | %.3f | %.3fx | %.3fx | %.3fx | %.3fx |", md_label(meth, ring, rn), tau,
                g.speedup_decode_mean, g.speedup_decode_median, g.speedup_total_mean, g.speedup_total_median);
        if (g.est_eq1 > 0)
            fprintf(f, " %.3fx | %.3fx | %.3f |", g.est_eq1, g.est_eq1_cpu, g.tq_tp);
        else
            fprintf(f, " - | - | - |");
        fprintf(f, " %.1f | %lld |\n", g.tok_s_decode, (long long)g.n);
    }
    fprintf(f, "\n");
}

static void md_table1(FILE *f, const vs_bench_record *recs, int64_t n, const dims *d, int32_t G, double T,
                      char (*ring)[64], int *rn) {
    char ts[32];
    fmt_temp(ts, sizeof(ts), T);
    for (int turn = 1; turn <= 2; turn++) {
        bool any = false;
        for (int k = 0; k < d->n_turns; k++) any |= d->turns[k] == turn;
        if (!any) continue;
        table t = {.decimals = 2, .rank = true};
        for (int s = 0; s < d->n_suites; s++)
            if (suite_is_benchmark(d->suites[s])) t.cols[t.n_cols++] = d->suites[s];
        int n_bench = t.n_cols;
        t.cols[t.n_cols++] = "Avg.";
        static char extra[4][48];
        int n_extra = 0;
        if (turn == 1) {
            for (int s = 0; s < d->n_suites && t.n_cols < MAX_COLS; s++)
                if (!suite_is_benchmark(d->suites[s])) {
                    snprintf(extra[n_extra % 4], 48, "%s (%s)", d->suites[s],
                             suite_is_ood(d->suites[s]) ? "OOD" : "NLP");
                    t.cols[t.n_cols++] = extra[n_extra++ % 4];
                }
        } else {
            t.cols[t.n_cols++] = "unrelated (NLP)";
            t.cols[t.n_cols++] = "followup";
            t.cols[t.n_cols++] = "new image";
        }
        for (int m = 0; m < d->n_methods && t.n_rows < MAX_ROWS; m++) {
            const char *meth = d->methods[m];
            if (is_baseline(meth)) continue;
            int r = t.n_rows++;
            t.rows[r] = md_label(meth, ring, rn);
            t.types[r] = type_of(meth);
            int c = 0;
            for (int s = 0; s < d->n_suites; s++) {
                if (!suite_is_benchmark(d->suites[s])) continue;
                vs_bench_group g;
                group(recs, n, meth, G, T, d->suites[s], turn, NULL, &g);
                t.v[r][c++] = g.n_blocks ? g.tau : NAN;
            }
            double avg = avg_tau(recs, n, meth, G, T, d, suite_is_benchmark, turn);
            t.v[r][n_bench] = avg > 0 ? avg : NAN;
            c = n_bench + 1;
            if (turn == 1) {
                for (int s = 0; s < d->n_suites; s++) {
                    if (suite_is_benchmark(d->suites[s])) continue;
                    vs_bench_group g;
                    group(recs, n, meth, G, T, d->suites[s], 1, NULL, &g);
                    t.v[r][c++] = g.n_blocks ? g.tau : NAN;
                }
            } else {
                static const char *const kinds[3] = {"unrelated", "followup", "new_image"};
                for (int k = 0; k < 3; k++) {
                    vs_bench_group g;
                    group(recs, n, meth, G, T, NULL, 2, kinds[k], &g);
                    t.v[r][c++] = g.n_blocks ? g.tau : NAN;
                }
            }
        }
        if (t.n_rows == 0) continue;
        fprintf(f, "**%s turn** (gamma = %d, temperature = %s): block efficiency tau by suite%s\n\n",
                turn == 1 ? "First" : "Second", G, ts,
                turn == 2 ? "; the last columns pool the second turns of all suites by kind" : "");
        table_print(f, &t);
    }
}

/* TABED Table 3 (all methods) or Table 4 (ensembles only): averaged tau per category. */
static void md_table3(FILE *f, const vs_bench_record *recs, int64_t n, const dims *d, int32_t G, double T,
                      bool ensembles_only, char (*ring)[64], int *rn) {
    table t = {.decimals = 2,
               .rank = true,
               .n_cols = 3,
               .cols = {"Benchmark, first turn", "Benchmark, second turn", "OOD"}};
    for (int m = 0; m < d->n_methods && t.n_rows < MAX_ROWS; m++) {
        const char *meth = d->methods[m];
        if (is_baseline(meth) || (ensembles_only && !is_ensemble(meth))) continue;
        int r = t.n_rows++;
        t.rows[r] = md_label(meth, ring, rn);
        t.types[r] = type_of(meth);
        double a = avg_tau(recs, n, meth, G, T, d, suite_is_benchmark, 1);
        double b = avg_tau(recs, n, meth, G, T, d, suite_is_benchmark, 2);
        double c = avg_tau(recs, n, meth, G, T, d, suite_is_ood, 0);
        t.v[r][0] = a > 0 ? a : NAN, t.v[r][1] = b > 0 ? b : NAN, t.v[r][2] = c > 0 ? c : NAN;
    }
    char ts[32];
    fmt_temp(ts, sizeof(ts), T);
    if (t.n_rows == 0) {
        fprintf(f, "(no %s methods in this run)\n\n", ensembles_only ? "ensemble" : "drafting");
        return;
    }
    fprintf(f, "gamma = %d, temperature = %s: tau averaged over the suites of each category\n\n", G, ts);
    table_print(f, &t);
}

/* MSD Table 3: per suite the speedup ratio SR (end-to-end mean, MSD eq. 12 includes prefill) and tau,
 * one block per temperature. */
static void md_msd(FILE *f, const vs_bench_record *recs, int64_t n, const dims *d, int32_t G,
                   char (*ring)[64], int *rn) {
    fprintf(f, "| Temperature | Method |");
    for (int s = 0; s < d->n_suites; s++) fprintf(f, " %s SR | %s tau |", d->suites[s], d->suites[s]);
    fprintf(f, "\n| --- | --- |");
    for (int s = 0; s < d->n_suites; s++) fprintf(f, " ---: | ---: |");
    fprintf(f, "\n");
    for (int ti = 0; ti < d->n_temps; ti++) {
        char ts[32];
        fmt_temp(ts, sizeof(ts), d->temps[ti]);
        for (int m = 0; m < d->n_methods; m++) {
            const char *meth = d->methods[m];
            if (is_baseline(meth)) continue;
            fprintf(f, "| %s | %s |", ts, md_label(meth, ring, rn));
            for (int s = 0; s < d->n_suites; s++) {
                vs_bench_group g;
                group(recs, n, meth, G, d->temps[ti], d->suites[s], 0, NULL, &g);
                if (g.n == 0)
                    fprintf(f, " - | - |");
                else
                    fprintf(f, " %.2fx | %.2f |", g.speedup_total_mean, g.tau);
            }
            fprintf(f, "\n");
        }
    }
    fprintf(f, "\n");
}

static void md_details(FILE *f, const vs_bench_record *recs, int64_t n, const dims *d, int32_t G, double T,
                       char (*ring)[64], int *rn) {
    char ts[32];
    fmt_temp(ts, sizeof(ts), T);
    fprintf(
        f,
        "n-alpha (gamma = %d, temperature = %s): acceptance of drafted position n given 1..n-1 accepted\n\n",
        G, ts);
    fprintf(f, "| Method |");
    for (int k = 1; k <= G; k++) fprintf(f, " %d-alpha |", k);
    fprintf(f, " acceptance |\n| --- |");
    for (int k = 0; k <= G; k++) fprintf(f, " ---: |");
    fprintf(f, "\n");
    for (int m = 0; m < d->n_methods; m++) {
        const char *meth = d->methods[m];
        if (is_baseline(meth)) continue;
        vs_bench_group g;
        group(recs, n, meth, G, T, NULL, 0, NULL, &g);
        if (!g.n) continue;
        fprintf(f, "| %s |", md_label(meth, ring, rn));
        for (int k = 0; k < G && k < VS_SPEC_MAX_GAMMA; k++) {
            if (g.n_alpha[k] < 0)
                fprintf(f, " - |");
            else
                fprintf(f, " %.3f |", g.n_alpha[k]);
        }
        fprintf(f, " %.3f |\n", g.accept_rate);
    }
    fprintf(f, "\nAccepted drafts per block (share of blocks):\n\n| Method |");
    for (int k = 0; k <= G; k++) fprintf(f, " %d |", k);
    fprintf(f, " blocks |\n| --- |");
    for (int k = 0; k <= G + 1; k++) fprintf(f, " ---: |");
    fprintf(f, "\n");
    for (int m = 0; m < d->n_methods; m++) {
        const char *meth = d->methods[m];
        if (is_baseline(meth)) continue;
        vs_bench_group g;
        group(recs, n, meth, G, T, NULL, 0, NULL, &g);
        if (!g.n) continue;
        fprintf(f, "| %s |", md_label(meth, ring, rn));
        for (int k = 0; k <= G && k <= VS_SPEC_MAX_GAMMA; k++)
            fprintf(f, " %.3f |", g.n_blocks ? (double)g.hist[k] / (double)g.n_blocks : 0.0);
        fprintf(f, " %lld |\n", (long long)g.n_blocks);
    }
    fprintf(f, "\nTimes (mean per sample, ms) and speeds:\n\n");
    fprintf(
        f,
        "| Method | vision | caption | prefill | draft prefill | drafting | verification | decode | total | "
        "Tq | Tp | Tp(gamma+1) | tok/s decode | tok/s end-to-end |\n");
    fprintf(f, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
               "---: |\n");
    for (int m = 0; m < d->n_methods; m++) {
        const char *meth = d->methods[m];
        vs_bench_group g;
        group(recs, n, meth, G, T, NULL, 0, NULL, &g);
        if (!g.n) continue;
        fprintf(f,
                "| %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.3f | %.3f | %.3f | %.1f | "
                "%.1f |\n",
                md_label(meth, ring, rn), g.t_vision * 1e3, g.t_caption * 1e3, g.t_prefill * 1e3,
                g.t_draft_prefill * 1e3, g.t_draft * 1e3, g.t_verify * 1e3, g.t_decode * 1e3, g.t_total * 1e3,
                g.tq * 1e3, g.tp * 1e3, g.tp_verify * 1e3, g.tok_s_decode, g.tok_s_total);
    }
    fprintf(
        f, "\nChecks: greedy outputs identical to target-only (must be all), and the world checker's verdict "
           "on the outputs:\n\n| Method | identical | checker correct |\n| --- | ---: | ---: |\n");
    for (int m = 0; m < d->n_methods; m++) {
        const char *meth = d->methods[m];
        vs_bench_group g;
        group(recs, n, meth, G, T, NULL, 0, NULL, &g);
        if (!g.n) continue;
        char a[48] = "-", b[48] = "-";
        if (g.n_compared)
            snprintf(a, sizeof(a), "%lld / %lld", (long long)g.n_identical, (long long)g.n_compared);
        if (g.n_checked)
            snprintf(b, sizeof(b), "%lld / %lld", (long long)g.n_correct, (long long)g.n_checked);
        fprintf(f, "| %s | %s | %s |\n", md_label(meth, ring, rn), a, b);
    }
    fprintf(f, "\n");
}

/* Figures of `vlmspec bench -m MODEL --json` saved as model-bench-*.json in the report folder. */
static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void md_model_bench(FILE *f, const char *dir) {
    DIR *dd = opendir(dir);
    if (!dd) return;
    char *names[64];
    int nn = 0;
    struct dirent *e;
    while ((e = readdir(dd)) && nn < 64) {
        size_t l = strlen(e->d_name);
        if (!strncmp(e->d_name, "model-bench-", 12) && l > 5 && !strcmp(e->d_name + l - 5, ".json"))
            names[nn++] = vs_strdup(e->d_name);
    }
    closedir(dd);
    for (int i = 0; i < nn; i++)
        if (!names[i]) nn = i;
    if (nn == 0) return;
    qsort(names, (size_t)nn, sizeof(char *), cmp_str);
    fprintf(f, "## Model figures (`vlmspec bench -m MODEL --json`)\n\n");
    fprintf(f, "| file | model | type | size (MiB) | params (M) | threads | test | tokens/s |\n");
    fprintf(f, "| --- | --- | --- | ---: | ---: | ---: | --- | ---: |\n");
    vs_json_doc *docs[64] = {0};
    for (int i = 0; i < nn; i++) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        uint8_t *data = NULL;
        size_t size = 0;
        if (vs_read_file(path, &data, &size, NULL)) continue;
        docs[i] = vs_json_parse((const char *)data, size, path, NULL);
        vs_free(data);
        const vs_json *r = docs[i] ? vs_json_root(docs[i]) : NULL;
        const vs_json *tests = vs_json_get(r, "tests");
        if (!r || !tests || tests->type != VS_JSON_ARRAY) {
            fprintf(f, "| %s | (unreadable) | | | | | | |\n", names[i]);
            continue;
        }
        for (size_t k = 0; k < tests->len; k++) {
            const vs_json *t = vs_json_at(tests, k);
            fprintf(f, "| %s | %s | %s | %.1f | %.1f | %lld | %s | %.2f |\n", names[i],
                    vs_json_get_str(r, "model", "?"), vs_json_get_str(r, "type", "?"),
                    (double)vs_json_get_int(r, "size_bytes", 0) / 1048576.0,
                    (double)vs_json_get_int(r, "params", 0) / 1e6,
                    (long long)vs_json_get_int(r, "threads", 0), vs_json_get_str(t, "test", "?"),
                    vs_json_get_num(t, "tokens_per_s", 0));
        }
    }
    fprintf(f, "\nVerify cost: one forward over k rows after a prompt, as a ratio to k = 1:\n\n");
    fprintf(f, "| file | k | ms | ratio to k=1 |\n| --- | ---: | ---: | ---: |\n");
    for (int i = 0; i < nn; i++) {
        const vs_json *v = docs[i] ? vs_json_get(vs_json_root(docs[i]), "verify") : NULL;
        for (size_t k = 0; v && v->type == VS_JSON_ARRAY && k < v->len; k++) {
            const vs_json *x = vs_json_at(v, k);
            fprintf(f, "| %s | %lld | %.3f | %.3f |\n", names[i], (long long)vs_json_get_int(x, "k", 0),
                    vs_json_get_num(x, "median_ms", 0), vs_json_get_num(x, "ratio_to_k1", 0));
        }
        vs_json_doc_free(docs[i]);
        vs_free(names[i]);
    }
    fprintf(f, "\n");
}

/* ------------------------------------------------------------------------------------------------
 * CSV */

static void csv_str(FILE *f, const char *s) {
    bool q = strpbrk(s, ",\"\n") != NULL;
    if (!q) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

vs_status vs_bench_write_csv(const vs_bench_record *recs, int64_t n, const char *path, vs_error *err) {
    vs_outfile o;
    vs_status st = vs_outfile_open(&o, path, err);
    if (st != VS_OK) return st;
    FILE *f = o.f;
    int G = 0;
    for (int64_t i = 0; i < n; i++) G = VS_MAX(G, VS_MIN(recs[i].gamma, VS_SPEC_MAX_GAMMA));
    fprintf(f,
            "sample,suite,turn,turn_kind,method,gamma,temp,n_prompt,n_images,n_tokens,n_blocks,tau,n_drafted,"
            "n_accepted,acceptance,n_steps");
    for (int k = 1; k <= G; k++) fprintf(f, ",alpha_%d", k);
    for (int k = 0; k <= G; k++) fprintf(f, ",hist_%d", k);
    fprintf(f, ",t_vision,t_caption,t_prefill,t_draft_prefill,t_draft,t_verify,t_decode,t_total,tq,tp,"
               "tp_verify,eq1,eq1_cpu,tok_s_decode,tok_s_total,base_tokens,base_t_decode,base_t_total,"
               "speedup_decode,speedup_total,identical,correct,stop\n");
    for (int64_t i = 0; i < n; i++) {
        const vs_bench_record *r = &recs[i];
        csv_str(f, r->sample);
        fputc(',', f);
        csv_str(f, r->suite);
        fprintf(f, ",%d,", r->turn);
        csv_str(f, r->turn_kind);
        fputc(',', f);
        csv_str(f, r->method);
        int64_t n_eval = 0;
        for (int k = 0; k < VS_SPEC_MAX_GAMMA; k++) n_eval += r->alpha_den[k];
        fprintf(f, ",%d,%g,%d,%d,%d,%d,%.6g,%lld,%lld,%.6g,%lld", r->gamma, r->temp, r->n_prompt, r->n_images,
                r->n_tokens, r->n_blocks, vs_bench_record_tau(r), (long long)r->n_drafted,
                (long long)r->n_accepted, n_eval ? (double)r->n_accepted / (double)n_eval : 0.0,
                (long long)r->n_steps);
        for (int k = 0; k < G; k++) {
            if (k < r->gamma && r->alpha_den[k] > 0)
                fprintf(f, ",%.6g", (double)r->alpha_num[k] / (double)r->alpha_den[k]);
            else
                fprintf(f, ",");
        }
        for (int k = 0; k <= G; k++) {
            if (k <= r->gamma)
                fprintf(f, ",%lld", (long long)r->hist[k]);
            else
                fprintf(f, ",");
        }
        /* per-record Tq, Tp and eq. 1 */
        vs_bench_filter any = vs_bench_filter_any();
        vs_bench_group g;
        if (vs_bench_aggregate(r, 1, &any, &g, NULL)) memset(&g, 0, sizeof(g));
        fprintf(f,
                ",%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%d,%.6g,%.6g,%."
                "6g,%.6g,%d,%d,",
                r->t_vision, r->t_caption, r->t_prefill, r->t_draft_prefill, r->t_draft, r->t_verify,
                r->t_decode, r->t_total, g.tq, g.tp, g.tp_verify, g.est_eq1, g.est_eq1_cpu, g.tok_s_decode,
                g.tok_s_total, r->base_tokens, r->base_t_decode, r->base_t_total,
                vs_bench_record_speedup_decode(r), vs_bench_record_speedup_total(r), r->identical,
                r->correct);
        csv_str(f, r->stop);
        fputc('\n', f);
    }
    return vs_outfile_commit(&o, err);
}

/* ------------------------------------------------------------------------------------------------
 * JSON summary */

static void json_group(vs_json_writer *w, const char *method, int32_t gamma, double temp, const char *suite,
                       int32_t turn, const vs_bench_group *g) {
    vs_json_obj_begin(w);
    vs_json_kv_str(w, "method", method);
    vs_json_kv_int(w, "gamma", gamma);
    vs_json_kv_num(w, "temp", temp);
    vs_json_kv_str(w, "suite", suite ? suite : "all");
    vs_json_kv_int(w, "turn", turn);
    vs_json_kv_int(w, "records", g->n);
    vs_json_kv_int(w, "tokens", g->n_tokens);
    vs_json_kv_int(w, "blocks", g->n_blocks);
    vs_json_kv_num(w, "tau", g->tau);
    vs_json_kv_num(w, "acceptance", g->accept_rate);
    vs_json_key(w, "n_alpha");
    vs_json_arr_begin(w);
    for (int k = 0; k < gamma && k < VS_SPEC_MAX_GAMMA; k++) {
        if (g->n_alpha[k] < 0)
            vs_json_null(w);
        else
            vs_json_num(w, g->n_alpha[k]);
    }
    vs_json_arr_end(w);
    vs_json_key(w, "accepted_hist");
    vs_json_arr_begin(w);
    for (int k = 0; k <= gamma && k <= VS_SPEC_MAX_GAMMA; k++) vs_json_int(w, g->hist[k]);
    vs_json_arr_end(w);
    vs_json_kv_num(w, "t_vision", g->t_vision);
    vs_json_kv_num(w, "t_caption", g->t_caption);
    vs_json_kv_num(w, "t_prefill", g->t_prefill);
    vs_json_kv_num(w, "t_draft_prefill", g->t_draft_prefill);
    vs_json_kv_num(w, "t_draft", g->t_draft);
    vs_json_kv_num(w, "t_verify", g->t_verify);
    vs_json_kv_num(w, "t_decode", g->t_decode);
    vs_json_kv_num(w, "t_total", g->t_total);
    vs_json_kv_num(w, "tq", g->tq);
    vs_json_kv_num(w, "tp", g->tp);
    vs_json_kv_num(w, "tp_verify", g->tp_verify);
    vs_json_kv_num(w, "tq_tp", g->tq_tp);
    vs_json_kv_num(w, "eq1", g->est_eq1);
    vs_json_kv_num(w, "eq1_cpu", g->est_eq1_cpu);
    vs_json_kv_num(w, "tok_s_decode", g->tok_s_decode);
    vs_json_kv_num(w, "tok_s_total", g->tok_s_total);
    vs_json_kv_num(w, "speedup_decode_mean", g->speedup_decode_mean);
    vs_json_kv_num(w, "speedup_decode_median", g->speedup_decode_median);
    vs_json_kv_num(w, "speedup_total_mean", g->speedup_total_mean);
    vs_json_kv_num(w, "speedup_total_median", g->speedup_total_median);
    vs_json_kv_int(w, "identical", g->n_identical);
    vs_json_kv_int(w, "compared", g->n_compared);
    vs_json_kv_int(w, "correct", g->n_correct);
    vs_json_kv_int(w, "checked", g->n_checked);
    vs_json_obj_end(w);
}

static vs_status write_summary(const vs_bench_record *recs, int64_t n, const dims *d,
                               const vs_bench_report_opts *o, const char *path, vs_error *err) {
    vs_json_writer w;
    vs_json_writer_init(&w);
    vs_json_obj_begin(&w);
    vs_json_kv_str(&w, "format", "vlmspec-bench-summary");
    vs_json_kv_int(&w, "version", 1);
    vs_json_key(&w, "machine");
    if (o->sys)
        vs_sysinfo_json(o->sys, &w);
    else
        vs_json_null(&w);
    vs_json_key(&w, "config");
    if (o->header_json)
        vs_json_raw(&w, o->header_json, strlen(o->header_json));
    else
        vs_json_null(&w);
    vs_json_kv_int(&w, "records", n);
    vs_json_key(&w, "groups");
    vs_json_arr_begin(&w);
    for (int m = 0; m < d->n_methods; m++) {
        bool base = is_baseline(d->methods[m]);
        for (int gi = 0; gi < (base ? 1 : d->n_gammas); gi++) {
            int32_t G = base ? 0 : d->gammas[gi];
            for (int ti = 0; ti < d->n_temps; ti++) {
                for (int s = -1; s < d->n_suites; s++) {
                    for (int tu = -1; tu < d->n_turns; tu++) {
                        const char *suite = s < 0 ? NULL : d->suites[s];
                        int32_t turn = tu < 0 ? 0 : d->turns[tu];
                        vs_bench_group g;
                        group(recs, n, d->methods[m], G, d->temps[ti], suite, turn, NULL, &g);
                        if (g.n) json_group(&w, d->methods[m], G, d->temps[ti], suite, turn, &g);
                    }
                }
            }
        }
    }
    vs_json_arr_end(&w);
    vs_json_obj_end(&w);
    size_t len = 0;
    char *s = vs_json_writer_take(&w, &len);
    vs_json_writer_free(&w);
    if (!s) return vs_error_set(err, VS_ERR_NOMEM, "out of memory");
    s[len] = '\n'; /* the writer's buffer keeps room for a terminator */
    vs_status st = vs_write_file(path, s, len + 1, err);
    vs_free(s);
    return st;
}

/* ------------------------------------------------------------------------------------------------
 * Plots */

static vs_status plot_set(const vs_bench_record *recs, int64_t n, const dims *d, int32_t G, double T,
                          const char *dir, char files[][128], int *n_files, vs_error *err) {
    char ts[32], path[4400], title[160];
    fmt_temp(ts, sizeof(ts), T);
    const char *cats[VS_WORLD_N_SUITES + 9];
    double v[VS_WORLD_N_SUITES + 9];
    vs_status st = VS_OK;

    /* tau per method per suite */
    vs_plot *p = vs_plot_new(VS_PLOT_BARS, err);
    if (!p) return err->code;
    int nc = 0;
    for (int s = 0; s < d->n_suites; s++) cats[nc++] = d->suites[s];
    cats[nc++] = "average";
    snprintf(title, sizeof(title), "Block efficiency tau per suite (gamma %d, temperature %s)", G, ts);
    if (!st) st = vs_plot_title(p, title, err);
    if (!st) st = vs_plot_labels(p, "suite", "tau (tokens per target pass)", err);
    if (!st) st = vs_plot_categories(p, cats, nc, err);
    int ns = 0;
    for (int m = 0; m < d->n_methods && !st; m++) {
        if (is_baseline(d->methods[m])) continue;
        for (int s = 0; s < d->n_suites; s++) {
            vs_bench_group g;
            group(recs, n, d->methods[m], G, T, d->suites[s], 0, NULL, &g);
            v[s] = g.n_blocks ? g.tau : NAN;
        }
        double a = avg_tau(recs, n, d->methods[m], G, T, d, NULL, 0);
        v[d->n_suites] = a > 0 ? a : NAN;
        char lb[64];
        st = vs_plot_bars(p, vs_method_label(d->methods[m], lb, sizeof(lb)), v, nc, err);
        ns++;
    }
    snprintf(files[*n_files], 128, "tau_g%d_t%s.svg", G, ts);
    snprintf(path, sizeof(path), "%s/%s", dir, files[*n_files]);
    if (!st && ns > 0) {
        vs_plot_size(p, 760, 420);
        if (!(st = vs_plot_write(p, path, err))) (*n_files)++;
    }
    vs_plot_free(p);
    if (st) return st;

    /* speedup per method: measured medians and the eq. 1 estimates */
    const char *mcats[64];
    char mlab[64][64];
    double dec[64], tot[64], e1[64], e1c[64];
    int nm = 0;
    for (int m = 0; m < d->n_methods && nm < 64; m++) {
        vs_bench_group g;
        group(recs, n, d->methods[m], G, T, NULL, 0, NULL, &g);
        if (!g.n) continue;
        mcats[nm] = vs_method_label(d->methods[m], mlab[nm], sizeof(mlab[nm]));
        dec[nm] = g.speedup_decode_median, tot[nm] = g.speedup_total_median;
        e1[nm] = g.est_eq1 > 0 ? g.est_eq1 : NAN, e1c[nm] = g.est_eq1_cpu > 0 ? g.est_eq1_cpu : NAN;
        nm++;
    }
    if (nm > 0) {
        if (!(p = vs_plot_new(VS_PLOT_BARS, err))) return err->code;
        snprintf(title, sizeof(title),
                 "Walltime speedup over target-only decoding (gamma %d, temperature %s)", G, ts);
        st = vs_plot_title(p, title, err);
        if (!st) st = vs_plot_labels(p, "method", "speedup (x)", err);
        if (!st) st = vs_plot_categories(p, mcats, nm, err);
        if (!st) st = vs_plot_bars(p, "decode, median", dec, nm, err);
        if (!st) st = vs_plot_bars(p, "end-to-end, median", tot, nm, err);
        if (!st) st = vs_plot_bars(p, "TABED eq. 1", e1, nm, err);
        if (!st) st = vs_plot_bars(p, "eq. 1, CPU", e1c, nm, err);
        snprintf(files[*n_files], 128, "speedup_g%d_t%s.svg", G, ts);
        snprintf(path, sizeof(path), "%s/%s", dir, files[*n_files]);
        vs_plot_size(p, 760, 420);
        if (!st && !(st = vs_plot_write(p, path, err))) (*n_files)++;
        vs_plot_free(p);
        if (st) return st;
    }

    /* n-alpha per method, and the distribution of per-sample decode speedups */
    if (!(p = vs_plot_new(VS_PLOT_LINES, err))) return err->code;
    vs_plot *h = vs_plot_new(VS_PLOT_HIST, err);
    if (!h) {
        vs_plot_free(p);
        return err->code;
    }
    snprintf(title, sizeof(title), "n-alpha: acceptance of drafted position n (gamma %d, temperature %s)", G,
             ts);
    st = vs_plot_title(p, title, err);
    if (!st) st = vs_plot_labels(p, "drafted position n", "P(accepted | 1..n-1 accepted)", err);
    vs_plot_yrange(p, 0, 1);
    snprintf(title, sizeof(title), "Per-sample decode speedup (gamma %d, temperature %s)", G, ts);
    if (!st) st = vs_plot_title(h, title, err);
    if (!st) st = vs_plot_labels(h, "speedup over target-only (x)", "samples", err);
    int n_lines = 0, n_hist = 0;
    double *sp = vs_malloc(sizeof(double) * (size_t)VS_MAX(n, 1));
    if (!sp && !st) st = vs_error_set(err, VS_ERR_NOMEM, "out of memory");
    for (int m = 0; m < d->n_methods && !st; m++) {
        if (is_baseline(d->methods[m])) continue;
        vs_bench_group g;
        group(recs, n, d->methods[m], G, T, NULL, 0, NULL, &g);
        if (!g.n) continue;
        double x[VS_SPEC_MAX_GAMMA], y[VS_SPEC_MAX_GAMMA];
        for (int k = 0; k < G; k++) x[k] = k + 1, y[k] = g.n_alpha[k] >= 0 ? g.n_alpha[k] : NAN;
        char lb[64];
        st = vs_plot_line(p, vs_method_label(d->methods[m], lb, sizeof(lb)), x, y, G,
                          VS_PLOT_STYLE_LINE | VS_PLOT_STYLE_MARKERS, err);
        n_lines++;
        int64_t k = 0;
        for (int64_t i = 0; i < n; i++)
            if (!strcmp(recs[i].method, d->methods[m]) && recs[i].gamma == G &&
                fabs(recs[i].temp - T) < 5e-4 && vs_bench_record_speedup_decode(&recs[i]) > 0)
                sp[k++] = vs_bench_record_speedup_decode(&recs[i]);
        if (!st && k > 0) st = vs_plot_hist(h, lb, sp, k, err), n_hist++;
    }
    vs_free(sp);
    if (!st && n_lines > 0) {
        vs_plot_xrange(p, 0.5, G + 0.5);
        snprintf(files[*n_files], 128, "n_alpha_g%d_t%s.svg", G, ts);
        snprintf(path, sizeof(path), "%s/%s", dir, files[*n_files]);
        if (!(st = vs_plot_write(p, path, err))) (*n_files)++;
    }
    if (!st && n_hist > 0) {
        snprintf(files[*n_files], 128, "speedup_hist_g%d_t%s.svg", G, ts);
        snprintf(path, sizeof(path), "%s/%s", dir, files[*n_files]);
        if (!(st = vs_plot_write(h, path, err))) (*n_files)++;
    }
    vs_plot_free(p);
    vs_plot_free(h);
    return st;
}

/* ------------------------------------------------------------------------------------------------ */

vs_status vs_bench_write_report(const vs_bench_record *recs, int64_t n, const vs_bench_report_opts *o,
                                vs_error *err) {
    dims *d = vs_calloc(1, sizeof(dims));
    char(*ring)[64] = vs_calloc(MAX_ROWS, 64);
    char(*files)[128] = vs_calloc(512, 128);
    if (!d || !ring || !files) {
        vs_free(d), vs_free(ring), vs_free(files);
        return vs_error_set(err, VS_ERR_NOMEM, "out of memory");
    }
    int rn = 0, n_files = 0;
    find_dims(recs, n, d);
    char path[4400];
    vs_status st = VS_OK;
    snprintf(path, sizeof(path), "%s/results.csv", o->out_dir);
    if (!st) st = vs_bench_write_csv(recs, n, path, err);
    snprintf(path, sizeof(path), "%s/summary.json", o->out_dir);
    if (!st) st = write_summary(recs, n, d, o, path, err);
    for (int gi = 0; gi < d->n_gammas && !st; gi++)
        for (int ti = 0; ti < d->n_temps && !st && n_files < 500; ti++)
            st = plot_set(recs, n, d, d->gammas[gi], d->temps[ti], o->out_dir, files, &n_files, err);
    vs_outfile out;
    if (!st) {
        snprintf(path, sizeof(path), "%s/report.md", o->out_dir);
        st = vs_outfile_open(&out, path, err);
    }
    FILE *f = out.f;
    if (st) {
        vs_free(d), vs_free(ring), vs_free(files);
        return st;
    }
    fprintf(f, "# %s\n\n", o->title ? o->title : "vlmspec speculative decoding benchmark");
    if (o->sys) {
        char line[512];
        vs_sysinfo_summary(o->sys, line, sizeof(line));
        fprintf(f, "Machine: %s.\n\n", line);
    }
    int64_t n_samples = 0;
    for (int64_t i = 0; i < n; i++) n_samples += is_baseline(recs[i].method);
    fprintf(f, "%lld records (%lld target-only runs) over %d suites; methods:", (long long)n,
            (long long)n_samples, d->n_suites);
    for (int m = 0; m < d->n_methods; m++) fprintf(f, " %s", d->methods[m]);
    fprintf(f, ". Configuration: `%s`.\n\n", o->header_json ? o->header_json : "-");
    fprintf(
        f, "tau = tokens per target verify pass (pooled within a suite; averages are over suites); speedup = "
           "target-only time per token / method time per token of the same sample, turn and temperature "
           "(decode: the generation loop only, as TABED; end-to-end: with vision encoding and prefills, as "
           "MSD eq. 12), mean and median over samples; eq. 1 = tau / (gamma Tq/Tp + 1), eq. 1 CPU = "
           "tau / (gamma Tq/Tp + Tp(gamma+1)/Tp). See docs/bench.md.\n\n");
    if (n == 0) fprintf(f, "No records yet.\n\n");
    fprintf(f, "## Headline: speedup and tau per method\n\n");
    for (int gi = 0; gi < d->n_gammas; gi++)
        for (int ti = 0; ti < d->n_temps; ti++)
            md_headline(f, recs, n, d, d->gammas[gi], d->temps[ti], ring, &rn);
    fprintf(f, "## Block efficiency by suite and turn (TABED Table 1 shape)\n\n");
    for (int gi = 0; gi < d->n_gammas; gi++)
        for (int ti = 0; ti < d->n_temps; ti++)
            md_table1(f, recs, n, d, d->gammas[gi], d->temps[ti], ring, &rn);
    fprintf(f, "## Averaged block efficiency per category (TABED Table 3 shape)\n\n");
    for (int gi = 0; gi < d->n_gammas; gi++)
        for (int ti = 0; ti < d->n_temps; ti++)
            md_table3(f, recs, n, d, d->gammas[gi], d->temps[ti], false, ring, &rn);
    fprintf(f, "## Ensemble weighting strategies (TABED Table 4 shape)\n\n");
    for (int gi = 0; gi < d->n_gammas; gi++)
        for (int ti = 0; ti < d->n_temps; ti++)
            md_table3(f, recs, n, d, d->gammas[gi], d->temps[ti], true, ring, &rn);
    fprintf(f, "## Speedup ratio SR and tau per suite (MSD Table 3 shape)\n\n");
    fprintf(f, "SR = mean end-to-end speedup (MSD's eq. 12 includes the prefill), measured.\n\n");
    for (int gi = 0; gi < d->n_gammas; gi++) {
        fprintf(f, "gamma = %d:\n\n", d->gammas[gi]);
        md_msd(f, recs, n, d, d->gammas[gi], ring, &rn);
    }
    fprintf(f, "## Acceptance, times and checks\n\n");
    for (int gi = 0; gi < d->n_gammas; gi++)
        for (int ti = 0; ti < d->n_temps; ti++)
            md_details(f, recs, n, d, d->gammas[gi], d->temps[ti], ring, &rn);
    md_model_bench(f, o->out_dir);
    fprintf(f, "## Files\n\n- `results.jsonl`: the raw records (append-only, resumable)\n"
               "- `results.csv`: one row per sample x method x gamma x temperature x turn\n"
               "- `summary.json`: machine, configuration and every aggregated group\n");
    for (int i = 0; i < n_files; i++) fprintf(f, "- ![%s](%s)\n", files[i], files[i]);
    fprintf(f, "\n");
    vs_free(d), vs_free(ring), vs_free(files);
    return vs_outfile_commit(&out, err);
}

vs_status vs_bench_report_dir(const char *out_dir, int threads, bool measure_bw, vs_error *err) {
    char path[4200];
    snprintf(path, sizeof(path), "%s/results.jsonl", out_dir);
    vs_bench_results res;
    vs_bench_results_init(&res);
    vs_status st = vs_bench_results_load(path, &res, err);
    if (st) return st;
    vs_sysinfo sys;
    vs_sysinfo_collect(&sys, NULL);
    if (measure_bw) {
        vs_threadpool *tp = threads > 1 ? vs_threadpool_new(threads, NULL) : NULL;
        vs_sysinfo_measure_bandwidth(&sys, tp, (size_t)256 << 20);
        vs_threadpool_free(tp);
    }
    vs_bench_report_opts o = {.out_dir = out_dir, .sys = &sys, .header_json = res.header};
    st = vs_bench_write_report(res.rec, res.n, &o, err);
    vs_bench_results_free(&res);
    return st;
}

vs_status vs_bench_compare(const vs_bench_record *a, int64_t na, const vs_bench_record *b, int64_t nb,
                           FILE *f, double *max_rel, vs_error *err) {
    *max_rel = 0;
    dims *d = vs_calloc(2, sizeof(dims));
    if (!d) return vs_error_set(err, VS_ERR_NOMEM, "out of memory");
    find_dims(a, na, &d[0]);
    find_dims(b, nb, &d[1]);
    if (f)
        fprintf(
            f,
            "| Method | gamma | temperature | median decode speedup (this / reference) | diff | median "
            "end-to-end speedup | diff | tau | runs |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | "
            "---: | ---: |\n");
    /* every (method, gamma, temp) of either run */
    for (int side = 0; side < 2; side++) {
        const dims *x = &d[side];
        for (int m = 0; m < x->n_methods; m++) {
            if (is_baseline(x->methods[m])) continue;
            for (int gi = 0; gi < x->n_gammas; gi++) {
                for (int ti = 0; ti < x->n_temps; ti++) {
                    const char *meth = x->methods[m];
                    int32_t G = x->gammas[gi];
                    double T = x->temps[ti];
                    vs_bench_group ga, gb;
                    group(a, na, meth, G, T, NULL, 0, NULL, &ga);
                    group(b, nb, meth, G, T, NULL, 0, NULL, &gb);
                    if (side == 1 && ga.n > 0) continue; /* listed in the first pass */
                    if (ga.n == 0 && gb.n == 0) continue;
                    char ts[32];
                    fmt_temp(ts, sizeof(ts), T);
                    if (ga.n == 0 || gb.n == 0 || gb.speedup_decode_median <= 0 ||
                        gb.speedup_total_median <= 0) {
                        *max_rel = VS_MAX(*max_rel, 1.0);
                        if (f)
                            fprintf(f, "| %s | %d | %s | only in %s | | | | | |\n", meth, G, ts,
                                    ga.n ? "this run" : "the reference");
                        continue;
                    }
                    double rd =
                        fabs(ga.speedup_decode_median - gb.speedup_decode_median) / gb.speedup_decode_median;
                    double rt =
                        fabs(ga.speedup_total_median - gb.speedup_total_median) / gb.speedup_total_median;
                    *max_rel = VS_MAX(*max_rel, VS_MAX(rd, rt));
                    if (f)
                        fprintf(f,
                                "| %s | %d | %s | %.3f / %.3f | %.1f%% | %.3f / %.3f | %.1f%% | %.3f / %.3f "
                                "| %lld / %lld |\n",
                                meth, G, ts, ga.speedup_decode_median, gb.speedup_decode_median, 100 * rd,
                                ga.speedup_total_median, gb.speedup_total_median, 100 * rt, ga.tau, gb.tau,
                                (long long)ga.n, (long long)gb.n);
                }
            }
        }
    }
    vs_free(d);
    return VS_OK;
}
