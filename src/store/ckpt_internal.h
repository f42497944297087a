/* What ckpt.c shares with ckpt_writer.c, and nothing else includes. */
#ifndef BERTRAIN_CKPT_INTERNAL_H
#define BERTRAIN_CKPT_INTERNAL_H

#include "ckpt.h"

#include <stdbool.h>
#include <stddef.h>

/* fsync a file or directory by path; false where it cannot be opened or synced. */
bool ckpt_fsync_path(const char *path);
/* path written with n bytes of data (not atomically); false with the reason. */
bool ckpt_write_bytes(const char *path, const void *data, size_t n, char *err, size_t errlen);
/* ckpt_remove, or a warning on stderr naming what keeps the directory
 * (why: what would have removed it). */
void ckpt_remove_or_warn(const char *dir, const char *why);
/* Tell points (if any) that the write of checkpoint step reached point. */
void ckpt_reached(const ckpt_points *points, const char *point, long step);

#endif
