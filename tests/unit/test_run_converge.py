"""`dlbench run --converge` through the run API with the fake backend's loss-curve knob: reference runs measured
once and stored marked, reused, and each point's verdict kept in its extra (and its JSON); a run stopped by Ctrl-C
while its curve trains keeps that point, `interrupted`, with its curve so far."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from dlbench.analysis.convergence import CURVE_KEY, REFERENCE_KEY, VERDICT_KEY, convergence_lines, verdict_of
from dlbench.points import Axes, Shared
from dlbench.report.export import to_json
from dlbench.runapi.run import RunHooks, RunOutcome, RunRequest, execute_run, prepare_run
from dlbench.spec import Protocol
from dlbench.store.store import Store


def _first_window(factor: float, target: float, every: int = 10) -> int:
    """The step count at the first window of `every` steps whose mean of factor**k is at or below the target."""
    end = every
    while sum(factor**k for k in range(end - every + 1, end + 1)) / every > target:
        end += every
    return end


def _run(store_path: Path, converge_steps: int | None = None, notes: list[str] | None = None) -> RunOutcome:
    req = RunRequest(
        axes=Axes(frameworks=("fake",), models=("resnet50",), batches=(2,)),
        shared=Shared(
            protocol=Protocol(0, 1, 1, "median", preset="quick"), converge=True, converge_steps=converge_steps
        ),
        store_path=str(store_path),
    )
    return execute_run(prepare_run(req), RunHooks(note=(notes if notes is not None else []).append))


def test_references_are_measured_once_then_reused_and_verdicts_stored(
    store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DLBENCH_FAKE", "curve:0.99")
    notes: list[str] = []
    first = _run(store_path, notes=notes)
    assert notes[0].startswith("--converge: first 5 local reference run(s)")  # said before anything trains (#42)
    assert "trains to loss 0.25" in notes[1]
    refs = [r for r in first.results if r.extra.get(REFERENCE_KEY)]
    assert [r.spec.seed for r in refs] == [100, 101, 102, 103, 104] and len(first.results) == 6
    candidate = first.results[-1]
    verdict = candidate.extra[VERDICT_KEY]
    assert isinstance(verdict, dict)
    assert verdict["verdict"] == "converged" and verdict["steps_to_target"] == _first_window(0.99, 0.25)
    assert verdict["reference"] is not None and "5 run(s)" in str(verdict["reference_line"])
    assert verdict["seed"] == 0 and verdict["target"] == 0.25
    lines = convergence_lines(list(first.results))
    assert any(f"converged, {_first_window(0.99, 0.25)} steps" in line for line in lines)
    exported = json.loads(to_json(first.mine(), list(first.stored)))
    assert "convergence" in json.dumps(exported)

    monkeypatch.setenv("DLBENCH_FAKE", "curve:0.99:nan_at:50")  # the same point, now broken
    notes.clear()
    second = _run(store_path, notes=notes)
    assert len(second.results) == 1  # the stored references are reused
    assert "local reference runs the verdicts are judged against are in the store already" in notes[0]
    assert verdict_of(second.results[0]) == "diverged"

    monkeypatch.setenv("DLBENCH_FAKE", "curve:0.999")  # a learning rate far too small
    third = _run(store_path, converge_steps=100)
    assert verdict_of(third.results[0]) == "not reached"


def _sigint_default() -> None:
    """In the child before exec: Ctrl-C's default (a background job ignores SIGINT, and exec keeps that)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _wait_ready(path: Path, proc: subprocess.Popen[bytes], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and "ready" in path.read_text():
            return
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        time.sleep(0.1)
    raise AssertionError(f"the convergence run did not start within {timeout} s")


def test_ctrl_c_while_the_curve_trains_stores_it_interrupted_and_loses_nothing(
    store_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DLBENCH_FAKE", "curve:0.99")
    notes: list[str] = []
    first = _run(store_path, notes=notes)
    assert notes[0].startswith("--converge: first 5 local reference run(s)")  # said before anything trains (#42)
    assert "trains to loss 0.25" in notes[1]  # the references and a converged point, stored before the interrupted run
    before = {p.uid: p.result for p in first.stored}
    assert len(before) == 6
    ready = tmp_path / "ready"
    env = {**os.environ, "DLBENCH_FAKE": "curve:0.9999:sleep:0.02", "DLBENCH_FAKE_READY": str(ready)}
    argv = ["run", "-f", "fake", "-m", "resnet50", "--device", "cpu", "-b", "2", "--warmup", "0", "--steps", "1"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "dlbench", *argv, "--repeats", "1", "--converge", "--store", str(store_path)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=_sigint_default,
    )
    _wait_ready(ready, proc)  # the curve's first reading is taken; a 1000-step budget takes 20 s more
    time.sleep(0.5)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err.decode()
    store = Store(store_path, readonly=True)
    after = {p.uid: p for p in store.points()}
    assert all(uid in after and after[uid].result == r for uid, r in before.items())  # nothing lost or changed
    new = [p for uid, p in after.items() if uid not in before]
    assert len(new) == 1 and store.get_run(new[0].run_id).status == "interrupted"
    stopped = new[0].result
    assert verdict_of(stopped) == "interrupted" and stopped.status == "error" and "Ctrl-C" in (stopped.error or "")
    curve = stopped.extra[CURVE_KEY]
    assert isinstance(curve, dict) and curve["interrupted"] and 1 <= len(curve["losses"]) < 100
    assert 0 < curve["steps"] < 1000 and not stopped.extra.get(REFERENCE_KEY)


def _sigint_ignored() -> None:
    """In the child before exec: SIGINT ignored, as a shell's background job (`dlbench run ... &`) starts."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_sigterm_while_a_reference_trains_stops_it_within_seconds(store_path: Path, tmp_path: Path) -> None:
    """#41: a controller started in the background ignores SIGINT, and its workers inherited that, so the SIGINT
    the controller sends on SIGTERM was lost: the reference trained on (9.7 s) and was stored ok. Each worker now
    takes SIGINT back; the reference stops at once and is kept interrupted, not as a whole reference."""
    ready = tmp_path / "ready"
    env = {**os.environ, "DLBENCH_FAKE": "curve:0.9999:sleep:0.02", "DLBENCH_FAKE_READY": str(ready)}
    argv = ["run", "-f", "fake", "-m", "resnet50", "--device", "cpu", "-b", "2", "--warmup", "0", "--steps", "1"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "dlbench", *argv, "--repeats", "1", "--converge", "--store", str(store_path)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=_sigint_ignored,
    )
    _wait_ready(ready, proc)  # the first reference's curve has its first reading: 1000 steps take 20 s more
    worker = psutil.Process(int(ready.read_text().split()[1]))
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    worker.wait(timeout=30)
    took = time.monotonic() - start
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err.decode()
    assert took < 3, f"the reference's worker ran {took:.1f} s after SIGTERM"  # ~0.1 s quiet; 3 s for a loaded CI
    (stopped,) = [p.result for p in Store(store_path, readonly=True).points()]
    assert stopped.status == "error" and verdict_of(stopped) == "interrupted"
    assert stopped.extra.get(REFERENCE_KEY) and stopped.extra[CURVE_KEY]["interrupted"]  # type: ignore[index]
