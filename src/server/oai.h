/* oai: OpenAI's chat-completions and completions wire format, without any HTTP: the request parser and
 * the writers of replies, streamed chunks and error bodies that `vlmspec serve` (server.h) sends.
 * Owns: a parsed request (vs_oai_req: its messages, decoded images, sampling and drafting fields, all
 * owned by the request) and nothing else; the writers append to a caller's vs_json_writer.
 *
 * Parsing is strict about what it reads and says what it refused: every error names the field
 * (vs_oai_error.param) and carries the HTTP status and OpenAI's error type. Accepted:
 *   chat:        messages [{role: system|developer|user|assistant, content: string | [parts]}] with parts
 *                {type: "text", text} and {type: "image_url", image_url: {url} | url}; an image URL is a
 *                "data:image/...;base64,..." URI, or "file://NAME" under the server's media folder
 *                (without one, and for http(s) URLs, a 400: the server never fetches)
 *   completions: prompt (a string, or an array of one string)
 *   both:        model (any string: the server has one model), max_tokens / max_completion_tokens,
 *                temperature, top_p, top_k, min_p, seed, stop (string or list of at most VS_REQ_MAX_STOP),
 *                stream, stream_options.include_usage, n (1 only), and "vlmspec": {method, gamma,
 *                tree_width, draft_greedy} (unknown keys there are refused).
 * Fields that would change the output in ways the server does not implement (n or best_of > 1, a
 * non-zero frequency or presence penalty, logprobs, logit_bias, echo, suffix, tools, a response_format
 * other than text) are refused with a 400 naming them; informational fields (user, metadata, store ...)
 * are ignored. file:// names must resolve (links followed) to a regular file inside the media folder. */
#ifndef VS_OAI_H
#define VS_OAI_H

#include "chat.h"
#include "json.h"
#include "session.h"

typedef struct vs_oai_error {
    int http;          /* 400, 401, 404, 413, 500, 503 */
    const char *type;  /* "invalid_request_error", "authentication_error", "not_found_error", "server_error",
                        * "unavailable_error", "exceed_context_size_error" */
    const char *code;  /* NULL or a short code ("invalid_api_key", "context_length_exceeded" ...) */
    char param[64];    /* the field at fault ("" when none) */
    char message[512];
} vs_oai_error;

/* Sets e and returns false (for `return vs_oai_fail(...)`). */
bool vs_oai_fail(vs_oai_error *e, int http, const char *type, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

typedef enum vs_oai_kind {
    VS_OAI_CHAT = 0,       /* POST /v1/chat/completions */
    VS_OAI_COMPLETION = 1, /* POST /v1/completions */
} vs_oai_kind;

typedef struct vs_oai_limits {
    int32_t max_images;     /* images per request */
    size_t max_image_bytes; /* encoded bytes of one image */
    const char *media_path; /* folder that file:// URLs name files in; NULL: file:// refused */
} vs_oai_limits;

typedef struct vs_oai_req {
    vs_oai_kind kind;
    vs_chat_msg *msgs; /* chat: the messages (content owned by the request) */
    int32_t n_msgs;
    char *prompt;      /* completions: the prompt text */
    vs_req_image *images; /* in the order of their markers; data owned by the request */
    int32_t n_images;
    char *model;            /* as sent, NULL when absent */
    int64_t max_tokens;     /* -1: not given */
    bool has_temperature, has_top_p, has_top_k, has_min_p, has_seed;
    double temperature, top_p, min_p;
    int64_t top_k;
    uint64_t seed;
    char *stop[VS_REQ_MAX_STOP];
    int32_t n_stop;
    bool stream, include_usage;
    /* the "vlmspec" object */
    char *method;           /* NULL: the server's */
    int32_t gamma;          /* -1: the server's */
    int32_t tree_width;     /* -1: the server's */
    int32_t draft_greedy;   /* -1: the server's, else 0 / 1 */
} vs_oai_req;

/* Parses a request body. On failure e says why (status, type, the field) and req is empty (freed). */
bool vs_oai_parse(vs_oai_kind kind, const char *body, size_t len, const vs_oai_limits *lim, vs_oai_req *req,
                  vs_oai_error *e);
void vs_oai_req_free(vs_oai_req *req); /* keeps the struct reusable; a zeroed struct is fine */

/* Decodes standard base64 (RFC 4648, '=' padding optional, no whitespace) into a vs_malloc'ed buffer;
 * false on any other character or a length that is not a whole number of bytes. */
bool vs_base64_decode(const char *s, size_t n, uint8_t **out, size_t *out_len);

/* OpenAI's finish_reason of a vs_finish: "stop" (EOS, a stop string), "length" (token limit, context),
 * NULL while unfinished or when cancelled. */
const char *vs_oai_finish_reason(vs_finish f);

/* --- writers (each writes one complete JSON object) --- */

/* {"error": {"message", "type", "param", "code"}} */
void vs_oai_write_error(vs_json_writer *w, const vs_oai_error *e);

/* What a reply reports beyond its text. */
typedef struct vs_oai_usage {
    int64_t prompt_tokens, completion_tokens;
    /* timings (llama-server's names, milliseconds) and the speculative statistics */
    int64_t prompt_n;   /* prompt rows the target evaluated (after prefix reuse) */
    double prompt_ms, predicted_ms;
    int64_t draft_n, draft_n_accepted, verify_passes;
    const char *method; /* the drafting method's name ("ar": target only) */
    int32_t gamma, tree_width;
} vs_oai_usage;

void vs_oai_write_usage(vs_json_writer *w, const vs_oai_usage *u); /* the "usage" key and object */
void vs_oai_write_timings(vs_json_writer *w, const vs_oai_usage *u); /* the "timings" key and object */

/* A whole reply: chat.completion or text_completion. */
void vs_oai_write_reply(vs_json_writer *w, vs_oai_kind kind, const char *id, int64_t created, const char *model,
                        const char *text, size_t text_len, const char *finish_reason, const vs_oai_usage *u);

/* One streamed chunk: chat.completion.chunk (role and/or content delta) or text_completion. role: NULL or
 * "assistant"; text may be NULL (no content key); finish_reason NULL: null. With usage (the last chunk
 * of a stream asked for with include_usage) the choices array is empty. ext: NULL, or vlmspec's own
 * serialised JSON value written under the key "vlmspec" (the chat page's drafted / own segments). */
void vs_oai_write_chunk(vs_json_writer *w, vs_oai_kind kind, const char *id, int64_t created, const char *model,
                        const char *role, const char *text, size_t text_len, const char *finish_reason,
                        const vs_oai_usage *usage, const char *ext, size_t ext_len);

#endif
