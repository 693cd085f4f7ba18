"""What every framework test shares: the framework's interpreter (or a skip naming the missing environment),
`python -m dlbench.check` in it, convergence sanity, and the checks each framework makes the same way given its
name, version and labels: exact parameter counts, one compiled point through the CLI, a refused precision."""

from __future__ import annotations

import json
import math
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from dlbench.cases import all_cases
from dlbench.envs.interpreters import NotInstalled, interpreter_for
from dlbench.records import PointResult
from dlbench.store.store import Store

CliResult = tuple[int, str, str]

# The convergence matrix's heaviest cases run with `pytest -m matrix` (about 5 minutes per framework on
# 2 cores); CI's tier (`pytest -n 2 -m "not matrix"`) keeps resnet50, alexnet and bert_base for every framework.
MATRIX_ONLY = frozenset({"vgg16", "resnet152", "inception_v3"})


def interpreter_or_skip(name: str) -> str:
    """The interpreter of the framework's environment, or skip naming the missing environment."""
    try:
        return interpreter_for(name)
    except NotInstalled as exc:
        pytest.skip(f"{name} environment absent: {exc}")


def run_check(python: str, *args: str, timeout: float = 900) -> dict[str, object]:
    """Run `python -m dlbench.check ARGS` in a framework's environment and parse its JSON answer."""
    proc = subprocess.run(
        [python, "-m", "dlbench.check", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def check_loss_falls(python: str, framework: str, model: str, size: int, batch: int, timeout: float = 900) -> None:
    """Convergence sanity in a framework's environment: 20 steps on one fixed batch, every loss finite and the
    mean of the last five below the first (one last step can land on a dropout spike at batch 2: AlexNet)."""
    answer = run_check(
        python,
        "converge",
        framework,
        model,
        "--steps",
        "20",
        "--batch",
        str(batch),
        "--input-size",
        str(size),
        timeout=timeout,
    )
    losses = answer["losses"]
    assert isinstance(losses, list) and len(losses) == 20
    assert all(math.isfinite(x) for x in losses), losses
    assert sum(losses[-5:]) / 5 < losses[0], losses


def convergence_cases(names: list[str]) -> list[object]:
    """Case names as pytest params, the heaviest marked `matrix`."""
    return [pytest.param(n, marks=pytest.mark.matrix) if n in MATRIX_ONLY else n for n in names]


def assert_param_counts(python: str, framework: str, version: str, built: Iterable[str]) -> None:
    """The cases `built` have their exact parameter count in the framework (its version starts with
    `version`); a case added since may be unsupported, saying so, and is otherwise exact too."""
    answer = run_check(python, "params", framework)
    assert str(answer["version"]).startswith(version), answer["version"]
    names = set(built)
    for case in all_cases():
        if case.name in names or not str(answer[case.name]).startswith("unsupported: "):
            assert answer[case.name] == case.param_count, case.name


def only_point(store_path: Path) -> PointResult:
    """The single point a test's store holds."""
    [p] = [s.result for s in Store(store_path).points()]
    return p


def assert_compiled_point(
    cli: Callable[..., CliResult],
    store_path: Path,
    point: tuple[str, ...],
    model: str,
    size: str,
    framework: str,
    version: str,
    compiled: str,
    flag: bool = True,
) -> None:
    """One `--compile` point (`flag` False: a framework that always compiles) through the CLI: ok, a finite
    loss, the framework's identity, its compiled label, and window timing (synchronised at the ends of the 2
    measured steps)."""
    code, _, err = cli(
        "run", *point, "-m", model, "--input-size", size, *(["--compile"] if flag else []), "--store", str(store_path)
    )
    assert code == 0, err
    p = only_point(store_path)
    assert p.status == "ok" and p.metrics is not None, p.error
    assert p.metrics.throughput > 0 and p.metrics.final_loss is not None and math.isfinite(p.metrics.final_loss)
    assert p.env.identity["framework"] == framework and p.env.identity["framework_version"].startswith(version)
    assert p.extra.get("compiled") == compiled
    assert [sum(r.window_steps) for r in p.ranks[0].repeats] == [2]


def refused_up_front(cli: Callable[..., CliResult], store_path: Path, args: tuple[str, ...], *phrases: str) -> str:
    """A point the spec alone shows cannot run is refused before anything runs (dlbench.refusals, #31): exit 2,
    one line on stderr naming why, and nothing stored (the store keeps the points it had)."""
    before = len(Store(store_path).points()) if store_path.exists() else None
    code, _, err = cli("run", *args, "--store", str(store_path))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert all(p in err for p in phrases), err
    after = len(Store(store_path).points()) if store_path.exists() else None
    assert after == before, f"{before} points before, {after} after"
    return err


def assert_refused(
    cli: Callable[..., CliResult], store_path: Path, point: tuple[str, ...], size: str, precision: str, reason: str
) -> None:
    """A ResNet-50 point in a precision the framework cannot run here is refused before anything runs, saying why."""
    refused_up_front(
        cli, store_path, (*point, "-m", "resnet50", "--input-size", size, "--precision", precision), reason
    )
