/* test_bench: the benchmark harness. Aggregation with known answers on synthetic logs (tau, n-alpha,
 * histogram, speedup mean / median, TABED eq. 1 incl. the paper's own example), agreement with
 * vs_spec_stats_compute, record JSON round trips and malformed records, the results file (partial last
 * line dropped and truncated, damaged middle line refused, header mismatch refused, later record of a
 * cell wins), the report files, sysinfo parsing and git HEAD reading, and an end-to-end smoke run on
 * tiny random models and a tiny generated world: every greedy output identical to target-only, a second
 * run resumes with nothing to do, an interrupted run re-measures only the cut cells. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"
#include "draft_dream.h"
#include "draft_msd.h"
#include "methods.h"
#include "testutil.h"

static void add_block(vs_spec_log *log, int n_draft, int n_eval, int n_accept, int n_emit, int n_steps,
                      double td, double tv) {
    vs_spec_block b = {.n_draft = n_draft,
                       .n_eval = n_eval,
                       .n_accept = n_accept,
                       .n_emit = n_emit,
                       .n_steps = n_steps,
                       .t_draft = td,
                       .t_verify = tv};
    vs_error err = {0};
    VT_REQUIRE(vs_spec_log_add_block(log, &b, &err) == VS_OK, "%s", err.msg);
    int32_t tok[8] = {5, 6, 7, 8, 9, 10, 11, 12};
    VT_REQUIRE(vs_spec_log_add_tokens(log, tok, n_emit, &err) == VS_OK, "%s", err.msg);
}

/* A gamma-3 run of 7 tokens in 3 blocks (accepted 3, 1, 0) and its target-only baseline (7 steps). */
static void make_logs(vs_spec_log *log, vs_spec_log *base) {
    vs_spec_log_init(log);
    vs_spec_log_init(base);
    log->gamma = 3;
    log->n_prompt = 20;
    add_block(log, 3, 3, 3, 4, 3, 0.03, 0.02); /* all accepted + bonus */
    add_block(log, 3, 2, 1, 2, 3, 0.03, 0.02); /* 1 accepted, rejected at 2 */
    add_block(log, 3, 1, 0, 1, 3, 0.03, 0.02); /* rejected at 1 */
    log->t_prefill = 0.05, log->t_draft_prefill = 0.01, log->t_decode = 0.2;
    log->stop = VS_SPEC_STOP_LIMIT;
    base->gamma = 0;
    base->n_prompt = 20;
    for (int i = 0; i < 7; i++) add_block(base, 0, 0, 0, 1, 0, 0, 0.04);
    base->t_prefill = 0.05, base->t_decode = 0.35;
    base->stop = VS_SPEC_STOP_LIMIT;
}

static void test_record_and_aggregate(void) {
    vs_spec_log log, base;
    make_logs(&log, &base);
    vs_bench_record r;
    memset(&r, 0, sizeof(r));
    snprintf(r.sample, sizeof(r.sample), "s0");
    snprintf(r.method, sizeof(r.method), "m");
    snprintf(r.suite, sizeof(r.suite), "vqa");
    r.turn = 1;
    r.t_vision = 0.04;
    vs_bench_record_fill(&r, &log, &base);
    VT_CHECK(r.n_tokens == 7 && r.n_blocks == 3 && r.n_drafted == 9 && r.n_accepted == 4 && r.n_steps == 9,
             "counts %d %d %lld %lld %lld", r.n_tokens, r.n_blocks, (long long)r.n_drafted,
             (long long)r.n_accepted, (long long)r.n_steps);
    VT_CHECK(r.hist[0] == 1 && r.hist[1] == 1 && r.hist[2] == 0 && r.hist[3] == 1, "histogram");
    VT_CHECK(r.alpha_num[0] == 2 && r.alpha_den[0] == 3, "1-alpha %lld/%lld", (long long)r.alpha_num[0],
             (long long)r.alpha_den[0]);
    VT_CHECK(r.alpha_num[1] == 1 && r.alpha_den[1] == 2, "2-alpha");
    VT_CHECK(r.alpha_num[2] == 1 && r.alpha_den[2] == 1, "3-alpha");
    VT_CHECK(r.n_verify_full == 3 && fabs(r.t_verify_full - 0.06) < 1e-12, "full blocks");
    VT_CHECK(r.identical == 0, "outputs differ (the baseline emits other tokens)");
    VT_CHECK_NEAR(r.t_total, 0.04 + 0.05 + 0.01 + 0.2, 1e-12, "t_total");
    VT_CHECK_NEAR(r.base_t_total, 0.04 + 0.05 + 0.35, 1e-12, "base t_total");
    VT_CHECK_NEAR(vs_bench_record_tau(&r), 7.0 / 3.0, 1e-12, "tau");
    VT_CHECK_NEAR(vs_bench_record_speedup_decode(&r), 0.35 / 0.2, 1e-12, "decode speedup");
    VT_CHECK_NEAR(vs_bench_record_speedup_total(&r), 0.44 / 0.30, 1e-12, "end-to-end speedup");

    vs_bench_filter any = vs_bench_filter_any();
    vs_bench_group g;
    vs_error err = {0};
    VT_REQUIRE(vs_bench_aggregate(&r, 1, &any, &g, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(g.n == 1 && g.gamma == 3, "group");
    VT_CHECK_NEAR(g.tau, 7.0 / 3.0, 1e-12, "tau");
    VT_CHECK_NEAR(g.n_alpha[0], 2.0 / 3.0, 1e-12, "1-alpha");
    VT_CHECK_NEAR(g.n_alpha[1], 0.5, 1e-12, "2-alpha");
    VT_CHECK_NEAR(g.n_alpha[2], 1.0, 1e-12, "3-alpha");
    VT_CHECK(g.n_alpha[3] == -1, "no data beyond gamma");
    VT_CHECK_NEAR(g.accept_rate, 4.0 / 6.0, 1e-12, "acceptance = accepted / decided");
    VT_CHECK_NEAR(g.tq, 0.01, 1e-12, "Tq = 0.09 s / 9 steps");
    VT_CHECK_NEAR(g.tp, 0.04, 1e-12, "Tp = baseline step");
    VT_CHECK_NEAR(g.tp_verify, 0.02, 1e-12, "Tp(gamma+1)");
    VT_CHECK_NEAR(g.est_eq1, (7.0 / 3.0) / (3 * 0.25 + 1), 1e-12, "eq. 1");
    VT_CHECK_NEAR(g.est_eq1_cpu, (7.0 / 3.0) / (3 * 0.25 + 0.5), 1e-12, "eq. 1 CPU");
    VT_CHECK_NEAR(g.speedup_decode_mean, 1.75, 1e-12, "speedup");
    VT_CHECK_NEAR(g.speedup_total_median, 0.44 / 0.30, 1e-12, "speedup");
    VT_CHECK_NEAR(g.tok_s_decode, 35.0, 1e-9, "tokens/s");

    /* the same definitions as the engine's own statistics */
    vs_spec_stats s;
    log.t_vision = 0.04;
    log.t_total = 0.04 + 0.05 + 0.01 + 0.2;
    base.t_vision = 0.04;
    base.t_total = 0.04 + 0.05 + 0.35;
    vs_spec_stats_compute(&log, &base, &s);
    VT_CHECK_NEAR(s.tau, g.tau, 1e-12, "tau vs spec stats");
    for (int k = 0; k < 3; k++)
        VT_CHECK_NEAR(s.n_alpha[k], g.n_alpha[k], 1e-12, "n-alpha %d vs spec stats", k);
    VT_CHECK_NEAR(s.accept_rate, g.accept_rate, 1e-12, "acceptance vs spec stats");
    VT_CHECK_NEAR(s.tq, g.tq, 1e-12, "Tq vs spec stats");
    VT_CHECK_NEAR(s.tp, g.tp, 1e-12, "Tp vs spec stats");
    VT_CHECK_NEAR(s.est_tabed, g.est_eq1, 1e-12, "eq. 1 vs spec stats");
    VT_CHECK_NEAR(s.est_tabed_cpu, g.est_eq1_cpu, 1e-12, "eq. 1 CPU vs spec stats");
    VT_CHECK_NEAR(s.speedup_decode, g.speedup_decode_mean, 1e-12, "decode speedup vs spec stats");
    VT_CHECK_NEAR(s.speedup_total, g.speedup_total_mean, 1e-12, "total speedup vs spec stats");
    for (int k = 0; k <= 3; k++) VT_CHECK(s.hist[k] == g.hist[k], "hist %d", k);

    /* the target-only record: tau 1, speedup 1, identical to itself */
    vs_bench_record b0;
    memset(&b0, 0, sizeof(b0));
    b0.t_vision = 0.04;
    vs_bench_record_fill(&b0, &base, &base);
    VT_CHECK(b0.identical == 1 && vs_bench_record_tau(&b0) == 1.0, "baseline record");
    VT_CHECK_NEAR(vs_bench_record_speedup_decode(&b0), 1.0, 1e-12, "baseline speedup");
    VT_CHECK_NEAR(vs_bench_record_speedup_total(&b0), 1.0, 1e-12, "baseline speedup");
    vs_spec_log_free(&log);
    vs_spec_log_free(&base);
}

/* A record with chosen tokens / blocks and a chosen decode speedup. */
static vs_bench_record rec_of(const char *sample, const char *method, const char *suite, int turn, int gamma,
                              double temp, int tokens, int blocks, double speedup) {
    vs_bench_record r;
    memset(&r, 0, sizeof(r));
    snprintf(r.sample, sizeof(r.sample), "%s", sample);
    snprintf(r.method, sizeof(r.method), "%s", method);
    snprintf(r.suite, sizeof(r.suite), "%s", suite);
    snprintf(r.turn_kind, sizeof(r.turn_kind), "%s", turn == 1 ? "first" : "followup");
    snprintf(r.stop, sizeof(r.stop), "limit");
    r.turn = turn, r.gamma = gamma, r.temp = temp;
    r.n_tokens = tokens, r.n_blocks = blocks;
    r.n_drafted = (int64_t)blocks * gamma;
    r.n_accepted = tokens - blocks;
    r.n_steps = r.n_drafted;
    r.hist[gamma] = blocks;
    for (int k = 0; k < gamma; k++) r.alpha_num[k] = r.alpha_den[k] = blocks;
    r.t_decode = 1.0;
    r.t_total = 2.0;
    r.base_tokens = tokens;
    r.base_blocks = tokens;
    r.base_t_decode = speedup; /* (speedup / tokens) / (1 / tokens) */
    r.base_t_total = 2.0 * speedup;
    r.base_t_verify = 0.5 * tokens;
    r.t_draft = 0.1 * (double)r.n_steps;
    r.identical = temp == 0 ? 1 : -1;
    r.correct = -1;
    return r;
}

static void test_group_statistics(void) {
    vs_bench_record rs[7];
    rs[0] = rec_of("a", "m", "vqa", 1, 3, 0, 8, 2, 1.0);
    rs[1] = rec_of("b", "m", "vqa", 1, 3, 0, 12, 3, 2.0);
    rs[2] = rec_of("c", "m", "pope", 1, 3, 0, 4, 1, 4.0);
    rs[3] = rec_of("c", "m", "pope", 2, 3, 0, 4, 2, 3.0);
    rs[4] = rec_of("a", "t", "vqa", 1, 3, 0, 4, 4, 0.5);
    rs[5] = rec_of("a", "m", "vqa", 1, 5, 0, 6, 1, 9.0);
    rs[6] = rec_of("a", "m", "vqa", 1, 3, 1, 6, 6, 9.0);
    vs_error err = {0};
    vs_bench_filter f = vs_bench_filter_any();
    f.method = "m", f.gamma = 3, f.temp = 0, f.turn = 1;
    vs_bench_group g;
    VT_REQUIRE(vs_bench_aggregate(rs, 7, &f, &g, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(g.n == 3, "%lld records", (long long)g.n);
    VT_CHECK_NEAR(g.tau, 24.0 / 6.0, 1e-12, "pooled tau = tokens / blocks");
    VT_CHECK_NEAR(g.speedup_decode_mean, 7.0 / 3.0, 1e-12, "mean of 1, 2, 4");
    VT_CHECK_NEAR(g.speedup_decode_median, 2.0, 1e-12, "median of 1, 2, 4");
    VT_CHECK_NEAR(g.speedup_total_mean, 7.0 / 3.0, 1e-12, "end-to-end mean");
    f.turn = 0; /* both turns: speedups 1, 2, 4, 3 */
    VT_REQUIRE(vs_bench_aggregate(rs, 7, &f, &g, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(g.n == 4 && g.n_speedup == 4, "%lld", (long long)g.n);
    VT_CHECK_NEAR(g.speedup_decode_median, 2.5, 1e-12, "even-count median");
    VT_CHECK_NEAR(g.speedup_decode_mean, 2.5, 1e-12, "mean");
    VT_CHECK(g.n_compared == 4 && g.n_identical == 4, "identity counts");
    f.suite = "pope";
    VT_REQUIRE(vs_bench_aggregate(rs, 7, &f, &g, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(g.n == 2 && g.n_tokens == 8 && g.n_blocks == 3, "suite filter");
    f = vs_bench_filter_any();
    f.method = "m";
    VT_REQUIRE(vs_bench_aggregate(rs, 7, &f, &g, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(g.n == 6 && g.gamma == -1 && g.est_eq1 == 0, "mixed gammas: gamma -1, no eq. 1");
    f.temp = 1;
    VT_REQUIRE(vs_bench_aggregate(rs, 7, &f, &g, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(g.n == 1 && g.n_compared == 0, "temperature filter; sampled runs are not compared");
    f = vs_bench_filter_any();
    f.method = "none";
    VT_REQUIRE(vs_bench_aggregate(rs, 7, &f, &g, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(g.n == 0 && g.tau == 0 && g.speedup_decode_median == 0 && g.n_alpha[0] == -1, "empty group");

    /* TABED app. G: tau 2.29, gamma 5, Tq/Tp 0.063 -> 2.29 / (5 * 0.063 + 1) = 1.74 */
    vs_bench_record t = rec_of("x", "tabed-mt", "vqa", 1, 5, 0, 229, 100, 1.0);
    t.n_steps = 1000, t.t_draft = 63.0;         /* Tq = 0.063 */
    t.base_blocks = 229, t.base_t_verify = 229; /* Tp = 1 */
    f = vs_bench_filter_any();
    VT_REQUIRE(vs_bench_aggregate(&t, 1, &f, &g, &err) == VS_OK, "%s", err.msg);
    VT_CHECK_NEAR(g.tq_tp, 0.063, 1e-12, "Tq/Tp");
    VT_CHECK_NEAR(g.est_eq1, 2.29 / 1.315, 1e-12, "eq. 1");
    VT_CHECK(fabs(g.est_eq1 - 1.74) < 0.005, "the paper's 1.74: %.4f", g.est_eq1);

    double v[] = {5, 1, 3};
    VT_CHECK(vs_bench_median(v, 3) == 3 && vs_bench_median(v, 0) == 0, "median");
}

static void test_compare(void) {
    vs_bench_record a[4] = {
        rec_of("a", "ar", "vqa", 1, 0, 0, 8, 8, 1.0), rec_of("a", "m", "vqa", 1, 3, 0, 8, 2, 2.0),
        rec_of("b", "ar", "vqa", 1, 0, 0, 8, 8, 1.0), rec_of("b", "m", "vqa", 1, 3, 0, 8, 2, 2.0)};
    vs_bench_record b[4];
    memcpy(b, a, sizeof(a));
    vs_error err = {0};
    double rel = -1;
    VT_CHECK(vs_bench_compare(a, 4, b, 4, NULL, &rel, &err) == VS_OK && rel == 0, "identical runs: %g", rel);
    b[1].base_t_decode = b[3].base_t_decode = 2.2; /* reference median decode speedup 2.2 */
    b[1].base_t_total = b[3].base_t_total = 4.4;   /* and end-to-end 2.2 */
    VT_CHECK(vs_bench_compare(a, 4, b, 4, NULL, &rel, &err) == VS_OK && fabs(rel - 0.2 / 2.2) < 1e-12,
             "10%% faster reference: %g", rel);
    a[3] = rec_of("b", "t", "vqa", 1, 3, 0, 8, 2, 2.0); /* a method only this run has */
    VT_CHECK(vs_bench_compare(a, 4, b, 4, NULL, &rel, &err) == VS_OK && rel == 1, "missing group: %g", rel);
}

static void test_record_json(void) {
    vs_bench_record r = rec_of("test-vqa-00001", "tabed-mtcp", "vqa", 2, 4, 0.7, 33, 9, 1.37);
    r.t_vision = 0.0123456789;
    r.t_caption = 1e-7;
    r.alpha_num[2] = 3;
    r.identical = -1, r.correct = 1;
    r.n_prompt = 123, r.n_images = 2;
    size_t len = 0;
    char *s = vs_bench_record_to_json(&r, &len);
    VT_REQUIRE(s && len == strlen(s), "serialised");
    vs_error err = {0};
    vs_json_doc *doc = vs_json_parse(s, len, "record", &err);
    VT_REQUIRE(doc, "%s", err.msg);
    vs_bench_record back;
    VT_CHECK(vs_bench_record_from_json(vs_json_root(doc), "record", &back, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(memcmp(&r, &back, sizeof(r)) == 0, "round trip differs");
    vs_json_doc_free(doc);
    /* damaged copies */
    const char *cuts[][2] = {{"\"n_blocks\":9,", ""},
                             {"\"hist\":[0,0,0,0,9]", "\"hist\":[0,0,9]"},
                             {"\"gamma\":4", "\"gamma\":-4"},
                             {"\"t_decode\":1", "\"t_decode\":\"x\""},
                             {"\"n_accepted\":24", "\"n_accepted\":99"}};
    for (size_t i = 0; i < VS_ARRAY_LEN(cuts); i++) {
        char buf[8192];
        const char *at = strstr(s, cuts[i][0]);
        VT_REQUIRE(at, "pattern %s not in %s", cuts[i][0], s);
        snprintf(buf, sizeof(buf), "%.*s%s%s", (int)(at - s), s, cuts[i][1], at + strlen(cuts[i][0]));
        doc = vs_json_parse(buf, strlen(buf), "bad", &err);
        VT_REQUIRE(doc, "%s", err.msg);
        vs_status st = vs_bench_record_from_json(vs_json_root(doc), "bad record", &back, &err);
        VT_CHECK(st == VS_ERR_FORMAT && strstr(err.msg, "bad record"), "damage %zu accepted: %s", i, err.msg);
        vs_json_doc_free(doc);
    }
    vs_free(s);
}

static long file_size(const char *path) {
    struct stat sb;
    return stat(path, &sb) ? -1 : (long)sb.st_size;
}

static void append_raw(const char *path, const char *text) {
    FILE *f = fopen(path, "ab");
    VT_REQUIRE(f, "open %s", path);
    fputs(text, f);
    fclose(f);
}

static void test_results_file(void) {
    char path[512];
    snprintf(path, sizeof(path), "%s/results.jsonl", vt_tmpdir());
    remove(path);
    vs_error err = {0};
    vs_bench_results res;
    vs_bench_results_init(&res);
    VT_CHECK(vs_bench_results_load(path, &res, &err) == VS_OK && res.n == 0 && !res.header,
             "missing file = empty");
    const char *hdr = "{\"type\":\"header\",\"n_predict\":16}";
    vs_bench_results_file rf;
    VT_REQUIRE(vs_bench_results_open(&rf, path, &res, hdr, &err) == VS_OK, "%s", err.msg);
    vs_bench_record rs[3] = {rec_of("a", "ar", "vqa", 1, 0, 0, 5, 5, 1),
                             rec_of("a", "m", "vqa", 1, 3, 0, 8, 2, 2),
                             rec_of("a", "m", "vqa", 1, 5, 0, 8, 2, 2)};
    VT_CHECK(vs_bench_results_append(&rf, rs, 2, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(vs_bench_results_append(&rf, rs + 2, 1, &err) == VS_OK, "%s", err.msg);
    vs_bench_results_close(&rf);
    VT_REQUIRE(vs_bench_results_load(path, &res, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(res.n == 3 && res.header && !strcmp(res.header, hdr) && res.n_dropped == 0, "reload");
    VT_CHECK(res.good_bytes == file_size(path), "valid prefix is the whole file");
    VT_CHECK(vs_bench_results_find(&res, "a", 1, "m", 5, 0) == 2, "find");
    VT_CHECK(vs_bench_results_find(&res, "a", 1, "m", 5, 1) == -1, "other temperature");
    VT_CHECK(vs_bench_results_find(&res, "a", 2, "m", 5, 0) == -1, "other turn");
    VT_CHECK(vs_bench_results_find(&res, "a", 1, "ar", 0, 0.0001) == 0, "temperature key is rounded");
    VT_CHECK(!memcmp(&res.rec[1], &rs[1], sizeof(rs[1])), "record content survives");

    /* a killed writer leaves a partial line: dropped on reading, truncated on reopening */
    long good = file_size(path);
    append_raw(path, "{\"type\":\"record\",\"sample\":\"b\",\"su");
    VT_REQUIRE(vs_bench_results_load(path, &res, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(res.n == 3 && res.n_dropped == 1 && res.good_bytes == good, "partial line dropped");
    VT_REQUIRE(vs_bench_results_open(&rf, path, &res, hdr, &err) == VS_OK, "%s", err.msg);
    vs_bench_record again = rec_of("a", "m", "vqa", 1, 5, 0, 9, 3, 2);
    VT_CHECK(vs_bench_results_append(&rf, &again, 1, &err) == VS_OK, "%s", err.msg);
    vs_bench_results_close(&rf);
    VT_REQUIRE(vs_bench_results_load(path, &res, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(res.n == 4 && res.n_dropped == 0, "appended after the truncation: %lld, dropped %lld",
             (long long)res.n, (long long)res.n_dropped);
    int64_t k = vs_bench_results_find(&res, "a", 1, "m", 5, 0);
    VT_CHECK(k == 3 && res.rec[k].n_tokens == 9, "the later record of a cell wins");
    /* a complete but damaged last line is dropped too */
    append_raw(path, "{\"type\":\"record\",\"sample\":\"b\"}\n");
    VT_REQUIRE(vs_bench_results_load(path, &res, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(res.n == 4 && res.n_dropped == 1, "damaged last line");
    /* ... but not a damaged line in the middle */
    append_raw(path, "{\"type\":\"header\"}\n");
    VT_CHECK(vs_bench_results_load(path, &res, &err) == VS_ERR_FORMAT && strstr(err.msg, ":6"),
             "damaged middle line: %s", err.msg);
    VT_CHECK(res.n == 0, "nothing kept after an error");
    /* another configuration's file is refused */
    remove(path);
    VT_REQUIRE(vs_bench_results_load(path, &res, &err) == VS_OK, "%s", err.msg);
    VT_REQUIRE(vs_bench_results_open(&rf, path, &res, hdr, &err) == VS_OK, "%s", err.msg);
    vs_bench_results_close(&rf);
    VT_REQUIRE(vs_bench_results_load(path, &res, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(vs_bench_results_open(&rf, path, &res, "{\"type\":\"header\",\"n_predict\":32}", &err) ==
                     VS_ERR_INVALID &&
                 strstr(err.msg, "--fresh"),
             "header mismatch: %s", err.msg);
    /* many records: the index survives growth */
    vs_bench_results_free(&res);
    for (int i = 0; i < 1000; i++) {
        char name[32];
        snprintf(name, sizeof(name), "s%d", i);
        vs_bench_record r = rec_of(name, "t", "ocr", 1 + i % 2, 3, 0, 4, 2, 1);
        VT_REQUIRE(vs_bench_results_add(&res, &r, &err) == VS_OK, "%s", err.msg);
    }
    bool all = true;
    for (int i = 0; i < 1000; i++) {
        char name[32];
        snprintf(name, sizeof(name), "s%d", i);
        all &= vs_bench_results_find(&res, name, 1 + i % 2, "t", 3, 0) == i;
    }
    VT_CHECK(all, "index lookups after growth");
    vs_bench_results_free(&res);
}

static bool file_has(const char *path, const char *needle) {
    uint8_t *d = NULL;
    size_t n = 0;
    if (vs_read_file(path, &d, &n, NULL)) return false;
    bool ok = strstr((const char *)d, needle) != NULL;
    vs_free(d);
    return ok;
}

static int count_lines(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    int n = 0, c;
    while ((c = fgetc(f)) != EOF) n += c == '\n';
    fclose(f);
    return n;
}

static void test_report_files(void) {
    char dir[512], path[600];
    snprintf(dir, sizeof(dir), "%s/report", vt_tmpdir());
    mkdir(dir, 0777);
    vs_bench_record rs[8];
    int n = 0;
    const char *suites[] = {"vqa", "pope", "story", "text"};
    for (int s = 0; s < 4; s++) {
        char id[32];
        snprintf(id, sizeof(id), "x-%d", s);
        rs[n++] = rec_of(id, "ar", suites[s], 1, 0, 0, 10, 10, 1.0);
        rs[n++] = rec_of(id, "m", suites[s], 1, 3, 0, 10, 4 - (s % 2), 1.5 + s);
    }
    vs_sysinfo sys;
    vs_sysinfo_collect(&sys, NULL);
    vs_bench_report_opts o = {.out_dir = dir, .sys = &sys, .header_json = "{\"type\":\"header\"}"};
    /* a model-bench file joins the report */
    snprintf(path, sizeof(path), "%s/model-bench-target.json", dir);
    FILE *f = fopen(path, "wb");
    VT_REQUIRE(f, "open %s", path);
    fputs(
        "{\"model\":\"target.gguf\",\"type\":\"F16\",\"size_bytes\":1048576,\"params\":500000,\"threads\":2,"
        "\"tests\":[{\"test\":\"tg32\",\"median_s\":0.1,\"tokens_per_s\":320.5}],\"verify_prompt\":64,"
        "\"verify\":[{\"k\":1,\"median_ms\":3.1,\"ratio_to_k1\":1},{\"k\":4,\"median_ms\":4.2,\"ratio_to_"
        "k1\":1.35}]}\n",
        f);
    fclose(f);
    vs_error err = {0};
    VT_REQUIRE(vs_bench_write_report(rs, n, &o, &err) == VS_OK, "%s", err.msg);
    snprintf(path, sizeof(path), "%s/report.md", dir);
    VT_CHECK(file_has(path, "TABED Table 1") && file_has(path, "TABED Table 3") &&
                 file_has(path, "MSD Table 3"),
             "report sections");
    VT_CHECK(file_has(path, "story (OOD)") && file_has(path, "text (NLP)"), "OOD / NLP columns");
    VT_CHECK(file_has(path, "| Single | M | 2.50 | 3.33 | 2.92 |"), "table 1 row (vqa 10/4, pope 10/3, avg)");
    VT_CHECK(file_has(path, "320.50") && file_has(path, "1.350"), "model bench figures");
    VT_CHECK(file_has(path, "speedup_g3_t0.svg"), "plots listed");
    snprintf(path, sizeof(path), "%s/results.csv", dir);
    VT_CHECK(count_lines(path) == n + 1, "csv rows: %d", count_lines(path));
    VT_CHECK(file_has(path, "sample,suite,turn,turn_kind,method,gamma"), "csv header");
    snprintf(path, sizeof(path), "%s/summary.json", dir);
    uint8_t *d = NULL;
    size_t len = 0;
    VT_REQUIRE(vs_read_file(path, &d, &len, &err) == VS_OK, "%s", err.msg);
    vs_json_doc *doc = vs_json_parse((const char *)d, len, path, &err);
    VT_CHECK(doc != NULL, "summary.json parses: %s", err.msg);
    const vs_json *groups = doc ? vs_json_get(vs_json_root(doc), "groups") : NULL;
    VT_CHECK(groups && groups->type == VS_JSON_ARRAY && groups->len > 4, "groups");
    const vs_json *machine = doc ? vs_json_get(vs_json_root(doc), "machine") : NULL;
    VT_CHECK(vs_json_get_int(machine, "logical_cpus", 0) >= 1, "machine information");
    vs_json_doc_free(doc);
    vs_free(d);
    const char *svgs[] = {"tau_g3_t0.svg", "speedup_g3_t0.svg", "n_alpha_g3_t0.svg",
                          "speedup_hist_g3_t0.svg"};
    for (size_t i = 0; i < VS_ARRAY_LEN(svgs); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, svgs[i]);
        VT_CHECK(file_has(path, "<svg") && file_has(path, "</svg>"), "%s", svgs[i]);
    }
    /* no records: still a report */
    snprintf(dir, sizeof(dir), "%s/report-empty", vt_tmpdir());
    mkdir(dir, 0777);
    o.out_dir = dir;
    VT_CHECK(vs_bench_write_report(rs, 0, &o, &err) == VS_OK, "%s", err.msg);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    VT_REQUIRE(f, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

static void test_sysinfo(void) {
    vs_sysinfo s;
    memset(&s, 0, sizeof(s));
    /* 2 sockets x 2 cores x 2 threads */
    char cpu[4096] = "";
    for (int p = 0; p < 8; p++)
        snprintf(cpu + strlen(cpu), sizeof(cpu) - strlen(cpu),
                 "processor\t: %d\nmodel name\t: Test CPU @ 2.00GHz\nphysical id\t: %d\ncore id\t\t: %d\n"
                 "flags\t\t: fpu sse avx avx2 fma avx512f avx512_vnni amx_int8 avx512fx\n\n",
                 p, p / 4, (p / 2) % 2);
    vs_sysinfo_parse_proc(&s, cpu, "MemTotal:       16384 kB\nMemFree: 1 kB\n");
    VT_CHECK(!strcmp(s.cpu_model, "Test CPU @ 2.00GHz"), "model '%s'", s.cpu_model);
    VT_CHECK(s.n_cores == 4 && s.n_sockets == 2, "cores %d sockets %d", s.n_cores, s.n_sockets);
    VT_CHECK(s.mem_total == 16384 * 1024LL, "memory");
    VT_CHECK(!strcmp(s.cpu_flags, "avx2 fma avx512f avx512_vnni amx_int8"), "flags '%s'", s.cpu_flags);
    vs_sysinfo t;
    memset(&t, 0, sizeof(t));
    vs_sysinfo_parse_proc(&t, "garbage", NULL);
    VT_CHECK(t.n_cores == 0 && t.mem_total == 0 && !t.cpu_model[0], "unknown stays empty");

    /* git: symbolic ref (loose, then packed), detached, gitdir file, none */
    const char *sha = "0123456789abcdef0123456789abcdef01234567";
    const char *sha2 = "fedcba9876543210fedcba9876543210fedcba98";
    char dir[512], p[1200], commit[41], ref[128];
    snprintf(dir, sizeof(dir), "%s/repo", vt_tmpdir());
    snprintf(p, sizeof(p), "mkdir -p %s/.git/refs/heads %s/sub/deeper", dir, dir);
    VT_REQUIRE(vt_run("%s", p) == 0, "mkdir");
    snprintf(p, sizeof(p), "%s/.git/HEAD", dir);
    write_text(p, "ref: refs/heads/main\n");
    snprintf(p, sizeof(p), "%s/.git/refs/heads/main", dir);
    write_text(p, sha);
    vs_error err = {0};
    snprintf(p, sizeof(p), "%s/sub/deeper", dir);
    VT_CHECK(vs_git_head(p, commit, ref, sizeof(ref), &err) == VS_OK && !strcmp(commit, sha) &&
                 !strcmp(ref, "refs/heads/main"),
             "loose ref from a subdirectory: %s %s %s", commit, ref, err.msg);
    snprintf(p, sizeof(p), "%s/.git/refs/heads/main", dir);
    remove(p);
    snprintf(p, sizeof(p), "%s/.git/packed-refs", dir);
    char packed[256];
    snprintf(packed, sizeof(packed), "# pack-refs with: peeled\n%s refs/heads/mainline\n%s refs/heads/main\n",
             sha2, sha);
    write_text(p, packed);
    VT_CHECK(vs_git_head(dir, commit, ref, sizeof(ref), &err) == VS_OK && !strcmp(commit, sha),
             "packed ref: %s", err.msg);
    snprintf(p, sizeof(p), "%s/.git/HEAD", dir);
    write_text(p, sha2);
    VT_CHECK(vs_git_head(dir, commit, ref, sizeof(ref), &err) == VS_OK && !strcmp(commit, sha2) && !ref[0],
             "detached HEAD");
    write_text(p, "nonsense\n");
    VT_CHECK(vs_git_head(dir, commit, ref, sizeof(ref), &err) == VS_ERR_FORMAT, "malformed HEAD");
    write_text(p, "ref: refs/heads/gone\n");
    VT_CHECK(vs_git_head(dir, commit, ref, sizeof(ref), &err) == VS_ERR_FORMAT, "unresolvable ref");
    /* a worktree-style .git file */
    char wt[512];
    snprintf(wt, sizeof(wt), "%s/wt", vt_tmpdir());
    snprintf(p, sizeof(p), "mkdir -p %s %s/.git/worktrees/wt", wt, dir);
    VT_REQUIRE(vt_run("%s", p) == 0, "mkdir");
    snprintf(p, sizeof(p), "%s/.git", wt);
    char gd[600];
    snprintf(gd, sizeof(gd), "gitdir: %s/.git/worktrees/wt\n", dir);
    write_text(p, gd);
    snprintf(p, sizeof(p), "%s/.git/worktrees/wt/HEAD", dir);
    write_text(p, "ref: refs/heads/main\n");
    snprintf(p, sizeof(p), "%s/.git/worktrees/wt/commondir", dir);
    write_text(p, "../..\n");
    VT_CHECK(vs_git_head(wt, commit, ref, sizeof(ref), &err) == VS_OK && !strcmp(commit, sha),
             "worktree via commondir and packed-refs: %s", err.msg);
    VT_CHECK(vs_git_head("/proc/self", commit, ref, sizeof(ref), &err) == VS_ERR_IO, "no repository");
    /* this checkout (tests run from the project root) */
    if (access(".git", F_OK) == 0) {
        VT_CHECK(vs_git_head(".", commit, ref, sizeof(ref), &err) == VS_OK && strlen(commit) == 40,
                 "own repo: %s", err.msg);
    }
    vs_sysinfo_collect(&s, NULL);
    VT_CHECK(s.n_cpus >= 1 && s.isa[0], "collect");
    /* /proc files report size 0: they must still be read */
    FILE *ci = fopen("/proc/cpuinfo", "rb");
    if (ci) {
        char line[256];
        bool has_model = false, has_core = false;
        while (fgets(line, sizeof(line), ci)) {
            has_model |= !strncmp(line, "model name", 10);
            has_core |= !strncmp(line, "core id", 7);
        }
        fclose(ci);
        VT_CHECK(!has_model || s.cpu_model[0], "CPU model not read from /proc/cpuinfo");
        VT_CHECK(!has_core || s.n_cores >= 1, "cores not read from /proc/cpuinfo");
        VT_CHECK(s.mem_total > 0, "memory");
    }
    vs_json_writer w;
    vs_json_writer_init(&w);
    vs_sysinfo_json(&s, &w);
    vs_json_doc *doc = vs_json_parse(w.buf, w.len, "sysinfo", &err);
    VT_CHECK(doc && vs_json_get_int(vs_json_root(doc), "logical_cpus", 0) == s.n_cpus, "json: %s", err.msg);
    vs_json_doc_free(doc);
    vs_json_writer_free(&w);
    char line[512];
    vs_sysinfo_summary(&s, line, sizeof(line));
    VT_CHECK(strstr(line, "logical CPUs") != NULL, "summary '%s'", line);
}

/* ------------------------------------------------------------------------------------------------
 * End to end on tiny random models and a tiny generated world */

/* Method names with a token-tree shape (methods.h). */
static void test_method_shapes(void) {
    static const struct {
        const char *name;
        bool ok;
        int w, k, n;
    } cases[] = {
        {"m", true, 1, 0, 0},          {"m@w3", true, 3, 0, 0},        {"m@k4", true, 0, 4, 0},
        {"tabed-mt@k4n24", true, 0, 4, 24}, {"m@k16n256", true, 0, 16, 256}, {"ar@k2", false, 0, 0, 0},
        {"m@w1", false, 0, 0, 0},      {"m@w9", false, 0, 0, 0},       {"m@k0", false, 0, 0, 0},
        {"m@k17", false, 0, 0, 0},     {"m@k4n", false, 0, 0, 0},      {"m@k4n0", false, 0, 0, 0},
        {"m@k4n257", false, 0, 0, 0},  {"m@", false, 0, 0, 0},         {"m@x2", false, 0, 0, 0},
        {"m@w3n2", false, 0, 0, 0},    {"m@k4x", false, 0, 0, 0},      {"mx@k2", false, 0, 0, 0},
        {"m@k99999999999", false, 0, 0, 0},
    };
    for (size_t i = 0; i < VS_ARRAY_LEN(cases); i++) {
        const vs_method *m = vs_method_find(cases[i].name);
        VT_CHECK(!!m == cases[i].ok, "%s: %s", cases[i].name, m ? "accepted" : "refused");
        if (!m || !cases[i].ok) continue;
        vs_method_opts o = {.tree_width = 1};
        vs_method_shape(cases[i].name, &o);
        VT_CHECK(o.tree_width == cases[i].w && o.tree_top_k == cases[i].k && o.tree_nodes == cases[i].n,
                 "%s: width %d top-k %d nodes %d", cases[i].name, o.tree_width, o.tree_top_k, o.tree_nodes);
    }
    /* visual token compression: @vP after the tree part or alone */
    static const struct {
        const char *name;
        bool ok;
        int k, n, v;
    } vc[] = {{"dream@v75", true, 0, 0, 75},   {"dream@k4n24v50", true, 4, 24, 50}, {"dream@k2v100", true, 2, 0, 100},
              {"dream@v0", false, 0, 0, 0},    {"dream@v101", false, 0, 0, 0},      {"dream@v", false, 0, 0, 0},
              {"dream@v50k2", false, 0, 0, 0}, {"dream@w2v50", true, 0, 0, 50}};
    for (size_t i = 0; i < VS_ARRAY_LEN(vc); i++) {
        const vs_method *m = vs_method_find(vc[i].name);
        VT_CHECK(!!m == vc[i].ok, "%s: %s", vc[i].name, m ? "accepted" : "refused");
        if (!m) continue;
        vs_method_opts o = {.visual_keep = 33};
        vs_method_shape(vc[i].name, &o);
        VT_CHECK(o.tree_top_k == vc[i].k && o.tree_nodes == vc[i].n && o.visual_keep == vc[i].v,
                 "%s: top-k %d nodes %d keep %d", vc[i].name, o.tree_top_k, o.tree_nodes, o.visual_keep);
    }
    {
        vs_error err = {0};
        vs_method_opts o = {.visual_keep = 50};
        vs_method_models mm = {0};
        VT_CHECK(!vs_method_drafter_new(vs_method_find("m"), &mm, &o, &err) && strstr(err.msg, "DREAM's"),
                 "compression refused for method m: %s", err.msg);
    }
    vs_method_opts o = {.tree_top_k = 4};
    VT_CHECK(vs_method_verify_rows(&o, 5) == 33, "EAGLE-2 k4: %d rows", vs_method_verify_rows(&o, 5));
    o.tree_nodes = 20;
    VT_CHECK(vs_method_verify_rows(&o, 5) == 21, "k4n20: %d", vs_method_verify_rows(&o, 5));
    o = (vs_method_opts){.tree_width = 3};
    VT_CHECK(vs_method_verify_rows(&o, 5) == 16, "w3: %d", vs_method_verify_rows(&o, 5));
    char b[64];
    VT_CHECK(!strcmp(vs_method_label("tabed-mt@k4n24", b, sizeof(b)), "TABED^MT@k4n24"), "label %s", b);
    VT_CHECK(!strcmp(vs_method_label("m", b, sizeof(b)), "M"), "label %s", b);
    VT_CHECK(!strcmp(vs_method_label("zz", b, sizeof(b)), "zz"), "label %s", b);
}

static void test_smoke(void) {
    vs_error err = {0};
    char models[512], data[512], out[512], path[700];
    snprintf(models, sizeof(models), "%s/models", vt_tmpdir());
    snprintf(data, sizeof(data), "%s/world", vt_tmpdir());
    snprintf(out, sizeof(out), "%s/bench-out", vt_tmpdir());
    vs_bench_random_opts ro;
    vs_bench_random_opts_default(&ro);
    ro.n_embd = 64, ro.n_layer = 2, ro.n_head = 2, ro.n_ff = 128, ro.n_vocab = 400, ro.n_ctx = 1024;
    ro.type = VS_TYPE_F32, ro.image_size = 28, ro.vit_width = 32;
    double t0 = vs_time_now();
    VT_REQUIRE(vs_bench_make_random_models(models, &ro, &err) == VS_OK, "%s", err.msg);
    vs_world_config wc;
    vs_world_config_default(&wc);
    wc.seed = 5, wc.n_train = 0, wc.n_test = 2, wc.image_size = 32;
    wc.suites = VS_WORLD_SUITE_BIT(VS_WORLD_VQA) | VS_WORLD_SUITE_BIT(VS_WORLD_DIFF) |
                VS_WORLD_SUITE_BIT(VS_WORLD_TEXT);
    VT_REQUIRE(vs_world_generate(&wc, data, &err) == VS_OK, "%s", err.msg);

    vs_bench_config c;
    vs_bench_config_default(&c);
    c.models_dir = models, c.data_dir = data, c.out_dir = out;
    /* m at a fixed draft length (the random twin is never confident enough for the default adaptive
     * length, under which t then drafts little or nothing) */
    c.methods[0] = "ar", c.methods[1] = "m@p0", c.methods[2] = "t";
    c.n_methods = 3;
    c.gammas[0] = 2, c.gammas[1] = 4, c.n_gammas = 2;
    c.temps[0] = 0, c.temps[1] = 1, c.n_temps = 2;
    c.n_predict = 12;
    c.progress = false, c.quiet = true;
    vs_bench_run_info info;
    VT_REQUIRE(vs_bench_run(&c, &info, &err) == VS_OK, "%s", err.msg);
    /* 6 samples (3 suites x 2); the odd ones of vqa / diff have a second turn -> 8 (sample, turn) x 2 temps
     */
    VT_CHECK(info.n_units == 16, "units %lld", (long long)info.n_units);
    VT_CHECK(info.n_cells == 16 * 5 && info.n_run == info.n_cells && info.n_done_before == 0,
             "cells %lld run %lld", (long long)info.n_cells, (long long)info.n_run);
    VT_CHECK(info.n_mismatch == 0, "%lld greedy outputs differ from target-only", (long long)info.n_mismatch);
    VT_CHECK(info.n_skipped_units == 0, "skipped %lld", (long long)info.n_skipped_units);
    snprintf(path, sizeof(path), "%s/results.jsonl", out);
    vs_bench_results res;
    vs_bench_results_init(&res);
    VT_REQUIRE(vs_bench_results_load(path, &res, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(res.n == 80, "%lld records", (long long)res.n);
    int greedy = 0, identical = 0, with_images = 0, drafted = 0, accepted = 0;
    for (int64_t i = 0; i < res.n; i++) {
        const vs_bench_record *r = &res.rec[i];
        VT_CHECK(r->n_tokens >= 1 && r->n_blocks >= 1 && r->t_decode > 0 && r->base_tokens >= 1,
                 "record %lld", (long long)i);
        if (r->temp == 0 && strcmp(r->method, "ar")) greedy++, identical += r->identical == 1;
        with_images += r->n_images > 0 && r->t_vision > 0;
        drafted += (int)r->n_drafted, accepted += (int)r->n_accepted;
        if (!strcmp(r->method, "ar")) VT_CHECK(r->gamma == 0 && r->n_drafted == 0, "baseline drafts nothing");
    }
    VT_CHECK(greedy == 32 && identical == greedy, "greedy identical %d of %d", identical, greedy);
    VT_CHECK(with_images >= 40, "image records with vision time: %d", with_images);
    VT_CHECK(drafted > 0 && accepted > 0, "the twin drafter gets drafts accepted: %d of %d", accepted,
             drafted);
    vs_bench_group g;
    vs_bench_filter f = vs_bench_filter_any();
    f.method = "m@p0", f.gamma = 4, f.temp = 0;
    VT_REQUIRE(vs_bench_aggregate(res.rec, res.n, &f, &g, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(g.n == 8 && g.tau >= 1 && g.tq > 0 && g.tp > 0 && g.est_eq1 > 0, "group m@p0: n %lld tau %.3f",
             (long long)g.n, g.tau);
    printf("  smoke: m gamma 4 greedy: tau %.3f, acceptance %.3f, Tq/Tp %.3f, decode speedup median %.3f\n",
           g.tau, g.accept_rate, g.tq_tp, g.speedup_decode_median);

    /* a second run finds everything done */
    VT_REQUIRE(vs_bench_run(&c, &info, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(info.n_run == 0 && info.n_done_before == info.n_cells, "resume: ran %lld",
             (long long)info.n_run);
    /* interrupted: cut the file in the middle of the fourth record from the end */
    long size = file_size(path);
    uint8_t *d = NULL;
    size_t len = 0;
    VT_REQUIRE(vs_read_file(path, &d, &len, &err) == VS_OK, "%s", err.msg);
    size_t cut = len - 1;
    for (int nl = 0; cut > 0; cut--)
        if (d[cut - 1] == '\n' && ++nl == 4) break;
    cut += 20; /* inside the 4th-last line */
    VT_REQUIRE(truncate(path, (off_t)cut) == 0, "truncate");
    vs_free(d);
    VT_REQUIRE(vs_bench_run(&c, &info, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(info.n_run == 4, "after a cut: %lld cells re-measured, expected 4", (long long)info.n_run);
    VT_CHECK(file_size(path) > (long)cut && file_size(path) <= size + 64, "file repaired");
    VT_REQUIRE(vs_bench_results_load(path, &res, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(res.n == 80 && res.n_dropped == 0, "records after the resume: %lld", (long long)res.n);
    /* a new gamma adds only its cells */
    c.gammas[2] = 3, c.n_gammas = 3;
    c.turns[0] = 1, c.n_turns = 1;
    c.limit = 1;
    VT_REQUIRE(vs_bench_run(&c, &info, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(info.n_run == 3 * 2 * 2, "new gamma: %lld cells (3 samples x 2 temps x 2 methods)",
             (long long)info.n_run);
    /* another configuration refuses the folder; --fresh starts over */
    c.n_predict = 8;
    VT_CHECK(vs_bench_run(&c, &info, &err) == VS_ERR_INVALID && strstr(err.msg, "another configuration"),
             "%s", err.msg);
    c.fresh = true;
    c.n_gammas = 1;
    c.n_temps = 1;
    VT_REQUIRE(vs_bench_run(&c, &info, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(info.n_done_before == 0 && info.n_run == 3 * 3, "fresh: %lld", (long long)info.n_run);
    /* unknown methods and missing files are clear errors */
    c.fresh = false;
    c.methods[1] = "nope";
    VT_CHECK(vs_bench_run(&c, &info, &err) == VS_ERR_INVALID && strstr(err.msg, "unknown method 'nope'"),
             "%s", err.msg);
    c.methods[1] = "m";
    c.draft = "missing.gguf";
    VT_CHECK(vs_bench_run(&c, &info, &err) != VS_OK && strstr(err.msg, "missing.gguf"), "%s", err.msg);
    c.draft = NULL;

    /* repeat: every cell timed 3 times, the fastest recorded: the same tokens and acceptance as one run
     * (greedy and sampled: a unit's seed does not depend on the repetition), cells counted once */
    {
        char o1[600], o3[600], p1[700], p3[700];
        snprintf(o1, sizeof(o1), "%s/bench-rep1", vt_tmpdir());
        snprintf(o3, sizeof(o3), "%s/bench-rep3", vt_tmpdir());
        vs_bench_config r1;
        vs_bench_config_default(&r1);
        r1.models_dir = models, r1.data_dir = data;
        r1.methods[0] = "ar", r1.methods[1] = "m", r1.n_methods = 2;
        r1.gammas[0] = 2, r1.n_gammas = 1;
        r1.temps[0] = 0, r1.temps[1] = 1, r1.n_temps = 2;
        r1.turns[0] = 1, r1.n_turns = 1;
        r1.limit = 1, r1.n_predict = 10, r1.progress = false, r1.quiet = true;
        vs_bench_config r3 = r1;
        r1.out_dir = o1, r3.out_dir = o3, r3.repeat = 3;
        vs_bench_run_info i1, i3;
        VT_REQUIRE(vs_bench_run(&r1, &i1, &err) == VS_OK, "%s", err.msg);
        VT_REQUIRE(vs_bench_run(&r3, &i3, &err) == VS_OK, "%s", err.msg);
        VT_CHECK(i3.n_run == i1.n_run && i3.n_cells == i1.n_cells && i3.n_mismatch == 0,
                 "repeat 3: %lld cells run (repeat 1: %lld)", (long long)i3.n_run, (long long)i1.n_run);
        snprintf(p1, sizeof(p1), "%s/results.jsonl", o1);
        snprintf(p3, sizeof(p3), "%s/results.jsonl", o3);
        vs_bench_results a, b;
        vs_bench_results_init(&a), vs_bench_results_init(&b);
        VT_REQUIRE(vs_bench_results_load(p1, &a, &err) == VS_OK && vs_bench_results_load(p3, &b, &err) == VS_OK,
                   "%s", err.msg);
        VT_CHECK(a.n == b.n && a.n > 0, "records %lld vs %lld", (long long)a.n, (long long)b.n);
        int same = 0;
        for (int64_t i = 0; i < a.n && a.n == b.n; i++) {
            const vs_bench_record *x = &a.rec[i];
            int64_t j = vs_bench_results_find(&b, x->sample, x->turn, x->method, x->gamma, x->temp);
            same += j >= 0 && b.rec[j].n_tokens == x->n_tokens && b.rec[j].n_accepted == x->n_accepted &&
                    b.rec[j].n_blocks == x->n_blocks && b.rec[j].t_decode > 0;
        }
        VT_CHECK(same == a.n, "repeat 3 records match repeat 1 in tokens and acceptance: %d of %lld", same,
                 (long long)a.n);
        vs_bench_results_free(&a), vs_bench_results_free(&b);
        r3.out_dir = o1; /* another configuration than the folder's */
        VT_CHECK(vs_bench_run(&r3, &i3, &err) == VS_ERR_INVALID && strstr(err.msg, "another configuration"),
                 "repeat differs from the folder's run: %s", err.msg);
        r3.repeat = 0;
        VT_CHECK(vs_bench_run(&r3, &i3, &err) == VS_ERR_INVALID && strstr(err.msg, "repeat"), "repeat 0: %s",
                 err.msg);
    }

    /* every ensemble-based method on the same models: lossless, caption times recorded */
    char out2[600];
    snprintf(out2, sizeof(out2), "%s/bench-ens", vt_tmpdir());
    vs_bench_config e;
    vs_bench_config_default(&e);
    e.models_dir = models, e.data_dir = data, e.out_dir = out2;
    const char *ens[] = {"c",         "p",          "mt",             "mtcp",          "tabed-mt",
                         "tabed-mtcp", "random-mt", "tabed-mtcp-tvd", "tabed-mtcp-ada", "m@k3n10",
                         "mt@w2",      "tabed-mt@k2", "msd",          "msd@k2n6",       "eagle",
                         "eagle@k2n6", "dream",       "dream@k2n6"};
    { /* random heads for the random target: models/msd-head.gguf, and a non-decoupled one as
       * models/eagle-head.gguf (the EAGLE baseline's role) */
        char tp[600], hp[600];
        snprintf(tp, sizeof(tp), "%s/%s", models, VS_BENCH_FILE_TARGET);
        snprintf(hp, sizeof(hp), "%s/%s", models, VS_BENCH_FILE_MSD);
        vs_lm *t = vs_lm_load(tp, &err);
        VT_REQUIRE(t, "%s", err.msg);
        vs_msd_random_opts ho = {.n_head = 2, .n_ff = 64, .n_ctx = 1024, .decoupled = true, .seed = 4};
        VT_REQUIRE(vs_msd_head_write_random(&ho, t, hp, &err) == VS_OK, "%s", err.msg);
        snprintf(hp, sizeof(hp), "%s/%s", models, VS_BENCH_FILE_EAGLE);
        ho.decoupled = false, ho.seed = 5;
        VT_REQUIRE(vs_msd_head_write_random(&ho, t, hp, &err) == VS_OK, "%s", err.msg);
        snprintf(hp, sizeof(hp), "%s/%s", models, VS_BENCH_FILE_DREAM); /* and a DREAM model */
        vs_dream_random_opts dro = {.n_head = 2, .n_ff = 64, .n_ctx = 1024, .gate = 0.5f, .seed = 6};
        VT_REQUIRE(vs_dream_head_write_random(&dro, t, hp, &err) == VS_OK, "%s", err.msg);
        vs_lm_free(t);
    }
    e.n_methods = 0;
    for (size_t i = 0; i < VS_ARRAY_LEN(ens); i++) e.methods[e.n_methods++] = ens[i];
    e.gammas[0] = 3, e.n_gammas = 1;
    e.temps[0] = 0, e.temps[1] = 1, e.n_temps = 2;
    e.turns[0] = 1, e.n_turns = 1;
    e.limit = 1, e.n_predict = 10, e.progress = false, e.quiet = true;
    VT_REQUIRE(vs_bench_run(&e, &info, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(info.n_run == 3 * 2 * 19 && info.n_mismatch == 0, "ensembles: %lld cells, %lld mismatches",
             (long long)info.n_run, (long long)info.n_mismatch);
    snprintf(path, sizeof(path), "%s/results.jsonl", out2);
    VT_CHECK(file_has(path, "\"msd_head\"") && file_has(path, "\"eagle_head\"") && file_has(path, "\"dream\""),
             "the results header does not name the head files");
    VT_REQUIRE(vs_bench_results_load(path, &res, &err) == VS_OK, "%s", err.msg);
    int caption_recs = 0, caption_timed = 0;
    for (int64_t i = 0; i < res.n; i++) {
        const vs_bench_record *r = &res.rec[i];
        if (r->temp == 0 && strcmp(r->method, "ar"))
            VT_CHECK(r->identical == 1, "%s %s greedy output differs", r->sample, r->method);
        if (!strcmp(r->method, "c") || !strcmp(r->method, "mtcp")) {
            caption_recs += r->n_images > 0;
            caption_timed += r->n_images > 0 && r->t_caption > 0;
        }
    }
    VT_CHECK(caption_recs > 0 && caption_timed == caption_recs, "caption times %d of %d", caption_timed,
             caption_recs);
    VT_REQUIRE(vs_bench_report_dir(out2, 1, false, &err) == VS_OK, "%s", err.msg);
    snprintf(path, sizeof(path), "%s/report.md", out2);
    VT_CHECK(file_has(path, "TABED<sup>MT</sup>") && file_has(path, "Random<sup>MT</sup>"), "ensemble rows");

    VT_REQUIRE(vs_bench_report_dir(out, 1, false, &err) == VS_OK, "%s", err.msg);
    snprintf(path, sizeof(path), "%s/report.md", out);
    VT_CHECK(file_has(path, "Headline"), "report");
    vs_bench_results_free(&res);
    printf("  smoke run: %.1f s\n", vs_time_now() - t0);

    /* the CLI, when built */
    if (access(vt_cli(), X_OK) != 0) {
        printf("  SKIP: CLI checks: %s not found\n", vt_cli());
        return;
    }
    char cli_out[600];
    snprintf(cli_out, sizeof(cli_out), "%s/cli-out", vt_tmpdir());
    int rc =
        vt_run("%s bench spec --models %s --data %s --out %s --methods ar,t --gamma 2 --limit 1 --turns 1 "
               "--max-tokens 6 --no-progress > /dev/null 2>&1",
               vt_cli(), models, data, cli_out);
    if (rc != 0 && vt_run("%s bench spec --help > /dev/null 2>&1", vt_cli()) != 0) {
        printf("  SKIP: CLI checks: `vlmspec bench spec` is not dispatched yet\n");
        return;
    }
    VT_CHECK(rc == 0, "vlmspec bench spec exit %d", rc);
    snprintf(path, sizeof(path), "%s/report.md", cli_out);
    VT_CHECK(file_has(path, "TABED Table 1"), "CLI report");
    VT_CHECK(vt_run("%s bench spec --models %s --data %s --out %s --methods zz > /dev/null 2>&1", vt_cli(),
                    models, data, cli_out) == 1,
             "unknown method: exit 1");
    VT_CHECK(vt_run("%s bench spec --bogus > /dev/null 2>&1", vt_cli()) == 2, "unknown flag: exit 2");
    VT_CHECK(
        vt_run("%s bench spec --report-only --no-bandwidth -q --out %s --compare-with %s > /dev/null 2>&1",
               vt_cli(), cli_out, cli_out) == 0,
        "a run agrees with itself");
    VT_CHECK(
        vt_run("%s bench spec --report-only --no-bandwidth -q --out %s --compare-with %s > /dev/null 2>&1",
               vt_cli(), cli_out, out2) == 1,
        "runs of other methods differ");
}

int main(void) {
    test_record_and_aggregate();
    test_group_statistics();
    test_compare();
    test_record_json();
    test_results_file();
    test_report_files();
    test_sysinfo();
    test_method_shapes();
    test_smoke();
    return vt_finish("bench");
}
