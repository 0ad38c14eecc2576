/* The one place that names the backend implementations. CUDA plugs in here behind CINFER_CUDA
 * (set by `make CUDA=1`); everything else reaches a backend through backend_create and its ops table. */
#include "engine/backend/backend.h"

#include "common/err.h"
#include "engine/backend/cpu/cpu_backend.h"

#include <string.h>

#ifdef CINFER_CUDA
/* Provided by engine/backend/cuda/ when built with CUDA=1 (its header includes CUDA's). */
int cuda_backend_create(const struct backend_options *opt, struct backend **out);
#endif

int backend_create(const char *name, const struct backend_options *opt, struct backend **out)
{
    static const struct backend_options defaults = {0};
    if (!out) return ERR_INVAL;
    if (!opt) opt = &defaults;
#ifdef CINFER_CUDA
    if (name == NULL) {
        if (cuda_backend_create(opt, out) == 0) return 0;
        return cpu_backend_create(opt, out);
    }
    if (strcmp(name, "cuda") == 0) return cuda_backend_create(opt, out);
#else
    if (name != NULL && strcmp(name, "cuda") == 0) return ERR_UNSUPPORTED;
#endif
    if (name == NULL || strcmp(name, "cpu") == 0) return cpu_backend_create(opt, out);
    return ERR_NOT_FOUND;
}
