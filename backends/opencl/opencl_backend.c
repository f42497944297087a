/* OpenCL backend: platform and device selection, device listing, the context
 * and its one in-order queue, the kernel program (built once per backend from
 * the sources embedded at build time, every cl_kernel created once) and the
 * memory ops. Kernel launches are in opencl_ops.c, GEMM in opencl_gemm.c. */
#include "opencl_backend.h"
#include "opencl_internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ================= errors ================= */

/* Creation-time checks fail the creation with a message (in err) instead of
 * exiting: `name` failed with status e. */
#define CL_TRY(name, e)                                                                \
    do {                                                                               \
        if ((e) != CL_SUCCESS) {                                                       \
            snprintf(err, errlen, "opencl: %s failed: %s (%d) at %s:%d", name,         \
                     ocl_error_name(e), (int)(e), __FILE__, __LINE__);                 \
            goto fail;                                                                 \
        }                                                                              \
    } while (0)

/* ================= device queries ================= */

static void dev_str(cl_device_id d, cl_device_info what, char *out, size_t len) {
    out[0] = 0;
    if (clGetDeviceInfo(d, what, len, out, NULL) != CL_SUCCESS) snprintf(out, len, "?");
    out[len - 1] = 0;
}

static cl_ulong dev_ulong(cl_device_id d, cl_device_info what) {
    cl_ulong v = 0;
    clGetDeviceInfo(d, what, sizeof v, &v, NULL);
    return v;
}

static cl_uint dev_uint(cl_device_id d, cl_device_info what) {
    cl_uint v = 0;
    clGetDeviceInfo(d, what, sizeof v, &v, NULL);
    return v;
}

static size_t dev_size(cl_device_id d, cl_device_info what) {
    size_t v = 0;
    clGetDeviceInfo(d, what, sizeof v, &v, NULL);
    return v;
}

/* True when the device lists extension `ext`. */
static bool dev_has_ext(cl_device_id d, const char *ext) {
    size_t len = 0;
    if (clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, 0, NULL, &len) != CL_SUCCESS || !len) return false;
    char *s = malloc(len + 1);
    if (!s) return false;
    bool found = false;
    if (clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, len, s, NULL) == CL_SUCCESS) {
        s[len] = 0;
        size_t n = strlen(ext);
        for (char *p = strstr(s, ext); p && !found; p = strstr(p + 1, ext))
            found = (p == s || p[-1] == ' ') && (p[n] == 0 || p[n] == ' ');
    }
    free(s);
    return found;
}

/* Whether the kernels compute in double on device d: exactly where its OpenCL
 * C compiler defines cl_khr_fp64 (kernels/dialect_opencl.cl's BT_HAS_FP64),
 * which it does for a device that lists the extension. The host's tables for
 * those kernels (step_gate's numbers) take the same type, so a device that
 * reports a double config without the extension gets floats on both sides. */
static bool dev_has_fp64(cl_device_id d) { return dev_has_ext(d, "cl_khr_fp64"); }

/* The platforms (caller frees); 0 when there are none. */
static cl_uint get_platforms(cl_platform_id **out) {
    cl_uint n = 0;
    *out = NULL;
    if (clGetPlatformIDs(0, NULL, &n) != CL_SUCCESS || n == 0) return 0;
    *out = calloc(n, sizeof **out);
    if (!*out || clGetPlatformIDs(n, *out, NULL) != CL_SUCCESS) {
        free(*out);
        *out = NULL;
        return 0;
    }
    return n;
}

/* The devices of a platform of a type (caller frees); 0 when there are none. */
static cl_uint get_devices(cl_platform_id p, cl_device_type type, cl_device_id **out) {
    cl_uint n = 0;
    *out = NULL;
    if (clGetDeviceIDs(p, type, 0, NULL, &n) != CL_SUCCESS || n == 0) return 0;
    *out = calloc(n, sizeof **out);
    if (!*out || clGetDeviceIDs(p, type, n, *out, NULL) != CL_SUCCESS) {
        free(*out);
        *out = NULL;
        return 0;
    }
    return n;
}

static const char *type_name(cl_device_type t) {
    return t & CL_DEVICE_TYPE_GPU           ? "GPU"
           : t & CL_DEVICE_TYPE_CPU         ? "CPU"
           : t & CL_DEVICE_TYPE_ACCELERATOR ? "accelerator"
                                            : "other";
}

void bt_opencl_list_devices(FILE *out) {
    cl_platform_id *plats;
    cl_uint np = get_platforms(&plats);
    if (!np) {
        fprintf(out, "opencl: no platforms (is an ICD such as pocl-opencl-icd or a GPU driver installed?)\n");
        return;
    }
    for (cl_uint p = 0; p < np; p++) {
        char name[256] = "?", vendor[256] = "?", version[256] = "?";
        clGetPlatformInfo(plats[p], CL_PLATFORM_NAME, sizeof name, name, NULL);
        clGetPlatformInfo(plats[p], CL_PLATFORM_VENDOR, sizeof vendor, vendor, NULL);
        clGetPlatformInfo(plats[p], CL_PLATFORM_VERSION, sizeof version, version, NULL);
        name[255] = vendor[255] = version[255] = 0;
        fprintf(out, "opencl platform %u: %s (%s; %s)\n", p, name, vendor, version);
        cl_device_id *devs;
        cl_uint nd = get_devices(plats[p], CL_DEVICE_TYPE_ALL, &devs);
        if (!nd) fprintf(out, "  no devices\n");
        for (cl_uint d = 0; d < nd; d++) {
            char dname[256], dvendor[256];
            dev_str(devs[d], CL_DEVICE_NAME, dname, sizeof dname);
            dev_str(devs[d], CL_DEVICE_VENDOR, dvendor, sizeof dvendor);
            cl_device_type type = 0;
            clGetDeviceInfo(devs[d], CL_DEVICE_TYPE, sizeof type, &type, NULL);
            fprintf(out,
                    "  opencl:%u:%u  %s [%s]\n"
                    "      vendor %s, global memory %llu MiB (max buffer %llu MiB), "
                    "%u compute units,\n"
                    "      max work-group %zu, local memory %llu KiB, fp16 %s, fp64 %s\n",
                    p, d, dname, type_name(type), dvendor,
                    (unsigned long long)(dev_ulong(devs[d], CL_DEVICE_GLOBAL_MEM_SIZE) >> 20),
                    (unsigned long long)(dev_ulong(devs[d], CL_DEVICE_MAX_MEM_ALLOC_SIZE) >> 20),
                    dev_uint(devs[d], CL_DEVICE_MAX_COMPUTE_UNITS),
                    dev_size(devs[d], CL_DEVICE_MAX_WORK_GROUP_SIZE),
                    (unsigned long long)(dev_ulong(devs[d], CL_DEVICE_LOCAL_MEM_SIZE) >> 10),
                    dev_has_ext(devs[d], "cl_khr_fp16") ? "yes" : "no",
                    dev_has_fp64(devs[d]) ? "yes" : "no");
        }
        free(devs);
    }
    free(plats);
}

static bool contains_nocase(const char *hay, const char *needle) {
    for (; *hay; hay++) {
        size_t i = 0;
        while (needle[i] && hay[i] && tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i]))
            i++;
        if (!needle[i]) return true;
    }
    return false;
}

/* Find the one device whose name or vendor contains `substr` (any case), so a
 * config can say "opencl:Radeon" on any machine. Returns the number of
 * matches; unless it is 1, err says why. */
int bt_opencl_find_device(const char *substr, int *platform, int *device, char *err,
                           size_t errlen) {
    cl_platform_id *plats;
    cl_uint np = get_platforms(&plats);
    int matches = 0;
    char first[256] = "", second[256] = "";
    for (cl_uint p = 0; p < np; p++) {
        cl_device_id *devs;
        cl_uint nd = get_devices(plats[p], CL_DEVICE_TYPE_ALL, &devs);
        for (cl_uint d = 0; d < nd; d++) {
            char dname[256], dvendor[256];
            dev_str(devs[d], CL_DEVICE_NAME, dname, sizeof dname);
            dev_str(devs[d], CL_DEVICE_VENDOR, dvendor, sizeof dvendor);
            if (!contains_nocase(dname, substr) && !contains_nocase(dvendor, substr)) continue;
            if (matches++ == 0) {
                *platform = (int)p;
                *device = (int)d;
                snprintf(first, sizeof first, "opencl:%u:%u %s", p, d, dname);
            } else if (matches == 2) {
                snprintf(second, sizeof second, "opencl:%u:%u %s", p, d, dname);
            }
        }
        free(devs);
    }
    free(plats);
    if (matches == 1) return 1;
    if (matches == 0)
        snprintf(err, errlen, "device 'opencl:%s': no OpenCL device name or vendor contains '%s' "
                              "(bertrain devices lists them)", substr, substr);
    else
        snprintf(err, errlen, "device 'opencl:%s': %d devices match (%s; %s%s): use opencl:P:D",
                 substr, matches, first, second, matches > 2 ? "; ..." : "");
    return matches;
}

/* Find device `device` of platform `platform`, or with (-1, -1) the first GPU
 * of any platform. False with a reason in err when there is none. */
static bool select_device(int platform, int device, cl_platform_id *pout, cl_device_id *dout,
                          char *err, size_t errlen) {
    cl_platform_id *plats;
    cl_uint np = get_platforms(&plats);
    bool found = false;
    if (!np) {
        snprintf(err, errlen, "no OpenCL platform (install a driver, e.g. pocl-opencl-icd)");
        return false;
    }
    if (platform < 0) { /* auto: the first GPU */
        for (cl_uint p = 0; p < np && !found; p++) {
            cl_device_id *devs;
            if (get_devices(plats[p], CL_DEVICE_TYPE_GPU, &devs)) {
                *pout = plats[p];
                *dout = devs[0];
                found = true;
            }
            free(devs);
        }
        if (!found)
            snprintf(err, errlen, "no OpenCL GPU (%u platform%s; opencl:P:D selects any device, "
                                  "bertrain devices lists them)", np, np == 1 ? "" : "s");
    } else if ((cl_uint)platform >= np) {
        snprintf(err, errlen, "no OpenCL platform %d (%u platform%s)", platform, np,
                 np == 1 ? "" : "s");
    } else {
        cl_device_id *devs;
        cl_uint nd = get_devices(plats[platform], CL_DEVICE_TYPE_ALL, &devs);
        if (device >= 0 && (cl_uint)device < nd) {
            *pout = plats[platform];
            *dout = devs[device];
            found = true;
        } else {
            snprintf(err, errlen, "no OpenCL device %d on platform %d (%u device%s)", device,
                     platform, nd, nd == 1 ? "" : "s");
        }
        free(devs);
    }
    free(plats);
    return found;
}

/* ================= program ================= */

static const char *const kernel_names[K_COUNT] = {
#define OCL_KERNEL_NAME(name) "bt_" #name,
    OCL_KERNELS(OCL_KERNEL_NAME)
#undef OCL_KERNEL_NAME
};

/* Intel's relaxed allocation limits (cl_intel_relax_allocation_limits): a
 * buffer past CL_DEVICE_MAX_MEM_ALLOC_SIZE with this flag, kernels built to
 * address it. */
#ifndef CL_MEM_ALLOW_UNRESTRICTED_SIZE_INTEL
#define CL_MEM_ALLOW_UNRESTRICTED_SIZE_INTEL (1 << 23)
#endif
#define OCL_UNRESTRICTED_BUILD " -cl-intel-greater-than-4GB-buffer-required"

/* The smallest work-group size a failed kernel build is retried at (the
 * build halves it from the device's size down to this). */
#define OCL_MIN_RETRY_WG 32

/* Build options: OpenCL C 1.2, the work-group size, correctly rounded fp32
 * division and sqrt where the device offers them, the row kernels' register
 * cache on GPUs (BT_ROW_CACHE, kernels/dialect_opencl.cl); never fast-math
 * flags. */
static void build_options(ocl_ctx *c, char *opt, size_t len) {
    cl_device_fp_config fp = 0;
    cl_device_type type = 0;
    clGetDeviceInfo(c->device, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, NULL);
    clGetDeviceInfo(c->device, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    c->row_cache = (type & CL_DEVICE_TYPE_GPU) != 0;
    snprintf(opt, len, "-cl-std=CL1.2 -DBT_WG=%zu -DBT_REDUCE_CHUNK=%d%s%s%s", c->wg,
             OCL_REDUCE_CHUNK,
             fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT ? " -cl-fp32-correctly-rounded-divide-sqrt"
                                                      : "",
             c->row_cache ? " -DBT_ROW_CACHE=1" : "",
             c->max_alloc > c->device_max_alloc ? OCL_UNRESTRICTED_BUILD : "");
}

/* Build the program and create every kernel. A failed build is
 * *build_failed, its log on stderr when log_failure (the last try). */
static bool build_program(ocl_ctx *c, bool log_failure, bool *build_failed, char *err,
                          size_t errlen) {
    cl_int e;
    char opt[512];
    build_options(c, opt, sizeof opt);
    *build_failed = false;
    c->program = clCreateProgramWithSource(c->context, (cl_uint)bt_cl_source_count,
                                           (const char **)bt_cl_source_lines, NULL, &e);
    CL_TRY("clCreateProgramWithSource", e);
    e = clBuildProgram(c->program, 1, &c->device, opt, NULL, NULL);
    if (e != CL_SUCCESS) {
        size_t len = 0;
        clGetProgramBuildInfo(c->program, c->device, CL_PROGRAM_BUILD_LOG, 0, NULL, &len);
        char *log = log_failure ? malloc(len + 1) : NULL;
        if (log && clGetProgramBuildInfo(c->program, c->device, CL_PROGRAM_BUILD_LOG, len, log,
                                         NULL) == CL_SUCCESS) {
            log[len] = 0;
            fprintf(stderr, "bertrain: opencl: kernel build log (options %s):\n%s\n", opt, log);
        }
        free(log);
        snprintf(err, errlen, "opencl: building the kernels failed: %s (%d); build log above",
                 ocl_error_name(e), (int)e);
        *build_failed = true;
        return false;
    }
    for (int k = 0; k < K_COUNT; k++) {
        c->kernels[k] = clCreateKernel(c->program, kernel_names[k], &e);
        if (e != CL_SUCCESS) {
            snprintf(err, errlen, "opencl: clCreateKernel(%s) failed: %s (%d)", kernel_names[k],
                     ocl_error_name(e), (int)e);
            return false;
        }
    }
    return true;
fail:
    return false;
}

static void release_program(ocl_ctx *c) {
    for (int k = 0; k < K_COUNT; k++)
        if (c->kernels[k]) clReleaseKernel(c->kernels[k]);
    memset(c->kernels, 0, sizeof c->kernels);
    if (c->program) clReleaseProgram(c->program);
    c->program = NULL;
}

/* The smallest per-kernel work-group limit (a kernel may allow less than the
 * device maximum). */
static size_t min_kernel_wg(ocl_ctx *c) {
    size_t lim = SIZE_MAX;
    for (int k = 0; k < K_COUNT; k++) {
        size_t w = 0;
        CL_CHECK(clGetKernelWorkGroupInfo(c->kernels[k], c->device, CL_KERNEL_WORK_GROUP_SIZE,
                                          sizeof w, &w, NULL));
        if (w < lim) lim = w;
    }
    return lim;
}

/* ================= memory ================= */


/* The largest buffer the backend makes, into c->max_alloc: the device's
 * CL_DEVICE_MAX_MEM_ALLOC_SIZE, or its whole memory where Intel's relaxed
 * limits allow more; BERTRAIN_OPENCL_MAX_BUFFER_MB caps it (a driver that
 * reports more than it can give). The model splits its activations into
 * buffers of at most this. false with the reason for a bad setting. */
static bool buffer_limit(ocl_ctx *c, char *err, size_t errlen) {
    c->device_max_alloc = (size_t)dev_ulong(c->device, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
    c->unrestricted = dev_has_ext(c->device, "cl_intel_relax_allocation_limits");
    c->max_alloc = c->unrestricted && c->info.total_mem > c->device_max_alloc
                       ? c->info.total_mem : c->device_max_alloc;
    const char *env = getenv("BERTRAIN_OPENCL_MAX_BUFFER_MB");
    if (env && *env) {
        char *end;
        errno = 0;
        const unsigned long long mb = strtoull(env, &end, 10);
        if (errno || *end || mb < 1 || mb > (1ULL << 30) || env[0] == '-') {
            snprintf(err, errlen, "opencl: BERTRAIN_OPENCL_MAX_BUFFER_MB=%s: expected a whole "
                     "number of MB from 1", env);
            return false;
        }
        if ((size_t)(mb << 20) < c->max_alloc) c->max_alloc = (size_t)(mb << 20);
    }
    c->info.max_alloc = c->max_alloc;
    return true;
}

static bt_buffer *ocl_alloc(bt_backend *be, size_t bytes) {
    ocl_ctx *c = ocl(be);
    if (bytes == 0) bytes = 4;
    if (bytes > c->max_alloc) return NULL; /* beyond buffer_limit's */
    bt_buffer *b = malloc(sizeof *b);
    if (!b) return NULL;
    cl_int e;
    b->bytes = bytes;
    const cl_mem_flags past =
        bytes > c->device_max_alloc ? CL_MEM_ALLOW_UNRESTRICTED_SIZE_INTEL : 0;
    b->mem = clCreateBuffer(c->context, CL_MEM_READ_WRITE | past, bytes, NULL, &e);
    if (e != CL_SUCCESS) {
        free(b);
        return NULL;
    }
    /* drivers allocate on first use: touch the buffer now so that an
     * allocation failure is a NULL here, not a fatal error in a later op */
    static const unsigned char zero = 0;
    e = clEnqueueWriteBuffer(c->queue, b->mem, CL_TRUE, 0, 1, &zero, 0, NULL, NULL);
    if (e != CL_SUCCESS) {
        if (e != CL_MEM_OBJECT_ALLOCATION_FAILURE && e != CL_OUT_OF_RESOURCES)
            ocl_fatal("clEnqueueWriteBuffer", e, __FILE__, __LINE__);
        clReleaseMemObject(b->mem);
        free(b);
        return NULL;
    }
    bt_count_alloc(&c->count, bytes);
    return b;
}

static void ocl_free(bt_backend *be, bt_buffer *buf) {
    if (!buf) return;
    bt_count_free(&ocl(be)->count, buf->bytes);
    CL_CHECK(clReleaseMemObject(buf->mem));
    free(buf);
}

static void ocl_upload(bt_backend *be, bt_ptr dst, const void *src, size_t bytes) {
    if (!bytes) return;
    ocl(be)->count.host_writes++;
    CL_CHECK(clEnqueueWriteBuffer(ocl(be)->queue, dst.buf->mem, CL_TRUE, dst.off, bytes, src, 0,
                                  NULL, NULL));
}

static void ocl_download(bt_backend *be, void *dst, bt_ptr src, size_t bytes) {
    if (!bytes) return;
    ocl(be)->count.host_reads++;
    CL_CHECK(clEnqueueReadBuffer(ocl(be)->queue, src.buf->mem, CL_TRUE, src.off, bytes, dst, 0,
                                 NULL, NULL));
}

static void *ocl_host_alloc(bt_backend *be, size_t bytes) {
    (void)be;
    return malloc(bytes ? bytes : 1);
}

/* The queue finishes first: a non-blocking copy may still use p. */
static void ocl_host_free(bt_backend *be, void *p) {
    if (!p) return;
    CL_CHECK(clFinish(ocl(be)->queue));
    free(p);
}

/* A non-blocking read in queue order, flushed so that it starts without a
 * later wait; its event is the ticket's. */
static long ocl_download_async(bt_backend *be, void *dst, bt_ptr src, size_t bytes) {
    ocl_ctx *c = ocl(be);
    cl_event ev = NULL;
    if (bytes)
        CL_CHECK(clEnqueueReadBuffer(c->queue, src.buf->mem, CL_FALSE, src.off, bytes, dst, 0,
                                     NULL, &ev));
    else
        CL_CHECK(clEnqueueMarkerWithWaitList(c->queue, 0, NULL, &ev));
    CL_CHECK(clFlush(c->queue));
    return bt_tickets_issue(&c->reads, ev, "opencl");
}

static bool ocl_downloads_done(bt_backend *be, long ticket, bool wait) {
    ocl_ctx *c = ocl(be);
    for (cl_event ev; c->reads.arrived < ticket && (ev = bt_tickets_oldest(&c->reads)) != NULL;) {
        cl_int status = CL_QUEUED;
        CL_CHECK(clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status,
                                NULL));
        if (status > CL_COMPLETE) { /* queued, submitted or running */
            if (!wait) return false;
            c->count.host_syncs++;
            CL_CHECK(clWaitForEvents(1, &ev));
        } else if (status < 0) {
            CL_CHECK_CODE("clEnqueueReadBuffer (download_async)", status);
        }
        CL_CHECK(clReleaseEvent(bt_tickets_pop(&c->reads)));
    }
    return c->reads.arrived >= ticket;
}

/* A non-blocking write in queue order: src is read when it runs. */
static void ocl_upload_async(bt_backend *be, bt_ptr dst, const void *src, size_t bytes) {
    if (!bytes) return;
    ocl_ctx *c = ocl(be);
    CL_CHECK(clEnqueueWriteBuffer(c->queue, dst.buf->mem, CL_FALSE, dst.off, bytes, src, 0, NULL,
                                  NULL));
    CL_CHECK(clFlush(c->queue));
}

/* Like memmove: overlapping ranges of one buffer go through the scratch
 * buffer (clEnqueueCopyBuffer refuses overlapping copies). */
static void ocl_copy(bt_backend *be, bt_ptr dst, bt_ptr src, size_t bytes) {
    ocl_ctx *c = ocl(be);
    if (!bytes || (dst.buf == src.buf && dst.off == src.off)) return;
    bool overlap = dst.buf == src.buf && dst.off < src.off + bytes && src.off < dst.off + bytes;
    if (!overlap) {
        CL_CHECK(clEnqueueCopyBuffer(c->queue, src.buf->mem, dst.buf->mem, src.off, dst.off, bytes,
                                     0, NULL, NULL));
        return;
    }
    cl_mem tmp = ocl_scratch(c, bytes);
    CL_CHECK(clEnqueueCopyBuffer(c->queue, src.buf->mem, tmp, src.off, 0, bytes, 0, NULL, NULL));
    CL_CHECK(clEnqueueCopyBuffer(c->queue, tmp, dst.buf->mem, 0, dst.off, bytes, 0, NULL, NULL));
}

/* ================= device ================= */

static void ocl_sync(bt_backend *be) {
    ocl(be)->count.host_syncs++;
    CL_CHECK(clFinish(ocl(be)->queue));
}

/* ================= profiling ================= */

static void ocl_counters(bt_backend *be, bt_counters *out) { *out = ocl(be)->count; }

/* With a profiling queue a marker event (its end: when everything before it
 * finished); without one the queue is drained and the clock read. */
static int ocl_mark(bt_backend *be) {
    ocl_ctx *c = ocl(be);
    if (!c->profiling) {
        CL_CHECK(clFinish(c->queue));
        return bt_wall_mark(&c->wall, "opencl");
    }
    if (c->n_marks == c->cap_marks) {
        int cap = c->cap_marks ? 2 * c->cap_marks : 256;
        cl_event *m = realloc(c->marks, (size_t)cap * sizeof *m);
        if (!m) {
            fprintf(stderr, "bertrain: opencl: out of host memory for profiling marks\n");
            exit(1);
        }
        c->marks = m;
        c->cap_marks = cap;
    }
    CL_CHECK(clEnqueueMarkerWithWaitList(c->queue, 0, NULL, &c->marks[c->n_marks]));
    return c->n_marks++;
}

static double ocl_mark_seconds(bt_backend *be, int a, int b) {
    ocl_ctx *c = ocl(be);
    if (!c->profiling) return bt_wall_mark_seconds(&c->wall, a, b);
    if (a < 0 || b < 0 || a >= c->n_marks || b >= c->n_marks) return 0.0;
    CL_CHECK(clWaitForEvents(1, &c->marks[b]));
    cl_ulong ta = 0, tb = 0;
    CL_CHECK(clGetEventProfilingInfo(c->marks[a], CL_PROFILING_COMMAND_END, sizeof ta, &ta, NULL));
    CL_CHECK(clGetEventProfilingInfo(c->marks[b], CL_PROFILING_COMMAND_END, sizeof tb, &tb, NULL));
    return tb > ta ? (double)(tb - ta) * 1e-9 : 0.0;
}

static void ocl_marks_reset(bt_backend *be) {
    ocl_ctx *c = ocl(be);
    for (int i = 0; i < c->n_marks; i++) clReleaseEvent(c->marks[i]);
    c->n_marks = 0;
    c->wall.n = 0;
}

/* AMD's free-memory query (cl_amd_device_attribute_query): two values in
 * KiB, the free memory and the largest free block. */
#ifndef CL_DEVICE_GLOBAL_FREE_MEMORY_AMD
#define CL_DEVICE_GLOBAL_FREE_MEMORY_AMD 0x4039
#endif

/* The device's free memory now where it can tell (AMD's extension); 0
 * elsewhere: OpenCL has no portable query. */
static size_t free_memory(cl_device_id d) {
    size_t kib[2] = {0, 0};
    if (!dev_has_ext(d, "cl_amd_device_attribute_query") ||
        clGetDeviceInfo(d, CL_DEVICE_GLOBAL_FREE_MEMORY_AMD, sizeof kib, kib, NULL) != CL_SUCCESS)
        return 0;
    return kib[0] * 1024;
}

static void ocl_info(bt_backend *be, bt_device_info *out) {
    *out = ocl(be)->info;
    out->free_mem = free_memory(ocl(be)->device);
}

static void ocl_destroy(bt_backend *be) {
    ocl_ctx *c = ocl(be);
    if (c) {
        if (c->queue) clFinish(c->queue);
        for (cl_event ev; (ev = bt_tickets_pop(&c->reads)) != NULL;) clReleaseEvent(ev);
        bt_tickets_free(&c->reads);
        for (int i = 0; i < 3; i++) bt_stage_release(be, &c->stage[i]);
        ocl_gemm_release(c);
        ocl_reduce_release(c);
        ocl_optim_release(c);
        release_program(c);
        if (c->scratch) clReleaseMemObject(c->scratch);
        if (c->queue) clReleaseCommandQueue(c->queue);
        if (c->context) clReleaseContext(c->context);
        bt_partials_free(&c->partials);
        for (int i = 0; i < c->n_marks; i++) clReleaseEvent(c->marks[i]);
        free(c->marks);
        bt_wall_marks_free(&c->wall);
        free(c);
    }
    free(be);
}

static void fill_info(ocl_ctx *c) {
    bt_device_info *i = &c->info;
    memset(i, 0, sizeof *i);
    dev_str(c->device, CL_DEVICE_NAME, i->name, sizeof i->name);
    dev_str(c->device, CL_DEVICE_VENDOR, i->vendor, sizeof i->vendor);
    i->total_mem = (size_t)dev_ulong(c->device, CL_DEVICE_GLOBAL_MEM_SIZE);
    i->free_mem = 0; /* ocl_info asks where the device can tell */
    i->max_alloc = (size_t)dev_ulong(c->device, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
    i->compute_units = (int)dev_uint(c->device, CL_DEVICE_MAX_COMPUTE_UNITS);
    i->has_fp16 = dev_has_ext(c->device, "cl_khr_fp16");
    i->has_fp64 = dev_has_fp64(c->device);
    cl_device_type type = 0;
    clGetDeviceInfo(c->device, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    i->fused_ops_pay = (type & CL_DEVICE_TYPE_GPU) != 0;
}

/* The largest power of two <= x (x >= 1). */
static size_t pow2_floor(size_t x) {
    size_t p = 1;
    while (p * 2 <= x) p *= 2;
    return p;
}

bt_backend *bt_opencl_backend_create(int platform, int device, const bt_backend_options *opts,
                                     char *err, size_t errlen, bool *no_device) {
    if (no_device) *no_device = false;
    ocl_ctx *c = calloc(1, sizeof *c);
    bt_backend *be = calloc(1, sizeof *be);
    if (!c || !be) {
        free(c);
        free(be);
        snprintf(err, errlen, "opencl: out of host memory");
        return NULL;
    }
    be->name = "opencl";
    be->ctx = c;
    if (!select_device(platform, device, &c->platform, &c->device, err, errlen)) {
        if (no_device) *no_device = true;
        goto fail;
    }
    cl_int e;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)c->platform, 0};
    c->context = clCreateContext(props, 1, &c->device, NULL, NULL, &e);
    CL_TRY("clCreateContext", e);
    c->profiling = opts && opts->profile;
    c->queue = clCreateCommandQueue(c->context, c->device,
                                    c->profiling ? CL_QUEUE_PROFILING_ENABLE : 0, &e); /* in order */
    CL_TRY("clCreateCommandQueue", e);
    fill_info(c);
    if (!buffer_limit(c, err, errlen)) goto fail;
    /* work-group size: 256, or less where the device, its local memory (two
     * words per work-item in xent_fwd_bwd) or a kernel allows less */
    size_t local_mem = (size_t)dev_ulong(c->device, CL_DEVICE_LOCAL_MEM_SIZE);
    size_t wg = dev_size(c->device, CL_DEVICE_MAX_WORK_GROUP_SIZE);
    if (wg > 256) wg = 256;
    if (local_mem && wg > local_mem / 16) wg = local_mem / 16;
    c->wg = pow2_floor(wg ? wg : 1);
    for (;;) {
        bool build_failed;
        if (!build_program(c, c->wg <= OCL_MIN_RETRY_WG, &build_failed, err, errlen)) {
            if (!build_failed || c->wg <= OCL_MIN_RETRY_WG) goto fail;
            /* a compiler that rejects this work-group size: try half of it */
            fprintf(stderr, "bertrain: opencl: %s: the kernels did not build with work-groups "
                            "of %zu; retrying with %zu\n", c->info.name, c->wg, c->wg / 2);
            release_program(c);
            c->wg /= 2;
            continue;
        }
        size_t lim = min_kernel_wg(c);
        if (lim >= c->wg || c->wg == 1) break;
        release_program(c); /* a kernel allows less: rebuild with a smaller BT_WG */
        c->wg = pow2_floor(lim);
    }
    be->destroy = ocl_destroy;
    be->info = ocl_info;
    be->sync = ocl_sync;
    be->alloc = ocl_alloc;
    be->free = ocl_free;
    be->upload = ocl_upload;
    be->download = ocl_download;
    be->host_alloc = ocl_host_alloc;
    be->host_free = ocl_host_free;
    be->download_async = ocl_download_async;
    be->downloads_done = ocl_downloads_done;
    be->upload_async = ocl_upload_async;
    be->copy = ocl_copy;
    be->gemm = ocl_gemm;
    be->gemm16 = ocl_gemm16;
    be->gemm_grid = bt_gemm_grid_loop;
    be->counters = ocl_counters;
    be->mark = ocl_mark;
    be->mark_seconds = ocl_mark_seconds;
    be->marks_reset = ocl_marks_reset;
    be->graph_begin = bt_graph_begin_none;
    be->graph_end = bt_graph_end_none;
    ocl_fill_ops(be);
    ocl_load_tuning(c);
    return be;
fail:
    ocl_destroy(be);
    return NULL;
}
