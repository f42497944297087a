/* Loading the CUDA backend, bertrain-cuda.so, on first use (see
 * backends/cuda/cuda_backend.h for why it is a plugin), or the test suite's
 * emulated device, bertrain-cuda-emu.so. Built without CUDA too: the
 * emulated device needs no CUDA toolkit. */
#include "cuda/cuda_backend.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef BT_PKGLIBDIR
#define BT_PKGLIBDIR "/usr/local/lib/bertrain"
#endif
#ifndef BT_BUILDDIR
#define BT_BUILDDIR "."
#endif

/* The directory of the running program, into dir ("" when unknown). */
static void program_dir(char *dir, size_t n) {
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    dir[0] = 0;
    if (len <= 0) return;
    exe[len] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    snprintf(dir, n, "%s", exe);
}

/* dlopen the plugin at path and check its table; NULL with why in err. */
static const bt_cuda_plugin *open_plugin(const char *path, char *err, size_t errlen) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(err, errlen, "cannot load the CUDA backend: %s (are the CUDA runtime and "
                 "cuBLAS installed, and on LD_LIBRARY_PATH?)", dlerror());
        return NULL;
    }
    const bt_cuda_plugin *p = (const bt_cuda_plugin *)dlsym(h, BT_CUDA_PLUGIN_SYMBOL);
    if (!p || p->abi != BT_CUDA_PLUGIN_ABI) {
        snprintf(err, errlen, "%s: %s; rebuild bertrain and its CUDA backend together", path,
                 p ? "built from another version of bertrain" : "not a bertrain CUDA backend");
        dlclose(h);
        return NULL;
    }
    return p; /* stays loaded for the life of the process */
}

const bt_cuda_plugin *bt_cuda_plugin_load(bool emu, char *err, size_t errlen) {
    static const bt_cuda_plugin *loaded[2]; /* the real plugin, the emulated one */
    if (loaded[emu]) return loaded[emu];
    const char *file = emu ? BT_CUDA_EMU_PLUGIN_FILE : BT_CUDA_PLUGIN_FILE;
    const char *env = getenv(emu ? "BERTRAIN_CUDA_EMU" : "BERTRAIN_CUDA_PLUGIN");
    if (env && *env) return loaded[emu] = open_plugin(env, err, errlen);
    char here[PATH_MAX], cands[3][PATH_MAX + 64];
    program_dir(here, sizeof here);
    if (emu) { /* the build tree's, for a program in the build tree or its tests/ */
        snprintf(cands[0], sizeof cands[0], "%s/tests/cuda_emu/%s", here, file);
        snprintf(cands[1], sizeof cands[1], "%s/cuda_emu/%s", here, file);
        snprintf(cands[2], sizeof cands[2], "%s/tests/cuda_emu/%s", BT_BUILDDIR, file);
    } else {
        snprintf(cands[0], sizeof cands[0], "%s/%s", here, file);
        snprintf(cands[1], sizeof cands[1], "%s/%s", BT_PKGLIBDIR, file);
        snprintf(cands[2], sizeof cands[2], "%s/%s", BT_BUILDDIR, file);
    }
    for (int i = 0; i < 3; i++)
        if (access(cands[i], R_OK) == 0) return loaded[emu] = open_plugin(cands[i], err, errlen);
    if (emu)
        snprintf(err, errlen, "cuda-emu is the test suite's emulated CUDA device: "
                 BT_CUDA_EMU_PLUGIN_FILE " is not built (make check builds it in "
                 "tests/cuda_emu/; BERTRAIN_CUDA_EMU names another)");
    else
        snprintf(err, errlen, "the CUDA backend " BT_CUDA_PLUGIN_FILE " is missing (looked beside "
                 "the program, in " BT_PKGLIBDIR " and in " BT_BUILDDIR "; BERTRAIN_CUDA_PLUGIN "
                 "names another)");
    return NULL;
}
