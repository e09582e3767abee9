/* vlmspec gguf FILE: shows what a GGUF file holds: version, metadata (arrays abbreviated to their type,
 * count and first few values) and the tensor table (name, type, shape, offset, bytes). A file the
 * reader rejects gives its error message and exit status 1. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "gguf.h"

#define CMD "gguf"

static void usage(FILE *f) {
    fprintf(f, "usage: vlmspec gguf [options] FILE\n"
               "Prints a GGUF file's version, metadata and tensor table.\n\n"
               "options:\n"
               "  -n, --values N   array values shown per key (default 6; 0 = none)\n"
               "  --no-tensors     omit the tensor table\n"
               "  --no-metadata    omit the metadata\n"
               "  -h, --help       this help\n");
}

/* Prints a string escaped (quoted if asked), cut after max bytes. */
static void print_str_q(vs_gguf_str s, uint64_t max, bool quote) {
    if (quote) putchar('"');
    for (uint64_t i = 0; i < s.len && i < max; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c == '\n') printf("\\n");
        else if (c == '\t') printf("\\t");
        else if (c < 0x20 || c == 0x7f) printf("\\x%02x", c);
        else putchar(c);
    }
    if (quote) putchar('"');
    if (s.len > max) printf("...(%" PRIu64 " bytes)", s.len);
}

static void print_str(vs_gguf_str s, uint64_t max) { print_str_q(s, max, true); }

static void print_scalar(vs_gguf_type t, const uint8_t *p) {
    switch (t) {
    case VS_GGUF_U8: printf("%u", p[0]); break;
    case VS_GGUF_I8: printf("%d", (int8_t)p[0]); break;
    case VS_GGUF_BOOL: printf("%s", p[0] ? "true" : "false"); break;
    case VS_GGUF_U16: { uint16_t v; memcpy(&v, p, 2); printf("%u", v); break; }
    case VS_GGUF_I16: { int16_t v; memcpy(&v, p, 2); printf("%d", v); break; }
    case VS_GGUF_U32: { uint32_t v; memcpy(&v, p, 4); printf("%" PRIu32, v); break; }
    case VS_GGUF_I32: { int32_t v; memcpy(&v, p, 4); printf("%" PRId32, v); break; }
    case VS_GGUF_F32: { float v; memcpy(&v, p, 4); printf("%.9g", v); break; }
    case VS_GGUF_U64: { uint64_t v; memcpy(&v, p, 8); printf("%" PRIu64, v); break; }
    case VS_GGUF_I64: { int64_t v; memcpy(&v, p, 8); printf("%" PRId64, v); break; }
    case VS_GGUF_F64: { double v; memcpy(&v, p, 8); printf("%.17g", v); break; }
    default: printf("?"); break;
    }
}

static size_t scalar_bytes(vs_gguf_type t) {
    switch (t) {
    case VS_GGUF_U8: case VS_GGUF_I8: case VS_GGUF_BOOL: return 1;
    case VS_GGUF_U16: case VS_GGUF_I16: return 2;
    case VS_GGUF_U32: case VS_GGUF_I32: case VS_GGUF_F32: return 4;
    default: return 8;
    }
}

static void print_metadata(const vs_gguf *g, int64_t n_values) {
    int64_t n = vs_gguf_n_kv(g);
    int w = 8;
    for (int64_t i = 0; i < n; i++) w = (int)VS_MAX((uint64_t)w, VS_MIN(vs_gguf_key_at(g, i).len, 48));
    printf("metadata: %" PRId64 " keys\n", n);
    for (int64_t i = 0; i < n; i++) {
        vs_gguf_str k = vs_gguf_key_at(g, i);
        vs_gguf_type t = vs_gguf_kv_type(g, i);
        printf("  ");
        print_str_q(k, 200, false);
        printf("%*s ", (int)(w - (int)VS_MIN(k.len, (uint64_t)w)), "");
        if (t == VS_GGUF_STRING) {
            printf("%-14s ", "string");
            print_str(vs_gguf_kv_str(g, i), 120);
        } else if (t == VS_GGUF_ARRAY) {
            vs_gguf_type at = vs_gguf_arr_type(g, i);
            uint64_t len = vs_gguf_arr_len(g, i);
            char tn[32];
            snprintf(tn, sizeof(tn), "%s[%" PRIu64 "]", vs_gguf_kv_type_name(at), len);
            printf("%-14s ", tn);
            printf("[");
            for (uint64_t j = 0; j < len && (int64_t)j < n_values; j++) {
                if (j) printf(", ");
                if (at == VS_GGUF_STRING) print_str(vs_gguf_arr_str(g, i, j), 40);
                else print_scalar(at, (const uint8_t *)vs_gguf_arr_data(g, i) + j * scalar_bytes(at));
            }
            if ((int64_t)len > n_values) printf("%s... %" PRIu64 " more", n_values > 0 ? ", " : "", len - n_values);
            printf("]");
        } else {
            printf("%-14s ", vs_gguf_kv_type_name(t));
            print_scalar(t, vs_gguf_kv_data(g, i));
        }
        printf("\n");
    }
}

static void print_tensors(const vs_gguf *g) {
    int64_t n = vs_gguf_n_tensors(g);
    uint64_t total = 0;
    int w = 4;
    for (int64_t i = 0; i < n; i++) w = VS_MAX(w, (int)strlen(vs_gguf_tensor_at(g, i)->name));
    printf("tensors: %" PRId64 "\n", n);
    printf("  %-*s  %-7s  %-28s  %12s  %12s\n", w, "name", "type", "shape", "offset", "bytes");
    for (int64_t i = 0; i < n; i++) {
        const vs_gguf_tensor *t = vs_gguf_tensor_at(g, i);
        char shape[96];
        size_t o = (size_t)snprintf(shape, sizeof(shape), "[");
        for (int d = 0; d < t->n_dims; d++)
            o += (size_t)snprintf(shape + o, sizeof(shape) - o, "%s%" PRId64, d ? ", " : "", t->ne[d]);
        snprintf(shape + o, sizeof(shape) - o, "]");
        printf("  %-*s  %-7s  %-28s  %12" PRIu64 "  %12" PRIu64 "\n", w, t->name,
               vs_gguf_ggml_type_name(t->type), shape, t->offset, t->nbytes);
        total += t->nbytes;
    }
    printf("tensor data: %" PRIu64 " bytes (%.2f MiB)\n", total, (double)total / (1 << 20));
}

int vs_cmd_gguf(int argc, char **argv) {
    const char *path = NULL;
    int64_t n_values = 6;
    bool no_tensors = false, no_metadata = false;
    int n_pos = 0;
    cli_flags fs = {0};
    cli_flag_add(&fs, "-n|--values", CLI_I64, &n_values, 0, 1000000);
    cli_flag_add(&fs, "--no-tensors", CLI_BOOL, &no_tensors, 0, 0);
    cli_flag_add(&fs, "--no-metadata", CLI_BOOL, &no_metadata, 0, 0);
    cli_flags_positional(&fs, &path, &n_pos, 1);
    const int r = cli_flags_parse(CMD, argc, argv, &fs, usage);
    if (r >= 0) return r;
    if (!path) {
        usage(stderr);
        return 2;
    }
    const bool tensors = !no_tensors, metadata = !no_metadata;
    vs_error err = {0};
    vs_gguf *g = vs_gguf_open(path, &err);
    if (!g) return cli_fail_err(CMD, &err);
    printf("file: %s\nversion: %u  alignment: %u  size: %zu bytes  data offset: %" PRIu64 "\n", path,
           vs_gguf_version(g), vs_gguf_alignment(g), vs_gguf_size(g), vs_gguf_data_offset(g));
    if (metadata) print_metadata(g, n_values);
    if (tensors) print_tensors(g);
    vs_gguf_close(g);
    return 0;
}
