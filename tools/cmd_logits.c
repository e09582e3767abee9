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

int vs_cmd_logits(int argc, char **argv) {
    const char *model = NULL, *prompt = NULL, *tokens_s = NULL, *feed_s = NULL, *prefix = NULL;
    int gen = -1, threads = 2;
    bool no_bos = false, special = false;
    vs_type kvt = VS_TYPE_F32;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--no-bos")) {
            no_bos = true;
        } else if (!strcmp(a, "--special")) {
            special = true;
        } else {
            const char *v = cli_value(CMD, argc, argv, &i);
            if (!v) return 2;
            if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = v;
            else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) prompt = v;
            else if (!strcmp(a, "--tokens")) tokens_s = v;
            else if (!strcmp(a, "--feed")) feed_s = v;
            else if (!strcmp(a, "-o") || !strcmp(a, "--output")) prefix = v;
            else if (!strcmp(a, "--gen")) {
                if (!cli_parse_int(CMD, a, v, 0, 1 << 20, &gen)) return 2;
            } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
                if (!cli_parse_int(CMD, a, v, 1, 1024, &threads)) return 2;
            } else if (!strcmp(a, "--kv-type")) {
                if (!strcmp(v, "f32") || !strcmp(v, "F32")) kvt = VS_TYPE_F32;
                else if (!strcmp(v, "f16") || !strcmp(v, "F16")) kvt = VS_TYPE_F16;
                else return cli_fail(CMD, "--kv-type %s: expected f32 or f16", v), 2;
            } else {
                cli_fail(CMD, "unknown option '%s' (see vlmspec logits --help)", a);
                return 2;
            }
        }
    }
    if (!model || !prefix || (!prompt == !tokens_s)) {
        cli_fail(CMD, "needs -m MODEL, -o PREFIX and exactly one of -p PROMPT / --tokens IDS");
        return 2;
    }
    int32_t *ptok = NULL, *feed = NULL;
    int np = 0, nfeed = 0;
    if (tokens_s && !parse_ids(tokens_s, &ptok, &np))
        return cli_fail(CMD, "--tokens '%s': expected comma-separated token ids", tokens_s), 2;
    if (feed_s && !parse_ids(feed_s, &feed, &nfeed))
        return cli_fail(CMD, "--feed '%s': expected comma-separated token ids", feed_s), 2;
    if (gen < 0) gen = feed ? nfeed : 0;
    if (feed && nfeed < gen - 1) return cli_fail(CMD, "--feed has %d tokens, --gen %d needs %d", nfeed, gen, gen - 1), 2;

    int rc = 1;
    vs_error err = {0};
    vs_lm *lm = vs_lm_load(model, &err);
    vs_tokenizer *tok = NULL;
    vs_threadpool *tp = NULL;
    vs_kv *kv = NULL;
    float *logits = NULL;
    int32_t *greedy = NULL;
    vs_lm_row *rows = NULL;
    char *path = NULL;
    if (!lm) goto fail;
    const vs_lm_config *c = vs_lm_cfg(lm);
    if (prompt) {
        if (!(tok = vs_tokenizer_from_gguf(vs_lm_gguf(lm), &err))) goto fail;
        int64_t n64 = 0;
        /* add_special adds BOS (and EOS when the file says so); --no-bos drops both */
        if (vs_tokenize_alloc(tok, prompt, strlen(prompt), !no_bos, special, &ptok, &n64, &err)) goto fail;
        if (n64 < 1) {
            cli_fail(CMD, "the prompt tokenises to nothing");
            goto done;
        }
        np = (int)n64;
    }
    int n_rows = np + (gen > 0 ? gen - 1 : 0);
    if (n_rows + 1 > c->n_ctx_train)
        vs_log("vlmspec logits: note: %d rows exceed the model's context %d\n", n_rows, c->n_ctx_train);
    if (threads > 1 && !(tp = vs_threadpool_new(threads, &err))) goto fail;
    if (!(kv = vs_lm_kv_new(lm, 1, n_rows + 1, kvt, &err))) goto fail;
    logits = vs_malloc(sizeof(float) * (size_t)n_rows * (size_t)c->n_vocab);
    greedy = vs_malloc(sizeof(int32_t) * (size_t)(gen + 1));
    rows = vs_calloc((size_t)np, sizeof(vs_lm_row));
    if (!logits || !greedy || !rows) {
        cli_fail(CMD, "out of memory for %d rows of %d logits", n_rows, c->n_vocab);
        goto done;
    }
    for (int i = 0; i < np; i++) rows[i] = (vs_lm_row){.token = ptok[i], .pos = i, .want_logits = true};
    vs_lm_out out = {.logits = logits};
    if (vs_lm_forward(lm, kv, tp, rows, np, &out, &err)) goto fail;
    for (int j = 0; j < gen; j++) {
        const float *last = logits + (size_t)(np - 1 + j) * c->n_vocab;
        greedy[j] = vs_argmax(last, c->n_vocab);
        if (j == gen - 1) break;
        vs_lm_row r = {.token = feed ? feed[j] : greedy[j], .pos = np + j, .want_logits = true};
        out.logits = logits + (size_t)(np + j) * c->n_vocab;
        if (vs_lm_forward(lm, kv, tp, &r, 1, &out, &err)) goto fail;
    }

    size_t plen = strlen(prefix) + 8;
    path = vs_malloc(plen);
    if (!path) goto done;
    snprintf(path, plen, "%s.f32", prefix);
    if (vs_write_file(path, logits, sizeof(float) * (size_t)n_rows * c->n_vocab, &err) != VS_OK) goto fail;
    vs_json_writer w;
    vs_json_writer_init(&w);
    vs_json_obj_begin(&w);
    const char *base = strrchr(model, '/');
    vs_json_key(&w, "model");
    vs_json_str(&w, base ? base + 1 : model);
    vs_json_key(&w, "prompt");
    if (prompt) vs_json_str(&w, prompt);
    else vs_json_null(&w);
    vs_json_key(&w, "add_bos");
    vs_json_bool(&w, prompt ? !no_bos && vs_tokenizer_add_bos(tok) : ptok[0] == 1);
    vs_json_key(&w, "kv_cache");
    vs_json_str(&w, kvt == VS_TYPE_F32 ? "f32" : "f16");
    vs_json_key(&w, "n_vocab");
    vs_json_int(&w, c->n_vocab);
    json_ids(&w, "prompt_tokens", ptok, np);
    json_ids(&w, "greedy_tokens", greedy, gen);
    if (feed) json_ids(&w, "fed_tokens", feed, gen > 0 ? gen - 1 : 0);
    vs_json_key(&w, "logits_rows");
    vs_json_int(&w, n_rows);
    vs_json_key(&w, "logits_layout");
    vs_json_str(&w, "float32 little-endian, row-major [logits_rows][n_vocab]; row i < len(prompt_tokens) = logits "
                    "after prompt token i (batched prompt pass); row len(prompt_tokens)+j = logits after feeding "
                    "greedy_tokens[j] (one token per step)");
    vs_json_obj_end(&w);
    size_t jl = 0;
    char *js = vs_json_writer_take(&w, &jl);
    vs_json_writer_free(&w);
    snprintf(path, plen, "%s.json", prefix);
    if (!js) {
        cli_fail(CMD, "%s: out of memory", path);
        goto done;
    }
    js[jl] = '\n'; /* the writer's buffer keeps room for a terminator */
    vs_status ws = vs_write_file(path, js, jl + 1, &err);
    vs_free(js);
    if (ws != VS_OK) goto fail;
    printf("wrote %s.json and %s.f32: %d prompt rows + %d generated rows of %d logits\n", prefix, prefix, np,
           n_rows - np, c->n_vocab);
    rc = 0;
    goto done;
fail:
    cli_fail_err(CMD, &err);
done:
    vs_free(path);
    vs_free(rows);
    vs_free(greedy);
    vs_free(logits);
    vs_free(ptok);
    vs_free(feed);
    vs_kv_free(kv);
    vs_threadpool_free(tp);
    vs_tokenizer_free(tok);
    vs_lm_free(lm);
    return rc;
}
