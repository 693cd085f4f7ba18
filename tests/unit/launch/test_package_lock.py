"""The package lock read from METADATA's headers alone (#43, the path made cheap) names the same distributions and
versions as importlib.metadata's own full reading, in this interpreter and through LOCK_SCRIPT in a child."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys

from dlbench.launch import lock


def _full_reading() -> dict[str, str]:
    """importlib.metadata's own answer: the whole METADATA parsed, the first of a name wins."""
    seen: dict[str, str] = {}
    for d in importlib.metadata.distributions():
        name = d.metadata["Name"]
        if name and name not in seen:
            seen[name] = d.version
    return seen


def test_the_header_reading_matches_importlib_metadata_here_and_in_a_child() -> None:
    full = _full_reading()
    assert "dlbench" in full and "click" in full  # the venv the tests run in, not an empty listing
    assert lock._distributions() == full
    proc = subprocess.run([sys.executable, "-c", lock.LOCK_SCRIPT], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["packages"] == full
