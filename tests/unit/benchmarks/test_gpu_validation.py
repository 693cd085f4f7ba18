"""The GPU validation's wiring on this CPU (issue #28): the rehearsal of every stage and the merge against the fake
backend on a fake GPU at NVML's boundary, the checks that read only their own step's run (a step that exits 2
fails its check, whatever older runs the store holds), stages that run only where their results are missing, and
the device command that fits its budget. No timing and no fairness band is judged here."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO

GPU = REPO / "benchmarks" / "gpu"
VALIDATE = GPU / "validate.sh"
STAGES = ("a", "b", "c", "d", "e")


def _env(home: Path) -> dict[str, str]:
    """This interpreter and this checkout's dlbench, a fresh DLBENCH_HOME, no GPU settings inherited."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DLBENCH_", "CUDA_"))}
    env.update(PYTHON=sys.executable, PYTHONPATH=str(REPO / "src"), DLBENCH_HOME=str(home))
    return env


def _dlbench(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dlbench", *args], env=env, capture_output=True, text=True, timeout=600, check=False
    )


def _check(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(GPU / "check_run.py"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.slow
def test_rehearsal_runs_every_stage_and_the_merge(tmp_path: Path) -> None:
    """`validate.sh --rehearse OUT`: every stage's checks run on the run their own step made and pass, each stage
    writes its result within its budget, and the merge gathers them into one store, summary.json and a report;
    the max-batch check reads the sweep's run, not the probes' (the false FAIL)."""
    out = tmp_path / "out"
    proc = subprocess.run(
        ["bash", str(VALIDATE), "--rehearse", str(out)],
        env=_env(tmp_path / "home"),
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert "PASS: max batch found and measured" in log
    checks = re.findall(r"^(PASS|FAIL): (.*)$", log, flags=re.MULTILINE)
    assert len(checks) >= 9 and all(verdict == "PASS" for verdict, _ in checks), checks
    summary = json.loads((out / "summary.json").read_text())
    assert sorted(summary["stages"]) == list(STAGES)
    for stage in summary["stages"].values():
        assert stage["checks_failed"] == 0 and stage["rehearsal"] is True
        assert 0 <= stage["used_s"] <= stage["budget_s"]
    points = summary["points"]
    assert {p["device"] for p in points} == {"cuda"}
    assert {p["device_model"] for p in points} == {"NVIDIA H100 80GB HBM3"}
    assert any(p["status"] == "oom" and p["batch"] == 2048 for p in points)
    assert any(p["batch_group"] == "max" and p["status"] == "ok" for p in points)
    assert (out / "report.html").stat().st_size > 0
    # Run again: every stage's result is there, so none runs; the merge is made again from them.
    again = subprocess.run(
        ["bash", str(VALIDATE), "all", str(out)],
        env=_env(tmp_path / "home"),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert again.returncode == 0, again.stdout[-2000:]
    assert again.stdout.count("done before") == len(STAGES) and "=== stage" not in again.stdout


def test_a_step_that_exits_2_fails_its_check_despite_an_older_run(tmp_path: Path) -> None:
    """The stale-run case: the store holds an older ok BERT run (on the CPU); the step asks for a GPU that is not
    there and exits 2 before creating a run. Its check FAILs, naming both, where reading 'the newest run' passed."""
    env = _env(tmp_path / "home")
    store = str(tmp_path / "store.db")
    old = _dlbench(
        env,
        "run",
        "-f",
        "fake",
        "-m",
        "bert_base",
        "-b",
        "2",
        "--device",
        "cpu",
        "--preset",
        "caict",
        "--warmup",
        "0",
        "--steps",
        "1",
        "--repeats",
        "1",
        "--store",
        store,
    )
    assert old.returncode == 0, old.stderr
    before = tmp_path / "before"
    ids = _check(env, "ids", store)
    before.write_text(ids.stdout)
    step = _dlbench(env, "run", "-f", "fake", "-m", "bert_base", "-b", "2", "--device", "cuda", "--store", store)
    assert step.returncode == 2, step.stderr  # this CPU: NVML sees no GPU
    expr = 'all(p["status"] == "ok" for p in pts)'
    got = _check(
        env,
        "check",
        store,
        "bert_base ok",
        expr,
        "--rc",
        str(step.returncode),
        "--before",
        str(before),
        "--model",
        "bert_base",
        "--device",
        "cuda",
    )
    assert got.returncode == 1
    assert "FAIL: bert_base ok: the step exited 2; the step created 0 run(s), not 1" in got.stdout
    # The same older run, read by its id: a CPU point, so a check on the GPU's points FAILs on the device too.
    run_id = ids.stdout.split()[0]
    by_id = _check(
        env,
        "check",
        store,
        "bert_base ok",
        expr,
        "--rc",
        "0",
        "--run-id",
        run_id,
        "--model",
        "bert_base",
        "--device",
        "cuda",
    )
    assert by_id.returncode == 1 and "a point on device cpu, not cuda" in by_id.stdout
    wrong_model = _check(
        env,
        "check",
        store,
        "resnet50 ok",
        expr,
        "--rc",
        "0",
        "--run-id",
        run_id,
        "--model",
        "resnet50",
        "--device",
        "cpu",
    )
    assert wrong_model.returncode == 1 and "a point of model bert_base, not resnet50" in wrong_model.stdout
    right = _check(
        env,
        "check",
        store,
        "bert_base ok",
        expr,
        "--rc",
        "0",
        "--run-id",
        run_id,
        "--model",
        "bert_base",
        "--device",
        "cpu",
    )
    assert right.returncode == 0 and "PASS: bert_base ok" in right.stdout


def test_a_finished_stage_is_not_run_again_and_a_cut_one_is(tmp_path: Path) -> None:
    """A stage whose result.json came back is skipped (its store untouched); one cut off before its end (no
    result.json) would run again from scratch; bad usage is one line and exit 2."""
    out = tmp_path / "out"
    done = out / "stage-a"
    done.mkdir(parents=True)
    (done / "result.json").write_text('{"stage": "a", "checks_failed": 0}')
    (done / "store.db").write_bytes(b"kept")
    proc = subprocess.run(
        ["bash", str(VALIDATE), "a", str(out)],
        env=_env(tmp_path / "home"),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0 and "stage a: done before" in proc.stdout
    assert (done / "store.db").read_bytes() == b"kept"
    bad = subprocess.run(["bash", str(VALIDATE), "--bogus"], capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    none = subprocess.run(["bash", str(VALIDATE)], capture_output=True, text=True, timeout=60, check=False)
    assert none.returncode == 2 and "usage" in none.stderr


def _budgets() -> dict[str, int]:
    script = VALIDATE.read_text()
    line = next(ln for ln in script.splitlines() if ln.startswith("budget()"))
    return {k: int(v) for k, v in re.findall(r"(\w)\) echo (\d+)", line)}


def test_every_stage_states_its_budget_and_the_device_command_fits() -> None:
    """Each stage has a budget (stated in the script's header, enforced per step); the README's device command
    runs stage (a), then (b), in one call of about 8 minutes, leaving the machine's start and a rerun room in
    15 minutes of device time."""
    budgets = _budgets()
    assert sorted(budgets) == list(STAGES) and all(0 < b <= 240 for b in budgets.values())
    header = VALIDATE.read_text().split("set -uo pipefail")[0]
    for stage, seconds in budgets.items():
        assert re.search(rf"^#\s+{stage}\s+{seconds} s ", header, flags=re.MULTILINE), stage
    readme = (GPU / "README.md").read_text()
    block = readme[readme.index("## The device command") :]
    command = next(b for b in re.findall(r"```bash\n(.*?)```", block, flags=re.DOTALL) if "validate.sh a" in b)
    assert len(command) <= 2000  # the device tool's limit on one command
    assert command.index("validate.sh a") < command.index("validate.sh b") < command.index("validate.sh merge")
    assert ".whl" in command and "--no-index" in command and "DLBENCH_HOME" in command and "$OUT" in command
    outer = {stage: int(t) for t, stage in re.findall(r"timeout (\d+) bash benchmarks/gpu/validate.sh (\w+)", command)}
    assert outer["a"] >= budgets["a"] and outer["b"] >= budgets["b"]
    timeout_s = int(re.search(r"`timeout_s: (\d+)`", block).group(1))  # type: ignore[union-attr]
    assert sum(outer.values()) <= timeout_s <= 540  # about 8 minutes: 4 to start the machine, then a rerun fits
