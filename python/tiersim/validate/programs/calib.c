/* Guest-speed calibration: sweeps a buffer, then reads it at random, with a little arithmetic per
 * access, a fixed amount of work timed in the guest and replayed in tiersim. Args: MiB passes
 * random_reads_thousands. First it writes one byte to each page of a fresh 16 MiB region and
 * times that alone: the guest kernel's cost of a page fault (entry, allocation, zeroing), which
 * TCG inflates far more than user code; in the guest it prints it as "@ calib_touch NS PAGES".
 * The sweep's passes (a new line at each access, the buffer resident) and the random reads are
 * timed too, as "@ calib_sweep NS LINES" and "@ calib_random NS READS": under TCG a read of a page
 * missing from QEMU's software TLB costs far more than the next line of the page it just read,
 * so no one speed holds for every program (docs/validate.md, "Time"). In the guest it also times
 * page migration, "@ calib_migrate NS PAGES" (below). */
#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

#define TOUCH_BYTES (16u << 20)
#define MIGRATE_PAGES 2048
#define MPOL_MF_MOVE (1 << 1)

static long long mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static volatile int spin_stop;

/* Another thread of this mm, running on the other CPU while pages migrate. */
static void *spinner(void *arg) {
    (void)arg;
    while (!spin_stop) __asm__ volatile("" ::: "memory");
    return NULL;
}

/* The guest kernel's cost of migrating a page, as the NUMA fault path's promotions pay it:
 * move_pages(2) of resident pages to node 1 and back (migrate_pages: isolate, unmap with its TLB
 * flush, copy, remap), with a second thread of the mm running on the other CPU, so that each
 * unmap flushes that CPU's TLB by IPI, as it does for the program's two threads. Printed only if
 * every page moved both ways. */
static long long migrate(volatile uint8_t *a, long long t0) {
    static void *pages[MIGRATE_PAGES];
    static int nodes[MIGRATE_PAGES], status[MIGRATE_PAGES];
    pthread_t th;
    if (pthread_create(&th, NULL, spinner, NULL) != 0) return t0;
    long ok = 1;
    t0 = mono_ns();
    for (int dir = 1; dir >= 0; dir--) {
        for (int i = 0; i < MIGRATE_PAGES; i++) pages[i] = (void *)(a + (size_t)i * 4096), nodes[i] = dir;
        ok &= syscall(SYS_move_pages, 0, MIGRATE_PAGES, pages, nodes, status, MPOL_MF_MOVE) == 0;
        for (int i = 0; i < MIGRATE_PAGES; i++) ok &= status[i] == dir;
    }
    long long now = mono_ns();
    spin_stop = 1;
    pthread_join(th, NULL);
    if (ok) printf("@ calib_migrate %lld %d\n", now - t0, 2 * MIGRATE_PAGES);
    return mono_ns();
}

/* The end of a timed phase begun at t0: in the guest, "@ calib_NAME NS COUNT". Returns the time
 * the next phase begins at. */
static long long phase(const char *name, long long t0, unsigned long long count) {
    long long now = mono_ns();
    if (getenv("TIERSIM_GUEST")) printf("@ calib_%s %lld %llu\n", name, now - t0, count);
    return mono_ns();
}

int main(int argc, char **argv) {
    size_t bytes = mib_arg(argc, argv, 1, 32);
    long passes = long_arg(argc, argv, 2, 4), reads = long_arg(argc, argv, 3, 4000) * 1000L;
    size_t n = bytes / 8;
    volatile uint8_t *touch = alloc_pages(TOUCH_BYTES);
    long long t0 = mono_ns();
    for (size_t i = 0; i < TOUCH_BYTES; i += 4096) touch[i] = 1;
    phase("touch", t0, TOUCH_BYTES / 4096);
    uint64_t *a = alloc_pages(bytes), seed = 1, sum = 0;
    for (size_t i = 0; i < n; i++) a[i] = i;
    t0 = mono_ns();
    for (long p = 0; p < passes; p++)
        for (size_t i = 0; i < n; i += 8) a[i] += a[i] ^ p;
    t0 = phase("sweep", t0, (unsigned long long)passes * (n / 8));
    /* mprotect of the resident buffer and back: change_protection over its PTEs and a TLB flush,
     * the walk the NUMA scanner's change_prot_numa makes, timed as "@ calib_mprotect NS PTES". */
    mprotect((void *)a, bytes, PROT_READ);
    mprotect((void *)a, bytes, PROT_READ | PROT_WRITE);
    t0 = phase("mprotect", t0, 2 * (bytes / 4096));
    /* Only in the guest: on the host the capture would trace the spinning thread. */
    if (getenv("TIERSIM_GUEST")) t0 = migrate((volatile uint8_t *)a, t0);
    for (long r = 0; r < reads; r++) sum += a[splitmix(&seed) % n];
    phase("random", t0, (unsigned long long)reads);
    finish("calib", sum);
    return 0;
}
