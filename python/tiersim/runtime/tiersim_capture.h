/* What the three capture programs share: the tracing runtime (tiersim_trace_rt.c), the Valgrind
 * tool (tiersim_vg_tool.c) and the QEMU plugin (tiersim_qemu_plugin.c). The record layout, the
 * LLC set (cache.rs's set-associative LRU, write-back, write-allocate), the same-line table test
 * and the TIERSIM_* environment they all read. Everything is static and inline, and uses no
 * libc: the Valgrind tool links without one. A program defines, before including this header,
 * TIERSIM_VALGRIND_TOOL when its types are Valgrind's (pub_tool_basics.h), and after it the two
 * functions declared at the end (tc_getenv, tc_alloc) with its own getenv and allocator.
 * _capture.py's build cache key covers this file. */
#ifndef TIERSIM_CAPTURE_H
#define TIERSIM_CAPTURE_H

#ifdef TIERSIM_VALGRIND_TOOL
typedef ULong tc_u64;
typedef UInt tc_u32;
typedef UShort tc_u16;
typedef UChar tc_u8;
#else
#include <stdint.h>
typedef uint64_t tc_u64;
typedef uint32_t tc_u32;
typedef uint16_t tc_u16;
typedef uint8_t tc_u8;
#endif

/* One record of a thread's trace: the runtime's ring and the tool's and plugin's t<thread>.bin
 * files (capture/stream.rs and capture/instrumented.rs read this layout). The stamp orders the
 * threads' records when merged; the gap is the thread's time since its previous record (traced
 * loads and stores, or guest instructions); op 0 read, 1 write (2: the Valgrind tool's end of a
 * thread). */
typedef struct {
    tc_u64 stamp;
    tc_u64 addr;
    tc_u32 gap;
    tc_u16 size;
    tc_u8 op;
    tc_u8 pad;
} tc_rec_t;
_Static_assert(sizeof(tc_rec_t) == 24, "record layout");

#if defined(__SSE2__) && !defined(TIERSIM_VALGRIND_TOOL)
#include <emmintrin.h>
#endif

/* An empty way, an empty table entry. */
#define TC_INVALID ((tc_u64)-1)
/* Entries of a thread's (the tool: a cache's) table of most recent lines. */
#define TC_TAB 64u

/* The same-line table: per group of sets, the line touched last in it << 1 | whether that access
 * wrote it. That line is its set's most recent, so an access to it that does not dirty a clean
 * line (a load, or a store when the entry shows it dirty) changes nothing and skips the set. */
#define TC_TAB_HIT(entry, line, write) (((write) ? (entry) : (entry) | 1) == ((line) << 1 | 1))

/* The LRU set of cache.rs: per set, `ways` tags in recency order (most recent first), each
 * line << 1 | dirty; TC_INVALID marks an empty way, and empty ways are always last, so the victim
 * of a miss is the last way: an empty one first, else the least recently used. Returns 1 on a
 * miss, with *wb the evicted dirty line or TC_INVALID. The shifts are loops, not memmove: the
 * runtime's memmove is its own, traced one. Inlined with `ways` a constant for the usual 16
 * (tc_set_access_any), so that the search unrolls and a miss's shift of every way is a few
 * vector moves. */
static inline __attribute__((always_inline)) int tc_set_access(tc_u64 *set, tc_u32 ways, tc_u64 line, int write,
                                                               tc_u64 *wb) {
    tc_u64 key = line << 1 | 1;
#pragma GCC unroll 16
    for (tc_u32 w = 0; w < ways; w++) {
        tc_u64 tag = set[w];
        if ((tag | 1) == key) {
            for (; w > 0; w--) set[w] = set[w - 1];
            set[0] = tag | (tc_u64)write;
            return 0;
        }
    }
    tc_u64 out = set[ways - 1];
    *wb = out != TC_INVALID && (out & 1) ? out >> 1 : TC_INVALID;
    if (__builtin_constant_p(ways) && ways == 16) {
#if defined(__SSE2__) && !defined(TIERSIM_VALGRIND_TOOL)
        /* Each pair of ways takes the high way of the pair before and its own low one (shufpd),
         * all eight loads before any store. GCC made the scalar version two loops through a copy
         * on the stack, a third of the flush's time at 1,024 sets; this takes 7-13 % off the
         * program's CPU there (BENCHMARKS.md). A hit's shift the same way, as a blend, was
         * slower than its loop. */
        __m128d m[8];
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) m[j] = _mm_loadu_pd((const double *)(set + 2 * j));
#pragma GCC unroll 7
        for (int j = 7; j > 0; j--) _mm_storeu_pd((double *)(set + 2 * j), _mm_shuffle_pd(m[j - 1], m[j], 1));
        set[1] = set[0];
#else
        tc_u64 moved[15];
        for (tc_u32 w = 0; w < 15; w++) moved[w] = set[w];
        for (tc_u32 w = 0; w < 15; w++) set[w + 1] = moved[w];
#endif
    } else {
        for (tc_u32 w = ways - 1; w > 0; w--) set[w] = set[w - 1];
    }
    set[0] = (line << 1) | (tc_u64)write;
    return 1;
}

/* A set of 16 ways in 32-bit tags, one 64-byte line: each way (line >> the cache's set bits) << 1 |
 * dirty, which fits when the cache has 2,048 sets or more (a 47-bit user address is a 41-bit line),
 * TC_INVALID32 an empty way; the same recency order and results as tc_set_access with 16 ways.
 * Half the host's traffic into the tag array of a large LLC, whose sets miss the host's caches.
 * With SSE2 the search has no branch on the way that hits (unpredictable, and each mispredicted
 * branch waited for the set's load) and the recency shift is a blend of the set with its copy
 * moved by one way. *wb is the evicted dirty tag (line >> set bits) or TC_INVALID32. */
#define TC_INVALID32 0xFFFFFFFFu
#if defined(__SSE2__) && !defined(TIERSIM_VALGRIND_TOOL)
static inline __attribute__((always_inline)) int tc_set_access16n(tc_u32 *set, tc_u32 tag, int write, tc_u32 *wb) {
    const __m128i key = _mm_set1_epi32((int)(tag << 1 | 1)), one = _mm_set1_epi32(1);
    __m128i v[4];
    unsigned hits = 0;
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        v[j] = _mm_load_si128((const __m128i *)(set + 4 * j));
        __m128i eq = _mm_cmpeq_epi32(_mm_or_si128(v[j], one), key);
        hits |= (unsigned)_mm_movemask_ps(_mm_castsi128_ps(eq)) << (4 * j);
    }
    const int miss = hits == 0;
    const unsigned w = miss ? 15u : (unsigned)__builtin_ctz(hits);
    const tc_u32 out = set[w];
    *wb = miss && out != TC_INVALID32 && (out & 1) ? out >> 1 : TC_INVALID32;
    const tc_u32 first = (miss ? tag << 1 : out) | (tc_u32)write;
    const __m128i wv = _mm_set1_epi32((int)w);
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        /* Ways 4j..4j+3 take ways 4j-1..4j+2 where they are at or before w. */
        __m128i shifted = _mm_slli_si128(v[j], 4);
        if (j) shifted = _mm_or_si128(shifted, _mm_srli_si128(v[j - 1], 12));
        __m128i keep = _mm_cmpgt_epi32(_mm_set_epi32(4 * j + 3, 4 * j + 2, 4 * j + 1, 4 * j), wv);
        _mm_store_si128((__m128i *)(set + 4 * j), _mm_or_si128(_mm_and_si128(keep, v[j]), _mm_andnot_si128(keep, shifted)));
    }
    set[0] = first;
    return miss;
}
#else
static inline int tc_set_access16n(tc_u32 *set, tc_u32 tag, int write, tc_u32 *wb) {
    tc_u32 key = tag << 1 | 1;
    for (tc_u32 w = 0; w < 16; w++) {
        tc_u32 t = set[w];
        if ((t | 1) == key) {
            for (; w > 0; w--) set[w] = set[w - 1];
            set[0] = t | (tc_u32)write;
            return 0;
        }
    }
    tc_u32 out = set[15];
    *wb = out != TC_INVALID32 && (out & 1) ? out >> 1 : TC_INVALID32;
    for (tc_u32 w = 15; w > 0; w--) set[w] = set[w - 1];
    set[0] = tag << 1 | (tc_u32)write;
    return 1;
}
#endif

#ifdef __clang__
__attribute__((no_builtin("memcpy", "memmove", "memset")))
#endif
static int tc_set_access_any(tc_u64 *set, tc_u32 ways, tc_u64 line, int write, tc_u64 *wb) {
    return ways == 16 ? tc_set_access(set, 16, line, write, wb) : tc_set_access(set, ways, line, write, wb);
}

/* Dirty lines among n tags (a summary's dirty_at_exit). */
static inline tc_u64 tc_dirty_lines(const tc_u64 *tags, tc_u64 n) {
    tc_u64 dirty = 0;
    for (tc_u64 i = 0; i < n; i++) dirty += tags[i] != TC_INVALID && (tags[i] & 1);
    return dirty;
}

/* The including program's getenv and allocator (the latter never returns NULL). */
static const char *tc_getenv(const char *name);
static void *tc_alloc(unsigned long bytes);

/* A decimal number (tiersim writes these variables: digits only); *end is what follows it. */
static inline tc_u64 tc_parse_u64(const char *s, const char **end) {
    tc_u64 v = 0;
    while (*s >= '0' && *s <= '9') v = v * 10 + (tc_u64)(*s++ - '0');
    if (end) *end = s;
    return v;
}

static inline tc_u64 tc_env_u64(const char *name, tc_u64 dflt) {
    const char *v = tc_getenv(name);
    return v && *v ? tc_parse_u64(v, 0) : dflt;
}

/* The CPUs of a list as cpu_map takes it (tiersim checked it): 0-1,16-17. Writes the first `cap`
 * to out (when out is set) and returns how many the list has. */
static inline tc_u64 tc_cpu_list(const char *p, tc_u32 *out, tc_u64 cap) {
    tc_u64 n = 0;
    while (p && *p) {
        const char *end;
        tc_u32 a = (tc_u32)tc_parse_u64(p, &end), b = a;
        if (*end == '-') b = (tc_u32)tc_parse_u64(end + 1, &end);
        for (tc_u64 c = a; c <= b; c++, n++)
            if (out && n < cap) out[n] = (tc_u32)c;
        if (*end != ',') break;
        p = end + 1;
    }
    return n;
}

/* The LLC and CPUs a capture models, from tiersim's TIERSIM_* variables. */
struct tc_env {
    tc_u64 llc; /* bytes; 0: no LLC, every access is a record */
    tc_u32 ways, line_shift;
    int per_cpu; /* TIERSIM_LLC_SCOPE per_cpu: one cache per CPU, else one shared */
    /* Thread i runs on CPU cpu_map[i % n_cpu_map]; no map: on CPU i. */
    tc_u32 *cpu_map, n_cpu_map;
};

static inline void tc_env_read(struct tc_env *e) {
    e->llc = tc_env_u64("TIERSIM_LLC", 0);
    e->ways = (tc_u32)tc_env_u64("TIERSIM_LLC_WAYS", 16);
    e->line_shift = (tc_u32)__builtin_ctzll(tc_env_u64("TIERSIM_LINE_SIZE", 64));
    const char *scope = tc_getenv("TIERSIM_LLC_SCOPE"), *per_cpu = "per_cpu";
    if (scope)
        while (*scope && *scope == *per_cpu) scope++, per_cpu++;
    e->per_cpu = scope && *scope == *per_cpu;
    const char *map = tc_getenv("TIERSIM_CPU_MAP");
    tc_u64 n = tc_cpu_list(map, 0, 0);
    e->n_cpu_map = (tc_u32)n;
    e->cpu_map = n ? tc_alloc(n * sizeof *e->cpu_map) : 0;
    tc_cpu_list(map, e->cpu_map, n);
}

/* A cache's tags, every way empty: *sets sets of e->ways ways, set after set. */
static inline tc_u64 *tc_tags_new(const struct tc_env *e, tc_u64 *sets) {
    tc_u64 lines = e->llc >> e->line_shift;
    tc_u64 *tags = tc_alloc(lines * sizeof *tags);
    for (tc_u64 i = 0; i < lines; i++) tags[i] = TC_INVALID;
    *sets = lines / e->ways;
    return tags;
}

/* The CPU of thread `index`. */
static inline tc_u32 tc_cpu_of(const struct tc_env *e, tc_u32 index) {
    return e->n_cpu_map ? e->cpu_map[index % e->n_cpu_map] : index;
}

#endif
