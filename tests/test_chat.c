/* test_chat: chat templates. LLaVA-1.5's vicuna_v1 conversation format (system prompt, "USER: " / " " and
 * "ASSISTANT: " / "</s>" separators, image first as "<image>\n"), the short form without a system prompt,
 * the "plain" pretraining form, multi-turn histories, and bad message lists. */
#include <string.h>

#include "chat.h"
#include "testutil.h"

static const char *esc(const char *s, size_t n) {
    static char buf[2][1024];
    static int k;
    char *b = buf[k++ & 1];
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

static void check_chat(const char *tpl_name, const vs_chat_msg *m, int n, bool gen, const char *want) {
    const vs_chat_template *tpl = vs_chat_template_find(tpl_name);
    VT_REQUIRE(tpl, "template %s", tpl_name);
    char *out = NULL;
    size_t len = 0;
    vs_error err = {0};
    VT_CHECK(vs_chat_format(tpl, m, n, gen, &out, &len, &err) == VS_OK, "%s: %s", tpl_name, err.msg);
    VT_CHECK(out && len == strlen(want) && !strcmp(out, want), "%s:\n got '%s'\nwant '%s'", tpl_name,
             out ? esc(out, len) : "(null)", esc(want, strlen(want)));
    vs_free(out);
}

static void test_chat(void) {
#define SYS                                                                                                  \
    "A chat between a curious user and an artificial intelligence assistant. The assistant gives helpful, "  \
    "detailed, and polite answers to the user's questions."
    vs_chat_msg one[] = {{VS_CHAT_USER, "What is in the image?", 1}};
    check_chat("vicuna", one, 1, true, SYS " USER: <image>\nWhat is in the image? ASSISTANT:");
    check_chat("vicuna-short", one, 1, true, "USER: <image>\nWhat is in the image? ASSISTANT:");
    vs_chat_msg turns[] = {{VS_CHAT_USER, "<image>\nDescribe it.", 0},
                           {VS_CHAT_ASSISTANT, "A red circle.", 0},
                           {VS_CHAT_USER, "And the square?", 0}};
    check_chat("vicuna", turns, 3, true,
               SYS
               " USER: <image>\nDescribe it. ASSISTANT: A red circle.</s>USER: And the square? ASSISTANT:");
    check_chat("vicuna-short", turns, 2, false, "USER: <image>\nDescribe it. ASSISTANT: A red circle.</s>");
    vs_chat_msg sys[] = {{VS_CHAT_SYSTEM, "Be brief.", 0}, {VS_CHAT_USER, "Hi", 2}};
    check_chat("vicuna", sys, 2, true, "Be brief. USER: <image>\n<image>\nHi ASSISTANT:");
    vs_chat_msg plain[] = {{VS_CHAT_SYSTEM, "ignored", 0}, {VS_CHAT_USER, "a cat", 1}};
    check_chat("plain", plain, 2, false, "<image>a cat\n");
    check_chat("vicuna", NULL, 0, true, SYS " ASSISTANT:");

    VT_CHECK(!vs_chat_template_find("nope"), "unknown template");
    VT_CHECK(vs_chat_template_count() >= 3, "template count");
    for (int i = 0; i < vs_chat_template_count(); i++)
        VT_CHECK(vs_chat_template_find(vs_chat_template_name(vs_chat_template_at(i))) ==
                     vs_chat_template_at(i),
                 "enumeration %d", i);
    VT_CHECK(!strcmp(vs_chat_template_turn_end(vs_chat_template_find("vicuna")), "</s>"), "turn end");
    char *out;
    vs_error err = {0};
    vs_chat_msg bad1[] = {{VS_CHAT_USER, "a", 0}, {VS_CHAT_SYSTEM, "late", 0}};
    VT_CHECK(vs_chat_format(vs_chat_template_find("vicuna"), bad1, 2, true, &out, NULL, &err) ==
                     VS_ERR_INVALID &&
                 !out,
             "late system message: %s", err.msg);
    vs_chat_msg bad2[] = {{VS_CHAT_USER, NULL, 0}};
    VT_CHECK(vs_chat_format(vs_chat_template_find("vicuna"), bad2, 1, true, &out, NULL, &err) ==
                 VS_ERR_INVALID,
             "NULL content");
    vs_chat_msg bad3[] = {{(vs_chat_role)7, "x", 0}};
    VT_CHECK(vs_chat_format(vs_chat_template_find("vicuna"), bad3, 1, true, &out, NULL, &err) ==
                 VS_ERR_INVALID,
             "bad role");
#undef SYS
}

int main(void) {
    test_chat();
    return vt_finish("chat");
}
