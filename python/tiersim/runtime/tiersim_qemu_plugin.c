/* A QEMU user-mode TCG plugin of tiersim's own (`qemu-x86_64 -plugin tiersim_qemu_plugin.so`):
 * the second candidate of issue 36 for programs that cannot be rebuilt, beside the Valgrind tool
 * (tiersim_vg_tool.c). A memory callback per guest load and store passes the access through the
 * same LLC model as the tracing runtime (tiersim_trace_rt.c: set-associative, LRU, write-back,
 * write-allocate, set = line number modulo sets) and keeps the fills and dirty evictions, as
 * binary records in the Valgrind tool's directory layout (t<thread>.bin, summary), which tiersim
 * merges the same way. Guest threads run concurrently, one host thread each; records carry the
 * TSC as their stamp. Time is guest instructions, counted per translation block when the block
 * starts (so a record's gap can include the rest of its block). Threads are numbered when QEMU
 * creates their vCPU (creation order, the main thread 0). No pagemap: the physical trace takes
 * the buddy model. Built by tiersim (_capture.qemu_plugin) with $CC; docs/capture.md.
 *
 * Debian's qemu-user ships no plugin header, so the plugin ABI (QEMU 7.2, plugin API version 1,
 * include/qemu/qemu-plugin.h) is declared below: the types and the few functions used, which the
 * qemu binary exports to the plugins it loads. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <x86intrin.h>
#include "tiersim_capture.h"

/* --- QEMU plugin ABI, version 1 (QEMU 7.2) --- */
typedef uint64_t qemu_plugin_id_t;
typedef uint32_t qemu_plugin_meminfo_t;
typedef struct qemu_info_t {
    const char *target_name;
    struct {
        int min;
        int cur;
    } version;
    bool system_emulation;
    union {
        struct {
            int smp_vcpus;
            int max_vcpus;
        } system;
    };
} qemu_info_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;
enum qemu_plugin_cb_flags { QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_CB_R_REGS, QEMU_PLUGIN_CB_RW_REGS };
enum qemu_plugin_mem_rw { QEMU_PLUGIN_MEM_R = 1, QEMU_PLUGIN_MEM_W, QEMU_PLUGIN_MEM_RW };
typedef void (*qemu_plugin_vcpu_tb_trans_cb_t)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);
typedef void (*qemu_plugin_vcpu_udata_cb_t)(unsigned int vcpu_index, void *userdata);
typedef void (*qemu_plugin_vcpu_simple_cb_t)(qemu_plugin_id_t id, unsigned int vcpu_index);
typedef void (*qemu_plugin_vcpu_mem_cb_t)(unsigned int vcpu_index, qemu_plugin_meminfo_t info, uint64_t vaddr,
                                          void *userdata);
typedef void (*qemu_plugin_udata_cb_t)(qemu_plugin_id_t id, void *userdata);
void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_tb_trans_cb_t cb);
void qemu_plugin_register_vcpu_tb_exec_cb(struct qemu_plugin_tb *tb, qemu_plugin_vcpu_udata_cb_t cb,
                                          enum qemu_plugin_cb_flags flags, void *userdata);
void qemu_plugin_register_vcpu_mem_cb(struct qemu_plugin_insn *insn, qemu_plugin_vcpu_mem_cb_t cb,
                                      enum qemu_plugin_cb_flags flags, enum qemu_plugin_mem_rw rw, void *userdata);
void qemu_plugin_register_vcpu_init_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_simple_cb_t cb);
void qemu_plugin_register_vcpu_exit_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_simple_cb_t cb);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, qemu_plugin_udata_cb_t cb, void *userdata);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
unsigned int qemu_plugin_mem_size_shift(qemu_plugin_meminfo_t info);
bool qemu_plugin_mem_is_store(qemu_plugin_meminfo_t info);
__attribute__((visibility("default"))) int qemu_plugin_version = 1;
/* --- end of the ABI --- */

#define BUF_RECS (1u << 16)
#define MAX_VCPUS 4096

struct cache {
    uint64_t sets;
    uint32_t ways, users;
    uint64_t *tags; /* per set, in recency order, line << 1 | dirty */
    pthread_mutex_t lock;
};

struct thr {
    uint32_t index, cpu;
    int fd;
    tc_rec_t *buf;
    uint32_t n;
    int done;
    uint64_t instrs, last_instr;
    uint64_t loads, stores, bytes, hits, misses, writebacks, records;
    struct cache *c;
    /* As in tiersim_trace_rt.c: per group of sets (set & tab_mask), the line this thread touched
     * last in it << 1 | whether that access wrote it; that line is its set's most recent, so a
     * load of it, or a store when the entry shows it dirty, changes nothing and skips the cache.
     * Used only while the thread is its cache's one user. */
    uint64_t tab[TC_TAB], tab_mask;
    struct thr *next;
};

static struct {
    char dir[4096];
    struct tc_env env;
} cfg;

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct thr *by_vcpu[MAX_VCPUS];
static struct thr *threads;
static uint32_t next_index;
static struct cache *shared_cache, **cpu_caches;
static uint32_t n_cpu_caches;

static void die(const char *what) {
    fprintf(stderr, "tiersim QEMU plugin: %s\n", what);
    _exit(127);
}

static const char *tc_getenv(const char *name) { return getenv(name); }

static void *tc_alloc(unsigned long bytes) {
    void *p = malloc(bytes);
    if (!p) die("out of memory");
    return p;
}

static struct cache *cache_new(void) {
    struct cache *c = calloc(1, sizeof *c);
    if (!c) die("out of memory");
    c->ways = cfg.env.ways;
    c->tags = tc_tags_new(&cfg.env, &c->sets);
    pthread_mutex_init(&c->lock, NULL);
    return c;
}

static void flush(struct thr *t) {
    const char *p = (const char *)t->buf;
    size_t left = t->n * sizeof(tc_rec_t);
    while (left) {
        ssize_t w = write(t->fd, p, left);
        if (w <= 0) die("writing the records failed");
        p += w;
        left -= (size_t)w;
    }
    t->n = 0;
}

static void emit(struct thr *t, uint64_t addr, uint32_t size, int write) {
    tc_rec_t *r = &t->buf[t->n];
    uint64_t gap = t->instrs - t->last_instr;
    r->stamp = __rdtsc();
    r->addr = addr;
    r->gap = gap > UINT32_MAX ? UINT32_MAX : (uint32_t)gap;
    r->size = (uint16_t)size;
    r->op = (uint8_t)write;
    r->pad = 0;
    t->last_instr = t->instrs;
    t->records++;
    if (++t->n == BUF_RECS) flush(t);
}

static void vcpu_init(qemu_plugin_id_t id, unsigned int vcpu) {
    (void)id;
    if (vcpu >= MAX_VCPUS) die("more than 4096 threads");
    struct thr *t = calloc(1, sizeof *t);
    char path[4200];
    if (!t) die("out of memory");
    pthread_mutex_lock(&reg_lock);
    t->index = next_index++;
    t->cpu = tc_cpu_of(&cfg.env, t->index);
    t->buf = malloc(BUF_RECS * sizeof(tc_rec_t));
    for (uint32_t i = 0; i < TC_TAB; i++) t->tab[i] = TC_INVALID;
    snprintf(path, sizeof path, "%s/t%u.bin", cfg.dir, t->index);
    t->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (!t->buf || t->fd < 0) die("cannot create a record file");
    if (cfg.env.llc) {
        if (!cfg.env.per_cpu) {
            if (!shared_cache) shared_cache = cache_new();
            t->c = shared_cache;
        } else {
            if (t->cpu >= n_cpu_caches) {
                cpu_caches = realloc(cpu_caches, (t->cpu + 1) * sizeof *cpu_caches);
                if (!cpu_caches) die("out of memory");
                for (uint32_t i = n_cpu_caches; i <= t->cpu; i++) cpu_caches[i] = NULL;
                n_cpu_caches = t->cpu + 1;
            }
            if (!cpu_caches[t->cpu]) cpu_caches[t->cpu] = cache_new();
            t->c = cpu_caches[t->cpu];
        }
        __atomic_add_fetch(&t->c->users, 1, __ATOMIC_SEQ_CST);
        uint64_t sets = t->c->sets;
        if ((sets & (sets - 1)) == 0) t->tab_mask = (sets < TC_TAB ? sets : TC_TAB) - 1;
    }
    t->next = threads;
    threads = t;
    by_vcpu[vcpu] = t;
    pthread_mutex_unlock(&reg_lock);
}

static void vcpu_exit(qemu_plugin_id_t id, unsigned int vcpu) {
    (void)id;
    pthread_mutex_lock(&reg_lock);
    struct thr *t = vcpu < MAX_VCPUS ? by_vcpu[vcpu] : NULL;
    if (t && !t->done) {
        flush(t);
        t->done = 1;
    }
    /* QEMU gives the vCPU index to a later thread: that one is a new thread. */
    if (vcpu < MAX_VCPUS) by_vcpu[vcpu] = NULL;
    pthread_mutex_unlock(&reg_lock);
}

static void tb_exec(unsigned int vcpu, void *n_insns) {
    struct thr *t = by_vcpu[vcpu];
    if (t) t->instrs += (uintptr_t)n_insns;
}

static void mem_access(unsigned int vcpu, qemu_plugin_meminfo_t info, uint64_t vaddr, void *udata) {
    (void)udata;
    struct thr *t = by_vcpu[vcpu];
    if (!t || t->done) return;
    uint32_t size = 1u << qemu_plugin_mem_size_shift(info);
    int write = qemu_plugin_mem_is_store(info);
    t->loads += !write;
    t->stores += write;
    t->bytes += size;
    struct cache *c = t->c;
    if (!c) {
        emit(t, vaddr, size, write);
        return;
    }
    uint64_t first = vaddr >> cfg.env.line_shift, last = (vaddr + size - 1) >> cfg.env.line_shift;
    if (first == last && c->users == 1) {
        uint64_t *e = &t->tab[first & t->tab_mask];
        if (TC_TAB_HIT(*e, first, write)) {
            t->hits++;
            return;
        }
        *e = first << 1 | (uint64_t)write;
    }
    /* A cache with more than one user (shared, or threads sharing a CPU) takes its lock. */
    int locked = c->users > 1;
    if (locked) pthread_mutex_lock(&c->lock);
    for (uint64_t line = first; line <= last; line++) {
        uint64_t wb;
        if (tc_set_access_any(c->tags + (line % c->sets) * c->ways, c->ways, line, write, &wb)) {
            t->misses++;
            emit(t, line << cfg.env.line_shift, 1u << cfg.env.line_shift, 0);
            if (wb != TC_INVALID) {
                t->writebacks++;
                emit(t, wb << cfg.env.line_shift, 1u << cfg.env.line_shift, 1);
            }
        } else {
            t->hits++;
        }
    }
    if (locked) pthread_mutex_unlock(&c->lock);
}

static void tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
    (void)id;
    size_t n = qemu_plugin_tb_n_insns(tb);
    qemu_plugin_register_vcpu_tb_exec_cb(tb, tb_exec, QEMU_PLUGIN_CB_NO_REGS, (void *)(uintptr_t)n);
    for (size_t i = 0; i < n; i++)
        qemu_plugin_register_vcpu_mem_cb(qemu_plugin_tb_get_insn(tb, i), mem_access, QEMU_PLUGIN_CB_NO_REGS,
                                         QEMU_PLUGIN_MEM_RW, NULL);
}

static void at_exit(qemu_plugin_id_t id, void *udata) {
    (void)id;
    (void)udata;
    char path[4200], tmp[4200];
    uint64_t dirty = 0;
    uint32_t nc = 0;
    pthread_mutex_lock(&reg_lock);
    for (struct thr *t = threads; t; t = t->next)
        if (!t->done) {
            flush(t);
            t->done = 1;
        }
    struct cache *all[1 + MAX_VCPUS];
    if (shared_cache) all[nc++] = shared_cache;
    for (uint32_t i = 0; i < n_cpu_caches && nc <= MAX_VCPUS; i++)
        if (cpu_caches[i]) all[nc++] = cpu_caches[i];
    for (uint32_t k = 0; k < nc; k++)
        dirty += tc_dirty_lines(all[k]->tags, all[k]->sets * all[k]->ways);
    /* Written to a temporary name and renamed: a summary is whole or absent. */
    snprintf(path, sizeof path, "%s/summary", cfg.dir);
    snprintf(tmp, sizeof tmp, "%s/summary.part", cfg.dir);
    FILE *f = fopen(tmp, "w");
    if (!f) die("cannot write the summary");
    fprintf(f, "version 1\ntracer qemu_plugin\ntime instructions\ncaches %u\ndirty_at_exit %llu\npagemap off\n", nc,
            (unsigned long long)dirty);
    for (struct thr *t = threads; t; t = t->next)
        fprintf(f,
                "thread %u cpu %u loads %llu stores %llu bytes %llu hits %llu misses %llu writebacks %llu records %llu "
                "instructions %llu\n",
                t->index, t->cpu, (unsigned long long)t->loads, (unsigned long long)t->stores,
                (unsigned long long)t->bytes, (unsigned long long)t->hits, (unsigned long long)t->misses,
                (unsigned long long)t->writebacks, (unsigned long long)t->records, (unsigned long long)t->instrs);
    if (fclose(f) != 0 || rename(tmp, path) != 0) die("cannot write the summary");
    pthread_mutex_unlock(&reg_lock);
}

__attribute__((visibility("default"))) int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc,
                                                               char **argv) {
    (void)info;
    (void)argc;
    (void)argv;
    const char *dir = getenv("TIERSIM_CAPTURE_DIR");
    if (!dir || !*dir) {
        fprintf(stderr, "tiersim QEMU plugin: TIERSIM_CAPTURE_DIR is not set (run it with `tiersim capture`)\n");
        return -1;
    }
    snprintf(cfg.dir, sizeof cfg.dir, "%s", dir);
    tc_env_read(&cfg.env);
    qemu_plugin_register_vcpu_init_cb(id, vcpu_init);
    qemu_plugin_register_vcpu_exit_cb(id, vcpu_exit);
    qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
    qemu_plugin_register_atexit_cb(id, at_exit, NULL);
    return 0;
}
