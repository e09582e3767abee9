/* world_tiny: a tiny generated world (a few samples per suite), a BPE tokenizer trained on it and a
 * tiny VLM config, shared by the train_data and eval tests. Header-only (static functions). */
#ifndef VS_TEST_WORLD_TINY_H
#define VS_TEST_WORLD_TINY_H

#include <stdio.h>
#include <string.h>

#include "bpe_train.h"
#include "testutil.h"
#include "train_data.h"
#include "train_model.h"
#include "world.h"

/* Writes DIR = tmpdir/name with n_train / n_test samples per suite and DIR/tok.gguf (vocab tokens,
 * trained on the training conversations). Paths go to dir / tok (cap bytes each). */
static void wt_make(const char *name, int n_train, int n_test, int vocab, char *dir, char *tok, size_t cap) {
    vs_error err = {0};
    snprintf(dir, cap, "%.300s/%.100s", vt_tmpdir(), name);
    snprintf(tok, cap, "%.400s/tok.gguf", dir);
    vs_world_config wc;
    vs_world_config_default(&wc);
    wc.seed = 7, wc.n_train = n_train, wc.n_test = n_test, wc.progress = 0;
    VT_REQUIRE(vs_world_generate(&wc, dir, &err) == VS_OK, "world: %s", err.msg);
    vs_world_dataset *d = vs_world_load(dir, "train", VS_WORLD_ALL_SUITES, &err);
    VT_REQUIRE(d, "%s", err.msg);
    vs_bpe_trainer *t = vs_bpe_trainer_new(&err);
    VT_REQUIRE(t, "%s", err.msg);
    for (int64_t i = 0; i < d->n; i++) {
        char *c = vs_train_conversation(&d->samples[i]);
        VT_REQUIRE(c && vs_bpe_add_text(t, c, strlen(c), &err) == VS_OK, "bpe: %s", err.msg);
        vs_free(c);
    }
    vs_bpe_vocab v;
    VT_REQUIRE(vs_bpe_train(t, vocab, 2, &v, &err) == VS_OK, "bpe: %s", err.msg);
    VT_REQUIRE(vs_bpe_write_gguf(&v, tok, "tiny-world-bpe", &err) == VS_OK, "bpe: %s", err.msg);
    vs_bpe_vocab_free(&v);
    vs_bpe_trainer_free(t);
    vs_world_dataset_free(d);
}

/* A tiny VLM for 64x64 world images: ViT patch 16 (16 rows per image), width 16, 1 block; LM width
 * 32, 2 layers, 4 heads over 2 KV heads. */
static vs_train_vlm_config wt_config(int vocab) {
    vs_train_vlm_config c = {.image_size = 64,
                             .patch_size = 16,
                             .v_width = 16,
                             .v_ffn = 32,
                             .v_heads = 2,
                             .v_blocks = 1,
                             .v_eps = 1e-5f,
                             .vocab = vocab,
                             .width = 32,
                             .n_layers = 2,
                             .n_heads = 4,
                             .n_kv_heads = 2,
                             .ffn = 64,
                             .max_seq = 2048,
                             .rms_eps = 1e-5f,
                             .rope_base = 10000.0f};
    const float mean[3] = {0.48145466f, 0.4578275f, 0.40821073f},
                std[3] = {0.26862954f, 0.26130258f, 0.27577711f};
    for (int i = 0; i < 3; i++) c.image_mean[i] = mean[i], c.image_std[i] = std[i];
    return c;
}

static vs_preproc wt_preproc(const vs_train_vlm_config *c) {
    vs_preproc p = {.size = c->image_size, .mode = VS_PREPROC_LLAVA};
    for (int i = 0; i < 3; i++) p.mean[i] = c->image_mean[i], p.std[i] = c->image_std[i];
    return p;
}

#endif
