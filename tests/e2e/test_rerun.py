"""`dlbench rerun RUN`: a stored run's exact configurations measured again here, stored as a new run and compared
with the original, identity differences named first (issue 24, item 10). Real fake-backend workers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dlbench.analysis.record import environment
from dlbench.protocol.stats import summarize
from dlbench.records import PointResult, RankRaw, RepeatRaw
from dlbench.spec import PointSpec, Protocol
from dlbench.store.store import Store

CliResult = tuple[int, str, str]


def original(store_path: Path) -> tuple[str, list[PointSpec]]:
    """A run measured elsewhere: two fake configurations, stored with framework version 0.9-fake."""
    store = Store(store_path)
    rid = store.create_run("dlbench run (on another machine)")
    specs = [
        PointSpec(
            framework="fake",
            model=m,
            batch_size=2,
            input_size=32,
            protocol=Protocol(warmup=1, steps=6, repeats=1, statistic="median", preset="quick"),
        )
        for m in ("resnet50", "alexnet")
    ]
    for spec in specs:
        ranks = (RankRaw(0, (RepeatRaw((0.01,) * 6, 0.06),)),)
        env = environment(spec, {"framework_version": "0.9-fake"})  # this host's keys, another fake version
        store.add_point(rid, PointResult(spec, "ok", ranks, summarize(spec, ranks), env, started=1.0, finished=2.0))
    store.finish_run(rid, "done")
    store.close()
    return rid, specs


def test_rerun_measures_the_same_specs_and_names_identity_differences_first(
    store_path: Path, cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("DLBENCH_FAKE", "sleep:0.005")
    rid, specs = original(store_path)
    code, out, err = cli("rerun", rid[:10], "--store", str(store_path))
    assert code == 0, err
    store = Store(store_path, readonly=True)
    new = [r for r in store.runs(limit=5) if r.id != rid]
    assert len(new) == 1 and new[0].kind == "rerun" and new[0].meta["rerun_of"] == rid
    again = store.points([new[0].id])
    assert [p.result.spec for p in again] == specs and all(p.result.status == "ok" for p in again)
    assert all(p.result.env.identity["framework_version"] == "0.0-fake" for p in again)
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert lines[0].startswith(f"rerun {new[0].id} of run {rid}")
    assert lines[1] == "identity key framework_version differs: 0.9-fake (original) -> 0.0-fake (rerun)"
    table_at = next(i for i, ln in enumerate(lines) if f"B = {new[0].id} vs A = {rid}" in ln)
    assert table_at > 1 and "fake resnet50 bs2 fp32 1n1c" in out and "fake alexnet bs2 fp32 1n1c" in out


def test_a_run_without_points_is_one_line_and_exit_2(store_path: Path, cli: Callable[..., CliResult]) -> None:
    store = Store(store_path)
    rid = store.create_run("dlbench run (interrupted before its first point)")
    store.finish_run(rid, "interrupted")
    store.close()
    code, _, err = cli("rerun", rid, "--store", str(store_path))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "has no points" in err
    assert [r.id for r in Store(store_path, readonly=True).runs(limit=5)] == [rid]  # nothing written
