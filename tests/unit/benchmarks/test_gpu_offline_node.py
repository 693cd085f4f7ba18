"""The offline GPU node's own invocation, rehearsed (#40): benchmarks/gpu/README.md's device commands run exactly as
the node runs them, and any step that would exit 2 there fails this test.

As on the node: a copy of the tree without .git (the repository's tracked files and the untracked ones git does not
ignore, as the device tool copies it) holding `.whl/` (wheels.txt's wheels and the COMMIT stamp); an interpreter
with the node's own packages (benchmarks/gpu/node-image.txt: a Python 3.12 venv, from pyenv where present, with
neither dlbench nor pytest, nor torch, nor Grain) first on PATH as `python3`; the README's command as it stands,
the wheels unpacked by its own `pip install --no-index --target .site`. What differs, and only at a boundary:
`DLBENCH_GPU_REHEARSAL=1` (validate.sh runs the fake backend on a fake GPU at NVML's boundary) and `$OUT`.

The wheels come from PyPI through benchmarks/gpu/wheels.py, which .ci/run calls (a cache under
~/.cache/dlbench/gpu-wheels, or $DLBENCH_WHEEL_CACHE); the node-image venv is built once per cache from them.
Without the wheels or a Python 3.12 the test skips, saying what to run ($DLBENCH_REQUIRE_OFFLINE_NODE=1, as CI
sets it, makes that a failure).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.paths import REPO

GPU = REPO / "benchmarks" / "gpu"
NODE_STAGES = ("a", "b", "llama")


def _wheels() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dlbench_gpu_wheels", GPU / "wheels.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _unavailable(why: str) -> None:
    """Skip, saying what is missing, unless CI requires the rehearsal (then fail)."""
    if os.environ.get("DLBENCH_REQUIRE_OFFLINE_NODE"):
        pytest.fail(f"the offline-node rehearsal cannot run: {why}")
    pytest.skip(why)


def _cache() -> Path:
    return Path(os.environ.get("DLBENCH_WHEEL_CACHE") or Path.home() / ".cache" / "dlbench" / "gpu-wheels")


def _fetched(wheels: ModuleType, folder: Path, listing: str) -> list[Path]:
    """The list's wheels in the folder; skips (or fails in CI) naming the command when any is missing."""
    pins = wheels.pins(GPU / listing)
    found = [wheels.present(folder, name, version) for name, version in pins]
    if None in found:
        _unavailable(
            f"{listing}'s wheels are not in {folder}: run: python3 benchmarks/gpu/wheels.py {folder}"
            f"{' --list node-image.txt' if listing != 'wheels.txt' else ''}"
        )
    return [f for f in found if f is not None]


def _python312() -> str:
    """A CPython 3.12: pyenv's where present, else python3.12 on PATH."""
    versions = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    found = [str(p) for p in sorted(versions.glob("3.12.*/bin/python3.12"))]
    if not found:  # a python3.12 that runs (pyenv's shim answers for an uninstalled version, and fails)
        path = shutil.which("python3.12")
        ok = path and subprocess.run([path, "-c", "pass"], capture_output=True, check=False).returncode == 0
        found = [path] if ok and path else []
    if not found:
        _unavailable("no Python 3.12 here (pyenv's ~/.pyenv/versions/3.12.*, or python3.12 on PATH)")
    return found[-1]


def _image(python: str, wheels: list[Path]) -> Path:
    """The node's own packages in a venv of `python` (no dlbench, no pytest), built once per cache: built apart and
    renamed into place, so that a build cut off leaves nothing half made."""
    key = hashlib.sha256(f"{python}\n{(GPU / 'node-image.txt').read_text()}".encode()).hexdigest()[:12]
    venv = _cache() / f"node-image-{key}"
    if (venv / "bin" / "python3").exists():
        return venv
    part = venv.with_name(f"{venv.name}.part-{os.getpid()}")
    shutil.rmtree(part, ignore_errors=True)
    subprocess.run([python, "-m", "venv", str(part)], check=True, timeout=300)
    subprocess.run(
        [str(part / "bin" / "python3"), "-m", "pip", "install", "-q", "--no-index", "--no-deps",
         "--disable-pip-version-check", *map(str, wheels)],
        check=True, timeout=600,
    )  # fmt: skip
    try:
        part.rename(venv)
    except OSError:  # another run built it first
        shutil.rmtree(part, ignore_errors=True)
    return venv


def _tree(dest: Path) -> None:
    """The files the device tool copies: tracked, and untracked that git does not ignore; no .git."""
    files = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, files):
        source = REPO / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)


def _commands() -> list[str]:
    """The README's device commands (its bash blocks that install the wheels), in order."""
    readme = (GPU / "README.md").read_text(encoding="utf-8")
    block = readme[readme.index("## The device command") :]
    found = [b.strip() for b in re.findall(r"```bash\n(.*?)```", block, flags=re.DOTALL) if "--target .site" in b]
    assert found, "benchmarks/gpu/README.md has no device command"
    return found


def _run(command: str, tree: Path, out: Path, venv: Path, home: Path) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "OUT": str(out),
        "DLBENCH_GPU_REHEARSAL": "1",
        "LANG": "C.UTF-8",
    }
    return subprocess.run(
        ["bash", "-c", command], cwd=tree, env=env, capture_output=True, text=True, timeout=900, check=False
    )


@pytest.mark.slow
def test_the_node_command_runs_every_step_as_on_the_node(tmp_path: Path) -> None:
    wheels = _wheels()
    node = _fetched(wheels, _cache() / "node", "wheels.txt")
    image_wheels = _fetched(wheels, _cache() / "image", "node-image.txt")
    venv = _image(_python312(), image_wheels)
    python = venv / "bin" / "python3"
    for absent in ("dlbench", "pytest", "torch", "grain"):  # the node's image, not this one
        probe = subprocess.run(
            [str(python), "-c", f"import {absent}"], env={"PATH": "/usr/bin:/bin"}, capture_output=True, check=False
        )
        assert probe.returncode != 0, f"{absent} imports in the node image"
    tree, out, home = tmp_path / "tree", tmp_path / "out", tmp_path / "home"
    for folder in (tree / ".whl", out, home):
        folder.mkdir(parents=True)
    _tree(tree)
    assert not (tree / ".git").exists() and not (tree / "src" / "dlbench" / "COMMIT").exists()
    for wheel in node:
        shutil.copy(wheel, tree / ".whl")
    wheels.stamp(tree / ".whl")  # as `wheels.py .whl --stamp` does before the device call
    commit = (tree / ".whl" / "COMMIT").read_text().split()[0]
    first, *later = _commands()
    proc = _run(first, tree, out, venv, home)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-6000:]
    assert "exited 2" not in log and "error:" not in log, log[-6000:]
    checks = re.findall(r"^(PASS|FAIL): (.*)$", log, flags=re.MULTILINE)
    assert len(checks) == 6 and all(v == "PASS" for v, _ in checks), checks  # a, b and llama: 2 each
    assert "llama3_1b fp8 compiled ok" in log  # torchao's wheel is unpacked: the fp8 step ran
    packed = {*(f"stage-{s}.tgz" for s in NODE_STAGES), "merge.tgz", "summary.json"}
    assert {p.name for p in out.iterdir()} == packed  # written then renamed: no part left
    summary = json.loads((out / "summary.json").read_text())
    assert sorted(summary["stages"]) == sorted(NODE_STAGES)
    assert all(s["checks_failed"] == 0 and s["rehearsal"] for s in summary["stages"].values())
    version = re.search(r'^version = "(.+)"$', (REPO / "pyproject.toml").read_text(), re.MULTILINE)
    assert version is not None
    for point in summary["points"]:  # each published point names its dlbench, from the tree and its stamp
        assert point["dlbench_version"] == version.group(1) and point["git_commit"] == commit, point
    assert {p["model"] for p in summary["points"]} == {"resnet50", "bert_base", "llama3_1b"}
    headline = [p for p in summary["points"] if p["precision"] == "amp"]  # stage a's: DLPerf's method, stored
    assert len(headline) == 2 and all(p["protocol"]["preset"] == "dlperf" for p in headline)
    # The last command runs stage e: dlbench's JAX backend must load in the node's image (JAX without Grain).
    proc = _run(later[-1], tree, out, venv, home)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "FAIL" not in log and "exited 2" not in log, log[-6000:]
    assert "PASS: jax resnet50 bf16 ok" in log and "does not load" not in log
