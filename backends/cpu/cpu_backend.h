/* The CPU reference backend's public entry point. */
#ifndef BT_CPU_BACKEND_H
#define BT_CPU_BACKEND_H

#include "../backend.h"

/* Create the CPU reference backend with `threads` OpenMP threads (0: the
 * OpenMP default). NULL when out of host memory. */
bt_backend *bt_cpu_backend_create(int threads);

#endif
