/* The config parser with --set: the input is up to 8 "key.path=value" lines,
 * a NUL byte, then the JSON config. */
#include "config/config.h"
#include "fuzz_util.h"


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_config_input in;
    if (!fuzz_config_split(data, size, &in)) return 0;
    bt_config cfg;
    if (config_load(&cfg, in.path, in.sets, in.n_sets, 1)) config_free(&cfg);
    fuzz_config_free(&in);
    return 0;
}
