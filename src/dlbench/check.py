"""Worker-side checks run in a framework's own interpreter: ``<python> -m dlbench.check params|converge|same-model``.

``cuda FW`` says whether the framework here sees a GPU (`dlbench env --device cuda`). They print one JSON object on
stdout, so that tests and `dlbench list` can ask any environment.
"""

from __future__ import annotations

import argparse
import json
import sys

from dlbench.cases import Case
from dlbench.points import Shared, point
from dlbench.spec import PointSpec, Protocol


def version(framework: str) -> dict[str, object]:
    """{"version": the framework's installed version here, or None}; cheap, never imports the framework."""
    from dlbench.backends import get_info

    return {"version": get_info(framework).installed_version()}


def params(framework: str) -> dict[str, object]:
    """{case: trainable parameter count, or 'unsupported: reason'} for every case, plus the version."""
    from dlbench.backends import get_info, load_backend
    from dlbench.cases import all_cases

    backend = load_backend(framework)
    out: dict[str, object] = {"version": get_info(framework).installed_version() or ""}
    for case in all_cases():
        reason = backend.case_support(case)
        out[case.name] = f"unsupported: {reason}" if reason else backend.count_params(case)
    return out


def converge(
    framework: str, model: str, steps: int, batch: int, input_size: int | None, precision: str
) -> dict[str, object]:
    """Losses of `steps` train steps on one fixed small batch (does the backend really train?)."""
    from dlbench.backends import load_backend
    from dlbench.cases import get_case
    from dlbench.wire import RankContext
    from dlbench.worker import refusal

    backend = load_backend(framework)
    shared = Shared(protocol=Protocol(0, steps, 1, "median"), input_size=input_size)
    spec = point(framework, model, batch, precision, shared)  # type: ignore[arg-type]
    case = get_case(model)
    reason = refusal(backend, spec)
    if reason:
        return {"unsupported": reason}
    trainer = backend.build(spec, case, RankContext())
    losses = []
    for _ in range(steps):
        trainer.train_step(trainer.next_batch())
        losses.append(trainer.loss())
    trainer.close()
    return {"losses": losses}


def cuda(framework: str) -> dict[str, object]:
    """{"reason": why the framework here would refuse a CUDA point (its build sees no GPU, an old driver ...),
    or None}: the backend's own refusal of a one-device CUDA ResNet-50 point."""
    from dlbench.backends import load_backend

    spec = point(framework, "resnet50", 1, "fp32", Shared(protocol=Protocol(0, 1, 1, "median"), device="cuda"))
    return {"reason": load_backend(framework).no_gpu_reason(spec)}


def same_model(
    framework: str, model: str, folder: str, input_size: int | None, float64: bool, params: list[str]
) -> dict[str, object]:
    """Run the canonical weights through the framework's model and one train step (backends/same_model.py);
    `params` are the case's NAME=VALUE parameters."""
    from pathlib import Path

    from dlbench.backends import load_backend
    from dlbench.backends.same_model import run
    from dlbench.cases import get_case

    values = {name: int(value) for name, _, value in (p.partition("=") for p in params)}
    case = get_case(model).configured(values)

    def spec_of(check: Case, batch: int) -> PointSpec:  # one fp32 CPU point, built as every point is (points.py)
        shared = Shared(protocol=Protocol(0, 1, 1, "median"), input_size=input_size)
        return point(framework, check, batch, "fp32", shared, dict(check.values))

    return run(load_backend(framework), framework, case, Path(folder), spec_of, float64)


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and print the JSON answer."""
    p = argparse.ArgumentParser(prog="python -m dlbench.check")
    sub = p.add_subparsers(dest="what", required=True)
    sp = sub.add_parser("params")
    sp.add_argument("framework")
    sv = sub.add_parser("version")
    sv.add_argument("framework")
    sg = sub.add_parser("cuda")
    sg.add_argument("framework")
    sc = sub.add_parser("converge")
    sc.add_argument("framework")
    sc.add_argument("model")
    sc.add_argument("--steps", type=int, default=20)
    sc.add_argument("--batch", type=int, default=4)
    sc.add_argument("--input-size", type=int, default=None)
    sc.add_argument("--precision", default="fp32")
    ss = sub.add_parser("same-model")
    ss.add_argument("framework")
    ss.add_argument("model")
    ss.add_argument("folder")
    ss.add_argument("--input-size", type=int, default=None)
    ss.add_argument("--float64", action="store_true")
    ss.add_argument("--param", action="append", default=[])
    a = p.parse_args(argv)
    if a.what == "params":
        out = params(a.framework)
    elif a.what == "version":
        out = version(a.framework)
    elif a.what == "cuda":
        out = cuda(a.framework)
    elif a.what == "same-model":
        out = same_model(a.framework, a.model, a.folder, a.input_size, a.float64, a.param)
    else:
        out = converge(a.framework, a.model, a.steps, a.batch, a.input_size, a.precision)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
