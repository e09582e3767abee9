/* train_drafter: the LLaVA-recipe and MASSV drafters on a tiny world with a tiny "target".
 *   1. data: the selection rule (no multi-image conversation, new-image second turns cut, the rest
 *      kept whole), the text documents of phase (a) (BOS + text + EOS, no images, every row after BOS
 *      counted, decoding to the source text), the items reader;
 *   2. the recipe through the CLI (`vlmspec train drafter`): phase (a) changes only the LM, (b) only
 *      the projector (the LM is bit-identical to phase a's), (c) projector + LM; the vision tower is the
 *      target's in every checkpoint, and its tensors in the exported mmproj are byte-identical to the
 *      target's F16 file;
 *   3. resume: the same recipe run in chunks of 2 steps with --resume gives byte-identical exports and
 *      loss curves; a checkpoint of another model (swapped in) is refused by --resume of `train
 *      target` and `train drafter` and by the next phase, naming the file, the field and both values;
 *   4. export parity: the exported drafter (F32) run by vs_vision + vs_lm gives the training forward's
 *      logits within 1e-4;
 *   5. distill: `vlmspec data distill` writes the header and one record per (conversation, setting),
 *      interrupted + resumed equals uninterrupted, records round-trip through JSON, greedy records
 *      equal the greedy answerer; MASSV's phase c trains on a distill file;
 *   6. bad input: a missing target, a tokenizer whose vocabulary differs from the target's, a distill
 *      file from another vocabulary. */
#include <math.h>
#include <string.h>

#include "distill.h"
#include "eval.h"
#include "kv.h"
#include "lm.h"
#include "mmprompt.h"
#include "train_drafter.h"
#include "world_tiny.h"

#define NP 16

static char g_dir[512], g_tok[512], g_tlm[600], g_tmm[600], g_tmp[400];

/* The tiny target: wt_config weights from a seed, exported F16 (only its tower and vocabulary
 * matter to the drafter). */
static void make_target(void) {
    vs_error err = {0};
    vs_gguf *tg = vs_gguf_open(g_tok, &err);
    VT_REQUIRE(tg, "%s", err.msg);
    vs_tokenizer *tok = vs_tokenizer_load(g_tok, &err);
    VT_REQUIRE(tok, "%s", err.msg);
    vs_train_vlm_config c = wt_config(vs_tokenizer_n_vocab(tok));
    vs_train_vlm *m = vs_train_vlm_new(&c, 1, 2, 1, &err);
    VT_REQUIRE(m, "%s", err.msg);
    vs_train_vlm_init(m, 99);
    snprintf(g_tlm, sizeof(g_tlm), "%s/target.gguf", g_tmp);
    snprintf(g_tmm, sizeof(g_tmm), "%s/target-mmproj.gguf", g_tmp);
    vs_train_export_opts eo = {.type = VS_TYPE_F16, .tokenizer = tg, .name = "tiny-target"};
    VT_REQUIRE(vs_train_vlm_export(m, g_tlm, g_tmm, &eo, &err) == VS_OK, "%s", err.msg);
    vs_train_vlm_free(m);
    vs_tokenizer_free(tok);
    vs_gguf_close(tg);
}

/* 1. data */
static void test_data(const vs_world_dataset *train, const vs_world_dataset *caps, const vs_tokenizer *tok) {
    vs_error err = {0};
    int64_t expect_kept = 0, expect_cut = 0, expect_dropped = 0;
    for (int64_t i = 0; i < train->n; i++) {
        const vs_world_sample *s = &train->samples[i];
        int k = vs_drafter_turns(s);
        if (s->suite == VS_WORLD_DIFF || s->suite == VS_WORLD_STORY) {
            VT_CHECK(k == 0, "%s (%d images) is kept", s->id, s->n_images);
        } else if (s->n_turns == 2 && s->turns[1].kind == VS_TURN_NEW_IMAGE) {
            VT_CHECK(k == 1, "%s: a new-image second turn is kept (%d)", s->id, k);
        } else {
            VT_CHECK(k == s->n_turns, "%s: %d of %d turns kept", s->id, k, s->n_turns);
        }
        expect_dropped += k == 0, expect_kept += k > 0, expect_cut += k > 0 && k < s->n_turns;
    }
    VT_CHECK(expect_cut > 0 && expect_dropped > 0, "the tiny world has no cut / dropped samples");
    vs_train_seqs q;
    memset(&q, 0, sizeof(q));
    VT_REQUIRE(vs_train_seqs_add_instruct(&q, train, tok, NP, &err) == VS_OK, "%s", err.msg);
    int64_t dropped = 0, cut = 0;
    for (int s = 0; s < VS_WORLD_N_SUITES; s++) dropped += q.dropped[s], cut += q.cut_turns[s];
    VT_CHECK(q.n == expect_kept && dropped == expect_dropped && cut == expect_cut,
             "instruct: %lld kept, %lld dropped, %lld cut (expected %lld, %lld, %lld)", (long long)q.n,
             (long long)dropped, (long long)cut, (long long)expect_kept, (long long)expect_dropped,
             (long long)expect_cut);
    const vs_train_item *it = vs_train_seqs_items(&q);
    for (int64_t i = 0; i < q.n; i++) {
        VT_CHECK(it[i].ex->n_images <= 1, "instruct item %lld has %d images", (long long)i,
                 it[i].ex->n_images);
        VT_CHECK(it[i].suite != VS_WORLD_DIFF && it[i].suite != VS_WORLD_STORY, "multi-image suite kept");
        VT_CHECK(it[i].ex->n_images == 0 || (it[i].sample && it[i].sample->n_images == it[i].ex->n_images),
                 "item %lld: its sample shows %d images for %d", (long long)i,
                 it[i].sample ? it[i].sample->n_images : -1, it[i].ex->n_images);
    }
    /* the reader over the items: every batch has at most one image per sequence */
    vs_train_vlm_config c = wt_config(vs_tokenizer_n_vocab(tok));
    vs_train_data_opts o = {
        .seq_len = 2048, .batch = 3, .image_rows = NP, .preproc = wt_preproc(&c), .bucket = 2, .seed = 1};
    vs_train_data *r = vs_train_data_new_items(it, q.n, &o, &err);
    VT_REQUIRE(r, "%s", err.msg);
    VT_CHECK(vs_train_data_get_stats(r)->max_images == 1, "max images per sequence %lld",
             (long long)vs_train_data_get_stats(r)->max_images);
    for (int k = 0; k < 6; k++) {
        vs_train_batch b;
        vs_train_batch_info info;
        VT_REQUIRE(vs_train_data_next(r, &b, &info, &err) == VS_OK, "%s", err.msg);
        VT_CHECK(b.n_images <= b.B, "batch %d: %d images for %d sequences", k, b.n_images, b.B);
    }
    vs_train_data_free(r);
    vs_train_seqs_free(&q);

    /* phase (a) documents */
    memset(&q, 0, sizeof(q));
    VT_REQUIRE(vs_train_seqs_add_text(&q, train, caps, tok, &err) == VS_OK, "%s", err.msg);
    int64_t expect_docs = caps->n, k = 0;
    for (int64_t i = 0; i < train->n; i++)
        expect_docs += train->samples[i].suite == VS_WORLD_TEXT ? 1 : train->samples[i].n_turns;
    VT_CHECK(q.n == expect_docs, "text: %lld documents, expected %lld", (long long)q.n,
             (long long)expect_docs);
    it = vs_train_seqs_items(&q);
    for (int64_t i = 0; i < train->n; i++) {
        const vs_world_sample *s = &train->samples[i];
        int nd = s->suite == VS_WORLD_TEXT ? 1 : s->n_turns;
        for (int t = 0; t < nd; t++, k++) {
            const vs_train_example *ex = it[k].ex;
            VT_CHECK(ex->n_images == 0 && !it[k].sample, "%s: a text document with images", s->id);
            VT_CHECK(ex->tokens[0] == vs_tokenizer_bos(tok) &&
                         ex->tokens[ex->n_rows - 1] == vs_tokenizer_eos(tok),
                     "%s: not BOS ... EOS", s->id);
            int32_t counted = 0;
            bool text_only = true;
            for (int32_t rr = 0; rr < ex->n_rows; rr++)
                counted += ex->answer[rr], text_only &= ex->img_row[rr] < 0;
            VT_CHECK(text_only, "%s: image rows in a document", s->id);
            if (s->suite == VS_WORLD_TEXT) {
                VT_CHECK(counted == ex->n_answer && counted < ex->n_rows - 1,
                         "%s: text conversation counts %d", s->id, counted);
                continue;
            }
            VT_CHECK(!ex->answer[0] && counted == ex->n_rows - 1, "%s: %d of %d rows counted", s->id, counted,
                     ex->n_rows);
            char *txt = vs_detokenize(tok, ex->tokens + 1, ex->n_rows - 2, 0, NULL, &err);
            VT_REQUIRE(txt, "%s", err.msg);
            VT_CHECK(!strcmp(txt, s->turns[t].assistant), "%s turn %d: document '%.50s'", s->id, t, txt);
            vs_free(txt);
        }
    }
    vs_train_seqs_free(&q);
    printf(
        "data: %lld instruct conversations kept, %lld dropped, %lld second turns cut; %lld text documents\n",
        (long long)expect_kept, (long long)expect_dropped, (long long)expect_cut, (long long)expect_docs);
}

/* Runs the tiny llava or massv recipe into out (extra flags appended). */
static int run_recipe(const char *recipe, const char *out, const char *extra) {
    return vt_run(
        "%s train drafter --recipe %s --data %s --tokenizer %s --target %s --target-mmproj %s --out %s "
        "--width 32 --layers 2 --heads 4 --kv-heads 2 --ffn 64 --ctx 2048 --seq 2048 --steps-a 4 "
        "--steps-b 3 --steps-c 3 --batch-a 4 --batch-b 4 --batch-c 4 --lr-a 3e-3 --lr-b 3e-3 --lr-c 3e-3 "
        "--warmup-a 1 --warmup-b 1 --warmup-c 1 --ckpt-every 2 -q %s > %s.log 2>&1",
        vt_cli(), recipe, g_dir, g_tok, g_tlm, g_tmm, out, extra, out);
}

static vs_train_vlm *load_ckpt(const char *out, const char *phase) {
    char p[900];
    snprintf(p, sizeof(p), "%s/%s/ckpt/ckpt.gguf", out, phase);
    vs_error err = {0};
    vs_train_state st;
    vs_train_vlm *m = vs_train_vlm_load(p, 1, 2, 1, &st, &err);
    VT_REQUIRE(m, "%s", err.msg);
    return m;
}

/* Whether group g of a and b is bit-identical. */
static bool same_group(vs_train_vlm *a, vs_train_vlm *b, int g) {
    vs_train_params *pa = vs_train_vlm_params(a), *pb = vs_train_vlm_params(b);
    for (int i = 0; i < pa->n_tensors; i++) {
        const vs_train_tensor *t = &pa->tensors[i];
        if (t->group != g) continue;
        if (memcmp(pa->data + t->offset, pb->data + pb->tensors[i].offset, t->numel * sizeof(float)))
            return false;
    }
    return true;
}

static bool files_equal(const char *a, const char *b) { return vt_run("cmp -s '%s' '%s'", a, b) == 0; }

/* Loss curves: equal but for the last column (wall time). */
static bool csv_equal_but_time(const char *pa, const char *pb) {
    FILE *a = fopen(pa, "r"), *b = fopen(pb, "r");
    char la[512], lb[512];
    bool same = a && b;
    int lines = 0;
    while (same && fgets(la, sizeof(la), a)) {
        if (!fgets(lb, sizeof(lb), b)) {
            same = false;
            break;
        }
        char *ca = strrchr(la, ','), *cb = strrchr(lb, ',');
        if (ca) *ca = 0;
        if (cb) *cb = 0;
        same &= !strcmp(la, lb);
        lines++;
    }
    same &= lines > 1 && b && !fgets(lb, sizeof(lb), b);
    if (a) fclose(a);
    if (b) fclose(b);
    return same;
}

/* Every v.* tensor of the drafter's mmproj has the target's bytes; the projector has the drafter's width. */
static void check_tower_bytes(const char *mm_path, int width) {
    vs_error err = {0};
    vs_gguf *t = vs_gguf_open(g_tmm, &err), *d = vs_gguf_open(mm_path, &err);
    VT_REQUIRE(t && d, "%s", err.msg);
    int n_v = 0;
    for (int64_t i = 0; i < vs_gguf_n_tensors(t); i++) {
        const vs_gguf_tensor *a = vs_gguf_tensor_at(t, i);
        if (strncmp(a->name, "v.", 2)) continue;
        const vs_gguf_tensor *b = vs_gguf_find_tensor(d, a->name);
        VT_CHECK(b && b->type == a->type && b->nbytes == a->nbytes && !memcmp(a->data, b->data, a->nbytes),
                 "%s: %s differs from the target's", mm_path, a->name);
        n_v++;
    }
    VT_CHECK(n_v > 10, "only %d vision tensors", n_v);
    const vs_gguf_tensor *p = vs_gguf_find_tensor(d, "mm.2.weight");
    VT_CHECK(p && p->ne[1] == width, "%s: projector output width %lld", mm_path,
             p ? (long long)p->ne[1] : -1LL);
    printf("%s: %d vision tensors byte-identical to the target's\n", mm_path, n_v);
    vs_gguf_close(t), vs_gguf_close(d);
}

/* 2 + 3: the llava recipe, freezing, tower bytes, resume. */
static void test_recipe(void) {
    vs_error err = {0};
    char out[600], out2[600], p1[900], p2[900];
    snprintf(out, sizeof(out), "%s/d-straight", g_tmp);
    VT_REQUIRE(run_recipe("llava", out, "") == 0, "train drafter failed (see %s.log)", out);
    vs_train_vlm *a = load_ckpt(out, "a-text"), *b = load_ckpt(out, "b-proj"), *c = load_ckpt(out, "c-llava");
    /* the fresh model phase (a) started from: init(seed 1) + the target's tower */
    vs_mmproj *tmm = vs_mmproj_open(g_tmm, &err);
    VT_REQUIRE(tmm, "%s", err.msg);
    vs_train_vlm *z = vs_train_vlm_new(vs_train_vlm_cfg(a), 1, 2, 1, &err);
    VT_REQUIRE(z, "%s", err.msg);
    vs_train_vlm_init(z, 1);
    VT_REQUIRE(vs_train_vlm_set_vision(z, tmm, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(same_group(z, a, VS_TRAIN_GROUP_VISION) && same_group(z, b, VS_TRAIN_GROUP_VISION) &&
                 same_group(z, c, VS_TRAIN_GROUP_VISION),
             "the vision tower changed in a phase");
    VT_CHECK(same_group(z, a, VS_TRAIN_GROUP_PROJECTOR), "phase a changed the projector");
    VT_CHECK(!same_group(z, a, VS_TRAIN_GROUP_LM), "phase a did not train the LM");
    VT_CHECK(same_group(a, b, VS_TRAIN_GROUP_LM), "phase b changed the LM");
    VT_CHECK(!same_group(a, b, VS_TRAIN_GROUP_PROJECTOR), "phase b did not train the projector");
    VT_CHECK(!same_group(b, c, VS_TRAIN_GROUP_PROJECTOR) && !same_group(b, c, VS_TRAIN_GROUP_LM),
             "phase c did not train projector and LM");
    VT_CHECK(vs_train_vlm_params(b)->frozen[VS_TRAIN_GROUP_LM] &&
                 vs_train_vlm_params(c)->frozen[VS_TRAIN_GROUP_VISION] &&
                 !vs_train_vlm_params(c)->frozen[VS_TRAIN_GROUP_LM],
             "checkpoints record the wrong frozen groups");
    snprintf(p1, sizeof(p1), "%s/draft-llava-mmproj.gguf", out);
    check_tower_bytes(p1, 32);
    /* the exported LM carries the tokenizer, and loads */
    snprintf(p1, sizeof(p1), "%s/draft-llava.gguf", out);
    vs_lm *lm = vs_lm_load(p1, &err);
    VT_REQUIRE(lm, "%s", err.msg);
    vs_tokenizer *et = vs_tokenizer_from_gguf(vs_lm_gguf(lm), &err), *tok = vs_tokenizer_load(g_tok, &err);
    VT_CHECK(et && tok && vs_tokenizer_compatible(et, tok, &err) == VS_OK, "exported tokenizer: %s", err.msg);
    vs_tokenizer_free(et), vs_tokenizer_free(tok);
    vs_lm_free(lm);

    /* resume: chunks of 2 steps across the phases */
    snprintf(out2, sizeof(out2), "%s/d-chunks", g_tmp);
    snprintf(p2, sizeof(p2), "%s/draft-llava.gguf", out2);
    int runs = 0;
    for (; runs < 12 && vt_run("test -f '%s'", p2) != 0; runs++)
        VT_REQUIRE(run_recipe("llava", out2, "--resume --chunk-steps 2") == 0, "chunk %d failed (%s.log)",
                   runs, out2);
    VT_CHECK(runs >= 5, "the chunked run finished in %d runs", runs);
    const char *files[] = {"draft-llava.gguf",        "draft-llava-mmproj.gguf", "a-text/loss.csv",
                           "b-proj/loss.csv",         "c-llava/loss.csv",        "a-text/draft.gguf",
                           "b-proj/draft-mmproj.gguf"};
    for (size_t i = 0; i < VS_ARRAY_LEN(files); i++) {
        snprintf(p1, sizeof(p1), "%s/%s", out, files[i]);
        snprintf(p2, sizeof(p2), "%s/%s", out2, files[i]);
        bool same = strstr(files[i], ".csv") ? csv_equal_but_time(p1, p2) : files_equal(p1, p2);
        VT_CHECK(same, "resume: %s differs from the uninterrupted run's", files[i]);
    }
    printf("resume: %d runs of 2 steps give byte-identical exports and loss curves\n", runs);
    /* a resume with other settings is refused */
    VT_CHECK(run_recipe("llava", out2, "--resume --lr-a 1e-3") == 1, "a changed --lr-a was accepted");
    vs_train_vlm_free(a), vs_train_vlm_free(b), vs_train_vlm_free(c), vs_train_vlm_free(z);
    vs_mmproj_free(tmm);
}

/* 3b. a checkpoint of another model is refused, by --resume (train target, train drafter) and by a
 * phase starting from the previous phase's checkpoint: the error names the file, the field and both
 * values, the exit status is 1 and nothing is exported. A matching checkpoint still resumes. */
static int run_target(const char *out, const char *extra) {
    return vt_run("%s train target --data %s --tokenizer %s --out %s --steps 2 --chunk-steps 1 --patch 16 "
                  "--v-width 16 --v-ffn 32 --v-heads 2 --v-blocks 1 --width 32 --layers 2 --heads 4 "
                  "--kv-heads 2 --ffn 64 --batch 2 --accum 1 --warmup 1 --threads 1 -q %s > %s.log 2>&1",
                  vt_cli(), g_dir, g_tok, out, extra, out);
}

static bool log_has(const char *out, const char *needle) {
    char p[900];
    snprintf(p, sizeof(p), "%s.log", out);
    return vt_file_has(p, needle);
}

static void test_resume_other_model(void) {
    char a[600], b[600], ck[900], mine[900], other[900], need[1000];
    /* train target: a width-48 tower's checkpoint in a width-16 run */
    snprintf(a, sizeof(a), "%s/t-resume", g_tmp);
    snprintf(b, sizeof(b), "%s/t-resume-w48", g_tmp);
    VT_REQUIRE(run_target(a, "") == 0, "train target (see %s.log)", a);
    VT_REQUIRE(run_target(b, "--v-width 48") == 0, "train target --v-width 48 (see %s.log)", b);
    snprintf(ck, sizeof(ck), "%s/ckpt/ckpt.gguf", a);
    snprintf(mine, sizeof(mine), "%s/ckpt-mine.gguf", a);
    snprintf(other, sizeof(other), "%s/ckpt/ckpt.gguf", b);
    /* the run's own checkpoint as ckpt-prev: another model in ckpt.gguf is an error, not a reason to
     * fall back to it */
    VT_REQUIRE(vt_run("cp '%s' '%s' && cp '%s' '%s/ckpt/ckpt-prev.gguf' && cp '%s' '%s'", ck, mine, ck, a,
                      other, ck) == 0,
               "copy checkpoints");
    int rc = run_target(a, "--resume");
    snprintf(need, sizeof(need), "%s: its model has ViT width 48, the flags say 16", ck);
    VT_CHECK(rc == 1 && log_has(a, need), "train target --resume of a width-48 checkpoint: exit %d (%s.log)",
             rc, a);
    VT_CHECK(vt_run("test -e '%s/target-mmproj.gguf'", a) != 0, "a refused resume exported a model");
    /* a damaged ckpt.gguf still falls back to ckpt-prev, which matches: the run resumes and finishes */
    VT_REQUIRE(vt_run("head -c 1000 '%s' > '%s'", mine, ck) == 0, "truncate");
    rc = run_target(a, "--resume");
    VT_CHECK(rc == 0 && log_has(a, "ckpt-prev.gguf") && vt_run("test -e '%s/target-mmproj.gguf'", a) == 0,
             "train target --resume from ckpt-prev after a damaged ckpt: exit %d (%s.log)", rc, a);
    printf("train target --resume: a checkpoint of another model is refused\n");

    /* train drafter: phase a resumed from an SwiGLU-48 checkpoint, then phase b started from one */
    snprintf(a, sizeof(a), "%s/d-resume", g_tmp);
    snprintf(b, sizeof(b), "%s/d-resume-f48", g_tmp);
    VT_REQUIRE(run_recipe("llava", a, "--phase a --chunk-steps 2") == 0, "drafter phase a (%s.log)", a);
    VT_REQUIRE(run_recipe("llava", b, "--phase a --chunk-steps 2 --ffn 48") == 0, "drafter --ffn 48 (%s.log)",
               b);
    snprintf(ck, sizeof(ck), "%s/a-text/ckpt/ckpt.gguf", a);
    snprintf(mine, sizeof(mine), "%s/ckpt-mine.gguf", a);
    snprintf(other, sizeof(other), "%s/a-text/ckpt/ckpt.gguf", b);
    VT_REQUIRE(vt_run("cp '%s' '%s' && cp '%s' '%s'", ck, mine, other, ck) == 0, "copy checkpoints");
    rc = run_recipe("llava", a, "--phase a --resume");
    snprintf(need, sizeof(need), "%s: its model has SwiGLU width 48, this run", ck);
    VT_CHECK(rc == 1 && log_has(a, need) && log_has(a, "expects 64"),
             "train drafter --resume of an SwiGLU-48 checkpoint: exit %d (%s.log)", rc, a);
    VT_CHECK(vt_run("test -e '%s/a-text/done.json'", a) != 0, "a refused resume finished the phase");
    VT_REQUIRE(vt_run("cp '%s' '%s'", mine, ck) == 0, "copy back");
    rc = run_recipe("llava", a, "--phase a --resume");
    VT_CHECK(rc == 0 && vt_run("test -e '%s/a-text/done.json'", a) == 0,
             "train drafter --resume of its own checkpoint: exit %d", rc);
    /* phase b starts from a-text/ckpt/ckpt.gguf: another model there is refused too */
    VT_REQUIRE(vt_run("cp '%s' '%s'", other, ck) == 0, "copy checkpoint");
    rc = run_recipe("llava", a, "--phase b");
    VT_CHECK(rc == 1 && log_has(a, need) && vt_run("test -e '%s/b-proj/done.json'", a) != 0,
             "phase b from an SwiGLU-48 phase-a checkpoint: exit %d (%s.log)", rc, a);
    printf("train drafter: --resume and phase b refuse a checkpoint of another model\n");
}

/* 4. export parity of the drafter */
/* Phase c's checkpoint (pooled k x k: the pool recipe) exported F32 and run by the engine (pictures pooled
 * the same way) against the training forward. */
/* Phase c (from phase b's weights) trained the projector and the LM, not the tower. */
static void check_phase_c_groups(const char *out, const char *phase) {
    vs_train_vlm *b = load_ckpt(out, "b-proj"), *c = load_ckpt(out, phase);
    VT_CHECK(same_group(b, c, VS_TRAIN_GROUP_VISION) && !same_group(b, c, VS_TRAIN_GROUP_LM) &&
                 !same_group(b, c, VS_TRAIN_GROUP_PROJECTOR),
             "%s: wrong groups trained", phase);
    vs_train_vlm_free(b), vs_train_vlm_free(c);
}

static void test_parity(const vs_world_dataset *train, const vs_tokenizer *tok, const char *phase, int pool) {
    vs_error err = {0};
    char out[600], lm_path[700], mm_path[700];
    snprintf(out, sizeof(out), "%s/d-straight", g_tmp);
    const int side = (4 + pool - 1) / pool, rows_per_image = side * side; /* the tiny tower: 4 x 4 patches */
    VT_REQUIRE(pool > 1 || rows_per_image == NP, "NP");
    vs_train_seqs q;
    memset(&q, 0, sizeof(q));
    VT_REQUIRE(vs_train_seqs_add_instruct(&q, train, tok, rows_per_image, &err) == VS_OK, "%s", err.msg);
    vs_train_vlm_config cfg = wt_config(vs_tokenizer_n_vocab(tok));
    vs_train_data_opts o = {
        .seq_len = 2048, .batch = 4, .image_rows = rows_per_image, .preproc = wt_preproc(&cfg), .seed = 3};
    vs_train_data *r = vs_train_data_new_items(vs_train_seqs_items(&q), q.n, &o, &err);
    VT_REQUIRE(r, "%s", err.msg);
    int max_B, max_T, max_I;
    vs_train_data_capacity(r, &max_B, &max_T, &max_I);
    char ck[800];
    snprintf(ck, sizeof(ck), "%s/%s/ckpt/ckpt.gguf", out, phase);
    vs_train_state st;
    vs_train_vlm *m = vs_train_vlm_load(ck, max_B, max_T, max_I, &st, &err);
    VT_REQUIRE(m, "%s", err.msg);
    VT_REQUIRE(vs_train_vlm_set_pool(m, pool, &err) == VS_OK && vs_train_vlm_image_rows(m) == rows_per_image,
               "pool %d: %s", pool, err.msg);
    snprintf(lm_path, sizeof(lm_path), "%s/draft-f32.gguf", g_tmp);
    snprintf(mm_path, sizeof(mm_path), "%s/draft-mmproj-f32.gguf", g_tmp);
    vs_gguf *tg = vs_gguf_open(g_tok, &err);
    VT_REQUIRE(tg, "%s", err.msg);
    vs_train_export_opts eo = {.type = VS_TYPE_F32, .tokenizer = tg};
    VT_REQUIRE(vs_train_vlm_export(m, lm_path, mm_path, &eo, &err) == VS_OK, "%s", err.msg);
    vs_gguf_close(tg);
    vs_threadpool *tp = vs_threadpool_new(2, &err);
    vs_lm *lm = vs_lm_load(lm_path, &err);
    vs_mmproj *mm = vs_mmproj_open(mm_path, &err);
    VT_REQUIRE(tp && lm && mm, "%s", err.msg);
    /* a single-image two-turn conversation, a single-image one and a text one */
    int64_t pick[3] = {-1, -1, -1};
    for (int64_t i = 0; i < vs_train_data_n_seqs(r); i++) {
        const vs_world_sample *s = vs_train_data_sample(r, i);
        if (pick[0] < 0 && s->n_images == 1 && s->n_turns == 2) pick[0] = i;
        if (pick[1] < 0 && s->n_images == 1 && s->n_turns == 1) pick[1] = i;
        if (pick[2] < 0 && s->n_images == 0) pick[2] = i;
    }
    VT_REQUIRE(pick[0] >= 0 && pick[1] >= 0 && pick[2] >= 0, "sample kinds missing");
    vs_train_batch b;
    VT_REQUIRE(vs_train_data_batch(r, pick, 3, &b, NULL, &err) == VS_OK, "%s", err.msg);
    float loss;
    VT_REQUIRE(vs_train_vlm_forward(m, tp, &b, &loss, &err) == VS_OK, "%s", err.msg);
    const float *ref = vs_train_vlm_logits(m);
    const int V = cfg.vocab;
    double worst = 0;
    for (int k = 0; k < 3; k++) {
        const vs_world_sample *s = vs_train_data_sample(r, pick[k]);
        vs_mm_image imgs[VS_WORLD_MAX_IMAGES];
        VT_REQUIRE(vs_mm_images_from_files(vs_mmproj_tower(mm), vs_mmproj_projector(mm), tp,
                                           (const char *const *)s->images, s->n_images, VS_PREPROC_LLAVA, pool,
                                           imgs, &err) == VS_OK,
                   "%s", err.msg);
        char *text = vs_train_conversation(s);
        vs_mm_prompt pq;
        vs_mm_prompt_opts po = {.lm_width = 32};
        VT_REQUIRE(vs_mm_prompt_build(&pq, tok, text, strlen(text), imgs, s->n_images, &po, &err) == VS_OK,
                   "%s", err.msg);
        const int64_t n = pq.n_rows;
        vs_kv *kv = vs_lm_kv_new(lm, 1, (int)n, VS_TYPE_F32, &err);
        vs_lm_row *rows = vs_calloc((size_t)n, sizeof(vs_lm_row));
        float *logits = vs_malloc(sizeof(float) * (size_t)n * V);
        VT_REQUIRE(kv && rows && logits, "alloc");
        vs_mm_prompt_rows(&pq, 0, n, 0, 0, rows);
        for (int64_t t = 0; t < n; t++) rows[t].want_logits = true;
        vs_lm_out lo = {.logits = logits};
        VT_REQUIRE(vs_lm_forward(lm, kv, tp, rows, (int)n, &lo, &err) == VS_OK, "%s", err.msg);
        const float *tr = ref + (size_t)k * b.T * V;
        double e = vt_max_rel_diff(logits, tr, (size_t)n * V);
        VT_CHECK(e <= 1e-4, "%s: the exported drafter's logits differ by %.3e", s->id, e);
        worst = e > worst ? e : worst;
        vs_free(rows), vs_free(logits), vs_free(text);
        vs_kv_free(kv);
        vs_mm_prompt_free(&pq);
        vs_mm_images_free(imgs, s->n_images);
    }
    printf("drafter export parity (%s, engine vs training forward, 3 conversations): worst %.2e\n", phase, worst);
    vs_mmproj_free(mm);
    vs_lm_free(lm);
    vs_threadpool_free(tp);
    vs_train_vlm_free(m);
    vs_train_data_free(r);
    vs_train_seqs_free(&q);
}

/* IbED's pooled-finetuned drafter: the pool recipe reuses phases a and b, trains phase c on 2x2-pooled
 * pictures (4 rows instead of 16), exports draft-pool; the engine's pooled rows give the training forward's
 * logits, also resumed in chunks; --pool without the pool recipe, --pool 1 and a window larger than the
 * patch grid (before any training) are refused. */
static void test_pool(const vs_world_dataset *train, const vs_tokenizer *tok) {
    char out[600], p[800];
    snprintf(out, sizeof(out), "%s/d-straight", g_tmp);
    VT_REQUIRE(run_recipe("pool", out, "") == 0, "pool recipe failed (%s.log)", out);
    VT_CHECK(vt_run("grep -q 'phase %s/b-proj: done' %s.log", out, out) == 0, "pool did not reuse phase b");
    VT_CHECK(vt_run("grep -q 'pictures pooled 2x2: 4 rows each' %s.log", out) == 0, "pool: no data line");
    snprintf(p, sizeof(p), "%s/draft-pool-mmproj.gguf", out);
    check_tower_bytes(p, 32);
    check_phase_c_groups(out, "c-pool");
    test_parity(train, tok, "c-pool", 2);
    /* resumed in chunks of 2 steps (phases a and b done by the llava chunks): the same export */
    char out2[600], p2[800];
    snprintf(out2, sizeof(out2), "%s/d-chunks", g_tmp);
    snprintf(p2, sizeof(p2), "%s/draft-pool.gguf", out2);
    int runs = 0;
    for (; runs < 6 && vt_run("test -f '%s'", p2) != 0; runs++)
        VT_REQUIRE(run_recipe("pool", out2, "--resume --chunk-steps 2") == 0, "pool chunk %d failed (%s.log)", runs,
                   out2);
    snprintf(p, sizeof(p), "%s/draft-pool.gguf", out);
    VT_CHECK(runs == 2 && files_equal(p, p2), "pool recipe resumed in %d chunks: export %s", runs,
             files_equal(p, p2) ? "equal" : "DIFFERS");
    char bad[700];
    snprintf(bad, sizeof(bad), "%s/d-bad-pool", g_tmp);
    VT_CHECK(run_recipe("llava", bad, "--pool 2") == 2 && vt_run("grep -q 'is for --recipe pool' %s.log", bad) == 0,
             "--pool with the llava recipe was accepted");
    VT_CHECK(run_recipe("pool", bad, "--pool 1") == 2, "--pool 1 (no pooling) was accepted");
    VT_CHECK(run_recipe("pool", bad, "--pool 5") == 1 && vt_run("grep -q 'larger than the target' %s.log", bad) == 0 &&
                 vt_run("test -e '%s/a-text/done.json'", bad) != 0,
             "a window larger than the 4 x 4 patch grid was not refused before training");
}

static int distill_cmd(const char *out, const char *extra) {
    return vt_run("%s data distill --model %s --mmproj %s --data %s --out %s --limit 1 --max-tokens 6 "
                  "--temps 0,1 -q %s > %s.log 2>&1",
                  vt_cli(), g_tlm, g_tmm, g_dir, out, extra, out);
}

/* 5. distill */
static void test_distill(const vs_world_dataset *train) {
    vs_error err = {0};
    char f1[600], f2[600];
    snprintf(f1, sizeof(f1), "%s/dist-straight.jsonl", g_tmp);
    snprintf(f2, sizeof(f2), "%s/dist-chunks.jsonl", g_tmp);
    VT_REQUIRE(distill_cmd(f1, "") == 0, "data distill failed (%s.log)", f1);
    VT_REQUIRE(distill_cmd(f2, "--max-jobs 3") == 0, "data distill failed (%s.log)", f2);
    /* simulate a crash in the middle of a record: a half line is dropped on resume */
    FILE *fp = fopen(f2, "a");
    VT_REQUIRE(fp, "open");
    fputs("{\"id\":\"train-vq", fp);
    fclose(fp);
    VT_REQUIRE(distill_cmd(f2, "") == 0, "data distill resume failed (%s.log)", f2);
    VT_CHECK(files_equal(f1, f2), "distill: interrupted + resumed differs from uninterrupted");
    vs_distill_file d;
    VT_REQUIRE(vs_distill_read(f1, false, &d, &err) == VS_OK, "%s", err.msg);
    int64_t convs = 0;
    uint32_t seen = 0;
    for (int64_t i = 0; i < train->n; i++) {
        const vs_world_sample *s = &train->samples[i];
        if (vs_drafter_turns(s) && !(seen & VS_WORLD_SUITE_BIT(s->suite)))
            seen |= VS_WORLD_SUITE_BIT(s->suite), convs++;
    }
    VT_CHECK(d.h.n_settings == 2 && d.h.settings[1].temperature == 1.0f && d.h.settings[0].top_p == 0.9f &&
                 d.h.max_tokens == 6 && d.h.vocab == 512 && d.h.limit == 1,
             "distill header");
    VT_CHECK(d.n == convs * 2, "distill: %lld records for %lld conversations x 2 settings", (long long)d.n,
             (long long)convs);
    /* round trip of every record; greedy records equal the greedy answerer */
    vs_lm *lm = vs_lm_load(g_tlm, &err);
    vs_mmproj *mm = vs_mmproj_open(g_tmm, &err);
    vs_threadpool *tp = vs_threadpool_new(1, &err);
    VT_REQUIRE(lm && mm && tp, "%s", err.msg);
    vs_tokenizer *tok = vs_tokenizer_from_gguf(vs_lm_gguf(lm), &err);
    vs_eval_lm_opts eo = {.max_tokens = 6};
    vs_eval_lm *e = tok ? vs_eval_lm_new(lm, mm, tok, tp, &eo, &err) : NULL;
    VT_REQUIRE(e, "%s", err.msg);
    int greedy_checked = 0;
    for (int64_t i = 0; i < d.n; i++) {
        const vs_distill_record *r = &d.r[i];
        VT_CHECK(r->job == i && r->setting == (int)(i % 2) && r->seed == 1 + (uint64_t)i, "record %lld order",
                 (long long)i);
        char *js = vs_distill_record_json(r);
        vs_distill_file tmp = {.h = d.h};
        char path[700];
        snprintf(path, sizeof(path), "%s/rt.jsonl", g_tmp);
        char *hj = vs_distill_header_json(&d.h);
        FILE *w = fopen(path, "w");
        VT_REQUIRE(w && js && hj, "write");
        fprintf(w, "%s\n%s\n", hj, js);
        fclose(w);
        VT_REQUIRE(vs_distill_read(path, false, &tmp, &err) == VS_OK && tmp.n == 1, "%s", err.msg);
        char *js2 = vs_distill_record_json(&tmp.r[0]);
        VT_CHECK(js2 && !strcmp(js, js2), "record %lld does not round-trip", (long long)i);
        vs_free(js), vs_free(js2), vs_free(hj);
        vs_distill_file_free(&tmp);
        if (r->temperature == 0) {
            const vs_world_sample *s = NULL;
            for (int64_t j = 0; j < train->n && !s; j++)
                if (!strcmp(train->samples[j].id, r->id)) s = &train->samples[j];
            VT_REQUIRE(s, "record names %s", r->id);
            char *prompt = vs_eval_prompt(s, 0, NULL), *ans = NULL;
            int64_t nt = 0;
            bool eos = false;
            VT_REQUIRE(vs_eval_lm_answer(e, s, prompt, s->turns[0].n_images, &ans, &nt, &eos, &err) == VS_OK,
                       "%s", err.msg);
            VT_CHECK(!strcmp(ans, r->turns[0].answer) && nt == r->turns[0].tokens && eos == r->turns[0].eos,
                     "%s: greedy record '%s' vs answerer '%s'", r->id, r->turns[0].answer, ans);
            vs_free(prompt), vs_free(ans);
            greedy_checked++;
        }
    }
    VT_CHECK(greedy_checked == convs, "%d greedy records checked", greedy_checked);
    vs_eval_lm_free(e);
    vs_tokenizer_free(tok);
    vs_threadpool_free(tp);
    vs_mmproj_free(mm);
    vs_lm_free(lm);
    vs_distill_file_free(&d);
    /* a half-written line is an error when not resuming */
    fp = fopen(f2, "a");
    fputs("{\"id\"", fp);
    fclose(fp);
    VT_CHECK(vs_distill_read(f2, false, &d, &err) == VS_ERR_FORMAT && strstr(err.msg, "newline"),
             "partial: %s", err.msg);
    /* a missing target: a clear error naming the file */
    snprintf(f2, sizeof(f2), "%s/dist-missing.jsonl", g_tmp);
    VT_CHECK(vt_run("%s data distill --model %s/nope.gguf --mmproj %s --data %s --out %s -q 2> %s.err",
                    vt_cli(), g_tmp, g_tmm, g_dir, f2, f2) == 1 &&
                 vt_run("grep -q 'nope.gguf' %s.err", f2) == 0,
             "a missing target model is not reported");
    printf("distill: %lld records (%lld conversations x 2 settings), resume exact, round trip, greedy = "
           "answerer\n",
           (long long)convs * 2, (long long)convs);
}

/* A distill file whose "answers" are the reference answers (a random tiny target never stops). */
static void write_reference_distill(const char *path, const vs_world_dataset *train, int vocab) {
    vs_distill_header h;
    memset(&h, 0, sizeof(h));
    snprintf(h.target, sizeof(h.target), "%.500s", g_tlm);
    snprintf(h.mmproj, sizeof(h.mmproj), "%.500s", g_tmm);
    snprintf(h.data, sizeof(h.data), "%s", g_dir);
    snprintf(h.split, sizeof(h.split), "train");
    snprintf(h.suites, sizeof(h.suites), "all");
    h.max_tokens = 256, h.seed = 1, h.vocab = vocab;
    vs_error err = {0};
    VT_REQUIRE(vs_distill_parse_temps("0,0.7", 0.9f, &h, &err) == VS_OK, "%s", err.msg);
    FILE *f = fopen(path, "w");
    VT_REQUIRE(f, "open %s", path);
    char *hj = vs_distill_header_json(&h);
    fprintf(f, "%s\n", hj);
    vs_free(hj);
    int64_t job = 0;
    for (int64_t i = 0; i < train->n; i++) {
        const vs_world_sample *s = &train->samples[i];
        int k = vs_drafter_turns(s);
        for (int set = 0; k && set < 2; set++, job++) {
            vs_distill_record r = {.id = s->id,
                                   .suite = s->suite,
                                   .job = job,
                                   .setting = set,
                                   .temperature = h.settings[set].temperature,
                                   .top_p = 0.9f,
                                   .seed = 1 + (uint64_t)job,
                                   .n_turns = k};
            for (int t = 0; t < k; t++)
                r.turns[t] = (vs_distill_turn){s->turns[t].assistant, 10, set == 0 || t == 0};
            char *js = vs_distill_record_json(&r);
            fprintf(f, "%s\n", js);
            vs_free(js);
        }
    }
    fclose(f);
}

/* 5 (training) + 6 */
static void test_massv_and_errors(const vs_world_dataset *train) {
    char out[600], dist[600], bad[700];
    snprintf(out, sizeof(out), "%s/d-straight", g_tmp);
    snprintf(dist, sizeof(dist), "%s/dist-ref.jsonl", g_tmp);
    write_reference_distill(dist, train, 512);
    char extra[800];
    snprintf(extra, sizeof(extra), "--distill %s", dist);
    VT_REQUIRE(run_recipe("massv", out, extra) == 0, "massv recipe failed (%s.log)", out);
    VT_CHECK(vt_run("grep -q 'phase %s/a-text: done' %s.log", out, out) == 0, "massv did not reuse phase a");
    VT_CHECK(vt_run("grep -q 'skipped as cut before EOS' %s.log", out) == 0, "massv: no data line");
    char p[800];
    snprintf(p, sizeof(p), "%s/draft-massv-mmproj.gguf", out);
    check_tower_bytes(p, 32);
    check_phase_c_groups(out, "c-massv");

    /* a retrained target (another tower in the same file) is not mistaken for the old one */
    char moved[700];
    snprintf(moved, sizeof(moved), "%s.orig", g_tmm);
    VT_REQUIRE(rename(g_tmm, moved) == 0, "rename");
    {
        vs_error e2 = {0};
        vs_gguf *tg = vs_gguf_open(g_tok, &e2);
        vs_train_vlm_config cf = wt_config(512);
        vs_train_vlm *m2 = vs_train_vlm_new(&cf, 1, 2, 1, &e2);
        VT_REQUIRE(tg && m2, "%s", e2.msg);
        vs_train_vlm_init(m2, 98);
        vs_train_export_opts eo = {.type = VS_TYPE_F16, .tokenizer = tg};
        VT_REQUIRE(vs_train_vlm_export(m2, NULL, g_tmm, &eo, &e2) == VS_OK, "%s", e2.msg);
        vs_train_vlm_free(m2);
        vs_gguf_close(tg);
    }
    VT_CHECK(run_recipe("llava", out, "--resume") == 1 && vt_run("grep -q 'target_tower_hash' %s.log", out) == 0,
             "finished phases were reused for another target tower");
    VT_REQUIRE(rename(moved, g_tmm) == 0, "rename back");
    VT_CHECK(run_recipe("llava", out, "--resume") == 0, "the original target is not accepted again");

    /* bad input */
    snprintf(bad, sizeof(bad), "%s/d-bad", g_tmp);
    VT_CHECK(
        vt_run("%s train drafter --recipe llava --data %s --tokenizer %s --target-mmproj %s/missing.gguf "
               "--out %s -q > %s.log 2>&1",
               vt_cli(), g_dir, g_tok, g_tmp, bad, bad) == 1 &&
            vt_run("grep -q 'missing.gguf' %s.log", bad) == 0,
        "a missing target mmproj is not reported clearly");
    /* a tokenizer with another vocabulary than the target's */
    char tok2[700];
    snprintf(tok2, sizeof(tok2), "%s/tok2.gguf", g_tmp);
    vs_error err = {0};
    vs_bpe_trainer *t = vs_bpe_trainer_new(&err);
    VT_REQUIRE(t, "%s", err.msg);
    for (int64_t i = 0; i < train->n; i++) {
        char *cv = vs_train_conversation(&train->samples[i]);
        VT_REQUIRE(cv && vs_bpe_add_text(t, cv, strlen(cv), &err) == VS_OK, "%s", err.msg);
        vs_free(cv);
    }
    vs_bpe_vocab v;
    VT_REQUIRE(vs_bpe_train(t, 400, 2, &v, &err) == VS_OK &&
                   vs_bpe_write_gguf(&v, tok2, "other", &err) == VS_OK,
               "%s", err.msg);
    vs_bpe_vocab_free(&v);
    vs_bpe_trainer_free(t);
    VT_CHECK(vt_run("%s train drafter --recipe llava --data %s --tokenizer %s --target %s --target-mmproj %s "
                    "--out %s "
                    "-q > %s.log 2>&1",
                    vt_cli(), g_dir, tok2, g_tlm, g_tmm, bad, bad) == 1 &&
                 vt_run("grep -q 'vocabulary mismatch' %s.log", bad) == 0,
             "a tokenizer other than the target's is not refused");
    VT_CHECK(
        vt_run("%s train drafter --recipe massv --data %s --tokenizer %s --target-mmproj %s --distill %s "
               "--out %s -q > %s.log 2>&1",
               vt_cli(), g_dir, tok2, g_tmm, dist, bad, bad) == 1 &&
            vt_run("grep -q 'vocabulary mismatch' %s.log", bad) == 0,
        "a distill file of another vocabulary is not refused");
    VT_CHECK(vt_run("%s train drafter --recipe massv --data %s --tokenizer %s --target-mmproj %s --out %s -q "
                    "> %s.log 2>&1",
                    vt_cli(), g_dir, g_tok, g_tmm, bad, bad) == 2,
             "massv without --distill is not a usage error");
}

int main(void) {
    double t0 = vs_time_now();
    snprintf(g_tmp, sizeof(g_tmp), "%s", vt_tmpdir());
    wt_make("dworld", 3, 1, 512, g_dir, g_tok, sizeof(g_dir));
    make_target();
    vs_error err = {0};
    vs_world_dataset *train = vs_world_load(g_dir, "train", VS_WORLD_ALL_SUITES, &err);
    vs_world_dataset *caps = vs_world_load(g_dir, "captions", VS_WORLD_ALL_SUITES, &err);
    vs_tokenizer *tok = vs_tokenizer_load(g_tok, &err);
    VT_REQUIRE(train && caps && tok, "%s", err.msg);
    test_data(train, caps, tok);
    test_recipe();
    test_resume_other_model();
    test_parity(train, tok, "c-llava", 1);
    test_pool(train, tok);
    test_distill(train);
    test_massv_and_errors(train);
    vs_tokenizer_free(tok);
    vs_world_dataset_free(train);
    vs_world_dataset_free(caps);
    printf("%.1f s\n", vs_time_now() - t0);
    return vt_finish("train_drafter");
}
