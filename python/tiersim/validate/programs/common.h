/* Shared by the validation programs (docs/validate.md): a seeded generator, page-aligned
 * allocation, and the end-of-run stop that lets the guest's sampler read the program's pages per
 * node before it exits. Each program is built statically for the guest, and the host captures
 * that binary under tiersim's Valgrind tool (`tiersim capture`). */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void *alloc_pages(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 4096, bytes)) {
        fprintf(stderr, "out of memory allocating %zu bytes\n", bytes);
        exit(1);
    }
    return p;
}

static size_t mib_arg(int argc, char **argv, int i, size_t dflt) {
    return (argc > i ? strtoull(argv[i], NULL, 10) : dflt) << 20;
}

static long long_arg(int argc, char **argv, int i, long dflt) {
    return argc > i ? strtol(argv[i], NULL, 10) : dflt;
}

/* Stored so that the compiler keeps the computation; printed only in the guest's log. */
static volatile uint64_t result_sink;

/* In the guest the sampler waits for this stop to read /proc/PID/numa_maps at the program's end. */
static void finish(const char *name, uint64_t result) {
    result_sink = result;
    if (getenv("TIERSIM_GUEST")) {
        printf("%s %llu\n", name, (unsigned long long)result);
        fflush(stdout);
        raise(SIGSTOP);
    }
}
