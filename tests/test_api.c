/* api: include/vlmspec.h compiles on its own as C11 and exposes the documented entry points. */
#include "vlmspec.h"

#include <string.h>

#include "testutil.h"

int main(void) {
    /* taking the addresses makes the compiler and linker check that every declared entry point of the
     * minimal example in vlmspec.h exists with a compatible type */
    void *fns[] = {(void *)vs_lm_load,         (void *)vs_tokenizer_from_gguf, (void *)vs_spec_new,
                   (void *)vs_draft_lm_new,    (void *)vs_spec_generate,       (void *)vs_tokenize,
                   (void *)vs_mm_prompt_build, (void *)vs_draft_ens_new,       (void *)vs_gguf_open};
    for (size_t i = 0; i < sizeof(fns) / sizeof(fns[0]); i++) VT_CHECK(fns[i] != NULL, "entry point %zu", i);
    vs_error err = {0};
    VT_CHECK(vs_lm_load("/nonexistent/model.gguf", &err) == NULL && err.code != VS_OK && err.msg[0],
             "loading a missing file fails with a message");
    VT_CHECK(strstr(err.msg, "/nonexistent/model.gguf") != NULL, "the message names the file: %s", err.msg);
    return vt_finish("api");
}
