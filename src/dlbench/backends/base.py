"""The interface every framework backend implements. Worker side: implementations import their framework."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any

from dlbench.cases import Case
from dlbench.spec import PointSpec


class Trainer(ABC):
    """A model, its optimizer and one batch (or a loader), ready to take train steps."""

    @abstractmethod
    def step(self) -> None:
        """One train step: forward, loss, backward, optimizer update. May return before the device is done."""

    @abstractmethod
    def sync(self) -> None:
        """Block until every queued device operation has finished."""

    @abstractmethod
    def loss(self) -> float:
        """The last step's loss as a Python float."""

    def peak_memory_bytes(self) -> int | None:
        """Peak device memory, or None on the CPU (the worker then reports its peak RSS)."""
        return None

    def input_wait_s(self) -> float:
        """Seconds spent waiting for input since the last reset (0 for synthetic data)."""
        return 0.0

    def reset_input_wait(self) -> None:
        """Start counting input wait afresh."""

    def close(self) -> None:
        """Release loaders and other resources."""


def strategy_run(spec: PointSpec, default: str) -> str:
    """The gradient strategy a point runs: 'none' on one device; on several the spec's, 'none' meaning the
    framework's default (torch ddp, jax sharding, paddle fleet ...)."""
    if spec.world_size == 1:
        return "none"
    return default if spec.strategy == "none" else spec.strategy


def strategy_refusal(spec: PointSpec, default: str, supported: tuple[str, ...], advice: str) -> str | None:
    """The strategy checks every multi-device backend shares: a strategy on one device, or one the framework
    lacks (then `advice` says what to use); None when the strategy can run."""
    if spec.world_size == 1 and spec.strategy != "none":
        return f"strategy {spec.strategy} needs several devices: use --scale 1n2c or more, or --strategy none"
    if spec.world_size > 1 and strategy_run(spec, default) not in supported:
        return f"{spec.framework} has no {spec.strategy} strategy; {advice}"
    return None


class InputFed:
    """Mixin for a Trainer fed from an iterator at every step (real data): ``next_input()`` takes the next
    batch and counts the time spent waiting for it, in measured steps only.

    The protocol runs, per repeat, `warmup` untimed steps then `steps` timed ones, so the k-th batch taken
    after reset_input_wait() belongs to a timed step when k mod (warmup + steps) >= warmup. The first batch
    is taken at build time (``first_input()``), never timed.
    """

    def feed(self, source: Iterator[Any], warmup: int, steps: int) -> Any:
        """Attach the source; returns its first batch (taken now, untimed)."""
        self.source = source
        self.cycle, self.warmup = warmup + steps, warmup
        self.waited, self.taken = 0.0, 0
        return next(source)

    def next_input(self) -> Any:
        """The next batch; its wait counts when this step is a measured one."""
        start = time.perf_counter()
        batch = next(self.source)
        if self.taken % self.cycle >= self.warmup:
            self.waited += time.perf_counter() - start
        self.taken += 1
        return batch

    def input_wait_s(self) -> float:
        return self.waited

    def reset_input_wait(self) -> None:
        self.waited, self.taken = 0.0, 0

    def close(self) -> None:
        close = getattr(self.source, "close", None)
        if close is not None:
            close()


class Backend(ABC):
    """How one framework builds a case's model, its data and one train step."""

    name: str = ""

    @abstractmethod
    def environment(self, spec: PointSpec) -> dict[str, str]:
        """Identity facts only the framework knows: framework_version, device_model, cuda, cudnn, nccl ..."""

    def case_support(self, case: Case) -> str | None:
        """A one-line reason when this framework cannot express the case exactly, else None."""
        return None

    def refuse(self, spec: PointSpec) -> str | None:
        """A one-line reason when this framework cannot run the spec as asked, else None."""
        return None

    @abstractmethod
    def build(self, spec: PointSpec, case: Case) -> Trainer:
        """Build model, optimizer and data for the case on the spec's device. Never timed."""

    @abstractmethod
    def count_params(self, case: Case) -> int:
        """Trainable parameters of this backend's model for the case."""

    def is_oom(self, exc: BaseException) -> bool:
        """Whether an exception is the framework's own out-of-memory error."""
        return isinstance(exc, MemoryError)

    def finish(self) -> dict[str, object]:
        """Backend facts recorded after measuring, e.g. {"compiled": "xla"}."""
        return {}
