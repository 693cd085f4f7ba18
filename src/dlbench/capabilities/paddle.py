"""What dlbench's PaddlePaddle backend runs, framework-free (dlbench.capabilities): read by the controller."""

from __future__ import annotations

from dlbench.capabilities import Capabilities, StrategyCap

CAPABILITIES = Capabilities(
    framework="paddle",
    default_strategy="fleet",
    strategies=(
        StrategyCap("fleet"),
        StrategyCap(
            "sharding",
            sparse_why="fleet's sharding cannot reduce Wide & Deep's sparse (SelectedRows) embedding gradients "
            "(Paddle: 'bump_inplace_version is only supported on DenseTensor'): use --param sparse=0 or "
            "--strategy fleet",
        ),
    ),
    refused_strategies=(
        (
            "ps-cpu",
            "ps-cpu is fleet's parameter-server mode, which dlbench does not drive (PyPI's "
            "wheels are built without its core, WITH_PSCORE): use --strategy fleet",
        ),
    ),
    strategy_advice="use --strategy fleet (fleet.distributed_model: DataParallel all-reduces the gradients) or "
    "sharding (fleet's DygraphShardingOptimizer: the optimizer state sharded over the ranks)",
    layout_why="dlbench's paddle backend splits no model: fleet's tensor and pipeline parallel call "
    "*_on_calc_stream collectives that ProcessGroupGLOO lacks on the CPU, and are not wired on GPUs; use "
    "--tensor-parallel 1 --pipeline-parallel 1",
    channels_last_archs=("ResNetArch",),  # backends/paddle/models.to_nhwc
    channels_last_why="paddle builds this model NCHW only (NHWC needs a global pool before the head and no channel "
    "concatenation: the ResNets); drop --channels-last",
)
