/* tokenizer: text <-> token ids for the two vocabularies llama.cpp's GGUF files carry.
 * Owns: one immutable vocabulary (token texts, scores, types, merges, special ids, flags) loaded from
 * a GGUF's tokenizer.ggml.* metadata (or built from plain arrays, e.g. by the BPE trainer), the two
 * tokenisation algorithms over it, and the streaming detokeniser state.
 *   model "llama": SentencePiece BPE by token score; text gets a leading space, spaces become U+2581,
 *                  characters no token covers fall back to <0xNN> byte tokens (else the UNK token).
 *   model "gpt2":  byte-level BPE: a pre-tokeniser regex (chosen by tokenizer.ggml.pre) splits the text,
 *                  bytes map to printable code points, pairs merge by rank from tokenizer.ggml.merges.
 * A vs_tokenizer never changes after construction: it may be shared by threads (tokenise allocates
 * its own scratch per call). Token ids are int32_t in [0, n_vocab). */
#ifndef VS_TOKENIZER_H
#define VS_TOKENIZER_H

#include "common.h"
#include "gguf.h"

typedef struct vs_tokenizer vs_tokenizer;

typedef enum vs_tok_model {
    VS_TOK_MODEL_SPM = 1, /* GGUF tokenizer.ggml.model "llama" */
    VS_TOK_MODEL_BPE = 2, /* GGUF tokenizer.ggml.model "gpt2" */
} vs_tok_model;

/* Token types: the values of GGUF's tokenizer.ggml.token_type array. */
typedef enum vs_token_type {
    VS_TOKEN_UNDEFINED = 0,
    VS_TOKEN_NORMAL = 1,
    VS_TOKEN_UNKNOWN = 2,
    VS_TOKEN_CONTROL = 3,      /* BOS, EOS, <|im_end|> ...: rendered only on request */
    VS_TOKEN_USER_DEFINED = 4, /* always matched verbatim in text, rendered verbatim */
    VS_TOKEN_UNUSED = 5,
    VS_TOKEN_BYTE = 6, /* <0xNN> byte-fallback tokens (SentencePiece) */
} vs_token_type;

/* A vocabulary given as plain arrays (everything is copied by vs_tokenizer_new). */
typedef struct vs_tokenizer_spec {
    const char *model;          /* "llama" or "gpt2" */
    const char *pre;            /* gpt2 pre-tokeniser: "gpt-2", "starcoder", "llama3" (alias "llama-bpe"),
                                   "qwen2", "deepseek-coder", or NULL / "default" = llama.cpp's default
                                   set; llama: NULL or "default" */
    int64_t n_vocab;            /* > 0 */
    const char *const *tokens;  /* [n_vocab] token texts (as stored: U+2581 / byte-mapped form) */
    const size_t *token_lens;   /* [n_vocab] byte lengths, or NULL to use strlen */
    const float *scores;        /* [n_vocab] or NULL (all 0); SentencePiece merge priority */
    const int32_t *types;       /* [n_vocab] vs_token_type values, or NULL (all NORMAL) */
    int64_t n_merges;           /* gpt2 only */
    const char *const *merges;  /* [n_merges] "left right", rank = index */
    const size_t *merge_lens;   /* [n_merges] or NULL to use strlen */
    int32_t bos, eos, unk, pad; /* -1 = none */
    int32_t eot;                /* end-of-turn id, -1 = none (also ends generation) */
    int add_bos, add_eos;       /* 1 / 0, or -1 = the model's default (llama: bos yes; gpt2: no) */
    int add_space_prefix;       /* llama: 1 / 0, or -1 = default (1); ignored for gpt2 */
    const char *name;           /* general.name or NULL: llama.cpp gives Phi-3's special tokens
                                   "rstrip" (whitespace after them is dropped); we do the same */
} vs_tokenizer_spec;

/* Fills *spec with "nothing given": NULL arrays, special ids -1, flags -1 (model defaults). */
void vs_tokenizer_spec_init(vs_tokenizer_spec *spec);
/* Builds a tokenizer from arrays; checks them (lengths, special ids in range, merges naming tokens
 * that exist, known pre-tokeniser). NULL + err on failure. */
vs_tokenizer *vs_tokenizer_new(const vs_tokenizer_spec *spec, vs_error *err);
/* Reads tokenizer.ggml.* from an open GGUF (everything is copied: the vs_gguf may be closed after). */
vs_tokenizer *vs_tokenizer_from_gguf(const vs_gguf *g, vs_error *err);
/* Opens a GGUF file, reads its tokenizer, closes it. */
vs_tokenizer *vs_tokenizer_load(const char *path, vs_error *err);
void vs_tokenizer_free(vs_tokenizer *t);

/* --- vocabulary --- */
vs_tok_model vs_tokenizer_model(const vs_tokenizer *t);
const char *vs_tokenizer_pre(const vs_tokenizer *t); /* gpt2 pre-tokeniser name; "" for llama */
int32_t vs_tokenizer_n_vocab(const vs_tokenizer *t);
/* Stored token text (U+2581 / byte-mapped form), NUL-terminated; *len (may be NULL) gets its byte
 * length. NULL for an id out of range. */
const char *vs_tokenizer_token_text(const vs_tokenizer *t, int32_t id, size_t *len);
/* The bytes the token stands for in output text (U+2581 -> ' ', <0x0A> -> "\n", byte-level
 * mapping undone); control tokens give their text. Not NUL-terminated when it holds raw bytes:
 * use *len. NULL for an id out of range. */
const char *vs_tokenizer_token_piece(const vs_tokenizer *t, int32_t id, size_t *len);
vs_token_type vs_tokenizer_token_type(const vs_tokenizer *t, int32_t id); /* UNDEFINED if out of range */
float vs_tokenizer_token_score(const vs_tokenizer *t, int32_t id);
/* Id of an exact token text, or -1. */
int32_t vs_tokenizer_find(const vs_tokenizer *t, const char *text, size_t len);

/* Special ids, -1 when the vocabulary has none. */
int32_t vs_tokenizer_bos(const vs_tokenizer *t);
int32_t vs_tokenizer_eos(const vs_tokenizer *t);
int32_t vs_tokenizer_eot(const vs_tokenizer *t);
int32_t vs_tokenizer_unk(const vs_tokenizer *t);
int32_t vs_tokenizer_pad(const vs_tokenizer *t);
bool vs_tokenizer_add_bos(const vs_tokenizer *t);
bool vs_tokenizer_add_eos(const vs_tokenizer *t);
/* True for EOS and EOT: generation stops there. */
bool vs_tokenizer_is_eog(const vs_tokenizer *t, int32_t id);

/* --- tokenise --- */
/* Tokenises text[0..len) (any bytes; NUL is an ordinary byte) into out[0..cap).
 *   add_special:   prepend BOS / append EOS as the file's add_bos / add_eos flags say.
 *   parse_special: text equal to a CONTROL token (e.g. "<s>", "<|im_end|>") becomes that token;
 *                  USER_DEFINED tokens are always matched, as llama.cpp does.
 * *n_out gets the number of tokens. If they do not fit in cap, nothing is truncated silently: the
 * call returns VS_ERR_RANGE, *n_out holds the count needed and out's content is unspecified.
 * Invalid UTF-8 is tokenised byte-wise (SentencePiece: byte fallback; gpt2: its bytes), never
 * rejected. */
vs_status vs_tokenize(const vs_tokenizer *t, const char *text, size_t len, bool add_special,
                      bool parse_special, int32_t *out, int64_t cap, int64_t *n_out, vs_error *err);
/* Same, into a vs_malloc'ed array (*out, free with vs_free; NULL when *n_out is 0). */
vs_status vs_tokenize_alloc(const vs_tokenizer *t, const char *text, size_t len, bool add_special,
                            bool parse_special, int32_t **out, int64_t *n_out, vs_error *err);

/* --- detokenise --- */
enum {
    /* Drop the one space the tokenizer inserts (llama / add_space_prefix): at the start of the text
     * and after each control token. Use it to detokenise a whole tokenize() output; leave it off
     * when streaming tokens generated after a prompt. */
    VS_DETOK_STRIP_SPACE = 1 << 0,
    /* Emit the text of CONTROL tokens (<s>, </s> ...); by default they produce nothing. */
    VS_DETOK_RENDER_SPECIAL = 1 << 1,
};

/* Streaming detokeniser: feed ids one (or a few) at a time, get only complete UTF-8 back. Bytes that
 * end inside a UTF-8 sequence are held until it completes; a sequence that cannot complete becomes
 * U+FFFD (one per maximal invalid subsequence). Output is valid UTF-8 always. */
typedef struct vs_detok vs_detok;
vs_detok *vs_detok_new(const vs_tokenizer *t, int flags, vs_error *err);
void vs_detok_free(vs_detok *d);
void vs_detok_reset(vs_detok *d); /* back to the start-of-text state, nothing held */
/* Appends the text of ids[0..n) that is complete so far. Returns a pointer to that new text (valid
 * until the next call on d; NUL-terminated, *len its length); NULL + err for an id out of range
 * (the stream is unchanged then). */
const char *vs_detok_feed(vs_detok *d, const int32_t *ids, int64_t n, size_t *len, vs_error *err);
/* Ends the stream: held incomplete bytes become U+FFFD. Returns that text ("" when nothing held). */
const char *vs_detok_flush(vs_detok *d, size_t *len);

/* One shot: ids -> a vs_malloc'ed NUL-terminated UTF-8 string (*len its length, may be NULL). */
char *vs_detokenize(const vs_tokenizer *t, const int32_t *ids, int64_t n, int flags, size_t *len,
                    vs_error *err);

/* --- draft / target pairs --- */
/* VS_OK when a and b tokenise every text identically and give every id the same meaning: same model
 * and pre-tokeniser, same vocabulary size and token texts, same types, scores (llama) or merges
 * (gpt2), same special ids and add flags. Otherwise VS_ERR_INVALID with the first difference named
 * (e.g. "token 1234 differs: 'abc' vs 'abd'"). */
vs_status vs_tokenizer_compatible(const vs_tokenizer *a, const vs_tokenizer *b, vs_error *err);

/* GPT-2's byte-to-unicode mapping of byte-level BPE: byte b is written in token texts as code point cp[b]
 * (the printable Latin-1 bytes as themselves, the others as 256, 257, ... in byte order). texts[b]: that
 * code point as NUL-terminated UTF-8, the token text of the single byte b. */
void vs_gpt2_byte_map(uint32_t cp[256]);
void vs_gpt2_byte_texts(char texts[256][4]);

#endif
