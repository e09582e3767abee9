/* cli_ensemble: multimodal and ensemble-drafted `vlmspec generate` (see cli_ensemble.h).
 * Sections: flags, the multimodal prompt (images -> shared ViT features -> the target's rows ->
 * segments), the drafter (inputs, weights, captions), the run (streaming, statistics, --compare, --json,
 * the weight trace). */
#include "cli_ensemble.h"
#include "outfile.h"

#include <stdlib.h>
#include <math.h>
#include <string.h>

#include "cli.h"
#include "json.h"
#include "mmprompt.h"
#include "session.h"

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

static bool parse_draft_mode(const char *cmd, const char *flag, const char *v, void *dst) {
    vs_cli_ens_opts *o = dst;
    vs_error err = {0};
    o->reject = !strcmp(v, "reject");
    if (o->reject) {
        o->n_inputs = 0;
        return true;
    }
    if (vs_ens_inputs_parse(v, o->inputs, &o->n_inputs, &err)) {
        cli_fail(cmd, "%s %s: %s; or reject (debug)", flag, v, err.msg);
        return false;
    }
    return true;
}

static bool parse_weights(const char *cmd, const char *flag, const char *v, void *dst) {
    vs_error err = {0};
    if (vs_ens_weights_parse(v, dst, &err)) {
        cli_fail(cmd, "%s: %s", flag, err.msg);
        return false;
    }
    return true;
}

void vs_cli_ens_flags(cli_flags *fs, vs_cli_ens_opts *o) {
    cli_flag_fn_add(fs, "--draft-mode", parse_draft_mode, o);
    cli_flag_fn_add(fs, "--weights", parse_weights, &o->weights);
    cli_flag_add(fs, "--weights-tau", CLI_F32, &o->weights.tau, 0, 1e6);
    cli_flag_add(fs, "--history", CLI_INT, &o->weights.window, 0, 1 << 24);
    cli_flag_add(fs, "--grid-n", CLI_INT, &o->weights.grid_n, 1, 1000);
    cli_flag_add(fs, "--history-topk", CLI_INT, &o->weights.topk, 0, 1 << 24);
    cli_flag_add(fs, "--pool", CLI_INT, &o->pool_k, 1, 1 << 16);
    cli_flag_add(fs, "--trace-weights", CLI_STR, &o->trace_path, 0, 0);
    cli_flag_add(fs, "--captions", CLI_STR, &o->captions_path, 0, 0);
    cli_flag_add(fs, "--caption-tokens", CLI_INT, &o->caption_tokens, 1, 4096);
}

void vs_cli_ens_finish(const cli_flags *fs, vs_cli_ens_opts *o, vs_cli_spec_opts *spec) {
    o->mode_given = cli_flag_given(fs, o);
    o->weights_given = cli_flag_given(fs, &o->weights);
    const void *mix[] = {&o->weights,      &o->weights.tau, &o->weights.window, &o->weights.grid_n,
                         &o->weights.topk, &o->pool_k,      &o->trace_path};
    for (size_t k = 0; k < VS_ARRAY_LEN(mix); k++) o->mix_flag |= cli_flag_given(fs, mix[k]);
    o->ens_flag = o->mix_flag || cli_flag_given(fs, &o->captions_path) || cli_flag_given(fs, &o->caption_tokens);
    if (o->reject)
        spec->mode = VS_CLI_DRAFT_REJECT;
    else if (o->n_inputs > 0)
        spec->mode = o->inputs[0] == VS_ENS_IN_M ? VS_CLI_DRAFT_M : VS_CLI_DRAFT_T;
}

bool vs_cli_ens_active(const vs_cli_ens_opts *o) {
    if (o->ens_flag || o->n_inputs > 1) return true;
    return o->n_inputs == 1 && (o->inputs[0] == VS_ENS_IN_C || o->inputs[0] == VS_ENS_IN_P);
}

/* ------------------------------------------------------------------------------------------------
 * The run: the request goes through the library's session (src/spec/session.h); here are only the
 * usage checks, the streaming to stdout and the report. */

typedef struct stream {
    bool ids, silent;
    int n;
} stream;

static bool on_tokens(void *ctx, const int32_t *t, int32_t n) {
    stream *s = ctx;
    if (s->silent || !s->ids) return true;
    for (int32_t i = 0; i < n; i++) printf("%s%d", s->n++ ? " " : "", t[i]);
    fflush(stdout);
    return true;
}

static bool on_text(void *ctx, const char *text, size_t len) {
    const stream *s = ctx;
    if (s->silent || s->ids) return true;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return true;
}

static void inputs_str(const vs_cli_ens_opts *o, char *buf, size_t n) {
    buf[0] = 0;
    for (int r = 0; r < o->n_inputs; r++) {
        size_t l = strlen(buf);
        snprintf(buf + l, n - l, "%s%s", r ? "," : "", vs_ens_input_name(o->inputs[r]));
    }
}

/* Usage errors of --method (exit status 2); -1 when fine. */
static int check_method(const char *cmd, const vs_cli_spec_opts *s, const vs_cli_ens_opts *o) {
    const vs_method *m = vs_method_find(s->method);
    char names[512];
    vs_method_names(names, sizeof(names));
    if (!m) return cli_fail(cmd, "--method %s: unknown (known: %s)", s->method, names), 2;
    if (o->mode_given || o->mix_flag)
        return cli_fail(cmd, "--method names the drafting: it does not combine with --draft-mode, --weights, "
                             "--pool or --trace-weights"), 2;
    if (m->kind != VS_METHOD_TARGET && !s->draft_model)
        return cli_fail(cmd, "--method %s needs a draft model (-md FILE)", s->method), 2;
    const bool captioner = m->captions && s->n_images > 0 && !o->captions_path;
    if (m->projector && !s->mmproj_draft)
        return cli_fail(cmd, "--method %s drafts with the drafter's projector (--mmproj-draft FILE)", s->method), 2;
    if (captioner && !s->mmproj_draft)
        return cli_fail(cmd, "--method %s captions the images: give --mmproj-draft FILE or --captions FILE",
                        s->method), 2;
    if (s->mmproj_draft && !m->projector && !captioner)
        return cli_fail(cmd, "--mmproj-draft is not read by --method %s", s->method), 2;
    if (!m->captions && o->ens_flag)
        return cli_fail(cmd, "--captions and --caption-tokens are read by the caption methods only"), 2;
    return -1;
}

/* Usage errors of --draft-mode and the ensemble flags (exit status 2); -1 when fine. */
static int check_draft_mode(const char *cmd, const vs_cli_spec_opts *s, const vs_cli_ens_opts *o,
                            const vs_cli_ens_opts *eo, const char *inputs) {
    if (s->mode == VS_CLI_DRAFT_REJECT && (o->ens_flag || o->n_inputs > 1))
        return cli_fail(cmd, "--draft-mode reject is a debug drafter: it does not combine with ensemble flags"), 2;
    if (!s->draft_model && (o->mode_given || o->ens_flag))
        return cli_fail(cmd, "--draft-mode and the ensemble flags need a draft model (-md FILE)"), 2;
    bool has_c = false, has_mm = false;
    for (int r = 0; r < eo->n_inputs; r++) {
        has_c |= eo->inputs[r] == VS_ENS_IN_C;
        has_mm |= eo->inputs[r] == VS_ENS_IN_M || eo->inputs[r] == VS_ENS_IN_P;
    }
    if (s->mmproj_draft && !has_mm && !(has_c && s->n_images > 0 && !o->captions_path)) /* nothing would read it */
        return cli_fail(cmd, "--mmproj-draft is read by m and p drafting and by the captioner (c with images); "
                             "--draft-mode %s does not use it", inputs), 2;
    if (s->draft_model && has_mm && !s->mmproj_draft)
        return cli_fail(cmd, "--draft-mode %s needs the drafter's projector (--mmproj-draft FILE)", inputs), 2;
    if (s->draft_model && has_c && s->n_images > 0 && !o->captions_path && !s->mmproj_draft)
        return cli_fail(cmd, "caption drafting needs --captions FILE, or the drafter's projector (--mmproj-draft "
                             "FILE) to caption the images itself"), 2;
    return -1;
}

/* Usage errors (exit status 2) before anything loads; -1 when the options are fine. */
static int check_usage(const char *cmd, const vs_cli_spec_opts *s, const vs_cli_ens_opts *o,
                       const vs_cli_ens_opts *eo, const char *inputs) {
    if (s->n_images > 0 && !s->mmproj)
        return cli_fail(cmd, "--image needs the target's vision model (--mmproj FILE)"), 2;
    if (s->n_images > 0 && !s->prompt)
        return cli_fail(cmd, "images need a text prompt with <image> markers (-p), not --tokens"), 2;
    if (s->chat_template && !s->prompt)
        return cli_fail(cmd, "--template formats -p as a user turn: it does not apply to --tokens"), 2;
    /* --raw with --tokens is fine: token ids are always used as they are */
    if (s->chat_template && s->raw)
        return cli_fail(cmd, "--raw uses -p without a template: it does not combine with --template"), 2;
    if (s->chat_template && !vs_chat_template_find(s->chat_template))
        return cli_fail(cmd, "--template %s: unknown (vicuna-short, vicuna or plain)", s->chat_template), 2;
    if (s->tree_nodes > 0 && s->tree_top_k == 0)
        return cli_fail(cmd, "--tree-nodes sizes EAGLE-2 trees: give --tree-top-k K too"), 2;
    if (s->tree_top_k > 0 && s->tree_width > 1)
        return cli_fail(cmd, "--tree-top-k (EAGLE-2 trees) and --tree-width (width trees) exclude each other"), 2;
    if (s->p_min > 0 && (s->tree_top_k > 0 || s->tree_width > 1))
        return cli_fail(cmd, "--draft-p-min (the adaptive draft length) is for chains: drop --tree-width / "
                             "--tree-top-k"), 2;
    if (s->method && strchr(s->method, '@') && (s->tree_width > 1 || s->tree_top_k > 0))
        return cli_fail(cmd, "--method %s names its tree shape: drop --tree-width / --tree-top-k / --tree-nodes",
                        s->method), 2;
    return s->method ? check_method(cmd, s, o) : check_draft_mode(cmd, s, o, eo, inputs);
}

/* The request of the command line (images point into s; the chat message into msg). */
static void make_request(const vs_cli_spec_opts *s, const vs_cli_ens_opts *eo, bool drafter, vs_req_image *imgs,
                         vs_chat_msg *msg, stream *st, vs_request *rq) {
    vs_request_default(rq);
    for (int i = 0; i < s->n_images; i++) imgs[i] = (vs_req_image){.path = s->images[i]};
    if (s->prompt && !s->raw) { /* a user turn in the chat template */
        const int32_t markers = vs_mm_count_markers(s->prompt, strlen(s->prompt), NULL);
        *msg = (vs_chat_msg){.role = VS_CHAT_USER, .content = s->prompt,
                             .n_images = VS_MAX(0, s->n_images - markers)};
        rq->msgs = msg, rq->n_msgs = 1;
    } else if (s->prompt) {
        rq->prompt = s->prompt;
    } else {
        rq->ids = s->ids, rq->n_ids = s->n_ids;
    }
    rq->images = imgs, rq->n_images = s->n_images;
    rq->no_bos = s->no_bos, rq->no_parse_special = !s->special;
    rq->n_predict = s->n_predict, rq->sampling = s->sp, rq->ignore_eos = s->ignore_eos;
    if (drafter) {
        rq->draft.gamma = s->gamma;
        rq->draft.opts.tree_width = s->tree_width;
        rq->draft.opts.tree_top_k = s->tree_top_k;
        rq->draft.opts.tree_nodes = s->tree_nodes;
        rq->draft.opts.greedy = s->greedy_draft;
        /* --draft-p-min: not given (< 0) the method's default, 0 fixed length */
        rq->draft.opts.p_min = s->p_min < 0    ? 0
                               : s->p_min == 0 ? VS_P_MIN_OFF
                                               : VS_MAX(1, (int32_t)lroundf(s->p_min * 100.0f));
        if (s->method) {
            rq->draft.method = s->method;
        } else {
            rq->draft.n_inputs = eo->n_inputs;
            memcpy(rq->draft.inputs, eo->inputs, sizeof(rq->draft.inputs));
            rq->draft.weights = eo->weights;
            rq->draft.pool_k = eo->pool_k;
            rq->draft.trace = eo->trace_path != NULL;
            rq->draft.debug_reject = s->mode == VS_CLI_DRAFT_REJECT;
        }
    }
    /* --ids prints token ids and reads no text (a model without a tokenizer runs on ids alone) */
    rq->on_tokens = on_tokens, rq->on_text = s->show_ids ? NULL : on_text, rq->cb_ctx = st;
    rq->want_text = !s->show_ids || s->json_path;
}

typedef struct run_out {
    const vs_cli_spec_opts *s;
    const vs_cli_ens_opts *eo;
    const char *inputs;
    const vs_result *res, *base; /* base: --compare */
    const vs_spec_stats *stats;
    bool identical;
    bool captioner; /* the images were captioned by the drafter (no --captions file) */
    bool has_c;     /* caption drafting */
} run_out;

static void json_ensemble(const run_out *ro, vs_json_writer *w) {
    const vs_draft_ens_stats *es = ro->res->drafter ? vs_draft_ens_get_stats(ro->res->drafter) : NULL;
    if (!es) return;
    const float *wl = vs_draft_ens_weights(ro->res->drafter);
    const int m = vs_draft_ens_rows(ro->res->drafter);
    vs_json_key(w, "ensemble");
    vs_json_obj_begin(w);
    vs_json_key(w, "prefix_rows");
    vs_json_arr_begin(w);
    for (int r = 0; r < m; r++) vs_json_int(w, es->prefix_rows[r]);
    vs_json_arr_end(w);
    vs_json_key(w, "last_weights");
    vs_json_arr_begin(w);
    for (int r = 0; r < m; r++) vs_json_num(w, wl[r]);
    vs_json_arr_end(w);
    vs_json_kv_num(w, "t_caption", es->t_caption);
    vs_json_kv_num(w, "t_caption_wait", es->t_caption_wait);
    vs_json_kv_num(w, "t_c_prefill", es->t_c_prefill);
    vs_json_kv_num(w, "t_weights", es->t_weights);
    vs_json_kv_int(w, "empty_captions", es->n_empty_captions);
    vs_json_obj_end(w);
}

static bool print_json(const char *cmd, const run_out *ro) {
    const vs_cli_spec_opts *s = ro->s;
    const vs_result *res = ro->res;
    vs_json_writer w;
    vs_json_writer_init(&w);
    vs_json_obj_begin(&w);
    vs_json_kv_str(&w, "model", s->model);
    vs_json_kv_str(&w, "draft_model", s->draft_model ? s->draft_model : "");
    vs_json_kv_str(&w, "draft_mode", res->drafter && !s->method ? ro->inputs : "");
    if (s->method) vs_json_kv_str(&w, "method", s->method);
    vs_json_kv_str(&w, "weights", res->drafter && !s->method ? vs_ens_policy_name(ro->eo->weights.policy) : "");
    vs_json_kv_num(&w, "temperature", s->sp.temperature);
    vs_json_kv_int(&w, "prompt_rows", res->n_prompt_rows);
    vs_json_kv_int(&w, "images", s->n_images);
    vs_json_kv_str(&w, "text", res->text ? res->text : "");
    vs_json_key(&w, "tokens");
    vs_json_arr_begin(&w);
    for (int i = 0; i < res->log.n_tokens; i++) vs_json_int(&w, res->log.tokens[i]);
    vs_json_arr_end(&w);
    vs_json_kv_str(&w, "stop", vs_spec_stop_name(res->log.stop));
    vs_json_key(&w, "stats");
    vs_spec_stats_json(ro->stats, &w);
    json_ensemble(ro, &w);
    if (ro->base) {
        vs_json_key(&w, "target_only");
        vs_json_obj_begin(&w);
        vs_json_kv_int(&w, "tokens", ro->base->log.n_tokens);
        vs_json_kv_bool(&w, "identical", ro->identical);
        vs_json_kv_num(&w, "t_decode", ro->base->log.t_decode);
        vs_json_kv_num(&w, "t_total", ro->base->log.t_total);
        vs_json_obj_end(&w);
    }
    vs_json_obj_end(&w);
    bool ok = !w.oom;
    if (!ok) cli_fail(cmd, "out of memory");
    if (ok) ok = cli_write_json(cmd, s->json_path, w.buf) == 0;
    vs_json_writer_free(&w);
    return ok;
}

static void print_target_only(const run_out *ro) {
    const vs_spec_log *l = &ro->res->log;
    const double tp = l->t_prefill > 0 ? l->t_prefill : 1e-9, td = l->t_decode > 0 ? l->t_decode : 1e-9;
    fprintf(stderr,
            "[generate] prompt %d rows in %.3f s (%.1f rows/s); %d image(s) (vision %.3f s); generated %d tokens "
            "in %.3f s (%.2f t/s); stop: %s; seed %llu; %d threads\n",
            l->n_prompt, l->t_prefill, l->n_prompt / tp, ro->res->n_images, ro->res->t_vision, l->n_tokens,
            l->t_decode, l->n_tokens / td, vs_spec_stop_name(l->stop), (unsigned long long)ro->s->sp.seed,
            ro->s->threads);
}

static void print_report(const run_out *ro) {
    const vs_cli_spec_opts *s = ro->s;
    const vs_result *res = ro->res;
    if (!res->drafter) return print_target_only(ro);
    const char *policy = s->method ? "-" : vs_ens_policy_name(ro->eo->weights.policy);
    fprintf(stderr,
            "[speculative] target %s, %d image(s) (vision %.3f s), draft %s (%s %s, weights %s), stop: %s, "
            "seed %llu, %d threads\n",
            s->model, res->n_images, res->t_vision, s->draft_model, s->method ? "method" : "inputs",
            s->method ? s->method : ro->inputs, policy, vs_spec_stop_name(res->log.stop),
            (unsigned long long)s->sp.seed, s->threads);
    const vs_draft_ens_stats *es = vs_draft_ens_get_stats(res->drafter);
    if (es) {
        const float *wl = vs_draft_ens_weights(res->drafter);
        const int m = vs_draft_ens_rows(res->drafter);
        fprintf(stderr, "[draft] prompt rows per input:");
        for (int r = 0; r < m; r++)
            if (s->method)
                fprintf(stderr, " %d", es->prefix_rows[r]);
            else
                fprintf(stderr, " %s %d", vs_ens_input_name(ro->eo->inputs[r]), es->prefix_rows[r]);
        fprintf(stderr, "; last weights:");
        for (int r = 0; r < m; r++) fprintf(stderr, " %.3f", wl[r]);
        fprintf(stderr, "; weight policy time %.4f s\n", es->t_weights);
        if (ro->has_c)
            fprintf(stderr,
                    "[draft] captions: %.3f s captioning (%s), %.3f s waited after the prefill, %.3f s C-row "
                    "prefill, %d empty\n",
                    es->t_caption, ro->captioner ? "on its own thread during the target prefill" : "given",
                    es->t_caption_wait, es->t_c_prefill, es->n_empty_captions);
    }
    vs_spec_stats_print(ro->stats, stderr);
    if (ro->base)
        fprintf(stderr, "target-only output %s the speculative output%s\n",
                ro->identical ? "is identical to" : "differs from",
                s->sp.temperature == 0 ? "" : " (expected when sampling: the same distribution, other draws)");
}

/* The target's step and verify costs on the final cache (TABED eq. 1), the weight trace. */
static vs_status after_run(vs_session *sess, const vs_cli_spec_opts *s, const vs_cli_ens_opts *o, vs_result *res,
                           vs_error *err) {
    vs_spec *eng = vs_session_engine(sess);
    const int room = vs_spec_n_ctx(eng) - vs_kv_seq_len(vs_spec_kv(eng), 0);
    const int gamma = res->drafter ? s->gamma : 0;
    vs_method_opts mo = {.tree_width = s->tree_width, .tree_top_k = s->tree_top_k, .tree_nodes = s->tree_nodes};
    vs_method_shape(s->method, &mo);
    const int verify_rows = vs_method_verify_rows(&mo, gamma);
    double tv = 0, t1 = 0;
    if (gamma > 0 && room >= verify_rows && !vs_spec_time_target(eng, verify_rows, 5, &tv, err))
        res->log.tp_verify = tv;
    if (!s->compare && room >= 1 && !vs_spec_time_target(eng, 1, 5, &t1, err)) res->log.tp_step = t1;
    if (!o->trace_path || !res->drafter) return VS_OK;
    vs_outfile tf;
    vs_status st = vs_outfile_open(&tf, o->trace_path, err);
    if (st) return st;
    if ((st = vs_ens_trace_write(vs_draft_ens_trace(res->drafter), tf.f, err))) {
        vs_outfile_abort(&tf);
        return st;
    }
    return vs_outfile_commit(&tf, err);
}

static bool same_tokens(const vs_spec_log *a, const vs_spec_log *b) {
    return a->n_tokens == b->n_tokens &&
           (a->n_tokens == 0 || !memcmp(a->tokens, b->tokens, sizeof(int32_t) * (size_t)a->n_tokens));
}

/* Loads the model set and the session (fixed captions from --captions). */
static vs_status open_session(const vs_cli_spec_opts *s, const vs_cli_ens_opts *o, bool drafter,
                              vs_models **models, vs_session **sess, vs_caption_src **caps, vs_error *err) {
    vs_models_opts mo = {.model = s->model, .mmproj = s->mmproj, .threads = s->threads, .warm_up = true,
                         .chat_template = s->chat_template};
    if (drafter) {
        const vs_method *m = s->method ? vs_method_find(s->method) : NULL;
        const vs_method_role role = m && m->role != VS_ROLE_NONE ? m->role : VS_ROLE_LLAVA;
        mo.draft[role] = s->draft_model, mo.draft_mmproj[role] = s->mmproj_draft;
    }
    if (!(*models = vs_models_load(&mo, err))) return err->code;
    if (o->captions_path && drafter &&
        !(*caps = vs_caption_src_from_file(o->captions_path, s->images, s->n_images, err)))
        return err->code;
    vs_session_opts so = {.n_ctx = s->n_ctx, .fit_ctx = true, .kv_type = s->kv_type, .draft_kv_type = s->draft_kv_type,
                          .caption_tokens = o->caption_tokens, .captions = *caps};
    return (*sess = vs_session_new(*models, &so, err)) ? VS_OK : err->code;
}

int vs_cli_ens_run(const char *cmd, const vs_cli_spec_opts *s, const vs_cli_ens_opts *o) {
    vs_error err = {0};
    vs_cli_ens_opts eo = *o;
    if (eo.n_inputs == 0) eo.n_inputs = 1, eo.inputs[0] = s->mode == VS_CLI_DRAFT_M ? VS_ENS_IN_M : VS_ENS_IN_T;
    char inputs[64];
    inputs_str(&eo, inputs, sizeof(inputs));
    if (s->mode == VS_CLI_DRAFT_REJECT) snprintf(inputs, sizeof(inputs), "reject (debug)");
    int rc = check_usage(cmd, s, o, &eo, inputs);
    if (rc >= 0) return rc;
    rc = 1;
    const bool drafter = s->draft_model && s->gamma > 0;
    vs_models *models = NULL;
    vs_session *sess = NULL;
    vs_caption_src *caps = NULL;
    vs_result res, base;
    vs_result_init(&res);
    vs_result_init(&base);
    vs_req_image imgs[VS_CLI_SPEC_MAX_IMAGES];
    vs_chat_msg msg;
    stream st = {.ids = s->show_ids, .silent = s->json};
    vs_request rq;
    make_request(s, &eo, drafter, imgs, &msg, &st, &rq);
    if (open_session(s, o, drafter, &models, &sess, &caps, &err)) goto fail;
    if (s->prompt && !s->show_ids && !s->json) {
        fputs(s->prompt, stdout);
        fflush(stdout);
    }
    if (vs_session_run(sess, &rq, &res, &err)) goto fail;
    res.log.t_vision = res.t_vision;
    res.log.t_total += res.t_vision;
    if (!s->json) printf("\n");
    fflush(stdout);
    if (after_run(sess, s, o, &res, &err)) goto fail;
    run_out ro = {.s = s, .eo = &eo, .inputs = inputs, .res = &res, .captioner = caps == NULL};
    for (int r = 0; r < eo.n_inputs && !s->method; r++) ro.has_c |= eo.inputs[r] == VS_ENS_IN_C;
    if (s->compare) {
        vs_request bq = rq;
        bq.draft.method = NULL, bq.draft.n_inputs = 0;
        bq.on_tokens = NULL, bq.on_text = NULL;
        if (vs_session_run(sess, &bq, &base, &err)) goto fail;
        base.log.t_vision = base.t_vision;
        base.log.t_total += base.t_vision;
        ro.base = &base;
        ro.identical = same_tokens(&base.log, &res.log);
    }
    vs_spec_stats stats;
    vs_spec_stats_compute(&res.log, ro.base ? &base.log : NULL, &stats);
    ro.stats = &stats;
    if (s->json_path && !print_json(cmd, &ro)) goto done;
    if (!s->json && !s->quiet) print_report(&ro);
    if (s->compare && s->sp.temperature == 0 && !ro.identical) {
        cli_fail(cmd, "greedy speculative output differs from target-only output (a bug: please report)");
        goto done;
    }
    rc = 0;
    goto done;
fail:
    fflush(stdout);
    cli_fail_err(cmd, &err);
done:
    vs_result_free(&res);
    vs_result_free(&base);
    vs_session_free(sess);
    vs_caption_src_free(caps);
    vs_models_free(models);
    return rc;
}
