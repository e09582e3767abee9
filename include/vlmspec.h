/* vlmspec: the public API, the one header an application includes.
 *
 * vlmspec runs LLaVA-style vision-language models (vision tower + projector + LLaMA-family decoder) from
 * llama.cpp's GGUF files on the CPU, and decodes them faster without changing their output by speculative
 * decoding: a small drafter proposes tokens, the target verifies several in one pass and keeps exactly the
 * tokens it would have produced itself (greedy), or tokens with exactly its distribution (sampling).
 *
 * Three objects:
 *   vlmspec_models   the files, loaded once: the target LM and its mmproj, the drafters and their projectors;
 *   vlmspec_session  one conversation: the KV caches (reused across turns: a turn evaluates only its new
 *                    rows, images included) and the images already encoded;
 *   vlmspec_request  one reply: chat messages (or raw prompt text) with images, the drafting method, the
 *                    sampling, the token limit, stop strings and a callback that receives the text as it is
 *                    decided.
 *
 * Conventions: every function that can fail returns a vlmspec_status; vlmspec_last_error() then gives a
 * message naming the file or the value at fault (per thread). Constructors return their object through an
 * out-parameter and leave it NULL on failure. Every _free accepts NULL. One thread uses a session at a time;
 * vlmspec_session_cancel may be called from any thread or a signal handler. The sessions of one model set
 * share its worker threads: run them one at a time.
 *
 * A speculative multimodal generation (examples/simple.c is the complete program):
 *   vlmspec_model_params mp;
 *   vlmspec_model_params_init(&mp);
 *   mp.model = "target.gguf", mp.mmproj = "target-mmproj.gguf";
 *   mp.draft = "draft.gguf", mp.mmproj_draft = "draft-mmproj.gguf";
 *   vlmspec_models *models; vlmspec_session *sess;
 *   if (vlmspec_models_load(&mp, &models) || vlmspec_session_new(models, 0, &sess)) fail(vlmspec_last_error());
 *   vlmspec_image img = {.path = "photo.png"};
 *   vlmspec_message msg = {VLMSPEC_USER, "What is in the picture?", 1};
 *   vlmspec_request rq;
 *   vlmspec_request_init(&rq);
 *   rq.messages = &msg, rq.n_messages = 1, rq.images = &img, rq.n_images = 1, rq.method = "m";
 *   vlmspec_result res;
 *   if (vlmspec_generate(sess, &rq, &res) == VLMSPEC_OK) printf("%s (tau %.2f)\n", res.text, res.tau);
 *   vlmspec_result_free(&res); vlmspec_session_free(sess); vlmspec_models_free(models);
 */
#ifndef VLMSPEC_H
#define VLMSPEC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VLMSPEC_VERSION "0.1.0"

typedef enum vlmspec_status {
    VLMSPEC_OK = 0,
    VLMSPEC_ERR_INVALID = 1,     /* a bad argument or request */
    VLMSPEC_ERR_IO = 2,          /* a file could not be opened, read or written */
    VLMSPEC_ERR_FORMAT = 3,      /* a file's content violates its format */
    VLMSPEC_ERR_NOMEM = 4,       /* out of memory */
    VLMSPEC_ERR_RANGE = 5,       /* a value outside what fits (a prompt longer than the context ...) */
    VLMSPEC_ERR_UNSUPPORTED = 6, /* valid input vlmspec does not run (a tensor type, a projector type) */
} vlmspec_status;

/* "ok", "invalid input", "I/O error", "format error", "out of memory", "out of range", "unsupported". */
const char *vlmspec_status_name(vlmspec_status s);
/* The message of this thread's last failure ("" when none). */
const char *vlmspec_last_error(void);

/* ------------------------------------------------------------------------------------------------
 * Models */

typedef struct vlmspec_models vlmspec_models;

typedef struct vlmspec_model_params {
    const char *model;         /* the target LM (GGUF); required */
    const char *mmproj;        /* its mmproj (vision tower + projector); NULL: text only */
    const char *draft;         /* a drafter LM sharing the target's vocabulary (the "m", "t", "c", "p" and
                                * ensemble methods draft with it); NULL: none */
    const char *mmproj_draft;  /* the drafter's projector (multimodal drafting); NULL: none */
    const char *massv;         /* a MASSV drafter (methods "massv", "massv-t"); NULL: none */
    const char *mmproj_massv;  /* its projector */
    int threads;               /* worker threads (default 2) */
    const char *chat_template; /* "vicuna-short" (default), "vicuna" or "plain" */
} vlmspec_model_params;

void vlmspec_model_params_init(vlmspec_model_params *p);
vlmspec_status vlmspec_models_load(const vlmspec_model_params *p, vlmspec_models **out);
void vlmspec_models_free(vlmspec_models *m); /* after its sessions */

/* The drafting methods: i in [0, vlmspec_method_count()); name ("ar", "m", "t", "tabed-mt" ...) and one
 * line saying what it does. NULL outside the range. */
int vlmspec_method_count(void);
const char *vlmspec_method_name(int i);
const char *vlmspec_method_help(int i);

/* ------------------------------------------------------------------------------------------------
 * Sessions and requests */

typedef struct vlmspec_session vlmspec_session;

/* n_ctx: the target's context in rows (text tokens + image rows); 0 = the model's. */
vlmspec_status vlmspec_session_new(vlmspec_models *m, int n_ctx, vlmspec_session **out);
void vlmspec_session_free(vlmspec_session *s);
/* Stops the running request after its current verify step (finish "cancel"). */
void vlmspec_session_cancel(vlmspec_session *s);

typedef enum vlmspec_role { VLMSPEC_SYSTEM = 0, VLMSPEC_USER = 1, VLMSPEC_ASSISTANT = 2 } vlmspec_role;

typedef struct vlmspec_message {
    vlmspec_role role;
    const char *content; /* UTF-8 text; may hold "<image>" markers */
    int n_images;        /* images attached to this message beyond the markers in its text: the chat
                          * template places them. The request's images are consumed in order. */
} vlmspec_message;

typedef struct vlmspec_image {
    const char *path;          /* a PNG/JPEG/BMP/GIF/PPM file, or */
    const unsigned char *data; /* the encoded file in memory */
    size_t size;
} vlmspec_image;

/* Receives the reply's text as it is decided (UTF-8 pieces, not NUL-terminated); return 0 to stop. */
typedef int (*vlmspec_text_fn)(void *user, const char *text, size_t len);

#define VLMSPEC_MAX_STOP 8

typedef struct vlmspec_request {
    const vlmspec_message *messages; /* the conversation, formatted with the chat template, or */
    int n_messages;
    const char *prompt; /* raw prompt text with "<image>" markers, used as it is */
    const vlmspec_image *images; /* in order of their markers */
    int n_images;
    const char *method; /* drafting method (vlmspec_method_name); NULL or "ar" = the target alone */
    int draft_max;      /* drafted tokens per step (default 5) */
    int tree_width;     /* token trees of this many branches (default 1 = chains) */
    int n_predict;      /* most tokens in the reply (default 128) */
    float temperature;  /* 0 = greedy (default 0) */
    int top_k;          /* 0 = off (default 0) */
    float top_p;        /* 1 = off (default 1) */
    float min_p;        /* 0 = off (default 0) */
    uint64_t seed;      /* sampling seed (default 0) */
    const char *stop[VLMSPEC_MAX_STOP]; /* stop strings (a NULL or empty entry ends the list) */
    int reuse;          /* keep the cached rows the prompt shares with the previous request (default 1) */
    vlmspec_text_fn on_text;
    void *user;
} vlmspec_request;

void vlmspec_request_init(vlmspec_request *r);

typedef struct vlmspec_result {
    char *text;           /* the reply (a stop string and what followed it cut); owned */
    int n_tokens;         /* tokens the target generated (a stop string may cut the text before the last) */
    int n_prompt_rows;    /* prompt rows (text tokens + image rows) */
    int n_prompt_reused;  /* of them, taken from the cache of the previous request */
    const char *finish;   /* "eos", "length", "context", "stop", "cancel", "callback", or "none" when the
                           * request failed before it generated */
    int target_passes;    /* target forward passes that verified drafts (one per token without a drafter) */
    int drafted;          /* drafted tokens */
    int accepted;         /* of them, accepted */
    double tau;           /* tokens per target pass */
    double t_vision, t_prefill, t_decode, t_total; /* seconds */
    double tokens_per_s;  /* decode speed */
} vlmspec_result;

/* Runs a request on a session; the result is filled also on failure (what was generated before it). */
vlmspec_status vlmspec_generate(vlmspec_session *s, const vlmspec_request *r, vlmspec_result *out);
void vlmspec_result_free(vlmspec_result *r);

#ifdef __cplusplus
}
#endif

#endif
