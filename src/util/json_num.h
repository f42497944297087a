/* Numbers as they go into JSON files people read (state.json, config.json). */
#ifndef BT_UTIL_JSON_NUM_H
#define BT_UTIL_JSON_NUM_H

/* The shortest decimal that reads back as the same float (0.001, not
 * 0.0010000000474974513), as a double for cJSON, so logged and stored values
 * look as they were written. */
double json_short_float(float f);

#endif
