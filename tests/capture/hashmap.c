/* A small open-addressing hash map that counts its own table accesses, for
 * tests/test_capture.py: a capture of this program must show, in the table's address range,
 * exactly the loads, stores and pages it reports here (and, through a cache that holds the
 * table, one fill per line it touched).
 *
 * usage: hashmap KEYS [EXIT_STATUS | abort]
 * Inserts KEYS distinct keys (linear probing, load factor at most 1/2), then looks up KEYS
 * keys, half of them present. The table is mmap'd so that no library code touches it (calloc
 * would clear small tables itself). Every table access goes through ld/st on volatile
 * pointers: one 8-byte load or store each. Build with -O0: at -O2, GCC 12 stores the last
 * insert's key and value a second time after the loop (seen in a capture of this program), so
 * the machine code would do more than the source counts. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define PAGE 4096
#define LINE 64

struct slot {
    uint64_t key;
    uint64_t value;
};

static uint64_t loads, stores;
static uintptr_t base;
static unsigned char *page_seen, *line_seen;

static void mark(volatile uint64_t *p) {
    uintptr_t off = (uintptr_t)p - base;
    page_seen[off / PAGE] = 1;
    line_seen[off / LINE] = 1;
}

static uint64_t ld(volatile uint64_t *p) {
    loads++;
    mark(p);
    return *p;
}

static void st(volatile uint64_t *p, uint64_t v) {
    stores++;
    mark(p);
    *p = v;
}

/* Distinct, never 0: an odd multiplier is a bijection on 64-bit integers. */
static uint64_t key_of(uint64_t i) { return (i + 1) * 0x9E3779B97F4A7C15ull; }

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s KEYS [EXIT_STATUS | abort]\n", argv[0]);
        return 2;
    }
    uint64_t n = strtoull(argv[1], 0, 10);
    int abort_at_end = argc > 2 && strcmp(argv[2], "abort") == 0;
    int status = argc > 2 && !abort_at_end ? atoi(argv[2]) : 0;
    uint64_t cap = 2;
    while (cap < 2 * n) cap <<= 1;
    size_t bytes = cap * sizeof(struct slot);
    struct slot *t = mmap(0, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (t == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    base = (uintptr_t)t;
    page_seen = calloc((bytes + PAGE - 1) / PAGE, 1);
    line_seen = calloc(bytes / LINE + 1, 1);
    uint64_t mask = cap - 1;

    for (uint64_t i = 0; i < n; i++) {
        uint64_t k = key_of(i);
        uint64_t h = (k ^ (k >> 29)) & mask;
        while (ld(&t[h].key) != 0) h = (h + 1) & mask;
        st(&t[h].key, k);
        st(&t[h].value, i);
    }
    uint64_t found = 0, sum = 0, x = 88172645463325252ull;
    for (uint64_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint64_t k = key_of(x % (2 * n)); /* present when below n */
        uint64_t h = (k ^ (k >> 29)) & mask;
        for (;;) {
            uint64_t seen = ld(&t[h].key);
            if (seen == k) {
                found++;
                sum += ld(&t[h].value);
                break;
            }
            if (seen == 0) break;
            h = (h + 1) & mask;
        }
    }
    uint64_t pages = 0, lines = 0;
    for (size_t i = 0; i < (bytes + PAGE - 1) / PAGE; i++) pages += page_seen[i];
    for (size_t i = 0; i < bytes / LINE; i++) lines += line_seen[i];
    printf("table=%#lx bytes=%zu loads=%lu stores=%lu pages=%lu lines=%lu found=%lu sum=%lu\n",
           (unsigned long)base, bytes, (unsigned long)loads, (unsigned long)stores, (unsigned long)pages,
           (unsigned long)lines, (unsigned long)found, (unsigned long)sum);
    fflush(stdout);
    if (abort_at_end) abort();
    return status;
}
