/* Fuzz target for the kubeconfig parser (common/k8s/config.c on common/k8s/yaml.c): any input must
 * either parse into a config or fail with a message, without crashing, leaking or reading out of
 * bounds. Referenced files are read relative to the working directory; only regular files are
 * read, so no input can make the parser block on a device or FIFO.
 *   make fuzz && build/fuzz/fuzz_kubeconfig tests/fuzz/corpus/kubeconfig -max_total_time=60 */
#include "common/k8s/config.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct k8s_config *c = NULL;
    char err[K8S_ERRMSG_MAX];
    err[0] = 'x';
    int rc =
        k8s_config_parse_kubeconfig((const char *)data, size, NULL, NULL, &c, err, sizeof(err));
    if (rc == 0) {
        /* A parsed config always has a server and a namespace. */
        if (!c || !c->server || !c->ns) __builtin_trap();
        k8s_config_free(c);
    } else if (c || strlen(err) == 0) {
        __builtin_trap(); /* failures leave *out alone and always say why */
    }
    return 0;
}
