/* train_grow: a trained VLM's function copied into one of twice its LM width and depth
 * (train_model.h, vs_train_vlm_grow; docs/target.md, `train target --grow`).
 *
 * Width: every residual feature, head, KV head and SwiGLU unit is duplicated, so the grown model's rows
 * are [x; x] wherever the small one's are x. RMSNorm of [x; x] equals that of x, so a norm's gain is
 * duplicated; a matrix that reads a duplicated vector takes half its weights on each copy, so
 * W' = [[W/2, W/2], [W/2, W/2]] for a (out, in) matrix with both sides doubled. Heads keep their size:
 * query head h + H copies head h and uses KV head (h + H) / (2H / 2KV) = KV head g + KVH, the copy of
 * the head that h used, so attention is unchanged. The token embeddings are duplicated unhalved (they
 * are the residual rows), the output head reads halves, the projector's hidden and output rows are
 * duplicated.
 * Depth: grown block i of the small model becomes block 2i; block 2i + 1 is new, with the caller's
 * initialisation except its output matrices (wo, w_down), which are zero: it adds nothing at first.
 * Noise of standard deviation `noise` on the grown matrices breaks the symmetry of the copies (with
 * none they would stay copies under every update). The vision tower is copied as it is. */
#include <string.h>

#include "train_model.h"

/* dst (ro*O, ri*I) = src (O, I) tiled ro x ri times, times scale, plus noise. */
static void tile(float *dst, const float *src, int64_t O, int64_t I, int ro, int ri, float scale, float noise,
                 vs_rng *rng) {
    const int64_t I2 = I * ri;
    for (int64_t r = 0; r < O * ro; r++)
        for (int64_t c = 0; c < I2; c++) {
            float v = src[(r % O) * I + c % I] * scale;
            dst[r * I2 + c] = noise > 0 ? v + noise * vs_rng_normal(rng) : v;
        }
}

vs_status vs_train_vlm_grow(vs_train_vlm *big, vs_train_vlm *small, float noise, uint64_t seed,
                            const char *small_name, vs_error *err) {
    const vs_train_vlm_config *b = vs_train_vlm_cfg(big), *s = vs_train_vlm_cfg(small);
    const char *name = small_name ? small_name : "the smaller model";
    /* the smaller model the grown one expects: half the LM, everything else the same */
    vs_train_vlm_config want = *b;
    want.width = b->width / 2, want.n_layers = b->n_layers / 2, want.n_heads = b->n_heads / 2;
    want.n_kv_heads = b->n_kv_heads / 2, want.ffn = b->ffn / 2, want.max_seq = s->max_seq;
    if (b->width % 2 || b->n_layers % 2 || b->n_heads % 2 || b->n_kv_heads % 2 || b->ffn % 2)
        return vs_error_set(err, VS_ERR_INVALID,
                            "growing doubles the LM: width %d, %d layers, %d/%d heads and SwiGLU %d are not all even",
                            b->width, b->n_layers, b->n_heads, b->n_kv_heads, b->ffn);
    if (vs_train_vlm_config_match(&want, "growing into this model needs", s, name, err))
        return vs_error_wrap(err, "grow (the LM doubles its width, layers, heads, KV heads and SwiGLU width)");
    if (noise < 0) return vs_error_set(err, VS_ERR_INVALID, "grow: noise %g < 0", (double)noise);

    vs_train_vlm_tensors B, S, unused;
    vs_train_vlm_views(big, &B, &unused);
    vs_train_vlm_views(small, &S, &unused);
    vs_rng rng;
    vs_rng_seed(&rng, seed);
    const int64_t C = s->width, V = s->vocab, F = s->ffn, D = s->width / s->n_heads;
    const int64_t HD = (int64_t)s->n_heads * D, KD = (int64_t)s->n_kv_heads * D, W = s->v_width;
    const int64_t C2 = 2 * C, F2 = 2 * F, HD2 = 2 * HD, KD2 = 2 * KD;

    /* the vision tower: the same shape (checked above), copied */
    const vs_train_params *pb = vs_train_vlm_params(big), *ps = vs_train_vlm_params(small);
    for (int i = 0; i < pb->n_tensors; i++)
        if (pb->tensors[i].group == VS_TRAIN_GROUP_VISION)
            memcpy(pb->data + pb->tensors[i].offset, ps->data + ps->tensors[i].offset,
                   sizeof(float) * pb->tensors[i].numel);
    /* projector: hidden and output rows duplicated */
    tile(B.mm0_w, S.mm0_w, C, W, 2, 1, 1.0f, noise, &rng);
    tile(B.mm0_b, S.mm0_b, 1, C, 1, 2, 1.0f, 0, &rng);
    tile(B.mm2_w, S.mm2_w, C, C, 2, 2, 0.5f, noise, &rng);
    tile(B.mm2_b, S.mm2_b, 1, C, 1, 2, 1.0f, 0, &rng);
    /* the LM's ends */
    tile(B.wte, S.wte, V, C, 1, 2, 1.0f, noise, &rng);
    tile(B.out_norm, S.out_norm, 1, C, 1, 2, 1.0f, 0, &rng);
    tile(B.lm_head, S.lm_head, V, C, 1, 2, 0.5f, noise, &rng);
    for (int l = 0; l < s->n_layers; l++) {
        const int64_t g = 2 * l, n = 2 * l + 1;
        tile(B.attn_norm + g * C2, S.attn_norm + l * C, 1, C, 1, 2, 1.0f, 0, &rng);
        tile(B.ffn_norm + g * C2, S.ffn_norm + l * C, 1, C, 1, 2, 1.0f, 0, &rng);
        tile(B.wq + g * HD2 * C2, S.wq + l * HD * C, HD, C, 2, 2, 0.5f, noise, &rng);
        tile(B.wk + g * KD2 * C2, S.wk + l * KD * C, KD, C, 2, 2, 0.5f, noise, &rng);
        tile(B.wv + g * KD2 * C2, S.wv + l * KD * C, KD, C, 2, 2, 0.5f, noise, &rng);
        tile(B.wo + g * C2 * HD2, S.wo + l * C * HD, C, HD, 2, 2, 0.5f, noise, &rng);
        tile(B.w_gate + g * F2 * C2, S.w_gate + l * F * C, F, C, 2, 2, 0.5f, noise, &rng);
        tile(B.w_up + g * F2 * C2, S.w_up + l * F * C, F, C, 2, 2, 0.5f, noise, &rng);
        tile(B.w_down + g * C2 * F2, S.w_down + l * C * F, C, F, 2, 2, 0.5f, noise, &rng);
        /* the new block after it: an identity until its output matrices learn */
        memset(B.wo + n * C2 * HD2, 0, sizeof(float) * (size_t)(C2 * HD2));
        memset(B.w_down + n * C2 * F2, 0, sizeof(float) * (size_t)(C2 * F2));
    }
    return VS_OK;
}
