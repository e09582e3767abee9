/* cli_vision: the vision CLI end to end on tiny random models made in a temp directory.
 *   - `vlmspec mmproj random / info`: a random mmproj; --tower-from copies the tower (same hash), a
 *     --projector-only drafter file records it; flag disagreements and missing flags are usage errors.
 *   - `generate --mmproj --image` (speculative path and target-only path): works, and two different
 *     images give different greedy tokens.
 *   - `embed-image` writes the projected rows (and the features) with the documented sizes.
 *   - `chat` over a scripted stdin (two turns, an /image before each): every turn's reply is exactly
 *     what one `generate` of that turn's full conversation prompt gives (greedy), both target-only and
 *     speculative; turn 2 evaluates fewer rows than the conversation has and (target-only) reuses the
 *     image rows of turn 1; /reset; a bad image path is reported and the chat goes on.
 *   - bad input: corrupt image, more <image> markers than images, projector width != LM width, prompt +
 *     image longer than the context: a clear message and exit status 1 (never a crash). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "testutil.h"

static const char *D; /* temp dir */
static const char *B; /* the CLI */

static char *path_of(const char *name) {
    static char buf[8][1024];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 1024, "%s/%s", D, name);
    return p;
}

/* The whole file as a NUL-terminated string (NULL if unreadable); *n its length. */
static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)sz + 1);
    size_t r = s ? fread(s, 1, (size_t)sz, f) : 0;
    fclose(f);
    if (!s || r != (size_t)sz) {
        free(s);
        return NULL;
    }
    s[sz] = 0;
    if (n)
        *n = (size_t)sz;
    return s;
}

static bool file_contains(const char *path, const char *needle) {
    char *s = slurp(path, NULL);
    bool ok = s && strstr(s, needle);
    free(s);
    return ok;
}

static void write_bytes(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    VT_REQUIRE(f && fwrite(b, 1, n, f) == n && fclose(f) == 0, "write %s", path);
}

/* A w x h binary PPM with deterministic pixels. */
static void write_ppm(const char *path, int w, int h, uint64_t seed) {
    char hdr[64];
    int hl = snprintf(hdr, sizeof(hdr), "P6\n%d %d\n255\n", w, h);
    size_t n = (size_t)hl + (size_t)w * h * 3;
    unsigned char *b = malloc(n);
    memcpy(b, hdr, (size_t)hl);
    vs_rng r;
    vs_rng_seed(&r, seed);
    for (size_t i = (size_t)hl; i < n; i++)
        b[i] = (unsigned char)vs_rng_below(&r, 256);
    write_bytes(path, b, n);
    free(b);
}

/* Parses "[chat] turn N: prompt R rows (I images), reused K, evaluated E" from a stderr file. */
static bool turn_stats(const char *errfile, int turn, long *R, long *K, long *E) {
    char *s = slurp(errfile, NULL);
    if (!s)
        return false;
    char key[64];
    snprintf(key, sizeof(key), "[chat] turn %d: prompt ", turn);
    char *p = strstr(s, key);
    int im = 0;
    bool ok =
        p && sscanf(p + strlen(key), "%ld rows (%d images), reused %ld, evaluated %ld", R, &im, K, E) == 4;
    free(s);
    return ok;
}

/* Parses the speculative part "draft prefill D rows" of turn N's stats line. */
static bool turn_draft_prefill(const char *errfile, int turn, long *DP) {
    char *s = slurp(errfile, NULL);
    if (!s)
        return false;
    char key[64];
    snprintf(key, sizeof(key), "[chat] turn %d: prompt ", turn);
    char *p = strstr(s, key);
    char *q = p ? strstr(p, "draft prefill ") : NULL;
    char *nl = p ? strchr(p, '\n') : NULL;
    bool ok = q && (!nl || q < nl) && sscanf(q + strlen("draft prefill "), "%ld rows", DP) == 1;
    free(s);
    return ok;
}

/* Runs `generate` on a chat turn's dumped prompt with the given images and checks its output equals
 * the prompt + the chat's reply + "\n" (what generate prints). */
static const char *g_lm, *g_mm; /* the model pair check_turn_matches_generate runs */

static void check_turn_matches_generate(const char *prefix, int turn, const char *images, const char *tag) {
    char pf[1024], rf[1024], gf[1024];
    snprintf(pf, sizeof(pf), "%s.turn%d.prompt.txt", prefix, turn);
    snprintf(rf, sizeof(rf), "%s.turn%d.reply.txt", prefix, turn);
    snprintf(gf, sizeof(gf), "%s.turn%d.gen.out", prefix, turn);
    size_t np = 0, nr = 0, ng = 0;
    char *p = slurp(pf, &np), *r = slurp(rf, &nr);
    VT_CHECK(p && r, "%s: turn %d dump files %s, %s", tag, turn, pf, rf);
    if (!p || !r) {
        free(p), free(r);
        return;
    }
    /* generate -md TARGET (the target as its own drafter; greedy speculative = target-only output) */
    int rc = vt_run("%s generate --raw -m %s -md %s --draft 2 --mmproj %s %s --special --temp 0 -n 12 -t 1 -q "
                    "-p \"$(cat %s)\" > %s 2> %s.err",
                    B, g_lm, g_lm, g_mm, images, pf, gf, gf);
    VT_CHECK(rc == 0, "%s: generate of turn %d's prompt exits %d", tag, turn, rc);
    char *g = slurp(gf, &ng);
    bool same = g && ng == np + nr + 1 && !memcmp(g, p, np) && !memcmp(g + np, r, nr) && g[ng - 1] == '\n';
    VT_CHECK(same,
             "%s: turn %d reply (%zu bytes) differs from generate's continuation of the same prompt "
             "(%zu bytes after a %zu-byte prompt)",
             tag, turn, nr, ng > np ? ng - np : 0, np);
    VT_CHECK(nr > 0, "%s: turn %d produced a reply", tag, turn);
    free(p), free(r), free(g);
}

int main(void) {
    B = vt_cli();
    if (access(B, X_OK) != 0) {
        printf("SKIP: %s not built (set VLMSPEC_BIN)\n", B);
        return VT_SKIP_CODE;
    }
    D = vt_tmpdir();
    char lm_path[1024], mm_path[1024];
    snprintf(lm_path, sizeof(lm_path), "%s/lm.gguf", D);
    snprintf(mm_path, sizeof(mm_path), "%s/mm.gguf", D);
    g_lm = lm_path, g_mm = mm_path;
    double t0 = vs_time_now();

    /* --- models --- */
    VT_REQUIRE(
        vt_run("%s model random --dim 64 --layers 2 --heads 4 --ffn 128 --ctx 512 --vocab 400 --type F32 "
               "--std 0.3 --seed 3 -o %s > /dev/null 2>&1",
               B, path_of("lm.gguf")) == 0,
        "random LM");
    VT_REQUIRE(
        vt_run("%s model random --dim 48 --layers 1 --heads 4 --ffn 96 --ctx 512 --vocab 400 --type F32 "
               "--std 0.3 --seed 7 -o %s > /dev/null 2>&1",
               B, path_of("draft.gguf")) == 0,
        "random draft LM");

    /* --- mmproj random / info --- */
    VT_CHECK(vt_run("%s mmproj --help > /dev/null", B) == 0, "mmproj --help");
    VT_CHECK(vt_run("%s chat --help > /dev/null", B) == 0, "chat --help");
    /* the top-level help describes every command: no line is a bare name */
    VT_CHECK(vt_run("%s --help > %s", B, path_of("help.txt")) == 0 && file_contains(path_of("help.txt"), "  serve ") &&
                 vt_run("grep -qE '^  [a-z-]+ *$' %s", path_of("help.txt")) != 0,
             "vlmspec --help lists every command with a description");
    VT_REQUIRE(vt_run("%s mmproj random --image-size 28 --patch 14 --width 32 --layers 2 --heads 4 --ffn 64 "
                      "--proj-dim 64 --seed 11 -o %s 2> /dev/null",
                      B, path_of("mm.gguf")) == 0,
               "mmproj random");
    VT_CHECK(vt_run("%s mmproj random --image-size 28 --patch 14 --width 32 --layers 2 --heads 4 --ffn 64 "
                    "--proj-dim 48 --gelu --type F16 -o %s 2> /dev/null",
                    B, path_of("mm48.gguf")) == 0,
             "mmproj random F16 GELU, width 48");
    VT_CHECK(vt_run("%s mmproj info %s > %s", B, path_of("mm.gguf"), path_of("info.txt")) == 0,
             "mmproj info");
    VT_CHECK(file_contains(path_of("info.txt"), "tower hash") &&
                 file_contains(path_of("info.txt"), "32 -> 64 -> 64"),
             "info prints the hash and the projector shape");
    /* drafter files sharing the tower: a full copy and a projector-only one */
    VT_CHECK(vt_run("%s mmproj random --tower-from %s --proj-dim 48 --seed 5 -o %s 2> /dev/null", B,
                    path_of("mm.gguf"), path_of("mmd_full.gguf")) == 0,
             "--tower-from");
    VT_CHECK(vt_run("%s mmproj random --tower-from %s --proj-dim 48 --projector-only -o %s 2> /dev/null", B,
                    path_of("mm.gguf"), path_of("mmd.gguf")) == 0,
             "--tower-from --projector-only");
    {
        VT_CHECK(vt_run("%s mmproj info %s > %s", B, path_of("mmd_full.gguf"), path_of("info2.txt")) == 0,
                 "info 2");
        VT_CHECK(vt_run("%s mmproj info %s > %s", B, path_of("mmd.gguf"), path_of("info3.txt")) == 0,
                 "info 3");
        char *a = slurp(path_of("info.txt"), NULL), *b = slurp(path_of("info2.txt"), NULL),
             *c = slurp(path_of("info3.txt"), NULL);
        const char *ha = a ? strstr(a, "tower hash") : NULL, *hb = b ? strstr(b, "tower hash") : NULL,
                   *hc = c ? strstr(c, "tower hash") : NULL;
        VT_CHECK(ha && hb && hc && !strncmp(ha, hb, 28) && !strncmp(ha, hc, 28),
                 "the copied tower and the recorded hash equal the source's");
        free(a), free(b), free(c);
    }
    VT_CHECK(vt_run("%s mmproj random --tower-from %s --width 16 --proj-dim 48 -o %s 2> %s", B,
                    path_of("mm.gguf"), path_of("x.gguf"), path_of("e.txt")) == 2 &&
                 file_contains(path_of("e.txt"), "--width"),
             "--tower-from with a disagreeing --width is a usage error");
    VT_CHECK(vt_run("%s mmproj random --tower-from %s --type F16 --proj-dim 48 -o %s 2> /dev/null", B,
                    path_of("mm.gguf"), path_of("x.gguf")) == 2,
             "--tower-from with another --type is refused");
    VT_CHECK(vt_run("%s mmproj random --width 32 --proj-dim 48 -o %s 2> %s", B, path_of("x.gguf"),
                    path_of("e.txt")) == 2 &&
                 file_contains(path_of("e.txt"), "--image-size"),
             "missing flags are named");
    VT_CHECK(vt_run("%s mmproj random --image-size 30 --patch 14 --width 32 --layers 1 --heads 4 --ffn 64 "
                    "--proj-dim 64 -o %s 2> /dev/null",
                    B, path_of("x.gguf")) == 2,
             "image size not a multiple of the patch");
    VT_CHECK(vt_run("%s mmproj info %s 2> /dev/null", B, path_of("missing.gguf")) == 1,
             "info on a missing file");

    /* --- images --- */
    write_ppm(path_of("a.ppm"), 5, 3, 1);
    write_ppm(path_of("b.ppm"), 4, 7, 2);
    const char junk[] = "\x89PNG\r\n\x1a\nthis is not a png at all";
    write_bytes(path_of("bad.png"), junk, sizeof(junk) - 1);

    /* --- embed-image --- */
    VT_CHECK(vt_run("%s embed-image --mmproj %s --image %s -o %s --features --threads 1 > /dev/null 2>&1", B,
                    path_of("mm.gguf"), path_of("a.ppm"), path_of("emb")) == 0,
             "embed-image");
    {
        size_t n = 0, nf = 0;
        char *r = slurp(path_of("emb.f32"), &n), *f = slurp(path_of("emb.features.f32"), &nf);
        VT_CHECK(r && n == 4 * 64 * sizeof(float), "emb.f32: 4 rows of 64 floats (got %zu bytes)", n);
        VT_CHECK(f && nf == 4 * 32 * sizeof(float), "features: 4 patches of 32 floats (got %zu bytes)", nf);
        free(r), free(f);
    }
    VT_CHECK(vt_run("%s embed-image --mmproj %s --image %s -o %s 2> %s", B, path_of("mm.gguf"),
                    path_of("bad.png"), path_of("emb2"), path_of("e.txt")) == 1 &&
                 file_contains(path_of("e.txt"), "bad.png"),
             "embed-image on a corrupt image: exit 1 naming the file");

    /* --- generate with images: different images change the greedy tokens --- */
    const char *q = "\"USER: <image>\nwhat is this? ASSISTANT:\"";
    for (int spec = 0; spec < 2; spec++) {
        const char *extra = spec ? "-md" : "";
        char md[1024];
        snprintf(md, sizeof(md), "%s %s --draft 3", extra, spec ? path_of("draft.gguf") : "");
        if (!spec)
            md[0] = 0;
        int ra =
            vt_run("%s generate --raw -m %s %s --mmproj %s --image %s -p %s --temp 0 -n 16 --ids -q -t 1 > %s 2>&1",
                   B, path_of("lm.gguf"), md, path_of("mm.gguf"), path_of("a.ppm"), q, path_of("ga.out"));
        int rb =
            vt_run("%s generate --raw -m %s %s --mmproj %s --image %s -p %s --temp 0 -n 16 --ids -q -t 1 > %s 2>&1",
                   B, path_of("lm.gguf"), md, path_of("mm.gguf"), path_of("b.ppm"), q, path_of("gb.out"));
        VT_CHECK(ra == 0 && rb == 0, "generate with an image (%s): exit %d, %d", spec ? "-md" : "target only",
                 ra, rb);
        char *a = slurp(path_of("ga.out"), NULL), *b = slurp(path_of("gb.out"), NULL);
        VT_CHECK(a && b && strcmp(a, b) != 0,
                 "generate (%s): two different images gave the same tokens: %s (images ignored?%s)",
                 spec ? "-md" : "target only", a ? a : "?",
                 spec ? "" : " tools/cmd_generate.c's target-only path does not use --mmproj/--image");
        free(a), free(b);
    }

    /* --- chat: target only, two turns with an image each, a bad image path in between, then /reset --- */
    {
        char script[4096];
        snprintf(script, sizeof(script),
                 "/image %s\nhello there\n/image %s\n/image %s\nwhat is it?\n/reset\nagain\n",
                 path_of("a.ppm"), path_of("nope.png"), path_of("b.ppm"));
        write_bytes(path_of("script.txt"), script, strlen(script));
        int rc = vt_run("%s chat -m %s --mmproj %s --temp 0 -n 12 -t 1 --dump %s < %s > %s 2> %s", B,
                        path_of("lm.gguf"), path_of("mm.gguf"), path_of("c"), path_of("script.txt"),
                        path_of("chat.out"), path_of("chat.err"));
        VT_CHECK(rc == 1, "chat with a bad /image path exits 1 at the end (got %d)", rc);
        VT_CHECK(file_contains(path_of("chat.err"), "nope.png") &&
                     file_contains(path_of("chat.err"), "goes on"),
                 "the bad image path is reported and the chat goes on");
        long R1 = 0, K1 = 0, E1 = 0, R2 = 0, K2 = 0, E2 = 0, R3 = 0, K3 = 0, E3 = 0;
        VT_CHECK(turn_stats(path_of("chat.err"), 1, &R1, &K1, &E1), "turn 1 stats line");
        VT_CHECK(turn_stats(path_of("chat.err"), 2, &R2, &K2, &E2), "turn 2 stats line");
        VT_CHECK(turn_stats(path_of("chat.err"), 3, &R3, &K3, &E3), "turn 3 (after /reset) stats line");
        VT_CHECK(K1 == 0 && E1 == R1, "turn 1 evaluates everything (%ld of %ld)", E1, R1);
        VT_CHECK(E2 < R2 && K2 + E2 == R2, "turn 2 evaluated %ld of %ld rows", E2, R2);
        /* the image is in turn 1's prompt: reusing (almost) all of it reuses the image rows */
        VT_CHECK(K2 >= R1 - 1, "turn 2 reused %ld rows, turn 1's prompt had %ld (image rows kept?)", K2, R1);
        VT_CHECK(K3 > 0 && E3 < R3, "after /reset the system prompt stays cached (%ld reused of %ld)", K3,
                 R3);
        char imgs[2048];
        snprintf(imgs, sizeof(imgs), "--image %s", path_of("a.ppm"));
        check_turn_matches_generate(path_of("c"), 1, imgs, "chat");
        snprintf(imgs, sizeof(imgs), "--image %s --image %s", path_of("a.ppm"), path_of("b.ppm"));
        check_turn_matches_generate(path_of("c"), 2, imgs, "chat");
    }

    /* --- chat: speculative (m mode, projector-only drafter over the shared features) --- */
    {
        int rc = vt_run(
            "%s chat -m %s --mmproj %s -md %s --mmproj-draft %s --draft-mode m --draft 3 --temp 0 -n 12 "
            "-t 1 --dump %s < %s > %s 2> %s",
            B, path_of("lm.gguf"), path_of("mm.gguf"), path_of("draft.gguf"), path_of("mmd.gguf"),
            path_of("s"), path_of("script.txt"), path_of("schat.out"), path_of("schat.err"));
        VT_CHECK(rc == 1, "speculative chat exits 1 (bad image path) (got %d)", rc);
        long R1 = 0, K1 = 0, E1 = 0, R2 = 0, K2 = 0, E2 = 0, DP1 = -1, DP2 = -1;
        VT_CHECK(turn_stats(path_of("schat.err"), 1, &R1, &K1, &E1) && K1 == 0 && E1 == R1,
                 "speculative turn 1 evaluates its %ld rows (%ld)", R1, E1);
        VT_CHECK(turn_stats(path_of("schat.err"), 2, &R2, &K2, &E2) && E2 < R2,
                 "speculative turn 2 reuses rows");
        /* turn 1's prompt holds image a (4 rows: 28 / 14 squared): the engine keeps image rows too, so
         * turn 2 reuses all of turn 1's prompt (but its pending last row) and evaluates fewer rows than
         * its prompt has outside image a */
        VT_CHECK(K2 >= R1 - 1,
                 "speculative turn 2 reused %ld rows, turn 1's prompt had %ld (image rows kept?)", K2, R1);
        VT_CHECK(E2 < R2 - 4, "speculative turn 2 evaluated %ld of %ld rows (image a has 4)", E2, R2);
        /* the drafter (m mode: the same row count as the target) also evaluates only new rows */
        VT_CHECK(turn_draft_prefill(path_of("schat.err"), 1, &DP1) && DP1 == R1 - 1,
                 "turn 1: the drafter evaluates its prompt but the last row (%ld of %ld)", DP1, R1);
        VT_CHECK(turn_draft_prefill(path_of("schat.err"), 2, &DP2) && DP2 >= 0 && DP2 <= R2 - R1,
                 "turn 2: the drafter evaluated %ld prompt rows; only the %ld after turn 1's prompt are new",
                 DP2, R2 - R1);
        VT_CHECK(file_contains(path_of("schat.err"), "tau "), "speculative stats line has tau");
        char imgs[2048];
        snprintf(imgs, sizeof(imgs), "--image %s", path_of("a.ppm"));
        check_turn_matches_generate(path_of("s"), 1, imgs, "speculative chat");
        snprintf(imgs, sizeof(imgs), "--image %s --image %s", path_of("a.ppm"), path_of("b.ppm"));
        check_turn_matches_generate(path_of("s"), 2, imgs, "speculative chat");
        /* both chats decode greedily with the same target: same replies */
        char *a = slurp(path_of("chat.out"), NULL), *b = slurp(path_of("schat.out"), NULL);
        VT_CHECK(a && b && !strcmp(a, b), "target-only and speculative chats give the same replies");
        free(a), free(b);
    }

    /* --- chat: speculative with width-2 token trees: the same replies; bad tree flags are usage errors --- */
    {
        int rc = vt_run(
            "%s chat -m %s --mmproj %s -md %s --mmproj-draft %s --draft-mode m --draft 3 --tree-width 2 "
            "--temp 0 -n 12 -t 1 < %s > %s 2> %s",
            B, path_of("lm.gguf"), path_of("mm.gguf"), path_of("draft.gguf"), path_of("mmd.gguf"),
            path_of("script.txt"), path_of("tchat.out"), path_of("tchat.err"));
        VT_CHECK(rc == 1, "tree chat exits 1 (bad image path) (got %d)", rc);
        char *a = slurp(path_of("chat.out"), NULL), *b = slurp(path_of("tchat.out"), NULL);
        VT_CHECK(a && b && !strcmp(a, b), "target-only and tree-speculative chats give the same replies");
        free(a), free(b);
        VT_CHECK(vt_run("%s chat -m %s --tree-width 2 < /dev/null > /dev/null 2>&1", B, path_of("lm.gguf")) == 2,
                 "--tree-width without a draft model is a usage error");
        VT_CHECK(vt_run("%s chat -m %s -md %s --tree-width 9 < /dev/null > /dev/null 2>&1", B,
                        path_of("lm.gguf"), path_of("draft.gguf")) == 2,
                 "--tree-width 9 is a usage error");
    }

    /* --- bad input --- */
    {
        const char *base = "generate --raw -m";
        /* corrupt image */
        int rc = vt_run("%s %s %s -md %s --draft 2 --mmproj %s --image %s -p %s -n 4 -q 2> %s > /dev/null", B,
                        base, path_of("lm.gguf"), path_of("draft.gguf"), path_of("mm.gguf"),
                        path_of("bad.png"), q, path_of("e.txt"));
        VT_CHECK(rc == 1 && file_contains(path_of("e.txt"), "bad.png"), "corrupt image: exit %d", rc);
        /* more markers than images */
        rc = vt_run("%s %s %s -md %s --draft 2 --mmproj %s --image %s -p \"<image> <image> hi\" -n 4 -q 2> "
                    "%s > /dev/null",
                    B, base, path_of("lm.gguf"), path_of("draft.gguf"), path_of("mm.gguf"), path_of("a.ppm"),
                    path_of("e.txt"));
        VT_CHECK(rc == 1 && file_contains(path_of("e.txt"), "marker"), "2 markers, 1 image: exit %d", rc);
        /* projector width 48 != LM width 64 */
        rc = vt_run("%s %s %s -md %s --draft 2 --mmproj %s --image %s -p %s -n 4 -q 2> %s > /dev/null", B,
                    base, path_of("lm.gguf"), path_of("draft.gguf"), path_of("mm48.gguf"), path_of("a.ppm"),
                    q, path_of("e.txt"));
        VT_CHECK(rc == 1 && file_contains(path_of("e.txt"), "width"), "projector width 48 vs LM 64: exit %d",
                 rc);
        rc = vt_run("%s chat -m %s --mmproj %s < /dev/null 2> %s", B, path_of("lm.gguf"),
                    path_of("mm48.gguf"), path_of("e.txt"));
        VT_CHECK(rc == 1 && file_contains(path_of("e.txt"), "width"),
                 "chat: projector width mismatch: exit %d", rc);
        /* prompt + image longer than the context */
        rc = vt_run("%s %s %s -md %s --draft 2 --mmproj %s --image %s -p %s -n 4 -c 10 -q 2> %s > /dev/null",
                    B, base, path_of("lm.gguf"), path_of("draft.gguf"), path_of("mm.gguf"), path_of("a.ppm"),
                    q, path_of("e.txt"));
        VT_CHECK(rc == 1 && file_contains(path_of("e.txt"), "context"), "prompt + image > context: exit %d",
                 rc);
        /* chat: a turn that does not fit is dropped with a hint, a corrupt image is refused, the chat goes on
         */
        char script[2048];
        snprintf(script, sizeof(script), "/image %s\nhi\n/image %s\n", path_of("bad.png"), path_of("a.ppm"));
        write_bytes(path_of("script2.txt"), script, strlen(script));
        rc = vt_run("%s chat -m %s --mmproj %s -c 12 --temp 0 -n 4 < %s > /dev/null 2> %s", B,
                    path_of("lm.gguf"), path_of("mm.gguf"), path_of("script2.txt"), path_of("e.txt"));
        VT_CHECK(rc == 1 && file_contains(path_of("e.txt"), "bad.png") &&
                     file_contains(path_of("e.txt"), "/reset") &&
                     file_contains(path_of("e.txt"), "never sent"),
                 "chat: corrupt image, context overflow: exit %d", rc);
        rc = vt_run("%s chat -m %s --bogus 2> /dev/null", B, path_of("lm.gguf"));
        VT_CHECK(rc == 2, "chat: unknown flag is a usage error (%d)", rc);
        rc = vt_run("%s chat -m %s --template nope < /dev/null 2> /dev/null", B, path_of("lm.gguf"));
        VT_CHECK(rc == 2, "chat: unknown template (%d)", rc);
        /* generate: --method, --template and flags without effect are usage errors before anything loads */
        static const struct {
            const char *args, *says;
        } usage[] = {{"-md D --method nope -p x", "unknown"},
                     {"-md D --method m -p x", "--mmproj-draft"},
                     {"--method t -p x", "-md"},
                     {"-md D --method t --weights grid -p x", "--method"},
                     {"-md D --mmproj-draft MD --method t -p x", "--mmproj-draft"},
                     {"--template vicuna-short --tokens 1,2", "--template"},
                     {"--template nope -p x", "nope"},
                     {"--tokens 1,x", "--tokens"},
                     {"--draft 3 -p x", "-md"}};
        for (size_t k = 0; k < sizeof(usage) / sizeof(usage[0]); k++) {
            char args[512];
            snprintf(args, sizeof(args), "%s", usage[k].args);
            char *at;
            while ((at = strstr(args, "MD ")) || (at = strstr(args, "D "))) { /* file names, after the check */
                const bool md = at[0] == 'M';
                char rest[512];
                snprintf(rest, sizeof(rest), "%s", at + (md ? 3 : 2));
                snprintf(at, sizeof(args) - (size_t)(at - args), "%s %s", path_of(md ? "mmd.gguf" : "draft.gguf"),
                         rest);
            }
            rc = vt_run("%s generate -m %s %s -n 2 > /dev/null 2> %s", B, path_of("lm.gguf"), args, path_of("e.txt"));
            VT_CHECK(rc == 2 && file_contains(path_of("e.txt"), usage[k].says), "generate %s: exit %d (want 2, '%s')",
                     usage[k].args, rc, usage[k].says);
        }
        rc = vt_run("%s generate -m %s --method ar -p x -n 2 --temp 0 -q > /dev/null 2> %s", B, path_of("lm.gguf"),
                    path_of("e.txt"));
        VT_CHECK(rc == 0, "generate --method ar runs without a drafter (exit %d)", rc);
        /* the chat template is applied to -p by default: the same tokens as the formatted prompt given raw */
        rc = vt_run("%s generate -m %s -p 'hello there' -n 6 --temp 0 --ids -q > %s 2>&1", B, path_of("lm.gguf"),
                    path_of("t1.txt"));
        int rc2 = vt_run("%s generate --raw -m %s -p 'USER: hello there ASSISTANT:' -n 6 --temp 0 --ids -q > %s 2>&1",
                         B, path_of("lm.gguf"), path_of("t2.txt"));
        char *t1 = slurp(path_of("t1.txt"), NULL), *t2 = slurp(path_of("t2.txt"), NULL);
        VT_CHECK(rc == 0 && rc2 == 0 && t1 && t2 && !strcmp(t1, t2), "template by default: '%s' vs raw '%s'",
                 t1 ? t1 : "?", t2 ? t2 : "?");
        free(t1), free(t2);
        /* --json FILE: the text on stdout, the JSON in the file ('-' would replace the text) */
        rc = vt_run("%s generate -m %s -p x -n 3 --temp 0 -q --json %s > %s 2>&1", B, path_of("lm.gguf"),
                    path_of("g.json"), path_of("g.txt"));
        VT_CHECK(rc == 0 && file_contains(path_of("g.json"), "\"tokens\"") && file_contains(path_of("g.txt"), "x") &&
                     !file_contains(path_of("g.txt"), "\"tokens\""),
                 "generate --json FILE: exit %d", rc);
        rc = vt_run("%s generate -m %s --raw --template vicuna -p x -n 2 > /dev/null 2> %s", B, path_of("lm.gguf"),
                    path_of("e.txt"));
        VT_CHECK(rc == 2 && file_contains(path_of("e.txt"), "--raw"), "--raw with --template: exit %d", rc);
        rc = vt_run("echo '/image %s' | %s chat -m %s 2> %s", path_of("a.ppm"), B, path_of("lm.gguf"),
                    path_of("e.txt"));
        VT_CHECK(rc == 1 && file_contains(path_of("e.txt"), "--mmproj"), "chat: /image without --mmproj (%d)",
                 rc);
    }
    /* --- chat with the LLaMA tokenizer (realistic re-tokenisation of replies), if the shared data is here
     * --- */
    const char *sh = vt_shared_dir();
    char pm[1024];
    if (sh)
        snprintf(pm, sizeof(pm), "%s/parity/llama-d128-l2-f16.gguf", sh);
    if (!sh || access(pm, R_OK) != 0) {
        printf("  SKIP (part): chat with the LLaMA tokenizer needs ../shared/testdata/parity\n");
    } else {
        VT_REQUIRE(
            vt_run("%s mmproj random --image-size 28 --patch 14 --width 32 --layers 2 --heads 4 --ffn 64 "
                   "--proj-dim 128 --seed 4 -o %s 2> /dev/null",
                   B, path_of("m128.gguf")) == 0,
            "mmproj for the parity model");
        char script[4096];
        snprintf(script, sizeof(script),
                 "/image %s\nWhat is in the picture?\nTell me more.\n/image %s\nAnd this one?\n",
                 path_of("a.ppm"), path_of("b.ppm"));
        write_bytes(path_of("script3.txt"), script, strlen(script));
        int rc = vt_run("%s chat -m %s --mmproj %s --temp 0 -n 12 -t 1 --dump %s < %s > /dev/null 2> %s", B,
                        pm, path_of("m128.gguf"), path_of("l"), path_of("script3.txt"), path_of("lchat.err"));
        VT_CHECK(rc == 0, "chat with the parity model: exit %d", rc);
        long R1 = 0, K1 = 0, E1 = 0, R2 = 0, K2 = 0, E2 = 0, R3 = 0, K3 = 0, E3 = 0;
        VT_CHECK(turn_stats(path_of("lchat.err"), 1, &R1, &K1, &E1), "turn 1 stats");
        VT_CHECK(turn_stats(path_of("lchat.err"), 2, &R2, &K2, &E2), "turn 2 stats");
        VT_CHECK(turn_stats(path_of("lchat.err"), 3, &R3, &K3, &E3), "turn 3 stats");
        /* turn 1's prompt (image rows included) is reused; the reply's rows too where its text re-tokenises
         * as generated (not when a random model's first token lacks the SentencePiece space) */
        VT_CHECK(K2 >= R1 && E2 < R2, "turn 2 reused %ld rows; turn 1's prompt had %ld", K2, R1);
        VT_CHECK(K3 > K2 && E3 < R3, "turn 3 reused %ld of %ld rows", K3, R3);
        char m128[1024];
        snprintf(m128, sizeof(m128), "%s", path_of("m128.gguf"));
        g_lm = pm, g_mm = m128;
        char imgs[2048];
        snprintf(imgs, sizeof(imgs), "--image %s", path_of("a.ppm"));
        check_turn_matches_generate(path_of("l"), 2, imgs, "llama chat");
        snprintf(imgs, sizeof(imgs), "--image %s --image %s", path_of("a.ppm"), path_of("b.ppm"));
        check_turn_matches_generate(path_of("l"), 3, imgs, "llama chat");
    }
    printf("cli_vision: %.1f s\n", vs_time_now() - t0);
    return vt_finish("cli_vision");
}
