"""What dlbench's PaddlePaddle backend runs, framework-free (dlbench.capabilities): read by the controller."""

from __future__ import annotations

from dlbench.capabilities import Capabilities, StrategyCap

CAPABILITIES = Capabilities(
    framework="paddle",
    default_strategy="fleet",
    strategies=(StrategyCap("fleet"),),
    refused_strategies=(
        (
            "ps-cpu",
            "ps-cpu is fleet's parameter-server mode, which dlbench does not drive (PyPI's "
            "wheels are built without its core, WITH_PSCORE): use --strategy fleet",
        ),
    ),
    strategy_advice="use --strategy fleet (fleet.distributed_model: DataParallel all-reduces the gradients)",
    channels_last_archs=("ResNetArch",),  # backends/paddle/models.to_nhwc
    channels_last_why="paddle builds this model NCHW only (NHWC needs a global pool before the head and no channel "
    "concatenation: the ResNets); drop --channels-last",
)
