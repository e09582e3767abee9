/* mmprompt: a multimodal prompt as the LM sees it - text pieces and images' embedding rows laid out
 * at consecutive positions.
 * Owns: vs_mm_prompt (the row list: a token id or a pointer to an image's projected row per
 * position), its construction from prompt text with image markers, filling vs_lm_row batches from
 * it, and a chunked prefill helper. It does not own the image rows (the caller's vs_vision_embed
 * output), which must outlive the prompt.
 *
 * Layout (llama.cpp's mtmd convention; docs/formats.md, 'Multimodal prompt layout'): the text is
 * split at each marker ("<image>");
 * piece 0 is tokenised with the tokenizer's special tokens (BOS), every later piece without; image i's
 * rows go between piece i and piece i + 1, one position each, attended causally like text. With
 * the vicuna template "USER: <image>\n{question} ASSISTANT:" that is [BOS "USER:"] [576 image rows]
 * ["\n{question} ASSISTANT:"]. */
#ifndef VS_MMPROMPT_H
#define VS_MMPROMPT_H

#include "lm.h"
#include "tokenizer.h"
#include "vision.h"

/* One image's rows for a prompt (e.g. from vs_vision_embed). Borrowed, not copied. */
typedef struct vs_mm_image {
    const float *rows; /* (n_rows, width) */
    int64_t n_rows;
    int64_t width;
} vs_mm_image;

typedef struct vs_mm_prompt {
    int64_t n_rows;     /* positions the prompt occupies */
    int32_t *tokens;    /* (n_rows) token id; -1 on image rows */
    const float **embd; /* (n_rows) image row (into a vs_mm_image); NULL on text rows */
    int32_t n_images;
    int64_t *image_first; /* (n_images) row index of each image's first row */
    int64_t n_text;       /* text tokens, BOS included */
} vs_mm_prompt;

typedef struct vs_mm_prompt_opts {
    const char *marker;    /* image marker; NULL = "<image>" (VS_CHAT_IMAGE_MARKER) */
    bool no_special;       /* do not add BOS to piece 0 (default: as the tokenizer says) */
    bool no_parse_special; /* treat "<s>", "</s>" ... in the text as plain text (default: parsed,
                              as llama.cpp's mtmd does) */
    int64_t lm_width;      /* > 0: every image's width must equal it (the LM's n_embd) */
    int64_t n_ctx;         /* > 0: the prompt must fit (rows <= n_ctx) */
} vs_mm_prompt_opts;

/* Encodes and projects image files for a prompt: features from tower t, rows from projector p (which
 * must accept t's features, vs_vision_check_projector), optional k x k pooling (pool_k <= 1: none).
 * out[i].rows are allocated: release with vs_mm_images_free. On failure nothing stays allocated and
 * the message names the file. */
vs_status vs_mm_images_from_files(const vs_vision_tower *t, const vs_vision_projector *p, vs_threadpool *tp,
                                  const char *const *paths, int32_t n, vs_preproc_mode mode, int32_t pool_k,
                                  vs_mm_image *out, vs_error *err);
void vs_mm_images_free(vs_mm_image *imgs, int32_t n);

/* Builds the row list of text[0..len) with images[0..n_images) at its markers (in order).
 * VS_ERR_INVALID when the number of markers differs from n_images, when an image has no rows or a
 * width other than opts->lm_width; VS_ERR_RANGE when the prompt needs more than opts->n_ctx rows.
 * Messages give the counts. */
vs_status vs_mm_prompt_build(vs_mm_prompt *p, const vs_tokenizer *tok, const char *text, size_t len,
                             const vs_mm_image *images, int32_t n_images, const vs_mm_prompt_opts *opts,
                             vs_error *err);
void vs_mm_prompt_free(vs_mm_prompt *p);
/* Number of markers in text[0..len) (marker NULL = "<image>"). */
int32_t vs_mm_count_markers(const char *text, size_t len, const char *marker);

/* Fills rows[0..n) for prompt rows [first, first + n): token or embedding, sequence seq, position
 * pos0 + first + i, no logits, causal. */
void vs_mm_prompt_rows(const vs_mm_prompt *p, int64_t first, int64_t n, int32_t seq, int32_t pos0,
                       vs_lm_row *rows);

/* Prefill: appends the whole prompt to sequence seq of kv (positions continue from the sequence's
 * current length) in batches of at most n_batch rows (<= 0: one batch), and writes the logits after
 * the last row into logits (n_vocab floats; may be NULL). VS_ERR_RANGE, with nothing written, when
 * the rows do not fit in the cache. */
vs_status vs_mm_prompt_eval(vs_lm *lm, vs_kv *kv, vs_threadpool *tp, const vs_mm_prompt *p, int32_t seq,
                            int64_t n_batch, float *logits, vs_error *err);

#endif
