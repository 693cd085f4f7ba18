"""The same configuration across framework releases (#49): `compare --by version` groups points by the release they
ran and compares each release with the one before it under compare's rules (contended: no verdict; too few samples:
'not enough samples'), and says when releases ran on different Pythons."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

from dlbench.analysis.compare import CONTENDED, SAME, SLOWER, UNDETECTABLE
from dlbench.analysis.versions import by_release, compare_versions, release_of
from dlbench.machine.telemetry import Contention, Telemetry, with_telemetry
from dlbench.records import Environment, PointResult
from dlbench.store.store import Store
from tests.unit.analysis.test_compare import IDENTITY, make_point

CliResult = tuple[int, str, str]
BUSY = Telemetry(contention=Contention(others_share=0.86, cpus=2, load_avg=(7.1, 7.0, 6.0)))


def at(release: str | None, step_s: float, python: str = "3.12.3", reported: bool = True, **kw: object) -> PointResult:
    """A synthetic point of fake resnet50 asking for `release`, its worker reporting it (unless not `reported`)."""
    identity = {**IDENTITY, "framework_version": release or ""} if reported else {**IDENTITY, "framework_version": ""}
    p = make_point(step_s, identity=identity, **kw)  # type: ignore[arg-type]
    return dataclasses.replace(
        p,
        spec=dataclasses.replace(p.spec, release=release),
        env=Environment(identity=identity, descriptive={"python": python}),
    )


def test_each_release_is_compared_with_the_one_before() -> None:
    points = [at("2.10", 0.013, seed=3), at("1.0", 0.010, seed=1), at("2.0", 0.013, seed=2)]
    other = dataclasses.replace(at("1.0", 0.01, seed=4), spec=dataclasses.replace(points[0].spec, batch_size=4))
    c = compare_versions([*points, other])
    assert [p.label for p in c.points] == [
        "fake resnet50 bs8 fp32 1n1c 1.0 -> 2.0",
        "fake resnet50 bs8 fp32 1n1c 2.0 -> 2.10",  # pip's order: 2.10 comes after 2.0, not before
    ]
    assert [p.verdict for p in c.points] == [SLOWER, SAME]
    assert c.points[0].ratio is not None and abs(c.points[0].ratio - 1 / 1.3) < 0.03
    assert c.only_a == ("fake resnet50 bs4 fp32 1n1c (1.0)",)  # measured at one release: nothing to compare
    assert c.warnings == () and "the framework release they ran" in c.method


def test_the_release_is_what_ran_and_the_newest_point_of_a_release_wins() -> None:
    asked = at("1.0", 0.01, reported=False)
    assert release_of(asked) == "1.0"  # no version reported: the one asked for
    plain = dataclasses.replace(at("2.0", 0.01), spec=dataclasses.replace(asked.spec, release=None))
    assert release_of(plain) == "2.0"  # the default environment's point counts under the release it ran
    groups, unknown = by_release([asked, plain, at("2.0", 0.02, seed=5), at(None, 0.01, reported=False)])
    assert unknown == 1 and len(groups) == 1 and groups[0].releases() == ["1.0", "2.0"]
    assert dict(groups[0].points)["2.0"].metrics.throughput < plain.metrics.throughput  # type: ignore[union-attr]
    c = compare_versions([at(None, 0.01, reported=False)])
    assert c.points == () and any("name no framework release" in w for w in c.warnings)


def test_contended_and_too_few_samples_give_no_verdict() -> None:
    contended = compare_versions([at("1.0", 0.010, seed=1), with_telemetry(at("2.0", 0.015, seed=2), BUSY)])
    (pc,) = contended.points
    assert pc.verdict == CONTENDED and pc.contended == "B" and "86%" in pc.note
    few = compare_versions([at("1.0", 0.010, repeats=1, steps=2), at("2.0", 0.010, seed=2, repeats=1, steps=2)])
    (pc,) = few.points
    assert pc.verdict == UNDETECTABLE and pc.samples_a == 2


def test_releases_on_different_pythons_are_named() -> None:
    c = compare_versions([at("1.0", 0.01, python="3.10.12"), at("2.0", 0.01, seed=2, python="3.12.3")])
    assert "the Python differs too: Python 3.10.12 -> 3.12.3" in c.points[0].note
    assert any("ran on different Pythons (1.0 on 3.10.12, 2.0 on 3.12.3)" in w for w in c.warnings)


def _stored(path: Path, *runs: list[PointResult]) -> list[str]:
    store = Store(path)
    ids = []
    for points in runs:
        rid = store.create_run("fixture")
        for p in points:
            store.add_point(rid, p)
        store.finish_run(rid, "done")
        ids.append(rid)
    store.close()
    return ids


def test_cli_compare_by_version(store_path: Path, cli: Callable[..., CliResult]) -> None:
    old, new = _stored(store_path, [at("1.0", 0.010, seed=1)], [at("2.0", 0.013, seed=2)])
    code, out, err = cli("compare", "--by", "version", old, new, "--store", str(store_path), "--fail-above", "5%")
    assert code == 1 and "1.0 -> 2.0" in " ".join(out.split()) and "significant regression" in err
    code, out, _ = cli("compare", "--by", "version", old, new, "--store", str(store_path), "--format", "json")
    doc = json.loads(out)
    assert code == 0 and doc["points"][0]["verdict"] == SLOWER and doc["points"][0]["change"] < -0.2
    code, _, err = cli("compare", "--by", "version", "--store", str(store_path))  # the newest run: one release
    assert code == 5 and "no configuration was measured at two framework releases" in err
    code, _, err = cli("compare", old, "--store", str(store_path))
    assert code == 2 and "compare takes two runs" in err and len(err.strip().splitlines()) == 1


def test_cli_compare_by_version_contended_is_inconclusive(store_path: Path, cli: Callable[..., CliResult]) -> None:
    (run,) = _stored(store_path, [at("1.0", 0.010, seed=1), with_telemetry(at("2.0", 0.010, seed=2), BUSY)])
    code, out, err = cli("compare", "--by", "version", run, "--store", str(store_path))
    assert code == 6 and CONTENDED in " ".join(out.split()) and "inconclusive" in err


def test_a_stored_release_reads_back_and_an_older_point_keeps_its_key(store_path: Path) -> None:
    """No store migration: `release` is a later field (spec.py's _LATER_FIELDS): a spec stored without it reads
    with release None and its key unchanged; one stored with it keeps it."""
    plain = at(None, 0.01)
    stored = json.loads(plain.spec.to_json())
    assert "release" not in plain.spec.key()
    stored.pop("release", None)
    assert type(plain.spec).from_json(json.dumps(stored)).key() == plain.spec.key()
    (run,) = _stored(store_path, [at("2.0", 0.01), plain])
    back = Store(store_path, readonly=True).points([run])
    assert [p.result.spec.release for p in back] == ["2.0", None]
    assert back[1].result.spec.key() == plain.spec.key()
