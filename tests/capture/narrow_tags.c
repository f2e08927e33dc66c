/* The tracing runtime's set of 16 ways in 32-bit tags (tc_set_access16n: one host line a set,
 * no branch on the way that hits) against cache.rs's LRU set as the other capture programs run it
 * (tc_set_access_any, 64-bit tags) on the same random line stream: the same miss, the same
 * writeback and the same 16 ways in the same order after every access. Lines drawn from a small
 * range per set, so that hits land at every way and sets fill, evict dirty lines and keep empty
 * ways; half of them with a tag of 31 bits. Prints the misses, writebacks and hits per way, and
 * exits 1 at the first difference. Built with SSE2 and without (-U__SSE2__: the loop fallback).
 *   gcc -O2 -I python/tiersim/runtime -o narrow_tags tests/capture/narrow_tags.c && ./narrow_tags SEED ACCESSES */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tiersim_capture.h"

static const char *tc_getenv(const char *name) { return getenv(name); }
static void *tc_alloc(unsigned long bytes) { return aligned_alloc(64, bytes); }

int main(int argc, char **argv) {
    unsigned long long seed = argc > 1 ? strtoull(argv[1], 0, 10) : 1, n = argc > 2 ? strtoull(argv[2], 0, 10) : 1000000;
    enum { SETS = 8 };
    tc_u64 *a = tc_alloc(SETS * 16 * sizeof *a);
    tc_u32 *b = tc_alloc(SETS * 16 * sizeof *b);
    for (int i = 0; i < SETS * 16; i++) a[i] = TC_INVALID, b[i] = TC_INVALID32;
    unsigned long long misses = 0, writebacks = 0, way_hits[16] = {0}, x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (unsigned long long i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        unsigned set = x % SETS;
        /* 12 to 27 lines a set, so that a set sometimes holds every line it sees. */
        unsigned span = 12 + (unsigned)(i / 50000 % 16);
        tc_u64 line = (x >> 8) % span * SETS + set + ((x >> 40) & 1 ? 0 : (1ull << 30) * SETS);
        int write = (x >> 20) % 3 == 0;
        tc_u64 wa = 12345;
        tc_u32 wb = 12345;
        tc_u64 *sa = a + set * 16;
        tc_u32 *sb = b + set * 16;
        int hit_way = -1;
        for (int w = 0; w < 16; w++)
            if ((sa[w] | 1) == (line << 1 | 1)) hit_way = w;
        int ma = tc_set_access_any(sa, 16, line, write, &wa), mb = tc_set_access16n(sb, (tc_u32)(line / SETS), write, &wb);
        int same = 1;
        for (int w = 0; w < 16; w++)
            same &= sa[w] == TC_INVALID ? sb[w] == TC_INVALID32 : sb[w] == (tc_u32)((sa[w] >> 1) / SETS << 1 | (sa[w] & 1));
        if (ma != mb || (ma && (wa == TC_INVALID ? wb != TC_INVALID32 : wb != wa / SETS)) || !same) {
            printf("differ at access %llu (set %u, line %llu, write %d): miss %d/%d wb %llx/%llx\n", i, set,
                   (unsigned long long)line, write, ma, mb, (unsigned long long)wa, (unsigned long long)wb);
            return 1;
        }
        misses += ma;
        writebacks += ma && wa != TC_INVALID;
        if (hit_way >= 0) way_hits[hit_way]++;
    }
    printf("accesses %llu misses %llu writebacks %llu hits by way", n, misses, writebacks);
    for (int w = 0; w < 16; w++) printf(" %llu", way_hits[w]);
    printf("\n");
    return 0;
}
