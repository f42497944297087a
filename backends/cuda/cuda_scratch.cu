/* CUDA backend: the context's scratch buffer, grown on demand. Apart from
 * cuda_context.cu because growing it (cudaFree, cudaMalloc) ends a graph
 * region's recording (cuda_graph.cu), which uses the context. */
#include "cuda_internal.h"

void *cu_scratch(cu_ctx *c, size_t bytes) {
    if (bytes > c->scratch_bytes) {
        cu_graph_break(c, "the scratch buffer grows");
        if (c->scratch) CU_CHECK(cudaFree(c->scratch));
        c->scratch = NULL;
        c->scratch_bytes = 0;
        CU_CHECK(cudaMalloc(&c->scratch, bytes));
        c->scratch_bytes = bytes;
    }
    return c->scratch;
}
