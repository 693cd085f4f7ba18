"""Store fixtures: every store test runs on SQLite and on a real PostgreSQL server, no mock database. The
server is $DLBENCH_TEST_PG_URL (what .ci/run exports), else a private one started here with Debian's initdb
and pg_ctl (as user postgres when root).

Each test gets a database of its own on it, dropped afterwards. Where no server can be had, the tests that
need one skip and say why; under $DLBENCH_REQUIRE_PG=1 (set by .ci/run) they fail instead. A private server lives
no longer than the test process that started it: a watchdog (pg_watchdog.py) stops it when that process ends,
however it ends (a pytest stopped part-way, or killed, left its server running).
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa

from dlbench.protocol.stats import summarize
from dlbench.records import Environment, PointResult, RankRaw, RepeatRaw
from dlbench.spec import PointSpec, preset

ENV_URL = "DLBENCH_TEST_PG_URL"
WATCHDOG = Path(__file__).with_name("pg_watchdog.py")


@dataclass
class PgServer:
    """A reachable server, its admin URL (may carry a password), and how to stop it when it is ours."""

    admin_url: str
    data_dir: Path | None = None
    pg_ctl: Path | None = None
    as_postgres: bool = False
    lifeline: int | None = None  # the write end of the watchdog's pipe: open while this process lives

    def stop(self) -> None:
        """Stop a server started here and remove its files."""
        if self.data_dir is None or self.pg_ctl is None:
            return
        _run(self, [str(self.pg_ctl), "-D", str(self.data_dir), "-m", "immediate", "stop"], check=False)
        shutil.rmtree(self.data_dir.parent, ignore_errors=True)
        if self.lifeline is not None:  # the watchdog wakes, finds nothing left and ends
            os.close(self.lifeline)
            self.lifeline = None

    def watch(self) -> None:
        """Start the watchdog that stops this server when this process ends, however it ends: it holds the read
        end of a pipe whose write end only this process holds (not inherited: os.pipe's ends close on exec), in
        a session of its own, so that a signal to this process's group does not reach it first."""
        assert self.data_dir is not None and self.pg_ctl is not None
        read, write = os.pipe()
        try:
            subprocess.Popen(
                [
                    sys.executable,
                    str(WATCHDOG),
                    str(read),
                    str(self.pg_ctl),
                    str(self.data_dir),
                    str(int(self.as_postgres)),
                ],
                pass_fds=(read,),
                start_new_session=True,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        finally:
            os.close(read)
        self.lifeline = write


def _run(server: PgServer | None, argv: list[str], check: bool = True, as_postgres: bool = False) -> str:
    if as_postgres or (server is not None and server.as_postgres):
        argv = ["runuser", "-u", "postgres", "--", *argv]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[-3:])}: {(proc.stderr or proc.stdout).strip()[-300:]}")
    return proc.stdout


def _bin_dir() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]))
    return versions[-1].parent if versions else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_private() -> PgServer:
    """initdb and start a throw-away server on a free loopback port, password authentication only."""
    bindir = _bin_dir()
    if bindir is None:
        raise RuntimeError("no PostgreSQL server binaries (initdb): apt-get install postgresql")
    root = os.geteuid() == 0
    if root and shutil.which("runuser") is None:
        raise RuntimeError("root, but no runuser to start PostgreSQL as user postgres")
    base = Path(tempfile.mkdtemp(prefix="dlbench-pg-"))
    data, pwfile = base / "data", base / "pw"
    password = secrets.token_hex(8)
    pwfile.write_text(password + "\n")
    server = PgServer("", data, bindir / "pg_ctl", as_postgres=root)
    server.watch()  # before initdb: from here on, the files and the server end with this process
    if root:
        shutil.chown(base, "postgres")
        shutil.chown(pwfile, "postgres")
        base.chmod(0o700)
    try:
        _run(
            server,
            [
                str(bindir / "initdb"),
                "-D",
                str(data),
                "-U",
                "postgres",
                "--pwfile",
                str(pwfile),
                "--auth=scram-sha-256",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        )
        port = _free_port()
        opts = (
            f"-c listen_addresses=127.0.0.1 -p {port} -c unix_socket_directories={base} -c fsync=off "
            "-c full_page_writes=off -c max_connections=60"
        )
        _run(
            server,
            [str(server.pg_ctl), "-D", str(data), "-l", str(base / "log"), "-o", opts, "-w", "-t", "60", "start"],
        )
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        server.stop()
        raise RuntimeError(f"could not start a private PostgreSQL server: {exc}") from None
    server.admin_url = f"postgresql://postgres:{password}@127.0.0.1:{port}/postgres"
    return server


def server_or_reason() -> tuple[PgServer | None, str]:
    """The server to test against, or None and why there is none."""
    url = os.environ.get(ENV_URL)
    if url:
        try:
            engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
            with engine.connect():
                pass
            engine.dispose()
        except sa.exc.SQLAlchemyError as exc:
            return None, f"${ENV_URL} is set but unreachable: {str(exc.orig or exc).splitlines()[0]}"
        return PgServer(url), ""
    try:
        return start_private(), ""
    except RuntimeError as exc:
        return None, str(exc)


def admin_engine(server: PgServer) -> sa.Engine:
    """An autocommit engine on the server's admin database (CREATE / DROP DATABASE)."""
    url = server.admin_url.replace("postgresql://", "postgresql+psycopg://", 1)
    return sa.create_engine(url, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)


def database_url(server: PgServer, name: str) -> str:
    """The admin URL pointed at another database."""
    return str(sa.make_url(server.admin_url).set(database=name).render_as_string(hide_password=False))


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """The PostgreSQL server for this session (skips, naming why, where none can be had)."""
    server, reason = server_or_reason()
    if server is None:
        if os.environ.get("DLBENCH_REQUIRE_PG") == "1":
            pytest.fail(f"PostgreSQL required ($DLBENCH_REQUIRE_PG=1) but unavailable: {reason}")
        pytest.skip(f"no PostgreSQL server: {reason}")
    yield server
    server.stop()


@pytest.fixture
def pg_url(pg_server: PgServer) -> Iterator[str]:
    """A fresh, empty database on the server, as a store URL; dropped after the test."""
    name = f"dlbench_t_{secrets.token_hex(6)}"
    engine = admin_engine(pg_server)
    with engine.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    yield database_url(pg_server, name)
    with engine.connect() as conn:
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store location, once as a SQLite file and once as a database on a real PostgreSQL server."""
    if request.param == "sqlite":
        return str(tmp_path / "store" / "results.db")
    return str(request.getfixturevalue("pg_url"))


FIXTURES = Path(__file__).parents[1] / "fixtures"


def result(status: str = "ok", batch: int = 4) -> PointResult:
    """A quick-preset ResNet-50 point on torch: three repeats of five steps, or a failure with no samples."""
    spec = PointSpec(framework="torch", model="resnet50", batch_size=batch, protocol=preset("quick"))
    ranks = (RankRaw(0, tuple(RepeatRaw((0.1, 0.2, 0.1, 0.1, 0.1), 0.6) for _ in range(3)), 123, "rss", 2.5),)
    metrics = summarize(spec, ranks) if status == "ok" else None
    return PointResult(
        spec=spec,
        status=status,
        ranks=ranks if metrics else (),
        metrics=metrics,  # type: ignore[arg-type]
        env=Environment({"framework": "torch", "device_model": "cpu"}, {"hostname": "h"}),
        error=None if status == "ok" else "boom",
        started=1.0,
        finished=2.0,
    )


def load_v1_sqlite(path: Path) -> None:
    """A version-1 SQLite store (tests/fixtures/store_v1.sql) at `path`."""
    db = sqlite3.connect(path)
    db.executescript((FIXTURES / "store_v1.sql").read_text())
    db.close()
