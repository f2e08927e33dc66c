/* tiersim's WiredTiger driver: YCSB core workloads A, B, C and F (Cooper et al., SoCC'10), and
 * wtperf's update-only threads (U: bench/wtperf/runners/log.wtperf, `threads=((count=8,updates=1))`), on one
 * WiredTiger table through the public C API (wiredtiger.h, WiredTiger 3.2.1 as Debian ships it),
 * the way seed 001 drives the engine: load N records, then T threads run a read/update mix over
 * scrambled-zipfian keys (YCSB's ZipfianGenerator, theta 0.99, FNV-scrambled). Deterministic for a
 * given seed and thread count except for the interleaving of the threads and WiredTiger's own
 * background threads (eviction, checkpoint server, log). Prints what it did as key=value lines. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>
#include <wiredtiger.h>

static const char *usage =
    "usage: wt_driver DIR RECORDS OPS THREADS WORKLOAD(a|b|c|f|u) VALUE_SIZE CACHE_MB LOG(0|1) "
    "CHECKPOINT_EVERY MMAP(0|1) THETA SEED LOG_FILE_MAX_MB SYNC(0|1) PHASE(all|load|run) CHECKPOINTS "
    "READ_CHECKPOINT(0|1)\n";

static WT_CONNECTION *conn;
static uint64_t n_records, n_ops, checkpoint_every, n_checkpoints, seed;
/* Operations the clients have completed, and whether they all have: the checkpoint thread's
 * clock (background_checkpoints). */
static uint64_t ops_done;
static int clients_done;
static unsigned n_threads, value_size;
static int sync_commits;
/* The clients read the last checkpoint (READ_CHECKPOINT): cursors opened with
 * "checkpoint=WiredTigerCheckpoint", read-only objects, which WiredTiger 3.x maps into memory when
 * mmap is on instead of reading their blocks by pread (docs tune_read_only; block_mgr.c
 * __bm_checkpoint_load is the only caller of __wt_block_map). */
static int read_checkpoint;
static char workload;
static double theta;

#define CHECK(call)                                                                                          \
    do {                                                                                                     \
        int ret_ = (call);                                                                                   \
        if (ret_ != 0) {                                                                                     \
            fprintf(stderr, "wt_driver: %s: %s\n", #call, wiredtiger_strerror(ret_));                        \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)

/* YCSB's ZipfianGenerator (Gray et al., "Quickly generating billion-record synthetic databases"). */
struct zipf {
    double zetan, alpha, eta, zeta2;
    uint64_t n;
};

static double zeta(uint64_t n, double th) {
    double s = 0;
    for (uint64_t i = 1; i <= n; i++)
        s += 1.0 / pow((double)i, th);
    return s;
}

static void zipf_init(struct zipf *z, uint64_t n, double th) {
    z->n = n;
    z->zeta2 = zeta(2, th);
    z->zetan = zeta(n, th);
    z->alpha = 1.0 / (1.0 - th);
    z->eta = (1 - pow(2.0 / (double)n, 1 - th)) / (1 - z->zeta2 / z->zetan);
}

static uint64_t xorshift(uint64_t *s) {
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static double uniform(uint64_t *s) { return (double)(xorshift(s) >> 11) / 9007199254740992.0; }

static uint64_t zipf_next(const struct zipf *z, uint64_t *s) {
    double u = uniform(s), uz = u * z->zetan;
    uint64_t v;
    if (uz < 1.0)
        v = 0;
    else if (uz < 1.0 + pow(0.5, theta))
        v = 1;
    else
        v = (uint64_t)((double)z->n * pow(z->eta * u - z->eta + 1, z->alpha));
    if (v >= z->n)
        v = z->n - 1;
    /* YCSB's ScrambledZipfian: FNV-1a of the rank, so hot keys spread over the table. */
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int i = 0; i < 8; i++) {
        h ^= (v >> (8 * i)) & 0xff;
        h *= 0x100000001b3ULL;
    }
    return h % z->n;
}

static struct zipf keys;

static void make_key(char *buf, uint64_t k) { snprintf(buf, 32, "user%016" PRIu64, k); }

static void make_value(char *buf, uint64_t k, uint64_t version) {
    for (unsigned i = 0; i < value_size; i++)
        buf[i] = (char)('a' + (k + version + i) % 26);
    buf[value_size] = '\0';
}

struct worker {
    unsigned id;
    uint64_t reads, updates, found;
};

static void *run(void *arg) {
    struct worker *w = arg;
    WT_SESSION *session;
    WT_CURSOR *c;
    char key[32], *value = malloc(value_size + 1);
    uint64_t rng = seed * 0x9e3779b97f4a7c15ULL + w->id + 1, ops = n_ops / n_threads + (w->id < n_ops % n_threads);
    CHECK(conn->open_session(conn, NULL, NULL, &session));
    CHECK(session->open_cursor(session, "table:ycsb", NULL, read_checkpoint ? "checkpoint=WiredTigerCheckpoint" : NULL,
                               &c));
    /* YCSB workload mixes: A 50 % updates, B 5 %, C reads only, F 50 % read-modify-writes; U updates only. */
    double update_share =
        workload == 'a' ? 0.5 : workload == 'b' ? 0.05 : workload == 'f' ? 0.5 : workload == 'u' ? 1.0 : 0.0;
    for (uint64_t i = 0; i < ops; i++) {
        uint64_t k = zipf_next(&keys, &rng);
        int update = uniform(&rng) < update_share;
        make_key(key, k);
        if (sync_commits)
            CHECK(session->begin_transaction(session, "sync=true"));
        if (!update || workload == 'f') {
            c->set_key(c, key);
            int ret = c->search(c);
            if (ret == 0) {
                const char *v;
                CHECK(c->get_value(c, &v));
                w->found += v[0] != '\0';
            } else if (ret != WT_NOTFOUND)
                CHECK(ret);
            CHECK(c->reset(c));
            w->reads++;
        }
        if (update) {
            make_value(value, k, i + 1);
            c->set_key(c, key);
            c->set_value(c, value);
            CHECK(c->update(c));
            CHECK(c->reset(c));
            w->updates++;
        }
        if (sync_commits)
            CHECK(session->commit_transaction(session, NULL));
        __atomic_add_fetch(&ops_done, 1, __ATOMIC_RELAXED);
        if (w->id == 0 && checkpoint_every != 0 && (i + 1) % checkpoint_every == 0)
            CHECK(session->checkpoint(session, NULL));
    }
    CHECK(session->close(session, NULL));
    free(value);
    return NULL;
}

/* A phase marker in the trace, at the clients' start and again at their end: an fdatasync of the
 * empty file DIR/tiersim_phase, which the file I/O shim records as a sync record on that file, so
 * that a replay can measure the clients' run alone (stats.warmup_accesses = the first marker's
 * record number, stats.replay_accesses = the second's), leaving out wiredtiger_open and the
 * closing checkpoint. It writes nothing, so it costs a replay only the call and the device's flush. */
static void phase_marker(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tiersim_phase", dir);
    int fd = open(path, O_CREAT | O_WRONLY, 0644);
    if (fd < 0 || fdatasync(fd) != 0 || close(fd) != 0) {
        perror("wt_driver: phase marker");
        exit(1);
    }
}

/* wtperf's checkpoint thread (bench/wtperf: checkpoint_threads=1, a checkpoint every
 * checkpoint_interval seconds while the workers run; MongoDB's configs use WiredTiger's own
 * checkpoint=(wait=60) server, the same in effect): CHECKPOINTS checkpoints from a thread of their
 * own while the clients run, the k-th once the clients have done k/(CHECKPOINTS+1) of the
 * operations (none begun after the clients' end). Spaced by the clients' progress rather than by
 * seconds, because a run under Valgrind is ~50x slower than natively and a timed interval would
 * fall at other points of the run on each path. */
static void *background_checkpoints(void *arg) {
    uint64_t *done = arg;
    WT_SESSION *session;
    CHECK(conn->open_session(conn, NULL, NULL, &session));
    for (uint64_t k = 1; k <= n_checkpoints; k++) {
        uint64_t at = n_ops * k / (n_checkpoints + 1);
        while (__atomic_load_n(&ops_done, __ATOMIC_RELAXED) < at && !__atomic_load_n(&clients_done, __ATOMIC_ACQUIRE))
            nanosleep(&(struct timespec){.tv_nsec = 100000}, NULL);
        if (__atomic_load_n(&clients_done, __ATOMIC_ACQUIRE))
            break;
        CHECK(session->checkpoint(session, NULL));
        (*done)++;
    }
    CHECK(session->close(session, NULL));
    return NULL;
}

static uint64_t stat(WT_SESSION *session, int key) {
    WT_CURSOR *c;
    const char *desc, *pvalue;
    int64_t v = 0;
    CHECK(session->open_cursor(session, "statistics:", NULL, NULL, &c));
    c->set_key(c, key);
    if (c->search(c) == 0)
        CHECK(c->get_value(c, &desc, &pvalue, &v));
    CHECK(c->close(c));
    return (uint64_t)v;
}

int main(int argc, char **argv) {
    if (argc != 18) {
        fputs(usage, stderr);
        return 2;
    }
    const char *dir = argv[1];
    n_records = strtoull(argv[2], NULL, 10);
    n_ops = strtoull(argv[3], NULL, 10);
    n_threads = (unsigned)strtoul(argv[4], NULL, 10);
    workload = argv[5][0];
    value_size = (unsigned)strtoul(argv[6], NULL, 10);
    unsigned cache_mb = (unsigned)strtoul(argv[7], NULL, 10);
    int log = atoi(argv[8]), mmap_on = atoi(argv[10]);
    checkpoint_every = strtoull(argv[9], NULL, 10);
    theta = strtod(argv[11], NULL);
    seed = strtoull(argv[12], NULL, 10);
    unsigned log_max_mb = (unsigned)strtoul(argv[13], NULL, 10);
    /* SYNC: every operation of the run phase is a transaction whose commit waits for its log
     * record to be fsynced (begin_transaction "sync=true"); the load is not synced, so that the
     * trace's syncs are the clients' commits. WiredTiger's default leaves the log to the OS and
     * syncs it at checkpoints and log file switches. */
    sync_commits = atoi(argv[14]);
    /* PHASE: all (load then run), load (create and load the table, checkpoint, exit) or run (open
     * the table a load left in DIR and run the operations): a run alone is seed 001's measured
     * part, on a database that exists before it starts. */
    const char *phase = argv[15];
    n_checkpoints = strtoull(argv[16], NULL, 10);
    read_checkpoint = atoi(argv[17]);
    int do_load = strcmp(phase, "run") != 0, do_run = strcmp(phase, "load") != 0;
    if (n_records < 2 || n_threads == 0 || value_size == 0 || cache_mb == 0 || !strchr("abcfu", workload) ||
        workload == '\0' || theta <= 0 || theta >= 1 || log_max_mb == 0 ||
        (strcmp(phase, "all") != 0 && strcmp(phase, "load") != 0 && strcmp(phase, "run") != 0) ||
        (read_checkpoint != 0 && read_checkpoint != 1)) {
        fputs(usage, stderr);
        return 2;
    }
    /* A checkpoint cursor is read-only (its update returns ENOTSUP): only YCSB-C runs on one. */
    if (read_checkpoint && workload != 'c') {
        fputs("wt_driver: READ_CHECKPOINT=1 needs workload c (checkpoint cursors are read-only)\n", stderr);
        return 2;
    }
    char config[256];
    snprintf(config, sizeof config,
             "create,cache_size=%uMB,statistics=(fast),session_max=%u,log=(enabled=%s,file_max=%uMB),mmap=%s,"
             "checkpoint_sync=true",
             /* The load alone (PHASE load) writes no log: a bulk load that checkpoints at its end,
              * so that the run's open finds no log to scan and replay (WiredTiger reads every log
              * file at open: tens of MiB that no seed 001 run measured). */
             cache_mb, n_threads + 16, log && do_run ? "true" : "false", log_max_mb, mmap_on ? "true" : "false");
    CHECK(wiredtiger_open(dir, NULL, config, &conn));
    WT_SESSION *session;
    CHECK(conn->open_session(conn, NULL, NULL, &session));
    if (do_load) {
        CHECK(session->create(session, "table:ycsb", "key_format=S,value_format=S"));
        WT_CURSOR *c;
        CHECK(session->open_cursor(session, "table:ycsb", NULL, NULL, &c));
        char key[32], *value = malloc(value_size + 1);
        for (uint64_t k = 0; k < n_records; k++) {
            make_key(key, k);
            make_value(value, k, 0);
            c->set_key(c, key);
            c->set_value(c, value);
            CHECK(c->insert(c));
        }
        CHECK(c->close(c));
        CHECK(session->checkpoint(session, NULL));
        free(value);
    }
    if (!do_run) {
        printf("records=%" PRIu64 " value_size=%u loaded=1\n", n_records, value_size);
        CHECK(conn->close(conn, NULL));
        return 0;
    }

    zipf_init(&keys, n_records, theta);
    phase_marker(dir);
    pthread_t ckpt_tid;
    uint64_t checkpoints_done = 0;
    if (n_checkpoints != 0 && pthread_create(&ckpt_tid, NULL, background_checkpoints, &checkpoints_done) != 0) {
        perror("wt_driver: pthread_create");
        return 1;
    }
    pthread_t tids[n_threads];
    struct worker ws[n_threads];
    for (unsigned t = 0; t < n_threads; t++) {
        ws[t] = (struct worker){.id = t};
        if (pthread_create(&tids[t], NULL, run, &ws[t]) != 0) {
            perror("wt_driver: pthread_create");
            return 1;
        }
    }
    uint64_t reads = 0, updates = 0, found = 0;
    for (unsigned t = 0; t < n_threads; t++) {
        pthread_join(tids[t], NULL);
        reads += ws[t].reads;
        updates += ws[t].updates;
        found += ws[t].found;
    }
    /* The clients' end, the second phase marker: a wtperf run's throughput is its operations over
     * its run time (wtperf.c), so what follows (the checkpoint thread's last work, the closing
     * checkpoint of conn->close) is not part of it; a replay ends its measurement here. */
    phase_marker(dir);
    __atomic_store_n(&clients_done, 1, __ATOMIC_RELEASE);
    if (n_checkpoints != 0)
        pthread_join(ckpt_tid, NULL);
    printf("records=%" PRIu64 " value_size=%u threads=%u workload=%c reads=%" PRIu64 " updates=%" PRIu64
           " found=%" PRIu64 " checkpoints=%" PRIu64 "\n",
           n_records, value_size, n_threads, workload, reads, updates, found, checkpoints_done);
    printf("cache_bytes_max=%" PRIu64 " cache_bytes_inuse=%" PRIu64 "\n", stat(session, WT_STAT_CONN_CACHE_BYTES_MAX),
           stat(session, WT_STAT_CONN_CACHE_BYTES_INUSE));
    /* Blocks the engine took from a file mapping instead of a pread (block_read.c __wt_bm_read):
     * non-zero only for checkpoint cursors with mmap on. */
    printf("block_map_reads=%" PRIu64 " block_map_read_bytes=%" PRIu64 " block_reads=%" PRIu64 "\n",
           stat(session, WT_STAT_CONN_BLOCK_MAP_READ), stat(session, WT_STAT_CONN_BLOCK_BYTE_MAP_READ),
           stat(session, WT_STAT_CONN_BLOCK_READ));
    CHECK(conn->close(conn, NULL));
    return 0;
}
