/* The tracing runtime's buffers at their edges (tests/test_capture_paths.py): each thread writes one
 * byte in each of its own lines and ends, with nothing else to flush its buffer, so its last
 * records reach the trace only through the flush at its end. The threads write 490 to 529 lines
 * one after another, so that some end with their buffer exactly full or one access either side
 * of it. A last thread writes its lines and then blocks, alive when the program exits, so its
 * records come from the exit handler's flush. A forked child writes lines that must not be traced.
 * The main thread writes its lines last and exits.
 *   batches   (prints the regions: base address and lines of each writer)                      */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define THREADS 40
#define REGION (64 * 1024)
#define LINE 64

static char *area;
static int ready[2], never[2];

struct job {
    int region, lines, block;
};

static void write_lines(int region, int lines) {
    char *base = area + (size_t)region * REGION;
    for (int k = 0; k < lines; k++) base[(size_t)k * LINE] = 1;
}

static void *run(void *p) {
    struct job *j = p;
    write_lines(j->region, j->lines);
    if (j->block) {
        char c = 1, d;
        if (write(ready[1], &c, 1) != 1) abort();
        if (read(never[0], &d, 1) < 0) abort();
    }
    return NULL;
}

int main(void) {
    /* Regions: 0 the main thread's, 1..THREADS the threads', THREADS + 1 the blocked thread's,
     * THREADS + 2 the forked child's. */
    if (posix_memalign((void **)&area, 4096, (size_t)(THREADS + 3) * REGION) != 0) return 1;
    if (pipe(ready) != 0 || pipe(never) != 0) return 1;
    static struct job jobs[THREADS + 2];
    for (int i = 1; i <= THREADS; i++) {
        jobs[i] = (struct job){i, 489 + i, 0};
        pthread_t th;
        if (pthread_create(&th, NULL, run, &jobs[i]) != 0 || pthread_join(th, NULL) != 0) return 1;
    }
    jobs[THREADS + 1] = (struct job){THREADS + 1, 300, 1};
    pthread_t blocked;
    if (pthread_create(&blocked, NULL, run, &jobs[THREADS + 1]) != 0) return 1;
    char c;
    if (read(ready[0], &c, 1) != 1) return 1;
    pid_t child = fork();
    if (child == 0) {
        write_lines(THREADS + 2, 100);
        exit(0);
    }
    int status;
    if (child < 0 || waitpid(child, &status, 0) != child) return 1;
    for (int i = 1; i <= THREADS + 1; i++)
        printf("region %d thread %d base %p lines %d\n", i, i, (void *)(area + (size_t)i * REGION), jobs[i].lines);
    printf("region %d thread -1 base %p lines 100\n", THREADS + 2, (void *)(area + (size_t)(THREADS + 2) * REGION));
    printf("region 0 thread 0 base %p lines 700\n", (void *)area);
    fflush(stdout);
    write_lines(0, 700);
    exit(0);
}
