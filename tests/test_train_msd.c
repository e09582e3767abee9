/* test_train_msd: the MSD head's training form (train_msd.h).
 *   - PyTorch parity: tests/reference/msd_ref.py computed a tiny head's outputs, loss and every gradient
 *     in float64 on one batch (image rows decoupled and not, input noise, fractional mask weights) into
 *     tests/reference/fixtures/train/msd_head.gguf: outputs and gradients within 1e-4 relative (max |c -
 *     ref| / max |ref| per tensor), the loss and its two parts within 1e-5 relative;
 * On a random target:
 *   - the training forward equals the engine: the trainer's head outputs on a random target's real
 *     features (image rows, decoupled and not) equal the exported head file run by the engine (fc
 *     computed by hand from the file's tensors, one vs_lm_forward of the head block) within 1e-4;
 *   - the loss equals a double-precision reference computed from those outputs (SmoothL1 + 0.1 x soft
 *     cross-entropy to the target's distribution through its LM head, counted slots only), and top-1
 *     agreement is counted the same way;
 *   - the gradient of the whole loss w.r.t. every tensor (sampled entries) matches central finite
 *     differences, with input noise;
 *   - AdamW on one batch halves the loss and brings top-1 agreement from chance to >= 90% (the head fits);
 *   - bad input: a batch larger than the model, a missing field, backward before forward, a bad shape;
 *   - training sequences made by an F16 target (vs_train_msd_sequence): rows, image flags, the mask one
 *     row ahead of the answers, features equal to feeding the rows one at a time (what decoding hands
 *     the drafter), the F32 copy of the LM head (vs_train_msd_lm_head) gives the engine's logits;
 *   - DREAM's intermediate targets on a 4-layer target: the least-entropy layer (as recomputed with an
 *     attention observer) and its input hidden state, a fixed layer, layers out of range refused; kept
 *     by the cache (F16), a batch has them only when every record does;
 *   - the feature cache (msd_cache.h): shards written and read back (rows, mask exact, F16 features and
 *     image rows), the resumable prefix of shards, a truncated shard and another width refused. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "draft_msd.h"
#include "kernels.h"
#include "spec_testutil.h"
#include "testutil.h"
#include "msd_cache.h"
#include "train_msd.h"

enum { E = 32, V = 40, B = 2, T = 20, S = T - 1 };

static vs_rng g_rng;

/* A random target of width E and vocabulary V (2 layers, 2 heads over 1 KV head). */
static vs_lm *make_target(vs_type type, int n_ctx, uint64_t seed, const char *name) {
    vs_error err = {0};
    vs_lm_random_opts o;
    memset(&o, 0, sizeof(o));
    o.n_embd = E, o.n_layer = 2, o.n_head = 2, o.n_head_kv = 1, o.n_ff = 2 * E, o.n_ctx = n_ctx, o.n_vocab = V;
    o.type = type, o.init_std = 0.3f, o.tied = false, o.seed = seed;
    VT_REQUIRE(vs_lm_write_random(&o, st_tmp_path(name), &err) == VS_OK, "%s", err.msg);
    vs_lm *lm = vs_lm_load(st_tmp_path(name), &err);
    VT_REQUIRE(lm, "%s", err.msg);
    return lm;
}

typedef struct data {
    float emb[B * T * E], feat[B * T * E], noise[B * T * E], mask[B * T];
    uint8_t img[B * T];
} data;

/* Two sequences: text, six image rows, text; and text only. Features from the target's forward. */
static void make_data(vs_lm *target, data *d) {
    vs_error err = {0};
    const vs_lm_config *tc = vs_lm_cfg(target);
    memset(d, 0, sizeof(*d));
    for (int b = 0; b < B; b++) {
        for (int p = 0; p < T; p++) {
            const size_t r = (size_t)b * T + p;
            d->img[r] = b == 0 && p >= 4 && p < 10;
            if (d->img[r])
                for (int i = 0; i < E; i++) d->emb[r * E + i] = 0.5f * vs_rng_normal(&g_rng);
            else vs_lm_embed(target, (int32_t)vs_rng_below(&g_rng, V), d->emb + r * E, NULL);
            for (int i = 0; i < E; i++) d->noise[r * E + i] = 0.05f * (float)(vs_rng_uniform(&g_rng) - 0.5);
            d->mask[r] = p < T - 1 && p >= (b == 0 ? 9 : 5) ? 1.0f : 0.0f;
        }
        vs_kv *kv = vs_lm_kv_new(target, 1, 64, VS_TYPE_F32, &err);
        VT_REQUIRE(kv, "%s", err.msg);
        vs_lm_row rows[T];
        memset(rows, 0, sizeof(rows));
        for (int p = 0; p < T; p++) rows[p].embd = d->emb + ((size_t)b * T + p) * E, rows[p].pos = p;
        float hid[T * E];
        vs_lm_out o = {.hidden = hid, .attn_layer = -1};
        VT_REQUIRE(vs_lm_forward(target, kv, NULL, rows, T, &o, &err) == VS_OK, "%s", err.msg);
        for (int p = 0; p < T; p++)
            vs_rmsnorm(d->feat + ((size_t)b * T + p) * E, hid + (size_t)p * E, vs_lm_w(target)->output_norm, E,
                       tc->rms_eps);
        vs_kv_free(kv);
    }
}

static vs_train_msd_batch batch_of(const data *d, bool noise) {
    return (vs_train_msd_batch){.B = B, .T = T, .emb = d->emb, .is_image = d->img, .feat = d->feat,
                                .noise = noise ? d->noise : NULL, .mask = d->mask};
}

/* max |trainer output - engine output| over every slot of both sequences */
static double engine_diff(vs_train_msd *m, const data *d, const float *lm_head_probe, const char *path) {
    vs_error err = {0};
    VT_REQUIRE(vs_train_msd_export(m, lm_head_probe, VS_TYPE_F32, path, &err) == VS_OK, "%s", err.msg);
    vs_msd_head *h = vs_msd_head_load(path, &err);
    VT_REQUIRE(h, "%s", err.msg);
    vs_gguf *g = vs_gguf_open(path, &err);
    VT_REQUIRE(g, "%s", err.msg);
    const vs_gguf_tensor *W = vs_gguf_find_tensor(g, "fc.weight"), *Bt = vs_gguf_find_tensor(g, "fc.bias");
    VT_REQUIRE(W && Bt && W->type == VS_TYPE_F32, "fc tensors");
    const float *w = W->data, *bias = Bt->data;
    const float *pred = vs_train_msd_pred(m);
    double worst = 0;
    for (int b = 0; b < B; b++) {
        float in[S * E], hid[S * E];
        for (int p = 0; p < S; p++) {
            const size_t r = (size_t)b * T + p;
            if (vs_msd_head_decoupled(h) && d->img[r + 1]) {
                memcpy(in + (size_t)p * E, d->emb + (r + 1) * E, sizeof(float) * E);
                continue;
            }
            for (int o = 0; o < E; o++) {
                double s = bias[o];
                for (int c = 0; c < E; c++) s += (double)w[(size_t)o * 2 * E + c] * d->emb[(r + 1) * E + c];
                for (int c = 0; c < E; c++) s += (double)w[(size_t)o * 2 * E + E + c] * d->feat[r * E + c];
                in[(size_t)p * E + o] = (float)s;
            }
        }
        vs_kv *kv = vs_lm_kv_new(vs_msd_head_lm(h), 1, 64, VS_TYPE_F32, &err);
        VT_REQUIRE(kv, "%s", err.msg);
        vs_lm_row rows[S];
        memset(rows, 0, sizeof(rows));
        for (int p = 0; p < S; p++) rows[p].embd = in + (size_t)p * E, rows[p].pos = p;
        vs_lm_out o = {.hidden = hid, .attn_layer = -1};
        VT_REQUIRE(vs_lm_forward((vs_lm *)vs_msd_head_lm(h), kv, NULL, rows, S, &o, &err) == VS_OK, "%s", err.msg);
        worst = VS_MAX(worst, vt_max_abs_diff(hid, pred + (size_t)b * S * E, (size_t)S * E));
        vs_kv_free(kv);
    }
    vs_gguf_close(g);
    vs_msd_head_free(h);
    return worst;
}

/* The loss of the last forward recomputed in double from its outputs. */
static void loss_reference(const vs_train_msd *m, const data *d, const float *lm_head, double *total,
                           int64_t *top1) {
    const float *pred = vs_train_msd_pred(m);
    double msum = 0, feat = 0, xent = 0;
    for (int r = 0; r < B * T; r++) msum += d->mask[r];
    *top1 = 0;
    for (int b = 0; b < B; b++)
        for (int p = 0; p < S; p++) {
            const float w = d->mask[b * T + p];
            if (w <= 0) continue;
            const float *o = pred + ((size_t)b * S + p) * E, *f = d->feat + ((size_t)b * T + p + 1) * E;
            double sl = 0;
            for (int i = 0; i < E; i++) {
                double z = fabs((double)o[i] - f[i]);
                sl += z < 1 ? 0.5 * z * z : z - 0.5;
            }
            feat += w / msum * sl / E;
            double lh[V], lt[V], mh = -1e30, mt = -1e30;
            int ah = 0, at = 0;
            for (int v = 0; v < V; v++) {
                double sh = 0, st = 0;
                for (int i = 0; i < E; i++) sh += (double)lm_head[(size_t)v * E + i] * o[i],
                                            st += (double)lm_head[(size_t)v * E + i] * f[i];
                lh[v] = sh, lt[v] = st;
                if (sh > mh) mh = sh, ah = v;
                if (st > mt) mt = st, at = v;
            }
            double zh = 0, zt = 0;
            for (int v = 0; v < V; v++) zh += exp(lh[v] - mh), zt += exp(lt[v] - mt);
            double x = 0;
            for (int v = 0; v < V; v++) x -= exp(lt[v] - mt) / zt * (lh[v] - mh - log(zh));
            xent += w / msum * x;
            *top1 += ah == at;
        }
    *total = feat + 0.1 * xent;
}

static double total_loss(vs_train_msd *m, vs_threadpool *tp, const vs_train_msd_batch *bt) {
    vs_error err = {0};
    vs_train_msd_loss l;
    VT_REQUIRE(vs_train_msd_forward(m, tp, bt, &l, &err) == VS_OK, "%s", err.msg);
    return l.total;
}

static void test_head(vs_lm *target, const float *lm_head, bool decoupled, vs_threadpool *tp) {
    vs_error err = {0};
    data *d = malloc(sizeof(data));
    make_data(target, d);
    vs_msd_shape sh = vs_msd_shape_for(target, 2, 1, 48, 64, decoupled);
    vs_train_msd *m = vs_train_msd_new(&sh, lm_head, B, T, &err);
    VT_REQUIRE(m, "%s", err.msg);
    vs_train_msd_init(m, 7);
    /* larger weights than the default so that every branch carries gradient */
    vs_train_params *P = vs_train_msd_params(m);
    for (size_t i = 0; i < P->n; i++) P->data[i] *= 10.0f;
    const vs_train_tensor *norm = vs_train_params_find(P, "blk.0.ffn_norm.weight");
    VT_REQUIRE(norm, "ffn_norm in the set");
    for (size_t i = 0; i < norm->numel; i++) P->data[norm->offset + i] = 1.0f + 0.1f * vs_rng_normal(&g_rng);
    float probe[VS_MSD_PROBE];
    vs_msd_embd_probe(target, probe);

    /* forward parity with the engine, and the loss against the reference */
    vs_train_msd_batch bt = batch_of(d, false);
    vs_train_msd_loss l;
    VT_REQUIRE(vs_train_msd_forward(m, tp, &bt, &l, &err) == VS_OK, "%s", err.msg);
    double diff = engine_diff(m, d, probe, st_tmp_path(decoupled ? "msd_train_dec.gguf" : "msd_train_cpl.gguf"));
    printf("  %s: trainer vs engine head outputs max abs %.2e; loss %.5f (feat %.5f, xent %.5f), top-1 %lld/%lld\n",
           decoupled ? "decoupled" : "coupled  ", diff, l.total, l.feat, l.xent, (long long)l.top1,
           (long long)l.counted);
    VT_CHECK(diff <= 1e-4, "trainer and engine head outputs differ by %.3e", diff);
    double ref;
    int64_t top1;
    loss_reference(m, d, lm_head, &ref, &top1);
    VT_CHECK_NEAR(l.total, ref, 1e-5 * (1 + fabs(ref)), "loss vs double reference");
    VT_CHECK(l.top1 == top1 && l.counted == 10 + 14, "top-1 %lld (reference %lld), counted %lld", (long long)l.top1,
             (long long)top1, (long long)l.counted);

    /* gradients against central differences, with input noise */
    bt = batch_of(d, true);
    vs_train_params_zero_grad(P);
    total_loss(m, tp, &bt);
    VT_REQUIRE(vs_train_msd_backward(m, tp, &err) == VS_OK, "%s", err.msg);
    double worst = 0;
    for (int t = 0; t < P->n_tensors; t++) {
        const vs_train_tensor *tt = &P->tensors[t];
        const size_t stride = tt->numel > 24 ? tt->numel / 24 : 1;
        double max_err = 0, max_num = 0;
        for (size_t j = 0; j < tt->numel; j += stride) {
            float *x = P->data + tt->offset + j, x0 = *x;
            const float h = 1e-2f * fmaxf(1.0f, fabsf(x0));
            *x = x0 + h;
            double lp = total_loss(m, tp, &bt);
            *x = x0 - h;
            double lm = total_loss(m, tp, &bt);
            *x = x0;
            double num = (lp - lm) / (2.0 * h), an = P->grad[tt->offset + j];
            max_err = fmax(max_err, fabs(num - an));
            max_num = fmax(max_num, fabs(num));
        }
        const double rel = max_err / fmax(max_num, 1e-6);
        worst = fmax(worst, rel);
        VT_CHECK(rel <= 2e-2, "%s: gradient relative error %.3e (max |grad| %.3g)", tt->name, rel, max_num);
        VT_CHECK(max_num > 0, "%s: no gradient reached it", tt->name);
    }
    printf("  %s: gradients vs central differences, worst relative error %.2e over %d tensors\n",
           decoupled ? "decoupled" : "coupled  ", worst, P->n_tensors);

    /* AdamW on the one batch */
    vs_train_msd_init(m, 11);
    vs_adamw o;
    vs_adamw_default(&o);
    o.weight_decay = 0;
    double first = 0, last = 0;
    vs_train_msd_loss l0, l1;
    for (int step = 0; step < 300; step++) {
        vs_train_params_zero_grad(P);
        VT_REQUIRE(vs_train_msd_forward(m, tp, &bt, step ? &l1 : &l0, &err) == VS_OK, "%s", err.msg);
        VT_REQUIRE(vs_train_msd_backward(m, tp, &err) == VS_OK, "%s", err.msg);
        vs_train_clip_grad(P, 0.5f);
        vs_train_adamw_step(P, tp, &o, 3e-3f);
        if (!step) first = l0.total;
        else last = l1.total;
    }
    printf("  %s: 300 AdamW steps on one batch: loss %.4f -> %.4f, top-1 %lld -> %lld of %lld\n",
           decoupled ? "decoupled" : "coupled  ", first, last, (long long)l0.top1, (long long)l1.top1,
           (long long)l1.counted);
    /* the soft cross-entropy cannot fall below the target distribution's entropy: halving the loss and
     * agreeing on nine top-1 tokens of ten (from chance) is the fit */
    VT_CHECK(last < 0.5 * first && l1.top1 * 10 >= l1.counted * 9, "training on one batch: loss %.4f -> %.4f, "
             "top-1 %lld of %lld", first, last, (long long)l1.top1, (long long)l1.counted);
    vs_train_msd_free(m);
    free(d);
}

#define FIXTURE "tests/reference/fixtures/train/msd_head.gguf"

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
    vs_msd_shape sh = {.width = fx_i(g, "msd.embedding_length"), .n_head = fx_i(g, "msd.attention.head_count"),
                       .n_head_kv = fx_i(g, "msd.attention.head_count_kv"), .n_ff = fx_i(g, "msd.feed_forward_length"),
                       .n_vocab = fx_i(g, "msd.vocab_size"), .n_ctx = 64,
                       .rms_eps = (float)fx_f(g, "msd.attention.layer_norm_rms_epsilon"),
                       .rope_base = (float)fx_f(g, "msd.rope.freq_base")};
    const int fB = fx_i(g, "ref.B"), fT = fx_i(g, "ref.T"), C = sh.width, fS = fT - 1;
    const size_t rows = (size_t)fB * fT;
    const float *lm_head = fx(g, "lm_head", (size_t)sh.n_vocab * C), *fimg = fx(g, "batch.is_image", rows);
    uint8_t img[256];
    VT_REQUIRE(rows <= sizeof(img), "fixture batch size");
    for (size_t i = 0; i < rows; i++) img[i] = fimg[i] != 0;
    vs_train_msd_batch bt = {.B = fB, .T = fT, .emb = fx(g, "batch.emb", rows * C), .is_image = img,
                             .feat = fx(g, "batch.feat", rows * C), .noise = fx(g, "batch.noise", rows * C),
                             .mask = fx(g, "batch.mask", rows)};
    for (int dec = 1; dec >= 0; dec--) {
        const char *tag = dec ? "dec" : "cpl";
        sh.decoupled = dec;
        vs_train_msd *m = vs_train_msd_new(&sh, lm_head, fB, fT, &err);
        VT_REQUIRE(m, "%s", err.msg);
        vs_train_params *P = vs_train_msd_params(m);
        char name[96];
        for (int t = 0; t < P->n_tensors; t++) {
            snprintf(name, sizeof(name), "w.%s", P->tensors[t].name);
            memcpy(P->data + P->tensors[t].offset, fx(g, name, P->tensors[t].numel), sizeof(float) * P->tensors[t].numel);
        }
        vs_train_msd_loss l;
        vs_train_params_zero_grad(P);
        VT_REQUIRE(vs_train_msd_forward(m, tp, &bt, &l, &err) == VS_OK, "%s", err.msg);
        VT_REQUIRE(vs_train_msd_backward(m, tp, &err) == VS_OK, "%s", err.msg);
        snprintf(name, sizeof(name), "ref.%s.pred", tag);
        const double dp = rel_diff(vs_train_msd_pred(m), fx(g, name, (size_t)fB * fS * C), (size_t)fB * fS * C);
        char key[64];
        snprintf(key, sizeof(key), "ref.%s.loss", tag);
        const double rl = fx_f(g, key);
        snprintf(key, sizeof(key), "ref.%s.feat", tag);
        const double rf = fx_f(g, key);
        snprintf(key, sizeof(key), "ref.%s.xent", tag);
        const double rx = fx_f(g, key);
        double worst = 0;
        for (int t = 0; t < P->n_tensors; t++) {
            snprintf(name, sizeof(name), "g.%s.%s", tag, P->tensors[t].name);
            const double e = rel_diff(P->grad + P->tensors[t].offset, fx(g, name, P->tensors[t].numel),
                                      P->tensors[t].numel);
            VT_CHECK(e <= 1e-4, "%s: gradient of %s relative error %.3e vs PyTorch", tag, P->tensors[t].name, e);
            worst = fmax(worst, e);
        }
        printf("  PyTorch parity (%s): outputs %.2e, loss %.8f vs %.8f (feat %.2e, xent %.2e rel), gradients %.2e\n",
               dec ? "decoupled" : "coupled", dp, l.total, rl, fabs(l.feat - rf) / rf, fabs(l.xent - rx) / rx, worst);
        VT_CHECK(dp <= 1e-4, "%s: head outputs relative error %.3e vs PyTorch", tag, dp);
        VT_CHECK(fabs(l.total - rl) <= 1e-5 * fabs(rl) && fabs(l.feat - rf) <= 1e-5 * fabs(rf) &&
                     fabs(l.xent - rx) <= 1e-5 * fabs(rx),
                 "%s: loss %.8f (feat %.8f, xent %.8f) vs PyTorch %.8f (%.8f, %.8f)", tag, l.total, l.feat, l.xent, rl,
                 rf, rx);
        vs_train_msd_free(m);
    }
    vs_gguf_close(g);
}

/* vs_train_msd_sequence and vs_train_msd_lm_head on an F16 target: rows, features (the batched forward
 * equals feeding the rows one at a time, as decoding hands them to the drafter), mask alignment, the F32
 * LM head (its logits equal the engine's), errors. */
static void test_sequence(void) {
    vs_error err = {0};
    vs_lm *target = make_target(VS_TYPE_F16, 64, 9, "msd_seq_target.gguf");
    enum { N = 16 };
    int32_t tok[N], img_row[N];
    uint8_t ans[N];
    float img[3 * E];
    for (int i = 0; i < 3 * E; i++) img[i] = vs_rng_normal(&g_rng);
    for (int p = 0; p < N; p++) {
        img_row[p] = p >= 3 && p < 6 ? p - 3 : -1;
        tok[p] = img_row[p] >= 0 ? -1 : (int32_t)vs_rng_below(&g_rng, V);
        ans[p] = p >= 10;
    }
    vs_msd_seq q;
    VT_REQUIRE(vs_train_msd_sequence(target, NULL, tok, img_row, ans, N, img, &q, &err) == VS_OK, "%s", err.msg);
    int bad = 0;
    float e[E];
    for (int p = 0; p < N; p++) {
        bad += q.is_image[p] != (img_row[p] >= 0);
        bad += q.mask[p] != (p + 2 < N && ans[p + 2] ? 1.0f : 0.0f);
        if (img_row[p] >= 0) bad += memcmp(q.emb + (size_t)p * E, img + (size_t)img_row[p] * E, sizeof(e)) != 0;
        else {
            vs_lm_embed(target, tok[p], e, NULL);
            bad += memcmp(q.emb + (size_t)p * E, e, sizeof(e)) != 0;
        }
    }
    VT_CHECK(bad == 0, "%d wrong rows, image flags or mask entries", bad);
    /* one row at a time through a cache, normalised by hand */
    vs_kv *kv = vs_lm_kv_new(target, 1, N, VS_TYPE_F32, &err);
    VT_REQUIRE(kv, "%s", err.msg);
    double worst = 0;
    for (int p = 0; p < N; p++) {
        vs_lm_row r = {.embd = q.emb + (size_t)p * E, .pos = p};
        float h[E], f[E];
        vs_lm_out out = {.hidden = h, .attn_layer = -1};
        VT_REQUIRE(vs_lm_forward(target, kv, NULL, &r, 1, &out, &err) == VS_OK, "%s", err.msg);
        vs_rmsnorm_ref(f, h, vs_lm_w(target)->output_norm, E, vs_lm_cfg(target)->rms_eps);
        worst = fmax(worst, vt_max_abs_diff(f, q.feat + (size_t)p * E, E));
    }
    vs_kv_free(kv);
    printf("  sequence: features of the batched forward vs one row at a time: max abs %.2e\n", worst);
    VT_CHECK(worst <= 1e-4, "features differ by %.3e", worst);
    /* the F32 LM head gives the engine's logits */
    float *W = vs_train_msd_lm_head(target, &err);
    VT_REQUIRE(W, "%s", err.msg);
    float lg[N * V], mine[N * V];
    VT_REQUIRE(vs_lm_head(target, NULL, q.feat, N, false, lg, &err) == VS_OK, "%s", err.msg);
    vs_train_linear_forward(NULL, mine, q.feat, W, NULL, N, E, V);
    const double dl = vt_max_abs_diff(lg, mine, (size_t)N * V);
    printf("  sequence: F32 copy of the F16 LM head vs the engine's logits: max abs %.2e\n", dl);
    VT_CHECK(dl <= 1e-4, "LM head logits differ by %.3e", dl);
    free(W);
    /* the feature cache: two shards (two records and one), read back */
    {
        const char *dir = st_tmp_path("msd_cache");
        char cmd[4200];
        snprintf(cmd, sizeof(cmd), "rm -rf %s && mkdir -p %s", dir, dir);
        VT_REQUIRE(system(cmd) == 0, "mkdir");
        int32_t tok2[N];
        for (int p = 0; p < N; p++) tok2[p] = (p * 7) % V;
        vs_msd_seq q2;
        VT_REQUIRE(vs_train_msd_sequence(target, NULL, tok2, NULL, ans, N, NULL, &q2, &err) == VS_OK, "%s", err.msg);
        const vs_msd_seq s0[2] = {q, q2}, s1[1] = {q2};
        const int32_t *t0[2] = {tok, tok2}, *t1[1] = {tok2};
        const uint64_t id0[2] = {10, 11}, id1[1] = {12};
        int64_t ns = -1;
        VT_CHECK(vs_msd_cache_count(dir, E, &ns, &err) == VS_OK && ns == 0, "empty cache: %lld shards", (long long)ns);
        VT_REQUIRE(vs_msd_cache_write_shard(dir, 0, E, s0, t0, id0, 2, &err) == VS_OK, "%s", err.msg);
        VT_REQUIRE(vs_msd_cache_write_shard(dir, 2, E, s1, t1, id1, 1, &err) == VS_OK, "%s", err.msg);
        VT_CHECK(vs_msd_cache_count(dir, E, &ns, &err) == VS_OK && ns == 1, "shards 0 and 2: prefix %lld", (long long)ns);
        VT_REQUIRE(vs_msd_cache_write_shard(dir, 1, E, s1, t1, id1, 1, &err) == VS_OK, "%s", err.msg);
        VT_CHECK(vs_msd_cache_count(dir, E, &ns, &err) == VS_OK && ns == 3, "three shards: %lld", (long long)ns);
        vs_msd_cache c;
        VT_REQUIRE(vs_msd_cache_load(dir, E, ns, &c, &err) == VS_OK, "%s", err.msg);
        VT_CHECK(c.n == 4 && c.rec[0].visual && !c.rec[1].visual && c.rec[1].sample == 11 && c.rec[3].sample == 12 &&
                     c.rec[0].n_img_rows == 3, "records: %lld", (long long)c.n);
        const vs_msd_seq *want[4] = {&q, &q2, &q2, &q2};
        double de = 0, df = 0;
        int bad2 = 0;
        for (int r = 0; r < 4 && r < c.n; r++) {
            vs_msd_seq g;
            VT_REQUIRE(vs_msd_cache_sequence(&c, r, target, &g, &err) == VS_OK, "%s", err.msg);
            bad2 += g.T != want[r]->T;
            for (int p = 0; p < N; p++) {
                bad2 += g.is_image[p] != want[r]->is_image[p] || g.mask[p] != want[r]->mask[p];
                for (int i = 0; i < E; i++) {
                    const size_t k = (size_t)p * E + i;
                    de = fmax(de, fabs(g.emb[k] - want[r]->emb[k]) / fmax(1.0, fabs(want[r]->emb[k])));
                    df = fmax(df, fabs(g.feat[k] - want[r]->feat[k]) / fmax(1.0, fabs(want[r]->feat[k])));
                }
                if (!g.is_image[p]) bad2 += memcmp(g.emb + (size_t)p * E, want[r]->emb + (size_t)p * E, sizeof(e)) != 0;
            }
            vs_msd_seq_free(&g);
        }
        printf("  cache: 4 records in 3 shards read back: rows and mask exact, image rows %.1e, features %.1e "
               "(F16)\n", de, df);
        VT_CHECK(bad2 == 0 && de <= 1e-3 && df <= 1e-3, "cache round trip: %d differences, emb %.2e, feat %.2e", bad2,
                 de, df);
        vs_msd_seq none;
        VT_CHECK(vs_msd_cache_sequence(&c, 4, target, &none, &err) == VS_ERR_INVALID, "record past the end accepted");
        vs_msd_cache_free(&c);
        /* a batch of a 16-row and a 10-row record: padded, noise within the released code's bound */
        vs_msd_seq q3;
        VT_REQUIRE(vs_train_msd_sequence(target, NULL, tok2, NULL, ans, 10, NULL, &q3, &err) == VS_OK, "%s", err.msg);
        const vs_msd_seq s3[1] = {q3};
        const uint64_t id3[1] = {13};
        VT_REQUIRE(vs_msd_cache_write_shard(dir, 3, E, s3, t1, id3, 1, &err) == VS_OK, "%s", err.msg);
        VT_REQUIRE(vs_msd_cache_count(dir, E, &ns, &err) == VS_OK && ns == 4, "four shards");
        VT_REQUIRE(vs_msd_cache_load(dir, E, ns, &c, &err) == VS_OK, "%s", err.msg);
        vs_msd_batch_buf bb;
        VT_REQUIRE(vs_msd_batch_buf_init(&bb, 2, N, E, &err) == VS_OK, "%s", err.msg);
        vs_train_msd_batch mb;
        vs_rng nr;
        vs_rng_seed(&nr, 1);
        const int64_t pick[2] = {4, 0};
        VT_REQUIRE(vs_msd_cache_fill_batch(&c, target, pick, 2, 0.2f, &nr, &bb, &mb, &err) == VS_OK, "%s", err.msg);
        int badb = mb.B != 2 || mb.T != N || !mb.noise;
        double nmax = 0;
        for (int p = 0; p < N; p++) {
            const bool real = p < 10;
            badb += mb.mask[p] != (real ? q3.mask[p] : 0.0f) || mb.is_image[p] != (real ? q3.is_image[p] : 0);
            badb += mb.mask[N + p] != q.mask[p] || mb.is_image[N + p] != q.is_image[p];
            for (int i = 0; i < E; i++) {
                const size_t k = (size_t)p * E + i;
                badb += !real && (mb.emb[k] != 0 || mb.feat[k] != 0 || mb.noise[k] != 0);
                if (real) nmax = fmax(nmax, fabs(mb.noise[k]) / (0.5 * 0.2 * 512 / 10));
                else nmax = fmax(nmax, fabs(mb.noise[(size_t)N * E + k]) / (0.5 * 0.2 * 512 / N));
            }
        }
        VT_CHECK(badb == 0 && nmax <= 1.0 && nmax > 0.9, "batch: %d wrong entries, noise %.3f of its bound", badb, nmax);
        vs_msd_batch_buf_free(&bb);
        VT_REQUIRE(vs_msd_batch_buf_init(&bb, 2, 12, E, &err) == VS_OK, "%s", err.msg);
        VT_CHECK(vs_msd_cache_fill_batch(&c, target, pick, 2, 0, NULL, &bb, &mb, &err) == VS_ERR_INVALID,
                 "a record longer than the buffers accepted");
        vs_msd_batch_buf_free(&bb);
        vs_msd_cache_free(&c);
        vs_msd_seq_free(&q3);
        /* a damaged shard is named */
        char path[4200];
        snprintf(path, sizeof(path), "%s/msd-00001.bin", dir);
        VT_REQUIRE(truncate(path, 40) == 0, "truncate");
        VT_CHECK(vs_msd_cache_count(dir, E, &ns, &err) == VS_OK && ns == 4, "count reads headers only: %lld",
                 (long long)ns);
        VT_CHECK(vs_msd_cache_load(dir, E, ns, &c, &err) == VS_ERR_FORMAT && strstr(err.msg, "msd-00001.bin"),
                 "truncated shard loaded: %s", err.msg);
        VT_REQUIRE(truncate(path, 10) == 0, "truncate");
        VT_CHECK(vs_msd_cache_count(dir, E, &ns, &err) == VS_ERR_FORMAT && strstr(err.msg, "msd-00001.bin"),
                 "shard without a header: %s", err.msg);
        VT_CHECK(vs_msd_cache_count(dir, E + 2, &ns, &err) == VS_ERR_FORMAT, "cache of another width accepted");
        vs_msd_seq_free(&q2);
        /* the fuzz corpus's seed (written by hand from the documented layout) parses */
        uint8_t *fb = NULL;
        size_t fs = 0;
        VT_REQUIRE(vs_read_file("fuzz/corpus/fuzz_msd_cache/two-records", &fb, &fs, &err) == VS_OK, "%s", err.msg);
        vs_msd_record fr[2];
        VT_CHECK(vs_msd_shard_parse(fb, fs, 8, fr) == 2 && fr[0].T == 6 && fr[0].n_img_rows == 2 && fr[0].visual &&
                     fr[1].sample == 11, "fuzz seed two-records does not parse as documented");
        VT_CHECK(vs_msd_shard_parse(fb, fs - 1, 8, NULL) == -1, "a shard one byte short parses");
        vs_free(fb);
    }
    vs_msd_seq_free(&q);
    /* errors */
    VT_CHECK(vs_train_msd_sequence(target, NULL, tok, img_row, ans, N, NULL, &q, &err) == VS_ERR_INVALID &&
                 strstr(err.msg, "image row"), "image rows without images: %s", err.msg);
    VT_CHECK(vs_train_msd_sequence(target, NULL, tok, NULL, ans, 1, NULL, &q, &err) == VS_ERR_INVALID,
             "one-row sequence accepted");
    VT_CHECK(vs_train_msd_sequence(target, NULL, tok, NULL, ans, 65, NULL, &q, &err) == VS_ERR_INVALID,
             "sequence longer than the target's context accepted");
    vs_lm_free(target);
}

/* DREAM's intermediate targets (vs_train_msd_sequence_mid) on a 4-layer target: the least-entropy layer
 * among 1 .. 2 as recomputed here with an attention observer, its input hidden state; a fixed layer;
 * layers out of range refused; the cache keeps them (F16), a batch has them only when every record does. */
typedef struct ent_acc {
    double sum[4];
    int n_head;
} ent_acc;

static void ent_cb(void *ctx, int layer, int row, int head, const float *p, int n_keys) {
    ent_acc *a = ctx;
    (void)row, (void)head;
    for (int k = 0; k < n_keys; k++)
        if (p[k] > 0) a->sum[layer] -= (double)p[k] * log((double)p[k]); /* single-threaded forward */
}

static void test_mid(void) {
    vs_error err = {0};
    vs_lm_random_opts ro;
    memset(&ro, 0, sizeof(ro));
    ro.n_embd = E, ro.n_layer = 4, ro.n_head = 2, ro.n_head_kv = 1, ro.n_ff = 2 * E, ro.n_ctx = 64, ro.n_vocab = V;
    ro.type = VS_TYPE_F32, ro.init_std = 0.3f, ro.seed = 31;
    VT_REQUIRE(vs_lm_write_random(&ro, st_tmp_path("msd_mid4.gguf"), &err) == VS_OK, "%s", err.msg);
    vs_lm *target = vs_lm_load(st_tmp_path("msd_mid4.gguf"), &err);
    VT_REQUIRE(target, "%s", err.msg);
    enum { N = 14 };
    int32_t tok[N];
    uint8_t ans[N];
    for (int p = 0; p < N; p++) tok[p] = (int32_t)vs_rng_below(&g_rng, V), ans[p] = p >= 8;
    /* the reference: every layer's entropy sum and input */
    ent_acc acc = {.n_head = 2};
    float *lh[3];
    int ids[3] = {0, 1, 2};
    for (int l = 0; l < 3; l++) lh[l] = malloc(sizeof(float) * N * E);
    float hid[N * E];
    vs_lm_row rows[N];
    memset(rows, 0, sizeof(rows));
    for (int p = 0; p < N; p++) rows[p].token = tok[p], rows[p].pos = p;
    vs_kv *kv = vs_lm_kv_new(target, 1, N, VS_TYPE_F32, &err);
    vs_lm_out o = {.hidden = hid, .n_layer_out = 3, .layer_ids = ids, .layer_hidden = lh, .attn_fn = ent_cb,
                   .attn_ctx = &acc, .attn_layer = -1};
    VT_REQUIRE(vs_lm_forward(target, kv, NULL, rows, N, &o, &err) == VS_OK, "%s", err.msg);
    vs_kv_free(kv);
    const int want = acc.sum[1] <= acc.sum[2] ? 1 : 2;
    vs_msd_seq q, f3;
    VT_REQUIRE(vs_train_msd_sequence_mid(target, NULL, tok, NULL, ans, N, NULL, VS_MSD_MID_AUTO, &q, &err) == VS_OK,
               "%s", err.msg);
    VT_CHECK(q.mid && q.mid_layer == want, "least-entropy layer %d, want %d (entropy sums %.4f %.4f %.4f %.4f)",
             q.mid_layer, want, acc.sum[0], acc.sum[1], acc.sum[2], acc.sum[3]);
    const double dm = q.mid ? vt_max_abs_diff(q.mid, lh[want - 1], (size_t)N * E) : 1;
    VT_REQUIRE(vs_train_msd_sequence_mid(target, NULL, tok, NULL, ans, N, NULL, 3, &f3, &err) == VS_OK, "%s",
               err.msg);
    const double d3 = f3.mid ? vt_max_abs_diff(f3.mid, lh[2], (size_t)N * E) : 1;
    VT_CHECK(f3.mid_layer == 3 && d3 == 0 && dm == 0, "fixed layer 3: %d, inputs differ by %g / %g", f3.mid_layer, d3,
             dm);
    printf("  intermediate targets: entropy sums per layer %.3f %.3f %.3f %.3f -> layer %d chosen; its input and a "
           "fixed layer's equal a reference forward (%g, %g)\n", acc.sum[0], acc.sum[1], acc.sum[2], acc.sum[3],
           q.mid_layer, dm, d3);
    vs_msd_seq bad;
    VT_CHECK(vs_train_msd_sequence_mid(target, NULL, tok, NULL, ans, N, NULL, 0, &bad, &err) == VS_ERR_INVALID &&
                 vs_train_msd_sequence_mid(target, NULL, tok, NULL, ans, N, NULL, 4, &bad, &err) == VS_ERR_INVALID,
             "layers 0 and 4 of a 4-layer target refused");
    /* the cache: one record with, one without */
    char dir[600];
    snprintf(dir, sizeof(dir), "%s", st_tmp_path("msd_mid_cache"));
    char mk[1300];
    snprintf(mk, sizeof(mk), "rm -rf %s && mkdir -p %s", dir, dir);
    VT_REQUIRE(system(mk) == 0, "mkdir");
    vs_msd_seq none;
    VT_REQUIRE(vs_train_msd_sequence(target, NULL, tok, NULL, ans, N, NULL, &none, &err) == VS_OK, "%s", err.msg);
    vs_msd_seq both[2] = {q, none};
    const int32_t *tk[2] = {tok, tok};
    const uint64_t ids2[2] = {0, 1};
    VT_REQUIRE(vs_msd_cache_write_shard(dir, 0, E, both, tk, ids2, 2, &err) == VS_OK, "%s", err.msg);
    vs_msd_cache c;
    VT_REQUIRE(vs_msd_cache_load(dir, E, 1, &c, &err) == VS_OK && c.n == 2, "%s", err.msg);
    VT_CHECK(c.rec[0].mid && c.rec[0].mid_layer == q.mid_layer && !c.rec[1].mid && c.rec[1].mid_layer == -1,
             "records: mid %p layer %d, %p %d", (void *)c.rec[0].mid, c.rec[0].mid_layer, (void *)c.rec[1].mid,
             c.rec[1].mid_layer);
    vs_msd_seq back;
    VT_REQUIRE(vs_msd_cache_sequence(&c, 0, target, &back, &err) == VS_OK, "%s", err.msg);
    double worst = 0, mx = 0;
    for (int i = 0; i < N * E; i++) worst = fmax(worst, fabs(back.mid[i] - q.mid[i])), mx = fmax(mx, fabs(q.mid[i]));
    VT_CHECK(back.mid_layer == q.mid_layer && worst <= 1e-3 * mx, "mid read back: %g of %g", worst, mx);
    vs_msd_batch_buf bb;
    VT_REQUIRE(vs_msd_batch_buf_init(&bb, 2, N, E, &err) == VS_OK, "%s", err.msg);
    vs_train_msd_batch tb;
    const int64_t i0[1] = {0}, i01[2] = {0, 1};
    VT_REQUIRE(vs_msd_cache_fill_batch(&c, target, i0, 1, 0, NULL, &bb, &tb, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(tb.mid != NULL, "a batch of records with intermediate targets has them");
    VT_REQUIRE(vs_msd_cache_fill_batch(&c, target, i01, 2, 0, NULL, &bb, &tb, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(tb.mid == NULL, "a batch with a record without them has none");
    vs_msd_batch_buf_free(&bb);
    vs_msd_seq_free(&back);
    vs_msd_cache_free(&c);
    vs_msd_seq_free(&q), vs_msd_seq_free(&f3), vs_msd_seq_free(&none);
    for (int l = 0; l < 3; l++) free(lh[l]);
    vs_lm_free(target);
}

static void test_bad_input(vs_lm *target, const float *lm_head) {
    vs_error err = {0};
    data *d = malloc(sizeof(data));
    make_data(target, d);
    vs_msd_shape sh = vs_msd_shape_for(target, 2, 1, 48, 64, true);
    vs_train_msd *m = vs_train_msd_new(&sh, lm_head, 1, T, &err);
    VT_REQUIRE(m, "%s", err.msg);
    VT_CHECK(vs_train_msd_backward(m, NULL, &err) == VS_ERR_INVALID, "backward before forward accepted");
    vs_train_msd_batch bt = batch_of(d, false); /* B = 2 > max_B = 1 */
    VT_CHECK(vs_train_msd_forward(m, NULL, &bt, NULL, &err) == VS_ERR_INVALID && strstr(err.msg, "batch"),
             "oversized batch: %s", err.msg);
    bt.B = 1;
    bt.feat = NULL;
    VT_CHECK(vs_train_msd_forward(m, NULL, &bt, NULL, &err) == VS_ERR_INVALID, "batch without features accepted");
    vs_train_msd_free(m);
    sh.n_head = 3; /* 32 % 3 */
    VT_CHECK(vs_train_msd_new(&sh, lm_head, 1, T, &err) == NULL && err.code == VS_ERR_INVALID, "bad shape accepted");
    sh.n_head = 2;
    VT_CHECK(vs_train_msd_new(&sh, lm_head, 1, 100, &err) == NULL && err.code == VS_ERR_INVALID,
             "batch longer than the head's context accepted");
    VT_CHECK(vs_train_msd_new(&sh, NULL, 1, T, &err) == NULL && err.code == VS_ERR_INVALID, "no LM head accepted");
    free(d);
}

int main(void) {
    vs_rng_seed(&g_rng, 2024);
    vs_error err = {0};
    vs_lm *target = make_target(VS_TYPE_F32, 128, 5, "msd_train_target.gguf");
    const vs_lm_mat *out = &vs_lm_w(target)->output;
    VT_REQUIRE(out->type == VS_TYPE_F32 && out->n_out == V && out->n_in == E, "F32 LM head");
    const float *lm_head = out->data;
    vs_threadpool *tp = vs_threadpool_new(2, &err);
    VT_REQUIRE(tp, "%s", err.msg);
    test_fixture(tp);
    test_head(target, lm_head, true, tp);
    test_head(target, lm_head, false, NULL);
    test_bad_input(target, lm_head);
    test_sequence();
    test_mid();
    vs_threadpool_free(tp);
    vs_lm_free(target);
    return vt_finish("train_msd");
}
