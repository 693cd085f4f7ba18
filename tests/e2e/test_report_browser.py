"""The HTML report in a real headless Chromium (Debian's `chromium`): no console error, and a screenshot with charts.

Needs /usr/bin/chromium (`apt-get install -y --no-install-recommends chromium`); skipped, saying so, without it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dlbench.cli import main
from dlbench.report.chart_base import PALETTE

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="Debian's chromium is not installed: apt-get install -y --no-install-recommends chromium",
    ),
]
CONSOLE = re.compile(r"CONSOLE\(\d+\)\]|:CONSOLE:|Uncaught|Failed to load resource", re.IGNORECASE)


def chromium(page: Path, tmp: Path, *action: str) -> subprocess.CompletedProcess[str]:
    """Run headless Chromium on a local file with logging to stderr; nothing reaches the network."""
    cmd = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-extensions",
        f"--user-data-dir={tmp / 'profile'}",
        "--enable-logging=stderr",
        "--v=0",
        "--window-size=1400,2400",
        *action,
        page.as_uri(),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)


def console_lines(stderr: str) -> list[str]:
    """Lines where Chromium reports something the page said or failed to load."""
    return [ln for ln in stderr.splitlines() if CONSOLE.search(ln)]


def _fake_run(store: Path, mode: str, *args: str, code: int = 0) -> None:
    env = {**os.environ, "DLBENCH_FAKE": mode}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "dlbench",
            "run",
            "-f",
            "fake",
            "-m",
            "resnet50",
            "--steps",
            "6",
            "--warmup",
            "1",
            "--store",
            str(store),
            *args,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == code, proc.stderr[-2000:]


@pytest.fixture(scope="module")
def report_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A report of real fake-backend runs: two batch sizes, and an OOM footnote."""
    tmp = tmp_path_factory.mktemp("browser")
    store = tmp / "results.db"
    # slow fake steps at a small input keep the achieved FLOP/s under this CPU's instruction-set peak: a fake
    # step does no arithmetic, and a point above its peak shows no MFU
    _fake_run(store, "sleep:0.04", "-b", "4", "--input-size", "32")
    _fake_run(store, "sleep:0.08", "-b", "8", "--input-size", "32")
    _fake_run(store, "oom", "-b", "64", "--input-size", "32", code=1)  # a failed point makes `run` exit 1
    page = tmp / "report.html"
    assert main(["report", "--all", "--store", str(store), "-o", str(page)]) == 0
    return page


def test_error_detector_sees_a_broken_page(tmp_path: Path) -> None:
    """The console check itself works on this Chromium: a page that throws is caught."""
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><title>x</title><script>console.error('boom'); undefinedFunction();</script>")
    proc = chromium(bad, tmp_path, "--dump-dom")
    assert console_lines(proc.stderr), proc.stderr[-3000:]


def test_loads_without_console_errors(report_page: Path, tmp_path: Path) -> None:
    proc = chromium(report_page, tmp_path, "--dump-dom")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert console_lines(proc.stderr) == []
    dom = proc.stdout
    assert "dlbench report" in dom and dom.count("<svg") >= 3
    assert "OOM" in dom and "Spread of the raw step times" in dom


def test_screenshot_shows_the_charts(report_page: Path, tmp_path: Path) -> None:
    image = pytest.importorskip("PIL.Image", reason="Pillow (a matplotlib dependency) is missing")
    shot = tmp_path / "shot.png"
    proc = chromium(report_page, tmp_path, f"--screenshot={shot}")
    assert proc.returncode == 0 and shot.exists(), proc.stderr[-3000:]
    assert console_lines(proc.stderr) == []
    img = np.asarray(image.open(shot).convert("RGB"), dtype=int)
    assert img.shape == (2400, 1400, 3)
    colours, counts = np.unique(img[::7, ::7].reshape(-1, 3), axis=0, return_counts=True)
    background = colours[counts.argmax()]
    assert (img != background).any(axis=2).mean() > 0.2, "the page looks blank"
    series = np.array([int(PALETTE[0][i : i + 2], 16) for i in (1, 3, 5)])  # the one framework's series colour
    drawn = (np.abs(img[300:] - series) <= 12).all(axis=2).sum()
    assert drawn > 5000, "no chart series colour on the screenshot"


def test_the_report_shows_mfu(report_page: Path, tmp_path: Path) -> None:
    """Each point's achieved TFLOP/s and MFU (against this CPU's instruction-set peak), and the MFU charts, render."""
    proc = chromium(report_page, tmp_path, "--dump-dom")
    assert proc.returncode == 0 and console_lines(proc.stderr) == [], proc.stderr[-3000:]
    dom = proc.stdout
    assert "FLOPs and MFU" in dom and "MFU by framework" in dom and "Achieved TFLOP/s beside the device peak" in dom
    assert re.search(r"[\d.,]+ TFLOP/s · MFU [\d.,]+% \(instruction set\)", dom), "no cell gives TFLOP/s and MFU"


def test_the_special_cases_section_renders(tmp_path: Path) -> None:
    """A face classes=max search and a Wide & Deep vocabulary curve: the Special cases section, its largest-value
    table with DLPerf's max num_classes beside it, and the latency/memory chart, with no console error."""
    store = tmp_path / "results.db"
    env = {**os.environ, "DLBENCH_FAKE": "param_oom_above:classes:20500"}
    common = ("--warmup", "0", "--steps", "1", "--repeats", "1", "--device", "cpu", "--store", str(store))
    face = subprocess.run(
        [
            sys.executable,
            "-m",
            "dlbench",
            "run",
            "-f",
            "fake",
            "-m",
            "face",
            "-b",
            "4",
            "--param",
            "classes=max",
            "--param",
            "model_parallel=1",
            "--param",
            "sample=10",
            "--memory-limit",
            "1GiB",
            *common,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert face.returncode == 0, face.stderr[-2000:]
    env["DLBENCH_FAKE"] = "param_oom_above:vocab:2500"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "dlbench",
            "run",
            "-f",
            "fake",
            "-m",
            "wide_deep",
            "-b",
            "8",
            "--param",
            "vocab=1K,2K,4K",
            *common,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    page = tmp_path / "special.html"
    assert main(["report", "--all", "--store", str(store), "-o", str(page)]) == 0
    proc = chromium(page, tmp_path, "--dump-dom")
    assert proc.returncode == 0 and console_lines(proc.stderr) == [], proc.stderr[-3000:]
    dom = proc.stdout
    assert 'id="special"' in dom and "Largest value that trains" in dom and "Published: DLPerf's max num_classes" in dom
    assert re.search(r'<td class="largest">20K</td>\s*<td>21K</td>', dom), "no face row with its boundary"
    assert "13.5M" in dom and '<figure id="wide-deep-vocab">' in dom
