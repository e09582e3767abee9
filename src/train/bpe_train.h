/* bpe_train: a byte-level BPE trainer (GPT-2 style) and its GGUF tokenizer writer.
 * Owns: the word-frequency table built from added texts, the merge learning (incremental pair counts
 * with a lazy max-heap: each merge touches only the words that contain the merged pair), and the
 * resulting vocabulary.
 *
 * Pre-tokenisation (vs_bpe_pre) is the tokenizer's own "gpt-2" or "starcoder" entry of pretok.h, run by
 * the same splitter: GPT-2's regex, or for "starcoder" first every digit (\p{N}) cut out as a piece of its
 * own and GPT-2's regex run on the text between them, so numbers are spelled digit by digit and no merge
 * ever holds a digit. The GGUF records the choice as tokenizer.ggml.pre, so the tokenizer module splits
 * text exactly as training did and reproduces the learned merges. Special tokens are cut out of the text before
 * pre-tokenisation and never take part in merges.
 *
 * Vocabulary layout written: 0 "<unk>", 1 "<s>", 2 "</s>", 3 "<image>" (all CONTROL), 4..259 the 256
 * byte tokens (byte b as GPT-2's byte-to-unicode character), then one token per merge in rank order. */
#ifndef VS_BPE_TRAIN_H
#define VS_BPE_TRAIN_H

#include "common.h"

#define VS_BPE_N_SPECIAL 4
#define VS_BPE_UNK 0
#define VS_BPE_BOS 1
#define VS_BPE_EOS 2
#define VS_BPE_IMAGE 3
#define VS_BPE_FIRST_BYTE VS_BPE_N_SPECIAL

typedef struct vs_bpe_trainer vs_bpe_trainer;

typedef enum vs_bpe_pre {
    VS_BPE_PRE_GPT2 = 0,   /* "gpt-2" */
    VS_BPE_PRE_DIGITS = 1, /* "starcoder": single digits */
} vs_bpe_pre;
const char *vs_bpe_pre_name(vs_bpe_pre pre); /* the tokenizer.ggml.pre value */
/* "gpt-2" or "starcoder" (the names vs_bpe_pre_name gives); false for anything else. */
bool vs_bpe_pre_parse(const char *name, vs_bpe_pre *out);

/* The learned vocabulary. Strings are NUL-terminated UTF-8, in the stored (byte-mapped) form. */
typedef struct vs_bpe_vocab {
    int64_t n_vocab;
    char **tokens;   /* [n_vocab] */
    int32_t *types;  /* [n_vocab] 1 normal, 3 control */
    int64_t n_merges;
    char **merges;   /* [n_merges] "left right", rank = index */
    int32_t *merge_left, *merge_right; /* [n_merges] ids merged; the result is id VS_BPE_FIRST_BYTE + 256 + rank */
    vs_bpe_pre pre;                    /* the trainer's pre-tokeniser */
} vs_bpe_vocab;

vs_bpe_trainer *vs_bpe_trainer_new(vs_error *err); /* VS_BPE_PRE_GPT2 */
vs_bpe_trainer *vs_bpe_trainer_new_pre(vs_bpe_pre pre, vs_error *err);
void vs_bpe_trainer_free(vs_bpe_trainer *t);
/* Adds one text (UTF-8) to the corpus: special tokens are cut out, the rest is pre-tokenised and its
 * pieces counted. Invalid UTF-8 is kept as bytes (gap pieces, as the tokenizer splits it: pretok.h). */
vs_status vs_bpe_add_text(vs_bpe_trainer *t, const char *text, size_t len, vs_error *err);
/* Number of distinct pre-tokenised pieces and their total count so far. */
void vs_bpe_corpus_size(const vs_bpe_trainer *t, int64_t *n_distinct, int64_t *n_total);
/* Learns merges until the vocabulary has vocab_size tokens (>= 260) or no pair occurs twice.
 * min_pair_count: pairs seen fewer times are never merged (>= 2). Deterministic: ties between equally
 * frequent pairs go to the smaller (left id, right id). */
vs_status vs_bpe_train(vs_bpe_trainer *t, int64_t vocab_size, int64_t min_pair_count, vs_bpe_vocab *out, vs_error *err);
void vs_bpe_vocab_free(vs_bpe_vocab *v);

/* Writes a vocab-only GGUF: general.architecture "llama", general.name, tokenizer.ggml.model "gpt2",
 * tokenizer.ggml.pre (vs_bpe_pre_name of v->pre), tokens, token_type, merges, bos/eos/unk ids,
 * add_bos_token true, add_eos_token false. */
vs_status vs_bpe_write_gguf(const vs_bpe_vocab *v, const char *path, const char *name, vs_error *err);

/* Reference encoder over the learned merges (v->pre's pre-tokeniser; applies them by rank inside each
 * piece; special tokens in the text become their ids). For tests that compare with the tokenizer module.
 * *out is vs_malloc'd. */
vs_status vs_bpe_encode(const vs_bpe_vocab *v, const char *text, size_t len, int32_t **out, int64_t *n_out,
                        vs_error *err);

/* GPT-2 pre-tokenisation as training sees it: calls fn for each piece of text[0..len) (no special-token
 * handling). */
vs_status vs_bpe_pretokenize(const char *text, size_t len, void (*fn)(void *ctx, const char *piece, size_t n),
                             void *ctx, vs_error *err);

#endif
