"""Multi-rank launch without a framework: the rank contract, argv building, merging ranks, bounded group waits,
and which 1-device point a speedup divides by."""

from __future__ import annotations

import json
import shlex
import signal
import sys
from pathlib import Path

import pytest

from dlbench.analysis.scaling import baseline_spec, find_baseline, missing_baselines, scaled
from dlbench.launch.folder import point_folder
from dlbench.launch.hosts import HostsConfig, env_file, forwarded
from dlbench.launch.merge import collect, merge
from dlbench.launch.mpirun import mpirun_argv
from dlbench.launch.outcome import ChildOutcome, GroupOutcome, group_failure
from dlbench.launch.process import oom_kills, run_group
from dlbench.launch.registry import Launchers
from dlbench.launch.slurm import BATCH_SCRIPT, sbatch_argv
from dlbench.launch.torchrun import failed_rank, torchrun_argv
from dlbench.points import default_launcher
from dlbench.protocol.stats import summarize
from dlbench.records import Environment, PointResult, RankRaw, RepeatRaw
from dlbench.spec import PointSpec, Protocol, SpecError
from dlbench.store.store import StoredPoint
from dlbench.wire import RankContext, WorkerResult, configure_rank, rank_result_path

PROTO = Protocol(warmup=0, steps=2, repeats=1, statistic="median")


def spec(**kw: object) -> PointSpec:
    base: dict[str, object] = {"framework": "torch", "model": "resnet50", "batch_size": 2, "protocol": PROTO}
    base.update(kw)
    return PointSpec(**base)  # type: ignore[arg-type]


def rank_payload(rank: int, checksum: float | None = 1.5, wall: float = 1.0) -> WorkerResult:
    raw = RankRaw(
        rank,
        (RepeatRaw((), wall, window_s=(wall,), window_steps=(2,)),),
        peak_memory_bytes=1,
        final_loss=1.0,
        param_checksum=checksum,
    )
    return WorkerResult(status="ok", ranks=[raw], env={"node_hostname": f"h{rank}"})


# -- the rank contract ----------------------------------------------------------------------------------


def test_configure_rank_translates_slurm_and_splits_cores() -> None:
    env = {"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "DLBENCH_NODE_HOSTS": "a,b"}
    ctx = configure_rank(spec(nodes=2, devices_per_node=2), env)
    assert (ctx.rank, ctx.world_size, ctx.local_rank, ctx.node_rank, ctx.node_hosts) == (3, 4, 1, 1, ("a", "b"))
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"]) == ("3", "4", "1")
    assert int(env["OMP_NUM_THREADS"]) >= 1


def test_configure_rank_translates_open_mpi_and_keeps_torchrun_s_own() -> None:
    env = {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "1"}
    assert configure_rank(spec(devices_per_node=2, threads=3), env).rank == 1
    assert env["OMP_NUM_THREADS"] == "3"
    torchrun = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "SLURM_PROCID": "5"}
    assert configure_rank(spec(devices_per_node=2), torchrun).rank == 0


def test_single_process_environment_is_left_alone() -> None:
    env: dict[str, str] = {"OMP_NUM_THREADS": "7", "DLBENCH_RDZV_TIMEOUT": "42"}
    assert configure_rank(spec(), env) == RankContext(rdzv_timeout_s=42.0)
    assert env == {"OMP_NUM_THREADS": "7", "DLBENCH_RDZV_TIMEOUT": "42"}


@pytest.mark.parametrize(("local_rank", "visible", "ordinal"), [(0, 4, 0), (3, 4, 3), (3, 1, 0), (5, 4, 1), (2, 0, 0)])
def test_a_rank_s_gpu_is_its_local_rank_modulo_the_visible_gpus(local_rank: int, visible: int, ordinal: int) -> None:
    # 4 visible: rank i takes GPU i; 1 visible (Slurm --gpus-per-task=1, or CUDA_VISIBLE_DEVICES per rank): GPU 0
    assert RankContext(local_rank=local_rank, local_world_size=4).device_index(visible) == ordinal


def test_gpu_binding_is_honoured_and_sharing_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from dlbench.backends.base import gpu_binding_problem

    four = RankContext(local_rank=1, local_world_size=4)
    assert gpu_binding_problem(four, 4) is None and gpu_binding_problem(four, 8) is None
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("SLURM_STEP_GPUS", raising=False)
    assert "4 ranks on this node but it has 1 visible GPU" in str(gpu_binding_problem(four, 1))
    assert "2 visible GPU" in str(gpu_binding_problem(four, 2))
    monkeypatch.delenv("SLURM_LOCALID", raising=False)
    # #40: one GPU shown to every rank dlbench starts here (the controller's CUDA_VISIBLE_DEVICES): they would
    # share it, and NCCL fails with a duplicate-GPU error; refused in one line
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    problem = str(gpu_binding_problem(four, 1))
    assert "4 ranks on this node but it has 1 visible GPU(s) (CUDA_VISIBLE_DEVICES=2" in problem
    assert "\n" not in problem
    monkeypatch.setenv("SLURM_STEP_GPUS", "2")  # bound per task by Slurm: each rank its own GPU
    assert gpu_binding_problem(four, 1) is None


def test_each_rank_has_its_own_result_file() -> None:
    assert rank_result_path(Path("/j/result.json"), 1) == Path("/j/result.rank1.json")


# -- merging ranks ----------------------------------------------------------------------------------------


def test_merge_keeps_every_rank_and_the_hosts() -> None:
    out = merge(spec(devices_per_node=2), {0: rank_payload(0), 1: rank_payload(1, wall=2.0)}, {})
    assert out.status == "ok"
    assert out.result is not None
    ranks = tuple(out.result.ranks)
    assert [r.rank for r in ranks] == [0, 1]
    assert out.result.env["rank_hosts"] == "h0,h1"
    m = summarize(spec(devices_per_node=2), ranks)
    assert m.global_batch == 4 and m.throughput == pytest.approx(4 * 2 / 2.0)  # slowest rank's wall time


def test_merge_fails_the_point_when_parameters_differ() -> None:
    out = merge(spec(devices_per_node=2), {0: rank_payload(0, 1.5), 1: rank_payload(1, 1.75)}, {})
    assert out.status == "failed_check" and "parameters differ across ranks" in str(out.error)
    assert out.result is not None and len(out.result.ranks) == 2  # the raw samples are still kept


def test_merge_fails_a_backend_that_reports_no_checksum() -> None:
    out = merge(spec(framework="fake", devices_per_node=2), {0: rank_payload(0, None), 1: rank_payload(1, None)}, {})
    assert out.status == "failed_check" and "no parameter checksum" in str(out.error)


def test_merge_names_missing_and_failed_ranks() -> None:
    bad = WorkerResult(status="error", error="RuntimeError: Connection closed by peer\nmore")
    out = merge(spec(nodes=1, devices_per_node=3), {0: bad, 2: rank_payload(2)}, {})
    assert out.status == "error"
    assert out.error == "rank(s) 1 of 3 wrote no result; rank 0: RuntimeError: Connection closed by peer"


def test_collect_gives_the_engine_s_reason_when_no_rank_wrote(tmp_path: Path) -> None:
    failure = ChildOutcome("crashed", error="rank 1 died from SIGKILL")
    out = collect(spec(devices_per_node=2), tmp_path / "result.json", failure)
    assert (out.status, out.error) == ("crashed", "rank 1 died from SIGKILL; no result was written")


def test_collect_reads_rank_files_and_a_timeout_wins(tmp_path: Path) -> None:
    s = spec(devices_per_node=2)
    for r in (0, 1):
        rank_payload(r).write(rank_result_path(tmp_path / "result.json", r))
    ok = collect(s, tmp_path / "result.json", None, env={"launcher_fact": "x"})
    assert ok.status == "ok" and ok.result is not None and ok.result.env["launcher_fact"] == "x"
    timeout = ChildOutcome("timeout", error="exceeded the 5 s timeout")
    assert collect(s, tmp_path / "result.json", timeout).status == "timeout"


# -- running a group of commands -------------------------------------------------------------------------


def test_group_stops_the_survivors_after_a_command_fails() -> None:
    cmds = [
        [sys.executable, "-c", "import time; time.sleep(60)"],
        [sys.executable, "-c", "import sys; print('boom: cannot reach'); sys.exit(3)"],
    ]
    group = run_group(cmds, spec(timeout_s=120), {}, grace_s=0.5)
    assert group.codes[1] == 3 and group.codes[0] is None and group.wall_s < 30
    failure = group_failure(spec(), group, ["a", "b"])
    assert failure is not None and failure.error == "b exited with code 3: boom: cannot reach"


def test_group_times_out_and_reports_progress() -> None:
    events: list[dict[str, object]] = []
    code = 'import time; print(\'@@dlbench {"phase": "warmup"}\', flush=True); time.sleep(60)'
    group = run_group([[sys.executable, "-c", code]], spec(timeout_s=2), {}, on_progress=events.append)
    assert group.killed == "timeout" and events == [{"phase": "warmup"}]
    failure = group_failure(spec(timeout_s=2), group, ["x"])
    assert failure is not None and failure.status == "timeout"


def test_a_sigkill_during_a_kernel_oom_kill_is_oom_and_any_other_is_crashed() -> None:
    # The kernel's OOM killer sends SIGKILL when the machine's memory runs out before the watcher's next sample
    # (a 102.4 M-row Wide & Deep table at 20 GiB on this 24 GiB host). /proc/vmstat's oom_kill counter rising
    # while the group ran tells that from a SIGKILL sent by a scheduler or a user.
    killed = GroupOutcome([-signal.SIGKILL], None, [["allocating"]], 3.0, 0, oom_kills=1)
    failure = group_failure(spec(), killed, ["worker"])
    assert failure is not None and failure.status == "oom" and "out-of-memory killer" in (failure.error or "")
    other = group_failure(spec(), GroupOutcome([-signal.SIGKILL], None, [["x"]], 3.0, 0), ["worker"])
    assert other is not None and other.status == "crashed" and "SIGKILL" in (other.error or "")
    segv = group_failure(spec(), GroupOutcome([-signal.SIGSEGV], None, [["x"]], 3.0, 0, oom_kills=1), ["worker"])
    assert segv is not None and segv.status == "crashed"  # only a SIGKILL is the OOM killer's


def test_the_oom_kill_counter_is_read_on_linux() -> None:
    if not Path("/proc/vmstat").exists():
        pytest.skip("no /proc/vmstat: not Linux")
    before = oom_kills()
    assert before is not None and before >= 0
    group = run_group([[sys.executable, "-c", "pass"]], spec(timeout_s=60), {})
    after = oom_kills()
    assert after is not None and 0 <= group.oom_kills <= after - before  # the host's kills while it ran


# -- engines' argv --------------------------------------------------------------------------------------


def test_reach_command_passes_argv_and_the_environment_in_a_file(tmp_path: Path) -> None:
    argv = ["/usr/bin/python3", "-m", "dlbench.worker", "/j/spec one.json", "/j/r.json"]
    env = {"RANK": "1", "GLOO_SOCKET_IFNAME": "dl0; touch /tmp/x", "HOME": "/root", "TF_TOKEN_app": "secret"}
    path = Path("/j/env-rank1.json")
    ns = HostsConfig.from_options("h1,h2", "nsenter --net=/run/netns/{host}")
    trampoline = ["/usr/bin/python3", "-m", "dlbench.envfile", str(path)]
    assert ns.command(1, argv, path) == ["nsenter", "--net=/run/netns/h2", *trampoline, *argv]
    ssh = HostsConfig.from_options("h1,h2")
    cmd = ssh.command(0, argv, path)
    assert cmd[:-1] == ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "h1"]
    assert shlex.split(cmd[-1]) == [*trampoline, *argv]  # what the remote shell runs, quoted
    wrapped = HostsConfig.from_options("h1", "timeout 60 ssh {host}").command(0, argv, path)
    assert shlex.split(wrapped[-1]) == [*trampoline, *argv]  # ssh behind another command is quoted too
    assert HostsConfig().command(0, argv, path) == argv
    # only the frameworks' own variables travel; no value is on any command line
    assert forwarded(env) == {"RANK": "1", "GLOO_SOCKET_IFNAME": "dl0; touch /tmp/x"}
    assert not any("dl0" in part or "secret" in part for part in [*cmd, *wrapped])
    with point_folder(spec(), shared=False) as folder:
        written = env_file(folder, "rank1", env)
        assert json.loads(written.read_text()) == forwarded(env) and written.stat().st_mode & 0o777 == 0o600


def test_the_env_file_trampoline_sets_the_variables_and_runs_argv(tmp_path: Path) -> None:
    import subprocess

    path = tmp_path / "env.json"
    path.write_text(json.dumps({"GLOO_SOCKET_IFNAME": "dl0; touch x"}))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "dlbench.envfile",
            str(path),
            sys.executable,
            "-c",
            "import os; print(os.environ['GLOO_SOCKET_IFNAME'])",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
    )
    assert out.stdout.strip() == "dl0; touch x" and not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    "kw", [{"hosts": "h1,-oProxyCommand=x"}, {"hosts": "h1", "reach": "ssh"}, {"reach": "'unclosed"}]
)
def test_bad_host_configuration_is_refused(kw: dict[str, str]) -> None:
    with pytest.raises(SpecError):
        HostsConfig.from_options(**kw)


def test_nodes_need_hosts_and_defaults_pick_the_engine() -> None:
    assert "2 nodes need 2 hosts" in str(HostsConfig().problem(spec(nodes=2)))
    assert HostsConfig.from_options("a,b").problem(spec(nodes=2)) is None
    assert default_launcher("torch", 2) == "torchrun" and default_launcher("jax", 2) == "local"
    assert default_launcher("torch", 1) == "local"
    with pytest.raises(SpecError, match="unknown launcher 'nosuch'"):
        Launchers.build(HostsConfig()).check(spec(launcher="nosuch"))
    with pytest.raises(SpecError, match="the local launcher runs on this machine only"):
        Launchers.build(HostsConfig()).check(spec(nodes=2, launcher="local"))


def test_torchrun_argv_and_its_failure_summary() -> None:
    argv = torchrun_argv(spec(nodes=2, devices_per_node=4), "py", 1, "10.0.0.1", 29500, 30, "s.json", "r.json")
    assert argv[:3] == ["py", "-m", "torch.distributed.run"]
    assert {
        "--nnodes=2",
        "--node-rank=1",
        "--nproc-per-node=4",
        "--master-addr=10.0.0.1",
        "--master-port=29500",
        "--rdzv-conf=timeout=30",
        "--max-restarts=0",
    } <= set(argv)
    assert argv[-4:] == ["-m", "dlbench.worker", "s.json", "r.json"]
    tail = [
        "Failures:",
        "[1]:",
        "  rank      : 0 (local_rank: 0)",
        "  exitcode  : -15 (pid: 11)",
        "Root Cause (first observed failure):",
        "[0]:",
        "  time      : 2026",
        "  rank      : 1 (local_rank: 1)",
        "  exitcode  : -9 (pid: 12)",
    ]
    assert failed_rank(tail) == (1, -9)
    assert failed_rank(tail[:4]) == (0, -15)


def test_sbatch_and_mpirun_argv() -> None:
    s = spec(nodes=2, devices_per_node=3, timeout_s=90)
    argv = sbatch_argv(s, Path("/j/job.sh"), Path("/j"), ["py", "-m", "dlbench.worker", "a", "b"], ["-p", "gpu"])
    assert {"--parsable", "--nodes=2", "--ntasks-per-node=3", "--time=2", "--output=/j/job.out"} <= set(argv)
    assert argv[-8:] == ["-p", "gpu", "/j/job.sh", "py", "-m", "dlbench.worker", "a", "b"]
    assert '"$@"' in BATCH_SCRIPT
    m = mpirun_argv(spec(devices_per_node=2), "py", {"MASTER_ADDR": "x", "HOME": "/"}, None, "a", "b")
    assert m[:3] == ["mpirun", "-np", "2"] and ["-x", "MASTER_ADDR"] == m[m.index("-x") : m.index("-x") + 2]
    assert "HOME" not in m and m[-5:] == ["py", "-m", "dlbench.worker", "a", "b"]


# -- the 1-device point a speedup divides by ----------------------------------------------------------------


def stored(pid: int, s: PointSpec, throughput_wall: float, version: str = "2.13") -> StoredPoint:
    ranks = tuple(
        RankRaw(r, (RepeatRaw((throughput_wall / 2,) * 2, throughput_wall),), param_checksum=1.0)
        for r in range(s.world_size)
    )
    env = Environment(
        {
            "framework": s.framework,
            "framework_version": version,
            "device": "cpu",
            "device_model": "EPYC",
            "cpu_model": "EPYC",
        },
        {},
    )
    return StoredPoint(
        pid, f"run{pid}", PointResult(spec=s, status="ok", ranks=ranks, metrics=summarize(s, ranks), env=env)
    )


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
    assert (
        failure.error == "node 1 (h2) exited with code 127: cannot start /nonexistent/reach: No such file or directory"
    )
