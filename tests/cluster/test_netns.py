"""Two emulated hosts (network namespaces) through the real torchrun: a 2-node point, an unreachable host and a
rendezvous timeout. Each failure is a recorded point with a one-line reason, and nothing hangs."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.scaling import HOST_ADDRS, HOSTS, NETNS_REACH, TINY, assert_ranks_in_sync, emulate, stored

pytest.importorskip("torch", reason="torch is not installed in this environment: pip install -e '.[torch]'")
pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.framework("torch")]

CliResult = tuple[int, str, str]


@pytest.fixture(scope="module")
def netns_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One store for the module: the 1-device baseline is measured once, by whichever test runs first."""
    return tmp_path_factory.mktemp("netns") / "results.db"


@pytest.fixture(autouse=True)
def two_hosts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The namespaces exist; gloo is told their interface (it would advertise 127.0.0.1 otherwise)."""
    emulate("netns")
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "dl0")
    monkeypatch.setenv("DLBENCH_JOB_DIR", str(tmp_path / "jobs"))


def test_two_node_torchrun_across_namespaces(cli: Callable[..., CliResult], netns_store: Path) -> None:
    code, out, err = cli(
        "run",
        *TINY,
        "--scale",
        "2n1c",
        "--launcher",
        "torchrun",
        "--hosts",
        ",".join(HOSTS),
        "--reach",
        NETNS_REACH,
        "--master-addr",
        HOST_ADDRS[0],
        "--store",
        str(netns_store),
    )
    assert code == 0, err
    points = stored(netns_store)
    assert any(p.spec.world_size == 1 and p.status == "ok" for p in points)
    r = points[-1]
    assert_ranks_in_sync(r, 2)
    assert r.env.descriptive["hosts"] == ",".join(HOSTS) and r.env.descriptive["launcher"] == "torchrun"
    assert "speedup" in out and "against 1-device point #" in out


def test_an_unreachable_host_is_a_recorded_failure(cli: Callable[..., CliResult], netns_store: Path) -> None:
    started = time.monotonic()
    code, _, _ = cli(
        "run",
        *TINY,
        "--scale",
        "2n1c",
        "--launcher",
        "torchrun",
        "--hosts",
        f"{HOSTS[0]},dlbench-nohost",
        "--reach",
        NETNS_REACH,
        "--master-addr",
        HOST_ADDRS[0],
        "--rendezvous-timeout",
        "60",
        "--store",
        str(netns_store),
    )
    assert code == 1
    r = stored(netns_store)[-1]
    assert r.status == "error" and r.spec.world_size == 2
    assert "node 1 (dlbench-nohost)" in str(r.error) and "/run/netns/dlbench-nohost" in str(r.error)
    assert "\n" not in str(r.error)
    assert time.monotonic() - started < 240


def test_a_rendezvous_timeout_is_a_recorded_failure(
    cli: Callable[..., CliResult], netns_store: Path, tmp_path: Path
) -> None:
    # Node 1's host never answers (as an ssh to a dead machine would hang); node 0 waits at the rendezvous.
    reach = tmp_path / "reach.sh"
    reach.write_text(
        '#!/bin/sh\nhost=$1; shift\n[ "$host" = blackhole ] && exec sleep 600\n'
        'exec nsenter --net=/run/netns/"$host" "$@"\n'
    )
    reach.chmod(0o755)
    started = time.monotonic()
    code, _, _ = cli(
        "run",
        *TINY,
        "--scale",
        "2n1c",
        "--launcher",
        "torchrun",
        "--hosts",
        f"{HOSTS[0]},blackhole",
        "--reach",
        f"{reach} {{host}}",
        "--master-addr",
        HOST_ADDRS[0],
        "--rendezvous-timeout",
        "10",
        "--store",
        str(netns_store),
    )
    assert code == 1
    r = stored(netns_store)[-1]
    assert r.status == "error" and "Timed out" in str(r.error) and "1/2 clients joined" in str(r.error)
    assert "\n" not in str(r.error)
    assert time.monotonic() - started < 240
