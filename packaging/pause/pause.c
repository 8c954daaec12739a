/*
 * pause: the sandbox process of a pod. It holds the pod's namespaces open and does nothing
 * else: it sleeps until SIGINT or SIGTERM (then exits 0) and, as PID 1 of a pod that shares
 * its process namespace, reaps orphaned children. Built with `gcc -static` into the pause
 * image by the release builder (`make images`, packaging/cdriver_build).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t stop_requested;

static void on_stop(int sig) {
    (void)sig;
    stop_requested = 1;
}

static void on_child(int sig) {
    (void)sig;
    int saved = errno;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    errno = saved;
}

static int handle(int sig, void (*fn)(int)) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = fn;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = sig == SIGCHLD ? SA_NOCLDSTOP | SA_RESTART : 0;
    return sigaction(sig, &sa, NULL);
}

int main(int argc, char **argv) {
    if (argc > 1 && (strcmp(argv[1], "-v") == 0 || strcmp(argv[1], "--version") == 0)) {
        puts("pause (cdriver) " PAUSE_VERSION);
        return 0;
    }
    if (getpid() != 1) {
        fputs("pause: warning: not running as PID 1\n", stderr);
    }
    if (handle(SIGINT, on_stop) || handle(SIGTERM, on_stop) || handle(SIGCHLD, on_child)) {
        perror("pause: sigaction");
        return 1;
    }
    while (!stop_requested) {
        pause();
    }
    return 0;
}
