/* cli_bench_spec: `vlmspec bench spec`, the speculative-decoding benchmark (src/measure/bench.h). cmd_bench.c
 * forwards `vlmspec bench spec ...` here (argv[0] = "spec"); everything else of `vlmspec bench` is the
 * model benchmark. Returns the exit status: 0 ok, 1 error, 2 usage. */
#ifndef VS_CLI_BENCH_SPEC_H
#define VS_CLI_BENCH_SPEC_H

int vs_cli_bench_spec(int argc, char **argv);

#endif
