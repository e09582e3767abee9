/* caption: image captions for caption drafting (C, docs/algorithms.md, 'Drafting inputs'; TABED sec. 6.1, app. E).
 * Owns: the captioner (a VLM - normally the drafter itself: its LM and its projector over the shared ViT
 * features - prompted for a short caption and decoded greedily), the caption source an ensemble drafter
 * reads (fixed texts from a file / the caller, or a captioner run once per image per request), the
 * thread that runs the captioner concurrently with the target's prefill, and the captions file format.
 *
 * Concurrency (TABED app. E: captioning hides behind the target's prefill). vs_caption_src_start, called
 * by the drafter's begin (which the engine calls just before the target's prefill), starts one thread
 * that captions every image of the request and returns at once; the drafter calls vs_caption_src_wait
 * before its first draft step (after the prefill) and only then builds and evaluates its C row. While
 * the thread runs, the drafter runs no forward of its own, so the captioner may borrow the drafter's
 * vs_lm. It must NOT share a vs_lm or a thread pool with the target's prefill: start(async = false)
 * captions synchronously for such set-ups (the drafter decides, see draft_ensemble.h).
 * The captioner's wall time (vs_caption_src_seconds) and the time the drafter waited for it are
 * reported separately from the prefill.
 *
 * Captions file (--captions FILE), UTF-8 text, one caption per line; blank lines and lines starting
 * with '#' are ignored. Either every line is "KEY<TAB>CAPTION", where KEY is an image's path as given on
 * the command line or its file name, or no line has a tab and line i is the caption of image i.
 * A missing caption, a duplicate key, an unknown key, a count that differs from the images or an empty
 * caption is an error naming the file and line. */
#ifndef VS_CAPTION_H
#define VS_CAPTION_H

#include "lm.h"
#include "threadpool.h"
#include "tokenizer.h"
#include "vision.h"

/* ------------------------------------------------------------------------------------------------
 * Captioner */

typedef struct vs_captioner_opts {
    const char *prompt; /* template with exactly one "<image>" marker; NULL = VS_CAPTION_PROMPT */
    int32_t max_tokens; /* longest caption in tokens (<= 0: 24) */
    int32_t pool_k;     /* pool the features k x k before projecting (<= 1: none) */
    vs_threadpool *tp;  /* the pool the captioner computes with (borrowed; NULL = its own thread only);
                         * must not be a pool another thread uses at the same time */
    bool same_thread;   /* caption on the requesting thread, never on one of its own during the target's
                         * prefill (sessions that share their models with other threads: batch.h) */
} vs_captioner_opts;

#define VS_CAPTION_PROMPT "USER: <image>\nDescribe the image in one short sentence. ASSISTANT:"

typedef struct vs_captioner vs_captioner;

/* lm and proj are borrowed (proj's output width must equal lm's width). */
vs_captioner *vs_captioner_new(vs_lm *lm, const vs_vision_projector *proj, const vs_captioner_opts *o,
                               vs_error *err);
void vs_captioner_free(vs_captioner *c);
const vs_lm *vs_captioner_lm(const vs_captioner *c);
vs_threadpool *vs_captioner_tp(const vs_captioner *c);
/* Captions one image: greedy decoding after the prompt, stopped at an end-of-generation token, a
 * newline or max_tokens; *text (vs_malloc'ed, NUL-terminated) is trimmed of surrounding white space and
 * may be empty. */
vs_status vs_captioner_caption(vs_captioner *c, const vs_vision_features *f, char **text, vs_error *err);

/* ------------------------------------------------------------------------------------------------
 * Caption source */

typedef struct vs_caption_src vs_caption_src;

/* Fixed captions: texts[i] is image i's caption (copied; NULL = none given). */
vs_caption_src *vs_caption_src_new_texts(const char *const *texts, int32_t n, vs_error *err);
/* Captions from a file (format above) for n_images images named keys[i] (their paths; may be NULL
 * for positional files). */
vs_caption_src *vs_caption_src_from_file(const char *path, const char *const *keys, int32_t n_images,
                                         vs_error *err);
/* Captions made per request by c (borrowed). */
vs_caption_src *vs_caption_src_new_captioner(vs_captioner *c, vs_error *err);
/* Joins a running thread first. */
void vs_caption_src_free(vs_caption_src *s);

/* The captioner's LM and pool (NULL for fixed texts): the drafter runs synchronously when they are
 * the target's. */
const vs_lm *vs_caption_src_lm(const vs_caption_src *s);
vs_threadpool *vs_caption_src_tp(const vs_caption_src *s);
bool vs_caption_src_same_thread(const vs_caption_src *s); /* its captioner's same_thread (false: none) */

/* Starts captioning the request's images (fixed texts: nothing to do). images[i] may be NULL when the
 * request has no features for image i (that image then gets no caption). async: on a new thread;
 * otherwise before returning. The previous request's captions are dropped. */
vs_status vs_caption_src_start(vs_caption_src *s, const vs_vision_features *const *images, int32_t n_images,
                               bool async, vs_error *err);
/* Waits for the thread (if any); returns its error. *waited (may be NULL) receives the seconds spent
 * waiting. */
vs_status vs_caption_src_wait(vs_caption_src *s, double *waited, vs_error *err);
/* Image i's caption after wait ("" possible for a generated one), or NULL when there is none. */
const char *vs_caption_src_get(const vs_caption_src *s, int32_t image);
/* Seconds the captioner ran for the last request (0 for fixed texts). */
double vs_caption_src_seconds(const vs_caption_src *s);

#endif
