/* cli: helpers shared by the subcommands: the typed flag table every command parses its flags with
 * (cli_flags.c), strict number parsing and error exits (cli_util.c). Every flag a command accepts is
 * listed in its --help. */
#ifndef VS_CLI_H
#define VS_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "common.h"
#include "quant.h"

/* Print "vlmspec <cmd>: <message>" to stderr and return exit status 1 (use: return cli_fail(...)). */
int cli_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Same for a vs_error. */
int cli_fail_err(const char *cmd, const vs_error *err);

/* Strict parsing: the whole string must be a number in range; on failure print an error naming
 * the flag and return false. */
bool cli_parse_i64(const char *cmd, const char *flag, const char *s, int64_t lo, int64_t hi, int64_t *out);
bool cli_parse_int(const char *cmd, const char *flag, const char *s, int lo, int hi, int *out);
bool cli_parse_f64(const char *cmd, const char *flag, const char *s, double lo, double hi, double *out);
/* A KV cache storage type: f16 or f32 (or F16, F32), and bf16 when drafter is set (the drafters' cache,
 * kv.h); on failure print an error naming the flag and return false. */
bool cli_parse_kv_type(const char *cmd, const char *flag, const char *s, bool drafter, vs_type *out);
/* Writes text + "\n" as the --json FILE of a command: '-' = standard output, else a file written safely
 * (outfile.h). 0, or 1 after reporting the failure. */
int cli_write_json(const char *cmd, const char *path, const char *text);
/* Fetches the value after a flag: argv[++*i], or prints "flag needs a value" and returns NULL. */
const char *cli_value(const char *cmd, int argc, char **argv, int *i);

/* ------------------------------------------------------------------------------------------------
 * The flag table: a command adds its flags (each with its spellings, type, destination and range) and
 * parses argv once; an unknown flag, a missing value or a value out of range is a usage error naming the
 * flag. */

typedef enum cli_kind {
    CLI_BOOL,     /* no value: sets a bool */
    CLI_INT,      /* int in [lo, hi] */
    CLI_I64,      /* int64_t in [lo, hi] */
    CLI_U64,      /* uint64_t in [lo, hi] (seeds) */
    CLI_F64,      /* double in [lo, hi] */
    CLI_F32,      /* float in [lo, hi] */
    CLI_STR,      /* const char * (the argv string) */
    CLI_STRS,     /* repeatable: appends to a const char *[max] with a count */
    CLI_KV,       /* a KV cache type: f16 or f32 */
    CLI_KV_DRAFT, /* a drafter's KV cache type: bf16, f16 or f32 */
    CLI_FN,       /* a value parsed by the flag's own function */
} cli_kind;

/* CLI_FN: parses value into dst; reports its own error and returns false. */
typedef bool (*cli_flag_fn)(const char *cmd, const char *flag, const char *value, void *dst);
/* A CLI_FN for a weight type name this build supports (F32 ... Q6_K), stored in an int. */
bool cli_flag_weight_type(const char *cmd, const char *flag, const char *value, void *dst);

typedef struct cli_flag {
    const char *names; /* spellings separated by '|': "-n|--n-predict" */
    cli_kind kind;
    void *dst;
    double lo, hi;
    int *count, max;  /* CLI_STRS */
    cli_flag_fn fn;   /* CLI_FN */
    bool given;       /* seen on the command line */
    const char *seen; /* the spelling seen last */
} cli_flag;

#define CLI_MAX_FLAGS 192

typedef struct cli_flags {
    cli_flag f[CLI_MAX_FLAGS];
    int n;
    const char **pos; /* positional arguments (cli_flags_positional), NULL: none accepted */
    int *n_pos, max_pos;
} cli_flags;

/* Adds a flag (lo / hi: the range of numbers, ignored otherwise); returns it for further settings. */
cli_flag *cli_flag_add(cli_flags *s, const char *names, cli_kind kind, void *dst, double lo, double hi);
/* A repeatable string flag: each occurrence appends to dst[*count] (at most max). */
cli_flag *cli_flag_list(cli_flags *s, const char *names, const char **dst, int *count, int max);
/* A flag whose value fn parses into dst. */
cli_flag *cli_flag_fn_add(cli_flags *s, const char *names, cli_flag_fn fn, void *dst);
/* Accepts up to max positional arguments (those not starting with '-', and "-"), appended to dst[*count]
 * in order; without this call a positional argument is a usage error. */
void cli_flags_positional(cli_flags *s, const char **dst, int *count, int max);
/* Whether the flag writing to dst was given (NULL when none was); its spelling as given. */
bool cli_flag_given(const cli_flags *s, const void *dst);
const char *cli_flag_seen(const cli_flags *s, const void *dst);
/* Parses argv[1..argc): -1 when every argument was a known flag with a valid value, 0 after -h / --help
 * (usage printed to stdout), 2 on a usage error (reported on stderr naming the flag). */
int cli_flags_parse(const char *cmd, int argc, char **argv, cli_flags *s, void (*usage)(FILE *));

#endif
