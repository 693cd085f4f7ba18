"""Issue 24 items 6 and 7: contention and energy recorded with every point, from fake kernel counters (a fake
/proc/stat and /sys/class/powercap tree in tmp_path); the stored record, and how run, JSON, CSV and the report
show it."""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest

from dlbench.launch.watch import PointWatch
from dlbench.machine import contention
from dlbench.machine.contention import CpuWindows, cpu_ticks, wait_quiet
from dlbench.machine.energy import RaplMeter
from dlbench.machine.telemetry import Contention, Energy, Telemetry, telemetry_of, with_telemetry
from dlbench.protocol.runner import measure
from dlbench.protocol.stats import summarize
from dlbench.records import PointResult, RankRaw, RepeatRaw
from dlbench.report.document import build_report
from dlbench.report.export import csv_row, to_json
from dlbench.report.table import status_text
from dlbench.report.telemetry import telemetry_notes
from dlbench.spec import PointSpec, Protocol
from dlbench.store.store import StoredPoint
from dlbench.wire import edge_event, parse_progress, progress_line

HZ = 100


def stat_text(*cpus: tuple[int, int]) -> str:
    """/proc/stat with per-CPU (busy, idle) ticks: busy split over user/system/irq/steal, idle over idle/iowait."""
    lines = ["cpu  0 0 0 0 0 0 0 0 0 0"]
    for i, (busy, idle) in enumerate(cpus):
        u, sy, irq, st = busy - busy // 2 - 3, busy // 2, 2, 1
        lines.append(f"cpu{i} {u} 0 {sy} {idle - 5} 5 {irq} 0 {st} 0 0")
    return "\n".join([*lines, "intr 1 2 3", "ctxt 99", "btime 1700000000"]) + "\n"


@pytest.fixture
def hz(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(contention, "ticks_per_s", lambda: HZ)


def windows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, own_s: list[float], cpus: set[int] | None = None
) -> tuple[CpuWindows, Path]:
    """A CpuWindows over a fake /proc/stat whose own processes used own_s[i] CPU seconds by edge i."""
    stat = tmp_path / "stat"
    reads = iter(own_s)
    monkeypatch.setattr(contention, "process_cpu_s", lambda procs: {1: next(reads)})
    w = CpuWindows(lambda: [psutil.Process()], stat)
    w.cpus = cpus
    w.refresh = lambda: None  # type: ignore[method-assign]
    return w, stat


def test_cpu_ticks_read_only_the_point_cpus(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text(stat_text((100, 900), (700, 300)))
    assert cpu_ticks(None, stat) == contention.CpuTicks(800, 2000)
    assert cpu_ticks({1}, stat) == contention.CpuTicks(700, 1000)  # the point's affinity: CPU 1 only


def test_others_share_is_busy_time_minus_the_point_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hz: None
) -> None:
    w, stat = windows(tmp_path, monkeypatch, [10.0, 10.5])
    stat.write_text(stat_text((0, 0), (0, 0)))
    w.edge("start")
    stat.write_text(stat_text((100, 0), (50, 50)))  # 1.5 s busy of 2 CPU-seconds; the point's own 0.5 s
    w.edge("end")
    c = w.result()
    assert c.others_share == pytest.approx(0.5) and c.flagged and c.load_avg is not None


def test_a_quiet_machine_is_not_flagged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hz: None) -> None:
    w, stat = windows(tmp_path, monkeypatch, [3.0, 3.4, 3.4, 3.9])
    for busy in (0, 50):
        stat.write_text(stat_text((busy, 0), (busy, 0)))
        w.edge("start")
        stat.write_text(stat_text((busy + 30, 70), (busy + 20, 80)))  # 0.5 s busy, 0.4 or 0.5 of it the point's
        w.edge("end")
    c = w.result()
    assert c.others_share == pytest.approx(0.1 / 4) and not c.flagged and w.windows == 2


def test_no_window_means_unknown_not_zero(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w, _ = windows(tmp_path, monkeypatch, [])
    c = w.result()
    assert c.others_share is None and "no measured window" in c.note and not c.flagged


def test_wait_quiet_waits_for_a_quiet_machine_or_says_it_waited_in_vain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hz: None
) -> None:
    stat = tmp_path / "stat"
    now, ticks = [0.0], [0]
    busy = iter([100, 100, 100])  # others' busy ticks per 1 s probe on 1 CPU, then quiet

    def sleep(s: float) -> None:
        now[0] += s
        ticks[0] += next(busy, 0)
        stat.write_text(stat_text((ticks[0], int(now[0] * HZ) - ticks[0])))

    stat.write_text(stat_text((0, 0)))
    monkeypatch.setattr(contention, "process_cpu_s", lambda procs: {})
    monkeypatch.setattr(contention, "affinity_cpus", lambda procs: {0})
    waited, quiet = wait_quiet(10, list, stat_path=stat, clock=lambda: now[0], sleep=sleep)
    assert quiet and waited == pytest.approx(4.0)

    busy = iter([100] * 100)
    waited, quiet = wait_quiet(2.5, list, stat_path=stat, clock=lambda: now[0], sleep=sleep)
    assert not quiet and waited == pytest.approx(3.0)


def rapl_tree(root: Path, zones: dict[str, tuple[int, int]]) -> None:
    for name, (energy, top) in zones.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        (root / name / "energy_uj").write_text(f"{energy}\n")
        (root / name / "max_energy_range_uj").write_text(f"{top}\n")


def test_rapl_sums_packages_only_and_survives_a_wrap(tmp_path: Path) -> None:
    root = tmp_path / "powercap"
    rapl_tree(
        root,
        {
            "intel-rapl:0": (1_000_000, 10_000_000),
            "intel-rapl:0:0": (5, 10_000_000),
            "intel-rapl:1": (9_500_000, 10_000_000),
        },
    )
    meter = RaplMeter(root)
    meter.edge("start")
    rapl_tree(
        root,
        {
            "intel-rapl:0": (3_000_000, 10_000_000),
            "intel-rapl:0:0": (900_000_000, 10_000_000),
            "intel-rapl:1": (500_000, 10_000_000),
        },
    )  # package 1 wrapped at 10 J
    meter.edge("end")
    assert meter.joules == pytest.approx(2.0 + 1.0)  # the core sub-zone is inside package 0: not added


def test_rapl_absent_or_unreadable_is_unavailable_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    absent = RaplMeter(tmp_path / "no-powercap")
    assert not absent.available and "exposes no RAPL" in absent.reason
    root = tmp_path / "powercap"
    rapl_tree(root, {"intel-rapl:0": (1, 10)})
    real_read = Path.read_text

    def denied(self: Path, *a: object, **k: object) -> str:
        if self.name == "energy_uj":
            raise PermissionError(13, "Permission denied")
        return real_read(self, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", denied)
    meter = RaplMeter(root)
    assert not meter.available and "root only" in meter.reason


def test_the_cpu_point_energy_comes_from_rapl_over_its_windows(tmp_path: Path) -> None:
    root = tmp_path / "powercap"
    rapl_tree(root, {"intel-rapl:0": (0, 10**12)})
    spec = PointSpec(framework="fake", model="resnet50", batch_size=4, protocol=Protocol(0, 5, 2, "median"))
    with PointWatch(spec, powercap=root) as watch:
        sink = watch.sink(None)
        for r, joules in enumerate((30, 60)):
            rapl_tree(root, {"intel-rapl:0": (r * 10**9, 10**12)})
            sink(edge_event("start", r, 5))
            rapl_tree(root, {"intel-rapl:0": (r * 10**9 + joules * 10**6, 10**12)})
            sink(edge_event("end", r, 5))
    watch.saw_worker = True  # the edges came from this test, not a worker process
    reps = tuple(RepeatRaw((), 0.5, (0.5,), (5,)) for _ in range(2))
    tele, _ = watch.finish(None)
    assert tele.energy.joules == pytest.approx(90.0) and tele.energy.source == "rapl"
    assert watch.windows == 2 and tele.energy.samples == 0  # no worker result: no samples counted
    energy = Energy(joules=90.0, source="rapl", window_s=1.0, samples=4 * 5 * len(reps), devices=1, price_per_hour=2.0)
    assert energy.avg_watts == pytest.approx(90.0)
    assert energy.samples_per_kwh == pytest.approx(40 / (90 / 3.6e6))
    assert energy.cost_per_million(40.0) == pytest.approx(2.0 * 1e6 / 40.0 / 3600)


def test_window_edges_are_outside_the_timed_region() -> None:
    calls: list[str] = []
    clock_reads = iter(range(1000))

    class Trainer:
        def next_batch(self) -> None:
            calls.append("batch")

        def train_step(self, batch: object) -> None:
            calls.append("step")

        def sync(self) -> None:
            return None

        def step_timer(self) -> None:
            return None

    def clock() -> float:
        calls.append("clock")
        return float(next(clock_reads))

    measure(
        Trainer(),
        Protocol(0, 2, 2, "median", windows=1),
        clock=clock,
        calibrate=False,
        window_edge=lambda edge, r, n: calls.append(f"{edge}{r}"),
    )
    first = calls.index("start0")
    assert calls[first + 1] == "clock" and calls[calls.index("end0") - 1] == "clock"
    timed = calls[first + 1 : calls.index("end0")]
    assert "start0" not in timed and calls.count("start1") == 1 and calls[-1] == "end1"
    event = parse_progress(progress_line(edge_event("end", 1, 2)))
    assert event == {"phase": "measure", "repeat": 1, "step": 2, "total": 2, "edge": "end"}


def point(tele: Telemetry | None, pid: int = 1, batch: int = 4) -> StoredPoint:
    spec = PointSpec(framework="fake", model="resnet50", batch_size=batch, protocol=Protocol(0, 5, 1, "median"))
    ranks = (RankRaw(0, (RepeatRaw((), 1.0, (1.0,), (5,)),)),)
    r = PointResult(spec=spec, status="ok", ranks=ranks, metrics=summarize(spec, ranks))
    return StoredPoint(pid, "run1", with_telemetry(r, tele) if tele is not None else r)


CONTENDED = Telemetry(
    contention=Contention(others_share=0.48, cpus=2, window_s=1.0, load_avg=(3.1, 2.0, 1.0)),
    energy=Energy(joules=100.0, source="rapl", window_s=1.0, samples=20, devices=1, price_per_hour=1.5),
)


def test_a_contended_point_is_flagged_in_run_json_csv_and_the_report(capsys: pytest.CaptureFixture[str]) -> None:
    p, old = point(CONTENDED), point(None, 2, batch=8)
    assert status_text(p.result) == "ok (contended)" and status_text(old.result) == "ok"
    notes = "\n".join(telemetry_notes([p.result]))
    assert "measured under contention: others used 48% of its 2 CPUs (load 3.10)" in notes
    assert "720,000 samples/kWh" in notes and "per million samples at 1.5 per device-hour" in notes
    [j] = json.loads(to_json([p]))
    assert j["telemetry_summary"]["contended"] is True and j["extra"]["telemetry"]["contention"]["others_share"] == 0.48
    row = csv_row(p)
    assert row["contended"] is True and row["samples_per_kwh"] == pytest.approx(720_000.0)
    assert row["cost_per_million"] == pytest.approx(1.5 * 1e6 / 20.0 / 3600)
    assert csv_row(old)["contended"] == ""  # stored before telemetry: unknown, not False
    report = build_report([], [p, old])
    [view] = report.sections
    assert any(c.slug.endswith("-energy") for c in view.charts.charts)
    assert any("measured under contention" in n for n in view.charts.notes)


def test_telemetry_reads_back_and_old_points_have_none() -> None:
    p = point(CONTENDED)
    stored = json.loads(json.dumps(p.result.extra))
    assert telemetry_of(PointResult(spec=p.result.spec, status="ok", extra=stored)) == CONTENDED
    assert telemetry_of(point(None).result) is None
    assert Telemetry.from_dict({"contention": {"others_share": 0.1, "future_field": 1}}).contention.others_share == 0.1


def test_a_point_that_waited_for_quiet_in_vain_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hz: None
) -> None:
    stat, ticks, now = tmp_path / "stat", [0], [0.0]
    cpus = len(contention.affinity_cpus([psutil.Process()]))
    monkeypatch.setattr(contention, "process_cpu_s", lambda procs: {})

    def busy_sleep(s: float) -> None:  # every CPU fully used by others for the whole second
        ticks[0] += int(s * HZ)
        now[0] += s
        stat.write_text(stat_text(*[(ticks[0], 0)] * (max(contention.affinity_cpus([psutil.Process()])) + 1)))

    busy_sleep(0)
    spec = PointSpec(framework="fake", model="resnet50", batch_size=4, protocol=Protocol(0, 5, 1, "median"))
    with PointWatch(spec, wait_quiet_s=2.0, stat_path=stat, sleep=busy_sleep, clock=lambda: now[0]) as watch:
        pass
    tele, _ = watch.finish(None)
    assert cpus >= 1 and tele.contention.quiet_at_start is False and tele.contention.waited_s == 2.0
    assert "waited" in tele.contention.describe() and "in vain" in tele.contention.describe()
