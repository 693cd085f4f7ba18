"""A point's parallel layout, framework-free: one value that carries every parallel dimension and option of a point
(data x tensor x pipeline parallel, micro-batches, the pipeline's schedule, recomputation, FSDP, context and expert
parallel, a MoE's routing, DDP's bucket size), validated together, as Megatron-LM and DLPerf describe a GPT run and
torchtitan's `ParallelDims` carries them.

devices = data x tensor x pipeline; the per-device batch of a `PointSpec` is the batch of one data-parallel
replica (all its tensor and pipeline ranks see the same samples), so the global batch is batch x data. A
pipeline splits its replica's batch into `micro_batches` equal micro-batches; GPipe and 1F1B then leave each
stage idle for (P - 1) / (M + P - 1) of a step (the bubble), the fraction Narayanan et al. (SC'21, section
2.2.1) give for both schedules.

Each option is one field, spelled the same everywhere: its field name is the suite's key and, with dashes, the
`dlbench run` option (`--tensor-parallel`); the field's metadata holds that option's help, from which the command
line is made. Adding an option is a field here (and its spelling in the suite's schema, and the backend that runs
it).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

Family = Literal["DP", "TP", "2D", "PP"]
FAMILIES: tuple[Family, ...] = ("DP", "TP", "2D", "PP")
SCHEDULES: tuple[str, ...] = ("1f1b", "gpipe")
ROUTINGS: tuple[str, ...] = ("learned", "balanced")  # a MoE's routing: its router's, or forced round robin
MAX_COUNT = 2**31 - 1  # as spec.MAX_COUNT: the most a store can hold and a worker allocate


def _option(default: Any, help_text: str, *, choices: tuple[str, ...] = ()) -> Any:
    """A layout option: its default, the help its `dlbench run` option shows, the values it takes (text options)."""
    return field(default=default, metadata={"help": help_text, "choices": choices})


@dataclass(frozen=True)
class Layout:
    """How a point's devices split the work: `data` replicas (derived: the point sets it from its devices), each a
    pipeline of `pipeline_parallel` stages, each stage's layers split over `tensor_parallel` ranks; `micro_batches`
    per replica step under `schedule`; `recompute` = activation checkpointing; and the options of the llama, MoE
    and DDP points (FSDP, context and expert parallel, routing, bucket size)."""

    data: int = 1
    tensor_parallel: int = _option(1, "Split each layer over T devices (Megatron's column/row split; GPT cases).")
    pipeline_parallel: int = _option(
        1, "Split the layers into P pipeline stages (GPT cases). Data parallel = devices / (T x P)."
    )
    micro_batches: int = _option(1, "Micro-batches a pipeline splits each replica's batch into.")
    recompute: bool = _option(
        False, "Recompute activations in the backward pass (activation checkpointing, as DLPerf's GPT runs did)."
    )
    schedule: str = _option("1f1b", "The pipeline's schedule.", choices=SCHEDULES)
    fsdp: bool = _option(
        False, "FSDP2: shard parameters, gradients and optimizer state over the data-parallel ranks (llama and DiT)."
    )
    context_parallel: int = _option(1, "Split each sequence over N ranks (torch's context parallel: GPUs only).")
    expert_parallel: int = _option(
        1, "Place a MoE's experts over N ranks, tokens exchanged by all-to-all (torch, moe cases)."
    )
    routing: str = _option(
        "learned",
        "balanced forces round-robin routing, only to reproduce force-balanced published MoE figures.",
        choices=ROUTINGS,
    )
    bucket_mb: int | None = _option(
        None,
        "DDP's gradient bucket size in MB (ddp, ddp-fp16, ddp-bf16, powersgd, replicated-pscpu; part of the "
        "point's identity). Default: torch's 25.",
    )

    @property
    def devices(self) -> int:
        """data x tensor x pipeline."""
        return self.data * self.tensor_parallel * self.pipeline_parallel

    @property
    def splits_model(self) -> bool:
        """Whether a rank holds only part of the model (tensor or pipeline parallel)."""
        return self.tensor_parallel > 1 or self.pipeline_parallel > 1

    @property
    def family(self) -> Family:
        """DLPerf's group: PP with a pipeline, 2D with tensor and data parallel, TP with tensor alone, else DP."""
        if self.pipeline_parallel > 1:
            return "PP"
        if self.tensor_parallel > 1:
            return "2D" if self.data > 1 else "TP"
        return "DP"

    @property
    def bubble(self) -> float:
        """The idle fraction GPipe and 1F1B imply for a stage: (P - 1) / (M + P - 1); 0 without a pipeline."""
        return (self.pipeline_parallel - 1) / (self.micro_batches + self.pipeline_parallel - 1)

    @property
    def triple(self) -> str:
        """'2x4x4': data x tensor x pipeline, DLPerf's notation."""
        return f"{self.data}x{self.tensor_parallel}x{self.pipeline_parallel}"

    @property
    def label(self) -> str:
        """'DP4', 'TP2 PP2 M4 recompute' ...: the parts that are not 1 (DP1 on one device)."""
        parts = [f"DP{self.data}"] if self.data > 1 or not self.splits_model else []
        parts += [f"TP{self.tensor_parallel}"] if self.tensor_parallel > 1 else []
        parts += [f"PP{self.pipeline_parallel} M{self.micro_batches}"] if self.pipeline_parallel > 1 else []
        parts += ["recompute"] if self.recompute else []
        return " ".join(parts)

    def on(self, devices: int) -> Layout:
        """This layout over a point's devices: its data parallel = devices / (tensor x pipeline) (problem() first)."""
        return dataclasses.replace(self, data=max(1, devices // (self.tensor_parallel * self.pipeline_parallel)))

    def problem(self, devices: int, batch: int) -> str | None:
        """Why this layout cannot run over these devices at this per-replica batch (one line), or None."""
        for f in option_fields():
            why = _value_problem(f, getattr(self, f.name))
            if why:
                return why
        tensor, pipeline, micro = self.tensor_parallel, self.pipeline_parallel, self.micro_batches
        if devices % (tensor * pipeline):
            return (
                f"data parallel = devices / (tensor x pipeline) must be whole: {devices} device(s) do not divide "
                f"by {tensor} x {pipeline}; use a scale that is a multiple of {tensor * pipeline}"
            )
        if micro > 1 and pipeline == 1:
            return "--micro-batches splits a pipeline's batch: use it with --pipeline-parallel 2 or more"
        if batch % micro:
            return (
                f"the batch ({batch} per data-parallel replica) must split into {micro} equal "
                "micro-batches: use a batch that is a multiple of --micro-batches"
            )
        return None


def option_fields() -> tuple[dataclasses.Field[Any], ...]:
    """The layout's options (every field but the derived `data`), in the order `dlbench run --help` lists them."""
    return tuple(f for f in dataclasses.fields(Layout) if f.name != "data")


# How a count option is named in a one-line error (`tensor parallel must be a whole number ...`).
_COUNT_NAMES = {"micro_batches": "micro-batches", "bucket_mb": "bucket size (MB)"}


def _value_problem(f: dataclasses.Field[Any], value: object) -> str | None:
    """Why one option's value is not one it takes (one line), or None."""
    name = _COUNT_NAMES.get(f.name, f.name.replace("_", " "))
    if f.metadata["choices"]:
        if value not in f.metadata["choices"]:
            what = "pipeline schedule" if f.name == "schedule" else name
            return f"{what} must be one of {', '.join(f.metadata['choices'])}; got {value!r}"
        return None
    if isinstance(f.default, bool):
        return None if isinstance(value, bool) else f"{name} must be true or false; got {value!r}"
    if value is None and f.default is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
        return f"{name} must be a whole number from 1 to {MAX_COUNT:,}; got {value!r}"
    return None


__all__ = ["FAMILIES", "ROUTINGS", "SCHEDULES", "Family", "Layout", "option_fields"]
