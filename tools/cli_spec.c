/* cli_spec: the speculative-decoding flags of `vlmspec generate`. See cli_spec.h. */
#include "cli_spec.h"

#include <string.h>

#include "cli.h"
#include "draft_ensemble.h"
#include "spec.h"

void vs_cli_spec_opts_init(vs_cli_spec_opts *o) {
    o->draft_model = NULL;
    o->mmproj_draft = NULL;
    o->gamma = 5;
    o->mode = VS_CLI_DRAFT_T;
    o->greedy_draft = false;
    o->tree_width = 1;
    o->draft_kv_type = VS_TYPE_BF16;
    o->compare = false;
    o->json = false;
    o->mmproj = NULL;
    o->n_images = 0;
    o->needs_draft = NULL;
}

void vs_cli_spec_usage(FILE *f) {
    fprintf(f,
            "speculative decoding (with -md):\n"
            "  -md, --model-draft FILE  draft LM (same tokenizer as the target)\n"
            "  --mmproj-draft FILE      the drafter's projector over the target's vision features (m mode)\n"
            "  --method NAME            a named drafting method (vlmspec bench spec --help lists them:\n"
            "                           m, t, c, p, mt, tabed-mt, massv ...) instead of --draft-mode\n"
            "  --draft, --draft-max N   drafted tokens per block (default 5; 0 = plain decoding)\n"
            "  --draft-mode MODE        t: text-only drafting (default), m: multimodal drafting,\n"
            "                           reject: DEBUG drafter proposing its least likely token (measures\n"
            "                           the cost of speculation when every draft is rejected)\n"
            "  --draft-greedy           draft greedily even when sampling (deterministic drafts)\n"
            "  --tree-width D           token trees: D branches per block from the first drafted\n"
            "                           distribution (its D best tokens, or D drawn without replacement\n"
            "                           when sampling), each continued to GAMMA; 1..8 (default 1: chains)\n"
            "  --draft-kv-type T        the drafter's KV cache: bf16 (default; the drafters' interleaved\n"
            "                           layout, cheaper attention), f16 or f32\n"
            "  --compare                also run target-only decoding of the same request: speedups\n"
            "  --json                   print one JSON object (text, tokens, statistics) instead\n"
            "  --mmproj FILE            the target's mmproj (vision tower + projector), with images\n"
            "  --image FILE             an image for the next <image> marker of the prompt (repeatable)\n"
            "  --template NAME          format -p as a user turn with this chat template (vicuna-short,\n"
            "                           vicuna, plain); an <image> marker is added per image it lacks\n");
}

int vs_cli_spec_parse_flag(const char *cmd, int argc, char **argv, int *i, vs_cli_spec_opts *o) {
    const char *a = argv[*i], *v;
    static const char *const drafter_only[] = {"--compare",    "--draft-greedy", "--mmproj-draft", "--draft",
                                               "--draft-max",  "--tree-width",   "--draft-kv-type", "--method"};
    for (size_t k = 0; k < VS_ARRAY_LEN(drafter_only); k++)
        if (!strcmp(a, drafter_only[k]) && !o->needs_draft) o->needs_draft = drafter_only[k];
    if (!strcmp(a, "--compare")) return o->compare = true, 1;
    if (!strcmp(a, "--json")) return o->json = true, 1;
    if (!strcmp(a, "--draft-greedy")) return o->greedy_draft = true, 1;
    if (strcmp(a, "-md") && strcmp(a, "--model-draft") && strcmp(a, "--mmproj-draft") &&
        strcmp(a, "--draft") && strcmp(a, "--draft-max") && strcmp(a, "--draft-mode") && strcmp(a, "--mmproj") &&
        strcmp(a, "--image") && strcmp(a, "--tree-width") && strcmp(a, "--draft-kv-type") &&
        strcmp(a, "--method") && strcmp(a, "--template"))
        return 0;
    if (!(v = cli_value(cmd, argc, argv, i))) return -1;
    if (!strcmp(a, "-md") || !strcmp(a, "--model-draft"))
        o->draft_model = v;
    else if (!strcmp(a, "--mmproj"))
        o->mmproj = v;
    else if (!strcmp(a, "--image")) {
        if (o->n_images == VS_CLI_SPEC_MAX_IMAGES) {
            cli_fail(cmd, "more than %d images", VS_CLI_SPEC_MAX_IMAGES);
            return -1;
        }
        o->images[o->n_images++] = v;
    } else if (!strcmp(a, "--mmproj-draft"))
        o->mmproj_draft = v;
    else if (!strcmp(a, "--method"))
        o->method = v;
    else if (!strcmp(a, "--template"))
        o->chat_template = v;
    else if (!strcmp(a, "--draft") || !strcmp(a, "--draft-max")) {
        if (!cli_parse_int(cmd, a, v, 0, VS_SPEC_MAX_GAMMA, &o->gamma)) return -1;
    } else if (!strcmp(a, "--tree-width")) {
        if (!cli_parse_int(cmd, a, v, 1, VS_DRAFT_ENS_MAX_WIDTH, &o->tree_width)) return -1;
    } else if (!strcmp(a, "--draft-kv-type")) {
        if (!cli_parse_kv_type(cmd, a, v, true, &o->draft_kv_type)) return -1;
    } else {
        if (!strcmp(v, "t"))
            o->mode = VS_CLI_DRAFT_T;
        else if (!strcmp(v, "m"))
            o->mode = VS_CLI_DRAFT_M;
        else if (!strcmp(v, "reject"))
            o->mode = VS_CLI_DRAFT_REJECT;
        else {
            cli_fail(cmd, "--draft-mode %s: expected m, t or reject", v);
            return -1;
        }
    }
    return 1;
}
