/* stb_image_impl: the ONE translation unit that compiles stb_image's implementation (Debian's
 * libstb-dev, not vendored), configured for image.c: only the formats vlmspec supports, memory-only
 * (files are read by vs_read_file so errors name the path), and the project's allocator.
 * A file of its own so that the sanitizer and fuzz builds can leave one of stb's own faults unchecked
 * without losing the check in vlmspec's code: its JPEG bit reader shifts by 32 on some corrupt streams
 * (stb_image.h, stbi__grow_buffer_unsafe: `b << (24 - code_bits)` with code_bits at -8; found by
 * libFuzzer, input in fuzz/corpus/fuzz_image). x86 masks the count, the stream is corrupt and the
 * decoder rejects it or returns garbage pixels; no memory is touched out of bounds (ASan still checks
 * this file). src/CMakeLists.txt turns off only UBSan's shift check here (docs/fuzzing.md). */
#include "common.h"

#define STBI_ONLY_PNG
#define STBI_ONLY_JPEG
#define STBI_ONLY_BMP
#define STBI_ONLY_PNM
#define STBI_NO_STDIO
#define STBI_NO_LINEAR
#define STBI_NO_HDR
#define STBI_MALLOC(sz) vs_malloc(sz)
#define STBI_REALLOC(p, sz) vs_realloc(p, sz)
#define STBI_FREE(p) vs_free(p)
#define STB_IMAGE_IMPLEMENTATION
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-but-set-variable"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#pragma GCC diagnostic ignored "-Wmisleading-indentation"
#include <stb_image.h>
#pragma GCC diagnostic pop
