"""powersgd on the CPU (#41): torch's PowerSGD hook issued a bucket's later all-reduces from gloo's completion
threads, so two ranks could issue them in different orders and rank 1 died ("Connection reset by peer") or waited
forever. dlbench finishes each bucket's reduction before the next starts on gloo (hooks.ordered_on_gloo): ten
fresh points of a many-bucket model on 2 ranks all finish, their replicas equal."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
PROBE = Path(__file__).parent / "powersgd_probe_torch.py"
ROUNDS = 10


def test_powersgd_on_gloo_finishes_ten_points_in_a_row() -> None:
    try:
        proc = subprocess.run(
            [sys.executable, str(PROBE), str(ROUNDS)], capture_output=True, text=True, timeout=180, check=False
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the ranks still ran after 180 s: their collectives met out of order (a hang)")
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["rounds"] == [ROUNDS, ROUNDS]
    zero, one = got["checksums"]
    assert all(math.isclose(a, b, rel_tol=1e-9) for a, b in zip(zero, one)), (zero, one)
