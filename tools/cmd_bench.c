/* vlmspec bench: how fast the decoder runs on this machine, as llama-bench reports it plus what
 * speculative decoding needs to know: the cost of ONE forward over k rows (verifying k drafted
 * tokens) relative to one row.
 *   ppN : prompt processing, N rows in one forward from an empty cache (logits of the last row);
 *   tgN : N decode steps of one row from an empty cache;
 *   verify k : after a prompt of P rows, one forward over k causal rows with logits for all k,
 *              the cache rolled back to P between repetitions.
 * Each figure is the median of --reps timed runs after one untimed warm-up run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_bench_spec.h"
#include "json.h"
#include "lm.h"

#define CMD "bench"
#define MAX_LIST 16

typedef struct size_list {
    int v[MAX_LIST];
    int n;
} size_list;

typedef struct bench_opts {
    const char *model;
    int threads, reps, tg, verify_prompt;
    size_list pp, ks;
    vs_type kv_type;
    const char *json; /* --json FILE ('-': standard output, instead of the tables) */
} bench_opts;

static void usage(FILE *f) {
    fprintf(f,
            "usage: vlmspec bench -m MODEL [options]\n"
            "       vlmspec bench spec ...   speculative decoding benchmark (vlmspec bench spec --help)\n"
            "Measures prompt processing (ppN), decoding (tgN) and the verify cost: the time of one forward\n"
            "over k rows after a prompt, as a ratio to k = 1. Medians of --reps runs after a warm-up.\n\n"
            "options:\n"
            "  -m, --model FILE      LLaMA-architecture GGUF\n"
            "  -t, --threads N       threads (default 2)\n"
            "  -r, --reps R          timed repetitions per test (default 5)\n"
            "  --pp LIST             prompt sizes (default 64,512; sizes above the context are skipped)\n"
            "  --tg N                decode steps (default 32; 0 skips)\n"
            "  --verify-prompt P     prompt rows before the verify batches (default 64)\n"
            "  --ks LIST             verify batch sizes (default 1,2,4,6,8,16,32; empty string skips)\n"
            "  --kv-type T           KV cache storage f16 (default), f32 or bf16 (the drafters' cache)\n"
            "  --json FILE           write the results as one JSON object; '-': on standard output instead\n"
            "                        of the tables\n"
            "  -h, --help            this help\n");
}

/* A comma list of sizes in [1, 2^20], at most MAX_LIST ("" is the empty list). */
static bool parse_list(const char *s, size_list *l) {
    l->n = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 1 << 20 || (*end && *end != ',') || l->n == MAX_LIST) return false;
        l->v[l->n++] = (int)v;
        s = *end ? end + 1 : end;
    }
    return true;
}

static bool parse_pp(const char *cmd, const char *flag, const char *v, void *dst) {
    if (parse_list(v, dst)) return true;
    cli_fail(cmd, "%s '%s': expected sizes like 64,512", flag, v);
    return false;
}

static bool parse_ks(const char *cmd, const char *flag, const char *v, void *dst) {
    if (parse_list(v, dst)) return true;
    cli_fail(cmd, "%s '%s': expected sizes like 1,2,4", flag, v);
    return false;
}

/* Parses the flags into o: -1 to go on, else the exit status (0 after --help, 2 on a usage error). */
static int bench_parse(int argc, char **argv, bench_opts *o) {
    *o = (bench_opts){.threads = 2,
                      .reps = 5,
                      .tg = 32,
                      .verify_prompt = 64,
                      .pp = {.v = {64, 512}, .n = 2},
                      .ks = {.v = {1, 2, 4, 6, 8, 16, 32}, .n = 7},
                      .kv_type = VS_TYPE_F16};
    cli_flags fs = {0};
    cli_flag_add(&fs, "-m|--model", CLI_STR, &o->model, 0, 0);
    cli_flag_add(&fs, "-t|--threads", CLI_INT, &o->threads, 1, 1024);
    cli_flag_add(&fs, "-r|--reps", CLI_INT, &o->reps, 1, 1000);
    cli_flag_fn_add(&fs, "--pp", parse_pp, &o->pp);
    cli_flag_add(&fs, "--tg", CLI_INT, &o->tg, 0, 1 << 16);
    cli_flag_add(&fs, "--verify-prompt", CLI_INT, &o->verify_prompt, 1, 1 << 20);
    cli_flag_fn_add(&fs, "--ks", parse_ks, &o->ks);
    cli_flag_add(&fs, "--kv-type", CLI_KV_DRAFT, &o->kv_type, 0, 0);
    cli_flag_add(&fs, "--json", CLI_STR, &o->json, 0, 0);
    const int r = cli_flags_parse(CMD, argc, argv, &fs, usage);
    if (r >= 0) return r;
    if (!o->model) return cli_fail(CMD, "-m MODEL is required"), 2;
    return -1;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct result {
    char name[32];
    int n;          /* rows per forward (pp, verify) or steps (tg) */
    double median_s;
    double tps;
} result;

typedef struct bench_ctx {
    vs_lm *lm;
    vs_kv *kv;
    vs_threadpool *tp;
    vs_lm_row *rows; /* [cap] */
    float *logits;   /* [cap][n_vocab] */
    double *t;       /* [reps]: the timed runs of one test */
    int cap;
    int n_ctx; /* the model's context: longer prompts are skipped */
    vs_rng rng;
    vs_error err;
    result res[3 * MAX_LIST]; /* the speed tests (ppN, tgN), then the verify batches */
    int nres, n_speed;        /* results in all; speed tests among them */
} bench_ctx;

/* Loads the model and allocates the cache, the rows of the largest batch any test needs and the timings;
 * false after reporting an error. */
static bool bench_open(bench_ctx *b, const bench_opts *o) {
    vs_rng_seed(&b->rng, 1234);
    if (!(b->lm = vs_lm_load(o->model, &b->err))) {
        cli_fail_err(CMD, &b->err);
        return false;
    }
    const vs_lm_config *c = vs_lm_cfg(b->lm);
    b->n_ctx = c->n_ctx_train;
    /* the largest batch any test needs */
    b->cap = VS_MAX(o->verify_prompt, 1);
    for (int i = 0; i < o->pp.n; i++) b->cap = VS_MAX(b->cap, o->pp.v[i] <= b->n_ctx ? o->pp.v[i] : 0);
    for (int i = 0; i < o->ks.n; i++) b->cap = VS_MAX(b->cap, o->ks.v[i]);
    int need_ctx = b->cap;
    for (int i = 0; i < o->ks.n; i++) need_ctx = VS_MAX(need_ctx, o->verify_prompt + o->ks.v[i]);
    need_ctx = VS_MAX(need_ctx, o->tg);
    if (need_ctx > b->n_ctx) {
        vs_log("vlmspec bench: note: tests need %d rows, more than the model's context %d; using %d\n", need_ctx,
               b->n_ctx, need_ctx);
    }
    if ((o->threads > 1 && !(b->tp = vs_threadpool_new(o->threads, &b->err))) ||
        !(b->kv = vs_lm_kv_new(b->lm, 1, need_ctx, o->kv_type, &b->err))) {
        cli_fail_err(CMD, &b->err);
        return false;
    }
    b->rows = vs_calloc((size_t)b->cap, sizeof(vs_lm_row));
    b->logits = vs_malloc(sizeof(float) * (size_t)b->cap * (size_t)c->n_vocab);
    b->t = vs_malloc(sizeof(double) * (size_t)o->reps);
    if (!b->rows || !b->logits || !b->t) {
        cli_fail(CMD, "out of memory");
        return false;
    }
    return true;
}

static void bench_close(bench_ctx *b) {
    vs_free(b->t);
    vs_free(b->rows);
    vs_free(b->logits);
    vs_kv_free(b->kv);
    vs_threadpool_free(b->tp);
    vs_lm_free(b->lm);
}

/* One forward of n causal rows of random tokens appended to sequence 0; logits for the last row
 * only (all_logits false) or for every row. Returns seconds, or -1 on error. */
static double timed_forward(bench_ctx *b, int n, bool all_logits) {
    const vs_lm_config *c = vs_lm_cfg(b->lm);
    int start = vs_kv_seq_len(b->kv, 0);
    for (int i = 0; i < n; i++)
        b->rows[i] = (vs_lm_row){.token = (int32_t)vs_rng_below(&b->rng, (uint32_t)c->n_vocab), .pos = start + i,
                                 .want_logits = all_logits || i == n - 1};
    vs_lm_out out = {.logits = b->logits};
    double t0 = vs_time_now();
    if (vs_lm_forward(b->lm, b->kv, b->tp, b->rows, n, &out, &b->err)) return -1;
    return vs_time_now() - t0;
}

/* Records the median of the timed runs as the result "<prefix><n>" (n rows per forward or steps). */
static void add_result(bench_ctx *b, int reps, const char *prefix, int n) {
    result *x = &b->res[b->nres++];
    snprintf(x->name, sizeof(x->name), "%s%d", prefix, n);
    x->n = n;
    x->median_s = median(b->t, reps);
    x->tps = n / x->median_s;
}

/* Prompt processing: ppN for every size within the context. False on error (in b->err). */
static bool run_pp(bench_ctx *b, const bench_opts *o) {
    for (int i = 0; i < o->pp.n; i++) {
        if (o->pp.v[i] > b->n_ctx) continue;
        for (int r = -1; r < o->reps; r++) {
            vs_kv_clear(b->kv);
            double s = timed_forward(b, o->pp.v[i], false);
            if (s < 0) return false;
            if (r >= 0) b->t[r] = s;
        }
        add_result(b, o->reps, "pp", o->pp.v[i]);
    }
    return true;
}

/* Decoding: tgN, unless N is 0. False on error (in b->err). */
static bool run_tg(bench_ctx *b, const bench_opts *o) {
    if (o->tg <= 0) return true;
    for (int r = -1; r < o->reps; r++) {
        vs_kv_clear(b->kv);
        double s = 0;
        for (int k = 0; k < o->tg; k++) {
            double d = timed_forward(b, 1, false);
            if (d < 0) return false;
            s += d;
        }
        if (r >= 0) b->t[r] = s;
    }
    add_result(b, o->reps, "tg", o->tg);
    return true;
}

/* Verify cost: one forward over k rows after a prompt, rolled back each time. False on error (in b->err). */
static bool run_verify(bench_ctx *b, const bench_opts *o) {
    if (o->ks.n == 0) return true;
    vs_kv_clear(b->kv);
    if (timed_forward(b, o->verify_prompt, false) < 0) return false;
    for (int i = 0; i < o->ks.n; i++) {
        for (int r = -1; r < o->reps; r++) {
            double s = timed_forward(b, o->ks.v[i], true);
            if (s < 0 || vs_kv_seq_truncate(b->kv, 0, o->verify_prompt, &b->err)) return false;
            if (r >= 0) b->t[r] = s;
        }
        add_result(b, o->reps, "verify k=", o->ks.v[i]);
    }
    return true;
}

/* The verify result the ratios refer to: k = 1, else the first k listed. */
static int base_k(const bench_ctx *b) {
    for (int i = b->n_speed; i < b->nres; i++)
        if (b->res[i].n == 1) return i;
    return b->n_speed;
}

/* Writes the results as one JSON object to --json's FILE; the exit status. */
static int print_json(const bench_ctx *b, const bench_opts *o, const char *base) {
    const vs_lm_config *c = vs_lm_cfg(b->lm);
    const result *res = b->res, *k1 = &b->res[base_k(b)];
    vs_json_writer w;
    vs_json_writer_init(&w);
    vs_json_obj_begin(&w);
    vs_json_key(&w, "model");
    vs_json_str(&w, base);
    vs_json_key(&w, "type");
    vs_json_str(&w, vs_type_name(c->wtype));
    vs_json_key(&w, "size_bytes");
    vs_json_int(&w, (int64_t)vs_lm_weight_bytes(b->lm));
    vs_json_key(&w, "params");
    vs_json_int(&w, vs_lm_n_params(b->lm));
    vs_json_key(&w, "threads");
    vs_json_int(&w, o->threads);
    vs_json_key(&w, "reps");
    vs_json_int(&w, o->reps);
    vs_json_key(&w, "kv_type");
    vs_json_str(&w, vs_type_name(o->kv_type));
    vs_json_key(&w, "tests");
    vs_json_arr_begin(&w);
    for (int i = 0; i < b->n_speed; i++) {
        vs_json_obj_begin(&w);
        vs_json_key(&w, "test");
        vs_json_str(&w, res[i].name);
        vs_json_key(&w, "median_s");
        vs_json_num(&w, res[i].median_s);
        vs_json_key(&w, "tokens_per_s");
        vs_json_num(&w, res[i].tps);
        vs_json_obj_end(&w);
    }
    vs_json_arr_end(&w);
    vs_json_key(&w, "verify_prompt");
    vs_json_int(&w, o->verify_prompt);
    vs_json_key(&w, "verify");
    vs_json_arr_begin(&w);
    for (int i = b->n_speed; i < b->nres; i++) {
        vs_json_obj_begin(&w);
        vs_json_key(&w, "k");
        vs_json_int(&w, res[i].n);
        vs_json_key(&w, "median_ms");
        vs_json_num(&w, res[i].median_s * 1e3);
        vs_json_key(&w, "ratio_to_k1");
        vs_json_num(&w, res[i].median_s / k1->median_s);
        vs_json_obj_end(&w);
    }
    vs_json_arr_end(&w);
    vs_json_obj_end(&w);
    size_t len = 0;
    char *s = vs_json_writer_take(&w, &len);
    vs_json_writer_free(&w);
    if (!s) return cli_fail(CMD, "out of memory");
    const int rc = cli_write_json(CMD, o->json, s);
    vs_free(s);
    return rc;
}

/* Prints the results as llama-bench's table, the verify table and a summary line. */
static void print_tables(const bench_ctx *b, const bench_opts *o, const char *base) {
    const vs_lm_config *c = vs_lm_cfg(b->lm);
    const result *res = b->res, *k1 = &b->res[base_k(b)];
    char desc[96];
    snprintf(desc, sizeof(desc), "llama %dx%d %s", c->n_layer, c->n_embd, vs_type_name(c->wtype));
    double size_b = (double)vs_lm_weight_bytes(b->lm), params = (double)vs_lm_n_params(b->lm);
    printf("| model | size | params | threads | test | t/s |\n| --- | ---: | ---: | ---: | ---: | ---: |\n");
    for (int i = 0; i < b->n_speed; i++)
        printf("| %s | %.2f GiB | %.2f B | %d | %s | %.2f |\n", desc, size_b / 1073741824.0, params / 1e9,
               o->threads, res[i].name, res[i].tps);
    if (b->nres > b->n_speed) {
        printf("\nverify cost after a %d-row prompt (one forward over k rows, logits for all k):\n\n",
               o->verify_prompt);
        printf("| k | ms | ratio to k=%d | ms per row |\n| ---: | ---: | ---: | ---: |\n", k1->n);
        for (int i = b->n_speed; i < b->nres; i++)
            printf("| %d | %.2f | %.2f | %.2f |\n", res[i].n, res[i].median_s * 1e3, res[i].median_s / k1->median_s,
                   res[i].median_s * 1e3 / res[i].n);
    }
    printf("\n%s: %s, %zu bytes, %lld parameters; KV %s; medians of %d runs\n", base, vs_type_name(c->wtype),
           vs_lm_weight_bytes(b->lm), (long long)vs_lm_n_params(b->lm), vs_type_name(o->kv_type), o->reps);
}

int vs_cmd_bench(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "spec")) return vs_cli_bench_spec(argc - 1, argv + 1);
    bench_opts o;
    int rc = bench_parse(argc, argv, &o);
    if (rc >= 0) return rc;
    rc = 1;
    bench_ctx b = {0};
    if (bench_open(&b, &o)) {
        bool ok = run_pp(&b, &o) && run_tg(&b, &o);
        b.n_speed = b.nres;
        if (!ok || !run_verify(&b, &o)) {
            cli_fail_err(CMD, &b.err);
        } else {
            const char *base = strrchr(o.model, '/');
            base = base ? base + 1 : o.model;
            const bool to_stdout = o.json && !strcmp(o.json, "-");
            if (!to_stdout) print_tables(&b, &o, base);
            rc = o.json ? print_json(&b, &o, base) : 0;
        }
    }
    bench_close(&b);
    return rc;
}
