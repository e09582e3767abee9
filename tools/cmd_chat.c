/* vlmspec chat: an interactive multi-turn chat with a (vision) LM, reading lines from stdin.
 *   /image PATH  attaches an image to the next turn (encoded at once: ViT features + the target's rows)
 *   /reset       forgets the conversation (the cached system prompt stays reusable)
 *   /help        lists the commands
 * On a terminal the line is edited with libedit (arrow keys, history) when the build found it; Ctrl-C
 * stops a reply (the session's cancel) and at the prompt ends the program.
 *   /quit        ends (so does end of input); any other non-empty line is a user turn.
 * Each turn formats the whole history with the chat template (src/engine/chat.h), builds the multimodal
 * row list (src/engine/mmprompt.h: image rows at their markers) and evaluates ONLY the rows that are not
 * cached yet.
 *
 * KV cache persistence (docs/vision.md, "Chat"):
 *   target only (no -md): the command holds the cache itself together with the IDENTITY of every cached
 *     row: a token id for text rows, (image serial number, row) for image rows. A turn keeps the longest
 *     cached prefix whose identities equal the new prompt's rows (image rows included, so a conversation
 *     that starts with an image reuses it in every later turn), truncates the rest and evaluates the
 *     remaining rows in batches. The reply's tokens are cached as they are generated; when the template
 *     re-tokenises the reply text differently, the cache is cut at the first difference.
 *   speculative (-md): vs_spec's reuse_prefix with the same identities: each image segment carries its
 *     serial number + 1 as image_id, so the engine keeps the cached prefix, image rows included, and the
 *     drafter does the same with its own cache (and takes its projection of a known image over): a turn
 *     evaluates only the rows after the first difference, in the target and in the drafter.
 * Statistics go to stderr, one line per turn: prompt rows, rows reused, rows evaluated, tokens and
 * tokens/s (+ tau when speculative). Exit status: 0, or 1 when any command or turn failed (the chat
 * goes on after an error and says why), 2 for bad flags. */
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef VS_HAVE_LIBEDIT
#include <editline/readline.h>
#endif

#include "cli.h"
#include "cli_spec.h"
#include "draft_lm.h"
#include "outfile.h"
#include "session.h"

#define CMD "chat"

typedef struct chat_opts {
    const char *model, *mmproj, *draft_model, *mmproj_draft, *tpl_name, *system, *dump;
    int gamma, tree_width, n_predict, n_ctx, threads;
    bool mode_m, greedy_draft, ignore_eos, quiet;
    vs_preproc_mode preproc;
    vs_type kv_type, draft_kv_type;
    vs_sampler_params sp;
} chat_opts;

typedef struct chat {
    const chat_opts *o;
    vs_models *models;
    vs_session *sess;
    int n_ctx;
    /* history */
    vs_chat_msg *msgs;
    int n_msgs, cap_msgs;
    vs_req_image *imgs; /* every image of the conversation, in order (paths owned) */
    int n_imgs, cap_imgs;
    int n_pending; /* the last n_pending images are attached to the next turn */
    int turn;
    bool dump_failed; /* a --dump file could not be written: the exit status says so */
} chat;

static void usage(FILE *f) {
    fprintf(f,
            "usage: vlmspec chat -m MODEL [--mmproj MMPROJ] [options] < lines\n"
            "Interactive multi-turn chat; reads lines from stdin (a terminal, a file or a pipe):\n"
            "  /image PATH   attach an image to the next turn (several allowed; needs --mmproj)\n"
            "  /reset        clear the conversation\n"
            "  /quit         end (also at end of input)\n"
            "  other lines   a user turn; the reply is streamed to stdout, followed by a newline\n"
            "The KV cache persists across turns: each turn evaluates only the rows that are not cached\n"
            "(image rows included; with -md in the target and in the drafter, whose prompt rows evaluated\n"
            "are shown as 'draft prefill'). One statistics line per turn goes to stderr. Exit status 1 when\n"
            "a turn or command failed (the chat goes on and says why), 2 for bad options.\n\n"
            "options:\n"
            "  -m, --model FILE        LLaMA-architecture GGUF (with a tokenizer)\n"
            "  --mmproj FILE           the model's mmproj (vision tower + projector)\n"
            "  --template NAME         chat template (default vicuna-short, the shipped models' format):");
    for (int i = 0; i < vs_chat_template_count(); i++)
        fprintf(f, " %s", vs_chat_template_name(vs_chat_template_at(i)));
    fprintf(
        f, "\n"
           "  --preproc MODE          image preprocessing: llava (default) or llamacpp\n"
           "  --system TEXT           system prompt instead of the template's default\n"
           "  -n, --n-predict N       most tokens per reply (default 256)\n"
           "  --temp T                temperature (default 0.8; 0 = greedy)\n"
           "  --top-k K               keep the K most likely tokens (default 40; 0 = off)\n"
           "  --top-p P               nucleus sampling mass (default 0.95; 1 = off)\n"
           "  --min-p P               drop tokens below P x the top probability (default 0.05; 0 = off)\n"
           "  --seed S                sampling seed (default: from the clock, printed)\n"
           "  -t, --threads N         threads (default 2)\n"
           "  -c, --ctx N             KV cache rows (default: the model's context)\n"
           "  --kv-type T             the target's KV cache storage: f16 (default) or f32\n"
           "  --ignore-eos            never end a reply: end-of-generation tokens are never generated\n"
           "  --dump PREFIX           write each turn's full prompt text to PREFIX.turnN.prompt.txt and its\n"
           "                          reply (as printed) to PREFIX.turnN.reply.txt (tests, debugging)\n"
           "  -q, --quiet             no statistics lines\n"
           "  -h, --help              this help\n"
           "speculative decoding:\n"
           "  -md, --model-draft FILE draft LM (same tokenizer as the target)\n"
           "  --mmproj-draft FILE     the drafter's projector over the target's vision features (m mode)\n"
           "  --draft GAMMA           drafted tokens per block (default 5)\n"
           "  --draft-mode MODE       t: text-only drafting (default), m: multimodal drafting\n"
           "  --draft-greedy          draft greedily even when sampling\n"
           "  --tree-width D          token trees: D branches per block from the first drafted\n"
           "                          distribution, each continued gamma deep (default 1 = chain)\n"
           "  --draft-kv-type T       the drafter's KV cache: bf16 (default; the drafters' interleaved\n"
           "                          layout, cheaper attention), f16 or f32\n");
}

static bool parse_preproc(const char *cmd, const char *flag, const char *v, void *dst) {
    if (!strcmp(v, "llava") || !strcmp(v, "llamacpp")) {
        *(vs_preproc_mode *)dst = !strcmp(v, "llava") ? VS_PREPROC_LLAVA : VS_PREPROC_LLAMACPP;
        return true;
    }
    cli_fail(cmd, "%s %s: expected llava or llamacpp", flag, v);
    return false;
}

static bool parse_mode(const char *cmd, const char *flag, const char *v, void *dst) {
    if (!strcmp(v, "m") || !strcmp(v, "t")) {
        *(bool *)dst = !strcmp(v, "m");
        return true;
    }
    cli_fail(cmd, "%s %s: expected m or t", flag, v);
    return false;
}

/* Returns -1 when the options are fine, else the exit status. */
static int parse(int argc, char **argv, chat_opts *o) {
    memset(o, 0, sizeof(*o));
    o->preproc = VS_PREPROC_LLAVA;
    o->gamma = 5, o->tree_width = 1, o->n_predict = 256, o->threads = 2, o->kv_type = VS_TYPE_F16;
    o->tpl_name = "vicuna-short";
    o->draft_kv_type = VS_TYPE_BF16;
    o->sp = vs_sampler_params_default();
    o->sp.temperature = 0.8f, o->sp.top_k = 40, o->sp.top_p = 0.95f, o->sp.min_p = 0.05f;
    cli_flags fs = {0};
    cli_flag_add(&fs, "-m|--model", CLI_STR, &o->model, 0, 0);
    cli_flag_add(&fs, "--mmproj", CLI_STR, &o->mmproj, 0, 0);
    cli_flag_add(&fs, "--template", CLI_STR, &o->tpl_name, 0, 0);
    cli_flag_add(&fs, "--system", CLI_STR, &o->system, 0, 0);
    cli_flag_fn_add(&fs, "--preproc", parse_preproc, &o->preproc);
    cli_flag_add(&fs, "--dump", CLI_STR, &o->dump, 0, 0);
    cli_flag_add(&fs, "-n|--n-predict", CLI_INT, &o->n_predict, 1, 1 << 24);
    vs_cli_sampling_flags(&fs, &o->sp);
    cli_flag_add(&fs, "-t|--threads", CLI_INT, &o->threads, 1, 1024);
    cli_flag_add(&fs, "-c|--ctx", CLI_INT, &o->n_ctx, 1, 1 << 24);
    cli_flag_add(&fs, "--kv-type", CLI_KV, &o->kv_type, 0, 0);
    cli_flag_add(&fs, "--ignore-eos", CLI_BOOL, &o->ignore_eos, 0, 0);
    cli_flag_add(&fs, "-q|--quiet", CLI_BOOL, &o->quiet, 0, 0);
    cli_flag_add(&fs, "-md|--model-draft", CLI_STR, &o->draft_model, 0, 0);
    cli_flag_add(&fs, "--mmproj-draft", CLI_STR, &o->mmproj_draft, 0, 0);
    cli_flag_add(&fs, "--draft|--draft-max", CLI_INT, &o->gamma, 0, VS_SPEC_MAX_GAMMA);
    cli_flag_fn_add(&fs, "--draft-mode", parse_mode, &o->mode_m);
    cli_flag_add(&fs, "--draft-greedy", CLI_BOOL, &o->greedy_draft, 0, 0);
    cli_flag_add(&fs, "--tree-width", CLI_INT, &o->tree_width, 1, VS_DRAFT_ENS_MAX_WIDTH);
    cli_flag_add(&fs, "--draft-kv-type", CLI_KV_DRAFT, &o->draft_kv_type, 0, 0);
    const int r = cli_flags_parse(CMD, argc, argv, &fs, usage);
    if (r >= 0) return r;
    const bool seed_given = cli_flag_given(&fs, &o->sp.seed);
    if (!o->model)
        return cli_fail(CMD, "-m MODEL is required"), 2;
    /* no flag is silently ignored */
    const void *drafter_only[] = {&o->mmproj_draft, &o->gamma,      &o->mode_m,
                                  &o->greedy_draft, &o->tree_width, &o->draft_kv_type};
    for (size_t k = 0; k < VS_ARRAY_LEN(drafter_only); k++)
        if (!o->draft_model && cli_flag_given(&fs, drafter_only[k]))
            return cli_fail(CMD, "%s needs a draft model (-md FILE)", cli_flag_seen(&fs, drafter_only[k])), 2;
    if (o->mmproj_draft && !o->mode_m)
        return cli_fail(CMD, "--mmproj-draft is read by --draft-mode m only"), 2;
    if (o->draft_model && o->mode_m && !o->mmproj_draft)
        return cli_fail(CMD, "--draft-mode m needs the drafter's projector (--mmproj-draft FILE)"), 2;
    if (o->mode_m && !o->mmproj)
        return cli_fail(CMD, "--draft-mode m needs --mmproj (the shared tower)"), 2;
    if (!seed_given)
        o->sp.seed = (uint64_t)(vs_time_now() * 1e6);
    return -1;
}

/* ------------------------------------------------------------------------------------------------ */

/* Ctrl-C: during a reply it stops the reply (the session's cancel), at the prompt it ends the program. */
static _Atomic(vs_session *) g_replying; /* lock-free on the platforms we build for: safe in a handler */

static void on_sigint(int sig) {
    vs_session *s = atomic_load(&g_replying);
    if (s) {
        vs_session_cancel(s);
        return;
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

static void images_drop_from(chat *c, int first) {
    for (int i = first; i < c->n_imgs; i++) vs_free((char *)c->imgs[i].path);
    c->n_imgs = first;
}

/* Forgets the conversation; keep_system keeps a leading system message (--system). */
static void history_clear(chat *c, bool keep_system) {
    int first = keep_system && c->n_msgs > 0 && c->msgs[0].role == VS_CHAT_SYSTEM ? 1 : 0;
    for (int i = first; i < c->n_msgs; i++) vs_free((char *)c->msgs[i].content);
    c->n_msgs = first;
    images_drop_from(c, 0);
    c->n_pending = 0;
}

static vs_status push_msg(chat *c, vs_chat_role role, const char *text, size_t len, int n_images, vs_error *err) {
    if (c->n_msgs == c->cap_msgs) {
        int cap = c->cap_msgs ? 2 * c->cap_msgs : 16;
        vs_chat_msg *m = vs_realloc(c->msgs, sizeof(*m) * (size_t)cap);
        if (!m) return vs_error_set(err, VS_ERR_NOMEM, "chat: out of memory");
        c->msgs = m, c->cap_msgs = cap;
    }
    char *s = vs_strndup(text, len);
    if (!s) return vs_error_set(err, VS_ERR_NOMEM, "chat: out of memory");
    c->msgs[c->n_msgs++] = (vs_chat_msg){.role = role, .content = s, .n_images = n_images};
    return VS_OK;
}

static void pop_msg(chat *c) { vs_free((char *)c->msgs[--c->n_msgs].content); }

/* /image PATH: encoded at once into the session's image cache (a broken file is refused here). */
static vs_status attach_image(chat *c, const char *path, int64_t *n_rows, vs_error *err) {
    if (!c->o->mmproj) return vs_error_set(err, VS_ERR_INVALID, "/image %s: no --mmproj was given", path);
    if (c->n_imgs == c->cap_imgs) {
        int cap = c->cap_imgs ? 2 * c->cap_imgs : 8;
        vs_req_image *m = vs_realloc(c->imgs, sizeof(*m) * (size_t)cap);
        if (!m) return vs_error_set(err, VS_ERR_NOMEM, "chat: out of memory");
        c->imgs = m, c->cap_imgs = cap;
    }
    vs_req_image im = {.path = vs_strdup(path)};
    if (!im.path) return vs_error_set(err, VS_ERR_NOMEM, "chat: out of memory");
    vs_status st = vs_session_add_image(c->sess, &im, n_rows, err);
    if (st) {
        vs_free((char *)im.path);
        return st;
    }
    c->imgs[c->n_imgs++] = im;
    c->n_pending++;
    return VS_OK;
}

/* Streams the reply to stdout (the session keeps the text). */
static bool print_text(void *ctx, const char *text, size_t len) {
    (void)ctx;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return true;
}

/* --dump: one file per turn and part; a failure is reported now and in the exit status at the end. */
static void write_file(chat *c, const char *what, const char *s, size_t n) {
    char path[4096];
    snprintf(path, sizeof(path), "%s.turn%d.%s.txt", c->o->dump, c->turn, what);
    vs_error err = {0};
    if (vs_write_file(path, s, n, &err) != VS_OK) {
        cli_fail_err(CMD, &err);
        c->dump_failed = true;
    }
}

static void dump_prompt(chat *c) {
    char *text = NULL;
    size_t len = 0;
    vs_error err = {0};
    if (vs_chat_format(vs_models_template(c->models), c->msgs, c->n_msgs, true, &text, &len, &err)) {
        cli_fail_err(CMD, &err);
        c->dump_failed = true;
        return;
    }
    write_file(c, "prompt", text, len);
    vs_free(text);
}

static void print_turn_stats(const chat *c, const vs_result *res) {
    const vs_spec_log *l = &res->log;
    const int64_t reused = VS_MAX(0, l->n_prompt - 1 - l->n_prefilled); /* the last row is never cached */
    const double tps = l->n_tokens > 0 && l->t_decode > 0 ? l->n_tokens / l->t_decode : 0;
    fprintf(stderr,
            "[chat] turn %d: prompt %d rows (%d images), reused %lld, evaluated %lld in %.3f s; %d tokens in %.3f s "
            "(%.2f t/s)",
            c->turn, l->n_prompt, c->n_imgs, (long long)reused, (long long)(l->n_prompt - reused),
            l->t_prefill + l->t_draft_prefill, l->n_tokens, l->t_decode, tps);
    if (res->drafter) {
        vs_spec_stats st;
        vs_spec_stats_compute(l, NULL, &st);
        fprintf(stderr, "; tau %.3f (gamma %d), draft prefill %d rows", st.tau, c->o->gamma,
                vs_draft_lm_prefilled(res->drafter));
    }
    fprintf(stderr, "; stop: %s\n", vs_finish_name(res->finish));
}

static void make_request(const chat *c, vs_request *rq) {
    const chat_opts *o = c->o;
    vs_request_default(rq);
    rq->msgs = c->msgs, rq->n_msgs = c->n_msgs;
    rq->images = c->imgs, rq->n_images = c->n_imgs;
    rq->n_predict = o->n_predict;
    rq->sampling = o->sp;
    rq->sampling.seed = o->sp.seed + (uint64_t)c->turn; /* each turn its own draws */
    rq->ignore_eos = o->ignore_eos;
    rq->reuse_prefix = true;
    rq->on_text = print_text;
    if (o->draft_model && o->gamma > 0) { /* --draft 0: plain decoding */
        rq->draft.method = o->mode_m ? "m" : "t";
        rq->draft.gamma = o->gamma;
        rq->draft.opts.tree_width = o->tree_width;
        rq->draft.opts.greedy = o->greedy_draft;
    }
}

/* Trimmed copy bounds of s (spaces and newlines at both ends). */
static void trim(const char *s, size_t n, size_t *b, size_t *e) {
    *b = 0, *e = n;
    while (*b < *e && (s[*b] == ' ' || s[*b] == '\n' || s[*b] == '\t' || s[*b] == '\r')) (*b)++;
    while (*e > *b && (s[*e - 1] == ' ' || s[*e - 1] == '\n' || s[*e - 1] == '\t' || s[*e - 1] == '\r')) (*e)--;
}

/* One user turn. Returns VS_OK or an error (the history is then as before the turn). */
static vs_status user_turn(chat *c, const char *text, size_t len, vs_result *res, vs_error *err) {
    const int n_att = c->n_pending;
    vs_status st = push_msg(c, VS_CHAT_USER, text, len, n_att, err);
    if (st) return st;
    c->n_pending = 0;
    c->turn++;
    if (c->o->dump) dump_prompt(c);
    vs_request rq;
    make_request(c, &rq);
    atomic_store(&g_replying, c->sess);
    st = vs_session_run(c->sess, &rq, res, err);
    atomic_store(&g_replying, NULL);
    printf("\n");
    fflush(stdout);
    if (st) {
        if (st == VS_ERR_RANGE && strstr(err->msg, "context"))
            vs_error_wrap(err, "the conversation does not fit the context of %d rows (/reset starts over)", c->n_ctx);
        c->turn--;
        pop_msg(c); /* the turn did not happen: its images become pending again */
        c->n_pending = n_att;
        return st;
    }
    if (c->o->dump) write_file(c, "reply", res->text, res->text_len);
    size_t b, e;
    trim(res->text, res->text_len, &b, &e);
    if ((st = push_msg(c, VS_CHAT_ASSISTANT, res->text + b, e - b, 0, err))) {
        pop_msg(c); /* a user turn without its reply would shift every later turn */
        c->turn--;
        return st;
    }
    if (!c->o->quiet) print_turn_stats(c, res);
    if (res->finish == VS_FINISH_CONTEXT)
        fprintf(stderr, "vlmspec chat: the context (%d rows) is full: the reply was cut; /reset starts over\n",
                c->n_ctx);
    if (res->finish == VS_FINISH_CANCEL) fprintf(stderr, "[chat] reply stopped (Ctrl-C)\n");
    return VS_OK;
}

static void help(void) {
    fprintf(stderr, "  /image PATH   attach an image to the next turn\n"
                    "  /reset        clear the conversation\n"
                    "  /help         this list\n"
                    "  /quit         end (also Ctrl-D; Ctrl-C stops a reply, at the prompt it ends)\n");
}

/* A line starting with '/': returns 0 when handled, 1 when it failed, -1 for /quit. */
static int command(chat *c, const char *s) {
    vs_error err = {0};
    if (!strcmp(s, "/quit") || !strcmp(s, "/exit")) return -1;
    if (!strcmp(s, "/help")) return help(), 0;
    if (!strcmp(s, "/reset")) {
        history_clear(c, true);
        if (!c->o->quiet) fprintf(stderr, "[chat] conversation cleared\n");
        return 0;
    }
    if (!strncmp(s, "/image", 6) && (s[6] == ' ' || s[6] == '\t' || !s[6])) {
        const char *path = s + 6;
        while (*path == ' ' || *path == '\t') path++;
        if (!*path) return fprintf(stderr, "vlmspec chat: /image needs a PATH\n"), 1;
        int64_t rows = 0;
        if (attach_image(c, path, &rows, &err))
            return fprintf(stderr, "vlmspec chat: %s; the image is not attached, the chat goes on\n", err.msg), 1;
        if (!c->o->quiet)
            fprintf(stderr, "[chat] image %s attached to the next turn (%lld rows)\n", path, (long long)rows);
        return 0;
    }
    fprintf(stderr, "vlmspec chat: unknown command '%s' (/help lists them)\n", s);
    return 1;
}

/* The next input line into *line (malloc'ed; *cap its size) without its newline; false at end of input. On
 * a terminal it is edited (arrow keys, history) with libedit when the build found it. */
static bool read_line(bool tty, char **line, size_t *cap) {
#ifdef VS_HAVE_LIBEDIT
    if (tty) {
        char *l = readline("> ");
        if (!l) return false;
        if (*l) add_history(l);
        free(*line);
        *line = l, *cap = strlen(l) + 1;
        return true;
    }
#endif
    if (tty) fputs("> ", stderr), fflush(stderr);
    ssize_t n = getline(line, cap, stdin);
    if (n < 0) return false;
    while (n > 0 && ((*line)[n - 1] == '\n' || (*line)[n - 1] == '\r')) (*line)[--n] = 0;
    return true;
}

static int chat_loop(chat *c) {
    int n_fail = 0;
    const bool tty = isatty(0);
    char *line = NULL;
    size_t cap = 0;
    vs_error err = {0};
    vs_result res;
    vs_result_init(&res);
    for (;;) {
        if (!read_line(tty, &line, &cap)) break;
        const char *s = line;
        while (*s == ' ' || *s == '\t') s++;
        if (!*s) continue;
        if (s[0] == '/' && s[1] != '/' && s[1] != ' ') {
            const int r = command(c, s);
            if (r < 0) break;
            n_fail += r;
            continue;
        }
        if (user_turn(c, s, strlen(s), &res, &err)) {
            fprintf(stderr, "vlmspec chat: %s; the turn was dropped, the chat goes on\n", err.msg);
            n_fail++;
        }
    }
    free(line);
    vs_result_free(&res);
    if (c->n_pending > 0)
        fprintf(stderr, "vlmspec chat: %d attached image(s) were never sent (no turn followed)\n", c->n_pending);
    return n_fail ? 1 : 0;
}

/* The model set and the session. */
static vs_status chat_open(chat *c, vs_error *err) {
    const chat_opts *o = c->o;
    vs_models_opts mo = {.model = o->model, .mmproj = o->mmproj, .threads = o->threads, .warm_up = false,
                         .chat_template = o->tpl_name, .preproc = o->preproc};
    mo.draft[VS_ROLE_LLAVA] = o->draft_model, mo.draft_mmproj[VS_ROLE_LLAVA] = o->mmproj_draft;
    if (!(c->models = vs_models_load(&mo, err))) return err->code;
    c->n_ctx = o->n_ctx > 0 ? o->n_ctx : vs_lm_cfg(vs_models_target(c->models))->n_ctx_train;
    vs_session_opts so = {.n_ctx = c->n_ctx, .kv_type = o->kv_type, .draft_n_ctx = c->n_ctx,
                          .draft_kv_type = o->draft_kv_type};
    if (!(c->sess = vs_session_new(c->models, &so, err))) return err->code;
    if (o->draft_model && o->gamma > 0) { /* a drafter that cannot be made is reported before the first turn */
        vs_draft_cfg dc;
        vs_draft_cfg_default(&dc);
        dc.method = o->mode_m ? "m" : "t";
        dc.opts.tree_width = o->tree_width, dc.opts.greedy = o->greedy_draft;
        vs_status st = vs_session_prepare(c->sess, &dc, err);
        if (st) return st;
    }
    if (o->system) return push_msg(c, VS_CHAT_SYSTEM, o->system, strlen(o->system), 0, err);
    return VS_OK;
}

int vs_cmd_chat(int argc, char **argv) {
    chat_opts o;
    int st = parse(argc, argv, &o);
    if (st >= 0) return st;
    if (!vs_chat_template_find(o.tpl_name)) {
        cli_fail(CMD, "unknown template '%s' (see vlmspec chat --help)", o.tpl_name);
        return 2;
    }
    int rc = 1;
    vs_error err = {0};
    chat c;
    memset(&c, 0, sizeof(c));
    c.o = &o;
    if (chat_open(&c, &err)) {
        cli_fail_err(CMD, &err);
    } else {
        if (!o.quiet)
            fprintf(stderr, "[chat] %s%s%s, template %s, context %d rows, %s, seed %llu, %d threads%s\n", o.model,
                    o.mmproj ? " + " : "", o.mmproj ? o.mmproj : "", o.tpl_name, c.n_ctx,
                    o.draft_model && o.gamma > 0 ? "speculative" : "target only", (unsigned long long)o.sp.seed,
                    o.threads, isatty(0) ? "; /help lists the commands" : "");
        void (*prev)(int) = signal(SIGINT, on_sigint);
        if (prev == SIG_IGN) signal(SIGINT, SIG_IGN); /* started in the background: leave it ignored */
        rc = chat_loop(&c);
        signal(SIGINT, prev == SIG_ERR ? SIG_DFL : prev);
        if (rc == 0 && c.dump_failed) rc = 1;
    }
    history_clear(&c, false);
    vs_free(c.msgs);
    vs_free(c.imgs);
    vs_session_free(c.sess);
    vs_models_free(c.models);
    return rc;
}
