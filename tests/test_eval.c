/* eval: the scoring loop, its counts and reports, the greedy answerer, and the train/eval CLI.
 *   1. oracles: reference answers score 100% in every suite; second turns are prompted with the
 *      answerer's own first answer (exact prompt text), or the reference with reference_history;
 *      token counts, cut answers, limit and suite selection are counted exactly; an answerer that is
 *      right on one suite only gives exactly the checker's verdicts elsewhere; errors name the turn;
 *      the JSON report parses back to the same numbers;
 *   2. the greedy answerer over vs_lm + mmproj (a tiny trained VLM exported with the tiny world's
 *      tokenizer) gives, token for token, what a from-scratch greedy loop gives (full prefill for every
 *      token, no cache reuse), and reuses the first turn's rows for second turns;
 *   3. CLI: `vlmspec train target` run 4 steps straight and 2 + --resume 2 gives byte-identical
 *      exported models and the same loss curve; a resume with other settings is refused; `train
 *      export` of the last checkpoint equals the end-of-training export; `vlmspec eval` runs on the
 *      result and writes its JSON; `vlmspec data rows` writes exactly the trainer's encoding. */
#include <string.h>
#include <unistd.h>

#include "eval.h"
#include "mmprompt.h"
#include "sample.h"
#include "world_tiny.h"

/* `vlmspec data rows`: the files hold exactly vs_train_encode's rows, turns and the turns' query types,
 * and the JSON counts them; an unwritable prefix fails (exit 1) and leaves no file behind; with
 * --images-as-text no row is an image row, and --image-rows beside it is refused (exit 2). */
static void test_cli_rows(const char *cli, const char *dir, const char *tok_path, const char *tmp) {
    int rc = vt_run("%s data rows %s --split test --tokenizer %s -o %s/rows > %s/rows.log", cli, dir, tok_path,
                    tmp, tmp);
    VT_CHECK(rc == 0, "data rows exit %d", rc);
    vs_error err = {0};
    vs_world_dataset *d = vs_world_load(dir, "test", VS_WORLD_ALL_SUITES, &err);
    vs_tokenizer *tok = vs_tokenizer_load(tok_path, &err);
    VT_REQUIRE(d && tok, "%s", err.msg);
    static const char *const ext[5] = {"tokens.i32", "answer.u8", "offsets.i64", "turns.i32", "query.i32"};
    uint8_t *f[5] = {0};
    size_t n[5] = {0};
    char path[1024];
    for (int i = 0; i < 5; i++) {
        snprintf(path, sizeof(path), "%s/rows.%s", tmp, ext[i]);
        VT_REQUIRE(vs_read_file(path, &f[i], &n[i], &err) == VS_OK, "%s", err.msg);
    }
    const int32_t *tokens = (const int32_t *)f[0], *turns = (const int32_t *)f[3], *query = (const int32_t *)f[4];
    const int64_t *off = (const int64_t *)f[2];
    const int MT = VS_WORLD_MAX_TURNS;
    VT_REQUIRE(n[2] == sizeof(int64_t) * (size_t)(d->n + 1) && n[3] == sizeof(int32_t) * 2 * MT * (size_t)d->n &&
                   n[4] == sizeof(int32_t) * MT * (size_t)d->n && off[0] == 0,
               "rows files sized for another sample count");
    int64_t bad = 0, rows = 0;
    for (int64_t i = 0; i < d->n; i++) {
        vs_train_example ex;
        VT_REQUIRE(vs_train_encode(&d->samples[i], tok, 64, &ex, &err) == VS_OK, "%s", err.msg);
        bad += off[i + 1] - off[i] != ex.n_rows || (size_t)off[i + 1] * 4 > n[0] || (size_t)off[i + 1] > n[1];
        for (int32_t r = 0; r < ex.n_rows && !bad; r++)
            bad += tokens[off[i] + r] != ex.tokens[r] || f[1][off[i] + r] != ex.answer[r];
        for (int t = 0; t < MT; t++) {
            const bool in = t < ex.n_turns;
            bad += turns[i * 2 * MT + 2 * t] != (in ? ex.turn_start[t] : -1) ||
                   turns[i * 2 * MT + 2 * t + 1] != (in ? ex.turn_end[t] : -1) ||
                   query[i * MT + t] != (in ? (int32_t)d->samples[i].turns[t].query.type : -1);
        }
        rows += ex.n_rows;
        vs_train_example_free(&ex);
    }
    VT_CHECK(bad == 0 && n[0] == 4 * (size_t)rows && n[1] == (size_t)rows, "data rows: %lld mismatches",
             (long long)bad);
    snprintf(path, sizeof(path), "%s/rows.json", tmp);
    char want[64];
    snprintf(want, sizeof(want), "\"rows\":%lld", (long long)rows);
    VT_CHECK(vt_file_has(path, want) && vt_file_has(path, "\"query_names\":[\"none\""), "%s: counts", path);
    for (int i = 0; i < 5; i++) vs_free(f[i]);
    rc = vt_run("%s data rows %s --split test --tokenizer %s -o %s/missing/rows > %s/rows-bad.log 2>&1", cli, dir,
                tok_path, tmp, tmp);
    snprintf(path, sizeof(path), "%s/missing", tmp);
    VT_CHECK(rc == 1 && access(path, F_OK) != 0, "data rows into a missing folder: exit %d", rc);
    /* --images-as-text: the same samples with the pictures in words: no image rows; --image-rows with it is refused */
    rc = vt_run("%s data rows %s --split test --tokenizer %s -o %s/words --images-as-text > %s/words.log", cli, dir,
                tok_path, tmp, tmp);
    snprintf(path, sizeof(path), "%s/words.tokens.i32", tmp);
    uint8_t *wb = NULL;
    size_t nw = 0;
    const bool read = rc == 0 && vs_read_file(path, &wb, &nw, &err) == VS_OK;
    int64_t neg = 0;
    for (size_t i = 0; read && i + 4 <= nw; i += 4) {
        int32_t v;
        memcpy(&v, wb + i, 4);
        neg += v < 0;
    }
    VT_CHECK(read && nw > 0 && neg == 0, "data rows --images-as-text: exit %d, %lld image rows", rc, (long long)neg);
    vs_free(wb);
    rc = vt_run("%s data rows %s --split test --tokenizer %s -o %s/words2 --images-as-text --image-rows 4 > %s/words2.log "
                "2>&1", cli, dir, tok_path, tmp, tmp);
    snprintf(path, sizeof(path), "%s/words2.log", tmp);
    VT_CHECK(rc == 2 && vt_file_has(path, "take no image rows"), "--image-rows with --images-as-text: exit %d", rc);
    printf("data rows: %lld samples, %lld rows equal vs_train_encode's (tokens, answers, turns, queries)\n",
           (long long)d->n, (long long)rows);
    vs_tokenizer_free(tok);
    vs_world_dataset_free(d);
}

/* ---------------------------------------------------------------------------------------------- */
/* 1. oracles */

typedef struct oracle {
    int mode;           /* 0: reference answers (+ " zq" on first turns); 1: right on vqa only */
    int calls, fail_at; /* fail_at > 0: the fail_at-th call returns an error */
    bool check_history; /* verify the prompt of second turns */
    bool reference_history;
    int bad_prompts;
    int64_t tokens_given;
} oracle;

static int turn_of(const char *prompt) {
    int n = 0;
    for (const char *p = prompt; (p = strstr(p, "ASSISTANT:")) != NULL; p++) n++;
    return n - 1;
}

static vs_status oracle_answer(void *ctx, const vs_world_sample *s, const char *prompt, int n_images,
                               char **answer, int64_t *n_tokens, bool *eos, vs_error *err) {
    oracle *o = ctx;
    o->calls++;
    if (o->fail_at && o->calls == o->fail_at) return vs_error_set(err, VS_ERR_IO, "oracle broke");
    int t = turn_of(prompt);
    VT_CHECK(t >= 0 && t < s->n_turns, "%s: prompt of turn %d", s->id, t);
    VT_CHECK(n_images == vs_mm_count_markers(prompt, strlen(prompt), NULL) && n_images <= s->n_images,
             "%s: %d images", s->id, n_images);
    if (o->check_history) {
        /* the exact prompt: the world's, with the earlier answer replaced as documented */
        vs_world_sample tmp = *s;
        char buf[4096];
        if (t == 1 && !o->reference_history) {
            snprintf(buf, sizeof(buf), "%s zq", s->turns[0].assistant);
            tmp.turns[0].assistant = buf;
        }
        char *want = vs_world_prompt(&tmp, t, false);
        if (strcmp(want, prompt)) o->bad_prompts++;
        vs_free(want);
    }
    const char *ref = s->turns[t].assistant;
    size_t n = strlen(ref) + 8;
    char *a = vs_malloc(n);
    if (o->mode == 0 || s->suite == VS_WORLD_VQA)
        snprintf(a, n, " %s%s", ref, t == 0 ? " zq" : "");
    else
        a[0] = 0;
    *answer = a;
    *n_tokens = 10 * t + 7;
    *eos = t == 0;
    o->tokens_given += *n_tokens;
    return VS_OK;
}

/* Records what the answerer is given under image ablation; on_turn compares the sample whose images it
 * got with the sample whose turn was asked. */
typedef struct ablate_probe {
    const vs_world_sample *got; /* the image-source sample of the last call */
    int64_t calls, markers, bad, own, swapped, pictures; /* pictures: prompts holding a picture in words */
} ablate_probe;

static vs_status ablate_answer(void *ctx, const vs_world_sample *s, const char *prompt, int n_images, char **answer,
                               int64_t *n_tokens, bool *eos, vs_error *err) {
    (void)err;
    ablate_probe *p = ctx;
    p->calls++, p->markers += n_images, p->got = s, p->pictures += strstr(prompt, "Picture: ") != NULL;
    if (n_images != vs_mm_count_markers(prompt, strlen(prompt), NULL) || n_images > s->n_images) p->bad++;
    *answer = vs_strdup("");
    *n_tokens = 0, *eos = true;
    return VS_OK;
}

static void ablate_turn(void *ctx, const vs_eval_turn *t) {
    ablate_probe *p = ctx;
    if (p->got == t->sample) {
        p->own++;
    } else {
        p->swapped++;
        if (p->got->suite != t->sample->suite || p->got->n_images != t->sample->n_images || !t->sample->n_images)
            p->bad++;
    }
}

/* --ablate-images: swap hands every sample with images another sample of its suite with as many
 * images (samples without images keep their own); none removes every marker; words writes every picture
 * out in the prompt instead. */
static void test_ablation(const vs_world_dataset *d) {
    vs_error err = {0};
    vs_eval_result r;
    ablate_probe base = {0}, sw = {0}, none = {0}, words = {0};
    int64_t turns_img = 0, turns_all = 0;
    for (int64_t i = 0; i < d->n; i++)
        turns_all += d->samples[i].n_turns, turns_img += d->samples[i].n_images ? d->samples[i].n_turns : 0;
    vs_eval_opts eo = {.on_turn = ablate_turn, .on_turn_ctx = &base};
    VT_REQUIRE(vs_eval_run(d, &eo, ablate_answer, &base, &r, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(base.own == turns_all && base.swapped == 0 && base.markers > 0 && base.bad == 0, "no ablation");
    eo.ablate = VS_EVAL_IMAGES_NONE, eo.on_turn_ctx = &none;
    VT_REQUIRE(vs_eval_run(d, &eo, ablate_answer, &none, &r, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(none.calls == base.calls && none.markers == 0 && none.bad == 0,
             "none: %lld markers left of %lld", (long long)none.markers, (long long)base.markers);
    eo.ablate = VS_EVAL_IMAGES_WORDS, eo.on_turn_ctx = &words;
    VT_REQUIRE(vs_eval_run(d, &eo, ablate_answer, &words, &r, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(words.calls == base.calls && words.markers == 0 && words.bad == 0 && words.pictures == turns_img &&
                 base.pictures == 0,
             "words: %lld markers, %lld prompts with pictures in words of %lld turns with images", (long long)words.markers,
             (long long)words.pictures, (long long)turns_img);
    eo.ablate = VS_EVAL_IMAGES_SWAP, eo.on_turn_ctx = &sw;
    VT_REQUIRE(vs_eval_run(d, &eo, ablate_answer, &sw, &r, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(sw.markers == base.markers && sw.bad == 0 && sw.swapped == turns_img && sw.own == turns_all - turns_img,
             "swap: %lld swapped of %lld turns with images, %lld bad", (long long)sw.swapped, (long long)turns_img,
             (long long)sw.bad);
    /* a sample alone in its suite has nothing to swap with: a clear error */
    vs_world_dataset one = *d;
    for (int64_t i = 0; i < d->n && one.n == d->n; i++)
        if (d->samples[i].n_images) one.samples = &d->samples[i], one.n = 1;
    VT_REQUIRE(one.n == 1, "the tiny split has images");
    VT_CHECK(vs_eval_run(&one, &eo, ablate_answer, &sw, &r, &err) == VS_ERR_INVALID && strstr(err.msg, "swap with"),
             "%s", err.msg);
}

static void test_oracles(const vs_world_dataset *d) {
    vs_error err = {0};
    vs_eval_result r;
    oracle o = {.check_history = true};
    vs_eval_opts eo = {0};
    VT_REQUIRE(vs_eval_run(d, &eo, oracle_answer, &o, &r, &err) == VS_OK, "%s", err.msg);
    int64_t turns = 0, second = 0;
    for (int64_t i = 0; i < d->n; i++) turns += d->samples[i].n_turns, second += d->samples[i].n_turns - 1;
    VT_CHECK(r.total.samples == d->n && r.total.turns == turns && r.total.second_turns == second, "counts");
    VT_CHECK(r.total.correct == turns, "reference answers: %lld of %lld correct", (long long)r.total.correct,
             (long long)turns);
    for (int s = 0; s < VS_WORLD_N_SUITES; s++)
        if (r.suite[s].turns) VT_CHECK(vs_eval_accuracy(&r.suite[s]) == 1.0, "suite %d accuracy", s);
    VT_CHECK(o.bad_prompts == 0, "%d second-turn prompts are not built from the model's own answer",
             o.bad_prompts);
    VT_CHECK(r.total.answer_tokens == o.tokens_given && r.total.answer_tokens == 7 * turns + 10 * second,
             "answer tokens %lld", (long long)r.total.answer_tokens);
    VT_CHECK(r.total.no_eos == second, "cut answers %lld vs %lld", (long long)r.total.no_eos,
             (long long)second);
    VT_CHECK(second > 0, "the tiny test split has no second turns");

    o = (oracle){.check_history = true, .reference_history = true};
    eo.reference_history = true;
    VT_REQUIRE(vs_eval_run(d, &eo, oracle_answer, &o, &r, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(o.bad_prompts == 0, "reference history: %d prompts differ", o.bad_prompts);

    /* right on vqa only: elsewhere exactly the checker's verdicts on an empty answer */
    o = (oracle){.mode = 1};
    eo = (vs_eval_opts){0};
    VT_REQUIRE(vs_eval_run(d, &eo, oracle_answer, &o, &r, &err) == VS_OK, "%s", err.msg);
    int64_t want[VS_WORLD_N_SUITES] = {0};
    for (int64_t i = 0; i < d->n; i++)
        for (int t = 0; t < d->samples[i].n_turns; t++)
            want[d->samples[i].suite] +=
                d->samples[i].suite == VS_WORLD_VQA || vs_world_check(&d->samples[i], t, "", NULL);
    for (int s = 0; s < VS_WORLD_N_SUITES; s++)
        VT_CHECK(r.suite[s].correct == want[s], "suite %s: %lld correct, checker says %lld",
                 vs_world_suite_name((vs_world_suite)s), (long long)r.suite[s].correct, (long long)want[s]);
    VT_CHECK(vs_eval_accuracy(&r.suite[VS_WORLD_VQA]) == 1.0 &&
                 vs_eval_accuracy(&r.suite[VS_WORLD_OCR]) < 1.0,
             "vqa-only oracle");
    /* per kind of question: the checker's verdicts on each turn, summing to the suite's counts */
    static int64_t want_q[VS_WORLD_N_SUITES][VS_WORLD_N_QUERY_TYPES][3]; /* turns, correct, first turns */
    memset(want_q, 0, sizeof(want_q));
    for (int64_t i = 0; i < d->n; i++)
        for (int t = 0; t < d->samples[i].n_turns; t++) {
            int64_t *w = want_q[d->samples[i].suite][d->samples[i].turns[t].query.type];
            w[0]++, w[2] += t == 0;
            w[1] += d->samples[i].suite == VS_WORLD_VQA || vs_world_check(&d->samples[i], t, "", NULL);
        }
    int n_kinds = 0;
    for (int su = 0; su < VS_WORLD_N_SUITES; su++) {
        int64_t turns_s = 0, correct_s = 0;
        for (int q = 0; q < VS_WORLD_N_QUERY_TYPES; q++) {
            const vs_eval_counts *c = &r.question[su][q];
            VT_CHECK(c->turns == want_q[su][q][0] && c->correct == want_q[su][q][1] &&
                         c->first_turns == want_q[su][q][2] && c->samples == c->first_turns,
                     "%s / %s: %lld of %lld correct, checker %lld of %lld", vs_world_suite_name((vs_world_suite)su),
                     vs_world_query_name((vs_world_query_type)q), (long long)c->correct, (long long)c->turns,
                     (long long)want_q[su][q][1], (long long)want_q[su][q][0]);
            turns_s += c->turns, correct_s += c->correct, n_kinds += c->turns > 0;
        }
        VT_CHECK(turns_s == r.suite[su].turns && correct_s == r.suite[su].correct, "%s: kinds sum to the suite",
                 vs_world_suite_name((vs_world_suite)su));
    }
    VT_CHECK(n_kinds > VS_WORLD_N_SUITES, "only %d (suite, kind of question) pairs", n_kinds);

    /* limit and suites */
    o = (oracle){0};
    eo = (vs_eval_opts){.limit = 1,
                        .suites = VS_WORLD_SUITE_BIT(VS_WORLD_POPE) | VS_WORLD_SUITE_BIT(VS_WORLD_TEXT)};
    VT_REQUIRE(vs_eval_run(d, &eo, oracle_answer, &o, &r, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(r.suite[VS_WORLD_POPE].samples == 1 && r.suite[VS_WORLD_TEXT].samples == 1 &&
                 r.total.samples == 2,
             "limit/suites: %lld samples", (long long)r.total.samples);

    /* an answerer error stops the run and names the turn */
    o = (oracle){.fail_at = 3};
    eo = (vs_eval_opts){0};
    VT_CHECK(vs_eval_run(d, &eo, oracle_answer, &o, &r, &err) == VS_ERR_IO &&
                 strstr(err.msg, "oracle broke") && strstr(err.msg, "turn"),
             "error: %s", err.msg);

    /* reports */
    o = (oracle){0};
    VT_REQUIRE(vs_eval_run(d, &eo, oracle_answer, &o, &r, &err) == VS_OK, "%s", err.msg);
    char *table = vs_eval_table(&r);
    VT_CHECK(table && strstr(table, "total") && strstr(table, "100.0%"), "table");
    printf("%s", table ? table : "");
    vs_free(table);
    vs_json_writer w;
    vs_json_writer_init(&w);
    vs_eval_json(&r, &w);
    vs_json_doc *doc = vs_json_parse(w.buf, w.len, "eval json", &err);
    VT_REQUIRE(doc, "%s", err.msg);
    const vs_json *tot = vs_json_get(vs_json_root(doc), "total");
    VT_CHECK(vs_json_get_int(tot, "turns", -1) == r.total.turns &&
                 vs_json_get_int(tot, "correct", -1) == r.total.correct &&
                 vs_json_get_num(tot, "accuracy", -1) == 1.0 &&
                 vs_json_get_int(vs_json_get(vs_json_get(vs_json_root(doc), "suites"), "vqa"), "turns", -1) ==
                     r.suite[VS_WORLD_VQA].turns,
             "JSON report");
    const vs_json *qv = vs_json_get(vs_json_get(vs_json_root(doc), "questions"), "vqa");
    int64_t q_turns = 0;
    for (int q = 0; q < VS_WORLD_N_QUERY_TYPES; q++)
        q_turns += vs_json_get_int(vs_json_get(qv, vs_world_query_name((vs_world_query_type)q)), "turns", 0);
    VT_CHECK(qv && q_turns == r.suite[VS_WORLD_VQA].turns, "JSON questions: vqa kinds sum to %lld turns",
             (long long)q_turns);
    vs_json_doc_free(doc);
    vs_json_writer_free(&w);
    table = vs_eval_question_table(&r);
    VT_CHECK(table && strstr(table, "question") && strstr(table, "vqa ") && strstr(table, "100.0%"), "question table");
    printf("%s", table ? table : "");
    vs_free(table);

    /* prompt cleaning: one leading space and image markers are dropped from model answers */
    const vs_world_sample *s2 = NULL;
    for (int64_t i = 0; i < d->n && !s2; i++)
        if (d->samples[i].n_turns == 2) s2 = &d->samples[i];
    const char *ans[2] = {"  hi <image>there", NULL};
    char *p = vs_eval_prompt(s2, 1, ans);
    VT_CHECK(p && strstr(p, "ASSISTANT:  hi there</s>USER:"), "cleaned history: %s", p ? p : "(null)");
    vs_free(p);
    printf("oracles: %lld samples, %lld turns (%lld second turns) counted exactly\n", (long long)d->n,
           (long long)turns, (long long)second);
}

/* ---------------------------------------------------------------------------------------------- */
/* 2. the greedy answerer against a from-scratch greedy loop */

typedef struct lm_check {
    vs_eval_lm *e;
    vs_lm *lm;
    const vs_mmproj *mm;
    const vs_tokenizer *tok;
    vs_threadpool *tp;
    int max_tokens, answers, mismatches;
    vs_sampler *smp; /* reference_greedy samples with it instead of vs_argmax when set */
} lm_check;

/* Greedy tokens for a prompt, every step a fresh cache and a full forward over all rows. */
static int64_t reference_greedy(lm_check *c, const vs_world_sample *s, const char *prompt, int n_images,
                                int32_t *out) {
    vs_error err = {0};
    vs_mm_image imgs[VS_WORLD_MAX_IMAGES];
    VT_REQUIRE(vs_mm_images_from_files(vs_mmproj_tower(c->mm), vs_mmproj_projector(c->mm), c->tp,
                                       (const char *const *)s->images, n_images, VS_PREPROC_LLAVA, 1, imgs,
                                       &err) == VS_OK,
               "%s", err.msg);
    vs_mm_prompt p;
    VT_REQUIRE(vs_mm_prompt_build(&p, c->tok, prompt, strlen(prompt), imgs, n_images, NULL, &err) == VS_OK,
               "%s", err.msg);
    const int V = vs_lm_cfg(c->lm)->n_vocab;
    int64_t n = 0, np = p.n_rows;
    vs_lm_row *rows = vs_calloc((size_t)(np + c->max_tokens), sizeof(vs_lm_row));
    float *logits = vs_malloc(sizeof(float) * V);
    vs_mm_prompt_rows(&p, 0, np, 0, 0, rows);
    for (;;) {
        vs_kv *kv = vs_lm_kv_new(c->lm, 1, (int)(np + n), VS_TYPE_F32, &err);
        VT_REQUIRE(kv, "%s", err.msg);
        for (int64_t i = 0; i < np + n; i++) rows[i].want_logits = i == np + n - 1;
        vs_lm_out o = {.logits = logits};
        VT_REQUIRE(vs_lm_forward(c->lm, kv, c->tp, rows, (int)(np + n), &o, &err) == VS_OK, "%s", err.msg);
        vs_kv_free(kv);
        int32_t t = vs_argmax(logits, V);
        if (c->smp) VT_REQUIRE(vs_sampler_sample(c->smp, logits, NULL, &t, &err) == VS_OK, "%s", err.msg);
        if (vs_tokenizer_is_eog(c->tok, t)) break;
        out[n++] = t;
        if (n == c->max_tokens) break;
        rows[np + n - 1] = (vs_lm_row){.token = t, .pos = (int32_t)(np + n - 1)};
    }
    vs_free(rows), vs_free(logits);
    vs_mm_prompt_free(&p);
    vs_mm_images_free(imgs, n_images);
    return n;
}

static vs_status checked_answer(void *ctx, const vs_world_sample *s, const char *prompt, int n_images,
                                char **answer, int64_t *n_tokens, bool *eos, vs_error *err) {
    lm_check *c = ctx;
    vs_status st = vs_eval_lm_answer(c->e, s, prompt, n_images, answer, n_tokens, eos, err);
    if (st != VS_OK) return st;
    int64_t n;
    const int32_t *got = vs_eval_lm_last_tokens(c->e, &n);
    int32_t want[64];
    int64_t nw = reference_greedy(c, s, prompt, n_images, want);
    bool same = n == nw && n == *n_tokens && (n == 0 || !memcmp(got, want, sizeof(int32_t) * (size_t)n));
    VT_CHECK(same, "%s: greedy answer differs from the from-scratch loop (%lld vs %lld tokens)", s->id,
             (long long)n, (long long)nw);
    VT_CHECK(*eos == (n < c->max_tokens), "%s: eos flag", s->id);
    c->mismatches += !same;
    c->answers++;
    return VS_OK;
}

static void test_answerer(const vs_world_dataset *train, const vs_world_dataset *test,
                          const vs_tokenizer *tok, const char *tok_path) {
    vs_error err = {0};
    vs_threadpool *tp = vs_threadpool_new(2, &err);
    VT_REQUIRE(tp, "%s", err.msg);
    /* a tiny VLM trained a few steps (so it emits varied tokens), exported with the tokenizer */
    vs_train_vlm_config c = wt_config(vs_tokenizer_n_vocab(tok));
    vs_train_data_opts dopts = {
        .seq_len = 4096, .batch = 4, .image_rows = 16, .preproc = wt_preproc(&c), .bucket = 1, .seed = 1};
    vs_train_data *data = vs_train_data_new(&train, 1, tok, &dopts, &err);
    VT_REQUIRE(data, "%s", err.msg);
    int mb, mt, mi;
    vs_train_data_capacity(data, &mb, &mt, &mi);
    vs_train_vlm *m = vs_train_vlm_new(&c, mb, mt, mi, &err);
    VT_REQUIRE(m, "%s", err.msg);
    vs_train_vlm_init(m, 9);
    vs_adamw opt;
    vs_adamw_default(&opt);
    for (int s = 0; s < 4; s++) {
        vs_train_batch b;
        float loss;
        VT_REQUIRE(vs_train_data_next(data, &b, NULL, &err) == VS_OK, "%s", err.msg);
        vs_train_params_zero_grad(vs_train_vlm_params(m));
        VT_REQUIRE(vs_train_vlm_forward(m, tp, &b, &loss, &err) == VS_OK, "%s", err.msg);
        VT_REQUIRE(vs_train_vlm_backward(m, tp, &err) == VS_OK, "%s", err.msg);
        vs_train_adamw_step(vs_train_vlm_params(m), tp, &opt, 1e-2f);
    }
    char lm_path[600], mm_path[600];
    snprintf(lm_path, sizeof(lm_path), "%s/eval_lm.gguf", vt_tmpdir());
    snprintf(mm_path, sizeof(mm_path), "%s/eval_mmproj.gguf", vt_tmpdir());
    vs_gguf *tg = vs_gguf_open(tok_path, &err);
    VT_REQUIRE(tg, "%s", err.msg);
    vs_train_export_opts xo = {.type = VS_TYPE_F32, .tokenizer = tg};
    VT_REQUIRE(vs_train_vlm_export(m, lm_path, mm_path, &xo, &err) == VS_OK, "%s", err.msg);
    vs_gguf_close(tg);
    vs_train_vlm_free(m);
    vs_train_data_free(data);

    vs_lm *lm = vs_lm_load(lm_path, &err);
    vs_mmproj *mm = vs_mmproj_open(mm_path, &err);
    VT_REQUIRE(lm && mm, "%s", err.msg);
    lm_check ck = {.lm = lm, .mm = mm, .tok = tok, .tp = tp, .max_tokens = 12};
    vs_eval_lm_opts lo = {.max_tokens = ck.max_tokens, .kv_f32 = true};
    ck.e = vs_eval_lm_new(lm, mm, tok, tp, &lo, &err);
    VT_REQUIRE(ck.e, "%s", err.msg);
    vs_eval_opts eo = {.limit = 2};
    vs_eval_result r1, r2;
    VT_REQUIRE(vs_eval_run(test, &eo, checked_answer, &ck, &r1, &err) == VS_OK, "%s", err.msg);
    int64_t pre, reused, dec;
    vs_eval_lm_counters(ck.e, &pre, &reused, &dec);
    VT_CHECK(reused > 0 && r1.total.second_turns > 0, "second turns reused no rows (%lld)",
             (long long)reused);
    VT_CHECK(r1.total.answer_tokens <= (int64_t)ck.max_tokens * r1.total.turns, "answer tokens");
    printf("greedy answerer: %d answers match the from-scratch loop (%d mismatches); prefilled %lld rows, "
           "reused "
           "%lld, decoded %lld\n",
           ck.answers, ck.mismatches, (long long)pre, (long long)reused, (long long)dec);
    vs_eval_lm_free(ck.e);
    /* without reuse: the same answers */
    lo.no_reuse = true;
    ck.e = vs_eval_lm_new(lm, mm, tok, tp, &lo, &err);
    VT_REQUIRE(ck.e, "%s", err.msg);
    VT_REQUIRE(vs_eval_run(test, &eo, vs_eval_lm_answer, ck.e, &r2, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(r1.total.answer_tokens == r2.total.answer_tokens && r1.total.correct == r2.total.correct &&
                 r1.total.no_eos == r2.total.no_eos,
             "reuse changes the results");
    /* sampling (distill.h's answers): each answer equals a from-scratch loop drawing with a sampler of
     * the same settings and seed; setting the same seed again repeats an answer; top-p ~ 0 is greedy */
    int sampled = 0, differs_from_greedy = 0;
    for (int64_t i = 0; i < test->n && sampled < 6; i++) {
        const vs_world_sample *s = &test->samples[i];
        if (s->turns[0].n_images > 1) continue;
        char *prompt = vs_eval_prompt(s, 0, NULL), *a1 = NULL, *a2 = NULL, *a3 = NULL;
        int64_t n1 = 0, n2 = 0, n3 = 0;
        bool eos;
        vs_sampler_params sp = vs_sampler_params_default();
        sp.temperature = 1.3f, sp.top_p = 0.95f, sp.seed = 100 + (uint64_t)i;
        VT_REQUIRE(vs_eval_lm_set_sampling(ck.e, sp.temperature, sp.top_p, sp.seed, &err) == VS_OK, "%s",
                   err.msg);
        VT_REQUIRE(vs_eval_lm_answer(ck.e, s, prompt, s->turns[0].n_images, &a1, &n1, &eos, &err) == VS_OK,
                   "%s", err.msg);
        int32_t got[64], want[64];
        int64_t ng = 0;
        const int32_t *last = vs_eval_lm_last_tokens(ck.e, &ng);
        VT_REQUIRE(ng <= 64, "answer of %lld tokens", (long long)ng);
        memcpy(got, last, sizeof(int32_t) * (size_t)ng);
        ck.smp = vs_sampler_new(vs_tokenizer_n_vocab(tok), &sp, &err);
        VT_REQUIRE(ck.smp, "%s", err.msg);
        int64_t nw = reference_greedy(&ck, s, prompt, s->turns[0].n_images, want);
        vs_sampler_free(ck.smp);
        ck.smp = NULL;
        VT_CHECK(ng == nw && !memcmp(got, want, sizeof(int32_t) * (size_t)ng),
                 "%s: sampled answer differs from the reference sampler loop", s->id);
        VT_REQUIRE(vs_eval_lm_set_sampling(ck.e, sp.temperature, sp.top_p, sp.seed, &err) == VS_OK, "%s",
                   err.msg);
        VT_REQUIRE(vs_eval_lm_answer(ck.e, s, prompt, s->turns[0].n_images, &a2, &n2, &eos, &err) == VS_OK,
                   "%s", err.msg);
        VT_CHECK(n1 == n2 && !strcmp(a1, a2), "%s: the same seed gives another answer", s->id);
        /* the next answer before another set_sampling draws from its own stream: seed + golden ratio */
        char *a4 = NULL;
        int64_t n4 = 0;
        VT_REQUIRE(vs_eval_lm_answer(ck.e, s, prompt, s->turns[0].n_images, &a4, &n4, &eos, &err) == VS_OK,
                   "%s", err.msg);
        const int32_t *g4 = vs_eval_lm_last_tokens(ck.e, &ng);
        VT_REQUIRE(ng <= 64, "answer of %lld tokens", (long long)ng);
        memcpy(got, g4, sizeof(int32_t) * (size_t)ng);
        sp.seed += 0x9e3779b97f4a7c15ull;
        ck.smp = vs_sampler_new(vs_tokenizer_n_vocab(tok), &sp, &err);
        VT_REQUIRE(ck.smp, "%s", err.msg);
        nw = reference_greedy(&ck, s, prompt, s->turns[0].n_images, want);
        vs_sampler_free(ck.smp);
        ck.smp = NULL;
        VT_CHECK(ng == nw && !memcmp(got, want, sizeof(int32_t) * (size_t)ng),
                 "%s: the second answer after set_sampling is not seed + k * golden", s->id);
        vs_free(a4);
        VT_REQUIRE(vs_eval_lm_set_sampling(ck.e, 1.0f, 1e-7f, 1, &err) == VS_OK, "%s", err.msg);
        VT_REQUIRE(vs_eval_lm_answer(ck.e, s, prompt, s->turns[0].n_images, &a3, &n3, &eos, &err) == VS_OK,
                   "%s", err.msg);
        int64_t nr = reference_greedy(&ck, s, prompt, s->turns[0].n_images, want);
        const int32_t *g3 = vs_eval_lm_last_tokens(ck.e, &ng);
        VT_CHECK(ng == nr && !memcmp(g3, want, sizeof(int32_t) * (size_t)ng), "%s: top-p ~0 is not greedy",
                 s->id);
        differs_from_greedy += n1 != nr || memcmp(got, want, sizeof(int32_t) * (size_t)VS_MIN(n1, nr));
        VT_REQUIRE(vs_eval_lm_set_sampling(ck.e, 0, 1, 0, &err) == VS_OK, "%s", err.msg);
        vs_free(prompt), vs_free(a1), vs_free(a2), vs_free(a3);
        sampled++;
    }
    VT_CHECK(sampled == 6 && differs_from_greedy > 0, "sampling: %d answers, %d differ from greedy", sampled,
             differs_from_greedy);
    VT_CHECK(vs_eval_lm_set_sampling(ck.e, -1, 1, 0, &err) == VS_ERR_INVALID &&
                 vs_eval_lm_set_sampling(ck.e, 1, 1.5f, 0, &err) == VS_ERR_INVALID,
             "bad sampling settings accepted");
    printf("sampling answerer: %d answers equal a reference sampler loop (%d differ from greedy)\n", sampled,
           differs_from_greedy);
    vs_eval_lm_free(ck.e);
    /* a projector of another width is refused */
    vs_lm_random_opts ro = {.n_embd = 48,
                            .n_layer = 1,
                            .n_head = 2,
                            .n_head_kv = 2,
                            .n_ff = 16,
                            .n_ctx = 64,
                            .type = VS_TYPE_F32,
                            .tok_from = NULL,
                            .n_vocab = vs_tokenizer_n_vocab(tok),
                            .seed = 1};
    char other[600];
    snprintf(other, sizeof(other), "%s/other_lm.gguf", vt_tmpdir());
    VT_REQUIRE(vs_lm_write_random(&ro, other, &err) == VS_OK, "%s", err.msg);
    vs_lm *lm2 = vs_lm_load(other, &err);
    VT_REQUIRE(lm2, "%s", err.msg);
    VT_CHECK(vs_eval_lm_new(lm2, mm, tok, tp, &lo, &err) == NULL && strstr(err.msg, "width"),
             "width mismatch: %s", err.msg);
    vs_lm_free(lm2);
    vs_mmproj_free(mm);
    vs_lm_free(lm);
    vs_threadpool_free(tp);
}

/* ---------------------------------------------------------------------------------------------- */
/* 3. the CLI: train target (exact resume) and eval */

static bool same_file(const char *a, const char *b) {
    uint8_t *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    bool same = vs_read_file(a, &x, &nx, NULL) == VS_OK && vs_read_file(b, &y, &ny, NULL) == VS_OK &&
                nx == ny && !memcmp(x, y, nx);
    vs_free(x), vs_free(y);
    return same;
}

/* Runs `train target` once per row of runs ({name, flags}): the world dir and tokenizer, --out tmp/NAME,
 * the common flags, then the row's (a flag given twice takes the later value), the log in tmp/NAME.log;
 * each must exit 0. */
static void train_runs(const char *cli, const char *dir, const char *tok, const char *tmp, const char *common,
                       const char *const (*runs)[2], int n) {
    for (int i = 0; i < n; i++) {
        int rc = vt_run("%s train target --data %s --tokenizer %s --out %s/%s %s %s > %s/%s.log 2>&1", cli, dir,
                        tok, tmp, runs[i][0], common, runs[i][1], tmp, runs[i][0]);
        VT_CHECK(rc == 0, "train target %s: exit %d (%s/%s.log)", runs[i][1], rc, tmp, runs[i][0]);
    }
}

/* Whether file (e.g. "target-f32.gguf") is the same in the run directories tmp/run_a and tmp/run_b. */
static bool same_in_runs(const char *tmp, const char *run_a, const char *run_b, const char *file) {
    char a[700], b[700];
    snprintf(a, sizeof(a), "%s/%s/%s", tmp, run_a, file);
    snprintf(b, sizeof(b), "%s/%s/%s", tmp, run_b, file);
    return same_file(a, b);
}

/* --grow: the straight run's checkpoint (LM 2 x 32) grown into 4 x 64 with no noise and trained one step
 * at rate 0 computes the same logits through the inference engine; the wrong shape, --grow with --init
 * and --grow-noise alone are refused. */
static void test_cli_grow(const char *cli, const char *dir, const char *tok, const char *tmp, const char *tiny) {
    const char *twice =
        "--patch 16 --v-width 16 --v-ffn 32 --v-heads 2 --v-blocks 1 --width 64 --layers 4 "
        "--heads 8 --kv-heads 4 --ffn 128 --batch 3 --accum 2 --warmup 2 --threads 1 -q";
    int rc = vt_run("%s train target --data %s --tokenizer %s --out %s/grown --steps 1 --lr 0 --f32 %s --grow "
                    "%s/straight/ckpt/ckpt.gguf --grow-noise 0 > %s/grown.log 2>&1",
                    cli, dir, tok, tmp, twice, tmp, tmp);
    VT_CHECK(rc == 0, "train target --grow exit %d", rc);
    const char *prompt = "Describe the picture. There is a red circle in the top left";
    rc = vt_run("%s logits -m %s/straight/target-f32.gguf -p '%s' --gen 3 -t 1 -o %s/lg-small > /dev/null 2>&1 && "
                "%s logits -m %s/grown/target-f32.gguf -p '%s' --gen 3 -t 1 -o %s/lg-grown > /dev/null 2>&1",
                cli, tmp, prompt, tmp, cli, tmp, prompt, tmp);
    VT_CHECK(rc == 0, "logits of the small and the grown LM: exit %d", rc);
    char a[1024], b[1024];
    snprintf(a, sizeof(a), "%s/lg-small.f32", tmp);
    snprintf(b, sizeof(b), "%s/lg-grown.f32", tmp);
    uint8_t *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    if (vs_read_file(a, &x, &nx, NULL) == VS_OK && vs_read_file(b, &y, &ny, NULL) == VS_OK && nx == ny && nx > 0) {
        const float *fx = (const float *)x, *fy = (const float *)y;
        double d = 0, m = 0;
        for (size_t i = 0; i < nx / sizeof(float); i++) {
            d = fmax(d, fabs((double)fx[i] - fy[i]));
            m = fmax(m, fabs((double)fx[i]));
        }
        printf("train target --grow (2 x 32 -> 4 x 64, noise 0): logits through the engine differ by %.2e "
               "(max |logit| %.2f, %zu values)\n", d, m, nx / sizeof(float));
        VT_CHECK(m > 0.01 && d <= 1e-4 * fmax(1.0, m), "grown LM's logits differ by %.3e", d);
    } else {
        VT_CHECK(false, "logits files %s / %s missing or of different sizes (%zu, %zu)", a, b, nx, ny);
    }
    vs_free(x), vs_free(y);
    /* refused: a checkpoint of another shape (the small run into its own shape), --grow with --init,
     * --grow-noise alone */
    rc = vt_run("%s train target --data %s --tokenizer %s --out %s/grown-bad --steps 1 %s --grow "
                "%s/straight/ckpt/ckpt.gguf > %s/grown-bad.log 2>&1",
                cli, dir, tok, tmp, tiny, tmp, tmp);
    VT_CHECK(rc == 1, "--grow from a checkpoint of the run's own shape: exit %d", rc);
    VT_CHECK(vt_run("grep -q 'its model has LM width 32, growing into this model needs 16' %s/grown-bad.log", tmp) == 0,
             "--grow from a checkpoint of the run's own shape: no message naming the LM width in %s/grown-bad.log", tmp);
    rc = vt_run("%s train target --data %s --tokenizer %s --out %s/grown-bad2 --steps 1 %s --grow %s/x.gguf "
                "--init %s/x.gguf > /dev/null 2>&1",
                cli, dir, tok, tmp, twice, tmp, tmp);
    VT_CHECK(rc == 2, "--grow with --init: exit %d", rc);
    rc = vt_run("%s train target --data %s --tokenizer %s --out %s/grown-bad3 --steps 1 %s --grow-noise 0.1 "
                "> /dev/null 2>&1",
                cli, dir, tok, tmp, twice);
    VT_CHECK(rc == 2, "--grow-noise without --grow: exit %d", rc);
}

/* train target --ground: a short run counts its grounded rows and records the setting (a resume must
 * repeat it); --ground-rows answer grounds more rows; --ground-grad qk and lm keep the term out of the
 * projector and tower; --ground-layer, --ground-rows or --ground-grad alone, an unknown --ground-rows or
 * --ground-grad, --ground with every picture in words and a layer outside the LM are refused. */
static void test_cli_ground(const char *cli, const char *dir, const char *tok, const char *tmp, const char *tiny) {
    int rc = vt_run("%s train target --data %s --tokenizer %s --out %s/ground --steps 2 %s --ground 0.5 --ground-layer 1 "
                    "> %s/ground.log 2>&1",
                    cli, dir, tok, tmp, tiny, tmp);
    VT_CHECK(rc == 0, "train target --ground exit %d (%s/ground.log)", rc, tmp);
    VT_CHECK(vt_run("grep -Eq '^  [1-9][0-9]* rows with an attention ground' %s/ground.log && "
                    "grep -q '\"ground\":0.5,\"ground_layer\":1' %s/ground/run.json", tmp, tmp) == 0,
             "--ground: no grounded turns counted in %s/ground.log or no setting in run.json", tmp);
    rc = vt_run("%s train target --data %s --tokenizer %s --out %s/ground --steps 2 %s --resume > /dev/null 2>&1", cli,
                dir, tok, tmp, tiny);
    VT_CHECK(rc != 0, "a resume without --ground of a grounded run: exit %d", rc);
    /* usage errors: exit 2 */
    static const char *const refused[] = {"--ground-layer 1",      "--ground 1 --images-as-text",
                                          "--ground 1 --ground-rows all", "--ground-rows answer",
                                          "--ground 1 --ground-grad kq",  "--ground-grad qk"};
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        rc = vt_run("%s train target --data %s --tokenizer %s --out %s/ground-bad --steps 1 %s %s > /dev/null 2>&1", cli,
                    dir, tok, tmp, tiny, refused[i]);
        VT_CHECK(rc == 2, "train target %s: exit %d", refused[i], rc);
    }
    rc = vt_run("%s train target --data %s --tokenizer %s --out %s/ground-bad --steps 1 %s --ground 1 --ground-layer 2 "
                "> %s/ground-bad.log 2>&1", cli, dir, tok, tmp, tiny, tmp);
    VT_CHECK(rc == 1 && vt_run("grep -q 'ground-layer 2: the LM has layers 0 .. 1' %s/ground-bad.log", tmp) == 0,
             "--ground-layer 2 of a 2-layer LM: exit %d, see %s/ground-bad.log", rc, tmp);
    /* every answer row: more grounded rows than the first rows alone, the setting in run.json */
    rc = vt_run("%s train target --data %s --tokenizer %s --out %s/ground-ans --steps 2 %s --ground 0.5 --ground-rows "
                "answer > %s/ground-ans.log 2>&1",
                cli, dir, tok, tmp, tiny, tmp);
    VT_CHECK(rc == 0 && vt_run("grep -q '\"ground_rows\":\"answer\"' %s/ground-ans/run.json", tmp) == 0 &&
                 vt_run("test $(grep -Eo '^  [0-9]+ rows with an attention ground' %s/ground-ans.log | grep -Eo '[0-9]+') "
                        "-gt $(grep -Eo '^  [0-9]+ rows with an attention ground' %s/ground.log | grep -Eo '[0-9]+')",
                        tmp, tmp) == 0,
             "--ground-rows answer: exit %d, or no more grounded rows than the first rows (%s/ground-ans.log)", rc, tmp);
    /* --ground-grad qk and lm: after one unclipped step the projector and tower are those of a run without
     * the term (their gradient is the LM loss's alone), the LM is not; with the full gradient they differ */
    static const char *const qk_runs[4][2] = {{"g-none", ""},
                                              {"g-qk", "--ground 0.5 --ground-grad qk"},
                                              {"g-all", "--ground 0.5 --ground-grad all"},
                                              {"g-lm", "--ground 0.5 --ground-grad lm"}};
    char common[600];
    snprintf(common, sizeof(common), "--steps 1 --f32 %s --clip 0", tiny);
    train_runs(cli, dir, tok, tmp, common, qk_runs, 4);
    const char *mm = "target-mmproj-f32.gguf", *lm = "target-f32.gguf";
    VT_CHECK(same_in_runs(tmp, "g-none", "g-qk", mm), "--ground-grad qk: the projector or tower learned from the term");
    VT_CHECK(same_in_runs(tmp, "g-none", "g-lm", mm), "--ground-grad lm: the projector or tower learned from the term");
    VT_CHECK(!same_in_runs(tmp, "g-none", "g-all", mm), "--ground-grad all: the projector did not learn from the term");
    VT_CHECK(!same_in_runs(tmp, "g-none", "g-qk", lm), "--ground-grad qk: the LM did not learn from the term");
    VT_CHECK(!same_in_runs(tmp, "g-none", "g-lm", lm), "--ground-grad lm: the LM did not learn from the term");
    VT_CHECK(vt_run("grep -q '\"ground_grad\":\"qk\"' %s/g-qk/run.json", tmp) == 0 &&
                 vt_run("grep -q '\"ground_grad\":\"lm\"' %s/g-lm/run.json", tmp) == 0 &&
                 vt_run("grep -q 'ground_grad' %s/g-all/run.json", tmp) != 0,
             "--ground-grad qk is not recorded in run.json (or 'all', the default, is)");
}

static void test_cli(const char *dir, const char *tok) {
    const char *cli = vt_cli();
    if (!cli || access(cli, X_OK) != 0) {
        printf("SKIP CLI checks: no vlmspec binary ($VLMSPEC_BIN)\n");
        return;
    }
    const char *tiny =
        "--patch 16 --v-width 16 --v-ffn 32 --v-heads 2 --v-blocks 1 --width 32 --layers 2 "
        "--heads 4 --kv-heads 2 --ffn 64 --batch 3 --accum 2 --warmup 2 --lr 3e-3 --threads 1 -q";
    const char *tmp = vt_tmpdir();
    test_cli_rows(cli, dir, tok, tmp);
    test_cli_ground(cli, dir, tok, tmp, tiny);
    int rc = vt_run(
        "%s train target --data %s --tokenizer %s --out %s/straight --steps 4 --f32 %s > %s/straight.log",
        cli, dir, tok, tmp, tiny, tmp);
    VT_CHECK(rc == 0, "train target (straight) exit %d", rc);
    rc =
        vt_run("%s train target --data %s --tokenizer %s --out %s/chunked --steps 4 --f32 --chunk-steps 2 %s "
               "> %s/chunk1.log",
               cli, dir, tok, tmp, tiny, tmp);
    VT_CHECK(rc == 0, "train target (chunk 1) exit %d", rc);
    char path[1024], p2[1024];
    snprintf(path, sizeof(path), "%s/chunked/target.gguf", tmp);
    VT_CHECK(access(path, F_OK) != 0, "a stopped run exported the model");
    /* other settings are refused on resume */
    rc = vt_run(
        "%s train target --data %s --tokenizer %s --out %s/chunked --steps 4 --f32 %s --lr 1e-3 --resume "
        "> %s/bad.log 2>&1",
        cli, dir, tok, tmp, tiny, tmp);
    VT_CHECK(rc == 1, "resume with another --lr: exit %d", rc);
    rc = vt_run("%s train target --data %s --tokenizer %s --out %s/chunked --steps 4 --f32 %s --resume > "
                "%s/chunk2.log",
                cli, dir, tok, tmp, tiny, tmp);
    VT_CHECK(rc == 0, "train target (resume) exit %d", rc);
    const char *files[] = {"target-f32.gguf", "target-mmproj-f32.gguf", "target.gguf", "target-mmproj.gguf",
                           "loss.csv"};
    for (size_t i = 0; i < VS_ARRAY_LEN(files); i++) {
        snprintf(path, sizeof(path), "%s/straight/%s", tmp, files[i]);
        snprintf(p2, sizeof(p2), "%s/chunked/%s", tmp, files[i]);
        bool same = same_file(path, p2);
        if (!strcmp(files[i], "loss.csv")) {
            /* time columns differ: compare step, loss, lr, tokens */
            same = true;
            FILE *a = fopen(path, "r"), *b = fopen(p2, "r");
            char la[256], lb[256];
            int lines = 0;
            while (a && b && fgets(la, sizeof(la), a)) {
                if (!fgets(lb, sizeof(lb), b)) {
                    same = false;
                    break;
                }
                char *ca = strrchr(la, ','), *cb = strrchr(lb, ',');
                if (ca) *ca = 0;
                if (cb) *cb = 0;
                same &= !strcmp(la, lb);
                lines++;
            }
            same &= lines == 5 && !(b && fgets(lb, sizeof(lb), b));
            if (a) fclose(a);
            if (b) fclose(b);
        }
        VT_CHECK(same, "%s differs between the straight and the resumed run", files[i]);
    }
    printf("train target: 4 steps straight == 2 steps + --resume 2 steps (exports byte-identical, same "
           "curve)\n");
    test_cli_grow(cli, dir, tok, tmp, tiny);
    /* --freeze-vision N: the tower keeps its initial weights for N steps (the checkpoint kept at step N
     * and a run frozen throughout have the same tower), then trains; without it the tower trains */
    /* --vision-warmup 2 after --freeze-vision 2: the tower trains at half the rate on step 2;
     * --vision-lr 0 keeps it where it was frozen (no update, no weight decay), 0.5 trains it more slowly */
    static const char *const fz_runs[5][2] = {{"fz2", "--freeze-vision 2"},
                                              {"fz4", "--freeze-vision 4"},
                                              {"fz2w", "--freeze-vision 2 --vision-warmup 2"},
                                              {"fz2z", "--freeze-vision 2 --vision-lr 0"},
                                              {"fz2h", "--freeze-vision 2 --vision-lr 0.5"}};
    char common[600];
    snprintf(common, sizeof(common), "--steps 4 --f32 %s", tiny);
    train_runs(cli, dir, tok, tmp, common, fz_runs, 5);
    rc = vt_run("%s train export --ckpt %s/fz2/ckpt-vision-frozen.gguf --tokenizer %s --lm %s/fz2k.gguf "
                "--mmproj %s/fz2km.gguf --type f32 > /dev/null",
                cli, tmp, tok, tmp, tmp);
    VT_CHECK(rc == 0, "export of the kept frozen-tower checkpoint: exit %d", rc);
    {
        const char *mm[7] = {"fz2km.gguf",
                             "fz4/target-mmproj-f32.gguf",
                             "fz2/target-mmproj-f32.gguf",
                             "straight/target-mmproj-f32.gguf",
                             "fz2w/target-mmproj-f32.gguf",
                             "fz2z/target-mmproj-f32.gguf",
                             "fz2h/target-mmproj-f32.gguf"};
        uint64_t h[7] = {0};
        for (int i = 0; i < 7; i++) {
            snprintf(path, sizeof(path), "%s/%s", tmp, mm[i]);
            vs_error e = {0};
            vs_mmproj *m = vs_mmproj_open(path, &e);
            VT_CHECK(m != NULL, "%s: %s", path, e.msg);
            if (m) h[i] = vs_vision_tower_hash(vs_mmproj_tower(m)), vs_mmproj_free(m);
        }
        VT_CHECK(h[0] == h[1], "the tower at the end of --freeze-vision 2 differs from a run frozen throughout");
        VT_CHECK(h[2] != h[0], "the tower did not train after --freeze-vision 2 ended");
        VT_CHECK(h[3] != h[0], "without --freeze-vision the tower kept its initial weights");
        VT_CHECK(h[4] != h[0] && h[4] != h[2], "--vision-warmup 2: the tower did not train, or trained as without it");
        VT_CHECK(h[5] == h[0], "--vision-lr 0: the tower changed after the freeze");
        VT_CHECK(h[6] != h[0] && h[6] != h[2] && h[6] != h[4],
                 "--vision-lr 0.5: the tower did not train, or trained as at the full rate or with the warm-up");
        printf("train target --freeze-vision: tower unchanged while frozen, trained after (differently with "
               "--vision-warmup or --vision-lr 0.5, not at all with --vision-lr 0)\n");
    }
    /* --freeze-lm N: the LM keeps its initial weights for N steps (the LM file of a run frozen throughout
     * equals that of a run at learning rate 0) while the projector and tower train, then it trains;
     * --freeze-projector N likewise for the projector (with the tower frozen too, the whole mmproj file
     * equals the learning-rate-0 run's while the LM trains) */
    {
        static const char *const lm_runs[5][2] = {{"lr0", "--lr 0 --lr-min 0"},
                                                  {"flm4", "--freeze-lm 4"},
                                                  {"flm2", "--freeze-lm 2"},
                                                  {"fpj4", "--freeze-projector 4 --freeze-vision 4"},
                                                  {"fpj2", "--freeze-projector 2 --freeze-vision 4"}};
        train_runs(cli, dir, tok, tmp, common, lm_runs, 5); /* lr0's --lr overrides the tiny model's */
        const char *lm = "target-f32.gguf", *mm = "target-mmproj-f32.gguf";
        VT_CHECK(same_in_runs(tmp, "lr0", "flm4", lm), "--freeze-lm 4: the LM changed while frozen");
        VT_CHECK(!same_in_runs(tmp, "lr0", "flm2", lm), "--freeze-lm 2: the LM did not train after the freeze");
        VT_CHECK(!same_in_runs(tmp, "lr0", "fpj4", lm), "--freeze-projector 4: the LM did not train");
        VT_CHECK(!same_in_runs(tmp, "lr0", "flm4", mm), "--freeze-lm 4: the projector and tower did not train");
        VT_CHECK(same_in_runs(tmp, "lr0", "fpj4", mm),
                 "--freeze-projector 4 --freeze-vision 4: the projector or tower changed");
        VT_CHECK(!same_in_runs(tmp, "lr0", "fpj2", mm),
                 "--freeze-projector 2: the projector did not train after the freeze");
        snprintf(path, sizeof(path), "%s/flm4/run.json", tmp);
        VT_CHECK(vt_file_has(path, "\"freeze_lm\":4"), "--freeze-lm is not in %s", path);
        snprintf(path, sizeof(path), "%s/fpj2/run.json", tmp);
        VT_CHECK(vt_file_has(path, "\"freeze_projector\":2"), "--freeze-projector is not in %s", path);
        printf("train target --freeze-lm, --freeze-projector: the LM (projector) unchanged while frozen (its "
               "file equals a learning-rate-0 run's), trained after; the other parts train meanwhile\n");
    }
    /* --prompt-loss W: prompt text rows join the loss (the LM trains differently, the stats line counts
     * them, run.json records W); a negative weight is refused */
    {
        static const char *const pl_runs[2][2] = {{"pl0", ""}, {"pl1", "--prompt-loss 1"}};
        char pl_common[600];
        snprintf(pl_common, sizeof(pl_common), "--steps 2 --f32 %s", tiny);
        train_runs(cli, dir, tok, tmp, pl_common, pl_runs, 2);
        char a0[700], a1[700];
        snprintf(a0, sizeof(a0), "%s/pl0/target-f32.gguf", tmp);
        snprintf(a1, sizeof(a1), "%s/pl1/target-f32.gguf", tmp);
        VT_CHECK(!same_file(a0, a1), "--prompt-loss 1: the LM trained as without it");
        snprintf(path, sizeof(path), "%s/pl1/run.json", tmp);
        VT_CHECK(vt_file_has(path, "\"prompt_loss\":1"), "--prompt-loss is not in %s", path);
        snprintf(path, sizeof(path), "%s/pl1.log", tmp);
        VT_CHECK(vt_file_has(path, "prompt text rows at weight 1"), "%s does not count the prompt rows", path);
        snprintf(path, sizeof(path), "%s/pl0/run.json", tmp);
        VT_CHECK(!vt_file_has(path, "prompt_loss"), "%s names a prompt loss it does not use", path);
        rc = vt_run("%s train target --data %s --tokenizer %s --out %s/plbad --steps 1 %s --prompt-loss -1 > "
                    "%s/plbad.log 2>&1",
                    cli, dir, tok, tmp, tiny, tmp);
        VT_CHECK(rc == 2, "--prompt-loss -1: exit %d, want 2", rc);
        printf("train target --prompt-loss: trains the LM differently, counted in the stats and run.json; "
               "-1 refused\n");
        /* --images-as-text: the same samples with every picture in words: no images in the stats, another LM,
         * recorded in run.json */
        rc = vt_run("%s train target --data %s --tokenizer %s --out %s/pw --steps 2 --f32 %s --images-as-text > %s/pw.log 2>&1",
                    cli, dir, tok, tmp, tiny, tmp);
        VT_CHECK(rc == 0, "train target --images-as-text exit %d", rc);
        snprintf(a1, sizeof(a1), "%s/pw/target-f32.gguf", tmp);
        VT_CHECK(!same_file(a0, a1), "--images-as-text: the LM trained as with the pictures");
        snprintf(path, sizeof(path), "%s/pw.log", tmp);
        VT_CHECK(vt_file_has(path, " 0 images,"), "%s counts images in words", path);
        snprintf(path, sizeof(path), "%s/pw/run.json", tmp);
        VT_CHECK(vt_file_has(path, "\"images_as_text\":true"), "--images-as-text is not in %s", path);
        printf("train target --images-as-text: no images, another LM, in run.json\n");
        /* --words-frac: part of the pictures in words, counted, in run.json; with --images-as-text or out of
         * range refused */
        rc = vt_run("%s train target --data %s --tokenizer %s --out %s/pwf --steps 1 %s --words-frac 0.5 > "
                    "%s/pwf.log 2>&1",
                    cli, dir, tok, tmp, tiny, tmp);
        VT_CHECK(rc == 0, "train target --words-frac 0.5 exit %d", rc);
        snprintf(path, sizeof(path), "%s/pwf.log", tmp);
        VT_CHECK(vt_file_has(path, "samples with their pictures in words"), "%s does not count the samples in words",
                 path);
        snprintf(path, sizeof(path), "%s/pwf/run.json", tmp);
        VT_CHECK(vt_file_has(path, "\"words_frac\":0.5"), "--words-frac is not in %s", path);
        rc = vt_run("%s train target --data %s --tokenizer %s --out %s/pwf2 --steps 1 %s --words-frac 0.5 --images-as-text "
                    "> %s/pwf2.log 2>&1",
                    cli, dir, tok, tmp, tiny, tmp);
        VT_CHECK(rc == 2, "--words-frac with --images-as-text: exit %d, want 2", rc);
        rc = vt_run("%s train target --data %s --tokenizer %s --out %s/pwf3 --steps 1 %s --words-frac 1.5 > %s/pwf3.log 2>&1",
                    cli, dir, tok, tmp, tiny, tmp);
        VT_CHECK(rc == 2, "--words-frac 1.5: exit %d, want 2", rc);
        printf("train target --words-frac: counted, in run.json; with --images-as-text or 1.5 refused\n");
    }
    /* --init: the straight run's final weights start a new run (zeroed moments, its own schedule); one step
     * + --resume one step equals two straight steps; the init is part of run.json; a checkpoint of another
     * model is refused with the mismatch named */
    {
        static const char *const init_runs[3][2] = {
            {"init2", "--steps 2"}, {"init1", "--steps 2 --chunk-steps 1"}, {"init1", "--steps 2 --resume"}};
        for (int i = 0; i < 3; i++) {
            rc = vt_run("%s train target --data %s --tokenizer %s --out %s/%s --f32 --init "
                        "%s/straight/ckpt/ckpt.gguf %s %s > %s/%s-%d.log 2>&1",
                        cli, dir, tok, tmp, init_runs[i][0], tmp, init_runs[i][1], tiny, tmp, init_runs[i][0],
                        i);
            VT_CHECK(rc == 0, "train target --init %s exit %d", init_runs[i][1], rc);
        }
        snprintf(path, sizeof(path), "%s/init2/target-f32.gguf", tmp);
        snprintf(p2, sizeof(p2), "%s/init1/target-f32.gguf", tmp);
        VT_CHECK(same_file(path, p2), "--init: 1 step + --resume 1 step differs from 2 straight steps");
        snprintf(p2, sizeof(p2), "%s/straight/target-f32.gguf", tmp);
        VT_CHECK(!same_file(path, p2), "--init: the 2 new steps left the weights as they were");
        /* the AdamW update count restarted: 2 after the 2 new steps, not 4 + 2 */
        rc = vt_run("%s gguf %s/init2/ckpt/ckpt.gguf | grep -q 'train.adam_t .* 2$'", cli, tmp);
        VT_CHECK(rc == 0, "--init: the checkpoint's train.adam_t is not 2 (the moments did not restart)");
        snprintf(path, sizeof(path), "%s/init2/run.json", tmp);
        VT_CHECK(vt_file_has(path, "\"init\":"), "--init is not in %s", path);
        rc = vt_run("%s train target --data %s --tokenizer %s --out %s/initbad --steps 2 --init "
                    "%s/straight/ckpt/ckpt.gguf %s --width 48 > %s/initbad.log 2>&1",
                    cli, dir, tok, tmp, tmp, tiny, tmp);
        snprintf(path, sizeof(path), "%s/initbad.log", tmp);
        VT_CHECK(rc != 0 && vt_file_has(path, "LM width 32, the flags say 48"),
                 "--init with another model: exit %d, or no clear message in %s", rc, path);
        printf("train target --init: resumable (1 + 1 steps == 2), recorded in run.json, another model "
               "refused\n");
    }
    /* --vision-init: a fresh run starts from another mmproj's tower (kept while frozen), recorded in
     * run.json; a tower of another shape is refused naming both; --init and --vision-init together are a
     * usage error */
    {
        rc = vt_run("%s train target --data %s --tokenizer %s --out %s/vinit --steps 1 --freeze-vision 1 --f32 "
                    "--vision-init %s/straight/target-mmproj-f32.gguf %s > %s/vinit.log 2>&1",
                    cli, dir, tok, tmp, tmp, tiny, tmp);
        VT_CHECK(rc == 0, "train target --vision-init exit %d", rc);
        uint64_t hv[3] = {0};
        const char *mm[3] = {"vinit/target-mmproj-f32.gguf", "straight/target-mmproj-f32.gguf", "fz2km.gguf"};
        for (int i = 0; i < 3; i++) {
            snprintf(path, sizeof(path), "%s/%s", tmp, mm[i]);
            vs_error e = {0};
            vs_mmproj *m = vs_mmproj_open(path, &e);
            VT_CHECK(m != NULL, "%s: %s", path, e.msg);
            if (m) hv[i] = vs_vision_tower_hash(vs_mmproj_tower(m)), vs_mmproj_free(m);
        }
        VT_CHECK(hv[0] == hv[1] && hv[0] != hv[2], "--vision-init: the tower is not the given mmproj's");
        snprintf(path, sizeof(path), "%s/vinit/run.json", tmp);
        VT_CHECK(vt_file_has(path, "\"vision_init\":"), "--vision-init is not in %s", path);
        rc = vt_run("%s train target --data %s --tokenizer %s --out %s/vinitbad --steps 1 --vision-init "
                    "models/target-mmproj.gguf %s > %s/vinitbad.log 2>&1",
                    cli, dir, tok, tmp, tiny, tmp);
        snprintf(path, sizeof(path), "%s/vinitbad.log", tmp);
        VT_CHECK(rc == 1 && vt_file_has(path, "differs from the model's"),
                 "--vision-init with another tower: exit %d, or no clear message in %s", rc, path);
        /* with --init: the checkpoint's weights, then the given tower in place of the checkpoint's */
        rc = vt_run("%s train target --data %s --tokenizer %s --out %s/vinit2 --steps 1 --freeze-vision 1 --f32 "
                    "--init %s/straight/ckpt/ckpt.gguf --vision-init %s/fz2km.gguf %s > %s/vinit2.log 2>&1",
                    cli, dir, tok, tmp, tmp, tmp, tiny, tmp);
        VT_CHECK(rc == 0, "train target --init --vision-init exit %d", rc);
        snprintf(path, sizeof(path), "%s/vinit2/target-mmproj-f32.gguf", tmp);
        vs_error e2 = {0};
        vs_mmproj *m2 = vs_mmproj_open(path, &e2);
        VT_CHECK(m2 && vs_vision_tower_hash(vs_mmproj_tower(m2)) == hv[2],
                 "--init with --vision-init: the tower is not the given mmproj's");
        vs_mmproj_free(m2);
        printf("train target --vision-init: the given tower (also over --init), recorded in run.json, another "
               "shape refused\n");
    }
    /* train export of the final checkpoint writes the same files as the end of training */
    rc = vt_run(
        "%s train export --ckpt %s/chunked/ckpt/ckpt.gguf --tokenizer %s --lm %s/x.gguf --mmproj %s/xm.gguf "
        "--type f32 > /dev/null",
        cli, tmp, tok, tmp, tmp);
    VT_CHECK(rc == 0, "train export exit %d", rc);
    snprintf(path, sizeof(path), "%s/x.gguf", tmp);
    snprintf(p2, sizeof(p2), "%s/straight/target-f32.gguf", tmp);
    VT_CHECK(same_file(path, p2), "train export differs from the end-of-training export");
    snprintf(path, sizeof(path), "%s/eval.json", tmp);
    rc = vt_run(
        "%s eval --model %s/straight/target.gguf --mmproj %s/straight/target-mmproj.gguf --data %s --limit 1 "
        "--max-tokens 6 --threads 1 -q --json %s --by-question --details %s/eval.details > %s/eval.log 2>&1",
        cli, tmp, tmp, dir, path, tmp, tmp);
    VT_CHECK(rc == 0, "eval exit %d", rc);
    snprintf(p2, sizeof(p2), "%s/eval.log", tmp);
    VT_CHECK(vt_file_has(p2, "question") && vt_file_has(p2, "describe   describe"), "eval --by-question table");
    snprintf(p2, sizeof(p2), "%s/eval.details", tmp);
    VT_CHECK(vt_file_has(p2, "\"question\":\"describe\""), "eval --details names the kind of question");
    uint8_t *js = NULL;
    size_t n = 0;
    vs_error err = {0};
    VT_REQUIRE(vs_read_file(path, &js, &n, &err) == VS_OK, "%s", err.msg);
    vs_json_doc *doc = vs_json_parse((const char *)js, n, path, &err);
    VT_REQUIRE(doc, "%s", err.msg);
    const vs_json *tot = vs_json_get(vs_json_get(vs_json_root(doc), "results"), "total");
    VT_CHECK(vs_json_get_int(tot, "samples", 0) == 8 && vs_json_get_int(tot, "turns", 0) >= 8 &&
                 vs_json_get_num(tot, "mean_answer_tokens", -1) <= 6,
             "eval JSON totals");
    vs_json_doc_free(doc);
    vs_free(js);
    rc = vt_run("%s eval --model %s/straight/target.gguf --data %s > /dev/null 2>&1", cli, tmp, dir);
    VT_CHECK(rc == 2, "eval without --mmproj: exit %d", rc);
    /* a --details, --json or standard-output write that fails is a failed run, not exit 0 */
    if (access("/dev/full", W_OK) == 0) {
        static const char *const outs[] = {"--details /dev/full", "--json /dev/full", "--json - > /dev/full"};
        for (size_t i = 0; i < VS_ARRAY_LEN(outs); i++) {
            rc = vt_run("%s eval --model %s/straight/target.gguf --mmproj %s/straight/target-mmproj.gguf --data %s "
                        "--limit 1 --max-tokens 2 --threads 1 -q %s 2> %s/eval_full.log",
                        cli, tmp, tmp, dir, outs[i], tmp);
            snprintf(path, sizeof(path), "%s/eval_full.log", tmp);
            VT_CHECK(rc == 1 && vt_file_has(path, "No space left on device"), "eval %s: exit %d", outs[i], rc);
        }
    }
}

int main(void) {
    double t0 = vs_time_now();
    char dir[512], tok_path[512];
    wt_make("world", 2, 2, 512, dir, tok_path, sizeof(dir));
    vs_error err = {0};
    vs_world_dataset *test = vs_world_load(dir, "test", VS_WORLD_ALL_SUITES, &err);
    vs_world_dataset *train = vs_world_load(dir, "train", VS_WORLD_ALL_SUITES, &err);
    VT_REQUIRE(test && train, "%s", err.msg);
    vs_tokenizer *tok = vs_tokenizer_load(tok_path, &err);
    VT_REQUIRE(tok, "%s", err.msg);
    test_oracles(test);
    test_ablation(test);
    test_answerer(train, test, tok, tok_path);
    test_cli(dir, tok_path);
    vs_tokenizer_free(tok);
    vs_world_dataset_free(test);
    vs_world_dataset_free(train);
    printf("%.2f s\n", vs_time_now() - t0);
    return vt_finish("eval");
}
