/* world_io: the dataset directory (docs/world.md): samples <-> JSON Lines records, the writer
 * (vs_world_generate: PNGs, train/test/captions JSON Lines, world.json) and the loader. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "png_write.h"
#include "outfile.h"
#include "world_internal.h"

#define WORLD_FORMAT_VERSION 1

void vs_world_sample_clear(vs_world_sample *s) {
    if (!s) return;
    vs_free(s->id);
    for (int i = 0; i < VS_WORLD_MAX_IMAGES; i++) {
        vs_free(s->images[i]);
        vs_free(s->captions[i]);
    }
    for (int t = 0; t < VS_WORLD_MAX_TURNS; t++) {
        vs_free(s->turns[t].user);
        vs_free(s->turns[t].assistant);
        vs_free(s->turns[t].answer);
    }
    memset(s, 0, sizeof(*s));
}

/* Appends user text u with its "<image>" markers replaced by the pictures in words, from scene *k on. */
static void put_words(wsb *b, const vs_world_sample *s, const char *u, int *k) {
    static const char marker[] = "<image>";
    for (const char *m; (m = strstr(u, marker)) != NULL; u = m + sizeof(marker) - 1) {
        wsb_printf(b, "%.*s", (int)(m - u), u);
        char *w = *k < s->n_images ? vs_world_scene_words(&s->scenes[*k]) : NULL;
        wsb_puts(b, "Picture: ");
        wsb_puts(b, w ? w : "?");
        vs_free(w);
        ++*k;
    }
    wsb_puts(b, u);
}

static char *prompt(const vs_world_sample *s, int t, bool with_answer, bool words) {
    if (t < 0 || t >= s->n_turns) return NULL;
    wsb b;
    wsb_init(&b);
    int k = 0;
    for (int i = 0; i <= t; i++) {
        wsb_puts(&b, "USER: ");
        if (words) put_words(&b, s, s->turns[i].user, &k);
        else wsb_puts(&b, s->turns[i].user);
        wsb_puts(&b, " ASSISTANT:");
        if (i < t || with_answer) {
            wsb_puts(&b, " ");
            wsb_puts(&b, s->turns[i].assistant);
        }
        if (i < t) wsb_puts(&b, "</s>");
    }
    return wsb_take(&b);
}

char *vs_world_prompt(const vs_world_sample *s, int t, bool with_answer) { return prompt(s, t, with_answer, false); }
char *vs_world_prompt_words(const vs_world_sample *s, int t, bool with_answer) { return prompt(s, t, with_answer, true); }

/* ---------------------------------------------------------------------------------------------- */
/* content key */

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

uint64_t vs_world_content_key(const vs_world_sample *s) {
    uint64_t h = 0xcbf29ce484222325ULL;
    int32_t suite = (int32_t)s->suite;
    h = fnv(h, &suite, sizeof(suite));
    for (int i = 0; i < s->n_images; i++) {
        const vs_world_scene *sc = &s->scenes[i];
        int8_t head[5] = {(int8_t)sc->kind, sc->bg, (int8_t)sc->n_objects, (int8_t)sc->n_lines, sc->align};
        h = fnv(h, head, sizeof(head));
        h = fnv(h, sc->objects, sizeof(vs_world_object) * (size_t)sc->n_objects);
        for (int k = 0; k < sc->n_lines; k++) {
            h = fnv(h, sc->lines[k].text, strlen(sc->lines[k].text) + 1);
            h = fnv(h, &sc->lines[k].color, 1);
        }
        for (int k = 0; k < sc->n_bars; k++) {
            int8_t bar[3] = {(int8_t)sc->bars[k].label, sc->bars[k].value, sc->bars[k].color};
            h = fnv(h, bar, sizeof(bar));
        }
    }
    for (int t = 0; t < s->n_turns; t++) h = fnv(h, s->turns[t].user, strlen(s->turns[t].user) + 1);
    return h;
}

/* ---------------------------------------------------------------------------------------------- */
/* sample -> JSON */

static void write_sel(vs_json_writer *w, const char *key, vs_world_sel s) {
    if (s.shape < 0 && s.color < 0 && s.size < 0 && s.cell < 0) return;
    vs_json_key(w, key);
    vs_json_obj_begin(w);
    if (s.shape >= 0) vs_json_kv_str(w, "shape", vs_world_shape_name(s.shape));
    if (s.color >= 0) vs_json_kv_str(w, "color", vs_world_color_name(s.color));
    if (s.size >= 0) vs_json_kv_str(w, "size", vs_world_size_name(s.size));
    if (s.cell >= 0) vs_json_kv_str(w, "cell", vs_world_cell_name(s.cell));
    vs_json_obj_end(w);
}

static void write_query(vs_json_writer *w, const vs_world_query *q) {
    vs_json_obj_begin(w);
    vs_json_kv_str(w, "type", world_query_type_name(q->type));
    if (q->image >= 0) vs_json_kv_int(w, "image", q->image);
    if (q->image2 >= 0) vs_json_kv_int(w, "image2", q->image2);
    write_sel(w, "sel", q->sel);
    write_sel(w, "sel2", q->sel2);
    switch (q->type) {
    case VS_Q_RELATION: vs_json_kv_str(w, "relation", world_relation_name(q->relation)); break;
    case VS_Q_READ_LINE: vs_json_kv_int(w, "index", q->index); break;
    case VS_Q_BAR_VALUE:
    case VS_Q_BAR_CMP:
    case VS_Q_BAR_DIFF: {
        char l[2] = {q->label, 0}, l2[2] = {q->label2, 0};
        vs_json_kv_str(w, "label", l);
        if (q->type != VS_Q_BAR_VALUE) vs_json_kv_str(w, "label2", l2);
        break;
    }
    case VS_Q_ARITH: {
        char ops[VS_WORLD_MAX_OPS + 1] = {0};
        memcpy(ops, q->ops, (size_t)q->n_ops);
        vs_json_kv_str(w, "ops", ops);
        vs_json_key(w, "nums");
        vs_json_arr_begin(w);
        for (int i = 0; i <= q->n_ops; i++) vs_json_int(w, q->nums[i]);
        vs_json_arr_end(w);
        break;
    }
    case VS_Q_FACT:
    case VS_Q_FACT_CMP:
    case VS_Q_FACT_SPAN:
    case VS_Q_FACT_MAX:
        vs_json_kv_str(w, "entity", world_entity_at(q->entity)->name);
        if (q->type != VS_Q_FACT) vs_json_kv_str(w, "entity2", world_entity_at(q->entity2)->name);
        if (q->type == VS_Q_FACT_MAX) vs_json_kv_str(w, "entity3", world_entity_at(q->entity3)->name);
        if (q->type == VS_Q_FACT_MAX && q->entity4 >= 0) vs_json_kv_str(w, "entity4", world_entity_at(q->entity4)->name);
        vs_json_kv_str(w, "attr", world_attr_name(q->attr));
        break;
    default: break;
    }
    if (q->prev_turn >= 0) vs_json_kv_int(w, "prev_turn", q->prev_turn);
    if (q->type == VS_Q_PREV_PLUS || q->type == VS_Q_PREV_TIMES) vs_json_kv_int(w, "arg", q->arg);
    vs_json_obj_end(w);
}

static void write_scene(vs_json_writer *w, const vs_world_scene *sc) {
    vs_json_obj_begin(w);
    vs_json_kv_str(w, "kind", world_scene_kind_name(sc->kind));
    vs_json_kv_str(w, "bg", vs_world_bg_name(sc->bg));
    vs_json_kv_int(w, "noise", sc->noise);
    if (sc->kind == VS_SCENE_SHAPES) {
        if (sc->zoom) vs_json_kv_int(w, "zoom", sc->zoom);
        vs_json_key(w, "objects");
        vs_json_arr_begin(w);
        for (int i = 0; i < sc->n_objects; i++) {
            const vs_world_object *o = &sc->objects[i];
            vs_json_obj_begin(w);
            vs_json_kv_str(w, "shape", vs_world_shape_name(o->shape));
            vs_json_kv_str(w, "color", vs_world_color_name(o->color));
            vs_json_kv_str(w, "size", vs_world_size_name(o->size));
            vs_json_kv_str(w, "cell", vs_world_cell_name(o->cell));
            vs_json_obj_end(w);
        }
        vs_json_arr_end(w);
    } else if (sc->kind == VS_SCENE_GLYPH) {
        vs_json_kv_str(w, "place", vs_world_cell_name(sc->align));
        vs_json_key(w, "lines");
        vs_json_arr_begin(w);
        for (int i = 0; i < sc->n_lines; i++) {
            vs_json_obj_begin(w);
            vs_json_kv_str(w, "text", sc->lines[i].text);
            vs_json_kv_str(w, "color", vs_world_color_name(sc->lines[i].color));
            vs_json_obj_end(w);
        }
        vs_json_arr_end(w);
    } else {
        vs_json_key(w, "bars");
        vs_json_arr_begin(w);
        for (int i = 0; i < sc->n_bars; i++) {
            char l[2] = {sc->bars[i].label, 0};
            vs_json_obj_begin(w);
            vs_json_kv_str(w, "label", l);
            vs_json_kv_int(w, "value", sc->bars[i].value);
            vs_json_kv_str(w, "color", vs_world_color_name(sc->bars[i].color));
            vs_json_obj_end(w);
        }
        vs_json_arr_end(w);
    }
    vs_json_obj_end(w);
}

static void write_sample(vs_json_writer *w, const vs_world_sample *s) {
    vs_json_obj_begin(w);
    vs_json_kv_str(w, "id", s->id);
    vs_json_kv_str(w, "suite", vs_world_suite_name(s->suite));
    vs_json_key(w, "images");
    vs_json_arr_begin(w);
    for (int i = 0; i < s->n_images; i++) vs_json_str(w, s->images[i]);
    vs_json_arr_end(w);
    vs_json_key(w, "captions");
    vs_json_arr_begin(w);
    for (int i = 0; i < s->n_images; i++) vs_json_str(w, s->captions[i]);
    vs_json_arr_end(w);
    vs_json_key(w, "scenes");
    vs_json_arr_begin(w);
    for (int i = 0; i < s->n_images; i++) write_scene(w, &s->scenes[i]);
    vs_json_arr_end(w);
    vs_json_key(w, "turns");
    vs_json_arr_begin(w);
    for (int t = 0; t < s->n_turns; t++) {
        const vs_world_turn *tu = &s->turns[t];
        vs_json_obj_begin(w);
        vs_json_kv_str(w, "kind", vs_world_turn_kind_name(tu->kind));
        vs_json_kv_int(w, "first_image", tu->first_image);
        vs_json_kv_int(w, "n_images", tu->n_images);
        vs_json_kv_str(w, "user", tu->user);
        vs_json_kv_str(w, "assistant", tu->assistant);
        vs_json_kv_str(w, "answer", tu->answer);
        vs_json_kv_str(w, "check", vs_world_check_name(tu->check));
        vs_json_key(w, "query");
        write_query(w, &tu->query);
        vs_json_obj_end(w);
    }
    vs_json_arr_end(w);
    vs_json_obj_end(w);
}

char *vs_world_sample_to_json(const vs_world_sample *s, size_t *len) {
    vs_json_writer w;
    vs_json_writer_init(&w);
    write_sample(&w, s);
    return vs_json_writer_take(&w, len);
}

/* ---------------------------------------------------------------------------------------------- */
/* JSON -> sample */

typedef struct rd {
    const char *what;
    vs_error *err;
    bool bad;
} rd;

#define IO_STR2(x) #x
#define IO_STR(x) IO_STR2(x)

static bool rfail(rd *r, const char *fmt, const char *a) {
    if (!r->bad) {
        r->bad = true;
        char msg[sizeof(((vs_error *)0)->msg) + 8];
        snprintf(msg, sizeof(msg), fmt, a);
        vs_error_set(r->err, VS_ERR_FORMAT, "%s: %s", r->what, msg);
    }
    return false;
}

static const vs_json *req(rd *r, const vs_json *obj, const char *key, vs_json_type type) {
    const vs_json *v = vs_json_get(obj, key);
    if (!v || v->type != type) {
        char m[128];
        snprintf(m, sizeof(m), "field \"%s\" missing or not %s %s", key, type == VS_JSON_ARRAY || type == VS_JSON_OBJECT ? "an" : "a",
                 vs_json_type_name(type));
        rfail(r, "%s", m);
        return NULL;
    }
    return v;
}

static const char *req_str(rd *r, const vs_json *obj, const char *key) {
    const vs_json *v = req(r, obj, key, VS_JSON_STRING);
    return v ? v->str : NULL;
}

static bool req_int(rd *r, const vs_json *obj, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    const vs_json *v = req(r, obj, key, VS_JSON_NUMBER);
    if (!v) return false;
    if (!v->is_int || v->i < lo || v->i > hi) return rfail(r, "field \"%s\" is not an integer in range", key);
    *out = v->i;
    return true;
}

/* Optional int with a default. */
static bool opt_int(rd *r, const vs_json *obj, const char *key, int64_t lo, int64_t hi, int64_t def, int64_t *out) {
    if (!vs_json_get(obj, key)) {
        *out = def;
        return true;
    }
    return req_int(r, obj, key, lo, hi, out);
}

static bool name_field(rd *r, const vs_json *obj, const char *key, const char *(*name)(int), int n, int *out) {
    const char *s = req_str(r, obj, key);
    if (!s) return false;
    int i = world_name_index(name, n, s);
    if (i < 0) return rfail(r, "unknown value in field \"%s\"", key);
    *out = i;
    return true;
}

static bool read_sel(rd *r, const vs_json *q, const char *key, vs_world_sel *s) {
    *s = (vs_world_sel){-1, -1, -1, -1};
    const vs_json *o = vs_json_get(q, key);
    if (!o) return true;
    if (o->type != VS_JSON_OBJECT) return rfail(r, "field \"%s\" is not an object", key);
    int v;
    if (vs_json_get(o, "shape")) {
        if (!name_field(r, o, "shape", vs_world_shape_name, VS_WORLD_N_SHAPES, &v)) return false;
        s->shape = (int8_t)v;
    }
    if (vs_json_get(o, "color")) {
        if (!name_field(r, o, "color", vs_world_color_name, VS_WORLD_N_COLORS, &v)) return false;
        s->color = (int8_t)v;
    }
    if (vs_json_get(o, "size")) {
        if (!name_field(r, o, "size", vs_world_size_name, 2, &v)) return false;
        s->size = (int8_t)v;
    }
    if (vs_json_get(o, "cell")) {
        if (!name_field(r, o, "cell", vs_world_cell_name, VS_WORLD_N_CELLS, &v)) return false;
        s->cell = (int8_t)v;
    }
    return true;
}

static const char *entity_name(int i) { return world_entity_at(i)->name; }

static bool read_label(rd *r, const vs_json *q, const char *key, char *out) {
    const char *s = req_str(r, q, key);
    if (!s) return false;
    if (strlen(s) != 1 || s[0] < 'A' || s[0] > 'Z') return rfail(r, "field \"%s\" is not one capital letter", key);
    *out = s[0];
    return true;
}

static bool read_query(rd *r, const vs_json *j, vs_world_query *q) {
    memset(q, 0, sizeof(*q));
    q->entity = q->entity2 = q->entity3 = q->entity4 = q->attr = -1;
    const char *type = req_str(r, j, "type");
    if (!type) return false;
    int ty = world_query_type_from_name(type);
    if (ty <= 0) return rfail(r, "unknown query type \"%s\"", type);
    q->type = (vs_world_query_type)ty;
    int64_t v;
    if (!opt_int(r, j, "image", -1, VS_WORLD_MAX_IMAGES - 1, -1, &v)) return false;
    q->image = (int)v;
    if (!opt_int(r, j, "image2", -1, VS_WORLD_MAX_IMAGES - 1, -1, &v)) return false;
    q->image2 = (int)v;
    if (!read_sel(r, j, "sel", &q->sel) || !read_sel(r, j, "sel2", &q->sel2)) return false;
    if (!opt_int(r, j, "prev_turn", -1, VS_WORLD_MAX_TURNS - 1, -1, &v)) return false;
    q->prev_turn = (int)v;
    if (!opt_int(r, j, "arg", -1000000, 1000000, 0, &v)) return false;
    q->arg = v;
    switch (q->type) {
    case VS_Q_RELATION: {
        const char *rel = req_str(r, j, "relation");
        if (!rel) return false;
        q->relation = world_relation_from_name(rel);
        if (q->relation < 0) return rfail(r, "unknown relation \"%s\"", rel);
        break;
    }
    case VS_Q_READ_LINE:
        if (!req_int(r, j, "index", 0, VS_WORLD_MAX_LINES - 1, &v)) return false;
        q->index = (int)v;
        break;
    case VS_Q_BAR_VALUE:
    case VS_Q_BAR_CMP:
    case VS_Q_BAR_DIFF:
        if (!read_label(r, j, "label", &q->label)) return false;
        if (q->type != VS_Q_BAR_VALUE && !read_label(r, j, "label2", &q->label2)) return false;
        break;
    case VS_Q_ARITH: {
        const char *ops = req_str(r, j, "ops");
        const vs_json *nums = req(r, j, "nums", VS_JSON_ARRAY);
        if (!ops || !nums) return false;
        size_t n = strlen(ops);
        if (n < 1 || n > VS_WORLD_MAX_OPS || nums->len != n + 1) return rfail(r, "%s", "arithmetic ops/nums do not fit");
        q->n_ops = (int)n;
        for (size_t i = 0; i < n; i++) {
            if (!strchr("+-*/", ops[i])) return rfail(r, "%s", "unknown arithmetic operator");
            q->ops[i] = ops[i];
        }
        for (size_t i = 0; i <= n; i++) {
            const vs_json *x = &nums->items[i];
            if (x->type != VS_JSON_NUMBER || !x->is_int || x->i < -1000000000LL || x->i > 1000000000LL)
                return rfail(r, "%s", "arithmetic number out of range");
            q->nums[i] = x->i;
        }
        break;
    }
    case VS_Q_FACT:
    case VS_Q_FACT_CMP:
    case VS_Q_FACT_SPAN:
    case VS_Q_FACT_MAX:
        if (!name_field(r, j, "entity", entity_name, world_entity_n(), &q->entity)) return false;
        if (q->type != VS_Q_FACT && !name_field(r, j, "entity2", entity_name, world_entity_n(), &q->entity2)) return false;
        if (q->type == VS_Q_FACT_MAX && !name_field(r, j, "entity3", entity_name, world_entity_n(), &q->entity3)) return false;
        if (q->type == VS_Q_FACT_MAX && vs_json_get(j, "entity4") &&
            !name_field(r, j, "entity4", entity_name, world_entity_n(), &q->entity4))
            return false;
        if (!name_field(r, j, "attr", world_attr_name, WATTR_N, &q->attr)) return false;
        break;
    default: break;
    }
    return true;
}

static bool read_scene(rd *r, const vs_json *j, vs_world_scene *sc) {
    memset(sc, 0, sizeof(*sc));
    int v;
    if (!name_field(r, j, "kind", (const char *(*)(int))world_scene_kind_name, 3, &v)) return false;
    sc->kind = (vs_world_scene_kind)v;
    if (!name_field(r, j, "bg", vs_world_bg_name, VS_WORLD_N_BGS, &v)) return false;
    sc->bg = (int8_t)v;
    int64_t noise;
    if (!req_int(r, j, "noise", 0, UINT32_MAX, &noise)) return false;
    sc->noise = (uint32_t)noise;
    if (sc->kind == VS_SCENE_SHAPES) {
        const vs_json *a = req(r, j, "objects", VS_JSON_ARRAY);
        if (!a) return false;
        if (a->len > VS_WORLD_MAX_OBJECTS) return rfail(r, "%s", "too many objects");
        if (vs_json_get(j, "zoom")) {
            int64_t z;
            if (!req_int(r, j, "zoom", 0, 1, &z)) return false;
            sc->zoom = (int8_t)z;
        }
        sc->n_objects = (int)a->len;
        for (size_t i = 0; i < a->len; i++) {
            const vs_json *o = &a->items[i];
            int sh, co, si, ce;
            if (!name_field(r, o, "shape", vs_world_shape_name, VS_WORLD_N_SHAPES, &sh) ||
                !name_field(r, o, "color", vs_world_color_name, VS_WORLD_N_COLORS, &co) ||
                !name_field(r, o, "size", vs_world_size_name, 2, &si) ||
                !name_field(r, o, "cell", vs_world_cell_name, VS_WORLD_N_CELLS, &ce))
                return false;
            sc->objects[i] = (vs_world_object){(int8_t)sh, (int8_t)co, (int8_t)si, (int8_t)ce};
        }
    } else if (sc->kind == VS_SCENE_GLYPH) {
        sc->align = 4;
        if (vs_json_get(j, "place")) {
            if (!name_field(r, j, "place", vs_world_cell_name, VS_WORLD_N_CELLS, &v)) return false;
            sc->align = (int8_t)v;
        }
        const vs_json *a = req(r, j, "lines", VS_JSON_ARRAY);
        if (!a) return false;
        if (a->len > VS_WORLD_MAX_LINES) return rfail(r, "%s", "too many text lines");
        sc->n_lines = (int)a->len;
        for (size_t i = 0; i < a->len; i++) {
            const char *t = req_str(r, &a->items[i], "text");
            int co;
            if (!t || !name_field(r, &a->items[i], "color", vs_world_color_name, VS_WORLD_N_COLORS, &co)) return false;
            if (strlen(t) >= VS_WORLD_WORD_MAX) return rfail(r, "%s", "text line too long");
            snprintf(sc->lines[i].text, sizeof(sc->lines[i].text), "%s", t);
            sc->lines[i].color = (int8_t)co;
        }
    } else {
        const vs_json *a = req(r, j, "bars", VS_JSON_ARRAY);
        if (!a) return false;
        if (a->len > VS_WORLD_MAX_BARS) return rfail(r, "%s", "too many bars");
        sc->n_bars = (int)a->len;
        for (size_t i = 0; i < a->len; i++) {
            int64_t val;
            int co;
            if (!read_label(r, &a->items[i], "label", &sc->bars[i].label) || !req_int(r, &a->items[i], "value", 1, 9, &val) ||
                !name_field(r, &a->items[i], "color", vs_world_color_name, VS_WORLD_N_COLORS, &co))
                return false;
            sc->bars[i].value = (int8_t)val;
            sc->bars[i].color = (int8_t)co;
        }
    }
    vs_error e2;
    if (world_scene_validate(sc, &e2) != VS_OK) return rfail(r, "%s", e2.msg);
    return true;
}

static const char *turn_kind_name_int(int k) { return vs_world_turn_kind_name((vs_world_turn_kind)k); }
static const char *check_name_int(int k) { return vs_world_check_name((vs_world_check_type)k); }
static const char *suite_name_int(int k) { return vs_world_suite_name((vs_world_suite)k); }

static int count_markers(const char *s) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, "<image>")); p += 7) n++;
    return n;
}

static char *join_path(const char *dir, const char *rel) {
    if (!dir || rel[0] == '/') return vs_strdup(rel);
    size_t n = strlen(dir) + strlen(rel) + 2;
    char *p = vs_malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, rel);
    return p;
}

static bool read_sample(rd *r, const vs_json *j, const char *dir, vs_world_sample *s) {
    memset(s, 0, sizeof(*s));
    if (j->type != VS_JSON_OBJECT) return rfail(r, "%s", "record is not an object");
    const char *id = req_str(r, j, "id");
    int suite;
    if (!id || !name_field(r, j, "suite", suite_name_int, VS_WORLD_N_SUITES, &suite)) return false;
    s->id = vs_strdup(id);
    s->suite = (vs_world_suite)suite;
    const vs_json *imgs = req(r, j, "images", VS_JSON_ARRAY), *caps = req(r, j, "captions", VS_JSON_ARRAY);
    const vs_json *scenes = req(r, j, "scenes", VS_JSON_ARRAY), *turns = req(r, j, "turns", VS_JSON_ARRAY);
    if (!imgs || !caps || !scenes || !turns) return false;
    if (imgs->len > VS_WORLD_MAX_IMAGES) return rfail(r, "%s", "too many images");
    if (caps->len != imgs->len || scenes->len != imgs->len) return rfail(r, "%s", "images, captions and scenes differ in number");
    s->n_images = (int)imgs->len;
    for (int i = 0; i < s->n_images; i++) {
        if (imgs->items[i].type != VS_JSON_STRING || caps->items[i].type != VS_JSON_STRING)
            return rfail(r, "%s", "image paths and captions must be strings");
        if (!imgs->items[i].len || strstr(imgs->items[i].str, "..")) return rfail(r, "%s", "image path empty or leaves the dataset");
        s->images[i] = join_path(dir, imgs->items[i].str);
        s->captions[i] = vs_strdup(caps->items[i].str);
        if (!read_scene(r, &scenes->items[i], &s->scenes[i])) return false;
    }
    if (turns->len < 1 || turns->len > VS_WORLD_MAX_TURNS) return rfail(r, "%s", "a sample has 1 to " IO_STR(VS_WORLD_MAX_TURNS) " turns");
    s->n_turns = (int)turns->len;
    int next_image = 0;
    for (int t = 0; t < s->n_turns; t++) {
        const vs_json *tj = &turns->items[t];
        vs_world_turn *tu = &s->turns[t];
        int kind, check;
        int64_t fi, ni;
        const char *user = req_str(r, tj, "user"), *asst = req_str(r, tj, "assistant"), *ans = req_str(r, tj, "answer");
        if (!user || !asst || !ans) return false;
        if (!name_field(r, tj, "kind", turn_kind_name_int, VS_WORLD_N_TURN_KINDS, &kind) || !name_field(r, tj, "check", check_name_int, VS_CHECK_BARS + 1, &check) ||
            !req_int(r, tj, "first_image", 0, VS_WORLD_MAX_IMAGES, &fi) || !req_int(r, tj, "n_images", 0, VS_WORLD_MAX_IMAGES, &ni))
            return false;
        const vs_json *qj = req(r, tj, "query", VS_JSON_OBJECT);
        if (!qj || !read_query(r, qj, &tu->query)) return false;
        tu->kind = (vs_world_turn_kind)kind;
        tu->check = (vs_world_check_type)check;
        tu->first_image = (int)fi;
        tu->n_images = (int)ni;
        tu->user = vs_strdup(user);
        tu->assistant = vs_strdup(asst);
        tu->answer = vs_strdup(ans);
        if (fi != next_image || fi + ni > s->n_images) return rfail(r, "%s", "turn images are not consecutive within the sample");
        if (count_markers(user) != ni) return rfail(r, "%s", "number of <image> markers differs from the turn's n_images");
        next_image += (int)ni;
    }
    if (next_image != s->n_images) return rfail(r, "%s", "images not introduced by any turn");
    if (!s->id) return rfail(r, "%s", "out of memory");
    return true;
}

vs_status vs_world_sample_from_json(const char *line, size_t len, const char *dir, const char *what, vs_world_sample *out,
                                    vs_error *err) {
    memset(out, 0, sizeof(*out));
    vs_json_doc *d = vs_json_parse(line, len, what, err);
    if (!d) return err ? err->code : VS_ERR_FORMAT;
    rd r = {what, err, false};
    bool ok = read_sample(&r, vs_json_root(d), dir, out);
    vs_json_doc_free(d);
    if (!ok) {
        vs_world_sample_clear(out);
        return VS_ERR_FORMAT;
    }
    return VS_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* loading */

void vs_world_dataset_free(vs_world_dataset *d) {
    if (!d) return;
    for (int64_t i = 0; i < d->n; i++) vs_world_sample_clear(&d->samples[i]);
    vs_free(d->samples);
    vs_free(d->dir);
    vs_free(d->split);
    vs_free(d);
}

vs_world_dataset *vs_world_load(const char *dir, const char *split, uint32_t suite_mask, vs_error *err) {
    char path[4096];
    vs_world_dataset *d = vs_calloc(1, sizeof(*d));
    if (!d) {
        vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory", dir);
        return NULL;
    }
    d->dir = vs_strdup(dir);
    d->split = vs_strdup(split);
    /* manifest */
    snprintf(path, sizeof(path), "%s/world.json", dir);
    uint8_t *buf;
    size_t n;
    if (vs_read_file(path, &buf, &n, err) != VS_OK) {
        vs_world_dataset_free(d);
        return NULL;
    }
    vs_json_doc *m = vs_json_parse((const char *)buf, n, path, err);
    vs_free(buf);
    if (!m) {
        vs_world_dataset_free(d);
        return NULL;
    }
    const vs_json *root = vs_json_root(m);
    if (strcmp(vs_json_get_str(root, "format", ""), "vlmspec-world") != 0 || vs_json_get_int(root, "version", 0) != WORLD_FORMAT_VERSION) {
        vs_error_set(err, VS_ERR_FORMAT, "%s: not a vlmspec-world manifest of version %d", path, WORLD_FORMAT_VERSION);
        vs_json_doc_free(m);
        vs_world_dataset_free(d);
        return NULL;
    }
    /* "seed" is a JSON number (exact up to 2^53; "seed_str" below is exact); a value a uint64_t cannot
     * hold (negative, too large, NaN) is a bad manifest, not undefined behaviour */
    const double seed_num = vs_json_get_num(root, "seed", 0);
    if (!(seed_num >= 0 && seed_num < 18446744073709551616.0)) {
        vs_error_set(err, VS_ERR_FORMAT, "%s: seed %g is not an unsigned 64-bit integer", path, seed_num);
        vs_json_doc_free(m);
        vs_world_dataset_free(d);
        return NULL;
    }
    d->seed = (uint64_t)seed_num;
    const vs_json *seed_str = vs_json_get(root, "seed_str");
    if (seed_str && seed_str->type == VS_JSON_STRING) d->seed = strtoull(seed_str->str, NULL, 10);
    d->image_size = (int)vs_json_get_int(root, "image_size", 0);
    vs_json_doc_free(m);
    if (d->image_size < 32 || d->image_size > 4096) {
        vs_error_set(err, VS_ERR_FORMAT, "%s: image_size missing or out of range", path);
        vs_world_dataset_free(d);
        return NULL;
    }
    /* records */
    snprintf(path, sizeof(path), "%s/%s.jsonl", dir, split);
    if (vs_read_file(path, &buf, &n, err) != VS_OK) {
        vs_world_dataset_free(d);
        return NULL;
    }
    int64_t cap = 0, line_no = 0;
    const char *p = (const char *)buf, *end = p + n;
    vs_status st = VS_OK;
    while (p < end) {
        const char *e = memchr(p, '\n', (size_t)(end - p));
        if (!e) e = end;
        line_no++;
        if (e > p) {
            if (d->n == cap) {
                cap = cap ? cap * 2 : 256;
                vs_world_sample *ns = vs_realloc(d->samples, (size_t)cap * sizeof(vs_world_sample));
                if (!ns) {
                    st = vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory at line %lld", path, (long long)line_no);
                    break;
                }
                d->samples = ns;
            }
            char what[4200];
            snprintf(what, sizeof(what), "%s:%lld", path, (long long)line_no);
            vs_world_sample *s = &d->samples[d->n];
            st = vs_world_sample_from_json(p, (size_t)(e - p), dir, what, s, err);
            if (st) break;
            if (suite_mask & VS_WORLD_SUITE_BIT(s->suite)) d->n++;
            else vs_world_sample_clear(s);
        } else if (e + 1 < end) {
            st = vs_error_set(err, VS_ERR_FORMAT, "%s:%lld: empty line inside the file", path, (long long)line_no);
            break;
        }
        p = e + 1;
    }
    vs_free(buf);
    if (st) {
        vs_world_dataset_free(d);
        return NULL;
    }
    return d;
}

/* ---------------------------------------------------------------------------------------------- */
/* writing a dataset */

static vs_status mkdir_p(const char *path, vs_error *err) {
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s", path);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return vs_error_set(err, VS_ERR_IO, "%s: cannot create directory: %s", tmp, strerror(errno));
        *p = '/';
    }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return vs_error_set(err, VS_ERR_IO, "%s: cannot create directory: %s", tmp, strerror(errno));
    return VS_OK;
}

/* open-addressing set of 64-bit keys (0 is mapped to 1) */
typedef struct keyset {
    uint64_t *k;
    size_t cap, n;
} keyset;

static bool keyset_add(keyset *s, uint64_t key) {
    if (!key) key = 1;
    if ((s->n + 1) * 2 > s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 1024;
        uint64_t *nk = vs_calloc(cap, sizeof(uint64_t));
        if (!nk) return false;
        for (size_t i = 0; i < s->cap; i++)
            if (s->k[i]) {
                size_t j = (size_t)(s->k[i] * 0x9e3779b97f4a7c15ULL) & (cap - 1);
                while (nk[j]) j = (j + 1) & (cap - 1);
                nk[j] = s->k[i];
            }
        vs_free(s->k);
        s->k = nk;
        s->cap = cap;
    }
    size_t j = (size_t)(key * 0x9e3779b97f4a7c15ULL) & (s->cap - 1);
    while (s->k[j]) {
        if (s->k[j] == key) return false;
        j = (j + 1) & (s->cap - 1);
    }
    s->k[j] = key;
    s->n++;
    return true;
}

static bool keyset_has(const keyset *s, uint64_t key) {
    if (!key) key = 1;
    if (!s->cap) return false;
    size_t j = (size_t)(key * 0x9e3779b97f4a7c15ULL) & (s->cap - 1);
    while (s->k[j]) {
        if (s->k[j] == key) return true;
        j = (j + 1) & (s->cap - 1);
    }
    return false;
}

static vs_status write_line(FILE *f, const char *path, const char *s, size_t n, vs_error *err) {
    if (fwrite(s, 1, n, f) != n || fputc('\n', f) == EOF)
        return vs_error_set(err, VS_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    return VS_OK;
}

static vs_status write_caption_records(FILE *f, const char *path, const vs_world_config *cfg, const vs_world_sample *s,
                                       vs_error *err) {
    static const char *const prompts[] = {"<image> Write a short caption for this image.", "<image> Describe the image briefly.",
                                          "<image> What is shown in this picture? Answer in one sentence.",
                                          "<image> Give a one-sentence caption of the image."};
    for (int i = 0; i < s->n_images; i++) {
        vs_world_sample c;
        memset(&c, 0, sizeof(c));
        char id[160];
        snprintf(id, sizeof(id), "caption-%s-%d", s->id, i);
        vs_rng r;
        vs_rng_seed(&r, cfg->seed ^ fnv(0xcbf29ce484222325ULL, id, strlen(id)));
        c.id = id;
        c.suite = VS_WORLD_CAPTION;
        c.n_images = 1;
        c.images[0] = s->images[i];
        c.captions[0] = s->captions[i];
        c.scenes[0] = s->scenes[i];
        c.n_turns = 1;
        vs_world_turn *t = &c.turns[0];
        t->kind = VS_TURN_FIRST;
        t->first_image = 0;
        t->n_images = 1;
        t->user = (char *)prompts[vs_rng_below(&r, (uint32_t)VS_ARRAY_LEN(prompts))];
        t->assistant = s->captions[i];
        memset(&t->query, 0, sizeof(t->query));
        t->query.type = VS_Q_CAPTION;
        t->query.image = 0;
        t->query.image2 = t->query.prev_turn = -1;
        t->query.sel = t->query.sel2 = (vs_world_sel){-1, -1, -1, -1};
        t->query.entity = t->query.entity2 = t->query.entity3 = t->query.entity4 = t->query.attr = -1;
        char ans[128];
        if (vs_world_expected(&c, 0, ans, sizeof(ans), err) != VS_OK) return vs_error_wrap(err, "%s", id);
        t->answer = ans;
        t->check = world_check_type(&c, 0);
        size_t n;
        char *js = vs_world_sample_to_json(&c, &n);
        if (!js) return vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory", id);
        vs_status st = write_line(f, path, js, n, err);
        vs_free(js);
        if (st) return st;
    }
    return VS_OK;
}

vs_status vs_world_generate(const vs_world_config *cfg, const char *dir, vs_error *err) {
    if (cfg->image_size < 32 || cfg->image_size > 4096)
        return vs_error_set(err, VS_ERR_RANGE, "image size %d outside 32..4096", cfg->image_size);
    if (cfg->n_train < 0 || cfg->n_test < 0 || cfg->n_train > 10000000 || cfg->n_test > 10000000)
        return vs_error_set(err, VS_ERR_RANGE, "sample counts out of range");
    uint32_t suites = cfg->suites & ~VS_WORLD_SUITE_BIT(VS_WORLD_CAPTION);
    if (!suites) return vs_error_set(err, VS_ERR_INVALID, "no suites selected");
    char path[4096];
    vs_status st;
    snprintf(path, sizeof(path), "%s/img/train", dir);
    if ((st = mkdir_p(path, err))) return st;
    snprintf(path, sizeof(path), "%s/img/test", dir);
    if ((st = mkdir_p(path, err))) return st;
    size_t one = (size_t)cfg->image_size * (size_t)cfg->image_size * 3;
    uint8_t *rgb = vs_malloc(one * VS_WORLD_MAX_IMAGES);
    keyset keys = {0};
    if (!rgb) return vs_error_set(err, VS_ERR_NOMEM, "out of memory for images");
    int n_suites = 0;
    for (int s = 0; s < VS_WORLD_CAPTION; s++) n_suites += !!(suites & VS_WORLD_SUITE_BIT(s));
    int64_t total = (cfg->n_test + cfg->n_train) * n_suites, done = 0, counts[3] = {0, 0, 0}, regenerated = 0;
    vs_progress prog;
    if (cfg->progress) vs_progress_begin(&prog, "data gen", total);
    vs_outfile ocap;
    char cap_path[4096];
    snprintf(cap_path, sizeof(cap_path), "%s/captions.jsonl", dir);
    if ((st = vs_outfile_open(&ocap, cap_path, err)) != VS_OK) {
        vs_free(rgb);
        return st;
    }
    FILE *fcap = ocap.f;
    st = VS_OK;
    for (int split = 0; split < 2 && !st; split++) {
        const char *name = split == 0 ? "test" : "train";
        int64_t n_per = split == 0 ? cfg->n_test : cfg->n_train;
        char jpath[4096];
        snprintf(jpath, sizeof(jpath), "%s/%s.jsonl", dir, name);
        vs_outfile of;
        if ((st = vs_outfile_open(&of, jpath, err)) != VS_OK) break;
        FILE *f = of.f;
        for (int suite = 0; suite < VS_WORLD_CAPTION && !st; suite++) {
            if (!(suites & VS_WORLD_SUITE_BIT(suite))) continue;
            for (int64_t i = 0; i < n_per && !st; i++) {
                vs_world_sample s;
                uint32_t attempt = 0;
                for (;;) {
                    st = vs_world_generate_sample(cfg, name, (vs_world_suite)suite, i, attempt, &s, rgb, err);
                    if (st) break;
                    /* test samples must be unique; train samples must not repeat a test sample */
                    uint64_t key = vs_world_content_key(&s);
                    bool clash = split == 0 ? !keyset_add(&keys, key) : keyset_has(&keys, key);
                    if (!clash) break;
                    vs_world_sample_clear(&s);
                    regenerated++;
                    if (++attempt > 1000) {
                        st = vs_error_set(err, VS_ERR_RANGE, "%s %s: no new content after 1000 attempts", name, vs_world_suite_name((vs_world_suite)suite));
                        break;
                    }
                }
                if (st) break;
                for (int k = 0; k < s.n_images && !st; k++) {
                    snprintf(path, sizeof(path), "%s/%s", dir, s.images[k]);
                    st = vs_png_write(path, rgb + one * (size_t)k, cfg->image_size, cfg->image_size, 3, err);
                }
                if (!st) {
                    size_t n;
                    char *js = vs_world_sample_to_json(&s, &n);
                    st = js ? write_line(f, jpath, js, n, err) : vs_error_set(err, VS_ERR_NOMEM, "out of memory");
                    vs_free(js);
                }
                if (!st && split == 1) {
                    st = write_caption_records(fcap, cap_path, cfg, &s, err);
                    counts[2] += s.n_images;
                }
                vs_world_sample_clear(&s);
                counts[split]++;
                done++;
                if (cfg->progress) vs_progress_update(&prog, done, "%s", name);
            }
        }
        if (st) vs_outfile_abort(&of);
        else st = vs_outfile_commit(&of, err);
    }
    if (st) vs_outfile_abort(&ocap);
    else st = vs_outfile_commit(&ocap, err);
    vs_free(rgb);
    vs_free(keys.k);
    if (cfg->progress) vs_progress_end(&prog, done);
    if (st) return st;
    /* manifest last: a directory with world.json is complete */
    vs_json_writer w;
    vs_json_writer_init(&w);
    vs_json_obj_begin(&w);
    vs_json_kv_str(&w, "format", "vlmspec-world");
    vs_json_kv_int(&w, "version", WORLD_FORMAT_VERSION);
    char seed[32];
    snprintf(seed, sizeof(seed), "%llu", (unsigned long long)cfg->seed);
    vs_json_kv_str(&w, "seed_str", seed);
    vs_json_kv_num(&w, "seed", (double)cfg->seed);
    vs_json_kv_int(&w, "image_size", cfg->image_size);
    if (cfg->max_items) vs_json_kv_int(&w, "max_items", cfg->max_items);
    if (cfg->zoom) vs_json_kv_int(&w, "zoom", 1);
    vs_json_kv_int(&w, "n_train_per_suite", cfg->n_train);
    vs_json_kv_int(&w, "n_test_per_suite", cfg->n_test);
    vs_json_key(&w, "suites");
    vs_json_arr_begin(&w);
    for (int s = 0; s < VS_WORLD_CAPTION; s++)
        if (suites & VS_WORLD_SUITE_BIT(s)) vs_json_str(&w, vs_world_suite_name((vs_world_suite)s));
    vs_json_arr_end(&w);
    vs_json_key(&w, "counts");
    vs_json_obj_begin(&w);
    vs_json_kv_int(&w, "test", counts[0]);
    vs_json_kv_int(&w, "train", counts[1]);
    vs_json_kv_int(&w, "captions", counts[2]);
    vs_json_obj_end(&w);
    vs_json_kv_int(&w, "regenerated_for_uniqueness", regenerated);
    vs_json_obj_end(&w);
    size_t n;
    char *js = vs_json_writer_take(&w, &n);
    vs_json_writer_free(&w);
    snprintf(path, sizeof(path), "%s/world.json", dir);
    vs_outfile o;
    if (!js) return vs_error_set(err, VS_ERR_NOMEM, "out of memory");
    if ((st = vs_outfile_open(&o, path, err)) != VS_OK) {
        vs_free(js);
        return st;
    }
    st = write_line(o.f, path, js, n, err);
    vs_free(js);
    if (st) {
        vs_outfile_abort(&o);
        return st;
    }
    return vs_outfile_commit(&o, err);
}
