"""The GPU validation's wiring on this CPU (issues #28, #40, #41): the rehearsal of stages c and d and the merge
against the fake backend on a fake GPU at NVML's boundary (a, b, llama and e: test_gpu_offline_node.py), the checks
that read only their own step's run (a step that exits 2 fails its check, whatever older runs the store holds),
stages that run only where their results are missing, a merge and a rehearsal that delete and replace nothing, and
device commands that fit their budgets. No timing and no fairness band is judged here."""

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
STAGES = ("a", "b", "llama", "c", "d", "e")


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


def _validate(env: dict[str, str], *args: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(VALIDATE), *args], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.mark.slow
def test_rehearsal_of_stages_c_and_d_and_the_merge(tmp_path: Path) -> None:
    """Stages c (fairness) and d (the max-batch search) rehearsed with this interpreter (DLBENCH_GPU_REHEARSAL=1,
    as `--rehearse` runs them): every check runs on the run its own step made and passes, each stage writes its
    result within its budget and is packed, and the merge gathers them into one store, summary.json and a report;
    the max-batch check reads the sweep's run, not the probes' (the false FAIL). A cut try of stage c and an
    earlier store are kept beside (#41). Stages a, b, llama and e run the node's way in test_gpu_offline_node.py."""
    out, pack = tmp_path / "out", tmp_path / "pack"
    env = {**_env(tmp_path / "home"), "DLBENCH_GPU_REHEARSAL": "1"}
    (out / "stage-c").mkdir(parents=True)  # #41: a try of stage c cut off (no result.json), and someone's store
    (out / "stage-c" / "log.txt").write_text("a try cut off")
    (out / "store.db").write_bytes(b"someone's store")
    logs = ""
    for stage in ("c", "d", "merge"):
        proc = _validate(env, "--pack", str(pack), stage, str(out))
        logs += proc.stdout + proc.stderr
        assert proc.returncode == 0, logs[-4000:]
    assert "PASS: max batch found and measured" in logs
    checks = re.findall(r"^(PASS|FAIL): (.*)$", logs, flags=re.MULTILINE)
    assert len(checks) == 3 and all(verdict == "PASS" for verdict, _ in checks), checks
    summary = json.loads((out / "summary.json").read_text())
    assert sorted(summary["stages"]) == ["c", "d"]
    for stage in summary["stages"].values():
        assert stage["checks_failed"] == 0 and stage["rehearsal"] is True
        assert 0 <= stage["used_s"] <= stage["budget_s"]
    points = summary["points"]
    assert {p["device"] for p in points} == {"cuda"}
    assert {p["device_model"] for p in points} == {"NVIDIA H100 80GB HBM3"}
    assert any(p["batch_group"] == "max" and p["status"] == "ok" for p in points)
    assert (out / "report.html").stat().st_size > 0
    assert {p.name for p in pack.iterdir()} == {"stage-c.tgz", "stage-d.tgz", "merge.tgz", "summary.json"}
    # Nothing deleted or replaced: the cut try of stage c and the earlier store are kept beside, byte for byte.
    [cut] = out.glob("stage-c.earlier-*")
    assert (cut / "log.txt").read_text() == "a try cut off" and "the earlier try kept in" in logs
    [earlier] = out.glob("merge.earlier-*")
    assert (earlier / "store.db").read_bytes() == b"someone's store"
    assert not list(out.glob(".merge-*"))  # the merge's own scratch folder is gone
    # Run again: both results are there, so neither runs; the merge is made again, the earlier one kept beside.
    again = _validate(env, "c", str(out))
    assert again.returncode == 0 and "stage c: done before" in again.stdout and "=== stage" not in again.stdout


def test_rehearse_refuses_a_folder_that_is_not_empty(tmp_path: Path) -> None:
    """#41: `--rehearse DIR` into a folder holding anything deletes and replaces nothing: one line, exit 2."""
    out = tmp_path / "out"
    (out / "stage-a").mkdir(parents=True)
    (out / "stage-a" / "store.db").write_bytes(b"theirs")
    (out / "store.db").write_bytes(b"theirs too")
    proc = _validate(_env(tmp_path / "home"), "--rehearse", str(out), timeout=60)
    assert proc.returncode == 2 and "not empty" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert (out / "stage-a" / "store.db").read_bytes() == b"theirs"
    assert (out / "store.db").read_bytes() == b"theirs too" and sorted(p.name for p in out.iterdir()) == [
        "stage-a",
        "store.db",
    ]


def test_merge_with_nothing_to_merge_changes_nothing(tmp_path: Path) -> None:
    """#41: `merge DIR` with no stage to merge deleted DIR/store.db; now it says so and changes nothing (a merge
    with stages keeps an earlier one beside: test_rehearsal_of_stages_c_and_d_and_the_merge)."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "store.db").write_bytes(b"someone's store")
    proc = _validate(_env(tmp_path / "home"), "merge", str(out), timeout=120)
    assert proc.returncode == 1 and "nothing merged, nothing changed" in proc.stdout
    assert (out / "store.db").read_bytes() == b"someone's store" and len(list(out.iterdir())) == 1


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
    return {k: int(v) for k, v in re.findall(r"(\w+)\) echo (\d+)", line)}


def _device_commands() -> list[str]:
    readme = (GPU / "README.md").read_text()
    block = readme[readme.index("## The device command") :]
    return [b for b in re.findall(r"```bash\n(.*?)```", block, flags=re.DOTALL) if "--target .site" in b]


def test_every_stage_states_its_budget_and_the_device_commands_fit() -> None:
    """Each stage has a budget (stated in the script's header, enforced per step). The README's first device command
    runs stage a, b, the Llama stage and the merge in that order, each under an outer timeout of at least its
    budget, within the call's timeout_s of at most 7.5 minutes (so that the machine's start, up to 4 minutes, and a
    rerun of one stage fit in 15 minutes of device time), the stage budgets adding up to 7 minutes; every command
    fits the device tool's limits (2,000 characters, 600 s) and packs into $OUT."""
    budgets = _budgets()
    assert sorted(budgets) == sorted(STAGES) and all(0 < b <= 240 for b in budgets.values())
    header = VALIDATE.read_text().split("set -uo pipefail")[0]
    for stage, seconds in budgets.items():
        assert re.search(rf"^#\s+{stage}\s+{seconds} s ", header, flags=re.MULTILINE), stage
    merge_budget = int(re.search(r"^#\s+merge\s+(\d+) s ", header, flags=re.MULTILINE).group(1))  # type: ignore[union-attr]
    readme = (GPU / "README.md").read_text()
    first, *later = _device_commands()
    assert len(later) == 2
    order = [first.index(f"validate.sh --pack $OUT {s} ") for s in ("a", "b", "llama", "merge")]
    assert order == sorted(order)
    assert budgets["a"] + budgets["b"] + budgets["llama"] + merge_budget == 420  # 7 minutes
    timeouts = [int(t) for t in re.findall(r"`timeout_s: (\d+)`", readme[readme.index("## The device command") :])]
    assert len(timeouts) == 3 and timeouts[0] <= 450
    for command, timeout_s in zip([first, *later], timeouts, strict=True):
        assert len(command) <= 2000 and timeout_s <= 600  # the device tool's limits on one call
        assert ".whl" in command and "--no-index" in command and "DLBENCH_HOME" in command and "$OUT" in command
        outer = {
            s: int(t)
            for t, s in re.findall(r"timeout (\d+) bash benchmarks/gpu/validate.sh --pack \$OUT (\w+)", command)
        }
        assert all(outer[s] >= budgets.get(s, merge_budget) for s in outer)
        assert sum(outer.values()) <= timeout_s
