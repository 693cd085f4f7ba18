"""The trainer of one rank of a split GPT (split.py builds it): its stage and tensor-parallel shards, the
pipeline schedule (``torch.distributed.pipelining``: 1F1B or GPipe over M micro-batches, their gradients
averaged by the schedule) and the optimizer over its own parameters. Each stage's forward and backward compute
per step is timed around the stage's own chunk calls (CUDA events on a GPU); the sends and receives, which the
schedule issues apart, are not in them.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import loss_parallel

from dlbench.backends.torch import gpt_parallel
from dlbench.backends.torch.models import OPS, train_loss
from dlbench.backends.torch.step import Batch, TorchTrainer
from dlbench.cases import Case
from dlbench.numerics import Numerics
from dlbench.spec import PointSpec

SCHEDULES = {"1f1b": Schedule1F1B, "gpipe": ScheduleGPipe}


class StageClock:
    """The compute time of one pipeline stage's forward and backward chunks, per step: host clock on the CPU,
    CUDA events on a GPU (read once, at the end)."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.steps: list[dict[str, list[Any]]] = []

    def begin_step(self) -> None:
        """Start counting a new step's chunks."""
        self.steps.append({"forward": [], "backward": []})

    def timed(self, kind: str, call: Callable[[], Any]) -> Any:
        """Run one chunk's compute, timing it as `kind`."""
        if not self.steps:
            self.begin_step()
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = call()
            end.record()
            self.steps[-1][kind].append((start, end))
            return out
        t0 = time.perf_counter()
        out = call()
        self.steps[-1][kind].append(time.perf_counter() - t0)
        return out

    def median_ms(self, kind: str) -> float | None:
        """The median over steps of a step's total `kind` compute, in ms (None before any step)."""
        totals = [sum(self._seconds(x) for x in step[kind]) for step in self.steps if step[kind]]
        return statistics.median(totals) * 1000.0 if totals else None

    def _seconds(self, item: Any) -> float:
        return float(item[0].elapsed_time(item[1])) / 1000.0 if self.cuda else float(item)


class TimedStage(PipelineStage):
    """A PipelineStage whose forward and backward chunks are timed by a StageClock (the sends and receives,
    which the schedule issues apart, are not in them)."""

    def __init__(self, *args: Any, clock: StageClock, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.clock = clock

    def forward_one_chunk(self, *args: Any, **kwargs: Any) -> Any:
        return self.clock.timed("forward", lambda: super(TimedStage, self).forward_one_chunk(*args, **kwargs))

    def backward_one_chunk(self, *args: Any, **kwargs: Any) -> Any:
        return self.clock.timed("backward", lambda: super(TimedStage, self).backward_one_chunk(*args, **kwargs))


class SplitTrainer(TorchTrainer):
    """One rank of a split GPT: its stage (and tensor-parallel shards), the schedule where there is a pipeline,
    the optimizer over its own parameters."""

    def __init__(
        self,
        spec: PointSpec,
        case: Case,
        stage: torch.nn.Module,
        batches: Iterator[Batch],
        device: torch.device,
        numerics: Numerics,
        mesh: DeviceMesh,
        facts: dict[str, object],
    ) -> None:
        super().__init__(case, stage, batches, device, numerics, False, spec.global_batch)
        self.stage, self.mesh, self.layout, self.facts = stage, mesh, spec.layout, facts
        self.pp = mesh["pp"].get_local_rank()
        self.first, self.last = self.pp == 0, self.pp == self.layout.pipeline_parallel - 1
        self.emb_group = gpt_parallel.embedding_group(mesh, self.layout)
        self.clock = StageClock(device.type == "cuda")
        self.schedule = None
        if self.layout.pipeline_parallel > 1:
            pipe = TimedStage(
                stage, self.pp, self.layout.pipeline_parallel, device, group=mesh["pp"].get_group(), clock=self.clock
            )
            self.schedule = SCHEDULES[spec.layout.schedule](
                pipe, n_microbatches=self.layout.micro_batches, loss_fn=OPS.xent
            )

    def _loss_context(self) -> contextlib.AbstractContextManager[Any]:
        return loss_parallel() if self.layout.tensor_parallel > 1 else contextlib.nullcontext()

    def train_step(self, batch: Batch) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        with self._autocast(), self._loss_context():
            if self.schedule is None:
                loss = train_loss(self.case, self.stage, batch)
                loss.backward()
                self._last = _local(loss).detach()
            else:
                self._pipeline_step(batch)
        gpt_parallel.settle_gradients(self.stage, self.emb_group)
        self.optimizer.step()

    def _pipeline_step(self, batch: Batch) -> None:
        assert self.schedule is not None
        self.clock.begin_step()
        losses: list[torch.Tensor] = []
        if self.first:
            self.schedule.step(batch["input_ids"], return_outputs=False)
        elif self.last:
            self.schedule.step(target=batch["labels"], losses=losses, return_outputs=False)
        else:
            self.schedule.step(return_outputs=False)
        if self.last and losses:
            self._last = torch.stack([_local(x).detach() for x in losses]).mean()

    def loss(self) -> float:
        """The global batch's loss: the last stage's, averaged over the data-parallel replicas (a collective)."""
        mine = self._last.float() if self.last and self._last is not None else torch.zeros((), device=self.device)
        value = mine.clone().reshape(())
        if self.layout.pipeline_parallel > 1:
            dist.all_reduce(value, group=self.mesh["pp"].get_group())
        if self.layout.data > 1:
            dist.all_reduce(value, group=self.mesh["dp"].get_group())
            value /= self.layout.data
        return float(value.item())

    def param_checksum(self) -> float:
        return gpt_parallel.checksum(self.stage, self.mesh)

    def close(self) -> None:
        """Gather each stage's median forward and backward compute per step into the point's facts."""
        if self.schedule is not None:
            mine = (self.clock.median_ms("forward"), self.clock.median_ms("backward"))
            every: list[Any] = [None] * self.layout.pipeline_parallel
            dist.all_gather_object(every, mine, group=self.mesh["pp"].get_group())
            pipeline = self.facts.get("pipeline")
            if isinstance(pipeline, dict):
                pipeline["stage_forward_ms"] = [e[0] for e in every]
                pipeline["stage_backward_ms"] = [e[1] for e in every]
        super().close()


def _local(x: torch.Tensor) -> torch.Tensor:
    """A loss as a plain tensor (a DTensor from loss_parallel is replicated: any rank's value)."""
    return x.full_tensor() if isinstance(x, DTensor) else x


__all__ = ["SCHEDULES", "SplitTrainer", "StageClock", "TimedStage"]
