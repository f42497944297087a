/* CUDA backend: what every other file of the backend uses and nothing of it
 * is called from here: error reports, making the backend's device current,
 * device addresses, the context's scratch buffer and the copies to the host
 * on the second stream. The bottom of the
 * backend's files. */
#include "cuda_internal.h"

#include <stdlib.h>
#include <string.h>

/* ================= errors ================= */

/* "cudaFoo(a, b)" -> "cudaFoo" */
int cu_call_name_len(const char *call) { return (int)strcspn(call, "( "); }

/* What a user can do about err: for the errors of a stream capture (CUDA's
 * 900-908, cudaErrorStreamCaptureUnsupported to ...WrongThread), which only
 * a CUDA Graph's capture makes, the switch that does without one. */
static const char *cu_remedy(cudaError_t err) {
    return (int)err >= 900 && (int)err <= 908
               ? " (inside a CUDA Graph's capture: BERTRAIN_CUDA_GRAPHS=0 launches the steps "
                 "op by op)"
               : "";
}

void cu_fatal(const char *call, cudaError_t err, const char *file, int line) {
    fprintf(stderr, "bertrain: cuda: %.*s failed: %s: %s at %s:%d%s\n", cu_call_name_len(call),
            call, cudaGetErrorName(err), cudaGetErrorString(err), file, line, cu_remedy(err));
    exit(1);
}

const char *cublas_status_name(cublasStatus_t st) {
    switch (st) {
#define S(x) case x: return #x;
        S(CUBLAS_STATUS_SUCCESS) S(CUBLAS_STATUS_NOT_INITIALIZED) S(CUBLAS_STATUS_ALLOC_FAILED)
        S(CUBLAS_STATUS_INVALID_VALUE) S(CUBLAS_STATUS_ARCH_MISMATCH)
        S(CUBLAS_STATUS_MAPPING_ERROR) S(CUBLAS_STATUS_EXECUTION_FAILED)
        S(CUBLAS_STATUS_INTERNAL_ERROR) S(CUBLAS_STATUS_NOT_SUPPORTED)
        S(CUBLAS_STATUS_LICENSE_ERROR)
#undef S
    default: return "unknown cuBLAS status";
    }
}

void cublas_fatal(const char *call, cublasStatus_t st, const char *file, int line) {
    /* the runtime's error behind a failed launch, where cuBLAS left it */
    const cudaError_t why = cudaGetLastError();
    fprintf(stderr, "bertrain: cuda: %.*s failed: %s (%d)%s%s at %s:%d%s\n",
            cu_call_name_len(call), call, cublas_status_name(st), (int)st,
            why != cudaSuccess ? ", " : "", why != cudaSuccess ? cudaGetErrorName(why) : "", file,
            line, cu_remedy(why));
    exit(1);
}

/* ================= device and addresses ================= */

/* Make device current unless it already is (asked of the runtime each time:
 * cudaGetDevice is a cheap host call, and a cache would go stale). */
cudaError_t cu_use_device(int device) {
    int current = -1;
    cudaError_t e = cudaGetDevice(&current);
    if (e != cudaSuccess || current == device) return e;
    return cudaSetDevice(device);
}

cu_ctx *cu(bt_backend *be) {
    cu_ctx *c = (cu_ctx *)be->ctx;
    CU_CHECK(cu_use_device(c->device));
    return c;
}

void *cu_addr(bt_ptr p, size_t esz) {
    if (p.off % esz) {
        fprintf(stderr, "bertrain: cuda: offset %zu is not a multiple of the element size %zu\n",
                p.off, esz);
        exit(1);
    }
    return (char *)p.buf->ptr + p.off;
}

/* ================= copies to the host ================= */

cudaError_t cu_copy_to_host_after(cu_ctx *c, void *dst, const void *src, size_t bytes,
                                  cudaEvent_t done, bool external) {
    cudaError_t e = cudaSuccess;
    if (!c->copies) {
        CU_CHECK(cudaStreamCreateWithFlags(&c->copies, cudaStreamNonBlocking));
        CU_CHECK(cudaEventCreateWithFlags(&c->issued, cudaEventDisableTiming));
        CU_CHECK(cudaEventCreateWithFlags(&c->joined, cudaEventDisableTiming));
    }
    if ((e = cudaEventRecord(c->issued, c->stream)) != cudaSuccess) return e;
    if ((e = cudaStreamWaitEvent(c->copies, c->issued, 0)) != cudaSuccess) return e;
    if (bytes && (e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->copies)) !=
                     cudaSuccess)
        return e;
    return cudaEventRecordWithFlags(done, c->copies,
                                    external ? cudaEventRecordExternal : cudaEventRecordDefault);
}
