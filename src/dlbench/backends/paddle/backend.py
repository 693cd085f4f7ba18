"""PaddlePaddle backend: builds the case's model, its input and a PaddleTrainer; joins a fleet job on several
devices (distributed.py).

On a GPU it applies the numerics policy (dlbench.numerics): fp32 turns TF32 off through paddle's flags
FLAGS_allow_tf32_cublas and FLAGS_allow_tf32_cudnn (a CUDA build's cuBLAS flag is on by default), tf32 turns
them on; both are read back with paddle.get_flags and reported as math_mode, and a CUDA build without them is
refused (it would run fp32 as TF32 unseen). It also applies Paddle's own ResNet-50 benchmark settings
(gpu_defaults.py): cuDNN exhaustive search and its other flags, read back; amp as O2 (pure float16, fp32 master
weights) with a GradScaler, in NHWC where the model has an NHWC form. bf16 is O1 bfloat16 autocast where paddle
really computes in bfloat16 on the device. --channels-last builds the ResNets NHWC on any device.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import paddle

from dlbench.backends.base import Trainer, Unsupported, gpu_binding_problem
from dlbench.backends.decoder import DecoderBackend, decoder_facts
from dlbench.backends.gpu_arch import GpuBuild, cuda_version
from dlbench.backends.paddle import data, distributed
from dlbench.backends.paddle.gpu_defaults import (
    TF32_FLAGS,
    apply_flags,
    flag_facts,
    has_nhwc,
    plan,
    read_flags,
    tf32_missing,
)
from dlbench.backends.paddle.models import MODELS, build_model, count_trainable
from dlbench.backends.paddle.moe import MoeModel
from dlbench.backends.paddle.step import AMP_HOST_SYNC, COMPILED, PaddleTrainer
from dlbench.cases import Case
from dlbench.numerics import describe, resolve_precision
from dlbench.spec import PointSpec
from dlbench.wire import RankContext

# Out-of-memory errors: paddle raises its ResourceExhausted errors as MemoryError; cuBLAS and cuDNN allocation
# failures come as its External errors, named by these texts.
_OOM_TEXT: tuple[str, ...] = (
    "(ResourceExhausted)",
    "ResourceExhaustedError",
    "Out of memory error",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "CUDNN_STATUS_ALLOC_FAILED",
)


def _has_gpu() -> bool:
    """Whether this paddle build is a CUDA one and sees at least one GPU."""
    return bool(paddle.is_compiled_with_cuda()) and paddle.device.cuda.device_count() > 0


def tf32_state() -> dict[str, bool]:
    """paddle's TF32 flags as they are now, read back with paddle.get_flags (only those this build has)."""
    return {k: bool(v) for k, v in read_flags(list(TF32_FLAGS), paddle.get_flags).items()}


def set_tf32(allow: bool) -> dict[str, bool]:
    """Turn paddle's TF32 flags on or off and return them read back; a flag missing or left otherwise raises
    Unsupported."""
    apply_flags(dict.fromkeys(TF32_FLAGS, allow), paddle.set_flags, paddle.get_flags)
    return tf32_state()


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


def _threads(spec: PointSpec) -> int:
    """The CPU threads paddle runs: the spec's, else the worker's OMP_NUM_THREADS (paddle sets it to 1 at import
    when it is unset)."""
    return spec.threads or int(os.environ.get("OMP_NUM_THREADS", "1") or 1)


class PaddleBackend(DecoderBackend):
    """How PaddlePaddle trains a case."""

    name = "paddle"
    title = "PaddlePaddle"

    def __init__(self) -> None:
        super().__init__()
        self._settings: dict[str, str] = {}

    def gpu_build(self) -> GpuBuild | None:
        """Paddle does not list its kernels' architectures: the CUDA version of a CUDA build."""
        if not paddle.is_compiled_with_cuda():
            return None
        return GpuBuild("paddle", cuda_version(str(paddle.version.cuda())), (), "paddle.version.cuda()")

    def cases(self) -> frozenset[str]:
        return frozenset(MODELS)

    def environment(self, spec: PointSpec) -> dict[str, str]:
        env = {
            "framework_version": paddle.__version__,
            "paddle_commit": str(paddle.version.commit),
            "paddle_threads": str(self._facts.get("paddle_threads", _threads(spec))),
            "paddle_onednn": str(paddle.get_flags(["FLAGS_use_mkldnn"])["FLAGS_use_mkldnn"]),
        }
        numerics = resolve_precision(spec.precision, spec.device)
        env["math_mode"] = numerics.math_mode
        if spec.device == "cuda" and _has_gpu():
            device = paddle.get_device()
            env["device_model"] = paddle.device.cuda.get_device_name(device if device.startswith("gpu") else 0)
            env["cuda"] = str(paddle.version.cuda())
            env["cudnn"] = str(paddle.version.cudnn())
            env["nccl"] = str(paddle.version.nccl()) if hasattr(paddle.version, "nccl") else ""
            state = tf32_state()
            env.update({flag.removeprefix("FLAGS_"): str(on) for flag, on in state.items()})
            env["math_mode"] = describe(numerics, tf32_in_use=any(state.values()) or set(state) != set(TF32_FLAGS))
        env.update(self._settings)  # what build applied: layout, AMP level, Paddle's benchmark flags read back
        if spec.world_size > 1:
            env.update({"dist_backend": distributed.comm_backend(spec), "strategy_run": distributed.strategy(spec)})
        return env

    def refuse(self, spec: PointSpec) -> str | None:
        """What only this paddle can tell (the rules the spec shows are the capability table's): a GPU it sees, its
        TF32 switches, bf16 kernels on this GPU or CPU."""
        numerics = resolve_precision(spec.precision, spec.device)
        if spec.device == "cuda" and not _has_gpu():
            return "paddle here is a CPU build or sees no GPU: use --device cpu"
        if spec.device == "cuda":  # a CUDA build without the TF32 switches would run fp32 as TF32 unseen
            problem = tf32_missing(tf32_state(), numerics.allow_tf32)
            if problem:
                return problem
        if numerics.compute_dtype == "bfloat16":
            if spec.device == "cuda":
                if not paddle.amp.is_bfloat16_supported():
                    return "--precision bf16: paddle has no bfloat16 kernels on this GPU; use --precision amp"
            else:
                paddle.set_device("cpu")
                if not _autocast_takes_effect("bfloat16"):
                    return (
                        "--precision bf16: paddle's bfloat16 autocast leaves every op in float32 on this CPU "
                        "(no native bf16); use --precision fp32"
                    )
        return None

    def build(self, spec: PointSpec, case: Case, ctx: RankContext) -> Trainer:
        numerics = resolve_precision(spec.precision, spec.device)
        on_gpu = spec.device == "cuda"
        gpu = 0
        if on_gpu:
            visible = paddle.device.cuda.device_count()
            problem = gpu_binding_problem(ctx, visible)
            if problem:
                raise Unsupported(problem)
            gpu = ctx.device_index(visible)
            paddle.set_device(f"gpu:{gpu}")
        else:
            paddle.set_device("cpu")
        settings = plan(spec.device, numerics, spec.channels_last, has_nhwc(case))
        applied = apply_flags(settings.flags, paddle.set_flags, paddle.get_flags)  # GPU: TF32 and Paddle's flags
        self._settings = {**settings.facts(), **flag_facts({k: v for k, v in applied.items() if k not in TF32_FLAGS})}
        self._facts.update(self._settings)
        state = tf32_state()
        self._facts["paddle_tf32_flags"] = ", ".join(f"{k}={v}" for k, v in state.items()) or "absent (CPU build)"
        threads = _threads(spec)
        paddle.base.core.set_num_threads(threads)
        self._facts["paddle_threads"] = threads
        distributed.join(spec, ctx, gpu)  # several devices: fleet.init, bounded by the rendezvous timeout
        paddle.seed(spec.seed)  # the same initial parameters on every rank (DataParallel also broadcasts rank 0's)
        model = build_model(case, settings.layout)
        seed = spec.seed + ctx.rank  # each rank its own samples; rank 0 is the 1-device batch
        self._facts.update(
            {
                "autocast": f"{settings.amp_level} {numerics.compute_dtype}" if numerics.autocast else "off",
                "loss_scaling": "GradScaler (dynamic)" if numerics.loss_scaling else "none",
                "compiled": COMPILED if spec.compile else "eager",
                "loader": data.describe(spec),
            }
        )
        if numerics.loss_scaling:
            self._facts["amp_host_sync"] = AMP_HOST_SYNC
        if hasattr(model, "embedding_path"):  # Wide & Deep: which embedding machinery trained the tables
            self._facts["embedding"] = model.embedding_path()
        self._facts.update(decoder_facts(case, spec.input_size))  # a decoder's FLOPs convention, a MoE's figures
        self.routed = model if isinstance(model, MoeModel) else None
        trainer = PaddleTrainer(
            data.batches(spec, case, on_gpu, seed, settings.layout),
            case,
            model,
            numerics,
            on_gpu,
            spec.compile,
            spec.global_batch,
            settings,
        )
        self._facts.update(distributed.facts(spec, trainer.forward, trainer.optimizer))
        return trainer

    def evaluator(self, spec: PointSpec, case: Case, weights: Path) -> Callable[[dict[str, Any]], dict[str, Any]]:
        from dlbench.backends.paddle import evaluate  # the evaluation process's own path: the model and its forward

        return evaluate.evaluator(spec, case, weights)

    def count_params(self, case: Case) -> int:
        if not decoder_facts(case, None):
            return count_trainable(build_model(case))
        with paddle.LazyGuard():  # a decoder's shapes only: no weights made (the 8B would take 32 GB)
            return count_trainable(build_model(case))

    def oom_error(self, exc: BaseException) -> bool:
        if isinstance(exc, MemoryError):  # paddle's ResourceExhausted, also as re-raised by to_static
            return True
        return isinstance(exc, Exception) and any(text in str(exc) for text in _OOM_TEXT)
