"""Issue 33: a point keeps its request (command line, suite point, dlbench commit, package lock) and `dlbench
reproduce` shows it, writes the lock, and measures the point again beside the original. Real fake-backend workers
for `run`, `sweep` and `reproduce --run`; points of an older store are written without a request."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from dlbench import __version__
from dlbench.analysis.record import environment
from dlbench.cli import main
from dlbench.envs.interpreters import interpreter_for
from dlbench.launch import lock
from dlbench.protocol.stats import summarize
from dlbench.records import PointResult, RankRaw, RepeatRaw
from dlbench.spec import PointSpec, Protocol
from dlbench.store.request import REQUEST_KEY, Request, request_of
from dlbench.store.store import Store

CliResult = tuple[int, str, str]
RUN_ARGS = (
    "run",
    "-f",
    "fake",
    "-m",
    "alexnet",
    "-b",
    "2",
    "--input-size",
    "64",
    "--warmup",
    "1",
    "--steps",
    "3",
    "--repeats",
    "3",
    "--preset",
    "quick",
)
SUITE = """\
name: repro-sweep
device: cpu
protocol: {preset: quick, warmup: 1, steps: 3, repeats: 2}
timeout: 60
axes:
  framework: fake
  model: resnet50
  batch: [fixed]
"""


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """One store holding a point made by `run` and one made by `sweep` (real fake-backend workers); the suite."""
    folder = tmp_path_factory.mktemp("repro")
    db, suite = folder / "results.db", folder / "suite.yaml"
    suite.write_text(SUITE)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DLBENCH_FAKE", "sleep:0.002")
        mp.setenv("COLUMNS", "80")
        assert main([*RUN_ARGS, "--store", str(db)]) == 0
        assert main(["sweep", str(suite), "--store", str(db)]) == 0
    yield db, suite


def points_of(db: Path, kind: str) -> list[PointResult]:
    store = Store(db, readonly=True)
    ids = [r.id for r in store.runs() if r.kind == kind]
    return [p.result for p in store.points(ids)]


def uid_of(db: Path, kind: str) -> str:
    store = Store(db, readonly=True)
    ids = [r.id for r in store.runs() if r.kind == kind]
    return store.points(ids)[0].uid


def test_run_and_sweep_points_keep_their_request(stored: tuple[Path, Path]) -> None:
    db, suite = stored
    ran, swept = points_of(db, "run")[0], points_of(db, "sweep")[0]
    r, s = request_of(ran), request_of(swept)
    assert r is not None and s is not None
    assert r.command == "dlbench " + " ".join([*RUN_ARGS, "--store", str(db)]) and r.kind == "run"
    assert s.command == f"dlbench sweep {suite} --store {db}" and s.kind == "sweep"
    assert s.suite == "repro-sweep" and s.suite_point == swept.spec.key() and r.suite == ""
    for req in (r, s):
        assert req.python == interpreter_for("fake") and req.python_version.count(".") == 2
        assert req.dlbench_version == __version__ and req.lock_error == ""
        assert req.package_version("dlbench") == __version__  # the fake backend's distribution, as pip has it
        assert req.package_version("click") and req.package_version("sqlalchemy")  # dlbench's own dependencies
    # kept in the extensible data: the store's extra_json column, no new table or column
    con = sqlite3.connect(db)
    extra = json.loads(con.execute("SELECT extra_json FROM points ORDER BY id LIMIT 1").fetchone()[0])
    assert extra[REQUEST_KEY]["command"] == r.command and isinstance(extra[REQUEST_KEY]["packages"], dict)


def test_reproduce_prints_the_command_lock_and_host_of_a_run_and_a_sweep_point(
    stored: tuple[Path, Path], cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    db, _ = stored
    for kind in ("run", "sweep"):
        point = points_of(db, kind)[0]
        req = request_of(point)
        assert req is not None
        code, out, err = cli("reproduce", uid_of(db, kind)[:8], "--store", str(db))
        assert code == 0, err
        assert f"command: {req.command}" in out
        assert f"  click=={req.package_version('click')}" in out
        assert f"{len(req.packages)} packages" in out
        assert "cpu cores" in out and point.env.identity["cpu_model"] in out
        assert all(len(line) <= 80 for line in out.splitlines() if "│" in line), out  # the host table
    assert "suite: repro-sweep, point " in out


def test_a_run_id_prefix_names_every_point_of_the_run(stored: tuple[Path, Path], cli: Callable[..., CliResult]) -> None:
    db, _ = stored
    run = next(r for r in Store(db, readonly=True).runs() if r.kind == "sweep")
    code, out, err = cli("reproduce", run.id[:17], "--store", str(db))
    assert code == 0, err
    assert out.splitlines()[0].startswith(f"run {run.id} (sweep, 1 point(s)")


def test_env_file_is_a_requirements_file_pip_reads(
    stored: tuple[Path, Path], tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    db, _ = stored
    req = request_of(points_of(db, "run")[0])
    assert req is not None
    target = tmp_path / "requirements.txt"
    code, out, err = cli("reproduce", uid_of(db, "run"), "--env-file", str(target), "--store", str(db))
    assert code == 0, err
    pins = [
        Requirement(line.split("  #")[0])
        for line in target.read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert {p.name: str(p.specifier) for p in pins}["click"] == f"=={req.package_version('click')}"
    assert "dlbench" not in {p.name for p in pins}  # installed from its checkout, named in a comment
    assert f"# dlbench=={__version__}" in target.read_text() and f"wrote {len(req.packages)} pinned" in out


def test_run_measures_the_point_again_and_shows_both_with_compares_verdict(
    stored: tuple[Path, Path], cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("DLBENCH_FAKE", "sleep:0.002")
    db, _ = stored
    uid = uid_of(db, "run")
    code, out, err = cli("reproduce", uid[:10], "--run", "--store", str(db))
    assert code == 0, err
    store = Store(db, readonly=True)
    again = next(r for r in store.runs() if r.kind == "reproduce")
    assert again.meta["reproduce_of"] == uid and again.meta["forced"] == ""
    new = store.points([again.id])
    assert len(new) == 1 and new[0].result.spec == points_of(db, "run")[0].spec
    req = request_of(new[0].result)
    assert req is not None and req.kind == "reproduce" and req.command.startswith(f"dlbench reproduce {uid[:10]}")
    assert "original" in out and "again" in out and new[0].uid[:8] in out and uid[:8] in out
    verdict = next(line for line in out.splitlines() if line.startswith("verdict: "))
    assert "again / original = " in verdict
    assert all(len(line) <= 80 for line in out.splitlines() if "│" in line), out


def old_point(db: Path, version: str = "0.0-fake", request: Request | None = None) -> str:
    """A point as a store written before requests were kept has it (or with the given request); its uid."""
    store = Store(db)
    rid = store.create_run("dlbench run -f fake -m alexnet (an older dlbench)")
    spec = PointSpec(
        framework="fake",
        model="alexnet",
        batch_size=2,
        input_size=64,
        protocol=Protocol(warmup=1, steps=3, repeats=3, statistic="median", preset="quick"),
    )
    ranks = (RankRaw(0, tuple(RepeatRaw((0.01,) * 3, 0.03) for _ in range(3))),)
    extra: dict[str, object] = {REQUEST_KEY: request.to_dict()} if request else {}
    store.add_point(
        rid,
        PointResult(
            spec,
            "ok",
            ranks,
            summarize(spec, ranks),
            environment(spec, {"framework_version": version}),
            started=1.0,
            finished=2.0,
            extra=extra,
        ),
    )
    store.finish_run(rid, "done")
    uid = store.points([rid])[0].uid
    store.close()
    return uid


def test_a_point_of_an_older_store_says_what_is_missing_and_shows_what_it_has(
    store_path: Path, cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    uid = old_point(store_path)
    code, out, err = cli("reproduce", uid[:8], "--store", str(store_path))
    assert code == 0, err
    assert "command: dlbench run -f fake -m alexnet (an older dlbench)" in out  # its run's, kept by every store
    assert "missing: its package lock; the interpreter that ran it" in out and "cpu cores" in out
    code, out, err = cli("reproduce", uid[:8], "--env-file", str(tmp_path / "r.txt"), "--store", str(store_path))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "has no package lock" in err


def test_a_different_framework_version_is_refused_in_one_line_unless_forced(
    store_path: Path, cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DLBENCH_FAKE", "sleep:0.002")
    monkeypatch.setenv("COLUMNS", "80")
    uid = old_point(store_path, request=Request(command="dlbench run -f fake", packages=(("dlbench", "0.0.1"),)))
    code, out, err = cli("reproduce", uid[:8], "--run", "--store", str(store_path))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"fake here is {__version__} but the point was measured with 0.0.1 (dlbench in its lock)" in err
    assert [r.kind for r in Store(store_path, readonly=True).runs()] == ["run"]  # nothing ran, nothing written
    code, out, err = cli("reproduce", uid[:8], "--run", "--force", "--store", str(store_path))
    assert code == 0, err
    again = next(r for r in Store(store_path, readonly=True).runs() if r.kind == "reproduce")
    forced = request_of(Store(store_path, readonly=True).points([again.id])[0].result)
    assert forced is not None and "0.0.1" in forced.forced and __version__ in forced.forced
    assert "forced" in out and "verdict: " in out


def test_unknown_and_ambiguous_ids_are_one_line_and_exit_2(store_path: Path, cli: Callable[..., CliResult]) -> None:
    first, second = old_point(store_path), old_point(store_path)
    code, _, err = cli("reproduce", "zz-nothing", "--store", str(store_path))
    assert (
        code == 2
        and err.strip()
        == f"dlbench: error: no point or run 'zz-nothing' in {store_path} (`dlbench results` lists the runs)"
    )
    runs = Store(store_path, readonly=True).runs()
    common = runs[0].id[:9]  # both runs start with today's date
    code, _, err = cli("reproduce", common, "--store", str(store_path))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "is ambiguous" in err
    assert all(f"run {r.id}" in err for r in runs)
    assert first != second


def test_a_framework_whose_environment_is_gone_is_one_line_and_exit_2(
    store_path: Path, cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    from dlbench.envs.interpreters import NotInstalled
    from dlbench.runapi import again

    def gone(framework: str, release: str | None = None) -> str:
        raise NotInstalled(f"framework {framework} is not installed: run: dlbench setup {framework}")

    monkeypatch.setattr(again, "interpreter_for", gone)
    uid = old_point(store_path, request=Request(python="/gone/venv/bin/python", packages=(("dlbench", "1"),)))
    code, _, err = cli("reproduce", uid, "--run", "--store", str(store_path))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "the environment that ran fake (/gone/venv/bin/python) no longer exists here" in err


def test_the_lock_of_another_interpreter_is_read_in_its_own_process(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    here = lock.package_lock(sys.executable)
    lock.package_lock.cache_clear()
    monkeypatch.setattr(lock.sys, "executable", "/not/this/python")  # so the real one is asked in a child
    try:
        child = lock.package_lock(interpreter_for("fake"))
        assert child[2] == "" and dict(child[1]) == dict(here[1]) and child[0] == here[0]
        broken = lock.package_lock("/no/such/python")
        assert broken[1] == () and "could not list its packages" in broken[2]
    finally:
        lock.package_lock.cache_clear()


def test_the_report_and_exports_carry_each_points_reproduce_command(
    stored: tuple[Path, Path], cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    db, _ = stored
    store = Store(db, readonly=True)
    runs = [r.id for r in store.runs() if r.kind in ("run", "sweep")]  # two configurations: both shown
    uids = [p.uid for p in store.points(runs)]
    page, md = tmp_path / "r.html", tmp_path / "r.md"
    code, _, err = cli("report", *runs, "--store", str(db), "-o", str(page))
    assert code == 0, err
    assert all(f"<code>dlbench reproduce {u[:8]}</code>" in page.read_text() for u in uids)
    code, _, err = cli("report", *runs, "--store", str(db), "--format", "md", "-o", str(md))
    assert code == 0, err
    assert all(f"`dlbench reproduce {u[:8]}`" in md.read_text() for u in uids)
    code, out, err = cli("results", *runs, "--store", str(db), "--format", "json")
    assert code == 0, err
    rows = json.loads(out)
    assert sorted(r["reproduce"] for r in rows) == sorted(f"dlbench reproduce {u}" for u in uids)
    assert all(r["command"].startswith("dlbench ") for r in rows)
    code, out, err = cli("results", *runs, "--store", str(db), "--format", "csv")
    assert code == 0, err
    assert {f"dlbench reproduce {u}" for u in uids} <= set(out.replace("\n", ",").split(","))


def test_a_request_reads_back_from_older_and_newer_json() -> None:
    full = Request(command="dlbench run", packages=(("Torch_Vision", "0.20.1"), ("torch", "2.5.1+cpu")))
    assert Request.from_dict(json.loads(json.dumps(full.to_dict()))) == full
    assert full.package_version("torch-vision") == "0.20.1" and full.package_version("jax") is None
    later = {**full.to_dict(), "a_field_from_a_later_dlbench": 1, "version": 2}
    assert Request.from_dict(later).version == 2 and Request.from_dict(later).command == "dlbench run"
    assert Request.from_dict({"command": "dlbench sweep x.yaml"}) == Request(command="dlbench sweep x.yaml")


def test_a_point_whose_interpreter_is_gone_is_measured_in_the_frameworks_environment_here(store_path: Path) -> None:
    from dlbench.analysis.reproduce import find
    from dlbench.runapi.again import check_environment

    uid = old_point(store_path, request=Request(python="/gone/venv/bin/python", packages=(("dlbench", __version__),)))
    ready = check_environment(find(Store(store_path, readonly=True), uid[:8]), force=False)
    assert ready.forced == ""  # the same version here: nothing overridden
    assert ready.notes == (
        f"fake ran in /gone/venv/bin/python, which no longer exists: measuring with {interpreter_for('fake')}",
    )


def test_the_host_of_a_gpu_point_names_its_gpu_driver_and_topology(monkeypatch: pytest.MonkeyPatch) -> None:
    """NVML mocked at its boundary (tests/support/fake_pynvml.py); the topology keys as a GPU worker reports them."""
    from dlbench.analysis.reproduce import host_facts
    from tests.support.fake_pynvml import gpus, install

    install(monkeypatch, gpus(2))
    spec = PointSpec(
        framework="torch",
        model="alexnet",
        batch_size=2,
        device="cuda",
        protocol=Protocol(warmup=1, steps=3, repeats=3, statistic="median", preset="quick"),
    )
    env = environment(
        spec,
        {
            "framework_version": "2.5.1",
            "cuda": "12.4",
            "cudnn": "90100",
            "gpu_interconnect": "nvlink",
            "nvlink_links_per_gpu": "18",
            "gpu_pair_path": "SYS",
        },
    )
    facts = dict(host_facts(PointResult(spec, "error", env=env)))
    assert facts["device model"] == "NVIDIA H100 80GB HBM3" and facts["devices"] == "2"
    assert facts["driver"] == env.identity["driver"] and facts["cuda"] == "12.4" and facts["cudnn"] == "90100"
    assert (
        facts["gpu memory"] == "80.0 GiB" and facts["compute capability"] == env.descriptive["gpu_compute_capability"]
    )
    assert (facts["interconnect"], facts["nvlink links/gpu"], facts["gpu 0-1 path"]) == ("nvlink", "18", "SYS")
    assert facts["visible gpus"] == "(unset: all)"


@pytest.mark.parametrize("fmt", ["html", "md"])
def test_a_strategy_study_table_carries_its_points_reproduce_commands(tmp_path: Path, fmt: str) -> None:
    from tests.support.reports import study_points

    db = tmp_path / "results.db"
    store = Store(db)
    run = store.create_run("dlbench sweep alibaba-strategies-cpu (fixture)")
    for p in study_points():
        store.add_point(run, p)
    store.finish_run(run, "done")
    uids = [p.uid for p in store.points([run])]
    store.close()
    out = tmp_path / f"report.{fmt}"
    assert main(["report", "--store", str(db), "-o", str(out), "--format", fmt]) == 0
    studies = out.read_text().split("Gradient strategies", 2)[-1]  # the strategies section, after the TOC link
    assert all(f"dlbench reproduce {u[:8]}" in studies for u in uids)


def test_max_search_probes_and_a_search_where_nothing_fits_keep_their_request(
    tmp_path: Path, cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A probe of `run --param NAME=max` or of a sweep's `batch: max`, and the failed point of a search where even
    the lower bound runs out of memory, each carry the command that asked for the search and the lock."""
    db = tmp_path / "results.db"
    monkeypatch.setenv("DLBENCH_FAKE", "param_oom_above:classes:500")  # the lower bound, 1000 classes, is too big
    args = ("run", "-f", "fake", "-m", "face", "-b", "4", "--param", "classes=max", "--param", "model_parallel=1")
    args += ("--param", "sample=10", "--memory-limit", "1GiB", "--warmup", "0", "--steps", "1", "--repeats", "1")
    code, _, err = cli(*args, "--store", str(db))
    assert code != 0 and "none fits" in err
    suite = tmp_path / "max.yaml"
    suite.write_text(
        "name: max\ndevice: cpu\nmemory_limit: 1GiB\nmax_batch: {lo: 1, hi: 8}\n"
        "protocol: {warmup: 0, steps: 1, repeats: 1}\naxes: {framework: fake, model: resnet50, batch: max}\n"
    )
    monkeypatch.setenv("DLBENCH_FAKE", "oom_above:5")
    code, _, err = cli("sweep", str(suite), "--store", str(db))
    assert code == 0, err
    ran = "dlbench " + " ".join([*args, "--store", str(db)])
    swept = f"dlbench sweep {suite} --store {db}"
    store = Store(db, readonly=True)
    probes = store.points([r.id for r in store.runs() if r.kind == "maxbatch"])
    assert {p.result.spec.model for p in probes} == {"face", "resnet50"}
    for p in probes:
        req = request_of(p.result)
        assert req is not None and req.kind == "maxbatch" and req.package_version("dlbench") == __version__
        assert req.command == (ran if p.result.spec.model == "face" else swept)
    [failed] = points_of(db, "run")
    req = request_of(failed)
    assert failed.status == "oom" and req is not None and req.command == ran and req.packages
    code, out, err = cli("reproduce", probes[0].uid[:12], "--store", str(db))
    assert code == 0, err
    assert f"command: {ran}" in out and "(maxbatch)" in out
