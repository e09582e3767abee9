/* test_tokenizer: SentencePiece and byte-level BPE tokenizers, detokenisation, compatibility checks.
 * - in-memory vocabularies (built with the GGUF writer) with hand-computed tokenisations: score order,
 *   byte fallback, the leading space, merges by rank, special tokens, buffers that are too small;
 * - bad vocabularies (missing / mistyped / inconsistent arrays, merges naming unknown tokens, bad ids,
 *   unknown model or pre-tokeniser) and bad prompts (invalid UTF-8, embedded NUL): an error or a
 *   defined result, never a crash;
 * - streaming detokenisation: held incomplete UTF-8, U+FFFD for invalid bytes, every split point;
 * - the CLI (vlmspec tokenize) on the shared LLaMA vocabulary;
 * - with ../shared/testdata: llama.cpp's test vectors (llama-spm, phi-3, gpt-2, starcoder), the
 *   parity prompts' tokens, round trips of a UTF-8 corpus, draft/target compatibility, and the merge
 *   loop's growth on long inputs. VLMSPEC_BENCH=1 also times ~1 MB of text with the LLaMA vocabulary. */
#include <dirent.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gguf.h"
#include "json.h"
#include "testutil.h"
#include "tokenizer.h"

/* CPU seconds of the calling thread (what the merge-loop bound below compares). */
static double thread_cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---------------------------------------------------------------------------------------------- */
/* helpers */

static const char *esc(const char *s, size_t n) {
    static char buf[4][512];
    static int k;
    char *b = buf[k++ & 3];
    size_t o = 0;
    for (size_t i = 0; i < n && o + 8 < sizeof(buf[0]); i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7F)
            b[o++] = (char)c;
        else
            o += (size_t)snprintf(b + o, sizeof(buf[0]) - o, "\\x%02X", c);
    }
    b[o] = 0;
    return b;
}

static const char *ids_str(const int32_t *ids, int64_t n) {
    static char buf[2][2048];
    static int k;
    char *b = buf[k++ & 1];
    size_t o = 0;
    b[0] = 0;
    for (int64_t i = 0; i < n && o + 16 < sizeof(buf[0]); i++)
        o += (size_t)snprintf(b + o, sizeof(buf[0]) - o, "%s%d", i ? " " : "", ids[i]);
    return b;
}

static bool valid_utf8(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        int l = c < 0x80                   ? 1
                : (c >= 0xC2 && c <= 0xDF) ? 2
                : (c >= 0xE0 && c <= 0xEF) ? 3
                : (c >= 0xF0 && c <= 0xF4) ? 4
                                           : 0;
        if (!l || i + (size_t)l > n) return false;
        for (int j = 1; j < l; j++)
            if ((p[i + j] & 0xC0) != 0x80) return false;
        if (c == 0xE0 && p[i + 1] < 0xA0) return false;
        if (c == 0xED && p[i + 1] > 0x9F) return false;
        if (c == 0xF0 && p[i + 1] < 0x90) return false;
        if (c == 0xF4 && p[i + 1] > 0x8F) return false;
        i += (size_t)l;
    }
    return true;
}

/* Tokenizer from a writer's GGUF image (in memory). NULL + err on failure. */
static vs_tokenizer *tok_from_writer(vs_gguf_writer *w, vs_error *err) {
    uint8_t *data = NULL;
    size_t size = 0;
    if (vs_gguf_write_memory(w, &data, &size, err) != VS_OK) return NULL;
    vs_gguf *g = vs_gguf_open_memory(data, size, "mem.gguf", err);
    vs_tokenizer *t = g ? vs_tokenizer_from_gguf(g, err) : NULL;
    vs_gguf_close(g);
    vs_free(data);
    return t;
}

static int64_t tok(const vs_tokenizer *t, const char *s, size_t n, bool add_special, bool parse_special,
                   int32_t *out, int64_t cap) {
    vs_error err = {0};
    int64_t got = -1;
    vs_status st = vs_tokenize(t, s, n, add_special, parse_special, out, cap, &got, &err);
    VT_CHECK(st == VS_OK, "tokenize '%s': %s", esc(s, n), err.msg);
    return st == VS_OK ? got : -1;
}

#define EXPECT_IDS(t, text, add, parse, ...)                                                                 \
    do {                                                                                                     \
        const int32_t want_[] = {__VA_ARGS__};                                                               \
        int32_t got_[64];                                                                                    \
        int64_t n_ = tok(t, text, strlen(text), add, parse, got_, 64);                                       \
        int64_t nw_ = (int64_t)(sizeof(want_) / sizeof(want_[0]));                                           \
        VT_CHECK(n_ == nw_ && !memcmp(got_, want_, sizeof(want_)), "'%s': got [%s] want [%s]",               \
                 esc(text, strlen(text)), ids_str(got_, n_), ids_str(want_, nw_));                           \
    } while (0)

/* ---------------------------------------------------------------------------------------------- */
/* in-memory vocabularies */

#define U2581 "\xE2\x96\x81"

/* <unk> <s> </s>, 256 byte tokens, then a few scored pieces. */
static vs_gguf_writer *small_spm_writer(void) {
    static const char *extra[] = {U2581, "a", "b", "c", "ab", U2581 "a", U2581 "ab", "bc", "abc", "<image>"};
    static const float extra_score[] = {-1.0f, -2.0f, -2.0f, -2.0f, -0.5f, -0.8f, -0.3f, -0.4f, -0.6f, 0.0f};
    enum { NE = sizeof(extra) / sizeof(extra[0]), N = 3 + 256 + NE };
    static char bytes[256][8];
    const char *toks[N];
    float scores[N];
    int32_t types[N];
    toks[0] = "<unk>", toks[1] = "<s>", toks[2] = "</s>";
    types[0] = 2, types[1] = 3, types[2] = 3;
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], sizeof(bytes[b]), "<0x%02X>", b);
        toks[3 + b] = bytes[b];
        types[3 + b] = 6;
    }
    for (int i = 0; i < N; i++) scores[i] = 0;
    for (int i = 0; i < NE; i++) {
        toks[259 + i] = extra[i];
        scores[259 + i] = extra_score[i];
        types[259 + i] = 1;
    }
    types[N - 1] = 4; /* "<image>" user-defined: always matched */
    vs_gguf_writer *w = vs_gguf_writer_new();
    vs_gguf_set_str(w, "general.architecture", "llama");
    vs_gguf_set_str(w, "tokenizer.ggml.model", "llama");
    vs_gguf_set_arr_str(w, "tokenizer.ggml.tokens", toks, N);
    vs_gguf_set_arr(w, "tokenizer.ggml.scores", VS_GGUF_F32, scores, N);
    vs_gguf_set_arr(w, "tokenizer.ggml.token_type", VS_GGUF_I32, types, N);
    vs_gguf_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    vs_gguf_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    vs_gguf_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    vs_gguf_set_bool(w, "tokenizer.ggml.add_bos_token", true);
    vs_gguf_set_bool(w, "tokenizer.ggml.add_eos_token", false);
    return w;
}
enum { SPM_SP = 259, SPM_A, SPM_B, SPM_C, SPM_AB, SPM_SP_A, SPM_SP_AB, SPM_BC, SPM_ABC, SPM_IMAGE };

/* The 256 byte-level characters (id = byte), then merged pieces, then <|endoftext|>. */
static char g_bytechar[256][4];
static void byte_chars(void) {
    int next = 256;
    for (int b = 0; b < 256; b++) {
        int keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        int cp = keep ? b : next++;
        if (cp < 0x80)
            g_bytechar[b][0] = (char)cp, g_bytechar[b][1] = 0;
        else
            g_bytechar[b][0] = (char)(0xC0 | (cp >> 6)), g_bytechar[b][1] = (char)(0x80 | (cp & 0x3F)),
            g_bytechar[b][2] = 0;
    }
}
#define GDOT "\xC4\xA0" /* byte-level form of ' ' (U+0120) */
static vs_gguf_writer *small_bpe_writer(const char *const *merges, int n_merges) {
    static const char *extra[] = {GDOT "t", "he", GDOT "the", "ll", "<|endoftext|>"};
    enum { NE = sizeof(extra) / sizeof(extra[0]), N = 256 + NE };
    static const char *def_merges[] = {GDOT " t", "h e", GDOT "t he", "l l"};
    byte_chars();
    const char *toks[N];
    int32_t types[N];
    for (int b = 0; b < 256; b++) toks[b] = g_bytechar[b], types[b] = 1;
    for (int i = 0; i < NE; i++) toks[256 + i] = extra[i], types[256 + i] = 1;
    types[N - 1] = 3;
    if (!merges) merges = def_merges, n_merges = 4;
    vs_gguf_writer *w = vs_gguf_writer_new();
    vs_gguf_set_str(w, "tokenizer.ggml.model", "gpt2");
    vs_gguf_set_str(w, "tokenizer.ggml.pre", "gpt-2");
    vs_gguf_set_arr_str(w, "tokenizer.ggml.tokens", toks, N);
    vs_gguf_set_arr(w, "tokenizer.ggml.token_type", VS_GGUF_I32, types, N);
    vs_gguf_set_arr_str(w, "tokenizer.ggml.merges", merges, (uint64_t)n_merges);
    vs_gguf_set_u32(w, "tokenizer.ggml.bos_token_id", N - 1);
    vs_gguf_set_u32(w, "tokenizer.ggml.eos_token_id", N - 1);
    return w;
}
enum { BPE_GT = 256, BPE_HE, BPE_GTHE, BPE_LL, BPE_EOT };

/* ---------------------------------------------------------------------------------------------- */
/* detokenisation checks shared by every vocabulary */

/* detok(ids) must equal want, fed in one go, token by token, and split at every point; every chunk
 * must be valid UTF-8. */
static void check_detok(const vs_tokenizer *t, const int32_t *ids, int64_t n, int flags, const char *want,
                        size_t want_len, const char *what) {
    vs_error err = {0};
    size_t len = 0;
    char *s = vs_detokenize(t, ids, n, flags, &len, &err);
    VT_CHECK(s && len == want_len && !memcmp(s, want, len), "%s: detokenize gave '%s', want '%s' %s", what,
             s ? esc(s, len) : "(null)", esc(want, want_len), err.msg);
    vs_free(s);
    vs_detok *d = vs_detok_new(t, flags, &err);
    VT_REQUIRE(d, "%s", err.msg);
    char *acc = malloc(want_len * 3 + 64);
    int64_t step = n > 64 ? n / 16 : 1; /* long inputs: a sample of split points */
    for (int64_t cut = -1; cut <= n; cut += (cut < 0 ? 1 : step)) {
        vs_detok_reset(d);
        size_t o = 0, m;
        bool ok = true;
        if (cut < 0) { /* one token at a time */
            for (int64_t i = 0; i < n; i++) {
                const char *c = vs_detok_feed(d, ids + i, 1, &m, &err);
                ok = ok && c && valid_utf8(c, m);
                if (c && o + m <= want_len * 3 + 32) memcpy(acc + o, c, m), o += m;
            }
        } else {
            const char *c = vs_detok_feed(d, ids, cut, &m, &err);
            ok = ok && c && valid_utf8(c, m);
            if (c && o + m <= want_len * 3 + 32) memcpy(acc + o, c, m), o += m;
            c = vs_detok_feed(d, ids ? ids + cut : NULL, n - cut, &m, &err);
            ok = ok && c && valid_utf8(c, m);
            if (c && o + m <= want_len * 3 + 32) memcpy(acc + o, c, m), o += m;
        }
        const char *f = vs_detok_flush(d, &m);
        if (o + m <= want_len * 3 + 32) memcpy(acc + o, f, m), o += m;
        VT_CHECK(ok && o == want_len && !memcmp(acc, want, o),
                 "%s: streaming (split %lld) gave '%s', want '%s'", what, (long long)cut, esc(acc, o),
                 esc(want, want_len));
    }
    free(acc);
    vs_detok_free(d);
}

/* tokenize then detokenize (STRIP_SPACE) must give the text back, with and without BOS. */
static void check_round_trip(const vs_tokenizer *t, const char *s, size_t n, const char *what) {
    for (int add = 0; add < 2; add++) {
        int32_t *ids = NULL;
        int64_t ni = 0;
        vs_error err = {0};
        vs_status st = vs_tokenize_alloc(t, s, n, add, false, &ids, &ni, &err);
        VT_CHECK(st == VS_OK, "%s: tokenize '%s': %s", what, esc(s, n), err.msg);
        if (st != VS_OK) continue;
        char label[128];
        snprintf(label, sizeof(label), "%s round trip of '%.40s'%s", what, esc(s, n), add ? " with BOS" : "");
        check_detok(t, ids, ni, VS_DETOK_STRIP_SPACE, s, n, label);
        vs_free(ids);
    }
}

static const char *const CORPUS[] = {
    "Hello world",
    " Hello world",
    "  two leading spaces, trailing two  ",
    "repeated     spaces   and\ttabs\t\t\tand\nnewlines\n\n\r\n",
    "\t",
    "\n",
    " ",
    "caf\xC3\xA9 na\xC3\xAFve r\xC3\xA9sum\xC3\xA9 \xC3\x84pfel",
    "\xC3\xB1\x61nd\xC3\xBA C\xE1\xBB\xAD\x61 Vi\xE1\xBB\x87t",
    "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E\xE3\x81\xAE\xE6\x96\x87\xE7\xAB\xA0 \xE4\xB8\xAD\xE6\x96\x87",
    "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4\xE4\xB8\xAD",
    "emoji \xF0\x9F\xA6\x99\xF0\x9F\x9A\x80 \xF0\x9F\x98\xB6\xE2\x80\x8D\xF0\x9F\x8C\xAB\xEF\xB8\x8F",
    "\xE2\x9C\x85!\xF0\x9F\xA6\x99",
    "numbers 3 33 333 3333 1/2 \xC2\xBD 3.14159 -7e10",
    "code: for (int i = 0; i < n; i++) { x[i] += y[i] * 2; }  // done",
    "I've been 'told he's there, 'RE you sure? We'Ve a'lL",
    "\xD0\xBD\xD0\xB5\xD1\x89\xD0\xBE \xD0\xBD\xD0\xB0",
    "\xD0\x91\xD1\x8A\xD0\xBB\xD0\xB3\xD0\xB0\xD1\x80\xD1\x81\xD0\xBA\xD0\xB8",
    "a",
    "",
};

/* ---------------------------------------------------------------------------------------------- */

static void test_small_spm(void) {
    vs_error err = {0};
    vs_gguf_writer *w = small_spm_writer();
    vs_tokenizer *t = tok_from_writer(w, &err);
    vs_gguf_writer_free(w);
    VT_REQUIRE(t, "small spm: %s", err.msg);
    VT_CHECK(vs_tokenizer_model(t) == VS_TOK_MODEL_SPM, "model");
    VT_CHECK(vs_tokenizer_n_vocab(t) == SPM_IMAGE + 1, "n_vocab %d", vs_tokenizer_n_vocab(t));
    VT_CHECK(vs_tokenizer_bos(t) == 1 && vs_tokenizer_eos(t) == 2 && vs_tokenizer_unk(t) == 0, "special ids");
    VT_CHECK(vs_tokenizer_pad(t) == -1 && vs_tokenizer_eot(t) == -1, "pad/eot absent");
    VT_CHECK(vs_tokenizer_add_bos(t) && !vs_tokenizer_add_eos(t), "flags");
    VT_CHECK(vs_tokenizer_is_eog(t, 2) && !vs_tokenizer_is_eog(t, 1), "eog");
    VT_CHECK(vs_tokenizer_token_type(t, 3 + 'x') == VS_TOKEN_BYTE, "byte type");
    VT_CHECK(vs_tokenizer_token_type(t, -1) == VS_TOKEN_UNDEFINED && !vs_tokenizer_token_text(t, 99999, NULL),
             "out of range accessors");
    VT_CHECK(vs_tokenizer_find(t, U2581 "ab", 5) == SPM_SP_AB && vs_tokenizer_find(t, "zz", 2) == -1, "find");
    size_t l;
    const char *p = vs_tokenizer_token_piece(t, SPM_SP_AB, &l);
    VT_CHECK(l == 3 && !memcmp(p, " ab", 3), "piece of '\\u2581ab' is '%s'", esc(p, l));
    p = vs_tokenizer_token_piece(t, 3 + 0x0A, &l);
    VT_CHECK(l == 1 && p[0] == '\n', "piece of <0x0A>");

    /* score order: "ab" (-0.5) merges before "\u2581a" (-0.8), then "\u2581ab" (-0.3) */
    EXPECT_IDS(t, "ab", false, false, SPM_SP_AB);
    /* "bc" (-0.4) first, then "abc" (-0.6) beats "\u2581a" (-0.8); "\u2581abc" is no token */
    EXPECT_IDS(t, "abc", false, false, SPM_SP, SPM_ABC);
    /* 'd' is not a token: byte fallback <0x64> */
    EXPECT_IDS(t, "a d", false, false, SPM_SP_A, SPM_SP, 3 + 'd');
    EXPECT_IDS(t, "a d", true, false, 1, SPM_SP_A, SPM_SP, 3 + 'd');
    /* a multi-byte character without a token: its UTF-8 bytes */
    EXPECT_IDS(t, "\xC3\xA9", false, false, SPM_SP, 3 + 0xC3, 3 + 0xA9);
    /* special tokens: parsed only on request; the text after one gets the leading space again */
    EXPECT_IDS(t, "<s>a", false, true, 1, SPM_SP_A);
    EXPECT_IDS(t, "a</s>", true, true, 1, SPM_SP_A, 2);
    /* user-defined "<image>" is always matched, like llama.cpp */
    EXPECT_IDS(t, "ab<image>c", false, false, SPM_SP_AB, SPM_IMAGE, SPM_SP, SPM_C);
    EXPECT_IDS(t, "", true, false, 1);
    {
        int32_t none[4];
        VT_CHECK(tok(t, "", 0, false, false, none, 4) == 0, "empty text gives no tokens");
    }

    /* buffer too small: a clear error and the count needed, never a silent truncation */
    int32_t buf[2];
    int64_t n = 0;
    vs_status st = vs_tokenize(t, "a d", 3, true, false, buf, 2, &n, &err);
    VT_CHECK(st == VS_ERR_RANGE && n == 4 && strstr(err.msg, "4 tokens"), "too small: st %d n %lld '%s'", st,
             (long long)n, err.msg);

    /* detokenisation: the leading space is dropped only with VS_DETOK_STRIP_SPACE */
    const int32_t ids[] = {1, SPM_SP_A, SPM_SP, 3 + 'd', 2};
    check_detok(t, ids, 5, VS_DETOK_STRIP_SPACE, "a d", 3, "small spm strip");
    check_detok(t, ids, 5, 0, " a d", 4, "small spm no strip");
    check_detok(t, ids, 5, VS_DETOK_RENDER_SPECIAL, "<s> a d</s>", 11, "small spm render special");
    /* a split UTF-8 character is held until complete; a broken one becomes U+FFFD */
    const int32_t e_acute[] = {3 + 0xC3, 3 + 0xA9};
    check_detok(t, e_acute, 2, 0, "\xC3\xA9", 2, "held sequence");
    const int32_t broken[] = {3 + 0xC3, SPM_A, 3 + 0xFF, 3 + 0xE2, 3 + 0x82, SPM_B, 3 + 0xF0, 3 + 0x9F};
    check_detok(t, broken, 8, 0,
                "\xEF\xBF\xBD"
                "a\xEF\xBF\xBD\xEF\xBF\xBD"
                "b\xEF\xBF\xBD",
                14, "invalid bytes");
    {
        vs_detok *d = vs_detok_new(t, 0, &err);
        size_t m;
        const char *c = vs_detok_feed(d, e_acute, 1, &m, &err);
        VT_CHECK(c && m == 0, "first half of a character is held");
        c = vs_detok_feed(d, e_acute + 1, 1, &m, &err);
        VT_CHECK(c && m == 2 && !memcmp(c, "\xC3\xA9", 2), "completed character is emitted");
        const int32_t bad = 100000;
        VT_CHECK(!vs_detok_feed(d, &bad, 1, &m, &err) && strstr(err.msg, "100000"), "bad id: %s", err.msg);
        vs_detok_free(d);
    }

    /* round trips, including invalid UTF-8 and NUL: bytes come back; invalid ones as U+FFFD */
    for (size_t i = 0; i < VS_ARRAY_LEN(CORPUS); i++)
        check_round_trip(t, CORPUS[i], strlen(CORPUS[i]), "small spm");
    check_round_trip(t, "a\0b\0", 4, "small spm NUL");
    {
        const char bad_text[] = "\xFF\xFE a \xC3 \xE2\x82";
        int32_t *v = NULL;
        int64_t nv = 0;
        VT_CHECK(vs_tokenize_alloc(t, bad_text, sizeof(bad_text) - 1, false, false, &v, &nv, &err) == VS_OK,
                 "invalid UTF-8 prompt: %s", err.msg);
        check_detok(t, v, nv, VS_DETOK_STRIP_SPACE, "\xEF\xBF\xBD\xEF\xBF\xBD a \xEF\xBF\xBD \xEF\xBF\xBD",
                    16, "invalid UTF-8 prompt");
        vs_free(v);
    }
    vs_tokenizer_free(t);
}

static void test_small_bpe(void) {
    vs_error err = {0};
    vs_gguf_writer *w = small_bpe_writer(NULL, 0);
    vs_tokenizer *t = tok_from_writer(w, &err);
    vs_gguf_writer_free(w);
    VT_REQUIRE(t, "small bpe: %s", err.msg);
    VT_CHECK(vs_tokenizer_model(t) == VS_TOK_MODEL_BPE && !strcmp(vs_tokenizer_pre(t), "gpt-2"), "model/pre");
    VT_CHECK(!vs_tokenizer_add_bos(t), "gpt2 does not add BOS by default");
    EXPECT_IDS(t, " the", false, false, BPE_GTHE);
    /* pre-tokeniser pieces "the", " hello": no merge across them */
    EXPECT_IDS(t, "the hello", false, false, 't', BPE_HE, ' ', BPE_HE, BPE_LL, 'o');
    EXPECT_IDS(t, "the<|endoftext|>", false, true, 't', BPE_HE, BPE_EOT);
    EXPECT_IDS(t, "<|endoftext|>", false, false, '<', '|', 'e', 'n', 'd', 'o', 'f', 't', 'e', 'x', 't', '|',
               '>');
    EXPECT_IDS(t, "ll'sll", false, false, BPE_LL, '\'', 's', BPE_LL);
    size_t l;
    const char *p = vs_tokenizer_token_piece(t, BPE_GTHE, &l);
    VT_CHECK(l == 4 && !memcmp(p, " the", 4), "piece of 'Gthe' is '%s'", esc(p, l));
    for (size_t i = 0; i < VS_ARRAY_LEN(CORPUS); i++)
        check_round_trip(t, CORPUS[i], strlen(CORPUS[i]), "small bpe");
    check_round_trip(t, "x\0y", 3, "small bpe NUL");
    {
        const char bad_text[] = "ok \xFF\xC0\x80 \xF0\x9F";
        int32_t *v = NULL;
        int64_t nv = 0;
        VT_CHECK(vs_tokenize_alloc(t, bad_text, sizeof(bad_text) - 1, false, false, &v, &nv, &err) == VS_OK,
                 "invalid UTF-8 prompt: %s", err.msg);
        VT_CHECK(nv == (int64_t)sizeof(bad_text) - 1, "each byte its own token here: %lld", (long long)nv);
        check_detok(t, v, nv, 0, "ok \xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD \xEF\xBF\xBD", 16,
                    "bpe invalid UTF-8");
        vs_free(v);
    }
    /* every pre-tokeniser in the table compiles and round-trips */
    const char *pres[] = {"default", "gpt-2", "starcoder", "llama-bpe", "qwen2", "deepseek-coder"};
    for (size_t k = 0; k < VS_ARRAY_LEN(pres); k++) {
        w = small_bpe_writer(NULL, 0);
        vs_gguf_set_str(w, "tokenizer.ggml.pre", pres[k]);
        vs_tokenizer *u = tok_from_writer(w, &err);
        vs_gguf_writer_free(w);
        VT_CHECK(u, "pre '%s': %s", pres[k], err.msg);
        if (!u) continue;
        for (size_t i = 0; i < VS_ARRAY_LEN(CORPUS); i++)
            check_round_trip(u, CORPUS[i], strlen(CORPUS[i]), pres[k]);
        if (k == 3) EXPECT_IDS(u, " the", false, false, BPE_GTHE); /* llama3: whole-word tokens */
        vs_tokenizer_free(u);
    }
    vs_tokenizer_free(t);
}

/* ---------------------------------------------------------------------------------------------- */
/* bad vocabularies */

static void expect_load_error(vs_gguf_writer *w, const char *needle, const char *what) {
    vs_error err = {0};
    vs_tokenizer *t = tok_from_writer(w, &err);
    VT_CHECK(!t && err.code != VS_OK && strstr(err.msg, needle), "%s: want an error naming '%s', got '%s'",
             what, needle, t ? "(loaded)" : err.msg);
    vs_tokenizer_free(t);
    vs_gguf_writer_free(w);
}

static void test_bad_vocab(void) {
    vs_gguf_writer *w;
    float sc[3] = {0};
    int32_t ty[3] = {1, 1, 1};
    const char *three[] = {"a", "b", "c"};

    w = small_spm_writer();
    vs_gguf_set_str(w, "tokenizer.ggml.model", "bert");
    expect_load_error(w, "bert", "unknown model");

    w = vs_gguf_writer_new();
    vs_gguf_set_str(w, "tokenizer.ggml.model", "llama");
    expect_load_error(w, "tokenizer.ggml.tokens", "missing tokens");

    w = vs_gguf_writer_new();
    vs_gguf_set_str(w, "general.name", "x");
    expect_load_error(w, "tokenizer.ggml.model", "missing model");

    w = small_spm_writer();
    vs_gguf_set_arr(w, "tokenizer.ggml.scores", VS_GGUF_F32, sc, 3);
    expect_load_error(w, "tokenizer.ggml.scores", "scores length");

    w = small_spm_writer();
    vs_gguf_set_arr(w, "tokenizer.ggml.token_type", VS_GGUF_I32, ty, 3);
    expect_load_error(w, "tokenizer.ggml.token_type", "types length");

    w = small_spm_writer();
    vs_gguf_set_arr(w, "tokenizer.ggml.scores", VS_GGUF_I32, ty, 3);
    expect_load_error(w, "tokenizer.ggml.scores", "scores type");

    w = small_spm_writer();
    vs_gguf_set_arr(w, "tokenizer.ggml.tokens", VS_GGUF_I32, ty, 3);
    expect_load_error(w, "tokenizer.ggml.tokens", "tokens type");

    w = small_spm_writer();
    vs_gguf_set_arr_str(w, "tokenizer.ggml.tokens", three, 0);
    expect_load_error(w, "tokenizer.ggml.tokens", "empty tokens");

    w = small_spm_writer();
    vs_gguf_set_u32(w, "tokenizer.ggml.bos_token_id", 123456);
    expect_load_error(w, "bos_token_id", "bos out of range");

    w = small_spm_writer();
    vs_gguf_set_str(w, "tokenizer.ggml.eos_token_id", "2");
    expect_load_error(w, "eos_token_id", "eos mistyped");

    w = small_spm_writer();
    vs_gguf_set_i32(w, "tokenizer.ggml.unknown_token_id", -5);
    expect_load_error(w, "unknown_token_id", "negative unk");

    w = small_spm_writer();
    {
        int32_t bad_types[3 + 256 + 10];
        for (int i = 0; i < 269; i++) bad_types[i] = 1;
        bad_types[7] = 42;
        vs_gguf_set_arr(w, "tokenizer.ggml.token_type", VS_GGUF_I32, bad_types, 269);
    }
    expect_load_error(w, "type 42", "bad token type");

    w = small_bpe_writer(NULL, 0);
    vs_gguf_set_str(w, "tokenizer.ggml.pre", "no-such-pre");
    expect_load_error(w, "no-such-pre", "unknown pre");

    {
        const char *m1[] = {GDOT " t", "h zz"};
        expect_load_error(small_bpe_writer(m1, 2), "'zz', which is not a token", "merge with unknown token");
        const char *m2[] = {"t h"}; /* "th" is not a token */
        expect_load_error(small_bpe_writer(m2, 1), "'th', which is not a token", "merge result unknown");
        const char *m3[] = {"nospace"};
        expect_load_error(small_bpe_writer(m3, 1), "not two tokens", "merge without space");
        const char *m4[] = {" t"};
        expect_load_error(small_bpe_writer(m4, 1), "not two tokens", "merge with leading space only");
    }
    w = small_bpe_writer(NULL, 0);
    vs_gguf_set_arr_str(w, "tokenizer.ggml.merges", three, 0);
    {
        /* no merges is a valid (character-level) vocabulary */
        vs_error err = {0};
        vs_tokenizer *t = tok_from_writer(w, &err);
        VT_CHECK(t, "zero merges: %s", err.msg);
        if (t) EXPECT_IDS(t, " the", false, false, ' ', 't', 'h', 'e');
        vs_tokenizer_free(t);
        vs_gguf_writer_free(w);
    }
    {
        w = small_bpe_writer(NULL, 0);
        /* drop the merges key: the writer cannot delete, so build without it */
        vs_gguf_writer_free(w);
        byte_chars();
        const char *toks[256];
        for (int b = 0; b < 256; b++) toks[b] = g_bytechar[b];
        w = vs_gguf_writer_new();
        vs_gguf_set_str(w, "tokenizer.ggml.model", "gpt2");
        vs_gguf_set_arr_str(w, "tokenizer.ggml.tokens", toks, 256);
        expect_load_error(w, "tokenizer.ggml.merges", "gpt2 without merges");
    }
    {
        /* a byte-level vocabulary missing byte tokens: bytes without a token are an error at tokenise
         * time (no UNK), or become UNK */
        const char *toks[] = {"a", "b", GDOT, "<unk>"};
        int32_t types[] = {1, 1, 1, 2};
        w = vs_gguf_writer_new();
        vs_gguf_set_str(w, "tokenizer.ggml.model", "gpt2");
        vs_gguf_set_arr_str(w, "tokenizer.ggml.tokens", toks, 4);
        vs_gguf_set_arr(w, "tokenizer.ggml.token_type", VS_GGUF_I32, types, 4);
        vs_gguf_set_arr_str(w, "tokenizer.ggml.merges", toks, 0);
        vs_error err = {0};
        vs_tokenizer *t = tok_from_writer(w, &err);
        VT_CHECK(t, "tiny gpt2: %s", err.msg);
        if (t) {
            int32_t out[8];
            int64_t n;
            vs_status st = vs_tokenize(t, "a c", 3, false, false, out, 8, &n, &err);
            VT_CHECK(st == VS_ERR_INVALID && strstr(err.msg, "0x63"), "missing byte: %d '%s'", st, err.msg);
            vs_tokenizer_free(t);
        }
        vs_gguf_set_u32(w, "tokenizer.ggml.unknown_token_id", 3);
        t = tok_from_writer(w, &err);
        VT_CHECK(t, "tiny gpt2 with unk: %s", err.msg);
        if (t) EXPECT_IDS(t, "a c", false, false, 0, 2, 3);
        vs_tokenizer_free(t);
        vs_gguf_writer_free(w);
    }
    {
        /* arrays given directly: NULL token text, add_bos without bos */
        const char *toks[] = {"x", NULL};
        vs_tokenizer_spec sp;
        vs_tokenizer_spec_init(&sp);
        sp.model = "llama";
        sp.n_vocab = 2;
        sp.tokens = toks;
        vs_error err = {0};
        VT_CHECK(!vs_tokenizer_new(&sp, &err) && strstr(err.msg, "token 1"), "NULL text: %s", err.msg);
        toks[1] = "y";
        VT_CHECK(!vs_tokenizer_new(&sp, &err) && strstr(err.msg, "bos"), "add_bos without bos: %s", err.msg);
        sp.add_bos = 0;
        vs_tokenizer *t = vs_tokenizer_new(&sp, &err);
        VT_CHECK(t, "minimal spm: %s", err.msg);
        if (t) {
            int32_t out[8];
            int64_t n;
            /* no byte tokens and no UNK: an error naming the problem */
            vs_status st = vs_tokenize(t, "xz", 2, false, false, out, 8, &n, &err);
            VT_CHECK(st == VS_ERR_INVALID && strstr(err.msg, "unknown token"), "no fallback: %s", err.msg);
        }
        vs_tokenizer_free(t);
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* compatibility */

static void test_compat_small(void) {
    vs_error err = {0};
    vs_gguf_writer *w = small_spm_writer();
    vs_tokenizer *a = tok_from_writer(w, &err), *b = tok_from_writer(w, &err);
    VT_REQUIRE(a && b, "%s", err.msg);
    VT_CHECK(vs_tokenizer_compatible(a, b, &err) == VS_OK, "identical: %s", err.msg);
    vs_gguf_set_u32(w, "tokenizer.ggml.eos_token_id", 1);
    vs_tokenizer *c = tok_from_writer(w, &err);
    VT_CHECK(c && vs_tokenizer_compatible(a, c, &err) == VS_ERR_INVALID && strstr(err.msg, "EOS id 2 vs 1"),
             "eos differs: %s", err.msg);
    vs_gguf_writer_free(w);
    w = small_bpe_writer(NULL, 0);
    vs_tokenizer *d = tok_from_writer(w, &err);
    VT_CHECK(d && vs_tokenizer_compatible(a, d, &err) == VS_ERR_INVALID && strstr(err.msg, "model"),
             "model differs: %s", err.msg);
    const char *m[] = {GDOT " t", "l l"};
    vs_gguf_writer_free(w);
    w = small_bpe_writer(m, 2);
    vs_tokenizer *e = tok_from_writer(w, &err);
    VT_CHECK(e && vs_tokenizer_compatible(d, e, &err) == VS_ERR_INVALID && strstr(err.msg, "merges"),
             "merges differ: %s", err.msg);
    vs_gguf_writer_free(w);
    vs_tokenizer_free(a);
    vs_tokenizer_free(b);
    vs_tokenizer_free(c);
    vs_tokenizer_free(d);
    vs_tokenizer_free(e);
}

/* ---------------------------------------------------------------------------------------------- */
/* llama.cpp's test vectors and the shared models */

static vs_tokenizer *load_shared(const char *dir, const char *sub, const char *file) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s/%s", dir, sub, file);
    vs_error err = {0};
    vs_tokenizer *t = vs_tokenizer_load(path, &err);
    VT_CHECK(t, "load %s: %s", path, err.msg);
    return t;
}

static void test_vocab_vectors(const char *dir, const char *name) {
    char path[1024];
    vs_error err = {0};
    vs_tokenizer *t = load_shared(dir, "vocab", name);
    if (!t) return;
    uint8_t *inp = NULL, *outp = NULL;
    size_t ni = 0, no = 0;
    snprintf(path, sizeof(path), "%s/vocab/%s.inp", dir, name);
    VT_REQUIRE(vs_read_file(path, &inp, &ni, &err) == VS_OK, "%s", err.msg);
    snprintf(path, sizeof(path), "%s/vocab/%s.out", dir, name);
    VT_REQUIRE(vs_read_file(path, &outp, &no, &err) == VS_OK, "%s", err.msg);
    static const char SEP[] = "\n__ggml_vocab_test__\n";
    const char *ip = (const char *)inp, *iend = ip + ni;
    char *op = (char *)outp;
    int cases = 0, passed = 0;
    while (op < (char *)outp + no) {
        char *eol = strchr(op, '\n');
        if (!eol) eol = (char *)outp + no;
        *eol = 0;
        const char *sep = memmem(ip, (size_t)(iend - ip), SEP, sizeof(SEP) - 1);
        VT_REQUIRE(sep, "%s: fewer inputs than outputs", name);
        int32_t want[512];
        int64_t nw = 0;
        for (char *q = op; *q;) {
            char *e;
            long v = strtol(q, &e, 10);
            if (e == q) break;
            if (nw < 512) want[nw++] = (int32_t)v;
            q = e;
        }
        int32_t got[512];
        int64_t ng = 0;
        vs_status st = vs_tokenize(t, ip, (size_t)(sep - ip), false, false, got, 512, &ng, &err);
        cases++;
        bool ok = st == VS_OK && ng == nw && !memcmp(got, want, (size_t)nw * sizeof(int32_t));
        passed += ok;
        VT_CHECK(ok, "%s case %d '%s':\n got  [%s]\n want [%s] %s", name, cases, esc(ip, (size_t)(sep - ip)),
                 ids_str(got, ng), ids_str(want, nw), st ? err.msg : "");
        /* and every case round-trips */
        if (st == VS_OK) {
            char label[160];
            snprintf(label, sizeof(label), "%s case %d", name, cases);
            check_detok(t, got, ng, VS_DETOK_STRIP_SPACE, ip, (size_t)(sep - ip), label);
        }
        ip = sep + sizeof(SEP) - 1;
        op = eol + 1;
    }
    printf("%s: %d/%d llama.cpp cases match\n", name, passed, cases);
    VT_CHECK(cases >= 40, "%s: only %d cases read", name, cases);
    vs_free(inp);
    vs_free(outp);
    vs_tokenizer_free(t);
}

static void test_parity_prompts(const char *dir) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/parity", dir);
    DIR *dd = opendir(path);
    VT_REQUIRE(dd, "cannot open %s", path);
    struct dirent *e;
    int files = 0;
    while ((e = readdir(dd))) {
        size_t l = strlen(e->d_name);
        if (l < 6 || strcmp(e->d_name + l - 5, ".json")) continue;
        vs_error err = {0};
        uint8_t *txt = NULL;
        size_t n = 0;
        snprintf(path, sizeof(path), "%s/parity/%s", dir, e->d_name);
        VT_REQUIRE(vs_read_file(path, &txt, &n, &err) == VS_OK, "%s", err.msg);
        vs_json_doc *doc = vs_json_parse((const char *)txt, n, path, &err);
        VT_REQUIRE(doc, "%s", err.msg);
        const vs_json *root = vs_json_root(doc);
        const char *model = vs_json_get_str(root, "model", NULL);
        const char *prompt = vs_json_get_str(root, "prompt", NULL);
        const vs_json *want = vs_json_get(root, "prompt_tokens");
        VT_REQUIRE(model && prompt && want && want->type == VS_JSON_ARRAY, "%s: fields", path);
        vs_tokenizer *t = load_shared(dir, "parity", model);
        if (t) {
            int32_t got[256];
            int64_t ng =
                tok(t, prompt, strlen(prompt), vs_json_get_bool(root, "add_bos", true), false, got, 256);
            bool ok = ng == (int64_t)want->len;
            for (int64_t i = 0; ok && i < ng; i++) ok = got[i] == vs_json_at(want, (size_t)i)->i;
            VT_CHECK(ok, "%s: prompt tokens differ: got [%s]", e->d_name, ids_str(got, ng));
            int32_t *all = NULL;
            int64_t na = 0;
            vs_tokenize_alloc(t, prompt, strlen(prompt), true, false, &all, &na, &err);
            check_detok(t, all, na, VS_DETOK_STRIP_SPACE, prompt, strlen(prompt), e->d_name);
            vs_free(all);
            files++;
            vs_tokenizer_free(t);
        }
        vs_json_doc_free(doc);
        vs_free(txt);
    }
    closedir(dd);
    VT_CHECK(files >= 4, "only %d parity prompts", files);
    printf("parity prompts: %d files checked\n", files);
}

static void test_shared_models(const char *dir) {
    vs_tokenizer *spm = load_shared(dir, "vocab", "ggml-vocab-llama-spm.gguf");
    vs_tokenizer *phi = load_shared(dir, "vocab", "ggml-vocab-phi-3.gguf");
    vs_tokenizer *gpt = load_shared(dir, "vocab", "ggml-vocab-gpt-2.gguf");
    vs_tokenizer *sc = load_shared(dir, "vocab", "ggml-vocab-starcoder.gguf");
    vs_tokenizer *par = load_shared(dir, "parity", "llama-d64-l2-gqa-tied-f32.gguf");
    if (!spm || !phi || !gpt || !sc || !par) goto done;
    vs_error err = {0};

    /* round trips of the corpus for both models (and phi-3 / starcoder) */
    vs_tokenizer *all[] = {spm, phi, gpt, sc};
    const char *names[] = {"llama-spm", "phi-3", "gpt-2", "starcoder"};
    for (int m = 0; m < 4; m++)
        for (size_t i = 0; i < VS_ARRAY_LEN(CORPUS); i++)
            check_round_trip(all[m], CORPUS[i], strlen(CORPUS[i]), names[m]);

    /* LLaMA: BOS / EOS / special parsing, the space after a control token, byte fallback for emoji */
    EXPECT_IDS(spm, "<s>Hello</s>", false, true, 1, 15043, 2);
    EXPECT_IDS(spm, "Hello", true, false, 1, 15043);
    VT_CHECK(vs_tokenizer_is_eog(spm, 2) && !vs_tokenizer_is_eog(spm, 1), "llama eog");
    {
        int32_t ids[16];
        int64_t n = tok(spm, "\xF0\x9F\xA6\x99", 4, false, false, ids, 16); /* llama: no token, 4 bytes */
        VT_CHECK(n == 5 && ids[1] == 3 + 0xF0 && ids[4] == 3 + 0x99, "emoji bytes: [%s]", ids_str(ids, n));
        vs_detok *d = vs_detok_new(spm, VS_DETOK_STRIP_SPACE, &err);
        size_t m;
        vs_detok_feed(d, ids, 4, &m, &err);
        VT_CHECK(m == 0, "3 of 4 emoji bytes are held (%zu bytes out)", m);
        const char *c = vs_detok_feed(d, ids + 4, 1, &m, &err);
        VT_CHECK(m == 4 && !memcmp(c, "\xF0\x9F\xA6\x99", 4), "emoji completes");
        vs_detok_free(d);
    }
    /* Phi-3: "</s>" is user-defined (always matched) and strips the whitespace after it */
    {
        int32_t a[32], b[32];
        int64_t na = tok(phi, "Hi</s>   there", 14, false, false, a, 32);
        int64_t nb = tok(phi, "Hi</s>there", 11, false, false, b, 32);
        VT_CHECK(na == nb && na > 2 && !memcmp(a, b, (size_t)na * 4) && a[1] == 2,
                 "phi-3 rstrip: [%s] vs [%s]", ids_str(a, na), ids_str(b, nb));
        /* EOT found by text (the first of <|endoftext|> 32000, <|end|> 32007 by id); both end generation */
        VT_CHECK(vs_tokenizer_eot(phi) == 32000 && vs_tokenizer_is_eog(phi, 32007) &&
                     vs_tokenizer_is_eog(phi, 32000) && !vs_tokenizer_is_eog(phi, 32010),
                 "phi-3 EOT %d", vs_tokenizer_eot(phi));
        EXPECT_IDS(phi, "<|user|>\nHi<|end|>", false, true, 32010, 6324, 32007);
    }
    /* GPT-2: <|endoftext|> only with parse_special */
    EXPECT_IDS(gpt, "a<|endoftext|>", false, true, 64, 50256);
    {
        int32_t ids[32];
        int64_t n = tok(gpt, "a<|endoftext|>", 14, false, false, ids, 32);
        VT_CHECK(n > 2 && ids[n - 1] != 50256, "not parsed without parse_special: [%s]", ids_str(ids, n));
    }

    /* the CLI prints the same ids (skipped when the binary is not there, e.g. run outside ctest) */
    if (access(vt_cli(), X_OK) != 0) {
        printf("SKIP: CLI checks: %s not found (set VLMSPEC_BIN)\n", vt_cli());
    } else {
        char out[512], cmd[1200];
        snprintf(out, sizeof(out), "%s/tok_ids.txt", vt_tmpdir());
        snprintf(cmd, sizeof(cmd), "%s/vocab/ggml-vocab-llama-spm.gguf", dir);
        int rc = vt_run("%s tokenize -m %s -p 'Hello world' --ids > %s", vt_cli(), cmd, out);
        uint8_t *txt = NULL;
        size_t n = 0;
        VT_CHECK(rc == 0 && vs_read_file(out, &txt, &n, &err) == VS_OK &&
                     !strcmp((char *)txt, "[1, 15043, 3186]\n"),
                 "vlmspec tokenize --ids: rc %d output '%s'", rc, txt ? esc((char *)txt, n) : "");
        vs_free(txt);
        rc = vt_run("%s tokenize -m %s -p x --bogus > /dev/null 2>&1", vt_cli(), cmd);
        VT_CHECK(rc == 2, "unknown flag exits 2 (got %d)", rc);
        rc = vt_run("%s tokenize -m %s/nonexistent.gguf -p x > /dev/null 2>&1", vt_cli(), dir);
        VT_CHECK(rc == 1, "missing model exits 1 (got %d)", rc);
    }

    /* draft/target compatibility */
    VT_CHECK(vs_tokenizer_compatible(spm, par, &err) == VS_OK, "llama-spm vs parity model: %s", err.msg);
    VT_CHECK(vs_tokenizer_compatible(spm, phi, &err) == VS_ERR_INVALID && strstr(err.msg, "32000 vs 32064"),
             "llama vs phi-3: %s", err.msg);
    printf("compatibility message (llama-spm vs phi-3): %s\n", err.msg);
    VT_CHECK(vs_tokenizer_compatible(gpt, sc, &err) == VS_ERR_INVALID && strstr(err.msg, "pre-tokenizer"),
             "gpt-2 vs starcoder: %s", err.msg);
    VT_CHECK(vs_tokenizer_compatible(sc, sc, &err) == VS_OK, "self: %s", err.msg);

    /* the merge loop must not be quadratic: 16x the text costs 12-33x the time here (linear, with cache
     * effects; measured on a loaded machine) and 256x when quadratic; the bound, 100x, keeps a 3x margin on
     * both sides (best of 3 runs each; the old bound, 4x the text under 9x the time, failed under load).
     * The thread's CPU time, not wall time: with other processes on the cores (a training run and a
     * sanitizer build beside `ctest -j2`) a descheduled short run failed the bound on wall time. */
    {
        size_t n1 = 1 << 14, n4 = 1 << 18;
        char *s = malloc(n4 + 1);
        for (size_t i = 0; i < n4; i++) s[i] = "ab"[(i * 7 / 3) % 2]; /* no spaces: one long symbol chain */
        vs_tokenizer *ts[] = {spm, gpt};
        for (int m = 0; m < 2; m++) {
            double best[2] = {1e9, 1e9};
            for (int rep = 0; rep < 3; rep++)
                for (int k = 0; k < 2; k++) {
                    int32_t *ids = NULL;
                    int64_t ni = 0;
                    double t0 = thread_cpu_now();
                    vs_tokenize_alloc(ts[m], s, k ? n4 : n1, false, false, &ids, &ni, &err);
                    double dt = thread_cpu_now() - t0;
                    best[k] = dt < best[k] ? dt : best[k];
                    vs_free(ids);
                }
            printf("%s: %zu bytes without spaces in %.4f s, %zu bytes in %.4f s (ratio %.1f)\n",
                   m ? "gpt-2" : "llama-spm", n1, best[0], n4, best[1], best[1] / best[0]);
            VT_CHECK(best[1] < 100.0 * best[0] + 0.02, "merge loop grows too fast: %.4f s -> %.4f s", best[0],
                     best[1]);
        }
        free(s);
    }

    if (getenv("VLMSPEC_BENCH")) {
        size_t cap = 1 << 20, n = 0;
        char *s = malloc(cap + 256);
        for (int i = 0; n < cap; i++) {
            const char *c = CORPUS[i % (int)VS_ARRAY_LEN(CORPUS)];
            size_t l = strlen(c);
            memcpy(s + n, c, l);
            n += l;
            s[n++] = ' ';
        }
        vs_tokenizer *ts[] = {spm, gpt};
        for (int m = 0; m < 2; m++) {
            int32_t *ids = NULL;
            int64_t ni = 0;
            double t0 = vs_time_now();
            vs_tokenize_alloc(ts[m], s, n, true, false, &ids, &ni, &err);
            double dt = vs_time_now() - t0;
            char *back = vs_detokenize(ts[m], ids, ni, VS_DETOK_STRIP_SPACE, NULL, &err);
            double dt2 = vs_time_now() - t0 - dt;
            printf("BENCH %s: %zu bytes -> %lld tokens in %.3f s = %.0f tokens/s (%.1f MB/s); "
                   "detokenize %.3f s\n",
                   m ? "gpt-2" : "llama-spm", n, (long long)ni, dt, (double)ni / dt, (double)n / dt / 1e6,
                   dt2);
            VT_CHECK(back && !memcmp(back, s, n), "1 MB round trip");
            vs_free(back);
            vs_free(ids);
        }
        free(s);
    }
done:
    vs_tokenizer_free(spm);
    vs_tokenizer_free(phi);
    vs_tokenizer_free(gpt);
    vs_tokenizer_free(sc);
    vs_tokenizer_free(par);
}

int main(void) {
    test_small_spm();
    test_small_bpe();
    test_bad_vocab();
    test_compat_small();
    const char *dir = vt_shared_or_skip("tokenizer test vectors and parity prompts");
    if (dir) {
        test_vocab_vectors(dir, "ggml-vocab-llama-spm.gguf");
        test_vocab_vectors(dir, "ggml-vocab-phi-3.gguf");
        test_vocab_vectors(dir, "ggml-vocab-gpt-2.gguf");
        test_vocab_vectors(dir, "ggml-vocab-starcoder.gguf");
        test_parity_prompts(dir);
        test_shared_models(dir);
    }
    return vt_finish("tokenizer");
}
