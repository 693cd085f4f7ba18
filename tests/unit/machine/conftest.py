"""Fixtures of the machine tests: a private dlbench home, with no probe result remembered across tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dlbench.machine import peaks


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private dlbench home (the CPU and achievable probes' cache), nothing remembered across tests."""
    monkeypatch.setenv("DLBENCH_HOME", str(tmp_path / "home"))
    peaks.forget_probes()
    yield tmp_path / "home"
    peaks.forget_probes()
