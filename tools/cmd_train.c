/* vlmspec train: the trainer's commands.
 *   bench   times training steps of a VLM of the given size on synthetic data and compares the
 *           achieved FLOP rate with the F32 sgemm peak measured on this machine. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "train_model.h"

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
    vs_train_vlm_config c = {.image_size = 64, .patch_size = 8, .v_width = 192, .v_ffn = 768, .v_heads = 3,
                             .v_blocks = 6, .v_eps = 1e-5f, .vocab = 2048, .width = 512, .n_layers = 8,
                             .n_heads = 8, .n_kv_heads = 4, .ffn = 1408, .max_seq = 512, .rms_eps = 1e-5f,
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
    vs_train_batch b = {.B = B, .T = T, .n_images = NI, .pixels = pixels, .tokens = tok, .img_row = img,
                        .targets = tgt, .loss_mask = mask};
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

int vs_cmd_train(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        FILE *f = argc < 2 ? stderr : stdout;
        fprintf(f, "usage: vlmspec train <command> [options]   (vlmspec train <command> --help)\n"
                   "commands:\n"
                   "  bench   time training steps of a VLM on synthetic data against the sgemm peak\n");
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "bench")) return cmd_bench(argc - 1, argv + 1);
    fprintf(stderr, "vlmspec train: unknown command '%s'\n", argv[1]);
    return 2;
}
