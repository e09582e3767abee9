/* world: the generated multimodal world and the BPE trainer.
 *  - same seed -> byte-identical dataset directory;
 *  - test splits of two seeds share no content; train and test of one seed share no content;
 *  - the checker re-derives every stored short answer and accepts every reference answer (100%),
 *    and rejects corrupted answers (wrong colour, shape, size, position, count / value, word, label,
 *    yes/no, glyph phrase, object set, story ending);
 *  - every PNG decodes (stb_image through vs_image_load) to exactly the rendered scene;
 *  - the loader rejects malformed records naming file and line;
 *  - answers are 40-150 tokens with varied phrasing;
 *  - the BPE trainer's incremental merges equal a naive recount-everything trainer; the GGUF it writes
 *    loads in the tokenizer module, which reproduces the trainer's own encoding token for token and
 *    round-trips every corpus string;
 *  - the CLI (data gen / check / stats / preview, tokenizer train) runs.
 * Prints the generation rate (samples per second, one core) and average tokens per answer. */
#include <ctype.h>
#include <dirent.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bpe_train.h"
#include "gguf.h"
#include "image.h"
#include "testutil.h"
#include "tokenizer.h"
#include "world.h"

static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---------------------------------------------------------------------------------------------- */
/* directory hashing */

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Hash of every file under dir (relative names and contents, in sorted order); *n_files counted. */
static uint64_t hash_tree(const char *root, const char *rel, uint64_t h, int *n_files) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", root, rel);
    DIR *d = opendir(path);
    if (!d) return h ^ 0xdead;
    char **names = NULL;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        names = realloc(names, (n + 1) * sizeof(char *));
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof(char *), cmp_str);
    for (size_t i = 0; i < n; i++) {
        char r2[2048];
        snprintf(r2, sizeof(r2), "%s%s%s", rel, rel[0] ? "/" : "", names[i]);
        snprintf(path, sizeof(path), "%s/%s", root, r2);
        struct stat st;
        stat(path, &st);
        h = fnv(h, r2, strlen(r2) + 1);
        if (S_ISDIR(st.st_mode)) {
            h = hash_tree(root, r2, h, n_files);
        } else {
            uint8_t *buf;
            size_t sz;
            if (vs_read_file(path, &buf, &sz, NULL) == VS_OK) {
                h = fnv(h, buf, sz);
                vs_free(buf);
            }
            (*n_files)++;
        }
        free(names[i]);
    }
    free(names);
    return h;
}

/* ---------------------------------------------------------------------------------------------- */
/* corrupting answers */

/* Replaces whole-token occurrences of `from` (letters/digits runs; case-insensitive if ci) by `to`.
 * Returns a malloc'd string; *count gets the number of replacements. */
static char *replace_word(const char *text, const char *from, const char *to, bool ci, int *count) {
    size_t fl = strlen(from), tl = strlen(to), n = strlen(text);
    char *out = malloc(n * (tl + 1) + 1), *o = out;
    *count = 0;
    for (size_t i = 0; i < n;) {
        bool start = i == 0 || !isalnum((unsigned char)text[i - 1]);
        bool match = start && i + fl <= n && (ci ? strncasecmp(text + i, from, fl) == 0 : strncmp(text + i, from, fl) == 0) &&
                     (i + fl == n || !isalnum((unsigned char)text[i + fl]));
        if (match) {
            memcpy(o, to, tl);
            o += tl;
            i += fl;
            (*count)++;
        } else {
            *o++ = text[i++];
        }
    }
    *o = 0;
    return out;
}

static char *replace2(char *t, const char *from, const char *to, bool ci, int *count) {
    int c;
    char *r = replace_word(t, from, to, ci, &c);
    free(t);
    *count += c;
    return r;
}

static bool color_used(const vs_world_sample *s, int c) {
    for (int i = 0; i < s->n_images; i++)
        for (int k = 0; k < s->scenes[i].n_objects; k++)
            if (s->scenes[i].objects[k].color == c) return true;
    return false;
}

static bool shape_used(const vs_world_sample *s, int sh) {
    for (int i = 0; i < s->n_images; i++)
        for (int k = 0; k < s->scenes[i].n_objects; k++)
            if (s->scenes[i].objects[k].shape == sh) return true;
    return false;
}

static const char *const plural[8] = {"circles", "squares", "triangles", "stars", "crosses", "diamonds", "rings", "hexagons"};
static const char *const numw[21] = {"zero",   "one",     "two",     "three",     "four",     "five",    "six",
                                     "seven",  "eight",   "nine",    "ten",       "eleven",   "twelve",  "thirteen",
                                     "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"};

/* A corrupted version of turn t's reference answer (NULL if this sample offers no corruption). */
static char *corrupt(const vs_world_sample *s, int t, const char *expected, vs_world_check_type ct) {
    char *x = strdup(s->turns[t].assistant);
    int n = 0;
    switch (ct) {
    case VS_CHECK_YESNO:
        x = replace2(x, "yes", "\x01", true, &n);
        x = replace2(x, "no", "yes", true, &n);
        x = replace2(x, "\x01", "no", false, &n);
        break;
    case VS_CHECK_NUMBER: {
        long long v = atoll(expected);
        char a[32], b[32];
        snprintf(a, sizeof(a), "%lld", v);
        snprintf(b, sizeof(b), "%lld", v + 1);
        x = replace2(x, a, b, false, &n);
        if (v >= 0 && v <= 20) x = replace2(x, numw[v], v + 1 <= 20 ? numw[v + 1] : b, true, &n);
        break;
    }
    case VS_CHECK_COLOR:
        for (int c = 0; c < VS_WORLD_N_COLORS; c++)
            if (!color_used(s, c) && strcmp(vs_world_color_name(c), expected)) {
                x = replace2(x, expected, vs_world_color_name(c), true, &n);
                break;
            }
        break;
    case VS_CHECK_SHAPE:
        for (int sh = 0; sh < VS_WORLD_N_SHAPES; sh++)
            if (!shape_used(s, sh)) {
                int e = -1;
                for (int k = 0; k < VS_WORLD_N_SHAPES; k++)
                    if (!strcmp(vs_world_shape_name(k), expected)) e = k;
                x = replace2(x, expected, vs_world_shape_name(sh), true, &n);
                if (e >= 0) x = replace2(x, plural[e], plural[sh], true, &n);
                break;
            }
        break;
    case VS_CHECK_SIZE:
        x = replace2(x, expected, !strcmp(expected, "small") ? "large" : "small", true, &n);
        break;
    case VS_CHECK_POSITION:
    case VS_CHECK_STORY: {
        const char *other = !strcmp(expected, "top left") ? "bottom right" : "top left";
        x = replace2(x, expected, other, true, &n);
        break;
    }
    case VS_CHECK_WORD: {
        if (!strcmp(expected, "warm") || !strcmp(expected, "cool")) {
            x = replace2(x, expected, !strcmp(expected, "warm") ? "cool" : "warm", false, &n);
        } else if (isupper((unsigned char)expected[0]) && isupper((unsigned char)expected[1])) {
            x = replace2(x, expected, strcmp(expected, "LAMP") ? "LAMP" : "OCEAN", false, &n); /* glyph lexicon */
        } else {
            const vs_world_query *q = &s->turns[t].query;
            const char *other = NULL;
            if (q->type == VS_Q_FACT_CMP) {
                /* the other entity of the comparison, found as the capitalised name that is not expected */
                other = strcmp(expected, "Sistan") ? "Sistan" : "Gostan";
                x = replace2(x, expected, other, false, &n);
                break;
            }
            /* an attribute value of another entity: take a fixed alternative spelling from the
             * encyclopedia's own words by swapping with a known different value */
            static const char *const alts[] = {"copper", "wool", "otter", "heron", "Shimor", "Thoven", "Diomar", "Tranov"};
            for (size_t k = 0; k < sizeof(alts) / sizeof(alts[0]); k++)
                if (strcasecmp(alts[k], expected)) {
                    bool same_kind = (islower((unsigned char)alts[k][0]) != 0) == (islower((unsigned char)expected[0]) != 0);
                    if (!same_kind) continue;
                    other = alts[k];
                    break;
                }
            if (other) x = replace2(x, expected, other, true, &n);
        }
        break;
    }
    case VS_CHECK_PHRASE: {
        char first[32];
        sscanf(expected, "%31s", first);
        if (isdigit((unsigned char)first[0])) {
            char b[40];
            snprintf(b, sizeof(b), "%lld", atoll(first) + 1);
            x = replace2(x, first, b, false, &n);
        } else {
            x = replace2(x, first, strcmp(first, "LAMP") ? "LAMP" : "OCEAN", false, &n);
        }
        break;
    }
    case VS_CHECK_LABEL: {
        const vs_world_scene *sc = NULL; /* the chart (follow-ups name no image) */
        for (int i = 0; i < s->n_images && !sc; i++)
            if (s->scenes[i].kind == VS_SCENE_CHART) sc = &s->scenes[i];
        if (!sc) break;
        for (int b = 0; b < sc->n_bars; b++)
            if (sc->bars[b].label != expected[0]) {
                char to[2] = {sc->bars[b].label, 0};
                x = replace2(x, expected, to, false, &n);
                break;
            }
        break;
    }
    case VS_CHECK_BARS: {
        /* the first bar's value one off */
        char label, from[16], to[16];
        int v;
        if (sscanf(expected, "%c %d", &label, &v) != 2) break;
        snprintf(from, sizeof(from), "%c %d", label, v);
        snprintf(to, sizeof(to), "%c %d", label, v == 9 ? 8 : v + 1);
        x = replace2(x, from, to, false, &n);
        break;
    }
    case VS_CHECK_SET: {
        /* recolour the first expected pair's colour everywhere to a colour no image shows */
        char col[16];
        sscanf(expected, "%15s", col);
        for (int c = 0; c < VS_WORLD_N_COLORS; c++)
            if (!color_used(s, c)) {
                x = replace2(x, col, vs_world_color_name(c), true, &n);
                break;
            }
        break;
    }
    }
    if (n == 0) {
        free(x);
        return NULL;
    }
    return x;
}

/* ---------------------------------------------------------------------------------------------- */

static vs_world_dataset *load(const char *dir, const char *split) {
    vs_error err = {0};
    vs_world_dataset *d = vs_world_load(dir, split, VS_WORLD_ALL_SUITES, &err);
    VT_REQUIRE(d, "load %s/%s: %s", dir, split, err.msg);
    return d;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static uint64_t *keys_of(const vs_world_dataset *d) {
    uint64_t *k = malloc((size_t)(d->n ? d->n : 1) * sizeof(uint64_t));
    for (int64_t i = 0; i < d->n; i++) k[i] = vs_world_content_key(&d->samples[i]);
    qsort(k, (size_t)d->n, sizeof(uint64_t), cmp_u64);
    return k;
}

static int64_t common_keys(const uint64_t *a, int64_t na, const uint64_t *b, int64_t nb) {
    int64_t i = 0, j = 0, c = 0;
    while (i < na && j < nb) {
        if (a[i] < b[j]) i++;
        else if (a[i] > b[j]) j++;
        else c++, i++, j++;
    }
    return c;
}

static void test_checker(const vs_world_dataset *d, int *corrupt_tested, int *corrupt_caught) {
    int64_t turns = 0, agree = 0;
    for (int64_t i = 0; i < d->n; i++) {
        const vs_world_sample *s = &d->samples[i];
        for (int t = 0; t < s->n_turns; t++) {
            vs_world_verdict v;
            char exp[128];
            vs_error err = {0};
            turns++;
            vs_status st = vs_world_expected(s, t, exp, sizeof(exp), &err);
            bool ok = st == VS_OK && !strcmp(exp, s->turns[t].answer) && vs_world_check(s, t, s->turns[t].assistant, &v);
            if (ok) agree++;
            else
                VT_CHECK(false, "%s turn %d: stored '%s' derived '%s' (%s) read '%s'", s->id, t, s->turns[t].answer, exp, err.msg,
                         v.found);
            /* nonsense is never correct */
            VT_CHECK(!vs_world_check(s, t, "", NULL), "%s: empty text accepted", s->id);
            VT_CHECK(!vs_world_check(s, t, "I am not sure what to say about this.", NULL), "%s: evasive text accepted", s->id);
            char *bad = corrupt(s, t, exp, s->turns[t].check);
            if (bad) {
                corrupt_tested[s->turns[t].check]++;
                bool acc = vs_world_check(s, t, bad, &v);
                if (!acc) corrupt_caught[s->turns[t].check]++;
                else
                    VT_CHECK(false, "%s turn %d (%s): corrupted answer accepted (expected '%s', read '%s'):\n  %s", s->id, t,
                             vs_world_check_name(s->turns[t].check), exp, v.found, bad);
                free(bad);
            }
        }
    }
    printf("  %s/%s: checker agrees on %lld of %lld turns\n", d->dir, d->split, (long long)agree, (long long)turns);
    VT_CHECK(agree == turns, "checker agreement %lld/%lld", (long long)agree, (long long)turns);
}

/* The bars rule on a look chart's transcript turn: the bars in order, each with its value, and nothing
 * else; a wrong order, a missing, repeated or foreign bar, or a wrong value fails. */
static void test_bars_rule(const vs_world_dataset *d) {
    const vs_world_sample *s = NULL;
    for (int64_t i = 0; i < d->n && !s; i++)
        if (d->samples[i].scenes[0].kind == VS_SCENE_CHART && d->samples[i].scenes[0].n_bars >= 3) s = &d->samples[i];
    VT_REQUIRE(s, "no look chart with 3 bars or more");
    const vs_world_scene *sc = &s->scenes[0];
    const int t = s->n_turns - 1, n = sc->n_bars;
    char labels[VS_WORLD_MAX_BARS + 1] = {0};
    for (int b = 0; b < n; b++) labels[b] = sc->bars[b].label;
    char foreign = 'B'; /* the first letter that may label a bar and labels none here */
    while (foreign == 'I' || strchr(labels, foreign)) foreign++;
    char text[256];
    for (int variant = 0; variant < 6; variant++) {
        text[0] = 0;
        for (int k = 0; k < n + (variant == 3 || variant == 4); k++) {
            int b = variant == 1 ? (k + 1) % n : k;              /* 1: rotated order */
            if (variant == 2 && k == n - 1) break;               /* 2: the last bar missing */
            if (variant == 3 && k == n) b = 0;                   /* 3: the first bar again */
            char label = sc->bars[b < n ? b : 0].label;
            int value = sc->bars[b < n ? b : 0].value;
            if (variant == 4 && k == n) label = foreign, value = 5; /* 4: a bar the chart lacks */
            if (variant == 5 && k == 1) value = value == 9 ? 8 : value + 1; /* 5: a wrong value */
            size_t m = strlen(text);
            snprintf(text + m, sizeof(text) - m, "%s%c %d blue", k ? "; " : "", label, value);
        }
        vs_world_verdict v;
        bool ok = vs_world_check(s, t, text, &v);
        VT_CHECK(ok == (variant == 0), "%s bars variant %d: \"%s\" read '%s' -> %s", s->id, variant, text, v.found,
                 ok ? "accepted" : "rejected");
    }
}

/* An opt-in suite (drill, look) generated alone into tmp/name: not in the default configuration, and the
 * checker agrees with every reference answer of its train and test splits. */
static void opt_in_suite(const char *tmp, const char *name, vs_world_suite suite, uint64_t seed, int n_train,
                         int *tested, int *caught, vs_world_dataset **tr, vs_world_dataset **te) {
    char dir[1100];
    snprintf(dir, sizeof(dir), "%s/%s", tmp, name);
    vs_world_config c;
    vs_world_config_default(&c);
    VT_CHECK(!(c.suites & VS_WORLD_SUITE_BIT(suite)), "%s is generated by default", name);
    c.seed = seed, c.n_train = n_train, c.n_test = 100, c.suites = VS_WORLD_SUITE_BIT(suite);
    vs_error err = {0};
    VT_REQUIRE(vs_world_generate(&c, dir, &err) == VS_OK, "generate %s: %s", dir, err.msg);
    *tr = load(dir, "train"), *te = load(dir, "test");
    test_checker(*tr, tested, caught);
    test_checker(*te, tested, caught);
}

/* Train and test of an opt-in suite share no content; both are freed. */
static void opt_in_done(const char *name, vs_world_dataset *tr, vs_world_dataset *te) {
    uint64_t *k1 = keys_of(te), *k2 = keys_of(tr);
    VT_CHECK(common_keys(k1, te->n, k2, tr->n) == 0, "%s train and test overlap", name);
    free(k1);
    free(k2);
    vs_world_dataset_free(tr);
    vs_world_dataset_free(te);
}

/* vs_world_ground_mask over every turn of d: each set bit is a patch labelled by what the query names
 * (a matching object, the line read, a named bar's body, label or value), absent objects and other
 * queries give none, and every kind of grounded question gets masks. */
static void test_ground_mask(const vs_world_dataset *d) {
    int grounded[VS_WORLD_N_QUERY_TYPES] = {0}, asked[VS_WORLD_N_QUERY_TYPES] = {0}, wrong = 0, absent_grounded = 0;
    vs_error err = {0};
    for (int64_t i = 0; i < d->n; i++) {
        const vs_world_sample *sm = &d->samples[i];
        for (int t = 0; t < sm->n_turns; t++) {
            const vs_world_query *q = &sm->turns[t].query;
            if (q->image < 0 || q->image >= sm->n_images) continue;
            const vs_world_scene *sc = &sm->scenes[q->image];
            uint64_t mask = 0;
            asked[q->type]++;
            if (!vs_world_ground_mask(sc, q, 64, 8, &mask)) {
                wrong += mask != 0;
                continue;
            }
            grounded[q->type]++;
            const char *ans = sm->turns[t].answer;
            absent_grounded += (q->type == VS_Q_EXISTS && !strcmp(ans, "no")) || (q->type == VS_Q_COUNT && !strcmp(ans, "0"));
            vs_world_patch_label pl[64];
            VT_REQUIRE(vs_world_patch_labels(sc, 64, 8, pl, &err) == VS_OK, "%s", err.msg);
            for (int p = 0; p < 64; p++) {
                if (!(mask >> p & 1)) continue;
                const vs_world_patch_label *l = &pl[p];
                bool ok = false;
                if (sc->kind == VS_SCENE_SHAPES)
                    for (int o = 0; o < sc->n_objects; o++) {
                        const vs_world_object *ob = &sc->objects[o];
                        ok |= (vs_world_sel_matches(ob, q->sel) || (q->type == VS_Q_RELATION && vs_world_sel_matches(ob, q->sel2))) &&
                              l->shape == ob->shape && l->color == ob->color && l->size == ob->size;
                    }
                else if (sc->kind == VS_SCENE_GLYPH) {
                    const int8_t want = q->type == VS_Q_READ_LINE ? sc->lines[q->index].color : q->sel.color;
                    ok = l->ch >= 0 && l->color == want;
                } else
                    for (int b = 0; b < sc->n_bars; b++) {
                        const vs_world_bar *bar = &sc->bars[b];
                        bool named = bar->label == q->label || (q->type != VS_Q_BAR_VALUE && bar->label == q->label2);
                        if (q->type == VS_Q_BAR_MAX || q->type == VS_Q_BAR_MIN) named = !strcmp(ans, (char[2]){bar->label, 0});
                        ok |= named && ((l->color == bar->color && l->value == bar->value) || l->ch == bar->label - 'A' ||
                                        l->ch == 26 + bar->value);
                    }
                wrong += !ok;
            }
        }
    }
    static const vs_world_query_type must[] = {VS_Q_COUNT, VS_Q_COLOR, VS_Q_SHAPE, VS_Q_SIZE, VS_Q_POSITION, VS_Q_EXISTS,
                                               VS_Q_READ_LINE, VS_Q_READ_COLOR, VS_Q_BAR_VALUE, VS_Q_BAR_MAX, VS_Q_BAR_CMP};
    for (size_t k = 0; k < sizeof(must) / sizeof(must[0]); k++)
        VT_CHECK(grounded[must[k]] > 0, "no %s question grounded", vs_world_query_name(must[k]));
    VT_CHECK(grounded[VS_Q_DESCRIBE] == 0 && grounded[VS_Q_LINES] == 0 && grounded[VS_Q_BARS] == 0 && grounded[VS_Q_LINE_COUNT] == 0,
             "whole-picture questions grounded");
    VT_CHECK(wrong == 0, "%d grounded patches not labelled by what their query names", wrong);
    VT_CHECK(absent_grounded == 0, "%d questions about absent objects grounded", absent_grounded);
    printf("  ground masks: color %d/%d, shape %d/%d, exists %d/%d, read_line %d/%d, bar_value %d/%d grounded\n",
           grounded[VS_Q_COLOR], asked[VS_Q_COLOR], grounded[VS_Q_SHAPE], asked[VS_Q_SHAPE], grounded[VS_Q_EXISTS],
           asked[VS_Q_EXISTS], grounded[VS_Q_READ_LINE], asked[VS_Q_READ_LINE], grounded[VS_Q_BAR_VALUE], asked[VS_Q_BAR_VALUE]);
}

/* Character masks: every character of every line covers a patch; a line's characters run left to
 * right; the patches a read_line question is grounded on are covered by that line's characters; other
 * scenes have none. */
static void test_glyph_masks(const vs_world_dataset *d) {
    int scenes = 0, chars = 0, bad = 0, others = 0;
    for (int64_t i = 0; i < d->n; i++)
        for (int im = 0; im < d->samples[i].n_images; im++) {
            const vs_world_scene *sc = &d->samples[i].scenes[im];
            uint64_t m[VS_WORLD_MAX_LINES * 16];
            bool got = vs_world_glyph_masks(sc, 64, 8, m);
            if (sc->kind != VS_SCENE_GLYPH) {
                for (int c = 0; c < VS_WORLD_MAX_LINES * 16; c++) others += m[c] != 0;
                others += got;
                continue;
            }
            scenes++;
            bad += !got;
            for (int l = 0; l < sc->n_lines; l++) {
                int n = (int)strlen(sc->lines[l].text), prev_col = -1;
                uint64_t line = 0;
                for (int k = 0; k < 16; k++) {
                    uint64_t mk = m[16 * l + k];
                    if (k >= n) {
                        bad += mk != 0;
                        continue;
                    }
                    chars++, bad += mk == 0;
                    int col = 8; /* leftmost column covered */
                    for (int p = 0; p < 64; p++)
                        if (mk >> p & 1) col = VS_MIN(col, p % 8);
                    bad += col < prev_col, prev_col = col, line |= mk;
                }
                vs_world_query q = {.type = VS_Q_READ_LINE, .image = 0, .index = l};
                uint64_t g = 0;
                if (vs_world_ground_mask(sc, &q, 64, 8, &g)) bad += (g & ~line) != 0;
            }
            for (int l = sc->n_lines; l < VS_WORLD_MAX_LINES; l++)
                for (int k = 0; k < 16; k++) bad += m[16 * l + k] != 0;
        }
    VT_CHECK(scenes > 0 && chars > 0, "no glyph scene to test");
    VT_CHECK(bad == 0, "%d glyph masks wrong (a character covering nothing, out of order or outside its line)", bad);
    VT_CHECK(others == 0, "%d character masks on scenes without text", others);
    printf("  glyph masks: %d characters of %d scenes\n", chars, scenes);
}

static void test_images(const vs_world_dataset *d) {
    int n = 0, same = 0;
    size_t S = (size_t)d->image_size;
    uint8_t *rgb = malloc(S * S * 3);
    for (int64_t i = 0; i < d->n; i++) {
        const vs_world_sample *s = &d->samples[i];
        for (int k = 0; k < s->n_images; k++) {
            vs_image im;
            vs_error err = {0};
            n++;
            if (vs_image_load(&im, s->images[k], &err) != VS_OK) {
                VT_CHECK(false, "%s does not decode: %s", s->images[k], err.msg);
                continue;
            }
            VT_REQUIRE(vs_world_render(&s->scenes[k], d->image_size, rgb, &err) == VS_OK, "render: %s", err.msg);
            bool eq = im.w == (int)S && im.h == (int)S && memcmp(im.rgb, rgb, S * S * 3) == 0;
            same += eq;
            VT_CHECK(eq, "%s: decoded pixels differ from the rendered scene", s->images[k]);
            vs_image_free(&im);
        }
    }
    free(rgb);
    printf("  %d images decode to exactly their rendered scene (%d)\n", same, n);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    VT_REQUIRE(f, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

static void test_bad_records(const char *tmp, const char *good_dir) {
    char dir[1024], path[1200];
    snprintf(dir, sizeof(dir), "%s/bad", tmp);
    mkdir(dir, 0755);
    /* a valid manifest and one valid record to start from */
    snprintf(path, sizeof(path), "%s/world.json", good_dir);
    uint8_t *man;
    size_t n;
    VT_REQUIRE(vs_read_file(path, &man, &n, NULL) == VS_OK, "manifest");
    snprintf(path, sizeof(path), "%s/world.json", dir);
    write_text(path, (const char *)man);
    vs_free(man);
    vs_world_dataset *d = load(good_dir, "test");
    size_t len;
    char *good = vs_world_sample_to_json(&d->samples[0], &len);
    struct {
        const char *from, *to, *why;
    } cases[] = {
        {"\"suite\":\"describe\"", "\"suite\":\"nonsense\"", "unknown suite"},
        {"<image> For", "For", "image marker count"},
        {"\"shape\":\"", "\"shape\":\"blob", "unknown shape"},
        {"\"turns\":[", "\"turns\":[1,", "turn not an object"},
        {"\"noise\":", "\"noise\":-", "negative noise"},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const char *at = strstr(good, cases[c].from);
        VT_REQUIRE(at, "test record lacks %s", cases[c].from);
        char *bad = malloc(len + 64);
        size_t pre = (size_t)(at - good);
        memcpy(bad, good, pre);
        strcpy(bad + pre, cases[c].to);
        strcat(bad, at + strlen(cases[c].from));
        char body[65536];
        snprintf(body, sizeof(body), "%s\n%s\n", good, bad);
        snprintf(path, sizeof(path), "%s/test.jsonl", dir);
        write_text(path, body);
        vs_error err = {0};
        vs_world_dataset *b = vs_world_load(dir, "test", VS_WORLD_ALL_SUITES, &err);
        VT_CHECK(!b && err.code == VS_ERR_FORMAT && strstr(err.msg, "test.jsonl:2"), "%s: %s", cases[c].why, err.msg);
        vs_world_dataset_free(b);
        free(bad);
    }
    /* truncated line */
    char body[65536];
    snprintf(body, sizeof(body), "%s\n%.*s\n", good, (int)(len / 2), good);
    write_text(path, body);
    vs_error err = {0};
    vs_world_dataset *b = vs_world_load(dir, "test", VS_WORLD_ALL_SUITES, &err);
    VT_CHECK(!b && strstr(err.msg, "test.jsonl:2") && strstr(err.msg, "invalid JSON"), "truncated record: %s", err.msg);
    vs_world_dataset_free(b);
    /* a manifest seed no uint64_t holds is a format error (it was an out-of-range float conversion,
     * found by the libFuzzer dataset target) */
    static const char *const seeds[] = {"44444444444444444444444444444447", "-1", "1e300"};
    snprintf(body, sizeof(body), "%s\n", good);
    write_text(path, body);
    for (size_t k = 0; k < VS_ARRAY_LEN(seeds); k++) {
        char man2[512], mpath[1200];
        snprintf(man2, sizeof(man2), "{\"format\":\"vlmspec-world\",\"version\":1,\"seed\":%s,\"image_size\":64}\n",
                 seeds[k]);
        snprintf(mpath, sizeof(mpath), "%s/world.json", dir);
        write_text(mpath, man2);
        b = vs_world_load(dir, "test", VS_WORLD_ALL_SUITES, &err);
        VT_CHECK(!b && err.code == VS_ERR_FORMAT && strstr(err.msg, "not an unsigned 64-bit integer"), "seed %s: %s",
                 seeds[k], b ? "loaded" : err.msg);
        vs_world_dataset_free(b);
    }
    /* the round trip of a record through the writer is exact */
    vs_world_sample s;
    VT_CHECK(vs_world_sample_from_json(good, len, NULL, "rt", &s, &err) == VS_OK, "re-read: %s", err.msg);
    size_t len2;
    char *again = vs_world_sample_to_json(&s, &len2);
    VT_CHECK(len2 == len && !memcmp(again, good, len), "record round trip differs");
    vs_free(again);
    vs_world_sample_clear(&s);
    vs_free(good);
    vs_world_dataset_free(d);
}

static void test_language(const vs_world_dataset *d) {
    for (int su = 0; su < VS_WORLD_CAPTION; su++) {
        char openings[400][40];
        int n_open = 0, n = 0, min_w = 1 << 30, max_w = 0;
        for (int64_t i = 0; i < d->n; i++) {
            const vs_world_sample *s = &d->samples[i];
            if ((int)s->suite != su) continue;
            for (int t = 0; t < s->n_turns; t++) {
                const char *a = s->turns[t].assistant;
                int w = 0;
                bool in = false;
                for (const char *p = a; *p; p++) {
                    bool sp = isspace((unsigned char)*p);
                    if (!sp && !in) w++;
                    in = !sp;
                }
                min_w = w < min_w ? w : min_w;
                max_w = w > max_w ? w : max_w;
                /* opening = first three words, skipping grounded first words does not matter here */
                char op[40];
                int k = 0, words = 0;
                for (const char *p = a; *p && k < 39 && words < 3; p++) {
                    if (*p == ' ') words++;
                    if (words < 3) op[k++] = *p;
                }
                op[k] = 0;
                bool seen = false;
                for (int j = 0; j < n_open; j++) seen |= !strcmp(openings[j], op);
                if (!seen && n_open < 400) strcpy(openings[n_open++], op);
                for (const char *p = a; *p; p++) VT_CHECK((unsigned char)*p < 128, "%s: non-ASCII answer", s->id);
                n++;
            }
        }
        if (!n) continue;
        printf("  %-8s %3d answers, %3d words min, %3d max, %3d distinct openings\n", vs_world_suite_name((vs_world_suite)su), n, min_w,
               max_w, n_open);
        VT_CHECK(min_w >= 30 && max_w <= 130, "%s: answer lengths %d..%d words", vs_world_suite_name((vs_world_suite)su), min_w, max_w);
        VT_CHECK(n_open >= 6, "%s: only %d distinct openings: phrasing lacks variety", vs_world_suite_name((vs_world_suite)su), n_open);
    }
    /* the prompt format */
    for (int64_t i = 0; i < d->n; i++) {
        const vs_world_sample *s = &d->samples[i];
        if (s->n_turns < 2 || s->suite != VS_WORLD_VQA) continue;
        char *p = vs_world_prompt(s, 1, false);
        const char *head = "USER: <image> For the following question, provide a detailed explanation of your reasoning leading "
                           "to the answer. ";
        VT_CHECK(!strncmp(p, head, strlen(head)), "prompt opening: %.130s", p);
        VT_CHECK(strstr(p, " ASSISTANT: ") && strstr(p, "</s>USER: ") && !strcmp(p + strlen(p) - 11, " ASSISTANT:"), "prompt shape: %s", p);
        vs_free(p);
        break;
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* BPE */

typedef struct naive_word {
    int32_t sym[64];
    int n;
    int64_t count;
} naive_word;

typedef struct naive_ctx {
    naive_word *w;
    int n, cap;
} naive_ctx;

static void naive_piece(void *ctx, const char *p, size_t n) {
    naive_ctx *c = ctx;
    if (n > 64) return;
    for (int i = 0; i < c->n; i++) {
        naive_word *w = &c->w[i];
        if (w->n != (int)n) continue;
        bool eq = true;
        for (size_t k = 0; k < n && eq; k++) eq = w->sym[k] == VS_BPE_FIRST_BYTE + (uint8_t)p[k];
        if (eq) {
            w->count++;
            return;
        }
    }
    if (c->n == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 256;
        c->w = realloc(c->w, (size_t)c->cap * sizeof(naive_word));
    }
    naive_word *w = &c->w[c->n++];
    w->n = (int)n;
    w->count = 1;
    for (size_t k = 0; k < n; k++) w->sym[k] = VS_BPE_FIRST_BYTE + (uint8_t)p[k];
}

/* Recount-everything BPE: the definition the incremental trainer must match. */
static void test_bpe_naive(void) {
    const char *texts[] = {"the red circle and the red square sit in the top left", "<image> a large red circle, a small blue star!",
                           "  spaces   and\ttabs\n\nnew lines  ", "numbers 123 4567 and 89, then 123 again",
                           "it's the robot's lamp; they'll say we've seen it", "aaaa aaaa aaaaaaa bbb abab ababab",
                           "bad \xff\xfe bytes \xc3 stay bytes \xff\xfe"}; /* invalid UTF-8: gap pieces (pretok.h) */
    vs_error err = {0};
    vs_bpe_trainer *t = vs_bpe_trainer_new(&err);
    VT_REQUIRE(t, "trainer: %s", err.msg);
    naive_ctx nc = {0};
    for (int rep = 0; rep < 3; rep++)
        for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
            VT_REQUIRE(vs_bpe_add_text(t, texts[i], strlen(texts[i]), &err) == VS_OK, "add: %s", err.msg);
            /* the naive side: same special-token cut, same pre-tokeniser */
            const char *p = texts[i];
            const char *img = strstr(p, "<image>");
            if (img) {
                VT_REQUIRE(vs_bpe_pretokenize(p, (size_t)(img - p), naive_piece, &nc, &err) == VS_OK, "pretok");
                p = img + 7;
            }
            VT_REQUIRE(vs_bpe_pretokenize(p, strlen(p), naive_piece, &nc, &err) == VS_OK, "pretok: %s", err.msg);
        }
    vs_bpe_vocab v;
    VT_REQUIRE(vs_bpe_train(t, 400, 2, &v, &err) == VS_OK, "train: %s", err.msg);
    int64_t rank = 0;
    int32_t next = VS_BPE_FIRST_BYTE + 256;
    for (;; rank++) {
        int64_t best = 0;
        int32_t ba = -1, bb = -1;
        /* count all pairs */
        for (int i = 0; i < nc.n; i++)
            for (int k = 0; k + 1 < nc.w[i].n; k++) {
                int32_t a = nc.w[i].sym[k], b = nc.w[i].sym[k + 1];
                int64_t cnt = 0;
                for (int j = 0; j < nc.n; j++)
                    for (int m = 0; m + 1 < nc.w[j].n; m++)
                        if (nc.w[j].sym[m] == a && nc.w[j].sym[m + 1] == b) cnt += nc.w[j].count;
                if (cnt > best || (cnt == best && (a < ba || (a == ba && b < bb)))) best = cnt, ba = a, bb = b;
            }
        if (best < 2 || rank >= 400 - VS_BPE_FIRST_BYTE - 256) break;
        VT_CHECK(rank < v.n_merges && v.merge_left[rank] == ba && v.merge_right[rank] == bb,
                 "merge %lld: incremental (%d,%d) vs naive (%d,%d) count %lld", (long long)rank, rank < v.n_merges ? v.merge_left[rank] : -1,
                 rank < v.n_merges ? v.merge_right[rank] : -1, ba, bb, (long long)best);
        for (int i = 0; i < nc.n; i++) {
            int m = 0;
            for (int k = 0; k < nc.w[i].n; k++) {
                if (k + 1 < nc.w[i].n && nc.w[i].sym[k] == ba && nc.w[i].sym[k + 1] == bb) nc.w[i].sym[m++] = next, k++;
                else nc.w[i].sym[m++] = nc.w[i].sym[k];
            }
            nc.w[i].n = m;
        }
        next++;
    }
    VT_CHECK(rank == v.n_merges, "naive trainer made %lld merges, incremental %lld", (long long)rank, (long long)v.n_merges);
    printf("  incremental BPE == naive BPE over %lld merges\n", (long long)rank);
    free(nc.w);
    vs_bpe_vocab_free(&v);
    vs_bpe_trainer_free(t);
}

static void add_dataset_texts(vs_bpe_trainer *t, const vs_world_dataset *d) {
    vs_error err = {0};
    for (int64_t i = 0; i < d->n; i++) {
        char *p = vs_world_prompt(&d->samples[i], d->samples[i].n_turns - 1, true);
        VT_REQUIRE(vs_bpe_add_text(t, p, strlen(p), &err) == VS_OK, "add: %s", err.msg);
        vs_free(p);
    }
}

static int64_t roundtrip(const vs_tokenizer *tk, const vs_bpe_vocab *v, const char *text, int64_t *mismatch_ids, int64_t *bad_rt) {
    vs_error err = {0};
    int32_t *a = NULL, *b = NULL;
    int64_t na = 0, nb = 0;
    VT_REQUIRE(vs_tokenize_alloc(tk, text, strlen(text), false, true, &a, &na, &err) == VS_OK, "tokenize: %s", err.msg);
    VT_REQUIRE(vs_bpe_encode(v, text, strlen(text), &b, &nb, &err) == VS_OK, "encode: %s", err.msg);
    if (na != nb || (na && memcmp(a, b, (size_t)na * sizeof(int32_t)))) (*mismatch_ids)++;
    size_t len;
    char *back = vs_detokenize(tk, a, na, VS_DETOK_RENDER_SPECIAL, &len, &err);
    if (!back || len != strlen(text) || memcmp(back, text, len)) (*bad_rt)++;
    vs_free(back);
    vs_free(a);
    vs_free(b);
    return na;
}

/* pre: the trainer's pre-tokeniser; "starcoder" (single digits) also checks that no merge holds a digit. */
static void test_tokenizer(const char *tmp, const vs_world_dataset *train, const vs_world_dataset *caps, const vs_world_dataset *test,
                           vs_bpe_pre pre) {
    vs_error err = {0};
    vs_bpe_trainer *t = vs_bpe_trainer_new_pre(pre, &err);
    VT_REQUIRE(t, "trainer: %s", err.msg);
    add_dataset_texts(t, train);
    add_dataset_texts(t, caps);
    vs_bpe_vocab v, v2;
    double t0 = vs_time_now();
    VT_REQUIRE(vs_bpe_train(t, 1024, 2, &v, &err) == VS_OK, "train: %s", err.msg);
    double dt = vs_time_now() - t0;
    VT_REQUIRE(vs_bpe_train(t, 1024, 2, &v2, &err) == VS_OK, "train again: %s", err.msg);
    VT_CHECK(v.n_merges == v2.n_merges, "retraining differs in size");
    for (int64_t i = 0; i < v.n_merges && i < v2.n_merges; i++) VT_CHECK(!strcmp(v.merges[i], v2.merges[i]), "retraining differs at %lld", (long long)i);
    vs_bpe_vocab_free(&v2);
    VT_CHECK(v.n_vocab == 1024, "vocabulary %lld tokens, wanted 1024", (long long)v.n_vocab);
    printf("  BPE (%s): %lld merges in %.3f s\n", vs_bpe_pre_name(pre), (long long)v.n_merges, dt);
    if (pre == VS_BPE_PRE_DIGITS) {
        int64_t with_digit = 0;
        for (int64_t i = VS_BPE_FIRST_BYTE + 256; i < v.n_vocab; i++) with_digit += strpbrk(v.tokens[i], "0123456789") != NULL;
        printf("  merged tokens holding a digit: %lld\n", (long long)with_digit);
        VT_CHECK(with_digit == 0, "%lld merged tokens hold a digit", (long long)with_digit);
    }
    char path[1024];
    snprintf(path, sizeof(path), "%s/tok-%s.gguf", tmp, vs_bpe_pre_name(pre));
    VT_REQUIRE(vs_bpe_write_gguf(&v, path, "test", &err) == VS_OK, "write: %s", err.msg);
    /* metadata */
    vs_gguf *g = vs_gguf_open(path, &err);
    VT_REQUIRE(g, "open gguf: %s", err.msg);
    vs_gguf_str s;
    int64_t x;
    VT_CHECK(vs_gguf_get_str(g, "tokenizer.ggml.model", &s) == 1 && vs_gguf_str_eq(s, "gpt2"), "model gpt2");
    VT_CHECK(vs_gguf_get_str(g, "tokenizer.ggml.pre", &s) == 1 && vs_gguf_str_eq(s, vs_bpe_pre_name(pre)), "pre %s",
             vs_bpe_pre_name(pre));
    VT_CHECK(vs_gguf_get_int(g, "tokenizer.ggml.bos_token_id", &x) == 1 && x == 1, "bos 1");
    VT_CHECK(vs_gguf_get_int(g, "tokenizer.ggml.eos_token_id", &x) == 1 && x == 2, "eos 2");
    VT_CHECK(vs_gguf_get_int(g, "tokenizer.ggml.unknown_token_id", &x) == 1 && x == 0, "unk 0");
    int64_t ki = vs_gguf_find_key(g, "tokenizer.ggml.merges");
    VT_CHECK(ki >= 0 && (int64_t)vs_gguf_arr_len(g, ki) == v.n_merges, "merges array");
    vs_gguf_close(g);
    vs_tokenizer *tk = vs_tokenizer_load(path, &err);
    VT_REQUIRE(tk, "tokenizer load: %s", err.msg);
    VT_CHECK(vs_tokenizer_n_vocab(tk) == 1024 && vs_tokenizer_bos(tk) == 1 && vs_tokenizer_eos(tk) == 2, "vocab / specials");
    VT_CHECK(!strcmp(vs_tokenizer_pre(tk), vs_bpe_pre_name(pre)), "the tokenizer splits with '%s'", vs_tokenizer_pre(tk));
    if (pre == VS_BPE_PRE_DIGITS) { /* " 21 plums, 134" -> " ", "2", "1", " plums", ",", " ", "1", "3", "4" */
        int32_t ids[32];
        int64_t n = 0;
        VT_CHECK(vs_tokenize(tk, " 21 plums, 134", 14, false, false, ids, 32, &n, &err) == VS_OK, "%s", err.msg);
        int digits = 0;
        for (int64_t i = 0; i < n; i++) {
            size_t len = 0;
            char *piece = vs_detokenize(tk, &ids[i], 1, 0, &len, &err);
            VT_REQUIRE(piece, "detokenize: %s", err.msg);
            digits += len == 1 && piece[0] >= '0' && piece[0] <= '9';
            vs_free(piece);
        }
        VT_CHECK(digits == 5, "' 21 plums, 134': %d single-digit tokens, wanted 5", digits);
    }
    for (int k = 0; k < 4; k++) VT_CHECK(vs_tokenizer_token_type(tk, k) == VS_TOKEN_CONTROL, "token %d is CONTROL", k);
    VT_CHECK(vs_tokenizer_find(tk, "<image>", 7) == VS_BPE_IMAGE, "<image> id");
    {
        int32_t ids[8];
        int64_t n = 0;
        VT_CHECK(vs_tokenize(tk, "<image>", 7, false, true, ids, 8, &n, &err) == VS_OK && n == 1 && ids[0] == VS_BPE_IMAGE,
                 "<image> parses as one special token");
    }
    /* every corpus string: same ids as the trainer's encoder, exact round trip */
    int64_t mism = 0, bad = 0, n_texts = 0;
    const vs_world_dataset *ds[3] = {train, caps, test};
    double tok_sum[VS_WORLD_N_SUITES] = {0};
    int64_t tok_n[VS_WORLD_N_SUITES] = {0}, tok_min = 1 << 30, tok_max = 0;
    for (int k = 0; k < 3; k++)
        for (int64_t i = 0; i < ds[k]->n; i++) {
            const vs_world_sample *sm = &ds[k]->samples[i];
            char *p = vs_world_prompt(sm, sm->n_turns - 1, true);
            roundtrip(tk, &v, p, &mism, &bad);
            n_texts++;
            vs_free(p);
            for (int t2 = 0; t2 < sm->n_turns; t2++) {
                int64_t nt = roundtrip(tk, &v, sm->turns[t2].assistant, &mism, &bad);
                roundtrip(tk, &v, sm->turns[t2].user, &mism, &bad);
                n_texts += 2;
                if (sm->suite != VS_WORLD_CAPTION) {
                    tok_sum[sm->suite] += (double)nt;
                    tok_n[sm->suite]++;
                    tok_min = nt < tok_min ? nt : tok_min;
                    tok_max = nt > tok_max ? nt : tok_max;
                }
            }
            for (int m = 0; m < sm->n_images; m++) {
                roundtrip(tk, &v, sm->captions[m], &mism, &bad);
                n_texts++;
            }
        }
    printf("  tokenizer: %lld strings, %lld round-trip failures, %lld differ from the trainer's encoding\n", (long long)n_texts,
           (long long)bad, (long long)mism);
    VT_CHECK(bad == 0 && mism == 0, "round trips");
    printf("  tokens per answer (vocab 1024, %s):", vs_bpe_pre_name(pre));
    for (int su = 0; su < VS_WORLD_CAPTION; su++)
        if (tok_n[su]) printf(" %s %.1f", vs_world_suite_name((vs_world_suite)su), tok_sum[su] / (double)tok_n[su]);
    printf("; min %lld max %lld\n", (long long)tok_min, (long long)tok_max);
    VT_CHECK(tok_min >= 40 && tok_max <= 150, "answers span %lld..%lld tokens, wanted 40..150", (long long)tok_min, (long long)tok_max);
    vs_tokenizer_free(tk);
    vs_bpe_vocab_free(&v);
    vs_bpe_trainer_free(t);
}

/* ---------------------------------------------------------------------------------------------- */

static void gen(const char *dir, uint64_t seed, int64_t n_train, int64_t n_test, double *samples_per_s) {
    vs_world_config c;
    vs_world_config_default(&c);
    c.seed = seed;
    c.n_train = n_train;
    c.n_test = n_test;
    vs_error err = {0};
    double t0 = cpu_now();
    VT_REQUIRE(vs_world_generate(&c, dir, &err) == VS_OK, "generate %s: %s", dir, err.msg);
    if (samples_per_s) *samples_per_s = (double)((n_train + n_test) * 8) / (cpu_now() - t0);
}

int main(void) {
    const char *tmp = vt_tmpdir();
    char a[1024], b[1024], c[1024];
    snprintf(a, sizeof(a), "%s/a", tmp);
    snprintf(b, sizeof(b), "%s/b", tmp);
    snprintf(c, sizeof(c), "%s/c", tmp);
    double rate;
    gen(a, 11, 40, 100, &rate);
    gen(b, 11, 40, 100, NULL);
    gen(c, 12, 0, 100, NULL);
    printf("generation: %.0f samples/s per core (CPU time, PNG writing included; noisy on a shared machine)\n", rate);

    /* determinism */
    int fa = 0, fb = 0;
    uint64_t ha = hash_tree(a, "", 0xcbf29ce484222325ULL, &fa), hb = hash_tree(b, "", 0xcbf29ce484222325ULL, &fb);
    VT_CHECK(ha == hb && fa == fb && fa > 1000, "same seed gives different trees (%d vs %d files)", fa, fb);
    printf("  same seed: %d files byte-identical\n", fa);

    vs_world_dataset *atr = load(a, "train"), *ate = load(a, "test"), *acap = load(a, "captions"), *cte = load(c, "test");
    VT_CHECK(ate->n == 800 && cte->n == 800 && atr->n == 320, "split sizes %lld %lld %lld", (long long)ate->n, (long long)cte->n,
             (long long)atr->n);
    VT_CHECK(ate->seed == 11 && ate->image_size == 64, "manifest seed/size");

    /* no overlap by content */
    uint64_t *ka = keys_of(ate), *kc = keys_of(cte), *kt = keys_of(atr);
    int64_t dup = 0;
    for (int64_t i = 1; i < ate->n; i++) dup += ka[i] == ka[i - 1];
    VT_CHECK(dup == 0, "%lld duplicate samples inside one test split", (long long)dup);
    VT_CHECK(common_keys(ka, ate->n, kc, cte->n) == 0, "test splits of seeds 11 and 12 overlap");
    VT_CHECK(common_keys(ka, ate->n, kt, atr->n) == 0, "train and test of seed 11 overlap");
    printf("  no shared content: test(11) vs test(12), train(11) vs test(11)\n");
    free(ka);
    free(kc);
    free(kt);

    /* checker */
    int tested[VS_CHECK_BARS + 1] = {0}, caught[VS_CHECK_BARS + 1] = {0};
    test_checker(ate, tested, caught);
    test_checker(cte, tested, caught);
    test_checker(atr, tested, caught);
    test_checker(acap, tested, caught);
    printf("  corrupted answers caught:");
    for (int k = 0; k <= VS_CHECK_STORY; k++) { /* look's own (bars) below */
        printf(" %s %d/%d", vs_world_check_name((vs_world_check_type)k), caught[k], tested[k]);
        VT_CHECK(tested[k] > 0, "no corruption test of check type %s", vs_world_check_name((vs_world_check_type)k));
    }
    printf("\n");

    /* drills (an opt-in suite): the checker agrees, answers are terse, every kind of drill occurs, the
     * default configuration does not generate them, train and test share no content */
    {
        vs_world_dataset *dtr, *dte;
        opt_in_suite(tmp, "drill", VS_WORLD_DRILL, 11, 600, tested, caught, &dtr, &dte);
        int kinds[VS_Q_FACT_MAX + 1] = {0}, chains = 0, longest = 0;
        for (int64_t i = 0; i < dtr->n; i++) {
            const vs_world_turn *t = &dtr->samples[i].turns[0];
            kinds[t->query.type]++;
            chains += t->query.type == VS_Q_ARITH && t->query.n_ops > 1;
            int w = 0;
            for (const char *c = t->assistant; *c; c++) w += !isspace((unsigned char)*c) && (c == t->assistant || isspace((unsigned char)c[-1]));
            longest = w > longest ? w : longest;
            VT_CHECK(dtr->samples[i].n_images == 0 && dtr->samples[i].suite == VS_WORLD_DRILL, "%s", dtr->samples[i].id);
        }
        VT_CHECK(kinds[VS_Q_ARITH] > 0 && chains > 0 && chains < kinds[VS_Q_ARITH] && kinds[VS_Q_FACT] > 0 &&
                     kinds[VS_Q_FACT_CMP] > 0 && kinds[VS_Q_FACT_SPAN] > 0 && kinds[VS_Q_FACT_MAX] > 0,
                 "drill kinds: arith %d (chains %d), fact %d, cmp %d, span %d, max %d", kinds[VS_Q_ARITH], chains,
                 kinds[VS_Q_FACT], kinds[VS_Q_FACT_CMP], kinds[VS_Q_FACT_SPAN], kinds[VS_Q_FACT_MAX]);
        VT_CHECK(longest <= 60, "a drill answer of %d words", longest);
        printf("  drills: %lld train + %lld test, checker agrees; arith %d (%d chains), facts %d/%d/%d/%d; "
               "longest answer %d words\n", (long long)dtr->n, (long long)dte->n, kinds[VS_Q_ARITH], chains,
               kinds[VS_Q_FACT], kinds[VS_Q_FACT_CMP], kinds[VS_Q_FACT_SPAN], kinds[VS_Q_FACT_MAX], longest);
        opt_in_done("drill", dtr, dte);
    }

    /* short-answer questions (an opt-in suite): the checker agrees, every answer is the short answer itself,
     * the instruction is LLaVA-1.5's, questions of all four suites occur, later turns ask other questions about
     * the first turn's picture (no question twice), the last turn asks for the picture written out (checked as
     * describe's set, read_all's lines or every bar), not generated by default, train and test share no
     * content */
    {
        vs_world_dataset *ltr, *lte;
        opt_in_suite(tmp, "look", VS_WORLD_LOOK, 12, 400, tested, caught, &ltr, &lte);
        int kinds[VS_WORLD_N_QUERY_TYPES] = {0}, later[VS_WORLD_N_QUERY_TYPES] = {0}, n_kinds = 0, n_later = 0;
        int by_turns[VS_WORLD_MAX_TURNS + 1] = {0}, transcripts[VS_WORLD_N_QUERY_TYPES] = {0};
        static const char want_user[] = "<image> Answer the question using a single word or phrase. ";
        for (int64_t i = 0; i < ltr->n; i++) {
            const vs_world_sample *x = &ltr->samples[i];
            const vs_world_turn *t = &x->turns[0];
            n_kinds += kinds[t->query.type]++ == 0;
            by_turns[x->n_turns]++;
            VT_CHECK(x->suite == VS_WORLD_LOOK && x->n_images == 1 && t->kind == VS_TURN_FIRST && t->n_images == 1 &&
                         !strcmp(t->assistant, t->answer) && !strncmp(t->user, want_user, sizeof(want_user) - 1) &&
                         !strstr(t->user, "explanation"),
                     "%s: %s -> %s", x->id, t->user, t->assistant);
            const vs_world_turn *tr = &x->turns[x->n_turns - 1];
            const vs_world_scene_kind sk = x->scenes[0].kind;
            const vs_world_query_type want_tr = sk == VS_SCENE_SHAPES ? VS_Q_DESCRIBE : sk == VS_SCENE_GLYPH ? VS_Q_LINES : VS_Q_BARS;
            size_t al = strlen(tr->assistant);
            VT_CHECK(x->n_turns >= 2 && tr->kind == VS_TURN_MORE && tr->n_images == 0 && tr->first_image == 1 &&
                         tr->query.type == want_tr && tr->query.image == 0 && al > 11 &&
                         !strcmp(tr->assistant + al - 11, "background.") && !strstr(tr->user, "<image>"),
                     "%s transcript: %s -> %s", x->id, tr->user, tr->assistant);
            char *words = vs_world_scene_words(&x->scenes[0]);
            VT_CHECK(words && !strcmp(tr->assistant, words), "%s transcript '%s' is not the scene in words '%s'", x->id,
                     tr->assistant, words ? words : "(null)");
            vs_free(words);
            transcripts[want_tr]++;
            for (int k = 1; k < x->n_turns - 1; k++) {
                const vs_world_turn *u = &x->turns[k];
                n_later += later[u->query.type]++ == 0;
                VT_CHECK(u->kind == VS_TURN_MORE && u->n_images == 0 && u->first_image == 1 && u->query.image == 0 &&
                             !strcmp(u->assistant, u->answer) && !strncmp(u->user, want_user + 8, sizeof(want_user) - 9) &&
                             !strstr(u->user, "<image>"),
                         "%s turn %d: %s -> %s", x->id, k, u->user, u->assistant);
                for (int j = 0; j < k; j++)
                    VT_CHECK(strcmp(strstr(x->turns[j].user, "phrase. ") + 8, u->user + sizeof(want_user) - 9),
                             "%s asks \"%s\" twice", x->id, u->user);
            }
        }
        VT_CHECK(kinds[VS_Q_COUNT] && kinds[VS_Q_POSITION] && kinds[VS_Q_EXISTS] && kinds[VS_Q_READ_LINE] &&
                     kinds[VS_Q_BAR_VALUE] && n_kinds >= 12,
                 "look kinds: %d", n_kinds);
        VT_CHECK(later[VS_Q_COLOR] && later[VS_Q_POSITION] && later[VS_Q_EXISTS] && later[VS_Q_READ_COLOR] &&
                     later[VS_Q_BAR_DIFF] && n_later >= 12,
                 "look later kinds: %d", n_later);
        VT_CHECK(by_turns[1] == 0 && by_turns[VS_WORLD_MAX_TURNS] > ltr->n / 2, "turns per sample: 1: %d, %d: %d", by_turns[1],
                 VS_WORLD_MAX_TURNS, by_turns[VS_WORLD_MAX_TURNS]);
        VT_CHECK(transcripts[VS_Q_DESCRIBE] && transcripts[VS_Q_LINES] && transcripts[VS_Q_BARS],
                 "transcripts: shapes %d, glyph %d, chart %d", transcripts[VS_Q_DESCRIBE], transcripts[VS_Q_LINES],
                 transcripts[VS_Q_BARS]);
        test_bars_rule(ltr);
        test_ground_mask(ltr);
        test_glyph_masks(ltr);
        printf("  look: %lld train + %lld test, checker agrees, %d kinds of first question, %d of later ones;"
               " samples by turns:", (long long)ltr->n, (long long)lte->n, n_kinds, n_later);
        for (int k = 1; k <= VS_WORLD_MAX_TURNS; k++) printf(" %d", by_turns[k]);
        printf("\n");
        /* the bars check exists for look's chart transcripts alone */
        printf("  corrupted chart transcripts caught: %d/%d\n", caught[VS_CHECK_BARS], tested[VS_CHECK_BARS]);
        VT_CHECK(tested[VS_CHECK_BARS] > 0 && caught[VS_CHECK_BARS] == tested[VS_CHECK_BARS], "bars corruptions %d/%d",
                 caught[VS_CHECK_BARS], tested[VS_CHECK_BARS]);
        opt_in_done("look", ltr, lte);
    }

    /* max_items (simpler pictures for a curriculum): every suite still generates and checks; no scene of a
     * one-picture suite is above the cap (shapes scenes hold two objects where a question needs two);
     * world.json records it; a cap out of range is an error */
    for (int cap = 1; cap <= 2; cap++) {
        char dir[1100];
        snprintf(dir, sizeof(dir), "%s/cap%d", tmp, cap);
        vs_world_config cc;
        vs_world_config_default(&cc);
        cc.seed = 5, cc.n_train = 60, cc.n_test = 20, cc.suites = VS_WORLD_ALL_SUITES, cc.max_items = cap;
        cc.zoom = cap == 1;
        vs_error err = {0};
        VT_REQUIRE(vs_world_generate(&cc, dir, &err) == VS_OK, "generate %s: %s", dir, err.msg);
        vs_world_dataset *tr = load(dir, "train"), *te = load(dir, "test");
        test_checker(tr, tested, caught);
        test_checker(te, tested, caught);
        int over = 0, scenes = 0, one = 0, most_objects = 0, zoom_wrong = 0, zoom_patches[2] = {0, 0};
        for (int64_t i = 0; i < tr->n; i++)
            for (int k = 0; k < tr->samples[i].n_images; k++) {
                const vs_world_scene *sc = &tr->samples[i].scenes[k];
                const bool two_pictures = tr->samples[i].suite == VS_WORLD_DIFF || tr->samples[i].suite == VS_WORLD_STORY;
                zoom_wrong += sc->zoom != (cc.zoom && !two_pictures && sc->kind == VS_SCENE_SHAPES);
                if (sc->zoom) { /* zoomed objects cover more patches than the same scene unzoomed */
                    vs_world_scene plain = *sc;
                    plain.zoom = 0;
                    vs_world_patch_label pl[64];
                    for (int z = 0; z < 2; z++) {
                        VT_REQUIRE(vs_world_patch_labels(z ? sc : &plain, 64, 8, pl, &err) == VS_OK, "%s", err.msg);
                        for (int p = 0; p < 64; p++) zoom_patches[z] += pl[p].shape >= 0;
                    }
                }
                if (two_pictures) continue;
                scenes++;
                if (sc->kind == VS_SCENE_SHAPES) {
                    over += sc->n_objects > 2 || (cap == 2 && sc->n_objects > cap);
                    one += sc->n_objects == 1;
                    most_objects = VS_MAX(most_objects, sc->n_objects);
                } else if (sc->kind == VS_SCENE_GLYPH) {
                    over += sc->n_lines > cap;
                } else {
                    over += sc->n_bars != 3;
                }
            }
        VT_CHECK(scenes > 250 && over == 0, "max_items %d: %d of %d scenes above the cap", cap, over, scenes);
        VT_CHECK(most_objects == 2 && (cap == 2 || one > 0), "max_items %d: objects per scene up to %d, %d single",
                 cap, most_objects, one);
        VT_CHECK(zoom_wrong == 0, "zoom %d: %d scenes with the wrong zoom", (int)cc.zoom, zoom_wrong);
        VT_CHECK(!cc.zoom || zoom_patches[1] > 3 * zoom_patches[0], "zoom: %d object patches against %d unzoomed",
                 zoom_patches[1], zoom_patches[0]);
        char path[1200];
        snprintf(path, sizeof(path), "%s/world.json", dir);
        uint8_t *js = NULL;
        size_t jn;
        char want[32];
        snprintf(want, sizeof(want), "\"max_items\":%d", cap);
        VT_CHECK(vs_read_file(path, &js, &jn, NULL) == VS_OK && strstr((const char *)js, want), "world.json lacks %s",
                 want);
        vs_free(js);
        printf("  max_items %d%s: %d scenes at most 2 objects, %d lines, 3 bars; checker agrees", cap,
               cc.zoom ? " + zoom" : "", scenes, cap);
        if (cc.zoom) printf("; zoomed objects cover %d patches, %d unzoomed", zoom_patches[1], zoom_patches[0]);
        printf("\n");
        vs_world_dataset_free(tr);
        vs_world_dataset_free(te);
    }
    {
        vs_world_config cc;
        vs_world_config_default(&cc);
        cc.max_items = VS_WORLD_MAX_OBJECTS + 1;
        vs_world_sample smp;
        vs_error err = {0};
        VT_CHECK(vs_world_generate_sample(&cc, "train", VS_WORLD_VQA, 0, 0, &smp, NULL, &err) == VS_ERR_RANGE &&
                     strstr(err.msg, "max items"),
                 "max_items out of range accepted: %s", err.msg);
    }

    test_images(ate);
    test_language(ate);
    test_bad_records(tmp, a);
    test_bpe_naive();
    test_tokenizer(tmp, atr, acap, ate, VS_BPE_PRE_GPT2);
    test_tokenizer(tmp, atr, acap, ate, VS_BPE_PRE_DIGITS);

    /* CLI */
    const char *cli = vt_cli();
    if (access(cli, X_OK) != 0) {
        printf("SKIP CLI checks: %s not found (ctest sets VLMSPEC_BIN)\n", cli);
        goto done;
    }
    VT_CHECK(vt_run("%s data gen --out %s/cli --seed 3 --train 4 --test 3 --suites vqa,chart,story --quiet > /dev/null", cli, tmp) == 0,
             "data gen");
    VT_CHECK(vt_run("%s data check %s/cli > /dev/null", cli, tmp) == 0, "data check");
    VT_CHECK(vt_run("%s data stats %s/cli > /dev/null", cli, tmp) == 0, "data stats");
    VT_CHECK(vt_run("%s data preview %s/cli -o %s/sheet.png > /dev/null", cli, tmp, tmp) == 0, "data preview");
    {
        char p[1200];
        snprintf(p, sizeof(p), "%s/sheet.png", tmp);
        vs_image im;
        VT_CHECK(vs_image_load(&im, p, NULL) == VS_OK && im.w > 64 && im.h > 64, "contact sheet decodes");
        vs_image_free(&im);
    }
    VT_CHECK(vt_run("%s tokenizer train --data %s/cli --vocab 300 -o %s/cli.gguf > /dev/null", cli, tmp, tmp) == 0, "tokenizer train");
    VT_CHECK(vt_run("%s tokenizer train --data %s/cli --vocab 300 --pre starcoder -o %s/cli-digits.gguf > /dev/null", cli, tmp,
                    tmp) == 0,
             "tokenizer train --pre starcoder");
    VT_CHECK(vt_run("%s tokenizer train --data %s/cli --pre bpe -o %s/x.gguf 2> /dev/null", cli, tmp, tmp) == 2,
             "an unknown --pre is a usage error");
    {
        char p[1024];
        snprintf(p, sizeof(p), "%s/cli-digits.gguf", tmp);
        vs_error e = {0};
        vs_tokenizer *tk = vs_tokenizer_load(p, &e);
        VT_CHECK(tk && !strcmp(vs_tokenizer_pre(tk), "starcoder"), "the CLI's --pre starcoder reaches the file");
        vs_tokenizer_free(tk);
    }
    VT_CHECK(vt_run("%s data gen --seed 3 2> /dev/null", cli) == 2, "missing --out is a usage error");
    VT_CHECK(vt_run("%s data gen --out %s/x --suites nope 2> /dev/null", cli, tmp) == 2, "bad suite is a usage error");
    VT_CHECK(vt_run("%s data stats %s/missing 2> /dev/null", cli, tmp) == 1, "missing dataset is an error");
done:
    vs_world_dataset_free(atr);
    vs_world_dataset_free(ate);
    vs_world_dataset_free(acap);
    vs_world_dataset_free(cte);
    return vt_finish("world");
}
