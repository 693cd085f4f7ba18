"""A test double: a backend whose steps take a known time, and which can fail on purpose.

Its behaviour comes from $DLBENCH_FAKE (set by tests): "sleep:SECONDS" (default sleep:0.001), "oom",
"segfault", "hang", "raise", "nan", "sleep_at_build:SECONDS", "oom_above:N" (MemoryError when the batch
size is above N: the max-batch search's known threshold), "oom_above:N:error_at:M" (the same, and a RuntimeError,
not an out-of-memory one, at batch size M), "param_oom_above:NAME:N" (MemoryError when the case
parameter NAME is above N: a parameter search's threshold), "slow_input:SECONDS" (each step first waits that
long for its input, counted as input wait in measured steps) or "curve:FACTOR[:nan_at:N][:sleep:S]" (a loss
curve: the loss starts at 1 and is multiplied by FACTOR every step, NaN from step N on, each step sleeping S
seconds; convergence tests); or per model, e.g.
"alexnet=segfault,vgg16=hang" (models not named sleep 1 ms). It imports no framework.

Releases (#49): `-f fake==1.0,fake==2.0` runs without any setup, each point reporting its release as its
framework_version; an item "slow@RELEASE:FACTOR" among the settings (e.g. "sleep:0.02,slow@2.0:1.3") multiplies
the step time of that release and every later one by FACTOR: a regression planted at one release, as a bisection
over releases expects (several items multiply).

With $DLBENCH_FAKE_COMPILES set it accepts --compile (compiling nothing), as the GPU validation's rehearsal needs
for its compiled fp8 step; without it --compile is refused in the worker (tests reach that status through it).

A "hang" worker first appends the line "ready PID" to the file $DLBENCH_FAKE_READY names (when set): it is past
its start-up, so a test that stops it waits for that line rather than for a guessed time; a convergence run
appends it at its curve's first reading.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Iterator

from dlbench.backends.base import Backend, Trainer, fixed
from dlbench.cases import CASES, Case
from dlbench.spec import PointSpec
from dlbench.wire import RankContext

READY_VAR = "DLBENCH_FAKE_READY"
COMPILES_VAR = "DLBENCH_FAKE_COMPILES"  # set: --compile is accepted and changes nothing (the GPU rehearsal)


def _ready() -> None:
    """Append "ready PID" to $DLBENCH_FAKE_READY's file, where set (a test's sign that this worker started)."""
    path = os.environ.get(READY_VAR)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"ready {os.getpid()}\n")


def _release_key(release: str) -> tuple[tuple[int, str], ...]:
    """A release's order: its dotted parts, numbers as numbers (1.10 after 1.9)."""
    return tuple((int(p), "") if p.isdigit() else (-1, p) for p in release.split("."))


def slowdown(release: str | None, setting: str) -> tuple[float, str]:
    """The step-time factor a release gets from the "slow@RELEASE:FACTOR" items of a $DLBENCH_FAKE setting (every
    item whose release is at or before this one), and the setting without them."""
    items = [i.strip() for i in setting.split(",")]
    slow = [i for i in items if i.startswith("slow@")]
    factor = 1.0
    for item in slow:
        at, _, times = item.removeprefix("slow@").partition(":")
        if release is not None and _release_key(release) >= _release_key(at):
            factor *= float(times)
    return factor, ",".join(i for i in items if i and i not in slow)


def _mode_for(model: str, setting: str) -> str:
    """The behaviour for this model from a $DLBENCH_FAKE setting."""
    if "=" not in setting:
        return setting or "sleep:0.001"
    per_model = dict(item.split("=", 1) for item in setting.split(",") if "=" in item)
    return per_model.get(model, "sleep:0.001")


class FakeTrainer(Trainer):
    """Each step sleeps a fixed time and lowers a fake loss; its input is a fixed batch unless given a source."""

    def __init__(
        self,
        step_s: float,
        loss: float = 1.0,
        batches: Iterator[object] | None = None,
        factor: float = 0.99,
        nan_at: int | None = None,
    ) -> None:
        super().__init__(batches if batches is not None else fixed(None))
        self.step_s = step_s
        self._loss = loss
        self.factor, self.nan_at = factor, nan_at
        self.steps = 0
        self._window: list[float] = []
        self._read = False

    def train_step(self, batch: object) -> None:
        time.sleep(self.step_s)
        self.steps += 1
        self._loss = float("nan") if self.nan_at is not None and self.steps >= self.nan_at else self._loss * self.factor
        self._window.append(self._loss)

    def loss_window(self) -> float:
        """The mean loss of the steps since the last call (the last loss where no step was taken); the first
        reading of a curve says "ready" ($DLBENCH_FAKE_READY)."""
        out = sum(self._window) / len(self._window) if self._window else self._loss
        self._window = []
        if not self._read:
            self._read = True
            _ready()
        return out

    def sync(self) -> None:
        return None

    def loss(self) -> float:
        return self._loss


def _slow(wait_s: float) -> Iterator[None]:
    """An input source whose every item takes wait_s to arrive."""
    while True:
        time.sleep(wait_s)
        yield None


class FakeBackend(Backend):
    """Fake framework for protocol and isolation tests."""

    name = "fake"
    title = "fake"

    def cases(self) -> frozenset[str]:
        return frozenset(CASES)

    def environment(self, spec: PointSpec) -> dict[str, str]:
        return {"framework_version": spec.release or "0.0-fake"}

    def refuse(self, spec: PointSpec) -> str | None:
        if spec.compile and not os.environ.get(COMPILES_VAR):
            return "the fake backend has no compiler"
        return None

    def build(self, spec: PointSpec, case: Case, ctx: RankContext) -> Trainer:
        factor, setting = slowdown(spec.release, os.environ.get("DLBENCH_FAKE", ""))
        trainer = self._build(spec, _mode_for(spec.model, setting))
        if isinstance(trainer, FakeTrainer):
            trainer.step_s *= factor
        return trainer

    def _build(self, spec: PointSpec, mode: str) -> Trainer:
        """The trainer (or the failure) a $DLBENCH_FAKE mode asks for."""
        kind, _, arg = mode.partition(":")
        if kind == "oom":
            raise MemoryError("fake out of memory")
        if kind == "raise":
            raise RuntimeError("fake failure in the model")
        if kind == "segfault":
            ctypes.string_at(0)
        if kind == "hang":
            _ready()
            time.sleep(3600)
        if kind == "nan":
            return FakeTrainer(0.001, loss=float("nan"))
        if kind == "oom_above":
            limit, _, failing = arg.partition(":error_at:")
            if failing and spec.batch_size == int(failing):
                raise RuntimeError(f"fake cuDNN failure at batch {failing} (not a memory error)")
            if spec.batch_size > int(limit):
                raise MemoryError(f"fake out of memory: batch {spec.batch_size} > {limit}")
        if kind == "oom_above":
            return FakeTrainer(0.001)
        if kind == "param_oom_above":
            name, _, limit = arg.partition(":")
            if spec.params.get(name, 0) > int(limit):
                raise MemoryError(f"fake out of memory: {name} {spec.params[name]} > {limit}")
            return FakeTrainer(0.001)
        if kind == "curve":
            factor, *pairs = arg.split(":")
            opts = dict(zip(pairs[::2], pairs[1::2]))
            nan = opts.get("nan_at")
            return FakeTrainer(float(opts.get("sleep", 0.0)), factor=float(factor), nan_at=int(nan) if nan else None)
        if kind == "slow_input":
            return FakeTrainer(0.001, batches=_slow(float(arg)))
        if kind == "sleep_at_build":
            time.sleep(float(arg))
            return FakeTrainer(0.001)
        return FakeTrainer(float(arg or 0.001))

    def count_params(self, case: Case) -> int:
        return case.param_count
