/* tokenizer_bpe: byte-level BPE (tokenizer.ggml.model "gpt2") over one raw prompt fragment.
 * 1. Pre-tokenise: the pre-tokeniser named by tokenizer.ggml.pre (pretok.h: its table, one entry per
 *    family, and the splitter the BPE trainer shares) splits the text into pieces; invalid UTF-8 never
 *    matches its regexes, so such bytes end up in gap pieces, unchanged.
 * 2. Each piece's bytes start as one symbol per byte (the token of the byte's printable code point in
 *    GPT-2's byte-to-unicode mapping); adjacent pairs merge by rank from tokenizer.ggml.merges (lowest
 *    rank first, ties: leftmost) with a heap, until no adjacent pair has a merge. */
#include <stdio.h>
#include <string.h>

#include "heap.h"
#include "tokenizer_impl.h"

/* ---------------------------------------------------------------- merges map */

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x;
}

static bool merge_find(const vs_merge_map *m, int32_t l, int32_t r, int32_t *rank, int32_t *result) {
    uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
    for (uint64_t i = mix64(key) & m->mask;; i = (i + 1) & m->mask) {
        if (m->keys[i] == UINT64_MAX) return false;
        if (m->keys[i] == key) {
            *rank = m->rank[i];
            *result = m->result[i];
            return true;
        }
    }
}

/* ---------------------------------------------------------------- set-up */

static const char *show(const char *s, size_t n, char *buf, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; i < n && o + 8 < cap; i++) {
        uint8_t c = (uint8_t)s[i];
        if (c >= 0x20 && c < 0x7F && c != '\'')
            buf[o++] = (char)c;
        else
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02X", c);
    }
    buf[o] = 0;
    return buf;
}

vs_status vs_tok_bpe_init(vs_tokenizer *t, const char *pre, const vs_tokenizer_spec *spec, vs_error *err) {
    char b1[96], b2[96];
    t->pretok = vs_pretok_find(pre);
    if (!t->pretok) {
        char known[512];
        vs_pretok_names(known, sizeof(known));
        return vs_error_set(err, VS_ERR_UNSUPPORTED,
                            "tokenizer: pre-tokenizer '%s' is not supported (known: %s)",
                            show(pre, strlen(pre), b1, sizeof(b1)), known);
    }
    vs_status st = vs_pretok_compile(&t->pre_re, t->pretok, err);
    if (st) {
        vs_error_wrap(err, "tokenizer");
        return st;
    }

    vs_gpt2_byte_map(t->byte_cp);
    for (int b = 0; b < 256; b++) {
        char u[4];
        int l = vs_utf8_put(t->byte_cp[b], u);
        t->byte_tok[b] = vs_tok_map_find(t, u, (size_t)l);
    }

    /* merges: "left right" (split at the first space after the first byte), both sides and their
     * concatenation must be tokens */
    int64_t nm = spec->n_merges;
    if (nm < 0 || nm > INT32_MAX / 2 || (nm > 0 && !spec->merges))
        return vs_error_set(err, VS_ERR_FORMAT, "tokenizer: bad merge count %lld", (long long)nm);
    t->n_merges = nm;
    t->merge_pairs = vs_malloc((size_t)VS_MAX(nm, 1) * 2 * sizeof(int32_t));
    uint64_t cap = 16;
    while (cap < 2 * (uint64_t)nm) cap <<= 1;
    t->merges.keys = vs_malloc(cap * sizeof(uint64_t));
    t->merges.rank = vs_malloc(cap * sizeof(int32_t));
    t->merges.result = vs_malloc(cap * sizeof(int32_t));
    t->merges.mask = cap - 1;
    char *cat = vs_malloc((1u << 20) * 2 + 1);
    if (!t->merge_pairs || !t->merges.keys || !t->merges.rank || !t->merges.result || !cat) {
        vs_free(cat);
        return vs_error_set(err, VS_ERR_NOMEM, "tokenizer: out of memory (%lld merges)", (long long)nm);
    }
    memset(t->merges.keys, 0xFF, cap * sizeof(uint64_t));
    for (int64_t i = 0; i < nm; i++) {
        const char *s = spec->merges[i];
        size_t n = s ? (spec->merge_lens ? spec->merge_lens[i] : strlen(s)) : 0;
        const char *sp = n > 1 ? memchr(s + 1, ' ', n - 1) : NULL;
        if (!sp || n > (1u << 21)) {
            vs_error_set(err, VS_ERR_FORMAT,
                         "tokenizer: merge %lld '%s' is not two tokens separated by a space", (long long)i,
                         s ? show(s, VS_MIN(n, 40), b1, sizeof(b1)) : "(null)");
            vs_free(cat);
            return VS_ERR_FORMAT;
        }
        size_t nl = (size_t)(sp - s), nr = n - nl - 1;
        int32_t l = vs_tok_map_find(t, s, nl), r = vs_tok_map_find(t, sp + 1, nr);
        memcpy(cat, s, nl);
        memcpy(cat + nl, sp + 1, nr);
        int32_t res = vs_tok_map_find(t, cat, nl + nr);
        if (l < 0 || r < 0 || res < 0) {
            const char *what = l < 0 ? s : r < 0 ? sp + 1 : cat;
            size_t wn = l < 0 ? nl : r < 0 ? nr : nl + nr;
            vs_error_set(err, VS_ERR_FORMAT, "tokenizer: merge %lld '%s' names '%s', which is not a token",
                         (long long)i, show(s, VS_MIN(n, 40), b1, sizeof(b1)),
                         show(what, VS_MIN(wn, 40), b2, sizeof(b2)));
            vs_free(cat);
            return VS_ERR_FORMAT;
        }
        t->merge_pairs[2 * i] = l;
        t->merge_pairs[2 * i + 1] = r;
        uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
        for (uint64_t k = mix64(key) & t->merges.mask;; k = (k + 1) & t->merges.mask) {
            if (t->merges.keys[k] == key) break; /* a repeated pair keeps its first (lowest) rank */
            if (t->merges.keys[k] == UINT64_MAX) {
                t->merges.keys[k] = key;
                t->merges.rank[k] = (int32_t)i;
                t->merges.result[k] = res;
                break;
            }
        }
    }
    vs_free(cat);
    return VS_OK;
}

void vs_tok_bpe_free(vs_tokenizer *t) {
    vs_pretok_re_free(&t->pre_re);
    vs_free(t->merge_pairs);
    vs_free(t->merges.keys);
    vs_free(t->merges.rank);
    vs_free(t->merges.result);
}

/* ---------------------------------------------------------------- pre-tokenise */

typedef struct span {
    size_t off, len;
} span;

typedef struct spanvec {
    span *v;
    int64_t n, cap;
} spanvec;

static bool span_push(spanvec *a, size_t off, size_t len) {
    if (a->n == a->cap) {
        int64_t cap = a->cap ? 2 * a->cap : 64;
        span *v = vs_realloc(a->v, (size_t)cap * sizeof(span));
        if (!v) return false;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = (span){off, len};
    return true;
}

static vs_status push_piece(void *ctx, size_t off, size_t len) {
    return span_push(ctx, off, len) ? VS_OK : VS_ERR_NOMEM;
}

/* Splits text into pieces with the tokenizer's pre-tokeniser (pretok.h). */
static vs_status pretokenize(const vs_tokenizer *t, const char *text, size_t len, spanvec *out,
                             vs_error *err) {
    spanvec a = {0};
    vs_status st = vs_pretok_split(&t->pre_re, text, len, push_piece, &a, err);
    if (st) {
        if (st == VS_ERR_NOMEM) vs_error_set(err, st, "tokenize: out of memory");
        else vs_error_wrap(err, "tokenize");
        vs_free(a.v);
        return st;
    }
    *out = a;
    return VS_OK;
}

/* ---------------------------------------------------------------- merge loop */

typedef struct bsym {
    int32_t id; /* -1: a byte without a token (never merges) */
    int32_t prev, next;
} bsym;

typedef struct bpair {
    int32_t rank, left, right;
    int32_t lid, rid; /* ids when queued: stale if either side changed */
    int32_t result;
} bpair;

static bool bp_before(const bpair *a, const bpair *b) {
    if (a->rank != b->rank) return a->rank < b->rank;
    return a->left < b->left;
}
VS_HEAP_DEFINE(bp_heap, bpair, bp_before)

static bool add_pair(const vs_tokenizer *t, const bsym *y, bp_heap *h, int32_t l, int32_t r) {
    if (l < 0 || r < 0 || y[l].id < 0 || y[r].id < 0) return true;
    int32_t rank, res;
    if (!merge_find(&t->merges, y[l].id, y[r].id, &rank, &res)) return true;
    return bp_heap_push(h, (bpair){rank, l, r, y[l].id, y[r].id, res});
}

/* BPE over one piece w[0..n); y has room for n symbols. */
static vs_status bpe_word(const vs_tokenizer *t, const uint8_t *w, size_t n, bsym *y, bp_heap *h, char *mapped,
                          vs_idvec *out, vs_error *err) {
    if (t->pretok->ignore_merges) {
        size_t m = 0;
        for (size_t i = 0; i < n; i++) m += (size_t)vs_utf8_put(t->byte_cp[w[i]], mapped + m);
        int32_t id = vs_tok_map_find(t, mapped, m);
        if (id >= 0) return vs_idvec_push(out, id, err);
    }
    for (size_t i = 0; i < n; i++) y[i] = (bsym){t->byte_tok[w[i]], (int32_t)i - 1, (int32_t)i + 1};
    y[n - 1].next = -1;
    h->n = 0;
    for (size_t i = 1; i < n; i++)
        if (!add_pair(t, y, h, (int32_t)i - 1, (int32_t)i)) goto nomem;
    while (h->n > 0) {
        bpair p = bp_heap_pop(h);
        bsym *l = &y[p.left], *r = &y[p.right];
        if (l->id != p.lid || r->id != p.rid || l->next != p.right) continue; /* stale */
        l->id = p.result;
        r->id = -2; /* dead */
        l->next = r->next;
        if (r->next >= 0) y[r->next].prev = p.left;
        if (!add_pair(t, y, h, l->prev, p.left) || !add_pair(t, y, h, p.left, l->next)) goto nomem;
    }
    for (int32_t i = 0; i != -1; i = y[i].next) {
        int32_t id = y[i].id;
        if (id < 0) {
            if (t->unk < 0)
                return vs_error_set(err, VS_ERR_INVALID,
                                    "tokenize: byte 0x%02X has no token in this vocabulary and there is no "
                                    "unknown token",
                                    w[i]);
            id = t->unk;
        }
        if (vs_idvec_push(out, id, err) != VS_OK) return VS_ERR_NOMEM;
    }
    return VS_OK;
nomem:
    return vs_error_set(err, VS_ERR_NOMEM, "tokenize: out of memory");
}

vs_status vs_tok_bpe_fragment(const vs_tokenizer *t, const char *text, size_t len, vs_idvec *out,
                              vs_error *err) {
    if (len == 0) return VS_OK;
    spanvec pieces = {0};
    vs_status st = pretokenize(t, text, len, &pieces, err);
    if (st != VS_OK) return st;
    size_t maxw = 1;
    for (int64_t i = 0; i < pieces.n; i++) maxw = VS_MAX(maxw, pieces.v[i].len);
    bsym *y = vs_malloc(maxw * sizeof(bsym));
    char *mapped = t->pretok->ignore_merges ? vs_malloc(maxw * 2) : NULL;
    bp_heap h = {0};
    if (!y || (t->pretok->ignore_merges && !mapped)) {
        st = vs_error_set(err, VS_ERR_NOMEM, "tokenize: out of memory");
    } else {
        for (int64_t i = 0; i < pieces.n && st == VS_OK; i++)
            st = bpe_word(t, (const uint8_t *)text + pieces.v[i].off, pieces.v[i].len, y, &h, mapped, out,
                          err);
    }
    vs_free(y);
    vs_free(mapped);
    bp_heap_free(&h);
    vs_free(pieces.v);
    return st;
}

void vs_gpt2_byte_map(uint32_t cp[256]) {
    uint32_t next = 256;
    for (int b = 0; b < 256; b++) {
        bool keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        cp[b] = keep ? (uint32_t)b : next++;
    }
}

void vs_gpt2_byte_texts(char texts[256][4]) {
    uint32_t cp[256];
    vs_gpt2_byte_map(cp);
    for (int b = 0; b < 256; b++) texts[b][vs_utf8_put(cp[b], texts[b])] = 0; /* at most 2 bytes (U+0143) */
}
