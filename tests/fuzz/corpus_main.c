/* Replays every file in the given corpus directories through a fuzz target's LLVMFuzzerTestOneInput,
 * without libFuzzer, so `make test` checks the checked-in corpus (and past crashers) on every build,
 * sanitizers included under `make asan`. A crash fails the run; otherwise prints "N passed, 0 failed". */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    size_t cap = 1 << 16, len = 0;
    uint8_t *data = malloc(cap);
    size_t n;
    while (data && (n = fread(data + len, 1, cap - len, f)) > 0) {
        len += n;
        if (len == cap) {
            uint8_t *p = realloc(data, cap *= 2);
            if (!p) {
                free(data);
                data = NULL;
            } else {
                data = p;
            }
        }
    }
    fclose(f);
    if (!data) return -1;
    /* Copy into an exact-size allocation so ASan catches reads past the end. */
    uint8_t *exact = malloc(len ? len : 1);
    if (!exact) {
        free(data);
        return -1;
    }
    memcpy(exact, data, len);
    free(data);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    return 0;
}

int main(int argc, char **argv)
{
    int passed = 0, failed = 0;
    const char *name = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    for (int i = 1; i < argc; i++) {
        DIR *d = opendir(argv[i]);
        if (!d) {
            fprintf(stderr, "%s: cannot open corpus directory %s\n", name, argv[i]);
            failed++;
            continue;
        }
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            char path[4096];
            snprintf(path, sizeof(path), "%s/%s", argv[i], e->d_name);
            if (run_file(path) == 0)
                passed++;
            else {
                fprintf(stderr, "%s: cannot read %s\n", name, path);
                failed++;
            }
        }
        closedir(d);
    }
    printf("%s: %d passed, %d failed\n", name, passed, failed);
    return failed || passed == 0 ? 1 : 0;
}
