"""A bare JAX loop in the style of Flax's ImageNet example (examples/imagenet: models.py ResNet50, train.py
train_step): a linen ResNet-50 v1.5 (flax's default BatchNorm, fast variance), SGD with Nesterov-free momentum
0.9 through optax, the train state donated to a jitted step, amp as float16 with flax's DynamicScale; no dlbench
import. JAX always compiles, so --compile changes nothing."""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax.training.dynamic_scale import DynamicScale

sys.path.insert(0, str(Path(__file__).parent))
from common import measure, parse_args


class Block(nn.Module):
    """The Flax example's BottleneckResNetBlock."""

    filters: int
    strides: tuple[int, int]
    conv: Any
    norm: Any

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        residual = x
        y = nn.relu(self.norm()(self.conv(self.filters, (1, 1))(x)))
        y = nn.relu(self.norm()(self.conv(self.filters, (3, 3), self.strides)(y)))
        y = self.norm(scale_init=nn.initializers.zeros_init())(self.conv(self.filters * 4, (1, 1))(y))
        if residual.shape != y.shape:
            residual = self.norm()(self.conv(self.filters * 4, (1, 1), self.strides, name="conv_proj")(residual))
        return nn.relu(residual + y)


class ResNet50(nn.Module):
    """The Flax example's ResNet with stage sizes 3, 4, 6, 3."""

    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = True) -> jax.Array:
        conv = functools.partial(nn.Conv, use_bias=False, dtype=self.dtype)
        norm = functools.partial(
            nn.BatchNorm, use_running_average=not train, momentum=0.9, epsilon=1e-5, dtype=self.dtype
        )
        x = nn.relu(norm(name="bn_init")(conv(64, (7, 7), (2, 2), padding=[(3, 3), (3, 3)], name="conv_init")(x)))
        x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
        for i, blocks in enumerate((3, 4, 6, 3)):
            for j in range(blocks):
                x = Block(64 * 2**i, (2, 2) if i > 0 and j == 0 else (1, 1), conv, norm)(x)
        return nn.Dense(1000, dtype=self.dtype)(jnp.mean(x, axis=(1, 2)))


def matmul_precision(precision: str) -> str:
    """jax_default_matmul_precision for a precision, as dlbench sets it: TF32 only for tf32, else full fp32."""
    return "tensorfloat32" if precision == "tf32" else "highest"


def main() -> None:
    """Train the example-style ResNet-50 with a donated, jitted train step (amp: float16 with flax's DynamicScale,
    an overflowed step keeping the old state, as the Flax ImageNet example does)."""
    args = parse_args(__doc__)
    jax.config.update("jax_default_matmul_precision", matmul_precision(args.precision))
    dtype = {"amp": jnp.float16, "bf16": jnp.bfloat16}.get(args.precision, jnp.float32)
    model = ResNet50(dtype=dtype)
    key = jax.random.PRNGKey(0)
    images = jax.random.normal(key, (args.batch_size, args.input_size, args.input_size, 3))
    labels = jax.random.randint(key, (args.batch_size,), 0, 1000)
    variables = model.init(key, images, train=False)
    tx = optax.sgd(0.1, momentum=0.9)
    scale = DynamicScale() if args.precision == "amp" else None
    state = (variables["params"], variables["batch_stats"], tx.init(variables["params"]), scale)

    @functools.partial(jax.jit, donate_argnums=0)
    def train_step(state: Any, images: jax.Array, labels: jax.Array) -> Any:
        params, stats, opt_state, scale = state

        def loss_fn(p: Any) -> Any:
            logits, new = model.apply({"params": p, "batch_stats": stats}, images, mutable=["batch_stats"])
            loss = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), labels).mean()
            return loss, new["batch_stats"]

        if scale is None:
            (_, new_stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        else:
            scale, finite, (_, new_stats), grads = scale.value_and_grad(loss_fn, has_aux=True)(params)
        updates, new_opt = tx.update(grads, opt_state, params)
        new_params = optax.apply_updates(params, updates)
        if scale is not None:  # keep the old state where the gradients overflowed
            keep = functools.partial(jax.tree_util.tree_map, functools.partial(jnp.where, finite))
            new_params, new_opt, new_stats = keep(new_params, params), keep(new_opt, opt_state), keep(new_stats, stats)
        return new_params, new_stats, new_opt, scale

    holder = {"state": state}

    def step() -> None:
        holder["state"] = train_step(holder["state"], images, labels)

    measure(step, lambda: jax.block_until_ready(holder["state"]), args, "Flax ImageNet example-style ResNet-50")


if __name__ == "__main__":
    main()
