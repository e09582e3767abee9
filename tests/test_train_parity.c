/* train_parity: the trainer against PyTorch (llm.c's debug-state idea), and the exported GGUF files
 * against vlmspec's inference engine.
 *
 * tests/reference/train_ref.py builds the same tiny VLM (2-block ViT, projector, 2-layer LLaMA LM
 * with GQA) from the same initial weights and batch in float64 and wrote
 * tests/reference/fixtures/train/tiny_vlm.gguf. This test loads the weights and the batch, then:
 *   1. forward: logits within relative 1e-4 (max |c - ref| / max |ref|), loss within 1e-5;
 *   2. backward: every parameter's gradient within relative 1e-4 (per tensor, same measure);
 *      gradients that are zero in exact arithmetic (listed in the fixture: the ViT key bias) must
 *      be below 1e-6 of the largest gradient;
 *   3. 10 AdamW steps with the fixture's schedule, clipping and weight decay: each step's loss
 *      within 1e-5, the gradient norms within relative 1e-4, the final weights within relative 1e-4;
 *   4. export: the model written as LM + mmproj GGUF (F32) and run by vs_lm / vs_vision gives the
 *      training forward's logits within 1e-4 (max abs difference relative to max |logit|). */
#include <string.h>

#include "gguf.h"
#include "kv.h"
#include "lm.h"
#include "testutil.h"
#include "train_model.h"
#include "vision.h"

#define FIXTURE "tests/reference/fixtures/train/tiny_vlm.gguf"
/* F32 products: logits, gradients, the 10-step trajectory and the final weights within 1e-4 relative,
 * losses within 1e-5. With amx-bf16x3 (about 2^-15 relative error per product term) one step keeps the
 * same kind of bound at 3e-4 (logits 2e-5, gradients 1e-4 seen), but ten AdamW steps at lr 1e-2 on this
 * tiny model amplify it (final weights 8e-3 seen): the trajectory gets 2e-3 on losses and 1e-2 on
 * gradient norms, the final weights 3e-2. Dropping one of the three products breaks the single-step
 * bounds by 15-20x (logits 4.9e-3, gradients 6.4e-3), so they still catch a wrong product. */
static double REL_TOL = 1e-4, LOSS_TOL = 1e-5, TRAJ_LOSS_TOL = 1e-5, TRAJ_NORM_TOL = 1e-4, FINAL_TOL = 1e-4;

static int get_int(const vs_gguf *g, const char *key) {
    int64_t v = 0;
    vs_error err = {0};
    VT_REQUIRE(vs_gguf_require_int(g, key, &v, &err) == VS_OK, "%s", err.msg);
    return (int)v;
}

static double get_f(const vs_gguf *g, const char *key) {
    double v = 0;
    vs_error err = {0};
    VT_REQUIRE(vs_gguf_require_float(g, key, &v, &err) == VS_OK, "%s", err.msg);
    return v;
}

/* A numeric array key copied out (elements converted to the requested type). */
static void *get_arr(const vs_gguf *g, const char *key, vs_gguf_type want, uint64_t n) {
    int64_t ki = vs_gguf_find_key(g, key);
    VT_REQUIRE(ki >= 0 && vs_gguf_kv_type(g, ki) == VS_GGUF_ARRAY && vs_gguf_arr_type(g, ki) == want &&
                   vs_gguf_arr_len(g, ki) == n,
               "fixture key %s: expected an array of %llu", key, (unsigned long long)n);
    size_t es = want == VS_GGUF_F64 ? 8 : 4;
    void *out = vs_malloc(es * n);
    VT_REQUIRE(out, "alloc");
    memcpy(out, vs_gguf_arr_data(g, ki), es * n);
    return out;
}

/* F32 tensor of the fixture with exactly numel values. */
static const float *get_tensor(const vs_gguf *g, const char *name, size_t numel) {
    const vs_gguf_tensor *t = vs_gguf_find_tensor(g, name);
    VT_REQUIRE(t && t->type == 0 && t->nbytes == numel * sizeof(float), "fixture tensor %s: expected %zu F32",
               name, numel);
    return t->data;
}

static double rel_err(const float *a, const float *ref, size_t n, double *max_ref_out) {
    double md = 0, mr = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]);
        if (d > md || d != d) md = d != d ? INFINITY : d;
        if (fabs(ref[i]) > mr) mr = fabs(ref[i]);
    }
    if (max_ref_out) *max_ref_out = mr;
    return md / (mr > 0 ? mr : 1e-30);
}

static bool is_zero_grad(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
        if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == 0)) return true;
    return false;
}

/* Compares every tensor of buf (params data or grad) with the fixture's "<prefix>.<name>". */
static void compare_tensors(const vs_gguf *g, const vs_train_params *p, const float *buf, char prefix,
                            const char *what, const char *zero_list, bool verbose) {
    double gmax = 0;
    for (int i = 0; i < p->n_tensors; i++) {
        char nm[64];
        snprintf(nm, sizeof(nm), "%c.%s", prefix, p->tensors[i].name);
        double mr;
        rel_err(buf + p->tensors[i].offset, get_tensor(g, nm, p->tensors[i].numel), p->tensors[i].numel, &mr);
        if (mr > gmax) gmax = mr;
    }
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < p->n_tensors; i++) {
        const vs_train_tensor *t = &p->tensors[i];
        char nm[64];
        snprintf(nm, sizeof(nm), "%c.%s", prefix, t->name);
        const float *ref = get_tensor(g, nm, t->numel), *a = buf + t->offset;
        double mr, e = rel_err(a, ref, t->numel, &mr);
        if (zero_list && is_zero_grad(zero_list, t->name)) {
            double ma = 0;
            for (size_t j = 0; j < t->numel; j++) ma = fmax(ma, fabs(a[j]));
            if (verbose)
                printf("  %-20s |grad| %.2e (zero in exact arithmetic; largest gradient %.3g)\n", t->name, ma,
                       gmax);
            VT_CHECK(ma <= 1e-6 * gmax, "%s %s: %g should be ~0", what, t->name, ma);
            continue;
        }
        if (verbose) printf("  %-20s rel err %.2e  (max |ref| %.3g)\n", t->name, e, mr);
        VT_CHECK(e <= REL_TOL, "%s %s: relative error %.3e > %g", what, t->name, e, REL_TOL);
        if (e > worst) worst = e, worst_name = t->name;
    }
    printf("%s: worst relative error %.2e (%s)\n", what, worst, worst_name);
}

/* ---------------------------------------------------------------------------------------------- */
/* export parity: the inference engine on the exported files */

static void test_export(vs_train_vlm *m, const vs_train_batch *b, vs_threadpool *tp) {
    char lm_path[512], mm_path[512];
    snprintf(lm_path, sizeof(lm_path), "%s/train_lm.gguf", vt_tmpdir());
    snprintf(mm_path, sizeof(mm_path), "%s/train_mmproj.gguf", vt_tmpdir());
    vs_error err = {0};
    vs_train_export_opts o = {.type = VS_TYPE_F32, .name = "train-parity"};
    VT_REQUIRE(vs_train_vlm_export(m, lm_path, mm_path, &o, &err) == VS_OK, "export: %s", err.msg);
    float loss;
    VT_REQUIRE(vs_train_vlm_forward(m, tp, b, &loss, &err) == VS_OK, "%s", err.msg);
    const vs_train_vlm_config *c = vs_train_vlm_cfg(m);
    const float *ref = vs_train_vlm_logits(m);

    vs_mmproj *mp = vs_mmproj_open(mm_path, &err);
    VT_REQUIRE(mp, "mmproj: %s", err.msg);
    vs_lm *lm = vs_lm_load(lm_path, &err);
    VT_REQUIRE(lm, "lm: %s", err.msg);
    int NP = (c->image_size / c->patch_size) * (c->image_size / c->patch_size);
    float *img_rows = vs_malloc(sizeof(float) * (size_t)b->n_images * NP * c->width);
    VT_REQUIRE(img_rows, "alloc");
    for (int i = 0; i < b->n_images; i++) {
        vs_vision_features f;
        const float *px = b->pixels + (size_t)i * 3 * c->image_size * c->image_size;
        VT_REQUIRE(vs_vision_encode(vs_mmproj_tower(mp), tp, px, NULL, &f, &err) == VS_OK, "%s", err.msg);
        VT_REQUIRE(vs_vision_project(vs_mmproj_projector(mp), tp, f.data, NP,
                                     img_rows + (size_t)i * NP * c->width, &err) == VS_OK,
                   "%s", err.msg);
        vs_vision_features_free(&f);
    }
    vs_kv *kv = vs_lm_kv_new(lm, b->B, b->T, VS_TYPE_F32, &err);
    VT_REQUIRE(kv, "kv: %s", err.msg);
    int N = b->B * b->T;
    vs_lm_row *rows = vs_calloc(N, sizeof(vs_lm_row));
    float *logits = vs_malloc(sizeof(float) * N * c->vocab);
    VT_REQUIRE(rows && logits, "alloc");
    for (int s = 0; s < b->B; s++)
        for (int t = 0; t < b->T; t++) {
            vs_lm_row *r = &rows[s * b->T + t];
            int i = s * b->T + t;
            if (b->img_row[i] >= 0) r->embd = img_rows + (size_t)b->img_row[i] * c->width;
            else r->token = b->tokens[i];
            r->seq = s;
            r->pos = t;
            r->want_logits = true;
        }
    vs_lm_out out = {.logits = logits};
    VT_REQUIRE(vs_lm_forward(lm, kv, tp, rows, N, &out, &err) == VS_OK, "lm forward: %s", err.msg);
    double mr, e = rel_err(logits, ref, (size_t)N * c->vocab, &mr);
    printf("export parity (vs_vision + vs_lm on the exported F32 GGUF vs the training forward): "
           "max |diff| / max |logit| = %.2e (max |logit| %.3g)\n", e, mr);
    VT_CHECK(e <= 1e-4, "exported model's logits differ: %.3e", e);

    /* the F16 export loads too and stays close (half-precision weights) */
    char lm16[512], mm16[512];
    snprintf(lm16, sizeof(lm16), "%s/train_lm_f16.gguf", vt_tmpdir());
    snprintf(mm16, sizeof(mm16), "%s/train_mmproj_f16.gguf", vt_tmpdir());
    o.type = VS_TYPE_F16;
    VT_CHECK(vs_train_vlm_export(m, lm16, mm16, &o, &err) == VS_OK, "F16 export: %s", err.msg);
    vs_lm *l16 = vs_lm_load(lm16, &err);
    VT_CHECK(l16 != NULL, "F16 lm: %s", err.msg);
    if (l16)
        VT_CHECK(vs_lm_cfg(l16)->wtype == VS_TYPE_F16, "F16 export has matrix type %d",
                 vs_lm_cfg(l16)->wtype);
    vs_lm_free(l16);
    vs_mmproj *m16 = vs_mmproj_open(mm16, &err);
    VT_CHECK(m16 != NULL, "F16 mmproj: %s", err.msg);
    vs_mmproj_free(m16);

    /* tokenizer keys are copied from a tokenizer file of the same vocabulary, refused otherwise */
    char tokp[512], lmt[512];
    snprintf(tokp, sizeof(tokp), "%s/tok.gguf", vt_tmpdir());
    snprintf(lmt, sizeof(lmt), "%s/train_lm_tok.gguf", vt_tmpdir());
    for (int pass = 0; pass < 2; pass++) {
        vs_lm_random_opts ro = {.n_embd = 16,
                                .n_layer = 1,
                                .n_head = 2,
                                .n_head_kv = 2,
                                .n_ff = 16,
                                .n_ctx = 16,
                                .n_vocab = pass ? c->vocab + 1 : c->vocab,
                                .type = VS_TYPE_F32,
                                .seed = 1};
        VT_REQUIRE(vs_lm_write_random(&ro, tokp, &err) == VS_OK, "%s", err.msg);
        vs_gguf *tg = vs_gguf_open(tokp, &err);
        VT_REQUIRE(tg, "%s", err.msg);
        o.type = VS_TYPE_F32;
        o.tokenizer = tg;
        vs_status st = vs_train_vlm_export(m, lmt, NULL, &o, &err);
        if (pass == 0) {
            VT_CHECK(st == VS_OK, "export with tokenizer: %s", err.msg);
            vs_gguf *eg = vs_gguf_open(lmt, &err);
            VT_CHECK(eg && vs_gguf_find_key(eg, "tokenizer.ggml.tokens") >= 0 &&
                         vs_gguf_arr_len(eg, vs_gguf_find_key(eg, "tokenizer.ggml.tokens")) ==
                             (uint64_t)c->vocab,
                     "exported LM lacks the tokenizer");
            vs_gguf_close(eg);
            vs_lm *lt = vs_lm_load(lmt, &err);
            VT_CHECK(lt != NULL, "LM with tokenizer does not load: %s", err.msg);
            vs_lm_free(lt);
        } else {
            VT_CHECK(st == VS_ERR_INVALID, "a tokenizer of another vocabulary size was accepted");
            printf("tokenizer mismatch: %s\n", err.msg);
        }
        o.tokenizer = NULL;
        vs_gguf_close(tg);
    }

    vs_free(rows), vs_free(logits), vs_free(img_rows);
    vs_kv_free(kv);
    vs_lm_free(lm);
    vs_mmproj_free(mp);
}

/* argv[1]: the training products to check (vs_train_set_gemm), default the build's default; argv[2]:
 * the attention path (vs_train_set_attention), default auto; exit 77 (skipped) when this CPU or build
 * lacks them. The tolerances are the same for every product. */
int main(int argc, char **argv) {
    if (argc > 1) {
        if (!vs_train_set_gemm(argv[1]) || (argc > 2 && !vs_train_set_attention(argv[2]))) {
            printf("train_parity: products '%s' (attention %s) not available on this CPU or build: skipped\n",
                   argv[1], argc > 2 ? argv[2] : "auto");
            return 77;
        }
        printf("train_parity: products %s, attention %s\n", vs_train_sgemm_backend(),
               vs_train_attention_backend());
        if (!strcmp(argv[1], "amx-bf16x3"))
            REL_TOL = 3e-4, LOSS_TOL = 3e-5, TRAJ_LOSS_TOL = 2e-3, TRAJ_NORM_TOL = 1e-2, FINAL_TOL = 3e-2;
    }
    vs_error err = {0};
    vs_gguf *g = vs_gguf_open(FIXTURE, &err);
    VT_REQUIRE(g, "fixture: %s (regenerate with /usr/bin/python3 tests/reference/train_ref.py)", err.msg);
    vs_threadpool *tp = vs_threadpool_new(2, &err);
    VT_REQUIRE(tp, "%s", err.msg);

    vs_train_vlm_config c = {0};
    c.image_size = get_int(g, "vlm.image_size"), c.patch_size = get_int(g, "vlm.patch_size");
    c.v_width = get_int(g, "vlm.v_width"), c.v_ffn = get_int(g, "vlm.v_ffn");
    c.v_heads = get_int(g, "vlm.v_heads"), c.v_blocks = get_int(g, "vlm.v_blocks");
    c.v_eps = (float)get_f(g, "vlm.v_eps");
    c.v_post_ln = vs_gguf_find_key(g, "vlm.v_post_ln") >= 0 && get_int(g, "vlm.v_post_ln") != 0;
    c.vocab = get_int(g, "vlm.vocab"), c.width = get_int(g, "vlm.width"),
    c.n_layers = get_int(g, "vlm.n_layers");
    c.n_heads = get_int(g, "vlm.n_heads"), c.n_kv_heads = get_int(g, "vlm.n_kv_heads"),
    c.ffn = get_int(g, "vlm.ffn");
    c.max_seq = get_int(g, "vlm.max_seq");
    c.rms_eps = (float)get_f(g, "vlm.rms_eps"), c.rope_base = (float)get_f(g, "vlm.rope_base");
    VT_REQUIRE(vs_gguf_get_f32_array(g, "vlm.image_mean", c.image_mean, 3) == 3, "image_mean");
    VT_REQUIRE(vs_gguf_get_f32_array(g, "vlm.image_std", c.image_std, 3) == 3, "image_std");

    int B = get_int(g, "batch.B"), T = get_int(g, "batch.T"), NI = get_int(g, "batch.n_images"), N = B * T;
    vs_train_vlm *m = vs_train_vlm_new(&c, B, T, NI, &err);
    VT_REQUIRE(m, "%s", err.msg);
    vs_train_params *p = vs_train_vlm_params(m);
    for (int i = 0; i < p->n_tensors; i++) {
        char nm[64];
        snprintf(nm, sizeof(nm), "w.%s", p->tensors[i].name);
        memcpy(p->data + p->tensors[i].offset, get_tensor(g, nm, p->tensors[i].numel),
               p->tensors[i].numel * sizeof(float));
    }
    int32_t *tokens = get_arr(g, "batch.tokens", VS_GGUF_I32, N);
    int32_t *img_row = get_arr(g, "batch.img_row", VS_GGUF_I32, N);
    int32_t *targets = get_arr(g, "batch.targets", VS_GGUF_I32, N);
    float *mask = get_arr(g, "batch.loss_mask", VS_GGUF_F32, N);
    int S = c.image_size;
    vs_train_batch b = {.B = B, .T = T, .n_images = NI,
                        .pixels = get_tensor(g, "batch.pixels", (size_t)NI * 3 * S * S),
                        .tokens = tokens, .img_row = img_row, .targets = targets, .loss_mask = mask};
    vs_gguf_str zs;
    VT_REQUIRE(vs_gguf_get_str(g, "ref.zero_grad", &zs) == 1, "ref.zero_grad");
    char zero_list[256];
    snprintf(zero_list, sizeof(zero_list), "%.*s", (int)zs.len, zs.ptr);

    /* 1. forward */
    float loss;
    VT_REQUIRE(vs_train_vlm_forward(m, tp, &b, &loss, &err) == VS_OK, "%s", err.msg);
    double ref_loss = get_f(g, "ref.loss"), mr;
    double le = rel_err(vs_train_vlm_logits(m), get_tensor(g, "ref.logits", (size_t)N * c.vocab),
                        (size_t)N * c.vocab, &mr);
    printf("logits: relative error %.2e (max |logit| %.3g); loss %.7f vs reference %.7f (diff %.1e)\n", le,
           mr, loss, ref_loss, fabs(loss - ref_loss));
    VT_CHECK(le <= REL_TOL, "logits relative error %.3e", le);
    VT_CHECK(fabs(loss - ref_loss) <= LOSS_TOL, "loss %.7f vs %.7f", loss, ref_loss);

    /* 2. backward */
    vs_train_params_zero_grad(p);
    VT_REQUIRE(vs_train_vlm_backward(m, tp, &err) == VS_OK, "%s", err.msg);
    printf("gradients:\n");
    compare_tensors(g, p, p->grad, 'g', "gradients", zero_list, true);

    /* 3. ten AdamW steps */
    int n_steps = get_int(g, "ref.n_steps");
    double *ref_losses = get_arr(g, "ref.adam_losses", VS_GGUF_F64, n_steps);
    double *ref_norms = get_arr(g, "ref.grad_norms", VS_GGUF_F64, n_steps);
    vs_adamw opt = {(float)get_f(g, "ref.beta1"), (float)get_f(g, "ref.beta2"), (float)get_f(g, "ref.eps"),
                    (float)get_f(g, "ref.weight_decay")};
    vs_lr_schedule sched = {(float)get_f(g, "ref.lr_max"), (float)get_f(g, "ref.lr_min"),
                            (int64_t)get_f(g, "ref.warmup"), (int64_t)get_f(g, "ref.total")};
    float clip = (float)get_f(g, "ref.clip");
    printf("AdamW (clip %.3f):\n", clip);
    for (int s = 0; s < n_steps; s++) {
        vs_train_params_zero_grad(p);
        VT_REQUIRE(vs_train_vlm_forward(m, tp, &b, &loss, &err) == VS_OK, "%s", err.msg);
        VT_REQUIRE(vs_train_vlm_backward(m, tp, &err) == VS_OK, "%s", err.msg);
        double norm = vs_train_clip_grad(p, clip);
        float lr = vs_train_lr(&sched, s);
        vs_train_adamw_step(p, tp, &opt, lr);
        printf("  step %d lr %.5f loss %.7f (ref %.7f, diff %.1e) grad norm %.5f (ref %.5f)\n", s, lr, loss,
               ref_losses[s], fabs(loss - ref_losses[s]), norm, ref_norms[s]);
        VT_CHECK(fabs(loss - ref_losses[s]) <= TRAJ_LOSS_TOL, "step %d loss %.7f vs %.7f", s, loss, ref_losses[s]);
        VT_CHECK(fabs(norm - ref_norms[s]) <= TRAJ_NORM_TOL * ref_norms[s], "step %d grad norm %.6f vs %.6f", s,
                 norm, ref_norms[s]);
    }
    /* final weights: the zero-gradient key bias is steered by rounding noise through Adam's
     * normalisation (harmlessly: softmax ignores it), so it is not compared */
    {
        vs_train_params q = *p;
        double worst = 0;
        for (int i = 0; i < q.n_tensors; i++) {
            const vs_train_tensor *t = &q.tensors[i];
            if (is_zero_grad(zero_list, t->name)) continue;
            char nm[64];
            snprintf(nm, sizeof(nm), "f.%s", t->name);
            double e = rel_err(p->data + t->offset, get_tensor(g, nm, t->numel), t->numel, NULL);
            VT_CHECK(e <= FINAL_TOL, "final weights %s: relative error %.3e", t->name, e);
            worst = fmax(worst, e);
        }
        printf("final weights after %d steps: worst relative error %.2e\n", n_steps, worst);
    }

    /* 4. export parity, from the fixture's initial weights */
    for (int i = 0; i < p->n_tensors; i++) {
        char nm[64];
        snprintf(nm, sizeof(nm), "w.%s", p->tensors[i].name);
        memcpy(p->data + p->tensors[i].offset, get_tensor(g, nm, p->tensors[i].numel),
               p->tensors[i].numel * sizeof(float));
    }
    test_export(m, &b, tp);

    vs_free(tokens), vs_free(img_row), vs_free(targets), vs_free(mask), vs_free(ref_losses),
        vs_free(ref_norms);
    vs_train_vlm_free(m);
    vs_threadpool_free(tp);
    vs_gguf_close(g);
    return vt_finish("train_parity");
}
