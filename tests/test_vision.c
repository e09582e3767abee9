/* test_vision: the vision tower + projector against the independent PyTorch reference
 * (tests/reference/vision_ref.py -> tests/reference/fixtures/vision/ *.vsfx), LLaVA preprocessing
 * against Pillow, the mmproj writer/reader round trip, legacy/standard MLP naming, malformed files,
 * tower sharing between files (projector-only mmproj, identity checks), importance selection,
 * threads, and the embed-image CLI.
 *
 * Tolerances (docs/vision.md): pixels within 1/255 before normalisation (one 8-bit step); tensors
 * compared element-wise as |c - r| <= tol * (|r| + rms(r)) with tol 1e-4 for F32 weights and 1e-2 for
 * F16 weights.
 *
 * `test_vision --write-fixture-models DIR` writes the tiny random mmproj files the reference reads. */
#include <string.h>
#include <sys/stat.h>

#include "gguf.h"
#include "mmprompt.h"
#include "testutil.h"
#include "threadpool.h"
#include "vision.h"

#define FIX "tests/reference/fixtures/vision/"

/* ---------------------------------------------------------------------------------------------- */
/* VSFX fixture reader (layout in vision_ref.py) */

typedef struct fx_arr {
    char name[96];
    int ndim;
    int64_t dims[4];
    int64_t n;
    const float *data;
} fx_arr;

typedef struct fx {
    uint8_t *buf;
    size_t size;
    fx_arr a[256];
    int n;
    float *copies[256]; /* aligned copies of arrays whose data was not 4-byte aligned */
    int n_copies;
} fx;

static void fx_free(fx *f) {
    for (int i = 0; i < f->n_copies; i++)
        vs_free(f->copies[i]);
    vs_free(f->buf);
    memset(f, 0, sizeof(*f));
}

static uint32_t rd32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static void fx_load(fx *f, const char *path) {
    vs_error err = {0};
    memset(f, 0, sizeof(*f));
    VT_REQUIRE(vs_read_file(path, &f->buf, &f->size, &err) == VS_OK, "%s (regenerate with vision_ref.py)",
               err.msg);
    VT_REQUIRE(f->size >= 12 && !memcmp(f->buf, "VSFX", 4) && rd32(f->buf + 4) == 1, "%s: bad header", path);
    uint32_t count = rd32(f->buf + 8);
    VT_REQUIRE(count <= 256, "%s: too many arrays", path);
    size_t pos = 12;
    for (uint32_t i = 0; i < count; i++) {
        fx_arr *a = &f->a[f->n++];
        VT_REQUIRE(pos + 4 <= f->size, "%s: truncated", path);
        uint32_t nl = rd32(f->buf + pos);
        pos += 4;
        VT_REQUIRE(nl < sizeof(a->name) && pos + nl + 4 <= f->size, "%s: bad name", path);
        memcpy(a->name, f->buf + pos, nl);
        pos += nl;
        a->ndim = (int)rd32(f->buf + pos);
        pos += 4;
        VT_REQUIRE(a->ndim >= 0 && a->ndim <= 4 && pos + 4 * (size_t)a->ndim <= f->size, "%s: bad dims",
                   path);
        a->n = 1;
        for (int d = 0; d < a->ndim; d++)
            a->dims[d] = rd32(f->buf + pos + 4 * d), a->n *= a->dims[d];
        pos += 4 * (size_t)a->ndim;
        VT_REQUIRE(pos + 4 * (size_t)a->n <= f->size, "%s: %s: data past the end", path, a->name);
        a->data = (const float *)(f->buf + pos); /* 4-byte aligned: every field is a multiple of 4 ... */
        if (((uintptr_t)a->data & 3) != 0) {     /* ... except names: copy when unaligned */
            float *c = vs_malloc((size_t)a->n * sizeof(float));
            memcpy(c, f->buf + pos, (size_t)a->n * sizeof(float));
            a->data = c;
            f->copies[f->n_copies++] = c;
        }
        pos += 4 * (size_t)a->n;
    }
}

static const fx_arr *fx_get(const fx *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->a[i].name, name)) return &f->a[i];
    VT_REQUIRE(0, "fixture array %s missing", name);
    return NULL;
}

/* ---------------------------------------------------------------------------------------------- */
/* Tiny configurations (the fixture models) */

static void cfg_tiny(vs_vision_config *c) {
    vs_vision_config_llava15(c); /* CLIP mean / std */
    c->image_size = 35;
    c->patch_size = 7;
    c->width = 24;
    c->ffn = 56;
    c->n_heads = 3;
    c->n_blocks = 2;
    c->projection_dim = 0;
    c->proj_hidden = 40;
    c->proj_out = 32;
    c->use_gelu = false;
}

static void cfg_tiny_gelu(vs_vision_config *c) {
    vs_vision_config_llava15(c);
    c->image_size = 35;
    c->patch_size = 5;
    c->width = 16;
    c->ffn = 48;
    c->n_heads = 2;
    c->n_blocks = 3;
    c->projection_dim = 0;
    c->proj_hidden = 24;
    c->proj_out = 20;
    c->use_gelu = true;
}

static int write_fixture_models(const char *dir) {
    vs_error err = {0};
    char p[1024];
    vs_vision_config c;
    cfg_tiny(&c);
    snprintf(p, sizeof(p), "%s/tiny_f32.gguf", dir);
    VT_REQUIRE(vs_mmproj_write_random(p, &c, VS_TYPE_F32, 1234, &err) == VS_OK, "%s", err.msg);
    snprintf(p, sizeof(p), "%s/tiny_f16.gguf", dir);
    VT_REQUIRE(vs_mmproj_write_random(p, &c, VS_TYPE_F16, 1234, &err) == VS_OK, "%s", err.msg);
    cfg_tiny_gelu(&c);
    snprintf(p, sizeof(p), "%s/tiny_gelu_f32.gguf", dir);
    VT_REQUIRE(vs_mmproj_write_random(p, &c, VS_TYPE_F32, 99, &err) == VS_OK, "%s", err.msg);
    printf("wrote tiny_f32.gguf, tiny_f16.gguf, tiny_gelu_f32.gguf to %s\n", dir);
    return 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* Comparison */

/* max_i |c_i - r_i| / (|r_i| + rms(r)) */
static double rel_err(const float *c, const float *r, int64_t n) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++)
        ss += (double)r[i] * r[i];
    const double rms = sqrt(ss / (double)(n ? n : 1));
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)c[i] - r[i]) / (fabs(r[i]) + rms + 1e-30);
        if (!(e <= worst)) worst = e; /* NaN propagates */
    }
    return worst;
}

static void check_close(const char *what, const float *c, const fx_arr *r, int64_t n, double tol,
                        double *worst) {
    VT_REQUIRE(r->n == n, "%s: fixture has %lld values, computed %lld", what, (long long)r->n, (long long)n);
    double e = rel_err(c, r->data, n);
    VT_CHECK(e <= tol, "%s: relative error %.3g > %.1g", what, e, tol);
    if (worst && !(e <= *worst)) *worst = e;
}

/* ---------------------------------------------------------------------------------------------- */
/* Trace capture */

typedef struct capture {
    float *stage[40]; /* stage + 2 */
    int64_t n_tok, width;
} capture;

static void capture_fn(void *ctx, int stage, const float *x, int64_t n_tokens, int64_t width) {
    capture *c = ctx;
    VT_REQUIRE(stage + 2 >= 0 && stage + 2 < 40, "stage %d", stage);
    c->n_tok = n_tokens;
    c->width = width;
    float *d = vs_malloc((size_t)(n_tokens * width) * sizeof(float));
    memcpy(d, x, (size_t)(n_tokens * width) * sizeof(float));
    vs_free(c->stage[stage + 2]);
    c->stage[stage + 2] = d;
}

static void capture_free(capture *c) {
    for (int i = 0; i < 40; i++)
        vs_free(c->stage[i]);
    memset(c, 0, sizeof(*c));
}

/* ---------------------------------------------------------------------------------------------- */
/* Numerics against the reference */

static const char *IMAGES[2] = {"img_a.png", "img_b.jpg"};

static void test_pixels(const fx *pix) {
    vs_error err = {0};
    vs_vision_config c;
    cfg_tiny(&c);
    vs_preproc p;
    vs_vision_preproc(&c, VS_PREPROC_LLAVA, &p);
    for (int i = 0; i < 2; i++) {
        char path[256], key[128];
        snprintf(path, sizeof(path), FIX "%s", IMAGES[i]);
        vs_image img, sq;
        VT_REQUIRE(vs_image_load(&img, path, &err) == VS_OK, "%s", err.msg);
        VT_REQUIRE(vs_image_to_square(&img, &p, &sq, &err) == VS_OK, "%s", err.msg);
        snprintf(key, sizeof(key), "%s.u8", IMAGES[i]);
        const fx_arr *u8 = fx_get(pix, key);
        const int64_t n = (int64_t)c.image_size * c.image_size * 3;
        VT_REQUIRE(u8->n == n && sq.w == c.image_size && sq.h == c.image_size, "%s: size", key);
        int worst = 0, n_diff = 0;
        for (int64_t j = 0; j < n; j++) {
            int d = abs((int)sq.rgb[j] - (int)lrintf(u8->data[j]));
            worst = VS_MAX(worst, d);
            n_diff += d != 0;
        }
        VT_CHECK(worst <= 1, "%s: resized square image differs from Pillow by %d/255", IMAGES[i], worst);
        printf("  %s: square image vs Pillow: max |diff| %d/255, %d of %lld values differ\n", IMAGES[i],
               worst, n_diff, (long long)n);
        float *px = vs_malloc((size_t)n * sizeof(float));
        VT_REQUIRE(vs_image_preprocess(&img, &p, px, &err) == VS_OK, "%s", err.msg);
        snprintf(key, sizeof(key), "%s.pixels", IMAGES[i]);
        const fx_arr *ref = fx_get(pix, key);
        VT_REQUIRE(ref->n == n, "%s: size", key);
        double wp = 0;
        const int64_t plane = (int64_t)c.image_size * c.image_size;
        for (int64_t j = 0; j < n; j++)
            wp = fmax(wp, fabs(px[j] - ref->data[j]) * c.std[j / plane]); /* in [0, 1] units */
        VT_CHECK(wp <= 1.0 / 255 + 1e-6, "%s: normalised pixels differ by %.3g (> 1/255) in [0,1] units",
                 IMAGES[i], wp);
        vs_free(px);
        vs_image_free(&sq);
        vs_image_free(&img);
    }
}

static void test_model(const char *model, const fx *pix, double tol, vs_threadpool *tp) {
    vs_error err = {0};
    char path[256], refp[256], key[128];
    snprintf(path, sizeof(path), FIX "%s.gguf", model);
    snprintf(refp, sizeof(refp), FIX "ref_%s.vsfx", model);
    fx ref;
    fx_load(&ref, refp);
    vs_mmproj *m = vs_mmproj_open(path, &err);
    VT_REQUIRE(m, "%s", err.msg);
    const vs_vision_tower *t = vs_mmproj_tower(m);
    const vs_vision_projector *pj = vs_mmproj_projector(m);
    const vs_vision_config *c = vs_mmproj_config(m);
    VT_REQUIRE(t && pj, "tower and projector");
    const int64_t G = vs_vision_grid(c), n_tok = G * G + 1, D = c->width;
    double worst = 0;
    for (int i = 0; i < 2; i++) {
        snprintf(key, sizeof(key), "%s.pixels", IMAGES[i]);
        const fx_arr *px = fx_get(pix, key);
        capture cap = {0};
        vs_vision_encode_opts o = {.importance = true, .trace = capture_fn, .trace_ctx = &cap};
        vs_vision_features f;
        VT_REQUIRE(vs_vision_encode(t, tp, px->data, &o, &f, &err) == VS_OK, "%s", err.msg);
        VT_CHECK(f.grid_h == G && f.grid_w == G && f.width == D, "feature shape");
        VT_CHECK(cap.n_tok == n_tok && cap.width == D, "trace shape");
        char what[160];
#define CMP(suffix, data, count)                                                                             \
    do {                                                                                                     \
        snprintf(key, sizeof(key), "%s.%s", IMAGES[i], suffix);                                              \
        snprintf(what, sizeof(what), "%s %s", model, key);                                                   \
        check_close(what, (data), fx_get(&ref, key), (count), tol, &worst);                                  \
    } while (0)
        CMP("embed", cap.stage[0], n_tok * D);
        CMP("pre_ln", cap.stage[1], n_tok * D);
        for (int b = 0; b < c->n_blocks; b++) {
            char s[32];
            snprintf(s, sizeof(s), "block.%d", b);
            CMP(s, cap.stage[b + 2], n_tok * D);
        }
        CMP("features", f.data, G * G * D);
        CMP("importance", f.importance, G * G);
        float *rows;
        int64_t n_rows;
        VT_REQUIRE(vs_vision_embed(pj, tp, &f, 1, &rows, &n_rows, &err) == VS_OK, "%s", err.msg);
        VT_CHECK(n_rows == G * G, "rows");
        CMP("proj", rows, n_rows * c->proj_out);
        vs_free(rows);
        VT_REQUIRE(vs_vision_embed(pj, tp, &f, 2, &rows, &n_rows, &err) == VS_OK, "%s", err.msg);
        const int64_t g2 = vs_pool_out_side((int32_t)G, 2);
        VT_CHECK(n_rows == g2 * g2, "pooled rows %lld", (long long)n_rows);
        CMP("pool2.proj", rows, n_rows * c->proj_out);
        vs_free(rows);
#undef CMP
        vs_vision_features_free(&f);
        capture_free(&cap);
    }
    printf("  %s (%d threads): worst relative error %.3g (tolerance %.0e)\n", model, vs_threadpool_size(tp),
           worst, tol);
    vs_mmproj_free(m);
    fx_free(&ref);
}

/* ---------------------------------------------------------------------------------------------- */
/* Writer / reader round trip */

static void test_roundtrip(void) {
    vs_error err = {0};
    vs_vision_config c;
    cfg_tiny(&c);
    vs_vision_weights w, r;
    VT_REQUIRE(vs_vision_weights_alloc(&w, &c, &err) == VS_OK, "%s", err.msg);
    vs_vision_weights_randomize(&w, &c, 7);
    char path[512];
    const vs_type types[] = {VS_TYPE_F32, VS_TYPE_F16, VS_TYPE_BF16};
    const double tols[] = {0.0, 1e-3, 8e-3};
    for (int ti = 0; ti < 3; ti++) {
        snprintf(path, sizeof(path), "%s/rt_%d.gguf", vt_tmpdir(), ti);
        vs_mmproj_write_opts o = {.mat_type = types[ti], .name = "round trip"};
        VT_REQUIRE(vs_mmproj_write(path, &c, &w, &o, &err) == VS_OK, "%s", err.msg);
        vs_mmproj *m = vs_mmproj_open(path, &err);
        VT_REQUIRE(m, "%s", err.msg);
        const vs_vision_config *rc = vs_mmproj_config(m);
        VT_CHECK(rc->image_size == c.image_size && rc->patch_size == c.patch_size && rc->width == c.width &&
                     rc->ffn == c.ffn && rc->n_heads == c.n_heads && rc->n_blocks == c.n_blocks &&
                     rc->proj_hidden == c.proj_hidden && rc->proj_out == c.proj_out && rc->eps == c.eps &&
                     rc->use_gelu == c.use_gelu && !memcmp(rc->mean, c.mean, 12) &&
                     !memcmp(rc->std, c.std, 12),
                 "config round trip (%s)", vs_type_name(types[ti]));
        VT_REQUIRE(vs_mmproj_read_weights(m, &r, &err) == VS_OK, "%s", err.msg);
        const int64_t D = c.width, F = c.ffn, P = c.patch_size, n_tok = vs_vision_n_patches(&c) + 1;
        /* vectors are always F32: exact */
        VT_CHECK(vt_max_abs_diff(r.pos_embd, w.pos_embd, (size_t)(n_tok * D)) == 0, "pos_embd exact");
        VT_CHECK(vt_max_abs_diff(r.blocks[1].fc2_b, w.blocks[1].fc2_b, (size_t)D) == 0, "fc2 bias exact");
        VT_CHECK(vt_max_abs_diff(r.blocks[0].ln2_w, w.blocks[0].ln2_w, (size_t)D) == 0, "ln2 exact");
        double e = 0;
        e = fmax(e, rel_err(r.patch_w, w.patch_w, D * 3 * P * P));
        e = fmax(e, rel_err(r.blocks[0].q_w, w.blocks[0].q_w, D * D));
        e = fmax(e, rel_err(r.blocks[1].o_w, w.blocks[1].o_w, D * D));
        e = fmax(e, rel_err(r.blocks[1].fc1_w, w.blocks[1].fc1_w, F * D));
        e = fmax(e, rel_err(r.blocks[0].fc2_w, w.blocks[0].fc2_w, D * F));
        e = fmax(e, rel_err(r.mm0_w, w.mm0_w, c.proj_hidden * D));
        e = fmax(e, rel_err(r.mm2_w, w.mm2_w, c.proj_hidden * c.proj_out));
        VT_CHECK(e <= tols[ti], "%s matrices round trip: %.3g", vs_type_name(types[ti]), e);
        vs_vision_weights_free(&r, rc);
        vs_mmproj_free(m);
    }
    vs_vision_weights_free(&w, &c);

    /* Q8_0 weights (rows must be multiples of 32: patch 8 -> 3*64 = 192) run and stay close to F32 */
    vs_vision_config q;
    cfg_tiny(&q);
    q.image_size = 16, q.patch_size = 8, q.width = 32, q.ffn = 64, q.n_heads = 4, q.proj_hidden = 32,
    q.proj_out = 64;
    char p32[512], p8[512];
    snprintf(p32, sizeof(p32), "%s/q_f32.gguf", vt_tmpdir());
    snprintf(p8, sizeof(p8), "%s/q_q8.gguf", vt_tmpdir());
    VT_REQUIRE(vs_mmproj_write_random(p32, &q, VS_TYPE_F32, 5, &err) == VS_OK, "%s", err.msg);
    VT_REQUIRE(vs_mmproj_write_random(p8, &q, VS_TYPE_Q8_0, 5, &err) == VS_OK, "%s", err.msg);
    vs_mmproj *a = vs_mmproj_open(p32, &err), *b = vs_mmproj_open(p8, &err);
    VT_REQUIRE(a && b, "%s", err.msg);
    float px[3 * 16 * 16];
    vs_rng rng;
    vs_rng_seed(&rng, 3);
    for (size_t i = 0; i < VS_ARRAY_LEN(px); i++)
        px[i] = vs_rng_normal(&rng);
    vs_vision_features fa, fb;
    VT_REQUIRE(vs_vision_encode(vs_mmproj_tower(a), NULL, px, NULL, &fa, &err) == VS_OK, "%s", err.msg);
    VT_REQUIRE(vs_vision_encode(vs_mmproj_tower(b), NULL, px, NULL, &fb, &err) == VS_OK, "%s", err.msg);
    double eq = rel_err(fb.data, fa.data, 4 * q.width);
    VT_CHECK(eq < 0.1, "Q8_0 tower close to F32: %.3g", eq);
    VT_CHECK(!vs_vision_tower_same(vs_mmproj_tower(a), vs_mmproj_tower(b)), "F32 and Q8_0 towers differ");
    vs_vision_features_free(&fa);
    vs_vision_features_free(&fb);
    vs_mmproj_free(a);
    vs_mmproj_free(b);
    /* Q8_0 cannot store rows of 3*7*7 = 147 values: clear error */
    cfg_tiny(&q);
    VT_CHECK(vs_mmproj_write_random(p8, &q, VS_TYPE_Q8_0, 5, &err) == VS_ERR_UNSUPPORTED,
             "Q8_0 patch rows: %s", err.msg);
}

/* ---------------------------------------------------------------------------------------------- */
/* Malformed files, built by rewriting a valid one */

typedef struct rewrite_opts {
    const char *drop_key, *drop_tensor;
    const char *drop_prefix; /* every tensor whose name starts with it */
    const char *str_key, *str_val; /* set a string key */
    const char *u32_key;           /* set a u32 key */
    uint32_t u32_val;
    bool swap_ffn;             /* rename ffn_down <-> ffn_up */
    const char *shrink_tensor; /* one fewer row (last dim) */
} rewrite_opts;

static void rewrite(const char *src, const char *dst, const rewrite_opts *o) {
    vs_error err = {0};
    vs_gguf *g = vs_gguf_open(src, &err);
    VT_REQUIRE(g, "%s", err.msg);
    vs_gguf_writer *w = vs_gguf_writer_new();
    for (int64_t i = 0; i < vs_gguf_n_kv(g); i++) {
        vs_gguf_str k = vs_gguf_key_at(g, i);
        char key[256];
        snprintf(key, sizeof(key), "%.*s", (int)k.len, k.ptr);
        if (o->drop_key && !strcmp(key, o->drop_key)) continue;
        VT_REQUIRE(vs_gguf_copy_kv(w, g, key, &err) == VS_OK, "%s", err.msg);
    }
    if (o->str_key) vs_gguf_set_str(w, o->str_key, o->str_val);
    if (o->u32_key) vs_gguf_set_u32(w, o->u32_key, o->u32_val);
    for (int64_t i = 0; i < vs_gguf_n_tensors(g); i++) {
        const vs_gguf_tensor *t = vs_gguf_tensor_at(g, i);
        if (o->drop_tensor && !strcmp(t->name, o->drop_tensor)) continue;
        if (o->drop_prefix && !strncmp(t->name, o->drop_prefix, strlen(o->drop_prefix))) continue;
        char name[64];
        snprintf(name, sizeof(name), "%s", t->name);
        char *s;
        if (o->swap_ffn && (s = strstr(name, "ffn_down")))
            memcpy(s, "ffn_up", 6), memmove(s + 6, s + 8, strlen(s + 8) + 1);
        else if (o->swap_ffn && (s = strstr(name, "ffn_up")))
            memmove(s + 8, s + 6, strlen(s + 6) + 1), memcpy(s, "ffn_down", 8);
        int64_t ne[4];
        memcpy(ne, t->ne, sizeof(ne));
        if (o->shrink_tensor && !strcmp(t->name, o->shrink_tensor)) ne[t->n_dims - 1]--;
        VT_REQUIRE(vs_gguf_add_tensor(w, name, t->type, t->n_dims, ne, t->data, &err) == VS_OK, "%s",
                   err.msg);
    }
    VT_REQUIRE(vs_gguf_write(w, dst, &err) == VS_OK, "%s", err.msg);
    vs_gguf_writer_free(w);
    vs_gguf_close(g);
}

static void expect_open_fail(const char *path, vs_status want, const char *substr, const char *what) {
    vs_error err = {0};
    vs_mmproj *m = vs_mmproj_open(path, &err);
    VT_CHECK(m == NULL, "%s: opened a bad file", what);
    if (m) vs_mmproj_free(m);
    VT_CHECK(err.code == want, "%s: status %s, want %s (%s)", what, vs_status_name(err.code),
             vs_status_name(want), err.msg);
    VT_CHECK(strstr(err.msg, path) != NULL, "%s: message names the file: %s", what, err.msg);
    if (substr) VT_CHECK(strstr(err.msg, substr) != NULL, "%s: '%s' lacks '%s'", what, err.msg, substr);
}

/* v.post_ln: written and read back exactly; the features of a tower with it are LayerNorm(gain, bias) of
 * the same tower's features without it (the file rewritten without the two tensors); one of the two
 * alone is a format error naming the file. */
static void test_post_ln(void) {
    vs_error err = {0};
    vs_vision_config c;
    cfg_tiny(&c);
    c.post_ln = true;
    vs_vision_weights w, r;
    VT_REQUIRE(vs_vision_weights_alloc(&w, &c, &err) == VS_OK, "%s", err.msg);
    vs_vision_weights_randomize(&w, &c, 11);
    char with[512], without[512], half[512];
    snprintf(with, sizeof(with), "%s/postln.gguf", vt_tmpdir());
    snprintf(without, sizeof(without), "%s/postln_none.gguf", vt_tmpdir());
    snprintf(half, sizeof(half), "%s/postln_half.gguf", vt_tmpdir());
    vs_mmproj_write_opts o = {.mat_type = VS_TYPE_F32, .name = "post-LN"};
    VT_REQUIRE(vs_mmproj_write(with, &c, &w, &o, &err) == VS_OK, "%s", err.msg);
    rewrite(with, without, &(rewrite_opts){.drop_prefix = "v.post_ln."});
    rewrite(with, half, &(rewrite_opts){.drop_tensor = "v.post_ln.bias"});
    expect_open_fail(half, VS_ERR_FORMAT, "v.post_ln", "post_ln weight without bias");

    vs_mmproj *a = vs_mmproj_open(with, &err), *b = vs_mmproj_open(without, &err);
    VT_REQUIRE(a && b, "%s", err.msg);
    VT_CHECK(vs_mmproj_config(a)->post_ln && !vs_mmproj_config(b)->post_ln, "post_ln flag read from the file");
    VT_CHECK(!vs_vision_tower_same(vs_mmproj_tower(a), vs_mmproj_tower(b)) &&
                 vs_vision_tower_hash(vs_mmproj_tower(a)) != vs_vision_tower_hash(vs_mmproj_tower(b)),
             "a tower with post_ln is not the same tower without it");
    VT_REQUIRE(vs_mmproj_read_weights(a, &r, &err) == VS_OK, "%s", err.msg);
    const int D = c.width;
    VT_CHECK(vt_max_abs_diff(r.post_ln_w, w.post_ln_w, (size_t)D) == 0 &&
                 vt_max_abs_diff(r.post_ln_b, w.post_ln_b, (size_t)D) == 0,
             "post_ln round trip exact");
    float px[3 * 35 * 35];
    vs_rng rng;
    vs_rng_seed(&rng, 5);
    for (size_t i = 0; i < VS_ARRAY_LEN(px); i++) px[i] = vs_rng_normal(&rng);
    vs_vision_features fa, fb;
    VT_REQUIRE(vs_vision_encode(vs_mmproj_tower(a), NULL, px, NULL, &fa, &err) == VS_OK, "%s", err.msg);
    VT_REQUIRE(vs_vision_encode(vs_mmproj_tower(b), NULL, px, NULL, &fb, &err) == VS_OK, "%s", err.msg);
    double worst = 0;
    const int n = vs_vision_n_patches(&c);
    for (int t = 0; t < n; t++) {
        const float *x = fb.data + (size_t)t * D;
        double mean = 0, var = 0;
        for (int i = 0; i < D; i++) mean += x[i];
        mean /= D;
        for (int i = 0; i < D; i++) var += (x[i] - mean) * (x[i] - mean);
        var /= D;
        for (int i = 0; i < D; i++) {
            double want = (x[i] - mean) / sqrt(var + c.eps) * w.post_ln_w[i] + w.post_ln_b[i];
            worst = fmax(worst, fabs(fa.data[(size_t)t * D + i] - want) / (fabs(want) + 1));
        }
    }
    VT_CHECK(worst < 1e-5, "post_ln features = LayerNorm of the features without it: %.3g", worst);
    printf("post_ln: applied when present (worst %.2g vs a double LayerNorm), half of it refused\n", worst);
    vs_vision_features_free(&fa);
    vs_vision_features_free(&fb);
    vs_vision_weights_free(&r, &c);
    vs_vision_weights_free(&w, &c);
    vs_mmproj_free(a);
    vs_mmproj_free(b);
}

static void test_bad_files(const fx *pix) {
    const char *src = FIX "tiny_f32.gguf";
    char p[512];
    snprintf(p, sizeof(p), "%s/bad.gguf", vt_tmpdir());
    rewrite(src, p, &(rewrite_opts){.drop_key = "clip.vision.patch_size"});
    expect_open_fail(p, VS_ERR_FORMAT, "clip.vision.patch_size", "missing key");
    rewrite(src, p, &(rewrite_opts){.drop_key = "clip.vision.image_mean"});
    expect_open_fail(p, VS_ERR_FORMAT, "clip.vision.image_mean", "missing mean");
    rewrite(src, p, &(rewrite_opts){.drop_tensor = "mm.2.bias"});
    expect_open_fail(p, VS_ERR_FORMAT, "mm.2.bias", "missing tensor");
    rewrite(src, p, &(rewrite_opts){.drop_tensor = "v.blk.1.ln2.weight"});
    expect_open_fail(p, VS_ERR_FORMAT, "v.blk.1.ln2.weight", "missing block tensor");
    rewrite(src, p, &(rewrite_opts){.shrink_tensor = "v.position_embd.weight"});
    expect_open_fail(p, VS_ERR_FORMAT, "v.position_embd.weight", "wrong shape");
    rewrite(src, p, &(rewrite_opts){.shrink_tensor = "v.blk.0.attn_k.weight"});
    expect_open_fail(p, VS_ERR_FORMAT, "v.blk.0.attn_k.weight", "wrong matrix shape");
    rewrite(src, p, &(rewrite_opts){.str_key = "clip.projector_type", .str_val = "ldp"});
    expect_open_fail(p, VS_ERR_UNSUPPORTED, "ldp", "projector type");
    rewrite(src, p, &(rewrite_opts){.str_key = "clip.vision.mm_patch_merge_type", .str_val = "spatial_unpad"});
    expect_open_fail(p, VS_ERR_UNSUPPORTED, "spatial_unpad", "LLaVA-1.6 patch merge");
    rewrite(src, p, &(rewrite_opts){.str_key = "clip.vision.mm_patch_merge_type", .str_val = "flat"});
    vs_error ok_err = {0};
    vs_mmproj *flat = vs_mmproj_open(p, &ok_err);
    VT_CHECK(flat != NULL, "mm_patch_merge_type 'flat' is LLaVA-1.5's: accepted (%s)", ok_err.msg);
    vs_mmproj_free(flat);
    rewrite(src, p, &(rewrite_opts){.u32_key = "clip.vision.image_grid_pinpoints", .u32_val = 336});
    expect_open_fail(p, VS_ERR_UNSUPPORTED, "image_grid_pinpoints", "LLaVA-1.6 grid");
    rewrite(src, p, &(rewrite_opts){.str_key = "general.architecture", .str_val = "llama"});
    expect_open_fail(p, VS_ERR_FORMAT, "clip", "architecture");
    rewrite(src, p, &(rewrite_opts){.u32_key = "clip.vision.attention.head_count", .u32_val = 5});
    expect_open_fail(p, VS_ERR_INVALID, "head count", "heads do not divide the width");
    rewrite(src, p, &(rewrite_opts){.u32_key = "clip.vision.patch_size", .u32_val = 6});
    expect_open_fail(p, VS_ERR_INVALID, "patch size", "image size not a multiple of the patch");
    rewrite(src, p, &(rewrite_opts){.u32_key = "clip.vision.block_count", .u32_val = 3});
    expect_open_fail(p, VS_ERR_FORMAT, "v.blk.2", "more blocks than stored");
    /* truncated file */
    uint8_t *d;
    size_t n;
    vs_error err = {0};
    VT_REQUIRE(vs_read_file(src, &d, &n, &err) == VS_OK, "%s", err.msg);
    FILE *f = fopen(p, "wb");
    fwrite(d, 1, n / 2, f);
    fclose(f);
    vs_free(d);
    vs_mmproj *m = vs_mmproj_open(p, &err);
    VT_CHECK(!m && err.code != VS_OK && strstr(err.msg, "bad.gguf"), "truncated file: %s", err.msg);
    m = vs_mmproj_open("no/such/mmproj.gguf", &err);
    VT_CHECK(!m && err.code == VS_ERR_IO, "missing file: %s", err.msg);

    /* standard MLP naming (ffn_up first) loads and computes the same as the legacy naming */
    rewrite(src, p, &(rewrite_opts){.swap_ffn = true});
    vs_mmproj *a = vs_mmproj_open(src, &err), *b = vs_mmproj_open(p, &err);
    VT_REQUIRE(a && b, "%s", err.msg);
    const fx_arr *px = fx_get(pix, "img_a.png.pixels");
    vs_vision_features fa, fb;
    VT_REQUIRE(vs_vision_encode(vs_mmproj_tower(a), NULL, px->data, NULL, &fa, &err) == VS_OK, "%s", err.msg);
    VT_REQUIRE(vs_vision_encode(vs_mmproj_tower(b), NULL, px->data, NULL, &fb, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(vt_max_abs_diff(fa.data, fb.data, (size_t)(vs_vision_features_rows(&fa) * fa.width)) == 0,
             "standard naming == legacy naming");
    VT_CHECK(vs_vision_tower_same(vs_mmproj_tower(a), vs_mmproj_tower(b)), "same tower whatever the naming");
    vs_vision_features_free(&fa);
    vs_vision_features_free(&fb);
    vs_mmproj_free(a);
    vs_mmproj_free(b);
}

/* ---------------------------------------------------------------------------------------------- */
/* Tower sharing between files */

static void test_sharing(const fx *pix) {
    vs_error err = {0};
    const char *pa = FIX "tiny_f32.gguf";
    char pb[512], pc[512], pd[512], pe[512];
    snprintf(pb, sizeof(pb), "%s/share_b.gguf", vt_tmpdir());
    snprintf(pc, sizeof(pc), "%s/share_c.gguf", vt_tmpdir());
    snprintf(pd, sizeof(pd), "%s/share_d.gguf", vt_tmpdir());
    snprintf(pe, sizeof(pe), "%s/share_e.gguf", vt_tmpdir());
    vs_mmproj *a = vs_mmproj_open(pa, &err);
    VT_REQUIRE(a, "%s", err.msg);
    vs_vision_config c = *vs_mmproj_config(a);
    vs_vision_weights w, other;
    VT_REQUIRE(vs_mmproj_read_weights(a, &w, &err) == VS_OK, "%s", err.msg);
    /* B: same tower, a new projector (a drafter's) */
    VT_REQUIRE(vs_vision_weights_alloc(&other, &c, &err) == VS_OK, "%s", err.msg);
    vs_vision_weights_randomize(&other, &c, 4242);
    float *keep[4] = {w.mm0_w, w.mm0_b, w.mm2_w, w.mm2_b};
    w.mm0_w = other.mm0_w, w.mm0_b = other.mm0_b, w.mm2_w = other.mm2_w, w.mm2_b = other.mm2_b;
    vs_mmproj_write_opts o = {.mat_type = VS_TYPE_F32};
    VT_REQUIRE(vs_mmproj_write(pb, &c, &w, &o, &err) == VS_OK, "%s", err.msg);
    /* C: projector-only file with B's projector, recording A's tower hash */
    vs_vision_config cc = c;
    cc.has_tower = false;
    vs_vision_weights po = {.mm0_w = w.mm0_w, .mm0_b = w.mm0_b, .mm2_w = w.mm2_w, .mm2_b = w.mm2_b};
    o.tower_hash = vs_vision_tower_hash(vs_mmproj_tower(a));
    VT_REQUIRE(vs_mmproj_write(pc, &cc, &po, &o, &err) == VS_OK, "%s", err.msg);
    /* D: A with one tower value changed */
    w.mm0_w = keep[0], w.mm0_b = keep[1], w.mm2_w = keep[2], w.mm2_b = keep[3];
    w.pos_embd[5] += 0.5f;
    o.tower_hash = 0;
    VT_REQUIRE(vs_mmproj_write(pd, &c, &w, &o, &err) == VS_OK, "%s", err.msg);
    /* E: projector-only of another width */
    vs_vision_config ce = cc;
    ce.width = 16;
    vs_vision_weights we;
    VT_REQUIRE(vs_vision_weights_alloc(&we, &ce, &err) == VS_OK, "%s", err.msg);
    vs_vision_weights_randomize(&we, &ce, 1);
    VT_REQUIRE(vs_mmproj_write(pe, &ce, &we, &o, &err) == VS_OK, "%s", err.msg);
    vs_vision_weights_free(&we, &ce);
    vs_vision_weights_free(&other, &c);
    vs_vision_weights_free(&w, &c);

    vs_mmproj *b = vs_mmproj_open(pb, &err), *cm = vs_mmproj_open(pc, &err), *d = vs_mmproj_open(pd, &err),
              *e = vs_mmproj_open(pe, &err);
    VT_REQUIRE(b && cm && d && e, "%s", err.msg);
    const vs_vision_tower *ta = vs_mmproj_tower(a), *tb = vs_mmproj_tower(b), *td = vs_mmproj_tower(d);
    VT_CHECK(vs_mmproj_tower(cm) == NULL && !vs_mmproj_config(cm)->has_tower, "C is projector-only");
    VT_CHECK(vs_vision_tower_same(ta, tb), "A and B share a tower");
    VT_CHECK(!vs_vision_tower_same(ta, td), "A and D differ");
    VT_CHECK(vs_vision_tower_hash(ta) == vs_vision_tower_hash(tb), "equal hashes");
    VT_CHECK(vs_vision_tower_hash(ta) != vs_vision_tower_hash(td), "different hashes");
    VT_CHECK(vs_vision_check_projector(ta, vs_mmproj_projector(b), &err) == VS_OK, "A tower -> B proj: %s",
             err.msg);
    VT_CHECK(vs_vision_check_projector(ta, vs_mmproj_projector(cm), &err) == VS_OK, "A tower -> C proj: %s",
             err.msg);
    VT_CHECK(vs_vision_check_projector(td, vs_mmproj_projector(b), &err) == VS_ERR_INVALID &&
                 strstr(err.msg, "different vision tower"),
             "D tower -> B proj refused: %s", err.msg);
    VT_CHECK(vs_vision_check_projector(td, vs_mmproj_projector(cm), &err) == VS_ERR_INVALID &&
                 strstr(err.msg, "tower_hash"),
             "D tower -> C proj refused: %s", err.msg);
    VT_CHECK(vs_vision_check_projector(ta, vs_mmproj_projector(e), &err) == VS_ERR_INVALID &&
                 strstr(err.msg, "width"),
             "width mismatch refused: %s", err.msg);

    /* features computed ONCE by A's tower feed A's projector and C's (= B's) projector */
    const fx_arr *px = fx_get(pix, "img_b.jpg.pixels");
    vs_vision_features f, fb;
    VT_REQUIRE(vs_vision_encode(ta, NULL, px->data, NULL, &f, &err) == VS_OK, "%s", err.msg);
    VT_REQUIRE(vs_vision_encode(tb, NULL, px->data, NULL, &fb, &err) == VS_OK, "%s", err.msg);
    float *rc, *rb, *ra;
    int64_t nc, nb, na;
    VT_REQUIRE(vs_vision_embed(vs_mmproj_projector(cm), NULL, &f, 1, &rc, &nc, &err) == VS_OK, "%s", err.msg);
    VT_REQUIRE(vs_vision_embed(vs_mmproj_projector(b), NULL, &fb, 1, &rb, &nb, &err) == VS_OK, "%s", err.msg);
    VT_REQUIRE(vs_vision_embed(vs_mmproj_projector(a), NULL, &f, 1, &ra, &na, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(nc == nb && vt_max_abs_diff(rc, rb, (size_t)(nc * c.proj_out)) == 0,
             "shared features + projector-only file == the full file B");
    VT_CHECK(vt_max_abs_diff(ra, rb, (size_t)(nc * c.proj_out)) > 1e-3, "different projectors differ");
    float *bad;
    int64_t nbad;
    VT_CHECK(vs_vision_embed(vs_mmproj_projector(e), NULL, &f, 1, &bad, &nbad, &err) == VS_ERR_INVALID,
             "embed refuses a width mismatch: %s", err.msg);
    vs_vision_features fe;
    VT_CHECK(vs_vision_encode_file(vs_mmproj_tower(cm), NULL, FIX "img_a.png", VS_PREPROC_LLAVA, NULL, &fe,
                                   &err) == VS_ERR_INVALID,
             "no tower in a projector-only file: %s", err.msg);
    vs_free(ra);
    vs_free(rb);
    vs_free(rc);
    vs_vision_features_free(&f);
    vs_vision_features_free(&fb);
    vs_mmproj_free(a);
    vs_mmproj_free(b);
    vs_mmproj_free(cm);
    vs_mmproj_free(d);
    vs_mmproj_free(e);
}

/* ---------------------------------------------------------------------------------------------- */
/* Importance selection, pooling of features, file API, threads */

static void test_misc(vs_threadpool *tp) {
    vs_error err = {0};
    const float s[7] = {0.1f, 0.9f, 0.3f, 0.9f, -1.0f, 0.5f, 0.2f};
    int64_t idx[7];
    vs_vision_select_top(s, 7, 3, idx);
    VT_CHECK(idx[0] == 1 && idx[1] == 3 && idx[2] == 5, "top 3 in index order: %lld %lld %lld",
             (long long)idx[0], (long long)idx[1], (long long)idx[2]);
    vs_vision_select_top(s, 7, 9, idx);
    bool all = true;
    for (int i = 0; i < 7; i++)
        all &= idx[i] == i;
    VT_CHECK(all, "n_keep >= n keeps everything in order");
    const float rows[3 * 2] = {1, 2, 3, 4, 5, 6};
    const int64_t gi[2] = {2, 0};
    float g[4];
    vs_vision_gather_rows(rows, 2, gi, 2, g);
    VT_CHECK(g[0] == 5 && g[1] == 6 && g[2] == 1 && g[3] == 2, "gather rows");

    vs_mmproj *m = vs_mmproj_open(FIX "tiny_gelu_f32.gguf", &err);
    VT_REQUIRE(m, "%s", err.msg);
    const vs_vision_tower *t = vs_mmproj_tower(m);
    vs_vision_features f1, f2, fp;
    vs_vision_encode_opts o = {.importance = true};
    VT_REQUIRE(vs_vision_encode_file(t, NULL, FIX "img_b.jpg", VS_PREPROC_LLAVA, &o, &f1, &err) == VS_OK,
               "%s", err.msg);
    VT_REQUIRE(vs_vision_encode_file(t, tp, FIX "img_b.jpg", VS_PREPROC_LLAVA, &o, &f2, &err) == VS_OK, "%s",
               err.msg);
    const int64_t n = vs_vision_features_rows(&f1);
    VT_CHECK(rel_err(f2.data, f1.data, n * f1.width) < 1e-5, "threads give the same features: %.3g",
             rel_err(f2.data, f1.data, n * f1.width));
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += f1.importance[i];
    VT_CHECK(sum > 0 && sum < 1.0,
             "class-token attention to patches sums to %.3f (< 1: the rest goes to itself)", sum);
    /* pooling features: 7 x 7 -> 3 x 3 */
    VT_REQUIRE(vs_vision_features_pool(&f1, 3, &fp, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(fp.grid_h == 3 && fp.grid_w == 3 && fp.width == f1.width && fp.importance, "pooled shape");
    double want = 0;
    for (int r = 6; r < 7; r++)
        for (int c = 0; c < 3; c++)
            want += f1.data[(r * 7 + c) * f1.width + 4] / 3.0;
    VT_CHECK_NEAR(fp.data[(2 * 3 + 0) * fp.width + 4], want, 1e-5, "bottom edge window of the pooled grid");
    vs_vision_features_free(&fp);
    /* llama.cpp preprocessing gives a different (but valid) input */
    vs_vision_features fl;
    VT_REQUIRE(vs_vision_encode_file(t, NULL, FIX "img_b.jpg", VS_PREPROC_LLAMACPP, NULL, &fl, &err) == VS_OK,
               "%s", err.msg);
    VT_CHECK(rel_err(fl.data, f1.data, n * f1.width) > 1e-3, "llama.cpp preprocessing differs from LLaVA's");
    vs_vision_features_free(&fl);
    /* a different image changes the features */
    VT_REQUIRE(vs_vision_encode_file(t, NULL, FIX "img_a.png", VS_PREPROC_LLAVA, NULL, &fl, &err) == VS_OK,
               "%s", err.msg);
    VT_CHECK(rel_err(fl.data, f1.data, n * f1.width) > 1e-2, "different images, different features");
    VT_CHECK(fl.importance == NULL, "no importance unless asked");
    vs_vision_features_free(&fl);
    /* errors from the file API name the file */
    VT_CHECK(vs_vision_encode_file(t, NULL, "missing.png", VS_PREPROC_LLAVA, NULL, &fl, &err) == VS_ERR_IO &&
                 strstr(err.msg, "missing.png"),
             "missing image: %s", err.msg);
    VT_CHECK(vs_vision_encode_file(t, NULL, FIX "tiny_f32.gguf", VS_PREPROC_LLAVA, NULL, &fl, &err) ==
                 VS_ERR_FORMAT,
             "not an image: %s", err.msg);
    vs_vision_features_free(&f1);
    vs_vision_features_free(&f2);
    vs_mmproj_free(m);
}

/* ---------------------------------------------------------------------------------------------- */
/* Multimodal prompts end to end: random LM + tiny mmproj */

static void test_mmprompt(vs_threadpool *tp) {
    vs_error err = {0};
    char lmp[512];
    snprintf(lmp, sizeof(lmp), "%s/lm.gguf", vt_tmpdir());
    vs_lm_random_opts ro = {.n_embd = 32,
                            .n_layer = 2,
                            .n_head = 4,
                            .n_head_kv = 2,
                            .n_ff = 64,
                            .n_ctx = 160,
                            .n_vocab = 300,
                            .type = VS_TYPE_F32,
                            .init_std = 0.1f,
                            .seed = 11};
    VT_REQUIRE(vs_lm_write_random(&ro, lmp, &err) == VS_OK, "%s", err.msg);
    vs_lm *lm = vs_lm_load(lmp, &err);
    VT_REQUIRE(lm, "%s", err.msg);
    vs_tokenizer *tok = vs_tokenizer_from_gguf(vs_lm_gguf(lm), &err);
    VT_REQUIRE(tok, "%s", err.msg);
    const int n_vocab = vs_lm_cfg(lm)->n_vocab;
    vs_mmproj *m = vs_mmproj_open(FIX "tiny_f32.gguf", &err);
    VT_REQUIRE(m, "%s", err.msg);
    /* rows of the two images (25 x 32 each) */
    const char *paths[2] = {FIX "img_a.png", FIX "img_b.jpg"};
    vs_mm_image imgs[2];
    VT_REQUIRE(vs_mm_images_from_files(vs_mmproj_tower(m), vs_mmproj_projector(m), tp, paths, 2,
                                       VS_PREPROC_LLAVA, 1, imgs, &err) == VS_OK,
               "%s", err.msg);
    const vs_mm_image ia = imgs[0], ib = imgs[1];
    const float *rows[2] = {ia.rows, ib.rows};
    VT_CHECK(ia.n_rows == 25 && ia.width == 32 && ib.n_rows == 25, "image rows");
    const char *bad_paths[2] = {FIX "img_a.png", FIX "nope.png"};
    vs_mm_image bad_imgs[2];
    VT_CHECK(vs_mm_images_from_files(vs_mmproj_tower(m), vs_mmproj_projector(m), tp, bad_paths, 2,
                                     VS_PREPROC_LLAVA, 1, bad_imgs, &err) == VS_ERR_IO &&
                 strstr(err.msg, "nope.png") && bad_imgs[0].rows == NULL,
             "missing image file: %s", err.msg);
    const char *text = "USER: <image>\nWhat is in the picture? ASSISTANT:";
    vs_mm_prompt_opts o = {.lm_width = vs_lm_cfg(lm)->n_embd, .n_ctx = 160};
    vs_mm_prompt pa, pb;
    VT_REQUIRE(vs_mm_prompt_build(&pa, tok, text, strlen(text), &ia, 1, &o, &err) == VS_OK, "%s", err.msg);
    VT_REQUIRE(vs_mm_prompt_build(&pb, tok, text, strlen(text), &ib, 1, &o, &err) == VS_OK, "%s", err.msg);
    /* layout: [BOS + "USER: "] [25 image rows] ["\nWhat ... ASSISTANT:"], pieces tokenised separately */
    int32_t *t0, *t1;
    int64_t n0, n1;
    VT_REQUIRE(vs_tokenize_alloc(tok, "USER: ", 6, true, true, &t0, &n0, &err) == VS_OK, "%s", err.msg);
    const char *tail = "\nWhat is in the picture? ASSISTANT:";
    VT_REQUIRE(vs_tokenize_alloc(tok, tail, strlen(tail), false, true, &t1, &n1, &err) == VS_OK, "%s",
               err.msg);
    VT_CHECK(pa.n_rows == n0 + 25 + n1 && pa.n_text == n0 + n1 && pa.n_images == 1 && pa.image_first[0] == n0,
             "layout: %lld rows, image at %lld", (long long)pa.n_rows, (long long)pa.image_first[0]);
    VT_CHECK(pa.tokens[0] == vs_tokenizer_bos(tok), "BOS first");
    bool same = true;
    for (int64_t i = 0; i < n0; i++)
        same &= pa.tokens[i] == t0[i] && pa.embd[i] == NULL;
    for (int64_t i = 0; i < 25; i++)
        same &= pa.tokens[n0 + i] == -1 && pa.embd[n0 + i] == rows[0] + i * 32;
    for (int64_t i = 0; i < n1; i++)
        same &= pa.tokens[n0 + 25 + i] == t1[i];
    VT_CHECK(same, "rows = piece 0 tokens, image rows in order, piece 1 tokens");
    vs_free(t0);
    vs_free(t1);
    /* two images, BOS only once */
    const vs_mm_image two[2] = {ia, ib};
    const char *text2 = "USER: <image> and <image>\nCompare them. ASSISTANT:";
    vs_mm_prompt p2;
    VT_REQUIRE(vs_mm_prompt_build(&p2, tok, text2, strlen(text2), two, 2, &o, &err) == VS_OK, "%s", err.msg);
    int n_bos = 0;
    for (int64_t i = 0; i < p2.n_rows; i++)
        n_bos += p2.tokens[i] == vs_tokenizer_bos(tok);
    VT_CHECK(n_bos == 1 && p2.n_images == 2 && p2.image_first[1] > p2.image_first[0] + 25,
             "two images, one BOS");
    VT_CHECK(p2.embd[p2.image_first[1]] == rows[1], "second image's rows at its marker");
    vs_mm_prompt_free(&p2);
    /* errors */
    vs_mm_prompt bad;
    VT_CHECK(vs_mm_prompt_build(&bad, tok, text2, strlen(text2), &ia, 1, &o, &err) == VS_ERR_INVALID &&
                 strstr(err.msg, "2 <image> markers") && strstr(err.msg, "1 image given"),
             "more markers than images: %s", err.msg);
    VT_CHECK(vs_mm_prompt_build(&bad, tok, "no marker", 9, &ia, 1, &o, &err) == VS_ERR_INVALID,
             "more images than markers: %s", err.msg);
    vs_mm_prompt_opts ow = o;
    ow.lm_width = 48;
    VT_CHECK(vs_mm_prompt_build(&bad, tok, text, strlen(text), &ia, 1, &ow, &err) == VS_ERR_INVALID &&
                 strstr(err.msg, "width"),
             "projector width != LM width: %s", err.msg);
    vs_mm_prompt_opts oc = o;
    oc.n_ctx = 30;
    VT_CHECK(vs_mm_prompt_build(&bad, tok, text, strlen(text), &ia, 1, &oc, &err) == VS_ERR_RANGE &&
                 strstr(err.msg, "context"),
             "prompt + image longer than the context: %s", err.msg);
    VT_CHECK(bad.tokens == NULL, "nothing allocated on failure");

    /* prefill: different images change the logits; chunked prefill equals one batch */
    float *la = vs_malloc((size_t)n_vocab * sizeof(float)), *lb = vs_malloc((size_t)n_vocab * sizeof(float));
    float *lc = vs_malloc((size_t)n_vocab * sizeof(float));
    vs_kv *kv = vs_lm_kv_new(lm, 2, 160, VS_TYPE_F32, &err);
    VT_REQUIRE(kv, "%s", err.msg);
    VT_REQUIRE(vs_mm_prompt_eval(lm, kv, tp, &pa, 0, 0, la, &err) == VS_OK, "%s", err.msg);
    VT_REQUIRE(vs_mm_prompt_eval(lm, kv, tp, &pb, 1, 0, lb, &err) == VS_OK, "%s", err.msg);
    VT_CHECK(vs_kv_seq_len(kv, 0) == pa.n_rows, "cache holds the prompt");
    const double dab = vt_max_abs_diff(la, lb, (size_t)n_vocab);
    VT_CHECK(dab > 1e-3, "different images change the logits (max diff %.3g)", dab);
    vs_kv_clear(kv);
    VT_REQUIRE(vs_mm_prompt_eval(lm, kv, tp, &pa, 0, 7, lc, &err) == VS_OK, "%s", err.msg);
    const double dch = vt_max_abs_diff(la, lc, (size_t)n_vocab);
    VT_CHECK(dch < 1e-4, "chunked prefill == one batch (max diff %.3g)", dch);
    /* a second prompt after the first in the same sequence would overflow the 160-row cache */
    vs_mm_prompt big;
    const vs_mm_image four[4] = {ia, ib, ia, ib};
    const char *text4 = "<image><image><image><image>";
    VT_REQUIRE(vs_mm_prompt_build(&big, tok, text4, strlen(text4), four, 4, &o, &err) == VS_OK, "%s",
               err.msg);
    VT_REQUIRE(big.n_rows + pa.n_rows > 160, "test setup: %lld rows", (long long)big.n_rows);
    VT_CHECK(vs_mm_prompt_eval(lm, kv, tp, &big, 0, 0, lc, &err) == VS_ERR_RANGE,
             "cache overflow refused: %s", err.msg);
    VT_CHECK(vs_kv_seq_len(kv, 0) == pa.n_rows, "nothing appended on failure");
    vs_mm_prompt_free(&big);
    vs_free(la);
    vs_free(lb);
    vs_free(lc);
    vs_kv_free(kv);
    vs_mm_prompt_free(&pa);
    vs_mm_prompt_free(&pb);
    vs_mm_images_free(imgs, 2);
    vs_mmproj_free(m);
    vs_tokenizer_free(tok);
    vs_lm_free(lm);
}

/* ---------------------------------------------------------------------------------------------- */
/* CLI: vlmspec embed-image */

static float *read_f32(const char *path, int64_t *n) {
    uint8_t *d;
    size_t sz;
    vs_error err = {0};
    if (vs_read_file(path, &d, &sz, &err) != VS_OK) return NULL;
    *n = (int64_t)(sz / 4);
    return (float *)d;
}

static void test_cli(void) {
    const char *cli = vt_cli();
    struct stat st;
    if (stat(cli, &st) != 0) {
        printf("  (CLI %s not built: embed-image checks skipped)\n", cli);
        return;
    }
    const char *tmp = vt_tmpdir();
    int rc =
        vt_run("%s embed-image --mmproj " FIX "tiny_f32.gguf --image " FIX "img_b.jpg -o %s/emb --features "
               "--threads 2 > %s/emb.log 2>&1",
               cli, tmp, tmp);
    VT_CHECK(rc == 0, "embed-image exit %d", rc);
    char p[512];
    snprintf(p, sizeof(p), "%s/emb.f32", tmp);
    int64_t n = 0, nf = 0;
    float *rows = read_f32(p, &n);
    snprintf(p, sizeof(p), "%s/emb.features.f32", tmp);
    float *feat = read_f32(p, &nf);
    VT_CHECK(rows && n == 25 * 32, "rows file: %lld floats", (long long)n);
    VT_CHECK(feat && nf == 25 * 24, "features file: %lld floats", (long long)nf);
    snprintf(p, sizeof(p), "%s/emb.json", tmp);
    uint8_t *js;
    size_t jn;
    vs_error err = {0};
    VT_CHECK(vs_read_file(p, &js, &jn, &err) == VS_OK && strstr((char *)js, "\"rows\":25"), "json written");
    if (js) vs_free(js);
    /* same numbers as the library */
    vs_mmproj *m = vs_mmproj_open(FIX "tiny_f32.gguf", &err);
    vs_vision_features f;
    float *lib;
    int64_t nl;
    VT_REQUIRE(m && vs_vision_encode_file(vs_mmproj_tower(m), NULL, FIX "img_b.jpg", VS_PREPROC_LLAVA, NULL,
                                          &f, &err) == VS_OK,
               "%s", err.msg);
    VT_REQUIRE(vs_vision_embed(vs_mmproj_projector(m), NULL, &f, 1, &lib, &nl, &err) == VS_OK, "%s", err.msg);
    if (rows && n == nl * 32) VT_CHECK(rel_err(rows, lib, n) < 1e-5, "CLI rows == library rows");
    if (feat && nf == 25 * 24) VT_CHECK(rel_err(feat, f.data, nf) < 1e-5, "CLI features == library features");
    vs_free(lib);
    vs_vision_features_free(&f);
    vs_mmproj_free(m);
    vs_free(rows);
    vs_free(feat);
    /* pooled output */
    rc = vt_run("%s embed-image --mmproj " FIX "tiny_f32.gguf --image " FIX "img_a.png -o %s/pool --pool 2 "
                "> /dev/null 2>&1",
                cli, tmp);
    snprintf(p, sizeof(p), "%s/pool.f32", tmp);
    rows = read_f32(p, &n);
    VT_CHECK(rc == 0 && rows && n == 9 * 32, "pooled rows: rc %d, %lld floats", rc, (long long)n);
    vs_free(rows);
    /* errors: exit 1 with a message; usage errors exit 2 */
    rc = vt_run("%s embed-image --mmproj " FIX "tiny_f32.gguf --image %s/nothere.png -o %s/x 2> %s/err.log",
                cli, tmp, tmp, tmp);
    VT_CHECK(rc == 1, "missing image: exit %d", rc);
    rc = vt_run("%s embed-image --mmproj " FIX "tiny_f32.gguf --image " FIX
                "img_a.bmp -o %s/x --pool 0 2> %s/err.log",
                cli, tmp, tmp);
    VT_CHECK(rc == 2, "bad --pool: exit %d", rc);
    rc = vt_run("%s embed-image --image " FIX "img_a.bmp -o %s/x 2> %s/err.log", cli, tmp, tmp);
    VT_CHECK(rc == 2, "no --mmproj: exit %d", rc);
    rc = vt_run("%s embed-image --mmproj " FIX "img_a.png --image " FIX "img_a.bmp -o %s/x 2> %s/err.log",
                cli, tmp, tmp);
    VT_CHECK(rc == 1, "mmproj not a GGUF: exit %d", rc);
    rc = vt_run("%s embed-image --help > /dev/null", cli);
    VT_CHECK(rc == 0, "--help: exit %d", rc);
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--write-fixture-models")) return write_fixture_models(argv[2]);
    vs_error err = {0};
    fx pix;
    fx_load(&pix, FIX "pixels.vsfx");
    test_pixels(&pix);
    vs_threadpool *tp = vs_threadpool_new(2, &err);
    VT_REQUIRE(tp, "%s", err.msg);
    test_model("tiny_f32", &pix, 1e-4, NULL);
    test_model("tiny_f32", &pix, 1e-4, tp);
    test_model("tiny_f16", &pix, 1e-2, tp);
    test_model("tiny_gelu_f32", &pix, 1e-4, NULL);
    test_roundtrip();
    test_bad_files(&pix);
    test_post_ln();
    test_sharing(&pix);
    test_misc(tp);
    test_mmprompt(tp);
    test_cli();
    vs_threadpool_free(tp);
    fx_free(&pix);
    return vt_finish("vision");
}
