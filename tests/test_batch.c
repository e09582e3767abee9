/* Sessions on several threads that share one target cache and merge their verify forwards (batch.h): every
 * request's greedy output equals the one it gets alone (chains, trees, target-only), blocks really merge
 * (fewer forwards than blocks), a finished request leaves the others running, and with drafting paused
 * while 3+ requests run (vs_batch_set_draft_pause) blocks go undrafted, drafting resumes as requests
 * end, and the outputs stay the same.
 * Uses the shipped models (skips without them). */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "batch.h"
#include "session.h"
#include "testutil.h"

#define N_THREADS 4

static const char *const QUESTIONS[N_THREADS] = {
    "What is 12 + 7?", "Name a colour of the sky.", "Tell me a short story about a cat.", "How many legs does a dog have?"};

typedef struct job {
    vs_session *sess;
    vs_batch *batch;
    vs_draft_cfg draft;
    const char *question;
    int n_predict;
    int32_t tokens[256];
    int32_t n_tokens;
    int32_t undrafted; /* blocks that verified no draft */
    vs_status st;
    char err[512];
} job;

static void run_one(job *j) {
    vs_chat_msg msg = {.role = VS_CHAT_USER, .content = j->question};
    vs_request rq;
    vs_request_default(&rq);
    rq.msgs = &msg, rq.n_msgs = 1;
    rq.draft = j->draft;
    rq.n_predict = j->n_predict;
    vs_result res;
    vs_result_init(&res);
    vs_error err = {0};
    j->st = vs_session_run(j->sess, &rq, &res, &err);
    snprintf(j->err, sizeof(j->err), "%s", err.msg);
    j->n_tokens = VS_MIN(res.log.n_tokens, 256);
    memcpy(j->tokens, res.log.tokens, sizeof(int32_t) * (size_t)j->n_tokens);
    j->undrafted = 0;
    for (int32_t b = 0; b < res.log.n_blocks; b++) j->undrafted += res.log.blocks[b].n_draft == 0;
    vs_result_free(&res);
}

static void *thread_main(void *arg) {
    job *j = arg;
    vs_batch_enter(j->batch);
    run_one(j);
    vs_batch_leave(j->batch);
    return NULL;
}

int main(void) {
    const char *files[] = {"models/target.gguf", "models/draft-llava.gguf", "models/draft-llava-mmproj.gguf"};
    for (size_t i = 0; i < VS_ARRAY_LEN(files); i++) {
        FILE *f = fopen(files[i], "rb");
        if (!f) {
            printf("batch: SKIPPED: %s is missing\n", files[i]);
            return VT_SKIP_CODE;
        }
        fclose(f);
    }
    vs_error err = {0};
    vs_models_opts mo = {.model = files[0], .threads = 2};
    mo.draft[VS_ROLE_LLAVA] = files[1];
    vs_models *m = vs_models_load(&mo, &err);
    VT_REQUIRE(m, "models: %s", err.msg);
    const int n_ctx = 512;
    vs_kv *kv = vs_lm_kv_new(vs_models_target(m), N_THREADS, n_ctx, VS_TYPE_F16, &err);
    VT_REQUIRE(kv, "kv: %s", err.msg);
    vs_batch *batch = vs_batch_new(0, &err);
    VT_REQUIRE(batch, "batch: %s", err.msg);
    vs_session *sess[N_THREADS], *alone = NULL;
    for (int i = 0; i < N_THREADS; i++) {
        vs_session_opts so = {.n_ctx = n_ctx, .kv_type = VS_TYPE_F16, .kv = kv, .seq = i, .batch = batch};
        sess[i] = vs_session_new(m, &so, &err);
        VT_REQUIRE(sess[i], "session %d: %s", i, err.msg);
    }
    vs_session_opts so1 = {.n_ctx = n_ctx, .kv_type = VS_TYPE_F16};
    alone = vs_session_new(m, &so1, &err);
    VT_REQUIRE(alone, "session: %s", err.msg);
    vs_session_opts bad = so1;
    bad.kv = kv, bad.fit_ctx = true;
    VT_CHECK(!vs_session_new(m, &bad, &err) && err.code == VS_ERR_INVALID, "a shared cache with fit_ctx is refused");

    /* per thread: a drafting configuration (chain t, tree t width 2, target only, chain t with gamma 3) */
    vs_draft_cfg cfg[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
        vs_draft_cfg_default(&cfg[i]);
        cfg[i].method = i == 2 ? "ar" : "t";
        cfg[i].gamma = i == 3 ? 3 : 5;
        cfg[i].opts.tree_width = i == 1 ? 2 : 1;
    }
    /* lengths differ, so some requests end while others still run */
    const int n_predict[N_THREADS] = {24, 48, 64, 16};
    job ref[N_THREADS], par[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
        ref[i] = (job){.sess = alone, .draft = cfg[i], .question = QUESTIONS[i], .n_predict = n_predict[i]};
        run_one(&ref[i]);
        VT_REQUIRE(ref[i].st == VS_OK && ref[i].n_tokens > 0, "reference %d: %s", i, ref[i].err);
    }
    vs_batch_stats bs;
    int undrafted[3];
    /* rounds 0, 1: drafting throughout (the second reuses the caches' prefixes); round 2: drafting paused
     * while three or more requests run, so it resumes when the first two requests have ended */
    for (int round = 0; round < 3; round++) {
        if (round == 2) {
            vs_batch_get_stats(batch, &bs);
            VT_CHECK(bs.paused == 0, "no block is undrafted without a pause (%lld)", (long long)bs.paused);
            vs_batch_set_draft_pause(batch, 3);
        }
        pthread_t th[N_THREADS];
        for (int i = 0; i < N_THREADS; i++) {
            par[i] = (job){.sess = sess[i], .batch = batch, .draft = cfg[i], .question = QUESTIONS[i],
                           .n_predict = n_predict[i]};
            VT_REQUIRE(!pthread_create(&th[i], NULL, thread_main, &par[i]), "thread");
        }
        for (int i = 0; i < N_THREADS; i++) pthread_join(th[i], NULL);
        undrafted[round] = 0;
        for (int i = 0; i < N_THREADS; i++) undrafted[round] += par[i].undrafted;
        if (round == 2) /* the drafters' own stops (p-min) leave some blocks undrafted in every round */
            VT_CHECK(undrafted[2] > undrafted[1], "the pause leaves blocks undrafted: %d against %d without it",
                     undrafted[2], undrafted[1]);
        for (int i = 0; i < N_THREADS; i++) {
            VT_CHECK(par[i].st == VS_OK, "round %d request %d: %s", round, i, par[i].err);
            VT_CHECK(par[i].n_tokens == ref[i].n_tokens &&
                         !memcmp(par[i].tokens, ref[i].tokens, sizeof(int32_t) * (size_t)ref[i].n_tokens),
                     "round %d request %d (%s%s): %d tokens differ from the %d it gets alone", round, i,
                     cfg[i].method, cfg[i].opts.tree_width > 1 ? " tree" : "", par[i].n_tokens, ref[i].n_tokens);
        }
    }
    const int64_t paused_before = bs.paused;
    vs_batch_get_stats(batch, &bs);
    VT_CHECK(bs.paused > paused_before, "drafting paused in the third round: %lld undrafted blocks",
             (long long)(bs.paused - paused_before));
    VT_CHECK(bs.blocks > 0 && bs.forwards < bs.blocks && bs.merged_rows > 0,
             "blocks merge: %lld blocks in %lld forwards (%lld merged rows)", (long long)bs.blocks,
             (long long)bs.forwards, (long long)bs.merged_rows);
    printf("batch: %lld verify blocks in %lld forwards, %lld undrafted\n", (long long)bs.blocks,
           (long long)bs.forwards, (long long)bs.paused);
    for (int i = 0; i < N_THREADS; i++) vs_session_free(sess[i]);
    vs_session_free(alone);
    vs_batch_free(batch);
    vs_kv_free(kv);
    vs_models_free(m);
    return vt_finish("batch");
}
