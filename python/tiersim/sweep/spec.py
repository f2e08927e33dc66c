"""Sweep files: parse and check the TOML, expand traces x platforms x policies x grids x seeds into
runs, and key each run by the hash of everything its result depends on. Format: docs/sweep.md."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tiersim
from tiersim import _native
from tiersim._convert import overrides_to_list, params_to_toml, toml_value
from tiersim._native import TiersimError

TRACE_FORMATS = ("native", "mqsim", "lackey", "csv")


def _err(where: str, message: str) -> TiersimError:
    return TiersimError(f"{where}: {message}")


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
            if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64:
                raise _err(f"{where}.seed", f"expected an integer in [0, 2^64), got {seed!r}")
            # Built and dropped here, so that an unknown generator, key or value fails before any run.
            try:
                _native.check_generator(gen, params_to_toml(params), seed)
            except TiersimError as exc:
                raise _err(where, str(exc)) from None
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
        raise _err(where, 'expected a table of dotted platform keys, e.g. { "host.mlp" = 4 }')
    try:
        return overrides_to_list(table)
    except TiersimError as exc:
        raise _err(where, str(exc)) from None


def _policies(spec_path: Path, sweep: dict[str, Any], entries: Any) -> list[tuple[str, str, dict[str, Any]]]:
    """(label, policy name, params) per expanded policy (a policy's own grid expands here)."""
    registry = {p["name"]: {q["name"] for q in p.get("params", [])} for p in tiersim.list_plugins()["policies"]}
    raw: list[tuple[str, dict[str, Any]]] = [
        (f"sweep.policies[{i}]", {"name": n}) for i, n in enumerate(sweep.get("policies", []), 1)
    ]
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
    if (
        not isinstance(seeds, list)
        or not seeds
        or not all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s < 2**64 for s in seeds)
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
    for trace, (p_label, platform, p_source, p_over), (
        pol_label,
        pol_name,
        pol_params,
    ), combo, seed in itertools.product(traces, platforms, policies, list(_combos(grid)), seeds):
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
