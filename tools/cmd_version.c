/* vlmspec version: the version and the CPU features the kernels will use. */
#include <stdio.h>
#include <string.h>

#include "kernels.h"

int vs_cmd_version(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: vlmspec version\nPrints the version and the SIMD path chosen for this CPU.\n");
        return 0;
    }
    printf("vlmspec 0.1.0 (kernels: %s)\n", vs_isa_name(vs_isa_detect()));
    return 0;
}
