"""Fairness: is each dlbench backend as fast as its framework's own canonical training code?

    python benchmarks/fairness.py [-f torch,tf,paddle,jax,...] [--batch-size 8] [--input-size 224] [--steps 10]
                                  [--rounds 3] [--device cpu|cuda] [--precision fp32] [--channels-last] [--compile]
                                  [--band 0.95,1.05]   (exit 1 where a median ratio is outside, or a side failed)

For every installed framework, ResNet-50 is trained by dlbench (`dlbench run`, one repeat) and by a bare loop
over the framework's canonical model, written as its own examples write it (benchmarks/fairness_loops/:
torchvision's ResNet-50 code, keras.applications.ResNet50 with Model.fit, paddle.vision.models.resnet50, a
Flax-ImageNet-example ResNet-50, Gluon's model-zoo ResNet-50 with a gluon.Trainer, the MindSpore model zoo's
ResNet-50 with value_and_grad, jittor.models.resnet50 with optimizer.step(loss), torchvision's ResNet-50 in
oneflow.nn (eager, or an nn.Graph) and in megengine.module under a GradManager (eager, or jit.trace)).
Each side runs in a fresh process of the framework's environment, with the same threads and glibc allocator
policy dlbench gives its workers (wire.THREAD_VARS, wire.ALLOCATOR_VARS), the same batch, input and step counts,
and the same throughput definition (samples in the measured steps / their wall time). Rounds interleave the two
sides, so slow drift on a shared machine hits both; the ratio dlbench / bare is reported per round and as the
median. The goal is 0.95-1.05 on the CPU and on a GPU. Runs on the machine's own load: read ratios, not speeds;
each round also prints the share of the CPUs other processes used during each side's measured steps (dlbench's
as its point recorded it, the loop's from /proc/stat the same way) and the load: on a shared machine a ratio
means something only where the two sides saw about the same. Beside it, an adjusted ratio divides each side's
throughput by the CPU share left to it (an estimate for CPU-bound sides, never a replacement).

Both sides take the same path, so that the ratio measures the harness only: the same warm-up (dlbench runs under
a preset without a minimum measured time, so it gets no calibration window the loop lacks), the same optimizer
constructor (torch: dlbench's SGD arguments, fused on a GPU), the same TF32 switches and Paddle flags, layout and
AMP level (from dlbench.backends.paddle.gpu_defaults), data made once on the device, and --compile as each
framework's default compiler on both sides.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from dlbench.backends.paddle import gpu_defaults
from dlbench.cases import get_case
from dlbench.envs.interpreters import NotInstalled, interpreter_for
from dlbench.machine.telemetry import telemetry_of
from dlbench.numerics import LOSS_SCALE_INIT, resolve_precision
from dlbench.spec import PRESETS
from dlbench.store.store import Store
from dlbench.wire import ALLOCATOR_VARS, THREAD_VARS

LOOPS = Path(__file__).parent / "fairness_loops"
FRAMEWORKS = (
    "torch",
    "tf",
    "paddle",
    "jax",
    "mxnet",
    "mindspore",
    "jittor",
    "oneflow",
    "megengine",
    "keras_jax",
    "keras_tf",
    "keras_torch",
)
MODEL = "resnet50"
# A preset with no minimum measured time on any device: dlbench then runs warm-up + measured steps, as the loops
# do (quick's GPU calibration window would warm dlbench up longer than the loop).
PRESET = next(
    name for name, proto in PRESETS.items() if proto.on("cuda").min_time_s == 0 and proto.on("cpu").min_time_s == 0
)


def _env(threads: int) -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.update({var: str(threads) for var in THREAD_VARS})
    for var, value in ALLOCATOR_VARS.items():
        env.setdefault(var, value)
    return env


def _common(a: argparse.Namespace) -> list[str]:
    out = [
        "--batch-size",
        str(a.batch_size),
        "--input-size",
        str(a.input_size),
        "--warmup",
        str(a.warmup),
        "--steps",
        str(a.steps),
        "--device",
        a.device,
        "--precision",
        a.precision,
    ]
    return out + (["--channels-last"] if a.channels_last else []) + (["--compile"] if a.compile else [])


def torch_optimizer(a: argparse.Namespace) -> dict[str, object]:
    """dlbench's torch optimizer arguments for the point (backends/torch/step.make_optimizer, as TorchTrainer
    calls it): the case's SGD at its lr for the batch, fused on a GPU."""
    o = get_case(MODEL).optimizer
    out: dict[str, object] = {"lr": o.lr_for(a.batch_size), "momentum": o.momentum, "weight_decay": o.weight_decay}
    return {**out, "fused": True} if a.device == "cuda" else out


def paddle_settings(a: argparse.Namespace) -> gpu_defaults.GpuPlan:
    """What dlbench's paddle backend applies for the point: flags (TF32 switches and Paddle's benchmark flags on
    a GPU), layout and AMP level."""
    numerics = resolve_precision(a.precision, a.device)
    return gpu_defaults.plan(a.device, numerics, a.channels_last, gpu_defaults.has_nhwc(get_case(MODEL)))


def loop_argv(framework: str, a: argparse.Namespace) -> list[str]:
    """The bare loop's options: the point, and dlbench's settings for it."""
    out = _common(a)
    if framework == "torch":
        out += ["--optimizer", json.dumps(torch_optimizer(a)), "--loss-scale-init", str(LOSS_SCALE_INIT)]
    elif framework == "paddle":
        settings = paddle_settings(a)
        out += [
            "--flags",
            json.dumps(settings.flags),
            "--layout",
            settings.layout,
            "--amp-level",
            settings.amp_level or "O1",
        ]
    return out


@dataclass(frozen=True)
class Side:
    """One side's measurement: samples/s, and the share of the CPUs other processes used in its measured steps."""

    samples_per_s: float
    others: float


def adjusted(dl: Side, bare: Side) -> float:
    """dlbench / bare with each side's throughput divided by the CPU share left to it in its measured steps: on
    a shared machine, what the ratio would read had both sides had the same CPU (both sides being CPU-bound);
    an estimate, printed beside the plain ratio, never instead of it."""
    if dl.others >= 1 or bare.others >= 1:
        return float("nan")  # a side had no CPU left to it, as measured: no estimate
    return (dl.samples_per_s / (1 - dl.others)) / (bare.samples_per_s / (1 - bare.others))


def bare(framework: str, python: str, a: argparse.Namespace) -> tuple[Side, str]:
    """(samples/s and others' share in its measured steps, what the loop trains) of one bare-loop process."""
    proc = subprocess.run(
        [python, str(LOOPS / f"{framework}_loop.py"), *loop_argv(framework, a)],
        capture_output=True,
        text=True,
        env=_env(a.threads),
        timeout=a.timeout,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{framework} bare loop failed: {proc.stderr.strip().splitlines()[-1:]}")
    answer = json.loads(proc.stdout.strip().splitlines()[-1])
    return Side(float(answer["samples_per_s"]), float(answer["others_share"])), str(answer["canonical"])


def dlbench_argv(framework: str, a: argparse.Namespace, store: Path) -> list[str]:
    """`dlbench run` of the same point: one repeat of the same warm-up and measured steps, no calibration."""
    return (
        [
            "-m",
            "dlbench",
            "run",
            "-f",
            framework,
            "-m",
            MODEL,
            "--batch-size",
            str(a.batch_size),
            "--input-size",
            str(a.input_size),
            "--preset",
            PRESET,
            "--warmup",
            str(a.warmup),
            "--steps",
            str(a.steps),
            "--repeats",
            "1",
            "--device",
            a.device,
            "--precision",
            a.precision,
            "--threads",
            str(a.threads),
            "--store",
            str(store),
        ]
        + (["--channels-last"] if a.channels_last else [])
        + (["--compile"] if a.compile else [])
    )


def dlbench(framework: str, a: argparse.Namespace, store: Path) -> Side:
    """samples/s of one `dlbench run` point (one repeat of the same steps), and the others' share of the CPUs in
    its measured windows as the point recorded it (its telemetry)."""
    before = {p.id for p in Store(store, readonly=True).points()} if store.exists() else set()
    argv = [sys.executable, *dlbench_argv(framework, a, store)]
    proc = subprocess.run(argv, capture_output=True, text=True, env=_env(a.threads), timeout=a.timeout, check=False)
    new = [p for p in Store(store, readonly=True).points() if p.id not in before]
    if proc.returncode != 0 or len(new) != 1 or new[0].result.metrics is None:
        raise RuntimeError(f"dlbench {framework} failed: {proc.stderr.strip().splitlines()[-1:]}")
    seen = telemetry_of(new[0].result)
    others = seen.contention.others_share if seen is not None else None
    return Side(new[0].result.metrics.throughput, float("nan") if others is None else others)


def parser() -> argparse.ArgumentParser:
    """The command line."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-f", "--frameworks", default=",".join(FRAMEWORKS))
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--input-size", type=int, default=224)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--precision", choices=("fp32", "tf32", "amp", "bf16"), default="fp32")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--compile", action="store_true", help="each framework's default compiler on both sides")
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument(
        "--band",
        type=band,
        default=None,
        metavar="LO,HI",
        help="judge each framework's median ratio: exit 1 outside LO..HI, or when a side failed",
    )
    return p


def band(text: str) -> tuple[float, float]:
    """'0.95,1.05' -> (0.95, 1.05)."""
    try:
        lo, hi = (float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--band wants LO,HI (0.95,1.05), not {text!r}") from None
    if not lo <= hi:
        raise argparse.ArgumentTypeError(f"--band {text}: LO must not exceed HI")
    return lo, hi


def rounds(fw: str, python: str, a: argparse.Namespace, store: Path, ratios: list[float], fair: list[float]) -> str:
    """Run a.rounds interleaved rounds of one framework, appending each ratio and adjusted ratio; what the bare
    loop trained. Raises RuntimeError where a side failed."""
    canonical = ""
    for r in range(a.rounds):
        first_bare = r % 2 == 0  # alternate who goes first
        order = ("bare", "dlbench") if first_bare else ("dlbench", "bare")
        got: dict[str, Side] = {}
        for side in order:
            if side == "bare":
                got["bare"], canonical = bare(fw, python, a)
            else:
                got["dlbench"] = dlbench(fw, a, store)
        dl, bl = got["dlbench"], got["bare"]
        ratios.append(dl.samples_per_s / bl.samples_per_s)
        fair.append(adjusted(dl, bl))
        print(
            f"{fw} round {r + 1}: dlbench {dl.samples_per_s:.2f} / bare {bl.samples_per_s:.2f} samples/s = "
            f"{ratios[-1]:.3f}; others used {dl.others:.0%} / {bl.others:.0%} of the CPUs while measured, "
            f"adjusted {fair[-1]:.3f} (load {os.getloadavg()[0]:.1f})",
            flush=True,
        )
    return canonical


def judged(rows: list[tuple[str, float]], failed: list[str], limits: tuple[float, float] | None) -> int:
    """Print each framework's verdict against the band; 1 when a median is outside it or a framework failed."""
    if limits is None:
        return 0
    lo, hi = limits
    bad = list(failed)
    for fw, med in rows:
        ok = lo <= med <= hi
        print(f"  {fw}: median ratio {med:.3f} {'within' if ok else 'OUTSIDE'} the band {lo}-{hi}")
        bad += [] if ok else [fw]
    for fw in failed:
        print(f"  {fw}: did not finish its rounds")
    return 1 if bad or not (rows or failed) else 0


def main() -> int:
    """Interleave bare and dlbench rounds per framework; print each ratio, what others used, and the medians."""
    a = parser().parse_args()
    rows, failed = [], []
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "fairness.db"
        for fw in a.frameworks.split(","):
            try:
                python = interpreter_for(fw)
            except NotInstalled as exc:
                print(f"{fw}: skipped ({exc})")
                continue
            ratios, fair, canonical = [], [], ""
            try:
                canonical = rounds(fw, python, a, store, ratios, fair)
            except (RuntimeError, subprocess.TimeoutExpired, ValueError) as exc:
                print(f"{fw}: failed: {exc}", flush=True)
                failed.append(fw)
                continue
            rows.append((fw, statistics.median(ratios), min(ratios), max(ratios), statistics.median(fair), canonical))
    print(
        f"\nResNet-50, batch {a.batch_size}, input {a.input_size}, {a.precision}{' +compile' if a.compile else ''}, "
        f"{a.device}, {a.steps} steps, {a.threads} threads, {a.rounds} interleaved rounds; load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print(f"{'framework':10} {'median':>7} {'min':>6} {'max':>6} {'adjusted':>8}  against")
    for fw, med, lo, hi, adj, canonical in rows:
        print(f"{fw:10} {med:7.3f} {lo:6.3f} {hi:6.3f} {adj:8.3f}  {canonical}")
    return judged([(fw, med) for fw, med, *_ in rows], failed, a.band)


if __name__ == "__main__":
    sys.exit(main())
