/* bench: the speculative-decoding benchmark harness (`vlmspec bench spec`).
 * Owns: the result record of one cell (sample x turn x method x gamma x temperature), its JSON Lines
 * form and the append-only results file (re-read on start so an interrupted run resumes), the pure
 * aggregation of records into table cells (tau, n-alpha, accepted-length histogram, times, Tq/Tp,
 * measured walltime speedups as mean and median over samples, TABED eq. 1 estimates), the report
 * writers (markdown tables shaped like TABED Tables 1/3/4 and MSD Table 3, CSV, JSON, SVG plots), and
 * the runner that loads the models (a vs_models + vs_session, src/spec/session.h) and the world dataset
 * and measures every cell, each sample's methods (src/spec/methods.h) interleaved with its target-only
 * run.
 *
 * Definitions (docs/bench.md has the full text):
 *   tau       = generated tokens / target verify passes, pooled over the group's records;
 *   n-alpha   = P(drafted position n accepted | positions 1..n-1 accepted), pooled;
 *   speedup   per record = (target-only time per token) / (method time per token) of the SAME sample,
 *             turn and temperature; decode-only (t_decode) and end-to-end (t_total = vision + prefills
 *             + decode); a group reports the mean and the median over its records;
 *   Tq        = drafting time / draft forward passes; Tp = the target-only runs' verify time per step
 *             (one row); Tp(gamma+1) = mean verify time of blocks that verified gamma drafts;
 *   eq. 1     = tau / (gamma Tq/Tp + 1) (TABED); eq. 1 CPU = tau / (gamma Tq/Tp + Tp(gamma+1)/Tp).
 * Everything but the runner is pure and tested on synthetic logs (tests/test_bench.c). */
#ifndef VS_BENCH_H
#define VS_BENCH_H

#include <stdio.h>

#include "caption.h"
#include "common.h"
#include "json.h"
#include "methods.h"
#include "session.h"
#include "quant.h"
#include "spec.h"
#include "sysinfo.h"
#include "world.h"

#define VS_BENCH_MAX_LIST 32 /* entries of --gamma / --temp / --methods lists */
#define VS_BENCH_NAME 48     /* bytes of the short names in a record (NUL included) */

/* ------------------------------------------------------------------------------------------------
 * Records */

/* One measured cell. Times in seconds. The base_* fields come from the target-only run of the same
 * sample, turn and temperature, measured in the same interleaved unit. */
typedef struct vs_bench_record {
    char sample[VS_BENCH_NAME];    /* sample id ("test-vqa-00003") */
    char suite[24];                /* "vqa" ... */
    int32_t turn;                  /* 1-based turn */
    char turn_kind[16];            /* "first", "followup", "unrelated", "new_image" */
    char method[VS_BENCH_NAME];    /* "ar" (target only), "m", "t", "tabed-mt" ... */
    int32_t gamma;                 /* draft length (0 for ar) */
    double temp;                   /* sampling temperature (0 = greedy) */
    int32_t n_prompt;              /* prompt rows */
    int32_t n_images;              /* images in the prompt */
    int32_t n_tokens, n_blocks;    /* generated tokens, verify passes */
    int64_t n_drafted, n_accepted; /* drafted nodes verified, accepted */
    int64_t n_steps;               /* draft forward passes */
    int64_t alpha_num[VS_SPEC_MAX_GAMMA], alpha_den[VS_SPEC_MAX_GAMMA]; /* n-alpha counts ([n - 1]) */
    int64_t hist[VS_SPEC_MAX_GAMMA + 1];                                /* blocks by accepted length */
    double t_vision;        /* image encoding + the target's projection (shared by all methods) */
    double t_caption;       /* captioner wall time (caption drafting), 0 when none; it runs concurrently
                             * with the target's prefill: only the part not hidden counts, inside
                             * t_decode (the drafter's wait) or t_draft_prefill, so t_total excludes it */
    double t_prefill;       /* target prefill */
    double t_draft_prefill; /* drafter begin (its prefill, its own projection) */
    double t_draft;         /* proposing */
    double t_verify;        /* verifying */
    double t_decode;        /* the block loop */
    double t_total;         /* vision + caption + prefills + decode */
    double t_verify_full;   /* verify time summed over blocks that verified gamma drafts */
    int32_t n_verify_full;  /* those blocks */
    int32_t base_tokens, base_blocks;
    double base_t_verify, base_t_decode, base_t_total;
    int8_t identical; /* output tokens equal the target-only output: 1 / 0; -1 not compared (sampling) */
    int8_t correct;   /* the world checker's verdict on the output: 1 / 0; -1 not checked */
    char stop[12];    /* vs_spec_stop_name */
} vs_bench_record;

/* Fills the measured fields of r from a run's log and the target-only log of the same request
 * (base may be NULL: base fields 0). Identity fields (sample, suite, turn, method, temp ...) and
 * t_vision / t_caption are left as they are; t_total is recomputed as t_vision + log->t_prefill +
 * log->t_draft_prefill + log->t_decode. identical is set when base is given. */
void vs_bench_record_fill(vs_bench_record *r, const vs_spec_log *log, const vs_spec_log *base);

/* Per-record derived figures (0 when undefined). */
double vs_bench_record_tau(const vs_bench_record *r);
double vs_bench_record_speedup_decode(const vs_bench_record *r);
double vs_bench_record_speedup_total(const vs_bench_record *r);

/* JSON Lines form: one object, no newline (vs_malloc'd). */
char *vs_bench_record_to_json(const vs_bench_record *r, size_t *len);
/* Parses an object written by vs_bench_record_to_json. VS_ERR_FORMAT naming `what` for a missing or
 * mistyped field. */
vs_status vs_bench_record_from_json(const vs_json *obj, const char *what, vs_bench_record *r, vs_error *err);

/* The cell key: "sample|turn|method|gamma|temp" (temp with 3 decimals). */
void vs_bench_cell_key(char *buf, size_t cap, const char *sample, int32_t turn, const char *method,
                       int32_t gamma, double temp);

/* ------------------------------------------------------------------------------------------------
 * The results file: JSON Lines, line 1 a header object {"type":"header",...} describing the run
 * (models, dataset, lengths), then one record object per line ("type":"record"), appended as units
 * finish. A run that was killed leaves at most a partial last line; it is dropped on reading. */

typedef struct vs_bench_results {
    vs_bench_record *rec; /* [n] */
    int64_t n, cap;
    char *header;       /* the header line as written (vs_malloc'd), NULL when the file was empty */
    int64_t good_bytes; /* length of the file's complete, valid prefix (appends start there) */
    int64_t n_dropped;  /* partial / unreadable trailing lines dropped */
    /* key index (open addressing over hashes of the cell key) */
    uint64_t *hkeys;
    int64_t *hidx;
    int64_t hcap;
} vs_bench_results;

void vs_bench_results_init(vs_bench_results *r);
void vs_bench_results_free(vs_bench_results *r);
vs_status vs_bench_results_add(vs_bench_results *r, const vs_bench_record *rec, vs_error *err);
/* Index of the record of a cell, or -1 (the last one wins when a cell appears twice). */
int64_t vs_bench_results_find(const vs_bench_results *r, const char *sample, int32_t turn, const char *method,
                              int32_t gamma, double temp);
/* Reads a results file; a missing file gives an empty result set (VS_OK). A malformed line before the
 * last is an error (VS_ERR_FORMAT naming the line); an incomplete or malformed LAST line is dropped
 * (counted in n_dropped). */
vs_status vs_bench_results_load(const char *path, vs_bench_results *r, vs_error *err);

/* An open results file for appending. */
typedef struct vs_bench_results_file {
    FILE *f;
    char *path;
} vs_bench_results_file;

/* Opens path for appending after the valid prefix found by vs_bench_results_load (truncating a partial
 * last line), writing `header` (one JSON object, no newline) first when the file is empty. When the file
 * already has a header that differs from `header`, VS_ERR_INVALID explains that the results belong to
 * another configuration (start a new --out directory or pass --fresh). */
vs_status vs_bench_results_open(vs_bench_results_file *rf, const char *path, const vs_bench_results *loaded,
                                const char *header, vs_error *err);
/* Appends records (one line each) and flushes: a unit is on disk or not at all (up to a partial line). */
vs_status vs_bench_results_append(vs_bench_results_file *rf, const vs_bench_record *recs, int64_t n,
                                  vs_error *err);
void vs_bench_results_close(vs_bench_results_file *rf);

/* ------------------------------------------------------------------------------------------------
 * Aggregation */

/* Which records a group takes: NULL / -1 / NaN / 0 = any. */
typedef struct vs_bench_filter {
    const char *method;
    int32_t gamma; /* -1 any */
    double temp;   /* NaN any */
    const char *suite;
    int32_t turn; /* 0 any */
    const char *turn_kind;
} vs_bench_filter;
/* Matches everything. */
vs_bench_filter vs_bench_filter_any(void);

typedef struct vs_bench_group {
    int64_t n;     /* records */
    int32_t gamma; /* the records' gamma when they agree, else -1 */
    int64_t n_tokens, n_blocks, n_drafted, n_accepted, n_steps;
    double tau;                        /* n_tokens / n_blocks */
    double accept_rate;                /* accepted / decided positions */
    double n_alpha[VS_SPEC_MAX_GAMMA]; /* -1 = no data */
    int64_t alpha_num[VS_SPEC_MAX_GAMMA], alpha_den[VS_SPEC_MAX_GAMMA];
    int64_t hist[VS_SPEC_MAX_GAMMA + 1];
    /* mean per record */
    double t_vision, t_caption, t_prefill, t_draft_prefill, t_draft, t_verify, t_decode, t_total;
    double tok_s_decode, tok_s_total; /* pooled: tokens / summed time */
    double tq, tp, tp_verify, tq_tp;  /* seconds; tq_tp = Tq / Tp */
    double est_eq1, est_eq1_cpu;      /* TABED eq. 1 and its CPU variant (0 when unknown) */
    int64_t n_speedup;                /* records with a baseline */
    double speedup_decode_mean, speedup_decode_median;
    double speedup_total_mean, speedup_total_median;
    int64_t n_compared, n_identical; /* greedy identity checks */
    int64_t n_checked, n_correct;    /* checker verdicts */
} vs_bench_group;

/* Aggregates the records matching f into g (pure). Allocates a scratch for the medians: VS_ERR_NOMEM. */
vs_status vs_bench_aggregate(const vs_bench_record *recs, int64_t n, const vs_bench_filter *f,
                             vs_bench_group *g, vs_error *err);
/* Median of v[0..n) (v is reordered); 0 for n = 0. */
double vs_bench_median(double *v, int64_t n);

/* ------------------------------------------------------------------------------------------------
 * Reports */

typedef struct vs_bench_report_opts {
    const char *out_dir;     /* where the files go (must exist) */
    const vs_sysinfo *sys;   /* machine description, or NULL */
    const char *header_json; /* the results file's header (run configuration), or NULL */
    const char *title;       /* report title, or NULL */
} vs_bench_report_opts;

/* Writes into out_dir: report.md (headline table, TABED Table 1 / 3 / 4 shapes, MSD Table 3 shape,
 * n-alpha, accepted lengths, times, identity / checker counts, machine, plus the figures of any
 * model-bench-*.json files found in out_dir), results.csv (one row per record), summary.json (machine,
 * configuration, every aggregated group) and SVG plots (tau per method per suite, speedup per method,
 * n-alpha, accepted-length histogram). */
vs_status vs_bench_write_report(const vs_bench_record *recs, int64_t n, const vs_bench_report_opts *o,
                                vs_error *err);
/* Reproducibility check: compares two runs of the same command (a = this run, b = the reference),
 * per method, gamma and temperature, on the median decode-only and end-to-end speedups and tau; writes a
 * markdown table to f (may be NULL) and returns in *max_rel the largest |a - b| / b of the median
 * speedups (groups present in only one run are listed and count as a difference of 1). */
vs_status vs_bench_compare(const vs_bench_record *a, int64_t na, const vs_bench_record *b, int64_t nb,
                           FILE *f, double *max_rel, vs_error *err);
/* The CSV alone (header line + one row per record). */
vs_status vs_bench_write_csv(const vs_bench_record *recs, int64_t n, const char *path, vs_error *err);

/* ------------------------------------------------------------------------------------------------
 * The runner */

/* Default file names inside --models DIR (each overridable). */
#define VS_BENCH_FILE_TARGET "target.gguf"
#define VS_BENCH_FILE_TARGET_MMPROJ "target-mmproj.gguf"
#define VS_BENCH_FILE_DRAFT "draft-llava.gguf"
#define VS_BENCH_FILE_DRAFT_MMPROJ "draft-llava-mmproj.gguf"
#define VS_BENCH_FILE_MASSV "draft-massv.gguf"
#define VS_BENCH_FILE_MASSV_MMPROJ "draft-massv-mmproj.gguf"
#define VS_BENCH_FILE_MSD "msd-head.gguf" /* the MSD head (method msd) */
#define VS_BENCH_FILE_EAGLE "eagle-head.gguf" /* the EAGLE baseline's head (method eagle) */
#define VS_BENCH_FILE_DREAM "dream.gguf"      /* the DREAM draft model (method dream) */

typedef struct vs_bench_config {
    const char *models_dir; /* directory of the model files */
    /* file names relative to models_dir (or absolute); NULL = the defaults above */
    const char *target, *target_mmproj, *draft, *draft_mmproj, *massv, *massv_mmproj, *msd_head, *eagle_head, *dream;
    const char *data_dir;                   /* world dataset directory */
    const char *split;                      /* "test" (default) */
    uint32_t suites;                        /* mask of VS_WORLD_SUITE_BIT; 0 = all but caption */
    const char *methods[VS_BENCH_MAX_LIST]; /* method names; "ar" is always run (the baseline) */
    int n_methods;
    int32_t gammas[VS_BENCH_MAX_LIST];
    int n_gammas;
    double temps[VS_BENCH_MAX_LIST];
    int n_temps;
    int32_t turns[2]; /* 1-based turns to measure */
    int n_turns;
    int64_t limit;     /* samples per suite (0 = all) */
    int threads;       /* >= 1 */
    int32_t n_predict; /* token limit per turn (default 128, as TABED) */
    int32_t repeat;    /* timed runs of every cell of a unit, interleaved; the fastest run of each
                        * cell is recorded (noise only adds time). Default 1 */
    int32_t n_ctx;     /* cache rows; 0 = each model's n_ctx_train */
    vs_type kv_type;   /* the target's cache: VS_TYPE_F16 (default) or F32 */
    vs_type draft_kv_type; /* the drafters' caches: VS_TYPE_BF16 (default; kv.h), F16 or F32 */
    uint64_t seed;     /* sampling seeds derive from it */
    bool ignore_eos;
    const char *out_dir; /* created if missing */
    bool fresh;          /* discard existing results in out_dir */
    bool progress;       /* progress line on stderr */
    bool quiet;          /* no informational lines */
} vs_bench_config;

void vs_bench_config_default(vs_bench_config *c);

typedef struct vs_bench_run_info {
    int64_t n_units;         /* (sample, turn, temperature) units in the plan */
    int64_t n_cells;         /* cells in the plan (methods x gammas per unit, ar included) */
    int64_t n_done_before;   /* cells found finished in the results file */
    int64_t n_run;           /* cells measured now */
    int64_t n_skipped_units; /* units skipped (prompt longer than the context) */
    int64_t n_mismatch;      /* greedy runs whose output differed from target-only (a bug) */
    double seconds;
} vs_bench_run_info;

/* Measures every missing cell and appends it to out_dir/results.jsonl (created with a header; resumed
 * when it exists and its header matches the configuration). Does not write the report (see
 * vs_bench_report_dir). */
vs_status vs_bench_run(const vs_bench_config *c, vs_bench_run_info *info, vs_error *err);
/* Reads out_dir/results.jsonl and writes the report next to it (collecting machine information, with
 * the bandwidth measured by `threads` threads when measure_bw). */
vs_status vs_bench_report_dir(const char *out_dir, int threads, bool measure_bw, vs_error *err);

/* A complete random model set for trying the harness before trained models exist: the target (LM +
 * mmproj with a tower), a LLaVA-recipe drafter that is the target's "fewer-layer twin" (same seed, tied
 * embeddings, its first draft_layers layers: it agrees with the target often, so tau is above 1) with a
 * projector-only copy of the target's projector, and the same pair under the MASSV file names. Written
 * into dir (created) under the default file names. */
typedef struct vs_bench_random_opts {
    int n_embd, n_layer, n_head, n_ff, n_vocab, n_ctx; /* target LM (synthetic vocabulary of n_vocab) */
    int draft_layers;                                  /* drafter layers (< n_layer) */
    vs_type type;                                      /* LM weight type */
    float init_std;
    int image_size, patch_size, vit_width, vit_blocks; /* tower; projector hidden = 2 * vit_width */
    uint64_t seed;
} vs_bench_random_opts;
/* 256 wide, 4 layers, 4 heads, ffn 512, vocab 512, ctx 2048, drafter 1 layer, F16, std 0.1; tower 56 px,
 * patch 14 (16 rows per image), width 64, 1 block; seed 1. */
void vs_bench_random_opts_default(vs_bench_random_opts *o);
vs_status vs_bench_make_random_models(const char *dir, const vs_bench_random_opts *o, vs_error *err);

#endif
