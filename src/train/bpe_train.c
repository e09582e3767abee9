/* bpe_train: byte-level BPE training. See bpe_train.h.
 *
 * Data: the corpus is reduced to distinct pre-tokenised pieces ("words") with counts. Each word is a
 * sequence of symbol ids. A pair table maps (left, right) to its total count over all words and to
 * the list of words it occurs in; a max-heap orders pairs by count with lazy invalidation (an entry
 * whose count no longer matches the table is dropped or re-pushed when it reaches the top). Merging
 * a pair rewrites only the words on its list, subtracting their old pairs and adding their new ones,
 * so a merge costs time proportional to the words it touches, not to the corpus. */
#include "bpe_train.h"

#include <stdio.h>
#include <string.h>

#include "gguf.h"
#include "heap.h"
#include "pretok.h"
#include "tokenizer.h"

static const char *const SPECIAL[VS_BPE_N_SPECIAL] = {"<unk>", "<s>", "</s>", "<image>"};

/* ---------------------------------------------------------------------------------------------- */
/* pre-tokenisation */

const char *vs_bpe_pre_name(vs_bpe_pre pre) { return pre == VS_BPE_PRE_DIGITS ? "starcoder" : "gpt-2"; }

bool vs_bpe_pre_parse(const char *name, vs_bpe_pre *out) {
    if (!name) return false;
    if (!strcmp(name, "gpt-2")) *out = VS_BPE_PRE_GPT2;
    else if (!strcmp(name, "starcoder")) *out = VS_BPE_PRE_DIGITS;
    else return false;
    return true;
}

/* The trainer's pre-tokenisers are entries of the tokenizer's table (pretok.h), looked up by name, so a
 * trained vocabulary's text is split exactly as the tokenizer that loads the file splits it. */
static vs_status pretok_init(vs_pretok_re *p, vs_bpe_pre pre, vs_error *err) {
    const vs_pretok *def = vs_pretok_find(vs_bpe_pre_name(pre));
    if (!def) return vs_error_set(err, VS_ERR_UNSUPPORTED, "bpe: no pre-tokeniser '%s'", vs_bpe_pre_name(pre));
    vs_status st = vs_pretok_compile(p, def, err);
    if (st) vs_error_wrap(err, "bpe");
    return st;
}

typedef struct piece_sink {
    const char *text;
    void (*fn)(void *, const char *, size_t);
    void *ctx;
} piece_sink;

static vs_status emit_piece(void *ctx, size_t off, size_t len) {
    piece_sink *k = ctx;
    k->fn(k->ctx, k->text + off, len);
    return VS_OK;
}

static vs_status pretok_run(vs_pretok_re *p, const char *text, size_t len, void (*fn)(void *, const char *, size_t), void *ctx,
                            vs_error *err) {
    piece_sink k = {text, fn, ctx};
    vs_status st = vs_pretok_split(p, text, len, emit_piece, &k, err);
    if (st) vs_error_wrap(err, "bpe");
    return st;
}

/* Splits text at special tokens; calls piece() for text between them and special() for each one. */
static vs_status split_special(const char *text, size_t len, vs_status (*piece)(void *, const char *, size_t, vs_error *),
                               void (*special)(void *, int), void *ctx, vs_error *err) {
    size_t start = 0, i = 0;
    while (i < len) {
        int hit = -1;
        if (text[i] == '<')
            for (int k = 0; k < VS_BPE_N_SPECIAL; k++) {
                size_t n = strlen(SPECIAL[k]);
                if (i + n <= len && memcmp(text + i, SPECIAL[k], n) == 0) {
                    hit = k;
                    break;
                }
            }
        if (hit < 0) {
            i++;
            continue;
        }
        if (i > start) {
            vs_status st = piece(ctx, text + start, i - start, err);
            if (st) return st;
        }
        if (special) special(ctx, hit);
        i += strlen(SPECIAL[hit]);
        start = i;
    }
    if (len > start) return piece(ctx, text + start, len - start, err);
    return VS_OK;
}

vs_status vs_bpe_pretokenize(const char *text, size_t len, void (*fn)(void *ctx, const char *piece, size_t n), void *ctx,
                             vs_error *err) {
    vs_pretok_re p;
    vs_status st = pretok_init(&p, VS_BPE_PRE_GPT2, err);
    if (st) return st;
    st = pretok_run(&p, text, len, fn, ctx, err);
    vs_pretok_re_free(&p);
    return st;
}

/* ---------------------------------------------------------------------------------------------- */
/* the word table */

typedef struct word {
    uint32_t off, len; /* bytes in the trainer's byte arena */
    int64_t count;
} word;

struct vs_bpe_trainer {
    vs_pretok_re pt;
    vs_bpe_pre pre;
    char *bytes; /* arena of word bytes */
    size_t n_bytes, cap_bytes;
    word *words;
    int64_t n_words, cap_words;
    int64_t *slots; /* hash slots: word index or -1 */
    uint64_t mask;
    int64_t total;
};

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ULL;
    return h ^ (h >> 29);
}

vs_bpe_trainer *vs_bpe_trainer_new(vs_error *err) { return vs_bpe_trainer_new_pre(VS_BPE_PRE_GPT2, err); }

vs_bpe_trainer *vs_bpe_trainer_new_pre(vs_bpe_pre pre, vs_error *err) {
    if (pre != VS_BPE_PRE_GPT2 && pre != VS_BPE_PRE_DIGITS) {
        vs_error_set(err, VS_ERR_INVALID, "bpe: unknown pre-tokeniser %d", (int)pre);
        return NULL;
    }
    vs_bpe_trainer *t = vs_calloc(1, sizeof(*t));
    if (!t) {
        vs_error_set(err, VS_ERR_NOMEM, "bpe: out of memory");
        return NULL;
    }
    t->pre = pre;
    if (pretok_init(&t->pt, pre, err) != VS_OK) {
        vs_free(t);
        return NULL;
    }
    t->mask = 4095;
    t->slots = vs_malloc((t->mask + 1) * sizeof(int64_t));
    if (!t->slots) {
        vs_bpe_trainer_free(t);
        vs_error_set(err, VS_ERR_NOMEM, "bpe: out of memory");
        return NULL;
    }
    for (uint64_t i = 0; i <= t->mask; i++) t->slots[i] = -1;
    return t;
}

void vs_bpe_trainer_free(vs_bpe_trainer *t) {
    if (!t) return;
    vs_pretok_re_free(&t->pt);
    vs_free(t->bytes);
    vs_free(t->words);
    vs_free(t->slots);
    vs_free(t);
}

typedef struct add_ctx {
    vs_bpe_trainer *t;
    bool oom;
} add_ctx;

static bool grow_slots(vs_bpe_trainer *t) {
    uint64_t mask = t->mask * 2 + 1;
    int64_t *s = vs_malloc((mask + 1) * sizeof(int64_t));
    if (!s) return false;
    for (uint64_t i = 0; i <= mask; i++) s[i] = -1;
    for (int64_t w = 0; w < t->n_words; w++) {
        uint64_t j = hash_bytes(t->bytes + t->words[w].off, t->words[w].len) & mask;
        while (s[j] >= 0) j = (j + 1) & mask;
        s[j] = w;
    }
    vs_free(t->slots);
    t->slots = s;
    t->mask = mask;
    return true;
}

static void count_piece(void *ctx, const char *p, size_t n) {
    add_ctx *c = ctx;
    vs_bpe_trainer *t = c->t;
    if (c->oom || n == 0 || n > 1u << 20) return;
    t->total++;
    uint64_t j = hash_bytes(p, n) & t->mask;
    while (t->slots[j] >= 0) {
        word *w = &t->words[t->slots[j]];
        if (w->len == n && memcmp(t->bytes + w->off, p, n) == 0) {
            w->count++;
            return;
        }
        j = (j + 1) & t->mask;
    }
    if (t->n_bytes + n > t->cap_bytes) {
        size_t cap = t->cap_bytes ? t->cap_bytes : 65536;
        while (cap < t->n_bytes + n) cap *= 2;
        char *nb = vs_realloc(t->bytes, cap);
        if (!nb || cap > UINT32_MAX) {
            c->oom = true;
            if (nb) t->bytes = nb;
            return;
        }
        t->bytes = nb;
        t->cap_bytes = cap;
    }
    if (t->n_words == t->cap_words) {
        int64_t cap = t->cap_words ? t->cap_words * 2 : 1024;
        word *nw = vs_realloc(t->words, (size_t)cap * sizeof(word));
        if (!nw) {
            c->oom = true;
            return;
        }
        t->words = nw;
        t->cap_words = cap;
    }
    memcpy(t->bytes + t->n_bytes, p, n);
    t->words[t->n_words] = (word){(uint32_t)t->n_bytes, (uint32_t)n, 1};
    t->n_bytes += n;
    t->slots[j] = t->n_words++;
    if ((uint64_t)t->n_words * 2 > t->mask && !grow_slots(t)) c->oom = true;
}

static vs_status add_piece(void *ctx, const char *p, size_t n, vs_error *err) {
    add_ctx *c = ctx;
    vs_status st = pretok_run(&c->t->pt, p, n, count_piece, c, err);
    if (!st && c->oom) st = vs_error_set(err, VS_ERR_NOMEM, "bpe: out of memory while counting the corpus");
    return st;
}

vs_status vs_bpe_add_text(vs_bpe_trainer *t, const char *text, size_t len, vs_error *err) {
    add_ctx c = {t, false};
    return split_special(text, len, add_piece, NULL, &c, err);
}

void vs_bpe_corpus_size(const vs_bpe_trainer *t, int64_t *n_distinct, int64_t *n_total) {
    if (n_distinct) *n_distinct = t->n_words;
    if (n_total) *n_total = t->total;
}

/* ---------------------------------------------------------------------------------------------- */
/* training */

typedef struct pair_entry {
    uint64_t key; /* left << 32 | right; UINT64_MAX = empty slot */
    int64_t count;
    int32_t *occ; /* words containing the pair (may hold stale entries) */
    int32_t n_occ, cap_occ;
} pair_entry;

typedef struct heap_item {
    int64_t count;
    uint64_t key;
} heap_item;

/* heap order: larger count first; ties to the smaller key (left id, then right id) */
static bool heap_before(const heap_item *a, const heap_item *b) {
    return a->count > b->count || (a->count == b->count && a->key < b->key);
}
VS_HEAP_DEFINE(pair_heap, heap_item, heap_before)

typedef struct trainer_state {
    pair_entry *pairs;
    uint64_t pmask;
    int64_t n_pairs;
    pair_heap heap;
    int32_t **sym; /* per word: symbols */
    int32_t *n_sym;
    bool oom;
} trainer_state;

static uint64_t mix_key(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return k;
}

static pair_entry *pair_get(trainer_state *s, uint64_t key, bool create) {
    uint64_t j = mix_key(key) & s->pmask;
    while (s->pairs[j].key != UINT64_MAX) {
        if (s->pairs[j].key == key) return &s->pairs[j];
        j = (j + 1) & s->pmask;
    }
    if (!create) return NULL;
    if ((uint64_t)(s->n_pairs + 1) * 2 > s->pmask) {
        uint64_t mask = s->pmask * 2 + 1;
        pair_entry *np = vs_malloc((mask + 1) * sizeof(pair_entry));
        if (!np) {
            s->oom = true;
            return NULL;
        }
        for (uint64_t i = 0; i <= mask; i++) np[i].key = UINT64_MAX;
        for (uint64_t i = 0; i <= s->pmask; i++) {
            if (s->pairs[i].key == UINT64_MAX) continue;
            uint64_t k = mix_key(s->pairs[i].key) & mask;
            while (np[k].key != UINT64_MAX) k = (k + 1) & mask;
            np[k] = s->pairs[i];
        }
        vs_free(s->pairs);
        s->pairs = np;
        s->pmask = mask;
        j = mix_key(key) & s->pmask;
        while (s->pairs[j].key != UINT64_MAX) j = (j + 1) & s->pmask;
    }
    pair_entry *e = &s->pairs[j];
    memset(e, 0, sizeof(*e));
    e->key = key;
    s->n_pairs++;
    return e;
}

static void occ_add(trainer_state *s, pair_entry *e, int32_t w) {
    if (e->n_occ && e->occ[e->n_occ - 1] == w) return;
    if (e->n_occ == e->cap_occ) {
        int32_t cap = e->cap_occ ? e->cap_occ * 2 : 4;
        int32_t *no = vs_realloc(e->occ, (size_t)cap * sizeof(int32_t));
        if (!no) {
            s->oom = true;
            return;
        }
        e->occ = no;
        e->cap_occ = cap;
    }
    e->occ[e->n_occ++] = w;
}

static void heap_push(trainer_state *s, int64_t count, uint64_t key) {
    if (!pair_heap_push(&s->heap, (heap_item){count, key})) s->oom = true;
}

static uint64_t pkey(int32_t a, int32_t b) { return (uint64_t)(uint32_t)a << 32 | (uint32_t)b; }

static void state_free(trainer_state *s, int64_t n_words) {
    if (s->pairs)
        for (uint64_t i = 0; i <= s->pmask; i++)
            if (s->pairs[i].key != UINT64_MAX) vs_free(s->pairs[i].occ);
    vs_free(s->pairs);
    pair_heap_free(&s->heap);
    if (s->sym)
        for (int64_t w = 0; w < n_words; w++) vs_free(s->sym[w]);
    vs_free(s->sym);
    vs_free(s->n_sym);
}

void vs_bpe_vocab_free(vs_bpe_vocab *v) {
    if (!v) return;
    for (int64_t i = 0; i < v->n_vocab; i++) vs_free(v->tokens ? v->tokens[i] : NULL);
    for (int64_t i = 0; i < v->n_merges; i++) vs_free(v->merges ? v->merges[i] : NULL);
    vs_free(v->tokens);
    vs_free(v->types);
    vs_free(v->merges);
    vs_free(v->merge_left);
    vs_free(v->merge_right);
    memset(v, 0, sizeof(*v));
}

vs_status vs_bpe_train(vs_bpe_trainer *t, int64_t vocab_size, int64_t min_pair_count, vs_bpe_vocab *out, vs_error *err) {
    memset(out, 0, sizeof(*out));
    const int64_t base = VS_BPE_FIRST_BYTE + 256;
    if (vocab_size < base || vocab_size > (1 << 20))
        return vs_error_set(err, VS_ERR_RANGE, "bpe: vocabulary size %lld outside %lld..%d", (long long)vocab_size, (long long)base, 1 << 20);
    if (min_pair_count < 2) min_pair_count = 2;
    int64_t max_merges = vocab_size - base;
    out->tokens = vs_calloc((size_t)vocab_size, sizeof(char *));
    out->types = vs_calloc((size_t)vocab_size, sizeof(int32_t));
    out->merges = vs_calloc((size_t)(max_merges ? max_merges : 1), sizeof(char *));
    out->merge_left = vs_calloc((size_t)(max_merges ? max_merges : 1), sizeof(int32_t));
    out->merge_right = vs_calloc((size_t)(max_merges ? max_merges : 1), sizeof(int32_t));
    out->pre = t->pre;
    trainer_state s = {0};
    int64_t nw = t->n_words;
    s.pmask = 65535;
    s.pairs = vs_malloc((s.pmask + 1) * sizeof(pair_entry));
    s.sym = vs_calloc((size_t)(nw ? nw : 1), sizeof(int32_t *));
    s.n_sym = vs_calloc((size_t)(nw ? nw : 1), sizeof(int32_t));
    int32_t *stamp = vs_malloc((size_t)(nw ? nw : 1) * sizeof(int32_t));
    if (!out->tokens || !out->types || !out->merges || !out->merge_left || !out->merge_right || !s.pairs || !s.sym || !s.n_sym ||
        !stamp) {
        vs_free(stamp);
        state_free(&s, nw);
        vs_bpe_vocab_free(out);
        return vs_error_set(err, VS_ERR_NOMEM, "bpe: out of memory");
    }
    for (uint64_t i = 0; i <= s.pmask; i++) s.pairs[i].key = UINT64_MAX;
    /* base vocabulary */
    char bytes[256][4];
    vs_gpt2_byte_texts(bytes);
    for (int k = 0; k < VS_BPE_N_SPECIAL; k++) {
        out->tokens[k] = vs_strdup(SPECIAL[k]);
        out->types[k] = 3; /* CONTROL */
    }
    for (int b = 0; b < 256; b++) {
        out->tokens[VS_BPE_FIRST_BYTE + b] = vs_strdup(bytes[b]);
        out->types[VS_BPE_FIRST_BYTE + b] = 1;
    }
    out->n_vocab = base;
    /* words as byte symbols; initial pair counts and occurrence lists */
    for (int64_t w = 0; w < nw && !s.oom; w++) {
        const word *wd = &t->words[w];
        stamp[w] = -1;
        s.sym[w] = vs_malloc((size_t)wd->len * sizeof(int32_t));
        if (!s.sym[w]) {
            s.oom = true;
            break;
        }
        s.n_sym[w] = (int32_t)wd->len;
        for (uint32_t i = 0; i < wd->len; i++) s.sym[w][i] = VS_BPE_FIRST_BYTE + (uint8_t)t->bytes[wd->off + i];
        for (uint32_t i = 0; i + 1 < wd->len && !s.oom; i++) {
            pair_entry *e = pair_get(&s, pkey(s.sym[w][i], s.sym[w][i + 1]), true);
            if (!e) break;
            e->count += wd->count;
            occ_add(&s, e, (int32_t)w);
        }
    }
    for (uint64_t i = 0; i <= s.pmask && !s.oom; i++)
        if (s.pairs[i].key != UINT64_MAX && s.pairs[i].count >= min_pair_count) heap_push(&s, s.pairs[i].count, s.pairs[i].key);
    /* merges */
    int32_t *newsym = NULL;
    int64_t cap_new = 0;
    uint64_t *touched = NULL;
    int64_t n_touched = 0, cap_touched = 0;
    while (!s.oom && out->n_merges < max_merges && s.heap.n > 0) {
        heap_item top = pair_heap_pop(&s.heap);
        pair_entry *e = pair_get(&s, top.key, false);
        if (!e || e->count != top.count) {
            if (e && e->count >= min_pair_count) heap_push(&s, e->count, e->key);
            continue;
        }
        if (e->count < min_pair_count) break;
        int32_t a = (int32_t)(top.key >> 32), b = (int32_t)(top.key & 0xffffffffu);
        int32_t c = (int32_t)out->n_vocab;
        int64_t rank = out->n_merges;
        /* the new token and the merge rule */
        size_t la = strlen(out->tokens[a]), lb = strlen(out->tokens[b]);
        char *tok = vs_malloc(la + lb + 1), *rule = vs_malloc(la + lb + 2);
        if (!tok || !rule) {
            vs_free(tok);
            vs_free(rule);
            s.oom = true;
            break;
        }
        memcpy(tok, out->tokens[a], la);
        memcpy(tok + la, out->tokens[b], lb + 1);
        memcpy(rule, out->tokens[a], la);
        rule[la] = ' ';
        memcpy(rule + la + 1, out->tokens[b], lb + 1);
        out->tokens[c] = tok;
        out->types[c] = 1;
        out->merges[rank] = rule;
        out->merge_left[rank] = a;
        out->merge_right[rank] = b;
        out->n_vocab++;
        out->n_merges++;
        /* rewrite every word that contains (a, b) */
        n_touched = 0;
        int32_t n_occ = e->n_occ;
        int32_t *occ = e->occ; /* not appended to below: new pairs all contain c */
        e->occ = NULL;
        e->n_occ = e->cap_occ = 0;
        for (int32_t oi = 0; oi < n_occ && !s.oom; oi++) {
            int32_t w = occ[oi];
            if (stamp[w] == (int32_t)rank) continue;
            stamp[w] = (int32_t)rank;
            int32_t *sy = s.sym[w], n = s.n_sym[w];
            int64_t f = t->words[w].count;
            if (n > cap_new) {
                int32_t *nn = vs_realloc(newsym, (size_t)n * sizeof(int32_t));
                if (!nn) {
                    s.oom = true;
                    break;
                }
                newsym = nn;
                cap_new = n;
            }
            int32_t m = 0;
            bool found = false;
            for (int32_t i = 0; i < n; i++) {
                if (i + 1 < n && sy[i] == a && sy[i + 1] == b) {
                    newsym[m++] = c;
                    i++;
                    found = true;
                } else {
                    newsym[m++] = sy[i];
                }
            }
            if (!found) continue; /* stale occurrence */
            for (int32_t i = 0; i + 1 < n; i++) {
                pair_entry *pe = pair_get(&s, pkey(sy[i], sy[i + 1]), false);
                if (pe) pe->count -= f;
            }
            for (int32_t i = 0; i + 1 < m && !s.oom; i++) {
                uint64_t k = pkey(newsym[i], newsym[i + 1]);
                pair_entry *pe = pair_get(&s, k, true);
                if (!pe) break;
                pe->count += f;
                if (newsym[i] == c || newsym[i + 1] == c) {
                    occ_add(&s, pe, w);
                    if (n_touched == cap_touched) {
                        int64_t cap = cap_touched ? cap_touched * 2 : 256;
                        uint64_t *nt = vs_realloc(touched, (size_t)cap * sizeof(uint64_t));
                        if (!nt) {
                            s.oom = true;
                            break;
                        }
                        touched = nt;
                        cap_touched = cap;
                    }
                    touched[n_touched++] = k;
                }
            }
            memcpy(sy, newsym, (size_t)m * sizeof(int32_t));
            s.n_sym[w] = m;
        }
        vs_free(occ);
        /* pairs with c only ever grew during this merge: (re)enter them in the heap */
        for (int64_t i = 0; i < n_touched && !s.oom; i++) {
            pair_entry *pe = pair_get(&s, touched[i], false);
            if (pe && pe->count >= min_pair_count) heap_push(&s, pe->count, pe->key);
        }
    }
    vs_free(newsym);
    vs_free(touched);
    vs_free(stamp);
    bool oom = s.oom;
    state_free(&s, nw);
    if (oom) {
        vs_bpe_vocab_free(out);
        return vs_error_set(err, VS_ERR_NOMEM, "bpe: out of memory while training");
    }
    return VS_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* GGUF */

vs_status vs_bpe_write_gguf(const vs_bpe_vocab *v, const char *path, const char *name, vs_error *err) {
    vs_gguf_writer *w = vs_gguf_writer_new();
    if (!w) return vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory", path);
    vs_gguf_set_str(w, "general.architecture", "llama");
    vs_gguf_set_str(w, "general.name", name ? name : "vlmspec-world-bpe");
    vs_gguf_set_str(w, "tokenizer.ggml.model", "gpt2");
    vs_gguf_set_str(w, "tokenizer.ggml.pre", vs_bpe_pre_name(v->pre));
    vs_gguf_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tokens, (uint64_t)v->n_vocab);
    vs_gguf_set_arr(w, "tokenizer.ggml.token_type", VS_GGUF_I32, v->types, (uint64_t)v->n_vocab);
    vs_gguf_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v->merges, (uint64_t)v->n_merges);
    vs_gguf_set_u32(w, "tokenizer.ggml.bos_token_id", VS_BPE_BOS);
    vs_gguf_set_u32(w, "tokenizer.ggml.eos_token_id", VS_BPE_EOS);
    vs_gguf_set_u32(w, "tokenizer.ggml.unknown_token_id", VS_BPE_UNK);
    vs_gguf_set_bool(w, "tokenizer.ggml.add_bos_token", true);
    vs_gguf_set_bool(w, "tokenizer.ggml.add_eos_token", false);
    vs_status st = vs_gguf_write(w, path, err);
    vs_gguf_writer_free(w);
    return st;
}

/* ---------------------------------------------------------------------------------------------- */
/* reference encoder */

typedef struct enc_ctx {
    const vs_bpe_vocab *v;
    vs_pretok_re *pt;
    const uint64_t *mkeys; /* open-addressing (left,right) -> rank */
    const int32_t *mrank;
    uint64_t mmask;
    int32_t *ids;
    int64_t n, cap;
    int32_t *work;
    int64_t cap_work;
    bool oom;
} enc_ctx;

static void enc_push(enc_ctx *c, int32_t id) {
    if (c->n == c->cap) {
        int64_t cap = c->cap ? c->cap * 2 : 256;
        int32_t *ni = vs_realloc(c->ids, (size_t)cap * sizeof(int32_t));
        if (!ni) {
            c->oom = true;
            return;
        }
        c->ids = ni;
        c->cap = cap;
    }
    c->ids[c->n++] = id;
}

static int32_t enc_rank(const enc_ctx *c, int32_t a, int32_t b) {
    uint64_t k = pkey(a, b), j = mix_key(k) & c->mmask;
    while (c->mkeys[j] != UINT64_MAX) {
        if (c->mkeys[j] == k) return c->mrank[j];
        j = (j + 1) & c->mmask;
    }
    return -1;
}

static void enc_piece(void *ctx, const char *p, size_t n) {
    enc_ctx *c = ctx;
    if (c->oom) return;
    if ((int64_t)n > c->cap_work) {
        int32_t *nw = vs_realloc(c->work, n * sizeof(int32_t));
        if (!nw) {
            c->oom = true;
            return;
        }
        c->work = nw;
        c->cap_work = (int64_t)n;
    }
    int32_t *s = c->work;
    int64_t m = (int64_t)n;
    for (size_t i = 0; i < n; i++) s[i] = VS_BPE_FIRST_BYTE + (uint8_t)p[i];
    /* repeatedly merge the lowest-ranked adjacent pair, leftmost first */
    for (;;) {
        int32_t best = -1;
        int64_t at = -1;
        for (int64_t i = 0; i + 1 < m; i++) {
            int32_t r = enc_rank(c, s[i], s[i + 1]);
            if (r >= 0 && (best < 0 || r < best)) best = r, at = i;
        }
        if (best < 0) break;
        s[at] = VS_BPE_FIRST_BYTE + 256 + best;
        memmove(s + at + 1, s + at + 2, (size_t)(m - at - 2) * sizeof(int32_t));
        m--;
    }
    for (int64_t i = 0; i < m; i++) enc_push(c, s[i]);
}

static vs_status enc_text(void *ctx, const char *p, size_t n, vs_error *err) {
    enc_ctx *c = ctx;
    return pretok_run(c->pt, p, n, enc_piece, c, err);
}

static void enc_special(void *ctx, int k) { enc_push(ctx, k); }

vs_status vs_bpe_encode(const vs_bpe_vocab *v, const char *text, size_t len, int32_t **out, int64_t *n_out, vs_error *err) {
    *out = NULL;
    *n_out = 0;
    vs_pretok_re pt;
    vs_status st = pretok_init(&pt, v->pre, err);
    if (st) return st;
    uint64_t mmask = 1;
    while (mmask < (uint64_t)v->n_merges * 2 + 1) mmask = mmask * 2 + 1;
    uint64_t *mkeys = vs_malloc((mmask + 1) * sizeof(uint64_t));
    int32_t *mrank = vs_malloc((mmask + 1) * sizeof(int32_t));
    if (!mkeys || !mrank) {
        vs_free(mkeys);
        vs_free(mrank);
        vs_pretok_re_free(&pt);
        return vs_error_set(err, VS_ERR_NOMEM, "bpe: out of memory");
    }
    for (uint64_t i = 0; i <= mmask; i++) mkeys[i] = UINT64_MAX;
    for (int64_t r = 0; r < v->n_merges; r++) {
        uint64_t k = pkey(v->merge_left[r], v->merge_right[r]), j = mix_key(k) & mmask;
        while (mkeys[j] != UINT64_MAX && mkeys[j] != k) j = (j + 1) & mmask;
        if (mkeys[j] == UINT64_MAX) {
            mkeys[j] = k;
            mrank[j] = (int32_t)r;
        }
    }
    enc_ctx c = {v, &pt, mkeys, mrank, mmask, NULL, 0, 0, NULL, 0, false};
    st = split_special(text, len, enc_text, enc_special, &c, err);
    if (!st && c.oom) st = vs_error_set(err, VS_ERR_NOMEM, "bpe: out of memory");
    vs_free(mkeys);
    vs_free(mrank);
    vs_free(c.work);
    vs_pretok_re_free(&pt);
    if (st) {
        vs_free(c.ids);
        return st;
    }
    *out = c.ids;
    *n_out = c.n;
    return VS_OK;
}
