/* train_drafter: drafter configuration, the target's tower, the selection rule and the phases'
 * sequence sets. See train_drafter.h. */
#include "train_drafter.h"

#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------- */
/* Model */

void vs_drafter_lm_shape_default(vs_drafter_lm_shape *s) {
    *s = (vs_drafter_lm_shape){
        .width = 192, .n_layers = 4, .n_heads = 6, .n_kv_heads = 2, .ffn = 512, .max_seq = 1024};
}

vs_status vs_drafter_config(const vs_mmproj *target_mm, int vocab, const vs_drafter_lm_shape *lm,
                            vs_train_vlm_config *out, vs_error *err) {
    const vs_vision_config *v = vs_mmproj_config(target_mm);
    if (!vs_mmproj_tower(target_mm))
        return vs_error_set(err, VS_ERR_INVALID, "drafter: %s has no vision tower (projector-only file)",
                            vs_mmproj_path(target_mm));
    if (v->use_gelu)
        return vs_error_set(err, VS_ERR_INVALID,
                            "drafter: %s's tower uses GELU; the trainer's ViT is quick-GELU (CLIP)",
                            vs_mmproj_path(target_mm));
    memset(out, 0, sizeof(*out));
    out->image_size = v->image_size, out->patch_size = v->patch_size;
    out->v_width = v->width, out->v_ffn = v->ffn, out->v_heads = v->n_heads, out->v_blocks = v->n_blocks;
    out->v_eps = v->eps, out->v_post_ln = v->post_ln;
    for (int i = 0; i < 3; i++) out->image_mean[i] = v->mean[i], out->image_std[i] = v->std[i];
    out->vocab = vocab;
    out->width = lm->width, out->n_layers = lm->n_layers, out->n_heads = lm->n_heads;
    out->n_kv_heads = lm->n_kv_heads, out->ffn = lm->ffn, out->max_seq = lm->max_seq;
    out->rms_eps = 1e-5f, out->rope_base = 10000.0f;
    return vs_train_vlm_config_check(out, err);
}

vs_status vs_train_vlm_set_vision(vs_train_vlm *m, const vs_mmproj *target_mm, vs_error *err) {
    const vs_train_vlm_config *c = vs_train_vlm_cfg(m);
    const vs_vision_config *v = vs_mmproj_config(target_mm);
    if (!vs_mmproj_tower(target_mm))
        return vs_error_set(err, VS_ERR_INVALID, "%s has no vision tower", vs_mmproj_path(target_mm));
    if (v->image_size != c->image_size || v->patch_size != c->patch_size || v->width != c->v_width ||
        v->ffn != c->v_ffn || v->n_heads != c->v_heads || v->n_blocks != c->v_blocks || v->post_ln != c->v_post_ln)
        return vs_error_set(
            err, VS_ERR_INVALID,
            "%s's tower (%dx%d/%d, width %d, ffn %d, %d heads, %d blocks%s) differs from "
            "the model's (%dx%d/%d, width %d, ffn %d, %d heads, %d blocks%s)",
            vs_mmproj_path(target_mm), v->image_size, v->image_size, v->patch_size, v->width, v->ffn,
            v->n_heads, v->n_blocks, v->post_ln ? ", post-LN" : "", c->image_size, c->image_size, c->patch_size,
            c->v_width, c->v_ffn, c->v_heads, c->v_blocks, c->v_post_ln ? ", post-LN" : "");
    for (int i = 0; i < 3; i++)
        if (v->mean[i] != c->image_mean[i] || v->std[i] != c->image_std[i])
            return vs_error_set(err, VS_ERR_INVALID,
                                "%s normalises images with mean (%g, %g, %g) / std (%g, %g, %g), the model with "
                                "(%g, %g, %g) / (%g, %g, %g)",
                                vs_mmproj_path(target_mm), v->mean[0], v->mean[1], v->mean[2], v->std[0], v->std[1],
                                v->std[2], c->image_mean[0], c->image_mean[1], c->image_mean[2], c->image_std[0],
                                c->image_std[1], c->image_std[2]);
    if (v->eps != c->v_eps)
        return vs_error_set(err, VS_ERR_INVALID, "%s's tower has LayerNorm epsilon %g, the model %g",
                            vs_mmproj_path(target_mm), v->eps, c->v_eps);
    vs_vision_weights vw;
    vs_status s = vs_mmproj_read_weights(target_mm, &vw, err);
    if (s != VS_OK) return s;
    vs_train_vlm_tensors w;
    vs_train_vlm_views(m, &w, NULL);
    const size_t W = (size_t)c->v_width, VF = (size_t)c->v_ffn, NP1 = (size_t)vs_vision_n_patches(v) + 1;
    const size_t PP = 3 * (size_t)c->patch_size * c->patch_size;
#define CPY(dst, src, n) memcpy((dst), (src), (n) * sizeof(float))
    CPY(w.v_patch, vw.patch_w, W * PP);
    CPY(w.v_cls, vw.class_embd, W);
    CPY(w.v_pos, vw.pos_embd, NP1 * W);
    CPY(w.v_pre_ln_w, vw.pre_ln_w, W);
    CPY(w.v_pre_ln_b, vw.pre_ln_b, W);
    if (v->post_ln) CPY(w.v_post_ln_w, vw.post_ln_w, W), CPY(w.v_post_ln_b, vw.post_ln_b, W);
    for (int l = 0; l < c->v_blocks; l++) {
        const vs_vision_block_weights *b = &vw.blocks[l];
        const size_t ow = l * W, oww = l * W * W, ovf = l * VF;
        CPY(w.v_ln1_w + ow, b->ln1_w, W);
        CPY(w.v_ln1_b + ow, b->ln1_b, W);
        CPY(w.v_q_w + oww, b->q_w, W * W);
        CPY(w.v_q_b + ow, b->q_b, W);
        CPY(w.v_k_w + oww, b->k_w, W * W);
        CPY(w.v_k_b + ow, b->k_b, W);
        CPY(w.v_v_w + oww, b->v_w, W * W);
        CPY(w.v_v_b + ow, b->v_b, W);
        CPY(w.v_o_w + oww, b->o_w, W * W);
        CPY(w.v_o_b + ow, b->o_b, W);
        CPY(w.v_ln2_w + ow, b->ln2_w, W);
        CPY(w.v_ln2_b + ow, b->ln2_b, W);
        CPY(w.v_fc1_w + ovf * W, b->fc1_w, VF * W);
        CPY(w.v_fc1_b + ovf, b->fc1_b, VF);
        CPY(w.v_fc2_w + ovf * W, b->fc2_w, W * VF);
        CPY(w.v_fc2_b + ow, b->fc2_b, W);
    }
#undef CPY
    vs_vision_weights_free(&vw, v);
    return VS_OK;
}

vs_status vs_train_vlm_set_vision_file(vs_train_vlm *m, const char *path, vs_error *err) {
    vs_mmproj *mm = vs_mmproj_open(path, err);
    if (!mm) return VS_ERR_INVALID;
    vs_status s = vs_train_vlm_set_vision(m, mm, err);
    vs_mmproj_free(mm);
    return s;
}

vs_status vs_drafter_check_tokenizer(const vs_gguf *target_lm, const vs_gguf *tokenizer, vs_error *err) {
    const int64_t a = vs_gguf_find_key(target_lm, "tokenizer.ggml.tokens");
    const int64_t b = vs_gguf_find_key(tokenizer, "tokenizer.ggml.tokens");
    if (a < 0 || vs_gguf_kv_type(target_lm, a) != VS_GGUF_ARRAY)
        return vs_error_set(err, VS_ERR_INVALID, "drafter: %s has no tokenizer.ggml.tokens",
                            vs_gguf_name(target_lm));
    if (b < 0 || vs_gguf_kv_type(tokenizer, b) != VS_GGUF_ARRAY)
        return vs_error_set(err, VS_ERR_INVALID, "drafter: %s has no tokenizer.ggml.tokens",
                            vs_gguf_name(tokenizer));
    const uint64_t na = vs_gguf_arr_len(target_lm, a), nb = vs_gguf_arr_len(tokenizer, b);
    if (na != nb)
        return vs_error_set(
            err, VS_ERR_INVALID,
            "drafter: vocabulary mismatch: the target %s has %llu tokens, the tokenizer %s %llu "
            "(a drafter must use the target's tokenizer)",
            vs_gguf_name(target_lm), (unsigned long long)na, vs_gguf_name(tokenizer), (unsigned long long)nb);
    for (uint64_t i = 0; i < na; i++) {
        vs_gguf_str x = vs_gguf_arr_str(target_lm, a, i), y = vs_gguf_arr_str(tokenizer, b, i);
        if (x.len != y.len || (x.len && memcmp(x.ptr, y.ptr, x.len)))
            return vs_error_set(
                err, VS_ERR_INVALID,
                "drafter: vocabulary mismatch: token %llu is '%.*s' in the target %s but '%.*s' "
                "in the tokenizer %s",
                (unsigned long long)i, (int)VS_MIN(x.len, 40), x.ptr ? x.ptr : "", vs_gguf_name(target_lm),
                (int)VS_MIN(y.len, 40), y.ptr ? y.ptr : "", vs_gguf_name(tokenizer));
    }
    return VS_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* Selection rule */

int vs_drafter_turns(const vs_world_sample *s) {
    if (s->n_turns < 1 || s->turns[0].n_images > 1) return 0;
    if (s->n_turns >= 2 && s->turns[1].n_images == 0) return 2;
    return 1;
}

int vs_drafter_turn_images(const vs_world_sample *s, int n_turns) {
    int n = 0;
    for (int t = 0; t < n_turns && t < s->n_turns; t++) n += s->turns[t].n_images;
    return n;
}

/* ---------------------------------------------------------------------------------------------- */
/* Sequence sets */

void vs_train_seqs_free(vs_train_seqs *q) {
    if (!q) return;
    for (int64_t i = 0; i < q->n; i++) {
        vs_train_example_free(&q->ex[i]);
        if (q->own && q->own[i]) {
            /* copies own only the answers they replaced (see copy_with_answers) */
            for (int t = 0; t < q->own[i]->n_turns; t++) vs_free(q->own[i]->turns[t].assistant);
            vs_free(q->own[i]);
        }
    }
    vs_free(q->ex), vs_free(q->items), vs_free(q->own);
    memset(q, 0, sizeof(*q));
}

const vs_train_item *vs_train_seqs_items(vs_train_seqs *q) {
    for (int64_t i = 0; i < q->n; i++) q->items[i].ex = &q->ex[i];
    return q->items;
}

static vs_status grow(vs_train_seqs *q, vs_error *err) {
    if (q->n < q->cap) return VS_OK;
    int64_t nc = q->cap ? q->cap * 2 : 1024;
    vs_train_example *ex = vs_realloc(q->ex, sizeof(*ex) * (size_t)nc);
    if (ex) q->ex = ex;
    vs_train_item *it = vs_realloc(q->items, sizeof(*it) * (size_t)nc);
    if (it) q->items = it;
    vs_world_sample **own = vs_realloc(q->own, sizeof(*own) * (size_t)nc);
    if (own) q->own = own;
    if (!ex || !it || !own) return vs_error_set(err, VS_ERR_NOMEM, "drafter data: out of memory");
    q->cap = nc;
    return VS_OK;
}

/* Takes ownership of *ex (and of own, a sample copy, may be NULL). */
static vs_status push(vs_train_seqs *q, vs_train_example *ex, const vs_world_sample *img, int suite,
                      vs_world_sample *own, vs_error *err) {
    vs_status s = grow(q, err);
    if (s != VS_OK) return s;
    q->ex[q->n] = *ex;
    q->items[q->n] = (vs_train_item){NULL, img, suite};
    q->own[q->n] = own;
    q->n++;
    memset(ex, 0, sizeof(*ex));
    return VS_OK;
}

static vs_status add_doc(vs_train_seqs *q, const char *text, int suite, const vs_tokenizer *tok,
                         vs_error *err) {
    vs_train_example ex;
    vs_status s = vs_train_encode_text(text, tok, &ex, err);
    if (s == VS_OK) s = push(q, &ex, NULL, suite, NULL, err);
    vs_train_example_free(&ex);
    return s;
}

vs_status vs_train_seqs_add_text(vs_train_seqs *q, const vs_world_dataset *train,
                                 const vs_world_dataset *captions, const vs_tokenizer *tok, vs_error *err) {
    vs_status s = VS_OK;
    for (int64_t i = 0; s == VS_OK && train && i < train->n; i++) {
        const vs_world_sample *x = &train->samples[i];
        if (x->suite == VS_WORLD_TEXT) {
            /* the text suite as conversations (what a drafter is prompted with), still no images */
            vs_train_example ex;
            s = vs_train_encode(x, tok, 1, &ex, err);
            if (s == VS_OK && ex.n_images != 0)
                s = vs_error_set(err, VS_ERR_INVALID, "drafter data: text sample %s has images", x->id);
            if (s == VS_OK) s = push(q, &ex, NULL, VS_WORLD_TEXT, NULL, err);
            vs_train_example_free(&ex);
            continue;
        }
        for (int t = 0; s == VS_OK && t < x->n_turns; t++)
            s = add_doc(q, x->turns[t].assistant, x->suite, tok, err);
    }
    for (int64_t i = 0; s == VS_OK && captions && i < captions->n; i++) {
        const vs_world_sample *x = &captions->samples[i];
        for (int t = 0; s == VS_OK && t < x->n_turns; t++)
            s = add_doc(q, x->turns[t].assistant, VS_WORLD_CAPTION, tok, err);
    }
    return s;
}

/* A shallow copy of s limited to its first n_turns turns; with answers != NULL, turn t's assistant text
 * is replaced by a copy of answers[t] (owned by the copy: freed by vs_train_seqs_free). */
static vs_world_sample *copy_with_answers(const vs_world_sample *s, int n_turns, const char *const *answers) {
    vs_world_sample *c = vs_malloc(sizeof(*c));
    if (!c) return NULL;
    *c = *s;
    c->n_turns = n_turns;
    c->n_images = vs_drafter_turn_images(s, n_turns);
    for (int t = 0; t < n_turns; t++) {
        const char *a = answers ? answers[t] : s->turns[t].assistant;
        size_t n = strlen(a);
        c->turns[t].assistant = vs_malloc(n + 1);
        if (!c->turns[t].assistant) {
            for (int k = 0; k < t; k++) vs_free(c->turns[k].assistant);
            vs_free(c);
            return NULL;
        }
        memcpy(c->turns[t].assistant, a, n + 1);
    }
    return c;
}

vs_status vs_train_seqs_add_instruct(vs_train_seqs *q, const vs_world_dataset *train, const vs_tokenizer *tok,
                                     int image_rows, vs_error *err) {
    vs_status s = VS_OK;
    for (int64_t i = 0; s == VS_OK && i < train->n; i++) {
        const vs_world_sample *x = &train->samples[i];
        const int k = vs_drafter_turns(x);
        if (k == 0) {
            q->dropped[x->suite]++;
            continue;
        }
        vs_world_sample *own = NULL;
        if (k < x->n_turns) {
            q->cut_turns[x->suite]++;
            if (!(own = copy_with_answers(x, k, NULL)))
                return vs_error_set(err, VS_ERR_NOMEM, "out of memory");
        }
        const vs_world_sample *use = own ? own : x;
        vs_train_example ex;
        s = vs_train_encode(use, tok, image_rows, &ex, err);
        if (s == VS_OK)
            s = push(q, &ex, use, x->suite, own, err);
        else if (own) {
            for (int t = 0; t < own->n_turns; t++) vs_free(own->turns[t].assistant);
            vs_free(own);
        }
        vs_train_example_free(&ex);
    }
    return s;
}

/* The model answer as the history of a prompt holds it (eval.h's rule): one leading space removed,
 * "<image>" text dropped. vs_malloc'd. */
static char *clean_answer(const char *a) {
    if (a[0] == ' ') a++;
    size_t n = strlen(a);
    char *c = vs_malloc(n + 1);
    if (!c) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        if (!strncmp(a + i, "<image>", 7)) {
            i += 7;
            continue;
        }
        c[k++] = a[i++];
    }
    c[k] = 0;
    return c;
}

vs_status vs_train_seqs_add_distill(vs_train_seqs *q, const vs_world_dataset *train, const vs_distill_file *f,
                                    const vs_tokenizer *tok, int image_rows, vs_error *err) {
    /* ids -> samples: the records come in file order, so a moving cursor finds them */
    int64_t cur = 0;
    vs_status s = VS_OK;
    for (int64_t i = 0; s == VS_OK && i < f->n; i++) {
        const vs_distill_record *r = &f->r[i];
        int64_t j = cur, tries = 0;
        while (tries < train->n && strcmp(train->samples[j].id, r->id)) j = (j + 1) % train->n, tries++;
        if (tries == train->n)
            return vs_error_set(err, VS_ERR_INVALID,
                                "drafter data: distilled record %lld names %s, not in %s/%s",
                                (long long)i + 1, r->id, train->dir, train->split);
        cur = j;
        const vs_world_sample *x = &train->samples[j];
        const int k = vs_drafter_turns(x);
        if (r->n_turns != k)
            return vs_error_set(err, VS_ERR_INVALID,
                                "drafter data: distilled record %lld (%s) has %d turns; the sample keeps %d",
                                (long long)i + 1, r->id, r->n_turns, k);
        bool cut = false;
        for (int t = 0; t < k; t++) cut |= !r->turns[t].eos;
        if (cut) {
            q->skipped_answers++;
            continue;
        }
        char *ans[VS_WORLD_MAX_TURNS] = {NULL, NULL};
        bool oom = false;
        for (int t = 0; t < k; t++) oom |= !(ans[t] = clean_answer(r->turns[t].answer));
        vs_world_sample *own = oom ? NULL : copy_with_answers(x, k, (const char *const *)ans);
        for (int t = 0; t < k; t++) vs_free(ans[t]);
        if (!own) return vs_error_set(err, VS_ERR_NOMEM, "out of memory");
        vs_train_example ex;
        vs_error e2 = {0};
        if (vs_train_encode(own, tok, image_rows, &ex, &e2) != VS_OK) {
            /* an answer whose text does not lay out as a prefix (e.g. it spells a special token) */
            q->failed++;
            for (int t = 0; t < own->n_turns; t++) vs_free(own->turns[t].assistant);
            vs_free(own);
            continue;
        }
        s = push(q, &ex, own, x->suite, own, err);
        vs_train_example_free(&ex);
    }
    return s;
}
