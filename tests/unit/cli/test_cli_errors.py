"""Bad input beyond the table in bad_inputs.py: nothing written, unwritable stores, missing frameworks."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

CliResult = tuple[int, str, str]


def test_bad_run_writes_nothing(cli: Callable[..., CliResult], store_path: Path) -> None:
    code, _, _ = cli("run", "-m", "resnet50,nope", "--store", str(store_path))
    assert code == 2 and not store_path.exists()


def test_unwritable_store(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    code, _, err = cli("run", "-f", "fake", "--store", str(blocker / "results.db"))
    assert code == 2 and "cannot open the store" in err and len(err.strip().splitlines()) == 1


def test_framework_not_installed(
    cli: Callable[..., CliResult], store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dlbench import backends

    info = backends.get_info("torch")
    absent = backends.BackendInfo(info.name, info.title, "no_such_module_xyz", "no-such-dist", info.entry, "torch")
    monkeypatch.setattr(backends, "_BUILTIN", (absent,))
    monkeypatch.setenv("DLBENCH_HOME", str(store_path.parent / "home"))
    code, _, err = cli("run", "-f", "torch", "--store", str(store_path))
    assert code == 2 and "torch" in err and "not installed" in err
    assert not store_path.exists()
