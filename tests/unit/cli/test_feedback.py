"""What long commands say while they work: a busy machine before the first point (real /proc/stat beside a real
busy loop, and the reading mocked at its boundary), how to measure again after Ctrl-C, setup's stages."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from rich.console import Console

from dlbench.cli import feedback
from dlbench.cli.progress import Pace
from dlbench.envs import provision

CliResult = tuple[int, str, str]


@pytest.fixture
def one_cpu() -> Iterator[int]:
    """Pin this process (and what it starts) to one CPU, so that one busy loop is the same share anywhere."""
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("no CPU affinity on this platform: the busy loop could not be put on this process's CPU")
    before = os.sched_getaffinity(0)
    cpu = min(before)
    os.sched_setaffinity(0, {cpu})
    try:
        yield cpu
    finally:
        os.sched_setaffinity(0, before)


def _orphan_busy_loop() -> int:
    """A busy loop that is not this process's descendant (a shell starts it and exits; init adopts it)."""
    shell = subprocess.run(
        ["sh", "-c", f"'{sys.executable}' -c 'while True: pass' >/dev/null 2>&1 & echo $!"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(shell.stdout.strip())


def test_a_busy_loop_on_our_cpu_makes_the_machine_read_busy(one_cpu: int) -> None:
    burner = _orphan_busy_loop()
    try:
        time.sleep(0.3)
        line = feedback.busy_line(interval_s=1.0)
    finally:
        os.kill(burner, signal.SIGKILL)
    assert line is not None and "--wait-quiet" in line and "busy" in line


@pytest.mark.parametrize("share", [0.6, 0.0])
def test_run_says_the_machine_is_busy_before_its_first_point(
    share: float, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    """The reading of others' share mocked at its boundary: busy says so (and suggests --wait-quiet) before any
    point is measured; quiet says nothing."""
    order: list[str] = []
    monkeypatch.setattr(feedback, "others_share_since", lambda *a, **k: order.append("read") or share)
    from dlbench.runapi import run as run_api

    real = run_api.run_points
    monkeypatch.setattr(run_api, "run_points", lambda *a, **k: order.append("points") or real(*a, **k))
    monkeypatch.setenv("DLBENCH_FAKE", "sleep:0.001")
    code, _, err = cli(
        "run",
        "-f",
        "fake",
        "-m",
        "resnet50",
        "-b",
        "2",
        "--warmup",
        "0",
        "--steps",
        "2",
        "--repeats",
        "1",
        "--store",
        str(tmp_path / "s.db"),
    )
    assert code == 0, err
    assert order == ["read", "points"]
    said = " ".join(err.split())  # the console wraps the line
    assert ("this machine is busy: other processes use 60%" in said and "--wait-quiet 300" in said) == (share > 0)
    assert ("--threads auto (the default) gives each CPU point the cores they leave free" in said) == (share > 0)


def test_wait_quiet_reads_nothing_more(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(feedback, "others_share_now", lambda *a, **k: pytest.fail("read with --wait-quiet"))
    monkeypatch.setattr(feedback, "others_share_since", lambda *a, **k: pytest.fail("read with --wait-quiet"))
    feedback.say_busy(Console(file=io.StringIO()), wait_quiet_s=60.0)


def test_the_busy_share_is_read_from_the_commands_start_without_its_own_time(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """others_share_since at its boundary (/proc/stat, os.times, the clock): the command's own CPU seconds since it
    started (2.0 of the 2.5 busy) are not others'; it waits only for what is left of the least window."""
    from dlbench.machine import contention

    def stat(user: int, idle: int) -> str:
        return "cpu  0 0 0 0\n" + "".join(f"cpu{c} {user} 0 0 {idle} 0 0 0 0\n" for c in (0, 1))

    (tmp_path / "stat").write_text(stat(225, 275))  # each CPU: 125 busy and 75 idle ticks since the start
    monkeypatch.setattr(contention.os, "sched_getaffinity", lambda _pid: {0, 1}, raising=False)
    monkeypatch.setattr(contention, "ticks_per_s", lambda: 100)
    monkeypatch.setattr(contention, "own_cpu_s", lambda times=None: 1.0 if times is not None else 3.0)
    waited: list[float] = []
    share = contention.others_share_since(
        10.0, os.times(), stat(100, 200), 0.5, tmp_path / "stat", clock=lambda: 10.2, sleep=waited.append
    )
    assert share == pytest.approx(0.125) and waited == [pytest.approx(0.3)]  # (2.5 - 2.0) s of 4 CPU-seconds
    later = contention.others_share_since(
        10.0, os.times(), stat(100, 200), 0.5, tmp_path / "stat", clock=lambda: 13.0, sleep=waited.append
    )
    assert later == pytest.approx(0.125) and len(waited) == 1  # 3 s after the start: nothing left to wait
    assert contention.others_share_since(10.0, os.times(), "", 0.5, tmp_path / "stat", sleep=waited.append) is None


def test_the_busy_note_reads_from_the_start_only_while_it_is_recent(monkeypatch: pytest.MonkeyPatch) -> None:
    """Within START_WINDOW_S of the command's start the share is read since then (no wait of its own); a command
    that took longer (a max-batch search ran first) reads afresh over the interval."""
    from dlbench.cli.invocation import Start

    asked: list[str] = []
    monkeypatch.setattr(feedback, "others_share_since", lambda *a, **k: asked.append("since") or 0.0)
    monkeypatch.setattr(feedback, "others_share_now", lambda *a, **k: asked.append("now") or 0.0)
    for ago in (1.0, feedback.START_WINDOW_S + 5):
        monkeypatch.setattr(feedback, "started", lambda ago=ago: Start(time.monotonic() - ago, os.times(), "cpu0"))
        assert feedback.busy_line() is None
    monkeypatch.setattr(feedback, "started", lambda: None)  # an embedding that calls a click command directly
    feedback.busy_line()
    assert asked == ["since", "now", "now"]


def test_a_busy_loop_on_our_cpu_reads_busy_from_the_commands_start(one_cpu: int) -> None:
    from dlbench.machine.contention import others_share_since

    burner = _orphan_busy_loop()
    try:
        time.sleep(0.3)
        share = others_share_since(time.monotonic(), os.times(), Path("/proc/stat").read_text(), 1.0)
    finally:
        os.kill(burner, signal.SIGKILL)
    assert share is not None and share > 0.3, share


def test_ctrl_c_says_run_does_not_resume_and_how_to_measure_again() -> None:
    line = feedback.interrupted_line("20261127-010203-abcd1234", "dlbench run -m resnet50")
    assert "dlbench results 20261127-010203-abcd1234" in line and "does not resume" in line
    assert line.endswith("dlbench run -m resnet50")


def test_setup_stages_print_a_line_and_their_log_outside_a_terminal(tmp_path: Path) -> None:
    out = Console(file=io.StringIO(), width=200)
    with provision.stage(feedback.ConsoleFeedback(out), "jax: pip install (cpu build)", tmp_path / "jax.log"):
        pass
    text = out.file.getvalue()  # type: ignore[attr-defined]
    assert f"jax: pip install (cpu build) ... (output in {tmp_path / 'jax.log'})" in text
    assert "jax: pip install (cpu build): finished in" in text
    tty = Console(file=io.StringIO(), force_terminal=True)
    with provision.stage(feedback.ConsoleFeedback(tty), "x", tmp_path / "x.log"):
        pass
    assert tty.file.getvalue() == ""  # type: ignore[attr-defined]


def test_setup_lines_read_no_markup_and_a_warning_stands_out() -> None:
    """pip's and the user's text go through ConsoleFeedback literally ('[notice]' is not markup)."""
    out = Console(file=io.StringIO(), width=200, force_terminal=True, color_system="standard")
    fb = feedback.ConsoleFeedback(out)
    fb.say("[notice] a new pip [/] is out")
    fb.say("torch: per-case support not cached", warning=True)
    text = out.file.getvalue()  # type: ignore[attr-defined]
    assert "[notice] a new pip [/] is out" in text and "\x1b[33mtorch: per-case support not cached" in text
    assert fb.live
    with fb.status("pip") as update:
        update("pip: [notice] Collecting x")  # no MarkupError


def test_the_pace_is_known_after_the_first_measured_step() -> None:
    pace = Pace()  # a phase's pace: warm-up steps (compilation) never reach it (tests/unit/cli/test_progress.py)
    pace.see(2, 60.0)
    assert pace.step_s is None
    pace.see(3, 62.0)
    assert pace.step_s == pytest.approx(2.0)
