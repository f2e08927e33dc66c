/* The guest side of `tiersim validate linux`: runs one program and samples the kernel while it
 * runs. Usage: sampler INTERVAL_MS -- PROGRAM ARGS...
 *
 * Every INTERVAL_MS of the guest's CLOCK_MONOTONIC it prints one line
 *   S <ns since start> vmstat <name>=<value>... pages N0=<n> N1=<n>...
 * with the /proc/vmstat counters named below and the program's resident pages per node summed
 * over the VMAs of /proc/PID/numa_maps, then the CPU time (ns, /proc/TID/schedstat's first field,
 * the scheduler's sum_exec_runtime) of the kswapd threads (kswapd_ns) and of the program's threads
 * (prog_ns), and the program's system time (prog_sys_ns): the rate kswapd demotes at per CPU second, and
 * what a hint fault costs, are the guest kernel's own; and the scanner's passes (scan_seq). The program (started with TIERSIM_GUEST=1 in its
 * environment) stops itself with SIGSTOP just before it exits, so the last line, E, holds its
 * pages at its end; then the sampler lets it go and prints X with its exit status or signal. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *FIELDS[] = {
    "numa_hint_faults", "numa_hint_faults_local", "numa_pages_migrated", "numa_pte_updates",
    "pgpromote_success", "pgpromote_candidate", "pgdemote_kswapd", "pgdemote_direct",
    "pgmigrate_success", "pgmigrate_fail", "pgscan_kswapd", "pgscan_direct", "pgsteal_kswapd",
    "pgsteal_direct", "pgfault", "oom_kill",
    /* What reclaim did with the pages it scanned and did not take (mm/vmscan.c): activated,
     * deactivated from the active list, refilled; anon against file. */
    "pgactivate", "pgdeactivate", "pgrefill", "pgscan_anon", "pgscan_file", "nr_inactive_anon",
    "nr_active_anon", "nr_shmem", NULL,
};

#define MAX_NODES 8

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static char buf[1 << 20];

static size_t slurp(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return n;
}

/* Sum of the first field of /proc/<pid>/task/<tid>/schedstat over a task's threads, or of one
 * thread's /proc/<pid>/schedstat with all == 0. */
static long long cpu_ns(pid_t pid, int all) {
    char path[300];
    long long sum = 0;
    if (!all) {
        snprintf(path, sizeof path, "/proc/%d/schedstat", (int)pid);
        return slurp(path) ? atoll(buf) : 0;
    }
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d) return 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "/proc/%d/task/%s/schedstat", (int)pid, e->d_name);
        if (slurp(path)) sum += atoll(buf);
    }
    closedir(d);
    return sum;
}

/* The process's system time (ns): stime, field 15 of /proc/<pid>/stat (the whole thread group),
 * in clock ticks. The kernel's work in the program's context: page faults,
 * NUMA hint faults and the migrations they start, and the scanner (task_numa_work). */
static long long stime_ns(pid_t pid) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    if (!slurp(path)) return 0;
    char *p = strrchr(buf, ')');
    long long v = 0;
    for (int field = 2; p && field < 15; field++) {
        p = strchr(p + 1, ' ');
        if (p && field == 14) v = atoll(p + 1);
    }
    return v * (1000000000LL / sysconf(_SC_CLK_TCK));
}

/* The NUMA scanner's full passes over the program's address space so far: mm->numa_scan_seq in
 * /proc/<pid>/sched (CONFIG_SCHED_DEBUG), bumped when task_numa_work wraps; -1 without it. */
static long long scan_seq(pid_t pid) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/sched", (int)pid);
    if (!slurp(path)) return -1;
    char *p = strstr(buf, "mm->numa_scan_seq");
    if (!p || !(p = strchr(p, ':'))) return -1;
    return atoll(p + 1);
}

#define MAX_KSWAPD 8
static pid_t kswapd[MAX_KSWAPD];
static int nkswapd;

/* The kswapd threads (one per node with memory), by name, once at start. */
static void find_kswapd(void) {
    DIR *d = opendir("/proc");
    if (!d) return;
    for (struct dirent *e; (e = readdir(d)) && nkswapd < MAX_KSWAPD;) {
        char path[300];
        if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
        snprintf(path, sizeof path, "/proc/%s/comm", e->d_name);
        if (slurp(path) && !strncmp(buf, "kswapd", 6)) kswapd[nkswapd++] = atoi(e->d_name);
    }
    closedir(d);
}

static void sample(char tag, long long t0, pid_t pid) {
    printf("%c %lld vmstat", tag, now_ns() - t0);
    slurp("/proc/vmstat");
    for (char *line = buf; line && *line;) {
        char *next = strchr(line, '\n');
        if (next) *next++ = 0;
        char *sp = strchr(line, ' ');
        if (sp) {
            *sp = 0;
            for (int i = 0; FIELDS[i]; i++)
                if (!strcmp(line, FIELDS[i])) printf(" %s=%s", line, sp + 1);
        }
        line = next;
    }
    /* numa_maps: one line per VMA; "N<node>=<pages>" items count its resident pages per node. */
    long long pages[MAX_NODES] = {0};
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/numa_maps", (int)pid);
    slurp(path);
    for (char *p = buf; (p = strstr(p, " N"));) {
        int node;
        long long n;
        if (sscanf(p, " N%d=%lld", &node, &n) == 2 && node >= 0 && node < MAX_NODES) pages[node] += n;
        p += 2;
    }
    printf(" pages");
    for (int i = 0; i < MAX_NODES; i++) printf(" N%d=%lld", i, pages[i]);
    for (int i = 0; i < MAX_NODES; i++) {
        snprintf(path, sizeof path, "/sys/devices/system/node/node%d/meminfo", i);
        if (!slurp(path)) continue;
        char *m = strstr(buf, "MemFree:");
        if (m) printf(" free%d=%lld", i, atoll(m + 8));
    }
    long long ks = 0;
    for (int i = 0; i < nkswapd; i++) ks += cpu_ns(kswapd[i], 0);
    printf(" kswapd_ns=%lld prog_ns=%lld prog_sys_ns=%lld scan_seq=%lld", ks, cpu_ns(pid, 1), stime_ns(pid),
           scan_seq(pid));
    printf("\n");
    fflush(stdout);
}

int main(int argc, char **argv) {
    if (argc < 4 || strcmp(argv[2], "--")) {
        fprintf(stderr, "usage: sampler INTERVAL_MS -- PROGRAM ARGS...\n");
        return 2;
    }
    long interval_ms = atol(argv[1]);
    find_kswapd();
    long long t0 = now_ns();
    pid_t pid = fork();
    if (pid < 0) return perror("fork"), 2;
    if (pid == 0) {
        setenv("TIERSIM_GUEST", "1", 1);
        execv(argv[3], argv + 3);
        perror("exec");
        _exit(127);
    }
    printf("B %lld pid=%d\n", now_ns() - t0, (int)pid);
    long long next = t0;
    for (;;) {
        int status;
        pid_t r = waitpid(pid, &status, WNOHANG | WUNTRACED);
        if (r == pid && WIFSTOPPED(status)) {
            sample('E', t0, pid);
            kill(pid, SIGCONT);
            continue;
        }
        if (r == pid) {
            if (WIFEXITED(status)) printf("X %lld exit=%d\n", now_ns() - t0, WEXITSTATUS(status));
            else printf("X %lld signal=%d\n", now_ns() - t0, WTERMSIG(status));
            fflush(stdout);
            return 0;
        }
        long long t = now_ns();
        if (t >= next) {
            sample('S', t0, pid);
            next += interval_ms * 1000000LL;
            if (next < t) next = t + interval_ms * 1000000LL;
        }
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
}
