/* vlmspec train: the trainer's commands.
 *   target   trains the target VLM jointly on the generated world's training split (train_data.h
 *            batches, AdamW with warm-up + cosine, clipping, gradient accumulation), with resumable
 *            checkpoints, a progress line, the loss curve (CSV + SVG), and GGUF export at the end.
 *   drafter  trains a draft VLM by the LLaVA recipe or MASSV (train_drafter.h) in phases, each one a
 *            resumable run of the same loop as `target`.
 *   export   writes a checkpoint as LM + mmproj GGUF (evaluating a model in the middle of training).
 *   bench    times training steps of a VLM of the given size on synthetic data and compares the
 *            achieved FLOP rate with the F32 sgemm peak measured on this machine.
 * The commands share one flag parser (a table of typed flags) and one training loop (src/train/train_loop.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "outfile.h"
#include "distill.h"
#include "image.h"
#include "json.h"
#include "msd_run.h"
#include "quant.h"
#include "train_data.h"
#include "train_drafter.h"
#include "train_loop.h"
#include "train_model.h"
#include "train_vision.h"
#include "world.h"

/* ---------------------------------------------------------------------------------------------- */
/* Flags: one table per command (cli.h's cli_flags) */

/* The ViT flags (bench, target); image_size_given may be NULL. */
static void add_vision_flags(cli_flags *s, vs_train_vlm_config *c, bool *image_size_given) {
    (void)image_size_given;
    cli_flag_add(s, "--image-size", CLI_INT, &c->image_size, 1, 4096);
    cli_flag_add(s, "--patch", CLI_INT, &c->patch_size, 1, 4096);
    cli_flag_add(s, "--v-width", CLI_INT, &c->v_width, 1, 1 << 14);
    cli_flag_add(s, "--v-blocks", CLI_INT, &c->v_blocks, 0, 256);
    cli_flag_add(s, "--v-heads", CLI_INT, &c->v_heads, 1, 256);
    cli_flag_add(s, "--v-ffn", CLI_INT, &c->v_ffn, 1, 1 << 16);
}

/* The LM shape flags (bench, target, drafter). */
static void add_lm_flags(cli_flags *s, vs_train_vlm_config *c) {
    cli_flag_add(s, "--width", CLI_INT, &c->width, 2, 1 << 14);
    cli_flag_add(s, "--layers", CLI_INT, &c->n_layers, 1, 256);
    cli_flag_add(s, "--heads", CLI_INT, &c->n_heads, 1, 256);
    cli_flag_add(s, "--kv-heads", CLI_INT, &c->n_kv_heads, 1, 256);
    cli_flag_add(s, "--ffn", CLI_INT, &c->ffn, 1, 1 << 16);
}


/* Optimiser and batching flags shared by target and drafter (per-phase ones are the drafter's). */
static void add_optim_flags(cli_flags *s, vs_train_sched *o) {
    cli_flag_add(s, "--accum", CLI_INT, &o->accum, 1, 4096);
    cli_flag_add(s, "--seq", CLI_INT, &o->seq, 2, 1 << 16);
    cli_flag_add(s, "--bucket", CLI_INT, &o->bucket, 1, 1 << 20);
    cli_flag_add(s, "--wd", CLI_F64, &o->wd, 0, 10);
    cli_flag_add(s, "--clip", CLI_F64, &o->clip, 0, 1e9);
    cli_flag_add(s, "--beta2", CLI_F64, &o->beta2, 0, 1);
    cli_flag_add(s, "--seed", CLI_I64, &o->seed, 0, 9.2e18);
}

/* The schedule flags of the recipes with their own loop (vision, head). */
typedef struct recipe_flags {
    int64_t *steps, *seed;
    double *lr, *lr_min, *warmup, *wd, *clip, *beta2;
    int *eval_every;
} recipe_flags;

static void add_recipe_flags(cli_flags *s, recipe_flags f) {
    cli_flag_add(s, "--steps", CLI_I64, f.steps, 1, (double)(INT64_C(1) << 40));
    cli_flag_add(s, "--lr", CLI_F64, f.lr, 0, 10);
    cli_flag_add(s, "--lr-min", CLI_F64, f.lr_min, 0, 10);
    cli_flag_add(s, "--warmup", CLI_F64, f.warmup, 0, 1e9);
    cli_flag_add(s, "--wd", CLI_F64, f.wd, 0, 10);
    cli_flag_add(s, "--clip", CLI_F64, f.clip, 0, 1e9);
    cli_flag_add(s, "--beta2", CLI_F64, f.beta2, 0, 1);
    cli_flag_add(s, "--seed", CLI_I64, f.seed, 0, 9.2e18);
    cli_flag_add(s, "--eval-every", CLI_INT, f.eval_every, 1, 1 << 30);
}

/* --gemm and --attention: select the products and the attention path for the whole process; -1 when
 * fine, else the exit code. */
static int apply_gemm_names(const char *cmd, const char *gemm, const char *attention) {
    if (gemm && !vs_train_set_gemm(gemm))
        return cli_fail(cmd, "--gemm %s: unknown, or not available on this CPU or build (see `vlmspec version`)",
                        gemm), 2;
    if (attention && !vs_train_set_attention(attention))
        return cli_fail(cmd, "--attention %s: unknown (auto, direct or gemm), or gemm without AMX-BF16 on this "
                        "CPU", attention), 2;
    return -1;
}

static int apply_gemm(const char *cmd, const vs_train_sched *o) {
    return apply_gemm_names(cmd, o->gemm, o->attention);
}

/* Running flags: they change the result at most in its last bits (--threads, --gemm and --attention
 * change the summation order or precision of the products: loop_check_threads warns when a resumed run
 * changes them). */
static void add_run_flags(cli_flags *s, vs_train_sched *o) {
    cli_flag_add(s, "--threads", CLI_INT, &o->threads, 1, 256);
    cli_flag_add(s, "--gemm", CLI_STR, &o->gemm, 0, 0);
    cli_flag_add(s, "--attention", CLI_STR, &o->attention, 0, 0);
    cli_flag_add(s, "--resume", CLI_BOOL, &o->resume, 0, 0);
    cli_flag_add(s, "--ckpt-every", CLI_INT, &o->ckpt_every, 1, 1 << 30);
    cli_flag_add(s, "--chunk-steps", CLI_INT, &o->chunk_steps, 0, 1 << 30);
    cli_flag_add(s, "--time-limit", CLI_F64, &o->time_limit, 0, 1e9);
    cli_flag_add(s, "-q", CLI_BOOL, &o->quiet, 0, 0);
    cli_flag_add(s, "--quiet", CLI_BOOL, &o->quiet, 0, 0);
}

static void bench_usage(FILE *f) {
    fprintf(
        f,
        "usage: vlmspec train bench [options]\n"
        "Times full training steps (forward, backward, clipping, AdamW) of a VLM with random weights on\n"
        "synthetic batches, and the F32 sgemm peak, with the same thread count.\n"
        "  --threads N        threads for the pool and OpenBLAS (default 2)\n"
        "  --gemm NAME        the products: openblas, blocked, amx-bf16x3 or avx512-bf16 (default: openblas\n"
        "                     if built)\n"
        "  --attention NAME   auto (default: gemm with amx-bf16x3, else direct), direct or gemm\n"
        "  --steps N          timed steps (default 3) after one warm-up step\n"
        "  --batch B          sequences per step (default 8)\n"
        "  --seq T            rows per sequence, image rows included (default 192)\n"
        "  --images K         images per sequence (default 1)\n"
        "  --image-size S     ViT input side (default 64)      --patch P     patch side (default 8)\n"
        "  --v-width W        ViT width (default 192)          --v-blocks N  ViT blocks (default 6)\n"
        "  --v-heads N        ViT heads (default 3)            --v-ffn N     ViT MLP width (default 768)\n"
        "  --width C          LM width (default 512)           --layers N    LM layers (default 8)\n"
        "  --heads N          LM heads (default 8)             --kv-heads N  LM key/value heads (default 4)\n"
        "  --ffn N            LM SwiGLU width (default 1408)   --vocab N     vocabulary (default 2048)\n"
        "  --gemm-size N      side of the square sgemm used for the peak (default 2048)\n");
}

/* Seconds per call of C(n, n) = A(n, n) B(n, n)^T, best of reps. */
static double time_sgemm(vs_threadpool *tp, int m, int n, int k, int reps) {
    float *A = vs_malloc(sizeof(float) * m * k), *B = vs_malloc(sizeof(float) * n * k);
    float *C = vs_malloc(sizeof(float) * m * n);
    if (!A || !B || !C) {
        vs_free(A), vs_free(B), vs_free(C);
        return -1;
    }
    vs_rng r;
    vs_rng_seed(&r, 1);
    for (size_t i = 0; i < (size_t)m * k; i++) A[i] = vs_rng_normal(&r);
    for (size_t i = 0; i < (size_t)n * k; i++) B[i] = vs_rng_normal(&r);
    vs_train_sgemm(tp, false, true, m, n, k, 1.0f, A, k, B, k, 0.0f, C, n); /* warm-up */
    double best = 1e30;
    for (int i = 0; i < reps; i++) {
        double t0 = vs_time_now();
        vs_train_sgemm(tp, false, true, m, n, k, 1.0f, A, k, B, k, 0.0f, C, n);
        double t = vs_time_now() - t0;
        if (t < best) best = t;
    }
    vs_free(A), vs_free(B), vs_free(C);
    return best;
}

typedef struct bench_opts {
    int threads, steps, B, T, K, gemm;
    vs_train_vlm_config c;
    const char *gemm_name, *att_name;
} bench_opts;

/* -1 when fine, else the exit status. */
static int bench_parse(int argc, char **argv, bench_opts *o) {
    *o = (bench_opts){.threads = 2, .steps = 3, .B = 8, .T = 192, .K = 1, .gemm = 2048};
    o->c = vs_train_vlm_target_shape();
    o->c.vocab = 2048, o->c.max_seq = 512;
    for (int i = 0; i < 3; i++) o->c.image_mean[i] = 0.5f, o->c.image_std[i] = 0.25f;
    cli_flags fs = {0};
    cli_flag_add(&fs, "--threads", CLI_INT, &o->threads, 1, 256);
    cli_flag_add(&fs, "--steps", CLI_INT, &o->steps, 1, 1000);
    cli_flag_add(&fs, "--batch", CLI_INT, &o->B, 1, 4096);
    cli_flag_add(&fs, "--seq", CLI_INT, &o->T, 1, 1 << 16);
    cli_flag_add(&fs, "--images", CLI_INT, &o->K, 0, 64);
    add_vision_flags(&fs, &o->c, NULL);
    add_lm_flags(&fs, &o->c);
    cli_flag_add(&fs, "--vocab", CLI_INT, &o->c.vocab, 2, 1 << 20);
    cli_flag_add(&fs, "--gemm-size", CLI_INT, &o->gemm, 16, 16384);
    cli_flag_add(&fs, "--gemm", CLI_STR, &o->gemm_name, 0, 0);
    cli_flag_add(&fs, "--attention", CLI_STR, &o->att_name, 0, 0);
    int prc = cli_flags_parse("train bench", argc, argv, &fs, bench_usage);
    if (prc >= 0) return prc;
    if ((prc = apply_gemm_names("train bench", o->gemm_name, o->att_name)) >= 0) return prc;
    o->c.max_seq = o->T > 512 ? o->T : 512;
    return -1;
}

/* A synthetic batch: per sequence BOS, its K images (NP rows each), then text; loss on the text. */
typedef struct synth_batch {
    float *pixels, *mask;
    int32_t *tok, *img, *tgt;
    vs_train_batch b;
} synth_batch;

static void synth_free(synth_batch *sb) {
    vs_free(sb->pixels), vs_free(sb->mask), vs_free(sb->tok), vs_free(sb->img), vs_free(sb->tgt);
}

static bool synth_make(const bench_opts *o, int NP, synth_batch *sb) {
    const vs_train_vlm_config *c = &o->c;
    const int B = o->B, T = o->T, K = o->K, NI = B * K;
    const size_t npx = (size_t)NI * 3 * c->image_size * c->image_size, N = (size_t)B * T;
    sb->pixels = vs_malloc(sizeof(float) * npx), sb->mask = vs_malloc(sizeof(float) * N);
    sb->tok = vs_malloc(sizeof(int32_t) * N), sb->img = vs_malloc(sizeof(int32_t) * N);
    sb->tgt = vs_malloc(sizeof(int32_t) * N);
    if (!sb->pixels || !sb->mask || !sb->tok || !sb->img || !sb->tgt) return false;
    vs_rng r;
    vs_rng_seed(&r, 2);
    for (size_t i = 0; i < npx; i++) sb->pixels[i] = vs_rng_normal(&r);
    for (int s = 0; s < B; s++)
        for (int t = 0; t < T; t++) {
            size_t i = (size_t)s * T + t;
            bool is_img = t >= 1 && t <= K * NP;
            sb->img[i] = is_img ? (s * K) * NP + (t - 1) : -1;
            sb->tok[i] = is_img ? -1 : (int32_t)vs_rng_below(&r, (uint32_t)c->vocab);
            sb->tgt[i] = (int32_t)vs_rng_below(&r, (uint32_t)c->vocab);
            sb->mask[i] = t >= K * NP ? 1.0f : 0.0f;
        }
    sb->b = (vs_train_batch){.B = B,
                             .T = T,
                             .n_images = NI,
                             .pixels = sb->pixels,
                             .tokens = sb->tok,
                             .img_row = sb->img,
                             .targets = sb->tgt,
                             .loss_mask = sb->mask};
    return true;
}

/* steps + 1 timed steps (the first a warm-up, not counted): the sums of forward, backward and optimiser
 * seconds into t[0..2]. */
static vs_status bench_steps(const bench_opts *o, vs_train_vlm *m, vs_threadpool *tp, const vs_train_batch *b,
                             double t[3], vs_error *err) {
    vs_train_params *p = vs_train_vlm_params(m);
    vs_adamw opt;
    vs_adamw_default(&opt);
    vs_status st;
    for (int s = 0; s <= o->steps; s++) {
        float loss;
        double t0 = vs_time_now();
        vs_train_params_zero_grad(p);
        if ((st = vs_train_vlm_forward(m, tp, b, &loss, err))) return st;
        double t1 = vs_time_now();
        if ((st = vs_train_vlm_backward(m, tp, err))) return st;
        double t2 = vs_time_now();
        vs_train_clip_grad(p, 1.0f);
        vs_train_adamw_step(p, tp, &opt, 1e-4f);
        double t3 = vs_time_now();
        printf("  step %d: forward %.3f s, backward %.3f s, clip+AdamW %.3f s, loss %.4f%s\n", s, t1 - t0,
               t2 - t1, t3 - t2, loss, s == 0 ? " (warm-up, not counted)" : "");
        if (s > 0) t[0] += t1 - t0, t[1] += t2 - t1, t[2] += t3 - t2;
    }
    return VS_OK;
}

static void bench_report(const bench_opts *o, vs_train_vlm *m, vs_threadpool *tp, const double tsum[3]) {
    const int B = o->B, T = o->T, NI = B * o->K, steps = o->steps, gemm = o->gemm;
    double flops = vs_train_vlm_flops(m, B, T, NI), t = (tsum[0] + tsum[1] + tsum[2]) / steps;
    double peak_t = time_sgemm(tp, gemm, gemm, gemm, 3);
    double peak = peak_t > 0 ? 2.0 * gemm * gemm * gemm / peak_t : 0;
    double shape_t = time_sgemm(tp, B * T, o->c.ffn, o->c.width, 3);
    double shape = shape_t > 0 ? 2.0 * B * T * (double)o->c.ffn * o->c.width / shape_t : 0;
    printf("step: %.3f s (forward %.3f, backward %.3f, optimiser %.3f); %.0f tokens/s\n", t, tsum[0] / steps,
           tsum[1] / steps, tsum[2] / steps, (double)B * T / t);
    printf("FLOPs per step %.1f G -> %.1f GFLOP/s\n", flops / 1e9, flops / t / 1e9);
    printf("sgemm peak (%d^3, %d threads): %.1f GFLOP/s; at the model's MLP shape (%dx%dx%d): %.1f "
           "GFLOP/s\n",
           gemm, o->threads, peak / 1e9, B * T, o->c.ffn, o->c.width, shape / 1e9);
    printf("training step achieves %.1f%% of the sgemm peak\n", peak > 0 ? 100.0 * flops / t / peak : 0.0);
}

static int cmd_bench(int argc, char **argv) {
    const char *cmd = "train bench";
    bench_opts o;
    int prc = bench_parse(argc, argv, &o);
    if (prc >= 0) return prc;
    const vs_train_vlm_config *c = &o.c;
    const int NP = (c->image_size / c->patch_size) * (c->image_size / c->patch_size);
    if (o.K * NP + 1 > o.T) return cli_fail(cmd, "%d images of %d rows do not fit in %d rows", o.K, NP, o.T);
    vs_error err = {0};
    vs_threadpool *tp = vs_threadpool_new(o.threads, &err);
    if (!tp) return cli_fail_err(cmd, &err);
    vs_train_set_blas_threads(o.threads);
    vs_train_vlm *m = vs_train_vlm_new(c, o.B, o.T, o.B * o.K, &err);
    synth_batch sb = {0};
    int rc = 0;
    if (!m) {
        rc = cli_fail_err(cmd, &err);
    } else if (!synth_make(&o, NP, &sb)) {
        rc = cli_fail(cmd, "out of memory");
    } else {
        vs_train_vlm_init(m, 1);
        printf("model: ViT %dx%d/%d width %d x %d blocks, LM width %d x %d layers (%d/%d heads, ffn %d), vocab "
               "%d\n",
               c->image_size, c->image_size, c->patch_size, c->v_width, c->v_blocks, c->width, c->n_layers,
               c->n_heads, c->n_kv_heads, c->ffn, c->vocab);
        printf("parameters: %.2fM (vision %.2fM, projector %.2fM, LM %.2fM); batch %d x %d rows, %d images; "
               "sgemm: %s, attention: %s, %d threads\n",
               vs_train_vlm_n_params(m, -1) / 1e6, vs_train_vlm_n_params(m, VS_TRAIN_GROUP_VISION) / 1e6,
               vs_train_vlm_n_params(m, VS_TRAIN_GROUP_PROJECTOR) / 1e6,
               vs_train_vlm_n_params(m, VS_TRAIN_GROUP_LM) / 1e6, o.B, o.T, o.B * o.K, vs_train_sgemm_backend(),
               vs_train_attention_backend(), o.threads);
        double t[3] = {0, 0, 0};
        if (bench_steps(&o, m, tp, &sb.b, t, &err))
            rc = cli_fail_err(cmd, &err);
        else
            bench_report(&o, m, tp, t);
    }
    synth_free(&sb);
    vs_train_vlm_free(m);
    vs_threadpool_free(tp);
    return rc;
}

/* ---------------------------------------------------------------------------------------------- */
/* Shared pieces of a training run: directories, settings, checkpoints, the loop */

static void print_data_stats(const vs_train_data_stats *s, const vs_world_dataset *const *sets, int n_sets,
                             int seq, double prompt_loss) {
    printf("data:");
    for (int k = 0; k < n_sets; k++)
        printf(" %s/%s.jsonl (%lld)", sets[k]->dir, sets[k]->split, (long long)sets[k]->n);
    printf("\n  %lld sequences kept, %lld skipped as longer than %d rows (never truncated",
           (long long)s->n_seqs, (long long)s->n_skipped, seq);
    if (s->n_skipped) printf("; longest skipped: %lld rows", (long long)s->longest_skipped);
    printf(")\n");
    for (int su = 0; su < VS_WORLD_N_SUITES; su++)
        if (s->kept[su] || s->skipped[su])
            printf("    %-9s kept %6lld  skipped %4lld\n", vs_world_suite_name((vs_world_suite)su),
                   (long long)s->kept[su], (long long)s->skipped[su]);
    printf("  per epoch: %lld rows (%lld answer rows in the loss", (long long)s->rows, (long long)s->answer_rows);
    if (prompt_loss > 0) printf(", %lld prompt text rows at weight %g", (long long)s->prompt_rows, prompt_loss);
    printf("), %lld images, %lld batches; longest %lld rows\n", (long long)s->images, (long long)s->n_batches,
           (long long)s->longest);
    if (s->in_words) printf("  %lld samples with their pictures in words\n", (long long)s->in_words);
    if (s->grounds) printf("  %lld rows with an attention ground\n", (long long)s->grounds);
}


/* ---------------------------------------------------------------------------------------------- */
/* train target: the target VLM on the generated world */

typedef struct target_opts {
    const char *data, *tokenizer, *out, *name;
    const char *init; /* a checkpoint whose weights start a fresh run (new schedule, zero moments) */
    const char *vision_init; /* an mmproj whose tower starts a fresh run ('train vision') */
    const char *grow;  /* a checkpoint of half the LM that starts a fresh run, grown (train_model.h) */
    double grow_noise; /* the noise that breaks the grown copies' symmetry */
    vs_train_sched s;
    int ctx;
    bool captions, f32;
    bool images_as_text; /* every picture in words (train_data.h) */
    double words_frac;   /* this share of the samples with pictures in words (train_data.h) */
    const char *ground_rows; /* --ground-rows: "first", "answer" or "chars" (train_data.h's
                              * ground_answer, ground_chars) */
    double prompt_loss;  /* weight of prompt text rows in the loss (train_data.h) */
    vs_train_vlm_config cfg;
    bool image_size_given;
} target_opts;

static void target_usage(FILE *f) {
    fprintf(
        f,
        "usage: vlmspec train target --data DIR --tokenizer TOK.gguf --out DIR [options]\n"
        "Trains the target VLM (ViT + MLP projector + LLaMA LM) jointly on the world's training split:\n"
        "every suite, both turns, multi-image samples and stories, loss on the answers (docs/training.md).\n"
        "Writes OUT/ckpt/ckpt.gguf every --ckpt-every steps (OUT/ckpt/ckpt-prev.gguf keeps the one before),\n"
        "OUT/run.json (the settings a resume must repeat), OUT/loss.csv and OUT/loss.svg, and when the\n"
        "last step is done OUT/target.gguf + OUT/target-mmproj.gguf (F16) and OUT/train.json.\n\n"
        "data and schedule:\n"
        "  --data DIR          dataset directory ('vlmspec data gen')\n"
        "  --tokenizer FILE    tokenizer GGUF ('vlmspec tokenizer train'); its vocabulary sizes the LM\n"
        "  --out DIR           output directory (created)\n"
        "  --captions          also train on the captions split (one caption per training image)\n"
        "  --prompt-loss W     also count the prompts' text rows in the loss, with weight W (answers\n"
        "                      weigh 1; image rows never count): a text-only world then trains the LM on\n"
        "                      the whole conversation, scene descriptions included (default 0: answers\n"
        "                      only)\n"
        "  --images-as-text    every picture of the data in words instead of image rows (\"Picture: top\n"
        "                      left: large red ring; ... on a white background.\"): the world's facts for\n"
        "                      the LM alone (a text stage); the image weights get no gradient\n"
        "  --words-frac P      this share (0..1) of the samples with pictures in words instead, the rest\n"
        "                      with their pictures: each sample's form drawn once from --seed, the same\n"
        "                      every epoch (a picture stage that keeps an LM's words; default 0)\n"
        "  --freeze-vision N   keep the vision tower at its initial weights for the first N steps (the\n"
        "                      projector and LM learn to read its random features first; default 0)\n"
        "  --freeze-lm N       keep the LM (embeddings, blocks, head) at its initial weights for the first\n"
        "                      N steps: the projector learns to feed a fixed LM first, LLaVA's stage 1\n"
        "                      (with --init from a text-pretrained LM; default 0)\n"
        "  --freeze-projector N  keep the projector at its initial weights for the first N steps (with\n"
        "                      --ground: the grounding term's gradient reshapes a trained projector and\n"
        "                      can wash colour out of the image rows; default 0)\n"
        "  --vision-warmup N   after the freeze, ramp the tower's learning rate up from 0 over N steps (its\n"
        "                      AdamW moments start at zero; default 0: the full rate at once)\n"
        "  --vision-lr F       the tower's learning rate as a multiple of the schedule's (default 1)\n"
        "  --init CKPT         start from the weights of a training checkpoint (another run's ckpt.gguf),\n"
        "                      with this run's schedule, data order and zeroed AdamW moments; the model\n"
        "                      flags must describe the checkpoint's model (default: fresh weights)\n"
        "  --grow CKPT         start from a training checkpoint whose LM has half this run's width, layers,\n"
        "                      heads, KV heads and SwiGLU width (e.g. a 4 x 256 text stage for the 8 x 512\n"
        "                      LM): its function copied into this model (every unit duplicated, a new\n"
        "                      block after each that adds nothing at first), its tower copied, its\n"
        "                      projector widened; this run's schedule, data order and zeroed moments\n"
        "  --grow-noise S      std of the noise added to the grown matrices so that the copies can\n"
        "                      part (default 1e-3)\n"
        "  --norm-cap R        keep the projector's image rows within R times the token embeddings' mean\n"
        "                      L2 norm: each step adds W * mean(max(0, |row| / tau - 1)^2), tau = R * that\n"
        "                      norm (default 0: off)\n"
        "  --norm-cap-weight W the cap's weight W in the loss (default 1)\n"
        "  --ground W          attention grounding: each step adds W * the mean of -log(the share of\n"
        "                      head 0's attention, in LM layer --ground-layer, that the row predicting\n"
        "                      an answer puts on the patches its answer lies in), for every turn whose\n"
        "                      question names something in its picture (an object, a line, a bar):\n"
        "                      a head taught where to look (docs/target.md; default 0: off)\n"
        "  --ground-layer L    the grounded LM layer, 0-based (default: half the layers)\n"
        "  --ground-rows R     which rows of a grounded turn are grounded: 'first' (the row predicting\n"
        "                      the answer's first token, the default), 'answer' (every row predicting\n"
        "                      a token of the answer, its closing </s> included) or 'chars' (as\n"
        "                      'answer', but a row writing characters of a line the question reads is\n"
        "                      grounded on those characters alone)\n"
        "  --ground-grad G     where the grounding term's gradient goes: 'all' (through the whole\n"
        "                      model, the projector and a trained tower included; the default), 'lm'\n"
        "                      (every LM weight, but not the image rows: the projector and tower learn\n"
        "                      from the LM loss alone; a second backward pass from the grounded layer\n"
        "                      down) or 'qk' (the grounded layer's query and key weights alone)\n"
        "  --vision-init FILE  start the vision tower from this mmproj's tower (e.g. 'vlmspec train vision''s\n"
        "                      OUT/vision-mmproj.gguf; its shape must be the model's); with --init it\n"
        "                      replaces the checkpoint's tower (an LM pretrained on text, a tower on images)\n"
        "  --epochs E          passes over the data (default 10; fractions allowed)\n"
        "  --steps N           optimiser steps instead of --epochs\n"
        "  --batch B           sequences per micro-batch (default 8)\n"
        "  --accum K           micro-batches per optimiser step (default 2)\n"
        "  --seq T             longest sequence in rows; longer conversations are skipped and counted,\n"
        "                      never truncated (default 768)\n"
        "  --bucket N          batches per length-sorted chunk of the shuffled epoch (default 16; 1: off)\n"
        "  --lr LR             peak learning rate (default 1e-3)\n"
        "  --lr-min LR         final learning rate of the cosine (default lr / 10)\n"
        "  --warmup W          warm-up steps (default 100)\n"
        "  --wd X              AdamW weight decay (default 0.1)     --beta2 X   (default 0.95)\n"
        "  --clip X            gradient clipping by global norm (default 1.0; 0: off)\n"
        "  --seed S            initialisation and shuffling seed (default 1)\n"
        "running:\n"
        "  --threads N         threads (pool and OpenBLAS, default 2)\n"
        "  --gemm NAME         the matrix products: openblas (default when built with it), blocked,\n"
        "                      amx-bf16x3 (AMX-BF16 tiles, a 3-term bf16 split: ~2^-15 relative error per\n"
        "                      term, several times faster; CPUs with AMX-BF16) or avx512-bf16 (bf16\n"
        "                      operands, f32 sums: ~2^-8 per term, GPU-style mixed precision; CPUs with\n"
        "                      AVX512-BF16)\n"
        "  --attention NAME    the attention path: auto (default: gemm with amx-bf16x3, else direct), direct\n"
        "                      (row by row, F32) or gemm (per-head products on the AMX-BF16 tiles, several\n"
        "                      times faster on long sequences)\n"
        "  --resume            continue from OUT/ckpt/ckpt.gguf (exactly: same batches, same result)\n"
        "  --ckpt-every S      checkpoint every S steps (default 200)\n"
        "  --chunk-steps N     stop (with a checkpoint) after N steps in this run (0: no limit)\n"
        "  --time-limit SEC    stop (with a checkpoint) after SEC seconds in this run (0: no limit)\n"
        "  --f32               also export OUT/target-f32.gguf + OUT/target-mmproj-f32.gguf\n"
        "  --name NAME         general.name of the exported files (default vlmspec-world-target)\n"
        "  -q, --quiet         no progress line\n"
        "model (defaults: 28.8M parameters, LM 25.7M = 51 MB in F16):\n"
        "  --image-size S      ViT input side (default: the dataset's image size)\n"
        "  --patch P           patch side (default 8: 64 rows per 64x64 image)\n"
        "  --v-width W         ViT width (default 192)          --v-blocks N  ViT blocks (default 6)\n"
        "  --v-heads N         ViT heads (default 3)            --v-ffn N     ViT MLP width (default 768)\n"
        "  --width C           LM width (default 512)           --layers N    LM layers (default 8)\n"
        "  --heads N           LM heads (default 8)             --kv-heads N  LM key/value heads (default "
        "4)\n"
        "  --ffn N             LM SwiGLU width (default 1408)\n"
        "  --ctx N             LM context length (default max(1024, --seq))\n");
}

static const char *const k_target_cmd = "train target";

/* --ground-grad's values, indexed by vs_train_ground_mode */
static const char *const k_ground_modes[] = {"all", "lm", "qk"};

static bool parse_ground_grad(const char *cmd, const char *flag, const char *v, void *dst) {
    for (int i = 0; i < (int)VS_ARRAY_LEN(k_ground_modes); i++)
        if (!strcmp(v, k_ground_modes[i])) return *(vs_train_ground_mode *)dst = (vs_train_ground_mode)i, true;
    cli_fail(cmd, "%s '%s': give 'all', 'lm' or 'qk'", flag, v);
    return false;
}

/* Returns -1 when the options are fine, else the exit status. */
static int target_parse(int argc, char **argv, target_opts *o) {
    const char *cmd = k_target_cmd;
    memset(o, 0, sizeof(*o));
    vs_train_sched *s = &o->s;
    s->epochs = 10, s->batch = 8, s->accum = 2, s->seq = 768, s->bucket = 16, s->threads = 2;
    s->ckpt_every = 200, s->lr = 1e-3, s->lr_min = -1, s->warmup = 100, s->wd = 0.1, s->clip = 1.0;
    s->beta2 = 0.95, s->seed = 1, s->vision_lr = 1, s->norm_cap_weight = 1, o->name = "vlmspec-world-target";
    o->grow_noise = 1e-3;
    vs_train_vlm_config *c = &o->cfg;
    *c = vs_train_vlm_target_shape();
    /* CLIP's preprocessing constants, as LLaVA's image processor uses them */
    const float mean[3] = {0.48145466f, 0.4578275f, 0.40821073f};
    const float stdv[3] = {0.26862954f, 0.26130258f, 0.27577711f};
    for (int i = 0; i < 3; i++) c->image_mean[i] = mean[i], c->image_std[i] = stdv[i];
    cli_flags fs = {0};
    cli_flag_add(&fs, "--data", CLI_STR, &o->data, 0, 0);
    cli_flag_add(&fs, "--tokenizer", CLI_STR, &o->tokenizer, 0, 0);
    cli_flag_add(&fs, "--out", CLI_STR, &o->out, 0, 0);
    cli_flag_add(&fs, "--name", CLI_STR, &o->name, 0, 0);
    cli_flag_add(&fs, "--captions", CLI_BOOL, &o->captions, 0, 0);
    cli_flag_add(&fs, "--prompt-loss", CLI_F64, &o->prompt_loss, 0, 1e6);
    cli_flag_add(&fs, "--images-as-text", CLI_BOOL, &o->images_as_text, 0, 0);
    cli_flag_add(&fs, "--words-frac", CLI_F64, &o->words_frac, 0, 1);
    cli_flag_add(&fs, "--freeze-vision", CLI_I64, &s->freeze_vision, 0, (double)(INT64_C(1) << 40));
    cli_flag_add(&fs, "--freeze-lm", CLI_I64, &s->freeze_lm, 0, (double)(INT64_C(1) << 40));
    cli_flag_add(&fs, "--freeze-projector", CLI_I64, &s->freeze_projector, 0, (double)(INT64_C(1) << 40));
    cli_flag_add(&fs, "--vision-warmup", CLI_I64, &s->vision_warmup, 0, (double)(INT64_C(1) << 40));
    cli_flag_add(&fs, "--vision-lr", CLI_F64, &s->vision_lr, 0, 100);
    cli_flag_add(&fs, "--norm-cap", CLI_F64, &s->norm_cap, 0, 1e6);
    cli_flag_add(&fs, "--norm-cap-weight", CLI_F64, &s->norm_cap_weight, 1e-9, 1e6);
    cli_flag_add(&fs, "--ground", CLI_F64, &s->ground, 0, 1e6);
    cli_flag_add(&fs, "--ground-layer", CLI_INT, &s->ground_layer, 0, 4096);
    cli_flag_add(&fs, "--ground-rows", CLI_STR, &o->ground_rows, 0, 0);
    cli_flag_fn_add(&fs, "--ground-grad", parse_ground_grad, &s->ground_mode);
    cli_flag_add(&fs, "--init", CLI_STR, &o->init, 0, 0);
    cli_flag_add(&fs, "--vision-init", CLI_STR, &o->vision_init, 0, 0);
    cli_flag_add(&fs, "--grow", CLI_STR, &o->grow, 0, 0);
    cli_flag_add(&fs, "--grow-noise", CLI_F64, &o->grow_noise, 0, 1);
    cli_flag_add(&fs, "--f32", CLI_BOOL, &o->f32, 0, 0);
    cli_flag_add(&fs, "--epochs", CLI_F64, &s->epochs, 1e-6, 1e6);
    cli_flag_add(&fs, "--steps", CLI_I64, &s->steps, 1, (double)(INT64_C(1) << 40));
    cli_flag_add(&fs, "--batch", CLI_INT, &s->batch, 1, 4096);
    cli_flag_add(&fs, "--lr", CLI_F64, &s->lr, 0, 10);
    cli_flag_add(&fs, "--lr-min", CLI_F64, &s->lr_min, 0, 10);
    cli_flag_add(&fs, "--warmup", CLI_F64, &s->warmup, 0, 1e9);
    cli_flag_add(&fs, "--ctx", CLI_INT, &o->ctx, 2, 1 << 20);
    add_optim_flags(&fs, s);
    add_run_flags(&fs, s);
    add_vision_flags(&fs, c, NULL);
    add_lm_flags(&fs, c);
    int rc = cli_flags_parse(cmd, argc, argv, &fs, target_usage);
    if (rc >= 0) return rc;
    if ((rc = apply_gemm(cmd, s)) >= 0) return rc;
    if (!o->data || !o->tokenizer || !o->out)
        return cli_fail(cmd, "--data DIR, --tokenizer FILE and --out DIR are required"), 2;
    if (s->steps && cli_flag_given(&fs, &s->epochs)) return cli_fail(cmd, "give --steps or --epochs, not both"), 2;
    if (cli_flag_given(&fs, &s->norm_cap_weight) && !(s->norm_cap > 0))
        return cli_fail(cmd, "--norm-cap-weight without --norm-cap R (R > 0) has nothing to weigh"), 2;
    if (cli_flag_given(&fs, &s->ground_layer) && !(s->ground > 0))
        return cli_fail(cmd, "--ground-layer without --ground W (W > 0) grounds nothing"), 2;
    if (o->ground_rows && strcmp(o->ground_rows, "first") && strcmp(o->ground_rows, "answer") &&
        strcmp(o->ground_rows, "chars"))
        return cli_fail(cmd, "--ground-rows '%s': give 'first', 'answer' or 'chars'", o->ground_rows), 2;
    if (o->ground_rows && !(s->ground > 0))
        return cli_fail(cmd, "--ground-rows without --ground W (W > 0) grounds nothing"), 2;
    if (cli_flag_given(&fs, &s->ground_mode) && !(s->ground > 0))
        return cli_fail(cmd, "--ground-grad without --ground W (W > 0) grounds nothing"), 2;
    if (s->ground > 0 && o->images_as_text)
        return cli_fail(cmd, "--ground with --images-as-text: no picture has image rows to ground in"), 2;
    if (!cli_flag_given(&fs, &s->ground_layer)) s->ground_layer = -1; /* half the layers, once known */
    if (o->grow && o->init) return cli_fail(cmd, "--grow and --init both give the starting weights: give one"), 2;
    if (!o->grow && cli_flag_given(&fs, &o->grow_noise))
        return cli_fail(cmd, "--grow-noise without --grow CKPT has nothing to grow"), 2;
    if (o->images_as_text && cli_flag_given(&fs, &o->words_frac))
        return cli_fail(cmd, "--words-frac with --images-as-text: every picture is in words already"), 2;
    if (s->lr_min < 0) s->lr_min = s->lr / 10;
    o->image_size_given = cli_flag_given(&fs, &c->image_size);
    return -1;
}

/* The settings that decide the result: a resumed run must repeat them (threads, chunking and
 * checkpoint cadence do not change the numbers). */
static char *target_settings(const target_opts *o, int64_t total, int vocab) {
    const vs_train_vlm_config *c = &o->cfg;
    vs_json_writer w;
    vs_json_writer_init(&w);
    vs_json_obj_begin(&w);
    vs_json_key(&w, "data"), vs_json_str(&w, o->data);
    vs_json_key(&w, "captions"), vs_json_bool(&w, o->captions);
    if (o->prompt_loss > 0) vs_json_key(&w, "prompt_loss"), vs_json_num(&w, o->prompt_loss);
    if (o->images_as_text) vs_json_key(&w, "images_as_text"), vs_json_bool(&w, true);
    if (o->words_frac > 0) vs_json_key(&w, "words_frac"), vs_json_num(&w, o->words_frac);
    if (o->s.freeze_vision) vs_json_key(&w, "freeze_vision"), vs_json_int(&w, o->s.freeze_vision);
    if (o->s.freeze_lm) vs_json_key(&w, "freeze_lm"), vs_json_int(&w, o->s.freeze_lm);
    if (o->s.freeze_projector) vs_json_key(&w, "freeze_projector"), vs_json_int(&w, o->s.freeze_projector);
    if (o->s.vision_warmup) vs_json_key(&w, "vision_warmup"), vs_json_int(&w, o->s.vision_warmup);
    if (o->s.vision_lr != 1) vs_json_key(&w, "vision_lr"), vs_json_num(&w, o->s.vision_lr);
    if (o->s.norm_cap > 0) {
        vs_json_key(&w, "norm_cap"), vs_json_num(&w, o->s.norm_cap);
        vs_json_key(&w, "norm_cap_weight"), vs_json_num(&w, o->s.norm_cap_weight);
    }
    if (o->s.ground > 0) {
        vs_json_key(&w, "ground"), vs_json_num(&w, o->s.ground);
        vs_json_key(&w, "ground_layer"), vs_json_int(&w, o->s.ground_layer);
        if (o->ground_rows && strcmp(o->ground_rows, "first"))
            vs_json_key(&w, "ground_rows"), vs_json_str(&w, o->ground_rows);
        if (o->s.ground_mode != VS_TRAIN_GROUND_ALL)
            vs_json_key(&w, "ground_grad"), vs_json_str(&w, k_ground_modes[o->s.ground_mode]);
    }
    if (o->init) vs_json_key(&w, "init"), vs_json_str(&w, o->init);
    if (o->vision_init) vs_json_key(&w, "vision_init"), vs_json_str(&w, o->vision_init);
    if (o->grow) {
        vs_json_key(&w, "grow"), vs_json_str(&w, o->grow);
        vs_json_key(&w, "grow_noise"), vs_json_num(&w, o->grow_noise);
    }
    vs_json_key(&w, "vocab"), vs_json_int(&w, vocab);
    vs_json_key(&w, "steps"), vs_json_int(&w, total);
    vs_json_key(&w, "batch"), vs_json_int(&w, o->s.batch);
    vs_json_key(&w, "accum"), vs_json_int(&w, o->s.accum);
    vs_json_key(&w, "seq"), vs_json_int(&w, o->s.seq);
    vs_json_key(&w, "bucket"), vs_json_int(&w, o->s.bucket);
    vs_json_key(&w, "lr"), vs_json_num(&w, o->s.lr);
    vs_json_key(&w, "lr_min"), vs_json_num(&w, o->s.lr_min);
    vs_json_key(&w, "warmup"), vs_json_int(&w, (int64_t)o->s.warmup);
    vs_json_key(&w, "weight_decay"), vs_json_num(&w, o->s.wd);
    vs_json_key(&w, "beta2"), vs_json_num(&w, o->s.beta2);
    vs_json_key(&w, "clip"), vs_json_num(&w, o->s.clip);
    vs_json_key(&w, "seed"), vs_json_int(&w, o->s.seed);
    vs_json_key(&w, "model");
    vs_json_obj_begin(&w);
    vs_json_key(&w, "image_size"), vs_json_int(&w, c->image_size);
    vs_json_key(&w, "patch_size"), vs_json_int(&w, c->patch_size);
    vs_json_key(&w, "v_width"), vs_json_int(&w, c->v_width);
    vs_json_key(&w, "v_ffn"), vs_json_int(&w, c->v_ffn);
    vs_json_key(&w, "v_heads"), vs_json_int(&w, c->v_heads);
    vs_json_key(&w, "v_blocks"), vs_json_int(&w, c->v_blocks);
    vs_json_key(&w, "v_post_ln"), vs_json_bool(&w, c->v_post_ln);
    vs_json_key(&w, "width"), vs_json_int(&w, c->width);
    vs_json_key(&w, "layers"), vs_json_int(&w, c->n_layers);
    vs_json_key(&w, "heads"), vs_json_int(&w, c->n_heads);
    vs_json_key(&w, "kv_heads"), vs_json_int(&w, c->n_kv_heads);
    vs_json_key(&w, "ffn"), vs_json_int(&w, c->ffn);
    vs_json_key(&w, "ctx"), vs_json_int(&w, c->max_seq);
    vs_json_obj_end(&w);
    vs_json_obj_end(&w);
    char *s = vs_json_writer_take(&w, NULL);
    vs_json_writer_free(&w);
    return s;
}

typedef struct target_run {
    target_opts o;
    vs_train_loop L;
    char lm[1200], mm[1200];
    vs_world_dataset *sets[2];
    int n_sets;
    vs_tokenizer *tok;
    vs_gguf *tok_gguf;
} target_run;

static vs_status write_summary(target_run *r, double final_loss, vs_error *err) {
    const vs_train_data_stats *ds = vs_train_data_get_stats(r->L.data);
    const vs_train_vlm *m = r->L.m;
    char path[1100];
    snprintf(path, sizeof(path), "%s/train.json", r->o.out);
    vs_json_writer w;
    vs_json_writer_init(&w);
    vs_json_obj_begin(&w);
    vs_json_key(&w, "parameters"), vs_json_int(&w, vs_train_vlm_n_params(m, -1));
    vs_json_key(&w, "parameters_vision"), vs_json_int(&w, vs_train_vlm_n_params(m, VS_TRAIN_GROUP_VISION));
    vs_json_key(&w, "parameters_projector"),
        vs_json_int(&w, vs_train_vlm_n_params(m, VS_TRAIN_GROUP_PROJECTOR));
    vs_json_key(&w, "parameters_lm"), vs_json_int(&w, vs_train_vlm_n_params(m, VS_TRAIN_GROUP_LM));
    vs_json_key(&w, "steps"), vs_json_int(&w, r->L.st.step);
    vs_json_key(&w, "epochs"),
        vs_json_num(&w, (double)r->L.st.epoch + (double)r->L.st.data_pos / (double)ds->n_batches);
    vs_json_key(&w, "rows_trained"), vs_json_int(&w, (int64_t)r->L.st.tokens);
    vs_json_key(&w, "rows_per_epoch"), vs_json_int(&w, ds->rows);
    vs_json_key(&w, "answer_rows_per_epoch"), vs_json_int(&w, ds->answer_rows);
    if (r->o.prompt_loss > 0) vs_json_key(&w, "prompt_rows_per_epoch"), vs_json_int(&w, ds->prompt_rows);
    vs_json_key(&w, "sequences"), vs_json_int(&w, ds->n_seqs);
    vs_json_key(&w, "skipped"), vs_json_int(&w, ds->n_skipped);
    vs_json_key(&w, "train_seconds"), vs_json_num(&w, r->L.st.elapsed_s);
    vs_json_key(&w, "final_loss"), vs_json_num(&w, final_loss);
    vs_json_key(&w, "settings");
    char *set = target_settings(&r->o, r->L.total, r->o.cfg.vocab);
    vs_json_str(&w, set ? set : "");
    vs_free(set);
    vs_json_obj_end(&w);
    return vs_train_write_json(path, &w, err);
}

static vs_status export_models(target_run *r, double final_loss, vs_error *err) {
    vs_train_export_opts eo = {.type = VS_TYPE_F16, .tokenizer = r->tok_gguf, .name = r->o.name};
    vs_status s = vs_train_vlm_export(r->L.m, r->lm, r->mm, &eo, err);
    if (s == VS_OK) printf("exported %s and %s (F16)\n", r->lm, r->mm);
    if (s == VS_OK && r->o.f32) {
        char lm[1100], mm[1100];
        snprintf(lm, sizeof(lm), "%s/target-f32.gguf", r->o.out);
        snprintf(mm, sizeof(mm), "%s/target-mmproj-f32.gguf", r->o.out);
        eo.type = VS_TYPE_F32;
        s = vs_train_vlm_export(r->L.m, lm, mm, &eo, err);
        if (s == VS_OK) printf("exported %s and %s (F32)\n", lm, mm);
    }
    if (s == VS_OK) s = write_summary(r, final_loss, err);
    return s;
}

/* --init: another run's checkpoint gives the weights and nothing else. The AdamW moments and update
 * count start at zero (this run's warm-up starts from them), every group starts unfrozen (this run's
 * --freeze-vision and --freeze-lm decide), and the data order and schedule are this run's. The flags must describe the
 * checkpoint's model. */
static vs_status target_init_from(vs_train_loop *L, const char *path, const vs_train_vlm_config *c, int max_B,
                                  int max_T, int max_I, vs_error *err) {
    vs_train_state st;
    bool other;
    if (!(L->m = vs_train_load_for_run(path, c, "the flags say", max_B, max_T, max_I, &st, &other, err)))
        return vs_error_wrap(err, "--init");
    vs_train_params *p = vs_train_vlm_params(L->m);
    memset(p->m, 0, sizeof(float) * p->n);
    memset(p->v, 0, sizeof(float) * p->n);
    p->t = 0;
    for (int g = 0; g < VS_TRAIN_MAX_GROUPS; g++) p->frozen[g] = false;
    printf("initialised from %s (step %lld of its run; AdamW moments zeroed)\n", path, (long long)st.step);
    return VS_OK;
}

/* --grow: the model was made and initialised with this run's shape and seed; a checkpoint of half its LM
 * gives the function (train_model.h, vs_train_vlm_grow) and nothing else, as with --init. */
static vs_status target_grow_from(vs_train_vlm *m, const char *path, double noise, uint64_t seed, vs_error *err) {
    vs_train_state st;
    vs_train_vlm *small = vs_train_vlm_load(path, 1, 1, 1, &st, err);
    if (!small) return vs_error_wrap(err, "--grow");
    /* the noise draws a stream of its own ("grow"), not the initialisation's */
    vs_status s = vs_train_vlm_grow(m, small, (float)noise, seed ^ UINT64_C(0x67726f77), path, err);
    if (s == VS_OK) {
        const vs_train_vlm_config *a = vs_train_vlm_cfg(small), *b = vs_train_vlm_cfg(m);
        printf("grown from %s (step %lld of its run): LM %d x %d -> %d x %d, noise %g\n", path, (long long)st.step,
               a->n_layers, a->width, b->n_layers, b->width, noise);
    } else {
        vs_error_wrap(err, "--grow");
    }
    vs_train_vlm_free(small);
    return s;
}

/* --vision-init: the tower of an mmproj (a pretrained one from 'train vision') replaces the fresh one. */
static vs_status target_vision_init(vs_train_vlm *m, const char *path, vs_error *err) {
    if (vs_train_vlm_set_vision_file(m, path, err)) return vs_error_wrap(err, "--vision-init");
    printf("vision tower from %s\n", path);
    return VS_OK;
}

/* The model, its parameters and the schedule of a target run (stdout). */
static void print_target_run(const target_opts *o, const vs_train_loop *L, const vs_train_data_stats *ds) {
    const vs_train_vlm_config *c = &o->cfg;
    printf("model: ViT %dx%d/%d width %d x %d blocks (%d heads, MLP %d%s), projector %d -> %d, LM width %d x %d "
           "layers (%d/%d heads, SwiGLU %d), vocab %d, context %d\n",
           c->image_size, c->image_size, c->patch_size, c->v_width, c->v_blocks, c->v_heads, c->v_ffn,
           c->v_post_ln ? ", post-LN" : "", c->v_width, c->width, c->width, c->n_layers, c->n_heads, c->n_kv_heads,
           c->ffn, c->vocab, c->max_seq);
    printf("parameters: %.2fM (vision %.2fM, projector %.2fM, LM %.2fM = %.1f MB in F16)\n",
           vs_train_vlm_n_params(L->m, -1) / 1e6, vs_train_vlm_n_params(L->m, VS_TRAIN_GROUP_VISION) / 1e6,
           vs_train_vlm_n_params(L->m, VS_TRAIN_GROUP_PROJECTOR) / 1e6,
           vs_train_vlm_n_params(L->m, VS_TRAIN_GROUP_LM) / 1e6,
           2.0 * vs_train_vlm_n_params(L->m, VS_TRAIN_GROUP_LM) / 1e6);
    printf("schedule: %lld steps of %d x %d sequences (%.2f epochs), lr %.2e -> %.2e, warm-up %.0f, "
           "sgemm %s, attention %s, %d threads\n",
           (long long)L->total, o->s.accum, o->s.batch, (double)L->total * o->s.accum / (double)ds->n_batches,
           o->s.lr, o->s.lr_min, o->s.warmup, vs_train_sgemm_backend(), vs_train_attention_backend(),
           o->s.threads);
    fflush(stdout);
}

static vs_status target_train(target_run *r, vs_error *err) {
    target_opts *o = &r->o;
    vs_train_loop *L = &r->L;
    vs_status s;
    /* inputs */
    if (!(r->tok = vs_tokenizer_load(o->tokenizer, err))) return VS_ERR_INVALID;
    if (!(r->tok_gguf = vs_gguf_open(o->tokenizer, err))) return VS_ERR_INVALID;
    if (!(r->sets[r->n_sets++] = vs_world_load(o->data, "train", VS_WORLD_ALL_SUITES, err)))
        return VS_ERR_INVALID;
    if (o->captions && !(r->sets[r->n_sets++] = vs_world_load(o->data, "captions", VS_WORLD_ALL_SUITES, err)))
        return VS_ERR_INVALID;
    vs_train_vlm_config *c = &o->cfg;
    if (!o->image_size_given) c->image_size = r->sets[0]->image_size;
    c->vocab = vs_tokenizer_n_vocab(r->tok);
    c->max_seq = o->ctx > 0 ? o->ctx : VS_MAX(1024, o->s.seq);
    if (c->max_seq < o->s.seq)
        return vs_error_set(err, VS_ERR_INVALID, "--ctx %d is shorter than --seq %d", c->max_seq, o->s.seq);
    if ((s = vs_train_vlm_config_check(c, err))) return s;
    if (o->s.ground_layer < 0) o->s.ground_layer = c->n_layers / 2;
    if (o->s.ground > 0 && o->s.ground_layer >= c->n_layers)
        return vs_error_set(err, VS_ERR_INVALID, "--ground-layer %d: the LM has layers 0 .. %d", o->s.ground_layer,
                            c->n_layers - 1);
    const int G = c->image_size / c->patch_size;
    if (o->s.ground > 0 && G * G > 64)
        return vs_error_set(err, VS_ERR_INVALID, "--ground: %d image rows per picture (at most 64 are grounded)",
                            G * G);
    vs_train_data_opts dopts = {.seq_len = o->s.seq,
                                .batch = o->s.batch,
                                .image_rows = G * G,
                                .preproc = {.size = c->image_size, .mode = VS_PREPROC_LLAVA},
                                .bucket = o->s.bucket,
                                .prompt_loss = (float)o->prompt_loss,
                                .images_as_text = o->images_as_text,
                                .words_frac = (float)o->words_frac,
                                .seed = (uint64_t)o->s.seed,
                                .ground = o->s.ground > 0,
                                .ground_answer = o->ground_rows && strcmp(o->ground_rows, "first"),
                                .ground_chars = o->ground_rows && !strcmp(o->ground_rows, "chars")};
    for (int i = 0; i < 3; i++)
        dopts.preproc.mean[i] = c->image_mean[i], dopts.preproc.std[i] = c->image_std[i];
    double t0 = vs_time_now();
    if (!(L->data =
              vs_train_data_new((const vs_world_dataset *const *)r->sets, r->n_sets, r->tok, &dopts, err)))
        return VS_ERR_INVALID;
    const vs_train_data_stats *ds = vs_train_data_get_stats(L->data);
    print_data_stats(ds, (const vs_world_dataset *const *)r->sets, r->n_sets, o->s.seq, o->prompt_loss);
    printf("  encoded in %.1f s\n", vs_time_now() - t0);
    L->total = o->s.steps > 0 ? o->s.steps : (int64_t)ceil(o->s.epochs * (double)ds->n_batches / o->s.accum);
    if (L->total < 1) L->total = 1;

    /* outputs, settings, model */
    L->cmd = k_target_cmd, L->label = "train", L->title = "target VLM: training loss";
    L->o = o->s;
    if ((s = vs_train_loop_dirs(L, o->out, err))) return s;
    snprintf(r->lm, sizeof(r->lm), "%s/target.gguf", o->out);
    snprintf(r->mm, sizeof(r->mm), "%s/target-mmproj.gguf", o->out);
    char *settings = target_settings(o, L->total, c->vocab);
    if (!settings) return vs_error_set(err, VS_ERR_NOMEM, "out of memory");
    int max_B, max_T, max_I;
    vs_train_data_capacity(L->data, &max_B, &max_T, &max_I);
    bool resumed = o->s.resume && vs_train_loop_has_ckpt(L);
    if (resumed) {
        s = vs_train_loop_check_settings(L, settings, err);
        if (s == VS_OK) s = vs_train_loop_load(L, c, "the flags say", max_B, max_T, max_I, err);
        if (s == VS_OK) s = vs_train_loop_restore(L, err);
    } else {
        if (o->s.resume) printf("no checkpoint in %s/ckpt: starting fresh\n", o->out);
        s = vs_train_write_text(L->runjson, settings, err);
        if (s == VS_OK && o->init) {
            s = target_init_from(L, o->init, c, max_B, max_T, max_I, err);
        } else if (s == VS_OK) {
            if (!(L->m = vs_train_vlm_new(c, max_B, max_T, max_I, err))) s = VS_ERR_INVALID;
            else vs_train_vlm_init(L->m, (uint64_t)o->s.seed);
            if (s == VS_OK && o->grow) s = target_grow_from(L->m, o->grow, o->grow_noise, (uint64_t)o->s.seed, err);
        }
        if (s == VS_OK && o->vision_init) s = target_vision_init(L->m, o->vision_init, err);
        if (s == VS_OK) vs_train_loop_fresh_state(L);
    }
    vs_free(settings);
    if (s != VS_OK) return s;
    print_target_run(o, L, ds);
    L->deadline = o->s.time_limit > 0 ? vs_time_now() + o->s.time_limit : 0;
    if ((s = vs_train_loop_run(L, err))) return s;
    if (L->st.step < L->total) return VS_OK;
    return export_models(r, vs_train_curve_recent(&L->curve, 20), err);
}

static int cmd_target(int argc, char **argv) {
    target_run r;
    memset(&r, 0, sizeof(r));
    int rc = target_parse(argc, argv, &r.o);
    if (rc >= 0) return rc;
    vs_error err = {0};
    vs_status s = target_train(&r, &err);
    rc = s == VS_OK ? 0 : cli_fail_err(k_target_cmd, &err);
    vs_train_loop_free(&r.L);
    vs_threadpool_free(r.L.tp);
    for (int k = 0; k < r.n_sets; k++) vs_world_dataset_free(r.sets[k]);
    vs_gguf_close(r.tok_gguf);
    vs_tokenizer_free(r.tok);
    return rc;
}

/* ---------------------------------------------------------------------------------------------- */
/* train drafter: the LLaVA-recipe and MASSV drafters (train_drafter.h, docs/training.md) */

enum { PH_TEXT = 0, PH_PROJ = 1, PH_TUNE = 2, N_PHASES = 3 };
static const char *const k_phase_dir[N_PHASES] = {"a-text", "b-proj", NULL /* c-<recipe> */};
static const char *const k_drafter_cmd = "train drafter";
/* who sets a drafter's model, for checkpoint mismatches: the LM flags, the target's tower, the tokenizer */
static const char *const k_drafter_expects = "this run (flags, target mmproj, tokenizer) expects";

typedef struct drafter_opts {
    const char *recipe, *data, *tokenizer, *target, *target_mm, *out, *distill, *phase;
    vs_train_sched s; /* shared settings; steps, batch, lr and warm-up are per phase */
    int64_t steps[N_PHASES];
    int batch[N_PHASES];
    double lr[N_PHASES], warmup[N_PHASES];
    vs_drafter_lm_shape lm;
    bool massv, pooled; /* --recipe massv / pool */
    int pool;           /* pool: the window of phase c's image rows (--pool, default 2) */
} drafter_opts;

/* Phase c's directory name: c-<recipe>. */
static const char *tune_dir(const drafter_opts *o) {
    return o->massv ? "c-massv" : o->pooled ? "c-pool" : "c-llava";
}

static void drafter_usage(FILE *f) {
    fprintf(
        f,
        "usage: vlmspec train drafter --recipe llava|massv|pool --data DIR --tokenizer TOK.gguf\n"
        "                             --target-mmproj T-mmproj.gguf [--target T.gguf] --out DIR [options]\n"
        "Trains a draft VLM for the target: the target's vision tower (frozen, copied), a new projector\n"
        "(vision width -> drafter width) and a small LLaMA LM with the target's tokenizer, in phases:\n"
        "  a  LM pretraining on the world's text: every answer, every caption, the text suite (no images;\n"
        "     projector frozen)                                                     -> OUT/a-text/\n"
        "  b  projector pretraining on the captions split, LM frozen                -> OUT/b-proj/\n"
        "  c  llava: visual instruction tuning on the training answers, single-image and text-only\n"
        "     conversations (no diff, no story, new-image second turns cut)         -> OUT/c-llava/\n"
        "     massv: SDViT, the same conversations answered by the target (--distill FILE from\n"
        "     'vlmspec data distill')                                               -> OUT/c-massv/\n"
        "     pool: IbED's pooled-finetuned drafter, llava's conversations with every picture's patch\n"
        "     grid average-pooled --pool K x K before the projector (the rows it drafts from in\n"
        "     ensemble mode p: generate --draft-mode p --pool K)                    -> OUT/c-pool/\n"
        "Each phase is a resumable run (ckpt/, run.json, loss.csv, loss.svg) starting from the previous\n"
        "phase's weights with a fresh optimiser; a finished phase (done.json) is reused, so the recipes\n"
        "share OUT/a-text and OUT/b-proj. Each phase exports draft.gguf + draft-mmproj.gguf (F16);\n"
        "the last one also OUT/draft-<recipe>.gguf + OUT/draft-<recipe>-mmproj.gguf.\n\n"
        "inputs:\n"
        "  --recipe R          llava, massv or pool\n"
        "  --pool K            pool: the pooling window of phase c, 2 .. the patch grid's side (default 2;\n"
        "                      the world's 8x8 patches -> 4x4 rows)\n"
        "  --data DIR          the world ('vlmspec data gen'): train and captions splits\n"
        "  --tokenizer FILE    the target's tokenizer GGUF (copied into the exported LM)\n"
        "  --target-mmproj F   the target's mmproj: its vision tower is copied and frozen\n"
        "  --target FILE       the target's LM GGUF: checks its vocabulary equals the tokenizer's\n"
        "  --distill FILE      massv: the target's answers ('vlmspec data distill')\n"
        "  --out DIR           output directory (created)\n"
        "  --phase P           run only phase a, b or c (default: every phase not done yet)\n"
        "schedule (per phase: -a, -b, -c):\n"
        "  --steps-a N         optimiser steps (defaults 2000 / 500 / 800)\n"
        "  --batch-a B         sequences per micro-batch (defaults 32 / 16 / 16)\n"
        "  --lr-a LR           peak learning rate (defaults 2e-3 / 1e-3 / 5e-4; cosine to lr/10)\n"
        "  --warmup-a W        warm-up steps (defaults 50 / 20 / 20)\n"
        "  --accum K           micro-batches per step (default 1)\n"
        "  --seq T             longest sequence in rows; longer ones are skipped and counted (default 768)\n"
        "  --bucket N          batches per length-sorted chunk (default 16)\n"
        "  --wd X  --beta2 X  --clip X   AdamW decay (0.1), beta2 (0.95), clipping (1.0)\n"
        "  --seed S            initialisation and shuffling seed (default 1)\n"
        "running:\n"
        "  --threads N  --gemm NAME  --attention NAME  --resume  --ckpt-every S (default 100)\n"
        "  --chunk-steps N\n"
        "  --time-limit SEC  -q\n"
        "               (--time-limit and --chunk-steps count over all phases of this run)\n"
        "drafter LM (default 192 x 4 layers, 6/2 heads, SwiGLU 512: 2.36M parameters):\n"
        "  --width C  --layers N  --heads N  --kv-heads N  --ffn N  --ctx N (default 1024)\n");
}

static int drafter_parse(int argc, char **argv, drafter_opts *o) {
    const char *cmd = k_drafter_cmd;
    memset(o, 0, sizeof(*o));
    vs_train_sched *s = &o->s;
    s->accum = 1, s->seq = 768, s->bucket = 16, s->threads = 2, s->ckpt_every = 100, s->wd = 0.1;
    s->clip = 1.0, s->beta2 = 0.95, s->seed = 1, s->vision_lr = 1;
    const int64_t steps[N_PHASES] = {2000, 500, 800};
    const int batch[N_PHASES] = {32, 16, 16};
    const double lr[N_PHASES] = {2e-3, 1e-3, 5e-4}, warm[N_PHASES] = {50, 20, 20};
    for (int p = 0; p < N_PHASES; p++)
        o->steps[p] = steps[p], o->batch[p] = batch[p], o->lr[p] = lr[p], o->warmup[p] = warm[p];
    vs_drafter_lm_shape_default(&o->lm);
    vs_train_vlm_config shape = {.width = o->lm.width,
                                 .n_layers = o->lm.n_layers,
                                 .n_heads = o->lm.n_heads,
                                 .n_kv_heads = o->lm.n_kv_heads,
                                 .ffn = o->lm.ffn};
    cli_flags fs = {0};
    cli_flag_add(&fs, "--recipe", CLI_STR, &o->recipe, 0, 0);
    cli_flag_add(&fs, "--data", CLI_STR, &o->data, 0, 0);
    cli_flag_add(&fs, "--tokenizer", CLI_STR, &o->tokenizer, 0, 0);
    cli_flag_add(&fs, "--target", CLI_STR, &o->target, 0, 0);
    cli_flag_add(&fs, "--target-mmproj", CLI_STR, &o->target_mm, 0, 0);
    cli_flag_add(&fs, "--distill", CLI_STR, &o->distill, 0, 0);
    cli_flag_add(&fs, "--out", CLI_STR, &o->out, 0, 0);
    cli_flag_add(&fs, "--phase", CLI_STR, &o->phase, 0, 0);
    cli_flag_add(&fs, "--pool", CLI_INT, &o->pool, 2, 64); /* 1 pools nothing: the llava recipe */
    static const char *const names[N_PHASES] = {"a", "b", "c"};
    static char flag_names[N_PHASES][4][16];
    for (int p = 0; p < N_PHASES; p++) {
        snprintf(flag_names[p][0], 16, "--steps-%s", names[p]);
        snprintf(flag_names[p][1], 16, "--batch-%s", names[p]);
        snprintf(flag_names[p][2], 16, "--lr-%s", names[p]);
        snprintf(flag_names[p][3], 16, "--warmup-%s", names[p]);
        cli_flag_add(&fs, flag_names[p][0], CLI_I64, &o->steps[p], 1, (double)(INT64_C(1) << 40));
        cli_flag_add(&fs, flag_names[p][1], CLI_INT, &o->batch[p], 1, 4096);
        cli_flag_add(&fs, flag_names[p][2], CLI_F64, &o->lr[p], 0, 10);
        cli_flag_add(&fs, flag_names[p][3], CLI_F64, &o->warmup[p], 0, 1e9);
    }
    cli_flag_add(&fs, "--ctx", CLI_INT, &o->lm.max_seq, 2, 1 << 20);
    add_optim_flags(&fs, s);
    add_run_flags(&fs, s);
    add_lm_flags(&fs, &shape);
    int rc = cli_flags_parse(cmd, argc, argv, &fs, drafter_usage);
    if (rc >= 0) return rc;
    if ((rc = apply_gemm(cmd, &o->s)) >= 0) return rc;
    o->lm.width = shape.width, o->lm.n_layers = shape.n_layers, o->lm.n_heads = shape.n_heads;
    o->lm.n_kv_heads = shape.n_kv_heads, o->lm.ffn = shape.ffn;
    if (!o->recipe || !o->data || !o->tokenizer || !o->target_mm || !o->out)
        return cli_fail(cmd, "--recipe, --data, --tokenizer, --target-mmproj and --out are required"), 2;
    if (strcmp(o->recipe, "llava") && strcmp(o->recipe, "massv") && strcmp(o->recipe, "pool"))
        return cli_fail(cmd, "--recipe must be llava, massv or pool, not '%s'", o->recipe), 2;
    o->massv = !strcmp(o->recipe, "massv");
    o->pooled = !strcmp(o->recipe, "pool");
    if (cli_flag_given(&fs, &o->pool) && !o->pooled) return cli_fail(cmd, "--pool is for --recipe pool"), 2;
    if (o->pooled && !o->pool) o->pool = 2;
    if (o->massv && !o->distill)
        return cli_fail(cmd, "--recipe massv needs --distill FILE (vlmspec data distill)"), 2;
    if (!o->massv && o->distill) return cli_fail(cmd, "--distill is for --recipe massv"), 2;
    if (o->phase && strcmp(o->phase, "a") && strcmp(o->phase, "b") && strcmp(o->phase, "c"))
        return cli_fail(cmd, "--phase must be a, b or c"), 2;
    if (o->lm.max_seq < s->seq)
        return cli_fail(cmd, "--ctx %d is shorter than --seq %d", o->lm.max_seq, s->seq), 2;
    return -1;
}

typedef struct drafter_run {
    drafter_opts o;
    vs_tokenizer *tok;
    vs_gguf *tok_gguf;
    vs_mmproj *tmm;
    vs_world_dataset *train, *captions;
    vs_distill_file dist;
    vs_train_vlm_config cfg;
    vs_train_seqs seqs; /* the current phase's sequences: the reader borrows their sample copies */
    char phase_dir[N_PHASES][1200];
    double deadline;
    int64_t chunk_left; /* steps left of --chunk-steps over all phases (-1: no limit) */
} drafter_run;

/* The settings that decide a phase's result (run.json). Phases a and b do not depend on the recipe. */
static char *phase_settings(const drafter_run *r, int ph) {
    const drafter_opts *o = &r->o;
    const vs_train_vlm_config *c = &r->cfg;
    vs_json_writer w;
    vs_json_writer_init(&w);
    vs_json_obj_begin(&w);
    vs_json_kv_str(&w, "phase", ph == PH_TEXT ? "a-text" : ph == PH_PROJ ? "b-proj" : tune_dir(o));
    vs_json_kv_str(&w, "data", o->data);
    vs_json_kv_str(&w, "target_mmproj", o->target_mm);
    char hash[32]; /* the tower's contents: a retrained target is not mistaken for the old one */
    const uint64_t th = vs_vision_tower_hash(vs_mmproj_tower(r->tmm));
    snprintf(hash, sizeof(hash), "%016llx", (unsigned long long)th);
    vs_json_kv_str(&w, "target_tower_hash", hash);
    if (ph == PH_TUNE && o->massv) {
        vs_json_kv_str(&w, "distill", o->distill);
        vs_json_kv_int(&w, "distill_records", r->dist.n);
    }
    if (ph == PH_TUNE && o->pooled) vs_json_kv_int(&w, "pool", o->pool);
    vs_json_kv_int(&w, "vocab", c->vocab);
    vs_json_kv_int(&w, "steps", o->steps[ph]);
    vs_json_kv_int(&w, "batch", o->batch[ph]);
    vs_json_kv_int(&w, "accum", o->s.accum);
    vs_json_kv_int(&w, "seq", o->s.seq);
    vs_json_kv_int(&w, "bucket", o->s.bucket);
    vs_json_kv_num(&w, "lr", o->lr[ph]);
    vs_json_kv_num(&w, "lr_min", o->lr[ph] / 10);
    vs_json_kv_int(&w, "warmup", (int64_t)o->warmup[ph]);
    vs_json_kv_num(&w, "weight_decay", o->s.wd);
    vs_json_kv_num(&w, "beta2", o->s.beta2);
    vs_json_kv_num(&w, "clip", o->s.clip);
    vs_json_kv_int(&w, "seed", o->s.seed);
    vs_json_key(&w, "model");
    vs_json_obj_begin(&w);
    vs_json_kv_int(&w, "width", c->width);
    vs_json_kv_int(&w, "layers", c->n_layers);
    vs_json_kv_int(&w, "heads", c->n_heads);
    vs_json_kv_int(&w, "kv_heads", c->n_kv_heads);
    vs_json_kv_int(&w, "ffn", c->ffn);
    vs_json_kv_int(&w, "ctx", c->max_seq);
    vs_json_obj_end(&w);
    if (ph > PH_TEXT) vs_json_kv_str(&w, "from", r->phase_dir[ph - 1]);
    vs_json_obj_end(&w);
    char *s = vs_json_writer_take(&w, NULL);
    vs_json_writer_free(&w);
    return s;
}

/* The phase's training data. */
static vs_status phase_data(drafter_run *r, int ph, vs_train_data **out, vs_error *err) {
    const vs_train_vlm_config *c = &r->cfg;
    const int G = c->image_size / c->patch_size;
    /* rows per picture: the patch grid, pooled in phase c of the pool recipe */
    const int Gk = ph == PH_TUNE && r->o.pooled ? vs_pool_out_side(G, r->o.pool) : G, rows = Gk * Gk;
    vs_train_data_opts dopts = {.seq_len = r->o.s.seq,
                                .batch = r->o.batch[ph],
                                .image_rows = rows,
                                .preproc = {.size = c->image_size, .mode = VS_PREPROC_LLAVA},
                                .bucket = r->o.s.bucket,
                                .seed = (uint64_t)r->o.s.seed + (uint64_t)ph};
    for (int i = 0; i < 3; i++)
        dopts.preproc.mean[i] = c->image_mean[i], dopts.preproc.std[i] = c->image_std[i];
    vs_status s = VS_OK;
    const double t0 = vs_time_now();
    if (ph == PH_PROJ) {
        const vs_world_dataset *sets[1] = {r->captions};
        if (!(*out = vs_train_data_new(sets, 1, r->tok, &dopts, err))) return VS_ERR_INVALID;
        printf("phase b data: the captions split (%lld image-caption pairs)\n", (long long)r->captions->n);
    } else {
        vs_train_seqs_free(&r->seqs);
        vs_train_seqs q;
        memset(&q, 0, sizeof(q));
        if (ph == PH_TEXT) {
            s = vs_train_seqs_add_text(&q, r->train, r->captions, r->tok, err);
            if (s == VS_OK)
                printf("phase a data: %lld text documents (answers, captions, text conversations)\n",
                       (long long)q.n);
        } else if (!r->o.massv) {
            s = vs_train_seqs_add_instruct(&q, r->train, r->tok, rows, err);
            if (s == VS_OK) {
                printf("phase c data (%s): %lld conversations kept", r->o.recipe, (long long)q.n);
                if (r->o.pooled) printf(" (pictures pooled %dx%d: %d rows each)", r->o.pool, r->o.pool, rows);
                printf("; dropped (multi-image):");
                for (int su = 0; su < VS_WORLD_N_SUITES; su++)
                    if (q.dropped[su])
                        printf(" %s %lld", vs_world_suite_name((vs_world_suite)su), (long long)q.dropped[su]);
                int64_t cut = 0;
                for (int su = 0; su < VS_WORLD_N_SUITES; su++) cut += q.cut_turns[su];
                printf("; new-image second turns cut: %lld\n", (long long)cut);
            }
        } else {
            s = vs_train_seqs_add_distill(&q, r->train, &r->dist, r->tok, G * G, err);
            if (s == VS_OK)
                printf("phase c data (massv): %lld target answers from %s (%lld records; %lld skipped as cut "
                       "before EOS, %lld not laid out)\n",
                       (long long)q.n, r->o.distill, (long long)r->dist.n, (long long)q.skipped_answers,
                       (long long)q.failed);
            if (s == VS_OK && q.n == 0)
                s = vs_error_set(err, VS_ERR_INVALID, "%s: no usable answers", r->o.distill);
        }
        if (s == VS_OK && !(*out = vs_train_data_new_items(vs_train_seqs_items(&q), q.n, &dopts, err)))
            s = VS_ERR_INVALID;
        r->seqs = q; /* kept until the phase ends: the reader loads images from q's samples */
        if (s != VS_OK) return s;
    }
    print_data_stats(vs_train_data_get_stats(*out), NULL, 0, r->o.s.seq, 0);
    printf("  encoded in %.1f s\n", vs_time_now() - t0);
    return VS_OK;
}

static void phase_freeze(vs_train_vlm *m, int ph) {
    vs_train_params *p = vs_train_vlm_params(m);
    p->frozen[VS_TRAIN_GROUP_VISION] = true;
    p->frozen[VS_TRAIN_GROUP_PROJECTOR] = ph == PH_TEXT;
    p->frozen[VS_TRAIN_GROUP_LM] = ph == PH_PROJ;
}

static vs_status phase_export(drafter_run *r, vs_train_loop *L, int ph, vs_error *err) {
    char lm[1300], mm[1300], name[64];
    snprintf(name, sizeof(name), "vlmspec-world-draft-%s", ph < PH_TUNE ? k_phase_dir[ph] : r->o.recipe);
    vs_train_export_opts eo = {.type = VS_TYPE_F16, .tokenizer = r->tok_gguf, .name = name};
    snprintf(lm, sizeof(lm), "%s/draft.gguf", L->dir);
    snprintf(mm, sizeof(mm), "%s/draft-mmproj.gguf", L->dir);
    vs_status s = vs_train_vlm_export(L->m, lm, mm, &eo, err);
    if (s == VS_OK) printf("exported %s and %s (F16)\n", lm, mm);
    if (s == VS_OK && ph == PH_TUNE) {
        snprintf(lm, sizeof(lm), "%s/draft-%s.gguf", r->o.out, r->o.recipe);
        snprintf(mm, sizeof(mm), "%s/draft-%s-mmproj.gguf", r->o.out, r->o.recipe);
        s = vs_train_vlm_export(L->m, lm, mm, &eo, err);
        if (s == VS_OK) printf("exported %s and %s (F16)\n", lm, mm);
    }
    if (s != VS_OK) return s;
    /* done.json: the phase's summary; its presence marks the phase finished */
    const vs_train_data_stats *ds = vs_train_data_get_stats(L->data);
    vs_json_writer w;
    vs_json_writer_init(&w);
    vs_json_obj_begin(&w);
    vs_json_kv_int(&w, "parameters", vs_train_vlm_n_params(L->m, -1));
    vs_json_kv_int(&w, "parameters_vision", vs_train_vlm_n_params(L->m, VS_TRAIN_GROUP_VISION));
    vs_json_kv_int(&w, "parameters_projector", vs_train_vlm_n_params(L->m, VS_TRAIN_GROUP_PROJECTOR));
    vs_json_kv_int(&w, "parameters_lm", vs_train_vlm_n_params(L->m, VS_TRAIN_GROUP_LM));
    vs_json_kv_int(&w, "steps", L->st.step);
    vs_json_kv_num(&w, "epochs", (double)L->st.epoch + (double)L->st.data_pos / (double)ds->n_batches);
    vs_json_kv_int(&w, "rows_trained", (int64_t)L->st.tokens);
    vs_json_kv_int(&w, "rows_per_epoch", ds->rows);
    vs_json_kv_int(&w, "answer_rows_per_epoch", ds->answer_rows);
    vs_json_kv_int(&w, "sequences", ds->n_seqs);
    vs_json_kv_int(&w, "skipped", ds->n_skipped);
    vs_json_kv_num(&w, "train_seconds", L->st.elapsed_s);
    vs_json_kv_num(&w, "first_loss", L->curve.n ? L->curve.pt[0].loss : 0.0);
    vs_json_kv_num(&w, "final_loss", vs_train_curve_recent(&L->curve, 20));
    vs_json_obj_end(&w);
    char path[1300];
    snprintf(path, sizeof(path), "%s/done.json", L->dir);
    return vs_train_write_json(path, &w, err);
}

static bool phase_done(const drafter_run *r, int ph) {
    char path[1300];
    snprintf(path, sizeof(path), "%s/done.json", r->phase_dir[ph]);
    return access(path, F_OK) == 0;
}

/* Runs phase ph to its end or to the run's limits. *finished tells which. */
/* A phase's model when it starts: phase a a fresh drafter over the target's tower; later phases the previous
 * phase's final weights with a fresh optimiser. */
static vs_status phase_fresh_model(drafter_run *r, int ph, vs_train_loop *L, int max_B, int max_T, int max_I,
                                   vs_error *err) {
    if (ph == PH_TEXT) {
        if (!(L->m = vs_train_vlm_new(&r->cfg, max_B, max_T, max_I, err))) return VS_ERR_INVALID;
        vs_train_vlm_init(L->m, (uint64_t)r->o.s.seed);
        return vs_train_vlm_set_vision(L->m, r->tmm, err);
    }
    char prev[1300];
    vs_train_state pst;
    bool other;
    snprintf(prev, sizeof(prev), "%s/ckpt/ckpt.gguf", r->phase_dir[ph - 1]);
    if (!(L->m = vs_train_load_for_run(prev, &r->cfg, k_drafter_expects, max_B, max_T, max_I, &pst, &other, err))) {
        vs_error_wrap(err, "phase %s", L->dir);
        return VS_ERR_INVALID;
    }
    vs_train_params *p = vs_train_vlm_params(L->m);
    memset(p->m, 0, sizeof(float) * p->n);
    memset(p->v, 0, sizeof(float) * p->n);
    p->t = 0;
    printf("phase %s starts from %s (step %lld)\n", L->dir, prev, (long long)pst.step);
    return VS_OK;
}

static vs_status drafter_phase(drafter_run *r, int ph, bool *finished, vs_error *err) {
    drafter_opts *o = &r->o;
    vs_train_loop L;
    memset(&L, 0, sizeof(L));
    *finished = false;
    vs_status s = vs_train_loop_dirs(&L, r->phase_dir[ph], err);
    char *settings = s == VS_OK ? phase_settings(r, ph) : NULL;
    if (s == VS_OK && !settings) s = vs_error_set(err, VS_ERR_NOMEM, "out of memory");
    if (s == VS_OK && phase_done(r, ph)) {
        /* a finished phase is reused only with the same settings */
        s = vs_train_loop_check_settings(&L, settings, err);
        if (s == VS_OK) printf("phase %s: done (%s/done.json)\n", r->phase_dir[ph], r->phase_dir[ph]);
        vs_free(settings);
        *finished = s == VS_OK;
        return s;
    }
    if (s == VS_OK && ph > PH_TEXT && !phase_done(r, ph - 1))
        s = vs_error_set(err, VS_ERR_INVALID, "phase %s needs phase %s to be finished first",
                         r->phase_dir[ph], r->phase_dir[ph - 1]);
    if (s == VS_OK) s = phase_data(r, ph, &L.data, err);
    if (s != VS_OK) {
        vs_free(settings);
        vs_train_loop_free(&L);
        return s;
    }
    char title[128];
    snprintf(title, sizeof(title), "drafter phase %s: training loss", ph < PH_TUNE ? k_phase_dir[ph] : tune_dir(o));
    L.cmd = k_drafter_cmd, L.label = ph == PH_TEXT ? "phase a" : ph == PH_PROJ ? "phase b" : "phase c";
    L.title = title;
    L.o = o->s;
    L.o.batch = o->batch[ph], L.o.lr = o->lr[ph], L.o.lr_min = o->lr[ph] / 10, L.o.warmup = o->warmup[ph];
    L.o.chunk_steps = r->chunk_left > 0 ? (int)r->chunk_left : 0;
    L.deadline = r->deadline;
    L.total = o->steps[ph];
    int max_B, max_T, max_I;
    vs_train_data_capacity(L.data, &max_B, &max_T, &max_I);
    if (o->s.resume && vs_train_loop_has_ckpt(&L)) {
        s = vs_train_loop_check_settings(&L, settings, err);
        if (s == VS_OK) s = vs_train_loop_load(&L, &r->cfg, k_drafter_expects, max_B, max_T, max_I, err);
        if (s == VS_OK) s = vs_train_loop_restore(&L, err);
    } else {
        if (o->s.resume) printf("no checkpoint in %s/ckpt: starting phase %s fresh\n", L.dir, L.dir);
        s = vs_train_write_text(L.runjson, settings, err);
        if (s == VS_OK) s = phase_fresh_model(r, ph, &L, max_B, max_T, max_I, err);
        if (s == VS_OK) vs_train_loop_fresh_state(&L);
    }
    vs_free(settings);
    if (s == VS_OK && ph == PH_TUNE && o->pooled) s = vs_train_vlm_set_pool(L.m, o->pool, err);
    if (s == VS_OK) { /* the model lays pictures out as the data does (pooled in phase c of the pool recipe) */
        const int G = r->cfg.image_size / r->cfg.patch_size;
        const int side = ph == PH_TUNE && o->pooled ? vs_pool_out_side(G, o->pool) : G;
        if (vs_train_vlm_image_rows(L.m) != side * side)
            s = vs_error_set(err, VS_ERR_INVALID, "phase %s: the model gives %d rows per picture, the data %d",
                             L.dir, vs_train_vlm_image_rows(L.m), side * side);
    }
    if (s == VS_OK) {
        phase_freeze(L.m, ph);
        const vs_train_data_stats *ds = vs_train_data_get_stats(L.data);
        printf("phase %s: %lld steps of %d x %d sequences (%.2f epochs), lr %.2e -> %.2e, warm-up %.0f; "
               "trains %s\n",
               L.dir, (long long)L.total, L.o.accum, L.o.batch,
               (double)L.total * L.o.accum / (double)ds->n_batches, L.o.lr, L.o.lr_min, L.o.warmup,
               ph == PH_TEXT   ? "the LM"
               : ph == PH_PROJ ? "the projector"
                               : "projector + LM");
        fflush(stdout);
        L.tp = NULL;
        s = vs_train_loop_run(&L, err);
    }
    if (s == VS_OK && r->chunk_left > 0) r->chunk_left = VS_MAX(0, r->chunk_left - L.steps_run);
    if (s == VS_OK && L.st.step >= L.total) {
        s = phase_export(r, &L, ph, err);
        *finished = s == VS_OK;
    }
    vs_threadpool_free(L.tp);
    vs_train_loop_free(&L);
    vs_train_seqs_free(&r->seqs);
    return s;
}

static vs_status drafter_train(drafter_run *r, vs_error *err) {
    drafter_opts *o = &r->o;
    vs_status s;
    r->deadline = o->s.time_limit > 0 ? vs_time_now() + o->s.time_limit : 0;
    r->chunk_left = o->s.chunk_steps > 0 ? o->s.chunk_steps : -1;
    if (!(r->tmm = vs_mmproj_open(o->target_mm, err)))
        return vs_error_wrap(err, "the target's mmproj"), VS_ERR_INVALID;
    if (!(r->tok = vs_tokenizer_load(o->tokenizer, err))) return VS_ERR_INVALID;
    if (!(r->tok_gguf = vs_gguf_open(o->tokenizer, err))) return VS_ERR_INVALID;
    if (o->target) {
        vs_gguf *tg = vs_gguf_open(o->target, err);
        if (!tg) return vs_error_wrap(err, "the target model"), VS_ERR_INVALID;
        s = vs_drafter_check_tokenizer(tg, r->tok_gguf, err);
        vs_gguf_close(tg);
        if (s != VS_OK) return s;
    }
    if ((s = vs_drafter_config(r->tmm, vs_tokenizer_n_vocab(r->tok), &o->lm, &r->cfg, err))) return s;
    const int grid = r->cfg.image_size / r->cfg.patch_size;
    if (o->pooled && o->pool > grid) /* before phases a and b, which may take hours */
        return vs_error_set(err, VS_ERR_INVALID, "--pool %d is larger than the target tower's %d x %d patch grid",
                            o->pool, grid, grid);
    if (o->massv) {
        if ((s = vs_distill_read(o->distill, false, &r->dist, err))) return s;
        if (r->dist.h.vocab != r->cfg.vocab)
            return vs_error_set(
                err, VS_ERR_INVALID,
                "vocabulary mismatch: %s was generated by a target with %d tokens, the tokenizer %s "
                "has %d",
                o->distill, r->dist.h.vocab, o->tokenizer, r->cfg.vocab);
    }
    if ((s = vs_train_mkdir(o->out, err))) return s;
    for (int p = 0; p < N_PHASES; p++)
        snprintf(r->phase_dir[p], sizeof(r->phase_dir[p]), "%s/%s", o->out, p < PH_TUNE ? k_phase_dir[p] : tune_dir(o));
    if (!(r->train = vs_world_load(o->data, "train", VS_WORLD_ALL_SUITES, err))) return VS_ERR_INVALID;
    if (!(r->captions = vs_world_load(o->data, "captions", VS_WORLD_ALL_SUITES, err))) return VS_ERR_INVALID;
    if (r->train->image_size != r->cfg.image_size)
        return vs_error_set(err, VS_ERR_INVALID, "%s has %d-pixel images; the target's tower takes %d",
                            o->data, r->train->image_size, r->cfg.image_size);
    const vs_train_vlm_config *c = &r->cfg;
    printf(
        "drafter (%s): target tower %s (%dx%d/%d, width %d x %d blocks, frozen), projector %d -> %d -> %d, "
        "LM width %d x %d layers (%d/%d heads, SwiGLU %d), vocab %d, context %d\n",
        o->recipe, o->target_mm, c->image_size, c->image_size, c->patch_size, c->v_width, c->v_blocks,
        c->v_width, c->width, c->width, c->width, c->n_layers, c->n_heads, c->n_kv_heads, c->ffn, c->vocab,
        c->max_seq);
    for (int p = 0; p < N_PHASES; p++) {
        if (o->phase && o->phase[0] != "abc"[p]) continue;
        bool finished = false;
        if ((s = drafter_phase(r, p, &finished, err))) return s;
        if (!finished || (r->chunk_left == 0 && p + 1 < N_PHASES && !o->phase)) {
            printf("stopped in phase %s: run again with the same flags and --resume\n", r->phase_dir[p]);
            return VS_OK;
        }
    }
    return VS_OK;
}

static int cmd_drafter(int argc, char **argv) {
    drafter_run r;
    memset(&r, 0, sizeof(r));
    int rc = drafter_parse(argc, argv, &r.o);
    if (rc >= 0) return rc;
    vs_error err = {0};
    vs_status s = drafter_train(&r, &err);
    rc = s == VS_OK ? 0 : cli_fail_err(k_drafter_cmd, &err);
    vs_distill_file_free(&r.dist);
    vs_train_seqs_free(&r.seqs);
    vs_world_dataset_free(r.train);
    vs_world_dataset_free(r.captions);
    vs_mmproj_free(r.tmm);
    vs_gguf_close(r.tok_gguf);
    vs_tokenizer_free(r.tok);
    return rc;
}

/* ---------------------------------------------------------------------------------------------- */
/* train vision: pretraining (or a linear probe) of the ViT tower on the world's labels */

static void vision_usage(FILE *f) {
    fprintf(
        f,
        "usage: vlmspec train vision --out DIR [options]\n"
        "Pretrains the ViT tower on labels the world generator knows, on images drawn fresh every step\n"
        "(shapes scenes half the time, glyph text and bar charts a quarter each): per patch the object's\n"
        "shape, colour and size, the character under it (text, chart labels and values) and the bar's\n"
        "value; per image the scene kind, the counts of objects and of lines or bars, the background.\n"
        "Small linear heads read the patch features (and their mean); they are discarded after training.\n"
        "Writes OUT/ckpt/ckpt.gguf (tower + heads + optimiser state), OUT/run.json, OUT/loss.csv + .svg,\n"
        "OUT/eval.csv (held-out accuracy per head), and at the end OUT/vision-mmproj.gguf (F32: the tower,\n"
        "with a random projector; 'train target --vision-init' reads its tower) and OUT/vision.json.\n\n"
        "  --out DIR            output directory (created)\n"
        "  --init-mmproj FILE   start from this mmproj's tower (its shape; shape flags are refused)\n"
        "  --probe              keep the tower frozen and train the heads only: a linear probe of what\n"
        "                       the tower's features encode (nothing exported)\n"
        "  --steps N            optimiser steps (default 3000)\n"
        "  --batch B            fresh images per step (default 32)\n"
        "  --lr LR              peak learning rate (default 1e-3)   --lr-min LR  final rate (default lr/10)\n"
        "  --warmup W           warm-up steps (default 100)\n"
        "  --wd X               AdamW weight decay (default 0.05)   --beta2 X    (default 0.95)\n"
        "  --clip X             gradient clipping by global norm (default 1.0; 0: off)\n"
        "  --seed S             initialisation, image and held-out seed (default 1)\n"
        "  --eval-every N       held-out evaluation every N steps (default 250)\n"
        "  --eval-images N      held-out images (default 512)\n"
        "running: --threads N (default 2), --gemm NAME, --resume, --ckpt-every S (default 200),\n"
        "  --chunk-steps N, --time-limit SEC, -q/--quiet: as 'vlmspec train target'\n"
        "tower (defaults: the target's): --image-size 64, --patch 8, --v-width 192, --v-blocks 6,\n"
        "  --v-heads 3, --v-ffn 768, --width 512 (the projector's output width)\n");
}

static int cmd_vision(int argc, char **argv) {
    const char *cmd = "train vision";
    vs_train_vision_opts o;
    vs_train_vision_opts_default(&o);
    o.lr_min = -1;
    vs_train_sched run = {.threads = o.threads, .ckpt_every = o.ckpt_every};
    cli_flags fs = {0};
    cli_flag_add(&fs, "--out", CLI_STR, &o.out, 0, 0);
    cli_flag_add(&fs, "--init-mmproj", CLI_STR, &o.init_mmproj, 0, 0);
    cli_flag_add(&fs, "--probe", CLI_BOOL, &o.probe, 0, 0);
    cli_flag_add(&fs, "--batch", CLI_INT, &o.batch, 1, 4096);
    add_recipe_flags(&fs, (recipe_flags){&o.steps, &o.seed, &o.lr, &o.lr_min, &o.warmup, &o.wd, &o.clip, &o.beta2,
                                         &o.eval_every});
    cli_flag_add(&fs, "--eval-images", CLI_INT, &o.eval_images, 1, 1 << 20);
    add_run_flags(&fs, &run);
    add_vision_flags(&fs, &o.cfg, NULL);
    cli_flag_add(&fs, "--width", CLI_INT, &o.cfg.width, 2, 1 << 14);
    int rc = cli_flags_parse(cmd, argc, argv, &fs, vision_usage);
    if (rc >= 0) return rc;
    if ((rc = apply_gemm(cmd, &run)) >= 0) return rc;
    if (!o.out) return cli_fail(cmd, "--out DIR is required"), 2;
    if (run.attention) return cli_fail(cmd, "--attention: the tower's attention has one path here"), 2;
    const void *shape[] = {&o.cfg.image_size, &o.cfg.patch_size, &o.cfg.v_width, &o.cfg.v_blocks,
                           &o.cfg.v_heads,    &o.cfg.v_ffn,      &o.cfg.width};
    for (size_t i = 0; i < VS_ARRAY_LEN(shape) && o.init_mmproj; i++)
        if (cli_flag_given(&fs, shape[i]))
            return cli_fail(cmd, "--init-mmproj takes the tower's shape from the file: no shape flags"), 2;
    if (o.lr_min < 0) o.lr_min = o.lr / 10;
    o.threads = run.threads, o.ckpt_every = run.ckpt_every, o.chunk_steps = run.chunk_steps;
    o.time_limit = run.time_limit, o.resume = run.resume, o.quiet = run.quiet;
    vs_error err = {0};
    return vs_train_vision_run(&o, NULL, &err) == VS_OK ? 0 : cli_fail_err(cmd, &err);
}

/* ---------------------------------------------------------------------------------------------- */
/* train head: a feature-level drafter on a frozen target (MSD head or DREAM model; src/train/msd_run.h) */

static void head_usage(FILE *f) {
    fprintf(
        f,
        "usage: vlmspec train head --kind msd|dream -m TARGET.gguf --mmproj MMPROJ.gguf --data DIR --out OUT\n"
        "                          [options]\n"
        "Trains a feature-level drafter for a target, with the target's embedding and LM head frozen. First\n"
        "the target's features for the training conversations are computed once into OUT/cache (resumable,\n"
        "shown with progress); then:\n"
        "--kind msd: MSD's draft head, one decoder block that predicts the target's next hidden state from\n"
        "its current one and the next token (image rows bypass the input layer: decoupled visual tokens),\n"
        "trained on SmoothL1(feature) + 0.1 x soft cross-entropy against the target's next-token\n"
        "distribution on answer positions, with two-stage data: text-only conversations for the first half,\n"
        "then conversations with images at a probability rising linearly to 1;\n"
        "--kind dream: the DREAM draft model, self-attention / cross-attention to the target's features of\n"
        "earlier rows (gated) / self-attention, trained on 0.2 SmoothL1(feature) + 0.2 SmoothL1(block 2,\n"
        "intermediate target) + KL to the target's distribution, conversations drawn uniformly.\n"
        "Writes OUT/cache (features, cache.json), OUT/ckpt/ckpt.gguf, OUT/run.json, OUT/loss.csv + .svg,\n"
        "OUT/eval.csv (held-out loss and top-1 agreement with the target), and at the end the drafter file\n"
        "(OUT/msd-head.gguf or OUT/dream.gguf, checked against the target) and OUT/msd.json / dream.json.\n\n"
        "  --kind K              msd: the MSD head (EAGLE-style; writes OUT/msd-head.gguf and OUT/msd.json);\n"
        "                        dream: the DREAM draft model (cross-attention to the target's features; loss\n"
        "                        0.2 SmoothL1 on its feature and on its intermediate target + KL to the target's\n"
        "                        distribution, one-stage data; writes OUT/dream.gguf and OUT/dream.json). Both\n"
        "                        read the same kind of feature cache (--cache; its --mid-layer must match).\n"
        "  -m, --model FILE      the target LM (its tokenizer is used)\n"
        "  --mmproj FILE         the target's mmproj (image rows)\n"
        "  --data DIR            world dataset: its train split's conversations (the drafters' selection)\n"
        "  --distill FILE        train on the target's own answers from this distill file instead\n"
        "  --out DIR             run directory (created)\n"
        "  --samples N           conversations cached, after a seeded shuffle (default 4000; 0: all)\n"
        "  --eval-seqs N         of them, held out for evaluation (default 128)\n"
        "  --shard N             conversations per cache shard (default 128)\n"
        "  --cache DIR           the feature cache (default OUT/cache): runs on the same target and data\n"
        "                        (ablations, head shapes) share one; its cache.json must match the flags\n"
        "  --cache-only          stop after the cache stage\n"
        "  --heads N, --kv-heads N, --ffn N   the block's shape (default: the target's)\n"
        "  --no-decouple         image rows go through the input layer like text (EAGLE's head; ablation)\n"
        "  --one-stage           draw conversations uniformly from the start (ablation; dream's default)\n"
        "  --two-stage           --kind dream: MSD's two-stage data schedule instead\n"
        "  --mid-layer L         DREAM's intermediate target, cached with the features: auto (the layer of\n"
        "                        least attention entropy per conversation; dream's default), none (msd's\n"
        "                        default; no such loss term) or a fixed layer number (its input hidden state)\n"
        "  --type T              the exported head's matrices: f16 (default), bf16 or f32\n"
        "  --steps N             optimiser steps (default 3000)\n"
        "  --batch B             conversations per step (default 8, at most 64)\n"
        "  --lr LR               peak learning rate (default 1e-3)   --lr-min LR  final (default 1e-4)\n"
        "  --warmup W            warm-up steps (default 100)\n"
        "  --wd X                AdamW weight decay (default 0)   --beta2 X (default 0.95)\n"
        "  --clip X              gradient clipping by global norm (default 0.5; 0: off)\n"
        "  --noise X             uniform input noise on the features (default 0.2; 0: none)\n"
        "  --seed S              shuffle, initialisation and batches (default 1)\n"
        "  --eval-every N        held-out evaluation every N steps (default 250)\n"
        "running: --threads N (default 2), --resume, --ckpt-every S (default 200), --chunk-steps N,\n"
        "  --time-limit SEC, -q/--quiet: as 'vlmspec train target'\n");
}

static int cmd_head(int argc, char **argv) {
    const char *cmd = "train head", *kind = NULL, *type = "f16", *mid = NULL;
    vs_msd_run_opts o;
    vs_msd_run_opts_default(&o);
    bool no_decouple = false, one_stage = false, two_stage = false;
    vs_train_sched run = {.threads = o.threads, .ckpt_every = o.ckpt_every};
    cli_flags fs = {0};
    cli_flag_add(&fs, "--kind", CLI_STR, &kind, 0, 0);
    cli_flag_add(&fs, "-m", CLI_STR, &o.target, 0, 0);
    cli_flag_add(&fs, "--model", CLI_STR, &o.target, 0, 0);
    cli_flag_add(&fs, "--mmproj", CLI_STR, &o.mmproj, 0, 0);
    cli_flag_add(&fs, "--data", CLI_STR, &o.data, 0, 0);
    cli_flag_add(&fs, "--distill", CLI_STR, &o.distill, 0, 0);
    cli_flag_add(&fs, "--out", CLI_STR, &o.out, 0, 0);
    cli_flag_add(&fs, "--samples", CLI_I64, &o.samples, 0, (double)(INT64_C(1) << 40));
    cli_flag_add(&fs, "--eval-seqs", CLI_INT, &o.eval_seqs, 1, 1 << 20);
    cli_flag_add(&fs, "--shard", CLI_INT, &o.shard, 1, 1 << 16);
    cli_flag_add(&fs, "--cache", CLI_STR, &o.cache, 0, 0);
    cli_flag_add(&fs, "--cache-only", CLI_BOOL, &o.cache_only, 0, 0);
    cli_flag_add(&fs, "--heads", CLI_INT, &o.n_head, 1, 256);
    cli_flag_add(&fs, "--kv-heads", CLI_INT, &o.n_head_kv, 1, 256);
    cli_flag_add(&fs, "--ffn", CLI_INT, &o.n_ff, 1, 1 << 16);
    cli_flag_add(&fs, "--no-decouple", CLI_BOOL, &no_decouple, 0, 0);
    cli_flag_add(&fs, "--one-stage", CLI_BOOL, &one_stage, 0, 0);
    cli_flag_add(&fs, "--two-stage", CLI_BOOL, &two_stage, 0, 0);
    cli_flag_add(&fs, "--mid-layer", CLI_STR, &mid, 0, 0);
    cli_flag_add(&fs, "--type", CLI_STR, &type, 0, 0);
    cli_flag_add(&fs, "--batch", CLI_INT, &o.batch, 1, 64);
    add_recipe_flags(&fs, (recipe_flags){&o.steps, &o.seed, &o.lr, &o.lr_min, &o.warmup, &o.wd, &o.clip, &o.beta2,
                                         &o.eval_every});
    cli_flag_add(&fs, "--noise", CLI_F64, &o.noise, 0, 100);
    add_run_flags(&fs, &run);
    int rc = cli_flags_parse(cmd, argc, argv, &fs, head_usage);
    if (rc >= 0) return rc;
    if (!kind) return cli_fail(cmd, "--kind is required (msd or dream)"), 2;
    if (strcmp(kind, "msd") && strcmp(kind, "dream")) return cli_fail(cmd, "--kind %s: unknown (msd or dream)", kind), 2;
    o.dream = !strcmp(kind, "dream");
    if (o.dream && no_decouple) return cli_fail(cmd, "--no-decouple is the MSD head's (--kind msd)"), 2;
    if (!o.dream && two_stage) return cli_fail(cmd, "--two-stage is the MSD head's default (--one-stage turns it off)"), 2;
    if (one_stage && two_stage) return cli_fail(cmd, "--one-stage and --two-stage exclude each other"), 2;
    o.mid_layer = o.dream ? VS_MSD_MID_AUTO : VS_MSD_MID_NONE;
    if (mid) {
        char *end = NULL;
        const long v = strtol(mid, &end, 10);
        if (!strcmp(mid, "auto")) o.mid_layer = VS_MSD_MID_AUTO;
        else if (!strcmp(mid, "none")) o.mid_layer = VS_MSD_MID_NONE;
        else if (end != mid && !*end && v >= 1 && v <= 4096) o.mid_layer = (int)v;
        else return cli_fail(cmd, "--mid-layer %s: auto, none or a layer number >= 1", mid), 2;
    }
    if (!o.out || !o.target || !o.mmproj || !o.data)
        return cli_fail(cmd, "--out, -m/--model, --mmproj and --data are required"), 2;
    if (run.gemm || run.attention) return cli_fail(cmd, "--gemm and --attention: not used by the head's trainer"), 2;
    if (o.lr_min > o.lr) return cli_fail(cmd, "--lr-min %g is above --lr %g", o.lr_min, o.lr), 2;
    if (!strcasecmp(type, "f16")) o.mat_type = VS_TYPE_F16;
    else if (!strcasecmp(type, "bf16")) o.mat_type = VS_TYPE_BF16;
    else if (!strcasecmp(type, "f32")) o.mat_type = VS_TYPE_F32;
    else return cli_fail(cmd, "--type %s: f16, bf16 or f32", type), 2;
    o.decoupled = !no_decouple, o.two_stage = o.dream ? two_stage : !one_stage;
    o.threads = run.threads, o.ckpt_every = run.ckpt_every, o.chunk_steps = run.chunk_steps;
    o.time_limit = run.time_limit, o.resume = run.resume, o.quiet = run.quiet;
    vs_error err = {0};
    return vs_msd_run(&o, NULL, &err) == VS_OK ? 0 : cli_fail_err(cmd, &err);
}

/* ---------------------------------------------------------------------------------------------- */
/* train export: a checkpoint as GGUF files (e.g. to evaluate a model in the middle of training) */

static void export_usage(FILE *f) {
    fprintf(f,
            "usage: vlmspec train export --ckpt FILE --tokenizer TOK.gguf --lm LM.gguf --mmproj MMPROJ.gguf\n"
            "                            [--type f16|f32] [--name NAME]\n"
            "Exports a training checkpoint (OUT/ckpt/ckpt.gguf of 'vlmspec train target' or of a drafter\n"
            "phase) in llama.cpp's LLaVA layout, as the end of training does: the LM with the tokenizer's\n"
            "keys, and the mmproj.\n"
            "  --type T   matrix type, f16 (default) or f32\n"
            "  --name S   general.name (default vlmspec-world-target)\n");
}

static int cmd_export(int argc, char **argv) {
    const char *cmd = "train export", *ckpt = NULL, *tok = NULL, *lm = NULL, *mm = NULL, *type_s = "f16";
    const char *name = "vlmspec-world-target";
    cli_flags fs = {0};
    cli_flag_add(&fs, "--ckpt", CLI_STR, &ckpt, 0, 0);
    cli_flag_add(&fs, "--tokenizer", CLI_STR, &tok, 0, 0);
    cli_flag_add(&fs, "--lm", CLI_STR, &lm, 0, 0);
    cli_flag_add(&fs, "--mmproj", CLI_STR, &mm, 0, 0);
    cli_flag_add(&fs, "--name", CLI_STR, &name, 0, 0);
    cli_flag_add(&fs, "--type", CLI_STR, &type_s, 0, 0);
    int rc = cli_flags_parse(cmd, argc, argv, &fs, export_usage);
    if (rc >= 0) return rc;
    int type;
    if (!strcmp(type_s, "f16") || !strcmp(type_s, "F16"))
        type = VS_TYPE_F16;
    else if (!strcmp(type_s, "f32") || !strcmp(type_s, "F32"))
        type = VS_TYPE_F32;
    else {
        fprintf(stderr, "vlmspec %s: unknown option or value '--type %s'\n", cmd, type_s);
        export_usage(stderr);
        return 2;
    }
    if (!ckpt || !tok || !lm || !mm)
        return cli_fail(cmd, "--ckpt, --tokenizer, --lm and --mmproj are required"), 2;
    vs_error err = {0};
    vs_train_state st;
    vs_gguf *tg = vs_gguf_open(tok, &err);
    vs_train_vlm *m = tg ? vs_train_vlm_load(ckpt, 1, 2, 1, &st, &err) : NULL;
    vs_train_export_opts eo = {.type = type, .tokenizer = tg, .name = name};
    rc = 0;
    if (!m || vs_train_vlm_export(m, lm, mm, &eo, &err) != VS_OK)
        rc = cli_fail_err(cmd, &err);
    else
        printf("exported step %lld (epoch %llu, %.0f s trained) to %s and %s (%s)\n", (long long)st.step,
               (unsigned long long)st.epoch, st.elapsed_s, lm, mm, type == VS_TYPE_F16 ? "F16" : "F32");
    vs_train_vlm_free(m);
    vs_gguf_close(tg);
    return rc;
}

int vs_cmd_train(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        FILE *f = argc < 2 ? stderr : stdout;
        fprintf(
            f, "usage: vlmspec train <command> [options]   (vlmspec train <command> --help)\n"
               "commands:\n"
               "  target   train the target VLM on the generated world (resumable; exports GGUF)\n"
               "  drafter  train a draft VLM by the LLaVA recipe or MASSV (phases, resumable; exports GGUF)\n"
               "  vision   pretrain the ViT tower on the world's labels, or probe a tower (resumable)\n"
               "  head     train a feature-level draft head (MSD) on a frozen target (resumable)\n"
               "  export   export a training checkpoint as LM + mmproj GGUF\n"
               "  bench    time training steps of a VLM on synthetic data against the sgemm peak\n");
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "target")) return cmd_target(argc - 1, argv + 1);
    if (!strcmp(argv[1], "drafter")) return cmd_drafter(argc - 1, argv + 1);
    if (!strcmp(argv[1], "vision")) return cmd_vision(argc - 1, argv + 1);
    if (!strcmp(argv[1], "head")) return cmd_head(argc - 1, argv + 1);
    if (!strcmp(argv[1], "export")) return cmd_export(argc - 1, argv + 1);
    if (!strcmp(argv[1], "bench")) return cmd_bench(argc - 1, argv + 1);
    fprintf(stderr, "vlmspec train: unknown command '%s'\n", argv[1]);
    return 2;
}
