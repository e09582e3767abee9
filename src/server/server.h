/* server: `vlmspec serve`, an OpenAI-compatible HTTP server over the library's sessions (session.h), on
 * Debian's libmicrohttpd (a thread per connection; the connections hand requests to the inference
 * threads through a bounded queue).
 * Owns: the HTTP daemon, the model set (loaded by a thread of its own while /health answers 503), the
 * slots (one vs_session each, with its drafters' caches and its image cache, all on one shared target KV
 * cache of one sequence per slot, kept for the next turn of the same conversation), the batcher that
 * merges the slots' verify forwards (batch.h), the request queue, the Prometheus counters, and the chat
 * page served at GET /.
 *
 * Routes (docs/server.md): POST /v1/chat/completions, POST /v1/completions (also without /v1), GET
 * /v1/models, GET /health, GET /metrics, GET / (the chat page). The OpenAI wire format is oai.h's.
 *
 * Scheduling: one inference thread per slot; each takes the next request and runs it on the free slot
 * whose cached conversation shares the longest prefix with it (the least recently used one otherwise).
 * The running requests take turns drafting and verify their blocks together in one target forward, so
 * every output is what the request gets alone. A request waits in the queue while every slot is busy and
 * is refused with 503 when the queue is full. A streaming client that disconnects stops its request at
 * the next emitted token. */
#ifndef VS_SERVER_H
#define VS_SERVER_H

#include "session.h"

typedef struct vs_server_opts {
    const char *host;     /* IPv4 address to bind (default "127.0.0.1") */
    int32_t port;         /* 0: any free port (vs_server_port tells which) */
    const char *api_key;  /* NULL: none; else every /v1 route and /metrics need "Authorization: Bearer KEY" */
    const char *media_path; /* folder file:// image URLs may name files in; NULL: file:// refused */
    const char *alias;    /* the model id of /v1/models and of replies (NULL: the model file's name) */
    vs_models_opts models; /* what the inference thread loads */
    int32_t n_slots;      /* -np (default 1) */
    int32_t queue;        /* requests waiting beyond the running one before 503 (default 64) */
    int32_t draft_pause;  /* drafting pauses while this many requests run (vs_batch_set_draft_pause;
                           * 0: never; default 3) */
    int32_t n_ctx;        /* per slot (<= 0: the model's n_ctx_train) */
    vs_type kv_type;      /* the target's cache */
    vs_type draft_kv_type;
    int32_t n_predict;    /* tokens of a reply without max_tokens (<= 0: up to the context) */
    vs_draft_cfg draft;   /* the default drafting (a request's "vlmspec" object overrides it) */
    vs_sampler_params sampling; /* the default sampling (request fields override) */
    bool seed_given;      /* sampling.seed applies to requests without a seed; else each gets a fresh one */
    size_t max_body;      /* bytes of a request body (default 32 MiB) */
    int32_t max_images;   /* per request (default 8) */
    size_t max_image_bytes; /* encoded bytes of one image (default 8 MiB) */
    int32_t max_connections; /* concurrent connections (default 512) */
    bool verbose;         /* a log line per request on stderr */
} vs_server_opts;

void vs_server_opts_default(vs_server_opts *o);

typedef struct vs_server vs_server;

/* Binds and starts serving (the inference thread begins loading the models: /health answers 503 until it
 * is done). NULL + err when the address cannot be bound. */
vs_server *vs_server_start(const vs_server_opts *o, vs_error *err);
/* Whether the models are loaded: 1 loaded, 0 still loading, -1 the load failed (err says why; the server
 * keeps answering 503). */
int vs_server_poll_ready(vs_server *s, vs_error *err);
int32_t vs_server_port(const vs_server *s);
/* Stops accepting, ends the running and queued requests, joins every thread, frees everything. NULL ok. */
void vs_server_stop(vs_server *s);

#endif
