/* The run of a fused op's conformance case beside the unfused ops it
 * replaces (fused_case.h), and the checks the fused ops' files share. */
#include "fused_case.h"

#include "backends/common/half.h"
#include "backends/philox.h"

#include <stdio.h>
#include <string.h>

/* Fail v unless the n 16-bit values of got are the bits of the floats of
 * out in dt (half.h's conversion: cast's bits) and equal the unfused run's
 * (want). */
void v_copy16(verdict *v, const char *what, const uint16_t *got, const uint16_t *want,
                     const float *out, size_t n, bt_dtype dt) {
    if (v_bits16_of(v, what, got, out, n, dt) && memcmp(got, want, n * 2))
        v_fail(v, "%s: not the bits of the unfused ops' cast", what);
}

/* Float64 dropout factor of element i: 1/(1-p) (as float, as the ops) or 0. */
double keep_factor(const fused_args *a, size_t i) {
    const uint32_t thr = philox_drop_threshold(a->p);
    const uint32_t sample = a->first_sample + (uint32_t)(i / a->per_sample);
    const uint32_t elem = (uint32_t)(i % a->per_sample);
    return philox_draw(a->key.seed, a->key.stream, sample, elem) >= thr
               ? (double)(1.0f / (1.0f - a->p))
               : 0.0;
}

/* Run the fused op and the unfused sequence on copies of the same inputs
 * (make builds the tensors); compare bits and the references. */
void fused_case(bt_backend *be, const char *op, void (*make)(tensor *, void *),
                       void *inputs, int nt, run_fn fused, run_fn unfused, fused_args *a,
                       const fused_out *outs, int nout, const char *shape) {
    tensor tf[MAXT], tu[MAXT];
    make(tf, inputs);
    make(tu, inputs);
    verdict v = v_new();
    bool ok_f = exec_op(&v, be, tf, nt, fused, a, NULL);
    bool ok_u = ok_f && exec_op(&v, be, tu, nt, unfused, a, NULL);
    if (ok_f && ok_u) {
        for (int o = 0; o < nout; o++) {
            const tensor *t = &tf[outs[o].t];
            if (outs[o].left_out) { /* the copy of the unfused run's output, alone */
                v_copy16(&v, tf[outs[o].copy16].name, tf[outs[o].copy16].res,
                         tu[outs[o].copy16].res, RES(tu[outs[o].t]), t->n, a->round16);
                continue;
            }
            v_nmse(&v, t->name, RES(*t), outs[o].ref, outs[o].mag, t->n, outs[o].thr);
            char what[64];
            snprintf(what, sizeof what, "%s vs unfused", t->name);
            v_bits(&v, what, RES(*t), RES(tu[outs[o].t]), t->n);
            if (outs[o].copy16)
                v_copy16(&v, tf[outs[o].copy16].name, tf[outs[o].copy16].res,
                         tu[outs[o].copy16].res, RES(*t), t->n, a->round16);
        }
    }
    v_report(&v, op, "%s", shape);
    tensors_free(tf, nt);
    tensors_free(tu, nt);
}

/* The suffix of a row's shape for storage rounding dt. */
const char *storage_suffix(bt_dtype dt) {
    return dt == BT_BF16 ? " bf16 storage" : dt == BT_F16 ? " f16 storage" : "";
}

/* Fail v unless each of the n values of out is a value of dt (its float
 * bits survive the round trip through dt). */
void v_stored16(verdict *v, const char *what, const float *out, size_t n, bt_dtype dt) {
    for (size_t i = 0; i < n; i++) {
        const float back = round16_host(out[i], dt);
        if (memcmp(&back, &out[i], 4) != 0) {
            v_fail(v, "%s[%zu] = %.9g is not a %s value", what, i, (double)out[i],
                   dt == BT_BF16 ? "bf16" : "f16");
            return;
        }
    }
}
