/* vlmspec version: the version and the CPU features the kernels will use. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "train.h"

int vs_cmd_version(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: vlmspec version\nPrints the version, the SIMD path chosen for this CPU (the environment\n"
               "variable VLMSPEC_ISA=scalar|avx2|avx512 caps it), the training products it offers\n"
               "(`vlmspec train ... --gemm`) and the BLAS library with the kernels it picked for this CPU\n"
               "(OPENBLAS_CORETYPE overrides that choice; an older core's kernels are slower).\n");
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
    printf("training products:%s blocked%s%s\n", strcmp(vs_train_sgemm_backend(), "openblas") ? "" : " openblas",
           vs_train_amx_available() ? " amx-bf16x3" : "", vs_train_bf16_available() ? " avx512-bf16" : "");
    char blas[256];
    if (vs_blas_info(blas, sizeof(blas)))
        printf("BLAS: %s%s\n", blas, getenv("OPENBLAS_CORETYPE") ? " (chosen by OPENBLAS_CORETYPE)" : "");
    return 0;
}
