/* Output paths: every command that writes makes the directories it needs (as
 * mkdir -p does) and checks, before any work, that it can write there, so a
 * bad path is one line naming it instead of a failure after minutes of work. */
#ifndef BT_PATHS_H
#define BT_PATHS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* Make directory `dir` and its missing parents, then check that it is a
 * directory this process can write into. false with "DIR: problem" in err
 * (a component is a file, permission denied, ...). */
bool paths_prepare_dir(const char *dir, char *err, size_t errlen);

/* For an output directory that is written under a temporary name and renamed
 * into place (a checkpoint): make its parent directories and check that they
 * are writable and that `dir`, if it exists, is a directory. false with
 * "PATH: problem" in err. */
bool paths_prepare_parent(const char *dir, char *err, size_t errlen);

/* For an output file: make its parent directories and check that the file can
 * be created or replaced there (the path is not a directory, the directory is
 * writable). false with "PATH: problem" in err. */
bool paths_prepare_file(const char *path, char *err, size_t errlen);

/* Open an input text file for reading: NULL with "PATH: cannot open: why"
 * or "PATH: is a directory, not a text file" in err. */
FILE *paths_open_input(const char *path, char *err, size_t errlen);

/* An output directory of its own: not "/", a system directory (/etc, /usr,
 * /tmp itself, ...) or the home directory itself, where a run's files would
 * mix with everything else (symbolic links followed). false with "DIR is
 * ...; give ... a directory of its own" in err; `what` names the output
 * ("output_dir", "export's OUT_DIR"). */
bool paths_check_own_dir(const char *dir, const char *what, char *err, size_t errlen);

/* Whether path names an existing directory. */
bool paths_is_dir(const char *path);

#endif
