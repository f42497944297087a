/* Numbers for JSON files (json_num.h). */
#include "json_num.h"

#include <stdio.h>
#include <stdlib.h>

double json_short_float(float f) {
    char buf[32];
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)f);
        if ((float)strtod(buf, NULL) == f) break;
    }
    return strtod(buf, NULL);
}
