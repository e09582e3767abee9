/* vlmspec generate: one request (text, images, optional speculative decoding), streaming text.
 * The command line is parsed into a gen_opts (the speculative and ensemble flags by cli_spec.c and
 * cli_ensemble.c); cli_ensemble.c runs it through the library's session (src/spec/session.h), the same
 * path with or without a drafter. Statistics go to stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_ensemble.h"
#include "cli_spec.h"
#include "lm.h"
#include "sample.h"
#include "tokenizer.h"

#define CMD "generate"

typedef struct gen_opts {
    const char *model;
    const char *prompt;    /* text, tokenised with the model's tokenizer */
    const char *tokens;    /* or comma-separated ids */
    int n_predict;         /* tokens to generate (stops earlier at end-of-generation); 0 = prefill only.
                            * Negative values are refused by the parser (no "infinite" meaning:
                            * -c and the model's context bound a run anyway) */
    int n_ctx;             /* KV cache rows; 0 = prompt + n_predict + the draft, capped at the model's context */
    int threads;
    vs_type kv_type;
    bool no_bos, special, ignore_eos, show_ids, quiet;
    vs_sampler_params sp;
    vs_cli_spec_opts spec; /* speculative decoding flags (tools/cli_spec.c) */
    vs_cli_ens_opts ens;   /* ensemble drafting flags (tools/cli_ensemble.c) */
} gen_opts;

static void usage(FILE *f) {
    fprintf(f,
            "usage: vlmspec generate -m MODEL (-p PROMPT | --tokens IDS) [options]\n"
            "Generates text after a prompt (with images and speculative decoding when asked) and streams it\n"
            "to stdout.\n\n"
            "options:\n"
            "  -m, --model FILE     LLaMA-architecture GGUF\n"
            "  -p, --prompt TEXT    prompt text (BOS added as the file says)\n"
            "  --tokens IDS         prompt as token ids instead: 1,3148,1001\n"
            "  -n, --n-predict N    tokens to generate, N >= 0 (default 128; 0 = evaluate the prompt,\n"
            "                       print it and generate nothing, as llama.cpp's -n 0)\n"
            "  --temp T             temperature (default 0.8; 0 = greedy)\n"
            "  --top-k K            keep the K most likely tokens (default 40; 0 = off)\n"
            "  --top-p P            nucleus sampling mass (default 0.95; 1 = off)\n"
            "  --min-p P            drop tokens below P x the top probability (default 0.05; 0 = off)\n"
            "  --seed S             sampling seed (default: from the clock, printed)\n"
            "  -t, --threads N      threads (default 2)\n"
            "  -c, --ctx N          KV cache rows (default: prompt + N + the draft, at most the model's context)\n"
            "  --kv-type T          the target's KV cache storage: f16 (default) or f32\n"
            "  --no-bos             do not add BOS to the prompt\n"
            "  --special            parse special-token text (<s>, </s>) in the prompt\n"
            "  --ignore-eos         never generate end-of-generation tokens (their logits -inf, as\n"
            "                       llama.cpp's --ignore-eos): the text runs to -n\n"
            "  --ids                print token ids instead of text\n"
            "  -q, --quiet          no statistics on stderr\n"
            "  -h, --help           this help\n");
    vs_cli_spec_usage(f);
    vs_cli_ens_usage(f);
}

/* Parses "1,2,3" into a vs_malloc'ed array; false on malformed input. */
static bool parse_ids(const char *s, int32_t **out, int *n) {
    int k = 1;
    for (const char *p = s; *p; p++) k += *p == ',';
    int32_t *a = vs_malloc(sizeof(int32_t) * (size_t)k);
    if (!a) return false;
    const char *p = s;
    for (int i = 0; i < k; i++) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > INT32_MAX || (*end && *end != ',') || (i == k - 1) != !*end) {
            vs_free(a);
            return false;
        }
        a[i] = (int32_t)v;
        p = end + (*end ? 1 : 0);
    }
    *out = a;
    *n = k;
    return true;
}

/* Returns -1 when the options are fine, else the exit status. */
static int gen_parse(int argc, char **argv, gen_opts *o) {
    memset(o, 0, sizeof(*o));
    o->n_predict = 128;
    o->threads = 2;
    o->kv_type = VS_TYPE_F16;
    o->sp = vs_sampler_params_default();
    o->sp.temperature = 0.8f;
    o->sp.top_k = 40;
    o->sp.top_p = 0.95f;
    o->sp.min_p = 0.05f;
    vs_cli_spec_opts_init(&o->spec);
    vs_cli_ens_opts_init(&o->ens);
    cli_flags fs = {0};
    cli_flag_add(&fs, "-m|--model", CLI_STR, &o->model, 0, 0);
    cli_flag_add(&fs, "-p|--prompt", CLI_STR, &o->prompt, 0, 0);
    cli_flag_add(&fs, "--tokens", CLI_STR, &o->tokens, 0, 0);
    cli_flag_add(&fs, "-n|--n-predict", CLI_INT, &o->n_predict, 0, 1 << 24);
    vs_cli_sampling_flags(&fs, &o->sp);
    cli_flag_add(&fs, "-t|--threads", CLI_INT, &o->threads, 1, 1024);
    cli_flag_add(&fs, "-c|--ctx", CLI_INT, &o->n_ctx, 1, 1 << 24);
    cli_flag_add(&fs, "--kv-type", CLI_KV, &o->kv_type, 0, 0);
    cli_flag_add(&fs, "--no-bos", CLI_BOOL, &o->no_bos, 0, 0);
    cli_flag_add(&fs, "--special", CLI_BOOL, &o->special, 0, 0);
    cli_flag_add(&fs, "--ignore-eos", CLI_BOOL, &o->ignore_eos, 0, 0);
    cli_flag_add(&fs, "--ids", CLI_BOOL, &o->show_ids, 0, 0);
    cli_flag_add(&fs, "-q|--quiet", CLI_BOOL, &o->quiet, 0, 0);
    vs_cli_spec_flags(&fs, &o->spec);
    vs_cli_ens_flags(&fs, &o->ens);
    const int r = cli_flags_parse(CMD, argc, argv, &fs, usage);
    if (r >= 0) return r;
    vs_cli_ens_finish(&fs, &o->ens, &o->spec);
    o->spec.json = o->spec.json_path && !strcmp(o->spec.json_path, "-");
    o->spec.needs_draft = vs_cli_spec_needs_draft(&fs, &o->spec);
    if (!o->model) return cli_fail(CMD, "-m MODEL is required"), 2;
    if (!o->prompt == !o->tokens) return cli_fail(CMD, "give exactly one of -p PROMPT and --tokens IDS"), 2;
    if (!cli_flag_given(&fs, &o->sp.seed)) o->sp.seed = (uint64_t)(vs_time_now() * 1e6);
    return -1;
}

int vs_cmd_generate(int argc, char **argv) {
    gen_opts o;
    int st = gen_parse(argc, argv, &o);
    if (st >= 0) return st;
    if (!o.spec.draft_model && (o.spec.needs_draft || o.ens.mode_given || vs_cli_ens_active(&o.ens)))
        return cli_fail(CMD, "%s needs a draft model (-md FILE)", /* no flag is silently ignored */
                        o.spec.needs_draft ? o.spec.needs_draft : "--draft-mode"),
               2;
    /* one path for every run, with or without a drafter or images: tools/cli_ensemble.c hands the request
     * to the library's session (src/spec/session.h) */
    vs_cli_spec_opts *s = &o.spec;
    int32_t *ids = NULL;
    s->model = o.model, s->prompt = o.prompt, s->n_predict = o.n_predict, s->n_ctx = o.n_ctx;
    s->threads = o.threads, s->kv_type = o.kv_type, s->no_bos = o.no_bos, s->special = o.special;
    s->ignore_eos = o.ignore_eos, s->show_ids = o.show_ids, s->quiet = o.quiet, s->sp = o.sp;
    if (o.tokens && !parse_ids(o.tokens, &ids, &s->n_ids))
        return cli_fail(CMD, "--tokens '%s': expected comma-separated token ids", o.tokens), 2;
    s->ids = ids;
    st = vs_cli_ens_run(CMD, s, &o.ens);
    vs_free(ids);
    return st;
}
