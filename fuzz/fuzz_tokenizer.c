/* Fuzz target for the tokenizers: arbitrary bytes are tokenised by a small SentencePiece vocabulary and a
 * small byte-level BPE vocabulary (built in memory once), with the first byte choosing the flags, and
 * detokenised whole and streamed in two parts. Checked properties (abort on violation):
 *   - tokenising never fails on any bytes (both vocabularies have every byte token);
 *   - detokenised text is valid UTF-8, and streaming gives the same text as one shot;
 *   - byte-level BPE without special parsing gives back exactly the input bytes' pieces;
 *   - for valid UTF-8 input (without U+2581) and no special parsing, detokenize(tokenize(s)) == s;
 *   - the input read as token ids (mod the vocabulary size) detokenises to valid UTF-8. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

static vs_tokenizer *g_spm, *g_bpe;

static void build_once(void) {
    if (g_spm) return;
    static char bytes[256][8];
    static const char *extra[] = {"\xE2\x96\x81",
                                  "a",
                                  "b",
                                  "\xE2\x96\x81"
                                  "a",
                                  "ab",
                                  "\xE2\x96\x81"
                                  "ab",
                                  "<img>"};
    const char *toks[3 + 256 + 7];
    float scores[3 + 256 + 7] = {0};
    int32_t types[3 + 256 + 7];
    toks[0] = "<unk>", toks[1] = "<s>", toks[2] = "</s>";
    types[0] = 2, types[1] = 3, types[2] = 3;
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], sizeof(bytes[b]), "<0x%02X>", b);
        toks[3 + b] = bytes[b];
        types[3 + b] = 6;
    }
    for (int i = 0; i < 7; i++) toks[259 + i] = extra[i], types[259 + i] = 1, scores[259 + i] = -(float)i;
    types[265] = 4;
    vs_tokenizer_spec s;
    vs_tokenizer_spec_init(&s);
    s.model = "llama";
    s.n_vocab = 266;
    s.tokens = toks;
    s.scores = scores;
    s.types = types;
    s.bos = 1, s.eos = 2, s.unk = 0;
    vs_error err = {0};
    g_spm = vs_tokenizer_new(&s, &err);

    static char bc[256][4];
    const char *btoks[256 + 4];
    int32_t btypes[256 + 4];
    vs_gpt2_byte_texts(bc);
    for (int b = 0; b < 256; b++) {
        btoks[b] = bc[b];
        btypes[b] = 1;
    }
    btoks[256] = "\xC4\xA0t", btoks[257] = "he", btoks[258] = "\xC4\xA0the", btoks[259] = "<|eot|>";
    btypes[256] = btypes[257] = btypes[258] = 1, btypes[259] = 3;
    static const char *merges[] = {"\xC4\xA0 t", "h e", "\xC4\xA0t he"};
    vs_tokenizer_spec_init(&s);
    s.model = "gpt2";
    s.pre = "gpt-2";
    s.n_vocab = 260;
    s.tokens = btoks;
    s.types = btypes;
    s.n_merges = 3;
    s.merges = merges;
    s.eos = 259;
    g_bpe = vs_tokenizer_new(&s, &err);
    if (!g_spm || !g_bpe) {
        fprintf(stderr, "fuzz_tokenizer: vocabulary: %s\n", err.msg);
        abort();
    }
}

static int utf8_ok(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        int l = c < 0x80                   ? 1
                : (c >= 0xC2 && c <= 0xDF) ? 2
                : (c >= 0xE0 && c <= 0xEF) ? 3
                : (c >= 0xF0 && c <= 0xF4) ? 4
                                           : 0;
        if (!l || i + (size_t)l > n) return 0;
        for (int j = 1; j < l; j++)
            if ((p[i + j] & 0xC0) != 0x80) return 0;
        if ((c == 0xE0 && p[i + 1] < 0xA0) || (c == 0xED && p[i + 1] > 0x9F) ||
            (c == 0xF0 && p[i + 1] < 0x90) || (c == 0xF4 && p[i + 1] > 0x8F))
            return 0;
        i += (size_t)l;
    }
    return 1;
}

static void check(int cond, const char *what) {
    if (!cond) {
        fprintf(stderr, "fuzz_tokenizer: property violated: %s\n", what);
        abort();
    }
}

static void run(const vs_tokenizer *t, const char *text, size_t n, int flags) {
    bool add = flags & 1, parse = flags & 2;
    int dflags = VS_DETOK_STRIP_SPACE | ((flags & 4) ? VS_DETOK_RENDER_SPECIAL : 0);
    vs_error err = {0};
    int32_t *ids = NULL;
    int64_t ni = 0;
    check(vs_tokenize_alloc(t, text, n, add, parse, &ids, &ni, &err) == VS_OK, "tokenize failed");
    int32_t small[4];
    int64_t nn = -1;
    vs_status st = vs_tokenize(t, text, n, add, parse, small, 4, &nn, &err);
    check(nn == ni && (ni <= 4 ? st == VS_OK : st == VS_ERR_RANGE), "caller-buffer count");

    size_t len = 0;
    char *one = vs_detokenize(t, ids, ni, dflags, &len, &err);
    check(one && utf8_ok(one, len) && strlen(one) <= len, "detokenize output");

    /* streamed in two parts */
    vs_detok *d = vs_detok_new(t, dflags, &err);
    int64_t cut = (int64_t)((n + (size_t)flags * 7) % (size_t)(ni + 1)); /* a split point */
    size_t m1, m2, m3;
    char *acc = malloc(len + 1);
    const char *c = vs_detok_feed(d, ids, cut, &m1, &err);
    check(c && m1 <= len, "stream part 1");
    memcpy(acc, c, m1);
    c = vs_detok_feed(d, ids ? ids + cut : NULL, ni - cut, &m2, &err);
    check(c && m1 + m2 <= len, "stream part 2");
    memcpy(acc + m1, c, m2);
    c = vs_detok_flush(d, &m3);
    check(m1 + m2 + m3 == len, "stream length");
    memcpy(acc + m1 + m2, c, m3);
    check(!memcmp(acc, one, len), "stream text");
    free(acc);
    vs_detok_free(d);

    if (!parse && !(dflags & VS_DETOK_RENDER_SPECIAL) && utf8_ok(text, n) &&
        !memmem(text, n, "\xE2\x96\x81", 3))
        check(len == n && !memcmp(one, text, n), "round trip of valid UTF-8");
    vs_free(one);
    vs_free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    build_once();
    if (size == 0) return 0;
    int flags = data[0];
    const char *text = (const char *)data + 1;
    size_t n = size - 1;
    if (n > 4096) n = 4096; /* keep each input fast */
    run(g_spm, text, n, flags);
    run(g_bpe, text, n, flags >> 3);

    /* the bytes as token ids */
    int32_t ids[256];
    int64_t k = 0;
    for (size_t i = 0; i + 1 < n && k < 256; i += 2)
        ids[k++] = (int32_t)(((uint8_t)text[i] << 8 | (uint8_t)text[i + 1]) % 266);
    vs_error err = {0};
    size_t len;
    char *s = vs_detokenize(g_spm, ids, k, flags & 6, &len, &err);
    check(s && utf8_ok(s, len), "ids -> valid UTF-8 (spm)");
    vs_free(s);
    for (int64_t i = 0; i < k; i++) ids[i] %= 260;
    s = vs_detokenize(g_bpe, ids, k, flags & 6, &len, &err);
    check(s && utf8_ok(s, len), "ids -> valid UTF-8 (bpe)");
    vs_free(s);
    return 0;
}
