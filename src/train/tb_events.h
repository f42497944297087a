/* TensorBoard event files: the numbers of every metrics.jsonl record as
 * scalar summaries, written by rank 0 next to metrics.jsonl when
 * metrics.tensorboard is true (docs/CONFIG.md, "metrics").
 *
 * A file is OUTPUT_DIR/events.out.tfevents.<unix seconds>.<host>.<pid>.bertrain:
 * TFRecord framing (little-endian uint64 length, masked CRC32C of the
 * length, the Event bytes, masked CRC32C of them), the first record the
 * version header "brain.Event:2". Each run segment (a fresh start or a
 * resume) writes a new file; a resume first cuts every earlier file of this
 * kind back to the events of the resumed step and before, so that each step
 * is in the directory once. Files not named like this are never touched. */
#ifndef BT_TB_EVENTS_H
#define BT_TB_EVENTS_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One open event file and what failed writing it. */
typedef struct tb_writer tb_writer;

/* Rank 0, before the first record: prepare output_dir's event files for a
 * run that continues after `resume_step` (< 0: a fresh run, which removes
 * the earlier files bertrain wrote there) and open a new one. NULL with a
 * one-line reason in err when a file cannot be read, cut or made. */
tb_writer *tb_open(const char *output_dir, long resume_step, char *err, size_t errlen);

/* One metrics.jsonl record (an object with "step") as one Event: each
 * number at the top level a scalar (tags in docs/CONFIG.md), the "ranks"
 * list's numbers as rank<i>/<key>; strings and other lists are left out. A
 * record with no numbers writes nothing. A failed write is counted
 * (tb_failed). */
void tb_write_record(tb_writer *w, const cJSON *rec);

/* The first write error since the last call (0: none), the records lost in
 * all and the file's path; clears the error. */
int tb_failed(tb_writer *w, long *lost, const char **path);

/* TFRecord's masked CRC32C of n bytes: the CRC32C (Castagnoli, as iSCSI),
 * rotated right by 15 bits, plus 0xa282ead8. Public for
 * tests/c/test_tb_events.c. */
uint32_t tb_masked_crc32c(const void *p, size_t n);

/* Close the file (again: nothing); false when the last records did not
 * reach it (a close error is kept for tb_failed). NULL: nothing. */
bool tb_close(tb_writer *w);

/* Close and free w (NULL: nothing). */
void tb_free(tb_writer *w);

#endif
