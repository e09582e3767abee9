/* vlmspec mmproj: make and describe LLaVA-style mmproj files.
 *   random  writes a random-weight mmproj (vision tower + MLP projector) for tests, demos and benchmarks;
 *           --tower-from copies another file's tower byte for byte (a drafter's mmproj that shares the
 *           target's tower and gets a new projector, as MASSV and the LLaVA-recipe drafters need) and
 *           checks the written tower's hash against the source's; --projector-only writes no tower and
 *           records the source tower's hash instead.
 *   info    prints the configuration, the tower hash and parameter counts. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "gguf.h"
#include "vision.h"

#define CMD "mmproj"

static void usage(FILE *f) {
    fprintf(f,
            "usage: vlmspec mmproj random --image-size S --patch P --width W --layers L --heads H --ffn F\n"
            "                             --proj-dim D [options] -o OUT\n"
            "       vlmspec mmproj random --tower-from MMPROJ --proj-dim D [options] -o OUT\n"
            "       vlmspec mmproj info FILE\n\n"
            "random: writes a LLaVA-1.5-style mmproj GGUF with random weights (a CLIP ViT tower and the\n"
            "2-layer MLP projector mm.0 -> GELU -> mm.2).\n"
            "  --image-size S        input side in pixels (a multiple of --patch)\n"
            "  --patch P             patch side in pixels\n"
            "  --width W             ViT width (a multiple of --heads)\n"
            "  --layers L            ViT blocks stored (and run)\n"
            "  --heads H             attention heads\n"
            "  --ffn F               ViT MLP hidden width\n"
            "  --proj-dim D          projector output width = the LM's embedding width\n"
            "  --proj-hidden N       projector hidden width (default: --proj-dim)\n"
            "  --gelu                GELU in the ViT blocks (default quick-GELU, like CLIP)\n"
            "  --type T              matrix type F32 (default), F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K or Q6_K\n"
            "                        (block types need row lengths that are multiples of 32, 256 for Q*_K)\n"
            "  --seed S              RNG seed (default 1)\n"
            "  --tower-from FILE     copy the vision tower (config and weights) of this mmproj; the tower\n"
            "                        flags above must then be omitted or agree with it, and --type must be\n"
            "                        the source's matrix type (default: taken from the source). The written\n"
            "                        tower's hash is checked against the source's.\n"
            "  --projector-only      with --tower-from: write no tower, record the source tower's hash\n"
            "                        (vlmspec.vision.tower_hash) so loaders can check the pairing\n"
            "  -o, --output OUT      file to write\n"
            "info:\n"
            "  FILE                  the mmproj to describe (config, tower hash, parameter counts)\n"
            "  -h, --help            this help\n");
}

/* Parameter counts of a config: tower and projector. */
static void param_counts(const vs_vision_config *c, int64_t *tower, int64_t *proj) {
    const int64_t W = c->width, F = c->ffn, P = c->patch_size, G = vs_vision_grid(c);
    int64_t blk = 4 * (W * W + W) + 4 * W + (F * W + F) + (W * F + W);
    *tower = c->has_tower ? W + W * 3 * P * P + (G * G + 1) * W + 2 * W + c->n_blocks * blk : 0;
    *proj =
        (int64_t)c->proj_hidden * W + c->proj_hidden + (int64_t)c->proj_out * c->proj_hidden + c->proj_out;
}

/* ggml type of the tower's first attention matrix (the writer uses one type for all matrices). */
static int tower_matrix_type(const char *path, vs_error *err) {
    vs_gguf *g = vs_gguf_open(path, err);
    if (!g)
        return -1;
    const vs_gguf_tensor *t = vs_gguf_find_tensor(g, "v.blk.0.attn_q.weight");
    int ty = t ? t->type : -1;
    vs_gguf_close(g);
    if (ty < 0)
        vs_error_set(err, VS_ERR_FORMAT, "%s: no tensor v.blk.0.attn_q.weight", path);
    return ty;
}

static int cmd_info(int argc, char **argv) {
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
        if (argv[i][0] == '-')
            return cli_fail(CMD, "info: unknown option '%s' (see vlmspec mmproj --help)", argv[i]), 2;
        if (path)
            return cli_fail(CMD, "info: one FILE only"), 2;
        path = argv[i];
    }
    if (!path)
        return cli_fail(CMD, "info: FILE is required"), 2;
    vs_error err = {0};
    vs_mmproj *m = vs_mmproj_open(path, &err);
    if (!m)
        return cli_fail_err(CMD, &err);
    const vs_vision_config *c = vs_mmproj_config(m);
    int64_t nt, np;
    param_counts(c, &nt, &np);
    printf("file            %s\n", path);
    printf("tower           %s\n", c->has_tower ? "yes" : "no (projector-only)");
    if (c->has_tower) {
        printf("image size      %d (patch %d, grid %d x %d = %d patches)\n", c->image_size, c->patch_size,
               vs_vision_grid(c), vs_vision_grid(c), vs_vision_n_patches(c));
        printf("vit             width %d, %d blocks, %d heads, ffn %d, %s, eps %g\n", c->width, c->n_blocks,
               c->n_heads, c->ffn, c->use_gelu ? "GELU" : "quick-GELU", (double)c->eps);
        printf("mean / std      %.5f %.5f %.5f / %.5f %.5f %.5f\n", (double)c->mean[0], (double)c->mean[1],
               (double)c->mean[2], (double)c->std[0], (double)c->std[1], (double)c->std[2]);
        int ty = tower_matrix_type(path, &err);
        printf("matrix type     %s\n", ty >= 0 ? vs_gguf_ggml_type_name(ty) : "?");
        printf("tower hash      %016llx\n", (unsigned long long)vs_vision_tower_hash(vs_mmproj_tower(m)));
    } else {
        printf("vit width       %d (features it reads)\n", c->width);
        vs_gguf *g = vs_gguf_open(path, &err);
        int64_t h = 0;
        if (g && vs_gguf_get_int(g, "vlmspec.vision.tower_hash", &h) == 1)
            printf("tower hash      %016llx (recorded: the tower it was trained against)\n",
                   (unsigned long long)h);
        else
            printf("tower hash      none recorded\n");
        vs_gguf_close(g);
    }
    printf("projector       mlp %d -> %d -> %d (GELU)\n", c->width, c->proj_hidden, c->proj_out);
    printf("parameters      tower %lld, projector %lld, total %lld\n", (long long)nt, (long long)np,
           (long long)(nt + np));
    vs_mmproj_free(m);
    return 0;
}

/* Removes a file this command wrote and found wrong; only a regular file (never a device node or
 * what a symbolic link points to). */
static void remove_written(const char *path) {
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISREG(st.st_mode)) unlink(path);
}

static int cmd_random(int argc, char **argv) {
    vs_vision_config c;
    vs_vision_config_llava15(&c);
    int image_size = 0, patch = 0, width = 0, layers = 0, heads = 0, ffn = 0, proj_dim = 0, proj_hidden = 0;
    bool gelu = false, proj_only = false;
    int type = -1;
    int64_t seed = 1;
    const char *out = NULL, *tower_from = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--gelu")) {
            gelu = true;
            continue;
        }
        if (!strcmp(a, "--projector-only")) {
            proj_only = true;
            continue;
        }
        if (!(v = cli_value(CMD, argc, argv, &i)))
            return 2;
        struct {
            const char *flag;
            int *dst;
        } ints[] = {{"--image-size", &image_size}, {"--patch", &patch},
                    {"--width", &width},           {"--layers", &layers},
                    {"--heads", &heads},           {"--ffn", &ffn},
                    {"--proj-dim", &proj_dim},     {"--proj-hidden", &proj_hidden}};
        bool done = false;
        for (size_t k = 0; k < sizeof(ints) / sizeof(ints[0]); k++)
            if (!strcmp(a, ints[k].flag)) {
                if (!cli_parse_int(CMD, a, v, 1, 1 << 20, ints[k].dst))
                    return 2;
                done = true;
            }
        if (done)
            continue;
        if (!strcmp(a, "--type")) {
            type = vs_type_from_name(v);
            if (type < 0 || !vs_type_supported(type))
                return cli_fail(CMD, "--type %s: expected F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K or Q6_K", v), 2;
        } else if (!strcmp(a, "--seed")) {
            if (!cli_parse_i64(CMD, a, v, 0, INT64_MAX, &seed))
                return 2;
        } else if (!strcmp(a, "--tower-from")) {
            tower_from = v;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            out = v;
        } else {
            return cli_fail(CMD, "random: unknown option '%s' (see vlmspec mmproj --help)", a), 2;
        }
    }
    if (!out)
        return cli_fail(CMD, "random: -o OUT is required"), 2;
    if (!proj_dim)
        return cli_fail(CMD, "random: --proj-dim D (the LM's embedding width) is required"), 2;
    if (proj_only && !tower_from)
        return cli_fail(CMD, "random: --projector-only needs --tower-from FILE"), 2;

    vs_error err = {0};
    vs_mmproj *src = NULL;
    vs_vision_weights w;
    memset(&w, 0, sizeof(w));
    vs_vision_weights src_w;
    memset(&src_w, 0, sizeof(src_w));
    bool have_w = false, have_src_w = false;
    int rc = 1;
    uint64_t src_hash = 0;
    if (tower_from) {
        if (!(src = vs_mmproj_open(tower_from, &err)))
            return cli_fail_err(CMD, &err);
        if (!vs_mmproj_tower(src)) {
            cli_fail(CMD, "--tower-from %s: the file has no vision tower (projector-only)", tower_from);
            goto done;
        }
        const vs_vision_config *s = vs_mmproj_config(src);
        struct {
            const char *flag;
            int given, have;
        } chk[] = {{"--image-size", image_size, s->image_size},
                   {"--patch", patch, s->patch_size},
                   {"--width", width, s->width},
                   {"--layers", layers, s->n_blocks},
                   {"--heads", heads, s->n_heads},
                   {"--ffn", ffn, s->ffn}};
        for (size_t k = 0; k < sizeof(chk) / sizeof(chk[0]); k++)
            if (chk[k].given && chk[k].given != chk[k].have) {
                cli_fail(CMD, "%s %d disagrees with the tower of %s (%d): omit it with --tower-from",
                         chk[k].flag, chk[k].given, tower_from, chk[k].have);
                rc = 2;
                goto done;
            }
        if (gelu && !s->use_gelu) {
            cli_fail(CMD, "--gelu disagrees with the tower of %s (quick-GELU)", tower_from);
            rc = 2;
            goto done;
        }
        int st = tower_matrix_type(tower_from, &err);
        if (st < 0) {
            cli_fail_err(CMD, &err);
            goto done;
        }
        if (type >= 0 && type != st) {
            cli_fail(CMD,
                     "--type %s: the tower of %s is %s; another type would change the tower (omit --type)",
                     vs_type_name(type), tower_from, vs_type_name(st));
            rc = 2;
            goto done;
        }
        type = st;
        c = *s;
        src_hash = vs_vision_tower_hash(vs_mmproj_tower(src));
    } else {
        const char *missing = !image_size ? "--image-size"
                              : !patch    ? "--patch"
                              : !width    ? "--width"
                              : !layers   ? "--layers"
                              : !heads    ? "--heads"
                              : !ffn      ? "--ffn"
                                          : NULL;
        if (missing)
            return cli_fail(CMD, "random: %s is required (or --tower-from FILE)", missing), 2;
        c.image_size = image_size, c.patch_size = patch, c.width = width, c.n_blocks = layers;
        c.n_heads = heads, c.ffn = ffn, c.use_gelu = gelu, c.projection_dim = width;
        c.has_tower = true;
        if (type < 0)
            type = VS_TYPE_F32;
    }
    c.proj_out = proj_dim;
    c.proj_hidden = proj_hidden ? proj_hidden : proj_dim;
    if (proj_only)
        c.has_tower = false;
    if (vs_vision_config_check(&c, out, &err)) {
        cli_fail_err(CMD, &err);
        rc = 2;
        goto done;
    }
    if (vs_vision_weights_alloc(&w, &c, &err))
        goto fail;
    have_w = true;
    vs_vision_weights_randomize(&w, &c, (uint64_t)seed);
    if (src) {
        /* the source's tower replaces the random one (the projector stays random) */
        if (vs_mmproj_read_weights(src, &src_w, &err))
            goto fail;
        have_src_w = true;
        if (!proj_only) {
            const vs_vision_config *s = vs_mmproj_config(src);
            const size_t W = (size_t)s->width, F = (size_t)s->ffn, P = (size_t)s->patch_size;
            const size_t T = (size_t)vs_vision_n_patches(s) + 1;
#define CP(dst, srcp, n) memcpy((dst), (srcp), sizeof(float) * (n))
            CP(w.class_embd, src_w.class_embd, W);
            CP(w.patch_w, src_w.patch_w, W * 3 * P * P);
            CP(w.pos_embd, src_w.pos_embd, T * W);
            CP(w.pre_ln_w, src_w.pre_ln_w, W);
            CP(w.pre_ln_b, src_w.pre_ln_b, W);
            for (int b = 0; b < s->n_blocks; b++) {
                vs_vision_block_weights *d = &w.blocks[b], *e = &src_w.blocks[b];
                CP(d->ln1_w, e->ln1_w, W), CP(d->ln1_b, e->ln1_b, W), CP(d->ln2_w, e->ln2_w, W);
                CP(d->ln2_b, e->ln2_b, W), CP(d->q_w, e->q_w, W * W), CP(d->q_b, e->q_b, W);
                CP(d->k_w, e->k_w, W * W), CP(d->k_b, e->k_b, W), CP(d->v_w, e->v_w, W * W);
                CP(d->v_b, e->v_b, W), CP(d->o_w, e->o_w, W * W), CP(d->o_b, e->o_b, W);
                CP(d->fc1_w, e->fc1_w, F * W), CP(d->fc1_b, e->fc1_b, F), CP(d->fc2_w, e->fc2_w, W * F);
                CP(d->fc2_b, e->fc2_b, W);
            }
            if (s->post_ln) CP(w.post_ln_w, src_w.post_ln_w, W), CP(w.post_ln_b, src_w.post_ln_b, W);
#undef CP
        }
    }
    vs_mmproj_write_opts wo = {
        .mat_type = (vs_type)type, .tower_hash = proj_only ? src_hash : 0, .name = "vlmspec random mmproj"};
    if (vs_mmproj_write(out, &c, &w, &wo, &err))
        goto fail;

    /* read it back: the tower must hash like the source's */
    vs_mmproj *chk = vs_mmproj_open(out, &err);
    if (!chk)
        goto fail;
    if (src && !proj_only) {
        uint64_t h = vs_vision_tower_hash(vs_mmproj_tower(chk));
        if (h != src_hash) {
            vs_mmproj_free(chk);
            remove_written(out);
            cli_fail(CMD,
                     "%s: the written tower's hash %016llx differs from %s's %016llx (the tower did not "
                     "survive the copy; file removed)",
                     out, (unsigned long long)h, tower_from, (unsigned long long)src_hash);
            goto done;
        }
    } else if (src && proj_only &&
               vs_vision_check_projector(vs_mmproj_tower(src), vs_mmproj_projector(chk), &err)) {
        vs_mmproj_free(chk);
        remove_written(out);
        goto fail;
    }
    int64_t nt, np;
    param_counts(&c, &nt, &np);
    fprintf(stderr,
            "wrote %s: %s%s, %d x %d image, width %d, %d blocks, projector %d -> %d -> %d, %s, "
            "%lld parameters",
            out, c.has_tower ? "tower + projector" : "projector-only", src ? " (tower of source)" : "",
            c.image_size, c.image_size, c.width, c.n_blocks, c.width, c.proj_hidden, c.proj_out,
            vs_type_name(type), (long long)(nt + np));
    if (src)
        fprintf(stderr, ", tower hash %016llx", (unsigned long long)src_hash);
    fprintf(stderr, "\n");
    vs_mmproj_free(chk);
    rc = 0;
    goto done;
fail:
    cli_fail_err(CMD, &err);
done:
    if (have_w)
        vs_vision_weights_free(&w, &c);
    if (have_src_w)
        vs_vision_weights_free(&src_w, vs_mmproj_config(src));
    vs_mmproj_free(src);
    return rc;
}

int vs_cmd_mmproj(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "random"))
        return cmd_random(argc - 1, argv + 1);
    if (!strcmp(argv[1], "info"))
        return cmd_info(argc - 1, argv + 1);
    return cli_fail(CMD, "unknown subcommand '%s': expected random or info", argv[1]), 2;
}
