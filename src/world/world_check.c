/* world_check: the checker. Re-derives a turn's short answer from the sample's scenes and query
 * (never from the stored answer) and reads the answer a free text gives, by the rules of
 * docs/world.md:
 *   region  = the text after the last "answer is" / "answer:" (case-insensitive), else the whole text;
 *   yesno, number, color, shape, size, position, word, label: the FIRST word of that category in the
 *            region is the claimed answer;
 *   phrase  = the first glyph words (lexicon words, numbers of 2+ digits) of the region, in order;
 *   set     = every "<colour> <shape>" pair named anywhere: all expected pairs named, none outside
 *            the pairs the images show;
 *   story   = set rule over the story's pairs, the hero named, and the first position of the region
 *            is where the hero ends;
 *   bars    = every "<letter> <value>" of the region (a capital letter other than A and I, then a
 *            number), in order, is the chart's bars left to right: each label with its value, no other. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "world_internal.h"

enum { WK_LEXICON = 0, WK_ATTR, WK_ENTITY, WK_WARMTH };
#define N_PAIRS (VS_WORLD_N_SHAPES * VS_WORLD_N_COLORS)

typedef struct expect {
    vs_world_check_type check;
    char answer[128];
    int64_t number;                  /* NUMBER */
    int word_kind, attr;             /* WORD */
    char labels[VS_WORLD_MAX_BARS];  /* LABEL, BARS */
    int n_labels;
    int values[VS_WORLD_MAX_BARS];   /* BARS */
    int n_phrase;                    /* PHRASE */
    char phrase[VS_WORLD_MAX_LINES][VS_WORLD_WORD_MAX];
    bool want[N_PAIRS], allow[N_PAIRS]; /* SET / STORY */
    int hero_pair, end_cell;         /* STORY */
} expect;

static int pair_id(int shape, int color) { return shape * VS_WORLD_N_COLORS + color; }

static bool sel_ok(vs_world_sel s) {
    return s.shape >= -1 && s.shape < VS_WORLD_N_SHAPES && s.color >= -1 && s.color < VS_WORLD_N_COLORS &&
           s.size >= -1 && s.size <= 1 && s.cell >= -1 && s.cell < VS_WORLD_N_CELLS;
}

bool vs_world_sel_matches(const vs_world_object *o, vs_world_sel s) {
    return (s.shape < 0 || o->shape == s.shape) && (s.color < 0 || o->color == s.color) &&
           (s.size < 0 || o->size == s.size) && (s.cell < 0 || o->cell == s.cell);
}

static int n_matching(const vs_world_scene *sc, vs_world_sel s, int *first) {
    int n = 0;
    for (int i = 0; i < sc->n_objects; i++)
        if (vs_world_sel_matches(&sc->objects[i], s)) {
            if (!n && first) *first = i;
            n++;
        }
    return n;
}

static vs_status scene_at(const vs_world_sample *s, int img, vs_world_scene_kind kind, const vs_world_scene **out,
                          vs_error *err) {
    if (img < 0 || img >= s->n_images) return vs_error_set(err, VS_ERR_INVALID, "query image %d outside 0..%d", img, s->n_images - 1);
    if (s->scenes[img].kind != kind)
        return vs_error_set(err, VS_ERR_INVALID, "query needs a %s scene, image %d is %s", world_scene_kind_name(kind), img,
                            world_scene_kind_name(s->scenes[img].kind));
    *out = &s->scenes[img];
    return VS_OK;
}

static vs_status unique_object(const vs_world_scene *sc, vs_world_sel sel, const vs_world_object **o, vs_error *err) {
    if (!sel_ok(sel)) return vs_error_set(err, VS_ERR_INVALID, "query selector out of range");
    int first = -1, n = n_matching(sc, sel, &first);
    if (n != 1) return vs_error_set(err, VS_ERR_INVALID, "query selector matches %d objects, not exactly one", n);
    *o = &sc->objects[first];
    return VS_OK;
}

static const vs_world_bar *bar_by_label(const vs_world_scene *sc, char label) {
    for (int i = 0; i < sc->n_bars; i++)
        if (sc->bars[i].label == label) return &sc->bars[i];
    return NULL;
}

static bool all_digits(const char *s) {
    if (!*s) return false;
    for (; *s; s++)
        if (*s < '0' || *s > '9') return false;
    return true;
}

static void set_number(expect *e, int64_t v) {
    e->check = VS_CHECK_NUMBER;
    e->number = v;
    snprintf(e->answer, sizeof(e->answer), "%lld", (long long)v);
}

static void set_glyph_text(expect *e, const char *text) {
    if (all_digits(text)) {
        set_number(e, atoll(text));
    } else {
        e->check = VS_CHECK_WORD;
        e->word_kind = WK_LEXICON;
        snprintf(e->answer, sizeof(e->answer), "%s", text);
    }
}

static void add_pairs(bool *set, const vs_world_scene *sc) {
    for (int i = 0; i < sc->n_objects; i++) set[pair_id(sc->objects[i].shape, sc->objects[i].color)] = true;
}

static void pairs_answer(expect *e) {
    e->answer[0] = 0;
    for (int p = 0; p < N_PAIRS; p++)
        if (e->want[p]) {
            size_t n = strlen(e->answer);
            snprintf(e->answer + n, sizeof(e->answer) - n, "%s%s %s", n ? ", " : "", vs_world_color_name(p % VS_WORLD_N_COLORS),
                     vs_world_shape_name(p / VS_WORLD_N_COLORS));
        }
}

/* Changed objects between two shape scenes. Pairs are unique within each scene of a pair. */
static int diff_scenes(const vs_world_scene *A, const vs_world_scene *B, bool *want) {
    int count = 0;
    for (int i = 0; i < A->n_objects; i++) {
        const vs_world_object *a = &A->objects[i];
        int j = -1;
        n_matching(B, (vs_world_sel){a->shape, a->color, -1, -1}, &j);
        if (j < 0 || B->objects[j].cell != a->cell) {
            count++;
            if (want) want[pair_id(a->shape, a->color)] = true;
        }
    }
    for (int j = 0; j < B->n_objects; j++) {
        const vs_world_object *b = &B->objects[j];
        int i = -1;
        n_matching(A, (vs_world_sel){b->shape, b->color, -1, -1}, &i);
        if (i >= 0) continue;
        if (want) want[pair_id(b->shape, b->color)] = true;
        bool recolor = false;
        for (int m = 0; m < A->n_objects; m++)
            recolor |= A->objects[m].cell == b->cell && A->objects[m].shape == b->shape && A->objects[m].color != b->color;
        if (!recolor) count++;
    }
    return count;
}

static vs_status derive(const vs_world_sample *s, int t, expect *e, int depth, vs_error *err) {
    memset(e, 0, sizeof(*e));
    e->hero_pair = e->end_cell = -1;
    if (t < 0 || t >= s->n_turns) return vs_error_set(err, VS_ERR_INVALID, "turn %d outside 0..%d", t, s->n_turns - 1);
    if (depth > VS_WORLD_MAX_TURNS) return vs_error_set(err, VS_ERR_INVALID, "follow-up chain too deep");
    const vs_world_query *q = &s->turns[t].query;
    const vs_world_scene *sc = NULL, *sc2 = NULL;
    const vs_world_object *o = NULL, *o2 = NULL;
    vs_status st = VS_OK;
    switch (q->type) {
    case VS_Q_DESCRIBE:
        if ((st = scene_at(s, q->image, VS_SCENE_SHAPES, &sc, err))) return st;
        e->check = VS_CHECK_SET;
        add_pairs(e->want, sc);
        add_pairs(e->allow, sc);
        pairs_answer(e);
        return VS_OK;
    case VS_Q_COUNT:
        if ((st = scene_at(s, q->image, VS_SCENE_SHAPES, &sc, err))) return st;
        if (!sel_ok(q->sel)) return vs_error_set(err, VS_ERR_INVALID, "count selector out of range");
        set_number(e, n_matching(sc, q->sel, NULL));
        return VS_OK;
    case VS_Q_COLOR:
    case VS_Q_SHAPE:
    case VS_Q_SIZE:
    case VS_Q_POSITION:
        if ((st = scene_at(s, q->image, VS_SCENE_SHAPES, &sc, err))) return st;
        if ((st = unique_object(sc, q->sel, &o, err))) return st;
        if (q->type == VS_Q_COLOR) e->check = VS_CHECK_COLOR, snprintf(e->answer, sizeof(e->answer), "%s", vs_world_color_name(o->color));
        if (q->type == VS_Q_SHAPE) e->check = VS_CHECK_SHAPE, snprintf(e->answer, sizeof(e->answer), "%s", vs_world_shape_name(o->shape));
        if (q->type == VS_Q_SIZE) e->check = VS_CHECK_SIZE, snprintf(e->answer, sizeof(e->answer), "%s", vs_world_size_name(o->size));
        if (q->type == VS_Q_POSITION) e->check = VS_CHECK_POSITION, snprintf(e->answer, sizeof(e->answer), "%s", vs_world_cell_name(o->cell));
        return VS_OK;
    case VS_Q_RELATION: {
        if ((st = scene_at(s, q->image, VS_SCENE_SHAPES, &sc, err))) return st;
        if ((st = unique_object(sc, q->sel, &o, err))) return st;
        if ((st = unique_object(sc, q->sel2, &o2, err))) return st;
        int ra = o->cell / 3, ca = o->cell % 3, rb = o2->cell / 3, cb = o2->cell % 3;
        bool yes;
        switch (q->relation) {
        case VS_REL_LEFT: yes = ca < cb; break;
        case VS_REL_RIGHT: yes = ca > cb; break;
        case VS_REL_ABOVE: yes = ra < rb; break;
        case VS_REL_BELOW: yes = ra > rb; break;
        default: return vs_error_set(err, VS_ERR_INVALID, "unknown relation %d", q->relation);
        }
        e->check = VS_CHECK_YESNO;
        snprintf(e->answer, sizeof(e->answer), "%s", yes ? "yes" : "no");
        return VS_OK;
    }
    case VS_Q_EXISTS:
        if ((st = scene_at(s, q->image, VS_SCENE_SHAPES, &sc, err))) return st;
        if (!sel_ok(q->sel)) return vs_error_set(err, VS_ERR_INVALID, "exists selector out of range");
        e->check = VS_CHECK_YESNO;
        snprintf(e->answer, sizeof(e->answer), "%s", n_matching(sc, q->sel, NULL) ? "yes" : "no");
        return VS_OK;
    case VS_Q_READ_ALL:
    case VS_Q_LINES: /* the transcript of a text picture: its lines are checked as read_all's */
        if ((st = scene_at(s, q->image, VS_SCENE_GLYPH, &sc, err))) return st;
        if (sc->n_lines == 1) {
            set_glyph_text(e, sc->lines[0].text);
            return VS_OK;
        }
        e->check = VS_CHECK_PHRASE;
        e->n_phrase = sc->n_lines;
        e->answer[0] = 0;
        for (int i = 0; i < sc->n_lines; i++) {
            snprintf(e->phrase[i], sizeof(e->phrase[i]), "%s", sc->lines[i].text);
            size_t n = strlen(e->answer);
            snprintf(e->answer + n, sizeof(e->answer) - n, "%s%s", i ? " " : "", sc->lines[i].text);
        }
        return VS_OK;
    case VS_Q_READ_LINE:
        if ((st = scene_at(s, q->image, VS_SCENE_GLYPH, &sc, err))) return st;
        if (q->index < 0 || q->index >= sc->n_lines) return vs_error_set(err, VS_ERR_INVALID, "line %d outside the scene", q->index);
        set_glyph_text(e, sc->lines[q->index].text);
        return VS_OK;
    case VS_Q_READ_COLOR: {
        if ((st = scene_at(s, q->image, VS_SCENE_GLYPH, &sc, err))) return st;
        int found = -1, n = 0;
        for (int i = 0; i < sc->n_lines; i++)
            if (sc->lines[i].color == q->sel.color) found = i, n++;
        if (n != 1) return vs_error_set(err, VS_ERR_INVALID, "%d lines have the asked colour", n);
        set_glyph_text(e, sc->lines[found].text);
        return VS_OK;
    }
    case VS_Q_LINE_COUNT:
        if ((st = scene_at(s, q->image, VS_SCENE_GLYPH, &sc, err))) return st;
        set_number(e, sc->n_lines);
        return VS_OK;
    case VS_Q_BAR_MAX:
    case VS_Q_BAR_MIN:
    case VS_Q_BAR_CMP: {
        if ((st = scene_at(s, q->image, VS_SCENE_CHART, &sc, err))) return st;
        const vs_world_bar *best = NULL;
        if (q->type == VS_Q_BAR_CMP) {
            const vs_world_bar *a = bar_by_label(sc, q->label), *b = bar_by_label(sc, q->label2);
            if (!a || !b || a == b || a->value == b->value) return vs_error_set(err, VS_ERR_INVALID, "bar comparison is undefined");
            best = a->value > b->value ? a : b;
        } else {
            int ties = 0;
            for (int i = 0; i < sc->n_bars; i++) {
                const vs_world_bar *b = &sc->bars[i];
                if (!best || (q->type == VS_Q_BAR_MAX ? b->value > best->value : b->value < best->value)) best = b, ties = 0;
                else if (b->value == best->value) ties++;
            }
            if (ties) return vs_error_set(err, VS_ERR_INVALID, "extreme bar is tied");
        }
        e->check = VS_CHECK_LABEL;
        for (int i = 0; i < sc->n_bars; i++) e->labels[e->n_labels++] = sc->bars[i].label;
        snprintf(e->answer, sizeof(e->answer), "%c", best->label);
        return VS_OK;
    }
    case VS_Q_BAR_VALUE:
    case VS_Q_BAR_DIFF: {
        if ((st = scene_at(s, q->image, VS_SCENE_CHART, &sc, err))) return st;
        const vs_world_bar *a = bar_by_label(sc, q->label);
        if (!a) return vs_error_set(err, VS_ERR_INVALID, "no bar labelled '%c'", q->label);
        if (q->type == VS_Q_BAR_VALUE) {
            set_number(e, a->value);
            return VS_OK;
        }
        const vs_world_bar *b = bar_by_label(sc, q->label2);
        if (!b || a->value <= b->value) return vs_error_set(err, VS_ERR_INVALID, "bar difference needs a larger first bar");
        set_number(e, a->value - b->value);
        return VS_OK;
    }
    case VS_Q_DIFF:
    case VS_Q_DIFF_COUNT:
        if ((st = scene_at(s, q->image, VS_SCENE_SHAPES, &sc, err))) return st;
        if ((st = scene_at(s, q->image2, VS_SCENE_SHAPES, &sc2, err))) return st;
        if (q->type == VS_Q_DIFF_COUNT) {
            set_number(e, diff_scenes(sc, sc2, NULL));
            return VS_OK;
        }
        e->check = VS_CHECK_SET;
        diff_scenes(sc, sc2, e->want);
        add_pairs(e->allow, sc);
        add_pairs(e->allow, sc2);
        pairs_answer(e);
        return VS_OK;
    case VS_Q_STORY: {
        if (q->image < 0 || q->image + 5 > s->n_images) return vs_error_set(err, VS_ERR_INVALID, "story needs five images");
        for (int i = 0; i < 5; i++) {
            if ((st = scene_at(s, q->image + i, VS_SCENE_SHAPES, &sc, err))) return st;
            add_pairs(e->allow, sc);
        }
        if ((st = unique_object(sc, q->sel, &o, err))) return st; /* sc = the last frame */
        e->check = VS_CHECK_STORY;
        e->hero_pair = pair_id(o->shape, o->color);
        e->end_cell = o->cell;
        snprintf(e->answer, sizeof(e->answer), "%s", vs_world_cell_name(o->cell));
        return VS_OK;
    }
    case VS_Q_ARITH: {
        if (q->n_ops < 1 || q->n_ops > VS_WORLD_MAX_OPS) return vs_error_set(err, VS_ERR_INVALID, "arithmetic with %d operators", q->n_ops);
        int64_t v = q->nums[0];
        for (int i = 0; i < q->n_ops; i++) {
            int64_t x = q->nums[i + 1];
            if (llabs(v) > 1000000000LL || llabs(x) > 1000000000LL) return vs_error_set(err, VS_ERR_RANGE, "arithmetic operand too large");
            switch (q->ops[i]) {
            case '+': v += x; break;
            case '-': v -= x; break;
            case '*': v *= x; break;
            case '/':
                if (x == 0 || v % x) return vs_error_set(err, VS_ERR_INVALID, "inexact division");
                v /= x;
                break;
            default: return vs_error_set(err, VS_ERR_INVALID, "unknown operator '%c'", q->ops[i]);
            }
        }
        set_number(e, v);
        return VS_OK;
    }
    case VS_Q_FACT_MAX: {
        int ids[4] = {q->entity, q->entity2, q->entity3, q->entity4}, n = q->entity4 >= 0 ? 4 : 3;
        if (q->attr < 0 || q->attr >= WATTR_N || !world_attr_is_number(q->attr)) return vs_error_set(err, VS_ERR_INVALID, "bad attribute");
        int best = -1;
        for (int i = 0; i < n; i++) {
            if (!world_entity_at(ids[i])) return vs_error_set(err, VS_ERR_INVALID, "unknown entity");
            for (int j = 0; j < i; j++)
                if (ids[j] == ids[i]) return vs_error_set(err, VS_ERR_INVALID, "entity named twice");
            int64_t v = world_entity_number(world_entity_at(ids[i]), q->attr);
            if (best < 0 || v > world_entity_number(world_entity_at(ids[best]), q->attr)) best = i;
        }
        e->check = VS_CHECK_WORD;
        e->word_kind = WK_ENTITY;
        snprintf(e->answer, sizeof(e->answer), "%s", world_entity_at(ids[best])->name);
        return VS_OK;
    }
    case VS_Q_FACT:
    case VS_Q_FACT_CMP:
    case VS_Q_FACT_SPAN: {
        const world_entity *a = world_entity_at(q->entity);
        if (!a || q->attr < 0 || q->attr >= WATTR_N) return vs_error_set(err, VS_ERR_INVALID, "unknown entity or attribute");
        if (q->type == VS_Q_FACT) {
            if (world_attr_is_number(q->attr)) {
                set_number(e, world_entity_number(a, q->attr));
            } else {
                e->check = VS_CHECK_WORD;
                e->word_kind = WK_ATTR;
                e->attr = q->attr;
                snprintf(e->answer, sizeof(e->answer), "%s", world_entity_word(a, q->attr));
            }
            return VS_OK;
        }
        const world_entity *b = world_entity_at(q->entity2);
        if (!b || b == a || !world_attr_is_number(q->attr)) return vs_error_set(err, VS_ERR_INVALID, "bad entity comparison");
        int64_t va = world_entity_number(a, q->attr), vb = world_entity_number(b, q->attr);
        if (q->type == VS_Q_FACT_SPAN) {
            set_number(e, llabs(va - vb));
            return VS_OK;
        }
        e->check = VS_CHECK_WORD;
        e->word_kind = WK_ENTITY;
        snprintf(e->answer, sizeof(e->answer), "%s", (va > vb ? a : b)->name);
        return VS_OK;
    }
    case VS_Q_PREV_PLUS:
    case VS_Q_PREV_TIMES:
    case VS_Q_PREV_LETTERS:
    case VS_Q_PREV_WARMTH:
    case VS_Q_PREV_SAME: {
        if (q->prev_turn < 0 || q->prev_turn >= t) return vs_error_set(err, VS_ERR_INVALID, "follow-up names turn %d", q->prev_turn);
        expect p;
        if ((st = derive(s, q->prev_turn, &p, depth + 1, err))) return st;
        switch (q->type) {
        case VS_Q_PREV_SAME: *e = p; return VS_OK;
        case VS_Q_PREV_PLUS:
        case VS_Q_PREV_TIMES:
            if (p.check != VS_CHECK_NUMBER) return vs_error_set(err, VS_ERR_INVALID, "follow-up needs a number");
            if (llabs(q->arg) > 1000000 || llabs(p.number) > 1000000000LL) return vs_error_set(err, VS_ERR_RANGE, "follow-up operand too large");
            set_number(e, q->type == VS_Q_PREV_PLUS ? p.number + q->arg : p.number * q->arg);
            return VS_OK;
        case VS_Q_PREV_LETTERS:
            if (p.check != VS_CHECK_WORD || p.word_kind != WK_LEXICON) return vs_error_set(err, VS_ERR_INVALID, "follow-up needs a word");
            set_number(e, (int64_t)strlen(p.answer));
            return VS_OK;
        default: {
            if (p.check != VS_CHECK_COLOR) return vs_error_set(err, VS_ERR_INVALID, "follow-up needs a colour");
            int w = world_color_warm(world_name_index(vs_world_color_name, VS_WORLD_N_COLORS, p.answer));
            if (w < 0) return vs_error_set(err, VS_ERR_INVALID, "%s is neither warm nor cool", p.answer);
            e->check = VS_CHECK_WORD;
            e->word_kind = WK_WARMTH;
            snprintf(e->answer, sizeof(e->answer), "%s", w ? "warm" : "cool");
            return VS_OK;
        }
        }
    }
    case VS_Q_CAPTION:
        if (q->image < 0 || q->image >= s->n_images) return vs_error_set(err, VS_ERR_INVALID, "caption of image %d", q->image);
        sc = &s->scenes[q->image];
        if (sc->kind == VS_SCENE_SHAPES) {
            int idx[3], n = world_caption_objects(sc, idx, 3);
            e->check = VS_CHECK_SET;
            for (int i = 0; i < n; i++) e->want[pair_id(sc->objects[idx[i]].shape, sc->objects[idx[i]].color)] = true;
            add_pairs(e->allow, sc);
            pairs_answer(e);
        } else if (sc->kind == VS_SCENE_GLYPH) {
            e->check = VS_CHECK_PHRASE;
            e->n_phrase = sc->n_lines;
            for (int i = 0; i < sc->n_lines; i++) {
                snprintf(e->phrase[i], sizeof(e->phrase[i]), "%s", sc->lines[i].text);
                size_t n = strlen(e->answer);
                snprintf(e->answer + n, sizeof(e->answer) - n, "%s%s", i ? " " : "", sc->lines[i].text);
            }
        } else {
            set_number(e, sc->n_bars);
        }
        return VS_OK;
    case VS_Q_BARS:
        if ((st = scene_at(s, q->image, VS_SCENE_CHART, &sc, err))) return st;
        e->check = VS_CHECK_BARS;
        for (int i = 0; i < sc->n_bars; i++) {
            e->labels[e->n_labels] = sc->bars[i].label;
            e->values[e->n_labels++] = sc->bars[i].value;
            size_t n = strlen(e->answer);
            snprintf(e->answer + n, sizeof(e->answer) - n, "%s%c %d", i ? ", " : "", sc->bars[i].label, sc->bars[i].value);
        }
        return VS_OK;
    case VS_Q_NONE: break;
    }
    return vs_error_set(err, VS_ERR_INVALID, "turn %d has no checkable query", t);
}

vs_world_check_type world_check_type(const vs_world_sample *s, int t) {
    expect e;
    if (derive(s, t, &e, 0, NULL) != VS_OK) return VS_CHECK_YESNO;
    return e.check;
}

vs_status vs_world_expected(const vs_world_sample *s, int t, char *buf, size_t cap, vs_error *err) {
    expect e;
    vs_status st = derive(s, t, &e, 0, err);
    if (st) {
        if (cap) buf[0] = 0;
        return st;
    }
    if (cap) snprintf(buf, cap, "%s", e.answer);
    return VS_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* Reading text */

typedef struct tok {
    const char *p;
    int n;
} tok;

#define MAX_TOKS 4096

static int tokenize(const char *text, tok *toks, int max) {
    int n = 0;
    const char *p = text;
    while (*p && n < max) {
        while (*p && !isalnum((unsigned char)*p)) p++;
        if (!*p) break;
        const char *s = p;
        while (*p && isalnum((unsigned char)*p)) p++;
        toks[n++] = (tok){s, (int)(p - s)};
    }
    return n;
}

static bool tok_ieq(tok t, const char *w) {
    size_t n = strlen(w);
    if ((size_t)t.n != n) return false;
    for (size_t i = 0; i < n; i++)
        if (tolower((unsigned char)t.p[i]) != tolower((unsigned char)w[i])) return false;
    return true;
}

static bool tok_eq(tok t, const char *w) { return (size_t)t.n == strlen(w) && memcmp(t.p, w, (size_t)t.n) == 0; }

static void tok_copy(tok t, char *buf, size_t cap) { snprintf(buf, cap, "%.*s", t.n, t.p); }

/* Index of the first token of the answer region. */
static int region_start(const char *text, const tok *toks, int n) {
    const char *last = NULL;
    for (const char *p = text; *p; p++) {
        if (tolower((unsigned char)p[0]) != 'a') continue;
        if (strncasecmp(p, "answer is", 9) == 0) last = p + 9;
        else if (strncasecmp(p, "answer:", 7) == 0) last = p + 7;
    }
    if (!last) return 0;
    for (int i = 0; i < n; i++)
        if (toks[i].p >= last) return i;
    return n;
}

static int64_t tok_number(tok t, bool *ok) {
    *ok = false;
    if (t.n <= 18) {
        bool digits = true;
        for (int i = 0; i < t.n; i++) digits &= t.p[i] >= '0' && t.p[i] <= '9';
        if (digits) {
            int64_t v = 0;
            for (int i = 0; i < t.n; i++) v = v * 10 + (t.p[i] - '0');
            *ok = true;
            return v;
        }
    }
    for (int v = 0; v <= 20; v++)
        if (tok_ieq(t, world_number_word(v))) {
            *ok = true;
            return v;
        }
    return 0;
}

static int tok_index(tok t, const char *(*name)(int), int n) {
    for (int i = 0; i < n; i++)
        if (tok_ieq(t, name(i))) return i;
    return -1;
}

static int tok_shape(tok t) {
    int s = tok_index(t, vs_world_shape_name, VS_WORLD_N_SHAPES);
    return s >= 0 ? s : tok_index(t, world_shape_plural, VS_WORLD_N_SHAPES);
}

/* A cell name starting at token i (longest match); *len gets its token count. */
static int cell_at(const tok *toks, int n, int i, int *len) {
    for (int c = 0; c < VS_WORLD_N_CELLS; c++) {
        const char *name = vs_world_cell_name(c);
        const char *sp = strchr(name, ' ');
        if (sp) {
            char w1[16], w2[16];
            snprintf(w1, sizeof(w1), "%.*s", (int)(sp - name), name);
            snprintf(w2, sizeof(w2), "%s", sp + 1);
            if (i + 1 < n && tok_ieq(toks[i], w1) && tok_ieq(toks[i + 1], w2)) {
                *len = 2;
                return c;
            }
        }
    }
    if (tok_ieq(toks[i], "center") || tok_ieq(toks[i], "centre")) {
        *len = 1;
        return 4;
    }
    return -1;
}

static bool word_in_category(const expect *e, tok t, char *canon, size_t cap) {
    switch (e->word_kind) {
    case WK_LEXICON:
        if (world_lexicon_has(t.p, (size_t)t.n)) {
            tok_copy(t, canon, cap);
            return true;
        }
        return false;
    case WK_WARMTH:
        if (tok_ieq(t, "warm") || tok_ieq(t, "cool")) {
            snprintf(canon, cap, "%s", tok_ieq(t, "warm") ? "warm" : "cool");
            return true;
        }
        return false;
    case WK_ENTITY:
    case WK_ATTR:
        for (int i = 0; i < world_entity_n(); i++) {
            const world_entity *en = world_entity_at(i);
            const char *w = e->word_kind == WK_ENTITY ? en->name : world_entity_word(en, e->attr);
            if (tok_ieq(t, w)) {
                snprintf(canon, cap, "%s", w);
                return true;
            }
        }
        return false;
    }
    return false;
}

static bool is_glyph_token(tok t) {
    if (world_lexicon_has(t.p, (size_t)t.n)) return true;
    if (t.n < 2) return false;
    for (int i = 0; i < t.n; i++)
        if (t.p[i] < '0' || t.p[i] > '9') return false;
    return true;
}

/* Pairs named as "<colour> <shape(s)>" anywhere in the text. */
static void mentioned_pairs(const tok *toks, int n, bool *out) {
    for (int i = 0; i + 1 < n; i++) {
        int c = tok_index(toks[i], vs_world_color_name, VS_WORLD_N_COLORS);
        if (c < 0) continue;
        int s = tok_shape(toks[i + 1]);
        if (s >= 0) out[pair_id(s, c)] = true;
    }
}

static void pairs_string(const bool *set, char *buf, size_t cap) {
    buf[0] = 0;
    for (int p = 0; p < N_PAIRS; p++)
        if (set[p]) {
            size_t n = strlen(buf);
            snprintf(buf + n, cap - n, "%s%s %s", n ? ", " : "", vs_world_color_name(p % VS_WORLD_N_COLORS),
                     vs_world_shape_name(p / VS_WORLD_N_COLORS));
        }
}

bool vs_world_check(const vs_world_sample *s, int t, const char *text, vs_world_verdict *v) {
    vs_world_verdict local;
    if (!v) v = &local;
    memset(v, 0, sizeof(*v));
    expect e;
    if (!s || !text || derive(s, t, &e, 0, NULL) != VS_OK) return false;
    snprintf(v->expected, sizeof(v->expected), "%s", e.answer);
    tok *toks = vs_malloc(sizeof(tok) * MAX_TOKS);
    if (!toks) return false;
    int n = tokenize(text, toks, MAX_TOKS);
    int r0 = region_start(text, toks, n);
    bool ok = false;
    switch (e.check) {
    case VS_CHECK_YESNO:
        for (int i = r0; i < n; i++)
            if (tok_ieq(toks[i], "yes") || tok_ieq(toks[i], "no")) {
                snprintf(v->found, sizeof(v->found), "%s", tok_ieq(toks[i], "yes") ? "yes" : "no");
                ok = strcmp(v->found, e.answer) == 0;
                break;
            }
        break;
    case VS_CHECK_NUMBER:
        for (int i = r0; i < n; i++) {
            bool isnum;
            int64_t x = tok_number(toks[i], &isnum);
            if (!isnum) continue;
            snprintf(v->found, sizeof(v->found), "%lld", (long long)x);
            ok = x == e.number;
            break;
        }
        break;
    case VS_CHECK_COLOR:
    case VS_CHECK_SHAPE:
    case VS_CHECK_SIZE:
        for (int i = r0; i < n; i++) {
            int k = e.check == VS_CHECK_COLOR  ? tok_index(toks[i], vs_world_color_name, VS_WORLD_N_COLORS)
                    : e.check == VS_CHECK_SHAPE ? tok_shape(toks[i])
                                                : tok_index(toks[i], vs_world_size_name, 2);
            if (k < 0) continue;
            const char *name = e.check == VS_CHECK_COLOR ? vs_world_color_name(k)
                               : e.check == VS_CHECK_SHAPE ? vs_world_shape_name(k)
                                                           : vs_world_size_name(k);
            snprintf(v->found, sizeof(v->found), "%s", name);
            ok = strcmp(name, e.answer) == 0;
            break;
        }
        break;
    case VS_CHECK_POSITION:
    case VS_CHECK_STORY:
        for (int i = r0; i < n; i++) {
            int len, c = cell_at(toks, n, i, &len);
            if (c < 0) continue;
            snprintf(v->found, sizeof(v->found), "%s", vs_world_cell_name(c));
            ok = strcmp(v->found, e.answer) == 0;
            break;
        }
        if (e.check == VS_CHECK_STORY && ok) {
            bool named[N_PAIRS] = {0};
            mentioned_pairs(toks, n, named);
            ok = named[e.hero_pair];
            for (int p = 0; p < N_PAIRS; p++) ok &= !named[p] || e.allow[p];
        }
        break;
    case VS_CHECK_WORD:
        for (int i = r0; i < n; i++) {
            char canon[64];
            if (!word_in_category(&e, toks[i], canon, sizeof(canon))) continue;
            snprintf(v->found, sizeof(v->found), "%s", canon);
            ok = e.word_kind == WK_LEXICON ? strcmp(canon, e.answer) == 0 : strcasecmp(canon, e.answer) == 0;
            break;
        }
        break;
    case VS_CHECK_PHRASE: {
        int k = 0;
        ok = true;
        for (int i = r0; i < n && k < e.n_phrase; i++) {
            if (!is_glyph_token(toks[i])) continue;
            size_t fl = strlen(v->found);
            snprintf(v->found + fl, sizeof(v->found) - fl, "%s%.*s", k ? " " : "", toks[i].n, toks[i].p);
            ok &= tok_eq(toks[i], e.phrase[k]);
            k++;
        }
        ok &= k == e.n_phrase;
        break;
    }
    case VS_CHECK_LABEL:
        for (int i = r0; i < n; i++) {
            if (toks[i].n != 1 || !memchr(e.labels, toks[i].p[0], (size_t)e.n_labels)) continue;
            snprintf(v->found, sizeof(v->found), "%c", toks[i].p[0]);
            ok = toks[i].p[0] == e.answer[0];
            break;
        }
        break;
    case VS_CHECK_BARS: {
        int k = 0;
        ok = true;
        for (int i = r0; i + 1 < n; i++) {
            bool num;
            const char c = toks[i].p[0];
            if (toks[i].n != 1 || c < 'B' || c > 'Z' || c == 'I') continue; /* bar labels never are A or I */
            int64_t val = tok_number(toks[i + 1], &num);
            if (!num) continue;
            size_t fl = strlen(v->found);
            snprintf(v->found + fl, sizeof(v->found) - fl, "%s%c %lld", k ? ", " : "", c, (long long)val);
            ok &= k < e.n_labels && c == e.labels[k] && val == e.values[k];
            k++, i++;
        }
        ok &= k == e.n_labels;
        break;
    }
    case VS_CHECK_SET: {
        bool named[N_PAIRS] = {0};
        mentioned_pairs(toks, n, named);
        pairs_string(named, v->found, sizeof(v->found));
        ok = true;
        for (int p = 0; p < N_PAIRS; p++) {
            if (e.want[p] && !named[p]) ok = false;
            if (named[p] && !e.allow[p]) ok = false;
        }
        break;
    }
    }
    vs_free(toks);
    v->correct = ok;
    return ok;
}
