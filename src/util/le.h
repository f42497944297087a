/* Little-endian integers in byte buffers, for bertrain's binary files
 * (optim.bin, onebit.bin, onebit_lamb.bin, TensorBoard records): the same
 * bytes on every host. */
#ifndef BT_LE_H
#define BT_LE_H

#include <stdint.h>

/* Write the low `bytes` bytes of x at p, least significant first. */
static inline void le_put(unsigned char *p, uint64_t x, int bytes) {
    for (int i = 0; i < bytes; i++) p[i] = (unsigned char)(x >> (8 * i));
}

/* Read `bytes` bytes at p, least significant first. */
static inline uint64_t le_get(const unsigned char *p, int bytes) {
    uint64_t x = 0;
    for (int i = bytes - 1; i >= 0; i--) x = x << 8 | p[i];
    return x;
}

#endif
