/* tiersim's BFS workload: graph500's kernel 1 and 2 in our own code. A Kronecker (R-MAT) edge list
 * of 2^SCALE vertices and EDGEFACTOR * 2^SCALE edges with graph500's initiator (A 0.57, B 0.19,
 * C 0.19) and a random vertex relabelling, then a CSR of both directions of every edge, then a
 * level-synchronous top-down BFS from ROOTS random roots of nonzero degree, each level's frontier
 * split among THREADS threads that claim parents with compare-and-swap (graph500 reference
 * "omp-csr" style). The edge list is kept until the end, as graph500 keeps it for validation.
 * Same arguments give the same graph, roots and levels; the parent chosen for a vertex with
 * several parents on the previous level depends on the threads' interleaving. */
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state;

static uint64_t next(void) {
    /* splitmix64: a stream that any seed, including 0, starts well. */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static double uniform(void) { return (double)(next() >> 11) / 9007199254740992.0; }

static int64_t n_vertices, *offsets, *adj, *parent, *frontier, *next_frontier;
static int64_t frontier_len, next_len;
static unsigned n_threads;

struct part {
    unsigned id;
    int64_t *out;
    int64_t len;
};

static pthread_barrier_t level_start, level_done;
static int finished;

static void expand(struct part *p) {
    int64_t lo = frontier_len * p->id / n_threads, hi = frontier_len * (p->id + 1) / n_threads;
    p->len = 0;
    for (int64_t i = lo; i < hi; i++) {
        int64_t u = frontier[i];
        for (int64_t e = offsets[u]; e < offsets[u + 1]; e++) {
            int64_t v = adj[e], unseen = -1;
            if (__atomic_load_n(&parent[v], __ATOMIC_RELAXED) == -1 &&
                __atomic_compare_exchange_n(&parent[v], &unseen, u, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
                p->out[p->len++] = v;
        }
    }
}

/* Threads 1..THREADS-1 live for the whole run: one barrier starts a level, one ends it (thread 0,
 * the main thread, merges the parts in between), as an OpenMP parallel region would. */
static void *worker(void *arg) {
    for (;;) {
        pthread_barrier_wait(&level_start);
        if (finished)
            return NULL;
        expand(arg);
        pthread_barrier_wait(&level_done);
    }
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fputs("usage: bfs SCALE EDGEFACTOR ROOTS THREADS SEED\n", stderr);
        return 2;
    }
    int scale = atoi(argv[1]), edgefactor = atoi(argv[2]), roots = atoi(argv[3]);
    n_threads = (unsigned)atoi(argv[4]);
    rng_state = strtoull(argv[5], NULL, 10);
    if (scale < 1 || scale > 30 || edgefactor < 1 || roots < 1 || n_threads < 1) {
        fputs("usage: bfs SCALE EDGEFACTOR ROOTS THREADS SEED\n", stderr);
        return 2;
    }
    n_vertices = (int64_t)1 << scale;
    int64_t m = n_vertices * edgefactor;
    const double a = 0.57, b = 0.19, c = 0.19;

    /* Kernel 0: the edge list, then a random permutation of the vertex labels. */
    int64_t *edges = malloc(2 * m * sizeof *edges), *perm = malloc(n_vertices * sizeof *perm);
    for (int64_t i = 0; i < m; i++) {
        int64_t u = 0, v = 0;
        for (int bit = 0; bit < scale; bit++) {
            double r = uniform();
            int ub = r >= a + b, vb = (r >= a && r < a + b) || r >= a + b + c;
            u |= (int64_t)ub << bit;
            v |= (int64_t)vb << bit;
        }
        edges[2 * i] = u;
        edges[2 * i + 1] = v;
    }
    for (int64_t i = 0; i < n_vertices; i++)
        perm[i] = i;
    for (int64_t i = n_vertices - 1; i > 0; i--) {
        int64_t j = (int64_t)(next() % (uint64_t)(i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int64_t i = 0; i < 2 * m; i++)
        edges[i] = perm[edges[i]];

    /* Kernel 1: CSR of both directions of every edge (self loops dropped). */
    offsets = calloc(n_vertices + 1, sizeof *offsets);
    for (int64_t i = 0; i < m; i++)
        if (edges[2 * i] != edges[2 * i + 1]) {
            offsets[edges[2 * i] + 1]++;
            offsets[edges[2 * i + 1] + 1]++;
        }
    for (int64_t i = 0; i < n_vertices; i++)
        offsets[i + 1] += offsets[i];
    adj = malloc(offsets[n_vertices] * sizeof *adj);
    int64_t *fill = malloc(n_vertices * sizeof *fill);
    memcpy(fill, offsets, n_vertices * sizeof *fill);
    for (int64_t i = 0; i < m; i++) {
        int64_t u = edges[2 * i], v = edges[2 * i + 1];
        if (u != v) {
            adj[fill[u]++] = v;
            adj[fill[v]++] = u;
        }
    }
    free(fill);

    /* Kernel 2: BFS from each root. */
    parent = malloc(n_vertices * sizeof *parent);
    frontier = malloc(n_vertices * sizeof *frontier);
    next_frontier = malloc(n_vertices * sizeof *next_frontier);
    struct part parts[n_threads];
    for (unsigned t = 0; t < n_threads; t++)
        parts[t].out = malloc(n_vertices * sizeof(int64_t));
    pthread_t tids[n_threads];
    pthread_barrier_init(&level_start, NULL, n_threads);
    pthread_barrier_init(&level_done, NULL, n_threads);
    for (unsigned t = 0; t < n_threads; t++) {
        parts[t].id = t;
        if (t > 0)
            pthread_create(&tids[t], NULL, worker, &parts[t]);
    }
    int64_t visited_total = 0, levels_total = 0;
    for (int r = 0; r < roots; r++) {
        int64_t root;
        do
            root = (int64_t)(next() % (uint64_t)n_vertices);
        while (offsets[root + 1] == offsets[root]);
        for (int64_t i = 0; i < n_vertices; i++)
            parent[i] = -1;
        parent[root] = root;
        frontier[0] = root;
        frontier_len = 1;
        int64_t visited = 1;
        while (frontier_len > 0) {
            pthread_barrier_wait(&level_start);
            expand(&parts[0]);
            pthread_barrier_wait(&level_done);
            next_len = parts[0].len;
            memcpy(next_frontier, parts[0].out, parts[0].len * sizeof(int64_t));
            for (unsigned t = 1; t < n_threads; t++) {
                memcpy(next_frontier + next_len, parts[t].out, parts[t].len * sizeof(int64_t));
                next_len += parts[t].len;
            }
            int64_t *tmp = frontier;
            frontier = next_frontier;
            next_frontier = tmp;
            frontier_len = next_len;
            visited += next_len;
            levels_total++;
        }
        visited_total += visited;
    }
    finished = 1;
    pthread_barrier_wait(&level_start);
    for (unsigned t = 1; t < n_threads; t++)
        pthread_join(tids[t], NULL);
    uint64_t bytes = (uint64_t)(2 * m + 4 * n_vertices + 1 + offsets[n_vertices]) * sizeof(int64_t) +
                     (uint64_t)n_threads * n_vertices * sizeof(int64_t);
    printf("scale=%d edgefactor=%d vertices=%" PRId64 " edges=%" PRId64 " csr_edges=%" PRId64 " roots=%d visited=%" PRId64
           " levels=%" PRId64 " data_bytes=%" PRIu64 "\n",
           scale, edgefactor, n_vertices, m, offsets[n_vertices], roots, visited_total, levels_total, bytes);
    return 0;
}
