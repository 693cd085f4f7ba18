"""PaddlePaddle backend: builds the case's model, a synthetic batch and a PaddleTrainer; joins a fleet job on
several devices (distributed.py)."""

from __future__ import annotations

import functools
import os

import paddle

from dlbench.backends.base import Backend, Trainer
from dlbench.backends.paddle import distributed
from dlbench.backends.paddle.data import synthetic_batch
from dlbench.backends.paddle.models import build_model, count_trainable
from dlbench.backends.paddle.step import PaddleTrainer
from dlbench.cases import Case, ImageInput
from dlbench.spec import PointSpec


def _has_gpu() -> bool:
    """Whether this paddle build is a CUDA one and sees at least one GPU."""
    return bool(paddle.is_compiled_with_cuda()) and paddle.device.cuda.device_count() > 0


@functools.cache
def _autocast_takes_effect(dtype: str) -> bool:
    """Whether paddle's O1 autocast really computes a Linear in dtype on the current device.

    On a CPU without native bfloat16 paddle accepts ``auto_cast(dtype="bfloat16")`` and leaves every op
    in float32; a probe is the only honest check.
    """
    layer = paddle.nn.Linear(4, 4)
    with paddle.amp.auto_cast(enable=True, level="O1", dtype=dtype):
        out = layer(paddle.ones([2, 4]))
    return out.dtype == (paddle.bfloat16 if dtype == "bfloat16" else paddle.float16)


class PaddleBackend(Backend):
    """How PaddlePaddle trains a case."""

    name = "paddle"

    def __init__(self) -> None:
        self._facts: dict[str, object] = {}

    def _configure(self, spec: PointSpec) -> int:
        """Select the device and the CPU thread count (the worker's OMP_NUM_THREADS, which paddle honours)."""
        gpu = distributed.local_rank() if spec.world_size > 1 else 0  # a node's ranks share its GPUs
        paddle.set_device(f"gpu:{gpu}" if spec.device == "cuda" and _has_gpu() else "cpu")
        # paddle sets OMP_NUM_THREADS=1 at import when it is unset: one thread unless told.
        threads = spec.threads or int(os.environ.get("OMP_NUM_THREADS", "1") or 1)
        paddle.base.core.set_num_threads(threads)
        self._facts["paddle_threads"] = threads
        return threads

    def environment(self, spec: PointSpec) -> dict[str, str]:
        threads = self._configure(spec)
        env = {"framework_version": paddle.__version__, "paddle_commit": str(paddle.version.commit),
               "paddle_threads": str(threads),
               "paddle_onednn": str(paddle.get_flags(["FLAGS_use_mkldnn"])["FLAGS_use_mkldnn"])}
        if spec.device == "cuda" and _has_gpu():
            env["device_model"] = paddle.device.cuda.get_device_name(0)
            env["cuda"] = str(paddle.version.cuda())
            env["cudnn"] = str(paddle.version.cudnn())
            env["nccl"] = str(paddle.version.nccl()) if hasattr(paddle.version, "nccl") else ""
        if spec.world_size > 1:
            env.update({"dist_backend": distributed.comm_backend(spec), "strategy_run": distributed.strategy(spec)})
        return env

    def refuse(self, spec: PointSpec) -> str | None:
        if spec.device == "cuda" and not _has_gpu():
            return "paddle here is a CPU build or sees no GPU: use --device cpu"
        gpus = paddle.device.cuda.device_count() if _has_gpu() else 0
        reason = distributed.refuse(spec, gpus)
        if reason:
            return reason
        if spec.channels_last:
            return "the paddle backend builds NCHW models only; channels-last is not implemented"
        if spec.precision != "fp32" and spec.device == "cpu":
            self._configure(spec)
            if not _autocast_takes_effect("bfloat16"):
                return (f"--precision {spec.precision}: paddle's bfloat16 autocast leaves every op in float32 "
                        f"on this CPU (no native bf16); use --precision fp32")
        return None

    def build(self, spec: PointSpec, case: Case) -> Trainer:
        self._configure(spec)
        distributed.join(spec)  # several devices: fleet.init from the launcher's variables, bounded in time
        paddle.seed(spec.seed)  # the same initial parameters on every rank (DataParallel also broadcasts rank 0's)
        seed = spec.seed + distributed.rank()  # each rank its own samples; rank 0 is the 1-device batch
        on_gpu = spec.device == "cuda"
        num_classes = case.input.classes if isinstance(case.input, ImageInput) else 1000
        model = build_model(case.name, num_classes=num_classes)
        # amp: float16 with loss scaling on the GPU, bfloat16 on the CPU (as the torch backend does).
        amp_dtype = {"fp32": None, "bf16": "bfloat16", "amp": "float16" if on_gpu else "bfloat16"}[spec.precision]
        self._facts["autocast"] = f"O1 {amp_dtype}" if amp_dtype else "off"
        self._facts["compiled"] = "paddle.jit.to_static(full_graph=True)" if spec.compile else "eager"
        if spec.data == "real":  # files made by `dlbench data` (docs/data-layout.md), through paddle.io.DataLoader
            from dlbench.backends.paddle import real_data

            trainer: PaddleTrainer = real_data.build_trainer(spec, case, model, on_gpu, amp_dtype, seed)
        else:
            batch = synthetic_batch(case, spec.batch_size, spec.input_size, seed)
            trainer = PaddleTrainer(case, model, batch, on_gpu, amp_dtype, spec.compile,
                                    global_batch=spec.global_batch)
        self._facts.update(distributed.facts(spec, trainer.forward))
        return trainer

    def count_params(self, case: Case) -> int:
        return count_trainable(build_model(case.name))

    def is_oom(self, exc: BaseException) -> bool:
        text = f"{type(exc).__name__} {exc}".lower()
        return isinstance(exc, MemoryError) or "resourceexhausted" in text or "out of memory" in text

    def finish(self) -> dict[str, object]:
        return dict(self._facts)
