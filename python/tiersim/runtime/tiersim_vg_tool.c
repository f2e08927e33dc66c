/* A Valgrind tool of tiersim's own (`valgrind --tool=tiersim`), the fast path of `tiersim capture`
 * for programs that cannot be rebuilt. It instruments every load and store of the guest, passes
 * them through the same LLC model as the tracing runtime (tiersim_trace_rt.c: set-associative,
 * LRU, write-back, write-allocate, set = line number modulo sets) and writes the fills and dirty
 * evictions as binary records into the runtime's directory layout (t<thread>.bin, pagemap.bin,
 * summary), which tiersim merges as on the instrumented path. It replaces lackey's text (one
 * formatted line per access) with a helper call per access. Built against Debian's valgrind
 * package (pub_tool_*.h, libcoregrind, libvex) by tiersim (_capture.vg_tool); docs/capture.md. */
#include "pub_tool_basics.h"
#include "pub_tool_libcassert.h"
#include "pub_tool_libcbase.h"
#include "pub_tool_libcfile.h"
#include "pub_tool_libcprint.h"
#include "pub_tool_libcproc.h"
#include "pub_tool_machine.h"
#include "pub_tool_mallocfree.h"
#include "pub_tool_threadstate.h"
#include "pub_tool_tooliface.h"
#include "pub_tool_vki.h"
#include "pub_tool_vkiscnums.h"
#define TIERSIM_VALGRIND_TOOL 1
#include "tiersim_capture.h"

/* Records (tc_rec_t): the stamp is a global sequence number: Valgrind runs one thread at a time,
 * so it is the exact order the records were made in. The gap is in guest instructions (summary
 * `time instructions`). Op 2 marks a thread's end. */
#define BUF_RECS (1u << 16)
#define PAGE_SHIFT 12
#define MAX_THREADS 4096

struct cache {
    ULong sets;
    UInt ways;
    /* Per set, tags in recency order, line << 1 | dirty (as the runtime keeps them). */
    ULong *tags;
    /* Per group of sets (set & tab_mask; one group when the sets are not a power of two), the
     * line accessed last in it << 1 | whether that access wrote it. That line is its set's most
     * recent (any access to the set since rewrote the entry: Valgrind runs one thread at a time,
     * so this holds for a cache threads share too), so a load of it, or a store when the entry
     * shows it dirty, changes nothing and skips the set. */
    ULong tab[TC_TAB], tab_mask;
};

struct thr {
    UInt index, cpu;
    Int fd;
    tc_rec_t *buf;
    UInt n;
    /* buf[..pm_done] have had their pages looked up in pagemap (before an unmapping). */
    UInt pm_done;
    Bool done;
    ULong instrs;     /* guest instructions before the current time slice */
    ULong last_instr; /* the instruction count at its previous record */
    ULong loads, stores, bytes, hits, misses, writebacks, records;
    struct cache *c;
};

static struct {
    HChar dir[4096];
    struct tc_env env;
    Int pagemap_fd;
    Int pm_out;
    const HChar *pagemap_state;
} cfg = {.pagemap_fd = -1, .pm_out = -1, .pagemap_state = "off"};

/* Valgrind thread id -> the thread running under it now. */
static struct thr *by_tid[MAX_THREADS];
static struct thr *all[MAX_THREADS];
static UInt n_all;
static struct cache *shared_cache, *cpu_caches[4096];
static UInt n_caches;
/* The running thread, and the guest instructions of its current time slice (incremented inline
 * by the instrumented code). */
static struct thr *cur;
static ULong slice_instrs;
static ULong seq;

static void die(const HChar *what) {
    VG_(umsg)("tiersim tool: %s\n", what);
    VG_(exit)(127);
}

static const char *tc_getenv(const char *name) { return VG_(getenv)(name); }

static void *tc_alloc(unsigned long bytes) { return VG_(malloc)("tiersim", bytes); }

static void write_all(Int fd, const void *p, SizeT n) {
    const HChar *b = p;
    while (n) {
        Int w = VG_(write)(fd, b, n > (1u << 30) ? (1u << 30) : (Int)n);
        if (w <= 0) die("writing the trace failed (disk full?)");
        b += w;
        n -= (SizeT)w;
    }
}

static struct cache *cache_new(void) {
    struct cache *c = VG_(malloc)("tiersim.cache", sizeof *c);
    c->ways = cfg.env.ways;
    c->tags = tc_tags_new(&cfg.env, &c->sets);
    for (UInt i = 0; i < TC_TAB; i++) c->tab[i] = TC_INVALID;
    c->tab_mask = (c->sets & (c->sets - 1)) == 0 ? (c->sets < TC_TAB ? c->sets : TC_TAB) - 1 : 0;
    n_caches++;
    return c;
}

/* Pages whose frames are known for good (exclusively mapped): an open-addressing set. */
static ULong *pm_seen, pm_cap, pm_len;

static Bool pm_insert(ULong vpn) {
    if (2 * (pm_len + 1) > pm_cap) {
        ULong old_cap = pm_cap, *old = pm_seen;
        pm_cap = pm_cap ? 2 * pm_cap : 1 << 16;
        pm_seen = VG_(malloc)("tiersim.pm", pm_cap * sizeof *pm_seen);
        for (ULong i = 0; i < pm_cap; i++) pm_seen[i] = TC_INVALID;
        pm_len = 0;
        for (ULong i = 0; i < old_cap; i++)
            if (old[i] != TC_INVALID) pm_insert(old[i]);
        if (old) VG_(free)(old);
    }
    ULong h = (vpn * 0x9E3779B97F4A7C15ULL) & (pm_cap - 1);
    while (pm_seen[h] != TC_INVALID) {
        if (pm_seen[h] == vpn) return False;
        h = (h + 1) & (pm_cap - 1);
    }
    pm_seen[h] = vpn;
    pm_len++;
    return True;
}

static Bool pm_known(ULong vpn) {
    if (!pm_cap) return False;
    ULong h = (vpn * 0x9E3779B97F4A7C15ULL) & (pm_cap - 1);
    for (; pm_seen[h] != TC_INVALID; h = (h + 1) & (pm_cap - 1))
        if (pm_seen[h] == vpn) return True;
    return False;
}

static Int cmp_u64(const void *a, const void *b) {
    ULong x = *(const ULong *)a, y = *(const ULong *)b;
    return (x > y) - (x < y);
}

/* The runtime's pm_lookup: the frames of a buffer's new pages, read in sorted runs. The guest
 * lives in this process, so /proc/self/pagemap maps its pages. */
static void pm_lookup(const tc_rec_t *r, UInt n) {
    static ULong vpns[BUF_RECS], ents[512], out[2 * 512];
    UInt m = 0, k = 0;
    ULong last = TC_INVALID;
    for (UInt i = 0; i < n; i++) {
        ULong vpn = r[i].addr >> PAGE_SHIFT;
        if (r[i].op > 1 || vpn == last) continue;
        last = vpn;
        if (!pm_known(vpn)) vpns[m++] = vpn;
    }
    VG_(ssort)(vpns, m, sizeof *vpns, cmp_u64);
    for (UInt i = 0; i < m && cfg.pagemap_fd >= 0;) {
        UInt j = i + 1;
        while (j < m && vpns[j] - vpns[i] < 512 && (vpns[j] == vpns[j - 1] || vpns[j] == vpns[j - 1] + 1)) j++;
        ULong first = vpns[i], span = vpns[j - 1] - first + 1, have = 0;
        if (VG_(lseek)(cfg.pagemap_fd, (Off64T)(first * 8), VKI_SEEK_SET) >= 0) {
            Int got = VG_(read)(cfg.pagemap_fd, ents, (Int)(span * 8));
            have = got > 0 ? (ULong)got / 8 : 0;
        }
        for (UInt x = i; x < j; x++) {
            ULong vpn = vpns[x], e;
            if (x > i && vpn == vpns[x - 1]) continue;
            if (vpn - first >= have) continue;
            e = ents[vpn - first];
            if (!(e >> 63) || (e >> 62 & 1)) continue;
            if (!(e & ((1ULL << 55) - 1))) {
                /* Frame numbers need CAP_SYS_ADMIN. */
                cfg.pagemap_state = "hidden";
                VG_(close)(cfg.pagemap_fd);
                cfg.pagemap_fd = -1;
                break;
            }
            if (e >> 56 & 1) pm_insert(vpn);
            out[k++] = vpn;
            out[k++] = e;
            if (k == 2 * 512) {
                write_all(cfg.pm_out, out, sizeof out);
                k = 0;
            }
        }
        i = j;
    }
    if (k && cfg.pm_out >= 0) write_all(cfg.pm_out, out, k * 8);
}

static void flush(struct thr *t) {
    if (!t->n) return;
    write_all(t->fd, t->buf, t->n * sizeof(tc_rec_t));
    if (cfg.pagemap_fd >= 0) pm_lookup(t->buf + t->pm_done, t->n - t->pm_done);
    t->n = 0;
    t->pm_done = 0;
}

/* Memory may be about to be unmapped (munmap, mremap, madvise, brk): look up the pages of the
 * records not yet flushed while they are still mapped, as lackey's live filter would have (else
 * they get synthetic frames: ld.so maps and unmaps /etc/ld.so.cache, for one). */
static void post_syscall(ThreadId tid, UInt no, UWord *args, UInt n_args, SysRes res) {
    (void)tid;
    (void)no;
    (void)args;
    (void)n_args;
    (void)res;
}

static void pre_syscall(ThreadId tid, UInt no, UWord *args, UInt n_args) {
    (void)tid;
    (void)args;
    (void)n_args;
    if (cfg.pagemap_fd < 0) return;
    if (no != __NR_munmap && no != __NR_mremap && no != __NR_madvise && no != __NR_brk) return;
    for (UInt i = 0; i < n_all; i++) {
        struct thr *t = all[i];
        if (t->done || t->n == t->pm_done) continue;
        pm_lookup(t->buf + t->pm_done, t->n - t->pm_done);
        t->pm_done = t->n;
    }
}

static void put(struct thr *t, ULong addr, UInt size, UChar op, UInt gap) {
    tc_rec_t *r = &t->buf[t->n];
    r->stamp = seq++;
    r->addr = addr;
    r->gap = gap;
    r->size = (UShort)size;
    r->op = op;
    r->pad = 0;
    if (++t->n == BUF_RECS) flush(t);
}

static void emit(struct thr *t, ULong addr, UInt size, Int write) {
    ULong now = t->instrs + slice_instrs;
    ULong gap = now - t->last_instr;
    t->last_instr = now;
    t->records++;
    put(t, addr, size, (UChar)write, gap > 0xFFFFFFFFULL ? 0xFFFFFFFFU : (UInt)gap);
}

/* A thread's records are complete: its last buffer, then the end mark. */
static void thread_done(struct thr *t) {
    if (t->done) return;
    put(t, 0, 0, 2, 0);
    flush(t);
    VG_(close)(t->fd);
    t->done = True;
}

static struct thr *thread_new(ThreadId tid) {
    if (n_all == MAX_THREADS || tid >= MAX_THREADS) die("more than 4096 threads");
    struct thr *t = VG_(calloc)("tiersim.thr", 1, sizeof *t);
    HChar path[4200];
    t->index = n_all;
    t->cpu = tc_cpu_of(&cfg.env, t->index);
    t->buf = VG_(malloc)("tiersim.buf", BUF_RECS * sizeof(tc_rec_t));
    VG_(sprintf)(path, "%s/t%u.bin", cfg.dir, t->index);
    SysRes sr = VG_(open)(path, VKI_O_WRONLY | VKI_O_CREAT | VKI_O_TRUNC, 0644);
    if (sr_isError(sr)) die("cannot create a thread's record file");
    t->fd = (Int)sr_Res(sr);
    if (cfg.env.llc) {
        if (!cfg.env.per_cpu) {
            if (!shared_cache) shared_cache = cache_new();
            t->c = shared_cache;
        } else {
            if (t->cpu >= 4096) die("a CPU number above 4095");
            if (!cpu_caches[t->cpu]) cpu_caches[t->cpu] = cache_new();
            t->c = cpu_caches[t->cpu];
        }
    }
    all[n_all++] = t;
    by_tid[tid] = t;
    return t;
}

/* The helpers the instrumented code calls: one access of the running thread. */
static void access_mem(Addr addr, UWord size, Int write) {
    struct thr *t = cur;
    if (!t || t->done) return;
    if (write)
        t->stores++;
    else
        t->loads++;
    t->bytes += size;
    if (!t->c) {
        emit(t, addr, (UInt)size, write);
        return;
    }
    ULong first = addr >> cfg.env.line_shift, last = (addr + (size ? size : 1) - 1) >> cfg.env.line_shift;
    for (ULong line = first; line <= last; line++) {
        ULong wb, *e = &t->c->tab[line & t->c->tab_mask];
        if (TC_TAB_HIT(*e, line, write)) {
            t->hits++;
            continue;
        }
        *e = line << 1 | (ULong)write;
        if (tc_set_access_any(t->c->tags + (line % t->c->sets) * t->c->ways, t->c->ways, line, write, &wb)) {
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
}

static VG_REGPARM(2) void tt_load(Addr addr, UWord size) { access_mem(addr, size, 0); }
static VG_REGPARM(2) void tt_store(Addr addr, UWord size) { access_mem(addr, size, 1); }

/* A thread gets the CPU: the time slice of the one before ends. */
static void start_client_code(ThreadId tid, ULong blocks_done) {
    (void)blocks_done;
    struct thr *t = tid < MAX_THREADS ? by_tid[tid] : NULL;
    if (t == cur) return;
    if (cur) cur->instrs += slice_instrs;
    slice_instrs = 0;
    cur = t;
}

/* Threads are numbered when created, in the parent, as the runtime numbers them. Valgrind also
 * announces the main thread, which post_clo_init has made already. */
static void thread_create(ThreadId parent, ThreadId child) {
    if (parent == VG_INVALID_THREADID && child < MAX_THREADS && by_tid[child]) return;
    thread_new(child);
}

static void thread_exit(ThreadId tid) {
    struct thr *t = tid < MAX_THREADS ? by_tid[tid] : NULL;
    if (!t) return;
    if (t == cur) {
        cur->instrs += slice_instrs;
        slice_instrs = 0;
        cur = NULL;
    }
    thread_done(t);
    by_tid[tid] = NULL;
}

static void add_access(IRSB *sb, IRExpr *addr, Int size, Bool write, IRExpr *guard) {
    void *fn = write ? (void *)tt_store : (void *)tt_load;
    const HChar *name = write ? "tt_store" : "tt_load";
    IRExpr **args = mkIRExprVec_2(addr, mkIRExpr_HWord((HWord)size));
    IRDirty *di = unsafeIRDirty_0_N(2, name, VG_(fnptr_to_fnentry)(fn), args);
    if (guard) di->guard = guard;
    addStmtToIRSB(sb, IRStmt_Dirty(di));
}

/* slice_instrs += 1, inline. */
static void add_instr(IRSB *sb) {
    IRTemp old = newIRTemp(sb->tyenv, Ity_I64), new = newIRTemp(sb->tyenv, Ity_I64);
    IRExpr *at = mkIRExpr_HWord((HWord)&slice_instrs);
    addStmtToIRSB(sb, IRStmt_WrTmp(old, IRExpr_Load(Iend_LE, Ity_I64, at)));
    addStmtToIRSB(sb, IRStmt_WrTmp(new, IRExpr_Binop(Iop_Add64, IRExpr_RdTmp(old), IRExpr_Const(IRConst_U64(1)))));
    addStmtToIRSB(sb, IRStmt_Store(Iend_LE, at, IRExpr_RdTmp(new)));
}

/* Loads, stores, the memory effects of helper calls and compare-and-swaps, as lackey sees them;
 * each instruction's count goes up before its accesses, so a record's gap counts the instruction
 * that made it. */
static IRSB *tt_instrument(VgCallbackClosure *closure, IRSB *in, const VexGuestLayout *layout,
                           const VexGuestExtents *vge, const VexArchInfo *archinfo, IRType gWordTy, IRType hWordTy) {
    (void)closure;
    (void)layout;
    (void)vge;
    (void)archinfo;
    (void)hWordTy;
    if (gWordTy != hWordTy) die("host and guest word sizes differ");
    IRSB *sb = deepCopyIRSBExceptStmts(in);
    Int i = 0;
    while (i < in->stmts_used && in->stmts[i]->tag != Ist_IMark) addStmtToIRSB(sb, in->stmts[i++]);
    for (; i < in->stmts_used; i++) {
        IRStmt *st = in->stmts[i];
        if (!st || st->tag == Ist_NoOp) continue;
        switch (st->tag) {
        case Ist_IMark:
            addStmtToIRSB(sb, st);
            add_instr(sb);
            break;
        case Ist_WrTmp: {
            IRExpr *data = st->Ist.WrTmp.data;
            if (data->tag == Iex_Load)
                add_access(sb, data->Iex.Load.addr, sizeofIRType(data->Iex.Load.ty), False, NULL);
            addStmtToIRSB(sb, st);
            break;
        }
        case Ist_Store: {
            IRExpr *data = st->Ist.Store.data;
            add_access(sb, st->Ist.Store.addr, sizeofIRType(typeOfIRExpr(in->tyenv, data)), True, NULL);
            addStmtToIRSB(sb, st);
            break;
        }
        case Ist_StoreG: {
            IRStoreG *sg = st->Ist.StoreG.details;
            add_access(sb, sg->addr, sizeofIRType(typeOfIRExpr(in->tyenv, sg->data)), True, sg->guard);
            addStmtToIRSB(sb, st);
            break;
        }
        case Ist_LoadG: {
            IRLoadG *lg = st->Ist.LoadG.details;
            IRType ty = Ity_INVALID, arg = Ity_INVALID;
            typeOfIRLoadGOp(lg->cvt, &ty, &arg);
            add_access(sb, lg->addr, sizeofIRType(arg), False, lg->guard);
            addStmtToIRSB(sb, st);
            break;
        }
        case Ist_Dirty: {
            IRDirty *d = st->Ist.Dirty.details;
            if (d->mFx != Ifx_None) {
                if (d->mFx == Ifx_Read || d->mFx == Ifx_Modify) add_access(sb, d->mAddr, d->mSize, False, NULL);
                if (d->mFx == Ifx_Write || d->mFx == Ifx_Modify) add_access(sb, d->mAddr, d->mSize, True, NULL);
            }
            addStmtToIRSB(sb, st);
            break;
        }
        case Ist_CAS: {
            IRCAS *cas = st->Ist.CAS.details;
            Int size = sizeofIRType(typeOfIRExpr(in->tyenv, cas->dataLo)) * (cas->dataHi ? 2 : 1);
            add_access(sb, cas->addr, size, False, NULL);
            add_access(sb, cas->addr, size, True, NULL);
            addStmtToIRSB(sb, st);
            break;
        }
        case Ist_LLSC: {
            IRType ty = typeOfIRTemp(in->tyenv, st->Ist.LLSC.result);
            if (st->Ist.LLSC.storedata == NULL)
                add_access(sb, st->Ist.LLSC.addr, sizeofIRType(ty), False, NULL);
            else
                add_access(sb, st->Ist.LLSC.addr, sizeofIRType(typeOfIRExpr(in->tyenv, st->Ist.LLSC.storedata)),
                           True, NULL);
            addStmtToIRSB(sb, st);
            break;
        }
        default:
            addStmtToIRSB(sb, st);
        }
    }
    return sb;
}

static void tt_post_clo_init(void) {
    const HChar *dir = VG_(getenv)("TIERSIM_CAPTURE_DIR");
    if (!dir || !*dir) die("TIERSIM_CAPTURE_DIR is not set: run it through `tiersim capture`");
    VG_(snprintf)(cfg.dir, sizeof cfg.dir, "%s", dir);
    tc_env_read(&cfg.env);
    if (tc_env_u64("TIERSIM_PAGEMAP", 0)) {
        HChar path[4200];
        VG_(sprintf)(path, "%s/pagemap.bin", cfg.dir);
        SysRes sr = VG_(open)(path, VKI_O_WRONLY | VKI_O_CREAT | VKI_O_TRUNC, 0644);
        if (sr_isError(sr)) die("cannot create pagemap.bin");
        cfg.pm_out = (Int)sr_Res(sr);
        sr = VG_(open)("/proc/self/pagemap", VKI_O_RDONLY, 0);
        cfg.pagemap_fd = sr_isError(sr) ? -1 : (Int)sr_Res(sr);
        cfg.pagemap_state = cfg.pagemap_fd >= 0 ? "ok" : "unreadable";
    }
    /* The main thread: Valgrind's thread 1, tiersim's 0. */
    cur = thread_new(1);
}

static void tt_fini(Int exitcode) {
    (void)exitcode;
    if (cur) cur->instrs += slice_instrs;
    slice_instrs = 0;
    cur = NULL;
    for (UInt i = 0; i < n_all; i++) thread_done(all[i]);
    if (cfg.pm_out >= 0) VG_(close)(cfg.pm_out);
    ULong dirty = 0;
    struct cache *cs[4097];
    UInt nc = 0;
    if (shared_cache) cs[nc++] = shared_cache;
    for (UInt i = 0; i < 4096; i++)
        if (cpu_caches[i]) cs[nc++] = cpu_caches[i];
    for (UInt k = 0; k < nc; k++) dirty += tc_dirty_lines(cs[k]->tags, cs[k]->sets * cs[k]->ways);
    /* Written to a temporary name and renamed: a summary is whole or absent. */
    HChar path[4200], tmp[4200], line[512];
    VG_(sprintf)(path, "%s/summary", cfg.dir);
    VG_(sprintf)(tmp, "%s/summary.part", cfg.dir);
    SysRes sr = VG_(open)(tmp, VKI_O_WRONLY | VKI_O_CREAT | VKI_O_TRUNC, 0644);
    if (sr_isError(sr)) die("cannot create the summary");
    Int fd = (Int)sr_Res(sr);
    Int len = VG_(sprintf)(line, "version 1\ntracer valgrind_tool\ntime instructions\ncaches %u\ndirty_at_exit %llu\npagemap %s\n", nc, dirty,
                           cfg.pagemap_state);
    write_all(fd, line, len);
    for (UInt i = 0; i < n_all; i++) {
        struct thr *t = all[i];
        len = VG_(sprintf)(line,
                           "thread %u cpu %u loads %llu stores %llu bytes %llu hits %llu misses %llu writebacks %llu "
                           "records %llu instructions %llu\n",
                           t->index, t->cpu, t->loads, t->stores, t->bytes, t->hits, t->misses, t->writebacks,
                           t->records, t->instrs);
        write_all(fd, line, len);
    }
    VG_(close)(fd);
    if (VG_(rename)(tmp, path) != 0) die("cannot rename the summary");
    (void)n_caches;
}

static void tt_pre_clo_init(void) {
    VG_(details_name)("tiersim");
    VG_(details_version)(NULL);
    VG_(details_description)("tiersim's memory-trace capture (LLC-filtered binary records)");
    VG_(details_copyright_author)("tiersim contributors");
    VG_(details_bug_reports_to)("the tiersim repository");
    VG_(details_avg_translation_sizeB)(200);
    VG_(basic_tool_funcs)(tt_post_clo_init, tt_instrument, tt_fini);
    VG_(track_start_client_code)(start_client_code);
    VG_(track_pre_thread_ll_create)(thread_create);
    VG_(track_pre_thread_ll_exit)(thread_exit);
    VG_(needs_syscall_wrapper)(pre_syscall, post_syscall);
}

VG_DETERMINE_INTERFACE_VERSION(tt_pre_clo_init)
