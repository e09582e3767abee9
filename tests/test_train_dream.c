/* test_train_dream: the DREAM draft model's training form (train_dream.h).
 *   - PyTorch parity: tests/reference/dream_ref.py computed a tiny model's draft features, block-2 outputs,
 *     loss and every gradient in float64 on one batch (feature noise, intermediate targets, fractional
 *     mask weights, nonzero gates) into tests/reference/fixtures/train/dream_head.gguf: outputs and
 *     gradients within 1e-4 relative (max |c - ref| / max |ref| per tensor), the loss and its three parts
 *     within 1e-5 relative;
 * On a random target:
 *   - the training forward equals the engine: the exported file run by the DREAM drafter over the same
 *     rows and the target's real features gives the pending row's draft feature the trainer computed,
 *     within 1e-4, for every row of a sequence taken as the pending one;
 *   - the gradient of the whole loss w.r.t. every tensor (sampled entries) matches central finite
 *     differences, with noise and intermediate targets;
 *   - AdamW on one batch (from closed gates) cuts the loss 20-fold, brings top-1 agreement from chance to
 *     >= 80% and opens the cross-attention gate;
 *   - bad input: a batch larger than the model, a missing field, backward before forward, a bad shape. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "draft_dream.h"
#include "kernels.h"
#include "spec_testutil.h"
#include "testutil.h"
#include "train_dream.h"

enum { E = 32, V = 64, B = 2, T = 12 };
static vs_rng g_rng;

static vs_lm *make_target(const char *name) {
    vs_lm_random_opts o;
    memset(&o, 0, sizeof(o));
    o.n_embd = E, o.n_layer = 2, o.n_head = 2, o.n_head_kv = 1, o.n_ff = 64, o.n_ctx = 64, o.n_vocab = V;
    o.type = VS_TYPE_F32, o.init_std = 0.2f, o.seed = 5;
    vs_error err = {0};
    VT_REQUIRE(vs_lm_write_random(&o, st_tmp_path(name), &err) == VS_OK, "%s", err.msg);
    vs_lm *lm = vs_lm_load(st_tmp_path(name), &err);
    VT_REQUIRE(lm, "%s", err.msg);
    return lm;
}

/* ------------------------------------------------------------------------------------------------
 * PyTorch parity */

#define FIXTURE "tests/reference/fixtures/train/dream_head.gguf"

static const float *fx(const vs_gguf *g, const char *name, size_t n) {
    const vs_gguf_tensor *t = vs_gguf_find_tensor(g, name);
    VT_REQUIRE(t && t->type == VS_TYPE_F32 && t->nbytes == n * sizeof(float), "fixture tensor %s (%zu values)",
               name, n);
    return t->data;
}

static double fx_f(const vs_gguf *g, const char *key) {
    double v = 0;
    vs_error err = {0};
    VT_REQUIRE(vs_gguf_require_float(g, key, &v, &err) == VS_OK, "%s", err.msg);
    return v;
}

static int fx_i(const vs_gguf *g, const char *key) {
    int64_t v = 0;
    vs_error err = {0};
    VT_REQUIRE(vs_gguf_require_int(g, key, &v, &err) == VS_OK, "%s", err.msg);
    return (int)v;
}

static double rel_diff(const float *a, const float *ref, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)ref[i]));
    return vt_max_abs_diff(a, ref, n) / fmax(m, 1e-30);
}

static void test_fixture(vs_threadpool *tp) {
    vs_error err = {0};
    vs_gguf *g = vs_gguf_open(FIXTURE, &err);
    VT_REQUIRE(g, "%s", err.msg);
    vs_dream_shape sh = {.width = fx_i(g, "dream.embedding_length"), .n_head = fx_i(g, "dream.attention.head_count"),
                         .n_head_kv = fx_i(g, "dream.attention.head_count_kv"),
                         .n_ff = fx_i(g, "dream.feed_forward_length"), .n_vocab = fx_i(g, "dream.vocab_size"),
                         .n_ctx = 64, .rms_eps = (float)fx_f(g, "dream.attention.layer_norm_rms_epsilon"),
                         .rope_base = (float)fx_f(g, "dream.rope.freq_base")};
    const int fB = fx_i(g, "ref.B"), fT = fx_i(g, "ref.T"), C = sh.width;
    const size_t rows = (size_t)fB * fT;
    vs_train_dream_batch bt = {.B = fB, .T = fT, .emb = fx(g, "batch.emb", rows * C),
                               .feat = fx(g, "batch.feat", rows * C), .noise = fx(g, "batch.noise", rows * C),
                               .mid = fx(g, "batch.mid", rows * C), .mask = fx(g, "batch.mask", rows)};
    vs_train_dream *m = vs_train_dream_new(&sh, fx(g, "lm_head", (size_t)sh.n_vocab * C), fB, fT, &err);
    VT_REQUIRE(m, "%s", err.msg);
    vs_train_params *P = vs_train_dream_params(m);
    char name[96];
    for (int t = 0; t < P->n_tensors; t++) {
        snprintf(name, sizeof(name), "w.%s", P->tensors[t].name);
        memcpy(P->data + P->tensors[t].offset, fx(g, name, P->tensors[t].numel), sizeof(float) * P->tensors[t].numel);
    }
    vs_train_dream_loss l;
    vs_train_params_zero_grad(P);
    VT_REQUIRE(vs_train_dream_forward(m, tp, &bt, &l, &err) == VS_OK, "%s", err.msg);
    VT_REQUIRE(vs_train_dream_backward(m, tp, &err) == VS_OK, "%s", err.msg);
    const double dp = rel_diff(vs_train_dream_pred(m), fx(g, "ref.pred", rows * C), rows * C);
    const double dm = rel_diff(vs_train_dream_mid_out(m), fx(g, "ref.mid_out", rows * C), rows * C);
    const double rl = fx_f(g, "ref.loss"), rf = fx_f(g, "ref.feat"), rm = fx_f(g, "ref.mid"), rk = fx_f(g, "ref.kl");
    double worst = 0;
    for (int t = 0; t < P->n_tensors; t++) {
        snprintf(name, sizeof(name), "g.%s", P->tensors[t].name);
        const double e =
            rel_diff(P->grad + P->tensors[t].offset, fx(g, name, P->tensors[t].numel), P->tensors[t].numel);
        VT_CHECK(e <= 1e-4, "gradient of %s relative error %.3e vs PyTorch", P->tensors[t].name, e);
        worst = fmax(worst, e);
    }
    printf("  PyTorch parity: draft features %.2e, block-2 outputs %.2e, loss %.8f vs %.8f (feat %.1e, mid %.1e, "
           "kl %.1e rel), gradients %.2e over %d tensors\n", dp, dm, l.total, rl, fabs(l.feat - rf) / rf,
           fabs(l.mid - rm) / rm, fabs(l.kl - rk) / rk, worst, P->n_tensors);
    VT_CHECK(dp <= 1e-4 && dm <= 1e-4, "outputs relative error %.3e / %.3e vs PyTorch", dp, dm);
    VT_CHECK(fabs(l.total - rl) <= 1e-5 * fabs(rl) && fabs(l.feat - rf) <= 1e-5 * fabs(rf) &&
                 fabs(l.mid - rm) <= 1e-5 * fabs(rm) && fabs(l.kl - rk) <= 1e-5 * fabs(rk),
             "loss %.8f (feat %.8f, mid %.8f, kl %.8f) vs PyTorch %.8f (%.8f, %.8f, %.8f)", l.total, l.feat, l.mid,
             l.kl, rl, rf, rm, rk);
    vs_train_dream_free(m);
    vs_gguf_close(g);
}

/* ------------------------------------------------------------------------------------------------
 * On a random target */

typedef struct data {
    float emb[B * T * E], feat[B * T * E], hid[B * T * E], noise[B * T * E], mid[B * T * E], mask[B * T];
} data;

/* B sequences of T random input rows, the target's features over them (and its raw hidden states, what
 * the engine hands a drafter), noise, intermediate targets, a mask. */
static void make_data(vs_lm *target, data *d) {
    vs_error err = {0};
    for (int i = 0; i < B * T * E; i++) {
        d->emb[i] = 0.5f * vs_rng_normal(&g_rng);
        d->noise[i] = 0.05f * (vs_rng_uniform(&g_rng) - 0.5f);
        d->mid[i] = vs_rng_normal(&g_rng);
    }
    for (int b = 0; b < B; b++) {
        vs_kv *kv = vs_lm_kv_new(target, 1, T, VS_TYPE_F32, &err);
        VT_REQUIRE(kv, "%s", err.msg);
        vs_lm_row rows[T];
        memset(rows, 0, sizeof(rows));
        for (int p = 0; p < T; p++) rows[p].embd = d->emb + ((size_t)b * T + p) * E, rows[p].pos = p;
        vs_lm_out o = {.hidden = d->hid + (size_t)b * T * E, .attn_layer = -1};
        VT_REQUIRE(vs_lm_forward(target, kv, NULL, rows, T, &o, &err) == VS_OK, "%s", err.msg);
        vs_kv_free(kv);
    }
    const vs_lm_config *c = vs_lm_cfg(target);
    for (int r = 0; r < B * T; r++)
        vs_rmsnorm(d->feat + (size_t)r * E, d->hid + (size_t)r * E, vs_lm_w(target)->output_norm, E, c->rms_eps);
    for (int r = 0; r < B * T; r++) d->mask[r] = (r % T) >= 3 ? 1.0f : 0.0f;
}

static vs_train_dream_batch batch_of(const data *d, bool extras) {
    return (vs_train_dream_batch){.B = B, .T = T, .emb = d->emb, .feat = d->feat, .noise = extras ? d->noise : NULL,
                                  .mid = extras ? d->mid : NULL, .mask = d->mask};
}

/* max |trainer's draft feature - the drafter's| over every row of sequence 0 taken as the pending row:
 * the drafter gets rows 0 .. P as one image segment and the target's hidden states of rows < P. */
static double engine_diff(vs_train_dream *m, vs_lm *target, const data *d, const char *path) {
    vs_error err = {0};
    float probe[VS_MSD_PROBE];
    vs_msd_embd_probe(target, probe);
    VT_REQUIRE(vs_train_dream_export(m, probe, VS_TYPE_F32, path, &err) == VS_OK, "%s", err.msg);
    vs_dream_head *h = vs_dream_head_load(path, &err);
    VT_REQUIRE(h, "%s", err.msg);
    double worst = 0;
    for (int P = 0; P < T; P++) {
        vs_spec_drafter *dr = vs_draft_dream_new(h, target, NULL, &err);
        VT_REQUIRE(dr, "%s", err.msg);
        vs_spec_segment seg = {.kind = VS_SPEC_SEG_IMAGE, .n = P + 1, .embd = d->emb, .image = -1};
        vs_spec_prompt pr = {.seg = &seg, .n_seg = 1};
        vs_spec_params par = vs_spec_params_default();
        par.sampling.temperature = 0;
        vs_spec_begin_info bi = {.prompt = &pr, .params = &par, .n_ctx_target = 64};
        VT_REQUIRE(dr->vt->begin(dr, &bi, &err) == VS_OK, "%s", err.msg);
        int32_t toks[T];
        for (int i = 0; i < T; i++) toks[i] = -1;
        if (P > 0) {
            vs_spec_features f = {.pos0 = 0, .n = P, .n_embd = E, .tokens = toks, .hidden = d->hid};
            VT_REQUIRE(dr->vt->target_rows(dr, &f, &err) == VS_OK, "%s", err.msg);
        }
        int32_t tok[2], par_[2], dep[2], qr[2];
        float q[2 * V];
        vs_spec_proposal prop = {.cap = 2, .n_vocab = V, .token = tok, .parent = par_, .depth = dep, .q_row = qr, .q = q};
        vs_spec_limits lim = {.max_depth = 1, .max_nodes = 1};
        VT_REQUIRE(dr->vt->propose(dr, &lim, &prop, &err) == VS_OK && prop.n == 1, "propose at row %d: %s", P, err.msg);
        const float *root = vs_draft_dream_node_feature(dr, -1);
        VT_REQUIRE(root, "the pending row's feature");
        worst = fmax(worst, vt_max_abs_diff(root, vs_train_dream_pred(m) + (size_t)P * E, E));
        dr->vt->end(dr);
        vs_spec_drafter_free(dr);
    }
    vs_dream_head_free(h);
    return worst;
}

static double total_loss(vs_train_dream *m, vs_threadpool *tp, const vs_train_dream_batch *bt) {
    vs_error err = {0};
    vs_train_dream_loss l;
    VT_REQUIRE(vs_train_dream_forward(m, tp, bt, &l, &err) == VS_OK, "%s", err.msg);
    return l.total;
}

static void test_model(vs_lm *target, const float *lm_head, vs_threadpool *tp) {
    vs_error err = {0};
    data *d = malloc(sizeof(data));
    make_data(target, d);
    vs_dream_shape sh = vs_dream_shape_for(target, 2, 1, 48, 64);
    vs_train_dream *m = vs_train_dream_new(&sh, lm_head, B, T, &err);
    VT_REQUIRE(m, "%s", err.msg);
    vs_train_dream_init(m, 7);
    /* larger weights than the default, norms off 1 and open gates, so that every branch carries gradient */
    vs_train_params *P = vs_train_dream_params(m);
    for (int t = 0; t < P->n_tensors; t++) {
        const vs_train_tensor *tt = &P->tensors[t];
        float *x = P->data + tt->offset;
        const bool gate = strstr(tt->name, "tanh_gate") != NULL;
        for (size_t j = 0; j < tt->numel; j++)
            x[j] = gate ? 0.6f : vs_dream_tensor_is_norm(t) ? 1.0f + 0.1f * vs_rng_normal(&g_rng) : 10.0f * x[j];
    }
    /* the trainer against the engine */
    vs_train_dream_batch bt = batch_of(d, false);
    vs_train_dream_loss l;
    VT_REQUIRE(vs_train_dream_forward(m, tp, &bt, &l, &err) == VS_OK, "%s", err.msg);
    const double diff = engine_diff(m, target, d, st_tmp_path("dream_train.gguf"));
    printf("  trainer vs engine draft features (every row as the pending one) max abs %.2e; loss %.5f (feat %.5f, "
           "kl %.5f), top-1 %lld/%lld\n", diff, l.total, l.feat, l.kl, (long long)l.top1, (long long)l.counted);
    VT_CHECK(diff <= 1e-4, "trainer and engine draft features differ by %.3e", diff);
    VT_CHECK(l.counted == B * (T - 3) && l.mid == 0, "counted %lld, no intermediate loss without targets",
             (long long)l.counted);

    /* gradients against central differences, with noise and intermediate targets */
    bt = batch_of(d, true);
    vs_train_params_zero_grad(P);
    total_loss(m, tp, &bt);
    VT_REQUIRE(vs_train_dream_backward(m, tp, &err) == VS_OK, "%s", err.msg);
    double worst = 0;
    for (int t = 0; t < P->n_tensors; t++) {
        const vs_train_tensor *tt = &P->tensors[t];
        const size_t stride = tt->numel > 16 ? tt->numel / 16 : 1;
        double max_err = 0, max_num = 0;
        for (size_t j = 0; j < tt->numel; j += stride) {
            float *x = P->data + tt->offset + j, x0 = *x;
            const float h = 1e-2f * fmaxf(1.0f, fabsf(x0));
            *x = x0 + h;
            const double lp = total_loss(m, tp, &bt);
            *x = x0 - h;
            const double lm = total_loss(m, tp, &bt);
            *x = x0;
            const double num = (lp - lm) / (2.0 * h), an = P->grad[tt->offset + j];
            max_err = fmax(max_err, fabs(num - an));
            max_num = fmax(max_num, fabs(num));
        }
        const double rel = max_err / fmax(max_num, 1e-6);
        worst = fmax(worst, rel);
        VT_CHECK(rel <= 2e-2, "%s: gradient relative error %.3e (max |grad| %.3g)", tt->name, rel, max_num);
        VT_CHECK(max_num > 0, "%s: no gradient reached it", tt->name);
    }
    printf("  gradients vs central differences, worst relative error %.2e over %d tensors\n", worst, P->n_tensors);

    /* AdamW on the one batch, from the paper's start (gates at 0) */
    vs_train_dream_init(m, 11);
    vs_adamw o;
    vs_adamw_default(&o);
    o.weight_decay = 0;
    double first = 0, last = 0;
    vs_train_dream_loss l0, l1;
    for (int step = 0; step < 300; step++) {
        vs_train_params_zero_grad(P);
        VT_REQUIRE(vs_train_dream_forward(m, tp, &bt, step ? &l1 : &l0, &err) == VS_OK, "%s", err.msg);
        VT_REQUIRE(vs_train_dream_backward(m, tp, &err) == VS_OK, "%s", err.msg);
        vs_train_clip_grad(P, 0.5f);
        vs_train_adamw_step(P, tp, &o, 3e-3f);
        if (!step) first = l0.total;
        else last = l1.total;
    }
    const vs_train_tensor *ga = vs_train_params_find(P, "xblk.attn_tanh_gate");
    printf("  300 AdamW steps on one batch: loss %.4f -> %.4f, top-1 %lld -> %lld of %lld; attention gate 0 -> "
           "%.3f\n", first, last, (long long)l0.top1, (long long)l1.top1, (long long)l1.counted,
           P->data[ga->offset]);
    /* the random target's distributions are nearly flat: at a KL near 0 a few argmaxes still differ by
     * near-ties, so the fit is judged by the loss and 80% top-1 */
    VT_CHECK(last < 0.05 * first && l1.top1 * 10 >= l1.counted * 8, "training on one batch: loss %.4f -> %.4f, "
             "top-1 %lld of %lld", first, last, (long long)l1.top1, (long long)l1.counted);
    VT_CHECK(P->data[ga->offset] != 0, "the cross-attention gate opened");
    vs_train_dream_free(m);
    free(d);
}

static void test_bad_input(vs_lm *target, const float *lm_head) {
    vs_error err = {0};
    data *d = malloc(sizeof(data));
    memset(d, 0, sizeof(*d));
    vs_dream_shape sh = vs_dream_shape_for(target, 2, 1, 48, 64);
    vs_train_dream *m = vs_train_dream_new(&sh, lm_head, 1, T, &err);
    VT_REQUIRE(m, "%s", err.msg);
    VT_CHECK(vs_train_dream_backward(m, NULL, &err) && strstr(err.msg, "without a forward"), "%s", err.msg);
    vs_train_dream_batch bt = batch_of(d, false);
    VT_CHECK(vs_train_dream_forward(m, NULL, &bt, NULL, &err) && strstr(err.msg, "at most 1 x"), "B = 2: %s", err.msg);
    bt.B = 1, bt.feat = NULL;
    VT_CHECK(vs_train_dream_forward(m, NULL, &bt, NULL, &err) && err.code == VS_ERR_INVALID, "no features: %s",
             err.msg);
    vs_train_dream_free(m);
    sh.n_head = 3;
    VT_CHECK(!vs_train_dream_new(&sh, lm_head, 1, T, &err) && err.code == VS_ERR_INVALID, "bad shape accepted");
    sh.n_head = 2;
    VT_CHECK(!vs_train_dream_new(&sh, lm_head, 1, 100, &err) && err.code == VS_ERR_INVALID,
             "batch longer than the model's context accepted");
    VT_CHECK(!vs_train_dream_new(&sh, NULL, 1, T, &err) && err.code == VS_ERR_INVALID, "no LM head accepted");
    free(d);
}

int main(void) {
    vs_rng_seed(&g_rng, 2025);
    vs_error err = {0};
    vs_lm *target = make_target("dream_train_target.gguf");
    const vs_lm_mat *out = &vs_lm_w(target)->output;
    VT_REQUIRE(out->type == VS_TYPE_F32 && out->n_out == V && out->n_in == E, "F32 LM head");
    vs_threadpool *tp = vs_threadpool_new(2, &err);
    VT_REQUIRE(tp, "%s", err.msg);
    test_fixture(tp);
    test_model(target, out->data, tp);
    test_bad_input(target, out->data);
    vs_threadpool_free(tp);
    vs_lm_free(target);
    return vt_finish("train_dream");
}
