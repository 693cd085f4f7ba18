"""A worker's peak memory is its own, not the controller's that started it (the emulated memory limit reads it)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

MiB = 2**20

# The parent touches 600 MiB, then starts two children as the launcher does (fork, then exec): one idle, one
# that touches 200 MiB. Each prints dlbench's peak and the kernel's ru_maxrss.
_PARENT = """
import json, subprocess, sys
big = bytearray(600 * 2**20)
for i in range(0, len(big), 4096):
    big[i] = 1
child = '''
import json, resource, sys
held = bytearray(int(sys.argv[1]) * 2**20)
for i in range(0, len(held), 4096):
    held[i] = 1
from dlbench.worker.measure import _peak_rss_bytes
print(json.dumps([_peak_rss_bytes(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024]))
'''
out = [json.loads(subprocess.run([sys.executable, "-c", child, n], capture_output=True, text=True,
       check=True, preexec_fn=lambda: None).stdout) for n in ("0", "200")]
print(json.dumps(out))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the inherited ru_maxrss is Linux's behaviour")
def test_a_worker_started_by_a_big_controller_reports_its_own_peak() -> None:
    done = subprocess.run([sys.executable, "-c", _PARENT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    (idle, idle_maxrss), (busy, _) = json.loads(done.stdout)
    assert idle_maxrss >= 600 * MiB  # the trap: the kernel's figure carries the parent's 600 MiB over exec
    assert idle < 200 * MiB  # dlbench's is the child's own: an interpreter and dlbench.worker's imports
    assert busy >= 200 * MiB  # and it still sees what the child itself touched
