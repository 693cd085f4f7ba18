"""What dlbench's MegEngine backend runs, framework-free (dlbench.capabilities): read by the controller."""

from __future__ import annotations

from dlbench.capabilities import Capabilities

CAPABILITIES = Capabilities(
    framework="megengine",
    multi_device=(),
    multi_device_why="dlbench's MegEngine backend trains on one device only (MegEngine has no CPU collective "
    "backend, and its NCCL data parallelism is not wired): use --scale 1n1c",
    precisions=(("cpu", ("fp32",)), ("cuda", ("fp32",))),
    precision_why="dlbench's MegEngine backend runs fp32 only (MegEngine's autocast is not wired)",
    channels_last=False,
    channels_last_why="dlbench's MegEngine backend trains NCHW only; channels-last is not offered",
)
