/* Streaming: a STREAM-like triad a = b + 3 c over three arrays, split between threads, repeated.
 * Every page is equally hot and bandwidth-bound; the arrays together are larger than the fast node.
 * Integers, not doubles: TCG runs floating point far slower than the calibration's integer code.
 * Args: MiB_per_array iterations threads. */
#include <pthread.h>

#include "common.h"

static uint64_t *a, *b, *c;
static size_t n;
static long iters;
static int nthreads;
static pthread_barrier_t bar;

static void *worker(void *arg) {
    long t = (long)arg;
    size_t lo = n * t / nthreads, hi = n * (t + 1) / nthreads;
    for (size_t i = lo; i < hi; i++) b[i] = i, c[i] = 1;
    pthread_barrier_wait(&bar);
    for (size_t i = lo; i < hi; i++) a[i] = 0;
    pthread_barrier_wait(&bar);
    for (long it = 0; it < iters; it++) {
        for (size_t i = lo; i < hi; i++) a[i] = b[i] + 3 * c[i];
        pthread_barrier_wait(&bar);
    }
    return NULL;
}

int main(int argc, char **argv) {
    size_t bytes = mib_arg(argc, argv, 1, 96);
    iters = long_arg(argc, argv, 2, 4);
    nthreads = (int)long_arg(argc, argv, 3, 2);
    n = bytes / sizeof(uint64_t);
    b = alloc_pages(bytes), c = alloc_pages(bytes), a = alloc_pages(bytes);
    pthread_barrier_init(&bar, NULL, nthreads);
    pthread_t th[64];
    for (long t = 1; t < nthreads; t++) pthread_create(&th[t], NULL, worker, (void *)t);
    worker((void *)0);
    for (long t = 1; t < nthreads; t++) pthread_join(th[t], NULL);
    uint64_t s = 0;
    for (size_t i = 0; i < n; i += 4096) s += a[i];
    finish("stream", s);
    return 0;
}
