/* vlmspec logits: teacher-forced logits in the layout of ../shared/testdata/parity, so anyone can
 * compare vlmspec with llama.cpp: PREFIX.json (prompt, tokens, greedy tokens, layout) and PREFIX.f32
 * (float32 rows of n_vocab). Row i < len(prompt) comes from ONE batched forward over the whole prompt;
 * then each greedy token (or each --feed token) is fed one per step and its row appended. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "outfile.h"
#include "json.h"
#include "lm.h"
#include "sample.h"
#include "tokenizer.h"

#define CMD "logits"

static void usage(FILE *f) {
    fprintf(f,
            "usage: vlmspec logits -m MODEL (-p PROMPT | --tokens IDS) [--gen N] -o PREFIX [options]\n"
            "Writes PREFIX.json and PREFIX.f32 in the layout of the parity test data: the logits after each\n"
            "prompt token (one batched pass), then after each of N - 1 greedy tokens fed one per step.\n\n"
            "options:\n"
            "  -m, --model FILE    LLaMA-architecture GGUF\n"
            "  -p, --prompt TEXT   prompt text (tokenised with the file's tokenizer, BOS as the file says)\n"
            "  --tokens IDS        prompt as token ids instead: 1,3148,1001\n"
            "  --no-bos            with -p: do not add BOS\n"
            "  --special           with -p: parse special-token text such as <s>\n"
            "  --gen N             greedy tokens to produce (default 0); N - 1 of them are fed back\n"
            "  --feed IDS          feed these tokens after the prompt instead of the greedy choices\n"
            "                      (teacher forcing, e.g. a reference's greedy_tokens); --gen defaults to\n"
            "                      their count\n"
            "  --kv-type T         KV cache storage: f32 (default, as the reference) or f16\n"
            "  -t, --threads N     threads (default 2)\n"
            "  -o, --output PREFIX output files PREFIX.json and PREFIX.f32\n"
            "  -h, --help          this help\n");
}

/* Parses "1,2,3" into a vs_malloc'ed array. */
static bool parse_ids(const char *s, int32_t **out, int *n) {
    int cap = 16, k = 0;
    int32_t *a = vs_malloc(sizeof(int32_t) * (size_t)cap);
    const char *p = s;
    while (a && *p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            vs_free(a);
            return false;
        }
        if (k == cap) {
            int32_t *b = vs_malloc(sizeof(int32_t) * (size_t)cap * 2);
            if (!b) break;
            memcpy(b, a, sizeof(int32_t) * (size_t)k);
            vs_free(a);
            a = b;
            cap *= 2;
        }
        a[k++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (!a || *p || k == 0) {
        vs_free(a);
        return false;
    }
    *out = a;
    *n = k;
    return true;
}

static void json_ids(vs_json_writer *w, const char *key, const int32_t *ids, int n) {
    vs_json_key(w, key);
    vs_json_arr_begin(w);
    for (int i = 0; i < n; i++) vs_json_int(w, ids[i]);
    vs_json_arr_end(w);
}

/* A token id list given on the command line (vs_malloc'ed). */
typedef struct id_list {
    int32_t *ids;
    int n;
} id_list;

/* --tokens / --feed's value: comma-separated token ids into an id_list. */
static bool parse_id_flag(const char *cmd, const char *flag, const char *v, void *dst) {
    id_list *l = dst;
    vs_free(l->ids);
    l->ids = NULL, l->n = 0;
    if (parse_ids(v, &l->ids, &l->n)) return true;
    cli_fail(cmd, "%s '%s': expected comma-separated token ids", flag, v);
    return false;
}

typedef struct logits_opts {
    const char *model, *prompt, *prefix;
    id_list tokens, feed; /* tokens: --tokens, or -p's text once tokenised */
    int gen, threads;
    bool no_bos, special;
    vs_type kvt;
} logits_opts;

/* Returns -1 when the options are fine, else the exit status. o->tokens and o->feed are the caller's to
 * free either way. */
static int logits_parse(int argc, char **argv, logits_opts *o) {
    memset(o, 0, sizeof(*o));
    o->gen = -1, o->threads = 2, o->kvt = VS_TYPE_F32;
    cli_flags fs = {0};
    cli_flag_add(&fs, "-m|--model", CLI_STR, &o->model, 0, 0);
    cli_flag_add(&fs, "-p|--prompt", CLI_STR, &o->prompt, 0, 0);
    cli_flag_fn_add(&fs, "--tokens", parse_id_flag, &o->tokens);
    cli_flag_add(&fs, "--no-bos", CLI_BOOL, &o->no_bos, 0, 0);
    cli_flag_add(&fs, "--special", CLI_BOOL, &o->special, 0, 0);
    cli_flag_add(&fs, "--gen", CLI_INT, &o->gen, 0, 1 << 20);
    cli_flag_fn_add(&fs, "--feed", parse_id_flag, &o->feed);
    cli_flag_add(&fs, "--kv-type", CLI_KV, &o->kvt, 0, 0);
    cli_flag_add(&fs, "-t|--threads", CLI_INT, &o->threads, 1, 1024);
    cli_flag_add(&fs, "-o|--output", CLI_STR, &o->prefix, 0, 0);
    const int r = cli_flags_parse(CMD, argc, argv, &fs, usage);
    if (r >= 0) return r;
    if (!o->model || !o->prefix || (!o->prompt == !o->tokens.ids)) {
        cli_fail(CMD, "needs -m MODEL, -o PREFIX and exactly one of -p PROMPT / --tokens IDS");
        return 2;
    }
    if (o->gen < 0) o->gen = o->feed.ids ? o->feed.n : 0;
    if (o->feed.ids && o->feed.n < o->gen - 1)
        return cli_fail(CMD, "--feed has %d tokens, --gen %d needs %d", o->feed.n, o->gen, o->gen - 1), 2;
    return -1;
}

/* What a run holds: the model, the passes' logits (n_rows rows of n_vocab) and the greedy tokens. */
typedef struct logits_run {
    vs_lm *lm;
    vs_tokenizer *tok; /* with -p */
    vs_threadpool *tp;
    vs_kv *kv;
    float *logits;
    int32_t *greedy;
    vs_lm_row *rows;
    int n_rows, n_vocab;
} logits_run;

static void run_free(logits_run *s) {
    vs_free(s->rows);
    vs_free(s->greedy);
    vs_free(s->logits);
    vs_kv_free(s->kv);
    vs_threadpool_free(s->tp);
    vs_tokenizer_free(s->tok);
    vs_lm_free(s->lm);
}

/* Tokenises -p's text into o->tokens (add_special adds BOS, and EOS when the file says so; --no-bos drops
 * both). Returns false after reporting. */
static bool tokenize_prompt(logits_opts *o, logits_run *s) {
    vs_error err = {0};
    int64_t n64 = 0;
    if (!(s->tok = vs_tokenizer_from_gguf(vs_lm_gguf(s->lm), &err)) ||
        vs_tokenize_alloc(s->tok, o->prompt, strlen(o->prompt), !o->no_bos, o->special, &o->tokens.ids, &n64,
                          &err))
        return cli_fail_err(CMD, &err), false;
    if (n64 < 1) return cli_fail(CMD, "the prompt tokenises to nothing"), false;
    o->tokens.n = (int)n64;
    return true;
}

/* The threads, the KV cache and the buffers for the rows. Returns false after reporting. */
static bool run_setup(const logits_opts *o, logits_run *s) {
    vs_error err = {0};
    const vs_lm_config *c = vs_lm_cfg(s->lm);
    const int np = o->tokens.n;
    s->n_rows = np + (o->gen > 0 ? o->gen - 1 : 0);
    s->n_vocab = c->n_vocab;
    if (s->n_rows + 1 > c->n_ctx_train)
        vs_log("vlmspec logits: note: %d rows exceed the model's context %d\n", s->n_rows, c->n_ctx_train);
    if ((o->threads > 1 && !(s->tp = vs_threadpool_new(o->threads, &err))) ||
        !(s->kv = vs_lm_kv_new(s->lm, 1, s->n_rows + 1, o->kvt, &err)))
        return cli_fail_err(CMD, &err), false;
    s->logits = vs_malloc(sizeof(float) * (size_t)s->n_rows * (size_t)s->n_vocab);
    s->greedy = vs_malloc(sizeof(int32_t) * (size_t)(o->gen + 1));
    s->rows = vs_calloc((size_t)np, sizeof(vs_lm_row));
    if (!s->logits || !s->greedy || !s->rows)
        return cli_fail(CMD, "out of memory for %d rows of %d logits", s->n_rows, s->n_vocab), false;
    return true;
}

/* The prompt in one batched pass, then each greedy (or --feed) token one per step. Returns false after
 * reporting. */
static bool run_passes(const logits_opts *o, logits_run *s) {
    vs_error err = {0};
    const int np = o->tokens.n, V = s->n_vocab;
    for (int i = 0; i < np; i++) s->rows[i] = (vs_lm_row){.token = o->tokens.ids[i], .pos = i, .want_logits = true};
    vs_lm_out out = {.logits = s->logits};
    if (vs_lm_forward(s->lm, s->kv, s->tp, s->rows, np, &out, &err)) return cli_fail_err(CMD, &err), false;
    for (int j = 0; j < o->gen; j++) {
        const float *last = s->logits + (size_t)(np - 1 + j) * V;
        s->greedy[j] = vs_argmax(last, V);
        if (j == o->gen - 1) break;
        vs_lm_row r = {.token = o->feed.ids ? o->feed.ids[j] : s->greedy[j], .pos = np + j, .want_logits = true};
        out.logits = s->logits + (size_t)(np + j) * V;
        if (vs_lm_forward(s->lm, s->kv, s->tp, &r, 1, &out, &err)) return cli_fail_err(CMD, &err), false;
    }
    return true;
}

/* PREFIX.json's text, newline-terminated (vs_free it), or NULL when out of memory. */
static char *json_text(const logits_opts *o, const logits_run *s, size_t *len) {
    const int np = o->tokens.n, gen = o->gen;
    vs_json_writer w;
    vs_json_writer_init(&w);
    vs_json_obj_begin(&w);
    const char *base = strrchr(o->model, '/');
    vs_json_key(&w, "model");
    vs_json_str(&w, base ? base + 1 : o->model);
    vs_json_key(&w, "prompt");
    if (o->prompt) vs_json_str(&w, o->prompt);
    else vs_json_null(&w);
    vs_json_key(&w, "add_bos");
    vs_json_bool(&w, o->prompt ? !o->no_bos && vs_tokenizer_add_bos(s->tok) : o->tokens.ids[0] == 1);
    vs_json_key(&w, "kv_cache");
    vs_json_str(&w, o->kvt == VS_TYPE_F32 ? "f32" : "f16");
    vs_json_key(&w, "n_vocab");
    vs_json_int(&w, s->n_vocab);
    json_ids(&w, "prompt_tokens", o->tokens.ids, np);
    json_ids(&w, "greedy_tokens", s->greedy, gen);
    if (o->feed.ids) json_ids(&w, "fed_tokens", o->feed.ids, gen > 0 ? gen - 1 : 0);
    vs_json_key(&w, "logits_rows");
    vs_json_int(&w, s->n_rows);
    vs_json_key(&w, "logits_layout");
    vs_json_str(&w, "float32 little-endian, row-major [logits_rows][n_vocab]; row i < len(prompt_tokens) = logits "
                    "after prompt token i (batched prompt pass); row len(prompt_tokens)+j = logits after feeding "
                    "greedy_tokens[j] (one token per step)");
    vs_json_obj_end(&w);
    size_t jl = 0;
    char *js = vs_json_writer_take(&w, &jl);
    vs_json_writer_free(&w);
    if (!js) return NULL;
    js[jl] = '\n'; /* the writer's buffer keeps room for a terminator */
    *len = jl + 1;
    return js;
}

/* Writes PREFIX.f32 and PREFIX.json. Returns false after reporting (silently when the path does not
 * fit in memory). */
static bool write_outputs(const logits_opts *o, const logits_run *s) {
    vs_error err = {0};
    size_t plen = strlen(o->prefix) + 8;
    char *path = vs_malloc(plen);
    if (!path) return false;
    bool ok = false;
    snprintf(path, plen, "%s.f32", o->prefix);
    if (vs_write_file(path, s->logits, sizeof(float) * (size_t)s->n_rows * s->n_vocab, &err) != VS_OK) {
        cli_fail_err(CMD, &err);
        goto done;
    }
    size_t jl = 0;
    char *js = json_text(o, s, &jl);
    snprintf(path, plen, "%s.json", o->prefix);
    if (!js) {
        cli_fail(CMD, "%s: out of memory", path);
        goto done;
    }
    vs_status ws = vs_write_file(path, js, jl, &err);
    vs_free(js);
    if (ws != VS_OK) {
        cli_fail_err(CMD, &err);
        goto done;
    }
    ok = true;
done:
    vs_free(path);
    return ok;
}

/* Loads the model, runs the passes and writes the files. Returns the exit status. */
static int logits_main(logits_opts *o) {
    logits_run s = {0};
    vs_error err = {0};
    int rc = 1;
    if (!(s.lm = vs_lm_load(o->model, &err))) {
        cli_fail_err(CMD, &err);
    } else if ((!o->prompt || tokenize_prompt(o, &s)) && run_setup(o, &s) && run_passes(o, &s) &&
               write_outputs(o, &s)) {
        printf("wrote %s.json and %s.f32: %d prompt rows + %d generated rows of %d logits\n", o->prefix, o->prefix,
               o->tokens.n, s.n_rows - o->tokens.n, s.n_vocab);
        rc = 0;
    }
    run_free(&s);
    return rc;
}

int vs_cmd_logits(int argc, char **argv) {
    logits_opts o;
    int rc = logits_parse(argc, argv, &o);
    if (rc < 0) rc = logits_main(&o);
    vs_free(o.tokens.ids);
    vs_free(o.feed.ids);
    return rc;
}
