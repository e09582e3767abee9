/* chat: the template table and turn-history formatting. See chat.h. Adding a template = one table
 * entry: role headers, separators after user / assistant turns, default system prompt, and where image
 * markers go. */
#include "chat.h"

#include <string.h>

typedef enum img_place {
    IMG_FRONT_NEWLINE, /* "<image>\n" + message (LLaVA-1.5) */
    IMG_FRONT,         /* "<image>" + message (LLaVA pretraining "plain") */
} img_place;

struct vs_chat_template {
    const char *name;
    const char *description;
    const char *system;     /* default system prompt ("" = none) */
    const char *system_sep; /* after the system prompt */
    const char *user_head;  /* before a user message */
    const char *user_sep;   /* after a user message */
    const char *asst_head;  /* before an assistant message */
    const char *asst_sep;   /* after an assistant message */
    const char *gen_prompt; /* add_generation_prompt text */
    bool use_system;        /* false: system messages are ignored */
    img_place images;
};

#define LLAVA_SYSTEM                                                                                         \
    "A chat between a curious user and an artificial intelligence assistant. The assistant gives helpful, "  \
    "detailed, and polite answers to the user's questions."

static const vs_chat_template TEMPLATES[] = {
    {"vicuna", "LLaVA-1.5 / Vicuna v1 with its system prompt: \"<system> USER: <image>\\n... ASSISTANT:\"",
     LLAVA_SYSTEM, " ", "USER: ", " ", "ASSISTANT: ", "</s>", "ASSISTANT:", true, IMG_FRONT_NEWLINE},
    {"vicuna-short",
     "Vicuna v1 without a system prompt: \"USER: <image>\\n... ASSISTANT:\" (llama.cpp llava)", "", " ",
     "USER: ", " ", "ASSISTANT: ", "</s>", "ASSISTANT:", true, IMG_FRONT_NEWLINE},
    {"plain", "LLaVA pretraining: \"<image>{message}\\n\" per message, no roles", "", "", "", "\n", "", "\n",
     "", false, IMG_FRONT},
};

const vs_chat_template *vs_chat_template_find(const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < VS_ARRAY_LEN(TEMPLATES); i++)
        if (!strcmp(TEMPLATES[i].name, name)) return &TEMPLATES[i];
    return NULL;
}

int vs_chat_template_count(void) { return (int)VS_ARRAY_LEN(TEMPLATES); }

const vs_chat_template *vs_chat_template_at(int i) {
    return i >= 0 && i < (int)VS_ARRAY_LEN(TEMPLATES) ? &TEMPLATES[i] : NULL;
}

const char *vs_chat_template_name(const vs_chat_template *tpl) { return tpl->name; }
const char *vs_chat_template_description(const vs_chat_template *tpl) { return tpl->description; }
const char *vs_chat_template_system(const vs_chat_template *tpl) { return tpl->system; }
const char *vs_chat_template_turn_end(const vs_chat_template *tpl) { return tpl->asst_sep; }

typedef struct sbuf {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

static void put(sbuf *b, const char *s) {
    size_t l = strlen(s);
    if (b->oom) return;
    if (b->n + l + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + l + 1) cap *= 2;
        char *q = vs_realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, l);
    b->n += l;
    b->p[b->n] = 0;
}

vs_status vs_chat_format(const vs_chat_template *tpl, const vs_chat_msg *msgs, int64_t n,
                         bool add_generation_prompt, char **out, size_t *out_len, vs_error *err) {
    *out = NULL;
    if (!tpl) return vs_error_set(err, VS_ERR_INVALID, "chat: no template");
    if (n < 0 || (n > 0 && !msgs)) return vs_error_set(err, VS_ERR_INVALID, "chat: bad message list");
    for (int64_t i = 0; i < n; i++) {
        if (!msgs[i].content)
            return vs_error_set(err, VS_ERR_INVALID, "chat: message %lld has no content", (long long)i);
        if (msgs[i].n_images < 0 || msgs[i].n_images > 1000)
            return vs_error_set(err, VS_ERR_INVALID, "chat: message %lld has %d images", (long long)i,
                                msgs[i].n_images);
        if (msgs[i].role != VS_CHAT_SYSTEM && msgs[i].role != VS_CHAT_USER &&
            msgs[i].role != VS_CHAT_ASSISTANT)
            return vs_error_set(err, VS_ERR_INVALID, "chat: message %lld has an unknown role %d",
                                (long long)i, (int)msgs[i].role);
        if (msgs[i].role == VS_CHAT_SYSTEM && i > 0)
            return vs_error_set(err, VS_ERR_INVALID,
                                "chat: system message at position %lld (only the first may be)",
                                (long long)i);
    }
    sbuf b = {0};
    put(&b, "");
    int64_t first = 0;
    const char *system = tpl->system;
    if (n > 0 && msgs[0].role == VS_CHAT_SYSTEM) {
        if (tpl->use_system) system = msgs[0].content;
        first = 1;
    }
    if (tpl->use_system && system[0]) {
        put(&b, system);
        put(&b, tpl->system_sep);
    }
    for (int64_t i = first; i < n; i++) {
        bool user = msgs[i].role == VS_CHAT_USER;
        put(&b, user ? tpl->user_head : tpl->asst_head);
        for (int k = 0; k < msgs[i].n_images; k++) {
            put(&b, VS_CHAT_IMAGE_MARKER);
            if (tpl->images == IMG_FRONT_NEWLINE) put(&b, "\n");
        }
        put(&b, msgs[i].content);
        put(&b, user ? tpl->user_sep : tpl->asst_sep);
    }
    if (add_generation_prompt) put(&b, tpl->gen_prompt);
    if (b.oom) {
        vs_free(b.p);
        return vs_error_set(err, VS_ERR_NOMEM, "chat: out of memory");
    }
    *out = b.p;
    if (out_len) *out_len = b.n;
    return VS_OK;
}
