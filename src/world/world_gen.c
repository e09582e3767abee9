/* world_gen: scene generation and the language of the suites: questions in TABED's appendix I prompt
 * formats, answers in explanatory prose with randomised phrasing, clause order and connectors, while
 * every grounded word (colour, shape, size, position, count, glyph text, bar value, fact) comes from
 * the scene. The answer templates keep the invariants the checker reads by (docs/world.md):
 *  - an "answer-first" answer states the short answer before any other word of its category and
 *    never says "answer is"; a "reasoned" answer ends with "... the answer is X";
 *  - descriptions, differences and stories name objects as "<colour> <shape>". */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "world_internal.h"

#define TABED_Q "For the following question, provide a detailed explanation of your reasoning leading to the answer."

typedef struct gen {
    vs_rng *r;
    vs_world_sample *s;
    bool test;
    int max_items; /* vs_world_config.max_items */
} gen;

/* A single-image suite's turn about image `img` of the sample. */
typedef void (*turn_fn)(gen *, int, vs_world_turn *, vs_world_turn_kind);

static int rnd(gen *g, int n) { return (int)vs_rng_below(g->r, (uint32_t)n); }
static bool chance(gen *g, double p) { return vs_rng_uniform(g->r) < p; }

static void shuffle_int(gen *g, int *a, int n) {
    for (int i = n - 1; i > 0; i--) {
        int j = rnd(g, i + 1), t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

static const char *article(const char *next) {
    return (next[0] == 'a' || next[0] == 'e' || next[0] == 'i' || next[0] == 'o' || next[0] == 'u') ? "an" : "a";
}

static const char *count_word(int64_t n, char *buf, size_t cap) {
    const char *w = world_number_word(n);
    if (w) return w;
    snprintf(buf, cap, "%lld", (long long)n);
    return buf;
}

static vs_world_sel sel_any(void) { return (vs_world_sel){-1, -1, -1, -1}; }

/* The short answer of a SET turn: the named "<colour> <shape>" pairs, in (shape, colour) order. */
static void pairs_answer(const bool *want, char *ans, size_t cap) {
    ans[0] = 0;
    for (int sh = 0; sh < VS_WORLD_N_SHAPES; sh++)
        for (int co = 0; co < VS_WORLD_N_COLORS; co++)
            if (want[sh * VS_WORLD_N_COLORS + co]) {
                size_t n = strlen(ans);
                snprintf(ans + n, cap - n, "%s%s %s", n ? ", " : "", vs_world_color_name(co), vs_world_shape_name(sh));
            }
}

/* ---------------------------------------------------------------------------------------------- */
/* Scenes */

static bool pair_used(const vs_world_scene *sc, int shape, int color) {
    for (int i = 0; i < sc->n_objects; i++)
        if (sc->objects[i].shape == shape && sc->objects[i].color == color) return true;
    return false;
}

static int free_cell(gen *g, const vs_world_scene *sc) {
    int cells[9], n = 0;
    for (int c = 0; c < 9; c++) {
        bool used = false;
        for (int i = 0; i < sc->n_objects; i++) used |= sc->objects[i].cell == c;
        if (!used) cells[n++] = c;
    }
    return n ? cells[rnd(g, n)] : -1;
}

/* Adds a random object with a (colour, shape) pair not yet in the scene, in a free cell. */
static int add_unique_object(gen *g, vs_world_scene *sc) {
    int cell = free_cell(g, sc);
    if (cell < 0 || sc->n_objects >= VS_WORLD_MAX_OBJECTS) return -1;
    int shape, color;
    do {
        shape = rnd(g, VS_WORLD_N_SHAPES);
        color = rnd(g, VS_WORLD_N_COLORS);
    } while (pair_used(sc, shape, color));
    vs_world_object *o = &sc->objects[sc->n_objects];
    o->shape = (int8_t)shape;
    o->color = (int8_t)color;
    o->size = (int8_t)rnd(g, 2);
    o->cell = (int8_t)cell;
    return sc->n_objects++;
}

static void new_scene(gen *g, vs_world_scene *sc, vs_world_scene_kind kind) {
    memset(sc, 0, sizeof(*sc));
    sc->kind = kind;
    sc->bg = (int8_t)rnd(g, VS_WORLD_N_BGS);
    sc->noise = (uint32_t)vs_rng_u64(g->r);
}

static int pick_n_objects(gen *g, int lo, int hi) {
    /* weighted towards the middle: single objects are rare */
    int n = lo + rnd(g, hi - lo + 1);
    if (n == 1 && chance(g, 0.8)) n = 2 + rnd(g, 2);
    return VS_MIN(n, hi);
}

static void shapes_scene(gen *g, vs_world_scene *sc, int lo, int hi) {
    new_scene(g, sc, VS_SCENE_SHAPES);
    if (g->max_items > 0) hi = VS_MAX(lo, VS_MIN(hi, g->max_items));
    int n = pick_n_objects(g, lo, hi);
    for (int i = 0; i < n; i++) add_unique_object(g, sc);
}

static int count_match(const vs_world_scene *sc, vs_world_sel s) {
    int n = 0;
    for (int i = 0; i < sc->n_objects; i++) {
        const vs_world_object *o = &sc->objects[i];
        if ((s.shape < 0 || o->shape == s.shape) && (s.color < 0 || o->color == s.color) &&
            (s.size < 0 || o->size == s.size) && (s.cell < 0 || o->cell == s.cell))
            n++;
    }
    return n;
}

static int find_match(const vs_world_scene *sc, vs_world_sel s) {
    for (int i = 0; i < sc->n_objects; i++) {
        const vs_world_object *o = &sc->objects[i];
        if ((s.shape < 0 || o->shape == s.shape) && (s.color < 0 || o->color == s.color) &&
            (s.size < 0 || o->size == s.size) && (s.cell < 0 || o->cell == s.cell))
            return i;
    }
    return -1;
}

/* ---------------------------------------------------------------------------------------------- */
/* Phrases */

/* "a small red circle" (det 0) or "the red circle" (det 1, size optional) */
static void np(wsb *b, const vs_world_object *o, int det, bool size) {
    const char *first = size ? vs_world_size_name(o->size) : vs_world_color_name(o->color);
    wsb_puts(b, det ? "the" : article(first));
    if (size) wsb_printf(b, " %s", vs_world_size_name(o->size));
    wsb_printf(b, " %s %s", vs_world_color_name(o->color), vs_world_shape_name(o->shape));
}

/* "in the top left corner", "at the center", "in the middle right part" */
static void cell_phrase(gen *g, wsb *b, int cell) {
    const char *c = vs_world_cell_name(cell);
    if (cell == 4) wsb_say(b, g->r, "{in|at} the center");
    else if (cell == 0 || cell == 2 || cell == 6 || cell == 8) wsb_say(b, g->r, "in the %s{| corner}", c);
    else wsb_say(b, g->r, "in the %s{| area| part}", c);
}

/* "a small red circle in the top left, a blue star at the center and a green square ..." */
static void list_objects(gen *g, wsb *b, const vs_world_scene *sc, const int *idx, int n, bool size) {
    for (int k = 0; k < n; k++) {
        if (k > 0) wsb_puts(b, k == n - 1 ? (n > 2 && chance(g, 0.5) ? ", and " : " and ") : ", ");
        np(b, &sc->objects[idx[k]], 0, size);
        wsb_puts(b, " ");
        cell_phrase(g, b, sc->objects[idx[k]].cell);
    }
}

static int others(const vs_world_scene *sc, int except, int except2, int *idx) {
    int n = 0;
    for (int i = 0; i < sc->n_objects; i++)
        if (i != except && i != except2) idx[n++] = i;
    return n;
}

static void user_tabed(wsb *b, const char *question) {
    wsb_puts(b, "<image> " TABED_Q " ");
    wsb_puts(b, question);
}

/* Non-grounded closing remarks, used to reach the answer length range. kind: 0 shapes, 1 text in an
 * image, 2 chart, 3 neutral. */
enum { REMARK_SHAPES = 0, REMARK_GLYPH, REMARK_CHART, REMARK_NEUTRAL };

static void closing_remark(gen *g, wsb *b, int kind, unsigned *used) {
    int k = rnd(g, 4);
    while (*used & (1u << k)) k = (k + 1) & 3;
    *used |= 1u << k;
    if (kind == REMARK_NEUTRAL) {
        switch (k) {
        case 0: wsb_say(b, g->r, " {I hope this helps|I hope this answers your question}."); break;
        case 1: wsb_say(b, g->r, " {Let me know if you want more detail|Feel free to ask a follow-up question}."); break;
        case 2: wsb_say(b, g->r, " {Every step above follows from the previous step|Each step of the reasoning is shown above}, so {the result is easy to check|it is easy to verify}."); break;
        default: wsb_say(b, g->r, " {That is the complete reasoning|This covers the whole reasoning} {behind the result|for this question}."); break;
        }
        return;
    }
    if (k == 0) {
        wsb_say(b, g->r, " I {checked|looked at} the {whole|entire} {image|picture} {carefully|once more} to be sure.");
        return;
    }
    if (k == 1) {
        wsb_say(b, g->r, " {Nothing else|No other detail} in the {image|picture} {changes|affects} this{ conclusion|}.");
        return;
    }
    switch (kind) {
    case REMARK_SHAPES:
        if (k == 2) wsb_say(b, g->r, " {Each shape|Every object} {stands out clearly|is easy to tell apart} against the background.");
        else wsb_say(b, g->r, " {The shapes|The objects} do not overlap, which makes {them|the scene} {easy|simple} to read.");
        break;
    case REMARK_GLYPH:
        if (k == 2) wsb_say(b, g->r, " The {letters|characters} are {printed|drawn} clearly, so {the text is easy to read|there is little room for doubt}.");
        else wsb_say(b, g->r, " {There is no other text in the image|Nothing else is written in the image}{, and the background is plain|}.");
        break;
    default:
        if (k == 2) wsb_say(b, g->r, " Each bar has its value {printed|written} above it, so {the numbers are easy to read|there is little room for doubt}.");
        else wsb_say(b, g->r, " The labels {under|below} the bars make it easy to {tell them apart|match each value to its bar}.");
        break;
    }
}

static void pad_answer(gen *g, wsb *b, int min_words, int kind) {
    unsigned used = 0;
    for (int k = 0; k < 3 && world_word_count(b->p ? b->p : "") < min_words; k++) closing_remark(g, b, kind, &used);
}

/* ---------------------------------------------------------------------------------------------- */
/* Turn assembly */

static void set_turn(vs_world_turn *t, vs_world_turn_kind kind, int first_image, int n_images, wsb *user, wsb *asst,
                     const char *answer, const vs_world_query *q) {
    t->kind = kind;
    t->first_image = first_image;
    t->n_images = n_images;
    t->user = wsb_take(user);
    t->assistant = wsb_take(asst);
    t->answer = vs_strdup(answer);
    t->query = *q;
}

static vs_world_query query_new(vs_world_query_type type, int image) {
    vs_world_query q;
    memset(&q, 0, sizeof(q));
    q.type = type;
    q.image = image;
    q.image2 = -1;
    q.sel = sel_any();
    q.sel2 = sel_any();
    q.prev_turn = -1;
    q.entity = q.entity2 = q.entity3 = q.entity4 = q.attr = -1;
    return q;
}

/* ---------------------------------------------------------------------------------------------- */
/* describe */

static void turn_describe(gen *g, int img, vs_world_turn *t, vs_world_turn_kind kind) {
    vs_world_scene *sc = &g->s->scenes[img];
    shapes_scene(g, sc, 1, 6);
    wsb u, a;
    wsb_init(&u);
    wsb_init(&a);
    static const char *const qs[] = {"Describe the image in detail.", "What do you see in this image? Describe it in detail.",
                                     "Give a detailed description of the picture.",
                                     "Describe all the objects in this image and where they are."};
    user_tabed(&u, qs[rnd(g, 4)]);
    char cw[24];
    int n = sc->n_objects;
    if (n == 1) wsb_say(&a, g->r, "^{The image shows|This image contains|The picture shows} a single {object|shape} on a %s background.", vs_world_bg_name(sc->bg));
    else
        wsb_say(&a, g->r, "^{The image shows|This image contains|In this picture, I can see|The picture contains} %s {objects|shapes} on a %s background.",
                count_word(n, cw, sizeof(cw)), vs_world_bg_name(sc->bg));
    int idx[VS_WORLD_MAX_OBJECTS];
    for (int i = 0; i < n; i++) idx[i] = i;
    if (chance(g, 0.5)) shuffle_int(g, idx, n);
    else /* reading order */
        for (int i = 1; i < n; i++)
            for (int j = i; j > 0 && sc->objects[idx[j - 1]].cell > sc->objects[idx[j]].cell; j--) {
                int x = idx[j];
                idx[j] = idx[j - 1];
                idx[j - 1] = x;
            }
    for (int k = 0; k < n; k++) {
        const vs_world_object *o = &sc->objects[idx[k]];
        wsb_puts(&a, " ");
        bool conn = k > 0 && chance(g, 0.35);
        if (conn) wsb_say(&a, g->r, "{Also|In addition|Next|Besides that}, ");
        wsb c;
        wsb_init(&c);
        cell_phrase(g, &c, o->cell);
        wsb o_np;
        wsb_init(&o_np);
        np(&o_np, o, 0, true);
        switch (rnd(g, 3)) {
        case 0: wsb_say(&a, g->r, conn ? "%s, there is %s." : "^%s, there is %s.", c.p, o_np.p); break;
        case 1: wsb_say(&a, g->r, conn ? "%s {is placed|sits|is located|can be seen} %s." : "^%s {is placed|sits|is located|can be seen} %s.", o_np.p, c.p); break;
        default: wsb_say(&a, g->r, conn ? "%s {you can see|we find} %s." : "^%s {you can see|we find} %s.", c.p, o_np.p); break;
        }
        wsb_free(&c);
        wsb_free(&o_np);
    }
    if (n > 1 && chance(g, 0.7)) {
        switch (rnd(g, 3)) {
        case 0: wsb_say(&a, g->r, " {All|The} %s shapes are clearly separated and do not overlap.", count_word(n, cw, sizeof(cw))); break;
        case 1: wsb_say(&a, g->r, " {Overall|In summary}, the scene is a simple arrangement of colored shapes on a plain background."); break;
        default: wsb_say(&a, g->r, " The background has a light texture, and nothing else {appears|is visible} in the image."); break;
        }
    }
    pad_answer(g, &a, 38, REMARK_SHAPES);
    vs_world_query q = query_new(VS_Q_DESCRIBE, img);
    bool want[VS_WORLD_N_SHAPES * VS_WORLD_N_COLORS] = {0};
    for (int i = 0; i < n; i++) want[sc->objects[i].shape * VS_WORLD_N_COLORS + sc->objects[i].color] = true;
    char ans[128];
    pairs_answer(want, ans, sizeof(ans));
    set_turn(t, kind, img, 1, &u, &a, ans, &q);
}

/* ---------------------------------------------------------------------------------------------- */
/* vqa */

static void vqa_count(gen *g, vs_world_scene *sc, int img, wsb *u, wsb *a, vs_world_query *q, char *ans) {
    /* a scene where the counted attribute appears 1..4 times */
    new_scene(g, sc, VS_SCENE_SHAPES);
    bool by_shape = chance(g, 0.55);
    int target = by_shape ? rnd(g, VS_WORLD_N_SHAPES) : rnd(g, VS_WORLD_N_COLORS);
    int k = 1 + rnd(g, 4), n_other = rnd(g, 3);
    if (k + n_other == 1 && chance(g, 0.5)) n_other = 1;
    if (g->max_items > 0) k = VS_MIN(k, g->max_items), n_other = VS_MIN(n_other, g->max_items - k);
    for (int i = 0; i < k; i++) {
        int cell = free_cell(g, sc), shape, color;
        int guard = 0;
        do {
            shape = by_shape ? target : rnd(g, VS_WORLD_N_SHAPES);
            color = by_shape ? rnd(g, VS_WORLD_N_COLORS) : target;
        } while (pair_used(sc, shape, color) && ++guard < 50);
        sc->objects[sc->n_objects++] = (vs_world_object){(int8_t)shape, (int8_t)color, (int8_t)rnd(g, 2), (int8_t)cell};
    }
    for (int i = 0; i < n_other; i++) {
        int cell = free_cell(g, sc), shape, color;
        do {
            shape = rnd(g, VS_WORLD_N_SHAPES);
            color = rnd(g, VS_WORLD_N_COLORS);
        } while ((by_shape ? shape == target : color == target) || pair_used(sc, shape, color));
        sc->objects[sc->n_objects++] = (vs_world_object){(int8_t)shape, (int8_t)color, (int8_t)rnd(g, 2), (int8_t)cell};
    }
    /* shuffle object order so the counted ones are not always first */
    for (int i = sc->n_objects - 1; i > 0; i--) {
        int j = rnd(g, i + 1);
        vs_world_object t = sc->objects[i];
        sc->objects[i] = sc->objects[j];
        sc->objects[j] = t;
    }
    *q = query_new(VS_Q_COUNT, img);
    char what[48];
    if (by_shape) {
        q->sel.shape = (int8_t)target;
        snprintf(what, sizeof(what), "%s", world_shape_plural(target));
        switch (rnd(g, 3)) {
        case 0: wsb_say(u, g->r, "How many %s are there in the {image|picture}?", what); break;
        case 1: wsb_say(u, g->r, "How many %s can you see?", what); break;
        default: wsb_say(u, g->r, "Count the %s in the {image|picture}.", what); break;
        }
    } else {
        q->sel.color = (int8_t)target;
        snprintf(what, sizeof(what), "%s objects", vs_world_color_name(target));
        if (chance(g, 0.5)) wsb_say(u, g->r, "How many %s are there in the {image|picture}?", what);
        else wsb_say(u, g->r, "How many shapes are %s?", vs_world_color_name(target));
    }
    int match[VS_WORLD_MAX_OBJECTS], nm = 0, rest[VS_WORLD_MAX_OBJECTS], nr = 0;
    for (int i = 0; i < sc->n_objects; i++) {
        bool m = by_shape ? sc->objects[i].shape == target : sc->objects[i].color == target;
        if (m) match[nm++] = i;
        else rest[nr++] = i;
    }
    char cw[24];
    const char *cnt = count_word(nm, cw, sizeof(cw));
    snprintf(ans, 64, "%d", nm);
    const char *noun1 = by_shape ? vs_world_shape_name(target) : what;
    char single[48];
    if (!by_shape) snprintf(single, sizeof(single), "%s object", vs_world_color_name(target)), noun1 = single;
    if (chance(g, 0.5)) {
        /* answer first */
        if (nm == 1) wsb_say(a, g->r, "^There is %s %s in the {image|picture}: ", cnt, noun1);
        else wsb_say(a, g->r, "^There are %s %s in the {image|picture}: ", cnt, what);
        list_objects(g, a, sc, match, nm, true);
        wsb_puts(a, ".");
        if (nr == 1) {
            wsb_say(a, g->r, " The {other|remaining} {object|shape}, ");
            list_objects(g, a, sc, rest, nr, false);
            if (by_shape) wsb_say(a, g->r, ", is not %s %s.", article(vs_world_shape_name(target)), vs_world_shape_name(target));
            else wsb_say(a, g->r, ", is not %s.", vs_world_color_name(target));
        } else if (nr) {
            wsb_say(a, g->r, " The {other|remaining} {objects|shapes}, ");
            list_objects(g, a, sc, rest, nr, false);
            wsb_say(a, g->r, ", {are not|do not count as} %s.", by_shape ? what : vs_world_color_name(target));
        }
    } else {
        wsb_say(a, g->r, "^{Let me|I will} {look at|go through} {each|every} object in the {image|picture}. {I can see|The image contains} ");
        int all[VS_WORLD_MAX_OBJECTS];
        for (int i = 0; i < sc->n_objects; i++) all[i] = i;
        list_objects(g, a, sc, all, sc->n_objects, true);
        wsb_say(a, g->r, ". {Of these|Among them}, the {matching|relevant} {ones|objects} are ");
        for (int k2 = 0; k2 < nm; k2++) {
            if (k2) wsb_puts(a, k2 == nm - 1 ? " and " : ", ");
            np(a, &sc->objects[match[k2]], 1, false);
        }
        wsb_say(a, g->r, ". {Counting them|Adding them up} gives %s, {so|which means} the answer is %s.", cnt, cnt);
    }
}

static void vqa_attr(gen *g, vs_world_scene *sc, int img, wsb *u, wsb *a, vs_world_query *q, char *ans, int kind) {
    /* kind 0 colour (target has a unique shape), 1 shape (unique colour), 2 size (unique shape),
     * 3 position (unique pair) */
    int ti = -1;
    for (int tries = 0; tries < 50 && ti < 0; tries++) {
        shapes_scene(g, sc, 2, 6);
        int cand[VS_WORLD_MAX_OBJECTS], nc = 0;
        for (int i = 0; i < sc->n_objects; i++) {
            vs_world_sel s = sel_any();
            if (kind == 1) s.color = sc->objects[i].color;
            else s.shape = sc->objects[i].shape;
            if (kind == 3) s.color = sc->objects[i].color;
            if (count_match(sc, s) == 1) cand[nc++] = i;
        }
        if (nc) ti = cand[rnd(g, nc)];
    }
    if (ti < 0) { /* practically never: fall back to a single object */
        shapes_scene(g, sc, 1, 1);
        ti = 0;
    }
    const vs_world_object *o = &sc->objects[ti];
    const char *shape = vs_world_shape_name(o->shape), *color = vs_world_color_name(o->color);
    int rest[VS_WORLD_MAX_OBJECTS], nr = others(sc, ti, -1, rest);
    wsb cp;
    wsb_init(&cp);
    cell_phrase(g, &cp, o->cell);
    bool first = chance(g, 0.5);
    switch (kind) {
    case 0:
        *q = query_new(VS_Q_COLOR, img);
        q->sel.shape = o->shape;
        snprintf(ans, 64, "%s", color);
        wsb_say(u, g->r, "{What color is the %s?|Which color does the %s have?|What is the color of the %s?}", shape);
        if (first) {
            wsb_say(a, g->r, "^The %s is %s. It is a %s shape {located|placed} %s.", shape, color, vs_world_size_name(o->size), cp.p);
        } else {
            wsb_say(a, g->r, "^{To answer this|First}, I {find|look for} the %s in the {image|picture}. It {is|sits} %s, and {its color is|it is colored|it is filled with} %s.",
                    shape, cp.p, color);
        }
        break;
    case 1:
        *q = query_new(VS_Q_SHAPE, img);
        q->sel.color = o->color;
        snprintf(ans, 64, "%s", shape);
        wsb_say(u, g->r, "{What shape is the %s object?|What kind of shape is %s in this image?|Which shape has the color %s?}", color);
        if (first) {
            wsb_say(a, g->r, "^The %s {object|shape} is %s %s. It is %s and {located|sits} %s.", color, article(shape), shape,
                    vs_world_size_name(o->size), cp.p);
        } else {
            wsb_say(a, g->r, "^{To answer this|First}, I {find|look for} the %s object in the {image|picture}. It {is|sits} %s. {Looking at its outline|Judging by its outline}, it is %s %s.",
                    color, cp.p, article(shape), shape);
        }
        break;
    case 2:
        *q = query_new(VS_Q_SIZE, img);
        q->sel.shape = o->shape;
        snprintf(ans, 64, "%s", vs_world_size_name(o->size));
        wsb_say(u, g->r, "{Is the %s small or large?|What size is the %s?|How big is the %s, small or large?}", shape);
        if (first) {
            wsb_say(a, g->r, "^The %s is %s. It is %s and {located|placed} %s.", shape, vs_world_size_name(o->size), color, cp.p);
        } else {
            wsb_say(a, g->r, "^{To answer this|First}, I {find|look for} the %s. It is %s and {sits|is located} %s. {Compared with|Next to} the other shapes, it {looks|is} %s.",
                    shape, color, cp.p, vs_world_size_name(o->size));
        }
        break;
    default:
        *q = query_new(VS_Q_POSITION, img);
        q->sel.shape = o->shape;
        q->sel.color = o->color;
        snprintf(ans, 64, "%s", vs_world_cell_name(o->cell));
        wsb_say(u, g->r, "{Where is the %s %s?|In which part of the image is the %s %s?|Where can you find the %s %s in the picture?}", color, shape);
        if (first) {
            wsb_say(a, g->r, "^The %s %s is %s of the {image|picture}. It is a %s shape.", color, shape, cp.p, vs_world_size_name(o->size));
        } else {
            wsb_say(a, g->r, "^{To answer this|First}, I {find|look for} the %s %s. The {image|picture} is divided into a three by three grid, and the %s %s {sits|is placed} in the %s {cell|part} of it.",
                    color, shape, color, shape, vs_world_cell_name(o->cell));
        }
        break;
    }
    if (nr) {
        wsb_say(a, g->r, first ? " {The other objects are|Besides it, the image shows|Around it there are} " : " {The other objects are|Around it there are|The image also shows} ");
        list_objects(g, a, sc, rest, nr, true);
        wsb_puts(a, ".");
    } else {
        wsb_say(a, g->r, " It is the only object in the {image|picture}.");
    }
    if (!first) {
        if (kind == 3) wsb_say(a, g->r, " {So|Therefore|Thus}, the answer is the %s.", ans);
        else if (kind == 1) wsb_say(a, g->r, " {So|Therefore|Thus}, the answer is %s %s.", article(ans), ans);
        else wsb_say(a, g->r, " {So|Therefore|Thus}, the answer is %s.", ans);
    }
    wsb_free(&cp);
}

static const char *rel_phrase(int rel) {
    static const char *const p[4] = {"to the left of", "to the right of", "above", "below"};
    return p[rel];
}

static bool rel_holds(const vs_world_object *a, const vs_world_object *b, int rel) {
    int ra = a->cell / 3, ca = a->cell % 3, rb = b->cell / 3, cb = b->cell % 3;
    switch (rel) {
    case VS_REL_LEFT: return ca < cb;
    case VS_REL_RIGHT: return ca > cb;
    case VS_REL_ABOVE: return ra < rb;
    default: return ra > rb;
    }
}

static void vqa_relation(gen *g, vs_world_scene *sc, int img, wsb *u, wsb *a, vs_world_query *q, char *ans) {
    do shapes_scene(g, sc, 2, 6);
    while (sc->n_objects < 2);
    int i = rnd(g, sc->n_objects), j;
    do j = rnd(g, sc->n_objects);
    while (j == i);
    const vs_world_object *A = &sc->objects[i], *B = &sc->objects[j];
    bool want_yes = chance(g, 0.5);
    int rels[4] = {0, 1, 2, 3}, rel = -1;
    shuffle_int(g, rels, 4);
    for (int k = 0; k < 4 && rel < 0; k++)
        if (rel_holds(A, B, rels[k]) == want_yes) rel = rels[k];
    if (rel < 0) rel = rels[0];
    bool yes = rel_holds(A, B, rel);
    *q = query_new(VS_Q_RELATION, img);
    q->sel.shape = A->shape;
    q->sel.color = A->color;
    q->sel2.shape = B->shape;
    q->sel2.color = B->color;
    q->relation = rel;
    snprintf(ans, 64, "%s", yes ? "yes" : "no");
    const char *ca = vs_world_color_name(A->color), *sa = vs_world_shape_name(A->shape);
    const char *cb = vs_world_color_name(B->color), *sb = vs_world_shape_name(B->shape);
    wsb_say(u, g->r, "{Is the %s %s %s the %s %s?|Is the %s %s located %s the %s %s?}", ca, sa, rel_phrase(rel), cb, sb);
    wsb pa, pb;
    wsb_init(&pa);
    wsb_init(&pb);
    cell_phrase(g, &pa, A->cell);
    cell_phrase(g, &pb, B->cell);
    if (chance(g, 0.5)) {
        wsb_say(a, g->r, yes ? "^Yes, the %s %s is %s the %s %s." : "^No, the %s %s is not %s the %s %s.", ca, sa, rel_phrase(rel), cb, sb);
        wsb_say(a, g->r, " The %s %s is %s, {while|whereas} the %s %s is %s.", ca, sa, pa.p, cb, sb, pb.p);
    } else {
        wsb_say(a, g->r, "^{To answer this|Let me compare their positions}: the %s %s is %s, {while|and} the %s %s is %s.", ca, sa, pa.p, cb, sb, pb.p);
        wsb_say(a, g->r, yes ? " This means the %s %s is {indeed|really} %s the %s %s, so the answer is yes."
                             : " This means the %s %s is not %s the %s %s, so the answer is no.",
                ca, sa, rel_phrase(rel), cb, sb);
    }
    wsb_free(&pa);
    wsb_free(&pb);
}

static void turn_vqa(gen *g, int img, vs_world_turn *t, vs_world_turn_kind kind) {
    vs_world_scene *sc = &g->s->scenes[img];
    wsb u, a, qb;
    wsb_init(&u);
    wsb_init(&a);
    wsb_init(&qb);
    vs_world_query q;
    char ans[64];
    int k = rnd(g, 100);
    if (k < 25) vqa_count(g, sc, img, &qb, &a, &q, ans);
    else if (k < 45) vqa_attr(g, sc, img, &qb, &a, &q, ans, 0);
    else if (k < 60) vqa_attr(g, sc, img, &qb, &a, &q, ans, 1);
    else if (k < 68) vqa_attr(g, sc, img, &qb, &a, &q, ans, 2);
    else if (k < 84) vqa_attr(g, sc, img, &qb, &a, &q, ans, 3);
    else vqa_relation(g, sc, img, &qb, &a, &q, ans);
    user_tabed(&u, qb.p);
    wsb_free(&qb);
    pad_answer(g, &a, 38, REMARK_SHAPES);
    set_turn(t, kind, img, 1, &u, &a, ans, &q);
}

/* ---------------------------------------------------------------------------------------------- */
/* pope */

static void turn_pope(gen *g, int img, vs_world_turn *t, vs_world_turn_kind kind) {
    vs_world_scene *sc = &g->s->scenes[img];
    shapes_scene(g, sc, 2, 6);
    bool yes = chance(g, 0.5), shape_only = chance(g, 0.25);
    int shape, color = -1;
    const vs_world_object *near = NULL; /* an object sharing an attribute with a "no" target */
    if (yes) {
        const vs_world_object *o = &sc->objects[rnd(g, sc->n_objects)];
        shape = o->shape;
        color = shape_only ? -1 : o->color;
    } else if (shape_only) {
        do shape = rnd(g, VS_WORLD_N_SHAPES);
        while (count_match(sc, (vs_world_sel){(int8_t)shape, -1, -1, -1}) > 0);
    } else if (chance(g, 0.5)) {
        /* adversarial: an attribute of the target is present */
        const vs_world_object *o = &sc->objects[rnd(g, sc->n_objects)];
        bool keep_shape = chance(g, 0.5);
        do {
            shape = keep_shape ? o->shape : rnd(g, VS_WORLD_N_SHAPES);
            color = keep_shape ? rnd(g, VS_WORLD_N_COLORS) : o->color;
        } while (pair_used(sc, shape, color));
        near = o;
    } else {
        do {
            shape = rnd(g, VS_WORLD_N_SHAPES);
            color = rnd(g, VS_WORLD_N_COLORS);
        } while (pair_used(sc, shape, color));
    }
    vs_world_query q = query_new(VS_Q_EXISTS, img);
    q.sel.shape = (int8_t)shape;
    q.sel.color = (int8_t)color;
    char what[48];
    if (color >= 0) snprintf(what, sizeof(what), "%s %s", vs_world_color_name(color), vs_world_shape_name(shape));
    else snprintf(what, sizeof(what), "%s", vs_world_shape_name(shape));
    wsb u, a, qb;
    wsb_init(&u);
    wsb_init(&a);
    wsb_init(&qb);
    wsb_say(&qb, g->r, "{Is there %s %s in the image?|Does the image contain %s %s?|Can you see %s %s in this picture?}", article(what), what);
    user_tabed(&u, qb.p);
    wsb_free(&qb);
    int all[VS_WORLD_MAX_OBJECTS], n = sc->n_objects;
    for (int i = 0; i < n; i++) all[i] = i;
    int ti = yes ? find_match(sc, q.sel) : -1;
    if (chance(g, 0.55)) {
        if (yes) {
            const vs_world_object *o = &sc->objects[ti];
            wsb_say(&a, g->r, "^Yes, there is %s %s in the {image|picture}.", article(what), what);
            wsb cp;
            wsb_init(&cp);
            cell_phrase(g, &cp, o->cell);
            wsb_say(&a, g->r, " It is {a %s %s shape|a %s %s object} {located|placed} %s.", vs_world_size_name(o->size), vs_world_color_name(o->color), cp.p);
            wsb_free(&cp);
            int rest[VS_WORLD_MAX_OBJECTS], nr = others(sc, ti, -1, rest);
            if (nr) {
                wsb_say(&a, g->r, " {Besides it|Apart from it}, the {image|picture} {also |}{contains|shows} ");
                list_objects(g, &a, sc, rest, nr, false);
                wsb_puts(&a, ".");
            }
        } else {
            wsb_say(&a, g->r, "^No, there is {no|not any} %s in the {image|picture}.", what);
            wsb_say(&a, g->r, " The {image|picture} {contains|shows} ");
            list_objects(g, &a, sc, all, n, true);
            wsb_puts(&a, ".");
            if (near && near->shape == shape)
                wsb_say(&a, g->r, " {Although|While} there is %s %s %s, it is %s, not %s.", article(vs_world_color_name(near->color)),
                        vs_world_color_name(near->color), vs_world_shape_name(near->shape), vs_world_color_name(near->color),
                        vs_world_color_name(color));
            else if (near)
                wsb_say(&a, g->r, " {Although|While} there is %s %s %s, its shape is %s %s, not %s %s.",
                        article(vs_world_color_name(near->color)), vs_world_color_name(near->color), vs_world_shape_name(near->shape),
                        article(vs_world_shape_name(near->shape)), vs_world_shape_name(near->shape), article(vs_world_shape_name(shape)),
                        vs_world_shape_name(shape));
            else wsb_say(&a, g->r, " None of {them|these objects} is %s %s.", article(what), what);
        }
    } else {
        wsb_say(&a, g->r, "^{To check this|To answer this}, I look at {all|each of} the objects in the {image|picture}. {There is|I can see} ");
        list_objects(g, &a, sc, all, n, true);
        wsb_puts(&a, ".");
        if (yes) wsb_say(&a, g->r, " The %s is among them, so the answer is yes.", what);
        else wsb_say(&a, g->r, " None of them is %s %s, so the answer is no.", article(what), what);
    }
    pad_answer(g, &a, 38, REMARK_SHAPES);
    set_turn(t, kind, img, 1, &u, &a, yes ? "yes" : "no", &q);
}

/* ---------------------------------------------------------------------------------------------- */
/* ocr */

static bool is_digits(const char *s) {
    for (; *s; s++)
        if (*s < '0' || *s > '9') return false;
    return true;
}

static void glyph_scene(gen *g, vs_world_scene *sc) {
    new_scene(g, sc, VS_SCENE_GLYPH);
    int k = rnd(g, 100);
    sc->n_lines = k < 35 ? 1 : k < 72 ? 2 : 3;
    if (g->max_items > 0) sc->n_lines = VS_MIN(sc->n_lines, g->max_items);
    sc->align = (int8_t)(chance(g, 0.4) ? 4 : rnd(g, VS_WORLD_N_CELLS)); /* centred, or anywhere on the grid */
    int colors[VS_WORLD_N_COLORS], nc = 0;
    for (int c = 0; c < VS_WORLD_N_COLORS; c++)
        if (c != 2) colors[nc++] = c; /* no yellow text */
    shuffle_int(g, colors, nc);
    for (int i = 0; i < sc->n_lines; i++) {
        vs_world_line *l = &sc->lines[i];
        bool dup;
        do {
            if (chance(g, 0.25)) {
                int digits = 2 + rnd(g, 3), v = 1 + rnd(g, 9);
                for (int d = 1; d < digits; d++) v = v * 10 + rnd(g, 10);
                snprintf(l->text, sizeof(l->text), "%d", v);
            } else {
                snprintf(l->text, sizeof(l->text), "%s", world_lexicon_word(rnd(g, world_lexicon_n())));
            }
            dup = false;
            for (int j = 0; j < i; j++) dup |= strcmp(sc->lines[j].text, l->text) == 0;
        } while (dup);
        l->color = (int8_t)colors[i];
    }
}

static void quoted_lines(gen *g, wsb *a, const vs_world_scene *sc, bool colors) {
    for (int i = 0; i < sc->n_lines; i++) {
        if (i) wsb_puts(a, i == sc->n_lines - 1 ? " and " : ", ");
        wsb_printf(a, "\"%s\"", sc->lines[i].text);
        if (colors) wsb_say(a, g->r, " in %s", vs_world_color_name(sc->lines[i].color));
    }
}

static void turn_ocr(gen *g, int img, vs_world_turn *t, vs_world_turn_kind kind) {
    vs_world_scene *sc = &g->s->scenes[img];
    glyph_scene(g, sc);
    wsb u, a, qb;
    wsb_init(&u);
    wsb_init(&a);
    wsb_init(&qb);
    vs_world_query q;
    char ans[64];
    int n = sc->n_lines, k = rnd(g, 100);
    bool first = chance(g, 0.5);
    const char *bg = vs_world_bg_name(sc->bg);
    char cw[24];
    if (n == 1 || k < 30) {
        q = query_new(VS_Q_READ_ALL, img);
        if (n == 1) {
            const vs_world_line *l = &sc->lines[0];
            bool num = is_digits(l->text);
            snprintf(ans, sizeof(ans), "%s", l->text);
            if (num) wsb_say(&qb, g->r, "{What number is shown in the image?|Which number is written in the picture?|What does the text in the image say?}");
            else wsb_say(&qb, g->r, "{What word is written in the image?|What does the text in the image say?|Read the word in this picture.}");
            if (first) {
                if (num) wsb_say(&a, g->r, "^The number {shown|written} in the {image|picture} is %s.", l->text);
                else wsb_say(&a, g->r, "^The {text|word} in the {image|picture} {reads|says} \"%s\".", l->text);
                wsb_say(&a, g->r, " It is written in %s {capital letters|characters|print} on a %s background, and there is no other text {to read|in the image}.",
                        vs_world_color_name(l->color), bg);
            } else {
                wsb_say(&a, g->r, "^{Looking at|Reading} the {image|picture}, I {can see|find} a single line of text written in %s on a %s background. The {characters|letters} are {clear|easy to read}, and the {line|text} {reads|says} \"%s\". {So|Therefore}, the answer is \"%s\".",
                        vs_world_color_name(l->color), bg, l->text, l->text);
            }
        } else {
            ans[0] = 0;
            for (int i = 0; i < n; i++) {
                if (i) strcat(ans, " ");
                strcat(ans, sc->lines[i].text);
            }
            wsb_say(&qb, g->r, "{What does the text say? Read all the lines from top to bottom.|Read all the text in the image, from top to bottom.|What is written in this image? Read every line.}");
            if (first) {
                wsb_say(&a, g->r, "^{From top to bottom|Reading from the top}, the text says ");
                quoted_lines(g, &a, sc, false);
                wsb_say(&a, g->r, ". The image {contains|shows} %s lines of text on a %s background: ", count_word(n, cw, sizeof(cw)), bg);
                quoted_lines(g, &a, sc, true);
                wsb_puts(&a, ".");
            } else {
                wsb_say(&a, g->r, "^The image {contains|shows} %s lines of text on a %s background. I read them from top to bottom: ", count_word(n, cw, sizeof(cw)), bg);
                quoted_lines(g, &a, sc, true);
                wsb_say(&a, g->r, ". {So|Therefore}, the answer is ");
                quoted_lines(g, &a, sc, false);
                wsb_puts(&a, ".");
            }
        }
    } else if (k < 60) {
        q = query_new(VS_Q_READ_LINE, img);
        int li = rnd(g, n);
        q.index = li;
        const char *which = li == 0 && chance(g, 0.4) ? "top" : li == n - 1 && chance(g, 0.4) ? "bottom" : world_ordinal(li);
        snprintf(ans, sizeof(ans), "%s", sc->lines[li].text);
        wsb_say(&qb, g->r, "{What is written on the %s line?|What does the %s line say?|Read the %s line of text.}", which);
        if (first) {
            wsb_say(&a, g->r, "^The %s line {reads|says} \"%s\". It is written in %s.", which, sc->lines[li].text,
                    vs_world_color_name(sc->lines[li].color));
            wsb_say(&a, g->r, " {In total, the image has|The image contains} %s lines of text: ", count_word(n, cw, sizeof(cw)));
            quoted_lines(g, &a, sc, true);
            wsb_puts(&a, ".");
        } else {
            wsb_say(&a, g->r, "^The image {contains|shows} %s lines of text. From top to bottom, they are ", count_word(n, cw, sizeof(cw)));
            quoted_lines(g, &a, sc, true);
            wsb_say(&a, g->r, ". The %s line is \"%s\", so the answer is \"%s\".", which, sc->lines[li].text, sc->lines[li].text);
        }
    } else if (k < 85) {
        q = query_new(VS_Q_READ_COLOR, img);
        int li = rnd(g, n);
        q.sel.color = sc->lines[li].color;
        const char *c = vs_world_color_name(sc->lines[li].color);
        snprintf(ans, sizeof(ans), "%s", sc->lines[li].text);
        wsb_say(&qb, g->r, "{Which word is written in %s?|What is written in %s?|What does the %s text say?}", c);
        if (first) {
            wsb_say(&a, g->r, "^The {text|word} written in %s {is|reads} \"%s\".", c, sc->lines[li].text);
            wsb_say(&a, g->r, " It is the %s of %s lines in the image: ", world_ordinal(li), count_word(n, cw, sizeof(cw)));
            quoted_lines(g, &a, sc, true);
            wsb_puts(&a, ".");
        } else {
            wsb_say(&a, g->r, "^The image {contains|shows} %s lines of text: ", count_word(n, cw, sizeof(cw)));
            quoted_lines(g, &a, sc, true);
            wsb_say(&a, g->r, ". Only the %s line is %s, so the answer is \"%s\".", world_ordinal(li), c, sc->lines[li].text);
        }
    } else {
        q = query_new(VS_Q_LINE_COUNT, img);
        snprintf(ans, sizeof(ans), "%d", n);
        wsb_say(&qb, g->r, "{How many lines of text are in the image?|How many lines of text can you see?|Count the lines of text in this picture.}");
        if (first) {
            wsb_say(&a, g->r, "^There are %s lines of text in the {image|picture}: ", count_word(n, cw, sizeof(cw)));
            quoted_lines(g, &a, sc, true);
            wsb_say(&a, g->r, ", written on a %s background.", bg);
        } else {
            wsb_say(&a, g->r, "^{Reading|Looking at} the {image|picture} from top to bottom, I see ");
            quoted_lines(g, &a, sc, true);
            wsb_say(&a, g->r, ". {Each of them is on its own line|They are on separate lines}, so the answer is %s.", count_word(n, cw, sizeof(cw)));
        }
    }
    user_tabed(&u, qb.p);
    wsb_free(&qb);
    pad_answer(g, &a, 38, REMARK_GLYPH);
    set_turn(t, kind, img, 1, &u, &a, ans, &q);
}

/* ---------------------------------------------------------------------------------------------- */
/* chart */

static const char chart_letters[] = "BCDEFGHJKLMNPRSTUVWXYZ";

static void chart_scene(gen *g, vs_world_scene *sc) {
    new_scene(g, sc, VS_SCENE_CHART);
    sc->n_bars = 3 + rnd(g, 4);
    if (g->max_items > 0) sc->n_bars = VS_MIN(sc->n_bars, VS_MAX(3, g->max_items));
    int vals[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, cols[VS_WORLD_N_COLORS];
    int letters[sizeof(chart_letters) - 1];
    for (int i = 0; i < (int)sizeof(chart_letters) - 1; i++) letters[i] = i;
    for (int i = 0; i < VS_WORLD_N_COLORS; i++) cols[i] = i;
    shuffle_int(g, vals, 9);
    shuffle_int(g, cols, VS_WORLD_N_COLORS);
    shuffle_int(g, letters, (int)sizeof(chart_letters) - 1);
    bool one_color = chance(g, 0.3);
    for (int i = 0; i < sc->n_bars; i++) {
        sc->bars[i].label = chart_letters[letters[i]];
        sc->bars[i].value = (int8_t)vals[i];
        sc->bars[i].color = (int8_t)(one_color ? cols[0] : cols[i]);
    }
    /* labels in alphabetical order left to right, as charts usually are */
    for (int i = 1; i < sc->n_bars; i++)
        for (int j = i; j > 0 && sc->bars[j - 1].label > sc->bars[j].label; j--) {
            vs_world_bar t = sc->bars[j];
            sc->bars[j] = sc->bars[j - 1];
            sc->bars[j - 1] = t;
        }
}

/* ---------------------------------------------------------------------------------------------- */
/* Scenes on their own (vision pretraining): the generators the suites use */

void vs_world_random_scene(vs_rng *r, vs_world_scene_kind kind, vs_world_scene *sc) {
    gen g = {.r = r};
    switch (kind) {
    case VS_SCENE_SHAPES: shapes_scene(&g, sc, 1, 6); break;
    case VS_SCENE_GLYPH: glyph_scene(&g, sc); break;
    case VS_SCENE_CHART: chart_scene(&g, sc); break;
    }
}

static void list_bars(gen *g, wsb *a, const vs_world_scene *sc, int skip) {
    int n = 0, style = rnd(g, 4);
    for (int i = 0; i < sc->n_bars; i++)
        if (i != skip) n++;
    int k = 0;
    for (int i = 0; i < sc->n_bars; i++) {
        if (i == skip) continue;
        if (k) wsb_puts(a, k == n - 1 ? " and " : ", ");
        static const char *const styles[4] = {"%c reaches %d", "%c has %d", "%c shows %d", "%c at %d"};
        wsb_printf(a, styles[style], sc->bars[i].label, sc->bars[i].value);
        k++;
    }
}

static void turn_chart(gen *g, int img, vs_world_turn *t, vs_world_turn_kind kind) {
    vs_world_scene *sc = &g->s->scenes[img];
    chart_scene(g, sc);
    wsb u, a, qb;
    wsb_init(&u);
    wsb_init(&a);
    wsb_init(&qb);
    vs_world_query q;
    char ans[64], cw[24];
    int n = sc->n_bars, k = rnd(g, 100);
    bool first = chance(g, 0.5);
    int imax = 0, imin = 0;
    for (int i = 1; i < n; i++) {
        if (sc->bars[i].value > sc->bars[imax].value) imax = i;
        if (sc->bars[i].value < sc->bars[imin].value) imin = i;
    }
    if (k < 35) {
        bool mx = k < 20;
        int bi = mx ? imax : imin;
        const vs_world_bar *b = &sc->bars[bi];
        q = query_new(mx ? VS_Q_BAR_MAX : VS_Q_BAR_MIN, img);
        snprintf(ans, sizeof(ans), "%c", b->label);
        if (mx) wsb_say(&qb, g->r, "{Which bar is the tallest?|Which label has the highest value?|Which bar has the largest value in the chart?}");
        else wsb_say(&qb, g->r, "{Which bar is the shortest?|Which label has the lowest value?|Which bar has the smallest value in the chart?}");
        if (first) {
            wsb_say(&a, g->r, mx ? "^The {tallest|highest} bar is {the one labeled %c|bar %c}, {which reaches|with} a value of %d."
                                 : "^The {shortest|lowest} bar is {the one labeled %c|bar %c}, {which reaches|with} a value of %d.",
                    b->label, b->value);
            wsb_say(&a, g->r, mx ? " The other bars are {lower|shorter}: " : " The other bars are {higher|taller}: ");
            list_bars(g, &a, sc, bi);
            wsb_puts(&a, ".");
        } else {
            wsb_say(&a, g->r, "^The {chart|bar chart} {has|shows} %s bars. ", count_word(n, cw, sizeof(cw)));
            list_bars(g, &a, sc, -1);
            wsb_say(&a, g->r, mx ? ". {Comparing them|Comparing these values}, the largest value is %d, {which belongs to|for} %c, so the answer is %c."
                                 : ". {Comparing them|Comparing these values}, the smallest value is %d, {which belongs to|for} %c, so the answer is %c.",
                    b->value, b->label, b->label);
        }
    } else if (k < 60) {
        int bi = rnd(g, n);
        const vs_world_bar *b = &sc->bars[bi];
        q = query_new(VS_Q_BAR_VALUE, img);
        q.label = b->label;
        snprintf(ans, sizeof(ans), "%d", b->value);
        wsb_say(&qb, g->r, "{What is the value of bar %c?|How high is the bar labeled %c?|What value does %c have in the chart?}", b->label);
        if (first) {
            wsb_say(&a, g->r, "^The bar labeled %c has a value of %d{, as the number above it shows|}.", b->label, b->value);
            wsb_say(&a, g->r, " For comparison, the other bars {are|read}: ");
            list_bars(g, &a, sc, bi);
            wsb_puts(&a, ".");
        } else {
            wsb_say(&a, g->r, "^The {chart|bar chart} {has|shows} %s bars: ", count_word(n, cw, sizeof(cw)));
            list_bars(g, &a, sc, -1);
            wsb_say(&a, g->r, ". The bar labeled %c {reaches|stops at} %d, so the answer is %d.", b->label, b->value, b->value);
        }
    } else {
        int i = rnd(g, n), j;
        do j = rnd(g, n);
        while (j == i);
        const vs_world_bar *B1 = &sc->bars[i], *B2 = &sc->bars[j];
        const vs_world_bar *hi = B1->value > B2->value ? B1 : B2, *lo = hi == B1 ? B2 : B1;
        if (k < 80) {
            q = query_new(VS_Q_BAR_CMP, img);
            q.label = B1->label;
            q.label2 = B2->label;
            snprintf(ans, sizeof(ans), "%c", hi->label);
            wsb_say(&qb, g->r, "{Which is larger, %c or %c?|Which bar is higher, %c or %c?|Is %c or %c bigger?}", B1->label, B2->label);
            if (first) {
                wsb_say(&a, g->r, "^%c is {larger|higher} than %c: it reaches %d, while %c {only reaches|stays at} %d.", hi->label, lo->label,
                        hi->value, lo->label, lo->value);
                wsb_say(&a, g->r, " {The full chart reads|All bars together read}: ");
                list_bars(g, &a, sc, -1);
                wsb_puts(&a, ".");
            } else {
                wsb_say(&a, g->r, "^%c has a value of %d and %c has a value of %d. {Since|Because} %d is {greater|more} than %d, the answer is %c.",
                        B1->label, B1->value, B2->label, B2->value, hi->value, lo->value, hi->label);
            }
        } else {
            q = query_new(VS_Q_BAR_DIFF, img);
            q.label = hi->label;
            q.label2 = lo->label;
            int d = hi->value - lo->value;
            snprintf(ans, sizeof(ans), "%d", d);
            wsb_say(&qb, g->r, "{How much larger is %c than %c?|By how much does %c exceed %c?|What is the difference between %c and %c?}", hi->label, lo->label);
            if (first) {
                wsb_say(&a, g->r, "^%c is larger than %c by %d. %c reaches %d and %c reaches %d, and %d - %d = %d.", hi->label, lo->label, d,
                        hi->label, hi->value, lo->label, lo->value, hi->value, lo->value, d);
            } else {
                wsb_say(&a, g->r, "^%c has a value of %d and %c has a value of %d. The difference is %d - %d = %d, so the answer is %d.",
                        hi->label, hi->value, lo->label, lo->value, hi->value, lo->value, d, d);
            }
        }
    }
    user_tabed(&u, qb.p);
    wsb_free(&qb);
    pad_answer(g, &a, 38, REMARK_CHART);
    set_turn(t, kind, img, 1, &u, &a, ans, &q);
}

/* ---------------------------------------------------------------------------------------------- */
/* diff */

enum { EDIT_ADD, EDIT_REMOVE, EDIT_RECOLOR, EDIT_MOVE };

static void turn_diff(gen *g, vs_world_turn *t) {
    vs_world_scene *A = &g->s->scenes[0], *B = &g->s->scenes[1];
    shapes_scene(g, A, 2, 5);
    *B = *A;
    int n_edits = 1 + rnd(g, 3);
    struct {
        int type;
        vs_world_object before, after;
    } ed[3];
    memset(ed, 0, sizeof(ed));
    bool touched[VS_WORLD_MAX_OBJECTS] = {0};
    int ne = 0;
    for (int tries = 0; ne < n_edits && tries < 40; tries++) {
        int type = rnd(g, 4);
        if (type == EDIT_ADD) {
            if (B->n_objects >= 6) continue;
            /* the new pair must be new in both images */
            int cell = free_cell(g, B);
            if (cell < 0) continue;
            int shape, color;
            do {
                shape = rnd(g, VS_WORLD_N_SHAPES);
                color = rnd(g, VS_WORLD_N_COLORS);
            } while (pair_used(A, shape, color) || pair_used(B, shape, color));
            bool cell_was_used = false;
            for (int i = 0; i < A->n_objects; i++) cell_was_used |= A->objects[i].cell == cell;
            if (cell_was_used) continue; /* keep "recolour" (same cell, same shape) unambiguous */
            vs_world_object o = {(int8_t)shape, (int8_t)color, (int8_t)rnd(g, 2), (int8_t)cell};
            touched[B->n_objects] = true;
            B->objects[B->n_objects++] = o;
            ed[ne].type = type;
            ed[ne].after = o;
            ne++;
        } else {
            int cand[VS_WORLD_MAX_OBJECTS], nc = 0;
            for (int i = 0; i < B->n_objects; i++)
                if (!touched[i]) cand[nc++] = i;
            if (!nc) continue;
            int i = cand[rnd(g, nc)];
            vs_world_object before = B->objects[i];
            if (type == EDIT_REMOVE) {
                if (B->n_objects <= 1) continue;
                for (int j = i; j < B->n_objects - 1; j++) {
                    B->objects[j] = B->objects[j + 1];
                    touched[j] = touched[j + 1];
                }
                B->n_objects--;
                ed[ne].type = type;
                ed[ne].before = before;
                ne++;
            } else if (type == EDIT_RECOLOR) {
                int color;
                int guard = 0;
                do color = rnd(g, VS_WORLD_N_COLORS);
                while ((color == before.color || pair_used(A, before.shape, color) || pair_used(B, before.shape, color)) && ++guard < 50);
                if (guard >= 50) continue;
                B->objects[i].color = (int8_t)color;
                touched[i] = true;
                ed[ne].type = type;
                ed[ne].before = before;
                ed[ne].after = B->objects[i];
                ne++;
            } else {
                int cell = free_cell(g, B);
                if (cell < 0) continue;
                bool cell_was_used = false;
                for (int j = 0; j < A->n_objects; j++) cell_was_used |= A->objects[j].cell == cell;
                if (cell_was_used) continue;
                B->objects[i].cell = (int8_t)cell;
                touched[i] = true;
                ed[ne].type = type;
                ed[ne].before = before;
                ed[ne].after = B->objects[i];
                ne++;
            }
        }
    }
    wsb u, a;
    wsb_init(&u);
    wsb_init(&a);
    bool spot = chance(g, 0.5);
    char cw[24];
    if (spot) {
        wsb_puts(&u, "Explain the disparities between the first and second image. <image> <image> Difference:");
        bool ord = ne > 1 && chance(g, 0.7);
        if (ne == 1) wsb_say(&a, g->r, "^There is {one difference|a single difference} between the two images.");
        else wsb_say(&a, g->r, "^There are %s differences between the two images.", count_word(ne, cw, sizeof(cw)));
        static const char *const ord1[3] = {"{First|To begin with}, ", "{Second|Next|Also}, ", "{Third|Finally|Lastly}, "};
        for (int e = 0; e < ne; e++) {
            wsb_puts(&a, " ");
            wsb cb, ca;
            wsb_init(&cb);
            wsb_init(&ca);
            cell_phrase(g, &cb, ed[e].before.cell);
            cell_phrase(g, &ca, ed[e].after.cell);
            if (ord) wsb_say(&a, g->r, ord1[e]);
            const char *pre = ord ? "" : "^";
            char fmt[256];
            switch (ed[e].type) {
            case EDIT_REMOVE:
                snprintf(fmt, sizeof(fmt), "%sthe %%s %%s %%s {has been removed|is missing|no longer appears} in the second image.", pre);
                wsb_say(&a, g->r, fmt, vs_world_color_name(ed[e].before.color), vs_world_shape_name(ed[e].before.shape), cb.p);
                break;
            case EDIT_ADD:
                snprintf(fmt, sizeof(fmt), "%s%%s new %%s %%s %%s {has been added|appears} %%s in the second image.", pre);
                wsb_say(&a, g->r, fmt, "a", vs_world_size_name(ed[e].after.size), vs_world_color_name(ed[e].after.color),
                        vs_world_shape_name(ed[e].after.shape), ca.p);
                break;
            case EDIT_RECOLOR:
                snprintf(fmt, sizeof(fmt), "%sthe %%s %%s %%s {has changed color|was recolored} and is now %%s %%s %%s.", pre);
                wsb_say(&a, g->r, fmt, vs_world_color_name(ed[e].before.color), vs_world_shape_name(ed[e].before.shape), cb.p,
                        article(vs_world_color_name(ed[e].after.color)), vs_world_color_name(ed[e].after.color),
                        vs_world_shape_name(ed[e].after.shape));
                break;
            default:
                snprintf(fmt, sizeof(fmt), "%sthe %%s %%s {has moved|moved|was moved} from the %%s to the %%s.", pre);
                wsb_say(&a, g->r, fmt, vs_world_color_name(ed[e].before.color), vs_world_shape_name(ed[e].before.shape),
                        vs_world_cell_name(ed[e].before.cell), vs_world_cell_name(ed[e].after.cell));
                break;
            }
            wsb_free(&cb);
            wsb_free(&ca);
        }
        wsb_say(&a, g->r, " {Everything else stays the same.|Everything else is unchanged.|The rest of the scene is unchanged.|All the other objects stay where they were.}");
    } else {
        wsb_puts(&u, "Please provide instructions for editing the source image to match the target image. Source Image: <image> Target Image: <image> Instruction:");
        wsb_say(&a, g->r, "^To {turn|transform} the source image into the target image, {follow these steps|make the following changes|apply these edits}:");
        for (int e = 0; e < ne; e++) {
            wsb_printf(&a, " %d. ", e + 1);
            wsb cb, ca;
            wsb_init(&cb);
            wsb_init(&ca);
            cell_phrase(g, &cb, ed[e].before.cell);
            cell_phrase(g, &ca, ed[e].after.cell);
            switch (ed[e].type) {
            case EDIT_REMOVE:
                wsb_say(&a, g->r, "{Remove|Delete|Erase} the %s %s %s.", vs_world_color_name(ed[e].before.color),
                        vs_world_shape_name(ed[e].before.shape), cb.p);
                break;
            case EDIT_ADD:
                wsb_say(&a, g->r, "{Add|Draw|Place} a %s %s %s %s.", vs_world_size_name(ed[e].after.size), vs_world_color_name(ed[e].after.color),
                        vs_world_shape_name(ed[e].after.shape), ca.p);
                break;
            case EDIT_RECOLOR:
                wsb_say(&a, g->r, "{Recolor|Repaint} the %s %s %s so that it becomes %s %s %s.", vs_world_color_name(ed[e].before.color),
                        vs_world_shape_name(ed[e].before.shape), cb.p, article(vs_world_color_name(ed[e].after.color)),
                        vs_world_color_name(ed[e].after.color), vs_world_shape_name(ed[e].after.shape));
                break;
            default:
                wsb_say(&a, g->r, "{Move|Shift} the %s %s from the %s to the %s.", vs_world_color_name(ed[e].before.color),
                        vs_world_shape_name(ed[e].before.shape), vs_world_cell_name(ed[e].before.cell),
                        vs_world_cell_name(ed[e].after.cell));
                break;
            }
            wsb_free(&cb);
            wsb_free(&ca);
        }
        wsb_say(&a, g->r, " {No other changes are needed.|Leave everything else as it is.|The other objects stay as they are.}");
    }
    pad_answer(g, &a, 38, REMARK_SHAPES);
    vs_world_query q = query_new(VS_Q_DIFF, 0);
    q.image2 = 1;
    bool want[VS_WORLD_N_SHAPES * VS_WORLD_N_COLORS] = {0};
    for (int e = 0; e < ne; e++) {
        if (ed[e].type != EDIT_ADD) want[ed[e].before.shape * VS_WORLD_N_COLORS + ed[e].before.color] = true;
        if (ed[e].type == EDIT_ADD || ed[e].type == EDIT_RECOLOR) want[ed[e].after.shape * VS_WORLD_N_COLORS + ed[e].after.color] = true;
    }
    char ans[128];
    pairs_answer(want, ans, sizeof(ans));
    set_turn(t, VS_TURN_FIRST, 0, 2, &u, &a, ans, &q);
}

/* ---------------------------------------------------------------------------------------------- */
/* story */

static const char *dir_name(int from, int to) {
    int dr = to / 3 - from / 3, dc = to % 3 - from % 3;
    return dr < 0 ? "up" : dr > 0 ? "down" : dc < 0 ? "left" : "right";
}

static void turn_story(gen *g, vs_world_turn *t) {
    vs_world_scene *sc0 = &g->s->scenes[0];
    new_scene(g, sc0, VS_SCENE_SHAPES);
    int hero = add_unique_object(g, sc0);
    int n_land = 1 + rnd(g, 2);
    for (int i = 0; i < n_land; i++) add_unique_object(g, sc0);
    /* the hero walks 4 steps between 4-neighbour cells, never onto another object */
    int path[5];
    path[0] = sc0->objects[hero].cell;
    int friend_at = chance(g, 0.6) ? 1 + rnd(g, 4) : -1; /* frame where a friend appears */
    vs_world_object friend = {0};
    for (int f = 1; f < 5; f++) {
        vs_world_scene *prev = &g->s->scenes[f - 1], *cur = &g->s->scenes[f];
        *cur = *prev;
        if (f == friend_at) {
            int fi = add_unique_object(g, cur);
            if (fi >= 0) friend = cur->objects[fi];
            else friend_at = -1;
        }
        int from = path[f - 1], opts[4], no = 0;
        int r0 = from / 3, c0 = from % 3;
        const int dr[4] = {-1, 1, 0, 0}, dc[4] = {0, 0, -1, 1};
        for (int d = 0; d < 4; d++) {
            int r1 = r0 + dr[d], c1 = c0 + dc[d];
            if (r1 < 0 || r1 > 2 || c1 < 0 || c1 > 2) continue;
            int to = r1 * 3 + c1;
            bool occ = false;
            for (int i = 0; i < cur->n_objects; i++) occ |= i != hero && cur->objects[i].cell == to;
            if (!occ && !(f >= 2 && to == path[f - 2] && chance(g, 0.8))) opts[no++] = to;
        }
        path[f] = no ? opts[rnd(g, no)] : from;
        cur->objects[hero].cell = (int8_t)path[f];
    }
    const vs_world_object *H = &sc0->objects[hero];
    const char *hc = vs_world_color_name(H->color), *hs = vs_world_shape_name(H->shape);
    wsb caps[4];
    for (int f = 0; f < 4; f++) {
        wsb_init(&caps[f]);
        if (f == 0) {
            wsb cp;
            wsb_init(&cp);
            cell_phrase(g, &cp, path[0]);
            wsb_say(&caps[0], g->r, "^{A|One day, a} %s %s {starts|begins its journey} %s.", hc, hs, cp.p);
            wsb_free(&cp);
            int lm = hero == 0 ? 1 : 0;
            const vs_world_object *L = &sc0->objects[lm];
            wsb_init(&cp);
            cell_phrase(g, &cp, L->cell);
            wsb_say(&caps[0], g->r, " {Nearby|Not far away}, %s %s %s {waits|rests} %s.", article(vs_world_color_name(L->color)), vs_world_color_name(L->color),
                    vs_world_shape_name(L->shape), cp.p);
            wsb_free(&cp);
        } else {
            if (path[f] == path[f - 1]) wsb_say(&caps[f], g->r, "^The %s %s {stays|rests} in the %s.", hc, hs, vs_world_cell_name(path[f]));
            else wsb_say(&caps[f], g->r, "^The %s %s {moves|travels|slides} %s to the %s.", hc, hs, dir_name(path[f - 1], path[f]), vs_world_cell_name(path[f]));
            if (f == friend_at)
                wsb_say(&caps[f], g->r, " %s %s %s {appears|shows up} in the %s.", chance(g, 0.5) ? "Suddenly, a" : "A", vs_world_color_name(friend.color),
                        vs_world_shape_name(friend.shape), vs_world_cell_name(friend.cell));
        }
    }
    wsb u, a;
    wsb_init(&u);
    wsb_init(&a);
    if (chance(g, 0.5))
        wsb_printf(&u, "Given the progression of the story with the first few images, can you write a fitting end considering the last image? "
                       "<image> Caption #1: %s <image> Caption #2: %s <image> Caption #3: %s <image> Caption #4: %s <image> Caption #5:",
                   caps[0].p, caps[1].p, caps[2].p, caps[3].p);
    else
        wsb_printf(&u, "With the narratives paired with the initial images, how would you conclude the story using the last picture? "
                       "<image> Caption #1: %s <image> Caption #2: %s <image> Caption #3: %s <image> Caption #4: %s <image> Caption #5:",
                   caps[0].p, caps[1].p, caps[2].p, caps[3].p);
    for (int f = 0; f < 4; f++) wsb_free(&caps[f]);
    int end = path[4];
    const vs_world_scene *last = &g->s->scenes[4];
    /* the nearest other object in the last frame, if adjacent */
    int buddy = -1;
    for (int i = 0; i < last->n_objects; i++) {
        if (i == hero) continue;
        int c = last->objects[i].cell, d = abs(c / 3 - end / 3) + abs(c % 3 - end % 3);
        if (d == 1) buddy = i;
    }
    if (buddy >= 0 && friend_at == 4 && last->objects[buddy].shape == friend.shape && last->objects[buddy].color == friend.color)
        buddy = -1; /* the newcomer gets its own sentence below */
    if (chance(g, 0.6))
        wsb_say(&a, g->r, "^{In the last picture|In the final image|At the end of the story|When the story ends|In the fifth picture}, the %s %s {reaches|arrives at|ends up in} the %s",
                hc, hs, vs_world_cell_name(end));
    else
        wsb_say(&a, g->r, "^{Finally|At last|In the end}, the %s %s {reaches|arrives at|makes it to} the %s{ in the last picture| in the final image|}", hc, hs,
                vs_world_cell_name(end));
    if (buddy >= 0)
        wsb_say(&a, g->r, ", right next to the %s %s", vs_world_color_name(last->objects[buddy].color), vs_world_shape_name(last->objects[buddy].shape));
    wsb_puts(&a, ".");
    if (path[4] != path[3]) wsb_say(&a, g->r, " It {moved|traveled} %s for its {last|final} step{| of the journey}.", dir_name(path[3], path[4]));
    wsb_say(&a, g->r, " {After its long trip across the picture|After wandering from cell to cell|After all its travels}, it {finally rests there|can finally rest|stops to rest}.");
    if (friend_at == 4) /* the newcomer is only in the last image: the ending must come from it */
        wsb_say(&a, g->r, " {Just then|At that moment}, %s %s %s appears in the %s{, so it is not alone anymore|, keeping it company}.",
                article(vs_world_color_name(friend.color)), vs_world_color_name(friend.color), vs_world_shape_name(friend.shape),
                vs_world_cell_name(friend.cell));
    else if (friend_at > 0)
        wsb_say(&a, g->r, " The %s %s that appeared earlier {is still there|stays where it was}, {so the two of them are not alone anymore|keeping it company}.",
                vs_world_color_name(friend.color), vs_world_shape_name(friend.shape));
    if (chance(g, 0.4)) wsb_say(&a, g->r, " That is how the {adventure|journey} of the %s %s ends.", hc, hs);
    else wsb_say(&a, g->r, " {The story ends happily.|And so the little journey comes to an end.|Its adventure is over for today.}");
    pad_answer(g, &a, 38, REMARK_SHAPES);
    vs_world_query q = query_new(VS_Q_STORY, 0);
    q.sel.shape = H->shape;
    q.sel.color = H->color;
    char ans[64];
    snprintf(ans, sizeof(ans), "%s", vs_world_cell_name(end));
    set_turn(t, VS_TURN_FIRST, 0, 5, &u, &a, ans, &q);
}

/* ---------------------------------------------------------------------------------------------- */
/* text: arithmetic word problems and the encyclopedia */

static void turn_arith(gen *g, vs_world_turn *t, vs_world_turn_kind kind) {
    static const char *const add_v[4] = {"buys", "finds", "gets", "receives"};
    static const char *const add_g[4] = {"buying", "finding", "getting", "receiving"};
    static const char *const sub_v[4] = {"gives away", "loses", "uses up", "sells"};
    static const char *const sub_g[4] = {"giving away", "losing", "using up", "selling"};
    int she;
    const char *who = world_person(rnd(g, world_people_n()), &she);
    const char *item = world_item(rnd(g, world_items_n()));
    const char *pr = she ? "she" : "he", *pos = she ? "her" : "his";
    vs_world_query q = query_new(VS_Q_ARITH, -1);
    int64_t cur = 5 + rnd(g, 36);
    q.nums[0] = cur;
    q.n_ops = 1 + rnd(g, 3);
    wsb u, a;
    wsb_init(&u);
    wsb_init(&a);
    wsb_say(&u, g->r, "{|Solve this problem step by step. |Answer the following question. }%s has %lld %s.", who, (long long)cur, item);
    wsb_say(&a, g->r, "^{Let's solve this step by step.|We can work this out one step at a time.|Let me go through the problem step by step.}");
    wsb_say(&a, g->r, " {The question asks|We need to find} how many %s %s has at the end, so I follow each change in order.", item, who);
    wsb_say(&a, g->r, " %s starts with %lld %s.", who, (long long)cur, item);
    for (int i = 0; i < q.n_ops; i++) {
        char op;
        int64_t v;
        int k = rnd(g, 100), verb = rnd(g, 4);
        if (k < 35) op = '+', v = 2 + rnd(g, 19);
        else if (k < 70 && cur > 2) op = '-', v = 1 + rnd(g, (int)VS_MIN(cur - 1, 20));
        else if (k < 85 && cur <= 60) op = '*', v = 2 + rnd(g, 2);
        else {
            int divs[4], nd = 0;
            for (int d = 2; d <= 5; d++)
                if (cur % d == 0 && cur / d >= 2) divs[nd++] = d;
            if (nd) op = '/', v = divs[rnd(g, nd)];
            else op = '+', v = 2 + rnd(g, 19);
        }
        q.ops[i] = op;
        q.nums[i + 1] = v;
        int64_t next = op == '+' ? cur + v : op == '-' ? cur - v : op == '*' ? cur * v : cur / v;
        const char *subj = i == 0 ? who : pr, *then = i == 0 ? "" : "Then ";
        switch (op) {
        case '+':
            wsb_say(&u, g->r, " %s%s %s %lld more.", then, subj, add_v[verb], (long long)v);
            wsb_say(&a, g->r, " {After|By} %s %lld more, %s {has|ends up with} %lld + %lld = %lld.", add_g[verb], (long long)v, pr, (long long)cur,
                    (long long)v, (long long)next);
            break;
        case '-':
            wsb_say(&u, g->r, " %s%s %s %lld of them.", then, subj, sub_v[verb], (long long)v);
            wsb_say(&a, g->r, " %c%s %lld {leaves|means there are} %lld - %lld = %lld.", sub_g[verb][0] - 'a' + 'A', sub_g[verb] + 1, (long long)v,
                    (long long)cur, (long long)v, (long long)next);
            break;
        case '*':
            wsb_say(&u, g->r, v == 2 ? " %s number of %s that %s has doubles." : " %s number of %s that %s has triples.",
                    i == 0 ? "The" : "Then the", item, subj);
            wsb_say(&a, g->r, v == 2 ? " {Doubling|Twice} that gives %lld * %lld = %lld." : " {Tripling|Three times} that gives %lld * %lld = %lld.",
                    (long long)cur, (long long)v, (long long)next);
            break;
        default:
            wsb_say(&u, g->r, " %s%s {splits|divides} %s %s equally into %lld groups and keeps one group.", then, subj, pos, item, (long long)v);
            wsb_say(&a, g->r, " Splitting into %lld equal groups gives %lld / %lld = %lld {in each group|per group}.", (long long)v, (long long)cur,
                    (long long)v, (long long)next);
            break;
        }
        cur = next;
    }
    wsb_say(&u, g->r, " How many %s does %s have {now|at the end}?", item, who);
    wsb_say(&a, g->r, " {So|Therefore|In the end}, %s has %lld %s, and the answer is %lld.", who, (long long)cur, item, (long long)cur);
    char ans[32];
    snprintf(ans, sizeof(ans), "%lld", (long long)cur);
    pad_answer(g, &a, 34, REMARK_NEUTRAL);
    set_turn(t, kind, 0, 0, &u, &a, ans, &q);
}

static void entity_blurb(gen *g, wsb *a, const world_entity *e, int skip_attr) {
    int order[WATTR_N] = {0, 1, 2, 3, 4, 5};
    shuffle_int(g, order, WATTR_N);
    int said = 0;
    for (int k = 0; k < WATTR_N && said < 3; k++) {
        int at = order[k];
        if (at == skip_attr) continue;
        switch (at) {
        case WATTR_CAPITAL: wsb_say(a, g->r, " {Its capital is|The capital city is} %s.", e->capital); break;
        case WATTR_RIVER: wsb_say(a, g->r, " The %s river {flows through it|runs through the country}.", e->river); break;
        case WATTR_EXPORT: wsb_say(a, g->r, " {It is known for exporting|Its main export is} %s.", e->export_); break;
        case WATTR_ANIMAL: wsb_say(a, g->r, " {Its national animal is the|The national animal is the} %s.", e->animal); break;
        case WATTR_FOUNDED: wsb_say(a, g->r, " It was founded in %d.", e->founded); break;
        default: wsb_say(a, g->r, " About %d thousand people live there.", e->population); break;
        }
        said++;
    }
}

static void fact_max(gen *g, wsb *u, wsb *a, vs_world_query *q, char *ans, bool first) {
    int n = g->test ? 4 : 3 + rnd(g, 2), idx[4];
    for (int i = 0; i < n; i++) {
        bool dup;
        do {
            idx[i] = rnd(g, world_entity_n());
            dup = false;
            for (int j = 0; j < i; j++) dup |= idx[j] == idx[i];
        } while (dup);
    }
    bool pop = chance(g, 0.5);
    *q = query_new(VS_Q_FACT_MAX, -1);
    q->attr = pop ? WATTR_POPULATION : WATTR_FOUNDED;
    q->entity = idx[0];
    q->entity2 = idx[1];
    q->entity3 = idx[2];
    q->entity4 = n > 3 ? idx[3] : -1;
    int best = 0;
    for (int i = 1; i < n; i++)
        if (world_entity_number(world_entity_at(idx[i]), q->attr) > world_entity_number(world_entity_at(idx[best]), q->attr)) best = i;
    const world_entity *w = world_entity_at(idx[best]);
    snprintf(ans, 64, "%s", w->name);
    wsb list;
    wsb_init(&list);
    for (int i = 0; i < n; i++) {
        if (i) wsb_puts(&list, i == n - 1 ? " or " : ", ");
        wsb_puts(&list, world_entity_at(idx[i])->name);
    }
    if (pop) wsb_say(u, g->r, "{Which of these countries has the most people: %s?|Which country has the largest population: %s?}", list.p);
    else wsb_say(u, g->r, "{Which of these countries is the youngest: %s?|Which country was founded last: %s?}", list.p);
    wsb_free(&list);
    const char *unit = pop ? " thousand people" : "";
    if (first) {
        if (pop) wsb_say(a, g->r, "^%s has the most people, with about %d thousand.", w->name, w->population);
        else wsb_say(a, g->r, "^%s is the youngest, founded in %d.", w->name, w->founded);
        wsb_say(a, g->r, pop ? " The {others|other countries} have fewer: " : " The {others|other countries} were founded earlier: ");
    } else {
        wsb_say(a, g->r, pop ? "^{Let me compare|Comparing} the populations: " : "^{Let me compare|Comparing} the founding years: ");
    }
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (first && i == best) continue;
        const world_entity *x = world_entity_at(idx[i]);
        int cnt = first ? n - 1 : n;
        if (k) wsb_puts(a, k == cnt - 1 ? " and " : ", ");
        if (pop) wsb_printf(a, "%s about %d%s", x->name, x->population, unit);
        else wsb_printf(a, "%s in %d", x->name, x->founded);
        k++;
    }
    wsb_puts(a, ".");
    if (!first) {
        if (pop) wsb_say(a, g->r, " The largest of these is %d thousand, so the answer is %s.", w->population, w->name);
        else wsb_say(a, g->r, " The latest of these years is %d, so the answer is %s.", w->founded, w->name);
    } else {
        entity_blurb(g, a, w, q->attr);
    }
}

static void turn_fact(gen *g, vs_world_turn *t, vs_world_turn_kind kind) {
    wsb u, a;
    wsb_init(&u);
    wsb_init(&a);
    vs_world_query q;
    char ans[64];
    /* The encyclopedia is finite (one fixed world), so its single-fact questions would repeat across the
     * test splits of different seeds: test questions compare three or four countries instead. */
    int k = g->test ? 100 : rnd(g, 120);
    int ei = rnd(g, world_entity_n());
    const world_entity *e = world_entity_at(ei);
    bool first = chance(g, 0.5);
    if (k >= 100) {
        fact_max(g, &u, &a, &q, ans, first);
    } else if (k < 55) {
        int at = rnd(g, WATTR_N);
        q = query_new(VS_Q_FACT, -1);
        q.entity = ei;
        q.attr = at;
        switch (at) {
        case WATTR_CAPITAL:
            wsb_say(&u, g->r, "{What is the capital of %s?|Which city is the capital of %s?|Name the capital city of %s.}", e->name);
            if (first) wsb_say(&a, g->r, "^The capital of %s is %s.", e->name, e->capital);
            else wsb_say(&a, g->r, "^%s is a country {described|listed} in the encyclopedia, and its {capital|capital city} is %s.", e->name, e->capital);
            break;
        case WATTR_RIVER:
            wsb_say(&u, g->r, "{Which river flows through %s?|What is the main river of %s?|Name the river that runs through %s.}", e->name);
            if (first) wsb_say(&a, g->r, "^The %s river {flows through|is the main river of} %s.", e->river, e->name);
            else wsb_say(&a, g->r, "^According to the encyclopedia, the main river of %s is the %s.", e->name, e->river);
            break;
        case WATTR_EXPORT:
            wsb_say(&u, g->r, "{What is the main export of %s?|What does %s mainly export?|Which good is %s best known for exporting?}", e->name);
            if (first) wsb_say(&a, g->r, "^The main export of %s is %s.", e->name, e->export_);
            else wsb_say(&a, g->r, "^%s {trades with many neighbors|is a trading nation}, and its main export is %s.", e->name, e->export_);
            break;
        case WATTR_ANIMAL:
            wsb_say(&u, g->r, "{What is the national animal of %s?|Which animal is the symbol of %s?|Name the national animal of %s.}", e->name);
            if (first) wsb_say(&a, g->r, "^The national animal of %s is the %s.", e->name, e->animal);
            else wsb_say(&a, g->r, "^The encyclopedia says that the %s is the national animal of %s.", e->animal, e->name);
            break;
        case WATTR_FOUNDED:
            wsb_say(&u, g->r, "{In which year was %s founded?|When was %s founded?|What year was %s founded in?}", e->name);
            if (first) wsb_say(&a, g->r, "^%s was founded in %d.", e->name, e->founded);
            else wsb_say(&a, g->r, "^The history of %s {goes back|reaches back} to its founding in the year %d.", e->name, e->founded);
            break;
        default:
            wsb_say(&u, g->r, "{How many people live in %s?|What is the population of %s?|How large is the population of %s?}", e->name);
            if (first) wsb_say(&a, g->r, "^%s has a population of about %d thousand people.", e->name, e->population);
            else wsb_say(&a, g->r, "^The encyclopedia gives the population of %s as about %d thousand people.", e->name, e->population);
            break;
        }
        if (world_attr_is_number(at)) snprintf(ans, sizeof(ans), "%lld", (long long)world_entity_number(e, at));
        else snprintf(ans, sizeof(ans), "%s", world_entity_word(e, at));
        entity_blurb(g, &a, e, at);
        if (!first) wsb_say(&a, g->r, " {So|Therefore}, the answer is %s.", ans);
    } else {
        int ej;
        do ej = rnd(g, world_entity_n());
        while (ej == ei);
        const world_entity *f = world_entity_at(ej);
        bool pop = chance(g, 0.5);
        if (k < 80) {
            q = query_new(VS_Q_FACT_CMP, -1);
            q.entity = ei;
            q.entity2 = ej;
            q.attr = pop ? WATTR_POPULATION : WATTR_FOUNDED;
            /* FACT_CMP asks for the larger attribute value: more people, or founded later (younger) */
            const world_entity *w = pop ? (e->population > f->population ? e : f) : (e->founded > f->founded ? e : f);
            const world_entity *l = w == e ? f : e;
            snprintf(ans, sizeof(ans), "%s", w->name);
            if (pop) {
                wsb_say(&u, g->r, "{Which country has more people, %s or %s?|Which has the larger population, %s or %s?}", e->name, f->name);
                if (first) {
                    wsb_say(&a, g->r, "^%s has more people. About %d thousand people live there, while %s has about %d thousand.", w->name, w->population,
                            l->name, l->population);
                    entity_blurb(g, &a, w, WATTR_POPULATION);
                }
                else
                    wsb_say(&a, g->r, "^%s has about %d thousand people and %s has about %d thousand. Since %d is {more|larger} than %d, the answer is %s.",
                            e->name, e->population, f->name, f->population, w->population, l->population, w->name);
            } else {
                wsb_say(&u, g->r, "{Which country is younger, %s or %s?|Which was founded later, %s or %s?}", e->name, f->name);
                if (first) {
                    wsb_say(&a, g->r, "^%s is younger. It was founded in %d, while %s was founded {earlier, |}in %d.", w->name, w->founded, l->name,
                            l->founded);
                    entity_blurb(g, &a, w, WATTR_FOUNDED);
                }
                else
                    wsb_say(&a, g->r, "^%s was founded in %d and %s was founded in %d. Since %d comes after %d, the answer is %s.", e->name, e->founded,
                            f->name, f->founded, w->founded, l->founded, w->name);
            }
        } else {
            q = query_new(VS_Q_FACT_SPAN, -1);
            q.entity = ei;
            q.entity2 = ej;
            q.attr = pop ? WATTR_POPULATION : WATTR_FOUNDED;
            const world_entity *w = (pop ? e->population > f->population : e->founded > f->founded) ? e : f;
            const world_entity *l = w == e ? f : e;
            long long d = pop ? w->population - l->population : w->founded - l->founded;
            snprintf(ans, sizeof(ans), "%lld", d);
            if (pop) {
                wsb_say(&u, g->r, "{How many more thousand people live in %s than in %s?|By how many thousand people does the population of %s exceed that of %s?}",
                        w->name, l->name);
                wsb_say(&a, g->r, "^%s has about %d thousand people and %s has about %d thousand.", w->name, w->population, l->name, l->population);
                entity_blurb(g, &a, w, WATTR_POPULATION);
                wsb_say(&a, g->r, " The difference is %d - %d = %lld thousand, so the answer is %lld.", w->population, l->population, d, d);
            } else {
                wsb_say(&u, g->r, "{How many years passed between the founding of %s and the founding of %s?|How many years apart were %s and %s founded?}",
                        l->name, w->name);
                wsb_say(&a, g->r, "^%s was founded in %d and %s was founded in %d.", l->name, l->founded, w->name, w->founded);
                entity_blurb(g, &a, l, WATTR_FOUNDED);
                wsb_say(&a, g->r, " The difference is %d - %d = %lld years, so the answer is %lld.", w->founded, l->founded, d, d);
            }
        }
    }
    pad_answer(g, &a, 34, REMARK_NEUTRAL);
    set_turn(t, kind, 0, 0, &u, &a, ans, &q);
}

static void turn_text(gen *g, vs_world_turn *t, vs_world_turn_kind kind) {
    if (chance(g, 0.6)) turn_arith(g, t, kind);
    else turn_fact(g, t, kind);
}

/* ---------------------------------------------------------------------------------------------- */
/* drill: terse text drills for pretraining the LM (an opt-in suite): arithmetic and encyclopedia facts
 * answered in one or a few short clauses ending in "so the answer is X", many answer tokens per row */

/* One arithmetic step on cur: the operator and operand (exact division only). */
static char drill_op(gen *g, int64_t cur, int64_t *v) {
    int k = rnd(g, 100);
    if (k < 35) return *v = 1 + rnd(g, 60), '+';
    if (k < 65 && cur > 2) return *v = 1 + rnd(g, (int)VS_MIN(cur - 1, 60)), '-';
    if (k < 85 && cur <= 40) return *v = 2 + rnd(g, 8), '*';
    int divs[8], nd = 0;
    for (int d = 2; d <= 9; d++)
        if (cur % d == 0 && cur / d >= 2) divs[nd++] = d;
    if (nd) return *v = divs[rnd(g, nd)], '/';
    return *v = 1 + rnd(g, 60), '+';
}

static int64_t apply_op(int64_t cur, char op, int64_t v) {
    return op == '+' ? cur + v : op == '-' ? cur - v : op == '*' ? cur * v : cur / v;
}

static void drill_arith(gen *g, wsb *u, wsb *a, vs_world_query *q, char *ans) {
    static const char *const verb[4] = {"add %lld", "subtract %lld", "multiply by %lld", "divide by %lld"};
    *q = query_new(VS_Q_ARITH, -1);
    const bool chain = g->test || chance(g, 0.4);
    int64_t cur = chain ? 2 + rnd(g, 60) : 2 + rnd(g, 198);
    q->nums[0] = cur;
    q->n_ops = chain ? 2 + rnd(g, 2) : 1;
    for (int i = 0; i < q->n_ops; i++) { /* each operand drawn against the running value */
        q->ops[i] = drill_op(g, cur, &q->nums[i + 1]);
        cur = apply_op(cur, q->ops[i], q->nums[i + 1]);
    }
    snprintf(ans, 64, "%lld", (long long)cur);
    if (!chain) {
        const char op = q->ops[0];
        const long long x = q->nums[0], y = q->nums[1];
        wsb_say(u, g->r, "{What is %lld %c %lld?|Compute %lld %c %lld.|%lld %c %lld = ?}", x, op, y);
        wsb_say(a, g->r, "%lld %c %lld = %lld, so the answer is %lld.", x, op, y, (long long)cur, (long long)cur);
        return;
    }
    wsb_say(u, g->r, "{Start with|Begin with|Take} %lld", (long long)q->nums[0]);
    int64_t run = q->nums[0];
    for (int i = 0; i < q->n_ops; i++) {
        const int vi = q->ops[i] == '+' ? 0 : q->ops[i] == '-' ? 1 : q->ops[i] == '*' ? 2 : 3;
        wsb_puts(u, i == 0 ? ", " : i == q->n_ops - 1 ? " and then " : ", then ");
        wsb_printf(u, verb[vi], (long long)q->nums[i + 1]);
        const int64_t next = apply_op(run, q->ops[i], q->nums[i + 1]);
        wsb_printf(a, "%s%lld %c %lld = %lld.", i ? " " : "", (long long)run, q->ops[i], (long long)q->nums[i + 1],
                   (long long)next);
        run = next;
    }
    wsb_say(u, g->r, ". {What is the result?|What do you get?|What number do you end with?}");
    wsb_say(a, g->r, " {So|Therefore} the answer is %lld.", (long long)run);
}

static void drill_fact(gen *g, wsb *u, wsb *a, vs_world_query *q, char *ans) {
    int k = g->test ? 100 : rnd(g, 100);
    if (k >= 80) { /* the comparison the test split asks */
        fact_max(g, u, a, q, ans, false);
        return;
    }
    int ei = rnd(g, world_entity_n()), ej;
    const world_entity *e = world_entity_at(ei);
    if (k < 55) {
        int at = rnd(g, WATTR_N);
        *q = query_new(VS_Q_FACT, -1);
        q->entity = ei, q->attr = at;
        if (world_attr_is_number(at)) snprintf(ans, 64, "%lld", (long long)world_entity_number(e, at));
        else snprintf(ans, 64, "%s", world_entity_word(e, at));
        switch (at) {
        case WATTR_CAPITAL:
            wsb_say(u, g->r, "{What is the capital of %s?|Name the capital of %s.}", e->name);
            wsb_say(a, g->r, "The capital of %s is %s, so the answer is %s.", e->name, ans, ans);
            break;
        case WATTR_RIVER:
            wsb_say(u, g->r, "{Which river flows through %s?|Name the river of %s.}", e->name);
            wsb_say(a, g->r, "The %s river flows through %s, so the answer is %s.", ans, e->name, ans);
            break;
        case WATTR_EXPORT:
            wsb_say(u, g->r, "{What is the main export of %s?|What does %s mainly export?}", e->name);
            wsb_say(a, g->r, "The main export of %s is %s, so the answer is %s.", e->name, ans, ans);
            break;
        case WATTR_ANIMAL:
            wsb_say(u, g->r, "{What is the national animal of %s?|Name the national animal of %s.}", e->name);
            wsb_say(a, g->r, "The national animal of %s is the %s, so the answer is %s.", e->name, ans, ans);
            break;
        case WATTR_FOUNDED:
            wsb_say(u, g->r, "{When was %s founded?|In which year was %s founded?}", e->name);
            wsb_say(a, g->r, "%s was founded in %s, so the answer is %s.", e->name, ans, ans);
            break;
        default:
            wsb_say(u, g->r, "{What is the population of %s?|How many thousand people live in %s?}", e->name);
            wsb_say(a, g->r, "About %s thousand people live in %s, so the answer is %s.", ans, e->name, ans);
            break;
        }
        return;
    }
    do ej = rnd(g, world_entity_n());
    while (ej == ei);
    const world_entity *f = world_entity_at(ej);
    const bool pop = chance(g, 0.5);
    const int va = pop ? e->population : e->founded, vb = pop ? f->population : f->founded;
    const world_entity *w = va > vb ? e : f, *l = w == e ? f : e;
    const int vw = va > vb ? va : vb, vl = va > vb ? vb : va;
    *q = query_new(k < 70 ? VS_Q_FACT_CMP : VS_Q_FACT_SPAN, -1);
    q->entity = ei, q->entity2 = ej, q->attr = pop ? WATTR_POPULATION : WATTR_FOUNDED;
    if (k < 70) {
        snprintf(ans, 64, "%s", w->name);
        if (pop) wsb_say(u, g->r, "Which has the larger population, %s or %s?", e->name, f->name);
        else wsb_say(u, g->r, "Which was founded later, %s or %s?", e->name, f->name);
        wsb_say(a, g->r, pop ? "%s has %d thousand people and %s has %d thousand, so the answer is %s."
                             : "%s was founded in %d and %s in %d, so the answer is %s.",
                e->name, va, f->name, vb, w->name);
    } else {
        snprintf(ans, 64, "%d", vw - vl);
        if (pop) wsb_say(u, g->r, "How many more thousand people live in %s than in %s?", w->name, l->name);
        else wsb_say(u, g->r, "How many years apart were %s and %s founded?", l->name, w->name);
        wsb_say(a, g->r, "%s has %d and %s has %d, and %d - %d = %d, so the answer is %d.", w->name, vw, l->name, vl, vw,
                vl, vw - vl, vw - vl);
    }
}

static void turn_drill(gen *g, vs_world_turn *t) {
    wsb u, a;
    wsb_init(&u);
    wsb_init(&a);
    vs_world_query q;
    char ans[64];
    if (chance(g, 0.55)) drill_arith(g, &u, &a, &q, ans);
    else drill_fact(g, &u, &a, &q, ans);
    set_turn(t, VS_TURN_FIRST, 0, 0, &u, &a, ans, &q);
}

/* ---------------------------------------------------------------------------------------------- */
/* look: LLaVA-1.5's short-answer VQA (its VQAv2 / GQA / OCR-VQA instruction), an opt-in suite. The first
 * turn is a question of vqa, pope, ocr or chart about one picture, answered by the short answer alone; as
 * many more short-answer questions about the same picture follow as it offers, up to LOOK_TURNS - 2, as
 * LLaVA-1.5 packs the questions of one image into one conversation; the last turn asks for the whole
 * picture written out (look_transcript). Every answer token depends on the picture (where the benchmark
 * suites' answers are mostly explanation), so training on it asks the model to find the object, the line or
 * the bar each question names; the later turns give it several such answers for one encoding of the
 * picture, and the transcript binds every object's place, size, colour and shape (every line's or bar's
 * text, value and colour) in one answer. */

#define LOOK_Q "Answer the question using a single word or phrase."
#define LOOK_TURNS VS_WORLD_MAX_TURNS
#define LOOK_CANDIDATES 64

typedef struct look_q {
    char *text; /* the question (vs_malloc'd) */
    char ans[64];
    vs_world_query q;
} look_q;

typedef struct look_set {
    look_q c[LOOK_CANDIDATES];
    int n;
} look_set;

/* Adds a candidate whose question is wsb_say(fmt, ...); false when the set is full. */
static bool look_add(gen *g, look_set *ls, const vs_world_query *q, const char *ans, const char *fmt, ...) {
    if (ls->n >= LOOK_CANDIDATES) return false;
    look_q *c = &ls->c[ls->n++];
    snprintf(c->ans, sizeof(c->ans), "%s", ans);
    c->q = *q;
    wsb b;
    wsb_init(&b);
    va_list ap;
    va_start(ap, fmt);
    wsb_vsay(&b, g->r, fmt, ap);
    va_end(ap);
    c->text = wsb_take(&b);
    return true;
}

#define LOOK_EXISTS "{Is there %s %s in the image?|Does the image contain %s %s?|Can you see %s %s in this picture?}"

/* The candidates for a shapes picture: colour, shape and size of an object its shape or colour names
 * alone, the position of a colour-shape pair, pairs that are and are not there (half of the absent ones
 * share an attribute with an object, as pope's), counts by colour and by shape. */
static void look_shapes(gen *g, const vs_world_scene *sc, look_set *ls) {
    char what[48];
    for (int i = 0; i < sc->n_objects; i++) {
        const vs_world_object *o = &sc->objects[i];
        const char *shape = vs_world_shape_name(o->shape), *color = vs_world_color_name(o->color);
        vs_world_sel by_shape = sel_any(), by_color = sel_any(), by_pair = sel_any();
        by_shape.shape = o->shape;
        by_color.color = o->color;
        by_pair.shape = o->shape, by_pair.color = o->color;
        vs_world_query q;
        if (count_match(sc, by_shape) == 1) {
            q = query_new(VS_Q_COLOR, 0);
            q.sel = by_shape;
            look_add(g, ls, &q, color, "{What color is the %s?|Which color does the %s have?|What is the color of the %s?}", shape);
            q = query_new(VS_Q_SIZE, 0);
            q.sel = by_shape;
            look_add(g, ls, &q, vs_world_size_name(o->size),
                     "{Is the %s small or large?|What size is the %s?|How big is the %s, small or large?}", shape);
        }
        if (count_match(sc, by_color) == 1) {
            q = query_new(VS_Q_SHAPE, 0);
            q.sel = by_color;
            look_add(g, ls, &q, shape,
                     "{What shape is the %s object?|What kind of shape is %s in this image?|Which shape has the color %s?}", color);
        }
        /* pairs are unique in every shapes scene but counting's */
        if (count_match(sc, by_pair) == 1) {
            q = query_new(VS_Q_POSITION, 0);
            q.sel = by_pair;
            look_add(g, ls, &q, vs_world_cell_name(o->cell),
                     "{Where is the %s %s?|In which part of the image is the %s %s?|Where can you find the %s %s in the picture?}",
                     color, shape);
        }
        q = query_new(VS_Q_EXISTS, 0);
        q.sel = by_pair;
        snprintf(what, sizeof(what), "%s %s", color, shape);
        look_add(g, ls, &q, "yes", LOOK_EXISTS, article(what), what);
    }
    /* as many absent pairs as present ones (at most 3) */
    int n_no = VS_MIN(sc->n_objects, 3);
    for (int k = 0; k < n_no && sc->n_objects; k++) {
        int shape, color, guard = 0;
        const vs_world_object *o = &sc->objects[rnd(g, sc->n_objects)];
        bool near = chance(g, 0.5), keep_shape = chance(g, 0.5);
        do {
            shape = near && keep_shape ? o->shape : rnd(g, VS_WORLD_N_SHAPES);
            color = near && !keep_shape ? o->color : rnd(g, VS_WORLD_N_COLORS);
        } while (pair_used(sc, shape, color) && ++guard < 100);
        if (pair_used(sc, shape, color)) continue;
        vs_world_query q = query_new(VS_Q_EXISTS, 0);
        q.sel.shape = (int8_t)shape, q.sel.color = (int8_t)color;
        snprintf(what, sizeof(what), "%s %s", vs_world_color_name(color), vs_world_shape_name(shape));
        if (!look_add(g, ls, &q, "no", LOOK_EXISTS, article(what), what)) break;
    }
    /* counts of the colours and shapes the picture holds */
    for (int by_shape = 0; by_shape < 2; by_shape++) {
        int n_kinds = by_shape ? VS_WORLD_N_SHAPES : VS_WORLD_N_COLORS;
        for (int v = 0; v < n_kinds; v++) {
            vs_world_sel sel = sel_any();
            if (by_shape) sel.shape = (int8_t)v;
            else sel.color = (int8_t)v;
            int n = count_match(sc, sel);
            if (!n) continue;
            vs_world_query q = query_new(VS_Q_COUNT, 0);
            q.sel = sel;
            char ans[16];
            snprintf(ans, sizeof(ans), "%d", n);
            bool added = by_shape ? look_add(g, ls, &q, ans,
                                             "{How many %s are there in the image?|How many %s are there in the picture?|"
                                             "How many %s can you see?|Count the %s in the picture.}",
                                             world_shape_plural(v))
                                  : look_add(g, ls, &q, ans,
                                             "{How many %s objects are there in the image?|How many %s objects are there in the "
                                             "picture?|How many shapes are %s?}",
                                             vs_world_color_name(v));
            if (!added) return;
        }
    }
}

/* The candidates for a text picture: every line by its place, a line by its colour when no other line
 * has it, all lines, the number of lines. */
static void look_glyph(gen *g, const vs_world_scene *sc, look_set *ls) {
    int n = sc->n_lines;
    vs_world_query q = query_new(VS_Q_LINE_COUNT, 0);
    char ans[64];
    snprintf(ans, sizeof(ans), "%d", n);
    look_add(g, ls, &q, ans,
             "{How many lines of text are in the image?|How many lines of text can you see?|Count the lines of text in this picture.}");
    q = query_new(VS_Q_READ_ALL, 0);
    ans[0] = 0;
    for (int i = 0; i < n; i++) {
        size_t k = strlen(ans);
        snprintf(ans + k, sizeof(ans) - k, "%s%s", i ? " " : "", sc->lines[i].text);
    }
    if (n == 1 && is_digits(sc->lines[0].text))
        look_add(g, ls, &q, ans, "{What number is shown in the image?|Which number is written in the picture?|What does the text in the image say?}");
    else if (n == 1)
        look_add(g, ls, &q, ans, "{What word is written in the image?|What does the text in the image say?|Read the word in this picture.}");
    else
        look_add(g, ls, &q, ans,
                 "{What does the text say? Read all the lines from top to bottom.|Read all the text in the image, from top to "
                 "bottom.|What is written in this image? Read every line.}");
    for (int i = 0; i < n && n > 1; i++) {
        const vs_world_line *l = &sc->lines[i];
        q = query_new(VS_Q_READ_LINE, 0);
        q.index = i;
        const char *which = i == 0 && chance(g, 0.4) ? "top" : i == n - 1 && chance(g, 0.4) ? "bottom" : world_ordinal(i);
        look_add(g, ls, &q, l->text, "{What is written on the %s line?|What does the %s line say?|Read the %s line of text.}", which);
        int same = 0;
        for (int j = 0; j < n; j++) same += sc->lines[j].color == l->color;
        if (same != 1) continue;
        q = query_new(VS_Q_READ_COLOR, 0);
        q.sel.color = l->color;
        look_add(g, ls, &q, l->text, "{Which word is written in %s?|What is written in %s?|What does the %s text say?}",
                 vs_world_color_name(l->color));
    }
}

/* The candidates for a chart: every bar's value, the tallest and the shortest bar, comparisons and
 * differences of pairs with different values. */
static void look_chart(gen *g, const vs_world_scene *sc, look_set *ls) {
    int n = sc->n_bars, imax = 0, imin = 0;
    char ans[16];
    for (int i = 0; i < n; i++) {
        const vs_world_bar *bar = &sc->bars[i];
        if (bar->value > sc->bars[imax].value) imax = i;
        if (bar->value < sc->bars[imin].value) imin = i;
        vs_world_query q = query_new(VS_Q_BAR_VALUE, 0);
        q.label = bar->label;
        snprintf(ans, sizeof(ans), "%d", bar->value);
        look_add(g, ls, &q, ans, "{What is the value of bar %c?|How high is the bar labeled %c?|What value does %c have in the chart?}",
                 bar->label);
    }
    for (int mx = 0; mx < 2; mx++) {
        const vs_world_bar *bar = &sc->bars[mx ? imax : imin];
        int ties = 0;
        for (int i = 0; i < n; i++) ties += sc->bars[i].value == bar->value;
        if (ties != 1) continue;
        vs_world_query q = query_new(mx ? VS_Q_BAR_MAX : VS_Q_BAR_MIN, 0);
        snprintf(ans, sizeof(ans), "%c", bar->label);
        if (!look_add(g, ls, &q, ans,
                      mx ? "{Which bar is the tallest?|Which label has the highest value?|Which bar has the largest value in the chart?}"
                         : "{Which bar is the shortest?|Which label has the lowest value?|Which bar has the smallest value in the chart?}"))
            return;
    }
    for (int k = 0; k < 2 && n >= 2; k++) {
        int i = rnd(g, n), j;
        do j = rnd(g, n);
        while (j == i);
        const vs_world_bar *B1 = &sc->bars[i], *B2 = &sc->bars[j];
        if (B1->value == B2->value) continue;
        const vs_world_bar *hi = B1->value > B2->value ? B1 : B2, *lo = hi == B1 ? B2 : B1;
        vs_world_query q = query_new(VS_Q_BAR_CMP, 0);
        q.label = B1->label, q.label2 = B2->label;
        snprintf(ans, sizeof(ans), "%c", hi->label);
        if (!look_add(g, ls, &q, ans, "{Which is larger, %c or %c?|Which bar is higher, %c or %c?|Is %c or %c bigger?}", B1->label,
                      B2->label))
            return;
        q = query_new(VS_Q_BAR_DIFF, 0);
        q.label = hi->label, q.label2 = lo->label;
        snprintf(ans, sizeof(ans), "%d", hi->value - lo->value);
        if (!look_add(g, ls, &q, ans,
                      "{How much larger is %c than %c?|By how much does %c exceed %c?|What is the difference between %c and %c?}",
                      hi->label, lo->label))
            return;
    }
}

static bool same_sel(vs_world_sel a, vs_world_sel b) {
    return a.shape == b.shape && a.color == b.color && a.size == b.size && a.cell == b.cell;
}

/* Two questions about one picture that ask the same thing. */
static bool same_query(const vs_world_query *a, const vs_world_query *b) {
    return a->type == b->type && same_sel(a->sel, b->sel) && same_sel(a->sel2, b->sel2) && a->index == b->index &&
           a->label == b->label && a->label2 == b->label2 && a->relation == b->relation;
}

/* The transcript turn: the picture written out, one entry per object (in cell order), line (top to
 * bottom) or bar (left to right), then the background: "top left: large red ring; center: small blue
 * star on a white background." It is checked as describe's colour-shape set, as read_all's lines in
 * order (query `lines`), or as every bar's label and value in order (`bars`). Its words repeat answers of
 * the earlier turns (a line's text, an object's colour): with those answers in the context, its score
 * partly measures copying, which is why it has query types of its own. */
char *vs_world_scene_words(const vs_world_scene *sc) {
    wsb a;
    wsb_init(&a);
    if (sc->kind == VS_SCENE_SHAPES) {
        int k = 0;
        for (int c = 0; c < VS_WORLD_N_CELLS; c++)
            for (int i = 0; i < sc->n_objects; i++) {
                const vs_world_object *o = &sc->objects[i];
                if (o->cell == c)
                    wsb_printf(&a, "%s%s: %s %s %s", k++ ? "; " : "", vs_world_cell_name(c), vs_world_size_name(o->size),
                               vs_world_color_name(o->color), vs_world_shape_name(o->shape));
            }
    } else if (sc->kind == VS_SCENE_GLYPH) {
        for (int i = 0; i < sc->n_lines; i++)
            wsb_printf(&a, "%s\"%s\" in %s", i ? "; " : "", sc->lines[i].text, vs_world_color_name(sc->lines[i].color));
        wsb_printf(&a, ", at the %s", vs_world_cell_name(sc->align));
    } else {
        for (int i = 0; i < sc->n_bars; i++)
            wsb_printf(&a, "%s%c %d %s", i ? "; " : "", sc->bars[i].label, sc->bars[i].value,
                       vs_world_color_name(sc->bars[i].color));
    }
    wsb_printf(&a, " on a %s background.", vs_world_bg_name(sc->bg));
    return wsb_take(&a);
}

static void look_transcript(gen *g, const vs_world_scene *sc, vs_world_turn *t) {
    wsb u, a;
    wsb_init(&u);
    wsb_init(&a);
    vs_world_query q = query_new(VS_Q_NONE, 0);
    char ans[128] = "";
    if (sc->kind == VS_SCENE_SHAPES) {
        wsb_say(&u, g->r, "{List every object in the image with its place, size and color.|Describe each shape in the picture: "
                          "where it is, its size and its color.}");
        bool want[VS_WORLD_N_SHAPES * VS_WORLD_N_COLORS] = {0};
        for (int i = 0; i < sc->n_objects; i++) want[sc->objects[i].shape * VS_WORLD_N_COLORS + sc->objects[i].color] = true;
        pairs_answer(want, ans, sizeof(ans));
        q = query_new(VS_Q_DESCRIBE, 0);
    } else if (sc->kind == VS_SCENE_GLYPH) {
        wsb_say(&u, g->r, "{Transcribe every line of text in the image with its color.|What does the text in the image say? "
                          "Give each line and its color.}");
        for (int i = 0; i < sc->n_lines; i++) {
            size_t n = strlen(ans);
            snprintf(ans + n, sizeof(ans) - n, "%s%s", i ? " " : "", sc->lines[i].text);
        }
        q = query_new(VS_Q_LINES, 0);
    } else {
        wsb_say(&u, g->r, "{List the bars of the chart with their values and colors.|Read every bar of the chart from left to "
                          "right: its label, value and color.}");
        for (int i = 0; i < sc->n_bars; i++) {
            size_t n = strlen(ans);
            snprintf(ans + n, sizeof(ans) - n, "%s%c %d", i ? ", " : "", sc->bars[i].label, sc->bars[i].value);
        }
        q = query_new(VS_Q_BARS, 0);
    }
    char *w = vs_world_scene_words(sc);
    if (w) wsb_puts(&a, w);
    vs_free(w);
    set_turn(t, VS_TURN_MORE, 1, 0, &u, &a, ans, &q);
}

static void look_turn(vs_world_turn *t, vs_world_turn_kind kind, int n_images, const char *question, const char *ans,
                      const vs_world_query *q) {
    wsb u, a;
    wsb_init(&u);
    wsb_init(&a);
    wsb_puts(&u, n_images ? "<image> " LOOK_Q " " : LOOK_Q " ");
    wsb_puts(&u, question);
    wsb_puts(&a, ans);
    set_turn(t, kind, kind == VS_TURN_FIRST ? 0 : 1, n_images, &u, &a, ans, q);
}

static void sample_look(gen *g) {
    vs_world_sample *s = g->s;
    vs_world_turn *t = &s->turns[0];
    static const turn_fn fns[4] = {turn_vqa, turn_pope, turn_ocr, turn_chart};
    fns[rnd(g, 4)](g, 0, t, VS_TURN_FIRST);
    static const char prefix[] = "<image> " TABED_Q " ";
    const bool tabed = strncmp(t->user, prefix, sizeof(prefix) - 1) == 0; /* every single-image question is */
    char *question = vs_strdup(t->user + (tabed ? sizeof(prefix) - 1 : strlen("<image> ")));
    char *answer = vs_strdup(t->answer);
    vs_world_query q0 = t->query;
    vs_free(t->user);
    vs_free(t->assistant);
    vs_free(t->answer);
    t->user = t->assistant = t->answer = NULL;
    s->n_images = 1;
    s->n_turns = 1;
    if (!question || !answer) {
        vs_free(question);
        vs_free(answer);
        return; /* the caller reports the missing strings as out of memory */
    }
    look_turn(t, VS_TURN_FIRST, 1, question, answer, &q0);
    /* the later turns: distinct candidates, neither the first question's query nor its text again */
    const vs_world_scene *sc = &s->scenes[0];
    look_set *ls = vs_malloc(sizeof(*ls));
    if (ls) {
        ls->n = 0;
        if (sc->kind == VS_SCENE_SHAPES) look_shapes(g, sc, ls);
        else if (sc->kind == VS_SCENE_GLYPH) look_glyph(g, sc, ls);
        else look_chart(g, sc, ls);
        int order[LOOK_CANDIDATES];
        for (int i = 0; i < ls->n; i++) order[i] = i;
        shuffle_int(g, order, ls->n);
        for (int k = 0; k < ls->n && s->n_turns < LOOK_TURNS - 1; k++) {
            const look_q *c = &ls->c[order[k]];
            bool dup = !c->text;
            for (int tt = 0; tt < s->n_turns && !dup; tt++)
                dup = same_query(&s->turns[tt].query, &c->q) || strstr(s->turns[tt].user, c->text) != NULL;
            if (!dup) look_turn(&s->turns[s->n_turns++], VS_TURN_MORE, 0, c->text, c->ans, &c->q);
        }
        for (int i = 0; i < ls->n; i++) vs_free(ls->c[i].text);
        vs_free(ls);
    }
    look_transcript(g, sc, &s->turns[s->n_turns++]);
    vs_free(question);
    vs_free(answer);
}

/* ---------------------------------------------------------------------------------------------- */
/* second turns */

static bool followup(gen *g, vs_world_turn *t) {
    const vs_world_turn *p = &g->s->turns[0];
    const vs_world_query *pq = &p->query;
    wsb u, a;
    wsb_init(&u);
    wsb_init(&a);
    vs_world_query q = query_new(VS_Q_NONE, -1);
    q.prev_turn = 0;
    char ans[64];
    char cw[24];
    switch (pq->type) {
    case VS_Q_DESCRIBE: {
        const vs_world_scene *sc = &g->s->scenes[pq->image];
        q = query_new(VS_Q_COUNT, pq->image);
        snprintf(ans, sizeof(ans), "%d", sc->n_objects);
        wsb_say(&u, g->r, "{How many objects did you describe in total?|How many shapes are in the image, according to your description?}");
        if (chance(g, 0.5)) {
            if (sc->n_objects == 1) wsb_say(&a, g->r, "^{I described|My description mentions} one {object|shape} in total: ");
            else wsb_say(&a, g->r, "^{I described|My description mentions} %s {objects|shapes} in total: ", count_word(sc->n_objects, cw, sizeof(cw)));
            for (int i = 0; i < sc->n_objects; i++) {
                if (i) wsb_puts(&a, i == sc->n_objects - 1 ? " and " : ", ");
                np(&a, &sc->objects[i], 0, true);
            }
            wsb_puts(&a, ".");
            wsb_say(&a, g->r, " {Each of them sits in its own cell of the grid|They all sit in different places}, so {none of them was counted twice|no shape was counted twice}.");
        } else {
            wsb_say(&a, g->r, "^{Going back over|Looking again at} my description, I {mentioned|listed} each object once, {one per cell|in its own place}. {Counting them|Adding them up} gives %s, so the answer is %s.",
                    count_word(sc->n_objects, cw, sizeof(cw)), count_word(sc->n_objects, cw, sizeof(cw)));
        }
        break;
    }
    case VS_Q_COUNT:
    case VS_Q_BAR_VALUE:
    case VS_Q_BAR_DIFF:
    case VS_Q_LINE_COUNT: {
        int64_t prev = atoll(p->answer);
        bool times = pq->type == VS_Q_BAR_VALUE && chance(g, 0.5);
        int64_t k = times ? 2 + rnd(g, 2) : 1 + rnd(g, 5);
        q.type = times ? VS_Q_PREV_TIMES : VS_Q_PREV_PLUS;
        q.arg = k;
        int64_t r = times ? prev * k : prev + k;
        snprintf(ans, sizeof(ans), "%lld", (long long)r);
        if (times) {
            wsb_say(&u, g->r, k == 2 ? "{What is double that value?|If that value were doubled, what would it be?}"
                                     : "{What is three times that value?|If that value were tripled, what would it be?}");
            wsb_say(&a, g->r, "^{Earlier|Before}, I found the value %lld. %s it gives %lld * %lld = %lld, so the answer is %lld.", (long long)prev,
                    k == 2 ? "Doubling" : "Tripling", (long long)prev, (long long)k, (long long)r, (long long)r);
        } else {
            wsb_say(&u, g->r, "{If we added %lld more, what would the total be?|What do you get if you add %lld to that number?}", (long long)k);
            wsb_say(&a, g->r, "^{Earlier|In my previous answer}, the result was %lld. Adding %lld gives %lld + %lld = %lld, so the answer is %lld.",
                    (long long)prev, (long long)k, (long long)prev, (long long)k, (long long)r, (long long)r);
        }
        wsb_say(&a, g->r, " {This only uses the number from before, so there is no need to look at the image again.|The image itself does not need to be checked again for this.}");
        break;
    }
    case VS_Q_COLOR: {
        int c = world_name_index(vs_world_color_name, VS_WORLD_N_COLORS, p->answer);
        if (world_color_warm(c) < 0) goto same;
        q.type = VS_Q_PREV_WARMTH;
        const char *w = world_color_warm(c) ? "warm" : "cool";
        snprintf(ans, sizeof(ans), "%s", w);
        wsb_say(&u, g->r, "{Is that a warm color or a cool color?|Would you call that color warm or cool?}");
        if (chance(g, 0.5)) wsb_say(&a, g->r, "^%s is a %s color.", p->answer, w);
        else wsb_say(&a, g->r, "^The color I found was %s. Since it belongs to the %s colors, the answer is %s.", p->answer, w, w);
        wsb_say(&a, g->r, " Warm colors such as red, orange and yellow {remind us of|suggest} fire and sunlight, while cool colors such as green, blue and purple {remind us of|suggest} water and plants.");
        break;
    }
    case VS_Q_READ_ALL:
    case VS_Q_READ_LINE:
    case VS_Q_READ_COLOR: {
        if (strchr(p->answer, ' ')) {
            const vs_world_scene *sc = &g->s->scenes[pq->image];
            q = query_new(VS_Q_LINE_COUNT, pq->image);
            snprintf(ans, sizeof(ans), "%d", sc->n_lines);
            wsb_say(&u, g->r, "{How many lines did you read?|How many lines of text were there?}");
            wsb_say(&a, g->r, "^I read %s lines of text, {one below the other|from top to bottom}. {Each line held a single word or number|Every line had its own word or number}, and I listed them in order.",
                    count_word(sc->n_lines, cw, sizeof(cw)));
            break;
        }
        if (is_digits(p->answer)) {
            int64_t prev = atoll(p->answer), k = 1 + rnd(g, 9);
            q.type = VS_Q_PREV_PLUS;
            q.arg = k;
            snprintf(ans, sizeof(ans), "%lld", (long long)(prev + k));
            wsb_say(&u, g->r, "{What do you get if you add %lld to that number?|What is that number plus %lld?}", (long long)k);
            wsb_say(&a, g->r, "^The number I read was %lld. Adding %lld gives %lld + %lld = %lld, so the answer is %lld.", (long long)prev, (long long)k,
                    (long long)prev, (long long)k, (long long)(prev + k), (long long)(prev + k));
            wsb_say(&a, g->r, " {This is simple addition, so the image is not needed again.|Only the number from before matters here.}");
            break;
        }
        q.type = VS_Q_PREV_LETTERS;
        size_t n = strlen(p->answer);
        snprintf(ans, sizeof(ans), "%zu", n);
        wsb_say(&u, g->r, "{How many letters does that word have?|How long is that word, in letters?}");
        wsb_say(&a, g->r, "^The word \"%s\" is spelled ", p->answer);
        for (size_t i = 0; i < n; i++) wsb_printf(&a, "%s%c", i == 0 ? "" : i == n - 1 ? " and " : ", ", p->answer[i]);
        wsb_say(&a, g->r, ". {Counting them|Counting the letters} gives %s, so the answer is %s.", count_word((int64_t)n, cw, sizeof(cw)),
                count_word((int64_t)n, cw, sizeof(cw)));
        break;
    }
    case VS_Q_DIFF: {
        q = query_new(VS_Q_DIFF_COUNT, pq->image);
        q.image2 = pq->image2;
        q.prev_turn = -1;
        /* count edits: recomputed by the checker from the scenes; here from the scenes too */
        const vs_world_scene *A = &g->s->scenes[pq->image], *B = &g->s->scenes[pq->image2];
        int cnt = 0;
        for (int i = 0; i < A->n_objects; i++) {
            int j = find_match(B, (vs_world_sel){A->objects[i].shape, A->objects[i].color, -1, -1});
            if (j < 0 || B->objects[j].cell != A->objects[i].cell) cnt++;
        }
        for (int j = 0; j < B->n_objects; j++) {
            int i = find_match(A, (vs_world_sel){B->objects[j].shape, B->objects[j].color, -1, -1});
            bool recolor = false;
            for (int m = 0; m < A->n_objects; m++)
                recolor |= A->objects[m].cell == B->objects[j].cell && A->objects[m].shape == B->objects[j].shape &&
                           A->objects[m].color != B->objects[j].color;
            if (i < 0 && !recolor) cnt++;
        }
        snprintf(ans, sizeof(ans), "%d", cnt);
        wsb_say(&u, g->r, "{How many changes did you find?|How many edits are needed in total?}");
        if (cnt == 1) wsb_say(&a, g->r, "^There {is|was} %s {change|edit} in total.", count_word(cnt, cw, sizeof(cw)));
        else wsb_say(&a, g->r, "^There {are|were} %s {changes|edits} in total.", count_word(cnt, cw, sizeof(cw)));
        wsb_say(&a, g->r, " {I listed each of them once|Each change was listed once}, {and the rest of the scene stays the same|while the other objects stay as they are}.");
        break;
    }
    default:
    same:
        q = query_new(VS_Q_PREV_SAME, -1);
        q.prev_turn = 0;
        snprintf(ans, sizeof(ans), "%s", p->answer);
        wsb_say(&u, g->r, "{Can you summarize your answer in one short sentence?|Please repeat your final answer briefly.|So what is the short answer?}");
        if (pq->type == VS_Q_POSITION) wsb_say(&a, g->r, "^{Sure|Of course|Certainly}. {In short|To put it briefly}, the answer is the %s.", ans);
        else if (pq->type == VS_Q_SHAPE) wsb_say(&a, g->r, "^{Sure|Of course|Certainly}. {In short|To put it briefly}, the answer is %s %s.", article(ans), ans);
        else wsb_say(&a, g->r, "^{Sure|Of course|Certainly}. {In short|To put it briefly}, the answer is %s.", ans);
        wsb_say(&a, g->r, " {This follows from|I based this on} {what I saw in the image|the image} and {the reasoning in|the explanation of} my previous {answer|reply}.");
        break;
    }
    pad_answer(g, &a, 38, REMARK_NEUTRAL);
    set_turn(t, VS_TURN_FOLLOWUP, g->s->n_images, 0, &u, &a, ans, &q);
    return true;
}


static void second_turn(gen *g, vs_world_turn_kind kind, turn_fn fn) {
    vs_world_turn *t = &g->s->turns[1];
    switch (kind) {
    case VS_TURN_FOLLOWUP: followup(g, t); break;
    case VS_TURN_UNRELATED:
        turn_text(g, t, VS_TURN_UNRELATED);
        t->first_image = g->s->n_images;
        break;
    default: {
        int img = g->s->n_images;
        fn(g, img, t, VS_TURN_NEW_IMAGE);
        g->s->n_images++;
        break;
    }
    }
    g->s->n_turns = 2;
}

/* ---------------------------------------------------------------------------------------------- */
/* captions */

int world_caption_objects(const vs_world_scene *sc, int *idx, int max) {
    /* the first `max` objects in reading order (by cell) */
    int n = 0;
    for (int c = 0; c < VS_WORLD_N_CELLS && n < max; c++)
        for (int i = 0; i < sc->n_objects && n < max; i++)
            if (sc->objects[i].cell == c) idx[n++] = i;
    return n;
}

void world_caption(const vs_world_scene *sc, vs_rng *r, wsb *b) {
    char cw[24];
    switch (sc->kind) {
    case VS_SCENE_SHAPES: {
        int idx[3], n = world_caption_objects(sc, idx, 3);
        for (int k = 0; k < n; k++) {
            const vs_world_object *o = &sc->objects[idx[k]];
            if (k) wsb_puts(b, k == n - 1 && sc->n_objects == n ? " and " : ", ");
            const char *c = vs_world_color_name(o->color);
            wsb_printf(b, "%s %s %s", k == 0 ? (article(c)[1] ? "An" : "A") : article(c), c, vs_world_shape_name(o->shape));
        }
        if (sc->n_objects > n) {
            int more = sc->n_objects - n;
            wsb_printf(b, " and %s more shape%s", count_word(more, cw, sizeof(cw)), more > 1 ? "s" : "");
        }
        wsb_say(b, r, " {on|against} a %s background.", vs_world_bg_name(sc->bg));
        break;
    }
    case VS_SCENE_GLYPH:
        if (sc->n_lines == 1) {
            bool num = is_digits(sc->lines[0].text);
            wsb_say(b, r, "The %s \"%s\" written in %s on a %s background.", num ? "number" : "word", sc->lines[0].text,
                    vs_world_color_name(sc->lines[0].color), vs_world_bg_name(sc->bg));
        } else {
            const char *w = world_number_word(sc->n_lines);
            wsb_printf(b, "%c%s lines of text, ", (char)(w[0] - 'a' + 'A'), w + 1);
            for (int i = 0; i < sc->n_lines; i++) {
                if (i) wsb_puts(b, i == sc->n_lines - 1 ? " and " : ", ");
                wsb_printf(b, "\"%s\"", sc->lines[i].text);
            }
            wsb_say(b, r, ", {on|against} a %s background.", vs_world_bg_name(sc->bg));
        }
        break;
    case VS_SCENE_CHART:
        wsb_say(b, r, "A bar chart with %s bars labeled ", count_word(sc->n_bars, cw, sizeof(cw)));
        for (int i = 0; i < sc->n_bars; i++) {
            if (i) wsb_puts(b, i == sc->n_bars - 1 ? " and " : ", ");
            wsb_printf(b, "%c", sc->bars[i].label);
        }
        wsb_puts(b, ".");
        break;
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* samples */

static uint64_t mix64(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    h *= 0xbf58476d1ce4e5b9ULL;
    return h ^ (h >> 31);
}

void vs_world_config_default(vs_world_config *c) {
    memset(c, 0, sizeof(*c));
    c->seed = 1;
    c->n_train = 1000;
    c->n_test = 100;
    c->image_size = 64;
    c->suites = VS_WORLD_DEFAULT_SUITES;
    c->progress = 0;
}

vs_status vs_world_generate_sample(const vs_world_config *cfg, const char *split, vs_world_suite suite, int64_t index,
                                   uint32_t attempt, vs_world_sample *out, uint8_t *rgb, vs_error *err) {
    memset(out, 0, sizeof(*out));
    bool test = strcmp(split, "test") == 0;
    if (!test && strcmp(split, "train") != 0)
        return vs_error_set(err, VS_ERR_INVALID, "generate: split '%s' is neither train nor test", split);
    if ((int)suite < 0 || suite >= VS_WORLD_CAPTION)
        return vs_error_set(err, VS_ERR_INVALID, "generate: suite %d cannot be generated directly", (int)suite);
    if (cfg->image_size < 32 || cfg->image_size > 4096)
        return vs_error_set(err, VS_ERR_RANGE, "generate: image size %d outside 32..4096", cfg->image_size);
    if (cfg->max_items < 0 || cfg->max_items > VS_WORLD_MAX_OBJECTS)
        return vs_error_set(err, VS_ERR_RANGE, "generate: max items %d outside 0..%d", cfg->max_items,
                            VS_WORLD_MAX_OBJECTS);
    uint64_t h = mix64(mix64(mix64(mix64(cfg->seed, test ? 0x7e57 : 0x7a1e), (uint64_t)suite), (uint64_t)index), attempt);
    vs_rng r;
    vs_rng_seed(&r, h);
    gen g = {&r, out, test, cfg->max_items};
    out->suite = suite;
    char id[64];
    snprintf(id, sizeof(id), "%s-%s-%05lld", split, vs_world_suite_name(suite), (long long)index);
    out->id = vs_strdup(id);
    out->n_turns = 1;
    turn_fn fn = NULL;
    switch (suite) {
    case VS_WORLD_DESCRIBE: fn = turn_describe; break;
    case VS_WORLD_VQA: fn = turn_vqa; break;
    case VS_WORLD_POPE: fn = turn_pope; break;
    case VS_WORLD_OCR: fn = turn_ocr; break;
    case VS_WORLD_CHART: fn = turn_chart; break;
    case VS_WORLD_DIFF:
        turn_diff(&g, &out->turns[0]);
        out->n_images = 2;
        break;
    case VS_WORLD_STORY:
        turn_story(&g, &out->turns[0]);
        out->n_images = 5;
        break;
    case VS_WORLD_TEXT:
        turn_text(&g, &out->turns[0], VS_TURN_FIRST);
        out->n_images = 0;
        break;
    case VS_WORLD_DRILL:
        turn_drill(&g, &out->turns[0]);
        out->n_images = 0;
        break;
    case VS_WORLD_LOOK: sample_look(&g); break;
    default: break;
    }
    if (fn) {
        fn(&g, 0, &out->turns[0], VS_TURN_FIRST);
        out->n_images = 1;
    }
    /* second turns: the test split covers every kind in a fixed pattern, training draws them */
    if (fn || suite == VS_WORLD_DIFF) {
        int n_kinds = fn ? 3 : 2;
        vs_world_turn_kind kinds[3] = {VS_TURN_FOLLOWUP, VS_TURN_UNRELATED, VS_TURN_NEW_IMAGE};
        bool two = test ? (index % 2 == 1) : chance(&g, 0.45);
        if (two) second_turn(&g, kinds[test ? (index / 2) % n_kinds : rnd(&g, n_kinds)], fn);
    }
    for (int i = 0; i < out->n_images; i++) {
        char path[128];
        snprintf(path, sizeof(path), "img/%s/%s-%05lld-%d.png", split, vs_world_suite_name(suite), (long long)index, i);
        out->images[i] = vs_strdup(path);
        wsb b;
        wsb_init(&b);
        world_caption(&out->scenes[i], &r, &b);
        out->captions[i] = wsb_take(&b);
    }
    if (cfg->zoom && suite != VS_WORLD_DIFF && suite != VS_WORLD_STORY)
        for (int i = 0; i < out->n_images; i++) out->scenes[i].zoom = out->scenes[i].kind == VS_SCENE_SHAPES;
    for (int t = 0; t < out->n_turns; t++) out->turns[t].check = world_check_type(out, t);
    for (int t = 0; t < out->n_turns; t++)
        if (!out->turns[t].user || !out->turns[t].assistant || !out->turns[t].answer) {
            vs_world_sample_clear(out);
            return vs_error_set(err, VS_ERR_NOMEM, "generate: out of memory");
        }
    if (rgb) {
        size_t one = (size_t)cfg->image_size * (size_t)cfg->image_size * 3;
        for (int i = 0; i < out->n_images; i++) {
            vs_status st = vs_world_render(&out->scenes[i], cfg->image_size, rgb + one * (size_t)i, err);
            if (st) {
                vs_world_sample_clear(out);
                return vs_error_wrap(err, "generate %s", id);
            }
        }
    }
    return VS_OK;
}
