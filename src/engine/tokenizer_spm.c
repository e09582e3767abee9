/* tokenizer_spm: SentencePiece BPE (tokenizer.ggml.model "llama") over one raw prompt fragment.
 * The text (with a leading space when the caller asks) has its spaces replaced by U+2581, is split into
 * characters, and adjacent symbols are merged greedily: always the pair whose concatenation is the
 * token with the highest score (ties: the leftmost pair), until no adjacent pair forms a token. A
 * binary heap over candidate pairs keeps this O(n log n); stale pairs (a side already merged) are
 * skipped when popped. Symbols that are not tokens fall back to <0xNN> byte tokens, then UNK. */
#include <string.h>

#include "heap.h"
#include "tokenizer_impl.h"

typedef struct sym {
    int32_t start; /* byte offset in the escaped text */
    int32_t len;   /* 0 once merged into its left neighbour */
    int32_t prev, next;
} sym;

typedef struct bigram {
    float score;
    int32_t left, right;
    int32_t size; /* byte length of the pair when it was queued: stale if it changed */
} bigram;

/* heap order: higher score first, then smaller left index */
static bool bg_before(const bigram *a, const bigram *b) {
    if (a->score != b->score) return a->score > b->score;
    return a->left < b->left;
}
VS_HEAP_DEFINE(bg_heap, bigram, bg_before)

static bool try_add(const vs_tokenizer *t, const char *s, const sym *syms, bg_heap *h, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return true;
    int32_t size = syms[l].len + syms[r].len;
    int32_t id = vs_tok_map_find(t, s + syms[l].start, (size_t)size);
    if (id < 0) return true;
    return bg_heap_push(h, (bigram){t->scores[id], l, r, size});
}

/* Emits the token(s) of one final symbol. */
static vs_status emit(const vs_tokenizer *t, const char *s, const sym *y, vs_idvec *out, vs_error *err) {
    int32_t id = vs_tok_map_find(t, s + y->start, (size_t)y->len);
    if (id >= 0) return vs_idvec_push(out, id, err);
    bool bytes = true;
    for (int32_t k = 0; k < y->len; k++) bytes = bytes && t->byte_tok[(uint8_t)s[y->start + k]] >= 0;
    if (bytes) {
        for (int32_t k = 0; k < y->len; k++)
            if (vs_idvec_push(out, t->byte_tok[(uint8_t)s[y->start + k]], err) != VS_OK) return VS_ERR_NOMEM;
        return VS_OK;
    }
    /* without byte tokens one UNK stands for the whole symbol */
    if (t->unk < 0)
        return vs_error_set(err, VS_ERR_INVALID,
                            "tokenize: a character is not in the vocabulary, which has neither byte tokens "
                            "nor an unknown token");
    if (vs_idvec_push(out, t->unk, err) != VS_OK) return VS_ERR_NOMEM;
    return VS_OK;
}

vs_status vs_tok_spm_fragment(const vs_tokenizer *t, const char *text, size_t len, bool space_prefix,
                              vs_idvec *out, vs_error *err) {
    static const char ws[3] = {'\xE2', '\x96', '\x81'}; /* U+2581 */
    size_t n_sp = 0;
    for (size_t i = 0; i < len; i++) n_sp += text[i] == ' ';
    size_t elen = len + 2 * n_sp + (space_prefix ? 3 : 0);
    if (elen == 0) return VS_OK;
    char *s = vs_malloc(elen);
    sym *syms = vs_malloc(elen * sizeof(sym));
    bg_heap h = {0};
    vs_status st = VS_OK;
    if (!s || !syms) goto nomem;

    /* escape: ' ' -> U+2581, with the optional leading space */
    size_t o = 0;
    if (space_prefix) memcpy(s, ws, 3), o = 3;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ')
            memcpy(s + o, ws, 3), o += 3;
        else
            s[o++] = text[i];
    }

    /* one symbol per UTF-8 character (an invalid byte is a symbol of its own) */
    int32_t ns = 0;
    for (size_t i = 0; i < elen;) {
        int l = vs_utf8_valid_len((const uint8_t *)s + i, elen - i);
        if (l == 0) l = 1;
        syms[ns] = (sym){(int32_t)i, l, ns - 1, ns + 1};
        ns++;
        i += (size_t)l;
    }
    syms[ns - 1].next = -1;

    for (int32_t i = 1; i < ns; i++)
        if (!try_add(t, s, syms, &h, i - 1, i)) goto nomem;
    while (h.n > 0) {
        bigram b = bg_heap_pop(&h);
        sym *l = &syms[b.left], *r = &syms[b.right];
        if (l->len == 0 || r->len == 0 || l->len + r->len != b.size) continue;
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0) syms[r->next].prev = b.left;
        if (!try_add(t, s, syms, &h, l->prev, b.left) || !try_add(t, s, syms, &h, b.left, l->next))
            goto nomem;
    }
    for (int32_t i = 0; i != -1; i = syms[i].next)
        if ((st = emit(t, s, &syms[i], out, err)) != VS_OK) break;
    goto done;
nomem:
    st = vs_error_set(err, VS_ERR_NOMEM, "tokenize: out of memory (%zu bytes of text)", len);
done:
    vs_free(s);
    vs_free(syms);
    bg_heap_free(&h);
    return st;
}
