"""MXNet (Gluon) backend: the case's model, its input (data.py: a synthetic batch made once on the device, or a
gluon DataLoader) and an MxnetTrainer.

``--compile`` hybridizes the loss-computing block (static_alloc, static_shape); without it Gluon runs
imperatively. The worker's thread count reaches MXNet through OMP_NUM_THREADS, read when mxnet loads. On a GPU
the math is IEEE FP32 (the package turns tensor cores and TF32 off before mxnet loads: __init__.py).
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mxnet as mx

from dlbench.backends.base import Backend, Trainer, Unsupported, gpu_binding_problem
from dlbench.backends.gpu_arch import GpuBuild, cuda_version
from dlbench.backends.mxnet import TENSOR_CORE_VAR, TF32_OVERRIDE_VAR, data, kvstores
from dlbench.backends.mxnet.models import MODELS, TrainLoss, build_model, count_trainable, initialize
from dlbench.backends.mxnet.step import MxnetTrainer
from dlbench.cases import Case, ImageInput, TextInput
from dlbench.numerics import describe, resolve_precision
from dlbench.spec import PointSpec
from dlbench.wire import RankContext

# In MXNetError's message for a failed allocation: the GPU pool's "cudaMalloc retry failed: out of memory", the
# CPU storage's "Failed to allocate CPU Memory".
OOM_TEXT: tuple[str, ...] = ("out of memory", "failed to allocate cpu memory")


@functools.lru_cache(maxsize=1)
def _bf16_failure() -> str | None:
    """Why a bf16 convolution fails on this CPU (oneDNN has bf16 kernels only with AVX-512), or None if it runs."""
    from mxnet.contrib.amp.amp import bfloat16

    x = mx.nd.amp_cast(mx.nd.ones((1, 3, 8, 8)), dtype=bfloat16)
    w = mx.nd.amp_cast(mx.nd.ones((4, 3, 3, 3)), dtype=bfloat16)
    try:
        mx.nd.Convolution(x, w, kernel=(3, 3), num_filter=4, no_bias=True).wait_to_read()
    except mx.base.MXNetError as exc:
        return str(exc).strip().splitlines()[0]
    return None


def _example_input(case: Case) -> list[mx.nd.NDArray]:
    """A one-sample input at the case's native size, to resolve the models' deferred shapes."""
    if isinstance(case.input, ImageInput):
        return [mx.nd.zeros((1, case.input.channels, case.input.size, case.input.size))]
    assert isinstance(case.input, TextInput)
    return [mx.nd.zeros((1, 8)), mx.nd.zeros((1, 8)), mx.nd.ones((1, 8)), mx.nd.zeros((1, 2))]


def tf32_state() -> dict[str, str]:
    """The TF32/tensor-core switches in force, read back from this process's environment (MXNet reads them)."""
    return {
        TENSOR_CORE_VAR: os.environ.get(TENSOR_CORE_VAR, "unset"),
        TF32_OVERRIDE_VAR: os.environ.get(TF32_OVERRIDE_VAR, "unset"),
    }


class MxnetBackend(Backend):
    """How MXNet's Gluon trains a case."""

    name = "mxnet"
    title = "MXNet"
    oom_kinds = (mx.base.MXNetError,)
    oom_texts = OOM_TEXT

    def gpu_build(self) -> GpuBuild | None:
        """MXNet does not list its kernels' architectures: its CUDA version from the distribution's name
        (mxnet-cu112 is CUDA 11.2); the CPU distribution `mxnet` has none."""
        names = importlib.metadata.packages_distributions().get("mxnet", [])
        cuda = next((cuda_version(n) for n in names if cuda_version(n)), "")
        return GpuBuild("mxnet", cuda, (), f"the distribution {names[0]}") if cuda else None

    def cases(self) -> frozenset[str]:
        return frozenset(MODELS)

    def environment(self, spec: PointSpec) -> dict[str, str]:
        features = mx.runtime.Features()
        env = {
            "framework_version": mx.__version__,
            "mxnet_onednn": str(features.is_enabled("MKLDNN")),
            "mxnet_cuda": str(features.is_enabled("CUDA")),
        }
        numerics = resolve_precision(spec.precision, spec.device)
        if spec.device == "cuda":
            state = tf32_state()
            env.update(state)
            tensor_cores = state[TENSOR_CORE_VAR] != "0" and state[TF32_OVERRIDE_VAR] != "0"
            env["math_mode"] = describe(numerics, tf32_in_use=tensor_cores)
        else:
            env["math_mode"] = numerics.math_mode
        return env

    def refuse(self, spec: PointSpec) -> str | None:
        """What only this MXNet can tell (the rules the spec shows are the capability table's): the GPUs it sees,
        a distributed kvstore in its build, oneDNN bf16 kernels on this CPU."""
        if spec.device == "cuda" and mx.context.num_gpus() == 0:
            return "this mxnet build sees no CUDA device (the .[mxnet] extra installs the CPU-only wheel)"
        if spec.world_size > 1:  # several contexts in one process, exchanging through a kvstore
            reason = kvstores.refuse(spec, mx.context.num_gpus())
            if reason:
                return reason
        if spec.precision != "fp32" and spec.device == "cpu":
            failure = _bf16_failure()
            if failure:
                return f"MXNet's bf16 AMP has no oneDNN bf16 kernels on this CPU (needs AVX-512): {failure}"
        return None

    def build(self, spec: PointSpec, case: Case, ctx: RankContext) -> Trainer:
        mx.random.seed(spec.seed)
        if spec.precision != "fp32":  # bf16 AMP on the CPU (refuse() let it through): patch ops before building
            from mxnet.contrib import amp

            amp.init(target_dtype="bfloat16")
        if spec.device == "cuda":
            visible = mx.context.num_gpus()
            problem = gpu_binding_problem(ctx, visible)
            if problem:
                raise Unsupported(problem)
            device = mx.gpu(ctx.device_index(visible))
        else:
            device = mx.cpu()
        side = spec.input_size if isinstance(case.input, ImageInput) else None
        if spec.strategy == "ps" and spec.world_size > 1:  # this rank's device, a dist_sync kvstore across processes
            kvstores.dist_env(spec, ctx, "worker")
            net = TrainLoss(case, build_model(case, side))
            initialize(net, device)  # the same seed on every worker; the server's copy starts from worker 0's
            self._kvstore_trainer = kvstores.KvstoreTrainer(
                case,
                net,
                [device],
                [data.synthetic_batch(case, spec.batch_size, device, spec.input_size, spec.seed + ctx.rank)],
                spec.global_batch,
                "ps",
                workers=spec.world_size,
            )
            self._facts = {"compiled": "imperative", "loader": data.describe(spec), "strategy_run": "ps"}
            return self._kvstore_trainer
        if spec.world_size > 1:  # one process, N contexts, a kvstore
            ctxs = kvstores.contexts(spec)
            net = TrainLoss(case, build_model(case, side))
            initialize(net, ctxs)  # the same initial values on every context
            if spec.compile:
                net.hybridize(static_alloc=True, static_shape=True)
            self._kvstore_trainer = kvstores.KvstoreTrainer(
                case, net, ctxs, kvstores.replica_batches(spec, case, ctxs), spec.global_batch, spec.strategy
            )
            self._facts = {
                "compiled": "hybridize(static_alloc, static_shape)" if spec.compile else "imperative",
                "loader": data.describe(spec),
                "strategy_run": spec.strategy,
            }
            return self._kvstore_trainer
        source = data.batches(spec, case, device)  # a real loader's workers fork now, before the model exists
        net = TrainLoss(case, build_model(case, side))
        initialize(net, device)
        if spec.compile:
            net.hybridize(static_alloc=True, static_shape=True)
        self._facts = {
            "compiled": "hybridize(static_alloc, static_shape)" if spec.compile else "imperative",
            "loader": data.describe(spec),
            "device": str(device),
        }
        if spec.device == "cuda":
            self._facts.update(tf32_state())
        return MxnetTrainer(case, net, source, device, spec.global_batch)

    def facts(self) -> dict[str, object]:
        """What build chose, and on several contexts the kvstore Gluon made at the first step, read back."""
        trainer = getattr(self, "_kvstore_trainer", None)
        return {**self._facts, **(trainer.facts() if trainer is not None else {})}

    def evaluator(self, spec: PointSpec, case: Case, weights: Path) -> Callable[[dict[str, Any]], dict[str, Any]]:
        from dlbench.backends.mxnet import evaluate  # the evaluation process's own path: the model and its forward

        return evaluate.evaluator(spec, case, weights)

    def serve(self, spec: PointSpec, ctx: RankContext, results: list[Path]) -> None:
        """ps (dist_sync): the scheduler (server 0) or the server (1) until every worker has written its result."""
        kvstores.serve(spec, ctx, results)

    def count_params(self, case: Case) -> int:
        model = build_model(case)
        initialize(model, mx.cpu())
        with mx.autograd.predict_mode():
            model(*_example_input(case))
        return count_trainable(model)
