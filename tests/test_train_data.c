/* train_data: world samples as training batches, and the trained model against the inference engine.
 *   1. encoding: every conversation's answer rows decode to exactly the reference answers (+ </s>),
 *      image rows sit where the markers are, each turn's prompt is a prefix;
 *   2. no silent truncation: too-long conversations are skipped and counted, per suite;
 *   3. batches: targets, loss mask, padding, image rows and pixels (= the image file preprocessed);
 *      every epoch visits every sequence once; length buckets; look-ahead loss counts;
 *      prompt_loss weights prompt text rows (and the look-ahead sums the weights);
 *   4. resuming from a state gives the batches an uninterrupted reader gives;
 *   5. export parity on world samples WITH images: a tiny VLM trained a few steps on the tiny world,
 *      exported (F32), run by vs_vision + vs_lm through mmprompt (images loaded from the PNG files,
 *      prompt text laid out by vs_mm_prompt_build) gives the training forward's logits within 1e-4,
 *      row for row, for multi-image, two-turn, story and text-only samples. */
#include <math.h>
#include <string.h>

#include "kv.h"
#include "lm.h"
#include "mmprompt.h"
#include "world_tiny.h"

#define NP 16 /* rows per image of the tiny config (64 / 16)^2 */

static int64_t max_i64(int64_t a, int64_t b) { return a > b ? a : b; }

/* 1. encoding of every sample */
static void test_encode(const vs_world_dataset *d, const vs_tokenizer *tok) {
    vs_error err = {0};
    int64_t checked_turns = 0;
    for (int64_t i = 0; i < d->n; i++) {
        const vs_world_sample *s = &d->samples[i];
        vs_train_example ex;
        VT_REQUIRE(vs_train_encode(s, tok, NP, &ex, &err) == VS_OK, "%s", err.msg);
        VT_CHECK(ex.tokens[0] == vs_tokenizer_bos(tok), "%s: row 0 is not BOS", s->id);
        VT_CHECK(ex.n_images == s->n_images, "%s: %d images", s->id, ex.n_images);
        /* image rows: n_images runs of NP consecutive rows, patches in order */
        int64_t n_img_rows = 0;
        for (int32_t r = 0; r < ex.n_rows; r++) {
            if (ex.img_row[r] < 0) {
                VT_CHECK(ex.tokens[r] >= 0, "%s row %d: neither token nor image", s->id, r);
                continue;
            }
            VT_CHECK(ex.tokens[r] == -1 && !ex.answer[r], "%s row %d: image row with a token", s->id, r);
            int j = ex.img_row[r] % NP;
            VT_CHECK(j == 0 || ex.img_row[r - 1] == ex.img_row[r] - 1, "%s row %d: image rows out of order",
                     s->id, r);
            n_img_rows++;
        }
        VT_CHECK(n_img_rows == (int64_t)s->n_images * NP, "%s: %lld image rows", s->id,
                 (long long)n_img_rows);
        /* answers: turn t's rows decode to " " + reference answer, then EOS; nothing else is answer */
        int32_t n_ans = 0;
        for (int t = 0; t < s->n_turns; t++) {
            int32_t a = ex.turn_start[t], b = ex.turn_end[t];
            VT_REQUIRE(a > 0 && b > a && b <= ex.n_rows, "%s turn %d rows [%d, %d)", s->id, t, a, b);
            VT_CHECK(ex.tokens[b - 1] == vs_tokenizer_eos(tok), "%s turn %d does not end in EOS", s->id, t);
            char *txt = vs_detokenize(tok, ex.tokens + a, b - 1 - a, 0, NULL, &err);
            VT_REQUIRE(txt, "%s", err.msg);
            VT_CHECK(txt[0] == ' ' && !strcmp(txt + 1, s->turns[t].assistant),
                     "%s turn %d answer rows: '%.60s'", s->id, t, txt);
            vs_free(txt);
            for (int32_t r = a; r < b; r++) VT_CHECK(ex.answer[r], "%s row %d not marked", s->id, r);
            n_ans += b - a;
            /* the prompt of turn t, laid out as inference does, is the conversation's first a rows */
            char *pt = vs_world_prompt(s, t, false);
            VT_CHECK(pt != NULL, "prompt");
            vs_mm_prompt q;
            float dummy[NP] = {0};
            vs_mm_image im[VS_WORLD_MAX_IMAGES];
            int nm = vs_mm_count_markers(pt, strlen(pt), NULL);
            for (int k = 0; k < nm; k++) im[k] = (vs_mm_image){dummy, NP, 1};
            VT_REQUIRE(vs_mm_prompt_build(&q, tok, pt, strlen(pt), im, nm, NULL, &err) == VS_OK, "%s",
                       err.msg);
            VT_CHECK(q.n_rows == a, "%s turn %d: prompt has %lld rows, answer starts at %d", s->id, t,
                     (long long)q.n_rows, a);
            for (int64_t r = 0; r < q.n_rows && r < a; r++)
                VT_CHECK(q.tokens[r] == ex.tokens[r], "%s turn %d row %lld differs", s->id, t, (long long)r);
            vs_mm_prompt_free(&q);
            vs_free(pt);
            checked_turns++;
        }
        int32_t marked = 0;
        for (int32_t r = 0; r < ex.n_rows; r++) marked += ex.answer[r];
        VT_CHECK(marked == n_ans && ex.n_answer == n_ans, "%s: %d rows marked, %d in answers", s->id, marked,
                 n_ans);
        vs_train_example_free(&ex);
    }
    printf("encode: %lld samples, %lld turns: answer rows = reference answers + </s>, prompts are prefixes\n",
           (long long)d->n, (long long)checked_turns);
}

static vs_train_data *make_reader(const vs_world_dataset *d, const vs_tokenizer *tok, int seq_len, int batch,
                                  int bucket, uint64_t seed) {
    vs_error err = {0};
    vs_train_vlm_config c = wt_config(vs_tokenizer_n_vocab(tok));
    vs_train_data_opts o = {.seq_len = seq_len,
                            .batch = batch,
                            .image_rows = NP,
                            .preproc = wt_preproc(&c),
                            .bucket = bucket,
                            .seed = seed};
    vs_train_data *r = vs_train_data_new(&d, 1, tok, &o, &err);
    VT_REQUIRE(r, "%s", err.msg);
    return r;
}

/* 2. skipping */
static void test_skip(const vs_world_dataset *d, const vs_tokenizer *tok) {
    vs_error err = {0};
    int64_t *rows = vs_malloc(sizeof(int64_t) * (size_t)d->n), longest = 0;
    for (int64_t i = 0; i < d->n; i++) {
        vs_train_example ex;
        VT_REQUIRE(vs_train_encode(&d->samples[i], tok, NP, &ex, &err) == VS_OK, "%s", err.msg);
        rows[i] = ex.n_rows;
        longest = max_i64(longest, ex.n_rows);
        vs_train_example_free(&ex);
    }
    /* a limit below the story length: stories (5 images) must go, and be counted */
    int64_t story_min = longest;
    for (int64_t i = 0; i < d->n; i++)
        if (d->samples[i].suite == VS_WORLD_STORY && rows[i] < story_min) story_min = rows[i];
    int limit = (int)story_min - 1;
    vs_train_data *r = make_reader(d, tok, limit, 4, 1, 1);
    const vs_train_data_stats *st = vs_train_data_get_stats(r);
    int64_t want_skip = 0, want_longest_skip = 0, want_kept_rows = 0, su_skip[VS_WORLD_N_SUITES] = {0};
    for (int64_t i = 0; i < d->n; i++)
        if (rows[i] > limit)
            want_skip++, su_skip[d->samples[i].suite]++,
                want_longest_skip = max_i64(want_longest_skip, rows[i]);
        else
            want_kept_rows += rows[i];
    VT_CHECK(st->n_samples == d->n && st->n_seqs + st->n_skipped == d->n, "counts %lld + %lld != %lld",
             (long long)st->n_seqs, (long long)st->n_skipped, (long long)d->n);
    VT_CHECK(st->n_skipped == want_skip && st->n_skipped >= 1, "skipped %lld, expected %lld",
             (long long)st->n_skipped, (long long)want_skip);
    VT_CHECK(st->skipped[VS_WORLD_STORY] == su_skip[VS_WORLD_STORY] && st->kept[VS_WORLD_STORY] == 0,
             "stories: %lld skipped, %lld kept", (long long)st->skipped[VS_WORLD_STORY],
             (long long)st->kept[VS_WORLD_STORY]);
    VT_CHECK(st->longest_skipped == want_longest_skip && st->longest <= limit, "longest %lld / skipped %lld",
             (long long)st->longest, (long long)st->longest_skipped);
    VT_CHECK(st->rows == want_kept_rows, "rows %lld vs %lld", (long long)st->rows, (long long)want_kept_rows);
    printf("skip: seq_len %d keeps %lld, skips %lld (all %lld stories; longest skipped %lld rows)\n", limit,
           (long long)st->n_seqs, (long long)st->n_skipped, (long long)st->skipped[VS_WORLD_STORY],
           (long long)st->longest_skipped);
    vs_train_data_free(r);
    /* nothing fits: an error naming the sizes */
    vs_train_vlm_config c = wt_config(vs_tokenizer_n_vocab(tok));
    vs_train_data_opts o = {
        .seq_len = 8, .batch = 2, .image_rows = NP, .preproc = wt_preproc(&c), .bucket = 1};
    VT_CHECK(vs_train_data_new(&d, 1, tok, &o, &err) == NULL && err.code == VS_ERR_INVALID, "nothing fits");
    printf("nothing fits: %s\n", err.msg);
    vs_free(rows);
}

/* Checks one batch against the sequences' encodings; pw: the reader's prompt_loss. Returns the sum of
 * the batch's loss weights. */
static double check_batch(vs_train_data *r, const vs_tokenizer *tok, const vs_train_batch *b,
                          const vs_train_batch_info *info, bool check_pixels, float pw) {
    vs_error err = {0};
    int64_t counted = 0, real = 0;
    double weight = 0;
    int img_base = 0;
    for (int k = 0; k < b->B; k++) {
        const vs_world_sample *s = vs_train_data_sample(r, info->seqs[k]);
        vs_train_example ex;
        VT_REQUIRE(vs_train_encode(s, tok, NP, &ex, &err) == VS_OK, "%s", err.msg);
        VT_CHECK(ex.n_rows <= b->T, "sequence longer than the batch");
        for (int t = 0; t < b->T; t++) {
            size_t i = (size_t)k * b->T + t;
            if (t < ex.n_rows) {
                VT_CHECK(b->tokens[i] == ex.tokens[t], "%s row %d token", s->id, t);
                int want = ex.img_row[t] >= 0 ? img_base * NP + ex.img_row[t] : -1;
                VT_CHECK(b->img_row[i] == want, "%s row %d image row %d vs %d", s->id, t, b->img_row[i],
                         want);
            } else {
                VT_CHECK(b->img_row[i] == -1 && b->tokens[i] >= 0, "padding row %d", t);
            }
            /* answers weigh 1, other text rows after BOS pw, image rows and padding 0 */
            const bool in = t + 1 < ex.n_rows;
            const float w = !in ? 0.0f : ex.answer[t + 1] ? 1.0f : ex.tokens[t + 1] >= 0 ? pw : 0.0f;
            VT_CHECK(b->loss_mask[i] == w, "%s row %d mask %g, want %g", s->id, t, b->loss_mask[i], w);
            if (w > 0) VT_CHECK(b->targets[i] == ex.tokens[t + 1], "%s row %d target", s->id, t);
            counted += w > 0;
            weight += w;
        }
        if (check_pixels && s->n_images > 0) {
            vs_image img;
            VT_REQUIRE(vs_image_load(&img, s->images[0], &err) == VS_OK, "%s", err.msg);
            vs_train_vlm_config c = wt_config(vs_tokenizer_n_vocab(tok));
            vs_preproc pp = wt_preproc(&c);
            float *px = vs_malloc(sizeof(float) * 3 * 64 * 64);
            VT_REQUIRE(px && vs_image_preprocess(&img, &pp, px, &err) == VS_OK, "%s", err.msg);
            VT_CHECK(!memcmp(px, b->pixels + (size_t)img_base * 3 * 64 * 64, sizeof(float) * 3 * 64 * 64),
                     "%s: batch pixels differ from the preprocessed image file", s->id);
            vs_free(px);
            vs_image_free(&img);
        }
        img_base += ex.n_images;
        real += ex.n_rows;
        vs_train_example_free(&ex);
    }
    VT_CHECK(img_base == b->n_images, "%d images in the batch, %d in its sequences", b->n_images, img_base);
    VT_CHECK(counted == info->counted && real == info->rows, "counted %lld/%lld rows %lld/%lld",
             (long long)counted, (long long)info->counted, (long long)real, (long long)info->rows);
    VT_CHECK(b->loss_norm == 0 && b->pos == NULL, "loss_norm / pos");
    return weight;
}

/* 3 + 4. batches, epochs, resuming */
static void test_batches(const vs_world_dataset *d, const vs_tokenizer *tok) {
    vs_error err = {0};
    vs_train_data *r = make_reader(d, tok, 4096, 3, 2, 11);
    const vs_train_data_stats *st = vs_train_data_get_stats(r);
    const int64_t n = st->n_seqs, nb = st->n_batches;
    VT_CHECK(n == d->n && nb == (n + 2) / 3, "%lld seqs %lld batches", (long long)n, (long long)nb);
    int max_B, max_T, max_I;
    vs_train_data_capacity(r, &max_B, &max_T, &max_I);
    VT_CHECK(max_B == 3 && max_T == st->longest && max_I >= 3 * 1, "capacity %d %d %d", max_B, max_T, max_I);
    /* 2.5 epochs: every epoch sees each sequence exactly once; record the order */
    const int total = (int)(nb * 5 / 2);
    int64_t(*log)[3] = vs_calloc((size_t)total, sizeof(*log));
    int *log_n = vs_calloc((size_t)total, sizeof(int));
    int *seen = vs_calloc((size_t)n, sizeof(int));
    int64_t *counted = vs_calloc((size_t)total, sizeof(int64_t));
    VT_REQUIRE(log && log_n && seen && counted, "alloc");
    vs_train_data_state at4;
    double ahead = -1;
    for (int k = 0; k < total; k++) {
        if (k == 4) vs_train_data_get_state(r, &at4), ahead = vs_train_data_counted_ahead(r, (int)nb);
        vs_train_batch b;
        vs_train_batch_info info;
        VT_REQUIRE(vs_train_data_next(r, &b, &info, &err) == VS_OK, "%s", err.msg);
        VT_CHECK(info.epoch == (uint64_t)(k / nb) && info.index == (uint64_t)(k % nb),
                 "batch %d is %llu/%llu", k, (unsigned long long)info.epoch, (unsigned long long)info.index);
        check_batch(r, tok, &b, &info, k < 3, 0.0f);
        log_n[k] = b.B;
        counted[k] = info.counted;
        for (int j = 0; j < b.B; j++) log[k][j] = info.seqs[j], seen[info.seqs[j]]++;
        if ((k + 1) % nb == 0) {
            bool once = true;
            for (int64_t i = 0; i < n; i++) once &= seen[i] == 1, seen[i] = 0;
            VT_CHECK(once, "epoch %lld does not visit every sequence once", (long long)(k / nb));
        }
    }
    int64_t want_ahead = 0;
    for (int k = 4; k < 4 + nb; k++) want_ahead += counted[k];
    VT_CHECK(ahead == (double)want_ahead, "counted ahead %.0f vs %lld (crosses an epoch)", ahead,
             (long long)want_ahead);
    /* epochs are shuffled differently */
    bool differ = false;
    for (int k = 0; k < nb; k++) differ |= log[k][0] != log[k + nb][0] || log_n[k] != log_n[k + nb];
    VT_CHECK(differ, "epochs 0 and 1 have the same order");
    vs_train_data_free(r);

    /* resume from the state after 4 batches: the same batches follow */
    r = make_reader(d, tok, 4096, 3, 2, 11);
    VT_REQUIRE(vs_train_data_set_state(r, &at4, &err) == VS_OK, "%s", err.msg);
    bool same = true;
    for (int k = 4; k < total; k++) {
        vs_train_batch b;
        vs_train_batch_info info;
        VT_REQUIRE(vs_train_data_next(r, &b, &info, &err) == VS_OK, "%s", err.msg);
        same &= b.B == log_n[k];
        for (int j = 0; j < b.B && same; j++) same &= info.seqs[j] == log[k][j];
    }
    VT_CHECK(same, "a resumed reader gives other batches");
    vs_train_data_state bad = at4;
    bad.pos = (uint64_t)nb + 1;
    VT_CHECK(vs_train_data_set_state(r, &bad, &err) == VS_ERR_INVALID, "position past the epoch accepted");
    vs_train_data_free(r);

    /* another seed, another order */
    r = make_reader(d, tok, 4096, 3, 2, 12);
    vs_train_batch b;
    vs_train_batch_info info;
    differ = false;
    for (int k = 0; k < nb; k++) {
        VT_REQUIRE(vs_train_data_next(r, &b, &info, &err) == VS_OK, "%s", err.msg);
        differ |= info.seqs[0] != log[k][0];
    }
    VT_CHECK(differ, "seeds 11 and 12 give the same order");
    vs_train_data_free(r);

    /* one bucket over the whole epoch: batches hold length-sorted runs (ranges do not overlap) */
    r = make_reader(d, tok, 4096, 3, 1000, 3);
    int64_t(*range)[2] = vs_calloc((size_t)nb, sizeof(*range));
    for (int k = 0; k < nb; k++) {
        VT_REQUIRE(vs_train_data_next(r, &b, &info, &err) == VS_OK, "%s", err.msg);
        range[k][0] = INT64_MAX, range[k][1] = 0;
        for (int j = 0; j < b.B; j++) {
            vs_train_example ex;
            VT_REQUIRE(vs_train_encode(vs_train_data_sample(r, info.seqs[j]), tok, NP, &ex, &err) == VS_OK,
                       "x");
            range[k][0] = ex.n_rows < range[k][0] ? ex.n_rows : range[k][0];
            range[k][1] = max_i64(range[k][1], ex.n_rows);
            vs_train_example_free(&ex);
        }
        VT_CHECK(range[k][1] == b.T, "batch %d: T %d, longest %lld", k, b.T, (long long)range[k][1]);
    }
    int overlaps = 0;
    for (int i = 0; i < nb; i++)
        for (int j = 0; j < nb; j++)
            if (i != j && range[i][0] < range[j][0] && range[i][1] > range[j][0]) overlaps++;
    VT_CHECK(overlaps == 0, "%d batches overlap in length with one bucket", overlaps);
    vs_free(range);
    vs_train_data_free(r);
    printf("batches: %lld sequences, %lld batches/epoch; 2.5 epochs checked (targets, mask, image rows, "
           "pixels), "
           "resume, seeds, buckets\n",
           (long long)n, (long long)nb);
    vs_free(log), vs_free(log_n), vs_free(seen), vs_free(counted);
}

/* 3b. prompt_loss: prompt text rows weigh prompt_loss, answers 1, image rows and padding 0; the
 * look-ahead sum (gradient accumulation's divisor) is the batches' summed weights, across an epoch end;
 * a negative or non-finite weight is refused. */
static void test_prompt_loss(const vs_world_dataset *d, const vs_tokenizer *tok) {
    vs_error err = {0};
    vs_train_vlm_config c = wt_config(vs_tokenizer_n_vocab(tok));
    vs_train_data_opts o = {
        .seq_len = 4096, .batch = 3, .image_rows = NP, .preproc = wt_preproc(&c), .bucket = 2, .seed = 7};
    o.prompt_loss = 0.25f;
    vs_train_data *r = vs_train_data_new(&d, 1, tok, &o, &err);
    VT_REQUIRE(r, "%s", err.msg);
    const int64_t nb = vs_train_data_get_stats(r)->n_batches;
    const int k = (int)nb + 2; /* crosses into the second epoch */
    const double ahead = vs_train_data_counted_ahead(r, k);
    double sum = 0, answers = 0;
    for (int i = 0; i < k; i++) {
        vs_train_batch b;
        vs_train_batch_info info;
        VT_REQUIRE(vs_train_data_next(r, &b, &info, &err) == VS_OK, "%s", err.msg);
        sum += check_batch(r, tok, &b, &info, false, o.prompt_loss);
        for (int j = 0; j < b.B; j++) {
            vs_train_example ex;
            VT_REQUIRE(vs_train_encode(vs_train_data_sample(r, info.seqs[j]), tok, NP, &ex, &err) == VS_OK,
                       "%s", err.msg);
            answers += ex.n_answer;
            vs_train_example_free(&ex);
        }
    }
    VT_CHECK(fabs(ahead - sum) <= 1e-9 * sum, "weights ahead %.3f, in the batches %.3f", ahead, sum);
    VT_CHECK(sum > answers + 1, "prompt rows add no weight (%.3f vs %.0f answer rows)", sum, answers);
    vs_train_data_free(r);
    const float bad[] = {-0.5f, NAN, INFINITY};
    for (int i = 0; i < 3; i++) {
        o.prompt_loss = bad[i];
        VT_CHECK(vs_train_data_new(&d, 1, tok, &o, &err) == NULL && err.code == VS_ERR_INVALID,
                 "prompt_loss %g accepted", bad[i]);
    }
    printf("prompt_loss 0.25: %d batches, weights %.1f (%.0f answer rows), look-ahead equal; bad weights "
           "refused\n",
           k, sum, answers);
}

/* Attention grounds (opts.ground): over one epoch the batches carry stats.grounds of them, each at the
 * row before a turn's first answer row, its keys at its image's first row, its mask the world's for
 * that turn's query at the model's patch size; without the option no batch has any. */
static void test_grounds(const vs_world_dataset *d, const vs_tokenizer *tok) {
    vs_error err = {0};
    vs_train_vlm_config c = wt_config(vs_tokenizer_n_vocab(tok));
    vs_train_data_opts o = {
        .seq_len = 4096, .batch = 3, .image_rows = NP, .preproc = wt_preproc(&c), .bucket = 2, .seed = 5};
    int64_t n_first = 0, n_answer = 0;
    for (int mode = 0; mode < 4; mode++) { /* off, the first answer row, every answer row, characters */
        o.ground = mode > 0, o.ground_answer = mode >= 2, o.ground_chars = mode == 3;
        int64_t chars = 0;
        vs_train_data *r = vs_train_data_new(&d, 1, tok, &o, &err);
        VT_REQUIRE(r, "%s", err.msg);
        const vs_train_data_stats *st = vs_train_data_get_stats(r);
        int64_t seen = 0, bad = 0, firsts = 0;
        for (int64_t k = 0; k < st->n_batches; k++) {
            vs_train_batch b;
            vs_train_batch_info info;
            VT_REQUIRE(vs_train_data_next(r, &b, &info, &err) == VS_OK, "%s", err.msg);
            for (int i = 0; i < b.n_ground; i++) {
                const vs_train_ground *g = &b.ground[i];
                const vs_world_sample *sm = vs_train_data_sample(r, info.seqs[g->b]);
                vs_train_example ex;
                VT_REQUIRE(vs_train_encode(sm, tok, NP, &ex, &err) == VS_OK, "%s", err.msg);
                /* the turn whose answer row g->q predicts (the first row only, unless ground_answer) */
                int t = 0;
                while (t < ex.n_turns && !(g->q >= ex.turn_start[t] - 1 &&
                                           g->q <= (mode >= 2 ? ex.turn_end[t] - 2 : ex.turn_start[t] - 1)))
                    t++;
                uint64_t want = 0;
                const vs_world_query *qu = t < ex.n_turns ? &sm->turns[t].query : NULL;
                bool whole = qu && vs_world_ground_mask(&sm->scenes[qu->image], qu, 64, 64 / 4, &want) && want == g->mask;
                /* characters: the mask of a run of characters of a line the turn reads that the token writes */
                if (!whole && qu && mode == 3 && sm->scenes[qu->image].kind == VS_SCENE_GLYPH) {
                    const vs_world_scene *sc = &sm->scenes[qu->image];
                    uint64_t gm[VS_WORLD_MAX_LINES * 16];
                    VT_REQUIRE(vs_world_glyph_masks(sc, 64, 64 / 4, gm), "%s: no glyph masks", sm->id);
                    char *piece = vs_detokenize(tok, ex.tokens + g->q + 1, 1, 0, NULL, &err);
                    VT_REQUIRE(piece, "%s", err.msg);
                    for (int l = 0; l < sc->n_lines && !whole; l++) {
                        const char *txt = sc->lines[l].text;
                        bool read = qu->type == VS_Q_READ_ALL ||
                                    (qu->type == VS_Q_READ_LINE ? qu->index == l : sc->lines[l].color == qu->sel.color);
                        for (int k1 = 0; read && txt[k1] && !whole; k1++) {
                            uint64_t m = 0;
                            for (int k2 = k1; txt[k2] && !whole; k2++) {
                                m |= gm[16 * l + k2];
                                char run[VS_WORLD_WORD_MAX] = {0};
                                memcpy(run, txt + k1, (size_t)(k2 - k1 + 1));
                                whole = m == g->mask && strstr(piece, run);
                            }
                        }
                    }
                    vs_free(piece);
                    chars += whole;
                }
                bad += !whole || !ex.answer[g->q + 1] || ex.img_row[g->k0] != qu->image * NP ||
                       b.img_row[(size_t)g->b * b.T + g->k0] < 0;
                firsts += t < ex.n_turns && g->q == ex.turn_start[t] - 1;
                vs_train_example_free(&ex);
            }
            seen += b.n_ground;
        }
        VT_CHECK(bad == 0, "ground mode %d: %lld grounds off their turn's answer rows, image or mask", mode,
                 (long long)bad);
        VT_CHECK(seen == st->grounds && (mode ? seen >= 5 : seen == 0), "ground mode %d: %lld grounds in the batches, %lld counted",
                 mode, (long long)seen, (long long)st->grounds);
        if (mode == 1) n_first = seen;
        /* every answer row: the same grounded turns, each with all of its answer rows (>= 2 with </s>) */
        if (mode == 2)
            VT_CHECK(firsts == n_first && seen >= 2 * n_first, "ground answer: %lld grounds, %lld turns (first: %lld)",
                     (long long)seen, (long long)firsts, (long long)n_first);
        if (mode == 3)
            VT_CHECK(chars > 0 && seen >= n_answer, "ground chars: %lld grounds on characters, %lld in all (answer: %lld)",
                     (long long)chars, (long long)seen, (long long)n_answer);
        if (mode == 2) n_answer = seen;
        if (mode) printf("grounds (%s): %lld rows over an epoch at their turn's answer rows and its picture, %lld on the "
                         "characters their token writes\n", mode == 1 ? "first" : mode == 2 ? "answer" : "chars",
                         (long long)seen, (long long)chars);
        vs_train_data_free(r);
    }
}

/* 5. export parity on world samples */
/* Pictures in words: the same answers on the same rows' text, every image marker replaced by its scene
 * written out, no image rows; the reader built on it loads no pixels. */
static void test_words(const vs_world_dataset *d, const vs_tokenizer *tok) {
    vs_error err = {0};
    int with_images = 0;
    for (int64_t i = 0; i < d->n; i++) {
        const vs_world_sample *s = &d->samples[i];
        vs_train_example ex, im;
        VT_REQUIRE(vs_train_encode_words(s, tok, &ex, &err) == VS_OK, "%s", err.msg);
        VT_REQUIRE(vs_train_encode(s, tok, NP, &im, &err) == VS_OK, "%s", err.msg);
        VT_CHECK(ex.n_images == 0 && ex.n_turns == s->n_turns && ex.n_answer == im.n_answer, "%s: %d images, %d answer rows",
                 s->id, ex.n_images, ex.n_answer);
        for (int32_t r = 0; r < ex.n_rows; r++)
            VT_CHECK(ex.tokens[r] >= 0 && ex.img_row[r] == -1, "%s row %d is an image row", s->id, r);
        for (int t = 0; t < s->n_turns; t++) {
            int32_t a = ex.turn_start[t], b = ex.turn_end[t];
            char *txt = vs_detokenize(tok, ex.tokens + a, b - 1 - a, 0, NULL, &err);
            VT_REQUIRE(txt, "%s", err.msg);
            VT_CHECK(txt[0] == ' ' && !strcmp(txt + 1, s->turns[t].assistant), "%s turn %d answer: '%.60s'", s->id, t, txt);
            vs_free(txt);
        }
        char *all = vs_detokenize(tok, ex.tokens + 1, ex.n_rows - 1, 0, NULL, &err);
        VT_REQUIRE(all, "%s", err.msg);
        VT_CHECK(!strstr(all, "<image>"), "%s: an image marker is left", s->id);
        for (int k = 0; k < s->n_images; k++) {
            char *w = vs_world_scene_words(&s->scenes[k]), want[1024];
            VT_REQUIRE(w, "out of memory");
            snprintf(want, sizeof(want), "Picture: %s", w);
            VT_CHECK(strstr(all, want) != NULL, "%s: picture %d is not written out (%.80s)", s->id, k, want);
            vs_free(w);
        }
        with_images += s->n_images > 0;
        vs_free(all);
        vs_train_example_free(&ex);
        vs_train_example_free(&im);
    }
    VT_CHECK(with_images > 0, "no sample with pictures");
    vs_train_vlm_config c = wt_config(vs_tokenizer_n_vocab(tok));
    vs_train_data_opts o = {.seq_len = 4096, .batch = 3, .image_rows = NP, .preproc = wt_preproc(&c), .bucket = 2,
                            .images_as_text = true, .seed = 7};
    vs_train_data *r = vs_train_data_new(&d, 1, tok, &o, &err);
    VT_REQUIRE(r, "%s", err.msg);
    const vs_train_data_stats *st = vs_train_data_get_stats(r);
    VT_CHECK(st->images == 0 && st->n_seqs == d->n, "in words: %lld images, %lld of %lld sequences", (long long)st->images,
             (long long)st->n_seqs, (long long)d->n);
    vs_train_batch b;
    vs_train_batch_info info;
    VT_REQUIRE(vs_train_data_next(r, &b, &info, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(b.n_images == 0, "a batch in words holds %d images", b.n_images);
    for (int64_t k = 0; k < (int64_t)b.B * b.T; k++) VT_CHECK(!b.img_row || b.img_row[k] < 0, "image row in a batch in words");
    const int64_t all_words = st->in_words;
    VT_CHECK(all_words == with_images, "in words: %lld samples with pictures counted, want %d", (long long)all_words,
             with_images);
    vs_train_data_free(r);
    /* words_frac: a fixed share of the samples with pictures in words, the rest with their images; the same
     * draw for the same seed; 1 is images_as_text, 0 none; out of range refused */
    int64_t n_words[4] = {0}, n_img[4] = {0};
    const float fr[4] = {0.5f, 0.5f, 1.0f, 0.0f};
    for (int v = 0; v < 4; v++) {
        vs_train_data_opts ow = o;
        ow.images_as_text = false, ow.words_frac = fr[v];
        vs_train_data *rw = vs_train_data_new(&d, 1, tok, &ow, &err);
        VT_REQUIRE(rw, "%s", err.msg);
        n_words[v] = vs_train_data_get_stats(rw)->in_words, n_img[v] = vs_train_data_get_stats(rw)->images;
        vs_train_data_free(rw);
    }
    VT_CHECK(n_words[0] > 0 && n_words[0] < with_images && n_img[0] > 0, "words_frac 0.5: %lld of %d in words, %lld images",
             (long long)n_words[0], with_images, (long long)n_img[0]);
    VT_CHECK(n_words[0] == n_words[1] && n_img[0] == n_img[1], "words_frac 0.5 drew differently for the same seed");
    VT_CHECK(n_words[2] == with_images && n_img[2] == 0, "words_frac 1: %lld in words, %lld images", (long long)n_words[2],
             (long long)n_img[2]);
    VT_CHECK(n_words[3] == 0 && n_img[3] > 0, "words_frac 0: %lld in words", (long long)n_words[3]);
    vs_train_data_opts ob = o;
    ob.images_as_text = false, ob.words_frac = 1.5f;
    VT_CHECK(!vs_train_data_new(&d, 1, tok, &ob, &err) && strstr(err.msg, "words_frac"), "words_frac 1.5 accepted (%s)",
             err.msg);
    printf("words_frac 0.5: %lld of %d samples with pictures in words (%lld images); 1: all; 0: none\n",
           (long long)n_words[0], with_images, (long long)n_img[0]);
}

static void test_parity(const vs_world_dataset *d, const vs_tokenizer *tok, const char *tok_path) {
    vs_error err = {0};
    vs_threadpool *tp = vs_threadpool_new(2, &err);
    VT_REQUIRE(tp, "%s", err.msg);
    vs_train_data *r = make_reader(d, tok, 4096, 4, 1, 5);
    int max_B, max_T, max_I;
    vs_train_data_capacity(r, &max_B, &max_T, &max_I);
    vs_train_vlm_config c = wt_config(vs_tokenizer_n_vocab(tok));
    vs_train_vlm *m = vs_train_vlm_new(&c, max_B, max_T, max_I, &err);
    VT_REQUIRE(m, "%s", err.msg);
    vs_train_vlm_init(m, 3);
    vs_train_params *p = vs_train_vlm_params(m);
    vs_adamw opt;
    vs_adamw_default(&opt);
    /* a few steps so the weights are no longer the initial ones */
    float first = 0, last = 0;
    for (int s = 0; s < 6; s++) {
        vs_train_batch b;
        vs_train_batch_info info;
        VT_REQUIRE(vs_train_data_next(r, &b, &info, &err) == VS_OK, "%s", err.msg);
        float loss;
        vs_train_params_zero_grad(p);
        VT_REQUIRE(vs_train_vlm_forward(m, tp, &b, &loss, &err) == VS_OK, "%s", err.msg);
        VT_REQUIRE(vs_train_vlm_backward(m, tp, &err) == VS_OK, "%s", err.msg);
        vs_train_clip_grad(p, 1.0f);
        vs_train_adamw_step(p, tp, &opt, 3e-3f);
        if (s == 0) first = loss;
        last = loss;
    }
    printf("tiny VLM (%.3fM parameters) trained 6 steps: loss %.3f -> %.3f\n",
           vs_train_vlm_n_params(m, -1) / 1e6, first, last);

    char lm_path[600], mm_path[600];
    snprintf(lm_path, sizeof(lm_path), "%s/tiny_lm.gguf", vt_tmpdir());
    snprintf(mm_path, sizeof(mm_path), "%s/tiny_mmproj.gguf", vt_tmpdir());
    vs_gguf *tg = vs_gguf_open(tok_path, &err);
    VT_REQUIRE(tg, "%s", err.msg);
    vs_train_export_opts eo = {.type = VS_TYPE_F32, .tokenizer = tg, .name = "tiny-world"};
    VT_REQUIRE(vs_train_vlm_export(m, lm_path, mm_path, &eo, &err) == VS_OK, "%s", err.msg);
    vs_gguf_close(tg);
    vs_lm *lm = vs_lm_load(lm_path, &err);
    VT_REQUIRE(lm, "%s", err.msg);
    vs_mmproj *mm = vs_mmproj_open(mm_path, &err);
    VT_REQUIRE(mm, "%s", err.msg);
    vs_tokenizer *etok = vs_tokenizer_from_gguf(vs_lm_gguf(lm), &err);
    VT_REQUIRE(etok && vs_tokenizer_compatible(etok, tok, &err) == VS_OK, "exported tokenizer: %s", err.msg);

    /* one batch: a two-turn sample with a second image, a diff (2 images), a story (5), a text sample */
    int64_t pick[4] = {-1, -1, -1, -1};
    for (int64_t i = 0; i < vs_train_data_n_seqs(r); i++) {
        const vs_world_sample *s = vs_train_data_sample(r, i);
        if (s->n_turns == 2 && s->turns[1].kind == VS_TURN_NEW_IMAGE) pick[0] = i;
        if (pick[1] < 0 && s->suite == VS_WORLD_DIFF) pick[1] = i;
        if (pick[2] < 0 && s->suite == VS_WORLD_STORY) pick[2] = i;
        if (pick[3] < 0 && s->suite == VS_WORLD_TEXT) pick[3] = i;
    }
    for (int64_t i = 0; pick[0] < 0 && i < vs_train_data_n_seqs(r); i++)
        if (vs_train_data_sample(r, i)->n_turns == 2) pick[0] = i;
    int n_pick = 0;
    for (int k = 0; k < 4; k++)
        if (pick[k] >= 0) pick[n_pick++] = pick[k];
    VT_REQUIRE(n_pick >= 3, "the tiny world lacks the sample kinds (%d found)", n_pick);
    vs_train_batch b;
    vs_train_batch_info info;
    VT_REQUIRE(vs_train_data_batch(r, pick, n_pick, &b, &info, &err) == VS_OK, "%s", err.msg);
    float loss;
    VT_REQUIRE(vs_train_vlm_forward(m, tp, &b, &loss, &err) == VS_OK, "%s", err.msg);
    const float *ref = vs_train_vlm_logits(m);
    const int V = c.vocab;
    double worst = 0;
    int64_t rows_compared = 0;
    for (int k = 0; k < n_pick; k++) {
        const vs_world_sample *s = vs_train_data_sample(r, pick[k]);
        vs_mm_image imgs[VS_WORLD_MAX_IMAGES];
        VT_REQUIRE(vs_mm_images_from_files(vs_mmproj_tower(mm), vs_mmproj_projector(mm), tp,
                                           (const char *const *)s->images, s->n_images, VS_PREPROC_LLAVA, 1,
                                           imgs, &err) == VS_OK,
                   "%s", err.msg);
        char *text = vs_train_conversation(s);
        vs_mm_prompt q;
        vs_mm_prompt_opts po = {.lm_width = c.width};
        VT_REQUIRE(vs_mm_prompt_build(&q, etok, text, strlen(text), imgs, s->n_images, &po, &err) == VS_OK,
                   "%s", err.msg);
        int64_t n = q.n_rows;
        bool rows_ok = true;
        for (int64_t t = 0; t < n; t++) rows_ok &= q.tokens[t] == b.tokens[(size_t)k * b.T + t];
        VT_CHECK(rows_ok && n <= b.T, "%s: inference rows differ from the training rows", s->id);
        vs_kv *kv = vs_lm_kv_new(lm, 1, (int)n, VS_TYPE_F32, &err);
        VT_REQUIRE(kv, "%s", err.msg);
        vs_lm_row *rows = vs_calloc((size_t)n, sizeof(vs_lm_row));
        float *logits = vs_malloc(sizeof(float) * (size_t)n * V);
        VT_REQUIRE(rows && logits, "alloc");
        vs_mm_prompt_rows(&q, 0, n, 0, 0, rows);
        for (int64_t t = 0; t < n; t++) rows[t].want_logits = true;
        vs_lm_out out = {.logits = logits};
        VT_REQUIRE(vs_lm_forward(lm, kv, tp, rows, (int)n, &out, &err) == VS_OK, "%s", err.msg);
        const float *tr = ref + (size_t)k * b.T * V;
        double e = vt_max_rel_diff(logits, tr, (size_t)n * V);
        printf("  %-22s %d image%s, %d turn%s, %4lld rows: max |diff| / max |logit| = %.2e\n", s->id,
               s->n_images, s->n_images == 1 ? "" : "s", s->n_turns, s->n_turns == 1 ? "" : "s", (long long)n,
               e);
        VT_CHECK(e <= 1e-4, "%s: exported model's logits differ by %.3e", s->id, e);
        worst = e > worst ? e : worst;
        rows_compared += n;
        vs_free(rows), vs_free(logits);
        vs_kv_free(kv);
        vs_mm_prompt_free(&q);
        vs_free(text);
        vs_mm_images_free(imgs, s->n_images);
    }
    printf("export parity on %d world samples (%lld rows): worst %.2e\n", n_pick, (long long)rows_compared,
           worst);
    vs_tokenizer_free(etok);
    vs_mmproj_free(mm);
    vs_lm_free(lm);
    vs_train_vlm_free(m);
    vs_train_data_free(r);
    vs_threadpool_free(tp);
}

int main(void) {
    char dir[512], tok_path[512];
    double t0 = vs_time_now();
    wt_make("world", 3, 1, 512, dir, tok_path, sizeof(dir));
    vs_error err = {0};
    vs_world_dataset *d = vs_world_load(dir, "train", VS_WORLD_ALL_SUITES, &err);
    VT_REQUIRE(d, "%s", err.msg);
    vs_tokenizer *tok = vs_tokenizer_load(tok_path, &err);
    VT_REQUIRE(tok, "%s", err.msg);
    printf("tiny world: %lld training samples, tokenizer %d tokens (%.2f s)\n", (long long)d->n,
           vs_tokenizer_n_vocab(tok), vs_time_now() - t0);
    test_encode(d, tok);
    test_skip(d, tok);
    test_batches(d, tok);
    test_prompt_loss(d, tok);
    test_words(d, tok);
    test_grounds(d, tok);
    test_parity(d, tok, tok_path);
    vs_tokenizer_free(tok);
    vs_world_dataset_free(d);
    printf("%.2f s\n", vs_time_now() - t0);
    return vt_finish("train_data");
}
