"""MegEngine backend: builds the case's model (megengine.module), its input and a MegengineTrainer.

Eager by default; ``--compile`` traces the whole train step with ``megengine.jit.trace(symbolic=True)``. The
thread count (the spec's, else the physical cores, as torch takes them) reaches MegEngine through its CPU device:
``multithreadN:0`` (its plain ``cpu0`` runs kernels on one thread). One device only: MegEngine's collectives run
on GPUs (NCCL) and it has no CPU collective backend (``init_process_group`` refuses the CPU), so a multi-process
CPU point is refused in one line. Precision: fp32 only; on a GPU with ``NVIDIA_TF32_OVERRIDE=0`` (set by the
package, read back into ``math_mode``, a GPU point refused where it is not in force: tf32.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import megengine as mge

from dlbench.backends.base import Backend, Trainer, Unsupported, gpu_binding_problem
from dlbench.backends.context import BuildContext
from dlbench.backends.megengine import cpu_device, data
from dlbench.backends.megengine.models import MODELS, build_model, count_trainable
from dlbench.backends.megengine.step import MegengineTrainer
from dlbench.backends.megengine.tf32 import TF32_OVERRIDE_VAR, fp32_problem, override_state, tf32_in_use
from dlbench.cases import Case
from dlbench.numerics import describe, resolve_precision
from dlbench.spec import PointSpec
from dlbench.wire import RankContext

# In MegEngine's errors for a failed allocation (its GPU and CPU allocators).
OOM_TEXT: tuple[str, ...] = ("out of memory", "bad_alloc", "failed to allocate")


class MegengineBackend(Backend):
    """How MegEngine trains a case."""

    name = "megengine"
    title = "MegEngine"
    oom_texts = OOM_TEXT

    def cases(self) -> frozenset[str]:
        return frozenset(MODELS)

    def environment(self, spec: PointSpec) -> dict[str, str]:
        state = override_state(os.environ)
        env = {
            "framework_version": mge.__version__,
            TF32_OVERRIDE_VAR: state,
            "math_mode": describe(resolve_precision(spec.precision, spec.device), tf32_in_use(spec.device, state)),
            "megengine_device": str(mge.get_default_device()),
        }
        if spec.device == "cuda" and mge.is_cuda_available():
            env["cuda"] = str(mge.get_cuda_version())
            env["cudnn"] = str(mge.get_cudnn_version())
        return env

    def refuse(self, spec: PointSpec) -> str | None:
        """What only this MegEngine can tell (the rules the spec shows are the capability table's): a GPU it sees,
        and fp32 kept IEEE under the TF32 override it read at import."""
        if spec.device == "cuda" and not mge.is_cuda_available():
            return "megengine here sees no CUDA device: use --device cpu"
        return fp32_problem(spec.device, override_state(os.environ))

    def build(self, spec: PointSpec, case: Case, ctx: RankContext) -> Trainer:
        mge.random.seed(spec.seed)
        if spec.device == "cuda":
            problem = gpu_binding_problem(ctx, mge.get_device_count("gpu"))
            if problem:
                raise Unsupported(problem)
            device = f"gpu{ctx.device_index(mge.get_device_count('gpu'))}"
        else:
            device = cpu_device(spec.threads)
        mge.set_default_device(device)
        model = build_model(case, BuildContext.of(spec, ctx, device))
        source = data.batches(spec, case, device)
        self._facts = {
            "compiled": "megengine.jit.trace(symbolic=True)" if spec.compile else "eager",
            "loader": data.describe(spec),
            "optimizer": case.optimizer.name,
            "device": device,
            TF32_OVERRIDE_VAR: override_state(os.environ),
        }
        return MegengineTrainer(case, model, source, spec.compile, spec.global_batch)

    def evaluator(self, spec: PointSpec, case: Case, weights: Path) -> Callable[[dict[str, Any]], dict[str, Any]]:
        from dlbench.backends.megengine import evaluate  # the evaluation process's own path: the model and its forward

        return evaluate.evaluator(spec, case, weights)

    def count_params(self, case: Case) -> int:
        return count_trainable(build_model(case))
