/* Internals shared by the CPU reference backend's files. */
#ifndef BT_CPU_INTERNAL_H
#define BT_CPU_INTERNAL_H

#include "cpu_backend.h"

struct bt_buffer {
    void *data;
    size_t bytes;
};

/* Host address of a device address. */
static inline float *cpu_f32(bt_ptr p) { return (float *)((char *)p.buf->data + p.off); }
static inline int32_t *cpu_i32(bt_ptr p) { return (int32_t *)((char *)p.buf->data + p.off); }
static inline uint16_t *cpu_u16(bt_ptr p) { return (uint16_t *)((char *)p.buf->data + p.off); }

/* Fixed reduction chunk: partial sums are formed per chunk of this many
 * elements and then added in chunk order, so the result does not depend on the
 * thread count. */
#define CPU_REDUCE_CHUNK 4096

/* Columns per task in column-parallel gradient reductions. */
#define CPU_COL_BLOCK 32

/* Fill the nn ops (cpu_nn.c) into a table. */
void cpu_fill_nn_ops(bt_backend *be);

#endif
