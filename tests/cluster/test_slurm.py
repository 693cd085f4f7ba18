"""A 2-node point through the slurm launcher on two emulated Slurm nodes (slurmd n1 and n2 on this host,
installed and started from Debian's packages by scripts/emulate/slurm.sh): sbatch with srun inside, squeue
polls, every rank's samples stored, speedup against a 1-device point measured through Slurm too."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.scaling import TINY, assert_ranks_in_sync, emulate, stored

pytest.importorskip("torch", reason="torch is not installed in this environment: pip install -e '.[torch]'")
pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.framework("torch")]

CliResult = tuple[int, str, str]


@pytest.fixture(scope="module")
def slurm_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One store for the module: the Slurm 1-device baseline is measured once."""
    return tmp_path_factory.mktemp("slurm") / "results.db"


def test_two_node_point_through_slurm(
    cli: Callable[..., CliResult], slurm_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    emulate("slurm")
    monkeypatch.setenv("DLBENCH_JOB_DIR", str(tmp_path / "jobs"))
    code, out, err = cli("run", *TINY, "--scale", "2n1c", "--launcher", "slurm", "--store", str(slurm_store))
    assert code == 0, err
    base, r = stored(slurm_store)
    assert (base.spec.launcher, base.spec.world_size, base.status) == ("slurm", 1, "ok")
    assert_ranks_in_sync(r, 2)
    d = r.env.descriptive
    assert d["launcher"] == "slurm" and d["slurm_state"] == "COMPLETED" and d["slurm_nodes"] in ("n[1-2]", "n1,n2")
    assert "speedup" in out and "against 1-device point #" in out
    assert not any((tmp_path / "jobs").iterdir())  # job folders are cleaned up


def test_a_job_that_cannot_start_is_a_recorded_failure(
    cli: Callable[..., CliResult], slurm_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    emulate("slurm")
    monkeypatch.setenv("DLBENCH_JOB_DIR", str(tmp_path / "jobs"))
    started = time.monotonic()
    code, _, _ = cli("run", *TINY, "--scale", "3n1c", "--launcher", "slurm", "--store", str(slurm_store))
    assert code == 1 and time.monotonic() - started < 120
    [r] = [p for p in stored(slurm_store) if p.spec.world_size == 3]
    # Slurm accepts 3 nodes on a 2-node partition and would keep it pending: dlbench cancels it and says why.
    assert r.status == "error" and "cannot start as submitted (Partition" in str(r.error)
    assert "\n" not in str(r.error)
