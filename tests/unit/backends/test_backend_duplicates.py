"""Issue #11's layout criterion, kept: no two places inside backends/ share a run of more than 8 lines (the same
lines or the same shape), as the `duplicates` tool reads them. A model or loader written twice belongs in one
place (torchlike/, dlbench.data, base.py)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.support.paths import REPO

SRC = REPO / "src" / "dlbench"
ROW = re.compile(r"^D\d+ (\S+):\d+-\d+ ~ (\S+):\d+-\d+")


def _pairs(min_lines: int) -> list[tuple[str, str]]:
    out = subprocess.run(
        ["duplicates", "--repo", str(SRC), "--min-lines", str(min_lines), "--most", "200", "--seconds", "120"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    assert "incomplete:" not in out, out
    return [(m[1], m[2]) for m in map(ROW.match, out.splitlines()) if m]


@pytest.mark.skipif(shutil.which("duplicates") is None, reason="the `duplicates` tool is not on this machine's PATH")
def test_no_pair_inside_backends_longer_than_8_lines() -> None:
    inside = [p for p in _pairs(9) if all(side.startswith("backends/") for side in p)]
    assert inside == []


@pytest.mark.skipif(shutil.which("duplicates") is None, reason="the `duplicates` tool is not on this machine's PATH")
def test_the_check_reads_rows() -> None:
    """At 6 shared lines the tree has pairs (in backends/ and beside): the row pattern reads them."""
    assert _pairs(6)
