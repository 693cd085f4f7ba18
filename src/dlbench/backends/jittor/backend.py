"""Jittor backend: the zoo's CNNs or our BERT, a synthetic batch made once (or, for ``--data real``, a
jittor.dataset loader: real_data.py), and a JittorTrainer.

Jittor always traces lazily and JIT-compiles fused kernels (cached on disk); it has no eager/compiled
switch, so ``--compile`` is refused and every result records ``compiled: jit (always)``.
"""

from __future__ import annotations

import jittor as jt

from dlbench.backends.base import Backend, Trainer
from dlbench.backends.jittor.models import build_model, count_trainable
from dlbench.backends.jittor.step import JittorTrainer, synthetic_batch
from dlbench.cases import Case, ImageInput
from dlbench.spec import PointSpec


class JittorBackend(Backend):
    """How Jittor trains a case."""

    name = "jittor"

    def __init__(self) -> None:
        self._loader: str | None = None

    def environment(self, spec: PointSpec) -> dict[str, str]:
        return {"framework_version": jt.__version__, "jittor_cuda": str(bool(jt.has_cuda))}

    def refuse(self, spec: PointSpec) -> str | None:
        if spec.device == "cuda" and not jt.has_cuda:
            return "Jittor here has no CUDA (no nvcc found, or nvcc_path is empty); use --device cpu"
        if spec.compile:
            return "Jittor always JIT-compiles fused kernels and has no separate compile switch; drop --compile"
        if spec.precision != "fp32":
            return "Jittor's mixed precision (float16 AMP) runs on CUDA only; on the CPU it trains in fp32"
        if spec.channels_last:
            return "Jittor's convolutions take NCHW only; channels-last is not offered"
        return None

    def build(self, spec: PointSpec, case: Case) -> Trainer:
        jt.set_global_seed(spec.seed)
        jt.flags.use_cuda = 1 if spec.device == "cuda" else 0
        source = None
        if spec.data == "real":  # the loader's workers fork now, before the model exists
            from dlbench.backends.jittor import real_data

            source = real_data.batches(spec, case)
            self._loader = real_data.describe(spec)
        model = build_model(case, spec.input_size if isinstance(case.input, ImageInput) else None)
        if source is not None:
            p = spec.protocol
            return real_data.LoaderTrainer(source, p.warmup, p.steps, case, model, spec.global_batch)
        batch = synthetic_batch(case, spec.batch_size, spec.input_size, spec.seed)
        return JittorTrainer(case, model, batch, spec.global_batch)

    def count_params(self, case: Case) -> int:
        return count_trainable(build_model(case))

    def finish(self) -> dict[str, object]:
        facts: dict[str, object] = {"compiled": "jit (always)"}
        if self._loader:
            facts["loader"] = self._loader
        return facts
