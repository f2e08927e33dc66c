/* The tracing runtime of `tiersim capture --instrumented`: it defines the __tsan_* entry points
 * that GCC and Clang's -fsanitize=thread insert before every load and store, in place of the
 * ThreadSanitizer runtime (libtsan). Each thread passes its accesses through the LLC model (the
 * same set-associative, LRU, write-back, write-allocate cache as crates/tiersim-trace/src/capture/
 * cache.rs, set = line number modulo sets) and keeps only fills and dirty evictions, in a buffer
 * of its own written to TIERSIM_CAPTURE_DIR/t<thread>.bin; tiersim merges the files. A cache used
 * by one thread (per_cpu, one thread per CPU: the default) is touched without any lock or atomic;
 * it takes striped set locks once a second thread joins it (see cache_join). Time base:
 * traced loads and stores since the thread's previous record (tiersim scales them by
 * instructions_per_access), so the tracer's own time never enters the trace. Built by
 * `tiersim capture --build-runtime`; see docs/capture.md. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

/* One record of a thread file; tiersim reads this layout (capture/instrumented.rs). */
typedef struct {
    uint64_t stamp; /* TSC (or CLOCK_MONOTONIC ns): orders the threads' records when merged */
    uint64_t addr;
    uint32_t gap; /* traced loads and stores of this thread since its previous record */
    uint16_t size;
    uint8_t op; /* 0 read, 1 write */
    uint8_t pad;
} rec_t;

#define BUF_RECS (1u << 16)
#define NLOCKS 4096u
#define INVALID UINT64_MAX
#define PAGE_SHIFT 12

/* Per set, `ways` tags in recency order (most recent first), each line << 1 | dirty; INVALID
 * marks an empty way, and empty ways are always last, so the victim of a miss is the last way:
 * an empty one first, else the least recently used, as cache.rs chooses. */
struct cache {
    uint64_t sets;
    uint32_t ways;
    uint64_t *tags;
    /* Threads that use this cache; it takes the set locks once there are two. */
    uint32_t users;
    volatile int shared;
    /* Striped set locks: a cache may be shared by threads (llc_scope shared, or two threads on
     * one CPU). */
    atomic_uchar locks[NLOCKS];
};

struct thr {
    uint32_t index, cpu;
    int fd;
    rec_t *buf;
    uint32_t n;
    uint32_t gap;
    /* The line this thread touched last is its cache set's most recent: touching it again
     * changes nothing but the dirty bit, so it skips the cache. */
    uint64_t last_line;
    int last_dirty;
    /* Set while this thread is inside an unlocked cache access (see cache_join). */
    volatile int busy;
    struct cache *c;
    uint64_t loads, stores, bytes, hits, misses, writebacks, records;
    int done;
    struct thr *next;
};

static struct {
    int active;
    char dir[4096];
    uint64_t llc;
    uint32_t ways, line_shift;
    int per_cpu;
    uint32_t *cpu_map, n_cpu_map;
    int pagemap_fd; /* -1: not looked up */
    const char *pagemap_state;
} cfg = {.pagemap_fd = -1, .pagemap_state = "off"};

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct thr *threads;
static atomic_uint next_index;
static struct cache *shared_cache;
static struct cache **cpu_caches;
static uint32_t n_cpu_caches;
static pthread_key_t thr_key;
static __thread struct thr *me;
static __thread uint32_t my_index = UINT32_MAX;
/* Set while the runtime itself runs in this thread (its own copies are not the program's). */
static __thread int in_rt;

static void *(*real_memcpy)(void *, const void *, size_t);
static void *(*real_memmove)(void *, const void *, size_t);
static void *(*real_memset)(void *, int, size_t);

static void die(const char *what) {
    fprintf(stderr, "tiersim trace runtime: %s: %s\n", what, strerror(errno));
    _exit(127);
}

static uint64_t stamp(void) {
#if defined(__x86_64__) || defined(__i386__)
    return __rdtsc();
#else
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + ts.tv_nsec;
#endif
}

static uint64_t env_u64(const char *name, uint64_t dflt) {
    const char *v = getenv(name);
    return v && *v ? strtoull(v, NULL, 10) : dflt;
}

static struct cache *cache_new(void) {
    struct cache *c = calloc(1, sizeof *c);
    uint64_t lines = cfg.llc >> cfg.line_shift;
    if (!c) die("cache");
    c->ways = cfg.ways;
    c->sets = lines / cfg.ways;
    c->tags = malloc(lines * sizeof *c->tags);
    if (!c->tags) die("cache");
    for (uint64_t i = 0; i < lines; i++) c->tags[i] = INVALID;
    return c;
}

/* The LRU set of cache.rs, kept in recency order. Returns 1 on a miss, with *wb the evicted
 * dirty line or INVALID. The shifts are loops: memmove is this runtime's own, traced one. */
static inline int set_access(uint64_t *set, uint32_t ways, uint64_t line, int write, uint64_t *wb) {
    uint64_t key = line << 1;
    for (uint32_t w = 0; w < ways; w++) {
        uint64_t tag = set[w];
        if ((tag | 1) == (key | 1)) {
            for (; w > 0; w--) set[w] = set[w - 1];
            set[0] = tag | (uint64_t)write;
            return 0;
        }
    }
    uint64_t out = set[ways - 1];
    *wb = out != INVALID && (out & 1) ? out >> 1 : INVALID;
    for (uint32_t w = ways - 1; w > 0; w--) set[w] = set[w - 1];
    set[0] = key | (uint64_t)write;
    return 1;
}

static int cache_access(struct thr *t, uint64_t line, int write, uint64_t *wb) {
    struct cache *c = t->c;
    uint64_t set = line % c->sets;
    uint64_t *tags = c->tags + set * c->ways;
    t->busy = 1;
    atomic_signal_fence(memory_order_seq_cst);
    if (__builtin_expect(!c->shared, 1)) {
        int miss = set_access(tags, c->ways, line, write, wb);
        atomic_signal_fence(memory_order_seq_cst);
        t->busy = 0;
        return miss;
    }
    t->busy = 0;
    atomic_uchar *l = &c->locks[set % NLOCKS];
    while (atomic_exchange_explicit(l, 1, memory_order_acquire)) {
    }
    int miss = set_access(tags, c->ways, line, write, wb);
    atomic_store_explicit(l, 0, memory_order_release);
    return miss;
}

/* Pages whose frames are known for good (exclusively mapped), an open-addressing set. */
static uint64_t *pm_seen;
static uint64_t pm_cap, pm_len;
static pthread_mutex_t pm_lock = PTHREAD_MUTEX_INITIALIZER;
static int pm_out = -1;

static int pm_insert(uint64_t vpn) {
    if (2 * (pm_len + 1) > pm_cap) {
        uint64_t old_cap = pm_cap, *old = pm_seen;
        pm_cap = pm_cap ? 2 * pm_cap : 1 << 16;
        pm_seen = malloc(pm_cap * sizeof *pm_seen);
        if (!pm_seen) die("pagemap set");
        for (uint64_t i = 0; i < pm_cap; i++) pm_seen[i] = INVALID;
        pm_len = 0;
        for (uint64_t i = 0; i < old_cap; i++)
            if (old[i] != INVALID) pm_insert(old[i]);
        free(old);
    }
    uint64_t h = (vpn * 0x9E3779B97F4A7C15ull) & (pm_cap - 1);
    while (pm_seen[h] != INVALID) {
        if (pm_seen[h] == vpn) return 0;
        h = (h + 1) & (pm_cap - 1);
    }
    pm_seen[h] = vpn;
    pm_len++;
    return 1;
}

static int pm_known(uint64_t vpn) {
    if (!pm_cap) return 0;
    uint64_t h = (vpn * 0x9E3779B97F4A7C15ull) & (pm_cap - 1);
    for (; pm_seen[h] != INVALID; h = (h + 1) & (pm_cap - 1))
        if (pm_seen[h] == vpn) return 1;
    return 0;
}

static void write_all(int fd, const void *p, size_t n) {
    const char *b = p;
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) die("writing the trace");
        b += w;
        n -= (size_t)w;
    }
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Look up the frames of the pages of records already made (their accesses have happened, so
 * the pages are mapped); pages not yet exclusively mapped (the zero page) are looked up again at
 * later flushes, and tiersim keeps each page's last entry. In a batch: the buffer's new pages
 * sorted, each run of consecutive pages read with one pread. */
static void pm_lookup(const rec_t *r, uint32_t n) {
    static uint64_t vpns[BUF_RECS], ents[512], out[2 * 512];
    uint32_t m = 0, k = 0;
    uint64_t last = INVALID;
    pthread_mutex_lock(&pm_lock);
    for (uint32_t i = 0; i < n; i++) {
        uint64_t vpn = r[i].addr >> PAGE_SHIFT;
        if (vpn == last) continue;
        last = vpn;
        if (!pm_known(vpn)) vpns[m++] = vpn;
    }
    qsort(vpns, m, sizeof *vpns, cmp_u64);
    for (uint32_t i = 0; i < m && cfg.pagemap_fd >= 0;) {
        uint32_t j = i + 1;
        while (j < m && vpns[j] - vpns[i] < 512 && (vpns[j] == vpns[j - 1] || vpns[j] == vpns[j - 1] + 1)) j++;
        uint64_t first = vpns[i], span = vpns[j - 1] - first + 1;
        ssize_t got = pread(cfg.pagemap_fd, ents, span * 8, (off_t)(first * 8));
        uint64_t have = got > 0 ? (uint64_t)got / 8 : 0;
        for (uint32_t x = i; x < j; x++) {
            uint64_t vpn = vpns[x], e;
            if (x > i && vpn == vpns[x - 1]) continue;
            if (vpn - first >= have) continue;
            e = ents[vpn - first];
            if (!(e >> 63) || (e >> 62 & 1)) continue;
            if (!(e & ((1ull << 55) - 1))) {
                /* Frame numbers need CAP_SYS_ADMIN. */
                cfg.pagemap_state = "hidden";
                close(cfg.pagemap_fd);
                cfg.pagemap_fd = -1;
                break;
            }
            if (e >> 56 & 1) pm_insert(vpn);
            out[k++] = vpn;
            out[k++] = e;
            if (k == 2 * 512) {
                write_all(pm_out, out, sizeof out);
                k = 0;
            }
        }
        i = j;
    }
    if (k && pm_out >= 0) write_all(pm_out, out, k * 8);
    pthread_mutex_unlock(&pm_lock);
}

static void flush(struct thr *t) {
    if (!t->n) return;
    in_rt++;
    write_all(t->fd, t->buf, t->n * sizeof(rec_t));
    if (cfg.pagemap_fd >= 0) pm_lookup(t->buf, t->n);
    t->n = 0;
    in_rt--;
}

static void emit(struct thr *t, uint64_t addr, uint32_t size, int write) {
    rec_t *r = &t->buf[t->n];
    r->stamp = stamp();
    r->addr = addr;
    r->gap = t->gap;
    r->size = (uint16_t)size;
    r->op = (uint8_t)write;
    r->pad = 0;
    t->gap = 0;
    t->records++;
    if (++t->n == BUF_RECS) flush(t);
}

static void thread_end(void *p) {
    struct thr *t = p;
    flush(t);
    close(t->fd);
    t->done = 1;
    t->last_line = INVALID;
}

/* Thread t starts using cache c (called with reg_lock held). A cache with one user is touched
 * without locks. When a second user comes, the cache turns to its set locks, and an access the
 * first user may be making without a lock at that moment must end first: the joiner sets
 * `shared`, then membarrier(2) runs a full memory barrier on every thread of the process, so
 * each user either sees `shared` at its next access or shows `busy` set, which the joiner waits
 * out. The users' path thus needs no atomic instruction. */
static void cache_join(struct thr *t, struct cache *c) {
    t->c = c;
    if (c->users++ == 0) return;
    if (c->shared) return;
    c->shared = 1;
    if (syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0 &&
        syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) != 0)
        die("membarrier");
    for (struct thr *u = threads; u; u = u->next)
        while (u != t && u->c == c && u->busy) sched_yield();
}

static struct thr *attach(void) {
    if (!cfg.active || in_rt) return NULL;
    in_rt++;
    /* On cache lines of its own: its counters change at every access, and another thread's
     * state on the same line would bounce it between cores. */
    struct thr *t = aligned_alloc(64, (sizeof *t + 63) / 64 * 64);
    char path[4200];
    if (!t) die("thread state");
    memset(t, 0, sizeof *t);
    t->index = my_index != UINT32_MAX ? my_index : atomic_fetch_add(&next_index, 1);
    t->cpu = cfg.n_cpu_map ? cfg.cpu_map[t->index % cfg.n_cpu_map] : t->index;
    t->last_line = INVALID;
    t->buf = malloc(BUF_RECS * sizeof(rec_t));
    snprintf(path, sizeof path, "%s/t%u.bin", cfg.dir, t->index);
    t->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (!t->buf || t->fd < 0) die(path);
    pthread_mutex_lock(&reg_lock);
    if (cfg.llc) {
        if (!cfg.per_cpu) {
            if (!shared_cache) shared_cache = cache_new();
            cache_join(t, shared_cache);
        } else {
            if (t->cpu >= n_cpu_caches) {
                uint32_t n = t->cpu + 1;
                cpu_caches = realloc(cpu_caches, n * sizeof *cpu_caches);
                if (!cpu_caches) die("caches");
                for (uint32_t i = n_cpu_caches; i < n; i++) cpu_caches[i] = NULL;
                n_cpu_caches = n;
            }
            if (!cpu_caches[t->cpu]) cpu_caches[t->cpu] = cache_new();
            cache_join(t, cpu_caches[t->cpu]);
        }
    }
    t->next = threads;
    threads = t;
    pthread_mutex_unlock(&reg_lock);
    pthread_setspecific(thr_key, t);
    me = t;
    in_rt--;
    return t;
}

/* An access that the same-line shortcut does not settle: through the cache, line by line. */
static __attribute__((noinline)) void access_slow(struct thr *t, uintptr_t addr, uint32_t size, int write) {
    if (t->done) {
        /* A thread that has written its records out counts no more accesses. */
        t->loads -= !write;
        t->stores -= write;
        t->bytes -= size;
        t->gap--;
        return;
    }
    if (!t->c) {
        emit(t, addr, size, write);
        return;
    }
    uint64_t first = addr >> cfg.line_shift, last = (addr + (size ? size : 1) - 1) >> cfg.line_shift;
    for (uint64_t line = first; line <= last; line++) {
        if (line == t->last_line && (!write || t->last_dirty)) {
            t->hits++;
            continue;
        }
        uint64_t wb;
        if (cache_access(t, line, write, &wb)) {
            t->misses++;
            emit(t, line << cfg.line_shift, 1u << cfg.line_shift, 0);
            if (wb != INVALID) {
                t->writebacks++;
                emit(t, wb << cfg.line_shift, 1u << cfg.line_shift, 1);
            }
        } else {
            t->hits++;
        }
        /* A slow-path access to the same line came here because it writes a clean line. */
        t->last_line = line;
        t->last_dirty = write;
    }
}

/* The per-access path, inlined into every __tsan_* entry: counters, then the same-line shortcut
 * (an access within the line this thread touched last, that does not dirty a clean line, is a
 * hit that changes nothing). last_line is INVALID when there is no cache or the thread is done,
 * so those always take the slow path. */
static inline __attribute__((always_inline)) void access_mem(uintptr_t addr, uint32_t size, int write) {
    struct thr *t = me;
    if (__builtin_expect(!t, 0)) {
        t = attach();
        if (!t) return;
    }
    t->loads += !write;
    t->stores += write;
    t->bytes += size;
    t->gap++;
    uint64_t line = addr >> cfg.line_shift;
    if (__builtin_expect(line == t->last_line && ((addr + size - 1) >> cfg.line_shift) == line &&
                             write <= t->last_dirty,
                         1)) {
        t->hits++;
        return;
    }
    access_slow(t, addr, size, write);
}

/* A range in accesses of at most 8 bytes, as the program's own copy loop would make. */
static void access_range(const void *p, size_t n, int write) {
    uintptr_t a = (uintptr_t)p, end = a + n;
    while (a < end) {
        uint32_t k = end - a < 8 ? (uint32_t)(end - a) : 8;
        access_mem(a, k, write);
        a += k;
    }
}

static void summary(void) {
    char path[4200];
    snprintf(path, sizeof path, "%s/summary", cfg.dir);
    FILE *f = fopen(path, "w");
    if (!f) die(path);
    uint64_t dirty = 0;
    struct cache *all[1 + 4096];
    uint32_t nc = 0;
    if (shared_cache) all[nc++] = shared_cache;
    for (uint32_t i = 0; i < n_cpu_caches && nc < 4097; i++)
        if (cpu_caches[i]) all[nc++] = cpu_caches[i];
    for (uint32_t k = 0; k < nc; k++)
        for (uint64_t i = 0; i < all[k]->sets * all[k]->ways; i++) dirty += all[k]->tags[i] != INVALID && (all[k]->tags[i] & 1);
    fprintf(f, "version 1\ncaches %u\ndirty_at_exit %llu\npagemap %s\n", nc, (unsigned long long)dirty, cfg.pagemap_state);
    for (struct thr *t = threads; t; t = t->next)
        fprintf(f, "thread %u cpu %u loads %llu stores %llu bytes %llu hits %llu misses %llu writebacks %llu records %llu\n",
                t->index, t->cpu, (unsigned long long)t->loads, (unsigned long long)t->stores,
                (unsigned long long)t->bytes, (unsigned long long)t->hits, (unsigned long long)t->misses,
                (unsigned long long)t->writebacks, (unsigned long long)t->records);
    fclose(f);
}

static void at_exit(void) {
    in_rt++;
    pthread_mutex_lock(&reg_lock);
    for (struct thr *t = threads; t; t = t->next)
        if (!t->done) {
            flush(t);
            t->done = 1;
        }
    summary();
    pthread_mutex_unlock(&reg_lock);
    if (pm_out >= 0) close(pm_out);
    cfg.active = 0;
}

void __tsan_init(void) {
    static int once;
    if (once++) return;
    in_rt++;
    real_memcpy = dlsym(RTLD_NEXT, "memcpy");
    real_memmove = dlsym(RTLD_NEXT, "memmove");
    real_memset = dlsym(RTLD_NEXT, "memset");
    const char *dir = getenv("TIERSIM_CAPTURE_DIR");
    if (!dir || !*dir) {
        fprintf(stderr, "tiersim trace runtime: TIERSIM_CAPTURE_DIR is not set, so nothing is traced "
                        "(run the program with `tiersim capture --instrumented`)\n");
        in_rt--;
        return;
    }
    snprintf(cfg.dir, sizeof cfg.dir, "%s", dir);
    cfg.llc = env_u64("TIERSIM_LLC", 0);
    cfg.ways = (uint32_t)env_u64("TIERSIM_LLC_WAYS", 16);
    cfg.line_shift = (uint32_t)__builtin_ctzll(env_u64("TIERSIM_LINE_SIZE", 64));
    const char *scope = getenv("TIERSIM_LLC_SCOPE");
    cfg.per_cpu = scope && !strcmp(scope, "per_cpu");
    /* A CPU list as cpu_map takes it (tiersim checked it): 0-1,16-17. */
    const char *map = getenv("TIERSIM_CPU_MAP");
    for (const char *p = map; p && *p;) {
        char *end;
        uint32_t a = (uint32_t)strtoul(p, &end, 10), b = a;
        if (*end == '-') b = (uint32_t)strtoul(end + 1, &end, 10);
        for (uint32_t c = a; c <= b; c++) {
            cfg.cpu_map = realloc(cfg.cpu_map, (cfg.n_cpu_map + 1) * sizeof *cfg.cpu_map);
            if (!cfg.cpu_map) die("cpu map");
            cfg.cpu_map[cfg.n_cpu_map++] = c;
        }
        if (*end != ',') break;
        p = end + 1;
    }
    if (env_u64("TIERSIM_PAGEMAP", 0)) {
        char path[4200];
        snprintf(path, sizeof path, "%s/pagemap.bin", cfg.dir);
        cfg.pagemap_fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
        pm_out = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (pm_out < 0) die(path);
        cfg.pagemap_state = cfg.pagemap_fd >= 0 ? "ok" : "unreadable";
    }
    pthread_key_create(&thr_key, thread_end);
    /* For cache_join; without it (Linux < 4.14) the global command is tried. */
    syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0);
    cfg.active = 1;
    atexit(at_exit);
    /* The main thread is thread 0 even if another starts before its first access. */
    my_index = atomic_fetch_add(&next_index, 1);
    in_rt--;
    attach();
}

/* Threads are numbered in creation order: the parent takes the number. */
struct start {
    void *(*fn)(void *);
    void *arg;
    uint32_t index;
};

static void *trampoline(void *p) {
    struct start s = *(struct start *)p;
    free(p);
    my_index = s.index;
    return s.fn(s.arg);
}

int pthread_create(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *), void *arg) {
    static int (*real)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
    if (!real) real = dlsym(RTLD_NEXT, "pthread_create");
    if (!cfg.active) return real(th, attr, fn, arg);
    struct start *s = malloc(sizeof *s);
    if (!s) return EAGAIN;
    s->fn = fn;
    s->arg = arg;
    s->index = atomic_fetch_add(&next_index, 1);
    int r = real(th, attr, trampoline, s);
    if (r) free(s);
    return r;
}

/* libc's memcpy, memmove and memset are not rebuilt: calls from the program (and from other
 * libraries) are traced here as 8-byte loads and stores. Before dlsym has answered, a byte loop
 * copies (volatile, so that the compiler does not turn it back into a call). */
void *memcpy(void *d, const void *s, size_t n) {
    if (!in_rt) {
        access_range(s, n, 0);
        access_range(d, n, 1);
    }
    if (real_memcpy) return real_memcpy(d, s, n);
    volatile char *vd = d;
    const volatile char *vs = s;
    for (size_t i = 0; i < n; i++) vd[i] = vs[i];
    return d;
}

void *memmove(void *d, const void *s, size_t n) {
    if (!in_rt) {
        access_range(s, n, 0);
        access_range(d, n, 1);
    }
    if (real_memmove) return real_memmove(d, s, n);
    volatile char *vd = d;
    const volatile char *vs = s;
    if (vd < vs)
        for (size_t i = 0; i < n; i++) vd[i] = vs[i];
    else
        for (size_t i = n; i > 0; i--) vd[i - 1] = vs[i - 1];
    return d;
}

void *memset(void *d, int c, size_t n) {
    if (!in_rt) access_range(d, n, 1);
    if (real_memset) return real_memset(d, c, n);
    volatile char *vd = d;
    for (size_t i = 0; i < n; i++) vd[i] = (char)c;
    return d;
}

void __tsan_func_entry(void *pc) { (void)pc; }
void __tsan_func_exit(void) {}
void __tsan_read_range(void *p, unsigned long n) { access_range(p, n, 0); }
void __tsan_write_range(void *p, unsigned long n) { access_range(p, n, 1); }
void __tsan_vptr_read(void **p) { access_mem((uintptr_t)p, 8, 0); }
void __tsan_vptr_update(void **p, void *v) {
    (void)v;
    access_mem((uintptr_t)p, 8, 1);
}

#define ACCESS(n)                                                                        \
    void __tsan_read##n(void *p) { access_mem((uintptr_t)p, n, 0); }                     \
    void __tsan_write##n(void *p) { access_mem((uintptr_t)p, n, 1); }                    \
    void __tsan_unaligned_read##n(void *p) { access_mem((uintptr_t)p, n, 0); }           \
    void __tsan_unaligned_write##n(void *p) { access_mem((uintptr_t)p, n, 1); }          \
    void __tsan_volatile_read##n(void *p) { access_mem((uintptr_t)p, n, 0); }            \
    void __tsan_volatile_write##n(void *p) { access_mem((uintptr_t)p, n, 1); }           \
    void __tsan_unaligned_volatile_read##n(void *p) { access_mem((uintptr_t)p, n, 0); }  \
    void __tsan_unaligned_volatile_write##n(void *p) { access_mem((uintptr_t)p, n, 1); }
ACCESS(1)
ACCESS(2)
ACCESS(4)
ACCESS(8)
ACCESS(16)

/* Atomics do what they say (sequentially consistent: at least as strong as asked) and are
 * traced as a load, plus a store when they write, as lackey shows a locked read-modify-write. */
#define RMW(bits, T, name, op)                                                           \
    T __tsan_atomic##bits##_##name(volatile T *a, T v, int mo) {                         \
        (void)mo;                                                                        \
        access_mem((uintptr_t)a, sizeof(T), 0);                                          \
        access_mem((uintptr_t)a, sizeof(T), 1);                                          \
        return op(a, v, __ATOMIC_SEQ_CST);                                               \
    }
#define ATOMICS(bits, T)                                                                 \
    T __tsan_atomic##bits##_load(const volatile T *a, int mo) {                          \
        (void)mo;                                                                        \
        access_mem((uintptr_t)a, sizeof(T), 0);                                          \
        return __atomic_load_n(a, __ATOMIC_SEQ_CST);                                     \
    }                                                                                    \
    void __tsan_atomic##bits##_store(volatile T *a, T v, int mo) {                       \
        (void)mo;                                                                        \
        access_mem((uintptr_t)a, sizeof(T), 1);                                          \
        __atomic_store_n(a, v, __ATOMIC_SEQ_CST);                                        \
    }                                                                                    \
    RMW(bits, T, exchange, __atomic_exchange_n)                                          \
    RMW(bits, T, fetch_add, __atomic_fetch_add)                                          \
    RMW(bits, T, fetch_sub, __atomic_fetch_sub)                                          \
    RMW(bits, T, fetch_and, __atomic_fetch_and)                                          \
    RMW(bits, T, fetch_or, __atomic_fetch_or)                                            \
    RMW(bits, T, fetch_xor, __atomic_fetch_xor)                                          \
    RMW(bits, T, fetch_nand, __atomic_fetch_nand)                                        \
    int __tsan_atomic##bits##_compare_exchange_strong(volatile T *a, T *c, T v, int mo, int fmo) { \
        (void)mo;                                                                        \
        (void)fmo;                                                                       \
        access_mem((uintptr_t)a, sizeof(T), 0);                                          \
        access_mem((uintptr_t)a, sizeof(T), 1);                                          \
        return __atomic_compare_exchange_n(a, c, v, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); \
    }                                                                                    \
    int __tsan_atomic##bits##_compare_exchange_weak(volatile T *a, T *c, T v, int mo, int fmo) { \
        return __tsan_atomic##bits##_compare_exchange_strong(a, c, v, mo, fmo);          \
    }                                                                                    \
    T __tsan_atomic##bits##_compare_exchange_val(volatile T *a, T c, T v, int mo, int fmo) { \
        __tsan_atomic##bits##_compare_exchange_strong(a, &c, v, mo, fmo);                \
        return c;                                                                        \
    }
ATOMICS(8, uint8_t)
ATOMICS(16, uint16_t)
ATOMICS(32, uint32_t)
ATOMICS(64, uint64_t)

void __tsan_atomic_thread_fence(int mo) {
    (void)mo;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
void __tsan_atomic_signal_fence(int mo) {
    (void)mo;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
}
