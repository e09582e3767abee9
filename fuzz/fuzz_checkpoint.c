/* fuzz_checkpoint: the training checkpoint reader, vs_train_vlm_load (train_model.c), which
 * `vlmspec train target --resume / --init`, `train drafter` phases and `train export` call on
 * OUT/ckpt/ckpt.gguf. It is the lowest library function that parses a whole checkpoint: it opens the
 * GGUF, reads the "vlm.*" model config (read_cfg, static), creates the model and reads the training
 * state and every "p." / "m." / "v." tensor (vs_train_checkpoint_read, train_optim.c). It takes a
 * path, so the input is written to a private temporary file (under $TMPDIR, else /dev/shm, else
 * /tmp; one per input, removed after it: libFuzzer exits without running atexit handlers).
 *
 * Memory guard: the loader allocates the model its config declares (parameters, gradients and two
 * moments, 16 bytes per parameter, plus activations at the capacity below) before it reads the
 * tensors. An input declaring a model that needs more than 64 MiB is not loaded: that allocation is
 * correct, but thousands of them a second make the fuzzer run out of memory. Every other input is.
 *
 * Checked properties (abort on violation):
 *   - a failed load says why, naming the file;
 *   - a loaded model's config passes vs_train_vlm_config_check, and its parameters and AdamW moments
 *     are exactly the bytes of the file's p.* / m.* / v.* tensors;
 *   - saving the loaded model and state and loading that file again gives the same config, state,
 *     parameters, moments and frozen groups (reader and writer agree). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf.h"
#include "train_model.h"

#define ALLOC_BUDGET_BYTES (64.0 * 1024 * 1024)

static const char *g_tmp;
static char g_path[512], g_path2[600];

/* A fresh private file for this input (and the name of its re-saved copy). */
static void make_file(void) {
    if (!g_tmp) {
        g_tmp = getenv("TMPDIR");
        if (!g_tmp || !g_tmp[0]) g_tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp"; /* tmpfs */
    }
    snprintf(g_path, sizeof(g_path), "%s/vlmspec-fuzz-ckpt-XXXXXX", g_tmp);
    int fd = mkstemp(g_path);
    if (fd < 0) {
        perror("fuzz_checkpoint: mkstemp");
        abort();
    }
    close(fd);
    snprintf(g_path2, sizeof(g_path2), "%s.resaved", g_path);
}

static void remove_file(void) {
    unlink(g_path);
    unlink(g_path2);
}

static void check(int cond, const char *what) {
    if (!cond) {
        fprintf(stderr, "fuzz_checkpoint: property violated: %s\n", what);
        abort();
    }
}

/* True when the input declares a model too large to load here (see the top of the file). Keys that
 * are missing or out of read_cfg's range make the loader fail before it allocates: those load. */
static bool too_large(const uint8_t *data, size_t size) {
    vs_gguf *g = vs_gguf_open_memory(data, size, "guard", NULL);
    if (!g) return false;
    static const char *keys[] = {"vlm.image_size", "vlm.patch_size", "vlm.v_width", "vlm.v_ffn",
                                 "vlm.v_heads",    "vlm.v_blocks",   "vlm.vocab",   "vlm.width",
                                 "vlm.n_layers",   "vlm.n_heads",    "vlm.n_kv_heads", "vlm.ffn",
                                 "vlm.max_seq"};
    double v[13];
    bool ok = true;
    for (int i = 0; i < 13 && ok; i++) {
        int64_t x;
        ok = vs_gguf_require_int(g, keys[i], &x, NULL) == VS_OK && x >= 0 && x <= (1 << 30);
        v[i] = (double)x;
    }
    vs_gguf_close(g);
    if (!ok || v[1] < 1 || v[9] < 1) return false; /* the config check fails before any allocation */
    double S = v[0], P = v[1], W = v[2], VF = v[3], VH = v[4], VL = v[5], V = v[6], C = v[7], L = v[8],
           H = v[9], KVH = v[10], F = v[11], MS = v[12];
    double G = floor(S / P), TV = G * G + 1, D = floor(C / H), HD = H * D, KVD = KVH * D;
    /* a tower of zero blocks still allocates one block's stacked tensors (vs_train_vlm_new) */
    double VLt = VL > 0 ? VL : 1;
    double params = W * 3 * P * P + TV * W + VLt * (4 * W * W + 2 * W * VF + 9 * W + VF) + C * W + C * C +
                    2 * V * C + L * (2 * C + 2 * HD * C + 2 * KVD * C + 3 * F * C) + 8 * W + 3 * C + 39 * 16;
    double act = VL * TV * (12 * W + 2 * VF + VH * TV + 6) + TV * (12 * W + 2 * VF + VH * TV) +
                 (TV - 1) * (3 * P * P + 8 * W + 6 * C) + L * (12 * C + 4 * F + 4 * HD) + 3 * V + MS * D;
    return 16 * params + 4 * act > ALLOC_BUDGET_BYTES;
}

static void same_params(const vs_train_params *a, const vs_train_params *b) {
    check(a->n == b->n && a->n_tensors == b->n_tensors && a->t == b->t, "re-read parameter set size");
    check(memcmp(a->frozen, b->frozen, sizeof(a->frozen)) == 0, "re-read frozen groups");
    for (int i = 0; i < a->n_tensors; i++) {
        const vs_train_tensor *t = &a->tensors[i];
        check(memcmp(a->data + t->offset, b->data + t->offset, t->numel * sizeof(float)) == 0 &&
                  memcmp(a->m + t->offset, b->m + t->offset, t->numel * sizeof(float)) == 0 &&
                  memcmp(a->v + t->offset, b->v + t->offset, t->numel * sizeof(float)) == 0,
              "re-read values");
    }
}

/* The loaded values are the file's tensor bytes. */
static void values_are_the_files(const uint8_t *data, size_t size, const vs_train_params *p) {
    vs_gguf *g = vs_gguf_open_memory(data, size, "fuzz-memory", NULL);
    check(g != NULL, "a loaded file does not open from memory");
    static const char prefix[3] = {'p', 'm', 'v'};
    const float *bufs[3] = {p->data, p->m, p->v};
    for (int b = 0; b < 3; b++)
        for (int i = 0; i < p->n_tensors; i++) {
            const vs_train_tensor *t = &p->tensors[i];
            char name[64];
            snprintf(name, sizeof(name), "%c.%s", prefix[b], t->name);
            const vs_gguf_tensor *gt = vs_gguf_find_tensor(g, name);
            check(gt && gt->nbytes == t->numel * sizeof(float) &&
                      memcmp(gt->data, bufs[b] + t->offset, gt->nbytes) == 0,
                  "loaded values differ from the file's tensor");
        }
    vs_gguf_close(g);
}

static void run(const uint8_t *data, size_t size) {
    FILE *f = fopen(g_path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror(g_path);
        abort();
    }
    vs_error err = {0};
    vs_train_state st;
    vs_train_vlm *m = vs_train_vlm_load(g_path, 1, 1, 1, &st, &err);
    if (!m) {
        if (!strstr(err.msg, g_path)) fprintf(stderr, "fuzz_checkpoint: error without the path: %s\n", err.msg);
        check(strstr(err.msg, g_path) != NULL, "a load error names the file");
        return;
    }
    const vs_train_vlm_config *c = vs_train_vlm_cfg(m);
    check(vs_train_vlm_config_check(c, &err) == VS_OK, "a loaded config fails the config check");
    vs_train_params *p = vs_train_vlm_params(m);
    check(st.step >= 0 && p->t >= 0, "negative step or AdamW count");
    values_are_the_files(data, size, p);

    if (vs_train_vlm_save(m, &st, g_path2, &err) != VS_OK) {
        fprintf(stderr, "fuzz_checkpoint: %s\n", err.msg);
        check(0, "a loaded checkpoint cannot be saved");
    }
    vs_train_state st2;
    vs_train_vlm *m2 = vs_train_vlm_load(g_path2, 1, 1, 1, &st2, &err);
    if (!m2) fprintf(stderr, "fuzz_checkpoint: %s\n", err.msg);
    check(m2 != NULL, "a saved checkpoint does not load again");
    const vs_train_vlm_config *c2 = vs_train_vlm_cfg(m2);
    check(c->image_size == c2->image_size && c->patch_size == c2->patch_size && c->v_width == c2->v_width &&
              c->v_ffn == c2->v_ffn && c->v_heads == c2->v_heads && c->v_blocks == c2->v_blocks &&
              c->v_post_ln == c2->v_post_ln && c->vocab == c2->vocab && c->width == c2->width &&
              c->n_layers == c2->n_layers && c->n_heads == c2->n_heads && c->n_kv_heads == c2->n_kv_heads &&
              c->ffn == c2->ffn && c->max_seq == c2->max_seq &&
              !memcmp(&c->v_eps, &c2->v_eps, sizeof(float)) && !memcmp(&c->rms_eps, &c2->rms_eps, sizeof(float)) &&
              !memcmp(&c->rope_base, &c2->rope_base, sizeof(float)) &&
              !memcmp(c->image_mean, c2->image_mean, sizeof(c->image_mean)) &&
              !memcmp(c->image_std, c2->image_std, sizeof(c->image_std)),
          "re-read config");
    check(st.step == st2.step && st.data_pos == st2.data_pos && st.epoch == st2.epoch && st.tokens == st2.tokens &&
              !memcmp(&st.elapsed_s, &st2.elapsed_s, sizeof(double)) && !memcmp(&st.rng, &st2.rng, sizeof(st.rng)),
          "re-read state");
    same_params(p, vs_train_vlm_params(m2));
    vs_train_vlm_free(m2);
    vs_train_vlm_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (too_large(data, size)) return 0;
    make_file();
    run(data, size);
    remove_file();
    return 0;
}
