/* The safetensors reader: open, then touch every tensor's bytes. */
#include "store/safetensors.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file("x.safetensors", data, size);
    st_file f;
    char err[512];
    if (!st_open(&f, path, err, sizeof err)) return 0;
    unsigned sum = 0;
    for (int i = 0; i < f.n; i++) {
        const st_entry *e = &f.entries[i];
        const unsigned char *p = st_data(&f, e);
        for (size_t k = 0; k < e->end - e->begin; k++) sum += p[k];
        sum += (unsigned)st_numel(e);
        (void)st_find(&f, e->name);
    }
    st_close(&f);
    return (int)(sum & 0);
}
