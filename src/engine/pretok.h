/* pretok: the byte-level BPE pre-tokenisers (regex splitters) that llama.cpp names in tokenizer.ggml.pre.
 * Owns: the table of supported pre-tokenisers (name, aliases, regexes), compiling one (PCRE2) and
 * splitting text with it. Used by the tokenizer (tokenizer_bpe.c) and by the BPE trainer (bpe_train.c),
 * so a trained vocabulary is cut exactly as the tokenizer that loads it cuts text.
 *
 * Splitting: the regexes run in order, each one splitting every piece the earlier ones left; both its
 * matches and the gaps between them stay pieces, in text order. Patterns are compiled with UTF, Unicode
 * properties and PCRE2_MATCH_INVALID_UTF: invalid UTF-8 never matches, so such bytes end up in gap
 * pieces, unchanged (no error). An empty match splits nothing. */
#ifndef VS_PRETOK_H
#define VS_PRETOK_H

#include <stdbool.h>
#include <stddef.h>

#include "common.h"

#define VS_PRETOK_MAX_RE 6

/* A pre-tokeniser definition. */
typedef struct vs_pretok {
    const char *name;                        /* canonical name */
    const char *aliases[8];                  /* other tokenizer.ggml.pre values selecting it (NULL-terminated) */
    const char *regex[VS_PRETOK_MAX_RE + 1]; /* NULL-terminated, PCRE2 syntax (UTF + UCP) */
    bool ignore_merges;                      /* a whole piece that is a token is emitted as is (llama3) */
} vs_pretok;

/* The definition named `name` (canonical or alias; NULL or "" = "default", llama.cpp's fallback), or
 * NULL when unknown. */
const vs_pretok *vs_pretok_find(const char *name);
/* The canonical names, comma-separated, into buf (truncated to cap - 1 bytes), for error messages. */
void vs_pretok_names(char *buf, size_t cap);

/* A compiled pre-tokeniser; read-only after vs_pretok_compile, so threads may share it. */
typedef struct vs_pretok_re {
    const vs_pretok *def;
    void *re[VS_PRETOK_MAX_RE]; /* pcre2_code * per regex */
    int n_re;
} vs_pretok_re;

/* Compiles def's regexes into *p (zeroed first). VS_ERR_UNSUPPORTED if a pattern does not compile. */
vs_status vs_pretok_compile(vs_pretok_re *p, const vs_pretok *def, vs_error *err);
void vs_pretok_re_free(vs_pretok_re *p);

/* Called for each piece, in text order: text[off .. off + len). A non-zero status stops the split and
 * is returned by vs_pretok_split. */
typedef vs_status vs_pretok_piece_fn(void *ctx, size_t off, size_t len);

/* Splits text[0..len) into pieces (see the top of this file). VS_ERR_NOMEM, or VS_ERR_INVALID when
 * PCRE2 itself fails (match limits). */
vs_status vs_pretok_split(const vs_pretok_re *p, const char *text, size_t len, vs_pretok_piece_fn *fn, void *ctx,
                          vs_error *err);

#endif
