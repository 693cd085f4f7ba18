"""A point's parallel layout, framework-free: data x tensor x pipeline parallel, micro-batches and recomputation,
as Megatron-LM and DLPerf describe a GPT run.

devices = data x tensor x pipeline; the per-device batch of a `PointSpec` is the batch of one data-parallel
replica (all its tensor and pipeline ranks see the same samples), so the global batch is batch x data. A
pipeline splits its replica's batch into `micro_batches` equal micro-batches; GPipe and 1F1B then leave each
stage idle for (P - 1) / (M + P - 1) of a step (the bubble), the fraction Narayanan et al. (SC'21, section
2.2.1) give for both schedules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Family = Literal["DP", "TP", "2D", "PP"]
FAMILIES: tuple[Family, ...] = ("DP", "TP", "2D", "PP")
SCHEDULES: tuple[str, ...] = ("1f1b", "gpipe")


@dataclass(frozen=True)
class Layout:
    """How a point's devices split the work: `data` replicas, each a `pipeline` of stages, each stage's layers
    split over `tensor` ranks; `micro_batches` per replica step; `recompute` = activation checkpointing."""

    data: int = 1
    tensor: int = 1
    pipeline: int = 1
    micro_batches: int = 1
    recompute: bool = False

    @property
    def devices(self) -> int:
        """data x tensor x pipeline."""
        return self.data * self.tensor * self.pipeline

    @property
    def splits_model(self) -> bool:
        """Whether a rank holds only part of the model (tensor or pipeline parallel)."""
        return self.tensor > 1 or self.pipeline > 1

    @property
    def family(self) -> Family:
        """DLPerf's group: PP with a pipeline, 2D with tensor and data parallel, TP with tensor alone, else DP."""
        if self.pipeline > 1:
            return "PP"
        if self.tensor > 1:
            return "2D" if self.data > 1 else "TP"
        return "DP"

    @property
    def bubble(self) -> float:
        """The idle fraction GPipe and 1F1B imply for a stage: (P - 1) / (M + P - 1); 0 without a pipeline."""
        return (self.pipeline - 1) / (self.micro_batches + self.pipeline - 1)

    @property
    def triple(self) -> str:
        """'2x4x4': data x tensor x pipeline, DLPerf's notation."""
        return f"{self.data}x{self.tensor}x{self.pipeline}"

    @property
    def label(self) -> str:
        """'DP4', 'TP2 PP2 M4 recompute' ...: the parts that are not 1 (DP1 on one device)."""
        parts = [f"DP{self.data}"] if self.data > 1 or not self.splits_model else []
        parts += [f"TP{self.tensor}"] if self.tensor > 1 else []
        parts += [f"PP{self.pipeline} M{self.micro_batches}"] if self.pipeline > 1 else []
        parts += ["recompute"] if self.recompute else []
        return " ".join(parts)


def layout_of(
    nodes: int, devices_per_node: int, tensor: int, pipeline: int, micro_batches: int, recompute: bool
) -> Layout:
    """The layout of a point's devices (data parallel = devices / (tensor x pipeline); the spec checked it)."""
    devices = nodes * devices_per_node
    return Layout(devices // (tensor * pipeline), tensor, pipeline, micro_batches, recompute)


def layout_problem(devices: int, batch: int, tensor: int, pipeline: int, micro_batches: int) -> str | None:
    """Why these devices cannot take this layout (one line), or None."""
    if devices % (tensor * pipeline):
        return (
            f"data parallel = devices / (tensor x pipeline) must be whole: {devices} device(s) do not divide "
            f"by {tensor} x {pipeline}; use a scale that is a multiple of {tensor * pipeline}"
        )
    if micro_batches > 1 and pipeline == 1:
        return "--micro-batches splits a pipeline's batch: use it with --pipeline-parallel 2 or more"
    if batch % micro_batches:
        return (
            f"the batch ({batch} per data-parallel replica) must split into {micro_batches} equal "
            "micro-batches: use a batch that is a multiple of --micro-batches"
        )
    return None


__all__ = ["FAMILIES", "SCHEDULES", "Family", "Layout", "layout_of", "layout_problem"]
