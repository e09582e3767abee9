/* pretok: see pretok.h. */
#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include "pretok.h"

#include <pcre2.h>
#include <string.h>

/* GPT-2's pattern as llama.cpp applies it (its trailing "|\s+" alternative is not needed: whitespace it
 * would match is left as a gap piece, the same split). */
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
/* LLaMA-3 / Qwen2: case-insensitive contractions spelled out, letters with one leading non-letter,
 * digit groups of up to 3 (LLaMA-3) or single digits (Qwen2). */
#define RE_LLAMA3_HEAD                                                                                       \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
#define RE_LLAMA3_TAIL "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

static const vs_pretok PRETOKS[] = {
    /* llama.cpp's fallback when a gpt2 vocabulary names no pre-tokeniser */
    {"default", {NULL}, {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]", NULL}, false},
    {"gpt-2", {"gpt2", "mpt", "olmo", "jais", NULL}, {RE_GPT2, NULL}, false},
    {"starcoder",
     {"refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", NULL},
     {"\\p{N}", RE_GPT2, NULL},
     false},
    {"llama3", {"llama-bpe", "llama-v3", NULL}, {RE_LLAMA3_HEAD "\\p{N}{1,3}" RE_LLAMA3_TAIL, NULL}, true},
    {"qwen2",
     {"qwen2.5", "qwen-2.5", "deepseek-r1-qwen", "stablelm2", "megrez", NULL},
     {RE_LLAMA3_HEAD "\\p{N}" RE_LLAMA3_TAIL, NULL},
     false},
    {"deepseek-coder",
     {NULL},
     {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+",
      "[\xE4\xB8\x80-\xE9\xBE\xA5\xE0\xA0\x80-\xE4\xB8\x80\xEA\xB0\x80-\xED\x9F\xBF]+", "\\p{N}", NULL},
     false},
};

const vs_pretok *vs_pretok_find(const char *name) {
    if (!name || !name[0]) name = "default";
    for (size_t i = 0; i < VS_ARRAY_LEN(PRETOKS); i++) {
        if (!strcmp(PRETOKS[i].name, name)) return &PRETOKS[i];
        for (int k = 0; PRETOKS[i].aliases[k]; k++)
            if (!strcmp(PRETOKS[i].aliases[k], name)) return &PRETOKS[i];
    }
    return NULL;
}

void vs_pretok_names(char *buf, size_t cap) {
    if (!cap) return;
    buf[0] = 0;
    for (size_t i = 0; i < VS_ARRAY_LEN(PRETOKS); i++) {
        strncat(buf, i ? ", " : "", cap - strlen(buf) - 1);
        strncat(buf, PRETOKS[i].name, cap - strlen(buf) - 1);
    }
}

vs_status vs_pretok_compile(vs_pretok_re *p, const vs_pretok *def, vs_error *err) {
    memset(p, 0, sizeof(*p));
    p->def = def;
    for (int k = 0; def->regex[k]; k++) {
        int ec;
        PCRE2_SIZE eo;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)def->regex[k], PCRE2_ZERO_TERMINATED,
                                       PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &ec, &eo, NULL);
        if (!re) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(ec, msg, sizeof(msg));
            vs_pretok_re_free(p);
            return vs_error_set(err, VS_ERR_UNSUPPORTED, "pre-tokenizer '%s' regex %d: %s at %zu", def->name, k,
                                (const char *)msg, (size_t)eo);
        }
        pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* falls back to the interpreter if JIT is unavailable */
        p->re[p->n_re++] = re;
    }
    return VS_OK;
}

void vs_pretok_re_free(vs_pretok_re *p) {
    for (int k = 0; k < p->n_re; k++) pcre2_code_free(p->re[k]);
    memset(p, 0, sizeof(*p));
}

typedef struct split_ctx {
    const vs_pretok_re *p;
    const char *text;
    pcre2_match_data *md;
    vs_pretok_piece_fn *fn;
    void *ctx;
    vs_error *err;
} split_ctx;

/* The piece text[off .. off + len) through regexes k, k + 1, ...: depth first, so the pieces come out in
 * text order, as if each regex had split the whole list the previous one left. */
static vs_status split_from(split_ctx *c, int k, size_t off, size_t len) {
    if (k == c->p->n_re) return c->fn(c->ctx, off, len);
    const pcre2_code *re = c->p->re[k];
    const char *s = c->text + off;
    size_t pos = 0, gap = 0;
    vs_status st;
    while (pos < len) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, len, pos, 0, c->md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(rc, msg, sizeof(msg));
            return vs_error_set(c->err, VS_ERR_INVALID, "pre-tokenizer '%s': %s", c->p->def->name,
                                (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
        size_t ms = ov[0], me = ov[1]; /* read before recursing: the match data is shared */
        if (me <= ms) { /* an empty match splits nothing: step over one byte */
            pos = ms + 1;
            continue;
        }
        if (ms > gap && (st = split_from(c, k + 1, off + gap, ms - gap))) return st;
        if ((st = split_from(c, k + 1, off + ms, me - ms))) return st;
        gap = pos = me;
    }
    return gap < len ? split_from(c, k + 1, off + gap, len - gap) : VS_OK;
}

vs_status vs_pretok_split(const vs_pretok_re *p, const char *text, size_t len, vs_pretok_piece_fn *fn, void *ctx,
                          vs_error *err) {
    if (!len) return VS_OK;
    split_ctx c = {p, text, pcre2_match_data_create(16, NULL), fn, ctx, err};
    if (!c.md) return vs_error_set(err, VS_ERR_NOMEM, "pre-tokenizer: out of memory");
    vs_status st = split_from(&c, 0, 0, len);
    pcre2_match_data_free(c.md);
    return st;
}
