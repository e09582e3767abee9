/* fuzz_gguf: the GGUF reader over arbitrary bytes (vs_gguf_open_memory). Whatever the input, opening
 * must either fail with a message naming the input or succeed with every index, string and tensor
 * pointer inside the buffer; this touches all of them so a sanitizer sees any escape. A file that opens
 * then goes through the model loaders (vs_lm_from_gguf: "llama", "msd" and "dream" files; the MSD head and
 * DREAM model loaders),
 * which must fail cleanly or load. */
#include <stdint.h>
#include <string.h>

#include "draft_dream.h"
#include "draft_msd.h"
#include "gguf.h"
#include "lm.h"

static volatile uint8_t sink;

static void touch(const uint8_t *base, size_t size, const void *p, uint64_t n) {
    if (!n) return;
    const uint8_t *q = p;
    if (q < base || q + n > base + size || n > size) __builtin_trap(); /* escaped the buffer */
    sink ^= q[0] ^ q[n - 1];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    vs_error err = {0};
    vs_gguf *g = vs_gguf_open_memory(data, size, "fuzz.gguf", &err);
    if (!g) {
        if (!strstr(err.msg, "fuzz.gguf")) __builtin_trap(); /* every error names the input */
        return 0;
    }
    for (int64_t i = 0; i < vs_gguf_n_kv(g); i++) {
        vs_gguf_str k = vs_gguf_key_at(g, i);
        touch(data, size, k.ptr, k.len);
        vs_gguf_type t = vs_gguf_kv_type(g, i);
        if (t == VS_GGUF_STRING) {
            vs_gguf_str s = vs_gguf_kv_str(g, i);
            touch(data, size, s.ptr, s.len);
        } else if (t == VS_GGUF_ARRAY) {
            uint64_t n = vs_gguf_arr_len(g, i);
            if (vs_gguf_arr_type(g, i) == VS_GGUF_STRING) {
                for (uint64_t j = 0; j < n && j < 4096; j++) {
                    vs_gguf_str s = vs_gguf_arr_str(g, i, j);
                    touch(data, size, s.ptr, s.len);
                }
            } else {
                touch(data, size, vs_gguf_arr_data(g, i), n ? 1 : 0);
            }
        } else {
            touch(data, size, vs_gguf_kv_data(g, i), 1);
        }
    }
    for (int64_t i = 0; i < vs_gguf_n_tensors(g); i++) {
        const vs_gguf_tensor *t = vs_gguf_tensor_at(g, i);
        if (vs_gguf_find_tensor(g, t->name) != t) __builtin_trap();
        touch(data, size, t->data, t->nbytes);
    }
    float f[4];
    int64_t iv;
    vs_gguf_get_f32_array(g, "general.alignment", f, 4);
    vs_gguf_get_int(g, "general.alignment", &iv);
    vs_lm_free(vs_lm_from_gguf(g, &err));
    vs_msd_head_free(vs_msd_head_from_gguf(g, &err));
    vs_dream_head_free(vs_dream_head_from_gguf(g, &err));
    vs_gguf_close(g);
    return 0;
}
