"""Jittor backend: the case's model (models.py), its input (data.py: a synthetic batch made once, or a
jittor.dataset loader) and a JittorTrainer.

Jittor always traces lazily and JIT-compiles fused kernels (cached on disk); it has no eager/compiled
switch, so ``--compile`` is refused and every result records ``compiled: jit (always)``. On a GPU it trains in
IEEE FP32 only (``use_tensorcore`` 0, and NVIDIA_TF32_OVERRIDE=0 set by the package: __init__.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jittor as jt

from dlbench.backends.base import Backend, Trainer, Unsupported, gpu_binding_problem
from dlbench.backends.decoder import decoder_facts
from dlbench.backends.jittor import TF32_OVERRIDE_VAR, data
from dlbench.backends.jittor.llama import param_count
from dlbench.backends.jittor.models import MODELS, build_model, count_trainable
from dlbench.backends.jittor.step import JittorTrainer
from dlbench.cases import Case, ImageInput
from dlbench.cases.arch import LlamaConfig
from dlbench.numerics import describe, resolve_precision
from dlbench.spec import PointSpec
from dlbench.wire import RankContext

# Jittor raises RuntimeError for a failed allocation: its CUDA allocator's "Unable to alloc cuda device memory",
# CUDA's own "out of memory" (cudaErrorMemoryAllocation) through checkCudaErrors.
OOM_TEXT: tuple[str, ...] = ("out of memory", "unable to alloc cuda device memory", "cudaerrormemoryallocation")


def tf32_state() -> dict[str, str]:
    """Jittor's tensor-core flag (read back from jt.flags) and the TF32 override cuBLAS and cuDNN read."""
    return {
        "jittor_use_tensorcore": str(jt.flags.use_tensorcore),
        TF32_OVERRIDE_VAR: os.environ.get(TF32_OVERRIDE_VAR, "unset"),
    }


class JittorBackend(Backend):
    """How Jittor trains a case."""

    name = "jittor"
    title = "Jittor"
    oom_texts = OOM_TEXT

    def cases(self) -> frozenset[str]:
        return frozenset(MODELS)

    def environment(self, spec: PointSpec) -> dict[str, str]:
        env = {"framework_version": jt.__version__, "jittor_cuda": str(bool(jt.has_cuda))}
        numerics = resolve_precision(spec.precision, spec.device)
        if spec.device == "cuda":
            state = tf32_state()
            env.update(state)
            tf32 = state["jittor_use_tensorcore"] != "0" or state[TF32_OVERRIDE_VAR] != "0"
            env["math_mode"] = describe(numerics, tf32_in_use=tf32)
        else:
            env["math_mode"] = numerics.math_mode
        return env

    def refuse(self, spec: PointSpec) -> str | None:
        """What only this Jittor can tell: CUDA (the rules the spec shows are the capability table's)."""
        if spec.device == "cuda" and not jt.has_cuda:
            return "Jittor here has no CUDA (no nvcc found, or nvcc_path is empty); use --device cpu"
        return None

    def build(self, spec: PointSpec, case: Case, ctx: RankContext) -> Trainer:
        jt.set_global_seed(spec.seed)
        if spec.device == "cuda":
            visible = int(jt.core.get_device_count())
            problem = gpu_binding_problem(ctx, visible)
            if problem:
                raise Unsupported(problem)
            jt.flags.device_id = ctx.device_index(visible)  # before use_cuda: Jittor binds its CUDA device then
            jt.flags.use_cuda = 1
            jt.flags.use_tensorcore = 0  # CUBLAS_COMPUTE_32F; cuDNN's TF32 is off through NVIDIA_TF32_OVERRIDE
        else:
            jt.flags.use_cuda = 0
        source = data.batches(spec, case)  # a real loader's workers fork now, before the model exists
        model = build_model(case, spec.input_size if isinstance(case.input, ImageInput) else None)
        self._facts = {"compiled": "jit (always)", "loader": data.describe(spec)}
        self._facts.update(decoder_facts(case, spec.input_size))  # a decoder's FLOPs convention
        if spec.device == "cuda":
            self._facts.update(tf32_state(), device_id=jt.flags.device_id)
        return JittorTrainer(case, model, source, spec.global_batch)

    def count_params(self, case: Case) -> int:
        if isinstance(case.arch, LlamaConfig):  # one block's parameters x layers: llama3_8b is never built whole
            return param_count(case.arch)
        return count_trainable(build_model(case))

    def evaluator(self, spec: PointSpec, case: Case, weights: Path) -> Callable[[dict[str, Any]], dict[str, Any]]:
        from dlbench.backends.jittor import evaluate  # the evaluation process's own path: the model and its forward

        return evaluate.evaluator(spec, case, weights)
