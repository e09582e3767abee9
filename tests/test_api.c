/* api: the public API (include/vlmspec.h), used as an application would (no internal header).
 *
 * Without models: status names, the method table, bad parameters and files give a status and a message.
 * On the shipped models (models/, skipped with a message when absent), with an image:
 *   - greedy speculative output ("m", "tabed-mt", a width-2 tree) equals target-only output ("ar");
 *   - the streamed pieces add up to the result's text; an image given as bytes (to a session that never saw
 *     the file) equals the file; undecodable bytes and a refused request report nothing generated;
 *   - a stop string cuts the text before it (finish "stop"), also at the very end of the reply; a callback
 *     returning 0 stops ("callback") and is not called again; vlmspec_session_cancel from the callback
 *     stops ("cancel");
 *   - a second turn reuses the first turn's cached rows (image rows included) and gives the same reply
 *     as the same conversation on a fresh session;
 *   - bad requests: a prompt and messages together, an unknown method, a prompt longer than the context,
 *     undecodable image bytes, a drafting method whose drafter is not loaded. */
#include "vlmspec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

#define MODELS "models"
#define IMAGE "tests/reference/fixtures/vision/img_a.png"

static void test_no_models(void) {
    VT_CHECK(!strcmp(vlmspec_status_name(VLMSPEC_OK), "ok"), "status name");
    VT_CHECK(vlmspec_method_count() >= 10, "method table: %d", vlmspec_method_count());
    VT_CHECK(!strcmp(vlmspec_method_name(0), "ar") && vlmspec_method_help(0), "the first method is target-only");
    VT_CHECK(!vlmspec_method_name(-1) && !vlmspec_method_name(vlmspec_method_count()), "out of range: NULL");
    vlmspec_model_params mp;
    vlmspec_model_params_init(&mp);
    vlmspec_models *m = (vlmspec_models *)&mp; /* must be reset to NULL on failure */
    VT_CHECK(vlmspec_models_load(&mp, &m) == VLMSPEC_ERR_INVALID && !m, "no model: invalid");
    VT_CHECK(vlmspec_last_error()[0], "a message");
    mp.model = "/nonexistent/model.gguf";
    VT_CHECK(vlmspec_models_load(&mp, &m) == VLMSPEC_ERR_IO && !m, "missing file: I/O error");
    VT_CHECK(strstr(vlmspec_last_error(), "/nonexistent/model.gguf"), "names the file: %s", vlmspec_last_error());
    mp.model = IMAGE; /* not a GGUF */
    VT_CHECK(vlmspec_models_load(&mp, &m) != VLMSPEC_OK && !m, "a PNG is not a model: %s", vlmspec_last_error());
    vlmspec_session *s = (vlmspec_session *)&mp;
    VT_CHECK(vlmspec_session_new(NULL, 0, &s) == VLMSPEC_ERR_INVALID && !s, "no model set");
    vlmspec_models_free(NULL);
    vlmspec_session_free(NULL);
    vlmspec_result_free(NULL);
}

typedef struct collect {
    char buf[8192];
    size_t len;
    int calls, stop_after;
    vlmspec_session *cancel;
} collect;

static int on_text(void *user, const char *text, size_t len) {
    collect *c = user;
    if (c->len + len < sizeof(c->buf)) memcpy(c->buf + c->len, text, len), c->len += len;
    c->buf[c->len] = 0;
    c->calls++;
    if (c->cancel && c->calls == 2) vlmspec_session_cancel(c->cancel);
    return !(c->stop_after && c->calls >= c->stop_after);
}

static vlmspec_image img_file = {.path = IMAGE};
static vlmspec_message question = {VLMSPEC_USER, "What is in the picture? Answer in detail.", 1};

static void base_request(vlmspec_request *rq, const char *method) {
    vlmspec_request_init(rq);
    rq->messages = &question, rq->n_messages = 1;
    rq->images = &img_file, rq->n_images = 1;
    rq->method = method;
    rq->n_predict = 48;
    rq->reuse = 0;
}

/* Runs a request; returns the text (malloc'ed) and leaves *res's counters (its text freed). */
static char *run(vlmspec_session *s, const vlmspec_request *rq, vlmspec_status want, vlmspec_result *res) {
    vlmspec_status st = vlmspec_generate(s, rq, res);
    VT_CHECK(st == want, "status %s, wanted %s: %s", vlmspec_status_name(st), vlmspec_status_name(want),
             vlmspec_last_error());
    char *t = strdup(res->text ? res->text : "");
    vlmspec_result keep = *res;
    vlmspec_result_free(res);
    *res = keep; /* the counters stay readable */
    res->text = NULL;
    return t;
}

static unsigned char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)sz);
    *n = b && fread(b, 1, (size_t)sz, f) == (size_t)sz ? (size_t)sz : 0;
    fclose(f);
    return b;
}

static void test_lossless(vlmspec_session *s) {
    vlmspec_request rq;
    vlmspec_result res;
    base_request(&rq, NULL);
    collect c = {0};
    rq.on_text = on_text, rq.user = &c;
    char *ref = run(s, &rq, VLMSPEC_OK, &res);
    VT_REQUIRE(ref[0] && res.n_tokens > 3, "target-only reply: '%s' (%d tokens)", ref, res.n_tokens);
    VT_CHECK(!strcmp(c.buf, ref), "streamed pieces = the text ('%s' vs '%s')", c.buf, ref);
    VT_CHECK(res.drafted == 0 && res.target_passes == res.n_tokens, "target only: one pass per token");
    const char *methods[] = {"m", "t", "tabed-mt"};
    for (int i = 0; i < 3; i++)
        for (int tw = 1; tw <= 2; tw++) {
            base_request(&rq, methods[i]);
            rq.tree_width = tw;
            char *t = run(s, &rq, VLMSPEC_OK, &res);
            VT_CHECK(!strcmp(t, ref), "%s width %d: '%s' != target-only '%s'", methods[i], tw, t, ref);
            VT_CHECK(res.drafted > 0 && res.accepted <= res.drafted && res.tau >= 1.0, "%s: statistics",
                     methods[i]);
            free(t);
        }
    free(ref);
}

/* The image given as bytes, decoded from memory by a session that has never seen the file. */
static void test_bytes(vlmspec_models *m, const char *ref) {
    vlmspec_session *s = NULL;
    VT_REQUIRE(vlmspec_session_new(m, 0, &s) == VLMSPEC_OK, "%s", vlmspec_last_error());
    vlmspec_request rq;
    vlmspec_result res;
    size_t n = 0;
    unsigned char *bytes = read_all(IMAGE, &n);
    VT_REQUIRE(bytes && n, "read %s", IMAGE);
    vlmspec_image img_mem = {.data = bytes, .size = n};
    base_request(&rq, "m");
    rq.images = &img_mem;
    /* undecodable bytes first: nothing of them may stay in the image cache */
    img_mem.size = n / 3;
    char *t = run(s, &rq, VLMSPEC_ERR_FORMAT, &res);
    VT_CHECK(strstr(vlmspec_last_error(), "image 1"), "names the image: %s", vlmspec_last_error());
    VT_CHECK(!t[0] && res.n_tokens == 0 && !strcmp(res.finish, "none"), "nothing generated: %s", res.finish);
    free(t);
    img_mem.size = n;
    t = run(s, &rq, VLMSPEC_OK, &res);
    VT_CHECK(!strcmp(t, ref), "image bytes: '%s' vs the file's '%s'", t, ref);
    free(t);
    /* a request refused before it runs reports nothing of the request before it */
    rq.n_messages = -1;
    t = run(s, &rq, VLMSPEC_ERR_INVALID, &res);
    VT_CHECK(!t[0] && res.n_tokens == 0 && !strcmp(res.finish, "none"), "refused: '%s' %d %s", t, res.n_tokens,
             res.finish);
    free(t);
    free(bytes);
    vlmspec_session_free(s);
}

static void test_stops(vlmspec_session *s) {
    vlmspec_request rq;
    vlmspec_result res;
    base_request(&rq, "m");
    char *ref = run(s, &rq, VLMSPEC_OK, &res);
    /* a stop string: the text up to its first occurrence */
    const char *sp = strchr(ref + 1, ' ');
    VT_REQUIRE(sp && sp[1], "a reply of several words: '%s'", ref);
    char stop[16] = {0};
    memcpy(stop, sp, strlen(sp) < 4 ? strlen(sp) : 4);
    rq.stop[0] = stop;
    collect c = {0};
    rq.on_text = on_text, rq.user = &c;
    vlmspec_status st = vlmspec_generate(s, &rq, &res);
    const size_t at = (size_t)(strstr(ref, stop) - ref);
    VT_CHECK(st == VLMSPEC_OK && !strcmp(res.finish, "stop") && strlen(res.text) == at &&
                 !strncmp(res.text, ref, at),
             "stop '%s': '%s' (%s) of '%s'", stop, res.text, res.finish, ref);
    VT_CHECK(!strcmp(c.buf, res.text), "nothing past the stop string was streamed: '%s'", c.buf);
    vlmspec_result_free(&res);
    /* a stop string at the very end of the reply: found in the block that also ends the request */
    const size_t rl = strlen(ref);
    char tail[8] = {0};
    memcpy(tail, ref + rl - 3, 3);
    if (strstr(ref, tail) == ref + rl - 3) {
        base_request(&rq, "m");
        rq.stop[0] = tail;
        collect c4 = {0};
        rq.on_text = on_text, rq.user = &c4;
        VT_CHECK(vlmspec_generate(s, &rq, &res) == VLMSPEC_OK && !strcmp(res.finish, "stop") &&
                     strlen(res.text) == rl - 3 && !strcmp(c4.buf, res.text),
                 "stop '%s' at the end: %s '%s' (streamed '%s')", tail, res.finish, res.text, c4.buf);
        vlmspec_result_free(&res);
    }
    /* the callback stops */
    base_request(&rq, "m");
    collect c2 = {.stop_after = 1};
    rq.on_text = on_text, rq.user = &c2;
    VT_CHECK(vlmspec_generate(s, &rq, &res) == VLMSPEC_OK && !strcmp(res.finish, "callback") &&
                 strlen(res.text) < strlen(ref) && c2.calls == 1,
             "callback: %s '%s', %d calls (1: none after it said stop)", res.finish, res.text, c2.calls);
    vlmspec_result_free(&res);
    /* cancel from the callback */
    base_request(&rq, "m");
    collect c3 = {.cancel = s};
    rq.on_text = on_text, rq.user = &c3;
    VT_CHECK(vlmspec_generate(s, &rq, &res) == VLMSPEC_OK && !strcmp(res.finish, "cancel"), "cancel: %s",
             res.finish);
    vlmspec_result_free(&res);
    /* a cancel between requests does not stop the next one */
    vlmspec_session_cancel(s);
    base_request(&rq, "m");
    char *t = run(s, &rq, VLMSPEC_OK, &res);
    VT_CHECK(!strcmp(t, ref), "after a stale cancel: '%s'", t);
    free(t);
    free(ref);
}

static void test_turns(vlmspec_models *m, vlmspec_session *s) {
    vlmspec_request rq;
    vlmspec_result res;
    base_request(&rq, "m");
    rq.reuse = 1;
    char *first = run(s, &rq, VLMSPEC_OK, &res);
    const int first_rows = res.n_prompt_rows;
    vlmspec_message conv[3] = {question, {VLMSPEC_ASSISTANT, first, 0}, {VLMSPEC_USER, "Say it again.", 0}};
    rq.messages = conv, rq.n_messages = 3;
    VT_CHECK(vlmspec_generate(s, &rq, &res) == VLMSPEC_OK, "%s", vlmspec_last_error());
    VT_CHECK(res.n_prompt_reused >= first_rows && res.n_prompt_reused < res.n_prompt_rows,
             "second turn reuses the first turn's %d rows (image rows included): %d of %d", first_rows,
             res.n_prompt_reused, res.n_prompt_rows);
    char *second = strdup(res.text);
    vlmspec_result_free(&res);
    vlmspec_session *fresh = NULL;
    VT_REQUIRE(vlmspec_session_new(m, 0, &fresh) == VLMSPEC_OK, "%s", vlmspec_last_error());
    rq.reuse = 0;
    char *again = run(fresh, &rq, VLMSPEC_OK, &res);
    VT_CHECK(!strcmp(second, again), "reused '%s' vs fresh '%s'", second, again);
    vlmspec_session_free(fresh);
    free(first), free(second), free(again);
}

static void test_bad_requests(vlmspec_models *m, vlmspec_session *s) {
    vlmspec_request rq;
    vlmspec_result res;
    base_request(&rq, "m");
    rq.prompt = "USER: <image>\nhi ASSISTANT:";
    free(run(s, &rq, VLMSPEC_ERR_INVALID, &res));
    base_request(&rq, "no-such-method");
    free(run(s, &rq, VLMSPEC_ERR_INVALID, &res));
    VT_CHECK(strstr(vlmspec_last_error(), "tabed-mt"), "lists the methods: %s", vlmspec_last_error());
    base_request(&rq, "massv");
    free(run(s, &rq, VLMSPEC_ERR_INVALID, &res));
    VT_CHECK(strstr(vlmspec_last_error(), "MASSV"), "names the missing drafter: %s", vlmspec_last_error());
    vlmspec_session *small = NULL;
    VT_REQUIRE(vlmspec_session_new(m, 64, &small) == VLMSPEC_OK, "%s", vlmspec_last_error());
    base_request(&rq, "m");
    free(run(small, &rq, VLMSPEC_ERR_RANGE, &res));
    VT_CHECK(strstr(vlmspec_last_error(), "context"), "prompt too long: %s", vlmspec_last_error());
    vlmspec_session_free(small);
}

int main(void) {
    test_no_models();
    if (access(MODELS "/target.gguf", R_OK) || access(MODELS "/draft-llava-mmproj.gguf", R_OK)) {
        printf("api: SKIP the model tests: models/ holds no trained models\n");
        return vt_finish("api");
    }
    vlmspec_model_params mp;
    vlmspec_model_params_init(&mp);
    mp.model = MODELS "/target.gguf", mp.mmproj = MODELS "/target-mmproj.gguf";
    mp.draft = MODELS "/draft-llava.gguf", mp.mmproj_draft = MODELS "/draft-llava-mmproj.gguf";
    vlmspec_models *m = NULL;
    vlmspec_session *s = NULL;
    VT_REQUIRE(vlmspec_models_load(&mp, &m) == VLMSPEC_OK, "%s", vlmspec_last_error());
    VT_REQUIRE(vlmspec_session_new(m, 0, &s) == VLMSPEC_OK, "%s", vlmspec_last_error());
    test_lossless(s);
    {
        vlmspec_request rq;
        vlmspec_result res;
        base_request(&rq, NULL);
        char *ref = run(s, &rq, VLMSPEC_OK, &res);
        test_bytes(m, ref);
        free(ref);
    }
    test_stops(s);
    test_turns(m, s);
    test_bad_requests(m, s);
    vlmspec_session_free(s);
    vlmspec_models_free(m);
    return vt_finish("api");
}
