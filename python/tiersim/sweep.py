"""Sweeps: one TOML file expands into traces x platforms x policies x override grids x seeds.

Each expanded run is keyed by a hash of everything its result depends on (see `run_hash`). The
sweep directory is its journal: a run is done when its part file `parts/HASH.parquet` exists
(written atomically, last), so an interrupted sweep resumes where it stopped and a run is never
computed twice. `results.parquet` is the one table of all parts, rewritten atomically at the end.

Runs execute on local worker processes (concurrent.futures, spawn) or on a Dask cluster. A run
that raises is recorded as failed with its error; a worker that dies (segfault, os._exit, OOM
kill) is found by rerunning the runs it may have been holding one at a time, each in its own
process, and the one that kills its process is recorded as failed. Neither stops the sweep.
The file format is documented in docs/sweep.md.
"""

from __future__ import annotations

import fcntl
import hashlib
import itertools
import json
import multiprocessing
import os
import signal
import tempfile
import time
import tomllib
import traceback
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

import tiersim
from tiersim._convert import overrides_to_list, params_to_toml, toml_value
from tiersim._native import TiersimError
from tiersim._result import RunResult

PARTS_DIR = "parts"
RUNS_DIR = "runs"
CACHE_DIR = "trace-cache"
RESULTS_FILE = "results.parquet"
SPEC_COPY = "sweep.toml"
DIGEST_CACHE = "trace-digests.json"

TRACE_FORMATS = ("native", "mqsim", "lackey", "csv")

# Config columns of the results table, in this order, before the grid columns and the metrics.
CONFIG_COLUMNS = (
    "hash",
    "index",
    "trace",
    "trace_source",
    "trace_digest",
    "platform",
    "platform_source",
    "policy",
    "policy_name",
    "policy_params",
    "overrides",
    "seed",
    "status",
    "error",
    "wall_time_s",
    "run_dir",
)


def _err(where: str, message: str) -> TiersimError:
    return TiersimError(f"{where}: {message}")


# ---------------------------------------------------------------------------------------------
# the spec


@dataclass(frozen=True)
class TraceRef:
    """Where a run's accesses come from: a trace file or a generator materialised once per worker."""

    label: str
    path: str | None = None  # absolute
    source: str = ""  # as written in the spec: path relative to the spec, or "gen:NAME"
    format: str = "native"
    gen: str | None = None
    gen_params: tuple[tuple[str, Any], ...] = ()
    gen_seed: int = 0
    digest: str = ""  # sha256 of the file, or of the generator's name, params and seed

    def identity(self) -> dict[str, Any]:
        if self.gen is not None:
            return {"gen": self.gen, "params": params_to_toml(dict(self.gen_params)), "seed": self.gen_seed}
        return {"path": self.source, "format": self.format, "sha256": self.digest}


@dataclass(frozen=True)
class RunSpec:
    """One expanded run: what to simulate, and the labels it gets in the results table."""

    index: int
    trace: TraceRef
    platform_label: str
    platform: str  # preset name or absolute path of a platform file
    platform_source: str
    overrides: tuple[str, ...]  # "key=toml" strings, base `set` then grid values
    policy_label: str
    policy_name: str
    policy_params: tuple[tuple[str, Any], ...]
    seed: int
    grid: tuple[tuple[str, Any], ...]  # column name -> value, for the results table
    resolved_platform: str = ""
    hash: str = ""


@dataclass(frozen=True)
class RunTask:
    """What a worker needs: the run and where generated or converted traces may be cached."""

    run: RunSpec
    cache_dir: str | None  # None: the worker's own temporary directory


@dataclass
class Sweep:
    path: Path
    name: str
    runs: list[RunSpec]
    baseline: str | None
    text: str


_TOP_KEYS = {"sweep", "trace", "platform", "policy"}
_SWEEP_KEYS = {"name", "seeds", "set", "grid", "platforms", "policies", "baseline"}
_TRACE_KEYS = {"label", "path", "format", "gen", "params", "seed"}
_PLATFORM_KEYS = {"label", "name", "path", "set"}
_POLICY_KEYS = {"label", "name", "params", "grid"}


def _check_keys(where: str, table: Any, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise _err(where, f"expected a table, got {type(table).__name__}")
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise _err(where, f"unknown key '{unknown[0]}' (expected one of: {', '.join(sorted(allowed))})")
    return table


def _str(where: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _err(where, f"expected a non-empty string, got {value!r}")
    return value


def _grid(where: str, grid: Any) -> list[tuple[str, list[Any]]]:
    grid = _check_keys(where, grid, set(grid) if isinstance(grid, dict) else set())
    out = []
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise _err(f"{where}.{key}", f"expected a non-empty list of values, got {values!r}")
        out.append((key, values))
    return out


def _combos(grid: list[tuple[str, list[Any]]]) -> Iterator[list[tuple[str, Any]]]:
    keys = [k for k, _ in grid]
    for values in itertools.product(*(v for _, v in grid)):
        yield list(zip(keys, values, strict=True))


def _slug(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "-".join(_slug(v) for v in value)
    text = value if isinstance(value, str) else toml_value(value, "label")
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in text).strip("_")


def file_digest(path: Path, cache: dict[str, Any] | None = None) -> str:
    """sha256 of a file's bytes, streamed. `cache` maps the absolute path to the size, mtime and
    digest of an earlier call, so a resumed sweep does not read a large trace again unless it
    changed (size or mtime differ)."""
    st = path.stat()
    key = os.fspath(path.resolve())
    hit = None if cache is None else cache.get(key)
    if hit and hit.get("size") == st.st_size and hit.get("mtime_ns") == st.st_mtime_ns:
        return str(hit["sha256"])
    with open(path, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    if cache is not None:
        cache[key] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest}
    return digest


def _traces(spec_path: Path, entries: Any, digests: dict[str, Any]) -> list[TraceRef]:
    if not isinstance(entries, list) or not entries:
        raise _err(str(spec_path), "needs at least one [[trace]] table (a path or a gen)")
    out = []
    for i, entry in enumerate(entries, 1):
        where = f"{spec_path}: [[trace]] {i}"
        t = _check_keys(where, entry, _TRACE_KEYS)
        if ("path" in t) == ("gen" in t):
            raise _err(where, "give exactly one of 'path' (a trace file) and 'gen' (a generator)")
        if "path" in t:
            for key in ("params", "seed"):
                if key in t:
                    raise _err(where, f"'{key}' belongs to a generator trace ('gen'), not to a trace file")
            source = _str(f"{where}.path", t["path"])
            path = (spec_path.parent / source).resolve()
            if not path.is_file():
                raise _err(f"{where}.path", f"trace file '{path}' does not exist")
            fmt = t.get("format", "native")
            if fmt not in TRACE_FORMATS:
                raise _err(f"{where}.format", f"unknown format '{fmt}' (expected one of: {', '.join(TRACE_FORMATS)})")
            label = _str(f"{where}.label", t.get("label", path.stem))
            out.append(
                TraceRef(label, path=os.fspath(path), source=source, format=fmt, digest=file_digest(path, digests))
            )
        else:
            if "format" in t:
                raise _err(where, "'format' belongs to a trace file ('path'), not to a generator")
            gen = _str(f"{where}.gen", t["gen"])
            params = t.get("params", {})
            if not isinstance(params, dict):
                raise _err(f"{where}.params", "expected a table of generator parameters")
            seed = t.get("seed", 0)
            if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
                raise _err(f"{where}.seed", f"expected a non-negative integer, got {seed!r}")
            label = _str(f"{where}.label", t.get("label", gen))
            ref = TraceRef(label, source=f"gen:{gen}", gen=gen, gen_params=tuple(sorted(params.items())), gen_seed=seed)
            ident = json.dumps(ref.identity(), sort_keys=True)
            out.append(TraceRef(**{**ref.__dict__, "digest": hashlib.sha256(ident.encode()).hexdigest()}))
    _unique([t.label for t in out], f"{spec_path}: [[trace]]")
    return out


def _unique(labels: list[str], where: str) -> None:
    seen = set()
    for label in labels:
        if label in seen:
            raise _err(where, f"label '{label}' is used twice; give each entry its own 'label'")
        seen.add(label)


def _platforms(spec_path: Path, sweep: dict[str, Any], entries: Any) -> list[tuple[str, str, str, list[str]]]:
    """(label, preset name or absolute file, source as written, overrides) per platform."""
    out = []
    for i, name in enumerate(sweep.get("platforms", []), 1):
        name = _str(f"{spec_path}: sweep.platforms[{i}]", name)
        out.append(_platform_ref(spec_path, name, name, []))
    for i, entry in enumerate(entries or [], 1):
        where = f"{spec_path}: [[platform]] {i}"
        p = _check_keys(where, entry, _PLATFORM_KEYS)
        if ("name" in p) == ("path" in p):
            raise _err(where, "give exactly one of 'name' (a preset) and 'path' (a platform file)")
        source = _str(where, p.get("name", p.get("path")))
        label = _str(f"{where}.label", p.get("label", Path(source).stem))
        overrides = _overrides(f"{where}.set", p.get("set", {}))
        if "path" in p:
            out.append(_platform_ref(spec_path, label, source, overrides, is_file=True))
        else:
            out.append((label, source, source, overrides))
    if not out:
        raise _err(str(spec_path), "needs at least one platform: sweep.platforms = [...] or [[platform]] tables")
    _unique([p[0] for p in out], f"{spec_path}: platforms")
    return out


def _platform_ref(
    spec_path: Path, label: str, source: str, overrides: list[str], is_file: bool = False
) -> tuple[str, str, str, list[str]]:
    # A name with a path separator or a .toml suffix is a file beside the spec; anything else is
    # a preset name, which the native side checks.
    if is_file or "/" in source or source.endswith(".toml"):
        path = (spec_path.parent / source).resolve()
        if not path.is_file():
            raise _err(str(spec_path), f"platform file '{path}' does not exist")
        return (Path(label).stem if label == source else label, os.fspath(path), source, overrides)
    return (label, source, source, overrides)


def _overrides(where: str, table: Any) -> list[str]:
    if not isinstance(table, dict):
        raise _err(where, "expected a table of dotted platform keys, e.g. { \"host.mlp\" = 4 }")
    try:
        return overrides_to_list(table)
    except TiersimError as exc:
        raise _err(where, str(exc)) from None


def _policies(spec_path: Path, sweep: dict[str, Any], entries: Any) -> list[tuple[str, str, dict[str, Any]]]:
    """(label, policy name, params) per expanded policy (a policy's own grid expands here)."""
    registry = {p["name"]: {q["name"] for q in p.get("params", [])} for p in tiersim.list_plugins()["policies"]}
    raw: list[tuple[str, dict[str, Any]]] = [(f"sweep.policies[{i}]", {"name": n}) for i, n in enumerate(sweep.get("policies", []), 1)]
    raw += [(f"[[policy]] {i}", e) for i, e in enumerate(entries or [], 1)]
    out = []
    for tag, entry in raw:
        where = f"{spec_path}: {tag}"
        p = _check_keys(where, entry, _POLICY_KEYS)
        name = _str(f"{where}.name", p.get("name"))
        if name not in registry:
            raise _err(f"{where}.name", f"unknown policy '{name}' (valid: {', '.join(sorted(registry))})")
        params = p.get("params", {})
        if not isinstance(params, dict):
            raise _err(f"{where}.params", "expected a table of policy parameters")
        grid = _grid(f"{where}.grid", p.get("grid", {}))
        for key in [*params, *(k for k, _ in grid)]:
            if key not in registry[name]:
                valid = ", ".join(sorted(registry[name])) or "none"
                raise _err(where, f"policy '{name}' has no parameter '{key}' (valid: {valid})")
        base_label = _str(f"{where}.label", p.get("label", name))
        for combo in _combos(grid):
            label = base_label + "".join(f"_{k}={_slug(v)}" for k, v in combo)
            out.append((label, name, {**params, **dict(combo)}))
    if not out:
        raise _err(str(spec_path), "needs at least one policy: sweep.policies = [...] or [[policy]] tables")
    _unique([p[0] for p in out], f"{spec_path}: policies")
    return out


def load_sweep(spec: str | os.PathLike[str], digests: dict[str, Any] | None = None) -> Sweep:
    """Parse and expand a sweep file. Every platform and override combination is resolved here,
    so a typo fails before any run starts. `digests` is the trace digest cache (see file_digest)."""
    spec_path = Path(spec)
    try:
        text = spec_path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TiersimError(f"cannot read sweep file '{spec_path}': {exc.strerror or exc}") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TiersimError(f"{spec_path}: invalid TOML: {exc}") from None
    _check_keys(str(spec_path), doc, _TOP_KEYS)
    sweep = _check_keys(f"{spec_path}: [sweep]", doc.get("sweep", {}), _SWEEP_KEYS)
    seeds = sweep.get("seeds", [0])
    if not isinstance(seeds, list) or not seeds or not all(
        isinstance(s, int) and not isinstance(s, bool) and 0 <= s < 2**64 for s in seeds
    ):
        raise _err(f"{spec_path}: sweep.seeds", f"expected a non-empty list of non-negative integers, got {seeds!r}")
    base = _overrides(f"{spec_path}: sweep.set", sweep.get("set", {}))
    grid = _grid(f"{spec_path}: sweep.grid", sweep.get("grid", {}))
    traces = _traces(spec_path, doc.get("trace"), {} if digests is None else digests)
    platforms = _platforms(spec_path, sweep, doc.get("platform"))
    policies = _policies(spec_path, sweep, doc.get("policy"))
    baseline = sweep.get("baseline")
    if baseline is not None and baseline not in {p[0] for p in policies}:
        raise _err(f"{spec_path}: sweep.baseline", f"'{baseline}' is not a policy label of this sweep")

    version = tiersim.__version__
    resolved: dict[tuple[str, tuple[str, ...]], str] = {}
    runs: list[RunSpec] = []
    for trace, (p_label, platform, p_source, p_over), (pol_label, pol_name, pol_params), combo, seed in itertools.product(
        traces, platforms, policies, list(_combos(grid)), seeds
    ):
        overrides = tuple(base + p_over + overrides_to_list(dict(combo)))
        key = (platform, overrides)
        if key not in resolved:
            try:
                resolved[key] = tiersim.resolve_platform(platform, list(overrides))
            except TiersimError as exc:
                raise TiersimError(f"{spec_path}: platform '{p_label}' with {list(overrides)}: {exc}") from None
        run = RunSpec(
            index=len(runs),
            trace=trace,
            platform_label=p_label,
            platform=platform,
            platform_source=p_source,
            overrides=overrides,
            policy_label=pol_label,
            policy_name=pol_name,
            policy_params=tuple(sorted(pol_params.items())),
            seed=seed,
            grid=tuple((f"set.{k}", v) for k, v in combo),
            resolved_platform=resolved[key],
        )
        runs.append(RunSpec(**{**run.__dict__, "hash": run_hash(run, version)}))
    name = sweep.get("name", spec_path.stem)
    return Sweep(path=spec_path, name=str(name), runs=runs, baseline=baseline, text=text)


def run_hash(run: RunSpec, version: str) -> str:
    """The key of a run's result: sha256 over the trace identity (the file's path as written in
    the spec, its format and the sha256 of its bytes; or the generator, its parameters and seed),
    the fully resolved platform TOML (which already contains every override), the overrides
    themselves, the policy and its parameters, the seed and the tiersim version. 32 hex digits."""
    doc = {
        "trace": run.trace.identity(),
        "platform": run.resolved_platform,
        "overrides": list(run.overrides),
        "policy": run.policy_name,
        "policy_params": params_to_toml(dict(run.policy_params)),
        "seed": run.seed,
        "tiersim_version": version,
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32]


# ---------------------------------------------------------------------------------------------
# running one task (in a worker)

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


def _worker_init() -> None:
    # Ctrl-C goes to the whole process group; the driver decides what to do, workers just stop
    # when it shuts the pool down.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _isolated_entry(runner: Runner, task: RunTask, conn: Any) -> None:
    _worker_init()
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
    proc = ctx.Process(target=_isolated_entry, args=(runner, task, send), daemon=True)
    start = time.perf_counter()
    proc.start()
    send.close()
    outcome = None
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
    pending = deque(tasks)
    while pending:
        suspects: list[RunTask] = []
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_worker_init)
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
            for proc in list(getattr(pool, "_processes", {}).values()):
                proc.terminate()
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


# ---------------------------------------------------------------------------------------------
# results


def flatten_summary(summary: Mapping[str, Any]) -> dict[str, int | float]:
    """The numeric fields of summary.json as flat columns: `execution_time_ns`,
    `latency_ns.p99`, `tiering.promotions`, `swap.swap_ins`, `node.dram0.accesses`, ...
    Device internals (`devices`) and non-numeric fields are left to the run directory."""
    out: dict[str, int | float] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, bool):
            return
        if isinstance(value, (int, float)):
            out[prefix] = value
        elif isinstance(value, Mapping):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else k, v)

    for key, value in summary.items():
        if key in ("devices", "nodes", "seed"):
            continue
        # The swap device's own statistics are device internals like `devices`.
        walk(key, {k: v for k, v in value.items() if k != "device"} if key == "swap" and isinstance(value, Mapping) else value)
    for node in summary.get("nodes", []):
        name = node.get("name")
        for k, v in node.items():
            if k != "watermarks_pages" and isinstance(v, (int, float)) and not isinstance(v, bool):
                out[f"node.{name}.{k}"] = v
    return out


def _column_value(v: Any) -> Any:
    # Lists (weights = [4, 1]) become their TOML text so every cell of a column has one type.
    return toml_value(v, "grid") if isinstance(v, (list, tuple)) else v


def result_row(run: RunSpec, outcome: Outcome, run_dir: str | None) -> dict[str, Any]:
    row: dict[str, Any] = {
        "hash": run.hash,
        "index": run.index,
        "trace": run.trace.label,
        "trace_source": run.trace.source,
        "trace_digest": run.trace.digest,
        "platform": run.platform_label,
        "platform_source": run.platform_source,
        "policy": run.policy_label,
        "policy_name": run.policy_name,
        "policy_params": json.dumps(dict(run.policy_params), sort_keys=True),
        "overrides": json.dumps(list(run.overrides)),
        "seed": run.seed,
        "status": outcome.status,
        "error": outcome.error,
        "wall_time_s": outcome.wall_time_s,
        "run_dir": run_dir,
    }
    for k, v in run.grid:
        row[k] = _column_value(v)
    for k, v in run.policy_params:
        row[f"param.{k}"] = _column_value(v)
    if outcome.result is not None:
        row.update(flatten_summary(outcome.result.summary))
    return row


def _row_frame(row: dict[str, Any]) -> pl.DataFrame:
    schema = {
        "hash": pl.Utf8,
        "index": pl.Int64,
        "seed": pl.UInt64,
        "status": pl.Utf8,
        "error": pl.Utf8,
        "wall_time_s": pl.Float64,
        "run_dir": pl.Utf8,
    }
    series = []
    for k, v in row.items():
        if k in schema:
            series.append(pl.Series(k, [v], dtype=schema[k]))
        elif isinstance(v, float):
            series.append(pl.Series(k, [v], dtype=pl.Float64))
        elif isinstance(v, int):
            series.append(pl.Series(k, [v], dtype=pl.Int64))
        else:
            series.append(pl.Series(k, [v], dtype=pl.Utf8 if v is None or isinstance(v, str) else None))
    return pl.DataFrame(series)


def _write_atomic_parquet(df: pl.DataFrame, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        df.write_parquet(tmp, compression="zstd", statistics=False)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def read_parts(out_dir: Path) -> pl.DataFrame:
    """Every completed run of a sweep directory, one row each, in spec order."""
    parts = sorted((out_dir / PARTS_DIR).glob("*.parquet"))
    if not parts:
        return pl.DataFrame()
    frames = [pl.read_parquet(p) for p in parts]
    df = pl.concat(frames, how="diagonal_relaxed")
    first = [c for c in CONFIG_COLUMNS if c in df.columns]
    grid = sorted(c for c in df.columns if c.startswith(("set.", "param.")))
    rest = [c for c in df.columns if c not in first and c not in grid]
    return df.select(first + grid + rest).sort(["index", "hash"])


def consolidate(out_dir: Path) -> pl.DataFrame:
    """Rewrite results.parquet from the part files (atomically) and return it."""
    df = read_parts(out_dir)
    if df.height:
        _write_atomic_parquet(df, out_dir / RESULTS_FILE)
    return df


def completed(out_dir: Path) -> dict[str, str]:
    """hash -> status of every run with a part file."""
    done = {}
    for p in (out_dir / PARTS_DIR).glob("*.parquet"):
        try:
            status = pl.read_parquet(p, columns=["status"])["status"][0]
        except Exception:  # noqa: BLE001 - an unreadable part is a run to redo
            continue
        done[p.stem] = status
    return done


@dataclass
class SweepReport:
    out_dir: Path
    total: int
    skipped: int = 0
    ok: int = 0
    failed: int = 0
    failures: list[tuple[RunSpec, str]] = field(default_factory=list)
    results: pl.DataFrame = field(default_factory=pl.DataFrame)


def run_sweep(
    spec: str | os.PathLike[str],
    out_dir: str | os.PathLike[str] | None = None,
    *,
    workers: int | None = None,
    scheduler: str | None = None,
    retry_failed: bool = False,
    runner: Runner = run_task,
    progress: Callable[[SweepReport, RunSpec | None], None] | None = None,
) -> SweepReport:
    """Run (or resume) a sweep. out_dir defaults to `sweeps/NAME` beside the spec file.

    runner: the function a worker calls per run (default `run_task`); it must be importable by
    the workers (a module-level function). progress(report, run) is called in the driver at the
    start (run None) and after every finished run."""
    spec_path = Path(spec)
    out = Path(out_dir) if out_dir is not None else spec_path.parent / "sweeps" / spec_path.stem
    if out.exists() and not out.is_dir():
        raise TiersimError(f"sweep output '{out}' exists and is not a directory")
    digests_path = out / DIGEST_CACHE
    digests: dict[str, Any] = {}
    if digests_path.is_file():
        try:
            digests = json.loads(digests_path.read_text())
        except ValueError:
            digests = {}
    sweep = load_sweep(spec_path, digests)
    (out / PARTS_DIR).mkdir(parents=True, exist_ok=True)
    (out / RUNS_DIR).mkdir(exist_ok=True)
    _write_text_atomic(out / DIGEST_CACHE, json.dumps(digests, indent=1, sort_keys=True) + "\n")
    _write_text_atomic(out / SPEC_COPY, sweep.text)
    for stale in (out / PARTS_DIR).glob(".*.tmp"):
        stale.unlink(missing_ok=True)

    done = completed(out)
    todo, seen = [], set()
    for run in sweep.runs:
        if run.hash in seen:
            continue
        seen.add(run.hash)
        status = done.get(run.hash)
        if status == "ok" or (status is not None and not retry_failed):
            continue
        todo.append(run)
    report = SweepReport(out_dir=out, total=len(seen), skipped=len(seen) - len(todo))
    cache_dir = None if scheduler else os.fspath((out / CACHE_DIR).resolve())
    tasks = [RunTask(run, cache_dir) for run in todo]

    def on_done(task: RunTask, outcome: Outcome) -> None:
        run = task.run
        run_dir = None
        if outcome.status == "ok" and outcome.result is not None:
            rel = f"{RUNS_DIR}/{run.hash}"
            outcome.result.write(out / rel)
            run_dir = rel
            report.ok += 1
        else:
            report.failed += 1
            report.failures.append((run, outcome.error or "unknown error"))
        # The part file is written last: its presence is what marks the run done.
        _write_atomic_parquet(_row_frame(result_row(run, outcome, run_dir)), out / PARTS_DIR / f"{run.hash}.parquet")
        if progress:
            progress(report, run)

    client = connect_dask(scheduler) if scheduler and tasks else None
    if progress:
        progress(report, None)
    try:
        if client is not None:
            run_dask(tasks, client, runner, on_done)
        elif tasks:
            run_local(tasks, max(1, workers or os.cpu_count() or 1), runner, on_done)
    finally:
        if client is not None:
            client.close()
        report.results = consolidate(out)
    return report


def _write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def load_results(path: str | os.PathLike[str]) -> tuple[pl.DataFrame, Path]:
    """The results table of a sweep, from its directory (read from the part files, so an
    interrupted sweep is readable too) or from a results.parquet; and the sweep directory."""
    p = Path(path)
    if p.is_dir():
        df = read_parts(p)
        if df.height == 0 and (p / RESULTS_FILE).is_file():
            df = pl.read_parquet(p / RESULTS_FILE)
        if df.height == 0:
            raise TiersimError(f"'{p}' holds no sweep results (no {PARTS_DIR}/*.parquet or {RESULTS_FILE})")
        return df, p
    try:
        return pl.read_parquet(p), p.parent
    except FileNotFoundError:
        raise TiersimError(f"sweep results '{p}' do not exist") from None
    except Exception as exc:  # noqa: BLE001 - polars raises several kinds for a non-parquet file
        raise TiersimError(f"'{p}' is not a sweep results table (Parquet): {exc}") from None


def iter_runs(results: pl.DataFrame) -> Iterable[dict[str, Any]]:
    return results.iter_rows(named=True)
