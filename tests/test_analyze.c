/* analyze: the TVD analysis (src/measure/analyze.h) on tiny random-weight models over the tiny world.
 *   1. the target against itself (M view) gives TVD 0 at every position; the positions are exactly
 *      the target's answer tokens (+ end-of-generation), first turns only unless second_turns;
 *   2. against a different random drafter every TVD lies in (0, 1], and on text samples it equals an
 *      independent double-precision computation (tests/lm_testmodel.h's reference forward of both
 *      models over prompt + answer, softmax and TVD in double);
 *   3. views: the target in T view against itself is 0 on text samples and > 0 on image samples; a
 *      drafter's M and T views agree on text samples and differ on image samples; a drafter whose
 *      mmproj carries its own (different) tower is fed by that tower, not the target's;
 *   4. histogram counts sum to the positions (in total and per suite), the statistics equal direct
 *      counts, the report / JSON / SVG are produced;
 *   5. errors: another vocabulary size, a same-size but different vocabulary, a projector of the wrong
 *      width: clear messages;
 *   6. CLI `vlmspec analyze tvd`: runs and writes JSON + SVG; mismatched vocabulary and missing files
 *      exit 1 with a message, usage errors exit 2. */
#include <string.h>
#include <unistd.h>

#include "analyze.h"
#include "lm_testmodel.h"
#include "mmprompt.h"
#include "world_tiny.h"

#define EOS_BOOST 3.0f /* some but not all tiny-world answers of target-eos.gguf end by themselves */

static char D[512], TOK[512];
static vs_tokenizer *tok;
static vs_threadpool *tp;
static vs_world_dataset *test;

static const char *P(const char *name) {
    static char buf[16][600];
    static int k;
    char *p = buf[k++ % 16];
    snprintf(p, 600, "%s/%s", vt_tmpdir(), name);
    return p;
}

/* A random LM with the tiny world's tokenizer (or a synthetic vocabulary of n_vocab when n_vocab > 0). */
static void write_lm(const char *name, int width, uint64_t seed, int n_vocab, int n_ctx) {
    vs_error err = {0};
    vs_gguf *g = vs_gguf_open(TOK, &err);
    VT_REQUIRE(g, "%s", err.msg);
    vs_lm_random_opts o = {.n_embd = width,
                           .n_layer = 2,
                           .n_head = 4,
                           .n_head_kv = 2,
                           .n_ff = 64,
                           .n_ctx = n_ctx,
                           .tok_from = n_vocab > 0 ? NULL : g,
                           .n_vocab = n_vocab,
                           .type = VS_TYPE_F32,
                           .init_std = 0.2f,
                           .seed = seed};
    VT_REQUIRE(vs_lm_write_random(&o, P(name), &err) == VS_OK, "%s: %s", name, err.msg);
    vs_gguf_close(g);
}

/* Scales the end-of-sequence row of a written model's output matrix (F32, untied) by f, so greedy
 * answers end by themselves at some positions. */
static void boost_eos(const char *name, float f) {
    vs_error err = {0};
    vs_gguf *g = vs_gguf_open(P(name), &err);
    VT_REQUIRE(g, "%s", err.msg);
    const vs_gguf_tensor *t = vs_gguf_find_tensor(g, "output.weight");
    VT_REQUIRE(t && t->type == VS_TYPE_F32, "output.weight");
    const int64_t width = t->ne[0], eos = vs_tokenizer_eos(tok);
    const long off = (long)(vs_gguf_data_offset(g) + t->offset + (uint64_t)(eos * width) * 4);
    float *row = malloc(sizeof(float) * (size_t)width);
    memcpy(row, (const float *)t->data + eos * width, sizeof(float) * (size_t)width);
    vs_gguf_close(g);
    for (int64_t i = 0; i < width; i++) row[i] *= f;
    FILE *fp = fopen(P(name), "r+b");
    VT_REQUIRE(fp && fseek(fp, off, SEEK_SET) == 0 &&
                   fwrite(row, sizeof(float), (size_t)width, fp) == (size_t)width && fclose(fp) == 0,
               "patching %s", name);
    free(row);
}

static vs_vision_config mm_config(int proj_out, bool tower) {
    vs_vision_config c;
    vs_vision_config_llava15(&c);
    c.image_size = 64, c.patch_size = 16, c.width = 16, c.ffn = 32, c.n_heads = 2, c.n_blocks = 1;
    c.projection_dim = 16, c.proj_hidden = 32, c.proj_out = proj_out, c.has_tower = tower;
    return c;
}

static void write_mm(const char *name, int proj_out, bool tower, uint64_t seed) {
    vs_error err = {0};
    vs_vision_config c = mm_config(proj_out, tower);
    VT_REQUIRE(vs_mmproj_write_random(P(name), &c, VS_TYPE_F32, seed, &err) == VS_OK, "%s: %s", name,
               err.msg);
}

static vs_lm *load_lm(const char *name) {
    vs_error err = {0};
    vs_lm *lm = vs_lm_load(P(name), &err);
    VT_REQUIRE(lm, "%s", err.msg);
    return lm;
}
static vs_mmproj *load_mm(const char *name) {
    vs_error err = {0};
    vs_mmproj *m = vs_mmproj_open(P(name), &err);
    VT_REQUIRE(m, "%s", err.msg);
    return m;
}

static void run(vs_lm *t, const vs_mmproj *tm, const vs_tvd_drafter *dr, int n, const vs_tvd_opts *o,
                vs_tvd_result *r) {
    vs_error err = {0};
    VT_REQUIRE(vs_tvd_run(t, tm, tok, tp, dr, n, test, o, r, &err) == VS_OK, "%s", err.msg);
    VT_REQUIRE(r->n > 0, "no positions");
}

static bool has_images(const vs_tvd_result *r, int64_t i) {
    return test->samples[r->pos[i].sample].n_images > 0;
}

/* 1. self */
static void test_self(vs_lm *t, const vs_mmproj *tm, bool want_eog) {
    vs_tvd_drafter self = {.name = "self", .lm = t, .mm = tm};
    vs_tvd_opts o = {.limit = 1, .max_tokens = 6};
    vs_tvd_result r;
    run(t, tm, &self, 1, &o, &r);
    double mx = 0;
    for (int64_t i = 0; i < r.n; i++) mx = VS_MAX(mx, r.tvd[0][i]);
    VT_CHECK(mx == 0.0, "target vs itself: max TVD %g", mx);
    const vs_eval_counts *c = &r.eval.total;
    const int64_t eos_first = c->first_turns - (c->no_eos - c->second_turns);
    VT_CHECK(r.n == c->answer_tokens + eos_first, "positions %lld, answer tokens %lld + %lld eos",
             (long long)r.n, (long long)c->answer_tokens, (long long)eos_first);
    VT_CHECK(r.turns == c->first_turns && r.turns == 8, "turns %lld (first turns %lld)", (long long)r.turns,
             (long long)c->first_turns);
    int64_t eog = 0, turn1 = 0;
    for (int64_t i = 0; i < r.n; i++) eog += r.pos[i].eog, turn1 += r.pos[i].turn != 0;
    VT_CHECK(eog == eos_first && turn1 == 0, "eog %lld, second-turn positions %lld", (long long)eog,
             (long long)turn1);
    VT_CHECK(!want_eog || (eog > 0 && eog < r.turns), "answers ending by themselves: %lld of %lld",
             (long long)eog, (long long)r.turns);
    vs_tvd_stats s;
    vs_tvd_stats_of(&r, 0, 0, &s);
    VT_CHECK(s.n == r.n && s.mean == 0 && s.median == 0 && s.frac_low == 1.0 && s.frac_high == 0,
             "self stats");
    vs_tvd_result_free(&r);

    /* second turns: prompted with the target's own first answer, positions of turn 1 appear */
    o.second_turns = true;
    o.limit = 2; /* the second samples of the tiny world's image suites have two turns */
    run(t, tm, &self, 1, &o, &r);
    turn1 = 0;
    for (int64_t i = 0; i < r.n; i++) turn1 += r.pos[i].turn == 1, mx = VS_MAX(mx, r.tvd[0][i]);
    VT_CHECK(turn1 > 0 && r.turns == r.eval.total.turns && mx == 0.0, "second turns: %lld positions, max %g",
             (long long)turn1, mx);
    printf("self: %lld positions (%lld end-of-generation), TVD 0 everywhere; with second turns %lld turns\n",
           (long long)s.n, (long long)eog, (long long)r.turns);
    vs_tvd_result_free(&r);
}

/* 2. a different drafter against a double-precision computation on text samples */
static void test_reference(vs_lm *t, const vs_mmproj *tm, vs_lm *dl, const vs_mmproj *dm, bool want_eog) {
    vs_tvd_drafter dr = {.name = "rand", .lm = dl, .mm = dm};
    vs_tvd_opts o = {.limit = 2, .max_tokens = 6};
    vs_tvd_result r;
    run(t, tm, &dr, 1, &o, &r);
    int64_t bad = 0;
    for (int64_t i = 0; i < r.n; i++) bad += !(r.tvd[0][i] > 0 && r.tvd[0][i] <= 1);
    VT_CHECK(bad == 0, "%lld TVDs outside (0, 1]", (long long)bad);
    const int V = vs_lm_cfg(t)->n_vocab;
    int checked = 0, checked_eog = 0;
    double worst = 0;
    for (int64_t i = 0; i < r.n;) {
        const vs_world_sample *s = &test->samples[r.pos[i].sample];
        int64_t j = i;
        while (j < r.n && r.pos[j].sample == r.pos[i].sample && r.pos[j].turn == r.pos[i].turn) j++;
        if (s->suite == VS_WORLD_TEXT) {
            char *prompt = vs_eval_prompt(s, r.pos[i].turn, NULL);
            int32_t toks[1024];
            int64_t np = 0;
            vs_error err = {0};
            VT_REQUIRE(vs_tokenize(tok, prompt, strlen(prompt), true, true, toks, 1000, &np, &err) == VS_OK,
                       "%s", err.msg);
            int64_t n = np;
            for (int64_t k = i; k < j; k++)
                if (!r.pos[k].eog) toks[n++] = r.pos[k].token;
            float *lt = malloc(sizeof(float) * (size_t)n * V), *ld = malloc(sizeof(float) * (size_t)n * V);
            tm_ref_forward(t, toks, (int)n, lt);
            tm_ref_forward(dl, toks, (int)n, ld);
            for (int64_t k = i; k < j; k++) {
                const int64_t row = np - 1 + r.pos[k].index;
                double mp = -1e300, mq = -1e300, sp = 0, sq = 0, tv = 0;
                const float *a = lt + row * V, *b = ld + row * V;
                for (int v = 0; v < V; v++) mp = fmax(mp, a[v]), mq = fmax(mq, b[v]);
                for (int v = 0; v < V; v++) sp += exp(a[v] - mp), sq += exp(b[v] - mq);
                for (int v = 0; v < V; v++) tv += fabs(exp(a[v] - mp) / sp - exp(b[v] - mq) / sq);
                tv *= 0.5;
                worst = fmax(worst, fabs(tv - r.tvd[0][k]));
                /* the recorded token is the target's greedy choice at that position */
                int am = 0;
                for (int v = 1; v < V; v++)
                    if (a[v] > a[am]) am = v;
                VT_CHECK(r.pos[k].eog || r.pos[k].token == am, "%s pos %d: token %d, reference argmax %d",
                         s->id, r.pos[k].index, r.pos[k].token, am);
                checked++, checked_eog += r.pos[k].eog;
            }
            free(lt), free(ld);
            vs_free(prompt);
        }
        i = j;
    }
    VT_CHECK(checked >= 6 && worst < 1e-4, "%d text positions checked, worst |TVD - reference| %g", checked,
             worst);
    VT_CHECK(!want_eog || checked_eog > 0, "no end-of-generation position among the text positions");
    vs_tvd_stats s;
    vs_tvd_stats_of(&r, 0, 0, &s);
    printf("random drafter: %lld positions, mean TVD %.3f, median %.3f; %d text positions match the double "
           "reference within %.2g "
           "(%d of them end-of-generation)\n",
           (long long)s.n, s.mean, s.median, checked, worst, checked_eog);
    vs_tvd_result_free(&r);
}

/* 3. views */
static void test_views(vs_lm *t, const vs_mmproj *tm, vs_lm *dl, const vs_mmproj *dm, const vs_mmproj *own,
                       const vs_mmproj *own_copy) {
    vs_tvd_opts o = {.limit = 2, .max_tokens = 6, .text_only = true};
    vs_tvd_result r;
    /* the target seeing "\n" instead of its images, against itself seeing them */
    vs_tvd_drafter self = {.name = "self-T", .lm = t, .mm = tm};
    run(t, tm, &self, 1, &o, &r);
    VT_CHECK(r.views[0] == VS_TVD_VIEW_T, "text_only gives the T view");
    int64_t img = 0, img_pos = 0, txt_nonzero = 0;
    for (int64_t i = 0; i < r.n; i++) {
        if (has_images(&r, i))
            img++, img_pos += r.tvd[0][i] > 0;
        else
            txt_nonzero += r.tvd[0][i] != 0;
    }
    VT_CHECK(img > 0 && img_pos == img && txt_nonzero == 0,
             "target T vs M: %lld of %lld image positions > 0, %lld text positions != 0", (long long)img_pos,
             (long long)img, (long long)txt_nonzero);
    vs_tvd_result_free(&r);
    /* a drafter without mmproj is T in M mode too */
    vs_tvd_drafter nomm = {.name = "nomm", .lm = t, .mm = NULL};
    o.text_only = false;
    run(t, tm, &nomm, 1, &o, &r);
    VT_CHECK(r.views[0] == VS_TVD_VIEW_T, "no mmproj -> T view");
    vs_tvd_result_free(&r);

    /* one drafter in M and T: equal on text samples, different on image samples */
    vs_tvd_drafter dr = {.name = "d", .lm = dl, .mm = dm};
    vs_tvd_result rm, rt;
    o.text_only = false;
    run(t, tm, &dr, 1, &o, &rm);
    o.text_only = true;
    run(t, tm, &dr, 1, &o, &rt);
    VT_REQUIRE(rm.n == rt.n, "the positions depend on the target only (%lld vs %lld)", (long long)rm.n,
               (long long)rt.n);
    int64_t same_txt = 0, n_txt = 0, diff_img = 0, n_img = 0;
    for (int64_t i = 0; i < rm.n; i++) {
        if (has_images(&rm, i))
            n_img++, diff_img += rm.tvd[0][i] != rt.tvd[0][i];
        else
            n_txt++, same_txt += rm.tvd[0][i] == rt.tvd[0][i];
    }
    VT_CHECK(n_txt > 0 && same_txt == n_txt, "text positions: %lld of %lld equal in M and T",
             (long long)same_txt, (long long)n_txt);
    VT_CHECK(n_img > 0 && diff_img == n_img, "image positions: %lld of %lld differ between M and T",
             (long long)diff_img, (long long)n_img);
    vs_tvd_stats sm, st;
    vs_tvd_stats_of(&rm, 0, 0, &sm);
    vs_tvd_stats_of(&rt, 0, 0, &st);
    printf(
        "views: drafter M mean %.4f, T mean %.4f (%lld image positions differ, %lld text positions equal)\n",
        sm.mean, st.mean, (long long)diff_img, (long long)same_txt);
    vs_tvd_result_free(&rm);
    vs_tvd_result_free(&rt);

    /* own tower: the same projector fed by the drafter's tower vs the target's tower */
    vs_tvd_drafter a = {.name = "own-tower", .lm = dl, .mm = own},
                   b = {.name = "target-tower", .lm = dl, .mm = own_copy};
    vs_tvd_drafter both[2] = {a, b};
    o.text_only = false;
    run(t, tm, both, 2, &o, &r);
    int64_t differ = 0, n_i = 0, txt_same = 0, n_t = 0;
    for (int64_t i = 0; i < r.n; i++) {
        if (has_images(&r, i))
            n_i++, differ += r.tvd[0][i] != r.tvd[1][i];
        else
            n_t++, txt_same += r.tvd[0][i] == r.tvd[1][i];
    }
    VT_CHECK(n_i > 0 && differ == n_i && txt_same == n_t, "own tower: %lld of %lld image positions differ",
             (long long)differ, (long long)n_i);
    vs_tvd_result_free(&r);
}

/* 4. summaries */
static void test_summaries(vs_lm *t, const vs_mmproj *tm, vs_lm *dl, const vs_mmproj *dm) {
    vs_tvd_drafter dr[2] = {{.name = "rand-M", .lm = dl, .mm = dm}, {.name = "rand-T", .lm = dl, .mm = NULL}};
    vs_tvd_opts o = {.limit = 1,
                     .max_tokens = 8,
                     .suites = VS_WORLD_SUITE_BIT(VS_WORLD_VQA) | VS_WORLD_SUITE_BIT(VS_WORLD_TEXT) |
                               VS_WORLD_SUITE_BIT(VS_WORLD_DIFF)};
    vs_tvd_result r;
    run(t, tm, dr, 2, &o, &r);
    VT_CHECK(r.turns == 3, "3 suites x 1 sample: %lld turns", (long long)r.turns);
    for (int k = 0; k < 2; k++) {
        for (int bins = 1; bins <= 37; bins += 9) {
            int64_t counts[64], sum = 0;
            vs_tvd_histogram(&r, k, 0, bins, counts);
            for (int i = 0; i < bins; i++) sum += counts[i];
            VT_CHECK(sum == r.n, "drafter %d, %d bins: counts sum to %lld of %lld", k, bins, (long long)sum,
                     (long long)r.n);
            int64_t per = 0;
            for (int su = 0; su < VS_WORLD_N_SUITES; su++) {
                vs_tvd_histogram(&r, k, VS_WORLD_SUITE_BIT(su), bins, counts);
                for (int i = 0; i < bins; i++) per += counts[i];
            }
            VT_CHECK(per == r.n, "per-suite histograms sum to %lld of %lld", (long long)per, (long long)r.n);
        }
        /* statistics against direct counts */
        vs_tvd_stats s;
        vs_tvd_stats_of(&r, k, 0, &s);
        int64_t lo = 0, hi = 0, below = 0, above = 0;
        double sum = 0;
        for (int64_t i = 0; i < r.n; i++) {
            const double x = r.tvd[k][i];
            sum += x, lo += x<0.1, hi += x> 0.5;
            below += x<s.median, above += x> s.median;
        }
        VT_CHECK(s.n == r.n && fabs(s.mean - sum / r.n) < 1e-12 && s.frac_low == (double)lo / r.n &&
                     s.frac_high == (double)hi / r.n,
                 "stats of drafter %d", k);
        VT_CHECK(below <= r.n / 2 && above <= r.n / 2, "median %g: %lld below, %lld above of %lld", s.median,
                 (long long)below, (long long)above, (long long)r.n);
        vs_tvd_stats sv;
        vs_tvd_stats_of(&r, k, VS_WORLD_SUITE_BIT(VS_WORLD_OCR), &sv);
        VT_CHECK(sv.n == 0, "a suite without positions");
    }
    char *rep = vs_tvd_report(&r, 10);
    VT_CHECK(rep && strstr(rep, "rand-M") && strstr(rep, "rand-T") && strstr(rep, "vqa") &&
                 strstr(rep, "all") && strstr(rep, "histogram"),
             "report");
    printf("%s", rep ? rep : "");
    vs_free(rep);
    vs_json_writer w;
    vs_json_writer_init(&w);
    vs_tvd_json(&r, 10, &w);
    vs_error err = {0};
    vs_json_doc *doc = vs_json_parse(w.buf, w.len, "tvd json", &err);
    VT_REQUIRE(doc, "%s", err.msg);
    const vs_json *d0 = vs_json_at(vs_json_get(vs_json_root(doc), "drafters"), 0);
    const vs_json *h = vs_json_get(d0, "histogram");
    int64_t hs = 0;
    for (int i = 0; h && i < (int)h->len; i++) hs += vs_json_at(h, i)->i;
    VT_CHECK(vs_json_get_int(vs_json_root(doc), "positions", -1) == r.n &&
                 vs_json_get_int(vs_json_get(d0, "total"), "count", -1) == r.n && hs == r.n && h->len == 10 &&
                 !strcmp(vs_json_get_str(d0, "view", ""), "M") &&
                 vs_json_get(vs_json_get(d0, "suites"), "diff") != NULL,
             "JSON");
    vs_json_doc_free(doc);
    vs_json_writer_free(&w);
    vs_plot *p = vs_tvd_plot(&r, 20, NULL, &err);
    VT_REQUIRE(p, "%s", err.msg);
    char *svg = vs_plot_svg(p, NULL, &err);
    VT_CHECK(svg && strstr(svg, "<svg") && strstr(svg, "rand-M (M)") && strstr(svg, "rand-T (T)"), "SVG");
    vs_free(svg);
    vs_plot_free(p);
    vs_tvd_result_free(&r);
}

/* 5. errors */
static void test_errors(vs_lm *t, const vs_mmproj *tm, vs_lm *dl, const vs_mmproj *wide) {
    vs_error err = {0};
    vs_tvd_result r;
    vs_tvd_opts o = {.limit = 1, .max_tokens = 2};
    vs_lm *small = load_lm("vocab_small.gguf"), *same = load_lm("vocab_other.gguf");
    vs_tvd_drafter d1 = {.name = "small", .lm = small};
    VT_CHECK(vs_tvd_run(t, tm, tok, tp, &d1, 1, test, &o, &r, &err) == VS_ERR_INVALID &&
                 strstr(err.msg, "small") && strstr(err.msg, "vocabulary"),
             "vocabulary size: %s", err.msg);
    vs_tvd_result_free(&r);
    vs_tvd_drafter d2 = {.name = "other", .lm = same};
    VT_CHECK(vs_tvd_run(t, tm, tok, tp, &d2, 1, test, &o, &r, &err) == VS_ERR_INVALID &&
                 strstr(err.msg, "other") && strstr(err.msg, "vocabular"),
             "same-size vocabulary: %s", err.msg);
    vs_tvd_result_free(&r);
    vs_tvd_drafter d3 = {.name = "wide", .lm = dl, .mm = wide};
    VT_CHECK(vs_tvd_run(t, tm, tok, tp, &d3, 1, test, &o, &r, &err) == VS_ERR_INVALID &&
                 strstr(err.msg, "width"),
             "projector width: %s", err.msg);
    vs_tvd_result_free(&r);
    /* in T mode the drafter's mmproj is not used, so its width does not matter */
    o.text_only = true;
    VT_CHECK(vs_tvd_run(t, tm, tok, tp, &d3, 1, test, &o, &r, &err) == VS_OK, "T ignores the mmproj: %s",
             err.msg);
    vs_tvd_result_free(&r);
    /* a drafter whose context cannot hold prompt + answer */
    vs_lm *sc = load_lm("short_ctx.gguf");
    vs_tvd_drafter d4 = {.name = "short", .lm = sc};
    VT_CHECK(vs_tvd_run(t, tm, tok, tp, &d4, 1, test, &o, &r, &err) == VS_ERR_RANGE &&
                 strstr(err.msg, "short") && strstr(err.msg, "context") && strstr(err.msg, "test-"),
             "short context: %s", err.msg);
    vs_tvd_result_free(&r);
    vs_lm_free(sc);
    printf("errors: %s\n", "vocabulary size, vocabulary texts, projector width and short context refused");
    vs_lm_free(small);
    vs_lm_free(same);
}

/* 6. CLI */
static void test_cli(void) {
    const char *cli = vt_cli();
    if (!cli || access(cli, X_OK) != 0) {
        printf("SKIP CLI checks: no vlmspec binary ($VLMSPEC_BIN)\n");
        return;
    }
    const char *tmp = vt_tmpdir();
    char base[1200];
    snprintf(base, sizeof(base), "%s analyze tvd --model %s/target.gguf --mmproj %s/target-mm.gguf --data %s",
             cli, tmp, tmp, D);
    int rc = vt_run(
        "%s --drafter rand=%s/draft.gguf,%s/draft-mm.gguf --drafter %s/target.gguf --limit 1 --max-tokens 4 "
        "--suites vqa,text --bins 10 -o %s/tvd.svg --json %s/tvd.json --tokens %s/tvd.csv -t 1 > %s/cli.out "
        "2> %s/cli.err",
        base, tmp, tmp, tmp, tmp, tmp, tmp, tmp, tmp);
    VT_CHECK(rc == 0, "analyze tvd exit %d", rc);
    uint8_t *js = NULL;
    size_t n = 0;
    vs_error err = {0};
    char path[1024];
    snprintf(path, sizeof(path), "%s/tvd.json", tmp);
    VT_REQUIRE(vs_read_file(path, &js, &n, &err) == VS_OK, "%s", err.msg);
    vs_json_doc *doc = vs_json_parse((const char *)js, n, path, &err);
    VT_REQUIRE(doc, "%s", err.msg);
    const vs_json *tv = vs_json_get(vs_json_root(doc), "tvd");
    const vs_json *d1 = vs_json_at(vs_json_get(tv, "drafters"), 1);
    VT_CHECK(vs_json_get_int(tv, "turns", -1) == 2 && vs_json_get_int(tv, "positions", 0) >= 2 &&
                 !strcmp(vs_json_get_str(d1, "name", ""), "target") &&
                 vs_json_get_num(vs_json_get(d1, "total"), "max", -1) > 0 &&
                 vs_json_get(vs_json_get(vs_json_at(vs_json_get(tv, "drafters"), 0), "suites"), "vqa"),
             "CLI JSON (the target file without mmproj is the T view of the target: max > 0)");
    const int64_t positions = vs_json_get_int(tv, "positions", 0);
    VT_CHECK(vs_json_get_int(vs_json_get(vs_json_root(doc), "target_accuracy"), "first_turns", -1) == 2,
             "target accuracy in the JSON");
    vs_json_doc_free(doc);
    vs_free(js);
    /* --tokens: a header and one line per position with one TVD column per drafter */
    snprintf(path, sizeof(path), "%s/tvd.csv", tmp);
    uint8_t *csv = NULL;
    VT_REQUIRE(vs_read_file(path, &csv, &n, &err) == VS_OK, "%s", err.msg);
    int64_t lines = 0;
    for (size_t i = 0; i < n; i++) lines += csv[i] == '\n';
    VT_CHECK(lines == positions + 1 &&
                 !strncmp((char *)csv, "sample,suite,turn,index,token,eog,rand,target\n", 46),
             "CSV: %lld lines for %lld positions", (long long)lines, (long long)positions);
    vs_free(csv);
    snprintf(path, sizeof(path), "%s/tvd.svg", tmp);
    uint8_t *sv = NULL;
    VT_CHECK(vs_read_file(path, &sv, &n, &err) == VS_OK && strstr((char *)sv, "<svg") &&
                 strstr((char *)sv, "rand (M)"),
             "SVG file");
    vs_free(sv);
    snprintf(path, sizeof(path), "%s/cli.out", tmp);
    VT_CHECK(vs_read_file(path, &sv, &n, &err) == VS_OK && strstr((char *)sv, "histogram: rand (M)") &&
                 strstr((char *)sv, "first-turn accuracy"),
             "stdout report");
    vs_free(sv);
    /* mismatched vocabulary: exit 1 with a message naming the drafter */
    rc = vt_run("%s --drafter small=%s/vocab_small.gguf --limit 1 --max-tokens 2 -q > /dev/null 2> %s/e1.txt",
                base, tmp, tmp);
    snprintf(path, sizeof(path), "%s/e1.txt", tmp);
    sv = NULL;
    VT_CHECK(rc == 1 && vs_read_file(path, &sv, &n, &err) == VS_OK && strstr((char *)sv, "vocabulary") &&
                 strstr((char *)sv, "small"),
             "vocabulary mismatch: exit %d, %s", rc, sv ? (char *)sv : "");
    vs_free(sv);
    /* missing files */
    rc = vt_run("%s --drafter x=%s/nope.gguf --limit 1 -q > /dev/null 2> %s/e2.txt", base, tmp, tmp);
    snprintf(path, sizeof(path), "%s/e2.txt", tmp);
    sv = NULL;
    VT_CHECK(rc == 1 && vs_read_file(path, &sv, &n, &err) == VS_OK && strstr((char *)sv, "nope.gguf"),
             "missing drafter: exit %d, %s", rc, sv ? (char *)sv : "");
    vs_free(sv);
    rc = vt_run("%s --drafter %s/draft.gguf,%s/nope-mm.gguf --limit 1 -q > /dev/null 2>&1", base, tmp, tmp);
    VT_CHECK(rc == 1, "missing drafter mmproj: exit %d", rc);
    rc = vt_run("%s analyze tvd --model %s/target.gguf --mmproj %s/target-mm.gguf --data %s/nodata --drafter "
                "%s/draft.gguf -q > /dev/null 2>&1",
                cli, tmp, tmp, tmp, tmp);
    VT_CHECK(rc == 1, "missing dataset: exit %d", rc);
    /* usage errors */
    rc = vt_run("%s --limit 1 > /dev/null 2>&1", base);
    VT_CHECK(rc == 2, "no --drafter: exit %d", rc);
    rc = vt_run("%s --drafter %s/draft.gguf --mode x > /dev/null 2>&1", base, tmp);
    VT_CHECK(rc == 2, "bad --mode: exit %d", rc);
    rc = vt_run("%s --drafter =%s/draft.gguf > /dev/null 2>&1", base, tmp);
    VT_CHECK(rc == 2, "empty drafter name: exit %d", rc);
    rc = vt_run("%s --drafter a,b=%s/draft.gguf > /dev/null 2>&1", base, tmp);
    VT_CHECK(rc == 2, "comma in a drafter name: exit %d", rc);
    rc = vt_run("%s --drafter a=%s/draft.gguf --drafter a=%s/draft.gguf > /dev/null 2>&1", base, tmp, tmp);
    VT_CHECK(rc == 2, "two drafters with one name: exit %d", rc);
    rc = vt_run("%s --draft a=%s/draft.gguf > /dev/null 2> %s/e3.txt", base, tmp, tmp);
    char e3[600];
    snprintf(e3, sizeof(e3), "%s/e3.txt", tmp);
    VT_CHECK(rc == 2 && vt_file_has(e3, "--drafter"), "--draft (the draft length elsewhere) points to --drafter: %d",
             rc);
    rc = vt_run("%s analyze frobnicate > /dev/null 2>&1", cli);
    VT_CHECK(rc == 2, "unknown analysis: exit %d", rc);
    rc = vt_run("%s analyze tvd --help > %s/help.txt", cli, tmp);
    snprintf(path, sizeof(path), "%s/help.txt", tmp);
    sv = NULL;
    VT_CHECK(rc == 0 && vs_read_file(path, &sv, &n, &err) == VS_OK && strstr((char *)sv, "--draft") &&
                 strstr((char *)sv, "--mode") && strstr((char *)sv, "--bins"),
             "help");
    vs_free(sv);
    printf("CLI: analyze tvd writes report, JSON and SVG; bad input exits 1 / 2\n");
}

int main(void) {
    double t0 = vs_time_now();
    (void)wt_config, (void)wt_preproc; /* world_tiny.h helpers this test does not need */
    wt_make("world", 2, 2, 512, D, TOK, sizeof(D));
    vs_error err = {0};
    test = vs_world_load(D, "test", VS_WORLD_ALL_SUITES, &err);
    VT_REQUIRE(test, "%s", err.msg);
    tok = vs_tokenizer_load(TOK, &err);
    VT_REQUIRE(tok, "%s", err.msg);
    tp = vs_threadpool_new(2, &err);
    VT_REQUIRE(tp, "%s", err.msg);

    write_lm("target.gguf", 32, 1, 0, 1024);
    write_lm("target-eos.gguf", 32, 1, 0, 1024);
    boost_eos("target-eos.gguf", EOS_BOOST);
    write_mm("target-mm.gguf", 32, true, 11);
    write_lm("draft.gguf", 48, 2, 0, 1024);
    write_mm("draft-mm.gguf", 48, false, 12); /* projector-only: features from the target's tower */
    write_mm("own-mm.gguf", 48, true, 13);    /* its own, different tower */
    write_mm("wide-mm.gguf", 64, false, 14);  /* projects to the wrong width for draft.gguf */
    write_lm("short_ctx.gguf", 32, 5, 0, 24);
    write_lm("vocab_small.gguf", 32, 3, 100, 1024);
    write_lm("vocab_other.gguf", 32, 4, vs_tokenizer_n_vocab(tok), 1024);
    /* own-mm's projector as a projector-only file (so it reads the target's tower instead) */
    {
        vs_mmproj *m = load_mm("own-mm.gguf");
        vs_vision_weights w;
        VT_REQUIRE(vs_mmproj_read_weights(m, &w, &err) == VS_OK, "%s", err.msg);
        vs_vision_config c = *vs_mmproj_config(m);
        vs_vision_config po = c;
        po.has_tower = false;
        vs_vision_weights pw = {.mm0_w = w.mm0_w, .mm0_b = w.mm0_b, .mm2_w = w.mm2_w, .mm2_b = w.mm2_b};
        vs_mmproj_write_opts wo = {.mat_type = VS_TYPE_F32};
        VT_REQUIRE(vs_mmproj_write(P("own-copy-mm.gguf"), &po, &pw, &wo, &err) == VS_OK, "%s", err.msg);
        vs_vision_weights_free(&w, &c);
        vs_mmproj_free(m);
    }
    vs_lm *t = load_lm("target.gguf"), *dl = load_lm("draft.gguf"), *te = load_lm("target-eos.gguf");
    vs_mmproj *tm = load_mm("target-mm.gguf"), *dm = load_mm("draft-mm.gguf"), *own = load_mm("own-mm.gguf");
    vs_mmproj *own_copy = load_mm("own-copy-mm.gguf"), *wide = load_mm("wide-mm.gguf");

    test_self(t, tm, false);
    test_self(te, tm, true);
    test_reference(t, tm, dl, dm, false);
    test_reference(te, tm, dl, dm, true);
    test_views(t, tm, dl, dm, own, own_copy);
    test_summaries(t, tm, dl, dm);
    test_errors(t, tm, dl, wide);
    test_cli();

    vs_mmproj_free(tm), vs_mmproj_free(dm), vs_mmproj_free(own), vs_mmproj_free(own_copy),
        vs_mmproj_free(wide);
    vs_lm_free(t), vs_lm_free(dl), vs_lm_free(te);
    vs_threadpool_free(tp);
    vs_tokenizer_free(tok);
    vs_world_dataset_free(test);
    printf("%.2f s\n", vs_time_now() - t0);
    return vt_finish("analyze");
}
