/* simple: a multimodal generation with speculative decoding through the public API alone.
 *   simple TARGET.gguf TARGET-MMPROJ.gguf DRAFT.gguf DRAFT-MMPROJ.gguf IMAGE "QUESTION"
 * The reply streams to stdout; the statistics follow on stderr. Build: cc simple.c $(pkg-config --cflags
 * --libs vlmspec) after `cmake --install`, or the `simple` target of the build. */
#include <stdio.h>

#include "vlmspec.h"

static int print_text(void *user, const char *text, size_t len) {
    (void)user;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return 1; /* go on */
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: %s TARGET MMPROJ DRAFT DRAFT_MMPROJ IMAGE QUESTION\n", argv[0]);
        return 2;
    }
    vlmspec_model_params mp;
    vlmspec_model_params_init(&mp);
    mp.model = argv[1], mp.mmproj = argv[2], mp.draft = argv[3], mp.mmproj_draft = argv[4];
    vlmspec_models *models = NULL;
    vlmspec_session *session = NULL;
    if (vlmspec_models_load(&mp, &models) || vlmspec_session_new(models, 0, &session)) {
        fprintf(stderr, "simple: %s\n", vlmspec_last_error());
        vlmspec_models_free(models);
        return 1;
    }
    vlmspec_image image = {.path = argv[5]};
    vlmspec_message question = {.role = VLMSPEC_USER, .content = argv[6], .n_images = 1};
    vlmspec_request rq;
    vlmspec_request_init(&rq);
    rq.messages = &question, rq.n_messages = 1;
    rq.images = &image, rq.n_images = 1;
    rq.method = "m";  /* the drafter sees the image through its own projector */
    rq.n_predict = 64; /* greedy (temperature 0): the same text as the target alone, only faster */
    rq.on_text = print_text;
    vlmspec_result res;
    int rc = vlmspec_generate(session, &rq, &res) != VLMSPEC_OK;
    if (rc)
        fprintf(stderr, "\nsimple: %s\n", vlmspec_last_error());
    else
        fprintf(stderr, "\n%d tokens, %.2f per target pass (%d of %d drafted accepted), %.1f tokens/s\n",
                res.n_tokens, res.tau, res.accepted, res.drafted, res.tokens_per_s);
    vlmspec_result_free(&res);
    vlmspec_session_free(session);
    vlmspec_models_free(models);
    return rc;
}
