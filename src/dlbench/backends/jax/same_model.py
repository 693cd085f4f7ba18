"""The flax models' canonical weights (`dlbench check same-model`): where each canonical tensor lives in the flax
variables, and in which layout.

The map is plain Python over names (`flax_path`): a canonical module path becomes flax's (``stages.2.0.conv1`` is
the ninth ``Bottleneck_8/Conv_0``: flax numbers a module's submodules in creation order), and the tensor's role
names the leaf and its layout: conv kernels HWIO (``kernel``), dense kernels [in, out], BatchNorm's ``scale`` and
``bias`` in ``params`` and its ``mean`` and ``var`` in ``batch_stats``, LayerNorm's ``scale``, embeddings'
``embedding``. Images are NHWC.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from dlbench.backends.base import Backend, Trainer, Unsupported
from dlbench.backends.same_model import (
    Arrays,
    WeightMap,
    as_model_input,
    from_channels_last,
    modules,
    named_outputs,
    nchw_to_nhwc,
    to_channels_last,
)
from dlbench.canonical.names import Tensor, tensors
from dlbench.cases import Case
from dlbench.cases.arch import AlexNetArch, BertConfig, ResNetArch, VggArch, WideDeepArch
from dlbench.numerics import resolve_precision
from dlbench.spec import PointSpec

Path = tuple[str, ...]
_LEAF = {
    "conv": ("params", "kernel"),
    "linear": ("params", "kernel"),
    "bias": ("params", "bias"),
    "norm_weight": ("params", "scale"),
    "residual_norm_weight": ("params", "scale"),
    "norm_bias": ("params", "bias"),
    "running_mean": ("batch_stats", "mean"),
    "running_var": ("batch_stats", "var"),
    "embedding": ("params", "embedding"),
}
# A ResNet bottleneck's layers in the order flax.linen's Bottleneck creates them (models.py).
_BOTTLENECK = {
    "conv1": "Conv_0",
    "bn1": "BatchNorm_0",
    "conv2": "Conv_1",
    "bn2": "BatchNorm_1",
    "conv3": "Conv_2",
    "bn3": "BatchNorm_2",
    "downsample.0": "Conv_3",
    "downsample.1": "BatchNorm_3",
}
_PARAMS = {"mlm_bias": "mlm_bias", "wide.weight": "wide", "deep.weight": "deep"}  # bare self.param tensors
_BERT_TOP = {"embeddings.layer_norm": "emb_norm", "pooler": "pooler", "nsp": "nsp", "mlm_transform": "mlm_transform"}


def _resnet_module(a: ResNetArch, module: str) -> Path:
    if module == "stem.0":
        return ("Conv_0",)
    if module == "stem.1":
        return ("BatchNorm_0",)
    if module == "fc":
        return ("Dense_0",)
    _, i, j, layer = module.split(".", 3)
    block = sum(a.stages[: int(i)]) + int(j)
    return (f"Bottleneck_{block}", _BOTTLENECK[layer])


def _bert_module(module: str) -> Path:
    if module.startswith("embeddings.") and module != "embeddings.layer_norm":
        return (module.split(".", 1)[1],)  # word_embeddings, position_embeddings, token_type_embeddings
    if module.startswith("layers."):
        _, i, layer = module.split(".", 2)
        return (f"layer_{i}", layer)
    return (_BERT_TOP.get(module, module),)  # mlm_norm keeps its name


def _plain_mapper(case: Case) -> Callable[[str], Path]:
    """VGG and AlexNet: their convs are the model's Conv_0, Conv_1 ... and their head's Linears the Classifier's
    Dense_0, Dense_1 ..., in order."""
    convs = {m: k for k, m in enumerate(modules(case, "features.", "conv"))}
    denses = {m: k for k, m in enumerate(modules(case, "classifier.", "linear"))}
    return lambda m: (f"Conv_{convs[m]}",) if m in convs else ("Classifier_0", f"Dense_{denses[m]}")


def module_mapper(case: Case) -> Callable[[str], Path]:
    """Canonical module path -> flax module path, for the cases this map describes; Unsupported otherwise."""
    a = case.arch
    if isinstance(a, ResNetArch):
        return lambda m: _resnet_module(a, m)
    if isinstance(a, BertConfig):
        return _bert_module
    if isinstance(a, (VggArch, AlexNetArch)):
        return _plain_mapper(case)
    if isinstance(a, WideDeepArch):  # the MLP's Linears are Dense_0, Dense_1 ... (mlp.0, mlp.3 ...)
        denses = {m: k for k, m in enumerate(modules(case, "mlp.", "linear"))}
        return lambda m: (f"Dense_{denses[m]}",)
    raise Unsupported(f"the JAX weight map does not describe {case.name} yet (backends/jax/same_model.py)")


def flax_path(case: Case, t: Tensor) -> tuple[str, Path]:
    """(collection, path) of a canonical tensor in the flax variables."""
    if t.name in _PARAMS:
        return "params", (_PARAMS[t.name],)
    module = t.name.rsplit(".", 1)[0]
    collection, leaf = _LEAF[t.role]
    return collection, (*module_mapper(case)(module), leaf)


def _get(tree: Any, path: Path) -> Any:
    for key in path:
        tree = tree[key]
    return tree


def _put(tree: dict[str, Any], path: Path, value: Any) -> None:
    for key in path[:-1]:
        tree = tree.setdefault(key, {})
    tree[path[-1]] = value


def _is_float64(trainer: Trainer) -> bool:
    return bool(getattr(trainer, "float64", False))


class JaxWeights(WeightMap):
    """The flax train state's params and batch_stats."""

    def load(self, trainer: Trainer, case: Case, weights: Mapping[str, np.ndarray]) -> None:
        import jax
        import jax.numpy as jnp

        state = trainer.state  # type: ignore[attr-defined]
        trees: dict[str, dict[str, Any]] = {"params": {}, "batch_stats": {}}
        for t in tensors(case):
            collection, path = flax_path(case, t)
            old = _get(state.params if collection == "params" else state.batch_stats, path)
            new = to_channels_last(case, t, weights[t.name])
            if tuple(old.shape) != new.shape:
                raise ValueError(f"{t.name} -> {'/'.join(path)}: flax has {tuple(old.shape)}, canonical {new.shape}")
            _put(trees[collection], path, jnp.asarray(new, jnp.float64 if _is_float64(trainer) else old.dtype))
        same = jax.tree_util.tree_structure
        if same(trees["params"]) != same(state.params):
            raise ValueError("the canonical tensors do not cover every flax parameter")
        trainer.state = state.replace(  # type: ignore[attr-defined]
            params=trees["params"], batch_stats=trees["batch_stats"] or state.batch_stats
        )

    def float64_trainer(self, backend: Backend, spec: PointSpec, case: Case) -> Trainer:
        """The backend's flax module and jitted step with float64 compute (x64 on: this process only)."""
        import jax
        import jax.numpy as jnp

        from dlbench.backends.jax import backend as jax_backend
        from dlbench.backends.jax import distributed

        jax.config.update("jax_enable_x64", True)
        jax_backend.apply_numerics(resolve_precision("fp32", "cpu"))
        device = jax.local_devices(backend="cpu")[0]
        trainer = jax_backend.make_trainer(spec, case, jnp.float64, device, distributed.placement(spec, device), 0)
        trainer.float64 = True  # type: ignore[attr-defined]
        return trainer

    def read(self, trainer: Trainer, case: Case) -> Arrays:
        state = trainer.state  # type: ignore[attr-defined]
        out: Arrays = {}
        for t in tensors(case):
            collection, path = flax_path(case, t)
            value = np.asarray(_get(state.params if collection == "params" else state.batch_stats, path))
            out[t.name] = from_channels_last(case, t, value)
        return out

    def forward(self, trainer: Trainer, case: Case, batch: Mapping[str, np.ndarray], train: bool) -> Arrays:
        import jax

        from dlbench.backends.jax.models import model_inputs

        state = trainer.state  # type: ignore[attr-defined]
        variables = {"params": state.params, **({"batch_stats": state.batch_stats} if state.batch_stats else {})}
        inputs = model_inputs(case, self.feed(trainer, case, batch))
        if train:
            out, _ = state.apply_fn(
                variables, *inputs, train=True, mutable=["batch_stats"], rngs={"dropout": jax.random.PRNGKey(0)}
            )
        else:
            out = state.apply_fn(variables, *inputs, train=False)
        parts = out if isinstance(out, tuple) else (out,)
        return named_outputs(case, tuple(np.asarray(p) for p in parts))

    def feed(self, trainer: Trainer, case: Case, batch: Mapping[str, np.ndarray]) -> dict[str, Any]:
        import jax.numpy as jnp

        fed = as_model_input(batch, np.float64 if _is_float64(trainer) else np.float32)
        out = {k: v.astype(np.int32) if v.dtype == np.int64 else v for k, v in fed.items()}
        if "images" in out:
            out["images"] = nchw_to_nhwc(out["images"])
        return {k: jnp.asarray(v) for k, v in out.items()}


WEIGHTS = JaxWeights()
