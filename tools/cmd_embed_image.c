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

#include "cli.h"
#include "outfile.h"
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

int vs_cmd_embed_image(int argc, char **argv) {
    const char *mmproj = NULL, *proj_path = NULL, *image = NULL, *out = NULL;
    bool want_features = false, want_imp = false;
    int pool = 1, n_threads = default_threads();
    vs_preproc_mode mode = VS_PREPROC_LLAVA;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--mmproj")) {
            if (!(mmproj = cli_value(CMD, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--projector")) {
            if (!(proj_path = cli_value(CMD, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--image")) {
            if (!(image = cli_value(CMD, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--out")) {
            if (!(out = cli_value(CMD, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--features")) {
            want_features = true;
        } else if (!strcmp(a, "--importance")) {
            want_imp = true;
        } else if (!strcmp(a, "--pool")) {
            if (!(v = cli_value(CMD, argc, argv, &i)) || !cli_parse_int(CMD, a, v, 1, 4096, &pool)) return 2;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!(v = cli_value(CMD, argc, argv, &i)) || !cli_parse_int(CMD, a, v, 1, 512, &n_threads))
                return 2;
        } else if (!strcmp(a, "--preproc")) {
            if (!(v = cli_value(CMD, argc, argv, &i))) return 2;
            if (!strcmp(v, "llava"))
                mode = VS_PREPROC_LLAVA;
            else if (!strcmp(v, "llamacpp"))
                mode = VS_PREPROC_LLAMACPP;
            else {
                fprintf(stderr, "vlmspec %s: --preproc expects llava or llamacpp, got '%s'\n", CMD, v);
                return 2;
            }
        } else {
            fprintf(stderr, "vlmspec %s: unknown option '%s' (see --help)\n", CMD, a);
            return 2;
        }
    }
    if (!mmproj || !image || !out) {
        fprintf(stderr, "vlmspec %s: --mmproj, --image and -o are required (see --help)\n", CMD);
        return 2;
    }

    vs_error err = {0};
    int rc = 1;
    vs_mmproj *m = NULL, *pm = NULL;
    vs_threadpool *tp = NULL;
    vs_vision_features f = {0};
    float *rows = NULL;
    int64_t n_rows = 0;
    char *json = NULL;
    char path[4096];
    double t_enc = 0, t_proj = 0;

    if (!(m = vs_mmproj_open(mmproj, &err))) goto done;
    if (!vs_mmproj_tower(m)) {
        vs_error_set(&err, VS_ERR_INVALID,
                     "%s has no vision tower (projector-only file): pass a full mmproj "
                     "with --mmproj and this one with --projector",
                     mmproj);
        goto done;
    }
    const vs_vision_projector *pj = vs_mmproj_projector(m);
    if (proj_path) {
        if (!(pm = vs_mmproj_open(proj_path, &err))) goto done;
        pj = vs_mmproj_projector(pm);
        if (vs_vision_check_projector(vs_mmproj_tower(m), pj, &err) != VS_OK) goto done;
    }
    if (!(tp = vs_threadpool_new(n_threads, &err))) goto done;
    vs_vision_encode_opts o = {.importance = want_imp};
    double t0 = vs_time_now();
    if (vs_vision_encode_file(vs_mmproj_tower(m), tp, image, mode, &o, &f, &err) != VS_OK) goto done;
    double t1 = vs_time_now();
    if (vs_vision_embed(pj, tp, &f, pool, &rows, &n_rows, &err) != VS_OK) goto done;
    t_enc = t1 - t0;
    t_proj = vs_time_now() - t1;
    const int64_t width = vs_vision_projector_config(pj)->proj_out;
    const int64_t n_patch = vs_vision_features_rows(&f);

    snprintf(path, sizeof(path), "%s.f32", out);
    if (write_f32(path, rows, n_rows * width, &err) != VS_OK) goto done;
    if (want_features) {
        snprintf(path, sizeof(path), "%s.features.f32", out);
        if (write_f32(path, f.data, n_patch * f.width, &err) != VS_OK) goto done;
    }
    if (want_imp && f.importance) {
        snprintf(path, sizeof(path), "%s.importance.f32", out);
        if (write_f32(path, f.importance, n_patch, &err) != VS_OK) goto done;
    }

    vs_json_writer w;
    vs_json_writer_init(&w);
    vs_json_obj_begin(&w);
    vs_json_kv_str(&w, "mmproj", mmproj);
    vs_json_kv_str(&w, "projector", proj_path ? proj_path : mmproj);
    vs_json_kv_str(&w, "image", image);
    vs_json_kv_str(&w, "preproc", mode == VS_PREPROC_LLAVA ? "llava" : "llamacpp");
    vs_json_kv_int(&w, "image_size", vs_mmproj_config(m)->image_size);
    vs_json_key(&w, "grid");
    vs_json_arr_begin(&w);
    vs_json_int(&w, f.grid_h);
    vs_json_int(&w, f.grid_w);
    vs_json_arr_end(&w);
    vs_json_kv_int(&w, "pool", pool);
    snprintf(path, sizeof(path), "%s.f32", out);
    vs_json_kv_str(&w, "file", path);
    vs_json_kv_int(&w, "rows", n_rows);
    vs_json_kv_int(&w, "width", width);
    if (want_features) {
        vs_json_key(&w, "features");
        vs_json_obj_begin(&w);
        snprintf(path, sizeof(path), "%s.features.f32", out);
        vs_json_kv_str(&w, "file", path);
        vs_json_kv_int(&w, "rows", n_patch);
        vs_json_kv_int(&w, "width", f.width);
        vs_json_obj_end(&w);
    }
    if (want_imp && f.importance) {
        vs_json_key(&w, "importance");
        vs_json_obj_begin(&w);
        snprintf(path, sizeof(path), "%s.importance.f32", out);
        vs_json_kv_str(&w, "file", path);
        vs_json_kv_int(&w, "rows", n_patch);
        vs_json_obj_end(&w);
    }
    vs_json_kv_str(&w, "layout",
                   "float32 little-endian, row-major [rows][width]; row r*grid_w+c = patch (r, c) "
                   "of the (pooled) grid");
    vs_json_kv_int(&w, "threads", n_threads);
    vs_json_kv_num(&w, "encode_s", t_enc);
    vs_json_kv_num(&w, "project_s", t_proj);
    vs_json_obj_end(&w);
    size_t jlen = 0;
    json = vs_json_writer_take(&w, &jlen);
    vs_json_writer_free(&w);
    snprintf(path, sizeof(path), "%s.json", out);
    if (!json) {
        vs_error_set(&err, VS_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    json[jlen] = '\n'; /* the writer's buffer keeps room for a terminator */
    if (vs_write_file(path, json, jlen + 1, &err) != VS_OK) goto done;
    fprintf(stderr, "%s: %lld rows x %lld (grid %dx%d, pool %d); encode %.3f s, project %.3f s, %d threads\n",
            image, (long long)n_rows, (long long)width, f.grid_h, f.grid_w, pool, t_enc, t_proj, n_threads);
    rc = 0;
done:
    if (rc) cli_fail_err(CMD, &err);
    vs_free(json);
    vs_free(rows);
    vs_vision_features_free(&f);
    vs_threadpool_free(tp);
    vs_mmproj_free(pm);
    vs_mmproj_free(m);
    return rc;
}
