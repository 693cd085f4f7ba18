"""MindSpore backend: the case's model, its input (data.py: a synthetic batch made once, or mindspore.dataset)
and a MindsporeTrainer.

Without ``--compile`` the step runs in PyNative mode (MindSpore's default, op by op); with it the whole step
(forward, grads, optimizer) is one ms.jit graph, MindSpore's graph mode. On a GPU the numerics policy is applied
through MindSpore's own switches: its cuDNN convolutions use TF32 unless told otherwise (``conv_allow_tf32``
defaults to True; ``matmul_allow_tf32`` to False), so fp32 turns both off and tf32 turns both on. The Llama and
MoE families (#46) record their FLOPs by the family's convention (backends/decoder.py); a MoE's dispatch reads its
routing on the host, so it trains in PyNative only (its capability table refuses --compile).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import mindspore as ms
from mindspore.nn.utils import no_init_parameters

from dlbench.backends.base import Trainer, Unsupported, gpu_binding_problem
from dlbench.backends.decoder import DecoderBackend, decoder_facts
from dlbench.backends.mindspore import data
from dlbench.backends.mindspore.models import MODELS, build_model, count_trainable, loss_cell
from dlbench.backends.mindspore.moe import MoeModel
from dlbench.backends.mindspore.step import MindsporeTrainer
from dlbench.cases import Case, ImageInput
from dlbench.numerics import Numerics, describe, resolve_precision
from dlbench.spec import PointSpec
from dlbench.wire import RankContext

# MindSpore raises these as RuntimeError: its memory pool ("Device(id:0) memory isn't enough and alloc failed",
# "Malloc for kernel input failed, Memory isn't enough"), the GPU allocator ("Malloc device memory failed"), a
# failed output allocation ("Allocate memory failed", seen on the CPU), "Out of memory" from its core, and a host
# allocation failing while ms.jit compiles (its static analysis re-raises C++'s "std::bad_alloc").
OOM_TEXT: tuple[str, ...] = (
    "memory isn't enough",
    "malloc device memory failed",
    "allocate memory failed",
    "out of memory",
    "std::bad_alloc",
)


def set_tf32(allow: bool) -> dict[str, str]:
    """TF32 for cuDNN convolutions and cuBLAS matmuls on or off (MindSpore's GPU op-precision switches, which
    have no getter): returns the settings applied, for math_mode and the facts."""
    from mindspore.device_context.gpu import op_precision

    op_precision.conv_allow_tf32(allow)
    op_precision.matmul_allow_tf32(allow)
    return {"conv_allow_tf32": str(allow), "matmul_allow_tf32": str(allow)}


class MindsporeBackend(DecoderBackend):
    """How MindSpore trains a case."""

    name = "mindspore"
    title = "MindSpore"
    oom_texts = OOM_TEXT

    def __init__(self) -> None:
        super().__init__()
        self._tf32: dict[str, str] = {}

    def cases(self) -> frozenset[str]:
        return frozenset(MODELS)

    def environment(self, spec: PointSpec) -> dict[str, str]:
        env = {"framework_version": ms.__version__, "mindspore_target": str(ms.get_context("device_target"))}
        numerics = resolve_precision(spec.precision, spec.device)
        env.update(self._tf32)
        env["math_mode"] = describe(numerics, tf32_in_use="True" in self._tf32.values())
        return env

    def refuse(self, spec: PointSpec) -> str | None:
        """What only this MindSpore can tell: a GPU target (the rules the spec shows are the capability table's)."""
        if spec.device == "cuda" and ms.get_context("device_target") != "GPU":
            return f"MindSpore here has only its {ms.get_context('device_target')} target; use --device cpu"
        return None

    def _gpu(self, numerics: Numerics, ctx: RankContext) -> int:
        """Bind this rank's GPU and apply the numerics policy; returns the GPU ordinal."""
        visible = int(ms.hal.device_count("GPU"))
        problem = gpu_binding_problem(ctx, visible)
        if problem:
            raise Unsupported(problem)
        index = ctx.device_index(visible)
        ms.set_device("GPU", index)
        self._tf32 = set_tf32(numerics.allow_tf32)
        return index

    def build(self, spec: PointSpec, case: Case, ctx: RankContext) -> Trainer:
        numerics = resolve_precision(spec.precision, spec.device)
        gpu = spec.device == "cuda"
        device = f"GPU:{self._gpu(numerics, ctx)}" if gpu else "CPU"
        ms.set_seed(spec.seed)
        side = spec.input_size if isinstance(case.input, ImageInput) else None
        model = build_model(case, side)
        net = loss_cell(case, model)
        self.routed = model if isinstance(model, MoeModel) else None
        self._facts = {
            "compiled": "ms.jit (graph mode)" if spec.compile else "pynative",
            "loader": data.describe(spec),
            "device": device,
            **self._tf32,
            **decoder_facts(case, spec.input_size),  # a decoder's FLOPs convention, a MoE's figures
        }
        return MindsporeTrainer(
            case, net, data.batches(spec, case), spec.global_batch, compiled=spec.compile, device_sync=gpu
        )

    def count_params(self, case: Case) -> int:
        if not decoder_facts(case, None):
            return count_trainable(build_model(case))
        with no_init_parameters():  # a decoder's shapes only: no weights made (the 8B would take 32 GB)
            return count_trainable(build_model(case))

    def evaluator(self, spec: PointSpec, case: Case, weights: Path) -> Callable[[dict[str, Any]], dict[str, Any]]:
        from dlbench.backends.mindspore import evaluate  # the evaluation process's own path: the model and its forward

        return evaluate.evaluator(spec, case, weights)
