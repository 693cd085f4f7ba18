"""What dlbench's keras framework runs on each Keras backend (keras_jax, keras_tf, keras_torch), framework-free
(dlbench.capabilities): read by the controller."""

from __future__ import annotations

from dlbench.capabilities import Capabilities


def _table(name: str) -> Capabilities:
    return Capabilities(
        framework=name,
        multi_device=(),
        multi_device_why=f"{name} trains on one device (Keras' distribution API is not wired): drop --scale",
        precisions=(("cpu", ("fp32",)), ("cuda", ("fp32",))),
        precision_why=f"{name} trains in fp32 only (Keras' mixed-precision policies are not wired for it yet)",
        channels_last_why="",
    )


JAX, TF, TORCH = _table("keras_jax"), _table("keras_tf"), _table("keras_torch")

__all__ = ["JAX", "TF", "TORCH"]
