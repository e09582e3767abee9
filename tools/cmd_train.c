/* vlmspec train: the trainer's commands.
 *   target  trains the target VLM jointly on the generated world's training split (train_data.h
 *           batches, AdamW with warm-up + cosine, clipping, gradient accumulation), with resumable
 *           checkpoints, a progress line, the loss curve (CSV + SVG), and GGUF export at the end.
 *   export  writes a checkpoint as LM + mmproj GGUF (evaluating a model in the middle of training).
 *   bench   times training steps of a VLM of the given size on synthetic data and compares the
 *           achieved FLOP rate with the F32 sgemm peak measured on this machine. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "json.h"
#include "quant.h"
#include "train_data.h"
#include "train_model.h"
#include "world.h"

static void bench_usage(FILE *f) {
    fprintf(
        f,
        "usage: vlmspec train bench [options]\n"
        "Times full training steps (forward, backward, clipping, AdamW) of a VLM with random weights on\n"
        "synthetic batches, and the F32 sgemm peak, with the same thread count.\n"
        "  --threads N        threads for the pool and OpenBLAS (default 2)\n"
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

static int cmd_bench(int argc, char **argv) {
    const char *cmd = "train bench";
    int threads = 2, steps = 3, B = 8, T = 192, K = 1, gemm = 2048;
    vs_train_vlm_config c = {.image_size = 64,
                             .patch_size = 8,
                             .v_width = 192,
                             .v_ffn = 768,
                             .v_heads = 3,
                             .v_blocks = 6,
                             .v_eps = 1e-5f,
                             .vocab = 2048,
                             .width = 512,
                             .n_layers = 8,
                             .n_heads = 8,
                             .n_kv_heads = 4,
                             .ffn = 1408,
                             .max_seq = 512,
                             .rms_eps = 1e-5f,
                             .rope_base = 10000.0f};
    for (int i = 0; i < 3; i++) c.image_mean[i] = 0.5f, c.image_std[i] = 0.25f;
    struct {
        const char *flag;
        int *dst;
        int lo, hi;
    } flags[] = {
        {"--threads", &threads, 1, 256},
        {"--steps", &steps, 1, 1000},
        {"--batch", &B, 1, 4096},
        {"--seq", &T, 1, 1 << 16},
        {"--images", &K, 0, 64},
        {"--image-size", &c.image_size, 1, 4096},
        {"--patch", &c.patch_size, 1, 4096},
        {"--v-width", &c.v_width, 1, 1 << 14},
        {"--v-blocks", &c.v_blocks, 0, 256},
        {"--v-heads", &c.v_heads, 1, 256},
        {"--v-ffn", &c.v_ffn, 1, 1 << 16},
        {"--width", &c.width, 2, 1 << 14},
        {"--layers", &c.n_layers, 1, 256},
        {"--heads", &c.n_heads, 1, 256},
        {"--kv-heads", &c.n_kv_heads, 1, 256},
        {"--ffn", &c.ffn, 1, 1 << 16},
        {"--vocab", &c.vocab, 2, 1 << 20},
        {"--gemm-size", &gemm, 16, 16384},
    };
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            bench_usage(stdout);
            return 0;
        }
        bool found = false;
        for (size_t f = 0; f < VS_ARRAY_LEN(flags) && !found; f++) {
            if (strcmp(argv[i], flags[f].flag)) continue;
            const char *v = cli_value(cmd, argc, argv, &i);
            if (!v || !cli_parse_int(cmd, flags[f].flag, v, flags[f].lo, flags[f].hi, flags[f].dst)) return 2;
            found = true;
        }
        if (!found) {
            fprintf(stderr, "vlmspec %s: unknown option '%s'\n", cmd, argv[i]);
            bench_usage(stderr);
            return 2;
        }
    }
    c.max_seq = T > 512 ? T : 512;
    int NP = (c.image_size / c.patch_size) * (c.image_size / c.patch_size);
    if (K * NP + 1 > T) return cli_fail(cmd, "%d images of %d rows do not fit in %d rows", K, NP, T);
    vs_error err = {0};
    vs_threadpool *tp = vs_threadpool_new(threads, &err);
    if (!tp) return cli_fail_err(cmd, &err);
    vs_train_set_blas_threads(threads);
    int NI = B * K;
    vs_train_vlm *m = vs_train_vlm_new(&c, B, T, NI, &err);
    if (!m) {
        vs_threadpool_free(tp);
        return cli_fail_err(cmd, &err);
    }
    vs_train_vlm_init(m, 1);
    /* synthetic batch: per sequence BOS, its K images, then text; loss on the text */
    size_t npx = (size_t)NI * 3 * c.image_size * c.image_size, N = (size_t)B * T;
    float *pixels = vs_malloc(sizeof(float) * npx), *mask = vs_malloc(sizeof(float) * N);
    int32_t *tok = vs_malloc(sizeof(int32_t) * N), *img = vs_malloc(sizeof(int32_t) * N);
    int32_t *tgt = vs_malloc(sizeof(int32_t) * N);
    if (!pixels || !mask || !tok || !img || !tgt) return cli_fail(cmd, "out of memory");
    vs_rng r;
    vs_rng_seed(&r, 2);
    for (size_t i = 0; i < npx; i++) pixels[i] = vs_rng_normal(&r);
    for (int s = 0; s < B; s++)
        for (int t = 0; t < T; t++) {
            size_t i = (size_t)s * T + t;
            bool is_img = t >= 1 && t <= K * NP;
            img[i] = is_img ? (s * K) * NP + (t - 1) : -1;
            tok[i] = is_img ? -1 : (int32_t)vs_rng_below(&r, (uint32_t)c.vocab);
            tgt[i] = (int32_t)vs_rng_below(&r, (uint32_t)c.vocab);
            mask[i] = t >= K * NP ? 1.0f : 0.0f;
        }
    vs_train_batch b = {.B = B,
                        .T = T,
                        .n_images = NI,
                        .pixels = pixels,
                        .tokens = tok,
                        .img_row = img,
                        .targets = tgt,
                        .loss_mask = mask};
    vs_train_params *p = vs_train_vlm_params(m);
    vs_adamw opt;
    vs_adamw_default(&opt);
    printf(
        "model: ViT %dx%d/%d width %d x %d blocks, LM width %d x %d layers (%d/%d heads, ffn %d), vocab %d\n",
        c.image_size, c.image_size, c.patch_size, c.v_width, c.v_blocks, c.width, c.n_layers, c.n_heads,
        c.n_kv_heads, c.ffn, c.vocab);
    printf("parameters: %.2fM (vision %.2fM, projector %.2fM, LM %.2fM); batch %d x %d rows, %d images; "
           "sgemm: %s, %d threads\n",
           vs_train_vlm_n_params(m, -1) / 1e6, vs_train_vlm_n_params(m, VS_TRAIN_GROUP_VISION) / 1e6,
           vs_train_vlm_n_params(m, VS_TRAIN_GROUP_PROJECTOR) / 1e6,
           vs_train_vlm_n_params(m, VS_TRAIN_GROUP_LM) / 1e6, B, T, NI, vs_train_sgemm_backend(), threads);
    double tf = 0, tb = 0, to = 0, loss_sum = 0;
    int rc = 0;
    for (int s = 0; s <= steps; s++) {
        float loss;
        double t0 = vs_time_now();
        vs_train_params_zero_grad(p);
        if (vs_train_vlm_forward(m, tp, &b, &loss, &err)) {
            rc = cli_fail_err(cmd, &err);
            break;
        }
        double t1 = vs_time_now();
        if (vs_train_vlm_backward(m, tp, &err)) {
            rc = cli_fail_err(cmd, &err);
            break;
        }
        double t2 = vs_time_now();
        vs_train_clip_grad(p, 1.0f);
        vs_train_adamw_step(p, tp, &opt, 1e-4f);
        double t3 = vs_time_now();
        printf("  step %d: forward %.3f s, backward %.3f s, clip+AdamW %.3f s, loss %.4f%s\n", s, t1 - t0,
               t2 - t1, t3 - t2, loss, s == 0 ? " (warm-up, not counted)" : "");
        if (s == 0) continue;
        tf += t1 - t0, tb += t2 - t1, to += t3 - t2, loss_sum += loss;
    }
    if (!rc) {
        double flops = vs_train_vlm_flops(m, B, T, NI), t = (tf + tb + to) / steps;
        double peak_t = time_sgemm(tp, gemm, gemm, gemm, 3);
        double peak = peak_t > 0 ? 2.0 * gemm * gemm * gemm / peak_t : 0;
        double shape_t = time_sgemm(tp, B * T, c.ffn, c.width, 3);
        double shape = shape_t > 0 ? 2.0 * B * T * (double)c.ffn * c.width / shape_t : 0;
        printf("step: %.3f s (forward %.3f, backward %.3f, optimiser %.3f); %.0f tokens/s\n", t, tf / steps,
               tb / steps, to / steps, N / t);
        printf("FLOPs per step %.1f G -> %.1f GFLOP/s\n", flops / 1e9, flops / t / 1e9);
        printf("sgemm peak (%d^3, %d threads): %.1f GFLOP/s; at the model's MLP shape (%dx%dx%d): %.1f "
               "GFLOP/s\n",
               gemm, threads, peak / 1e9, B * T, c.ffn, c.width, shape / 1e9);
        printf("training step achieves %.1f%% of the sgemm peak\n",
               peak > 0 ? 100.0 * flops / t / peak : 0.0);
    }
    vs_free(pixels), vs_free(mask), vs_free(tok), vs_free(img), vs_free(tgt);
    vs_train_vlm_free(m);
    vs_threadpool_free(tp);
    return rc;
}

/* ---------------------------------------------------------------------------------------------- */
/* train target: the target VLM on the generated world */

typedef struct target_opts {
    const char *data, *tokenizer, *out, *name;
    int64_t steps; /* 0: from epochs */
    double epochs;
    int batch, accum, seq, bucket, ctx, threads, ckpt_every, chunk_steps;
    double lr, lr_min, warmup, wd, clip, beta2, time_limit;
    int64_t seed;
    bool resume, captions, f32, quiet;
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

/* Returns -1 when the options are fine, else the exit status. */
static int target_parse(int argc, char **argv, target_opts *o) {
    const char *cmd = k_target_cmd;
    memset(o, 0, sizeof(*o));
    o->epochs = 10, o->batch = 8, o->accum = 2, o->seq = 768, o->bucket = 16, o->threads = 2;
    o->ckpt_every = 200, o->lr = 1e-3, o->lr_min = -1, o->warmup = 100, o->wd = 0.1, o->clip = 1.0;
    o->beta2 = 0.95, o->seed = 1, o->name = "vlmspec-world-target";
    vs_train_vlm_config *c = &o->cfg;
    *c = (vs_train_vlm_config){.image_size = 64,
                               .patch_size = 8,
                               .v_width = 192,
                               .v_ffn = 768,
                               .v_heads = 3,
                               .v_blocks = 6,
                               .v_eps = 1e-5f,
                               .width = 512,
                               .n_layers = 8,
                               .n_heads = 8,
                               .n_kv_heads = 4,
                               .ffn = 1408,
                               .rms_eps = 1e-5f,
                               .rope_base = 10000.0f};
    /* CLIP's preprocessing constants, as LLaVA's image processor uses them */
    const float mean[3] = {0.48145466f, 0.4578275f, 0.40821073f};
    const float stdv[3] = {0.26862954f, 0.26130258f, 0.27577711f};
    for (int i = 0; i < 3; i++) c->image_mean[i] = mean[i], c->image_std[i] = stdv[i];
    struct {
        const char *flag;
        int *dst;
        int lo, hi;
    } iflags[] = {
        {"--batch", &o->batch, 1, 4096},
        {"--accum", &o->accum, 1, 4096},
        {"--seq", &o->seq, 2, 1 << 16},
        {"--bucket", &o->bucket, 1, 1 << 20},
        {"--ctx", &o->ctx, 2, 1 << 20},
        {"--threads", &o->threads, 1, 256},
        {"--ckpt-every", &o->ckpt_every, 1, 1 << 30},
        {"--chunk-steps", &o->chunk_steps, 0, 1 << 30},
        {"--image-size", &c->image_size, 1, 4096},
        {"--patch", &c->patch_size, 1, 4096},
        {"--v-width", &c->v_width, 1, 1 << 14},
        {"--v-blocks", &c->v_blocks, 0, 256},
        {"--v-heads", &c->v_heads, 1, 256},
        {"--v-ffn", &c->v_ffn, 1, 1 << 16},
        {"--width", &c->width, 2, 1 << 14},
        {"--layers", &c->n_layers, 1, 256},
        {"--heads", &c->n_heads, 1, 256},
        {"--kv-heads", &c->n_kv_heads, 1, 256},
        {"--ffn", &c->ffn, 1, 1 << 16},
    };
    struct {
        const char *flag;
        double *dst;
        double lo, hi;
    } fflags[] = {
        {"--epochs", &o->epochs, 1e-6, 1e6},
        {"--lr", &o->lr, 0, 10},
        {"--lr-min", &o->lr_min, 0, 10},
        {"--warmup", &o->warmup, 0, 1e9},
        {"--wd", &o->wd, 0, 10},
        {"--clip", &o->clip, 0, 1e9},
        {"--beta2", &o->beta2, 0, 1},
        {"--time-limit", &o->time_limit, 0, 1e9},
    };
    bool epochs_given = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            target_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--resume")) {
            o->resume = true;
            continue;
        }
        if (!strcmp(a, "--captions")) {
            o->captions = true;
            continue;
        }
        if (!strcmp(a, "--f32")) {
            o->f32 = true;
            continue;
        }
        if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            o->quiet = true;
            continue;
        }
        bool found = false;
        for (size_t f = 0; f < VS_ARRAY_LEN(iflags) && !found; f++) {
            if (strcmp(a, iflags[f].flag)) continue;
            if (!(v = cli_value(cmd, argc, argv, &i)) ||
                !cli_parse_int(cmd, a, v, iflags[f].lo, iflags[f].hi, iflags[f].dst))
                return 2;
            if (iflags[f].dst == &c->image_size) o->image_size_given = true;
            found = true;
        }
        for (size_t f = 0; f < VS_ARRAY_LEN(fflags) && !found; f++) {
            if (strcmp(a, fflags[f].flag)) continue;
            if (!(v = cli_value(cmd, argc, argv, &i)) ||
                !cli_parse_f64(cmd, a, v, fflags[f].lo, fflags[f].hi, fflags[f].dst))
                return 2;
            if (fflags[f].dst == &o->epochs) epochs_given = true;
            found = true;
        }
        if (found) continue;
        if (!strcmp(a, "--data") || !strcmp(a, "--tokenizer") || !strcmp(a, "--out") ||
            !strcmp(a, "--name") || !strcmp(a, "--steps") || !strcmp(a, "--seed")) {
            if (!(v = cli_value(cmd, argc, argv, &i))) return 2;
            if (!strcmp(a, "--data"))
                o->data = v;
            else if (!strcmp(a, "--tokenizer"))
                o->tokenizer = v;
            else if (!strcmp(a, "--out"))
                o->out = v;
            else if (!strcmp(a, "--name"))
                o->name = v;
            else if (!strcmp(a, "--steps")) {
                if (!cli_parse_i64(cmd, a, v, 1, INT64_C(1) << 40, &o->steps)) return 2;
            } else if (!cli_parse_i64(cmd, a, v, 0, INT64_MAX, &o->seed))
                return 2;
            continue;
        }
        fprintf(stderr, "vlmspec %s: unknown option '%s'\n", cmd, a);
        target_usage(stderr);
        return 2;
    }
    if (!o->data || !o->tokenizer || !o->out)
        return cli_fail(cmd, "--data DIR, --tokenizer FILE and --out DIR are required"), 2;
    if (o->steps && epochs_given) return cli_fail(cmd, "give --steps or --epochs, not both"), 2;
    if (o->lr_min < 0) o->lr_min = o->lr / 10;
    return -1;
}

static vs_status mkdir_one(const char *path, vs_error *err) {
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        return vs_error_set(err, VS_ERR_IO, "%s: cannot create directory: %s", path, strerror(errno));
    return VS_OK;
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
    vs_json_key(&w, "vocab"), vs_json_int(&w, vocab);
    vs_json_key(&w, "steps"), vs_json_int(&w, total);
    vs_json_key(&w, "batch"), vs_json_int(&w, o->batch);
    vs_json_key(&w, "accum"), vs_json_int(&w, o->accum);
    vs_json_key(&w, "seq"), vs_json_int(&w, o->seq);
    vs_json_key(&w, "bucket"), vs_json_int(&w, o->bucket);
    vs_json_key(&w, "lr"), vs_json_num(&w, o->lr);
    vs_json_key(&w, "lr_min"), vs_json_num(&w, o->lr_min);
    vs_json_key(&w, "warmup"), vs_json_int(&w, (int64_t)o->warmup);
    vs_json_key(&w, "weight_decay"), vs_json_num(&w, o->wd);
    vs_json_key(&w, "beta2"), vs_json_num(&w, o->beta2);
    vs_json_key(&w, "clip"), vs_json_num(&w, o->clip);
    vs_json_key(&w, "seed"), vs_json_int(&w, o->seed);
    vs_json_key(&w, "model");
    vs_json_obj_begin(&w);
    vs_json_key(&w, "image_size"), vs_json_int(&w, c->image_size);
    vs_json_key(&w, "patch_size"), vs_json_int(&w, c->patch_size);
    vs_json_key(&w, "v_width"), vs_json_int(&w, c->v_width);
    vs_json_key(&w, "v_ffn"), vs_json_int(&w, c->v_ffn);
    vs_json_key(&w, "v_heads"), vs_json_int(&w, c->v_heads);
    vs_json_key(&w, "v_blocks"), vs_json_int(&w, c->v_blocks);
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

static vs_status write_text(const char *path, const char *text, vs_error *err) {
    char tmp[1100];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return vs_error_set(err, VS_ERR_IO, "%s: cannot write: %s", tmp, strerror(errno));
    bool ok = fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    ok &= fclose(f) == 0;
    if (!ok || rename(tmp, path) != 0) return vs_error_set(err, VS_ERR_IO, "%s: cannot write", path);
    return VS_OK;
}

static void print_data_stats(const vs_train_data_stats *s, const vs_world_dataset *const *sets, int n_sets,
                             int seq) {
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
    printf("  per epoch: %lld rows (%lld answer rows in the loss), %lld images, %lld batches; longest %lld "
           "rows\n",
           (long long)s->rows, (long long)s->answer_rows, (long long)s->images, (long long)s->n_batches,
           (long long)s->longest);
}

typedef struct target_run {
    target_opts o;
    char ckpt[1200], prev[1200], csv[1200], svg[1200], runjson[1200], lm[1200], mm[1200];
    vs_world_dataset *sets[2];
    int n_sets;
    vs_tokenizer *tok;
    vs_gguf *tok_gguf;
    vs_train_data *data;
    vs_train_vlm *m;
    vs_threadpool *tp;
    vs_train_curve curve;
    vs_train_state st;
    int64_t total;
} target_run;

static vs_status save_checkpoint(target_run *r, vs_error *err) {
    vs_train_data_state ds;
    vs_train_data_get_state(r->data, &ds);
    r->st.epoch = ds.epoch, r->st.data_pos = ds.pos, r->st.rng = ds.rng;
    if (access(r->ckpt, F_OK) == 0 && rename(r->ckpt, r->prev) != 0)
        return vs_error_set(err, VS_ERR_IO, "%s: cannot rename to %s: %s", r->ckpt, r->prev, strerror(errno));
    vs_status s = vs_train_vlm_save(r->m, &r->st, r->ckpt, err);
    if (s == VS_OK) s = vs_train_curve_write_csv(&r->curve, r->csv, err);
    if (s == VS_OK)
        s = vs_train_curve_write_svg(&r->curve, r->svg, "target VLM: training loss", 25, true, err);
    return s;
}

/* Loads the newest readable checkpoint (ckpt, else ckpt-prev). */
static vs_train_vlm *load_checkpoint(target_run *r, int max_B, int max_T, int max_I, vs_error *err) {
    vs_error e1 = {0};
    vs_train_vlm *m = vs_train_vlm_load(r->ckpt, max_B, max_T, max_I, &r->st, &e1);
    if (m || access(r->prev, F_OK) != 0) {
        if (!m) *err = e1;
        return m;
    }
    fprintf(stderr, "vlmspec %s: %s; trying %s\n", k_target_cmd, e1.msg, r->prev);
    return vs_train_vlm_load(r->prev, max_B, max_T, max_I, &r->st, err);
}

static vs_status write_summary(target_run *r, double final_loss, vs_error *err) {
    const vs_train_data_stats *ds = vs_train_data_get_stats(r->data);
    char path[1100];
    snprintf(path, sizeof(path), "%s/train.json", r->o.out);
    vs_json_writer w;
    vs_json_writer_init(&w);
    vs_json_obj_begin(&w);
    vs_json_key(&w, "parameters"), vs_json_int(&w, vs_train_vlm_n_params(r->m, -1));
    vs_json_key(&w, "parameters_vision"), vs_json_int(&w, vs_train_vlm_n_params(r->m, VS_TRAIN_GROUP_VISION));
    vs_json_key(&w, "parameters_projector"),
        vs_json_int(&w, vs_train_vlm_n_params(r->m, VS_TRAIN_GROUP_PROJECTOR));
    vs_json_key(&w, "parameters_lm"), vs_json_int(&w, vs_train_vlm_n_params(r->m, VS_TRAIN_GROUP_LM));
    vs_json_key(&w, "steps"), vs_json_int(&w, r->st.step);
    vs_json_key(&w, "epochs"),
        vs_json_num(&w, (double)r->st.epoch + (double)r->st.data_pos / (double)ds->n_batches);
    vs_json_key(&w, "rows_trained"), vs_json_int(&w, (int64_t)r->st.tokens);
    vs_json_key(&w, "rows_per_epoch"), vs_json_int(&w, ds->rows);
    vs_json_key(&w, "answer_rows_per_epoch"), vs_json_int(&w, ds->answer_rows);
    vs_json_key(&w, "sequences"), vs_json_int(&w, ds->n_seqs);
    vs_json_key(&w, "skipped"), vs_json_int(&w, ds->n_skipped);
    vs_json_key(&w, "train_seconds"), vs_json_num(&w, r->st.elapsed_s);
    vs_json_key(&w, "final_loss"), vs_json_num(&w, final_loss);
    vs_json_key(&w, "settings");
    char *set = target_settings(&r->o, r->total, r->o.cfg.vocab);
    vs_json_str(&w, set ? set : "");
    vs_free(set);
    vs_json_obj_end(&w);
    char *s = vs_json_writer_take(&w, NULL);
    vs_json_writer_free(&w);
    if (!s) return vs_error_set(err, VS_ERR_NOMEM, "out of memory");
    vs_status st = write_text(path, s, err);
    vs_free(s);
    return st;
}

static vs_status export_models(target_run *r, double final_loss, vs_error *err) {
    vs_train_export_opts eo = {.type = VS_TYPE_F16, .tokenizer = r->tok_gguf, .name = r->o.name};
    vs_status s = vs_train_vlm_export(r->m, r->lm, r->mm, &eo, err);
    if (s == VS_OK) printf("exported %s and %s (F16)\n", r->lm, r->mm);
    if (s == VS_OK && r->o.f32) {
        char lm[1100], mm[1100];
        snprintf(lm, sizeof(lm), "%s/target-f32.gguf", r->o.out);
        snprintf(mm, sizeof(mm), "%s/target-mmproj-f32.gguf", r->o.out);
        eo.type = VS_TYPE_F32;
        s = vs_train_vlm_export(r->m, lm, mm, &eo, err);
        if (s == VS_OK) printf("exported %s and %s (F32)\n", lm, mm);
    }
    if (s == VS_OK) s = write_summary(r, final_loss, err);
    return s;
}

/* Mean loss of the last n curve points. */
static double recent_loss(const vs_train_curve *c, int64_t n) {
    double s = 0;
    int64_t k = 0;
    for (int64_t i = c->n - 1; i >= 0 && k < n; i--, k++) s += c->pt[i].loss;
    return k ? s / (double)k : 0;
}

static vs_status target_train(target_run *r, vs_error *err) {
    target_opts *o = &r->o;
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
    c->max_seq = o->ctx > 0 ? o->ctx : VS_MAX(1024, o->seq);
    if (c->max_seq < o->seq)
        return vs_error_set(err, VS_ERR_INVALID, "--ctx %d is shorter than --seq %d", c->max_seq, o->seq);
    if ((s = vs_train_vlm_config_check(c, err))) return s;
    const int G = c->image_size / c->patch_size;
    vs_train_data_opts dopts = {.seq_len = o->seq,
                                .batch = o->batch,
                                .image_rows = G * G,
                                .preproc = {.size = c->image_size, .mode = VS_PREPROC_LLAVA},
                                .bucket = o->bucket,
                                .seed = (uint64_t)o->seed};
    for (int i = 0; i < 3; i++)
        dopts.preproc.mean[i] = c->image_mean[i], dopts.preproc.std[i] = c->image_std[i];
    double t0 = vs_time_now();
    if (!(r->data =
              vs_train_data_new((const vs_world_dataset *const *)r->sets, r->n_sets, r->tok, &dopts, err)))
        return VS_ERR_INVALID;
    const vs_train_data_stats *ds = vs_train_data_get_stats(r->data);
    print_data_stats(ds, (const vs_world_dataset *const *)r->sets, r->n_sets, o->seq);
    printf("  encoded in %.1f s\n", vs_time_now() - t0);
    r->total = o->steps > 0 ? o->steps : (int64_t)ceil(o->epochs * (double)ds->n_batches / o->accum);
    if (r->total < 1) r->total = 1;

    /* outputs, settings, model */
    char dir[1100];
    snprintf(dir, sizeof(dir), "%s/ckpt", o->out);
    if ((s = mkdir_one(o->out, err)) || (s = mkdir_one(dir, err))) return s;
    snprintf(r->ckpt, sizeof(r->ckpt), "%s/ckpt.gguf", dir);
    snprintf(r->prev, sizeof(r->prev), "%s/ckpt-prev.gguf", dir);
    snprintf(r->csv, sizeof(r->csv), "%s/loss.csv", o->out);
    snprintf(r->svg, sizeof(r->svg), "%s/loss.svg", o->out);
    snprintf(r->runjson, sizeof(r->runjson), "%s/run.json", o->out);
    snprintf(r->lm, sizeof(r->lm), "%s/target.gguf", o->out);
    snprintf(r->mm, sizeof(r->mm), "%s/target-mmproj.gguf", o->out);
    char *settings = target_settings(o, r->total, c->vocab);
    if (!settings) return vs_error_set(err, VS_ERR_NOMEM, "out of memory");
    int max_B, max_T, max_I;
    vs_train_data_capacity(r->data, &max_B, &max_T, &max_I);
    bool resumed = o->resume && (access(r->ckpt, F_OK) == 0 || access(r->prev, F_OK) == 0);
    if (resumed) {
        uint8_t *old = NULL;
        size_t n = 0;
        s = vs_read_file(r->runjson, &old, &n, err);
        if (s == VS_OK) {
            while (n && (old[n - 1] == '\n' || old[n - 1] == '\r')) old[--n] = 0;
            if (strcmp((const char *)old, settings))
                s = vs_error_set(err, VS_ERR_INVALID,
                                 "--resume with other settings than %s holds:\n  stored:  %s\n  now:     %s\n"
                                 "(repeat the original flags; --threads, --ckpt-every, --chunk-steps, "
                                 "--time-limit and --f32 may differ)",
                                 r->runjson, (const char *)old, settings);
        }
        vs_free(old);
        if (s == VS_OK && !(r->m = load_checkpoint(r, max_B, max_T, max_I, err))) s = VS_ERR_INVALID;
        if (s == VS_OK) {
            const vs_train_vlm_config *lc = vs_train_vlm_cfg(r->m);
            if (lc->vocab != c->vocab || lc->width != c->width || lc->n_layers != c->n_layers ||
                lc->image_size != c->image_size || lc->max_seq != c->max_seq)
                s = vs_error_set(err, VS_ERR_INVALID, "the checkpoint's model differs from the settings");
        }
        if (s == VS_OK) {
            vs_train_data_state dst = {.epoch = r->st.epoch, .pos = r->st.data_pos, .rng = r->st.rng};
            s = vs_train_data_set_state(r->data, &dst, err);
        }
        if (s == VS_OK) s = vs_train_curve_read_csv(&r->curve, r->csv, true, err);
        if (s == VS_OK) {
            /* points written after the checkpoint belong to steps that will be redone */
            while (r->curve.n > 0 && r->curve.pt[r->curve.n - 1].step >= r->st.step) r->curve.n--;
            printf("resumed from step %lld (epoch %llu, batch %llu, %.0f s trained)\n", (long long)r->st.step,
                   (unsigned long long)r->st.epoch, (unsigned long long)r->st.data_pos, r->st.elapsed_s);
        }
    } else {
        if (o->resume) printf("no checkpoint in %s: starting fresh\n", dir);
        s = write_text(r->runjson, settings, err);
        if (s == VS_OK && !(r->m = vs_train_vlm_new(c, max_B, max_T, max_I, err))) s = VS_ERR_INVALID;
        if (s == VS_OK) {
            vs_train_vlm_init(r->m, (uint64_t)o->seed);
            memset(&r->st, 0, sizeof(r->st));
            vs_train_data_state dst;
            vs_train_data_get_state(r->data, &dst);
            r->st.rng = dst.rng;
        }
    }
    vs_free(settings);
    if (s != VS_OK) return s;
    printf(
        "model: ViT %dx%d/%d width %d x %d blocks (%d heads, MLP %d), projector %d -> %d, LM width %d x %d "
        "layers (%d/%d heads, SwiGLU %d), vocab %d, context %d\n",
        c->image_size, c->image_size, c->patch_size, c->v_width, c->v_blocks, c->v_heads, c->v_ffn,
        c->v_width, c->width, c->width, c->n_layers, c->n_heads, c->n_kv_heads, c->ffn, c->vocab, c->max_seq);
    printf("parameters: %.2fM (vision %.2fM, projector %.2fM, LM %.2fM = %.1f MB in F16)\n",
           vs_train_vlm_n_params(r->m, -1) / 1e6, vs_train_vlm_n_params(r->m, VS_TRAIN_GROUP_VISION) / 1e6,
           vs_train_vlm_n_params(r->m, VS_TRAIN_GROUP_PROJECTOR) / 1e6,
           vs_train_vlm_n_params(r->m, VS_TRAIN_GROUP_LM) / 1e6,
           2.0 * vs_train_vlm_n_params(r->m, VS_TRAIN_GROUP_LM) / 1e6);
    printf("schedule: %lld steps of %d x %d sequences (%.2f epochs), lr %.2e -> %.2e, warm-up %.0f, "
           "sgemm %s, %d threads\n",
           (long long)r->total, o->accum, o->batch, (double)r->total * o->accum / (double)ds->n_batches,
           o->lr, o->lr_min, o->warmup, vs_train_sgemm_backend(), o->threads);
    fflush(stdout);

    /* the loop */
    if (!(r->tp = vs_threadpool_new(o->threads, err))) return VS_ERR_NOMEM;
    vs_train_set_blas_threads(o->threads);
    vs_train_params *p = vs_train_vlm_params(r->m);
    vs_adamw opt;
    vs_adamw_default(&opt);
    opt.beta2 = (float)o->beta2, opt.weight_decay = (float)o->wd;
    vs_lr_schedule sched = {(float)o->lr, (float)o->lr_min, (int64_t)o->warmup, r->total};
    vs_progress pr;
    vs_progress_begin(&pr, "train", r->total);
    pr.t_start -= r->st.elapsed_s; /* elapsed and ETA over the whole training */
    const double run_t0 = vs_time_now(), elapsed0 = r->st.elapsed_s;
    double rows_run = 0, padded_run = 0;
    int64_t steps_run = 0;
    bool stop = false;
    while (r->st.step < r->total && !stop) {
        const float lr = vs_train_lr(&sched, r->st.step);
        const int64_t norm = vs_train_data_counted_ahead(r->data, o->accum);
        vs_train_params_zero_grad(p);
        double loss = 0, rows = 0;
        for (int k = 0; k < o->accum; k++) {
            vs_train_batch b;
            vs_train_batch_info info;
            float l;
            if ((s = vs_train_data_next(r->data, &b, &info, err))) return s;
            b.loss_norm = (double)norm;
            if ((s = vs_train_vlm_forward(r->m, r->tp, &b, &l, err))) return s;
            if ((s = vs_train_vlm_backward(r->m, r->tp, err))) return s;
            loss += l, rows += (double)info.rows;
            padded_run += (double)b.B * b.T;
        }
        if (o->clip > 0) vs_train_clip_grad(p, (float)o->clip);
        vs_train_adamw_step(p, r->tp, &opt, lr);
        const double now = vs_time_now();
        r->st.tokens += (uint64_t)rows;
        r->st.elapsed_s = elapsed0 + (now - run_t0);
        rows_run += rows;
        steps_run++;
        vs_train_curve_point pt = {r->st.step, (float)loss, lr, (double)r->st.tokens, r->st.elapsed_s};
        if ((s = vs_train_curve_add(&r->curve, pt, err))) return s;
        r->st.step++;
        if (!isfinite(loss))
            return vs_error_set(err, VS_ERR_INVALID, "loss is %f at step %lld", loss, (long long)pt.step);
        if (!o->quiet)
            vs_train_progress(&pr, r->st.step, recent_loss(&r->curve, 20), rows_run / (now - run_t0), lr);
        stop = (o->chunk_steps > 0 && steps_run >= o->chunk_steps) ||
               (o->time_limit > 0 && now - run_t0 >= o->time_limit);
        if (r->st.step % o->ckpt_every == 0 || r->st.step == r->total || stop)
            if ((s = save_checkpoint(r, err))) return s;
    }
    if (!o->quiet) vs_progress_end(&pr, r->st.step);
    const double run_s = vs_time_now() - run_t0;
    printf("this run: %lld steps, %.0f rows (+%.1f%% padding) in %.1f s (%.0f rows/s); total %lld/%lld steps, "
           "%llu rows, %.0f s\n",
           (long long)steps_run, rows_run, padded_run > 0 ? 100.0 * (padded_run - rows_run) / rows_run : 0.0,
           run_s, run_s > 0 ? rows_run / run_s : 0.0, (long long)r->st.step, (long long)r->total,
           (unsigned long long)r->st.tokens, r->st.elapsed_s);
    if (r->curve.n)
        printf("loss: first step %.4f, last 20 steps %.4f\n", r->curve.pt[0].loss,
               recent_loss(&r->curve, 20));
    if (r->st.step < r->total) {
        printf("stopped at step %lld of %lld: continue with the same flags and --resume\n",
               (long long)r->st.step, (long long)r->total);
        return VS_OK;
    }
    return export_models(r, recent_loss(&r->curve, 20), err);
}

static int cmd_target(int argc, char **argv) {
    target_run r;
    memset(&r, 0, sizeof(r));
    int rc = target_parse(argc, argv, &r.o);
    if (rc >= 0) return rc;
    vs_error err = {0};
    vs_status s = target_train(&r, &err);
    rc = s == VS_OK ? 0 : cli_fail_err(k_target_cmd, &err);
    vs_train_curve_free(&r.curve);
    vs_train_vlm_free(r.m);
    vs_train_data_free(r.data);
    for (int k = 0; k < r.n_sets; k++) vs_world_dataset_free(r.sets[k]);
    vs_gguf_close(r.tok_gguf);
    vs_tokenizer_free(r.tok);
    vs_threadpool_free(r.tp);
    return rc;
}

/* ---------------------------------------------------------------------------------------------- */
/* train export: a checkpoint as GGUF files (e.g. to evaluate a model in the middle of training) */

static void export_usage(FILE *f) {
    fprintf(f,
            "usage: vlmspec train export --ckpt FILE --tokenizer TOK.gguf --lm LM.gguf --mmproj MMPROJ.gguf\n"
            "                            [--type f16|f32] [--name NAME]\n"
            "Exports a training checkpoint (OUT/ckpt/ckpt.gguf of 'vlmspec train target') in llama.cpp's\n"
            "LLaVA layout, as the end of training does: the LM with the tokenizer's keys, and the mmproj.\n"
            "  --type T   matrix type, f16 (default) or f32\n"
            "  --name S   general.name (default vlmspec-world-target)\n");
}

static int cmd_export(int argc, char **argv) {
    const char *cmd = "train export", *ckpt = NULL, *tok = NULL, *lm = NULL, *mm = NULL;
    const char *name = "vlmspec-world-target";
    int type = VS_TYPE_F16;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            export_usage(stdout);
            return 0;
        }
        if (!(v = cli_value(cmd, argc, argv, &i))) return 2;
        if (!strcmp(a, "--ckpt"))
            ckpt = v;
        else if (!strcmp(a, "--tokenizer"))
            tok = v;
        else if (!strcmp(a, "--lm"))
            lm = v;
        else if (!strcmp(a, "--mmproj"))
            mm = v;
        else if (!strcmp(a, "--name"))
            name = v;
        else if (!strcmp(a, "--type") && (!strcmp(v, "f16") || !strcmp(v, "F16")))
            type = VS_TYPE_F16;
        else if (!strcmp(a, "--type") && (!strcmp(v, "f32") || !strcmp(v, "F32")))
            type = VS_TYPE_F32;
        else {
            fprintf(stderr, "vlmspec %s: unknown option or value '%s %s'\n", cmd, a, v);
            export_usage(stderr);
            return 2;
        }
    }
    if (!ckpt || !tok || !lm || !mm)
        return cli_fail(cmd, "--ckpt, --tokenizer, --lm and --mmproj are required"), 2;
    vs_error err = {0};
    vs_train_state st;
    vs_gguf *tg = vs_gguf_open(tok, &err);
    vs_train_vlm *m = tg ? vs_train_vlm_load(ckpt, 1, 2, 1, &st, &err) : NULL;
    vs_train_export_opts eo = {.type = type, .tokenizer = tg, .name = name};
    int rc = 0;
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
        fprintf(f, "usage: vlmspec train <command> [options]   (vlmspec train <command> --help)\n"
                   "commands:\n"
                   "  target  train the target VLM on the generated world (resumable; exports GGUF)\n"
                   "  export  export a training checkpoint as LM + mmproj GGUF\n"
                   "  bench   time training steps of a VLM on synthetic data against the sgemm peak\n");
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "target")) return cmd_target(argc - 1, argv + 1);
    if (!strcmp(argv[1], "export")) return cmd_export(argc - 1, argv + 1);
    if (!strcmp(argv[1], "bench")) return cmd_bench(argc - 1, argv + 1);
    fprintf(stderr, "vlmspec train: unknown command '%s'\n", argv[1]);
    return 2;
}
