/* vlmspec eval: a VLM's accuracy on the generated world, per suite, by the world's checker, with
 * greedy decoding (eval.h). Prints a table; --json writes the numbers, --details every turn. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "outfile.h"
#include "eval.h"
#include "json.h"

#define CMD "eval"

static void usage(FILE *f) {
    fprintf(f,
            "usage: vlmspec eval --model LM.gguf --mmproj MMPROJ.gguf --data DIR [options]\n"
            "Greedy-decodes every turn of the world's test split and scores it with the world's checker:\n"
            "accuracy per suite (all turns, first turns, second turns) and mean answer length in tokens.\n"
            "Second turns are prompted with the model's OWN first answer (as the benchmark does) unless\n"
            "--history reference; the expected answer of a follow-up always comes from the scenes.\n\n"
            "options:\n"
            "  -m, --model FILE     LM GGUF (with tokenizer)\n"
            "  --mmproj FILE        mmproj GGUF (vision tower + projector)\n"
            "  --data DIR           dataset directory ('vlmspec data gen')\n"
            "  --split S            test (default), train or captions\n"
            "  --suites LIST        comma-separated suites or 'all' (default all)\n"
            "  --limit N            first N samples of each suite (default all)\n"
            "  -n, --max-tokens N   tokens per answer (default 256; also --n-predict)\n"
            "  --history H          own (default) or reference: the first answer second turns see\n"
            "  --ablate-images A    swap: each sample gets the images of the next sample of its suite\n"
            "                       with as many images; none: the prompt's image markers are removed.\n"
            "                       A model that looks at its images falls towards chance. Samples\n"
            "                       without images are evaluated unchanged (an error if all are)\n"
            "  --kv-type T          KV cache f16 (default) or f32\n"
            "  -t, --threads N      threads (default 2)\n"
            "  --json FILE          write the results as JSON ('-' = stdout)\n"
            "  --details FILE       write one JSON line per turn (id, suite, turn, kind, correct, expected,\n"
            "                       found, tokens, eos, answer)\n"
            "  -q, --quiet          no progress line\n"
            "  -h, --help           this help\n");
}

typedef struct eval_cli_ctx {
    vs_outfile details; /* --details: written as the turns finish, in place at the end (outfile.h) */
    vs_progress pr;
    bool quiet;
    int64_t done, correct;
    vs_json_writer w;
} eval_cli_ctx;

static void on_turn(void *ctx, const vs_eval_turn *t) {
    eval_cli_ctx *c = ctx;
    c->done++, c->correct += t->verdict.correct;
    if (c->details.f) {
        vs_json_writer *w = &c->w;
        vs_json_writer_reset(w);
        vs_json_obj_begin(w);
        vs_json_key(w, "id"), vs_json_str(w, t->sample->id);
        vs_json_key(w, "suite"), vs_json_str(w, vs_world_suite_name(t->sample->suite));
        vs_json_key(w, "turn"), vs_json_int(w, t->turn);
        vs_json_key(w, "kind"), vs_json_str(w, vs_world_turn_kind_name(t->sample->turns[t->turn].kind));
        vs_json_key(w, "correct"), vs_json_bool(w, t->verdict.correct);
        vs_json_key(w, "expected"), vs_json_str(w, t->verdict.expected);
        vs_json_key(w, "found"), vs_json_str(w, t->verdict.found);
        vs_json_key(w, "tokens"), vs_json_int(w, t->n_tokens);
        vs_json_key(w, "eos"), vs_json_bool(w, t->eos);
        vs_json_key(w, "answer"), vs_json_str(w, t->answer);
        vs_json_obj_end(w);
        fprintf(c->details.f, "%s\n", w->buf ? w->buf : ""); /* errors: vs_outfile_commit */
    }
    if (!c->quiet)
        vs_progress_update(&c->pr, c->done, " turns, %.1f%% correct ",
                           100.0 * (double)c->correct / (double)c->done);
}

int vs_cmd_eval(int argc, char **argv) {
    const char *model = NULL, *mmproj = NULL, *data = NULL, *split = "test", *suites = "all", *json = NULL;
    const char *details = NULL;
    int64_t limit = 0;
    int threads = 2;
    vs_eval_lm_opts lo = {.max_tokens = 256};
    vs_eval_opts eo = {0};
    eval_cli_ctx cx;
    memset(&cx, 0, sizeof(cx));
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            cx.quiet = true;
            continue;
        }
        if (!(v = cli_value(CMD, argc, argv, &i))) return 2;
        if (!strcmp(a, "-m") || !strcmp(a, "--model"))
            model = v;
        else if (!strcmp(a, "--mmproj"))
            mmproj = v;
        else if (!strcmp(a, "--data"))
            data = v;
        else if (!strcmp(a, "--split"))
            split = v;
        else if (!strcmp(a, "--suites"))
            suites = v;
        else if (!strcmp(a, "--json"))
            json = v;
        else if (!strcmp(a, "--details"))
            details = v;
        else if (!strcmp(a, "--limit")) {
            if (!cli_parse_i64(CMD, a, v, 1, INT64_MAX, &limit)) return 2;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict") || !strcmp(a, "--max-tokens")) {
            if (!cli_parse_int(CMD, a, v, 1, 1 << 20, &lo.max_tokens)) return 2;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!cli_parse_int(CMD, a, v, 1, 1024, &threads)) return 2;
        } else if (!strcmp(a, "--history")) {
            if (!strcmp(v, "own"))
                eo.reference_history = false;
            else if (!strcmp(v, "reference"))
                eo.reference_history = true;
            else
                return cli_fail(CMD, "--history %s: expected own or reference", v), 2;
        } else if (!strcmp(a, "--ablate-images")) {
            if (!strcmp(v, "swap"))
                eo.ablate = VS_EVAL_IMAGES_SWAP;
            else if (!strcmp(v, "none"))
                eo.ablate = VS_EVAL_IMAGES_NONE;
            else
                return cli_fail(CMD, "--ablate-images %s: expected swap or none", v), 2;
        } else if (!strcmp(a, "--kv-type")) {
            vs_type kt;
            if (!cli_parse_kv_type(CMD, a, v, false, &kt)) return 2;
            lo.kv_f32 = kt == VS_TYPE_F32;
        } else {
            fprintf(stderr, "vlmspec %s: unknown option '%s'\n", CMD, a);
            usage(stderr);
            return 2;
        }
    }
    if (!model || !mmproj || !data) return cli_fail(CMD, "--model, --mmproj and --data are required"), 2;
    vs_error err = {0};
    if (vs_world_parse_suites(suites, &eo.suites, &err)) return cli_fail_err(CMD, &err), 2;
    eo.limit = limit;

    int rc = 1;
    vs_lm *lm = NULL;
    vs_mmproj *mm = NULL;
    vs_tokenizer *tok = NULL;
    vs_threadpool *tp = NULL;
    vs_world_dataset *d = NULL;
    vs_eval_lm *e = NULL;
    vs_json_writer_init(&cx.w);
    if (!(lm = vs_lm_load(model, &err)) || !(mm = vs_mmproj_open(mmproj, &err))) goto fail;
    if (!(tok = vs_tokenizer_from_gguf(vs_lm_gguf(lm), &err))) goto fail;
    if (!(tp = vs_threadpool_new(threads, &err))) goto fail;
    if (!(d = vs_world_load(data, split, eo.suites, &err))) goto fail;
    if (eo.ablate != VS_EVAL_IMAGES) {
        int64_t with_images = 0;
        for (int64_t i = 0; i < d->n; i++) with_images += d->samples[i].n_images > 0;
        if (!with_images) {
            cli_fail(CMD, "--ablate-images: no sample of %s/%s.jsonl (suites %s) has images", data, split, suites);
            goto done;
        }
    }
    if (!(e = vs_eval_lm_new(lm, mm, tok, tp, &lo, &err))) goto fail;
    if (details && vs_outfile_open(&cx.details, details, &err) != VS_OK) goto fail;
    int64_t n_turns = 0, per[VS_WORLD_N_SUITES] = {0};
    for (int64_t i = 0; i < d->n; i++)
        if (limit <= 0 || per[d->samples[i].suite]++ < limit) n_turns += d->samples[i].n_turns;
    static const char *const ablate_names[] = {"own", "swapped", "none"};
    fprintf(stderr, "[eval] %s + %s on %s/%s.jsonl: %lld turns, greedy, at most %d tokens each, %s history, %s "
            "images\n", model, mmproj, data, split, (long long)n_turns, lo.max_tokens,
            eo.reference_history ? "reference" : "own", ablate_names[eo.ablate]);
    vs_progress_begin(&cx.pr, "eval", n_turns);
    eo.on_turn = on_turn, eo.on_turn_ctx = &cx;
    vs_eval_result res;
    double t0 = vs_time_now();
    if (vs_eval_run(d, &eo, vs_eval_lm_answer, e, &res, &err)) goto fail;
    double sec = vs_time_now() - t0;
    if (!cx.quiet) vs_progress_end(&cx.pr, cx.done);
    char *table = vs_eval_table(&res);
    if (table) fputs(table, stdout);
    vs_free(table);
    int64_t pre, reu, dec;
    vs_eval_lm_counters(e, &pre, &reu, &dec);
    printf("%.1f s: %lld answer tokens (%.1f tokens/s including prefill); prefilled %lld rows, reused %lld\n",
           sec, (long long)res.total.answer_tokens, sec > 0 ? (double)res.total.answer_tokens / sec : 0.0,
           (long long)pre, (long long)reu);
    if (json) {
        vs_json_writer w;
        vs_json_writer_init(&w);
        vs_json_obj_begin(&w);
        vs_json_key(&w, "model"), vs_json_str(&w, model);
        vs_json_key(&w, "mmproj"), vs_json_str(&w, mmproj);
        vs_json_key(&w, "data"), vs_json_str(&w, data);
        vs_json_key(&w, "split"), vs_json_str(&w, split);
        vs_json_key(&w, "limit"), vs_json_int(&w, limit);
        vs_json_key(&w, "max_tokens"), vs_json_int(&w, lo.max_tokens);
        vs_json_key(&w, "history"), vs_json_str(&w, eo.reference_history ? "reference" : "own");
        vs_json_key(&w, "images"), vs_json_str(&w, ablate_names[eo.ablate]);
        vs_json_key(&w, "results");
        vs_eval_json(&res, &w);
        vs_json_obj_end(&w);
        size_t n = 0;
        char *s = vs_json_writer_take(&w, &n);
        vs_json_writer_free(&w);
        if (!s) {
            vs_error_set(&err, VS_ERR_NOMEM, "%s: out of memory", json);
            goto fail;
        }
        s[n] = '\n'; /* the writer's buffer keeps room for a terminator */
        vs_status ws = vs_write_file(json, s, n + 1, &err);
        vs_free(s);
        if (ws != VS_OK) goto fail;
    }
    if (cx.details.f && vs_outfile_commit(&cx.details, &err) != VS_OK) goto fail;
    rc = 0;
    goto done;
fail:
    cli_fail_err(CMD, &err);
done:
    vs_outfile_abort(&cx.details);
    vs_json_writer_free(&cx.w);
    vs_eval_lm_free(e);
    vs_world_dataset_free(d);
    vs_threadpool_free(tp);
    vs_tokenizer_free(tok);
    vs_mmproj_free(mm);
    vs_lm_free(lm);
    return rc;
}
