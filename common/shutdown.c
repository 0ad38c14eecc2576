/* Signal-driven shutdown flag with a self-pipe so that poll() loops wake up. */
#include "common/shutdown.h"

#include "common/err.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <unistd.h>

static volatile sig_atomic_t shutdown_flag;
static int shutdown_pipe[2] = {-1, -1};

static void shutdown_notify(void)
{
    shutdown_flag = 1;
    if (shutdown_pipe[1] >= 0) {
        int saved = errno;
        ssize_t r = write(shutdown_pipe[1], "x", 1); /* non-blocking: a full pipe is fine */
        (void)r;
        errno = saved;
    }
}

static void on_signal(int sig)
{
    (void)sig;
    shutdown_notify();
}

int shutdown_install(void)
{
    if (shutdown_pipe[0] < 0 && pipe2(shutdown_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return ERR_IO;
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGTERM, &sa, NULL) || sigaction(SIGINT, &sa, NULL)) return ERR_IO;
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

bool shutdown_requested(void)
{
    return shutdown_flag != 0;
}

void shutdown_request(void)
{
    shutdown_notify();
}

int shutdown_fd(void)
{
    return shutdown_pipe[0];
}

bool shutdown_wait(int ms)
{
    if (shutdown_flag) return true;
    if (shutdown_pipe[0] < 0) {
        usleep((useconds_t)ms * 1000);
    } else {
        struct pollfd p = {.fd = shutdown_pipe[0], .events = POLLIN};
        poll(&p, 1, ms);
    }
    return shutdown_flag != 0;
}
