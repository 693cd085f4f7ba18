"""An mpirun point with 2 ranks (Open MPI from Debian's packages): ranks named by OMPI_COMM_WORLD_*, met over
gloo, in sync, every rank's samples stored."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.scaling import TINY, assert_ranks_in_sync, emulate, stored

pytest.importorskip("torch", reason="torch is not installed in this environment: pip install -e '.[torch]'")
pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.framework("torch")]

CliResult = tuple[int, str, str]


def test_two_ranks_through_mpirun(
    cli: Callable[..., CliResult], store_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    emulate("mpi")
    monkeypatch.setenv("DLBENCH_JOB_DIR", str(tmp_path / "jobs"))
    code, out, err = cli(
        "run", *TINY, "--scale", "1n2c", "--launcher", "mpirun", "--strategy", "allreduce", "--store", str(store_path)
    )
    assert code == 0, err
    base, r = stored(store_path)
    assert base.spec.world_size == 1 and base.status == "ok"
    assert r.spec.launcher == "mpirun"
    assert_ranks_in_sync(r, 2)
    assert "speedup" in out
