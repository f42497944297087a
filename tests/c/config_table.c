/* The config's key table as JSON lines, for tests/config-doc.sh, which checks
 * docs/CONFIG.md against it: one line a key (objects left out) with its path,
 * kind, numeric range, choices and the value config_defaults gives it. */
#include "config/config.h"
#include "config/config_keys.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The kind as the checker names it. */
static const char *kind_name(key_kind kind) {
    switch (kind) {
    case K_OBJECT: return "object";
    case K_INT: return "int";
    case K_LONG: return "int";
    case K_SEED: return "seed";
    case K_FLOAT: return "float";
    case K_DOUBLE: return "float";
    case K_BOOL: return "bool";
    case K_STRING: return "string";
    case K_OPT_STRING: return "string_or_null";
    case K_BETAS: return "betas";
    case K_CHOICE: return "choice";
    case K_SHARES: return "shares";
    case K_DEVICES: return "devices";
    case K_MASK_TEXTS: return "texts";
    }
    return "?";
}

/* The value at dotted path in obj, or NULL. */
static const cJSON *at_path(const cJSON *obj, const char *path) {
    char part[128];
    while (obj) {
        const char *dot = strchr(path, '.');
        if (!dot) return cJSON_GetObjectItemCaseSensitive(obj, path);
        snprintf(part, sizeof part, "%.*s", (int)(dot - path), path);
        obj = cJSON_GetObjectItemCaseSensitive(obj, part);
        path = dot + 1;
    }
    return NULL;
}

int main(void) {
    bt_config cfg;
    memset(&cfg, 0, sizeof cfg);
    config_defaults(&cfg);
    cJSON *defaults = config_to_cjson(&cfg);
    if (!defaults) return 1;
    for (size_t i = 0; i < CONFIG_N_KEYS; i++) {
        const key_spec *k = &CONFIG_KEYS[i];
        if (k->kind == K_OBJECT) continue;
        cJSON *line = cJSON_CreateObject();
        cJSON_AddStringToObject(line, "path", k->path);
        cJSON_AddStringToObject(line, "kind", kind_name(k->kind));
        if (k->min != 0 || k->max != 0) {
            cJSON_AddNumberToObject(line, "min", k->min);
            cJSON_AddNumberToObject(line, "max", k->max);
        }
        if (k->choices) cJSON_AddStringToObject(line, "choices", k->choices);
        const cJSON *v = at_path(defaults, k->path);
        cJSON_AddItemToObject(line, "default", v ? cJSON_Duplicate(v, true) : cJSON_CreateNull());
        char *text = cJSON_PrintUnformatted(line);
        if (!text) return 1;
        puts(text);
        free(text);
        cJSON_Delete(line);
    }
    cJSON_Delete(defaults);
    return 0;
}
