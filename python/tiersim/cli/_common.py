"""Shared by every command: the root Typer app, the consoles, user-error handling, option parsing
and the formatting of figures and tables."""

from __future__ import annotations

import errno
import importlib
import os
import signal
import sys
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich import box
from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, SpinnerColumn, Task, TimeRemainingColumn
from rich.table import Column, Table
from rich.text import Text

import tiersim
from tiersim import _options
from tiersim._convert import parse_cli_pairs

# Every command and command group: name -> (the module that defines it, the module's Typer for a
# group, None for a command the module registers on `app`), in the order of `tiersim --help`.
# A module is imported, and its commands built by typer, only when one of them runs or a help
# page lists it: `tiersim run` skips the other modules and typer's processing of their
# parameters (inspect.signature on some 600 callables).
COMMANDS: dict[str, tuple[str, str | None]] = {
    "run": ("tiersim.cli.run", None),
    "characterize": ("tiersim.cli.characterize", None),
    "calibrate": ("tiersim.cli.characterize", None),
    "gen": ("tiersim.cli.gen", None),
    "mix": ("tiersim.cli.gen", None),
    "capture": ("tiersim.cli.capture", None),
    "list": ("tiersim.cli.plugins", None),
    "sweep": ("tiersim.cli.sweep", None),
    "report": ("tiersim.cli.report", None),
    "compare": ("tiersim.cli.report", None),
    "reproduce": ("tiersim.cli.reproduce", None),
    "filebench": ("tiersim.cli.filebench", None),
    "demo": ("tiersim.cli.demo", None),
    "trace": ("tiersim.cli.trace", "trace_app"),
    "platform": ("tiersim.cli.plugins", "platform_app"),
    "flash": ("tiersim.cli.flash", "flash_app"),
    "validate": ("tiersim.cli.validate", "validate_app"),
    "workload": ("tiersim.cli.workload", "workload_app"),
}


def command_name(info: typer.models.CommandInfo) -> str:
    """The name typer gives a registered command: its own, else its function's, dashed."""
    return info.name or info.callback.__name__.lower().replace("_", "-")  # type: ignore[union-attr]


def _build_command(name: str) -> Any:
    """The click command (or group) `name` of COMMANDS, built by typer as `app` would build it:
    through a Typer holding only it, with `app`'s settings."""
    module, sub_app = COMMANDS[name]
    mod = importlib.import_module(module)
    holder = typer.Typer(
        rich_markup_mode=app.rich_markup_mode,
        pretty_exceptions_short=app.pretty_exceptions_short,
        add_completion=False,
    )
    if sub_app is not None:
        holder.add_typer(getattr(mod, sub_app), name=name)
    else:
        holder.registered_commands += [c for c in app.registered_commands if command_name(c) == name]
    # A callback makes typer build a group, whose commands are built as in `app`'s group.
    holder.callback()(lambda: None)
    return typer.main.get_command(holder).commands[name]  # type: ignore[attr-defined]


class _LazyCommands(MutableMapping[str, Any]):
    """A group's commands: the names of COMMANDS, each built on first use."""

    def __init__(self, built: dict[str, Any]) -> None:
        self._built = dict(built)

    def __getitem__(self, name: str) -> Any:
        if name not in self._built:
            if name not in COMMANDS:
                raise KeyError(name)
            self._built[name] = _build_command(name)
        return self._built[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        raise TypeError("commands are not removed")

    def __iter__(self) -> Iterator[str]:
        yield from COMMANDS
        yield from (name for name in self._built if name not in COMMANDS)

    def __len__(self) -> int:
        return len(COMMANDS.keys() | self._built.keys())


class _LazyGroup(typer.core.TyperGroup):
    """The root group, with its commands built on first use (see COMMANDS). Commands that
    modules imported beforehand registered on `app` (tests do) arrive built."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands = _LazyCommands(dict(self.commands))


app = typer.Typer(
    cls=_LazyGroup,
    name="tiersim",
    help="Trace-driven simulator and policy lab for tiered memory (DRAM, CXL memory, PMEM, swap).",
    no_args_is_help=True,
    add_completion=False,
    # A user error never reaches typer (it is caught below); anything that does is a bug, and a
    # plain traceback is the most useful thing to report for it.
    pretty_exceptions_enable=False,
)


# Piped or captured output gets a wide console so that tables land in logs unwrapped; a
# terminal gets its own width. stderr the same: capture's summary goes there (the program's
# output owns stdout), and a log should hold it as whole as the tables on stdout.
out = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 160)


class Terminated(BaseException):
    """SIGTERM, SIGHUP or SIGINT, raised in the main thread so that every `finally` and every
    `except BaseException` on the way out removes the temporaries it made (with the default
    action the process just vanished, leaving `.tmpPID` files). Not a KeyboardInterrupt: click
    would take that and exit with no word or "Aborted!"; `main` prints one line and exits 128 +
    the signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_terminated(signum: int, _frame: Any) -> None:
    raise Terminated(signum)


def _install_signal_handlers() -> None:
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        # A signal the parent set to be ignored stays ignored: `nohup` (SIGHUP), a script's `cmd &`
        # (SIGINT).
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, _raise_terminated)


def _interrupt_status(exc: BaseException) -> int:
    """The exit status of a command stopped by `exc`: 128 + the signal, as a shell reports it."""
    return 128 + (exc.signum if isinstance(exc, Terminated) else signal.SIGINT)


def _fail(message: str) -> NoReturn:
    err.print(Text.assemble(("error: ", "bold red"), message), soft_wrap=True)
    raise typer.Exit(1)


@contextmanager
def _user_errors() -> Iterator[None]:
    try:
        yield
    except tiersim.TiersimError as exc:
        _fail(str(exc))
    except OSError as exc:
        # Output paths the user chose: permission denied, disk full, read-only file system.
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            _fail(f"no space left writing {exc.filename or 'the output'}")
        where = f" '{exc.filename}'" if exc.filename else ""
        _fail(f"{exc.strerror or exc}{where}")


class _OptionParser:
    """Given to typer as `parser=`: the `tiersim._options` check, as a usage error that click
    prefixes with the option's name. Mixed in before the `_options` class that parses."""

    def __call__(self, value: Any) -> Any:
        try:
            return self.parse(value)  # type: ignore[attr-defined]
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None


class Number(_OptionParser, _options.Number):
    """A numeric option."""

    def __init__(self, kind: type[int] | type[float], lo: float, hi: float | None = None) -> None:
        super().__init__(kind, lo, hi)
        self.__name__ = "INTEGER" if kind is int else "FLOAT"


class Size(_OptionParser, _options.Size):
    """A size option ("8MiB"), as bytes."""

    __name__ = "SIZE"


def _check_report_path(path: Path | None) -> None:
    """A --report file is refused before the command's work, not after a capture of minutes
    that would then leave its trace without the report."""
    from tiersim._capture import _writable

    if path is None:
        return
    with _user_errors():
        _writable(path, "report")
    # The trace's own directory is proven writable when its temporary is made; the report's is
    # not written until the end.
    if not os.access(path.parent, os.W_OK):
        _fail(f"cannot write report '{path}': directory '{path.parent}' is not writable")


def _pairs(items: Sequence[str] | None, option: str) -> dict[str, Any]:
    try:
        return parse_cli_pairs(items or [], option)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=option) from None


def _overrides(items: Sequence[str] | None) -> list[str]:
    """--set values go to the native side as typed ("key=value", bare words allowed), after a
    syntax check here so a typo is a usage error rather than a simulation error."""
    result = []
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise typer.BadParameter(f"expected KEY=VALUE (e.g. --set host.mlp=4), got '{item}'", param_hint="--set")
        result.append(f"{key.strip()}={value.strip()}")
    return result


def _merge_shortcuts(params: dict[str, Any], shortcuts: dict[str, tuple[str, Any]]) -> None:
    """Put the values of shortcut options (`--size` for `footprint`, ...) into `params`; a key set
    both ways is a usage error."""
    for key, (option, value) in shortcuts.items():
        if value is None:
            continue
        if key in params:
            raise typer.BadParameter(f"{option} and --param {key}=... both set {key}; give one", param_hint=option)
        params[key] = value


def _int(n: Any) -> str:
    return f"{n:,}" if isinstance(n, int) else "-"


def _bytes(n: Any) -> str:
    if not isinstance(n, (int, float)):
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _pct(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "-"


def _ms(ns: Any) -> str:
    return f"{ns / 1e6:,.3f} ms" if isinstance(ns, (int, float)) else "-"


def _num(x: Any, digits: int = 1) -> str:
    return f"{x:,.{digits}f}" if isinstance(x, (int, float)) else "-"


def _gbs(nbytes: float, ns: float) -> str:
    # bytes per ns is GB/s (decimal), the unit device datasheets use.
    return f"{nbytes / ns:.2f} GB/s" if ns else "-"


def _kv_table(title: str, rows: list[tuple[str, str]]) -> Table:
    table = Table(title=title, box=box.SIMPLE_HEAD, show_header=False, title_justify="left")
    table.add_column("what", style="bold", no_wrap=True)
    table.add_column("value")
    for key, value in rows:
        table.add_row(key, value)
    return table


def _stats_source(info: dict[str, Any]) -> str:
    source = str(info.get("stats_source", "-"))
    if source == "header" and info.get("verified") is False:
        return "header, unverified (`tiersim trace verify FILE` decodes and checks every record)"
    frames = info.get("frames_checked")
    return source + (f" ({frames} frames checked)" if frames is not None else "")


def _inspect_tables(info: dict[str, Any]) -> list[Table]:
    accesses = info.get("accesses", 0)
    unit = "ns" if str(info.get("time_unit", "")).lower() in ("ns", "nanoseconds") else str(info.get("time_unit", ""))
    rows = [
        ("path", str(info.get("path", "-"))),
        ("format version", str(info.get("version", "-"))),
        ("record layout", str(info.get("record_layout", "-"))),
        ("time unit", str(info.get("time_unit", "-"))),
        (
            "addresses",
            str(info.get("addr_kind", "-"))
            + (f" (v2p {info['v2p']})" if info.get("v2p") not in (None, "unrecorded") else ""),
        ),
        ("page size", _bytes(info.get("page_size"))),
        ("accesses", _int(accesses)),
        (
            "reads / writes",
            f"{_int(info.get('reads'))} / {_int(info.get('writes'))} ({_pct(info.get('writes', 0), accesses)} writes)",
        ),
        ("bytes accessed", f"{_int(info.get('bytes'))} ({_bytes(info.get('bytes'))})"),
        ("footprint", f"{_int(info.get('footprint_pages'))} pages, {_bytes(info.get('footprint_bytes'))}"),
        ("time first / last", f"{_int(info.get('time_first'))} / {_int(info.get('time_last'))} {unit}"),
        ("time span", f"{_int(info.get('time_span'))} {unit}"),
        ("compressed size", _bytes(info.get("compressed_bytes"))),
        ("bytes per access", _num(info.get("bytes_per_access"), 2)),
        ("statistics from", _stats_source(info)),
    ]
    tables = [_kv_table("trace", rows)]
    per_cpu = info.get("per_cpu") or []
    if per_cpu:
        cpus = Table(title="per CPU", box=box.SIMPLE_HEAD, title_justify="left")
        cpus.add_column("cpu", justify="right")
        if all(isinstance(c, dict) for c in per_cpu):
            keys = [k for k in per_cpu[0] if k != "cpu"]
            for k in keys:
                cpus.add_column(k, justify="right")
            cpus.add_column("share", justify="right")
            for i, c in enumerate(per_cpu):
                cpus.add_row(
                    str(c.get("cpu", i)),
                    *(_int(c.get(k)) if isinstance(c.get(k), int) else str(c.get(k)) for k in keys),
                    _pct(c.get("accesses", 0), accesses),
                )
        else:
            cpus.add_column("accesses", justify="right")
            cpus.add_column("share", justify="right")
            # A capture with a sparse --cpu-map (0-1,16-17) leaves most CPUs idle: list the busy ones.
            for i, c in enumerate(per_cpu):
                if c:
                    cpus.add_row(str(i), _int(c), _pct(c if isinstance(c, int) else 0, accesses))
        tables.append(cpus)
    return tables


def _count(n: float) -> str:
    """An access count short enough for a progress line: 950,000 -> 950.0k, 3.2e7 -> 32.0M."""
    if n >= 1e9:
        return f"{n / 1e9:,.2f}G"
    if n >= 1e6:
        return f"{n / 1e6:,.1f}M"
    if n >= 1e4:
        return f"{n / 1e3:,.1f}k"
    return f"{int(n):,}"


class _DescriptionColumn(ProgressColumn):
    """The one column that gives way on a narrow terminal (cut with an ellipsis, never wrapped),
    so that the figures always fit the line."""

    def __init__(self) -> None:
        super().__init__(table_column=Column(no_wrap=False))

    def render(self, task: Task) -> Text:
        return Text(task.description, no_wrap=True, overflow="ellipsis")


class _AccessesColumn(ProgressColumn):
    def __init__(self) -> None:
        super().__init__(table_column=Column(no_wrap=True))

    def render(self, task: Task) -> Text:
        total = f"{_count(task.total)}" if task.total is not None else "?"
        return Text(f"{_count(task.completed)} of {total} accesses")


class _RateColumn(ProgressColumn):
    def __init__(self) -> None:
        super().__init__(table_column=Column(no_wrap=True))

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(f"{_count(speed)}/s" if speed else "-/s")


@contextmanager
def _accesses_progress(
    description: str, console: Console | None = None
) -> Iterator[Callable[[int, int | None], None] | None]:
    """A progress bar on stderr for a long replay: accesses done of the total (from the trace
    header; a pulsing bar when unknown), the rate and the time left. Yields the callback to hand
    to the native call as `progress`; when stderr is not a terminal it draws nothing, but the
    native side still checks for signals before each call. The bar is transient: it leaves
    nothing in the output. Ctrl-C, SIGTERM or SIGHUP (seen at the next update, every 2^18
    accesses) ends the command with status 128 + the signal and one line saying so."""
    console = console or err
    try:
        if not console.is_terminal:
            yield _no_bar
            return
        with _progress_bar(description, console) as update:
            yield update
    except (KeyboardInterrupt, Terminated) as exc:
        err.print(Text("interrupted: nothing was written"), soft_wrap=True)
        raise typer.Exit(_interrupt_status(exc)) from None


def _no_bar(done: int, total: int | None) -> None:
    pass


@contextmanager
def _progress_bar(description: str, console: Console) -> Iterator[Callable[[int, int | None], None]]:
    progress = Progress(
        SpinnerColumn(),
        _DescriptionColumn(),
        BarColumn(bar_width=20),
        _AccessesColumn(),
        _RateColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    )
    task = progress.add_task(description, total=None)

    def update(done: int, total: int | None) -> None:
        progress.update(task, completed=done, total=total)

    with progress:
        yield update


def _print(*renderables: Any) -> None:
    for r in renderables:
        out.print(r)


def _echo_raw(text: str) -> None:
    # TOML and JSON go out untouched: rich would read "[nodes.dram0]" as markup.
    sys.stdout.write(text if text.endswith("\n") else text + "\n")


def _cell(v: Any) -> str:
    if isinstance(v, str):
        return v
    if v is not None and v == v and float(v).is_integer() and abs(v) < 1e15:
        return f"{int(v)}"
    return f"{v:.4g}"


class TraceFormat(StrEnum):
    native = "native"
    mqsim = "mqsim"
    lackey = "lackey"
    csv = "csv"


_FROM_HELP = "Input format (default: native, recognised by its magic; text formats are never guessed)."


def _fmt(f: TraceFormat | None) -> str | None:
    return None if f is None or f is TraceFormat.native else f.value
