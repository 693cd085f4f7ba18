"""Report output files (#25): only a new path or a regular file is written; a device, FIFO, socket, folder or link
is refused in one line; a chart folder is replaced only when dlbench made it; the file's mode follows the umask."""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.reports import fill_store, make_point

CliResult = tuple[int, str, str]


@pytest.fixture(scope="module")
def one_point_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("store") / "results.db"
    fill_store(path, [make_point("torch")])
    return path


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_devices_fifos_sockets_links_and_folders_are_refused(tmp_path: Path) -> None:
    from dlbench.report.files import OutputError, check_output

    fifo, sock, link = tmp_path / "fifo", tmp_path / "sock", tmp_path / "link.html"
    os.mkfifo(fifo)
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(sock))
    link.symlink_to(tmp_path / "elsewhere.html")
    try:
        for path, kind in (
            (Path("/dev/null"), "a character device"),
            (fifo, "a FIFO"),
            (sock, "a socket"),
            (link, "a symbolic link"),
            (tmp_path, "a folder"),
        ):
            with pytest.raises(OutputError, match=kind):
                check_output(path)
    finally:
        server.close()
    check_output(tmp_path / "new.html")  # a new path, and a regular file, are fine
    (tmp_path / "old.html").write_text("x")
    check_output(tmp_path / "old.html")


def test_report_into_a_fifo_is_refused_and_the_fifo_stays(
    one_point_store: Path, tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    fifo = tmp_path / "pipe.html"
    os.mkfifo(fifo)
    code, _, err = cli("report", "--all", "-o", str(fifo), "--store", str(one_point_store))
    assert code == 2 and "is a FIFO" in err and err.count("\n") == 1
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe.html"]


def test_the_report_file_mode_follows_the_umask(
    one_point_store: Path, tmp_path: Path, umask_022: None, cli: Callable[..., CliResult]
) -> None:
    out = tmp_path / "r.html"
    code, _, err = cli("report", "--all", "-o", str(out), "--store", str(one_point_store))
    assert code == 0, err
    assert stat.S_IMODE(out.stat().st_mode) == 0o644


def test_report_names_the_absolute_path_it_wrote(
    one_point_store: Path, tmp_path: Path, cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = cli("report", "--all", "--store", str(one_point_store))
    assert code == 0 and f"Wrote {tmp_path / 'dlbench-report.html'} (1 points" in out, (out, err)


def test_a_chart_folder_dlbench_did_not_make_is_never_deleted(
    one_point_store: Path, tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    out, folder = tmp_path / "notes.md", tmp_path / "notes_files"
    folder.mkdir()
    (folder / "mine.txt").write_text("the user's")
    code, _, err = cli("report", "--all", "--format", "md", "-o", str(out), "--store", str(one_point_store))
    assert code == 2 and "dlbench did not make it" in err and err.count("\n") == 1
    assert (folder / "mine.txt").read_text() == "the user's" and not out.exists()


def test_a_chart_folder_dlbench_made_is_replaced_unless_it_holds_other_files(
    one_point_store: Path, tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    out, folder = tmp_path / "r.md", tmp_path / "r_files"
    args = ("report", "--all", "--format", "md", "-o", str(out), "--store", str(one_point_store))
    code, _, err = cli(*args)
    assert code == 0, err
    charts = sorted(p.name for p in folder.glob("*.png"))
    assert charts
    code, _, err = cli(*args)  # its own folder: replaced
    assert code == 0, err
    assert sorted(p.name for p in folder.glob("*.png")) == charts
    (folder / "notes.txt").write_text("added by hand")
    code, _, err = cli(*args)
    assert code == 2 and "notes.txt" in err
    assert (folder / "notes.txt").read_text() == "added by hand"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
