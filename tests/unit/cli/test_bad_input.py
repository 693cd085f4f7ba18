"""The bad-input table (tests/support/bad_inputs.py) over every sub-command: exit 2, one line on stderr naming the
problem, no traceback, the store's rows unchanged and no file created or removed."""

from __future__ import annotations

import hashlib
import shlex
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from dlbench.cli import main
from tests.support.bad_inputs import BAD_INPUTS, hostile_files

CliResult = tuple[int, str, str]


def _rows_digest(store: Path) -> str:
    """A digest of every row of the store (its SQL dump), independent of WAL checkpoints."""
    con = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        return hashlib.sha256("\n".join(con.iterdump()).encode()).hexdigest()
    finally:
        con.close()


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if not p.name.endswith(("-wal", "-shm"))}


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """A folder of hostile files and a store holding one finished fake run: (folder, store, run id)."""
    folder = tmp_path_factory.mktemp("bad")
    hostile_files(folder)
    store = folder / "store.db"
    assert (
        main(
            [
                "run",
                "-f",
                "fake",
                "-m",
                "resnet50",
                "--steps",
                "1",
                "--warmup",
                "0",
                "--repeats",
                "1",
                "--store",
                str(store),
            ]
        )
        == 0
    )
    con = sqlite3.connect(store)
    run_id = con.execute("SELECT id FROM runs").fetchone()[0]
    con.close()
    return folder, store, run_id


def test_the_table_is_broad() -> None:
    commands = {
        line.split()[0] if not line.startswith(("store", "data", "reference")) else " ".join(line.split()[:2])
        for line, _ in BAD_INPUTS
    }
    assert len(BAD_INPUTS) >= 80
    assert {
        "run",
        "sweep",
        "results",
        "report",
        "compare",
        "history",
        "store push",
        "store pull",
        "setup",
        "data imagenet",
        "data text",
        "reference show",
        "env",
        "list",
    } <= commands


@pytest.mark.parametrize("line, message", BAD_INPUTS, ids=[line for line, _ in BAD_INPUTS])
def test_bad_input_is_one_line_exit_2_and_changes_nothing(
    cli: Callable[..., CliResult],
    scene: tuple[Path, Path, str],
    line: str,
    message: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    folder, store, run_id = scene
    monkeypatch.chdir(folder)
    monkeypatch.setenv("DLBENCH_HOME", str(folder / "home"))
    before, files = _rows_digest(store), _files(folder)
    code, _, err = cli(*shlex.split(line.format(store=store, dir=folder, run=run_id)))
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    assert message in err
    assert _rows_digest(store) == before
    assert _files(folder) == files
