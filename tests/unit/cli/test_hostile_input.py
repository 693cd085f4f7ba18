"""The hostile-input defects of #31, each tried as a hostile user would: one line, exit 2 (or the documented code),
nothing hanging, nothing written where it should not be."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import dlbench
from dlbench.cli import main
from dlbench.store.store import Store

CliResult = tuple[int, str, str]
FAKE = ("-f", "fake", "--steps", "1", "--warmup", "0", "--repeats", "1")


def _one_line(code: int, out: str, err: str, expected: int = 2) -> str:
    assert code == expected, (code, out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.fixture(scope="module")
def _two_runs_made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """The two runs, made once per module (3 s of fake runs that 30 tests would each repeat)."""
    store = tmp_path_factory.mktemp("two_runs") / "results.db"
    for model in ("resnet50", "bert_base"):
        assert main(["run", *FAKE, "-m", model, "--store", str(store)]) == 0
    with contextlib.closing(sqlite3.connect(store)) as db:
        ids = sorted(str(r[0]) for r in db.execute("SELECT id FROM runs"))
    return store, ids[0], ids[1]


@pytest.fixture()
def two_runs(_two_runs_made: tuple[Path, str, str], tmp_path: Path) -> tuple[Path, str, str]:
    """A store of its own holding two finished fake runs with no configuration in common: (store, run A, run B)."""
    made, a, b = _two_runs_made
    folder = tmp_path / "two_runs"
    shutil.copytree(made.parent, folder)  # the store with whatever beside it, as the runs left it
    return folder / made.name, a, b


# -- output files ---------------------------------------------------------------------------------------------
def test_report_to_a_folder_name_is_refused(cli: Callable[..., CliResult], two_runs: tuple[Path, str, str]) -> None:
    store, _, _ = two_runs
    target = store.parent / "out"
    err = _one_line(*cli("report", "--all", "--store", str(store), "-o", f"{target}/"))
    assert "names a folder" in err and not target.exists()


def test_a_report_never_replaces_a_file_the_user_could_not_write(
    cli: Callable[..., CliResult], two_runs: tuple[Path, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, _, _ = two_runs
    theirs = store.parent / "theirs.html"
    theirs.write_text("someone else's")
    real_access = os.access
    monkeypatch.setattr(
        os, "access", lambda p, mode, **kw: not (Path(p) == theirs and mode & os.W_OK) and real_access(p, mode, **kw)
    )
    err = _one_line(*cli("report", "--all", "--store", str(store), "-o", str(theirs)))
    assert "not writable by you" in err and theirs.read_text() == "someone else's"


@pytest.mark.parametrize("code, expected", [(errno.ENOSPC, 4), (errno.EACCES, 2), (errno.EROFS, 2)])
def test_a_report_write_failure_is_one_line(
    cli: Callable[..., CliResult],
    two_runs: tuple[Path, str, str],
    monkeypatch: pytest.MonkeyPatch,
    code: int,
    expected: int,
) -> None:
    """A full disk exits 4 as `run` does; a folder it cannot replace a file in, a read-only one: exit 2."""
    store, _, _ = two_runs
    out = store.parent / "r.html"

    def fail(src: object, dst: object) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr("dlbench.report.files.os.replace", fail)  # the OS boundary of the atomic write
    err = _one_line(*cli("report", "--all", "--store", str(store), "-o", str(out)), expected=expected)
    assert os.strerror(code) in err and not out.exists()
    assert [p.name for p in store.parent.iterdir() if p.name.endswith(".tmp")] == []  # its temporary file is gone


# -- stores ---------------------------------------------------------------------------------------------------
def test_a_store_folder_is_refused_as_before(cli: Callable[..., CliResult], two_runs: tuple[Path, str, str]) -> None:
    store, run_a, _ = two_runs
    folder = store.parent / "folder"
    folder.mkdir()
    for args in (
        ("results", "--store", str(folder)),
        ("run", *FAKE, "--store", str(folder)),
        ("store", "push", run_a, "--store", str(store), "--to", str(folder)),
        ("results", "--store", f"{store.parent}/nothere/"),
    ):
        err = _one_line(*cli(*args))
        assert "folder" in err, err
    assert list(folder.iterdir()) == []


def test_a_fifo_is_refused_where_a_store_or_recovery_file_should_be(tmp_path: Path) -> None:
    """Opened without blocking: a FIFO never hangs `results --recover` or a run into that store."""
    store = tmp_path / "results.db"
    Store(store).create_run("dlbench run")
    os.mkfifo(f"{store}.recovery.jsonl")
    fifo_store = tmp_path / "fifo.db"
    os.mkfifo(fifo_store)
    env = {**os.environ, "PYTHONPATH": str(Path(dlbench.__file__).parents[1])}  # the dlbench under test
    for args in (["results", "--recover", "--store", str(store)], ["results", "--store", str(fifo_store)]):
        proc = subprocess.run(
            [sys.executable, "-m", "dlbench", *args], capture_output=True, text=True, timeout=120, env=env, check=False
        )
        assert proc.returncode == 2 and "not a regular file" in proc.stderr, proc.stderr


def test_a_reader_waits_for_a_store_being_created(tmp_path: Path) -> None:
    """While another process holds a temporary store beside the target (store_file.py), a reader waits for it
    instead of saying there is no store."""
    store = tmp_path / "results.db"
    creating = tmp_path / f".{store.name}.abc.creating"
    fd = os.open(creating, os.O_CREAT | os.O_RDWR, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    seen: list[object] = []

    def read() -> None:
        try:
            seen.append(len(Store(store, readonly=True).runs()))
        except Exception as exc:
            seen.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    time.sleep(0.5)
    Store(store).create_run("dlbench run")  # the store appears whole ...
    os.close(fd)  # ... and the creator lets go
    creating.unlink()
    reader.join(60)
    assert seen == [1], seen


def test_errors_print_nothing_before_their_line(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    suite = tmp_path / "s.yaml"
    suite.write_text("name: s\ndevice: cpu\naxes: {framework: fake, model: resnet50}\n")
    for args in (("run", *FAKE, "-m", "resnet50"), ("sweep", str(suite))):
        code, out, err = cli(*args, "--store", "/proc/dlbench.db")
        _one_line(code, out, err)
        assert out == "" and err.startswith("dlbench: error:"), err


# -- run ids, compare -----------------------------------------------------------------------------------------
def test_a_run_id_matches_by_any_unique_part(cli: Callable[..., CliResult], two_runs: tuple[Path, str, str]) -> None:
    store, run_a, run_b = two_runs
    code, out, err = cli("results", run_a.rsplit("-", 1)[1], "--store", str(store))  # the hash people copy
    assert code == 0 and run_a in out, err
    err = _one_line(*cli("results", run_a[:4], "--store", str(store)))
    assert "ambiguous" in err and run_a in err and run_b in err


def test_compare_of_runs_sharing_nothing_exits_5(
    cli: Callable[..., CliResult], two_runs: tuple[Path, str, str]
) -> None:
    store, run_a, run_b = two_runs
    code, _, err = cli("compare", run_a, run_b, "--fail-above", "5%", "--store", str(store))
    assert code == 5 and "nothing compared" in err


# -- values -----------------------------------------------------------------------------------------------------
BAD_VALUES: list[tuple[str, str]] = [
    ("run -f fake -m resnet50 --input-size 99999999", "larger than resnet50's own input"),
    ("history --since 99999999999999d", "100 years"),
    ("run -f fake -m resnet50 --wait-quiet 1e30", "wait-quiet"),
    ("run -f fake -m resnet50 --price-per-hour 1e308", "price-per-hour"),
    ("run -f fake -m resnet50 --scale 1n2c --nodes 2", "not both"),
    ("run -f fake -m resnet50 --scale \u0661n\u0662c", "scale must look like"),
    ("run -f fake -m resnet50 --batch-size \u0662", "batch size"),
    ("history --since \u0663\u0660d", "--since"),
    ("run -f fake -m resnet50 --memory-limit \u0668GiB", "memory size"),
    ("run -f fake -m resnet50 --columns " + ",".join(["model"] * 5000), "more than once"),
    ("run -f fake -m resnet50 --columns model --wide", "not both"),
]


@pytest.mark.parametrize("line, message", BAD_VALUES, ids=[line[:60] for line, _ in BAD_VALUES])
def test_an_absurd_value_is_refused(
    cli: Callable[..., CliResult], two_runs: tuple[Path, str, str], line: str, message: str
) -> None:
    store, _, _ = two_runs
    before = _files(store.parent)
    start = time.monotonic()
    err = _one_line(*cli(*line.split(" "), "--store", str(store)))
    assert message in err and time.monotonic() - start < 5
    assert _files(store.parent) == before


def _files(folder: Path) -> list[str]:
    """The folder's files, without SQLite's -wal and -shm (a reader's close may checkpoint them away)."""
    return sorted(p.name for p in folder.iterdir() if not p.name.endswith(("-wal", "-shm")))


SUITES: list[tuple[str, str]] = [
    ("name: !!binary aGVsbG8=\naxes: {framework: fake, model: resnet50}\n", "valid string"),
    ('name: "x\\e[31mred"\naxes: {framework: fake, model: resnet50}\n', "pattern"),
    ("name: " + "x" * 200_000 + "\naxes: {framework: fake, model: resnet50}\n", "at most 200 characters"),
    ("name: s\naxes: {framework: fake, model: resnet50}\n", "--only model='resnet' matches none"),
]


@pytest.mark.parametrize("text, message", SUITES, ids=["binary", "escape", "long", "only"])
def test_a_hostile_suite_is_refused_at_once(
    cli: Callable[..., CliResult], tmp_path: Path, text: str, message: str
) -> None:
    suite = tmp_path / "s.yaml"
    suite.write_text(text)
    start = time.monotonic()
    err = _one_line(*cli("sweep", str(suite), "--dry-run", "--only", "model=resnet", "--store", str(tmp_path / "r.db")))
    assert message in err and "\x1b" not in err and time.monotonic() - start < 5, err


def test_json_is_strict() -> None:
    from dlbench.jsonout import strict_dumps

    text = strict_dumps({"cost": float("inf"), "rows": [float("nan"), 1.5, {"x": float("-inf")}]})

    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in JSON")

    assert json.loads(text, parse_constant=refuse) == {"cost": None, "rows": [None, 1.5, {"x": None}]}


def test_results_json_parses_strictly(cli: Callable[..., CliResult], two_runs: tuple[Path, str, str]) -> None:
    store, run_a, _ = two_runs
    code, out, err = cli("results", run_a, "--format", "json", "--store", str(store))
    assert code == 0, err
    json.loads(out, parse_constant=lambda name: (_ for _ in ()).throw(AssertionError(name)))


# -- processes --------------------------------------------------------------------------------------------------
def test_sigterm_to_setup_ends_its_pip_child(tmp_path: Path) -> None:
    """`dlbench setup` runs pip through _run_logged; SIGTERM (cli.main turns it into KeyboardInterrupt) must end the
    child too, not leave it installing into an environment nobody will finish."""
    pid_file = tmp_path / "child.pid"
    script = textwrap.dedent(f"""
        import signal, sys
        from pathlib import Path
        from rich.console import Console
        from dlbench.cli import _interrupt
        from dlbench.cli.feedback import ConsoleFeedback
        from dlbench.envs.provision import _run_logged
        signal.signal(signal.SIGTERM, _interrupt)
        child = [sys.executable, "-c", "import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); "
                 "print('installing', flush=True); time.sleep(120)"]
        try:
            _run_logged(child, Path({str(tmp_path / "log")!r}), "pip", ConsoleFeedback(Console(stderr=True)))
        except KeyboardInterrupt:
            sys.exit(130)
    """)
    env = {**os.environ, "PYTHONPATH": str(Path(dlbench.__file__).parents[1])}  # the dlbench under test
    proc = subprocess.Popen([sys.executable, "-c", script], env=env)
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    child = int(pid_file.read_text())
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 130
    status = Path(f"/proc/{child}/status")
    gone = not status.exists() or "\tZ" in status.read_text().split("State:")[1].splitlines()[0]
    assert gone, "the child outlived dlbench setup"


def test_an_interrupted_install_unmarks_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from rich.console import Console

    from dlbench.backends import get_info
    from dlbench.cli.feedback import ConsoleFeedback
    from dlbench.envs import provision as setup_cli
    from dlbench.envs import venvs

    monkeypatch.setenv("DLBENCH_HOME", str(tmp_path))
    folder = venvs.env_dir("fake")
    python = venvs.venv_python(folder)
    python.parent.mkdir(parents=True)
    python.symlink_to(sys.executable)
    venvs.record(
        venvs.EnvRecord(
            framework="fake",
            python=str(python),
            version="1",
            created="then",
            source="x",
            cases={},
            python_version="3",
            build="cpu",
        )
    )

    def interrupted(*args: object, **kwargs: object) -> int:
        raise KeyboardInterrupt("SIGTERM")

    monkeypatch.setattr(setup_cli, "_run_logged", interrupted)
    interpreter = setup_cli.probe(str(python))
    assert interpreter is not None
    plan = setup_cli.Plan(info=get_info("fake"), python=interpreter, build="cpu")
    with pytest.raises(KeyboardInterrupt):
        setup_cli.setup_one(plan, recreate=False, check_cases=False, feedback=ConsoleFeedback(Console(stderr=True)))
    assert venvs.get("fake") is None


def test_a_data_folder_left_by_a_killed_writer_is_removed_by_the_next(tmp_path: Path) -> None:
    """kill -9 skips every cleanup: the staging folder it leaves is removed by the next `dlbench data`, while a
    live writer's is left alone."""
    from dlbench.data.folders import STAGING, remove_stale_staging, staging

    out = tmp_path / "images"
    script = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from dlbench.data.folders import staging
        with staging(Path({str(out)!r}), force=False) as tmp:
            (tmp / "half.JPEG").write_bytes(b"x")
            print("writing", flush=True)
            time.sleep(120)
    """)
    env = {**os.environ, "PYTHONPATH": str(Path(dlbench.__file__).parents[1])}
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "writing"
    assert len(list(tmp_path.glob(f".images-*{STAGING}"))) == 1
    assert remove_stale_staging(out) == []  # alive: not touched
    proc.kill()
    proc.wait(30)
    with staging(out, force=False) as tmp:
        (tmp / "whole.JPEG").write_bytes(b"y")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["images"]
    assert sorted(p.name for p in out.iterdir()) == ["whole.JPEG"]


def test_control_characters_are_printed_escaped(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    from dlbench.printable import printable

    assert printable("a\x1b[31mb\x9b\x07\tc\u00e9") == "a\\x1b[31mb\\x9b\\x07\tc\u00e9"
    store = tmp_path / "results.db"
    Store(store).create_run("dlbench sweep \x1b]0;owned\x07 \x1b[2J")
    code, out, err = cli("results", "--store", str(store))
    assert code == 0 and "\x1b" not in out and "\\x1b[2J" in out, err
    err = _one_line(*cli("results", "--store", str(tmp_path / "a\x1b[31m.db")))
    assert "\x1b" not in err and "\\x1b[31m" in err
