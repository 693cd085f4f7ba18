"""Multi-rank launch without a framework: the rank contract, argv building, merging ranks, bounded group waits,
and which 1-device point a speedup divides by."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from dlbench.launch.hosts import HostsConfig, default_launcher, forwarded
from dlbench.launch.mpirun import mpirun_argv
from dlbench.launch.ranks import (
    collect,
    configure_rank,
    group_failure,
    merge,
    rank_result_path,
    run_group,
)
from dlbench.launch.slurm import BATCH_SCRIPT, sbatch_argv
from dlbench.launch.torchrun import failed_rank, torchrun_argv
from dlbench.launch.worker_process import ChildOutcome
from dlbench.protocol.stats import summarize
from dlbench.results.scaling import (
    baseline_spec,
    find_baseline,
    missing_baselines,
    scaled,
)
from dlbench.results.schema import Environment, PointResult, RankRaw, RepeatRaw
from dlbench.results.store import StoredPoint
from dlbench.spec import PointSpec, Protocol, SpecError

PROTO = Protocol(warmup=0, steps=2, repeats=1, statistic="median")


def spec(**kw: object) -> PointSpec:
    base: dict[str, object] = {"framework": "torch", "model": "resnet50", "batch_size": 2, "protocol": PROTO}
    base.update(kw)
    return PointSpec(**base)  # type: ignore[arg-type]


def rank_payload(rank: int, checksum: float | None = 1.5, wall: float = 1.0) -> dict[str, object]:
    raw: dict[str, object] = {"rank": rank, "repeats": [{"step_times": [wall / 2, wall / 2], "wall_s": wall}],
                              "peak_memory_bytes": 1, "memory_kind": "rss", "final_loss": 1.0, "input_wait_s": 0.0}
    if checksum is not None:
        raw["param_checksum"] = checksum
    return {"status": "ok", "ranks": [raw], "env": {"node_hostname": f"h{rank}"}, "extra": {}}


# -- the rank contract ----------------------------------------------------------------------------------

def test_configure_rank_translates_slurm_and_splits_cores() -> None:
    env = {"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1"}
    assert configure_rank(spec(nodes=2, devices_per_node=2), env) == 3
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"]) == ("3", "4", "1")
    assert int(env["OMP_NUM_THREADS"]) >= 1


def test_configure_rank_translates_open_mpi_and_keeps_torchrun_s_own() -> None:
    env = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "1"}
    assert configure_rank(spec(devices_per_node=2, threads=3), env) == 1
    assert env["OMP_NUM_THREADS"] == "3"
    torchrun = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "SLURM_PROCID": "5"}
    assert configure_rank(spec(devices_per_node=2), torchrun) == 0


def test_single_process_environment_is_left_alone() -> None:
    env: dict[str, str] = {"OMP_NUM_THREADS": "7"}
    assert configure_rank(spec(), env) == 0
    assert env == {"OMP_NUM_THREADS": "7"}


def test_each_rank_has_its_own_result_file() -> None:
    assert rank_result_path(Path("/j/result.json"), 1) == Path("/j/result.rank1.json")


# -- merging ranks ----------------------------------------------------------------------------------------

def test_merge_keeps_every_rank_and_the_hosts() -> None:
    out = merge(spec(devices_per_node=2), {0: rank_payload(0), 1: rank_payload(1, wall=2.0)})
    assert out.status == "ok"
    ranks = tuple(RankRaw.from_dict(r) for r in out.payload["ranks"])  # type: ignore[union-attr]
    assert [r.rank for r in ranks] == [0, 1]
    assert out.payload["env"]["rank_hosts"] == "h0,h1"  # type: ignore[index]
    m = summarize(spec(devices_per_node=2), ranks)
    assert m.global_batch == 4 and m.throughput == pytest.approx(4 * 2 / 2.0)  # slowest rank's wall time


def test_merge_fails_the_point_when_parameters_differ() -> None:
    out = merge(spec(devices_per_node=2), {0: rank_payload(0, 1.5), 1: rank_payload(1, 1.75)})
    assert out.status == "failed_check" and "parameters differ across ranks" in str(out.error)
    assert len(out.payload["ranks"]) == 2  # type: ignore[arg-type]  # the raw samples are still kept


def test_merge_fails_a_backend_that_reports_no_checksum() -> None:
    out = merge(spec(framework="fake", devices_per_node=2), {0: rank_payload(0, None), 1: rank_payload(1, None)})
    assert out.status == "failed_check" and "no parameter checksum" in str(out.error)


def test_merge_names_missing_and_failed_ranks() -> None:
    bad = {"status": "error", "error": "RuntimeError: Connection closed by peer\nmore", "env": {}}
    out = merge(spec(nodes=1, devices_per_node=3), {0: bad, 2: rank_payload(2)})
    assert out.status == "error"
    assert out.error == "rank(s) 1 of 3 wrote no result; rank 0: RuntimeError: Connection closed by peer"


def test_collect_gives_the_engine_s_reason_when_no_rank_wrote(tmp_path: Path) -> None:
    failure = ChildOutcome("crashed", error="rank 1 died from SIGKILL")
    out = collect(spec(devices_per_node=2), tmp_path / "result.json", failure)
    assert (out.status, out.error) == ("crashed", "rank 1 died from SIGKILL; no rank wrote a result")


def test_collect_reads_rank_files_and_a_timeout_wins(tmp_path: Path) -> None:
    s = spec(devices_per_node=2)
    for r in (0, 1):
        rank_result_path(tmp_path / "result.json", r).write_text(json.dumps(rank_payload(r)))
    assert collect(s, tmp_path / "result.json", None, env={"launcher_fact": "x"}).status == "ok"
    timeout = ChildOutcome("timeout", error="exceeded the 5 s timeout")
    assert collect(s, tmp_path / "result.json", timeout).status == "timeout"


# -- running a group of commands -------------------------------------------------------------------------

def test_group_stops_the_survivors_after_a_command_fails() -> None:
    cmds = [[sys.executable, "-c", "import time; time.sleep(60)"],
            [sys.executable, "-c", "import sys; print('boom: cannot reach'); sys.exit(3)"]]
    group = run_group(cmds, spec(timeout_s=120), {}, grace_s=0.5)
    assert group.codes[1] == 3 and group.codes[0] is None and group.wall_s < 30
    failure = group_failure(spec(), group, ["a", "b"])
    assert failure is not None and failure.error == "b exited with code 3: boom: cannot reach"


def test_group_times_out_and_reports_progress() -> None:
    events: list[dict[str, object]] = []
    code = "import time; print('@@dlbench {\"phase\": \"warmup\"}', flush=True); time.sleep(60)"
    group = run_group([[sys.executable, "-c", code]], spec(timeout_s=2), {}, on_progress=events.append)
    assert group.killed == "timeout" and events == [{"phase": "warmup"}]
    failure = group_failure(spec(timeout_s=2), group, ["x"])
    assert failure is not None and failure.status == "timeout"


# -- engines' argv --------------------------------------------------------------------------------------

def test_reach_command_passes_argv_and_quotes_only_for_ssh() -> None:
    argv = ["/usr/bin/python3", "-m", "dlbench.worker", "/j/spec one.json", "/j/r.json"]
    env = {"RANK": "1", "GLOO_SOCKET_IFNAME": "dl0", "HOME": "/root"}
    ns = HostsConfig.from_options("h1,h2", "nsenter --net=/run/netns/{host}")
    assert ns.command(1, argv, env) == ["nsenter", "--net=/run/netns/h2", "env", "GLOO_SOCKET_IFNAME=dl0",
                                        "RANK=1", *argv]
    ssh = HostsConfig.from_options("h1,h2")
    cmd = ssh.command(0, argv, env)
    assert cmd[:-1] == ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "h1"]
    assert shlex.split(cmd[-1]) == ["env", "GLOO_SOCKET_IFNAME=dl0", "RANK=1", *argv]  # what the remote runs
    assert HostsConfig().command(0, argv, env) == argv
    assert forwarded(env) == {"RANK": "1", "GLOO_SOCKET_IFNAME": "dl0"}


@pytest.mark.parametrize("kw", [{"hosts": "h1,-oProxyCommand=x"}, {"hosts": "h1", "reach": "ssh"},
                                {"reach": "'unclosed"}])
def test_bad_host_configuration_is_refused(kw: dict[str, str]) -> None:
    with pytest.raises(SpecError):
        HostsConfig.from_options(**kw)


def test_nodes_need_hosts_and_defaults_pick_the_engine() -> None:
    assert "2 nodes need 2 hosts" in str(HostsConfig().problem(spec(nodes=2)))
    assert HostsConfig.from_options("a,b").problem(spec(nodes=2)) is None
    assert default_launcher(spec(devices_per_node=2)) == "torchrun"
    assert default_launcher(spec(framework="jax", devices_per_node=2)) == "local"
    assert default_launcher(spec()) == "local"


def test_torchrun_argv_and_its_failure_summary() -> None:
    argv = torchrun_argv(spec(nodes=2, devices_per_node=4), "py", 1, "10.0.0.1", 29500, 30, "s.json", "r.json")
    assert argv[:3] == ["py", "-m", "torch.distributed.run"]
    assert {"--nnodes=2", "--node-rank=1", "--nproc-per-node=4", "--master-addr=10.0.0.1", "--master-port=29500",
            "--rdzv-conf=timeout=30", "--max-restarts=0"} <= set(argv)
    assert argv[-4:] == ["-m", "dlbench.worker", "s.json", "r.json"]
    tail = ["Failures:", "[1]:", "  rank      : 0 (local_rank: 0)", "  exitcode  : -15 (pid: 11)",
            "Root Cause (first observed failure):", "[0]:", "  time      : 2026", "  rank      : 1 (local_rank: 1)",
            "  exitcode  : -9 (pid: 12)"]
    assert failed_rank(tail) == (1, -9)
    assert failed_rank(tail[:4]) == (0, -15)


def test_sbatch_and_mpirun_argv() -> None:
    s = spec(nodes=2, devices_per_node=3, timeout_s=90)
    argv = sbatch_argv(s, Path("/j/job.sh"), Path("/j"), ["py", "-m", "dlbench.worker", "a", "b"], ["-p", "gpu"])
    assert {"--parsable", "--nodes=2", "--ntasks-per-node=3", "--time=2", "--output=/j/job.out"} <= set(argv)
    assert argv[-8:] == ["-p", "gpu", "/j/job.sh", "py", "-m", "dlbench.worker", "a", "b"]
    assert '"$@"' in BATCH_SCRIPT
    m = mpirun_argv(spec(devices_per_node=2), "py", {"MASTER_ADDR": "x", "HOME": "/"}, None, "a", "b")
    assert m[:3] == ["mpirun", "-np", "2"] and ["-x", "MASTER_ADDR"] == m[m.index("-x"):m.index("-x") + 2]
    assert "HOME" not in m and m[-5:] == ["py", "-m", "dlbench.worker", "a", "b"]


# -- the 1-device point a speedup divides by ----------------------------------------------------------------

def stored(pid: int, s: PointSpec, throughput_wall: float, version: str = "2.13") -> StoredPoint:
    ranks = tuple(RankRaw(r, (RepeatRaw((throughput_wall / 2,) * 2, throughput_wall),), param_checksum=1.0)
                  for r in range(s.world_size))
    env = Environment({"framework": s.framework, "framework_version": version, "device": "cpu",
                       "device_model": "EPYC", "cpu_model": "EPYC"}, {})
    return StoredPoint(pid, f"run{pid}", PointResult(spec=s, status="ok", ranks=ranks, metrics=summarize(s, ranks),
                                                     env=env))


def test_speedup_uses_the_newest_matching_1_device_point() -> None:
    one, old, other = stored(1, spec(), 1.0), stored(2, spec(), 2.0, version="2.0"), stored(3, spec(batch_size=4), 1.0)
    newer = stored(4, spec(), 2.0)
    two = stored(5, spec(devices_per_node=2, launcher="torchrun", strategy="ddp"), 2.5)
    points = [one, old, other, newer, two]
    assert find_baseline(points, two.result) is newer
    sc = scaled(points, two.result)
    assert sc is not None and sc.baseline is newer
    assert sc.scaling.speedup == pytest.approx((2 * 2 * 2 / 2.5) / (2 * 2 / 2.0))
    assert sc.scaling.efficiency == pytest.approx(sc.scaling.speedup / 2)
    assert scaled(points, one.result) is None


def test_missing_baselines_are_measured_once_and_slurm_keeps_its_own() -> None:
    host = {"device": "cpu", "device_model": "EPYC", "cpu_model": "EPYC"}
    multi = [spec(devices_per_node=2, strategy=s) for s in ("ddp", "ps")]
    assert missing_baselines([], multi, host) == [baseline_spec(multi[0])]
    assert missing_baselines([stored(1, spec(), 1.0)], multi, host) == []
    on_slurm = spec(nodes=2, launcher="slurm")
    [base] = missing_baselines([stored(1, spec(), 1.0)], [on_slurm], host)
    assert (base.launcher, base.world_size, base.strategy) == ("slurm", 1, "none")


def test_a_command_that_cannot_start_is_a_failure_not_an_exception() -> None:
    cmds = [[sys.executable, "-c", "import time; time.sleep(60)"], ["/nonexistent/reach", "h2", "true"]]
    group = run_group(cmds, spec(timeout_s=60), {})
    failure = group_failure(spec(), group, ["node 0", "node 1 (h2)"])
    assert failure is not None
    assert failure.error == "node 1 (h2) exited with code 127: cannot start /nonexistent/reach: No such file or directory"
