"""The `tiersim` command line.

Every command maps onto one or a few calls of the Python API (and so of `tiersim._native`).
User errors (TiersimError, unwritable outputs) print one "error: ..." line on stderr and exit 1;
malformed arguments are usage errors (exit 2). Neither prints a traceback; nor does an internal
error (a bug: one line and exit 2, the traceback only with TIERSIM_DEBUG=1).

One module per command group; `_common` holds the root app, the consoles, error handling,
option parsing and formatting they share. Importing a module registers its commands; the root
group imports a module only when one of its commands runs or a help page lists it, in the
order of `_common.COMMANDS`.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Annotated

import typer
from rich.text import Text

import tiersim
from tiersim.cli._common import Terminated, _echo_raw, _install_signal_handlers, app, err

__all__ = ["app", "main"]


@app.callback(invoke_without_command=True)
def _root(
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.", is_eager=True)] = False,
) -> None:
    if version:
        _echo_raw(f"tiersim {tiersim.__version__}")
        raise typer.Exit(0)


def main() -> None:
    _install_signal_handlers()
    try:
        app(prog_name="tiersim")
    except Terminated as exc:
        err.print(
            Text.assemble(
                ("error: ", "bold red"),
                f"stopped by {signal.Signals(exc.signum).name}; outputs not finished were removed",
            ),
            soft_wrap=True,
        )
        sys.exit(128 + exc.signum)
    except Exception as exc:  # noqa: BLE001 - the last line of defence: one line, not a traceback
        if _debug():
            raise
        err.print(
            Text.assemble(
                ("error: ", "bold red"),
                f"internal error: {type(exc).__name__}: {exc} "
                "(set TIERSIM_DEBUG=1 for the traceback; please report this as a tiersim bug)",
            ),
            soft_wrap=True,
        )
        sys.exit(2)


def _debug() -> bool:
    return os.environ.get("TIERSIM_DEBUG", "") not in ("", "0")
