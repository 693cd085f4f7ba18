"""A CPU burner: hold N cores busy, to see what dlbench does on a loaded machine.

    python benchmarks/busy.py [--cores 1] [--seconds 0]     (0: until Ctrl-C or SIGTERM)

Starts N processes, each a pure-Python busy loop (no I/O, no memory traffic to speak of), prints one line with
their PIDs, and stops them all on Ctrl-C, SIGTERM or after --seconds. One such process holds one core as long
as the scheduler gives it one: beside a 2-core `dlbench run`, `--cores 1` takes half the machine. The same load
without this file: `python -c 'while True: pass' &` (one core each; `kill %1` stops it).

benchmarks/loaded.py runs the README's `dlbench run` beside it and without it, interleaved.
"""

from __future__ import annotations

import argparse
import multiprocessing
import signal
import sys
import time
from types import FrameType


def spin() -> None:
    """Burn one core until killed."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    while True:
        pass


def burn(cores: int, seconds: float) -> None:
    """Hold `cores` cores busy for `seconds` (0: until SIGTERM or Ctrl-C), then stop every burner."""
    procs = [multiprocessing.Process(target=spin, daemon=True) for _ in range(cores)]
    for p in procs:
        p.start()
    print(f"busy: {cores} burner(s), pids {' '.join(str(p.pid) for p in procs)}", flush=True)

    def stop(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        if seconds > 0:
            time.sleep(seconds)
        else:
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.join()


def main(argv: list[str] | None = None) -> int:
    """Parse the options and burn."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cores", type=int, default=1, help="busy processes to start (one core each)")
    ap.add_argument("--seconds", type=float, default=0.0, help="stop after this long (0: until Ctrl-C/SIGTERM)")
    args = ap.parse_args(argv)
    if args.cores < 1 or args.seconds < 0:
        ap.error("--cores must be >= 1 and --seconds >= 0")
    burn(args.cores, args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
