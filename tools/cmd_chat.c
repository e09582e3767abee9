/* vlmspec chat: an interactive multi-turn chat with a (vision) LM, reading lines from stdin.
 *   /image PATH  attaches an image to the next turn (encoded at once: ViT features + the target's rows)
 *   /reset       forgets the conversation (the cached system prompt stays reusable)
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chat.h"
#include "outfile.h"
#include "cli.h"
#include "draft_ensemble.h"
#include "draft_lm.h"
#include "lm.h"
#include "mmprompt.h"
#include "sample.h"
#include "spec.h"
#include "tokenizer.h"
#include "vision.h"

#define CMD "chat"
#define N_BATCH 256

typedef struct chat_opts {
    const char *model, *mmproj, *draft_model, *mmproj_draft, *tpl_name, *system, *dump;
    int gamma, tree_width, n_predict, n_ctx, threads;
    bool mode_m, greedy_draft, ignore_eos, quiet;
    vs_preproc_mode preproc;
    vs_type kv_type, draft_kv_type;
    vs_sampler_params sp;
} chat_opts;

typedef struct chat_image {
    vs_vision_features feat; /* ViT output, shared by every projector */
    vs_mm_image rows;        /* the target's projected rows (owned) */
    int64_t serial;          /* identity in the cache (never reused, not even after /reset) */
} chat_image;

typedef struct chat {
    const chat_opts *o;
    vs_lm *lm, *draft;
    vs_tokenizer *tok;
    vs_threadpool *tp;
    vs_mmproj *mp, *mp_draft;
    const vs_vision_tower *tower;
    const vs_chat_template *tpl;
    int n_ctx;
    /* history */
    vs_chat_msg *msgs;
    int n_msgs, cap_msgs;
    chat_image *imgs; /* every image of the conversation, in order */
    int n_imgs, cap_imgs;
    int n_pending; /* the last n_pending images are attached to the next turn */
    int64_t next_serial;
    /* target only: the cache and its rows' identities */
    vs_kv *kv;
    int64_t *cache_id; /* (n_ctx) >= 0 token id, < 0: -(1 + serial * 2^32 + row) */
    int n_cached;
    float *logits;
    vs_sampler *smp;
    /* speculative */
    vs_spec *eng;
    vs_spec_drafter *drafter;
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
            "  --template NAME         chat template (default vicuna):");
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
           "  --ignore-eos            do not stop a reply at end-of-generation tokens\n"
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

/* Returns -1 when the options are fine, else the exit status. */
static int parse(int argc, char **argv, chat_opts *o) {
    memset(o, 0, sizeof(*o));
    o->preproc = VS_PREPROC_LLAVA;
    o->gamma = 5, o->tree_width = 1, o->n_predict = 256, o->threads = 2, o->kv_type = VS_TYPE_F16, o->tpl_name = "vicuna";
    o->draft_kv_type = VS_TYPE_BF16;
    o->sp = vs_sampler_params_default();
    o->sp.temperature = 0.8f, o->sp.top_k = 40, o->sp.top_p = 0.95f, o->sp.min_p = 0.05f;
    bool seed_given = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        double d;
        int64_t s64;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--ignore-eos"))
            o->ignore_eos = true;
        else if (!strcmp(a, "--draft-greedy"))
            o->greedy_draft = true;
        else if (!strcmp(a, "-q") || !strcmp(a, "--quiet"))
            o->quiet = true;
        else {
            if (!(v = cli_value(CMD, argc, argv, &i)))
                return 2;
            if (!strcmp(a, "-m") || !strcmp(a, "--model"))
                o->model = v;
            else if (!strcmp(a, "--mmproj"))
                o->mmproj = v;
            else if (!strcmp(a, "-md") || !strcmp(a, "--model-draft"))
                o->draft_model = v;
            else if (!strcmp(a, "--mmproj-draft"))
                o->mmproj_draft = v;
            else if (!strcmp(a, "--template"))
                o->tpl_name = v;
            else if (!strcmp(a, "--system"))
                o->system = v;
            else if (!strcmp(a, "--preproc")) {
                if (!strcmp(v, "llava"))
                    o->preproc = VS_PREPROC_LLAVA;
                else if (!strcmp(v, "llamacpp"))
                    o->preproc = VS_PREPROC_LLAMACPP;
                else
                    return cli_fail(CMD, "--preproc %s: expected llava or llamacpp", v), 2;
            } else if (!strcmp(a, "--dump"))
                o->dump = v;
            else if (!strcmp(a, "--draft")) {
                if (!cli_parse_int(CMD, a, v, 0, VS_SPEC_MAX_GAMMA, &o->gamma))
                    return 2;
            } else if (!strcmp(a, "--tree-width")) {
                if (!cli_parse_int(CMD, a, v, 1, VS_DRAFT_ENS_MAX_WIDTH, &o->tree_width))
                    return 2;
            } else if (!strcmp(a, "--draft-mode")) {
                if (!strcmp(v, "m"))
                    o->mode_m = true;
                else if (!strcmp(v, "t"))
                    o->mode_m = false;
                else
                    return cli_fail(CMD, "--draft-mode %s: expected m or t", v), 2;
            } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
                if (!cli_parse_int(CMD, a, v, 1, 1 << 24, &o->n_predict))
                    return 2;
            } else if (!strcmp(a, "--temp")) {
                if (!cli_parse_f64(CMD, a, v, 0, 100, &d))
                    return 2;
                o->sp.temperature = (float)d;
            } else if (!strcmp(a, "--top-k")) {
                if (!cli_parse_int(CMD, a, v, 0, INT32_MAX, &o->sp.top_k))
                    return 2;
            } else if (!strcmp(a, "--top-p")) {
                if (!cli_parse_f64(CMD, a, v, 0, 1, &d))
                    return 2;
                o->sp.top_p = (float)d;
            } else if (!strcmp(a, "--min-p")) {
                if (!cli_parse_f64(CMD, a, v, 0, 1, &d))
                    return 2;
                o->sp.min_p = (float)d;
            } else if (!strcmp(a, "--seed")) {
                if (!cli_parse_i64(CMD, a, v, 0, INT64_MAX, &s64))
                    return 2;
                o->sp.seed = (uint64_t)s64;
                seed_given = true;
            } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
                if (!cli_parse_int(CMD, a, v, 1, 1024, &o->threads))
                    return 2;
            } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) {
                if (!cli_parse_int(CMD, a, v, 1, 1 << 24, &o->n_ctx))
                    return 2;
            } else if (!strcmp(a, "--kv-type")) {
                if (!cli_parse_kv_type(CMD, a, v, false, &o->kv_type))
                    return 2;
            } else if (!strcmp(a, "--draft-kv-type")) {
                if (!cli_parse_kv_type(CMD, a, v, true, &o->draft_kv_type))
                    return 2;
            } else {
                return cli_fail(CMD, "unknown option '%s' (see vlmspec chat --help)", a), 2;
            }
        }
    }
    if (!o->model)
        return cli_fail(CMD, "-m MODEL is required"), 2;
    if (!o->draft_model && o->tree_width > 1)
        return cli_fail(CMD, "--tree-width needs a draft model (-md FILE)"), 2;
    if (!o->draft_model && (o->mmproj_draft || o->mode_m))
        return cli_fail(CMD, "--mmproj-draft / --draft-mode m need a draft model (-md FILE)"), 2;
    if (o->draft_model && o->mode_m && !o->mmproj_draft)
        return cli_fail(CMD, "--draft-mode m needs the drafter's projector (--mmproj-draft FILE)"), 2;
    if (o->mode_m && !o->mmproj)
        return cli_fail(CMD, "--draft-mode m needs --mmproj (the shared tower)"), 2;
    if (!seed_given)
        o->sp.seed = (uint64_t)(vs_time_now() * 1e6);
    return -1;
}

/* ------------------------------------------------------------------------------------------------ */

static void images_drop_from(chat *c, int first) {
    for (int i = first; i < c->n_imgs; i++) {
        vs_vision_features_free(&c->imgs[i].feat);
        vs_mm_images_free(&c->imgs[i].rows, 1);
    }
    c->n_imgs = first;
}

/* Forgets the conversation; keep_system keeps a leading system message (--system). */
static void history_clear(chat *c, bool keep_system) {
    int first = keep_system && c->n_msgs > 0 && c->msgs[0].role == VS_CHAT_SYSTEM ? 1 : 0;
    for (int i = first; i < c->n_msgs; i++)
        vs_free((char *)c->msgs[i].content);
    c->n_msgs = first;
    images_drop_from(c, 0);
    c->n_pending = 0;
}

static vs_status push_msg(chat *c, vs_chat_role role, const char *text, size_t len, int n_images,
                          vs_error *err) {
    if (c->n_msgs == c->cap_msgs) {
        int cap = c->cap_msgs ? 2 * c->cap_msgs : 16;
        vs_chat_msg *m = vs_realloc(c->msgs, sizeof(*m) * (size_t)cap);
        if (!m)
            return vs_error_set(err, VS_ERR_NOMEM, "chat: out of memory");
        c->msgs = m, c->cap_msgs = cap;
    }
    char *s = vs_malloc(len + 1);
    if (!s)
        return vs_error_set(err, VS_ERR_NOMEM, "chat: out of memory");
    memcpy(s, text, len);
    s[len] = 0;
    c->msgs[c->n_msgs++] = (vs_chat_msg){.role = role, .content = s, .n_images = n_images};
    return VS_OK;
}

static void pop_msg(chat *c) { vs_free((char *)c->msgs[--c->n_msgs].content); }

/* /image PATH: encode once (features for every projector) and project with the target's projector. */
static vs_status attach_image(chat *c, const char *path, vs_error *err) {
    if (!c->tower)
        return vs_error_set(err, VS_ERR_INVALID, "/image %s: no --mmproj was given", path);
    if (c->n_imgs == c->cap_imgs) {
        int cap = c->cap_imgs ? 2 * c->cap_imgs : 8;
        chat_image *m = vs_realloc(c->imgs, sizeof(*m) * (size_t)cap);
        if (!m)
            return vs_error_set(err, VS_ERR_NOMEM, "chat: out of memory");
        c->imgs = m, c->cap_imgs = cap;
    }
    chat_image *im = &c->imgs[c->n_imgs];
    memset(im, 0, sizeof(*im));
    vs_status st = vs_vision_encode_file(c->tower, c->tp, path, c->o->preproc, NULL, &im->feat, err);
    if (st)
        return st;
    float *rows = NULL;
    int64_t nr = 0;
    const vs_vision_projector *p = vs_mmproj_projector(c->mp);
    if ((st = vs_vision_embed(p, c->tp, &im->feat, 1, &rows, &nr, err))) {
        vs_vision_features_free(&im->feat);
        return st;
    }
    im->rows = (vs_mm_image){rows, nr, vs_vision_projector_config(p)->proj_out};
    im->serial = c->next_serial++;
    c->n_imgs++;
    c->n_pending++;
    return VS_OK;
}

/* Streams the reply: prints it and keeps a copy. */
typedef struct reply {
    vs_detok *dt;
    char *buf;
    size_t len, cap;
    bool failed, oom;
    vs_error err;
} reply;

static bool reply_put(reply *r, const char *s, size_t n) {
    fwrite(s, 1, n, stdout);
    fflush(stdout);
    if (r->len + n + 1 > r->cap) {
        size_t cap = VS_MAX(2 * r->cap, r->len + n + 64);
        char *b = vs_realloc(r->buf, cap);
        if (!b)
            return r->oom = true, false;
        r->buf = b, r->cap = cap;
    }
    memcpy(r->buf + r->len, s, n);
    r->len += n;
    r->buf[r->len] = 0;
    return true;
}

static bool reply_tokens(void *ctx, const int32_t *t, int32_t n) {
    reply *r = ctx;
    for (int32_t i = 0; i < n; i++) {
        size_t len = 0;
        const char *s = vs_detok_feed(r->dt, t + i, 1, &len, &r->err);
        if (!s)
            return r->failed = true, false;
        if (!reply_put(r, s, len))
            return false;
    }
    return true;
}

static int64_t row_id(const chat *c, const vs_mm_prompt *p, int64_t r) {
    if (!p->embd[r])
        return p->tokens[r];
    int im = 0;
    while (im + 1 < p->n_images && p->image_first[im + 1] <= r)
        im++;
    return -(1 + c->imgs[im].serial * ((int64_t)1 << 32) + (r - p->image_first[im]));
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

typedef struct turn_stats {
    int64_t rows, reused;
    int n_gen;
    double t_prefill, t_decode;
    const char *stop;
    double tau;
    int32_t draft_prefilled; /* speculative: prompt rows the drafter evaluated (its begin) */
    bool spec;
} turn_stats;

/* Target only: evaluate the uncached rows, then decode. */
static vs_status run_target(chat *c, const vs_mm_prompt *p, reply *r, turn_stats *ts, vs_error *err) {
    const chat_opts *o = c->o;
    const int32_t n_vocab = vs_lm_cfg(c->lm)->n_vocab;
    int64_t keep = 0;
    while (keep < c->n_cached && keep < p->n_rows - 1 && c->cache_id[keep] == row_id(c, p, keep))
        keep++;
    vs_status st = vs_kv_seq_truncate(c->kv, 0, (int)keep, err);
    if (st)
        return st;
    c->n_cached = (int)keep;
    ts->rows = p->n_rows, ts->reused = keep;
    vs_lm_row rows[N_BATCH];
    double t0 = vs_time_now();
    for (int64_t r0 = keep; r0 < p->n_rows; r0 += N_BATCH) {
        int64_t n = VS_MIN((int64_t)N_BATCH, p->n_rows - r0);
        vs_mm_prompt_rows(p, r0, n, 0, 0, rows);
        const bool last = r0 + n == p->n_rows;
        rows[n - 1].want_logits = last;
        vs_lm_out out = {.logits = last ? c->logits : NULL, .attn_layer = -1};
        if ((st = vs_lm_forward(c->lm, c->kv, c->tp, rows, (int)n, &out, err)))
            return st;
        for (int64_t i = 0; i < n; i++)
            c->cache_id[c->n_cached++] = row_id(c, p, r0 + i);
    }
    double t1 = vs_time_now();
    ts->t_prefill = t1 - t0;
    ts->stop = "token limit";
    while (ts->n_gen < o->n_predict) {
        int32_t t;
        if ((st = vs_sampler_sample(c->smp, c->logits, NULL, &t, err)))
            return st;
        ts->n_gen++;
        if (!reply_tokens(r, &t, 1))
            break;
        if (!o->ignore_eos && vs_tokenizer_is_eog(c->tok, t)) {
            ts->stop = "end of generation";
            break;
        }
        if (ts->n_gen == o->n_predict)
            break;
        if (c->n_cached >= c->n_ctx) {
            ts->stop = "context full";
            break;
        }
        vs_lm_row row = {.token = t, .pos = c->n_cached, .want_logits = true};
        vs_lm_out out = {.logits = c->logits, .attn_layer = -1};
        if ((st = vs_lm_forward(c->lm, c->kv, c->tp, &row, 1, &out, err)))
            return st;
        c->cache_id[c->n_cached++] = t;
    }
    (void)n_vocab;
    ts->t_decode = vs_time_now() - t1;
    return VS_OK;
}

/* Speculative: the engine with reuse_prefix; images identified by serial + 1 (spec.h image_id). */
static vs_status run_spec(chat *c, const vs_mm_prompt *p, reply *r, turn_stats *ts, vs_error *err) {
    const chat_opts *o = c->o;
    vs_spec_segment *segs = vs_calloc((size_t)p->n_rows, sizeof(*segs));
    const vs_vision_features **featp = vs_calloc((size_t)VS_MAX(c->n_imgs, 1), sizeof(*featp));
    vs_spec_log log;
    vs_spec_log_init(&log);
    vs_status st = VS_OK;
    if (!segs || !featp) {
        st = vs_error_set(err, VS_ERR_NOMEM, "chat: out of memory");
        goto done;
    }
    for (int i = 0; i < c->n_imgs; i++)
        featp[i] = &c->imgs[i].feat;
    int ns = 0;
    for (int64_t row = 0; row < p->n_rows;) {
        if (p->embd[row]) {
            int im = 0;
            while (im + 1 < p->n_images && p->image_first[im + 1] <= row)
                im++;
            segs[ns++] = (vs_spec_segment){.kind = VS_SPEC_SEG_IMAGE,
                                           .n = (int32_t)c->imgs[im].rows.n_rows,
                                           .embd = c->imgs[im].rows.rows,
                                           .image = im,
                                           .image_id = c->imgs[im].serial < INT32_MAX - 1
                                                           ? (int32_t)(c->imgs[im].serial + 1)
                                                           : 0};
            row += c->imgs[im].rows.n_rows;
        } else {
            int64_t e = row;
            while (e < p->n_rows && !p->embd[e])
                e++;
            segs[ns++] = (vs_spec_segment){
                .kind = VS_SPEC_SEG_TEXT, .n = (int32_t)(e - row), .tokens = p->tokens + row};
            row = e;
        }
    }
    vs_spec_prompt prompt = {.seg = segs, .n_seg = ns, .images = featp, .n_images = c->n_imgs};
    vs_spec_params par = vs_spec_params_default();
    par.gamma = o->gamma;
    par.n_predict = o->n_predict;
    par.sampling = o->sp;
    par.sampling.seed = o->sp.seed + (uint64_t)c->turn;
    par.ignore_eos = o->ignore_eos;
    par.reuse_prefix = true;
    st = vs_spec_generate(c->eng, c->drafter, &prompt, &par, reply_tokens, r, &log, err);
    if (!st || log.n_tokens > 0) {
        vs_spec_stats stats;
        vs_spec_stats_compute(&log, NULL, &stats);
        ts->spec = true;
        ts->tau = stats.tau;
        ts->draft_prefilled = vs_draft_lm_prefilled(c->drafter);
        ts->n_gen = log.n_tokens;
        ts->rows = log.n_prompt;
        ts->reused = log.n_prompt - 1 - log.n_prefilled;
        ts->t_prefill = log.t_prefill + log.t_draft_prefill;
        ts->t_decode = log.t_decode;
        ts->stop = log.stop == VS_SPEC_STOP_CONTEXT ? "context full" : vs_spec_stop_name(log.stop);
    }
done:
    vs_spec_log_free(&log);
    vs_free(segs);
    vs_free(featp);
    return st;
}

/* Trimmed copy bounds of s (spaces and newlines at both ends). */
static void trim(const char *s, size_t n, size_t *b, size_t *e) {
    *b = 0, *e = n;
    while (*b < *e && (s[*b] == ' ' || s[*b] == '\n' || s[*b] == '\t' || s[*b] == '\r'))
        (*b)++;
    while (*e > *b && (s[*e - 1] == ' ' || s[*e - 1] == '\n' || s[*e - 1] == '\t' || s[*e - 1] == '\r'))
        (*e)--;
}

/* One user turn. Returns VS_OK or an error (the history is then as before the turn). */
static vs_status user_turn(chat *c, const char *text, size_t len, vs_error *err) {
    const chat_opts *o = c->o;
    const int n_att = c->n_pending;
    vs_status st = push_msg(c, VS_CHAT_USER, text, len, n_att, err);
    if (st)
        return st;
    c->n_pending = 0;
    char *ptext = NULL;
    size_t plen = 0;
    vs_mm_prompt mp;
    memset(&mp, 0, sizeof(mp));
    vs_mm_image *ims = vs_calloc((size_t)VS_MAX(c->n_imgs, 1), sizeof(*ims));
    reply r;
    memset(&r, 0, sizeof(r));
    turn_stats ts = {0};
    if (!ims) {
        st = vs_error_set(err, VS_ERR_NOMEM, "chat: out of memory");
        goto undo;
    }
    for (int i = 0; i < c->n_imgs; i++)
        ims[i] = c->imgs[i].rows;
    if ((st = vs_chat_format(c->tpl, c->msgs, c->n_msgs, true, &ptext, &plen, err)))
        goto undo;
    vs_mm_prompt_opts po = {.lm_width = vs_lm_cfg(c->lm)->n_embd, .n_ctx = c->n_ctx};
    if ((st = vs_mm_prompt_build(&mp, c->tok, ptext, plen, ims, c->n_imgs, &po, err))) {
        if (st == VS_ERR_RANGE)
            vs_error_wrap(err, "the conversation does not fit the context of %d rows (/reset starts over)",
                          c->n_ctx);
        goto undo;
    }
    c->turn++;
    if (o->dump)
        write_file(c, "prompt", ptext, plen);
    if (!(r.dt = vs_detok_new(c->tok, 0, err))) {
        st = err->code;
        goto undo;
    }
    st = c->eng ? run_spec(c, &mp, &r, &ts, err) : run_target(c, &mp, &r, &ts, err);
    if (!st && r.failed)
        *err = r.err, st = err->code;
    if (!st && r.oom)
        st = vs_error_set(err, VS_ERR_NOMEM, "chat: out of memory");
    if (st) {
        printf("\n");
        fflush(stdout);
        goto undo;
    }
    size_t tl = 0;
    const char *tail = vs_detok_flush(r.dt, &tl);
    reply_put(&r, tail, tl);
    printf("\n");
    fflush(stdout);
    if (o->dump)
        write_file(c, "reply", r.buf ? r.buf : "", r.len);
    size_t b, e;
    trim(r.buf ? r.buf : "", r.len, &b, &e);
    if ((st = push_msg(c, VS_CHAT_ASSISTANT, r.buf ? r.buf + b : "", e - b, 0, err)))
        goto undo;
    if (!o->quiet) {
        double tps = ts.n_gen > 0 && ts.t_decode > 0 ? ts.n_gen / ts.t_decode : 0;
        fprintf(stderr,
                "[chat] turn %d: prompt %lld rows (%d images), reused %lld, evaluated %lld in %.3f s; "
                "%d tokens in %.3f s (%.2f t/s)",
                c->turn, (long long)ts.rows, c->n_imgs, (long long)ts.reused,
                (long long)(ts.rows - ts.reused), ts.t_prefill, ts.n_gen, ts.t_decode, tps);
        if (ts.spec)
            fprintf(stderr, "; tau %.3f (gamma %d), draft prefill %d rows", ts.tau, o->gamma,
                    ts.draft_prefilled);
        fprintf(stderr, "; stop: %s\n", ts.stop);
    }
    if (!strcmp(ts.stop, "context full"))
        fprintf(stderr,
                "vlmspec chat: the context (%d rows) is full: the reply was cut; /reset starts over\n",
                c->n_ctx);
    goto done;
undo:
    /* the turn did not happen: drop its message, its images become pending again */
    if (c->n_msgs > 0 && c->msgs[c->n_msgs - 1].role == VS_CHAT_USER)
        pop_msg(c);
    c->n_pending = n_att;
done:
    vs_free(r.buf);
    vs_detok_free(r.dt);
    vs_mm_prompt_free(&mp);
    vs_free(ims);
    vs_free(ptext);
    return st;
}

static int chat_loop(chat *c) {
    int n_fail = 0;
    const bool tty = isatty(0);
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    vs_error err = {0};
    for (;;) {
        if (tty)
            fputs("> ", stderr), fflush(stderr);
        if ((n = getline(&line, &cap, stdin)) < 0)
            break;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = 0;
        size_t b = 0;
        while (line[b] == ' ' || line[b] == '\t')
            b++;
        const char *s = line + b;
        if (!*s)
            continue;
        if (!strcmp(s, "/quit") || !strcmp(s, "/exit"))
            break;
        if (!strcmp(s, "/reset")) {
            history_clear(c, true);
            if (!c->o->quiet)
                fprintf(stderr, "[chat] conversation cleared\n");
            continue;
        }
        if (!strncmp(s, "/image", 6) && (s[6] == ' ' || s[6] == '\t' || !s[6])) {
            const char *path = s + 6;
            while (*path == ' ' || *path == '\t')
                path++;
            if (!*path) {
                fprintf(stderr, "vlmspec chat: /image needs a PATH\n");
                n_fail++;
                continue;
            }
            if (attach_image(c, path, &err)) {
                fprintf(stderr, "vlmspec chat: %s; the image is not attached, the chat goes on\n", err.msg);
                n_fail++;
            } else if (!c->o->quiet) {
                fprintf(stderr, "[chat] image %s attached to the next turn (%lld rows)\n", path,
                        (long long)c->imgs[c->n_imgs - 1].rows.n_rows);
            }
            continue;
        }
        if (s[0] == '/' && s[1] != '/' && s[1] != ' ') {
            fprintf(stderr, "vlmspec chat: unknown command '%s' (/image PATH, /reset, /quit)\n", s);
            n_fail++;
            continue;
        }
        if (user_turn(c, s, strlen(s), &err)) {
            fprintf(stderr, "vlmspec chat: %s; the turn was dropped, the chat goes on\n", err.msg);
            n_fail++;
        }
    }
    free(line);
    if (c->n_pending > 0)
        fprintf(stderr, "vlmspec chat: %d attached image(s) were never sent (no turn followed)\n",
                c->n_pending);
    return n_fail ? 1 : 0;
}

int vs_cmd_chat(int argc, char **argv) {
    chat_opts o;
    int st = parse(argc, argv, &o);
    if (st >= 0)
        return st;
    int rc = 1;
    vs_error err = {0};
    chat c;
    memset(&c, 0, sizeof(c));
    c.o = &o;
    if (!(c.tpl = vs_chat_template_find(o.tpl_name))) {
        cli_fail(CMD, "unknown template '%s' (see vlmspec chat --help)", o.tpl_name);
        return 2;
    }
    if (!(c.lm = vs_lm_load(o.model, &err)))
        goto fail;
    if (!(c.tok = vs_tokenizer_from_gguf(vs_lm_gguf(c.lm), &err)))
        goto fail;
    const vs_lm_config *lc = vs_lm_cfg(c.lm);
    c.n_ctx = o.n_ctx > 0 ? o.n_ctx : lc->n_ctx_train;
    if (o.threads > 1 && !(c.tp = vs_threadpool_new(o.threads, &err)))
        goto fail;
    if (o.mmproj) {
        if (!(c.mp = vs_mmproj_open(o.mmproj, &err)))
            goto fail;
        if (!(c.tower = vs_mmproj_tower(c.mp))) {
            cli_fail(CMD, "%s has no vision tower (a projector-only file cannot encode images)", o.mmproj);
            goto done;
        }
        if (vs_vision_check_projector(c.tower, vs_mmproj_projector(c.mp), &err))
            goto fail;
        int32_t pw = vs_vision_projector_config(vs_mmproj_projector(c.mp))->proj_out;
        if (pw != lc->n_embd) {
            cli_fail(CMD, "the projector of %s writes rows of %d values but %s has width %d", o.mmproj, pw,
                     o.model, lc->n_embd);
            goto done;
        }
    }
    if (o.system && push_msg(&c, VS_CHAT_SYSTEM, o.system, strlen(o.system), 0, &err))
        goto fail;
    if (o.draft_model) {
        if (!(c.draft = vs_lm_load(o.draft_model, &err)))
            goto fail;
        vs_spec_config ec = {.n_ctx = c.n_ctx, .kv_type = o.kv_type, .tp = c.tp, .tok = c.tok};
        if (!(c.eng = vs_spec_new(c.lm, &ec, &err)))
            goto fail;
        vs_draft_lm_opts dopt = {.mode = o.mode_m ? VS_DRAFT_LM_MM : VS_DRAFT_LM_TEXT,
                                 .n_ctx = c.n_ctx,
                                 .kv_type = o.draft_kv_type,
                                 .tp = c.tp,
                                 .greedy = o.greedy_draft,
                                 .tree_width = o.tree_width};
        if (o.mode_m) {
            if (!(c.mp_draft = vs_mmproj_open(o.mmproj_draft, &err)))
                goto fail;
            dopt.proj = vs_mmproj_projector(c.mp_draft);
            dopt.tower = c.tower;
        }
        if (!(c.drafter = vs_draft_lm_new(c.draft, c.lm, &dopt, &err)))
            goto fail;
    } else {
        if (!(c.kv = vs_lm_kv_new(c.lm, 1, c.n_ctx, o.kv_type, &err)))
            goto fail;
        if (!(c.smp = vs_sampler_new(lc->n_vocab, &o.sp, &err)))
            goto fail;
        c.cache_id = vs_malloc(sizeof(int64_t) * (size_t)c.n_ctx);
        c.logits = vs_malloc(sizeof(float) * (size_t)lc->n_vocab);
        if (!c.cache_id || !c.logits) {
            cli_fail(CMD, "out of memory");
            goto done;
        }
    }
    if (!o.quiet)
        fprintf(stderr, "[chat] %s%s%s, template %s, context %d rows, %s, seed %llu, %d threads%s\n", o.model,
                o.mmproj ? " + " : "", o.mmproj ? o.mmproj : "", o.tpl_name, c.n_ctx,
                o.draft_model ? "speculative" : "target only", (unsigned long long)o.sp.seed, o.threads,
                isatty(0) ? "; /image PATH, /reset, /quit" : "");
    rc = chat_loop(&c);
    if (rc == 0 && c.dump_failed) rc = 1;
    goto done;
fail:
    cli_fail_err(CMD, &err);
done:
    history_clear(&c, false);
    vs_free(c.msgs);
    vs_free(c.imgs);
    vs_free(c.cache_id);
    vs_free(c.logits);
    vs_sampler_free(c.smp);
    vs_kv_free(c.kv);
    vs_spec_drafter_free(c.drafter);
    vs_spec_free(c.eng);
    vs_mmproj_free(c.mp_draft);
    vs_mmproj_free(c.mp);
    vs_threadpool_free(c.tp);
    vs_tokenizer_free(c.tok);
    vs_lm_free(c.draft);
    vs_lm_free(c.lm);
    return rc;
}
