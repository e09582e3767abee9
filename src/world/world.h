/* world: the generated multimodal world vlmspec trains its model family on and benchmarks drafting in.
 * Owns: scenes (shapes on a 3 x 3 grid, glyph scenes with words/numbers drawn in our own bitmap font,
 * bar charts), their rendering to RGB pixels, the scenario suites that mirror the papers' benchmarks
 * (describe, vqa, pope, ocr, chart, diff, story, text, plus caption-only pretraining pairs) with
 * first and second turns, the prose answer generator, the checker that re-derives the short answer
 * from a sample's scenes and scores any model output, and the dataset directory format (PNG images +
 * JSON Lines, docs/world.md) with its writer (vs_world_generate) and loader (vs_world_load).
 *
 * A sample is one conversation: 0..6 images, 1..2 turns. Each turn carries the user text (TABED
 * appendix I prompt formats; every image appears as the marker "<image>" where it belongs), the
 * reference answer, the short answer and a query: the structured question the checker evaluates on
 * the sample's scenes. The checker never trusts the stored short answer: it recomputes it.
 *
 * Everything here is deterministic for a seed; no globals. Thread safety: a loaded dataset is
 * read-only and may be shared; generation functions use only their arguments. */
#ifndef VS_WORLD_H
#define VS_WORLD_H

#include "common.h"

/* ---------------------------------------------------------------------------------------------- */
/* Vocabulary of the world (indices into fixed tables; names via the *_name functions). */

#define VS_WORLD_MAX_OBJECTS 8 /* shapes per scene (generator uses 1..6) */
#define VS_WORLD_MAX_LINES 3   /* text lines of a glyph scene */
#define VS_WORLD_MAX_BARS 6    /* bars of a chart */
#define VS_WORLD_MAX_IMAGES 6  /* images per sample (story: 5, story + new image never happens) */
#define VS_WORLD_MAX_TURNS 8  /* turns per sample (look: up to 8 questions about one picture; others: 1-2) */
#define VS_WORLD_WORD_MAX 12 /* bytes of a glyph word incl. NUL */

enum { VS_WORLD_N_SHAPES = 8, VS_WORLD_N_COLORS = 9, VS_WORLD_N_BGS = 4, VS_WORLD_N_CELLS = 9 };
const char *vs_world_shape_name(int shape);   /* "circle", "square", ... ; "?" if out of range */
const char *vs_world_color_name(int color);   /* "red", "orange", ... */
const char *vs_world_bg_name(int bg);         /* "white", "light gray", "beige", "pale blue" */
const char *vs_world_cell_name(int cell);     /* "top left" ... "bottom right" (row-major 0..8) */
const char *vs_world_size_name(int size);     /* 0 "small", 1 "large" */

typedef enum vs_world_suite {
    VS_WORLD_DESCRIBE = 0, /* LLaVA-Bench / COCO: detailed description of a scene */
    VS_WORLD_VQA,          /* VQAv2 / GQA: attribute, position, relation, count with reasoning */
    VS_WORLD_POPE,         /* POPE: "Is there a ... in the image?" half no */
    VS_WORLD_OCR,          /* TextVQA / DocVQA: read the glyph text */
    VS_WORLD_CHART,        /* ChartQA: bar charts */
    VS_WORLD_DIFF,         /* Spot-the-Diff / IEdit / MagicBrush: two images */
    VS_WORLD_STORY,        /* PororoSV / VIST: five images, OOD for drafters */
    VS_WORLD_TEXT,         /* NQ / GSM8K: no image */
    VS_WORLD_DRILL,        /* terse arithmetic and fact drills for LM pretraining (opt-in: not generated
                            * unless asked for) */
    VS_WORLD_LOOK,         /* LLaVA-1.5's short-answer VQA: a vqa, pope, ocr or chart question answered by a
                            * word or phrase (opt-in, like drill) */
    VS_WORLD_CAPTION,      /* caption-only pretraining pairs (split "captions"); always last */
    VS_WORLD_N_SUITES
} vs_world_suite;
#define VS_WORLD_SUITE_BIT(s) (1u << (s))
#define VS_WORLD_ALL_SUITES ((1u << VS_WORLD_N_SUITES) - 1u)
/* What `data gen` makes unless told otherwise: the benchmark suites (no drills or short answers; captions
 * follow train). */
#define VS_WORLD_DEFAULT_SUITES                                                                                    \
    (VS_WORLD_ALL_SUITES & ~VS_WORLD_SUITE_BIT(VS_WORLD_CAPTION) & ~VS_WORLD_SUITE_BIT(VS_WORLD_DRILL) &            \
     ~VS_WORLD_SUITE_BIT(VS_WORLD_LOOK))
const char *vs_world_suite_name(vs_world_suite s); /* "describe", "vqa", ... */
int vs_world_suite_from_name(const char *name);     /* -1 if unknown */
/* Parses "vqa,pope,chart" (or "all") into a suite mask; VS_ERR_INVALID naming the bad entry. */
vs_status vs_world_parse_suites(const char *list, uint32_t *mask, vs_error *err);

/* The TABED scenario of a turn. */
typedef enum vs_world_turn_kind {
    VS_TURN_FIRST = 0,     /* the first turn of a conversation */
    VS_TURN_FOLLOWUP,      /* text-only question about the first answer (depends on prior response) */
    VS_TURN_UNRELATED,     /* unrelated text task (arithmetic / encyclopedia) after an image turn */
    VS_TURN_NEW_IMAGE,     /* question about a new image of the same suite */
    VS_TURN_MORE,          /* another question about the picture of the first turn (look's later turns) */
} vs_world_turn_kind;
#define VS_WORLD_N_TURN_KINDS 5
const char *vs_world_turn_kind_name(vs_world_turn_kind k); /* "first", "followup", ... */

/* ---------------------------------------------------------------------------------------------- */
/* Scenes */

typedef enum vs_world_scene_kind {
    VS_SCENE_SHAPES = 0,
    VS_SCENE_GLYPH,
    VS_SCENE_CHART,
} vs_world_scene_kind;

typedef struct vs_world_object {
    int8_t shape, color, size, cell; /* size 0 small / 1 large; cell 0..8 row-major on a 3 x 3 grid */
} vs_world_object;

typedef struct vs_world_line {
    char text[VS_WORLD_WORD_MAX]; /* uppercase word or digits */
    int8_t color;
} vs_world_line;

typedef struct vs_world_bar {
    char label;    /* one uppercase letter (never 'A' or 'I') */
    int8_t value;  /* 1..9 */
    int8_t color;
} vs_world_bar;

/* What one image shows; rendering it with vs_world_render gives the image's exact pixels. */
typedef struct vs_world_scene {
    vs_world_scene_kind kind;
    int8_t bg;           /* background colour index */
    uint32_t noise;      /* seed of the texture noise */
    int n_objects;       /* shapes */
    vs_world_object objects[VS_WORLD_MAX_OBJECTS];
    int n_lines;         /* glyph: lines top to bottom */
    vs_world_line lines[VS_WORLD_MAX_LINES];
    int n_bars;          /* chart: bars left to right */
    vs_world_bar bars[VS_WORLD_MAX_BARS];
    int8_t align;        /* glyph: where the text block sits, a cell of the 3 x 3 grid (4 = centred) */
    int8_t zoom;         /* shapes: 1 = objects drawn 2.5 times larger, still centred in their cells */
} vs_world_scene;

/* Renders a scene into rgb (size * size * 3 bytes, row-major RGB). size >= 32. */
vs_status vs_world_render(const vs_world_scene *sc, int size, uint8_t *rgb, vs_error *err);

/* A random scene of `kind` drawn by the generators the suites use (shapes: 1..6 objects), for
 * pretraining on fresh images. Deterministic in the RNG's state. */
void vs_world_random_scene(vs_rng *r, vs_world_scene_kind kind, vs_world_scene *sc);

/* What one patch of a rendered image shows (-1: nothing of that kind). An element (an object, a
 * character's glyph box, a bar) labels a patch when it covers the most pixels of the patch and at
 * least an eighth of them; the background labels nothing. */
typedef struct vs_world_patch_label {
    int8_t shape; /* shapes: the object's shape */
    int8_t color; /* the object's, the text line's or the bar's colour (chart ink: -1) */
    int8_t size;  /* shapes: 0 small, 1 large */
    int8_t ch;    /* glyph text, chart labels and values: 0..25 'A'..'Z', 26..35 '0'..'9' */
    int8_t value; /* chart: the value 1..9 of the bar whose body covers the patch */
} vs_world_patch_label;
#define VS_WORLD_N_CHARS 36
/* Labels of the (size / patch)^2 patches of the scene rendered at `size` (row-major). */
vs_status vs_world_patch_labels(const vs_world_scene *sc, int size, int patch, vs_world_patch_label *out,
                                vs_error *err);

/* ---------------------------------------------------------------------------------------------- */
/* Queries: the structured question behind a turn; the checker evaluates them on the scenes. */

typedef enum vs_world_query_type {
    VS_Q_NONE = 0,
    VS_Q_DESCRIBE,   /* all objects of scene `image` (SET check) */
    VS_Q_COUNT,      /* objects of `image` matching sel */
    VS_Q_COLOR,      /* attribute of the one object matching sel */
    VS_Q_SHAPE,
    VS_Q_SIZE,
    VS_Q_POSITION,
    VS_Q_RELATION,   /* is (sel) `relation` of (sel2)?  yes/no */
    VS_Q_EXISTS,     /* POPE: is there an object matching sel? yes/no */
    VS_Q_READ_ALL,   /* glyph: every line, top to bottom, joined by spaces */
    VS_Q_READ_LINE,  /* glyph: line `index` */
    VS_Q_READ_COLOR, /* glyph: the line written in colour sel.color */
    VS_Q_LINE_COUNT, /* glyph: how many lines / words */
    VS_Q_BAR_MAX,    /* chart: label of the tallest bar */
    VS_Q_BAR_MIN,
    VS_Q_BAR_VALUE,  /* chart: value of the bar labelled `label` */
    VS_Q_BAR_CMP,    /* chart: which of `label`, `label2` is larger (label) */
    VS_Q_BAR_DIFF,   /* chart: value(label) - value(label2) */
    VS_Q_DIFF,       /* scenes image -> image2: the changed objects (SET) */
    VS_Q_STORY,      /* scenes image..image+4: the hero (sel) and where it ends */
    VS_Q_ARITH,      /* nums[0] ops[0] nums[1] ops[1] ... evaluated left to right */
    VS_Q_FACT,       /* encyclopedia: attribute `attr` of entity `entity` */
    VS_Q_FACT_CMP,   /* encyclopedia: which of entity / entity2 has the larger attr (entity name) */
    VS_Q_FACT_SPAN,  /* encyclopedia: |attr(entity) - attr(entity2)| (a number) */
    /* follow-ups: computed from the answer of turn `prev_turn` */
    VS_Q_PREV_PLUS,    /* previous number + arg */
    VS_Q_PREV_TIMES,   /* previous number * arg */
    VS_Q_PREV_LETTERS, /* number of letters of the previous word answer */
    VS_Q_PREV_WARMTH,  /* "warm" or "cool" for the previous colour answer */
    VS_Q_PREV_SAME,    /* restate the previous short answer (yes/no, label, word ...) */
    VS_Q_DIFF_COUNT,   /* scenes image -> image2: how many changes (recolour counts once) */
    VS_Q_CAPTION,      /* the facts a short caption of `image` states (shapes: SET of the listed
                        * objects; glyph: the words; chart: the number of bars) */
    VS_Q_FACT_MAX,     /* encyclopedia: which of entity..entity4 (3 or 4 of them) has the largest attr */
    VS_Q_BARS,         /* chart: every bar's label and value, left to right (BARS check) */
    VS_Q_LINES,        /* glyph: every line (with its colour), top to bottom: checked as read_all */
} vs_world_query_type;
#define VS_WORLD_N_QUERY_TYPES (VS_Q_LINES + 1)
/* "describe", "count", "color", ..., "fact_max", "bars", "lines" (the names the samples' JSON uses); "?"
 * out of range. */
const char *vs_world_query_name(vs_world_query_type t);

typedef enum vs_world_relation { VS_REL_LEFT = 0, VS_REL_RIGHT, VS_REL_ABOVE, VS_REL_BELOW } vs_world_relation;

/* Object selector: -1 = any. */
typedef struct vs_world_sel {
    int8_t shape, color, size, cell;
} vs_world_sel;
/* Whether object o matches selector s. */
bool vs_world_sel_matches(const vs_world_object *o, vs_world_sel s);

#define VS_WORLD_MAX_OPS 4
typedef struct vs_world_query {
    vs_world_query_type type;
    int image, image2;         /* scene indices within the sample */
    vs_world_sel sel, sel2;
    int relation;              /* vs_world_relation */
    int index;                 /* glyph line */
    char label, label2;        /* chart bar labels */
    int prev_turn;             /* follow-ups */
    int64_t arg;               /* follow-ups */
    int n_ops;                 /* arithmetic: n_ops operators, n_ops + 1 numbers */
    char ops[VS_WORLD_MAX_OPS];           /* '+', '-', '*', '/' (exact) */
    int64_t nums[VS_WORLD_MAX_OPS + 1];
    int entity, entity2, attr; /* encyclopedia */
    int entity3, entity4;      /* encyclopedia, VS_Q_FACT_MAX (-1 = unused) */
} vs_world_query;

/* Where the answer to query q lies in its scene sc rendered at `size` with patches of `patch` pixels
 * (`train target --ground`): bit p of *mask (row-major patch p, (size / patch)^2 <= 64) is set when
 * patch p is labelled (vs_world_patch_labels' rule) by an element the query names: the objects its
 * selectors match (colour, shape, size, position, count, exists, relation), the line it reads
 * (read_line, read_color), or the bars it names or asks for (bar_value, bar_cmp, bar_diff, bar_max,
 * bar_min: body, label and value). Returns false (mask 0) for other queries, for a query that names
 * nothing in the scene (an absent object, a tie) and when no patch is labelled by what it names. */
bool vs_world_ground_mask(const vs_world_scene *sc, const vs_world_query *q, int size, int patch, uint64_t *mask);
/* The same for n (1 .. VS_WORLD_MAX_TURNS) queries on one scene, drawing its element map once; true when
 * any of masks[0 .. n) is set. */
bool vs_world_ground_masks(const vs_world_scene *sc, const vs_world_query *const *q, int n, int size, int patch,
                           uint64_t *masks);

/* The patches each character of a glyph scene's lines covers, at `size` with patches of `patch`
 * pixels: bit p of masks[16 * l + k] (VS_WORLD_MAX_LINES * 16 of them) is set when character k of
 * line l covers at least an eighth of patch p (a patch may belong to two characters; a character may
 * cover none). False (every mask 0) for other scenes, an invalid scene or size, or when no character
 * covers a patch. `train target --ground-rows chars` grounds the rows that write a line on these. */
bool vs_world_glyph_masks(const vs_world_scene *sc, int size, int patch, uint64_t *masks);

/* How the checker reads an answer out of free text (docs/world.md has the exact rules). */
typedef enum vs_world_check_type {
    VS_CHECK_YESNO = 0,
    VS_CHECK_NUMBER,  /* a count or a value: digits or number words */
    VS_CHECK_COLOR,
    VS_CHECK_SHAPE,
    VS_CHECK_SIZE,
    VS_CHECK_POSITION,
    VS_CHECK_WORD,    /* a word of a closed set (glyph words, encyclopedia names, warm/cool) */
    VS_CHECK_PHRASE,  /* several glyph words in order */
    VS_CHECK_LABEL,   /* a chart bar label */
    VS_CHECK_SET,     /* the set of "<colour> <shape>" pairs mentioned */
    VS_CHECK_STORY,   /* hero mentioned and its final position */
    VS_CHECK_BARS,    /* every bar as "<label> <value>", left to right */
} vs_world_check_type;
const char *vs_world_check_name(vs_world_check_type c);

/* ---------------------------------------------------------------------------------------------- */
/* Samples */

typedef struct vs_world_turn {
    vs_world_turn_kind kind;
    int first_image, n_images;  /* images this turn's user text introduces, in "<image>" order */
    char *user;                 /* user message (no "USER:" prefix); "<image>" marks each image */
    char *assistant;            /* reference answer: 40-150 tokens of explanatory prose */
    char *answer;               /* the short answer ("red", "3", "yes", "LAMP", "K", set: pairs) */
    vs_world_check_type check;
    vs_world_query query;
} vs_world_turn;

typedef struct vs_world_sample {
    char *id;                   /* unique in the dataset, e.g. "test-vqa-00042" */
    vs_world_suite suite;
    int n_images;
    char *images[VS_WORLD_MAX_IMAGES];   /* PNG paths; after vs_world_load: joined with the dataset dir */
    char *captions[VS_WORLD_MAX_IMAGES]; /* a short caption per image */
    vs_world_scene scenes[VS_WORLD_MAX_IMAGES];
    int n_turns;
    vs_world_turn turns[VS_WORLD_MAX_TURNS];
} vs_world_sample;

/* Frees what a sample owns (strings), not the struct itself. */
void vs_world_sample_clear(vs_world_sample *s);

/* The conversation up to turn t in the vicuna / TABED form, ending in "ASSISTANT:" (vs_malloc'd):
 *   "USER: {user 0} ASSISTANT: {assistant 0}</s>USER: {user 1} ASSISTANT:"
 * No leading "<s>" (the tokenizer adds BOS). with_answer appends turn t's assistant text too. */
char *vs_world_prompt(const vs_world_sample *s, int t, bool with_answer);
/* The same with every picture in words: the k-th "<image>" marker replaced by "Picture: " and scene k
 * written out (vs_world_scene_words), so an LM alone can be trained and tested on the picture's facts. */
char *vs_world_prompt_words(const vs_world_sample *s, int t, bool with_answer);
/* A scene written out (vs_malloc'd; NULL when out of memory): one entry per object in cell order, line
 * top to bottom or bar left to right, then the background: "top left: large red ring; center: small
 * blue star on a white background.", "\"OCEAN\" in red; \"121\" in blue, at the top left on a beige
 * background.", "C 3 blue; U 9 pink on a white background." (look's transcript answers). */
char *vs_world_scene_words(const vs_world_scene *sc);

/* ---------------------------------------------------------------------------------------------- */
/* Checker */

typedef struct vs_world_verdict {
    bool correct;
    char expected[128]; /* the short answer re-derived from the scenes */
    char found[128];    /* what the checker read in the text ("" when nothing answer-like) */
} vs_world_verdict;

/* Re-derives the short answer of turn t from the sample's scenes and queries (never from the stored
 * answer). VS_ERR_INVALID if the query does not fit the scenes (bad indices, ambiguous selector). */
vs_status vs_world_expected(const vs_world_sample *s, int t, char *buf, size_t cap, vs_error *err);
/* Scores any text (a model's answer) for turn t. Returns v->correct (false also when the query
 * cannot be evaluated; then v->expected is empty). v may be NULL. */
bool vs_world_check(const vs_world_sample *s, int t, const char *text, vs_world_verdict *v);

/* ---------------------------------------------------------------------------------------------- */
/* Generation */

typedef struct vs_world_config {
    uint64_t seed;
    int64_t n_train;   /* training samples per suite (default 1000) */
    int64_t n_test;    /* test samples per suite (default 100) */
    int image_size;    /* pixels per side (default 64, >= 32) */
    int max_items;     /* 0: the generators' ranges; N >= 1: simpler pictures for a curriculum: at most N objects
                        * per shapes scene (two where a question needs two), N lines per glyph scene, max(3, N)
                        * bars per chart. diff and story keep their ranges (their scenes gain objects). */
    bool zoom;         /* the shapes scenes of one-picture suites draw their objects 2.5x larger (scene.zoom) */
    uint32_t suites;   /* mask of VS_WORLD_SUITE_BIT (CAPTION ignored: captions always follow train) */
    int progress;      /* 1: progress lines on stderr */
} vs_world_config;
void vs_world_config_default(vs_world_config *c);

/* Generates one sample in memory (no files): sample `index` of `suite` in split "train" or "test".
 * Deterministic in (seed, split, suite, index, attempt). Image paths are set to the names the
 * dataset writer uses (relative). rgb, if not NULL, receives the rendered images
 * (n_images * size * size * 3 bytes, caller-allocated for VS_WORLD_MAX_IMAGES). */
vs_status vs_world_generate_sample(const vs_world_config *cfg, const char *split, vs_world_suite suite,
                                   int64_t index, uint32_t attempt, vs_world_sample *out, uint8_t *rgb,
                                   vs_error *err);

/* A 64-bit key of a sample's content (suite, scenes without noise, user texts): equal content gives
 * equal keys. Used to keep train and test apart. */
uint64_t vs_world_content_key(const vs_world_sample *s);

/* Writes the dataset directory (created if missing): world.json, train.jsonl, test.jsonl,
 * captions.jsonl and img/{train,test}/ *.png. Test samples are generated first; a train sample whose
 * content key equals a test sample's is regenerated. */
vs_status vs_world_generate(const vs_world_config *cfg, const char *dir, vs_error *err);

/* ---------------------------------------------------------------------------------------------- */
/* Loading (trainer, `vlmspec eval`, the benchmark harness) */

typedef struct vs_world_dataset {
    char *dir;                 /* the dataset directory */
    char *split;               /* "train", "test" or "captions" */
    uint64_t seed;             /* from world.json */
    int image_size;
    int64_t n;                 /* samples */
    vs_world_sample *samples;  /* [n], in file order */
} vs_world_dataset;

/* Loads DIR/<split>.jsonl keeping the suites in suite_mask (VS_WORLD_ALL_SUITES for all). Image
 * paths come back joined with dir. Every record is validated (types, ranges, image counts match the
 * "<image>" markers); a bad record gives VS_ERR_FORMAT naming the file and line. */
vs_world_dataset *vs_world_load(const char *dir, const char *split, uint32_t suite_mask, vs_error *err);
void vs_world_dataset_free(vs_world_dataset *d);

/* Parses one JSON Lines record (the format vs_world_generate writes) into out; image paths are joined
 * with dir when dir is not NULL. `what` names the record in errors. */
vs_status vs_world_sample_from_json(const char *line, size_t len, const char *dir, const char *what,
                                    vs_world_sample *out, vs_error *err);
/* Serialises a sample as one JSON line (no newline), vs_malloc'd; *len gets its length. */
char *vs_world_sample_to_json(const vs_world_sample *s, size_t *len);

#endif
