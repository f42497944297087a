/* The OpenCL fault build's choice of fault (tests/c/conformance_clfault):
 * its kernels (tests/c/clfault_kernels.c, generated from kernels/ by
 * tests/opencl_fault/faults.pl) begin with this line, which
 * BERTRAIN_CL_FAULT=name makes "#define BT_FAULT_NAME". The production
 * kernels hold no fault. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>

/* the kernels' first line (read when the program is built) */
char bt_clfault_define[160] = "\n";

/* Read BERTRAIN_CL_FAULT before main: the fault's #define, or an empty line. */
__attribute__((constructor)) static void select_fault(void) {
    const char *fault = getenv("BERTRAIN_CL_FAULT");
    if (!fault || !*fault) return;
    int at = snprintf(bt_clfault_define, sizeof bt_clfault_define, "#define BT_FAULT_");
    for (const char *f = fault; *f && at + 2 < (int)sizeof bt_clfault_define; f++)
        bt_clfault_define[at++] = isalnum((unsigned char)*f) ? (char)toupper((unsigned char)*f) : '_';
    bt_clfault_define[at++] = '\n';
    bt_clfault_define[at] = 0;
    fprintf(stderr, "bertrain: opencl: fault injection: %s", bt_clfault_define);
}
