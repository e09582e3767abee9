/* vlmspec tokenizer: tokenizer tools.
 *   tokenizer train --data DIR [--vocab N] [--min-count N] [--pre gpt-2|starcoder] -o TOKENIZER.gguf
 * Trains a byte-level BPE (GPT-2 pre-tokeniser, or single digits first: bpe_train.h) on the world's
 * training texts (train.jsonl and captions.jsonl: every conversation rendered as its prompt with
 * answers) and writes it as GGUF tokenizer metadata. */
#include <stdio.h>
#include <string.h>

#include "bpe_train.h"
#include "cli.h"
#include "world.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: vlmspec tokenizer train --data DIR [--vocab N] [--min-count N] [--pre P] [--name NAME]\n"
            "                               -o TOKENIZER.gguf\n"
            "\n"
            "train   byte-level BPE on the generated world's training split and captions (docs/world.md);\n"
            "        writes tokenizer.ggml.* (model gpt2, pre P) with <unk>=0 <s>=1 </s>=2 <image>=3.\n"
            "  --data DIR       dataset directory written by 'vlmspec data gen'\n"
            "  --vocab N        vocabulary size including 4 special and 256 byte tokens (default 2048)\n"
            "  --min-count N    never merge pairs seen fewer than N times (default 2)\n"
            "  --pre P          pre-tokeniser: gpt-2 (default; GPT-2's regex) or starcoder (every digit a\n"
            "                   token of its own, GPT-2's regex between digits: numbers spelled digit by digit)\n"
            "  --name NAME      general.name (default vlmspec-world-bpe-N)\n"
            "  -o PATH          output GGUF\n");
}

static vs_status add_split(vs_bpe_trainer *t, const char *dir, const char *split, int64_t *n_texts, vs_error *err) {
    vs_world_dataset *d = vs_world_load(dir, split, VS_WORLD_ALL_SUITES, err);
    if (!d) return err->code;
    vs_status st = VS_OK;
    for (int64_t i = 0; i < d->n && !st; i++) {
        const vs_world_sample *s = &d->samples[i];
        char *p = vs_world_prompt(s, s->n_turns - 1, true);
        if (!p) {
            st = vs_error_set(err, VS_ERR_NOMEM, "out of memory");
            break;
        }
        st = vs_bpe_add_text(t, p, strlen(p), err);
        vs_free(p);
        (*n_texts)++;
    }
    vs_world_dataset_free(d);
    return st;
}

static bool parse_pre(const char *cmd, const char *flag, const char *v, void *dst) {
    if (vs_bpe_pre_parse(v, dst)) return true;
    cli_fail(cmd, "%s '%s': expected gpt-2 or starcoder", flag, v);
    return false;
}

static int cmd_train(int argc, char **argv) {
    const char *data = NULL, *out = NULL, *name = NULL;
    int64_t vocab = 2048, min_count = 2;
    vs_bpe_pre pre = VS_BPE_PRE_GPT2;
    cli_flags fs = {0};
    cli_flag_add(&fs, "--data", CLI_STR, &data, 0, 0);
    cli_flag_add(&fs, "-o|--out", CLI_STR, &out, 0, 0);
    cli_flag_add(&fs, "--name", CLI_STR, &name, 0, 0);
    cli_flag_add(&fs, "--vocab", CLI_I64, &vocab, 260, 1 << 20);
    cli_flag_add(&fs, "--min-count", CLI_I64, &min_count, 2, 1 << 30);
    cli_flag_fn_add(&fs, "--pre", parse_pre, &pre);
    const int r = cli_flags_parse("tokenizer train", argc, argv, &fs, usage);
    if (r >= 0) return r;
    if (!data || !out) {
        fprintf(stderr, "vlmspec tokenizer train: --data DIR and -o PATH are required\n");
        return 2;
    }
    vs_error err;
    double t0 = vs_time_now();
    vs_bpe_trainer *t = vs_bpe_trainer_new_pre(pre, &err);
    if (!t) return cli_fail_err("tokenizer train", &err);
    int64_t n_texts = 0;
    if (add_split(t, data, "train", &n_texts, &err) != VS_OK ||
        add_split(t, data, "captions", &n_texts, &err) != VS_OK) {
        vs_bpe_trainer_free(t);
        return cli_fail_err("tokenizer train", &err);
    }
    int64_t n_distinct, n_total;
    vs_bpe_corpus_size(t, &n_distinct, &n_total);
    double t1 = vs_time_now();
    vs_bpe_vocab v;
    if (vs_bpe_train(t, vocab, min_count, &v, &err) != VS_OK) {
        vs_bpe_trainer_free(t);
        return cli_fail_err("tokenizer train", &err);
    }
    double t2 = vs_time_now();
    vs_bpe_trainer_free(t);
    char defname[64];
    snprintf(defname, sizeof(defname), "vlmspec-world-bpe-%lld", (long long)vocab);
    vs_status st = vs_bpe_write_gguf(&v, out, name ? name : defname, &err);
    if (st == VS_OK)
        printf("wrote %s: %lld tokens (%lld merges, pre %s) from %lld texts (%lld pre-tokens, %lld distinct); "
               "counting %.2f s, merging %.2f s\n",
               out, (long long)v.n_vocab, (long long)v.n_merges, vs_bpe_pre_name(pre), (long long)n_texts,
               (long long)n_total, (long long)n_distinct, t1 - t0, t2 - t1);
    if (st == VS_OK && v.n_vocab < vocab)
        printf("note: the corpus ran out of pairs seen %lld+ times before reaching %lld tokens\n", (long long)min_count,
               (long long)vocab);
    vs_bpe_vocab_free(&v);
    return st == VS_OK ? 0 : cli_fail_err("tokenizer train", &err);
}

int vs_cmd_tokenizer(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "train")) return cmd_train(argc - 1, argv + 1);
    fprintf(stderr, "vlmspec tokenizer: unknown subcommand '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
