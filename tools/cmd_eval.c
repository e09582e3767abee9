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
            "                       A model that looks at its images falls towards chance. words:\n"
            "                       every picture written out in the prompt instead (\"Picture: top left:\n"
            "                       large red ring; ...\"), for an LM trained with train target\n"
            "                       --images-as-text. Samples without images are evaluated unchanged\n"
            "                       (an error if all are)\n"
            "  --kv-type T          KV cache f16 (default) or f32\n"
            "  -t, --threads N      threads (default 2)\n"
            "  --json FILE          write the results as JSON ('-' = stdout)\n"
            "  --details FILE       write one JSON line per turn (id, suite, turn, kind, question, correct,\n"
            "                       expected, found, tokens, eos, answer)\n"
            "  --by-question        also print the accuracy per suite and kind of question (count, color,\n"
            "                       position, exists, read_line, bar_value, ...; the JSON always has it)\n"
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
        vs_json_key(w, "question"), vs_json_str(w, vs_world_query_name(t->sample->turns[t->turn].query.type));
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

/* ------------------------------------------------------------------------------------------------
 * flags */

typedef struct eval_args {
    const char *model, *mmproj, *data, *split, *suites, *json, *details;
    int threads;
    bool quiet, by_question;
    vs_eval_lm_opts lo;
    vs_eval_opts eo; /* eo.limit: --limit */
} eval_args;

static const char *const ablate_names[] = {"own", "swapped", "none", "words"}; /* by vs_eval_ablate */

/* --limit N: int64_t in [1, INT64_MAX] (a double range cannot hold INT64_MAX). */
static bool parse_limit(const char *cmd, const char *flag, const char *v, void *dst) {
    return cli_parse_i64(cmd, flag, v, 1, INT64_MAX, (int64_t *)dst);
}

/* --history own|reference: sets the bool reference_history at dst. */
static bool parse_history(const char *cmd, const char *flag, const char *v, void *dst) {
    if (!strcmp(v, "own") || !strcmp(v, "reference")) {
        *(bool *)dst = !strcmp(v, "reference");
        return true;
    }
    cli_fail(cmd, "%s %s: expected own or reference", flag, v);
    return false;
}

/* --ablate-images swap|none|words: sets the vs_eval_ablate at dst. */
static bool parse_ablate(const char *cmd, const char *flag, const char *v, void *dst) {
    static const char *const names[] = {"swap", "none", "words"};
    static const vs_eval_ablate modes[] = {VS_EVAL_IMAGES_SWAP, VS_EVAL_IMAGES_NONE, VS_EVAL_IMAGES_WORDS};
    for (int i = 0; i < 3; i++)
        if (!strcmp(v, names[i])) {
            *(vs_eval_ablate *)dst = modes[i];
            return true;
        }
    cli_fail(cmd, "%s %s: expected swap, none or words", flag, v);
    return false;
}

/* Returns -1 when the options are fine, else the exit status. */
static int eval_parse(int argc, char **argv, eval_args *a) {
    memset(a, 0, sizeof(*a));
    a->split = "test", a->suites = "all";
    a->threads = 2;
    a->lo.max_tokens = 256;
    vs_type kv_type = VS_TYPE_F16;
    cli_flags fs = {0};
    cli_flag_add(&fs, "-m|--model", CLI_STR, &a->model, 0, 0);
    cli_flag_add(&fs, "--mmproj", CLI_STR, &a->mmproj, 0, 0);
    cli_flag_add(&fs, "--data", CLI_STR, &a->data, 0, 0);
    cli_flag_add(&fs, "--split", CLI_STR, &a->split, 0, 0);
    cli_flag_add(&fs, "--suites", CLI_STR, &a->suites, 0, 0);
    cli_flag_fn_add(&fs, "--limit", parse_limit, &a->eo.limit);
    cli_flag_add(&fs, "-n|--max-tokens|--n-predict", CLI_INT, &a->lo.max_tokens, 1, 1 << 20);
    cli_flag_fn_add(&fs, "--history", parse_history, &a->eo.reference_history);
    cli_flag_fn_add(&fs, "--ablate-images", parse_ablate, &a->eo.ablate);
    cli_flag_add(&fs, "--kv-type", CLI_KV, &kv_type, 0, 0);
    cli_flag_add(&fs, "-t|--threads", CLI_INT, &a->threads, 1, 1024);
    cli_flag_add(&fs, "--json", CLI_STR, &a->json, 0, 0);
    cli_flag_add(&fs, "--details", CLI_STR, &a->details, 0, 0);
    cli_flag_add(&fs, "--by-question", CLI_BOOL, &a->by_question, 0, 0);
    cli_flag_add(&fs, "-q|--quiet", CLI_BOOL, &a->quiet, 0, 0);
    const int r = cli_flags_parse(CMD, argc, argv, &fs, usage);
    if (r >= 0) return r;
    a->lo.kv_f32 = kv_type == VS_TYPE_F32;
    if (!a->model || !a->mmproj || !a->data) return cli_fail(CMD, "--model, --mmproj and --data are required"), 2;
    vs_error err = {0};
    if (vs_world_parse_suites(a->suites, &a->eo.suites, &err)) return cli_fail_err(CMD, &err), 2;
    return -1;
}

/* ------------------------------------------------------------------------------------------------
 * the run */

typedef struct eval_models {
    vs_lm *lm;
    vs_mmproj *mm;
    vs_tokenizer *tok;
    vs_threadpool *tp;
    vs_world_dataset *d;
} eval_models;

/* Loads the model, the thread pool and the dataset; false with err set on failure (what was loaded:
 * eval_models_free). */
static bool eval_load(const eval_args *a, eval_models *m, vs_error *err) {
    if (!(m->lm = vs_lm_load(a->model, err)) || !(m->mm = vs_mmproj_open(a->mmproj, err))) return false;
    if (!(m->tok = vs_tokenizer_from_gguf(vs_lm_gguf(m->lm), err))) return false;
    if (!(m->tp = vs_threadpool_new(a->threads, err))) return false;
    return (m->d = vs_world_load(a->data, a->split, a->eo.suites, err)) != NULL;
}

static void eval_models_free(eval_models *m) {
    vs_world_dataset_free(m->d);
    vs_threadpool_free(m->tp);
    vs_tokenizer_free(m->tok);
    vs_mmproj_free(m->mm);
    vs_lm_free(m->lm);
}

/* The turns the run will answer (for the progress line). */
static int64_t count_turns(const vs_world_dataset *d, int64_t limit) {
    int64_t n_turns = 0, per[VS_WORLD_N_SUITES] = {0};
    for (int64_t i = 0; i < d->n; i++)
        if (limit <= 0 || per[d->samples[i].suite]++ < limit) n_turns += d->samples[i].n_turns;
    return n_turns;
}

/* --json: the inputs and the results. */
static vs_status write_json(const eval_args *a, const vs_eval_result *res, vs_error *err) {
    vs_json_writer w;
    vs_json_writer_init(&w);
    vs_json_obj_begin(&w);
    vs_json_key(&w, "model"), vs_json_str(&w, a->model);
    vs_json_key(&w, "mmproj"), vs_json_str(&w, a->mmproj);
    vs_json_key(&w, "data"), vs_json_str(&w, a->data);
    vs_json_key(&w, "split"), vs_json_str(&w, a->split);
    vs_json_key(&w, "limit"), vs_json_int(&w, a->eo.limit);
    vs_json_key(&w, "max_tokens"), vs_json_int(&w, a->lo.max_tokens);
    vs_json_key(&w, "history"), vs_json_str(&w, a->eo.reference_history ? "reference" : "own");
    vs_json_key(&w, "images"), vs_json_str(&w, ablate_names[a->eo.ablate]);
    vs_json_key(&w, "results");
    vs_eval_json(res, &w);
    vs_json_obj_end(&w);
    size_t n = 0;
    char *s = vs_json_writer_take(&w, &n);
    vs_json_writer_free(&w);
    if (!s) return vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory", a->json);
    s[n] = '\n'; /* the writer's buffer keeps room for a terminator */
    vs_status st = vs_write_file(a->json, s, n + 1, err);
    vs_free(s);
    return st;
}

/* Answers every selected turn and prints the table; false with err set on failure. */
static bool eval_answer(eval_args *a, eval_models *m, vs_eval_lm *e, eval_cli_ctx *cx, vs_eval_result *res,
                        vs_error *err) {
    const int64_t n_turns = count_turns(m->d, a->eo.limit);
    fprintf(stderr, "[eval] %s + %s on %s/%s.jsonl: %lld turns, greedy, at most %d tokens each, %s history, %s "
            "images\n", a->model, a->mmproj, a->data, a->split, (long long)n_turns, a->lo.max_tokens,
            a->eo.reference_history ? "reference" : "own", ablate_names[a->eo.ablate]);
    vs_progress_begin(&cx->pr, "eval", n_turns);
    a->eo.on_turn = on_turn, a->eo.on_turn_ctx = cx;
    const double t0 = vs_time_now();
    if (vs_eval_run(m->d, &a->eo, vs_eval_lm_answer, e, res, err)) return false;
    const double sec = vs_time_now() - t0;
    if (!cx->quiet) vs_progress_end(&cx->pr, cx->done);
    char *table = vs_eval_table(res);
    if (table) fputs(table, stdout);
    vs_free(table);
    if (a->by_question) {
        table = vs_eval_question_table(res);
        if (table) fputs("\n", stdout), fputs(table, stdout);
        vs_free(table);
    }
    int64_t pre, reu, dec;
    vs_eval_lm_counters(e, &pre, &reu, &dec);
    printf("%.1f s: %lld answer tokens (%.1f tokens/s including prefill); prefilled %lld rows, reused %lld\n",
           sec, (long long)res->total.answer_tokens, sec > 0 ? (double)res->total.answer_tokens / sec : 0.0,
           (long long)pre, (long long)reu);
    return true;
}

/* Loads everything, evaluates and writes the files asked for. Returns the exit status (errors printed). */
static int eval_run(eval_args *a) {
    vs_error err = {0};
    eval_models m = {0};
    vs_eval_lm *e = NULL;
    eval_cli_ctx cx;
    memset(&cx, 0, sizeof(cx));
    cx.quiet = a->quiet;
    vs_json_writer_init(&cx.w);
    int rc = 1;
    if (!eval_load(a, &m, &err)) goto fail;
    if (a->eo.ablate != VS_EVAL_IMAGES) {
        int64_t with_images = 0;
        for (int64_t i = 0; i < m.d->n; i++) with_images += m.d->samples[i].n_images > 0;
        if (!with_images) {
            cli_fail(CMD, "--ablate-images: no sample of %s/%s.jsonl (suites %s) has images", a->data, a->split,
                     a->suites);
            goto done;
        }
    }
    if (!(e = vs_eval_lm_new(m.lm, m.mm, m.tok, m.tp, &a->lo, &err))) goto fail;
    if (a->details && vs_outfile_open(&cx.details, a->details, &err) != VS_OK) goto fail;
    vs_eval_result res;
    if (!eval_answer(a, &m, e, &cx, &res, &err)) goto fail;
    if (a->json && write_json(a, &res, &err) != VS_OK) goto fail;
    if (cx.details.f && vs_outfile_commit(&cx.details, &err) != VS_OK) goto fail;
    rc = 0;
    goto done;
fail:
    cli_fail_err(CMD, &err);
done:
    vs_outfile_abort(&cx.details);
    vs_json_writer_free(&cx.w);
    vs_eval_lm_free(e);
    eval_models_free(&m);
    return rc;
}

int vs_cmd_eval(int argc, char **argv) {
    eval_args a;
    const int st = eval_parse(argc, argv, &a);
    return st >= 0 ? st : eval_run(&a);
}
