/* Threads that end while others are still being created: the main thread (0) creates threads
 * 1..N-1 in turn; each writes then reads its own slice of a page-aligned array. Odd threads are
 * joined before the next one is created (they end between two creations, freeing their Valgrind
 * id), even ones are left running and joined at the end (they overlap the next creations). No
 * barrier: this is the pattern that swapped two threads' numbers when the Valgrind path guessed
 * creation order from start order (docs/capture.md). Prints the array's address, size and
 * thread count. Usage: staggered [THREADS] [KiB per thread] (default 6, 256). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static long *a;
static long per;

static void *sweep(void *arg) {
    long t = (long)arg, sum = 0;
    for (long i = t * per; i < (t + 1) * per; i++) a[i] = i;
    for (long i = t * per; i < (t + 1) * per; i++) sum += a[i];
    return (void *)sum;
}

int main(int argc, char **argv) {
    long threads = argc > 1 ? atol(argv[1]) : 6, kib = argc > 2 ? atol(argv[2]) : 256;
    if (threads < 2 || threads > 64 || kib < 4 || kib % 4) return 2;
    per = kib * 1024 / (long)sizeof(long);
    a = aligned_alloc(4096, threads * per * sizeof(long));
    if (!a) return 1;
    pthread_t th[64];
    long sum = (long)sweep(0);
    for (long t = 1; t < threads; t++) {
        pthread_create(&th[t], NULL, sweep, (void *)t);
        if (t % 2) {
            void *r;
            pthread_join(th[t], &r);
            sum += (long)r;
        }
    }
    for (long t = 2; t < threads; t += 2) {
        void *r;
        pthread_join(th[t], &r);
        sum += (long)r;
    }
    printf("array=%p bytes=%ld threads=%ld sum=%ld\n", (void *)a, threads * per * (long)sizeof(long), threads, sum);
    return 0;
}
