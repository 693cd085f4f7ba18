"""OneFlow backend: builds the case's model (oneflow.nn, no flowvision), its input and a OneflowTrainer.

Eager by default; ``--compile`` runs the whole train step as an ``oneflow.nn.Graph``. The worker's thread count
reaches OneFlow through ``oneflow.set_num_threads``. Several devices: OneFlow's DDP (distributed.py). The Llama and
MoE families (#46) are torchlike/llama.py and moe.py on oneflow.nn. Precision: fp32 only (TF32 turned off on GPUs,
__init__.py); OneFlow's autocast and loss scaling are not wired.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import oneflow as flow
from oneflow import nn

from dlbench.backends.base import Backend, Trainer, Unsupported, gpu_binding_problem
from dlbench.backends.context import BuildContext
from dlbench.backends.decoder import MOE_MEMBERS, decoder_facts, moe_shape_refusal
from dlbench.backends.gpu_arch import GpuBuild, cuda_version
from dlbench.backends.oneflow import TF32_VAR, data, distributed
from dlbench.backends.oneflow.models import MODELS, MoeModel, build_model, count_params
from dlbench.backends.oneflow.step import OneflowTrainer
from dlbench.cases import Case
from dlbench.numerics import resolve_precision
from dlbench.spec import PointSpec
from dlbench.wire import RankContext

# In OneFlow's errors for a failed allocation (CUDA's, and its CPU allocator's).
OOM_TEXT: tuple[str, ...] = ("out of memory", "failed to allocate", "bad_alloc")


class OneflowBackend(Backend):
    """How OneFlow trains a case."""

    name = "oneflow"
    title = "OneFlow"
    oom_texts = OOM_TEXT
    _routed: nn.Module | None = None  # the MoE a point trains, whose routing its facts report

    def gpu_build(self) -> GpuBuild | None:
        """OneFlow does not list its kernels' architectures: the CUDA version it was built with."""
        try:
            cuda = cuda_version(str(flow._oneflow_internal.flags.cuda_version()))
        except (AttributeError, RuntimeError):  # a CPU-only build has no CUDA version to give
            return None
        return GpuBuild("oneflow", cuda, (), "oneflow's flags.cuda_version()") if cuda else None

    def cases(self) -> frozenset[str]:
        return frozenset(MODELS)

    def environment(self, spec: PointSpec) -> dict[str, str]:
        env = {
            "framework_version": flow.__version__,
            "math_mode": resolve_precision(spec.precision, spec.device).math_mode,
        }
        if spec.device == "cuda" and flow.cuda.is_available():
            env[TF32_VAR] = os.environ.get(TF32_VAR, "unset")
            env["cuda"] = str(flow._oneflow_internal.flags.cuda_version())
        env.update(distributed.environment(spec))
        return env

    def refuse(self, spec: PointSpec) -> str | None:
        """What only this OneFlow can tell: a GPU it sees (the rules the spec shows are the capability table's)."""
        if spec.device == "cuda" and not flow.cuda.is_available():
            return "oneflow here sees no CUDA device: use --device cpu"
        if spec.compile and spec.model in MOE_MEMBERS:
            return (
                "a MoE's dispatch reads its experts' slice lengths on the host every layer, which a static "
                "oneflow.nn.Graph cannot: drop --compile"
            )
        return None

    def build(self, spec: PointSpec, case: Case, ctx: RankContext) -> Trainer:
        flow.manual_seed(spec.seed)
        if spec.threads:
            flow.set_num_threads(spec.threads)
        device = distributed.device_for(spec, ctx)
        if device.type == "cuda":
            problem = gpu_binding_problem(ctx, flow.cuda.device_count())
            if problem:
                raise Unsupported(problem)
        model = build_model(case, BuildContext.of(spec, ctx, device)).to(device)
        model = distributed.setup(spec, model)
        source = data.batches(spec, case, device, spec.seed + ctx.rank)  # each rank its own samples
        self._facts = {
            "compiled": "oneflow.nn.Graph" if spec.compile else "eager",
            "loader": data.describe(spec),
            "optimizer": case.optimizer.name,
            "oneflow_threads": spec.threads or "default",
            **decoder_facts(case, spec.input_size),  # a decoder's FLOPs convention, a MoE's figures (#46)
        }
        self._routed = model if isinstance(model, MoeModel) else None
        checksum = (lambda: distributed.param_checksum(model)) if spec.world_size > 1 else None
        return OneflowTrainer(case, model, source, device, spec.compile, spec.global_batch, checksum)

    def case_support(self, case: Case) -> str | None:
        return moe_shape_refusal(case) or super().case_support(case)  # the reason first where it is the routing

    def facts(self) -> dict[str, object]:
        """What build chose; a MoE point adds the routing its steps did (torchlike/moe.py)."""
        out = dict(self._facts)
        if self._routed is not None:
            out["routing"] = self._routed.routing_figures()
        return out

    def count_params(self, case: Case) -> int:
        return count_params(case)

    def evaluator(self, spec: PointSpec, case: Case, weights: Path) -> Callable[[dict[str, Any]], dict[str, Any]]:
        from dlbench.backends.oneflow import evaluate  # the evaluation process's own path: the model and its forward

        return evaluate.evaluator(spec, case, weights)
