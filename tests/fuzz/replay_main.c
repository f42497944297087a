/* Runs a fuzz target over stored inputs: each argument is a file or a
 * directory of files (a corpus). Exit 0 when every input ran; a crash or a
 * sanitizer report ends the process as it would under libFuzzer. */
#define _XOPEN_SOURCE 700
#include "fuzz_util.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static long run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: %s: cannot open\n", path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) exit(2);
    fclose(f);
    LLVMFuzzerTestOneInput(buf, (size_t)n);
    free(buf);
    return 1;
}

int main(int argc, char **argv) {
    long n = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) continue; /* an empty corpus folder may be absent */
        if (!S_ISDIR(st.st_mode)) {
            n += run_file(argv[i]);
            continue;
        }
        DIR *d = opendir(argv[i]);
        for (struct dirent *e; d && (e = readdir(d));) {
            if (e->d_name[0] == '.') continue;
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
            n += run_file(path);
        }
        if (d) closedir(d);
    }
    printf("replay: %ld inputs ran\n", n);
    return 0;
}
