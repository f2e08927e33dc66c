/* The tracing runtime of `tiersim capture --instrumented`: it defines the __tsan_* entry points
 * that GCC and Clang's -fsanitize=thread insert before every load and store, in place of the
 * ThreadSanitizer runtime (libtsan). Each thread buffers its accesses and passes them, a buffer at
 * a time, through the LLC model (the same set-associative, LRU, write-back, write-allocate cache
 * as crates/tiersim-trace/src/capture/cache.rs, set = line number modulo sets), with the same
 * records as one access at a time, and keeps only fills and dirty evictions, in a ring of
 * its own in memory shared with tiersim (TIERSIM_SHM_FD, laid out by capture/stream.rs), which
 * merges the rings into the traces while the program runs. A cache used
 * by one thread (per_cpu, one thread per CPU: the default) is touched without any lock or atomic;
 * it takes striped set locks once a second thread joins it (see cache_join). Time base:
 * traced loads and stores since the thread's previous record (tiersim scales them by
 * instructions_per_access), so the tracer's own time never enters the trace. Built by
 * `tiersim capture --build-runtime`; see docs/capture.md. */
#define _GNU_SOURCE
/* The runtime defines memcpy, memmove and memset as traced accesses: the compiler must not turn
 * its own copy loops into calls to them. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-tree-loop-distribute-patterns")
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif
#include "tiersim_capture.h"

#define NLOCKS 4096u

/* The shared memory's layout; capture/stream.rs writes the header and reads the rest. */
#define SHM_MAGIC 0x314d485354534954ull /* "TISTSHM1" */
#define SHM_VERSION 1u
enum {
    H_MAGIC = 0, H_VERSION = 1, H_RING = 2, H_SLOTS = 3, H_SLOT_SIZE = 4, H_SLOTS_OFF = 5,
    H_SUMMARY_OFF = 6, H_SUMMARY_SIZE = 7,
    H_LOADED = 8,      /* the runtime's SHM_VERSION, once it has mapped the memory */
    H_RESERVED = 16,   /* slots taken (own cache line) */
    H_FINISHED = 24,   /* the summary is written */
    H_SUMMARY_LEN = 25,
    H_MERGED = 32,     /* tiersim has merged every record (own cache line) */
    H_GONE = 33,       /* tiersim stopped merging: waiting for it is pointless */
};
/* A slot's control page: the producer's line, then the merger's (offsets in stream.rs C_*). */
struct slot_ctl {
    _Atomic uint64_t pub; /* records published */
    atomic_uint busy;     /* records are being stamped and may not be published yet */
    atomic_uint state;    /* 1: index and cpu are set */
    atomic_uint done;     /* no more records */
    uint32_t unused;
    uint32_t index, cpu;
    char pad1[64 - 32];
    _Atomic uint64_t cons; /* records tiersim has taken */
};
_Static_assert(offsetof(struct slot_ctl, index) == 24 && offsetof(struct slot_ctl, cons) == 64, "slot layout");

/* Per set, `ways` tags in recency order (most recent first), each line << 1 | dirty; TC_INVALID
 * marks an empty way, and empty ways are always last, so the victim of a miss is the last way:
 * an empty one first, else the least recently used, as cache.rs chooses. */
struct cache {
    uint64_t sets;
    /* sets - 1 when sets is a power of two (the set is then a mask, not a division), else 0. */
    uint64_t set_mask;
    uint32_t ways;
    uint64_t *tags;
    /* In place of `tags` for 16 ways and sets enough (a power of two) that a user line's tag has
     * 30 bits (2,048 sets of 64-byte lines): 32-bit tags (tc_set_access16n), one host line a set;
     * set_bits is log2(sets). */
    uint32_t *narrow;
    unsigned set_bits;
    /* Threads that use this cache; it takes the set locks once there are two. */
    uint32_t users;
    volatile int shared;
    /* Striped set locks: a cache may be shared by threads (llc_scope shared, or two threads on
     * one CPU). */
    atomic_uchar locks[NLOCKS];
};

/* A line access the same-line table did not settle, waiting for the thread's next flush: the line
 * << 1 | write, its set, and the thread's loads and stores up to it (low 32 bits: a record's gap
 * is their difference modulo 2^32, as it always was). */
struct pend {
    uint64_t key;
    uint32_t set;
    uint32_t total;
};
/* Pending line accesses a thread holds before it passes them through its cache. The set lookups
 * of one flush are independent, so the host overlaps their misses in the tag array, which the
 * program's own accesses, one at a time behind each lookup, never let it do. */
#define PEND 256u
#define PREFETCH_AHEAD 16u
/* A thread's accesses, as the __tsan_* entry points append them: address << 8 | size << 1 |
 * write (user addresses are below 2^56, even with 5-level page tables). The buffer is aligned to its size, so that the entry point sees it full from the
 * pointer alone. Drained (counted, then through the same-line table into the pending accesses)
 * when full and at every flush. */
#define BUF 512u
#define BUF_BYTES (BUF * sizeof(uint64_t))

/* A thread's state. */
struct thr {
    /* Per group of cache sets (set & tab_mask), the line this thread touched last in it, << 1 |
     * whether that access wrote it. That line is its set's most recent once the pending accesses
     * have reached the cache (every access to the set since went into the pending accesses, which
     * rewrote the entry), so touching it again changes nothing, unless it is a store to a line
     * the entry does not show dirty: such accesses skip the cache. tab_mask is 0 (one entry: the
     * last line touched) when the sets are not a power of two, and when other threads share the
     * cache (their accesses change its sets too). */
    uint64_t *tab;
    uint64_t tab_mask;
    uint64_t *buf;
    /* The thread's append pointer (its thread-local `cur`), for the exit handler. */
    uint64_t **cur;
    /* Loads (0) and stores (1) traced; the bytes they moved. */
    uint64_t count[2];
    uint64_t bytes;
    struct pend *pend;
    uint32_t npend;
    /* Loads and stores at the previous record (low 32 bits): a record's gap is the difference. */
    uint32_t mark;
    /* Line accesses that hit: in the same-line table or in the cache. */
    uint64_t hits;
    uint32_t index, cpu;
    struct slot_ctl *ctl;
    tc_rec_t *ring;
    /* Records published, and the most tiersim has taken as last seen; records written after
     * them but not yet published, all stamped `open_stamp` (open: the slot shows busy). */
    uint64_t n, room, staged, open_stamp;
    int open;
    /* Held while the thread's buffer and pending accesses are flushed: by the thread, or by the
     * exit handler for a thread that has not ended. */
    atomic_int flushing;
    /* Set while this thread is inside an unlocked cache access (see cache_join). */
    volatile int busy;
    struct cache *c;
    uint64_t misses, writebacks, records;
    int done;
    struct thr *next;
};

static struct {
    int active;
    uint64_t *shm;
    uint64_t ring, slots, slot_size, slots_off;
    pid_t parent, pid;
    struct tc_env env;
} cfg;

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct thr *threads;
static atomic_uint next_index;
static struct cache *shared_cache;
static struct cache **cpu_caches;
static uint32_t n_cpu_caches;
static pthread_key_t thr_key;
/* initial-exec: a plain %fs-relative load on the per-access path, not a call to
 * __tls_get_addr (the runtime is linked into the program, so its TLS is in the static block). */
static __thread struct thr *me __attribute__((tls_model("initial-exec")));
/* Where this thread's next access goes in its buffer; NULL before its first access, after its
 * end, and while the runtime is not tracing. */
static __thread uint64_t *cur __attribute__((tls_model("initial-exec")));
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
    /* rdtscp waits for the instructions before it (pub_open's locked exchange among them). */
    unsigned aux;
    return __rdtscp(&aux);
#else
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + ts.tv_nsec;
#endif
}

static const char *tc_getenv(const char *name) { return getenv(name); }

/* On cache lines: a set of 16 ways is then two whole lines, which a flush's prefetch names. (Huge
 * pages for the tag array made no difference on pagerank, and their alignment moved the program's
 * own mappings.) */
static void *tc_alloc(unsigned long bytes) {
    void *p;
    if (posix_memalign(&p, 64, bytes ? bytes : 1) != 0) die("out of memory");
    return p;
}

/* x86-64's user address space with 4-level page tables. With 5 levels a program may map above it
 * (by asking for such an address), which the 32-bit tags cannot hold. */
#define USER_ADDRESS_BITS 47

static __attribute__((noinline, cold)) void die_high_address(uint64_t addr) {
    fprintf(stderr,
            "tiersim trace runtime: an access at %#llx lies above the 47-bit user address space, which the LLC "
            "model's 32-bit tags do not cover (capture with llc_ways other than 16)\n",
            (unsigned long long)addr);
    _exit(127);
}

static struct cache *cache_new(void) {
    struct cache *c = calloc(1, sizeof *c);
    if (!c) die("cache");
    c->ways = cfg.env.ways;
    c->sets = (cfg.env.llc >> cfg.env.line_shift) / c->ways;
    c->set_mask = (c->sets & (c->sets - 1)) == 0 ? c->sets - 1 : 0;
    unsigned set_bits = (unsigned)__builtin_ctzll(c->sets);
    if (c->ways == 16 && c->set_mask && cfg.env.line_shift + set_bits + 30 >= USER_ADDRESS_BITS) {
        c->narrow = tc_alloc(c->sets * 16 * sizeof *c->narrow);
        for (uint64_t i = 0; i < c->sets * 16; i++) c->narrow[i] = TC_INVALID32;
        c->set_bits = set_bits;
    } else {
        c->tags = tc_tags_new(&cfg.env, &c->sets);
    }
    return c;
}

static inline _Atomic uint64_t *hdr(int field) { return (_Atomic uint64_t *)&cfg.shm[field]; }

static int tiersim_gone(void) {
    return atomic_load_explicit(hdr(H_GONE), memory_order_acquire) || getppid() != cfg.parent;
}

static void pause_briefly(void) {
    struct timespec ts = {0, 50000};
    nanosleep(&ts, NULL);
}

/* The ring is full: wait for tiersim to take records. It merges without waiting for this
 * thread (see pub_open), so the wait ends unless tiersim is gone, and then the program ends. */
static __attribute__((noinline)) void wait_room(struct thr *t) {
    in_rt++;
    for (;;) {
        uint64_t cons = atomic_load_explicit(&t->ctl->cons, memory_order_acquire);
        t->room = cons + cfg.ring;
        if (t->n < t->room) break;
        if (tiersim_gone()) {
            fprintf(stderr, "tiersim trace runtime: tiersim stopped taking records; ending the program\n");
            _exit(127);
        }
        pause_briefly();
    }
    in_rt--;
}

/* tiersim orders the threads' records by stamp and must know, for a thread with nothing
 * published, that its next stamp will come after the time it looks: so the slot's `busy` is set
 * with a full barrier before a stamp is taken (and the stamp is taken after it, rdtscp), and
 * cleared once the records stamped with it are published. tiersim reads the clock, then `busy`
 * clear and nothing new published, and knows this thread's next stamp is later; while `busy` is
 * set, the records to come are no earlier than the last it took. A flush's records share one
 * stamp (ties keep their order in the thread's ring). */
static void pub_open(struct thr *t) {
    atomic_exchange_explicit(&t->ctl->busy, 1, memory_order_seq_cst);
    t->open_stamp = stamp();
    t->open = 1;
}

static void pub_staged(struct thr *t) {
    t->n += t->staged;
    t->staged = 0;
    atomic_store_explicit(&t->ctl->pub, t->n, memory_order_release);
}

static void pub_close(struct thr *t) {
    if (!t->open) return;
    pub_staged(t);
    atomic_store_explicit(&t->ctl->busy, 0, memory_order_release);
    t->open = 0;
}

/* A record into the ring, published by the next pub_close (or here, when the ring is full). The
 * gap counts the thread's loads and stores up to `total`, the access that made the record. */
static inline void stage(struct thr *t, uint64_t addr, uint32_t size, int write, uint32_t total) {
    if (__builtin_expect(!t->open, 0)) pub_open(t);
    if (__builtin_expect(t->n + t->staged >= t->room, 0)) {
        pub_staged(t);
        wait_room(t);
    }
    tc_rec_t *r = &t->ring[(t->n + t->staged) & (cfg.ring - 1)];
    r->stamp = t->open_stamp;
    r->addr = addr;
    r->gap = total - t->mark;
    t->mark = total;
    r->size = (uint16_t)size;
    r->op = (uint8_t)write;
    r->pad = 0;
    t->records++;
    t->staged++;
}

/* A pending access's records, if it missed; a hit counted in *hits (the caller's register: the
 * lookups of a flush are a tight loop, and most of them hit). */
static inline __attribute__((always_inline)) void pend_access(struct thr *t, const struct pend *p, int miss, uint64_t wb,
                                                              uint64_t *hits) {
    if (__builtin_expect(!miss, 1)) {
        ++*hits;
        return;
    }
    unsigned shift = cfg.env.line_shift;
    t->misses++;
    stage(t, (p->key >> 1) << shift, 1u << shift, 0, p->total);
    if (wb != TC_INVALID) {
        t->writebacks++;
        stage(t, wb << shift, 1u << shift, 1, p->total);
    }
}

/* Pending access p through a cache of 32-bit tags: 1 on a miss, with *wb the evicted dirty line
 * (its tag with the set's bits put back) or TC_INVALID. */
static inline __attribute__((always_inline)) int narrow_access(const struct cache *c, const struct pend *p, uint64_t *wb) {
    uint32_t wb32;
    int miss = tc_set_access16n(c->narrow + (uint64_t)p->set * 16, (uint32_t)(p->key >> (1 + c->set_bits)), p->key & 1,
                                &wb32);
    *wb = wb32 == TC_INVALID32 ? TC_INVALID : (uint64_t)wb32 << c->set_bits | p->set;
    return miss;
}

/* The thread's pending accesses through its cache, in the order it made them, and their records
 * published. A cache with one user is touched without a lock (`busy` set, see cache_join); a
 * shared one takes each set's lock. The sets were prefetched as the accesses were drained; a
 * lookup's branches on the way it hits are unpredictable, so a set not in the L1 by then stalls
 * the loop, which no later lookup can overlap. Called
 * by the thread itself, or by the exit handler for a thread still alive, holding `flushing`. */
static void flush_locked(struct thr *t) {
    struct cache *c = t->c;
    uint32_t n = t->npend, ways = c->ways;
    const struct pend *p = t->pend;
    t->npend = 0;
    uint64_t hits = 0;
    t->busy = 1;
    atomic_signal_fence(memory_order_seq_cst);
    if (__builtin_expect(!c->shared, 1)) {
        uint64_t wb;
        if (c->narrow)
            for (uint32_t i = 0; i < n; i++) {
                if (i + PREFETCH_AHEAD < n) __builtin_prefetch(c->narrow + (uint64_t)p[i + PREFETCH_AHEAD].set * 16, 1);
                int miss = narrow_access(c, &p[i], &wb);
                pend_access(t, &p[i], miss, wb, &hits);
            }
        else if (ways == 16)
            for (uint32_t i = 0; i < n; i++) {
                /* Again, a few ahead: the drain's prefetches may have left the L1 since. */
                if (i + PREFETCH_AHEAD < n) {
                    const uint64_t *ahead = c->tags + (uint64_t)p[i + PREFETCH_AHEAD].set * 16;
                    __builtin_prefetch(ahead, 1);
                    __builtin_prefetch(ahead + 15, 1);
                }
                int miss = tc_set_access(c->tags + (uint64_t)p[i].set * 16, 16, p[i].key >> 1, p[i].key & 1, &wb);
                pend_access(t, &p[i], miss, wb, &hits);
            }
        else
            for (uint32_t i = 0; i < n; i++) {
                int miss =
                    tc_set_access_any(c->tags + (uint64_t)p[i].set * ways, ways, p[i].key >> 1, p[i].key & 1, &wb);
                pend_access(t, &p[i], miss, wb, &hits);
            }
        atomic_signal_fence(memory_order_seq_cst);
        t->busy = 0;
    } else {
        t->busy = 0;
        for (uint32_t i = 0; i < n; i++) {
            uint64_t wb;
            atomic_uchar *l = &c->locks[p[i].set % NLOCKS];
            while (atomic_exchange_explicit(l, 1, memory_order_acquire)) {
            }
            int miss;
            if (c->narrow)
                miss = narrow_access(c, &p[i], &wb);
            else
                miss = tc_set_access_any(c->tags + (uint64_t)p[i].set * ways, ways, p[i].key >> 1, p[i].key & 1, &wb);
            atomic_store_explicit(l, 0, memory_order_release);
            pend_access(t, &p[i], miss, wb, &hits);
        }
    }
    t->hits += hits;
    pub_close(t);
}

static void flush_lock(struct thr *t) {
    while (atomic_exchange_explicit(&t->flushing, 1, memory_order_acquire)) sched_yield();
}

static void flush_unlock(struct thr *t) { atomic_store_explicit(&t->flushing, 0, memory_order_release); }

/* A line the same-line table did not settle: pending until the next flush, its set's tags
 * prefetched now (`narrow`, or else the cache's 64-bit tags). The table entry is rewritten at once:
 * the pending accesses reach the cache in order before any later one, so the entry's line is its
 * set's most recent by the time a later access would meet it. Returns the pending accesses now
 * held (t->npend is the caller's, in a register, until it calls flush_locked). */
static inline __attribute__((always_inline)) uint32_t pend_line(struct thr *t, const uint32_t *narrow, unsigned shift,
                                                                uint32_t np, uint64_t *e, uint64_t line, uint64_t write,
                                                                uint64_t set, uint64_t total) {
    if (narrow) {
        if (__builtin_expect(line >> (USER_ADDRESS_BITS - shift), 0)) die_high_address(line << shift);
        __builtin_prefetch(narrow + set * 16, 1);
    } else {
        const struct cache *c = t->c;
        const uint64_t *st = c->tags + set * c->ways;
        __builtin_prefetch(st, 1);
        __builtin_prefetch(st + c->ways - 1, 1);
    }
    struct pend *p = &t->pend[np];
    p->key = line << 1 | write;
    p->set = (uint32_t)set;
    p->total = (uint32_t)total;
    *e = line << 1 | write;
    if (++np < PEND) return np;
    t->npend = np;
    flush_locked(t);
    return 0;
}

/* Buffered accesses [b, end) cut into lines through the same-line table: returns the hits, every
 * other line pending (pend_line). Inlined with the usual cache's constants (sets a power of two,
 * 64-byte lines), so that the loop keeps the cache's fields and the thread's counters in
 * registers (a general loop reloaded and spilled them at every access). */
static inline __attribute__((always_inline)) uint64_t drain_lines(struct thr *t, const uint64_t *b, const uint64_t *end,
                                                                  uint64_t total, const unsigned shift,
                                                                  const uint32_t *narrow, const int pow2) {
    const uint64_t mask = t->c->set_mask, sets = t->c->sets, tab_mask = t->tab_mask;
    uint64_t *const tab = t->tab;
    uint64_t hits = 0;
    uint32_t np = t->npend;
    for (; b < end; b++) {
        uint64_t v = *b, addr = v >> 8, write = v & 1, size = (v >> 1) & 127;
        total++;
        uint64_t line = addr >> shift, last = (addr + (size ? size : 1) - 1) >> shift;
        for (;; line++) {
            uint64_t *e = &tab[line & tab_mask];
            if (TC_TAB_HIT(*e, line, write))
                hits++;
            else
                np = pend_line(t, narrow, shift, np, e, line, write, pow2 ? line & mask : line % sets, total);
            if (__builtin_expect(line == last, 1)) break;
        }
    }
    t->npend = np;
    return hits;
}

/* Buffered accesses [b, end) counted, and through the same-line table (drain_lines). Without a
 * cache, every access is a record. */
static void drain(struct thr *t, const uint64_t *b, const uint64_t *end) {
    uint64_t total = t->count[0] + t->count[1], stores = 0, bytes = 0, n = (uint64_t)(end - b);
    struct cache *c = t->c;
    /* A pass of its own (the buffer is in the L1), which leaves drain_lines' registers to it. */
    for (const uint64_t *q = b; q < end; q++) {
        stores += *q & 1;
        bytes += (*q >> 1) & 127;
    }
    if (!c) {
        for (; b < end; b++) {
            uint64_t v = *b;
            stage(t, v >> 8, (v >> 1) & 127, v & 1, (uint32_t)++total);
        }
        pub_close(t);
    } else if (c->set_mask && cfg.env.line_shift == 6) {
        t->hits += drain_lines(t, b, end, total, 6, c->narrow, 1);
    } else {
        t->hits += drain_lines(t, b, end, total, cfg.env.line_shift, c->narrow, c->set_mask != 0);
    }
    t->count[1] += stores;
    t->count[0] += n - stores;
    t->bytes += bytes;
}

/* Everything the thread has buffered and pending, through its cache, and the records published.
 * Called with `flushing` held; `end` is where the thread's buffer ends. */
static void flush_all(struct thr *t, const uint64_t *end) {
    if (t->done) return;
    drain(t, t->buf, end);
    if (t->npend) flush_locked(t);
}

/* Where the program synchronises with other threads through the runtime (atomics, fences,
 * pthread_create): its records so far are published, stamped before the synchronisation, so
 * that the merge orders them before anything another thread does after it. */
static __attribute__((noinline)) void sync_flush(struct thr *t) {
    uint64_t *end = cur;
    cur = NULL;
    flush_lock(t);
    flush_all(t, end);
    cur = t->buf;
    flush_unlock(t);
}

static inline void sync_point(void) {
    struct thr *t = me;
    if (t && cur && (cur != t->buf || t->npend)) sync_flush(t);
}

static void thread_end(void *p) {
    struct thr *t = p;
    uint64_t *end = cur;
    cur = NULL;
    flush_lock(t);
    if (end) flush_all(t, end);
    t->done = 1;
    flush_unlock(t);
    atomic_store_explicit(&t->ctl->done, 1, memory_order_release);
}

/* Thread t starts using cache c (called with reg_lock held). A cache with one user is touched
 * without locks. When a second user comes, the cache turns to its set locks, and an access the
 * first user may be making without a lock at that moment must end first: the joiner sets
 * `shared`, then membarrier(2) runs a full memory barrier on every thread of the process, so
 * each user either sees `shared` at its next access or shows `busy` set, which the joiner waits
 * out. The users' path thus needs no atomic instruction. */
static void cache_join(struct thr *t, struct cache *c) {
    t->c = c;
    if (c->users++ == 0) {
        if (cfg.env.per_cpu && c->set_mask) t->tab_mask = (c->sets < TC_TAB ? c->sets : TC_TAB) - 1;
        return;
    }
    if (c->shared) return;
    c->shared = 1;
    /* The other users' tables shrink to one entry, seen by them after the barrier below. */
    for (struct thr *u = threads; u; u = u->next)
        if (u->c == c) {
            u->tab_mask = 0;
            u->tab[0] = TC_INVALID;
        }
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
    if (!t) die("thread state");
    memset(t, 0, sizeof *t);
    t->index = my_index != UINT32_MAX ? my_index : atomic_fetch_add(&next_index, 1);
    t->cpu = tc_cpu_of(&cfg.env, t->index);
    t->tab = aligned_alloc(64, TC_TAB * sizeof *t->tab);
    if (!t->tab) die("thread state");
    for (uint32_t i = 0; i < TC_TAB; i++) t->tab[i] = TC_INVALID;
    t->pend = aligned_alloc(64, PEND * sizeof *t->pend);
    t->buf = aligned_alloc(BUF_BYTES, BUF_BYTES);
    if (!t->pend || !t->buf) die("thread state");
    t->cur = &cur;
    uint64_t k = atomic_fetch_add(hdr(H_RESERVED), 1);
    if (k >= cfg.slots) {
        fprintf(stderr, "tiersim trace runtime: the program started more than %llu threads, the most a capture follows\n",
                (unsigned long long)cfg.slots);
        _exit(127);
    }
    char *slot = (char *)cfg.shm + cfg.slots_off + k * cfg.slot_size;
    t->ctl = (struct slot_ctl *)slot;
    t->ring = (tc_rec_t *)(slot + 4096);
    t->room = cfg.ring;
    t->ctl->index = t->index;
    t->ctl->cpu = t->cpu;
    atomic_store_explicit(&t->ctl->state, 1, memory_order_release);
    pthread_mutex_lock(&reg_lock);
    if (cfg.env.llc) {
        if (!cfg.env.per_cpu) {
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
    cur = t->buf;
    in_rt--;
    return t;
}

/* The per-access path's calls out (buffer_full, access_first) keep the caller's general-purpose
 * registers (clang's preserve_most, on x86-64): inlined by LTO into every load and store of the
 * program, a call with the C convention made each loop keep its values clear of the registers
 * such a call clobbers, and the loops spilled and reloaded them (pagerank's main: 644 stack
 * references, 346 with it, its program CPU about 3 % less). Vector registers stay the caller's to
 * save: the runtime is built without AVX, so it could not keep the upper halves of an AVX
 * caller's registers, which preserve_all would promise. Neither returns a value: clang 14 restores
 * RAX in a preserve_most function's epilogue, over the value it returns (a buffer_full that
 * returned the new buffer crashed the program). */
#if defined(__clang__) && defined(__x86_64__)
#define TC_SLOW_PATH __attribute__((preserve_most))
#else
#define TC_SLOW_PATH
#endif

/* The thread's buffer is full: drained, and its pending lines through the cache, so that a
 * record is never stamped more than a buffer's accesses after the access that made it. */
static __attribute__((noinline)) TC_SLOW_PATH void buffer_full(void) {
    struct thr *t = me;
    /* Accesses a signal handler makes meanwhile find no buffer and are not traced (rather than
     * written past its end, or into the entries being drained). */
    cur = NULL;
    flush_lock(t);
    flush_all(t, t->buf + BUF);
    cur = t->buf;
    flush_unlock(t);
}

/* An access with no buffer to go to: the thread's first (it attaches), or one made after its end,
 * or while the runtime itself runs or traces nothing (not traced). */
static __attribute__((noinline)) TC_SLOW_PATH void access_first(uint64_t v) {
    if (me) return;
    struct thr *t = attach();
    if (!t) return;
    *cur++ = v;
}

/* The per-access path, inlined into every __tsan_* entry: the access goes into the thread's
 * buffer, with no load that may miss and nothing that depends on the cache model, so that the
 * program's own misses overlap as they do natively; the model's work waits for the buffer to fill.
 * Anything else is a tail call, so the path saves no register. */
static inline __attribute__((always_inline)) void access_mem(uintptr_t addr, uint32_t size, int write) {
    uint64_t *p = cur, v = (uint64_t)addr << 8 | size << 1 | (uint64_t)write;
    if (__builtin_expect(p != NULL, 1)) {
        *p++ = v;
        cur = p;
        if (__builtin_expect(((uintptr_t)p & (BUF_BYTES - 1)) != 0, 1)) return;
        buffer_full();
        return;
    }
    access_first(v);
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
    char *out = (char *)cfg.shm + cfg.shm[H_SUMMARY_OFF];
    size_t cap = cfg.shm[H_SUMMARY_SIZE], len = 0;
    uint64_t dirty = 0;
    struct cache *all[1 + 4096];
    uint32_t nc = 0;
    if (shared_cache) all[nc++] = shared_cache;
    for (uint32_t i = 0; i < n_cpu_caches && nc < 4097; i++)
        if (cpu_caches[i]) all[nc++] = cpu_caches[i];
    for (uint32_t k = 0; k < nc; k++)
        if (all[k]->narrow)
            for (uint64_t i = 0; i < all[k]->sets * 16; i++)
                dirty += all[k]->narrow[i] != TC_INVALID32 && (all[k]->narrow[i] & 1);
        else
            dirty += tc_dirty_lines(all[k]->tags, all[k]->sets * all[k]->ways);
#define PUT(...) (len += (size_t)snprintf(out + len, len < cap ? cap - len : 0, __VA_ARGS__))
    PUT("version 1\ncaches %u\ndirty_at_exit %llu\npagemap off\n", nc, (unsigned long long)dirty);
    for (struct thr *t = threads; t; t = t->next)
        PUT("thread %u cpu %u loads %llu stores %llu bytes %llu hits %llu misses %llu writebacks %llu records %llu\n",
            t->index, t->cpu, (unsigned long long)t->count[0], (unsigned long long)t->count[1],
            (unsigned long long)t->bytes,
            (unsigned long long)t->hits, (unsigned long long)t->misses,
            (unsigned long long)t->writebacks, (unsigned long long)t->records);
#undef PUT
    if (len >= cap) {
        fprintf(stderr, "tiersim trace runtime: the summary does not fit in %zu bytes\n", cap);
        len = 0;
    }
    atomic_store_explicit(hdr(H_SUMMARY_LEN), len, memory_order_relaxed);
}

/* fork is not followed: the child traces nothing, and its threads' rings stay the parent's. */
static void forked(void) {
    cfg.active = 0;
    me = NULL;
    cur = NULL;
}

/* The records are all published: say so, and wait until tiersim has merged them, so that it
 * reads pagemap while this process still has its pages. */
static void at_exit(void) {
    /* A forked child's exit is not the traced program's. */
    if (getpid() != cfg.pid) return;
    in_rt++;
    pthread_mutex_lock(&reg_lock);
    /* A thread still alive (blocked, or a pool's idle worker) may hold pending accesses: they are
     * its records up to now, flushed here as it would have. One that is still running races with
     * the exit, as its accesses at this moment always did. */
    for (struct thr *t = threads; t; t = t->next)
        if (!t->done) {
            flush_lock(t);
            uint64_t *end = *t->cur;
            *t->cur = NULL;
            if (end) flush_all(t, end);
            t->done = 1;
            flush_unlock(t);
            atomic_store_explicit(&t->ctl->done, 1, memory_order_release);
        }
    summary();
    pthread_mutex_unlock(&reg_lock);
    cfg.active = 0;
    atomic_store_explicit(hdr(H_FINISHED), 1, memory_order_release);
    while (!atomic_load_explicit(hdr(H_MERGED), memory_order_acquire) && !tiersim_gone()) pause_briefly();
}

void __tsan_init(void) {
    static int once;
    if (once++) return;
    in_rt++;
    real_memcpy = dlsym(RTLD_NEXT, "memcpy");
    real_memmove = dlsym(RTLD_NEXT, "memmove");
    real_memset = dlsym(RTLD_NEXT, "memset");
    const char *fd_text = getenv("TIERSIM_SHM_FD");
    if (!fd_text || !*fd_text) {
        fprintf(stderr, "tiersim trace runtime: TIERSIM_SHM_FD is not set, so nothing is traced "
                        "(run the program with `tiersim capture --instrumented`)\n");
        in_rt--;
        return;
    }
    /* Programs this one execs inherit the environment, not the descriptor: they run untraced. */
    unsetenv("TIERSIM_SHM_FD");
    int fd = atoi(fd_text);
    struct stat st;
    if (fstat(fd, &st) != 0) die("the shared memory descriptor");
    cfg.shm = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (cfg.shm == MAP_FAILED) die("mapping the shared memory");
    close(fd);
    if (cfg.shm[H_MAGIC] != SHM_MAGIC || cfg.shm[H_VERSION] != SHM_VERSION) {
        fprintf(stderr, "tiersim trace runtime: the shared memory is not version %u's: rebuild the program "
                        "with this tiersim's runtime\n", SHM_VERSION);
        _exit(127);
    }
    cfg.ring = cfg.shm[H_RING];
    cfg.slots = cfg.shm[H_SLOTS];
    cfg.slot_size = cfg.shm[H_SLOT_SIZE];
    cfg.slots_off = cfg.shm[H_SLOTS_OFF];
    cfg.parent = getppid();
    cfg.pid = getpid();
    atomic_store_explicit(hdr(H_LOADED), SHM_VERSION, memory_order_release);
    tc_env_read(&cfg.env);
    pthread_key_create(&thr_key, thread_end);
    pthread_atfork(NULL, NULL, forked);
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
    sync_point();
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
        sync_point();                                                                    \
        return op(a, v, __ATOMIC_SEQ_CST);                                               \
    }
#define ATOMICS(bits, T)                                                                 \
    T __tsan_atomic##bits##_load(const volatile T *a, int mo) {                          \
        (void)mo;                                                                        \
        access_mem((uintptr_t)a, sizeof(T), 0);                                          \
        sync_point();                                                                    \
        return __atomic_load_n(a, __ATOMIC_SEQ_CST);                                     \
    }                                                                                    \
    void __tsan_atomic##bits##_store(volatile T *a, T v, int mo) {                       \
        (void)mo;                                                                        \
        access_mem((uintptr_t)a, sizeof(T), 1);                                          \
        sync_point();                                                                    \
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
        sync_point();                                                                    \
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
    sync_point();
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
void __tsan_atomic_signal_fence(int mo) {
    (void)mo;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
}
