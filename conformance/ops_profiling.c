/* Conformance checks of the profiling slots: counters (memory in use and its
 * peak, blocking reads, waits, launches) and marks on the device timeline. */
#include "ops.h"

#include <string.h>

void test_profiling(bt_backend *be) {
    const bool cpu = !strcmp(be->name, "cpu"); /* the CPU has no kernel launches to count */
    if (want_op("counters")) {
        verdict v = v_new();
        bt_counters a, b, c;
        be->counters(be, &a);
        bt_buffer *buf = be->alloc(be, 1 << 20);
        be->counters(be, &b);
        if (!buf) v_fail(&v, "alloc(1 MiB) returned NULL");
        if (b.mem_in_use != a.mem_in_use + (1 << 20))
            v_fail(&v, "mem_in_use %zu -> %zu after a 1 MiB alloc", a.mem_in_use, b.mem_in_use);
        if (b.mem_peak < b.mem_in_use) v_fail(&v, "mem_peak %zu < in use %zu", b.mem_peak, b.mem_in_use);
        float x = 0;
        if (buf) {
            be->fill(be, (bt_ptr){buf, 0}, 1.5f, 1000);
            be->download(be, &x, (bt_ptr){buf, 4 * 999}, 4);
            be->sync(be);
            be->free(be, buf);
        }
        be->counters(be, &c);
        if (x != 1.5f) v_fail(&v, "the fill did not land (%g)", (double)x);
        if (c.mem_in_use != a.mem_in_use) v_fail(&v, "mem_in_use %zu after the free, %zu before",
                                                  c.mem_in_use, a.mem_in_use);
        if (c.mem_peak < a.mem_in_use + (1 << 20)) v_fail(&v, "mem_peak forgot the 1 MiB");
        if (c.host_reads != b.host_reads + 1) v_fail(&v, "host_reads +%ld for one download",
                                                     c.host_reads - b.host_reads);
        if (c.host_syncs != b.host_syncs + 1) v_fail(&v, "host_syncs +%ld for one sync",
                                                     c.host_syncs - b.host_syncs);
        if (!cpu && c.launches <= b.launches) v_fail(&v, "a fill launched nothing");
        v_report(&v, "counters", "alloc 1 MiB, fill, download, sync, free");
    }
    if (want_op("mark") || want_op("mark_seconds") || want_op("marks_reset")) {
        verdict v = v_new();
        const int n = 512;
        bt_buffer *buf = be->alloc(be, (size_t)3 * n * n * 4);
        if (!buf) {
            v_fail(&v, "alloc failed");
        } else {
            bt_ptr a = {buf, 0}, b = bt_at(a, (size_t)n * n), c = bt_at(a, 2 * (size_t)n * n);
            be->fill(be, a, 0.5f, 2 * (size_t)n * n);
            be->marks_reset(be);
            const int m0 = be->mark(be);
            for (int i = 0; i < 4; i++)
                be->gemm(be, false, false, n, n, n, 1.0f, a, n, 0, b, n, 0, 0.0f, c, n, 0, 1);
            const int m1 = be->mark(be), m2 = be->mark(be);
            const double t = be->mark_seconds(be, m0, m1), none = be->mark_seconds(be, m1, m2);
            if (m0 != 0 || m1 != 1 || m2 != 2) v_fail(&v, "marks numbered %d, %d, %d", m0, m1, m2);
            if (!(t > 0 && t < 600)) v_fail(&v, "4 GEMMs of 512^3 took %g s between marks", t);
            if (!(none >= 0 && none <= t)) v_fail(&v, "nothing between marks took %g s (the GEMMs %g s)", none, t);
            be->marks_reset(be);
            const int again = be->mark(be);
            if (again != 0) v_fail(&v, "after marks_reset the first mark is %d", again);
            be->marks_reset(be);
            be->free(be, buf);
            if (v.ok) v_metric(&v, "s", t, 600);
        }
        v_report(&v, "mark", "4 GEMMs of 512^3 between two marks (s)");
        if (want_op("mark_seconds")) {
            verdict w = v_new();
            if (!v.ok) v_fail(&w, "see mark");
            v_report(&w, "mark_seconds", "device time between marks, 0 <= empty <= full");
        }
        if (want_op("marks_reset")) {
            verdict w = v_new();
            if (!v.ok) v_fail(&w, "see mark");
            v_report(&w, "marks_reset", "numbering starts again at 0");
        }
    }
}
