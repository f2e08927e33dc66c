/* The tracing runtime of `tiersim capture --instrumented`: it defines the __tsan_* entry points
 * that GCC and Clang's -fsanitize=thread insert before every load and store, in place of the
 * ThreadSanitizer runtime (libtsan). Each thread passes its accesses through the LLC model (the
 * same set-associative, LRU, write-back, write-allocate cache as crates/tiersim-trace/src/capture/
 * cache.rs, set = line number modulo sets) and keeps only fills and dirty evictions, in a buffer
 * of its own written to TIERSIM_CAPTURE_DIR/t<thread>.bin; tiersim merges the files. Time base:
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
#include <stdlib.h>
#include <string.h>
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

struct cache {
    uint64_t sets;
    uint32_t ways;
    uint64_t *tags, *used, *clock;
    uint8_t *dirty;
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
    c->used = calloc(lines, sizeof *c->used);
    c->clock = calloc(c->sets, sizeof *c->clock);
    c->dirty = calloc(lines, 1);
    if (!c->tags || !c->used || !c->clock || !c->dirty) die("cache");
    for (uint64_t i = 0; i < lines; i++) c->tags[i] = INVALID;
    return c;
}

/* The LRU set of cache.rs, with a clock per set (LRU only compares ways of one set). Returns 1
 * on a miss, with *wb the evicted dirty line or INVALID. */
static int cache_access(struct cache *c, uint64_t line, int write, uint64_t *wb) {
    uint64_t set = line % c->sets, base = set * c->ways;
    atomic_uchar *l = &c->locks[set % NLOCKS];
    while (atomic_exchange_explicit(l, 1, memory_order_acquire)) {
    }
    uint64_t now = ++c->clock[set];
    uint32_t victim = 0;
    int miss = 1;
    for (uint32_t w = 0; w < c->ways; w++) {
        uint64_t i = base + w;
        if (c->tags[i] == line) {
            c->used[i] = now;
            c->dirty[i] |= write;
            miss = 0;
            break;
        }
        /* An empty way first, else the least recently used (cache.rs's order). */
        uint64_t v = base + victim;
        int empty_w = c->tags[i] == INVALID, empty_v = c->tags[v] == INVALID;
        if (empty_w != empty_v ? empty_w : c->used[i] < c->used[v]) victim = w;
    }
    if (miss) {
        uint64_t i = base + victim;
        *wb = c->tags[i] != INVALID && c->dirty[i] ? c->tags[i] : INVALID;
        c->tags[i] = line;
        c->used[i] = now;
        c->dirty[i] = (uint8_t)write;
    }
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

/* Look up the frames of the pages of records already made (their accesses have happened, so
 * the pages are mapped); pages not yet exclusively mapped (the zero page) are looked up again at
 * later flushes, and tiersim keeps each page's last entry. */
static void pm_lookup(const rec_t *r, uint32_t n) {
    uint64_t out[2 * 512];
    uint32_t k = 0;
    uint64_t last = INVALID;
    pthread_mutex_lock(&pm_lock);
    for (uint32_t i = 0; i < n && cfg.pagemap_fd >= 0; i++) {
        uint64_t vpn = r[i].addr >> PAGE_SHIFT, e;
        if (vpn == last || pm_known(vpn)) continue;
        last = vpn;
        if (pread(cfg.pagemap_fd, &e, 8, (off_t)(vpn * 8)) != 8) continue;
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
}

static struct thr *attach(void) {
    if (!cfg.active || in_rt) return NULL;
    in_rt++;
    struct thr *t = calloc(1, sizeof *t);
    char path[4200];
    if (!t) die("thread state");
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
            t->c = shared_cache;
        } else {
            if (t->cpu >= n_cpu_caches) {
                uint32_t n = t->cpu + 1;
                cpu_caches = realloc(cpu_caches, n * sizeof *cpu_caches);
                if (!cpu_caches) die("caches");
                for (uint32_t i = n_cpu_caches; i < n; i++) cpu_caches[i] = NULL;
                n_cpu_caches = n;
            }
            if (!cpu_caches[t->cpu]) cpu_caches[t->cpu] = cache_new();
            t->c = cpu_caches[t->cpu];
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

static inline void access_mem(uintptr_t addr, uint32_t size, int write) {
    struct thr *t = me;
    if (__builtin_expect(!t, 0)) {
        t = attach();
        if (!t) return;
    }
    if (t->done) return;
    if (write)
        t->stores++;
    else
        t->loads++;
    t->bytes += size;
    t->gap++;
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
        if (cache_access(t->c, line, write, &wb)) {
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
        for (uint64_t i = 0; i < all[k]->sets * all[k]->ways; i++) dirty += all[k]->tags[i] != INVALID && all[k]->dirty[i];
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
