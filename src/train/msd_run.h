/* msd_run: the feature-level drafters' training recipe behind `vlmspec train head --kind msd|dream`
 * (docs/training.md, 'The MSD draft head', 'The DREAM draft model'): the MSD head (train_msd.h; also the
 * EAGLE baseline) and the DREAM draft model (train_dream.h) train on the same feature cache.
 * Owns: the run directory (OUT/cache, or a cache shared between runs: the target's features with
 * cache.json, its settings, msd_cache.h; OUT/ckpt, run.json, loss.csv +
 * .svg, eval.csv; at the end OUT/msd-head.gguf and OUT/msd.json, or OUT/dream.gguf and OUT/dream.json),
 * the choice of conversations, the
 * cache stage, the two-stage data schedule, the step loop (AdamW, clipping, warm-up + cosine, input
 * noise), held-out evaluation, checkpoints and resuming, and the export (checked by loading the head
 * file against the target).
 *
 * Conversations: the training split's conversations that the small-LM drafters train on (train_drafter.h's
 * selection rule; with a distill file, the target's own answers to them), shuffled by the seed; the first
 * `samples` are cached, and the last `eval_seqs` of those are held out (never trained on).
 *
 * Two-stage data (MSD eq. 10): step s of S draws each sequence of its batch from the visual conversations
 * with probability p(s) = 0 for s < S/2, then (s - S/2 + 1) / (S - S/2), else from the text-only ones;
 * one-stage draws uniformly from all. Which record: a hash of (seed, step, slot), so a resumed run sees
 * the same batches; the input noise comes from the checkpointed RNG. */
#ifndef VS_MSD_RUN_H
#define VS_MSD_RUN_H

#include "common.h"
#include "quant.h"
#include "train_msd.h"

typedef struct vs_msd_run_opts {
    const char *out;     /* run directory */
    const char *target;  /* the target LM (GGUF; its tokenizer is used) */
    const char *mmproj;  /* the target's mmproj (image rows) */
    const char *data;    /* world dataset directory (its train split) */
    const char *distill; /* optional: a distill file of the target's answers to those conversations */
    const char *cache;   /* the feature cache's directory (NULL: OUT/cache); runs of one target and data
                          * (ablations, other head shapes) share one */
    int64_t samples;     /* conversations cached (0: all) */
    int eval_seqs;       /* of them, held out */
    int shard;           /* records per cache shard */
    int mid_layer;       /* DREAM's intermediate targets in the cache: VS_MSD_MID_NONE (default), _AUTO (the
                          * least-entropy layer per conversation) or a layer (train_msd.h) */
    /* the head */
    bool dream;                  /* the DREAM draft model (decoupled is not read); false: the MSD head */
    int n_head, n_head_kv, n_ff; /* 0: the target's */
    bool decoupled;              /* image rows bypass fc (MSD); false: EAGLE's head */
    vs_type mat_type;            /* the exported head's matrices: F16 (default), BF16 or F32 */
    bool two_stage;              /* MSD's two-stage data; false: one stage */
    /* training */
    int64_t steps, seed;
    int batch, threads, ckpt_every, chunk_steps, eval_every;
    double lr, lr_min, warmup, wd, clip, beta2, noise, time_limit;
    bool resume, quiet, cache_only;
} vs_msd_run_opts;
void vs_msd_run_opts_default(vs_msd_run_opts *o);

typedef struct vs_msd_run_result {
    int64_t step, cached;       /* steps done, records in the cache */
    double loss, top1;          /* held-out: loss (the model's training loss) and top-1 agreement with the target */
    double top1_text, top1_vis; /* held-out top-1 over text-only and visual conversations */
    bool finished;              /* all steps done and the head exported */
} vs_msd_run_result;

vs_status vs_msd_run(const vs_msd_run_opts *o, vs_msd_run_result *res, vs_error *err);

/* The data schedule. Two-stage: the probability that a sequence of step `step` (0-based) of `total`
 * comes from the visual conversations: 0 for step < total / 2, then (step - total/2 + 1) / (total -
 * total/2), reaching 1 at the last step. */
double vs_msd_visual_prob(int64_t step, int64_t total);
typedef struct vs_msd_pools {
    const int64_t *rec[2]; /* record indices: [0] text-only conversations, [1] conversations with images */
    int64_t n[2];          /* n[0] + n[1] >= 1 */
    bool two_stage;
} vs_msd_pools;
/* The B records of step `step`, from hashes of (seed, step, slot): two-stage, slot i takes a visual
 * record with vs_msd_visual_prob (an empty pool gives way to the other), else a text-only one; one-stage,
 * any record uniformly. The same for every run of these arguments (resuming repeats the batches). */
void vs_msd_pick(const vs_msd_pools *p, uint64_t seed, int64_t step, int64_t total, int B, int64_t *idx);

#endif
