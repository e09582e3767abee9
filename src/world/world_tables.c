/* world_tables: the world's fixed vocabulary (shapes, colours, grid cells, glyph lexicon, the
 * fictional encyclopedia, people and items of word problems), name lookups, and the phrasing string
 * builder. See world_internal.h. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "world_internal.h"

/* ---------------------------------------------------------------------------------------------- */
/* String builder */

void wsb_init(wsb *b) { memset(b, 0, sizeof(*b)); }

void wsb_free(wsb *b) {
    vs_free(b->p);
    memset(b, 0, sizeof(*b));
}

static bool wsb_reserve(wsb *b, size_t extra) {
    if (b->oom) return false;
    if (b->n + extra + 1 <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + extra + 1) cap *= 2;
    char *np = vs_realloc(b->p, cap);
    if (!np) {
        b->oom = true;
        return false;
    }
    b->p = np;
    b->cap = cap;
    return true;
}

void wsb_putn(wsb *b, const char *s, size_t n) {
    if (!wsb_reserve(b, n)) return;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void wsb_puts(wsb *b, const char *s) { wsb_putn(b, s, strlen(s)); }

static void wsb_vprintf(wsb *b, const char *fmt, va_list ap) {
    va_list aq;
    va_copy(aq, ap);
    char small[512];
    int n = vsnprintf(small, sizeof(small), fmt, aq);
    va_end(aq);
    if (n < 0) return;
    if ((size_t)n < sizeof(small)) {
        wsb_putn(b, small, (size_t)n);
        return;
    }
    if (!wsb_reserve(b, (size_t)n)) return;
    vsnprintf(b->p + b->n, (size_t)n + 1, fmt, ap);
    b->n += (size_t)n;
}

void wsb_printf(wsb *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    wsb_vprintf(b, fmt, ap);
    va_end(ap);
}

void wsb_vsay(wsb *b, vs_rng *r, const char *fmt, va_list ap) {
    char expanded[2048];
    size_t o = 0;
    bool cap = false;
    const char *p = fmt;
    if (*p == '^') cap = true, p++;
    while (*p && o + 1 < sizeof(expanded)) {
        if (*p != '{') {
            expanded[o++] = *p++;
            continue;
        }
        /* count alternatives of this choice */
        const char *q = p + 1;
        int n_alt = 1;
        while (*q && *q != '}') {
            if (*q == '|') n_alt++;
            q++;
        }
        if (*q != '}') { /* unterminated: copy literally (programmer error, keep going) */
            expanded[o++] = *p++;
            continue;
        }
        int pick = (int)vs_rng_below(r, (uint32_t)n_alt);
        const char *a = p + 1;
        for (int k = 0; k < pick; k++) a = strchr(a, '|') + 1;
        while (*a != '|' && *a != '}' && o + 1 < sizeof(expanded)) expanded[o++] = *a++;
        p = q + 1;
    }
    expanded[o] = 0;
    size_t start = b->n;
    wsb_vprintf(b, expanded, ap);
    if (cap && !b->oom && b->n > start) b->p[start] = (char)toupper((unsigned char)b->p[start]);
}

void wsb_say(wsb *b, vs_rng *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    wsb_vsay(b, r, fmt, ap);
    va_end(ap);
}

char *wsb_take(wsb *b) {
    char *s = b->oom ? NULL : b->p;
    if (!s && !b->oom) s = vs_strdup("");
    if (b->oom) vs_free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
    b->oom = false;
    return s;
}

int world_word_count(const char *s) {
    int n = 0;
    bool in = false;
    for (; *s; s++) {
        bool sp = isspace((unsigned char)*s);
        if (!sp && !in) n++;
        in = !sp;
    }
    return n;
}

/* ---------------------------------------------------------------------------------------------- */
/* Scene vocabulary */

static const char *const shape_names[VS_WORLD_N_SHAPES] = {"circle", "square",  "triangle", "star",
                                                           "cross",  "diamond", "ring",     "hexagon"};
static const char *const shape_plurals[VS_WORLD_N_SHAPES] = {"circles", "squares",  "triangles", "stars",
                                                             "crosses", "diamonds", "rings",     "hexagons"};
static const char *const color_names[VS_WORLD_N_COLORS] = {"red",    "orange", "yellow", "green", "blue",
                                                           "purple", "pink",   "brown",  "black"};
static const uint8_t color_rgb[VS_WORLD_N_COLORS][3] = {
    {215, 38, 38}, {243, 137, 18}, {232, 200, 20}, {38, 158, 58}, {36, 84, 220},
    {138, 56, 190}, {240, 118, 178}, {128, 78, 36}, {24, 24, 24},
};
static const int color_warm[VS_WORLD_N_COLORS] = {1, 1, 1, 0, 0, 0, 1, 1, -1};
static const char *const bg_names[VS_WORLD_N_BGS] = {"white", "light gray", "beige", "pale blue"};
static const uint8_t bg_rgb[VS_WORLD_N_BGS][3] = {{247, 247, 245}, {204, 204, 204}, {236, 221, 186},
                                                  {202, 222, 244}};
static const char *const cell_names[VS_WORLD_N_CELLS] = {"top left",    "top middle", "top right",
                                                         "middle left", "center",     "middle right",
                                                         "bottom left", "bottom middle", "bottom right"};
static const char *const size_names[2] = {"small", "large"};

const char *vs_world_shape_name(int i) { return i >= 0 && i < VS_WORLD_N_SHAPES ? shape_names[i] : "?"; }
const char *vs_world_color_name(int i) { return i >= 0 && i < VS_WORLD_N_COLORS ? color_names[i] : "?"; }
const char *vs_world_bg_name(int i) { return i >= 0 && i < VS_WORLD_N_BGS ? bg_names[i] : "?"; }
const char *vs_world_cell_name(int i) { return i >= 0 && i < VS_WORLD_N_CELLS ? cell_names[i] : "?"; }
const char *vs_world_size_name(int i) { return i >= 0 && i < 2 ? size_names[i] : "?"; }
const char *world_shape_plural(int i) { return i >= 0 && i < VS_WORLD_N_SHAPES ? shape_plurals[i] : "?"; }
const uint8_t *world_color_rgb(int i) { return color_rgb[i >= 0 && i < VS_WORLD_N_COLORS ? i : 0]; }
const uint8_t *world_bg_rgb(int i) { return bg_rgb[i >= 0 && i < VS_WORLD_N_BGS ? i : 0]; }
int world_color_warm(int i) { return i >= 0 && i < VS_WORLD_N_COLORS ? color_warm[i] : -1; }

static const char *const number_words[21] = {
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen",
    "twenty"};
const char *world_number_word(int64_t n) { return n >= 0 && n <= 20 ? number_words[n] : NULL; }

static const char *const ordinals[6] = {"first", "second", "third", "fourth", "fifth", "sixth"};
const char *world_ordinal(int i) { return i >= 0 && i < 6 ? ordinals[i] : "next"; }

static const char *const suite_names[VS_WORLD_N_SUITES] = {"describe", "vqa",   "pope", "ocr",  "chart",  "diff",
                                                           "story",    "text",  "drill", "look", "caption"};
const char *vs_world_suite_name(vs_world_suite s) {
    return (int)s >= 0 && s < VS_WORLD_N_SUITES ? suite_names[s] : "?";
}
int vs_world_suite_from_name(const char *name) {
    for (int i = 0; i < VS_WORLD_N_SUITES; i++)
        if (strcmp(name, suite_names[i]) == 0) return i;
    return -1;
}

vs_status vs_world_parse_suites(const char *list, uint32_t *mask, vs_error *err) {
    *mask = 0;
    if (!list || strcmp(list, "all") == 0) {
        *mask = VS_WORLD_ALL_SUITES;
        return VS_OK;
    }
    const char *p = list;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        char name[32];
        if (n == 0 || n >= sizeof(name))
            return vs_error_set(err, VS_ERR_INVALID, "suite list '%s': empty or overlong entry", list);
        memcpy(name, p, n);
        name[n] = 0;
        int s = vs_world_suite_from_name(name);
        if (s < 0)
            return vs_error_set(err, VS_ERR_INVALID,
                                "unknown suite '%s' (known: describe, vqa, pope, ocr, chart, diff, story, text, "
                                "drill, caption, all)",
                                name);
        *mask |= VS_WORLD_SUITE_BIT(s);
        p += n;
        if (*p == ',') p++;
    }
    if (!*mask) return vs_error_set(err, VS_ERR_INVALID, "suite list '%s' is empty", list);
    return VS_OK;
}

static const char *const turn_kind_names[VS_WORLD_N_TURN_KINDS] = {"first", "followup", "unrelated", "new_image", "more"};
const char *vs_world_turn_kind_name(vs_world_turn_kind k) {
    return (int)k >= 0 && k < VS_WORLD_N_TURN_KINDS ? turn_kind_names[k] : "?";
}

static const char *const check_names[] = {"yesno", "number", "color", "shape", "size", "position",
                                          "word",  "phrase", "label", "set",   "story", "bars"};
_Static_assert(VS_ARRAY_LEN(check_names) == VS_CHECK_BARS + 1, "check name table out of date");
const char *vs_world_check_name(vs_world_check_type c) {
    return (int)c >= 0 && (size_t)c < VS_ARRAY_LEN(check_names) ? check_names[c] : "?";
}

static const char *const query_names[] = {
    "none",       "describe",  "count",    "color",     "shape",      "size",         "position",
    "relation",   "exists",    "read_all", "read_line", "read_color", "line_count",   "bar_max",
    "bar_min",    "bar_value", "bar_cmp",  "bar_diff",  "diff",       "story",        "arith",
    "fact",       "fact_cmp",  "fact_span", "prev_plus", "prev_times", "prev_letters", "prev_warmth",
    "prev_same",  "diff_count", "caption",  "fact_max",  "bars",       "lines"};
_Static_assert(VS_ARRAY_LEN(query_names) == VS_WORLD_N_QUERY_TYPES, "query name table out of date");
const char *world_query_type_name(vs_world_query_type t) {
    return (int)t >= 0 && (size_t)t < VS_ARRAY_LEN(query_names) ? query_names[t] : "?";
}
const char *vs_world_query_name(vs_world_query_type t) { return world_query_type_name(t); }
int world_query_type_from_name(const char *s) {
    for (size_t i = 0; i < VS_ARRAY_LEN(query_names); i++)
        if (strcmp(s, query_names[i]) == 0) return (int)i;
    return -1;
}

int world_name_index(const char *(*name)(int), int n, const char *s) {
    for (int i = 0; i < n; i++)
        if (strcmp(name(i), s) == 0) return i;
    return -1;
}

static const char *const scene_kind_names[3] = {"shapes", "glyph", "chart"};
const char *world_scene_kind_name(vs_world_scene_kind k) { return (int)k >= 0 && k < 3 ? scene_kind_names[k] : "?"; }

static const char *const relation_names[4] = {"left", "right", "above", "below"};
const char *world_relation_name(int r) { return r >= 0 && r < 4 ? relation_names[r] : "?"; }
int world_relation_from_name(const char *s) {
    for (int i = 0; i < 4; i++)
        if (strcmp(s, relation_names[i]) == 0) return i;
    return -1;
}

/* ---------------------------------------------------------------------------------------------- */
/* Glyph lexicon: uppercase words drawn in glyph scenes. None of them is a word the answer templates
 * use in upper case, so the checker can find them case-sensitively. */
static const char *const lexicon[] = {
    "ACORN", "ANCHOR", "APPLE", "ARROW", "BADGE", "BAKER", "BASIL", "BEACH", "BELL",  "BERRY", "BISON",
    "BOAT",  "BREAD",  "BRICK", "BROOM", "CABIN", "CAMEL", "CANDY", "CANOE", "CEDAR", "CHAIR", "CHALK",
    "CLOCK", "CLOUD",  "COAST", "COMET", "CORAL", "CRANE", "CROWN", "DAISY", "DELTA", "DRUM",  "EAGLE",
    "EMBER", "FABLE",  "FERN",  "FLAME", "FLUTE", "FORGE", "FROST", "GARDEN", "GHOST", "GLOBE", "GRAPE",
    "HARBOR", "HAWK",  "HONEY", "IGLOO", "IVORY", "JELLY", "JEWEL", "KETTLE", "KITE", "KOALA", "LAMP",
    "LEMON", "LILAC",  "LLAMA", "LOTUS", "MANGO", "MAPLE", "MEADOW", "MINT", "MOOSE", "NOODLE", "OASIS",
    "OCEAN", "OLIVE",  "OTTER", "PANDA", "PEARL", "PIANO", "PILOT", "PLANET", "PLUM", "QUILT", "RADIO",
    "RAVEN", "RIVER",  "ROBOT", "SADDLE", "SALAD", "SNAIL", "SPOON", "STONE", "STORM", "SUGAR", "TEAPOT",
    "TIGER", "TOWER",  "TULIP", "VIOLIN", "WAGON", "WHALE", "WILLOW", "YACHT", "ZEBRA", "CACTUS", "FIDDLE",
    "GINGER", "HAMMER", "JUNGLE", "LADDER", "MARBLE", "PEPPER", "ROCKET", "SUMMIT", "TUNNEL", "VELVET",
    "ALMOND", "AMBER", "ANVIL", "ATLAS", "BAMBOO", "BANJO", "BARREL", "BASKET", "BEAVER", "BIRCH", "BISCUIT",
    "BONNET", "BRANCH", "BRUSH", "BUCKET", "BUTTER", "CACAO", "CANYON", "CARGO", "CASTLE", "CELLO", "CHERRY",
    "CIDER", "CINDER", "CLOVER", "COBALT", "COCOA", "COOKIE", "COPPER", "COTTON", "COYOTE", "CRAYON", "CREEK",
    "CRICKET", "DINGO", "DOLPHIN", "DRAGON", "EMBLEM", "FALCON", "FEATHER", "FIGURE", "FJORD", "FOSSIL",
    "GALAXY", "GAZELLE", "GECKO", "GLACIER", "GOBLET", "GRAVEL", "HARVEST", "HAZEL", "HELMET", "HERON",
    "HOLLY", "HOOD", "ISLAND", "JACKAL", "JASPER", "JUNIPER", "KAYAK", "KERNEL", "LAGOON", "LANTERN",
    "LAUREL", "LEDGER", "LENTIL", "LOBSTER", "LOCKET", "MAGNET", "MEDAL", "MELON", "MIRROR", "MITTEN",
    "MOSAIC", "MUFFIN", "NECTAR", "NUTMEG", "ORCHID", "PADDLE", "PARROT", "PEBBLE", "PENGUIN", "PICKLE",
    "PILLOW", "PIRATE", "POCKET", "POPPY", "PRISM", "PUFFIN", "PUMPKIN", "QUARTZ", "RABBIT", "RAISIN",
    "RIBBON", "SAFFRON", "SAILOR", "SALMON", "SANDAL", "SCARF", "SHERPA", "SPIDER", "SPRUCE", "SQUID",
    "STATUE", "SUNSET", "TABLET", "TEMPLE", "THIMBLE", "THUNDER", "TOFFEE", "TORCH", "TROPHY", "TURNIP",
    "TURTLE", "VALLEY", "WAFFLE", "WALNUT", "WIZARD", "WOMBAT", "YOGURT", "ZENITH", "ZIPPER",
};
int world_lexicon_n(void) { return (int)VS_ARRAY_LEN(lexicon); }
const char *world_lexicon_word(int i) { return lexicon[i]; }
bool world_lexicon_has(const char *w, size_t n) {
    for (size_t i = 0; i < VS_ARRAY_LEN(lexicon); i++)
        if (strlen(lexicon[i]) == n && memcmp(lexicon[i], w, n) == 0) return true;
    return false;
}

/* ---------------------------------------------------------------------------------------------- */
/* The fictional encyclopedia: 40 countries. Fixed for every seed (a world has one geography). */
static const world_entity entities[] = {
    {"Griogomark", "Shimor", "Diomar", "glass", "boar", 1648, 7001},
    {"Sistan", "Thoven", "Tranov", "iron", "owl", 1781, 8325},
    {"Chiothioria", "Brefeal", "Dregior", "copper", "swan", 1067, 3788},
    {"Kroumar", "Trirel", "Goul", "amber", "swan", 1137, 7948},
    {"Gostan", "Zuth", "Tebro", "silk", "lynx", 1214, 7077},
    {"Ziria", "Pilar", "Taitra", "amber", "swan", 1385, 1997},
    {"Shugruvia", "Vogrear", "Griper", "wool", "hare", 1646, 6641},
    {"Ririoland", "Krigreal", "Puful", "amber", "badger", 1808, 2336},
    {"Saichouvia", "Fiodrou", "Famen", "cocoa", "lynx", 1734, 4834},
    {"Groniovale", "Tisaik", "Neleal", "iron", "owl", 1164, 8066},
    {"Driovania", "Gresen", "Drethir", "silk", "bear", 1537, 8600},
    {"Biomedor", "Laibeak", "Thulor", "glass", "wolf", 1335, 2414},
    {"Bodor", "Nilsk", "Piokean", "coffee", "crane", 1597, 2905},
    {"Kroshounia", "Griodrel", "Sunel", "pepper", "badger", 1341, 1379},
    {"Doumeavia", "Pukar", "Zumior", "amber", "crane", 1709, 4706},
    {"Drustan", "Veful", "Visin", "coffee", "lynx", 1200, 4791},
    {"Nuthaivale", "Zadiok", "Muner", "cocoa", "heron", 1209, 3149},
    {"Fovale", "Femeal", "Grail", "iron", "stag", 1266, 7163},
    {"Fiostan", "Droun", "Brerin", "cocoa", "beaver", 1530, 4441},
    {"Chiobuvale", "Voduth", "Vovis", "copper", "falcon", 1077, 372},
    {"Trumar", "Rebrais", "Trufen", "cotton", "heron", 1231, 4255},
    {"Krania", "Rudous", "Thitroul", "amber", "heron", 1201, 4872},
    {"Geafiund", "Berov", "Nulra", "cocoa", "fox", 1051, 3728},
    {"Kidor", "Dreapan", "Tolva", "rice", "hare", 1248, 6454},
    {"Gravia", "Zamor", "Noul", "cotton", "hare", 1942, 3116},
    {"Lasostan", "Soun", "Rion", "timber", "stag", 1396, 8150},
    {"Drimuvia", "Dreal", "Parov", "wool", "beaver", 1508, 5243},
    {"Leund", "Gokan", "Chaines", "marble", "crane", 1328, 8976},
    {"Meshunia", "Duchoun", "Vesta", "pepper", "falcon", 1766, 2254},
    {"Bralivia", "Bios", "Troun", "iron", "swan", 1576, 7004},
    {"Troubrivia", "Kros", "Breashas", "cotton", "wolf", 1694, 986},
    {"Thedor", "Butrain", "Deadean", "salt", "hare", 1452, 5840},
    {"Foesh", "Thitouth", "Fotho", "iron", "swan", 1797, 3551},
    {"Bripeavale", "Zioth", "Shonel", "cocoa", "lynx", 1104, 6948},
    {"Vaikreaora", "Deas", "Sheale", "pepper", "bear", 1847, 4340},
    {"Pania", "Groudrum", "Niova", "amber", "lynx", 1665, 8366},
    {"Krugodor", "Branek", "Nachel", "copper", "crane", 1835, 4942},
    {"Sasavale", "Sais", "Rasul", "rice", "seal", 1467, 4271},
    {"Zoora", "Mozion", "Cheabrol", "glass", "wolf", 1746, 5777},
    {"Fiesh", "Sumra", "Ferin", "copper", "falcon", 1331, 8765},
};
int world_entity_n(void) { return (int)VS_ARRAY_LEN(entities); }
const world_entity *world_entity_at(int i) {
    return i >= 0 && i < (int)VS_ARRAY_LEN(entities) ? &entities[i] : NULL;
}
static const char *const attr_names[WATTR_N] = {"capital", "river", "export", "animal", "founded", "population"};
const char *world_attr_name(int a) { return a >= 0 && a < WATTR_N ? attr_names[a] : "?"; }
bool world_attr_is_number(int a) { return a == WATTR_FOUNDED || a == WATTR_POPULATION; }
const char *world_entity_word(const world_entity *e, int a) {
    switch (a) {
    case WATTR_CAPITAL: return e->capital;
    case WATTR_RIVER: return e->river;
    case WATTR_EXPORT: return e->export_;
    case WATTR_ANIMAL: return e->animal;
    default: return NULL;
    }
}
int64_t world_entity_number(const world_entity *e, int a) {
    return a == WATTR_FOUNDED ? e->founded : a == WATTR_POPULATION ? e->population : 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* Word problems */
static const struct {
    const char *name;
    int she;
} people[] = {{"Mira", 1}, {"Tomas", 0}, {"Lena", 1}, {"Oskar", 0}, {"Nadia", 1}, {"Felix", 0},
              {"Ines", 1}, {"Jonas", 0}, {"Clara", 1}, {"Ravi", 0},  {"Sofia", 1}, {"Emil", 0},
              {"Yara", 1}, {"Malik", 0}, {"Hana", 1},  {"Pavel", 0}, {"Amara", 1}, {"Bruno", 0}};
int world_people_n(void) { return (int)VS_ARRAY_LEN(people); }
const char *world_person(int i, int *she) {
    if (she) *she = people[i].she;
    return people[i].name;
}
static const char *const items[] = {"apples",  "marbles", "stickers", "coins",   "books",  "shells",
                                    "pencils", "cookies", "stamps",   "buttons", "cards",  "beads",
                                    "eggs",    "plums",   "candles",  "ribbons", "pebbles", "feathers"};
int world_items_n(void) { return (int)VS_ARRAY_LEN(items); }
const char *world_item(int i) { return items[i]; }
