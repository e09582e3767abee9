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

typedef struct bench_opts {
    const char *model;
    int threads, reps, tg, verify_prompt;
    int pp[MAX_LIST], n_pp;
    int ks[MAX_LIST], n_ks;
    vs_type kv_type;
    bool json;
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
            "  --json                print one JSON object instead of the tables\n"
            "  -h, --help            this help\n");
}

static bool parse_list(const char *s, int *out, int *n) {
    *n = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 1 << 20 || (*end && *end != ',') || *n == MAX_LIST) return false;
        out[(*n)++] = (int)v;
        s = *end ? end + 1 : end;
    }
    return true;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct bench_ctx {
    vs_lm *lm;
    vs_kv *kv;
    vs_threadpool *tp;
    vs_lm_row *rows; /* [cap] */
    float *logits;   /* [cap][n_vocab] */
    int cap;
    vs_rng rng;
    vs_error err;
} bench_ctx;

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

typedef struct result {
    char name[32];
    int n;          /* rows per forward (pp, verify) or steps (tg) */
    double median_s;
    double tps;
} result;

int vs_cmd_bench(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "spec")) return vs_cli_bench_spec(argc - 1, argv + 1);
    bench_opts o = {.threads = 2, .reps = 5, .tg = 32, .verify_prompt = 64, .kv_type = VS_TYPE_F16};
    o.n_pp = 2, o.pp[0] = 64, o.pp[1] = 512;
    int ks_default[] = {1, 2, 4, 6, 8, 16, 32};
    o.n_ks = 7;
    memcpy(o.ks, ks_default, sizeof(ks_default));
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--json")) {
            o.json = true;
            continue;
        }
        if (!(v = cli_value(CMD, argc, argv, &i))) return 2;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) o.model = v;
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!cli_parse_int(CMD, a, v, 1, 1024, &o.threads)) return 2;
        } else if (!strcmp(a, "-r") || !strcmp(a, "--reps")) {
            if (!cli_parse_int(CMD, a, v, 1, 1000, &o.reps)) return 2;
        } else if (!strcmp(a, "--tg")) {
            if (!cli_parse_int(CMD, a, v, 0, 1 << 16, &o.tg)) return 2;
        } else if (!strcmp(a, "--verify-prompt")) {
            if (!cli_parse_int(CMD, a, v, 1, 1 << 20, &o.verify_prompt)) return 2;
        } else if (!strcmp(a, "--pp")) {
            if (!parse_list(v, o.pp, &o.n_pp)) return cli_fail(CMD, "--pp '%s': expected sizes like 64,512", v), 2;
        } else if (!strcmp(a, "--ks")) {
            if (!parse_list(v, o.ks, &o.n_ks)) return cli_fail(CMD, "--ks '%s': expected sizes like 1,2,4", v), 2;
        } else if (!strcmp(a, "--kv-type")) {
            if (!cli_parse_kv_type(CMD, a, v, true, &o.kv_type)) return 2;
        } else {
            cli_fail(CMD, "unknown option '%s' (see vlmspec bench --help)", a);
            return 2;
        }
    }
    if (!o.model) return cli_fail(CMD, "-m MODEL is required"), 2;

    int rc = 1;
    bench_ctx b = {0};
    vs_rng_seed(&b.rng, 1234);
    result res[3 * MAX_LIST];
    int nres = 0, n_verify_first = -1;
    b.lm = vs_lm_load(o.model, &b.err);
    if (!b.lm) goto fail;
    const vs_lm_config *c = vs_lm_cfg(b.lm);
    int n_ctx = c->n_ctx_train;
    /* the largest batch any test needs */
    b.cap = VS_MAX(o.verify_prompt, 1);
    for (int i = 0; i < o.n_pp; i++) b.cap = VS_MAX(b.cap, o.pp[i] <= n_ctx ? o.pp[i] : 0);
    for (int i = 0; i < o.n_ks; i++) b.cap = VS_MAX(b.cap, o.ks[i]);
    int need_ctx = b.cap;
    for (int i = 0; i < o.n_ks; i++) need_ctx = VS_MAX(need_ctx, o.verify_prompt + o.ks[i]);
    need_ctx = VS_MAX(need_ctx, o.tg);
    if (need_ctx > n_ctx) {
        vs_log("vlmspec bench: note: tests need %d rows, more than the model's context %d; using %d\n", need_ctx,
               n_ctx, need_ctx);
    }
    if (o.threads > 1 && !(b.tp = vs_threadpool_new(o.threads, &b.err))) goto fail;
    if (!(b.kv = vs_lm_kv_new(b.lm, 1, need_ctx, o.kv_type, &b.err))) goto fail;
    b.rows = vs_calloc((size_t)b.cap, sizeof(vs_lm_row));
    b.logits = vs_malloc(sizeof(float) * (size_t)b.cap * (size_t)c->n_vocab);
    double *t = vs_malloc(sizeof(double) * (size_t)o.reps);
    if (!b.rows || !b.logits || !t) {
        vs_free(t);
        cli_fail(CMD, "out of memory");
        goto done;
    }
    /* prompt processing */
    for (int i = 0; i < o.n_pp; i++) {
        if (o.pp[i] > n_ctx) continue;
        for (int r = -1; r < o.reps; r++) {
            vs_kv_clear(b.kv);
            double s = timed_forward(&b, o.pp[i], false);
            if (s < 0) goto fail_t;
            if (r >= 0) t[r] = s;
        }
        result *x = &res[nres++];
        snprintf(x->name, sizeof(x->name), "pp%d", o.pp[i]);
        x->n = o.pp[i];
        x->median_s = median(t, o.reps);
        x->tps = o.pp[i] / x->median_s;
    }
    /* decoding */
    if (o.tg > 0) {
        for (int r = -1; r < o.reps; r++) {
            vs_kv_clear(b.kv);
            double s = 0;
            for (int k = 0; k < o.tg; k++) {
                double d = timed_forward(&b, 1, false);
                if (d < 0) goto fail_t;
                s += d;
            }
            if (r >= 0) t[r] = s;
        }
        result *x = &res[nres++];
        snprintf(x->name, sizeof(x->name), "tg%d", o.tg);
        x->n = o.tg;
        x->median_s = median(t, o.reps);
        x->tps = o.tg / x->median_s;
    }
    /* verify cost: one forward over k rows after a prompt, rolled back each time */
    if (o.n_ks > 0) {
        vs_kv_clear(b.kv);
        if (timed_forward(&b, o.verify_prompt, false) < 0) goto fail_t;
        n_verify_first = nres;
        for (int i = 0; i < o.n_ks; i++) {
            for (int r = -1; r < o.reps; r++) {
                double s = timed_forward(&b, o.ks[i], true);
                if (s < 0 || vs_kv_seq_truncate(b.kv, 0, o.verify_prompt, &b.err)) goto fail_t;
                if (r >= 0) t[r] = s;
            }
            result *x = &res[nres++];
            snprintf(x->name, sizeof(x->name), "verify k=%d", o.ks[i]);
            x->n = o.ks[i];
            x->median_s = median(t, o.reps);
            x->tps = o.ks[i] / x->median_s;
        }
    }
    vs_free(t);

    const char *base = strrchr(o.model, '/');
    base = base ? base + 1 : o.model;
    char desc[96];
    snprintf(desc, sizeof(desc), "llama %dx%d %s", c->n_layer, c->n_embd, vs_type_name(c->wtype));
    double size_b = (double)vs_lm_weight_bytes(b.lm), params = (double)vs_lm_n_params(b.lm);
    int n_speed = n_verify_first >= 0 ? n_verify_first : nres;
    int base_k = n_speed; /* the k = 1 entry the ratios refer to (else the first k listed) */
    for (int i = n_speed; i < nres; i++)
        if (res[i].n == 1) {
            base_k = i;
            break;
        }
    if (o.json) {
        vs_json_writer w;
        vs_json_writer_init(&w);
        vs_json_obj_begin(&w);
        vs_json_key(&w, "model");
        vs_json_str(&w, base);
        vs_json_key(&w, "type");
        vs_json_str(&w, vs_type_name(c->wtype));
        vs_json_key(&w, "size_bytes");
        vs_json_int(&w, (int64_t)vs_lm_weight_bytes(b.lm));
        vs_json_key(&w, "params");
        vs_json_int(&w, vs_lm_n_params(b.lm));
        vs_json_key(&w, "threads");
        vs_json_int(&w, o.threads);
        vs_json_key(&w, "reps");
        vs_json_int(&w, o.reps);
        vs_json_key(&w, "kv_type");
        vs_json_str(&w, vs_type_name(o.kv_type));
        vs_json_key(&w, "tests");
        vs_json_arr_begin(&w);
        for (int i = 0; i < n_speed; i++) {
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
        vs_json_int(&w, o.verify_prompt);
        vs_json_key(&w, "verify");
        vs_json_arr_begin(&w);
        for (int i = n_speed; i < nres; i++) {
            vs_json_obj_begin(&w);
            vs_json_key(&w, "k");
            vs_json_int(&w, res[i].n);
            vs_json_key(&w, "median_ms");
            vs_json_num(&w, res[i].median_s * 1e3);
            vs_json_key(&w, "ratio_to_k1");
            vs_json_num(&w, res[i].median_s / res[base_k].median_s);
            vs_json_obj_end(&w);
        }
        vs_json_arr_end(&w);
        vs_json_obj_end(&w);
        size_t len = 0;
        char *s = vs_json_writer_take(&w, &len);
        vs_json_writer_free(&w);
        if (!s) {
            cli_fail(CMD, "out of memory");
            goto done;
        }
        printf("%s\n", s);
        vs_free(s);
    } else {
        printf("| model | size | params | threads | test | t/s |\n| --- | ---: | ---: | ---: | ---: | ---: |\n");
        for (int i = 0; i < n_speed; i++)
            printf("| %s | %.2f GiB | %.2f B | %d | %s | %.2f |\n", desc, size_b / 1073741824.0, params / 1e9,
                   o.threads, res[i].name, res[i].tps);
        if (nres > n_speed) {
            printf("\nverify cost after a %d-row prompt (one forward over k rows, logits for all k):\n\n",
                   o.verify_prompt);
            printf("| k | ms | ratio to k=%d | ms per row |\n| ---: | ---: | ---: | ---: |\n", res[base_k].n);
            for (int i = n_speed; i < nres; i++)
                printf("| %d | %.2f | %.2f | %.2f |\n", res[i].n, res[i].median_s * 1e3,
                       res[i].median_s / res[base_k].median_s, res[i].median_s * 1e3 / res[i].n);
        }
        printf("\n%s: %s, %zu bytes, %lld parameters; KV %s; medians of %d runs\n", base, vs_type_name(c->wtype),
               vs_lm_weight_bytes(b.lm), (long long)vs_lm_n_params(b.lm), vs_type_name(o.kv_type), o.reps);
    }
    rc = 0;
    goto done;
fail_t:
    vs_free(t);
fail:
    cli_fail_err(CMD, &b.err);
done:
    vs_free(b.rows);
    vs_free(b.logits);
    vs_kv_free(b.kv);
    vs_threadpool_free(b.tp);
    vs_lm_free(b.lm);
    return rc;
}
