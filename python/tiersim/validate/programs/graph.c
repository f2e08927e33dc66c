/* Phased, graph-like (graph500's pattern behind AutoTiering's OPM): first fills memory with
 * intermediate data that is never read again, then builds a graph in CSR form with power-law
 * in-degrees and runs PageRank over it with threads. The graph comes after the fill, so first touch
 * puts it on the slow node, and its hot part is the rank arrays and the edges of popular vertices.
 * Ranks are fixed-point integers (TCG runs floating point far slower than the calibration's
 * integer code). Args: MiB_of_fill vertices_thousands degree iterations threads. */
#include <pthread.h>

#include "common.h"

static uint64_t nv, deg;
static uint64_t *offs;
static uint32_t *edges;
static uint64_t *rank, *next;

#define ONE (1ULL << 32)
static long iters;
static int nthreads;
static pthread_barrier_t bar;

static void *worker(void *arg) {
    long t = (long)arg;
    uint64_t lo = nv * t / nthreads, hi = nv * (t + 1) / nthreads;
    for (long it = 0; it < iters; it++) {
        for (uint64_t v = lo; v < hi; v++) {
            uint64_t s = 0;
            for (uint64_t e = offs[v]; e < offs[v + 1]; e++) s += rank[edges[e]];
            next[v] = (ONE * 15 / 100) / nv + s / deg * 85 / 100;
        }
        pthread_barrier_wait(&bar);
        if (t == 0) {
            uint64_t *x = rank;
            rank = next, next = x;
        }
        pthread_barrier_wait(&bar);
    }
    return NULL;
}

int main(int argc, char **argv) {
    size_t fill = mib_arg(argc, argv, 1, 64);
    nv = (uint64_t)long_arg(argc, argv, 2, 256) * 1000;
    deg = (uint64_t)long_arg(argc, argv, 3, 8);
    iters = long_arg(argc, argv, 4, 4);
    nthreads = (int)long_arg(argc, argv, 5, 2);
    uint64_t *tmp = alloc_pages(fill), seed = 7;
    for (size_t i = 0; i < fill / 8; i++) tmp[i] = i;
    offs = alloc_pages((nv + 1) * 8);
    edges = alloc_pages(nv * deg * 4);
    rank = alloc_pages(nv * 8);
    next = alloc_pages(nv * 8);
    for (uint64_t v = 0; v <= nv; v++) offs[v] = v * deg;
    /* Sources of in-edges skewed to low ids: x^2 of a uniform x in [0, 1). */
    for (uint64_t e = 0; e < nv * deg; e++) {
        uint64_t x = splitmix(&seed) >> 32;
        edges[e] = (uint32_t)((((x * x) >> 32) * nv) >> 32);
    }
    for (uint64_t v = 0; v < nv; v++) rank[v] = ONE / nv, next[v] = 0;
    pthread_barrier_init(&bar, NULL, nthreads);
    pthread_t th[64];
    for (long t = 1; t < nthreads; t++) pthread_create(&th[t], NULL, worker, (void *)t);
    worker((void *)0);
    for (long t = 1; t < nthreads; t++) pthread_join(th[t], NULL);
    finish("graph", rank[0] + tmp[fill / 16]);
    return 0;
}
