"""Locating the release that changed a configuration's speed (#49): the halving (analysis/bisect.py) names the
release a planted 30% slowdown starts at within the fewest measurements halving needs, and stops saying why where
compare's rules give no verdict; `dlbench bisect` measures through run's gate, stores the points it measures and
reads back those it measured before (its measurement stubbed here with synthetic points: the halving's arithmetic
is what is tested; the fake backend's real workers are exercised by `dlbench run -f fake==1.0,fake==2.0`)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from dlbench.analysis.bisect import CannotMeasure, Probe, bisect, most_probes
from dlbench.analysis.compare import CONTENDED, SLOWER, compare_points
from dlbench.machine.env import host_identity, physical_cores
from dlbench.machine.telemetry import Contention, Telemetry, with_telemetry
from dlbench.records import Environment, PointResult
from dlbench.spec import PointSpec
from dlbench.store.store import Store
from tests.unit.analysis.test_compare import make_point

CliResult = tuple[int, str, str]
RELEASES = tuple(f"1.{i}" for i in range(9))  # 1.0 ... 1.8
BUSY = Telemetry(contention=Contention(others_share=0.86, cpus=2, load_avg=(7.1, 7.0, 6.0)))


def planted(releases: Sequence[str], slow_from: str, factor: float = 1.3) -> Callable[[str], PointResult]:
    """A release's synthetic point: 10 ms steps, `factor` times longer from `slow_from` on."""
    start = releases.index(slow_from)

    def point(release: str) -> PointResult:
        i = releases.index(release)
        return make_point(0.010 * (factor if i >= start else 1.0), seed=i)

    return point


def _measure(point: Callable[[str], PointResult], seen: list[str]) -> Callable[[str], Probe]:
    def measure(release: str) -> Probe:
        seen.append(release)
        return Probe(release, point(release))

    return measure


@pytest.mark.parametrize("slow_from", RELEASES[1:])
def test_the_planted_slowdown_is_named_in_the_fewest_measurements(slow_from: str) -> None:
    seen: list[str] = []
    found = bisect(RELEASES, _measure(planted(RELEASES, slow_from), seen), compare_points)
    assert found.located and found.direction == SLOWER and found.after == slow_from
    assert RELEASES.index(found.after) - RELEASES.index(found.before) == 1
    assert len(seen) == len(set(seen)) <= most_probes(len(RELEASES)) == 5  # two ends and log2(8) middles
    assert found.change is not None and found.change.ratio is not None and abs(found.change.ratio - 1 / 1.3) < 0.03


def test_no_change_between_the_ends_measures_only_the_ends() -> None:
    seen: list[str] = []
    found = bisect(RELEASES, _measure(lambda r: make_point(0.01, seed=RELEASES.index(r)), seen), compare_points)
    assert not found.located and not found.direction and not found.stopped and seen == ["1.0", "1.8"]


def test_a_middle_without_a_verdict_stops_the_halving_saying_why() -> None:
    point = planted(RELEASES, "1.6")

    def contended(release: str) -> PointResult:
        return with_telemetry(point(release), BUSY) if release == "1.4" else point(release)

    found = bisect(RELEASES, _measure(contended, []), compare_points)
    assert not found.located and found.direction == SLOWER and (found.before, found.after) == ("1.0", "1.8")
    assert found.stopped.startswith(f"1.4 against 1.0: {CONTENDED} (B: others used 86% of its 2 CPUs")

    def missing(release: str) -> Probe:
        if release == "1.4":
            raise CannotMeasure("fake==1.4 is needed and not set up")
        return Probe(release, point(release))

    found = bisect(RELEASES, missing, compare_points)
    assert found.stopped == "fake==1.4 is needed and not set up" and not found.located


def _synthetic_run_points(slow_from: str, calls: list[str]) -> Callable[..., list[PointResult]]:
    """run_points as launch/session.py's, storing a synthetic point of the spec's release measured on this host."""
    point = planted(RELEASES, slow_from)

    def run_points(
        store: Store, run_id: str, specs: Sequence[PointSpec], *_: object, **__: object
    ) -> list[PointResult]:
        (spec,) = specs
        assert spec.release is not None
        calls.append(spec.release)
        identity = {**host_identity(spec.device, physical_cores()), "framework_version": spec.release}
        result = dataclasses.replace(point(spec.release), spec=spec, env=Environment(identity=identity))
        store.add_point(run_id, result)
        return [result]

    return run_points


def test_cli_bisect_names_the_release_and_reads_back_what_it_measured(
    store_path: Path, cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    monkeypatch.setattr("dlbench.runapi.bisect.run_points", _synthetic_run_points("1.3", calls))
    args = ("bisect", "-f", "fake", "-m", "resnet50", "--versions", ",".join(RELEASES), "--store", str(store_path))
    code, out, err = cli(*args)
    assert code == 0, err
    text = " ".join(out.split())
    assert re.search(r"fake: slower between 1\.2 and 1\.3: [\d.]+ -> [\d.]+ samples/s \(-2\d\.\d%", text), text
    assert len(calls) <= 5 and "Measured" in text and "reads at most 5" in text
    (run,) = Store(store_path, readonly=True).runs()
    assert run.kind == "bisect" and run.status == "done"
    code, out, err = cli(*args)  # measured before: every release read back, nothing measured
    assert code == 0 and "read from the store" in err and f"read {len(calls)} from the store" in " ".join(out.split())
    assert len(calls) == len(set(calls))


@pytest.mark.parametrize(
    "args,needle",
    [
        (("-f", "fake==1.0", "--versions", "1.0,2.0"), "bisect follows one framework"),
        (("-f", "fake", "--versions", "1.0"), "--versions takes A..B or a list of two releases"),
        (("-f", "fake", "--versions", "1.0,2.0", "-b", "2,4"), "bisect follows one configuration"),
        (("-f", "fake", "--versions", "1.0,2.0", "--min-effect", "lots"), "5%"),
    ],
)
def test_cli_bisect_bad_input(
    store_path: Path, cli: Callable[..., CliResult], args: tuple[str, ...], needle: str
) -> None:
    code, _, err = cli("bisect", "-m", "resnet50", *args, "--store", str(store_path))
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1 and not store_path.exists()


def test_a_range_takes_the_releases_set_up_or_those_the_index_offers(monkeypatch: pytest.MonkeyPatch) -> None:
    from dlbench.runapi import bisect as runapi_bisect
    from dlbench.spec import SpecError

    monkeypatch.setattr(runapi_bisect, "set_up_releases", lambda fw: ["0.9.0", "0.10.1", "0.10.2", "0.11.0"])
    monkeypatch.setattr(runapi_bisect, "index_releases", lambda fw: ["0.10.0", "0.10.1", "0.10.2rc1", "0.10.2"])
    assert runapi_bisect.releases_of("jax", "0.10.0..0.10.2", "set-up")[0] == ["0.10.0", "0.10.1", "0.10.2"]
    releases, note = runapi_bisect.releases_of("jax", "0.10.0..0.10.2", "index")
    assert releases == ["0.10.0", "0.10.1", "0.10.2"] and "package index" in note  # no pre-release between
    assert runapi_bisect.releases_of("jax", "0.10.2, 0.9.0", "index")[0] == ["0.9.0", "0.10.2"]  # a list, ordered
    with pytest.raises(SpecError, match=r"0\.9\.0 is not a release the package index offers"):
        runapi_bisect.releases_of("jax", "0.9.0..0.10.2", "index")


def test_bisect_on_the_fake_backends_real_workers(
    store_path: Path, cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real workers of the fake backend, a 30% slowdown planted at 1.1 (DLBENCH_FAKE's slow@): bisect names 1.1
    after its three points, or, where a point ran under contention (a busy machine, CI's other worker), stops there
    with exit 6 and no verdict. 40 ms steps keep a busy machine's wake-up latency from drowning the change."""
    monkeypatch.setenv("DLBENCH_FAKE", "sleep:0.04,slow@1.1:1.3")
    args = ("-f", "fake", "-m", "resnet50", "-b", "2", "--versions", "1.0,1.1,1.2", "--steps", "6", "--warmup", "1")
    code, out, err = cli("bisect", *args, "--threads", "1", "--store", str(store_path))
    text = " ".join(out.split())
    points = Store(store_path, readonly=True).points()
    assert {p.result.env.identity["framework_version"] for p in points} <= {"1.0", "1.1", "1.2"}
    if code == 6:
        assert "stopped" in text and CONTENDED in text and len(points) >= 2, text
    else:
        assert code == 0 and "fake: slower between 1.0 and 1.1" in text, (text, err)
        assert "Measured 3 point(s)" in text and len(points) == 3
