/* train_export: writes a trained vs_train_vlm in llama.cpp's LLaVA layout (docs/formats.md): the LM as a
 * "llama" GGUF written here, the tower + projector as a "clip" mmproj GGUF through vision.h's writer
 * (which owns the mmproj naming, including the legacy ffn_down = first MLP matrix). */
#include <stdio.h>
#include <string.h>

#include "gguf.h"
#include "quant.h"
#include "train_model_internal.h"
#include "vision.h"

/* Adds a (rows, cols) row-major matrix as ne = [cols, rows] of `type` (F32 or F16), or a vector. */
static vs_status add_tensor(vs_gguf_writer *w, const char *name, int type, const float *x, int64_t rows,
                            int64_t cols, vs_error *err) {
    int64_t ne[2] = {cols, rows};
    int nd = rows > 0 ? 2 : 1;
    if (nd == 1) ne[0] = cols;
    if (type == VS_TYPE_F32 || nd == 1) return vs_gguf_add_tensor(w, name, VS_TYPE_F32, nd, ne, x, err);
    size_t n = (size_t)rows * cols;
    uint16_t *h = vs_malloc(n * sizeof(uint16_t));
    if (!h) return vs_error_set(err, VS_ERR_NOMEM, "export: out of memory for %s", name);
    vs_quantize_row(VS_TYPE_F16, x, h, (int64_t)n);
    vs_status s = vs_gguf_add_tensor(w, name, VS_TYPE_F16, 2, ne, h, err);
    vs_free(h);
    return s;
}

static vs_status export_lm(const vs_train_vlm *m, const char *path, const vs_train_export_opts *o,
                           vs_error *err) {
    const vs_train_vlm_config *c = &m->cfg;
    const vs_train_vlm_tensors *w = &m->w;
    int64_t C = c->width, HD = m->HD, KVD = m->KVD, F = c->ffn, V = c->vocab;
    vs_gguf_writer *gw = vs_gguf_writer_new();
    if (!gw) return vs_error_set(err, VS_ERR_NOMEM, "export %s: out of memory", path);
    vs_gguf_set_str(gw, "general.architecture", "llama");
    vs_gguf_set_str(gw, "general.name", o->name ? o->name : "vlmspec-trained");
    vs_gguf_set_u32(gw, "general.file_type", o->type == VS_TYPE_F16 ? 1 : 0);
    vs_gguf_set_u32(gw, "llama.context_length", (uint32_t)c->max_seq);
    vs_gguf_set_u32(gw, "llama.embedding_length", (uint32_t)C);
    vs_gguf_set_u32(gw, "llama.block_count", (uint32_t)c->n_layers);
    vs_gguf_set_u32(gw, "llama.feed_forward_length", (uint32_t)F);
    vs_gguf_set_u32(gw, "llama.attention.head_count", (uint32_t)c->n_heads);
    vs_gguf_set_u32(gw, "llama.attention.head_count_kv", (uint32_t)c->n_kv_heads);
    vs_gguf_set_f32(gw, "llama.attention.layer_norm_rms_epsilon", c->rms_eps);
    vs_gguf_set_f32(gw, "llama.rope.freq_base", c->rope_base);
    vs_gguf_set_u32(gw, "llama.rope.dimension_count", (uint32_t)m->D);
    vs_gguf_set_u32(gw, "llama.vocab_size", (uint32_t)V);
    vs_status s = VS_OK;
    if (o->tokenizer) {
        int64_t ki = vs_gguf_find_key(o->tokenizer, "tokenizer.ggml.tokens");
        if (ki < 0 || vs_gguf_kv_type(o->tokenizer, ki) != VS_GGUF_ARRAY ||
            vs_gguf_arr_len(o->tokenizer, ki) != (uint64_t)V)
            s = vs_error_set(err, VS_ERR_INVALID, "export %s: tokenizer %s does not have %lld tokens", path,
                             vs_gguf_name(o->tokenizer), (long long)V);
        else s = vs_gguf_copy_kv(gw, o->tokenizer, "tokenizer.", err);
    }
    int t = o->type;
    if (!s) s = add_tensor(gw, "token_embd.weight", t, w->wte, V, C, err);
    for (int l = 0; l < c->n_layers && !s; l++) {
        char nm[64];
#define ADD(suffix, x, rows, cols)                                                 \
    if (!s) {                                                                      \
        snprintf(nm, sizeof(nm), "blk.%d.%s.weight", l, suffix);                    \
        s = add_tensor(gw, nm, t, x, rows, cols, err);                              \
    }
        ADD("attn_norm", w->attn_norm + l * C, 0, C);
        ADD("attn_q", w->wq + l * HD * C, HD, C);
        ADD("attn_k", w->wk + l * KVD * C, KVD, C);
        ADD("attn_v", w->wv + l * KVD * C, KVD, C);
        ADD("attn_output", w->wo + l * C * HD, C, HD);
        ADD("ffn_norm", w->ffn_norm + l * C, 0, C);
        ADD("ffn_gate", w->w_gate + l * F * C, F, C);
        ADD("ffn_up", w->w_up + l * F * C, F, C);
        ADD("ffn_down", w->w_down + l * C * F, C, F);
#undef ADD
    }
    if (!s) s = add_tensor(gw, "output_norm.weight", t, w->out_norm, 0, C, err);
    if (!s) s = add_tensor(gw, "output.weight", t, w->lm_head, V, C, err);
    if (!s) s = vs_gguf_write(gw, path, err);
    vs_gguf_writer_free(gw);
    return s;
}

static vs_status export_mmproj(const vs_train_vlm *m, const char *path, const vs_train_export_opts *o,
                               vs_error *err) {
    const vs_train_vlm_config *c = &m->cfg;
    const vs_train_vlm_tensors *w = &m->w;
    vs_vision_config vc;
    memset(&vc, 0, sizeof(vc));
    vc.image_size = c->image_size;
    vc.patch_size = c->patch_size;
    vc.width = c->v_width;
    vc.ffn = c->v_ffn;
    vc.n_heads = c->v_heads;
    vc.n_blocks = c->v_blocks;
    vc.projection_dim = c->width;
    vc.proj_hidden = c->width;
    vc.proj_out = c->width;
    vc.eps = c->v_eps;
    memcpy(vc.mean, c->image_mean, sizeof(vc.mean));
    memcpy(vc.std, c->image_std, sizeof(vc.std));
    vc.use_gelu = false; /* quick-GELU inside the tower */
    vc.has_tower = true;
    vc.post_ln = c->v_post_ln;
    size_t W = c->v_width, VF = c->v_ffn;
    vs_vision_block_weights *blk = vs_calloc((size_t)VS_MAX(c->v_blocks, 1), sizeof(*blk));
    if (!blk) return vs_error_set(err, VS_ERR_NOMEM, "export %s: out of memory", path);
    for (int l = 0; l < c->v_blocks; l++) {
        vs_vision_block_weights *b = &blk[l];
        size_t ow = l * W, oww = l * W * W, ovf = l * VF;
        b->ln1_w = w->v_ln1_w + ow, b->ln1_b = w->v_ln1_b + ow;
        b->q_w = w->v_q_w + oww, b->q_b = w->v_q_b + ow;
        b->k_w = w->v_k_w + oww, b->k_b = w->v_k_b + ow;
        b->v_w = w->v_v_w + oww, b->v_b = w->v_v_b + ow;
        b->o_w = w->v_o_w + oww, b->o_b = w->v_o_b + ow;
        b->ln2_w = w->v_ln2_w + ow, b->ln2_b = w->v_ln2_b + ow;
        b->fc1_w = w->v_fc1_w + ovf * W, b->fc1_b = w->v_fc1_b + ovf;
        b->fc2_w = w->v_fc2_w + ovf * W, b->fc2_b = w->v_fc2_b + ow;
    }
    vs_vision_weights vw = {
        .class_embd = w->v_cls, .patch_w = w->v_patch, .pos_embd = w->v_pos, .pre_ln_w = w->v_pre_ln_w,
        .pre_ln_b = w->v_pre_ln_b, .blocks = blk, .mm0_w = w->mm0_w, .mm0_b = w->mm0_b, .mm2_w = w->mm2_w,
        .mm2_b = w->mm2_b, .post_ln_w = c->v_post_ln ? w->v_post_ln_w : NULL,
        .post_ln_b = c->v_post_ln ? w->v_post_ln_b : NULL,
    };
    vs_mmproj_write_opts wo = {.mat_type = (vs_type)o->type, .name = o->name};
    vs_status s = vs_mmproj_write(path, &vc, &vw, &wo, err);
    vs_free(blk);
    return s;
}

vs_status vs_train_vlm_export(const vs_train_vlm *m, const char *lm_path, const char *mmproj_path,
                              const vs_train_export_opts *o, vs_error *err) {
    if (o->type != VS_TYPE_F32 && o->type != VS_TYPE_F16)
        return vs_error_set(err, VS_ERR_UNSUPPORTED, "export: type %s (F32 or F16 only)",
                            vs_type_name(o->type));
    vs_status s = lm_path ? export_lm(m, lm_path, o, err) : VS_OK;
    if (!s && mmproj_path) s = export_mmproj(m, mmproj_path, o, err);
    return s;
}
