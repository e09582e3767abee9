/* mmprompt: multimodal prompt layout and prefill. See mmprompt.h. */
#include "mmprompt.h"

#include <string.h>

#include "chat.h"

static const char *find_marker(const char *s, const char *end, const char *m, size_t ml) {
    for (const char *p = s; p + ml <= end; p++)
        if (*p == m[0] && !memcmp(p, m, ml)) return p;
    return NULL;
}

int32_t vs_mm_count_markers(const char *text, size_t len, const char *marker) {
    if (!marker) marker = VS_CHAT_IMAGE_MARKER;
    const size_t ml = strlen(marker);
    if (!text || ml == 0) return 0;
    int32_t n = 0;
    const char *end = text + len;
    for (const char *p = text; (p = find_marker(p, end, marker, ml)) != NULL; p += ml)
        n++;
    return n;
}

void vs_mm_images_free(vs_mm_image *imgs, int32_t n) {
    for (int32_t i = 0; imgs && i < n; i++) {
        vs_free((void *)imgs[i].rows);
        memset(&imgs[i], 0, sizeof(imgs[i]));
    }
}

vs_status vs_mm_images_from_files(const vs_vision_tower *t, const vs_vision_projector *p, vs_threadpool *tp,
                                  const char *const *paths, int32_t n, vs_preproc_mode mode, int32_t pool_k,
                                  vs_mm_image *out, vs_error *err) {
    if (n > 0) memset(out, 0, (size_t)n * sizeof(*out));
    if (!t || !p) return vs_error_set(err, VS_ERR_INVALID, "images: no vision tower or no projector");
    vs_status st = vs_vision_check_projector(t, p, err);
    for (int32_t i = 0; st == VS_OK && i < n; i++) {
        vs_vision_features f;
        st = vs_vision_encode_file(t, tp, paths[i], mode, NULL, &f, err);
        float *rows = NULL;
        int64_t nr = 0;
        if (st == VS_OK) st = vs_vision_embed(p, tp, &f, pool_k, &rows, &nr, err);
        vs_vision_features_free(&f);
        if (st == VS_OK) out[i] = (vs_mm_image){rows, nr, vs_vision_projector_config(p)->proj_out};
    }
    if (st != VS_OK) vs_mm_images_free(out, n);
    return st;
}

void vs_mm_prompt_free(vs_mm_prompt *p) {
    if (!p) return;
    vs_free(p->tokens);
    vs_free(p->embd);
    vs_free(p->image_first);
    memset(p, 0, sizeof(*p));
}

vs_status vs_mm_prompt_build(vs_mm_prompt *p, const vs_tokenizer *tok, const char *text, size_t len,
                             const vs_mm_image *images, int32_t n_images, const vs_mm_prompt_opts *opts,
                             vs_error *err) {
    memset(p, 0, sizeof(*p));
    static const vs_mm_prompt_opts defaults = {0};
    if (!opts) opts = &defaults;
    const char *marker = opts->marker ? opts->marker : VS_CHAT_IMAGE_MARKER;
    const size_t ml = strlen(marker);
    if (!tok || (!text && len) || n_images < 0 || (n_images > 0 && !images) || ml == 0)
        return vs_error_set(err, VS_ERR_INVALID, "multimodal prompt: bad arguments");
    if (!text) text = "";
    const int32_t n_markers = vs_mm_count_markers(text, len, marker);
    if (n_markers != n_images)
        return vs_error_set(err, VS_ERR_INVALID,
                            "multimodal prompt: %d %s marker%s in the prompt but %d image%s given", n_markers,
                            marker, n_markers == 1 ? "" : "s", n_images, n_images == 1 ? "" : "s");
    int64_t n_img_rows = 0;
    for (int32_t i = 0; i < n_images; i++) {
        if (!images[i].rows || images[i].n_rows <= 0)
            return vs_error_set(err, VS_ERR_INVALID, "multimodal prompt: image %d has no rows", i);
        if (opts->lm_width > 0 && images[i].width != opts->lm_width)
            return vs_error_set(err, VS_ERR_INVALID,
                                "multimodal prompt: image %d has rows of width %lld (projector "
                                "output) but the LM's embedding width is %lld",
                                i, (long long)images[i].width, (long long)opts->lm_width);
        n_img_rows += images[i].n_rows;
    }

    /* tokenise the pieces */
    const int32_t n_pieces = n_images + 1;
    int32_t **ptoks = vs_calloc((size_t)n_pieces, sizeof(int32_t *));
    int64_t *pn = vs_calloc((size_t)n_pieces, sizeof(int64_t));
    vs_status st = VS_OK;
    if (!ptoks || !pn) st = vs_error_set(err, VS_ERR_NOMEM, "multimodal prompt: out of memory");
    const char *s = text, *end = text + len;
    int64_t n_text = 0;
    for (int32_t i = 0; st == VS_OK && i < n_pieces; i++) {
        const char *m = i < n_images ? find_marker(s, end, marker, ml) : end;
        const bool add_special = i == 0 && !opts->no_special;
        st = vs_tokenize_alloc(tok, s, (size_t)(m - s), add_special, !opts->no_parse_special, &ptoks[i],
                               &pn[i], err);
        n_text += pn[i];
        s = m + (i < n_images ? ml : 0);
    }
    const int64_t n = n_text + n_img_rows;
    if (st == VS_OK && opts->n_ctx > 0 && n > opts->n_ctx)
        st = vs_error_set(err, VS_ERR_RANGE,
                          "multimodal prompt needs %lld positions (%lld text tokens + %lld image "
                          "rows from %d image%s) but the context holds %lld",
                          (long long)n, (long long)n_text, (long long)n_img_rows, n_images,
                          n_images == 1 ? "" : "s", (long long)opts->n_ctx);
    if (st == VS_OK) {
        p->tokens = vs_malloc((size_t)VS_MAX(n, 1) * sizeof(int32_t));
        p->embd = vs_calloc((size_t)VS_MAX(n, 1), sizeof(float *));
        p->image_first = vs_calloc((size_t)VS_MAX(n_images, 1), sizeof(int64_t));
        if (!p->tokens || !p->embd || !p->image_first)
            st = vs_error_set(err, VS_ERR_NOMEM, "multimodal prompt: out of memory");
    }
    if (st == VS_OK) {
        int64_t r = 0;
        for (int32_t i = 0; i < n_pieces; i++) {
            for (int64_t j = 0; j < pn[i]; j++)
                p->tokens[r++] = ptoks[i][j];
            if (i == n_images) break;
            p->image_first[i] = r;
            for (int64_t j = 0; j < images[i].n_rows; j++, r++) {
                p->tokens[r] = -1;
                p->embd[r] = images[i].rows + j * images[i].width;
            }
        }
        p->n_rows = n;
        p->n_images = n_images;
        p->n_text = n_text;
    }
    for (int32_t i = 0; ptoks && i < n_pieces; i++)
        vs_free(ptoks[i]);
    vs_free(ptoks);
    vs_free(pn);
    if (st != VS_OK) vs_mm_prompt_free(p);
    return st;
}

void vs_mm_prompt_rows(const vs_mm_prompt *p, int64_t first, int64_t n, int32_t seq, int32_t pos0,
                       vs_lm_row *rows) {
    for (int64_t i = 0; i < n; i++) {
        const int64_t r = first + i;
        memset(&rows[i], 0, sizeof(rows[i]));
        rows[i].token = p->embd[r] ? 0 : p->tokens[r];
        rows[i].embd = p->embd[r];
        rows[i].seq = seq;
        rows[i].pos = pos0 + (int32_t)r;
    }
}

vs_status vs_mm_prompt_eval(vs_lm *lm, vs_kv *kv, vs_threadpool *tp, const vs_mm_prompt *p, int32_t seq,
                            int64_t n_batch, float *logits, vs_error *err) {
    if (!lm || !kv || !p || p->n_rows <= 0)
        return vs_error_set(err, VS_ERR_INVALID, "prompt eval: empty prompt");
    const int32_t pos0 = vs_kv_seq_len(kv, seq);
    if ((int64_t)pos0 + p->n_rows > vs_kv_n_ctx(kv))
        return vs_error_set(err, VS_ERR_RANGE,
                            "prompt eval: %lld prompt rows after %d cached rows exceed the "
                            "context of %d",
                            (long long)p->n_rows, pos0, vs_kv_n_ctx(kv));
    if (n_batch <= 0 || n_batch > p->n_rows) n_batch = p->n_rows;
    vs_lm_row *rows = vs_malloc((size_t)n_batch * sizeof(vs_lm_row));
    if (!rows) return vs_error_set(err, VS_ERR_NOMEM, "prompt eval: out of memory");
    vs_status st = VS_OK;
    for (int64_t first = 0; st == VS_OK && first < p->n_rows; first += n_batch) {
        const int64_t n = VS_MIN(n_batch, p->n_rows - first);
        vs_mm_prompt_rows(p, first, n, seq, pos0, rows);
        const bool last = first + n == p->n_rows;
        if (last && logits) rows[n - 1].want_logits = true;
        vs_lm_out out = {.logits = last ? logits : NULL};
        st = vs_lm_forward(lm, kv, tp, rows, (int)n, &out, err);
    }
    vs_free(rows);
    return st;
}
