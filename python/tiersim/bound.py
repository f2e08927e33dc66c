"""tiersim's bound (`--policy oracle_bound`): the fastest of a family of free-migration
`oracle_dynamic` runs (docs/model.md, "oracle_dynamic" and "tiersim's bound"). The studies
(`reproduce autotiering`, `reproduce scaling`) and `tiersim run` take their members from
BOUND_MEMBERS below, the one list of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from tiersim._native import TiersimError

if TYPE_CHECKING:
    from tiersim import Overrides, PathLike
    from tiersim._result import RunResult

BOUND = "oracle_bound"
# The family's first member: every epoch's hot set in the fast tier, moved at no cost.
ORACLE_FREE = "oracle_dynamic_free"
# Filling the fast tier with each epoch's hot set loses where the fast tier's channels saturate
# (stencil: DRAM at 230 ns against 85 ns idle, DCPMM idle), so members cap the fast tier's share
# of the hot set's traffic (`fast_share`, Colloid's principle of balancing loaded latency rather
# than maximising hits); on hashmap a finer cut in time (128 epochs) gains more than any share.
# Where both fast nodes' channels saturate (graph), placing each hot page under its heaviest
# user's socket lost to tpp by up to 1.2 %: the last member spreads the hot set's traffic evenly
# over the fast nodes (`fast_nodes = "balanced"`, Colloid's balance across the fast nodes) and
# leaves the hot set's coldest 0.5 % of it in the slow tier, as tpp leaves 2.6 % of graph's reads.
# Members chosen by controlled runs (docs/model.md); the bound costs one run per member.
BOUND_MEMBERS: dict[str, dict[str, Any]] = {
    ORACLE_FREE: {"migrations": "free"},
    f"{ORACLE_FREE}_epochs128": {"migrations": "free", "epochs": 128},
    **{f"{ORACLE_FREE}_share{s:g}": {"migrations": "free", "fast_share": s} for s in (0.8, 0.6)},
    f"{ORACLE_FREE}_balanced_share0.995": {"migrations": "free", "fast_nodes": "balanced", "fast_share": 0.995},
}
MEMBER_POLICY = "oracle_dynamic"


def run_bound(
    trace: PathLike | None = None,
    *,
    platform: PathLike,
    params: Mapping[str, Any] | str | None = None,
    overrides: Overrides = None,
    seed: int = 0,
    generator: str | None = None,
    generator_params: Mapping[str, Any] | str | None = None,
    progress: Callable[[str, int, int | None], None] | None = None,
) -> RunResult:
    """Run every member of the bound on the same input and return the fastest member's run (ties:
    the member listed first), its summary naming the member chosen and every member's time under
    `bound`. The members' parameters are fixed, so `params` must be empty. `progress` is called
    as progress(member label, done, total) as `tiersim.run`'s."""
    import tiersim

    if params:
        raise TiersimError(
            f"policy {BOUND} takes no parameters: it runs {MEMBER_POLICY} with each member's "
            f"({', '.join(BOUND_MEMBERS)}); run {MEMBER_POLICY} to set them yourself"
        )
    best: tuple[str, RunResult] | None = None
    times: dict[str, int] = {}
    for label, member in BOUND_MEMBERS.items():
        step = None if progress is None else (lambda done, total, label=label: progress(label, done, total))
        result = tiersim.run(
            trace,
            platform=platform,
            policy=MEMBER_POLICY,
            params=member,
            overrides=overrides,
            seed=seed,
            generator=generator,
            generator_params=generator_params,
            progress=step,
        )
        times[label] = result.execution_time_ns
        if best is None or result.execution_time_ns < best[1].execution_time_ns:
            best = (label, result)
    assert best is not None
    label, result = best
    result.summary["bound"] = {
        "member": label,
        "members": [
            {"label": m, "policy": MEMBER_POLICY, "params": dict(BOUND_MEMBERS[m]), "execution_time_ns": t}
            for m, t in times.items()
        ],
    }
    return result


def bound_lines(summary: Mapping[str, Any]) -> list[str]:
    """What a bound run's summary says about its members, one line each (none for other runs)."""
    b = summary.get("bound")
    if not isinstance(b, Mapping):
        return []
    members = b.get("members") or []
    return [
        f"{BOUND}: the fastest of {len(members)} free-migration {MEMBER_POLICY} runs is {b.get('member')}; "
        "member times: " + ", ".join(f"{m.get('label')} {m.get('execution_time_ns', 0) / 1e6:,.3f} ms" for m in members)
    ]
