"""The worker side of `dlbench check same-model`: load the canonical weights into a backend's own model, run its
forward passes and one of its own train steps on the canonical batch, and write what came out in canonical names.

Run in the framework's environment as ``python -m dlbench.check same-model FW CASE FOLDER [--float64]``
(dlbench.check); FOLDER holds ``weights.npz``, ``batch.npz`` and ``lr.npy`` (written by the controller,
dlbench.samemodel) and receives ``FW.npz`` from the float32 model as the benchmark builds it: ``out/<name>`` the
outputs of the forward passes, ``loss`` the train step's loss, ``delta/<name>`` each tensor's change over the step
(w1 - w0, in canonical layout); with ``--float64``, ``FW-float64.npz``: the same from the backend's model and train
step in float64. Each backend says how in its ``same_model.py`` (a `WeightMap`): where each
canonical tensor lives in its model and in which layout.
"""

from __future__ import annotations

import importlib
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np

from dlbench.backends import get_info
from dlbench.backends.base import Backend, Trainer, Unsupported
from dlbench.canonical import names, values
from dlbench.cases import Case, ImageInput
from dlbench.spec import PointSpec
from dlbench.wire import RankContext

Arrays = dict[str, np.ndarray]


class WeightMap(ABC):
    """How one backend's trainer takes the canonical weights, gives them back, and runs a forward pass."""

    @abstractmethod
    def load(self, trainer: Trainer, case: Case, weights: Mapping[str, np.ndarray]) -> None:
        """Set every canonical tensor (running statistics included) in the trainer's model."""

    @abstractmethod
    def read(self, trainer: Trainer, case: Case) -> Arrays:
        """Every canonical tensor as the trainer's model holds it now, in canonical name and layout."""

    @abstractmethod
    def forward(self, trainer: Trainer, case: Case, batch: Mapping[str, np.ndarray], train: bool) -> Arrays:
        """The model's outputs on the canonical batch, in training mode (batch statistics) or evaluation mode
        (running statistics), as canonical output names: 'logits' (and 'aux_logits'), or BERT's 'mlm_logits'
        and 'nsp_logits'. A training-mode pass may update running statistics: `load` resets them."""

    def float64_trainer(self, backend: Backend, spec: PointSpec, case: Case) -> Trainer | None:
        """The backend's own trainer for the case with float64 parameters and arithmetic, for the step's comparison
        (float32 makes a ReLU network's step chaotic: see dlbench.samemodel); None where the framework has none.
        Called in a process of its own, so that it may set the framework's global default type."""
        return None

    @abstractmethod
    def feed(self, trainer: Trainer, case: Case, batch: Mapping[str, np.ndarray]) -> Any:
        """The canonical batch as the trainer's `train_step` takes it."""


MODEL_FLOATS = frozenset({"images", "dense"})  # float inputs of a model: in its dtype (float64 in the float64 step)


def as_model_input(batch: Mapping[str, np.ndarray], dtype: Any) -> Arrays:
    """The canonical batch with the model's float inputs in `dtype`; labels and weights stay as the losses take them
    (float32), integers as they are."""
    return {k: v.astype(dtype) if k in MODEL_FLOATS else v for k, v in batch.items()}


def weight_map_of(framework: str) -> WeightMap | None:
    """The framework's weight map, as its registry line names it (BackendInfo.weight_map), or None."""
    where = get_info(framework).weight_map
    if not where:
        return None
    module, _, attr = where.partition(":")
    found = getattr(importlib.import_module(module), attr)
    if not isinstance(found, WeightMap):
        raise TypeError(f"{where} is a {type(found).__name__}, not a WeightMap")
    return found


def has_batch_norm(case: Case) -> bool:
    """Whether the case's model keeps running statistics (its evaluation forward differs from training's)."""
    return any(t.role == "running_var" for t in names.tensors(case))


def _load_inputs(folder: Path) -> tuple[Arrays, Arrays, float]:
    with np.load(folder / "weights.npz") as w, np.load(folder / "batch.npz") as b:
        weights: Arrays = {k: w[k] for k in w.files}
        batch: Arrays = {k: b[k] for k in b.files}
    return weights, batch, float(np.load(folder / "lr.npy"))


def _deltas(weights: Arrays, after: Arrays, framework: str) -> Arrays:
    missing = sorted(set(weights) - set(after))
    if missing:
        raise RuntimeError(f"{framework}'s weight map read back no {', '.join(missing[:3])}")
    return {
        f"delta/{k}": (after[k].astype(np.float64) - w0.astype(np.float64)).astype(np.float32)
        for k, w0 in weights.items()
    }


def run(
    backend: Backend,
    framework: str,
    case: Case,
    folder: Path,
    spec_of: Callable[[Case, int], PointSpec],
    float64: bool = False,
) -> dict[str, object]:
    """Load, forward, step and read back one framework's model; write FOLDER/FW.npz (the float32 model: the
    forward passes, the loss and the step) or FOLDER/FW-float64.npz (the same of the float64 model) and return a
    summary. `spec_of(case, batch)` is the point the model is built for (the worker's entry makes it, points.py)."""
    weight_map = weight_map_of(framework)
    if weight_map is None:
        return {"unsupported": f"{framework} has no canonical weight map yet (backends/{framework}/same_model.py)"}
    weights, batch, lr = _load_inputs(folder)
    check = values.check_case(case, lr)
    spec = spec_of(check, next(iter(batch.values())).shape[0])
    reason = backend.case_support(check) or backend.refuse(spec)
    if reason:
        return {"unsupported": reason}
    started = time.monotonic()
    try:
        trainer = (
            weight_map.float64_trainer(backend, spec, check) if float64 else backend.build(spec, check, RankContext())
        )
    except Unsupported as exc:
        return {"unsupported": str(exc)}
    if trainer is None:
        return {"unsupported": f"{framework}'s weight map builds no float64 model"}
    weight_map.load(trainer, check, weights)
    outputs: Arrays = {}
    if has_batch_norm(check):
        evaluated = weight_map.forward(trainer, check, batch, train=False)
        outputs.update({f"{k}_eval": v for k, v in evaluated.items()})
    outputs.update(weight_map.forward(trainer, check, batch, train=True))
    dtype = np.float64 if float64 else np.float32
    out: Arrays = {f"out/{k}": np.asarray(v, dtype) for k, v in outputs.items()}
    weight_map.load(trainer, check, weights)  # the training-mode pass may have moved the running statistics
    trainer.train_step(weight_map.feed(trainer, check, batch))
    trainer.sync()
    loss = trainer.loss()
    out["loss"] = np.asarray(loss, np.float64)
    out.update(_deltas(weights, weight_map.read(trainer, check), framework))
    trainer.close()
    np.savez(folder / f"{framework}{'-float64' if float64 else ''}.npz", **out)  # type: ignore[arg-type]
    return {"seconds": round(time.monotonic() - started, 1), "loss": loss}


def torchlike_inputs(case: Case, batch: Mapping[str, Any]) -> tuple[Any, ...]:
    """The positional inputs of a torch-shaped model (backends/torchlike, torch's own) from a batch of tensors."""
    if case.loss.kind == "mlm_nsp":
        return (batch["input_ids"], batch["token_type_ids"], batch.get("attention_mask"), batch["mlm_positions"])
    if case.loss.kind == "bce":
        return (batch["dense"], batch["deep_ids"], batch["wide_ids"])
    if case.loss.kind == "causal_lm":
        return (batch["input_ids"],)
    return (batch["images"],)


def output_names(case: Case, count: int) -> tuple[str, ...]:
    """The canonical names of a model's `count` outputs: image logits (and the auxiliary head's), BERT's MLM and NSP
    logits, a decoder's logits, Wide & Deep's logit, or the face model's embedding."""
    kind = case.loss.kind
    if kind == "mlm_nsp":
        return ("mlm_logits", "nsp_logits")
    if kind == "arcface":
        return ("embedding",)
    if kind == "bce":
        return ("logit",)
    return ("logits", "aux_logits")[:count]


def named_outputs(case: Case, out: Any) -> Arrays:
    """A model's output (one array, or a tuple or list of them, already numpy) under its canonical names."""
    parts = list(out) if isinstance(out, (tuple, list)) else [out]
    return {n: np.asarray(p) for n, p in zip(output_names(case, len(parts)), parts, strict=True)}


def nchw_to_nhwc(x: np.ndarray) -> np.ndarray:
    """An NCHW image batch in NHWC."""
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1))


def oihw_to_hwio(w: np.ndarray) -> np.ndarray:
    """A conv weight OIHW (torch, paddle) as HWIO (Keras, flax)."""
    return np.ascontiguousarray(w.transpose(2, 3, 1, 0))


def hwio_to_oihw(w: np.ndarray) -> np.ndarray:
    """A conv weight HWIO as OIHW."""
    return np.ascontiguousarray(w.transpose(3, 2, 0, 1))


def transposed(w: np.ndarray) -> np.ndarray:
    """A dense weight [out, in] as [in, out] (Keras, flax, paddle kernels), or back."""
    return np.ascontiguousarray(w.T)


def chw_columns_to_hwc(w: np.ndarray, channels: int) -> np.ndarray:
    """A dense weight [out, C*P*P] that reads a feature map flattened NCHW (torch) as one that reads it flattened
    NHWC (Keras, flax): the same connections, its input columns reordered from (c, h, w) to (h, w, c)."""
    out, inp = w.shape
    side = round((inp // channels) ** 0.5)
    return np.ascontiguousarray(w.reshape(out, channels, side, side).transpose(0, 2, 3, 1).reshape(out, inp))


def hwc_columns_to_chw(w: np.ndarray, channels: int) -> np.ndarray:
    """The inverse of `chw_columns_to_hwc`."""
    out, inp = w.shape
    side = round((inp // channels) ** 0.5)
    return np.ascontiguousarray(w.reshape(out, side, side, channels).transpose(0, 3, 1, 2).reshape(out, inp))


def flattened_input(case: Case) -> tuple[str, int] | None:
    """(the first classifier Linear, the channels of the feature map it reads flattened) for VGG and AlexNet, whose
    flatten order differs between NCHW and NHWC frameworks; None for the other cases."""
    listed = names.tensors(case)
    classifier = next((t for t in listed if t.name.startswith("classifier.") and t.role == "linear"), None)
    if classifier is None:
        return None
    last_conv = [t for t in listed if t.role == "conv"][-1]
    return classifier.name, last_conv.shape[0]


def to_channels_last(case: Case, t: names.Tensor, value: np.ndarray) -> np.ndarray:
    """A canonical value in a channels-last framework's layout (Keras, flax): conv HWIO, dense [in, out], and the
    first classifier Linear of VGG and AlexNet reading its input flattened NHWC."""
    if t.role == "conv":
        return oihw_to_hwio(value)
    flat = flattened_input(case)
    if flat is not None and t.name == flat[0]:
        value = chw_columns_to_hwc(value, flat[1])
    return transposed(value) if t.role == "linear" else value


def from_channels_last(case: Case, t: names.Tensor, value: np.ndarray) -> np.ndarray:
    """A channels-last framework's value in the canonical layout (the inverse of `to_channels_last`)."""
    if t.role == "conv":
        return hwio_to_oihw(value)
    value = transposed(value) if t.role == "linear" else value
    flat = flattened_input(case)
    return hwc_columns_to_chw(value, flat[1]) if flat is not None and t.name == flat[0] else value


def eval_outputs(
    model: Any,
    train: bool,
    no_grad: AbstractContextManager[Any],
    call: Callable[[], Any],
    to_numpy: Callable[[Any], Any],
) -> tuple[np.ndarray, ...]:
    """A torch-like module's outputs (`call()`) without gradients, in train or evaluation mode (left in train mode
    after), each as NumPy: the forward pass torch's and OneFlow's maps share."""
    model.train(train)
    try:
        with no_grad:
            out = call()
    finally:
        model.train()
    return tuple(to_numpy(p) for p in (out if isinstance(out, tuple) else (out,)))


def modules(case: Case, prefix: str, role: names.Role) -> list[str]:
    """The canonical modules under `prefix` holding a tensor of `role`, in order ('features.0', 'features.3' ...)."""
    found = [t.name.rsplit(".", 1)[0] for t in names.tensors(case) if t.role == role and t.name.startswith(prefix)]
    return list(dict.fromkeys(found))


_RESNET_STEM = {"stem.0": "conv1", "stem.1": "bn1", "fc": "fc"}


def torchvision_resnet_module(module: str) -> str:
    """A canonical ResNet module ('stem.0', 'stages.1.0.downsample.0', 'fc') as torchvision's zoo names it ('conv1',
    'layer2.0.downsample.0', 'fc'), which paddle.vision's and jittor.models' ResNets keep."""
    if module in _RESNET_STEM:
        return _RESNET_STEM[module]
    _, i, rest = module.split(".", 2)
    return f"layer{int(i) + 1}.{rest}"


def image_input(case: Case) -> bool:
    """Whether the case's input is an image batch."""
    return isinstance(case.input, ImageInput)


__all__ = [
    "WeightMap",
    "as_model_input",
    "eval_outputs",
    "from_channels_last",
    "has_batch_norm",
    "hwio_to_oihw",
    "named_outputs",
    "nchw_to_nhwc",
    "oihw_to_hwio",
    "run",
    "to_channels_last",
    "torchlike_inputs",
    "torchvision_resnet_module",
    "transposed",
]
