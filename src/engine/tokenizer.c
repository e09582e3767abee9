/* tokenizer: vocabulary construction (from arrays or GGUF metadata), accessors, the special-token
 * partition of a prompt, the tokenise entry points and the draft/target compatibility check.
 * The two algorithms live in tokenizer_spm.c and tokenizer_bpe.c, detokenisation in
 * tokenizer_detok.c. See tokenizer.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_impl.h"

/* Prompts longer than this are refused (symbol indices are int32 and a piece may triple in size). */
#define VS_TOK_MAX_TEXT ((size_t)1 << 29)

/* ---------------------------------------------------------------- helpers */

uint64_t vs_tok_hash(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 0x100000001b3ULL;
    }
    return h ^ (h >> 29);
}

vs_status vs_idvec_push(vs_idvec *a, int32_t id, vs_error *err) {
    if (a->n == a->cap) {
        int64_t cap = a->cap ? 2 * a->cap : 64;
        int32_t *v = vs_realloc(a->v, (size_t)cap * sizeof(int32_t));
        if (!v)
            return vs_error_set(err, VS_ERR_NOMEM, "tokenize: out of memory (%lld tokens)", (long long)cap);
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = id;
    return VS_OK;
}

int vs_utf8_get(const uint8_t *s, size_t n, uint32_t *cp) {
    int len = vs_utf8_valid_len(s, n);
    if (len == 0) return 0;
    uint32_t c = s[0];
    if (len == 1)
        *cp = c;
    else if (len == 2)
        *cp = ((c & 0x1F) << 6) | (s[1] & 0x3F);
    else if (len == 3)
        *cp = ((c & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    else
        *cp = ((c & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) | ((uint32_t)(s[2] & 0x3F) << 6) |
              (s[3] & 0x3F);
    return len;
}

int vs_utf8_put(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* A token text for error messages: printable ASCII kept, the rest as \xNN, at most ~40 bytes. */
static const char *show(const char *s, size_t n, char *buf, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; i < n && o + 6 < cap; i++) {
        uint8_t c = (uint8_t)s[i];
        if (c >= 0x20 && c < 0x7F && c != '\'' && c != '\\')
            buf[o++] = (char)c;
        else
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02X", c);
        if (o > 40 && i + 1 < n) {
            snprintf(buf + o, cap - o, "...");
            return buf;
        }
    }
    buf[o] = 0;
    return buf;
}

static bool is_c_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* ---------------------------------------------------------------- text -> id map */

static vs_status map_build(vs_tokenizer *t, vs_error *err) {
    uint64_t cap = 16;
    while (cap < 2 * (uint64_t)t->n_vocab) cap <<= 1;
    t->map.slots = vs_malloc(cap * sizeof(int32_t));
    if (!t->map.slots) return vs_error_set(err, VS_ERR_NOMEM, "tokenizer: out of memory (token map)");
    memset(t->map.slots, 0xFF, cap * sizeof(int32_t));
    t->map.mask = cap - 1;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        size_t n;
        const char *s = vs_tok_text(t, id, &n);
        if (n == 0) continue; /* an empty token can never be matched */
        uint64_t i = vs_tok_hash(s, n) & t->map.mask;
        for (;; i = (i + 1) & t->map.mask) {
            int32_t o = t->map.slots[i];
            if (o < 0) {
                t->map.slots[i] = id;
                break;
            }
            size_t on;
            const char *os = vs_tok_text(t, o, &on);
            if (on == n && memcmp(os, s, n) == 0) { /* duplicate text: the later id wins (llama.cpp) */
                t->map.slots[i] = id;
                break;
            }
        }
    }
    return VS_OK;
}

int32_t vs_tok_map_find(const vs_tokenizer *t, const char *s, size_t n) {
    if (n == 0) return -1;
    uint64_t i = vs_tok_hash(s, n) & t->map.mask;
    for (;; i = (i + 1) & t->map.mask) {
        int32_t id = t->map.slots[i];
        if (id < 0) return -1;
        uint64_t a = t->text_off[id], b = t->text_off[id + 1] - 1;
        if (b - a == n && memcmp(t->text + a, s, n) == 0) return id;
    }
}

/* ---------------------------------------------------------------- construction */

static bool text_is(const vs_tokenizer *t, int32_t id, const char *c) {
    size_t n;
    const char *s = vs_tok_text(t, id, &n);
    return n == strlen(c) && memcmp(s, c, n) == 0;
}

/* Rendered bytes of each token (what vs_tokenizer_token_piece returns). */
static vs_status build_pieces(vs_tokenizer *t, vs_error *err) {
    /* a rendered piece is never longer than its text (U+2581 -> ' ', <0xNN> -> 1 byte, the gpt2
     * mapping shrinks or keeps every code point) */
    uint64_t total = t->text_off[t->n_vocab];
    t->piece = vs_malloc(total + 1);
    t->piece_off = vs_malloc(((size_t)t->n_vocab + 1) * sizeof(uint64_t));
    if (!t->piece || !t->piece_off)
        return vs_error_set(err, VS_ERR_NOMEM, "tokenizer: out of memory (pieces)");
    uint64_t o = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        t->piece_off[id] = o;
        size_t n;
        const char *s = vs_tok_text(t, id, &n);
        char *d = t->piece + o;
        int type = t->types[id];
        size_t m = 0;
        if (type == VS_TOKEN_UNUSED || type == VS_TOKEN_UNDEFINED) {
            m = 0;
        } else if (type == VS_TOKEN_CONTROL || type == VS_TOKEN_UNKNOWN || type == VS_TOKEN_USER_DEFINED) {
            memcpy(d, s, n);
            m = n;
        } else if (t->model == VS_TOK_MODEL_SPM) {
            unsigned v;
            char tail;
            if (type == VS_TOKEN_BYTE && n == 6 && sscanf(s, "<0x%2x%c", &v, &tail) == 2 && tail == '>') {
                d[0] = (char)v;
                m = 1;
            } else {
                for (size_t i = 0; i < n;) {
                    if (i + 3 <= n && memcmp(s + i, "\xE2\x96\x81", 3) == 0) {
                        d[m++] = ' ';
                        i += 3;
                    } else
                        d[m++] = s[i++];
                }
            }
        } else {
            /* gpt2: undo the byte-to-code-point mapping; code points outside it are kept as UTF-8 */
            for (size_t i = 0; i < n;) {
                uint32_t cp;
                int l = vs_utf8_get((const uint8_t *)s + i, n - i, &cp);
                if (l == 0) {
                    d[m++] = s[i++];
                    continue;
                }
                int b = -1;
                if (cp < 512)
                    for (int k = 0; k < 256; k++)
                        if (t->byte_cp[k] == cp) {
                            b = k;
                            break;
                        }
                if (b >= 0)
                    d[m++] = (char)b;
                else {
                    memcpy(d + m, s + i, (size_t)l);
                    m += (size_t)l;
                }
                i += (size_t)l;
            }
        }
        o += m;
    }
    t->piece_off[t->n_vocab] = o;
    return VS_OK;
}

static int cmp_special(const void *a, const void *b, void *ctx) {
    const vs_tokenizer *t = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint64_t lx = t->text_off[x + 1] - t->text_off[x], ly = t->text_off[y + 1] - t->text_off[y];
    if (lx != ly) return lx > ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* llama.cpp's name-based fix-ups: EOT / EOG tokens found by their text (and made CONTROL), and Phi-3's
 * rstrip attribute. */
static void special_fixups(vs_tokenizer *t, const char *name) {
    static const char *const eot_texts[] = {"<|eot_id|>",
                                            "<|im_end|>",
                                            "<|end|>",
                                            "<end_of_turn>",
                                            "<|endoftext|>",
                                            "<EOT>",
                                            "<\xEF\xBD\x9C"
                                            "end\xE2\x96\x81of"
                                            "\xE2\x96\x81sentence\xEF\xBD\x9C>"};
    static const char *const eog_texts[] = {"<|eot_id|>",    "<|im_end|>", "<|end|>", "<end_of_turn>",
                                            "<|endoftext|>", "<|eom_id|>", "<EOT>"};
    for (int32_t id = 0; id < t->n_vocab; id++) {
        if (t->eot < 0)
            for (size_t k = 0; k < VS_ARRAY_LEN(eot_texts); k++)
                if (text_is(t, id, eot_texts[k])) {
                    t->eot = id;
                    t->types[id] = VS_TOKEN_CONTROL;
                }
        for (size_t k = 0; k < VS_ARRAY_LEN(eog_texts); k++)
            if (text_is(t, id, eog_texts[k])) {
                t->attrs[id] |= VS_TOKATTR_EOG;
                t->types[id] = VS_TOKEN_CONTROL;
            }
    }
    if (t->eos >= 0) t->attrs[t->eos] |= VS_TOKATTR_EOG;
    if (t->eot >= 0) t->attrs[t->eot] |= VS_TOKATTR_EOG;

    if (name) {
        char low[128];
        size_t i = 0;
        for (; name[i] && i + 1 < sizeof(low); i++)
            low[i] = (char)((name[i] >= 'A' && name[i] <= 'Z') ? name[i] + 32 : name[i]);
        low[i] = 0;
        if (strstr(low, "phi-3") || strstr(low, "phi3")) {
            for (int32_t id = 0; id < t->n_vocab; id++) {
                int ty = t->types[id];
                if (ty == VS_TOKEN_CONTROL || ty == VS_TOKEN_USER_DEFINED || ty == VS_TOKEN_UNKNOWN ||
                    text_is(t, id, "</s>"))
                    t->attrs[id] |= VS_TOKATTR_RSTRIP;
                if (text_is(t, id, "<unk>") || text_is(t, id, "<s>") || text_is(t, id, "<|endoftext|>"))
                    t->attrs[id] &= (uint8_t)~VS_TOKATTR_RSTRIP;
            }
        }
    }
}

void vs_tokenizer_spec_init(vs_tokenizer_spec *spec) {
    memset(spec, 0, sizeof(*spec));
    spec->bos = spec->eos = spec->unk = spec->pad = spec->eot = -1;
    spec->add_bos = spec->add_eos = spec->add_space_prefix = -1;
}

static vs_status check_id(const char *what, int32_t id, int32_t n_vocab, vs_error *err) {
    if (id < -1 || id >= n_vocab)
        return vs_error_set(err, VS_ERR_FORMAT, "tokenizer: %s %d is outside the vocabulary [0, %d)", what,
                            id, n_vocab);
    return VS_OK;
}

vs_tokenizer *vs_tokenizer_new(const vs_tokenizer_spec *spec, vs_error *err) {
    if (!spec || !spec->model) {
        vs_error_set(err, VS_ERR_INVALID, "tokenizer: no model name given");
        return NULL;
    }
    vs_tok_model model;
    if (!strcmp(spec->model, "llama"))
        model = VS_TOK_MODEL_SPM;
    else if (!strcmp(spec->model, "gpt2"))
        model = VS_TOK_MODEL_BPE;
    else {
        char b[64];
        vs_error_set(err, VS_ERR_UNSUPPORTED, "tokenizer: model '%s' is not supported (only 'llama', 'gpt2')",
                     show(spec->model, strlen(spec->model), b, sizeof(b)));
        return NULL;
    }
    if (spec->n_vocab <= 0 || spec->n_vocab > INT32_MAX / 2 || !spec->tokens) {
        vs_error_set(err, VS_ERR_FORMAT, "tokenizer: vocabulary is empty or absurd (%lld tokens)",
                     (long long)spec->n_vocab);
        return NULL;
    }
    vs_tokenizer *t = vs_calloc(1, sizeof(vs_tokenizer));
    if (!t) {
        vs_error_set(err, VS_ERR_NOMEM, "tokenizer: out of memory");
        return NULL;
    }
    t->model = model;
    t->n_vocab = (int32_t)spec->n_vocab;
    int32_t n = t->n_vocab;

    /* texts */
    uint64_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        if (!spec->tokens[i]) {
            vs_error_set(err, VS_ERR_FORMAT, "tokenizer: token %d has no text", i);
            goto fail;
        }
        uint64_t l = spec->token_lens ? spec->token_lens[i] : strlen(spec->tokens[i]);
        if (l > (1u << 20)) {
            vs_error_set(err, VS_ERR_FORMAT, "tokenizer: token %d is %llu bytes long", i,
                         (unsigned long long)l);
            goto fail;
        }
        total += l + 1;
    }
    t->text = vs_malloc(total);
    t->text_off = vs_malloc(((size_t)n + 1) * sizeof(uint64_t));
    t->scores = vs_calloc((size_t)n, sizeof(float));
    t->types = vs_malloc((size_t)n);
    t->attrs = vs_calloc((size_t)n, 1);
    if (!t->text || !t->text_off || !t->scores || !t->types || !t->attrs) {
        vs_error_set(err, VS_ERR_NOMEM, "tokenizer: out of memory (%d tokens)", n);
        goto fail;
    }
    uint64_t o = 0;
    for (int32_t i = 0; i < n; i++) {
        size_t l = spec->token_lens ? spec->token_lens[i] : strlen(spec->tokens[i]);
        t->text_off[i] = o;
        memcpy(t->text + o, spec->tokens[i], l);
        t->text[o + l] = 0;
        o += l + 1;
        if (spec->scores) t->scores[i] = spec->scores[i];
        int32_t ty = spec->types ? spec->types[i] : VS_TOKEN_NORMAL;
        if (ty < VS_TOKEN_UNDEFINED || ty > VS_TOKEN_BYTE) {
            vs_error_set(err, VS_ERR_FORMAT, "tokenizer: token %d has type %d (valid types are 0..6)", i, ty);
            goto fail;
        }
        t->types[i] = (uint8_t)ty;
    }
    t->text_off[n] = o;
    if (map_build(t, err) != VS_OK) goto fail;

    /* special ids and flags */
    if (check_id("bos_token_id", spec->bos, n, err) || check_id("eos_token_id", spec->eos, n, err) ||
        check_id("unknown_token_id", spec->unk, n, err) || check_id("padding_token_id", spec->pad, n, err) ||
        check_id("eot_token_id", spec->eot, n, err))
        goto fail;
    t->bos = spec->bos;
    t->eos = spec->eos;
    t->unk = spec->unk;
    t->pad = spec->pad;
    t->eot = spec->eot;
    t->add_bos = spec->add_bos < 0 ? model == VS_TOK_MODEL_SPM : spec->add_bos != 0;
    t->add_eos = spec->add_eos > 0;
    t->add_space_prefix = model == VS_TOK_MODEL_SPM && spec->add_space_prefix != 0;
    if (t->add_bos && t->bos < 0) {
        vs_error_set(err, VS_ERR_FORMAT, "tokenizer: add_bos_token is set but there is no bos_token_id");
        goto fail;
    }
    if (t->add_eos && t->eos < 0) {
        vs_error_set(err, VS_ERR_FORMAT, "tokenizer: add_eos_token is set but there is no eos_token_id");
        goto fail;
    }

    /* byte tokens */
    for (int b = 0; b < 256; b++) t->byte_tok[b] = -1;
    if (model == VS_TOK_MODEL_SPM) {
        if (spec->pre && spec->pre[0] && strcmp(spec->pre, "default") != 0) {
            char bb[64];
            vs_error_set(err, VS_ERR_UNSUPPORTED,
                         "tokenizer: pre-tokenizer '%s' is not supported for 'llama'",
                         show(spec->pre, strlen(spec->pre), bb, sizeof(bb)));
            goto fail;
        }
        for (int b = 0; b < 256; b++) {
            char hex[8];
            snprintf(hex, sizeof(hex), "<0x%02X>", b);
            int32_t id = vs_tok_map_find(t, hex, 6);
            if (id < 0) {
                char c = (char)b; /* llama.cpp's fallback: the byte itself as a token */
                id = vs_tok_map_find(t, &c, 1);
            }
            t->byte_tok[b] = id;
        }
    } else if (vs_tok_bpe_init(t, spec->pre, spec, err) != VS_OK) {
        goto fail;
    }

    special_fixups(t, spec->name);

    /* special-token cache, longest text first (ties by id, so the order is deterministic) */
    t->special = vs_malloc(((size_t)n) * sizeof(int32_t));
    if (!t->special) {
        vs_error_set(err, VS_ERR_NOMEM, "tokenizer: out of memory");
        goto fail;
    }
    for (int32_t i = 0; i < n; i++) {
        int ty = t->types[i];
        if ((ty == VS_TOKEN_CONTROL || ty == VS_TOKEN_USER_DEFINED || ty == VS_TOKEN_UNKNOWN) &&
            t->text_off[i + 1] - t->text_off[i] > 1)
            t->special[t->n_special++] = i;
    }
    qsort_r(t->special, (size_t)t->n_special, sizeof(int32_t), cmp_special, t);

    if (build_pieces(t, err) != VS_OK) goto fail;
    return t;
fail:
    vs_tokenizer_free(t);
    return NULL;
}

void vs_tokenizer_free(vs_tokenizer *t) {
    if (!t) return;
    vs_tok_bpe_free(t);
    vs_free(t->text);
    vs_free(t->text_off);
    vs_free(t->piece);
    vs_free(t->piece_off);
    vs_free(t->scores);
    vs_free(t->types);
    vs_free(t->attrs);
    vs_free(t->map.slots);
    vs_free(t->special);
    vs_free(t);
}

/* ---------------------------------------------------------------- GGUF */

/* Reads an optional token id key: -1 when absent; an error when mistyped or negative. */
static vs_status get_id(const vs_gguf *g, const char *key, int32_t dflt, int32_t *out, vs_error *err) {
    int64_t v;
    int r = vs_gguf_get_int(g, key, &v);
    if (r == 0) {
        *out = dflt;
        return VS_OK;
    }
    if (r < 0 || v < 0 || v > INT32_MAX)
        return vs_error_set(err, VS_ERR_FORMAT, "%s: %s is not a valid token id", vs_gguf_name(g), key);
    *out = (int32_t)v;
    return VS_OK;
}

static vs_status get_flag(const vs_gguf *g, const char *key, int *out, vs_error *err) {
    bool b;
    int r = vs_gguf_get_bool(g, key, &b);
    if (r < 0) return vs_error_set(err, VS_ERR_FORMAT, "%s: %s is not a bool", vs_gguf_name(g), key);
    *out = r == 0 ? -1 : (int)b;
    return VS_OK;
}

/* A string array key: its index, and its length checked against want (if want >= 0). */
static int64_t find_arr(const vs_gguf *g, const char *key, vs_gguf_type elem, bool required, int64_t want,
                        vs_error *err, bool *bad) {
    *bad = false;
    int64_t k = vs_gguf_find_key(g, key);
    if (k < 0) {
        if (required) {
            vs_error_set(err, VS_ERR_FORMAT, "%s: %s is missing", vs_gguf_name(g), key);
            *bad = true;
        }
        return -1;
    }
    if (vs_gguf_kv_type(g, k) != VS_GGUF_ARRAY || vs_gguf_arr_type(g, k) != elem) {
        vs_error_set(err, VS_ERR_FORMAT, "%s: %s is not an array of the expected type", vs_gguf_name(g), key);
        *bad = true;
        return -1;
    }
    if (want >= 0 && (int64_t)vs_gguf_arr_len(g, k) != want) {
        vs_error_set(err, VS_ERR_FORMAT, "%s: %s has %llu entries but tokenizer.ggml.tokens has %lld",
                     vs_gguf_name(g), key, (unsigned long long)vs_gguf_arr_len(g, k), (long long)want);
        *bad = true;
        return -1;
    }
    return k;
}

vs_tokenizer *vs_tokenizer_from_gguf(const vs_gguf *g, vs_error *err) {
    vs_tokenizer *t = NULL;
    const char **tokens = NULL, **merges = NULL;
    size_t *lens = NULL, *mlens = NULL;
    float *scores = NULL;
    int32_t *types = NULL;
    char model[32] = "", pre[64] = "", name[128] = "";
    vs_gguf_str s;
    bool bad;

    if (vs_gguf_require_str(g, "tokenizer.ggml.model", &s, err) != VS_OK) return NULL;
    snprintf(model, sizeof(model), "%.*s", (int)VS_MIN(s.len, 31), s.ptr);
    if (vs_gguf_get_str(g, "tokenizer.ggml.pre", &s) == 1)
        snprintf(pre, sizeof(pre), "%.*s", (int)VS_MIN(s.len, 63), s.ptr);
    if (vs_gguf_get_str(g, "general.name", &s) == 1)
        snprintf(name, sizeof(name), "%.*s", (int)VS_MIN(s.len, 127), s.ptr);
    bool spm = !strcmp(model, "llama");

    int64_t kt = find_arr(g, "tokenizer.ggml.tokens", VS_GGUF_STRING, true, -1, err, &bad);
    if (bad) return NULL;
    int64_t n = (int64_t)vs_gguf_arr_len(g, kt);
    if (n <= 0 || n > INT32_MAX / 2) {
        vs_error_set(err, VS_ERR_FORMAT, "%s: tokenizer.ggml.tokens has %lld entries", vs_gguf_name(g),
                     (long long)n);
        return NULL;
    }
    int64_t ks = find_arr(g, "tokenizer.ggml.scores", VS_GGUF_F32, false, n, err, &bad);
    if (bad) return NULL;
    int64_t ky = find_arr(g, "tokenizer.ggml.token_type", VS_GGUF_I32, false, n, err, &bad);
    if (bad) return NULL;
    int64_t km = find_arr(g, "tokenizer.ggml.merges", VS_GGUF_STRING, !strcmp(model, "gpt2"), -1, err, &bad);
    if (bad) return NULL;

    vs_tokenizer_spec spec;
    vs_tokenizer_spec_init(&spec);
    spec.model = model;
    spec.pre = pre[0] ? pre : NULL;
    spec.name = name[0] ? name : NULL;
    spec.n_vocab = n;
    /* llama.cpp's defaults for SentencePiece files without the keys: <s> = 1, </s> = 2, <unk> = 0 */
    if (get_id(g, "tokenizer.ggml.bos_token_id", spm && n > 1 ? 1 : -1, &spec.bos, err) ||
        get_id(g, "tokenizer.ggml.eos_token_id", spm && n > 2 ? 2 : -1, &spec.eos, err) ||
        get_id(g, "tokenizer.ggml.unknown_token_id", spm ? 0 : -1, &spec.unk, err) ||
        get_id(g, "tokenizer.ggml.padding_token_id", -1, &spec.pad, err) ||
        get_id(g, "tokenizer.ggml.eot_token_id", -1, &spec.eot, err) ||
        get_flag(g, "tokenizer.ggml.add_bos_token", &spec.add_bos, err) ||
        get_flag(g, "tokenizer.ggml.add_eos_token", &spec.add_eos, err) ||
        get_flag(g, "tokenizer.ggml.add_space_prefix", &spec.add_space_prefix, err))
        return NULL;

    tokens = vs_malloc((size_t)n * sizeof(char *));
    lens = vs_malloc((size_t)n * sizeof(size_t));
    if (ks >= 0) scores = vs_malloc((size_t)n * sizeof(float));
    if (ky >= 0) types = vs_malloc((size_t)n * sizeof(int32_t));
    if (!tokens || !lens || (ks >= 0 && !scores) || (ky >= 0 && !types)) {
        vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory reading the vocabulary", vs_gguf_name(g));
        goto done;
    }
    for (int64_t i = 0; i < n; i++) {
        vs_gguf_str e = vs_gguf_arr_str(g, kt, (uint64_t)i);
        tokens[i] = e.ptr ? e.ptr : "";
        lens[i] = e.ptr ? (size_t)e.len : 0;
    }
    if (scores) memcpy(scores, vs_gguf_arr_data(g, ks), (size_t)n * sizeof(float));
    if (types) memcpy(types, vs_gguf_arr_data(g, ky), (size_t)n * sizeof(int32_t));
    spec.tokens = tokens;
    spec.token_lens = lens;
    spec.scores = scores;
    spec.types = types;
    if (km >= 0) {
        int64_t nm = (int64_t)vs_gguf_arr_len(g, km);
        merges = vs_malloc((size_t)VS_MAX(nm, 1) * sizeof(char *));
        mlens = vs_malloc((size_t)VS_MAX(nm, 1) * sizeof(size_t));
        if (!merges || !mlens) {
            vs_error_set(err, VS_ERR_NOMEM, "%s: out of memory reading the merges", vs_gguf_name(g));
            goto done;
        }
        for (int64_t i = 0; i < nm; i++) {
            vs_gguf_str e = vs_gguf_arr_str(g, km, (uint64_t)i);
            merges[i] = e.ptr ? e.ptr : "";
            mlens[i] = e.ptr ? (size_t)e.len : 0;
        }
        spec.n_merges = nm;
        spec.merges = merges;
        spec.merge_lens = mlens;
    }
    t = vs_tokenizer_new(&spec, err);
    if (!t) vs_error_wrap(err, "%s", vs_gguf_name(g));
done:
    vs_free(tokens);
    vs_free(lens);
    vs_free(scores);
    vs_free(types);
    vs_free(merges);
    vs_free(mlens);
    return t;
}

vs_tokenizer *vs_tokenizer_load(const char *path, vs_error *err) {
    vs_gguf *g = vs_gguf_open(path, err);
    if (!g) return NULL;
    vs_tokenizer *t = vs_tokenizer_from_gguf(g, err);
    vs_gguf_close(g);
    return t;
}

/* ---------------------------------------------------------------- accessors */

vs_tok_model vs_tokenizer_model(const vs_tokenizer *t) { return t->model; }
const char *vs_tokenizer_pre(const vs_tokenizer *t) { return t->pretok ? t->pretok->name : ""; }
int32_t vs_tokenizer_n_vocab(const vs_tokenizer *t) { return t->n_vocab; }

const char *vs_tokenizer_token_text(const vs_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_vocab) return NULL;
    size_t n;
    const char *s = vs_tok_text(t, id, &n);
    if (len) *len = n;
    return s;
}

const char *vs_tokenizer_token_piece(const vs_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_vocab) return NULL;
    if (len) *len = (size_t)(t->piece_off[id + 1] - t->piece_off[id]);
    return t->piece + t->piece_off[id];
}

vs_token_type vs_tokenizer_token_type(const vs_tokenizer *t, int32_t id) {
    if (id < 0 || id >= t->n_vocab) return VS_TOKEN_UNDEFINED;
    return (vs_token_type)t->types[id];
}

float vs_tokenizer_token_score(const vs_tokenizer *t, int32_t id) {
    if (id < 0 || id >= t->n_vocab) return 0.0f;
    return t->scores[id];
}

int32_t vs_tokenizer_find(const vs_tokenizer *t, const char *text, size_t len) {
    return text ? vs_tok_map_find(t, text, len) : -1;
}

int32_t vs_tokenizer_bos(const vs_tokenizer *t) { return t->bos; }
int32_t vs_tokenizer_eos(const vs_tokenizer *t) { return t->eos; }
int32_t vs_tokenizer_eot(const vs_tokenizer *t) { return t->eot; }
int32_t vs_tokenizer_unk(const vs_tokenizer *t) { return t->unk; }
int32_t vs_tokenizer_pad(const vs_tokenizer *t) { return t->pad; }
bool vs_tokenizer_add_bos(const vs_tokenizer *t) { return t->add_bos; }
bool vs_tokenizer_add_eos(const vs_tokenizer *t) { return t->add_eos; }

bool vs_tokenizer_is_eog(const vs_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && (t->attrs[id] & VS_TOKATTR_EOG);
}

/* ---------------------------------------------------------------- tokenise */

/* A prompt fragment: raw text [off, off + len) or one special token. */
typedef struct frag {
    int32_t tok; /* -1 for raw text */
    size_t off, len;
} frag;

typedef struct fragvec {
    frag *v;
    int64_t n, cap;
} fragvec;

static bool frag_push(fragvec *a, int32_t tok, size_t off, size_t len) {
    if (a->n == a->cap) {
        int64_t cap = a->cap ? 2 * a->cap : 16;
        frag *v = vs_realloc(a->v, (size_t)cap * sizeof(frag));
        if (!v) return false;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = (frag){tok, off, len};
    return true;
}

/* Splits the text at occurrences of special-token texts, longest tokens first (llama.cpp's order), so a
 * special token is never split by a later, shorter one. */
static vs_status partition(const vs_tokenizer *t, const char *text, size_t len, bool parse_special,
                           fragvec *out, vs_error *err) {
    fragvec a = {0}, b = {0};
    if (len > 0 && !frag_push(&a, -1, 0, len)) goto nomem;
    for (int64_t k = 0; k < t->n_special && a.n > 0; k++) {
        int32_t id = t->special[k];
        int ty = t->types[id];
        if (!parse_special && (ty == VS_TOKEN_CONTROL || ty == VS_TOKEN_UNKNOWN)) continue;
        size_t sl;
        const char *st = vs_tok_text(t, id, &sl);
        uint8_t at = t->attrs[id];
        b.n = 0;
        bool any = false;
        for (int64_t i = 0; i < a.n; i++) {
            frag f = a.v[i];
            if (f.tok >= 0 || f.len < sl) {
                if (!frag_push(&b, f.tok, f.off, f.len)) goto nomem;
                continue;
            }
            size_t off = f.off, rem = f.len;
            while (rem > 0) {
                const char *p = memmem(text + off, rem, st, sl);
                if (!p) {
                    if (!frag_push(&b, -1, off, rem)) goto nomem;
                    break;
                }
                any = true;
                size_t m = (size_t)(p - text);
                size_t left = m - off;
                if (at & VS_TOKATTR_LSTRIP)
                    while (left > 0 && is_c_space(text[off + left - 1])) left--;
                if (left > 0 && !frag_push(&b, -1, off, left)) goto nomem;
                if (!frag_push(&b, id, 0, 0)) goto nomem;
                size_t roff = m + sl, rlen = off + rem - roff;
                if (at & VS_TOKATTR_RSTRIP)
                    while (rlen > 0 && is_c_space(text[roff])) roff++, rlen--;
                off = roff;
                rem = rlen;
            }
        }
        if (any) {
            fragvec tmp = a;
            a = b;
            b = tmp;
        }
    }
    vs_free(b.v);
    *out = a;
    return VS_OK;
nomem:
    vs_free(a.v);
    vs_free(b.v);
    return vs_error_set(err, VS_ERR_NOMEM, "tokenize: out of memory");
}

static vs_status tokenize_vec(const vs_tokenizer *t, const char *text, size_t len, bool add_special,
                              bool parse_special, vs_idvec *out, vs_error *err) {
    if (!text && len > 0) return vs_error_set(err, VS_ERR_INVALID, "tokenize: text is NULL");
    if (len > VS_TOK_MAX_TEXT)
        return vs_error_set(err, VS_ERR_RANGE, "tokenize: text of %zu bytes is longer than the limit %zu",
                            len, VS_TOK_MAX_TEXT);
    fragvec fr = {0};
    vs_status st = partition(t, text, len, parse_special, &fr, err);
    if (st != VS_OK) return st;
    if (add_special && t->add_bos && (st = vs_idvec_push(out, t->bos, err)) != VS_OK) goto done;
    bool prev_special = true; /* SentencePiece: a raw fragment at the start or after a token gets a space */
    for (int64_t i = 0; i < fr.n; i++) {
        frag f = fr.v[i];
        if (f.tok >= 0) {
            st = vs_idvec_push(out, f.tok, err);
            prev_special = true;
        } else if (t->model == VS_TOK_MODEL_SPM) {
            st = vs_tok_spm_fragment(t, text + f.off, f.len, t->add_space_prefix && prev_special, out, err);
            prev_special = false;
        } else {
            st = vs_tok_bpe_fragment(t, text + f.off, f.len, out, err);
        }
        if (st != VS_OK) goto done;
    }
    if (add_special && t->add_eos) st = vs_idvec_push(out, t->eos, err);
done:
    vs_free(fr.v);
    return st;
}

vs_status vs_tokenize_alloc(const vs_tokenizer *t, const char *text, size_t len, bool add_special,
                            bool parse_special, int32_t **out, int64_t *n_out, vs_error *err) {
    vs_idvec v = {0};
    *out = NULL;
    *n_out = 0;
    vs_status st = tokenize_vec(t, text, len, add_special, parse_special, &v, err);
    if (st != VS_OK) {
        vs_free(v.v);
        return st;
    }
    if (v.n == 0) {
        vs_free(v.v);
        return VS_OK;
    }
    *out = v.v;
    *n_out = v.n;
    return VS_OK;
}

vs_status vs_tokenize(const vs_tokenizer *t, const char *text, size_t len, bool add_special,
                      bool parse_special, int32_t *out, int64_t cap, int64_t *n_out, vs_error *err) {
    vs_idvec v = {0};
    *n_out = 0;
    vs_status st = tokenize_vec(t, text, len, add_special, parse_special, &v, err);
    if (st == VS_OK) {
        *n_out = v.n;
        if (v.n > cap || (v.n > 0 && !out))
            st = vs_error_set(err, VS_ERR_RANGE,
                              "tokenize: the text needs %lld tokens but the buffer holds %lld",
                              (long long)v.n, (long long)cap);
        else if (v.n > 0)
            memcpy(out, v.v, (size_t)v.n * sizeof(int32_t));
    }
    vs_free(v.v);
    return st;
}

/* ---------------------------------------------------------------- compatibility */

vs_status vs_tokenizer_compatible(const vs_tokenizer *a, const vs_tokenizer *b, vs_error *err) {
    char x[96], y[96];
    if (a->model != b->model)
        return vs_error_set(err, VS_ERR_INVALID, "tokenizers differ: model %s vs %s",
                            a->model == VS_TOK_MODEL_SPM ? "llama" : "gpt2",
                            b->model == VS_TOK_MODEL_SPM ? "llama" : "gpt2");
    if (a->pretok != b->pretok)
        return vs_error_set(err, VS_ERR_INVALID, "tokenizers differ: pre-tokenizer '%s' vs '%s'",
                            vs_tokenizer_pre(a), vs_tokenizer_pre(b));
    if (a->n_vocab != b->n_vocab)
        return vs_error_set(err, VS_ERR_INVALID, "tokenizers differ: vocabulary size %d vs %d", a->n_vocab,
                            b->n_vocab);
    for (int32_t i = 0; i < a->n_vocab; i++) {
        size_t la, lb;
        const char *sa = vs_tok_text(a, i, &la), *sb = vs_tok_text(b, i, &lb);
        if (la != lb || memcmp(sa, sb, la) != 0)
            return vs_error_set(err, VS_ERR_INVALID, "tokenizers differ: token %d is '%s' vs '%s'", i,
                                show(sa, la, x, sizeof(x)), show(sb, lb, y, sizeof(y)));
        if (a->types[i] != b->types[i])
            return vs_error_set(err, VS_ERR_INVALID, "tokenizers differ: token %d '%s' has type %d vs %d", i,
                                show(sa, la, x, sizeof(x)), a->types[i], b->types[i]);
        if (a->model == VS_TOK_MODEL_SPM && a->scores[i] != b->scores[i])
            return vs_error_set(err, VS_ERR_INVALID, "tokenizers differ: token %d '%s' has score %g vs %g", i,
                                show(sa, la, x, sizeof(x)), a->scores[i], b->scores[i]);
        if ((a->attrs[i] & (VS_TOKATTR_LSTRIP | VS_TOKATTR_RSTRIP)) !=
            (b->attrs[i] & (VS_TOKATTR_LSTRIP | VS_TOKATTR_RSTRIP)))
            return vs_error_set(err, VS_ERR_INVALID,
                                "tokenizers differ: token %d '%s' strips whitespace differently", i,
                                show(sa, la, x, sizeof(x)));
    }
    if (a->n_merges != b->n_merges)
        return vs_error_set(err, VS_ERR_INVALID, "tokenizers differ: %lld vs %lld merges",
                            (long long)a->n_merges, (long long)b->n_merges);
    for (int64_t i = 0; i < a->n_merges; i++)
        if (a->merge_pairs[2 * i] != b->merge_pairs[2 * i] ||
            a->merge_pairs[2 * i + 1] != b->merge_pairs[2 * i + 1])
            return vs_error_set(err, VS_ERR_INVALID, "tokenizers differ: merge %lld is (%d, %d) vs (%d, %d)",
                                (long long)i, a->merge_pairs[2 * i], a->merge_pairs[2 * i + 1],
                                b->merge_pairs[2 * i], b->merge_pairs[2 * i + 1]);
    const struct {
        const char *what;
        int32_t va, vb;
    } ids[] = {{"BOS id", a->bos, b->bos},
               {"EOS id", a->eos, b->eos},
               {"UNK id", a->unk, b->unk},
               {"PAD id", a->pad, b->pad},
               {"EOT id", a->eot, b->eot},
               {"add_bos flag", a->add_bos, b->add_bos},
               {"add_eos flag", a->add_eos, b->add_eos},
               {"add_space_prefix flag", a->add_space_prefix, b->add_space_prefix}};
    for (size_t i = 0; i < VS_ARRAY_LEN(ids); i++)
        if (ids[i].va != ids[i].vb)
            return vs_error_set(err, VS_ERR_INVALID, "tokenizers differ: %s %d vs %d", ids[i].what, ids[i].va,
                                ids[i].vb);
    for (int32_t i = 0; i < a->n_vocab; i++)
        if ((a->attrs[i] & VS_TOKATTR_EOG) != (b->attrs[i] & VS_TOKATTR_EOG))
            return vs_error_set(err, VS_ERR_INVALID,
                                "tokenizers differ: token %d ends generation in only one", i);
    return VS_OK;
}
