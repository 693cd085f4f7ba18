"""The max search in the run API: each probe a point in an isolated worker, stored in a run of kind "maxbatch" and
reused by later searches with the same key (the arithmetic, the probes' cache and what a search found:
analysis/maxbatch.py); a sweep's searches (one per configuration with a max point) and `run --param NAME=max`."""

from __future__ import annotations

import dataclasses
import functools
import json
import sys
import time
from collections.abc import Callable, Sequence

from dlbench.analysis.maxbatch import (
    BATCH,
    CHECK,
    MAXBATCH_KIND,
    MaxBatch,
    Probe,
    cached_checks,
    cached_probes,
    expected_device,
    outcome,
    probe_device,
    probe_spec,
    stored_outcome,
    to_probe,
    with_value,
)
from dlbench.analysis.record import point_result
from dlbench.cases import get_case
from dlbench.envs.interpreters import interpreter_for, state
from dlbench.launch.fits import estimated_guesses, search_budget
from dlbench.launch.lock import attach_request
from dlbench.launch.point import execute
from dlbench.launch.process import ProgressSink
from dlbench.launch.registry import Launchers
from dlbench.points import param_bounds
from dlbench.records import PointResult
from dlbench.spec import PointSpec
from dlbench.store.store import Store


def search_key(base: PointSpec, memory_limit: int | None, quantity: str = BATCH, unit: int = 1) -> str:
    """What makes two searches the same: the spec less the searched quantity, data and protocol; the framework's
    version (a parameter search also names its parameter and unit). The device is not in it: each stored probe
    carries the one it ran on (`probe_device`)."""
    d = json.loads(probe_spec(base, 1, 0, 1, memory_limit, quantity).key())
    if quantity == BATCH:
        d.pop("batch_size")
    else:
        d["case_params"] = [kv for kv in d.get("case_params", []) if kv[0] != quantity]
        d["searched"], d["unit"] = quantity, unit
    d["framework_version"] = state(base.framework, base.release).version or ""
    return json.dumps(d, sort_keys=True)


ProbeStarted = Callable[[int, PointSpec], ProgressSink | None]


@dataclasses.dataclass
class _Prober:
    """One search's probes: stored ones reused (once the device is known), new ones run and stored in the search's
    own run (made at the first new probe), each with its request."""

    store: Store
    base: PointSpec
    key: str
    meta: dict[str, object]
    warmup: int
    steps: int
    memory_limit: int | None
    python: str
    started: ProbeStarted | None
    launchers: Launchers
    quantity: str
    device: str | None = None
    known: dict[int, Probe] = dataclasses.field(default_factory=dict)
    rechecked: dict[int, list[Probe]] = dataclasses.field(default_factory=dict)
    run_id: str | None = None

    def reuse(self, on: str) -> None:
        """The stored probes of this device, once it is known."""
        self.known.update(cached_probes(self.store, self.key, self.quantity, on))
        self.rechecked.update(cached_checks(self.store, self.key, self.quantity, on))

    def run_probe(self, value: int, check: bool) -> Probe:
        """Run one probe (a re-check where `check`) and store it."""
        if self.run_id is None:
            what = "batch" if self.quantity == BATCH else self.quantity
            name = f"max {what} search {self.base.framework} {self.base.model}"
            self.run_id = self.store.create_run(name, kind=MAXBATCH_KIND, meta=self.meta)
        spec = probe_spec(self.base, value, self.warmup, self.steps, self.memory_limit, self.quantity)
        sink = self.started(value, spec) if self.started else None
        result = execute(spec, self.launchers, python=self.python, on_progress=sink)
        if check:
            result = dataclasses.replace(result, extra={**result.extra, CHECK: True})
        if self.device is None:  # the first probe of a search placed elsewhere: its worker names the device
            self.device = probe_device(result)
            self.reuse(self.device)
        self.store.add_point(self.run_id, attach_request(self.store, self.run_id, result, self.python))
        return to_probe(result, quantity=self.quantity)

    def probe(self, value: int) -> Probe:
        """A stored probe at this value, else a new one."""
        return self.known[value] if value in self.known else self.run_probe(value, False)

    def again(self, value: int) -> Probe:
        """A stored re-check at this value, else a new one."""
        stored = self.rechecked.get(value)
        return stored.pop(0) if stored else self.run_probe(value, True)

    def finish(self, status: str) -> None:
        """Close the search's run, where it made one."""
        if self.run_id is not None:
            self.store.finish_run(self.run_id, status)


def search(
    store: Store,
    base: PointSpec,
    lo: int,
    hi: int,
    warmup: int = 1,
    steps: int = 1,
    memory_limit: int | None = None,
    python: str = sys.executable,
    started: ProbeStarted | None = None,
    *,
    launchers: Launchers,
    quantity: str = BATCH,
    unit: int = 1,
    command: str = "",
) -> MaxBatch:
    """Search the max of the quantity (the batch, or a case parameter in multiples of unit) for base's
    configuration, reusing stored probes and storing new ones, each with its request: `command` (the run or sweep
    that asked for the search) and the package lock of `python` (`dlbench reproduce PROBE`)."""
    key = search_key(base, memory_limit, quantity, unit)
    meta: dict[str, object] = {"search_key": key, "lo": lo, "hi": hi, "quantity": quantity, "command": command}
    prober = _Prober(
        store, base, key, meta, warmup, steps, memory_limit, python, started, launchers, quantity, expected_device(base)
    )
    if prober.device is not None:
        prober.reuse(prober.device)
    at = functools.partial(with_value, base, quantity)
    guesses = estimated_guesses(at, lo, hi, search_budget(base, memory_limit), unit)  # where to look first
    try:
        found = outcome(lo, hi, prober.probe, prober.again, unit, guesses)
    except KeyboardInterrupt:
        prober.finish("interrupted")
        raise
    prober.finish("done")
    return dataclasses.replace(found, key=key, quantity=quantity)


def lookup(
    store: Store,
    base: PointSpec,
    lo: int,
    hi: int,
    memory_limit: int | None = None,
    quantity: str = BATCH,
    unit: int = 1,
) -> MaxBatch | None:
    """The search's outcome from stored probes alone, or None when some probe on its path is missing (or the device
    its probes would run on cannot be told from here)."""
    device = expected_device(base)
    if device is None:  # probes placed elsewhere: which device they would run on is not known before they run
        return None
    guesses = estimated_guesses(functools.partial(with_value, base, quantity), lo, hi, memory_limit, unit)
    key = search_key(base, memory_limit, quantity, unit)
    return stored_outcome(store, key, device, lo, hi, quantity, unit, guesses)


def search_param(
    store: Store,
    specs: Sequence[PointSpec],
    name: str,
    launchers: Launchers,
    note: Callable[[str], None] = lambda line: None,
    command: str = "",
) -> tuple[list[PointSpec], list[PointResult], dict[str, dict[str, object]]]:
    """--param NAME=max: search each configuration's largest value (runapi/maxbatch.py, probes cached), then the
    points to measure at it, and the search's facts to keep with each (by spec key); a configuration where even
    the lower bound fails becomes a failed point. Each verdict is one line to `note`."""
    found_specs: list[PointSpec] = []
    failed: list[PointResult] = []
    extras: dict[str, dict[str, object]] = {}
    for spec in specs:
        lo, hi, unit = param_bounds(get_case(spec.model), name)
        found = search(
            store,
            spec,
            lo,
            hi,
            memory_limit=spec.memory_limit_bytes,
            python=interpreter_for(spec.framework, spec.release),
            launchers=launchers,
            quantity=name,
            unit=unit,
            command=command,
        )
        label = f"{spec.framework_label} {spec.model} bs{spec.batch_size}"
        if found.max_batch is None:
            note(f"max {name} for {label}: none fits: {found.note}")
            none = point_result(
                spec, found.last.status, None, f"no {name} in [{lo}, {hi}) trains: {found.note}", [], time.time()
            )
            failed.append(dataclasses.replace(none, extra={**none.extra, found.extra_key: found.facts()}))
            continue
        how = f"exact within {unit:,}, reproduced when run again" if found.exact else found.note
        over = f", {found.fails_at:,} ran out of memory" if found.fails_at is not None else ""
        note(
            f"max {name} for {label}: {found.max_batch:,} trains{over} ({how}; {len(found.probes)} probes, "
            f"{found.new_probes} new)"
        )
        at_max = dataclasses.replace(spec, case_params=tuple(sorted({**spec.params, name: found.max_batch}.items())))
        found_specs.append(at_max)
        extras[at_max.key()] = {found.extra_key: found.facts()}
    return found_specs, failed, extras
