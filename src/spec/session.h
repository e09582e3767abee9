/* session: the one request path. `generate`, `chat`, `bench spec`, the public API (include/vlmspec.h)
 * and the server run requests through it; target-only decoding is the same path without a drafter.
 * Owns:
 *   vs_models   a model set loaded once: the target LM and its tokenizer, its mmproj (vision tower +
 *               projector), the drafters by role (methods.h: the LLaVA-recipe drafter, the MASSV drafter)
 *               with their projectors, the thread pool, the chat template, the image preprocessing;
 *   vs_session  one conversation over a model set: the speculative engine (spec.h: the target's KV
 *               cache), the drafter of every drafting configuration it has run (kept with its caches, so
 *               a later turn reuses their prefixes), the captioner of the caption methods, the image cache
 *               (ViT features and the target's projected rows of up to 64 images, keyed by the bytes of
 *               the encoded image: a hash, confirmed byte for byte), the cancel flag.
 *
 * A request (vs_request) is a prompt - chat messages formatted with the chat template, raw text with
 * "<image>" markers used as it is, or token ids - its images (files or encoded bytes, one per marker, in
 * order), the drafting (a method of the table in methods.h, or a custom ensemble), sampling, a token
 * limit, stop strings and callbacks. vs_session_run streams the reply through on_tokens (token ids, as
 * each verify block emits them) and on_text (UTF-8 text; with stop strings, text that could begin one
 * is held back until it cannot) and fills a vs_result (tokens, text, why it finished, the run log for
 * the statistics of spec.h).
 *
 * Prefix reuse (vs_request.reuse_prefix): the target cache and the drafter's caches keep the rows the new
 * prompt shares with what they hold, image rows included (an image's identity is its bytes), so a chat
 * turn evaluates only its new rows.
 *
 * Threads: one thread uses a session at a time; the sessions of one vs_models share its thread pool, so
 * they run one at a time, or on several threads that take turns through a batcher (vs_session_opts.batch,
 * batch.h), which also merges their verify forwards. vs_session_cancel may be called from any thread and from a signal handler: the
 * running request stops after the verify block in progress, or before its prefill when it arrives while
 * the prompt and images are prepared (finish VS_FINISH_CANCEL); a cancel that arrives between requests is
 * dropped when the next one starts.
 * Errors: every function takes `vs_error *err` last (NULL allowed). */
#ifndef VS_SESSION_H
#define VS_SESSION_H

#include "batch.h"
#include "caption.h"
#include "chat.h"
#include "draft_ensemble.h"
#include "image.h"
#include "methods.h"
#include "spec.h"

/* ------------------------------------------------------------------------------------------------
 * The model set */

typedef struct vs_models_opts {
    const char *model;                    /* the target LM (GGUF with a tokenizer); required */
    const char *mmproj;                   /* its mmproj (tower + projector); NULL: text only */
    const char *draft[VS_N_ROLES];        /* drafter LMs by role (methods.h; the head roles VS_ROLE_MSD
                                           * and VS_ROLE_EAGLE: head files; VS_ROLE_DREAM: a DREAM file);
                                           * NULL: none */
    const char *draft_mmproj[VS_N_ROLES]; /* their projectors (projector-only files are fine) */
    int32_t threads;                      /* <= 1: the caller's thread only */
    const char *chat_template;            /* chat.h name; NULL: "vicuna-short" (the shipped models' format) */
    vs_preproc_mode preproc;              /* image preprocessing (default VS_PREPROC_LLAVA = 0) */
    bool warm_up;                         /* one forward per LM so the first timed request does not pay the
                                           * page faults of the weights' mapping */
} vs_models_opts;

typedef struct vs_models vs_models;

/* Loads every file; NULL + err naming the file that failed (a projector whose width differs from its
 * LM's, or a target mmproj without a tower, is an error). */
vs_models *vs_models_load(const vs_models_opts *o, vs_error *err);
/* A model set over models the caller has loaded (borrowed: vs_models_free leaves them; they must outlive
 * it): the target, its tokenizer (NULL: token ids only), its mmproj (NULL: text only), the pool (NULL:
 * the caller's thread), the chat template (NULL: "vicuna-short"). No drafters. */
vs_models *vs_models_borrow(vs_lm *target, const vs_tokenizer *tok, const vs_mmproj *mmproj, vs_threadpool *tp,
                            const char *chat_template, vs_error *err);
void vs_models_free(vs_models *m); /* after every session made from it; NULL ok */
vs_lm *vs_models_target(const vs_models *m);
const vs_tokenizer *vs_models_tokenizer(const vs_models *m); /* NULL: the file has none (token ids only) */
const vs_vision_tower *vs_models_tower(const vs_models *m); /* NULL without --mmproj */
vs_lm *vs_models_draft(const vs_models *m, vs_method_role r); /* NULL when not loaded (head roles: always) */
const vs_msd_head *vs_models_head(const vs_models *m, vs_method_role r); /* a head role's file; NULL when not
                                                                          * loaded or r is no head role */
const vs_vision_projector *vs_models_draft_projector(const vs_models *m, vs_method_role r);
vs_threadpool *vs_models_threadpool(const vs_models *m);
const vs_chat_template *vs_models_template(const vs_models *m);

/* ------------------------------------------------------------------------------------------------
 * Sessions */

typedef struct vs_session_opts {
    int32_t n_ctx;          /* target cache rows; <= 0: the target's n_ctx_train (or see fit_ctx) */
    bool fit_ctx;           /* with n_ctx <= 0: size the cache to the request: prompt + token limit + the
                             * widest verify batch + 1 (at most n_ctx_train); a later request that needs
                             * more gets a new cache (nothing reused): for one-shot runs of large-context
                             * models, which then do not reserve their whole context */
    vs_type kv_type;        /* the target's cache: VS_TYPE_F32 (0) or VS_TYPE_F16 */
    int32_t n_batch;        /* prefill rows per forward; <= 0: 512 */
    int32_t draft_n_ctx;    /* drafter cache rows; <= 0: the draft model's n_ctx_train */
    vs_type draft_kv_type;  /* drafter caches: VS_TYPE_F32 (0), F16 or BF16 */
    int32_t caption_tokens; /* the captioner's longest caption (<= 0: 24) */
    vs_caption_src *captions; /* borrowed: fixed captions for the caption methods; NULL: the session's
                               * captioner (the LLaVA-recipe drafter and its projector, on its own thread
                               * during the target's prefill) */
    /* Sessions that run on several threads at once and verify in merged forwards (batch.h): a target cache
     * shared by them (vs_lm_kv_new with one sequence per session; its n_ctx is the session's), this
     * session's sequence of it, and the batcher. The threads hold the batcher's turn while they run a
     * request (vs_batch_enter / vs_batch_leave). NULL: a cache of the session's own. */
    vs_kv *kv;
    int32_t seq;
    vs_batch *batch;
} vs_session_opts;

typedef struct vs_session vs_session;

vs_session *vs_session_new(vs_models *m, const vs_session_opts *o, vs_error *err);
void vs_session_free(vs_session *s); /* NULL ok */
void vs_session_cancel(vs_session *s);
vs_models *vs_session_models(vs_session *s);
vs_spec *vs_session_engine(vs_session *s); /* the engine (vs_spec_time_target, the cache); NULL before the first
                                            * request with fit_ctx */
int32_t vs_session_n_ctx(const vs_session *s);

/* ------------------------------------------------------------------------------------------------
 * Requests */

/* How a request drafts: a method of the table, or a custom ensemble of the LLaVA-recipe drafter. */
typedef struct vs_draft_cfg {
    const char *method;  /* methods.h name; NULL or "ar" = target only (unless n_inputs > 0) */
    int32_t gamma;       /* drafted tokens per block (chain length, tree depth); ignored target-only */
    vs_method_opts opts; /* tree_width, greedy (n_ctx and kv_type come from the session) */
    /* custom ensemble (generate --draft-mode): used when n_inputs > 0 and method is NULL */
    int32_t n_inputs;
    vs_ens_input inputs[VS_ENS_MAX_ROWS];
    vs_ens_weights_cfg weights;
    int32_t pool_k;    /* p: pooling window (<= 0: 2) */
    bool trace;        /* keep the weight trace (vs_draft_ens_trace of vs_result.drafter) */
    bool debug_reject; /* DEBUG / BENCHMARK: drafts the target rejects (draft_ensemble.h) */
} vs_draft_cfg;

/* Target only, gamma 5, chains; custom defaults: static uniform weights, pool 2. */
void vs_draft_cfg_default(vs_draft_cfg *c);

typedef struct vs_req_image {
    const char *path;    /* an image file, or */
    const uint8_t *data; /* its encoded bytes (PNG, JPEG, BMP, GIF, ...) */
    size_t size;
    const char *name; /* for messages (NULL: "image N") */
} vs_req_image;

/* Called with the text of the reply as it is decided (UTF-8, not NUL-terminated); false stops. */
typedef bool (*vs_text_fn)(void *ctx, const char *text, size_t len);

#define VS_REQ_MAX_STOP 8

typedef struct vs_request {
    /* the prompt: exactly one of msgs, prompt, ids */
    const vs_chat_msg *msgs; /* formatted with the model set's chat template + the assistant header */
    int32_t n_msgs;
    const char *prompt; /* text with "<image>" markers, used as it is */
    const int32_t *ids; /* token ids (no images) */
    int32_t n_ids;
    const vs_req_image *images; /* one per marker, in order */
    int32_t n_images;
    bool no_bos;            /* text: no BOS token */
    bool no_parse_special;  /* text: "</s>" etc. stay plain text */
    int64_t max_prompt_rows; /* > 0: a prompt of more rows is VS_ERR_RANGE (room for the reply) */
    vs_draft_cfg draft;
    int32_t n_predict;          /* token limit (>= 0; 0 = evaluate the prompt only) */
    vs_sampler_params sampling; /* temperature 0 = greedy */
    bool ignore_eos;
    bool reuse_prefix;                   /* keep cached rows shared with the previous request */
    const char *stop[VS_REQ_MAX_STOP];   /* stop strings (NULL-terminated list or n_stop entries) */
    int32_t n_stop;
    bool want_text;         /* fill vs_result.text (implied by on_text and stop strings) */
    vs_spec_token_fn on_tokens;
    vs_text_fn on_text;
    void *cb_ctx;
} vs_request;

/* No prompt, target only, 128 tokens, greedy (temperature 0), seed 0, stop at EOS, no reuse. */
void vs_request_default(vs_request *r);

typedef enum vs_finish {
    VS_FINISH_NONE = 0, /* the request failed before it generated */
    VS_FINISH_EOS,      /* an end-of-generation token */
    VS_FINISH_LIMIT,    /* n_predict tokens */
    VS_FINISH_CONTEXT,  /* the target cache is full */
    VS_FINISH_STOP,     /* a stop string (cut from the text with what followed it) */
    VS_FINISH_CANCEL,   /* vs_session_cancel */
    VS_FINISH_CALLBACK, /* a callback returned false */
} vs_finish;
const char *vs_finish_name(vs_finish f); /* "eos", "length", "context", "stop", "cancel", "callback" */

typedef struct vs_result {
    vs_spec_log log;        /* tokens, blocks, times (spec.h; t_vision not included) */
    char *text;             /* the reply (NUL-terminated) when asked for; owned */
    size_t text_len;
    vs_finish finish;
    int64_t n_prompt_rows;  /* rows of the prompt (text tokens + image rows) */
    int32_t n_images;
    int32_t n_images_encoded; /* of them, encoded by this request (the rest came from the image cache) */
    double t_vision;        /* seconds the images took to encode and project (cached ones: when they were) */
    vs_spec_drafter *drafter; /* the drafter that ran (NULL: target only); the session owns it */
    const vs_method *method;  /* its table entry (NULL: target only or a custom ensemble) */
} vs_result;

void vs_result_init(vs_result *r);
void vs_result_free(vs_result *r); /* keeps the struct reusable */

/* Runs a request. On error res holds what was generated before it. Errors: VS_ERR_INVALID for a bad
 * request (no prompt or two of them, images without markers or a tower, an unknown method, a drafter or
 * projector the method needs and the model set lacks), VS_ERR_RANGE for a prompt that does not fit the
 * context, the image decoder's and the engine's errors. */
vs_status vs_session_run(vs_session *s, const vs_request *req, vs_result *res, vs_error *err);
/* Builds the prompt of a request (encoding its images into the session's image cache) and gives its
 * rows, without generating: VS_ERR_RANGE when it has more than max_prompt_rows or than the context. */
vs_status vs_session_prompt_rows(vs_session *s, const vs_request *req, int64_t *n_rows, vs_error *err);
/* Encodes an image into the session's image cache now (a request showing it later takes it from there:
 * chat's /image), giving its rows in the target. Errors name the image. */
vs_status vs_session_add_image(vs_session *s, const vs_req_image *img, int64_t *n_rows, vs_error *err);
/* Makes the drafter of a drafting configuration now (requests make it at their first use), so that a
 * missing model or a bad option is reported before any request runs. */
vs_status vs_session_prepare(vs_session *s, const vs_draft_cfg *c, vs_error *err);

#endif
