/* The pod sandbox's process: holds the pod's namespaces and does nothing else.
 * Stand-in for registry.k8s.io/pause:3.10 (Kubernetes' build/pause/linux/pause.c does the
 * same): wait for signals forever, exit on SIGINT/SIGTERM, reap children on SIGCHLD (it is
 * PID 1 when the pod shares its PID namespace). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_exit_signal(int sig) {
    (void)sig;
    _exit(0);
}

static void on_child(int sig) {
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

static void handle(int sig, void (*handler)(int), int flags) {
    struct sigaction action;
    memset(&action, 0, sizeof(action));
    action.sa_handler = handler;
    action.sa_flags = flags;
    if (sigaction(sig, &action, NULL) < 0) {
        perror("pause: sigaction");
        exit(1);
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "-v") == 0) {
        printf("pause.c elasticctr stand-in (registry.k8s.io/pause:3.10)\n");
        return 0;
    }
    if (getpid() != 1) {
        fprintf(stderr, "Warning: pause should be the first process\n");
    }
    handle(SIGINT, on_exit_signal, 0);
    handle(SIGTERM, on_exit_signal, 0);
    handle(SIGCHLD, on_child, SA_NOCLDSTOP);
    for (;;) {
        pause();
    }
    return 42; /* unreachable */
}
