"""Checks every framework test file makes the same way, each given its framework's name, version and labels:
exact parameter counts, one compiled point through the CLI, a refused precision."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from pathlib import Path

from conftest import run_check

from dlbench.cases import all_cases
from dlbench.records import PointResult
from dlbench.store.store import Store

CliResult = tuple[int, str, str]


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


def assert_compiled_point(cli: Callable[..., CliResult], store_path: Path, point: tuple[str, ...], model: str,
                          size: str, framework: str, version: str, compiled: str, flag: bool = True) -> None:
    """One `--compile` point (`flag` False: a framework that always compiles) through the CLI: ok, a finite
    loss, the framework's identity, its compiled label, and window timing (synchronised at the ends of the 2
    measured steps)."""
    code, _, err = cli("run", *point, "-m", model, "--input-size", size, *(["--compile"] if flag else []),
                       "--store", str(store_path))
    assert code == 0, err
    p = only_point(store_path)
    assert p.status == "ok" and p.metrics is not None, p.error
    assert p.metrics.throughput > 0 and p.metrics.final_loss is not None and math.isfinite(p.metrics.final_loss)
    assert p.env.identity["framework"] == framework and p.env.identity["framework_version"].startswith(version)
    assert p.extra.get("compiled") == compiled
    assert [sum(r.window_steps) for r in p.ranks[0].repeats] == [2]


def assert_refused(cli: Callable[..., CliResult], store_path: Path, point: tuple[str, ...], size: str,
                   precision: str, reason: str) -> None:
    """A ResNet-50 point in a precision the framework cannot run here is stored unsupported, saying why."""
    cli("run", *point, "-m", "resnet50", "--input-size", size, "--precision", precision, "--store", str(store_path))
    p = only_point(store_path)
    assert p.status == "unsupported" and reason in (p.error or ""), p.error
