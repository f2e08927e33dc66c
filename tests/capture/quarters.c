/* Four threads (the main thread and three it starts), each writing then reading its own quarter
 * of one array: thread t first touches quarter t. Prints the array's address and size so that
 * tests/test_capture_threads.py can tell the quarters apart in a captured trace. The threads
 * start sweeping together (a barrier), as OpenMP's do: no thread ends before the last one is
 * created, which the Valgrind path needs to number threads in creation order (docs/capture.md).
 * Usage: quarters [MiB] (default 4). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define THREADS 4

static long *a;
static long n;
static pthread_barrier_t start;

static void *sweep(void *arg) {
    long t = (long)arg, lo = t * n / THREADS, hi = (t + 1) * n / THREADS, sum = 0;
    pthread_barrier_wait(&start);
    for (long i = lo; i < hi; i++) a[i] = i;
    for (long i = lo; i < hi; i++) sum += a[i];
    return (void *)sum;
}

int main(int argc, char **argv) {
    long mib = argc > 1 ? atol(argv[1]) : 4;
    n = mib * (1 << 20) / (long)sizeof(long);
    /* Page-aligned, so that no page holds two quarters; large enough to be mapped fresh, so
     * that no page is touched before the threads run. */
    a = aligned_alloc(4096, n * sizeof(long));
    if (!a) return 1;
    pthread_t th[THREADS];
    pthread_barrier_init(&start, NULL, THREADS);
    for (long t = 1; t < THREADS; t++) pthread_create(&th[t], NULL, sweep, (void *)t);
    long sum = (long)sweep(0);
    for (long t = 1; t < THREADS; t++) {
        void *r;
        pthread_join(th[t], &r);
        sum += (long)r;
    }
    printf("array=%p bytes=%ld threads=%d sum=%ld\n", (void *)a, n * (long)sizeof(long), THREADS, sum);
    return 0;
}
