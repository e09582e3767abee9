/* train_loop: one resumable training run. See train_loop.h. */
#include "train_loop.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "outfile.h"

vs_status vs_train_mkdir(const char *path, vs_error *err) {
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        return vs_error_set(err, VS_ERR_IO, "%s: cannot create directory: %s", path, strerror(errno));
    return VS_OK;
}

vs_status vs_train_write_text(const char *path, const char *text, vs_error *err) {
    vs_outfile o;
    vs_status st = vs_outfile_open(&o, path, err);
    if (st != VS_OK) return st;
    fputs(text, o.f);
    fputc('\n', o.f);
    return vs_outfile_commit(&o, err); /* checks every write above */
}


vs_status vs_train_loop_dirs(vs_train_loop *L, const char *dir, vs_error *err) {
    snprintf(L->dir, sizeof(L->dir), "%s", dir);
    char ck[1150];
    snprintf(ck, sizeof(ck), "%s/ckpt", dir);
    vs_status s;
    if ((s = vs_train_mkdir(dir, err)) || (s = vs_train_mkdir(ck, err))) return s;
    snprintf(L->ckpt, sizeof(L->ckpt), "%s/ckpt.gguf", ck);
    snprintf(L->prev, sizeof(L->prev), "%s/ckpt-prev.gguf", ck);
    snprintf(L->csv, sizeof(L->csv), "%s/loss.csv", dir);
    snprintf(L->svg, sizeof(L->svg), "%s/loss.svg", dir);
    snprintf(L->runjson, sizeof(L->runjson), "%s/run.json", dir);
    return VS_OK;
}

bool vs_train_loop_has_ckpt(const vs_train_loop *L) {
    return access(L->ckpt, F_OK) == 0 || access(L->prev, F_OK) == 0;
}

/* run.json must hold exactly `settings` (a resumed or reused run repeats its settings). */
vs_status vs_train_loop_check_settings(const vs_train_loop *L, const char *settings, vs_error *err) {
    uint8_t *old = NULL;
    size_t n = 0;
    vs_status s = vs_read_file(L->runjson, &old, &n, err);
    if (s == VS_OK) {
        while (n && (old[n - 1] == '\n' || old[n - 1] == '\r')) old[--n] = 0;
        if (strcmp((const char *)old, settings))
            s = vs_error_set(err, VS_ERR_INVALID,
                             "--resume with other settings than %s holds:\n  stored:  %s\n  now:     %s\n"
                             "(repeat the original flags; running flags such as --threads, --ckpt-every, "
                             "--chunk-steps and --time-limit may differ)",
                             L->runjson, (const char *)old, settings);
    }
    vs_free(old);
    return s;
}

vs_status vs_train_loop_rotate(const vs_train_loop *L, vs_error *err) {
    if (access(L->ckpt, F_OK) == 0 && rename(L->ckpt, L->prev) != 0)
        return vs_error_set(err, VS_ERR_IO, "%s: cannot rename to %s: %s", L->ckpt, L->prev, strerror(errno));
    return VS_OK;
}

static vs_status loop_save(vs_train_loop *L, vs_error *err) {
    vs_train_data_state ds;
    vs_train_data_get_state(L->data, &ds);
    L->st.epoch = ds.epoch, L->st.data_pos = ds.pos, L->st.rng = ds.rng;
    vs_status s = vs_train_loop_rotate(L, err);
    if (s == VS_OK) s = vs_train_vlm_save(L->m, &L->st, L->ckpt, err);
    if (s == VS_OK) s = vs_train_loop_write_curve(L, err);
    return s;
}

vs_status vs_train_loop_write_curve(const vs_train_loop *L, vs_error *err) {
    vs_status s = vs_train_curve_write_csv(&L->curve, L->csv, err);
    if (s == VS_OK) s = vs_train_curve_write_svg(&L->curve, L->svg, L->title, 25, true, err);
    return s;
}

vs_status vs_train_loop_load_newest(const vs_train_loop *L, vs_train_ckpt_load_fn load, void *ctx, vs_error *err) {
    vs_error e1 = {0};
    bool other = false;
    vs_status s = load(ctx, L->ckpt, &other, &e1);
    if (s && !other && access(L->prev, F_OK) == 0) {
        fprintf(stderr, "vlmspec %s: %s; trying %s\n", L->cmd, e1.msg, L->prev);
        s = load(ctx, L->prev, &other, err);
    } else if (s) {
        *err = e1;
    }
    return s ? vs_error_wrap(err, "--resume") : VS_OK;
}

vs_status vs_train_loop_restore_curve(vs_train_loop *L, vs_error *err) {
    vs_status s = vs_train_curve_read_csv(&L->curve, L->csv, true, err);
    /* points written after the checkpoint belong to steps that will be redone */
    while (s == VS_OK && L->curve.n > 0 && L->curve.pt[L->curve.n - 1].step >= L->st.step) L->curve.n--;
    return s;
}

/* Loads checkpoint `path` for a run whose model is *want (want_what: who says so, for the message). A
 * readable file that holds another model is refused before anything is allocated (*other = true;
 * VS_ERR_INVALID naming the checkpoint, the field and both values); other failures are
 * vs_train_vlm_load's. */
vs_train_vlm *vs_train_load_for_run(const char *path, const vs_train_vlm_config *want, const char *want_what,
                                  int max_B, int max_T, int max_I, vs_train_state *st, bool *other,
                                  vs_error *err) {
    vs_train_vlm_config have;
    *other = false;
    if (vs_train_vlm_config_read(path, &have, err)) return NULL;
    if (vs_train_vlm_config_match(want, want_what, &have, path, err)) {
        *other = true;
        return NULL;
    }
    return vs_train_vlm_load(path, max_B, max_T, max_I, st, err);
}

/* Loads the newest readable checkpoint (ckpt, else ckpt-prev) into L->m and L->st. It must hold the
 * run's model (*want): a checkpoint of another model is an error, not a reason to fall back to
 * ckpt-prev (only a damaged or unreadable one is). */
typedef struct vlm_load_ctx {
    vs_train_loop *L;
    const vs_train_vlm_config *want;
    const char *want_what;
    int max_B, max_T, max_I;
} vlm_load_ctx;

static vs_status vlm_load(void *p, const char *path, bool *other, vs_error *err) {
    vlm_load_ctx *c = p;
    c->L->m = vs_train_load_for_run(path, c->want, c->want_what, c->max_B, c->max_T, c->max_I, &c->L->st, other, err);
    return c->L->m ? VS_OK : VS_ERR_INVALID;
}

vs_status vs_train_loop_load(vs_train_loop *L, const vs_train_vlm_config *want, const char *want_what, int max_B,
                           int max_T, int max_I, vs_error *err) {
    vlm_load_ctx c = {L, want, want_what, max_B, max_T, max_I};
    return vs_train_loop_load_newest(L, vlm_load, &c, err) ? VS_ERR_INVALID : VS_OK;
}

/* After vs_train_loop_load: the data position and the loss curve up to the checkpoint. */
vs_status vs_train_loop_restore(vs_train_loop *L, vs_error *err) {
    vs_train_data_state dst = {.epoch = L->st.epoch, .pos = L->st.data_pos, .rng = L->st.rng};
    vs_status s = vs_train_data_set_state(L->data, &dst, err);
    if (s == VS_OK) s = vs_train_loop_restore_curve(L, err);
    if (s == VS_OK) {
        printf("resumed from step %lld (epoch %llu, batch %llu, %.0f s trained)\n", (long long)L->st.step,
               (unsigned long long)L->st.epoch, (unsigned long long)L->st.data_pos, L->st.elapsed_s);
    }
    return s;
}

/* A fresh run's state: step 0, the data reader's initial RNG. */
void vs_train_loop_fresh_state(vs_train_loop *L) {
    memset(&L->st, 0, sizeof(L->st));
    vs_train_data_state dst;
    vs_train_data_get_state(L->data, &dst);
    L->st.rng = dst.rng;
}

/* Mean loss of the last n curve points. */
double vs_train_curve_recent(const vs_train_curve *c, int64_t n) {
    double s = 0;
    int64_t k = 0;
    for (int64_t i = c->n - 1; i >= 0 && k < n; i--, k++) s += c->pt[i].loss;
    return k ? s / (double)k : 0;
}

/* DIR/threads and DIR/gemm record the thread count and the product a run started with (a run started
 * before DIR/gemm existed used the default). OpenBLAS's products depend on its thread count, and
 * amx-bf16x3 rounds differently from F32, so a run continued with another setting is correct but no
 * longer bit-identical to an uninterrupted one: say so (a warning, not an error: it is a legitimate
 * choice, e.g. switching to the faster product mid-run). */
static void loop_check_setting(const vs_train_loop *L, const char *file, const char *now, const char *what,
                               const char *assumed) {
    char path[1150], first[64] = "";
    snprintf(path, sizeof(path), "%s/%s", L->dir, file);
    FILE *f = fopen(path, "r");
    if (f) {
        if (fscanf(f, "%63s", first) != 1) first[0] = 0;
        fclose(f);
    } else if (assumed) {
        snprintf(first, sizeof(first), "%s", assumed);
    }
    if (first[0] && strcmp(first, now))
        fprintf(stderr,
                "vlmspec %s: warning: this run started with %s %s, now %s: the products sum in another "
                "order or precision, so the result will not be bit-identical to an uninterrupted run\n",
                L->cmd, what, first, now);
    vs_error err = {0};
    if (!f && vs_train_write_text(path, first[0] ? first : now, &err) != VS_OK)
        fprintf(stderr, "vlmspec %s: warning: %s\n", L->cmd, err.msg);
}

static void loop_check_threads(const vs_train_loop *L, int threads) {
    char now[32], threads_path[1150];
    snprintf(now, sizeof(now), "%d", threads);
    snprintf(threads_path, sizeof(threads_path), "%s/threads", L->dir);
    /* an older run directory has threads, not gemm (it ran OpenBLAS) nor attention (it ran direct) */
    bool existed = access(threads_path, F_OK) == 0;
    char att_path[1150];
    snprintf(att_path, sizeof(att_path), "%s/attention", L->dir);
    bool att_existed = access(att_path, F_OK) == 0;
    loop_check_setting(L, "threads", now, "--threads", NULL);
    loop_check_setting(L, "gemm", vs_train_sgemm_backend(), "--gemm", existed ? "openblas" : NULL);
    loop_check_setting(L, "attention", vs_train_attention_backend(), "--attention",
                       existed && !att_existed ? "direct" : NULL);
}

/* Trains from L->st.step to L->total (or until a chunk/time limit, with a checkpoint). */
vs_status vs_train_loop_run(vs_train_loop *L, vs_error *err) {
    const vs_train_sched *o = &L->o;
    vs_status s;
    loop_check_threads(L, o->threads);
    if (!L->tp && !(L->tp = vs_threadpool_new(o->threads, err))) return VS_ERR_NOMEM;
    vs_train_set_blas_threads(o->threads);
    vs_train_params *p = vs_train_vlm_params(L->m);
    vs_train_vlm_set_norm_cap(L->m, (float)o->norm_cap, (float)(o->norm_cap_weight / o->accum));
    if (o->ground > 0 && (s = vs_train_vlm_set_ground(L->m, o->ground_layer, (float)(o->ground / o->accum),
                                                      o->ground_mode, err)))
        return s;
    double ground_sum = 0; /* the grounding term over the steps since the last report */
    int64_t ground_steps = 0;
    vs_adamw opt;
    vs_adamw_default(&opt);
    opt.beta2 = (float)o->beta2, opt.weight_decay = (float)o->wd;
    vs_lr_schedule sched = {(float)o->lr, (float)o->lr_min, (int64_t)o->warmup, L->total};
    vs_progress pr;
    vs_progress_begin(&pr, L->label, L->total);
    pr.t_start -= L->st.elapsed_s;       /* elapsed over the whole training */
    pr.rate_done0 = L->st.step;          /* the ETA at this run's speed */
    const double run_t0 = vs_time_now(), elapsed0 = L->st.elapsed_s;
    L->rows_run = L->padded_run = 0;
    L->steps_run = 0;
    bool stop = false;
    while (L->st.step < L->total && !stop) {
        const float lr = vs_train_lr(&sched, L->st.step);
        if (o->freeze_vision > 0) p->frozen[VS_TRAIN_GROUP_VISION] = L->st.step < o->freeze_vision;
        if (o->freeze_lm > 0) p->frozen[VS_TRAIN_GROUP_LM] = L->st.step < o->freeze_lm;
        if (o->freeze_projector > 0) p->frozen[VS_TRAIN_GROUP_PROJECTOR] = L->st.step < o->freeze_projector;
        const double norm = vs_train_data_counted_ahead(L->data, o->accum);
        vs_train_params_zero_grad(p);
        double loss = 0, rows = 0;
        for (int k = 0; k < o->accum; k++) {
            vs_train_batch b;
            vs_train_batch_info info;
            float l;
            if ((s = vs_train_data_next(L->data, &b, &info, err))) return s;
            b.loss_norm = norm;
            if ((s = vs_train_vlm_forward(L->m, L->tp, &b, &l, err))) return s;
            if ((s = vs_train_vlm_backward(L->m, L->tp, err))) return s;
            loss += l, rows += (double)info.rows;
            ground_sum += vs_train_vlm_ground_loss(L->m) / o->accum;
            L->padded_run += (double)b.B * b.T;
        }
        if (o->clip > 0) vs_train_clip_grad(p, (float)o->clip);
        float mul[VS_TRAIN_MAX_GROUPS];
        for (int g = 0; g < VS_TRAIN_MAX_GROUPS; g++) mul[g] = 1.0f;
        const int64_t since = L->st.step - o->freeze_vision; /* steps the tower has been trained before this */
        if (o->vision_warmup > 0 && since >= 0 && since < o->vision_warmup)
            mul[VS_TRAIN_GROUP_VISION] = (float)((double)(since + 1) / (double)o->vision_warmup);
        mul[VS_TRAIN_GROUP_VISION] *= (float)o->vision_lr;
        vs_train_adamw_step_groups(p, L->tp, &opt, lr, mul);
        const double now = vs_time_now();
        L->st.tokens += (uint64_t)rows;
        L->st.elapsed_s = elapsed0 + (now - run_t0);
        L->rows_run += rows;
        L->steps_run++;
        vs_train_curve_point pt = {L->st.step, (float)loss, lr, (double)L->st.tokens, L->st.elapsed_s};
        if ((s = vs_train_curve_add(&L->curve, pt, err))) return s;
        L->st.step++;
        if (!isfinite(loss))
            return vs_error_set(err, VS_ERR_INVALID, "loss is %f at step %lld", loss, (long long)pt.step);
        if (!o->quiet)
            vs_train_progress(&pr, L->st.step, vs_train_curve_recent(&L->curve, 20), L->rows_run / (now - run_t0), lr);
        if (o->ground > 0 && ++ground_steps == 100) { /* the grounding term alone (it is in the loss too) */
            if (!o->quiet)
                fprintf(stderr, "\nstep %lld: grounding term %.4f (mean of the last 100 steps, before its weight)\n",
                        (long long)L->st.step, ground_sum / 100);
            ground_sum = 0, ground_steps = 0;
        }
        stop =
            (o->chunk_steps > 0 && L->steps_run >= o->chunk_steps) || (L->deadline > 0 && now >= L->deadline);
        if (L->st.step % o->ckpt_every == 0 || L->st.step == L->total || stop)
            if ((s = loop_save(L, err))) return s;
        if (o->freeze_vision > 0 && L->st.step == o->freeze_vision) {
            /* the last frozen-tower state, kept: if training the tower goes wrong, a run can restart
             * from here (docs/target.md) */
            char keep[1300];
            snprintf(keep, sizeof(keep), "%s/ckpt-vision-frozen.gguf", L->dir);
            vs_train_data_state ds;
            vs_train_data_get_state(L->data, &ds);
            L->st.epoch = ds.epoch, L->st.data_pos = ds.pos, L->st.rng = ds.rng;
            if ((s = vs_train_vlm_save(L->m, &L->st, keep, err))) return s;
            if (!o->quiet)
                fprintf(stderr, "vision tower unfrozen at step %lld (kept %s)\n", (long long)L->st.step, keep);
        }
    }
    if (!o->quiet) vs_progress_end(&pr, L->st.step);
    L->run_s = vs_time_now() - run_t0;
    printf(
        "this run: %lld steps, %.0f rows (+%.1f%% padding) in %.1f s (%.0f rows/s); total %lld/%lld steps, "
        "%llu rows, %.0f s\n",
        (long long)L->steps_run, L->rows_run,
        L->padded_run > 0 && L->rows_run > 0 ? 100.0 * (L->padded_run - L->rows_run) / L->rows_run : 0.0,
        L->run_s, L->run_s > 0 ? L->rows_run / L->run_s : 0.0, (long long)L->st.step, (long long)L->total,
        (unsigned long long)L->st.tokens, L->st.elapsed_s);
    if (L->curve.n)
        printf("loss: first step %.4f, last 20 steps %.4f\n", L->curve.pt[0].loss,
               vs_train_curve_recent(&L->curve, 20));
    if (L->st.step < L->total)
        printf("stopped at step %lld of %lld: continue with the same flags and --resume\n",
               (long long)L->st.step, (long long)L->total);
    return VS_OK;
}

void vs_train_loop_free(vs_train_loop *L) {
    vs_train_curve_free(&L->curve);
    vs_train_vlm_free(L->m);
    vs_train_data_free(L->data);
    L->m = NULL, L->data = NULL;
    memset(&L->curve, 0, sizeof(L->curve));
}

vs_status vs_train_evals_read(const char *path, const char *header, bool keep, int64_t upto, char **text,
                              const char **last, vs_error *err) {
    if (last) *last = NULL;
    if (!(*text = vs_strdup(header))) return vs_error_set(err, VS_ERR_NOMEM, "out of memory");
    if (!keep || access(path, F_OK) != 0) return VS_OK;
    uint8_t *file = NULL;
    size_t len = 0;
    vs_status s = vs_read_file(path, &file, &len, err);
    size_t last_at = 0;
    for (char *line = s ? NULL : strchr((char *)file, '\n'); line && s == VS_OK;) {
        char *next = strchr(line + 1, '\n');
        if (next) *next = 0;
        if (line[1] && strtoll(line + 1, NULL, 10) <= upto) {
            const size_t old = strlen(*text), add = strlen(line);
            char *grown = vs_realloc(*text, old + add + 1);
            if (!grown) s = vs_error_set(err, VS_ERR_NOMEM, "out of memory");
            else memcpy(grown + old, line, add + 1), *text = grown, last_at = old + 1;
        }
        if (next) *next = '\n';
        line = next;
    }
    vs_free(file);
    if (s == VS_OK && last && last_at) *last = *text + last_at;
    return s;
}

vs_status vs_train_write_json(const char *path, vs_json_writer *w, vs_error *err) {
    char *text = vs_json_writer_take(w, NULL);
    vs_json_writer_free(w);
    vs_status s = text ? vs_train_write_text(path, text, err) : vs_error_set(err, VS_ERR_NOMEM, "out of memory");
    vs_free(text);
    return s;
}

vs_status vs_train_evals_append(const char *path, char **text, const char *line, vs_error *err) {
    const size_t old = strlen(*text), add = strlen(line);
    char *grown = vs_realloc(*text, old + add + 2);
    if (!grown) return vs_error_set(err, VS_ERR_NOMEM, "out of memory");
    grown[old] = '\n';
    memcpy(grown + old + 1, line, add + 1);
    *text = grown;
    return vs_train_write_text(path, *text, err);
}
