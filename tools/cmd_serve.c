/* vlmspec serve: the OpenAI-compatible HTTP server (src/server/server.h) until SIGINT or SIGTERM. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "server.h"

#define CMD "serve"

static void usage(FILE *f) {
    fprintf(f,
            "usage: vlmspec serve -m MODEL [--mmproj MMPROJ] [-md DRAFT [--mmproj-draft P]] [options]\n"
            "Serves OpenAI's chat completions API (POST /v1/chat/completions, /v1/completions, GET /v1/models,\n"
            "/health, /metrics) and a chat page at / over HTTP, with images and speculative decoding\n"
            "(docs/server.md). Runs until SIGINT or SIGTERM.\n\n"
            "models:\n"
            "  -m, --model FILE        the target LM (GGUF)\n"
            "  --mmproj FILE           its mmproj (vision tower + projector): requests may carry images\n"
            "  -md, --model-draft FILE the LLaVA-recipe drafter (same vocabulary as the target)\n"
            "  --mmproj-draft FILE     its projector (methods that draft with images: m, mt, tabed-mt ...)\n"
            "  --massv FILE            the MASSV drafter       --massv-mmproj FILE  its projector\n"
            "  --msd-head FILE         an MSD feature-level head for the target (method msd)\n"
            "  --eagle-head FILE       a second head, the EAGLE baseline (method eagle)\n"
            "  --dream FILE            a DREAM draft model for the target (method dream)\n"
            "  --chat-template NAME    vicuna-short (default), vicuna or plain (also --template)\n"
            "  -a, --alias NAME        the model id in /v1/models and replies (default: the model's file name)\n"
            "drafting (a request's \"vlmspec\": {\"method\", \"gamma\", \"tree_width\", \"draft_greedy\"} overrides):\n"
            "  --method NAME           the default method (default: m with --mmproj-draft, t with -md, else ar)\n"
            "  --draft, --draft-max N  drafted tokens per block (default 5)\n"
            "  --tree-width D          width-D token trees (1..8, default 1: chains)\n"
            "  --draft-greedy          draft greedily even when sampling\n"
            "  --draft-kv-type T       the drafters' KV cache: bf16 (default), f16 or f32\n"
            "  --draft-pause N         drafting pauses while N or more requests run: their blocks verify\n"
            "                          one row each, merged (0: never; default 3)\n"
            "sampling defaults (a request's fields override):\n"
            "  --temp T                temperature (default 0.8; 0 = greedy)\n"
            "  --top-k K               (default 40)   --top-p P  (default 0.95)   --min-p P  (default 0.05)\n"
            "  --seed S                seed of requests that give none (default: a fresh one per request)\n"
            "  -n, --n-predict N       tokens of a reply without max_tokens (default 0: up to the context)\n"
            "server:\n"
            "  --host ADDR             IPv4 address to listen on (default 127.0.0.1)\n"
            "  --port N                port (default 8080; 0: any free port, printed)\n"
            "  -np, --parallel N       slots: conversations whose caches are kept for their next turn (default 1)\n"
            "  --queue N               requests that may wait while one runs; beyond them 503 (default 64)\n"
            "  -c, --ctx-size N        context rows per slot (default: the model's)\n"
            "  --kv-type T             the target's KV cache: f16 (default) or f32\n"
            "  -t, --threads N         threads (default 2)\n"
            "  --api-key KEY           require \"Authorization: Bearer KEY\" on /v1 routes and /metrics\n"
            "  --media-path DIR        images may be named as file://NAME under DIR (default: refused)\n"
            "  --max-body BYTES        largest request body (default 33554432)\n"
            "  --max-images N          images per request (default 8)\n"
            "  --max-image-bytes BYTES largest encoded image (default 8388608)\n"
            "  -v, --verbose           a line per request on stderr\n"
            "  -h, --help              this help\n");
}

int vs_cmd_serve(int argc, char **argv) {
    vs_server_opts o;
    vs_server_opts_default(&o);
    int threads = 2, gamma = 5, tree_width = 1;
    bool greedy = false;
    int64_t max_body = (int64_t)o.max_body, max_image_bytes = (int64_t)o.max_image_bytes;
    vs_models_opts *mo = &o.models;
    const char *method = NULL;
    cli_flags fs = {0};
    cli_flag_add(&fs, "-m|--model", CLI_STR, &mo->model, 0, 0);
    cli_flag_add(&fs, "--mmproj", CLI_STR, &mo->mmproj, 0, 0);
    cli_flag_add(&fs, "-md|--model-draft", CLI_STR, &mo->draft[VS_ROLE_LLAVA], 0, 0);
    cli_flag_add(&fs, "--mmproj-draft", CLI_STR, &mo->draft_mmproj[VS_ROLE_LLAVA], 0, 0);
    cli_flag_add(&fs, "--massv", CLI_STR, &mo->draft[VS_ROLE_MASSV], 0, 0);
    cli_flag_add(&fs, "--massv-mmproj", CLI_STR, &mo->draft_mmproj[VS_ROLE_MASSV], 0, 0);
    cli_flag_add(&fs, "--msd-head", CLI_STR, &mo->draft[VS_ROLE_MSD], 0, 0);
    cli_flag_add(&fs, "--eagle-head", CLI_STR, &mo->draft[VS_ROLE_EAGLE], 0, 0);
    cli_flag_add(&fs, "--dream", CLI_STR, &mo->draft[VS_ROLE_DREAM], 0, 0);
    cli_flag_add(&fs, "--chat-template|--template", CLI_STR, &mo->chat_template, 0, 0);
    cli_flag_add(&fs, "-a|--alias", CLI_STR, &o.alias, 0, 0);
    cli_flag_add(&fs, "--method", CLI_STR, &method, 0, 0);
    cli_flag_add(&fs, "--draft|--draft-max", CLI_INT, &gamma, 1, VS_SPEC_MAX_GAMMA);
    cli_flag_add(&fs, "--tree-width", CLI_INT, &tree_width, 1, VS_DRAFT_ENS_MAX_WIDTH);
    cli_flag_add(&fs, "--draft-greedy", CLI_BOOL, &greedy, 0, 0);
    cli_flag_add(&fs, "--draft-kv-type", CLI_KV_DRAFT, &o.draft_kv_type, 0, 0);
    cli_flag_add(&fs, "--temp", CLI_F32, &o.sampling.temperature, 0, 100);
    cli_flag_add(&fs, "--top-k", CLI_INT, &o.sampling.top_k, 0, INT32_MAX);
    cli_flag_add(&fs, "--top-p", CLI_F32, &o.sampling.top_p, 0, 1);
    cli_flag_add(&fs, "--min-p", CLI_F32, &o.sampling.min_p, 0, 1);
    cli_flag_add(&fs, "--seed", CLI_U64, &o.sampling.seed, 0, 9.3e18);
    cli_flag_add(&fs, "-n|--n-predict", CLI_INT, &o.n_predict, 0, 1 << 24);
    cli_flag_add(&fs, "--host", CLI_STR, &o.host, 0, 0);
    cli_flag_add(&fs, "--port", CLI_INT, &o.port, 0, 65535);
    cli_flag_add(&fs, "-np|--parallel", CLI_INT, &o.n_slots, 1, 256);
    cli_flag_add(&fs, "--queue", CLI_INT, &o.queue, 0, 1 << 20);
    cli_flag_add(&fs, "--draft-pause", CLI_INT, &o.draft_pause, 0, 1 << 20);
    cli_flag_add(&fs, "-c|--ctx-size", CLI_INT, &o.n_ctx, 1, 1 << 24);
    cli_flag_add(&fs, "--kv-type", CLI_KV, &o.kv_type, 0, 0);
    cli_flag_add(&fs, "-t|--threads", CLI_INT, &threads, 1, 1024);
    cli_flag_add(&fs, "--api-key", CLI_STR, &o.api_key, 0, 0);
    cli_flag_add(&fs, "--media-path", CLI_STR, &o.media_path, 0, 0);
    cli_flag_add(&fs, "--max-body", CLI_I64, &max_body, 1024, (double)(1ll << 32));
    cli_flag_add(&fs, "--max-images", CLI_INT, &o.max_images, 0, 64);
    cli_flag_add(&fs, "--max-image-bytes", CLI_I64, &max_image_bytes, 1, (double)(1ll << 31));
    cli_flag_add(&fs, "-v|--verbose", CLI_BOOL, &o.verbose, 0, 0);
    const int r = cli_flags_parse(CMD, argc, argv, &fs, usage);
    if (r >= 0) return r;
    if (!mo->model) return cli_fail(CMD, "-m MODEL is required"), 2;
    if (o.api_key && !*o.api_key) return cli_fail(CMD, "--api-key must not be empty"), 2;
    const bool llava = mo->draft[VS_ROLE_LLAVA] != NULL;
    if (mo->draft_mmproj[VS_ROLE_LLAVA] && !llava) return cli_fail(CMD, "--mmproj-draft needs -md FILE"), 2;
    if (mo->draft_mmproj[VS_ROLE_MASSV] && !mo->draft[VS_ROLE_MASSV])
        return cli_fail(CMD, "--massv-mmproj needs --massv FILE"), 2;
    if (!method) method = mo->draft_mmproj[VS_ROLE_LLAVA] ? "m" : llava ? "t" : "ar";
    const vs_method *m = vs_method_find(method);
    if (!m) {
        char names[512];
        vs_method_names(names, sizeof(names));
        return cli_fail(CMD, "--method %s: unknown (known: %s)", method, names), 2;
    }
    const bool any_draft = llava || mo->draft[VS_ROLE_MASSV] || mo->draft[VS_ROLE_MSD] || mo->draft[VS_ROLE_EAGLE] ||
                           mo->draft[VS_ROLE_DREAM];
    const void *only[] = {&gamma, &tree_width, &greedy, &o.draft_kv_type};
    for (size_t k = 0; k < VS_ARRAY_LEN(only) && !any_draft; k++)
        if (cli_flag_given(&fs, only[k]))
            return cli_fail(CMD, "%s needs a drafter (-md FILE, --massv FILE, --msd-head FILE, --eagle-head FILE or "
                                 "--dream FILE)",
                            cli_flag_seen(&fs, only[k])), 2;
    o.draft.method = method;
    o.draft.gamma = gamma;
    o.draft.opts.tree_width = tree_width;
    o.draft.opts.greedy = greedy;
    o.seed_given = cli_flag_given(&fs, &o.sampling.seed);
    o.max_body = (size_t)max_body;
    o.max_image_bytes = (size_t)max_image_bytes;
    mo->threads = threads;
    mo->warm_up = true;

    /* SIGINT / SIGTERM are taken by sigwait below: every thread the server starts inherits the mask */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    vs_error err = {0};
    vs_server *s = vs_server_start(&o, &err);
    if (!s) return cli_fail_err(CMD, &err);
    fprintf(stderr, "vlmspec serve: loading %s (http://%s:%d/health answers 503 until it is done)\n", mo->model, o.host,
            (int)vs_server_port(s));
    /* a signal while the models load ends the process at once (the load cannot be interrupted) */
    int sig = 0;
    for (;;) {
        const int st = vs_server_poll_ready(s, &err);
        if (st > 0) break;
        if (st < 0) {
            vs_server_stop(s);
            return cli_fail_err(CMD, &err);
        }
        const struct timespec ts = {0, 200 * 1000 * 1000};
        if ((sig = sigtimedwait(&set, NULL, &ts)) > 0) {
            fprintf(stderr, "vlmspec serve: %s while loading: exiting\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
            _exit(1);
        }
    }
    fprintf(stderr, "vlmspec serve: listening on http://%s:%d (method %s, %d slot%s)\n", o.host, (int)vs_server_port(s),
            method, (int)o.n_slots, o.n_slots == 1 ? "" : "s");
    sigwait(&set, &sig);
    fprintf(stderr, "vlmspec serve: %s: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    vs_server_stop(s);
    return 0;
}
