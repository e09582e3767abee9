/* cli_spec: the speculative-decoding and image flags of `vlmspec generate` (the command's own flags stay
 * in cmd_generate.c; all go into one flag table, cli.h), and the sampling flags every generating command
 * shares. cmd_generate.c then calls vs_cli_ens_run (cli_ensemble.h) with its own parsed options copied
 * into vs_cli_spec_opts. Images: each "<image>" marker of the prompt text
 * (src/engine/mmprompt.h layout) gets the next --image; its ViT features are computed ONCE with the target's
 * tower and fed to the target's projector and, in m mode, to the drafter's (--mmproj-draft).
 * The run (cli_ensemble.c) loads the target and the drafter, runs the speculative request (streaming the
 * text), optionally a target-only run of the same request (--compare), and prints the statistics after
 * the text (stderr), or one JSON object on stdout (--json). */
#ifndef VS_CLI_SPEC_H
#define VS_CLI_SPEC_H

#include <stdio.h>

#include "cli.h"
#include "quant.h"
#include "sample.h"

#define VS_CLI_SPEC_MAX_IMAGES 64

typedef enum vs_cli_draft_mode {
    VS_CLI_DRAFT_T = 0,      /* t: text-only drafting (images -> "\n") */
    VS_CLI_DRAFT_M = 1,      /* m: the drafter's projector over the shared image features */
    VS_CLI_DRAFT_REJECT = 2, /* reject: DEBUG / BENCHMARK drafter whose drafts the target rejects */
} vs_cli_draft_mode;

typedef struct vs_cli_spec_opts {
    /* from generate's own flags */
    const char *model;                          /* -m */
    const char *mmproj;                         /* --mmproj (target tower + projector) or NULL */
    const char *images[VS_CLI_SPEC_MAX_IMAGES]; /* --image files, in prompt-marker order */
    int n_images;
    const char *prompt; /* -p text, or NULL when ids are given */
    const int32_t *ids; /* --tokens */
    int n_ids;
    int n_predict, n_ctx, threads;
    vs_type kv_type;
    bool no_bos, special, ignore_eos, show_ids, quiet;
    vs_sampler_params sp;
    /* speculative decoding (vs_cli_spec_flags) */
    const char *draft_model;  /* -md / --model-draft */
    const char *mmproj_draft; /* --mmproj-draft */
    int gamma;                /* --draft / --draft-max (default 5) */
    vs_cli_draft_mode mode;   /* --draft-mode m|t|reject (default t) */
    bool greedy_draft;        /* --draft-greedy */
    int tree_width;           /* --tree-width D: width-D token trees (default 1 = chains) */
    int tree_top_k;           /* --tree-top-k K: EAGLE-2 dynamic trees (default 0 = off) */
    int tree_nodes;           /* --tree-nodes N: their nodes per block (default 0 = 8 K) */
    float p_min;              /* --draft-p-min P: adaptive draft length (< 0, not given: the method's
                               * default; 0: a fixed length) */
    vs_type draft_kv_type;    /* --draft-kv-type: the drafter's cache (default VS_TYPE_BF16) */
    bool compare;             /* --compare */
    const char *json_path;    /* --json FILE: the run as one JSON object ('-' = standard output) */
    bool json;                /* --json -: the JSON replaces the text on standard output */
    const char *method;       /* --method NAME (src/spec/methods.h) */
    const char *chat_template; /* --template NAME: the template -p is formatted with (NULL: the default) */
    bool raw;                  /* --raw: -p is the whole prompt, no template */
    const char *needs_draft;  /* a flag given that only a run with a drafter uses (an error without -md) */
} vs_cli_spec_opts;

/* Defaults of the speculative flags (the rest is left to the caller). */
void vs_cli_spec_opts_init(vs_cli_spec_opts *o);
/* Adds the speculative-decoding and image flags (writing into o) to a command's flag table. */
void vs_cli_spec_flags(cli_flags *fs, vs_cli_spec_opts *o);
/* After parsing: the first flag given that only a run with a drafter uses (NULL: none). */
const char *vs_cli_spec_needs_draft(const cli_flags *fs, const vs_cli_spec_opts *o);
/* The sampling flags every generating command shares: --temp, --top-k, --top-p, --min-p, --seed. */
void vs_cli_sampling_flags(cli_flags *fs, vs_sampler_params *sp);
/* The flags' help lines. */
void vs_cli_spec_usage(FILE *f);

#endif
