/* vlmspec version: the version and the CPU features the kernels will use. */
#include <stdio.h>
#include <string.h>

#include "kernels.h"
#include "train.h"

int vs_cmd_version(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: vlmspec version\nPrints the version, the SIMD path chosen for this CPU (the environment\n"
               "variable VLMSPEC_ISA=scalar|avx2|avx512 caps it) and the training products it offers\n"
               "(`vlmspec train ... --gemm`).\n");
        return 0;
    }
    if (argc > 1) {
        fprintf(stderr, "vlmspec version: unexpected argument '%s'\n", argv[1]);
        return 2;
    }
    vs_isa best = vs_isa_detect(), active = vs_isa_active();
    if (active == best) printf("vlmspec 0.1.0 (kernels: %s)\n", vs_isa_name(active));
    else printf("vlmspec 0.1.0 (kernels: %s, capped by VLMSPEC_ISA; CPU supports %s)\n", vs_isa_name(active),
                vs_isa_name(best));
    printf("training products:%s blocked%s\n", strcmp(vs_train_sgemm_backend(), "openblas") ? "" : " openblas",
           vs_train_amx_available() ? " amx-bf16x3" : "");
    return 0;
}
