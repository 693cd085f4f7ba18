"""What dlbench's Jittor backend runs, framework-free (dlbench.capabilities): read by the controller."""

from __future__ import annotations

from dlbench.capabilities import Capabilities

CAPABILITIES = Capabilities(
    framework="jittor",
    multi_device=(),
    multi_device_why="dlbench's Jittor backend trains on one device only (no multi-device data parallelism wired "
    "yet): use --scale 1n1c",
    precisions=(("cpu", ("fp32",)), ("cuda", ("fp32",))),
    precision_why="dlbench's Jittor backend trains in fp32 only (Jittor's float16 AMP is not wired)",
    channels_last=False,
    channels_last_why="Jittor's convolutions take NCHW only; channels-last is not offered",
    compile=False,
    compile_why="Jittor always JIT-compiles fused kernels and has no separate compile switch; drop --compile",
)
