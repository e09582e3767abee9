/* vlmspec tokenize -m MODEL -p TEXT: prints the tokens of a text under a GGUF file's tokenizer, one
 * "id -> 'piece'" line each (or only the ids with --ids). BOS/EOS are added as the file says unless
 * --no-bos; special-token text ("<s>", "<|im_end|>") is parsed only with --special. */
#include <stdio.h>
#include <string.h>

#include "chat.h"
#include "cli.h"
#include "tokenizer.h"

#define CMD "tokenize"

static void usage(FILE *f) {
    fprintf(f,
            "usage: vlmspec tokenize -m MODEL (-p TEXT | -f FILE) [options]\n"
            "Tokenises a text with the tokenizer stored in a GGUF file and prints the tokens.\n\n"
            "options:\n"
            "  -m, --model FILE     GGUF file holding tokenizer.ggml.* metadata (any model or vocab file)\n"
            "  -p, --prompt TEXT    the text to tokenise\n"
            "  -f, --file FILE      read the text from a file instead (bytes as they are)\n"
            "  --ids                print only the ids, as [1, 2, 3]\n"
            "  --no-bos             do not add BOS / EOS (the file's add_bos / add_eos flags)\n"
            "  --special            parse special-token text in the prompt (\"<s>\", \"</s>\" ...)\n"
            "  --chat TEMPLATE      wrap the text as one user turn of a chat template and add the\n"
            "                       assistant prompt (templates:");
    for (int i = 0; i < vs_chat_template_count(); i++)
        fprintf(f, " %s", vs_chat_template_name(vs_chat_template_at(i)));
    fprintf(f, ")\n"
               "  --info               print the tokenizer's model, size and special tokens first\n"
               "  -h, --help           this help\n");
}

/* Writes a token piece readably: printable text as is, \n \t \r escaped, other control and invalid
 * bytes as \xNN. */
static void print_piece(const char *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '\n')
            fputs("\\n", stdout);
        else if (c == '\t')
            fputs("\\t", stdout);
        else if (c == '\r')
            fputs("\\r", stdout);
        else if (c == '\\')
            fputs("\\\\", stdout);
        else if (c == '\'')
            fputs("\\'", stdout);
        else if (c < 0x20 || c == 0x7F)
            printf("\\x%02X", c);
        else if (c < 0x80)
            putchar(c);
        else {
            /* keep complete UTF-8 sequences, escape stray bytes */
            int l = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
            bool ok = l > 0 && i + (size_t)l <= n;
            for (int k = 1; ok && k < l; k++) ok = ((unsigned char)p[i + k] & 0xC0) == 0x80;
            if (ok) {
                fwrite(p + i, 1, (size_t)l, stdout);
                i += (size_t)l - 1;
            } else
                printf("\\x%02X", c);
        }
    }
}

static void print_info(const vs_tokenizer *t) {
    printf("model: %s%s%s, %d tokens\n",
           vs_tokenizer_model(t) == VS_TOK_MODEL_SPM ? "llama (SentencePiece)" : "gpt2 (byte-level BPE)",
           vs_tokenizer_pre(t)[0] ? ", pre-tokenizer " : "", vs_tokenizer_pre(t), vs_tokenizer_n_vocab(t));
    const struct {
        const char *name;
        int32_t id;
    } sp[] = {{"bos", vs_tokenizer_bos(t)},
              {"eos", vs_tokenizer_eos(t)},
              {"eot", vs_tokenizer_eot(t)},
              {"unk", vs_tokenizer_unk(t)},
              {"pad", vs_tokenizer_pad(t)}};
    for (size_t i = 0; i < VS_ARRAY_LEN(sp); i++) {
        printf("%s: %d", sp[i].name, sp[i].id);
        if (sp[i].id >= 0) {
            size_t n;
            const char *s = vs_tokenizer_token_text(t, sp[i].id, &n);
            printf(" '");
            print_piece(s, n);
            printf("'");
        }
        printf("\n");
    }
    printf("add_bos: %s, add_eos: %s\n", vs_tokenizer_add_bos(t) ? "yes" : "no",
           vs_tokenizer_add_eos(t) ? "yes" : "no");
}

/* --chat's value: a chat template name (vs_chat_template_find). */
static bool parse_chat(const char *cmd, const char *flag, const char *v, void *dst) {
    (void)flag;
    if (!(*(const vs_chat_template **)dst = vs_chat_template_find(v))) {
        fprintf(stderr, "vlmspec %s: unknown chat template '%s'\n", cmd, v);
        usage(stderr);
        return false;
    }
    return true;
}

typedef struct tok_opts {
    const char *model, *prompt, *file;
    const vs_chat_template *tpl; /* --chat, or NULL */
    bool ids_only, no_bos, special, info;
} tok_opts;

/* Returns -1 when the options are fine, else the exit status. */
static int tok_parse(int argc, char **argv, tok_opts *o) {
    memset(o, 0, sizeof(*o));
    cli_flags fs = {0};
    cli_flag_add(&fs, "-m|--model", CLI_STR, &o->model, 0, 0);
    cli_flag_add(&fs, "-p|--prompt", CLI_STR, &o->prompt, 0, 0);
    cli_flag_add(&fs, "-f|--file", CLI_STR, &o->file, 0, 0);
    cli_flag_add(&fs, "--ids", CLI_BOOL, &o->ids_only, 0, 0);
    cli_flag_add(&fs, "--no-bos", CLI_BOOL, &o->no_bos, 0, 0);
    cli_flag_add(&fs, "--special", CLI_BOOL, &o->special, 0, 0);
    cli_flag_fn_add(&fs, "--chat", parse_chat, &o->tpl);
    cli_flag_add(&fs, "--info", CLI_BOOL, &o->info, 0, 0);
    const int r = cli_flags_parse(CMD, argc, argv, &fs, usage);
    if (r >= 0) return r;
    if (!o->model || (!o->prompt == !o->file)) {
        fprintf(stderr, "vlmspec %s: need -m MODEL and exactly one of -p TEXT / -f FILE\n", CMD);
        usage(stderr);
        return 2;
    }
    return -1;
}

/* The text to tokenise into *text / *len: -p's, or -f's file read into *fdata; wrapped as a user turn
 * into *wrapped with --chat. Returns -1 when fine, else the exit status (reported; *fdata and *wrapped
 * are the caller's to free either way). */
static int tok_text(const tok_opts *o, uint8_t **fdata, char **wrapped, const char **text, size_t *len) {
    vs_error err = {0};
    *text = o->prompt;
    if (o->file) {
        if (vs_read_file(o->file, fdata, len, &err) != VS_OK) return cli_fail_err(CMD, &err);
        *text = (const char *)*fdata;
    } else
        *len = strlen(o->prompt);
    if (o->tpl) {
        if (memchr(*text, 0, *len)) return cli_fail(CMD, "--chat needs a text without NUL bytes");
        vs_chat_msg m = {VS_CHAT_USER, *text, 0};
        if (vs_chat_format(o->tpl, &m, 1, true, wrapped, len, &err) != VS_OK) return cli_fail_err(CMD, &err);
        *text = *wrapped;
    }
    return -1;
}

/* Prints the tokens: [1, 2, 3] with --ids, else one "id -> 'piece'" line each and the count. */
static void print_tokens(const tok_opts *o, const vs_tokenizer *t, const int32_t *ids, int64_t n) {
    if (o->ids_only) {
        printf("[");
        for (int64_t i = 0; i < n; i++) printf("%s%d", i ? ", " : "", ids[i]);
        printf("]\n");
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        size_t pl;
        const char *p = vs_tokenizer_token_piece(t, ids[i], &pl);
        printf("%7d -> '", ids[i]);
        print_piece(p, pl);
        printf("'\n");
    }
    printf("%lld tokens\n", (long long)n);
}

int vs_cmd_tokenize(int argc, char **argv) {
    tok_opts o;
    int rc = tok_parse(argc, argv, &o);
    if (rc >= 0) return rc;
    uint8_t *fdata = NULL;
    char *wrapped = NULL;
    const char *text = NULL;
    size_t len = 0;
    if ((rc = tok_text(&o, &fdata, &wrapped, &text, &len)) >= 0) {
        vs_free(wrapped);
        vs_free(fdata);
        return rc;
    }
    rc = 0;
    vs_error err = {0};
    vs_tokenizer *t = vs_tokenizer_load(o.model, &err);
    int32_t *ids = NULL;
    int64_t n = 0;
    if (!t || vs_tokenize_alloc(t, text, len, !o.no_bos, o.special, &ids, &n, &err) != VS_OK) {
        rc = cli_fail_err(CMD, &err);
    } else {
        if (o.info) print_info(t);
        print_tokens(&o, t, ids, n);
    }
    vs_free(ids);
    vs_tokenizer_free(t);
    vs_free(wrapped);
    vs_free(fdata);
    return rc;
}
