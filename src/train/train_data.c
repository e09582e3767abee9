/* train_data: world samples -> training batches. See train_data.h. Sections: encoding one
 * conversation, the reader (sequence table, epochs, batches). */
#include "train_data.h"

#include <stdlib.h>
#include <string.h>

#include "mmprompt.h"

/* ---------------------------------------------------------------------------------------------- */
/* Encoding */

static char *conversation(const vs_world_sample *s, bool words) {
    char *p = (words ? vs_world_prompt_words : vs_world_prompt)(s, s->n_turns - 1, true);
    if (!p) return NULL;
    size_t n = strlen(p);
    char *out = vs_malloc(n + 5);
    if (out) {
        memcpy(out, p, n);
        memcpy(out + n, "</s>", 5);
    }
    vs_free(p);
    return out;
}

char *vs_train_conversation(const vs_world_sample *s) { return conversation(s, false); }

/* Lays text out as inference does (mmprompt), every image a run of image_rows rows of width 1 over
 * the shared dummy buffer (the rows' contents are never read; image_first tells the images apart). */
static vs_status layout(const char *text, const vs_tokenizer *tok, int image_rows, const float *dummy,
                        vs_mm_prompt *p, vs_error *err) {
    vs_mm_image imgs[VS_WORLD_MAX_IMAGES];
    size_t len = strlen(text);
    int32_t n = vs_mm_count_markers(text, len, NULL);
    if (n > VS_WORLD_MAX_IMAGES)
        return vs_error_set(err, VS_ERR_INVALID, "%d image markers (at most %d)", n, VS_WORLD_MAX_IMAGES);
    for (int32_t i = 0; i < n; i++) imgs[i] = (vs_mm_image){dummy, image_rows, 1};
    return vs_mm_prompt_build(p, tok, text, len, imgs, n, NULL, err);
}

/* True when prompt q's rows are the first rows of p (same tokens, same images at the same rows). */
static bool is_prefix(const vs_mm_prompt *q, const vs_mm_prompt *p) {
    if (q->n_rows > p->n_rows || q->n_images > p->n_images) return false;
    for (int64_t r = 0; r < q->n_rows; r++)
        if (q->tokens[r] != p->tokens[r]) return false;
    for (int32_t i = 0; i < q->n_images; i++)
        if (q->image_first[i] != p->image_first[i]) return false;
    return true;
}

void vs_train_example_free(vs_train_example *ex) {
    if (!ex) return;
    vs_free(ex->tokens), vs_free(ex->img_row), vs_free(ex->answer);
    memset(ex, 0, sizeof(*ex));
}

/* Rows of the text after appending "</s>" to vs_world_prompt(s, t, with_answer) when close. */
static vs_status turn_prompt(const vs_world_sample *s, int t, bool with_answer, bool words, const vs_tokenizer *tok,
                             int image_rows, const float *dummy, vs_mm_prompt *q, vs_error *err) {
    char *txt = (words ? vs_world_prompt_words : vs_world_prompt)(s, t, with_answer);
    if (!txt) return vs_error_set(err, VS_ERR_NOMEM, "out of memory");
    vs_status st;
    if (with_answer) {
        size_t n = strlen(txt);
        char *c = vs_malloc(n + 5);
        if (!c) {
            vs_free(txt);
            return vs_error_set(err, VS_ERR_NOMEM, "out of memory");
        }
        memcpy(c, txt, n);
        memcpy(c + n, "</s>", 5);
        vs_free(txt);
        txt = c;
    }
    st = layout(txt, tok, image_rows, dummy, q, err);
    vs_free(txt);
    return st;
}

static vs_status encode(const vs_world_sample *s, const vs_tokenizer *tok, int image_rows, bool words,
                        vs_train_example *ex, vs_error *err) {
    memset(ex, 0, sizeof(*ex));
    const char *id = s && s->id ? s->id : "?";
    if (!s || !tok || image_rows < 1 || s->n_turns < 1 || s->n_turns > VS_WORLD_MAX_TURNS)
        return vs_error_set(err, VS_ERR_INVALID, "encode %s: bad arguments", id);
    const int32_t eos = vs_tokenizer_eos(tok);
    if (eos < 0) return vs_error_set(err, VS_ERR_INVALID, "encode %s: the tokenizer has no EOS token", id);
    float *dummy = vs_calloc((size_t)image_rows, sizeof(float));
    char *conv = conversation(s, words);
    vs_mm_prompt full = {0}, q = {0};
    vs_status st = VS_OK;
    if (!dummy || !conv) st = vs_error_set(err, VS_ERR_NOMEM, "encode %s: out of memory", id);
    if (st == VS_OK) st = layout(conv, tok, image_rows, dummy, &full, err);
    if (st == VS_OK && full.n_images != (words ? 0 : s->n_images))
        st = vs_error_set(err, VS_ERR_INVALID, "encode %s: %d image markers but %d images%s", id, full.n_images,
                          s->n_images, words ? " (in words: a user text holds a marker of its own)" : "");
    if (st == VS_OK && full.n_rows > INT32_MAX / 2)
        st = vs_error_set(err, VS_ERR_RANGE, "encode %s: %lld rows", id, (long long)full.n_rows);
    if (st == VS_OK) {
        ex->n_rows = (int32_t)full.n_rows;
        ex->n_images = full.n_images;
        ex->n_turns = s->n_turns;
        ex->tokens = vs_malloc(sizeof(int32_t) * (size_t)full.n_rows);
        ex->img_row = vs_malloc(sizeof(int32_t) * (size_t)full.n_rows);
        ex->answer = vs_calloc((size_t)full.n_rows, 1);
        if (!ex->tokens || !ex->img_row || !ex->answer)
            st = vs_error_set(err, VS_ERR_NOMEM, "encode %s: out of memory", id);
    }
    if (st == VS_OK) {
        for (int64_t r = 0; r < full.n_rows; r++) ex->tokens[r] = full.tokens[r], ex->img_row[r] = -1;
        for (int32_t i = 0; i < full.n_images; i++)
            for (int j = 0; j < image_rows; j++) ex->img_row[full.image_first[i] + j] = i * image_rows + j;
    }
    /* answer rows of every turn: from the end of its prompt to its closing </s> */
    int32_t prev_end = 0;
    for (int t = 0; st == VS_OK && t < s->n_turns; t++) {
        for (int with_answer = 0; st == VS_OK && with_answer < 2; with_answer++) {
            st = turn_prompt(s, t, with_answer, words, tok, image_rows, dummy, &q, err);
            if (st != VS_OK) break;
            if (!is_prefix(&q, &full))
                st = vs_error_set(err, VS_ERR_INVALID,
                                  "encode %s: turn %d's %s does not lay out as a prefix of the conversation "
                                  "(training and inference would see different rows)",
                                  id, t, with_answer ? "answer" : "prompt");
            else if (!with_answer)
                ex->turn_start[t] = (int32_t)q.n_rows;
            else
                ex->turn_end[t] = (int32_t)q.n_rows;
            vs_mm_prompt_free(&q);
        }
        if (st != VS_OK) break;
        int32_t a = ex->turn_start[t], b = ex->turn_end[t];
        if (a <= prev_end || b <= a || ex->tokens[b - 1] != eos) {
            st = vs_error_set(err, VS_ERR_INVALID, "encode %s: turn %d's answer rows [%d, %d) are malformed",
                              id, t, a, b);
            break;
        }
        for (int32_t r = a; r < b; r++) {
            if (ex->img_row[r] >= 0) {
                st = vs_error_set(err, VS_ERR_INVALID, "encode %s: turn %d's answer holds image rows", id, t);
                break;
            }
            ex->answer[r] = 1;
        }
        ex->n_answer += b - a;
        prev_end = b;
    }
    if (st == VS_OK && prev_end != ex->n_rows)
        st = vs_error_set(err, VS_ERR_INVALID,
                          "encode %s: the conversation ends at row %d, its last answer at %d", id, ex->n_rows,
                          prev_end);
    vs_mm_prompt_free(&full);
    vs_free(conv);
    vs_free(dummy);
    if (st != VS_OK) vs_train_example_free(ex);
    return st;
}

vs_status vs_train_encode(const vs_world_sample *s, const vs_tokenizer *tok, int image_rows,
                          vs_train_example *ex, vs_error *err) {
    return encode(s, tok, image_rows, false, ex, err);
}

vs_status vs_train_encode_words(const vs_world_sample *s, const vs_tokenizer *tok, vs_train_example *ex,
                                vs_error *err) {
    return encode(s, tok, 1, true, ex, err);
}

vs_status vs_train_encode_text(const char *text, const vs_tokenizer *tok, vs_train_example *ex,
                               vs_error *err) {
    memset(ex, 0, sizeof(*ex));
    if (!text || !tok) return vs_error_set(err, VS_ERR_INVALID, "encode text: bad arguments");
    const int32_t bos = vs_tokenizer_bos(tok), eos = vs_tokenizer_eos(tok);
    if (bos < 0 || eos < 0)
        return vs_error_set(err, VS_ERR_INVALID, "encode text: the tokenizer has no BOS or no EOS token");
    int32_t *ids = NULL;
    int64_t n = 0;
    vs_status st = vs_tokenize_alloc(tok, text, strlen(text), false, true, &ids, &n, err);
    if (st != VS_OK) return st;
    if (n < 1 || n > INT32_MAX / 4) {
        vs_free(ids);
        return vs_error_set(err, VS_ERR_INVALID, "encode text: %lld tokens in \"%.40s\"", (long long)n, text);
    }
    const int32_t rows = (int32_t)n + 2;
    ex->tokens = vs_malloc(sizeof(int32_t) * (size_t)rows);
    ex->img_row = vs_malloc(sizeof(int32_t) * (size_t)rows);
    ex->answer = vs_malloc((size_t)rows);
    if (!ex->tokens || !ex->img_row || !ex->answer) {
        vs_free(ids);
        vs_train_example_free(ex);
        return vs_error_set(err, VS_ERR_NOMEM, "encode text: out of memory");
    }
    ex->tokens[0] = bos;
    memcpy(ex->tokens + 1, ids, sizeof(int32_t) * (size_t)n);
    ex->tokens[rows - 1] = eos;
    for (int32_t r = 0; r < rows; r++) ex->img_row[r] = -1, ex->answer[r] = r > 0;
    vs_free(ids);
    ex->n_rows = rows;
    ex->n_answer = rows - 1;
    ex->n_turns = 1;
    ex->turn_start[0] = 1;
    ex->turn_end[0] = rows;
    return VS_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* The reader */

typedef struct seq_entry {
    const vs_world_sample *sample;
    int64_t off; /* into the row arrays */
    int32_t n_rows, n_images, n_answer;
    int32_t n_prompt; /* text rows after BOS that are not answers (weighted by prompt_loss) */
    int64_t g_off;    /* its grounds: grounds[g_off .. g_off + n_g), sequence-local rows */
    int32_t n_g;
} seq_entry;

struct vs_train_data {
    vs_train_data_opts o;
    vs_train_data_stats stats;
    int64_t n_seq;
    seq_entry *seqs;  /* (n_seq) */
    int32_t *tokens;  /* (stats.rows) */
    int32_t *img_row; /* (stats.rows) sample-local image * NP + patch, -1 on text */
    uint8_t *answer;  /* (stats.rows) */
    /* epoch */
    vs_train_data_state st;
    vs_rng next_rng;  /* the RNG after drawing this epoch's order */
    int64_t *order;   /* (n_seq) sequence indices in batch order */
    int64_t *b_first; /* (n_batches) batch k = order[b_first[k] .. b_first[k] + b_len[k]) */
    int32_t *b_len;
    int64_t n_batches;
    /* batch buffers: max_B x max_T rows, max_images images */
    int max_B, max_T, max_images;
    int32_t max_g; /* most grounds of one sequence */
    int32_t *bt_tokens, *bt_img_row, *bt_targets;
    float *bt_mask, *pixels;
    /* attention grounds (opts.ground) */
    vs_train_ground *grounds, *bt_ground;
    int64_t g_cap;
    const vs_tokenizer *tok; /* for opts.ground_chars (vs_train_data_new only) */
};

void vs_train_data_free(vs_train_data *d) {
    if (!d) return;
    vs_free(d->seqs), vs_free(d->tokens), vs_free(d->img_row), vs_free(d->answer);
    vs_free(d->order), vs_free(d->b_first), vs_free(d->b_len);
    vs_free(d->bt_tokens), vs_free(d->bt_img_row), vs_free(d->bt_targets), vs_free(d->bt_mask);
    vs_free(d->pixels);
    vs_free(d->grounds), vs_free(d->bt_ground);
    vs_free(d);
}

const vs_train_data_stats *vs_train_data_get_stats(const vs_train_data *d) { return &d->stats; }

void vs_train_data_capacity(const vs_train_data *d, int *max_B, int *max_T, int *max_images) {
    if (max_B) *max_B = d->max_B;
    if (max_T) *max_T = d->max_T;
    if (max_images) *max_images = d->max_images;
}

int64_t vs_train_data_n_seqs(const vs_train_data *d) { return d->n_seq; }

const vs_world_sample *vs_train_data_sample(const vs_train_data *d, int64_t i) {
    return i >= 0 && i < d->n_seq ? d->seqs[i].sample : NULL;
}

/* Appends ex to the row arrays (grown geometrically). */
static bool push_rows(vs_train_data *d, int64_t *cap, const vs_train_example *ex) {
    int64_t need = d->stats.rows + ex->n_rows;
    if (need > *cap) {
        int64_t nc = VS_MAX(need, *cap * 2);
        int32_t *t = vs_realloc(d->tokens, sizeof(int32_t) * (size_t)nc);
        if (t) d->tokens = t;
        int32_t *g = vs_realloc(d->img_row, sizeof(int32_t) * (size_t)nc);
        if (g) d->img_row = g;
        uint8_t *a = vs_realloc(d->answer, (size_t)nc);
        if (a) d->answer = a;
        if (!t || !g || !a) return false;
        *cap = nc;
    }
    memcpy(d->tokens + d->stats.rows, ex->tokens, sizeof(int32_t) * (size_t)ex->n_rows);
    memcpy(d->img_row + d->stats.rows, ex->img_row, sizeof(int32_t) * (size_t)ex->n_rows);
    memcpy(d->answer + d->stats.rows, ex->answer, (size_t)ex->n_rows);
    return true;
}

/* Sorting a chunk by length; ties keep the shuffled order (pos), so the result is deterministic. */
typedef struct sort_key {
    int32_t n_rows;
    int64_t pos, seq;
} sort_key;

static int cmp_key(const void *a, const void *b) {
    const sort_key *x = a, *y = b;
    if (x->n_rows != y->n_rows) return x->n_rows < y->n_rows ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* Draws the order of the current epoch from a copy of st.rng. */
static vs_status build_epoch(vs_train_data *d, vs_error *err) {
    vs_rng r = d->st.rng;
    const int64_t n = d->n_seq, B = d->o.batch;
    for (int64_t i = 0; i < n; i++) d->order[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)vs_rng_below(&r, (uint32_t)(i + 1));
        int64_t t = d->order[i];
        d->order[i] = d->order[j], d->order[j] = t;
    }
    const int64_t chunk = (d->o.bucket > 1 ? d->o.bucket : 1) * B;
    sort_key *keys = vs_malloc(sizeof(sort_key) * (size_t)VS_MIN(chunk, n));
    int64_t *first = vs_malloc(sizeof(int64_t) * (size_t)d->n_batches);
    int32_t *len = vs_malloc(sizeof(int32_t) * (size_t)d->n_batches);
    int64_t *perm = vs_malloc(sizeof(int64_t) * (size_t)d->n_batches);
    if (!keys || !first || !len || !perm) {
        vs_free(keys), vs_free(first), vs_free(len), vs_free(perm);
        return vs_error_set(err, VS_ERR_NOMEM, "training data: out of memory");
    }
    int64_t nb = 0;
    for (int64_t c0 = 0; c0 < n; c0 += chunk) {
        int64_t c1 = VS_MIN(n, c0 + chunk);
        if (d->o.bucket > 1) {
            for (int64_t i = c0; i < c1; i++)
                keys[i - c0] = (sort_key){d->seqs[d->order[i]].n_rows, i, d->order[i]};
            qsort(keys, (size_t)(c1 - c0), sizeof(sort_key), cmp_key);
            for (int64_t i = c0; i < c1; i++) d->order[i] = keys[i - c0].seq;
        }
        for (int64_t b0 = c0; b0 < c1; b0 += B) first[nb] = b0, len[nb] = (int32_t)VS_MIN(B, c1 - b0), nb++;
    }
    /* the chunks cut batches of B except at the end of the data: the count is fixed */
    for (int64_t i = 0; i < nb; i++) perm[i] = i;
    for (int64_t i = nb - 1; i > 0; i--) {
        int64_t j = (int64_t)vs_rng_below(&r, (uint32_t)(i + 1));
        int64_t t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    for (int64_t i = 0; i < nb; i++) d->b_first[i] = first[perm[i]], d->b_len[i] = len[perm[i]];
    d->next_rng = r;
    vs_free(keys), vs_free(first), vs_free(len), vs_free(perm);
    return VS_OK;
}

/* Building a reader: begin, add every sequence, finish. */
static vs_train_data *reader_begin(const vs_train_data_opts *opts, int64_t total, vs_error *err) {
    if (!opts || opts->seq_len < 2 || opts->batch < 1 || opts->image_rows < 1 || opts->preproc.size < 1 ||
        !(opts->prompt_loss >= 0.0f && opts->prompt_loss <= 1e6f) ||
        !(opts->words_frac >= 0.0f && opts->words_frac <= 1.0f)) {
        vs_error_set(err, VS_ERR_INVALID,
                     "training data: bad options (seq_len >= 2, batch >= 1, image rows >= 1, "
                     "0 <= prompt_loss <= 1e6, 0 <= words_frac <= 1)");
        return NULL;
    }
    vs_train_data *d = vs_calloc(1, sizeof(*d));
    if (d) d->seqs = vs_calloc((size_t)VS_MAX(total, 1), sizeof(seq_entry));
    if (!d || !d->seqs) {
        vs_error_set(err, VS_ERR_NOMEM, "training data: out of memory");
        vs_train_data_free(d);
        return NULL;
    }
    d->o = *opts;
    return d;
}

static bool push_ground(vs_train_data *d, seq_entry *e, int32_t q, int32_t k0, uint64_t mask) {
    if (d->stats.grounds + 1 > d->g_cap) {
        int64_t nc = VS_MAX(1024, d->g_cap * 2);
        vs_train_ground *g = vs_realloc(d->grounds, sizeof(*g) * (size_t)nc);
        if (!g) return false;
        d->grounds = g, d->g_cap = nc;
    }
    d->grounds[d->stats.grounds++] = (vs_train_ground){0, q, k0, mask};
    e->n_g++;
    return true;
}

static bool is_alnum(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

/* opts.ground_chars: the grounds of reading turn t (query q on glyph scene sc, its first image row k0)
 * whose answer writes the lines it reads; every other answer row grounded on `whole` when set.
 * Returns false only when out of memory; a turn whose answer does not lay out as expected gets the
 * answer-row grounds alone. */
static bool add_char_grounds(vs_train_data *d, const vs_train_example *ex, const vs_world_sample *s, int t,
                             const vs_world_scene *sc, int G, int32_t k0, uint64_t whole, seq_entry *e) {
    const vs_world_query *q = &s->turns[t].query;
    const char *ans = s->turns[t].assistant;
    const int32_t a = ex->turn_start[t], z = ex->turn_end[t] - 1; /* answer tokens a .. z-1, </s> at z */
    uint64_t glyph[VS_WORLD_MAX_LINES * 16];
    const int S = d->o.preproc.size;
    /* where each line read starts in the answer (a whole word: no letter or digit beside it); -1 none */
    int at[VS_WORLD_MAX_LINES], from = 0, n_at = 0;
    for (int l = 0; l < sc->n_lines; l++) {
        at[l] = -1;
        bool read = q->type == VS_Q_READ_ALL || (q->type == VS_Q_READ_LINE ? l == q->index
                                                                           : sc->lines[l].color == q->sel.color);
        const char *txt = sc->lines[l].text;
        size_t n = strlen(txt);
        for (const char *p = read && n ? strstr(ans + from, txt) : NULL; p; p = strstr(p + 1, txt))
            if ((p == ans || !is_alnum(p[-1])) && !is_alnum(p[n])) {
                at[l] = (int)(p - ans), from = at[l] + (int)n, n_at++;
                break;
            }
    }
    /* each answer token's span [b0, b1) in ans: the decoded answer is " " + ans */
    int32_t span[2 * 256];
    bool ok = n_at > 0 && z - a <= 256 && vs_world_glyph_masks(sc, S, S / G, glyph);
    vs_detok *dt = ok ? vs_detok_new(d->tok, 0, NULL) : NULL;
    int len = -1;
    for (int32_t j = a; ok && j < z; j++) {
        size_t n = 0;
        const char *txt = vs_detok_feed(dt, ex->tokens + j, 1, &n, NULL);
        ok = txt && (j > a || (n > 0 && txt[0] == ' '));
        span[2 * (j - a)] = VS_MAX(0, len), len += (int)n, span[2 * (j - a) + 1] = VS_MAX(0, len);
    }
    vs_detok_free(dt);
    ok = ok && len == (int)strlen(ans);
    for (int32_t j = a; j <= z; j++) {
        uint64_t m = 0;
        for (int l = 0; ok && j < z && l < sc->n_lines; l++) {
            if (at[l] < 0) continue;
            int n = (int)strlen(sc->lines[l].text);
            for (int c = VS_MAX(span[2 * (j - a)], at[l]); c < VS_MIN(span[2 * (j - a) + 1], at[l] + n); c++)
                m |= glyph[16 * l + (c - at[l])];
        }
        if (!m) m = whole;
        if (m && (j == a || ex->answer[j]) && !push_ground(d, e, j - 1, k0, m)) return false;
    }
    return true;
}

/* Appends the attention grounds of sequence ex (sample s) to d->grounds: see opts.ground. */
static bool add_grounds(vs_train_data *d, const vs_train_example *ex, const vs_world_sample *s, seq_entry *e) {
    e->g_off = d->stats.grounds, e->n_g = 0;
    const int NR = d->o.image_rows, S = d->o.preproc.size;
    int G = 1;
    while ((G + 1) * (G + 1) <= NR) G++;
    if (!d->o.ground || !s || ex->n_images < 1 || G * G != NR || NR > 64 || S % G) return true;
    for (int img = 0; img < ex->n_images && img < s->n_images; img++) {
        /* the turns about picture img, their masks from one drawing of its scene */
        const vs_world_query *q[VS_WORLD_MAX_TURNS];
        int turn[VS_WORLD_MAX_TURNS], n = 0;
        for (int t = 0; t < ex->n_turns && t < s->n_turns; t++)
            if (s->turns[t].query.image == img) q[n] = &s->turns[t].query, turn[n++] = t;
        uint64_t mask[VS_WORLD_MAX_TURNS];
        if (!n || (!vs_world_ground_masks(&s->scenes[img], q, n, S, S / G, mask) && !d->o.ground_chars)) continue;
        int32_t k0 = -1;
        for (int32_t r = 0; r < ex->n_rows && k0 < 0; r++)
            if (ex->img_row[r] == img * NR) k0 = r;
        for (int i = 0; i < n; i++) {
            const int32_t first = ex->turn_start[turn[i]] - 1;
            if (k0 < 0 || k0 + NR > first) continue;
            const vs_world_query_type ty = q[i]->type;
            if (d->o.ground_chars && d->tok && s->scenes[img].kind == VS_SCENE_GLYPH &&
                (ty == VS_Q_READ_ALL || ty == VS_Q_READ_LINE || ty == VS_Q_READ_COLOR)) {
                if (!add_char_grounds(d, ex, s, turn[i], &s->scenes[img], G, k0, mask[i], e)) return false;
                continue;
            }
            if (!mask[i]) continue;
            /* the rows predicting the answer's tokens: row r - 1 predicts row r */
            const int32_t last = d->o.ground_answer ? ex->turn_end[turn[i]] - 2 : first;
            for (int32_t qrow = first; qrow <= last; qrow++)
                if ((qrow == first || ex->answer[qrow + 1]) && !push_ground(d, e, qrow, k0, mask[i])) return false;
        }
        d->max_g = VS_MAX(d->max_g, e->n_g);
    }
    return true;
}

/* Adds one encoded sequence (skipped and counted when longer than seq_len). */
static vs_status reader_add(vs_train_data *d, int64_t *cap, const vs_train_example *ex,
                            const vs_world_sample *s, int su, vs_error *err) {
    vs_train_data_stats *S = &d->stats;
    if (su < 0 || su >= VS_WORLD_N_SUITES) su = VS_WORLD_TEXT;
    S->n_samples++;
    if (ex->n_rows > d->o.seq_len) {
        S->n_skipped++, S->skipped[su]++;
        S->longest_skipped = VS_MAX(S->longest_skipped, ex->n_rows);
        return VS_OK;
    }
    if (!push_rows(d, cap, ex)) return vs_error_set(err, VS_ERR_NOMEM, "training data: out of memory");
    int32_t n_prompt = 0;
    for (int32_t r = 1; r < ex->n_rows; r++) n_prompt += ex->tokens[r] >= 0 && !ex->answer[r];
    seq_entry *e = &d->seqs[d->n_seq++];
    *e = (seq_entry){s, S->rows, ex->n_rows, ex->n_images, ex->n_answer, n_prompt, 0, 0};
    if (!add_grounds(d, ex, s, e)) return vs_error_set(err, VS_ERR_NOMEM, "training data: out of memory");
    S->n_seqs++, S->kept[su]++;
    S->rows += ex->n_rows, S->answer_rows += ex->n_answer, S->prompt_rows += n_prompt, S->images += ex->n_images;
    S->longest = VS_MAX(S->longest, ex->n_rows);
    S->max_images = VS_MAX(S->max_images, ex->n_images);
    return VS_OK;
}

/* Sizes the epoch tables and batch buffers and draws the first epoch; frees d on failure. */
static vs_train_data *reader_finish(vs_train_data *d, vs_status st, vs_error *err) {
    const vs_train_data_opts *opts = &d->o;
    vs_train_data_stats *S = &d->stats;
    if (st == VS_OK && d->n_seq == 0)
        st = vs_error_set(err, VS_ERR_INVALID,
                          "training data: none of %lld conversations fits in %d rows (longest skipped: %lld)",
                          (long long)S->n_samples, opts->seq_len, (long long)S->longest_skipped);
    if (st == VS_OK && d->n_seq > (int64_t)UINT32_MAX)
        st = vs_error_set(err, VS_ERR_RANGE, "training data: too many sequences");
    if (st == VS_OK) {
        const int64_t chunk = (opts->bucket > 1 ? opts->bucket : 1) * (int64_t)opts->batch;
        int64_t nb = 0;
        for (int64_t c0 = 0; c0 < d->n_seq; c0 += chunk)
            nb += (VS_MIN(d->n_seq, c0 + chunk) - c0 + opts->batch - 1) / opts->batch;
        d->n_batches = S->n_batches = nb;
        d->max_B = (int)VS_MIN(opts->batch, d->n_seq);
        d->max_T = (int)S->longest;
        d->max_images = (int)VS_MAX(1, d->max_B * S->max_images);
        size_t N = (size_t)d->max_B * d->max_T, S2 = (size_t)opts->preproc.size * opts->preproc.size;
        d->order = vs_malloc(sizeof(int64_t) * (size_t)d->n_seq);
        d->b_first = vs_malloc(sizeof(int64_t) * (size_t)nb);
        d->b_len = vs_malloc(sizeof(int32_t) * (size_t)nb);
        d->bt_tokens = vs_malloc(sizeof(int32_t) * N);
        d->bt_img_row = vs_malloc(sizeof(int32_t) * N);
        d->bt_targets = vs_malloc(sizeof(int32_t) * N);
        d->bt_mask = vs_malloc(sizeof(float) * N);
        d->pixels = vs_malloc(sizeof(float) * 3 * S2 * (size_t)d->max_images);
        d->bt_ground = vs_malloc(sizeof(vs_train_ground) * (size_t)d->max_B * (size_t)VS_MAX(1, d->max_g));
        if (!d->order || !d->b_first || !d->b_len || !d->bt_tokens || !d->bt_img_row || !d->bt_targets ||
            !d->bt_mask || !d->pixels || !d->bt_ground)
            st = vs_error_set(err, VS_ERR_NOMEM, "training data: out of memory for batches");
    }
    if (st == VS_OK) {
        vs_rng_seed(&d->st.rng, opts->seed);
        st = build_epoch(d, err);
    }
    if (st != VS_OK) {
        vs_train_data_free(d);
        return NULL;
    }
    return d;
}

/* words_frac: whether sample i of set k (with pictures) is written in words; a fixed draw per sample. */
static bool in_words(const vs_train_data_opts *o, const vs_world_sample *s, int k, int64_t i) {
    if (!(o->words_frac > 0) || s->n_images < 1) return false;
    uint64_t h = vs_mix64(o->seed ^ vs_mix64(((uint64_t)k << 48) ^ (uint64_t)i ^ UINT64_C(0x776f726473)));
    return (double)(h >> 11) * 0x1.0p-53 < (double)o->words_frac;
}

vs_train_data *vs_train_data_new(const vs_world_dataset *const *sets, int n_sets, const vs_tokenizer *tok,
                                 const vs_train_data_opts *opts, vs_error *err) {
    if (!sets || n_sets < 1 || !tok) {
        vs_error_set(err, VS_ERR_INVALID, "training data: no datasets or no tokenizer");
        return NULL;
    }
    int64_t total = 0;
    for (int k = 0; k < n_sets; k++) total += sets[k]->n;
    vs_train_data *d = reader_begin(opts, total, err);
    if (!d) return NULL;
    d->tok = tok;
    int64_t cap = 0;
    vs_status st = VS_OK;
    for (int k = 0; st == VS_OK && k < n_sets; k++)
        for (int64_t i = 0; st == VS_OK && i < sets[k]->n; i++) {
            const vs_world_sample *s = &sets[k]->samples[i];
            vs_train_example ex;
            bool words = opts->images_as_text || in_words(opts, s, k, i);
            d->stats.in_words += words && s->n_images > 0;
            st = words ? vs_train_encode_words(s, tok, &ex, err) : vs_train_encode(s, tok, opts->image_rows, &ex, err);
            if (st != VS_OK) {
                vs_error_wrap(err, "%s/%s.jsonl", sets[k]->dir, sets[k]->split);
                break;
            }
            st = reader_add(d, &cap, &ex, s, (int)s->suite, err);
            vs_train_example_free(&ex);
        }
    return reader_finish(d, st, err);
}

vs_train_data *vs_train_data_new_items(const vs_train_item *items, int64_t n, const vs_train_data_opts *opts,
                                       vs_error *err) {
    if (!items || n < 1) {
        vs_error_set(err, VS_ERR_INVALID, "training data: no sequences");
        return NULL;
    }
    if (opts->ground_chars) {
        vs_error_set(err, VS_ERR_INVALID, "training data: character grounds need the tokenizer (vs_train_data_new)");
        return NULL;
    }
    vs_train_data *d = reader_begin(opts, n, err);
    if (!d) return NULL;
    int64_t cap = 0;
    vs_status st = VS_OK;
    for (int64_t i = 0; st == VS_OK && i < n; i++) {
        const vs_train_example *ex = items[i].ex;
        const vs_world_sample *s = items[i].sample;
        if (!ex || ex->n_rows < 2 || ex->n_images < 0 ||
            (ex->n_images > 0 && (!s || s->n_images < ex->n_images)))
            st = vs_error_set(err, VS_ERR_INVALID,
                              "training data: item %lld has %d rows and %d images but its sample has %d",
                              (long long)i, ex ? ex->n_rows : 0, ex ? ex->n_images : 0, s ? s->n_images : 0);
        else
            st = reader_add(d, &cap, ex, s, items[i].suite, err);
    }
    return reader_finish(d, st, err);
}

void vs_train_data_get_state(const vs_train_data *d, vs_train_data_state *st) { *st = d->st; }

vs_status vs_train_data_set_state(vs_train_data *d, const vs_train_data_state *st, vs_error *err) {
    if (st->pos > (uint64_t)d->n_batches)
        return vs_error_set(err, VS_ERR_INVALID,
                            "training data: position %llu is past the %lld batches of an epoch (was the "
                            "checkpoint made with other data or batch settings?)",
                            (unsigned long long)st->pos, (long long)d->n_batches);
    vs_train_data_state old = d->st;
    d->st = *st;
    vs_status s = build_epoch(d, err);
    if (s != VS_OK) {
        d->st = old;
        build_epoch(d, NULL);
    }
    return s;
}

static vs_status load_pixels(const vs_train_data *d, const vs_world_sample *s, int i, float *out,
                             vs_error *err) {
    vs_image img;
    vs_status st = vs_image_load(&img, s->images[i], err);
    if (st != VS_OK) return st;
    st = vs_image_preprocess(&img, &d->o.preproc, out, err);
    if (st != VS_OK) vs_error_wrap(err, "%s", s->images[i]);
    vs_image_free(&img);
    return st;
}

vs_status vs_train_data_batch(vs_train_data *d, const int64_t *seqs, int n, vs_train_batch *b,
                              vs_train_batch_info *info, vs_error *err) {
    if (!seqs || n < 1 || n > d->max_B)
        return vs_error_set(err, VS_ERR_INVALID, "training batch: %d sequences (1..%d)", n, d->max_B);
    int T = 0, NI = 0;
    for (int k = 0; k < n; k++) {
        if (seqs[k] < 0 || seqs[k] >= d->n_seq)
            return vs_error_set(err, VS_ERR_INVALID, "training batch: no sequence %lld", (long long)seqs[k]);
        T = VS_MAX(T, d->seqs[seqs[k]].n_rows);
        NI += d->seqs[seqs[k]].n_images;
    }
    if (NI > d->max_images) return vs_error_set(err, VS_ERR_INVALID, "training batch: %d images", NI);
    const int32_t pad = 0;
    const float pw = d->o.prompt_loss;
    const size_t npx = (size_t)3 * d->o.preproc.size * d->o.preproc.size;
    int64_t rows = 0, counted = 0;
    int img_base = 0, n_ground = 0;
    for (int k = 0; k < n; k++) {
        const seq_entry *e = &d->seqs[seqs[k]];
        const int32_t *tok = d->tokens + e->off, *ir = d->img_row + e->off;
        const uint8_t *ans = d->answer + e->off;
        int32_t *bt = d->bt_tokens + (size_t)k * T, *bi = d->bt_img_row + (size_t)k * T;
        int32_t *tg = d->bt_targets + (size_t)k * T;
        float *mk = d->bt_mask + (size_t)k * T;
        for (int t = 0; t < T; t++) {
            if (t < e->n_rows) {
                bt[t] = tok[t];
                bi[t] = ir[t] >= 0 ? img_base * d->o.image_rows + ir[t] : -1;
            } else {
                bt[t] = pad, bi[t] = -1;
            }
            const bool in = t + 1 < e->n_rows;
            const float w = !in ? 0.0f : ans[t + 1] ? 1.0f : tok[t + 1] >= 0 ? pw : 0.0f;
            tg[t] = w > 0 ? tok[t + 1] : 0;
            mk[t] = w;
            counted += w > 0;
        }
        for (int i = 0; i < e->n_images; i++) {
            vs_status st = load_pixels(d, e->sample, i, d->pixels + (size_t)(img_base + i) * npx, err);
            if (st != VS_OK) return st;
        }
        for (int32_t i = 0; i < e->n_g; i++) {
            d->bt_ground[n_ground] = d->grounds[e->g_off + i];
            d->bt_ground[n_ground++].b = k;
        }
        img_base += e->n_images;
        rows += e->n_rows;
    }
    *b = (vs_train_batch){.B = n,
                          .T = T,
                          .n_images = NI,
                          .pixels = d->pixels,
                          .tokens = d->bt_tokens,
                          .img_row = d->bt_img_row,
                          .targets = d->bt_targets,
                          .loss_mask = d->bt_mask,
                          .pos = NULL,
                          .loss_norm = 0,
                          .n_ground = n_ground,
                          .ground = n_ground ? d->bt_ground : NULL};
    if (info) *info = (vs_train_batch_info){rows, counted, d->st.epoch, d->st.pos, seqs};
    return VS_OK;
}

/* Moves to the next epoch when the current one is used up. */
static vs_status roll_epoch(vs_train_data *d, vs_error *err) {
    if (d->st.pos < (uint64_t)d->n_batches) return VS_OK;
    d->st.rng = d->next_rng;
    d->st.epoch++;
    d->st.pos = 0;
    return build_epoch(d, err);
}

vs_status vs_train_data_next(vs_train_data *d, vs_train_batch *b, vs_train_batch_info *info, vs_error *err) {
    vs_status st = roll_epoch(d, err);
    if (st != VS_OK) return st;
    const int64_t k = (int64_t)d->st.pos;
    st = vs_train_data_batch(d, d->order + d->b_first[k], d->b_len[k], b, info, err);
    if (st == VS_OK) d->st.pos++;
    return st;
}

double vs_train_data_counted_ahead(const vs_train_data *d, int k) {
    /* batches past the end of this epoch come from an order not drawn yet: draw it on a copy */
    vs_train_data tmp = *d;
    int64_t *order = NULL, *first = NULL;
    int32_t *len = NULL;
    int64_t ans = 0, prompt = 0;
    for (int i = 0; i < k; i++) {
        if (tmp.st.pos >= (uint64_t)tmp.n_batches) {
            if (!order) {
                order = vs_malloc(sizeof(int64_t) * (size_t)d->n_seq);
                first = vs_malloc(sizeof(int64_t) * (size_t)d->n_batches);
                len = vs_malloc(sizeof(int32_t) * (size_t)d->n_batches);
                if (!order || !first || !len) break;
                tmp.order = order, tmp.b_first = first, tmp.b_len = len;
            }
            tmp.st.rng = tmp.next_rng, tmp.st.epoch++, tmp.st.pos = 0;
            if (build_epoch(&tmp, NULL) != VS_OK) break;
        }
        const int64_t b = (int64_t)tmp.st.pos++;
        for (int j = 0; j < tmp.b_len[b]; j++) {
            const seq_entry *e = &d->seqs[tmp.order[tmp.b_first[b] + j]];
            ans += e->n_answer, prompt += e->n_prompt;
        }
    }
    vs_free(order), vs_free(first), vs_free(len);
    return (double)ans + (double)d->o.prompt_loss * (double)prompt;
}
