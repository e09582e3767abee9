/* world_internal: what the world_*.c files share and nothing else (not part of the public API).
 * Tables (colours, lexicons, the fictional encyclopedia), a string builder with randomised phrasing,
 * and name <-> index helpers for the JSON format. */
#ifndef VS_WORLD_INTERNAL_H
#define VS_WORLD_INTERNAL_H

#include <stdarg.h>

#include "json.h"
#include "world.h"

/* ---- string builder ---- */
typedef struct wsb {
    char *p;
    size_t n, cap;
    bool oom;
} wsb;
void wsb_init(wsb *b);
void wsb_free(wsb *b);
void wsb_putn(wsb *b, const char *s, size_t n);
void wsb_puts(wsb *b, const char *s);
void wsb_printf(wsb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Phrasing with variety: "{a|b|c}" picks one alternative at random (no nesting), then the result is
 * a printf format for the arguments. Every alternative of a choice must use the same conversions.
 * A sentence start ("^" at the start of fmt) capitalises the first letter written. */
void wsb_say(wsb *b, vs_rng *r, const char *fmt, ...);
void wsb_vsay(wsb *b, vs_rng *r, const char *fmt, va_list ap);
char *wsb_take(wsb *b); /* vs_malloc'd string (never NULL unless out of memory) */
/* Number of words (runs of non-space) in s. */
int world_word_count(const char *s);

/* ---- tables ---- */
const uint8_t *world_color_rgb(int color);
const uint8_t *world_bg_rgb(int bg);
const char *world_shape_plural(int shape);
int world_color_warm(int color); /* 1 warm, 0 cool, -1 neither (black) */
const char *world_number_word(int64_t n); /* "zero".."twenty", NULL outside */
const char *world_ordinal(int i);         /* 0 -> "first" .. 5 -> "sixth" */

int world_lexicon_n(void);
const char *world_lexicon_word(int i);
bool world_lexicon_has(const char *w, size_t n); /* exact, case-sensitive */

/* The fictional encyclopedia (fixed, the same for every seed). */
enum { WATTR_CAPITAL = 0, WATTR_RIVER, WATTR_EXPORT, WATTR_ANIMAL, WATTR_FOUNDED, WATTR_POPULATION, WATTR_N };
typedef struct world_entity {
    const char *name, *capital, *river, *export_, *animal;
    int founded;    /* year */
    int population; /* thousands */
} world_entity;
int world_entity_n(void);
const world_entity *world_entity_at(int i);
const char *world_attr_name(int attr);            /* "capital", "river", ... */
bool world_attr_is_number(int attr);
const char *world_entity_word(const world_entity *e, int attr); /* word attrs, NULL for numbers */
int64_t world_entity_number(const world_entity *e, int attr);

/* Arithmetic word problems. */
int world_people_n(void);
const char *world_person(int i, int *she); /* *she: 1 she, 0 he */
int world_items_n(void);
const char *world_item(int i);

/* ---- names <-> indices for the JSON format ---- */
const char *world_query_type_name(vs_world_query_type t);
int world_query_type_from_name(const char *s);
int world_name_index(const char *(*name)(int), int n, const char *s); /* -1 if absent */
const char *world_scene_kind_name(vs_world_scene_kind k);
int world_relation_from_name(const char *s);
const char *world_relation_name(int rel);

/* ---- checker internals used by the generator ---- */
/* The check type a turn's query implies (the same rule the checker applies). */
vs_world_check_type world_check_type(const vs_world_sample *s, int t);
/* Scene validation shared by render and load. */
vs_status world_scene_validate(const vs_world_scene *sc, vs_error *err);

/* Captions: the facts a short caption of this scene states (also used by the caption query). */
int world_caption_objects(const vs_world_scene *sc, int *idx, int max); /* first objects listed */
void world_caption(const vs_world_scene *sc, vs_rng *r, wsb *b);

#endif
