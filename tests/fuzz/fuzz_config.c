/* The config parser with --set: the input is up to 8 "key.path=value" lines,
 * a NUL byte, then the JSON config. */
#include "config/config.h"
#include "fuzz_util.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t head = nul ? (size_t)(nul - data) : 0;
    const uint8_t *json = nul ? nul + 1 : data;
    const char *path = fuzz_file("config.json", json, size - (size_t)(json - data));
    char *sets_text = malloc(head + 1), *sets[8];
    if (!sets_text) return 0;
    memcpy(sets_text, data, head);
    sets_text[head] = 0;
    int n = 0;
    for (char *line = sets_text, *next; line && *line && n < 8; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        sets[n++] = line;
    }
    bt_config cfg;
    if (config_load(&cfg, path, (const char *const *)sets, n, 1)) config_free(&cfg);
    free(sets_text);
    return 0;
}
