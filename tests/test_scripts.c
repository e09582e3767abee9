/* test_scripts: the model-making scripts end to end, on a tiny world and tiny models, so the documented
 * commands that reproduce the shipped models keep working:
 *   - scripts/make_models.sh: world (SUITES), tokenizer, vision pretraining (VISION_STEPS), LM text
 *     pretraining on a world of its own (TEXT_PER_SUITE; its look pictures in words, TEXT_SUITES) at half
 *     the LM's size, the look stage from that tower and that LM grown (TEXT_GROW) with the tower frozen
 *     (LOOK_PER_SUITE, evaluated with own and swapped pictures), target training in chunks from the look
 *     stage with the norm cap (NORM_CAP, all in run.json), eval, results in OUT. On a CPU with the AMX
 *     products the run switches attention at ATTENTION_SWITCH: the first chunk stops there
 *     with --attention direct, the next runs --attention gemm, and OUT/attention keeps "direct"; with
 *     FINISH_AT the run stops there and a short run from that checkpoint (train-finish/) makes the model;
 *   - a second make_models.sh run finds everything done and trains nothing;
 *   - scripts/make_drafters.sh: the recipes (LLaVA, the pooled one, and MASSV with its distillation) into
 *     OUT, or, when none of the tiny target's distilled answers ends, LLaVA, pool and MASSV's clear error;
 *   - scripts/bench_report.sh on a random model set: the report, then a resumed run compared with it.
 * Needs /bin/sh and the CLI ($VLMSPEC_BIN). */
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lm.h"
#include "testutil.h"

static bool exists(const char *dir, const char *name) {
    char p[1024];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    struct stat st;
    return stat(p, &st) == 0 && st.st_size > 0;
}

static int count_lines_with(const char *path, const char *needle) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof(line), f)) n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

int main(void) {
    const char *cli = vt_cli();
    if (!cli || access(cli, X_OK) != 0) {
        printf("SKIP: no vlmspec binary ($VLMSPEC_BIN)\n");
        return VT_SKIP_CODE;
    }
    char abs_cli[1024];
    if (cli[0] == '/') snprintf(abs_cli, sizeof(abs_cli), "%s", cli);
    else {
        char cwd[512];
        VT_REQUIRE(getcwd(cwd, sizeof(cwd)), "getcwd");
        snprintf(abs_cli, sizeof(abs_cli), "%s/%s", cwd, cli);
    }
    const char *tmp = vt_tmpdir();
    char work[600], out[600], dwork[600], log1[700], log2[700], log3[700], path[800];
    snprintf(work, sizeof(work), "%s/work", tmp);
    snprintf(out, sizeof(out), "%s/models", tmp);
    snprintf(dwork, sizeof(dwork), "%s/drafters", tmp);
    snprintf(log1, sizeof(log1), "%s/make_models.log", tmp);
    snprintf(log2, sizeof(log2), "%s/make_models2.log", tmp);
    snprintf(log3, sizeof(log3), "%s/make_drafters.log", tmp);
    const bool amx = vt_run("%s version | grep -q 'training products:.* amx-bf16x3'", abs_cli) == 0;

    /* 1. the target: 3 train + 1 test conversations per suite, a 300-token BPE, a 2-layer LM */
    static const char *const model_env =
        "TRAIN_PER_SUITE=3 TEST_PER_SUITE=1 VOCAB=300 EPOCHS=1 FREEZE_VISION=1 VISION_WARMUP=1 "
        "ATTENTION_SWITCH=2 FINISH_AT=4 FINISH_STEPS=2 FINISH_WARMUP=1 THREADS=2 NORM_CAP=2 VISION_STEPS=2 "
        "SUITES=all TEXT_PER_SUITE=2 TEXT_TEST=1 TEXT_EPOCHS=2 TEXT_EVAL_LIMIT=1 TEXT_SUITES=text,drill,look "
        "TEXT_EVAL_FLAGS='--ablate-images words' TEXT_GROW=1 "
        "TEXT_FLAGS='--warmup 1 --batch 4 --accum 1 --width 16 --layers 1 --heads 1 --kv-heads 1 --ffn 32 "
        "--v-width 32 --v-blocks 1 --v-heads 2 --v-ffn 64 --ctx 1024 --images-as-text --prompt-loss 1 -q' "
        "LOOK_PER_SUITE=2 LOOK_TEST=2 LOOK_EVAL_LIMIT=1 "
        "LOOK_FLAGS='--warmup 1 --batch 2 --accum 1 --width 32 --layers 2 --heads 2 --kv-heads 2 --ffn 64 "
        "--v-width 32 --v-blocks 1 --v-heads 2 --v-ffn 64 --ctx 1024 -q' "
        "VISION_FLAGS='--batch 2 --eval-images 4 --eval-every 1 --v-width 32 --v-blocks 1 --v-heads 2 --v-ffn 64 "
        "--width 32 -q' "
        "EVAL_FLAGS='--limit 1 --max-tokens 8' "
        "TRAIN_FLAGS='--batch 4 --width 32 --layers 2 --heads 2 --kv-heads 2 --ffn 64 --v-width 32 "
        "--v-blocks 1 --v-heads 2 --v-ffn 64 --ctx 1024 -q'";
    int rc = vt_run("VLMSPEC=%s WORK=%s OUT=%s %s sh scripts/make_models.sh > %s 2>&1", abs_cli, work, out,
                    model_env, log1);
    VT_CHECK(rc == 0, "make_models.sh exit %d (log %s)", rc, log1);
    static const char *const model_files[] = {"target.gguf",     "target-mmproj.gguf", "target-train.json",
                                              "target-eval.json", "target-eval.txt",   "target-loss.svg",
                                              "target-loss-finish.svg"};
    for (size_t i = 0; i < sizeof(model_files) / sizeof(model_files[0]); i++)
        VT_CHECK(exists(out, model_files[i]), "make_models.sh did not write %s/%s", out, model_files[i]);
    const int chunks = count_lines_with(log1, "training: chunk of at most");
    if (amx) {
        VT_CHECK(count_lines_with(log1, "--attention direct --chunk-steps 2") == 1 &&
                     count_lines_with(log1, "--attention gemm") == 1 && chunks == 2,
                 "make_models.sh: expected a direct-attention chunk up to step 2, then a gemm one (%d chunks)",
                 chunks);
        snprintf(path, sizeof(path), "%s/train/attention", work);
        VT_CHECK(vt_file_has(path, "direct"), "%s does not record the direct attention the run started with", path);
        printf("make_models.sh: %d training chunks, attention direct until step 2, then gemm\n", chunks);
    } else {
        VT_CHECK(chunks == 1, "make_models.sh without the AMX products: %d chunks, expected 1", chunks);
        printf("make_models.sh: one training chunk (no AMX products on this CPU: no attention switch)\n");
    }
    snprintf(path, sizeof(path), "%s/train/run.json", work);
    VT_CHECK(vt_file_has(path, "\"vision_warmup\":1") && vt_file_has(path, "\"vision_lr\":0.1"),
             "run.json lacks the script's vision warm-up and rate");
    VT_CHECK(vt_file_has(path, "vision/vision-mmproj.gguf") && vt_file_has(path, "\"norm_cap\":2"),
             "run.json lacks the pretrained tower (VISION_STEPS) or the norm cap (NORM_CAP)");
    VT_CHECK(vt_file_has(path, "look/ckpt/ckpt.gguf"), "run.json lacks the look stage's weights (LOOK_PER_SUITE)");
    snprintf(path, sizeof(path), "%s/text/run.json", work);
    VT_CHECK(vt_file_has(path, "text-world") && vt_file_has(path, "\"images_as_text\":true"),
             "the text stage did not run on its own world with the pictures in words (%s)", path);
    snprintf(path, sizeof(path), "%s/text-world/world.json", work);
    VT_CHECK(vt_file_has(path, "look"), "TEXT_SUITES did not reach the text world (%s)", path);
    snprintf(path, sizeof(path), "%s/look/run.json", work);
    VT_CHECK(vt_file_has(path, "look-world") && vt_file_has(path, "\"grow\":") &&
                 vt_file_has(path, "text/ckpt/ckpt.gguf") && vt_file_has(path, "vision/vision-mmproj.gguf") &&
                 vt_file_has(path, "\"freeze_vision\":1000000000000"),
             "the look stage did not start from the text stage's LM grown (TEXT_GROW) and the pretrained tower, "
             "frozen (%s)", path);
    VT_CHECK(exists(work, "look/target.gguf") && exists(work, "look/eval.txt") && exists(work, "look/eval-swap.txt") &&
                 count_lines_with(log1, "look: chunk of at most") == 1 && count_lines_with(log1, "look: eval on 1 test") == 1,
             "the look stage did not finish in one chunk and get evaluated once (log %s)", log1);
    snprintf(path, sizeof(path), "%s/look/eval-swap.json", work);
    VT_CHECK(vt_file_has(path, "\"images\":\"swapped\""), "%s is not the swapped-pictures eval", path);
    VT_CHECK(exists(work, "text/target.gguf") && count_lines_with(log1, "text: chunk of at most") == 1,
             "the text stage did not finish in one chunk (log %s)", log1);
    VT_CHECK(exists(work, "text/eval.txt") && exists(work, "text/eval.json") &&
                 count_lines_with(log1, "text: eval on 1 test") == 1,
             "the text stage's model was not evaluated once (log %s)", log1);
    snprintf(path, sizeof(path), "%s/world/world.json", work);
    VT_CHECK(vt_file_has(path, "drill"), "SUITES=all did not reach the world (%s)", path);
    snprintf(path, sizeof(path), "%s/vision/vision.json", work);
    VT_CHECK(vt_file_has(path, "\"steps\":2"), "the vision stage did not run its 2 steps (%s)", path);
    /* FINISH_AT: the main run stops at step 4 and a 2-step run from that checkpoint makes the model */
    snprintf(path, sizeof(path), "%s/train/ckpt/ckpt.gguf", work);
    VT_CHECK(vt_run("%s gguf %s | grep -q 'train.step .* 4$'", abs_cli, path) == 0,
             "the main run's checkpoint is not at FINISH_AT = 4");
    snprintf(path, sizeof(path), "%s/train-finish/run.json", work);
    VT_CHECK(vt_file_has(path, "train-finish/init.gguf") && vt_file_has(path, "\"steps\":2") &&
                 vt_file_has(path, "\"vision_lr\":0.1") && count_lines_with(log1, "finish: run of 2 steps") == 1,
             "the finishing run: %s (log %s)", path, log1);
    snprintf(path, sizeof(path), "%s/train/target.gguf", work);
    VT_CHECK(access(path, R_OK) != 0, "the main run ran past FINISH_AT to its end");

    /* 2. run again: nothing left to do */
    rc = vt_run("VLMSPEC=%s WORK=%s OUT=%s %s sh scripts/make_models.sh > %s 2>&1", abs_cli, work, out, model_env,
                log2);
    VT_CHECK(rc == 0, "make_models.sh (second run) exit %d", rc);
    VT_CHECK(count_lines_with(log2, "training: chunk") == 0 && count_lines_with(log2, "finish: run") == 0 &&
                 count_lines_with(log2, "text: chunk") == 0 && count_lines_with(log2, "text: eval") == 0 &&
                 count_lines_with(log2, "eval: test split") == 0 &&
                 count_lines_with(log2, "up to date") == 1,
             "the second make_models.sh run trained or evaluated again (log %s)", log2);

    /* 2b. ONE_CHUNK=1 from scratch: one chunk of one stage (the vision stage's, which finishes that stage),
     * then the script stops before the text stage's chunk; each further call runs the next chunk */
    char work1[700], out1[700], log_one[700];
    snprintf(work1, sizeof(work1), "%s/work-one", tmp);
    snprintf(out1, sizeof(out1), "%s/models-one", tmp);
    snprintf(log_one, sizeof(log_one), "%s/make_models_one.log", tmp);
    int calls = 0, chunk_lines = 0;
    for (; calls < 7 && !exists(out1, "target.gguf"); calls++) {
        rc = vt_run("ONE_CHUNK=1 VLMSPEC=%s WORK=%s OUT=%s %s sh scripts/make_models.sh > %s 2>&1", abs_cli, work1,
                    out1, model_env, log_one);
        VT_CHECK(rc == 0, "make_models.sh ONE_CHUNK=1 exit %d (log %s)", rc, log_one);
        const int n = count_lines_with(log_one, "chunk of at most"); /* every stage's chunk line says it */
        VT_CHECK(n == 1, "ONE_CHUNK=1 call %d ran %d chunks (log %s)", calls + 1, n, log_one);
        chunk_lines += n;
    }
    /* vision, text, look, the main run (to FINISH_AT; with the AMX products: two chunks), the finishing run */
    VT_CHECK(exists(out1, "target.gguf") && calls == (amx ? 6 : 5) && chunk_lines == calls,
             "ONE_CHUNK=1: %d calls, %d chunks, model %s", calls, chunk_lines,
             exists(out1, "target.gguf") ? "written" : "missing");

    /* 3. the drafters of that target. MASSV tunes on the target's complete answers; this barely trained
     * target may never stop within the distillation's token limit, and then the script must stop with
     * the trainer's clear error after the LLaVA recipe (the sampled setting makes an end likely). */
    rc = vt_run("VLMSPEC=%s TARGET_DIR=%s DATA=%s/world WORK=%s OUT=%s THREADS=2 DISTILL_LIMIT=1 "
                "DISTILL_TEMPS=1.0 DISTILL_FLAGS='--max-tokens 300' MASSV_FLAGS='--steps-c 2' "
                "DRAFTER_FLAGS='--steps-a 2 --steps-b 2 --steps-c 2 --batch-a 4 --batch-b 4 --batch-c 4 "
                "--width 32 --layers 1 --heads 2 --kv-heads 1 --ffn 64 -q' sh scripts/make_drafters.sh > %s 2>&1",
                abs_cli, out, work, dwork, out, log3);
    snprintf(path, sizeof(path), "%s/train/draft-llava.gguf", dwork);
    VT_CHECK(access(path, R_OK) == 0, "make_drafters.sh did not finish the LLaVA recipe (log %s)", log3);
    snprintf(path, sizeof(path), "%s/train/draft-pool.gguf", dwork);
    VT_CHECK(access(path, R_OK) == 0, "make_drafters.sh did not finish the pool recipe (log %s)", log3);
    snprintf(path, sizeof(path), "%s/distill.jsonl", dwork);
    /* the recipes keep the single-image and text suites (SUITES=all: drills and short answers too): 8
     * conversations, one setting */
    VT_CHECK(count_lines_with(path, "\"suite\":\"") == 8, "expected 8 distilled records in %s", path);
    const bool usable = count_lines_with(path, "\"eos\":true") > 0;
    if (usable) {
        VT_CHECK(rc == 0, "make_drafters.sh exit %d (log %s)", rc, log3);
        static const char *const draft_files[] = {"draft-llava.gguf",       "draft-llava-mmproj.gguf",
                                                  "draft-massv.gguf",       "draft-massv-mmproj.gguf",
                                                  "draft-llava-train.json", "draft-massv-train.json",
                                                  "draft-pool.gguf",        "draft-pool-mmproj.gguf",
                                                  "draft-pool-train.json"};
        for (size_t i = 0; i < sizeof(draft_files) / sizeof(draft_files[0]); i++)
            VT_CHECK(exists(out, draft_files[i]), "make_drafters.sh did not write %s/%s", out, draft_files[i]);
        /* the shipped drafter LMs are converted to BF16 (DRAFT_TYPE) */
        vs_error err = {0};
        snprintf(path, sizeof(path), "%s/draft-massv.gguf", out);
        vs_lm *dl = vs_lm_load(path, &err);
        VT_CHECK(dl && vs_lm_cfg(dl)->wtype == VS_TYPE_BF16, "%s: not a BF16 LM (%s)", path, dl ? "" : err.msg);
        vs_lm_free(dl);
        printf("make_drafters.sh: LLaVA, pooled and MASSV drafters written (LMs as BF16)\n");
    } else {
        VT_CHECK(rc != 0 && vt_file_has(log3, "no usable answers"),
                 "make_drafters.sh without complete target answers: exit %d, no clear error (log %s)", rc, log3);
        printf("make_drafters.sh: LLaVA drafter written; MASSV stopped with the clear error (no distilled "
               "answer reached EOS)\n");
    }

    /* 4. scripts/bench_report.sh (the report command of docs/bench.md) on a random model set: the report,
     * then a second call that resumes (nothing left to measure) and compares with the first run's folder */
    char rmodels[700], bout[700], bdata[700], log4[700];
    snprintf(rmodels, sizeof(rmodels), "%s/random-models", tmp);
    snprintf(bout, sizeof(bout), "%s/bench-report", tmp);
    snprintf(bdata, sizeof(bdata), "%s/world-test", tmp);
    snprintf(log4, sizeof(log4), "%s/bench_report.log", tmp);
    VT_REQUIRE(vt_run("%s bench spec --make-random-models %s > /dev/null 2>&1", abs_cli, rmodels) == 0,
               "random models");
    static const char *const bench_env = "METHODS=ar,m,t TEMPS=0 LIMIT=1 REPEAT=1 THREADS=2 "
                                         "BENCH_FLAGS='-n 8 --no-bandwidth --no-progress'";
    rc = vt_run("VLMSPEC=%s MODELS=%s DATA=%s OUT=%s %s sh scripts/bench_report.sh > %s 2>&1", abs_cli, rmodels,
                bdata, bout, bench_env, log4);
    snprintf(path, sizeof(path), "%s/report.md", bout);
    VT_CHECK(rc == 0 && vt_file_has(path, "Headline") && exists(bdata, "world.json") &&
                 exists(bout, "model-bench-target.json"),
             "bench_report.sh exit %d, no report (log %s)", rc, log4);
    snprintf(path, sizeof(path), "%s/kbench.txt", bout);
    VT_CHECK(vt_file_has(path, "GFLOP/s"), "bench_report.sh: no kernel figures in %s", path);
    rc = vt_run("VLMSPEC=%s MODELS=%s DATA=%s OUT=%s COMPARE_WITH=%s %s sh scripts/bench_report.sh > %s 2>&1",
                abs_cli, rmodels, bdata, bout, bout, bench_env, log4);
    VT_CHECK(rc == 0 && vt_file_has(log4, "0 cells measured") && vt_file_has(log4, "within 0.05"),
             "bench_report.sh again with COMPARE_WITH: exit %d (log %s)", rc, log4);
    return vt_finish("scripts");
}
