"""Several processes on one machine with torch and gloo: every strategy keeps ranks in sync, the global batch is
per-device batch x world size, every rank's samples are stored, speedup comes from a named 1-device point;
a rank that dies and a backend that does not synchronise become recorded failures."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from tests.support.scaling import TINY, assert_ranks_in_sync, stored

pytest.importorskip("torch", reason="torch is not installed in this environment: pip install -e '.[torch]'")
pytestmark = [pytest.mark.slow, pytest.mark.framework("torch")]

CliResult = tuple[int, str, str]


@pytest.fixture(scope="module")
def shared_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One store for the module, so the 1-device baseline is measured once."""
    return tmp_path_factory.mktemp("scale") / "results.db"


@pytest.mark.parametrize("strategy", ["ddp", "allreduce", "ps"])
def test_each_strategy_keeps_two_ranks_in_sync(
    cli: Callable[..., CliResult], shared_store: Path, strategy: str
) -> None:
    code, out, err = cli("run", *TINY, "--scale", "1n2c", "--strategy", strategy, "--store", str(shared_store))
    assert code == 0, err
    points = stored(shared_store)
    baselines = [p for p in points if p.spec.world_size == 1]
    assert len(baselines) == 1 and baselines[0].status == "ok"  # measured by the first test only
    r = points[-1]
    assert (r.spec.strategy, r.spec.launcher, r.spec.scale) == (strategy, "torchrun", "1n2c")
    assert_ranks_in_sync(r, 2)
    assert r.env.descriptive["dist_backend"] == "gloo" and r.env.descriptive["strategy_run"] == strategy
    assert "speedup" in out and "efficiency" in out
    assert "against 1-device point #" in out


def test_default_scale_run_uses_torchrun_and_ddp(
    cli: Callable[..., CliResult], shared_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "250")  # the points table is wide (TFLOP/s, MFU): one line per cell
    code, out, err = cli("run", *TINY, "--scale", "1n2c", "--store", str(shared_store))
    assert code == 0, err
    r = stored(shared_store)[-1]
    assert r.spec.launcher == "torchrun" and r.env.descriptive["strategy_run"] == "ddp"
    assert_ranks_in_sync(r, 2)
    code, out, _ = cli("results", "--store", str(shared_store), "--last", "1")
    assert code == 0 and "speedup" in out and "x (vs #" in out


def _kill_rank_1(job_dir: Path, stop: threading.Event) -> None:
    """SIGKILL the rank-1 worker of this test's point (found by its job folder) once it runs."""
    while not stop.is_set():
        for p in psutil.process_iter(["cmdline"]):
            cmd = " ".join(p.info["cmdline"] or [])
            if "dlbench.worker" in cmd and str(job_dir) in cmd and "torch.distributed.run" not in cmd:
                try:
                    if p.environ().get("RANK") == "1":
                        p.send_signal(signal.SIGKILL)
                        return
                except psutil.Error:
                    continue
        time.sleep(0.2)


def test_a_rank_that_dies_is_a_recorded_failure(
    cli: Callable[..., CliResult], shared_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_dir = tmp_path / "jobs"
    monkeypatch.setenv("DLBENCH_JOB_DIR", str(job_dir))
    stop = threading.Event()
    killer = threading.Thread(target=_kill_rank_1, args=(job_dir, stop), daemon=True)
    killer.start()
    started = time.monotonic()
    code, _out, _err = cli("run", *TINY, "--scale", "1n2c", "--strategy", "ddp", "--store", str(shared_store))
    stop.set()
    assert code == 1
    r = stored(shared_store)[-1]
    assert r.spec.world_size == 2 and r.status in ("crashed", "error")
    assert "rank 1 died from SIGKILL" in str(r.error) and "\n" not in str(r.error)
    assert time.monotonic() - started < 300


def test_a_backend_that_does_not_synchronise_fails_the_check(cli: Callable[..., CliResult], store_path: Path) -> None:
    code, _, _ = cli(
        "run",
        "-f",
        "fake",
        "-m",
        "resnet50",
        "-b",
        "2",
        "--steps",
        "2",
        "--warmup",
        "0",
        "--repeats",
        "1",
        "--scale",
        "1n2c",
        "--store",
        str(store_path),
    )
    assert code == 1
    base, r = stored(store_path)
    assert base.status == "ok" and base.spec.world_size == 1
    assert r.status == "failed_check" and "no parameter checksum" in str(r.error)
    assert len(r.ranks) == 2  # the raw samples are kept
