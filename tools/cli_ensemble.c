/* cli_ensemble: multimodal and ensemble-drafted `vlmspec generate` (see cli_ensemble.h).
 * Sections: flags, the multimodal prompt (images -> shared ViT features -> the target's rows ->
 * segments), the drafter (inputs, weights, captions), the run (streaming, statistics, --compare, --json,
 * the weight trace). */
#include "cli_ensemble.h"
#include "outfile.h"

#include <stdlib.h>
#include <string.h>

#include "caption.h"
#include "cli.h"
#include "json.h"
#include "lm.h"
#include "mmprompt.h"
#include "spec.h"
#include "tokenizer.h"
#include "vision.h"

/* ------------------------------------------------------------------------------------------------
 * Flags */

void vs_cli_ens_opts_init(vs_cli_ens_opts *o) {
    memset(o, 0, sizeof(*o));
    vs_ens_weights_cfg_default(&o->weights);
    o->pool_k = 2;
    o->caption_tokens = 24;
}

void vs_cli_ens_usage(FILE *f) {
    fprintf(
        f,
        "ensemble drafting (with -md; docs/ensemble.md):\n"
        "  --draft-mode LIST        drafting inputs of the draft model, one batched row each: m (its\n"
        "                           projector over the shared image features), t (images -> \"\\n\"),\n"
        "                           c (images -> \"image: \" + caption), p (k x k pooled features);\n"
        "                           e.g. m,t,c,p. A single t or m without other ensemble flags\n"
        "                           uses the plain draft_lm drafter; reject: DEBUG (see above)\n"
        "  --weights POLICY         static[:r1,r2,..] (uniform or ratios, IbED; default), grid (TABED\n"
        "                           w-grid), inv-kl | inv-tvd (TABED inverse distance), random, adaboost\n"
        "  --weights-tau T          inverse-distance temperature (default 1; 0 = the best input only)\n"
        "  --history H              TABED window: last H verified positions (default 0 = all)\n"
        "  --grid-n N               w-grid resolution: weights in steps of 1/N (default 10)\n"
        "  --history-topk K         tokens kept per distribution for the history's distances\n"
        "                           (default 64; 0 = exact, full vocabulary)\n"
        "  --pool K                 p: pooling window K x K (default 2: 24x24 -> 12x12)\n"
        "  --captions FILE          c: captions, one line per image or \"IMAGE<TAB>caption\" lines; without\n"
        "                           it the drafter captions each image itself (needs --mmproj-draft) on a\n"
        "                           thread while the target prefills\n"
        "  --caption-tokens N       longest generated caption (default 24)\n"
        "  --trace-weights FILE     write the weights of every block (vlmspec plot weights FILE)\n");
}

static bool is(const char *a, const char *b) { return !strcmp(a, b); }

int vs_cli_ens_parse_flag(const char *cmd, int argc, char **argv, int *i, vs_cli_ens_opts *o,
                          vs_cli_spec_opts *spec) {
    const char *a = argv[*i], *v;
    static const char *const with_value[] = {
        "--draft-mode",   "--weights", "--weights-tau",   "--history",  "--grid-n",
        "--history-topk", "--pool",    "--trace-weights", "--captions", "--caption-tokens"};
    bool ours = false;
    for (size_t k = 0; k < VS_ARRAY_LEN(with_value); k++) ours |= is(a, with_value[k]);
    if (!ours) return 0;
    if (!(v = cli_value(cmd, argc, argv, i))) return -1;
    vs_error err = {0};
    double d;
    if (is(a, "--draft-mode")) {
        o->mode_given = true;
        if (is(v, "reject")) {
            spec->mode = VS_CLI_DRAFT_REJECT;
            o->n_inputs = 0;
            return 1;
        }
        if (vs_ens_inputs_parse(v, o->inputs, &o->n_inputs, &err)) {
            cli_fail(cmd, "--draft-mode %s: %s; or reject (debug)", v, err.msg);
            return -1;
        }
        spec->mode = o->inputs[0] == VS_ENS_IN_M ? VS_CLI_DRAFT_M : VS_CLI_DRAFT_T;
    } else if (is(a, "--weights")) {
        if (vs_ens_weights_parse(v, &o->weights, &err)) {
            cli_fail(cmd, "--weights: %s", err.msg);
            return -1;
        }
        o->weights_given = o->ens_flag = true;
    } else if (is(a, "--weights-tau")) {
        if (!cli_parse_f64(cmd, a, v, 0, 1e6, &d)) return -1;
        o->weights.tau = (float)d;
        o->ens_flag = true;
    } else if (is(a, "--history")) {
        if (!cli_parse_int(cmd, a, v, 0, 1 << 24, &o->weights.window)) return -1;
        o->ens_flag = true;
    } else if (is(a, "--grid-n")) {
        if (!cli_parse_int(cmd, a, v, 1, 1000, &o->weights.grid_n)) return -1;
        o->ens_flag = true;
    } else if (is(a, "--history-topk")) {
        if (!cli_parse_int(cmd, a, v, 0, 1 << 24, &o->weights.topk)) return -1;
        o->ens_flag = true;
    } else if (is(a, "--pool")) {
        if (!cli_parse_int(cmd, a, v, 1, 1 << 16, &o->pool_k)) return -1;
        o->ens_flag = true;
    } else if (is(a, "--trace-weights")) {
        o->trace_path = v;
        o->ens_flag = true;
    } else if (is(a, "--captions")) {
        o->captions_path = v;
        o->ens_flag = true;
    } else { /* --caption-tokens */
        if (!cli_parse_int(cmd, a, v, 1, 4096, &o->caption_tokens)) return -1;
        o->ens_flag = true;
    }
    return 1;
}

bool vs_cli_ens_active(const vs_cli_ens_opts *o) {
    if (o->ens_flag || o->n_inputs > 1) return true;
    return o->n_inputs == 1 && (o->inputs[0] == VS_ENS_IN_C || o->inputs[0] == VS_ENS_IN_P);
}

/* ------------------------------------------------------------------------------------------------
 * The run */

typedef struct stream {
    vs_detok *dt;
    bool ids, silent;
    int n;
    vs_error err;
    bool failed;
} stream;

static bool on_tokens(void *ctx, const int32_t *t, int32_t n) {
    stream *s = ctx;
    if (s->silent) return true;
    for (int32_t i = 0; i < n; i++) {
        if (s->ids) {
            printf("%s%d", s->n++ ? " " : "", t[i]);
            continue;
        }
        size_t len = 0;
        const char *txt = vs_detok_feed(s->dt, t + i, 1, &len, &s->err);
        if (!txt) {
            s->failed = true;
            return false;
        }
        fwrite(txt, 1, len, stdout);
    }
    fflush(stdout);
    return true;
}

/* One forward on a scratch cache so the first timed run does not pay the mapping's page faults. */
static vs_status warm_up(vs_lm *lm, vs_threadpool *tp, vs_error *err) {
    vs_kv *kv = vs_lm_kv_new(lm, 1, 2, VS_TYPE_F32, err);
    if (!kv) return err->code;
    float *lg = vs_malloc(sizeof(float) * (size_t)vs_lm_cfg(lm)->n_vocab);
    vs_lm_row r = {.token = 0, .want_logits = true};
    vs_lm_out out = {.logits = lg, .attn_layer = -1};
    vs_status st =
        lg ? vs_lm_forward(lm, kv, tp, &r, 1, &out, err) : vs_error_set(err, VS_ERR_NOMEM, "out of memory");
    vs_free(lg);
    vs_kv_free(kv);
    return st;
}

static void inputs_str(const vs_cli_ens_opts *o, char *buf, size_t n) {
    buf[0] = 0;
    for (int r = 0; r < o->n_inputs; r++) {
        size_t l = strlen(buf);
        snprintf(buf + l, n - l, "%s%s", r ? "," : "", vs_ens_input_name(o->inputs[r]));
    }
}

/* Splits the prompt rows of mp into segments: runs of text rows, and each image's rows. seg has room for
 * 2 * n_images + 1 entries. */
static int32_t make_segments(const vs_mm_prompt *mp, float *const *trows, const int64_t *n_trows,
                             vs_spec_segment *seg) {
    int32_t ns = 0;
    int64_t at = 0;
    for (int32_t i = 0; i <= mp->n_images; i++) {
        const int64_t end = i < mp->n_images ? mp->image_first[i] : mp->n_rows;
        if (end > at)
            seg[ns++] = (vs_spec_segment){
                .kind = VS_SPEC_SEG_TEXT, .n = (int32_t)(end - at), .tokens = mp->tokens + at, .image = -1};
        if (i == mp->n_images) break;
        seg[ns++] = (vs_spec_segment){
            .kind = VS_SPEC_SEG_IMAGE, .n = (int32_t)n_trows[i], .embd = trows[i], .image = i};
        at = end + n_trows[i];
    }
    return ns;
}

int vs_cli_ens_run(const char *cmd, const vs_cli_spec_opts *s, const vs_cli_ens_opts *o) {
    int rc = 1;
    vs_error err = {0};
    vs_lm *target = NULL, *draft = NULL;
    vs_tokenizer *tok = NULL;
    vs_threadpool *tp = NULL;
    vs_spec *eng = NULL;
    vs_spec_drafter *drafter = NULL;
    vs_mmproj *mp_target = NULL, *mp_draft = NULL;
    vs_captioner *captioner = NULL;
    vs_caption_src *caps = NULL;
    vs_vision_features feat[VS_CLI_SPEC_MAX_IMAGES];
    const vs_vision_features *featp[VS_CLI_SPEC_MAX_IMAGES];
    float *trows[VS_CLI_SPEC_MAX_IMAGES];
    int64_t n_trows[VS_CLI_SPEC_MAX_IMAGES];
    vs_mm_image mimg[VS_CLI_SPEC_MAX_IMAGES];
    vs_spec_segment *seg = NULL;
    vs_mm_prompt mp;
    memset(&mp, 0, sizeof(mp));
    memset(feat, 0, sizeof(feat));
    memset(trows, 0, sizeof(trows));
    int32_t *ids = NULL;
    stream st = {0};
    vs_spec_log log, base;
    vs_spec_log_init(&log);
    vs_spec_log_init(&base);
    char *text = NULL;
    char inputs[64];
    const int n_img = s->n_images;
    vs_cli_ens_opts eo = *o;
    if (eo.n_inputs == 0)
        eo.n_inputs = 1, eo.inputs[0] = s->mode == VS_CLI_DRAFT_M ? VS_ENS_IN_M : VS_ENS_IN_T;
    inputs_str(&eo, inputs, sizeof(inputs));
    if (s->mode == VS_CLI_DRAFT_REJECT) snprintf(inputs, sizeof(inputs), "reject (debug)");

    /* usage checks first */
    const bool reject = s->mode == VS_CLI_DRAFT_REJECT;
    if (reject && (o->ens_flag || o->n_inputs > 1))
        return cli_fail(cmd, "--draft-mode reject is a debug drafter: it does not combine with ensemble flags"),
               2;
    if (!s->draft_model && (o->mode_given || o->ens_flag))
        return cli_fail(cmd, "--draft-mode and the ensemble flags need a draft model (-md FILE)"), 2;
    bool has_c = false, has_mm = false;
    for (int r = 0; r < eo.n_inputs; r++) {
        has_c |= eo.inputs[r] == VS_ENS_IN_C;
        has_mm |= eo.inputs[r] == VS_ENS_IN_M || eo.inputs[r] == VS_ENS_IN_P;
    }
    if (s->mmproj_draft && !has_mm && !(has_c && n_img > 0 && !o->captions_path)) /* nothing would read it */
        return cli_fail(cmd, "--mmproj-draft is read by m and p drafting and by the captioner (c with images); "
                             "--draft-mode %s does not use it", inputs),
               2;
    if (n_img > 0 && !s->mmproj)
        return cli_fail(cmd, "--image needs the target's vision model (--mmproj FILE)"), 2;
    if (n_img > 0 && !s->prompt)
        return cli_fail(cmd, "images need a text prompt with <image> markers (-p), not --tokens"), 2;

    if (!(target = vs_lm_load(s->model, &err))) goto fail;
    if (!(tok = vs_tokenizer_from_gguf(vs_lm_gguf(target), &err))) goto fail;
    if (s->draft_model && !(draft = vs_lm_load(s->draft_model, &err))) goto fail;
    const vs_lm_config *c = vs_lm_cfg(target);
    const int gamma = draft ? s->gamma : 0;
    if (s->threads > 1 && !(tp = vs_threadpool_new(s->threads, &err))) goto fail;

    /* images: ViT features once per image, the target's rows from its projector */
    double t_vision = 0;
    const vs_vision_tower *tower = NULL;
    if (s->mmproj) {
        if (!(mp_target = vs_mmproj_open(s->mmproj, &err))) goto fail;
        tower = vs_mmproj_tower(mp_target);
        if (!tower) {
            cli_fail(cmd, "%s has no vision tower (a projector-only file cannot encode images)", s->mmproj);
            goto done;
        }
        if (vs_vision_projector_config(vs_mmproj_projector(mp_target))->proj_out != c->n_embd) {
            cli_fail(cmd, "projector width %d of %s differs from the LM width %d of %s",
                     vs_vision_projector_config(vs_mmproj_projector(mp_target))->proj_out, s->mmproj,
                     c->n_embd, s->model);
            goto done;
        }
    }
    const double tv0 = vs_time_now();
    for (int i = 0; i < n_img; i++) {
        if (vs_vision_encode_file(tower, tp, s->images[i], VS_PREPROC_LLAVA, NULL, &feat[i], &err))
            goto fail; /* the message starts with the path */
        featp[i] = &feat[i];
        if (vs_vision_embed(vs_mmproj_projector(mp_target), tp, &feat[i], 1, &trows[i], &n_trows[i], &err))
            goto fail;
        mimg[i] = (vs_mm_image){.rows = trows[i], .n_rows = n_trows[i], .width = c->n_embd};
    }
    t_vision = vs_time_now() - tv0;

    /* the prompt */
    vs_spec_prompt prompt;
    memset(&prompt, 0, sizeof(prompt));
    if (s->prompt) {
        vs_mm_prompt_opts po = {
            .no_special = s->no_bos, .no_parse_special = !s->special, .lm_width = c->n_embd};
        if (vs_mm_prompt_build(&mp, tok, s->prompt, strlen(s->prompt), mimg, n_img, &po, &err)) goto fail;
        seg = vs_calloc((size_t)(2 * n_img + 1), sizeof(*seg));
        if (!seg) goto oom;
        prompt.n_seg = make_segments(&mp, trows, n_trows, seg);
    } else {
        ids = vs_malloc(sizeof(int32_t) * (size_t)VS_MAX(s->n_ids, 1));
        seg = vs_calloc(1, sizeof(*seg));
        if (!ids || !seg) goto oom;
        if (s->n_ids > 0) memcpy(ids, s->ids, sizeof(int32_t) * (size_t)s->n_ids);
        seg[0] = (vs_spec_segment){.kind = VS_SPEC_SEG_TEXT, .n = s->n_ids, .tokens = ids, .image = -1};
        prompt.n_seg = 1;
    }
    prompt.seg = seg;
    prompt.images = n_img ? featp : NULL;
    prompt.n_images = n_img;
    const int64_t np = vs_spec_prompt_rows(&prompt);
    if (np < 1) {
        cli_fail(cmd, "the prompt is empty");
        goto done;
    }
    const int n_ctx =
        s->n_ctx > 0 ? s->n_ctx : (int)VS_MIN(np + s->n_predict + gamma + 1, (int64_t)c->n_ctx_train);
    if (np > n_ctx) {
        cli_fail(cmd, "the prompt has %lld rows (text and image) but the context holds %d", (long long)np,
                 n_ctx);
        goto done;
    }
    vs_spec_config ec = {.n_ctx = n_ctx, .kv_type = s->kv_type, .tp = tp, .tok = tok};
    if (!(eng = vs_spec_new(target, &ec, &err))) goto fail;

    /* the drafter */
    if (draft) {
        const vs_vision_projector *dproj = NULL;
        if (s->mmproj_draft) {
            if (!(mp_draft = vs_mmproj_open(s->mmproj_draft, &err))) goto fail;
            dproj = vs_mmproj_projector(mp_draft);
        } else if (has_mm) {
            cli_fail(cmd, "--draft-mode %s needs the drafter's projector (--mmproj-draft FILE)", inputs);
            goto done;
        }
        if (has_c) {
            if (o->captions_path) {
                if (!(caps = vs_caption_src_from_file(o->captions_path, s->images, n_img, &err))) goto fail;
            } else if (n_img > 0) {
                if (!dproj) {
                    cli_fail(
                        cmd,
                        "caption drafting needs --captions FILE, or the drafter's projector (--mmproj-draft "
                        "FILE) to caption the images itself");
                    goto done;
                }
                /* its own thread, no pool: the target's pool is busy with the prefill meanwhile */
                vs_captioner_opts co = {.max_tokens = o->caption_tokens};
                if (!(captioner = vs_captioner_new(draft, dproj, &co, &err))) goto fail;
                if (!(caps = vs_caption_src_new_captioner(captioner, &err))) goto fail;
            } else if (!(caps = vs_caption_src_new_texts(NULL, 0, &err))) {
                goto fail;
            }
        }
        vs_draft_ens_opts dopt;
        vs_draft_ens_opts_default(&dopt);
        dopt.n_inputs = eo.n_inputs;
        memcpy(dopt.inputs, eo.inputs, sizeof(dopt.inputs));
        dopt.weights = eo.weights;
        dopt.pool_k = eo.pool_k;
        dopt.n_ctx = 0; /* the draft model's context: a C row may be longer than the target's prompt */
        dopt.kv_type = s->draft_kv_type;
        dopt.tp = tp;
        dopt.proj = dproj;
        dopt.tower = dproj && tower ? tower : NULL;
        dopt.captions = caps;
        dopt.greedy = s->greedy_draft;
        dopt.tree_width = s->tree_width;
        dopt.trace = o->trace_path != NULL;
        dopt.debug_reject = reject;
        if (!(drafter = vs_draft_ens_new(draft, target, &dopt, &err))) goto fail;
        if (warm_up(draft, tp, &err)) goto fail;
    }
    if (warm_up(target, tp, &err)) goto fail;

    vs_spec_params par = vs_spec_params_default();
    par.gamma = gamma;
    par.n_predict = s->n_predict;
    par.sampling = s->sp;
    par.ignore_eos = s->ignore_eos;

    st.ids = s->show_ids;
    st.silent = s->json;
    if (!s->show_ids && !(st.dt = vs_detok_new(tok, 0, &err))) goto fail;
    if (s->prompt && !s->show_ids && !s->json) {
        fputs(s->prompt, stdout);
        fflush(stdout);
    }
    vs_status rs = vs_spec_generate(eng, drafter, &prompt, &par, on_tokens, &st, &log, &err);
    log.t_vision = t_vision;
    log.t_total += t_vision;
    if (st.failed) {
        err = st.err;
        goto fail;
    }
    if (rs) goto fail;
    if (st.dt && !s->json) {
        size_t len = 0;
        const char *tail = vs_detok_flush(st.dt, &len);
        fwrite(tail, 1, len, stdout);
    }
    if (!s->json) printf("\n");
    fflush(stdout);

    /* the target's step and verify costs on the final cache (TABED eq. 1) */
    int room = n_ctx - vs_kv_seq_len(vs_spec_kv(eng), 0);
    double tv = 0, t1 = 0;
    /* a width-D tree verifies D gamma + 1 rows */
    const int verify_rows = VS_MAX(s->tree_width, 1) * gamma + 1;
    if (gamma > 0 && room >= verify_rows && !vs_spec_time_target(eng, verify_rows, 5, &tv, &err))
        log.tp_verify = tv;
    if (!s->compare && room >= 1 && !vs_spec_time_target(eng, 1, 5, &t1, &err)) log.tp_step = t1;

    bool identical = false;
    if (s->compare) {
        vs_spec_params bp = par;
        bp.gamma = 0;
        if (vs_spec_generate(eng, NULL, &prompt, &bp, NULL, NULL, &base, &err)) goto fail;
        base.t_vision = t_vision;
        base.t_total += t_vision;
        identical = base.n_tokens == log.n_tokens &&
                    (log.n_tokens == 0 || /* no tokens: the arrays may be NULL, which memcmp may not see */
                     memcmp(base.tokens, log.tokens, sizeof(int32_t) * (size_t)log.n_tokens) == 0);
    }
    vs_spec_stats stats;
    vs_spec_stats_compute(&log, s->compare ? &base : NULL, &stats);
    const vs_draft_ens_stats *es = drafter ? vs_draft_ens_get_stats(drafter) : NULL;
    const float *wlast = drafter ? vs_draft_ens_weights(drafter) : NULL;

    if (o->trace_path && drafter) {
        vs_outfile tf;
        if (vs_outfile_open(&tf, o->trace_path, &err) != VS_OK) goto fail;
        if (vs_ens_trace_write(vs_draft_ens_trace(drafter), tf.f, &err) != VS_OK) {
            vs_outfile_abort(&tf);
            goto fail;
        }
        if (vs_outfile_commit(&tf, &err) != VS_OK) goto fail;
    }

    if (s->json) {
        vs_json_writer w;
        vs_json_writer_init(&w);
        vs_json_obj_begin(&w);
        vs_json_kv_str(&w, "model", s->model);
        vs_json_kv_str(&w, "draft_model", s->draft_model ? s->draft_model : "");
        vs_json_kv_str(&w, "draft_mode", drafter ? inputs : "");
        vs_json_kv_str(&w, "weights", drafter ? vs_ens_policy_name(eo.weights.policy) : "");
        vs_json_kv_num(&w, "temperature", s->sp.temperature);
        vs_json_kv_int(&w, "prompt_rows", np);
        vs_json_kv_int(&w, "images", n_img);
        if (!(text = vs_detokenize(tok, log.tokens, log.n_tokens, 0, NULL, &err))) {
            vs_json_writer_free(&w);
            goto fail;
        }
        vs_json_kv_str(&w, "text", text);
        vs_json_key(&w, "tokens");
        vs_json_arr_begin(&w);
        for (int i = 0; i < log.n_tokens; i++) vs_json_int(&w, log.tokens[i]);
        vs_json_arr_end(&w);
        vs_json_kv_str(&w, "stop", vs_spec_stop_name(log.stop));
        vs_json_key(&w, "stats");
        vs_spec_stats_json(&stats, &w);
        if (es) {
            vs_json_key(&w, "ensemble");
            vs_json_obj_begin(&w);
            vs_json_key(&w, "prefix_rows");
            vs_json_arr_begin(&w);
            for (int r = 0; r < eo.n_inputs; r++) vs_json_int(&w, es->prefix_rows[r]);
            vs_json_arr_end(&w);
            vs_json_key(&w, "last_weights");
            vs_json_arr_begin(&w);
            for (int r = 0; r < eo.n_inputs; r++) vs_json_num(&w, wlast[r]);
            vs_json_arr_end(&w);
            vs_json_kv_num(&w, "t_caption", es->t_caption);
            vs_json_kv_num(&w, "t_caption_wait", es->t_caption_wait);
            vs_json_kv_num(&w, "t_c_prefill", es->t_c_prefill);
            vs_json_kv_num(&w, "t_weights", es->t_weights);
            vs_json_kv_int(&w, "empty_captions", es->n_empty_captions);
            vs_json_obj_end(&w);
        }
        if (s->compare) {
            vs_json_key(&w, "target_only");
            vs_json_obj_begin(&w);
            vs_json_kv_int(&w, "tokens", base.n_tokens);
            vs_json_kv_bool(&w, "identical", identical);
            vs_json_kv_num(&w, "t_decode", base.t_decode);
            vs_json_kv_num(&w, "t_total", base.t_total);
            vs_json_obj_end(&w);
        }
        vs_json_obj_end(&w);
        if (w.oom) {
            vs_json_writer_free(&w);
            goto oom;
        }
        printf("%s\n", w.buf);
        vs_json_writer_free(&w);
    } else if (!s->quiet) {
        fprintf(stderr,
                "[speculative] target %s, %d image(s) (vision %.3f s), draft %s (inputs %s, weights %s), stop: "
                "%s, seed %llu, %d threads\n",
                s->model, n_img, t_vision, s->draft_model ? s->draft_model : "-", drafter ? inputs : "-",
                drafter ? vs_ens_policy_name(eo.weights.policy) : "-", vs_spec_stop_name(log.stop),
                (unsigned long long)s->sp.seed, s->threads);
        if (es) {
            fprintf(stderr, "[draft] prompt rows per input:");
            for (int r = 0; r < eo.n_inputs; r++)
                fprintf(stderr, " %s %d", vs_ens_input_name(eo.inputs[r]), es->prefix_rows[r]);
            fprintf(stderr, "; last weights:");
            for (int r = 0; r < eo.n_inputs; r++) fprintf(stderr, " %.3f", wlast[r]);
            fprintf(stderr, "; weight policy time %.4f s\n", es->t_weights);
            if (has_c)
                fprintf(stderr,
                        "[draft] captions: %.3f s captioning (%s), %.3f s waited after the prefill, "
                        "%.3f s C-row prefill, %d empty\n",
                        es->t_caption, captioner ? "on its own thread during the target prefill" : "given",
                        es->t_caption_wait, es->t_c_prefill, es->n_empty_captions);
        }
        vs_spec_stats_print(&stats, stderr);
        if (s->compare)
            fprintf(stderr, "target-only output %s the speculative output%s\n",
                    identical ? "is identical to" : "differs from",
                    s->sp.temperature == 0 ? ""
                                           : " (expected when sampling: the same distribution, other draws)");
    }
    if (s->compare && s->sp.temperature == 0 && !identical) {
        cli_fail(cmd, "greedy speculative output differs from target-only output (a bug: please report)");
        goto done;
    }
    rc = 0;
    goto done;
oom:
    cli_fail(cmd, "out of memory");
    goto done;
fail:
    fflush(stdout);
    cli_fail_err(cmd, &err);
done:
    vs_free(text);
    vs_detok_free(st.dt);
    vs_spec_log_free(&log);
    vs_spec_log_free(&base);
    vs_spec_drafter_free(drafter);
    vs_caption_src_free(caps);
    vs_captioner_free(captioner);
    vs_spec_free(eng);
    vs_free(seg);
    vs_free(ids);
    vs_mm_prompt_free(&mp);
    for (int i = 0; i < n_img; i++) {
        vs_free(trows[i]);
        vs_vision_features_free(&feat[i]);
    }
    vs_mmproj_free(mp_draft);
    vs_mmproj_free(mp_target);
    vs_threadpool_free(tp);
    vs_tokenizer_free(tok);
    vs_lm_free(draft);
    vs_lm_free(target);
    return rc;
}
