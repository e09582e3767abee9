/* test_models: the shipped model family in models/ (models/README.md), when present.
 *
 * - The files load; both drafters have the target's vocabulary; each drafter mmproj carries a tower
 *   byte-identical to the target's (vs_vision_tower_same).
 * - Lossless on the real models: through the benchmark runner, greedy speculative output equals
 *   target-only output for one test sample of every suite (first and second turns) with the LLaVA-recipe
 *   drafter (M, T, C, P rows; TABED over M+T and M+T+C+P) and the MASSV drafter (M, T).
 * - The trained drafters agree with the trained target: tau of M drafting clearly above 1 (random weights
 *   give about 1.0), so a model set that silently lost its training fails here.
 * - Token trees on the real models through the CLI (`generate --tree-width 2 --compare`, which exits 1
 *   when greedy output differs).
 *
 * Skips (exit 77) with a message when models/ holds no trained models. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "lm.h"
#include "testutil.h"
#include "vision.h"
#include "world.h"

#define MODELS "models"

static bool have(const char *name) {
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", MODELS, name);
    return access(path, R_OK) == 0;
}

static void test_files(void) {
    vs_error err = {0};
    vs_lm *t = vs_lm_load(MODELS "/target.gguf", &err);
    VT_REQUIRE(t, "%s", err.msg);
    vs_mmproj *tp = vs_mmproj_open(MODELS "/target-mmproj.gguf", &err);
    VT_REQUIRE(tp, "%s", err.msg);
    VT_REQUIRE(vs_mmproj_tower(tp), "the target's mmproj has a tower");
    const char *lms[2] = {MODELS "/draft-llava.gguf", MODELS "/draft-massv.gguf"};
    const char *mps[2] = {MODELS "/draft-llava-mmproj.gguf", MODELS "/draft-massv-mmproj.gguf"};
    for (int i = 0; i < 2; i++) {
        vs_lm *d = vs_lm_load(lms[i], &err);
        VT_REQUIRE(d, "%s", err.msg);
        VT_CHECK(vs_lm_cfg(d)->n_vocab == vs_lm_cfg(t)->n_vocab, "%s: vocabulary %d, the target's %d", lms[i],
                 vs_lm_cfg(d)->n_vocab, vs_lm_cfg(t)->n_vocab);
        VT_CHECK(vs_lm_n_params(d) * 10 < vs_lm_n_params(t), "%s: %lld parameters, the target %lld", lms[i],
                 (long long)vs_lm_n_params(d), (long long)vs_lm_n_params(t));
        vs_mmproj *dp = vs_mmproj_open(mps[i], &err);
        VT_REQUIRE(dp, "%s", err.msg);
        VT_CHECK(vs_mmproj_tower(dp) && vs_vision_tower_same(vs_mmproj_tower(dp), vs_mmproj_tower(tp)),
                 "%s: its tower is byte-identical to the target's", mps[i]);
        VT_CHECK(vs_vision_check_projector(vs_mmproj_tower(tp), vs_mmproj_projector(dp), &err) == VS_OK,
                 "%s", err.msg);
        vs_mmproj_free(dp);
        vs_lm_free(d);
    }
    vs_mmproj_free(tp);
    vs_lm_free(t);
}

static void test_lossless(const char *data) {
    vs_error err = {0};
    char out[512];
    snprintf(out, sizeof(out), "%s/bench", vt_tmpdir());
    vs_bench_config c;
    vs_bench_config_default(&c);
    c.models_dir = MODELS, c.data_dir = data, c.out_dir = out;
    const char *methods[] = {"ar", "m", "t", "c", "p", "tabed-mt", "tabed-mtcp", "massv", "massv-t"};
    c.n_methods = (int)(sizeof(methods) / sizeof(methods[0]));
    for (int i = 0; i < c.n_methods; i++) c.methods[i] = methods[i];
    c.gammas[0] = 5, c.n_gammas = 1;
    c.temps[0] = 0, c.n_temps = 1;
    c.limit = 2; /* 2 per suite: the odd one has a second turn */
    c.n_predict = 48;
    c.threads = 2;
    c.progress = false, c.quiet = true;
    vs_bench_run_info info;
    double t0 = vs_time_now();
    VT_REQUIRE(vs_bench_run(&c, &info, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(info.n_units == 8 * 2 + 6, "units %lld (8 suites x 2 first turns + 6 second turns)",
             (long long)info.n_units);
    VT_CHECK(info.n_run == info.n_units * c.n_methods && info.n_skipped_units == 0, "cells %lld, skipped %lld",
             (long long)info.n_run, (long long)info.n_skipped_units);
    VT_CHECK(info.n_mismatch == 0, "%lld greedy speculative outputs differ from target-only",
             (long long)info.n_mismatch);

    char path[700];
    snprintf(path, sizeof(path), "%s/results.jsonl", out);
    vs_bench_results res;
    vs_bench_results_init(&res);
    VT_REQUIRE(vs_bench_results_load(path, &res, &err) == VS_OK, "%s", err.msg);
    int64_t compared = 0, identical = 0;
    for (int64_t i = 0; i < res.n; i++) {
        if (!strcmp(res.rec[i].method, "ar")) continue;
        compared++, identical += res.rec[i].identical == 1;
    }
    VT_CHECK(compared == info.n_units * (c.n_methods - 1) && identical == compared, "identical %lld of %lld",
             (long long)identical, (long long)compared);
    const char *agree[] = {"m", "massv"};
    for (int k = 0; k < 2; k++) {
        vs_bench_filter f = vs_bench_filter_any();
        f.method = agree[k], f.gamma = 5, f.temp = 0;
        vs_bench_group g;
        VT_REQUIRE(vs_bench_aggregate(res.rec, res.n, &f, &g, &err) == VS_OK, "%s", err.msg);
        printf("  %-6s tau %.2f over %lld records\n", agree[k], g.tau, (long long)g.n);
        VT_CHECK(g.tau > 1.5, "%s: tau %.2f; trained drafters agree with the trained target", agree[k], g.tau);
    }
    vs_bench_results_free(&res);
    printf("  lossless runs: %.1f s\n", vs_time_now() - t0);
}

static void test_tree_cli(const char *data) {
    if (access(vt_cli(), X_OK) != 0) {
        printf("  SKIP: tree runs: %s not found\n", vt_cli());
        return;
    }
    vs_error err = {0};
    vs_world_dataset *ds = vs_world_load(data, "test", VS_WORLD_SUITE_BIT(VS_WORLD_VQA), &err);
    VT_REQUIRE(ds && ds->n > 0 && ds->samples[0].n_images == 1, "a vqa sample: %s", err.msg);
    const vs_world_sample *s = &ds->samples[0];
    char *prompt = vs_world_prompt(s, 0, false); /* "USER: <image>\n... ASSISTANT:" */
    VT_REQUIRE(prompt, "prompt");
    for (char *p = prompt; *p; p++) /* inside the shell's double quotes */
        if (*p == '"' || *p == '\\' || *p == '$' || *p == '`') *p = ' ';
    const char *modes[] = {"m", "m,t --weights inv-kl", "m,t,c,p --weights inv-kl"};
    for (int i = 0; i < 3; i++) {
        int rc = vt_run("%s generate --raw -m %s/target.gguf --mmproj %s/target-mmproj.gguf -md %s/draft-llava.gguf "
                        "--mmproj-draft %s/draft-llava-mmproj.gguf --image %s -p \"%s\" -n 48 --temp 0 --draft 4 "
                        "--tree-width 2 --draft-mode %s --compare --threads 2 > /dev/null 2>&1",
                        vt_cli(), MODELS, MODELS, MODELS, MODELS, s->images[0], prompt, modes[i]);
        VT_CHECK(rc == 0, "tree width 2, draft mode %s: exit %d (1: output differs from target-only)", modes[i],
                 rc);
    }
    vs_free(prompt);
    vs_world_dataset_free(ds);
}

int main(void) {
    if (!have("target.gguf") || !have("draft-llava.gguf") || !have("draft-massv.gguf")) {
        printf("SKIP: models: models/ holds no trained model family (scripts/make_models.sh, "
               "scripts/make_drafters.sh)\n");
        return VT_SKIP_CODE;
    }
    test_files();
    char data[512];
    snprintf(data, sizeof(data), "%s/world", vt_tmpdir());
    vs_world_config wc;
    vs_world_config_default(&wc);
    wc.seed = 11, wc.n_train = 0, wc.n_test = 2; /* another seed than the training world's (1) */
    vs_error err = {0};
    VT_REQUIRE(vs_world_generate(&wc, data, &err) == VS_OK, "%s", err.msg);
    test_lossless(data);
    test_tree_cli(data);
    return vt_finish("models");
}
