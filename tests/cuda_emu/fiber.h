/* Fibers for the emulated CUDA device: one per thread of a block, so that a
 * block's threads run as a team that meets at __syncthreads(). A fiber runs on
 * its own stack until it yields back to the scheduler (at a barrier) or its
 * function returns. x86-64 switches with a few instructions; other machines
 * fall back to ucontext. */
#ifndef CUEMU_FIBER_H
#define CUEMU_FIBER_H

#include <cstddef>

namespace cuemu {

struct fiber {
    void *sp = nullptr;      /* saved stack pointer while switched out */
    char *stack = nullptr;   /* lowest usable byte */
    size_t stack_bytes = 0;
    void *uctx = nullptr;    /* ucontext fallback only: the context, */
    void (*fn)(void *) = nullptr; /* and what it starts with */
    void *arg = nullptr;
};

/* Make f start fn(arg) on its stack at the next switch_to. fn must never
 * return: it ends by switching back for good. */
void fiber_prepare(fiber *f, void (*fn)(void *), void *arg);

/* Save the running context in *from and resume to (nothing when they are
 * the same fiber). */
void fiber_switch(fiber *from, fiber *to);

}  // namespace cuemu

#endif
