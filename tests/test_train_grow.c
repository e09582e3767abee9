/* train_grow: a VLM grown to twice its LM width and depth (vs_train_vlm_grow) computes what it did.
 *   - noise 0: the grown model's logits and loss on a batch with text and image rows equal the small
 *     model's within float rounding (every parameter of the small one perturbed first, so no norm is 1
 *     and no bias 0 by chance); the new blocks' output matrices are zero, the tower is copied;
 *   - noise > 0: the copies differ (symmetry broken), the logits stay close;
 *   - a model that is not twice the small one in every LM dimension, or has another tower, is refused
 *     with the field named. */
#include <math.h>
#include <string.h>

#include "testutil.h"
#include "train_model.h"

static vs_train_vlm_config small_config(void) {
    vs_train_vlm_config c = {.image_size = 32, .patch_size = 16, .v_width = 16, .v_ffn = 24, .v_heads = 2,
                             .v_blocks = 1, .v_eps = 1e-5f, .v_post_ln = true, .vocab = 37, .width = 24,
                             .n_layers = 2, .n_heads = 3, .n_kv_heads = 1, .ffn = 40, .max_seq = 64,
                             .rms_eps = 1e-5f, .rope_base = 10000.0f};
    for (int i = 0; i < 3; i++) c.image_mean[i] = 0.5f, c.image_std[i] = 0.25f;
    return c;
}

static vs_train_vlm_config doubled(vs_train_vlm_config c) {
    c.width *= 2, c.n_layers *= 2, c.n_heads *= 2, c.n_kv_heads *= 2, c.ffn *= 2;
    return c;
}

enum { B = 2, T = 11, NI = 2 };

/* Two sequences: text, one picture's 4 rows, text; every row's next token counted. */
static void make_batch(vs_train_batch *b, int32_t *tok, int32_t *img, int32_t *tgt, float *mask, float *pix, int V,
                       int S) {
    vs_rng r;
    vs_rng_seed(&r, 11);
    for (int i = 0; i < B * T; i++) {
        int bi = i / T, t = i % T, first = 1 + bi;
        bool is_img = t >= first && t < first + 4;
        img[i] = is_img ? bi * 4 + (t - first) : -1;
        tok[i] = is_img ? -1 : (int32_t)(vs_rng_u64(&r) % (uint64_t)V);
        tgt[i] = (int32_t)(vs_rng_u64(&r) % (uint64_t)V);
        mask[i] = 1;
    }
    for (int i = 0; i < NI * 3 * S * S; i++) pix[i] = vs_rng_normal(&r);
    *b = (vs_train_batch){.B = B, .T = T, .n_images = NI, .pixels = pix, .tokens = tok, .img_row = img,
                          .targets = tgt, .loss_mask = mask};
}

static vs_train_vlm *new_model(const vs_train_vlm_config *c, uint64_t seed) {
    vs_error err = {0};
    vs_train_vlm *m = vs_train_vlm_new(c, B, T, NI, &err);
    VT_REQUIRE(m, "%s", err.msg);
    vs_train_vlm_init(m, seed);
    return m;
}

static float *forward(vs_train_vlm *m, vs_threadpool *tp, const vs_train_batch *b, float *loss) {
    vs_error err = {0};
    VT_REQUIRE(vs_train_vlm_forward(m, tp, b, loss, &err) == VS_OK, "%s", err.msg);
    size_t n = (size_t)B * T * vs_train_vlm_cfg(m)->vocab;
    float *out = vs_malloc(sizeof(float) * n);
    VT_REQUIRE(out, "alloc");
    memcpy(out, vs_train_vlm_logits(m), sizeof(float) * n);
    return out;
}

static double max_diff(const float *a, const float *b, size_t n, double *scale) {
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        s = fmax(s, fabs((double)a[i]));
    }
    if (scale) *scale = s;
    return d;
}

int main(void) {
    vs_error err = {0};
    vs_threadpool *tp = vs_threadpool_new(2, &err);
    VT_REQUIRE(tp, "%s", err.msg);
    const vs_train_vlm_config cs = small_config(), cb = doubled(cs);
    vs_train_vlm *small = new_model(&cs, 3);
    /* a trained-looking small model: every value moved, norms off 1, biases off 0 */
    vs_train_params *ps = vs_train_vlm_params(small);
    vs_rng r;
    vs_rng_seed(&r, 5);
    for (size_t i = 0; i < ps->n; i++) ps->data[i] += 0.05f * vs_rng_normal(&r);

    int32_t tok[B * T], img[B * T], tgt[B * T];
    float mask[B * T], pix[NI * 3 * 32 * 32];
    vs_train_batch b;
    make_batch(&b, tok, img, tgt, mask, pix, cs.vocab, cs.image_size);
    float ls, lb, ln;
    float *want = forward(small, tp, &b, &ls);
    const size_t n = (size_t)B * T * cs.vocab;

    /* noise 0: the same function */
    vs_train_vlm *big = new_model(&cb, 9);
    VT_REQUIRE(vs_train_vlm_grow(big, small, 0.0f, 1, "small", &err) == VS_OK, "%s", err.msg);
    float *got = forward(big, tp, &b, &lb);
    double scale, d = max_diff(want, got, n, &scale);
    printf("grown %d x %d -> %d x %d, noise 0: max |logit difference| %.2e (max |logit| %.2f), loss %.6f vs %.6f\n",
           cs.n_layers, cs.width, cb.n_layers, cb.width, d, scale, ls, lb);
    VT_CHECK(scale > 0.1 && d <= 2e-5 * fmax(1.0, scale), "grown logits differ by %.3e", d);
    VT_CHECK(fabs(ls - lb) <= 1e-5 * fmax(1.0, fabs(ls)), "grown loss %.7f, small %.7f", lb, ls);
    vs_train_vlm_tensors W, dW, Ws;
    vs_train_vlm_views(big, &W, &dW);
    vs_train_vlm_views(small, &Ws, &dW);
    const int64_t C2 = cb.width, HD2 = (int64_t)cb.n_heads * (cb.width / cb.n_heads), F2 = cb.ffn;
    for (int l = 1; l < cb.n_layers; l += 2) {
        double z = 0;
        for (int64_t i = 0; i < C2 * HD2; i++) z = fmax(z, fabs(W.wo[l * C2 * HD2 + i]));
        for (int64_t i = 0; i < C2 * F2; i++) z = fmax(z, fabs(W.w_down[l * C2 * F2 + i]));
        VT_CHECK(z == 0, "new block %d: output matrices not zero (max %.3g)", l, z);
    }
    VT_CHECK(!memcmp(W.v_fc1_w, Ws.v_fc1_w, sizeof(float) * cs.v_ffn * cs.v_width), "tower not copied");

    /* noise: the copies differ, the function barely */
    vs_train_vlm *bn = new_model(&cb, 9);
    VT_REQUIRE(vs_train_vlm_grow(bn, small, 1e-3f, 1, "small", &err) == VS_OK, "%s", err.msg);
    vs_train_vlm_views(bn, &W, &dW);
    const int64_t C = cs.width, HD = (int64_t)cs.n_heads * (cs.width / cs.n_heads);
    double sym = 0;
    for (int64_t i = 0; i < C; i++) sym = fmax(sym, fabs(W.wq[i] - W.wq[HD * C2 + i]));
    float *noisy = forward(bn, tp, &b, &ln);
    double dn = max_diff(want, noisy, n, NULL);
    printf("noise 1e-3: copies differ by up to %.2e, max |logit difference| %.2e\n", sym, dn);
    VT_CHECK(sym > 1e-4, "noise left the copies equal (%.3g)", sym);
    VT_CHECK(dn > d && dn < 0.05 * fmax(1.0, scale), "noise moved the logits by %.3g", dn);

    /* refused shapes: a field not doubled, another tower, odd sizes */
    struct {
        const char *what;
        vs_train_vlm_config c;
        const char *field;
    } bad[4] = {{"layers not doubled", cb, "LM layers"},
                {"another tower", cb, "ViT width"},
                {"KV heads not twice", cb, "KV heads"},
                {"odd SwiGLU", cb, "even"}};
    bad[0].c.n_layers = cs.n_layers;
    bad[1].c.v_width = 2 * cs.v_width, bad[1].c.v_heads = 2;
    bad[2].c.n_kv_heads = cb.n_heads; /* even, but not twice the small one's */
    bad[3].c.ffn = cb.ffn + 1;
    for (int i = 0; i < 4; i++) {
        vs_train_vlm *m = new_model(&bad[i].c, 1);
        memset(&err, 0, sizeof(err));
        vs_status s = vs_train_vlm_grow(m, small, 0.0f, 1, "small.gguf", &err);
        printf("%s: %s\n", bad[i].what, err.msg);
        VT_CHECK(s == VS_ERR_INVALID && strstr(err.msg, bad[i].field), "%s: status %d, '%s'", bad[i].what, s,
                 err.msg);
        vs_train_vlm_free(m);
    }
    vs_free(want), vs_free(got), vs_free(noisy);
    vs_train_vlm_free(small), vs_train_vlm_free(big), vs_train_vlm_free(bn);
    vs_threadpool_free(tp);
    return vt_finish("train_grow");
}
