"""Loaded: does the README's `dlbench run` still give a number worth having when another job holds a core?

    python benchmarks/loaded.py [--rounds 3] [--cores 1] [--sides quiet,loaded,fixed] [--out loaded.md]
                                [-- DLBENCH RUN OPTIONS]      (default: none, the README's `dlbench run`)

Each round runs `dlbench run` (with the options after `--`) once per side, in an order that rotates from round
to round so that the machine's drift hits every side:

  quiet   nothing else started by this script (the machine's own background, recorded as its load);
  loaded  beside benchmarks/busy.py holding --cores cores, with the default `--threads auto`;
  fixed   beside the same burner with `--threads` = every physical core (the default before `--threads auto`):
          what the loaded side avoids.

Per side and model it prints, and writes as Markdown to --out (ready for docs/measuring.md), the median
throughput and wall time over the rounds, the threads each point got and why, whether it was flagged contended,
and the ratio of each loaded side to quiet (wall time and throughput); the goal is loaded within 2x of quiet. The
load average before and after every command is kept beside its figures: on a machine other people also use, a
"quiet" side is only as quiet as they left it. Every run goes into its own temporary store.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from dlbench.machine.env import physical_cores

SIDES = ("quiet", "loaded", "fixed")
BUSY = Path(__file__).parent / "busy.py"
GOAL = 2.0  # loaded within 2x of quiet


@dataclass
class Point:
    """One point of one side's run: its throughput, threads and contention."""

    model: str
    throughput: float | None
    threads: str
    why: str
    contended: bool
    others: float | None


@dataclass
class Side:
    """Every run of one side: wall times, loads and points."""

    name: str
    walls: list[float] = field(default_factory=list)
    loads: list[tuple[float, float]] = field(default_factory=list)
    points: list[Point] = field(default_factory=list)


def _load() -> float:
    return os.getloadavg()[0]


def run_side(side: str, args: list[str], cores: int, store: Path) -> tuple[float, tuple[float, float], list[Point]]:
    """One `dlbench run` of a side: (wall seconds, (load before, load after), its points)."""
    burner = None
    if side != "quiet":
        burner = subprocess.Popen([sys.executable, str(BUSY), "--cores", str(cores)], stdout=subprocess.DEVNULL)
        time.sleep(1.0)  # let the burners take their cores before the first probe
    extra = ["--threads", str(physical_cores())] if side == "fixed" else []
    cmd = [sys.executable, "-m", "dlbench", "run", *args, *extra, "--store", str(store), "--format", "json"]
    before = _load()
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    finally:
        wall = time.perf_counter() - start
        if burner is not None:
            burner.terminate()
            burner.wait()
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{side}: dlbench run failed ({proc.returncode}): {proc.stderr.strip()[-400:]}")
    points = []
    for p in json.loads(proc.stdout):
        chosen = (p.get("extra", {}).get("telemetry") or {}).get("threads") or {}
        summary = p.get("telemetry_summary") or {}
        points.append(
            Point(
                model=p["spec"]["model"],
                throughput=(p.get("metrics") or {}).get("throughput"),
                threads=str(p["env"]["identity"].get("threads", "?")),
                why=str(chosen.get("reason", "")) if chosen.get("requested") == "auto" else "",
                contended=bool(summary.get("contended")),
                others=summary.get("contention_share") if summary.get("contention_share") != "" else None,
            )
        )
    return wall, (before, _load()), points


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _fmt(v: float | None, digits: int = 3) -> str:
    return "-" if v is None else f"{v:,.{digits}g}"


def report(sides: dict[str, Side], cores: int, args: list[str], rounds: int) -> str:
    """The Markdown table of every side against quiet, with the loads and the verdict."""
    quiet = sides.get("quiet")
    models = sorted({p.model for s in sides.values() for p in s.points})
    uname = os.uname()
    lines = [
        f"`dlbench run {' '.join(args)}` ({rounds} round(s), sides interleaved) on {uname.nodename} "
        f"({os.cpu_count()} logical CPUs, {physical_cores()} physical cores); loaded = benchmarks/busy.py "
        f"--cores {cores} beside it.",
        "",
        "| side | model | threads | samples/s (median) | vs quiet | contended | others' share | wall (median) "
        "| wall vs quiet | load before-after |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    verdicts = []
    for s in sides.values():
        wall = _median(s.walls)
        qwall = _median(quiet.walls) if quiet else None
        loads = ", ".join(f"{a:.1f}-{b:.1f}" for a, b in s.loads)
        for m in models:
            pts = [p for p in s.points if p.model == m]
            tput = _median([p.throughput for p in pts if p.throughput is not None])
            qt = _median([p.throughput for p in quiet.points if p.model == m and p.throughput]) if quiet else None
            vs = f"{tput / qt:.2f}x" if tput and qt else "-"
            threads = "/".join(sorted({p.threads for p in pts}))
            flagged = f"{sum(p.contended for p in pts)} of {len(pts)}"
            others = _median([p.others for p in pts if p.others is not None])
            lines.append(
                f"| {s.name} | {m} | {threads} | {_fmt(tput)} | {vs} | {flagged} | "
                f"{'-' if others is None else f'{others:.0%}'} | {_fmt(wall)} s | "
                f"{f'{wall / qwall:.2f}x' if wall and qwall else '-'} | {loads} |"
            )
        if s.name == "loaded" and wall and qwall:
            verdicts.append(
                f"loaded took {wall / qwall:.2f}x the quiet wall time: "
                + ("within" if wall / qwall <= GOAL else "NOT within")
                + f" the {GOAL:g}x goal"
            )
    why = sorted({f"{s.name}, {p.model}: {p.why}" for s in sides.values() for p in s.points if p.why})
    lines += ["", *verdicts, *(f"threads auto ({w})" for w in why[:8])]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Parse the options, run the rounds, print and write the table."""
    argv = list(sys.argv[1:] if argv is None else argv)
    passthrough: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, passthrough = argv[:at], argv[at + 1 :]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cores", type=int, default=1, help="cores the burner holds on the loaded sides")
    ap.add_argument("--sides", default=",".join(SIDES), help=f"comma-separated, from {', '.join(SIDES)}")
    ap.add_argument("--out", type=Path, help="also write the Markdown table here")
    args = ap.parse_args(argv)
    names = [s.strip() for s in args.sides.split(",") if s.strip()]
    if args.rounds < 1 or args.cores < 1 or not names or any(s not in SIDES for s in names):
        ap.error(f"--rounds and --cores must be >= 1; --sides from {', '.join(SIDES)}")
    sides = {n: Side(n) for n in names}
    with tempfile.TemporaryDirectory(prefix="dlbench-loaded-") as tmp:
        for r in range(args.rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            for name in order:
                wall, load, points = run_side(name, passthrough, args.cores, Path(tmp) / f"{name}-{r}.db")
                side = sides[name]
                side.walls.append(wall)
                side.loads.append(load)
                side.points += points
                print(f"round {r + 1} {name}: {wall:.1f} s, load {load[0]:.1f}-{load[1]:.1f}", file=sys.stderr)
    text = report(sides, args.cores, passthrough, args.rounds)
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
