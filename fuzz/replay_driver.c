/* A deterministic stand-in for libFuzzer's main, so every build (gcc included) runs each fuzz entry
 * point in the test suite: every file of the seed corpus as is, then --iterations mutations of them
 * (byte flips, truncations, insertions, splices, interesting integers), seeded for repeatability.
 * Usage: fuzz_X_replay [--iterations N] [--seed S] CORPUS_DIR_OR_FILE... */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct {
    uint8_t *data;
    size_t size;
} blob;

static blob *seeds;
static size_t n_seeds, cap_seeds;

static void add_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    if (n < 0 || n > (64 << 20)) {
        fclose(f);
        return;
    }
    uint8_t *d = malloc((size_t)n + 1);
    if (n && fread(d, 1, (size_t)n, f) != (size_t)n) {
        free(d);
        fclose(f);
        return;
    }
    fclose(f);
    if (n_seeds == cap_seeds) {
        cap_seeds = cap_seeds ? 2 * cap_seeds : 16;
        seeds = realloc(seeds, cap_seeds * sizeof(blob));
    }
    seeds[n_seeds++] = (blob){d, (size_t)n};
}

static void add_path(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return;
    if (!S_ISDIR(st.st_mode)) {
        add_file(path);
        return;
    }
    DIR *dir = opendir(path);
    if (!dir) return;
    struct dirent *e;
    char **names = NULL;
    size_t n = 0;
    while ((e = readdir(dir))) {
        if (e->d_name[0] == '.') continue;
        names = realloc(names, (n + 1) * sizeof(char *));
        names[n] = malloc(strlen(path) + strlen(e->d_name) + 2);
        sprintf(names[n], "%s/%s", path, e->d_name);
        n++;
    }
    closedir(dir);
    /* sorted so the run does not depend on directory order */
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            char *t = names[j];
            names[j] = names[j - 1];
            names[j - 1] = t;
        }
    for (size_t i = 0; i < n; i++) {
        add_file(names[i]);
        free(names[i]);
    }
    free(names);
}

static uint64_t rng_state = 0x853c49e6748fea9bULL;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static const int64_t interesting[] = {0, 1, -1, 0x7f, 0x80, 0xff, 0x7fff, 0xffff, 0x7fffffff, 0xffffffff,
                                      (int64_t)0x7fffffffffffffffLL, 1 << 20, 64, 4096};

int main(int argc, char **argv) {
    long iterations = 10000;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--iterations") && i + 1 < argc) iterations = atol(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) rng_state = strtoull(argv[++i], NULL, 10) | 1;
        else add_path(argv[i]);
    }
    if (n_seeds == 0) {
        static uint8_t empty[1];
        seeds = malloc(sizeof(blob));
        seeds[0] = (blob){empty, 0};
        n_seeds = 1;
    }
    for (size_t i = 0; i < n_seeds; i++) LLVMFuzzerTestOneInput(seeds[i].data, seeds[i].size);
    size_t cap = 1 << 16;
    uint8_t *buf = malloc(cap);
    for (long it = 0; it < iterations; it++) {
        blob *s = &seeds[rnd() % n_seeds];
        size_t n = s->size;
        if (n + 64 > cap) {
            cap = n + 64;
            buf = realloc(buf, cap);
        }
        memcpy(buf, s->data, n);
        int n_mut = 1 + (int)(rnd() % 8);
        for (int m = 0; m < n_mut; m++) {
            switch (rnd() % 6) {
            case 0: /* flip one bit */
                if (n) buf[rnd() % n] ^= (uint8_t)(1u << (rnd() % 8));
                break;
            case 1: /* overwrite one byte */
                if (n) buf[rnd() % n] = (uint8_t)rnd();
                break;
            case 2: /* truncate */
                if (n) n = rnd() % n;
                break;
            case 3: /* insert 8 random bytes */
                if (n + 8 < cap) {
                    size_t at = n ? rnd() % n : 0;
                    memmove(buf + at + 8, buf + at, n - at);
                    for (int k = 0; k < 8; k++) buf[at + k] = (uint8_t)rnd();
                    n += 8;
                }
                break;
            case 4: /* plant an interesting 64-bit integer */
                if (n >= 8) {
                    int64_t v = interesting[rnd() % (sizeof(interesting) / sizeof(interesting[0]))];
                    memcpy(buf + rnd() % (n - 7), &v, 8);
                }
                break;
            case 5: /* plant an interesting 32-bit integer */
                if (n >= 4) {
                    uint32_t v = (uint32_t)interesting[rnd() % 10];
                    memcpy(buf + rnd() % (n - 3), &v, 4);
                }
                break;
            }
        }
        LLVMFuzzerTestOneInput(buf, n);
    }
    printf("fuzz replay: %zu seeds, %ld mutated inputs, no crash\n", n_seeds, iterations);
    free(buf);
    return 0;
}
