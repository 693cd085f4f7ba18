"""Start-up: what does dlbench cost beyond its framework's own import?

    python benchmarks/startup.py [-f torch] [-m alexnet] [--batch-size 1] [--input-size 64] [--rounds 5]

Each round runs, each in a fresh process and in this order:
  version  `dlbench --version`
  help     `dlbench --help`
  import   `python -c "import <framework>"` in the framework's environment
  worker   the point's worker alone (`python -m dlbench.worker SPEC RESULT`: imports, builds the model, one step)
  point    a whole 1-step point, `dlbench run -f FW -m MODEL --warmup 0 --steps 1 --repeats 1 --device cpu`
           (controller start, store, worker, result stored, table printed)
  bare     with -m resnet50 (and torch's -m alexnet), the framework's own 1-step training script
           (benchmarks/fairness_loops/: its canonical model, no dlbench import): point - bare is what dlbench adds
           to the framework's own work, and bare - import the floor no harness can go below
Rounds interleave the sides so that the shared machine's drift hits all of them; one warm-up round (it makes the
store and the CPU-peak cache) is not counted. `--baseline-src DIR` runs every dlbench side a second time with
another checkout's source (PYTHONPATH=DIR), interleaved in the same rounds: before/after in one measurement. Per round it takes the differences point - import (what a point
costs beyond the framework's import: the goal is at most 1.5 s), worker - import (the model build, one step and
the worker's own imports) and point - worker (the controller), and prints their medians with the load average
before and after. Read differences and ratios, not absolute times.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from dlbench.envs.interpreters import interpreter_for
from dlbench.launch.process import worker_env
from dlbench.points import Shared
from dlbench.points import point as make_point
from dlbench.spec import preset

SIDES = ("version", "help", "import", "worker", "point")
LOOPS = Path(__file__).parent / "fairness_loops"


def timed(argv: Sequence[str], env: dict[str, str] | None = None, timeout: float = 600) -> float:
    """Wall seconds of one process, from start to exit; RuntimeError if it fails."""
    start = time.perf_counter()
    proc = subprocess.run(list(argv), capture_output=True, text=True, env=env, timeout=timeout, check=False)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv[:4])} ... failed ({proc.returncode}): "
            f"{(proc.stderr or proc.stdout).strip().splitlines()[-1:]}"
        )
    return took


def commands(a: argparse.Namespace, folder: Path) -> dict[str, tuple[list[str], dict[str, str] | None]]:
    """The argv (and environment) of each side."""
    python = interpreter_for(a.framework)
    protocol = preset("quick").override(warmup=0, steps=1, repeats=1)
    spec = make_point(a.framework, a.model, a.batch_size, "fp32", Shared(protocol=protocol, input_size=a.input_size))
    (folder / "spec.json").write_text(spec.to_json())
    dlbench = [sys.executable, "-m", "dlbench"]
    point = [
        *dlbench,
        "run",
        "-f",
        a.framework,
        "-m",
        a.model,
        "--batch-size",
        str(a.batch_size),
        "--input-size",
        str(a.input_size),
        "--warmup",
        "0",
        "--steps",
        "1",
        "--repeats",
        "1",
        "--device",
        "cpu",
        "--store",
        str(folder / "results.db"),
    ]
    return {
        "version": ([*dlbench, "--version"], None),
        "help": ([*dlbench, "--help"], None),
        "import": ([python, "-c", f"import {a.import_name or a.framework}"], worker_env(spec)),
        "worker": (
            [python, "-m", "dlbench.worker", str(folder / "spec.json"), str(folder / "result.json")],
            worker_env(spec),
        ),
        "point": (point, None),
        "bare": (
            [
                python,
                str(LOOPS / f"{a.framework}_loop.py"),
                "--model",
                a.model,
                "--batch-size",
                str(a.batch_size),
                "--input-size",
                str(a.input_size),
                "--warmup",
                "0",
                "--steps",
                "1",
                "--device",
                "cpu",
            ],
            worker_env(spec),
        ),
    }


def with_source(cmd: tuple[list[str], dict[str, str] | None], src: str) -> tuple[list[str], dict[str, str]]:
    """The same command run from another checkout's source tree."""
    argv, env = cmd
    return argv, {**(env if env is not None else os.environ), "PYTHONPATH": src}


def load() -> str:
    """The 1, 5 and 15 minute load averages."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> int:
    """Interleaved rounds of every side; medians and the per-round differences that answer the question."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-f", "--framework", default="torch")
    p.add_argument("--import-name", help="The module to import, where it is not the framework's name (tf: tensorflow).")
    p.add_argument("-m", "--model", default="alexnet")
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--input-size", type=int, default=64)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--baseline-src", help="Another checkout's src folder, measured in the same rounds.")
    a = p.parse_args()
    names = {"tf": "tensorflow", "paddle": "paddle", "mxnet": "mxnet", "jittor": "jittor"}
    a.import_name = a.import_name or names.get(a.framework)
    bare = (LOOPS / f"{a.framework}_loop.py").exists() and (
        a.model == "resnet50" or (a.framework, a.model) == ("torch", "alexnet")
    )
    sides = [*SIDES, *(["bare"] if bare else [])]
    sides += [f"{s} (baseline)" for s in SIDES if s != "import"] if a.baseline_src else []
    times: dict[str, list[float]] = {s: [] for s in sides}
    with (
        tempfile.TemporaryDirectory(prefix="dlbench-startup-") as tmp,
        tempfile.TemporaryDirectory(prefix="dlbench-startup-baseline-") as tmp_base,
    ):
        cmds: dict[str, tuple[list[str], dict[str, str] | None]] = dict(commands(a, Path(tmp)))
        if a.baseline_src:
            base = commands(a, Path(tmp_base))  # its own store: the two never share a file
            cmds.update({f"{s} (baseline)": with_source(base[s], a.baseline_src) for s in SIDES if s != "import"})
        for side in sides:  # warm-up: makes the store and the peak cache, fills the page cache
            timed(*cmds[side])
        before = load()
        for r in range(a.rounds):
            for side in sides:
                times[side].append(timed(*cmds[side]))
            print(f"round {r + 1}: " + ", ".join(f"{s} {times[s][-1]:.2f} s" for s in sides), flush=True)
        after = load()
    print(
        f"\n{a.framework} {a.model}, batch {a.batch_size}, input {a.input_size}, {a.rounds} rounds; "
        f"load average {before} before, {after} after; {os.cpu_count()} logical CPUs"
    )
    for s in sides:
        t = times[s]
        print(f"  {s:19} median {statistics.median(t):6.2f} s  (min {min(t):.2f}, max {max(t):.2f})")
    for tag in ("", " (baseline)") if a.baseline_src else ("",):
        for name, x, y in (
            ("point - import", "point", "import"),
            ("worker - import", "worker", "import"),
            ("point - worker (controller)", "point", "worker"),
        ):
            d = [i - j for i, j in zip(times[x + tag], times[y if y == "import" else y + tag])]
            print(f"  {name + tag:39} median {statistics.median(d):5.2f} s  (min {min(d):.2f}, max {max(d):.2f})")
        ratio = [i / j for i, j in zip(times["point" + tag], times["import"])]
        print(f"  {'point / import' + tag:39} median {statistics.median(ratio):5.2f}")
        for name, x, y in (("point - bare", "point" + tag, "bare"), ("bare - import", "bare", "import")):
            if bare and (name == "point - bare" or not tag):
                d = [i - j for i, j in zip(times[x], times[y])]
                print(f"  {name + tag:39} median {statistics.median(d):5.2f} s  (min {min(d):.2f}, max {max(d):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
