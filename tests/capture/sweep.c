/* A memory-bound single-threaded program: passes of read-modify-write over an array larger
 * than the LLC, then random reads. For the LLC-miss comparison of the two capture paths
 * (tests/test_capture_threads.py) and their slowdown (bench.sh). Usage: sweep [MiB] [passes]
 * [ADDRESS]: with an address, the array is mapped there, so that its place does not follow
 * the tracing runtime's own allocations. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

int main(int argc, char **argv) {
    long mib = argc > 1 ? atol(argv[1]) : 8, passes = argc > 2 ? atol(argv[2]) : 2;
    long n = mib * (1 << 20) / (long)sizeof(long);
    long *a;
    if (argc > 3) {
        a = mmap((void *)strtoul(argv[3], 0, 0), n * sizeof(long), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (a == MAP_FAILED) return 1;
    } else {
        a = malloc(n * sizeof(long));
        if (!a) return 1;
    }
    for (long i = 0; i < n; i++) a[i] = i;
    for (long p = 0; p < passes; p++)
        for (long i = 0; i < n; i++) a[i] = a[i] * 3 + 1;
    unsigned long x = 88172645463325252ul, sum = 0;
    for (long k = 0; k < n / 4; k++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        sum += a[x % n];
    }
    printf("array=%p bytes=%ld sum=%lu\n", (void *)a, n * (long)sizeof(long), sum);
    return 0;
}
