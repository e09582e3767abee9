/* fuzz_dataset: the generated world's dataset reader, vs_world_load, which every user-supplied dataset
 * goes through (`vlmspec train`, `eval`, `data`, `bench spec`, `tokenizer train`), and what the
 * trainer does next with a dataset that loads (train_data: encoding every conversation into LM rows).
 *
 * Input layout: the bytes up to the first '\n' are DIR/world.json (the manifest, one line as
 * vs_world_generate writes it), the rest is DIR/train.jsonl (the records). vs_world_load reads a
 * directory, so both files are written to a private temporary one (one per input, under $TMPDIR,
 * else /dev/shm, else /tmp; removed after the input: libFuzzer exits without running atexit
 * handlers). Checked properties (abort on violation):
 *   - a dataset that fails to load says why, naming the directory;
 *   - a loaded sample is written back by vs_world_sample_to_json, that line loads again, and writing
 *     it once more gives the same bytes (the writer only writes what the reader accepts);
 *   - the checker (expected answer, scoring) copes with every loaded query;
 *   - the training reader either encodes the dataset (with a world-like byte-level BPE tokenizer built
 *     in memory) with consistent counts, or fails saying why; its first batch is drawn when no
 *     image path leaves the directory (an absolute path could name a FIFO or a device). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tokenizer.h"
#include "train_data.h"
#include "world.h"

static const char *g_tmp;
static char g_dir[512];
static char g_manifest[600], g_records[600];
static vs_tokenizer *g_tok;

static void make_dir(void) {
    snprintf(g_dir, sizeof(g_dir), "%s/vlmspec-fuzz-dataset-XXXXXX", g_tmp);
    if (!mkdtemp(g_dir)) {
        perror("fuzz_dataset: mkdtemp");
        abort();
    }
    snprintf(g_manifest, sizeof(g_manifest), "%s/world.json", g_dir);
    snprintf(g_records, sizeof(g_records), "%s/train.jsonl", g_dir);
}

static void remove_dir(void) {
    unlink(g_manifest);
    unlink(g_records);
    rmdir(g_dir);
}

static void setup_once(void) {
    if (g_tmp) return;
    g_tmp = getenv("TMPDIR");
    if (!g_tmp || !g_tmp[0]) g_tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp"; /* tmpfs: no writeback */

    /* The layout `vlmspec tokenizer train` writes (bpe_train.c) without merges: <unk> <s> </s>
     * <image> as control tokens, then the 256 bytes in GPT-2's byte-to-character mapping. */
    static char bc[256][4];
    const char *toks[4 + 256];
    int32_t types[4 + 256];
    static const char *special[4] = {"<unk>", "<s>", "</s>", "<image>"};
    for (int k = 0; k < 4; k++) toks[k] = special[k], types[k] = 3;
    vs_gpt2_byte_texts(bc);
    for (int b = 0; b < 256; b++) {
        toks[4 + b] = bc[b];
        types[4 + b] = 1;
    }
    vs_tokenizer_spec s;
    vs_tokenizer_spec_init(&s);
    s.model = "gpt2";
    s.pre = "gpt-2";
    s.n_vocab = 260;
    s.tokens = toks;
    s.types = types;
    s.bos = 1, s.eos = 2, s.unk = 0;
    s.add_bos = 1, s.add_eos = 0;
    vs_error err = {0};
    if (!(g_tok = vs_tokenizer_new(&s, &err))) {
        fprintf(stderr, "fuzz_dataset: tokenizer: %s\n", err.msg);
        abort();
    }
}

static void put_file(const char *path, const uint8_t *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) {
        perror(path);
        abort();
    }
}

static void check(int cond, const char *what) {
    if (!cond) {
        fprintf(stderr, "fuzz_dataset: property violated: %s\n", what);
        abort();
    }
}

/* to_json -> from_json -> to_json gives the same line. */
static void round_trip(const vs_world_sample *s) {
    size_t n1 = 0, n2 = 0;
    char *j1 = vs_world_sample_to_json(s, &n1);
    check(j1 != NULL, "sample_to_json failed");
    vs_world_sample s2;
    vs_error err = {0};
    vs_status st = vs_world_sample_from_json(j1, n1, NULL, "fuzz-rewrite", &s2, &err);
    if (st != VS_OK) fprintf(stderr, "fuzz_dataset: %s\n  line: %.*s\n", err.msg, (int)n1, j1);
    check(st == VS_OK, "a written sample does not load again");
    char *j2 = vs_world_sample_to_json(&s2, &n2);
    check(j2 && n1 == n2 && memcmp(j1, j2, n1) == 0, "write(load(write(s))) != write(s)");
    vs_free(j2);
    vs_free(j1);
    vs_world_sample_clear(&s2);
}

static void checker(const vs_world_sample *s) {
    for (int t = 0; t < s->n_turns; t++) {
        char buf[128];
        vs_world_verdict v;
        vs_error err = {0};
        if (vs_world_expected(s, t, buf, sizeof(buf), &err) != VS_OK) check(err.msg[0] != 0, "expected: no message");
        vs_world_check(s, t, s->turns[t].assistant, &v);
        vs_world_check(s, t, s->turns[t].answer, &v);
    }
}

static void train_reader(const vs_world_dataset *d, bool images_inside) {
    vs_train_data_opts o = {.seq_len = 2048, .batch = 2, .image_rows = 4, .bucket = 4, .seed = 1};
    o.preproc.size = 8;
    for (int c = 0; c < 3; c++) o.preproc.mean[c] = 0.5f, o.preproc.std[c] = 0.25f;
    vs_error err = {0};
    const vs_world_dataset *sets[1] = {d};
    vs_train_data *td = vs_train_data_new(sets, 1, g_tok, &o, &err);
    if (!td) {
        check(err.msg[0] != 0, "train_data_new: no message");
        return;
    }
    const vs_train_data_stats *S = vs_train_data_get_stats(td);
    int64_t kept = 0;
    for (int k = 0; k < VS_WORLD_N_SUITES; k++) kept += S->kept[k];
    check(S->n_samples == d->n && S->n_seqs + S->n_skipped == S->n_samples && kept == S->n_seqs &&
              vs_train_data_n_seqs(td) == S->n_seqs && S->n_seqs > 0 && S->longest <= o.seq_len,
          "train_data stats");
    for (int64_t i = 0; i < S->n_seqs; i++) check(vs_train_data_sample(td, i) != NULL, "train_data sample");
    int max_B, max_T, max_I;
    vs_train_data_capacity(td, &max_B, &max_T, &max_I);
    check(max_B >= 1 && max_B <= o.batch && max_T == S->longest, "train_data capacity");
    check(vs_train_data_counted_ahead(td, 2) >= 0, "counted_ahead");
    if (images_inside) {
        vs_train_batch b;
        vs_train_batch_info info;
        if (vs_train_data_next(td, &b, &info, &err) == VS_OK) {
            check(b.B >= 1 && b.B <= max_B && b.T >= 1 && b.T <= max_T && info.rows <= (int64_t)b.B * b.T,
                  "batch shape");
            for (int64_t r = 0; r < (int64_t)b.B * b.T; r++)
                if (b.loss_mask[r] != 0) check(b.targets[r] >= 0 && b.targets[r] < 260, "batch target");
        } else {
            check(err.msg[0] != 0, "train_data_next: no message");
        }
    }
    vs_train_data_free(td);
}

static void run(const uint8_t *data, size_t size) {
    const uint8_t *nl = memchr(data, '\n', size);
    size_t nm = nl ? (size_t)(nl - data) : size;
    put_file(g_manifest, data, nm);
    put_file(g_records, nl ? nl + 1 : data + size, nl ? size - nm - 1 : 0);

    vs_error err = {0};
    vs_world_dataset *d = vs_world_load(g_dir, "train", VS_WORLD_ALL_SUITES, &err);
    if (!d) {
        if (!strstr(err.msg, g_dir)) fprintf(stderr, "fuzz_dataset: error without the path: %s\n", err.msg);
        check(strstr(err.msg, g_dir) != NULL, "a load error names the dataset");
        return;
    }
    check(d->image_size >= 32 && d->n >= 0 && (d->n == 0 || d->samples), "dataset header");
    bool images_inside = true;
    size_t nd = strlen(g_dir);
    for (int64_t i = 0; i < d->n; i++) {
        const vs_world_sample *s = &d->samples[i];
        check(s->n_images >= 0 && s->n_images <= VS_WORLD_MAX_IMAGES && s->n_turns >= 1 &&
                  s->n_turns <= VS_WORLD_MAX_TURNS,
              "sample counts");
        for (int k = 0; k < s->n_images; k++)
            if (strncmp(s->images[k], g_dir, nd) != 0 || s->images[k][nd] != '/') images_inside = false;
        round_trip(s);
        checker(s);
        char *p = vs_world_prompt(s, s->n_turns - 1, true);
        check(p != NULL, "prompt");
        vs_free(p);
    }
    train_reader(d, images_inside);
    vs_world_dataset_free(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    setup_once();
    make_dir();
    run(data, size);
    remove_dir();
    return 0;
}
