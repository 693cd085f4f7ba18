"""The max batch search: exact max within ceil(log2(hi/lo)) + 1 probes, against a known OOM threshold."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from dlbench.analysis.maxbatch import STEPS_DOWN, MaxBatch, Probe, bisect, confirm, probe_bound
from dlbench.launch.registry import Launchers
from dlbench.runapi.maxbatch import lookup, search
from dlbench.spec import PointSpec, Protocol
from dlbench.store.store import Store


def threshold_probe(threshold: int, calls: list[int]) -> object:
    def probe(batch: int) -> Probe:
        calls.append(batch)
        fits = batch <= threshold
        return Probe(value=batch, fits=fits, status="ok" if fits else "oom")

    return probe


def test_probe_bound() -> None:
    assert probe_bound(1, 64) == 7
    assert probe_bound(1, 65) == 8
    assert probe_bound(4, 64) == 5


@pytest.mark.parametrize("hi", [2, 3, 7, 64, 100, 1024])
def test_exact_max_for_every_threshold_within_the_bound(hi: int) -> None:
    for threshold in range(1, hi):
        calls: list[int] = []
        best, exact, probes, note = bisect(1, hi, threshold_probe(threshold, calls))  # type: ignore[arg-type]
        assert (best, exact) == (threshold, threshold < hi - 1), (hi, threshold, note)
        assert len(calls) == len(set(calls)) == len(probes) <= math.ceil(math.log2(hi)) + 1


def test_everything_fitting_is_not_called_exact() -> None:
    best, exact, _, note = bisect(1, 64, threshold_probe(10_000, []))  # type: ignore[arg-type]
    assert best == 63 and not exact and "raise hi" in note


def test_nothing_fitting_gives_none() -> None:
    calls: list[int] = []
    best, _exact, _probes, note = bisect(4, 64, threshold_probe(2, calls))  # type: ignore[arg-type]
    assert best is None and calls == [4] and "does not fit" in note


def test_a_lower_bound_above_one_stays_within_the_budget() -> None:
    for threshold in range(16, 64):
        calls: list[int] = []
        best, exact, _, note = bisect(16, 64, threshold_probe(threshold, calls))  # type: ignore[arg-type]
        assert len(calls) <= probe_bound(16, 64)
        assert best is not None and best <= threshold  # never claims more than fits
        assert not exact or best == threshold  # exact only when it is the threshold
        assert exact or "budget" in note or "raise hi" in note  # otherwise it says why


def base_spec() -> PointSpec:
    return PointSpec(
        framework="fake", model="resnet50", batch_size=1, protocol=Protocol(1, 3, 2, "median"), timeout_s=30.0
    )


def test_search_against_the_fake_backend_finds_the_exact_threshold(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DLBENCH_FAKE", "oom_above:37")
    store = Store(tmp_path / "s.db")
    found = search(store, base_spec(), 1, 64, launchers=Launchers())
    assert found.max_batch == 37 and found.exact
    assert len(found.probes) <= probe_bound(1, 64)
    assert {p.value: p.fits for p in found.probes}[38] is False
    assert all(p.status == ("ok" if p.value <= 37 else "oom") for p in found.probes)
    assert found.at_max is not None and found.at_max.throughput
    runs = [r for r in store.runs() if r.kind == "maxbatch"]
    # The boundary was run again, each in a fresh worker: 38 ran out of memory again, 37 trained again.
    assert [(p.value, p.status) for p in found.checks] == [(38, "oom"), (37, "ok")] and found.fails_at == 38
    assert len(runs) == 1 and runs[0].status == "done" and runs[0].points == len(found.probes) + len(found.checks)
    # The store remembers: the same search again runs no probe, and lookup answers without running.
    again = search(store, base_spec(), 1, 64, launchers=Launchers())
    assert (again.max_batch, again.new_probes) == (37, 0)
    assert len([r for r in store.runs() if r.kind == "maxbatch"]) == 1
    cached = lookup(store, base_spec(), 1, 64)
    assert cached is not None and cached.max_batch == 37
    # A different configuration is a different search.
    assert lookup(store, base_spec(), 1, 64, memory_limit=2**30) is None


def test_search_probes_on_synthetic_data_with_a_short_protocol(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DLBENCH_FAKE", "oom_above:3")
    store = Store(tmp_path / "s.db")
    search(store, base_spec(), 1, 8, warmup=0, steps=1, launchers=Launchers())
    specs = [p.result.spec for p in store.points()]
    assert {(s.data, s.protocol.warmup, s.protocol.steps, s.protocol.repeats) for s in specs} == {
        ("synthetic", 0, 1, 1)
    }


def test_only_an_oom_means_too_big_and_another_failure_stops_the_search() -> None:
    def probe(batch: int) -> Probe:
        if batch == 32:
            return Probe(value=batch, fits=False, status="error", error="cuDNN error")
        return Probe(value=batch, fits=batch <= 40, status="ok" if batch <= 40 else "oom")

    best, exact, probes, note = bisect(1, 64, probe)  # type: ignore[arg-type]
    assert best is None and not exact and probes[-1].value == 32
    assert "other than memory (error): cuDNN error" in note
    timeout = bisect(1, 64, lambda b: Probe(value=b, fits=False, status="timeout"))  # type: ignore[arg-type]
    assert timeout[0] is None and "other than memory (timeout)" in timeout[3]


def test_a_failed_probe_is_not_reused_by_later_searches(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    monkeypatch.setenv("DLBENCH_FAKE", "oom_above:37:error_at:32")
    stopped = search(store, base_spec(), 1, 64, launchers=Launchers())
    assert stopped.max_batch is None and stopped.probes[-1].status == "error" and "other than memory" in stopped.note
    monkeypatch.setenv("DLBENCH_FAKE", "oom_above:37")  # the passing fault is gone
    found = search(store, base_spec(), 1, 64, launchers=Launchers())
    assert found.max_batch == 37 and found.exact
    reran = [p.value for p in found.probes if not p.cached]
    assert reran == [32, 48, 40, 36, 38, 37]  # 1, 64's path before 32 was reused; 32 was probed again


def scripted(runs: dict[int, list[str]], calls: list[int]) -> object:
    """A re-run probe whose outcomes at each value come in the order given (memory noise near a budget)."""

    def again(value: int) -> Probe:
        calls.append(value)
        status = runs[value].pop(0)
        return Probe(value=value, fits=status == "ok", status=status)

    return again


BISECTED = [Probe(value=v, fits=v <= 40, status="ok" if v <= 40 else "oom") for v in (1, 32, 48, 40, 44, 42, 41)]


def test_a_boundary_that_holds_again_is_reproduced() -> None:
    calls: list[int] = []
    best, reproduced, checks, note = confirm(40, BISECTED, 1, 1, scripted({41: ["oom"], 40: ["ok"]}, calls))  # type: ignore[arg-type]
    assert (best, reproduced, note) == (40, True, "") and calls == [41, 40] and len(checks) == 2


def test_a_max_that_fails_when_run_again_is_not_reported() -> None:
    # 40 trained in the search, then ran out of memory; 39 (never probed) must train twice to be the max.
    calls: list[int] = []
    again = scripted({41: ["oom"], 40: ["oom"], 39: ["ok", "ok"]}, calls)
    best, reproduced, _, note = confirm(40, BISECTED, 1, 1, again)  # type: ignore[arg-type]
    assert (best, reproduced) == (39, False) and calls == [41, 40, 39, 39]
    assert "40 ran out of memory when run again" in note


def test_a_next_value_that_trains_when_run_again_is_said() -> None:
    best, reproduced, _, note = confirm(40, BISECTED, 1, 1, scripted({41: ["ok"], 40: ["ok"]}, []))  # type: ignore[arg-type]
    assert (best, reproduced) == (40, False) and "41 trained when run again" in note


def test_noise_wider_than_the_steps_down_gives_no_max() -> None:
    runs = {41: ["oom"], **{40 - i: ["oom", "oom"] for i in range(STEPS_DOWN)}}
    best, reproduced, _, note = confirm(40, BISECTED, 1, 1, scripted(runs, []))  # type: ignore[arg-type]
    assert best is None and not reproduced and "not reproducible" in note


def test_at_max_finds_a_max_the_boundary_checks_stepped_down_to() -> None:
    # 40 trained in the search, failed its re-run; 39 (never probed by the bisection) trained twice in the checks.
    checks = (
        Probe(41, False, "oom"),
        Probe(40, False, "oom"),
        Probe(39, True, "ok", throughput=5.0),
        Probe(39, True, "ok", throughput=5.1),
    )
    found = MaxBatch(key="k", lo=1, hi=64, max_batch=39, exact=False, probes=tuple(BISECTED), checks=checks)
    assert found.at_max is not None and found.at_max.value == 39 and found.at_max.throughput == 5.0
    assert found.fails_at == 40
