/* vlmspec data: the generated multimodal world.
 *   data gen --out DIR [--seed S] [--train N] [--test N] [--size PX] [--suites LIST] [--max-items N] [--zoom] [--quiet]
 *   data stats DIR [--split S] [--tokenizer TOK.gguf]
 *   data preview DIR -o SHEET.png [--split S] [--per-suite N]
 *   data check DIR [--split S]      (re-derives every answer and scores the reference texts)
 *   data rows DIR --tokenizer TOK.gguf -o PREFIX [--split S] [--image-rows N] [--images-as-text]
 *                                   (the rows the trainer sees, as flat arrays: train_data.h)
 *   data distill --model T.gguf --mmproj T-mm.gguf --data DIR --out FILE [options]
 *                                   (the target's answers for self-distillation, distill.h) */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "distill.h"
#include "font.h"
#include "image.h"
#include "json.h"
#include "outfile.h"
#include "png_write.h"
#include "tokenizer.h"
#include "train_data.h"
#include "world.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: vlmspec data gen --out DIR [--seed S] [--train N] [--test N] [--size PX] [--suites LIST] "
            "[--max-items N] [--zoom] [--quiet]\n"
            "       vlmspec data stats DIR [--split train|test|captions] [--tokenizer TOK.gguf]\n"
            "       vlmspec data preview DIR -o SHEET.png [--split test|train] [--per-suite N]\n"
            "       vlmspec data check DIR [--split test|train|captions]\n"
            "       vlmspec data rows DIR --tokenizer TOK.gguf -o PREFIX [--split S] [--image-rows N]\n"
            "                 [--images-as-text]\n"
            "       vlmspec data distill --model T.gguf --mmproj T-mmproj.gguf --data DIR --out FILE\n"
            "       (vlmspec data distill --help)\n"
            "\n"
            "gen      writes the generated world (docs/world.md): PNG images, train.jsonl, test.jsonl,\n"
            "         captions.jsonl and world.json. Deterministic for a seed.\n"
            "  -o, --out DIR    output directory (created)\n"
            "  --seed S         random seed (default 1)\n"
            "  --train N        training samples per suite (default 1000)\n"
            "  --test N         test samples per suite (default 100)\n"
            "  --size PX        image side in pixels (default 64, 32..1024)\n"
            "  --max-items N    simpler pictures (a curriculum): at most N objects per shapes scene (two\n"
            "                   where a question needs two), N text lines, max(3, N) bars; diff and story\n"
            "                   keep their ranges (default 0: the full ranges)\n"
            "  --zoom           objects drawn 2.5x larger in the one-picture suites (a curriculum)\n"
            "  --suites LIST    comma-separated suites or 'all' (default: describe,vqa,pope,ocr,chart,diff,story,\n"
            "                   text; on request: drill, terse arithmetic and fact drills for LM pretraining,\n"
            "                   and look, short-answer questions about one picture; 'all' includes both)\n"
            "  -q, --quiet      no progress output\n"
            "stats    per suite: samples, turns, images per sample, answer length in words (and tokens with\n"
            "         --tokenizer), vocabulary size. --split defaults to train.\n"
            "preview  a contact sheet PNG tiling samples of every suite (--split test, --per-suite 4).\n"
            "check    runs the checker on every reference answer; exit 1 if any disagrees.\n"
            "rows     the rows `train target` trains on (docs/training.md), for analysis outside vlmspec:\n"
            "         PREFIX.tokens.i32 (token id per row, -1 on image rows), PREFIX.answer.u8 (1 on\n"
            "         answer rows), PREFIX.offsets.i64 (samples + 1 row offsets), PREFIX.turns.i32 (per\n"
            "         sample %d x (first answer row, one past its </s>), -1 padded), PREFIX.query.i32\n"
            "         (per sample %d query types, -1 padded) and PREFIX.json (counts, query type names).\n"
            "         Little-endian. --split defaults to train, --image-rows (rows per image) to 64;\n"
            "         --images-as-text: every picture in words, as `train target --images-as-text`.\n",
            VS_WORLD_MAX_TURNS, VS_WORLD_MAX_TURNS);
}

/* ---------------------------------------------------------------------------------------------- */

/* --suites LIST (data gen): the suite mask (uint32_t) at dst. */
static bool parse_suites(const char *cmd, const char *flag, const char *v, void *dst) {
    (void)flag;
    vs_error err;
    if (vs_world_parse_suites(v, (uint32_t *)dst, &err) != VS_OK) {
        cli_fail_err(cmd, &err);
        return false;
    }
    return true;
}

static int cmd_gen(int argc, char **argv) {
    vs_world_config cfg;
    vs_world_config_default(&cfg);
    const char *out = NULL;
    bool quiet = false;
    cli_flags fs = {0};
    cli_flag_add(&fs, "--out|-o", CLI_STR, &out, 0, 0);
    cli_flag_add(&fs, "--seed", CLI_U64, &cfg.seed, 0, (double)INT64_MAX);
    cli_flag_add(&fs, "--train", CLI_I64, &cfg.n_train, 0, 10000000);
    cli_flag_add(&fs, "--test", CLI_I64, &cfg.n_test, 0, 1000000);
    cli_flag_add(&fs, "--size", CLI_INT, &cfg.image_size, 32, 1024);
    cli_flag_add(&fs, "--max-items", CLI_INT, &cfg.max_items, 0, VS_WORLD_MAX_OBJECTS);
    cli_flag_add(&fs, "--zoom", CLI_BOOL, &cfg.zoom, 0, 0);
    cli_flag_fn_add(&fs, "--suites", parse_suites, &cfg.suites);
    cli_flag_add(&fs, "--quiet|-q", CLI_BOOL, &quiet, 0, 0);
    const int r = cli_flags_parse("data gen", argc, argv, &fs, usage);
    if (r >= 0) return r;
    cfg.progress = quiet ? 0 : 1;
    if (!out) return cli_fail("data gen", "--out DIR is required"), 2;
    vs_error err;
    double t0 = vs_time_now();
    if (vs_world_generate(&cfg, out, &err) != VS_OK) return cli_fail_err("data gen", &err);
    double dt = vs_time_now() - t0;
    int n_suites = 0;
    for (int s = 0; s < VS_WORLD_CAPTION; s++) n_suites += !!(cfg.suites & VS_WORLD_SUITE_BIT(s));
    int64_t n = (cfg.n_train + cfg.n_test) * n_suites;
    printf("wrote %s: %lld samples (%lld train + %lld test per suite, %d suites), seed %llu, %dx%d images, "
           "%.2f s (%.0f samples/s)\n",
           out, (long long)n, (long long)cfg.n_train, (long long)cfg.n_test, n_suites, (unsigned long long)cfg.seed,
           cfg.image_size, cfg.image_size, dt, dt > 0 ? (double)n / dt : 0.0);
    return 0;
}

/* ---------------------------------------------------------------------------------------------- */

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

typedef struct {
    int *v;
    int64_t n, cap;
} ivec;

static void ivec_push(ivec *a, int x) {
    if (a->n == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 256;
        a->v = realloc(a->v, (size_t)a->cap * sizeof(int));
    }
    a->v[a->n++] = x;
}

static void print_dist(const char *what, ivec *a) {
    if (!a->n) {
        printf("  %-22s -\n", what);
        return;
    }
    qsort(a->v, (size_t)a->n, sizeof(int), cmp_int);
    double sum = 0;
    for (int64_t i = 0; i < a->n; i++) sum += a->v[i];
    printf("  %-22s mean %6.1f  min %4d  p10 %4d  p50 %4d  p90 %4d  max %4d\n", what, sum / (double)a->n, a->v[0],
           a->v[a->n / 10], a->v[a->n / 2], a->v[a->n * 9 / 10], a->v[a->n - 1]);
}

/* A small string set for vocabulary counts. */
typedef struct {
    char **k;
    size_t cap, n;
} strset;

static uint64_t hstr(const char *s) {
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ULL;
    return h;
}

static void strset_add(strset *s, const char *w) {
    if ((s->n + 1) * 2 > s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 1024;
        char **nk = calloc(cap, sizeof(char *));
        for (size_t i = 0; i < s->cap; i++)
            if (s->k[i]) {
                size_t j = hstr(s->k[i]) & (cap - 1);
                while (nk[j]) j = (j + 1) & (cap - 1);
                nk[j] = s->k[i];
            }
        free(s->k);
        s->k = nk;
        s->cap = cap;
    }
    size_t j = hstr(w) & (s->cap - 1);
    while (s->k[j]) {
        if (!strcmp(s->k[j], w)) return;
        j = (j + 1) & (s->cap - 1);
    }
    s->k[j] = strdup(w);
    s->n++;
}

static void strset_free(strset *s) {
    for (size_t i = 0; i < s->cap; i++) free(s->k[i]);
    free(s->k);
}

static void add_words(strset *s, const char *text) {
    char w[64];
    size_t n = 0;
    for (const char *p = text;; p++) {
        if (*p && isalnum((unsigned char)*p)) {
            if (n + 1 < sizeof(w)) w[n++] = (char)tolower((unsigned char)*p);
            continue;
        }
        if (n) {
            w[n] = 0;
            strset_add(s, w);
            n = 0;
        }
        if (!*p) break;
    }
}

/* stats, preview and check take one positional argument, DIR; parses their flags and it. */
static int parse_with_dir(const char *cmd, int argc, char **argv, cli_flags *fs, const char **dir) {
    int n_pos = 0;
    cli_flags_positional(fs, dir, &n_pos, 1);
    return cli_flags_parse(cmd, argc, argv, fs, usage);
}

/* Words separated by white space. */
static int count_words(const char *s) {
    int w = 0;
    bool in = false;
    for (const char *p = s; *p; p++) {
        bool sp = isspace((unsigned char)*p);
        if (!sp && !in) w++;
        in = !sp;
    }
    return w;
}

/* One suite's block of `data stats` (nothing when the split has no sample of it); adds its words to
 * all_vocab. */
static void stats_suite(const vs_world_dataset *d, int su, vs_tokenizer *tok, strset *all_vocab) {
    int64_t n = 0, n_img = 0, kinds[VS_WORLD_N_TURN_KINDS] = {0}, turns = 0;
    ivec words = {0}, toks = {0};
    strset vocab = {0};
    vs_error err;
    for (int64_t i = 0; i < d->n; i++) {
        const vs_world_sample *s = &d->samples[i];
        if ((int)s->suite != su) continue;
        n++;
        n_img += s->n_images;
        for (int t = 0; t < s->n_turns; t++) {
            const char *a = s->turns[t].assistant;
            turns++;
            if ((unsigned)s->turns[t].kind < VS_WORLD_N_TURN_KINDS) kinds[s->turns[t].kind]++;
            ivec_push(&words, count_words(a));
            add_words(&vocab, a);
            add_words(all_vocab, a);
            add_words(all_vocab, s->turns[t].user);
            if (tok) {
                int64_t nt = 0;
                int32_t *ids = NULL;
                if (vs_tokenize_alloc(tok, a, strlen(a), false, true, &ids, &nt, &err) == VS_OK)
                    ivec_push(&toks, (int)nt);
                vs_free(ids);
            }
        }
    }
    if (n) {
        printf("\n%s: %lld samples, %.2f images/sample, %lld turns (first %lld, followup %lld, unrelated %lld, "
               "new image %lld, more %lld), answer vocabulary %zu words\n",
               vs_world_suite_name((vs_world_suite)su), (long long)n, (double)n_img / (double)n, (long long)turns,
               (long long)kinds[VS_TURN_FIRST], (long long)kinds[VS_TURN_FOLLOWUP], (long long)kinds[VS_TURN_UNRELATED],
               (long long)kinds[VS_TURN_NEW_IMAGE], (long long)kinds[VS_TURN_MORE], vocab.n);
        print_dist("answer words", &words);
        if (tok) print_dist("answer tokens", &toks);
    }
    free(words.v);
    free(toks.v);
    strset_free(&vocab);
}

static int cmd_stats(int argc, char **argv) {
    const char *dir = NULL, *split = "train", *tokp = NULL;
    cli_flags fs = {0};
    cli_flag_add(&fs, "--split", CLI_STR, &split, 0, 0);
    cli_flag_add(&fs, "--tokenizer", CLI_STR, &tokp, 0, 0);
    const int r = parse_with_dir("data stats", argc, argv, &fs, &dir);
    if (r >= 0) return r;
    if (!dir) return cli_fail("data stats", "DIR is required"), 2;
    vs_error err;
    vs_tokenizer *tok = NULL;
    if (tokp && !(tok = vs_tokenizer_load(tokp, &err))) return cli_fail_err("data stats", &err);
    vs_world_dataset *d = vs_world_load(dir, split, VS_WORLD_ALL_SUITES, &err);
    if (!d) {
        vs_tokenizer_free(tok);
        return cli_fail_err("data stats", &err);
    }
    printf("%s split '%s': %lld samples, seed %llu, %dx%d images\n", dir, split, (long long)d->n,
           (unsigned long long)d->seed, d->image_size, d->image_size);
    strset all_vocab = {0};
    for (int su = 0; su < VS_WORLD_N_SUITES; su++) stats_suite(d, su, tok, &all_vocab);
    printf("\nvocabulary of all prompts and answers: %zu distinct words\n", all_vocab.n);
    strset_free(&all_vocab);
    vs_world_dataset_free(d);
    vs_tokenizer_free(tok);
    return 0;
}

/* ---------------------------------------------------------------------------------------------- */

static void blit(uint8_t *dst, int dw, int dh, int x, int y, const vs_image *im) {
    for (int r = 0; r < im->h; r++) {
        if (y + r < 0 || y + r >= dh) continue;
        for (int c = 0; c < im->w; c++) {
            if (x + c < 0 || x + c >= dw) continue;
            memcpy(dst + ((size_t)(y + r) * (size_t)dw + (size_t)(x + c)) * 3,
                   im->rgb + ((size_t)r * (size_t)im->w + (size_t)c) * 3, 3);
        }
    }
}

/* The contact sheet's geometry: one row per suite with images; each row holds `per` samples side by side. */
typedef struct sheet {
    int per, S, gap, sgap, label_w; /* samples per row, image side, gaps, label column */
    int rows, W, H;
    uint8_t *rgb;
} sheet;

/* Counts the rows and sizes the sheet. */
static void sheet_layout(sheet *sh, const vs_world_dataset *d) {
    int max_w = 0;
    for (int su = 0; su < VS_WORLD_N_SUITES; su++) {
        int k = 0, w = sh->label_w;
        for (int64_t i = 0; i < d->n && k < sh->per; i++) {
            const vs_world_sample *s = &d->samples[i];
            if ((int)s->suite != su || s->n_images == 0) continue;
            w += s->n_images * (sh->S + sh->gap) + sh->sgap;
            k++;
        }
        if (k) sh->rows++, max_w = w > max_w ? w : max_w;
    }
    sh->W = max_w, sh->H = sh->rows * (sh->S + 10) + 10;
}

/* Draws every row of the sheet; returns the exit status (errors printed). */
static int sheet_draw(sheet *sh, const vs_world_dataset *d) {
    static const uint8_t white[3] = {235, 235, 235};
    vs_error err;
    int y = 10, status = 0;
    for (int su = 0; su < VS_WORLD_N_SUITES && !status; su++) {
        int k = 0, x = sh->label_w;
        for (int64_t i = 0; i < d->n && k < sh->per && !status; i++) {
            const vs_world_sample *s = &d->samples[i];
            if ((int)s->suite != su || s->n_images == 0) continue;
            for (int m = 0; m < s->n_images; m++) {
                vs_image im;
                if (vs_image_load(&im, s->images[m], &err) != VS_OK) {
                    status = cli_fail_err("data preview", &err);
                    break;
                }
                blit(sh->rgb, sh->W, sh->H, x, y, &im);
                vs_image_free(&im);
                x += sh->S + sh->gap;
            }
            x += sh->sgap;
            k++;
        }
        if (!k) continue;
        char name[16];
        snprintf(name, sizeof(name), "%s", vs_world_suite_name((vs_world_suite)su));
        for (char *p = name; *p; p++) *p = (char)toupper((unsigned char)*p);
        vs_font_draw(sh->rgb, sh->W, sh->H, 4, y + sh->S / 2 - VS_FONT_H, name, 2, white);
        y += sh->S + 10;
    }
    return status;
}

static int cmd_preview(int argc, char **argv) {
    const char *dir = NULL, *out = NULL, *split = "test";
    int per = 4;
    cli_flags fs = {0};
    cli_flag_add(&fs, "-o|--out", CLI_STR, &out, 0, 0);
    cli_flag_add(&fs, "--split", CLI_STR, &split, 0, 0);
    cli_flag_add(&fs, "--per-suite", CLI_INT, &per, 1, 50);
    const int r = parse_with_dir("data preview", argc, argv, &fs, &dir);
    if (r >= 0) return r;
    if (!dir || !out) return cli_fail("data preview", "DIR and -o SHEET.png are required"), 2;
    vs_error err;
    vs_world_dataset *d = vs_world_load(dir, split, VS_WORLD_ALL_SUITES, &err);
    if (!d) return cli_fail_err("data preview", &err);
    sheet sh = {.per = per, .S = d->image_size, .gap = 2, .sgap = 8, .label_w = 8 * VS_FONT_ADVANCE * 2 + 8};
    sheet_layout(&sh, d);
    if (!sh.rows) {
        vs_world_dataset_free(d);
        return cli_fail("data preview", "%s: no samples with images in split '%s'", dir, split);
    }
    sh.rgb = malloc((size_t)sh.W * (size_t)sh.H * 3);
    memset(sh.rgb, 40, (size_t)sh.W * (size_t)sh.H * 3);
    int status = sheet_draw(&sh, d);
    if (!status && vs_png_write(out, sh.rgb, sh.W, sh.H, 3, &err) != VS_OK)
        status = cli_fail_err("data preview", &err);
    if (!status)
        printf("wrote %s (%dx%d, %d suites, up to %d samples each, split %s)\n", out, sh.W, sh.H, sh.rows, per,
               split);
    free(sh.rgb);
    vs_world_dataset_free(d);
    return status;
}

/* ---------------------------------------------------------------------------------------------- */

static int cmd_check(int argc, char **argv) {
    const char *dir = NULL, *split = "test";
    cli_flags fs = {0};
    cli_flag_add(&fs, "--split", CLI_STR, &split, 0, 0);
    const int r = parse_with_dir("data check", argc, argv, &fs, &dir);
    if (r >= 0) return r;
    if (!dir) return cli_fail("data check", "DIR is required"), 2;
    vs_error err;
    vs_world_dataset *d = vs_world_load(dir, split, VS_WORLD_ALL_SUITES, &err);
    if (!d) return cli_fail_err("data check", &err);
    int64_t turns = 0, bad = 0;
    for (int64_t i = 0; i < d->n; i++) {
        const vs_world_sample *s = &d->samples[i];
        for (int t = 0; t < s->n_turns; t++) {
            vs_world_verdict v;
            turns++;
            bool ok = vs_world_check(s, t, s->turns[t].assistant, &v) && strcmp(v.expected, s->turns[t].answer) == 0;
            if (!ok) {
                if (bad < 10)
                    fprintf(stderr, "%s turn %d: stored '%s', checker expects '%s', read '%s'\n", s->id, t,
                            s->turns[t].answer, v.expected, v.found);
                bad++;
            }
        }
    }
    printf("%s split '%s': %lld samples, %lld turns, checker agrees on %lld (%.2f%%)\n", dir, split, (long long)d->n,
           (long long)turns, (long long)(turns - bad), turns ? 100.0 * (double)(turns - bad) / (double)turns : 100.0);
    vs_world_dataset_free(d);
    return bad ? 1 : 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* rows: the encoded conversations (vs_train_encode) as flat little-endian arrays */

enum { ROWS_TOKENS, ROWS_ANSWER, ROWS_OFFSETS, ROWS_TURNS, ROWS_QUERY, ROWS_N_FILES };
static const char *const k_rows_ext[ROWS_N_FILES] = {"tokens.i32", "answer.u8", "offsets.i64", "turns.i32",
                                                     "query.i32"};

static vs_status rows_write_json(const char *path, const char *dir, const char *split, const char *tok_path,
                                 int64_t n, int64_t rows, int64_t answer_rows, int vocab, int image_rows,
                                 bool words, vs_error *err) {
    vs_json_writer w;
    vs_json_writer_init(&w);
    vs_json_obj_begin(&w);
    vs_json_kv_str(&w, "format", "vlmspec-rows");
    vs_json_kv_int(&w, "version", 1);
    vs_json_kv_str(&w, "data", dir);
    vs_json_kv_str(&w, "split", split);
    vs_json_kv_str(&w, "tokenizer", tok_path);
    vs_json_kv_int(&w, "samples", n);
    vs_json_kv_int(&w, "rows", rows);
    vs_json_kv_int(&w, "answer_rows", answer_rows);
    vs_json_kv_int(&w, "vocab", vocab);
    vs_json_kv_int(&w, "image_rows", words ? 0 : image_rows);
    if (words) vs_json_kv_bool(&w, "images_as_text", true);
    vs_json_kv_int(&w, "max_turns", VS_WORLD_MAX_TURNS);
    vs_json_key(&w, "query_names");
    vs_json_arr_begin(&w);
    for (int q = 0; q < VS_WORLD_N_QUERY_TYPES; q++) vs_json_str(&w, vs_world_query_name((vs_world_query_type)q));
    vs_json_arr_end(&w);
    vs_json_obj_end(&w);
    size_t len = 0;
    char *txt = vs_json_writer_take(&w, &len);
    vs_status st = txt ? vs_write_file(path, txt, len, err) : vs_error_set(err, VS_ERR_NOMEM, "out of memory");
    vs_free(txt);
    vs_json_writer_free(&w);
    return st;
}

static int cmd_rows(int argc, char **argv) {
    const char *cmd = "data rows", *dir = NULL, *out = NULL, *split = "train", *tok_path = NULL;
    int image_rows = 64;
    bool words = false;
    cli_flags fs = {0};
    cli_flag_add(&fs, "-o|--out", CLI_STR, &out, 0, 0);
    cli_flag_add(&fs, "--images-as-text", CLI_BOOL, &words, 0, 0);
    cli_flag_add(&fs, "--split", CLI_STR, &split, 0, 0);
    cli_flag_add(&fs, "--tokenizer", CLI_STR, &tok_path, 0, 0);
    cli_flag_add(&fs, "--image-rows", CLI_INT, &image_rows, 1, 1 << 16);
    const int r = parse_with_dir(cmd, argc, argv, &fs, &dir);
    if (r >= 0) return r;
    if (!dir || !out || !tok_path) return cli_fail(cmd, "DIR, --tokenizer TOK.gguf and -o PREFIX are required"), 2;
    if (words && cli_flag_given(&fs, &image_rows))
        return cli_fail(cmd, "--image-rows with --images-as-text: pictures in words take no image rows"), 2;
    vs_error err = {0};
    vs_tokenizer *tok = vs_tokenizer_load(tok_path, &err);
    if (!tok) return cli_fail_err(cmd, &err);
    vs_world_dataset *d = vs_world_load(dir, split, VS_WORLD_ALL_SUITES, &err);
    if (!d) {
        vs_tokenizer_free(tok);
        return cli_fail_err(cmd, &err);
    }
    vs_outfile f[ROWS_N_FILES];
    memset(f, 0, sizeof(f));
    char path[4096];
    vs_status st = VS_OK;
    for (int i = 0; i < ROWS_N_FILES && st == VS_OK; i++) {
        if ((size_t)snprintf(path, sizeof(path), "%s.%s", out, k_rows_ext[i]) >= sizeof(path))
            st = vs_error_set(&err, VS_ERR_INVALID, "-o %s: path too long", out);
        else
            st = vs_outfile_open(&f[i], path, &err);
    }
    int64_t off = 0, answer_rows = 0;
    if (st == VS_OK) fwrite(&off, sizeof(off), 1, f[ROWS_OFFSETS].f);
    for (int64_t i = 0; i < d->n && st == VS_OK; i++) {
        const vs_world_sample *s = &d->samples[i];
        vs_train_example ex;
        if ((st = words ? vs_train_encode_words(s, tok, &ex, &err) : vs_train_encode(s, tok, image_rows, &ex, &err)) !=
            VS_OK) {
            vs_error e2 = err;
            vs_error_set(&err, st, "%s: %s", s->id, e2.msg);
            break;
        }
        int32_t turns[2 * VS_WORLD_MAX_TURNS], query[VS_WORLD_MAX_TURNS];
        for (int t = 0; t < VS_WORLD_MAX_TURNS; t++) {
            const bool in = t < ex.n_turns;
            turns[2 * t] = in ? ex.turn_start[t] : -1;
            turns[2 * t + 1] = in ? ex.turn_end[t] : -1;
            query[t] = in ? (int32_t)s->turns[t].query.type : -1;
        }
        fwrite(ex.tokens, sizeof(int32_t), (size_t)ex.n_rows, f[ROWS_TOKENS].f);
        fwrite(ex.answer, 1, (size_t)ex.n_rows, f[ROWS_ANSWER].f);
        off += ex.n_rows, answer_rows += ex.n_answer;
        fwrite(&off, sizeof(off), 1, f[ROWS_OFFSETS].f);
        fwrite(turns, sizeof(turns), 1, f[ROWS_TURNS].f);
        fwrite(query, sizeof(query), 1, f[ROWS_QUERY].f);
        vs_train_example_free(&ex);
    }
    for (int i = 0; i < ROWS_N_FILES; i++) {
        if (st == VS_OK) st = vs_outfile_commit(&f[i], &err);
        else vs_outfile_abort(&f[i]);
    }
    if (st == VS_OK) {
        snprintf(path, sizeof(path), "%s.json", out);
        st = rows_write_json(path, dir, split, tok_path, d->n, off, answer_rows, vs_tokenizer_n_vocab(tok),
                             image_rows, words, &err);
    }
    if (st == VS_OK)
        printf("%s split '%s': %lld samples, %lld rows (%lld answer rows) -> %s.{tokens.i32,answer.u8,offsets.i64,"
               "turns.i32,query.i32,json}\n",
               dir, split, (long long)d->n, (long long)off, (long long)answer_rows, out);
    vs_world_dataset_free(d);
    vs_tokenizer_free(tok);
    return st == VS_OK ? 0 : cli_fail_err(cmd, &err);
}

/* ---------------------------------------------------------------------------------------------- */
/* distill: the target's answers for MASSV's self-distillation (distill.h) */

static void distill_usage(FILE *f) {
    fprintf(
        f,
        "usage: vlmspec data distill --model T.gguf --mmproj T-mmproj.gguf --data DIR --out FILE [options]\n"
        "The target answers the training prompts the drafter recipes keep (single-image and text-only\n"
        "conversations, new-image second turns cut; a second turn sees the target's own first answer)\n"
        "once per sampling setting, written as JSON Lines: a header with every setting, then one record\n"
        "per (conversation, setting). Resumable: a rerun with the same flags appends after the last\n"
        "complete record (docs/training.md).\n"
        "  --model FILE       the target LM (its tokenizer is used)\n"
        "  --mmproj FILE      the target's mmproj\n"
        "  --data DIR         the world directory\n"
        "  --out FILE         the distill file (created, or continued)\n"
        "  --split S          split to answer (default train)\n"
        "  --suites LIST      suites (default all; multi-image suites have nothing to answer)\n"
        "  --limit N          conversations per suite, the first in file order (default 0: all)\n"
        "  --temps LIST       sampling temperatures (default 0,0.7,1.0; 0 = greedy)\n"
        "  --top-p P          top-p of every setting (default 0.9)\n"
        "  -n, --max-tokens N per answer (default 192; also --n-predict)\n"
        "  --seed S           answer k is sampled with seed S + k (default 1)\n"
        "  -t, --threads N    threads (default 2)\n"
        "  --max-jobs N       stop after N new records (default 0: no limit)\n"
        "  --time-limit SEC   stop after SEC seconds (default 0: no limit)\n"
        "  -q, --quiet        no progress line\n");
}

typedef struct distill_args {
    const char *model, *mmproj, *data, *out, *split, *suites, *temps;
    double top_p, time_limit;
    int64_t limit, max_jobs;
    uint64_t seed;
    int max_tokens, threads;
    bool quiet;
} distill_args;

/* --limit / --max-jobs N: int64_t in [0, INT64_MAX] (a double range cannot hold INT64_MAX). */
static bool parse_count(const char *cmd, const char *flag, const char *v, void *dst) {
    return cli_parse_i64(cmd, flag, v, 0, INT64_MAX, (int64_t *)dst);
}

/* Returns -1 when the options are fine, else the exit status. */
static int distill_parse(int argc, char **argv, distill_args *a) {
    memset(a, 0, sizeof(*a));
    a->split = "train", a->suites = "all", a->temps = "0,0.7,1.0";
    a->top_p = 0.9, a->seed = 1, a->max_tokens = 192, a->threads = 2;
    cli_flags fs = {0};
    cli_flag_add(&fs, "--model", CLI_STR, &a->model, 0, 0);
    cli_flag_add(&fs, "--mmproj", CLI_STR, &a->mmproj, 0, 0);
    cli_flag_add(&fs, "--data", CLI_STR, &a->data, 0, 0);
    cli_flag_add(&fs, "--out", CLI_STR, &a->out, 0, 0);
    cli_flag_add(&fs, "--split", CLI_STR, &a->split, 0, 0);
    cli_flag_add(&fs, "--suites", CLI_STR, &a->suites, 0, 0);
    cli_flag_fn_add(&fs, "--limit", parse_count, &a->limit);
    cli_flag_add(&fs, "--temps", CLI_STR, &a->temps, 0, 0);
    cli_flag_add(&fs, "--top-p", CLI_F64, &a->top_p, 1e-6, 1);
    cli_flag_add(&fs, "-n|--max-tokens|--n-predict", CLI_INT, &a->max_tokens, 1, 1 << 16);
    cli_flag_add(&fs, "--seed", CLI_U64, &a->seed, 0, (double)INT64_MAX);
    cli_flag_add(&fs, "-t|--threads", CLI_INT, &a->threads, 1, 256);
    cli_flag_fn_add(&fs, "--max-jobs", parse_count, &a->max_jobs);
    cli_flag_add(&fs, "--time-limit", CLI_F64, &a->time_limit, 0, 1e9);
    cli_flag_add(&fs, "-q|--quiet", CLI_BOOL, &a->quiet, 0, 0);
    const int r = cli_flags_parse("data distill", argc, argv, &fs, distill_usage);
    if (r >= 0) return r;
    if (!a->model || !a->mmproj || !a->data || !a->out)
        return cli_fail("data distill", "--model, --mmproj, --data and --out are required"), 2;
    return -1;
}

static int cmd_distill(int argc, char **argv) {
    const char *cmd = "data distill";
    distill_args a;
    const int r = distill_parse(argc, argv, &a);
    if (r >= 0) return r;
    vs_distill_opts o;
    memset(&o, 0, sizeof(o));
    vs_distill_header *h = &o.h;
    if (strlen(a.model) >= sizeof(h->target) || strlen(a.mmproj) >= sizeof(h->mmproj) ||
        strlen(a.data) >= sizeof(h->data) || strlen(a.split) >= sizeof(h->split) ||
        strlen(a.suites) >= sizeof(h->suites))
        return cli_fail(cmd, "a path or list is too long"), 2;
    snprintf(h->target, sizeof(h->target), "%s", a.model);
    snprintf(h->mmproj, sizeof(h->mmproj), "%s", a.mmproj);
    snprintf(h->data, sizeof(h->data), "%s", a.data);
    snprintf(h->split, sizeof(h->split), "%s", a.split);
    snprintf(h->suites, sizeof(h->suites), "%s", a.suites);
    h->limit = a.limit, h->max_tokens = a.max_tokens, h->seed = a.seed;
    vs_error err = {0};
    if (vs_distill_parse_temps(a.temps, (float)a.top_p, h, &err)) return cli_fail_err(cmd, &err), 2;
    o.out = a.out, o.threads = a.threads, o.max_jobs = a.max_jobs, o.time_limit = a.time_limit, o.quiet = a.quiet;
    vs_distill_stats st;
    if (vs_distill_run(&o, &st, &err) != VS_OK) return cli_fail_err(cmd, &err);
    printf(
        "distill: %s: %lld of %lld records (%lld were there, %lld written now: %lld tokens in %.1f s, %.1f "
        "tokens/s; %lld answers cut by --max-tokens)\n",
        a.out, (long long)(st.done + st.written), (long long)st.jobs, (long long)st.done, (long long)st.written,
        (long long)st.tokens, st.seconds, st.seconds > 0 ? st.tokens / st.seconds : 0.0,
        (long long)st.no_eos);
    if (st.done + st.written < st.jobs)
        printf("distill: not finished: run again with the same flags to continue\n");
    return 0;
}

int vs_cmd_data(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "gen")) return cmd_gen(argc - 1, argv + 1);
    if (!strcmp(argv[1], "stats")) return cmd_stats(argc - 1, argv + 1);
    if (!strcmp(argv[1], "preview")) return cmd_preview(argc - 1, argv + 1);
    if (!strcmp(argv[1], "check")) return cmd_check(argc - 1, argv + 1);
    if (!strcmp(argv[1], "rows")) return cmd_rows(argc - 1, argv + 1);
    if (!strcmp(argv[1], "distill")) return cmd_distill(argc - 1, argv + 1);
    fprintf(stderr, "vlmspec data: unknown subcommand '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
