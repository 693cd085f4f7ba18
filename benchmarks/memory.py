"""The memory estimate (dlbench/analysis/memory.py) against measured CPU peaks: is it within MARGIN of each?

    python benchmarks/memory.py [--store PATH ...] [--only MODEL,...] [--markdown]

Each configuration below (every case that fits a 24 GiB CPU machine at its CPU batch with torch, plus larger
batches and sequences; and a few cases with JAX and TF) is measured once on the CPU, one warm-up and one measured
step: `dlbench run -f FW --device cpu --warmup 1 --steps 1 --repeats 1 -m MODEL -b BATCH [--input-size N]
[--param K=V] --store PATH`; a configuration a store already holds is not measured again (the first --store takes
new points; every one given is read). The measured peak is
dlbench's own stored peak memory (the worker's peak resident set, VmHWM), the load average is the one the point
recorded when its measured steps began. The results go to benchmarks/memory_peaks.json, which
tests/unit/analysis/test_memory.py checks the estimate against, and --markdown prints docs/memory.md's table.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

from dlbench.analysis.memory import MARGIN, estimate, gib
from dlbench.machine.env import cpu_model
from dlbench.records import PointResult
from dlbench.store.store import Store

OUT = Path(__file__).parent / "memory_peaks.json"
Params = tuple[tuple[str, int], ...]
# (model, batch, input size or None, case parameters), with torch
CONFIGS: tuple[tuple[str, int, int | None, Params], ...] = (
    ("llama_tiny", 8, None, ()),
    ("moe_tiny", 8, None, ()),
    ("alexnet", 16, None, ()),
    ("resnet50", 8, None, ()),
    ("wide_deep", 512, None, ()),
    ("bert_base", 8, None, ()),
    ("gpt", 1, None, ()),
    ("gpt2_small", 1, None, ()),
    ("inception_v3", 4, None, ()),
    ("resnet152", 4, None, ()),
    ("vgg16", 4, None, ()),
    ("face", 8, None, ()),
    ("llama_tiny", 64, None, ()),
    ("llama_tiny", 4, None, (("seq", 1024),)),
    ("moe_tiny", 8, None, (("seq", 512),)),
    ("resnet50", 32, 112, ()),
    ("alexnet", 64, None, ()),
    ("bert_base", 32, 64, ()),
    ("gpt", 2, 512, ()),
    ("vgg16", 16, 112, ()),
    ("dlrm_tiny", 256, None, ()),
    ("llama_tiny", 8, None, (("lora", 8),)),
    ("dlrm_tiny", 8192, None, ()),
    ("llama_tiny", 4, None, (("lora", 8), ("seq", 1024))),
    ("deepseek_tiny", 8, None, ()),
    ("gpt_oss_tiny", 8, None, ()),
    ("dit_tiny", 8, None, ()),
    ("dit_tiny", 64, None, ()),
)
# (framework, model, batch): the other frameworks' runtime and activations (analysis/memory.py FRAMEWORKS)
OTHERS: tuple[tuple[str, str, int], ...] = (
    ("jax", "llama_tiny", 8),
    ("jax", "resnet50", 8),
    ("jax", "bert_base", 8),
    ("jax", "alexnet", 16),
    ("jax", "gpt", 1),
    ("jax", "wide_deep", 512),
    ("tf", "resnet50", 8),
    ("tf", "alexnet", 16),
    ("tf", "bert_base", 8),
    ("tf", "wide_deep", 512),
)


def argv_of(fw: str, model: str, batch: int, size: int | None, params: Params, store: str) -> list[str]:
    """The dlbench command that measures one configuration."""
    out = ["run", "-f", fw, "--device", "cpu", "--warmup", "1", "--steps", "1", "--repeats", "1"]
    out += ["-m", model, "-b", str(batch), "--store", store]
    out += ["--input-size", str(size)] if size else []
    for k, v in params:
        out += ["--param", f"{k}={v}"]
    return out


def _stored(
    stores: list[Store], fw: str, model: str, batch: int, size: int | None, params: Params
) -> PointResult | None:
    want = (fw, model, batch, size, params, "cpu", "fp32")
    for store in stores:
        for p in reversed(store.points()):
            s = p.result.spec
            if (s.framework, s.model, s.batch_size, s.input_size, s.case_params, s.device, s.precision) == want:
                if p.result.status == "ok":
                    return p.result
    return None


def _load(result: PointResult) -> float | None:
    contention = result.extra.get("telemetry", {})
    found = contention.get("contention", {}) if isinstance(contention, dict) else {}
    load = found.get("load_avg") if isinstance(found, dict) else None
    return float(load[0]) if isinstance(load, list) and load else None


def main() -> int:
    """Measure what the stores lack, then compare every configuration's estimate with its peak."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", action="append", help="a store to read (the first takes new points)")
    ap.add_argument("--only", default="", help="comma-separated models")
    ap.add_argument("--markdown", action="store_true", help="print docs/memory.md's table")
    args = ap.parse_args()
    paths = args.store or ["dlbench-results/memory.db"]
    only = {m for m in args.only.split(",") if m}
    configs = [("torch", *c) for c in CONFIGS] + [(fw, model, batch, None, ()) for fw, model, batch in OTHERS]
    rows = []
    for fw, model, batch, size, params in configs:
        if only and model not in only:
            continue
        if (
            _stored([Store(p, readonly=True) for p in paths if Path(p).exists()], fw, model, batch, size, params)
            is None
        ):
            cmd = [sys.executable, "-m", "dlbench", *argv_of(fw, model, batch, size, params, paths[0])]
            subprocess.run(cmd, check=False, capture_output=True)
        readers = [Store(p, readonly=True) for p in paths if Path(p).exists()]
        found = _stored(readers, fw, model, batch, size, params)
        if found is None or found.metrics is None or found.metrics.peak_memory_bytes is None:
            print(f"{fw} {model} bs{batch}: not measured (see `dlbench results`)", file=sys.stderr)
            continue
        est = estimate(found.spec)
        assert est is not None
        peak = found.metrics.peak_memory_bytes
        rows.append(
            {
                "framework": fw,
                "model": model,
                "batch": batch,
                "input_size": size,
                "params": dict(params),
                "peak_bytes": peak,
                "estimate_bytes": est.total,
                "ratio": round(est.total / peak, 3),
                "load": _load(found),
                "command": "dlbench " + " ".join(argv_of(fw, model, batch, size, params, "STORE")),
            }
        )
    doc = {
        "machine": f"{cpu_model()}, {platform.machine()}",
        "measured": time.strftime("%Y-%m-%d"),
        "margin": MARGIN,
        "rows": rows,
    }
    if not only:
        OUT.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    if args.markdown:
        print("| framework | case | batch | input | measured peak | estimate | estimate / peak | load |")
        print("|---|---|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            extra = "".join(f" {k}={v}" for k, v in r["params"].items())
            load = f"{r['load']:.1f}" if r["load"] is not None else "?"
            print(
                f"| {r['framework']} | {r['model']}{extra} | {r['batch']} | {r['input_size'] or 'own'} | {gib(r['peak_bytes'])} | "
                f"{gib(r['estimate_bytes'])} | {r['ratio']:.2f} | {load} |"
            )
    worst = max((max(r["ratio"], 1 / r["ratio"]) for r in rows), default=1.0)
    print(f"{len(rows)} configurations; the furthest estimate is {worst:.2f}x its peak (margin {MARGIN:g})")
    return 0 if worst <= MARGIN else 1


if __name__ == "__main__":
    sys.exit(main())
