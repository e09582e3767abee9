/* cli_spec: speculative decoding for `vlmspec generate`. See cli_spec.h. */
#include "cli_spec.h"

#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "draft_lm.h"
#include "json.h"
#include "lm.h"
#include "mmprompt.h"
#include "spec.h"
#include "tokenizer.h"

void vs_cli_spec_opts_init(vs_cli_spec_opts *o) {
    o->draft_model = NULL;
    o->mmproj_draft = NULL;
    o->gamma = 5;
    o->mode = VS_CLI_DRAFT_T;
    o->greedy_draft = false;
    o->compare = false;
    o->json = false;
    o->mmproj = NULL;
    o->n_images = 0;
}

void vs_cli_spec_usage(FILE *f) {
    fprintf(f,
            "speculative decoding (with -md):\n"
            "  -md, --model-draft FILE  draft LM (same tokenizer as the target)\n"
            "  --mmproj-draft FILE      the drafter's projector over the target's vision features (m mode)\n"
            "  --draft GAMMA            drafted tokens per block (default 5; 0 = plain decoding)\n"
            "  --draft-mode MODE        t: text-only drafting (default), m: multimodal drafting,\n"
            "                           reject: DEBUG drafter proposing its least likely token (measures\n"
            "                           the cost of speculation when every draft is rejected)\n"
            "  --draft-greedy           draft greedily even when sampling (deterministic drafts)\n"
            "  --compare                also run target-only decoding of the same request: speedups\n"
            "  --json                   print one JSON object (text, tokens, statistics) instead\n"
            "  --mmproj FILE            the target's mmproj (vision tower + projector), with images\n"
            "  --image FILE             an image for the next <image> marker of the prompt (repeatable)\n");
}

int vs_cli_spec_parse_flag(const char *cmd, int argc, char **argv, int *i, vs_cli_spec_opts *o) {
    const char *a = argv[*i], *v;
    if (!strcmp(a, "--compare")) return o->compare = true, 1;
    if (!strcmp(a, "--json")) return o->json = true, 1;
    if (!strcmp(a, "--draft-greedy")) return o->greedy_draft = true, 1;
    if (strcmp(a, "-md") && strcmp(a, "--model-draft") && strcmp(a, "--mmproj-draft") &&
        strcmp(a, "--draft") && strcmp(a, "--draft-mode") && strcmp(a, "--mmproj") && strcmp(a, "--image"))
        return 0;
    if (!(v = cli_value(cmd, argc, argv, i))) return -1;
    if (!strcmp(a, "-md") || !strcmp(a, "--model-draft"))
        o->draft_model = v;
    else if (!strcmp(a, "--mmproj"))
        o->mmproj = v;
    else if (!strcmp(a, "--image")) {
        if (o->n_images == VS_CLI_SPEC_MAX_IMAGES) {
            cli_fail(cmd, "more than %d images", VS_CLI_SPEC_MAX_IMAGES);
            return -1;
        }
        o->images[o->n_images++] = v;
    } else if (!strcmp(a, "--mmproj-draft"))
        o->mmproj_draft = v;
    else if (!strcmp(a, "--draft")) {
        if (!cli_parse_int(cmd, a, v, 0, VS_SPEC_MAX_GAMMA, &o->gamma)) return -1;
    } else {
        if (!strcmp(v, "t"))
            o->mode = VS_CLI_DRAFT_T;
        else if (!strcmp(v, "m"))
            o->mode = VS_CLI_DRAFT_M;
        else if (!strcmp(v, "reject"))
            o->mode = VS_CLI_DRAFT_REJECT;
        else {
            cli_fail(cmd, "--draft-mode %s: expected m, t or reject", v);
            return -1;
        }
    }
    return 1;
}

/* Streams text (or ids) as blocks are accepted. */
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

/* Touches every weight of a model once (one forward on a scratch cache) so the first timed run does not
 * pay the page faults of the mapping. */
static vs_status warm_up(vs_lm *lm, vs_threadpool *tp, vs_error *err) {
    vs_kv *kv = vs_lm_kv_new(lm, 1, 2, VS_TYPE_F32, err);
    if (!kv) return err->code;
    float *lg = vs_malloc(sizeof(float) * (size_t)vs_lm_cfg(lm)->n_vocab);
    vs_lm_row r = {.token = 0, .want_logits = true};
    vs_lm_out o = {.logits = lg, .attn_layer = -1};
    vs_status st =
        lg ? vs_lm_forward(lm, kv, tp, &r, 1, &o, err) : vs_error_set(err, VS_ERR_NOMEM, "out of memory");
    vs_free(lg);
    vs_kv_free(kv);
    return st;
}

static char *detok_all(const vs_tokenizer *tok, const vs_spec_log *log, vs_error *err) {
    return vs_detokenize(tok, log->tokens, log->n_tokens, 0, NULL, err);
}

int vs_cli_spec_run(const char *cmd, const vs_cli_spec_opts *o) {
    int rc = 1;
    vs_error err = {0};
    vs_lm *target = NULL, *draft = NULL;
    vs_tokenizer *tok = NULL;
    vs_threadpool *tp = NULL;
    vs_spec *eng = NULL;
    vs_spec_drafter *drafter = NULL;
    vs_mmproj *mp_draft = NULL, *mp_target = NULL;
    vs_vision_features feats[VS_CLI_SPEC_MAX_IMAGES];
    const vs_vision_features *featp[VS_CLI_SPEC_MAX_IMAGES];
    vs_mm_image imgs[VS_CLI_SPEC_MAX_IMAGES];
    int n_feats = 0;
    vs_mm_prompt mp;
    memset(&mp, 0, sizeof(mp));
    vs_spec_segment *segs = NULL;
    double t_vision = 0;
    int32_t *ptok = NULL;
    stream st = {0};
    vs_spec_log log, base;
    vs_spec_log_init(&log);
    vs_spec_log_init(&base);
    char *text = NULL;

    if (!(target = vs_lm_load(o->model, &err))) goto fail;
    if (!(tok = vs_tokenizer_from_gguf(vs_lm_gguf(target), &err))) goto fail;
    if (o->draft_model && !(draft = vs_lm_load(o->draft_model, &err))) goto fail;
    if (!draft && o->gamma > 0) {
        cli_fail(cmd, "--draft %d needs a draft model (-md FILE)", o->gamma);
        goto done;
    }
    const vs_lm_config *c = vs_lm_cfg(target);

    /* images: ViT features once per image (target tower), the target's rows from its projector */
    const vs_vision_tower *tower = NULL;
    const bool mm = o->n_images > 0 || o->mmproj;
    if (mm) {
        if (!o->mmproj || o->n_images == 0) {
            cli_fail(cmd, "images need both --mmproj FILE and --image FILE");
            goto done;
        }
        if (!o->prompt) {
            cli_fail(cmd, "images need a text prompt (-p) with <image> markers");
            goto done;
        }
        if (!(mp_target = vs_mmproj_open(o->mmproj, &err))) goto fail;
        if (!(tower = vs_mmproj_tower(mp_target))) {
            cli_fail(cmd, "%s has no vision tower (a projector-only file cannot encode images)", o->mmproj);
            goto done;
        }
        if (vs_vision_check_projector(tower, vs_mmproj_projector(mp_target), &err)) goto fail;
    }
    if (o->threads > 1 && !(tp = vs_threadpool_new(o->threads, &err))) goto fail;
    if (mm) {
        double tv0 = vs_time_now();
        for (; n_feats < o->n_images; n_feats++) {
            int i = n_feats;
            if (vs_vision_encode_file(tower, tp, o->images[i], VS_PREPROC_LLAVA, NULL, &feats[i], &err))
                goto fail;
            featp[i] = &feats[i];
            float *rows = NULL;
            int64_t nr = 0;
            if (vs_vision_embed(vs_mmproj_projector(mp_target), tp, &feats[i], 1, &rows, &nr, &err)) {
                vs_vision_features_free(&feats[i]);
                goto fail;
            }
            imgs[i] =
                (vs_mm_image){rows, nr, vs_vision_projector_config(vs_mmproj_projector(mp_target))->proj_out};
        }
        t_vision = vs_time_now() - tv0;
    }

    /* the prompt */
    int np = 0;
    if (mm) {
        vs_mm_prompt_opts po = {
            .no_special = o->no_bos, .no_parse_special = !o->special, .lm_width = c->n_embd};
        if (vs_mm_prompt_build(&mp, tok, o->prompt, strlen(o->prompt), imgs, n_feats, &po, &err)) goto fail;
        np = (int)mp.n_rows;
    } else if (o->prompt) {
        int64_t n64 = 0;
        if (vs_tokenize_alloc(tok, o->prompt, strlen(o->prompt), !o->no_bos, o->special, &ptok, &n64, &err))
            goto fail;
        np = (int)n64;
    } else {
        np = o->n_ids;
        ptok = vs_malloc(sizeof(int32_t) * (size_t)VS_MAX(np, 1));
        if (!ptok) goto oom;
        if (np > 0) memcpy(ptok, o->ids, sizeof(int32_t) * (size_t)np);
    }
    if (np < 1) {
        cli_fail(cmd, "the prompt is empty");
        goto done;
    }
    const int n_ctx = o->n_ctx > 0 ? o->n_ctx : VS_MIN(np + o->n_predict + o->gamma + 1, c->n_ctx_train);
    if (np > n_ctx) {
        cli_fail(cmd, "the prompt has %d tokens but the context holds %d", np, n_ctx);
        goto done;
    }
    vs_spec_config ec = {.n_ctx = n_ctx, .kv_type = o->kv_type, .tp = tp, .tok = tok};
    if (!(eng = vs_spec_new(target, &ec, &err))) goto fail;
    if (draft) {
        vs_draft_lm_opts dopt = {.mode = o->mode == VS_CLI_DRAFT_M ? VS_DRAFT_LM_MM : VS_DRAFT_LM_TEXT,
                                 .n_ctx = n_ctx,
                                 .kv_type = o->kv_type,
                                 .tp = tp,
                                 .greedy = o->greedy_draft,
                                 .debug_reject = o->mode == VS_CLI_DRAFT_REJECT};
        if (o->mode == VS_CLI_DRAFT_M) {
            if (!o->mmproj_draft) {
                cli_fail(cmd, "--draft-mode m needs the drafter's projector (--mmproj-draft FILE)");
                goto done;
            }
            if (!(mp_draft = vs_mmproj_open(o->mmproj_draft, &err))) goto fail;
            dopt.proj = vs_mmproj_projector(mp_draft);
            dopt.tower = tower; /* the drafter's projector must accept the target tower's features */
        }
        if (!(drafter = vs_draft_lm_new(draft, target, &dopt, &err))) goto fail;
        if (warm_up(draft, tp, &err)) goto fail;
    }
    if (warm_up(target, tp, &err)) goto fail;

    vs_spec_segment seg = {.kind = VS_SPEC_SEG_TEXT, .n = np, .tokens = ptok};
    vs_spec_prompt prompt = {.seg = &seg, .n_seg = 1};
    if (mm) {
        /* text runs and image blocks of the mmprompt row list become segments */
        if (!(segs = vs_calloc((size_t)np, sizeof(*segs)))) goto oom;
        int ns = 0;
        for (int64_t r = 0; r < np;) {
            if (mp.embd[r]) {
                int im = 0;
                while (im + 1 < mp.n_images && mp.image_first[im + 1] <= r) im++;
                segs[ns++] = (vs_spec_segment){.kind = VS_SPEC_SEG_IMAGE,
                                               .n = (int32_t)imgs[im].n_rows,
                                               .embd = imgs[im].rows,
                                               .image = im};
                r += imgs[im].n_rows;
            } else {
                int64_t e = r;
                while (e < np && !mp.embd[e]) e++;
                segs[ns++] = (vs_spec_segment){
                    .kind = VS_SPEC_SEG_TEXT, .n = (int32_t)(e - r), .tokens = mp.tokens + r};
                r = e;
            }
        }
        prompt = (vs_spec_prompt){.seg = segs, .n_seg = ns, .images = featp, .n_images = n_feats};
    }
    vs_spec_params par = vs_spec_params_default();
    par.gamma = o->gamma;
    par.n_predict = o->n_predict;
    par.sampling = o->sp;
    par.ignore_eos = o->ignore_eos;

    /* the speculative run, streamed */
    st.ids = o->show_ids;
    st.silent = o->json;
    if (!o->show_ids && !(st.dt = vs_detok_new(tok, 0, &err))) goto fail;
    if (o->prompt && !o->show_ids && !o->json) {
        fputs(o->prompt, stdout);
        fflush(stdout);
    }
    vs_status s = vs_spec_generate(eng, drafter, &prompt, &par, on_tokens, &st, &log, &err);
    log.t_vision = t_vision;
    log.t_total += t_vision;
    if (st.failed) {
        err = st.err;
        goto fail;
    }
    if (s) goto fail;
    if (st.dt && !o->json) {
        size_t len = 0;
        const char *tail = vs_detok_flush(st.dt, &len);
        fwrite(tail, 1, len, stdout);
    }
    if (!o->json) printf("\n");
    fflush(stdout);

    /* the target's step and verify-pass costs, measured on the final cache (TABED eq. 1) */
    int room = n_ctx - vs_kv_seq_len(vs_spec_kv(eng), 0);
    double tv = 0, t1 = 0;
    if (o->gamma > 0 && room >= o->gamma + 1 && !vs_spec_time_target(eng, o->gamma + 1, 5, &tv, &err))
        log.tp_verify = tv;
    if (!o->compare && room >= 1 && !vs_spec_time_target(eng, 1, 5, &t1, &err)) log.tp_step = t1;

    /* the same request decoded by the target alone */
    bool identical = false;
    if (o->compare) {
        vs_spec_params bp = par;
        bp.gamma = 0;
        if (vs_spec_generate(eng, NULL, &prompt, &bp, NULL, NULL, &base, &err)) goto fail;
        base.t_vision = t_vision; /* the same features serve both runs */
        base.t_total += t_vision;
        identical = base.n_tokens == log.n_tokens &&
                    memcmp(base.tokens, log.tokens, sizeof(int32_t) * (size_t)log.n_tokens) == 0;
    }
    vs_spec_stats stats;
    vs_spec_stats_compute(&log, o->compare ? &base : NULL, &stats);

    if (o->json) {
        vs_json_writer w;
        vs_json_writer_init(&w);
        vs_json_obj_begin(&w);
        vs_json_kv_str(&w, "model", o->model);
        vs_json_kv_str(&w, "draft_model", o->draft_model ? o->draft_model : "");
        vs_json_kv_str(&w, "draft_mode",
                       o->mode == VS_CLI_DRAFT_M   ? "m"
                       : o->mode == VS_CLI_DRAFT_T ? "t"
                                                   : "reject");
        vs_json_kv_num(&w, "temperature", o->sp.temperature);
        vs_json_kv_int(&w, "prompt_rows", np);
        vs_json_kv_int(&w, "images", n_feats);
        if (!(text = detok_all(tok, &log, &err))) goto fail;
        vs_json_kv_str(&w, "text", text);
        vs_json_key(&w, "tokens");
        vs_json_arr_begin(&w);
        for (int i = 0; i < log.n_tokens; i++) vs_json_int(&w, log.tokens[i]);
        vs_json_arr_end(&w);
        vs_json_kv_str(&w, "stop", vs_spec_stop_name(log.stop));
        vs_json_key(&w, "stats");
        vs_spec_stats_json(&stats, &w);
        if (o->compare) {
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
    } else if (!o->quiet) {
        fprintf(stderr, "[speculative] target %s, draft %s (%s), stop: %s, seed %llu, %d threads\n", o->model,
                o->draft_model ? o->draft_model : "-",
                o->mode == VS_CLI_DRAFT_M   ? "m"
                : o->mode == VS_CLI_DRAFT_T ? "t"
                                            : "reject (debug)",
                vs_spec_stop_name(log.stop), (unsigned long long)o->sp.seed, o->threads);
        vs_spec_stats_print(&stats, stderr);
        if (o->compare)
            fprintf(stderr, "target-only output %s the speculative output%s\n",
                    identical ? "is identical to" : "differs from",
                    o->sp.temperature == 0 ? ""
                                           : " (expected when sampling: the same distribution, other draws)");
    }
    if (o->compare && o->sp.temperature == 0 && !identical) {
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
    vs_free(segs);
    vs_mm_prompt_free(&mp);
    for (int i = 0; i < n_feats; i++) vs_vision_features_free(&feats[i]);
    vs_mm_images_free(imgs, n_feats);
    vs_mmproj_free(mp_target);
    vs_free(text);
    vs_detok_free(st.dt);
    vs_spec_log_free(&log);
    vs_spec_log_free(&base);
    vs_free(ptok);
    vs_spec_drafter_free(drafter);
    vs_mmproj_free(mp_draft);
    vs_spec_free(eng);
    vs_threadpool_free(tp);
    vs_tokenizer_free(tok);
    vs_lm_free(draft);
    vs_lm_free(target);
    return rc;
}
