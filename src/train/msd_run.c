/* msd_run: the feature-level drafters' recipe, MSD head or DREAM model (see msd_run.h). */
#include "msd_run.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "distill.h"
#include "json.h"
#include "mmprompt.h"
#include "msd_cache.h"
#include "train_drafter.h"
#include "train_dream.h"
#include "train_loop.h"

void vs_msd_run_opts_default(vs_msd_run_opts *o) {
    memset(o, 0, sizeof(*o));
    o->samples = 4000, o->eval_seqs = 128, o->shard = 128;
    o->decoupled = true, o->two_stage = true, o->mat_type = VS_TYPE_F16;
    o->steps = 3000, o->seed = 1, o->batch = 8, o->threads = 2, o->ckpt_every = 200, o->eval_every = 250;
    o->lr = 1e-3, o->lr_min = 1e-4, o->warmup = 100, o->wd = 0, o->clip = 0.5, o->beta2 = 0.95, o->noise = 0.2;
    o->mid_layer = VS_MSD_MID_NONE;
}

typedef struct mrun {
    const vs_msd_run_opts *o;
    vs_msd_run_result res;
    vs_train_loop L; /* directories, checkpoint rotation, settings check, the curve, the state */
    char cache_dir[1200], cache_json[1220], evalcsv[1200], head[1200], summary[1200];
    vs_threadpool *tp;
    vs_lm *target;
    vs_msd_shape shape;   /* the MSD head's (its block's shape is also the DREAM model's) */
    vs_dream_shape dshape;
    float *lm_head;
    vs_train_msd *m;      /* the model trained: one of these two */
    vs_train_dream *dm;
    float *dmask;         /* (batch, max_T) DREAM's row weights: row p counts when token p + 1 is an answer */
    vs_msd_cache cache;
    int64_t n_train;          /* records [0, n_train) train, [n_train, cache.n) are held out */
    int64_t *pool[2];            /* the training records without / with images */
    vs_msd_pools pools;          /* over pool[] */
    int64_t *held;               /* (cache.n - n_train) the held-out records, text-only first, by length */
    int max_T;
    vs_msd_batch_buf buf;
    char *evals; /* eval.csv's text */
    double deadline; /* vs_time_now() after which the run stops (--time-limit; 0: none) */
    bool stopped;    /* stopped by the time limit in the cache stage */
} mrun;

/* ---------------------------------------------------------------------------------------------- */
/* Settings */

/* What the cache is made from (cache.json, and the "data" of run.json: a run resumed over another cache
 * would train on other records). */
static void cache_fields(vs_json_writer *w, const vs_msd_run_opts *o) {
    vs_json_kv_str(w, "target", o->target);
    vs_json_kv_str(w, "mmproj", o->mmproj);
    vs_json_kv_str(w, "data", o->data);
    if (o->distill) vs_json_kv_str(w, "distill", o->distill);
    vs_json_kv_int(w, "samples", o->samples);
    vs_json_kv_int(w, "shard", o->shard);
    vs_json_kv_int(w, "seed", o->seed);
    if (o->mid_layer != VS_MSD_MID_NONE) vs_json_kv_int(w, "mid_layer", o->mid_layer); /* -1: least entropy */
}

static char *cache_settings(const vs_msd_run_opts *o) {
    vs_json_writer w;
    vs_json_writer_init(&w);
    vs_json_obj_begin(&w);
    cache_fields(&w, o);
    vs_json_obj_end(&w);
    char *s = vs_json_writer_take(&w, NULL);
    vs_json_writer_free(&w);
    return s;
}

static char *run_settings(const mrun *r) {
    const vs_msd_run_opts *o = r->o;
    vs_json_writer w;
    vs_json_writer_init(&w);
    vs_json_obj_begin(&w);
    vs_json_key(&w, "data");
    vs_json_obj_begin(&w);
    cache_fields(&w, o);
    vs_json_obj_end(&w);
    vs_json_kv_int(&w, "eval_seqs", o->eval_seqs);
    if (o->dream) vs_json_kv_str(&w, "kind", "dream"); /* (absent: the MSD head, as runs before DREAM wrote) */
    vs_json_kv_int(&w, "n_head", r->shape.n_head);
    vs_json_kv_int(&w, "n_head_kv", r->shape.n_head_kv);
    vs_json_kv_int(&w, "n_ff", r->shape.n_ff);
    if (!o->dream) vs_json_kv_bool(&w, "decoupled", o->decoupled);
    vs_json_kv_bool(&w, "two_stage", o->two_stage);
    vs_json_kv_int(&w, "steps", o->steps);
    vs_json_kv_int(&w, "batch", o->batch);
    vs_json_kv_num(&w, "lr", o->lr);
    vs_json_kv_num(&w, "lr_min", o->lr_min);
    vs_json_kv_int(&w, "warmup", (int64_t)o->warmup);
    vs_json_kv_num(&w, "weight_decay", o->wd);
    vs_json_kv_num(&w, "beta2", o->beta2);
    vs_json_kv_num(&w, "clip", o->clip);
    vs_json_kv_num(&w, "noise", o->noise);
    vs_json_kv_int(&w, "seed", o->seed);
    vs_json_kv_int(&w, "eval_every", o->eval_every);
    vs_json_obj_end(&w);
    char *s = vs_json_writer_take(&w, NULL);
    vs_json_writer_free(&w);
    return s;
}

/* A settings file: written when absent (fresh), else it must hold exactly `settings`. */
static vs_status settings_file(const char *path, const char *settings, const char *what, vs_error *err) {
    if (access(path, F_OK) != 0) return vs_train_write_text(path, settings, err);
    uint8_t *old = NULL;
    size_t n = 0;
    vs_status s = vs_read_file(path, &old, &n, err);
    if (s == VS_OK) {
        while (n && (old[n - 1] == '\n' || old[n - 1] == '\r')) old[--n] = 0;
        if (strcmp((const char *)old, settings))
            s = vs_error_set(err, VS_ERR_INVALID, "%s was made with other settings than these (%s):\n  stored:  %s\n"
                             "  now:     %s", path, what, (const char *)old, settings);
    }
    vs_free(old);
    return s;
}

/* ---------------------------------------------------------------------------------------------- */
/* The cache stage */

/* The conversations in cache order: the recipe's set shuffled by the seed, the first o->samples. */
static vs_status choose(const vs_msd_run_opts *o, const vs_world_dataset *train, const vs_tokenizer *tok, int NP,
                        vs_train_seqs *q, int64_t **order, int64_t *n, vs_error *err) {
    vs_status s;
    if (o->distill) {
        vs_distill_file f;
        if ((s = vs_distill_read(o->distill, false, &f, err))) return vs_error_wrap(err, "--distill");
        s = vs_train_seqs_add_distill(q, train, &f, tok, NP, err);
        vs_distill_file_free(&f);
    } else {
        s = vs_train_seqs_add_instruct(q, train, tok, NP, err);
    }
    if (s) return s;
    if (q->n == 0) return vs_error_set(err, VS_ERR_INVALID, "%s: no conversations to train on", o->data);
    int64_t *ord = vs_malloc(sizeof(int64_t) * (size_t)q->n);
    if (!ord) return vs_error_set(err, VS_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < q->n; i++) ord[i] = i;
    vs_rng rng;
    vs_rng_seed(&rng, (uint64_t)o->seed ^ 0x6d73642d6361636eull);
    for (int64_t i = q->n - 1; i > 0; i--) { /* Fisher-Yates */
        const int64_t j = (int64_t)(vs_rng_uniform(&rng) * (double)(i + 1));
        const int64_t t = ord[i];
        ord[i] = ord[j], ord[j] = t;
    }
    *order = ord;
    *n = o->samples > 0 && o->samples < q->n ? o->samples : q->n;
    return VS_OK;
}

/* Record `idx` of the cache: the target's rows and features of conversation ex (with the images of
 * sample). */
static vs_status make_record(mrun *r, const vs_mmproj *mm, int NP, const vs_train_example *ex,
                             const vs_world_sample *sample, vs_msd_seq *seq, vs_error *err) {
    const int C = r->shape.width;
    vs_mm_image imgs[VS_WORLD_MAX_IMAGES];
    const int ni = ex->n_images;
    if (ni > VS_WORLD_MAX_IMAGES || (ni > 0 && !sample))
        return vs_error_set(err, VS_ERR_INVALID, "MSD cache: a conversation of %d images without its sample", ni);
    vs_status s = ni ? vs_mm_images_from_files(vs_mmproj_tower(mm), vs_mmproj_projector(mm), r->tp,
                                               (const char *const *)sample->images, ni, VS_PREPROC_LLAVA, 1, imgs, err)
                     : VS_OK;
    if (s) return s;
    float *rows = NULL;
    int64_t nr = 0;
    for (int i = 0; i < ni; i++) nr += imgs[i].n_rows;
    if (nr != (int64_t)ni * NP) /* the conversation's image rows were laid out for NP rows per image */
        s = vs_error_set(err, VS_ERR_INVALID, "%s: %lld image rows for %d images of %d rows", r->o->mmproj,
                         (long long)nr, ni, NP);
    if (s == VS_OK && ni && !(rows = vs_malloc(sizeof(float) * (size_t)(nr * C)))) s = vs_error_set(err, VS_ERR_NOMEM, "out of memory");
    for (int i = 0, at = 0; s == VS_OK && i < ni; at += (int)imgs[i].n_rows, i++)
        memcpy(rows + (size_t)at * C, imgs[i].rows, sizeof(float) * (size_t)(imgs[i].n_rows * C));
    vs_mm_images_free(imgs, ni);
    if (s == VS_OK)
        s = vs_train_msd_sequence_mid(r->target, r->tp, ex->tokens, ex->img_row, ex->answer, ex->n_rows, rows,
                                      r->o->mid_layer, seq, err);
    vs_free(rows);
    return s;
}

/* Fills the cache's missing shards, then loads it. */
static vs_status build_cache(mrun *r, vs_error *err) {
    const vs_msd_run_opts *o = r->o;
    const int C = r->shape.width;
    vs_status s = vs_train_mkdir(r->cache_dir, err);
    char *cs = s ? NULL : cache_settings(o);
    if (s == VS_OK && !cs) s = vs_error_set(err, VS_ERR_NOMEM, "out of memory");
    if (s == VS_OK) s = settings_file(r->cache_json, cs, "the cache's target, mmproj, data, distill file, samples, shard size, seed and "
                                             "intermediate layer (--mid-layer)", err);
    vs_free(cs);
    int64_t have = 0;
    if (s == VS_OK) s = vs_msd_cache_count(r->cache_dir, C, &have, err);
    if (s) return s;
    vs_world_dataset *train = NULL;
    vs_tokenizer *tok = NULL;
    vs_mmproj *mm = NULL;
    vs_train_seqs q;
    memset(&q, 0, sizeof(q));
    int64_t *order = NULL, n = 0;
    vs_msd_seq *seqs = vs_calloc((size_t)o->shard, sizeof(vs_msd_seq));
    const int32_t **toks = vs_calloc((size_t)o->shard, sizeof(int32_t *));
    uint64_t *ids = vs_calloc((size_t)o->shard, sizeof(uint64_t));
    if (!seqs || !toks || !ids) s = vs_error_set(err, VS_ERR_NOMEM, "out of memory");
    if (s == VS_OK && !(train = vs_world_load(o->data, "train", VS_WORLD_ALL_SUITES, err))) s = VS_ERR_INVALID;
    if (s == VS_OK && !(tok = vs_tokenizer_load(o->target, err))) s = VS_ERR_INVALID;
    if (s == VS_OK && !(mm = vs_mmproj_open(o->mmproj, err))) s = VS_ERR_INVALID;
    if (s == VS_OK && !vs_mmproj_tower(mm))
        s = vs_error_set(err, VS_ERR_INVALID, "%s: no vision tower (a projector-only file)", o->mmproj);
    if (s == VS_OK && vs_vision_projector_config(vs_mmproj_projector(mm))->proj_out != C)
        s = vs_error_set(err, VS_ERR_INVALID, "%s: its projector makes rows of width %d, the target %s takes %d "
                         "(an mmproj for another model)", o->mmproj,
                         (int)vs_vision_projector_config(vs_mmproj_projector(mm))->proj_out, o->target, C);
    const int NP = s ? 0 : vs_vision_n_patches(vs_mmproj_config(mm));
    if (s == VS_OK) s = choose(o, train, tok, NP, &q, &order, &n, err);
    const int64_t n_shards = s ? 0 : (n + o->shard - 1) / o->shard;
    if (s == VS_OK && have > n_shards)
        s = vs_error_set(err, VS_ERR_INVALID, "%s holds %lld shards, these settings make %lld", r->cache_dir,
                         (long long)have, (long long)n_shards);
    if (s == VS_OK && have < n_shards) {
        const vs_train_item *items = vs_train_seqs_items(&q);
        printf("MSD cache %s: %lld conversations in %lld shards (%lld done); target %s, images %s\n", r->cache_dir,
               (long long)n, (long long)n_shards, (long long)have, o->target, o->mmproj);
        fflush(stdout);
        vs_progress pr;
        vs_progress_begin(&pr, "MSD cache", n);
        pr.rate_done0 = have * o->shard;
        int64_t rows = 0;
        for (int64_t k = have; k < n_shards && s == VS_OK; k++) {
            const int64_t i0 = k * o->shard, cnt = VS_MIN((int64_t)o->shard, n - i0);
            int made = 0;
            for (int64_t i = 0; i < cnt && s == VS_OK; i++) {
                const vs_train_item *it = &items[order[i0 + i]];
                if ((s = make_record(r, mm, NP, it->ex, it->sample, &seqs[i], err))) {
                    vs_error_wrap(err, "conversation %lld%s%s", (long long)order[i0 + i], it->sample ? " " : "",
                                  it->sample ? it->sample->id : "");
                    break;
                }
                made++;
                toks[i] = it->ex->tokens, ids[i] = (uint64_t)order[i0 + i];
                rows += it->ex->n_rows;
                if (!o->quiet) vs_progress_update(&pr, i0 + i + 1, " %lld rows", (long long)rows);
            }
            if (s == VS_OK) s = vs_msd_cache_write_shard(r->cache_dir, k, C, seqs, toks, ids, (int)cnt, err);
            for (int i = 0; i < made; i++) vs_msd_seq_free(&seqs[i]);
            if (s == VS_OK && k + 1 < n_shards && r->deadline > 0 && vs_time_now() >= r->deadline) {
                r->stopped = true;
                have = k + 1;
                break;
            }
        }
        if (s == VS_OK && !o->quiet) vs_progress_end(&pr, r->stopped ? have * o->shard : n);
        if (s == VS_OK && r->stopped) {
            printf("stopped in the cache stage after shard %lld of %lld (--time-limit): continue with the same "
                   "flags and --resume\n", (long long)have, (long long)n_shards);
        } else {
            have = n_shards;
        }
    }
    vs_free(order);
    vs_train_seqs_free(&q);
    vs_mmproj_free(mm);
    vs_tokenizer_free(tok);
    vs_world_dataset_free(train);
    vs_free(seqs), vs_free(toks), vs_free(ids);
    if (s == VS_OK && !r->stopped) s = vs_msd_cache_load(r->cache_dir, C, have, &r->cache, err);
    if (s == VS_OK) r->res.cached = r->cache.n;
    return s;
}

/* ---------------------------------------------------------------------------------------------- */
/* Training */

double vs_msd_visual_prob(int64_t step, int64_t total) {
    const int64_t half = total / 2;
    if (step < half) return 0;
    return VS_MIN(1.0, (double)(step - half + 1) / (double)(total - half));
}

void vs_msd_pick(const vs_msd_pools *p, uint64_t seed, int64_t step, int64_t total, int B, int64_t *idx) {
    for (int i = 0; i < B; i++) {
        const uint64_t h1 = vs_mix64(seed ^ vs_mix64((uint64_t)step * 0x100000001b3ull + (uint64_t)i));
        const uint64_t h2 = vs_mix64(h1);
        if (!p->two_stage) {
            const int64_t n = p->n[0] + p->n[1], k = (int64_t)(h2 % (uint64_t)n);
            idx[i] = k < p->n[0] ? p->rec[0][k] : p->rec[1][k - p->n[0]];
            continue;
        }
        int v = (double)(h1 >> 11) * 0x1.0p-53 < vs_msd_visual_prob(step, total);
        if (p->n[v] == 0) v = !v;
        idx[i] = p->rec[v][h2 % (uint64_t)p->n[v]];
    }
}

/* Held-out records: text-only first, then by length (less padding per batch); insertion sort. */
static void sort_held(const vs_msd_cache *c, int64_t *idx, int64_t n) {
    for (int64_t i = 1; i < n; i++) {
        const int64_t v = idx[i];
        const vs_msd_record *a = &c->rec[v];
        int64_t j = i;
        for (; j > 0; j--) {
            const vs_msd_record *b = &c->rec[idx[j - 1]];
            if (b->visual < a->visual || (b->visual == a->visual && b->T <= a->T)) break;
            idx[j] = idx[j - 1];
        }
        idx[j] = v;
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* The model trained: the MSD head or the DREAM draft model, behind one face */

typedef struct head_loss {
    double total;
    int64_t counted, top1;
} head_loss;

static vs_train_params *params_of(mrun *r) {
    return r->dm ? vs_train_dream_params(r->dm) : vs_train_msd_params(r->m);
}

/* The forward of a batch from the cache (vs_msd_cache_fill_batch's layout: the MSD head's mask, slot p
 * counting for token p + 2; DREAM's row p counts for token p + 1, the same mask one row later). */
static vs_status model_forward(mrun *r, const vs_train_msd_batch *b, head_loss *l, vs_error *err) {
    if (!r->dm) {
        vs_train_msd_loss ml;
        vs_status s = vs_train_msd_forward(r->m, r->tp, b, &ml, err);
        *l = (head_loss){ml.total, ml.counted, ml.top1};
        return s;
    }
    for (int i = 0; i < b->B; i++)
        for (int p = 0; p < b->T; p++)
            r->dmask[(size_t)i * b->T + p] = p > 0 ? b->mask[(size_t)i * b->T + p - 1] : 0.0f;
    const vs_train_dream_batch db = {.B = b->B, .T = b->T, .emb = b->emb, .feat = b->feat, .noise = b->noise,
                                     .mid = b->mid, .mask = r->dmask};
    vs_train_dream_loss dl;
    vs_status s = vs_train_dream_forward(r->dm, r->tp, &db, &dl, err);
    *l = (head_loss){dl.total, dl.counted, dl.top1};
    return s;
}

static vs_status model_backward(mrun *r, vs_error *err) {
    return r->dm ? vs_train_dream_backward(r->dm, r->tp, err) : vs_train_msd_backward(r->m, r->tp, err);
}

/* Writes the trained model and checks that the file loads as a drafter for the target. */
static vs_status model_export(mrun *r, vs_error *err) {
    float probe[VS_MSD_PROBE];
    vs_msd_embd_probe(r->target, probe);
    vs_status s;
    if (r->dm) {
        if ((s = vs_train_dream_export(r->dm, probe, r->o->mat_type, r->head, err))) return s;
        vs_dream_head *h = vs_dream_head_load(r->head, err);
        s = h ? vs_dream_head_check(h, r->target, err) : VS_ERR_FORMAT;
        vs_dream_head_free(h);
    } else {
        if ((s = vs_train_msd_export(r->m, probe, r->o->mat_type, r->head, err))) return s;
        vs_msd_head *h = vs_msd_head_load(r->head, err);
        s = h ? vs_msd_head_check(h, r->target, err) : VS_ERR_FORMAT;
        vs_msd_head_free(h);
    }
    return s ? vs_error_wrap(err, "the exported %s", r->dm ? "DREAM model" : "head") : VS_OK;
}

static vs_status save(mrun *r, vs_error *err) {
    vs_train_loop *L = &r->L;
    vs_status s = vs_train_loop_rotate(L, err);
    if (s) return s;
    vs_gguf_writer *w = vs_gguf_writer_new();
    if (!w) return vs_error_set(err, VS_ERR_NOMEM, "out of memory");
    vs_gguf_set_str(w, "general.architecture", r->dm ? "vlmspec-dream-train" : "vlmspec-msd-train");
    s = vs_train_checkpoint_write(w, params_of(r), &L->st, L->ckpt, err);
    vs_gguf_writer_free(w);
    if (s == VS_OK) s = vs_train_loop_write_curve(L, err);
    return s;
}

static vs_status load_ckpt(void *ctx, const char *path, bool *other, vs_error *err) {
    mrun *r = ctx;
    *other = false; /* the tensor shapes are checked: another head shape fails like a damaged file */
    vs_gguf *g = vs_gguf_open(path, err);
    if (!g) return VS_ERR_INVALID;
    vs_status s = vs_train_checkpoint_read(g, params_of(r), &r->L.st, err);
    vs_gguf_close(g);
    return s;
}

/* Held-out loss and top-1 over records [n_train, n); appends a line to eval.csv. */
static vs_status evaluate(mrun *r, vs_error *err) {
    const int B = r->o->batch;
    double loss = 0;
    int64_t counted = 0, top1 = 0, cnt[2] = {0, 0}, hit[2] = {0, 0};
    const int64_t nh = r->cache.n - r->n_train;
    for (int64_t i0 = 0; i0 < nh; i0 += B) {
        const int nb = (int)VS_MIN((int64_t)B, nh - i0);
        const int64_t *idx = r->held + i0;
        vs_train_msd_batch b;
        head_loss l;
        vs_status s = vs_msd_cache_fill_batch(&r->cache, r->target, idx, nb, 0, NULL, &r->buf, &b, err);
        if (s == VS_OK) s = model_forward(r, &b, &l, err);
        if (s) return s;
        loss += l.total * (double)l.counted, counted += l.counted, top1 += l.top1;
        /* the held-out order puts the text-only records first: one batch at most mixes the kinds, and
         * that one is split per record for the per-kind figures */
        const int vis0 = r->cache.rec[idx[0]].visual;
        bool mixed = false;
        for (int i = 1; i < nb; i++) mixed |= r->cache.rec[idx[i]].visual != vis0;
        if (!mixed) {
            cnt[vis0] += l.counted, hit[vis0] += l.top1;
            continue;
        }
        for (int i = 0; i < nb; i++) {
            if ((s = vs_msd_cache_fill_batch(&r->cache, r->target, &idx[i], 1, 0, NULL, &r->buf, &b, err)) ||
                (s = model_forward(r, &b, &l, err)))
                return s;
            const int v = r->cache.rec[idx[i]].visual;
            cnt[v] += l.counted, hit[v] += l.top1;
        }
    }
    r->res.step = r->L.st.step;
    r->res.loss = counted ? loss / (double)counted : 0;
    r->res.top1 = counted ? (double)top1 / (double)counted : 0;
    r->res.top1_text = cnt[0] ? (double)hit[0] / (double)cnt[0] : 0;
    r->res.top1_vis = cnt[1] ? (double)hit[1] / (double)cnt[1] : 0;
    char line[256];
    snprintf(line, sizeof(line), "%lld,%.9g,%.9g,%.9g,%.9g", (long long)r->res.step, r->res.loss, r->res.top1,
             r->res.top1_text, r->res.top1_vis);
    vs_status s = vs_train_evals_append(r->evalcsv, &r->evals, line, err);
    if (s) return s;
    printf("held-out step %lld: loss %.4f  top-1 %.1f%% (text %.1f%%, visual %.1f%%) over %lld positions\n",
           (long long)r->res.step, r->res.loss, 100 * r->res.top1, 100 * r->res.top1_text, 100 * r->res.top1_vis,
           (long long)counted);
    fflush(stdout);
    return VS_OK;
}

/* eval.csv's header and, resuming, its lines up to step `upto` (the last one: the latest figures). */
static vs_status evals_start(mrun *r, int64_t upto, vs_error *err) {
    const char *last = NULL;
    vs_status s = vs_train_evals_read(r->evalcsv, "step,loss,top1,top1_text,top1_visual", upto > 0, upto, &r->evals,
                                      &last, err);
    if (s == VS_OK && last) {
        char *q = NULL;
        r->res.step = strtoll(last, &q, 10);
        double *dst[] = {&r->res.loss, &r->res.top1, &r->res.top1_text, &r->res.top1_vis};
        for (size_t k = 0; k < VS_ARRAY_LEN(dst); k++) *dst[k] = *q == ',' ? strtod(q + 1, &q) : 0;
    }
    return s;
}

static vs_status write_summary(mrun *r, vs_error *err) {
    const vs_train_loop *L = &r->L;
    vs_json_writer w;
    vs_json_writer_init(&w);
    vs_json_obj_begin(&w);
    vs_json_kv_int(&w, "steps", L->st.step);
    vs_json_kv_int(&w, "positions", (int64_t)L->st.tokens);
    vs_json_kv_num(&w, "wall_s", L->st.elapsed_s);
    vs_json_kv_int(&w, "cached_conversations", r->cache.n);
    vs_json_kv_int(&w, "held_out_conversations", r->cache.n - r->n_train);
    vs_json_kv_num(&w, "final_loss", vs_train_curve_recent(&L->curve, 20));
    vs_json_kv_num(&w, "held_out_loss", r->res.loss);
    vs_json_kv_num(&w, "held_out_top1", r->res.top1);
    vs_json_kv_num(&w, "held_out_top1_text", r->res.top1_text);
    vs_json_kv_num(&w, "held_out_top1_visual", r->res.top1_vis);
    vs_json_obj_end(&w);
    return vs_train_write_json(r->summary, &w, err);
}

/* The model, the pools, the batch buffers; a fresh or resumed state. */
static vs_status setup_training(mrun *r, vs_error *err) {
    const vs_msd_run_opts *o = r->o;
    vs_train_loop *L = &r->L;
    if (r->cache.n <= o->eval_seqs)
        return vs_error_set(err, VS_ERR_INVALID, "the cache holds %lld conversations: no more than the %d held out",
                            (long long)r->cache.n, o->eval_seqs);
    if (o->batch > 64) return vs_error_set(err, VS_ERR_INVALID, "--batch %d: at most 64", o->batch);
    r->n_train = r->cache.n - o->eval_seqs;
    r->pools.two_stage = o->two_stage;
    for (int p = 0; p < 2; p++)
        if (!(r->pool[p] = vs_malloc(sizeof(int64_t) * (size_t)r->n_train)))
            return vs_error_set(err, VS_ERR_NOMEM, "out of memory");
        else
            r->pools.rec[p] = r->pool[p];
    if (!(r->held = vs_malloc(sizeof(int64_t) * (size_t)o->eval_seqs)))
        return vs_error_set(err, VS_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < o->eval_seqs; i++) r->held[i] = r->n_train + i;
    sort_held(&r->cache, r->held, o->eval_seqs);
    r->max_T = 2;
    for (int64_t i = 0; i < r->cache.n; i++) {
        if (i < r->n_train) {
            const int p = r->cache.rec[i].visual;
            r->pool[p][r->pools.n[p]++] = i;
        }
        r->max_T = VS_MAX(r->max_T, r->cache.rec[i].T);
    }
    if (!(r->lm_head = vs_train_msd_lm_head(r->target, err))) return VS_ERR_NOMEM;
    if (o->dream) {
        if (!(r->dm = vs_train_dream_new(&r->dshape, r->lm_head, o->batch, r->max_T, err))) return VS_ERR_INVALID;
        if (!(r->dmask = vs_malloc(sizeof(float) * (size_t)o->batch * (size_t)r->max_T)))
            return vs_error_set(err, VS_ERR_NOMEM, "out of memory");
    } else if (!(r->m = vs_train_msd_new(&r->shape, r->lm_head, o->batch, r->max_T, err))) {
        return VS_ERR_INVALID;
    }
    vs_status s = vs_msd_batch_buf_init(&r->buf, o->batch, r->max_T, r->shape.width, err);
    char *settings = s ? NULL : run_settings(r);
    if (s == VS_OK && !settings) s = vs_error_set(err, VS_ERR_NOMEM, "out of memory");
    if (s) return s;
    if (o->resume && vs_train_loop_has_ckpt(L)) { /* run.json was checked before the cache stage */
        s = vs_train_loop_load_newest(L, load_ckpt, r, err);
        if (s == VS_OK) s = vs_train_loop_restore_curve(L, err);
        if (s == VS_OK) s = evals_start(r, L->st.step, err);
        if (s == VS_OK)
            printf("resumed from step %lld (%llu positions, %.0f s trained)\n", (long long)L->st.step,
                   (unsigned long long)L->st.tokens, L->st.elapsed_s);
    } else {
        s = vs_train_write_text(L->runjson, settings, err);
        if (r->dm) vs_train_dream_init(r->dm, (uint64_t)o->seed);
        else vs_train_msd_init(r->m, (uint64_t)o->seed);
        memset(&L->st, 0, sizeof(L->st));
        vs_rng_seed(&L->st.rng, (uint64_t)o->seed ^ 0x6e6f697365ull);
        if (s == VS_OK) s = evals_start(r, 0, err);
    }
    vs_free(settings);
    if (s) return s;
    int64_t rows = 0, visual = 0;
    for (int64_t i = 0; i < r->cache.n; i++) rows += r->cache.rec[i].T, visual += r->cache.rec[i].visual;
    printf("train head (%s%s%s): width %d, %d heads (%d KV), MLP %d; %lld conversations cached (%lld rows, %lld "
           "with images), %lld held out\n", o->dream ? "DREAM" : "MSD",
           o->dream || o->decoupled ? "" : ", images through fc", o->two_stage ? ", two-stage data" : ", one-stage data",
           r->shape.width, r->shape.n_head, r->shape.n_head_kv, r->shape.n_ff, (long long)r->cache.n, (long long)rows,
           (long long)visual, (long long)(r->cache.n - r->n_train));
    if (o->dream) { /* the intermediate targets the cache holds: how often each layer was chosen */
        int64_t with = 0, by_layer[16] = {0};
        for (int64_t i = 0; i < r->cache.n; i++)
            if (r->cache.rec[i].mid) with++, by_layer[VS_MIN(r->cache.rec[i].mid_layer, 15)]++;
        if (!with) {
            printf("  no intermediate targets in the cache (--mid-layer none): the loss has no block-2 term\n");
        } else {
            printf("  intermediate targets in %lld of %lld conversations, layer (count):", (long long)with,
                   (long long)r->cache.n);
            for (int l = 1; l < 16; l++)
                if (by_layer[l]) printf(" %d%s (%lld)", l, l == 15 ? "+" : "", (long long)by_layer[l]);
            printf("\n");
        }
    }
    if (o->two_stage && (r->pools.n[0] == 0 || r->pools.n[1] == 0))
        printf("warning: no %s conversations among the training records: the two stages draw from the others "
               "alone\n", r->pools.n[0] == 0 ? "text-only" : "visual");
    printf("  %lld steps of %d conversations, lr %g -> %g, warm-up %g, clip %g, noise %g\n", (long long)o->steps,
           o->batch, o->lr, o->lr_min, o->warmup, o->clip, o->noise);
    fflush(stdout);
    return VS_OK;
}

static vs_status step(mrun *r, const vs_adamw *opt, float lr, head_loss *l, vs_error *err) {
    int64_t idx[64];
    vs_msd_pick(&r->pools, (uint64_t)r->o->seed, r->L.st.step, r->o->steps, r->o->batch, idx);
    vs_train_msd_batch b;
    vs_train_params *p = params_of(r);
    vs_status s = vs_msd_cache_fill_batch(&r->cache, r->target, idx, r->o->batch, (float)r->o->noise, &r->L.st.rng,
                                          &r->buf, &b, err);
    if (s) return s;
    vs_train_params_zero_grad(p);
    if ((s = model_forward(r, &b, l, err)) || (s = model_backward(r, err))) return s;
    vs_train_clip_grad(p, (float)r->o->clip);
    vs_train_adamw_step(p, r->tp, opt, lr);
    return VS_OK;
}

static vs_status train(mrun *r, vs_error *err) {
    const vs_msd_run_opts *o = r->o;
    vs_train_loop *L = &r->L;
    vs_status s = setup_training(r, err);
    if (s) return s;
    vs_adamw opt;
    vs_adamw_default(&opt);
    opt.beta2 = (float)o->beta2, opt.weight_decay = (float)o->wd;
    const vs_lr_schedule sched = {(float)o->lr, (float)o->lr_min, (int64_t)o->warmup, o->steps};
    vs_progress pr;
    vs_progress_begin(&pr, "train head", o->steps);
    pr.t_start -= L->st.elapsed_s;
    pr.rate_done0 = L->st.step;
    const double t0 = vs_time_now(), elapsed0 = L->st.elapsed_s;
    const double deadline = r->deadline;
    int64_t run_steps = 0, run_pos = 0;
    bool stop = false;
    if (L->st.step == 0 && (s = evaluate(r, err))) return s;
    while (L->st.step < o->steps && !stop) {
        const float lr = vs_train_lr(&sched, L->st.step);
        head_loss l;
        if ((s = step(r, &opt, lr, &l, err))) return s;
        const double now = vs_time_now();
        L->st.tokens += (uint64_t)l.counted, run_pos += l.counted;
        L->st.elapsed_s = elapsed0 + (now - t0);
        const vs_train_curve_point pt = {L->st.step, (float)l.total, lr, (double)L->st.tokens, L->st.elapsed_s};
        if ((s = vs_train_curve_add(&L->curve, pt, err))) return s;
        L->st.step++, run_steps++;
        if (!isfinite(l.total))
            return vs_error_set(err, VS_ERR_INVALID, "loss is %f at step %lld", l.total, (long long)pt.step);
        if (!o->quiet)
            vs_progress_update(&pr, L->st.step, " loss %.4f  top-1 %.0f%%  %.0f pos/s  lr %.2e  %s %.2f  "
                               "held-out top-1 %.1f%% ", vs_train_curve_recent(&L->curve, 20),
                               l.counted ? 100.0 * (double)l.top1 / (double)l.counted : 0.0,
                               (double)run_pos / (now - t0), (double)lr,
                               o->two_stage ? "visual p" : "visual share",
                               o->two_stage ? vs_msd_visual_prob(L->st.step - 1, o->steps)
                                            : (double)r->pools.n[1] / (double)(r->pools.n[0] + r->pools.n[1]),
                               100 * r->res.top1);
        stop = (o->chunk_steps > 0 && run_steps >= o->chunk_steps) || (deadline > 0 && now >= deadline);
        if ((L->st.step % o->eval_every == 0 || L->st.step == o->steps) && (s = evaluate(r, err))) return s;
        if ((L->st.step % o->ckpt_every == 0 || L->st.step == o->steps || stop) && (s = save(r, err))) return s;
    }
    if (!o->quiet) vs_progress_end(&pr, L->st.step);
    const double run_s = vs_time_now() - t0;
    printf("this run: %lld steps in %.1f s (%.0f positions/s); total %lld/%lld steps, %.0f s\n", (long long)run_steps,
           run_s, run_s > 0 ? (double)run_pos / run_s : 0.0, (long long)L->st.step, (long long)o->steps,
           L->st.elapsed_s);
    if (L->st.step < o->steps) {
        printf("stopped at step %lld of %lld: continue with the same flags and --resume\n", (long long)L->st.step,
               (long long)o->steps);
        return VS_OK;
    }
    if (r->res.step != L->st.step && (s = evaluate(r, err))) return s;
    if ((s = model_export(r, err))) return s;
    printf("wrote %s\n", r->head);
    r->res.finished = true;
    return write_summary(r, err);
}

static vs_status run(mrun *r, vs_error *err) {
    const vs_msd_run_opts *o = r->o;
    vs_train_loop *L = &r->L;
    L->cmd = "train head";
    L->title = o->dream       ? (o->two_stage ? "DREAM model (two-stage data): loss" : "DREAM model: loss")
               : o->decoupled ? (o->two_stage ? "MSD head: loss" : "MSD head (one-stage data): loss")
                              : (o->two_stage ? "EAGLE head (two-stage data): loss" : "EAGLE head: loss");
    vs_status s = vs_train_loop_dirs(L, o->out, err);
    if (s) return s;
    if (o->cache) snprintf(r->cache_dir, sizeof(r->cache_dir), "%s", o->cache);
    else snprintf(r->cache_dir, sizeof(r->cache_dir), "%s/cache", o->out);
    snprintf(r->cache_json, sizeof(r->cache_json), "%s/cache.json", r->cache_dir);
    snprintf(r->evalcsv, sizeof(r->evalcsv), "%s/eval.csv", o->out);
    snprintf(r->head, sizeof(r->head), "%s/%s", o->out, o->dream ? "dream.gguf" : "msd-head.gguf");
    snprintf(r->summary, sizeof(r->summary), "%s/%s", o->out, o->dream ? "dream.json" : "msd.json");
    if (!o->resume && ((!o->cache && access(r->cache_json, F_OK) == 0) || vs_train_loop_has_ckpt(L)))
        return vs_error_set(err, VS_ERR_INVALID, "%s holds a run: --resume to continue it (the same flags), or choose "
                            "another --out", o->out);
    r->deadline = o->time_limit > 0 ? vs_time_now() + o->time_limit : 0; /* the cache stage counts too */
    if (!(r->tp = vs_threadpool_new(o->threads, err))) return VS_ERR_NOMEM;
    vs_train_set_blas_threads(o->threads);
    if (!(r->target = vs_lm_load(o->target, err))) return vs_error_wrap(err, "--target");
    const vs_lm_config *tc = vs_lm_cfg(r->target);
    r->shape = vs_msd_shape_for(r->target, o->n_head ? o->n_head : tc->n_head,
                                o->n_head_kv ? o->n_head_kv : tc->n_head_kv, o->n_ff ? o->n_ff : tc->n_ff,
                                tc->n_ctx_train, o->decoupled);
    if ((s = vs_msd_shape_check(&r->shape, err))) return s;
    r->dshape = vs_dream_shape_for(r->target, r->shape.n_head, r->shape.n_head_kv, r->shape.n_ff, tc->n_ctx_train);
    if (o->resume && vs_train_loop_has_ckpt(L)) { /* before any work: the run's settings, its data included */
        char *settings = run_settings(r);
        s = settings ? vs_train_loop_check_settings(L, settings, err) : vs_error_set(err, VS_ERR_NOMEM, "out of memory");
        vs_free(settings);
        if (s) return s;
    }
    if ((s = build_cache(r, err)) || r->stopped) return s;
    if (o->cache_only) {
        printf("cache complete: %lld conversations in %s\n", (long long)r->cache.n, r->cache_dir);
        return VS_OK;
    }
    return train(r, err);
}

vs_status vs_msd_run(const vs_msd_run_opts *o, vs_msd_run_result *res, vs_error *err) {
    if (!o->out || !o->target || !o->mmproj || !o->data)
        return vs_error_set(err, VS_ERR_INVALID, "train head: the run directory, target, mmproj and data are required");
    if (o->batch < 1 || o->batch > 64 || o->steps < 1 || o->shard < 1 || o->eval_seqs < 1 || o->eval_every < 1 ||
        o->ckpt_every < 1 || o->samples < 0)
        return vs_error_set(err, VS_ERR_INVALID, "train head: batch (1 .. 64), steps, shard size, held-out "
                            "conversations and intervals must be >= 1, samples >= 0");
    if (o->samples > 0 && o->samples <= o->eval_seqs)
        return vs_error_set(err, VS_ERR_INVALID, "train head: %lld conversations, no more than the %d held out",
                            (long long)o->samples, o->eval_seqs);
    if (!(o->lr > 0) || !(o->lr_min >= 0) || o->lr_min > o->lr || !(o->warmup >= 0) || !(o->wd >= 0) ||
        !(o->clip >= 0) || !(o->beta2 >= 0 && o->beta2 < 1) || !(o->noise >= 0) || !(o->time_limit >= 0))
        return vs_error_set(err, VS_ERR_INVALID, "train head: lr > 0, 0 <= lr_min <= lr, warm-up, weight decay, "
                            "clip, noise and time limit >= 0, 0 <= beta2 < 1");
    if (o->mat_type != VS_TYPE_F32 && o->mat_type != VS_TYPE_F16 && o->mat_type != VS_TYPE_BF16)
        return vs_error_set(err, VS_ERR_INVALID, "train head: the head's matrices are F32, F16 or BF16 (not %s)",
                            vs_type_name(o->mat_type));
    mrun r;
    memset(&r, 0, sizeof(r));
    r.o = o;
    vs_status s = run(&r, err);
    if (res) *res = r.res;
    vs_train_curve_free(&r.L.curve);
    vs_train_msd_free(r.m);
    vs_train_dream_free(r.dm);
    vs_free(r.dmask);
    vs_free(r.lm_head);
    vs_msd_cache_free(&r.cache);
    vs_msd_batch_buf_free(&r.buf);
    vs_free(r.pool[0]), vs_free(r.pool[1]), vs_free(r.held);
    vs_free(r.evals);
    vs_lm_free(r.target);
    vs_threadpool_free(r.tp);
    return s;
}
