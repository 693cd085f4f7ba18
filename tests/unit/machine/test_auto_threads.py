"""Issue 42 item 1: `--threads auto` (the default) gives a CPU point the physical cores others leave free, measured
just before it, and records the count and why; an explicit --threads is kept, and a point is marked contended only
when others held the cores its threads needed."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from dlbench.launch import watch as watch_module
from dlbench.launch.watch import PointWatch
from dlbench.machine import contention
from dlbench.machine.contention import auto_threads
from dlbench.machine.telemetry import Contention, Telemetry, ThreadChoice
from dlbench.spec import PointSpec, Protocol

CliResult = tuple[int, str, str]
HZ = 100


@pytest.mark.parametrize(
    ("share", "cores", "ranks", "used"),
    [
        (0.0, 2, 1, 2),  # quiet: every core
        (0.25, 2, 1, 2),  # 1.5 free cores round up: others stay within the threshold of the 2 needed
        (0.3, 2, 1, 1),  # 1.4 free: one
        (0.5, 2, 1, 1),  # a burner on one of two cores
        (0.95, 2, 1, 1),  # nothing free: still one thread
        (0.5, 16, 1, 8),
        (0.5, 16, 2, 4),  # split between the node's ranks
        (0.9, 4, 2, 1),  # less than a core per rank: one each
        (None, 8, 2, 4),  # unknown share: every core, as before
    ],
)
def test_auto_uses_the_free_cores_at_least_one(share: float | None, cores: int, ranks: int, used: int) -> None:
    choice = auto_threads(share, cores, ranks)
    assert choice.used == used and choice.requested == "auto" and choice.ranks == ranks
    assert choice.reason  # every choice says why


def test_a_count_of_two_or_more_is_never_one_the_flag_would_call_contended() -> None:
    for cores in (2, 4, 8, 16, 64):
        for pct in range(0, 101):
            share = pct / 100
            choice = auto_threads(share, cores)
            held = Contention(others_share=share, cpus=cores, needed_share=choice.needed_share)
            assert choice.used == 1 or not held.flagged, (cores, share, choice)


@pytest.mark.parametrize(
    ("others", "needed", "flagged"),
    [
        (0.55, 0.5, False),  # --threads 1 of 2 beside a burner on the other core: it had its core
        (0.7, 0.5, True),  # others took part of its core as well
        (0.3, 1.0, True),  # a point that needs every core: the threshold alone, as before
        (0.2, 1.0, False),
    ],
)
def test_a_point_is_contended_only_when_others_held_the_cores_it_needed(
    others: float, needed: float, flagged: bool
) -> None:
    assert Contention(others_share=others, cpus=2, needed_share=needed).flagged is flagged


def test_old_telemetry_without_threads_reads_back_needing_every_cpu() -> None:
    old = Telemetry.from_dict({"contention": {"others_share": 0.3, "cpus": 2}})
    assert old.threads is None and old.contention.needed_share == 1.0 and old.flagged
    new = Telemetry(threads=ThreadChoice("auto", 1, 1, 2, 0.5, "why"))
    assert Telemetry.from_dict(json.loads(json.dumps(new.to_dict()))) == new


def _stat(path: Path, busy: int, idle: int, cpus: int) -> None:
    lines = ["cpu  0 0 0 0 0 0 0 0 0 0"] + [f"cpu{i} {busy} 0 0 {idle} 0 0 0 0 0 0" for i in range(cpus)]
    path.write_text("\n".join(lines) + "\n")


def test_the_watch_measures_others_before_an_auto_point_and_launches_the_free_cores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fake /proc/stat: others keep every CPU half busy during the probe; the point gets half the cores."""
    monkeypatch.setattr(contention, "ticks_per_s", lambda: HZ)
    monkeypatch.setattr(contention, "process_cpu_s", lambda procs: {})
    monkeypatch.setattr(watch_module, "physical_cores", lambda: 4)
    monkeypatch.setattr(watch_module, "affinity_cpus", lambda procs: {0, 1, 2, 3})
    monkeypatch.setattr(contention, "affinity_cpus", lambda procs: {0, 1, 2, 3})
    stat, ticks, slept = tmp_path / "stat", [0], []

    def sleep(s: float) -> None:
        slept.append(s)
        ticks[0] += int(s * HZ)
        _stat(stat, ticks[0] // 2, ticks[0] - ticks[0] // 2, 4)

    sleep(0)
    spec = PointSpec(framework="fake", model="resnet50", batch_size=4, protocol=Protocol(0, 5, 1, "median"))
    with PointWatch(spec, stat_path=stat, sleep=sleep, place_threads=True) as watch:
        pass
    assert slept[-1] == contention.AUTO_PROBE_S
    assert watch.run_spec.threads == 2 and watch.spec.threads is None
    tele, _ = watch.finish(None)
    assert tele.threads is not None and tele.threads.used == 2 and tele.threads.cores == 4
    assert (
        tele.threads.others_share == pytest.approx(0.5, abs=0.03)
        and "2 of 4 physical cores free" in tele.threads.reason
    )
    assert tele.contention.needed_share == pytest.approx(0.5)


def test_an_explicit_count_is_kept_without_a_probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch_module, "others_share_now", lambda *a, **k: pytest.fail("probed with --threads 1"))
    spec = PointSpec(framework="fake", model="resnet50", batch_size=4, protocol=Protocol(0, 5, 1, "median"), threads=1)
    with PointWatch(spec, place_threads=True) as watch:
        pass
    tele, _ = watch.finish(None)
    assert watch.run_spec == spec
    assert tele.threads is not None and tele.threads.requested == "1" and tele.threads.used == 1


def test_run_records_the_auto_count_and_says_why_under_the_table(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    """Others' share mocked at its boundary (60% of 4 cores): the stored spec keeps auto, the identity says the
    count used, the telemetry why, and run's notes say it."""
    monkeypatch.setattr(watch_module, "others_share_now", lambda *a, **k: 0.6)
    monkeypatch.setattr(watch_module, "physical_cores", lambda: 4)
    monkeypatch.setattr(watch_module, "affinity_cpus", lambda procs: set(range(max(4, psutil.cpu_count() or 1))))
    monkeypatch.setenv("DLBENCH_FAKE", "sleep:0.001")
    store = str(tmp_path / "s.db")
    args = ("run", "-f", "fake", "-m", "resnet50", "-b", "2", "--warmup", "0", "--steps", "2", "--repeats", "1")
    code, out, err = cli(*args, "--store", store)
    assert code == 0, err
    assert "fake resnet50 bs2 fp32: 2 threads of 4 cores (--threads auto: others held 60%" in out
    _, js, _ = cli("results", "--format", "json", "--store", store)
    [point] = json.loads(js)
    assert point["spec"]["threads"] is None and point["env"]["identity"]["threads"] == "2"
    assert point["extra"]["telemetry"]["threads"]["used"] == 2
