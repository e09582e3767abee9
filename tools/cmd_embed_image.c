/* vlmspec embed-image --mmproj MMPROJ --image IMG -o PREFIX: runs an image through an mmproj's vision
 * tower and projector and writes the projected rows (what the LM receives at the image's positions),
 * optionally the raw ViT patch features and the class-token importance scores.
 *
 * Output (float32 little-endian, row-major; layout also described in PREFIX.json and docs/vision.md):
 *   PREFIX.f32             (rows, width)   projected rows, rows = pooled grid cells
 *   PREFIX.features.f32    (patches, vit_width) ViT features before pooling       (--features)
 *   PREFIX.importance.f32  (patches)       class-token attention, last block      (--importance)
 *   PREFIX.json            shapes, files, the inputs and the timing */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <math.h>

#include "cli.h"
#include "gguf.h"
#include "outfile.h"
#include "quant.h"
#include "json.h"
#include "threadpool.h"
#include "vision.h"

#define CMD "embed-image"

static void usage(FILE *f) {
    fprintf(f, "usage: vlmspec embed-image --mmproj MMPROJ --image IMG -o PREFIX [options]\n"
               "Encodes an image with an mmproj's vision tower and projector and writes the rows the LM\n"
               "receives (PREFIX.f32) and a description (PREFIX.json).\n\n"
               "options:\n"
               "  --mmproj FILE        LLaVA-style projector GGUF with a vision tower\n"
               "  --projector FILE     project with this file's projector instead (a drafter's, possibly\n"
               "                       projector-only); the features still come from --mmproj's tower\n"
               "  --image FILE         PNG, JPEG, BMP or binary PPM/PGM\n"
               "  -o, --out PREFIX     output prefix\n"
               "  --features           also write the ViT patch features (PREFIX.features.f32)\n"
               "  --importance         also write the class token's attention to each patch in the last\n"
               "                       block, mean over heads (PREFIX.importance.f32)\n"
               "  -m, --model LM       also print how loud the image rows are next to this LM's token\n"
               "                       embeddings: mean L2 norm of each and their ratio (a projector\n"
               "                       trained to the text scale gives about 1; PREFIX.json records it)\n"
               "  --pool K             average-pool the patch grid K x K before the projector (default 1)\n"
               "  --preproc MODE       llava (default: pad with the mean colour, Pillow bicubic) or\n"
               "                       llamacpp (llama.cpp's fit-and-pad with its own bicubic)\n"
               "  -t, --threads N      worker threads (default: online CPUs, at most 8)\n"
               "  -h, --help           this help\n");
}

static vs_status write_f32(const char *path, const float *data, int64_t n, vs_error *err) {
    return vs_write_file(path, data, n > 0 ? (size_t)n * sizeof(float) : 0, err);
}

static int default_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 8 ? 8 : (int)n;
}

/* ------------------------------------------------------------------------------------------------
 * flags */

typedef struct embed_args {
    const char *mmproj, *proj_path, *image, *out, *model;
    bool want_features, want_imp;
    int pool, n_threads;
    vs_preproc_mode mode;
} embed_args;

/* --preproc llava|llamacpp: sets the vs_preproc_mode at dst. */
static bool parse_preproc(const char *cmd, const char *flag, const char *v, void *dst) {
    if (!strcmp(v, "llava") || !strcmp(v, "llamacpp")) {
        *(vs_preproc_mode *)dst = !strcmp(v, "llava") ? VS_PREPROC_LLAVA : VS_PREPROC_LLAMACPP;
        return true;
    }
    cli_fail(cmd, "%s expects llava or llamacpp, got '%s'", flag, v);
    return false;
}

/* Returns -1 when the options are fine, else the exit status. */
static int embed_parse(int argc, char **argv, embed_args *a) {
    memset(a, 0, sizeof(*a));
    a->pool = 1, a->n_threads = default_threads();
    a->mode = VS_PREPROC_LLAVA;
    cli_flags fs = {0};
    cli_flag_add(&fs, "--mmproj", CLI_STR, &a->mmproj, 0, 0);
    cli_flag_add(&fs, "--projector", CLI_STR, &a->proj_path, 0, 0);
    cli_flag_add(&fs, "--image", CLI_STR, &a->image, 0, 0);
    cli_flag_add(&fs, "-m|--model", CLI_STR, &a->model, 0, 0);
    cli_flag_add(&fs, "-o|--out", CLI_STR, &a->out, 0, 0);
    cli_flag_add(&fs, "--features", CLI_BOOL, &a->want_features, 0, 0);
    cli_flag_add(&fs, "--importance", CLI_BOOL, &a->want_imp, 0, 0);
    cli_flag_add(&fs, "--pool", CLI_INT, &a->pool, 1, 4096);
    cli_flag_fn_add(&fs, "--preproc", parse_preproc, &a->mode);
    cli_flag_add(&fs, "-t|--threads", CLI_INT, &a->n_threads, 1, 512);
    const int r = cli_flags_parse(CMD, argc, argv, &fs, usage);
    if (r >= 0) return r;
    if (!a->mmproj || !a->image || !a->out)
        return cli_fail(CMD, "--mmproj, --image and -o are required (see --help)"), 2;
    return -1;
}

/* ------------------------------------------------------------------------------------------------
 * the run */

typedef struct embed_result {
    vs_mmproj *m, *pm; /* --mmproj, --projector (or NULL) */
    vs_vision_features f;
    float *rows;
    int64_t n_rows, width, n_patch;
    double t_enc, t_proj;
    double row_norm, text_norm; /* mean L2 norms: image rows, the LM's token embeddings (-m; else 0) */
} embed_result;

/* Mean L2 norm of the rows of path's token_embd.weight, which must be as wide as the image rows. */
static bool text_norm(const char *path, int64_t width, double *out, vs_error *err) {
    vs_gguf *g = vs_gguf_open(path, err);
    if (!g) return false;
    const vs_gguf_tensor *t = vs_gguf_find_tensor(g, "token_embd.weight");
    bool ok = false;
    float *row = NULL;
    if (!t || t->n_dims != 2 || !vs_type_supported(t->type) || t->ne[1] < 1)
        vs_error_set(err, VS_ERR_FORMAT, "%s: no token_embd.weight of a supported type", path);
    else if (t->ne[0] != width)
        vs_error_set(err, VS_ERR_INVALID, "%s: token embeddings of width %lld, image rows of %lld", path,
                     (long long)t->ne[0], (long long)width);
    else if (!(row = vs_malloc((size_t)width * sizeof(float))))
        vs_error_set(err, VS_ERR_NOMEM, "out of memory");
    else {
        const size_t rb = vs_type_row_bytes((vs_type)t->type, width);
        double sum = 0;
        for (int64_t i = 0; i < t->ne[1]; i++) {
            vs_dequantize_row((vs_type)t->type, (const uint8_t *)t->data + (size_t)i * rb, row, width);
            sum += vs_mean_row_norm(row, 1, width);
        }
        *out = sum / (double)t->ne[1];
        ok = true;
    }
    vs_free(row);
    vs_gguf_close(g);
    return ok;
}

/* Opens the files, encodes the image and projects it; false with err set on failure (what was made:
 * embed_result_free). */
static bool embed(const embed_args *a, embed_result *r, vs_error *err) {
    if (!(r->m = vs_mmproj_open(a->mmproj, err))) return false;
    if (!vs_mmproj_tower(r->m)) {
        vs_error_set(err, VS_ERR_INVALID,
                     "%s has no vision tower (projector-only file): pass a full mmproj "
                     "with --mmproj and this one with --projector",
                     a->mmproj);
        return false;
    }
    const vs_vision_projector *pj = vs_mmproj_projector(r->m);
    if (a->proj_path) {
        if (!(r->pm = vs_mmproj_open(a->proj_path, err))) return false;
        pj = vs_mmproj_projector(r->pm);
        if (vs_vision_check_projector(vs_mmproj_tower(r->m), pj, err) != VS_OK) return false;
    }
    vs_threadpool *tp = vs_threadpool_new(a->n_threads, err);
    if (!tp) return false;
    vs_vision_encode_opts o = {.importance = a->want_imp};
    bool ok = false;
    const double t0 = vs_time_now();
    if (vs_vision_encode_file(vs_mmproj_tower(r->m), tp, a->image, a->mode, &o, &r->f, err) != VS_OK) goto done;
    const double t1 = vs_time_now();
    if (vs_vision_embed(pj, tp, &r->f, a->pool, &r->rows, &r->n_rows, err) != VS_OK) goto done;
    r->t_enc = t1 - t0;
    r->t_proj = vs_time_now() - t1;
    r->width = vs_vision_projector_config(pj)->proj_out;
    r->n_patch = vs_vision_features_rows(&r->f);
    r->row_norm = vs_mean_row_norm(r->rows, r->n_rows, r->width);
    ok = !a->model || text_norm(a->model, r->width, &r->text_norm, err);
done:
    vs_threadpool_free(tp);
    return ok;
}

static void embed_result_free(embed_result *r) {
    vs_free(r->rows);
    vs_vision_features_free(&r->f);
    vs_mmproj_free(r->pm);
    vs_mmproj_free(r->m);
}

/* PREFIX.f32 and, when asked for, PREFIX.features.f32 and PREFIX.importance.f32. */
static vs_status write_arrays(const embed_args *a, const embed_result *r, vs_error *err) {
    char path[4096];
    snprintf(path, sizeof(path), "%s.f32", a->out);
    vs_status st = write_f32(path, r->rows, r->n_rows * r->width, err);
    if (st == VS_OK && a->want_features) {
        snprintf(path, sizeof(path), "%s.features.f32", a->out);
        st = write_f32(path, r->f.data, r->n_patch * r->f.width, err);
    }
    if (st == VS_OK && a->want_imp && r->f.importance) {
        snprintf(path, sizeof(path), "%s.importance.f32", a->out);
        st = write_f32(path, r->f.importance, r->n_patch, err);
    }
    return st;
}

/* The description of the outputs, its text (NULL when out of memory). */
static char *describe(const embed_args *a, const embed_result *r, size_t *len) {
    char path[4096];
    vs_json_writer w;
    vs_json_writer_init(&w);
    vs_json_obj_begin(&w);
    vs_json_kv_str(&w, "mmproj", a->mmproj);
    vs_json_kv_str(&w, "projector", a->proj_path ? a->proj_path : a->mmproj);
    vs_json_kv_str(&w, "image", a->image);
    vs_json_kv_str(&w, "preproc", a->mode == VS_PREPROC_LLAVA ? "llava" : "llamacpp");
    vs_json_kv_int(&w, "image_size", vs_mmproj_config(r->m)->image_size);
    vs_json_key(&w, "grid");
    vs_json_arr_begin(&w);
    vs_json_int(&w, r->f.grid_h);
    vs_json_int(&w, r->f.grid_w);
    vs_json_arr_end(&w);
    vs_json_kv_int(&w, "pool", a->pool);
    snprintf(path, sizeof(path), "%s.f32", a->out);
    vs_json_kv_str(&w, "file", path);
    vs_json_kv_int(&w, "rows", r->n_rows);
    vs_json_kv_int(&w, "width", r->width);
    if (a->want_features) {
        vs_json_key(&w, "features");
        vs_json_obj_begin(&w);
        snprintf(path, sizeof(path), "%s.features.f32", a->out);
        vs_json_kv_str(&w, "file", path);
        vs_json_kv_int(&w, "rows", r->n_patch);
        vs_json_kv_int(&w, "width", r->f.width);
        vs_json_obj_end(&w);
    }
    if (a->want_imp && r->f.importance) {
        vs_json_key(&w, "importance");
        vs_json_obj_begin(&w);
        snprintf(path, sizeof(path), "%s.importance.f32", a->out);
        vs_json_kv_str(&w, "file", path);
        vs_json_kv_int(&w, "rows", r->n_patch);
        vs_json_obj_end(&w);
    }
    vs_json_kv_str(&w, "layout",
                   "float32 little-endian, row-major [rows][width]; row r*grid_w+c = patch (r, c) "
                   "of the (pooled) grid");
    vs_json_kv_num(&w, "row_norm", r->row_norm);
    if (a->model) {
        vs_json_kv_str(&w, "model", a->model);
        vs_json_kv_num(&w, "text_norm", r->text_norm);
        vs_json_kv_num(&w, "norm_ratio", r->text_norm > 0 ? r->row_norm / r->text_norm : 0);
    }
    vs_json_kv_int(&w, "threads", a->n_threads);
    vs_json_kv_num(&w, "encode_s", r->t_enc);
    vs_json_kv_num(&w, "project_s", r->t_proj);
    vs_json_obj_end(&w);
    char *json = vs_json_writer_take(&w, len);
    vs_json_writer_free(&w);
    return json;
}

/* PREFIX.json. */
static vs_status write_description(const embed_args *a, const embed_result *r, vs_error *err) {
    char path[4096];
    size_t jlen = 0;
    char *json = describe(a, r, &jlen);
    snprintf(path, sizeof(path), "%s.json", a->out);
    if (!json) return vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory", path);
    json[jlen] = '\n'; /* the writer's buffer keeps room for a terminator */
    vs_status st = vs_write_file(path, json, jlen + 1, err);
    vs_free(json);
    return st;
}

int vs_cmd_embed_image(int argc, char **argv) {
    embed_args a;
    const int st = embed_parse(argc, argv, &a);
    if (st >= 0) return st;
    vs_error err = {0};
    embed_result r = {0};
    int rc = 1;
    if (embed(&a, &r, &err) && write_arrays(&a, &r, &err) == VS_OK && write_description(&a, &r, &err) == VS_OK) {
        fprintf(stderr, "%s: %lld rows x %lld (grid %dx%d, pool %d); encode %.3f s, project %.3f s, %d threads\n",
                a.image, (long long)r.n_rows, (long long)r.width, r.f.grid_h, r.f.grid_w, a.pool, r.t_enc,
                r.t_proj, a.n_threads);
        if (a.model)
            fprintf(stderr, "mean L2 norm: image rows %.4g, %s's token embeddings %.4g: ratio %.4g\n", r.row_norm,
                    a.model, r.text_norm, r.text_norm > 0 ? r.row_norm / r.text_norm : 0.0);
        else
            fprintf(stderr, "mean L2 norm of the image rows: %.4g (-m LM compares with its token embeddings)\n",
                    r.row_norm);
        rc = 0;
    } else {
        cli_fail_err(CMD, &err);
    }
    embed_result_free(&r);
    return rc;
}
