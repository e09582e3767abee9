/* vlmspec model: model files.
 *   model random ...  writes a random-weight "llama" model (tests, benchmarks), tokenizer copied from
 *                     another GGUF or a small synthetic vocabulary;
 *   model info -m F   loads a model and prints its configuration, size and tensor types;
 *   model convert     rewrites a model's weight matrices in another type (vs_lm_convert). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "lm.h"

#define CMD "model"

static void usage(FILE *f) {
    fprintf(f,
            "usage: vlmspec model random --dim D --layers L --heads H --ffn F --ctx C --type T\n"
            "                            (--tokenizer-from FILE | --vocab V) [options] -o OUT\n"
            "       vlmspec model info -m MODEL\n"
            "       vlmspec model convert -m MODEL --type T -o OUT\n\n"
            "random: writes a LLaMA-architecture GGUF with random weights ~ N(0, std^2) and norms of 1.\n"
            "  --arch llama           architecture (only llama)\n"
            "  --dim D                model width (a multiple of --heads; of 32 for Q8_0/Q4_0, 256 for Q*_K)\n"
            "  --layers L             decoder blocks\n"
            "  --heads H              attention heads\n"
            "  --kv-heads K           key/value heads (default H; H must be a multiple of K)\n"
            "  --ffn F                SwiGLU hidden width (a multiple of 32 for Q8_0/Q4_0, 256 for Q*_K)\n"
            "  --ctx C                context length stored in the file\n"
            "  --type T               weight type: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K or Q6_K\n"
            "  --tokenizer-from FILE  copy tokenizer.* from this GGUF (the vocabulary size follows it)\n"
            "  --vocab V              without --tokenizer-from: a synthetic vocabulary of V tokens\n"
            "  --rope-base B          RoPE frequency base (default 10000)\n"
            "  --rms-eps E            RMSNorm epsilon (default 1e-5)\n"
            "  --std S                weight standard deviation (default 0.02)\n"
            "  --tied                 no output.weight (logits use token_embd)\n"
            "  --seed S               RNG seed (default 1)\n"
            "  -o, --output OUT       file to write\n"
            "info:\n"
            "  -m, --model MODEL      the GGUF to describe\n"
            "convert: a copy of a LLaMA GGUF with its weight matrices (2-D tensors) in type T, everything\n"
            "else unchanged; BF16 suits drafters on AMX CPUs (their batched products need no conversion).\n"
            "  -m, --model MODEL      the LM to convert (not a projector file)\n"
            "  --type T               F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K or Q6_K\n"
            "  -o, --output OUT       file to write (may be MODEL itself)\n"
            "  -h, --help             this help\n");
}

static int cmd_random(int argc, char **argv) {
    vs_lm_random_opts o = {0};
    o.seed = 1;
    o.type = (vs_type)-1;
    o.n_head_kv = -1;
    const char *out = NULL, *tok_from = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        double d;
        int64_t s64;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--tied")) {
            o.tied = true;
            continue;
        }
        if (!(v = cli_value(CMD, argc, argv, &i))) return 2;
        if (!strcmp(a, "--arch")) {
            if (strcmp(v, "llama")) return cli_fail(CMD, "--arch %s: only 'llama' is supported", v), 2;
        } else if (!strcmp(a, "--dim")) {
            if (!cli_parse_int(CMD, a, v, 2, 1 << 16, &o.n_embd)) return 2;
        } else if (!strcmp(a, "--layers")) {
            if (!cli_parse_int(CMD, a, v, 1, 1024, &o.n_layer)) return 2;
        } else if (!strcmp(a, "--heads")) {
            if (!cli_parse_int(CMD, a, v, 1, 1024, &o.n_head)) return 2;
        } else if (!strcmp(a, "--kv-heads")) {
            if (!cli_parse_int(CMD, a, v, 1, 1024, &o.n_head_kv)) return 2;
        } else if (!strcmp(a, "--ffn")) {
            if (!cli_parse_int(CMD, a, v, 1, 1 << 18, &o.n_ff)) return 2;
        } else if (!strcmp(a, "--ctx")) {
            if (!cli_parse_int(CMD, a, v, 1, 1 << 24, &o.n_ctx)) return 2;
        } else if (!strcmp(a, "--vocab")) {
            if (!cli_parse_int(CMD, a, v, 8, 1 << 24, &o.n_vocab)) return 2;
        } else if (!strcmp(a, "--type")) {
            int t = vs_type_from_name(v);
            if (t < 0 || !vs_type_supported(t))
                return cli_fail(CMD, "--type %s: expected F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K or Q6_K", v), 2;
            o.type = (vs_type)t;
        } else if (!strcmp(a, "--tokenizer-from")) {
            tok_from = v;
        } else if (!strcmp(a, "--rope-base")) {
            if (!cli_parse_f64(CMD, a, v, 1.0001, 1e12, &d)) return 2;
            o.rope_base = (float)d;
        } else if (!strcmp(a, "--rms-eps")) {
            if (!cli_parse_f64(CMD, a, v, 1e-12, 0.5, &d)) return 2;
            o.rms_eps = (float)d;
        } else if (!strcmp(a, "--std")) {
            if (!cli_parse_f64(CMD, a, v, 1e-6, 10, &d)) return 2;
            o.init_std = (float)d;
        } else if (!strcmp(a, "--seed")) {
            if (!cli_parse_i64(CMD, a, v, 0, INT64_MAX, &s64)) return 2;
            o.seed = (uint64_t)s64;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            out = v;
        } else {
            cli_fail(CMD, "unknown option '%s' (see vlmspec model --help)", a);
            return 2;
        }
    }
    const char *missing = !o.n_embd ? "--dim" : !o.n_layer ? "--layers" : !o.n_head ? "--heads" : !o.n_ff ? "--ffn"
                          : !o.n_ctx ? "--ctx" : (int)o.type < 0 ? "--type" : !out ? "-o" : NULL;
    if (missing) return cli_fail(CMD, "random: %s is required (see --help)", missing), 2;
    if (!tok_from && !o.n_vocab) return cli_fail(CMD, "random: give --tokenizer-from FILE or --vocab V"), 2;
    if (tok_from && o.n_vocab) return cli_fail(CMD, "random: --vocab and --tokenizer-from exclude each other"), 2;
    if (o.n_head_kv < 0) o.n_head_kv = o.n_head;
    vs_error err = {0};
    vs_gguf *tg = NULL;
    if (tok_from && !(tg = vs_gguf_open(tok_from, &err))) return cli_fail_err(CMD, &err);
    o.tok_from = tg;
    double t0 = vs_time_now();
    vs_status st = vs_lm_write_random(&o, out, &err);
    vs_gguf_close(tg);
    if (st) return cli_fail_err(CMD, &err);
    /* Load it back: proves the file is valid and gives the sizes to report. */
    vs_lm *lm = vs_lm_load(out, &err);
    if (!lm) return cli_fail_err(CMD, &err);
    const vs_lm_config *c = vs_lm_cfg(lm);
    printf("wrote %s: llama, %s, dim %d, %d layers, %d/%d heads, ffn %d, vocab %d, ctx %d%s; %.1fM params, "
           "%.1f MiB (%.1f s)\n",
           out, vs_type_name(c->wtype), c->n_embd, c->n_layer, c->n_head, c->n_head_kv, c->n_ff, c->n_vocab,
           c->n_ctx_train, c->tied_output ? ", tied output" : "", vs_lm_n_params(lm) / 1e6,
           vs_lm_weight_bytes(lm) / 1048576.0, vs_time_now() - t0);
    vs_lm_free(lm);
    return 0;
}

static int cmd_info(int argc, char **argv) {
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) {
            if (!(path = cli_value(CMD, argc, argv, &i))) return 2;
        } else {
            return cli_fail(CMD, "info: unknown option '%s'", argv[i]), 2;
        }
    }
    if (!path) return cli_fail(CMD, "info: -m MODEL is required"), 2;
    vs_error err = {0};
    vs_lm *lm = vs_lm_load(path, &err);
    if (!lm) return cli_fail_err(CMD, &err);
    const vs_lm_config *c = vs_lm_cfg(lm);
    const vs_lm_weights *w = vs_lm_w(lm);
    printf("%s\n  architecture   llama\n  weights        %s (token_embd %s, output %s)\n", path,
           vs_type_name(c->wtype), vs_type_name(w->tok_embd.type), vs_type_name(w->output.type));
    printf("  dim            %d\n  layers         %d\n  heads          %d (kv %d, head dim %d)\n", c->n_embd,
           c->n_layer, c->n_head, c->n_head_kv, c->head_dim);
    printf("  ffn            %d\n  vocab          %d\n  context        %d\n", c->n_ff, c->n_vocab, c->n_ctx_train);
    printf("  rms eps        %g\n  rope base      %g (dims %d)\n  output         %s\n", c->rms_eps, c->rope_base,
           c->rope_dim, c->tied_output ? "tied to token_embd" : "separate");
    printf("  parameters     %lld (%.1fM)\n  weight bytes   %zu (%.1f MiB)\n", (long long)vs_lm_n_params(lm),
           vs_lm_n_params(lm) / 1e6, vs_lm_weight_bytes(lm), vs_lm_weight_bytes(lm) / 1048576.0);
    vs_lm_free(lm);
    return 0;
}

static int cmd_convert(int argc, char **argv) {
    const char *in = NULL, *out = NULL;
    int type = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!(v = cli_value(CMD, argc, argv, &i))) return 2;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            in = v;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            out = v;
        } else if (!strcmp(a, "--type")) {
            type = vs_type_from_name(v);
            if (type < 0 || !vs_type_supported(type))
                return cli_fail(CMD, "--type %s: expected F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K or Q6_K", v), 2;
        } else {
            return cli_fail(CMD, "convert: unknown option '%s'", a), 2;
        }
    }
    const char *missing = !in ? "-m MODEL" : type < 0 ? "--type T" : !out ? "-o OUT" : NULL;
    if (missing) return cli_fail(CMD, "convert: %s is required (see --help)", missing), 2;
    vs_error err = {0};
    vs_lm_convert_stats s;
    double t0 = vs_time_now();
    if (vs_lm_convert(in, out, (vs_type)type, &s, &err)) return cli_fail_err(CMD, &err);
    printf("wrote %s: %d weight matrices as %s, %d tensors unchanged; tensor data %.2f -> %.2f MiB (%.1f s)\n", out,
           s.converted, vs_type_name((vs_type)type), s.kept, s.bytes_in / 1048576.0, s.bytes_out / 1048576.0,
           vs_time_now() - t0);
    return 0;
}

int vs_cmd_model(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "random")) return cmd_random(argc - 1, argv + 1);
    if (!strcmp(argv[1], "info")) return cmd_info(argc - 1, argv + 1);
    if (!strcmp(argv[1], "convert")) return cmd_convert(argc - 1, argv + 1);
    cli_fail(CMD, "unknown action '%s' (random, info or convert)", argv[1]);
    return 2;
}
