/* LD_PRELOAD shim for the Valgrind capture path: wraps pthread_create so that each new thread,
 * as it starts, announces its creation-order number (the main thread is 0) in Valgrind's log
 * through a client request, `**PID** tiersim-thread N`. Valgrind's scheduler trace says only
 * when a thread starts, not when it was created; the announcement, made while the new thread
 * runs, ties its Valgrind id to its number exactly (crates/tiersim-trace/src/capture/mod.rs).
 * Outside Valgrind the client requests do nothing. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <valgrind/valgrind.h>

struct start {
    void *(*fn)(void *);
    void *arg;
    unsigned long index;
};

static atomic_ulong next_index = 1;

__attribute__((constructor)) static void announce_main(void) {
    VALGRIND_PRINTF("tiersim-thread 0\n");
}

static void *trampoline(void *p) {
    struct start s = *(struct start *)p;
    free(p);
    VALGRIND_PRINTF("tiersim-thread %lu\n", s.index);
    return s.fn(s.arg);
}

int pthread_create(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *), void *arg) {
    static int (*real)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
    if (!real) real = (int (*)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *))dlsym(RTLD_NEXT, "pthread_create");
    if (!real) return EAGAIN;
    struct start *s = malloc(sizeof *s);
    if (!s) return EAGAIN;
    s->fn = fn;
    s->arg = arg;
    s->index = atomic_fetch_add(&next_index, 1);
    int r = real(th, attr, trampoline, s);
    if (r) free(s);
    return r;
}
