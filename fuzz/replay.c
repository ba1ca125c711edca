/*
 * replay.c: a main for fuzz targets in ordinary builds. It feeds every file
 * named on the command line (directories are walked one level deep) to
 * LLVMFuzzerTestOneInput, so that each target is compiled in every build and
 * its seed corpus is replayed by `make test` (and under ASan by `make asan`).
 */
#include <dirent.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/base.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int
run_file(const char *path, int *count)
{
    uint8_t *data;
    size_t len;
    di_error err;
    if (di_read_file(path, 64u << 20, &data, &len, &err) != 0) {
        fprintf(stderr, "replay: %s\n", err.msg);
        return 1;
    }
    LLVMFuzzerTestOneInput(data, len);
    di_free(data);
    (*count)++;
    return 0;
}

int
main(int argc, char **argv)
{
    int count = 0, failed = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: cannot stat '%s'\n", argv[i]);
            return 1;
        }
        if (S_ISDIR(st.st_mode)) {
            struct dirent **names;
            int n = scandir(argv[i], &names, NULL, alphasort);
            if (n < 0)
                return 1;
            for (int j = 0; j < n; j++) {
                char path[4096];
                if (names[j]->d_name[0] != '.') {
                    snprintf(path, sizeof path, "%s/%s", argv[i], names[j]->d_name);
                    failed |= run_file(path, &count);
                }
                free(names[j]);
            }
            free(names);
        } else {
            failed |= run_file(argv[i], &count);
        }
    }
    printf("replayed %d inputs\n", count);
    return failed;
}
