"""The keras framework (#46): the same Keras 3 model code (resnet, BERT, the Llama decoders: cnn.py, bert.py,
llama.py) trained by Keras' own step (train.py) on one of Keras' three backends, each a framework entry of its own
with its own environment: ``keras_jax``, ``keras_tf`` (TensorFlow) and ``keras_torch`` (PyTorch), as Keras' own
benchmarks compare them. The backend is chosen by ``KERAS_BACKEND``, set before Keras is first imported (so this
module imports Keras only inside its methods).

jit_compile: Keras' default ``"auto"``, resolved by Keras per backend (JAX: XLA through jax.jit; TensorFlow: XLA
where a non-CPU device is present, so eager tf.function on a CPU-only machine; PyTorch: eager), or ``True`` everywhere with ``--compile`` (PyTorch: torch.compile);
the resolved setting is recorded on every point (``jit_compile``), beside the backend and its version.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
from typing import Any

import numpy as np

from dlbench.backends.base import Backend, Trainer, Unsupported, fixed
from dlbench.backends.decoder import LLAMA_MEMBERS, decoder_facts
from dlbench.cases import Case, ImageInput, TextInput
from dlbench.cases.gpt import sequence_length
from dlbench.data.synthetic import synthetic_bert, synthetic_gpt, synthetic_images
from dlbench.spec import PointSpec, SpecError
from dlbench.wire import RankContext

# Keras' backend name -> the distribution whose version a point records beside Keras'.
_DISTRIBUTION = {"jax": "jax", "tensorflow": "tensorflow-cpu", "torch": "torch"}
_COMPILED = {"jax": "xla (jax.jit)", "tensorflow": "xla (tf.function jit_compile)", "torch": "torch.compile"}
# The cases Keras builds, each with the architecture its build_model dispatches on.
MODELS: dict[str, str] = {"resnet50": "resnet", "resnet152": "resnet", "bert_base": "bert"} | dict.fromkeys(
    LLAMA_MEMBERS, "llama"
)
CASES: frozenset[str] = frozenset(MODELS)


def _keras(backend: str) -> Any:
    """Keras, imported on `backend` (KERAS_BACKEND is read once, at Keras' first import)."""
    os.environ["KERAS_BACKEND"] = backend
    keras = importlib.import_module("keras")
    if keras.backend.backend() != backend:
        raise Unsupported(f"Keras was already imported on {keras.backend.backend()}, not {backend}")
    return keras


def _version(distribution: str) -> str:
    """An installed distribution's version ('' where it is not installed; TensorFlow as tensorflow or -cpu)."""
    for name in (distribution, distribution.removesuffix("-cpu")):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return ""


def synthetic(case: Case, batch: int, input_size: int | None, seed: int) -> dict[str, np.ndarray]:
    """One synthetic batch as numpy (images NHWC, integers int32); a sequence longer than a decoder's context is
    the point's refusal."""
    if isinstance(case.input, ImageInput):
        arrays = synthetic_images(case.input, batch, input_size, seed, channels_last=True)
    else:
        assert isinstance(case.input, TextInput)
        if case.task == "causal_lm":
            try:
                arrays = synthetic_gpt(case.input, batch, sequence_length(case, input_size), seed)
            except SpecError as exc:
                raise Unsupported(str(exc)) from None
        else:
            arrays = synthetic_bert(case.input, batch, input_size, seed)
    return {k: v.astype(np.int32) if v.dtype.kind in "iu" else v for k, v in arrays.items()}


def build_model(case: Case, input_size: int | None) -> Any:
    """The case's Keras model (the same code the tf backend builds), freshly initialised."""
    from dlbench.backends.keras.bert import build_bert
    from dlbench.backends.keras.cnn import resnet
    from dlbench.backends.keras.llama import LlamaModel
    from dlbench.cases.arch import BertConfig, ResNetArch
    from dlbench.cases.llama import llama_arch

    if isinstance(case.arch, ResNetArch):
        assert isinstance(case.input, ImageInput)
        return resnet(case.arch, input_size or case.input.size, case.input.classes, case.name)
    if isinstance(case.arch, BertConfig):
        return build_bert(case.arch)
    return LlamaModel(llama_arch(case), name=case.name)


class KerasBackend(Backend):
    """How Keras 3 trains a case on one of its backends (`keras_backend`)."""

    keras_backend = ""

    def cases(self) -> frozenset[str]:
        return CASES

    def environment(self, spec: PointSpec) -> dict[str, str]:
        keras = _keras(self.keras_backend)
        return {
            "framework_version": keras.__version__,
            "keras_backend": self.keras_backend,
            "keras_backend_version": _version(_DISTRIBUTION[self.keras_backend]),
            "math_mode": "fp32",
        }

    def refuse(self, spec: PointSpec) -> str | None:
        """The keras framework's GPU path is not wired (nor tested) yet."""
        if spec.device != "cpu":
            return f"{self.name} trains on the CPU only for now: use --device cpu"
        return None

    def build(self, spec: PointSpec, case: Case, ctx: RankContext) -> Trainer:
        keras = _keras(self.keras_backend)
        from dlbench.backends.keras.train import STEP, CaseModel, KerasTrainer, optimizer

        keras.utils.set_random_seed(spec.seed)
        keras.mixed_precision.set_global_policy("float32")
        model = CaseModel(case, build_model(case, spec.input_size), name=f"{case.name}_loss")
        model.compile(optimizer=optimizer(case, spec.global_batch), jit_compile=True if spec.compile else "auto")
        batch = synthetic(case, spec.batch_size, spec.input_size, spec.seed + ctx.rank)
        self._facts = {
            "keras_backend": self.keras_backend,
            "keras_version": keras.__version__,
            "jit_compile": str(model.jit_compile),
            "compiled": _COMPILED[self.keras_backend] if model.jit_compile else "none",
            "layout": "NHWC",
            "step": STEP,
            "loader": "synthetic: one numpy batch, handed to train_on_batch every step",
            **decoder_facts(case, spec.input_size),
        }
        return KerasTrainer(model, fixed(batch))

    def count_params(self, case: Case) -> int:
        _keras(self.keras_backend)
        from dlbench.backends.keras.llama import count_decoder

        if case.name in LLAMA_MEMBERS:
            return count_decoder(lambda: build_model(case, None))
        model = build_model(case, None)
        return int(sum(np.prod(v.shape) for v in model.trainable_variables))


class KerasJaxBackend(KerasBackend):
    """Keras 3 on JAX."""

    name, title, keras_backend = "keras_jax", "Keras 3 on JAX", "jax"


class KerasTfBackend(KerasBackend):
    """Keras 3 on TensorFlow."""

    name, title, keras_backend = "keras_tf", "Keras 3 on TensorFlow", "tensorflow"


class KerasTorchBackend(KerasBackend):
    """Keras 3 on PyTorch."""

    name, title, keras_backend = "keras_torch", "Keras 3 on PyTorch", "torch"


__all__ = ["CASES", "KerasBackend", "KerasJaxBackend", "KerasTfBackend", "KerasTorchBackend", "build_model"]
