/* cli: small helpers shared by the subcommands: strict number parsing and error exits.
 * Subcommands parse their own flags with these; every flag they accept is listed in their --help. */
#ifndef VS_CLI_H
#define VS_CLI_H

#include <stdbool.h>
#include <stdint.h>

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
/* Fetches the value after a flag: argv[++*i], or prints "flag needs a value" and returns NULL. */
const char *cli_value(const char *cmd, int argc, char **argv, int *i);

#endif
