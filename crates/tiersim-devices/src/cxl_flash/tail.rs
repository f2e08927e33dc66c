//! The device's response tail: what follows the controller's decisions and never feeds back into
//! them. That is the device DRAM's channel timing (but for a write-buffer read, which waits for
//! it), the device-to-host link and the order responses take it, and the latency statistics. An
//! open-loop replay runs the tail on a thread of its own (`CxlFlash::with_tail_thread`), fed a log
//! of events in the controller's program order; otherwise the controller calls it directly. Both
//! call the same methods in the same order, so the results are the same.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError};
use std::thread::Thread;
use std::time::Duration;

use tiersim_core::{Ns, Op};

use super::metrics::{Class, Latency};
use crate::dram::ChannelGroup;
use crate::pipe::{completion, Pipe, Ps};

/// How a request's response reaches the link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Response {
    /// At once: its data comes from the device DRAM (every line hit).
    Now,
    /// With its MSHR row's data, which carries it (`Tail::row`'s `count`).
    WithRow,
    /// On its own, at its completion: a posted write's acknowledgement, a request spanning lines.
    Deferred,
}

/// `Tail::row`'s `fill_addr` of a row that writes no line into the DRAM.
pub(super) const NO_FILL: u64 = u64::MAX;

pub(super) struct Tail {
    pub(super) d2h: Pipe,
    pub(super) dram: ChannelGroup,
    deferred: Deferred,
    pub(super) lat: Latency,
    pub(super) last_completion: Ns,
    link_latency: Ps,
    line_bytes: u32,
    /// Link bytes of a message without data (a write's completion).
    header: u64,
    /// The latest DRAM completion among the current request's lines.
    lines_done: Ps,
}

impl Tail {
    pub(super) fn new(d2h: Pipe, dram: ChannelGroup, link_latency: Ps, line_bytes: u32, header: u64) -> Tail {
        Tail {
            d2h,
            dram,
            deferred: Deferred::default(),
            lat: Latency::new(),
            last_completion: 0,
            link_latency,
            line_bytes,
            header,
            lines_done: 0,
        }
    }

    /// An MSHR row retired at `ready`: its `count` responses of `bytes` take the link, after the
    /// deferred responses due before it (the controller retires rows and sends responses in time
    /// order, a row first on a tie), and its line is written into the DRAM at `fill_addr`.
    #[inline(always)]
    pub(super) fn row(&mut self, ready: Ps, count: u32, bytes: u32, fill_addr: u64) {
        while self.deferred.due < ready {
            self.send_deferred();
        }
        for _ in 0..count {
            self.d2h.serve(ready, u64::from(bytes));
        }
        if fill_addr != NO_FILL {
            self.dram.serve(ready, fill_addr, self.line_bytes, Op::Write);
        }
    }

    /// A DRAM access of one of the current request's lines: its completion.
    #[inline(always)]
    pub(super) fn line(&mut self, at: Ps, addr: u64, bytes: u32, op: Op) -> Ps {
        let done = self.dram.serve(at, addr, bytes, op);
        self.lines_done = self.lines_done.max(done);
        done
    }

    /// The controller has retired every row ready by `t`: the deferred responses due by then
    /// have taken the link.
    #[inline]
    pub(super) fn settle(&mut self, t: Ps) {
        while self.deferred.due <= t {
            self.send_deferred();
        }
    }

    fn send_deferred(&mut self) {
        let (when, bytes) = self.deferred.pop();
        self.d2h.serve(when, bytes);
    }

    /// A request of `size` bytes issued at `now` and accepted at `t` is served by `done` (its
    /// DRAM lines aside), its response going as `response`: its completion, recorded.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn done(&mut self, now: Ns, t: Ps, done: Ps, size: u32, write: bool, response: Response, class: Class) -> Ns {
        self.settle(t);
        let done = done.max(std::mem::take(&mut self.lines_done));
        let down = response_bytes(size, write, self.header);
        let returned = match response {
            Response::Now => self.d2h.serve(done, down).1,
            Response::WithRow => done + self.d2h.service(down),
            Response::Deferred => {
                self.deferred.push(done, down);
                done + self.d2h.service(down)
            }
        };
        let end = completion(now, returned.saturating_add(self.link_latency));
        self.lat.record(end.saturating_sub(now), class);
        self.last_completion = self.last_completion.max(end);
        end
    }

    /// Apply a batch of the log.
    fn apply(&mut self, events: &[Event], answers: &SyncSender<Ps>) {
        for &e in events {
            self.apply_one(e, answers);
        }
    }

    #[inline(always)]
    fn apply_one(&mut self, e: Event, answers: &SyncSender<Ps>) {
        match e {
            Event::Row { ready, count, bytes, fill_addr } => self.row(ready, count, bytes, fill_addr),
            Event::Line { at, addr, bytes, op } => {
                self.line(at, addr, bytes, op);
            }
            Event::Dram { at, addr, bytes, op } => {
                self.dram.serve(at, addr, bytes, op);
            }
            Event::Ask { at, addr, bytes, op } => {
                // The controller waits for it; should it be gone, the run is ending anyway.
                let _ = answers.send(self.dram.serve(at, addr, bytes, op));
            }
            Event::Done { now, t, done, size, write, response, class } => {
                self.done(now, t, done, size, write, response, class);
            }
            Event::Hit { now, t, addr, size, write } => {
                self.line(t, addr, size, if write { Op::Write } else { Op::Read });
                self.done(now, t, 0, size, write, Response::Now, Class::Hit);
            }
            Event::Settle { t } => self.settle(t),
        }
    }
}

/// Deferred responses by time: posted-write acknowledgements (issue time plus a constant, so in
/// order while writes are one size) queue in a FIFO; one that would break its order goes to a
/// heap. The earliest is the earlier of the two heads; `due` keeps its time.
struct Deferred {
    fifo: VecDeque<(Ps, u64)>,
    heap: BinaryHeap<Reverse<(Ps, u64)>>,
    /// Time of the earliest response, `Ps::MAX` when none: one field answers whether a response
    /// is due, without looking at both queues and their emptiness.
    due: Ps,
}

impl Default for Deferred {
    fn default() -> Deferred {
        Deferred { fifo: VecDeque::new(), heap: BinaryHeap::new(), due: Ps::MAX }
    }
}

impl Deferred {
    #[inline]
    fn push(&mut self, when: Ps, bytes: u64) {
        match self.fifo.back() {
            Some(&last) if last > (when, bytes) => self.heap.push(Reverse((when, bytes))),
            _ => self.fifo.push_back((when, bytes)),
        }
        self.due = self.due.min(when);
    }

    #[inline]
    fn peek(&self) -> Option<(Ps, u64)> {
        match (self.fifo.front(), self.heap.peek()) {
            (Some(&f), Some(&Reverse(h))) => Some(f.min(h)),
            (f, h) => f.copied().or(h.map(|r| r.0)),
        }
    }

    /// Remove the earliest response (there is one: `due` is a time).
    #[inline]
    fn pop(&mut self) -> (Ps, u64) {
        let first = match (self.fifo.front(), self.heap.peek()) {
            (Some(&f), Some(&Reverse(h))) if h < f => self.heap.pop().map(|r| r.0),
            (Some(_), _) => self.fifo.pop_front(),
            _ => self.heap.pop().map(|r| r.0),
        };
        self.due = self.peek().map_or(Ps::MAX, |(when, _)| when);
        first.expect("a deferred response is due")
    }
}

/// Link bytes of the response to a request of `size` bytes: its data, or a write's completion.
#[inline]
pub(super) fn response_bytes(size: u32, write: bool, header: u64) -> u64 {
    if write {
        header
    } else {
        u64::from(size).div_ceil(64) * 64
    }
}

/// What the controller tells its tail when the tail runs on a thread of its own: one call each,
/// in 32 bytes (the log is written by one core and read by the other).
#[derive(Debug, Clone, Copy)]
enum Event {
    Row { ready: Ps, count: u32, bytes: u32, fill_addr: u64 },
    Line { at: Ps, addr: u64, bytes: u32, op: Op },
    /// A DRAM access nobody waits for (a victim read out).
    Dram { at: Ps, addr: u64, bytes: u32, op: Op },
    /// A DRAM access the controller waits for, answered on the answer channel.
    Ask { at: Ps, addr: u64, bytes: u32, op: Op },
    Done { now: Ns, t: Ps, done: Ps, size: u32, write: bool, response: Response, class: Class },
    /// `Line` then `Done` of a request that hit one line, its access at `t` of its `size`.
    Hit { now: Ns, t: Ps, addr: u64, size: u32, write: bool },
    Settle { t: Ps },
}

/// Events sent at once: large enough that handing a batch over costs little a request, small
/// enough to stay in the cache the other core reads it from (1024 to 32768 measured: 2048 and
/// 8 in flight replayed the mixed benchmark trace fastest).
const BATCH: usize = 2048;
/// How long the tail's thread naps when it has caught up.
const NAP: Duration = Duration::from_micros(100);
/// Batches in flight at most (the memory bound while the tail's thread lags).
const DEPTH: usize = 8;

/// The controller's side of a tail on another thread.
pub(super) struct Log {
    events: Vec<Event>,
    to: Option<SyncSender<Vec<Event>>>,
    /// Emptied batches coming back to be filled again (no allocation in the steady state).
    empty: Receiver<Vec<Event>>,
    answers: Receiver<Ps>,
    /// The tail's thread, woken when the controller waits for it.
    tail: Option<Thread>,
    /// The last line's DRAM access, held back: should its request complete next as a hit of
    /// that one access, both go as one `Hit` event (nearly every hit).
    line: Option<(Ps, u64, u32, Op)>,
}

impl Log {
    #[inline]
    fn push(&mut self, e: Event) {
        if let Some((at, addr, bytes, op)) = self.line.take() {
            self.push_now(Event::Line { at, addr, bytes, op });
        }
        self.push_now(e);
    }

    #[inline]
    fn push_now(&mut self, e: Event) {
        self.events.push(e);
        if self.events.len() >= BATCH {
            self.ship();
        }
    }

    fn ship(&mut self) {
        let next = self.empty.try_recv().unwrap_or_else(|_| Vec::with_capacity(BATCH));
        let full = std::mem::replace(&mut self.events, next);
        // A send fails only when the tail's thread has ended, by a panic that `with_tail_thread`
        // raises again once the controller is done.
        if let Some(to) = &self.to {
            let _ = to.send(full);
        }
    }

    fn ask(&mut self, at: Ps, addr: u64, bytes: u32, op: Op) -> Ps {
        self.push(Event::Ask { at, addr, bytes, op });
        self.ship();
        self.wake();
        self.answers.recv().expect("the response tail's thread ended")
    }

    /// Send what is left and end the log: the tail's thread then returns the tail.
    fn close(&mut self) {
        if let Some((at, addr, bytes, op)) = self.line.take() {
            self.push_now(Event::Line { at, addr, bytes, op });
        }
        if !self.events.is_empty() {
            self.ship();
        }
        self.to = None;
        self.wake();
    }

    fn wake(&self) {
        if let Some(t) = &self.tail {
            t.unpark();
        }
    }
}

/// Where the controller's tail is.
pub(super) enum Port {
    Here(Box<Tail>),
    Away(Log),
}

impl Port {
    pub(super) fn tail(&self) -> &Tail {
        match self {
            Port::Here(t) => t,
            Port::Away(_) => panic!("{AWAY}"),
        }
    }

    pub(super) fn tail_mut(&mut self) -> &mut Tail {
        match self {
            Port::Here(t) => t,
            Port::Away(_) => panic!("{AWAY}"),
        }
    }

    #[inline]
    pub(super) fn row(&mut self, ready: Ps, count: u32, bytes: u32, fill_addr: u64) {
        match self {
            Port::Here(t) => here(t, |t| t.row(ready, count, bytes, fill_addr)),
            Port::Away(l) => l.push(Event::Row { ready, count, bytes, fill_addr }),
        }
    }

    /// A DRAM access of one of the current request's lines: its completion when the tail is
    /// here, else 0 (the tail's thread takes it into the request's completion).
    #[inline]
    pub(super) fn line(&mut self, at: Ps, addr: u64, bytes: u32, op: Op) -> Ps {
        match self {
            Port::Here(t) => here(t, |t| t.line(at, addr, bytes, op)),
            Port::Away(l) => {
                if let Some((at, addr, bytes, op)) = l.line.replace((at, addr, bytes, op)) {
                    l.push_now(Event::Line { at, addr, bytes, op });
                }
                0
            }
        }
    }

    #[inline]
    pub(super) fn dram(&mut self, at: Ps, addr: u64, bytes: u32, op: Op) {
        match self {
            Port::Here(t) => here(t, |t| {
                t.dram.serve(at, addr, bytes, op);
            }),
            Port::Away(l) => l.push(Event::Dram { at, addr, bytes, op }),
        }
    }

    /// A DRAM access the controller needs the completion of (rare: a read from the write
    /// buffer). Away, it waits for the tail's thread to catch up.
    pub(super) fn ask(&mut self, at: Ps, addr: u64, bytes: u32, op: Op) -> Ps {
        match self {
            Port::Here(t) => t.dram.serve(at, addr, bytes, op),
            Port::Away(l) => l.ask(at, addr, bytes, op),
        }
    }

    /// The request's completion when the tail is here, else `now`: the tail's thread records it.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn done(&mut self, now: Ns, t: Ps, done: Ps, size: u32, write: bool, response: Response, class: Class) -> Ns {
        match self {
            Port::Here(tail) => here(tail, |tail| tail.done(now, t, done, size, write, response, class)),
            Port::Away(l) => {
                match l.line {
                    // A hit on one line, its DRAM access at acceptance: the access gives its
                    // completion (`done` is its arrival, no later than `t`).
                    Some((at, addr, bytes, op)) if response == Response::Now && at == t && bytes == size && op.is_write() == write => {
                        l.line = None;
                        l.push_now(Event::Hit { now, t, addr, size, write });
                    }
                    _ => l.push(Event::Done { now, t, done, size, write, response, class }),
                }
                now
            }
        }
    }

    pub(super) fn settle(&mut self, t: Ps) {
        match self {
            Port::Here(tail) => tail.settle(t),
            Port::Away(l) => l.push(Event::Settle { t }),
        }
    }

    /// Run `f` on `owner` with the tail on a thread of its own, then bring the tail back.
    /// `port` must select `owner`'s port. A panic on either thread is raised again here, the
    /// tail's first.
    pub(super) fn with_thread<O, R>(owner: &mut O, port: fn(&mut O) -> &mut Port, f: impl FnOnce(&mut O) -> R) -> R {
        let (to, from) = sync_channel(DEPTH);
        let (empty_to, empty) = sync_channel(DEPTH + 2);
        let (answer_to, answers) = sync_channel(1);
        let log = Log { events: Vec::with_capacity(BATCH), to: Some(to), empty, answers, tail: None, line: None };
        let Port::Here(mut tail) = std::mem::replace(port(owner), Port::Away(log)) else {
            return f(owner);
        };
        std::thread::scope(|s| {
            // The tail's thread polls, napping while the log is empty, so that the controller
            // hands a batch over without waking it (a wake-up cost the controller's core about
            // 10 us a batch); the controller wakes it only to wait for an answer, and at the end.
            let worker = move || loop {
                match from.try_recv() {
                    Ok(mut events) => {
                        tail.apply(&events, &answer_to);
                        events.clear();
                        let _ = empty_to.try_send(events);
                    }
                    Err(TryRecvError::Empty) => std::thread::park_timeout(NAP),
                    Err(TryRecvError::Disconnected) => return tail,
                }
            };
            let handle = match std::thread::Builder::new().name("cxl-flash-tail".into()).spawn_scoped(s, worker) {
                Ok(h) => h,
                Err(e) => panic!("cannot start the response tail's thread: {e}"),
            };
            if let Port::Away(log) = port(owner) {
                log.tail = Some(handle.thread().clone());
            }
            let out = catch_unwind(AssertUnwindSafe(|| f(owner)));
            if let Port::Away(log) = port(owner) {
                log.close();
            }
            match handle.join() {
                Ok(tail) => {
                    *port(owner) = Port::Here(tail);
                    out.unwrap_or_else(|p| resume_unwind(p))
                }
                Err(p) => resume_unwind(p),
            }
        })
    }
}

/// A call on the tail when it is here, kept out of line: inlined, the tail's code would crowd
/// the controller's hot functions, where the log's push is a few instructions.
#[inline(never)]
fn here<R>(t: &mut Tail, f: impl FnOnce(&mut Tail) -> R) -> R {
    f(t)
}

const AWAY: &str = "the cxl_flash response tail is on its thread (read the device after `with_tail_thread`)";

const _: () = assert!(std::mem::size_of::<Event>() == 32);
