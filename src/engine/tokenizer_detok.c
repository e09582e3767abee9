/* tokenizer_detok: ids -> UTF-8 text, streaming. Each token's rendered bytes (vs_tokenizer_token_piece)
 * pass through a UTF-8 assembler that holds an incomplete sequence until its last byte arrives and
 * replaces every maximal invalid subsequence by U+FFFD (the Unicode "substitution of maximal subparts"
 * practice), so the output is always valid UTF-8 whatever the ids. */
#include <string.h>

#include "tokenizer_impl.h"

struct vs_detok {
    const vs_tokenizer *t;
    int flags;
    bool strip_next;  /* the next text-producing token loses one leading space */
    uint8_t held[4];  /* an incomplete UTF-8 sequence */
    int n_held, need; /* bytes held, total length of the sequence they start */
    char *out;        /* the text returned by the latest call */
    size_t n_out, cap_out;
};

static bool out_reserve(vs_detok *d, size_t extra) {
    if (d->n_out + extra + 1 <= d->cap_out) return true;
    size_t cap = d->cap_out ? d->cap_out : 256;
    while (cap < d->n_out + extra + 1) cap *= 2;
    char *p = vs_realloc(d->out, cap);
    if (!p) return false;
    d->out = p;
    d->cap_out = cap;
    return true;
}

static void out_bytes(vs_detok *d, const void *p, size_t n) {
    memcpy(d->out + d->n_out, p, n);
    d->n_out += n;
}

static void out_fffd(vs_detok *d) { out_bytes(d, "\xEF\xBF\xBD", 3); }

/* Allowed range of the byte following `lead` at position `pos` (1-based) of its sequence. */
static bool cont_ok(uint8_t lead, int pos, uint8_t c) {
    uint8_t lo = 0x80, hi = 0xBF;
    if (pos == 1) {
        if (lead == 0xE0)
            lo = 0xA0;
        else if (lead == 0xED)
            hi = 0x9F;
        else if (lead == 0xF0)
            lo = 0x90;
        else if (lead == 0xF4)
            hi = 0x8F;
    }
    return c >= lo && c <= hi;
}

/* Feeds bytes through the assembler; out has room for 3 bytes per input byte + the held ones. */
static void assemble(vs_detok *d, const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint8_t c = p[i];
        if (d->n_held > 0) {
            if (cont_ok(d->held[0], d->n_held, c)) {
                d->held[d->n_held++] = c;
                if (d->n_held == d->need) {
                    out_bytes(d, d->held, (size_t)d->need);
                    d->n_held = 0;
                }
                continue;
            }
            out_fffd(d); /* the held prefix can never complete */
            d->n_held = 0;
        }
        if (c < 0x80)
            out_bytes(d, &c, 1);
        else if (c >= 0xC2 && c <= 0xF4) {
            d->held[0] = c;
            d->n_held = 1;
            d->need = c <= 0xDF ? 2 : c <= 0xEF ? 3 : 4;
        } else
            out_fffd(d);
    }
}

vs_detok *vs_detok_new(const vs_tokenizer *t, int flags, vs_error *err) {
    if (!t) {
        vs_error_set(err, VS_ERR_INVALID, "detokenize: no tokenizer");
        return NULL;
    }
    vs_detok *d = vs_calloc(1, sizeof(vs_detok));
    if (!d || !out_reserve(d, 64)) {
        vs_free(d);
        vs_error_set(err, VS_ERR_NOMEM, "detokenize: out of memory");
        return NULL;
    }
    d->t = t;
    d->flags = flags;
    vs_detok_reset(d);
    return d;
}

void vs_detok_free(vs_detok *d) {
    if (!d) return;
    vs_free(d->out);
    vs_free(d);
}

void vs_detok_reset(vs_detok *d) {
    d->n_held = 0;
    d->n_out = 0;
    d->out[0] = 0;
    d->strip_next = (d->flags & VS_DETOK_STRIP_SPACE) && d->t->add_space_prefix;
}

const char *vs_detok_feed(vs_detok *d, const int32_t *ids, int64_t n, size_t *len, vs_error *err) {
    const vs_tokenizer *t = d->t;
    size_t need = 0;
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab) {
            vs_error_set(err, VS_ERR_INVALID, "detokenize: token id %d is outside the vocabulary [0, %d)",
                         ids[i], t->n_vocab);
            return NULL;
        }
        need += 3 * (size_t)(t->piece_off[ids[i] + 1] - t->piece_off[ids[i]]);
    }
    d->n_out = 0;
    if (!out_reserve(d, need + 8)) {
        vs_error_set(err, VS_ERR_NOMEM, "detokenize: out of memory");
        return NULL;
    }
    bool strip_enabled = (d->flags & VS_DETOK_STRIP_SPACE) && t->add_space_prefix;
    for (int64_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        int ty = t->types[id];
        const uint8_t *p = (const uint8_t *)t->piece + t->piece_off[id];
        size_t m = (size_t)(t->piece_off[id + 1] - t->piece_off[id]);
        if ((ty == VS_TOKEN_CONTROL || ty == VS_TOKEN_UNKNOWN) && !(d->flags & VS_DETOK_RENDER_SPECIAL))
            m = 0;
        if (ty == VS_TOKEN_CONTROL || ty == VS_TOKEN_USER_DEFINED || ty == VS_TOKEN_UNKNOWN) {
            /* the tokenizer puts a space before the text that follows a special token */
            if (m > 0) assemble(d, p, m);
            d->strip_next = strip_enabled;
            continue;
        }
        if (m == 0) continue;
        if (d->strip_next && p[0] == ' ') p++, m--;
        d->strip_next = false;
        assemble(d, p, m);
    }
    d->out[d->n_out] = 0;
    if (len) *len = d->n_out;
    return d->out;
}

const char *vs_detok_flush(vs_detok *d, size_t *len) {
    d->n_out = 0;
    if (d->n_held > 0) {
        out_fffd(d); /* cap_out >= 64 always */
        d->n_held = 0;
    }
    d->out[d->n_out] = 0;
    if (len) *len = d->n_out;
    return d->out;
}

char *vs_detokenize(const vs_tokenizer *t, const int32_t *ids, int64_t n, int flags, size_t *len,
                    vs_error *err) {
    vs_detok *d = vs_detok_new(t, flags, err);
    if (!d) return NULL;
    size_t a, b;
    const char *s = vs_detok_feed(d, ids, n, &a, err);
    char *r = NULL;
    if (s) {
        r = vs_malloc(a + 4);
        if (!r)
            vs_error_set(err, VS_ERR_NOMEM, "detokenize: out of memory");
        else {
            memcpy(r, s, a);
            const char *f = vs_detok_flush(d, &b);
            memcpy(r + a, f, b);
            r[a + b] = 0;
            if (len) *len = a + b;
        }
    }
    vs_detok_free(d);
    return r;
}
