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


/* The options of `mmproj random`; the tower's sizes are 0 when not given. */
typedef struct random_opts {
    int image_size, patch, width, layers, heads, ffn, proj_dim, proj_hidden;
    bool gelu, proj_only;
    int type; /* -1: not given */
    uint64_t seed;
    const char *out, *tower_from;
} random_opts;

/* Returns -1 when the options are fine, else the exit status. */
static int random_parse(int argc, char **argv, random_opts *o) {
    memset(o, 0, sizeof(*o));
    o->type = -1;
    o->seed = 1;
    cli_flags fs = {0};
    cli_flag_add(&fs, "--image-size", CLI_INT, &o->image_size, 1, 1 << 20);
    cli_flag_add(&fs, "--patch", CLI_INT, &o->patch, 1, 1 << 20);
    cli_flag_add(&fs, "--width", CLI_INT, &o->width, 1, 1 << 20);
    cli_flag_add(&fs, "--layers", CLI_INT, &o->layers, 1, 1 << 20);
    cli_flag_add(&fs, "--heads", CLI_INT, &o->heads, 1, 1 << 20);
    cli_flag_add(&fs, "--ffn", CLI_INT, &o->ffn, 1, 1 << 20);
    cli_flag_add(&fs, "--proj-dim", CLI_INT, &o->proj_dim, 1, 1 << 20);
    cli_flag_add(&fs, "--proj-hidden", CLI_INT, &o->proj_hidden, 1, 1 << 20);
    cli_flag_add(&fs, "--gelu", CLI_BOOL, &o->gelu, 0, 0);
    cli_flag_fn_add(&fs, "--type", cli_flag_weight_type, &o->type);
    cli_flag_add(&fs, "--seed", CLI_U64, &o->seed, 0, 9.3e18);
    cli_flag_add(&fs, "--tower-from", CLI_STR, &o->tower_from, 0, 0);
    cli_flag_add(&fs, "--projector-only", CLI_BOOL, &o->proj_only, 0, 0);
    cli_flag_add(&fs, "-o|--output", CLI_STR, &o->out, 0, 0);
    const int r = cli_flags_parse(CMD, argc, argv, &fs, usage);
    if (r >= 0)
        return r;
    if (!o->out)
        return cli_fail(CMD, "random: -o OUT is required"), 2;
    if (!o->proj_dim)
        return cli_fail(CMD, "random: --proj-dim D (the LM's embedding width) is required"), 2;
    if (o->proj_only && !o->tower_from)
        return cli_fail(CMD, "random: --projector-only needs --tower-from FILE"), 2;
    return -1;
}

/* The tower config of --tower-from's file into *c (the tower flags given must agree with it), its matrix
 * type into *type and its hash into *hash. Returns -1 when fine, else the exit status (reported). */
static int config_from_tower(const random_opts *o, vs_mmproj *src, vs_vision_config *c, int *type,
                             uint64_t *hash) {
    if (!vs_mmproj_tower(src))
        return cli_fail(CMD, "--tower-from %s: the file has no vision tower (projector-only)", o->tower_from);
    const vs_vision_config *s = vs_mmproj_config(src);
    struct {
        const char *flag;
        int given, have;
    } chk[] = {{"--image-size", o->image_size, s->image_size},
               {"--patch", o->patch, s->patch_size},
               {"--width", o->width, s->width},
               {"--layers", o->layers, s->n_blocks},
               {"--heads", o->heads, s->n_heads},
               {"--ffn", o->ffn, s->ffn}};
    for (size_t k = 0; k < sizeof(chk) / sizeof(chk[0]); k++)
        if (chk[k].given && chk[k].given != chk[k].have)
            return cli_fail(CMD, "%s %d disagrees with the tower of %s (%d): omit it with --tower-from",
                            chk[k].flag, chk[k].given, o->tower_from, chk[k].have),
                   2;
    if (o->gelu && !s->use_gelu)
        return cli_fail(CMD, "--gelu disagrees with the tower of %s (quick-GELU)", o->tower_from), 2;
    vs_error err = {0};
    const int st = tower_matrix_type(o->tower_from, &err);
    if (st < 0)
        return cli_fail_err(CMD, &err);
    if (o->type >= 0 && o->type != st)
        return cli_fail(CMD, "--type %s: the tower of %s is %s; another type would change the tower (omit --type)",
                        vs_type_name(o->type), o->tower_from, vs_type_name(st)),
               2;
    *type = st;
    *c = *s;
    *hash = vs_vision_tower_hash(vs_mmproj_tower(src));
    return -1;
}

/* The tower config from the flags (all of them required) into *c; F32 unless --type. Returns -1 when
 * fine, else the exit status (reported). */
static int config_from_flags(const random_opts *o, vs_vision_config *c, int *type) {
    const char *missing = !o->image_size ? "--image-size"
                          : !o->patch    ? "--patch"
                          : !o->width    ? "--width"
                          : !o->layers   ? "--layers"
                          : !o->heads    ? "--heads"
                          : !o->ffn      ? "--ffn"
                                         : NULL;
    if (missing)
        return cli_fail(CMD, "random: %s is required (or --tower-from FILE)", missing), 2;
    c->image_size = o->image_size, c->patch_size = o->patch, c->width = o->width, c->n_blocks = o->layers;
    c->n_heads = o->heads, c->ffn = o->ffn, c->use_gelu = o->gelu, c->projection_dim = o->width;
    c->has_tower = true;
    *type = o->type >= 0 ? o->type : VS_TYPE_F32;
    return -1;
}

/* Copies the tower of src_w (config s) over the random one in w; the projector stays as it is. */
static void copy_tower(vs_vision_weights *w, const vs_vision_weights *src_w, const vs_vision_config *s) {
    const size_t W = (size_t)s->width, F = (size_t)s->ffn, P = (size_t)s->patch_size;
    const size_t T = (size_t)vs_vision_n_patches(s) + 1;
#define CP(dst, srcp, n) memcpy((dst), (srcp), sizeof(float) * (n))
    CP(w->class_embd, src_w->class_embd, W);
    CP(w->patch_w, src_w->patch_w, W * 3 * P * P);
    CP(w->pos_embd, src_w->pos_embd, T * W);
    CP(w->pre_ln_w, src_w->pre_ln_w, W);
    CP(w->pre_ln_b, src_w->pre_ln_b, W);
    for (int b = 0; b < s->n_blocks; b++) {
        vs_vision_block_weights *d = &w->blocks[b];
        const vs_vision_block_weights *e = &src_w->blocks[b];
        CP(d->ln1_w, e->ln1_w, W), CP(d->ln1_b, e->ln1_b, W), CP(d->ln2_w, e->ln2_w, W);
        CP(d->ln2_b, e->ln2_b, W), CP(d->q_w, e->q_w, W * W), CP(d->q_b, e->q_b, W);
        CP(d->k_w, e->k_w, W * W), CP(d->k_b, e->k_b, W), CP(d->v_w, e->v_w, W * W);
        CP(d->v_b, e->v_b, W), CP(d->o_w, e->o_w, W * W), CP(d->o_b, e->o_b, W);
        CP(d->fc1_w, e->fc1_w, F * W), CP(d->fc1_b, e->fc1_b, F), CP(d->fc2_w, e->fc2_w, W * F);
        CP(d->fc2_b, e->fc2_b, W);
    }
    if (s->post_ln) CP(w->post_ln_w, src_w->post_ln_w, W), CP(w->post_ln_b, src_w->post_ln_b, W);
#undef CP
}

/* Writes the file, reads it back (the copied tower must hash like the source's, a projector-only file
 * must fit the source's tower; otherwise the file is removed) and reports it. Returns the exit status. */
static int write_checked(const random_opts *o, vs_mmproj *src, const vs_vision_config *c,
                         const vs_vision_weights *w, int type, uint64_t src_hash) {
    vs_error err = {0};
    vs_mmproj_write_opts wo = {
        .mat_type = (vs_type)type, .tower_hash = o->proj_only ? src_hash : 0, .name = "vlmspec random mmproj"};
    if (vs_mmproj_write(o->out, c, w, &wo, &err))
        return cli_fail_err(CMD, &err);
    vs_mmproj *chk = vs_mmproj_open(o->out, &err);
    if (!chk)
        return cli_fail_err(CMD, &err);
    if (src && !o->proj_only) {
        uint64_t h = vs_vision_tower_hash(vs_mmproj_tower(chk));
        if (h != src_hash) {
            vs_mmproj_free(chk);
            remove_written(o->out);
            return cli_fail(CMD,
                            "%s: the written tower's hash %016llx differs from %s's %016llx (the tower did not "
                            "survive the copy; file removed)",
                            o->out, (unsigned long long)h, o->tower_from, (unsigned long long)src_hash);
        }
    } else if (src && o->proj_only &&
               vs_vision_check_projector(vs_mmproj_tower(src), vs_mmproj_projector(chk), &err)) {
        vs_mmproj_free(chk);
        remove_written(o->out);
        return cli_fail_err(CMD, &err);
    }
    int64_t nt, np;
    param_counts(c, &nt, &np);
    fprintf(stderr,
            "wrote %s: %s%s, %d x %d image, width %d, %d blocks, projector %d -> %d -> %d, %s, "
            "%lld parameters",
            o->out, c->has_tower ? "tower + projector" : "projector-only", src ? " (tower of source)" : "",
            c->image_size, c->image_size, c->width, c->n_blocks, c->width, c->proj_hidden, c->proj_out,
            vs_type_name(type), (long long)(nt + np));
    if (src)
        fprintf(stderr, ", tower hash %016llx", (unsigned long long)src_hash);
    fprintf(stderr, "\n");
    vs_mmproj_free(chk);
    return 0;
}

/* Builds the config and the random weights (the tower copied from src when given) and writes them.
 * Returns the exit status. */
static int random_build(const random_opts *o, vs_mmproj *src) {
    vs_vision_config c;
    vs_vision_config_llava15(&c);
    int type = -1;
    uint64_t src_hash = 0;
    int rc = src ? config_from_tower(o, src, &c, &type, &src_hash) : config_from_flags(o, &c, &type);
    if (rc >= 0)
        return rc;
    c.proj_out = o->proj_dim;
    c.proj_hidden = o->proj_hidden ? o->proj_hidden : o->proj_dim;
    if (o->proj_only)
        c.has_tower = false;
    vs_error err = {0};
    if (vs_vision_config_check(&c, o->out, &err))
        return cli_fail_err(CMD, &err), 2;
    vs_vision_weights w, src_w;
    memset(&w, 0, sizeof(w));
    memset(&src_w, 0, sizeof(src_w));
    bool have_w = false, have_src_w = false;
    rc = 1;
    if (vs_vision_weights_alloc(&w, &c, &err))
        goto fail;
    have_w = true;
    vs_vision_weights_randomize(&w, &c, o->seed);
    if (src) {
        /* the source's tower replaces the random one (the projector stays random) */
        if (vs_mmproj_read_weights(src, &src_w, &err))
            goto fail;
        have_src_w = true;
        if (!o->proj_only)
            copy_tower(&w, &src_w, vs_mmproj_config(src));
    }
    rc = write_checked(o, src, &c, &w, type, src_hash);
    goto done;
fail:
    cli_fail_err(CMD, &err);
done:
    if (have_w)
        vs_vision_weights_free(&w, &c);
    if (have_src_w)
        vs_vision_weights_free(&src_w, vs_mmproj_config(src));
    return rc;
}

static int cmd_random(int argc, char **argv) {
    random_opts o;
    const int st = random_parse(argc, argv, &o);
    if (st >= 0)
        return st;
    vs_error err = {0};
    vs_mmproj *src = NULL;
    if (o.tower_from && !(src = vs_mmproj_open(o.tower_from, &err)))
        return cli_fail_err(CMD, &err);
    const int rc = random_build(&o, src);
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
