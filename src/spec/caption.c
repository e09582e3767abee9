/* caption: captioner, caption sources, the captioning thread, the captions file (see caption.h). */
#include "caption.h"

#include <ctype.h>
#include <pthread.h>
#include <string.h>

#include "mmprompt.h"
#include "sample.h"

/* ------------------------------------------------------------------------------------------------
 * Captioner */

struct vs_captioner {
    vs_lm *lm;
    const vs_vision_projector *proj;
    vs_tokenizer *tok;
    char *prompt;
    int32_t max_tokens, pool_k;
    vs_threadpool *tp;
    bool same_thread;
};

static const char *lm_name(const vs_lm *lm) { return vs_gguf_name(vs_lm_gguf(lm)); }

vs_captioner *vs_captioner_new(vs_lm *lm, const vs_vision_projector *proj, const vs_captioner_opts *o,
                               vs_error *err) {
    vs_captioner_opts def = {0};
    if (!o) o = &def;
    if (!lm || !proj) {
        vs_error_set(err, VS_ERR_INVALID, "captioner: needs an LM and a projector");
        return NULL;
    }
    const char *prompt = o->prompt ? o->prompt : VS_CAPTION_PROMPT;
    if (vs_mm_count_markers(prompt, strlen(prompt), NULL) != 1) {
        vs_error_set(err, VS_ERR_INVALID,
                     "captioner: the prompt must contain exactly one <image> marker: '%s'", prompt);
        return NULL;
    }
    if (vs_vision_projector_config(proj)->proj_out != vs_lm_cfg(lm)->n_embd) {
        vs_error_set(err, VS_ERR_INVALID,
                     "captioner: projector %s outputs rows of %d but the LM %s is %d wide",
                     vs_vision_projector_name(proj), vs_vision_projector_config(proj)->proj_out, lm_name(lm),
                     vs_lm_cfg(lm)->n_embd);
        return NULL;
    }
    vs_captioner *c = vs_calloc(1, sizeof(*c));
    if (!c) {
        vs_error_set(err, VS_ERR_NOMEM, "captioner: out of memory");
        return NULL;
    }
    c->lm = lm;
    c->proj = proj;
    c->tp = o->tp;
    c->same_thread = o->same_thread;
    c->max_tokens = o->max_tokens > 0 ? o->max_tokens : 24;
    c->pool_k = o->pool_k > 1 ? o->pool_k : 1;
    c->prompt = vs_strdup(prompt);
    c->tok = vs_tokenizer_from_gguf(vs_lm_gguf(lm), err);
    if (!c->prompt || !c->tok) {
        if (!c->prompt)
            vs_error_set(err, VS_ERR_NOMEM, "captioner: out of memory");
        else
            vs_error_wrap(err, "captioner %s", lm_name(lm));
        vs_captioner_free(c);
        return NULL;
    }
    return c;
}

void vs_captioner_free(vs_captioner *c) {
    if (!c) return;
    vs_tokenizer_free(c->tok);
    vs_free(c->prompt);
    vs_free(c);
}

const vs_lm *vs_captioner_lm(const vs_captioner *c) { return c ? c->lm : NULL; }
vs_threadpool *vs_captioner_tp(const vs_captioner *c) { return c ? c->tp : NULL; }

/* Copies s[0..n) without surrounding white space. */
static char *trimmed(const char *s, size_t n) {
    while (n && isspace((unsigned char)*s)) s++, n--;
    while (n && isspace((unsigned char)s[n - 1])) n--;
    return vs_strndup(s, n);
}

vs_status vs_captioner_caption(vs_captioner *c, const vs_vision_features *f, char **text, vs_error *err) {
    *text = NULL;
    if (!c || !f) return vs_error_set(err, VS_ERR_INVALID, "captioner: no image features");
    const vs_lm_config *cfg = vs_lm_cfg(c->lm);
    float *rows = NULL, *logits = NULL;
    int64_t n_rows = 0;
    vs_mm_prompt p;
    memset(&p, 0, sizeof(p));
    vs_kv *kv = NULL;
    vs_detok *dt = NULL;
    char *out = NULL;
    size_t len = 0, cap = 0;
    vs_status st = vs_vision_embed(c->proj, c->tp, f, c->pool_k, &rows, &n_rows, err);
    if (st) goto done;
    vs_mm_image img = {.rows = rows, .n_rows = n_rows, .width = cfg->n_embd};
    vs_mm_prompt_opts po = {.lm_width = cfg->n_embd, .n_ctx = cfg->n_ctx_train};
    if ((st = vs_mm_prompt_build(&p, c->tok, c->prompt, strlen(c->prompt), &img, 1, &po, err))) goto done;
    const int n_ctx = (int)VS_MIN(p.n_rows + c->max_tokens, (int64_t)cfg->n_ctx_train);
    if (!(kv = vs_lm_kv_new(c->lm, 1, n_ctx, VS_TYPE_F32, err))) {
        st = err ? err->code : VS_ERR_NOMEM;
        goto done;
    }
    logits = vs_malloc(sizeof(float) * (size_t)cfg->n_vocab);
    if (!logits) {
        st = vs_error_set(err, VS_ERR_NOMEM, "captioner: out of memory");
        goto done;
    }
    if ((st = vs_mm_prompt_eval(c->lm, kv, c->tp, &p, 0, 512, logits, err))) goto done;
    if (!(dt = vs_detok_new(c->tok, 0, err))) {
        st = err ? err->code : VS_ERR_NOMEM;
        goto done;
    }
    bool stop = false;
    for (int32_t i = 0; i < c->max_tokens && !stop; i++) {
        int32_t t = vs_argmax(logits, cfg->n_vocab);
        if (vs_tokenizer_is_eog(c->tok, t)) break;
        size_t n = 0;
        const char *piece = vs_detok_feed(dt, &t, 1, &n, err);
        if (!piece) {
            st = err ? err->code : VS_ERR_INVALID;
            goto done;
        }
        const char *nl = memchr(piece, '\n', n);
        if (nl) n = (size_t)(nl - piece), stop = true;
        if (len + n + 1 > cap) {
            size_t nc = (len + n + 1) * 2;
            char *b = vs_realloc(out, nc);
            if (!b) {
                st = vs_error_set(err, VS_ERR_NOMEM, "captioner: out of memory");
                goto done;
            }
            out = b, cap = nc;
        }
        memcpy(out + len, piece, n);
        len += n;
        if (stop || i + 1 == c->max_tokens || vs_kv_seq_len(kv, 0) >= n_ctx) break;
        vs_lm_row r = {.token = t, .pos = vs_kv_seq_len(kv, 0), .want_logits = true};
        vs_lm_out o = {.logits = logits, .attn_layer = -1};
        if ((st = vs_lm_forward(c->lm, kv, c->tp, &r, 1, &o, err))) goto done;
    }
    if (!stop) {
        size_t n = 0;
        const char *tail = vs_detok_flush(dt, &n);
        const char *nl = memchr(tail, '\n', n);
        if (nl) n = (size_t)(nl - tail);
        if (n && len + n + 1 > cap) {
            char *b = vs_realloc(out, len + n + 1);
            if (!b) {
                st = vs_error_set(err, VS_ERR_NOMEM, "captioner: out of memory");
                goto done;
            }
            out = b, cap = len + n + 1;
        }
        if (n) memcpy(out + len, tail, n), len += n;
    }
    *text = trimmed(out ? out : "", len);
    if (!*text) st = vs_error_set(err, VS_ERR_NOMEM, "captioner: out of memory");
done:
    vs_free(out);
    vs_detok_free(dt);
    vs_free(logits);
    vs_kv_free(kv);
    vs_mm_prompt_free(&p);
    vs_free(rows);
    if (st) vs_error_wrap(err, "captioner %s", lm_name(c->lm));
    return st;
}

/* ------------------------------------------------------------------------------------------------
 * Caption source */

struct vs_caption_src {
    vs_captioner *cap; /* NULL: fixed texts */
    char **text;       /* [n] captions (owned; NULL = none) */
    int32_t n;
    /* the request being captioned */
    const vs_vision_features **img; /* [n_img] */
    int32_t n_img;
    pthread_t th;
    bool running;
    vs_status th_st;
    vs_error th_err;
    double t_caption;
};

static void drop_texts(vs_caption_src *s) {
    for (int32_t i = 0; i < s->n; i++) vs_free(s->text[i]);
    vs_free(s->text);
    s->text = NULL;
    s->n = 0;
}

static vs_caption_src *src_alloc(vs_error *err) {
    vs_caption_src *s = vs_calloc(1, sizeof(*s));
    if (!s) vs_error_set(err, VS_ERR_NOMEM, "captions: out of memory");
    return s;
}

vs_caption_src *vs_caption_src_new_texts(const char *const *texts, int32_t n, vs_error *err) {
    if (n < 0 || (n > 0 && !texts)) {
        vs_error_set(err, VS_ERR_INVALID, "captions: %d texts", n);
        return NULL;
    }
    vs_caption_src *s = src_alloc(err);
    if (!s) return NULL;
    s->text = vs_calloc((size_t)VS_MAX(n, 1), sizeof(char *));
    if (!s->text) goto oom;
    s->n = n;
    for (int32_t i = 0; i < n; i++)
        if (texts[i] && !(s->text[i] = vs_strdup(texts[i]))) goto oom;
    return s;
oom:
    vs_error_set(err, VS_ERR_NOMEM, "captions: out of memory");
    vs_caption_src_free(s);
    return NULL;
}

vs_caption_src *vs_caption_src_new_captioner(vs_captioner *c, vs_error *err) {
    if (!c) {
        vs_error_set(err, VS_ERR_INVALID, "captions: no captioner");
        return NULL;
    }
    vs_caption_src *s = src_alloc(err);
    if (s) s->cap = c;
    return s;
}

static void join(vs_caption_src *s) {
    if (s->running) {
        pthread_join(s->th, NULL);
        s->running = false;
    }
}

void vs_caption_src_free(vs_caption_src *s) {
    if (!s) return;
    join(s);
    drop_texts(s);
    vs_free(s->img);
    vs_free(s);
}

const vs_lm *vs_caption_src_lm(const vs_caption_src *s) { return s ? vs_captioner_lm(s->cap) : NULL; }
vs_threadpool *vs_caption_src_tp(const vs_caption_src *s) { return s ? vs_captioner_tp(s->cap) : NULL; }
bool vs_caption_src_same_thread(const vs_caption_src *s) { return s && s->cap && s->cap->same_thread; }

/* Captions every image of the request into s->text; the status in s->th_st. */
static void caption_all(vs_caption_src *s) {
    const double t0 = vs_time_now();
    s->th_st = VS_OK;
    for (int32_t i = 0; i < s->n_img && !s->th_st; i++) {
        if (!s->img[i]) continue;
        s->th_st = vs_captioner_caption(s->cap, s->img[i], &s->text[i], &s->th_err);
        if (s->th_st) vs_error_wrap(&s->th_err, "image %d", i);
    }
    s->t_caption = vs_time_now() - t0;
}

static void *caption_thread(void *arg) {
    caption_all(arg);
    return NULL;
}

vs_status vs_caption_src_start(vs_caption_src *s, const vs_vision_features *const *images, int32_t n_images,
                               bool async, vs_error *err) {
    if (!s) return vs_error_set(err, VS_ERR_INVALID, "captions: no source");
    if (!s->cap) return VS_OK;
    join(s);
    drop_texts(s);
    vs_free(s->img);
    s->img = NULL;
    s->n_img = 0;
    s->t_caption = 0;
    s->th_st = VS_OK;
    vs_error_clear(&s->th_err);
    if (n_images <= 0) return VS_OK;
    s->text = vs_calloc((size_t)n_images, sizeof(char *));
    s->img = vs_calloc((size_t)n_images, sizeof(*s->img));
    if (!s->text || !s->img) return vs_error_set(err, VS_ERR_NOMEM, "captions: out of memory");
    s->n = s->n_img = n_images;
    for (int32_t i = 0; i < n_images; i++) s->img[i] = images ? images[i] : NULL;
    if (async && pthread_create(&s->th, NULL, caption_thread, s) == 0) {
        s->running = true;
        return VS_OK;
    }
    caption_all(s); /* synchronous (asked for, or no thread could be started) */
    if (s->th_st && err) *err = s->th_err;
    return s->th_st;
}

vs_status vs_caption_src_wait(vs_caption_src *s, double *waited, vs_error *err) {
    const double t0 = vs_time_now();
    if (s) join(s);
    if (waited) *waited = vs_time_now() - t0;
    if (s && s->cap && s->th_st) {
        if (err) *err = s->th_err;
        return s->th_st;
    }
    return VS_OK;
}

const char *vs_caption_src_get(const vs_caption_src *s, int32_t image) {
    if (!s || image < 0 || image >= s->n) return NULL;
    return s->text[image];
}

double vs_caption_src_seconds(const vs_caption_src *s) { return s ? s->t_caption : 0; }

/* ------------------------------------------------------------------------------------------------
 * Captions file */

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

vs_caption_src *vs_caption_src_from_file(const char *path, const char *const *keys, int32_t n_images,
                                         vs_error *err) {
    uint8_t *data = NULL;
    size_t size = 0;
    if (n_images < 0) {
        vs_error_set(err, VS_ERR_INVALID, "captions %s: %d images", path, n_images);
        return NULL;
    }
    if (vs_read_file(path, &data, &size, err)) return NULL;
    char **texts = vs_calloc((size_t)VS_MAX(n_images, 1), sizeof(char *));
    int32_t *line_of = vs_calloc((size_t)VS_MAX(n_images, 1), sizeof(int32_t));
    vs_caption_src *s = NULL;
    if (!texts || !line_of) {
        vs_error_set(err, VS_ERR_NOMEM, "captions %s: out of memory", path);
        goto done;
    }
    if (memchr(data, 0, size)) {
        vs_error_set(err, VS_ERR_FORMAT, "captions %s: NUL byte in the file", path);
        goto done;
    }
    const char *text = (const char *)data;
    int keyed = -1; /* unknown until the first caption line */
    int32_t n_pos = 0;
    int lineno = 0;
    for (size_t pos = 0; pos < size;) {
        size_t e = pos;
        while (e < size && text[e] != '\n') e++;
        const char *ln = text + pos;
        size_t ll = e - pos;
        pos = e + 1;
        lineno++;
        if (ll && ln[ll - 1] == '\r') ll--;
        size_t a = 0;
        while (a < ll && isspace((unsigned char)ln[a])) a++;
        if (a == ll || ln[a] == '#') continue; /* blank or comment */
        const char *tab = memchr(ln, '\t', ll);
        int is_keyed = tab != NULL;
        if (keyed < 0) keyed = is_keyed;
        if (keyed != is_keyed) {
            vs_error_set(err, VS_ERR_FORMAT,
                         "captions %s:%d: mixes 'KEY<TAB>CAPTION' lines with plain caption lines", path,
                         lineno);
            goto done;
        }
        int32_t img = -1;
        const char *cap = ln;
        size_t cl = ll;
        if (keyed) {
            size_t kl = (size_t)(tab - ln);
            while (kl && isspace((unsigned char)ln[kl - 1])) kl--;
            char key[1024];
            if (kl - a >= sizeof(key)) {
                vs_error_set(err, VS_ERR_FORMAT, "captions %s:%d: key longer than %zu bytes", path, lineno,
                             sizeof(key) - 1);
                goto done;
            }
            memcpy(key, ln + a, kl - a);
            key[kl - a] = 0;
            for (int32_t i = 0; i < n_images && img < 0; i++)
                if (keys && keys[i] && (!strcmp(keys[i], key) || !strcmp(base_name(keys[i]), key))) img = i;
            if (img < 0) {
                vs_error_set(err, VS_ERR_FORMAT, "captions %s:%d: '%s' is not one of the request's images",
                             path, lineno, key);
                goto done;
            }
            if (texts[img]) {
                vs_error_set(err, VS_ERR_FORMAT,
                             "captions %s:%d: a second caption for image %d (line %d has the "
                             "first)",
                             path, lineno, img, line_of[img]);
                goto done;
            }
            cap = tab + 1;
            cl = ll - (size_t)(tab + 1 - ln);
        } else {
            if (n_pos >= n_images) {
                vs_error_set(err, VS_ERR_FORMAT, "captions %s:%d: more captions than the %d images", path,
                             lineno, n_images);
                goto done;
            }
            img = n_pos++;
        }
        char *t = trimmed(cap, cl);
        if (!t) {
            vs_error_set(err, VS_ERR_NOMEM, "captions %s: out of memory", path);
            goto done;
        }
        if (!*t) {
            vs_free(t);
            vs_error_set(err, VS_ERR_FORMAT, "captions %s:%d: empty caption for image %d", path, lineno, img);
            goto done;
        }
        texts[img] = t;
        line_of[img] = lineno;
    }
    for (int32_t i = 0; i < n_images; i++)
        if (!texts[i]) {
            vs_error_set(err, VS_ERR_FORMAT, "captions %s: no caption for image %d%s%s%s", path, i,
                         keys && keys[i] ? " (" : "", keys && keys[i] ? keys[i] : "",
                         keys && keys[i] ? ")" : "");
            goto done;
        }
    s = vs_caption_src_new_texts((const char *const *)texts, n_images, err);
done:
    if (texts)
        for (int32_t i = 0; i < n_images; i++) vs_free(texts[i]);
    vs_free(texts);
    vs_free(line_of);
    vs_free(data);
    return s;
}
