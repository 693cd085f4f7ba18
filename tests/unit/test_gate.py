"""The one gate (runapi/gate.py) holds on every path that runs points (#41 item 3, #43 item 3): `run`, `sweep`,
`rerun` and `reproduce --run` refuse the same points with the same line before anything is written, `--force`
included: a point made with `--force` on more ranks than this machine has CPUs is refused when run again without
it, and a stored point no framework here can run (a torch `--strategy dp` point on CPU devices) is refused up front,
not started."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dlbench import __version__
from dlbench.analysis.record import environment
from dlbench.parallel import Layout
from dlbench.protocol.stats import summarize
from dlbench.records import PointResult, RankRaw, RepeatRaw
from dlbench.spec import PointSpec, Protocol
from dlbench.store.store import Store

CliResult = tuple[int, str, str]
PROTO = Protocol(warmup=0, steps=1, repeats=1, statistic="median", preset="quick")
CPUS = 2  # the machine every test here pretends to be


@pytest.fixture(autouse=True)
def _two_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("dlbench.launch.bounds.logical_cpus", lambda: CPUS)


def _stored(store_path: Path, spec: PointSpec) -> tuple[str, str]:
    """A stored point (as one made earlier, here with --force, or by a dlbench that let it through): run id, uid."""
    store = Store(store_path)
    run_id = store.create_run("dlbench run (made earlier)")
    ranks = tuple(RankRaw(r, (RepeatRaw((0.01,), 0.01),)) for r in range(spec.processes))
    env = environment(spec, {"framework_version": __version__} if spec.framework == "fake" else {})  # as here
    store.add_point(run_id, PointResult(spec, "ok", ranks, summarize(spec, ranks), env, started=1.0, finished=2.0))
    store.finish_run(run_id, "done")
    uid = store.points([run_id])[0].uid
    store.close()
    return run_id, uid


def _runs(store_path: Path) -> int:
    return len(Store(store_path, readonly=True).runs())


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


EIGHT = PointSpec("fake", "alexnet", 2, PROTO, input_size=64, devices_per_node=8, strategy="ddp", launcher="local")
TORCH_DP = PointSpec("torch", "alexnet", 2, PROTO, input_size=64, devices_per_node=2, strategy="dp", launcher="local")


def test_every_path_refuses_more_ranks_than_cpus_without_force(
    cli: Callable[..., CliResult], store_path: Path, tmp_path: Path
) -> None:
    base = ["-f", "fake", "-m", "alexnet", "-b", "2", "--input-size", "64", "--steps", "1", "--warmup", "0"]
    code, _, err = cli("run", *base, "--scale", "1n8c", "--strategy", "ddp", "--store", str(tmp_path / "run.db"))
    line = _one_line(err)
    assert code == 2 and "starts 8 ranks on a node, more than 2" in line and "--force" in line
    assert not (tmp_path / "run.db").exists()

    suite = tmp_path / "eight.yaml"
    suite.write_text(
        "name: eight\ndevice: cpu\ninput_size: 64\naxes: {framework: fake, model: alexnet, batch: [2], "
        "scale: [1n8c], strategy: [ddp]}\n"
    )
    code, _, err = cli("sweep", str(suite), "--store", str(tmp_path / "sweep.db"))
    assert (code, _one_line(err)) == (2, line) and not (tmp_path / "sweep.db").exists()

    run_id, uid = _stored(store_path, EIGHT)  # made with --force
    for args in (("rerun", run_id), ("reproduce", uid, "--run")):
        code, _, err = cli(*args, "--store", str(store_path))
        assert (code, _one_line(err)) == (2, line), args
    assert _runs(store_path) == 1  # nothing written


def test_force_lets_every_path_past_the_bounds(
    cli: Callable[..., CliResult], store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With --force the same stored point passes the gate: its ranks are handed to the launcher (stubbed here)."""
    started: list[PointSpec] = []

    def run_points(store: Store, run_id: str, specs: list[PointSpec], *args: object, **kw: object) -> list[object]:
        started.extend(specs)
        return []

    monkeypatch.setattr("dlbench.runapi.again.run_points", run_points)
    run_id, uid = _stored(store_path, EIGHT)
    for args in (("rerun", run_id, "--force"), ("reproduce", uid, "--run", "--force")):
        code, _, err = cli(*args, "--store", str(store_path))
        assert code == 0, err
    assert started == [EIGHT, EIGHT]


def test_a_stored_point_run_refuses_is_refused_up_front(cli: Callable[..., CliResult], store_path: Path) -> None:
    pytest.importorskip("torch", reason="the torch environment is not installed here")
    code, _, err = cli(
        "run", "-f", "torch", "-m", "alexnet", "-b", "2", "--input-size", "64", "--scale", "1n2c", "--strategy",
        "dp", "--store", str(store_path.parent / "run.db"),
    )  # fmt: skip
    line = _one_line(err)
    assert code == 2 and "dp (nn.DataParallel)" in line
    run_id, uid = _stored(store_path, TORCH_DP)
    for args in (("rerun", run_id), ("reproduce", uid, "--run", "--force")):  # --force passes bounds, not refusals
        code, _, err = cli(*args, "--store", str(store_path))
        assert (code, _one_line(err)) == (2, line), args
    assert _runs(store_path) == 1


def test_a_sweep_of_a_gpu_suite_on_a_machine_without_one_is_refused(
    cli: Callable[..., CliResult], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As `run --device cuda` is: the gate's GPU check holds for sweeps too (their dry run still lists points)."""
    monkeypatch.setattr("dlbench.runapi.gate.cuda_available", lambda: False)
    suite = tmp_path / "gpu.yaml"
    suite.write_text("name: gpu\ndevice: cuda\naxes: {framework: fake, model: alexnet, batch: [2]}\n")
    code, _, err = cli("sweep", str(suite), "--store", str(tmp_path / "s.db"))
    assert code == 2 and "--device cuda: NVML reports no NVIDIA GPU" in _one_line(err)
    assert not (tmp_path / "s.db").exists()
    code, out, err = cli("sweep", str(suite), "--dry-run", "--store", str(tmp_path / "s.db"))
    assert code == 0 and "alexnet" in out, err


def test_the_layout_travels_with_a_stored_point_into_the_gate(cli: Callable[..., CliResult], store_path: Path) -> None:
    """A stored split point whose case has no layout is refused by rerun with run's line."""
    split = PointSpec("fake", "alexnet", 2, PROTO, devices_per_node=2, layout=Layout(tensor_parallel=2))
    run_id, _ = _stored(store_path, split)
    code, _, err = cli("rerun", run_id, "--store", str(store_path))
    assert code == 2 and "alexnet has no parallel layout" in _one_line(err)
