"""Fixtures every test folder shares: a temporary store path, the CLI run in-process, the store URLs (SQLite and
a real PostgreSQL server, tests/support/stores.py), and NVML's per-process cache cleared after each test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dlbench.cli import main
from tests.support.stores import pg_server, pg_url, store_url


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


@pytest.fixture(autouse=True)
def _no_inherited_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """Output outside a terminal is 200 columns wide unless $COLUMNS says otherwise: a developer's exported
    COLUMNS=80 (or pytest-xdist's workers') must not rewrap what a test reads. Tests of a width set their own."""
    monkeypatch.delenv("COLUMNS", raising=False)


@pytest.fixture(autouse=True)
def _forget_gpus() -> Iterator[None]:
    """dlbench.machine.env.gpus() is cached per process: a test that faked NVML must not leave its GPUs to the next."""
    yield
    from dlbench.machine import env

    env.gpus.cache_clear()


__all__ = ["pg_server", "pg_url", "store_url"]
