"""Report test data: points with synthetic raw step times whose metrics come from the real statistics, a store
filled with them, and a point as measured with fewer repeats."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from dlbench.parallel import Layout
from dlbench.protocol.stats import summarize
from dlbench.records import Environment, PointResult, RankRaw, RepeatRaw
from dlbench.spec import PointSpec, Protocol
from dlbench.store.store import Store, StoredPoint
from tests.support.specs import flat_spec

PROTO = Protocol(warmup=1, steps=6, repeats=3, statistic="median", preset="quick")
CPU = {"device": "cpu", "device_model": "AMD EPYC", "device_count": "1", "cpu_model": "AMD EPYC", "threads": "2"}


def make_point(
    framework: str,
    model: str = "resnet50",
    batch: int = 8,
    nodes: int = 1,
    per_node: int = 1,
    step_s: float = 0.01,
    status: str = "ok",
    data: str = "synthetic",
    device: str = "cpu",
    identity: dict[str, str] | None = None,
    extra: dict[str, object] | None = None,
    error: str | None = None,
    seed: int = 0,
) -> PointResult:
    """A PointResult with synthetic raw step times (2% noise) and metrics derived by the real statistics."""
    spec = PointSpec(
        framework=framework,
        model=model,
        batch_size=batch,
        protocol=PROTO,
        data=data,  # type: ignore[arg-type]
        data_dir="/data" if data == "real" else None,
        nodes=nodes,
        devices_per_node=per_node,
        device=device,
        strategy="ddp" if nodes * per_node > 1 else "none",
    )  # type: ignore[arg-type]
    ident = {**(identity or CPU), "framework": framework, "framework_version": f"{framework}-1.0"}
    env = Environment(identity=ident, descriptive={"hostname": "fixture"})
    if status != "ok":
        return PointResult(
            spec,
            status,
            env=env,
            error=error or f"{status} on purpose",  # type: ignore[arg-type]
            extra=extra or {},
        )
    rng = np.random.default_rng(seed)
    ranks = []
    for rank in range(spec.world_size):
        reps = []
        for _ in range(PROTO.repeats):
            t = step_s * (1 + 0.02 * rng.standard_normal(PROTO.steps))
            reps.append(RepeatRaw(tuple(float(x) for x in t), float(t.sum())))
        ranks.append(RankRaw(rank, tuple(reps), peak_memory_bytes=(300 + 40 * batch) * 2**20))
    rt = tuple(ranks)
    return PointResult(spec, "ok", rt, summarize(spec, rt), env, extra=extra or {})


def fill_store(path: Path, points: list[PointResult]) -> str:
    """A store holding one run with these points; returns the run id."""
    store = Store(path)
    run_id = store.create_run("dlbench run (fixture)")
    for p in points:
        store.add_point(run_id, p)
    store.finish_run(run_id, "done")
    store.close()
    return run_id


def one_repeat(r: PointResult, repeats: int = 1) -> PointResult:
    """The point as measured with --repeats N (its first N repeats), metrics derived by the real statistics."""
    spec = dataclasses.replace(r.spec, protocol=dataclasses.replace(r.spec.protocol, repeats=repeats))
    ranks = tuple(dataclasses.replace(k, repeats=k.repeats[:repeats]) for k in r.ranks)
    return dataclasses.replace(r, spec=spec, ranks=ranks, metrics=summarize(spec, ranks))


GPT_SMALL = {"hidden": 256, "layers": 4, "heads": 4, "seq": 64, "vocab": 1000}


def gpt_point(
    pid: int,
    params: dict[str, int],
    devices: int,
    batch: int,
    step_s: float,
    tensor: int = 1,
    pipeline: int = 1,
    micro: int = 1,
    recompute: bool = True,
    group: str = "",
    device: str = "cpu",
    extra: dict[str, object] | None = None,
) -> StoredPoint:
    """A stored torch GPT point of the given layout, each step taking step_s, rank r peaking at r+1 MiB."""
    spec = PointSpec(
        framework="torch",
        model="gpt",
        batch_size=batch,
        protocol=Protocol(0, 2, 1, "median"),
        devices_per_node=devices,
        layout=Layout(tensor_parallel=tensor, pipeline_parallel=pipeline, micro_batches=micro, recompute=recompute),
        device=device,  # type: ignore[arg-type]
        precision="amp" if device == "cuda" else "fp32",
        case_params=tuple(sorted(params.items())),
    )
    ranks = tuple(
        RankRaw(r, (RepeatRaw((step_s, step_s), 2 * step_s),), peak_memory_bytes=(r + 1) * 2**20)
        for r in range(devices)
    )
    env = Environment(identity={"device": device, "framework": "torch"}, descriptive={})
    result = PointResult(
        spec,
        "ok",
        ranks,
        summarize(spec, ranks),
        env,
        started=float(pid),
        extra={"batch_group": group, **(extra or {})},
    )
    return StoredPoint(pid, "run1", result)


LLM_PROTO = Protocol(warmup=1, steps=4, repeats=2, statistic="median", preset="quick")
H100 = "NVIDIA H100 80GB HBM3"  # the table's H100 SXM5: 989.5 TFLOP/s bf16 dense, 67.0 fp32


def llm_point(
    model: str,
    step_s: float,
    devices: int,
    math_mode: str,
    gpu: str = H100,
    fsdp: bool = False,
    memory: int | None = 40 * 2**30,
    **kw: object,
) -> PointResult:
    """A GPU decoder point whose 2 repeats of 4 steps take step_s each, on `devices` ranks, with the math mode's
    identity (so MFU reads the peak table)."""
    spec = flat_spec(
        framework="torch",
        model=model,
        batch_size=2,
        protocol=LLM_PROTO,
        device="cuda",
        precision="bf16" if math_mode == "bf16" else "fp32",
        devices_per_node=devices,
        fsdp=fsdp,
        **kw,
    )
    env = Environment(
        identity={"device": "cuda", "device_model": gpu, "math_mode": math_mode, "framework": "torch"},
        descriptive={"hostname": "gpu-box"},
    )
    ranks = tuple(
        RankRaw(
            r,
            tuple(RepeatRaw((step_s,) * 4, 4 * step_s) for _ in range(2)),
            peak_memory_bytes=memory,
            memory_kind="nvml_used",
        )
        for r in range(devices)
    )
    return PointResult(spec, "ok", ranks, summarize(spec, ranks), env)


STRATEGY_CPU = {"device": "cpu", "device_model": "cpu", "device_count": "1", "cpu_model": "AMD EPYC"}


def strategy_point(
    strategy: str,
    devices: int,
    step_s: float,
    repeats: int = 3,
    seed: int = 0,
    status: str = "ok",
    model: str = "resnet50",
) -> PointResult:
    """A TF point whose every repeat's steps take step_s (1% noise), one process for every device."""
    spec = PointSpec(
        framework="tf",
        model=model,
        batch_size=2,
        protocol=Protocol(1, 4, repeats, "mean"),
        devices_per_node=devices,
        strategy=strategy,
    )
    env = Environment(identity={**STRATEGY_CPU, "framework": "tf", "framework_version": "2.21"})
    if status != "ok":
        return PointResult(spec, status, env=env, error=f"{strategy} refused here, on purpose")  # type: ignore[arg-type]
    rng = np.random.default_rng(seed)
    reps = tuple(
        RepeatRaw(tuple(float(x) for x in t), float(t.sum()))
        for t in (step_s * (1 + 0.01 * rng.standard_normal(4)) for _ in range(repeats))
    )
    ranks = (RankRaw(0, reps),)
    return PointResult(
        spec,
        "ok",
        ranks,
        summarize(spec, ranks),
        env,
        extra={"communication": f"mechanism of {strategy}", "replica_check": "2 copies equal"},
    )


def study_points(repeats: int = 3) -> list[PointResult]:
    """ResNet-50: 1 device, then ps-cpu clearly fastest at 2 devices, two strategies tied at 4."""
    return [
        strategy_point("none", 1, 0.10, repeats),
        strategy_point("ps-cpu", 2, 0.10, repeats, seed=1),
        strategy_point("replicated-copy", 2, 0.14, repeats, seed=2),
        strategy_point("ps-cpu", 4, 0.20, repeats, seed=3),
        strategy_point("replicated-copy", 4, 0.2002, repeats, seed=4),
        strategy_point("replicated-nccl", 4, 0, repeats, status="unsupported"),
    ]
