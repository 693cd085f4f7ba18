"""The max search's arithmetic and its stored probes (the search itself, which runs the probes, is the run
API's: runapi/maxbatch.py). The max search: the largest per-device batch, or the largest value of a case parameter (`--param vocab=max`),
that trains, each probe a point in an isolated worker. "The searched quantity" below is either.

Between lo (known to fit) and hi (known to fail) it probes lo, then bisects; a case parameter is searched in
multiples of its unit (CaseParam.search), so that "exact" means within one unit. With lo = 1 that finds the exact
max in at most ceil(log2(hi / lo)) + 1 probes; for lo > 1 the same bound is a budget, and a search that
spends it before the interval closes reports the largest size that fit, marked not exact.

A probe *fits* when its worker finished ok (and, under a CPU memory limit, its peak RSS stayed under it). It
is *too big* only when it ran out of memory: `oom` (the framework's out-of-memory error, compile-time ones
included, or the emulated budget passed). Any other failure (a cuDNN error, a compile failure, a crash, a
timeout) says nothing about memory: it stops the search, which reports it with its reason.

When the interval closes, both ends are run again in fresh workers (confirm): memory use near a budget varies
a little from run to run, so a max is called exact only when it trains again and the value above runs out of
memory again; a max that fails its re-run gives way to the largest value below it that trains twice.

Probes are stored as the points of a run of kind "maxbatch" whose meta holds the search key, so a later search
with the same key (the configuration and the framework version) reuses those that fit or ran out of memory *on
the same device*: the one the probe's worker ran on, as it reported it (NVML's name of its GPU, `rank_gpu`, or
the CPU model), never the controller's (a Slurm search from a GPU-less login node would otherwise mix GPU
types). The local launcher's probes run on this machine, so the device is known before the first probe; another
launcher's first probe runs afresh and its worker says. A probe that failed for another reason than memory is
never reused, so a passing fault cannot poison later searches.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dlbench.machine.env import host_identity, physical_cores
from dlbench.records import PointResult
from dlbench.spec import PointSpec, Protocol
from dlbench.store.store import Store, StoredPoint
from dlbench.wire import RANK_GPU

MAXBATCH_KIND = "maxbatch"
PROBE_PRESET = "maxbatch-probe"  # the protocol preset of every probe point
CHECK = "boundary_check"  # extra flag of a probe that runs a found boundary again (confirm)
BATCH = "batch"  # the searched quantity of a max-batch search; any other name is a case parameter's


def value_of(spec: PointSpec, quantity: str) -> int:
    """The searched quantity's value in a spec (the batch size, or the case parameter; 0 where unset)."""
    return spec.batch_size if quantity == BATCH else spec.params.get(quantity, 0)


def with_value(spec: PointSpec, quantity: str, value: int) -> PointSpec:
    """The spec with the searched quantity set to value."""
    if quantity == BATCH:
        return dataclasses.replace(spec, batch_size=value)
    return dataclasses.replace(spec, case_params=tuple(sorted({**spec.params, quantity: value}.items())))


@dataclass(frozen=True)
class Probe:
    """One probed value of the searched quantity (batch size or case parameter) and how it ended."""

    value: int
    fits: bool
    status: str  # ok, oom, or the failure that stopped the search
    throughput: float | None = None
    peak_memory_bytes: int | None = None
    error: str | None = None
    cached: bool = False

    @property
    def too_big(self) -> bool:
        """Whether the probe ran out of memory (the only failure that bounds the search)."""
        return not self.fits and self.status == "oom"


@dataclass(frozen=True)
class MaxBatch:
    """The outcome of a search: the max found (None when even lo failed; a batch size or, for `quantity` other
    than batch, the case parameter's value), whether it is exact (within `unit`), the probes."""

    key: str
    lo: int
    hi: int
    max_batch: int | None
    exact: bool
    probes: tuple[Probe, ...]
    note: str = ""
    quantity: str = BATCH
    unit: int = 1
    checks: tuple[Probe, ...] = ()  # the boundary run again (see confirm)
    guesses: tuple[int, ...] = ()  # where the memory estimate started the search (launch/fits.estimated_guesses)

    @property
    def new_probes(self) -> int:
        """Probes run by this search (not taken from the store), the boundary's checks included."""
        return sum(not p.cached for p in (*self.probes, *self.checks))

    @property
    def last(self) -> Probe:
        """The last probe run (a boundary check, else the search's): why a search without a max ended."""
        return (self.checks or self.probes)[-1]

    @property
    def at_max(self) -> Probe | None:
        """The probe at the max found (a boundary check's, where the check stepped below the search's max)."""
        return next((p for p in (*self.probes, *self.checks) if p.value == self.max_batch and p.fits), None)

    @property
    def fails_at(self) -> int | None:
        """The smallest probed value above the max that ran out of memory (None: none was probed, hi is only
        the search's bound)."""
        over = [
            p.value
            for p in (*self.probes, *self.checks)
            if p.too_big and (self.max_batch is None or p.value > self.max_batch)
        ]
        return min(over) if over else None

    def facts(self) -> dict[str, object]:
        """What a measured point keeps of the search behind it (extra['max_batch'] or extra['max_param'])."""
        out: dict[str, object] = {
            "max": self.max_batch,
            "exact": self.exact,
            "lo": self.lo,
            "hi": self.hi,
            "fails_at": self.fails_at,
            "probes": len(self.probes),
            "new_probes": self.new_probes,
            "note": self.note,
            "checks": [[p.value, p.status] for p in self.checks],
            "estimate_guesses": list(self.guesses),
        }
        return out if self.quantity == BATCH else {"name": self.quantity, "unit": self.unit, **out}

    @property
    def extra_key(self) -> str:
        """The key of a point's extra the facts go under."""
        return "max_batch" if self.quantity == BATCH else "max_param"


def probe_bound(lo: int, hi: int) -> int:
    """The most probes a search may use: ceil(log2(hi / lo)) + 1."""
    return math.ceil(math.log2(hi / lo)) + 1


def _stopped(p: Probe) -> str:
    return f"the probe at {p.value} failed for a reason other than memory ({p.status}): {p.error or ''}".strip()


def bisect(
    lo: int, hi: int, probe: Callable[[int], Probe], unit: int = 1, guesses: Sequence[int] = ()
) -> tuple[int | None, bool, list[Probe], str]:
    """Probe lo, then bisect (lo, hi) in multiples of unit within the probe bound: (max or None, exact, probes,
    note). `guesses` (the memory estimate's: the largest value it says fits, the smallest it says cannot) are
    probed first where they fall inside the interval, each in place of a midpoint (the bound grows by one a guess).
    Only an out-of-memory probe lowers the upper end; any other failure stops the search (max None, the reason
    noted)."""
    probes = [probe(lo)]
    if not probes[0].fits:
        if probes[0].too_big:
            return None, False, probes, f"even the lower bound {lo} does not fit (oom)"
        return None, False, probes, _stopped(probes[0])
    good, bad, budget = lo, hi, probe_bound(lo, hi) + len(guesses)
    pending = [g // unit * unit for g in guesses]
    while bad - good > unit and len(probes) < budget:
        mid = (good + bad) // 2 // unit * unit
        while pending:
            guess = pending.pop(0)
            if good < guess < bad:
                mid = guess
                break
        probes.append(probe(mid))
        if not probes[-1].fits and not probes[-1].too_big:
            return None, False, probes, _stopped(probes[-1])
        good, bad = (mid, bad) if probes[-1].fits else (good, mid)
    if bad - good > unit:
        return good, False, probes, f"probe budget spent: the max is in [{good}, {bad})"
    if bad == hi and not any(p.too_big for p in probes):
        return good, False, probes, f"every probe fit: {hi} was assumed to fail and was not probed; raise hi"
    return good, True, probes, ""


STEPS_DOWN = 3  # how far below a value that failed its check the confirmation looks, in units


def confirm(
    best: int, probes: list[Probe], lo: int, unit: int, again: Callable[[int], Probe]
) -> tuple[int | None, bool, list[Probe], str]:
    """Run an exact search's boundary again, each run a fresh process: the value above the max (it must run out
    of memory again) and the max (it must train again). Memory use near a budget varies a little from run to
    run (allocator and thread timing), so a max that fails its check is not reported: the largest value below
    it that trains twice is, within STEPS_DOWN units. Returns (max, reproduced, checks, note)."""
    checks = [again(best + unit)]
    above_ok = checks[0].fits
    value, trained = best, {p.value for p in probes if p.fits}
    while value >= lo and value > best - STEPS_DOWN * unit:
        runs = [again(value)] + ([] if value in trained else [again(value)])
        checks += runs
        if all(r.fits for r in runs):
            break
        if any(not r.fits and not r.too_big for r in runs):
            return None, False, checks, _stopped(next(r for r in runs if not r.fits and not r.too_big))
        value -= unit
    else:
        return (
            None,
            False,
            checks,
            (
                f"not reproducible: no value from {best} down {STEPS_DOWN} units trained on "
                "every run; memory use varies more than the unit here"
            ),
        )
    if value == best and not above_ok:
        return best, True, checks, ""
    said = [
        f"{best} ran out of memory when run again" if value < best else "",
        f"{best + unit} trained when run again" if above_ok else "",
    ]
    return value, False, checks, "boundary within run-to-run noise: " + "; ".join(t for t in said if t)


def probe_spec(
    base: PointSpec, value: int, warmup: int, steps: int, memory_limit: int | None, quantity: str = BATCH
) -> PointSpec:
    """A probe: the configuration on synthetic data at this value of the searched quantity, a short protocol, the
    device budget as memory limit."""
    return dataclasses.replace(
        with_value(base, quantity, value),
        data="synthetic",
        data_dir=None,
        protocol=Protocol(warmup=warmup, steps=steps, repeats=1, statistic="mean", preset=PROBE_PRESET),
        memory_limit_bytes=memory_limit,
    )


def probe_device(result: PointResult) -> str:
    """The device a probe ran on, as its worker reported it: NVML's name of the rank's GPU (a MIG slice's with its
    profile), or the CPU model; '' when the worker did not say (never reused then)."""
    if result.spec.device == "cuda":
        return result.env.descriptive.get(RANK_GPU, "")
    return result.env.identity.get("device_model", "")


def expected_device(base: PointSpec) -> str | None:
    """The device a search's probes will run on, where the controller can tell: with the local launcher this
    machine's first visible GPU (NVML's name, as the worker reports it) or its CPU; None with a launcher that may
    place them elsewhere (Slurm, hosts, mpirun, torchrun): then the first probe's worker says."""
    if base.launcher != "local":
        return None
    return host_identity(base.device, base.threads or physical_cores())["device_model"]


def to_probe(result: PointResult, cached: bool = False, quantity: str = BATCH) -> Probe:
    """How a probe point ended: fits when ok and within its memory limit."""
    m = result.metrics
    peak = m.peak_memory_bytes if m else None
    limit = result.spec.memory_limit_bytes
    fits = result.status == "ok"
    status, error = result.status, result.error
    if fits and limit is not None and peak is not None and m is not None and m.memory_kind == "rss" and peak > limit:
        fits, status, error = False, "oom", f"peak RSS {peak} passed the memory limit {limit}"
    return Probe(
        value=value_of(result.spec, quantity),
        fits=fits,
        status=status,
        throughput=m.throughput if m else None,
        peak_memory_bytes=peak,
        error=error,
        cached=cached,
    )


def cached_probes(store: Store, key: str, quantity: str = BATCH, device: str = "") -> dict[int, Probe]:
    """Probes of earlier searches with this key, run on this device, that fit or ran out of memory, by searched
    value (the latest wins); a probe that failed for another reason is not reused."""
    out: dict[int, Probe] = {}
    for p in search_points(store, key, device):
        probe = to_probe(p.result, cached=True, quantity=quantity)
        if not p.result.extra.get(CHECK) and (probe.fits or probe.too_big):
            out[probe.value] = probe
    return out


def cached_checks(store: Store, key: str, quantity: str = BATCH, device: str = "") -> dict[int, list[Probe]]:
    """The boundary checks (confirm) of earlier searches with this key, run on this device, that fit or ran out of
    memory, by value, oldest first."""
    out: dict[int, list[Probe]] = {}
    for p in search_points(store, key, device):
        probe = to_probe(p.result, cached=True, quantity=quantity)
        if p.result.extra.get(CHECK) and (probe.fits or probe.too_big):
            out.setdefault(probe.value, []).append(probe)
    return out


def search_points(store: Store, key: str, device: str) -> list[StoredPoint]:
    if not device:  # a device nobody reported: nothing to reuse
        return []
    runs = [r.id for r in store.runs() if r.kind == MAXBATCH_KIND and r.meta.get("search_key") == key]
    points = store.points(runs) if runs else []
    return sorted((p for p in points if probe_device(p.result) == device), key=lambda p: p.result.started or 0.0)


def outcome(
    lo: int,
    hi: int,
    probe: Callable[[int], Probe],
    again: Callable[[int], Probe],
    unit: int,
    guesses: tuple[int, ...] = (),
) -> MaxBatch:
    """bisect (from the estimate's guesses), then confirm an exact boundary (key ''; the search sets it)."""
    best, exact, probes, note = bisect(lo, hi, probe, unit, guesses)
    checks: list[Probe] = []
    if exact and best is not None:
        best, exact, checks, note = confirm(best, probes, lo, unit, again)
    return MaxBatch(
        key="",
        lo=lo,
        hi=hi,
        max_batch=best,
        exact=exact,
        probes=tuple(probes),
        note=note,
        unit=unit,
        checks=tuple(checks),
        guesses=guesses,
    )


def stored_outcome(
    store: Store,
    key: str,
    device: str,
    lo: int,
    hi: int,
    quantity: str = BATCH,
    unit: int = 1,
    guesses: tuple[int, ...] = (),
) -> MaxBatch | None:
    """A search's outcome from the probes stored under its key on this device alone, or None when some probe on
    its path is missing."""
    known = cached_probes(store, key, quantity, device)
    rechecked = cached_checks(store, key, quantity, device)

    class Missing(Exception):
        pass

    def probe(value: int) -> Probe:
        if value not in known:
            raise Missing
        return known[value]

    def again(value: int) -> Probe:
        stored = rechecked.get(value)
        if not stored:
            raise Missing
        return stored.pop(0)

    try:
        found = outcome(lo, hi, probe, again, unit, guesses)
    except Missing:
        return None
    return dataclasses.replace(found, key=key, quantity=quantity)


@dataclass(frozen=True)
class MaxBatchSettings:
    """How a sweep searches: bounds, probe protocol, and the CPU device budget."""

    lo: int
    hi: int
    warmup: int = 1
    steps: int = 1
    memory_limits: dict[str, int] = dataclasses.field(default_factory=dict)  # model -> bytes (CPU budget)


def search_base(spec: PointSpec) -> PointSpec:
    """The configuration a max point searches on: its spec on synthetic data, without training to convergence
    (a probe asks what fits, not what trains)."""
    return dataclasses.replace(
        spec, data="synthetic", data_dir=None, converge=False, converge_steps=None, converge_target=None
    )
