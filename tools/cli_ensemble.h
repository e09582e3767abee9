/* cli_ensemble: the run of `vlmspec generate` with a drafter or with images, through the ensemble
 * drafter (src/spec/draft_ensemble.h; a single drafting input t or m is its m = 1 case, which is what
 * draft_lm is): drafting inputs M, T, C, P alone or as an ensemble, weight policies, captions, the
 * weight trace, and the debug `--draft-mode reject` drafter. cmd_generate.c adds these flags to its table
 * (vs_cli_ens_flags), then calls vs_cli_ens_run, which hands the request to the library's session.
 * Images (--mmproj, --image) and the other speculative flags are cli_spec's.
 *
 * Flags: --draft-mode m,t,c,p (any non-empty subset, order = row order), --weights POLICY
 * (static[:r1,r2,..] | grid | inv-kl | inv-tvd | random | adaboost), --weights-tau T, --history H,
 * --grid-n N, --history-topk K, --pool K, --trace-weights FILE, --captions FILE, --caption-tokens N. */
#ifndef VS_CLI_ENSEMBLE_H
#define VS_CLI_ENSEMBLE_H

#include <stdio.h>

#include "cli_spec.h"
#include "draft_ensemble.h"

typedef struct vs_cli_ens_opts {
    bool mode_given; /* --draft-mode seen */
    int n_inputs;
    vs_ens_input inputs[VS_ENS_MAX_ROWS];
    vs_ens_weights_cfg weights; /* --weights, --weights-tau, --history, --grid-n, --history-topk */
    bool weights_given;
    int pool_k;                /* --pool (default 2) */
    const char *trace_path;    /* --trace-weights */
    const char *captions_path; /* --captions */
    int caption_tokens;        /* --caption-tokens (captioner; default 24) */
    bool ens_flag;             /* any flag that only the ensemble path understands */
    bool mix_flag;             /* of them, the mixing ones (weights, pool, trace): not with --method */
    bool reject;               /* --draft-mode reject (debug) */
} vs_cli_ens_opts;

void vs_cli_ens_opts_init(vs_cli_ens_opts *o);
/* Adds the ensemble flags (writing into o) to a command's flag table. */
void vs_cli_ens_flags(cli_flags *fs, vs_cli_ens_opts *o);
/* After parsing: which flags were given (mode_given, weights_given, ens_flag), and the single --draft-mode
 * t, m or reject recorded in spec->mode. */
void vs_cli_ens_finish(const cli_flags *fs, vs_cli_ens_opts *o, vs_cli_spec_opts *spec);
void vs_cli_ens_usage(FILE *f);
/* True when an ensemble-only flag or input (several inputs, c or p) was given. */
bool vs_cli_ens_active(const vs_cli_ens_opts *o);
/* Runs the request (spec carries generate's parsed options, images included). Returns the exit status
 * (0 ok, 1 error, 2 usage). */
int vs_cli_ens_run(const char *cmd, const vs_cli_spec_opts *spec, const vs_cli_ens_opts *o);

#endif
