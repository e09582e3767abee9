/* tokenizer_impl: the private layout of vs_tokenizer shared by tokenizer*.c. Not for other modules. */
#ifndef VS_TOKENIZER_IMPL_H
#define VS_TOKENIZER_IMPL_H

#include "pretok.h"
#include "tokenizer.h"

/* Per-token attribute bits (beyond the type), as llama.cpp assigns them. */
enum {
    VS_TOKATTR_LSTRIP = 1 << 0, /* whitespace before the token (when matched as special) is dropped */
    VS_TOKATTR_RSTRIP = 1 << 1, /* whitespace after it is dropped */
    VS_TOKATTR_EOG = 1 << 2,    /* ends generation */
};

/* Open-addressing map from token text to id: slots hold ids (-1 empty), cap is a power of two. */
typedef struct vs_tok_map {
    int32_t *slots; /* [mask + 1] */
    uint64_t mask;
} vs_tok_map;

/* Open-addressing map from an id pair (left << 32 | right) to (rank, merged id). */
typedef struct vs_merge_map {
    uint64_t *keys; /* [mask + 1], UINT64_MAX = empty */
    int32_t *rank;  /* [mask + 1] */
    int32_t *result;
    uint64_t mask;
} vs_merge_map;

struct vs_tokenizer {
    vs_tok_model model;
    int32_t n_vocab;
    char *text;          /* arena: token texts, each NUL-terminated */
    uint64_t *text_off;  /* [n_vocab + 1] offsets into text (lengths exclude the NUL) */
    char *piece;         /* arena: rendered bytes of each token (see vs_tokenizer_token_piece) */
    uint64_t *piece_off; /* [n_vocab + 1] */
    float *scores;       /* [n_vocab] */
    uint8_t *types;      /* [n_vocab] vs_token_type */
    uint8_t *attrs;      /* [n_vocab] VS_TOKATTR_* */
    vs_tok_map map;

    /* gpt2 */
    const vs_pretok *pretok; /* pretok.h */
    vs_pretok_re pre_re;     /* its compiled regexes */
    int64_t n_merges;
    int32_t *merge_pairs; /* [n_merges][2] (left, right) ids, in rank order */
    vs_merge_map merges;
    uint32_t byte_cp[256]; /* byte -> code point of the byte-level mapping */

    int32_t byte_tok[256]; /* byte -> token (<0xNN> for llama, mapped char for gpt2), -1 if none */

    int32_t bos, eos, eot, unk, pad;
    bool add_bos, add_eos, add_space_prefix;

    int32_t *special; /* ids matched verbatim in text: CONTROL / USER_DEFINED / UNKNOWN, longest first */
    int64_t n_special;
};

/* Growable id vector used while tokenising. */
typedef struct vs_idvec {
    int32_t *v;
    int64_t n, cap;
} vs_idvec;
vs_status vs_idvec_push(vs_idvec *a, int32_t id, vs_error *err);

static inline const char *vs_tok_text(const vs_tokenizer *t, int32_t id, size_t *len) {
    *len = (size_t)(t->text_off[id + 1] - t->text_off[id] - 1);
    return t->text + t->text_off[id];
}

int32_t vs_tok_map_find(const vs_tokenizer *t, const char *s, size_t n);
uint64_t vs_tok_hash(const char *s, size_t n);

/* SentencePiece over one raw fragment (the space prefix already decided by the caller). */
vs_status vs_tok_spm_fragment(const vs_tokenizer *t, const char *text, size_t len, bool space_prefix,
                              vs_idvec *out, vs_error *err);
/* Byte-level BPE over one raw fragment. */
vs_status vs_tok_bpe_fragment(const vs_tokenizer *t, const char *text, size_t len, vs_idvec *out,
                              vs_error *err);

/* gpt2 set-up: pre-tokeniser lookup + regex compile, byte mapping, merges. */
vs_status vs_tok_bpe_init(vs_tokenizer *t, const char *pre, const vs_tokenizer_spec *spec, vs_error *err);
void vs_tok_bpe_free(vs_tokenizer *t);
/* Writes the UTF-8 of code point cp to out (>= 4 bytes), returns its length. */
int vs_utf8_put(uint32_t cp, char *out);
/* Decodes one code point from s[0..n) (valid UTF-8 only); returns its length or 0 if invalid. */
int vs_utf8_get(const uint8_t *s, size_t n, uint32_t *cp);

#endif
