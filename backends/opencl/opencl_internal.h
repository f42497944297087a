/* Internals shared by the OpenCL backend's files: the context, the kernel
 * table, error checks and launch helpers. Host code lives in
 * opencl_backend.c (device, memory, program), opencl_ops.c (kernel launches)
 * and opencl_gemm.c (CLBlast and its tuning); the kernels in kernels/. */
#ifndef BT_OPENCL_INTERNAL_H
#define BT_OPENCL_INTERNAL_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>

#include "../../kernels/constants.h"
#include "../backend.h"
#include "../common/counting.h"
#include "../common/partials.h"
#include "../common/tickets.h"
#include "../common/staged_gemm.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* Device memory: one cl_mem per bt_buffer; a bt_ptr offset becomes a kernel
 * argument (buffer, offset in elements), never a sub-buffer. */
struct bt_buffer {
    cl_mem mem;
    size_t bytes;
};

/* Every kernel of kernels/, by its name there without the bt_ prefix. Each is
 * created once, at backend creation. */
#define OCL_KERNELS(X)                                                                  \
    X(fill) X(add) X(scale) X(axpy) X(bias_add) X(gelu_fwd) X(gelu_bwd) X(tanh_fwd)     \
    X(tanh_bwd) X(tanh_fwd16) X(tanh_bwd16) X(dropout) X(dropout_rows) X(bias_grad) X(bias_grad_partial) X(sum_partial) X(sumsq_partial) X(all_finite)   \
    X(layernorm_fwd) X(layernorm_bwd_dx) X(layernorm_bwd_dx_params) X(layernorm_bwd_params)   \
    X(layernorm_bwd_params_partial) X(layernorm_bwd_params_sum) X(softmax_fwd)          \
    X(softmax_bwd) X(embed_fwd) X(embed_bwd_type) X(embed_bwd_type_partial) \
    X(embed_bwd_pos) X(gather_rows) X(scatter_rows) X(xent_fwd_bwd) X(adamw_step) X(lamb_update) X(adamw_multi)         \
    X(lamb_multi_moments) X(lamb_multi_trust) X(lamb_multi_apply) X(step_gate_decide) X(cast_f32_to_bf16)   \
    X(cast_f32_to_f16) X(cast_bf16_to_f32) X(cast_f16_to_f32) X(cast_bf16_to_f16)       \
    X(cast_f16_to_bf16) X(round16_bf16) X(round16_f16) X(bias_gelu_fwd)  \
    X(bias_gelu_bwd) X(bias_dropout_add) X(add_dropout) X(residual_layernorm_fwd) X(softmax_dropout_fwd)   \
    X(dropout_softmax_bwd) X(attention_fwd) X(attention_bwd_dq) X(attention_bwd_dkv)

#define OCL_KERNEL_ENUM(name) K_##name,
typedef enum { OCL_KERNELS(OCL_KERNEL_ENUM) K_COUNT } ocl_kernel_id;
#undef OCL_KERNEL_ENUM

/* Elements each work-group of sum_partial / sumsq_partial reduces; the host
 * adds the per-chunk partials in order, in double (as the CPU backend's
 * CPU_REDUCE_CHUNK). */
#define OCL_REDUCE_CHUNK BT_REDUCE_CHUNK
/* Rows per chunk of the two-pass column reductions: bias_grad, layernorm_bwd's
 * dgamma and dbeta, embed_bwd's dwtt. */
#define OCL_COL_ROWS BT_COL_ROWS

typedef struct {
    cl_platform_id platform;
    cl_device_id device;
    cl_context context;
    cl_command_queue queue; /* the one in-order queue */
    cl_program program;
    cl_kernel kernels[K_COUNT];
    size_t wg;         /* BT_WG: the fixed work-group size of every kernel (power of 2) */
    bool row_cache;    /* built with BT_ROW_CACHE (a GPU): LayerNorm rows in registers */
    size_t max_alloc;  /* the largest buffer it makes (buffer_limit in opencl_backend.c) */
    size_t device_max_alloc; /* CL_DEVICE_MAX_MEM_ALLOC_SIZE */
    bool unrestricted; /* Intel's relaxed allocation limits: buffers past device_max_alloc */
    cl_mem scratch;    /* reduction partials and flags, grown on demand */
    size_t scratch_bytes;
    bt_stage stage[3]; /* gemm16: the rounded copies of A and B, a 16-bit C widened; grown
                        * on demand */
    bt_partials partials; /* host copy of the partials */
    bt_device_info info;
    bt_counters count;    /* what the profiler reads (launches: kernels and CLBlast calls) */
    bool profiling;       /* the queue records timestamps: marks are marker events */
    cl_event *marks;      /* profiling: the marker events since marks_reset */
    int n_marks, cap_marks;
    bt_wall_marks wall;   /* no profiling: marks wait for the queue and read the clock */
    cl_mem defer_mem;     /* partials of the deferred reductions, grown on demand */
    size_t defer_cap;     /* floats */
    bt_deferrals defer;   /* the reductions queued since the last fetch */
    bt_tickets reads;     /* download_async's copies not yet seen to arrive (cl_event) */
    cl_mem multi_mem;     /* multi-tensor optimizers: span table, partials, trust ratios */
    size_t multi_bytes;
    bt_host_buf multi_host; /* the span table as uploaded (kept until the write is done) */
    cl_event multi_write; /* the last table upload, NULL when none is pending */
    cl_mem gate_mem;      /* step_gate: its table and numbers, grown on demand */
    size_t gate_bytes;
    bt_host_buf gate_host; /* the same as uploaded (kept until the write is done) */
    cl_event gate_write;  /* the last gate upload, NULL when none is pending */
} ocl_ctx;

/* The context of a backend. */
static inline ocl_ctx *ocl(bt_backend *be) { return (ocl_ctx *)be->ctx; }

/* The symbolic name of an OpenCL error code ("CL_OUT_OF_RESOURCES"). */
const char *ocl_error_name(cl_int err);

/* Print "bertrain: opencl: CALL failed: NAME (code) at FILE:LINE" and exit:
 * a failed launch or transfer leaves device memory undefined. */
void ocl_fatal(const char *call, cl_int err, const char *file, int line);

/* Check an OpenCL call that returns its status. */
#define CL_CHECK(call)                                                  \
    do {                                                                \
        cl_int cl_err_ = (call);                                        \
        if (cl_err_ != CL_SUCCESS) ocl_fatal(#call, cl_err_, __FILE__, __LINE__); \
    } while (0)

/* Check the status an OpenCL call left in an errcode_ret variable. */
#define CL_CHECK_CODE(name, err)                                        \
    do {                                                                \
        if ((err) != CL_SUCCESS) ocl_fatal(name, (err), __FILE__, __LINE__); \
    } while (0)

/* A device buffer of at least `bytes` for reduction partials (the context's
 * scratch, grown as needed). */
cl_mem ocl_scratch(ocl_ctx *c, size_t bytes);

/* ---- kernel launch helpers (opencl_ops.c) ---- */

/* Element offset of p for elements of esz bytes (the offset must be aligned). */
size_t ocl_elem_off(bt_ptr p, size_t esz);

/* ---- generated from the kernels/ sources at build time (opencl_kernels.c) ---- */
extern const char *const bt_cl_source_lines[];
extern const size_t bt_cl_source_count;

/* ---- opencl_ops.c ---- */
/* Fill the op slots that launch kernels into a table (with the two below). */
void ocl_fill_ops(bt_backend *be);

/* ---- opencl_reduce.c ---- */
/* Fill sum, sumsq, all_finite, reduce_defer, reduce_fetch and step_gate. */
void ocl_fill_reduce_ops(bt_backend *be);
/* Release the deferred reductions' buffers (at destroy). */
void ocl_reduce_release(ocl_ctx *c);

/* ---- opencl_optim.c ---- */
/* Fill adamw_step, lamb_update, adamw_multi and lamb_multi. */
void ocl_fill_optim_ops(bt_backend *be);

/* Fill the fused ops (opencl_fused.c) into a table. */
void ocl_fill_fused_ops(bt_backend *be);
/* Fill attention_fwd and attention_bwd (opencl_attention.c). */
void ocl_fill_attention_ops(bt_backend *be);
/* Release the multi-tensor optimizers' buffers (at destroy). */
void ocl_optim_release(ocl_ctx *c);

/* ---- opencl_gemm.c ---- */
/* The gemm op (CLBlast). */
void ocl_gemm(bt_backend *be, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
              bt_ptr a, int lda, long stride_a, bt_ptr b, int ldb, long stride_b, float beta,
              bt_ptr c, int ldc, long stride_c, int batch);
/* The name of a CLBlast status (the OpenCL name where they coincide). */
const char *ocl_clblast_status_name(int status);
/* Drop CLBlast's compiled kernels for this context (before it is released). */
void ocl_gemm_release(ocl_ctx *c);
/* gemm with 16-bit operands (backend.h): fp32 copies of A's and B's 16-bit
 * values in staging, then CLBlast's Sgemm. */
void ocl_gemm16(bt_backend *be, bt_dtype dt, unsigned stored16, bool trans_a, bool trans_b, int m, int n, int k,
                float alpha, bt_ptr a, int lda, long stride_a, bt_ptr b, int ldb,
                long stride_b, float beta, bt_ptr c, int ldc, long stride_c, int batch);
/* ---- opencl_tuning.c ---- */
/* Load tuned CLBlast parameters for this device, if a tuning file exists (see
 * docs/OPENCL.md); prints what it loaded to stderr. */
void ocl_load_tuning(ocl_ctx *c);
/* A device name as a file name: lower case, runs of other characters as '_'. */
void ocl_sanitize_name(const char *name, char *out, size_t outlen);

#endif
