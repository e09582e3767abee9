/* chat: conversation -> prompt text, by named template.
 * Owns: the table of chat templates (static, read-only) and the formatting of a turn history into one
 * prompt string. Images are not handled here: each image a message carries is written as the marker
 * VS_CHAT_IMAGE_MARKER ("<image>") in the text, for the vision code to split the prompt on.
 * Templates that contain the end-of-sequence text ("</s>" after an assistant turn in vicuna) expect the
 * prompt to be tokenised with parse_special = true, so that text becomes the EOS token.
 *
 * Templates (vs_chat_template_find names):
 *   "vicuna"       LLaVA-1.5's conv_vicuna_v1 (SeparatorStyle.TWO): the default system prompt
 *                  "A chat between a curious user and an artificial intelligence assistant. The assistant
 *                  gives helpful, detailed, and polite answers to the user's questions." + " ", then per
 *                  turn "USER: {msg} " and "ASSISTANT: {msg}</s>"; the generation prompt is "ASSISTANT:".
 *                  Images go first in their message: "<image>\n{msg}" (LLaVA's convention).
 *   "vicuna-short" The same without a system prompt: "USER: <image>\n{msg} ASSISTANT:" (llama.cpp's
 *                  llava examples; the prompts in the parity test data).
 *   "plain"        LLaVA's pretraining format: "{image markers}{msg}\n" per message, no roles.
 * A system message in the history replaces the template's default system prompt ("vicuna" /
 * "vicuna-short"); "plain" ignores system messages. */
#ifndef VS_CHAT_H
#define VS_CHAT_H

#include "common.h"

#define VS_CHAT_IMAGE_MARKER "<image>"

typedef enum vs_chat_role {
    VS_CHAT_SYSTEM = 0,
    VS_CHAT_USER = 1,
    VS_CHAT_ASSISTANT = 2,
} vs_chat_role;

typedef struct vs_chat_msg {
    vs_chat_role role;
    const char *content; /* UTF-8, NUL-terminated; may already contain "<image>" markers */
    int n_images;        /* images attached to this message whose markers are NOT in content:
                            the template inserts that many markers where the model expects them */
} vs_chat_msg;

typedef struct vs_chat_template vs_chat_template;

/* Template by name ("vicuna", "vicuna-short", "plain"), or NULL if unknown. */
const vs_chat_template *vs_chat_template_find(const char *name);
/* Enumeration for --help texts: i in [0, vs_chat_template_count()). */
int vs_chat_template_count(void);
const vs_chat_template *vs_chat_template_at(int i);
const char *vs_chat_template_name(const vs_chat_template *tpl);
const char *vs_chat_template_description(const vs_chat_template *tpl);
/* Default system prompt ("" when the template has none). */
const char *vs_chat_template_system(const vs_chat_template *tpl);
/* Text that ends an assistant turn in this template ("</s>" for vicuna, "" if none): the generated
 * reply stops at the EOS token; a history replayed through vs_chat_format gets this text appended. */
const char *vs_chat_template_turn_end(const vs_chat_template *tpl);

/* Formats msgs[0..n) (any order of user / assistant turns, an optional leading system message) into
 * a vs_malloc'ed NUL-terminated prompt (*out; *out_len may be NULL). add_generation_prompt appends
 * the assistant's role header ("ASSISTANT:") so the model continues with the reply.
 * VS_ERR_INVALID for a NULL content, a negative n_images, a system message after the first position,
 * or an unknown role. */
vs_status vs_chat_format(const vs_chat_template *tpl, const vs_chat_msg *msgs, int64_t n,
                         bool add_generation_prompt, char **out, size_t *out_len, vs_error *err);

#endif
