"""MXNet (Gluon) backend: the case's model, a synthetic batch made once on the device (or, for ``--data real``,
a gluon DataLoader: real_data.py), and an MxnetTrainer.

``--compile`` hybridizes the loss-computing block (static_alloc, static_shape); without it Gluon runs
imperatively. The worker's thread count reaches MXNet through OMP_NUM_THREADS, read when mxnet loads.
"""

from __future__ import annotations

import functools

import mxnet as mx

from dlbench.backends.base import Backend, Trainer
from dlbench.backends.mxnet.models import (
    TrainLoss,
    build_model,
    count_trainable,
    initialize,
)
from dlbench.backends.mxnet.step import MxnetTrainer, synthetic_batch
from dlbench.cases import Case, ImageInput, TextInput
from dlbench.spec import PointSpec


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
    """A one-sample input at the case's native size, to resolve the zoo models' deferred shapes."""
    if isinstance(case.input, ImageInput):
        return [mx.nd.zeros((1, case.input.channels, case.input.size, case.input.size))]
    assert isinstance(case.input, TextInput)
    return [mx.nd.zeros((1, 8)), mx.nd.zeros((1, 8)), mx.nd.ones((1, 8))]


class MxnetBackend(Backend):
    """How MXNet's Gluon trains a case."""

    name = "mxnet"

    def __init__(self) -> None:
        self._compiled: bool | None = None
        self._loader: str | None = None

    def environment(self, spec: PointSpec) -> dict[str, str]:
        features = mx.runtime.Features()
        return {"framework_version": mx.__version__, "mxnet_onednn": str(features.is_enabled("MKLDNN")),
                "mxnet_cuda": str(features.is_enabled("CUDA"))}

    def refuse(self, spec: PointSpec) -> str | None:
        if spec.device == "cuda":
            if mx.context.num_gpus() == 0:
                return "this mxnet build sees no CUDA device (the .[mxnet] extra installs the CPU-only wheel)"
            if spec.precision != "fp32":
                return "dlbench's mxnet backend runs fp32 only on GPUs (MXNet 1.9 AMP: fp16 not wired, no bf16 on GPU)"
        if spec.channels_last:
            return "MXNet Gluon's CPU convolutions take NCHW only; channels-last is not offered"
        if spec.precision != "fp32" and spec.device == "cpu":
            failure = _bf16_failure()
            if failure:
                return f"MXNet's bf16 AMP has no oneDNN bf16 kernels on this CPU (needs AVX-512): {failure}"
        return None

    def build(self, spec: PointSpec, case: Case) -> Trainer:
        mx.random.seed(spec.seed)
        if spec.precision != "fp32":  # bf16 AMP on the CPU (refuse() let it through): patch ops before building
            from mxnet.contrib import amp
            amp.init(target_dtype="bfloat16")
        ctx = mx.gpu(0) if spec.device == "cuda" else mx.cpu()
        source = None
        if spec.data == "real":  # the loader's workers fork now, before the model exists
            from dlbench.backends.mxnet import real_data

            source = real_data.batches(spec, case, ctx)
            self._loader = real_data.describe(spec)
        side = spec.input_size if isinstance(case.input, ImageInput) else None
        net = TrainLoss(case.name, build_model(case, side))
        initialize(net, ctx)
        if spec.compile:
            net.hybridize(static_alloc=True, static_shape=True)
        self._compiled = spec.compile
        if source is not None:
            p = spec.protocol
            return real_data.LoaderTrainer(source, p.warmup, p.steps, case, net, spec.global_batch)
        return MxnetTrainer(case, net, synthetic_batch(case, spec.batch_size, ctx, spec.input_size, spec.seed),
                            spec.global_batch)

    def count_params(self, case: Case) -> int:
        model = build_model(case)
        initialize(model, mx.cpu())
        with mx.autograd.predict_mode():
            model(*_example_input(case))
        return count_trainable(model)

    def is_oom(self, exc: BaseException) -> bool:
        if isinstance(exc, MemoryError):
            return True
        return isinstance(exc, mx.base.MXNetError) and "out of memory" in str(exc).lower()

    def finish(self) -> dict[str, object]:
        if self._compiled is None:
            return {}
        facts: dict[str, object] = {
            "compiled": "hybridize(static_alloc, static_shape)" if self._compiled else "imperative"}
        if self._loader:
            facts["loader"] = self._loader
        return facts
