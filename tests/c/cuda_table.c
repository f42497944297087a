/* The CUDA backend fills every op slot of the dispatch table: the table is
 * filled exactly as bt_cuda_backend_create fills it, without a device, and
 * checked with bt_backend_complete (which names a missing op). Also checks
 * that the plugin bertrain-cuda.so loads. Run by tests/cuda-parity.sh in CUDA
 * builds. */
#include "backends/cuda/cuda_backend.h"

#include <stdio.h>

int main(void) {
    char err[1024];
    const bt_cuda_plugin *cu = bt_cuda_plugin_load(false, err, sizeof err);
    if (!cu) {
        printf("FAIL: %s\n", err);
        return 1;
    }
    if (!cu->op_table_complete()) {
        printf("FAIL: the CUDA backend leaves an op slot empty (named above)\n");
        return 1;
    }
    printf("cuda: the plugin loads; all %d op slots of the dispatch table are filled\n",
           bt_op_count);
    return 0;
}
