"""A bare JAX loop in the style of Flax's ImageNet example (examples/imagenet: models.py ResNet50, train.py
train_step): a linen ResNet-50 v1.5, SGD with Nesterov-free momentum 0.9 through optax, the train state donated
to a jitted step; no dlbench import."""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

sys.path.insert(0, str(Path(__file__).parent))
from common import measure, parse_args  # noqa: E402


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
        norm = functools.partial(nn.BatchNorm, use_running_average=not train, momentum=0.9, epsilon=1e-5,
                                 dtype=self.dtype)
        x = nn.relu(norm(name="bn_init")(conv(64, (7, 7), (2, 2), padding=[(3, 3), (3, 3)], name="conv_init")(x)))
        x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
        for i, blocks in enumerate((3, 4, 6, 3)):
            for j in range(blocks):
                x = Block(64 * 2 ** i, (2, 2) if i > 0 and j == 0 else (1, 1), conv, norm)(x)
        return nn.Dense(1000, dtype=self.dtype)(jnp.mean(x, axis=(1, 2)))


def main() -> None:
    """Train the example-style ResNet-50 with a donated, jitted train step."""
    args = parse_args(__doc__)
    precision = {"fp32": "highest", "tf32": "tensorfloat32"}.get(args.precision, "default")
    jax.config.update("jax_default_matmul_precision", precision)
    model = ResNet50(dtype=jnp.bfloat16 if args.precision == "bf16" else jnp.float32)
    key = jax.random.PRNGKey(0)
    images = jax.random.normal(key, (args.batch_size, args.input_size, args.input_size, 3))
    labels = jax.random.randint(key, (args.batch_size,), 0, 1000)
    variables = model.init(key, images, train=False)
    tx = optax.sgd(0.1, momentum=0.9)
    state = (variables["params"], variables["batch_stats"], tx.init(variables["params"]))

    @functools.partial(jax.jit, donate_argnums=0)
    def train_step(state: Any, images: jax.Array, labels: jax.Array) -> Any:
        params, stats, opt_state = state

        def loss_fn(p: Any) -> Any:
            logits, new = model.apply({"params": p, "batch_stats": stats}, images, mutable=["batch_stats"])
            loss = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), labels).mean()
            return loss, new["batch_stats"]

        (_, new_stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), new_stats, opt_state

    holder = {"state": state}

    def step() -> None:
        holder["state"] = train_step(holder["state"], images, labels)

    measure(step, lambda: jax.block_until_ready(holder["state"]), args, "Flax ImageNet example-style ResNet-50")


if __name__ == "__main__":
    main()
