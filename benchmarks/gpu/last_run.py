"""One check of the GPU validation run: `python last_run.py STORE LABEL EXPR` evaluates EXPR over the newest run's
points (`pts`: dicts with status, throughput, batch, batch_group, precision, math_mode, peak_memory, memory_kind,
achieved TFLOP/s, the datasheet peak and MFU),
prints them and PASS or FAIL, and exits 1 on FAIL."""

from __future__ import annotations

import sys

from dlbench.analysis.mfu import efficiency
from dlbench.store.store import Store


def main() -> int:
    """Evaluate the check over the newest run."""
    store_path, label, expr = sys.argv[1:4]
    store = Store(store_path, readonly=True)
    run = store.runs(limit=1)[0]
    pts = []
    for p in store.points([run.id]):
        r, m = p.result, p.result.metrics
        e = efficiency(r)
        pts.append({"status": r.status, "throughput": m.throughput if m else None, "batch": r.spec.batch_size,
                    "batch_group": r.extra.get("batch_group"),
                    "precision": r.spec.precision, "math_mode": r.env.identity.get("math_mode"),
                    "peak_memory": m.peak_memory_bytes if m else None, "memory_kind": m.memory_kind if m else None,
                    "tflops": e.achieved_tflops, "peak_tflops": e.peak_tflops, "mfu": e.mfu,
                    "mfu_note": e.note or None, "error": r.error})
    for q in pts:
        print("  ", {k: v for k, v in q.items() if v is not None})
    ok = bool(eval(expr, {}, {"pts": pts}))  # noqa: S307 - the expression is this folder's own script
    print(f"{'PASS' if ok else 'FAIL'}: {label}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
