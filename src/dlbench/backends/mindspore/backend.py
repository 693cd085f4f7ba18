"""MindSpore backend: the case's model, a synthetic batch made once, and a MindsporeTrainer.

Without ``--compile`` the step runs in PyNative mode (MindSpore's default, op by op); with it the whole
step (forward, grads, optimizer) is one ms.jit graph, MindSpore's graph mode. --data real reads `dlbench data`
folders through mindspore.dataset (``real_data.py``).
"""

from __future__ import annotations

import mindspore as ms

from dlbench.backends.base import Backend, Trainer
from dlbench.backends.mindspore.models import TrainLoss, build_model, count_trainable
from dlbench.backends.mindspore.step import MindsporeTrainer, synthetic_batch
from dlbench.cases import Case, ImageInput
from dlbench.spec import PointSpec

# Checked on MindSpore 2.10's CPU target: a bf16 MatMul or Conv2D fails kernel selection.
_NO_BF16 = "MindSpore's CPU kernels have no bf16 (MatMul and Conv2D fail kernel selection), so no amp/bf16 on the CPU"


class MindsporeBackend(Backend):
    """How MindSpore trains a case."""

    name = "mindspore"

    def __init__(self) -> None:
        self._compiled: bool | None = None
        self._loader: str | None = None

    def environment(self, spec: PointSpec) -> dict[str, str]:
        return {"framework_version": ms.__version__, "mindspore_target": str(ms.get_context("device_target"))}

    def refuse(self, spec: PointSpec) -> str | None:
        if spec.device == "cuda" and ms.get_context("device_target") != "GPU":
            return f"MindSpore here has only its {ms.get_context('device_target')} target; use --device cpu"
        if spec.channels_last:
            return "MindSpore's convolutions take NCHW only; channels-last is not offered"
        if spec.precision != "fp32" and spec.device == "cpu":
            return _NO_BF16
        return None

    def build(self, spec: PointSpec, case: Case) -> Trainer:
        ms.set_seed(spec.seed)
        side = spec.input_size if isinstance(case.input, ImageInput) else None
        net = TrainLoss(case.name, build_model(case, side))
        self._compiled = spec.compile
        if spec.data == "real":  # files made by `dlbench data` (docs/data-layout.md), through mindspore.dataset
            from dlbench.backends.mindspore import real_data

            self._loader = f"mindspore.dataset, {spec.loader_workers or 1} parallel workers, prefetch"
            return real_data.build_trainer(spec, case, net)
        return MindsporeTrainer(case, net, synthetic_batch(case, spec.batch_size, spec.input_size, spec.seed),
                                spec.global_batch, compiled=spec.compile)

    def count_params(self, case: Case) -> int:
        return count_trainable(build_model(case))

    def is_oom(self, exc: BaseException) -> bool:
        if isinstance(exc, MemoryError):
            return True
        text = str(exc).lower()
        return isinstance(exc, RuntimeError) and ("out of memory" in text or "malloc" in text and "fail" in text)

    def finish(self) -> dict[str, object]:
        if self._compiled is None:
            return {}
        facts: dict[str, object] = {"compiled": "ms.jit (graph mode)" if self._compiled else "pynative"}
        if self._loader is not None:
            facts["loader"] = self._loader
        return facts
