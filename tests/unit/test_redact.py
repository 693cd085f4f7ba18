"""Secrets (#25): one redaction function for every URL and libpq string dlbench prints, records or forwards; the
store and its credentials never reach a worker, a shared job folder or a remote command line."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from dlbench.launch.folder import point_folder
from dlbench.launch.hosts import HostsConfig, env_file, forwarded, rank_env
from dlbench.launch.mpirun import mpirun_argv
from dlbench.launch.process import worker_env
from dlbench.redact import redact
from dlbench.spec import PointSpec, preset
from dlbench.store.store import Store

CliResult = tuple[int, str, str]
SECRET_URL = "postgresql://bench:ret@99@db.example.org/dlbench"


@pytest.mark.parametrize(
    "text, shown",
    [
        (SECRET_URL, "postgresql://bench:***@db.example.org/dlbench"),
        ("push --to postgresql://u:p4ss@h:5432/d ok", "push --to postgresql://u:***@h:5432/d ok"),
        ("postgresql://bench@db/x", "postgresql://bench@db/x"),
        ("host=db password=s3cret dbname=x", "host=db password=*** dbname=x"),
        ("host=db password='a b@c' dbname=x", "host=db password=*** dbname=x"),
        ("postgresql://u@h/d?sslmode=require&password=s3cret", "postgresql://u@h/d?sslmode=require&password=***"),
        ("PGPASSWORD=s3cret dlbench run", "PGPASSWORD=*** dlbench run"),
    ],
)
def test_redact_hides_the_whole_password(text: str, shown: str) -> None:
    assert redact(text) == shown


def test_a_password_with_an_at_sign_is_never_printed_or_recorded(tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    code, _, err = cli("results", "--store", "postgresql://bench:ret@99@127.0.0.1:1/dlbench")
    assert code == 2 and err.count("\n") == 1
    assert "ret" not in err and "99" not in err and "bench:***@127.0.0.1" in err
    store = Store(tmp_path / "s.db")
    run = store.create_run(f"dlbench store push --to {SECRET_URL}")
    row = sqlite3.connect(tmp_path / "s.db").execute("SELECT command FROM runs WHERE id=?", (run,)).fetchone()
    assert row[0] == "dlbench store push --to postgresql://bench:***@db.example.org/dlbench"


def test_a_libpq_keyword_string_is_refused_without_showing_its_password(
    tmp_path: Path, cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for command in ("results", "run -f fake"):
        code, _, err = cli(*command.split(), "--store", "host=db.example.org password=s3cret dbname=dlbench")
        assert code == 2 and err.count("\n") == 1 and "libpq" in err and "s3cret" not in err
    assert list(tmp_path.iterdir()) == []  # no SQLite file named after the string


def _spec(**kw: object) -> PointSpec:
    return PointSpec(framework="fake", model="resnet50", batch_size=1, protocol=preset("quick"), **kw)  # type: ignore[arg-type]


def test_workers_and_remote_ranks_never_receive_the_store(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLBENCH_STORE", SECRET_URL)
    monkeypatch.setenv("PGPASSWORD", "s3cret")
    monkeypatch.setenv("DLBENCH_HOSTS", "h1,h2")
    spec = _spec(nodes=2)
    assert "DLBENCH_STORE" not in worker_env(spec) and "PGPASSWORD" not in worker_env(spec)
    config = HostsConfig.from_options("h1,h2")
    env = rank_env(spec, config, 29500)
    assert "DLBENCH_HOSTS" in forwarded(env)  # dlbench's own variables still travel
    assert not {"DLBENCH_STORE", "PGPASSWORD"} & set(forwarded({**env, "DLBENCH_STORE": SECRET_URL}))
    with point_folder(spec, shared=False) as folder:  # the env file a remote rank reads in the job folder
        text = env_file(folder, "rank1", {**env, "DLBENCH_STORE": SECRET_URL}).read_text()
        assert "ret@99" not in text and "DLBENCH_STORE" not in json.loads(text)
        argv = mpirun_argv(spec, "python", {**env, "DLBENCH_STORE": SECRET_URL}, None, "s.json", "r.json")
        assert "DLBENCH_STORE" not in argv
