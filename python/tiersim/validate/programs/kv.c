/* Zipfian key-value store: a table of 256-byte items loaded in key order, each key into its own
 * slot scattered over the table as a hash table's, then threads doing gets (read the item's first
 * line) and 10 % updates (write it) with zipfian key popularity (YCSB's generator, theta 0.99), so
 * hot items share pages with cold ones. The load writes the slots in that scattered order, as the
 * operations read them: under QEMU's TCG a store to the next line of a page costs a few ns and a
 * store to another page a walk of its software TLB, so a load in slot order ran many times faster
 * per access in the guest than the operations, where tiersim's CPU pays a cache miss for both
 * (docs/validate.md, "kv's two phases"). The generator's inverse CDF is tabulated once at 4096 points and
 * sampled uniformly between them, so the operations use integers only: under QEMU's TCG,
 * floating point runs many times slower than integer code, which would make this program's guest
 * speed differ from the calibration's (docs/validate.md). Args: MiB_of_items operations_thousands
 * threads. */
#include <pthread.h>

#include "common.h"

#define ITEM 256
#define THETA 0.99

struct item {
    uint64_t key, version, value[ITEM / 8 - 2];
};

static struct item *table;
static uint64_t nitems, mask, ops;
static int nthreads;
static double zetan, alpha, eta;

#define ZIPF_POINTS 4096
static uint64_t zipf_rank[ZIPF_POINTS + 1];

/* YCSB ZipfianGenerator (Gray et al., "Quickly generating billion-record synthetic databases"):
 * the rank drawn for a uniform u. */
static uint64_t zipf_at(double u) {
    double uz = u * zetan;
    if (uz < 1.0) return 0;
    if (uz < 1.0 + __builtin_pow(0.5, THETA)) return 1;
    uint64_t r = (uint64_t)((double)nitems * __builtin_pow(eta * u - eta + 1.0, alpha));
    return r < nitems ? r : nitems - 1;
}

static uint64_t zipf(uint64_t *s) {
    uint64_t x = splitmix(s), i = x >> 52, lo = zipf_rank[i], hi = zipf_rank[i + 1];
    return lo + (x & 0xfffffffffULL) % (hi - lo + 1);
}

/* Rank to slot: an odd multiplier is a bijection modulo a power of two. */
static uint64_t slot(uint64_t rank) { return (rank * 0x9e3779b97f4a7c15ULL) & mask; }

static void *worker(void *arg) {
    uint64_t seed = 1000 + (uint64_t)arg, sum = 0;
    for (uint64_t i = 0; i < ops / nthreads; i++) {
        struct item *it = &table[slot(zipf(&seed))];
        if (splitmix(&seed) % 10 == 0) it->version++, it->value[0] = i;
        else sum += it->key + it->value[0];
    }
    return (void *)(uintptr_t)sum;
}

int main(int argc, char **argv) {
    size_t bytes = mib_arg(argc, argv, 1, 64);
    ops = (uint64_t)long_arg(argc, argv, 2, 4000) * 1000ULL;
    nthreads = (int)long_arg(argc, argv, 3, 2);
    nitems = 1;
    while (nitems * 2 * ITEM <= bytes) nitems *= 2;
    mask = nitems - 1;
    table = alloc_pages(nitems * ITEM);
    for (uint64_t r = 0; r < nitems; r++) {
        struct item *it = &table[slot(r)];
        it->key = r, it->version = 0;
        for (int w = 0; w < ITEM / 8 - 2; w++) it->value[w] = r + w;
    }
    /* zeta(n): the first terms summed, the rest by the integral of x^-theta (Euler-Maclaurin's
     * first term), so that start-up costs a thousand pow calls rather than a million. */
    uint64_t head = nitems < 1000 ? nitems : 1000;
    for (uint64_t i = 1; i <= head; i++) zetan += 1.0 / __builtin_pow((double)i, THETA);
    if (nitems > head)
        zetan += (__builtin_pow((double)nitems + 0.5, 1.0 - THETA) - __builtin_pow((double)head + 0.5, 1.0 - THETA)) /
                 (1.0 - THETA);
    double zeta2 = 1.0 + 1.0 / __builtin_pow(2.0, THETA);
    alpha = 1.0 / (1.0 - THETA);
    eta = (1.0 - __builtin_pow(2.0 / (double)nitems, 1.0 - THETA)) / (1.0 - zeta2 / zetan);
    for (int i = 0; i <= ZIPF_POINTS; i++) zipf_rank[i] = zipf_at((double)i / ZIPF_POINTS);
    pthread_t th[64];
    uint64_t total = 0;
    for (long t = 1; t < nthreads; t++) pthread_create(&th[t], NULL, worker, (void *)t);
    total += (uint64_t)(uintptr_t)worker((void *)0);
    for (long t = 1; t < nthreads; t++) {
        void *r;
        pthread_join(th[t], &r);
        total += (uint64_t)(uintptr_t)r;
    }
    finish("kv", total);
    return 0;
}
