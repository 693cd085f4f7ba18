"""Which interpreter a framework's environment is made from: discovery on PATH and in (fake) pyenv folders, the
per-framework Python ranges, and the one-line refusals."""

from __future__ import annotations

import dataclasses
import re
import stat
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from dlbench import backends
from dlbench.envs import interpreters as it
from tests.support.paths import REPO

CliResult = tuple[int, str, str]


def _fake(path: Path, version: str, impl: str = "cpython", broken: bool = False) -> Path:
    """An executable standing in for a Python: it answers the version probe (any -c script) with `version`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    parts = ", ".join(version.split("."))
    body = "exit 3" if broken else f'echo \'{{"version": [{parts}], "impl": "{impl}", "executable": "{path}"}}\''
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def pyenv(tmp_path: Path) -> dict[str, str]:
    """A pyenv root holding 3.9.18, 3.10.13, 3.12.1 and 3.13.0, a PyPy and a broken one; PATH with a python3.12
    link to pyenv's and nothing else (no uv): the environment to discover in."""
    root = tmp_path / "pyenv"
    for v in ("3.9.18", "3.10.13", "3.12.1", "3.13.0"):
        _fake(root / "versions" / v / "bin" / "python", v)
    _fake(root / "versions" / "pypy3.10-7.3" / "bin" / "python", "3.10.13", impl="pypy")
    _fake(root / "versions" / "3.11-broken" / "bin" / "python", "3.11.0", broken=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3.12").symlink_to(root / "versions" / "3.12.1" / "bin" / "python")
    (bin_dir / "pythonista").symlink_to(root / "versions" / "3.13.0" / "bin" / "python")  # not a python3.N name
    return {"PATH": str(bin_dir), "PYENV_ROOT": str(root), "HOME": str(tmp_path)}


def _info(name: str, lo: str, hi: str) -> backends.BackendInfo:
    return dataclasses.replace(backends.get_info("torch"), name=name, python=(lo, hi))


def test_discovery_finds_pyenv_and_path_once_each_newest_first(pyenv: dict[str, str]) -> None:
    found = it.discover(pyenv)
    assert [i.label for i in found] == ["3.13.0", "3.12.1", "3.10.13", "3.9.18"]  # no PyPy, no broken one
    assert sum(i.minor == (3, 12) for i in found) == 1  # PATH's python3.12 is pyenv's, counted once


def test_without_python_this_interpreter_when_it_fits_else_the_newest_that_does(pyenv: dict[str, str]) -> None:
    here = it.probe(sys.executable)
    assert here is not None
    fits_here = _info("fw", here.label.rsplit(".", 1)[0], "3.14")
    assert it.choose(fits_here, None, pyenv).version == here.version
    old_only = _info("oldfw", "3.8", "3.10")  # oneflow's and megengine's range
    if here.minor <= (3, 10):
        pytest.skip("this interpreter is itself 3.10: it would be chosen")
    picked = it.choose(old_only, None, pyenv)
    assert picked.label == "3.10.13" and "3.10.13" in picked.path  # 3.9 is below dlbench's own floor


def test_a_version_picks_that_minor(pyenv: dict[str, str]) -> None:
    jax = backends.get_info("jax")
    assert it.choose(jax, "3.12", pyenv).label == "3.12.1"
    assert it.choose(jax, "3.13", pyenv).label == "3.13.0"


def test_none_fits_says_how_to_get_one(pyenv: dict[str, str]) -> None:
    with pytest.raises(
        it.NoInterpreter,
        match=r"no Python 3\.14 found on PATH, in pyenv or through uv: install one "
        r"\(`uv python install 3\.14`\) or name it: .*--python PATH",
    ) as exc:
        it.choose(backends.get_info("jax"), "3.14", pyenv)
    assert "\n" not in str(exc.value)
    if it.probe(sys.executable).minor == (3, 14):  # type: ignore[union-attr]
        pytest.skip("this interpreter is 3.14")
    with pytest.raises(it.NoInterpreter, match=r"needs Python 3\.14 and none was found.*uv python install 3\.14"):
        it.choose(_info("newfw", "3.14", "3.14"), None, pyenv)


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        ("3.99", r"Python 3\.99 is too new for torch \(it supports 3\.10-3\.14\)"),
        ("4.0", "too new for torch"),
        ("2.7", r"Python 2\.7 is too old for torch"),
        ("3.x", "unknown Python version '3.x'"),
        ("3.12.1.7", "unknown Python version"),
        ("no-such-python-here", "no Python interpreter at 'no-such-python-here'"),
    ],
)
def test_bad_requests_are_one_line(pyenv: dict[str, str], request_: str, message: str) -> None:
    with pytest.raises(it.NoInterpreter, match=message) as exc:
        it.choose(backends.get_info("torch"), request_, pyenv)
    assert "\n" not in str(exc.value)


def test_a_path_is_checked_against_the_range(pyenv: dict[str, str], tmp_path: Path) -> None:
    py313 = str(Path(pyenv["PYENV_ROOT"]) / "versions" / "3.13.0" / "bin" / "python")
    assert it.choose(backends.get_info("tf"), py313, pyenv).path == py313
    with pytest.raises(it.NoInterpreter, match=r"3\.13 is too new for mindspore \(it supports 3\.10-3\.12\)"):
        it.choose(backends.get_info("mindspore"), py313, pyenv)
    pypy = str(Path(pyenv["PYENV_ROOT"]) / "versions" / "pypy3.10-7.3" / "bin" / "python")
    with pytest.raises(it.NoInterpreter, match="pypy, not CPython"):
        it.choose(backends.get_info("torch"), pypy, pyenv)
    with pytest.raises(it.NoInterpreter, match="not a working Python"):
        it.choose(backends.get_info("torch"), str(_fake(tmp_path / "x" / "python", "3.12", broken=True)), pyenv)


def test_ranges_meet_dlbench_own_floor() -> None:
    oneflow = backends.get_info("oneflow")
    assert it.range_text(oneflow) == "3.10"
    assert it.misfit(oneflow, (3, 10)) is None
    assert "too old for dlbench" in (it.misfit(oneflow, (3, 9)) or "")
    assert "too old for oneflow" in (it.misfit(oneflow, (3, 7)) or "")
    assert "too new for oneflow" in (it.misfit(oneflow, (3, 11)) or "")
    assert it.range_text(backends.get_info("jax")) == "3.11-3.14"


def test_dlbench_floor_is_pyproject_requires_python() -> None:
    root = REPO
    text = (root / "pyproject.toml").read_text(encoding="utf-8")
    match = re.search(r'^requires-python\s*=\s*">=(\d+)\.(\d+)"', text, re.MULTILINE)
    assert match is not None
    assert (int(match.group(1)), int(match.group(2))) == it.DLBENCH_PYTHON


@pytest.mark.parametrize(
    ("version", "dists", "build"),
    [
        ("2.13.0+cpu", (), "cpu"),
        ("2.11.0+cu128", (), "cuda"),
        ("2.21.0", ("tensorflow-cpu",), "cpu"),
        ("2.21.0", ("tensorflow", "nvidia-cudnn-cu12"), "cuda"),
        ("0.12.0", ("jax", "jax-cuda12-plugin"), "cuda"),
        ("3.3.1", ("paddlepaddle-gpu",), "cuda"),
        ("2.6.0a0+git1234", ("torch",), ""),  # a container's source build: unknown, not guessed
    ],
)
def test_build_from_distributions(version: str, dists: tuple[str, ...], build: str) -> None:
    assert it.build_of(version, dists) == build


def test_existing_interpreter_out_of_range_is_one_line(
    cli: Callable[..., CliResult], pyenv: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DLBENCH_HOME", str(tmp_path / "home"))
    py39 = str(Path(pyenv["PYENV_ROOT"]) / "versions" / "3.9.18" / "bin" / "python")
    code, _, err = cli("setup", "torch", "--existing", py39)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "Python 3.9 is too old for torch" in err
    assert not (tmp_path / "home").exists()


def test_a_venv_of_another_python_than_asked_is_rebuilt(
    pyenv: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """setup_one with every command faked: a jax venv made by 3.13 is deleted and made again by the 3.12 asked."""
    from rich.console import Console

    from dlbench.cli.feedback import ConsoleFeedback
    from dlbench.envs import provision as setup_cli
    from dlbench.envs import venvs

    monkeypatch.setenv("DLBENCH_HOME", str(tmp_path / "home"))
    calls: list[list[str]] = []
    monkeypatch.setattr(setup_cli, "_run_logged", lambda argv, log, label, console: calls.append(argv) or 0)
    monkeypatch.setattr(setup_cli, "_ask", lambda python, *args, timeout: {"version": "0.12.0"})
    monkeypatch.setattr(setup_cli, "probe_framework", lambda python, info: {"version": "0.12.0"})
    old = _fake(venvs.venv_python(venvs.env_dir("jax")), "3.13.0")
    jax = backends.get_info("jax")
    wanted = it.choose(jax, "3.12", pyenv)
    setup_cli.setup_one(
        setup_cli.Plan(jax, wanted, "cpu", pinned=True),
        recreate=False,
        check_cases=False,
        feedback=ConsoleFeedback(Console(stderr=True)),
    )
    assert not old.exists()  # deleted: its Python was not the one asked for
    assert calls[0][:3] == [wanted.path, "-m", "venv"]
    assert calls[1][-1].endswith("[jax]")


def test_uv_python_find_is_asked_where_uv_is_installed(pyenv: dict[str, str], tmp_path: Path) -> None:
    """A 3.14 only uv knows (its own folder, not on PATH nor in pyenv) is found through `uv python find`."""
    py314 = _fake(tmp_path / "uv-pythons" / "cpython-3.14.0" / "bin" / "python", "3.14.0")
    asked = tmp_path / "uv-asked"
    uv = Path(pyenv["PATH"]) / "uv"
    uv.write_text(f'#!/bin/sh\necho "$@" >> {asked}\necho {py314}\n')
    uv.chmod(uv.stat().st_mode | stat.S_IXUSR)
    assert it.choose(backends.get_info("jax"), "3.14", pyenv).path == str(py314)
    assert asked.read_text().splitlines() == ["python find 3.14"]
    if it.probe(sys.executable).minor == (3, 14):  # type: ignore[union-attr]
        pytest.skip("this interpreter is 3.14")
    assert it.choose(_info("newfw", "3.14", "3.14"), None, pyenv).path == str(py314)
    assert asked.read_text().splitlines()[-1] == "python find >=3.14,<3.15"
