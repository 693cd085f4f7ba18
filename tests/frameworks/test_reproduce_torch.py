"""Issue 33 with a real framework: a tiny PyTorch point keeps the lock of the interpreter that ran it (torch
at the version that interpreter has), and `dlbench reproduce --run` measures it again beside the original."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from dlbench.envs.interpreters import interpreter_for
from dlbench.store.request import request_of
from dlbench.store.store import Store

pytestmark = [pytest.mark.framework("torch"), pytest.mark.slow]
CliResult = tuple[int, str, str]


def test_a_torch_point_keeps_its_lock_and_is_measured_again(
    store_path: Path, cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    code, _, err = cli(
        "run",
        "-f",
        "torch",
        "-m",
        "alexnet",
        "--input-size",
        "64",
        "-b",
        "2",
        "--steps",
        "2",
        "--warmup",
        "1",
        "--repeats",
        "1",
        "--store",
        str(store_path),
    )
    assert code == 0, err
    point = Store(store_path, readonly=True).points()[0]
    req = request_of(point.result)
    python = interpreter_for("torch")
    asked = subprocess.run(
        [python, "-c", "import importlib.metadata as m; print(m.version('torch'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert req is not None and req.python == python and req.package_version("torch") == asked
    assert point.result.env.identity["framework_version"].split("+")[0] == asked.split("+")[0]
    code, out, err = cli("reproduce", point.uid[:8], "--store", str(store_path))
    assert code == 0, err
    assert f"  torch=={asked}" in out and "command: dlbench run -f torch -m alexnet" in out
    code, out, err = cli("reproduce", point.uid[:8], "--run", "--store", str(store_path))
    assert code == 0, err
    again = [p for p in Store(store_path, readonly=True).points() if p.run_id != point.run_id]
    assert len(again) == 1 and again[0].result.status == "ok" and again[0].result.spec == point.result.spec
    assert "original and again" in out and next(ln for ln in out.splitlines() if ln.startswith("verdict: "))
