/* train_loop: the resumable training run (src/train/train_loop.h), in process.
 *   - exact resume: a run of 2N steps stopped after N (chunk limit, with a checkpoint) and resumed in a new
 *     loop from its directory ends with parameters, AdamW moments and loss curve bit-identical to an
 *     uninterrupted run of 2N steps (the vision tower frozen for the first steps, then warming up, and
 *     gradient accumulation, so every piece of the schedule crosses the stop);
 *   - a damaged newest checkpoint falls back to ckpt-prev; a checkpoint of another model is refused;
 *   - run.json holding other settings is refused with both settings in the message. */
#include <stdio.h>
#include <string.h>

#include "testutil.h"
#include "train_loop.h"
#include "world_tiny.h"

#define STEPS 6

typedef struct fixture {
    char dir[512], tok[512];
    vs_tokenizer *tok_obj;
    vs_world_dataset *train;
    vs_train_vlm_config cfg;
    vs_threadpool *tp;
} fixture;

static vs_train_data *make_data(const fixture *f) {
    vs_error err = {0};
    vs_train_data_opts o = {.seq_len = 4096,
                            .batch = 2,
                            .image_rows = 16,
                            .preproc = wt_preproc(&f->cfg),
                            .bucket = 1,
                            .seed = 3};
    const vs_world_dataset *sets[1] = {f->train};
    vs_train_data *d = vs_train_data_new(sets, 1, f->tok_obj, &o, &err);
    VT_REQUIRE(d, "%s", err.msg);
    return d;
}

static void loop_init(vs_train_loop *L, const fixture *f, const char *dir) {
    vs_error err = {0};
    memset(L, 0, sizeof(*L));
    L->cmd = "test", L->label = "test", L->title = "test";
    L->tp = f->tp;
    L->total = STEPS;
    L->o = (vs_train_sched){.accum = 2, .threads = 2, .ckpt_every = 1000, .lr = 3e-3, .lr_min = 3e-4,
                            .warmup = 2, .clip = 1.0, .beta2 = 0.95, .freeze_vision = 2, .vision_warmup = 2,
                            .vision_lr = 0.5, .quiet = true};
    VT_REQUIRE(vs_train_loop_dirs(L, dir, &err) == VS_OK, "%s", err.msg);
}

/* A fresh run in dir: settings written, model initialised from seed 5. */
static void start_fresh(vs_train_loop *L, const fixture *f, const char *dir) {
    vs_error err = {0};
    loop_init(L, f, dir);
    VT_REQUIRE(vs_train_write_text(L->runjson, "{\"test\":1}", &err) == VS_OK, "%s", err.msg);
    L->data = make_data(f);
    int mb, mt, mi;
    vs_train_data_capacity(L->data, &mb, &mt, &mi);
    VT_REQUIRE((L->m = vs_train_vlm_new(&f->cfg, mb, mt, mi, &err)), "%s", err.msg);
    vs_train_vlm_init(L->m, 5);
    vs_train_loop_fresh_state(L);
}

static void resume(vs_train_loop *L, const fixture *f, const char *dir, const char *settings, vs_status want) {
    vs_error err = {0};
    loop_init(L, f, dir);
    VT_REQUIRE(vs_train_loop_has_ckpt(L), "a checkpoint in %s", dir);
    vs_status st = vs_train_loop_check_settings(L, settings, &err);
    VT_CHECK(st == want, "settings check: %s (%s)", vs_status_name(st), err.msg);
    if (st) return;
    L->data = make_data(f);
    int mb, mt, mi;
    vs_train_data_capacity(L->data, &mb, &mt, &mi);
    VT_REQUIRE(vs_train_loop_load(L, &f->cfg, "the test says", mb, mt, mi, &err) == VS_OK, "%s", err.msg);
    VT_REQUIRE(vs_train_loop_restore(L, &err) == VS_OK, "%s", err.msg);
}

static void run(vs_train_loop *L) {
    vs_error err = {0};
    VT_REQUIRE(vs_train_loop_run(L, &err) == VS_OK, "%s", err.msg);
}

static bool same_buf(const float *a, const float *b, size_t n) { return !memcmp(a, b, n * sizeof(float)); }

int main(void) {
    fixture f;
    memset(&f, 0, sizeof(f));
    vs_error err = {0};
    wt_make("world", 3, 0, 320, f.dir, f.tok, sizeof(f.dir));
    VT_REQUIRE((f.train = vs_world_load(f.dir, "train", VS_WORLD_ALL_SUITES, &err)), "%s", err.msg);
    vs_gguf *g = vs_gguf_open(f.tok, &err);
    VT_REQUIRE(g && (f.tok_obj = vs_tokenizer_from_gguf(g, &err)), "%s", err.msg);
    f.cfg = wt_config(vs_tokenizer_n_vocab(f.tok_obj));
    VT_REQUIRE((f.tp = vs_threadpool_new(2, &err)), "%s", err.msg);
    char dir_a[700], dir_b[700];
    snprintf(dir_a, sizeof(dir_a), "%s/run-a", vt_tmpdir());
    snprintf(dir_b, sizeof(dir_b), "%s/run-b", vt_tmpdir());

    /* A: uninterrupted */
    vs_train_loop A;
    start_fresh(&A, &f, dir_a);
    run(&A);
    VT_CHECK(A.st.step == STEPS && A.curve.n == STEPS, "A ran %lld steps", (long long)A.st.step);
    /* B: stopped after half, resumed in a new loop */
    vs_train_loop B;
    start_fresh(&B, &f, dir_b);
    B.o.chunk_steps = STEPS / 2;
    run(&B);
    VT_CHECK(B.st.step == STEPS / 2, "B stopped at %lld", (long long)B.st.step);
    vs_train_loop_free(&B);
    resume(&B, &f, dir_b, "{\"test\":1}", VS_OK);
    VT_CHECK(B.st.step == STEPS / 2 && B.curve.n == STEPS / 2, "B resumed at step %lld with %lld curve points",
             (long long)B.st.step, (long long)B.curve.n);
    run(&B);
    const vs_train_params *pa = vs_train_vlm_params(A.m), *pb = vs_train_vlm_params(B.m);
    VT_CHECK(pa->n == pb->n && same_buf(pa->data, pb->data, pa->n), "parameters bit-identical after resume");
    VT_CHECK(same_buf(pa->m, pb->m, pa->n) && same_buf(pa->v, pb->v, pa->n) && pa->t == pb->t,
             "AdamW moments bit-identical after resume");
    bool curve_same = A.curve.n == B.curve.n;
    for (int64_t i = 0; curve_same && i < A.curve.n; i++)
        curve_same = A.curve.pt[i].step == B.curve.pt[i].step && A.curve.pt[i].loss == B.curve.pt[i].loss &&
                     A.curve.pt[i].lr == B.curve.pt[i].lr;
    VT_CHECK(curve_same, "loss curve identical after resume");
    VT_CHECK(A.st.tokens == B.st.tokens, "tokens counted alike (%llu vs %llu)", (unsigned long long)A.st.tokens,
             (unsigned long long)B.st.tokens);
    vs_train_loop_free(&B);

    /* other settings: refused, naming both */
    vs_train_loop C;
    resume(&C, &f, dir_b, "{\"test\":2}", VS_ERR_INVALID);
    vs_train_loop_free(&C);

    /* a damaged newest checkpoint: ckpt-prev is used */
    char ck[1300];
    snprintf(ck, sizeof(ck), "%s/ckpt/ckpt.gguf", dir_b);
    FILE *fp = fopen(ck, "wb");
    VT_REQUIRE(fp, "open %s", ck);
    fputs("not a checkpoint", fp);
    fclose(fp);
    resume(&C, &f, dir_b, "{\"test\":1}", VS_OK);
    VT_CHECK(C.m && C.st.step > 0 && C.st.step < STEPS, "fell back to ckpt-prev (step %lld)", (long long)C.st.step);
    vs_train_loop_free(&C);

    /* a checkpoint of another model: refused, not a reason to fall back */
    vs_train_vlm_config other = f.cfg;
    other.n_layers = 3;
    loop_init(&C, &f, dir_a);
    C.data = make_data(&f);
    int mb, mt, mi;
    vs_train_data_capacity(C.data, &mb, &mt, &mi);
    VT_CHECK(vs_train_loop_load(&C, &other, "the test says", mb, mt, mi, &err) == VS_ERR_INVALID &&
                 strstr(err.msg, "ckpt.gguf"),
             "another model's checkpoint: %s", err.msg);
    vs_train_loop_free(&C);

    vs_train_loop_free(&A);
    vs_threadpool_free(f.tp);
    vs_tokenizer_free(f.tok_obj);
    vs_gguf_close(g);
    vs_world_dataset_free(f.train);
    return vt_finish("train_loop");
}
