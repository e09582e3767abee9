/* world_render: scene validation and rendering to RGB pixels (shapes with 3 x 3 supersampled edges,
 * glyph text in our bitmap font, bar charts), then light texture noise. Pure function of the scene
 * and the size: the same scene always gives the same pixels. */
#include <math.h>
#include <string.h>

#include "font.h"
#include "world_internal.h"

vs_status world_scene_validate(const vs_world_scene *sc, vs_error *err) {
    if (sc->bg < 0 || sc->bg >= VS_WORLD_N_BGS) return vs_error_set(err, VS_ERR_INVALID, "scene: bad background %d", sc->bg);
    switch (sc->kind) {
    case VS_SCENE_SHAPES:
        if (sc->n_objects < 0 || sc->n_objects > VS_WORLD_MAX_OBJECTS)
            return vs_error_set(err, VS_ERR_INVALID, "scene: %d objects (max %d)", sc->n_objects, VS_WORLD_MAX_OBJECTS);
        for (int i = 0; i < sc->n_objects; i++) {
            const vs_world_object *o = &sc->objects[i];
            if (o->shape < 0 || o->shape >= VS_WORLD_N_SHAPES || o->color < 0 || o->color >= VS_WORLD_N_COLORS ||
                o->size < 0 || o->size > 1 || o->cell < 0 || o->cell >= VS_WORLD_N_CELLS)
                return vs_error_set(err, VS_ERR_INVALID, "scene: object %d has an attribute out of range", i);
            for (int j = 0; j < i; j++)
                if (sc->objects[j].cell == o->cell)
                    return vs_error_set(err, VS_ERR_INVALID, "scene: objects %d and %d share cell %s", j, i,
                                        vs_world_cell_name(o->cell));
        }
        return VS_OK;
    case VS_SCENE_GLYPH:
        if (sc->n_lines < 1 || sc->n_lines > VS_WORLD_MAX_LINES)
            return vs_error_set(err, VS_ERR_INVALID, "scene: %d text lines (1..%d)", sc->n_lines, VS_WORLD_MAX_LINES);
        for (int i = 0; i < sc->n_lines; i++) {
            const vs_world_line *l = &sc->lines[i];
            size_t n = strnlen(l->text, VS_WORLD_WORD_MAX);
            if (n == 0 || n >= VS_WORLD_WORD_MAX)
                return vs_error_set(err, VS_ERR_INVALID, "scene: line %d empty or too long", i);
            for (size_t k = 0; k < n; k++)
                if (!((l->text[k] >= 'A' && l->text[k] <= 'Z') || (l->text[k] >= '0' && l->text[k] <= '9')))
                    return vs_error_set(err, VS_ERR_INVALID, "scene: line %d has a character outside A-Z0-9", i);
            if (l->color < 0 || l->color >= VS_WORLD_N_COLORS)
                return vs_error_set(err, VS_ERR_INVALID, "scene: line %d colour out of range", i);
        }
        if (sc->align < 0 || sc->align >= VS_WORLD_N_CELLS)
            return vs_error_set(err, VS_ERR_INVALID, "scene: text placement %d out of range", sc->align);
        return VS_OK;
    case VS_SCENE_CHART:
        if (sc->n_bars < 2 || sc->n_bars > VS_WORLD_MAX_BARS)
            return vs_error_set(err, VS_ERR_INVALID, "scene: %d bars (2..%d)", sc->n_bars, VS_WORLD_MAX_BARS);
        for (int i = 0; i < sc->n_bars; i++) {
            const vs_world_bar *b = &sc->bars[i];
            if (b->label < 'A' || b->label > 'Z' || b->value < 1 || b->value > 9 || b->color < 0 ||
                b->color >= VS_WORLD_N_COLORS)
                return vs_error_set(err, VS_ERR_INVALID, "scene: bar %d out of range", i);
            for (int j = 0; j < i; j++)
                if (sc->bars[j].label == b->label)
                    return vs_error_set(err, VS_ERR_INVALID, "scene: two bars labelled %c", b->label);
        }
        return VS_OK;
    }
    return vs_error_set(err, VS_ERR_INVALID, "scene: unknown kind %d", (int)sc->kind);
}

/* ---------------------------------------------------------------------------------------------- */
/* Shapes: inside tests in a unit frame (u right, v down, radius 1). */

static bool in_polygon(const float *xy, int n, float u, float v) {
    bool in = false;
    for (int i = 0, j = n - 1; i < n; j = i++) {
        float xi = xy[2 * i], yi = xy[2 * i + 1], xj = xy[2 * j], yj = xy[2 * j + 1];
        if ((yi > v) != (yj > v) && u < (xj - xi) * (v - yi) / (yj - yi) + xi) in = !in;
    }
    return in;
}

typedef struct {
    float star[20], tri[6], hex[12];
} shape_tables;

static void make_tables(shape_tables *t) {
    for (int i = 0; i < 10; i++) {
        float a = (float)(-M_PI / 2 + i * M_PI / 5), r = (i & 1) ? 0.42f : 1.0f;
        t->star[2 * i] = r * cosf(a);
        t->star[2 * i + 1] = r * sinf(a) + 0.08f;
    }
    const float tri[6] = {0.0f, -0.92f, 0.95f, 0.78f, -0.95f, 0.78f};
    memcpy(t->tri, tri, sizeof(tri));
    for (int i = 0; i < 6; i++) {
        float a = (float)(i * M_PI / 3);
        t->hex[2 * i] = 0.97f * cosf(a);
        t->hex[2 * i + 1] = 0.97f * sinf(a);
    }
}

static bool inside(const shape_tables *t, int shape, float u, float v) {
    float au = fabsf(u), av = fabsf(v), r2 = u * u + v * v;
    switch (shape) {
    case 0: return r2 <= 0.95f * 0.95f;                                   /* circle */
    case 1: return au <= 0.78f && av <= 0.78f;                             /* square */
    case 2: return in_polygon(t->tri, 3, u, v);                            /* triangle */
    case 3: return in_polygon(t->star, 10, u, v);                          /* star */
    case 4: return (au <= 0.3f && av <= 0.95f) || (av <= 0.3f && au <= 0.95f); /* cross */
    case 5: return au + av <= 1.0f;                                        /* diamond */
    case 6: return r2 <= 0.95f * 0.95f && r2 >= 0.52f * 0.52f;             /* ring */
    case 7: return in_polygon(t->hex, 6, u, v);                            /* hexagon */
    }
    return false;
}

static uint32_t hash32(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

static void blend(uint8_t *p, const uint8_t *c, float a) {
    for (int k = 0; k < 3; k++) p[k] = (uint8_t)lrintf((float)p[k] * (1 - a) + (float)c[k] * a);
}

/* Where drawing goes: pixels (rgb), element ids (ids: which object, glyph box or bar each pixel
 * belongs to, for vs_world_patch_labels), or both. The two share every coordinate computation. */
typedef struct canvas {
    uint8_t *rgb; /* S * S * 3 or NULL */
    int16_t *ids; /* S * S or NULL */
    int S;
} canvas;

/* Element ids: objects 0..7, glyph line l character k ID_GLYPH + 16 l + k, chart bar i's body, label
 * and value ID_BAR / ID_LABEL / ID_VALUE + i; -1 background. */
enum { ID_GLYPH = 16, ID_BAR = 64, ID_LABEL = 80, ID_VALUE = 96, ID_END = 112 };

static void draw_object(canvas *cv, const shape_tables *t, const vs_world_object *o, uint32_t noise, bool zoom,
                        int id) {
    int S = cv->S;
    float cell = (float)S / 3.0f;
    int row = o->cell / 3, col = o->cell % 3;
    /* a small jitter, fixed by the noise seed and the object's identity, so an unchanged object stays
     * put between the two images of a pair */
    uint32_t h = hash32(noise ^ (uint32_t)(o->cell * 131 + o->shape * 17 + 7));
    float jx = ((float)(h & 255) / 255.0f - 0.5f) * 0.2f * cell;
    float jy = ((float)((h >> 8) & 255) / 255.0f - 0.5f) * 0.2f * cell;
    float cx = ((float)col + 0.5f) * cell + jx, cy = ((float)row + 0.5f) * cell + jy;
    float r = (o->size ? 0.40f : 0.25f) * cell * (zoom ? 2.5f : 1.0f);
    const uint8_t *c = world_color_rgb(o->color);
    int x0 = (int)floorf(cx - r - 1), x1 = (int)ceilf(cx + r + 1);
    int y0 = (int)floorf(cy - r - 1), y1 = (int)ceilf(cy + r + 1);
    if (x0 < 0) x0 = 0;
    if (y0 < 0) y0 = 0;
    if (x1 > S - 1) x1 = S - 1;
    if (y1 > S - 1) y1 = S - 1;
    for (int y = y0; y <= y1; y++)
        for (int x = x0; x <= x1; x++) {
            int hits = 0;
            for (int sy = 0; sy < 3; sy++)
                for (int sx = 0; sx < 3; sx++) {
                    float u = ((float)x + (sx + 0.5f) / 3.0f - cx) / r;
                    float v = ((float)y + (sy + 0.5f) / 3.0f - cy) / r;
                    hits += inside(t, o->shape, u, v);
                }
            if (hits && cv->rgb) blend(cv->rgb + ((size_t)y * S + x) * 3, c, (float)hits / 9.0f);
            if (hits >= 5 && cv->ids) cv->ids[(size_t)y * S + x] = (int16_t)id; /* mostly covered */
        }
}

static void fill_rect(canvas *cv, int x0, int y0, int x1, int y1, const uint8_t *c, int id) {
    int S = cv->S;
    if (x0 < 0) x0 = 0;
    if (y0 < 0) y0 = 0;
    if (x1 > S) x1 = S;
    if (y1 > S) y1 = S;
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++) {
            if (cv->rgb && c) memcpy(cv->rgb + ((size_t)y * S + x) * 3, c, 3);
            if (cv->ids) cv->ids[(size_t)y * S + x] = (int16_t)id;
        }
}

/* Text at (x, y): ink into rgb, each character's glyph box (VS_FONT_W x VS_FONT_H font pixels) into
 * ids as id0 + k for character k. */
static void draw_text(canvas *cv, int x, int y, const char *t, int scale, const uint8_t *color, int id0) {
    if (cv->rgb) vs_font_draw(cv->rgb, cv->S, cv->S, x, y, t, scale, color);
    if (cv->ids)
        for (int k = 0; t[k]; k++) {
            int gx = x + k * VS_FONT_ADVANCE * scale;
            fill_rect(cv, gx, y, gx + VS_FONT_W * scale, y + VS_FONT_H * scale, NULL, id0 + k);
        }
}

static void draw_glyph_scene(canvas *cv, const vs_world_scene *sc) {
    int S = cv->S, n = sc->n_lines, maxlen = 0;
    for (int i = 0; i < n; i++) maxlen = VS_MAX(maxlen, (int)strlen(sc->lines[i].text));
    /* largest integer scale that fits every line and the block of lines in 92% of the image */
    int avail = S * 92 / 100, scale = 1;
    for (int s = 1; s < 64; s++) {
        int w = maxlen * VS_FONT_ADVANCE * s - s;
        int h = n * VS_FONT_H * s + (n - 1) * 3 * s;
        if (w > avail || h > avail) break;
        scale = s;
    }
    int block = n * VS_FONT_H * scale + (n - 1) * 3 * scale;
    uint32_t h = hash32(sc->noise ^ 0x5a5a5a5au);
    int margin = VS_MAX(1, S / 32), row = sc->align / 3, col = sc->align % 3;
    int slack_y = S - block;
    int y = row == 0 ? margin : row == 2 ? S - block - margin : slack_y / 2 + (slack_y > 8 ? (int)(h % 5) - 2 : 0);
    for (int i = 0; i < n; i++) {
        const char *t = sc->lines[i].text;
        int w = vs_font_text_width(t, scale);
        int slack_x = S - w;
        int x = col == 0 ? margin : col == 2 ? S - w - margin : slack_x / 2;
        if (col == 1 && slack_x > 8) x += (int)((h >> (8 + 4 * i)) % 5) - 2;
        draw_text(cv, x, y, t, scale, world_color_rgb(sc->lines[i].color), ID_GLYPH + 16 * i);
        y += (VS_FONT_H + 3) * scale;
    }
}

static void draw_chart(canvas *cv, const vs_world_scene *sc) {
    int S = cv->S, fs = VS_MAX(1, S / 64);
    int n = sc->n_bars;
    int x0 = 3 * fs, x1 = S - 3 * fs;
    int label_y = S - VS_FONT_H * fs - 1;
    int base = label_y - 2 * fs;              /* bars stand on this row */
    int top = VS_FONT_H * fs + 2 * fs;        /* room for the value above the tallest bar */
    float unit = (float)(base - top) / 9.0f;  /* pixels per value step */
    float slot = (float)(x1 - x0) / (float)n;
    int bw = VS_MAX(3, (int)(slot * 0.62f));
    static const uint8_t axis[3] = {70, 70, 70}, ink[3] = {30, 30, 30};
    if (cv->rgb) fill_rect(&(canvas){.rgb = cv->rgb, .S = S}, x0 - fs, base, x1 + fs, base + fs, axis, -1);
    for (int i = 0; i < n; i++) {
        const vs_world_bar *b = &sc->bars[i];
        int cx = x0 + (int)(slot * ((float)i + 0.5f));
        int hgt = (int)lrintf(unit * (float)b->value);
        fill_rect(cv, cx - bw / 2, base - hgt, cx - bw / 2 + bw, base, world_color_rgb(b->color), ID_BAR + i);
        char lab[2] = {b->label, 0}, val[2] = {(char)('0' + b->value), 0};
        int gw = vs_font_text_width(lab, fs);
        draw_text(cv, cx - gw / 2, label_y, lab, fs, ink, ID_LABEL + i);
        draw_text(cv, cx - gw / 2, base - hgt - (VS_FONT_H + 1) * fs, val, fs, ink, ID_VALUE + i);
    }
}

static void draw_scene(canvas *cv, const vs_world_scene *sc) {
    switch (sc->kind) {
    case VS_SCENE_SHAPES: {
        shape_tables t;
        make_tables(&t);
        for (int i = 0; i < sc->n_objects; i++) draw_object(cv, &t, &sc->objects[i], sc->noise, sc->zoom, i);
        break;
    }
    case VS_SCENE_GLYPH: draw_glyph_scene(cv, sc); break;
    case VS_SCENE_CHART: draw_chart(cv, sc); break;
    }
}

vs_status vs_world_render(const vs_world_scene *sc, int S, uint8_t *rgb, vs_error *err) {
    if (S < 32 || S > 4096) return vs_error_set(err, VS_ERR_RANGE, "render: image size %d outside 32..4096", S);
    vs_status st = world_scene_validate(sc, err);
    if (st) return st;
    const uint8_t *bg = world_bg_rgb(sc->bg);
    size_t np = (size_t)S * (size_t)S;
    for (size_t i = 0; i < np; i++) memcpy(rgb + 3 * i, bg, 3);
    draw_scene(&(canvas){.rgb = rgb, .S = S}, sc);
    /* light texture noise: +-4 levels of luminance per pixel plus faint diagonal grain */
    uint32_t x = sc->noise * 2654435761u + 0x9e3779b9u;
    for (size_t i = 0; i < np; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        int d = (int)(x % 9u) - 4;
        size_t py = i / (size_t)S, px = i % (size_t)S;
        if (((px + py + (sc->noise & 7)) & 7) == 0) d += 2;
        for (int k = 0; k < 3; k++) {
            int v = rgb[3 * i + k] + d;
            rgb[3 * i + k] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    }
    return VS_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* Patch labels */

static int8_t char_class(char c) {
    if (c >= 'A' && c <= 'Z') return (int8_t)(c - 'A');
    if (c >= '0' && c <= '9') return (int8_t)(26 + c - '0');
    return -1;
}

/* The labels element `id` gives a patch. */
static vs_world_patch_label element_label(const vs_world_scene *sc, int id) {
    vs_world_patch_label l = {-1, -1, -1, -1, -1};
    if (sc->kind == VS_SCENE_SHAPES && id < sc->n_objects) {
        const vs_world_object *o = &sc->objects[id];
        l.shape = o->shape, l.color = o->color, l.size = o->size;
    } else if (sc->kind == VS_SCENE_GLYPH && id >= ID_GLYPH && id < ID_BAR) {
        const vs_world_line *ln = &sc->lines[(id - ID_GLYPH) / 16];
        l.color = ln->color, l.ch = char_class(ln->text[(id - ID_GLYPH) % 16]);
    } else if (sc->kind == VS_SCENE_CHART && id >= ID_BAR && id < ID_LABEL) {
        l.color = sc->bars[id - ID_BAR].color, l.value = sc->bars[id - ID_BAR].value;
    } else if (sc->kind == VS_SCENE_CHART && id >= ID_LABEL && id < ID_VALUE) {
        l.ch = char_class(sc->bars[id - ID_LABEL].label);
    } else if (sc->kind == VS_SCENE_CHART && id >= ID_VALUE && id < ID_END) {
        l.ch = char_class((char)('0' + sc->bars[id - ID_VALUE].value));
    }
    return l;
}

/* The element (id) that labels each of the G x G patches (-1: none): the one covering the most pixels
 * of the patch and at least an eighth of them. */
static vs_status patch_elements(const vs_world_scene *sc, int S, int P, int16_t *best_out, vs_error *err) {
    if (S < 32 || S > 4096) return vs_error_set(err, VS_ERR_RANGE, "patch labels: image size %d outside 32..4096", S);
    if (P < 1 || S % P) return vs_error_set(err, VS_ERR_RANGE, "patch labels: patch %d does not divide %d", P, S);
    vs_status st = world_scene_validate(sc, err);
    if (st) return st;
    int16_t *ids = vs_malloc((size_t)S * S * sizeof(int16_t));
    if (!ids) return vs_error_set(err, VS_ERR_NOMEM, "patch labels: out of memory");
    for (size_t i = 0; i < (size_t)S * S; i++) ids[i] = -1;
    draw_scene(&(canvas){.ids = ids, .S = S}, sc);
    int G = S / P;
    for (int py = 0; py < G; py++)
        for (int px = 0; px < G; px++) {
            int count[ID_END] = {0}, best = -1;
            for (int y = py * P; y < (py + 1) * P; y++)
                for (int x = px * P; x < (px + 1) * P; x++) {
                    int id = ids[(size_t)y * S + x];
                    if (id >= 0) count[id]++;
                }
            for (int id = 0; id < ID_END; id++)
                if (count[id] * 8 >= P * P && (best < 0 || count[id] > count[best])) best = id;
            best_out[py * G + px] = (int16_t)best;
        }
    vs_free(ids);
    return VS_OK;
}

vs_status vs_world_patch_labels(const vs_world_scene *sc, int S, int P, vs_world_patch_label *out,
                                vs_error *err) {
    int G = P >= 1 && S >= P ? S / P : 0;
    int16_t *best = vs_malloc(sizeof(int16_t) * (size_t)(G > 0 ? G * G : 1));
    if (!best) return vs_error_set(err, VS_ERR_NOMEM, "patch labels: out of memory");
    vs_status st = patch_elements(sc, S, P, best, err);
    for (int p = 0; st == VS_OK && p < G * G; p++)
        out[p] = best[p] < 0 ? (vs_world_patch_label){-1, -1, -1, -1, -1} : element_label(sc, best[p]);
    vs_free(best);
    return st;
}

/* ---------------------------------------------------------------------------------------------- */
/* Grounding */

/* The bar with the largest (sign 1) or smallest (sign -1) value; -1 on a tie. */
static int extreme_bar(const vs_world_scene *sc, int sign) {
    int best = -1;
    bool tie = false;
    for (int i = 0; i < sc->n_bars; i++) {
        int d = best < 0 ? 1 : sign * (sc->bars[i].value - sc->bars[best].value);
        if (d > 0) best = i, tie = false;
        else if (d == 0) tie = true;
    }
    return tie ? -1 : best;
}

static void want_bar(const vs_world_scene *sc, char label, bool *want) {
    for (int i = 0; i < sc->n_bars; i++)
        if (label && sc->bars[i].label == label) want[ID_BAR + i] = want[ID_LABEL + i] = want[ID_VALUE + i] = true;
}

/* Marks in want the elements query q names in sc; false when it names none that can be drawn. */
static bool ground_want(const vs_world_scene *sc, const vs_world_query *q, bool *want) {
    switch (q->type) {
    case VS_Q_COUNT: case VS_Q_COLOR: case VS_Q_SHAPE: case VS_Q_SIZE: case VS_Q_POSITION:
    case VS_Q_EXISTS: case VS_Q_RELATION:
        if (sc->kind != VS_SCENE_SHAPES) return false;
        for (int i = 0; i < sc->n_objects; i++)
            want[i] = vs_world_sel_matches(&sc->objects[i], q->sel) ||
                      (q->type == VS_Q_RELATION && vs_world_sel_matches(&sc->objects[i], q->sel2));
        break;
    case VS_Q_READ_LINE: case VS_Q_READ_COLOR:
        if (sc->kind != VS_SCENE_GLYPH) return false;
        for (int l = 0; l < sc->n_lines; l++)
            if (q->type == VS_Q_READ_LINE ? l == q->index : sc->lines[l].color == q->sel.color)
                for (int k = 0; k < 16; k++) want[ID_GLYPH + 16 * l + k] = true;
        break;
    case VS_Q_BAR_VALUE: case VS_Q_BAR_CMP: case VS_Q_BAR_DIFF:
        if (sc->kind != VS_SCENE_CHART) return false;
        want_bar(sc, q->label, want);
        if (q->type != VS_Q_BAR_VALUE) want_bar(sc, q->label2, want);
        break;
    case VS_Q_BAR_MAX: case VS_Q_BAR_MIN: {
        if (sc->kind != VS_SCENE_CHART) return false;
        int b = extreme_bar(sc, q->type == VS_Q_BAR_MAX ? 1 : -1);
        if (b < 0) return false;
        want_bar(sc, sc->bars[b].label, want);
        break;
    }
    default: return false;
    }
    return true;
}

bool vs_world_ground_masks(const vs_world_scene *sc, const vs_world_query *const *q, int n, int S, int P,
                           uint64_t *masks) {
    bool want[VS_WORLD_MAX_TURNS][ID_END], any = false;
    for (int i = 0; i < n; i++) masks[i] = 0;
    if (n < 1 || n > VS_WORLD_MAX_TURNS || P < 1 || S % P || (S / P) * (S / P) > 64) return false;
    bool named[VS_WORLD_MAX_TURNS];
    for (int i = 0; i < n; i++) {
        memset(want[i], 0, sizeof(want[i]));
        any |= named[i] = ground_want(sc, q[i], want[i]);
    }
    int16_t best[64];
    if (!any || patch_elements(sc, S, P, best, NULL) != VS_OK) return false;
    const int G = S / P;
    any = false;
    for (int i = 0; i < n; i++) {
        for (int p = 0; named[i] && p < G * G; p++)
            if (best[p] >= 0 && want[i][best[p]]) masks[i] |= UINT64_C(1) << p;
        any |= masks[i] != 0;
    }
    return any;
}

bool vs_world_glyph_masks(const vs_world_scene *sc, int S, int P, uint64_t *masks) {
    memset(masks, 0, sizeof(uint64_t) * VS_WORLD_MAX_LINES * 16);
    if (sc->kind != VS_SCENE_GLYPH || P < 1 || S < 32 || S > 4096 || S % P || (S / P) * (S / P) > 64 ||
        world_scene_validate(sc, NULL) != VS_OK)
        return false;
    int16_t *ids = vs_malloc((size_t)S * S * sizeof(int16_t));
    if (!ids) return false;
    for (size_t i = 0; i < (size_t)S * S; i++) ids[i] = -1;
    draw_scene(&(canvas){.ids = ids, .S = S}, sc);
    const int G = S / P;
    bool any = false;
    for (int py = 0; py < G; py++)
        for (int px = 0; px < G; px++) {
            int count[VS_WORLD_MAX_LINES * 16] = {0};
            for (int y = py * P; y < (py + 1) * P; y++)
                for (int x = px * P; x < (px + 1) * P; x++) {
                    int id = ids[(size_t)y * S + x] - ID_GLYPH;
                    if (id >= 0 && id < VS_WORLD_MAX_LINES * 16) count[id]++;
                }
            for (int c = 0; c < VS_WORLD_MAX_LINES * 16; c++)
                if (count[c] * 8 >= P * P) masks[c] |= UINT64_C(1) << (py * G + px), any = true;
        }
    vs_free(ids);
    return any;
}

bool vs_world_ground_mask(const vs_world_scene *sc, const vs_world_query *q, int S, int P, uint64_t *mask) {
    return vs_world_ground_masks(sc, &q, 1, S, P, mask);
}
