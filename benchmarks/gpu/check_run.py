"""One check of the GPU validation: it reads only the run its own step created, and cannot pass on older data.

    python check_run.py ids STORE > BEFORE          # the run ids before the step
    <the step>; rc=$?
    python check_run.py check STORE LABEL EXPR --before BEFORE --rc $rc --model M --device cuda [--kind sweep]
    python check_run.py check STORE LABEL EXPR --run-id ID --rc $rc ...
    python check_run.py summary OUT [STORE] > summary.json  # the stages' verdicts and the merged store's points
    python check_run.py gather OUT FOLDER STAGE...  # the stages' stores into FOLDER/store.db, FOLDER/summary.json

A check FAILs when the step exited non-zero, when it created no run (or, with --before, not exactly one of
`--kind`), or when any point it reads is not of the model and device asked for (on a GPU: the device model must
be a GPU's name, not a CPU's); then it evaluates EXPR over the points (`pts`: dicts with model, device,
device_model, status, throughput, batch, batch_group, precision, compiled, protocol, dlbench_version, git_commit,
math_mode, channels_last, peak_memory, facts, achieved TFLOP/s, the datasheet peak and MFU), prints them and PASS
or FAIL, and exits 1 on FAIL.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dlbench.analysis.mfu import efficiency
from dlbench.store.gather import copy_runs
from dlbench.store.store import Store


def run_ids(store: str) -> list[str]:
    """Every run id in the store ([] where the file does not exist yet)."""
    return [r.id for r in Store(store, readonly=True).runs()] if Path(store).exists() else []


def point_dict(p: object) -> dict[str, object]:
    """What a check may read of one stored point."""
    r = p.result  # type: ignore[attr-defined]
    m, e = r.metrics, efficiency(r)
    return {
        "model": r.spec.model,
        "device": r.spec.device,
        "device_model": r.env.identity.get("device_model", ""),
        "status": r.status,
        "throughput": m.throughput if m else None,
        "batch": r.spec.batch_size,
        "batch_group": r.extra.get("batch_group"),
        "precision": r.spec.precision,
        "compiled": r.spec.compile,
        "protocol": {k: getattr(r.spec.protocol, k) for k in ("preset", "warmup", "steps", "repeats", "statistic")},
        "dlbench_version": r.env.identity.get("dlbench_version"),
        "git_commit": r.env.descriptive.get("git_commit"),
        "math_mode": r.env.identity.get("math_mode"),
        "channels_last": r.spec.channels_last,
        "peak_memory": m.peak_memory_bytes if m else None,
        "facts": dict(r.extra),
        "tflops": e.achieved_tflops,
        "peak_tflops": e.peak_tflops,
        "mfu": e.mfu,
        "mfu_note": e.note or None,
        "error": r.error,
    }


def find_run(store: Store, a: argparse.Namespace) -> tuple[str | None, str]:
    """(the run this check reads, '') or (None, why there is none)."""
    if a.run_id:
        return a.run_id, ""
    before = set(Path(a.before).read_text().split()) if a.before else set()
    new = [r for r in store.runs() if r.id not in before and (not a.kind or r.kind == a.kind)]
    if len(new) != 1:
        return None, f"the step created {len(new)} run(s){f' of kind {a.kind}' if a.kind else ''}, not 1"
    return new[0].id, ""


def problems(pts: list[dict[str, object]], a: argparse.Namespace) -> list[str]:
    """Why the points are not the step's (wrong model or device), one line each."""
    out = [] if pts else ["the run has no points"]
    for q in pts:
        if a.model and q["model"] not in a.model.split(","):
            out.append(f"a point of model {q['model']}, not {a.model}")
        if a.device and q["device"] != a.device:
            out.append(f"a point on device {q['device']}, not {a.device}")
        if a.device == "cuda" and "NVIDIA" not in str(q["device_model"]) and q["status"] != "unsupported":
            out.append(f"a point whose device model is {q['device_model']!r}, not an NVIDIA GPU")
    return out


def check(a: argparse.Namespace) -> int:
    """Evaluate one check; 0 PASS, 1 FAIL."""
    why: list[str] = []
    pts: list[dict[str, object]] = []
    if str(a.rc) not in a.ok_rc.split(","):
        why.append(f"the step exited {a.rc}")
    if not Path(a.store).exists():
        why.append(f"no store at {a.store}")
    else:
        store = Store(a.store, readonly=True)
        run_id, missing = find_run(store, a)
        if run_id is None:
            why.append(missing)
        else:
            pts = [point_dict(p) for p in store.points([store.get_run(run_id).id])]
            why += problems(pts, a)
    for q in pts:
        print("  ", {k: v for k, v in q.items() if v not in (None, {}, "")})
    if not why and not bool(eval(a.expr, {}, {"pts": pts})):
        why.append("the condition is false")
    print(f"{'FAIL' if why else 'PASS'}: {a.label}{': ' + '; '.join(why) if why else ''}", flush=True)
    return 1 if why else 0


def summary(out: str, store_path: str) -> dict[str, object]:
    """OUT's stages (each one's result.json; not the earlier tries kept beside them, stage-X.earlier-*) and every
    point of the merged store at store_path, for summary.json."""
    root = Path(out)
    stages = {
        d.name.removeprefix("stage-"): json.loads((d / "result.json").read_text())
        for d in sorted(root.glob("stage-*"))
        if "." not in d.name and (d / "result.json").is_file()
    }
    store = Store(store_path, readonly=True)
    points = [point_dict(p) for p in store.points()]
    store.close()
    return {"stages": stages, "points": points}


def gather(out: str, folder: str, stages: list[str]) -> int:
    """Every run of the stages' stores (OUT/stage-X/store.db) into FOLDER/store.db, then FOLDER/summary.json: one
    process for the merge (each `dlbench` command costs its start-up); 1 when a store could not be read."""
    dest = Store(str(Path(folder) / "store.db"))
    status = 0
    for stage in stages:
        source = Path(out) / f"stage-{stage}" / "store.db"
        if not source.is_file():
            continue
        try:
            src = Store(str(source), readonly=True)
            copied = copy_runs(src, dest, [])
            src.close()
        except Exception as exc:  # a damaged stage store: the others are still merged
            print(f"merge: {source}: {type(exc).__name__}: {exc}", file=sys.stderr)
            status = 1
            continue
        print(f"merge: {source}: {copied.runs_added} run(s), {copied.points_added} point(s)")
    dest.close()  # the last connection: SQLite's write-ahead log checkpointed into store.db, which then moves alone
    text = json.dumps(summary(out, str(Path(folder) / "store.db")), indent=1, default=str)
    (Path(folder) / "summary.json").write_text(text + "\n", encoding="utf-8")
    return status


def main(argv: list[str] | None = None) -> int:
    """`ids STORE` or `check STORE LABEL EXPR ...`."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["summary"] and len(args) in (2, 3):
        store = args[2] if len(args) == 3 else str(Path(args[1]) / "store.db")
        print(json.dumps(summary(args[1], store), indent=1, default=str))
        return 0
    if args[:1] == ["gather"] and len(args) >= 3:
        return gather(args[1], args[2], args[3:])
    if args[:1] == ["ids"] and len(args) == 2:
        print("\n".join(run_ids(args[1])))
        return 0
    p = argparse.ArgumentParser(prog="check_run.py check")
    p.add_argument("store")
    p.add_argument("label")
    p.add_argument("expr")
    p.add_argument("--rc", type=int, required=True, help="the step's exit status")
    p.add_argument(
        "--ok-rc",
        default="0",
        help="the exit statuses that count as the step finishing (0; 0,1 where "
        "a point is expected to fail, as `run` exits 1 then)",
    )
    p.add_argument("--before", help="a file of the run ids before the step (`ids`)")
    p.add_argument("--run-id", help="the run the step created, as it printed it")
    p.add_argument("--kind", default="", help="the kind of run the step creates (run, sweep)")
    p.add_argument("--model", default="", help="the model(s) every point must be of (comma-separated)")
    p.add_argument("--device", default="", help="the device every point must be on")
    if args[:1] != ["check"]:
        p.error("usage: check_run.py ids STORE | check STORE LABEL EXPR --rc RC ...")
    return check(p.parse_args(args[1:]))


if __name__ == "__main__":
    sys.exit(main())
