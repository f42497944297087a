/* The emulated CUDA runtime's events (emu.h): recorded on a stream, reached
 * when the stream's queue runs up to them; a stream may wait on another's
 * event (cudaStreamWaitEvent), which runs the recording stream up to the
 * record when the waiting stream's work runs. */
#include "emu.h"

#include <time.h>

using namespace cuemu;

/* An event: recorded on a stream, it takes the time when the stream's queue
 * reaches it (when the work before it has run). */
struct CUevent_st {
    cudaStream_t stream = nullptr; /* the stream it was last recorded on */
    int device = 0;
    bool recorded = false, reached = false;
    unsigned long records = 0, reached_record = 0; /* records made; the last that has run */
    bool timing = true; /* not cudaEventDisableTiming: a mark of the trace, timed */
    double t = 0.0;
};

static double monotonic_s() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

cudaError_t cudaEventCreate(cudaEvent_t *event) {
    STICKY_RETURN();
    *event = new CUevent_st();
    (*event)->device = current_device();
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
    STICKY_RETURN();
    if (flags & ~(unsigned)cudaEventDisableTiming) {
        report("cudaEventCreateWithFlags: flags %#x are not emulated", flags);
        return record(cudaErrorInvalidValue);
    }
    const cudaError_t e = cudaEventCreate(event);
    if (e == cudaSuccess) (*event)->timing = !(flags & cudaEventDisableTiming);
    return e;
}

/* cudaSuccess once the work before the event's last record has run (or it
 * was never recorded), else cudaErrorNotReady: queued work runs at a wait,
 * so a query never runs it. */
cudaError_t cudaEventQuery(cudaEvent_t event) {
    STICKY_RETURN();
    if (!event) return record(cudaErrorInvalidResourceHandle);
    return !event->recorded || event->reached ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
    if (!event) return record(cudaErrorInvalidResourceHandle);
    delete event;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t st) {
    STICKY_RETURN();
    if (!event) return record(cudaErrorInvalidResourceHandle);
    stream *s = stream_of(st, current_device());
    if (!s) return cudaErrorInvalidResourceHandle;
    /* stricter than CUDA, which makes an event node: the backend records no
     * event inside a graph */
    if (refuse_in_capture(s, "cudaEventRecord")) return record(cudaErrorStreamCaptureUnsupported);
    event->stream = st;
    event->device = s->device;
    event->recorded = true;
    event->reached = false;
    const unsigned long k = ++event->records;
    s->push([event, k] {
        event->t = monotonic_s();
        event->reached_record = k;
        event->reached = k == event->records; /* an earlier record is not the event's now */
        if (event->timing) trace_mark(); /* an ordering event is no profiler mark */
    });
    return cudaSuccess;
}

/* The work queued on st after this call runs once the event's last record
 * (at the time of the call) has been reached: as the device would, the
 * stream that recorded it runs up to that record first, and no further. An
 * event never recorded makes no wait. The event must outlive the wait. */
cudaError_t cudaStreamWaitEvent(cudaStream_t st, cudaEvent_t event, unsigned int flags) {
    STICKY_RETURN();
    if (!event) return record(cudaErrorInvalidResourceHandle);
    if (flags != 0) {
        report("cudaStreamWaitEvent: flags %#x are not emulated", flags);
        return record(cudaErrorInvalidValue);
    }
    stream *s = stream_of(st, current_device());
    if (!s) return cudaErrorInvalidResourceHandle;
    if (refuse_in_capture(s, "cudaStreamWaitEvent"))
        return record(cudaErrorStreamCaptureUnsupported);
    if (!event->recorded) return cudaSuccess;
    const unsigned long k = event->records;
    stream *from = stream_of(event->stream, event->device);
    if (!from) return cudaErrorInvalidResourceHandle;
    s->push([event, k, from] {
        flush_until(from, [event, k] { return event->reached_record >= k; });
        if (event->reached_record < k) {
            report("cudaStreamWaitEvent: the stream that recorded the event ran out of work "
                   "before the record");
            record(cudaErrorInvalidResourceHandle);
        }
    });
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    STICKY_RETURN();
    if (!event) return record(cudaErrorInvalidResourceHandle);
    if (event->recorded && !event->reached) {
        stream *s = stream_of(event->stream, event->device);
        if (refuse_in_capture(s, "cudaEventSynchronize"))
            return record(cudaErrorStreamCaptureUnsupported);
        flush(s);
    }
    return sticky() != cudaSuccess ? record(sticky()) : cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
    STICKY_RETURN();
    if (!start || !end || !start->recorded || !end->recorded || !start->timing || !end->timing)
        return record(cudaErrorInvalidResourceHandle);
    if (!start->reached || !end->reached) return record(cudaErrorNotReady);
    *ms = (float)((end->t - start->t) * 1e3);
    return cudaSuccess;
}
