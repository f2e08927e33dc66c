"""Running sweep runs: one task in a worker (trace preparation, failures as outcomes), on local
spawned processes with dead-worker isolation, or on a Dask cluster."""

from __future__ import annotations

import ctypes
import fcntl
import multiprocessing
import os
import signal
import sys
import tempfile
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tiersim
from tiersim._native import TiersimError
from tiersim._result import RunResult
from tiersim.sweep.spec import RunTask

# Per worker process: trace key -> materialised native trace, so a generator runs and a text
# trace is converted once per worker (and, through the shared cache directory, once per sweep
# on one machine). Native traces are streamed by every run: decoding costs about 10 ns per
# access against about 100 ns of simulation (BENCHMARKS.md), and holding a decoded trace in
# memory would break the rule that a trace is never loaded whole.
_PREPARED: dict[str, str] = {}


def _cache_dir(task: RunTask) -> Path:
    d = Path(task.cache_dir) if task.cache_dir else Path(tempfile.gettempdir()) / f"tiersim-trace-cache-{os.getuid()}"
    d.mkdir(parents=True, exist_ok=True)
    return d


def prepare_trace(task: RunTask) -> str:
    """The native trace file a run reads: the trace itself, or the cached result of converting it
    or of running its generator. Concurrent workers serialise on a lock file per trace."""
    t = task.run.trace
    if t.gen is None and t.format == "native":
        assert t.path is not None
        return t.path
    if t.digest in _PREPARED and Path(_PREPARED[t.digest]).is_file():
        return _PREPARED[t.digest]
    cache = _cache_dir(task)
    out = cache / f"{t.digest[:32]}.trace"
    with open(cache / f"{t.digest[:32]}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not out.is_file():
            if t.gen is not None:
                tiersim.generate_with(t.gen, out, dict(t.gen_params), seed=t.gen_seed)
            else:
                tmp = cache / f".{out.name}.{os.getpid()}.tmp"
                try:
                    tiersim.convert(t.path, tmp, dst_format="native", src_format=t.format)  # type: ignore[arg-type]
                    os.replace(tmp, out)
                finally:
                    tmp.unlink(missing_ok=True)
    _PREPARED[t.digest] = os.fspath(out)
    return os.fspath(out)


def run_task(task: RunTask) -> RunResult:
    """The default runner: simulate one expanded run."""
    r = task.run
    return tiersim.run(
        prepare_trace(task),
        platform=r.platform,
        policy=r.policy_name,
        params=dict(r.policy_params),
        overrides=list(r.overrides),
        seed=r.seed,
    )


Runner = Callable[[RunTask], RunResult]


@dataclass
class Outcome:
    status: str  # "ok" or "failed"
    result: RunResult | None = None
    error: str | None = None
    wall_time_s: float = 0.0


def execute(runner: Runner, task: RunTask) -> Outcome:
    """Run one task, turning any exception into a failed outcome (this runs in the worker)."""
    start = time.perf_counter()
    try:
        result = runner(task)
    except TiersimError as exc:
        return Outcome("failed", error=str(exc), wall_time_s=time.perf_counter() - start)
    except Exception as exc:  # noqa: BLE001 - a sweep records every failure and goes on
        tb = traceback.format_exception_only(type(exc), exc)[-1].strip()
        return Outcome("failed", error=f"{type(exc).__name__}: {tb}", wall_time_s=time.perf_counter() - start)
    return Outcome("ok", result=result, wall_time_s=time.perf_counter() - start)


def _worker_init(driver: int) -> None:
    # Ctrl-C goes to the whole process group; the driver decides what to do, workers just stop
    # when it shuts the pool down.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent(driver)


def _die_with_parent(driver: int) -> None:
    """Linux: the kernel sends this worker SIGKILL when the driver dies, however it dies (a
    SIGKILLed driver cannot shut its pool down, and orphaned workers ran on)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    # The driver may have died between the start of this process and the prctl.
    if os.getppid() != driver:
        os._exit(1)


def _isolated_entry(runner: Runner, task: RunTask, conn: Any, driver: int) -> None:
    _worker_init(driver)
    conn.send(execute(runner, task))
    conn.close()


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "worker process died"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"worker process died: killed by {name}"
    return f"worker process died: exited with status {code} without a result"


def run_isolated(runner: Runner, task: RunTask, ctx: Any) -> Outcome:
    """Run one task alone in a fresh process: the only way to know that it, and not a neighbour,
    killed its worker."""
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_isolated_entry, args=(runner, task, send, os.getpid()), daemon=True)
    start = time.perf_counter()
    proc.start()
    send.close()
    outcome: Outcome | None = None
    try:
        outcome = recv.recv()
    except EOFError:
        pass
    proc.join()
    if outcome is None:
        return Outcome("failed", error=_describe_exit(proc.exitcode), wall_time_s=time.perf_counter() - start)
    return outcome


def run_local(
    tasks: Sequence[RunTask],
    workers: int,
    runner: Runner,
    on_done: Callable[[RunTask, Outcome], None],
) -> None:
    """Run tasks on `workers` local processes, calling on_done in the driver as each finishes.

    At most `workers` tasks are in the pool at once, so when a worker dies the runs it may have
    held are exactly the ones in flight; those are rerun one by one in their own processes."""
    ctx = multiprocessing.get_context("spawn")
    # The pool starts all its processes at once: no more than there are runs.
    workers = max(1, min(workers, len(tasks)))
    pending = deque(tasks)
    while pending:
        suspects: list[RunTask] = []
        pool = ProcessPoolExecutor(
            max_workers=workers, mp_context=ctx, initializer=_worker_init, initargs=(os.getpid(),)
        )
        in_flight: dict[Any, RunTask] = {}
        try:
            while pending or in_flight:
                broken = False
                while pending and len(in_flight) < workers:
                    task = pending.popleft()
                    try:
                        in_flight[pool.submit(execute, runner, task)] = task
                    except BrokenProcessPool:
                        # A worker died before its future said so; this task never started.
                        pending.appendleft(task)
                        broken = True
                        break
                done = set() if broken else wait(in_flight, return_when=FIRST_COMPLETED)[0]
                for fut in done:
                    task = in_flight.pop(fut)
                    try:
                        outcome = fut.result()
                    except BrokenProcessPool:
                        broken = True
                        suspects.append(task)
                        continue
                    on_done(task, outcome)
                if broken:
                    suspects.extend(in_flight.values())
                    in_flight.clear()
                    break
        except BaseException:
            # Interrupted: workers ignore SIGINT and may be deep in a long run, so stop them
            # rather than wait. The executor has no public way to do that before Python 3.14.
            procs = list(getattr(pool, "_processes", {}).values())
            for proc in procs:
                proc.terminate()
            # Dead before the driver removes the temporaries they were writing.
            for proc in procs:
                proc.join(10)
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
        for task in suspects:
            on_done(task, run_isolated(runner, task, ctx))


def connect_dask(scheduler: str, timeout: str = "10s") -> Any:
    """A dask.distributed Client for the scheduler at `scheduler`, or one clear error."""
    from distributed import Client

    try:
        return Client(scheduler, timeout=timeout)
    except Exception as exc:  # noqa: BLE001 - OSError, TimeoutError, ValueError depending on the address
        raise TiersimError(f"cannot connect to the Dask scheduler at '{scheduler}': {exc}") from None


def run_dask(
    tasks: Sequence[RunTask],
    client: Any,
    runner: Runner,
    on_done: Callable[[RunTask, Outcome], None],
) -> None:
    """Submit every task to the Dask cluster of `client` and collect them as they finish. A
    worker that dies makes Dask retry the task elsewhere; after `distributed.scheduler.allowed-
    failures` deaths Dask gives up with KilledWorker, which is recorded as the run's error."""
    from distributed import as_completed

    futures = {}
    for task in tasks:
        fut = client.submit(execute, runner, task, key=f"tiersim-run-{task.run.hash}", pure=False)
        futures[fut] = task
    for fut in as_completed(list(futures)):
        task = futures.pop(fut)
        try:
            outcome = fut.result()
        except Exception as exc:  # noqa: BLE001 - KilledWorker, CommClosedError, ...
            outcome = Outcome("failed", error=f"dask: {type(exc).__name__}: {exc}")
        on_done(task, outcome)
        fut.release()
