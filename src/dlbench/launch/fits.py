"""Whether a point's estimated memory fits where it would run, decided before anything starts (#41): a model too
large for this machine is refused in one line naming the estimate and the limit, not allocated until the kernel
or a limit stops it (`-m mixtral_8x7b -b 1` on a 24 GiB machine asked for 700 GiB).

The limit is what the point would get: an emulated budget (--memory-limit) per rank where one is set; on this
machine's GPUs the smallest visible device's memory (NVML); on its CPU the memory the host has available now, shared
by the point's devices on this node. runapi/gate.py calls check_memory for run, rerun and reproduce --run, and
fitting for a sweep's matrix (named and skipped with --skip-impossible). Ranks on other machines (Slurm, --hosts) and GPUs NVML cannot see have no limit
known here: the estimate is only shown. A point is refused when its estimate is above MARGIN x the limit (the
estimate is within MARGIN of the measured peak: docs/memory.md), so a point that may fit is never refused; `--force`
runs it anyway.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import psutil

from dlbench.analysis.memory import MARGIN, MemoryEstimate, estimate, gib
from dlbench.refusals import label
from dlbench.spec import PointSpec, SpecError

T = TypeVar("T")
SHOWN = 3  # points a sweep's one-line memory refusal names before "and N more"


@dataclass(frozen=True)
class Limit:
    """The memory a point's devices get (bytes), shared by `ranks` devices' estimates, and what it is."""

    bytes: int
    ranks: int
    what: str


def limit_for(spec: PointSpec, remote: bool = False) -> Limit | None:
    """The memory the point's busiest device would get here, or None where it cannot be known from here. `ranks` is
    how many devices' estimates share it: on the CPU every device of this node lives in the host's memory (a
    one-process strategy's replicas too), and an emulated budget is per process, which may hold several."""
    per_node = spec.devices_per_node if spec.nodes > 1 else spec.world_size
    per_process = max(per_node // max(spec.processes if spec.nodes == 1 else per_node, 1), 1)
    if spec.memory_limit_bytes is not None:
        return Limit(
            spec.memory_limit_bytes, per_process, f"the --memory-limit of {gib(spec.memory_limit_bytes)} per rank"
        )
    if remote or spec.launcher == "slurm":
        return None
    if spec.device == "cuda":
        from dlbench.machine.env import gpus

        sizes = [int(d["memory_bytes"]) for d in gpus().devices if str(d.get("memory_bytes", "")).isdigit()]
        if not sizes:
            return None
        return Limit(min(sizes), 1, f"the {gib(min(sizes))} of this machine's smallest visible GPU")
    available = psutil.virtual_memory().available
    shared = f", shared by its {per_node} devices" if per_node > 1 else ""
    return Limit(available, per_node, f"the {gib(available)} this host has available now{shared}")


def memory_problem(spec: PointSpec, found: MemoryEstimate | None, limit: Limit | None) -> str | None:
    """Why the point cannot fit (one line naming the estimate and the limit), or None when it may."""
    if found is None or limit is None:
        return None
    need = found.total * limit.ranks
    if need <= MARGIN * limit.bytes:
        return None
    each = f" x {limit.ranks} devices = {gib(need)}" if limit.ranks > 1 else ""
    return (
        f"{label(spec)} needs an estimated {found.describe()}{each}, more than {MARGIN:g} x "
        f"{limit.what}: use a smaller batch, input or model, shard it (--fsdp, more devices), or pass --force to "
        "try anyway"
    )


@dataclass(frozen=True)
class PlannedPoint:
    """A point of a dry run: its spec, its estimate per device, the limit here, and why it would be refused."""

    spec: PointSpec
    estimate: MemoryEstimate | None
    limit: Limit | None
    refusal: str | None

    @property
    def fits(self) -> str:
        """'yes', 'no', or why it cannot be said here."""
        if self.estimate is None:
            return "no estimate"
        if self.limit is None:
            return "limit unknown"
        return "no" if memory_problem(self.spec, self.estimate, self.limit) else "yes"


def fit_problem(spec: PointSpec, remote: bool = False) -> str | None:
    """The one-line memory refusal of one point here, or None."""
    return memory_problem(spec, estimate(spec), limit_for(spec, remote))


def check_memory(specs: Iterable[PointSpec], force: bool, remote_hosts: bool = False) -> None:
    """SpecError for the first point whose estimate cannot fit where it would run, unless forced."""
    if force:
        return
    for spec in specs:
        problem = fit_problem(spec, remote=remote_hosts)
        if problem:
            raise SpecError(problem)


def search_budget(base: PointSpec, memory_limit: int | None) -> int | None:
    """The memory a search's probes get: the emulated budget, else this machine's GPU's (None: not known here)."""
    if memory_limit is not None:
        return memory_limit
    limit = limit_for(base) if base.device == "cuda" else None
    return limit.bytes if limit is not None else None


def estimated_guesses(
    at: Callable[[int], PointSpec], lo: int, hi: int, budget: int | None, unit: int = 1
) -> tuple[int, ...]:
    """Where the memory estimate starts a max search (suite/maxbatch.py) of the point `at(value)`: the largest value
    in (lo, hi) it says fits the budget, and the smallest it says cannot (above MARGIN x the budget), each a
    multiple of unit; () without an estimate or a budget. The search probes them first, so the estimate only
    chooses where to look: what fits is still what trained."""
    if budget is None:
        return ()

    def estimated(value: int) -> int | None:
        found = estimate(at(value))
        return found.total if found is not None else None

    def first_above(limit: float) -> int | None:
        """The smallest multiple of unit in (lo, hi) whose estimate is above limit (estimates grow with the value)."""
        low, high = lo, hi
        if (top := estimated(high)) is None or top <= limit:
            return None
        while high - low > unit:
            mid = (low + high) // 2 // unit * unit
            found = estimated(mid)
            if found is None:
                return None
            low, high = (mid, high) if found <= limit else (low, mid)
        return high

    try:
        fails = first_above(budget)
        certain = first_above(MARGIN * budget)
    except SpecError:  # a value the case refuses (a shape that does not divide): no guess
        return ()
    fits = fails - unit if fails is not None and fails - unit > lo else None
    return tuple(v for v in (fits, certain) if v is not None and lo < v < hi)


def fitting(
    items: Sequence[T],
    spec_of: Callable[[T], PointSpec],
    force: bool,
    skip: bool,
    say: Callable[[str], None],
    what: str = "the points",
    remote: bool = False,
) -> list[T]:
    """A sweep's items whose point may fit here (all with `force`). Without `skip`, any that cannot refuses the
    whole list in one line naming them; with it (--skip-impossible, or the suite's skip_impossible), each is named
    through `say` and left out, so a curve that grows until memory ends stops before it instead of filling it."""
    if force:
        return list(items)
    bad = [(item, problem) for item in items if (problem := fit_problem(spec_of(item), remote))]
    if not bad:
        return list(items)
    if not skip:
        shown = "; ".join(problem for _, problem in bad[:SHOWN])
        more = f"; and {len(bad) - SHOWN} more" if len(bad) > SHOWN else ""
        raise SpecError(
            f"{what}: {len(bad)} of {len(items)} point(s) cannot fit: {shown}{more}; --skip-impossible runs the others"
        )
    for _, problem in bad:
        say(f"skipped, cannot fit: {problem}")
    dropped = {id(item) for item, _ in bad}
    return [item for item in items if id(item) not in dropped]


__all__ = [
    "Limit",
    "PlannedPoint",
    "check_memory",
    "estimated_guesses",
    "fit_problem",
    "fitting",
    "limit_for",
    "memory_problem",
    "search_budget",
]
