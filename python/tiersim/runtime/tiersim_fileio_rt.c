/* tiersim's file I/O shim (LD_PRELOAD): logs the system calls that move file data so that
 * `tiersim workload capture` can put them in the trace as file records (docs/capture.md, "File I/O").
 * It wraps open/openat/creat/close, read/pread/write/pwrite and their vector forms, fsync/fdatasync
 * and mmap/munmap of regular files, appends one text line per call to $TIERSIM_FILEIO_LOG, and marks
 * where the call happened in the memory trace with a load of a line of its own in a reserved region
 * (the i-th call loads base + 64 i): the capture sees that load on the calling thread at its time.
 *
 * Built with -DTIERSIM_WAITS (recipes that ask for it: `waits` in workloads/__init__.py), it also
 * logs the waits between threads that reach the kernel's futex: a condition variable's wait and
 * its signal/broadcast, and a mutex lock that found the mutex held (its trylock failed) and the
 * unlock that may wake it ("Q word" a wait begins, "q word" it returned, "K word" a wake, logged
 * before the wake itself so that it precedes the wait's return in the trace). workloads/_fileio.py
 * turns them into futex records (docs/trace-format.md). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

/* 2^24 calls of 64 B lines: a 1 GiB reservation that costs nothing until touched (each touched page
 * is the shared zero page). */
#define MARKER_BYTES (1ULL << 30)
#define MAX_FD 65536

static int log_fd = -1;
static volatile char *markers;
static atomic_uint_fast64_t next_call;
/* Per descriptor: 0 not a traced file, 1 a regular file, 2 a regular file opened O_DIRECT. */
static unsigned char fd_kind[MAX_FD];
static void (*tsan_read8)(void *);
/* File mappings made so far: munmap is logged only once there has been one. */
static atomic_int file_maps;

/* The wrapped calls go to the kernel directly, not through dlsym(RTLD_NEXT): an allocator's
 * constructor (jemalloc's in redis-server) reads files before this one runs, and dlsym there
 * allocates, re-entering the allocator's initialisation and deadlocking. */
static ssize_t real_read(int fd, void *b, size_t n) { return syscall(SYS_read, fd, b, n); }
static ssize_t real_write(int fd, const void *b, size_t n) { return syscall(SYS_write, fd, b, n); }
static ssize_t real_pread(int fd, void *b, size_t n, off_t o) { return syscall(SYS_pread64, fd, b, n, o); }
static ssize_t real_pwrite(int fd, const void *b, size_t n, off_t o) { return syscall(SYS_pwrite64, fd, b, n, o); }
static ssize_t real_readv(int fd, const struct iovec *v, int c) { return syscall(SYS_readv, fd, v, c); }
static ssize_t real_writev(int fd, const struct iovec *v, int c) { return syscall(SYS_writev, fd, v, c); }
static ssize_t real_preadv(int fd, const struct iovec *v, int c, off_t o) { return syscall(SYS_preadv, fd, v, c, o, 0); }
static ssize_t real_pwritev(int fd, const struct iovec *v, int c, off_t o) {
    return syscall(SYS_pwritev, fd, v, c, o, 0);
}
static int real_openat(int dirfd, const char *p, int flags, mode_t mode) {
    return (int)syscall(SYS_openat, dirfd, p, flags, mode);
}
static int real_open(const char *p, int flags, mode_t mode) { return real_openat(AT_FDCWD, p, flags, mode); }
static int real_close(int fd) { return (int)syscall(SYS_close, fd); }
static int real_fsync(int fd) { return (int)syscall(SYS_fsync, fd); }
static int real_fdatasync(int fd) { return (int)syscall(SYS_fdatasync, fd); }
static void *real_mmap(void *a, size_t n, int prot, int flags, int fd, off_t o) {
    return (void *)syscall(SYS_mmap, a, n, prot, flags, fd, o);
}
static int real_munmap(void *a, size_t n) { return (int)syscall(SYS_munmap, a, n); }

__attribute__((constructor)) static void init(void) {
    /* On the instrumented path the tracing runtime defines __tsan_read8 in the program; a call to
     * it records the marker. Under Valgrind there is none and the load itself is seen. */
    tsan_read8 = (void (*)(void *))dlsym(RTLD_DEFAULT, "__tsan_read8");
    const char *path = getenv("TIERSIM_FILEIO_LOG");
    if (path == NULL)
        return;
    void *m = real_mmap(NULL, MARKER_BYTES, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED)
        return;
    markers = m;
    log_fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0)
        return;
    char line[96];
    int n = snprintf(line, sizeof line, "B %p %llu %d\n", m, (unsigned long long)MARKER_BYTES, (int)getpid());
    syscall(SYS_write, log_fd, line, (size_t)n);
}

/* One log line for call number i, then the marker load that places it in the trace. */
static void emit(const char *fmt, ...) {
    uint64_t i = atomic_fetch_add(&next_call, 1);
    if (64 * (i + 1) > MARKER_BYTES)
        return;
    char line[4200];
    /* The pid, so that a forked child's calls (which continue the parent's numbering) are told
     * apart and left out. */
    int n = snprintf(line, sizeof line, "%d %llu ", (int)getpid(), (unsigned long long)i);
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof line - 1)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    syscall(SYS_write, log_fd, line, (size_t)n);
    volatile char *p = markers + 64 * i;
    if (tsan_read8 != NULL)
        tsan_read8((void *)p);
    else
        (void)*p;
}

static int traced(int fd) { return log_fd >= 0 && fd >= 0 && fd < MAX_FD && fd_kind[fd] != 0; }

static void opened(int fd, int flags, const char *path) {
    if (log_fd < 0 || fd < 0 || fd >= MAX_FD)
        return;
    struct stat st;
    fd_kind[fd] = 0;
    /* The tracing runtime's own record files (instrumented path): tracing them would add accesses
     * while the runtime writes them out. */
    if (strstr(path, ".tiersim-capture-") != NULL)
        return;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        return;
    fd_kind[fd] = (flags & O_DIRECT) ? 2 : 1;
    /* The size after the open: what the file held when the program opened it, 0 when this open
     * created it (O_CREAT) or truncated it (O_TRUNC). Its pages past that are holes until written,
     * which a partial write fills without reading the device (docs/model.md "Partial writes to
     * new pages"); the merge keeps the size of a file's first open (_fileio.py). */
    emit("O %d %d %llu:%llu %lld %s", fd, fd_kind[fd] == 2, (unsigned long long)st.st_dev,
         (unsigned long long)st.st_ino, (long long)st.st_size, path);
}

static void moved(char kind, int fd, long long offset, ssize_t bytes) {
    if (bytes > 0)
        emit("%c %d %lld %lld", kind, fd, offset, (long long)bytes);
}

static long long position(int fd) { return (long long)lseek(fd, 0, SEEK_CUR); }

int open(const char *path, int flags, ...) {
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = va_arg(ap, mode_t);
        va_end(ap);
    }
    int fd = real_open(path, flags, mode);
    opened(fd, flags, path);
    return fd;
}
int open64(const char *path, int flags, ...) __attribute__((alias("open")));

int openat(int dirfd, const char *path, int flags, ...) {
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = va_arg(ap, mode_t);
        va_end(ap);
    }
    int fd = real_openat(dirfd, path, flags, mode);
    opened(fd, flags, path);
    return fd;
}
int openat64(int dirfd, const char *path, int flags, ...) __attribute__((alias("openat")));

int creat(const char *path, mode_t mode) { return open(path, O_CREAT | O_WRONLY | O_TRUNC, mode); }
int creat64(const char *path, mode_t mode) __attribute__((alias("creat")));

int close(int fd) {
    if (traced(fd)) {
        fd_kind[fd] = 0;
        emit("C %d", fd);
    }
    return real_close(fd);
}

ssize_t read(int fd, void *buf, size_t n) {
    if (!traced(fd))
        return real_read(fd, buf, n);
    long long off = position(fd);
    ssize_t r = real_read(fd, buf, n);
    moved('R', fd, off, r);
    return r;
}

ssize_t write(int fd, const void *buf, size_t n) {
    if (!traced(fd))
        return real_write(fd, buf, n);
    ssize_t r = real_write(fd, buf, n);
    /* After the call, so that an O_APPEND write's offset is where it landed. */
    if (r > 0)
        moved('W', fd, position(fd) - r, r);
    return r;
}

ssize_t pread(int fd, void *buf, size_t n, off_t off) {
    ssize_t r = real_pread(fd, buf, n, off);
    if (traced(fd))
        moved('R', fd, (long long)off, r);
    return r;
}
ssize_t pread64(int fd, void *buf, size_t n, off_t off) __attribute__((alias("pread")));

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) {
    ssize_t r = real_pwrite(fd, buf, n, off);
    if (traced(fd))
        moved('W', fd, (long long)off, r);
    return r;
}
ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off) __attribute__((alias("pwrite")));

ssize_t readv(int fd, const struct iovec *iov, int cnt) {
    if (!traced(fd))
        return real_readv(fd, iov, cnt);
    long long off = position(fd);
    ssize_t r = real_readv(fd, iov, cnt);
    moved('R', fd, off, r);
    return r;
}

ssize_t writev(int fd, const struct iovec *iov, int cnt) {
    ssize_t r = real_writev(fd, iov, cnt);
    if (traced(fd) && r > 0)
        moved('W', fd, position(fd) - r, r);
    return r;
}

ssize_t preadv(int fd, const struct iovec *iov, int cnt, off_t off) {
    ssize_t r = real_preadv(fd, iov, cnt, off);
    if (traced(fd))
        moved('R', fd, (long long)off, r);
    return r;
}
ssize_t preadv64(int fd, const struct iovec *iov, int cnt, off_t off) __attribute__((alias("preadv")));

ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off) {
    ssize_t r = real_pwritev(fd, iov, cnt, off);
    if (traced(fd))
        moved('W', fd, (long long)off, r);
    return r;
}
ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off_t off) __attribute__((alias("pwritev")));

/* "S fd 0" for fsync, "S fd 1" for fdatasync: the trace's sync record keeps which (op read or
 * write), though the engine costs them alike. */
int fsync(int fd) {
    int r = real_fsync(fd);
    if (traced(fd))
        emit("S %d 0", fd);
    return r;
}

int fdatasync(int fd) {
    int r = real_fdatasync(fd);
    if (traced(fd))
        emit("S %d 1", fd);
    return r;
}

#ifdef TIERSIM_WAITS
#include <pthread.h>

/* glibc's own entry points for mutexes, bound at link time: an allocator's constructor (jemalloc)
 * locks mutexes before this object's constructor runs, and dlsym there would allocate. */
extern int __pthread_mutex_lock(pthread_mutex_t *m);
extern int __pthread_mutex_trylock(pthread_mutex_t *m);
extern int __pthread_mutex_unlock(pthread_mutex_t *m);

/* The condition variable calls of glibc 2.3.2's ABI (the one programs link against), found at
 * first use: no allocator waits on a condition variable before main. */
static int (*real_cond_wait)(pthread_cond_t *, pthread_mutex_t *);
static int (*real_cond_timedwait)(pthread_cond_t *, pthread_mutex_t *, const struct timespec *);
static int (*real_cond_signal)(pthread_cond_t *);
static int (*real_cond_broadcast)(pthread_cond_t *);

static void *cond_fn(const char *name) {
    void *f = dlvsym(RTLD_NEXT, name, "GLIBC_2.3.2");
    return f != NULL ? f : dlsym(RTLD_NEXT, name);
}

/* Threads waiting for a contended mutex, by a hash of its address: an unlock logs a wake only
 * when one may be waiting (a collision logs a wake no wait pairs with, which costs nothing). */
#define WAITING_SLOTS 4096
static atomic_int waiting[WAITING_SLOTS];
static unsigned slot_of(const void *m) { return (unsigned)(((uintptr_t)m >> 3) * 0x9E3779B1u) % WAITING_SLOTS; }

/* TIERSIM_WAITS_MUTEX=0 leaves mutexes out (condition variables only), to measure their part. */
static int mutex_waits = -1;

static int mutexes_traced(void) {
    if (mutex_waits < 0) {
        const char *v = getenv("TIERSIM_WAITS_MUTEX");
        mutex_waits = !(v != NULL && v[0] == '0');
    }
    return log_fd >= 0 && mutex_waits;
}

int pthread_mutex_lock(pthread_mutex_t *m) {
    if (!mutexes_traced())
        return __pthread_mutex_lock(m);
    int r = __pthread_mutex_trylock(m);
    if (r != EBUSY)
        return r;
    unsigned s = slot_of(m);
    atomic_fetch_add(&waiting[s], 1);
    emit("Q %p m", (void *)m);
    r = __pthread_mutex_lock(m);
    atomic_fetch_sub(&waiting[s], 1);
    emit("q %p m", (void *)m);
    return r;
}

int pthread_mutex_unlock(pthread_mutex_t *m) {
    if (mutexes_traced() && atomic_load(&waiting[slot_of(m)]) > 0)
        emit("K %p m", (void *)m);
    return __pthread_mutex_unlock(m);
}

int pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m) {
    if (real_cond_wait == NULL)
        real_cond_wait = cond_fn("pthread_cond_wait");
    if (log_fd < 0)
        return real_cond_wait(c, m);
    emit("Q %p", (void *)c);
    int r = real_cond_wait(c, m);
    emit("q %p", (void *)c);
    return r;
}

int pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m, const struct timespec *t) {
    if (real_cond_timedwait == NULL)
        real_cond_timedwait = cond_fn("pthread_cond_timedwait");
    if (log_fd < 0)
        return real_cond_timedwait(c, m, t);
    emit("Q %p", (void *)c);
    int r = real_cond_timedwait(c, m, t);
    emit("q %p", (void *)c);
    return r;
}

int pthread_cond_signal(pthread_cond_t *c) {
    if (real_cond_signal == NULL)
        real_cond_signal = cond_fn("pthread_cond_signal");
    if (log_fd >= 0)
        emit("K %p", (void *)c);
    return real_cond_signal(c);
}

int pthread_cond_broadcast(pthread_cond_t *c) {
    if (real_cond_broadcast == NULL)
        real_cond_broadcast = cond_fn("pthread_cond_broadcast");
    if (log_fd >= 0)
        emit("K %p", (void *)c);
    return real_cond_broadcast(c);
}
#endif

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    void *p = real_mmap(addr, len, prot, flags, fd, off);
    if (p != MAP_FAILED && !(flags & MAP_ANONYMOUS) && traced(fd)) {
        atomic_fetch_add(&file_maps, 1);
        emit("M %d %p %llu %lld", fd, p, (unsigned long long)len, (long long)off);
    }
    return p;
}
void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off) __attribute__((alias("mmap")));

int munmap(void *addr, size_t len) {
    int r = real_munmap(addr, len);
    if (r == 0 && log_fd >= 0 && atomic_load(&file_maps) > 0)
        emit("U %p %llu", addr, (unsigned long long)len);
    return r;
}
