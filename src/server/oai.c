/* oai: OpenAI's request and reply JSON (oai.h). */
#include "oai.h"

#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Drops, in place, every byte that does not belong to a complete UTF-8 sequence: a message quotes the request
 * with a byte limit ('%.40s', a full buffer) that can cut a character, and JSON must stay valid UTF-8. */
static void utf8_clean(char *s) {
    const uint8_t *r = (const uint8_t *)s, *end = r + strlen(s);
    char *w = s;
    while (r < end) {
        const int n = vs_utf8_valid_len(r, (size_t)(end - r));
        if (n == 0) r++;
        for (int k = 0; k < n; k++) *w++ = (char)*r++;
    }
    *w = 0;
}

bool vs_oai_fail(vs_oai_error *e, int http, const char *type, const char *param, const char *fmt, ...) {
    if (!e) return false;
    e->http = http;
    e->type = type;
    e->code = NULL;
    snprintf(e->param, sizeof(e->param), "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof(e->message), fmt, ap);
    va_end(ap);
    utf8_clean(e->param);
    utf8_clean(e->message);
    return false;
}

#define BAD(e, param, ...) vs_oai_fail(e, 400, "invalid_request_error", param, __VA_ARGS__)

void vs_oai_req_free(vs_oai_req *r) {
    if (!r) return;
    for (int32_t i = 0; i < r->n_msgs; i++) vs_free((void *)r->msgs[i].content);
    vs_free(r->msgs);
    vs_free(r->prompt);
    for (int32_t i = 0; i < r->n_images; i++) {
        vs_free((void *)r->images[i].data);
        vs_free((void *)r->images[i].name);
    }
    vs_free(r->images);
    vs_free(r->model);
    for (int32_t i = 0; i < r->n_stop; i++) vs_free(r->stop[i]);
    vs_free(r->method);
    memset(r, 0, sizeof(*r));
}

/* --- base64 --- */

static int b64_value(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

bool vs_base64_decode(const char *s, size_t n, uint8_t **out, size_t *out_len) {
    *out = NULL;
    *out_len = 0;
    size_t pad = 0;
    while (n > 0 && s[n - 1] == '=' && pad < 2) n--, pad++;
    if (n % 4 == 1 || (pad && (n + pad) % 4)) return false;
    uint8_t *buf = vs_malloc(n / 4 * 3 + 3);
    if (!buf) return false;
    size_t o = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        const int v = b64_value((unsigned char)s[i]);
        if (v < 0) {
            vs_free(buf);
            return false;
        }
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            buf[o++] = (uint8_t)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    if (acc != 0) { /* the last character's unused bits must be zero (canonical encoding) */
        vs_free(buf);
        return false;
    }
    *out = buf;
    *out_len = o;
    return true;
}

/* --- typed field readers: absent or null leaves *out; another type is a 400 naming the field --- */

static bool get_num_p(const vs_json *o, const char *key, const char *param, double lo, double hi, bool *has,
                      double *out, vs_oai_error *e) {
    const vs_json *v = vs_json_get(o, key);
    if (!v || v->type == VS_JSON_NULL) return true;
    if (v->type != VS_JSON_NUMBER) return BAD(e, param, "'%s' must be a number", param);
    if (!(v->num >= lo && v->num <= hi)) return BAD(e, param, "'%s' must be in [%g, %g]", param, lo, hi);
    if (has) *has = true;
    *out = v->num;
    return true;
}

static bool get_int_p(const vs_json *o, const char *key, const char *param, int64_t lo, int64_t hi, bool *has,
                      int64_t *out, vs_oai_error *e) {
    const vs_json *v = vs_json_get(o, key);
    if (!v || v->type == VS_JSON_NULL) return true;
    if (v->type != VS_JSON_NUMBER || !v->is_int) return BAD(e, param, "'%s' must be an integer", param);
    if (v->i < lo || v->i > hi)
        return BAD(e, param, "'%s' must be in [%lld, %lld]", param, (long long)lo, (long long)hi);
    if (has) *has = true;
    *out = v->i;
    return true;
}

static bool get_bool_p(const vs_json *o, const char *key, const char *param, bool *out, vs_oai_error *e) {
    const vs_json *v = vs_json_get(o, key);
    if (!v || v->type == VS_JSON_NULL) return true;
    if (v->type != VS_JSON_BOOL) return BAD(e, param, "'%s' must be true or false", param);
    *out = v->b;
    return true;
}

#define get_num(o, key, ...) get_num_p(o, key, key, __VA_ARGS__)
#define get_int(o, key, ...) get_int_p(o, key, key, __VA_ARGS__)
#define get_bool(o, key, ...) get_bool_p(o, key, key, __VA_ARGS__)

/* A string without NUL bytes (the engine's strings are C strings). */
static bool plain_str(const vs_json *v, const char *param, vs_oai_error *e) {
    if (v->type != VS_JSON_STRING) return BAD(e, param, "'%s' must be a string", param);
    if (strlen(v->str) != v->len) return BAD(e, param, "'%s' contains a NUL character", param);
    return true;
}

/* --- images --- */

/* Reads NAME under the media folder: the resolved path (symbolic links followed) must stay inside the
 * resolved folder, and be a regular file within the byte limit (checked before reading it). */
static bool read_media(const vs_oai_limits *lim, const char *name, const char *param, uint8_t **data, size_t *size,
                       vs_oai_error *e) {
    char path[4096], root[PATH_MAX], real[PATH_MAX];
    if ((size_t)snprintf(path, sizeof(path), "%s/%s", lim->media_path, name) >= sizeof(path))
        return BAD(e, param, "file:// path too long");
    if (!realpath(lim->media_path, root)) return vs_oai_fail(e, 500, "server_error", param, "the media folder is gone");
    const size_t rl = strlen(root);
    if (!realpath(path, real) || strncmp(real, root, rl) || (real[rl] != '/' && rl > 1))
        return BAD(e, param, "no image '%s' in the media folder", name);
    const int fd = open(real, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        if (fd >= 0) close(fd);
        return BAD(e, param, "'%s' is not a readable regular file", name);
    }
    if ((uint64_t)st.st_size > lim->max_image_bytes) {
        close(fd);
        return vs_oai_fail(e, 413, "invalid_request_error", param, "image larger than the limit of %zu bytes",
                           lim->max_image_bytes);
    }
    *size = (size_t)st.st_size;
    *data = vs_malloc(*size ? *size : 1);
    size_t got = 0;
    while (*data && got < *size) {
        const ssize_t k = read(fd, *data + got, *size - got);
        if (k <= 0) break;
        got += (size_t)k;
    }
    close(fd);
    if (!*data || got != *size || !*size) {
        vs_free(*data);
        *data = NULL;
        return BAD(e, param, "cannot read image '%s'", name);
    }
    return true;
}

static bool add_image(vs_oai_req *r, const vs_json *url_v, const char *param, const vs_oai_limits *lim,
                      vs_oai_error *e) {
    if (!plain_str(url_v, param, e)) return false;
    if (r->n_images >= lim->max_images)
        return BAD(e, param, "too many images: at most %d per request", (int)lim->max_images);
    const char *url = url_v->str;
    uint8_t *data = NULL;
    size_t size = 0;
    if (!strncmp(url, "data:", 5)) {
        const char *comma = strchr(url, ',');
        if (!comma) return BAD(e, param, "malformed data URI (no ',')");
        const size_t hlen = (size_t)(comma - url);
        if (hlen < 12 || strncmp(url + 5, "image/", 6) || hlen < 7 || strncmp(comma - 7, ";base64", 7))
            return BAD(e, param, "an image data URI must be data:image/<type>;base64,<data>");
        const size_t n = url_v->len - hlen - 1;
        if (n / 4 * 3 > lim->max_image_bytes + 3)
            return vs_oai_fail(e, 413, "invalid_request_error", param, "image larger than the limit of %zu bytes",
                               lim->max_image_bytes);
        if (!vs_base64_decode(comma + 1, n, &data, &size)) return BAD(e, param, "invalid base64 in the image data URI");
        if (size > lim->max_image_bytes) {
            vs_free(data);
            return vs_oai_fail(e, 413, "invalid_request_error", param, "image larger than the limit of %zu bytes",
                               lim->max_image_bytes);
        }
        if (size == 0) {
            vs_free(data);
            return BAD(e, param, "empty image data");
        }
    } else if (!strncmp(url, "file://", 7)) {
        const char *name = url + 7;
        if (!lim->media_path)
            return BAD(e, param, "file:// image URLs need the server's --media-path folder (none was given)");
        /* a relative name without '..' components: nothing outside the folder */
        if (!*name || name[0] == '/' || strstr(name, "\\"))
            return BAD(e, param, "file:// names a file inside --media-path: a relative path");
        for (const char *p = name; *p;) {
            const char *q = strchr(p, '/');
            const size_t len = q ? (size_t)(q - p) : strlen(p);
            if ((len == 2 && !strncmp(p, "..", 2)) || len == 0)
                return BAD(e, param, "file:// path may not contain '..' or empty components");
            p += len + (q ? 1 : 0);
        }
        if (!read_media(lim, name, param, &data, &size, e)) return false;
    } else if (!strncmp(url, "http://", 7) || !strncmp(url, "https://", 8)) {
        return BAD(e, param, "the server does not fetch URLs: send the image as a data:image/...;base64 URI");
    } else {
        return BAD(e, param, "unsupported image URL (expected data:image/...;base64,... or file://)");
    }
    vs_req_image *im = vs_realloc(r->images, sizeof(*im) * (size_t)(r->n_images + 1));
    char name[32];
    snprintf(name, sizeof(name), "image %d", (int)r->n_images + 1);
    char *nm = vs_strdup(name);
    if (!im || !nm) {
        if (im) r->images = im;
        vs_free(data);
        vs_free(nm);
        return vs_oai_fail(e, 500, "server_error", NULL, "out of memory");
    }
    r->images = im;
    im[r->n_images++] = (vs_req_image){.data = data, .size = size, .name = nm};
    return true;
}

/* --- messages --- */

static bool parse_role(const char *s, vs_chat_role *out) {
    if (!strcmp(s, "system") || !strcmp(s, "developer")) *out = VS_CHAT_SYSTEM;
    else if (!strcmp(s, "user")) *out = VS_CHAT_USER;
    else if (!strcmp(s, "assistant")) *out = VS_CHAT_ASSISTANT;
    else return false;
    return true;
}

/* Appends s to a growing text (parts joined with '\n'). */
static bool text_append(char **buf, size_t *len, const char *s, size_t n) {
    const size_t sep = *len ? 1 : 0;
    char *b = vs_realloc(*buf, *len + sep + n + 1);
    if (!b) return false;
    if (sep) b[(*len)++] = '\n';
    memcpy(b + *len, s, n);
    *len += n;
    b[*len] = 0;
    *buf = b;
    return true;
}

static bool parse_message(vs_oai_req *r, const vs_json *m, size_t idx, const vs_oai_limits *lim, vs_oai_error *e) {
    char param[64];
    snprintf(param, sizeof(param), "messages[%zu]", idx);
    if (m->type != VS_JSON_OBJECT) return BAD(e, param, "'%s' must be an object", param);
    const vs_json *role_v = vs_json_get(m, "role");
    char p2[96];
    snprintf(p2, sizeof(p2), "%s.role", param);
    if (!role_v) return BAD(e, p2, "'%s' is required", p2);
    if (!plain_str(role_v, p2, e)) return false;
    vs_chat_role role;
    if (!parse_role(role_v->str, &role))
        return BAD(e, p2, "unsupported role '%.40s' (system, developer, user or assistant)", role_v->str);
    if (role == VS_CHAT_SYSTEM && r->n_msgs > 0)
        return BAD(e, p2, "a system message must come first");
    const vs_json *c = vs_json_get(m, "content");
    snprintf(p2, sizeof(p2), "%s.content", param);
    char *text = NULL;
    size_t len = 0;
    const int32_t images_before = r->n_images;
    if (!c || c->type == VS_JSON_NULL) {
        if (role != VS_CHAT_ASSISTANT) return BAD(e, p2, "'%s' is required", p2);
    } else if (c->type == VS_JSON_STRING) {
        if (!plain_str(c, p2, e)) return false;
        if (!text_append(&text, &len, c->str, c->len)) goto oom;
    } else if (c->type == VS_JSON_ARRAY) {
        for (size_t k = 0; k < c->len; k++) {
            const vs_json *part = &c->items[k];
            char p3[128];
            snprintf(p3, sizeof(p3), "%s[%zu]", p2, k);
            if (part->type != VS_JSON_OBJECT) {
                vs_free(text);
                return BAD(e, p3, "'%s' must be an object", p3);
            }
            const char *type = vs_json_get_str(part, "type", NULL);
            if (type && !strcmp(type, "text")) {
                const vs_json *t = vs_json_get(part, "text");
                if (!t || !plain_str(t, p3, e)) {
                    vs_free(text);
                    return t ? false : BAD(e, p3, "a text part needs 'text'");
                }
                if (!text_append(&text, &len, t->str, t->len)) goto oom;
            } else if (type && !strcmp(type, "image_url")) {
                if (role != VS_CHAT_USER) {
                    vs_free(text);
                    return BAD(e, p3, "images are accepted in user messages only");
                }
                const vs_json *iu = vs_json_get(part, "image_url");
                const vs_json *url = iu && iu->type == VS_JSON_OBJECT ? vs_json_get(iu, "url") : iu;
                if (!url) {
                    vs_free(text);
                    return BAD(e, p3, "an image_url part needs 'image_url': {\"url\": ...}");
                }
                if (!add_image(r, url, p3, lim, e)) {
                    vs_free(text);
                    return false;
                }
            } else {
                vs_free(text);
                return BAD(e, p3, "unsupported content part type '%.40s' (text or image_url)", type ? type : "");
            }
        }
    } else {
        return BAD(e, p2, "'%s' must be a string or an array of parts", p2);
    }
    if (!text && !(text = vs_strdup(""))) goto oom;
    if (strstr(text, VS_CHAT_IMAGE_MARKER)) {
        vs_free(text);
        return BAD(e, p2, "message text may not contain the image marker '%s'", VS_CHAT_IMAGE_MARKER);
    }
    vs_chat_msg *msgs = vs_realloc(r->msgs, sizeof(*msgs) * (size_t)(r->n_msgs + 1));
    if (!msgs) goto oom;
    r->msgs = msgs;
    msgs[r->n_msgs++] = (vs_chat_msg){.role = role, .content = text, .n_images = (int)(r->n_images - images_before)};
    return true;
oom:
    vs_free(text);
    return vs_oai_fail(e, 500, "server_error", NULL, "out of memory");
}

/* --- the request --- */

static bool parse_stop(vs_oai_req *r, const vs_json *root, vs_oai_error *e) {
    const vs_json *s = vs_json_get(root, "stop");
    if (!s || s->type == VS_JSON_NULL) return true;
    const size_t n = s->type == VS_JSON_ARRAY ? s->len : 1;
    if (s->type != VS_JSON_ARRAY && s->type != VS_JSON_STRING)
        return BAD(e, "stop", "'stop' must be a string or an array of strings");
    if (n > VS_REQ_MAX_STOP) return BAD(e, "stop", "at most %d stop strings", VS_REQ_MAX_STOP);
    for (size_t i = 0; i < n; i++) {
        const vs_json *v = s->type == VS_JSON_ARRAY ? &s->items[i] : s;
        if (!plain_str(v, "stop", e)) return false;
        if (v->len == 0) return BAD(e, "stop", "stop strings may not be empty");
        if (!(r->stop[r->n_stop] = vs_strdup(v->str))) return vs_oai_fail(e, 500, "server_error", NULL, "out of memory");
        r->n_stop++;
    }
    return true;
}

static bool parse_vlmspec(vs_oai_req *r, const vs_json *root, vs_oai_error *e) {
    const vs_json *v = vs_json_get(root, "vlmspec");
    if (!v || v->type == VS_JSON_NULL) return true;
    if (v->type != VS_JSON_OBJECT) return BAD(e, "vlmspec", "'vlmspec' must be an object");
    for (size_t i = 0; i < v->len; i++) {
        const char *k = v->keys[i];
        if (strcmp(k, "method") && strcmp(k, "gamma") && strcmp(k, "tree_width") && strcmp(k, "draft_greedy"))
            return BAD(e, "vlmspec", "unknown field 'vlmspec.%.40s' (method, gamma, tree_width, draft_greedy)", k);
    }
    const vs_json *m = vs_json_get(v, "method");
    if (m && m->type != VS_JSON_NULL) {
        if (!plain_str(m, "vlmspec.method", e)) return false;
        if (!vs_method_find(m->str)) {
            char names[512];
            vs_method_names(names, sizeof(names));
            return BAD(e, "vlmspec.method", "unknown method '%.40s' (%s)", m->str, names);
        }
        if (!(r->method = vs_strdup(m->str))) return vs_oai_fail(e, 500, "server_error", NULL, "out of memory");
    }
    int64_t g = -1, tw = -1;
    if (!get_int_p(v, "gamma", "vlmspec.gamma", 1, VS_SPEC_MAX_GAMMA, NULL, &g, e)) return false;
    if (!get_int_p(v, "tree_width", "vlmspec.tree_width", 1, VS_DRAFT_ENS_MAX_WIDTH, NULL, &tw, e)) return false;
    r->gamma = (int32_t)g, r->tree_width = (int32_t)tw;
    if (tw > 0 && r->method && strchr(r->method, '@'))
        return BAD(e, "vlmspec.tree_width", "method '%.40s' names its tree shape: tree_width does not apply",
                   r->method);
    const vs_json *dg = vs_json_get(v, "draft_greedy");
    if (dg && dg->type != VS_JSON_NULL) {
        bool greedy = false;
        if (!get_bool_p(v, "draft_greedy", "vlmspec.draft_greedy", &greedy, e)) return false;
        r->draft_greedy = greedy;
    }
    return true;
}

/* Fields that would change the reply in ways the server does not implement: refused, never ignored. */
static bool refuse_unsupported(const vs_json *root, vs_oai_error *e) {
    int64_t n = 1;
    if (!get_int(root, "n", 1, 1, NULL, &n, e)) return false;
    static const char *const penalties[] = {"frequency_penalty", "presence_penalty"};
    for (size_t i = 0; i < VS_ARRAY_LEN(penalties); i++) {
        double p = 0;
        if (!get_num(root, penalties[i], -2, 2, NULL, &p, e)) return false;
        if (p != 0) return BAD(e, penalties[i], "'%s' is not supported (only 0)", penalties[i]);
    }
    const vs_json *lpv = vs_json_get(root, "logprobs");
    if (lpv && lpv->type != VS_JSON_NULL && !(lpv->type == VS_JSON_BOOL && !lpv->b))
        return BAD(e, "logprobs", "'logprobs' is not supported");
    /* completions' own fields that would change the reply */
    const vs_json *echo = vs_json_get(root, "echo");
    if (echo && echo->type != VS_JSON_NULL && !(echo->type == VS_JSON_BOOL && !echo->b))
        return BAD(e, "echo", "'echo' is not supported");
    const vs_json *suffix = vs_json_get(root, "suffix");
    if (suffix && suffix->type != VS_JSON_NULL && !(suffix->type == VS_JSON_STRING && suffix->len == 0))
        return BAD(e, "suffix", "'suffix' is not supported");
    int64_t best_of = 1;
    if (!get_int(root, "best_of", 1, 1, NULL, &best_of, e)) return false;
    const vs_json *bias = vs_json_get(root, "logit_bias");
    if (bias && bias->type != VS_JSON_NULL && !(bias->type == VS_JSON_OBJECT && bias->len == 0))
        return BAD(e, "logit_bias", "'logit_bias' is not supported");
    const vs_json *tl = vs_json_get(root, "top_logprobs");
    if (tl && tl->type != VS_JSON_NULL) return BAD(e, "top_logprobs", "'top_logprobs' is not supported");
    const vs_json *tools = vs_json_get(root, "tools");
    if (tools && tools->type != VS_JSON_NULL && !(tools->type == VS_JSON_ARRAY && tools->len == 0))
        return BAD(e, "tools", "tool calls are not supported");
    const vs_json *rf = vs_json_get(root, "response_format");
    if (rf && rf->type != VS_JSON_NULL) {
        const char *t = vs_json_get_str(rf, "type", NULL);
        if (!t || strcmp(t, "text")) return BAD(e, "response_format", "only response_format {\"type\": \"text\"}");
    }
    return true;
}

bool vs_oai_parse(vs_oai_kind kind, const char *body, size_t len, const vs_oai_limits *lim, vs_oai_req *r,
                  vs_oai_error *e) {
    memset(r, 0, sizeof(*r));
    r->kind = kind;
    r->max_tokens = -1;
    r->gamma = r->tree_width = r->draft_greedy = -1;
    vs_error jerr = {0};
    vs_json_doc *doc = vs_json_parse(body, len, "request body", &jerr);
    if (!doc) return BAD(e, NULL, "malformed JSON: %s", jerr.msg);
    const vs_json *root = vs_json_root(doc);
    bool ok = false;
    if (root->type != VS_JSON_OBJECT) {
        BAD(e, NULL, "the request body must be a JSON object");
        goto done;
    }
    const vs_json *model = vs_json_get(root, "model");
    if (model && model->type != VS_JSON_NULL) {
        if (!plain_str(model, "model", e)) goto done;
        if (!(r->model = vs_strdup(model->str))) goto oom;
    }
    if (kind == VS_OAI_CHAT) {
        const vs_json *msgs = vs_json_get(root, "messages");
        if (!msgs) {
            BAD(e, "messages", "'messages' is required");
            goto done;
        }
        if (msgs->type != VS_JSON_ARRAY) {
            BAD(e, "messages", "'messages' must be an array");
            goto done;
        }
        if (msgs->len == 0) {
            BAD(e, "messages", "'messages' is empty");
            goto done;
        }
        if (msgs->len > 4096) {
            BAD(e, "messages", "too many messages (at most 4096)");
            goto done;
        }
        for (size_t i = 0; i < msgs->len; i++)
            if (!parse_message(r, &msgs->items[i], i, lim, e)) goto done;
    } else {
        const vs_json *p = vs_json_get(root, "prompt");
        if (p && p->type == VS_JSON_ARRAY && p->len == 1) p = &p->items[0];
        if (!p || p->type != VS_JSON_STRING) {
            BAD(e, "prompt", "'prompt' must be a string (or an array of one string)");
            goto done;
        }
        if (!plain_str(p, "prompt", e)) goto done;
        if (!(r->prompt = vs_strdup(p->str))) goto oom;
    }
    const vs_json *mt = vs_json_get(root, "max_completion_tokens");
    const char *mt_key = mt && mt->type != VS_JSON_NULL ? "max_completion_tokens" : "max_tokens";
    if (!get_int_p(root, mt_key, mt_key, 1, INT32_MAX, NULL, &r->max_tokens, e)) goto done;
    if (!get_num(root, "temperature", 0, 2, &r->has_temperature, &r->temperature, e)) goto done;
    if (!get_num(root, "top_p", 0, 1, &r->has_top_p, &r->top_p, e)) goto done;
    if (!get_num(root, "min_p", 0, 1, &r->has_min_p, &r->min_p, e)) goto done;
    if (!get_int(root, "top_k", 0, INT32_MAX, &r->has_top_k, &r->top_k, e)) goto done;
    int64_t seed = 0;
    if (!get_int(root, "seed", INT64_MIN, INT64_MAX, &r->has_seed, &seed, e)) goto done;
    r->seed = (uint64_t)seed;
    if (!get_bool(root, "stream", &r->stream, e)) goto done;
    const vs_json *so = vs_json_get(root, "stream_options");
    if (so && so->type != VS_JSON_NULL) {
        if (so->type != VS_JSON_OBJECT) {
            BAD(e, "stream_options", "'stream_options' must be an object");
            goto done;
        }
        if (!get_bool(so, "include_usage", &r->include_usage, e)) goto done;
    }
    if (!parse_stop(r, root, e) || !parse_vlmspec(r, root, e) || !refuse_unsupported(root, e)) goto done;
    ok = true;
    goto done;
oom:
    vs_oai_fail(e, 500, "server_error", NULL, "out of memory");
done:
    vs_json_doc_free(doc);
    if (!ok) vs_oai_req_free(r);
    return ok;
}

const char *vs_oai_finish_reason(vs_finish f) {
    switch (f) {
    case VS_FINISH_EOS:
    case VS_FINISH_STOP: return "stop";
    case VS_FINISH_LIMIT:
    case VS_FINISH_CONTEXT: return "length";
    default: return NULL;
    }
}

/* --- writers --- */

void vs_oai_write_error(vs_json_writer *w, const vs_oai_error *e) {
    vs_json_obj_begin(w);
    vs_json_key(w, "error");
    vs_json_obj_begin(w);
    vs_json_kv_str(w, "message", e->message);
    vs_json_kv_str(w, "type", e->type ? e->type : "server_error");
    vs_json_key(w, "param");
    if (e->param[0]) vs_json_str(w, e->param);
    else vs_json_null(w);
    vs_json_key(w, "code");
    if (e->code) vs_json_str(w, e->code);
    else vs_json_int(w, e->http);
    vs_json_obj_end(w);
    vs_json_obj_end(w);
}

void vs_oai_write_usage(vs_json_writer *w, const vs_oai_usage *u) {
    vs_json_key(w, "usage");
    vs_json_obj_begin(w);
    vs_json_kv_int(w, "prompt_tokens", u->prompt_tokens);
    vs_json_kv_int(w, "completion_tokens", u->completion_tokens);
    vs_json_kv_int(w, "total_tokens", u->prompt_tokens + u->completion_tokens);
    vs_json_obj_end(w);
}

void vs_oai_write_timings(vs_json_writer *w, const vs_oai_usage *u) {
    vs_json_key(w, "timings");
    vs_json_obj_begin(w);
    vs_json_kv_int(w, "prompt_n", u->prompt_n);
    vs_json_kv_num(w, "prompt_ms", u->prompt_ms);
    vs_json_kv_num(w, "prompt_per_second", u->prompt_ms > 0 ? (double)u->prompt_n * 1e3 / u->prompt_ms : 0);
    vs_json_kv_int(w, "predicted_n", u->completion_tokens);
    vs_json_kv_num(w, "predicted_ms", u->predicted_ms);
    vs_json_kv_num(w, "predicted_per_second",
                   u->predicted_ms > 0 ? (double)u->completion_tokens * 1e3 / u->predicted_ms : 0);
    vs_json_kv_int(w, "draft_n", u->draft_n);
    vs_json_kv_int(w, "draft_n_accepted", u->draft_n_accepted);
    vs_json_kv_int(w, "verify_passes", u->verify_passes);
    vs_json_kv_num(w, "tau", u->verify_passes > 0 ? (double)u->completion_tokens / (double)u->verify_passes : 0);
    vs_json_kv_str(w, "method", u->method ? u->method : "ar");
    vs_json_kv_int(w, "gamma", u->gamma);
    vs_json_kv_int(w, "tree_width", u->tree_width);
    vs_json_obj_end(w);
}

static void write_head(vs_json_writer *w, const char *object, const char *id, int64_t created, const char *model) {
    vs_json_kv_str(w, "id", id);
    vs_json_kv_str(w, "object", object);
    vs_json_kv_int(w, "created", created);
    vs_json_kv_str(w, "model", model);
    vs_json_kv_str(w, "system_fingerprint", "vlmspec");
}

void vs_oai_write_reply(vs_json_writer *w, vs_oai_kind kind, const char *id, int64_t created, const char *model,
                        const char *text, size_t text_len, const char *finish_reason, const vs_oai_usage *u) {
    vs_json_obj_begin(w);
    write_head(w, kind == VS_OAI_CHAT ? "chat.completion" : "text_completion", id, created, model);
    vs_json_key(w, "choices");
    vs_json_arr_begin(w);
    vs_json_obj_begin(w);
    vs_json_kv_int(w, "index", 0);
    if (kind == VS_OAI_CHAT) {
        vs_json_key(w, "message");
        vs_json_obj_begin(w);
        vs_json_kv_str(w, "role", "assistant");
        vs_json_key(w, "content");
        vs_json_strn(w, text, text_len);
        vs_json_obj_end(w);
    } else {
        vs_json_key(w, "text");
        vs_json_strn(w, text, text_len);
    }
    vs_json_key(w, "logprobs");
    vs_json_null(w);
    vs_json_key(w, "finish_reason");
    if (finish_reason) vs_json_str(w, finish_reason);
    else vs_json_null(w);
    vs_json_obj_end(w);
    vs_json_arr_end(w);
    vs_oai_write_usage(w, u);
    vs_oai_write_timings(w, u);
    vs_json_obj_end(w);
}

void vs_oai_write_chunk(vs_json_writer *w, vs_oai_kind kind, const char *id, int64_t created, const char *model,
                        const char *role, const char *text, size_t text_len, const char *finish_reason,
                        const vs_oai_usage *usage, const char *ext, size_t ext_len) {
    vs_json_obj_begin(w);
    write_head(w, kind == VS_OAI_CHAT ? "chat.completion.chunk" : "text_completion", id, created, model);
    vs_json_key(w, "choices");
    vs_json_arr_begin(w);
    if (!usage) {
        vs_json_obj_begin(w);
        vs_json_kv_int(w, "index", 0);
        if (kind == VS_OAI_CHAT) {
            vs_json_key(w, "delta");
            vs_json_obj_begin(w);
            if (role) vs_json_kv_str(w, "role", role);
            if (text) {
                vs_json_key(w, "content");
                vs_json_strn(w, text, text_len);
            }
            vs_json_obj_end(w);
        } else {
            vs_json_key(w, "text");
            vs_json_strn(w, text ? text : "", text ? text_len : 0);
        }
        vs_json_key(w, "logprobs");
        vs_json_null(w);
        vs_json_key(w, "finish_reason");
        if (finish_reason) vs_json_str(w, finish_reason);
        else vs_json_null(w);
        vs_json_obj_end(w);
    }
    vs_json_arr_end(w);
    if (usage) {
        vs_oai_write_usage(w, usage);
        vs_oai_write_timings(w, usage);
    }
    if (ext) {
        vs_json_key(w, "vlmspec");
        vs_json_raw(w, ext, ext_len);
    }
    vs_json_obj_end(w);
}
