/* The host side of a device reduction, shared by the OpenCL and CUDA
 * backends: the device writes one float partial per fixed chunk, the host
 * reads them into this growable array and adds them in chunk order in double,
 * so the sum depends only on the data and the chunk size. */
#ifndef BT_PARTIALS_H
#define BT_PARTIALS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    float *v;
    size_t cap;
} bt_partials;

/* Room for n partials (grown as needed); on out of host memory, one line
 * naming `backend` and exit. */
float *bt_partials_reserve(bt_partials *p, size_t n, const char *backend);

/* v[0] + v[1] + ... + v[n-1], in that order, in double. */
double bt_partials_sum(const bt_partials *p, size_t n);

void bt_partials_free(bt_partials *p);

#ifdef __cplusplus
}
#endif

#endif
