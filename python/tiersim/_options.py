"""The one check of every number parsed in Python rather than by the native parameter layer
(which checks the rest): CLI options (through `tiersim.cli._common`) and the arguments of the
Python API that go straight to a native call. NaN and infinity are refused, as in the native
layer, and so is anything outside the valid range, which the error states; the upper bounds
default to what the native call takes, so no value reaches it as an OverflowError."""

from __future__ import annotations

import math
import re
from typing import Any

from tiersim._native import TiersimError

U32_MAX = 2**32 - 1
I64_MAX = 2**63 - 1
U64_MAX = 2**64 - 1
# Time of one instruction when an instruction-count trace becomes time: a millisecond is 10^6
# times a real core's, far past any use, and keeps trace times far from overflow.
MAX_NS_PER_INSTRUCTION = 1e6
# Local worker processes: a pool spawns all of them up front, so an absurd count would be a fork
# bomb rather than a sweep.
MAX_WORKERS = 1024

_SIZE_UNITS = {
    "B": 1,
    "KiB": 1 << 10,
    "MiB": 1 << 20,
    "GiB": 1 << 30,
    "TiB": 1 << 40,
    "kB": 1000,
    "MB": 10**6,
    "GB": 10**9,
}


def _bound_text(x: float) -> str:
    for limit, name in ((U64_MAX, "2^64-1"), (I64_MAX, "2^63-1"), (U32_MAX, "2^32-1")):
        if x == limit:
            return name
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


class _Checked:
    """`parse` raises ValueError with the reason and the range; `check` raises TiersimError
    naming the argument."""

    def parse(self, value: Any) -> Any:
        raise NotImplementedError

    def check(self, name: str, value: Any) -> Any:
        try:
            return self.parse(value)
        except ValueError as exc:
            raise TiersimError(f"{name}: {exc}") from None


class Number(_Checked):
    """A finite int or float in [lo, hi]."""

    def __init__(self, kind: type[int] | type[float], lo: float, hi: float | None = None) -> None:
        self.kind = kind
        self.lo = lo
        self.hi = (U64_MAX if kind is int else math.inf) if hi is None else hi

    def expected(self) -> str:
        what = "an integer" if self.kind is int else "a finite number"
        if math.isinf(self.hi):
            return f"{what} >= {_bound_text(self.lo)}"
        return f"{what} in [{_bound_text(self.lo)}, {_bound_text(self.hi)}]"

    def parse(self, value: Any) -> Any:
        x = value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            try:
                x = self.kind(str(value).strip().replace("_", ""))
            except ValueError:
                raise ValueError(f"expected {self.expected()}, got '{value}'") from None
        if self.kind is int and isinstance(x, float):
            raise ValueError(f"expected {self.expected()}, got '{value}'")
        if not math.isfinite(x):
            raise ValueError(f"{value} is not a number that can be used; expected {self.expected()}")
        if not self.lo <= x <= self.hi:
            raise ValueError(f"{value} is out of range; expected {self.expected()}")
        return self.kind(x)


class Size(_Checked):
    """A size ("8MiB", "512kB", a plain byte count) as bytes, at most `hi`."""

    def __init__(self, hi: int = U64_MAX) -> None:
        self.hi = hi

    def parse(self, value: Any) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            n = value
        else:
            m = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", str(value))
            if not m or (m.group(2) or "B") not in _SIZE_UNITS:
                raise ValueError(f"expected a size like 8MiB ({', '.join(_SIZE_UNITS)}), got '{value}'")
            n = int(m.group(1)) * _SIZE_UNITS[m.group(2) or "B"]
        if not 0 <= n <= self.hi:
            raise ValueError(f"{value} is out of range; expected a size in [0, {_bound_text(self.hi)}] bytes")
        return n
