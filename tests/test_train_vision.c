/* train_vision: vision pretraining on the world's labels (src/train/train_vision.h) and the world's
 * patch labels (vs_world_patch_labels).
 *   - patch labels: a large object labels the patches it covers with its shape, colour and size, an
 *     empty corner nothing; a one-word glyph scene labels exactly its letters; a chart labels bar
 *     values with the bar's colour and characters that are bar labels or values; rendering ids do not
 *     change the pixels (the same scene renders the same before and after labelling);
 *   - batches: deterministic in the RNG, pixels = the preprocessed rendering of the scene drawn;
 *   - gradients: the heads' loss against central finite differences, in the features, the heads'
 *     weights and (through vs_train_vlm_tower_forward/backward) the tower's parameters;
 *   - the run: 4 straight steps equal 2 + --resume 2 (eval.csv and the exported mmproj byte for byte);
 *     a probe from that mmproj keeps the tower exactly (only the heads move); the exported F32 tower
 *     gives the training forward's features through vs_vision_encode;
 *   - embed-image -m prints and records the image rows' norm ratio to the token embeddings;
 *   - bad input: an unwritable --out, a damaged checkpoint with nothing to fall back to, --resume with
 *     other settings, --init-mmproj with shape flags: clear errors, non-zero exit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "train.h"
#include "train_vision.h"
#include "vision.h"
#include "world.h"

static const vs_preproc k_pp = {.size = 32, .mean = {0.5f, 0.5f, 0.5f}, .std = {0.25f, 0.25f, 0.25f}};

static void test_patch_labels(void) {
    vs_error err = {0};
    vs_world_patch_label pl[64];
    /* one large red circle in the centre cell of a 64 x 64 image, patches of 8 */
    vs_world_scene sc = {.kind = VS_SCENE_SHAPES, .bg = 0, .noise = 7, .n_objects = 1};
    sc.objects[0] = (vs_world_object){.shape = 0, .color = 0, .size = 1, .cell = 4};
    VT_REQUIRE(vs_world_patch_labels(&sc, 64, 8, pl, &err) == VS_OK, "%s", err.msg);
    int covered = 0;
    for (int p = 0; p < 64; p++) {
        if (pl[p].shape < 0) continue;
        covered++;
        VT_CHECK(pl[p].shape == 0 && pl[p].color == 0 && pl[p].size == 1 && pl[p].ch < 0 && pl[p].value < 0,
                 "patch %d: shape %d colour %d size %d", p, pl[p].shape, pl[p].color, pl[p].size);
        VT_CHECK(p / 8 >= 2 && p / 8 <= 5 && p % 8 >= 2 && p % 8 <= 5, "patch %d labelled, far from the centre", p);
    }
    VT_CHECK(pl[3 * 8 + 3].shape == 0 && pl[4 * 8 + 4].shape == 0, "the centre patches are the circle's");
    VT_CHECK(pl[0].shape < 0 && pl[0].color < 0 && pl[63].color < 0, "the corners are background");
    VT_CHECK(covered >= 4 && covered <= 16, "%d patches covered by a circle of radius 8.5 pixels", covered);
    /* bad arguments */
    VT_CHECK(vs_world_patch_labels(&sc, 64, 7, pl, &err) != VS_OK, "a patch that does not divide the image");

    /* a one-word glyph scene: the patches' characters are exactly the word's letters */
    vs_world_scene g = {.kind = VS_SCENE_GLYPH, .bg = 1, .noise = 3, .n_lines = 1, .align = 4};
    snprintf(g.lines[0].text, sizeof(g.lines[0].text), "CAB");
    g.lines[0].color = 5;
    VT_REQUIRE(vs_world_patch_labels(&g, 64, 8, pl, &err) == VS_OK, "%s", err.msg);
    bool seen[VS_WORLD_N_CHARS] = {false};
    for (int p = 0; p < 64; p++)
        if (pl[p].ch >= 0) {
            seen[pl[p].ch] = true;
            VT_CHECK(pl[p].color == 5 && pl[p].shape < 0, "patch %d: a glyph patch has the line's colour", p);
        }
    for (int c = 0; c < VS_WORLD_N_CHARS; c++)
        VT_CHECK(seen[c] == (c == 0 || c == 1 || c == 2), "character class %d %s", c, seen[c] ? "seen" : "missing");

    /* a chart: value patches carry their bar's colour; characters are labels or values */
    vs_world_scene ch = {.kind = VS_SCENE_CHART, .bg = 2, .noise = 11, .n_bars = 3};
    const char labels[3] = {'B', 'K', 'T'};
    for (int i = 0; i < 3; i++) ch.bars[i] = (vs_world_bar){.label = labels[i], .value = (int8_t)(3 * i + 3), .color = (int8_t)(i + 1)};
    VT_REQUIRE(vs_world_patch_labels(&ch, 64, 8, pl, &err) == VS_OK, "%s", err.msg);
    int values = 0;
    bool vseen[10] = {false};
    for (int p = 0; p < 64; p++) {
        if (pl[p].value > 0) {
            values++;
            vseen[pl[p].value] = true;
            int bar = pl[p].value / 3 - 1;
            VT_CHECK(pl[p].color == ch.bars[bar].color, "patch %d: value %d with colour %d", p, pl[p].value, pl[p].color);
        }
        if (pl[p].ch >= 0) {
            int c = pl[p].ch;
            bool ok = c == 'B' - 'A' || c == 'K' - 'A' || c == 'T' - 'A' || c == 26 + 3 || c == 26 + 6 || c == 26 + 9;
            VT_CHECK(ok, "patch %d: character class %d is neither a label nor a value", p, c);
        }
    }
    VT_CHECK(vseen[3] && vseen[6] && vseen[9], "every bar labels some patch with its value");
    VT_CHECK(values >= 6, "%d value patches", values);

    /* labelling draws into ids only: the pixels stay the same */
    uint8_t a[64 * 64 * 3], b[64 * 64 * 3];
    VT_REQUIRE(vs_world_render(&ch, 64, a, &err) == VS_OK, "%s", err.msg);
    VT_REQUIRE(vs_world_patch_labels(&ch, 64, 8, pl, &err) == VS_OK, "%s", err.msg);
    VT_REQUIRE(vs_world_render(&ch, 64, b, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(!memcmp(a, b, sizeof(a)), "rendering is unchanged by labelling");
}

static void test_batches(void) {
    vs_error err = {0};
    vs_vision_batch x, y;
    VT_REQUIRE(vs_vision_batch_alloc(&x, 6, 32, 16, &err) == VS_OK, "%s", err.msg);
    VT_REQUIRE(vs_vision_batch_alloc(&y, 6, 32, 16, &err) == VS_OK, "%s", err.msg);
    vs_rng r1, r2, r3;
    vs_rng_seed(&r1, 42), vs_rng_seed(&r2, 42), vs_rng_seed(&r3, 42);
    VT_REQUIRE(vs_vision_batch_fill(&x, &r1, &k_pp, 6, &err) == VS_OK, "%s", err.msg);
    VT_REQUIRE(vs_vision_batch_fill(&y, &r2, &k_pp, 6, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(!memcmp(x.pixels, y.pixels, sizeof(float) * 6 * 3 * 32 * 32), "same RNG, same pixels");
    for (int h = 0; h < VS_VHEAD_N; h++)
        VT_CHECK(!memcmp(x.label[h], y.label[h], sizeof(int32_t) * (h < VS_VHEAD_N_PATCH ? 6 * 4 : 6)),
                 "same RNG, same %s labels", vs_vision_head_name(h));
    /* image 0 is the scene the generator draws first: its pixels and labels */
    uint32_t u = vs_rng_below(&r3, 4);
    vs_world_scene sc;
    vs_world_random_scene(&r3, u < 2 ? VS_SCENE_SHAPES : u == 2 ? VS_SCENE_GLYPH : VS_SCENE_CHART, &sc);
    vs_image img = {.w = 32, .h = 32, .rgb = vs_malloc(32 * 32 * 3)};
    float px[3 * 32 * 32];
    VT_REQUIRE(vs_world_render(&sc, 32, img.rgb, &err) == VS_OK, "%s", err.msg);
    VT_REQUIRE(vs_image_preprocess(&img, &k_pp, px, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(!memcmp(px, x.pixels, sizeof(px)), "image 0 is the preprocessed rendering of the first scene");
    VT_CHECK(x.label[VS_VHEAD_KIND][0] == (int32_t)sc.kind && x.label[VS_VHEAD_BG][0] == sc.bg, "image 0's labels");
    /* position heads: a 2 x 2 grid, rows and columns in eighths (1 + 0 or 1 + 4), every image alike */
    static const int32_t rows[4] = {1, 1, 5, 5}, cols[4] = {1, 5, 1, 5};
    for (int i = 0; i < 6; i++)
        VT_CHECK(!memcmp(x.label[VS_VHEAD_ROW] + 4 * i, rows, sizeof(rows)) &&
                     !memcmp(x.label[VS_VHEAD_COLUMN] + 4 * i, cols, sizeof(cols)),
                 "image %d's position labels", i);
    vs_free(img.rgb);
    /* a different seed gives other images */
    vs_rng_seed(&r1, 43);
    VT_REQUIRE(vs_vision_batch_fill(&y, &r1, &k_pp, 6, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(memcmp(x.pixels, y.pixels, sizeof(float) * 6 * 3 * 32 * 32), "another seed, other pixels");
    VT_CHECK(vs_vision_batch_fill(&y, &r1, &k_pp, 7, &err) != VS_OK, "more images than the batch holds");
    vs_vision_batch_free(&x);
    vs_vision_batch_free(&y);
}

/* The tiny tower the gradient and run tests use. */
static vs_train_vlm_config tiny_cfg(void) {
    return (vs_train_vlm_config){.image_size = 32, .patch_size = 16, .v_width = 8, .v_ffn = 16, .v_heads = 2,
                                 .v_blocks = 1, .v_eps = 1e-5f, .v_post_ln = true, .image_mean = {0.5f, 0.5f, 0.5f},
                                 .image_std = {0.25f, 0.25f, 0.25f}, .vocab = 2, .width = 4, .n_layers = 1,
                                 .n_heads = 1, .n_kv_heads = 1, .ffn = 1, .max_seq = 1, .rms_eps = 1e-5f,
                                 .rope_base = 10000.0f};
}

static double total_loss(vs_train_vlm *m, vs_vision_heads *h, const vs_vision_batch *b) {
    vs_error err = {0};
    VT_REQUIRE(vs_train_vlm_tower_forward(m, NULL, b->pixels, b->n, &err) == VS_OK, "%s", err.msg);
    return vs_vision_heads_forward(h, NULL, vs_train_vlm_tower_features(m), b, NULL);
}

/* Central difference of the loss in x[i] against the analytic gradient g. */
static void fd_check(const char *what, float *x, const float *g, int i, vs_train_vlm *m, vs_vision_heads *h,
                     const vs_vision_batch *b, double *worst) {
    const float eps = 1e-2f, x0 = x[i];
    x[i] = x0 + eps;
    double lp = total_loss(m, h, b);
    x[i] = x0 - eps;
    double lm = total_loss(m, h, b);
    x[i] = x0;
    double fd = (lp - lm) / (2 * eps), err = fabs(fd - g[i]) / (fabs(fd) + fabs(g[i]) + 1e-3);
    if (err > *worst) *worst = err;
    if (getenv("VT_VERBOSE")) printf("%s[%d]: fd %.6g bw %.6g err %.2e\n", what, i, fd, (double)g[i], err);
    VT_CHECK(err < 2e-2, "%s[%d]: finite difference %.6g, backward %.6g", what, i, fd, (double)g[i]);
}

static void test_gradients(void) {
    vs_error err = {0};
    vs_train_vlm_config c = tiny_cfg();
    vs_train_vlm *m = vs_train_vlm_new(&c, 1, 1, 3, &err);
    VT_REQUIRE(m, "%s", err.msg);
    vs_train_vlm_init(m, 9);
    vs_train_params *pm = vs_train_vlm_params(m);
    pm->frozen[VS_TRAIN_GROUP_LM] = pm->frozen[VS_TRAIN_GROUP_PROJECTOR] = true;
    vs_vision_heads *h = vs_vision_heads_new(c.v_width, 4, 3, &err);
    VT_REQUIRE(h, "%s", err.msg);
    vs_vision_heads_init(h, 4);
    vs_train_params *ph = vs_vision_heads_params(h);
    for (size_t i = 0; i < ph->n; i++) ph->data[i] *= 20; /* heads far from zero, so every term matters */
    vs_vision_batch b;
    VT_REQUIRE(vs_vision_batch_alloc(&b, 3, 32, 16, &err) == VS_OK, "%s", err.msg);
    vs_rng r;
    vs_rng_seed(&r, 5);
    VT_REQUIRE(vs_vision_batch_fill(&b, &r, &k_pp, 3, &err) == VS_OK, "%s", err.msg);

    vs_train_params_zero_grad(pm);
    vs_train_params_zero_grad(ph);
    double l0 = total_loss(m, h, &b);
    VT_CHECK(isfinite(l0) && l0 > 0, "loss %g", l0);
    float dfeat[3 * 4 * 8];
    vs_vision_heads_backward(h, NULL, vs_train_vlm_tower_features(m), &b, dfeat);
    vs_train_vlm_tower_backward(m, NULL, dfeat);
    double worst = 0;
    for (int t = 0; t < ph->n_tensors; t++) { /* two entries of every head tensor */
        const vs_train_tensor *tt = &ph->tensors[t];
        for (int k = 0; k < 2; k++)
            fd_check(tt->name, vs_train_params_at(ph->data, tt), vs_train_params_at(ph->grad, tt),
                     (int)((k * 7 + t) % tt->numel), m, h, &b, &worst);
    }
    static const char *tower[] = {"v.patch_embd", "v.position_embd", "v.attn_q.weight", "v.fc1.weight",
                                  "v.post_ln.weight", "v.class_embd"};
    for (size_t t = 0; t < VS_ARRAY_LEN(tower); t++) {
        const vs_train_tensor *tt = vs_train_params_find(pm, tower[t]);
        VT_REQUIRE(tt, "tensor %s", tower[t]);
        for (int k = 0; k < 3; k++)
            fd_check(tower[t], vs_train_params_at(pm->data, tt), vs_train_params_at(pm->grad, tt),
                     (int)((k * 13 + 5) % tt->numel), m, h, &b, &worst);
    }
    printf("heads + tower gradients: worst relative difference %.2e\n", worst);
    /* frozen tower: no gradient reaches it */
    vs_train_params_zero_grad(pm);
    pm->frozen[VS_TRAIN_GROUP_VISION] = true;
    total_loss(m, h, &b);
    vs_vision_heads_backward(h, NULL, vs_train_vlm_tower_features(m), &b, dfeat);
    vs_train_vlm_tower_backward(m, NULL, dfeat);
    VT_CHECK(vs_train_grad_norm(pm) == 0, "a frozen tower gets no gradient");
    vs_vision_batch_free(&b);
    vs_vision_heads_free(h);
    vs_train_vlm_free(m);
}

static vs_train_vision_opts run_opts(const char *dir) {
    vs_train_vision_opts o;
    vs_train_vision_opts_default(&o);
    o.out = dir, o.cfg = tiny_cfg(), o.steps = 4, o.batch = 3, o.threads = 2, o.eval_every = 2;
    o.eval_images = 5, o.warmup = 1, o.lr = 3e-3, o.lr_min = 3e-4, o.quiet = true;
    return o;
}

static bool same_file(const char *a, const char *b) {
    uint8_t *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    vs_error err = {0};
    bool same = vs_read_file(a, &x, &nx, &err) == VS_OK && vs_read_file(b, &y, &ny, &err) == VS_OK && nx == ny &&
                !memcmp(x, y, nx);
    vs_free(x);
    vs_free(y);
    return same;
}

static void test_run(void) {
    vs_error err = {0};
    char a[600], b[600], p[600], fa[700], fb[700];
    snprintf(a, sizeof(a), "%s/vision-a", vt_tmpdir());
    snprintf(b, sizeof(b), "%s/vision-b", vt_tmpdir());
    snprintf(p, sizeof(p), "%s/vision-probe", vt_tmpdir());
    vs_train_vision_opts o = run_opts(a);
    vs_train_vision_result ra, rb;
    VT_REQUIRE(vs_train_vision_run(&o, &ra, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(ra.finished && ra.step == 4, "finished at step %lld", (long long)ra.step);
    o = run_opts(b);
    o.chunk_steps = 2;
    VT_REQUIRE(vs_train_vision_run(&o, &rb, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(!rb.finished, "a chunk of 2 of 4 steps does not finish");
    o.chunk_steps = 0, o.resume = true;
    VT_REQUIRE(vs_train_vision_run(&o, &rb, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(rb.finished, "the resumed run finishes");
    snprintf(fa, sizeof(fa), "%s/vision-mmproj.gguf", a), snprintf(fb, sizeof(fb), "%s/vision-mmproj.gguf", b);
    VT_CHECK(same_file(fa, fb), "2 + resume 2 steps export the same tower as 4 straight steps");
    snprintf(fa, sizeof(fa), "%s/eval.csv", a), snprintf(fb, sizeof(fb), "%s/eval.csv", b);
    VT_CHECK(same_file(fa, fb), "and the same held-out evaluations");
    VT_CHECK(vt_file_has(fa, "step,loss,shape,colour,size,char,value,row,column,kind,objects,items,background"), "eval.csv header");
    for (int k = 0; k < VS_VHEAD_N; k++) VT_CHECK(ra.acc[k] == rb.acc[k], "accuracy of %s", vs_vision_head_name(k));
    /* a finished run resumed again trains nothing and repeats no evaluation */
    VT_REQUIRE(vs_train_vision_run(&o, &rb, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(rb.finished && same_file(fa, fb), "a finished run resumed again changed eval.csv");
    for (int k = 0; k < VS_VHEAD_N; k++)
        VT_CHECK(fabs(ra.acc[k] - rb.acc[k]) < 1e-8, "resumed after the end: accuracy of %s", vs_vision_head_name(k));
    /* a resume with other settings is refused, naming run.json */
    o.lr = 1e-2;
    VT_CHECK(vs_train_vision_run(&o, NULL, &err) != VS_OK && strstr(err.msg, "run.json"), "other --lr: %s", err.msg);

    /* a linear probe of the exported tower: the tower stays, bit for bit */
    char mm[700], ck[700];
    snprintf(mm, sizeof(mm), "%s/vision-mmproj.gguf", a);
    o = run_opts(p);
    o.init_mmproj = mm, o.probe = true, o.steps = 2;
    VT_REQUIRE(vs_train_vision_run(&o, NULL, &err) == VS_OK, "%s", err.msg);
    snprintf(ck, sizeof(ck), "%s/ckpt/ckpt.gguf", p);
    vs_train_state st;
    vs_train_vlm *m = vs_train_vlm_load(ck, 1, 1, 1, &st, &err);
    VT_REQUIRE(m, "%s", err.msg);
    vs_mmproj *mp = vs_mmproj_open(mm, &err);
    VT_REQUIRE(mp, "%s", err.msg);
    vs_vision_weights w;
    VT_REQUIRE(vs_mmproj_read_weights(mp, &w, &err) == VS_OK, "%s", err.msg);
    vs_train_vlm_tensors tw;
    vs_train_vlm_views(m, &tw, NULL);
    const vs_train_vlm_config c = tiny_cfg();
    VT_CHECK(!memcmp(tw.v_patch, w.patch_w, sizeof(float) * c.v_width * 3 * 16 * 16), "probe: patch embedding kept");
    VT_CHECK(!memcmp(tw.v_q_w, w.blocks[0].q_w, sizeof(float) * c.v_width * c.v_width), "probe: attention kept");
    VT_CHECK(!memcmp(tw.v_post_ln_w, w.post_ln_w, sizeof(float) * c.v_width), "probe: post-LN kept");
    snprintf(fb, sizeof(fb), "%s/vision-mmproj.gguf", p);
    FILE *f = fopen(fb, "rb");
    VT_CHECK(!f, "a probe exports nothing");
    if (f) fclose(f);

    /* the exported F32 tower computes the training forward's features */
    vs_vision_batch bt;
    VT_REQUIRE(vs_vision_batch_alloc(&bt, 1, 32, 16, &err) == VS_OK, "%s", err.msg);
    vs_rng r;
    vs_rng_seed(&r, 77);
    VT_REQUIRE(vs_vision_batch_fill(&bt, &r, &k_pp, 1, &err) == VS_OK, "%s", err.msg);
    VT_REQUIRE(vs_train_vlm_tower_forward(m, NULL, bt.pixels, 1, &err) == VS_OK, "%s", err.msg);
    vs_vision_features feat = {0};
    VT_REQUIRE(vs_vision_encode(vs_mmproj_tower(mp), NULL, bt.pixels, NULL, &feat, &err) == VS_OK, "%s", err.msg);
    double d = vt_max_rel_diff(feat.data, vs_train_vlm_tower_features(m), 4 * (size_t)c.v_width);
    printf("exported tower vs training forward: max relative difference %.2e\n", d);
    VT_CHECK(d < 1e-4, "exported tower: %g", d);
    vs_vision_features_free(&feat);
    vs_vision_batch_free(&bt);
    vs_vision_weights_free(&w, vs_mmproj_config(mp));
    vs_mmproj_free(mp);
    vs_train_vlm_free(m);
}

static void test_bad_input(void) {
    vs_error err = {0};
    vs_train_vision_opts o = run_opts("/proc/vlmspec-no-such-dir");
    VT_CHECK(vs_train_vision_run(&o, NULL, &err) != VS_OK && strstr(err.msg, "/proc/vlmspec-no-such-dir"),
             "unwritable --out: %s", err.msg);
    /* a damaged checkpoint with no ckpt-prev to fall back to */
    char d[600], ck[700], prev[700];
    snprintf(d, sizeof(d), "%s/vision-bad", vt_tmpdir());
    o = run_opts(d);
    o.steps = 1;
    VT_REQUIRE(vs_train_vision_run(&o, NULL, &err) == VS_OK, "%s", err.msg);
    snprintf(ck, sizeof(ck), "%s/ckpt/ckpt.gguf", d), snprintf(prev, sizeof(prev), "%s/ckpt/ckpt-prev.gguf", d);
    remove(prev);
    FILE *f = fopen(ck, "r+b");
    VT_REQUIRE(f, "open %s", ck);
    VT_REQUIRE(fwrite("XXXX", 1, 4, f) == 4, "damage");
    fclose(f);
    o.resume = true;
    VT_CHECK(vs_train_vision_run(&o, NULL, &err) != VS_OK && strstr(err.msg, "--resume"), "damaged: %s", err.msg);
    /* the CLI: exit codes and messages */
    VT_CHECK(vt_run("%s train vision --out %s/x --init-mmproj models/target-mmproj.gguf --v-width 64 2>/dev/null",
                    vt_cli(), vt_tmpdir()) == 2, "--init-mmproj with a shape flag is a usage error");
    VT_CHECK(vt_run("%s train vision 2>/dev/null", vt_cli()) == 2, "--out is required");
    /* embed-image -m: the image rows' loudness next to the LM's token embeddings, in PREFIX.json too; an
     * LM of another width is refused */
    char js[700];
    snprintf(js, sizeof(js), "%s/emb.json", vt_tmpdir());
    VT_CHECK(vt_run("%s embed-image --mmproj models/target-mmproj.gguf -m models/target.gguf --image "
                    "tests/reference/fixtures/vision/img_a.png -o %s/emb -t 1 2>/dev/null", vt_cli(), vt_tmpdir()) == 0 &&
                 vt_file_has(js, "\"norm_ratio\":") && vt_file_has(js, "\"text_norm\":"),
             "embed-image -m: no norm ratio in %s", js);
    VT_CHECK(vt_run("%s embed-image --mmproj models/target-mmproj.gguf -m models/draft-llava.gguf --image "
                    "tests/reference/fixtures/vision/img_a.png -o %s/emb2 -t 1 2>/dev/null", vt_cli(), vt_tmpdir()) == 1,
             "embed-image -m with an LM of another width");
    VT_CHECK(vt_run("%s train vision --out %s --resume --steps 1 --batch 3 --image-size 32 --patch 16 --v-width 8 "
                    "--v-blocks 1 --v-heads 2 --v-ffn 16 --width 4 --lr 3e-3 --lr-min 3e-4 --warmup 1 --eval-images 5 -q "
                    ">/dev/null 2>&1", vt_cli(), d) == 1,
             "the CLI fails on the damaged checkpoint");
}

int main(void) {
    test_patch_labels();
    test_batches();
    test_gradients();
    test_run();
    test_bad_input();
    return vt_finish("train_vision");
}
