/* vlmspec model: model files.
 *   model random ...  writes a random-weight "llama" model (tests, benchmarks), tokenizer copied from
 *                     another GGUF or a small synthetic vocabulary;
 *   model info -m F   loads a model and prints its configuration, size and tensor types;
 *   model convert     rewrites a model's weight matrices in another type (vs_lm_convert). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "draft_dream.h"
#include "draft_msd.h"
#include "lm.h"

#define CMD "model"

static void usage(FILE *f) {
    fprintf(f,
            "usage: vlmspec model random --dim D --layers L --heads H --ffn F --ctx C --type T\n"
            "                            (--tokenizer-from FILE | --vocab V) [options] -o OUT\n"
            "       vlmspec model info -m MODEL\n"
            "       vlmspec model convert -m MODEL --type T -o OUT\n\n"
            "random: writes a LLaMA-architecture GGUF with random weights ~ N(0, std^2) and norms of 1.\n"
            "  --arch A               llama (default); msd: a random MSD draft head for --target; dream: a\n"
            "                         random DREAM draft model for --target (its gates at 0.5)\n"
            "  --target FILE          --arch msd / dream: the target LM (width, vocabulary and embedding probe\n"
            "                         come from it; give --heads, --ffn, --ctx, -o)\n"
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


/* --arch's value: "llama", "msd" (a random MSD draft head for --target) or "dream" (a random DREAM draft
 * model for --target). */
static bool parse_arch(const char *cmd, const char *flag, const char *v, void *dst) {
    if (strcmp(v, "llama") && strcmp(v, "msd") && strcmp(v, "dream")) {
        cli_fail(cmd, "%s %s: 'llama', 'msd' or 'dream'", flag, v);
        return false;
    }
    *(const char **)dst = v;
    return true;
}

/* Parses `model random`'s flags into o, *out and *tok_from. Returns -1 when they are fine, else the exit
 * status. */
static int random_parse(int argc, char **argv, vs_lm_random_opts *o, const char **out, const char **tok_from,
                        const char **arch, const char **target) {
    memset(o, 0, sizeof(*o));
    o->seed = 1;
    o->n_head_kv = -1;
    int type = -1;
    *arch = "llama";
    *out = *tok_from = *target = NULL;
    cli_flags fs = {0};
    cli_flag_fn_add(&fs, "--arch", parse_arch, arch);
    cli_flag_add(&fs, "--target", CLI_STR, target, 0, 0);
    cli_flag_add(&fs, "--dim", CLI_INT, &o->n_embd, 2, 1 << 16);
    cli_flag_add(&fs, "--layers", CLI_INT, &o->n_layer, 1, 1024);
    cli_flag_add(&fs, "--heads", CLI_INT, &o->n_head, 1, 1024);
    cli_flag_add(&fs, "--kv-heads", CLI_INT, &o->n_head_kv, 1, 1024);
    cli_flag_add(&fs, "--ffn", CLI_INT, &o->n_ff, 1, 1 << 18);
    cli_flag_add(&fs, "--ctx", CLI_INT, &o->n_ctx, 1, 1 << 24);
    cli_flag_fn_add(&fs, "--type", cli_flag_weight_type, &type);
    cli_flag_add(&fs, "--tokenizer-from", CLI_STR, tok_from, 0, 0);
    cli_flag_add(&fs, "--vocab", CLI_INT, &o->n_vocab, 8, 1 << 24);
    cli_flag_add(&fs, "--rope-base", CLI_F32, &o->rope_base, 1.0001, 1e12);
    cli_flag_add(&fs, "--rms-eps", CLI_F32, &o->rms_eps, 1e-12, 0.5);
    cli_flag_add(&fs, "--std", CLI_F32, &o->init_std, 1e-6, 10);
    cli_flag_add(&fs, "--tied", CLI_BOOL, &o->tied, 0, 0);
    cli_flag_add(&fs, "--seed", CLI_U64, &o->seed, 0, 9.3e18);
    cli_flag_add(&fs, "-o|--output", CLI_STR, out, 0, 0);
    const int r = cli_flags_parse(CMD, argc, argv, &fs, usage);
    if (r >= 0) return r;
    o->type = (vs_type)type;
    if (strcmp(*arch, "llama")) { /* a draft head's width, vocabulary and type come from the target */
        const void *not_msd[] = {&o->n_embd, &o->n_layer, &type, tok_from, &o->n_vocab, &o->tied, &o->rope_base,
                                 &o->rms_eps};
        for (size_t i = 0; i < VS_ARRAY_LEN(not_msd); i++)
            if (cli_flag_given(&fs, not_msd[i]))
                return cli_fail(CMD, "random --arch %s: %s comes from --target", *arch, cli_flag_seen(&fs, not_msd[i])),
                       2;
        const char *miss = !*target ? "--target" : !o->n_head ? "--heads" : !o->n_ff ? "--ffn" : !o->n_ctx ? "--ctx"
                           : !*out ? "-o" : NULL;
        if (miss) return cli_fail(CMD, "random --arch %s: %s is required (see --help)", *arch, miss), 2;
        if (o->n_head_kv < 0) o->n_head_kv = o->n_head;
        return -1;
    }
    if (*target) return cli_fail(CMD, "random: --target is read with --arch msd or dream only"), 2;
    const char *missing = !o->n_embd ? "--dim" : !o->n_layer ? "--layers" : !o->n_head ? "--heads" : !o->n_ff ? "--ffn"
                          : !o->n_ctx ? "--ctx" : type < 0 ? "--type" : !*out ? "-o" : NULL;
    if (missing) return cli_fail(CMD, "random: %s is required (see --help)", missing), 2;
    if (!*tok_from && !o->n_vocab) return cli_fail(CMD, "random: give --tokenizer-from FILE or --vocab V"), 2;
    if (*tok_from && o->n_vocab) return cli_fail(CMD, "random: --vocab and --tokenizer-from exclude each other"), 2;
    if (o->n_head_kv < 0) o->n_head_kv = o->n_head;
    return -1;
}

/* A random MSD head (draft_msd.h) for a target: benchmarks of the head's step and tests. */
static int random_msd(const vs_lm_random_opts *o, const char *out, const char *target) {
    vs_error err = {0};
    vs_lm *t = vs_lm_load(target, &err);
    if (!t) return cli_fail_err(CMD, &err);
    vs_msd_random_opts mo = {.n_head = o->n_head, .n_head_kv = o->n_head_kv, .n_ff = o->n_ff, .n_ctx = o->n_ctx,
                             .std = o->init_std, .decoupled = true, .seed = o->seed};
    vs_msd_head *h = vs_msd_head_write_random(&mo, t, out, &err) ? NULL : vs_msd_head_load(out, &err);
    vs_lm_free(t);
    if (!h) return cli_fail_err(CMD, &err);
    const vs_lm_config *c = vs_lm_cfg(vs_msd_head_lm(h));
    printf("wrote %s: msd head for %s, width %d, %d/%d heads, ffn %d, ctx %d; %.2fM parameters (block + fc)\n", out,
           target, c->n_embd, c->n_head, c->n_head_kv, c->n_ff, c->n_ctx_train,
           (vs_lm_n_params(vs_msd_head_lm(h)) + 2.0 * c->n_embd * c->n_embd + c->n_embd) / 1e6);
    vs_msd_head_free(h);
    return 0;
}

/* A random DREAM draft model (draft_dream.h) for a target: benchmarks of its step and tests. Both gates
 * at 0.5, so that the cross-attention block takes part (a trained model starts at 0: the identity). */
static int random_dream(const vs_lm_random_opts *o, const char *out, const char *target) {
    vs_error err = {0};
    vs_lm *t = vs_lm_load(target, &err);
    if (!t) return cli_fail_err(CMD, &err);
    vs_dream_random_opts mo = {.n_head = o->n_head, .n_head_kv = o->n_head_kv, .n_ff = o->n_ff, .n_ctx = o->n_ctx,
                               .std = o->init_std, .gate = 0.5f, .seed = o->seed};
    vs_dream_head *h = vs_dream_head_write_random(&mo, t, out, &err) ? NULL : vs_dream_head_load(out, &err);
    vs_lm_free(t);
    if (!h) return cli_fail_err(CMD, &err);
    const vs_lm_config *c = vs_lm_cfg(vs_dream_head_lm(h));
    printf("wrote %s: dream model for %s, width %d, %d/%d heads, ffn %d, ctx %d\n", out, target, c->n_embd,
           c->n_head, c->n_head_kv, c->n_ff, c->n_ctx_train);
    vs_dream_head_free(h);
    return 0;
}

static int cmd_random(int argc, char **argv) {
    vs_lm_random_opts o;
    const char *out, *tok_from, *arch, *target;
    const int r = random_parse(argc, argv, &o, &out, &tok_from, &arch, &target);
    if (r >= 0) return r;
    if (!strcmp(arch, "msd")) return random_msd(&o, out, target);
    if (!strcmp(arch, "dream")) return random_dream(&o, out, target);
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
    cli_flags fs = {0};
    cli_flag_add(&fs, "-m|--model", CLI_STR, &path, 0, 0);
    const int r = cli_flags_parse(CMD, argc, argv, &fs, usage);
    if (r >= 0) return r;
    if (!path) return cli_fail(CMD, "info: -m MODEL is required"), 2;
    vs_error err = {0};
    vs_lm *lm = vs_lm_load(path, &err);
    if (!lm) return cli_fail_err(CMD, &err);
    const vs_lm_config *c = vs_lm_cfg(lm);
    const vs_lm_weights *w = vs_lm_w(lm);
    const bool head = strcmp(vs_lm_arch(lm), "llama") != 0;
    if (head) /* a draft head: blocks only, the target's embedding and LM head (draft_msd.h) */
        printf("%s\n  architecture   %s (a draft head: the target's token_embd and output)\n  weights        %s\n",
               path, vs_lm_arch(lm), vs_type_name(c->wtype));
    else
        printf("%s\n  architecture   llama\n  weights        %s (token_embd %s, output %s)\n", path,
               vs_type_name(c->wtype), vs_type_name(w->tok_embd.type), vs_type_name(w->output.type));
    if (!strcmp(vs_lm_arch(lm), VS_LM_ARCH_DREAM))
        printf("  blocks         self-attention, cross-attention to the target's features, self-attention\n");
    printf("  dim            %d\n  layers         %d\n  heads          %d (kv %d, head dim %d)\n", c->n_embd,
           c->n_layer, c->n_head, c->n_head_kv, c->head_dim);
    printf("  ffn            %d\n  vocab          %d\n  context        %d\n", c->n_ff, c->n_vocab, c->n_ctx_train);
    printf("  rms eps        %g\n  rope base      %g (dims %d)\n  output         %s\n", c->rms_eps, c->rope_base,
           c->rope_dim, head ? "the target's" : c->tied_output ? "tied to token_embd" : "separate");
    printf("  parameters     %lld (%.1fM)\n  weight bytes   %zu (%.1f MiB)\n", (long long)vs_lm_n_params(lm),
           vs_lm_n_params(lm) / 1e6, vs_lm_weight_bytes(lm), vs_lm_weight_bytes(lm) / 1048576.0);
    vs_lm_free(lm);
    return 0;
}

static int cmd_convert(int argc, char **argv) {
    const char *in = NULL, *out = NULL;
    int type = -1;
    cli_flags fs = {0};
    cli_flag_add(&fs, "-m|--model", CLI_STR, &in, 0, 0);
    cli_flag_add(&fs, "-o|--output", CLI_STR, &out, 0, 0);
    cli_flag_fn_add(&fs, "--type", cli_flag_weight_type, &type);
    const int r = cli_flags_parse(CMD, argc, argv, &fs, usage);
    if (r >= 0) return r;
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
