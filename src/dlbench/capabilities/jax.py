"""What dlbench's JAX backend runs, framework-free (dlbench.capabilities): read by the controller."""

from __future__ import annotations

from dlbench.capabilities import Capabilities, StrategyCap

CAPABILITIES = Capabilities(
    framework="jax",
    default_strategy="sharding",
    strategies=(StrategyCap("sharding"),),
    strategy_advice="use --strategy sharding (XLA all-reduces the gradients of a batch sharded over the processes)",
    tensor_parallel=True,
    recompute=True,
    even_vocab_shards=True,
    layout_why="JAX has no pipeline-parallel schedule in its public API: dlbench's JAX backend splits GPT by tensor "
    "(--tensor-parallel) only; use --pipeline-parallel 1",
    channels_last=False,
    channels_last_why="JAX/XLA chooses layouts itself: --channels-last has no JAX equivalent",
    lora=True,
)
