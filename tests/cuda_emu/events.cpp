/* The emulated CUDA runtime's events (emu.h): recorded on a stream, reached
 * when the stream's queue runs up to them; a stream may wait on another's
 * event (cudaStreamWaitEvent), which runs the recording stream up to the
 * record when the waiting stream's work runs.
 *
 * While a stream captures, a plain record only marks a point of the capture:
 * another stream that waits on it joins the capture (a fork: its work
 * becomes nodes of the same graph), and the capturing stream that waits on an
 * event recorded on a forked stream joins that stream's work back. The graph
 * stays a chain in issue order, which is one order CUDA's graph allows. An
 * external record (cudaEventRecordWithFlags) becomes an event record node:
 * each launch of the graph records the event. */
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
    /* recorded plainly on a capturing stream: the capture, the stream, and
     * how many nodes that stream had added then (capture_id 0: not so) */
    unsigned long long capture_id = 0;
    cuemu::stream *capture_stream = nullptr;
    unsigned long capture_pushes = 0;
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

namespace cuemu {

std::function<void()> event_record_work(cudaEvent_t event, stream *s) {
    event->stream = (cudaStream_t)s;
    event->device = s->device;
    event->recorded = true;
    event->reached = false;
    event->capture_id = 0;
    const unsigned long k = ++event->records;
    return [event, k] {
        event->t = monotonic_s();
        event->reached_record = k;
        event->reached = k == event->records; /* an earlier record is not the event's now */
        if (event->timing) trace_mark(); /* an ordering event is no profiler mark */
    };
}

}  // namespace cuemu

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t st) {
    return cudaEventRecordWithFlags(event, st, cudaEventRecordDefault);
}

cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t st, unsigned int flags) {
    STICKY_RETURN();
    if (!event) return record(cudaErrorInvalidResourceHandle);
    if (flags & ~(unsigned)cudaEventRecordExternal) {
        report("cudaEventRecordWithFlags: flags %#x are not emulated", flags);
        return record(cudaErrorInvalidValue);
    }
    stream *s = stream_of(st, current_device());
    if (!s) return cudaErrorInvalidResourceHandle;
    if (capture_refuses(s)) return record(cudaErrorStreamCaptureInvalidated);
    if (s->capture && (flags & cudaEventRecordExternal)) {
        graph_append_event(s->capture, event);
        s->capture_pushes++;
        return cudaSuccess;
    }
    if (s->capture) { /* a point of the capture, for a fork or a join */
        event->capture_id = s->capture_id;
        event->capture_stream = s;
        event->capture_pushes = s->capture_pushes;
        return cudaSuccess;
    }
    s->push(event_record_work(event, s));
    return cudaSuccess;
}

/* cudaStreamWaitEvent on an event recorded in a capture: s forks into the
 * capture, or (capturing it already) joins the recording stream's work up
 * to the record. */
static cudaError_t wait_in_capture(stream *s, cudaEvent_t event) {
    stream *from = event->capture_stream;
    if (!from->capture || from->capture_id != event->capture_id) {
        report("cudaStreamWaitEvent: the event was recorded in a capture that has ended");
        return record(cudaErrorStreamCaptureInvalidated);
    }
    if (!s->capture) {
        s->capture = from->capture;
        s->capture_id = from->capture_id;
        s->capture_invalid = false;
        s->capture_origin = from->capture_origin ? from->capture_origin : from;
        s->capture_pushes = s->capture_joined = 0;
        return cudaSuccess;
    }
    if (s->capture_id != event->capture_id) {
        refuse_in_capture(s, "cudaStreamWaitEvent on an event of another capture");
        return record(cudaErrorStreamCaptureUnsupported);
    }
    if (from != s && event->capture_pushes > from->capture_joined)
        from->capture_joined = event->capture_pushes;
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
    if (capture_refuses(s)) return record(cudaErrorStreamCaptureInvalidated);
    if (event->capture_id) return wait_in_capture(s, event);
    /* stricter than CUDA, which makes an event wait node */
    if (refuse_in_capture(s, "cudaStreamWaitEvent on an event recorded outside the capture"))
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
