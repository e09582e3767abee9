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
    o->tree_top_k = 0;
    o->tree_nodes = 0;
    o->p_min = -1; /* not given: the method's default */
    o->draft_kv_type = VS_TYPE_BF16;
    o->compare = false;
    o->json = false;
    o->mmproj = NULL;
    o->n_images = 0;
}

void vs_cli_sampling_flags(cli_flags *fs, vs_sampler_params *sp) {
    cli_flag_add(fs, "--temp", CLI_F32, &sp->temperature, 0, 100);
    cli_flag_add(fs, "--top-k", CLI_INT, &sp->top_k, 0, INT32_MAX);
    cli_flag_add(fs, "--top-p", CLI_F32, &sp->top_p, 0, 1);
    cli_flag_add(fs, "--min-p", CLI_F32, &sp->min_p, 0, 1);
    cli_flag_add(fs, "--seed", CLI_U64, &sp->seed, 0, 9.3e18);
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
            "  --tree-top-k K           EAGLE-2 dynamic trees: each of the K best paths so far gets its K\n"
            "                           most likely next tokens, for GAMMA depths; the best --tree-nodes\n"
            "                           nodes by cumulative probability are verified in one pass; 1..16\n"
            "                           (default 0: off)\n"
            "  --tree-nodes N           nodes of an EAGLE-2 tree; 1..256 (default 8 K)\n"
            "  --draft-p-min P          adaptive draft length (chains of the small-LM drafters): a block\n"
            "                           stops before a drafted token of probability below P; 0..0.99 in\n"
            "                           steps of 0.01 (default 0.40; 0 = fixed length; also\n"
            "                           --spec-draft-p-min, NAME@pP)\n"
            "  --draft-kv-type T        the drafter's KV cache: bf16 (default; the drafters' interleaved\n"
            "                           layout, cheaper attention), f16 or f32\n"
            "  --compare                also run target-only decoding of the same request: speedups\n"
            "  --json FILE              write the run as one JSON object (text, tokens, statistics); '-':\n"
            "                           on standard output instead of the text and the statistics\n"
            "  --mmproj FILE            the target's mmproj (vision tower + projector), with images\n"
            "  --image FILE             an image for the next <image> marker of the prompt (repeatable)\n"
            "  --template NAME          the chat template -p is formatted with as a user turn: vicuna-short\n"
            "                           (default: the shipped models' format; LLaVA-1.5's llama.cpp examples),\n"
            "                           vicuna (with LLaVA's system prompt) or plain; an <image> marker is\n"
            "                           added for each image the text lacks (also --chat-template)\n"
            "  --raw                    use -p as the whole prompt, as it is: no template; <image> markers\n"
            "                           mark where the images go\n");
}

void vs_cli_spec_flags(cli_flags *fs, vs_cli_spec_opts *o) {
    cli_flag_add(fs, "--mmproj", CLI_STR, &o->mmproj, 0, 0);
    cli_flag_list(fs, "--image", o->images, &o->n_images, VS_CLI_SPEC_MAX_IMAGES);
    cli_flag_add(fs, "--template|--chat-template", CLI_STR, &o->chat_template, 0, 0);
    cli_flag_add(fs, "--raw", CLI_BOOL, &o->raw, 0, 0);
    cli_flag_add(fs, "--json", CLI_STR, &o->json_path, 0, 0);
    cli_flag_add(fs, "-md|--model-draft", CLI_STR, &o->draft_model, 0, 0);
    cli_flag_add(fs, "--mmproj-draft", CLI_STR, &o->mmproj_draft, 0, 0);
    cli_flag_add(fs, "--method", CLI_STR, &o->method, 0, 0);
    cli_flag_add(fs, "--draft|--draft-max", CLI_INT, &o->gamma, 0, VS_SPEC_MAX_GAMMA);
    cli_flag_add(fs, "--tree-width", CLI_INT, &o->tree_width, 1, VS_DRAFT_ENS_MAX_WIDTH);
    cli_flag_add(fs, "--tree-top-k", CLI_INT, &o->tree_top_k, 1, VS_TREE_MAX_TOP_K);
    cli_flag_add(fs, "--tree-nodes", CLI_INT, &o->tree_nodes, 1, VS_TREE_MAX_NODES);
    cli_flag_add(fs, "--draft-p-min|--spec-draft-p-min", CLI_F32, &o->p_min, 0, 0.99);
    cli_flag_add(fs, "--draft-kv-type", CLI_KV_DRAFT, &o->draft_kv_type, 0, 0);
    cli_flag_add(fs, "--draft-greedy", CLI_BOOL, &o->greedy_draft, 0, 0);
    cli_flag_add(fs, "--compare", CLI_BOOL, &o->compare, 0, 0);
}

const char *vs_cli_spec_needs_draft(const cli_flags *fs, const vs_cli_spec_opts *o) {
    const void *only[] = {&o->mmproj_draft, &o->method,       &o->gamma,        &o->tree_width,
                          &o->tree_top_k,   &o->tree_nodes,   &o->draft_kv_type, &o->greedy_draft,
                          &o->compare,      &o->p_min};
    for (size_t k = 0; k < VS_ARRAY_LEN(only); k++)
        if (cli_flag_given(fs, only[k]) && !(only[k] == &o->method && !strcmp(o->method, "ar")))
            return cli_flag_seen(fs, only[k]);
    return NULL;
}
