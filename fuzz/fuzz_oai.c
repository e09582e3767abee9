/* Fuzz target for the server's request parser (src/server/oai.h): any body must parse or be refused with
 * a 4xx/5xx error naming its field, never crash; an accepted request's texts go through the reply and
 * chunk writers, whose output must be valid JSON. file:// URLs are refused (no media folder). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "oai.h"

static void check_json(vs_json_writer *w) {
    if (w->oom) return;
    vs_json_doc *d = vs_json_parse(w->buf, w->len, "writer output", NULL);
    if (!d) abort(); /* the writers must produce valid JSON */
    vs_json_doc_free(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const vs_oai_limits lim = {.max_images = 4, .max_image_bytes = 1 << 16, .media_path = NULL};
    for (int k = 0; k < 2; k++) {
        vs_oai_req r;
        vs_oai_error e;
        memset(&e, 0, sizeof(e));
        if (!vs_oai_parse((vs_oai_kind)k, (const char *)data, size, &lim, &r, &e)) {
            if (e.http < 400 || e.http > 599 || !e.type || !e.message[0]) abort();
            vs_json_writer w;
            vs_json_writer_init(&w);
            vs_oai_write_error(&w, &e);
            check_json(&w);
            vs_json_writer_free(&w);
            continue;
        }
        vs_json_writer w;
        vs_json_writer_init(&w);
        const char *text = r.kind == VS_OAI_CHAT ? r.msgs[r.n_msgs - 1].content : r.prompt;
        vs_oai_usage u = {.prompt_tokens = r.n_images, .completion_tokens = r.n_stop, .method = r.method};
        vs_oai_write_reply(&w, r.kind, "id", 0, r.model ? r.model : "m", text, strlen(text), "stop", &u);
        check_json(&w);
        vs_json_writer_reset(&w);
        vs_oai_write_chunk(&w, r.kind, "id", 0, "m", "assistant", text, strlen(text), NULL, NULL, NULL, 0);
        check_json(&w);
        vs_json_writer_free(&w);
        for (int32_t i = 0; i < r.n_images; i++)
            if (!r.images[i].data || !r.images[i].size || r.images[i].size > lim.max_image_bytes) abort();
        vs_oai_req_free(&r);
    }
    return 0;
}
