/* train_data: the generated world (world.h) as training batches for the VLM trainer (train_model.h).
 * Owns: the encoding of a conversation into the rows the LM sees (vs_train_encode), the table of
 * encoded sequences of a dataset (token ids, image rows, answer flags: built once, a few bytes per
 * row), the epoch order (a shuffle drawn from the checkpointed RNG, grouped into length buckets), and
 * the batch buffers it fills (tokens, image-row indices, next-token targets, loss mask, pixels, and
 * with opts.ground the attention grounds of the batch's turns).
 *
 * Layout (exactly what inference builds with mmprompt.h, so training and inference agree): the text
 * of a sample is the vicuna conversation of world.h with every answer and a closing "</s>",
 *   "USER: {user 0} ASSISTANT: {answer 0}</s>USER: {user 1} ASSISTANT: {answer 1}</s>",
 * laid out by vs_mm_prompt_build: split at each "<image>", piece 0 tokenised with BOS, "</s>" parsed
 * as the EOS token, image i's NP rows between piece i and piece i + 1. The prompt of turn t (what
 * `vlmspec eval` and the benchmark feed, vs_world_prompt(s, t, false)) is checked to lay out as a
 * prefix of these rows, so the model is trained on exactly the rows it is later prompted with.
 *
 * Loss: row i predicts row i + 1; it is counted with weight 1 when row i + 1 is a token of an answer
 * (each answer's tokens and the "</s>" that closes it; every turn of the conversation), with weight
 * prompt_loss (default 0: not counted) when row i + 1 is any other text token after BOS (the
 * prompts: questions, and in text-only worlds the scene or document they are about). Image rows and
 * padding are never counted. The loss is the weighted mean over the counted rows.
 *
 * Sequence-length policy (no silent truncation): one conversation per sequence (no packing: causal
 * attention would let a sample see another's images); a conversation longer than seq_len rows is
 * SKIPPED and counted in the stats (per suite), never cut. Batches group sequences of similar length
 * (a shuffled epoch is cut into chunks of `bucket` batches, each chunk sorted by length, then the
 * batch order is shuffled), and a batch is as long as its longest sequence; shorter ones are padded
 * at the end with loss mask 0.
 *
 * Epochs and resuming: the data state is (epoch, batches consumed in it, the RNG state at the start
 * of the epoch). The epoch's order is drawn from a copy of that RNG; when the epoch ends the RNG moves
 * on to the copy's state after drawing. Restoring a state (vs_train_data_set_state, e.g. from a
 * checkpoint's train.epoch / train.data_pos / train.rng) continues with exactly the batches an
 * uninterrupted run would have seen. */
#ifndef VS_TRAIN_DATA_H
#define VS_TRAIN_DATA_H

#include "image.h"
#include "tokenizer.h"
#include "train_model.h"
#include "world.h"

/* ---------------------------------------------------------------------------------------------- */
/* One conversation as LM rows */

typedef struct vs_train_example {
    int32_t n_rows;   /* positions the whole conversation occupies (BOS, text, image rows) */
    int32_t n_images; /* images of the sample (all turns) */
    int32_t n_answer; /* answer rows (tokens of answers and their closing </s>) */
    int32_t n_turns;
    int32_t *tokens;  /* (n_rows) token id; -1 on image rows */
    int32_t *img_row; /* (n_rows) image * image_rows + patch on image rows; -1 on text rows */
    uint8_t *answer;  /* (n_rows) 1 on answer rows */
    int32_t turn_start[VS_WORLD_MAX_TURNS]; /* first answer row of turn t = rows of its prompt */
    int32_t turn_end[VS_WORLD_MAX_TURNS];   /* one past turn t's closing </s> */
} vs_train_example;

/* The conversation text the trainer lays out: vs_world_prompt(s, last, true) + "</s>" (vs_malloc'd). */
char *vs_train_conversation(const vs_world_sample *s);

/* Encodes sample s with tokenizer tok, every image taking image_rows rows. Fails (VS_ERR_INVALID)
 * when the tokenizer has no EOS, when the sample's image markers do not match its images, or when
 * a turn's prompt does not lay out as a prefix of the conversation (inference would then see other
 * rows than training did). */
vs_status vs_train_encode(const vs_world_sample *s, const vs_tokenizer *tok, int image_rows,
                          vs_train_example *ex, vs_error *err);
/* The same with every picture in words (vs_world_prompt_words): no image rows; the LM-only form of a
 * world's conversations (`train target --images-as-text`). */
vs_status vs_train_encode_words(const vs_world_sample *s, const vs_tokenizer *tok, vs_train_example *ex,
                                vs_error *err);
void vs_train_example_free(vs_train_example *ex);

/* Encodes a plain text document (language-model pretraining, no chat template): BOS, the tokens of
 * text (special tokens such as "</s>" parsed), EOS; every row after BOS is counted in the loss, so the
 * model learns the text and where it ends. One turn: turn_start[0] = 1, turn_end[0] = n_rows. */
vs_status vs_train_encode_text(const char *text, const vs_tokenizer *tok, vs_train_example *ex,
                               vs_error *err);

/* ---------------------------------------------------------------------------------------------- */
/* A dataset as batches */

typedef struct vs_train_data_opts {
    int seq_len;        /* longest sequence in rows (T); longer conversations are skipped */
    int batch;          /* sequences per batch (B) */
    int image_rows;     /* rows per image = the model's (vs_train_vlm_image_rows: NP, or pooled) */
    vs_preproc preproc; /* image preprocessing (size = the ViT's S, mean/std as exported) */
    int bucket;         /* batches per length-sorted chunk; <= 1: no length grouping */
    float prompt_loss;  /* weight of prompt text rows in the loss (0: answers only; 1: every text row) */
    bool images_as_text; /* every picture in words (vs_train_encode_words) instead of image rows */
    float words_frac;    /* 0..1: this share of the samples with pictures in words instead (each sample's
                          * form drawn once from seed and its place in the sets: the same every epoch and
                          * on resume); images_as_text is words_frac 1 */
    uint64_t seed;      /* seeds the epoch RNG of a fresh state */
    bool ground;        /* batches carry attention grounds (vs_train_batch.ground): for every turn of a
                         * sequence with image rows whose query vs_world_ground_mask grounds, the row
                         * that predicts the answer's first token and the patches of its image the
                         * answer lies in (image rows on a square grid of at most 64) */
    bool ground_answer; /* with ground: every row that predicts a token of such a turn's answer
                         * (its closing </s> included), not only the first */
    bool ground_chars;  /* with ground_answer, for reading turns (read_all, read_line, read_color):
                         * each row that predicts a token writing characters of a line the turn reads
                         * grounded on those characters' patches (vs_world_glyph_masks) instead;
                         * needs the tokenizer (vs_train_data_new) */
} vs_train_data_opts;

/* Counts over the dataset (one epoch). */
typedef struct vs_train_data_stats {
    int64_t n_samples;       /* conversations offered */
    int64_t n_seqs;          /* kept: fit in seq_len */
    int64_t n_skipped;       /* longer than seq_len: skipped (never truncated) */
    int64_t longest_skipped; /* rows of the longest skipped conversation (0: none) */
    int64_t longest;         /* rows of the longest kept sequence */
    int64_t rows;            /* rows of all kept sequences */
    int64_t answer_rows;     /* answer rows: counted in the loss with weight 1 */
    int64_t prompt_rows;     /* prompt text rows after BOS: counted with weight prompt_loss */
    int64_t images;          /* images of the kept sequences */
    int64_t in_words;        /* samples with pictures written in words (images_as_text, words_frac) */
    int64_t grounds;         /* grounded rows (opts.ground: one per grounded turn, or with
                              * ground_answer one per row predicting its answer) */
    int64_t max_images;      /* most images in one kept sequence */
    int64_t n_batches;       /* batches per epoch */
    int64_t kept[VS_WORLD_N_SUITES], skipped[VS_WORLD_N_SUITES];
} vs_train_data_stats;

/* Where the reader is: see the top of this file. */
typedef struct vs_train_data_state {
    uint64_t epoch; /* epochs completed */
    uint64_t pos;   /* batches of the current epoch consumed */
    vs_rng rng;     /* the RNG at the start of the current epoch */
} vs_train_data_state;

/* What a batch holds besides the vs_train_batch. */
typedef struct vs_train_batch_info {
    int64_t rows;    /* rows that are not padding */
    int64_t counted; /* rows counted in the loss (weight > 0) */
    uint64_t epoch;  /* the batch is number `index` of epoch `epoch` */
    uint64_t index;
    const int64_t *seqs; /* (batch.B) its sequences (vs_train_data_sample), valid until the next batch */
} vs_train_batch_info;

typedef struct vs_train_data vs_train_data;

/* Encodes every sample of the n_sets datasets (borrowed: they must outlive the reader). Fails on a
 * sample that cannot be encoded (naming it) and when no sample fits in seq_len. The state starts
 * at epoch 0, batch 0, RNG seeded with opts->seed. */
vs_train_data *vs_train_data_new(const vs_world_dataset *const *sets, int n_sets, const vs_tokenizer *tok,
                                 const vs_train_data_opts *opts, vs_error *err);
void vs_train_data_free(vs_train_data *d);

/* One pre-encoded sequence for vs_train_data_new_items: its rows (copied by the reader) and the
 * sample whose first ex->n_images images its image rows show (borrowed: it must outlive the reader;
 * NULL for a sequence without images). suite only sorts the stats (any VS_WORLD_* value). */
typedef struct vs_train_item {
    const vs_train_example *ex;
    const vs_world_sample *sample;
    int suite;
} vs_train_item;
/* A reader over given sequences (e.g. text documents, filtered or distilled conversations), with the
 * same skipping, bucketing, epochs and state as vs_train_data_new. */
vs_train_data *vs_train_data_new_items(const vs_train_item *items, int64_t n, const vs_train_data_opts *opts,
                                       vs_error *err);
const vs_train_data_stats *vs_train_data_get_stats(const vs_train_data *d);
/* Largest batch the reader produces: use for vs_train_vlm_new (max_B, max_T, max_images). */
void vs_train_data_capacity(const vs_train_data *d, int *max_B, int *max_T, int *max_images);

void vs_train_data_get_state(const vs_train_data *d, vs_train_data_state *st);
/* Restores a state (rebuilds that epoch's order). VS_ERR_INVALID when pos exceeds the epoch. */
vs_status vs_train_data_set_state(vs_train_data *d, const vs_train_data_state *st, vs_error *err);

/* The next batch (moving to the next epoch when the current one is done). b's arrays point into the
 * reader and stay valid until the next call; b->loss_norm is 0 (this batch's counted rows). Image
 * files are loaded and preprocessed here (errors name the file). */
vs_status vs_train_data_next(vs_train_data *d, vs_train_batch *b, vs_train_batch_info *info, vs_error *err);
/* The summed loss weights of the next k batches (answer rows, plus prompt_loss times the prompt text
 * rows), without moving: gradient accumulation's loss_norm. */
double vs_train_data_counted_ahead(const vs_train_data *d, int k);

/* Kept sequences, in dataset order: the sample behind sequence i (NULL for an item without one). */
int64_t vs_train_data_n_seqs(const vs_train_data *d);
const vs_world_sample *vs_train_data_sample(const vs_train_data *d, int64_t i);
/* A batch of chosen sequences (1 <= n <= opts.batch), e.g. for tests and validation. */
vs_status vs_train_data_batch(vs_train_data *d, const int64_t *seqs, int n, vs_train_batch *b,
                              vs_train_batch_info *info, vs_error *err);

#endif
