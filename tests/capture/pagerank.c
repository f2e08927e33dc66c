/* A memory-bound program of real size for `tiersim capture` speed figures (BENCHMARKS.md, "Capture"):
 * PageRank, pull style, over a random graph in CSR form whose in-edges favour low vertex numbers
 * (target = V * r^2, r uniform), so a few vertices are hot and most are cold, as in a power-law
 * graph. The default, 2,000,000 vertices of 48 in-edges and 4 iterations, holds about 420 MiB
 * (384 MB of edges); its 16 MB of rank contributions fit a large host L3, so its random loads
 * are mostly cache hits natively. 8000000 16 4 (about 700 MiB, 64 MB of them) is memory-bound: its
 * random loads often go to memory. Deterministic: the same arguments give the same graph, the same
 * accesses and the same checksum line.
 *   pagerank [VERTICES] [DEGREE] [ITERATIONS]                                                   */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int main(int argc, char **argv) {
    uint32_t v = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 10) : 2000000;
    uint32_t deg = argc > 2 ? (uint32_t)strtoul(argv[2], NULL, 10) : 48;
    int iters = argc > 3 ? atoi(argv[3]) : 4;
    if (v < 2 || deg < 1 || iters < 1) {
        fprintf(stderr, "usage: pagerank [VERTICES>=2] [DEGREE>=1] [ITERATIONS>=1]\n");
        return 2;
    }
    uint64_t edges = (uint64_t)v * deg, seed = 42;
    /* In-degrees vary from 1 to 2*deg-1 around deg; row i's in-edges are cols[row[i]..row[i+1]). */
    uint64_t *row = malloc((v + 1) * sizeof *row);
    uint32_t *cols = malloc(2 * edges * sizeof *cols);
    uint32_t *outdeg = calloc(v, sizeof *outdeg);
    double *rank = malloc(v * sizeof *rank), *contrib = malloc(v * sizeof *contrib);
    if (!row || !cols || !outdeg || !rank || !contrib) {
        fprintf(stderr, "pagerank: out of memory\n");
        return 1;
    }
    uint64_t e = 0;
    for (uint32_t i = 0; i < v; i++) {
        row[i] = e;
        uint32_t d = 1 + (uint32_t)(splitmix(&seed) % (2 * deg - 1));
        for (uint32_t k = 0; k < d; k++) {
            double r = (double)(splitmix(&seed) >> 11) * 0x1.0p-53;
            uint32_t u = (uint32_t)(r * r * v);
            cols[e++] = u;
            outdeg[u]++;
        }
    }
    row[v] = e;
    for (uint32_t i = 0; i < v; i++) rank[i] = 1.0 / v;
    for (int it = 0; it < iters; it++) {
        for (uint32_t u = 0; u < v; u++) contrib[u] = outdeg[u] ? rank[u] / outdeg[u] : 0.0;
        for (uint32_t i = 0; i < v; i++) {
            double s = 0;
            for (uint64_t k = row[i]; k < row[i + 1]; k++) s += contrib[cols[k]];
            rank[i] = 0.15 / v + 0.85 * s;
        }
    }
    double sum = 0, top = 0;
    for (uint32_t i = 0; i < v; i++) {
        sum += rank[i];
        if (rank[i] > top) top = rank[i];
    }
    printf("vertices=%u edges=%llu iterations=%d rank_sum=%.6f rank_max=%.9f\n", v, (unsigned long long)e, iters, sum,
           top);
    return 0;
}
