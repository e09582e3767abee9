/* msd_run: the feature drafters' recipe (`vlmspec train head --kind msd|dream`) on a tiny world and a tiny
 * target.
 *   1. the data schedule: vs_msd_visual_prob is 0 over the first half and rises linearly to 1 at the last
 *      step; vs_msd_pick draws text-only records in the first half and visual ones at the last step,
 *      mixes them in one-stage mode, gives the same records for the same arguments and falls back to
 *      the other pool when one is empty;
 *   2. the run: the cache holds the chosen conversations, a record's features equal the target's
 *      features recomputed for its conversation (F16), the exported head loads and fits the target,
 *      eval.csv has a line per evaluation and the held-out top-1 is a fraction;
 *   3. resume: the run in chunks of 3 steps with --resume exports a byte-identical head and eval.csv; a
 *      deleted cache shard is rebuilt byte-identically; a run over another run's cache (--cache) makes no
 *      cache of its own and exports a BF16 head that loads; the DREAM model (--kind dream) over the same
 *      cache exports a file that loads for the target, byte-identical when run in chunks with --resume;
 *      with --mid-layer auto its own cache holds every record's intermediate targets (cache.json says so);
 *   4. bad input: a run directory reused without --resume, --resume with other settings (run.json and
 *      the cache's cache.json), an mmproj of another width, no more conversations than held out; the
 *      CLI refuses an unknown --kind, --no-decouple with dream, --two-stage with msd and a missing --data;
 *      a DREAM run resumed as an MSD head (run.json). */
#include <string.h>
#include <unistd.h>

#include "draft_dream.h"
#include "draft_msd.h"
#include "mmprompt.h"
#include "msd_cache.h"
#include "msd_run.h"
#include "quant.h"
#include "train_drafter.h"
#include "world_tiny.h"

static char g_dir[512], g_tok[512], g_tmp[400];

/* A tiny target (wt_config of `width`, weights from seed) as LM + mmproj files. */
static void make_model(int width, uint64_t seed, char *lm, char *mm, size_t cap, const char *name) {
    vs_error err = {0};
    vs_gguf *tg = vs_gguf_open(g_tok, &err);
    vs_tokenizer *tok = vs_tokenizer_load(g_tok, &err);
    VT_REQUIRE(tg && tok, "%s", err.msg);
    vs_train_vlm_config c = wt_config(vs_tokenizer_n_vocab(tok));
    c.width = width;
    vs_train_vlm *m = vs_train_vlm_new(&c, 1, 2, 1, &err);
    VT_REQUIRE(m, "%s", err.msg);
    vs_train_vlm_init(m, seed);
    snprintf(lm, cap, "%s/%s.gguf", g_tmp, name);
    snprintf(mm, cap, "%s/%s-mmproj.gguf", g_tmp, name);
    vs_train_export_opts eo = {.type = VS_TYPE_F32, .tokenizer = tg, .name = name};
    VT_REQUIRE(vs_train_vlm_export(m, lm, mm, &eo, &err) == VS_OK, "%s", err.msg);
    vs_train_vlm_free(m);
    vs_tokenizer_free(tok);
    vs_gguf_close(tg);
}

/* 1. */
static void test_schedule(void) {
    const int64_t S = 10;
    VT_CHECK(vs_msd_visual_prob(0, S) == 0 && vs_msd_visual_prob(4, S) == 0, "first half: %g %g",
             vs_msd_visual_prob(0, S), vs_msd_visual_prob(4, S));
    VT_CHECK(vs_msd_visual_prob(5, S) == 0.2 && vs_msd_visual_prob(7, S) == 0.6 && vs_msd_visual_prob(9, S) == 1,
             "second half: %g %g %g", vs_msd_visual_prob(5, S), vs_msd_visual_prob(7, S), vs_msd_visual_prob(9, S));
    int64_t text[5] = {0, 2, 4, 6, 8}, vis[5] = {1, 3, 5, 7, 9}, a[32], b[32];
    vs_msd_pools p = {.rec = {text, vis}, .n = {5, 5}, .two_stage = true};
    const int64_t total = 1000;
    bool first_text = true, last_vis = true;
    int mid_vis = 0;
    for (int64_t s = 0; s < total / 2; s += 37) {
        vs_msd_pick(&p, 7, s, total, 32, a);
        for (int i = 0; i < 32; i++) first_text &= a[i] % 2 == 0;
    }
    vs_msd_pick(&p, 7, total - 1, total, 32, a);
    for (int i = 0; i < 32; i++) last_vis &= a[i] % 2 == 1;
    for (int64_t s = 740; s < 760; s++) { /* p about 0.5 */
        vs_msd_pick(&p, 7, s, total, 32, a);
        for (int i = 0; i < 32; i++) mid_vis += a[i] % 2;
    }
    VT_CHECK(first_text, "a visual record in the first half");
    VT_CHECK(last_vis, "a text-only record at the last step");
    VT_CHECK(mid_vis > 640 * 0.4 && mid_vis < 640 * 0.6, "around p = 0.5: %d of 640 visual", mid_vis);
    vs_msd_pick(&p, 7, 123, total, 32, a);
    vs_msd_pick(&p, 7, 123, total, 32, b);
    VT_CHECK(!memcmp(a, b, sizeof(a)), "the same arguments picked other records");
    vs_msd_pick(&p, 8, 123, total, 32, b);
    VT_CHECK(memcmp(a, b, sizeof(a)), "another seed picked the same records");
    p.two_stage = false;
    int early_vis = 0;
    vs_msd_pick(&p, 7, 0, total, 32, a);
    for (int i = 0; i < 32; i++) early_vis += a[i] % 2;
    VT_CHECK(early_vis > 4 && early_vis < 28, "one-stage at step 0: %d of 32 visual", early_vis);
    p.two_stage = true, p.n[0] = 0; /* no text-only conversations: the visual ones stand in */
    vs_msd_pick(&p, 7, 0, total, 32, a);
    bool all_vis = true;
    for (int i = 0; i < 32; i++) all_vis &= a[i] % 2 == 1 && a[i] <= 9;
    VT_CHECK(all_vis, "an empty text pool did not give way");
}

static void opts_for(vs_msd_run_opts *o, const char *out, const char *lm, const char *mm) {
    vs_msd_run_opts_default(o);
    o->out = out, o->target = lm, o->mmproj = mm, o->data = g_dir;
    o->samples = 0, o->eval_seqs = 3, o->shard = 4, o->steps = 8, o->batch = 2, o->eval_every = 4;
    o->ckpt_every = 100, o->warmup = 2, o->lr = 3e-3, o->lr_min = 3e-4, o->threads = 1, o->quiet = true;
    o->n_head = 2, o->n_head_kv = 1, o->n_ff = 48;
}

static bool same_file(const char *a, const char *b) {
    uint8_t *da = NULL, *db = NULL;
    size_t na = 0, nb = 0;
    vs_error err = {0};
    const bool ok = vs_read_file(a, &da, &na, &err) == VS_OK && vs_read_file(b, &db, &nb, &err) == VS_OK &&
                    na == nb && !memcmp(da, db, na);
    vs_free(da), vs_free(db);
    return ok;
}

/* 2. A record's features against the target's, recomputed. */
static void check_record(const vs_msd_cache *c, int64_t r, const char *lm, const char *mm) {
    vs_error err = {0};
    vs_world_dataset *train = vs_world_load(g_dir, "train", VS_WORLD_ALL_SUITES, &err);
    vs_tokenizer *tok = vs_tokenizer_load(lm, &err);
    vs_mmproj *mp = vs_mmproj_open(mm, &err);
    vs_lm *t = vs_lm_load(lm, &err);
    VT_REQUIRE(train && tok && mp && t, "%s", err.msg);
    vs_train_seqs q;
    memset(&q, 0, sizeof(q));
    VT_REQUIRE(vs_train_seqs_add_instruct(&q, train, tok, 16, &err) == VS_OK, "%s", err.msg);
    const vs_train_item *items = vs_train_seqs_items(&q);
    const vs_msd_record *rec = &c->rec[r];
    VT_REQUIRE(rec->sample < (uint64_t)q.n, "record %lld names conversation %llu of %lld", (long long)r,
               (unsigned long long)rec->sample, (long long)q.n);
    const vs_train_example *ex = items[rec->sample].ex;
    VT_CHECK(ex->n_rows == rec->T && rec->visual == (ex->n_images > 0), "record %lld: %d rows, conversation %d",
             (long long)r, rec->T, ex->n_rows);
    vs_mm_image im[VS_WORLD_MAX_IMAGES];
    float *rows = NULL;
    if (ex->n_images) {
        VT_REQUIRE(vs_mm_images_from_files(vs_mmproj_tower(mp), vs_mmproj_projector(mp), NULL,
                                           (const char *const *)items[rec->sample].sample->images, ex->n_images,
                                           VS_PREPROC_LLAVA, 1, im, &err) == VS_OK, "%s", err.msg);
        rows = vs_malloc(sizeof(float) * 32 * 16 * (size_t)ex->n_images);
        for (int i = 0; i < ex->n_images; i++) memcpy(rows + (size_t)i * 16 * 32, im[i].rows, sizeof(float) * 16 * 32);
        vs_mm_images_free(im, ex->n_images);
    }
    vs_msd_seq s;
    VT_REQUIRE(vs_train_msd_sequence(t, NULL, ex->tokens, ex->img_row, ex->answer, ex->n_rows, rows, &s, &err) == VS_OK,
               "%s", err.msg);
    double worst = 0;
    for (int64_t i = 0; i < (int64_t)rec->T * 32; i++) {
        const double d = fabs(vs_fp16_to_fp32(rec->feat[i]) - s.feat[i]) / (fabs(s.feat[i]) + 1e-2);
        worst = d > worst ? d : worst;
    }
    VT_CHECK(worst < 2e-3, "record %lld: features differ from the target's by %.3g (relative)", (long long)r, worst);
    bool tokens = true;
    for (int i = 0; i < rec->T; i++) tokens &= rec->tokens[i] == (ex->img_row[i] >= 0 ? -1 : ex->tokens[i]);
    VT_CHECK(tokens, "record %lld: tokens differ", (long long)r);
    vs_msd_seq_free(&s);
    vs_free(rows);
    vs_lm_free(t);
    vs_mmproj_free(mp);
    vs_tokenizer_free(tok);
    vs_train_seqs_free(&q);
    vs_world_dataset_free(train);
}

/* 2 and 3. */
static void test_run(const char *lm, const char *mm) {
    vs_error err = {0};
    char a[600], b[600], pa[900], pb[900];
    snprintf(a, sizeof(a), "%s/run-a", g_tmp);
    snprintf(b, sizeof(b), "%s/run-b", g_tmp);
    vs_msd_run_opts o;
    opts_for(&o, a, lm, mm);
    vs_msd_run_result res;
    VT_REQUIRE(vs_msd_run(&o, &res, &err) == VS_OK, "run: %s", err.msg);
    VT_CHECK(res.finished && res.step == 8, "finished %d at step %lld", res.finished, (long long)res.step);
    const int64_t cached = res.cached;
    VT_CHECK(res.top1 >= 0 && res.top1 <= 1 && res.loss > 0, "held-out top-1 %g loss %g", res.top1, res.loss);
    /* the cache */
    snprintf(pa, sizeof(pa), "%s/cache", a);
    int64_t ns = 0;
    vs_msd_cache c;
    VT_REQUIRE(vs_msd_cache_count(pa, 32, &ns, &err) == VS_OK && ns > 1, "shards: %lld %s", (long long)ns, err.msg);
    VT_REQUIRE(vs_msd_cache_load(pa, 32, ns, &c, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(c.n == res.cached && c.n > o.eval_seqs, "cache of %lld records, run says %lld", (long long)c.n,
             (long long)res.cached);
    int64_t vis = -1;
    for (int64_t i = 0; i < c.n && vis < 0; i++)
        if (c.rec[i].visual) vis = i;
    VT_CHECK(vis >= 0, "no record with images");
    check_record(&c, 0, lm, mm);
    if (vis > 0) check_record(&c, vis, lm, mm);
    vs_msd_cache_free(&c);
    /* the head */
    snprintf(pa, sizeof(pa), "%s/msd-head.gguf", a);
    vs_msd_head *h = vs_msd_head_load(pa, &err);
    vs_lm *t = vs_lm_load(lm, &err);
    VT_REQUIRE(h && t, "%s", err.msg);
    VT_CHECK(vs_msd_head_check(h, t, &err) == VS_OK && vs_msd_head_decoupled(h), "head: %s", err.msg);
    vs_gguf *g = vs_gguf_open(pa, &err);
    VT_REQUIRE(g, "%s", err.msg);
    const vs_gguf_tensor *fw = vs_gguf_find_tensor(g, "fc.weight"), *fb = vs_gguf_find_tensor(g, "fc.bias"),
                         *dn = vs_gguf_find_tensor(g, "blk.0.ffn_down.weight");
    VT_CHECK(fw && fb && dn && fw->type == VS_TYPE_F16 && dn->type == VS_TYPE_F16 && fb->type == VS_TYPE_F32,
             "the head's matrices are not F16 by default, or a vector is not F32");
    vs_gguf_close(g);
    vs_msd_head_free(h);
    vs_lm_free(t);
    snprintf(pa, sizeof(pa), "%s/eval.csv", a);
    uint8_t *text = NULL;
    size_t n = 0;
    VT_REQUIRE(vs_read_file(pa, &text, &n, &err) == VS_OK, "%s", err.msg);
    int lines = 0;
    for (size_t i = 0; i < n; i++) lines += text[i] == '\n';
    VT_CHECK(lines == 4 && !strncmp((char *)text, "step,loss,top1", 14), "eval.csv: %d lines\n%s", lines, (char *)text);
    vs_free(text);
    /* 3. in chunks of 3 steps */
    opts_for(&o, b, lm, mm);
    o.chunk_steps = 3, o.resume = true;
    for (int k = 0; k < 3; k++) VT_REQUIRE(vs_msd_run(&o, &res, &err) == VS_OK, "chunk %d: %s", k, err.msg);
    VT_CHECK(res.finished, "three chunks of 3 did not finish 8 steps");
    const char *same[] = {"msd-head.gguf", "eval.csv", "cache/msd-00000.bin", "cache/cache.json", "run.json"};
    for (size_t i = 0; i < VS_ARRAY_LEN(same); i++) {
        snprintf(pa, sizeof(pa), "%s/%s", a, same[i]);
        snprintf(pb, sizeof(pb), "%s/%s", b, same[i]);
        VT_CHECK(same_file(pa, pb), "%s differs between the run and its resumed chunks", same[i]);
    }
    /* a lost shard is rebuilt */
    snprintf(pb, sizeof(pb), "%s/cache/msd-%05lld.bin", b, (long long)(ns - 1));
    VT_REQUIRE(unlink(pb) == 0, "unlink");
    o.cache_only = true;
    VT_REQUIRE(vs_msd_run(&o, &res, &err) == VS_OK, "rebuild: %s", err.msg);
    snprintf(pa, sizeof(pa), "%s/cache/msd-%05lld.bin", a, (long long)(ns - 1));
    VT_CHECK(same_file(pa, pb), "the rebuilt shard differs");
    /* a second run over run A's cache (--cache), exporting BF16: nothing recomputed, the head loads */
    char c2[600], cache_a[900];
    snprintf(c2, sizeof(c2), "%s/run-shared", g_tmp);
    snprintf(cache_a, sizeof(cache_a), "%s/cache", a);
    opts_for(&o, c2, lm, mm);
    o.cache = cache_a, o.mat_type = VS_TYPE_BF16, o.steps = 2;
    VT_REQUIRE(vs_msd_run(&o, &res, &err) == VS_OK, "shared cache: %s", err.msg);
    snprintf(pa, sizeof(pa), "%s/cache", c2);
    VT_CHECK(access(pa, F_OK) != 0 && res.cached == cached, "the shared cache was not used (%lld records)",
             (long long)res.cached);
    snprintf(pa, sizeof(pa), "%s/msd-head.gguf", c2);
    g = vs_gguf_open(pa, &err);
    VT_REQUIRE(g, "%s", err.msg);
    fw = vs_gguf_find_tensor(g, "fc.weight");
    VT_CHECK(fw && fw->type == VS_TYPE_BF16, "--type bf16: fc.weight is not BF16");
    vs_gguf_close(g);
    h = vs_msd_head_load(pa, &err);
    t = vs_lm_load(lm, &err);
    VT_CHECK(h && t && vs_msd_head_check(h, t, &err) == VS_OK, "BF16 head: %s", err.msg);
    vs_msd_head_free(h);
    vs_lm_free(t);
    /* the DREAM model over the same cache: its file loads for the target; in chunks with --resume it comes
     * out byte-identical */
    {
        char d1[600], d2[600], f1[700], f2[700];
        snprintf(d1, sizeof(d1), "%s/run-dream", g_tmp);
        snprintf(d2, sizeof(d2), "%s/run-dream-chunks", g_tmp);
        opts_for(&o, d1, lm, mm);
        o.cache = cache_a, o.dream = true, o.two_stage = false, o.steps = 6;
        VT_REQUIRE(vs_msd_run(&o, &res, &err) == VS_OK && res.finished, "DREAM run: %s", err.msg);
        snprintf(f1, sizeof(f1), "%s/dream.gguf", d1);
        vs_dream_head *dh = vs_dream_head_load(f1, &err);
        t = vs_lm_load(lm, &err);
        VT_CHECK(dh && t && vs_dream_head_check(dh, t, &err) == VS_OK, "the DREAM file: %s", err.msg);
        vs_dream_head_free(dh);
        vs_lm_free(t);
        VT_CHECK(res.top1 >= 0 && res.top1 <= 1 && res.step == 6, "DREAM held-out figures (step %lld)",
                 (long long)res.step);
        opts_for(&o, d2, lm, mm);
        o.cache = cache_a, o.dream = true, o.two_stage = false, o.steps = 6, o.chunk_steps = 4, o.resume = true;
        for (int k = 0; k < 2; k++) VT_REQUIRE(vs_msd_run(&o, &res, &err) == VS_OK, "DREAM chunk %d: %s", k, err.msg);
        snprintf(f2, sizeof(f2), "%s/dream.gguf", d2);
        VT_CHECK(res.finished && same_file(f1, f2), "the DREAM file differs between the run and its resumed chunks");
        snprintf(f1, sizeof(f1), "%s/run.json", d1);
        VT_CHECK(vt_file_has(f1, "\"kind\":\"dream\"") && !vt_file_has(f1, "decoupled"), "DREAM run.json");
        /* with intermediate targets (the least-entropy layer) in a cache of its own */
        char d3[600], cj[700];
        snprintf(d3, sizeof(d3), "%s/run-dream-mid", g_tmp);
        opts_for(&o, d3, lm, mm);
        o.dream = true, o.two_stage = false, o.steps = 4, o.mid_layer = VS_MSD_MID_AUTO;
        VT_REQUIRE(vs_msd_run(&o, &res, &err) == VS_OK && res.finished, "DREAM run with mid: %s", err.msg);
        snprintf(cj, sizeof(cj), "%s/cache/cache.json", d3);
        VT_CHECK(vt_file_has(cj, "\"mid_layer\":-1"), "cache.json records the intermediate targets");
        snprintf(cj, sizeof(cj), "%s/cache", d3);
        vs_msd_cache mc;
        int64_t nsh = 0;
        VT_REQUIRE(vs_msd_cache_count(cj, 32, &nsh, &err) == VS_OK && vs_msd_cache_load(cj, 32, nsh, &mc, &err) == VS_OK,
                   "%s", err.msg);
        int with = 0;
        for (int64_t i = 0; i < mc.n; i++) with += mc.rec[i].mid != NULL && mc.rec[i].mid_layer == 1;
        VT_CHECK(mc.n > 0 && with == mc.n, "%d of %lld records hold layer 1's intermediate targets", with,
                 (long long)mc.n);
        vs_msd_cache_free(&mc);
        /* resuming a DREAM run as an MSD head is refused before any work */
        opts_for(&o, d2, lm, mm);
        o.cache = cache_a, o.steps = 6, o.resume = true;
        VT_CHECK(vs_msd_run(&o, NULL, &err) == VS_ERR_INVALID && strstr(err.msg, "run.json"), "kind switch: %s",
                 err.msg);
    }
    /* --time-limit stops the cache stage after a shard; resumed, the run equals run A */
    char tl[600];
    snprintf(tl, sizeof(tl), "%s/run-limit", g_tmp);
    opts_for(&o, tl, lm, mm);
    o.time_limit = 1e-9, o.resume = true;
    VT_REQUIRE(vs_msd_run(&o, &res, &err) == VS_OK, "time-limited: %s", err.msg);
    snprintf(pb, sizeof(pb), "%s/cache", tl);
    int64_t ns_limited = -1;
    VT_CHECK(!res.finished && vs_msd_cache_count(pb, 32, &ns_limited, &err) == VS_OK && ns_limited == 1,
             "--time-limit in the cache stage: finished %d, %lld shards", res.finished, (long long)ns_limited);
    o.time_limit = 0;
    VT_REQUIRE(vs_msd_run(&o, &res, &err) == VS_OK && res.finished, "resumed after the limit: %s", err.msg);
    snprintf(pa, sizeof(pa), "%s/msd-head.gguf", a);
    snprintf(pb, sizeof(pb), "%s/msd-head.gguf", tl);
    VT_CHECK(same_file(pa, pb), "the time-limited run, resumed, differs from the uninterrupted one");
    /* 4. bad input */
    opts_for(&o, tl, lm, mm); /* resumed over a cache of other samples: refused by run.json */
    char other_cache[600];
    snprintf(other_cache, sizeof(other_cache), "%s/cache-other", g_tmp);
    o.resume = true, o.cache = other_cache, o.samples = 6;
    VT_CHECK(vs_msd_run(&o, NULL, &err) == VS_ERR_INVALID && strstr(err.msg, "run.json") && access(other_cache, F_OK) != 0,
             "other cache (refused before building it): %s", err.msg);
    opts_for(&o, a, lm, mm);
    VT_CHECK(vs_msd_run(&o, NULL, &err) == VS_ERR_INVALID && strstr(err.msg, "--resume"), "reuse: %s", err.msg);
    o.resume = true, o.lr = 1e-3;
    VT_CHECK(vs_msd_run(&o, NULL, &err) == VS_ERR_INVALID && strstr(err.msg, "run.json"), "other lr: %s", err.msg);
    char c4[600];
    snprintf(c4, sizeof(c4), "%s/run-x", g_tmp); /* a new run over run A's cache with another sample count */
    opts_for(&o, c4, lm, mm);
    o.cache = cache_a, o.samples = 5;
    VT_CHECK(vs_msd_run(&o, NULL, &err) == VS_ERR_INVALID && strstr(err.msg, "cache.json"), "other samples: %s", err.msg);
    char c3[600];
    snprintf(c3, sizeof(c3), "%s/run-c", g_tmp);
    opts_for(&o, c3, lm, mm);
    o.samples = 3, o.eval_seqs = 3;
    VT_CHECK(vs_msd_run(&o, NULL, &err) == VS_ERR_INVALID && strstr(err.msg, "held out") && access(c3, F_OK) != 0,
             "all held out (refused before any work): %s", err.msg);
}

static void test_bad(const char *lm, const char *other_mm) {
    vs_error err = {0};
    char d[600];
    snprintf(d, sizeof(d), "%s/run-d", g_tmp);
    vs_msd_run_opts o;
    opts_for(&o, d, lm, other_mm);
    VT_CHECK(vs_msd_run(&o, NULL, &err) == VS_ERR_INVALID && strstr(err.msg, "width 48"), "other mmproj: %s",
             err.msg);
    snprintf(d, sizeof(d), "%s/run-e", g_tmp);
    VT_CHECK(vt_run("%s train head --kind medusa -m %s --mmproj %s --data %s --out %s > %s.log 2>&1", vt_cli(), lm,
                    other_mm, g_dir, d, d) == 2, "--kind medusa accepted");
    VT_CHECK(vt_run("%s train head --kind dream --no-decouple -m %s --mmproj %s --data %s --out %s > %s.log 2>&1",
                    vt_cli(), lm, other_mm, g_dir, d, d) == 2, "--kind dream --no-decouple accepted");
    VT_CHECK(vt_run("%s train head --kind msd --two-stage -m %s --mmproj %s --data %s --out %s > %s.log 2>&1",
                    vt_cli(), lm, other_mm, g_dir, d, d) == 2, "--kind msd --two-stage accepted");
    VT_CHECK(vt_run("%s train head --kind msd -m %s --mmproj %s --out %s > %s.log 2>&1", vt_cli(), lm, other_mm, d,
                    d) == 2, "no --data accepted");
}

int main(void) {
    double t0 = vs_time_now();
    snprintf(g_tmp, sizeof(g_tmp), "%s", vt_tmpdir());
    (void)wt_preproc; /* a world_tiny.h helper this test does not need */
    test_schedule();
    wt_make("mworld", 3, 1, 512, g_dir, g_tok, sizeof(g_dir));
    char lm[600], mm[600], olm[600], omm[600];
    make_model(32, 99, lm, mm, sizeof(lm), "target");
    make_model(48, 98, olm, omm, sizeof(olm), "other");
    test_run(lm, mm);
    test_bad(lm, omm);
    printf("%.1f s\n", vs_time_now() - t0);
    return vt_finish("msd_run");
}
