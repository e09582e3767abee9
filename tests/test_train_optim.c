/* train_optim: the optimiser and the training-state machinery around the VLM model.
 *   - learning-rate schedule values (warmup, cosine, floor);
 *   - AdamW against a double-precision re-computation (decay / no-decay tensors, a frozen group);
 *   - clipping by global norm;
 *   - gradient accumulation: two half batches (loss_norm = whole count) == one full batch;
 *   - freezing: frozen groups get no gradient and no update, the others' gradients are unchanged;
 *   - checkpoints: N steps straight == N/2 steps, save, load into a fresh model, N/2 steps
 *     (bit-identical parameters, moments and state); damaged files give errors;
 *   - batch validation; loss curve CSV round trip and SVG plot;
 *   - pooled image rows: the model's gradients against central differences. */
#include <string.h>

#include "kernels.h"
#include "testutil.h"
#include "train_model.h"

static vs_train_vlm_config tiny_cfg(void) {
    vs_train_vlm_config c = {.image_size = 8, .patch_size = 4, .v_width = 8, .v_ffn = 20, .v_heads = 2,
                             .v_blocks = 2, .v_eps = 1e-5f, .vocab = 32, .width = 16, .n_layers = 2,
                             .n_heads = 4, .n_kv_heads = 2, .ffn = 24, .max_seq = 16, .rms_eps = 1e-5f,
                             .rope_base = 10000.0f};
    for (int i = 0; i < 3; i++) c.image_mean[i] = 0.5f, c.image_std[i] = 0.25f;
    return c;
}

/* A synthetic batch: sequence b holds image b (4 rows) after a BOS, then text; targets = next token.
 * Row content comes from rng so a data "position" reproduces it. */
typedef struct batch_buf {
    int B, T, NI;
    float pixels[4 * 3 * 8 * 8];
    int32_t tokens[4 * 12], img_row[4 * 12], targets[4 * 12];
    float mask[4 * 12];
    vs_train_batch b;
} batch_buf;

static void make_batch(batch_buf *bb, int B, uint64_t seed) {
    vs_rng r;
    vs_rng_seed(&r, seed);
    bb->B = B, bb->T = 12, bb->NI = B;
    for (int i = 0; i < B * 3 * 64; i++) bb->pixels[i] = vs_rng_normal(&r);
    for (int s = 0; s < B; s++)
        for (int t = 0; t < bb->T; t++) {
            int i = s * bb->T + t;
            bb->img_row[i] = (t >= 1 && t <= 4) ? s * 4 + (t - 1) : -1;
            bb->tokens[i] = bb->img_row[i] >= 0 ? -1 : (int32_t)vs_rng_below(&r, 32);
        }
    for (int s = 0; s < B; s++)
        for (int t = 0; t < bb->T; t++) {
            int i = s * bb->T + t;
            bool text_next = t + 1 < bb->T && bb->img_row[i + 1] < 0;
            bb->targets[i] = text_next ? bb->tokens[i + 1] : 0;
            bb->mask[i] = text_next && t >= 4 ? 1.0f : 0.0f;
        }
    bb->b = (vs_train_batch){.B = B, .T = bb->T, .n_images = B, .pixels = bb->pixels, .tokens = bb->tokens,
                             .img_row = bb->img_row, .targets = bb->targets, .loss_mask = bb->mask};
}

static vs_train_vlm *new_model(int max_B, uint64_t seed) {
    vs_error err = {0};
    vs_train_vlm_config c = tiny_cfg();
    vs_train_vlm *m = vs_train_vlm_new(&c, max_B, 12, max_B, &err);
    VT_REQUIRE(m, "%s", err.msg);
    vs_train_vlm_init(m, seed);
    /* a larger init than the default so every gradient is far from rounding noise */
    vs_train_params *p = vs_train_vlm_params(m);
    for (size_t i = 0; i < p->n; i++) p->data[i] *= 4.0f;
    return m;
}

static void fwd_bwd(vs_train_vlm *m, vs_threadpool *tp, const vs_train_batch *b, float *loss) {
    vs_error err = {0};
    VT_REQUIRE(vs_train_vlm_forward(m, tp, b, loss, &err) == VS_OK, "%s", err.msg);
    VT_REQUIRE(vs_train_vlm_backward(m, tp, &err) == VS_OK, "%s", err.msg);
}

/* ---------------------------------------------------------------------------------------------- */

static void test_schedule(void) {
    vs_lr_schedule s = {.lr_max = 1e-3f, .lr_min = 1e-4f, .warmup = 4, .total = 14};
    VT_CHECK_NEAR(vs_train_lr(&s, 0), 2.5e-4, 1e-9, "warmup step 0");
    VT_CHECK_NEAR(vs_train_lr(&s, 3), 1e-3, 1e-9, "end of warmup");
    VT_CHECK_NEAR(vs_train_lr(&s, 4), 1e-3, 1e-9, "cosine start");
    VT_CHECK_NEAR(vs_train_lr(&s, 7), 1e-4 + 0.5 * 9e-4 * (1 + cos(M_PI * 3 / 9)), 1e-9, "cosine middle");
    VT_CHECK_NEAR(vs_train_lr(&s, 13), 1e-4, 1e-9, "cosine end");
    VT_CHECK_NEAR(vs_train_lr(&s, 100), 1e-4, 1e-9, "after the end");
    bool mono = true;
    for (int i = 4; i < 14; i++) mono &= vs_train_lr(&s, i + 1) <= vs_train_lr(&s, i);
    VT_CHECK(mono, "cosine phase must not increase");
}

static void test_adamw(vs_threadpool *tp) {
    vs_train_tensor tt[3] = {
        {.name = "mat", .ndim = 2, .shape = {3, 5}, .group = 0, .decay = true},
        {.name = "bias", .ndim = 1, .shape = {7}, .group = 0, .decay = false},
        {.name = "frozen", .ndim = 1, .shape = {4}, .group = 1, .decay = true},
    };
    vs_train_params p;
    vs_error err = {0};
    VT_REQUIRE(vs_train_params_init(&p, tt, 3, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(p.tensors[1].offset % 16 == 0 && p.tensors[2].offset % 16 == 0, "tensors are 64-byte aligned");
    VT_CHECK(vs_train_params_find(&p, "bias") == &p.tensors[1] && !vs_train_params_find(&p, "nope"), "find");
    p.frozen[1] = true;
    vs_rng r;
    vs_rng_seed(&r, 5);
    for (size_t i = 0; i < p.n; i++) p.data[i] = vs_rng_normal(&r);
    double w[64], m[64] = {0}, v[64] = {0};
    for (size_t i = 0; i < p.n; i++) w[i] = p.data[i];
    vs_adamw o = {0.9f, 0.95f, 1e-8f, 0.1f};
    float lrs[3] = {1e-2f, 5e-3f, 2e-3f};
    float frozen0[4];
    memcpy(frozen0, p.data + p.tensors[2].offset, sizeof(frozen0));
    for (int step = 1; step <= 3; step++) {
        for (size_t i = 0; i < p.n; i++) p.grad[i] = vs_rng_normal(&r);
        vs_train_adamw_step(&p, tp, &o, lrs[step - 1]);
        double lr = lrs[step - 1];
        for (int k = 0; k < 2; k++) {
            const vs_train_tensor *t = &p.tensors[k];
            for (size_t j = t->offset; j < t->offset + t->numel; j++) {
                double g = p.grad[j];
                m[j] = 0.9 * m[j] + 0.1 * g;
                v[j] = 0.95 * v[j] + 0.05 * g * g;
                if (t->decay) w[j] *= 1 - lr * 0.1;
                double mh = m[j] / (1 - pow(0.9, step)), vh = v[j] / (1 - pow(0.95, step));
                w[j] -= lr * mh / (sqrt(vh) + 1e-8);
            }
        }
    }
    double e = 0;
    for (int k = 0; k < 2; k++)
        for (size_t j = p.tensors[k].offset; j < p.tensors[k].offset + p.tensors[k].numel; j++)
            e = fmax(e, fabs(p.data[j] - w[j]));
    VT_CHECK(e < 1e-6, "AdamW differs from the double-precision formula by %g", e);
    VT_CHECK(p.t == 3, "adam t %lld", (long long)p.t);
    VT_CHECK(!memcmp(frozen0, p.data + p.tensors[2].offset, sizeof(frozen0)), "a frozen tensor was updated");
    /* clipping: the frozen tensor does not count; scaling to max_norm */
    for (size_t i = 0; i < p.n; i++) p.grad[i] = 0;
    p.grad[p.tensors[0].offset] = 3.0f, p.grad[p.tensors[1].offset] = 4.0f,
    p.grad[p.tensors[2].offset] = 100.0f;
    VT_CHECK_NEAR(vs_train_grad_norm(&p), 5.0, 1e-6, "grad norm skips frozen groups");
    double n0 = vs_train_clip_grad(&p, 10.0f);
    VT_CHECK(n0 == 5.0 && p.grad[p.tensors[0].offset] == 3.0f, "no clipping under the limit");
    n0 = vs_train_clip_grad(&p, 1.0f);
    VT_CHECK_NEAR(vs_train_grad_norm(&p), 1.0, 1e-5, "clipped to max_norm");
    VT_CHECK(p.grad[p.tensors[2].offset] == 100.0f, "frozen gradient was scaled");
    vs_train_params_free(&p);
    vs_train_tensor bad = {.name = "bad", .ndim = 5};
    VT_CHECK(vs_train_params_init(&p, &bad, 1, &err) != VS_OK, "rank 5 accepted");
}

static double max_rel(const float *a, const float *b, size_t n) {
    double md = 0, mr = 0;
    for (size_t i = 0; i < n; i++) md = fmax(md, fabs(a[i] - b[i])), mr = fmax(mr, fabs(b[i]));
    return md / (mr > 0 ? mr : 1);
}

static void test_accumulation(vs_threadpool *tp) {
    vs_train_vlm *m = new_model(4, 11);
    vs_train_params *p = vs_train_vlm_params(m);
    batch_buf full, half[2];
    make_batch(&full, 4, 99);
    /* the two halves are the full batch's sequences 0-1 and 2-3 */
    for (int h = 0; h < 2; h++) {
        batch_buf *hb = &half[h];
        *hb = full;
        hb->B = 2, hb->NI = 2;
        memcpy(hb->pixels, full.pixels + h * 2 * 192, sizeof(float) * 2 * 192);
        for (int i = 0; i < 24; i++) {
            hb->tokens[i] = full.tokens[h * 24 + i], hb->targets[i] = full.targets[h * 24 + i];
            hb->mask[i] = full.mask[h * 24 + i];
            hb->img_row[i] = full.img_row[h * 24 + i] >= 0 ? full.img_row[h * 24 + i] - h * 8 : -1;
        }
        hb->b = (vs_train_batch){.B = 2, .T = 12, .n_images = 2, .pixels = hb->pixels, .tokens = hb->tokens,
                                 .img_row = hb->img_row, .targets = hb->targets, .loss_mask = hb->mask};
    }
    double count = 0;
    for (int i = 0; i < 48; i++) count += full.mask[i];
    float lf, l0, l1;
    vs_train_params_zero_grad(p);
    fwd_bwd(m, tp, &full.b, &lf);
    float *g_full = vs_malloc(p->n * sizeof(float));
    memcpy(g_full, p->grad, p->n * sizeof(float));
    vs_train_params_zero_grad(p);
    half[0].b.loss_norm = half[1].b.loss_norm = count;
    fwd_bwd(m, tp, &half[0].b, &l0);
    fwd_bwd(m, tp, &half[1].b, &l1);
    double e = max_rel(p->grad, g_full, p->n);
    printf("accumulation: full-batch loss %.6f = %.6f + %.6f; gradient relative difference %.2e\n", lf, l0,
           l1, e);
    VT_CHECK(fabs(lf - (l0 + l1)) < 1e-5, "accumulated loss %g vs %g", l0 + l1, lf);
    VT_CHECK(e < 5e-5, "accumulated gradient differs by %g", e);
    vs_free(g_full);
    vs_train_vlm_free(m);
}

static bool all_zero(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (x[i] != 0.0f) return false;
    return true;
}

static void test_freezing(vs_threadpool *tp) {
    vs_train_vlm *m = new_model(2, 12);
    vs_train_params *p = vs_train_vlm_params(m);
    batch_buf bb;
    make_batch(&bb, 2, 7);
    float loss;
    vs_train_params_zero_grad(p);
    fwd_bwd(m, tp, &bb.b, &loss);
    float *g_all = vs_malloc(p->n * sizeof(float));
    memcpy(g_all, p->grad, p->n * sizeof(float));
    /* three recipes: vision frozen (LLaVA stage 2), only the projector trained (stage 1), LM only */
    static const bool recipes[3][3] = {{true, false, false}, {true, false, true}, {true, true, false}};
    static const char *names[3] = {"vision frozen", "projector only", "LM only"};
    for (int r = 0; r < 3; r++) {
        for (int g = 0; g < 3; g++) p->frozen[g] = recipes[r][g];
        vs_train_params_zero_grad(p);
        fwd_bwd(m, tp, &bb.b, &loss);
        bool ok = true;
        for (int i = 0; i < p->n_tensors; i++) {
            const vs_train_tensor *t = &p->tensors[i];
            const float *g = p->grad + t->offset;
            if (p->frozen[t->group]) ok &= all_zero(g, t->numel);
            else ok &= memcmp(g, g_all + t->offset, t->numel * sizeof(float)) == 0;
        }
        VT_CHECK(ok, "%s: frozen gradients must be 0 and the others unchanged", names[r]);
        float *before = vs_malloc(p->n * sizeof(float));
        memcpy(before, p->data, p->n * sizeof(float));
        vs_adamw o;
        vs_adamw_default(&o);
        vs_train_adamw_step(p, tp, &o, 1e-3f);
        bool upd = true;
        for (int i = 0; i < p->n_tensors; i++) {
            const vs_train_tensor *t = &p->tensors[i];
            bool same = !memcmp(before + t->offset, p->data + t->offset, t->numel * sizeof(float));
            upd &= p->frozen[t->group] ? same : !same;
        }
        VT_CHECK(upd, "%s: exactly the unfrozen tensors must change", names[r]);
        memcpy(p->data, before, p->n * sizeof(float));
        vs_free(before);
    }
    vs_free(g_all);
    vs_train_vlm_free(m);
}

/* One training step of the resumable loop: the batch comes from the data position and the RNG (a
 * stand-in for shuffling), both of which the checkpoint must restore. */
static void train_steps(vs_train_vlm *m, vs_threadpool *tp, vs_train_state *st, int n) {
    vs_train_params *p = vs_train_vlm_params(m);
    vs_adamw o;
    vs_adamw_default(&o);
    vs_lr_schedule s = {.lr_max = 3e-3f, .lr_min = 3e-4f, .warmup = 2, .total = 8};
    for (int i = 0; i < n; i++) {
        batch_buf bb;
        make_batch(&bb, 2, st->data_pos * 1000003ULL + vs_rng_u64(&st->rng) % 1000);
        float loss;
        vs_train_params_zero_grad(p);
        fwd_bwd(m, tp, &bb.b, &loss);
        vs_train_clip_grad(p, 1.0f);
        vs_train_adamw_step(p, tp, &o, vs_train_lr(&s, st->step));
        st->step++, st->data_pos += 2, st->tokens += 24;
    }
}

static void test_checkpoint(vs_threadpool *tp) {
    vs_error err = {0};
    char path[512];
    snprintf(path, sizeof(path), "%s/ckpt.gguf", vt_tmpdir());
    vs_train_vlm *a = new_model(2, 21), *b = new_model(2, 21);
    vs_train_state sa = {0}, sb = {0};
    vs_rng_seed(&sa.rng, 77);
    sb = sa;
    vs_train_vlm_params(a)->frozen[VS_TRAIN_GROUP_VISION] = true; /* the frozen flags travel too */
    vs_train_vlm_params(b)->frozen[VS_TRAIN_GROUP_VISION] = true;
    train_steps(a, tp, &sa, 6);
    train_steps(b, tp, &sb, 3);
    sb.elapsed_s = 12.5;
    VT_REQUIRE(vs_train_vlm_save(b, &sb, path, &err) == VS_OK, "save: %s", err.msg);
    vs_train_vlm_free(b);
    vs_train_state sc;
    vs_train_vlm *c = vs_train_vlm_load(path, 2, 12, 2, &sc, &err);
    VT_REQUIRE(c, "load: %s", err.msg);
    VT_CHECK(sc.step == 3 && sc.data_pos == 6 && sc.tokens == 72 && sc.elapsed_s == 12.5 &&
                 !memcmp(&sc.rng, &sb.rng, sizeof(vs_rng)),
             "state not restored (step %lld data_pos %llu)", (long long)sc.step,
             (unsigned long long)sc.data_pos);
    VT_CHECK(vs_train_vlm_params(c)->frozen[VS_TRAIN_GROUP_VISION] && !vs_train_vlm_params(c)->frozen[2],
             "frozen flags not restored");
    train_steps(c, tp, &sc, 3);
    vs_train_params *pa = vs_train_vlm_params(a), *pc = vs_train_vlm_params(c);
    VT_CHECK(pa->n == pc->n && pa->t == pc->t, "parameter sets differ in size or adam t");
    bool same = !memcmp(pa->data, pc->data, pa->n * 4) && !memcmp(pa->m, pc->m, pa->n * 4) &&
                !memcmp(pa->v, pc->v, pa->n * 4);
    VT_CHECK(same, "6 steps straight != 3 steps + checkpoint + 3 steps");
    VT_CHECK(sa.step == sc.step && sa.data_pos == sc.data_pos && !memcmp(&sa.rng, &sc.rng, sizeof(vs_rng)),
             "final states differ");
    printf(
        "checkpoint: 6 steps straight and 3 + save/load + 3 give bit-identical parameters and moments: %s\n",
        same ? "yes" : "NO");

    /* damaged files: truncated, and a different config */
    uint8_t *data;
    size_t size;
    VT_REQUIRE(vs_read_file(path, &data, &size, &err) == VS_OK, "%s", err.msg);
    char bad[512];
    snprintf(bad, sizeof(bad), "%s/ckpt_trunc.gguf", vt_tmpdir());
    FILE *f = fopen(bad, "wb");
    VT_REQUIRE(f, "create %s", bad);
    fwrite(data, 1, size / 2, f);
    fclose(f);
    vs_train_state sd;
    vs_train_vlm *d = vs_train_vlm_load(bad, 2, 12, 2, &sd, &err);
    VT_CHECK(!d && err.code != VS_OK, "truncated checkpoint accepted");
    printf("truncated checkpoint: %s\n", err.msg);
    vs_free(data);
    vs_train_vlm_free(d);
    d = vs_train_vlm_load("/nonexistent/ckpt.gguf", 2, 12, 2, &sd, &err);
    VT_CHECK(!d && err.code == VS_ERR_IO, "missing checkpoint: %s", err.msg);
    /* a parameter set of another shape refuses the file's tensors */
    {
        vs_gguf *g = vs_gguf_open(path, &err);
        VT_REQUIRE(g, "%s", err.msg);
        vs_train_tensor tt = {.name = "token_embd", .ndim = 2, .shape = {33, 16}, .group = 2};
        vs_train_params q;
        VT_REQUIRE(vs_train_params_init(&q, &tt, 1, &err) == VS_OK, "%s", err.msg);
        VT_CHECK(vs_train_checkpoint_read(g, &q, &sd, &err) == VS_ERR_FORMAT, "shape mismatch accepted");
        printf("mismatched tensor: %s\n", err.msg);
        vs_train_params_free(&q);
        vs_gguf_close(g);
    }
    /* the stored model configuration, and a run's expected one against it (train target / drafter
     * --resume and --init): equal passes; each differing field is named with both values */
    {
        vs_train_vlm_config have, want = tiny_cfg();
        VT_REQUIRE(vs_train_vlm_config_read(path, &have, &err) == VS_OK, "config_read: %s", err.msg);
        VT_CHECK(vs_train_vlm_config_match(&want, "the flags say", &have, path, &err) == VS_OK,
                 "the checkpoint's own config does not match: %s", err.msg);
        VT_CHECK(vs_train_vlm_config_read("/nonexistent/ckpt.gguf", &have, &err) == VS_ERR_IO,
                 "config_read of a missing file: %s", err.msg);
        VT_REQUIRE(vs_train_vlm_config_read(path, &have, &err) == VS_OK, "config_read: %s", err.msg);
        /* field, the checkpoint's value, then the run's */
        static const char *const needles[] = {
            "ViT width 8, the flags say 48",     "ViT MLP 20, the flags say 48",
            "ViT blocks 2, the flags say 48",    "patch 4, the flags say 48",
            "vocabulary 32, the flags say 48",   "LM heads 4, the flags say 48",
            "KV heads 2, the flags say 48",      "SwiGLU width 24, the flags say 48",
            "context 16, the flags say 48",      "post-LN off, the flags say on",
            "RoPE base 10000, the flags say 48", "image std[2] 0.25, the flags say 48"};
        for (size_t k = 0; k < VS_ARRAY_LEN(needles); k++) {
            vs_train_vlm_config w = want;
            int *ip[] = {&w.v_width, &w.v_ffn, &w.v_blocks, &w.patch_size, &w.vocab,
                         &w.n_heads, &w.n_kv_heads, &w.ffn, &w.max_seq};
            if (k < VS_ARRAY_LEN(ip)) *ip[k] = 48;
            else if (k == 9) w.v_post_ln = true;
            else if (k == 10) w.rope_base = 48;
            else w.image_std[2] = 48;
            vs_status st = vs_train_vlm_config_match(&w, "the flags say", &have, path, &err);
            VT_CHECK(st == VS_ERR_INVALID && strstr(err.msg, needles[k]) && strstr(err.msg, path),
                     "mismatch %zu: %s (%s)", k, vs_status_name(st), err.msg);
        }
        printf("checkpoint of another model: %s\n", err.msg);
    }
    vs_train_vlm_free(a);
    vs_train_vlm_free(c);
}

static void test_batch_validation(vs_threadpool *tp) {
    vs_train_vlm *m = new_model(2, 3);
    batch_buf bb;
    make_batch(&bb, 2, 1);
    vs_error err = {0};
    float loss;
    bb.tokens[6] = 32;
    VT_CHECK(vs_train_vlm_forward(m, tp, &bb.b, &loss, &err) == VS_ERR_INVALID, "token 32 accepted");
    printf("bad token: %s\n", err.msg);
    VT_CHECK(vs_train_vlm_backward(m, tp, &err) == VS_ERR_INVALID, "backward after a failed forward");
    bb.tokens[6] = 3;
    bb.img_row[2] = 8;
    VT_CHECK(vs_train_vlm_forward(m, tp, &bb.b, &loss, &err) == VS_ERR_INVALID, "image row 8 of 8 accepted");
    bb.img_row[2] = 1;
    bb.b.B = 3;
    VT_CHECK(vs_train_vlm_forward(m, tp, &bb.b, &loss, &err) == VS_ERR_INVALID, "B beyond capacity accepted");
    bb.b.B = 2;
    VT_CHECK(vs_train_vlm_forward(m, tp, &bb.b, &loss, &err) == VS_OK, "valid batch: %s", err.msg);
    VT_CHECK(loss > 0 && isfinite(loss), "loss %g", loss);
    vs_train_vlm_config c = tiny_cfg();
    c.n_kv_heads = 3;
    VT_CHECK(vs_train_vlm_new(&c, 1, 4, 1, &err) == NULL, "4 heads over 3 kv heads accepted");
    printf("bad config: %s\n", err.msg);
    vs_train_vlm_free(m);
}

static void test_curve(void) {
    vs_error err = {0};
    vs_train_curve c = {0};
    for (int i = 0; i < 300; i++) {
        vs_train_curve_point pt = {i * 10, (float)(5.0 * exp(-i / 80.0) + 0.3 + 0.1 * sin(i)), 1e-3f,
                                   i * 1000.0, i * 0.5};
        VT_REQUIRE(vs_train_curve_add(&c, pt, &err) == VS_OK, "%s", err.msg);
    }
    char csv[512], svg[512], svg2[512];
    snprintf(csv, sizeof(csv), "%s/loss.csv", vt_tmpdir());
    snprintf(svg, sizeof(svg), "%s/loss.svg", vt_tmpdir());
    snprintf(svg2, sizeof(svg2), "%s/loss_log.svg", vt_tmpdir());
    VT_CHECK(vs_train_curve_write_csv(&c, csv, &err) == VS_OK, "%s", err.msg);
    vs_train_curve r = {0};
    VT_CHECK(vs_train_curve_read_csv(&r, csv, false, &err) == VS_OK, "%s", err.msg);
    bool same = r.n == c.n;
    for (int64_t i = 0; same && i < r.n; i++)
        same = r.pt[i].step == c.pt[i].step && fabsf(r.pt[i].loss - c.pt[i].loss) <= 1e-6f * c.pt[i].loss;
    VT_CHECK(same, "CSV round trip");
    VT_CHECK(vs_train_curve_read_csv(&r, "/nonexistent.csv", true, &err) == VS_OK, "missing_ok");
    VT_CHECK(vs_train_curve_write_svg(&c, svg, "loss <test> & more", 20, false, &err) == VS_OK, "%s",
             err.msg);
    VT_CHECK(vs_train_curve_write_svg(&c, svg2, NULL, 0, true, &err) == VS_OK, "%s", err.msg);
    uint8_t *d;
    size_t n;
    VT_REQUIRE(vs_read_file(svg, &d, &n, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(strstr((char *)d, "<svg") && strstr((char *)d, "</svg>") &&
                 strstr((char *)d, "&lt;test&gt; &amp;"),
             "SVG structure / escaping");
    int polylines = 0;
    for (const char *s = (char *)d; (s = strstr(s, "<polyline")); s++) polylines++;
    VT_CHECK(polylines == 2, "raw + smoothed polylines: %d", polylines);
    vs_free(d);
    FILE *f = fopen(csv, "w");
    fprintf(f, "step,loss,lr,tokens,time_s\n1,2,3\n");
    fclose(f);
    VT_CHECK(vs_train_curve_read_csv(&r, csv, false, &err) == VS_ERR_FORMAT, "short CSV row accepted");
    vs_train_curve_free(&c);
    vs_train_curve_free(&r);
    /* the progress line (stderr): label step/total loss tok/s lr elapsed ETA */
    vs_progress pr;
    vs_progress_begin(&pr, "train", 100);
    pr.every_s = 0;
    vs_train_progress(&pr, 40, 2.345, 1234.0, 3e-4f);
    vs_progress_end(&pr, 100);
}

/* AdamW's AVX loop gives the scalar loop's bits (tensor sizes that are not multiples of 8, decay and
 * no-decay tensors, a frozen group, several steps). */
static void test_adamw_paths(vs_threadpool *tp) {
    if (vs_isa_detect() < VS_ISA_AVX2) {
        printf("AdamW AVX loop: not run (no AVX2 on this CPU)\n");
        return;
    }
    vs_train_tensor tt[4] = {
        {.name = "mat", .ndim = 2, .shape = {37, 29}, .group = 0, .decay = true},
        {.name = "bias", .ndim = 1, .shape = {13}, .group = 0, .decay = false},
        {.name = "frozen", .ndim = 1, .shape = {21}, .group = 1, .decay = true},
        {.name = "emb", .ndim = 2, .shape = {5, 203}, .group = 2, .decay = true},
    };
    vs_error err = {0};
    vs_train_params p[2];
    vs_adamw o;
    vs_adamw_default(&o);
    vs_rng r;
    vs_rng_seed(&r, 77);
    for (int k = 0; k < 2; k++) VT_REQUIRE(vs_train_params_init(&p[k], tt, 4, &err) == VS_OK, "%s", err.msg);
    for (size_t i = 0; i < p[0].n; i++) {
        p[0].data[i] = vs_rng_normal(&r);
        p[0].m[i] = 0.01f * vs_rng_normal(&r);
        p[0].v[i] = 1e-4f * fabsf(vs_rng_normal(&r));
    }
    memcpy(p[1].data, p[0].data, p[0].n * 4), memcpy(p[1].m, p[0].m, p[0].n * 4);
    memcpy(p[1].v, p[0].v, p[0].n * 4);
    p[0].frozen[1] = p[1].frozen[1] = true;
    vs_isa cap = vs_isa_active();
    for (int step = 0; step < 3; step++) {
        for (size_t i = 0; i < p[0].n; i++) p[0].grad[i] = p[1].grad[i] = vs_rng_normal(&r);
        for (int k = 0; k < 2; k++) {
            vs_isa_set_max(k ? cap : VS_ISA_SCALAR);
            vs_train_adamw_step(&p[k], tp, &o, 1e-3f * (float)(step + 1));
        }
    }
    vs_isa_set_max(cap);
    VT_CHECK(!memcmp(p[0].data, p[1].data, p[0].n * 4) && !memcmp(p[0].m, p[1].m, p[0].n * 4) &&
                 !memcmp(p[0].v, p[1].v, p[0].n * 4),
             "AdamW: the AVX loop differs from the scalar loop");
    printf("AdamW AVX loop vs scalar loop (%d threads): compared bit for bit\n", vs_threadpool_size(tp));
    for (int k = 0; k < 2; k++) vs_train_params_free(&p[k]);
}

/* Per-group learning rates (vs_train_adamw_step_groups, the target's --vision-warmup): a group with
 * multiplier 1 gets vs_train_adamw_step's bits, a group with 0.5 the bits of a step at lr * 0.5 (a
 * power of two: the same double product), on the scalar and the AVX loop. */
static void test_adamw_groups(vs_threadpool *tp) {
    vs_train_tensor tt[3] = {
        {.name = "a", .ndim = 2, .shape = {19, 23}, .group = 0, .decay = true},
        {.name = "b", .ndim = 1, .shape = {37}, .group = 1, .decay = false},
        {.name = "c", .ndim = 2, .shape = {7, 41}, .group = 1, .decay = true},
    };
    vs_error err = {0};
    vs_train_params p[3]; /* groups (1, 0.5); plain lr; plain lr * 0.5 */
    vs_adamw o;
    vs_adamw_default(&o);
    vs_rng r;
    vs_rng_seed(&r, 78);
    for (int k = 0; k < 3; k++) VT_REQUIRE(vs_train_params_init(&p[k], tt, 3, &err) == VS_OK, "%s", err.msg);
    for (size_t i = 0; i < p[0].n; i++) p[0].data[i] = vs_rng_normal(&r);
    for (int k = 1; k < 3; k++) memcpy(p[k].data, p[0].data, p[0].n * 4);
    vs_isa cap = vs_isa_active();
    bool ok = true;
    for (int isa = 0; isa < 2; isa++) {
        vs_isa_set_max(isa ? cap : VS_ISA_SCALAR);
        for (int step = 0; step < 3; step++) {
            for (size_t i = 0; i < p[0].n; i++) p[0].grad[i] = p[1].grad[i] = p[2].grad[i] = vs_rng_normal(&r);
            const float lr = 1e-3f * (float)(step + 1), mul[VS_TRAIN_MAX_GROUPS] = {1.0f, 0.5f};
            vs_train_adamw_step_groups(&p[0], tp, &o, lr, mul);
            vs_train_adamw_step(&p[1], tp, &o, lr);
            vs_train_adamw_step(&p[2], tp, &o, lr * 0.5f);
        }
        for (int i = 0; i < 3; i++) {
            const vs_train_tensor *t = &p[0].tensors[i];
            const vs_train_params *want = &p[t->group == 0 ? 1 : 2];
            ok &= !memcmp(p[0].data + t->offset, want->data + t->offset, t->numel * 4);
            ok &= !memcmp(p[0].m + t->offset, want->m + t->offset, t->numel * 4);
            ok &= !memcmp(p[0].v + t->offset, want->v + t->offset, t->numel * 4);
        }
        /* the groups did move apart: group 1 of the plain-lr set differs */
        ok &= memcmp(p[0].data + tt[0].shape[0] * tt[0].shape[1], p[1].data + tt[0].shape[0] * tt[0].shape[1],
                     (p[0].n - (size_t)(tt[0].shape[0] * tt[0].shape[1])) * 4) != 0;
    }
    vs_isa_set_max(cap);
    VT_CHECK(ok, "AdamW per-group learning rates: bits differ from the plain steps at lr and lr * 0.5");
    printf("AdamW per-group learning rates (1, 0.5) equal plain steps at lr and lr / 2, bit for bit\n");
    for (int k = 0; k < 3; k++) vs_train_params_free(&p[k]);
}

/* The gradient of a fresh forward and backward (vs_malloc'd copy) and its loss. */
static float *grads_of(vs_train_vlm *m, vs_threadpool *tp, const vs_train_batch *b, float *loss) {
    vs_train_params *p = vs_train_vlm_params(m);
    vs_train_params_zero_grad(p);
    fwd_bwd(m, tp, b, loss);
    float *g = vs_malloc(sizeof(float) * p->n);
    VT_REQUIRE(g, "alloc");
    memcpy(g, p->grad, sizeof(float) * p->n);
    return g;
}

/* |central difference of the loss in parameter *x (step h) - the backward's an| / (|that difference| + 1e-3). */
static double fd_rel(vs_train_vlm *m, vs_threadpool *tp, const vs_train_batch *b, float *x, double an, float h) {
    vs_error err = {0};
    const float x0 = *x;
    float lp, lm;
    *x = x0 + h;
    VT_REQUIRE(vs_train_vlm_forward(m, tp, b, &lp, &err) == VS_OK, "%s", err.msg);
    *x = x0 - h;
    VT_REQUIRE(vs_train_vlm_forward(m, tp, b, &lm, &err) == VS_OK, "%s", err.msg);
    *x = x0;
    const double fd = ((double)lp - lm) / (2 * h);
    return fabs(fd - an) / (fabs(fd) + 1e-3);
}

/* A fresh 2-sequence model, its parameter views, a batch, and the loss and gradients of a plain step:
 * what the model-level loss terms (norm cap, grounding) are compared with. */
typedef struct grad_fixture {
    batch_buf bb;
    vs_train_vlm *m;
    vs_train_params *p;
    vs_train_vlm_tensors w, g;
    float l0;
    float *g0; /* the plain step's gradients (vs_malloc'd) */
} grad_fixture;

static void fixture_init(grad_fixture *f, vs_threadpool *tp, uint64_t batch_seed, uint64_t model_seed) {
    make_batch(&f->bb, 2, batch_seed);
    f->m = new_model(2, model_seed);
    f->p = vs_train_vlm_params(f->m);
    vs_train_vlm_views(f->m, &f->w, &f->g);
    f->g0 = grads_of(f->m, tp, &f->bb.b, &f->l0);
}

static void fixture_free(grad_fixture *f) {
    vs_free(f->g0);
    vs_train_vlm_free(f->m);
}

/* The image-row norm cap inside the model: off (or a cap no row reaches) leaves loss and gradients as
 * they were; a tight cap adds exactly weight * vs_train_norm_cap_forward(image rows, tau) with tau =
 * ratio * the token embeddings' mean norm, and its gradient (a central difference of the total loss in
 * a projector bias agrees with the backward). */
static void test_norm_cap(vs_threadpool *tp) {
    grad_fixture f;
    fixture_init(&f, tp, 11, 3);
    vs_train_vlm *m = f.m;
    float l1, l2;
    vs_train_vlm_set_norm_cap(m, 1e6f, 1.0f); /* a cap no row reaches */
    vs_train_params_zero_grad(f.p);
    fwd_bwd(m, tp, &f.bb.b, &l1);
    VT_CHECK(l1 == f.l0 && !memcmp(f.g0, f.p->grad, sizeof(float) * f.p->n) && vs_train_vlm_norm_cap_loss(m) == 0,
             "a cap no row reaches changes nothing");
    const float ratio = 0.05f, weight = 0.7f;
    vs_train_vlm_set_norm_cap(m, ratio, weight);
    vs_train_params_zero_grad(f.p);
    fwd_bwd(m, tp, &f.bb.b, &l2);
    /* the image rows of this forward, recomputed: the term is weight * cap(rows) */
    vs_train_vlm_set_norm_cap(m, 0, 0);
    float lz;
    vs_error err = {0};
    VT_REQUIRE(vs_train_vlm_forward(m, tp, &f.bb.b, &lz, &err) == VS_OK, "%s", err.msg);
    double cap = vs_train_vlm_norm_cap_loss(m);
    VT_CHECK(cap == 0 && lz == f.l0, "off again: no term");
    vs_train_vlm_set_norm_cap(m, ratio, weight);
    VT_REQUIRE(vs_train_vlm_forward(m, tp, &f.bb.b, &lz, &err) == VS_OK, "%s", err.msg);
    cap = vs_train_vlm_norm_cap_loss(m);
    VT_CHECK(cap > 0.1, "a tight cap adds a term (%g)", cap);
    VT_CHECK_NEAR(l2, f.l0 + cap, 1e-4 * (f.l0 + cap), "loss = LM loss + the cap term");
    /* finite difference in mm.2's bias (the image rows' offset) */
    double worst = 0;
    for (int k = 0; k < 4; k++) {
        double e = fd_rel(m, tp, &f.bb.b, f.w.mm2_b + k, f.g.mm2_b[k], 1e-2f);
        worst = e > worst ? e : worst;
        VT_CHECK(e < 2e-2, "mm.2 bias %d: finite difference and backward differ by %.3g", k, e);
    }
    printf("norm cap in the model: term %.4g, worst relative gradient difference %.2e\n", cap, worst);
    fixture_free(&f);
}

/* Attention grounding inside the model: off, or on with a batch without grounds, leaves loss and
 * gradients as they were; on, the loss gains exactly weight * the grounding term of head 0 of the chosen
 * layer, and its gradient (central differences of the total loss in that layer's q and k weights and in
 * the projector, whose image rows are the grounded keys, agree with the backward); a ground whose keys
 * come after its query and a layer outside the LM are refused. In QK mode the term's gradient reaches
 * that layer's wq and wk alone: those equal the full term's, every other gradient the plain step's; in
 * LM mode every LM gradient equals the full term's, the projector's and tower's the plain step's. */
static void test_ground(vs_threadpool *tp) {
    grad_fixture f;
    fixture_init(&f, tp, 13, 5);
    vs_train_vlm *m = f.m;
    vs_error err = {0};
    float l1, l2;
    VT_CHECK(vs_train_vlm_set_ground(m, 2, 1.0f, VS_TRAIN_GROUND_ALL, &err) == VS_ERR_INVALID,
             "layer 2 of 2 is refused");
    VT_CHECK(vs_train_vlm_set_ground(m, 1, 1.0f, (vs_train_ground_mode)7, &err) == VS_ERR_INVALID, "mode 7 is refused");
    const float weight = 0.6f;
    VT_REQUIRE(vs_train_vlm_set_ground(m, 1, weight, VS_TRAIN_GROUND_ALL, &err) == VS_OK, "%s", err.msg);
    vs_train_params_zero_grad(f.p);
    fwd_bwd(m, tp, &f.bb.b, &l1); /* the batch has no grounds yet */
    VT_CHECK(l1 == f.l0 && !memcmp(f.g0, f.p->grad, sizeof(float) * f.p->n) && vs_train_vlm_ground_loss(m) == 0,
             "grounding without grounds changes nothing");
    /* image rows 1..4 of each sequence; the rows that predict rows 7 and 10 look at patches 0-1 / 3 */
    const vs_train_ground gr[3] = {{0, 6, 1, 0x3}, {1, 9, 1, 0x8}, {1, 6, 1, 0x6}};
    f.bb.b.n_ground = 3, f.bb.b.ground = gr;
    vs_train_params_zero_grad(f.p);
    fwd_bwd(m, tp, &f.bb.b, &l2);
    const double term = vs_train_vlm_ground_loss(m);
    VT_CHECK(term > 0.1, "a grounding term (%g)", term);
    float *g_full = vs_malloc(sizeof(float) * f.p->n);
    VT_REQUIRE(g_full, "alloc");
    memcpy(g_full, f.p->grad, sizeof(float) * f.p->n);
    VT_CHECK_NEAR(l2, f.l0 + weight * term, 1e-5 * (f.l0 + term), "loss = LM loss + weight * the grounding term");
    const vs_train_vlm_config *c = vs_train_vlm_cfg(m);
    const size_t HD = (size_t)c->n_heads * (c->width / c->n_heads), KVD = (size_t)c->n_kv_heads * (c->width / c->n_heads);
    struct {
        const char *name;
        float *x, *gx;
    } probe[6] = {{"wq (layer 1, head 0)", f.w.wq + HD * c->width + 3, f.g.wq + HD * c->width + 3},
                  {"wq (layer 1, head 0)", f.w.wq + HD * c->width + 2 * c->width + 5,
                   f.g.wq + HD * c->width + 2 * c->width + 5},
                  {"wk (layer 1)", f.w.wk + KVD * c->width + 7, f.g.wk + KVD * c->width + 7},
                  {"wk (layer 1)", f.w.wk + KVD * c->width + c->width + 1, f.g.wk + KVD * c->width + c->width + 1},
                  {"mm.2 bias", f.w.mm2_b + 1, f.g.mm2_b + 1},
                  {"mm.2 bias", f.w.mm2_b + 9, f.g.mm2_b + 9}};
    double worst = 0;
    for (int k = 0; k < 6; k++) {
        double e = fd_rel(m, tp, &f.bb.b, probe[k].x, *probe[k].gx, 3e-3f);
        worst = e > worst ? e : worst;
        VT_CHECK(e < 1e-2, "%s: finite difference and backward differ by %.3g", probe[k].name, e);
    }
    /* the term moves these gradients: without it they differ */
    VT_CHECK(f.g.wq[HD * c->width + 3] != f.g0[f.g.wq + HD * c->width + 3 - f.p->grad],
             "the term reaches wq of layer 1");
    /* qk_only: the same loss; layer 1's wq and wk get the full gradient (the term's share included),
     * every other parameter exactly the plain step's, though the full gradient reaches the projector */
    VT_REQUIRE(vs_train_vlm_set_ground(m, 1, weight, VS_TRAIN_GROUND_QK, &err) == VS_OK, "%s", err.msg);
    float l3;
    float *g_qk = grads_of(m, tp, &f.bb.b, &l3);
    VT_CHECK(l3 == l2, "qk only: the same loss (%g, %g)", l3, l2);
    const size_t q0 = (size_t)(f.g.wq - f.p->grad) + HD * c->width, k0 = (size_t)(f.g.wk - f.p->grad) + KVD * c->width;
    double gmax = 0, qk_err = 0;
    size_t other_diff = 0, proj_moved = 0;
    for (size_t i = 0; i < f.p->n; i++) gmax = fmax(gmax, fabs(g_full[i]));
    for (size_t i = 0; i < f.p->n; i++) {
        const bool qk = (i >= q0 && i < q0 + HD * c->width) || (i >= k0 && i < k0 + KVD * c->width);
        if (qk) qk_err = fmax(qk_err, fabs(g_qk[i] - g_full[i]) / gmax);
        else other_diff += g_qk[i] != f.g0[i];
    }
    for (size_t i = (size_t)(f.g.mm2_b - f.p->grad), e = i + c->width; i < e; i++) proj_moved += g_full[i] != f.g0[i];
    VT_CHECK(qk_err < 1e-5, "qk only: layer 1's wq and wk gradients differ from the full term's by %.3g", qk_err);
    VT_CHECK(other_diff == 0, "qk only: %zu gradients beyond layer 1's wq and wk differ from the plain step's",
             other_diff);
    VT_CHECK(proj_moved > 0, "the full term reaches the projector");
    /* LM: the same loss; every LM gradient as the full term's, the projector's and tower's the plain step's */
    VT_REQUIRE(vs_train_vlm_set_ground(m, 1, weight, VS_TRAIN_GROUND_LM, &err) == VS_OK, "%s", err.msg);
    float l4;
    float *g_lm = grads_of(m, tp, &f.bb.b, &l4);
    VT_CHECK(l4 == l2, "lm: the same loss (%g, %g)", l4, l2);
    double lm_err = 0;
    size_t img_diff = 0, lm_n = 0;
    for (int t = 0; t < f.p->n_tensors; t++) {
        const vs_train_tensor *tt = &f.p->tensors[t];
        for (size_t i = tt->offset; i < tt->offset + tt->numel; i++)
            if (tt->group == VS_TRAIN_GROUP_LM) lm_err = fmax(lm_err, fabs(g_lm[i] - g_full[i]) / gmax), lm_n++;
            else img_diff += g_lm[i] != f.g0[i];
    }
    VT_CHECK(lm_n > 0 && lm_err < 1e-5, "lm: the LM's gradients differ from the full term's by %.3g", lm_err);
    VT_CHECK(img_diff == 0, "lm: %zu projector or tower gradients differ from the plain step's", img_diff);
    vs_free(g_lm);
    vs_free(g_qk);
    vs_free(g_full);
    const vs_train_ground bad = {0, 2, 1, 0x7}; /* keys 1..3 after query row 2 */
    f.bb.b.n_ground = 1, f.bb.b.ground = &bad;
    VT_CHECK(vs_train_vlm_forward(m, tp, &f.bb.b, &l1, &err) == VS_ERR_INVALID && strstr(err.msg, "ground 0"),
             "a ground whose keys follow its query is refused (%s)", err.msg);
    printf("attention grounding in the model: term %.4g, worst relative gradient difference %.2e; qk only: "
           "layer 1's wq and wk as the full term's (%.1e), every other gradient the plain step's; lm: the LM's "
           "as the full term's (%.1e), the projector's and tower's the plain step's\n",
           term, worst, qk_err, lm_err);
    fixture_free(&f);
}

/* Pooled image rows (vs_train_vlm_set_pool, IbED's pooled-finetuned drafter): a 3 x 3 patch grid pooled
 * 2 x 2 gives 4 rows per image (windows of 4, 2, 2 and 1 patches); the model's gradients of the tower, the
 * projector and the LM against central differences of its loss; a batch that takes a fifth row of an
 * image and pool sizes outside 1 .. 3 are refused. */
static void test_pooled_grad(vs_threadpool *tp) {
    vs_error err = {0};
    vs_train_vlm_config c = tiny_cfg();
    c.image_size = 12; /* patch 4: a 3 x 3 grid */
    vs_train_vlm *m = vs_train_vlm_new(&c, 2, 12, 2, &err);
    VT_REQUIRE(m, "%s", err.msg);
    vs_train_vlm_init(m, 21);
    vs_train_params *p = vs_train_vlm_params(m);
    for (size_t i = 0; i < p->n; i++) p->data[i] *= 4.0f;
    VT_CHECK(vs_train_vlm_set_pool(m, 0, &err) == VS_ERR_INVALID && vs_train_vlm_set_pool(m, 4, &err) == VS_ERR_INVALID,
             "pool sizes outside 1 .. G refused");
    VT_REQUIRE(vs_train_vlm_set_pool(m, 2, &err) == VS_OK && vs_train_vlm_image_rows(m) == 4, "%s", err.msg);
    vs_rng r;
    vs_rng_seed(&r, 8);
    static float pixels[2 * 3 * 12 * 12];
    int32_t tokens[24], img_row[24], targets[24];
    float mask[24];
    for (size_t i = 0; i < VS_ARRAY_LEN(pixels); i++) pixels[i] = vs_rng_normal(&r);
    for (int i = 0; i < 24; i++) {
        const int t = i % 12, sq = i / 12;
        img_row[i] = t >= 1 && t <= 4 ? sq * 4 + (t - 1) : -1;
        tokens[i] = img_row[i] >= 0 ? -1 : (int32_t)vs_rng_below(&r, 32);
    }
    for (int i = 0; i < 24; i++) {
        const bool text_next = i % 12 < 11 && img_row[i + 1] < 0;
        targets[i] = text_next ? tokens[i + 1] : 0;
        mask[i] = text_next && i % 12 >= 4 ? 1.0f : 0.0f;
    }
    vs_train_batch b = {.B = 2, .T = 12, .n_images = 2, .pixels = pixels, .tokens = tokens, .img_row = img_row,
                        .targets = targets, .loss_mask = mask};
    float loss;
    fwd_bwd(m, tp, &b, &loss);
    static const char *const names[] = {"v.patch_embd", "v.attn_q.weight", "v.post_ln.weight", "mm.0.weight",
                                        "mm.2.bias", "attn_q"};
    double worst = 0;
    for (size_t k = 0; k < VS_ARRAY_LEN(names); k++) {
        const vs_train_tensor *t = vs_train_params_find(p, names[k]);
        VT_REQUIRE(t, "tensor %s", names[k]);
        double max_err = 0, max_g = 0;
        for (size_t j = 0; j < t->numel; j += t->numel / 7 + 1) {
            float *w = p->data + t->offset + j;
            const float w0 = *w, h = 3e-3f, an = p->grad[t->offset + j]; /* 1e-2: curvature gave 8e-2 */
            float lp, lm;
            *w = w0 + h;
            VT_REQUIRE(vs_train_vlm_forward(m, tp, &b, &lp, &err) == VS_OK, "%s", err.msg);
            *w = w0 - h;
            VT_REQUIRE(vs_train_vlm_forward(m, tp, &b, &lm, &err) == VS_OK, "%s", err.msg);
            *w = w0;
            const double num = ((double)lp - lm) / (2.0 * h);
            max_err = fmax(max_err, fabs(num - an));
            max_g = fmax(max_g, fabs(num));
        }
        const double rel = max_err / fmax(max_g, 1e-3);
        worst = fmax(worst, rel);
        VT_CHECK(rel <= 2e-2, "pooled model: d loss / d %s relative error %.3g (max |grad| %.3g)", names[k], rel,
                 max_g);
    }
    img_row[1] = 4 * 2; /* a row past the two images' 8 pooled rows */
    VT_CHECK(vs_train_vlm_forward(m, tp, &b, &loss, &err) == VS_ERR_INVALID, "a ninth pooled image row accepted");
    printf("pooled image rows (3 x 3 grid, 2 x 2 windows): model gradients vs central differences, worst rel "
           "err %.2g\n", worst);
    vs_train_vlm_free(m);
}

int main(void) {
    vs_error err = {0};
    vs_threadpool *tp = vs_threadpool_new(2, &err);
    VT_REQUIRE(tp, "%s", err.msg);
    test_schedule();
    test_adamw(tp);
    test_adamw_paths(tp);
    test_adamw_paths(NULL);
    test_adamw_groups(tp);
    test_accumulation(tp);
    test_freezing(tp);
    test_checkpoint(tp);
    test_batch_validation(tp);
    test_curve();
    test_norm_cap(tp);
    test_ground(tp);
    test_pooled_grad(tp);
    vs_threadpool_free(tp);
    return vt_finish("train_optim");
}
