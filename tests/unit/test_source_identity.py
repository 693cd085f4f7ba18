"""dlbench run from a source tree (#40), as the offline GPU node runs it (the tree on PYTHONPATH, not installed,
copied without .git): its version is pyproject.toml's, not 0.0.0+unknown, and its commit is the one stamped in the
tree (src/dlbench/COMMIT) when git cannot tell."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO


def test_a_copied_tree_names_its_version_and_stamped_commit(tmp_path: Path) -> None:
    """`python -S` (no site-packages: dlbench is not installed) over a copy of the package and pyproject.toml."""
    shutil.copytree(REPO / "src" / "dlbench", tmp_path / "src" / "dlbench", ignore=shutil.ignore_patterns("COMMIT"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    ask = "import sys; sys.path.insert(0, sys.argv[1]); import dlbench; print(dlbench.__version__, dlbench.stamped_commit(), dlbench.stamped_commit(describe=True))"

    def identity() -> list[str]:
        proc = subprocess.run(
            [sys.executable, "-S", "-c", ask, str(tmp_path / "src")], capture_output=True, text=True, check=True
        )
        return proc.stdout.split()

    version = next(line for line in (REPO / "pyproject.toml").read_text().splitlines() if line.startswith("version"))
    assert identity() == [version.split('"')[1]]  # no stamp: the version alone, no commit
    (tmp_path / "src" / "dlbench" / "COMMIT").write_text("0123abcd" * 5 + "\nv0.1-3-g0123abc-dirty\n")
    assert identity() == [version.split('"')[1], "0123abcd" * 5, "v0.1-3-g0123abc-dirty"]
    (tmp_path / "src" / "dlbench" / "COMMIT").write_text("\x1b[2J; rm -rf /\n")  # not a commit: not recorded
    assert identity() == [version.split('"')[1]]


def test_git_absent_reads_the_stamp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Where `git` cannot answer (no .git, or no git at all), the point's git_commit and the request's commit are
    the stamp's."""
    import dlbench
    from dlbench.launch import lock
    from dlbench.machine import env

    stamp = tmp_path / "COMMIT"
    stamp.write_text("f" * 40 + "\nv0.1-7-gfffffff\n")
    monkeypatch.setattr(dlbench, "COMMIT_FILE", stamp)

    def no_git(*args: object, **kwargs: object) -> object:
        raise FileNotFoundError("git")

    monkeypatch.setattr(subprocess, "run", no_git)
    env.git_commit.cache_clear()
    lock.dlbench_commit.cache_clear()
    try:
        assert env.git_commit() == "f" * 40 and lock.dlbench_commit() == "v0.1-7-gfffffff"
    finally:
        env.git_commit.cache_clear()
        lock.dlbench_commit.cache_clear()
