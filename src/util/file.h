/* Whole-file reads for configs, checkpoints and imports. */
#ifndef BT_UTIL_FILE_H
#define BT_UTIL_FILE_H

#include <stddef.h>

/* The whole file at path, NUL-terminated (malloc'd; *len without the NUL),
 * read to its end whether or not it can seek (a pipe, /dev/stdin); NULL when
 * it cannot be opened or read (a directory included). */
char *file_read_all(const char *path, size_t *len);

#endif
