"""What dlbench's MindSpore backend runs, framework-free (dlbench.capabilities): read by the controller."""

from __future__ import annotations

from dlbench.capabilities import Capabilities

CAPABILITIES = Capabilities(
    framework="mindspore",
    multi_device=(),
    # MindSpore's CPU data parallel runs over its own collective library (mccl), its processes started by msrun
    # with a scheduler process (MS_ROLE=MS_SCHED) that dlbench's launchers do not start.
    multi_device_why="dlbench's MindSpore backend trains on one device only (MindSpore's CPU data parallel needs "
    "msrun's scheduler process and its mccl collectives, which dlbench's launchers do not start): use --scale 1n1c",
    precisions=(("cpu", ("fp32",)), ("cuda", ("fp32", "tf32"))),
    # Checked on MindSpore 2.10's CPU target: a bf16 MatMul or Conv2D fails kernel selection.
    precision_why="dlbench's MindSpore backend runs fp32 on the CPU (MindSpore's CPU kernels have no bf16: MatMul and "
    "Conv2D fail kernel selection) and fp32 or tf32 on GPUs (its amp and bf16 are not wired)",
    channels_last=False,
    channels_last_why="MindSpore's convolutions take NCHW only; channels-last is not offered",
    no_compile_archs=(
        (
            "MoeConfig",
            "--compile: an ms.jit graph needs static shapes, and dlbench's MindSpore MoE sizes each expert's slice "
            "on the host every step (dropless dispatch): drop --compile (PyNative)",
        ),
    ),
)
