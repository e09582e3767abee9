/* The server's OpenAI wire format (src/server/oai.h): requests that parse into the fields the engine
 * runs, every refusal with its status and field, base64, and the writers' JSON read back. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "oai.h"
#include "testutil.h"

static const vs_oai_limits LIM = {.max_images = 2, .max_image_bytes = 64, .media_path = NULL};

static bool parse(vs_oai_kind k, const char *body, const vs_oai_limits *lim, vs_oai_req *r, vs_oai_error *e) {
    memset(e, 0, sizeof(*e));
    return vs_oai_parse(k, body, strlen(body), lim ? lim : &LIM, r, e);
}

/* The body is refused with this status and field. */
static void refused(vs_oai_kind k, const char *body, int http, const char *param, const char *what) {
    vs_oai_req r;
    vs_oai_error e;
    const bool ok = parse(k, body, NULL, &r, &e);
    VT_CHECK(!ok, "%s: accepted", what);
    if (ok) {
        vs_oai_req_free(&r);
        return;
    }
    VT_CHECK(e.http == http, "%s: status %d, expected %d (%s)", what, e.http, http, e.message);
    VT_CHECK(!strcmp(e.param, param), "%s: param '%s', expected '%s'", what, e.param, param);
    VT_CHECK(e.type && e.message[0], "%s: no type or message", what);
    VT_CHECK(r.msgs == NULL && r.n_images == 0, "%s: the refused request kept fields", what);
    vs_json_writer w; /* the error response is valid JSON (UTF-8 included) */
    vs_json_writer_init(&w);
    vs_oai_write_error(&w, &e);
    vs_json_doc *d = vs_json_parse(w.buf, w.len, "error response", NULL);
    VT_CHECK(d != NULL, "%s: the error response is not valid JSON: %.*s", what, (int)w.len, w.buf);
    vs_json_doc_free(d);
    vs_json_writer_free(&w);
}

static void test_base64(void) {
    uint8_t *out;
    size_t n;
    VT_CHECK(vs_base64_decode("aGVsbG8=", 8, &out, &n) && n == 5 && !memcmp(out, "hello", 5), "hello");
    vs_free(out);
    VT_CHECK(vs_base64_decode("aGVsbG8", 7, &out, &n) && n == 5, "unpadded");
    vs_free(out);
    VT_CHECK(vs_base64_decode("", 0, &out, &n) && n == 0, "empty");
    vs_free(out);
    VT_CHECK(vs_base64_decode("+/+/", 4, &out, &n) && n == 3 && out[0] == 0xfb && out[1] == 0xff && out[2] == 0xbf,
             "+ and /");
    vs_free(out);
    VT_CHECK(!vs_base64_decode("aGVsbG8*", 8, &out, &n), "a bad character");
    VT_CHECK(!vs_base64_decode("a", 1, &out, &n), "a length that is not whole bytes");
    VT_CHECK(!vs_base64_decode("aGVsbG9=", 8, &out, &n), "non-zero unused bits");
    VT_CHECK(!vs_base64_decode("aG Vs", 5, &out, &n), "whitespace");
}

static void test_chat(void) {
    vs_oai_req r;
    vs_oai_error e;
    const char *body =
        "{\"model\":\"x\",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"What is\"},"
        "{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,aGVsbG8=\"}},"
        "{\"type\":\"text\",\"text\":\"this?\"}]},{\"role\":\"assistant\",\"content\":\"A star.\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":\"data:image/jpeg;base64,QUJD\"}]}],"
        "\"max_tokens\":7,\"temperature\":0,\"top_k\":3,\"top_p\":0.5,\"min_p\":0.25,\"seed\":42,\"stream\":true,"
        "\"stream_options\":{\"include_usage\":true},\"stop\":[\"\\n\",\"END\"],\"user\":\"ignored\","
        "\"vlmspec\":{\"method\":\"m\",\"gamma\":3,\"tree_width\":2,\"draft_greedy\":true}}";
    VT_REQUIRE(parse(VS_OAI_CHAT, body, NULL, &r, &e), "parse: %s", e.message);
    VT_CHECK(r.n_msgs == 4, "messages %d", r.n_msgs);
    VT_CHECK(r.msgs[0].role == VS_CHAT_SYSTEM && !strcmp(r.msgs[0].content, "Be brief."), "system");
    VT_CHECK(r.msgs[1].role == VS_CHAT_USER && !strcmp(r.msgs[1].content, "What is\nthis?") && r.msgs[1].n_images == 1,
             "parts joined with newlines, one image: '%s' %d", r.msgs[1].content, r.msgs[1].n_images);
    VT_CHECK(r.msgs[2].role == VS_CHAT_ASSISTANT && r.msgs[2].n_images == 0, "assistant");
    VT_CHECK(r.msgs[3].n_images == 1 && !strcmp(r.msgs[3].content, ""), "an image-only message");
    VT_CHECK(r.n_images == 2 && r.images[0].size == 5 && !memcmp(r.images[0].data, "hello", 5) &&
                 r.images[1].size == 3 && !memcmp(r.images[1].data, "ABC", 3),
             "images decoded in order");
    VT_CHECK(r.max_tokens == 7 && r.has_temperature && r.temperature == 0 && r.top_k == 3 && r.top_p == 0.5 &&
                 r.min_p == 0.25 && r.has_seed && r.seed == 42,
             "sampling fields");
    VT_CHECK(r.stream && r.include_usage, "stream options");
    VT_CHECK(r.n_stop == 2 && !strcmp(r.stop[0], "\n") && !strcmp(r.stop[1], "END"), "stop list");
    VT_CHECK(r.method && !strcmp(r.method, "m") && r.gamma == 3 && r.tree_width == 2 && r.draft_greedy == 1,
             "the vlmspec object");
    VT_CHECK(r.model && !strcmp(r.model, "x"), "model");
    vs_oai_req_free(&r);

    /* defaults: nothing given */
    VT_REQUIRE(parse(VS_OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stop\":\"x\","
                                  "\"max_completion_tokens\":3}", NULL, &r, &e), "%s", e.message);
    VT_CHECK(!r.has_temperature && !r.has_seed && !r.stream && r.method == NULL && r.gamma == -1 &&
                 r.tree_width == -1 && r.draft_greedy == -1,
             "defaults");
    VT_CHECK(r.n_stop == 1 && !strcmp(r.stop[0], "x"), "a stop string");
    VT_CHECK(r.max_tokens == 3, "max_completion_tokens");
    vs_oai_req_free(&r);
    /* a method with a token-tree shape (methods.h) */
    VT_REQUIRE(parse(VS_OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                                  "\"vlmspec\":{\"method\":\"tabed-mt@k4n24\",\"gamma\":6}}", NULL, &r, &e),
               "%s", e.message);
    VT_CHECK(r.method && !strcmp(r.method, "tabed-mt@k4n24") && r.gamma == 6, "a method with a tree shape");
    vs_oai_req_free(&r);

    /* completions */
    VT_REQUIRE(parse(VS_OAI_COMPLETION, "{\"prompt\":[\"USER: hi ASSISTANT:\"]}", NULL, &r, &e), "%s", e.message);
    VT_CHECK(r.prompt && !strcmp(r.prompt, "USER: hi ASSISTANT:") && r.max_tokens == -1, "completion prompt");
    vs_oai_req_free(&r);
}

static void test_refusals(void) {
    const vs_oai_kind C = VS_OAI_CHAT;
    refused(C, "{", 400, "", "malformed JSON");
    refused(C, "[1]", 400, "", "not an object");
    refused(C, "{}", 400, "messages", "no messages");
    refused(C, "{\"messages\":[]}", 400, "messages", "empty messages");
    refused(C, "{\"messages\":{}}", 400, "messages", "messages an object");
    refused(C, "{\"messages\":[3]}", 400, "messages[0]", "a message that is a number");
    refused(C, "{\"messages\":[{\"content\":\"x\"}]}", 400, "messages[0].role", "no role");
    refused(C, "{\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}", 400, "messages[0].role", "role tool");
    /* a role of 2-, 3- and 4-byte characters: quoting its first 40 bytes cuts one */
    refused(C, "{\"messages\":[{\"role\":\"use\xdd\x8dhi\xe0\xbe\x82\xd3\x84hi\xe0\xbe\x84\xdd\x8dhp\xdd\x8dhi\xd3\x84\xdd\x8dhi"
               "\xe0\xbe\x84\xdd\x8dhi\xe0\xbe\x82p\xdd\x8dhi\xf0\x9f\x98\x80\xf0\x9f\x98\x80\",\"content\":\"x\"}]}",
            400, "messages[0].role", "a long role cut inside a character");
    refused(C, "{\"messages\":[{\"role\":\"user\"}]}", 400, "messages[0].content", "no content");
    refused(C, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", 400, "messages[0].content", "content a number");
    refused(C, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"system\",\"content\":\"b\"}]}", 400,
            "messages[1].role", "a late system message");
    refused(C, "{\"messages\":[{\"role\":\"user\",\"content\":\"a <image> b\"}]}", 400, "messages[0].content",
            "the image marker in text");
    refused(C, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000b\"}]}", 400, "messages[0].content",
            "a NUL in text");
    refused(C, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"audio\"}]}]}", 400,
            "messages[0].content[0]", "an audio part");
    refused(C, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}", 400,
            "messages[0].content[0]", "an image part without its URL");
    refused(C, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":"
               "\"https://example.com/a.png\"}}]}]}",
            400, "messages[0].content[0]", "an http URL");
    refused(C, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":"
               "\"file://a.png\"}}]}]}",
            400, "messages[0].content[0]", "file:// without a media folder");
    refused(C, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":"
               "\"data:image/png;base64,a$b=\"}}]}]}",
            400, "messages[0].content[0]", "bad base64");
    refused(C, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":"
               "\"data:text/plain;base64,QUJD\"}}]}]}",
            400, "messages[0].content[0]", "not an image data URI");
    refused(C, "{\"messages\":[{\"role\":\"assistant\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":"
               "\"data:image/png;base64,QUJD\"}}]}]}",
            400, "messages[0].content[0]", "an image in an assistant message");
    char big[256] = "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":"
                    "\"data:image/png;base64,";
    for (int i = 0; i < 100; i++) strcat(big, "A");
    strcat(big, "\"}}]}]}");
    refused(C, big, 413, "messages[0].content[0]", "an image over the byte limit");
    refused(C, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":\"data:image/png;"
               "base64,QUJD\"},{\"type\":\"image_url\",\"image_url\":\"data:image/png;base64,QUJD\"},{\"type\":"
               "\"image_url\",\"image_url\":\"data:image/png;base64,QUJD\"}]}]}",
            400, "messages[0].content[2]", "too many images");
    const char *hi = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],";
    char b[512];
    struct {
        const char *tail, *param;
    } bad[] = {
        {"\"temperature\":\"hot\"}", "temperature"}, {"\"temperature\":3}", "temperature"},
        {"\"top_p\":1.5}", "top_p"},                 {"\"top_k\":1.5}", "top_k"},
        {"\"max_tokens\":0}", "max_tokens"},         {"\"max_tokens\":-1}", "max_tokens"},
        {"\"stream\":1}", "stream"},                 {"\"stop\":[1]}", "stop"},
        {"\"stop\":\"\"}", "stop"},                  {"\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\"]}", "stop"},
        {"\"n\":2}", "n"},                           {"\"frequency_penalty\":0.5}", "frequency_penalty"},
        {"\"logprobs\":true}", "logprobs"},        {"\"logprobs\":3}", "logprobs"},
        {"\"echo\":true}", "echo"},                {"\"best_of\":2}", "best_of"},
        {"\"logit_bias\":{\"5\":1}}", "logit_bias"}, {"\"suffix\":\"x\"}", "suffix"},          {"\"tools\":[{\"type\":\"function\"}]}", "tools"},
        {"\"response_format\":{\"type\":\"json_object\"}}", "response_format"},
        {"\"vlmspec\":{\"method\":\"nope\"}}", "vlmspec.method"},
        {"\"vlmspec\":{\"gamma\":0}}", "vlmspec.gamma"},
        {"\"vlmspec\":{\"tree_width\":99}}", "vlmspec.tree_width"},
        {"\"vlmspec\":{\"method\":\"m@k0\"}}", "vlmspec.method"},
        {"\"vlmspec\":{\"method\":\"m@k4\",\"tree_width\":2}}", "vlmspec.tree_width"},
        {"\"vlmspec\":{\"draft_greedy\":\"yes\"}}", "vlmspec.draft_greedy"},
        {"\"vlmspec\":{\"colour\":1}}", "vlmspec"},  {"\"vlmspec\":3}", "vlmspec"},
        {"\"stream_options\":true}", "stream_options"}, {"\"model\":7}", "model"},
    };
    for (size_t i = 0; i < VS_ARRAY_LEN(bad); i++) {
        snprintf(b, sizeof(b), "%s%s", hi, bad[i].tail);
        refused(C, b, 400, bad[i].param, bad[i].tail);
    }
    refused(VS_OAI_COMPLETION, "{\"prompt\":5}", 400, "prompt", "a number prompt");
    refused(VS_OAI_COMPLETION, "{\"prompt\":[\"a\",\"b\"]}", 400, "prompt", "two prompts");
}

/* file:// names files under the media folder only. */
static void test_media_path(void) {
    const char *dir = vt_tmpdir();
    char path[512];
    snprintf(path, sizeof(path), "%s/pic.png", dir);
    FILE *f = fopen(path, "wb");
    VT_REQUIRE(f, "cannot write %s", path);
    fputs("PIXELS", f);
    fclose(f);
    vs_oai_limits lim = LIM;
    lim.media_path = dir;
    vs_oai_req r;
    vs_oai_error e;
    const char *ok = "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":"
                     "\"file://pic.png\"}}]}]}";
    VT_REQUIRE(parse(VS_OAI_CHAT, ok, &lim, &r, &e), "file:// under the folder: %s", e.message);
    VT_CHECK(r.n_images == 1 && r.images[0].size == 6 && !memcmp(r.images[0].data, "PIXELS", 6), "read the file");
    vs_oai_req_free(&r);
    /* a link out of the folder, a FIFO (reading it would block), a folder */
    char link[600], fifo[600], sub[600];
    snprintf(link, sizeof(link), "%s/out.png", dir);
    snprintf(fifo, sizeof(fifo), "%s/fifo.png", dir);
    snprintf(sub, sizeof(sub), "%s/sub.png", dir);
    VT_REQUIRE(!symlink("/etc/hostname", link) && !mkfifo(fifo, 0600) && !mkdir(sub, 0700), "test files");
    const char *escapes[] = {"file://../pic.png", "file:///etc/passwd", "file://a//pic.png", "file://missing.png",
                             "file://out.png",    "file://fifo.png",    "file://sub.png"};
    for (size_t i = 0; i < VS_ARRAY_LEN(escapes); i++) {
        char b[256];
        snprintf(b, sizeof(b),
                 "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":\"%s\"}]}]}",
                 escapes[i]);
        VT_CHECK(!parse(VS_OAI_CHAT, b, &lim, &r, &e) && e.http == 400, "%s refused", escapes[i]);
    }
}

static const vs_json *path_get(const vs_json_doc *d, const char *a, const char *b) {
    const vs_json *v = vs_json_get(vs_json_root(d), a);
    return b ? vs_json_get(v, b) : v;
}

static void test_writers(void) {
    vs_json_writer w;
    vs_json_writer_init(&w);
    vs_oai_usage u = {.prompt_tokens = 70, .completion_tokens = 12, .prompt_n = 65, .prompt_ms = 10,
                      .predicted_ms = 100, .draft_n = 20, .draft_n_accepted = 8, .verify_passes = 4, .method = "m",
                      .gamma = 5, .tree_width = 1};
    vs_oai_write_reply(&w, VS_OAI_CHAT, "chatcmpl-1", 5, "target", "A \"star\".\n", 10, "stop", &u);
    vs_json_doc *d = vs_json_parse(w.buf, w.len, "reply", NULL);
    VT_REQUIRE(d, "the reply is JSON: %s", w.buf);
    VT_CHECK(!strcmp(vs_json_get_str(vs_json_root(d), "object", ""), "chat.completion"), "object");
    const vs_json *ch = vs_json_at(path_get(d, "choices", NULL), 0);
    VT_CHECK(!strcmp(vs_json_get_str(vs_json_get(ch, "message"), "content", ""), "A \"star\".\n"), "content");
    VT_CHECK(!strcmp(vs_json_get_str(ch, "finish_reason", ""), "stop"), "finish_reason");
    VT_CHECK(vs_json_get_int(path_get(d, "usage", NULL), "total_tokens", 0) == 82, "usage");
    VT_CHECK(vs_json_get_num(path_get(d, "timings", NULL), "tau", 0) == 3.0, "tau = tokens / verify passes");
    VT_CHECK(vs_json_get_int(path_get(d, "timings", NULL), "draft_n_accepted", 0) == 8, "draft_n_accepted");
    VT_CHECK(vs_json_get_num(path_get(d, "timings", NULL), "predicted_per_second", 0) == 120, "predicted_per_second");
    vs_json_doc_free(d);

    vs_json_writer_reset(&w);
    vs_oai_write_chunk(&w, VS_OAI_CHAT, "c", 5, "target", NULL, NULL, 0, NULL, &u, NULL, 0);
    d = vs_json_parse(w.buf, w.len, "usage chunk", NULL);
    VT_REQUIRE(d, "the usage chunk is JSON");
    VT_CHECK(path_get(d, "choices", NULL)->len == 0 && path_get(d, "usage", NULL), "usage chunk: choices []");
    vs_json_doc_free(d);

    vs_json_writer_reset(&w);
    const char *ext = "{\"segments\":[{\"text\":\"a\",\"drafted\":true}]}";
    vs_oai_write_chunk(&w, VS_OAI_CHAT, "c", 5, "target", "assistant", "a", 1, NULL, NULL, ext, strlen(ext));
    d = vs_json_parse(w.buf, w.len, "chunk", NULL);
    VT_REQUIRE(d, "the chunk is JSON");
    ch = vs_json_at(path_get(d, "choices", NULL), 0);
    VT_CHECK(!strcmp(vs_json_get_str(vs_json_get(ch, "delta"), "role", ""), "assistant") &&
                 !strcmp(vs_json_get_str(vs_json_get(ch, "delta"), "content", ""), "a"),
             "delta");
    VT_CHECK(vs_json_get(ch, "finish_reason")->type == VS_JSON_NULL, "finish_reason null");
    VT_CHECK(path_get(d, "vlmspec", "segments") != NULL, "segments");
    vs_json_doc_free(d);

    vs_json_writer_reset(&w);
    vs_oai_error e;
    vs_oai_fail(&e, 400, "invalid_request_error", "messages", "bad %s", "thing");
    vs_oai_write_error(&w, &e);
    d = vs_json_parse(w.buf, w.len, "error", NULL);
    VT_REQUIRE(d, "the error is JSON");
    VT_CHECK(!strcmp(vs_json_get_str(path_get(d, "error", NULL), "message", ""), "bad thing") &&
                 !strcmp(vs_json_get_str(path_get(d, "error", NULL), "param", ""), "messages") &&
                 vs_json_get_int(path_get(d, "error", NULL), "code", 0) == 400,
             "error body");
    vs_json_doc_free(d);
    vs_json_writer_free(&w);

    VT_CHECK(!strcmp(vs_oai_finish_reason(VS_FINISH_EOS), "stop") && !strcmp(vs_oai_finish_reason(VS_FINISH_STOP), "stop") &&
                 !strcmp(vs_oai_finish_reason(VS_FINISH_LIMIT), "length") &&
                 !strcmp(vs_oai_finish_reason(VS_FINISH_CONTEXT), "length") && !vs_oai_finish_reason(VS_FINISH_CANCEL),
             "finish reasons");
}

int main(void) {
    test_base64();
    test_chat();
    test_refusals();
    test_media_path();
    test_writers();
    return vt_finish("server_oai");
}
