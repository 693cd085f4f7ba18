"""What dlbench's MindSpore backend runs, framework-free (dlbench.capabilities): read by the controller."""

from __future__ import annotations

from dlbench.capabilities import Capabilities

CAPABILITIES = Capabilities(
    framework="mindspore",
    multi_device=(),
    multi_device_why="dlbench's MindSpore backend trains on one device only (no multi-device data parallelism "
    "wired yet): use --scale 1n1c",
    precisions=(("cpu", ("fp32",)), ("cuda", ("fp32", "tf32"))),
    # Checked on MindSpore 2.10's CPU target: a bf16 MatMul or Conv2D fails kernel selection.
    precision_why="dlbench's MindSpore backend runs fp32 on the CPU (MindSpore's CPU kernels have no bf16: MatMul and "
    "Conv2D fail kernel selection) and fp32 or tf32 on GPUs (its amp and bf16 are not wired)",
    channels_last=False,
    channels_last_why="MindSpore's convolutions take NCHW only; channels-last is not offered",
)
