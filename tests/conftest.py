"""Shared fixtures: a temporary store, a CLI runner, and framework environments (skipped, named, when absent)."""

from __future__ import annotations

import json
import math
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from dlbench.cli import main
from dlbench.envs.interpreters import NotInstalled, interpreter_for


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    """A fresh store file path."""
    return tmp_path / "store" / "results.db"


CliResult = tuple[int, str, str]


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., CliResult]:
    """Run the dlbench CLI in-process: cli("run", "-f", "fake") -> (exit code, stdout, stderr)."""

    def run(*args: str) -> CliResult:
        code = main(list(args))
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


def framework_python(name: str) -> str:
    """The interpreter of the framework's environment, or skip naming the missing environment."""
    try:
        return interpreter_for(name)
    except NotInstalled as exc:
        pytest.skip(f"{name} environment absent: {exc}")


def run_check(python: str, *args: str, timeout: float = 900) -> dict[str, object]:
    """Run `python -m dlbench.check ARGS` in a framework's environment and parse its JSON answer."""
    proc = subprocess.run([python, "-m", "dlbench.check", *args], capture_output=True, text=True,
                          timeout=timeout, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def check_loss_falls(python: str, framework: str, model: str, size: int, batch: int,
                     timeout: float = 900) -> None:
    """Convergence sanity in a framework's environment: 20 steps on one fixed batch, every loss finite and the
    mean of the last five below the first (one last step can land on a dropout spike at batch 2: AlexNet)."""
    answer = run_check(python, "converge", framework, model, "--steps", "20", "--batch", str(batch),
                       "--input-size", str(size), timeout=timeout)
    losses = answer["losses"]
    assert isinstance(losses, list) and len(losses) == 20
    assert all(math.isfinite(x) for x in losses), losses
    assert sum(losses[-5:]) / 5 < losses[0], losses


# The convergence matrix's heaviest cases run with `pytest -m matrix` (about 5 minutes per framework on
# 2 cores); CI's tier (`pytest -m "not matrix"`) keeps resnet50, alexnet and bert_base for every framework.
MATRIX_ONLY = frozenset({"vgg16", "resnet152", "inception_v3"})


def convergence_cases(names: list[str]) -> list[object]:
    """Case names as pytest params, the heaviest marked `matrix`."""
    return [pytest.param(n, marks=pytest.mark.matrix) if n in MATRIX_ONLY else n for n in names]
