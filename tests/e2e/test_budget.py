"""The emulated device budget (--memory-limit on the CPU) is per process: a rank is one device, so two ranks'
memory is not added up, nor a launcher's or a worker's child's (launch/process.py's largest_rss)."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from dlbench.launch.process import largest_rss

MIB = 2**20
HOLD = 120  # MiB each process holds (bytes written, so resident)
PARENT = f"""
import subprocess, sys, time
held = b"x" * ({HOLD} * 2**20)
child = subprocess.Popen([sys.executable, "-c", "import time; held = b'x' * ({HOLD} * 2**20); print('ready', flush=True); time.sleep(60)"],
                         stdout=subprocess.PIPE, text=True)
child.stdout.readline()
print("ready", flush=True)
time.sleep(60)
"""


def test_the_budget_compares_the_largest_process_not_the_tree_s_sum() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None and parent.stdout.readline().strip() == "ready"
        proc = psutil.Process(parent.pid)
        deadline = time.monotonic() + 10
        while len(proc.children(recursive=True)) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        largest = largest_rss([proc])
        total = sum(p.memory_info().rss for p in [proc, *proc.children(recursive=True)])
        assert HOLD * MIB <= largest < 2 * HOLD * MIB  # one process's bytes (plus its interpreter)
        assert total >= 2 * HOLD * MIB  # the tree holds both
    finally:
        for p in psutil.Process(parent.pid).children(recursive=True):
            p.kill()
        parent.kill()
        parent.wait()
