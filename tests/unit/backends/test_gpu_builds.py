"""The GPU story told up front (issue #28): per framework, whether a build runs on a Hopper or Blackwell GPU,
whether PyPI has it, and what to do, in `dlbench list` (within 80 columns) and `dlbench setup --cuda`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dlbench.backends import BUILDS, advice, all_backends, comparable

CliResult = tuple[int, str, str]


@pytest.fixture(autouse=True)
def temp_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own DLBENCH_HOME."""
    home = tmp_path / "home"
    monkeypatch.setenv("DLBENCH_HOME", str(home))
    return home


def test_every_framework_has_its_gpu_story() -> None:
    """Each built-in framework is described; Hopper users can compare torch, JAX, TF (its PTX) and Paddle (its
    own index), Blackwell users torch and JAX; PyPI lacks Paddle's, MXNet's, OneFlow's, MindSpore's and
    MegEngine's."""
    assert set(all_backends()) == set(BUILDS)
    assert comparable("hopper") == ["torch", "jax", "tf", "paddle"]
    assert comparable("blackwell") == ["torch", "jax"]
    assert {fw for fw, b in BUILDS.items() if not b.on_pypi} == {"paddle", "mxnet", "oneflow", "mindspore", "megengine"}
    assert "paddlepaddle.org.cn" in advice("paddle") and "NGC MXNet container" in advice("mxnet")
    assert "CUDA 11" in advice("oneflow") and "Python <= 3.10" in advice("megengine")


def test_list_shows_the_gpu_builds_within_80_columns(
    cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`dlbench list` has a GPU-builds row per framework, every line within 80 columns, the index URL whole."""
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = cli("list")
    assert code == 0
    section = out[out.index("GPU builds") : out.index("case support")]
    assert max(len(line) for line in out.splitlines()) <= 80
    lines = section.splitlines()
    for fw in BUILDS:
        assert any(line.startswith(f"{fw} ") for line in lines), fw
    how = next(line for line in lines if line.startswith("framework")).index("how")
    assert "https://www.paddlepaddle.org.cn/packages/stable/cu126/" in "".join(line[how:].strip() for line in lines)


def test_setup_cuda_says_what_runs_before_installing(cli: Callable[..., CliResult], temp_home: Path) -> None:
    """`dlbench setup --cuda mxnet`: one line, exit 2, saying there is no build for Hopper and where one is;
    nothing is installed."""
    code, _, err = cli("setup", "--cuda", "mxnet")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "Hopper no" in err and "NGC MXNet container" in err and "--existing" in err
    assert not (temp_home / "envs").exists()
