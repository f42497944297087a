/* The CPU reference backend's public entry point. */
#ifndef BT_CPU_BACKEND_H
#define BT_CPU_BACKEND_H

#include "../backend.h"

/* Create the CPU reference backend with `threads` OpenMP threads; 0: the
 * CPUs this process may use (its affinity mask, its cgroup's CPU quota)
 * divided among the job's local_ranks processes on the node (0 or 1: this
 * one alone), or OMP_NUM_THREADS where it is set. NULL when out of host
 * memory. */
bt_backend *bt_cpu_backend_create(int threads, int local_ranks);


#endif
