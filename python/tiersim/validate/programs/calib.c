/* Guest-speed calibration: sweeps a buffer, then reads it at random, with a little arithmetic per
 * access, a fixed amount of work timed in the guest and replayed in tiersim. Args: MiB passes
 * random_reads_thousands. */
#include "common.h"

int main(int argc, char **argv) {
    size_t bytes = mib_arg(argc, argv, 1, 32);
    long passes = long_arg(argc, argv, 2, 4), reads = long_arg(argc, argv, 3, 4000) * 1000L;
    size_t n = bytes / 8;
    uint64_t *a = alloc_pages(bytes), seed = 1, sum = 0;
    for (size_t i = 0; i < n; i++) a[i] = i;
    for (long p = 0; p < passes; p++)
        for (size_t i = 0; i < n; i += 8) a[i] += a[i] ^ p;
    for (long r = 0; r < reads; r++) sum += a[splitmix(&seed) % n];
    finish("calib", sum);
    return 0;
}
