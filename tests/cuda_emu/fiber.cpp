/* Fibers for the emulated CUDA device (fiber.h). */
#include "fiber.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__)

/* cuemu_fiber_switch(save, next): push the callee-saved registers, the SSE
 * control word and the x87 control word, store the stack pointer in *save,
 * load next and pop the same from it. cuemu_fiber_boot is where a prepared
 * fiber first lands: it calls r12(r13) and never returns. */
extern "C" void cuemu_fiber_switch(void **save, void *next);
extern "C" void cuemu_fiber_boot(void);
asm(R"(
    .text
    .globl cuemu_fiber_switch
    .hidden cuemu_fiber_switch
    .type cuemu_fiber_switch, @function
cuemu_fiber_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size cuemu_fiber_switch, .-cuemu_fiber_switch

    .globl cuemu_fiber_boot
    .hidden cuemu_fiber_boot
    .type cuemu_fiber_boot, @function
cuemu_fiber_boot:
    movq %r13, %rdi
    callq *%r12
    ud2
    .size cuemu_fiber_boot, .-cuemu_fiber_boot
)");

namespace cuemu {

void fiber_prepare(fiber *f, void (*fn)(void *), void *arg) {
    uintptr_t top = ((uintptr_t)f->stack + f->stack_bytes) & ~(uintptr_t)15;
    uint64_t *s = (uint64_t *)top;
    s[-1] = (uint64_t)(uintptr_t)&cuemu_fiber_boot; /* ret lands here, rsp = top */
    s[-2] = 0;                                      /* rbp */
    s[-3] = 0;                                      /* rbx */
    s[-4] = (uint64_t)(uintptr_t)fn;                /* r12 */
    s[-5] = (uint64_t)(uintptr_t)arg;               /* r13 */
    s[-6] = 0;                                      /* r14 */
    s[-7] = 0;                                      /* r15 */
    uint32_t mxcsr;
    uint16_t fpucw;
    asm volatile("stmxcsr %0" : "=m"(mxcsr));
    asm volatile("fnstcw %0" : "=m"(fpucw));
    memcpy((char *)&s[-8], &mxcsr, 4);
    memcpy((char *)&s[-8] + 4, &fpucw, 2);
    f->sp = &s[-8];
}

void fiber_switch(fiber *from, fiber *to) {
    if (from != to) cuemu_fiber_switch(&from->sp, to->sp); /* to->sp is read before the save */
}

}  // namespace cuemu

#else /* any other machine: ucontext */

#include <ucontext.h>

namespace cuemu {

static ucontext_t *uc(fiber *f) {
    if (!f->uctx) {
        f->uctx = calloc(1, sizeof(ucontext_t));
        if (!f->uctx) abort();
    }
    return (ucontext_t *)f->uctx;
}

static thread_local fiber *starting; /* the fiber a switch enters */

static void boot() { starting->fn(starting->arg); }

void fiber_prepare(fiber *f, void (*fn)(void *), void *arg) {
    ucontext_t *u = uc(f);
    getcontext(u);
    u->uc_stack.ss_sp = f->stack;
    u->uc_stack.ss_size = f->stack_bytes;
    u->uc_link = nullptr;
    f->fn = fn;
    f->arg = arg;
    makecontext(u, boot, 0);
}

void fiber_switch(fiber *from, fiber *to) {
    if (from == to) return;
    starting = to;
    swapcontext(uc(from), uc(to));
}

}  // namespace cuemu

#endif
